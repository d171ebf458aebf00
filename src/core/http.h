/* HTTPS requests to the API server (or etcd's gateway) with the rest
 * config's TLS and credentials, on an event loop (core/loop.h): the request
 * layer (core/http.c) over two transports (core/transport.h: the native
 * HTTP/2 one and libcurl).
 *
 * Threads: kl__loop_new may be called from any thread. Everything else here
 * only on the loop thread (from a posted closure, a timer or an HTTP
 * callback), except kl__http_sync (any thread but the loop's). */
#ifndef KL_HTTP_H
#define KL_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "core/common.h"
#include "core/loop.h"
#include "core/restconfig.h"

typedef struct kl__http_req kl__http_req;

/* Start a loop thread for requests to cfg's server (kl__loop_free stops it). cfg is
 * copied (what is needed of it). log may be NULL; it is borrowed and must
 * outlive the loop. user_agent (may be NULL) is appended to
 * "k8slease/VERSION" in the User-Agent header. */
int kl__loop_new(kl__loop **out, const kl__restconfig *cfg, const kl__log *log,
                 const char *user_agent);
/* Lower (never raise) the time after which a connection whose peer stopped
 * acknowledging data or keepalive probes is dropped by the kernel
 * (TCP_USER_TIMEOUT; keepalive probes after half of it). Applies to
 * connections opened from then on; requests on older ones are still bounded
 * by their own timeouts, after which their connection is abandoned. Default
 * 5000 ms, floor 100 ms. Loop thread. A loop made by kl__loop_new only. */
void kl__loop_set_dead_timeout(kl__loop *loop, int64_t ms);

/* A completed request. Valid during the callback only. */
typedef struct kl__http_result {
    int err; /* 0: an HTTP response arrived (any status); else a K8SLEASE_E* code */
    const char
        *errmsg;      /* err != 0: what went wrong ("connect to https://...: Connection refused") */
    int unsent;       /* err != 0 and the request surely never reached the server
                         (its name did not resolve, or no connection was made) */
    long status;      /* HTTP status, 0 if none */
    const char *body; /* NUL-terminated; "" if none */
    size_t body_len;
    const char *content_type; /* "" if none */
} kl__http_result;

typedef void (*kl__http_done_cb)(const kl__http_result *res, void *arg);
/* Streaming: called with each piece of the body as it arrives (status
 * 200 only; other statuses are collected and passed to done). Return 0 to
 * go on, nonzero to abort the transfer (done then gets err = that code). */
typedef int (*kl__http_data_cb)(const char *data, size_t len, void *arg);
/* Streaming: called once when the headers of a 200 response have arrived,
 * before any on_data: the stream is established. */
typedef void (*kl__http_open_cb)(void *arg);

typedef struct kl__http_opts {
    const char *method;       /* "GET", "POST", "PUT", "PATCH", "DELETE" */
    const char *path;         /* "/apis/coordination.k8s.io/v1/namespaces/ns/leases/x?..." */
    const char *content_type; /* of body, NULL if none */
    const char *body;         /* copied */
    size_t body_len;
    int64_t timeout_ms;       /* whole request; 0: none (watches) */
    kl__http_data_cb on_data; /* NULL: collect the body */
    /* Streams only: abort if no byte arrived for this long (0: never). */
    int64_t idle_timeout_ms;
    /* The connect phase (name, TCP, TLS handshake) of a new connection this
     * request opens: 0 for the default (30 s, and at most timeout_ms).
     * While a connection is being set up, the other requests of the loop
     * that go on it wait for it (HTTP/2: one connection for them all), so
     * a stream, which has no timeout_ms, should bound its own: a handshake
     * with a server that answers nothing (a hung replica behind a load
     * balancer) would hold everybody. */
    int64_t connect_timeout_ms;
    kl__http_open_cb on_open; /* streams only; may be NULL */
    /* "scheme://host:port" of another server of the same scheme (the etcd
     * endpoints) instead of the configured one; NULL: the configured
     * server. The configured TLS settings apply; tls_server_name does not. */
    const char *base_url;
    /* The whole value of the Authorization header (etcd's raw token)
     * instead of the configured credentials; a 401 is then returned as is,
     * not retried. NULL: the configured credentials. */
    const char *authorization;
    /* Requests with a timeout_ms only: when no answer came after this long
     * (0: never), send the same request again on a new connection, and
     * again after each further hedge_ms (at most 3 copies, 4 in flight in
     * the loop); the first answer is the request's, the others are
     * cancelled and their connections, and the original's when a copy
     * answered first, are abandoned. Only for requests whose repetition is
     * harmless: a read, or a write guarded by a resourceVersion (a copy
     * that comes second gets 409 Conflict, which nobody sees). Through a
     * load balancer a new connection may reach another replica: a hung
     * one's requests are answered by another within hedge_ms. */
    int64_t hedge_ms;
} kl__http_opts;

/* Start a request (loop thread). done is called exactly once on the loop
 * thread, unless the request is cancelled first. Bodies are capped at
 * 16 MiB (err K8SLEASE_EPROTOCOL, message says so). 401 responses make the
 * loop re-read the token file (or re-run the exec plugin, and wait for it)
 * and retry once.
 * Returns NULL on ENOMEM (error set). */
kl__http_req *kl__http_start(kl__loop *loop, const kl__http_opts *opts, kl__http_done_cb done,
                             void *arg);
/* A request that timed out has had its connection abandoned: shut down, so
 * that everything on it fails at once and the next requests open a new one
 * (through a load balancer, to a replica that answers). Connections
 * abandoned so far: a request or a stream on them timed out, or a hedge
 * answered first (the original's, and the hedges' that came second). */
uint64_t kl__loop_abandoned(const kl__loop *loop);
/* Requests answered on a hedge's new connection first (kl__http_opts). */
uint64_t kl__loop_hedges_won(const kl__loop *loop);

/* The transport of the configured server's requests: "native" (HTTP/2
 * connections of our own, core/native.c) or "libcurl" (K8SLEASE_TRANSPORT,
 * or what the configuration allows; the native transport gives way to
 * libcurl for good once the server did not offer HTTP/2). Loop thread. */
const char *kl__loop_transport(const kl__loop *loop);
/* Native HTTP/2 connections opened so far. Loop thread. */
uint64_t kl__loop_h2_connections(const kl__loop *loop);

/* Cancel (loop thread); done is not called. Accepts NULL. */
void kl__http_cancel(kl__loop *loop, kl__http_req *req);

/* Blocking helper for other threads: run a collected request on the loop and
 * wait. On return, *status, *body (malloc'ed, kl__free) are set when the
 * result is 0. Returns 0 (an HTTP response arrived: any status) or the
 * transport error code with the message set on the calling thread.
 * K8SLEASE_ESTATE on the loop thread. */
int kl__http_sync(kl__loop *loop, const kl__http_opts *opts, long *status, char **body,
                  size_t *body_len);

/* Percent-encode a path segment or query value into a malloc'ed string. */
char *kl__url_escape(const char *s);

#endif
