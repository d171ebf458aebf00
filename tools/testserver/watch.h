/*
 * watch.h - watch streams (watch.c), opened by the Kubernetes API handlers
 * and read by the transport as a ts_body (conn.h).
 *
 * Lock held, unless said otherwise.
 */
#ifndef TS_WATCH_H
#define TS_WATCH_H

#include "conn.h"
#include "state.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
