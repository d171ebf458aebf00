/*
 * server.h - the server object shared by the HTTP layer, the Kubernetes API
 * handlers, watches and the control API.
 *
 * Threads: the transport (transport.c) runs `threads` epoll threads that own
 * the listening socket, TLS and HTTP/2 sessions; libmicrohttpd runs a pool
 * of `threads` epoll threads for HTTP/1.1; the scheduler (sched.h) has one
 * timer thread; the main thread waits for signals and restart requests. All
 * mutable state below `mu` is guarded by it - one lock is plenty for a test
 * server and leaves no ordering questions. Transport-private locks are only
 * ever taken inside `mu`, never the other way round.
 */
#ifndef TS_SERVER_H
#define TS_SERVER_H

#include "certs.h"
#include "cle.h"
#include "conn.h"
#include "faults.h"
#include "objects.h"
#include "sched.h"
#include "store.h"

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct ts_watch ts_watch;
typedef struct ts_transport ts_transport;

typedef struct ts_config {
    char *dir;                /* absolute */
    bool dir_is_temp;         /* made with mkdtemp: removed at exit */
    char address[64];         /* "127.0.0.1" or "::1" */
    unsigned port;            /* requested; 0 = any */
    const char *token;        /* --token (points into argv), or NULL */
    size_t history;           /* watch history ring size */
    unsigned bookmark_ms;     /* BOOKMARK period ... */
    bool bookmarks_real;      /* ... or the apiserver's: every 60 s and 2 s before timeoutSeconds */
    bool no_http2;            /* ALPN offers http/1.1 only */
    unsigned h2_max_streams;  /* SETTINGS_MAX_CONCURRENT_STREAMS we advertise */
    unsigned threads;         /* transport threads, and as many libmicrohttpd workers */
    uint64_t seed;            /* PRNG for fault probabilities */
    bool verbose;             /* one log line per request */
    json_t *faults;           /* --fault rules to install at start (array) */
    bool cle;                 /* --feature-gates=CoordinatedLeaderElection=true */
    unsigned cle_election_ms; /* the controller's election duration and requeue interval */
} ts_config;

/* Counters for GET /testserver/v1/stats. */
typedef struct ts_stats {
    uint64_t requests; /* API requests (control requests excluded) */
    uint64_t control;  /* control requests */
    json_t *by_method; /* {"GET": n} */
    json_t *by_verb;   /* {"get": {"200": n, "404": n}} */
    json_t *by_status; /* {"200": n, "reset": n} */
    uint64_t watches_total;
    uint64_t by_proto[2]; /* API requests over h2, over HTTP/1.1 */
} ts_stats;

typedef struct ts_server {
    ts_config cfg;
    char *server_url; /* https://127.0.0.1:PORT */
    unsigned port;    /* bound port */
    int64_t started_ms;

    pthread_mutex_t mu; /* guards everything below */
    ts_store store;
    ts_faults faults;
    ts_sched sched;
    ts_stats stats;
    ts_cle cle;        /* the coordinated-leader-election controller (cfg.cle) */
    ts_watch *watches; /* open watch streams (doubly linked) */
    size_t nwatches;
    int64_t next_reap; /* when ts_watch_reap runs next */
    char *token;       /* the accepted bearer token */
    bool draining;     /* stopping or restarting: end streams, refuse to wait */
    uint64_t restarts;

    ts_pki pki;
    ts_transport *transport; /* listener, TLS, HTTP/2, HTTP/1.1 (transport.c, h2.c, h1.c) */
    bool serving;            /* between ts_server_start and ts_server_stop (main thread) */

    /* Main-thread wakeups: 'T' terminate, 'R' restart (see main.c). */
    int wake_pipe[2];
    bool restart_keep_state;
    int64_t restart_down_ms;
} ts_server;

/* ---- server.c: the request life cycle, start and stop ------------------ */

int ts_server_init(ts_server *srv);
/*
 * Binds (cfg address/port, or the port of a previous run) and starts the
 * transport. The first time it also sets server_url and writes the
 * kubeconfigs.
 */
int ts_server_start(ts_server *srv);
/* Ends streams, resumes parked connections and stops the transport (for exit/restart). */
void ts_server_stop(ts_server *srv);
void ts_server_free(ts_server *srv);
/* Wakes the main thread with a command byte ('T' or 'R'). */
void ts_server_notify_main(ts_server *srv, char cmd);

/* Access to one request for the handlers. */
typedef struct ts_request {
    ts_conn *conn;
    const char *method;
    const char *path;
    const char *body;
    size_t body_len;
    const ts_client *client;
} ts_request;

const char *ts_request_query(const ts_request *rq, const char *key);
const char *ts_request_header(const ts_request *rq, const char *key);

/* What a handler answers. */
typedef struct ts_response {
    unsigned code;
    json_t *body;         /* JSON answer (object or Status) */
    const char *text;     /* or a static text/plain answer */
    ts_watch *stream;     /* or a watch stream */
    unsigned retry_after; /* adds Retry-After when > 0 */
    char after;           /* main-thread command after completion, or 0 */
} ts_response;

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

enum { TS_X_WAIT, TS_X_RESET, TS_X_ANSWER, TS_X_DROP /* going down: see TS_BODY_DROP */ };

void ts_exchange_init(ts_exchange *x, ts_conn *c);
/* Adds body bytes; beyond the apiserver's limit the request gets a 413. */
int ts_exchange_add_body(ts_exchange *x, const void *p, size_t n);
/*
 * Runs the request (call without the lock). TS_X_WAIT: parked, run it again
 * when x->conn is resumed; TS_X_RESET: close with a reset, no answer;
 * TS_X_ANSWER: send *a. -1: out of memory (close).
 */
int ts_exchange_run(ts_server *srv, ts_exchange *x, const char *method, const char *path,
                    ts_answer *a);
/* Forgets the exchange (call without the lock); a parked one is unparked. */
void ts_exchange_free(ts_server *srv, ts_exchange *x);
void ts_answer_free(ts_answer *a); /* frees data or the streamed body */

/* Connection counts per protocol for GET /testserver/v1/stats (lock held). */
json_t *ts_server_connections_json(ts_server *srv);

/*
 * Lock held: expires rules, and connections stalled by rules that are over
 * resume (call it whenever rules may have ended: expiry, delete, reset).
 */
void ts_server_stalls_sync(ts_server *srv, int64_t now);
/* Without the lock (transport): the client left a stalled HTTP/1.1
 * connection; its held request is woken to be dropped. */
void ts_server_h1_gone(ts_server *srv, int mhd_fd);

/* ---- api.c: the Kubernetes API (lock held) --------------------------- */

void ts_api_handle(ts_server *srv, const ts_request *rq, ts_response *rs);
/* The Kubernetes verb for stats and fault scopes ("get", "watch", ...). */
const char *ts_api_verb(const char *method, const char *path, bool watch);

/* ---- control.c: /testserver/v1 (lock held) ---------------------------- */

void ts_control_handle(ts_server *srv, const ts_request *rq, ts_response *rs);
json_t *ts_stats_json(ts_server *srv);

/* ---- watch.c: watch streams (lock held) -------------------------------- */

typedef struct ts_watch_opts {
    ts_filter filter;    /* moved into the watch */
    uint64_t since;      /* resourceVersion to resume after */
    bool since_set;      /* false: synthetic ADDED of the current objects first */
    bool bookmarks;      /* allowWatchBookmarks */
    bool initial_events; /* sendInitialEvents: ADDED... then an end bookmark */
    int64_t timeout_ms;  /* timeoutSeconds, 0 = none */
    bool as_table;       /* Accept: as=Table */
    ts_include include;
} ts_watch_opts;

/* Opens a watch stream for conn. NULL on allocation failure. */
ts_watch *ts_watch_open(ts_server *srv, ts_conn *conn, const ts_client *client, ts_watch_opts *o);
/* Its body, for ts_answer (the body's free ends the stream). */
ts_body ts_watch_body(ts_watch *w);
/*
 * When the next BOOKMARK is due for a stream that sent one (or started) at
 * now, with its timeoutSeconds deadline (INT64_MAX: none); INT64_MAX: no
 * more bookmarks. Real cadence (cfg.bookmarks_real): every 60 s and once
 * 2 s before the deadline, as the apiserver's watch cache does.
 */
int64_t ts_watch_next_bookmark(const ts_config *cfg, int64_t now, int64_t deadline);
/* The store's change hook: wakes the streams that want ev. */
void ts_watch_on_event(void *srv, const ts_event *ev);
/* Ends (or aborts, with a TCP reset) matching streams; returns how many. */
size_t ts_watch_close(ts_server *srv, const ts_match *m, bool abort);

/* Ends parked streams whose client hung up (timer thread, about once a second). */
void ts_watch_reap(ts_server *srv);

#endif
