/*
 * server.c - starting and stopping the server: builds the layers and wires
 * the callbacks through which a lower layer reaches an upper one (server.h).
 *
 * The transport (transport.c) owns the listening socket and TLS; it serves
 * h2 connections itself (h2.c) and hands decrypted HTTP/1.1 connections to
 * libmicrohttpd (h1.c). Both run each request through the dispatch layer
 * (dispatch.c), which calls the handlers (api.c, control.c), which use the
 * store. What goes the other way is registered here: the store's change
 * hook (watches, the election controller), the timer thread's tick, the
 * transport hooks of state.h, and the transport's main-thread notification.
 */
#include "server.h"
#include "control.h"
#include "transport.h"
#include "util.h"
#include "watch.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- life cycle ------------------------------------------------------------ */

/* The store's change hook: watches first, then the election controller. */
static void on_store_event(void *ctx, const ts_event *ev)
{
    ts_server *srv = ctx;
    ts_watch_on_event(srv, ev);
    if (srv->cfg.cle)
        ts_cle_on_event(srv, ev);
}

/* The timer thread's round (lock held): expire rules, reap dead streams, run elections. */
static int64_t on_tick(void *ctx, int64_t now)
{
    ts_server *srv = ctx;
    ts_stalls_sync(srv, now); /* expires rules; their stalled connections resume */
    int64_t next = ts_faults_next_expiry(&srv->faults);
    if (srv->cfg.cle) {
        int64_t t = ts_cle_run(srv, now);
        if (t < next)
            next = t;
    }
    if (srv->nwatches) {
        if (now >= srv->next_reap) {
            ts_watch_reap(srv);
            srv->next_reap = now + 1000;
        }
        if (srv->next_reap < next)
            next = srv->next_reap;
    }
    return next;
}

/* What the dispatch layer and the control API may ask of the transport. */
static const ts_transport_hooks transport_hooks = {ts_transport_stall_sync, ts_transport_stalled,
                                                   ts_transport_stats_json};

/* The transport's main-thread notification. */
static void on_transport_notify(void *ctx, char cmd)
{
    ts_server_notify_main(ctx, cmd);
}

int ts_server_init(ts_server *srv)
{
    srv->wake_pipe[0] = srv->wake_pipe[1] = -1;
    srv->started_ms = ts_mono_ms();
    srv->tx = &transport_hooks;
    if (pthread_mutex_init(&srv->mu, NULL) != 0)
        return -1;
    if (ts_store_init(&srv->store, srv->cfg.history) < 0)
        return -1;
    srv->store.on_event = on_store_event;
    srv->store.on_event_ctx = srv;
    ts_faults_init(&srv->faults, srv->cfg.seed);
    if (ts_sched_init(&srv->sched, &srv->mu, on_tick, srv) < 0)
        return -1;
    srv->stats.by_method = json_object();
    srv->stats.by_verb = json_object();
    srv->stats.by_status = json_object();
    if (!srv->stats.by_method || !srv->stats.by_verb || !srv->stats.by_status)
        return -1;
    if (pipe(srv->wake_pipe) < 0)
        return -1;
    for (int i = 0; i < 2; i++)
        fcntl(srv->wake_pipe[i], F_SETFD, FD_CLOEXEC);
    /* The signal handler must never block on a full pipe. */
    fcntl(srv->wake_pipe[1], F_SETFL, fcntl(srv->wake_pipe[1], F_GETFL) | O_NONBLOCK);
    return 0;
}

void ts_server_notify_main(ts_server *srv, char cmd)
{
    ssize_t rc;
    do
        rc = write(srv->wake_pipe[1], &cmd, 1);
    while (rc < 0 && errno == EINTR);
}

int ts_server_start(ts_server *srv)
{
    unsigned port = srv->port ? srv->port : srv->cfg.port;
    int fd = -1;
    /* A restart can race the kernel releasing the port: retry briefly. */
    for (int tries = 0; tries < 50; tries++) {
        if ((fd = ts_transport_listen(srv->cfg.address, port, &srv->port)) >= 0 ||
            errno != EADDRINUSE || !srv->port)
            break;
        struct timespec ts = {0, 100 * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (fd < 0) {
        ts_log("cannot listen on %s port %u: %s", srv->cfg.address, port, strerror(errno));
        return -1;
    }
    if (!srv->server_url) {
        /*
         * First start: the port is known now. Write the kubeconfigs before
         * any handler thread exists (token rotation rewrites them later).
         */
        ts_buf url = {0};
        bool v6 = strchr(srv->cfg.address, ':') != NULL;
        if (ts_buf_printf(&url, "https://%s%s%s:%u", v6 ? "[" : "", srv->cfg.address, v6 ? "]" : "",
                          srv->port) < 0 ||
            ts_write_kubeconfigs(&srv->pki, srv->cfg.dir, url.data, srv->token) < 0) {
            ts_buf_free(&url);
            close(fd);
            return -1;
        }
        srv->server_url = url.data;
    }
    if (!srv->transport) {
        ts_transport_config tcfg = {.srv = srv,
                                    .threads = srv->cfg.threads,
                                    .no_http2 = srv->cfg.no_http2,
                                    .h2_max_streams = srv->cfg.h2_max_streams,
                                    .server_crt = srv->pki.server_crt,
                                    .server_key = srv->pki.server_key,
                                    .ca_crt = srv->pki.ca_crt,
                                    .notify = on_transport_notify,
                                    .notify_ctx = srv};
        /* Under the lock: the timer thread already runs (ts_stalls_sync). */
        ts_transport *t = ts_transport_new(&tcfg);
        if (!t) {
            close(fd);
            return -1;
        }
        pthread_mutex_lock(&srv->mu);
        srv->transport = t;
        pthread_mutex_unlock(&srv->mu);
    }
    /* libmicrohttpd (HTTP/1.1) and the I/O threads; fd is the transport's now. */
    if (ts_transport_start(srv->transport, fd) < 0)
        return -1;
    srv->serving = true;
    return 0;
}

void ts_server_stop(ts_server *srv)
{
    if (!srv->serving)
        return;
    /*
     * Nothing may stay parked: refuse new suspensions, then resume every
     * parked request and stream. Streams see `draining` and end; held
     * requests are dropped.
     */
    pthread_mutex_lock(&srv->mu);
    srv->draining = true;
    srv->sched.refuse = true;
    ts_sched_wake_all(&srv->sched);
    pthread_mutex_unlock(&srv->mu);

    /*
     * The transport closes the listening socket and every connection (h2
     * sessions and the HTTP/1.1 relays, whose libmicrohttpd ends then read
     * EOF) and joins its threads; then libmicrohttpd stops (see
     * ts_transport_stop).
     */
    ts_transport_stop(srv->transport);
    srv->serving = false;

    pthread_mutex_lock(&srv->mu);
    srv->draining = false;
    srv->sched.refuse = false;
    pthread_mutex_unlock(&srv->mu);
}

void ts_server_free(ts_server *srv)
{
    ts_server_stop(srv);
    pthread_mutex_lock(&srv->mu); /* the timer thread still runs */
    ts_transport *t = srv->transport;
    srv->transport = NULL;
    pthread_mutex_unlock(&srv->mu);
    ts_transport_free(t);
    ts_sched_stop(&srv->sched);
    ts_sched_free(&srv->sched);
    ts_cle_free(&srv->cle);
    ts_store_free(&srv->store);
    ts_faults_free(&srv->faults);
    json_decref(srv->stats.by_method);
    json_decref(srv->stats.by_verb);
    json_decref(srv->stats.by_status);
    ts_pki_free(&srv->pki);
    free(srv->token);
    free(srv->server_url);
    for (int i = 0; i < 2; i++)
        if (srv->wake_pipe[i] >= 0)
            close(srv->wake_pipe[i]);
    pthread_mutex_destroy(&srv->mu);
}
