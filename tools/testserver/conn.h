/*
 * conn.h - one request's connection and a streamed answer, as the layers
 * under the transport see them: an interface with no code behind it.
 *
 * The transport's protocol modules implement both: a ts_conn is an
 * HTTP/1.1 connection (h1.c, libmicrohttpd) or an HTTP/2 stream (h2.c), and
 * each registers its ops when it creates one. Everything below uses them without
 * knowing the protocol: the dispatch layer (dispatch.h) to read the request
 * and hold it, the handlers (api.h) to read parameters and headers, watches
 * and the scheduler (sched.h) to park a stream and wake it. A ts_body is
 * produced below (watch.c, dispatch.c) and read by h1.c or h2.c.
 *
 * Nothing here includes another header of the server: every layer may
 * include it.
 */
#ifndef TS_CONN_H
#define TS_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * ts_conn: the transport of one request, whatever the protocol - an
 * HTTP/1.1 connection (libmicrohttpd) or an HTTP/2 stream (h2.c). Handlers,
 * watches and the scheduler see only this; parking a request or a stream
 * (ts_sched_suspend) and waking it go through ops.
 */
typedef struct ts_conn ts_conn;
typedef struct ts_conn_ops {
    const char *(*query)(ts_conn *c, const char *key);  /* first value, decoded */
    const char *(*header)(ts_conn *c, const char *key); /* case-insensitive */
    void (*suspend)(ts_conn *c);   /* lock held; the caller then returns "no data yet" */
    void (*resume)(ts_conn *c);    /* lock held, any thread */
    void (*set_reset)(ts_conn *c); /* the next close is a reset, not a clean end */
    /* lock held, from the request's own handler: stall the whole connection for
     * a `stall` rule (transport.h); -1: the client is gone already */
    int (*stall)(ts_conn *c, uint64_t rule);
    bool (*gone)(ts_conn *c); /* lock held: the client left (HTTP/1.1 relay closed) */
} ts_conn_ops;

struct ts_conn {
    const ts_conn_ops *ops;
    const char *proto; /* "h2" or "http/1.1" */
    bool cert_ok;      /* the client presented a certificate our CA signed, for clients */
    int reap_fd;       /* polled for hang-ups while parked (ts_watch_reap), -1: not needed */
};

/* Sets up the closing of c as a reset (TCP RST over HTTP/1.1, RST_STREAM over h2). */
static inline void ts_conn_set_reset(ts_conn *c)
{
    c->ops->set_reset(c);
}

/*
 * A streamed response body (watch streams, trickled canned answers), read by
 * either protocol. read returns a byte count, 0 after parking the stream
 * with ts_sched_suspend (the protocol waits for ops->resume), or one of:
 */
#define TS_BODY_END   (-1) /* the body is complete */
#define TS_BODY_ERROR (-2) /* abandon: close (HTTP/1.1) or reset the stream (h2) */
#define TS_BODY_DROP                                                                               \
    (-3) /* the server is going down: close (HTTP/1.1), or leave the                               \
            h2 stream to the connection's close (no RST_STREAM) */
typedef struct ts_body {
    long (*read)(void *ctx, char *buf, size_t max); /* takes the lock itself */
    void (*free)(void *ctx);                        /* takes the lock itself */
    void *ctx;
    uint64_t size; /* UINT64_MAX: unknown (chunked over HTTP/1.1) */
} ts_body;

#endif
