/* The Kubernetes election state machine: PURE, like etcd/election.h. No
 * I/O, no clock reads, no allocation, no logging. The driver (k8s/driver.c)
 * feeds it events with "now" read once per loop iteration, executes the
 * actions it returns, and arms one timer at kl__k8s_election_timer().
 *
 * Rules (client-go's tools/leaderelection with the Lease lock, plus ours):
 *  - Validation (core/timings.h, shared with etcd): lease_duration >
 *    renew_deadline > 1.2 * retry_period > 0, identity non-empty and shorter
 *    than KL_IDENTITY_MAX.
 *  - Acquire attempt: GET. 404 -> CREATE {holder=self, transitions=0,
 *    acquire=renew=now, duration=LD}. Got a record: if it differs from the
 *    observed one (holder, duration, acquire, renew, transitions), it becomes
 *    the observed record and observed_time = now (monotonic). If the holder
 *    is non-empty, not us, and observed_time + duration > now: held, not
 *    acquired. Else UPDATE {holder=self, duration=LD, renew=acquire=now,
 *    transitions=observed+1}: a new term ALWAYS bumps transitions, also when
 *    the holder is our own identity (restart) or empty.
 *  - Result of CREATE/UPDATE ok: the written record is observed
 *    (observed_time = now); if not leading -> LEADING, epoch = transitions,
 *    action STARTED(epoch). Conflict (409) or any error: not acquired.
 *  - Not leading: next attempt at (completion time) + RP * (1 + r * 1.2),
 *    r in [0,1) from the elector's own PRNG (seeded by config).
 *  - Leading: renew every RP after the last completion, straight from the
 *    cached object (UPDATE {renew=now, acquire/transitions kept}: the fast
 *    path); on any error fall back at once to GET + UPDATE (slow path); on a
 *    failure of the slow path retry after RP, at once after a timeout
 *    (the request's connection was abandoned: the next goes on a new one),
 *    after RP/4 after a refused or reset connection (K8SLEASE_ETRANSPORT:
 *    behind a load balancer the next connection may reach another replica). A GET that shows
 * another valid holder while leading means we lost: step down at once.
 *  - Leader deadline = start (now at emission) of the last successful
 *    CREATE/UPDATE + renew_deadline. is_leader is true only while LEADING
 *    and now < deadline. When now reaches it (timer or any event): step
 *    down -> STOPPED.
 *  - OnNewLeader: after every result, if the observed holder or its
 *    transitions differ from the last reported ones, action
 *    NEW_LEADER(holder or "", transitions). (client-go reports the holder
 *    only; a new term under the same name changes the fencing epoch.)
 *  - STOPPED exactly once per elector: when leadership ends, or when the
 *    election ends without having led; it says why (core/term.h): the
 *    deadline, a record of another holder or of a new term under our name,
 *    404, preferredHolder, or KL_TERM_STOPPED for a stop and an election
 *    that never led. DONE is the last action ever.
 *  - Stop (event STOP with release flag): if a request is in flight, wait
 *    for its result first. If leading: STOPPED at once (is_leader false
 *    before the release is written); then with release: GET; if holder is
 *    self -> UPDATE {holder="", duration=1, acquire=renew=now, transitions
 *    kept}; 409 -> GET again; other errors -> retry after RP; give up at
 *    stop time + renew_deadline; -> DONE. Without release -> DONE.
 *    Released is only the term we may hold: holder self with the
 *    transitions and acquireTime of our term (or of the write that may
 *    have made us holder); a later term under our identity (another
 *    elector of ours, started after this one's term ended) is left alone.
 *    If not leading: STOPPED, DONE (an acquisition that completes after the
 *    stop was asked is released as above when release is set).
 *  - Handoff (STOP with release and handoff_to): as a release, STOPPED
 *    first, the same GET and the same checks, but the UPDATE writes
 *    {holder=handoff_to, duration=handoff_bound_s, acquire=renew=now,
 *    transitions+1}: the successor takes it at once as a Lease that names
 *    it (a new term, transitions+2), everyone else sees a holder until the
 *    bound passes, and a client-go successor keeping transitions still has
 *    an epoch greater than ours. A 409 reads again, as for a release.
 *    While the write is under way, the driver marks a record of our
 *    identity in the term handed over as a predecessor's for the other
 *    electors of the same client (a program's next election under the same
 *    identity): they wait for the handoff instead of taking that term back.
 *  - Losing leadership because the deadline passed releases too when
 *    release_on_cancel is set (as client-go), then DONE.
 *  - Also ending a term (STOPPED, nothing to release, DONE): a GET while
 *    leading that shows any other holder (valid or not, or ""), our own
 *    identity with other transitions than our epoch, or 404. client-go would
 *    take a new term or recreate the Lease silently, under a stale epoch.
 *  - A CREATE/UPDATE of a new term answered at or after its send time +
 *    renew_deadline does not start the term (no STARTED): retry later.
 *
 * Watch mode (cfg.poll_only == 0; with poll_only the two watch events are
 * ignored and everything above is client-go's polling):
 *  - OBSERVE (a watch event or list item: the Lease as stored, or "no
 *    Lease") updates the observed record exactly as a GET result does
 *    (same change detection, observed_time = now when it changed,
 *    NEW_LEADER when the holder changed). The driver drops observations
 *    that are not newer than what it already fed in, so they never undo a
 *    write of ours.
 *  - ACQUIRING with no request in flight: an observation is judged like a
 *    GET result: no Lease -> CREATE at once; holder empty, expired, or our
 *    identity -> UPDATE at once; held by another valid holder -> wait (see
 *    next rule). With a request in flight its result decides, as before.
 *  - ACQUIRING, waiting: while the watch is healthy, the next attempt is at
 *    observed_time + duration + j, j in [0, RP/20) from the PRNG (so the
 *    followers of a dead leader do not all ask in the same millisecond),
 *    instead of RP * (1 + r * 1.2): every change reaches us as it happens,
 *    only the expiry is left to wait for. While it is not healthy, poll as
 *    client-go. WATCH healthy: reschedule that way; WATCH unhealthy: next
 *    attempt = min(planned, now + RP * (1 + r * 1.2)). An observation while
 *    unhealthy never postpones the planned poll.
 *  - LEADING: an observation showing another holder, our identity with
 *    other transitions than our epoch, or no Lease ends the term at once
 *    (STOPPED, nothing to release, DONE), as the same GET would.
 *  - RELEASING: observations only update the observed record (NEW_LEADER).
 *
 * Coordinated mode (cfg.coordinated, KEP-4355 as client-go's Coordinated;
 * the apiserver's controller writes the holder):
 *  - The observed record also holds whether spec.preferredHolder names
 *    somebody else (a change of it is a change of the record).
 *  - ACQUIRING never CREATEs and never takes a Lease held by another, empty
 *    or expired: it takes the Lease (UPDATE, a new term: transitions + 1,
 *    as ever, so the epoch stays a fencing token; client-go keeps the
 *    controller's count) only when the holder is our identity, no
 *    preferredHolder names another, and observed_time + duration > now.
 *    Otherwise it waits: polling as client-go, or with a healthy watch
 *    (every controller write reaches us) a check every lease_duration.
 *  - LEADING: a GET or observation whose preferredHolder names another
 *    ends the term at once, and releases when release_on_cancel (the
 *    controller then hands the Lease to the preferred holder without
 *    waiting for it to expire; client-go only stops renewing).
 *
 * Crash failover (docs/semantics.md, "Crash failover"; not in coordinated
 * mode, where the controller picks the holder):
 *  - HOLDER_ENDED names a term (holder, transitions) whose container the
 *    kubelet reported terminated. From then on a record of that term is
 *    expired, whatever its renewTime and however recently it changed: a
 *    renewal that was on its way when the process died may still land, no
 *    later one can. Only that term: a record of another holder or another
 *    transitions count is judged as ever.
 *  - ACQUIRING with no request in flight: if the observed record is that
 *    term, UPDATE at once (a new term, transitions + 1, over the object
 *    last seen: a renewal that landed meanwhile makes it a 409).
 *  - A conflict while taking such a record: GET at once, not after a retry
 *    period (the renewal that landed is the dead holder's last).
 *  - An observation (GET result or OBSERVE) whose holder is our identity
 *    but which the driver marks as a predecessor's (crash failover: the
 *    record names an earlier instance of our container, which a restart in
 *    place replaced) is another holder's term: held until it expires, by
 *    the rules above, never taken at once as our own (client-go would).
 *    The followers, which take it on the kubelet's report of that
 *    instance's end, lead instead of the restarted process; it takes the
 *    Lease only when nobody has by its expiry. A change of that mark is a
 *    change of the record.
 *  - RENEW (the elector learnt its container instance): while LEADING with
 *    no request in flight, a renewal at once (the fast path); while a
 *    CREATE/UPDATE is in flight (LEADING or ACQUIRING), the next renewal
 *    right after it succeeds (and the term starts), not a retry period
 *    later: the record reaches the Lease within a round trip of being known.
 */
#ifndef KL_K8S_ELECTION_H
#define KL_K8S_ELECTION_H

#include <stdint.h>

#include "core/term.h"
#include "core/timings.h" /* KL_IDENTITY_MAX, the validation rules */
#include "k8s/codec.h"

#define KL_KE_MAX_ACTIONS 8

typedef enum kl__k8s_election_state {
    KL_KE_IDLE,      /* created, START not yet received */
    KL_KE_ACQUIRING, /* candidate: polling the lease, trying to take it */
    KL_KE_LEADING,   /* we hold the lease and renew it */
    KL_KE_RELEASING, /* stopping: writing holder "" (or waiting for a request to finish) */
    KL_KE_DONE       /* over; no more actions */
} kl__k8s_election_state;

typedef enum kl__k8s_req {
    KL_KE_REQ_NONE,
    KL_KE_REQ_GET,
    KL_KE_REQ_CREATE,
    KL_KE_REQ_UPDATE
} kl__k8s_req;

typedef struct kl__k8s_election_config {
    const char *identity; /* borrowed: must outlive the elector */
    int64_t lease_duration_ns;
    int64_t renew_deadline_ns;
    int64_t retry_period_ns;
    int release_on_cancel;
    uint64_t seed;   /* PRNG seed for the jitter */
    int poll_only;   /* 1: ignore OBSERVE and WATCH, poll like client-go */
    int coordinated; /* 1: coordinated leader election (see above) */
} kl__k8s_election_config;

typedef enum kl__k8s_election_event_type {
    KL_KE_EV_START, /* begin campaigning: first attempt at once */
    /* the timer armed at kl__k8s_election_timer() fired (spurious ones are ignored) */
    KL_KE_EV_TIMER,
    KL_KE_EV_RESULT, /* the request last asked for completed */
    KL_KE_EV_STOP,   /* stop; release says whether to release if leading */
    /* the watch saw the Lease (status 0, spec) or no Lease (K8SLEASE_ENOTFOUND) */
    KL_KE_EV_OBSERVE,
    KL_KE_EV_WATCH, /* the watch became healthy (healthy = 1) or not (0) */
    /* Crash failover: the kubelet reported the container of the term
     * spec->holder, spec->transitions terminated (k8s/crash.c). */
    KL_KE_EV_HOLDER_ENDED,
    /* The driver has something new for the Lease (crash failover's
     * record): while LEADING, renew now; after a CREATE/UPDATE in flight
     * that starts or renews our term, renew right after it. */
    KL_KE_EV_RENEW
} kl__k8s_election_event_type;

typedef struct kl__k8s_election_event {
    kl__k8s_election_event_type type;
    /* KL_KE_EV_RESULT: 0 ok, K8SLEASE_ENOTFOUND, K8SLEASE_ECONFLICT or another
     * negative code. */
    int status;
    /* KL_KE_EV_RESULT with status 0: spec of the Lease as stored by the server
     * (GET body, or CREATE/UPDATE response body). KL_KE_EV_OBSERVE with status
     * 0: the Lease the watch saw. Borrowed for the call. */
    const kl__lease_spec *spec;
    /* KL_KE_EV_STOP: 1 to release if leading. */
    int release;
    /* KL_KE_EV_WATCH: 1 healthy, 0 not. */
    int healthy;
    /* With spec: spec.preferredHolder, NULL or "" when absent. Borrowed. */
    const char *preferred_holder;
    /* With spec (crash failover): the holder is our identity, but the
     * record names an earlier instance of our container (the process before
     * a restart in place), not this process: not our term. */
    int predecessor;
    /* KL_KE_EV_STOP with release: hand the term over to this identity
     * (NULL or "": a plain release), in a Lease lasting handoff_bound_s.
     * Borrowed until DONE. */
    const char *handoff_to;
    int64_t handoff_bound_s;
} kl__k8s_election_event;

typedef enum kl__k8s_election_action_type {
    KL_KE_ACT_GET,        /* GET the Lease; answer with KL_KE_EV_RESULT */
    KL_KE_ACT_CREATE,     /* POST spec; answer with KL_KE_EV_RESULT */
    KL_KE_ACT_UPDATE,     /* PUT spec over the last Lease object received, with its
                          resourceVersion; answer with KL_KE_EV_RESULT */
    KL_KE_ACT_STARTED,    /* OnStartedLeading(epoch) */
    KL_KE_ACT_STOPPED,    /* OnStoppedLeading() */
    KL_KE_ACT_NEW_LEADER, /* OnNewLeader(identity, epoch) */
    KL_KE_ACT_DONE        /* election over; cancel anything still in flight */
} kl__k8s_election_action_type;

typedef struct kl__k8s_election_action {
    kl__k8s_election_action_type type;
    kl__lease_spec spec; /* CREATE/UPDATE: holder points at the identity or "" */
    int64_t epoch;       /* STARTED, NEW_LEADER; STOPPED: KL_TERM_TAKEN, _RETAKEN's */
    /* NEW_LEADER; STOPPED: KL_TERM_TAKEN's holder. Borrowed from the
     * elector, valid until the next step. */
    const char *identity;
    kl__term_end end; /* STOPPED: why */
} kl__k8s_election_action;

typedef struct kl__k8s_election_actions {
    kl__k8s_election_action a[KL_KE_MAX_ACTIONS];
    int n;
} kl__k8s_election_actions;

/* A name the machine compares with the holder but never shows: its length
 * and two unrelated 64-bit hashes, not its text (a text buffer each would
 * cost every election of thousands a kilobyte). Names that differ match
 * only if both hashes collide at the same length. */
typedef struct kl__name_id {
    size_t len;
    uint64_t fnv, mix;
} kl__name_id;

typedef struct kl__k8s_election {
    kl__k8s_election_config cfg;
    kl__k8s_election_state state;
    kl__k8s_req req;     /* request in flight */
    int64_t req_started; /* now when it was emitted */
    int req_fast_path;   /* the UPDATE in flight is a fast-path renew */

    /* observed record; holder longer than the buffer is truncated, and
     * compared by (length, FNV-1a 64, prefix) */
    char holder[KL_IDENTITY_MAX];
    kl__name_id holder_id;
    int64_t duration_s, acquire_us, renew_us, transitions;
    int preferred_other; /* coordinated: preferredHolder names another candidate */
    int predecessor;     /* the holder is our identity in an earlier instance (event) */
    int have_observed;
    int64_t observed_time;

    kl__name_id reported; /* last holder reported by NEW_LEADER */
    int64_t reported_epoch;
    int have_reported;

    int64_t epoch;           /* epoch of our term, -1 before */
    int64_t leader_deadline; /* monotonic ns, valid while LEADING */
    int64_t next_attempt;    /* monotonic ns of the next attempt, INT64_MAX if none */
    int stop_requested, stop_release, stopped_emitted;
    int64_t release_deadline;
    int may_hold; /* RELEASING: the server may name us holder (we led, or a write of
                     ours completed or failed ambiguously after the stop) */
    /* RELEASING: the record of the term we may hold (transitions, acquireTime): only that
     * one is released, never a later term under the same identity (a new election of the
     * same process, which the seed ABI starts while this one still releases). */
    int64_t held_transitions, held_acquire_us;
    int64_t term_acquire_us;                 /* acquireTime of our term, valid while LEADING */
    int64_t req_transitions, req_acquire_us; /* the write in flight: the term it asks for */
    int release_started; /* RELEASING: the release GET/UPDATE sequence has begun; until then
                            the request in flight is one sent before stopping */
    int watch_healthy;   /* the last WATCH event said healthy (never in poll_only mode) */
    /* Crash failover: the last term reported ended (HOLDER_ENDED). */
    kl__name_id ended;
    int64_t ended_transitions;
    int have_ended;
    int renew_asap; /* RENEW came while a write of our term was in flight */
    /* RELEASING: the release hands the term over to STOP's handoff_to
     * (borrowed: the driver keeps it until DONE), NULL for a release. */
    const char *handoff_to;
    int64_t handoff_bound_s;
    uint64_t rng;
} kl__k8s_election;

/* Validate cfg and initialise e (state IDLE). Returns 0 or K8SLEASE_EINVAL
 * with kl__error_set() naming the rule broken, e.g.
 * "lease_duration (5000 ms) must be greater than renew_deadline (5000 ms)".
 * (kl__error_set is the one side effect allowed: it is not I/O.) */
int kl__k8s_election_init(kl__k8s_election *e, const kl__k8s_election_config *cfg);

/* Feed one event. now: monotonic ns; wall_us: wall clock µs (for MicroTime
 * fields). out is overwritten with the actions to execute in order. */
void kl__k8s_election_step(kl__k8s_election *e, const kl__k8s_election_event *ev, int64_t now,
                           int64_t wall_us, kl__k8s_election_actions *out);

/* Monotonic ns at which KL_KE_EV_TIMER must be delivered; INT64_MAX if none. */
int64_t kl__k8s_election_timer(const kl__k8s_election *e);

int kl__k8s_election_is_leader(const kl__k8s_election *e, int64_t now);
/* Leader deadline (monotonic ns) while LEADING, else 0. */
int64_t kl__k8s_election_leader_deadline(const kl__k8s_election *e);

const char *kl__k8s_election_state_name(kl__k8s_election_state s);

#endif
