/* The holder watch of an etcd election (etcd/watch.h): the leader's key
 * ranged, then watched on the election's prefix; ranged again after each
 * change, and after a failure with a backoff. */
#include "etcd/watch.h"

#include <stdio.h>
#include <string.h>

#include "core/client.h"
#include "core/clock.h"
#include "core/elector.h" /* KL_DEFAULT_*_MS */
#include "etcd/client.h"
#include "etcd/codec.h"
#include "etcd/conn.h"

#define WATCH_RANGE_MS       10000
#define WATCH_BACKOFF_MIN_MS 1000
#define WATCH_BACKOFF_MAX_MS 8000

/* ------------------------------------------------------------------------ */
/* Holder watch                                                             */
/* ------------------------------------------------------------------------ */

struct kl__etcd_watch {
    kl__etcd_conn *conn;
    kl__loop *loop;
    const kl__log *log;
    char what[512];
    kl__etcd_prefix p;
    kl__etcd_report_cb report;
    void *arg;

    /* Loop thread only. */
    int cancelled;
    kl__etcd_call *range;
    int dirty; /* something changed while the range was in flight */
    kl__etcd_stream *stream;
    kl__etcd_stream_opts sopts;
    kl__timer retry;
    int64_t backoff_ms;
};

static void watch_range(kl__etcd_watch *w);

static void watch_retry_later(kl__etcd_watch *w, int64_t ms)
{
    kl__timer_arm(w->loop, &w->retry, kl__loop_now(w->loop) + ms * KL_NS_PER_MS);
}

/* After a failure: 1 s, doubling up to WATCH_BACKOFF_MAX_MS while it lasts. */
static void watch_backoff(kl__etcd_watch *w)
{
    watch_retry_later(w, w->backoff_ms);
    w->backoff_ms =
        w->backoff_ms * 2 > WATCH_BACKOFF_MAX_MS ? WATCH_BACKOFF_MAX_MS : w->backoff_ms * 2;
}

static void watch_on_msg(const kl__etcd_watch_msg *m, void *arg)
{
    kl__etcd_watch *w = arg;

    if (m->canceled) {
        /* etcd ended the watch (compaction, permission): the stream stays
         * open, so close it and look again; after a compaction at once. */
        kl__log_printf(w->log, K8SLEASE_LOG_INFO, "%s: etcd cancelled the watch (%s)", w->what,
                       m->compact_revision > 0 ? "compacted" : m->cancel_reason);
        kl__etcd_stream_cancel(w->stream);
        w->stream = NULL;
        if (m->compact_revision > 0)
            watch_range(w);
        else
            watch_backoff(w);
        return;
    }
    if (m->created)
        w->backoff_ms = WATCH_BACKOFF_MIN_MS;
    if (m->n_events > 0)
        watch_range(w);
}

static void watch_on_end(const kl__etcd_result *res, void *arg)
{
    kl__etcd_watch *w = arg;

    w->stream = NULL;
    kl__log_printf(w->log, res->err ? K8SLEASE_LOG_WARN : K8SLEASE_LOG_INFO,
                   "%s: stream ended%s%s; watching again", w->what, res->err ? ": " : "",
                   res->errmsg);
    watch_backoff(w);
}

static void watch_range_done(const kl__etcd_result *res, void *arg)
{
    kl__etcd_watch *w = arg;
    kl__etcd_watch_req wr = {0};
    kl__etcd_range r = {0};
    int err = res->err;

    w->range = NULL;
    if (err == 0 && (err = kl__etcd_parse_range(&r, res->body, res->body_len)) < 0)
        kl__error_wrap(err, "etcd %s/v3/kv/range", kl__etcd_conn_endpoint(w->conn));
    if (err < 0) {
        kl__log_printf(w->log, K8SLEASE_LOG_WARN, "%s: %s; retrying in %lld ms", w->what,
                       res->err ? res->errmsg : kl__error_get(), (long long)w->backoff_ms);
        watch_backoff(w);
        return;
    }
    if (r.n_kvs > 0)
        w->report(w->arg, r.kvs[0].value, r.kvs[0].create_revision);
    else
        w->report(w->arg, "", -1);
    if (w->cancelled) { /* freed from its own callback */
        kl__etcd_range_clear(&r);
        return;
    }
    if (w->dirty) {
        w->dirty = 0;
        watch_range(w);
    } else if (!w->stream) {
        /* from the revision after the range: nothing falls in between */
        wr.key = w->p.key;
        wr.key_len = w->p.key_len;
        wr.range_end = w->p.end;
        wr.range_end_len = w->p.end_len;
        wr.start_revision = kl__add_sat(r.revision, 1);
        if (!(w->stream =
                  kl__etcd_stream_start(w->conn, &wr, &w->sopts, watch_on_msg, watch_on_end, w))) {
            kl__log_printf(w->log, K8SLEASE_LOG_WARN, "%s: %s; retrying", w->what, kl__error_get());
            watch_backoff(w);
        }
    }
    kl__etcd_range_clear(&r);
}

static void watch_range(kl__etcd_watch *w)
{
    kl__etcd_call_opts o = {0};
    char *body;

    if (w->cancelled)
        return;
    if (w->range) {
        w->dirty = 1;
        return;
    }
    kl__timer_cancel(w->loop, &w->retry);
    if ((body = kl__etcd_encode_leader_range(&w->p))) {
        o.path = "/v3/kv/range";
        o.body = body;
        o.body_len = strlen(body);
        o.timeout_ms = WATCH_RANGE_MS;
        w->range = kl__etcd_call_start(w->conn, &o, watch_range_done, w);
        kl__free(body);
    }
    if (!w->range) {
        kl__log_printf(w->log, K8SLEASE_LOG_WARN, "%s: %s; retrying", w->what, kl__error_get());
        watch_backoff(w);
    }
}

static void watch_on_retry(kl__timer *t, void *arg)
{
    (void)t;
    watch_range(arg);
}

static void watch_begin(void *arg)
{
    watch_range(arg);
}

int kl__etcd_watch_new(kl__etcd_watch **out, k8slease_client *client, const char *name,
                       kl__etcd_report_cb report, void *arg)
{
    kl__etcd_watch *w;
    int err;

    *out = NULL;
    if ((err = kl__etcd_check_name("election name", name)) < 0)
        return err;
    if (!(w = kl__calloc(1, sizeof(*w))))
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    w->conn = kl__etcd_of(client);
    w->loop = client->loop;
    w->log = &client->log;
    snprintf(w->what, sizeof(w->what), "watch etcd election %s", name);
    kl__etcd_prefix_set(&w->p, name);
    w->report = report;
    w->arg = arg;
    w->backoff_ms = WATCH_BACKOFF_MIN_MS;
    /* No election's timings here: the library's defaults'. */
    kl__etcd_stream_opts_init(&w->sopts, KL_DEFAULT_LEASE_DURATION_MS, KL_DEFAULT_RENEW_DEADLINE_MS,
                              KL_DEFAULT_RETRY_PERIOD_MS);
    kl__timer_init(&w->retry, watch_on_retry, w);
    if (kl__loop_post(client->loop, watch_begin, w) < 0) {
        kl__free(w);
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    }
    *out = w;
    return 0;
}

void kl__etcd_watch_cancel(kl__etcd_watch *w)
{
    if (!w)
        return;
    w->cancelled = 1;
    kl__timer_cancel(w->loop, &w->retry);
    kl__etcd_call_cancel(w->range);
    w->range = NULL;
    kl__etcd_stream_cancel(w->stream);
    w->stream = NULL;
}

void kl__etcd_watch_free(kl__etcd_watch *w)
{
    kl__free(w);
}
