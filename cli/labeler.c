/* The pod labeler thread; see labeler.h. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "labeler.h"

#define BACKOFF_MIN_MS 500
#define BACKOFF_MAX_MS 30000

struct cli_labeler {
    k8slease_client *client;
    char ns[64]; /* "" for the client's */
    char pod[254];
    char key[320];
    char value[64];
    char what[400]; /* "pod NS/POD label KEY" for messages */

    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* broadcast on every change of want, have or quit */
    int want;          /* 1: set, 0: removed */
    int have;          /* what the Pod has: 1, 0, or -1 unknown (also while a PATCH is
                          in flight: a set on its way is not an absent label) */
    int quit;
};

static struct timespec mono_ts(int64_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = ms % 1000 * 1000000};

    return ts;
}

static void *labeler_main(void *arg)
{
    cli_labeler *l = arg;
    int64_t retry_at = 0, backoff = BACKOFF_MIN_MS;

    pthread_mutex_lock(&l->mu);
    while (!l->quit) {
        int target, err;

        if (l->want == l->have) {
            pthread_cond_wait(&l->cv, &l->mu);
            continue;
        }
        if (cli_now_ms() < retry_at) {
            struct timespec ts = mono_ts(retry_at);

            pthread_cond_timedwait(&l->cv, &l->mu, &ts);
            continue;
        }
        target = l->want;
        l->have = -1;
        pthread_mutex_unlock(&l->mu);
        err = k8slease_pod_label(l->client, l->ns[0] ? l->ns : NULL, l->pod, l->key,
                                 target ? l->value : NULL);
        if (err == 0) {
            cli_info("%s: %s", l->what, target ? "set" : "removed");
            backoff = BACKOFF_MIN_MS;
            retry_at = 0;
        } else {
            char delay[32];

            cli_format_duration(delay, sizeof(delay), backoff);
            cli_warn("%s: %s; retrying in %s", l->what, k8slease_error_last(), delay);
            retry_at = cli_now_ms() + backoff;
            backoff = backoff * 2 < BACKOFF_MAX_MS ? backoff * 2 : BACKOFF_MAX_MS;
        }
        pthread_mutex_lock(&l->mu);
        l->have = err == 0 ? target : -1;
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

int cli_labeler_start(cli_labeler **out, k8slease_client *client, const char *ns, const char *pod,
                      const char *key, const char *value)
{
    pthread_condattr_t attr;
    cli_labeler *l;
    int err;

    *out = NULL;
    if (!(l = calloc(1, sizeof(*l)))) {
        cli_error("out of memory");
        return -1;
    }
    l->client = client;
    snprintf(l->ns, sizeof(l->ns), "%s", ns ? ns : "");
    snprintf(l->pod, sizeof(l->pod), "%s", pod);
    snprintf(l->key, sizeof(l->key), "%s", key);
    snprintf(l->value, sizeof(l->value), "%s", value);
    snprintf(l->what, sizeof(l->what), "pod %s/%s label %s=%s",
             ns ? ns : k8slease_client_namespace(client), pod, key, value);
    l->want = 0;
    l->have = -1;
    pthread_mutex_init(&l->mu, NULL);
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&l->cv, &attr);
    pthread_condattr_destroy(&attr);
    if ((err = pthread_create(&l->thread, NULL, labeler_main, l)) != 0) {
        cli_error("cannot start a thread: %s", strerror(err));
        pthread_cond_destroy(&l->cv);
        pthread_mutex_destroy(&l->mu);
        free(l);
        return -1;
    }
    *out = l;
    return 0;
}

void cli_labeler_want(cli_labeler *l, int set)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    if (l->want != set) {
        l->want = set;
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
}

/* With mu held: wait until the label is gone, at most timeout_ms: until a
 * removal has succeeded after any set that was on its way (that set lands
 * first, then the thread, which wants it removed, removes it). */
static void wait_removed(cli_labeler *l, int64_t timeout_ms)
{
    struct timespec until = mono_ts(cli_now_ms() + timeout_ms);

    l->want = 0;
    pthread_cond_broadcast(&l->cv);
    if (l->have == -1)
        cli_debug("%s: waiting for the change on its way, then removing it", l->what);
    while (l->have != 0)
        if (pthread_cond_timedwait(&l->cv, &l->mu, &until) == ETIMEDOUT) {
            cli_warn("%s: not removed within %lld ms", l->what, (long long)timeout_ms);
            return;
        }
}

void cli_labeler_remove(cli_labeler *l, int64_t timeout_ms)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    wait_removed(l, timeout_ms);
    pthread_mutex_unlock(&l->mu);
}

void cli_labeler_stop(cli_labeler *l, int64_t timeout_ms)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    wait_removed(l, timeout_ms);
    l->quit = 1;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->mu);
    free(l);
}
