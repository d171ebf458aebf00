/*
 * store.c - objects, resourceVersions, watch history and selectors.
 */
#include "store.h"
#include "objects.h"
#include "util.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const ts_default_namespaces[] = {"default", "kube-node-lease", "kube-public",
                                             "kube-system", NULL};

const char *ts_evtype_name(ts_evtype t)
{
    switch (t) {
    case TS_ADDED:
        return "ADDED";
    case TS_MODIFIED:
        return "MODIFIED";
    case TS_DELETED:
        return "DELETED";
    }
    return "ERROR";
}

const char *ts_obj_ns(ts_res res, const json_t *obj)
{
    return res == TS_NS ? "" : ts_meta_str(obj, "namespace");
}

/* The namespaces a fresh apiserver has, as the system created them. */
static void seed_namespaces(ts_store *s)
{
    for (size_t i = 0; ts_default_namespaces[i]; i++) {
        json_t *ns = ts_namespace_new(ts_default_namespaces[i], "kube-apiserver", time(NULL));
        if (ns)
            ts_store_put(s, TS_NS, ns);
    }
}

/* FNV-1a over the key parts; the separators keep ("a","bc") != ("ab","c"). */
static uint64_t key_hash(ts_res res, const char *ns, const char *name)
{
    uint64_t h = 1469598103934665603ULL;
    h = (h ^ (uint64_t)res) * 1099511628211ULL;
    for (const char *p = ns; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    h = (h ^ '/') * 1099511628211ULL;
    for (const char *p = name; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    return h;
}

int ts_store_init(ts_store *s, size_t history)
{
    memset(s, 0, sizeof(*s));
    s->nbuckets = 1024;
    s->buckets = calloc(s->nbuckets, sizeof(*s->buckets));
    s->ring_cap = history ? history : 1;
    s->ring = calloc(s->ring_cap, sizeof(*s->ring));
    if (!s->buckets || !s->ring) {
        free(s->buckets);
        free(s->ring);
        return -1;
    }
    /*
     * Start well above zero: "0" has a meaning of its own in list and watch
     * requests, and small numbers make stale-version bugs harder to see.
     */
    s->rv = 1000;
    s->floor = s->rv;
    seed_namespaces(s);
    return 0;
}

static void event_release(ts_event *ev)
{
    json_decref(ev->obj);
    json_decref(ev->prev);
    free(ev->line);
    memset(ev, 0, sizeof(*ev));
}

static void drop_oldest(ts_store *s)
{
    ts_event *ev = &s->ring[s->ring_head];
    if (ev->rv > s->floor)
        s->floor = ev->rv;
    event_release(ev);
    s->ring_head = (s->ring_head + 1) % s->ring_cap;
    s->ring_len--;
}

static void free_objects(ts_store *s)
{
    for (size_t i = 0; i < s->nbuckets; i++) {
        ts_obj *o = s->buckets[i];
        while (o) {
            ts_obj *next = o->next;
            json_decref(o->json);
            free(o);
            o = next;
        }
        s->buckets[i] = NULL;
    }
    memset(s->count, 0, sizeof(s->count));
}

void ts_store_free(ts_store *s)
{
    if (!s->buckets)
        return;
    free_objects(s);
    while (s->ring_len)
        drop_oldest(s);
    free(s->buckets);
    free(s->ring);
    memset(s, 0, sizeof(*s));
}

void ts_store_clear(ts_store *s)
{
    free_objects(s);
    ts_store_compact(s, 0);
    seed_namespaces(s);
}

void ts_store_wipe(ts_store *s)
{
    free_objects(s);
    while (s->ring_len)
        drop_oldest(s);
    s->rv = 1000; /* as ts_store_init: a fresh etcd starts its revisions again */
    s->floor = s->rv;
    s->compacted = 0;
    seed_namespaces(s);
}

void ts_store_compact(ts_store *s, uint64_t rv)
{
    if (rv == 0 || rv > s->rv)
        rv = s->rv;
    while (s->ring_len && s->ring[s->ring_head].rv <= rv)
        drop_oldest(s);
    if (rv > s->floor)
        s->floor = rv;
    if (rv > s->compacted)
        s->compacted = rv;
}

ts_obj *ts_store_get(ts_store *s, ts_res res, const char *ns, const char *name)
{
    uint64_t h = key_hash(res, ns, name);
    for (ts_obj *o = s->buckets[h % s->nbuckets]; o; o = o->next)
        if (o->hash == h && o->res == res && !strcmp(o->ns, ns) && !strcmp(o->name, name))
            return o;
    return NULL;
}

static void grow(ts_store *s)
{
    size_t n = s->nbuckets * 2;
    ts_obj **b = calloc(n, sizeof(*b));
    if (!b)
        return; /* longer chains, still correct */
    for (size_t i = 0; i < s->nbuckets; i++) {
        ts_obj *o = s->buckets[i];
        while (o) {
            ts_obj *next = o->next;
            o->next = b[o->hash % n];
            b[o->hash % n] = o;
            o = next;
        }
    }
    free(s->buckets);
    s->buckets = b;
    s->nbuckets = n;
}

/* Records a change; takes the references to obj and prev. */
static void record(ts_store *s, ts_evtype type, ts_res res, json_t *obj, json_t *prev)
{
    if (s->ring_len == s->ring_cap)
        drop_oldest(s);
    ts_event *ev = &s->ring[(s->ring_head + s->ring_len) % s->ring_cap];
    ev->rv = s->rv;
    ev->type = type;
    ev->res = res;
    ev->obj = obj;
    ev->prev = prev;
    ev->line = NULL;
    s->ring_len++;
    if (s->on_event)
        s->on_event(s->on_event_ctx, ev);
}

static int stamp_rv(json_t *obj, uint64_t rv)
{
    char buf[24];
    snprintf(buf, sizeof(buf), "%" PRIu64, rv);
    return json_object_set_new(json_object_get(obj, "metadata"), "resourceVersion",
                               json_string(buf));
}

ts_obj *ts_store_put(ts_store *s, ts_res res, json_t *obj)
{
    const char *ns = ts_obj_ns(res, obj), *name = ts_meta_str(obj, "name");
    if (!ns || !name || stamp_rv(obj, s->rv + 1) < 0) {
        json_decref(obj);
        return NULL;
    }
    ts_obj *o = ts_store_get(s, res, ns, name);
    json_t *prev = NULL;
    if (o) {
        prev = o->json; /* the history event takes this reference */
    } else {
        if (!(o = calloc(1, sizeof(*o)))) {
            json_decref(obj);
            return NULL;
        }
        o->res = res;
        o->hash = key_hash(res, ns, name);
        if (s->count[TS_LEASE] + s->count[TS_POD] + s->count[TS_NS] + s->count[TS_LC] >=
            s->nbuckets)
            grow(s);
        o->next = s->buckets[o->hash % s->nbuckets];
        s->buckets[o->hash % s->nbuckets] = o;
        s->count[res]++;
    }
    o->json = obj;
    o->ns = ns;
    o->name = name;
    o->rv = ++s->rv;
    record(s, prev ? TS_MODIFIED : TS_ADDED, res, json_incref(obj), prev);
    return o;
}

int ts_store_delete(ts_store *s, ts_obj *o)
{
    /* A DELETED event carries the last state at the deletion's version. */
    json_t *last = json_deep_copy(o->json);
    if (!last || stamp_rv(last, s->rv + 1) < 0) {
        json_decref(last);
        return -1;
    }
    ts_obj **pp = &s->buckets[o->hash % s->nbuckets];
    while (*pp != o)
        pp = &(*pp)->next;
    *pp = o->next;
    s->count[o->res]--;
    s->rv++;
    record(s, TS_DELETED, o->res, last, o->json);
    free(o);
    return 0;
}

size_t ts_store_history_after(const ts_store *s, uint64_t after)
{
    size_t lo = 0, hi = s->ring_len;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->ring[(s->ring_head + mid) % s->ring_cap].rv <= after)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

const ts_event *ts_store_history_at(const ts_store *s, size_t i)
{
    return &s->ring[(s->ring_head + i) % s->ring_cap];
}

const char *ts_event_line(ts_event *ev, size_t *len)
{
    if (!ev->line) {
        char *obj = json_dumps(ev->obj, JSON_COMPACT);
        if (!obj)
            return NULL;
        ts_buf b = {0};
        if (ts_buf_printf(&b, "{\"type\":\"%s\",\"object\":%s}\n", ts_evtype_name(ev->type), obj) ==
            0) {
            ev->line = b.data;
            ev->line_len = b.len;
        } else {
            ts_buf_free(&b);
        }
        free(obj);
        if (!ev->line)
            return NULL;
    }
    *len = ev->line_len;
    return ev->line;
}

/* ---- listing ---------------------------------------------------------- */

static int key_cmp(const char *ns1, const char *n1, const char *ns2, const char *n2)
{
    int c = strcmp(ns1, ns2);
    return c ? c : strcmp(n1, n2);
}

static int obj_cmp(const void *a, const void *b)
{
    const ts_obj *x = *(ts_obj *const *)a, *y = *(ts_obj *const *)b;
    return key_cmp(x->ns, x->name, y->ns, y->name);
}

/* The one name a field selector pins, if it does ("metadata.name=X"). */
static const char *pinned_name(const ts_filter *f)
{
    for (size_t i = 0; i < f->fields.n; i++)
        if (f->fields.reqs[i].op == TS_SEL_EQ && !strcmp(f->fields.reqs[i].key, "metadata.name"))
            return f->fields.reqs[i].vals[0];
    return NULL;
}

int ts_store_list(ts_store *s, const ts_filter *f, const char *after, ts_obj ***out, size_t *n)
{
    ts_obj **v = NULL;
    size_t len = 0, cap = 0;
    char *after_ns = NULL;
    const char *after_name = NULL;

    if (after) {
        const char *slash = strchr(after, '/');
        if (!slash || !(after_ns = strndup(after, (size_t)(slash - after))))
            return -1;
        after_name = slash + 1;
    }

    const char *pin = pinned_name(f);
    if (pin && f->ns) {
        /* Fast path for the election pattern: one namespace, one name. */
        ts_obj *o = ts_store_get(s, f->res, f->ns, pin);
        if (o && ts_filter_match(f, o->res, o->json) &&
            (!after_ns || key_cmp(o->ns, o->name, after_ns, after_name) > 0)) {
            if (!(v = malloc(sizeof(*v))))
                goto fail;
            v[len++] = o;
        }
    } else {
        for (size_t i = 0; i < s->nbuckets; i++) {
            for (ts_obj *o = s->buckets[i]; o; o = o->next) {
                if (o->res != f->res || !ts_filter_match(f, o->res, o->json))
                    continue;
                if (after_ns && key_cmp(o->ns, o->name, after_ns, after_name) <= 0)
                    continue;
                if (len == cap) {
                    size_t nc = cap ? cap * 2 : 64;
                    ts_obj **nv = realloc(v, nc * sizeof(*nv));
                    if (!nv)
                        goto fail;
                    v = nv;
                    cap = nc;
                }
                v[len++] = o;
            }
        }
        if (len > 1)
            qsort(v, len, sizeof(*v), obj_cmp);
    }
    free(after_ns);
    *out = v;
    *n = len;
    return 0;
fail:
    free(after_ns);
    free(v);
    return -1;
}

/* ---- selectors -------------------------------------------------------- */

static void req_free(ts_selreq *r)
{
    free(r->key);
    for (size_t i = 0; i < r->nvals; i++)
        free(r->vals[i]);
    free(r->vals);
}

void ts_selector_free(ts_selector *sel)
{
    for (size_t i = 0; i < sel->n; i++)
        req_free(&sel->reqs[i]);
    free(sel->reqs);
    sel->reqs = NULL;
    sel->n = 0;
}

static char *trimmed(const char *p, size_t n)
{
    while (n && isspace((unsigned char)*p)) {
        p++;
        n--;
    }
    while (n && isspace((unsigned char)p[n - 1]))
        n--;
    return strndup(p, n);
}

/* Sets *err to a malloc'ed message (NULL if out of memory); returns -1. */
__attribute__((format(printf, 2, 3))) static int fail(char **err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    *err = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (*err) {
        va_start(ap, fmt);
        vsnprintf(*err, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static int add_val(ts_selreq *r, const char *p, size_t n)
{
    char **nv = realloc(r->vals, (r->nvals + 1) * sizeof(*nv));
    if (!nv)
        return -1;
    r->vals = nv;
    if (!(r->vals[r->nvals] = trimmed(p, n)))
        return -1;
    r->nvals++;
    return 0;
}

static bool valid_key_char(char c)
{
    return isalnum((unsigned char)c) || c == '-' || c == '_' || c == '.' || c == '/';
}

/* One label requirement: "k", "!k", "k=v", "k==v", "k!=v", "k in (..)", "k notin (..)". */
static int parse_label_req(const char *s, ts_selreq *r, char **err)
{
    const char *p = s;
    while (isspace((unsigned char)*p))
        p++;
    bool negated = *p == '!';
    if (negated)
        p++;
    const char *k = p;
    while (valid_key_char(*p))
        p++;
    if (p == k)
        return fail(err, "unable to parse requirement: found '%s', expected: identifier", s);
    if (!(r->key = strndup(k, (size_t)(p - k))))
        return -1;
    while (isspace((unsigned char)*p))
        p++;
    if (negated) {
        r->op = TS_SEL_ABSENT;
        return *p ? fail(err, "unable to parse requirement: '%s': unexpected text after !key", s)
                  : 0;
    }
    if (*p == '\0') {
        r->op = TS_SEL_EXISTS;
        return 0;
    }
    if (p[0] == '!' && p[1] == '=') {
        r->op = TS_SEL_NE;
        p += 2;
    } else if (p[0] == '=' && p[1] == '=') {
        r->op = TS_SEL_EQ;
        p += 2;
    } else if (p[0] == '=') {
        r->op = TS_SEL_EQ;
        p += 1;
    } else if (!strncmp(p, "in", 2) && (isspace((unsigned char)p[2]) || p[2] == '(')) {
        r->op = TS_SEL_IN;
        p += 2;
    } else if (!strncmp(p, "notin", 5) && (isspace((unsigned char)p[5]) || p[5] == '(')) {
        r->op = TS_SEL_NOTIN;
        p += 5;
    } else {
        return fail(err, "unable to parse requirement: '%s': unknown operator", s);
    }

    if (r->op == TS_SEL_EQ || r->op == TS_SEL_NE) {
        const char *v = p;
        for (; *p; p++)
            if (!valid_key_char(*p) && !isspace((unsigned char)*p))
                return fail(err, "unable to parse requirement: '%s': invalid value", s);
        return add_val(r, v, (size_t)(p - v));
    }

    while (isspace((unsigned char)*p))
        p++;
    if (*p != '(')
        return fail(err, "unable to parse requirement: '%s': expected '('", s);
    const char *close = strchr(++p, ')');
    if (!close)
        return fail(err, "unable to parse requirement: '%s': expected ')'", s);
    for (const char *q = close + 1; *q; q++)
        if (!isspace((unsigned char)*q))
            return fail(err, "unable to parse requirement: '%s': unexpected text after ')'", s);
    while (p < close) {
        const char *comma = memchr(p, ',', (size_t)(close - p));
        const char *end = comma ? comma : close;
        if (add_val(r, p, (size_t)(end - p)) < 0)
            return -1;
        p = comma ? comma + 1 : close;
    }
    if (r->nvals == 0)
        return fail(err, "unable to parse requirement: '%s': empty value set", s);
    return 0;
}

/* One field requirement: "key=value", "key==value" or "key!=value". */
static int parse_field_req(const char *s, ts_selreq *r, char **err)
{
    const char *ne = strstr(s, "!="), *eq = strchr(s, '=');
    if (!eq)
        return fail(err, "invalid selector: '%s'; can't understand it", s);
    bool is_ne = ne && ne < eq;
    const char *key_end = is_ne ? ne : eq;
    const char *v = is_ne ? ne + 2 : (eq[1] == '=' ? eq + 2 : eq + 1);
    r->op = is_ne ? TS_SEL_NE : TS_SEL_EQ;
    if (!(r->key = trimmed(s, (size_t)(key_end - s))) || add_val(r, v, strlen(v)) < 0)
        return -1;
    if (strcmp(r->key, "metadata.name") && strcmp(r->key, "metadata.namespace"))
        return fail(err, "field label not supported: %s", r->key);
    return 0;
}

/* Splits at commas that are not inside "(...)" and parses each piece. */
static int parse_selector(const char *s, ts_selector *out, char **err, bool labels)
{
    *err = NULL;
    memset(out, 0, sizeof(*out));
    if (!s)
        return 0;
    const char *start = s;
    int depth = 0;
    for (const char *p = s;; p++) {
        if (*p == '(')
            depth++;
        else if (*p == ')')
            depth--;
        if ((*p == ',' && depth == 0) || *p == '\0') {
            char *piece = trimmed(start, (size_t)(p - start));
            if (!piece)
                goto fail;
            if (*piece) {
                ts_selreq *nr = realloc(out->reqs, (out->n + 1) * sizeof(*nr));
                if (!nr) {
                    free(piece);
                    goto fail;
                }
                out->reqs = nr;
                ts_selreq *r = &out->reqs[out->n++];
                memset(r, 0, sizeof(*r));
                int rc = labels ? parse_label_req(piece, r, err) : parse_field_req(piece, r, err);
                free(piece);
                if (rc < 0)
                    goto fail;
            } else {
                free(piece);
            }
            if (*p == '\0')
                break;
            start = p + 1;
        }
    }
    return 0;
fail:
    ts_selector_free(out);
    return -1;
}

int ts_label_selector_parse(const char *s, ts_selector *out, char **err)
{
    return parse_selector(s, out, err, true);
}

int ts_field_selector_parse(const char *s, ts_selector *out, char **err)
{
    return parse_selector(s, out, err, false);
}

static bool in_vals(const ts_selreq *r, const char *v)
{
    for (size_t i = 0; i < r->nvals; i++)
        if (!strcmp(r->vals[i], v))
            return true;
    return false;
}

bool ts_filter_match(const ts_filter *f, ts_res res, const json_t *obj)
{
    if (res != f->res)
        return false;
    const char *ns = ts_meta_str(obj, "namespace");
    if (f->ns && (!ns || strcmp(ns, f->ns)))
        return false;
    for (size_t i = 0; i < f->fields.n; i++) {
        const ts_selreq *r = &f->fields.reqs[i];
        const char *v = ts_meta_str(obj, r->key + strlen("metadata."));
        bool eq = v && !strcmp(v, r->vals[0]);
        if (eq != (r->op == TS_SEL_EQ))
            return false;
    }
    const json_t *labels = json_object_get(json_object_get(obj, "metadata"), "labels");
    for (size_t i = 0; i < f->labels.n; i++) {
        const ts_selreq *r = &f->labels.reqs[i];
        const char *v = json_string_value(json_object_get(labels, r->key));
        bool ok = false;
        switch (r->op) {
        case TS_SEL_EQ:
            ok = v && !strcmp(v, r->vals[0]);
            break;
        case TS_SEL_NE:
            ok = !v || strcmp(v, r->vals[0]);
            break;
        case TS_SEL_IN:
            ok = v && in_vals(r, v);
            break;
        case TS_SEL_NOTIN:
            ok = !v || !in_vals(r, v);
            break;
        case TS_SEL_EXISTS:
            ok = v != NULL;
            break;
        case TS_SEL_ABSENT:
            ok = v == NULL;
            break;
        }
        if (!ok)
            return false;
    }
    return true;
}

void ts_filter_free(ts_filter *f)
{
    free(f->ns);
    f->ns = NULL;
    ts_selector_free(&f->fields);
    ts_selector_free(&f->labels);
}
