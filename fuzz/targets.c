/* Fuzz targets: every parser that reads bytes from outside the process (the
 * API server's bodies and watch streams, kubeconfig files, exec plugin
 * output) plus MicroTime and base64, each with the properties it must keep
 * beyond "does not crash": round trips, agreement with a reference, and
 * clean errors. See targets.h. */
#include "targets.h"

#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "common.h"
#include "http.h"
#include "kubeconfig.h"
#include "lease.h"

#define API_V1      "client.authentication.k8s.io/v1"
#define API_V1BETA1 "client.authentication.k8s.io/v1beta1"

/* RFC 3339 years are 0000..9999: the µs range MicroTime can round-trip. */
#define US_YEAR0     INT64_C(-62167219200000000) /* 0000-01-01T00:00:00Z */
#define US_YEAR10000 INT64_C(253402300800000000) /* 10000-01-01T00:00:00Z */

/* watch.c's limit on one watch event line. */
#define WATCH_MAX_LINE (4 * 1024 * 1024)

const char *kl_fuzz_input_name;

static void check_failed(const char *file, int line, const char *cond, const char *fmt, ...)
    KL_PRINTF(4, 5);

static void check_failed(const char *file, int line, const char *cond, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "%s:%d: property broken: %s\n", file, line, cond);
    if (kl_fuzz_input_name)
        fprintf(stderr, "  input: %s\n", kl_fuzz_input_name);
    if (fmt[0]) {
        fputs("  ", stderr);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
    }
    fprintf(stderr, "  last library error: %s\n", kl__error_get());
    abort();
}

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            check_failed(__FILE__, __LINE__, #cond, "%s", "");                                     \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                       \
    do {                                                                                           \
        if (!(cond))                                                                               \
            check_failed(__FILE__, __LINE__, #cond, __VA_ARGS__);                                  \
    } while (0)

static const char *str_or_empty(const char *s)
{
    return s ? s : "";
}

static int in_rfc3339_range(int64_t us)
{
    return us >= US_YEAR0 && us < US_YEAR10000;
}

/* The input as a NUL-terminated string (cut at an embedded NUL). */
static char *cstring(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);

    CHECK(s != NULL);
    if (size)
        memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

/* ------------------------------------------------------------------------ */
/* Lease                                                                    */
/* ------------------------------------------------------------------------ */

static void check_lease(const kl__lease *l)
{
    CHECK(l->root != NULL && json_is_object(l->root));
    CHECK(l->name != NULL && l->name[0] != '\0');
    CHECK(l->ns != NULL && l->rv != NULL && l->uid != NULL);
    CHECK(l->spec.duration_s >= 0 && l->spec.duration_s <= INT32_MAX);
    CHECK(l->spec.transitions >= 0 && l->spec.transitions <= INT32_MAX);
}

static void check_same_spec(const kl__lease_spec *want, const kl__lease_spec *got)
{
    /* An absent holder is written as "". */
    CHECK(strcmp(str_or_empty(want->holder), str_or_empty(got->holder)) == 0);
    CHECK(want->duration_s == got->duration_s);
    CHECK(want->acquire_us == got->acquire_us);
    CHECK(want->renew_us == got->renew_us);
    CHECK(want->transitions == got->transitions);
}

/* The object without the spec fields the codec owns, with spec {} when it
 * had none: what an update must keep byte for byte. */
static json_t *unowned_fields(const json_t *root)
{
    static const char *const owned[] = {"holderIdentity", "leaseDurationSeconds", "acquireTime",
                                        "renewTime", "leaseTransitions"};
    json_t *copy = json_deep_copy(root), *spec;

    CHECK(copy != NULL);
    spec = json_object_get(copy, "spec");
    if (!json_is_object(spec)) {
        CHECK(json_object_set_new(copy, "spec", json_object()) == 0);
    } else {
        for (size_t i = 0; i < KL_ARRAY_LEN(owned); i++)
            json_object_del(spec, owned[i]);
    }
    return copy;
}

static kl__lease *parse_back(const char *body)
{
    kl__lease *l = NULL;
    int err = kl__lease_parse(&l, body, strlen(body));

    CHECK_MSG(err == 0, "encoded body does not parse back: %s", body);
    check_lease(l);
    return l;
}

int kl_fuzz_lease(const uint8_t *data, size_t size)
{
    kl__lease *l = NULL, *back;
    json_t *want, *got;
    char *body;
    int err;

    err = kl__lease_parse(&l, (const char *)data, size);
    if (err < 0) {
        CHECK(err == K8SLEASE_EPROTOCOL);
        CHECK(l == NULL);
        CHECK(kl__error_get()[0] != '\0');
        return 0;
    }
    check_lease(l);

    /* An UPDATE with the parsed spec reads back as the same Lease. Times
     * outside years 0..9999 cannot be written as RFC 3339 (no server
     * stores one): only the encoding itself is checked then. */
    body = kl__lease_encode_update(l, &l->spec);
    CHECK(body != NULL);
    if (in_rfc3339_range(l->spec.acquire_us) && in_rfc3339_range(l->spec.renew_us)) {
        back = parse_back(body);
        CHECK(strcmp(back->name, l->name) == 0 && strcmp(back->ns, l->ns) == 0);
        CHECK(strcmp(back->rv, l->rv) == 0 && strcmp(back->uid, l->uid) == 0);
        check_same_spec(&l->spec, &back->spec);
        want = unowned_fields(l->root);
        got = unowned_fields(back->root);
        CHECK_MSG(json_equal(want, got), "update changed fields it does not own: %s", body);
        json_decref(want);
        json_decref(got);
        kl__lease_free(back);
    }
    kl__free(body);

    /* A CREATE of the same spec under the same name reads back too. */
    body = kl__lease_encode_create(l->ns, l->name, &l->spec);
    CHECK(body != NULL);
    if (in_rfc3339_range(l->spec.acquire_us) && in_rfc3339_range(l->spec.renew_us)) {
        back = parse_back(body);
        CHECK(strcmp(back->name, l->name) == 0 && strcmp(back->ns, l->ns) == 0);
        check_same_spec(&l->spec, &back->spec);
        kl__lease_free(back);
    }
    kl__free(body);
    kl__lease_free(l);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Status                                                                   */
/* ------------------------------------------------------------------------ */

int kl_fuzz_status(const uint8_t *data, size_t size)
{
    static const struct {
        long status;
        int code;
    } cases[] = {
        {400, K8SLEASE_ESERVER},   {401, K8SLEASE_EAUTH},     {403, K8SLEASE_EAUTH},
        {404, K8SLEASE_ENOTFOUND}, {409, K8SLEASE_ECONFLICT}, {410, K8SLEASE_ESERVER},
        {422, K8SLEASE_ESERVER},   {429, K8SLEASE_ESERVER},   {500, K8SLEASE_ESERVER},
        {503, K8SLEASE_ESERVER},
    };
    static const char what[] = "get lease fuzz/x";
    kl__status st;
    size_t i = size % KL_ARRAY_LEN(cases);
    int err;

    err = kl__status_parse(&st, (const char *)data, size);
    if (err == 0) {
        CHECK(st.reason != NULL && st.message != NULL);
    } else {
        CHECK(err == K8SLEASE_EPROTOCOL);
        CHECK(st.reason == NULL && st.message == NULL && st.code == 0);
    }
    kl__status_clear(&st);

    /* The same body as the error body of an HTTP status. */
    kl__error_clear();
    err = kl__http_status_error(cases[i].status, (const char *)data, size, what);
    CHECK(err == cases[i].code);
    CHECK_MSG(strncmp(kl__error_get(), what, strlen(what)) == 0, "message: %s", kl__error_get());
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Watch stream                                                             */
/* ------------------------------------------------------------------------ */

/* The framing rules of kl__line_splitter applied to the whole stream at
 * once: the chunked splitter must deliver exactly these lines. */
typedef struct ref_stream {
    const char *data;
    size_t len, pos, max_line;
} ref_stream;

/* 1 with the next non-empty line, 0 when no complete line is left, -1 when
 * the stream breaks the length limit here (a complete line longer than
 * max_line, or an unfinished one that can no longer fit). */
static int ref_next(ref_stream *r, const char **line, size_t *n)
{
    for (;;) {
        const char *start = r->data + r->pos;
        const char *nl;

        if (r->pos >= r->len)
            return 0;
        nl = memchr(start, '\n', r->len - r->pos);
        if (!nl)
            return r->len - r->pos > r->max_line + 1 ? -1 : 0;
        *line = start;
        *n = (size_t)(nl - start);
        r->pos += *n + 1;
        if (*n > 0 && start[*n - 1] == '\r')
            (*n)--;
        if (*n > r->max_line)
            return -1;
        if (*n > 0)
            return 1;
    }
}

static void parse_event(const char *line, size_t len)
{
    kl__watch_event ev;
    int err = kl__watch_event_parse(&ev, line, len);

    if (err < 0) {
        CHECK(err == K8SLEASE_EPROTOCOL);
        CHECK(ev.lease == NULL && ev.bookmark_rv == NULL && ev.status.message == NULL);
        return;
    }
    switch (ev.type) {
    case KL_WATCH_ADDED:
    case KL_WATCH_MODIFIED:
    case KL_WATCH_DELETED:
        CHECK(ev.lease != NULL);
        check_lease(ev.lease);
        break;
    case KL_WATCH_BOOKMARK:
        CHECK(ev.bookmark_rv != NULL);
        break;
    case KL_WATCH_ERROR:
        CHECK(ev.status.reason != NULL && ev.status.message != NULL);
        break;
    default:
        CHECK_MSG(0, "unknown event type %d", (int)ev.type);
    }
    kl__watch_event_clear(&ev);
}

static int on_line(const char *line, size_t len, void *arg)
{
    ref_stream *ref = arg;
    const char *want = NULL;
    size_t want_len = 0;
    int r = ref_next(ref, &want, &want_len);

    CHECK_MSG(r == 1, "the splitter delivered a line the reference does not have (%d)", r);
    CHECK_MSG(len == want_len && memcmp(line, want, len) == 0, "line %.*s, want %.*s",
              (int)(len < 200 ? len : 200), line, (int)(want_len < 200 ? want_len : 200), want);
    CHECK(line[len] == '\0');
    parse_event(line, len);
    return 0;
}

/* Input: byte 0 picks the line limit (bit 7: watch.c's 4 MiB, else
 * 8 * (byte & 127) bytes), byte 1 the chunk sizes, the rest is the stream. */
int kl_fuzz_watch(const uint8_t *data, size_t size)
{
    kl__line_splitter s;
    ref_stream ref = {0};
    const char *stream;
    size_t len, off = 0, max_chunk;
    uint32_t rng;
    int err = 0, r;
    const char *line;
    size_t n;

    if (size < 2)
        return 0;
    ref.max_line = (data[0] & 0x80) ? WATCH_MAX_LINE : (size_t)(data[0] & 0x7f) * 8;
    max_chunk = (size_t)1 << (data[1] & 0x0f);
    rng = 0x9e3779b9u ^ ((uint32_t)data[1] * 0x01000193u);
    stream = (const char *)data + 2;
    len = size - 2;
    ref.data = stream;
    ref.len = len;

    kl__line_splitter_init(&s, ref.max_line);
    while (off < len && err == 0) {
        size_t chunk;

        rng ^= rng << 13;
        rng ^= rng >> 17;
        rng ^= rng << 5;
        chunk = 1 + rng % max_chunk;
        if (chunk > len - off)
            chunk = len - off;
        /* A read may also come back empty. */
        if (rng & 0x100)
            CHECK(kl__line_splitter_feed(&s, stream + off, 0, on_line, &ref) == 0);
        err = kl__line_splitter_feed(&s, stream + off, chunk, on_line, &ref);
        off += chunk;
    }
    kl__line_splitter_free(&s);

    r = ref_next(&ref, &line, &n);
    if (err == 0)
        CHECK_MSG(r == 0, "the reference has more lines or an error (%d) the splitter missed", r);
    else
        CHECK_MSG(err == K8SLEASE_EPROTOCOL && r == -1,
                  "splitter error %d where the reference has %d", err, r);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Kubeconfig                                                               */
/* ------------------------------------------------------------------------ */

/* The loader reads files only: the input goes to one temporary file per
 * process, rewritten for every run. */
static char kc_path[PATH_MAX];

static void kc_remove(void)
{
    if (kc_path[0])
        unlink(kc_path);
}

static const char *kc_write(const uint8_t *data, size_t size)
{
    int fd;

    if (!kc_path[0]) {
        const char *dir = getenv("TMPDIR");

        /* A ':' would split the path as a KUBECONFIG list. */
        if (!dir || !dir[0] || strchr(dir, ':') || strlen(dir) > PATH_MAX - 64)
            dir = "/tmp";
        snprintf(kc_path, sizeof(kc_path), "%s/kl_fuzz_kubeconfig_XXXXXX", dir);
        fd = mkstemp(kc_path);
        CHECK_MSG(fd >= 0, "mkstemp %s", kc_path);
        close(fd);
        atexit(kc_remove);
    }
    fd = open(kc_path, O_WRONLY | O_TRUNC | O_CLOEXEC);
    CHECK(fd >= 0);
    while (size > 0) {
        ssize_t n = write(fd, data, size);

        CHECK(n > 0);
        data += n;
        size -= (size_t)n;
    }
    close(fd);
    return kc_path;
}

static void check_restconfig(int err, const kl__restconfig *cfg, const char *path)
{
    if (err < 0) {
        CHECK(err == K8SLEASE_ECONFIG);
        CHECK(cfg == NULL);
        CHECK_MSG(strstr(kl__error_get(), path) != NULL, "message does not name the file");
        return;
    }
    CHECK(cfg != NULL);
    CHECK(cfg->server != NULL);
    CHECK(!strncmp(cfg->server, "https://", 8) || !strncmp(cfg->server, "http://", 7));
    CHECK(cfg->server[strlen(cfg->server) - 1] != '/');
    CHECK(cfg->ns != NULL && cfg->ns[0] != '\0' && cfg->source != NULL);
    CHECK(!cfg->ca_pem || cfg->ca_pem[cfg->ca_pem_len] == '\0');
    CHECK(!cfg->cert_pem || cfg->cert_pem[cfg->cert_pem_len] == '\0');
    CHECK(!cfg->key_pem || cfg->key_pem[cfg->key_pem_len] == '\0');
    CHECK(!(cfg->cert_file || cfg->cert_pem) == !(cfg->key_file || cfg->key_pem));
    if (cfg->exec) {
        CHECK(cfg->exec->api_version != NULL && cfg->exec->command != NULL);
        CHECK(cfg->exec->args != NULL && cfg->exec->env != NULL);
        for (char **e = cfg->exec->env; *e; e++)
            CHECK(strchr(*e, '=') != NULL);
    }
}

int kl_fuzz_kubeconfig(const uint8_t *data, size_t size)
{
    const char *path = kc_write(data, size);
    kl__restconfig *cfg = NULL;
    int err;

    err = kl__restconfig_from_kubeconfig(&cfg, path, NULL);
    check_restconfig(err, cfg, path);
    kl__restconfig_free(cfg);

    /* A requested context takes the other path through the lookup. */
    cfg = NULL;
    err = kl__restconfig_from_kubeconfig(&cfg, path, "fuzz");
    check_restconfig(err, cfg, path);
    kl__restconfig_free(cfg);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Base64                                                                   */
/* ------------------------------------------------------------------------ */

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *b64_encode(const unsigned char *in, size_t len)
{
    char *out = malloc((len + 2) / 3 * 4 + 1);
    size_t i, o = 0;

    CHECK(out != NULL);
    for (i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16;

        if (i + 1 < len)
            v |= (uint32_t)in[i + 1] << 8;
        if (i + 2 < len)
            v |= in[i + 2];
        out[o++] = b64_alphabet[v >> 18 & 63];
        out[o++] = b64_alphabet[v >> 12 & 63];
        out[o++] = i + 1 < len ? b64_alphabet[v >> 6 & 63] : '=';
        out[o++] = i + 2 < len ? b64_alphabet[v & 63] : '=';
    }
    out[o] = '\0';
    return out;
}

static int b64_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

int kl_fuzz_base64(const uint8_t *data, size_t size)
{
    const char *in = (const char *)data;
    char *out, *enc, *again, *squeezed;
    size_t len = 0, len2 = 0, n = 0, i;
    int ok = -1;

    out = kl__base64_decode(in, size, &len, &ok);
    if (!out) {
        CHECK(ok == 0); /* ok = 1 would mean out of memory */
        return 0;
    }
    CHECK(ok == 1);
    CHECK(out[len] == '\0');
    CHECK(len <= size / 4 * 3);

    /* The canonical encoding of the result decodes to the same bytes... */
    enc = b64_encode((const unsigned char *)out, len);
    again = kl__base64_decode(enc, strlen(enc), &len2, &ok);
    CHECK(again != NULL && len2 == len && memcmp(again, out, len) == 0);

    /* ...and is the input without whitespace, except for the unused low
     * bits of the last quartet, which decoders ignore as Go's does. */
    squeezed = malloc(size + 1);
    CHECK(squeezed != NULL);
    for (i = 0; i < size; i++)
        if (!b64_space(in[i]))
            squeezed[n++] = in[i];
    squeezed[n] = '\0';
    CHECK_MSG(n == strlen(enc), "input %s re-encodes as %s", squeezed, enc);
    for (i = 0; i < n; i++) {
        int last_data = i + 1 == n || squeezed[i + 1] == '=';

        CHECK_MSG(squeezed[i] == enc[i] || (last_data && n - i <= 3), "input %s re-encodes as %s",
                  squeezed, enc);
    }
    free(squeezed);
    kl__free(again);
    free(enc);
    kl__free(out);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* ExecCredential                                                           */
/* ------------------------------------------------------------------------ */

static void check_cred_empty(const kl__exec_credential *c)
{
    CHECK(!c->token && !c->cert_pem && !c->key_pem && c->expiry_us == 0);
}

static void check_same_cred(const kl__exec_credential *a, const kl__exec_credential *b)
{
    CHECK(strcmp(str_or_empty(a->token), str_or_empty(b->token)) == 0);
    CHECK(strcmp(str_or_empty(a->cert_pem), str_or_empty(b->cert_pem)) == 0);
    CHECK(strcmp(str_or_empty(a->key_pem), str_or_empty(b->key_pem)) == 0);
    CHECK(a->expiry_us == b->expiry_us);
}

int kl_fuzz_exec_credential(const uint8_t *data, size_t size)
{
    kl__exec_credential c, v1, v1beta1;
    const char *json = (const char *)data;
    int err, e1, e2;

    err = kl__exec_credential_parse(json, size, NULL, &c);
    if (err < 0) {
        CHECK(err == K8SLEASE_ECONFIG);
        CHECK(kl__error_get()[0] != '\0');
        check_cred_empty(&c);
        return 0;
    }
    CHECK(c.token || c.cert_pem);
    CHECK(!c.cert_pem == !c.key_pem);
    CHECK(!c.token || c.token[0]);

    /* With a configured apiVersion exactly one of the two is accepted, and
     * it gives the same credential. */
    e1 = kl__exec_credential_parse(json, size, API_V1, &v1);
    e2 = kl__exec_credential_parse(json, size, API_V1BETA1, &v1beta1);
    CHECK((e1 == 0) != (e2 == 0));
    check_same_cred(&c, e1 == 0 ? &v1 : &v1beta1);
    check_cred_empty(e1 == 0 ? &v1beta1 : &v1);
    kl__exec_credential_clear(&v1);
    kl__exec_credential_clear(&v1beta1);
    kl__exec_credential_clear(&c);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* MicroTime                                                                */
/* ------------------------------------------------------------------------ */

/* The exec plugin reader has its own RFC 3339 parser (expirationTimestamp):
 * both must accept the same strings with the same value. */
static void compare_with_exec_parser(const char *s, int lease_err, int64_t lease_us)
{
    kl__exec_credential cred;
    char *json;
    int err;

    /* Only strings that need no JSON escaping; "" means "absent" there. */
    if (!s[0])
        return;
    for (const char *p = s; *p; p++)
        if (*p < 0x20 || *p > 0x7e || *p == '"' || *p == '\\')
            return;
    json = kl__sprintf("{\"apiVersion\":\"" API_V1 "\",\"kind\":\"ExecCredential\","
                       "\"status\":{\"token\":\"t\",\"expirationTimestamp\":\"%s\"}}",
                       s);
    CHECK(json != NULL);
    err = kl__exec_credential_parse(json, strlen(json), NULL, &cred);
    CHECK_MSG((err == 0) == (lease_err == 0), "\"%s\": MicroTime parser %d, exec parser %d", s,
              lease_err, err);
    if (err == 0)
        CHECK_MSG(cred.expiry_us == lease_us, "\"%s\": %lld vs %lld", s, (long long)lease_us,
                  (long long)cred.expiry_us);
    kl__exec_credential_clear(&cred);
    kl__free(json);
}

int kl_fuzz_microtime(const uint8_t *data, size_t size)
{
    char buf[KL_MICROTIME_BUFLEN], *s = cstring(data, size);
    int64_t us = 0, back = 0;
    uint64_t raw;
    int err;

    err = kl__microtime_parse(s, &us);
    if (err == 0) {
        kl__microtime_format(us, buf);
        if (in_rfc3339_range(us)) {
            /* format(parse(x)) parses back to the same instant. */
            CHECK_MSG(kl__microtime_parse(buf, &back) == 0 && back == us,
                      "\"%s\" -> %lld -> \"%s\" -> %lld", s, (long long)us, buf, (long long)back);
        } else {
            /* Only an offset pushes a 4-digit year out of 0..9999. */
            CHECK_MSG(strpbrk(s + 19, "+-") != NULL, "\"%s\" -> %lld", s, (long long)us);
        }
    } else {
        CHECK(err == K8SLEASE_EPROTOCOL);
    }
    compare_with_exec_parser(s, err, us);
    free(s);

    if (size < 8)
        return 0;
    memcpy(&raw, data, sizeof(raw));
    /* Any int64 formats within the buffer... */
    kl__microtime_format((int64_t)raw, buf);
    CHECK(strlen(buf) < KL_MICROTIME_BUFLEN);
    /* ...and every instant of years 0..9999 parses back from its text. */
    us = US_YEAR0 + (int64_t)(raw % (uint64_t)(US_YEAR10000 - US_YEAR0));
    kl__microtime_format(us, buf);
    CHECK_MSG(strlen(buf) == 27, "%lld -> \"%s\"", (long long)us, buf);
    CHECK_MSG(kl__microtime_parse(buf, &back) == 0 && back == us, "%lld -> \"%s\" -> %lld",
              (long long)us, buf, (long long)back);
    return 0;
}

const kl_fuzz_target kl_fuzz_targets[] = {
    {"lease", kl_fuzz_lease},         {"status", kl_fuzz_status},
    {"watch", kl_fuzz_watch},         {"kubeconfig", kl_fuzz_kubeconfig},
    {"base64", kl_fuzz_base64},       {"exec_credential", kl_fuzz_exec_credential},
    {"microtime", kl_fuzz_microtime},
};

const size_t kl_fuzz_target_count = KL_ARRAY_LEN(kl_fuzz_targets);
