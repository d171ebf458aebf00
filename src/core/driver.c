/* What the drivers of both backends share: core/driver.h. */
#include "core/driver.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/client.h"
#include "core/clock.h"
#include "core/timings.h"

int kl__elector_timings_of(kl__elector_timings *t, const k8slease_elector_options *opts)
{
    int64_t ld = opts->lease_duration_ms ? opts->lease_duration_ms : KL_DEFAULT_LEASE_DURATION_MS;
    int64_t rd = opts->renew_deadline_ms ? opts->renew_deadline_ms : KL_DEFAULT_RENEW_DEADLINE_MS;
    int64_t rp = opts->retry_period_ms ? opts->retry_period_ms : KL_DEFAULT_RETRY_PERIOD_MS;
    const int64_t max = INT64_MAX / KL_NS_PER_MS;

    memset(t, 0, sizeof(*t));
    if (ld < 0 || rd < 0 || rp < 0)
        return kl__error_set(K8SLEASE_EINVAL,
                             "durations must be positive (lease_duration %lld ms, renew_deadline "
                             "%lld ms, retry_period %lld ms)",
                             (long long)ld, (long long)rd, (long long)rp);
    if (ld > max || rd > max || rp > max)
        return kl__error_set(K8SLEASE_EINVAL, "%s %lld ms is too large",
                             ld > max   ? "lease_duration"
                             : rd > max ? "renew_deadline"
                                        : "retry_period",
                             (long long)(ld > max   ? ld
                                         : rd > max ? rd
                                                    : rp));
    t->lease_duration_ms = ld;
    t->renew_deadline_ms = rd;
    t->retry_period_ms = rp;
    t->request_timeout_ms = kl__request_timeout_ms(rd, rp);
    return 0;
}

int kl__elector_new(k8slease_elector **out, size_t size, k8slease_client *client,
                    const kl__elector_backend *backend, const k8slease_elector_options *opts,
                    kl__timer_cb on_timer, const char *what_fmt, ...)
{
    k8slease_elector *e;
    va_list ap;
    int err;

    *out = NULL;
    if (!(e = kl__calloc(1, size)))
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    va_start(ap, what_fmt);
    err = kl__elector_head_vinit(e, client, backend, opts, what_fmt, ap);
    va_end(ap);
    if (err < 0) {
        kl__elector_head_destroy(e);
        kl__free(e);
        return err;
    }
    kl__timer_init(&e->timer, on_timer, e);
    *out = e;
    return 0;
}

void kl__elector_settle(k8slease_elector *e, int64_t leader_deadline, int64_t at)
{
    if (leader_deadline != 0)
        kl__elector_report_deadline(e, leader_deadline);
    if (at == INT64_MAX)
        kl__timer_cancel(e->client->loop, &e->timer);
    else
        kl__timer_arm(e->client->loop, &e->timer, at);
}

/* The last renewal's error, kept for the line of a lost term. Out of
 * memory it is not kept: the line then says less. */
static void keep_renewal_error(k8slease_elector *e, const char *error)
{
    kl__free(e->renewal_error);
    e->renewal_error = error ? kl__strdup(error) : NULL;
}

void kl__elector_count_request(k8slease_elector *e, const kl__request_outcome *o)
{
    k8slease_elector_stats *st = &e->stats;

    if (o->renewing) {
        e->renewal_sent = 0;
        keep_renewal_error(e, o->error);
    }
    pthread_mutex_lock(&e->mu);
    st->requests++;
    if (o->kind == KL_REQUEST_GET)
        st->gets++;
    else if (o->kind == KL_REQUEST_CREATE)
        st->creates++;
    else if (o->kind == KL_REQUEST_UPDATE)
        st->updates++;
    if (o->transport_error)
        st->transport_errors++;
    else if (o->http_status >= 500)
        st->http_5xx++;
    else if (o->http_status >= 400 && o->http_status != 409 && !o->expected)
        st->http_4xx++;
    if (o->conflict)
        st->conflicts++;
    if (o->renewal)
        kl__elector_count_renewal(st, o->started_ns, kl__clock_mono_ns() - o->started_ns);
    else if (o->held)
        st->last_renew_ns = o->started_ns;
    pthread_mutex_unlock(&e->mu);
}

void kl__elector_renewal_sent(k8slease_elector *e, int64_t now)
{
    e->renewal_sent = now;
}

void kl__elector_watch_healthy(k8slease_elector *e, int healthy)
{
    pthread_mutex_lock(&e->mu);
    e->stats.watch_healthy = healthy;
    pthread_mutex_unlock(&e->mu);
}

void kl__elector_watch_events(k8slease_elector *e, uint64_t n)
{
    pthread_mutex_lock(&e->mu);
    e->stats.watch_events += n;
    pthread_mutex_unlock(&e->mu);
}

void kl__elector_candidate_known(k8slease_elector *e, int known)
{
    pthread_mutex_lock(&e->mu);
    e->stats.candidate_known = known;
    pthread_mutex_unlock(&e->mu);
}

/* "10 s", or "1500 ms" when seconds would hide the value. */
static const char *format_ms(int64_t ms, char *buf, size_t size)
{
    if (ms % 1000 == 0)
        snprintf(buf, size, "%lld s", (long long)(ms / 1000));
    else
        snprintf(buf, size, "%lld ms", (long long)ms);
    return buf;
}

/* Why the term was lost, in the backend's words (kl__elector_backend). */
static void lost_reason(const k8slease_elector *e, kl__term_end why, const char *holder,
                        int64_t epoch, char *out, size_t size)
{
    const kl__elector_backend *b = e->backend;
    char deadline[32], waited[32], detail[768];

    switch (why) {
    case KL_TERM_DEADLINE:
        format_ms(e->term_deadline_ms, deadline, sizeof(deadline));
        if (e->renewal_sent)
            format_ms((kl__clock_mono_ns() - e->renewal_sent) / KL_NS_PER_MS, waited,
                      sizeof(waited));
        if (e->renewal_error && e->renewal_sent)
            snprintf(detail, sizeof(detail), "last %s: %s; another, sent %s before, has no answer",
                     b->renewal, e->renewal_error, waited);
        else if (e->renewal_error)
            snprintf(detail, sizeof(detail), "last %s: %s", b->renewal, e->renewal_error);
        else if (e->renewal_sent)
            snprintf(detail, sizeof(detail), "a %s sent %s before has no answer", b->renewal,
                     waited);
        else
            snprintf(detail, sizeof(detail), "no %s attempted", b->renewal);
        snprintf(out, size, "no successful %s within the %s of %s (%s)", b->renewal, b->deadline,
                 deadline, detail);
        break;
    case KL_TERM_TAKEN:
        if (holder && holder[0])
            snprintf(out, size, "\"%s\" holds it now (epoch %lld)", holder, (long long)epoch);
        else
            snprintf(out, size, "it names no holder now (epoch %lld): released by another",
                     (long long)epoch);
        break;
    case KL_TERM_RETAKEN:
        snprintf(out, size, "a new term under our own identity took it (epoch %lld)",
                 (long long)epoch);
        break;
    case KL_TERM_DELETED:
        snprintf(out, size, "%s", b->deleted);
        break;
    case KL_TERM_PREFERRED:
        snprintf(out, size,
                 "the coordinated election's controller prefers another candidate "
                 "(spec.preferredHolder)");
        break;
    case KL_TERM_GONE:
        snprintf(out, size, "the server says the lease is gone (a %s answered TTL 0)", b->renewal);
        break;
    default:
        snprintf(out, size, "stopped");
        break;
    }
}

void kl__elector_report_term_end(k8slease_elector *e, kl__term_end why, const char *holder,
                                 int64_t epoch)
{
    char reason[1024];
    kl__log_about about = e->about;

    if (why != KL_TERM_STOPPED && atomic_load(&e->epoch) >= 0) {
        lost_reason(e, why, holder, epoch, reason, sizeof(reason));
        about.kind = KL_LOG_TERM_LOST;
        kl__log_at(&e->client->log, K8SLEASE_LOG_WARN, &about, "lost the lease (epoch %lld): %s",
                   (long long)atomic_load(&e->epoch), reason);
    }
    e->renewal_sent = 0;
    keep_renewal_error(e, NULL);
    kl__elector_report_stopped(e);
}
