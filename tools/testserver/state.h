/*
 * state.h - the server object: configuration, the lock, the store, fault
 * rules, the scheduler, statistics, watches. Shared by the dispatch layer
 * (dispatch.c), the handlers (api.c, control.c, watch.c, cle.c) and the
 * start/stop glue (server.c, main.c); the transport and the store do not
 * include it.
 *
 * Threads: the transport (transport.c) runs `threads` epoll threads that own
 * the listening socket, TLS and HTTP/2 sessions; libmicrohttpd runs a pool
 * of `threads` epoll threads for HTTP/1.1; the scheduler (sched.h) has one
 * timer thread; the main thread waits for signals and restart requests. All
 * mutable state below `mu` is guarded by it - one lock is plenty for a test
 * server and leaves no ordering questions. Transport-private locks are only
 * ever taken inside `mu`, never the other way round.
 */
#ifndef TS_STATE_H
#define TS_STATE_H

#include "certs.h"
#include "cle.h"
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

/*
 * What the layers under the transport may ask of it, registered by
 * server.c (the transport's own functions), so that none of them includes
 * transport.h. Lock held; each accepts a NULL transport (not created yet).
 */
typedef struct ts_transport_hooks {
    /* Connections whose stall rule alive() no longer reports resume. */
    void (*stall_sync)(ts_transport *t, bool (*alive)(void *ctx, uint64_t rule), void *ctx);
    /* How many connections rule stalls now (0: all rules). */
    size_t (*stalled)(ts_transport *t, uint64_t rule);
    /* {"h2": {"open", "total"}, "http1": {...}, "tls_failures", "stalled"} */
    json_t *(*stats_json)(ts_transport *t);
} ts_transport_hooks;

typedef struct ts_server {
    ts_config cfg;
    char *server_url; /* https://127.0.0.1:PORT */
    unsigned port;    /* bound port */
    int64_t started_ms;
    bool serving; /* between ts_server_start and ts_server_stop (main thread) */

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
    ts_transport *transport; /* listener, TLS, HTTP/2 and HTTP/1.1 (transport.h): opaque here */
    const ts_transport_hooks *tx;

    /* Main-thread wakeups: 'T' terminate, 'R' restart (see main.c). */
    int wake_pipe[2];
    bool restart_keep_state;
    int64_t restart_down_ms;
} ts_server;

#endif
