/*
 * test_differential.c - k8slease-testserver against a real kube-apiserver.
 *
 * One script of requests (tests/data/differential/script.json) is sent to
 * the test server and to a reference; status codes, Status reasons and
 * messages, Content-Type and bodies must agree: every key, every value type,
 * and every value except the volatile ones (uids, resourceVersions,
 * timestamps, managedFields times, generated names, continue tokens).
 *
 *   test_differential                  mirror vs the committed capture
 *                                      (tests/data/differential/capture-v1.36.3.json)
 *   K8SLEASE_TEST_KUBECONFIG=... test_differential
 *                                      mirror vs that server, live (envtest.sh)
 *   K8SLEASE_TEST_KUBECONFIG=... test_differential --record FILE
 *                                      run the script on that server, write a capture
 *
 * Options: --script FILE, --capture FILE, --verbose (print every response),
 * --restart: let the script restart the reference through envtest.sh's ctl
 * script (K8SLEASE_ENVTEST_CTL) where it needs a fresh watch cache (a watch
 * at a too old resourceVersion); also K8SLEASE_DIFF_RESTART=1. Off by
 * default live, because suites running in parallel against the same server
 * would see it go away; always on with --record. Steps that need it are
 * skipped (and counted) without it.
 * A mismatch names the request, the JSON path and both values. Exit status
 * 0 when everything agrees, 1 otherwise, 2 on a usage or setup error.
 *
 * Script steps (see the script's own "doc"): method, path, body (JSON) or
 * raw (text), content_type, user_agent, auth ("wrong"), save {var: path},
 * watch {events, until, timeout_ms}, volatile [paths], ignore [paths] (with
 * a "why": what the mirror does not model, never compared), tail [paths]
 * (strings compared from their last '": ' on), message_digits,
 * expect (status), needs ("restart"), action ("restart_reference"), and
 * differs {"v1.24": {"ignore": [paths], "expect": {path: value}, "status": N,
 * "why": "..."}}. "{ns}" and "{var}"
 * are substituted in paths and bodies; the namespace name is random on a
 * real server (a deleted namespace stays Terminating in envtest) and is
 * written back as "{ns}" in everything compared or recorded.
 */
#include "harness.h"

#include <curl/curl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#ifndef DIFF_DATA_DIR
#define DIFF_DATA_DIR "tests/data/differential"
#endif

typedef struct target {
    const char *label; /* "mirror" or "reference" */
    char *url, *ca_file, *token;
    CURL *curl;
    json_t *vars;    /* saved values: name -> string */
    const char *ctl; /* envtest ctl script (reference only), or NULL */
    bool restarted;  /* the reference was restarted (watch caches start anew) */
} target;

typedef struct response {
    long status;
    char content_type[128];
    json_t *body;   /* parsed JSON, or NULL */
    json_t *events; /* watch: array of events */
    char *raw;      /* the body as text when it is not JSON */
    bool skipped;
} response;

static bool verbose;
static char ns_actual[64];
static int mismatches;

/* ---- small helpers ------------------------------------------------------ */

static char *xstrdup(const char *s)
{
    char *d = strdup(s ? s : "");
    if (!d) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return d;
}

typedef struct buf {
    char *data;
    size_t len;
} buf;

static void buf_add(buf *b, const char *p, size_t n)
{
    char *d = realloc(b->data, b->len + n + 1);
    if (!d) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    memcpy(d + b->len, p, n);
    b->len += n;
    d[b->len] = '\0';
    b->data = d;
}

/* Replaces every occurrence of from in s by to; returns a new string. */
static char *replace_all(const char *s, const char *from, const char *to)
{
    buf b = {0};
    size_t fl = strlen(from);
    buf_add(&b, "", 0);
    if (!fl)
        return xstrdup(s);
    for (const char *p = s;;) {
        const char *q = strstr(p, from);
        if (!q) {
            buf_add(&b, p, strlen(p));
            break;
        }
        buf_add(&b, p, (size_t)(q - p));
        buf_add(&b, to, strlen(to));
        p = q + fl;
    }
    return b.data;
}

/* "{ns}" and "{var}" substitutions in a request string. */
static char *substitute(const char *s, const target *t)
{
    char *out = replace_all(s, "{ns}", ns_actual);
    const char *k;
    json_t *v;
    json_object_foreach(t->vars, k, v)
    {
        char pat[160];
        snprintf(pat, sizeof(pat), "{%s}", k);
        char *n = replace_all(out, pat, json_string_value(v));
        free(out);
        out = n;
    }
    return out;
}

/* Writes the actual namespace back as "{ns}" in every string of j. */
static json_t *normalise(json_t *j)
{
    if (json_is_string(j)) {
        char *s = replace_all(json_string_value(j), ns_actual, "{ns}");
        json_t *n = json_string(s);
        free(s);
        return n;
    }
    if (json_is_object(j)) {
        json_t *o = json_object();
        const char *k;
        json_t *v;
        json_object_foreach(j, k, v)
        {
            char *nk = replace_all(k, ns_actual, "{ns}");
            json_object_set_new(o, nk, normalise(v));
            free(nk);
        }
        return o;
    }
    if (json_is_array(j)) {
        json_t *a = json_array();
        size_t i;
        json_t *v;
        json_array_foreach(j, i, v) json_array_append_new(a, normalise(v));
        return a;
    }
    return json_incref(j);
}

/* A dotted path with [N] indexes ("metadata.managedFields[0].time"). */
static json_t *get_path(json_t *j, const char *path)
{
    char *p = xstrdup(path);
    char *save = NULL;
    for (char *el = strtok_r(p, ".", &save); el && j; el = strtok_r(NULL, ".", &save)) {
        char *br = strchr(el, '[');
        if (br)
            *br = '\0';
        if (*el)
            j = json_object_get(j, el);
        while (br && j) {
            j = json_array_get(j, strtoul(br + 1, NULL, 10));
            br = strchr(br + 1, '[');
        }
    }
    free(p);
    return j;
}

/* ---- HTTP --------------------------------------------------------------- */

typedef struct exchange {
    buf body;
    char content_type[128];
    bool watch;
    long want_events;  /* stop after this many events (0: until the end) */
    const char *until; /* or at the first event of this type */
    size_t scanned;
    long events;
    bool done;
} exchange;

static size_t on_header(char *p, size_t size, size_t n, void *ud)
{
    exchange *x = ud;
    size_t len = size * n;
    if (len > 13 && !strncasecmp(p, "content-type:", 13)) {
        const char *v = p + 13;
        while (*v == ' ')
            v++;
        size_t vl = len - (size_t)(v - p);
        while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n'))
            vl--;
        snprintf(x->content_type, sizeof(x->content_type), "%.*s", (int)vl, v);
    }
    return len;
}

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
    exchange *x = ud;
    size_t len = size * n;
    buf_add(&x->body, p, len);
    if (!x->watch)
        return len;
    /* Count complete lines; stop reading once the step has what it wants. */
    for (char *nl; (nl = memchr(x->body.data + x->scanned, '\n', x->body.len - x->scanned));) {
        size_t start = x->scanned;
        x->scanned = (size_t)(nl - x->body.data) + 1;
        x->events++;
        if (x->until) {
            char pat[64];
            snprintf(pat, sizeof(pat), "\"type\":\"%s\"", x->until);
            char save = *nl;
            *nl = '\0';
            bool hit = strstr(x->body.data + start, pat) != NULL;
            *nl = save;
            if (hit)
                x->done = true;
        }
        if (x->want_events && x->events >= x->want_events)
            x->done = true;
        if (x->done) {
            x->body.len = x->scanned; /* drop anything after the last wanted line */
            x->body.data[x->body.len] = '\0';
            return 0; /* abort the transfer: CURLE_WRITE_ERROR */
        }
    }
    return len;
}

static int run_request(target *t, const json_t *step, response *out)
{
    const char *method = json_string_value(json_object_get(step, "method"));
    const char *path = json_string_value(json_object_get(step, "path"));
    const char *ua = json_string_value(json_object_get(step, "user_agent"));
    const char *ct = json_string_value(json_object_get(step, "content_type"));
    const char *auth = json_string_value(json_object_get(step, "auth"));
    json_t *body = json_object_get(step, "body");
    json_t *raw = json_object_get(step, "raw");
    json_t *watch = json_object_get(step, "watch");
    exchange x = {0};
    char *url_path = substitute(path, t), *payload = NULL;
    struct curl_slist *hdrs = NULL;
    char h[512];
    int rc = 0;

    if (body) {
        char *s = json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY);
        payload = substitute(s, t);
        free(s);
    } else if (json_is_string(raw)) {
        payload = substitute(json_string_value(raw), t);
    }
    snprintf(h, sizeof(h), "Authorization: Bearer %s",
             auth && !strcmp(auth, "wrong") ? "0123456789abcdef-not-the-token" : t->token);
    hdrs = curl_slist_append(hdrs, h);
    hdrs = curl_slist_append(hdrs, "Accept: application/json");
    if (payload) {
        snprintf(h, sizeof(h), "Content-Type: %s", ct ? ct : "application/json");
        hdrs = curl_slist_append(hdrs, h);
    }
    char *url = malloc(strlen(t->url) + strlen(url_path) + 1);
    sprintf(url, "%s%s", t->url, url_path);

    CURL *c = t->curl;
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CAINFO, t->ca_file);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(c, CURLOPT_USERAGENT, ua ? ua : "k8slease-difftest/1.0 (linux)");
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (payload) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, payload);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(payload));
    } else if (!strcmp(method, "GET")) {
        curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
    }
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &x);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &x);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    long timeout_ms = 15000;
    if (watch) {
        x.watch = true;
        x.want_events = (long)json_integer_value(json_object_get(watch, "events"));
        x.until = json_string_value(json_object_get(watch, "until"));
        if (json_integer_value(json_object_get(watch, "timeout_ms")) > 0)
            timeout_ms = (long)json_integer_value(json_object_get(watch, "timeout_ms"));
    }
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    CURLcode cc = curl_easy_perform(c);
    if (cc != CURLE_OK && !(cc == CURLE_WRITE_ERROR && x.done)) {
        if (cc == CURLE_OPERATION_TIMEDOUT && watch)
            fprintf(stderr, "%s: %s: watch got %ld event(s) in %ld ms, wanted %s%s\n", t->label,
                    json_string_value(json_object_get(step, "name")), x.events, timeout_ms,
                    x.until ? "one of type " : "more", x.until ? x.until : "");
        else
            fprintf(stderr, "%s: %s: %s %s: %s\n", t->label,
                    json_string_value(json_object_get(step, "name")), method, url,
                    curl_easy_strerror(cc));
        rc = -1;
    }
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out->status);
    snprintf(out->content_type, sizeof(out->content_type), "%s", x.content_type);
    if (watch) {
        out->events = json_array();
        char *save = NULL;
        for (char *line = x.body.data ? strtok_r(x.body.data, "\n", &save) : NULL; line;
             line = strtok_r(NULL, "\n", &save)) {
            json_t *ev = json_loads(line, 0, NULL);
            json_array_append_new(out->events, ev ? ev : json_string(line));
        }
    } else if (x.body.data) {
        json_t *j = json_loads(x.body.data, JSON_DECODE_ANY, NULL);
        if (j)
            out->body = j;
        else
            out->raw = xstrdup(x.body.data);
    }
    if (verbose)
        fprintf(stderr, "%s: %s -> %ld %s\n%s\n", t->label, url_path, out->status,
                out->content_type, x.body.data ? x.body.data : "");
    /* Saved values, before the namespace is written back as "{ns}". */
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(step, "save"), k, v)
    {
        json_t *got = out->body ? get_path(out->body, json_string_value(v)) : NULL;
        if (json_is_string(got))
            json_object_set(t->vars, k, got);
        else
            fprintf(stderr, "%s: %s: nothing to save at %s\n", t->label,
                    json_string_value(json_object_get(step, "name")), json_string_value(v));
    }
    json_t *n;
    if (out->body) {
        n = normalise(out->body);
        json_decref(out->body);
        out->body = n;
    }
    if (out->events) {
        n = normalise(out->events);
        json_decref(out->events);
        out->events = n;
    }
    curl_slist_free_all(hdrs);
    free(x.body.data);
    free(url);
    free(url_path);
    free(payload);
    return rc;
}

/* ---- comparison ----------------------------------------------------------- */

static const char *type_name(const json_t *j)
{
    switch (json_typeof(j)) {
    case JSON_OBJECT:
        return "object";
    case JSON_ARRAY:
        return "array";
    case JSON_STRING:
        return "string";
    case JSON_INTEGER:
        return "integer";
    case JSON_REAL:
        return "real";
    case JSON_TRUE:
    case JSON_FALSE:
        return "bool";
    case JSON_NULL:
        return "null";
    }
    return "?";
}

/* Keys whose values differ from run to run: only their type is compared. */
static bool volatile_key(const char *key)
{
    static const char *const keys[] = {
        "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "time", "continue",
        NULL};
    for (size_t i = 0; keys[i]; i++)
        if (!strcmp(key, keys[i]))
            return true;
    return false;
}

/* path with every [N] written [*], for matching the step's volatile list. */
static bool path_listed(const char *path, const json_t *list)
{
    char generic[1024];
    size_t o = 0;
    for (const char *p = path; *p && o + 4 < sizeof(generic); p++) {
        if (*p == '[') {
            memcpy(generic + o, "[*]", 3);
            o += 3;
            while (*p && *p != ']')
                p++;
        } else {
            generic[o++] = *p;
        }
    }
    generic[o] = '\0';
    size_t i;
    json_t *v;
    json_array_foreach(list, i, v)
    {
        const char *s = json_string_value(v);
        if (s && (!strcmp(s, path) || !strcmp(s, generic)))
            return true;
    }
    return false;
}

static bool is_uuid(const char *p)
{
    for (int i = 0; i < 36; i++) {
        bool hex = (p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f');
        if ((i == 8 || i == 13 || i == 18 || i == 23) ? p[i] != '-' : !hex)
            return false;
    }
    return true;
}

/* UUIDs and digits out of a message, for steps marked message_digits. */
static char *squash_digits(const char *s)
{
    buf b = {0};
    buf_add(&b, "", 0);
    for (const char *p = s; *p;) {
        if (strlen(p) >= 36 && is_uuid(p)) {
            buf_add(&b, "<uuid>", 6);
            p += 36;
        } else if (*p >= '0' && *p <= '9') {
            while (*p >= '0' && *p <= '9')
                p++;
            buf_add(&b, "N", 1);
        } else {
            buf_add(&b, p++, 1);
        }
    }
    return b.data;
}

typedef struct cmpctx {
    const char *step;
    const json_t *ignore; /* paths not compared at all */
    const json_t *vol;    /* paths compared by type only */
    const json_t *tail;   /* strings compared from their last '": ' (after a quoted value) */
    const json_t *expect; /* path -> the reference's documented value (this version) */
    const json_t *known;  /* paths of known mirror differences: reported, not counted */
    json_t *known_seen;   /* which of them were seen */
    const char *version;
    bool digits;
} cmpctx;

static bool path_listed(const char *path, const json_t *list);

static void report(const cmpctx *c, const char *path, const char *what, const json_t *mine,
                   const json_t *ref)
{
    char *a = mine ? json_dumps(mine, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    char *b = ref ? json_dumps(ref, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    bool known = path_listed(path, c->known);
    printf("%s [%s] %s: %s\n    mirror:    %s\n    reference: %s\n",
           known ? "KNOWN (script's \"known\" list)" : "MISMATCH", c->step, *path ? path : "(body)",
           what, a ? a : "(absent)", b ? b : "(absent)");
    free(a);
    free(b);
    if (known)
        json_object_set_new(c->known_seen, path, json_true());
    else
        mismatches++;
}

static void compare(const cmpctx *c, const char *path, const char *key, const json_t *mine,
                    const json_t *ref)
{
    if (path_listed(path, c->ignore))
        return;
    json_t *documented = json_object_get(c->expect, path);
    if (documented) {
        /* Where this version differs, the reference must differ as documented. */
        if (!json_equal(documented, ref)) {
            char what[128];
            snprintf(what, sizeof(what), "the reference is not what the script documents for %s",
                     c->version);
            report(c, path, what, documented, ref);
        }
        return;
    }
    if (strcmp(type_name(mine), type_name(ref))) {
        report(c, path, "types differ", mine, ref);
        return;
    }
    if (json_is_object(ref)) {
        const char *k;
        json_t *v;
        char sub[1024];
        json_object_foreach((json_t *)ref, k, v)
        {
            snprintf(sub, sizeof(sub), "%s%s%s", path, *path ? "." : "", k);
            if (path_listed(sub, c->ignore))
                continue;
            if (!json_object_get(mine, k))
                report(c, sub, "missing in the mirror", NULL, v);
            else
                compare(c, sub, k, json_object_get(mine, k), v);
        }
        json_object_foreach((json_t *)mine, k, v)
        {
            snprintf(sub, sizeof(sub), "%s%s%s", path, *path ? "." : "", k);
            if (!json_object_get(ref, k) && !path_listed(sub, c->ignore))
                report(c, sub, "only in the mirror", v, NULL);
        }
        return;
    }
    if (json_is_array(ref)) {
        if (json_array_size(mine) != json_array_size(ref)) {
            char what[64];
            snprintf(what, sizeof(what), "array lengths differ (%zu vs %zu)", json_array_size(mine),
                     json_array_size(ref));
            report(c, path, what, mine, ref);
            return;
        }
        char sub[1024];
        for (size_t i = 0; i < json_array_size(ref); i++) {
            snprintf(sub, sizeof(sub), "%s[%zu]", path, i);
            compare(c, sub, key, json_array_get(mine, i), json_array_get(ref, i));
        }
        return;
    }
    if ((key && volatile_key(key)) || path_listed(path, c->vol))
        return;
    if (json_is_string(ref) && path_listed(path, c->tail)) {
        /* A message that quotes a whole object: only what follows the quote is compared. */
        const char *a = json_string_value(mine), *b = json_string_value(ref), *q;
        for (q = a; (q = strstr(q, "\": ")); q++)
            a = q;
        for (q = b; (q = strstr(q, "\": ")); q++)
            b = q;
        if (strcmp(a, b))
            report(c, path, "messages differ after the quoted value", mine, ref);
        return;
    }
    if (c->digits && json_is_string(ref) && key && !strcmp(key, "message")) {
        char *a = squash_digits(json_string_value(mine)),
             *b = squash_digits(json_string_value(ref));
        if (strcmp(a, b))
            report(c, path, "messages differ (digits ignored)", mine, ref);
        free(a);
        free(b);
        return;
    }
    if (!json_equal(mine, ref))
        report(c, path, "values differ", mine, ref);
}

static json_t *response_json(const response *r)
{
    if (r->skipped)
        return json_pack("{s:b}", "skipped", 1);
    json_t *j =
        json_pack("{s:i, s:s}", "status", (json_int_t)r->status, "content_type", r->content_type);
    if (r->body)
        json_object_set(j, "body", r->body);
    if (r->events)
        json_object_set(j, "events", r->events);
    if (r->raw)
        json_object_set_new(j, "raw", json_string(r->raw));
    return j;
}

/*
 * Compares the mirror's response with the reference's (both as
 * response_json). known: the script's list of known mirror differences.
 */
static void compare_step(const json_t *step, const json_t *mine, const json_t *ref,
                         const char *ref_version, const json_t *known, json_t *known_seen)
{
    cmpctx c = {0};
    c.step = json_string_value(json_object_get(step, "name"));
    c.vol = json_object_get(step, "volatile");
    c.tail = json_object_get(step, "tail");
    c.digits = json_is_true(json_object_get(step, "message_digits"));
    c.version = ref_version;
    json_t *ignore = json_array(), *expect = json_object(), *kpaths = json_array();
    const char *k;
    json_t *v;
    /* What the mirror does not model, on every version (the step says why). */
    json_array_extend(ignore, json_object_get(step, "ignore"));
    /* Version-specific differences, written down in the script. */
    json_object_foreach(json_object_get(step, "differs"), k, v)
    {
        if (ref_version && !strncmp(ref_version, k, strlen(k))) {
            json_array_extend(ignore, json_object_get(v, "ignore"));
            json_object_update(expect, json_object_get(v, "expect"));
        }
    }
    size_t i;
    json_array_foreach(known, i, v)
    {
        if (!strcmp(json_string_value(json_object_get(v, "step")), c.step))
            json_array_append(kpaths, json_object_get(v, "path"));
    }
    c.ignore = ignore;
    c.expect = expect;
    c.known = kpaths;
    c.known_seen = known_seen;
    compare(&c, "", NULL, mine, ref);
    json_decref(ignore);
    json_decref(expect);
    json_decref(kpaths);
}

/* ---- targets ---------------------------------------------------------------- */

/* server, certificate-authority and token from a kubeconfig like envtest.sh's. */
static int kubeconfig_target(const char *path, target *t)
{
    FILE *f = fopen(path, "r");
    char line[4096];
    if (!f) {
        fprintf(stderr, "cannot read %s\n", path);
        return -1;
    }
    while (fgets(line, sizeof(line), f)) {
        char *p = line;
        while (*p == ' ' || *p == '-')
            p++;
        p[strcspn(p, "\r\n")] = '\0';
        if (!strncmp(p, "server: ", 8))
            t->url = xstrdup(p + 8);
        else if (!strncmp(p, "certificate-authority: ", 23))
            t->ca_file = xstrdup(p + 23);
        else if (!strncmp(p, "token: ", 7))
            t->token = xstrdup(p + 7);
    }
    fclose(f);
    if (!t->url || !t->ca_file || !t->token) {
        fprintf(stderr,
                "%s: need server, certificate-authority (a file) and token (as "
                "envtest.sh writes them)\n",
                path);
        return -1;
    }
    return 0;
}

static void target_free(target *t)
{
    free(t->url);
    free(t->ca_file);
    free(t->token);
    if (t->curl)
        curl_easy_cleanup(t->curl);
    json_decref(t->vars);
}

static char *server_version(target *t)
{
    json_t *step =
        json_pack("{s:s, s:s, s:s}", "name", "version", "method", "GET", "path", "/version");
    response r = {0};
    char *v = NULL;
    if (run_request(t, step, &r) == 0 && r.body)
        v = xstrdup(json_string_value(json_object_get(r.body, "gitVersion")));
    json_decref(r.body);
    free(r.raw);
    json_decref(step);
    return v;
}

/* The script's actions: restart the reference (a fresh watch cache), when possible. */
static int run_action(target *t, const char *action)
{
    if (strcmp(action, "restart_reference")) {
        fprintf(stderr, "unknown action %s\n", action);
        return -1;
    }
    if (!t->ctl)
        return 0;
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "'%s' apiserver restart >&2", t->ctl);
    if (system(cmd) != 0) {
        fprintf(stderr, "%s: '%s apiserver restart' failed\n", t->label, t->ctl);
        return -1;
    }
    t->restarted = true;
    /* A new process means new connections. */
    curl_easy_cleanup(t->curl);
    t->curl = curl_easy_init();
    return 0;
}

/* Runs one step on t; a step that needs a restart t did not get is skipped. */
static json_t *run_step(target *t, const json_t *step, bool is_mirror)
{
    response r = {0};
    const char *needs = json_string_value(json_object_get(step, "needs"));
    if (needs && !strcmp(needs, "restart") && !is_mirror && !t->restarted) {
        r.skipped = true;
        return response_json(&r);
    }
    run_request(t, step, &r);
    json_t *j = response_json(&r);
    json_decref(r.body);
    json_decref(r.events);
    free(r.raw);
    return j;
}

/*
 * The status the script expects; for the reference, differs.VERSION.status
 * when that version answers otherwise (ref_version NULL: the mirror).
 */
static void check_expect(const json_t *step, const json_t *res, const char *who,
                         const char *ref_version)
{
    json_t *want = json_object_get(step, "expect");
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(step, "differs"), k, v)
    {
        if (ref_version && !strncmp(ref_version, k, strlen(k)) && json_object_get(v, "status"))
            want = json_object_get(v, "status");
    }
    if (!want || json_is_true(json_object_get(res, "skipped")))
        return;
    if (json_integer_value(want) != json_integer_value(json_object_get(res, "status"))) {
        printf("UNEXPECTED [%s] %s answered %lld, the script expects %lld\n",
               json_string_value(json_object_get(step, "name")), who,
               (long long)json_integer_value(json_object_get(res, "status")),
               (long long)json_integer_value(want));
        mismatches++;
    }
}

/* ---- main --------------------------------------------------------------------- */

static void usage(void)
{
    fprintf(stderr, "usage: test_differential [--script FILE] [--capture FILE] [--record FILE] "
                    "[--verbose]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *script_path = DIFF_DATA_DIR "/script.json";
    const char *capture_path = DIFF_DATA_DIR "/capture-v1.36.3.json";
    const char *record = NULL;
    bool allow_restart =
        getenv("K8SLEASE_DIFF_RESTART") && !strcmp(getenv("K8SLEASE_DIFF_RESTART"), "1");
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--script") && i + 1 < argc)
            script_path = argv[++i];
        else if (!strcmp(argv[i], "--capture") && i + 1 < argc)
            capture_path = argv[++i];
        else if (!strcmp(argv[i], "--record") && i + 1 < argc)
            record = argv[++i];
        else if (!strcmp(argv[i], "--verbose"))
            verbose = true;
        else if (!strcmp(argv[i], "--restart"))
            allow_restart = true;
        else
            usage();
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    json_error_t err;
    json_t *script = json_load_file(script_path, 0, &err);
    if (!script) {
        fprintf(stderr, "%s:%d: %s\n", script_path, err.line, err.text);
        return 2;
    }
    json_t *steps = json_object_get(script, "steps");
    const char *kc = getenv("K8SLEASE_TEST_KUBECONFIG");
    if (record && !(kc && *kc)) {
        fprintf(stderr, "--record needs K8SLEASE_TEST_KUBECONFIG (run under envtest.sh)\n");
        return 2;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);

    /* The namespace the script creates: random on a real server. */
    const char *base = json_string_value(json_object_get(script, "namespace"));
    if (kc && *kc) {
        srand((unsigned)time(NULL) ^ (unsigned)getpid());
        snprintf(ns_actual, sizeof(ns_actual), "%s-%05d", base, rand() % 100000);
    } else {
        snprintf(ns_actual, sizeof(ns_actual), "%s-00000", base);
    }

    target ref = {"reference", NULL, NULL, NULL, NULL, json_object(), NULL, false};
    target mir = {"mirror", NULL, NULL, NULL, NULL, json_object(), NULL, false};
    json_t *capture = NULL, *results = json_array(), *known_seen = json_object();
    char *ref_version = NULL;
    ts_server *ts = NULL;
    int status = 2;

    if (kc && *kc) {
        if (kubeconfig_target(kc, &ref) < 0)
            goto out;
        ref.curl = curl_easy_init();
        if (allow_restart || record)
            ref.ctl = getenv("K8SLEASE_ENVTEST_CTL");
        ref_version = server_version(&ref);
        if (!ref_version) {
            fprintf(stderr, "no answer from %s/version\n", ref.url);
            goto out;
        }
    } else {
        capture = json_load_file(capture_path, 0, &err);
        if (!capture) {
            fprintf(stderr, "%s:%d: %s\n", capture_path, err.line, err.text);
            goto out;
        }
        ref_version = xstrdup(json_string_value(json_object_get(capture, "server")));
    }
    if (!record) {
        if (ts_start(&ts, NULL) < 0) {
            fprintf(stderr, "cannot start k8slease-testserver\n");
            goto out;
        }
        mir.url = xstrdup(ts_url(ts));
        mir.ca_file = xstrdup(ts_ca_file(ts));
        mir.token = ts_token(ts);
        mir.curl = curl_easy_init();
    }
    printf("differential: %zu steps, mirror vs %s %s (namespace %s)\n", json_array_size(steps),
           capture ? "capture of" : "live", ref_version, ns_actual);

    size_t i, compared = 0, skipped = 0;
    json_t *step;
    json_array_foreach(steps, i, step)
    {
        const char *name = json_string_value(json_object_get(step, "name"));
        const char *action = json_string_value(json_object_get(step, "action"));
        if (action) {
            if (kc && *kc && run_action(&ref, action) < 0)
                goto out;
            continue;
        }
        json_t *ref_res = NULL, *mir_res = NULL;
        if (kc && *kc) {
            ref_res = run_step(&ref, step, false);
            check_expect(step, ref_res, "the reference", ref_version);
        } else {
            json_t *all = json_object_get(capture, "results");
            size_t j;
            json_t *e;
            json_array_foreach(all, j, e)
            {
                if (!strcmp(json_string_value(json_object_get(e, "name")), name))
                    ref_res = json_incref(json_object_get(e, "response"));
            }
            if (!ref_res) {
                printf("MISSING [%s] not in the capture %s: record it again\n", name, capture_path);
                mismatches++;
                continue;
            }
        }
        if (record) {
            json_array_append_new(results,
                                  json_pack("{s:s, s:o}", "name", name, "response", ref_res));
            continue;
        }
        mir_res = run_step(&mir, step, true);
        check_expect(step, mir_res, "the mirror", NULL);
        if (json_is_true(json_object_get(ref_res, "skipped"))) {
            skipped++;
        } else {
            compare_step(step, mir_res, ref_res, ref_version, json_object_get(script, "known"),
                         known_seen);
            compared++;
        }
        json_decref(ref_res);
        json_decref(mir_res);
    }
    if (record) {
        json_t *cap = json_pack("{s:s, s:s, s:O}", "server", ref_version, "script", "script.json",
                                "results", results);
        if (json_dump_file(cap, record, JSON_INDENT(1)) < 0) {
            fprintf(stderr, "cannot write %s\n", record);
            json_decref(cap);
            goto out;
        }
        json_decref(cap);
        printf("recorded %zu responses of %s in %s\n", json_array_size(results), ref_version,
               record);
        status = mismatches ? 1 : 0;
        goto out;
    }
    json_array_foreach(json_object_get(script, "known"), i, step)
    {
        if (!json_object_get(known_seen, json_string_value(json_object_get(step, "path"))))
            printf("NOTE: the known difference at [%s] %s was not seen: drop it from the "
                   "script's \"known\" list if it is fixed\n",
                   json_string_value(json_object_get(step, "step")),
                   json_string_value(json_object_get(step, "path")));
    }
    printf("differential: %zu requests compared, %zu skipped (need a restartable reference), "
           "%d mismatch(es), %zu known difference(s)\n",
           compared, skipped, mismatches, json_object_size(known_seen));
    status = mismatches ? 1 : 0;
out:
    if (ts)
        ts_stop(ts);
    target_free(&ref);
    target_free(&mir);
    json_decref(script);
    json_decref(capture);
    json_decref(results);
    json_decref(known_seen);
    free(ref_version);
    curl_global_cleanup();
    return status;
}
