/* The client's event loop: one thread running libcurl multi, a timer heap
 * and a queue of posted closures; HTTPS requests to the API server with the
 * rest config's TLS and auth.
 *
 * Threads: kl__loop_new/free and kl__loop_post/kl__loop_call may be called
 * from any thread (free not from the loop thread). Everything else only on
 * the loop thread (from a posted closure, a timer or an HTTP callback). */
#ifndef KL_HTTP_H
#define KL_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "core/common.h"
#include "k8s/kubeconfig.h"

typedef struct kl__loop kl__loop;
typedef struct kl__http_req kl__http_req;

/* Start the loop thread. cfg is copied (what is needed of it). log may be
 * NULL; it is borrowed and must outlive the loop. user_agent (may be NULL)
 * is appended to "k8slease/VERSION" in the User-Agent header. */
int kl__loop_new(kl__loop **out, const kl__restconfig *cfg, const kl__log *log,
                 const char *user_agent);
/* Stop the thread; requests still in flight are cancelled without their
 * callbacks; posted closures not yet run are run first. */
void kl__loop_free(kl__loop *loop);

/* Run fn(arg) on the loop thread soon (FIFO). 0 or K8SLEASE_ENOMEM. */
int kl__loop_post(kl__loop *loop, void (*fn)(void *arg), void *arg);
/* Run fn(arg) on the loop thread and wait until it returned. Allocates
 * nothing, so it cannot run out of memory. Returns K8SLEASE_ESTATE when
 * called on the loop thread itself. */
int kl__loop_call(kl__loop *loop, void (*fn)(void *arg), void *arg);
int kl__loop_on_thread(const kl__loop *loop);

/* Monotonic ns read once per loop iteration (loop thread). */
int64_t kl__loop_now(const kl__loop *loop);
const kl__log *kl__loop_log(const kl__loop *loop);
/* Lower (never raise) the time after which a connection whose peer stopped
 * acknowledging data or keepalive probes is dropped by the kernel
 * (TCP_USER_TIMEOUT; keepalive probes after half of it). Applies to
 * connections opened from then on; requests on older ones are still bounded
 * by their own timeouts, after which libcurl closes the connection. Default
 * 5000 ms, floor 100 ms. Loop thread. */
void kl__loop_set_dead_timeout(kl__loop *loop, int64_t ms);

/* Timers (loop thread only). A timer is embedded in its owner's struct. */
typedef struct kl__timer kl__timer;
typedef void (*kl__timer_cb)(kl__timer *t, void *arg);
struct kl__timer {
    int64_t at;  /* monotonic ns */
    size_t slot; /* index in the heap + 1; 0 when not armed */
    kl__timer_cb cb;
    void *arg;
};
void kl__timer_init(kl__timer *t, kl__timer_cb cb, void *arg);
/* (Re)arm at the monotonic time at (ns). */
void kl__timer_arm(kl__loop *loop, kl__timer *t, int64_t at);
void kl__timer_cancel(kl__loop *loop, kl__timer *t);

/* A completed request. Valid during the callback only. */
typedef struct kl__http_result {
    int err; /* 0: an HTTP response arrived (any status); else a K8SLEASE_E* code */
    const char
        *errmsg;      /* err != 0: what went wrong ("connect to https://...: Connection refused") */
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
    kl__http_open_cb on_open; /* streams only; may be NULL */
    /* "scheme://host:port" of another server of the same scheme (the etcd
     * endpoints) instead of the configured one; NULL: the configured
     * server. The configured TLS settings apply; tls_server_name does not. */
    const char *base_url;
    /* The whole value of the Authorization header (etcd's raw token)
     * instead of the configured credentials; a 401 is then returned as is,
     * not retried. NULL: the configured credentials. */
    const char *authorization;
} kl__http_opts;

/* Start a request (loop thread). done is called exactly once on the loop
 * thread, unless the request is cancelled first. Bodies are capped at
 * 16 MiB (err K8SLEASE_EPROTOCOL, message says so). 401 responses make the
 * loop re-read the token file (or re-run the exec plugin) and retry once.
 * Returns NULL on ENOMEM (error set). */
kl__http_req *kl__http_start(kl__loop *loop, const kl__http_opts *opts, kl__http_done_cb done,
                             void *arg);
/* Cancel (loop thread); done is not called. Accepts NULL. */
void kl__http_cancel(kl__loop *loop, kl__http_req *req);

/* Blocking helper for other threads: run a collected request on the loop and
 * wait. On return, *status, *body (malloc'ed, kl__free) are set when the
 * result is 0. Returns 0 (an HTTP response arrived: any status) or the
 * transport error code with the message set on the calling thread.
 * K8SLEASE_ESTATE on the loop thread. */
int kl__http_sync(kl__loop *loop, const kl__http_opts *opts, long *status, char **body,
                  size_t *body_len);

/* Map an HTTP error response to a K8SLEASE_E* code and set the thread's
 * error message: "<what>: HTTP <status> <reason>: <Status.message>". */
int kl__http_status_error(long status, const char *body, size_t body_len, const char *what);

/* Percent-encode a path segment or query value into a malloc'ed string. */
char *kl__url_escape(const char *s);

#endif
