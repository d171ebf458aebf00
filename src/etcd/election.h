/* The etcd election state machine: PURE, like k8s/election.h. No I/O, no clock
 * reads, no allocation, no logging. The driver feeds it events with "now"
 * (monotonic ns) read once per loop iteration, executes the actions it
 * returns in order, and arms one timer at kl__etcd_election_timer().
 *
 * Key scheme: etcd's clientv3/concurrency.Election, so that `etcdctl elect
 * NAME` and Go programs take part in the same election. Every candidate
 * holds a lease and the key "<prefix>/<lease ID in lowercase hex, no
 * padding>" (value = its identity, attached to the lease). The leader is the
 * key with the lowest create revision under "<prefix>/"; the epoch (fencing
 * token) is that create revision, strictly increasing from term to term.
 *
 * Three channels, each with at most one request or watch in flight, so the
 * driver can run them side by side:
 *   CAMPAIGN:  GRANT, TXN_CREATE, PROCLAIM, RANGE_PREDECESSOR, WATCH_KEY on
 *              the predecessor, then DELETE_KEY and REVOKE when releasing;
 *   KEEPALIVE: KEEPALIVE, on its own schedule; before the first one of a
 *              new lease, REVOKE of the lease presumed lost (see the rules);
 *   OBSERVE:   RANGE_LEADER and WATCH_KEY on the leader's key, for
 *              NEW_LEADER and to notice our own key being deleted.
 * A request's answer is a RESULT event on its channel; a watch delivers
 * WATCH events until it ends (RESULT on its channel, any status) or the
 * machine CANCELs it. After CANCEL (and after DONE, for every channel) the
 * driver delivers nothing more from what it cancelled; events it delivers
 * anyway (a stale RESULT, a WATCH after a cancel) are ignored.
 *
 * Rules:
 *  - Validation: prefix and value non-empty and short enough for the
 *    buffers (KL_EE_PREFIX_MAX, KL_EE_VALUE_MAX), ttl >= 1 s,
 *    0 < keepalive_interval < ttl (0 means ttl / 3), retry_period > 0.
 *  - START -> GRANT(ttl in whole seconds, rounded up).
 *  - GRANT ok -> TXN_CREATE(key, value, lease): put if create_revision(key)
 *    == 0, else get. The lease deadline is (send time of the GRANT) +
 *    min(ttl, granted TTL); keepalives every keepalive_interval after the
 *    completion of the previous one.
 *  - TXN_CREATE succeeded: my_rev = header revision. Not succeeded: the key
 *    existed (same lease ID: a retry whose first attempt landed):
 *    my_rev = its create revision; if its value is not ours, PROCLAIM (put
 *    if create_revision == my_rev) first. Then RANGE_PREDECESSOR.
 *  - RANGE_PREDECESSOR: range the prefix with max_create_revision = my_rev,
 *    sorted by create revision descending, limit 2. Unlike etcd's
 *    waitDeletes (max my_rev - 1, limit 1) the answer also shows whether our
 *    own key still exists, so a candidate whose key was deleted never
 *    believes it leads. kvs[0] not our key -> TXN_CREATE again (a new key at
 *    the back of the queue). Only our key -> LEADING: STARTED(my_rev), then
 *    NEW_LEADER(value, my_rev). kvs[1] is the predecessor -> WATCH_KEY(its
 *    key, from the range's header revision + 1) and wait for its DELETE,
 *    then RANGE_PREDECESSOR again (there may be another predecessor now).
 *  - A watch canceled by etcd (compaction: compact_revision set; or any
 *    cancel_reason) -> CANCEL, range again (at once after a compaction,
 *    after retry_period otherwise). A watch that ends -> range again after
 *    retry_period.
 *  - Errors on campaign requests -> the same request again after
 *    retry_period, as long as the lease lives. ENOTFOUND on TXN_CREATE or
 *    PROCLAIM is etcd's "requested lease not found": the lease is gone.
 *  - Lease deadline = send time of the last successful KEEPALIVE (or GRANT)
 *    + min(ttl, TTL in the answer). is_leader is true only while LEADING and
 *    now < deadline. Checked on every event, before anything else.
 *  - The lease is lost when a KEEPALIVE answers TTL 0 (gone at the server),
 *    or the deadline passes (presumed gone), or TXN_CREATE/PROCLAIM say
 *    ENOTFOUND. A candidate then starts over with a new lease (GRANT): it
 *    never held a term, and like the Kubernetes elector a candidate keeps
 *    campaigning until stopped. A leader's term is over (one term per
 *    election, as the Kubernetes elector): STOPPED, release if
 *    release_on_cancel and the lease may still live (not after TTL 0), DONE;
 *    without release_on_cancel the lease is left to expire.
 *  - A candidate's lease presumed gone (deadline passed, also a GRANT
 *    answered after it) may still live: only the answers may have been
 *    lost, and an etcd that restarts extends every lease by its TTL. Its
 *    key, older than the new one and kept alive by nobody, would hold the
 *    queue up until etcd expires it. So, with the GRANT of the new lease,
 *    CANCEL the KEEPALIVE channel and REVOKE(old lease) on it, best effort:
 *    the campaign never waits for it and its answer changes nothing but the
 *    revoke itself. OK or ENOTFOUND: done. Errors: again after retry_period
 *    while the new lease is not granted (etcd is likely down: the case the
 *    revoke is for); when the GRANT succeeds, a revoke waiting for its retry
 *    is sent then, and the attempt then in flight is the last one, whatever
 *    it answers. When the new lease's first KEEPALIVE is due, a revoke still
 *    in flight is CANCELed. One revoke at a time: the next loss (of any
 *    kind), a STOP or DONE abandons it. Not after TTL 0 or ENOTFOUND (the
 *    lease is gone), nor for a leader (its release revokes, or not).
 *    Answers on the KEEPALIVE channel are matched to the request in flight
 *    (a KEEPALIVE cancelled at the deadline is never answered), and a
 *    KEEPALIVE answer naming another lease is an error, never a renewal.
 *  - Our key deleted by someone else while LEADING (a DELETE of it on the
 *    OBSERVE watch, or RANGE_LEADER not showing it at or after the revision
 *    we started at) -> the term is over as above (release = REVOKE only).
 *  - OBSERVE starts once our key exists: RANGE_LEADER (first key by create
 *    revision, limit 1) -> NEW_LEADER(value, create revision) when the
 *    leader or its value changed since the last report, and no answer older
 *    (by header revision) than the last report is reported; then
 *    WATCH_KEY(leader key, header revision + 1): PUT -> NEW_LEADER if the
 *    value changed, DELETE -> RANGE_LEADER. No leader, a leader key too long
 *    for the buffer, errors -> RANGE_LEADER again after retry_period. Our own
 *    key is reported by the campaign (STARTED first), never by OBSERVE.
 *  - STOP(release): STOPPED at once if not yet (also for a candidate:
 *    STOPPED exactly once per election). With release and a lease: CANCEL
 *    what is in flight, DELETE_KEY(key, my_rev) (a txn: delete if
 *    create_revision == my_rev; skipped when my_rev is unknown or our key is
 *    known gone), then REVOKE(lease) (which deletes any key left on it),
 *    REVOKE errors retried after retry_period; give up TTL after the stop
 *    (the lease is surely expired by then). -> DONE. Without release, or
 *    without a lease: DONE at once (keepalives stop: the lease expires).
 *  - DONE is the last action ever; the driver cancels everything in flight.
 *    Events after DONE do nothing.
 */
#ifndef KL_ETCD_ELECTION_H
#define KL_ETCD_ELECTION_H

#include <stddef.h>
#include <stdint.h>

#include "core/term.h"
#include "etcd/codec.h"

/* Buffers. A key is "<prefix>/<up to 16 hex digits>"; keys of others (the
 * predecessor, the leader) longer than KL_EE_KEY_MAX - 1 cannot be watched
 * and are polled every retry_period instead. Leader values longer than
 * KL_EE_VALUE_MAX - 1 are reported truncated (and compared in full by
 * length and hash). */
#define KL_EE_KEY_MAX     512
#define KL_EE_PREFIX_MAX  (KL_EE_KEY_MAX - 18) /* room for "/" + 16 hex digits + NUL */
#define KL_EE_VALUE_MAX   512
#define KL_EE_MAX_ACTIONS 8

typedef enum kl__etcd_election_state {
    KL_EE_IDLE,        /* created, START not yet received */
    KL_EE_GRANTING,    /* no lease: GRANT in flight or waiting to be retried */
    KL_EE_CREATING,    /* lease held: TXN_CREATE of our key */
    KL_EE_PROCLAIMING, /* our key existed with another value: PROCLAIM ours */
    KL_EE_RANGING,     /* RANGE_PREDECESSOR: are we first, who is before us */
    KL_EE_WAITING,     /* watching the predecessor's key for its DELETE */
    KL_EE_LEADING,     /* our key is the oldest: leader until the lease deadline */
    KL_EE_RELEASING,   /* stopping: DELETE_KEY then REVOKE */
    KL_EE_DONE         /* over; no more actions */
} kl__etcd_election_state;

typedef enum kl__etcd_channel {
    KL_EE_CH_CAMPAIGN,
    KL_EE_CH_KEEPALIVE,
    KL_EE_CH_OBSERVE,
    KL_EE_CH_COUNT
} kl__etcd_channel;

/* What a channel has in flight. */
typedef enum kl__etcd_req {
    KL_EE_REQ_NONE,
    KL_EE_REQ_GRANT,
    KL_EE_REQ_KEEPALIVE,
    KL_EE_REQ_TXN_CREATE,
    KL_EE_REQ_PROCLAIM,
    KL_EE_REQ_RANGE_PREDECESSOR,
    KL_EE_REQ_RANGE_LEADER,
    KL_EE_REQ_WATCH,
    KL_EE_REQ_DELETE_KEY,
    KL_EE_REQ_REVOKE
} kl__etcd_req;

typedef struct kl__etcd_election_config {
    const char *prefix;            /* election name; keys are "<prefix>/<hex lease ID>" (copied) */
    const char *value;             /* our identity, the value of our key (copied) */
    int64_t ttl_ns;                /* lease TTL, >= 1 s; asked in whole seconds, rounded up */
    int64_t keepalive_interval_ns; /* 0: ttl / 3 */
    int64_t retry_period_ns;       /* backoff after a failed request */
    int release_on_cancel;         /* when a term ends by itself, resign and revoke */
} kl__etcd_election_config;

typedef enum kl__etcd_election_event_type {
    KL_EE_EV_START,  /* begin: GRANT at once */
    KL_EE_EV_TIMER,  /* the timer armed at kl__etcd_election_timer() fired (early ones are ignored)
                      */
    KL_EE_EV_RESULT, /* the request (or watch) in flight on channel completed (ended) */
    KL_EE_EV_WATCH,  /* a message on the watch open on channel */
    KL_EE_EV_STOP    /* stop; release says whether to resign and revoke */
} kl__etcd_election_event_type;

/* Payloads are borrowed for the call; which one is read depends on the
 * request in flight (status 0 only):
 *   GRANT, KEEPALIVE -> lease (kl__etcd_parse_grant/_keepalive)
 *   TXN_CREATE, PROCLAIM, DELETE_KEY -> txn (kl__etcd_parse_txn)
 *   RANGE_PREDECESSOR, RANGE_LEADER -> range (kl__etcd_parse_range)
 *   REVOKE, a watch that ended -> nothing
 *   KL_EE_EV_WATCH -> watch (kl__etcd_parse_watch_msg)
 * A status 0 without the payload it needs counts as K8SLEASE_EPROTOCOL. */
typedef struct kl__etcd_election_event {
    kl__etcd_election_event_type type;
    kl__etcd_channel channel; /* RESULT, WATCH */
    int status;               /* RESULT: 0 or a negative K8SLEASE_E* code */
    const kl__etcd_lease *lease;
    const kl__etcd_txn *txn;
    const kl__etcd_range *range;
    const kl__etcd_watch_msg *watch;
    int release; /* STOP */
} kl__etcd_election_event;

/* Every pointer in an action is borrowed from the election and valid until
 * the next step. Requests (all POST to the gateway):
 *   GRANT             /v3/lease/grant {TTL: ttl_s} (ID chosen by etcd)
 *   KEEPALIVE         /v3/lease/keepalive {ID: lease_id} (one message, one answer)
 *   TXN_CREATE        kl__etcd_encode_txn_create(key, value, lease_id)
 *   PROCLAIM          kl__etcd_encode_txn_proclaim(key, value, lease_id, revision)
 *   RANGE_PREDECESSOR kl__etcd_encode_range: key..range_end (the prefix),
 *                     max_create_revision = revision, sort DESCEND by CREATE,
 *                     limit = limit (2)
 *   RANGE_LEADER      kl__etcd_encode_range: key..range_end, sort ASCEND by
 *                     CREATE, limit = limit (1)
 *   WATCH_KEY         /v3/watch, kl__etcd_encode_watch_create(key,
 *                     start_revision = revision): one HTTP stream per watch
 *   DELETE_KEY        kl__etcd_encode_txn_delete(key, revision)
 *   REVOKE            /v3/lease/revoke {ID: lease_id}
 *   CANCEL            abandon the request or watch in flight on channel
 * Callbacks: STARTED(epoch), STOPPED(end: why, core/term.h: the deadline,
 * TTL 0, our key deleted, or KL_TERM_STOPPED for a stop and an election
 * that never led), NEW_LEADER(value, value_len, epoch): value "" and epoch
 * 0 for "no leader". DONE: over, cancel everything. */
typedef enum kl__etcd_election_action_type {
    KL_EE_ACT_GRANT,
    KL_EE_ACT_KEEPALIVE,
    KL_EE_ACT_TXN_CREATE,
    KL_EE_ACT_PROCLAIM,
    KL_EE_ACT_RANGE_PREDECESSOR,
    KL_EE_ACT_RANGE_LEADER,
    KL_EE_ACT_WATCH_KEY,
    KL_EE_ACT_CANCEL,
    KL_EE_ACT_DELETE_KEY,
    KL_EE_ACT_REVOKE,
    KL_EE_ACT_STARTED,
    KL_EE_ACT_STOPPED,
    KL_EE_ACT_NEW_LEADER,
    KL_EE_ACT_DONE
} kl__etcd_election_action_type;

typedef struct kl__etcd_election_action {
    kl__etcd_election_action_type type;
    kl__etcd_channel channel; /* requests, WATCH_KEY, CANCEL */
    const char *key;          /* requests on keys; the prefix for ranges */
    size_t key_len;
    const char *range_end; /* RANGE_*: end of the prefix range */
    size_t range_end_len;
    const char *value; /* TXN_CREATE, PROCLAIM, NEW_LEADER (NUL-terminated) */
    size_t value_len;
    int64_t lease_id; /* KEEPALIVE, TXN_CREATE, PROCLAIM, REVOKE */
    int64_t ttl_s;    /* GRANT */
    int64_t revision; /* PROCLAIM, DELETE_KEY: create_revision compared;
                         RANGE_PREDECESSOR: max_create_revision; WATCH_KEY: start_revision */
    int64_t limit;    /* RANGE_* */
    int64_t epoch;    /* STARTED, NEW_LEADER */
    kl__term_end end; /* STOPPED: why */
} kl__etcd_election_action;

typedef struct kl__etcd_election_actions {
    kl__etcd_election_action a[KL_EE_MAX_ACTIONS];
    int n;
} kl__etcd_election_actions;

typedef struct kl__etcd_election {
    kl__etcd_election_config cfg; /* prefix and value point at the buffers below */
    char name[KL_EE_PREFIX_MAX];  /* cfg.prefix as given */
    char prefix[KL_EE_KEY_MAX];   /* "<name>/" */
    size_t prefix_len;
    char prefix_end[KL_EE_KEY_MAX]; /* "<name>0": end of the prefix range */
    size_t prefix_end_len;
    char value[KL_EE_VALUE_MAX];
    size_t value_len;
    int64_t ttl_s, keepalive_ns;

    kl__etcd_election_state state;
    kl__etcd_req inflight[KL_EE_CH_COUNT]; /* per channel */
    int64_t sent[KL_EE_CH_COUNT];          /* now when the request in flight was emitted */
    int64_t next[KL_EE_CH_COUNT]; /* when the channel's next request is due, or INT64_MAX */
    uint64_t seq[KL_EE_CH_COUNT]; /* bumped by every request and cancel */

    /* our lease and key; lease_id 0: none */
    int64_t lease_id;
    int64_t revoke_id;      /* a lease presumed lost, being revoked on KEEPALIVE; 0: none */
    int64_t lease_deadline; /* monotonic ns */
    char key[KL_EE_KEY_MAX];
    size_t key_len;
    int64_t my_rev;   /* create revision of our key, 0: unknown */
    int key_gone;     /* our key was seen deleted (LEADING) */
    int64_t lead_rev; /* header revision of the range that made us leader */
    int64_t epoch;    /* of our term, -1 before */

    char pred[KL_EE_KEY_MAX]; /* the predecessor we wait for */
    size_t pred_len;

    int observing;                  /* OBSERVE runs (from the first create on) */
    char leader_key[KL_EE_KEY_MAX]; /* the key OBSERVE watches */
    size_t leader_key_len;

    /* last NEW_LEADER: value (truncated copy), its full length and hash,
     * epoch, and the revision it was seen at */
    int have_reported;
    char reported[KL_EE_VALUE_MAX];
    size_t reported_len;
    uint64_t reported_hash;
    int64_t reported_epoch, reported_rev;

    int stop_requested, stopped_emitted;
    int release_delete; /* RELEASING: DELETE_KEY before REVOKE */
    int64_t release_deadline;
} kl__etcd_election;

/* Validate cfg and initialise e (state IDLE). Returns 0 or K8SLEASE_EINVAL
 * with kl__error_set() naming the rule broken, e.g. "keepalive_interval
 * (5000 ms) must be less than ttl (5000 ms)". */
int kl__etcd_election_init(kl__etcd_election *e, const kl__etcd_election_config *cfg);

/* Feed one event at now (monotonic ns). out is overwritten with the actions
 * to execute in order. */
void kl__etcd_election_step(kl__etcd_election *e, const kl__etcd_election_event *ev, int64_t now,
                            kl__etcd_election_actions *out);

/* Monotonic ns at which KL_EE_EV_TIMER must be delivered; INT64_MAX if none. */
int64_t kl__etcd_election_timer(const kl__etcd_election *e);

int kl__etcd_election_is_leader(const kl__etcd_election *e, int64_t now);
/* The lease deadline (monotonic ns) while a lease is held, else 0. */
int64_t kl__etcd_election_lease_deadline(const kl__etcd_election *e);

const char *kl__etcd_election_state_name(kl__etcd_election_state s);

#endif
