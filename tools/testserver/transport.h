/*
 * transport.h - the listening socket, TLS (GnuTLS, ALPN h2 / http/1.1,
 * client certificates) and the split between HTTP/2 (h2.c, nghttp2) and
 * HTTP/1.1 (h1.c: libmicrohttpd, fed decrypted bytes through a socketpair).
 * See the comment at the top of transport.c for why it is built this way.
 *
 * The top layer: below it are only the protocol modules, h2.c (h2.h) and
 * h1.c (h1.h), which run each request through the dispatch layer; the
 * transport gives them its connections behind ops (ts_tconn_ops,
 * ts_h1_relays), and neither includes this header. The server it passes
 * along is opaque here; what the transport needs of it (options,
 * certificates, the main-thread notification) comes in
 * ts_transport_config.
 *
 * Threads: `threads` epoll threads own every accepted connection.
 */
#ifndef TS_TRANSPORT_H
#define TS_TRANSPORT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ts_server ts_server; /* opaque: handed to h1.c and h2.c */
typedef struct ts_transport ts_transport;

typedef struct ts_transport_config {
    ts_server *srv;          /* for the dispatch layer, through h1.c and h2.c */
    unsigned threads;        /* I/O threads, and as many libmicrohttpd workers */
    bool no_http2;           /* ALPN offers http/1.1 only */
    unsigned h2_max_streams; /* SETTINGS_MAX_CONCURRENT_STREAMS we advertise */
    /* PEM, read by ts_transport_new only */
    const char *server_crt, *server_key, *ca_crt;
    /* Any thread: a command for the main thread ('R' after a restart's
     * answer), once what carried it is on the wire. */
    void (*notify)(void *ctx, char cmd);
    void *notify_ctx;
} ts_transport_config;

/*
 * A listening socket on address ("127.0.0.1" or "::1") and port (0: any),
 * with the bound port in *bound. The descriptor, or -1 with errno set.
 */
int ts_transport_listen(const char *address, unsigned port, unsigned *bound);
/* Loads the server's key, certificate and CA into GnuTLS. NULL on failure (logged). */
ts_transport *ts_transport_new(const ts_transport_config *cfg);
/*
 * Starts libmicrohttpd (h1.c) and the I/O threads on listen_fd (owned from
 * now on: closed by ts_transport_stop, or here on failure).
 */
int ts_transport_start(ts_transport *t, int listen_fd);
/*
 * Closes the listener and every connection, joins the threads, then stops
 * libmicrohttpd (without the lock).
 */
void ts_transport_stop(ts_transport *t);
void ts_transport_free(ts_transport *t);

/*
 * Stalls (the `stall` fault), with the server lock held. A stalled
 * connection is left alone by its I/O thread: nothing is read from its
 * socket or decrypted, nothing written (not even what was queued), no
 * request run; only the client's leaving (FIN, RST) is noticed, and closes
 * it. It resumes where it stopped once ts_transport_stall_sync finds its
 * rule over.
 */
/* Connections whose rule alive() no longer reports resume. */
void ts_transport_stall_sync(ts_transport *t, bool (*alive)(void *ctx, uint64_t rule), void *ctx);
/* How many connections rule stalls now (0: all rules). */
size_t ts_transport_stalled(ts_transport *t, uint64_t rule);

/* {"h2": {"open", "total"}, "http1": {...}, "tls_failures", "stalled"}; the
 * counters survive restarts. */
json_t *ts_transport_stats_json(ts_transport *t);

#endif
