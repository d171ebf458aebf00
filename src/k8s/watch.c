/* Holder watch of a Lease: a subscriber of the client's shared stream for
 * the Lease (k8s/informer.c), plus one GET for the state at the start, since the
 * stream may already be running and have listed long ago. The public watch
 * (core/watch.c) drops reports that change neither holder nor epoch. */
#include "k8s/watch.h"

#include <stdio.h>
#include <string.h>

#include "core/client.h"
#include "k8s/client.h"
#include "core/clock.h"
#include "k8s/api.h"
#include "k8s/codec.h"
#include "k8s/informer.h"

#define WATCH_RETRY_MS 1000
#define GET_TIMEOUT_MS 10000

typedef struct k8s_watch {
    k8slease_client *client;
    k8slease_watch *pub; /* what report() reports for */
    kl__holder_report_cb report;
    char *ns, *name;
    char what[300];

    /* Loop thread only. */
    kl__sub *sub;
    kl__http_req *req; /* the first GET */
    kl__timer retry;
    kl__rv_gate gate; /* newest state reported from */
    int cancelled;
} k8s_watch;

static void get(k8s_watch *w);

static void report_lease(k8s_watch *w, const kl__lease *lease)
{
    w->report(w->pub, lease->spec.holder ? lease->spec.holder : "", lease->spec.transitions);
}

static void on_event(const kl__sub_event *ev, void *arg)
{
    k8s_watch *w = arg;

    if (ev->type == KL_SUB_HEALTH || !kl__rv_gate_pass(&w->gate, ev->rv))
        return;
    if (ev->type == KL_SUB_LEASE)
        report_lease(w, ev->lease);
    else
        w->report(w->pub, "", -1);
}

/* The GET only matters until something was reported: the stream's events
 * are newer than it from then on. */
/* The message of the call that failed: "watch lease NS/NAME: ERROR; retrying". */
static void failed(const k8s_watch *w)
{
    char what[320], subject[300];
    kl__log_about about = {what, subject, KL_LOG_WATCH_FAILED, kl__error_get()};

    snprintf(what, sizeof(what), "watch %s", w->what);
    snprintf(subject, sizeof(subject), "%s/%s", w->ns, w->name);
    kl__log_at(&w->client->log, K8SLEASE_LOG_WARN, &about, "%s; retrying", kl__error_get());
}

static void on_get(const kl__http_result *res, void *arg)
{
    k8s_watch *w = arg;
    kl__lease *lease = NULL;
    char what[400];
    int err;

    w->req = NULL;
    if (kl__watch_reported(w->pub))
        return;
    snprintf(what, sizeof(what), "get %s", w->what);
    err = kl__lease_result(res, what, &lease);
    if (err == 0) {
        kl__rv_gate_set(&w->gate, lease->rv);
        report_lease(w, lease);
    } else if (err == K8SLEASE_ENOTFOUND) {
        w->report(w->pub, "", -1);
    } else {
        failed(w);
        kl__timer_arm(w->client->loop, &w->retry,
                      kl__loop_now(w->client->loop) + WATCH_RETRY_MS * KL_NS_PER_MS);
    }
    kl__lease_free(lease);
}

static void get(k8s_watch *w)
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
    k8s_watch *w = arg;

    if (w->cancelled)
        return;
    if (!w->sub &&
        !(w->sub = kl__sub_start(kl__k8s_of(w->client)->informer, w->ns, w->name, 0, on_event, w)))
        failed(w);
    if (!kl__watch_reported(w->pub) && !w->req)
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

void kl__k8s_watch_free(void *arg)
{
    k8s_watch *w = arg;

    if (!w)
        return;
    kl__free(w->ns);
    kl__free(w->name);
    kl__free(w);
}

int kl__k8s_watch_start(void **out, k8slease_watch *pub, k8slease_client *client, const char *ns,
                        const char *name, char *what, size_t what_size, kl__holder_report_cb report)
{
    k8s_watch *w = NULL;
    int err;

    if (!ns)
        ns = client->cfg->ns;
    if ((err = kl__check_namespace(ns)) < 0 || (err = kl__check_name("lease name", name)) < 0)
        return err;
    if (!(w = kl__calloc(1, sizeof(*w))))
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    w->client = client;
    w->pub = pub;
    w->report = report;
    w->ns = kl__strdup(ns);
    w->name = kl__strdup(name);
    kl__timer_init(&w->retry, on_retry, w);
    snprintf(w->what, sizeof(w->what), "lease %s/%s", ns, name);
    snprintf(what, what_size, "%s", w->what);
    if (!w->ns || !w->name || kl__loop_post(client->loop, begin, w) < 0) {
        kl__k8s_watch_free(w);
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    }
    *out = w;
    return 0;
}

void kl__k8s_watch_cancel(void *arg)
{
    k8s_watch *w = arg;

    w->cancelled = 1;
    kl__timer_cancel(w->client->loop, &w->retry);
    kl__sub_stop(w->sub);
    w->sub = NULL;
    kl__http_cancel(w->client->loop, w->req);
    w->req = NULL;
}
