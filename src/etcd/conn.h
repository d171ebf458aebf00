/* The conn of an etcd client: every etcd request of the client goes
 * through it: POST <endpoint>/v3/... with a JSON body, to the current
 * endpoint; on a failure to get an answer (connect, TLS, timeout, reset,
 * gRPC Unavailable) the conn moves to the next endpoint for the requests
 * that follow. With a user name, the conn authenticates
 * (/v3/auth/authenticate) before the first request, sends the token as
 * "Authorization: <token>", and authenticates again when etcd says the
 * token is invalid. Tokens and passwords never reach a log line. */
#ifndef KL_ETCD_CONN_H
#define KL_ETCD_CONN_H

#include <stddef.h>
#include <stdint.h>

#include "core/common.h"
#include "core/http.h"
#include "core/loop.h"
#include "etcd/codec.h"

typedef struct kl__etcd_conn kl__etcd_conn;

/* Split and check k8slease_client_options.etcd_endpoints: comma-separated
 * URLs "http(s)://host:port" (optional trailing '/', no other path, no
 * query, no user info), all of one scheme, at least one. *out is a
 * NULL-terminated array of malloc'ed "scheme://host:port" strings (free
 * with kl__etcd_endpoints_free). K8SLEASE_EINVAL naming the endpoint and
 * what is wrong ("etcd_endpoints: \"ftp://x\": scheme must be http or
 * https"), K8SLEASE_ENOMEM. */
int kl__etcd_endpoints_parse(const char *list, char ***out, size_t *n);
void kl__etcd_endpoints_free(char **endpoints);

/* The conn of a client (copies everything; log and loop are borrowed).
 * username NULL: no authentication. Any thread. */
int kl__etcd_conn_new(kl__etcd_conn **out, kl__loop *loop, const kl__log *log,
                      char *const *endpoints, size_t n, const char *username, const char *password);
/* After the loop has stopped (kl__loop_free cancels what is in flight).
 * Accepts NULL. */
void kl__etcd_conn_free(kl__etcd_conn *conn);
/* The endpoint requests go to now (borrowed; loop thread, or any thread for
 * messages). */
const char *kl__etcd_conn_endpoint(const kl__etcd_conn *conn);

/* One POST to the gateway. The conn picks the endpoint, adds the token,
 * authenticates first when it has none, re-authenticates once when etcd
 * says the token is invalid, and moves to the next endpoint when the
 * current one fails to answer. */
typedef struct kl__etcd_call kl__etcd_call;

typedef struct kl__etcd_result {
    int err;            /* 0: HTTP 200 (body is the answer), else a K8SLEASE_E* code */
    const char *errmsg; /* err != 0: "etcd <endpoint><path>: ..." ("" otherwise) */
    long status;        /* HTTP status; 0 when no answer arrived (transport error) */
    const char *body;   /* status 200 of a unary call: the body (NUL-terminated); else "" */
    size_t body_len;
} kl__etcd_result;

typedef void (*kl__etcd_done_cb)(const kl__etcd_result *res, void *arg);

typedef struct kl__etcd_call_opts {
    const char *path; /* "/v3/kv/range" */
    const char *body; /* JSON (copied) */
    size_t body_len;
    int64_t timeout_ms; /* whole call, waiting for a token and retries included; 0: none */
    /* Streams: the body of a 200 as it arrives (see kl__http_opts). */
    kl__http_data_cb on_data;
    /* The set-up of a new connection (kl__http_opts.connect_timeout_ms): a
     * stream, which has no timeout_ms, bounds its own. 0: the default. */
    int64_t connect_timeout_ms;
} kl__etcd_call_opts;

/* Start a call (loop thread). done runs exactly once, on the loop thread,
 * never from inside kl__etcd_call_start, unless the call is cancelled
 * first. NULL on ENOMEM (error set). */
kl__etcd_call *kl__etcd_call_start(kl__etcd_conn *conn, const kl__etcd_call_opts *opts,
                                   kl__etcd_done_cb done, void *arg);
/* Cancel (loop thread; also from the call's own on_data); done is not
 * called. Accepts NULL. */
void kl__etcd_call_cancel(kl__etcd_call *call);

/* A watch stream: POST /v3/watch with a create request, framed into lines
 * and decoded. on_msg gets every message (borrowed for the call); on_end
 * once, when the stream is over: res->err 0 when the server closed it, else
 * why (a message that cannot be decoded ends it with that error). Neither
 * runs after kl__etcd_stream_cancel, which may be called from on_msg.
 *
 * Liveness (opts with silence_ms > 0): a member that hangs (SIGSTOP: its
 * kernel still acknowledges, nothing answers) never ends a stream, and over
 * the gateway a stream cannot carry a progress request once open. So a
 * stream silent for silence_ms (no byte since it started, since its last
 * byte, or since the last probe was answered) is checked, once per
 * silence_ms of silence:
 *  - its endpoint is no longer the conn's current one (a request there
 *    failed to get an answer): it is resumed on the current one at once;
 *  - else a probe goes to its endpoint: a range of the watched keys, the
 *    last modified first, limit 1, keys only, with probe_timeout_ms. No
 *    answer (timeout, transport error, gRPC Unavailable): the conn has moved
 *    to the next endpoint (failover), and the stream is resumed there. A key
 *    modified at a revision the stream has not delivered: the stream must
 *    deliver it within grace_ms (it may be on its way), else it is resumed.
 * Resuming cancels the HTTP stream (libcurl closes its connection) and
 * creates the watch again on the current endpoint from the first revision
 * not delivered yet (start_revision, then the last event's mod_revision +
 * 1), so no event is lost or delivered twice; the owner sees a second
 * "created" message and nothing else. A compacted start revision makes etcd
 * cancel the watch, as for any watch. A stream that talks costs a time
 * stamp per piece of data; a silent one a probe per silence_ms. A deletion
 * does not show in a range: a member that answers ranges while its watches
 * deliver nothing is caught by the puts it shows only (a hung or cut-off
 * member answers neither, and the probe's timeout catches it). */
typedef struct kl__etcd_stream kl__etcd_stream;
typedef void (*kl__etcd_msg_cb)(const kl__etcd_watch_msg *msg, void *arg);

typedef struct kl__etcd_stream_opts {
    int64_t silence_ms;       /* check a stream silent this long; 0: never */
    int64_t probe_timeout_ms; /* the probe's timeout; also bounds a new connection's set-up */
    int64_t grace_ms;         /* a revision a probe saw must be delivered within this */
} kl__etcd_stream_opts;

/* The bound for an election's timings (ms; the elector's, or the
 * library's defaults for a holder watch):
 *   silence_ms       = lease_duration / 3 (the keepalive interval: a
 *                      silent stream is checked as often as the lease is
 *                      kept alive)
 *   probe_timeout_ms = the timeout of every request of an election,
 *                      kl__request_timeout_ms (core/timings.h):
 *                      (renew_deadline - retry_period) / 2, at least 500 ms
 *   grace_ms         = retry_period
 * A member that hangs under a stream is left within silence_ms +
 * probe_timeout_ms = TTL/3 + the request timeout, at most 5/6 of the TTL
 * (the request timeout is at most TTL/2: renew_deadline < TTL, and the
 * TTL is at least 1 s); 9 s with the defaults (15 s, 10 s, 2 s), 1.85 s
 * at 3 s, 2 s, 300 ms. */
void kl__etcd_stream_opts_init(kl__etcd_stream_opts *o, int64_t lease_duration_ms,
                               int64_t renew_deadline_ms, int64_t retry_period_ms);

/* opts NULL: no liveness bound. Loop thread. NULL on ENOMEM (error set). */
kl__etcd_stream *kl__etcd_stream_start(kl__etcd_conn *conn, const kl__etcd_watch_req *req,
                                       const kl__etcd_stream_opts *opts, kl__etcd_msg_cb on_msg,
                                       kl__etcd_done_cb on_end, void *arg);
void kl__etcd_stream_cancel(kl__etcd_stream *s);

/* Blocking call for other threads (holder get, release): 0 with *out
 * (malloc'ed, kl__free) and *out_len set, or the error with the message set on
 * the calling thread. K8SLEASE_ESTATE on the loop thread. */
int kl__etcd_sync(kl__etcd_conn *conn, const char *path, const char *body, int64_t timeout_ms,
                  char **out, size_t *out_len);

#endif
