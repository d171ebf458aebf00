/* The elector over the Kubernetes Lease API: drives the pure state machine
 * (elector.c) from the client's loop thread, executes its actions as HTTP
 * requests and callbacks, feeds it what the client's shared watch of the
 * Lease sees (informer.c; not with poll_only), and lets other threads wait
 * on the outcome.
 *
 * Order of what it feeds in: every result (the machine waits for it) and
 * every watch observation whose resourceVersion is newer than the newest
 * state fed in so far, from any source (kl__rv_gate). A stale event, e.g.
 * one delivered after the answer to our own newer write, is dropped; a GET
 * answered with an older state than the watch already showed is answered
 * with that newer state instead. */
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "client.h"
#include "clock.h"
#include "elector.h"
#include "informer.h"
#include "lease.h"

#define DEFAULT_LEASE_DURATION_MS 15000
#define DEFAULT_RENEW_DEADLINE_MS 10000
#define DEFAULT_RETRY_PERIOD_MS   2000

struct k8slease_elector {
    k8slease_client *client;
    char *ns, *name, *identity;
    char *path;                    /* .../leases/NAME */
    char *collection;              /* .../leases */
    char what[300];                /* "lease NS/NAME" for messages */
    k8slease_elector_options opts; /* callbacks and user_data; strings not kept */
    int64_t request_timeout_ms;

    /* Loop thread only. */
    kl__elector sm;
    /* The newest Lease object seen, as JSON text: the base of every UPDATE.
     * Text (re-parsed for each UPDATE) costs about a tenth of a parsed
     * jansson tree, which matters at thousands of elections. */
    char *base;
    int absent;        /* the newest state seen is "no Lease" */
    kl__rv_gate gate;  /* resourceVersion of the newest state fed in */
    kl__sub *sub;      /* the shared watch; NULL with poll_only */
    kl__http_req *req; /* request in flight, if any */
    kl__elector_req req_kind;
    int64_t req_started; /* monotonic ns */
    int req_renewal;     /* the UPDATE in flight renews our term */
    kl__timer timer;
    kl__timer failed; /* answers a request that could not start */

    /* Shared with the threads that wait. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int elected;     /* STARTED happened */
    int done;        /* DONE happened */
    int stop_posted; /* a STOP was sent to the loop */
    k8slease_elector_stats stats;
    _Atomic int64_t epoch;
    _Atomic int64_t leader_deadline; /* monotonic ns while leader, else 0 */
};

static void run(k8slease_elector *e, const kl__elector_event *ev);

static void on_timer(kl__timer *t, void *arg)
{
    kl__elector_event ev = {.type = KL_EV_TIMER};

    (void)t;
    run(arg, &ev);
}

static void set_base(k8slease_elector *e, char *json)
{
    kl__free(e->base);
    e->base = json;
    e->absent = 0;
}

static void set_absent(k8slease_elector *e)
{
    kl__free(e->base);
    e->base = NULL;
    e->absent = 1;
}

static void count(k8slease_elector *e, const kl__http_result *res, int status)
{
    static const int64_t bounds_ms[K8SLEASE_LATENCY_BUCKETS] = K8SLEASE_LATENCY_BOUNDS_MS;
    k8slease_elector_stats *st = &e->stats;
    int64_t took = kl__clock_mono_ns() - e->req_started;
    int b = 0;

    pthread_mutex_lock(&e->mu);
    st->requests++;
    if (e->req_kind == KL_REQ_GET)
        st->gets++;
    else if (e->req_kind == KL_REQ_CREATE)
        st->creates++;
    else
        st->updates++;
    if (res->err)
        st->transport_errors++;
    else if (res->status == 409)
        st->conflicts++;
    else if (res->status >= 500)
        st->http_5xx++;
    else if (res->status >= 400 && !(res->status == 404 && e->req_kind == KL_REQ_GET))
        st->http_4xx++;
    if (status == 0 && e->req_kind != KL_REQ_GET)
        st->last_renew_ns = e->req_started;
    if (status == 0 && e->req_renewal) {
        st->renewals++;
        while (b < K8SLEASE_LATENCY_BUCKETS - 1 && took > bounds_ms[b] * KL_NS_PER_MS)
            b++;
        st->renew_latency_bucket[b]++;
        st->renew_latency_count++;
        st->renew_latency_sum_s += (double)took / KL_NS_PER_S;
    }
    pthread_mutex_unlock(&e->mu);
}

/* A GET answered with an older state than the watch already showed (the
 * server read it before the change the event reported): answer with the
 * newer state instead, so the machine never steps back. */
static int newer_than_get(k8slease_elector *e, kl__lease *got, kl__lease **newer,
                          kl__elector_event *ev)
{
    if (e->req_kind != KL_REQ_GET || !kl__rv_gate_older(&e->gate, got->rv))
        return 0;
    if (e->absent) {
        ev->status = K8SLEASE_ENOTFOUND;
        ev->spec = NULL;
    } else if (!e->base || kl__lease_parse(newer, e->base, strlen(e->base)) < 0) {
        return 0; /* out of memory: the older state is still a state */
    } else {
        ev->spec = &(*newer)->spec;
    }
    kl__log_printf(&e->client->log, K8SLEASE_LOG_DEBUG,
                   "get %s: rv %s is older than the watch's: using that", e->what, got->rv);
    return 1;
}

static void on_result(const kl__http_result *res, void *arg)
{
    k8slease_elector *e = arg;
    kl__elector_event ev = {.type = KL_EV_RESULT};
    kl__lease *lease = NULL, *newer = NULL;
    char what[400];
    const char *verb = e->req_kind == KL_REQ_GET      ? "get"
                       : e->req_kind == KL_REQ_CREATE ? "create"
                                                      : "update";

    e->req = NULL;
    snprintf(what, sizeof(what), "%s %s", verb, e->what);
    ev.status = kl__lease_result(res, what, &lease);
    count(e, res, ev.status);
    if (ev.status == 0 && newer_than_get(e, lease, &newer, &ev)) {
        /* ev now carries the newer state */
    } else if (ev.status == 0) {
        /* A write answered after an event of a later change (someone else's
         * write) is fed in, the machine waits for it, but the base stays the
         * newer object. */
        if (!kl__rv_gate_older(&e->gate, lease->rv)) {
            char *json = kl__strndup(res->body, res->body_len);

            /* Out of memory: no base, so the next UPDATE fails and the
             * machine reads the Lease again. */
            if (json)
                set_base(e, json);
            else
                set_absent(e);
            kl__rv_gate_set(&e->gate, lease->rv);
        }
        ev.spec = &lease->spec;
        kl__log_printf(&e->client->log, K8SLEASE_LOG_DEBUG, "%s: ok, holder \"%s\" rv %s", what,
                       lease->spec.holder ? lease->spec.holder : "", lease->rv);
    } else if (ev.status == K8SLEASE_ENOTFOUND && e->req_kind == KL_REQ_GET) {
        set_absent(e);
        kl__log_printf(&e->client->log, K8SLEASE_LOG_DEBUG, "%s: not found", what);
    } else {
        kl__log_printf(&e->client->log,
                       ev.status == K8SLEASE_ECONFLICT ? K8SLEASE_LOG_INFO : K8SLEASE_LOG_WARN,
                       "%s", kl__error_get());
    }
    run(e, &ev);
    kl__lease_free(newer);
    kl__lease_free(lease);
}

/* Dumps through kl__buf so that the text is freed with kl__free whatever
 * allocator jansson was given. */
static int dump_cb(const char *buf, size_t size, void *data)
{
    return kl__buf_append(data, buf, size) < 0 ? -1 : 0;
}

static char *lease_json(const kl__lease *lease)
{
    kl__buf b = {0};

    if (json_dump_callback(lease->root, dump_cb, &b, JSON_COMPACT | JSON_PRESERVE_ORDER) < 0) {
        kl__buf_free(&b);
        return NULL;
    }
    return b.data;
}

static void on_watch(const kl__sub_event *sev, void *arg)
{
    k8slease_elector *e = arg;
    kl__elector_event ev = {.type = KL_EV_OBSERVE};

    if (sev->type == KL_SUB_HEALTH) {
        pthread_mutex_lock(&e->mu);
        e->stats.watch_healthy = sev->healthy;
        pthread_mutex_unlock(&e->mu);
        ev.type = KL_EV_WATCH;
        ev.healthy = sev->healthy;
        run(e, &ev);
        return;
    }
    if (!kl__rv_gate_pass(&e->gate, sev->rv))
        return;
    if (sev->type == KL_SUB_LEASE) {
        char *json = lease_json(sev->lease);

        /* Without the text the state cannot be an UPDATE's base: forget
         * it; the next UPDATE fails and the machine reads the Lease again. */
        if (json)
            set_base(e, json);
        else
            set_absent(e);
        ev.spec = &sev->lease->spec;
        kl__log_printf(&e->client->log, K8SLEASE_LOG_DEBUG, "%s: watch: holder \"%s\" rv %s",
                       e->what, sev->lease->spec.holder ? sev->lease->spec.holder : "", sev->rv);
    } else {
        set_absent(e);
        ev.status = K8SLEASE_ENOTFOUND;
        kl__log_printf(&e->client->log, K8SLEASE_LOG_DEBUG, "%s: watch: no lease (rv %s)", e->what,
                       sev->rv);
    }
    pthread_mutex_lock(&e->mu);
    e->stats.watch_events++;
    pthread_mutex_unlock(&e->mu);
    run(e, &ev);
}

/* A request that could not even start is answered like a failed one, on a
 * later loop turn so the state machine is never re-entered. */
static void on_failed(kl__timer *t, void *arg)
{
    kl__elector_event ev = {.type = KL_EV_RESULT, .status = K8SLEASE_ENOMEM};

    (void)t;
    run(arg, &ev);
}

/* Body of an UPDATE over the newest object seen; NULL on ENOMEM, or when
 * there is none (the machine asks for an UPDATE only after a result or an
 * observation gave it one; without it there is nothing safe to PUT). */
static char *update_body(const k8slease_elector *e, const kl__lease_spec *spec)
{
    kl__lease *base = NULL;
    char *body;

    if (!e->base || kl__lease_parse(&base, e->base, strlen(e->base)) < 0)
        return NULL;
    body = kl__lease_encode_update(base, spec);
    kl__lease_free(base);
    return body;
}

static void start_request(k8slease_elector *e, const kl__elector_action *a)
{
    kl__http_opts req = {0};
    char *body = NULL;

    req.timeout_ms = e->request_timeout_ms;
    e->req_started = kl__clock_mono_ns();
    e->req_renewal = a->type == KL_ACT_UPDATE && e->sm.state == KL_EL_LEADING;
    if (a->type == KL_ACT_GET && e->sm.state == KL_EL_LEADING) {
        pthread_mutex_lock(&e->mu);
        e->stats.slow_path++;
        pthread_mutex_unlock(&e->mu);
    }
    switch (a->type) {
    case KL_ACT_GET:
        req.method = "GET";
        req.path = e->path;
        e->req_kind = KL_REQ_GET;
        break;
    case KL_ACT_CREATE:
        req.method = "POST";
        req.path = e->collection;
        body = kl__lease_encode_create(e->ns, e->name, &a->spec);
        e->req_kind = KL_REQ_CREATE;
        break;
    default:
        req.method = "PUT";
        req.path = e->path;
        body = update_body(e, &a->spec);
        e->req_kind = KL_REQ_UPDATE;
        break;
    }
    if (a->type != KL_ACT_GET) {
        if (!body)
            goto fail;
        req.content_type = "application/json";
        req.body = body;
        req.body_len = strlen(body);
    }
    e->req = kl__http_start(e->client->loop, &req, on_result, e);
    kl__free(body);
    if (e->req)
        return;
fail:
    kl__log_printf(&e->client->log, K8SLEASE_LOG_ERROR, "%s: cannot start request: out of memory",
                   e->what);
    /* A timer of our own (no allocation) answers on the next loop turn. */
    kl__timer_arm(e->client->loop, &e->failed, kl__loop_now(e->client->loop));
}

static void finish(k8slease_elector *e)
{
    kl__timer_cancel(e->client->loop, &e->timer);
    kl__timer_cancel(e->client->loop, &e->failed);
    kl__http_cancel(e->client->loop, e->req);
    e->req = NULL;
    kl__sub_stop(e->sub);
    e->sub = NULL;
    atomic_store(&e->leader_deadline, 0);
    pthread_mutex_lock(&e->mu);
    e->done = 1;
    e->stats.watch_healthy = 0;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

static void exec_action(k8slease_elector *e, const kl__elector_action *a)
{
    const kl__log *log = &e->client->log;

    switch (a->type) {
    case KL_ACT_GET:
    case KL_ACT_CREATE:
    case KL_ACT_UPDATE:
        start_request(e, a);
        break;
    case KL_ACT_STARTED:
        kl__log_printf(log, K8SLEASE_LOG_INFO, "%s: elected, epoch %lld", e->what,
                       (long long)a->epoch);
        atomic_store(&e->epoch, a->epoch);
        atomic_store(&e->leader_deadline, kl__elector_leader_deadline(&e->sm));
        /* The callback first: wait_elected returns once it has run. */
        if (e->opts.on_started_leading)
            e->opts.on_started_leading(a->epoch, e->opts.user_data);
        pthread_mutex_lock(&e->mu);
        e->elected = 1;
        e->stats.terms++;
        pthread_cond_broadcast(&e->cv);
        pthread_mutex_unlock(&e->mu);
        break;
    case KL_ACT_STOPPED:
        kl__log_printf(log, K8SLEASE_LOG_INFO, "%s: stopped leading", e->what);
        atomic_store(&e->leader_deadline, 0);
        if (e->opts.on_stopped_leading)
            e->opts.on_stopped_leading(e->opts.user_data);
        break;
    case KL_ACT_NEW_LEADER:
        kl__log_printf(log, K8SLEASE_LOG_INFO, "%s: leader is \"%s\" (epoch %lld)", e->what,
                       a->identity, (long long)a->epoch);
        if (e->opts.on_new_leader)
            e->opts.on_new_leader(a->identity, a->epoch, e->opts.user_data);
        break;
    case KL_ACT_DONE:
        kl__log_printf(log, K8SLEASE_LOG_DEBUG, "%s: election over", e->what);
        finish(e);
        break;
    }
}

/* Feed one event to the state machine and carry out what it says. */
static void run(k8slease_elector *e, const kl__elector_event *ev)
{
    kl__elector_actions acts;
    int64_t at;

    if (e->sm.state == KL_EL_DONE)
        return;
    kl__elector_step(&e->sm, ev, kl__clock_mono_ns(), kl__clock_wall_us(), &acts);
    for (int i = 0; i < acts.n; i++)
        exec_action(e, &acts.a[i]);
    if (e->sm.state == KL_EL_DONE)
        return;
    if (e->sm.state == KL_EL_LEADING)
        atomic_store(&e->leader_deadline, kl__elector_leader_deadline(&e->sm));
    at = kl__elector_timer(&e->sm);
    if (at == INT64_MAX)
        kl__timer_cancel(e->client->loop, &e->timer);
    else
        kl__timer_arm(e->client->loop, &e->timer, at);
}

static void start_on_loop(void *arg)
{
    k8slease_elector *e = arg;
    kl__elector_event ev = {.type = KL_EV_START};

    kl__loop_set_dead_timeout(e->client->loop, e->sm.cfg.renew_deadline_ns / 2 / KL_NS_PER_MS);
    if (!e->opts.poll_only && e->sm.state == KL_EL_IDLE &&
        !(e->sub = kl__sub_start(e->client->informer, e->ns, e->name, e->sm.cfg.retry_period_ns,
                                 on_watch, e)))
        kl__log_printf(&e->client->log, K8SLEASE_LOG_WARN, "%s: %s; polling without a watch",
                       e->what, kl__error_get());
    run(e, &ev);
    if (kl__sub_healthy(e->sub)) {
        kl__sub_event healthy = {.type = KL_SUB_HEALTH, .healthy = 1};

        on_watch(&healthy, e);
    }
}

static void stop_on_loop(void *arg, int release)
{
    kl__elector_event ev = {.type = KL_EV_STOP, .release = release};

    run(arg, &ev);
}

static void stop_release(void *arg)
{
    stop_on_loop(arg, 1);
}

static void stop_keep(void *arg)
{
    stop_on_loop(arg, 0);
}

static uint64_t make_seed(const void *p)
{
    uint64_t x = (uint64_t)kl__clock_mono_ns() ^ ((uint64_t)getpid() << 32) ^ (uintptr_t)p;

    /* One splitmix64 step spreads the bits of this weak entropy. */
    return kl__splitmix64(&x);
}

static void elector_destroy(k8slease_elector *e)
{
    if (!e)
        return;
    kl__free(e->base);
    kl__free(e->ns);
    kl__free(e->name);
    kl__free(e->identity);
    kl__free(e->path);
    kl__free(e->collection);
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    kl__free(e);
}

K8SLEASE_API int k8slease_elector_start(k8slease_elector **out, k8slease_client *client,
                                        const k8slease_elector_options *opts)
{
    kl__elector_config cfg = {0};
    pthread_condattr_t attr;
    k8slease_elector *e = NULL;
    const char *ns;
    int64_t ld, rd, rp;
    int err;

    if (!out || !client || !opts)
        return kl__error_set(K8SLEASE_EINVAL,
                             "k8slease_elector_start: out, client or opts is NULL");
    *out = NULL;
    if (opts->version != K8SLEASE_ELECTOR_OPTIONS_VERSION)
        return kl__error_set(K8SLEASE_EINVAL,
                             "k8slease_elector_options.version is %u, expected %u (use "
                             "K8SLEASE_ELECTOR_OPTIONS_INIT)",
                             opts->version, K8SLEASE_ELECTOR_OPTIONS_VERSION);
    ns = opts->ns ? opts->ns : client->cfg->ns;
    if ((err = kl__check_namespace(ns)) < 0 || (err = kl__check_name("lease name", opts->name)) < 0)
        return err;
    if (!opts->identity)
        return kl__error_set(K8SLEASE_EINVAL, "identity is NULL");
    ld = opts->lease_duration_ms ? opts->lease_duration_ms : DEFAULT_LEASE_DURATION_MS;
    rd = opts->renew_deadline_ms ? opts->renew_deadline_ms : DEFAULT_RENEW_DEADLINE_MS;
    rp = opts->retry_period_ms ? opts->retry_period_ms : DEFAULT_RETRY_PERIOD_MS;
    if (ld < 0 || rd < 0 || rp < 0 || ld > INT64_MAX / KL_NS_PER_MS)
        return kl__error_set(K8SLEASE_EINVAL,
                             "durations must be positive (lease_duration %lld ms, renew_deadline "
                             "%lld ms, retry_period %lld ms)",
                             (long long)ld, (long long)rd, (long long)rp);

    if (!(e = kl__calloc(1, sizeof(*e))))
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    pthread_mutex_init(&e->mu, NULL);
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&e->cv, &attr);
    pthread_condattr_destroy(&attr);
    e->client = client;
    e->stats.version = K8SLEASE_ELECTOR_STATS_VERSION;
    e->opts = *opts;
    e->opts.ns = e->opts.name = e->opts.identity = NULL;
    atomic_init(&e->epoch, -1);
    atomic_init(&e->leader_deadline, 0);
    e->ns = kl__strdup(ns);
    e->name = kl__strdup(opts->name);
    e->identity = kl__strdup(opts->identity);
    e->path = kl__lease_path(ns, opts->name);
    e->collection = kl__lease_path(ns, NULL);
    if (!e->ns || !e->name || !e->identity || !e->path || !e->collection) {
        err = kl__error_set(K8SLEASE_ENOMEM, "out of memory");
        goto out;
    }
    snprintf(e->what, sizeof(e->what), "lease %s/%s", ns, opts->name);
    /* As client-go: a request may take at most half the renew deadline, so
     * one slow request cannot eat the whole budget; but at least 1 s. */
    e->request_timeout_ms = rd / 2 > 1000 ? rd / 2 : 1000;

    cfg.identity = e->identity;
    cfg.lease_duration_ns = ld * KL_NS_PER_MS;
    cfg.renew_deadline_ns = rd * KL_NS_PER_MS;
    cfg.retry_period_ns = rp * KL_NS_PER_MS;
    cfg.release_on_cancel = opts->release_on_cancel;
    cfg.seed = make_seed(e);
    cfg.poll_only = opts->poll_only != 0;
    if ((err = kl__elector_init(&e->sm, &cfg)) < 0)
        goto out;
    kl__timer_init(&e->timer, on_timer, e);
    kl__timer_init(&e->failed, on_failed, e);
    if ((err = kl__loop_post(client->loop, start_on_loop, e)) < 0) {
        err = kl__error_set(K8SLEASE_ENOMEM, "out of memory");
        goto out;
    }
    *out = e;
    e = NULL;
out:
    elector_destroy(e);
    return err;
}

/* Absolute CLOCK_MONOTONIC time timeout_ms from now. */
static struct timespec deadline_in(int64_t timeout_ms)
{
    int64_t at = kl__clock_mono_ns() + timeout_ms * KL_NS_PER_MS;
    struct timespec ts = {.tv_sec = at / KL_NS_PER_S, .tv_nsec = at % KL_NS_PER_S};

    return ts;
}

/* Wait (mu held) until *flag or done; 0, or K8SLEASE_ETIMEOUT. */
static int wait_flag(k8slease_elector *e, const int *flag, int64_t timeout_ms)
{
    struct timespec until = deadline_in(timeout_ms < 0 ? 0 : timeout_ms);

    while (!*flag && !e->done) {
        if (timeout_ms < 0)
            pthread_cond_wait(&e->cv, &e->mu);
        else if (pthread_cond_timedwait(&e->cv, &e->mu, &until) != 0 && !*flag && !e->done)
            return K8SLEASE_ETIMEOUT;
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
    err = wait_flag(e, &e->elected, timeout_ms);
    if (err == 0 && e->done)
        err = kl__error_set(K8SLEASE_ESTATE, "%s: election over %s", e->what,
                            e->elected ? "(leadership already lost)" : "without becoming leader");
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
    return e ? atomic_load(&((k8slease_elector *)e)->leader_deadline) : 0;
}

K8SLEASE_API int64_t k8slease_elector_epoch(const k8slease_elector *e)
{
    return e ? atomic_load(&((k8slease_elector *)e)->epoch) : -1;
}

K8SLEASE_API int k8slease_elector_wait_lost(k8slease_elector *e, int64_t timeout_ms)
{
    static const int never = 0;
    int err;

    if (!e)
        return kl__error_set(K8SLEASE_EINVAL, "k8slease_elector_wait_lost: elector is NULL");
    if (timeout_ms != 0 && kl__loop_on_thread(e->client->loop))
        return kl__error_set(K8SLEASE_ESTATE, "k8slease_elector_wait_lost: called from a callback");
    pthread_mutex_lock(&e->mu);
    err = wait_flag(e, &never, timeout_ms);
    pthread_mutex_unlock(&e->mu);
    if (err == K8SLEASE_ETIMEOUT)
        kl__error_set(err, "%s: election still running after %lld ms", e->what,
                      (long long)timeout_ms);
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
    /* A caller built against version 1 has the shorter struct. */
    if (stats->version == 1) {
        memcpy(stats, &e->stats, offsetof(k8slease_elector_stats, gets));
        stats->version = 1;
    } else {
        *stats = e->stats;
    }
    pthread_mutex_unlock(&m->mu);
    return 0;
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
    return k8slease_elector_wait_lost(e, -1);
}

static void detach(void *arg)
{
    k8slease_elector *e = arg;

    kl__timer_cancel(e->client->loop, &e->timer);
    kl__timer_cancel(e->client->loop, &e->failed);
    kl__http_cancel(e->client->loop, e->req);
    e->req = NULL;
    kl__sub_stop(e->sub);
    e->sub = NULL;
}

K8SLEASE_API void k8slease_elector_free(k8slease_elector *e)
{
    if (!e)
        return;
    if (k8slease_elector_stop(e, -1) < 0) {
        /* Out of memory posting the stop: end it without releasing. */
        kl__loop_call(e->client->loop, detach, e);
    }
    /* FIFO: once this returns, no closure of ours is left in the queue. */
    kl__loop_call(e->client->loop, detach, e);
    elector_destroy(e);
}
