/* Holder watch, whatever the backend: the backend's watch (core/backend.h)
 * reports states, this file passes on those that change (holder, epoch),
 * not every renew, and frees safely from any thread or callback. */
#include <stdio.h>
#include <string.h>

#include "core/client.h"

struct k8slease_watch {
    k8slease_client *client;
    char what[300];
    k8slease_watch_cb cb;
    void *user_data;
    void *impl; /* the backend's watch */

    /* Loop thread only. */
    int reported;  /* a state was reported */
    char *holder;  /* last reported holder */
    int64_t epoch; /* last reported epoch */
};

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

static void report_cb(void *arg, const char *identity, int64_t epoch)
{
    report(arg, identity, epoch);
}

int kl__watch_reported(const k8slease_watch *w)
{
    return w->reported;
}

static void watch_destroy(k8slease_watch *w)
{
    if (!w)
        return;
    w->client->be->watch_free(w->impl);
    kl__free(w->holder);
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
    if (!(w = kl__calloc(1, sizeof(*w))))
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    w->client = client;
    w->cb = cb;
    w->user_data = user_data;
    if ((err = client->be->watch_start(&w->impl, w, client, ns, name, w->what, sizeof(w->what),
                                       report_cb)) < 0) {
        watch_destroy(w);
        return err;
    }
    *out = w;
    return 0;
}

static void cancel(void *arg)
{
    k8slease_watch *w = arg;

    w->client->be->watch_cancel(w->impl);
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
