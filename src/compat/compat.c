/* The seed's C ABI (libk8s_lease_wrapper.h) over the native API: a
 * process-wide client and maps "ns/name" -> election / watch, as the Go
 * library kept them. Blocking calls wait on the native elector; nothing
 * here runs a second election implementation. */
#include "libk8s_lease_wrapper.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/client.h"
#include "k8slease.h"

#define GET_HOLDER_TIMEOUT_MS 5000

typedef struct entry {
    struct entry *next;
    char *key;
    int refs; /* the map's reference + one per caller using it */
    k8slease_elector *elector;
    k8slease_watch *watch;
    holder_change_cb_t cb;
    void *cb_ctx;
} entry;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static k8slease_client *g_client;
static entry *g_elections;
static entry *g_watches;

static int fail(char **errMsg, const char *fmt, ...) KL_PRINTF(2, 3);

static int fail(char **errMsg, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (errMsg)
        *errMsg = strdup(msg); /* the caller free()s it, as with the Go library */
    return -1;
}

static int fail_last(char **errMsg)
{
    return fail(errMsg, "%s", k8slease_error_last());
}

static int ensure_client(char **errMsg)
{
    int err = 0;

    pthread_mutex_lock(&g_mu);
    if (!g_client)
        err = k8slease_client_new(&g_client, NULL);
    pthread_mutex_unlock(&g_mu);
    if (err < 0)
        return fail(errMsg, "failed to build k8s config: %s", k8slease_error_last());
    return 0;
}

static int make_key(char *buf, size_t size, const char *ns, const char *name, char **errMsg)
{
    if (!ns || !name)
        return fail(errMsg, "namespace and lease name must not be NULL");
    if ((size_t)snprintf(buf, size, "%s/%s", ns, name) >= size)
        return fail(errMsg, "namespace/name too long");
    return 0;
}

/* g_mu held. */
static entry *find(entry *list, const char *key)
{
    for (entry *e = list; e; e = e->next)
        if (strcmp(e->key, key) == 0)
            return e;
    return NULL;
}

/* g_mu held. */
static void unlink_entry(entry **list, entry *x)
{
    for (entry **p = list; *p; p = &(*p)->next)
        if (*p == x) {
            *p = x->next;
            return;
        }
}

static entry *ref_election(const char *key)
{
    entry *e;

    pthread_mutex_lock(&g_mu);
    if ((e = find(g_elections, key)))
        e->refs++;
    pthread_mutex_unlock(&g_mu);
    return e;
}

static void unref_election(entry *e)
{
    int last;

    pthread_mutex_lock(&g_mu);
    last = --e->refs == 0;
    pthread_mutex_unlock(&g_mu);
    if (!last)
        return;
    k8slease_elector_free(e->elector);
    free(e->key);
    free(e);
}

K8SLEASE_COMPAT_API int K8sLeaseInit(char **errMsg)
{
    return ensure_client(errMsg);
}

K8SLEASE_COMPAT_API int K8sLeaseRunElection(char *ns, char *leaseName, char *identity,
                                            int leaseDurationSec, int renewDeadlineSec,
                                            int retryPeriodSec, char **errMsg)
{
    k8slease_elector_options opts = K8SLEASE_ELECTOR_OPTIONS_INIT;
    entry *e = NULL, *old = NULL;
    char key[600];
    int rc = 0;

    if (make_key(key, sizeof(key), ns, leaseName, errMsg) < 0 || ensure_client(errMsg) < 0)
        return -1;
    if (leaseDurationSec <= 0 || renewDeadlineSec <= 0 || retryPeriodSec <= 0)
        return fail(errMsg,
                    "failed to create leader elector: durations must be positive (leaseDuration "
                    "%ds, renewDeadline %ds, retryPeriod %ds)",
                    leaseDurationSec, renewDeadlineSec, retryPeriodSec);
    if (!(e = calloc(1, sizeof(*e))) || !(e->key = strdup(key))) {
        free(e);
        return fail(errMsg, "out of memory");
    }
    e->refs = 1;
    opts.ns = ns;
    opts.name = leaseName;
    opts.identity = identity;
    opts.lease_duration_ms = (int64_t)leaseDurationSec * 1000;
    opts.renew_deadline_ms = (int64_t)renewDeadlineSec * 1000;
    opts.retry_period_ms = (int64_t)retryPeriodSec * 1000;
    opts.release_on_cancel = 1;

    pthread_mutex_lock(&g_mu);
    if ((old = find(g_elections, key))) {
        if (k8slease_elector_wait_lost(old->elector, 0) != 0) {
            pthread_mutex_unlock(&g_mu);
            old = NULL;
            rc = fail(errMsg, "election already running for %s", key);
            goto out;
        }
        /* The previous election for this key is over: it may start again;
         * the map's reference to it goes with the unlinking. */
        unlink_entry(&g_elections, old);
    }
    if (k8slease_elector_start(&e->elector, g_client, &opts) < 0) {
        pthread_mutex_unlock(&g_mu);
        rc = fail(errMsg, "failed to create leader elector: %s", k8slease_error_last());
        goto out;
    }
    e->next = g_elections;
    g_elections = e;
    e = NULL;
    pthread_mutex_unlock(&g_mu);
out:
    if (old)
        unref_election(old);
    if (e) {
        free(e->key);
        free(e);
    }
    return rc;
}

K8SLEASE_COMPAT_API int K8sLeaseWaitElected(char *ns, char *leaseName, int timeoutSec,
                                            long long int *leaseTransitions, char **errMsg)
{
    char key[600];
    entry *e;
    int64_t epoch = 0;
    int err, rc = 0;

    if (make_key(key, sizeof(key), ns, leaseName, errMsg) < 0)
        return -1;
    if (!(e = ref_election(key)))
        return fail(errMsg, "no election running for %s", key);
    err = k8slease_elector_wait_elected(e->elector,
                                        (int64_t)(timeoutSec < 0 ? 0 : timeoutSec) * 1000, &epoch);
    if (err == 0) {
        if (leaseTransitions)
            *leaseTransitions = epoch;
    } else if (err == K8SLEASE_ETIMEOUT) {
        /* As the Go library: give up the candidacy before reporting. */
        k8slease_elector_stop(e->elector, -1);
        rc = fail(errMsg, "election timed out after %ds", timeoutSec);
    } else if (err == K8SLEASE_ESTATE && k8slease_elector_wait_lost(e->elector, 0) == 0) {
        rc = fail(errMsg, "election lost before becoming leader");
    } else {
        rc = fail_last(errMsg);
    }
    unref_election(e);
    return rc;
}

K8SLEASE_COMPAT_API int K8sLeaseWaitLost(char *ns, char *leaseName, char **errMsg)
{
    char key[600];
    entry *e;
    int rc = 0;

    if (make_key(key, sizeof(key), ns, leaseName, errMsg) < 0)
        return -1;
    if (!(e = ref_election(key)))
        return 0; /* no election: it is over */
    if (k8slease_elector_wait_lost(e->elector, -1) < 0)
        rc = fail_last(errMsg);
    unref_election(e);
    return rc;
}

K8SLEASE_COMPAT_API int K8sLeaseCancelElection(char *ns, char *leaseName, char **errMsg)
{
    char key[600];
    entry *e;
    int rc = 0;

    if (make_key(key, sizeof(key), ns, leaseName, errMsg) < 0)
        return -1;
    if (!(e = ref_election(key)))
        return 0;
    if (kl__elector_stop_async(e->elector, -1) < 0)
        rc = fail_last(errMsg);
    unref_election(e);
    return rc;
}

K8SLEASE_COMPAT_API int K8sLeaseGetHolder(char *ns, char *leaseName, char **holderIdentity,
                                          long long int *leaseTransitions, char **errMsg)
{
    k8slease_holder *h = NULL;
    int err;

    if (!holderIdentity || !leaseTransitions)
        return fail(errMsg, "holderIdentity and leaseTransitions must not be NULL");
    *holderIdentity = NULL;
    *leaseTransitions = 0;
    if (!ns || !leaseName)
        return fail(errMsg, "namespace and lease name must not be NULL");
    if (ensure_client(errMsg) < 0)
        return -1;
    err = k8slease_holder_get(g_client, ns, leaseName, GET_HOLDER_TIMEOUT_MS, &h);
    if (err == K8SLEASE_ENOTFOUND)
        return 1;
    if (err < 0)
        return fail(errMsg, "failed to get lease: %s", k8slease_error_last());
    /* An expired lease has no holder: the caller should campaign. */
    if (h->identity[0] && !h->expired && !(*holderIdentity = strdup(h->identity))) {
        k8slease_holder_free(h);
        return fail(errMsg, "out of memory");
    }
    *leaseTransitions = h->epoch;
    k8slease_holder_free(h);
    return 0;
}

static void watch_trampoline(const char *identity, int64_t epoch, void *user_data)
{
    entry *e = user_data;

    /* A deleted Lease (epoch -1) has no holder, and no transitions left. */
    if (!identity[0])
        e->cb(e->cb_ctx, NULL, 0, epoch < 0 ? 0 : epoch);
    else
        e->cb(e->cb_ctx, identity, strlen(identity), epoch);
}

K8SLEASE_COMPAT_API int K8sLeaseWatchHolder(char *ns, char *leaseName, void *callbackCtx,
                                            holder_change_cb_t callbackFunc, char **errMsg)
{
    entry *e;
    char key[600];
    int rc = 0;

    if (!callbackFunc)
        return fail(errMsg, "callback function is NULL");
    if (make_key(key, sizeof(key), ns, leaseName, errMsg) < 0 || ensure_client(errMsg) < 0)
        return -1;
    if (!(e = calloc(1, sizeof(*e))) || !(e->key = strdup(key))) {
        free(e);
        return fail(errMsg, "out of memory");
    }
    e->cb = callbackFunc;
    e->cb_ctx = callbackCtx;
    pthread_mutex_lock(&g_mu);
    if (find(g_watches, key)) {
        rc = fail(errMsg, "watch already running for %s", key);
    } else if (k8slease_watch_start(&e->watch, g_client, ns, leaseName, watch_trampoline, e) < 0) {
        rc = fail(errMsg, "failed to watch lease: %s", k8slease_error_last());
    } else {
        e->next = g_watches;
        g_watches = e;
        e = NULL;
    }
    pthread_mutex_unlock(&g_mu);
    if (e) {
        free(e->key);
        free(e);
    }
    return rc;
}

K8SLEASE_COMPAT_API int K8sLeaseCancelWatch(char *ns, char *leaseName, char **errMsg)
{
    char key[600];
    entry *e;

    if (make_key(key, sizeof(key), ns, leaseName, errMsg) < 0)
        return -1;
    pthread_mutex_lock(&g_mu);
    if ((e = find(g_watches, key)))
        unlink_entry(&g_watches, e);
    pthread_mutex_unlock(&g_mu);
    if (!e)
        return 0;
    /* No callback runs once this returns (from the callback itself, none
     * runs after the current one), so the entry can go. */
    k8slease_watch_free(e->watch);
    free(e->key);
    free(e);
    return 0;
}

static int pod_label(char *ns, char *podName, char *labelKey, char *labelValue, char **errMsg)
{
    if (!ns || !podName || !labelKey)
        return fail(errMsg, "namespace, pod name and label key must not be NULL");
    if (ensure_client(errMsg) < 0)
        return -1;
    if (k8slease_pod_label(g_client, ns, podName, labelKey, labelValue) < 0)
        return fail_last(errMsg);
    return 0;
}

K8SLEASE_COMPAT_API int K8sPatchPodLabel(char *ns, char *podName, char *labelKey, char *labelValue,
                                         char **errMsg)
{
    if (!labelValue)
        return fail(errMsg, "label value must not be NULL");
    return pod_label(ns, podName, labelKey, labelValue, errMsg);
}

K8SLEASE_COMPAT_API int K8sRemovePodLabel(char *ns, char *podName, char *labelKey, char **errMsg)
{
    return pod_label(ns, podName, labelKey, NULL, errMsg);
}
