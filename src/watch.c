/* Holder watch: LIST once, then WATCH from the list's resourceVersion,
 * resuming after every end of stream and re-listing when the history is
 * gone (410). Reports changes of (holder, epoch), not every renew. */
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "client.h"
#include "clock.h"
#include "lease.h"

#define WATCH_RETRY_MS 1000
#define WATCH_MAX_LINE (4 * 1024 * 1024)
/* Ask the server to end each stream after about this long, as informers do,
 * so a silently broken stream cannot live forever. */
#define WATCH_TIMEOUT_S 300

struct k8slease_watch {
    k8slease_client *client;
    char *ns, *name;
    char what[300];
    k8slease_watch_cb cb;
    void *user_data;

    /* Loop thread only. */
    kl__http_req *req;
    kl__timer retry;
    kl__line_splitter lines;
    char *rv;      /* resume point; NULL: list first */
    int reported;  /* a state was reported */
    char *holder;  /* last reported holder */
    int64_t epoch; /* last reported epoch */
    int cancelled;
    int in_stream; /* inside on_data: the request must not be cancelled under it */
};

static void list(k8slease_watch *w);
static void watch(k8slease_watch *w);

static void set_rv(k8slease_watch *w, const char *rv)
{
    char *copy = rv && rv[0] ? kl__strdup(rv) : NULL;

    /* Out of memory: forget the resume point, so the next round re-lists. */
    kl__free(w->rv);
    w->rv = copy;
}

static void report(k8slease_watch *w, const char *holder, int64_t epoch)
{
    char *copy;

    if (w->reported && w->epoch == epoch && strcmp(w->holder, holder) == 0)
        return;
    if (!(copy = kl__strdup(holder)))
        return; /* reported again on the next change */
    kl__free(w->holder);
    w->holder = copy;
    w->epoch = epoch;
    w->reported = 1;
    w->cb(holder, epoch, w->user_data);
}

static void report_lease(k8slease_watch *w, const kl__lease *lease)
{
    report(w, lease->spec.holder ? lease->spec.holder : "", lease->spec.transitions);
}

static void retry_later(k8slease_watch *w)
{
    kl__timer_arm(w->client->loop, &w->retry,
                  kl__loop_now(w->client->loop) + WATCH_RETRY_MS * KL_NS_PER_MS);
}

static void on_retry(kl__timer *t, void *arg)
{
    k8slease_watch *w = arg;

    (void)t;
    if (w->rv)
        watch(w);
    else
        list(w);
}

static int parse_list(k8slease_watch *w, const char *body, size_t len)
{
    json_error_t jerr;
    json_t *root = json_loadb(body, len, 0, &jerr), *items;
    kl__lease *lease = NULL;
    const char *rv;
    int err = 0;

    if (!root || !json_is_object(root)) {
        err = kl__error_set(K8SLEASE_EPROTOCOL, "list %s: body is not a JSON object", w->what);
        goto out;
    }
    rv = json_string_value(json_object_get(json_object_get(root, "metadata"), "resourceVersion"));
    items = json_object_get(root, "items");
    if (!rv || !json_is_array(items)) {
        err = kl__error_set(K8SLEASE_EPROTOCOL,
                            "list %s: metadata.resourceVersion or items missing", w->what);
        goto out;
    }
    if (json_array_size(items) == 0) {
        report(w, "", -1);
    } else {
        if ((err = kl__lease_from_json(&lease, json_array_get(items, 0))) < 0) {
            kl__error_wrap(err, "list %s", w->what);
            goto out;
        }
        report_lease(w, lease);
    }
    set_rv(w, rv);
out:
    kl__lease_free(lease);
    json_decref(root);
    return err;
}

static void on_list(const kl__http_result *res, void *arg)
{
    k8slease_watch *w = arg;
    int err;

    w->req = NULL;
    if (res->err)
        err = kl__error_set(res->err, "list %s: %s", w->what, res->errmsg);
    else if (res->status != 200)
        err = kl__http_status_error(res->status, res->body, res->body_len, "list");
    else
        err = parse_list(w, res->body, res->body_len);
    if (err < 0 || !w->rv) {
        kl__log_printf(&w->client->log, K8SLEASE_LOG_WARN, "watch %s: %s; retrying", w->what,
                       kl__error_get());
        retry_later(w);
        return;
    }
    watch(w);
}

static char *collection_query(const k8slease_watch *w, const char *extra)
{
    char *sel = kl__sprintf("metadata.name=%s", w->name);
    char *esc = sel ? kl__url_escape(sel) : NULL;
    char *path = esc ? kl__sprintf("/apis/coordination.k8s.io/v1/namespaces/%s/leases"
                                   "?fieldSelector=%s%s",
                                   w->ns, esc, extra)
                     : NULL;

    kl__free(esc);
    kl__free(sel);
    return path;
}

static void list(k8slease_watch *w)
{
    kl__http_opts req = {0};
    char *path = collection_query(w, "");

    if (path) {
        req.method = "GET";
        req.path = path;
        req.timeout_ms = 10000;
        w->req = kl__http_start(w->client->loop, &req, on_list, w);
    }
    kl__free(path);
    if (!w->req)
        retry_later(w);
}

/* Watch stream: one event per line. Returns nonzero to end the stream. */
static int on_line(const char *line, size_t len, void *arg)
{
    k8slease_watch *w = arg;
    kl__watch_event ev;

    if (kl__watch_event_parse(&ev, line, len) < 0) {
        kl__log_printf(&w->client->log, K8SLEASE_LOG_WARN, "watch %s: %s", w->what,
                       kl__error_get());
        return K8SLEASE_EPROTOCOL;
    }
    switch (ev.type) {
    case KL_WATCH_ADDED:
    case KL_WATCH_MODIFIED:
        set_rv(w, ev.lease->rv);
        report_lease(w, ev.lease);
        break;
    case KL_WATCH_DELETED:
        set_rv(w, ev.lease->rv);
        report(w, "", -1);
        break;
    case KL_WATCH_BOOKMARK:
        set_rv(w, ev.bookmark_rv);
        break;
    case KL_WATCH_ERROR:
        kl__log_printf(&w->client->log, K8SLEASE_LOG_INFO, "watch %s: server ended it: %d %s",
                       w->what, ev.status.code, ev.status.message);
        /* 410 Gone (and anything else odd): our resume point is useless. */
        set_rv(w, NULL);
        break;
    }
    kl__watch_event_clear(&ev);
    return w->cancelled;
}

static int on_data(const char *data, size_t len, void *arg)
{
    k8slease_watch *w = arg;
    int rc;

    w->in_stream = 1;
    rc = kl__line_splitter_feed(&w->lines, data, len, on_line, w);
    w->in_stream = 0;
    return rc;
}

static void on_watch_end(const kl__http_result *res, void *arg)
{
    k8slease_watch *w = arg;

    w->req = NULL;
    kl__line_splitter_free(&w->lines);
    if (w->cancelled)
        return;
    if (res->err || res->status != 200) {
        if (res->err)
            kl__error_set(res->err, "%s", res->errmsg);
        else
            kl__http_status_error(res->status, res->body, res->body_len, "watch");
        kl__log_printf(&w->client->log, K8SLEASE_LOG_WARN, "watch %s: %s; retrying", w->what,
                       kl__error_get());
        if (res->status == 410)
            set_rv(w, NULL);
        retry_later(w);
        return;
    }
    /* A normal end (timeoutSeconds): resume at once. */
    if (w->rv)
        watch(w);
    else
        list(w);
}

static void watch(k8slease_watch *w)
{
    kl__http_opts req = {0};
    char extra[128];
    char *path;

    snprintf(extra, sizeof(extra), "&watch=1&allowWatchBookmarks=true&timeoutSeconds=%d",
             WATCH_TIMEOUT_S);
    path = collection_query(w, extra);
    if (path) {
        char *full = kl__sprintf("%s&resourceVersion=%s", path, w->rv);

        kl__free(path);
        path = full;
    }
    kl__line_splitter_init(&w->lines, WATCH_MAX_LINE);
    if (path) {
        req.method = "GET";
        req.path = path;
        req.on_data = on_data;
        w->req = kl__http_start(w->client->loop, &req, on_watch_end, w);
    }
    kl__free(path);
    if (!w->req) {
        kl__line_splitter_free(&w->lines);
        retry_later(w);
    }
}

static void begin(void *arg)
{
    k8slease_watch *w = arg;

    if (!w->cancelled)
        list(w);
}

static void watch_destroy(k8slease_watch *w)
{
    if (!w)
        return;
    kl__line_splitter_free(&w->lines);
    kl__free(w->rv);
    kl__free(w->holder);
    kl__free(w->ns);
    kl__free(w->name);
    kl__free(w);
}

K8SLEASE_API int k8slease_watch_start(k8slease_watch **out, k8slease_client *client, const char *ns,
                                      const char *name, k8slease_watch_cb cb, void *user_data)
{
    k8slease_watch *w = NULL;
    int err;

    if (!out || !client)
        return kl__error_set(K8SLEASE_EINVAL, "k8slease_watch_start: out or client is NULL");
    *out = NULL;
    if (!cb)
        return kl__error_set(K8SLEASE_EINVAL, "k8slease_watch_start: callback is NULL");
    if (!ns)
        ns = client->cfg->ns;
    if ((err = kl__check_namespace(ns)) < 0 || (err = kl__check_name("lease name", name)) < 0)
        return err;
    if (!(w = kl__calloc(1, sizeof(*w))))
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    w->client = client;
    w->cb = cb;
    w->user_data = user_data;
    w->ns = kl__strdup(ns);
    w->name = kl__strdup(name);
    kl__timer_init(&w->retry, on_retry, w);
    snprintf(w->what, sizeof(w->what), "lease %s/%s", ns, name);
    if (!w->ns || !w->name || kl__loop_post(client->loop, begin, w) < 0) {
        err = kl__error_set(K8SLEASE_ENOMEM, "out of memory");
        goto out;
    }
    *out = w;
    w = NULL;
out:
    watch_destroy(w);
    return err;
}

static void cancel(void *arg)
{
    k8slease_watch *w = arg;

    w->cancelled = 1;
    kl__timer_cancel(w->client->loop, &w->retry);
    /* From on_data, returning nonzero ends the transfer instead. */
    if (!w->in_stream) {
        kl__http_cancel(w->client->loop, w->req);
        w->req = NULL;
    }
}

static void destroy_on_loop(void *arg)
{
    cancel(arg);
    watch_destroy(arg);
}

K8SLEASE_API void k8slease_watch_free(k8slease_watch *w)
{
    if (!w)
        return;
    if (kl__loop_on_thread(w->client->loop)) {
        /* From a callback (maybe this watch's own): stop now, free once the
         * callback has returned and queued closures for us have run. */
        cancel(w);
        if (kl__loop_post(w->client->loop, destroy_on_loop, w) < 0)
            kl__log_printf(&w->client->log, K8SLEASE_LOG_ERROR,
                           "watch %s: out of memory; leaking it", w->what);
        return;
    }
    kl__loop_call(w->client->loop, cancel, w);
    watch_destroy(w);
}
