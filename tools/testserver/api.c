/*
 * api.c - the Kubernetes REST API: discovery, Leases, Pods, Namespaces.
 *
 * Handlers run with the server lock held and answer through ts_response
 * (api.h); the dispatch layer (dispatch.c) serialises the body before it
 * lets go of the lock (bodies share values with stored objects).
 *
 * Length: one handler per resource and verb of the API it mimics, sharing
 * the helpers at the top.
 */
#include "api.h"
#include "util.h"
#include "watch.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A larger ?limit= is treated as "no limit". */
#define MAX_LIST_LIMIT 100000

enum route_kind {
    RT_NONE,       /* unknown path */
    RT_STATIC,     /* discovery, /version, /openapi, health */
    RT_COLLECTION, /* .../leases, .../namespaces/NS/leases, /api/v1/namespaces */
    RT_OBJECT      /* .../namespaces/NS/leases/NAME, /api/v1/namespaces/NAME, and
                      /api/v1/namespaces/NS/pods/NAME/status (status set) */
};

typedef struct route {
    enum route_kind kind;
    ts_res res;
    char ns[256]; /* "" for a cluster-scoped resource (Namespaces) */
    char name[256];
    bool all_namespaces; /* a collection across namespaces, or cluster-scoped */
    bool cluster;        /* cluster-scoped resource */
    bool status;         /* the status subresource of the object (pods/NAME/status) */
} route;

const char *ts_request_query(const ts_request *rq, const char *key)
{
    return rq->conn->ops->query(rq->conn, key);
}

const char *ts_request_header(const ts_request *rq, const char *key)
{
    return rq->conn->ops->header(rq->conn, key);
}

/* Copies one path segment; false if it is empty or too long. */
static bool segment(const char *s, size_t n, char out[256])
{
    if (n == 0 || n >= 256)
        return false;
    memcpy(out, s, n);
    out[n] = '\0';
    return true;
}

/* cle: LeaseCandidates are served (--feature-gates=CoordinatedLeaderElection=true). */
static route parse_route(const char *path, bool cle)
{
    route r = {0};
    const char *seg[8];
    size_t len[8], n = 0;

    static const char *const statics[] = {"/api",
                                          "/api/v1",
                                          "/apis",
                                          "/apis/coordination.k8s.io",
                                          "/apis/coordination.k8s.io/v1",
                                          "/apis/apps",
                                          "/apis/apps/v1",
                                          "/apis/rbac.authorization.k8s.io",
                                          "/apis/rbac.authorization.k8s.io/v1",
                                          "/version",
                                          "/openapi/v2",
                                          "/openapi/v3",
                                          "/healthz",
                                          "/livez",
                                          "/readyz"};
    for (size_t i = 0; i < sizeof(statics) / sizeof(statics[0]); i++) {
        size_t sl = strlen(statics[i]);
        if (!strncmp(path, statics[i], sl) && (path[sl] == '\0' || !strcmp(path + sl, "/"))) {
            r.kind = RT_STATIC;
            return r;
        }
    }
    if (!strncmp(path, "/openapi/v3/", 12) ||
        (cle && (!strcmp(path, "/apis/coordination.k8s.io/v1beta1") ||
                 !strcmp(path, "/apis/coordination.k8s.io/v1beta1/")))) {
        r.kind = RT_STATIC;
        return r;
    }

    for (const char *p = path; *p && n < 8;) {
        while (*p == '/')
            p++;
        if (!*p)
            break;
        const char *e = strchr(p, '/');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        seg[n] = p;
        len[n++] = l;
        p += l;
    }
#define SEG(i, s) (len[i] == strlen(s) && !strncmp(seg[i], s, len[i]))
    size_t base;
    if (n >= 3 && SEG(0, "apis") && SEG(1, "coordination.k8s.io") && SEG(2, "v1")) {
        r.res = TS_LEASE;
        base = 3;
    } else if (cle && n >= 3 && SEG(0, "apis") && SEG(1, "coordination.k8s.io") &&
               SEG(2, "v1beta1")) {
        r.res = TS_LC;
        base = 3;
    } else if (n >= 2 && SEG(0, "api") && SEG(1, "v1")) {
        r.res = TS_POD;
        base = 2;
        if ((n == 3 || n == 4) && SEG(2, "namespaces")) {
            r.res = TS_NS;
            r.cluster = true;
            if (n == 3) {
                r.kind = RT_COLLECTION;
                r.all_namespaces = true;
            } else if (segment(seg[3], len[3], r.name)) {
                r.kind = RT_OBJECT;
            }
            return r;
        }
    } else {
        return r;
    }
    const char *plural = ts_resdefs[r.res].plural;
    if (n == base + 1 && SEG(base, plural)) {
        r.kind = RT_COLLECTION;
        r.all_namespaces = true;
    } else if ((n == base + 3 || n == base + 4) && SEG(base, "namespaces") &&
               SEG(base + 2, plural) && segment(seg[base + 1], len[base + 1], r.ns)) {
        if (n == base + 3)
            r.kind = RT_COLLECTION;
        else if (segment(seg[base + 3], len[base + 3], r.name))
            r.kind = RT_OBJECT;
    } else if (r.res == TS_POD && n == base + 5 && SEG(base, "namespaces") &&
               SEG(base + 2, plural) && SEG(base + 4, "status") &&
               segment(seg[base + 1], len[base + 1], r.ns) &&
               segment(seg[base + 3], len[base + 3], r.name)) {
        /* The one subresource served; the others are 404 as unknown paths. */
        r.kind = RT_OBJECT;
        r.status = true;
    }
#undef SEG
    return r;
}

const char *ts_api_verb(const char *method, const char *path, bool watch)
{
    route r = parse_route(path, true);
    bool obj = r.kind == RT_OBJECT && !r.status; /* a subresource is never watched */
    bool coll = r.kind == RT_COLLECTION;
    if (!strcmp(method, "GET"))
        return watch && (obj || coll) ? "watch" : coll ? "list" : "get";
    if (!strcmp(method, "POST"))
        return "create";
    if (!strcmp(method, "PUT"))
        return "update";
    if (!strcmp(method, "PATCH"))
        return "patch";
    if (!strcmp(method, "DELETE"))
        return coll ? "deletecollection" : "delete";
    return "other";
}

/* ---- helpers ---------------------------------------------------------- */

static void reply(ts_response *rs, unsigned code, json_t *body)
{
    rs->code = code;
    rs->body = body;
}

static void bad_request(ts_response *rs, const char *msg)
{
    reply(rs, 400, ts_status_bad_request(msg));
}

static void not_found_path(ts_response *rs)
{
    reply(rs, 404,
          ts_status_failure(404, "NotFound", "the server could not find the requested resource",
                            json_object()));
}

static void method_not_allowed(ts_response *rs)
{
    reply(rs, 405,
          ts_status_failure(405, "MethodNotAllowed",
                            "the server does not allow this method on the requested resource",
                            json_object()));
}

static void internal_error(ts_response *rs)
{
    reply(rs, 500, ts_status_failure(500, "InternalError", "out of memory", NULL));
}

/* strconv.ParseBool */
static bool query_bool(const ts_request *rq, const char *key)
{
    const char *v = ts_request_query(rq, key);
    return v && (!strcmp(v, "1") || !strcmp(v, "t") || !strcmp(v, "T") || !strcmp(v, "true") ||
                 !strcmp(v, "TRUE") || !strcmp(v, "True"));
}

/* A non-negative integer query parameter; -1 absent, -2 malformed. */
static long long query_uint(const ts_request *rq, const char *key)
{
    const char *v = ts_request_query(rq, key);
    if (!v || !*v)
        return -1;
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    return (*end || errno || n < 0) ? -2 : n;
}

/* A resourceVersion: decimal digits. Returns 0 and sets *rv, or -1. */
static int parse_rv(const char *s, uint64_t *rv)
{
    if (!s || !*s)
        return -1;
    uint64_t v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9' || v > UINT64_MAX / 10)
            return -1;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    *rv = v;
    return 0;
}

static void rv_string(uint64_t rv, char out[24])
{
    snprintf(out, 24, "%" PRIu64, rv);
}

static bool wants_table(const ts_request *rq, ts_res res)
{
    const char *accept = ts_request_header(rq, "Accept");
    return accept && ts_table_supported(res) && strstr(accept, "as=Table") &&
           strstr(accept, "g=meta.k8s.io");
}

static ts_include include_object(const ts_request *rq)
{
    const char *v = ts_request_query(rq, "includeObject");
    if (v && !strcmp(v, "None"))
        return TS_INCLUDE_NONE;
    if (v && !strcmp(v, "Object"))
        return TS_INCLUDE_OBJECT;
    return TS_INCLUDE_METADATA;
}

static bool dry_run(const ts_request *rq)
{
    const char *v = ts_request_query(rq, "dryRun");
    return v && !strcmp(v, "All");
}

/*
 * Go's encoding/json syntax errors, which the apiserver quotes for a body it
 * cannot read: a recursive descent over the same grammar that stops where
 * Go's scanner stops, with its wording.
 */
typedef struct gojson {
    const char *p, *end;
    ts_buf *msg;
} gojson;

static int gj_fail(gojson *g, const char *context)
{
    if (g->msg->data)
        return -1;
    if (g->p >= g->end) {
        ts_buf_puts(g->msg, "unexpected end of JSON input");
        return -1;
    }
    unsigned char c = (unsigned char)*g->p;
    if (c == '\'')
        ts_buf_printf(g->msg, "invalid character '\\'' %s", context);
    else if (c < 0x20 || c >= 0x7f)
        ts_buf_printf(g->msg, "invalid character '\\x%02x' %s", c, context);
    else
        ts_buf_printf(g->msg, "invalid character '%c' %s", c, context);
    return -1;
}

static void gj_ws(gojson *g)
{
    while (g->p < g->end && (*g->p == ' ' || *g->p == '\t' || *g->p == '\n' || *g->p == '\r'))
        g->p++;
}

static bool gj_is(gojson *g, char c)
{
    return g->p < g->end && *g->p == c;
}

static bool gj_digit(gojson *g)
{
    return g->p < g->end && *g->p >= '0' && *g->p <= '9';
}

static int gj_value(gojson *g, int depth);

static int gj_string(gojson *g)
{
    g->p++; /* the opening quote */
    for (;;) {
        if (g->p >= g->end)
            return gj_fail(g, "");
        unsigned char c = (unsigned char)*g->p;
        if (c == '"') {
            g->p++;
            return 0;
        }
        if (c < 0x20)
            return gj_fail(g, "in string literal");
        if (c == '\\') {
            g->p++;
            if (g->p >= g->end)
                return gj_fail(g, "");
            if (*g->p == 'u') {
                for (int i = 0; i < 4; i++) {
                    g->p++;
                    if (g->p >= g->end || !strchr("0123456789abcdefABCDEF", *g->p) || !*g->p)
                        return gj_fail(g, "in \\u hexadecimal character escape");
                }
            } else if (!*g->p || !strchr("\"\\/bfnrt", *g->p)) {
                return gj_fail(g, "in string escape code");
            }
        }
        g->p++;
    }
}

static int gj_number(gojson *g)
{
    if (gj_is(g, '-')) {
        g->p++;
        if (!gj_digit(g))
            return gj_fail(g, "in numeric literal");
    }
    if (gj_is(g, '0'))
        g->p++;
    else
        while (gj_digit(g))
            g->p++;
    if (gj_is(g, '.')) {
        g->p++;
        if (!gj_digit(g))
            return gj_fail(g, "after decimal point in numeric literal");
        while (gj_digit(g))
            g->p++;
    }
    if (gj_is(g, 'e') || gj_is(g, 'E')) {
        g->p++;
        if (gj_is(g, '+') || gj_is(g, '-'))
            g->p++;
        if (!gj_digit(g))
            return gj_fail(g, "in exponent of numeric literal");
        while (gj_digit(g))
            g->p++;
    }
    return 0;
}

static int gj_literal(gojson *g, const char *lit)
{
    g->p++;
    for (const char *l = lit + 1; *l; l++, g->p++) {
        if (!gj_is(g, *l)) {
            char ctx[64];
            snprintf(ctx, sizeof(ctx), "in literal %s (expecting '%c')", lit, *l);
            return gj_fail(g, ctx);
        }
    }
    return 0;
}

static int gj_value(gojson *g, int depth)
{
    gj_ws(g);
    if (g->p >= g->end || depth > 10000)
        return gj_fail(g, "looking for beginning of value");
    switch (*g->p) {
    case '{':
        g->p++;
        gj_ws(g);
        if (gj_is(g, '}')) {
            g->p++;
            return 0;
        }
        for (;;) {
            gj_ws(g);
            if (!gj_is(g, '"'))
                return gj_fail(g, "looking for beginning of object key string");
            if (gj_string(g) < 0)
                return -1;
            gj_ws(g);
            if (!gj_is(g, ':'))
                return gj_fail(g, "after object key");
            g->p++;
            if (gj_value(g, depth + 1) < 0)
                return -1;
            gj_ws(g);
            if (gj_is(g, '}')) {
                g->p++;
                return 0;
            }
            if (!gj_is(g, ','))
                return gj_fail(g, "after object key:value pair");
            g->p++;
        }
    case '[':
        g->p++;
        gj_ws(g);
        if (gj_is(g, ']')) {
            g->p++;
            return 0;
        }
        for (;;) {
            if (gj_value(g, depth + 1) < 0)
                return -1;
            gj_ws(g);
            if (gj_is(g, ']')) {
                g->p++;
                return 0;
            }
            if (!gj_is(g, ','))
                return gj_fail(g, "after array element");
            g->p++;
        }
    case '"':
        return gj_string(g);
    case 't':
        return gj_literal(g, "true");
    case 'f':
        return gj_literal(g, "false");
    case 'n':
        return gj_literal(g, "null");
    default:
        if (*g->p == '-' || gj_digit(g))
            return gj_number(g);
        return gj_fail(g, "looking for beginning of value");
    }
}

/* Writes Go's error for a body that is not valid JSON; false if it is valid. */
static bool go_json_syntax_error(const char *body, size_t len, ts_buf *msg)
{
    gojson g = {body, body + len, msg};
    if (gj_value(&g, 0) == 0) {
        gj_ws(&g);
        if (g.p < g.end)
            gj_fail(&g, "after top-level value");
    }
    return msg->data != NULL;
}

/* The apiserver's summary of a body it could not decode (summarizeData). */
static void summarize_body(ts_buf *m, const char *body, size_t len)
{
    size_t n = len > 30 ? 30 : len;
    if (len == 0) {
        ts_buf_puts(m, "<empty>");
        return;
    }
    if (body[0] == '{')
        ts_buf_append(m, body, n);
    else
        for (size_t i = 0; i < n; i++)
            ts_buf_printf(m, "%02x", (unsigned char)body[i]);
    if (len > 30)
        ts_buf_puts(m, " ...");
}

/*
 * Protobuf, just enough for the Namespace that `kubectl create namespace`
 * sends (client-go's typed clients speak protobuf to built-in types): the
 * "k8s\0" envelope (runtime.Unknown), then Namespace.metadata's name,
 * generateName, labels and annotations and spec.finalizers. Field numbers
 * are those of k8s.io/api/core/v1/generated.proto.
 */
typedef struct pbuf {
    const unsigned char *p, *end;
} pbuf;

static int pb_varint(pbuf *b, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 64 && b->p < b->end; shift += 7) {
        unsigned char c = *b->p++;
        *v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80))
            return 0;
    }
    return -1;
}

/* The next field: number, and its bytes for length-delimited ones. 1 at the end. */
static int pb_next(pbuf *b, uint64_t *num, pbuf *bytes)
{
    uint64_t key, v;
    if (b->p >= b->end)
        return 1;
    if (pb_varint(b, &key) < 0)
        return -1;
    *num = key >> 3;
    bytes->p = bytes->end = NULL;
    switch (key & 7) {
    case 0:
        return pb_varint(b, &v);
    case 1:
    case 5: {
        size_t n = (key & 7) == 1 ? 8 : 4;
        if ((size_t)(b->end - b->p) < n)
            return -1;
        b->p += n;
        return 0;
    }
    case 2:
        if (pb_varint(b, &v) < 0 || v > (uint64_t)(b->end - b->p))
            return -1;
        bytes->p = b->p;
        bytes->end = b->p + v;
        b->p += v;
        return 0;
    default:
        return -1;
    }
}

static json_t *pb_string(const pbuf *b)
{
    return json_stringn((const char *)b->p, (size_t)(b->end - b->p));
}

/* A map<string,string> entry into obj. */
static int pb_map_entry(pbuf e, json_t *obj)
{
    uint64_t num;
    pbuf f;
    json_t *k = NULL, *v = NULL;
    int rc;
    while ((rc = pb_next(&e, &num, &f)) == 0) {
        if (num == 1 && f.p)
            json_decref(k), k = pb_string(&f);
        else if (num == 2 && f.p)
            json_decref(v), v = pb_string(&f);
    }
    if (rc > 0 && json_is_string(k))
        json_object_set(obj, json_string_value(k), v ? v : json_string(""));
    json_decref(k);
    json_decref(v);
    return rc > 0 ? 0 : -1;
}

static int pb_namespace(pbuf b, json_t *out)
{
    uint64_t num, num2;
    pbuf f, g;
    int rc;
    json_t *meta = json_object(), *labels = json_object(), *ann = json_object();
    json_t *fin = json_array();
    json_object_set_new(out, "metadata", meta);
    while ((rc = pb_next(&b, &num, &f)) == 0) {
        if (num == 1 && f.p) { /* ObjectMeta */
            while ((rc = pb_next(&f, &num2, &g)) == 0) {
                if (num2 == 1 && g.p)
                    json_object_set_new(meta, "name", pb_string(&g));
                else if (num2 == 2 && g.p)
                    json_object_set_new(meta, "generateName", pb_string(&g));
                else if ((num2 == 11 || num2 == 12) && g.p &&
                         pb_map_entry(g, num2 == 11 ? labels : ann) < 0)
                    rc = -1;
                if (rc < 0)
                    break;
            }
        } else if (num == 2 && f.p) { /* NamespaceSpec */
            while ((rc = pb_next(&f, &num2, &g)) == 0)
                if (num2 == 1 && g.p)
                    json_array_append_new(fin, pb_string(&g));
        }
        if (rc < 0)
            break;
    }
    if (json_object_size(labels))
        json_object_set(meta, "labels", labels);
    if (json_object_size(ann))
        json_object_set(meta, "annotations", ann);
    if (json_array_size(fin))
        json_object_set_new(out, "spec", json_pack("{s:O}", "finalizers", fin));
    json_decref(labels);
    json_decref(ann);
    json_decref(fin);
    return rc > 0 ? 0 : -1;
}

/* A protobuf Namespace as the JSON object it stands for, or NULL. */
static json_t *namespace_from_protobuf(const char *body, size_t len)
{
    pbuf b = {(const unsigned char *)body, (const unsigned char *)body + len}, f, g, raw = {0};
    uint64_t num, num2;
    json_t *out = json_object();
    int rc;
    if (len < 4 || memcmp(body, "k8s\0", 4))
        goto fail;
    b.p += 4;
    while ((rc = pb_next(&b, &num, &f)) == 0) {
        if (num == 1 && f.p) { /* TypeMeta */
            while ((rc = pb_next(&f, &num2, &g)) == 0)
                if ((num2 == 1 || num2 == 2) && g.p)
                    json_object_set_new(out, num2 == 1 ? "apiVersion" : "kind", pb_string(&g));
        } else if (num == 2 && f.p) {
            raw = f;
        }
        if (rc < 0)
            goto fail;
    }
    if (rc < 0 || !raw.p || pb_namespace(raw, out) < 0)
        goto fail;
    return out;
fail:
    json_decref(out);
    return NULL;
}

/*
 * Parses the request body as a JSON object; on failure answers 400 with the
 * apiserver's words: "the object provided is unrecognized ...".
 */
static json_t *body_object(const ts_request *rq, ts_response *rs, ts_res res)
{
    const char *body = rq->body ? rq->body : "";
    const char *ct = ts_request_header(rq, "Content-Type");
    if (res == TS_NS && ct && !strncmp(ct, "application/vnd.kubernetes.protobuf", 35)) {
        json_t *ns = namespace_from_protobuf(body, rq->body_len);
        if (!ns) {
            ts_buf m = {0};
            ts_buf_printf(&m, "the object provided is unrecognized (must be of type Namespace): "
                              "provided data does not appear to be a protobuf message, expected "
                              "prefix [107 56 115 0] (");
            summarize_body(&m, body, rq->body_len);
            ts_buf_puts(&m, ")");
            bad_request(rs, m.data ? m.data : "invalid body");
            ts_buf_free(&m);
        }
        return ns;
    }
    if (ct && *ct && (strncmp(ct, "application/json", 16) || (ct[16] && ct[16] != ';'))) {
        /*
         * JSON only. A protobuf or YAML body gets the apiserver's answer to
         * a media type it does not know (its list names the ones it does):
         * client-go (1.32+) then falls back to JSON, as kubectl create
         * namespace does.
         */
        reply(rs, 415,
              ts_status_failure(415, "UnsupportedMediaType",
                                "the body of the request was in an unknown format - accepted "
                                "media types include: application/json, application/yaml, "
                                "application/vnd.kubernetes.protobuf",
                                NULL));
        return NULL;
    }
    json_t *j = json_loadb(body, rq->body_len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    if (j && json_is_object(j))
        return j;
    ts_buf why = {0}, m = {0};
    if (!go_json_syntax_error(body, rq->body_len, &why)) {
        /* Valid JSON but not an object: what decoding into TypeMeta says. */
        const char *t = json_is_array(j)    ? "array"
                        : json_is_string(j) ? "string"
                        : json_is_number(j) ? "number"
                        : json_is_null(j)   ? "null"
                                            : "bool";
        ts_buf_printf(&why,
                      "json: cannot unmarshal %s into Go value of type struct { APIVersion "
                      "string \"json:\\\"apiVersion,omitempty\\\"\"; Kind string "
                      "\"json:\\\"kind,omitempty\\\"\" }",
                      t);
    }
    ts_buf_printf(&m,
                  "the object provided is unrecognized (must be of type %s): couldn't get "
                  "version/kind; json parse error: %s (",
                  ts_resdefs[res].kind, why.data ? why.data : "");
    summarize_body(&m, body, rq->body_len);
    ts_buf_puts(&m, ")");
    bad_request(rs, m.data ? m.data : "invalid body");
    ts_buf_free(&m);
    ts_buf_free(&why);
    json_decref(j);
    return NULL;
}

/* Kinds the apiserver's scheme knows, per group-version (enough for messages). */
static bool registered_kind(const char *gv, const char *kind)
{
    static const char *const known[] = {"v1 Pod",
                                        "v1 Namespace",
                                        "v1 Service",
                                        "v1 ServiceAccount",
                                        "v1 ConfigMap",
                                        "v1 Secret",
                                        "v1 Node",
                                        "v1 Endpoints",
                                        "v1 Event",
                                        "v1 Status",
                                        "v1 List",
                                        "apps/v1 Deployment",
                                        "apps/v1 StatefulSet",
                                        "apps/v1 DaemonSet",
                                        "apps/v1 ReplicaSet",
                                        "coordination.k8s.io/v1 Lease",
                                        "coordination.k8s.io/v1beta1 Lease",
                                        "coordination.k8s.io/v1beta1 LeaseCandidate",
                                        "coordination.k8s.io/v1alpha2 LeaseCandidate"};
    char want[256];
    snprintf(want, sizeof(want), "%s %s", gv, kind);
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        if (!strcmp(known[i], want))
            return true;
    return false;
}

/*
 * apiVersion/kind, if present, must be this resource's; otherwise the
 * decoder's 400: an unknown kind, or a known one that does not convert.
 */
static bool check_type_meta(const json_t *body, ts_res res, ts_response *rs)
{
    const ts_resdef *rd = &ts_resdefs[res];
    const char *av = json_string_value(json_object_get(body, "apiVersion"));
    const char *kind = json_string_value(json_object_get(body, "kind"));
    if (!av || !*av)
        av = rd->api_version;
    if (!kind || !*kind)
        kind = rd->kind;
    if (!strcmp(av, rd->api_version) && !strcmp(kind, rd->kind))
        return true;
    /* Another served version of the same kind converts (v1alpha2 -> v1beta1). */
    if (res == TS_LC && !strcmp(av, "coordination.k8s.io/v1alpha2") && !strcmp(kind, rd->kind))
        return true;
    const char *slash = strchr(av, '/');
    const char *version = slash ? slash + 1 : av;
    ts_buf m = {0};
    ts_buf_printf(&m, "%s in version \"%s\" cannot be handled as a %s: ", kind, version, rd->kind);
    const char *group = *rd->group ? rd->group : "core";
    if (registered_kind(av, kind))
        ts_buf_printf(&m, "converting (%s.%s) to (%.*s.%s): unknown conversion", version, kind,
                      (int)strcspn(group, "."), group, rd->kind);
    else
        ts_buf_printf(&m,
                      "no kind \"%s\" is registered for version \"%s\" in scheme "
                      "\"pkg/api/legacyscheme/scheme.go:30\"",
                      kind, av);
    bad_request(rs, m.data);
    ts_buf_free(&m);
    return false;
}

static bool check_namespace(const json_t *body, const char *ns, ts_response *rs)
{
    const char *bns = ts_meta_str(body, "namespace");
    if (bns && *bns && strcmp(bns, ns)) {
        bad_request(rs, "the namespace of the provided object does not match the namespace sent "
                        "on the request");
        return false;
    }
    return true;
}

static bool check_name_matches(const json_t *body, const char *name, ts_response *rs)
{
    const char *bname = ts_meta_str(body, "name");
    if (!bname || strcmp(bname, name)) {
        ts_buf m = {0};
        if (!bname || !*bname)
            ts_buf_printf(&m,
                          "the name of the object (%s based on URL) was undeterminable: name "
                          "must be provided",
                          name);
        else
            ts_buf_printf(&m, "the name of the object (%s) does not match the name on the URL (%s)",
                          bname, name);
        bad_request(rs, m.data);
        ts_buf_free(&m);
        return false;
    }
    return true;
}

/* ---- discovery ---------------------------------------------------------- */

/*
 * Served: coordination.k8s.io/v1 Leases and v1 Pods and Namespaces.
 * Discovery only (so that `kubectl apply --dry-run=client -f deploy/`
 * validates the manifests of a leader-elected Deployment): apps/v1
 * Deployments, v1 Services and ServiceAccounts, rbac.authorization.k8s.io/v1
 * Roles and RoleBindings. Requests for those objects get 404 NotFound,
 * which kubectl's client-side dry run reads as "would be created".
 */
#define ALL_VERBS "create,delete,get,list,patch,update,watch"

static json_t *group_version(const char *group)
{
    char gv[64];
    snprintf(gv, sizeof(gv), "%s/v1", group);
    return json_pack("{s:s, s:s}", "groupVersion", gv, "version", "v1");
}

/* An entry of the APIGroupList (one version, v1). */
static json_t *group_entry(const char *group)
{
    return json_pack("{s:s, s:[o], s:o}", "name", group, "versions", group_version(group),
                     "preferredVersion", group_version(group));
}

/*
 * coordination.k8s.io: v1, and v1beta1 when LeaseCandidates are served (the
 * order of discovery_group.json; preferred stays v1).
 */
static json_t *coordination_entry(bool cle)
{
    json_t *g = group_entry("coordination.k8s.io");
    if (g && cle)
        json_array_append_new(json_object_get(g, "versions"),
                              json_pack("{s:s, s:s}", "groupVersion", "coordination.k8s.io/v1beta1",
                                        "version", "v1beta1"));
    return g;
}

/* The APIGroup document of group. */
static json_t *api_group(const char *group, bool cle)
{
    json_t *g =
        !strcmp(group, "coordination.k8s.io") ? coordination_entry(cle) : group_entry(group);
    if (g && (json_object_set_new(g, "kind", json_string("APIGroup")) < 0 ||
              json_object_set_new(g, "apiVersion", json_string("v1")) < 0)) {
        json_decref(g);
        g = NULL;
    }
    return g;
}

/* True when path is "/apis/GROUP" or "/apis/GROUP/" (suffix ""), or that
 * followed by suffix ("/v1"). */
static bool is_group_path(const char *path, const char *group, const char *suffix)
{
    size_t gl = strlen(group), sl = strlen(suffix);
    if (strncmp(path, "/apis/", 6) || strncmp(path + 6, group, gl) ||
        strncmp(path + 6 + gl, suffix, sl))
        return false;
    return path[6 + gl + sl] == '\0' || !strcmp(path + 6 + gl + sl, "/");
}

static json_t *api_resource(const char *name, const char *singular, bool namespaced,
                            const char *kind, const char *verbs, const char *short_name,
                            const char *hash)
{
    json_t *r = json_pack("{s:s, s:s, s:b, s:s}", "name", name, "singularName", singular,
                          "namespaced", namespaced, "kind", kind);
    json_t *v = json_array();
    char buf[128];
    snprintf(buf, sizeof(buf), "%s", verbs);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save))
        json_array_append_new(v, json_string(t));
    json_object_set_new(r, "verbs", v);
    if (!hash) /* a subresource ("pods/status"): no short names, categories or hash */
        return r;
    if (short_name)
        json_object_set_new(r, "shortNames", json_pack("[s]", short_name));
    if (!strcmp(kind, "Pod"))
        json_object_set_new(r, "categories", json_pack("[s]", "all"));
    json_object_set_new(r, "storageVersionHash", json_string(hash));
    return r;
}

/* The PATCH operation of a kind in an OpenAPI v3 stub. */
static json_t *openapi_patch(const char *group, const char *kind, const char *op_id)
{
    /*
     * kubectl's validator asks whether the PATCH operation of the kind takes
     * the fieldValidation parameter; if so it leaves validation to the server
     * and needs no schema. No requestBody: kubectl apply then computes its
     * patch from its built-in types instead of from this (empty) schema.
     */
    json_t *params = json_array();
    static const char *const names[] = {"dryRun", "fieldManager", "fieldValidation", "force"};
    for (size_t i = 0; i < 4; i++)
        json_array_append_new(params, json_pack("{s:s, s:s, s:{s:s, s:b}}", "name", names[i], "in",
                                                "query", "schema", "type",
                                                i == 3 ? "boolean" : "string", "uniqueItems", 1));
    char tag[64];
    snprintf(tag, sizeof(tag), "%.*s_v1", (int)strcspn(group[0] ? group : "core", "."),
             group[0] ? group : "core");
    return json_pack("{s:[s], s:s, s:o, s:{s:{s:s}}, s:s, s:{s:s, s:s, s:s}}", "tags", tag,
                     "operationId", op_id, "parameters", params, "responses", "200", "description",
                     "OK", "x-kubernetes-action", "patch", "x-kubernetes-group-version-kind",
                     "group", group, "kind", kind, "version", "v1");
}

/* One kind of an OpenAPI v3 stub: the path of an object and its PATCH operation. */
typedef struct openapi_kind {
    const char *path, *kind, *op_id;
} openapi_kind;

/* The OpenAPI v3 document for one group-version: enough for kubectl. */
static json_t *openapi_gv(const char *group, const openapi_kind *kinds, size_t n)
{
    json_t *paths = json_object();
    for (size_t k = 0; k < n; k++)
        json_object_set_new(
            paths, kinds[k].path,
            json_pack("{s:o}", "patch", openapi_patch(group, kinds[k].kind, kinds[k].op_id)));
    return json_pack("{s:s, s:{s:s, s:s}, s:o, s:{s:{}}}", "openapi", "3.0.0", "info", "title",
                     "Kubernetes", "version", "v1.32.0", "paths", paths, "components", "schemas");
}

static void handle_static(ts_server *srv, const ts_request *rq, ts_response *rs)
{
    const char *p = rq->path;
    char addr[96];
    json_t *j = NULL;

    if (strcmp(rq->method, "GET")) {
        method_not_allowed(rs);
        return;
    }
    if (!strncmp(p, "/healthz", 8) || !strncmp(p, "/livez", 6) || !strncmp(p, "/readyz", 7)) {
        rs->code = 200;
        rs->text = "ok";
        return;
    }
    if (!strcmp(p, "/version")) {
        j = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s}", "major", "1", "minor", "32",
                      "gitVersion", "v1.32.0+k8slease-testserver", "gitCommit",
                      "0000000000000000000000000000000000000000", "gitTreeState", "clean",
                      "buildDate", "2026-01-01T00:00:00Z", "goVersion", "go1.23.0", "compiler",
                      "gc", "platform", "linux/amd64");
    } else if (!strcmp(p, "/api") || !strcmp(p, "/api/")) {
        snprintf(addr, sizeof(addr), "%s%s%s:%u", strchr(srv->cfg.address, ':') ? "[" : "",
                 srv->cfg.address, strchr(srv->cfg.address, ':') ? "]" : "", srv->port);
        j = json_pack("{s:s, s:[s], s:[{s:s, s:s}]}", "kind", "APIVersions", "versions", "v1",
                      "serverAddressByClientCIDRs", "clientCIDR", "0.0.0.0/0", "serverAddress",
                      addr);
    } else if (!strcmp(p, "/apis") || !strcmp(p, "/apis/")) {
        j = json_pack("{s:s, s:s, s:[o, o, o]}", "kind", "APIGroupList", "apiVersion", "v1",
                      "groups", coordination_entry(srv->cfg.cle), group_entry("apps"),
                      group_entry("rbac.authorization.k8s.io"));
    } else if (is_group_path(p, "coordination.k8s.io", "")) {
        j = api_group("coordination.k8s.io", srv->cfg.cle);
    } else if (is_group_path(p, "apps", "")) {
        j = api_group("apps", false);
    } else if (is_group_path(p, "rbac.authorization.k8s.io", "")) {
        j = api_group("rbac.authorization.k8s.io", false);
    } else if (is_group_path(p, "apps", "/v1")) {
        j = json_pack("{s:s, s:s, s:s, s:[o]}", "kind", "APIResourceList", "apiVersion", "v1",
                      "groupVersion", "apps/v1", "resources",
                      api_resource("deployments", "deployment", true, "Deployment", ALL_VERBS,
                                   "deploy", "8aSe+NMegvE="));
    } else if (is_group_path(p, "rbac.authorization.k8s.io", "/v1")) {
        j = json_pack("{s:s, s:s, s:s, s:[o, o]}", "kind", "APIResourceList", "apiVersion", "v1",
                      "groupVersion", "rbac.authorization.k8s.io/v1", "resources",
                      api_resource("roles", "role", true, "Role", ALL_VERBS, NULL, "7FuwZcIIItM="),
                      api_resource("rolebindings", "rolebinding", true, "RoleBinding", ALL_VERBS,
                                   NULL, "eGsCzGH6b1g="));
    } else if (!strncmp(p, "/api/v1", 7)) {
        j = json_pack(
            "{s:s, s:s, s:[o, o, o, o, o]}", "kind", "APIResourceList", "groupVersion", "v1",
            "resources",
            api_resource("namespaces", "namespace", false, "Namespace", ALL_VERBS, "ns",
                         "Q3oi5N2YM8M="),
            api_resource("pods", "pod", true, "Pod", "create,delete,get,list,patch,update,watch",
                         "po", "xPOwRZ+Yhw8="),
            api_resource("pods/status", "", true, "Pod", "get,patch,update", NULL, NULL),
            api_resource("services", "service", true, "Service", ALL_VERBS, "svc", "0/CO1lhkEBI="),
            api_resource("serviceaccounts", "serviceaccount", true, "ServiceAccount", ALL_VERBS,
                         "sa", "pbx9ZvyFpBE="));
    } else if (srv->cfg.cle && is_group_path(p, "coordination.k8s.io", "/v1beta1")) {
        /* The real list also names deletecollection, which is not served here. */
        j = json_pack("{s:s, s:s, s:s, s:[o]}", "kind", "APIResourceList", "apiVersion", "v1",
                      "groupVersion", "coordination.k8s.io/v1beta1", "resources",
                      api_resource("leasecandidates", "leasecandidate", true, "LeaseCandidate",
                                   "create,delete,get,list,patch,update,watch", NULL,
                                   "lvME0iHWE20="));
    } else if (!strncmp(p, "/apis/coordination.k8s.io/v1", 28)) {
        j = json_pack("{s:s, s:s, s:s, s:[o]}", "kind", "APIResourceList", "apiVersion", "v1",
                      "groupVersion", "coordination.k8s.io/v1", "resources",
                      api_resource("leases", "lease", true, "Lease",
                                   "create,delete,get,list,patch,update,watch", NULL,
                                   "gqkMMb/YqFM="));
    } else if (!strcmp(p, "/openapi/v3") || !strcmp(p, "/openapi/v3/")) {
        j = json_pack("{s:{s:{s:s}, s:{s:s}, s:{s:s}, s:{s:s}}}", "paths", "api/v1",
                      "serverRelativeURL", "/openapi/v3/api/v1?hash=K8SLEASETESTSERVER1",
                      "apis/coordination.k8s.io/v1", "serverRelativeURL",
                      "/openapi/v3/apis/coordination.k8s.io/v1?hash=K8SLEASETESTSERVER1",
                      "apis/apps/v1", "serverRelativeURL",
                      "/openapi/v3/apis/apps/v1?hash=K8SLEASETESTSERVER1",
                      "apis/rbac.authorization.k8s.io/v1", "serverRelativeURL",
                      "/openapi/v3/apis/rbac.authorization.k8s.io/v1?hash=K8SLEASETESTSERVER1");
    } else if (!strcmp(p, "/openapi/v3/apis/coordination.k8s.io/v1")) {
        static const openapi_kind kinds[] = {
            {"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}", "Lease",
             "patchCoordinationV1NamespacedLease"}};
        j = openapi_gv("coordination.k8s.io", kinds, 1);
    } else if (!strcmp(p, "/openapi/v3/api/v1")) {
        static const openapi_kind kinds[] = {
            {"/api/v1/namespaces/{namespace}/pods/{name}", "Pod", "patchCoreV1NamespacedPod"},
            {"/api/v1/namespaces/{namespace}/services/{name}", "Service",
             "patchCoreV1NamespacedService"},
            {"/api/v1/namespaces/{namespace}/serviceaccounts/{name}", "ServiceAccount",
             "patchCoreV1NamespacedServiceAccount"}};
        j = openapi_gv("", kinds, 3);
    } else if (!strcmp(p, "/openapi/v3/apis/apps/v1")) {
        static const openapi_kind kinds[] = {
            {"/apis/apps/v1/namespaces/{namespace}/deployments/{name}", "Deployment",
             "patchAppsV1NamespacedDeployment"}};
        j = openapi_gv("apps", kinds, 1);
    } else if (!strcmp(p, "/openapi/v3/apis/rbac.authorization.k8s.io/v1")) {
        static const openapi_kind kinds[] = {
            {"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles/{name}", "Role",
             "patchRbacAuthorizationV1NamespacedRole"},
            {"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings/{name}",
             "RoleBinding", "patchRbacAuthorizationV1NamespacedRoleBinding"}};
        j = openapi_gv("rbac.authorization.k8s.io", kinds, 2);
    } else {
        /* /openapi/v2 is protobuf-first and large; kubectl copes without it. */
        not_found_path(rs);
        return;
    }
    if (!j)
        internal_error(rs);
    else
        reply(rs, 200, j);
}

/* ---- reads ---------------------------------------------------------------- */

static bool parse_filter(const ts_request *rq, const route *r, ts_filter *f, ts_response *rs)
{
    char *err = NULL;
    memset(f, 0, sizeof(*f));
    f->res = r->res;
    if (!r->all_namespaces && !(f->ns = strdup(r->ns)))
        goto oom;
    if (ts_field_selector_parse(ts_request_query(rq, "fieldSelector"), &f->fields, &err) < 0 ||
        ts_label_selector_parse(ts_request_query(rq, "labelSelector"), &f->labels, &err) < 0) {
        if (!err)
            goto oom;
        bad_request(rs, err);
        free(err);
        ts_filter_free(f);
        return false;
    }
    return true;
oom:
    ts_filter_free(f);
    internal_error(rs);
    return false;
}

static void handle_get(ts_server *srv, const ts_request *rq, const route *r, ts_response *rs)
{
    ts_obj *o = ts_store_get(&srv->store, r->res, r->ns, r->name);
    if (!o) {
        reply(rs, 404, ts_status_not_found(r->res, r->name));
        return;
    }
    if (wants_table(rq, r->res)) {
        json_t *t = ts_table_new(r->res, true);
        char rv[24];
        rv_string(o->rv, rv);
        if (!t || ts_table_add_row(t, r->res, o->json, include_object(rq), time(NULL)) < 0) {
            json_decref(t);
            internal_error(rs);
            return;
        }
        json_object_set_new(json_object_get(t, "metadata"), "resourceVersion", json_string(rv));
        reply(rs, 200, t);
        return;
    }
    reply(rs, 200, json_incref(o->json));
}

/* Continue tokens look like the apiserver's: base64 of {"v","rv","start"}. */
static char *make_continue(uint64_t rv, const ts_obj *last)
{
    json_t *j = json_object();
    ts_buf start = {0};
    ts_buf_printf(&start, "%s/%s", last->ns, last->name);
    ts_buf_append(&start, "", 1); /* the key just after: "<key>\x00" */
    json_object_set_new(j, "v", json_string("meta.k8s.io/v1"));
    json_object_set_new(j, "rv", json_integer((json_int_t)rv));
    json_object_set_new(j, "start", json_stringn(start.data, start.len));
    char *s = json_dumps(j, JSON_COMPACT);
    char *tok = s ? ts_base64_encode(s, strlen(s)) : NULL;
    free(s);
    json_decref(j);
    ts_buf_free(&start);
    return tok;
}

static char *parse_continue(const char *tok)
{
    unsigned char *raw;
    char *after = NULL;
    if (ts_base64_decode(tok, &raw) < 0)
        return NULL;
    json_t *j = json_loads((const char *)raw, JSON_ALLOW_NUL, NULL);
    const char *start = json_string_value(json_object_get(j, "start"));
    if (start && strchr(start, '/'))
        after = strdup(start); /* json_string_value stops at the NUL: "<ns>/<name>" */
    json_decref(j);
    free(raw);
    return after;
}

static void handle_list(ts_server *srv, const ts_request *rq, const route *r, ts_response *rs)
{
    const ts_resdef *rd = &ts_resdefs[r->res];
    ts_filter f;
    ts_obj **objs = NULL;
    size_t n = 0;
    char *after = NULL;
    char rv[24];

    long long limit = query_uint(rq, "limit");
    if (limit == -2) {
        bad_request(rs, "limit must be a non-negative integer");
        return;
    }
    if (limit > MAX_LIST_LIMIT)
        limit = 0;
    /* resourceVersionMatch=Exact on a compacted version: a real 410. */
    const char *match = ts_request_query(rq, "resourceVersionMatch");
    uint64_t want;
    if (match && !strcmp(match, "Exact") &&
        parse_rv(ts_request_query(rq, "resourceVersion"), &want) == 0 && want < srv->store.floor) {
        reply(rs, 410,
              ts_status_failure(410, "Expired",
                                "The resourceVersion for the provided list is too old.", NULL));
        return;
    }
    const char *cont = ts_request_query(rq, "continue");
    if (cont && *cont && !(after = parse_continue(cont))) {
        bad_request(rs, "continue key is not valid: illegal base64 data at input byte 0");
        return;
    }
    if (!parse_filter(rq, r, &f, rs)) {
        free(after);
        return;
    }
    if (ts_store_list(&srv->store, &f, after, &objs, &n) < 0) {
        internal_error(rs);
        goto out;
    }
    size_t take = (limit > 0 && (size_t)limit < n) ? (size_t)limit : n;
    rv_string(srv->store.rv, rv);

    json_t *meta = json_pack("{s:s}", "resourceVersion", rv);
    if (take < n) {
        char *tok = make_continue(srv->store.rv, objs[take - 1]);
        json_object_set_new(meta, "continue", json_string(tok ? tok : ""));
        json_object_set_new(meta, "remainingItemCount", json_integer((json_int_t)(n - take)));
        free(tok);
    }
    json_t *body;
    if (wants_table(rq, r->res)) {
        body = ts_table_new(r->res, true);
        json_object_set_new(body, "metadata", meta);
        ts_include inc = include_object(rq);
        time_t now = time(NULL);
        for (size_t i = 0; i < take; i++)
            ts_table_add_row(body, r->res, objs[i]->json, inc, now);
    } else {
        json_t *items = json_array();
        for (size_t i = 0; i < take; i++)
            json_array_append_new(items, ts_list_item(objs[i]->json));
        body = json_pack("{s:s, s:s, s:o, s:o}", "kind", rd->list_kind, "apiVersion",
                         rd->api_version, "metadata", meta, "items", items);
    }
    if (body)
        reply(rs, 200, body);
    else
        internal_error(rs);
out:
    free(objs);
    free(after);
    ts_filter_free(&f);
}

static void handle_watch(ts_server *srv, const ts_request *rq, const route *r, ts_response *rs)
{
    ts_watch_opts o = {0};
    const char *rvq = ts_request_query(rq, "resourceVersion");
    long long timeout = query_uint(rq, "timeoutSeconds");

    if (timeout == -2) {
        bad_request(rs, "timeoutSeconds must be a non-negative integer");
        return;
    }
    if (rvq && *rvq && strcmp(rvq, "0")) {
        if (parse_rv(rvq, &o.since) < 0) {
            ts_buf m = {0};
            ts_buf_printf(&m, "invalid resource version: %s", rvq);
            bad_request(rs, m.data);
            ts_buf_free(&m);
            return;
        }
        o.since_set = true;
    }
    if (!parse_filter(rq, r, &o.filter, rs))
        return;
    if (r->kind == RT_OBJECT) {
        /* A watch on a named object is a watch with metadata.name=NAME. */
        ts_selector extra;
        char *err = NULL;
        ts_buf sel = {0};
        ts_buf_printf(&sel, "metadata.name=%s", r->name);
        if (!sel.data || ts_field_selector_parse(sel.data, &extra, &err) < 0) {
            free(err);
            ts_buf_free(&sel);
            ts_filter_free(&o.filter);
            internal_error(rs);
            return;
        }
        ts_buf_free(&sel);
        ts_selreq *nr = realloc(o.filter.fields.reqs, (o.filter.fields.n + 1) * sizeof(*nr));
        if (!nr) {
            ts_selector_free(&extra);
            ts_filter_free(&o.filter);
            internal_error(rs);
            return;
        }
        nr[o.filter.fields.n++] = extra.reqs[0];
        o.filter.fields.reqs = nr;
        free(extra.reqs);
    }
    o.bookmarks = query_bool(rq, "allowWatchBookmarks");
    o.initial_events = query_bool(rq, "sendInitialEvents");
    o.timeout_ms = timeout > 0 ? timeout * 1000 : 0;
    o.as_table = wants_table(rq, r->res);
    o.include = include_object(rq);
    rs->stream = ts_watch_open(srv, rq->conn, rq->client, &o);
    if (rs->stream)
        rs->code = 200;
    else
        internal_error(rs);
}

/* ---- writes --------------------------------------------------------------- */

static json_t *stored_result(ts_store *st, ts_res res, json_t *obj, bool dry)
{
    if (dry)
        return obj;
    ts_obj *o = ts_store_put(st, res, obj);
    return o ? json_incref(o->json) : NULL;
}

/* "abcde"-style suffix for generateName, from the apiserver's alphabet. */
static void random_suffix(char out[6])
{
    static const char alphabet[] = "bcdfghjklmnpqrstvwxz2456789";
    char hex[11];
    if (ts_random_hex(hex, 5) < 0)
        snprintf(hex, sizeof(hex), "%010lx", (unsigned long)ts_mono_ms());
    for (int i = 0; i < 5; i++)
        out[i] = alphabet[strtoul((char[]){hex[2 * i], hex[2 * i + 1], 0}, NULL, 16) %
                          (sizeof(alphabet) - 1)];
    out[5] = '\0';
}

/*
 * The field manager of a write: ?fieldManager=, else the User-Agent up to its
 * first '/' (the apiserver's prefixFromUserAgent), at most 128 bytes.
 */
static void field_manager(const ts_request *rq, char out[129])
{
    const char *fm = ts_request_query(rq, "fieldManager");
    if (fm && *fm) {
        snprintf(out, 129, "%s", fm);
        return;
    }
    const char *ua = ts_request_header(rq, "User-Agent");
    if (!ua)
        ua = "";
    size_t n = strcspn(ua, "/");
    snprintf(out, 129, "%.*s", (int)(n > 128 ? 128 : n), ua);
}

/* NamespaceLifecycle admission: creating in a namespace that does not exist. */
static bool namespace_exists(ts_server *srv, ts_res res, const char *ns, ts_response *rs)
{
    if (res == TS_NS || ts_store_get(&srv->store, TS_NS, "", ns))
        return true;
    reply(rs, 404, ts_status_not_found(TS_NS, ns));
    return false;
}

/* Create a new object named name from body: 201 or an error. */
static void create_object(ts_server *srv, const ts_request *rq, ts_res res, const char *ns,
                          const char *name, const json_t *body, ts_response *rs)
{
    char uid[37], created[32], manager[129];
    unsigned code;
    json_t *status;
    time_t now = time(NULL);

    /* The apiserver's order: admission, then validation, then storage. */
    if (!namespace_exists(srv, res, ns, rs))
        return;
    ts_uuid4(uid);
    ts_format_time(now, created);
    ts_sysmeta sys = {ns, name, uid, created, NULL};
    json_t *obj = ts_object_build(res, body, &sys, NULL, &code, &status);
    if (!obj) {
        reply(rs, code, status);
        return;
    }
    if (ts_store_get(&srv->store, res, ns, name)) {
        json_decref(obj);
        reply(rs, 409, ts_status_already_exists(res, name));
        return;
    }
    field_manager(rq, manager);
    if (ts_managed_fields_update(res, obj, NULL, manager, NULL, now) < 0) {
        json_decref(obj);
        internal_error(rs);
        return;
    }
    json_t *out = stored_result(&srv->store, res, obj, dry_run(rq));
    if (out)
        reply(rs, 201, out);
    else
        internal_error(rs);
}

static void handle_create(ts_server *srv, const ts_request *rq, const route *r, ts_response *rs)
{
    if (r->all_namespaces && !r->cluster) {
        method_not_allowed(rs);
        return;
    }
    json_t *body = body_object(rq, rs, r->res);
    if (!body)
        return;
    if (check_type_meta(body, r->res, rs) && (r->cluster || check_namespace(body, r->ns, rs))) {
        const char *name = ts_meta_str(body, "name");
        const char *gen = ts_meta_str(body, "generateName");
        char generated[300];
        if ((!name || !*name) && gen && *gen && strlen(gen) < 250) {
            char suffix[6];
            random_suffix(suffix);
            snprintf(generated, sizeof(generated), "%s%s", gen, suffix);
            name = generated;
        }
        if (!name || !*name)
            reply(rs, 422, ts_status_name_required(r->res));
        else
            create_object(srv, rq, r->res, r->ns, name, body, rs);
    }
    json_decref(body);
}

/*
 * The update path shared by PUT and PATCH: preconditions from the new body
 * (metadata.resourceVersion, metadata.uid), then build, validate and store.
 */
static void update_object(ts_server *srv, const ts_request *rq, const route *r, ts_obj *cur,
                          const json_t *body, ts_response *rs)
{
    const char *want_rv = ts_meta_str(body, "resourceVersion");
    const char *want_uid = ts_meta_str(body, "uid");
    const char *cur_uid = ts_meta_str(cur->json, "uid");
    unsigned code;
    json_t *status;

    if (want_uid && *want_uid && strcmp(want_uid, cur_uid)) {
        /* The storage layer's error, quoted whole by the apiserver. */
        ts_buf m = {0};
        ts_buf_printf(&m,
                      "StorageError: invalid object, Code: 4, Key: /registry/%s/%s%s%s, "
                      "ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in "
                      "precondition: %s, UID in object meta: %s",
                      ts_resdefs[r->res].plural, r->ns, *r->ns ? "/" : "", r->name, want_uid,
                      cur_uid);
        reply(rs, 409, ts_status_conflict(r->res, r->name, m.data));
        ts_buf_free(&m);
        return;
    }
    if ((!want_rv || !*want_rv) && (r->res == TS_LEASE || r->res == TS_LC)) {
        /* The Lease and LeaseCandidate strategies do not allow unconditional updates. */
        ts_buf m = {0};
        ts_buf_printf(&m,
                      "%s \"%s\" is invalid: metadata.resourceVersion: Invalid value: 0: must "
                      "be specified for an update",
                      ts_resdefs[r->res].qualified, r->name);
        json_t *d =
            ts_status_details(r->name, ts_resdefs[r->res].group, ts_resdefs[r->res].plural, NULL);
        json_object_set_new(d, "causes",
                            json_pack("[{s:s, s:s, s:s}]", "reason", "FieldValueInvalid", "message",
                                      "Invalid value: 0: must be specified for an update", "field",
                                      "metadata.resourceVersion"));
        reply(rs, 422, ts_status_failure(422, "Invalid", m.data, d));
        ts_buf_free(&m);
        return;
    }
    if (want_rv && *want_rv) {
        uint64_t rv;
        if (parse_rv(want_rv, &rv) < 0) {
            /*
             * The apiserver passes the version to strconv.ParseUint and
             * answers its error as an internal one (500, no reason).
             */
            bool digits = strspn(want_rv, "0123456789") == strlen(want_rv);
            ts_buf m = {0};
            ts_buf_printf(&m, "strconv.ParseUint: parsing \"%s\": %s", want_rv,
                          digits ? "value out of range" : "invalid syntax");
            reply(rs, 500, ts_status_failure(500, "", m.data, NULL));
            ts_buf_free(&m);
            return;
        }
        if (rv != cur->rv) {
            reply(rs, 409,
                  ts_status_conflict(r->res, r->name,
                                     "the object has been modified; please apply your changes "
                                     "to the latest version and try again"));
            return;
        }
    }
    ts_sysmeta sys = {r->ns, r->name, cur_uid, ts_meta_str(cur->json, "creationTimestamp"),
                      ts_meta_str(cur->json, "deletionTimestamp")};
    json_t *obj = r->status ? ts_object_build_status(r->res, body, &sys, cur->json, &code, &status)
                            : ts_object_build(r->res, body, &sys, cur->json, &code, &status);
    if (!obj) {
        reply(rs, code, status);
        return;
    }
    /* An update that changes nothing is not written (no new version, no event). */
    json_t *meta = json_object_get(obj, "metadata");
    json_t *cur_meta = json_object_get(cur->json, "metadata");
    json_object_set(meta, "resourceVersion", json_object_get(cur_meta, "resourceVersion"));
    if (json_object_get(cur_meta, "managedFields"))
        json_object_set(meta, "managedFields", json_object_get(cur_meta, "managedFields"));
    if (json_equal(obj, cur->json)) {
        json_decref(obj);
        reply(rs, 200, json_incref(cur->json));
        return;
    }
    char manager[129];
    field_manager(rq, manager);
    if (ts_managed_fields_update(r->res, obj, cur->json, manager, r->status ? "status" : NULL,
                                 time(NULL)) < 0) {
        json_decref(obj);
        internal_error(rs);
        return;
    }
    json_t *out = stored_result(&srv->store, r->res, obj, dry_run(rq));
    if (out)
        reply(rs, 200, out);
    else
        internal_error(rs);
}

static void handle_update(ts_server *srv, const ts_request *rq, const route *r, ts_response *rs)
{
    json_t *body = body_object(rq, rs, r->res);
    if (!body)
        return;
    if (check_type_meta(body, r->res, rs) && check_name_matches(body, r->name, rs) &&
        (r->cluster || check_namespace(body, r->ns, rs))) {
        ts_obj *cur = ts_store_get(&srv->store, r->res, r->ns, r->name);
        if (cur) {
            update_object(srv, rq, r, cur, body, rs);
        } else if (r->status) {
            /* A subresource is never created by an update. */
            reply(rs, 404, ts_status_not_found(r->res, r->name));
        } else {
            /* Leases (and Pods) allow create-on-update: 201_put_create_on_update.json. */
            const char *uid = ts_meta_str(body, "uid");
            if (uid && *uid) {
                /* The UID precondition cannot hold for an object that is gone. */
                ts_buf m = {0};
                ts_buf_printf(&m,
                              "Precondition failed: UID in precondition: %s, UID in object "
                              "meta: ",
                              uid);
                reply(rs, 409, ts_status_conflict(r->res, r->name, m.data));
                ts_buf_free(&m);
            } else {
                create_object(srv, rq, r->res, r->ns, r->name, body, rs);
            }
        }
    }
    json_decref(body);
}

static void handle_patch(ts_server *srv, const ts_request *rq, const route *r, ts_response *rs)
{
    const char *ct = ts_request_header(rq, "Content-Type");
    /*
     * Strategic merge patch is served as a JSON merge patch: for the fields
     * these objects have (maps of strings and scalars) the two agree.
     */
    if (!ct || (strncmp(ct, "application/merge-patch+json", 28) &&
                strncmp(ct, "application/strategic-merge-patch+json", 38))) {
        /* The apiserver says no more than the status text. */
        reply(rs, 415,
              ts_status_failure(415, "UnsupportedMediaType", "415: Unsupported Media Type",
                                json_object()));
        return;
    }
    ts_obj *cur = ts_store_get(&srv->store, r->res, r->ns, r->name);
    if (!cur) {
        reply(rs, 404, ts_status_not_found(r->res, r->name));
        return;
    }
    json_error_t err;
    json_t *patch = json_loadb(rq->body ? rq->body : "", rq->body_len, 0, &err);
    if (!patch || !json_is_object(patch)) {
        bad_request(rs, patch ? "the patch must be a JSON object" : err.text);
        json_decref(patch);
        return;
    }
    json_t *merged = ts_merge_patch(cur->json, patch);
    json_decref(patch);
    if (!merged) {
        internal_error(rs);
        return;
    }
    /* The patched object must decode: otherwise a 422 that quotes it (not the 400 of a PUT). */
    char *why = ts_object_decode_error(r->res, merged);
    if (why)
        reply(rs, 422, ts_status_patch_invalid(merged, why));
    else if (check_type_meta(merged, r->res, rs) && check_name_matches(merged, r->name, rs) &&
             (r->cluster || check_namespace(merged, r->ns, rs)))
        update_object(srv, rq, r, cur, merged, rs);
    free(why);
    json_decref(merged);
}

/*
 * DELETE of a Namespace answers what the apiserver answers - the Namespace,
 * now Terminating with a deletionTimestamp - and then does at once what a
 * cluster's namespace controller does soon after: deletes what is inside,
 * then the Namespace (events: MODIFIED, DELETED per object, DELETED). An
 * envtest apiserver has no such controller: there it stays Terminating.
 */
static void delete_namespace(ts_server *srv, const ts_request *rq, ts_obj *cur, ts_response *rs)
{
    static const char *const immortal[] = {"default", "kube-system", "kube-public"};
    for (size_t i = 0; i < 3; i++) {
        if (!strcmp(cur->name, immortal[i])) {
            ts_buf m = {0};
            ts_buf_printf(&m, "namespaces \"%s\" is forbidden: this namespace may not be deleted",
                          cur->name);
            reply(rs, 403,
                  ts_status_failure(403, "Forbidden", m.data,
                                    ts_status_details(cur->name, "", "namespaces", NULL)));
            ts_buf_free(&m);
            return;
        }
    }
    char now[32];
    ts_format_time(time(NULL), now);
    json_t *term = json_object(), *meta = json_object();
    const char *k;
    json_t *v;
    json_object_foreach(cur->json, k, v) json_object_set(term, k, v);
    json_object_foreach(json_object_get(cur->json, "metadata"), k, v)
    {
        json_object_set(meta, k, v);
        if (!strcmp(k, "creationTimestamp"))
            json_object_set_new(meta, "deletionTimestamp", json_string(now));
    }
    json_object_set_new(term, "metadata", meta);
    json_object_set_new(term, "status", json_pack("{s:s}", "phase", "Terminating"));
    if (dry_run(rq)) {
        reply(rs, 200, term);
        return;
    }
    char *name = strdup(cur->name);
    ts_obj *o = name ? ts_store_put(&srv->store, TS_NS, term) : (json_decref(term), NULL);
    if (!o) {
        free(name);
        internal_error(rs);
        return;
    }
    reply(rs, 200, json_incref(o->json));
    for (int res = 0; res < TS_NRES; res++) {
        ts_filter f = {.res = (ts_res)res, .ns = name};
        ts_obj **objs;
        size_t n;
        if (res == TS_NS || ts_store_list(&srv->store, &f, NULL, &objs, &n) < 0)
            continue;
        for (size_t i = 0; i < n; i++)
            ts_store_delete(&srv->store, objs[i]);
        free(objs);
    }
    ts_store_delete(&srv->store, o);
    free(name);
}

static void handle_delete(ts_server *srv, const ts_request *rq, const route *r, ts_response *rs)
{
    ts_obj *cur = ts_store_get(&srv->store, r->res, r->ns, r->name);
    if (!cur) {
        reply(rs, 404, ts_status_not_found(r->res, r->name));
        return;
    }
    /* DeleteOptions.preconditions, if a body was sent. */
    if (rq->body_len) {
        json_t *opts = json_loadb(rq->body, rq->body_len, 0, NULL);
        json_t *pre = json_object_get(opts, "preconditions");
        const char *uid = json_string_value(json_object_get(pre, "uid"));
        const char *rvs = json_string_value(json_object_get(pre, "resourceVersion"));
        const char *cur_uid = ts_meta_str(cur->json, "uid");
        uint64_t rv = 0;
        ts_buf m = {0};
        if (!opts)
            ts_buf_puts(&m, "");
        else if (uid && strcmp(uid, cur_uid))
            ts_buf_printf(&m,
                          "the UID in the precondition (%s) does not match the UID in record "
                          "(%s). The object might have been deleted and then recreated",
                          uid, cur_uid);
        else if (rvs && (parse_rv(rvs, &rv) < 0 || rv != cur->rv))
            ts_buf_printf(&m,
                          "the ResourceVersion in the precondition (%s) does not match the "
                          "ResourceVersion in record (%" PRIu64
                          "). The object might have been modified",
                          rvs, cur->rv);
        json_decref(opts);
        if (m.data) {
            if (*m.data)
                reply(rs, 409, ts_status_conflict_kind(r->res, r->name, m.data));
            else
                bad_request(rs, "the body of DELETE must be DeleteOptions JSON");
            ts_buf_free(&m);
            return;
        }
    }
    if (r->res == TS_NS) {
        delete_namespace(srv, rq, cur, rs);
        return;
    }
    json_t *st = ts_status_deleted(r->res, r->name, ts_meta_str(cur->json, "uid"));
    if (!st || (!dry_run(rq) && ts_store_delete(&srv->store, cur) < 0)) {
        json_decref(st);
        internal_error(rs);
        return;
    }
    reply(rs, 200, st);
}

void ts_api_handle(ts_server *srv, const ts_request *rq, ts_response *rs)
{
    route r = parse_route(rq->path, srv->cfg.cle);
    const char *m = rq->method;

    switch (r.kind) {
    case RT_NONE:
        not_found_path(rs);
        return;
    case RT_STATIC:
        handle_static(srv, rq, rs);
        return;
    case RT_COLLECTION:
        if (!strcmp(m, "GET")) {
            if (query_bool(rq, "watch"))
                handle_watch(srv, rq, &r, rs);
            else
                handle_list(srv, rq, &r, rs);
        } else if (!strcmp(m, "POST")) {
            handle_create(srv, rq, &r, rs);
        } else {
            method_not_allowed(rs);
        }
        return;
    case RT_OBJECT:
        if (r.status) {
            /* get, update, patch; a watch parameter is ignored, as by the apiserver. */
            if (!strcmp(m, "GET"))
                handle_get(srv, rq, &r, rs);
            else if (!strcmp(m, "PUT"))
                handle_update(srv, rq, &r, rs);
            else if (!strcmp(m, "PATCH"))
                handle_patch(srv, rq, &r, rs);
            else
                method_not_allowed(rs);
            return;
        }
        if (!strcmp(m, "GET")) {
            if (query_bool(rq, "watch"))
                handle_watch(srv, rq, &r, rs);
            else
                handle_get(srv, rq, &r, rs);
        } else if (!strcmp(m, "PUT")) {
            handle_update(srv, rq, &r, rs);
        } else if (!strcmp(m, "PATCH")) {
            handle_patch(srv, rq, &r, rs);
        } else if (!strcmp(m, "DELETE")) {
            handle_delete(srv, rq, &r, rs);
        } else {
            method_not_allowed(rs);
        }
        return;
    }
}
