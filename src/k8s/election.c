/* The Kubernetes election state machine. The rules are listed in k8s/election.h;
 * this file only adds the reasons behind the less obvious choices. */
#include "k8s/election.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "core/clock.h" /* KL_NS_PER_* only: the elector never reads a clock */
#include "core/common.h"

/* Hook to watch every state change (e.g. printf in a debugging build). The
 * elector itself never does I/O, so by default it expands to nothing. */
#ifndef KL_ELECTOR_TRACE
#define KL_ELECTOR_TRACE(e, from, to) ((void)0)
#endif

static void set_state(kl__k8s_election *e, kl__k8s_election_state to)
{
    KL_ELECTOR_TRACE(e, e->state, to);
    e->state = to;
}

static int64_t sec_to_ns(int64_t s)
{
    if (s <= 0)
        return 0;
    return s > INT64_MAX / KL_NS_PER_S ? INT64_MAX : s * KL_NS_PER_S;
}

/* The Lease holds whole seconds; rounding up keeps the lease others see at
 * least as long as the one we promised ourselves. */
static int64_t lease_duration_s(const kl__k8s_election *e)
{
    int64_t ns = e->cfg.lease_duration_ns;

    return ns / KL_NS_PER_S + (ns % KL_NS_PER_S != 0);
}

static uint64_t next_rand(kl__k8s_election *e)
{
    return kl__splitmix64(&e->rng);
}

/* RP * (1 + r * 1.2), r in [0,1): the jitter spreads candidates that failed
 * together. Integer arithmetic keeps the bound exact: the extra delay is
 * below floor(1.2 * RP), and the modulo bias is far below a nanosecond. */
static int64_t retry_delay(kl__k8s_election *e)
{
    int64_t rp = e->cfg.retry_period_ns;
    uint64_t span = (uint64_t)(rp + rp / 5);

    return kl__add_sat(rp, (int64_t)(next_rand(e) % span));
}

/* j in [0, RP/20): spreads the attempts of the followers that all saw the
 * same record expire, a few percent of RP so it costs little failover time. */
static int64_t expiry_jitter(kl__k8s_election *e)
{
    uint64_t span = (uint64_t)(e->cfg.retry_period_ns / 20);

    return span ? (int64_t)(next_rand(e) % span) : 0;
}

static kl__k8s_election_action *push(kl__k8s_election_actions *out,
                                     kl__k8s_election_action_type type)
{
    kl__k8s_election_action *a;

    /* A step emits at most four actions (STOPPED, NEW_LEADER, STARTED and
     * a request or DONE). */
    assert(out->n < KL_KE_MAX_ACTIONS);
    a = &out->a[out->n++];
    memset(a, 0, sizeof(*a));
    a->type = type;
    return a;
}

static void request(kl__k8s_election *e, kl__k8s_req req, const kl__lease_spec *spec, int64_t now,
                    kl__k8s_election_actions *out)
{
    static const kl__k8s_election_action_type types[] = {[KL_KE_REQ_GET] = KL_KE_ACT_GET,
                                                         [KL_KE_REQ_CREATE] = KL_KE_ACT_CREATE,
                                                         [KL_KE_REQ_UPDATE] = KL_KE_ACT_UPDATE};
    kl__k8s_election_action *a = push(out, types[req]);

    if (spec) {
        a->spec = *spec;
        e->req_transitions = spec->transitions;
        e->req_acquire_us = spec->acquire_us;
    }
    e->req = req;
    e->req_started = now;
    e->req_fast_path = 0;
}

/* The holder kept (truncated to its buffer) is s, of FNV-1a hash. */
static int same_holder(const kl__k8s_election *e, const char *s, size_t len, uint64_t fnv)
{
    size_t n = len < KL_IDENTITY_MAX - 1 ? len : KL_IDENTITY_MAX - 1;

    return e->holder_id.len == len && e->holder_id.fnv == fnv && memcmp(e->holder, s, n) == 0;
}

/* A hash unrelated to FNV-1a: each byte mixed in by a multiply and a
 * shift (the golden-ratio constant of splitmix64). */
static uint64_t mix_hash(const char *s, size_t len)
{
    uint64_t h = len;

    for (size_t i = 0; i < len; i++) {
        h = (h ^ (unsigned char)s[i]) * 0x9e3779b97f4a7c15u;
        h ^= h >> 29;
    }
    return h;
}

static kl__name_id name_id(const char *s, size_t len, uint64_t fnv)
{
    kl__name_id id = {len, fnv, mix_hash(s, len)};

    return id;
}

static int same_id(const kl__name_id *a, const kl__name_id *b)
{
    return a->len == b->len && a->fnv == b->fnv && a->mix == b->mix;
}

static void copy_name(char *dst, const char *s, size_t len)
{
    size_t n = len < KL_IDENTITY_MAX - 1 ? len : KL_IDENTITY_MAX - 1;

    memcpy(dst, s, n);
    dst[n] = '\0';
}

static int holder_is_self(const kl__k8s_election *e)
{
    size_t len = strlen(e->cfg.identity);

    /* identity is shorter than the buffer, so a match is never a prefix */
    return e->have_observed && !e->predecessor && e->holder_id.len == len &&
           memcmp(e->holder, e->cfg.identity, len) == 0;
}

/* observed_time only moves when the record changes: a leader that stopped
 * renewing leaves the same record, and its expiry must count from the first
 * time we saw it, by our clock, never from its (skewed) renewTime. Our own
 * writes always restart it. */
static void observe(kl__k8s_election *e, const kl__k8s_election_event *ev, int64_t now, int written)
{
    const kl__lease_spec *s = ev->spec;
    const char *preferred = ev->preferred_holder;
    int predecessor = ev->predecessor && !written;
    const char *h = s->holder ? s->holder : "";
    size_t len = strlen(h);
    uint64_t hash = kl__fnv1a(h, len);
    int preferred_other =
        e->cfg.coordinated && preferred && preferred[0] && strcmp(preferred, e->cfg.identity) != 0;

    if (!written && e->have_observed && same_holder(e, h, len, hash) &&
        e->duration_s == s->duration_s && e->acquire_us == s->acquire_us &&
        e->renew_us == s->renew_us && e->transitions == s->transitions &&
        e->preferred_other == preferred_other && e->predecessor == predecessor)
        return;
    e->preferred_other = preferred_other;
    e->predecessor = predecessor;
    copy_name(e->holder, h, len);
    e->holder_id = name_id(h, len, hash);
    e->duration_s = s->duration_s;
    e->acquire_us = s->acquire_us;
    e->renew_us = s->renew_us;
    e->transitions = s->transitions;
    e->have_observed = 1;
    e->observed_time = now;
}

static void report_leader(kl__k8s_election *e, kl__k8s_election_actions *out)
{
    kl__k8s_election_action *a;

    /* The epoch too: a holder's new term under the same name (a restart;
     * in coordinated mode, the holder's first write after the controller
     * named it) is news to a follower that fences by epoch. */
    if (!e->have_observed || (e->have_reported && e->reported_epoch == e->transitions &&
                              same_id(&e->reported, &e->holder_id)))
        return;
    e->reported_epoch = e->transitions;
    e->reported = e->holder_id;
    e->have_reported = 1;
    a = push(out, KL_KE_ACT_NEW_LEADER);
    a->identity = e->holder;
    a->epoch = e->transitions;
}

/* The observed record is of the term whose container was reported
 * terminated (crash failover). */
static int observed_ended(const kl__k8s_election *e)
{
    return e->have_ended && e->have_observed && e->transitions == e->ended_transitions &&
           same_id(&e->holder_id, &e->ended);
}

/* Held by someone else, judged by our monotonic clock only. A zero duration
 * means expired at once; so does a term whose holder's container is known
 * to have ended. */
static int held_by_other(const kl__k8s_election *e, int64_t now)
{
    return e->holder_id.len > 0 && !holder_is_self(e) && !observed_ended(e) &&
           kl__add_sat(e->observed_time, sec_to_ns(e->duration_s)) > now;
}

/* Coordinated: the controller named us holder, wants nobody else, and we
 * saw that within the duration it wrote. */
static int named_by_controller(const kl__k8s_election *e, int64_t now)
{
    return holder_is_self(e) && !e->preferred_other &&
           kl__add_sat(e->observed_time, sec_to_ns(e->duration_s)) > now;
}

/* STOPPED, once, saying why (the holder and epoch of the Lease as
 * observed, for a term another took). */
/* Leading, the observed record is not our term: another holder (or none),
 * or a new term under our identity. */
static kl__term_end taken_why(const kl__k8s_election *e)
{
    return holder_is_self(e) ? KL_TERM_RETAKEN : KL_TERM_TAKEN;
}

static void emit_stopped(kl__k8s_election *e, kl__term_end why, kl__k8s_election_actions *out)
{
    kl__k8s_election_action *a;

    if (e->stopped_emitted)
        return;
    e->stopped_emitted = 1;
    a = push(out, KL_KE_ACT_STOPPED);
    a->end = why;
    if (why == KL_TERM_TAKEN || why == KL_TERM_RETAKEN) {
        a->identity = e->holder;
        a->epoch = e->transitions;
    }
}

static void finish(kl__k8s_election *e, kl__k8s_election_actions *out)
{
    emit_stopped(e, KL_TERM_STOPPED, out);
    set_state(e, KL_KE_DONE);
    e->req = KL_KE_REQ_NONE;
    e->next_attempt = INT64_MAX;
    push(out, KL_KE_ACT_DONE);
}

static void get(kl__k8s_election *e, int64_t now, kl__k8s_election_actions *out)
{
    request(e, KL_KE_REQ_GET, NULL, now, out);
}

static void new_term(kl__k8s_election *e, int create, int64_t now, int64_t wall_us,
                     kl__k8s_election_actions *out)
{
    kl__lease_spec s = {e->cfg.identity, lease_duration_s(e), wall_us, wall_us, 0};

    if (!create)
        s.transitions = e->transitions + 1;
    request(e, create ? KL_KE_REQ_CREATE : KL_KE_REQ_UPDATE, &s, now, out);
}

static void renew(kl__k8s_election *e, int fast_path, int64_t now, int64_t wall_us,
                  kl__k8s_election_actions *out)
{
    kl__lease_spec s = {e->cfg.identity, lease_duration_s(e), e->acquire_us, wall_us,
                        e->transitions};

    request(e, KL_KE_REQ_UPDATE, &s, now, out);
    e->req_fast_path = fast_path;
}

static void release_update(kl__k8s_election *e, int64_t now, int64_t wall_us,
                           kl__k8s_election_actions *out)
{
    kl__lease_spec s = {"", 1, wall_us, wall_us, e->transitions};

    /* A handoff: the successor named holder of a new (short) term that
     * only it takes at once; transitions + 1 keeps the epochs growing
     * whatever the successor's rules. */
    if (e->handoff_to) {
        s.holder = e->handoff_to;
        s.duration_s = e->handoff_bound_s;
        s.transitions = e->transitions + 1;
    }
    request(e, KL_KE_REQ_UPDATE, &s, now, out);
}

static void begin_release(kl__k8s_election *e, int64_t now, kl__k8s_election_actions *out)
{
    if (!e->stop_release || !e->may_hold) {
        finish(e, out);
        return;
    }
    e->release_started = 1;
    get(e, now, out);
}

/* Leaving LEADING or ACQUIRING for good, for the reason why. STOPPED goes
 * out first so that is_leader is false before anything is written; a
 * request in flight is waited for because its outcome decides whether
 * there is a lease to release. */
static void step_down(kl__k8s_election *e, kl__term_end why, int release, int may_hold, int64_t now,
                      kl__k8s_election_actions *out)
{
    if (e->state == KL_KE_LEADING) {
        e->held_transitions = e->epoch;
        e->held_acquire_us = e->term_acquire_us;
    }
    emit_stopped(e, why, out);
    set_state(e, KL_KE_RELEASING);
    e->stop_release = release;
    e->may_hold = may_hold;
    e->release_started = 0;
    e->release_deadline = kl__add_sat(now, e->cfg.renew_deadline_ns);
    e->next_attempt = INT64_MAX;
    if (e->req == KL_KE_REQ_NONE)
        begin_release(e, now, out);
}

static int watching(const kl__k8s_election *e)
{
    return !e->cfg.poll_only && e->watch_healthy;
}

/* A candidate's next attempt. With a healthy watch every change of the
 * Lease reaches us as it happens, so the one thing left to wait for is the
 * expiry of the record we see; otherwise poll as client-go does. */
static void retry_later(kl__k8s_election *e, int64_t now)
{
    if (e->cfg.coordinated && watching(e))
        e->next_attempt = kl__add_sat(now, e->cfg.lease_duration_ns);
    else if (watching(e) && e->have_observed && held_by_other(e, now))
        e->next_attempt =
            kl__add_sat(kl__add_sat(e->observed_time, sec_to_ns(e->duration_s)), expiry_jitter(e));
    else
        e->next_attempt = kl__add_sat(now, retry_delay(e));
}

/* Whether an ACQUIRING candidate may take the Lease it just saw. */
static int may_take(const kl__k8s_election *e, int64_t now)
{
    return e->cfg.coordinated ? named_by_controller(e, now) : !held_by_other(e, now);
}

static void acquiring_result(kl__k8s_election *e, kl__k8s_req req, int status,
                             const kl__k8s_election_event *ev, int64_t now, int64_t wall_us,
                             kl__k8s_election_actions *out)
{
    int asap = e->renew_asap; /* the write that answers did not carry what RENEW announced */

    e->renew_asap = 0;
    if (req == KL_KE_REQ_GET && status == K8SLEASE_ENOTFOUND && !e->cfg.coordinated) {
        new_term(e, 1, now, wall_us, out);
        return;
    }
    if (status == K8SLEASE_ECONFLICT && observed_ended(e)) {
        /* The dead holder's last renewal landed first: read it, take it. */
        get(e, now, out);
        return;
    }
    if (status != 0) {
        retry_later(e, now);
        return;
    }
    if (req == KL_KE_REQ_GET) {
        observe(e, ev, now, 0);
        report_leader(e, out);
        if (may_take(e, now))
            new_term(e, 0, now, wall_us, out);
        else
            retry_later(e, now);
        return;
    }
    observe(e, ev, now, 1);
    /* A write answered after the renew deadline would start a term that is
     * already over: stay a candidate. The next GET shows us as holder and
     * takes a fresh term at once. */
    if (!holder_is_self(e) || now >= kl__add_sat(e->req_started, e->cfg.renew_deadline_ns)) {
        report_leader(e, out);
        retry_later(e, now);
        return;
    }
    set_state(e, KL_KE_LEADING);
    e->epoch = e->transitions;
    e->term_acquire_us = e->acquire_us;
    e->leader_deadline = kl__add_sat(e->req_started, e->cfg.renew_deadline_ns);
    e->next_attempt = asap ? now : kl__add_sat(now, e->cfg.retry_period_ns);
    push(out, KL_KE_ACT_STARTED)->epoch = e->epoch;
    report_leader(e, out);
}

static void leading_result(kl__k8s_election *e, kl__k8s_req req, int status,
                           const kl__k8s_election_event *ev, int64_t now, int64_t wall_us,
                           kl__k8s_election_actions *out)
{
    int asap = e->renew_asap;

    e->renew_asap = 0;
    if (req == KL_KE_REQ_UPDATE && status == 0) {
        observe(e, ev, now, 1);
        report_leader(e, out);
        e->leader_deadline = kl__add_sat(e->req_started, e->cfg.renew_deadline_ns);
        e->next_attempt = asap ? now : kl__add_sat(now, e->cfg.retry_period_ns);
    } else if (req == KL_KE_REQ_UPDATE && e->req_fast_path) {
        /* the cached object may be stale: read it and try again now */
        get(e, now, out);
    } else if (req == KL_KE_REQ_GET && status == 0) {
        observe(e, ev, now, 0);
        report_leader(e, out);
        /* Somebody else holds it, or a new term started under our name
         * (same identity twice): either way our epoch is no longer the
         * fencing token, even if that holder has expired. */
        if (holder_is_self(e) && e->transitions == e->epoch && e->preferred_other)
            step_down(e, KL_TERM_PREFERRED, e->cfg.release_on_cancel, 1, now, out);
        else if (holder_is_self(e) && e->transitions == e->epoch)
            renew(e, 0, now, wall_us, out);
        else
            step_down(e, taken_why(e), 0, 0, now, out);
    } else if (req == KL_KE_REQ_GET && status == K8SLEASE_ENOTFOUND) {
        /* Deleted under us. Recreating it would restart transitions at 0
         * and break the epoch order, so this term is over. */
        step_down(e, KL_TERM_DELETED, 0, 0, now, out);
    } else if (status == K8SLEASE_ETIMEOUT) {
        /* The timeout spaced the attempts already, and its connection was
         * abandoned: try again at once, on a new one. */
        e->next_attempt = now;
    } else if (status == K8SLEASE_ETRANSPORT) {
        /* Refused or reset (a replica killed behind a load balancer that
         * has not marked it down yet): a new connection a moment later
         * likely reaches another. A whole retry period would leave no
         * second try when renew_deadline - retry_period is one retry
         * period (3/2/1, 5/3/1 by the seed ABI's whole seconds). */
        e->next_attempt = kl__add_sat(now, e->cfg.retry_period_ns / 4);
    } else {
        e->next_attempt = kl__add_sat(now, e->cfg.retry_period_ns);
    }
}

static void releasing_result(kl__k8s_election *e, kl__k8s_req req, int status,
                             const kl__k8s_election_event *ev, int64_t now, int64_t wall_us,
                             kl__k8s_election_actions *out)
{
    if (!e->release_started) {
        /* Sent before stopping. A write that succeeded, or failed without
         * a conflict (it may have reached the server), may have made us
         * holder: the release GET will tell. */
        if (status == 0)
            observe(e, ev, now, req != KL_KE_REQ_GET);
        if (req != KL_KE_REQ_GET && status != K8SLEASE_ECONFLICT) {
            e->may_hold = 1;
            e->held_transitions = e->req_transitions;
            e->held_acquire_us = e->req_acquire_us;
        }
        report_leader(e, out);
        begin_release(e, now, out);
        return;
    }
    if (status == 0) {
        observe(e, ev, now, req != KL_KE_REQ_GET);
        report_leader(e, out);
        if (req == KL_KE_REQ_GET && holder_is_self(e) && e->transitions == e->held_transitions &&
            e->acquire_us == e->held_acquire_us)
            release_update(e, now, wall_us, out);
        else
            finish(e, out);
    } else if (req == KL_KE_REQ_GET && status == K8SLEASE_ENOTFOUND) {
        finish(e, out);
    } else if (req == KL_KE_REQ_UPDATE && status == K8SLEASE_ECONFLICT) {
        get(e, now, out);
    } else {
        e->next_attempt = kl__add_sat(now, e->cfg.retry_period_ns);
    }
}

static void on_result(kl__k8s_election *e, const kl__k8s_election_event *ev, int64_t now,
                      int64_t wall_us, kl__k8s_election_actions *out)
{
    kl__k8s_req req = e->req;
    int status = ev->status;

    /* a driver bug, but "ok" without a body must not be taken as a write */
    if (status == 0 && !ev->spec)
        status = K8SLEASE_EPROTOCOL;
    e->req = KL_KE_REQ_NONE;
    if (e->state == KL_KE_ACQUIRING)
        acquiring_result(e, req, status, ev, now, wall_us, out);
    else if (e->state == KL_KE_LEADING)
        leading_result(e, req, status, ev, now, wall_us, out);
    else if (e->state == KL_KE_RELEASING)
        releasing_result(e, req, status, ev, now, wall_us, out);
}

/* An observation from the watch. The driver has already dropped the ones
 * not newer than what it fed in before, from any source. */
static void on_observe(kl__k8s_election *e, const kl__k8s_election_event *ev, int64_t now,
                       int64_t wall_us, kl__k8s_election_actions *out)
{
    int absent = ev->status == K8SLEASE_ENOTFOUND;

    if (e->cfg.poll_only || (!absent && (ev->status != 0 || !ev->spec)))
        return;
    if (!absent &&
        (e->state == KL_KE_ACQUIRING || e->state == KL_KE_LEADING || e->state == KL_KE_RELEASING)) {
        observe(e, ev, now, 0);
        report_leader(e, out);
    }
    if (e->state == KL_KE_ACQUIRING && e->req == KL_KE_REQ_NONE) {
        if (absent && !e->cfg.coordinated)
            new_term(e, 1, now, wall_us, out);
        else if (!absent && may_take(e, now))
            new_term(e, 0, now, wall_us, out);
        else if (watching(e))
            retry_later(e, now);
        /* Not healthy: the poll already planned stays. Moving it at each
         * renewal the leader makes would postpone it for ever. */
    } else if (e->state == KL_KE_LEADING) {
        /* as a GET showing the same would (leading_result) */
        if (absent)
            step_down(e, KL_TERM_DELETED, 0, 0, now, out);
        else if (!holder_is_self(e) || e->transitions != e->epoch)
            step_down(e, taken_why(e), 0, 0, now, out);
        else if (e->preferred_other)
            step_down(e, KL_TERM_PREFERRED, e->cfg.release_on_cancel, 1, now, out);
    }
}

static void on_watch_health(kl__k8s_election *e, int healthy, int64_t now)
{
    if (e->cfg.poll_only || !healthy == !e->watch_healthy)
        return;
    e->watch_healthy = !!healthy;
    if (e->state != KL_KE_ACQUIRING || e->req != KL_KE_REQ_NONE)
        return;
    if (healthy) {
        if (e->have_observed && held_by_other(e, now))
            retry_later(e, now);
    } else {
        int64_t poll = kl__add_sat(now, retry_delay(e));

        if (poll < e->next_attempt)
            e->next_attempt = poll;
    }
}

static void on_holder_ended(kl__k8s_election *e, const kl__lease_spec *s, int64_t now,
                            int64_t wall_us, kl__k8s_election_actions *out)
{
    const char *h = s && s->holder ? s->holder : "";
    size_t len = strlen(h);

    if (e->cfg.coordinated || !len)
        return;
    e->ended = name_id(h, len, kl__fnv1a(h, len));
    e->ended_transitions = s->transitions;
    e->have_ended = 1;
    if (e->state == KL_KE_ACQUIRING && e->req == KL_KE_REQ_NONE && observed_ended(e))
        new_term(e, 0, now, wall_us, out);
}

static void on_timer(kl__k8s_election *e, int64_t now, int64_t wall_us,
                     kl__k8s_election_actions *out)
{
    if (now < kl__k8s_election_timer(e))
        return;
    /* the deadlines were handled by the caller: this is the next attempt */
    if (e->state == KL_KE_ACQUIRING || e->state == KL_KE_RELEASING)
        get(e, now, out);
    else if (e->state == KL_KE_LEADING)
        renew(e, 1, now, wall_us, out);
}

static void on_renew(kl__k8s_election *e, int64_t now, int64_t wall_us,
                     kl__k8s_election_actions *out)
{
    /* A write already on its way was made without it: one more, right
     * after it, if it starts or renews our term. A write not yet sent will
     * carry it. */
    if (e->state == KL_KE_LEADING && e->req == KL_KE_REQ_NONE)
        renew(e, 1, now, wall_us, out);
    else if ((e->state == KL_KE_LEADING || e->state == KL_KE_ACQUIRING) &&
             (e->req == KL_KE_REQ_CREATE || e->req == KL_KE_REQ_UPDATE))
        e->renew_asap = 1;
}

static void on_stop(kl__k8s_election *e, const kl__k8s_election_event *ev, int64_t now,
                    kl__k8s_election_actions *out)
{
    int release = ev->release;

    if (e->stop_requested)
        return;
    e->stop_requested = 1;
    if (release && ev->handoff_to && ev->handoff_to[0] &&
        strlen(ev->handoff_to) < KL_IDENTITY_MAX && strcmp(ev->handoff_to, e->cfg.identity) != 0) {
        e->handoff_to = ev->handoff_to;
        e->handoff_bound_s = ev->handoff_bound_s > 0 ? ev->handoff_bound_s : 1;
    }
    if (e->state == KL_KE_IDLE)
        finish(e, out);
    else if (e->state == KL_KE_ACQUIRING)
        step_down(e, KL_TERM_STOPPED, release, 0, now, out);
    else if (e->state == KL_KE_LEADING)
        step_down(e, KL_TERM_STOPPED, release, 1, now, out);
    /* RELEASING: already on its way to DONE */
}

void kl__k8s_election_step(kl__k8s_election *e, const kl__k8s_election_event *ev, int64_t now,
                           int64_t wall_us, kl__k8s_election_actions *out)
{
    /* decided before the deadline checks, which may send a request */
    int stale = ev->type == KL_KE_EV_RESULT && e->req == KL_KE_REQ_NONE;

    out->n = 0;
    if (e->state == KL_KE_DONE)
        return;
    /* Every event, not only the timer: a late event must never extend a
     * term whose deadline has passed. */
    if (e->state == KL_KE_LEADING && now >= e->leader_deadline)
        step_down(e, KL_TERM_DEADLINE, e->cfg.release_on_cancel, 1, now, out);
    if (e->state == KL_KE_RELEASING && now >= e->release_deadline) {
        finish(e, out);
        return;
    }
    switch (ev->type) {
    case KL_KE_EV_START:
        if (e->state == KL_KE_IDLE) {
            set_state(e, KL_KE_ACQUIRING);
            get(e, now, out);
        }
        break;
    case KL_KE_EV_TIMER:
        on_timer(e, now, wall_us, out);
        break;
    case KL_KE_EV_RESULT:
        if (!stale)
            on_result(e, ev, now, wall_us, out);
        break;
    case KL_KE_EV_STOP:
        on_stop(e, ev, now, out);
        break;
    case KL_KE_EV_OBSERVE:
        on_observe(e, ev, now, wall_us, out);
        break;
    case KL_KE_EV_WATCH:
        on_watch_health(e, ev->healthy, now);
        break;
    case KL_KE_EV_HOLDER_ENDED:
        on_holder_ended(e, ev->spec, now, wall_us, out);
        break;
    case KL_KE_EV_RENEW:
        on_renew(e, now, wall_us, out);
        break;
    }
}

int64_t kl__k8s_election_timer(const kl__k8s_election *e)
{
    int64_t next = e->req == KL_KE_REQ_NONE ? e->next_attempt : INT64_MAX;

    switch (e->state) {
    case KL_KE_ACQUIRING:
        return next;
    case KL_KE_LEADING:
        return next < e->leader_deadline ? next : e->leader_deadline;
    case KL_KE_RELEASING:
        return next < e->release_deadline ? next : e->release_deadline;
    default:
        return INT64_MAX;
    }
}

int kl__k8s_election_is_leader(const kl__k8s_election *e, int64_t now)
{
    return e->state == KL_KE_LEADING && now < e->leader_deadline;
}

int64_t kl__k8s_election_leader_deadline(const kl__k8s_election *e)
{
    return e->state == KL_KE_LEADING ? e->leader_deadline : 0;
}

const char *kl__k8s_election_state_name(kl__k8s_election_state s)
{
    switch (s) {
    case KL_KE_IDLE:
        return "IDLE";
    case KL_KE_ACQUIRING:
        return "ACQUIRING";
    case KL_KE_LEADING:
        return "LEADING";
    case KL_KE_RELEASING:
        return "RELEASING";
    case KL_KE_DONE:
        return "DONE";
    }
    return "?";
}

static int validate(const kl__k8s_election_config *cfg)
{
    int err;

    if ((err = kl__identity_check(cfg->identity)) < 0 ||
        (err = kl__timings_check(cfg->lease_duration_ns, cfg->renew_deadline_ns,
                                 cfg->retry_period_ns)) < 0)
        return err;
    return 0;
}

int kl__k8s_election_init(kl__k8s_election *e, const kl__k8s_election_config *cfg)
{
    int err;

    if (!e || !cfg)
        return kl__error_set(K8SLEASE_EINVAL, "elector and config must not be NULL");
    memset(e, 0, sizeof(*e));
    if ((err = validate(cfg)) < 0)
        return err;
    e->cfg = *cfg;
    e->state = KL_KE_IDLE;
    e->req = KL_KE_REQ_NONE;
    e->epoch = -1;
    e->next_attempt = INT64_MAX;
    e->rng = cfg->seed;
    return 0;
}
