/* The public elector calls, whatever the backend: argument checks, start
 * and stop posted to the loop, waiting, and the reports of the backends
 * (core/elector.h). */
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/client.h"
#include "core/clock.h"
#include "core/elector.h"
#include "core/timings.h"

/* end_reason when its copy could not be allocated. */
static char end_reason_oom[] = "out of memory keeping the reason";

int kl__elector_head_init(k8slease_elector *e, k8slease_client *client,
                          const kl__elector_backend *backend, const k8slease_elector_options *opts,
                          const char *what_fmt, ...)
{
    va_list ap;
    int err;

    va_start(ap, what_fmt);
    err = kl__elector_head_vinit(e, client, backend, opts, what_fmt, ap);
    va_end(ap);
    return err;
}

int kl__elector_head_vinit(k8slease_elector *e, k8slease_client *client,
                           const kl__elector_backend *backend, const k8slease_elector_options *opts,
                           const char *what_fmt, va_list ap)
{
    pthread_condattr_t attr;
    const char *call = NULL;
    char buf[128];
    int rc;

    if ((rc = pthread_mutex_init(&e->mu, NULL)) != 0)
        return kl__error_set(K8SLEASE_ENOMEM, "pthread_mutex_init: %s",
                             kl__strerror(rc, buf, sizeof(buf)));
    e->sync = KL_SYNC_MU;
    if ((rc = pthread_condattr_init(&attr)) != 0)
        return kl__error_set(K8SLEASE_ENOMEM, "pthread_condattr_init: %s",
                             kl__strerror(rc, buf, sizeof(buf)));
    /* The waits are timed on the monotonic clock: no condition on another. */
    if ((rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC)) != 0)
        call = "pthread_condattr_setclock";
    else if ((rc = pthread_cond_init(&e->cv, &attr)) != 0)
        call = "pthread_cond_init";
    pthread_condattr_destroy(&attr);
    if (call)
        return kl__error_set(K8SLEASE_ENOMEM, "%s: %s", call, kl__strerror(rc, buf, sizeof(buf)));
    e->sync |= KL_SYNC_CV;
    e->client = client;
    e->backend = backend;
    e->stats.version = K8SLEASE_ELECTOR_STATS_VERSION;
    e->opts = *opts;
    e->opts.ns = e->opts.name = e->opts.identity = NULL;
    e->opts.binary_version = e->opts.emulation_version = e->opts.strategy = NULL;
    atomic_init(&e->epoch, -1);
    atomic_init(&e->leader_deadline, 0);
    kl__timer_init(&e->reap, NULL, e);  /* armed only once retired */
    kl__timer_init(&e->timer, NULL, e); /* the backend sets its callback */
    /* Sized to the text: a fixed buffer would cost every election of
     * thousands the longest name's room. */
    e->what = kl__vsprintf(what_fmt, ap);
    e->about.what = e->what;
    e->about.kind = KL_LOG_ELECTION;
    return e->what ? 0 : kl__error_set(K8SLEASE_ENOMEM, "out of memory");
}

void kl__elector_head_destroy(k8slease_elector *e)
{
    if (e->end_reason != end_reason_oom)
        kl__free(e->end_reason);
    kl__free(e->renewal_error);
    kl__free(e->handoff_to);
    kl__free(e->what);
    if (e->sync & KL_SYNC_CV)
        pthread_cond_destroy(&e->cv);
    if (e->sync & KL_SYNC_MU)
        pthread_mutex_destroy(&e->mu);
}

static void note(k8slease_elector *e, const kl__elector_note *n)
{
    if (e->note_cb)
        e->note_cb(n, e->note_arg);
}

void kl__elector_report_started(k8slease_elector *e, int64_t epoch, int64_t deadline)
{
    kl__elector_note n = {.type = KL_NOTE_STARTED, .epoch = epoch};

    kl__log_at(&e->client->log, K8SLEASE_LOG_INFO, &e->about, "elected, epoch %lld",
               (long long)epoch);
    atomic_store(&e->epoch, epoch);
    atomic_store(&e->leader_deadline, deadline);
    note(e, &n);
    /* The callback first: wait_elected returns once it has run. */
    if (e->opts.on_started_leading)
        e->opts.on_started_leading(epoch, e->opts.user_data);
    pthread_mutex_lock(&e->mu);
    e->elected = 1;
    e->stats.terms++;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

void kl__elector_report_deadline(k8slease_elector *e, int64_t deadline)
{
    atomic_store(&e->leader_deadline, deadline);
}

/* The term is over the moment it is: whatever the election still has to
 * do (a release, requests that wait for a server that does not answer),
 * wait_lost and wait_elected return now, not at DONE. */
void kl__elector_report_stopped(k8slease_elector *e)
{
    kl__elector_note n = {.type = KL_NOTE_STOPPED};

    kl__log_at(&e->client->log, K8SLEASE_LOG_INFO, &e->about, "stopped leading");
    atomic_store(&e->leader_deadline, 0);
    note(e, &n);
    if (e->opts.on_stopped_leading)
        e->opts.on_stopped_leading(e->opts.user_data);
    pthread_mutex_lock(&e->mu);
    e->stopped = 1;
    e->lost_unseen = e->lost_waiters;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

void kl__elector_report_new_leader(k8slease_elector *e, const char *identity, int64_t epoch)
{
    kl__elector_note n = {.type = KL_NOTE_LEADER, .identity = identity, .epoch = epoch};

    kl__log_at(&e->client->log, K8SLEASE_LOG_INFO, &e->about, "leader is \"%s\" (epoch %lld)",
               identity, (long long)epoch);
    note(e, &n);
    if (e->opts.on_new_leader)
        e->opts.on_new_leader(identity, epoch, e->opts.user_data);
}

void kl__elector_report_request(k8slease_elector *e, const char *verb, int status,
                                const char *message)
{
    kl__elector_note n = {.type = KL_NOTE_REQUEST, .verb = verb, .status = status};

    n.message = status < 0 && !(status == K8SLEASE_ENOTFOUND && verb[0] == 'g') ? message : NULL;
    note(e, &n);
}

void kl__elector_report_released(k8slease_elector *e, int64_t epoch)
{
    kl__elector_note n = {.type = KL_NOTE_RELEASED, .epoch = epoch};

    note(e, &n);
}

void kl__elector_report_handoff(k8slease_elector *e, const char *to)
{
    kl__elector_note n = {.type = KL_NOTE_HANDOFF, .identity = to};

    note(e, &n);
}

static _Atomic int lost_waiting;
void (*kl__elector_lost_hook)(k8slease_elector *e);

int kl__elector_lost_waiting(void)
{
    return atomic_load(&lost_waiting);
}

static void lost_seen(void *arg)
{
    k8slease_elector *e = arg;
    void (*resume)(k8slease_elector *) = NULL;

    pthread_mutex_lock(&e->mu);
    e->lost_resume_posted = 0;
    if (!e->done)
        resume = e->lost_resume;
    e->lost_resume = NULL;
    pthread_mutex_unlock(&e->mu);
    if (resume)
        resume(e);
}

int kl__elector_hold_release(k8slease_elector *e, void (*resume)(k8slease_elector *e))
{
    int hold;

    pthread_mutex_lock(&e->mu);
    hold = e->lost_unseen > 0;
    if (hold)
        e->lost_resume = resume;
    pthread_mutex_unlock(&e->mu);
    return hold;
}

/* A thread that waited in wait_lost since before STOPPED returns (mu
 * held): the last of them lets the release go. Out of memory posting, the
 * release waits for its deadline and is not written: the Lease expires. */
static void lost_returns(k8slease_elector *e)
{
    if (e->lost_unseen == 0 || --e->lost_unseen > 0 || !e->lost_resume)
        return;
    if (kl__loop_post(e->client->loop, lost_seen, e) == 0)
        e->lost_resume_posted = 1;
    else
        e->lost_resume = NULL;
}

void kl__elector_report_done(k8slease_elector *e)
{
    kl__elector_note n = {.type = KL_NOTE_DONE};

    kl__log_at(&e->client->log, K8SLEASE_LOG_DEBUG, &e->about, "election over");
    atomic_store(&e->leader_deadline, 0);
    note(e, &n);
    pthread_mutex_lock(&e->mu);
    e->stopped = 1; /* a backend's DONE always follows its STOPPED; to be sure */
    e->done = 1;
    e->lost_resume = NULL; /* nothing is released any more */
    e->stats.watch_healthy = 0;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    /* Not freed here: the backend is still on the stack. */
    if (e->retired)
        kl__timer_arm(e->client->loop, &e->reap, kl__loop_now(e->client->loop));
}

void kl__elector_count_renewal(k8slease_elector_stats *st, int64_t started_ns, int64_t took_ns)
{
    static const int64_t bounds_ms[K8SLEASE_LATENCY_BUCKETS] = K8SLEASE_LATENCY_BOUNDS_MS;
    int b = 0;

    st->last_renew_ns = started_ns;
    st->renewals++;
    while (b < K8SLEASE_LATENCY_BUCKETS - 1 && took_ns > bounds_ms[b] * KL_NS_PER_MS)
        b++;
    st->renew_latency_bucket[b]++;
    st->renew_latency_count++;
    st->renew_latency_sum_s += (double)took_ns / KL_NS_PER_S;
}

uint64_t kl__elector_seed(const void *p)
{
    uint64_t x = (uint64_t)kl__clock_mono_ns() ^ ((uint64_t)getpid() << 32) ^ (uintptr_t)p;

    /* One splitmix64 step spreads the bits of this weak entropy. */
    return kl__splitmix64(&x);
}

void kl__elector_report_error(k8slease_elector *e, const char *message)
{
    char *copy = kl__strdup(message);

    pthread_mutex_lock(&e->mu);
    if (e->end_reason != end_reason_oom)
        kl__free(e->end_reason);
    e->end_reason = copy ? copy : end_reason_oom;
    pthread_mutex_unlock(&e->mu);
}

/* The options of a version 1 caller end before the coordinated field, of a
 * version 2 caller before crash_failover. */
#define ELECTOR_OPTIONS_V1_SIZE offsetof(k8slease_elector_options, coordinated)
#define ELECTOR_OPTIONS_V2_SIZE offsetof(k8slease_elector_options, crash_failover)
#define ELECTOR_OPTIONS_V3_SIZE offsetof(k8slease_elector_options, handoff_candidate)

static void start_on_loop(void *arg)
{
    k8slease_elector *e = arg;

    e->backend->start(e);
}

K8SLEASE_API int k8slease_elector_start(k8slease_elector **out, k8slease_client *client,
                                        const k8slease_elector_options *opts)
{
    return kl__elector_start_noted(out, client, opts, NULL, NULL);
}

int kl__elector_start_noted(k8slease_elector **out, k8slease_client *client,
                            const k8slease_elector_options *opts, kl__elector_note_cb cb, void *arg)
{
    k8slease_elector_options o = K8SLEASE_ELECTOR_OPTIONS_INIT;
    const kl__elector_backend *backend;
    k8slease_elector *e = NULL;
    int err;

    if (!out || !client || !opts)
        return kl__error_set(K8SLEASE_EINVAL,
                             "k8slease_elector_start: out, client or opts is NULL");
    *out = NULL;
    if (opts->version == 1)
        memcpy(&o, opts, ELECTOR_OPTIONS_V1_SIZE); /* the rest keeps the defaults */
    else if (opts->version == 2)
        memcpy(&o, opts, ELECTOR_OPTIONS_V2_SIZE);
    else if (opts->version == 3)
        memcpy(&o, opts, ELECTOR_OPTIONS_V3_SIZE);
    else if (opts->version == K8SLEASE_ELECTOR_OPTIONS_VERSION)
        o = *opts;
    else
        return kl__error_set(K8SLEASE_EINVAL,
                             "k8slease_elector_options.version is %u, expected 1 to %u (use "
                             "K8SLEASE_ELECTOR_OPTIONS_INIT)",
                             opts->version, K8SLEASE_ELECTOR_OPTIONS_VERSION);
    o.version = K8SLEASE_ELECTOR_OPTIONS_VERSION;
    backend = client->be->elector;
    if ((err = backend->create(&e, client, &o)) < 0)
        return err;
    e->note_cb = cb;
    e->note_arg = arg;
    if (kl__loop_post(client->loop, start_on_loop, e) < 0) {
        backend->destroy(e);
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    }
    *out = e;
    return 0;
}

/* Whether the term is over (mu held): on_stopped_leading has run, the
 * election is over, or we led and the leader deadline has passed by the
 * clock, which is_leader already says even if the loop thread has not
 * seen it yet (a callback that blocks it, a process just thawed). */
static int term_over(k8slease_elector *e)
{
    int64_t deadline;

    if (e->stopped || e->done)
        return 1;
    if (!e->elected)
        return 0;
    deadline = atomic_load(&e->leader_deadline);
    return deadline == 0 || kl__clock_mono_ns() >= deadline;
}

static int elected_or_over(k8slease_elector *e)
{
    return e->elected || term_over(e);
}

static int is_done(k8slease_elector *e)
{
    return e->done;
}

static void sleep_until(k8slease_elector *e, int64_t at_ns)
{
    struct timespec ts = {.tv_sec = at_ns / KL_NS_PER_S, .tv_nsec = at_ns % KL_NS_PER_S};

    if (at_ns == INT64_MAX)
        pthread_cond_wait(&e->cv, &e->mu);
    else
        pthread_cond_timedwait(&e->cv, &e->mu, &ts);
}

/* Wait (mu held) until ready(e), at most timeout_ms (< 0: no limit); 0 or
 * K8SLEASE_ETIMEOUT. While we lead, it also wakes at the leader deadline:
 * nothing signals when the clock passes it (term_over looks at it). */
static int wait_for(k8slease_elector *e, int (*ready)(k8slease_elector *), int64_t timeout_ms)
{
    int64_t until = INT64_MAX;

    if (timeout_ms >= 0 && timeout_ms < INT64_MAX / KL_NS_PER_MS)
        until = kl__add_sat(kl__clock_mono_ns(), timeout_ms * KL_NS_PER_MS);

    while (!ready(e)) {
        int64_t deadline = atomic_load(&e->leader_deadline), at = until;

        if (kl__clock_mono_ns() >= until)
            return K8SLEASE_ETIMEOUT;
        if (e->elected && deadline != 0 && deadline < at)
            at = deadline;
        sleep_until(e, at);
    }
    return 0;
}

K8SLEASE_API int k8slease_elector_wait_elected(k8slease_elector *e, int64_t timeout_ms,
                                               int64_t *epoch)
{
    int err;

    if (!e)
        return kl__error_set(K8SLEASE_EINVAL, "k8slease_elector_wait_elected: elector is NULL");
    if (kl__loop_on_thread(e->client->loop))
        return kl__error_set(K8SLEASE_ESTATE,
                             "k8slease_elector_wait_elected: called from a callback");
    pthread_mutex_lock(&e->mu);
    err = wait_for(e, elected_or_over, timeout_ms);
    if (err == 0 && term_over(e))
        err = kl__error_set(K8SLEASE_ESTATE, "%s: election over %s%s%s", e->what,
                            e->elected ? "(leadership already lost)" : "without becoming leader",
                            e->end_reason && e->end_reason[0] ? ": " : "",
                            e->end_reason ? e->end_reason : "");
    else if (err == K8SLEASE_ETIMEOUT)
        kl__error_set(err, "%s: not elected within %lld ms", e->what, (long long)timeout_ms);
    pthread_mutex_unlock(&e->mu);
    if (err == 0 && epoch)
        *epoch = atomic_load(&e->epoch);
    return err;
}

K8SLEASE_API int k8slease_elector_is_leader(const k8slease_elector *e)
{
    int64_t deadline;

    if (!e)
        return 0;
    deadline = atomic_load(&((k8slease_elector *)e)->leader_deadline);
    return deadline != 0 && kl__clock_mono_ns() < deadline;
}

K8SLEASE_API int64_t k8slease_elector_leader_deadline(const k8slease_elector *e)
{
    int64_t deadline;

    if (!e)
        return 0;
    /* Past the deadline we are not leader, even before the loop has seen it. */
    deadline = atomic_load(&((k8slease_elector *)e)->leader_deadline);
    return deadline != 0 && kl__clock_mono_ns() < deadline ? deadline : 0;
}

K8SLEASE_API int64_t k8slease_elector_epoch(const k8slease_elector *e)
{
    return e ? atomic_load(&((k8slease_elector *)e)->epoch) : -1;
}

K8SLEASE_API int k8slease_elector_wait_lost(k8slease_elector *e, int64_t timeout_ms)
{
    int err, counted;

    if (!e)
        return kl__error_set(K8SLEASE_EINVAL, "k8slease_elector_wait_lost: elector is NULL");
    if (timeout_ms != 0 && kl__loop_on_thread(e->client->loop))
        return kl__error_set(K8SLEASE_ESTATE, "k8slease_elector_wait_lost: called from a callback");
    pthread_mutex_lock(&e->mu);
    /* Counted if the term ends while we wait: the release waits for us. */
    counted = !e->stopped;
    e->lost_waiters += counted;
    atomic_fetch_add(&lost_waiting, 1);
    err = wait_for(e, term_over, timeout_ms);
    atomic_fetch_sub(&lost_waiting, 1);
    if (counted && e->stopped && kl__elector_lost_hook) {
        pthread_mutex_unlock(&e->mu);
        kl__elector_lost_hook(e);
        pthread_mutex_lock(&e->mu);
    }
    if (counted) {
        e->lost_waiters--;
        if (e->stopped)
            lost_returns(e);
    }
    pthread_mutex_unlock(&e->mu);
    if (err == K8SLEASE_ETIMEOUT)
        kl__error_set(err, "%s: term not over after %lld ms", e->what, (long long)timeout_ms);
    return err;
}

K8SLEASE_API int k8slease_elector_stats_get(const k8slease_elector *e,
                                            k8slease_elector_stats *stats)
{
    k8slease_elector *m = (k8slease_elector *)e; /* the mutex, not the counters */

    if (!e || !stats)
        return kl__error_set(K8SLEASE_EINVAL,
                             "k8slease_elector_stats_get: elector or stats is NULL");
    if (stats->version < 1 || stats->version > K8SLEASE_ELECTOR_STATS_VERSION)
        return kl__error_set(K8SLEASE_EINVAL,
                             "k8slease_elector_stats.version is %u, expected 1 to %u",
                             stats->version, K8SLEASE_ELECTOR_STATS_VERSION);
    pthread_mutex_lock(&m->mu);
    /* A caller built against an older version has a shorter struct. */
    if (stats->version == 1) {
        memcpy(stats, &e->stats, offsetof(k8slease_elector_stats, gets));
        stats->version = 1;
    } else if (stats->version == 2) {
        memcpy(stats, &e->stats, offsetof(k8slease_elector_stats, candidate_known));
        stats->version = 2;
    } else {
        *stats = e->stats;
    }
    pthread_mutex_unlock(&m->mu);
    return 0;
}

static void stop_release(void *arg)
{
    k8slease_elector *e = arg;

    e->backend->stop(e, 1);
}

static void stop_keep(void *arg)
{
    k8slease_elector *e = arg;

    e->backend->stop(e, 0);
}

static void stop_handoff(void *arg)
{
    k8slease_elector *e = arg;

    e->backend->handoff(e, e->handoff_to, e->handoff_bound_ms);
}

/* Ask the loop to stop the election; does not wait. */
int kl__elector_stop_async(k8slease_elector *e, int release)
{
    int err = 0;

    if (release < 0)
        release = e->opts.release_on_cancel;
    pthread_mutex_lock(&e->mu);
    if (!e->done && !e->stop_posted) {
        err = kl__loop_post(e->client->loop, release ? stop_release : stop_keep, e);
        e->stop_posted = err == 0;
    }
    pthread_mutex_unlock(&e->mu);
    return err < 0 ? kl__error_set(K8SLEASE_ENOMEM, "out of memory") : 0;
}

K8SLEASE_API int k8slease_elector_stop(k8slease_elector *e, int release)
{
    int err;

    if (!e)
        return kl__error_set(K8SLEASE_EINVAL, "k8slease_elector_stop: elector is NULL");
    if (kl__loop_on_thread(e->client->loop))
        return kl__error_set(K8SLEASE_ESTATE, "k8slease_elector_stop: called from a callback");
    if ((err = kl__elector_stop_async(e, release)) < 0)
        return err;
    return kl__elector_wait_done(e, -1); /* bounded by the machine's release deadline */
}

K8SLEASE_API int k8slease_elector_handoff(k8slease_elector *e, const char *to, int64_t bound_ms)
{
    int err = 0;

    if (!e)
        return kl__error_set(K8SLEASE_EINVAL, "k8slease_elector_handoff: elector is NULL");
    if (!e->backend->handoff)
        return kl__error_set(K8SLEASE_EINVAL,
                             "k8slease_elector_handoff: %s: handoff is for the Kubernetes backend",
                             e->what);
    if (to && kl__identity_check(to) < 0)
        return kl__error_wrap(K8SLEASE_EINVAL, "k8slease_elector_handoff: to");
    if (kl__loop_on_thread(e->client->loop))
        return kl__error_set(K8SLEASE_ESTATE, "k8slease_elector_handoff: called from a callback");
    pthread_mutex_lock(&e->mu);
    if (!e->done && !e->stop_posted) {
        e->handoff_bound_ms = bound_ms;
        if (to && !(e->handoff_to = kl__strdup(to)))
            err = K8SLEASE_ENOMEM;
        else if (kl__loop_post(e->client->loop, stop_handoff, e) < 0)
            err = K8SLEASE_ENOMEM;
        e->stop_posted = err == 0;
    }
    pthread_mutex_unlock(&e->mu);
    if (err < 0)
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    return kl__elector_wait_done(e, -1); /* bounded by the machine's release deadline */
}

int kl__elector_wait_done(k8slease_elector *e, int64_t timeout_ms)
{
    int err;

    pthread_mutex_lock(&e->mu);
    err = wait_for(e, is_done, timeout_ms);
    pthread_mutex_unlock(&e->mu);
    return err;
}

static void detach(void *arg)
{
    k8slease_elector *e = arg;

    e->backend->detach(e);
}

K8SLEASE_API void k8slease_elector_free(k8slease_elector *e)
{
    if (!e)
        return;
    if (kl__loop_on_thread(e->client->loop)) {
        /* A callback of the client: it cannot wait for the release, and
         * freeing now would pull the elector from under the code that runs
         * the callback. Its callbacks end now (the loop thread is the only
         * one that reads them); the loop stops and frees it once over. */
        e->opts.on_started_leading = NULL;
        e->opts.on_stopped_leading = NULL;
        e->opts.on_new_leader = NULL;
        kl__log_at(&e->client->log, K8SLEASE_LOG_DEBUG, &e->about,
                   "freed from a callback: stopped, and freed once its election is over");
        kl__elector_retire(e, NULL, NULL);
        return;
    }
    if (k8slease_elector_stop(e, -1) < 0) {
        /* Out of memory posting the stop: end it without releasing. */
        kl__loop_call(e->client->loop, detach, e);
    }
    /* FIFO: once this returns, no closure of ours is left in the queue. */
    kl__loop_call(e->client->loop, detach, e);
    e->backend->destroy(e);
}

/* ---- Retired electors ---------------------------------------------------
 *
 * The seed ABI starts a new election for a Lease as soon as the last one's
 * term is over, while that one may still be releasing on a server that
 * does not answer. The old one is handed to the loop, which frees it when
 * its election is over. */

static void unlink_retired(k8slease_elector *e)
{
    for (k8slease_elector **p = &e->client->retired; *p; p = &(*p)->retired_next)
        if (*p == e) {
            *p = e->retired_next;
            return;
        }
}

static void free_retired(k8slease_elector *e)
{
    void (*reaped)(void *) = e->reaped;
    void *arg = e->reaped_arg;

    k8slease_client *client = e->client;

    kl__timer_cancel(client->loop, &e->reap);
    unlink_retired(e);
    e->backend->detach(e);
    e->backend->destroy(e);
    if (reaped)
        reaped(arg);
    if (!client->retired && client->retired_drained) {
        kl__loop_set_flag(client->loop, client->retired_drained);
        client->retired_drained = NULL;
    }
}

static void on_reap(kl__timer *t, void *arg)
{
    k8slease_elector *e = arg;
    int posted;

    pthread_mutex_lock(&e->mu);
    posted = e->lost_resume_posted;
    pthread_mutex_unlock(&e->mu);
    /* A closure for e is still queued (lost_seen): it runs this turn. */
    if (posted) {
        kl__timer_arm(e->client->loop, t, kl__loop_now(e->client->loop));
        return;
    }
    free_retired(e);
}

static void retire_on_loop(void *arg)
{
    k8slease_elector *e = arg;
    int stop;

    e->retired = 1;
    e->retired_next = e->client->retired;
    e->client->retired = e;
    kl__timer_init(&e->reap, on_reap, e);
    /* Posted closures run in order: a STOP posted before this has run. */
    pthread_mutex_lock(&e->mu);
    stop = !e->done && !e->stop_posted;
    e->stop_posted = 1;
    pthread_mutex_unlock(&e->mu);
    if (stop)
        e->backend->stop(e, e->opts.release_on_cancel);
    if (e->done && !e->reap.slot)
        kl__timer_arm(e->client->loop, &e->reap, kl__loop_now(e->client->loop));
}

void kl__elector_retire(k8slease_elector *e, void (*reaped)(void *arg), void *arg)
{
    if (!e)
        return;
    e->reaped = reaped;
    e->reaped_arg = arg;
    /* Waits for the loop, never for the server; and once it returns, no
     * closure of the caller's for e is left in the queue. From a callback,
     * in the queue after them. */
    if (!kl__loop_on_thread(e->client->loop))
        kl__loop_call(e->client->loop, retire_on_loop, e);
    else if (kl__loop_post(e->client->loop, retire_on_loop, e) < 0)
        kl__log_at(&e->client->log, K8SLEASE_LOG_ERROR, &e->about,
                   "out of memory retiring the election: it is left running");
}

typedef struct drain {
    k8slease_client *client;
    int drained;
} drain;

static void drain_on_loop(void *arg)
{
    drain *d = arg;

    if (d->client->retired)
        d->client->retired_drained = &d->drained;
    else
        kl__loop_set_flag(d->client->loop, &d->drained);
}

void kl__elector_wait_retired(k8slease_client *client)
{
    drain d = {client, 0};

    if (kl__loop_call(client->loop, drain_on_loop, &d) == 0)
        kl__loop_wait_flag(client->loop, &d.drained);
}

void kl__elector_reap_retired(k8slease_client *client)
{
    while (client->retired)
        free_retired(client->retired);
}
