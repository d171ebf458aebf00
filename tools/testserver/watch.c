/*
 * watch.c - watch streams: one JSON event per line over a chunked response.
 *
 * A stream owns no queue: it keeps a cursor (the last resourceVersion it has
 * looked at) into the store's history ring and renders what lies after it
 * when the transport asks for more data (a ts_body, conn.h: libmicrohttpd's
 * content reader, or an HTTP/2 stream's). With nothing to send, the reader
 * parks the stream (sched.h) until an event, the next bookmark, the end of
 * timeoutSeconds or of a freeze. A stream that falls behind the ring gets
 * the apiserver's ERROR 410 event and ends, like a client that is too slow
 * for the watch cache.
 */
#include "watch.h"
#include "util.h"

#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Render at most this much per wakeup so a slow reader cannot grow memory. */
#define WATCH_MAX_PENDING (256 * 1024)

enum watch_state {
    W_RUNNING, /* streaming */
    W_ENDING,  /* send what is pending, then end the chunked stream cleanly */
    W_ABORT,   /* reset the connection mid-stream (close_watch with abort) */
    W_GONE     /* the client went away: just close */
};

struct ts_watch {
    ts_sleeper sl; /* the connection and its suspension */
    int fd;        /* its socket, polled while parked (see ts_watch_reap) */
    ts_server *srv;
    ts_watch *prev, *next;
    ts_filter filter;
    uint64_t cursor; /* every event with rv <= cursor has been handled */
    json_t *initial; /* objects for the synthetic ADDED events, or NULL */
    size_t initial_pos;
    bool initial_bookmark; /* sendInitialEvents: bookmark once they are out */
    bool bookmarks;
    int64_t next_bookmark;
    int64_t deadline; /* timeoutSeconds, INT64_MAX: none */
    bool as_table;
    bool table_columns_sent;
    ts_include include;
    ts_buf out; /* rendered; out.data[out_off..len) not yet handed to the protocol */
    size_t out_off;
    enum watch_state state;
    bool frozen;
    /* Copies of the request's identity, for fault scopes. */
    char *method, *path, *user_agent, *token;
    ts_client client;
};

int64_t ts_watch_next_bookmark(const ts_config *cfg, int64_t now, int64_t deadline)
{
    if (!cfg->bookmarks_real)
        return now + cfg->bookmark_ms;
    /*
     * The apiserver's cacheWatcher.nextBookmarkTime (v1.27+): a minute from
     * now, or 2 s before the deadline if that is sooner; none once that
     * moment has passed (so the pre-timeout bookmark is sent once).
     */
    int64_t next = now + 60000;
    if (deadline != INT64_MAX && deadline - 2000 < next)
        next = deadline - 2000;
    return next <= now ? INT64_MAX : next;
}

/* ---- rendering -------------------------------------------------------- */

static int append_event(ts_watch *w, const char *type, json_t *obj, ts_res res)
{
    json_t *payload = obj;
    json_t *table = NULL;
    if (w->as_table && ts_table_supported(res) && strcmp(type, "ERROR") &&
        strcmp(type, "BOOKMARK")) {
        /* kubectl get -w: each event carries a one-row Table; columns once. */
        table = ts_table_new(res, !w->table_columns_sent);
        if (!table || ts_table_add_row(table, res, obj, w->include, time(NULL)) < 0) {
            json_decref(table);
            return -1;
        }
        w->table_columns_sent = true;
        payload = table;
    }
    char *s = json_dumps(payload, JSON_COMPACT);
    json_decref(table);
    if (!s)
        return -1;
    int rc = ts_buf_printf(&w->out, "{\"type\":\"%s\",\"object\":%s}\n", type, s);
    free(s);
    return rc;
}

static int append_bookmark(ts_watch *w, uint64_t rv, bool initial_end)
{
    const ts_resdef *rd = &ts_resdefs[w->filter.res];
    char rvs[24];
    snprintf(rvs, sizeof(rvs), "%" PRIu64, rv);
    json_t *obj = json_object(), *meta = json_object();
    json_object_set_new(obj, "kind", json_string(rd->kind));
    json_object_set_new(obj, "apiVersion", json_string(rd->api_version));
    /* v1.36 omits creationTimestamp here (v1.24 wrote null). */
    json_object_set_new(meta, "resourceVersion", json_string(rvs));
    if (initial_end) {
        json_t *ann = json_object();
        json_object_set_new(ann, "k8s.io/initial-events-end", json_string("true"));
        json_object_set_new(meta, "annotations", ann);
    }
    json_object_set_new(obj, "metadata", meta);
    /* What an empty Go struct encodes to: the shape of a real bookmark. */
    if (w->filter.res == TS_POD) {
        json_t *spec = json_object();
        json_object_set_new(spec, "containers", json_null());
        json_object_set_new(obj, "spec", spec);
        json_object_set_new(obj, "status", json_object());
    } else {
        json_object_set_new(obj, "spec", json_object());
        if (w->filter.res == TS_NS)
            json_object_set_new(obj, "status", json_object());
    }
    int rc = append_event(w, "BOOKMARK", obj, w->filter.res);
    json_decref(obj);
    return rc;
}

static int append_expired(ts_watch *w)
{
    const ts_store *st = &w->srv->store;
    ts_buf m = {0};
    /* Messages as in 410_gone_watch_compacted.json / 410_gone_watch_cache.json. */
    if (w->cursor < st->compacted)
        ts_buf_puts(&m, "The resourceVersion for the provided watch is too old.");
    else
        ts_buf_printf(&m, "too old resource version: %" PRIu64 " (%" PRIu64 ")", w->cursor,
                      st->floor);
    json_t *status = ts_status_failure(410, "Expired", m.data, NULL);
    ts_buf_free(&m);
    int rc = status ? append_event(w, "ERROR", status, w->filter.res) : -1;
    json_decref(status);
    return rc;
}

/* An object as it was before a change, re-stamped with the change's rv. */
static json_t *at_rv(const json_t *obj, uint64_t rv)
{
    char rvs[24];
    json_t *copy = json_deep_copy(obj);
    snprintf(rvs, sizeof(rvs), "%" PRIu64, rv);
    if (copy)
        json_object_set_new(json_object_get(copy, "metadata"), "resourceVersion", json_string(rvs));
    return copy;
}

/*
 * One history event as this watcher sees it. With a label selector an
 * update can move an object into view (ADDED) or out of it (DELETED with the
 * previous state), as the apiserver's watch cache does.
 */
static int render_event(ts_watch *w, ts_event *ev)
{
    bool now_in = ts_filter_match(&w->filter, ev->res, ev->obj);
    bool was_in = ev->prev && ts_filter_match(&w->filter, ev->res, ev->prev);

    switch (ev->type) {
    case TS_ADDED:
        return now_in ? append_event(w, "ADDED", ev->obj, ev->res) : 0;
    case TS_DELETED:
        return now_in ? append_event(w, "DELETED", ev->obj, ev->res) : 0;
    case TS_MODIFIED:
        if (now_in && was_in) {
            if (!w->as_table) {
                size_t len;
                const char *line = ts_event_line(ev, &len);
                return line ? ts_buf_append(&w->out, line, len) : -1;
            }
            return append_event(w, "MODIFIED", ev->obj, ev->res);
        }
        if (now_in)
            return append_event(w, "ADDED", ev->obj, ev->res);
        if (was_in) {
            json_t *gone = at_rv(ev->prev, ev->rv);
            int rc = gone ? append_event(w, "DELETED", gone, ev->res) : -1;
            json_decref(gone);
            return rc;
        }
        return 0;
    }
    return 0;
}

/*
 * Renders what this stream owes its client into w->out: the synthetic
 * initial events, then history after the cursor, then a due bookmark.
 */
static int render(ts_watch *w, int64_t now)
{
    ts_store *st = &w->srv->store;

    if (w->initial) {
        while (w->initial_pos < json_array_size(w->initial) && w->out.len < WATCH_MAX_PENDING)
            if (append_event(w, "ADDED", json_array_get(w->initial, w->initial_pos++),
                             w->filter.res) < 0)
                return -1;
        if (w->initial_pos < json_array_size(w->initial))
            return 0;
        json_decref(w->initial);
        w->initial = NULL;
        if (w->initial_bookmark && append_bookmark(w, w->cursor, true) < 0)
            return -1;
    }

    if (w->cursor < st->floor) {
        w->state = W_ENDING;
        return append_expired(w);
    }
    for (size_t i = ts_store_history_after(st, w->cursor);
         i < st->ring_len && w->out.len < WATCH_MAX_PENDING; i++) {
        ts_event *ev = (ts_event *)ts_store_history_at(st, i);
        w->cursor = ev->rv;
        if (render_event(w, ev) < 0)
            return -1;
    }
    if (w->bookmarks && now >= w->next_bookmark) {
        if (append_bookmark(w, w->cursor, false) < 0)
            return -1;
        w->next_bookmark = ts_watch_next_bookmark(&w->srv->cfg, now, w->deadline);
    }
    return 0;
}

/*
 * The body reader (ts_body). Returns bytes, 0 after suspending (never
 * without: libmicrohttpd would call again at once), or TS_BODY_END /
 * TS_BODY_ERROR.
 */
static long fill(ts_watch *w, char *buf, size_t max)
{
    ts_server *srv = w->srv;
    for (;;) {
        if (w->state == W_ABORT) {
            ts_conn_set_reset(w->sl.conn);
            return TS_BODY_ERROR;
        }
        if (w->state == W_GONE)
            return TS_BODY_ERROR;
        if (srv->draining) /* restart or exit: the connection goes, with the stream */
            return TS_BODY_DROP;
        if (w->out_off < w->out.len) {
            size_t n = w->out.len - w->out_off < max ? w->out.len - w->out_off : max;
            memcpy(buf, w->out.data + w->out_off, n);
            w->out_off += n;
            if (w->out_off == w->out.len)
                w->out.len = w->out_off = 0;
            return (long)n;
        }
        if (w->state == W_ENDING)
            return TS_BODY_END;

        int64_t now = ts_mono_ms();
        int64_t frozen_until = ts_faults_freeze_until(&srv->faults, &w->client, now, !w->frozen);
        if (frozen_until) {
            /* A frozen stream is silent: no events, bookmarks or timeout. */
            w->frozen = true;
            return ts_sched_suspend(&srv->sched, &w->sl, frozen_until) ? 0 : TS_BODY_ERROR;
        }
        w->frozen = false;
        if (now >= w->deadline)
            return TS_BODY_END;
        if (render(w, now) < 0)
            return TS_BODY_ERROR;
        if (w->out.len || w->state != W_RUNNING)
            continue;

        int64_t wake = w->deadline;
        if (w->bookmarks && w->next_bookmark < wake)
            wake = w->next_bookmark;
        return ts_sched_suspend(&srv->sched, &w->sl, wake) ? 0 : TS_BODY_ERROR;
    }
}

static long watch_reader(void *cls, char *buf, size_t max)
{
    ts_watch *w = cls;
    pthread_mutex_lock(&w->srv->mu);
    long n = fill(w, buf, max);
    pthread_mutex_unlock(&w->srv->mu);
    return n;
}

static void watch_destroy(ts_watch *w)
{
    ts_filter_free(&w->filter);
    json_decref(w->initial);
    ts_buf_free(&w->out);
    free(w->method);
    free(w->path);
    free(w->user_agent);
    free(w->token);
    free(w);
}

/* Called by the protocol when the response is released (stream over). */
static void watch_free(void *cls)
{
    ts_watch *w = cls;
    ts_server *srv = w->srv;
    pthread_mutex_lock(&srv->mu);
    /* An HTTP/2 stream can end while parked (the client reset it). */
    ts_sched_cancel(&srv->sched, &w->sl);
    if (w->prev)
        w->prev->next = w->next;
    else
        srv->watches = w->next;
    if (w->next)
        w->next->prev = w->prev;
    srv->nwatches--;
    pthread_mutex_unlock(&srv->mu);
    watch_destroy(w);
}

static int snapshot(ts_watch *w)
{
    ts_obj **objs;
    size_t n;
    if (ts_store_list(&w->srv->store, &w->filter, NULL, &objs, &n) < 0)
        return -1;
    w->initial = json_array();
    for (size_t i = 0; w->initial && i < n; i++)
        json_array_append(w->initial, objs[i]->json);
    free(objs);
    return w->initial ? 0 : -1;
}

ts_body ts_watch_body(ts_watch *w)
{
    return (ts_body){watch_reader, watch_free, w, UINT64_MAX};
}

ts_watch *ts_watch_open(ts_server *srv, ts_conn *conn, const ts_client *client, ts_watch_opts *o)
{
    ts_watch *w = calloc(1, sizeof(*w));
    if (!w) {
        ts_filter_free(&o->filter);
        return NULL;
    }
    ts_sleeper_init(&w->sl, conn);
    w->fd = conn->reap_fd;
    w->srv = srv;
    w->filter = o->filter;
    memset(&o->filter, 0, sizeof(o->filter));
    w->bookmarks = o->bookmarks;
    w->as_table = o->as_table;
    w->include = o->include;
    int64_t now = ts_mono_ms();
    w->deadline = o->timeout_ms > 0 ? now + o->timeout_ms : INT64_MAX;
    w->next_bookmark = ts_watch_next_bookmark(&srv->cfg, now, w->deadline);
    w->method = ts_strdup(client->method);
    w->path = ts_strdup(client->path);
    w->user_agent = ts_strdup(client->user_agent);
    w->token = ts_strdup(client->token);
    w->client = (ts_client){w->method, "watch", w->path, w->user_agent, w->token};

    if (o->since_set && !o->initial_events) {
        w->cursor = o->since;
    } else {
        /* "Start at the most recent version": current state first. */
        w->cursor = srv->store.rv;
        w->initial_bookmark = o->initial_events;
        if (snapshot(w) < 0)
            goto fail;
    }

    w->next = srv->watches;
    if (srv->watches)
        srv->watches->prev = w;
    srv->watches = w;
    if (srv->nwatches++ == 0)
        ts_sched_kick(&srv->sched); /* start the periodic reaping */
    srv->stats.watches_total++;
    return w;
fail:
    watch_destroy(w);
    return NULL;
}

void ts_watch_on_event(void *ctx, const ts_event *ev)
{
    ts_server *srv = ctx;
    for (ts_watch *w = srv->watches; w; w = w->next) {
        bool wanted = ev->res == w->filter.res &&
                      (ts_filter_match(&w->filter, ev->res, ev->obj) ||
                       (ev->prev && ts_filter_match(&w->filter, ev->res, ev->prev)));
        if (!wanted) {
            /*
             * A stream that has rendered everything before this event can
             * skip it now. Otherwise a quiet, filtered stream would fall off
             * the ring because of traffic it never wanted, and get a 410
             * the apiserver's watch cache would not send.
             */
            if (w->cursor + 1 == ev->rv)
                w->cursor = ev->rv;
            continue;
        }
        if (w->sl.suspended && !w->frozen)
            ts_sched_wake(&srv->sched, &w->sl);
    }
}

size_t ts_watch_close(ts_server *srv, const ts_match *m, bool abort)
{
    size_t n = 0;
    for (ts_watch *w = srv->watches; w; w = w->next) {
        if (w->state != W_RUNNING || !ts_match_client(m, &w->client))
            continue;
        w->state = abort ? W_ABORT : W_ENDING;
        ts_sched_wake(&srv->sched, &w->sl);
        n++;
    }
    ts_faults_count(&srv->faults, TS_F_CLOSE_WATCH, n);
    return n;
}

void ts_watch_reap(ts_server *srv)
{
    /*
     * libmicrohttpd does not look at a suspended connection, so a client
     * that hangs up on an idle stream would keep it open forever. Clients
     * send nothing while a response streams (HTTP/1.1, no pipelining), so a
     * readable socket means the transport saw a FIN, a TLS close_notify or
     * a reset and shut its side of the relay: the client is gone. (HTTP/2
     * streams need no polling: h2.c sees RST_STREAM and closes at once.)
     */
    size_t n = 0;
    for (ts_watch *w = srv->watches; w; w = w->next)
        n += w->sl.suspended && w->fd >= 0;
    if (n == 0)
        return;
    struct pollfd *pfd = calloc(n, sizeof(*pfd));
    ts_watch **who = calloc(n, sizeof(*who));
    if (pfd && who) {
        size_t i = 0;
        for (ts_watch *w = srv->watches; w; w = w->next) {
            if (w->sl.suspended && w->fd >= 0) {
                pfd[i] = (struct pollfd){.fd = w->fd, .events = POLLIN};
                who[i++] = w;
            }
        }
        if (poll(pfd, (nfds_t)n, 0) > 0) {
            for (i = 0; i < n; i++) {
                if (pfd[i].revents & (POLLIN | POLLHUP | POLLERR)) {
                    who[i]->state = W_GONE;
                    ts_sched_wake(&srv->sched, &who[i]->sl);
                }
            }
        }
    }
    free(pfd);
    free(who);
}
