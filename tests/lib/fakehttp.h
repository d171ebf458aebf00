/* A small fake HTTP(S) server for unit tests: libmicrohttpd on 127.0.0.1
 * with a fresh port, a thread per connection (so a handler may block on
 * purpose), request bodies collected before the handler runs. The test
 * decides every answer in its handler (tests/unit/test_http.c: the HTTP
 * layer; test_etcd_client.c: fake etcd gateways).
 *
 * The functions that can fail fail the running cmocka test. */
#ifndef K8SLEASE_TEST_FAKEHTTP_H
#define K8SLEASE_TEST_FAKEHTTP_H

#include <stddef.h>

#include <microhttpd.h>

/* Request bodies longer than this are cut (the tests send small ones). */
#define KL_FAKEHTTP_BODY_MAX 4096

/* Called once per request, on the connection's thread, with the whole body
 * (NUL-terminated, body_len bytes). Answer with kl_fakehttp_reply or any
 * MHD_queue_response. */
typedef enum MHD_Result (*kl_fakehttp_handler)(void *arg, struct MHD_Connection *c,
                                               const char *method, const char *url,
                                               const char *body, size_t body_len);

typedef struct kl_fakehttp {
    struct MHD_Daemon *daemon; /* NULL when stopped */
    int port;
    char url[64]; /* "http://127.0.0.1:PORT" or "https://..." */
    kl_fakehttp_handler handler;
    void *arg;
} kl_fakehttp;

/* Start s (its address must stay valid until kl_fakehttp_stop). key_pem
 * and cert_pem NULL: plain HTTP; else HTTPS with them (copied), and with
 * trust_pem (may be NULL) client certificates signed by it are asked for. */
void kl_fakehttp_start(kl_fakehttp *s, kl_fakehttp_handler handler, void *arg, const char *key_pem,
                       const char *cert_pem, const char *trust_pem);
/* Stop s (waits for its connections' threads). Accepts a stopped one. */
void kl_fakehttp_stop(kl_fakehttp *s);

/* Queue body (copied) with status; content_type may be NULL (no header). */
enum MHD_Result kl_fakehttp_reply(struct MHD_Connection *c, unsigned int status,
                                  const char *content_type, const char *body);

#endif
