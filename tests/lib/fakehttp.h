/* A small fake HTTP(S) server for unit tests on 127.0.0.1 with a fresh
 * port. The test decides every answer in its handler (tests/unit/
 * test_http.c: the HTTP layer; test_etcd_client.c: fake etcd gateways).
 *
 * Two protocols: HTTP/1.1 (libmicrohttpd, a thread per connection, plain
 * or TLS), and HTTP/2 over TLS (nghttp2 and GnuTLS, ALPN "h2" only: a
 * client that does not offer it fails the handshake), with a thread per
 * connection for its I/O and a thread per request for its handler. Either
 * way a handler may block on purpose: over HTTP/1.1 it holds its
 * connection, over HTTP/2 only its stream.
 *
 * Two handler APIs: kl_fakehttp_serve's works with either protocol
 * (kl_fakehttp_req); kl_fakehttp_start's is libmicrohttpd's own (HTTP/1.1).
 *
 * The functions that can fail fail the running cmocka test. */
#ifndef K8SLEASE_TEST_FAKEHTTP_H
#define K8SLEASE_TEST_FAKEHTTP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <microhttpd.h>

/* Request bodies longer than this are cut (the tests send small ones). */
#define KL_FAKEHTTP_BODY_MAX 4096

typedef enum kl_fakehttp_proto { KL_FAKEHTTP_H1, KL_FAKEHTTP_H2 } kl_fakehttp_proto;

/* One request, of either protocol, for the duration of its handler. */
typedef struct kl_fakehttp_req kl_fakehttp_req;

/* Called once per request, on a thread of its own (see above), with the
 * whole body (NUL-terminated, body_len bytes). It answers with
 * kl_fakehttp_respond or kl_fakehttp_respond_stream (a handler that does
 * not answers 500). */
typedef void (*kl_fakehttp_serve_cb)(void *arg, kl_fakehttp_req *r, const char *method,
                                     const char *url, const char *body, size_t body_len);
/* libmicrohttpd's handler (HTTP/1.1): answer with kl_fakehttp_reply or any
 * MHD_queue_response. */
typedef enum MHD_Result (*kl_fakehttp_handler)(void *arg, struct MHD_Connection *c,
                                               const char *method, const char *url,
                                               const char *body, size_t body_len);

struct kl_fakehttp_h2;

typedef struct kl_fakehttp {
    struct MHD_Daemon *daemon; /* HTTP/1.1; NULL when stopped */
    struct kl_fakehttp_h2 *h2; /* HTTP/2; NULL when stopped */
    int port;
    char url[64]; /* "http://127.0.0.1:PORT" or "https://..." */
    kl_fakehttp_handler handler;
    kl_fakehttp_serve_cb serve;
    void *arg;
} kl_fakehttp;

/* Start s (its address must stay valid until kl_fakehttp_stop) for
 * handler. key_pem and cert_pem NULL: plain HTTP/1.1 (proto must be H1);
 * else TLS with them (copied), and with trust_pem (may be NULL) client
 * certificates signed by it are asked for. */
void kl_fakehttp_serve(kl_fakehttp *s, kl_fakehttp_proto proto, kl_fakehttp_serve_cb handler,
                       void *arg, const char *key_pem, const char *cert_pem, const char *trust_pem);
/* The same for a libmicrohttpd handler, over HTTP/1.1. */
void kl_fakehttp_start(kl_fakehttp *s, kl_fakehttp_handler handler, void *arg, const char *key_pem,
                       const char *cert_pem, const char *trust_pem);
/* Stop s (waits for its threads: release blocked handlers first). Accepts
 * a stopped one. */
void kl_fakehttp_stop(kl_fakehttp *s);

/* The value of a request header (any case; "Host" is HTTP/2's :authority),
 * NULL when it has none. */
const char *kl_fakehttp_header(kl_fakehttp_req *r, const char *name);
/* 1 when the client presented a certificate the trust_pem CA signed. */
int kl_fakehttp_client_cert_ok(kl_fakehttp_req *r);
/* Answer status with body (copied); content_type may be NULL (none). */
void kl_fakehttp_respond(kl_fakehttp_req *r, unsigned status, const char *content_type,
                         const char *body);
/* Answer status with a body read piece by piece: reader(cls, pos, buf,
 * max) returns how many bytes it put in buf, or KL_FAKEHTTP_END; it may
 * block. size: the body's length, or KL_FAKEHTTP_SIZE_UNKNOWN. Returns
 * once the body is out, or the client went. */
#define KL_FAKEHTTP_END          ((ssize_t)-1)
#define KL_FAKEHTTP_SIZE_UNKNOWN UINT64_MAX
typedef ssize_t (*kl_fakehttp_reader)(void *cls, uint64_t pos, char *buf, size_t max);
void kl_fakehttp_respond_stream(kl_fakehttp_req *r, unsigned status, const char *content_type,
                                uint64_t size, kl_fakehttp_reader reader, void *cls);

/* Queue body (copied) with status; content_type may be NULL (no header). */
enum MHD_Result kl_fakehttp_reply(struct MHD_Connection *c, unsigned int status,
                                  const char *content_type, const char *body);

#endif
