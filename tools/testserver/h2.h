/*
 * h2.h - HTTP/2 connections (h2.c): one nghttp2 server session per
 * connection, on the connection's I/O thread, running each stream's request
 * through the dispatch layer (dispatch.h).
 *
 * The transport (transport.c) creates a session once TLS has chosen h2,
 * feeds it the decrypted bytes and asks it for frames. What the session
 * needs of its connection it reaches through ts_tconn_ops, which the
 * transport gives it with the connection: h2.c does not include
 * transport.h.
 */
#ifndef TS_H2_H
#define TS_H2_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ts_server ts_server; /* opaque: handed to the dispatch layer */
typedef struct ts_tconn ts_tconn;   /* the transport's TLS connection: opaque here */

/* The connection under a session, implemented by the transport. */
typedef struct ts_tconn_ops {
    /* Encrypts and queues plaintext for the client. -1: out of memory. */
    int (*write)(ts_tconn *tc, const void *p, size_t n);
    /* The bytes queued for the socket, with more on top, reach the
     * connection's high-water mark: stop producing. */
    bool (*full)(const ts_tconn *tc, size_t more);
    /* The client presented a certificate signed by our CA, for client authentication. */
    bool (*cert_ok)(const ts_tconn *tc);
    /* Any thread: run ts_h2_wake on the connection's thread soon. */
    void (*poke)(ts_tconn *tc);
    /* I/O thread: send cmd to the main thread once everything queued is on the wire. */
    void (*after)(ts_tconn *tc, char cmd);
    /* I/O thread, server lock held: stall the connection for rule (transport.h). */
    void (*stall)(ts_tconn *tc, uint64_t rule);
    /* Any thread: the connection is stalled now. */
    bool (*stalled)(const ts_tconn *tc);
} ts_tconn_ops;

typedef struct ts_h2 ts_h2;
/* A session on tc, which outlives it. NULL: out of memory. */
ts_h2 *ts_h2_new(ts_server *srv, unsigned max_streams, const ts_tconn_ops *ops, ts_tconn *tc);
/* Feeds decrypted bytes. -1: the session is broken (close). */
int ts_h2_recv(ts_h2 *h, const uint8_t *p, size_t n);
/* Queues frames until nothing is left or the connection is full. -1: close. */
int ts_h2_send(ts_h2 *h);
/* Streams woken by other threads: answer held requests, resume bodies; after
 * a stall, run the requests that arrived during it. Nothing while stalled. */
void ts_h2_wake(ts_h2 *h);
/* Both sides are done (GOAWAY exchanged, or a fatal error). */
bool ts_h2_finished(ts_h2 *h);
/* Frees every stream (their watches, held requests) and the session. */
void ts_h2_free(ts_h2 *h);

#endif
