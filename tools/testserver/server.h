/*
 * server.h - the server object shared by the HTTP layer, the Kubernetes API
 * handlers, watches and the control API.
 *
 * Threads: libmicrohttpd runs a small pool of epoll threads; the scheduler
 * (sched.h) has one timer thread; the main thread waits for signals and
 * restart requests. All mutable state below `mu` is guarded by it - one lock
 * is plenty for a test server and leaves no ordering questions.
 */
#ifndef TS_SERVER_H
#define TS_SERVER_H

#include "certs.h"
#include "faults.h"
#include "objects.h"
#include "sched.h"
#include "store.h"

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

struct MHD_Connection;
struct MHD_Daemon;
struct MHD_Response;
typedef struct ts_watch ts_watch;

typedef struct ts_config {
    char *dir;         /* absolute */
    bool dir_is_temp;  /* made with mkdtemp: removed at exit */
    char address[64];  /* "127.0.0.1" or "::1" */
    unsigned port;     /* requested; 0 = any */
    const char *token; /* --token (points into argv), or NULL */
    size_t history;    /* watch history ring size */
    unsigned bookmark_ms;
    unsigned threads; /* libmicrohttpd worker threads */
    uint64_t seed;    /* PRNG for fault probabilities */
    bool verbose;     /* one log line per request */
    json_t *faults;   /* --fault rules to install at start (array) */
} ts_config;

/* Counters for GET /testserver/v1/stats. */
typedef struct ts_stats {
    uint64_t requests; /* API requests (control requests excluded) */
    uint64_t control;  /* control requests */
    json_t *by_method; /* {"GET": n} */
    json_t *by_verb;   /* {"get": {"200": n, "404": n}} */
    json_t *by_status; /* {"200": n, "reset": n} */
    uint64_t watches_total;
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
    ts_watch *watches; /* open watch streams (doubly linked) */
    size_t nwatches;
    int64_t next_reap; /* when ts_watch_reap runs next */
    char *token;       /* the accepted bearer token */
    bool draining;     /* stopping or restarting: end streams, refuse to wait */
    uint64_t restarts;

    ts_pki pki;
    struct MHD_Daemon *daemon;
    int listen_fd;

    /* Main-thread wakeups: 'T' terminate, 'R' restart (see main.c). */
    int wake_pipe[2];
    bool restart_keep_state;
    int64_t restart_down_ms;
} ts_server;

/* ---- server.c: the HTTP layer ------------------------------------------ */

int ts_server_init(ts_server *srv);
/*
 * Binds (cfg address/port, or the port of a previous run) and starts MHD.
 * The first time it also sets server_url and writes the kubeconfigs.
 */
int ts_server_start(ts_server *srv);
/* Ends streams, resumes parked connections and stops MHD (for exit/restart). */
void ts_server_stop(ts_server *srv);
void ts_server_free(ts_server *srv);
/* Wakes the main thread with a command byte ('T' or 'R'). */
void ts_server_notify_main(ts_server *srv, char cmd);

/* Access to one request for the handlers. */
typedef struct ts_request {
    struct MHD_Connection *conn;
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
    json_t *body;                /* JSON answer (object or Status) */
    const char *text;            /* or a static text/plain answer */
    struct MHD_Response *stream; /* or a watch stream */
    unsigned retry_after;        /* adds Retry-After when > 0 */
    char after;                  /* main-thread command after completion, or 0 */
} ts_response;

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

/* Builds the streaming response for a watch. NULL on allocation failure. */
struct MHD_Response *ts_watch_open(ts_server *srv, struct MHD_Connection *conn,
                                   const ts_client *client, ts_watch_opts *o);
/* The store's change hook: wakes the streams that want ev. */
void ts_watch_on_event(void *srv, const ts_event *ev);
/* Ends (or aborts, with a TCP reset) matching streams; returns how many. */
size_t ts_watch_close(ts_server *srv, const ts_match *m, bool abort);

/* Ends parked streams whose client hung up (timer thread, about once a second). */
void ts_watch_reap(ts_server *srv);

/* Sets SO_LINGER 0 so that closing the socket sends RST, not FIN. */
void ts_conn_set_reset(struct MHD_Connection *conn);

#endif
