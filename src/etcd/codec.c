/* etcd v3 JSON gateway codec. The shapes are described in etcd/codec.h and
 * tests/data/etcd-samples/README.md; this file adds the reasons behind the
 * less obvious choices. */
#include "etcd/codec.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "core/common.h"
#include "core/text.h" /* kl__base64_decode */

/* Field paths in messages ("responses[0].response_range.kvs[12].key"). */
#define PATH_MAX_LEN 128

/* ------------------------------------------------------------------------ */
/* base64 and keys                                                          */
/* ------------------------------------------------------------------------ */

char *kl__base64_encode(const void *in, size_t len, size_t *out_len)
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *p = in;
    size_t n, i, o = 0;
    char *out;

    if (out_len)
        *out_len = 0;
    if (len > (SIZE_MAX - 1) / 4 * 3) {
        kl__error_set(K8SLEASE_ENOMEM, "base64: input too large");
        return NULL;
    }
    n = (len + 2) / 3 * 4;
    if (!(out = kl__malloc(n + 1))) {
        kl__error_set(K8SLEASE_ENOMEM, "base64: out of memory");
        return NULL;
    }
    for (i = 0; i + 2 < len; i += 3) {
        unsigned long v = (unsigned long)p[i] << 16 | (unsigned long)p[i + 1] << 8 | p[i + 2];

        out[o++] = alphabet[v >> 18];
        out[o++] = alphabet[v >> 12 & 63];
        out[o++] = alphabet[v >> 6 & 63];
        out[o++] = alphabet[v & 63];
    }
    if (i < len) {
        unsigned long v = (unsigned long)p[i] << 16;

        if (i + 1 < len)
            v |= (unsigned long)p[i + 1] << 8;
        out[o++] = alphabet[v >> 18];
        out[o++] = alphabet[v >> 12 & 63];
        out[o++] = i + 1 < len ? alphabet[v >> 6 & 63] : '=';
        out[o++] = '=';
    }
    out[o] = '\0';
    if (out_len)
        *out_len = o;
    return out;
}

size_t kl__etcd_prefix_range_end(const char *prefix, size_t len, char *out)
{
    size_t i = len;

    while (i > 0 && (unsigned char)prefix[i - 1] == 0xff)
        i--;
    if (i == 0) {
        out[0] = '\0';
        return 1;
    }
    memcpy(out, prefix, i);
    out[i - 1] = (char)((unsigned char)out[i - 1] + 1);
    return i;
}

void kl__etcd_prefix_set(kl__etcd_prefix *p, const char *name)
{
    size_t n = strlen(name);

    memcpy(p->key, name, n);
    p->key[n] = '/';
    p->key_len = n + 1;
    p->end_len = kl__etcd_prefix_range_end(p->key, p->key_len, p->end);
}

/* ------------------------------------------------------------------------ */
/* Decoding helpers                                                         */
/* ------------------------------------------------------------------------ */

static int bad(const char *what, const char *path, const char *fmt, ...) KL_PRINTF(3, 4);

static int bad(const char *what, const char *path, const char *fmt, ...)
{
    char why[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    return kl__error_set(K8SLEASE_EPROTOCOL, "%s: %s: %s", what, path, why);
}

static int nomem(const char *what)
{
    return kl__error_set(K8SLEASE_ENOMEM, "%s: out of memory", what);
}

/* "kvs" + 3 -> "kvs[3]", under an optional parent path. */
static const char *subpath(char *buf, const char *parent, const char *name, long index)
{
    int n;

    /* A path in a message: truncation is harmless. */
    if (index >= 0)
        n = snprintf(buf, PATH_MAX_LEN, "%s%s%s[%ld]", parent ? parent : "", parent ? "." : "",
                     name, index);
    else
        n = snprintf(buf, PATH_MAX_LEN, "%s%s%s", parent ? parent : "", parent ? "." : "", name);
    if (n < 0)
        buf[0] = '\0';
    return buf;
}

/* jansson says nothing when an allocation fails inside the parser, so an
 * empty message is out of memory too (as in k8s/codec.c). */
static int load(json_t **root, const char *body, size_t len, const char *what)
{
    json_error_t jerr;

    memset(&jerr, 0, sizeof(jerr));
    *root = json_loadb(body, len, JSON_DECODE_ANY, &jerr);
    if (*root)
        return 0;
    if (json_error_code(&jerr) == json_error_out_of_memory || jerr.text[0] == '\0')
        return nomem(what);
    return kl__error_set(K8SLEASE_EPROTOCOL, "%s: not valid JSON at line %d column %d: %s", what,
                         jerr.line, jerr.column, jerr.text);
}

/* Decimal int64 with an optional '-', nothing else (no spaces, no '+'). */
static int parse_int64_str(const char *s, int64_t *out)
{
    int neg = *s == '-';
    uint64_t v = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    const char *p = s + neg;

    if (!*p)
        return -1;
    for (; *p; p++) {
        unsigned d;

        if (*p < '0' || *p > '9')
            return -1;
        d = (unsigned)(*p - '0');
        if (v > (limit - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

/* An int64 the gateway writes as a string; a JSON integer is accepted too
 * (hand-written proxies, older gateways). Absent or null: *out = 0, and
 * *present = 0 when present is not NULL. */
static int get_int64(const json_t *obj, const char *key, const char *what, const char *path,
                     int64_t *out, int *present)
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
        if (parse_int64_str(json_string_value(v), out) < 0)
            return bad(what, path, "\"%.40s\" is not an int64", json_string_value(v));
    } else {
        return bad(what, path, "must be an int64 string");
    }
    if (present)
        *present = 1;
    return 0;
}

static int get_bool(const json_t *obj, const char *key, const char *what, const char *path,
                    int *out)
{
    json_t *v = json_object_get(obj, key);

    *out = 0;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return bad(what, path, "must be a boolean");
    *out = json_is_true(v);
    return 0;
}

/* An optional member that must be an object when present. */
static int get_object(const json_t *obj, const char *key, const char *what, const char *path,
                      json_t **out)
{
    json_t *v = json_object_get(obj, key);

    *out = NULL;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_object(v))
        return bad(what, path, "must be an object");
    *out = v;
    return 0;
}

static int get_array(const json_t *obj, const char *key, const char *what, const char *path,
                     json_t **out)
{
    json_t *v = json_object_get(obj, key);

    *out = NULL;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_array(v))
        return bad(what, path, "must be an array");
    *out = v;
    return 0;
}

/* Base64 bytes; absent or null decode as "" (protobuf's empty bytes). */
static int get_bytes(const json_t *obj, const char *key, const char *what, const char *path,
                     char **out, size_t *out_len)
{
    json_t *v = json_object_get(obj, key);
    const char *s = "";
    size_t n = 0;
    int ok;

    *out = NULL;
    *out_len = 0;
    if (v && !json_is_null(v)) {
        if (!json_is_string(v))
            return bad(what, path, "must be a base64 string");
        s = json_string_value(v);
        n = json_string_length(v);
    }
    *out = kl__base64_decode(s, n, out_len, &ok);
    if (!*out)
        return ok ? nomem(what) : bad(what, path, "invalid base64");
    return 0;
}

static int header_revision(const json_t *msg, const char *what, int64_t *rev)
{
    json_t *hdr;
    int err;

    *rev = 0;
    if ((err = get_object(msg, "header", what, "header", &hdr)) < 0)
        return err;
    return get_int64(hdr, "revision", what, "header.revision", rev, NULL);
}

/* ------------------------------------------------------------------------ */
/* Gateway errors                                                           */
/* ------------------------------------------------------------------------ */

int kl__etcd_error_code(int grpc_code, const char *message)
{
    static const char *const auth[] = {"authentication", "user name is empty", "auth token",
                                       "permission denied"};
    const char *m = message ? message : "";

    for (size_t i = 0; i < KL_ARRAY_LEN(auth); i++)
        if (strstr(m, auth[i]))
            return K8SLEASE_EAUTH;
    if (strstr(m, "lease already exists"))
        return K8SLEASE_ECONFLICT;
    switch (grpc_code) {
    case 16: /* Unauthenticated */
    case 7:  /* PermissionDenied */
        return K8SLEASE_EAUTH;
    case 5: /* NotFound */
        return K8SLEASE_ENOTFOUND;
    case 6:  /* AlreadyExists */
    case 10: /* Aborted */
        return K8SLEASE_ECONFLICT;
    case 3: /* InvalidArgument */
        return K8SLEASE_EINVAL;
    case 4: /* DeadlineExceeded */
        return K8SLEASE_ETIMEOUT;
    case 1:  /* Canceled */
    case 14: /* Unavailable */
        return K8SLEASE_ETRANSPORT;
    default:
        return K8SLEASE_ESERVER;
    }
}

static int small_int(const json_t *v, int *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < INT32_MIN ||
        json_integer_value(v) > INT32_MAX)
        return -1;
    *out = (int)json_integer_value(v);
    return 0;
}

/* Recognises the three error shapes (see the header). Returns 1 and fills
 * code and message (borrowed from root) for an error body, 0 otherwise. A
 * response never has an "error" member, and a message without "header" or
 * "result" but with an integer "code" and a string "message" is the newer
 * gateways' Status. */
static int error_shape(const json_t *root, int *code, const char **message)
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
    if (c && small_int(c, code) < 0)
        *code = 0;
    if (json_is_string(m))
        *message = json_string_value(m);
    return 1;
}

/* For the parsers: an error body becomes its code and message. */
static int check_error(const json_t *root)
{
    const char *message;
    int code;

    if (!error_shape(root, &code, &message))
        return 0;
    return kl__error_set(kl__etcd_error_code(code, message), "etcd: %.200s (gRPC code %d)",
                         message[0] ? message : "error without a message", code);
}

int kl__etcd_error_parse(kl__etcd_error *out, const char *body, size_t len)
{
    const char *message;
    json_t *root;
    int err, code;

    memset(out, 0, sizeof(*out));
    if ((err = load(&root, body, len, "etcd error body")) < 0)
        return err;
    if (!error_shape(root, &code, &message)) {
        err = kl__error_set(K8SLEASE_EPROTOCOL, "etcd error body: not an error object");
    } else if (!(out->message = kl__strdup(message))) {
        err = nomem("etcd error body");
    } else {
        out->grpc_code = code;
    }
    json_decref(root);
    return err;
}

void kl__etcd_error_clear(kl__etcd_error *err)
{
    kl__free(err->message);
    memset(err, 0, sizeof(*err));
}

/* Loads a response: JSON object, not an error body. Streaming calls wrap
 * their messages in "result"; *msg is that object, else the root. */
static int load_response(json_t **root, json_t **msg, const char *body, size_t len,
                         const char *what)
{
    json_t *result;
    int err;

    *msg = NULL;
    if ((err = load(root, body, len, what)) < 0)
        return err;
    if (!json_is_object(*root))
        err = kl__error_set(K8SLEASE_EPROTOCOL, "%s: not a JSON object", what);
    else if ((err = check_error(*root)) == 0 &&
             (err = get_object(*root, "result", what, "result", &result)) == 0)
        *msg = result ? result : *root;
    if (err < 0) {
        json_decref(*root);
        *root = NULL;
    }
    return err;
}

/* ------------------------------------------------------------------------ */
/* Encoding helpers                                                         */
/* ------------------------------------------------------------------------ */

static int dump_cb(const char *buf, size_t size, void *data)
{
    return kl__buf_append(data, buf, size) < 0 ? -1 : 0;
}

/* Consumes root (NULL allowed: a failed json_pack). */
static char *dump(json_t *root, const char *what)
{
    kl__buf b = {0};

    if (root && json_dump_callback(root, dump_cb, &b, JSON_COMPACT | JSON_PRESERVE_ORDER) < 0) {
        kl__buf_free(&b);
    }
    json_decref(root);
    if (!b.data)
        kl__error_set(K8SLEASE_ENOMEM,
                      "%s: cannot encode body (out of memory, or a string is not UTF-8)", what);
    return b.data;
}

static json_t *int64_str(int64_t v)
{
    char buf[24];

    snprintf(buf, sizeof(buf), "%lld", (long long)v);
    return json_string(buf);
}

static json_t *b64_str(const char *p, size_t len)
{
    char *s = kl__base64_encode(p, len, NULL);
    json_t *j;

    if (!s)
        return NULL;
    j = json_string(s);
    kl__free(s);
    return j;
}

/* obj[key] = v, consuming v whatever happens; a NULL v (failed
 * allocation) or obj fails. */
static int set(json_t *obj, const char *key, json_t *v)
{
    if (!v)
        return -1;
    return json_object_set_new(obj, key, v);
}

/* ------------------------------------------------------------------------ */
/* Lease                                                                    */
/* ------------------------------------------------------------------------ */

char *kl__etcd_encode_grant(int64_t ttl_s, int64_t id)
{
    json_t *root = json_object();

    if (root && (set(root, "TTL", int64_str(ttl_s)) < 0 ||
                 (id != 0 && set(root, "ID", int64_str(id)) < 0))) {
        json_decref(root);
        root = NULL;
    }
    return dump(root, "etcd lease grant");
}

char *kl__etcd_encode_lease_id(int64_t id)
{
    json_t *root = json_object();

    if (root && set(root, "ID", int64_str(id)) < 0) {
        json_decref(root);
        root = NULL;
    }
    return dump(root, "etcd lease request");
}

char *kl__etcd_encode_timetolive(int64_t id, int keys)
{
    json_t *root = json_object();

    if (root && (set(root, "ID", int64_str(id)) < 0 || set(root, "keys", json_boolean(keys)) < 0)) {
        json_decref(root);
        root = NULL;
    }
    return dump(root, "etcd lease timetolive");
}

static int lease_fields(const json_t *msg, const char *what, kl__etcd_lease *out, int *has_id,
                        int *has_ttl)
{
    int err;

    if ((err = header_revision(msg, what, &out->revision)) < 0 ||
        (err = get_int64(msg, "ID", what, "ID", &out->id, has_id)) < 0 ||
        (err = get_int64(msg, "TTL", what, "TTL", &out->ttl, has_ttl)) < 0 ||
        (err = get_int64(msg, "grantedTTL", what, "grantedTTL", &out->granted_ttl, NULL)) < 0)
        return err;
    return 0;
}

int kl__etcd_parse_grant(kl__etcd_lease *out, const char *body, size_t len)
{
    static const char what[] = "etcd lease grant response";
    json_t *root, *msg;
    int err, has_id, has_ttl;

    memset(out, 0, sizeof(*out));
    if ((err = load_response(&root, &msg, body, len, what)) < 0)
        return err;
    if ((err = lease_fields(msg, what, out, &has_id, &has_ttl)) < 0)
        goto out;
    /* LeaseGrantResponse has an "error" string of its own: check_error has
     * turned it into an error already. What is left must be a usable lease. */
    if (!has_id || out->id <= 0)
        err =
            bad(what, "ID", has_id ? "must be positive, got %lld" : "missing", (long long)out->id);
    else if (!has_ttl || out->ttl <= 0)
        err = bad(what, "TTL", has_ttl ? "must be positive, got %lld" : "missing",
                  (long long)out->ttl);
out:
    if (err < 0)
        memset(out, 0, sizeof(*out));
    json_decref(root);
    return err;
}

int kl__etcd_parse_keepalive(kl__etcd_lease *out, const char *body, size_t len)
{
    static const char what[] = "etcd lease keepalive response";
    json_t *root, *msg;
    int err, has_id, has_ttl;

    memset(out, 0, sizeof(*out));
    if ((err = load_response(&root, &msg, body, len, what)) < 0)
        return err;
    if ((err = lease_fields(msg, what, out, &has_id, &has_ttl)) < 0) {
        memset(out, 0, sizeof(*out));
    } else if (!has_id || out->ttl < 0) {
        /* gone: whatever else the message says */
        out->ttl = 0;
    }
    json_decref(root);
    return err;
}

int kl__etcd_parse_timetolive(kl__etcd_lease *out, const char *body, size_t len)
{
    static const char what[] = "etcd lease timetolive response";
    json_t *root, *msg;
    int err, has_id, has_ttl;

    memset(out, 0, sizeof(*out));
    if ((err = load_response(&root, &msg, body, len, what)) < 0)
        return err;
    if ((err = lease_fields(msg, what, out, &has_id, &has_ttl)) == 0 && !has_id)
        err = bad(what, "ID", "missing");
    /* An absent TTL is 0 (a lease in its last second: proto3 omits zeros);
     * etcd says -1 for a lease that does not exist. */
    if (out->ttl < 0)
        out->ttl = -1;
    if (err < 0)
        memset(out, 0, sizeof(*out));
    json_decref(root);
    return err;
}

int kl__etcd_parse_header(int64_t *revision, const char *body, size_t len)
{
    static const char what[] = "etcd response";
    json_t *root, *msg;
    int err;

    *revision = 0;
    if ((err = load_response(&root, &msg, body, len, what)) < 0)
        return err;
    if ((err = header_revision(msg, what, revision)) < 0)
        *revision = 0;
    json_decref(root);
    return err;
}

/* ------------------------------------------------------------------------ */
/* kv                                                                       */
/* ------------------------------------------------------------------------ */

static void kv_clear(kl__etcd_kv *kv)
{
    kl__free(kv->key);
    kl__free(kv->value);
    memset(kv, 0, sizeof(*kv));
}

static int decode_kv(const json_t *obj, const char *what, const char *path, kl__etcd_kv *kv)
{
    char sub[PATH_MAX_LEN];
    int err;

    memset(kv, 0, sizeof(*kv));
    if (!json_is_object(obj))
        return bad(what, path, "must be an object");
    if (!json_object_get(obj, "key"))
        return bad(what, subpath(sub, path, "key", -1), "missing");
    if ((err = get_bytes(obj, "key", what, subpath(sub, path, "key", -1), &kv->key, &kv->key_len)) <
            0 ||
        (err = get_bytes(obj, "value", what, subpath(sub, path, "value", -1), &kv->value,
                         &kv->value_len)) < 0 ||
        (err = get_int64(obj, "create_revision", what, subpath(sub, path, "create_revision", -1),
                         &kv->create_revision, NULL)) < 0 ||
        (err = get_int64(obj, "mod_revision", what, subpath(sub, path, "mod_revision", -1),
                         &kv->mod_revision, NULL)) < 0 ||
        (err = get_int64(obj, "version", what, subpath(sub, path, "version", -1), &kv->version,
                         NULL)) < 0 ||
        (err = get_int64(obj, "lease", what, subpath(sub, path, "lease", -1), &kv->lease, NULL)) <
            0)
        kv_clear(kv);
    return err;
}

static void range_clear(kl__etcd_range *r)
{
    for (size_t i = 0; i < r->n_kvs; i++)
        kv_clear(&r->kvs[i]);
    kl__free(r->kvs);
    memset(r, 0, sizeof(*r));
}

/* A RangeResponse object at path (NULL: the root). */
static int decode_range(const json_t *msg, const char *what, const char *path, kl__etcd_range *out)
{
    char sub[PATH_MAX_LEN], hpath[PATH_MAX_LEN];
    json_t *kvs, *hdr;
    size_t i, n;
    int err;

    memset(out, 0, sizeof(*out));
    if ((err = get_object(msg, "header", what, subpath(hpath, path, "header", -1), &hdr)) < 0 ||
        (err = get_int64(hdr, "revision", what, subpath(sub, hpath, "revision", -1), &out->revision,
                         NULL)) < 0 ||
        (err = get_bool(msg, "more", what, subpath(sub, path, "more", -1), &out->more)) < 0 ||
        (err = get_int64(msg, "count", what, subpath(sub, path, "count", -1), &out->count, NULL)) <
            0 ||
        (err = get_array(msg, "kvs", what, subpath(sub, path, "kvs", -1), &kvs)) < 0)
        return err;
    n = json_array_size(kvs);
    if (n == 0)
        return 0;
    if (!(out->kvs = kl__calloc(n, sizeof(*out->kvs))))
        return nomem(what);
    for (i = 0; i < n; i++) {
        if ((err = decode_kv(json_array_get(kvs, i), what, subpath(sub, path, "kvs", (long)i),
                             &out->kvs[i])) < 0) {
            range_clear(out);
            return err;
        }
        out->n_kvs++;
    }
    return 0;
}

static int append_bytes_req(json_t *obj, const char *key, size_t key_len, const char *range_end,
                            size_t range_end_len)
{
    if (set(obj, "key", b64_str(key, key_len)) < 0)
        return -1;
    if (range_end && set(obj, "range_end", b64_str(range_end, range_end_len)) < 0)
        return -1;
    return 0;
}

char *kl__etcd_encode_range(const kl__etcd_range_req *req)
{
    static const char *const orders[] = {"NONE", "ASCEND", "DESCEND"};
    static const char *const targets[] = {"KEY", "VERSION", "CREATE", "MOD", "VALUE"};
    json_t *root = json_object();

    if (!root)
        goto out;
    if (append_bytes_req(root, req->key, req->key_len, req->range_end, req->range_end_len) < 0 ||
        (req->limit && set(root, "limit", int64_str(req->limit)) < 0) ||
        (req->revision && set(root, "revision", int64_str(req->revision)) < 0) ||
        /* Each on its own: etcd sorts ascending by a target other than KEY
         * even with sort_order NONE, so dropping the target with the order
         * would change the answer. */
        (req->sort_order != KL_ETCD_SORT_NONE &&
         set(root, "sort_order", json_string(orders[req->sort_order])) < 0) ||
        (req->sort_target != KL_ETCD_SORT_KEY &&
         set(root, "sort_target", json_string(targets[req->sort_target])) < 0) ||
        (req->max_create_revision &&
         set(root, "max_create_revision", int64_str(req->max_create_revision)) < 0) ||
        (req->serializable && set(root, "serializable", json_true()) < 0) ||
        (req->keys_only && set(root, "keys_only", json_true()) < 0) ||
        (req->count_only && set(root, "count_only", json_true()) < 0)) {
        json_decref(root);
        root = NULL;
    }
out:
    return dump(root, "etcd range request");
}

char *kl__etcd_encode_leader_range(const kl__etcd_prefix *p)
{
    kl__etcd_range_req rr = {0};

    rr.key = p->key;
    rr.key_len = p->key_len;
    rr.range_end = p->end;
    rr.range_end_len = p->end_len;
    rr.sort_order = KL_ETCD_SORT_ASCEND;
    rr.sort_target = KL_ETCD_SORT_CREATE;
    rr.limit = 1;
    return kl__etcd_encode_range(&rr);
}

char *kl__etcd_encode_deleterange(const char *key, size_t key_len, const char *range_end,
                                  size_t range_end_len)
{
    json_t *root = json_object();

    if (root && append_bytes_req(root, key, key_len, range_end, range_end_len) < 0) {
        json_decref(root);
        root = NULL;
    }
    return dump(root, "etcd deleterange request");
}

int kl__etcd_parse_range(kl__etcd_range *out, const char *body, size_t len)
{
    static const char what[] = "etcd range response";
    json_t *root, *msg;
    int err;

    memset(out, 0, sizeof(*out));
    if ((err = load_response(&root, &msg, body, len, what)) < 0)
        return err;
    /* every decision of an election is relative to header.revision */
    if ((err = decode_range(msg, what, NULL, out)) == 0 && out->revision <= 0)
        err = bad(what, "header.revision", "missing");
    /* decode_range fails with the fields before the bad one filled in */
    if (err < 0)
        range_clear(out);
    json_decref(root);
    return err;
}

void kl__etcd_range_clear(kl__etcd_range *r)
{
    range_clear(r);
}

/* ------------------------------------------------------------------------ */
/* txn                                                                      */
/* ------------------------------------------------------------------------ */

/* {"target":"CREATE","result":"EQUAL","key":k,"create_revision":rev} */
static json_t *compare_create(const char *key, size_t key_len, int64_t rev)
{
    json_t *c = json_object();

    if (c &&
        (set(c, "target", json_string("CREATE")) < 0 ||
         set(c, "result", json_string("EQUAL")) < 0 || set(c, "key", b64_str(key, key_len)) < 0 ||
         set(c, "create_revision", int64_str(rev)) < 0)) {
        json_decref(c);
        c = NULL;
    }
    return c;
}

/* {op: {"key": k, [value, lease]}} */
static json_t *request_op(const char *op, const char *key, size_t key_len, const char *value,
                          size_t value_len, int64_t lease)
{
    json_t *o = json_object(), *r = json_object();

    if (!o || !r || set(r, "key", b64_str(key, key_len)) < 0 ||
        (value && set(r, "value", b64_str(value, value_len)) < 0) ||
        (lease && set(r, "lease", int64_str(lease)) < 0)) {
        json_decref(o);
        json_decref(r);
        return NULL;
    }
    if (json_object_set_new(o, op, r) < 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* [v], consuming v (NULL: a failed allocation, gives NULL). */
static json_t *array_of(json_t *v)
{
    json_t *a = v ? json_array() : NULL;

    if (!a) {
        json_decref(v);
        return NULL;
    }
    /* json_array_append_new releases v when it fails */
    if (json_array_append_new(a, v) < 0) {
        json_decref(a);
        return NULL;
    }
    return a;
}

/* Consumes every argument (NULL ones mean a failed allocation; set() and
 * json_object_set_new release their value whatever happens). */
static char *txn_body(json_t *cmp, json_t *success, json_t *failure, int want_failure)
{
    json_t *root = json_object();
    int failed = 0;

    failed |= set(root, "compare", array_of(cmp)) < 0;
    failed |= set(root, "success", array_of(success)) < 0;
    if (want_failure)
        failed |= set(root, "failure", array_of(failure)) < 0;
    if (failed) {
        json_decref(root);
        root = NULL;
    }
    return dump(root, "etcd txn request");
}

char *kl__etcd_encode_txn_create(const char *key, size_t key_len, const char *value,
                                 size_t value_len, int64_t lease)
{
    return txn_body(compare_create(key, key_len, 0),
                    request_op("request_put", key, key_len, value, value_len, lease),
                    request_op("request_range", key, key_len, NULL, 0, 0), 1);
}

char *kl__etcd_encode_txn_proclaim(const char *key, size_t key_len, const char *value,
                                   size_t value_len, int64_t lease, int64_t create_rev)
{
    return txn_body(compare_create(key, key_len, create_rev),
                    request_op("request_put", key, key_len, value, value_len, lease), NULL, 0);
}

char *kl__etcd_encode_txn_delete(const char *key, size_t key_len, int64_t create_rev)
{
    return txn_body(compare_create(key, key_len, create_rev),
                    request_op("request_delete_range", key, key_len, NULL, 0, 0), NULL, 0);
}

static void txn_clear(kl__etcd_txn *t)
{
    for (size_t i = 0; i < t->n_ops; i++)
        range_clear(&t->ops[i].range);
    kl__free(t->ops);
    memset(t, 0, sizeof(*t));
}

static int decode_op(const json_t *obj, const char *what, const char *path, kl__etcd_op *op)
{
    static const struct {
        const char *name;
        kl__etcd_op_type type;
    } kinds[] = {{"response_range", KL_ETCD_OP_RANGE},
                 {"response_put", KL_ETCD_OP_PUT},
                 {"response_delete_range", KL_ETCD_OP_DELETE}};
    char sub[PATH_MAX_LEN], dpath[PATH_MAX_LEN];
    json_t *inner = NULL;
    size_t i;
    int err;

    memset(op, 0, sizeof(*op));
    if (!json_is_object(obj))
        return bad(what, path, "must be an object");
    for (i = 0; i < KL_ARRAY_LEN(kinds); i++) {
        if ((err = get_object(obj, kinds[i].name, what, subpath(sub, path, kinds[i].name, -1),
                              &inner)) < 0)
            return err;
        if (inner)
            break;
    }
    if (!inner)
        return bad(what, path, "no response_range, response_put or response_delete_range");
    op->type = kinds[i].type;
    if ((err = decode_range(inner, what, sub, &op->range)) < 0)
        return err;
    if (op->type == KL_ETCD_OP_DELETE &&
        (err = get_int64(inner, "deleted", what, subpath(dpath, sub, "deleted", -1), &op->deleted,
                         NULL)) < 0) {
        range_clear(&op->range);
        return err;
    }
    return 0;
}

int kl__etcd_parse_txn(kl__etcd_txn *out, const char *body, size_t len)
{
    static const char what[] = "etcd txn response";
    char sub[PATH_MAX_LEN];
    json_t *root, *msg, *resps;
    size_t i, n;
    int err;

    memset(out, 0, sizeof(*out));
    if ((err = load_response(&root, &msg, body, len, what)) < 0)
        return err;
    if ((err = header_revision(msg, what, &out->revision)) < 0 ||
        (err = get_bool(msg, "succeeded", what, "succeeded", &out->succeeded)) < 0 ||
        (err = get_array(msg, "responses", what, "responses", &resps)) < 0)
        goto out;
    if (out->revision <= 0) {
        err = bad(what, "header.revision", "missing");
        goto out;
    }
    n = json_array_size(resps);
    if (n && !(out->ops = kl__calloc(n, sizeof(*out->ops)))) {
        err = nomem(what);
        goto out;
    }
    for (i = 0; i < n; i++) {
        if ((err = decode_op(json_array_get(resps, i), what,
                             subpath(sub, NULL, "responses", (long)i), &out->ops[i])) < 0)
            goto out;
        out->n_ops++;
    }
out:
    if (err < 0)
        txn_clear(out);
    json_decref(root);
    return err;
}

void kl__etcd_txn_clear(kl__etcd_txn *t)
{
    txn_clear(t);
}

/* ------------------------------------------------------------------------ */
/* watch                                                                    */
/* ------------------------------------------------------------------------ */

char *kl__etcd_encode_watch_create(const kl__etcd_watch_req *req)
{
    json_t *root = NULL, *cr = json_object(), *filters = NULL;

    if (!cr)
        goto out;
    if (append_bytes_req(cr, req->key, req->key_len, req->range_end, req->range_end_len) < 0 ||
        (req->start_revision && set(cr, "start_revision", int64_str(req->start_revision)) < 0) ||
        (req->progress_notify && set(cr, "progress_notify", json_true()) < 0) ||
        (req->prev_kv && set(cr, "prev_kv", json_true()) < 0))
        goto out;
    if (req->no_put || req->no_delete) {
        if (!(filters = json_array()) ||
            (req->no_put && json_array_append_new(filters, json_string("NOPUT")) < 0) ||
            (req->no_delete && json_array_append_new(filters, json_string("NODELETE")) < 0))
            goto out;
        if (json_object_set_new(cr, "filters", filters) < 0) {
            filters = NULL;
            goto out;
        }
        filters = NULL;
    }
    root = json_object();
    if (set(root, "create_request", cr) < 0) {
        json_decref(root);
        root = NULL;
    }
    cr = NULL;
out:
    json_decref(filters);
    json_decref(cr);
    return dump(root, "etcd watch request");
}

static void watch_msg_clear(kl__etcd_watch_msg *m)
{
    for (size_t i = 0; i < m->n_events; i++)
        kv_clear(&m->events[i].kv);
    kl__free(m->events);
    kl__free(m->cancel_reason);
    memset(m, 0, sizeof(*m));
}

static int decode_event(const json_t *obj, const char *what, const char *path,
                        kl__etcd_watch_event *ev)
{
    char sub[PATH_MAX_LEN];
    json_t *type, *kv;
    int err;

    if (!json_is_object(obj))
        return bad(what, path, "must be an object");
    type = json_object_get(obj, "type");
    if (!type || json_is_null(type) ||
        (json_is_string(type) && !strcmp(json_string_value(type), "PUT")) ||
        (json_is_integer(type) && json_integer_value(type) == 0))
        ev->type = KL_ETCD_EVENT_PUT;
    else if ((json_is_string(type) && !strcmp(json_string_value(type), "DELETE")) ||
             (json_is_integer(type) && json_integer_value(type) == 1))
        ev->type = KL_ETCD_EVENT_DELETE;
    else if (json_is_string(type))
        return bad(what, subpath(sub, path, "type", -1), "unknown event type \"%.32s\"",
                   json_string_value(type));
    else
        return bad(what, subpath(sub, path, "type", -1), "must be \"PUT\" or \"DELETE\"");
    if ((err = get_object(obj, "kv", what, subpath(sub, path, "kv", -1), &kv)) < 0)
        return err;
    if (!kv)
        return bad(what, sub, "missing");
    return decode_kv(kv, what, sub, &ev->kv);
}

static int decode_watch_msg(const json_t *msg, const char *what, kl__etcd_watch_msg *out)
{
    char sub[PATH_MAX_LEN];
    const char *reason = NULL;
    json_t *events, *r;
    size_t i, n;
    int err;

    if ((err = header_revision(msg, what, &out->revision)) < 0 ||
        (err = get_int64(msg, "watch_id", what, "watch_id", &out->watch_id, NULL)) < 0 ||
        (err = get_bool(msg, "created", what, "created", &out->created)) < 0 ||
        (err = get_bool(msg, "canceled", what, "canceled", &out->canceled)) < 0 ||
        (err = get_bool(msg, "fragment", what, "fragment", &out->fragment)) < 0 ||
        (err = get_int64(msg, "compact_revision", what, "compact_revision", &out->compact_revision,
                         NULL)) < 0 ||
        (err = get_array(msg, "events", what, "events", &events)) < 0)
        return err;
    r = json_object_get(msg, "cancel_reason");
    if (r && !json_is_null(r) && !json_is_string(r))
        return bad(what, "cancel_reason", "must be a string");
    reason = json_is_string(r) ? json_string_value(r) : "";
    if (!(out->cancel_reason = kl__strdup(reason)))
        return nomem(what);
    n = json_array_size(events);
    if (n && !(out->events = kl__calloc(n, sizeof(*out->events))))
        return nomem(what);
    for (i = 0; i < n; i++) {
        if ((err = decode_event(json_array_get(events, i), what,
                                subpath(sub, NULL, "events", (long)i), &out->events[i])) < 0)
            return err;
        out->n_events++;
    }
    return 0;
}

int kl__etcd_parse_watch_msg(kl__etcd_watch_msg *out, const char *line, size_t len)
{
    static const char what[] = "etcd watch message";
    json_t *root, *msg;
    int err;

    memset(out, 0, sizeof(*out));
    if ((err = load_response(&root, &msg, line, len, what)) < 0)
        return err;
    if ((err = decode_watch_msg(msg, what, out)) < 0)
        watch_msg_clear(out);
    json_decref(root);
    return err;
}

void kl__etcd_watch_msg_clear(kl__etcd_watch_msg *m)
{
    watch_msg_clear(m);
}

/* ------------------------------------------------------------------------ */
/* auth                                                                     */
/* ------------------------------------------------------------------------ */

char *kl__etcd_encode_authenticate(const char *name, const char *password)
{
    return dump(json_pack("{s:s, s:s}", "name", name, "password", password),
                "etcd authenticate request");
}

int kl__etcd_parse_authenticate(char **token, const char *body, size_t len)
{
    static const char what[] = "etcd authenticate response";
    json_t *root, *msg, *t;
    int err;

    *token = NULL;
    if ((err = load_response(&root, &msg, body, len, what)) < 0)
        return err;
    t = json_object_get(msg, "token");
    if (!t || json_is_null(t))
        err = bad(what, "token", "missing");
    else if (!json_is_string(t))
        err = bad(what, "token", "must be a string");
    else if (!json_string_value(t)[0])
        err = bad(what, "token", "empty");
    else if (!(*token = kl__strdup(json_string_value(t))))
        err = nomem(what);
    json_decref(root);
    return err;
}
