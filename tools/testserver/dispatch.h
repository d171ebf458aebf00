/*
 * dispatch.h - one request's life cycle, shared by HTTP/1.1 and HTTP/2
 * (dispatch.c): authentication, faults, holding, statistics, routing to a
 * handler (api.c or control.c) and the answer.
 *
 * The interface the protocol modules (h1.c, h2.c) use, under the transport.
 * They give each request a ts_conn (conn.h) and feed the exchange; they get
 * back a ts_answer to put on the wire. Nothing here knows a socket or a
 * protocol library, and they know the server only as an opaque ts_server.
 */
#ifndef TS_DISPATCH_H
#define TS_DISPATCH_H

#include "conn.h"
#include "faults.h"
#include "sched.h"
#include "util.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ts_server ts_server; /* state.h; opaque to h1.c and h2.c */

/* A complete answer, ready for the wire. */
typedef struct ts_answer {
    unsigned code;
    const char *content_type; /* NULL: none (static or owned by the exchange) */
    const char *location;     /* NULL: none */
    unsigned retry_after;     /* > 0: Retry-After */
    char audit_id[37];
    char *data; /* a complete body (malloc'ed; the protocol frees it) ... */
    size_t len;
    ts_body body; /* ... or a streamed one (body.read != NULL) */
} ts_answer;

/*
 * ts_exchange: one request's life cycle, shared by both protocols: decide
 * faults, hold it (latency, hang), reset it, answer it with a canned
 * response, or authenticate it and run the handlers.
 */
typedef struct ts_exchange {
    ts_conn *conn;
    ts_sleeper sl;
    int phase;
    ts_buf body;
    bool too_large;
    bool control;
    bool hang_counted;
    bool stalled; /* d.stall stalled the connection; the request waits for the rule's end */
    int64_t latency_until;
    ts_decision d;
    ts_client client; /* strings borrowed from the protocol: valid until ts_exchange_free */
    char after;       /* main-thread command to send once the answer is out */
} ts_exchange;

enum {
    TS_X_WAIT,
    TS_X_RESET,
    TS_X_ANSWER,
    TS_X_DROP,  /* going down: see TS_BODY_DROP */
    TS_X_GOAWAY /* refused unprocessed: h2 GOAWAY below the stream; HTTP/1.1: as TS_X_RESET */
};

void ts_exchange_init(ts_exchange *x, ts_conn *c);
/* Adds body bytes; beyond the apiserver's limit the request gets a 413. */
int ts_exchange_add_body(ts_exchange *x, const void *p, size_t n);
/*
 * Runs the request (call without the lock). TS_X_WAIT: parked, run it again
 * when x->conn is resumed; TS_X_RESET: close with a reset, no answer;
 * TS_X_ANSWER: send *a; TS_X_GOAWAY: a `goaway` fault refuses the request,
 * which was not processed (nothing stored, no answer): the protocol tells the
 * client so (HTTP/2: GOAWAY with a last-stream-id below the request's
 * stream; HTTP/1.1 cannot, and closes with a reset). -1: out of memory (close).
 */
int ts_exchange_run(ts_server *srv, ts_exchange *x, const char *method, const char *path,
                    ts_answer *a);
/* Forgets the exchange (call without the lock); a parked one is unparked. */
void ts_exchange_free(ts_server *srv, ts_exchange *x);
void ts_answer_free(ts_answer *a); /* frees data or the streamed body */

/* Without the lock (h1.c, for the transport): the client left a stalled
 * HTTP/1.1 connection, whose reap_fd is fd; its held request is woken to be
 * dropped. */
void ts_exchange_conn_gone(ts_server *srv, int fd);

#endif
