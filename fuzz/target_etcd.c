/* Fuzz target "etcd" (fuzz/corpus/etcd): the etcd gateway's bodies, through every decoder of
 * etcd/codec.h, against a reference. See targets.h. */
#include "etcd_checks.h"
#include "targets.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "core/common.h"
#include "etcd/codec.h"
#include "core/http.h"
#include "k8s/kubeconfig.h"
#include "k8s/codec.h"

/* ------------------------------------------------------------------------ */
/* etcd gateway: decoders                                                   */
/* ------------------------------------------------------------------------ */

/* ---- the reference: the rules of etcd/codec.h, read with jansson ---- */

/* An int64 member: a JSON integer, or a string of an optional '-' and
 * digits within int64 (strtoll decides). Absent or null: 0, not present.
 * -1 when it is anything else. */
static int ref_int64(const json_t *obj, const char *key, int64_t *out, int *present)
{
    json_t *v = json_object_get(obj, key);

    *out = 0;
    if (present)
        *present = 0;
    if (!v || json_is_null(v))
        return 0;
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
    } else if (json_is_string(v)) {
        const char *s = json_string_value(v), *digits = s + (s[0] == '-');
        char *end;
        long long x;

        if (!digits[0] || strspn(digits, "0123456789") != strlen(digits))
            return -1;
        errno = 0;
        x = strtoll(s, &end, 10);
        if (errno == ERANGE || *end)
            return -1;
        *out = x;
    } else {
        return -1;
    }
    if (present)
        *present = 1;
    return 0;
}

static int ref_bool(const json_t *obj, const char *key, int *out)
{
    json_t *v = json_object_get(obj, key);

    *out = json_is_true(v);
    return !v || json_is_null(v) || json_is_boolean(v) ? 0 : -1;
}

/* A member of the given type, or absent / null (*out NULL). */
static int ref_member(const json_t *obj, const char *key, json_type type, json_t **out)
{
    json_t *v = json_object_get(obj, key);

    *out = NULL;
    if (!v || json_is_null(v))
        return 0;
    if (json_typeof(v) != type)
        return -1;
    *out = v;
    return 0;
}

/* Base64 bytes (the base64 target checks the decoder); absent/null: "". */
static int ref_bytes(const json_t *obj, const char *key, char **out, size_t *len)
{
    json_t *v = json_object_get(obj, key);
    int ok;

    *out = NULL;
    *len = 0;
    if (v && !json_is_null(v) && !json_is_string(v))
        return -1;
    if (!v || json_is_null(v))
        *out = kl__base64_decode("", 0, len, &ok);
    else
        *out = kl__base64_decode(json_string_value(v), json_string_length(v), len, &ok);
    CHECK(*out || !ok);
    return *out ? 0 : -1;
}

static int ref_header(const json_t *msg, int64_t *rev)
{
    json_t *hdr;

    *rev = 0;
    if (ref_member(msg, "header", JSON_OBJECT, &hdr) < 0)
        return -1;
    return ref_int64(hdr, "revision", rev, NULL);
}

/* A kv: an object whose "key" member exists (null reads as ""). */
static int ref_kv(const json_t *obj, kl__etcd_kv *kv)
{
    if (!json_is_object(obj) || !json_object_get(obj, "key"))
        return -1;
    if (ref_bytes(obj, "key", &kv->key, &kv->key_len) < 0 ||
        ref_bytes(obj, "value", &kv->value, &kv->value_len) < 0)
        return -1;
    if (ref_int64(obj, "create_revision", &kv->create_revision, NULL) < 0 ||
        ref_int64(obj, "mod_revision", &kv->mod_revision, NULL) < 0 ||
        ref_int64(obj, "version", &kv->version, NULL) < 0 ||
        ref_int64(obj, "lease", &kv->lease, NULL) < 0)
        return -1;
    return 0;
}

/* A RangeResponse (kl__etcd_range_clear frees *r whatever this returns). */
static int ref_range(const json_t *msg, kl__etcd_range *r)
{
    json_t *kvs;
    size_t n;

    if (ref_header(msg, &r->revision) < 0 || ref_bool(msg, "more", &r->more) < 0 ||
        ref_int64(msg, "count", &r->count, NULL) < 0 ||
        ref_member(msg, "kvs", JSON_ARRAY, &kvs) < 0)
        return -1;
    n = json_array_size(kvs);
    if (n == 0)
        return 0;
    r->kvs = kl__calloc(n, sizeof(*r->kvs));
    CHECK(r->kvs != NULL);
    r->n_kvs = n;
    for (size_t i = 0; i < n; i++)
        if (ref_kv(json_array_get(kvs, i), &r->kvs[i]) < 0)
            return -1;
    return 0;
}

/* A TxnResponse: each response is the first of response_range,
 * response_put, response_delete_range that is not absent or null (and it
 * must be an object). */
static int ref_txn(const json_t *msg, kl__etcd_txn *t)
{
    static const char *const kinds[] = {"response_range", "response_put", "response_delete_range"};
    static const kl__etcd_op_type types[] = {KL_ETCD_OP_RANGE, KL_ETCD_OP_PUT, KL_ETCD_OP_DELETE};
    json_t *resps;
    size_t n;

    if (ref_header(msg, &t->revision) < 0 || t->revision <= 0 ||
        ref_bool(msg, "succeeded", &t->succeeded) < 0 ||
        ref_member(msg, "responses", JSON_ARRAY, &resps) < 0)
        return -1;
    n = json_array_size(resps);
    if (n == 0)
        return 0;
    t->ops = kl__calloc(n, sizeof(*t->ops));
    CHECK(t->ops != NULL);
    t->n_ops = n;
    for (size_t i = 0; i < n; i++) {
        json_t *op = json_array_get(resps, i), *inner = NULL;
        size_t k;

        if (!json_is_object(op))
            return -1;
        for (k = 0; k < KL_ARRAY_LEN(kinds) && !inner; k++)
            if (ref_member(op, kinds[k], JSON_OBJECT, &inner) < 0)
                return -1;
        if (!inner)
            return -1;
        t->ops[i].type = types[k - 1];
        if (ref_range(inner, &t->ops[i].range) < 0)
            return -1;
        if (t->ops[i].type == KL_ETCD_OP_DELETE &&
            ref_int64(inner, "deleted", &t->ops[i].deleted, NULL) < 0)
            return -1;
    }
    return 0;
}

/* A WatchResponse; an event's "type" is absent, null, "PUT" or 0 (PUT),
 * "DELETE" or 1 (DELETE), and its kv is required. */
static int ref_watch(const json_t *msg, kl__etcd_watch_msg *m)
{
    json_t *events, *reason;
    size_t n;

    if (ref_header(msg, &m->revision) < 0 || ref_int64(msg, "watch_id", &m->watch_id, NULL) < 0 ||
        ref_bool(msg, "created", &m->created) < 0 || ref_bool(msg, "canceled", &m->canceled) < 0 ||
        ref_bool(msg, "fragment", &m->fragment) < 0 ||
        ref_int64(msg, "compact_revision", &m->compact_revision, NULL) < 0 ||
        ref_member(msg, "events", JSON_ARRAY, &events) < 0 ||
        ref_member(msg, "cancel_reason", JSON_STRING, &reason) < 0)
        return -1;
    m->cancel_reason = kl__strdup(reason ? json_string_value(reason) : "");
    CHECK(m->cancel_reason != NULL);
    n = json_array_size(events);
    if (n == 0)
        return 0;
    m->events = kl__calloc(n, sizeof(*m->events));
    CHECK(m->events != NULL);
    m->n_events = n;
    for (size_t i = 0; i < n; i++) {
        json_t *ev = json_array_get(events, i), *type, *kv;

        if (!json_is_object(ev))
            return -1;
        type = json_object_get(ev, "type");
        if (!type || json_is_null(type) ||
            (json_is_string(type) && !strcmp(json_string_value(type), "PUT")) ||
            (json_is_integer(type) && json_integer_value(type) == 0))
            m->events[i].type = KL_ETCD_EVENT_PUT;
        else if ((json_is_string(type) && !strcmp(json_string_value(type), "DELETE")) ||
                 (json_is_integer(type) && json_integer_value(type) == 1))
            m->events[i].type = KL_ETCD_EVENT_DELETE;
        else
            return -1;
        if (ref_member(ev, "kv", JSON_OBJECT, &kv) < 0 || !kv || ref_kv(kv, &m->events[i].kv) < 0)
            return -1;
    }
    return 0;
}

/* The three error shapes of etcd/codec.h: {"error": {"grpc_code", "message"}};
 * any "error" member with "code" and "message" beside it (an empty or
 * absent "message" gives way to a string "error"); {"code": integer,
 * "message": string} with neither "header" nor "result". A code that is
 * not an integer within int32 reads as 0. */
static int ref_error_shape(const json_t *root, int *code, const char **message)
{
    json_t *e = json_object_get(root, "error"), *c, *m;

    *code = 0;
    *message = "";
    if (!json_is_object(root))
        return 0;
    if (json_is_object(e)) {
        c = json_object_get(e, "grpc_code");
        m = json_object_get(e, "message");
    } else if (e || (!json_object_get(root, "header") && !json_object_get(root, "result") &&
                     json_is_integer(json_object_get(root, "code")) &&
                     json_is_string(json_object_get(root, "message")))) {
        c = json_object_get(root, "code");
        m = json_object_get(root, "message");
        if (!json_is_string(m) || !json_string_value(m)[0])
            m = e;
    } else {
        return 0;
    }
    if (json_is_integer(c) && json_integer_value(c) >= INT32_MIN &&
        json_integer_value(c) <= INT32_MAX)
        *code = (int)json_integer_value(c);
    if (json_is_string(m))
        *message = json_string_value(m);
    return 1;
}

/* What every decoder should answer for body: err[d], and out[d] when 0.
 * gateway is set when the body is an error body (the decoders then give
 * its code and "etcd: ..."). */
typedef struct etcd_expect {
    int err[DEC_COUNT];
    etcd_out out[DEC_COUNT];
    int gateway;
} etcd_expect;

static void expect_all(etcd_expect *x, int err)
{
    for (int d = 0; d < DEC_COUNT; d++)
        x->err[d] = err;
}

static void ref_expect(etcd_expect *x, const json_t *root)
{
    const char *message;
    json_t *result;
    const json_t *msg;
    kl__etcd_lease l = {0};
    int code, has_id, has_ttl, lease_ok;

    memset(x, 0, sizeof(*x));
    if (!json_is_object(root)) {
        expect_all(x, K8SLEASE_EPROTOCOL);
        return;
    }
    if (ref_error_shape(root, &code, &message)) {
        expect_all(x, kl__etcd_error_code(code, message));
        x->gateway = 1;
        x->err[DEC_ERROR] = 0;
        x->out[DEC_ERROR].error.grpc_code = code;
        x->out[DEC_ERROR].error.message = (char *)message; /* borrowed from root */
        return;
    }
    expect_all(x, K8SLEASE_EPROTOCOL);
    if (ref_member(root, "result", JSON_OBJECT, &result) < 0)
        return;
    msg = result ? result : root;

    lease_ok = ref_header(msg, &l.revision) == 0 && ref_int64(msg, "ID", &l.id, &has_id) == 0 &&
               ref_int64(msg, "TTL", &l.ttl, &has_ttl) == 0 &&
               ref_int64(msg, "grantedTTL", &l.granted_ttl, NULL) == 0;
    if (lease_ok && has_id && l.id > 0 && has_ttl && l.ttl > 0) {
        x->err[DEC_GRANT] = 0;
        x->out[DEC_GRANT].lease = l;
    }
    if (lease_ok) {
        /* keepalive: without an ID or with a negative TTL the lease is gone */
        x->err[DEC_KEEPALIVE] = 0;
        x->out[DEC_KEEPALIVE].lease = l;
        if (!has_id || l.ttl < 0)
            x->out[DEC_KEEPALIVE].lease.ttl = 0;
    }
    if (lease_ok && has_id) {
        /* timetolive: a negative TTL is -1, grantedTTL as given */
        x->err[DEC_TIMETOLIVE] = 0;
        x->out[DEC_TIMETOLIVE].lease = l;
        if (l.ttl < 0)
            x->out[DEC_TIMETOLIVE].lease.ttl = -1;
    }
    if (ref_header(msg, &x->out[DEC_HEADER].revision) == 0)
        x->err[DEC_HEADER] = 0;
    if (ref_range(msg, &x->out[DEC_RANGE].range) == 0 && x->out[DEC_RANGE].range.revision > 0)
        x->err[DEC_RANGE] = 0;
    if (ref_txn(msg, &x->out[DEC_TXN].txn) == 0)
        x->err[DEC_TXN] = 0;
    if (ref_watch(msg, &x->out[DEC_WATCH].watch) == 0)
        x->err[DEC_WATCH] = 0;
    {
        json_t *t = json_object_get(msg, "token");

        if (json_is_string(t) && json_string_value(t)[0]) {
            x->err[DEC_AUTH] = 0;
            x->out[DEC_AUTH].token = (char *)json_string_value(t); /* borrowed */
        }
    }
}

static void ref_expect_free(etcd_expect *x)
{
    kl__etcd_range_clear(&x->out[DEC_RANGE].range);
    kl__etcd_txn_clear(&x->out[DEC_TXN].txn);
    kl__etcd_watch_msg_clear(&x->out[DEC_WATCH].watch);
}

/* Runs every decoder on body and compares with the reference; msgs gets
 * each decoder's error message ("" on success). */
static void check_etcd_body(const char *body, size_t len, char msgs[DEC_COUNT][320])
{
    json_error_t jerr;
    json_t *root = json_loadb(body, len, JSON_DECODE_ANY, &jerr);
    etcd_expect x;

    if (root) {
        ref_expect(&x, root);
    } else {
        memset(&x, 0, sizeof(x));
        expect_all(&x, K8SLEASE_EPROTOCOL);
    }

    for (int i = 0; i < DEC_COUNT; i++) {
        etcd_dec d = (etcd_dec)i;
        etcd_out o;
        const char *m;
        int err;

        /* Garbage in: a decoder must not rely on a zeroed output. */
        memset(&o, 0xa5, sizeof(o));
        kl__error_clear();
        err = etcd_decode(d, &o, body, len);
        m = kl__error_get();
        snprintf(msgs[d], 320, "%s", err < 0 ? m : "");
        CHECK_MSG(err == x.err[d], "%s: got %d, the reference says %d (%s)", etcd_what[d], err,
                  x.err[d], m);
        if (err < 0) {
            CHECK_MSG(etcd_out_is_zero(d, &o), "%s: error %d left an output", etcd_what[d], err);
            /* The message names the response, or is the gateway's. */
            if (x.gateway && d != DEC_ERROR)
                CHECK_MSG(!strncmp(m, "etcd: ", 6), "%s: message \"%s\"", etcd_what[d], m);
            else
                CHECK_MSG(!strncmp(m, etcd_what[d], strlen(etcd_what[d])), "%s: message \"%s\"",
                          etcd_what[d], m);
            continue;
        }
        check_success(d, &o);
        CHECK_MSG(etcd_out_eq(d, &o, &x.out[d]), "%s: decoded output differs from the reference",
                  etcd_what[d]);
        etcd_out_clear(d, &o);
    }
    ref_expect_free(&x);
    json_decref(root);
}

/* Input: one response body (or one line of a watch stream), given to every
 * decoder. When it is a bare message (a JSON object, not an error body,
 * without "result") it is decoded again inside {"result": ...}, which must
 * change nothing, error messages included. */
int kl_fuzz_etcd(const uint8_t *data, size_t size)
{
    static char plain[DEC_COUNT][320], wrapped[DEC_COUNT][320];
    const char *body = (const char *)data;
    json_t *root = json_loadb(body, size, JSON_DECODE_ANY, NULL), *w;
    int code;
    const char *message;
    char *wbody;
    size_t wlen;

    check_etcd_body(body, size, plain);
    if (!json_is_object(root) || ref_error_shape(root, &code, &message) ||
        (json_object_get(root, "result") && !json_is_null(json_object_get(root, "result")))) {
        json_decref(root);
        return 0;
    }
    json_decref(root);

    wlen = size + sizeof("{\"result\":}") - 1;
    wbody = malloc(wlen);
    CHECK(wbody != NULL);
    memcpy(wbody, "{\"result\":", 10);
    memcpy(wbody + 10, data, size);
    wbody[wlen - 1] = '}';
    /* One level deeper can pass jansson's depth limit: nothing to compare. */
    if ((w = json_loadb(wbody, wlen, 0, NULL)) != NULL) {
        json_decref(w);
        check_etcd_body(wbody, wlen, wrapped);
        for (int d = 0; d < DEC_COUNT; d++)
            CHECK_MSG(strcmp(plain[d], wrapped[d]) == 0, "%s: \"%s\" bare, \"%s\" wrapped",
                      etcd_what[d], plain[d], wrapped[d]);
    }
    free(wbody);
    return 0;
}
