/*
 * h1.h - HTTP/1.1 connections (h1.c): the libmicrohttpd daemon that serves
 * the transport's relays, running each request through the dispatch layer
 * (dispatch.h).
 *
 * The transport (transport.c) starts the daemon and hands it one end of a
 * socketpair per connection (MHD_add_connection), relaying the decrypted
 * bytes through the other. h1.c knows a relay by the descriptor
 * libmicrohttpd was given (mhd_fd) and reaches it through ts_h1_relays,
 * which the transport fills in: h1.c does not include transport.h.
 */
#ifndef TS_H1_H
#define TS_H1_H

#include <stdbool.h>
#include <stdint.h>

struct MHD_Daemon;
typedef struct ts_server ts_server; /* opaque: handed to the dispatch layer */

/*
 * The relays under the daemon, implemented by the transport; ctx is its
 * own. Called from libmicrohttpd's threads, possibly with the server lock
 * held. Owned by the transport; outlives the daemon.
 */
typedef struct ts_h1_relays {
    /* The client presented a certificate signed by our CA, for client authentication. */
    bool (*cert_ok)(void *ctx, int mhd_fd);
    /* The relay ends with a TCP RST once libmicrohttpd closes its side. */
    void (*reset)(void *ctx, int mhd_fd);
    /* Sends cmd to the main thread once what libmicrohttpd wrote is on the wire. */
    void (*after)(void *ctx, int mhd_fd, char cmd);
    /* Stalls the connection for rule (transport.h); -1: the client is gone. */
    int (*stall)(void *ctx, int mhd_fd, uint64_t rule);
    /* The relay is closed (the client left, or the server is going down). */
    bool (*gone)(void *ctx, int mhd_fd);
    void *ctx;
} ts_h1_relays;

/*
 * The daemon that serves the relays, with `threads` workers. NULL on
 * failure (logged).
 */
struct MHD_Daemon *ts_h1_start(ts_server *srv, unsigned threads, ts_h1_relays *relays);

/*
 * Without the lock (transport): the client left a stalled connection.
 * libmicrohttpd does not look at the suspended request that stalled it;
 * its exchange is woken to be dropped.
 */
void ts_h1_stall_gone(ts_server *srv, int mhd_fd);

#endif
