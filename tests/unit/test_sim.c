/* Discrete-event simulation: three electors share one in-memory Lease with
 * resourceVersion concurrency, over a network with random delays (some
 * beyond the renew deadline), refused connections, lost answers, server
 * errors and partitions, while electors are killed, restarted, stopped with
 * and without release, and frozen for longer than the lease.
 *
 * Every request reaches the server at send + delay/2 (if it reaches it at
 * all) and its answer comes back at send + delay, so a write takes effect
 * strictly between the moment it was sent and the moment its success is
 * known: the leader deadline counts from the send.
 *
 * Watch mode (the *_watch tests): some nodes also follow the Lease on a
 * watch, as the driver does: every write reaches them as an event, in
 * order, after a random delay (some of them late); at start a "list"
 * reports the current state; streams stall, silently (unhealthy only after
 * the health window, 3 RP) or loudly (unhealthy at once), and deliver what
 * they held back when they recover. The node's driver drops events not
 * newer than what it fed in, and answers a GET older than that with the
 * newer state, as src/k8s/driver.c does.
 *
 * Checked after every event: never two electors with is_leader(now) true at
 * the same simulated instant; while one is, the stored Lease names it with
 * its epoch; STARTED epochs strictly increase; STOPPED at most once per
 * elector and exactly once before DONE; after each fault phase a leader
 * emerges within the liveness bound. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "core/common.h"
#include "k8s/election.h"

#define N_NODES  3
#define MS       INT64_C(1000000)
#define SEC      (1000 * MS)
#define NEVER    INT64_MAX
#define WALL0_US INT64_C(1700000000000000)

typedef struct timing {
    const char *name;
    int64_t ld, rd, rp;
} timing;

/* the seed's consumer: RunElection(ns, lease, id, 5, 3, 1) */
static const timing seed_timing = {"5/3/1 s", 5 * SEC, 3 * SEC, 1 * SEC};
/* A lease barely longer than the renew deadline: here a deadline counted
 * from the answer instead of the send would give two leaders. */
static const timing tight_timing = {"4/3.5/0.5 s", 4 * SEC, 3500 * MS, 500 * MS};

#define QUIET_MAX_DELAY (100 * MS) /* request delay once the faults stop */
#define MAX_MSGS        64
#define MAX_WEVENTS     512
#define EVENT_MAX_DELAY (30 * MS) /* watch event delay once the faults stop */

/* which nodes follow the Lease on a watch */
enum { MODE_POLL, MODE_WATCH, MODE_MIXED };

typedef struct record {
    int exists;
    uint64_t rv;
    char holder[32];
    kl__lease_spec spec; /* spec.holder points at holder */
} record;

/* One request on the wire. It outlives the elector that sent it: a killed
 * process's request still reaches the server. */
typedef struct msg {
    int used;
    int node;
    unsigned gen; /* incarnation of the node that sent it */
    kl__k8s_req req;
    record body;      /* CREATE/UPDATE: what to write */
    uint64_t if_rv;   /* UPDATE: resourceVersion of the driver's cached object */
    int64_t apply_at; /* server acts on it; NEVER: it does not get there */
    int64_t reply_at; /* answer reaches the node */
    int reply_error;  /* the answer is this error instead of the server's */
    int status;       /* server's answer */
    record got;       /* server's answer body */
    int faulty;       /* sent during a fault phase */
} msg;

/* A watch event or health change on its way to a node. */
typedef struct wevent {
    int used;
    int node;
    unsigned gen; /* incarnation it was meant for */
    int64_t at;
    uint64_t seq; /* FIFO among equal times */
    int health;   /* -1: an observation of rec; else the health told */
    record rec;   /* rec.exists 0: no Lease */
    int faulty;
} wevent;

typedef struct node {
    char id[16];
    kl__k8s_election e;
    int running; /* an incarnation runs: not killed, not DONE */
    unsigned gen;
    int64_t mono_off;     /* monotonic clock = sim time + mono_off */
    int64_t wall_skew_us; /* only ever written into the Lease */
    int64_t paused_until; /* SIGSTOP: nothing is delivered before */
    int64_t restart_at;   /* NEVER: no restart planned */
    int64_t cut_until;    /* partitioned: its requests fail before */
    uint64_t cached_rv;   /* the driver's last Lease object received */
    int stopped;          /* STOPPED actions of this incarnation */
    /* watch mode */
    int watch;           /* follows the Lease on a watch */
    int64_t wlast;       /* time of the last event queued: delivery is FIFO */
    int64_t stall_until; /* the stream holds events back until then */
    int stall_pending;   /* it recovers (healthy again) at stall_until */
    uint64_t gate_rv;    /* resourceVersion of the newest state fed in */
    record newest;       /* that state */
    long gets;           /* GETs sent by this incarnation */
} node;

typedef struct sim {
    timing cfg;
    uint64_t rng;
    int64_t t;
    int faults; /* fault phase: faulty network, kills, stops, pauses */
    int64_t next_fault;
    node nodes[N_NODES];
    msg msgs[MAX_MSGS];
    wevent wev[MAX_WEVENTS];
    uint64_t wseq;
    record store;
    int64_t last_epoch;
    int last_leader;
    long events, terms, handovers, kills, stops, pauses, partitions, stalls, observed;
} sim;

static uint64_t rnd(sim *s)
{
    uint64_t z = (s->rng += 0x9e3779b97f4a7c15u);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

/* uniform in [lo, hi) */
static int64_t rnd_range(sim *s, int64_t lo, int64_t hi)
{
    return lo + (int64_t)(rnd(s) % (uint64_t)(hi - lo));
}

static int64_t mono(const sim *s, const node *n)
{
    return s->t + n->mono_off;
}

static void set_record(record *dst, const record *src)
{
    *dst = *src;
    dst->spec.holder = dst->holder;
}

static void copy_spec(record *dst, const kl__lease_spec *spec)
{
    snprintf(dst->holder, sizeof(dst->holder), "%s", spec->holder ? spec->holder : "");
    dst->spec = *spec;
    dst->spec.holder = dst->holder;
}

/* ---- the network and the server ---- */

/* Queue a watch event for node i; a stream delivers in order, and nothing
 * while it stalls. */
static void push_wevent(sim *s, int i, int64_t at, int health, const record *rec)
{
    node *n = &s->nodes[i];
    wevent *w = NULL;

    for (int k = 0; k < MAX_WEVENTS && !w; k++)
        if (!s->wev[k].used)
            w = &s->wev[k];
    if (!w) {
        fail_msg("simulation: more than %d watch events in flight", MAX_WEVENTS);
        return;
    }
    memset(w, 0, sizeof(*w));
    if (at < n->stall_until)
        at = n->stall_until;
    if (at < n->wlast)
        at = n->wlast;
    n->wlast = at;
    w->used = 1;
    w->node = i;
    w->gen = n->gen;
    w->at = at;
    w->seq = s->wseq++;
    w->health = health;
    w->faulty = s->faults;
    if (rec)
        set_record(&w->rec, rec);
}

static int64_t event_delay(sim *s)
{
    if (s->faults && rnd(s) % 100 < 10)
        return rnd_range(s, 100 * MS, 2 * SEC);
    return rnd_range(s, 1 * MS, EVENT_MAX_DELAY);
}

/* Every stored change reaches every watching process. */
static void broadcast(sim *s)
{
    for (int i = 0; i < N_NODES; i++)
        if (s->nodes[i].running && s->nodes[i].watch)
            push_wevent(s, i, s->t + event_delay(s), -1, &s->store);
}

/* Stall node i's stream for d: it holds events back; silently, its health
 * only drops once the window (3 RP) has passed without a word. */
static void stall(sim *s, int i, int64_t d, int silent)
{
    node *n = &s->nodes[i];
    int64_t until = s->t + d, drop = silent ? s->t + 3 * s->cfg.rp : s->t + 1 * MS;

    s->stalls++;
    /* what is already on its way waits too */
    for (int k = 0; k < MAX_WEVENTS; k++)
        if (s->wev[k].used && s->wev[k].node == i && s->wev[k].at < until)
            s->wev[k].at = until;
    if (n->wlast < until)
        n->wlast = until;
    if (drop < until) {
        int64_t keep = n->wlast;

        n->stall_until = 0;
        n->wlast = 0; /* told before the backlog */
        push_wevent(s, i, drop, 0, NULL);
        n->wlast = keep;
    }
    n->stall_until = until;
    n->stall_pending = 1;
}

static void send_request(sim *s, int i, kl__k8s_req req, const kl__lease_spec *spec)
{
    node *n = &s->nodes[i];
    msg *m = NULL;
    int64_t delay;
    int fate = (int)(rnd(s) % 100);

    for (int k = 0; k < MAX_MSGS && !m; k++)
        if (!s->msgs[k].used)
            m = &s->msgs[k];
    if (!m) {
        fail_msg("simulation: more than %d messages in flight", MAX_MSGS);
        return;
    }
    memset(m, 0, sizeof(*m));
    m->used = 1;
    m->node = i;
    m->gen = n->gen;
    m->req = req;
    m->if_rv = n->cached_rv;
    m->faulty = s->faults;
    if (spec)
        copy_spec(&m->body, spec);
    delay = rnd_range(s, 1 * MS, QUIET_MAX_DELAY);
    if (n->cut_until > s->t) {
        m->reply_error = K8SLEASE_ETRANSPORT;
    } else if (s->faults && fate < 6) {
        /* slower than the renew deadline */
        delay = rnd_range(s, s->cfg.rd, s->cfg.rd + 2 * SEC);
    } else if (s->faults && fate < 14) {
        /* connection refused / reset before the server saw it */
        m->reply_error = K8SLEASE_ETRANSPORT;
    } else if (s->faults && fate < 20) {
        /* the server acted, the answer was lost: the ambiguous case */
        m->reply_error = K8SLEASE_ETIMEOUT;
        delay = rnd_range(s, 100 * MS, 2 * SEC);
    } else if (s->faults && fate < 23) {
        m->reply_error = K8SLEASE_ESERVER;
    } else if (s->faults && fate < 40) {
        delay = rnd_range(s, 100 * MS, 3 * SEC);
    }
    m->apply_at = m->reply_error == K8SLEASE_ETRANSPORT || m->reply_error == K8SLEASE_ESERVER
                      ? NEVER
                      : s->t + delay / 2;
    m->reply_at = s->t + delay;
    if (req == KL_KE_REQ_GET)
        n->gets++;
}

static void apply(sim *s, msg *m)
{
    record *st = &s->store;

    m->apply_at = NEVER;
    if (m->req == KL_KE_REQ_GET) {
        m->status = st->exists ? 0 : K8SLEASE_ENOTFOUND;
    } else if (m->req == KL_KE_REQ_CREATE) {
        m->status = st->exists ? K8SLEASE_ECONFLICT : 0;
    } else if (!st->exists) {
        m->status = K8SLEASE_ENOTFOUND;
    } else {
        m->status = st->rv == m->if_rv ? 0 : K8SLEASE_ECONFLICT;
    }
    if (m->status == 0 && m->req != KL_KE_REQ_GET) {
        uint64_t rv = st->rv + 1;

        set_record(st, &m->body);
        st->exists = 1;
        st->rv = rv;
        broadcast(s);
    }
    if (m->status == 0)
        set_record(&m->got, st);
}

/* ---- electors ---- */

static void check_safety(sim *s)
{
    int leaders = 0;

    for (int i = 0; i < N_NODES; i++) {
        node *n = &s->nodes[i];

        if (!n->running || !kl__k8s_election_is_leader(&n->e, mono(s, n)))
            continue;
        leaders++;
        /* the fencing view: the server says the same */
        if (!s->store.exists || strcmp(s->store.holder, n->id) != 0 ||
            s->store.spec.transitions != n->e.epoch)
            fail_msg("t=%lld ms: %s leads with epoch %lld, store says %s/%lld",
                     (long long)(s->t / MS), n->id, (long long)n->e.epoch, s->store.holder,
                     (long long)s->store.spec.transitions);
    }
    if (leaders > 1)
        fail_msg("t=%lld ms: %d leaders", (long long)(s->t / MS), leaders);
}

static void deliver(sim *s, int i, kl__k8s_election_event_type type, int status,
                    const kl__lease_spec *spec, int release);

static void start_node(sim *s, int i)
{
    node *n = &s->nodes[i];
    kl__k8s_election_config cfg = {n->id, s->cfg.ld, s->cfg.rd, s->cfg.rp, 1, rnd(s), !n->watch};

    assert_int_equal(kl__k8s_election_init(&n->e, &cfg), 0);
    n->running = 1;
    n->gen++;
    n->stopped = 0;
    n->cached_rv = 0;
    n->gate_rv = 0;
    n->newest.exists = 0;
    n->gets = 0;
    n->restart_at = NEVER;
    n->wlast = 0;
    n->stall_until = 0;
    n->stall_pending = 0;
    deliver(s, i, KL_KE_EV_START, 0, NULL, 0);
    if (n->watch) {
        /* the stream's list: the state now, then healthy */
        push_wevent(s, i, s->t + event_delay(s), -1, &s->store);
        push_wevent(s, i, n->wlast, 1, NULL);
    }
}

/* The driver's order of states (src/k8s/driver.c): an event not newer than
 * what was fed in is dropped. */
static void deliver_event(sim *s, wevent *w)
{
    node *n = &s->nodes[w->node];

    if (w->health >= 0) {
        deliver(s, w->node, KL_KE_EV_WATCH, 0, NULL, w->health);
        return;
    }
    if (n->gate_rv && w->rec.rv <= n->gate_rv)
        return;
    n->gate_rv = w->rec.rv;
    set_record(&n->newest, &w->rec);
    if (w->rec.exists)
        n->cached_rv = w->rec.rv;
    s->observed++;
    deliver(s, w->node, KL_KE_EV_OBSERVE, w->rec.exists ? 0 : K8SLEASE_ENOTFOUND,
            w->rec.exists ? &n->newest.spec : NULL, 0);
}

static void deliver(sim *s, int i, kl__k8s_election_event_type type, int status,
                    const kl__lease_spec *spec, int release)
{
    node *n = &s->nodes[i];
    kl__k8s_election_event ev = {type, status, spec, release, release};
    kl__k8s_election_actions out;
    int64_t now = mono(s, n);

    kl__k8s_election_step(&n->e, &ev, now, WALL0_US + s->t / 1000 + n->wall_skew_us, &out);
    s->events++;
    for (int k = 0; k < out.n; k++) {
        const kl__k8s_election_action *a = &out.a[k];

        switch (a->type) {
        case KL_KE_ACT_GET:
            send_request(s, i, KL_KE_REQ_GET, NULL);
            break;
        case KL_KE_ACT_CREATE:
            send_request(s, i, KL_KE_REQ_CREATE, &a->spec);
            break;
        case KL_KE_ACT_UPDATE:
            send_request(s, i, KL_KE_REQ_UPDATE, &a->spec);
            break;
        case KL_KE_ACT_STARTED:
            assert_true(kl__k8s_election_is_leader(&n->e, now));
            if (a->epoch <= s->last_epoch)
                fail_msg("t=%lld ms: %s started epoch %lld after epoch %lld",
                         (long long)(s->t / MS), n->id, (long long)a->epoch,
                         (long long)s->last_epoch);
            s->last_epoch = a->epoch;
            s->terms++;
            s->handovers += s->last_leader >= 0 && s->last_leader != i;
            s->last_leader = i;
            break;
        case KL_KE_ACT_STOPPED:
            assert_false(kl__k8s_election_is_leader(&n->e, now));
            n->stopped++;
            assert_int_equal(n->stopped, 1);
            break;
        case KL_KE_ACT_NEW_LEADER:
            break;
        case KL_KE_ACT_DONE:
            assert_int_equal(k, out.n - 1);
            assert_int_equal(n->stopped, 1);
            /* the supervisor runs a new election after a while */
            n->running = 0;
            n->restart_at = s->t + rnd_range(s, 100 * MS, 2 * SEC);
            break;
        }
    }
}

static void kill_node(sim *s, int i)
{
    s->nodes[i].running = 0;
    s->nodes[i].paused_until = 0;
    s->kills++;
}

static void fault(sim *s)
{
    int i = (int)(rnd(s) % N_NODES);
    node *n = &s->nodes[i];
    int what = (int)(rnd(s) % 100);

    s->next_fault = s->t + rnd_range(s, 500 * MS, 6 * SEC);
    if (!n->running || n->paused_until > s->t)
        return;
    /* a fifth of a watching node's faults are stalls of its stream, half of
     * them silent (the extra draw leaves the polling runs as they were) */
    if (n->watch && rnd(s) % 5 == 0) {
        stall(s, i, rnd_range(s, 500 * MS, 8 * SEC), what < 50);
    } else if (what < 30) {
        kill_node(s, i);
        n->restart_at = s->t + rnd_range(s, 200 * MS, 6 * SEC);
    } else if (what < 55) {
        s->stops++;
        deliver(s, i, KL_KE_EV_STOP, 0, NULL, what < 43);
    } else if (what < 75) {
        s->partitions++;
        n->cut_until = s->t + rnd_range(s, 1 * SEC, 8 * SEC);
        if (n->watch) /* its stream goes quiet too */
            stall(s, i, n->cut_until - s->t, 1);
    } else {
        /* frozen for longer than the lease */
        s->pauses++;
        n->paused_until = s->t + s->cfg.ld + rnd_range(s, 0, 3 * SEC);
    }
}

/* ---- the event loop ---- */

enum { EV_APPLY, EV_REPLY, EV_TIMER, EV_RESTART, EV_FAULT, EV_WATCH, EV_HEAL };

static int64_t later(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

/* Process the earliest pending event; returns its time, or NEVER when there
 * is none before `until`. */
static int64_t step(sim *s, int64_t until)
{
    int64_t best = until;
    int kind = -1, idx = -1;

#define CONSIDER(when, k, x)                                                                       \
    do {                                                                                           \
        int64_t w_ = (when);                                                                       \
        if (w_ < best) {                                                                           \
            best = w_;                                                                             \
            kind = (k);                                                                            \
            idx = (x);                                                                             \
        }                                                                                          \
    } while (0)

    for (int k = 0; k < MAX_MSGS; k++) {
        msg *m = &s->msgs[k];
        node *n = &s->nodes[m->node];

        if (!m->used)
            continue;
        CONSIDER(m->apply_at, EV_APPLY, k);
        /* a frozen process reads its socket when it wakes up; the answer
         * to a process killed while frozen is dropped at once */
        if (m->apply_at == NEVER)
            CONSIDER(later(m->reply_at, n->running && n->gen == m->gen ? n->paused_until : s->t),
                     EV_REPLY, k);
    }
    {
        /* the earliest watch event, by (time, seq): a stream is FIFO */
        int64_t wbest = NEVER;
        int wk = -1;

        for (int k = 0; k < MAX_WEVENTS; k++) {
            wevent *w = &s->wev[k];
            node *n = &s->nodes[w->node];
            /* a frozen process reads its stream when it wakes up; events
             * for a process that is gone are dropped at once */
            int64_t at = !n->running || n->gen != w->gen ? s->t : later(w->at, n->paused_until);

            if (w->used && (at < wbest || (at == wbest && w->seq < s->wev[wk].seq))) {
                wbest = at;
                wk = k;
            }
        }
        if (wk >= 0)
            CONSIDER(wbest, EV_WATCH, wk);
    }
    for (int i = 0; i < N_NODES; i++) {
        node *n = &s->nodes[i];
        int64_t tm;

        if (n->running && n->stall_pending)
            CONSIDER(n->stall_until, EV_HEAL, i);
        if (!n->running) {
            CONSIDER(n->restart_at, EV_RESTART, i);
            continue;
        }
        tm = kl__k8s_election_timer(&n->e);
        if (tm != INT64_MAX)
            CONSIDER(later(later(tm - n->mono_off, s->t), n->paused_until), EV_TIMER, i);
    }
    if (s->faults)
        CONSIDER(s->next_fault, EV_FAULT, 0);
#undef CONSIDER

    if (kind < 0)
        return NEVER;
    assert_true(best >= s->t);
    s->t = best;
    switch (kind) {
    case EV_APPLY:
        apply(s, &s->msgs[idx]);
        break;
    case EV_REPLY: {
        msg *m = &s->msgs[idx];
        node *n = &s->nodes[m->node];
        int status = m->reply_error ? m->reply_error : m->status;

        m->used = 0;
        if (!n->running || n->gen != m->gen)
            break; /* its process is gone */
        if (status == 0 && m->req == KL_KE_REQ_GET && n->gate_rv && m->got.rv < n->gate_rv) {
            /* older than what the watch showed: the driver answers with that */
            deliver(s, m->node, KL_KE_EV_RESULT, n->newest.exists ? 0 : K8SLEASE_ENOTFOUND,
                    n->newest.exists ? &n->newest.spec : NULL, 0);
            break;
        }
        /* a write answered after the event of a later change: fed in, but
         * the newest state stays the later one */
        if (status == 0 && m->got.rv >= n->gate_rv) {
            n->cached_rv = m->got.rv;
            n->gate_rv = m->got.rv;
            set_record(&n->newest, &m->got);
        }
        deliver(s, m->node, KL_KE_EV_RESULT, status, status == 0 ? &m->got.spec : NULL, 0);
        break;
    }
    case EV_WATCH: {
        wevent *w = &s->wev[idx];
        node *n = &s->nodes[w->node];

        w->used = 0;
        if (n->running && n->gen == w->gen)
            deliver_event(s, w);
        break;
    }
    case EV_HEAL:
        s->nodes[idx].stall_pending = 0;
        push_wevent(s, idx, s->t + 1 * MS, 1, NULL);
        break;
    case EV_TIMER:
        deliver(s, idx, KL_KE_EV_TIMER, 0, NULL, 0);
        break;
    case EV_RESTART:
        start_node(s, idx);
        break;
    case EV_FAULT:
        fault(s);
        break;
    }
    check_safety(s);
    return best;
}

static int leader(const sim *s)
{
    for (int i = 0; i < N_NODES; i++)
        if (s->nodes[i].running &&
            kl__k8s_election_is_leader(&s->nodes[i].e, mono(s, &s->nodes[i])))
            return i;
    return -1;
}

/* The faults are over once nothing they caused is pending: no frozen node,
 * no request sent during the fault phase still travelling, and every node
 * not deliberately kept down running and campaigning or leading. */
static int settled(const sim *s, int down)
{
    for (int k = 0; k < MAX_MSGS; k++)
        if (s->msgs[k].used && s->msgs[k].faulty)
            return 0;
    for (int k = 0; k < MAX_WEVENTS; k++)
        if (s->wev[k].used && s->wev[k].faulty)
            return 0;
    for (int i = 0; i < N_NODES; i++) {
        const node *n = &s->nodes[i];

        if (i == down)
            continue;
        if (!n->running || n->paused_until > s->t || n->cut_until > s->t || n->stall_pending ||
            (n->e.state != KL_KE_ACQUIRING && n->e.state != KL_KE_LEADING))
            return 0;
    }
    return 1;
}

/* A candidate may be up to one retry (2.2 RP) plus a GET away from first
 * seeing the final record, must then wait the lease (whole seconds, rounded
 * up) from that sighting, be up to one more retry plus a GET away from
 * noticing the expiry, and then write. */
static int64_t liveness_bound(const timing *c)
{
    int64_t ld = (c->ld + SEC - 1) / SEC * SEC;

    return ld + 2 * (c->rp * 22 / 10) + 3 * QUIET_MAX_DELAY;
}

typedef struct totals {
    long events, terms, handovers, kills, stops, pauses, partitions, stalls, observed;
    int64_t worst_recovery;
} totals;

static void set_mode(sim *s, int mode)
{
    for (int i = 0; i < N_NODES; i++)
        s->nodes[i].watch = mode == MODE_WATCH || (mode == MODE_MIXED && i > 0);
}

static void run_seed(const timing *cfg, int mode, uint64_t seed, int cycles, totals *tot)
{
    static sim s; /* 3 electors with their 512-byte buffers: keep off the stack */

    memset(&s, 0, sizeof(s));
    s.cfg = *cfg;
    s.rng = seed;
    s.last_epoch = -1;
    s.last_leader = -1;
    s.t = 0;
    set_mode(&s, mode);
    for (int i = 0; i < N_NODES; i++) {
        node *n = &s.nodes[i];

        snprintf(n->id, sizeof(n->id), "node-%d", i);
        n->mono_off = rnd_range(&s, 0, 1000 * SEC);
        n->wall_skew_us = rnd_range(&s, -500000, 500001);
        n->restart_at = rnd_range(&s, 0, 500 * MS);
    }
    for (int c = 0; c < cycles; c++) {
        int64_t end = s.t + 60 * SEC, settled_at = NEVER, led_at = NEVER;
        int down = -1;

        s.faults = 1;
        s.next_fault = s.t + rnd_range(&s, 0, 3 * SEC);
        while (step(&s, end) != NEVER)
            ;
        s.t = end;
        s.faults = 0;
        /* half the time the leader dies for good: the others must wait out
         * its lease */
        if (rnd(&s) % 2 && (down = leader(&s)) >= 0)
            kill_node(&s, down);
        while (led_at == NEVER) {
            if (step(&s, NEVER) == NEVER)
                fail_msg("seed %llu: the simulation ran dry", (unsigned long long)seed);
            if (settled_at == NEVER && settled(&s, down))
                settled_at = s.t;
            if (settled_at != NEVER && leader(&s) >= 0)
                led_at = s.t;
            else if (settled_at != NEVER && s.t - settled_at > liveness_bound(cfg))
                fail_msg("seed %llu cycle %d: no leader %lld ms after the faults stopped",
                         (unsigned long long)seed, c, (long long)((s.t - settled_at) / MS));
        }
        if (led_at - settled_at > tot->worst_recovery)
            tot->worst_recovery = led_at - settled_at;
        if (down >= 0)
            s.nodes[down].restart_at = s.t + rnd_range(&s, 0, 2 * SEC);
    }
    tot->events += s.events;
    tot->terms += s.terms;
    tot->handovers += s.handovers;
    tot->kills += s.kills;
    tot->stops += s.stops;
    tot->pauses += s.pauses;
    tot->partitions += s.partitions;
    tot->stalls += s.stalls;
    tot->observed += s.observed;
}

static void many_seeds(const timing *cfg, int mode)
{
    enum { SEEDS = 50, CYCLES = 10 };
    static const char *const modes[] = {"poll", "watch", "mixed"};
    totals tot = {0};

    for (uint64_t seed = 1; seed <= SEEDS; seed++)
        run_seed(cfg, mode, seed, CYCLES, &tot);
    print_message("sim %s %s: %d seeds x %d cycles: %ld events, %ld terms, %ld handovers, "
                  "%ld kills, %ld stops, %ld pauses, %ld partitions, %ld stalls, %ld watch "
                  "observations; worst recovery %lld ms (bound %lld ms)\n",
                  cfg->name, modes[mode], SEEDS, CYCLES, tot.events, tot.terms, tot.handovers,
                  tot.kills, tot.stops, tot.pauses, tot.partitions, tot.stalls, tot.observed,
                  (long long)(tot.worst_recovery / MS), (long long)(liveness_bound(cfg) / MS));
    assert_true(tot.terms > SEEDS * CYCLES);
    assert_true(tot.handovers > 0);
    if (mode != MODE_POLL)
        assert_true(tot.stalls > 0 && tot.observed > 0);
}

static void test_sim_seed_timing(void **state)
{
    (void)state;
    many_seeds(&seed_timing, MODE_POLL);
}

static void test_sim_tight_timing(void **state)
{
    (void)state;
    many_seeds(&tight_timing, MODE_POLL);
}

static void test_sim_seed_timing_watch(void **state)
{
    (void)state;
    many_seeds(&seed_timing, MODE_WATCH);
}

static void test_sim_tight_timing_watch(void **state)
{
    (void)state;
    many_seeds(&tight_timing, MODE_WATCH);
}

static void test_sim_mixed_modes(void **state)
{
    (void)state;
    many_seeds(&seed_timing, MODE_MIXED);
    many_seeds(&tight_timing, MODE_MIXED);
}

/* No faults, every node watching: one term, and once the followers have
 * seen the leader they make no request at all (no polling). */
static void test_sim_watch_steady_state(void **state)
{
    static sim s;
    long gets = 0;

    (void)state;
    memset(&s, 0, sizeof(s));
    s.cfg = seed_timing;
    s.rng = 11;
    s.last_epoch = -1;
    s.last_leader = -1;
    set_mode(&s, MODE_WATCH);
    for (int i = 0; i < N_NODES; i++) {
        snprintf(s.nodes[i].id, sizeof(s.nodes[i].id), "node-%d", i);
        s.nodes[i].mono_off = rnd_range(&s, 0, 1000 * SEC);
        s.nodes[i].restart_at = rnd_range(&s, 0, 500 * MS);
    }
    while (step(&s, 10 * SEC) != NEVER)
        ;
    for (int i = 0; i < N_NODES; i++)
        gets += s.nodes[i].gets;
    while (step(&s, 600 * SEC) != NEVER)
        ;
    for (int i = 0; i < N_NODES; i++)
        gets -= s.nodes[i].gets;
    assert_int_equal(s.terms, 1);
    assert_int_equal(gets, 0);
    assert_true(leader(&s) >= 0);
}

/* No faults at all: one term, renewed for ten simulated minutes. */
static void test_sim_steady_state(void **state)
{
    static sim s;

    (void)state;
    memset(&s, 0, sizeof(s));
    s.cfg = seed_timing;
    s.rng = 7;
    s.last_epoch = -1;
    s.last_leader = -1;
    for (int i = 0; i < N_NODES; i++) {
        snprintf(s.nodes[i].id, sizeof(s.nodes[i].id), "node-%d", i);
        s.nodes[i].mono_off = rnd_range(&s, 0, 1000 * SEC);
        s.nodes[i].restart_at = rnd_range(&s, 0, 500 * MS);
    }
    while (step(&s, 600 * SEC) != NEVER)
        ;
    assert_int_equal(s.terms, 1);
    assert_int_equal(s.last_epoch, 0);
    assert_true(leader(&s) >= 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sim_steady_state),      cmocka_unit_test(test_sim_seed_timing),
        cmocka_unit_test(test_sim_tight_timing),      cmocka_unit_test(test_sim_watch_steady_state),
        cmocka_unit_test(test_sim_seed_timing_watch), cmocka_unit_test(test_sim_tight_timing_watch),
        cmocka_unit_test(test_sim_mixed_modes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
