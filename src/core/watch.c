/* Holder watch: a subscriber of the client's shared stream for the Lease
 * (informer.c), plus one GET for the state at the start, since the stream
 * may already be running and have listed long ago. Reports changes of
 * (holder, epoch), not every renew. */
#include <stdio.h>
#include <string.h>

#include "core/client.h"
#include "core/clock.h"
#include "k8s/codec.h"

#define WATCH_RETRY_MS 1000
#define GET_TIMEOUT_MS 10000

struct k8slease_watch {
    k8slease_client *client;
    char *ns, *name;
    char what[300];
    k8slease_watch_cb cb;
    void *user_data;

    /* Loop thread only. */
    kl__sub *sub;
    kl__http_req *req; /* the first GET */
    kl__timer retry;
    kl__rv_gate gate; /* newest state reported from */
    int reported;     /* a state was reported */
    char *holder;     /* last reported holder */
    int64_t epoch;    /* last reported epoch */
    int cancelled;
    kl__etcd_watch *etcd; /* etcd: the watch of the election (it reports through report()) */
};

static void get(k8slease_watch *w);

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

static void report_etcd(void *arg, const char *identity, int64_t epoch)
{
    report(arg, identity, epoch);
}

static void report_lease(k8slease_watch *w, const kl__lease *lease)
{
    report(w, lease->spec.holder ? lease->spec.holder : "", lease->spec.transitions);
}

static void on_event(const kl__sub_event *ev, void *arg)
{
    k8slease_watch *w = arg;

    if (ev->type == KL_SUB_HEALTH || !kl__rv_gate_pass(&w->gate, ev->rv))
        return;
    if (ev->type == KL_SUB_LEASE)
        report_lease(w, ev->lease);
    else
        report(w, "", -1);
}

/* The GET only matters until something was reported: the stream's events
 * are newer than it from then on. */
static void on_get(const kl__http_result *res, void *arg)
{
    k8slease_watch *w = arg;
    kl__lease *lease = NULL;
    char what[400];
    int err;

    w->req = NULL;
    if (w->reported)
        return;
    snprintf(what, sizeof(what), "get %s", w->what);
    err = kl__lease_result(res, what, &lease);
    if (err == 0) {
        kl__rv_gate_set(&w->gate, lease->rv);
        report_lease(w, lease);
    } else if (err == K8SLEASE_ENOTFOUND) {
        report(w, "", -1);
    } else {
        kl__log_printf(&w->client->log, K8SLEASE_LOG_WARN, "watch %s: %s; retrying", w->what,
                       kl__error_get());
        kl__timer_arm(w->client->loop, &w->retry,
                      kl__loop_now(w->client->loop) + WATCH_RETRY_MS * KL_NS_PER_MS);
    }
    kl__lease_free(lease);
}

static void get(k8slease_watch *w)
{
    kl__http_opts req = {0};
    char *path = kl__lease_path(w->ns, w->name);

    if (path) {
        req.method = "GET";
        req.path = path;
        req.timeout_ms = GET_TIMEOUT_MS;
        w->req = kl__http_start(w->client->loop, &req, on_get, w);
    }
    kl__free(path);
    if (!w->req)
        kl__timer_arm(w->client->loop, &w->retry,
                      kl__loop_now(w->client->loop) + WATCH_RETRY_MS * KL_NS_PER_MS);
}

/* Also the retry of a subscription or of the first GET that could not start
 * or failed. */
static void begin(void *arg)
{
    k8slease_watch *w = arg;

    if (w->cancelled)
        return;
    if (!w->sub && !(w->sub = kl__sub_start(w->client->informer, w->ns, w->name, 0, on_event, w)))
        kl__log_printf(&w->client->log, K8SLEASE_LOG_WARN, "watch %s: %s; retrying", w->what,
                       kl__error_get());
    if (!w->reported && !w->req)
        get(w);
    if (!w->sub)
        kl__timer_arm(w->client->loop, &w->retry,
                      kl__loop_now(w->client->loop) + WATCH_RETRY_MS * KL_NS_PER_MS);
}

static void on_retry(kl__timer *t, void *arg)
{
    (void)t;
    begin(arg);
}

static void watch_destroy(k8slease_watch *w)
{
    if (!w)
        return;
    kl__etcd_watch_free(w->etcd);
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
    if (client->backend == K8SLEASE_BACKEND_ETCD) {
        if ((err = kl__etcd_check_ns("k8slease_watch_start", ns)) < 0)
            return err;
    } else {
        if (!ns)
            ns = client->cfg->ns;
        if ((err = kl__check_namespace(ns)) < 0 || (err = kl__check_name("lease name", name)) < 0)
            return err;
    }
    if (!(w = kl__calloc(1, sizeof(*w))))
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    w->client = client;
    w->cb = cb;
    w->user_data = user_data;
    if (client->backend == K8SLEASE_BACKEND_ETCD) {
        /* the etcd watch checks the election name and reports through us */
        snprintf(w->what, sizeof(w->what), "etcd election %s", name ? name : "(null)");
        if ((err = kl__etcd_watch_new(&w->etcd, client, name, report_etcd, w)) < 0)
            goto out;
        *out = w;
        return 0;
    }
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
    if (w->etcd)
        kl__etcd_watch_cancel(w->etcd);
    kl__timer_cancel(w->client->loop, &w->retry);
    kl__sub_stop(w->sub);
    w->sub = NULL;
    kl__http_cancel(w->client->loop, w->req);
    w->req = NULL;
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
