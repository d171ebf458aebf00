/* etcd v3 JSON gateway codec: request bodies and response decoding for the
 * calls an election makes (lease grant/keepalive/revoke/timetolive, kv
 * range/txn/deleterange, watch, auth/authenticate).
 *
 * The gateway (etcd 3.4 and 3.5, paths /v3/...) maps protobuf to JSON:
 * int64 fields are JSON strings ("revision":"42"), bytes are base64 (keys and
 * values), zero values are omitted (a txn that failed has no "succeeded", a
 * keepalive of an unknown lease has no "TTL", a watch event of type PUT has
 * no "type"). Responses of streaming calls (/v3/lease/keepalive, /v3/watch)
 * are wrapped as {"result": {...}}, one JSON object per line. Errors are
 * {"error": "...", "code": <gRPC code>, "message": "..."} (unary calls and
 * streams that fail before their first message), {"error": {"grpc_code": N,
 * "message": "...", ...}} (a stream failing later), or {"code": N,
 * "message": "..."} (newer gateways). See tests/data/etcd-samples/README.md
 * for what a real etcd 3.4 answers.
 *
 * Decoders: accept int64 fields as strings or JSON integers, "result"
 * wrappers or bare messages; return 0, K8SLEASE_ENOMEM, K8SLEASE_EPROTOCOL
 * with a message naming the field ("etcd range response: kvs[1].key: invalid
 * base64"), or, when the body is a gateway error, the code of
 * kl__etcd_error_code() with the message "etcd: <message> (gRPC code N)".
 * On error the output holds nothing to free. Every output struct is cleared
 * by its _clear function (safe on a zeroed or cleared struct).
 *
 * Encoders return a malloc'ed NUL-terminated body (kl__free), or NULL with
 * K8SLEASE_ENOMEM set. Keys and values are byte strings (pointer + length).
 *
 * Nothing here does I/O; the error message (kl__error_set) is the only side
 * effect. Any thread. */
#ifndef KL_ETCD_CODEC_H
#define KL_ETCD_CODEC_H

#include <stddef.h>
#include <stdint.h>

/* ---- base64 and keys ---- */

/* Standard alphabet with padding (what the gateway expects for bytes). NULL
 * with K8SLEASE_ENOMEM set on failure; *out_len (may be NULL) gets the
 * length without the NUL. */
char *kl__base64_encode(const void *in, size_t len, size_t *out_len);

/* etcd's GetPrefixRangeEnd: the smallest key greater than every key that
 * starts with prefix: prefix with its last byte below 0xff incremented and
 * the bytes after it dropped ("a/" -> "a0", "a\xff" -> "b"). When there is no
 * such byte (empty prefix, or all 0xff) the answer is the single byte "\0",
 * which etcd reads as "no upper bound". out must hold max(len, 1) bytes.
 * Returns the length written (not NUL-terminated). */
size_t kl__etcd_prefix_range_end(const char *prefix, size_t len, char *out);

/* The public API's limit on election names (k8slease.h). */
#define KL_ETCD_NAME_MAX 400

/* An election's keys: "<name>/" and the end of its range. */
typedef struct kl__etcd_prefix {
    char key[KL_ETCD_NAME_MAX + 2];
    size_t key_len;
    char end[KL_ETCD_NAME_MAX + 2];
    size_t end_len;
} kl__etcd_prefix;

/* p for the election name (at most KL_ETCD_NAME_MAX bytes: checked by the
 * caller). */
void kl__etcd_prefix_set(kl__etcd_prefix *p, const char *name);

/* ---- gateway errors ---- */

typedef struct kl__etcd_error {
    int grpc_code; /* "code" / "error.grpc_code"; 0 when absent */
    char *message; /* "message", else "error" when a string; "" when absent (owned) */
} kl__etcd_error;

/* 0 when body is one of the three error shapes (out filled), else
 * K8SLEASE_EPROTOCOL with out zeroed; K8SLEASE_ENOMEM. */
int kl__etcd_error_parse(kl__etcd_error *out, const char *body, size_t len);
void kl__etcd_error_clear(kl__etcd_error *err);
/* The K8SLEASE_E* code for a gateway error: 16 Unauthenticated, 7
 * PermissionDenied and auth messages ("authentication failed", "user name is
 * empty", "authentication is not enabled", "invalid auth token") ->
 * EAUTH; 5 NotFound ("requested lease not found") -> ENOTFOUND; 6
 * AlreadyExists, 10 Aborted, "lease already exists" -> ECONFLICT; 3
 * InvalidArgument -> EINVAL; 4 DeadlineExceeded -> ETIMEOUT; 1 Canceled, 14
 * Unavailable ("leader changed", "no leader") -> ETRANSPORT; anything else
 * (2 Unknown, 8, 9, 11 "required revision has been compacted", 13, ...) ->
 * ESERVER. */
int kl__etcd_error_code(int grpc_code, const char *message);

/* ---- lease ---- */

/* {"TTL":"<ttl_s>"} plus "ID" when id != 0 (0: the server picks one). */
char *kl__etcd_encode_grant(int64_t ttl_s, int64_t id);
/* {"ID":"<id>"}: the body of /v3/lease/keepalive and /v3/lease/revoke. */
char *kl__etcd_encode_lease_id(int64_t id);
/* {"ID":"<id>","keys":true|false}: /v3/lease/timetolive. */
char *kl__etcd_encode_timetolive(int64_t id, int keys);

typedef struct kl__etcd_lease {
    int64_t revision;    /* header.revision, 0 when absent */
    int64_t id;          /* "ID" */
    int64_t ttl;         /* "TTL" in seconds: see each parser */
    int64_t granted_ttl; /* timetolive only: "grantedTTL" */
} kl__etcd_lease;

/* /v3/lease/grant: ID and TTL must be present and positive. */
int kl__etcd_parse_grant(kl__etcd_lease *out, const char *body, size_t len);
/* One message of /v3/lease/keepalive (with or without the "result"
 * wrapper). ttl 0 means the lease is gone: etcd answers an expired or
 * unknown lease with no TTL (and, in some versions, no ID). A negative TTL
 * is taken as 0. */
int kl__etcd_parse_keepalive(kl__etcd_lease *out, const char *body, size_t len);
/* /v3/lease/timetolive: ttl -1 when the lease does not exist (etcd's
 * answer), granted_ttl 0 then. Keys (when asked for) are not decoded. */
int kl__etcd_parse_timetolive(kl__etcd_lease *out, const char *body, size_t len);
/* Any response whose only content is the header (/v3/lease/revoke,
 * /v3/kv/put, /v3/kv/compaction): *revision = header.revision (0 if absent).
 * An error body gives its code (revoke of an unknown lease: ENOTFOUND). */
int kl__etcd_parse_header(int64_t *revision, const char *body, size_t len);

/* ---- kv ---- */

typedef struct kl__etcd_kv {
    char *key; /* decoded, NUL-terminated (owned); may contain NULs: use key_len */
    size_t key_len;
    char *value; /* decoded, NUL-terminated, "" when absent (owned) */
    size_t value_len;
    int64_t create_revision, mod_revision, version, lease; /* 0 when absent */
} kl__etcd_kv;

typedef enum kl__etcd_sort_order {
    KL_ETCD_SORT_NONE,
    KL_ETCD_SORT_ASCEND,
    KL_ETCD_SORT_DESCEND
} kl__etcd_sort_order;

typedef enum kl__etcd_sort_target {
    KL_ETCD_SORT_KEY,
    KL_ETCD_SORT_VERSION,
    KL_ETCD_SORT_CREATE,
    KL_ETCD_SORT_MOD,
    KL_ETCD_SORT_VALUE
} kl__etcd_sort_target;

/* A range request; zero/NULL fields are left out of the body. */
typedef struct kl__etcd_range_req {
    const char *key;
    size_t key_len;
    const char *range_end; /* NULL: the single key */
    size_t range_end_len;
    int64_t limit;
    kl__etcd_sort_order sort_order;
    kl__etcd_sort_target sort_target;
    int64_t max_create_revision;
    int64_t revision; /* read at this revision; 0: the latest */
    int keys_only, count_only, serializable;
} kl__etcd_range_req;

char *kl__etcd_encode_range(const kl__etcd_range_req *req);
/* The range of an election's leader: its first key by create revision.
 * NULL on ENOMEM (error set). */
char *kl__etcd_encode_leader_range(const kl__etcd_prefix *p);
/* {"key":..., "range_end":...} for /v3/kv/deleterange (range_end NULL: one key). */
char *kl__etcd_encode_deleterange(const char *key, size_t key_len, const char *range_end,
                                  size_t range_end_len);

typedef struct kl__etcd_range {
    int64_t revision; /* header.revision */
    kl__etcd_kv *kvs; /* owned */
    size_t n_kvs;
    int more;      /* "more": the limit cut the answer */
    int64_t count; /* "count": keys in the range (ignores limit) */
} kl__etcd_range;

/* /v3/kv/range. Every kv needs a key; header.revision must be present. */
int kl__etcd_parse_range(kl__etcd_range *out, const char *body, size_t len);
void kl__etcd_range_clear(kl__etcd_range *r);

/* ---- txn: the three an election sends ---- */

/* Campaign: if create_revision(key) == 0 then put(key, value, lease) else
 * range(key). */
char *kl__etcd_encode_txn_create(const char *key, size_t key_len, const char *value,
                                 size_t value_len, int64_t lease);
/* Proclaim: if create_revision(key) == create_rev then put(key, value, lease). */
char *kl__etcd_encode_txn_proclaim(const char *key, size_t key_len, const char *value,
                                   size_t value_len, int64_t lease, int64_t create_rev);
/* Resign: if create_revision(key) == create_rev then deleterange(key). */
char *kl__etcd_encode_txn_delete(const char *key, size_t key_len, int64_t create_rev);

typedef enum kl__etcd_op_type {
    KL_ETCD_OP_RANGE, /* "response_range" */
    KL_ETCD_OP_PUT,   /* "response_put" */
    KL_ETCD_OP_DELETE /* "response_delete_range" */
} kl__etcd_op_type;

typedef struct kl__etcd_op {
    kl__etcd_op_type type;
    kl__etcd_range range; /* RANGE: kvs, more, count; all: range.revision = the inner header's */
    int64_t deleted;      /* DELETE: "deleted" */
} kl__etcd_op;

typedef struct kl__etcd_txn {
    int64_t revision; /* header.revision: the revision of the txn's writes, if any */
    int succeeded;    /* the compare held (absent = false) */
    kl__etcd_op *ops; /* responses of the branch taken, in order (owned) */
    size_t n_ops;
} kl__etcd_txn;

/* /v3/kv/txn. Unknown response kinds (e.g. a nested response_txn) are an
 * error: an election never sends them. */
int kl__etcd_parse_txn(kl__etcd_txn *out, const char *body, size_t len);
void kl__etcd_txn_clear(kl__etcd_txn *t);

/* ---- watch ---- */

/* {"create_request": {...}}; zero/NULL fields are left out. */
typedef struct kl__etcd_watch_req {
    const char *key;
    size_t key_len;
    const char *range_end; /* NULL: the single key */
    size_t range_end_len;
    int64_t start_revision; /* 0: from now */
    int progress_notify;
    int no_put;    /* filters: ["NOPUT"] (only deletes) */
    int no_delete; /* filters: ["NODELETE"] */
    int prev_kv;
} kl__etcd_watch_req;

char *kl__etcd_encode_watch_create(const kl__etcd_watch_req *req);

typedef enum kl__etcd_event_type {
    KL_ETCD_EVENT_PUT,   /* "type" absent or "PUT" */
    KL_ETCD_EVENT_DELETE /* "DELETE": kv has key and mod_revision only */
} kl__etcd_event_type;

typedef struct kl__etcd_watch_event {
    kl__etcd_event_type type;
    kl__etcd_kv kv;
} kl__etcd_watch_event;

/* One message of a watch stream. A message with none of created, canceled,
 * events is a progress notification (its header.revision is the point the
 * watch has reached). */
typedef struct kl__etcd_watch_msg {
    int64_t revision; /* header.revision; 0 when absent (etcd omits it in a compaction cancel) */
    int64_t watch_id;
    int created;
    int canceled;
    int fragment;
    int64_t compact_revision;     /* > 0: the start revision was compacted; watch canceled */
    char *cancel_reason;          /* "" when absent (owned) */
    kl__etcd_watch_event *events; /* owned */
    size_t n_events;
} kl__etcd_watch_msg;

/* Decode one line of /v3/watch (frame the stream with kl__line_splitter). */
int kl__etcd_parse_watch_msg(kl__etcd_watch_msg *out, const char *line, size_t len);
void kl__etcd_watch_msg_clear(kl__etcd_watch_msg *m);

/* ---- auth ---- */

/* {"name":..., "password":...} (NUL-terminated strings). */
char *kl__etcd_encode_authenticate(const char *name, const char *password);
/* /v3/auth/authenticate: *token is malloc'ed (kl__free), non-empty. The
 * gateway wants it back verbatim as "Authorization: <token>" (no "Bearer"). */
int kl__etcd_parse_authenticate(char **token, const char *body, size_t len);

#endif
