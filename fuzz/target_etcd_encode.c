/* Fuzz target "etcd_encode" (fuzz/corpus/etcd_encode): the etcd request encoders, and decoders on
 * bodies built to order. See targets.h. */
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
/* etcd gateway: encoders, and decoders on bodies built to order            */
/* ------------------------------------------------------------------------ */

/* Structured input, read front to back; bytes past the end read as 0. */
typedef struct fz_in {
    const uint8_t *p;
    size_t n;
} fz_in;

/* A byte string of the input, copied to a buffer of exactly its size so
 * that ASan sees a read past its end. */
typedef struct fz_bytes {
    char *p;
    size_t len;
} fz_bytes;

static unsigned fz_u8(fz_in *in)
{
    if (!in->n)
        return 0;
    in->n--;
    return *in->p++;
}

/* A length byte, then that many bytes (fewer at the end of the input). */
static fz_bytes fz_take(fz_in *in)
{
    fz_bytes b;

    b.len = fz_u8(in);
    if (b.len > in->n)
        b.len = in->n;
    b.p = malloc(b.len ? b.len : 1);
    CHECK(b.p != NULL);
    if (b.len)
        memcpy(b.p, in->p, b.len);
    in->p += b.len;
    in->n -= b.len;
    return b;
}

/* A selector byte: below 0x40 an edge of int64 parsing, below 0x80 a small
 * number (-8..55), else the next 8 bytes big-endian. */
static int64_t fz_i64(fz_in *in)
{
    static const int64_t edges[] = {
        0,
        1,
        -1,
        2,
        60,
        INT64_MAX,
        INT64_MIN,
        INT64_MAX - 1,
        INT64_MIN + 1,
        INT64_MAX / 10,
        INT64_MAX / 10 + 1,
        INT64_MIN / 10,
        INT64_MIN / 10 - 1,
        INT64_C(9007199254740993), /* 2^53 + 1: not a double */
        INT64_C(-9007199254740993),
        INT32_MAX,
        INT64_C(2147483648),
        INT32_MIN,
        INT64_C(-2147483649),
        INT64_C(9196828468227470855), /* lease IDs of the capture */
        INT64_C(2130943884683020833),
    };
    unsigned sel = fz_u8(in);
    uint64_t v = 0;

    if (sel < 0x40)
        return edges[sel % KL_ARRAY_LEN(edges)];
    if (sel < 0x80)
        return (int64_t)sel - 0x48;
    for (int i = 0; i < 8; i++)
        v = v << 8 | fz_u8(in);
    return (int64_t)v;
}

/* Printable ASCII of the bytes (for messages, which are JSON strings). */
static char *fz_text(const fz_bytes *b)
{
    char *s = malloc(b->len + 1);

    CHECK(s != NULL);
    for (size_t i = 0; i < b->len; i++)
        s[i] = (char)(0x20 + (unsigned char)b->p[i] % 95);
    s[b->len] = '\0';
    return s;
}

static int bytes_cmp(const char *a, size_t an, const char *b, size_t bn)
{
    size_t n = an < bn ? an : bn;
    int c = n ? memcmp(a, b, n) : 0;

    if (c)
        return c;
    return an < bn ? -1 : an > bn;
}

static int has_prefix(const char *s, size_t n, const char *prefix, size_t pn)
{
    return n >= pn && (pn == 0 || memcmp(s, prefix, pn) == 0);
}

static char *concat(const fz_bytes *a, const fz_bytes *b, size_t *len)
{
    char *s = malloc(a->len + b->len + 1);

    CHECK(s != NULL);
    if (a->len)
        memcpy(s, a->p, a->len);
    if (b->len)
        memcpy(s + a->len, b->p, b->len);
    *len = a->len + b->len;
    return s;
}

/* ---- base64 and prefix range end ---- */

static void check_base64_encode(const fz_bytes *b)
{
    size_t n = 1, back_len = 0;
    char *enc = kl__base64_encode(b->p, b->len, &n), *again, *ref, *back;
    int ok = 0;

    ref = b64_encode((const unsigned char *)b->p, b->len);
    CHECK(enc != NULL && n == strlen(enc));
    CHECK_MSG(strcmp(enc, ref) == 0, "%s, want %s", enc, ref);
    again = kl__base64_encode(b->p, b->len, NULL);
    CHECK(again != NULL && strcmp(again, enc) == 0);
    back = kl__base64_decode(enc, n, &back_len, &ok);
    CHECK(back != NULL && ok == 1 && bytes_eq(back, back_len, b->p, b->len));
    kl__free(back);
    kl__free(again);
    free(ref);
    kl__free(enc);
}

/* kl__etcd_prefix_range_end(prefix) is greater than every key with the
 * prefix and no greater than any other key above the prefix. probes are
 * other byte strings of the input. */
static void check_prefix_range_end(const fz_bytes *prefix, const fz_bytes *probes, size_t n_probes)
{
    size_t cap = prefix->len ? prefix->len : 1, n, i = prefix->len, klen;
    char *end = malloc(cap), *k;

    CHECK(end != NULL);
    n = kl__etcd_prefix_range_end(prefix->p, prefix->len, end);
    while (i > 0 && (unsigned char)prefix->p[i - 1] == 0xff)
        i--;
    if (i == 0) {
        /* no upper bound */
        CHECK(n == 1 && end[0] == '\0');
        free(end);
        return;
    }
    CHECK(n == i);
    CHECK(memcmp(end, prefix->p, n - 1) == 0);
    CHECK((unsigned char)end[n - 1] == (unsigned char)prefix->p[n - 1] + 1);
    CHECK(bytes_cmp(prefix->p, prefix->len, end, n) < 0);
    for (size_t j = 0; j < n_probes; j++) {
        const fz_bytes *x = &probes[j];

        /* prefix + x has the prefix: below the end */
        k = concat(prefix, x, &klen);
        CHECK(bytes_cmp(k, klen, end, n) < 0);
        free(k);
        /* x itself: below the end and not below the prefix means it has
         * the prefix (the end is the least upper bound) */
        if (bytes_cmp(x->p, x->len, end, n) < 0 &&
            bytes_cmp(x->p, x->len, prefix->p, prefix->len) >= 0)
            CHECK(has_prefix(x->p, x->len, prefix->p, prefix->len));
        if (has_prefix(x->p, x->len, prefix->p, prefix->len))
            CHECK(bytes_cmp(x->p, x->len, end, n) < 0);
    }
    /* the largest keys with the prefix */
    k = malloc(prefix->len + 8);
    CHECK(k != NULL);
    memcpy(k, prefix->p, prefix->len);
    memset(k + prefix->len, 0xff, 8);
    CHECK(bytes_cmp(k, prefix->len + 8, end, n) < 0);
    free(k);
    free(end);
}

/* ---- request bodies ---- */

static void jset(json_t *obj, const char *key, json_t *v)
{
    CHECK(v != NULL && json_object_set_new(obj, key, v) == 0);
}

static json_t *jb64(const fz_bytes *b)
{
    char *s = b64_encode((const unsigned char *)b->p, b->len);
    json_t *j = json_string(s);

    free(s);
    return j;
}

/* An int64 as the gateway writes it (a string) or as a JSON integer. */
static json_t *jint64(int64_t v, int number)
{
    char buf[24];

    if (number)
        return json_integer(v);
    snprintf(buf, sizeof(buf), "%" PRId64, v);
    return json_string(buf);
}

/* body (consumed) parses as exactly want (consumed). */
static void check_request(char *body, json_t *want, const char *what)
{
    json_error_t jerr;
    json_t *got;

    CHECK_MSG(body != NULL, "%s: no body (%s)", what, kl__error_get());
    got = json_loads(body, 0, &jerr);
    CHECK_MSG(got != NULL, "%s: not JSON: %s", what, body);
    if (!json_equal(got, want)) {
        char *w = json_dumps(want, JSON_COMPACT | JSON_SORT_KEYS);

        CHECK_MSG(0, "%s: %s, want %s", what, body, w ? w : "?");
    }
    json_decref(got);
    json_decref(want);
    kl__free(body);
}

static json_t *key_range_json(const fz_bytes *key, const fz_bytes *range_end)
{
    json_t *o = json_object();

    CHECK(o != NULL);
    jset(o, "key", jb64(key));
    if (range_end)
        jset(o, "range_end", jb64(range_end));
    return o;
}

static void check_range_request(const fz_bytes *key, const fz_bytes *range_end, int64_t limit,
                                int64_t revision, int64_t max_create, unsigned flags)
{
    static const char *const orders[] = {"NONE", "ASCEND", "DESCEND"};
    static const char *const targets[] = {"KEY", "VERSION", "CREATE", "MOD", "VALUE"};
    kl__etcd_range_req req;
    json_t *want = key_range_json(key, range_end);

    memset(&req, 0, sizeof(req));
    req.key = key->p;
    req.key_len = key->len;
    if (range_end) {
        req.range_end = range_end->p;
        req.range_end_len = range_end->len;
    }
    req.limit = limit;
    req.revision = revision;
    req.max_create_revision = max_create;
    req.sort_order = (kl__etcd_sort_order)((flags >> 1 & 3) % 3);
    req.sort_target = (kl__etcd_sort_target)((flags >> 3 & 7) % 5);
    req.keys_only = flags >> 6 & 1;
    req.count_only = flags >> 7 & 1;
    req.serializable = flags >> 8 & 1;

    /* "zero/NULL fields are left out of the body": the others are in it */
    if (limit)
        jset(want, "limit", jint64(limit, 0));
    if (revision)
        jset(want, "revision", jint64(revision, 0));
    if (req.sort_order != KL_ETCD_SORT_NONE)
        jset(want, "sort_order", json_string(orders[req.sort_order]));
    if (req.sort_target != KL_ETCD_SORT_KEY)
        jset(want, "sort_target", json_string(targets[req.sort_target]));
    if (max_create)
        jset(want, "max_create_revision", jint64(max_create, 0));
    if (req.keys_only)
        jset(want, "keys_only", json_true());
    if (req.count_only)
        jset(want, "count_only", json_true());
    if (req.serializable)
        jset(want, "serializable", json_true());
    check_request(kl__etcd_encode_range(&req), want, "range request");

    check_request(kl__etcd_encode_deleterange(key->p, key->len, range_end ? range_end->p : NULL,
                                              range_end ? range_end->len : 0),
                  key_range_json(key, range_end), "deleterange request");
}

static void check_watch_request(const fz_bytes *key, const fz_bytes *range_end, int64_t start,
                                unsigned flags)
{
    kl__etcd_watch_req req;
    json_t *cr = key_range_json(key, range_end), *want = json_object(), *filters;

    memset(&req, 0, sizeof(req));
    req.key = key->p;
    req.key_len = key->len;
    if (range_end) {
        req.range_end = range_end->p;
        req.range_end_len = range_end->len;
    }
    req.start_revision = start;
    req.progress_notify = flags >> 9 & 1;
    req.no_put = flags >> 10 & 1;
    req.no_delete = flags >> 11 & 1;
    req.prev_kv = flags >> 12 & 1;

    CHECK(want != NULL);
    if (start)
        jset(cr, "start_revision", jint64(start, 0));
    if (req.progress_notify)
        jset(cr, "progress_notify", json_true());
    if (req.prev_kv)
        jset(cr, "prev_kv", json_true());
    if (req.no_put || req.no_delete) {
        filters = json_array();
        CHECK(filters != NULL);
        if (req.no_put)
            CHECK(json_array_append_new(filters, json_string("NOPUT")) == 0);
        if (req.no_delete)
            CHECK(json_array_append_new(filters, json_string("NODELETE")) == 0);
        jset(cr, "filters", filters);
    }
    jset(want, "create_request", cr);
    check_request(kl__etcd_encode_watch_create(&req), want, "watch request");
}

/* [{"target":"CREATE","result":"EQUAL","key":k,"create_revision":rev}] */
static json_t *compare_json(const fz_bytes *key, int64_t rev)
{
    json_t *c = json_object(), *a = json_array();

    CHECK(c != NULL && a != NULL);
    jset(c, "target", json_string("CREATE"));
    jset(c, "result", json_string("EQUAL"));
    jset(c, "key", jb64(key));
    jset(c, "create_revision", jint64(rev, 0));
    CHECK(json_array_append_new(a, c) == 0);
    return a;
}

/* [{op: {"key": k[, "value": v][, "lease": lease]}}] (lease 0 left out) */
static json_t *op_json(const char *op, const fz_bytes *key, const fz_bytes *value, int64_t lease)
{
    json_t *o = json_object(), *r = json_object(), *a = json_array();

    CHECK(o != NULL && r != NULL && a != NULL);
    jset(r, "key", jb64(key));
    if (value)
        jset(r, "value", jb64(value));
    if (lease)
        jset(r, "lease", jint64(lease, 0));
    jset(o, op, r);
    CHECK(json_array_append_new(a, o) == 0);
    return a;
}

static void check_txn_requests(const fz_bytes *key, const fz_bytes *value, int64_t lease,
                               int64_t create_rev)
{
    json_t *want = json_object();

    CHECK(want != NULL);
    jset(want, "compare", compare_json(key, 0));
    jset(want, "success", op_json("request_put", key, value, lease));
    jset(want, "failure", op_json("request_range", key, NULL, 0));
    check_request(kl__etcd_encode_txn_create(key->p, key->len, value->p, value->len, lease), want,
                  "txn create");

    want = json_object();
    CHECK(want != NULL);
    jset(want, "compare", compare_json(key, create_rev));
    jset(want, "success", op_json("request_put", key, value, lease));
    check_request(
        kl__etcd_encode_txn_proclaim(key->p, key->len, value->p, value->len, lease, create_rev),
        want, "txn proclaim");

    want = json_object();
    CHECK(want != NULL);
    jset(want, "compare", compare_json(key, create_rev));
    jset(want, "success", op_json("request_delete_range", key, NULL, 0));
    check_request(kl__etcd_encode_txn_delete(key->p, key->len, create_rev), want, "txn delete");
}

static void check_lease_requests(int64_t ttl, int64_t id, int keys)
{
    json_t *want = json_object();

    CHECK(want != NULL);
    jset(want, "TTL", jint64(ttl, 0));
    if (id)
        jset(want, "ID", jint64(id, 0));
    check_request(kl__etcd_encode_grant(ttl, id), want, "lease grant");

    want = json_object();
    CHECK(want != NULL);
    jset(want, "ID", jint64(id, 0));
    check_request(kl__etcd_encode_lease_id(id), want, "lease id");

    want = json_object();
    CHECK(want != NULL);
    jset(want, "ID", jint64(id, 0));
    jset(want, "keys", json_boolean(keys));
    check_request(kl__etcd_encode_timetolive(id, keys), want, "lease timetolive");
}

/* Name and password as given (cut at a NUL): a body exactly when both are
 * UTF-8, which JSON needs. */
static void check_authenticate_request(const fz_bytes *name_b, const fz_bytes *password_b)
{
    char *name = cstring((const uint8_t *)name_b->p, name_b->len);
    char *password = cstring((const uint8_t *)password_b->p, password_b->len);
    json_t *jn = json_string(name), *jp = json_string(password), *want;
    char *body = kl__etcd_encode_authenticate(name, password);

    if (!jn || !jp) {
        CHECK_MSG(body == NULL, "not UTF-8, yet encoded: %s", body);
        CHECK(!strncmp(kl__error_get(), "etcd authenticate request", 25));
        json_decref(jn);
        json_decref(jp);
    } else {
        want = json_object();
        CHECK(want != NULL);
        jset(want, "name", jn);
        jset(want, "password", jp);
        check_request(body, want, "authenticate request");
    }
    free(name);
    free(password);
}

/* ---- int64 fields of a lease response, written eight ways ---- */

typedef enum int_state { INT_ABSENT, INT_OK, INT_BAD_FIELD, INT_BAD_JSON } int_state;

/* Appends ,"key":<v written as fmt> (nothing when absent) and says what a
 * decoder makes of it: fmt 0 "v", 1 v, 2 absent, 3 null, 4 "+v", 5 "v<digit>",
 * 6 v<digit> (a JSON integer), 7 v.0 (a JSON real). */
static int_state put_int(kl__buf *b, const char *key, int first, int64_t v, unsigned fmt,
                         unsigned digit, int64_t *value)
{
    const char *sep = first ? "" : ",";
    int_state st = INT_OK;
    int fits;

    *value = 0;
    if (fmt == 2)
        return INT_ABSENT;
    if (fmt == 3) {
        CHECK(kl__buf_printf(b, "%s\"%s\":null", sep, key) == 0);
        return INT_ABSENT;
    }
    switch (fmt) {
    case 0:
    case 1:
        CHECK(kl__buf_printf(b, fmt ? "%s\"%s\":%" PRId64 : "%s\"%s\":\"%" PRId64 "\"", sep, key,
                             v) == 0);
        *value = v;
        break;
    case 4:
        CHECK(kl__buf_printf(b, "%s\"%s\":\"+%" PRId64 "\"", sep, key, v) == 0);
        st = INT_BAD_FIELD;
        break;
    case 5:
    case 6:
        fits = v >= 0 ? v <= (INT64_MAX - (int64_t)digit) / 10
                      : v >= (INT64_MIN + (int64_t)digit) / 10;
        CHECK(kl__buf_printf(b, fmt == 6 ? "%s\"%s\":%" PRId64 "%u" : "%s\"%s\":\"%" PRId64 "%u\"",
                             sep, key, v, digit) == 0);
        if (fmt == 6 && v == 0)
            st = INT_BAD_JSON; /* JSON has no leading zeros */
        else if (!fits)
            st = fmt == 6 ? INT_BAD_JSON : INT_BAD_FIELD;
        else
            *value = v >= 0 ? v * 10 + (int64_t)digit : v * 10 - (int64_t)digit;
        break;
    default:
        CHECK(kl__buf_printf(b, "%s\"%s\":%" PRId64 ".0", sep, key, v) == 0);
        st = INT_BAD_FIELD;
        break;
    }
    return st;
}

static void check_lease_response(int64_t rev, int64_t id, int64_t ttl, int64_t granted,
                                 unsigned fmt, int wrap)
{
    static const char *const names[] = {"ID", "TTL", "grantedTTL"};
    int64_t in[4] = {rev, id, ttl, granted}, v[4];
    int_state st[4];
    unsigned digit = fmt >> 12 & 7;
    kl__buf b = {0};
    kl__etcd_lease l;
    int64_t hrev;
    int bad_json = 0, bad_field = 0, err;

    CHECK(kl__buf_printf(&b, "%s{\"header\":{", wrap ? "{\"result\":" : "") == 0);
    st[0] = put_int(&b, "revision", 1, in[0], fmt & 7, digit, &v[0]);
    CHECK(kl__buf_append(&b, "}", 1) == 0);
    for (int i = 1; i < 4; i++)
        st[i] = put_int(&b, names[i - 1], 0, in[i], fmt >> (3 * i) & 7, digit, &v[i]);
    CHECK(kl__buf_append(&b, wrap ? "}}" : "}", wrap ? 2 : 1) == 0);
    for (int i = 0; i < 4; i++) {
        bad_json |= st[i] == INT_BAD_JSON;
        bad_field |= st[i] == INT_BAD_FIELD;
    }

    err = kl__etcd_parse_header(&hrev, b.data, b.len);
    if (bad_json || st[0] == INT_BAD_FIELD)
        CHECK_MSG(err == K8SLEASE_EPROTOCOL && hrev == 0, "%s: %d", b.data, err);
    else
        CHECK_MSG(err == 0 && hrev == v[0], "%s: %d, revision %" PRId64, b.data, err, hrev);

    err = kl__etcd_parse_grant(&l, b.data, b.len);
    if (bad_json || bad_field || st[1] != INT_OK || v[1] <= 0 || st[2] != INT_OK || v[2] <= 0) {
        CHECK_MSG(err == K8SLEASE_EPROTOCOL && lease_is_zero(&l), "%s: grant %d", b.data, err);
    } else {
        CHECK_MSG(err == 0 && l.revision == v[0] && l.id == v[1] && l.ttl == v[2] &&
                      l.granted_ttl == v[3],
                  "%s: grant %d", b.data, err);
    }

    err = kl__etcd_parse_keepalive(&l, b.data, b.len);
    if (bad_json || bad_field) {
        CHECK_MSG(err == K8SLEASE_EPROTOCOL && lease_is_zero(&l), "%s: keepalive %d", b.data, err);
    } else {
        int64_t want_ttl = st[1] == INT_ABSENT || v[2] < 0 ? 0 : v[2];

        CHECK_MSG(err == 0 && l.revision == v[0] && l.id == v[1] && l.ttl == want_ttl &&
                      l.granted_ttl == v[3],
                  "%s: keepalive %d", b.data, err);
    }

    err = kl__etcd_parse_timetolive(&l, b.data, b.len);
    if (bad_json || bad_field || st[1] == INT_ABSENT) {
        CHECK_MSG(err == K8SLEASE_EPROTOCOL && lease_is_zero(&l), "%s: timetolive %d", b.data, err);
    } else {
        CHECK_MSG(err == 0 && l.revision == v[0] && l.id == v[1] &&
                      l.ttl == (v[2] < 0 ? -1 : v[2]) && l.granted_ttl == v[3],
                  "%s: timetolive %d", b.data, err);
    }

    kl__buf_free(&b);
}

/* ---- range, txn and watch responses built from the input's kvs ---- */

typedef struct fz_kv {
    fz_bytes key, value;
    unsigned fmt; /* bit 0: int64s as JSON integers; 1: zeros left out; 2: an empty value
                     left out; 3-5: the event type's spelling */
    int64_t ints[4];
} fz_kv;

#define FZ_MAX_KVS 4

static const char *const kv_int_names[] = {"create_revision", "mod_revision", "version", "lease"};

static json_t *kv_json(const fz_kv *k)
{
    json_t *o = json_object();

    CHECK(o != NULL);
    jset(o, "key", jb64(&k->key));
    if (k->value.len || !(k->fmt & 4))
        jset(o, "value", jb64(&k->value));
    for (int i = 0; i < 4; i++)
        if (k->ints[i] || !(k->fmt & 2))
            jset(o, kv_int_names[i], jint64(k->ints[i], k->fmt & 1));
    return o;
}

static kl__etcd_kv kv_want(const fz_kv *k)
{
    kl__etcd_kv kv;

    kv.key = k->key.p;
    kv.key_len = k->key.len;
    kv.value = k->value.p;
    kv.value_len = k->value.len;
    kv.create_revision = k->ints[0];
    kv.mod_revision = k->ints[1];
    kv.version = k->ints[2];
    kv.lease = k->ints[3];
    return kv;
}

/* A RangeResponse of kvs; want gets it (borrowing wkvs). */
static json_t *range_json(const fz_kv *kvs, size_t n, int64_t rev, int more, int64_t count,
                          int number, kl__etcd_kv *wkvs, kl__etcd_range *want)
{
    json_t *o = json_object(), *hdr = json_object(), *a;

    CHECK(o != NULL && hdr != NULL);
    jset(hdr, "revision", jint64(rev, number));
    jset(o, "header", hdr);
    if (n) {
        a = json_array();
        CHECK(a != NULL);
        for (size_t i = 0; i < n; i++) {
            CHECK(json_array_append_new(a, kv_json(&kvs[i])) == 0);
            wkvs[i] = kv_want(&kvs[i]);
        }
        jset(o, "kvs", a);
    }
    if (more)
        jset(o, "more", json_true());
    if (count)
        jset(o, "count", jint64(count, number));
    memset(want, 0, sizeof(*want));
    want->revision = rev;
    want->kvs = n ? wkvs : NULL;
    want->n_kvs = n;
    want->more = more;
    want->count = count;
    return o;
}

static char *dump_msg(json_t *msg, int wrap, size_t *len)
{
    json_t *root = msg;
    char *s;

    if (wrap) {
        root = json_object();
        CHECK(root != NULL);
        jset(root, "result", msg);
    }
    s = json_dumps(root, JSON_COMPACT);
    CHECK(s != NULL);
    json_decref(root);
    *len = strlen(s);
    return s;
}

static void check_built_responses(const fz_kv *kvs, size_t n, const int64_t *r, unsigned flags,
                                  const char *reason)
{
    static const kl__etcd_event_type ev_types[] = {
        KL_ETCD_EVENT_PUT,    KL_ETCD_EVENT_PUT,    KL_ETCD_EVENT_PUT,    KL_ETCD_EVENT_PUT,
        KL_ETCD_EVENT_DELETE, KL_ETCD_EVENT_DELETE, KL_ETCD_EVENT_DELETE, KL_ETCD_EVENT_DELETE};
    kl__etcd_kv wkvs[FZ_MAX_KVS];
    kl__etcd_watch_event wev[FZ_MAX_KVS];
    kl__etcd_op wops[3];
    kl__etcd_range want, got;
    kl__etcd_txn tgot, twant;
    kl__etcd_watch_msg wgot, wwant;
    json_t *msg, *events, *ev, *a, *o, *hdr;
    int number = flags & 1, wrap = flags >> 1 & 1, more = flags >> 2 & 1, err;
    char *body;
    size_t len, n_ops = 0;

    /* range */
    msg = range_json(kvs, n, r[0], more, r[1], number, wkvs, &want);
    body = dump_msg(msg, wrap, &len);
    err = kl__etcd_parse_range(&got, body, len);
    if (r[0] > 0) {
        CHECK_MSG(err == 0, "%s: %d (%s)", body, err, kl__error_get());
        CHECK_MSG(range_eq(&got, &want), "%s: decoded otherwise", body);
        check_range_out(&got);
    } else {
        CHECK_MSG(err == K8SLEASE_EPROTOCOL && range_is_zero(&got), "%s: %d", body, err);
    }
    kl__etcd_range_clear(&got);
    free(body);

    /* txn: some of a range, a put and a delete response, in that order */
    msg = json_object();
    hdr = json_object();
    a = json_array();
    CHECK(msg != NULL && hdr != NULL && a != NULL);
    jset(hdr, "revision", jint64(r[0], number));
    jset(msg, "header", hdr);
    if (flags >> 3 & 1)
        jset(msg, "succeeded", json_true());
    if (flags >> 4 & 1) {
        o = json_object();
        CHECK(o != NULL);
        jset(o, "response_range",
             range_json(kvs, n, r[2], more, r[1], number, wkvs, &wops[n_ops].range));
        CHECK(json_array_append_new(a, o) == 0);
        wops[n_ops].type = KL_ETCD_OP_RANGE;
        wops[n_ops++].deleted = 0;
    }
    if (flags >> 5 & 1) {
        o = json_object();
        CHECK(o != NULL);
        jset(o, "response_put", range_json(NULL, 0, r[3], 0, 0, number, NULL, &wops[n_ops].range));
        CHECK(json_array_append_new(a, o) == 0);
        wops[n_ops].type = KL_ETCD_OP_PUT;
        wops[n_ops++].deleted = 0;
    }
    if (flags >> 6 & 1) {
        json_t *del = range_json(NULL, 0, r[4], 0, 0, number, NULL, &wops[n_ops].range);

        jset(del, "deleted", jint64(r[5], number));
        o = json_object();
        CHECK(o != NULL);
        jset(o, "response_delete_range", del);
        CHECK(json_array_append_new(a, o) == 0);
        wops[n_ops].type = KL_ETCD_OP_DELETE;
        wops[n_ops++].deleted = r[5];
    }
    jset(msg, "responses", a);
    body = dump_msg(msg, wrap, &len);
    err = kl__etcd_parse_txn(&tgot, body, len);
    if (r[0] > 0) {
        twant.revision = r[0];
        twant.succeeded = flags >> 3 & 1;
        twant.ops = wops;
        twant.n_ops = n_ops;
        CHECK_MSG(err == 0, "%s: %d (%s)", body, err, kl__error_get());
        CHECK_MSG(txn_eq(&tgot, &twant), "%s: decoded otherwise", body);
    } else {
        CHECK_MSG(err == K8SLEASE_EPROTOCOL && txn_is_zero(&tgot), "%s: %d", body, err);
    }
    kl__etcd_txn_clear(&tgot);
    free(body);

    /* watch: the kvs as events */
    msg = json_object();
    hdr = json_object();
    events = json_array();
    CHECK(msg != NULL && hdr != NULL && events != NULL);
    if (r[0])
        jset(hdr, "revision", jint64(r[0], number));
    jset(msg, "header", hdr);
    if (r[1])
        jset(msg, "watch_id", jint64(r[1], number));
    if (flags >> 7 & 1)
        jset(msg, "created", json_true());
    if (flags >> 8 & 1)
        jset(msg, "canceled", json_true());
    if (flags >> 9 & 1)
        jset(msg, "fragment", json_true());
    if (r[2])
        jset(msg, "compact_revision", jint64(r[2], number));
    if (reason[0])
        jset(msg, "cancel_reason", json_string(reason));
    for (size_t i = 0; i < n; i++) {
        static const char *const spell[] = {NULL,     "PUT", NULL,     NULL,
                                            "DELETE", NULL,  "DELETE", "DELETE"};
        unsigned t = kvs[i].fmt >> 3 & 7;

        ev = json_object();
        CHECK(ev != NULL);
        if (spell[t])
            jset(ev, "type", json_string(spell[t]));
        else if (t == 2 || t == 5)
            jset(ev, "type", json_integer(t == 5));
        else if (t == 3)
            jset(ev, "type", json_null());
        jset(ev, "kv", kv_json(&kvs[i]));
        CHECK(json_array_append_new(events, ev) == 0);
        wev[i].type = ev_types[t];
        wev[i].kv = kv_want(&kvs[i]);
    }
    if (n)
        jset(msg, "events", events);
    else
        json_decref(events);
    body = dump_msg(msg, wrap, &len);
    memset(&wwant, 0, sizeof(wwant));
    wwant.revision = r[0];
    wwant.watch_id = r[1];
    wwant.created = flags >> 7 & 1;
    wwant.canceled = flags >> 8 & 1;
    wwant.fragment = flags >> 9 & 1;
    wwant.compact_revision = r[2];
    wwant.cancel_reason = (char *)reason;
    wwant.events = n ? wev : NULL;
    wwant.n_events = n;
    err = kl__etcd_parse_watch_msg(&wgot, body, len);
    CHECK_MSG(err == 0, "%s: %d (%s)", body, err, kl__error_get());
    CHECK_MSG(watch_eq(&wgot, &wwant), "%s: decoded otherwise", body);
    kl__etcd_watch_msg_clear(&wgot);
    free(body);
}

/* ---- gateway errors ---- */

/* The table of kl__etcd_error_code for a message that says nothing. */
static int doc_error_code(int grpc_code)
{
    switch (grpc_code) {
    case 16:
    case 7:
        return K8SLEASE_EAUTH;
    case 5:
        return K8SLEASE_ENOTFOUND;
    case 6:
    case 10:
        return K8SLEASE_ECONFLICT;
    case 3:
        return K8SLEASE_EINVAL;
    case 4:
        return K8SLEASE_ETIMEOUT;
    case 1:
    case 14:
        return K8SLEASE_ETRANSPORT;
    default:
        return K8SLEASE_ESERVER;
    }
}

/* An error body of each shape, with the code and message of the input:
 * kl__etcd_error_parse gives them back, every decoder gives the mapped code
 * and a message quoting the server's. */
static void check_error_bodies(int64_t code64, const char *text, unsigned shape)
{
    static const char *const auth[] = {
        "etcdserver: authentication failed", "etcdserver: user name is empty",
        "etcdserver: authentication is not enabled", "etcdserver: invalid auth token"};
    int code = code64 >= INT32_MIN && code64 <= INT32_MAX ? (int)code64 : 0;
    const char *want_msg = text;
    json_t *root = json_object(), *e;
    kl__etcd_error out;
    char *body, fallback[300];
    size_t len;
    int err;

    CHECK(root != NULL);
    snprintf(fallback, sizeof(fallback), "error: %s", text);
    switch (shape % 4) {
    case 0: /* unary call: "error" and "message", the same text */
        jset(root, "error", json_string(text));
        jset(root, "message", json_string(text));
        jset(root, "code", json_integer(code64));
        break;
    case 1: /* an empty "message" gives way to "error" */
        jset(root, "error", json_string(fallback));
        jset(root, "message", json_string(""));
        jset(root, "code", json_integer(code64));
        want_msg = fallback;
        break;
    case 2: /* a stream failing after its first message */
        e = json_object();
        CHECK(e != NULL);
        jset(e, "grpc_code", json_integer(code64));
        jset(e, "http_code", json_integer(503));
        jset(e, "message", json_string(text));
        jset(e, "http_status", json_string("Service Unavailable"));
        jset(root, "error", e);
        break;
    default: /* newer gateways: google.rpc.Status */
        jset(root, "code", json_integer(code64));
        jset(root, "message", json_string(text));
        jset(root, "details", json_array());
        break;
    }
    body = json_dumps(root, JSON_COMPACT);
    CHECK(body != NULL);
    len = strlen(body);
    json_decref(root);

    err = kl__etcd_error_parse(&out, body, len);
    CHECK_MSG(err == 0, "%s: %d", body, err);
    CHECK_MSG(out.grpc_code == code && out.message && !strcmp(out.message, want_msg),
              "%s: code %d message \"%s\"", body, out.grpc_code, str_or_empty(out.message));
    kl__etcd_error_clear(&out);
    kl__etcd_error_clear(&out);

    for (int d = 0; d < DEC_ERROR; d++) {
        etcd_out o;
        char want_tail[32];

        memset(&o, 0xa5, sizeof(o));
        err = etcd_decode((etcd_dec)d, &o, body, len);
        CHECK_MSG(err == kl__etcd_error_code(code, want_msg), "%s: %s %d", body, etcd_what[d], err);
        CHECK(etcd_out_is_zero((etcd_dec)d, &o));
        CHECK_MSG(!strncmp(kl__error_get(), "etcd: ", 6), "%s", kl__error_get());
        if (want_msg[0] && strlen(want_msg) <= 200)
            CHECK_MSG(strstr(kl__error_get(), want_msg) != NULL, "%s", kl__error_get());
        snprintf(want_tail, sizeof(want_tail), "(gRPC code %d)", code);
        CHECK_MSG(strstr(kl__error_get(), want_tail) != NULL, "%s", kl__error_get());
    }
    kl__free(body);

    /* The mapping as etcd/codec.h documents it. */
    CHECK_MSG(kl__etcd_error_code(code, "") == doc_error_code(code), "code %d", code);
    for (size_t i = 0; i < KL_ARRAY_LEN(auth); i++)
        CHECK_MSG(kl__etcd_error_code(code, auth[i]) == K8SLEASE_EAUTH, "code %d, %s", code,
                  auth[i]);
    CHECK(kl__etcd_error_code(code, "etcdserver: lease already exists") == K8SLEASE_ECONFLICT);
}

/* Input (read in order, missing bytes are 0; a string is a length byte and
 * its bytes, an int64 a selector byte, see fz_i64):
 *   key, range_end, value: strings; flags: 4 bytes (little-endian);
 *   a, b, c, d: int64; lease format: 2 bytes;
 *   n (byte, mod 5) kvs of key, value: strings, format: byte, 4 int64;
 *   r[0..5]: int64; error code: int64; error message: string; shape: byte.
 * flags: 0 no range_end; 1-2 sort order; 3-5 sort target; 6 keys_only;
 * 7 count_only; 8 serializable; 9 progress_notify; 10 NOPUT; 11 NODELETE;
 * 12 prev_kv; 13 timetolive keys; 14 wrap lease response in "result";
 * 16-25 the built responses (see check_built_responses). */
int kl_fuzz_etcd_encode(const uint8_t *data, size_t size)
{
    fz_in in = {data, size};
    fz_bytes key, range_end, value, probes[3], msg_b;
    fz_kv kvs[FZ_MAX_KVS];
    unsigned flags, lease_fmt, shape;
    int64_t a, b, c, d, r[6], code;
    size_t n;
    char *reason, *text;

    key = fz_take(&in);
    range_end = fz_take(&in);
    value = fz_take(&in);
    flags = fz_u8(&in);
    flags |= fz_u8(&in) << 8;
    flags |= fz_u8(&in) << 16;
    flags |= (unsigned)fz_u8(&in) << 24;
    a = fz_i64(&in);
    b = fz_i64(&in);
    c = fz_i64(&in);
    d = fz_i64(&in);
    lease_fmt = fz_u8(&in);
    lease_fmt |= fz_u8(&in) << 8;
    n = fz_u8(&in) % (FZ_MAX_KVS + 1);
    for (size_t i = 0; i < n; i++) {
        kvs[i].key = fz_take(&in);
        kvs[i].value = fz_take(&in);
        kvs[i].fmt = fz_u8(&in);
        for (int j = 0; j < 4; j++)
            kvs[i].ints[j] = fz_i64(&in);
    }
    for (int i = 0; i < 6; i++)
        r[i] = fz_i64(&in);
    code = fz_i64(&in);
    msg_b = fz_take(&in);
    shape = fz_u8(&in);

    check_base64_encode(&key);
    check_base64_encode(&value);
    probes[0] = range_end;
    probes[1] = value;
    probes[2] = key;
    check_prefix_range_end(&key, probes, 3);
    check_prefix_range_end(&range_end, probes, 3);

    check_range_request(&key, flags & 1 ? NULL : &range_end, a, b, c, flags);
    check_watch_request(&key, flags & 1 ? NULL : &range_end, b, flags);
    check_txn_requests(&key, &value, a, b);
    check_lease_requests(c, a, flags >> 13 & 1);
    check_authenticate_request(&key, &value);

    check_lease_response(a, b, c, d, lease_fmt, flags >> 14 & 1);
    reason = fz_text(&range_end);
    check_built_responses(kvs, n, r, flags >> 16, reason);
    text = fz_text(&msg_b);
    check_error_bodies(code, text, shape);

    free(text);
    free(reason);
    free(msg_b.p);
    for (size_t i = 0; i < n; i++) {
        free(kvs[i].key.p);
        free(kvs[i].value.p);
    }
    free(value.p);
    free(range_end.p);
    free(key.p);
    return 0;
}
