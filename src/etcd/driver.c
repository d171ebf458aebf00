/* The elector over etcd: drives the pure election machine
 * (etcd/election.c) from the client's loop thread. Each of the machine's
 * three channels has at most one call or watch stream in flight on the
 * client's etcd conn (etcd/conn.c); answers are decoded here and fed back
 * as RESULT events, watch messages as WATCH events, and the machine's
 * callbacks become the generic elector's reports (core/elector.c).
 *
 * Watches are one HTTP stream each: etcd 3.4's gateway keeps a watch
 * stream open after the request body ends, so the only way to end one is
 * to close it (CANCEL). */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/client.h"
#include "core/clock.h"
#include "core/driver.h"
#include "core/elector.h"
#include "core/timings.h"
#include "etcd/client.h"
#include "etcd/election.h"

typedef struct etcd_elector etcd_elector;

typedef struct channel {
    etcd_elector *e;
    kl__etcd_channel id;
    kl__etcd_call *call;     /* the request in flight */
    kl__etcd_stream *stream; /* or the watch */
    kl__etcd_req kind;       /* what is in flight: KL_EE_REQ_NONE when nothing */
    int64_t started;         /* monotonic ns */
    int renewal;             /* a KEEPALIVE sent while leading */
    kl__timer failed;        /* answers a request that could not start */
    /* A release request held until the threads that waited in wait_lost
     * when the term ended have returned (kl__elector_hold_release). */
    kl__etcd_election_action deferred;
    int have_deferred;
} channel;

struct etcd_elector {
    k8slease_elector pub; /* first: the handle the caller holds */
    int64_t request_timeout_ms;
    int64_t ttl_ms;
    kl__etcd_stream_opts sopts; /* the watches' liveness bound */

    /* Loop thread only. */
    kl__etcd_election sm;
    channel ch[KL_EE_CH_COUNT];
};

static void run(etcd_elector *e, const kl__etcd_election_event *ev);

static const char *req_name(kl__etcd_req r)
{
    static const char *const names[] = {
        "none",         "grant", "keepalive",  "create key", "proclaim", "range predecessor",
        "range leader", "watch", "delete key", "revoke"};

    return (unsigned)r < KL_ARRAY_LEN(names) ? names[r] : "?";
}

static kl__etcd_req req_of(kl__etcd_election_action_type t)
{
    switch (t) {
    case KL_EE_ACT_GRANT:
        return KL_EE_REQ_GRANT;
    case KL_EE_ACT_KEEPALIVE:
        return KL_EE_REQ_KEEPALIVE;
    case KL_EE_ACT_TXN_CREATE:
        return KL_EE_REQ_TXN_CREATE;
    case KL_EE_ACT_PROCLAIM:
        return KL_EE_REQ_PROCLAIM;
    case KL_EE_ACT_RANGE_PREDECESSOR:
        return KL_EE_REQ_RANGE_PREDECESSOR;
    case KL_EE_ACT_RANGE_LEADER:
        return KL_EE_REQ_RANGE_LEADER;
    case KL_EE_ACT_WATCH_KEY:
        return KL_EE_REQ_WATCH;
    case KL_EE_ACT_DELETE_KEY:
        return KL_EE_REQ_DELETE_KEY;
    case KL_EE_ACT_REVOKE:
        return KL_EE_REQ_REVOKE;
    default:
        return KL_EE_REQ_NONE;
    }
}

static const kl__log *elog(const etcd_elector *e)
{
    return &e->pub.client->log;
}

static void cancel_channel(channel *ch)
{
    kl__etcd_call_cancel(ch->call);
    ch->call = NULL;
    kl__etcd_stream_cancel(ch->stream);
    ch->stream = NULL;
    kl__timer_cancel(ch->e->pub.client->loop, &ch->failed);
    if (ch->id == KL_EE_CH_OBSERVE && ch->kind == KL_EE_REQ_WATCH)
        kl__elector_watch_healthy(&ch->e->pub, 0);
    ch->kind = KL_EE_REQ_NONE;
    ch->have_deferred = 0;
}

/* ------------------------------------------------------------------------ */
/* Results                                                                  */
/* ------------------------------------------------------------------------ */

/* Stats, and a keepalive's outcome for the line of a lost term. */
static void count(etcd_elector *e, const channel *ch, kl__etcd_req kind, const kl__etcd_result *res,
                  int status, const kl__etcd_lease *lease, const char *message)
{
    kl__request_outcome o = {0};
    int renews =
        status == 0 && (kind == KL_EE_REQ_GRANT || kind == KL_EE_REQ_KEEPALIVE) && lease->ttl > 0;

    o.kind =
        kind == KL_EE_REQ_RANGE_PREDECESSOR || kind == KL_EE_REQ_RANGE_LEADER ? KL_REQUEST_GET
        : kind == KL_EE_REQ_TXN_CREATE || kind == KL_EE_REQ_PROCLAIM || kind == KL_EE_REQ_DELETE_KEY
            ? KL_REQUEST_CREATE
        : kind == KL_EE_REQ_KEEPALIVE ? KL_REQUEST_UPDATE
                                      : KL_REQUEST_OTHER;
    o.started_ns = ch->started;
    o.transport_error = res->err && res->status == 0 && res->err != K8SLEASE_ENOMEM;
    o.http_status = res->status;
    /* a lease already expired is what a REVOKE expects, as 404 on a GET */
    o.expected = kind == KL_EE_REQ_REVOKE && status == K8SLEASE_ENOTFOUND;
    o.conflict = status == K8SLEASE_ECONFLICT;
    o.renewing = ch->renewal;
    o.held = renews;
    o.renewal = renews && ch->renewal;
    o.error = status < 0 ? message : NULL;
    kl__elector_count_request(&e->pub, &o);
}

static void log_ok(etcd_elector *e, kl__etcd_req kind, const kl__etcd_lease *l,
                   const kl__etcd_txn *t, const kl__etcd_range *r)
{
    const char *what = e->pub.what, *name = req_name(kind);

    switch (kind) {
    case KL_EE_REQ_GRANT:
    case KL_EE_REQ_KEEPALIVE:
        kl__log_printf(elog(e), K8SLEASE_LOG_DEBUG, "%s: %s: lease %llx TTL %lld s", what, name,
                       (unsigned long long)l->id, (long long)l->ttl);
        break;
    case KL_EE_REQ_TXN_CREATE:
    case KL_EE_REQ_PROCLAIM:
    case KL_EE_REQ_DELETE_KEY:
        kl__log_printf(elog(e), K8SLEASE_LOG_DEBUG, "%s: %s: %s at revision %lld", what, name,
                       t->succeeded ? "done" : "compare failed", (long long)t->revision);
        break;
    case KL_EE_REQ_RANGE_PREDECESSOR:
    case KL_EE_REQ_RANGE_LEADER:
        kl__log_printf(elog(e), K8SLEASE_LOG_DEBUG,
                       "%s: %s: %zu key%s at revision %lld, first created at %lld", what, name,
                       r->n_kvs, r->n_kvs == 1 ? "" : "s", (long long)r->revision,
                       (long long)(r->n_kvs ? r->kvs[0].create_revision : 0));
        break;
    default:
        kl__log_printf(elog(e), K8SLEASE_LOG_DEBUG, "%s: %s: done", what, name);
        break;
    }
}

static void on_result(const kl__etcd_result *res, void *arg)
{
    channel *ch = arg;
    etcd_elector *e = ch->e;
    kl__etcd_election_event ev = {.type = KL_EE_EV_RESULT, .channel = ch->id};
    kl__etcd_lease lease = {0};
    kl__etcd_txn txn = {0};
    kl__etcd_range range = {0};
    kl__etcd_req kind = ch->kind;
    const char *errmsg = res->errmsg;
    char buf[1024];
    int64_t rev = 0;
    int status = res->err;

    ch->call = NULL;
    ch->kind = KL_EE_REQ_NONE;
    if (status == 0) {
        switch (kind) {
        case KL_EE_REQ_GRANT:
            status = kl__etcd_parse_grant(&lease, res->body, res->body_len);
            ev.lease = &lease;
            break;
        case KL_EE_REQ_KEEPALIVE:
            status = kl__etcd_parse_keepalive(&lease, res->body, res->body_len);
            ev.lease = &lease;
            break;
        case KL_EE_REQ_TXN_CREATE:
        case KL_EE_REQ_PROCLAIM:
        case KL_EE_REQ_DELETE_KEY:
            status = kl__etcd_parse_txn(&txn, res->body, res->body_len);
            ev.txn = &txn;
            break;
        case KL_EE_REQ_RANGE_PREDECESSOR:
        case KL_EE_REQ_RANGE_LEADER:
            status = kl__etcd_parse_range(&range, res->body, res->body_len);
            ev.range = &range;
            break;
        default:
            status = kl__etcd_parse_header(&rev, res->body, res->body_len);
            break;
        }
        if (status < 0) {
            snprintf(buf, sizeof(buf), "etcd %s: %s",
                     kl__etcd_conn_endpoint(kl__etcd_of(e->pub.client)), kl__error_get());
            errmsg = buf;
        }
    }
    ev.status = status;
    count(e, ch, kind, res, status, &lease, errmsg);
    if (status == 0)
        log_ok(e, kind, &lease, &txn, &range);
    else
        kl__log_printf(elog(e),
                       kind == KL_EE_REQ_REVOKE && status == K8SLEASE_ENOTFOUND ? K8SLEASE_LOG_DEBUG
                                                                                : K8SLEASE_LOG_WARN,
                       "%s: %s: %s", e->pub.what, req_name(kind), errmsg);
    run(e, &ev);
    kl__etcd_range_clear(&range);
    kl__etcd_txn_clear(&txn);
}

static void on_watch_msg(const kl__etcd_watch_msg *m, void *arg)
{
    channel *ch = arg;
    etcd_elector *e = ch->e;
    kl__etcd_election_event ev = {.type = KL_EE_EV_WATCH, .channel = ch->id, .watch = m};

    if (m->n_events > 0)
        kl__elector_watch_events(&e->pub, m->n_events);
    if (ch->id == KL_EE_CH_OBSERVE && (m->created || m->canceled))
        kl__elector_watch_healthy(&e->pub, m->created && !m->canceled);
    if (m->canceled)
        kl__log_printf(elog(e), K8SLEASE_LOG_INFO, "%s: %s watch cancelled by etcd (%s)",
                       e->pub.what, ch->id == KL_EE_CH_CAMPAIGN ? "predecessor" : "leader",
                       m->compact_revision > 0 ? "compacted" : m->cancel_reason);
    else
        kl__log_printf(elog(e), K8SLEASE_LOG_DEBUG, "%s: %s watch: %s%zu event%s at revision %lld",
                       e->pub.what, ch->id == KL_EE_CH_CAMPAIGN ? "predecessor" : "leader",
                       m->created ? "created, " : "", m->n_events, m->n_events == 1 ? "" : "s",
                       (long long)m->revision);
    run(e, &ev);
}

static void on_watch_end(const kl__etcd_result *res, void *arg)
{
    channel *ch = arg;
    etcd_elector *e = ch->e;
    kl__etcd_election_event ev = {.type = KL_EE_EV_RESULT, .channel = ch->id, .status = res->err};

    ch->stream = NULL;
    ch->kind = KL_EE_REQ_NONE;
    if (ch->id == KL_EE_CH_OBSERVE)
        kl__elector_watch_healthy(&e->pub, 0);
    kl__log_printf(elog(e), res->err ? K8SLEASE_LOG_WARN : K8SLEASE_LOG_INFO,
                   "%s: %s watch ended%s%s", e->pub.what,
                   ch->id == KL_EE_CH_CAMPAIGN ? "predecessor" : "leader", res->err ? ": " : "",
                   res->errmsg);
    run(e, &ev);
}

/* A request that could not even start is answered like a failed one, on a
 * later loop turn so the state machine is never re-entered. */
static void on_failed(kl__timer *t, void *arg)
{
    channel *ch = arg;
    kl__etcd_election_event ev = {
        .type = KL_EE_EV_RESULT, .channel = ch->id, .status = K8SLEASE_ENOMEM};

    (void)t;
    ch->kind = KL_EE_REQ_NONE;
    run(ch->e, &ev);
}

/* ------------------------------------------------------------------------ */
/* Actions                                                                  */
/* ------------------------------------------------------------------------ */

static char *encode_range(const kl__etcd_election_action *a)
{
    kl__etcd_range_req rr = {0};

    rr.key = a->key;
    rr.key_len = a->key_len;
    rr.range_end = a->range_end;
    rr.range_end_len = a->range_end_len;
    rr.limit = a->limit;
    rr.sort_target = KL_ETCD_SORT_CREATE;
    if (a->type == KL_EE_ACT_RANGE_PREDECESSOR) {
        rr.sort_order = KL_ETCD_SORT_DESCEND;
        rr.max_create_revision = a->revision;
    } else {
        rr.sort_order = KL_ETCD_SORT_ASCEND;
    }
    return kl__etcd_encode_range(&rr);
}

static void start_request(etcd_elector *e, const kl__etcd_election_action *a)
{
    channel *ch = &e->ch[a->channel];
    kl__etcd_call_opts o = {0};
    kl__etcd_watch_req wr = {0};
    char *body = NULL;

    cancel_channel(ch); /* the machine cancels first; this only guards */
    ch->kind = req_of(a->type);
    ch->started = kl__clock_mono_ns();
    ch->renewal = a->type == KL_EE_ACT_KEEPALIVE && e->sm.state == KL_EE_LEADING;
    if (ch->renewal)
        kl__elector_renewal_sent(&e->pub, ch->started);
    switch (a->type) {
    case KL_EE_ACT_GRANT:
        o.path = "/v3/lease/grant";
        body = kl__etcd_encode_grant(a->ttl_s, 0);
        break;
    case KL_EE_ACT_KEEPALIVE:
        o.path = "/v3/lease/keepalive";
        body = kl__etcd_encode_lease_id(a->lease_id);
        break;
    case KL_EE_ACT_REVOKE:
        o.path = "/v3/lease/revoke";
        body = kl__etcd_encode_lease_id(a->lease_id);
        break;
    case KL_EE_ACT_TXN_CREATE:
        o.path = "/v3/kv/txn";
        body = kl__etcd_encode_txn_create(a->key, a->key_len, a->value, a->value_len, a->lease_id);
        break;
    case KL_EE_ACT_PROCLAIM:
        o.path = "/v3/kv/txn";
        body = kl__etcd_encode_txn_proclaim(a->key, a->key_len, a->value, a->value_len, a->lease_id,
                                            a->revision);
        break;
    case KL_EE_ACT_DELETE_KEY:
        o.path = "/v3/kv/txn";
        body = kl__etcd_encode_txn_delete(a->key, a->key_len, a->revision);
        break;
    case KL_EE_ACT_RANGE_PREDECESSOR:
    case KL_EE_ACT_RANGE_LEADER:
        o.path = "/v3/kv/range";
        body = encode_range(a);
        break;
    case KL_EE_ACT_WATCH_KEY:
        wr.key = a->key;
        wr.key_len = a->key_len;
        wr.start_revision = a->revision;
        break;
    default:
        return;
    }
    kl__log_printf(
        elog(e), K8SLEASE_LOG_DEBUG, "%s: %s (%s channel; lease %llx, key \"%.*s\", revision %lld)",
        e->pub.what, req_name(ch->kind),
        a->channel == KL_EE_CH_CAMPAIGN    ? "campaign"
        : a->channel == KL_EE_CH_KEEPALIVE ? "keepalive"
                                           : "observe",
        (unsigned long long)(a->lease_id ? a->lease_id : e->sm.lease_id),
        (int)(a->key_len > 200 ? 200 : a->key_len), a->key ? a->key : "", (long long)a->revision);
    if (a->type == KL_EE_ACT_WATCH_KEY) {
        if ((ch->stream = kl__etcd_stream_start(kl__etcd_of(e->pub.client), &wr, &e->sopts,
                                                on_watch_msg, on_watch_end, ch)))
            return;
    } else if (body) {
        o.body = body;
        o.body_len = strlen(body);
        o.timeout_ms = e->request_timeout_ms;
        ch->call = kl__etcd_call_start(kl__etcd_of(e->pub.client), &o, on_result, ch);
        kl__free(body);
        if (ch->call)
            return;
    }
    kl__log_printf(elog(e), K8SLEASE_LOG_ERROR, "%s: cannot start %s: %s", e->pub.what,
                   req_name(ch->kind), kl__error_get());
    /* A timer of our own (no allocation) answers on the next loop turn. */
    kl__timer_arm(e->pub.client->loop, &ch->failed, kl__loop_now(e->pub.client->loop));
}

static void detach(k8slease_elector *pub)
{
    etcd_elector *e = (etcd_elector *)pub;

    kl__timer_cancel(e->pub.client->loop, &e->pub.timer);
    for (int i = 0; i < KL_EE_CH_COUNT; i++)
        cancel_channel(&e->ch[i]);
}

static void finish(etcd_elector *e)
{
    detach(&e->pub);
    kl__elector_report_done(&e->pub);
}

static void on_lost_seen(k8slease_elector *pub);

static void exec_action(etcd_elector *e, const kl__etcd_election_action *a)
{
    switch (a->type) {
    case KL_EE_ACT_CANCEL:
        kl__log_printf(elog(e), K8SLEASE_LOG_DEBUG, "%s: cancel %s", e->pub.what,
                       req_name(e->ch[a->channel].kind));
        cancel_channel(&e->ch[a->channel]);
        break;
    case KL_EE_ACT_STARTED:
        kl__elector_report_started(&e->pub, a->epoch, kl__etcd_election_lease_deadline(&e->sm));
        break;
    case KL_EE_ACT_STOPPED:
        kl__elector_report_term_end(&e->pub, a->end, NULL, 0);
        break;
    case KL_EE_ACT_NEW_LEADER:
        /* No candidate: "" and -1, as the holder watch reports it. */
        kl__elector_report_new_leader(&e->pub, a->value,
                                      a->value_len == 0 && a->epoch == 0 ? -1 : a->epoch);
        break;
    case KL_EE_ACT_DONE:
        finish(e);
        break;
    default:
        if (e->sm.state == KL_EE_RELEASING && kl__elector_hold_release(&e->pub, on_lost_seen)) {
            e->ch[a->channel].deferred = *a; /* the machine waits for its answer */
            e->ch[a->channel].have_deferred = 1;
        } else {
            start_request(e, a);
        }
        break;
    }
}

/* The threads in wait_lost have returned: the release goes out. */
static void on_lost_seen(k8slease_elector *pub)
{
    etcd_elector *e = (etcd_elector *)pub;

    for (int i = 0; i < KL_EE_CH_COUNT; i++) {
        channel *ch = &e->ch[i];

        if (ch->have_deferred && e->sm.state == KL_EE_RELEASING)
            start_request(e, &ch->deferred); /* which clears have_deferred */
        ch->have_deferred = 0;
    }
}

/* Feed one event to the state machine and carry out what it says. */
static void run(etcd_elector *e, const kl__etcd_election_event *ev)
{
    kl__etcd_election_actions acts;
    kl__etcd_election_state from = e->sm.state;

    if (e->sm.state == KL_EE_DONE)
        return;
    kl__etcd_election_step(&e->sm, ev, kl__clock_mono_ns(), &acts);
    if (e->sm.state != from)
        kl__log_printf(elog(e), K8SLEASE_LOG_INFO, "%s: %s -> %s", e->pub.what,
                       kl__etcd_election_state_name(from),
                       kl__etcd_election_state_name(e->sm.state));
    for (int i = 0; i < acts.n; i++)
        exec_action(e, &acts.a[i]);
    if (e->sm.state != KL_EE_DONE)
        kl__elector_settle(
            &e->pub, e->sm.state == KL_EE_LEADING ? kl__etcd_election_lease_deadline(&e->sm) : 0,
            kl__etcd_election_timer(&e->sm));
}

static void on_timer(kl__timer *t, void *arg)
{
    kl__etcd_election_event ev = {.type = KL_EE_EV_TIMER};

    (void)t;
    run(arg, &ev);
}

/* ------------------------------------------------------------------------ */
/* The backend                                                              */
/* ------------------------------------------------------------------------ */

static void start(k8slease_elector *pub)
{
    etcd_elector *e = (etcd_elector *)pub;
    kl__etcd_election_event ev = {.type = KL_EE_EV_START};

    /* A connection to an etcd that stopped answering must be dropped well
     * before the lease expires, so that the next request can go elsewhere. */
    kl__loop_set_dead_timeout(e->pub.client->loop, e->ttl_ms / 2);
    run(e, &ev);
}

static void stop(k8slease_elector *pub, int release)
{
    kl__etcd_election_event ev = {.type = KL_EE_EV_STOP, .release = release};

    run((etcd_elector *)pub, &ev);
}

static void destroy(k8slease_elector *pub)
{
    etcd_elector *e = (etcd_elector *)pub;

    if (!e)
        return;
    kl__elector_head_destroy(&e->pub);
    kl__free(e);
}

static int create(k8slease_elector **out, k8slease_client *client,
                  const k8slease_elector_options *opts)
{
    kl__etcd_election_config cfg = {0};
    kl__elector_timings t;
    k8slease_elector *pub;
    etcd_elector *e;
    int64_t ld;
    int err;

    if ((err = kl__etcd_check_ns("k8slease_elector_start", opts->ns)) < 0 ||
        (err = kl__etcd_check_name("election name", opts->name)) < 0)
        return err;
    if (!opts->identity)
        return kl__error_set(K8SLEASE_EINVAL, "identity is NULL");
    if (opts->crash_failover || opts->pod_namespace || opts->pod_name || opts->container)
        return kl__error_set(K8SLEASE_EINVAL,
                             "crash_failover, pod_namespace, pod_name and container are "
                             "Kubernetes options (crash failover on the kubelet's report): not "
                             "with etcd");
    if (opts->coordinated || opts->binary_version || opts->emulation_version || opts->strategy)
        return kl__error_set(K8SLEASE_EINVAL,
                             "coordinated, binary_version, emulation_version and strategy are "
                             "Kubernetes options (coordinated leader election): not with etcd");
    if ((err = kl__elector_timings_of(&t, opts)) < 0)
        return err;
    ld = t.lease_duration_ms;
    /* The Kubernetes backend's rules, so both backends say the same thing
     * about the same options. */
    if ((err = kl__identity_check(opts->identity)) < 0 ||
        (err = kl__timings_check(ld * KL_NS_PER_MS, t.renew_deadline_ms * KL_NS_PER_MS,
                                 t.retry_period_ms * KL_NS_PER_MS)) < 0)
        return err;
    if (ld < 1000)
        return kl__error_set(K8SLEASE_EINVAL,
                             "lease_duration (%lld ms) must be at least 1 s with the etcd backend "
                             "(it is the lease TTL)",
                             (long long)ld);

    if ((err = kl__elector_new(&pub, sizeof(*e), client, &kl__etcd_elector_backend, opts, on_timer,
                               "etcd election %s", opts->name)) < 0)
        return err;
    e = (etcd_elector *)pub;
    /* The request timeout of both backends (core/timings.h). Keepalives
     * too: one that hangs must not hold back the next one until the lease
     * is gone. */
    e->request_timeout_ms = t.request_timeout_ms;
    e->ttl_ms = ld;
    e->pub.term_deadline_ms = ld; /* a term lives on its lease's keepalives */
    /* A watch on a member that hangs is left within TTL/3 + the request
     * timeout (etcd/conn.h has the rule): a follower there learns of a
     * release or an expiry within a TTL. */
    kl__etcd_stream_opts_init(&e->sopts, ld, t.renew_deadline_ms, t.retry_period_ms);
    cfg.prefix = opts->name;
    cfg.value = opts->identity;
    cfg.ttl_ns = ld * KL_NS_PER_MS;
    cfg.keepalive_interval_ns = 0; /* ttl / 3, as clientv3's sessions */
    cfg.retry_period_ns = t.retry_period_ms * KL_NS_PER_MS;
    cfg.release_on_cancel = opts->release_on_cancel;
    if ((err = kl__etcd_election_init(&e->sm, &cfg)) < 0) {
        kl__error_wrap(err, "%s", e->pub.what);
        destroy(pub);
        return err;
    }
    for (int i = 0; i < KL_EE_CH_COUNT; i++) {
        e->ch[i].e = e;
        e->ch[i].id = (kl__etcd_channel)i;
        kl__timer_init(&e->ch[i].failed, on_failed, &e->ch[i]);
    }
    *out = pub;
    return 0;
}

const kl__elector_backend kl__etcd_elector_backend = {
    create, start, stop, NULL, detach, destroy, "keepalive", "lease TTL", "our key was deleted"};
