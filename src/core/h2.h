/* One HTTP/2 connection over TLS, on nghttp2 and OpenSSL, its socket
 * watched by the loop: the connections of the native transport
 * (core/native.c). It knows streams, not requests: the request layer
 * (core/http.c) keeps the requests, their deadlines, credentials and
 * retries.
 *
 * What it does for the cost of a request: the frames queued during a loop
 * iteration go out as one TLS write (kl__h2_flush, before the loop sleeps);
 * the bytes read are handed to nghttp2, which gives each stream its own, and
 * nothing else runs per arrival.
 *
 * Threads: the loop thread only. Callbacks (kl__h2_ops) run inside
 * kl__h2_io, kl__h2_flush and kl__h2_fail: they may only record what
 * happened (native.c queues the transfer and reports it later); they must not
 * submit, cancel or free. */
#ifndef KL_H2_H
#define KL_H2_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <nghttp2/nghttp2.h>
#include <openssl/ssl.h>

#include "core/common.h"
#include "core/loop.h"

typedef struct kl__h2 kl__h2;

/* How a stream ended. */
typedef struct kl__h2_end {
    int err;            /* 0: the whole answer arrived; else K8SLEASE_E* */
    const char *kind;   /* err: "connect", "TLS", "receive", "timeout", "protocol", ... */
    const char *detail; /* err: what went wrong */
    int connection;     /* err: about the connection (the server), not this stream */
    int unsent;         /* err: the server surely did not process the request (no
                           connection was made, or it refused the stream): it may go again */
    int no_h2;          /* err: the server does not speak HTTP/2 over TLS (ALPN) */
} kl__h2_end;

typedef struct kl__h2_ops {
    /* The answer's final status and content type ("" if none). */
    void (*on_response)(void *arg, int status, const char *content_type);
    /* Bytes of the answer's body. Nonzero: the stream is reset and no
     * callback follows for it (the caller ends it). */
    int (*on_body)(void *arg, const char *data, size_t len);
    /* The stream ended; no callback follows for it. */
    void (*on_close)(void *arg, const kl__h2_end *end);
} kl__h2_ops;

typedef struct kl__h2_config {
    kl__loop *loop;
    const struct sockaddr *addr; /* where to connect (copied) */
    socklen_t addrlen;
    SSL_CTX *ctx;            /* borrowed; must outlive the connection */
    const char *verify_host; /* name or address the certificate must match and SNI
                                (a name only); NULL: no check (insecure) */
    int64_t connect_timeout_ms;
    int64_t dead_ms; /* TCP_USER_TIMEOUT and keepalive, as libcurl's connections */
    const kl__h2_ops *ops;
} kl__h2_config;

/* TCP_NODELAY, keepalive probes after half of dead_ms and TCP_USER_TIMEOUT
 * dead_ms on a connection's socket (libcurl's too: core/curl.c). */
void kl__tcp_dead_timeout(int fd, int64_t dead_ms);

/* Start connecting. K8SLEASE_ENOMEM, or K8SLEASE_ETRANSPORT when no socket
 * could be made (error set: "connect: socket: ..."). */
int kl__h2_open(kl__h2 **out, const kl__h2_config *cfg);
/* Free at once: no callbacks; its streams' args are forgotten. */
void kl__h2_free(kl__h2 *c);
/* Whether a new stream may go on it (not failed, no GOAWAY received). */
int kl__h2_usable(const kl__h2 *c);
/* Failed: every stream ended; free it. */
int kl__h2_dead(const kl__h2 *c);
/* No stream on it. */
int kl__h2_idle(const kl__h2 *c);
/* The local port of its socket (0 until connected), for messages. */
unsigned kl__h2_port(const kl__h2 *c);
/* Lower the connect deadline (a new request asks for less). */
void kl__h2_connect_deadline(kl__h2 *c, int64_t ms);

/* Queue a request; sent by the next kl__h2_flush. nva: the headers
 * (:method, :scheme, :authority, :path first; copied). The body is
 * borrowed: it must stay until the stream ends or is cancelled (nghttp2
 * reads it only while the stream is open, and a cancelled stream's reset
 * goes out before any more of its data). Returns
 * the stream id (> 0), or K8SLEASE_ENOMEM / K8SLEASE_ESTATE (not usable). */
int32_t kl__h2_submit(kl__h2 *c, const nghttp2_nv *nva, size_t nvlen, const char *body,
                      size_t body_len, int has_body, void *arg);
/* Forget a stream (no more callbacks) and reset it. */
void kl__h2_cancel(kl__h2 *c, int32_t id);
/* The socket is ready (epoll events). drain: read until the socket has
 * nothing more (at most 1 MiB; then kl__h2_more), for a loop that will not
 * look again at once (batched waits); else what one recv brought. */
void kl__h2_io(kl__h2 *c, uint32_t events, int drain);
/* The last draining read stopped with more to read. */
int kl__h2_more(const kl__h2 *c);
/* Send what is queued, as few TLS writes as it takes. */
void kl__h2_flush(kl__h2 *c);
/* End every stream with this error (about each stream, not the
 * connection) and close: a request on it timed out, it is abandoned. */
void kl__h2_fail(kl__h2 *c, int err, const char *kind, const char *detail);

#endif
