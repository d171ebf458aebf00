/* Between the request layer (core/http.c: deadlines, credentials, the retry
 * after a 401, hedges, abandon) and the transports that carry its requests
 * on connections of their own: core/curl.c (libcurl multi) and
 * core/native.c (HTTP/2 connections of our own, core/h2.c). As curl's
 * connection filters: a request is on one transport at a time, and a
 * connection carries one transport's requests only.
 *
 * Down (request layer -> transport): launch, cancel, abandon, and the
 * loop's hooks (run, busy, flush). Up (transport -> request layer):
 * kl__req_headers and kl__req_body as the answer arrives, kl__req_end when
 * the transfer is over ("finish").
 *
 * Threads: the loop thread only. */
#ifndef KL_TRANSPORT_H
#define KL_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "core/common.h"
#include "core/http.h"
#include "core/loop.h"
#include "core/tls.h"

/* The content type of every answer of the API server: not copied. */
#define KL__JSON_TYPE "application/json"
/* Requests (not streams) the request layer has on its transports at once;
 * the others wait in FIFO order. The transports size their connections for
 * it. */
#define KL__HTTP_MAX_ACTIVE 64

/* What the transports share with the request layer (owned by it). */
typedef struct kl__http_conf {
    kl__loop *loop;
    const kl__log *log;
    const char *server;     /* the configured server, for messages */
    const char *user_agent; /* the whole User-Agent header's value */
    const kl__tls *tls;
    int64_t dead_ms; /* TCP_USER_TIMEOUT of new connections (kl__loop_set_dead_timeout) */
} kl__http_conf;

/* A request as a transport sends it (valid during launch; the body until
 * the transfer ends or is cancelled). */
typedef struct kl__launch {
    const char *method, *path, *content_type; /* content_type NULL: none */
    const char *body;                         /* NULL unless has_body */
    size_t body_len;
    int has_body;
    /* "scheme://host:port" of another server than the configured one (an
     * etcd endpoint), NULL: the configured one. */
    const char *server;
    const char *auth_line; /* "Authorization: ..." or NULL */
    /* An exec plugin's client certificate and key (PEM), NULL: the
     * configured one, if any (the TLS setup's). */
    const char *cert_pem, *key_pem;
    int stream;         /* its 200 answer streams: kl__req_headers tells when */
    int fresh;          /* a hedge: on a new connection of its own */
    int64_t connect_ms; /* the connect phase of a new connection, at most */
} kl__launch;

/* How a transfer ended. */
typedef struct kl__xfer_end {
    int err;                  /* 0: the whole answer arrived; else K8SLEASE_E* */
    long status;              /* err 0: the HTTP status */
    const char *content_type; /* err 0: "" if none; valid during kl__req_end */
    const char *kind;         /* err: "connect", "TLS", "timeout", "receive", ... */
    const char *detail;       /* err: what went wrong */
    int connection;           /* err: about the connection (the server), not the request */
    int unsent;    /* err: surely not processed (no connection was made): may go elsewhere */
    int refused;   /* err: refused unprocessed by the server: may be sent again at once */
    int abandoned; /* err: its connection was abandoned (another request timed out) */
    int no_h2;     /* err: the server does not speak HTTP/2 (the native transport) */
} kl__xfer_end;

typedef struct kl__transport kl__transport;
typedef struct kl__transport_ops {
    const char *name; /* "native", "libcurl" */
    /* Send req (l as above). 0: *xfer is the transfer, until kl__req_end
     * or cancel; else a K8SLEASE_E* code with the error set (the request
     * layer reports it; nothing was sent). */
    int (*launch)(kl__transport *t, kl__http_req *req, const kl__launch *l, void **xfer);
    /* Forget the transfer: no more calls about it. */
    void (*cancel)(kl__transport *t, void *xfer);
    /* The transfer's connection is to go: shut it down, so that everything
     * on it ends at once (kl__xfer_end.abandoned) and the next requests
     * open a new one. 1 when it went (*port: its local port, 0 when it was
     * not connected yet), 0 when the transfer is on none (yet, or any
     * more): nothing was done. */
    int (*abandon)(kl__transport *t, void *xfer, unsigned *port);
    /* The loop's hooks: report the transfers that ended (kl__req_end), and
     * whatever else the iteration's I/O or the transport's own deadline
     * left to do; how long the next wait may last (ms, 0: work waits, -1:
     * no limit); send what is queued (nonzero: that left work). */
    void (*run)(kl__transport *t);
    long (*timeout_ms)(kl__transport *t);
    int (*flush)(kl__transport *t);
    /* Free it and every transfer on it, without a call. */
    void (*free)(kl__transport *t);
} kl__transport_ops;

struct kl__transport {
    const kl__transport_ops *ops;
};

/* Up: the answer's status and headers arrived (called again after an
 * informational one). */
void kl__req_headers(kl__http_req *req, long status);
/* Up: bytes of the answer's body. Nonzero: the request wants no more (its
 * error is set: the body is over 16 MiB, or no memory); the transport ends
 * the transfer and reports its end. Never calls back. */
int kl__req_body(kl__http_req *req, const char *data, size_t len);
/* Up ("finish"): the transfer ended; from the transport's run (or a timer:
 * never inside a libcurl or nghttp2 callback). The transfer is gone for
 * the request layer; the transport frees it after this returns. */
void kl__req_end(kl__http_req *req, const kl__xfer_end *end);

/* The transports. */
/* libcurl. base: the prefix of the configured server's request URLs;
 * connect_to: its CONNECT_TO rule ("::host:port", when its URL carries
 * tls-server-name), NULL: none; protocols: "https" or "http" (borrowed).
 * K8SLEASE_ENOMEM, or K8SLEASE_ETRANSPORT when libcurl is unusable (error
 * set). */
int kl__curl_new(kl__transport **out, const kl__http_conf *conf, const char *base,
                 const char *connect_to, const char *protocols);
/* HTTP/2 connections of our own to the configured server, at addr
 * (copied); authority: its :authority; verify_host: the name or address
 * its certificate must carry (NULL: not checked). K8SLEASE_ENOMEM. */
int kl__native_new(kl__transport **out, const kl__http_conf *conf, const void *addr,
                   unsigned addrlen, const char *authority, const char *verify_host);
/* Native HTTP/2 connections opened so far. */
uint64_t kl__native_opened(const kl__transport *t);

#endif
