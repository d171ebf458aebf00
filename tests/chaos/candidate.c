/*
 * k8slease-chaos-candidate: one election candidate for the chaos suite.
 *
 *   k8slease-chaos-candidate --name cand-a --lease chaos --timing LD/RD/RP
 *       (--kubeconfig FILE | --etcd-endpoints URLS) [--sample-ms 1]
 *       [--seed-abi 1] [--naive 1] [--pod NAME --pod-namespace NS]
 *       [--handoff-candidate 1 [--revision REV] [--priority N]] [--poll-only 1]
 *       [--peers NAME,NAME,...]
 *
 * (--seed-abi: the candidate is a program on the seed ABI; see "Seed-ABI
 * mode" at the end of this comment.)
 *
 * --pod: crash failover (docs/semantics.md, "Crash failover"): the process
 * runs "in" Pod NS/NAME, container "main", whose status the driver writes
 * as a kubelet would (running, with a containerID of this incarnation,
 * before it starts us). Native: the elector options crash_failover,
 * pod_namespace, pod_name; seed ABI: K8SLEASE_CRASH_FAILOVER=1, POD_NAME
 * and POD_NAMESPACE in the environment, as the Downward API gives them.
 *
 * --handoff-candidate: the elector option handoff_candidate (planned
 * handoff, docs/semantics.md): the candidate makes itself known to the
 * leader's choice of a successor, with --revision and --priority.
 * --poll-only: the elector option poll_only (client-go's rules: no watch, a
 * poll every retry period plus up to 1.2 of it). --peers: the candidates'
 * names, for SIGRTMIN below.
 *
 * It campaigns for one Lease (or etcd election) in a loop: an elector runs
 * one term, so after every term (and after every election that ended
 * without one) it starts a new elector. It reports on stdout, one line per
 * event (format in chaos.h), and reacts to signals from the driver:
 *
 *   SIGUSR1  if leading: stop the elector releasing the lease (a graceful
 *            handover), then campaign again
 *   SIGUSR2  the same, but sit out for lease_duration before campaigning
 *            again, so that a follower has to take over (heartbeats go on
 *            with state P)
 *   SIGRTMIN (sigqueue, value V) if leading: k8slease_elector_handoff(e,
 *            TO, 0): V 0 the best known candidate, else the V-th name of
 *            --peers; reports HANDOFF, then campaigns again at once
 *   SIGCONT  report is_leader at once (CONT): a process frozen by SIGSTOP
 *            for longer than lease_duration must wake up as not leader
 *   SIGTERM  stop (releasing), report, exit 0
 *
 * and dies with the driver (PR_SET_PDEATHSIG).
 *
 * == Honest term boundaries ==
 *
 * The observer proves "never two leaders at once" from the intervals the
 * candidates report, so each reported interval must contain the whole time
 * during which k8slease_elector_is_leader() was true: LEAD no later than the
 * instant it turned true, LOSE no earlier than the instant it turned false.
 * is_leader is (leader_deadline != 0 && now < leader_deadline), where the
 * library stores leader_deadline on its loop thread: the deadline of the
 * acquisition just before on_started_leading runs, a later one after each
 * renewal, 0 just before on_stopped_leading runs (and when the election is
 * over). So is_leader turns true at the store of the first deadline
 * (t_store) and false at min(the store of 0, the last deadline stored).
 *
 * LEAD, lower bound of t_store, the larger of:
 *  - the start of the last read of leader_deadline that returned 0 while
 *    on_started_leading had not yet run. The main thread samples the
 *    deadline every --sample-ms while campaigning (wait_elected with that
 *    timeout: it returns at once when elected). A read of 0 before the
 *    callback ran happened before t_store (the deadline stays non-zero from
 *    t_store until after the callback), so a clock read taken before it is
 *    <= t_store. (A read of 0 after the callback may come after a very
 *    short term; those are not used.)
 *  - (first deadline) - span. Kubernetes: span = renew_deadline, which
 *    gives the start of the acquiring request (the deadline is "start of
 *    the last successful renew request + renew_deadline", header and
 *    docs/semantics.md), sent before its answer made us leader. The
 *    callback reads the first deadline on the loop thread, where no
 *    renewal can move it. This bound is the tight one: a new leader's acquiring UPDATE starts only
 *    after it saw the old term end, whatever the scheduling. With etcd,
 *    (first deadline) - TTL is the start of the last keepalive (or grant),
 *    also before t_store but often long before the previous leader's end:
 *    there the sampled bound is usually the tighter one, and it depends on
 *    the main thread being scheduled (docs/chaos.md, limits).
 * HI (information, and the liveness measurements): the clock read first
 * thing in on_started_leading, which runs after t_store.
 *
 * LOSE, upper bound of the end, min(seen, final deadline):
 *  - seen: the earliest of the clock read in on_stopped_leading (after the
 *    store of 0), the one after the first sampled read of 0 in this term,
 *    and the one after k8slease_elector_wait_lost returned 0 (it returns
 *    once the term is over: at on_stopped_leading, or by the clock at the
 *    deadline, possibly before the callback ran and before a sample read 0);
 *  - final deadline: the largest deadline this term ever stored. The
 *    callback and the samples read most of them, but a renewal may move the
 *    deadline just before the term ends (or the process is frozen) without
 *    a sample in between, so we also take stats.last_renew_ns (start of the
 *    last successful write: renewal or acquisition; etcd: keepalive or
 *    grant) as on_stopped_leading sees it + renew_deadline (Kubernetes) or
 *    + the lease TTL (etcd: the deadline is the start of the last
 *    successful keepalive + at most the TTL, docs/etcd.md). The library
 *    counts an answer before acting on it, so every deadline the term
 *    stored comes from a write counted by then; the release comes later.
 *    The result is >= every deadline of the term (later only when an
 *    answer came after the term was over: then it errs on the safe side).
 *   A frozen leader thus reports the deadline that passed while it was
 *   frozen, not the moment it noticed.
 * LO (information): the start of the last sample that saw a valid deadline.
 *
 * --naive 1 makes a mutant that reports the end of a term when it sees it
 * (on_stopped_leading), as a program trusting its callbacks instead of
 * is_leader would: a leader frozen by SIGSTOP then claims its term until it
 * wakes up, and the observer must report overlaps (k8slease-chaos
 * --naive-candidates proves the suite can fail).
 *
 * == Seed-ABI mode (--seed-abi 1) ==
 *
 * The candidate is a program on libk8s_lease_wrapper.h driving it as
 * Mooncake's master does (/work/shared/consumer): K8sLeaseInit (the client
 * from $KUBECONFIG, which we set to --kubeconfig), then in a loop on one
 * "master" thread: K8sLeaseRunElection(ns, lease, name, LD, RD, RP in whole
 * seconds: --timing must be whole seconds), K8sLeaseWaitElected with a
 * timeout of 2 x LD (Mooncake's kElectionTimeoutSec); on its timeout
 * K8sLeaseCancelElection and K8sLeaseGetHolder, as Mooncake's
 * TryAcquireLeadership, and campaign again; once elected, block in
 * K8sLeaseWaitLost, whose return ends the term, and campaign again at once
 * (K8sLeaseRunElection is allowed as soon as the old term is over). Unlike
 * Mooncake's standby we do not wait for K8sLeaseGetHolder to show no holder
 * before campaigning: against native candidates that act on watch events
 * the seed-ABI one would then hardly ever lead.
 *
 * Such a program has no is_leader: it leads from the return of
 * K8sLeaseWaitElected to the return of K8sLeaseWaitLost, and that is the
 * term it reports: ELECTED with the clock read right after WaitElected
 * returned, LOST with the clock read right after WaitLost returned (the
 * program is leader until it has read it: both bounds are exact for this
 * program). WaitElected returns after is_leader turned true, so the start
 * is late, never early; the end is what the check is about: it must come
 * before the next term's start.
 *
 * The main thread handles the signals and the heartbeats: SIGUSR1/SIGUSR2
 * while leading call K8sLeaseCancelElection (a graceful handover, as
 * Mooncake's ReleaseLeadership; SIGUSR2 then sits out LD before the next
 * K8sLeaseRunElection), SIGTERM cancels and ends the loop, SIGCONT writes
 * CONT with what the program believes (1: WaitLost has not returned), for
 * information only: the driver checks instead that WaitLost returns within
 * 1 s of the thaw. The seed ABI's log lines go to stderr (the driver keeps
 * them in its log).
 *
 * --naive 1 with --seed-abi makes the mutant of the old bug: LOST reports
 * WaitLost's return + renew_deadline, as a WaitLost that returned only once
 * the release and the requests to a hung server were over; the observer
 * must report overlaps (k8slease-chaos --naive-seed-abi).
 */
#define _DEFAULT_SOURCE /* prctl() */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "chaos.h"
#include "k8slease.h"
#include "libk8s_lease_wrapper.h"

#define HB_INTERVAL_NS   CHAOS_NS_PER_S
#define WAIT_CALLBACK_MS 10000

/* Seed-ABI mode: where the program is (mu held). */
typedef enum seed_state {
    SEED_IDLE,        /* no election of ours running: between two, or pausing */
    SEED_CAMPAIGNING, /* K8sLeaseRunElection returned, K8sLeaseWaitElected not yet */
    SEED_LEADING,     /* WaitElected returned 0, WaitLost not yet: the program's term */
} seed_state;

/* Seed-ABI mode: shared by the main thread (signals, heartbeats) and the
 * master thread (the election calls). */
typedef struct seed {
    pthread_mutex_t mu;
    seed_state state;
    int quit;            /* SIGTERM: no new election */
    int done;            /* the master thread is over */
    int failed;          /* ... because a call failed that must not */
    int64_t cancel_ns;   /* the program cancelled its term then (0: not) */
    int64_t pause_until; /* SIGUSR2: no campaign before this */
    char ns[254];
    int ld_s, rd_s, rp_s;
} seed;

#define MAX_PEERS 8

typedef struct cand {
    const char *name, *lease, *kubeconfig, *etcd_endpoints;
    int handoff_candidate, poll_only, priority; /* the elector options of the same names */
    const char *revision;
    char peers_buf[256];
    const char *peers[MAX_PEERS]; /* --peers: SIGRTMIN's value V names peers[V - 1] */
    int npeers;
    const char *pod, *pod_ns; /* --pod, --pod-namespace: crash failover on */
    chaos_timing t;
    int64_t sample_ms;
    int etcd;
    int seed_abi; /* --seed-abi: a program on libk8s_lease_wrapper.h */
    seed s;
    int naive;            /* --naive: LOSE when seen, ignoring the deadline (a mutant, see below) */
    int64_t lead_span_ns; /* first deadline - this <= the start of the acquiring write */
    int64_t lose_span_ns; /* last_renew_ns + this >= every deadline */
    k8slease_client *client;
    int64_t next_hb;
    int64_t pause_until; /* SIGUSR2: no campaign before this */
    int campaign;
} cand;

/* One elector's term, shared with its callbacks (loop thread). */
typedef struct term {
    pthread_mutex_t mu;
    k8slease_elector *e; /* published under mu once start() returned */
    int started;         /* on_started_leading ran */
    int64_t epoch;
    int64_t t_started;     /* clock at the start of on_started_leading (>= t_store) */
    int64_t d_first;       /* the deadline on_started_leading saw (exact) */
    int stopped;           /* on_stopped_leading ran after having led */
    int64_t t_stopped;     /* clock in on_stopped_leading (>= the store of 0) */
    int64_t renew_at_stop; /* stats.last_renew_ns in on_stopped_leading */
} term;

static const char *self = "?";
static volatile sig_atomic_t quit_flag, release_flag, cont_flag, cont_leader;
/* SIGRTMIN: 0 none, else 1 + its value (0: the best, V: peers[V - 1]). */
static volatile sig_atomic_t handoff_flag;
/* Seed-ABI mode: the program believes it leads (for the SIGCONT handler). */
static atomic_int seed_leading;
/* The elector of the current campaign, for the SIGCONT handler; set to NULL
 * before the elector is freed. The handler runs on the main thread only
 * (the other threads block the signal), so it never sees a freed one. */
static _Atomic(k8slease_elector *) current;

/* One write(2) per line, shorter than PIPE_BUF, so the driver reads whole
 * lines; exit if the driver is gone. */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static void
emit(int64_t ns, const char *event, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    int n = snprintf(line, sizeof(line), "%s %" PRId64 " %s", self, ns, event);

    if (fmt && n > 0 && n < (int)sizeof(line)) {
        line[n++] = ' ';
        va_start(ap, fmt);
        n += vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
        va_end(ap);
    }
    if (n < 0 || n >= (int)sizeof(line) - 1)
        n = (int)sizeof(line) - 2;
    for (int i = 0; i < n; i++)
        if (line[i] == '\n')
            line[i] = ' ';
    line[n++] = '\n';
    if (write(STDOUT_FILENO, line, (size_t)n) != n)
        _exit(3);
}

static void on_signal(int sig)
{
    if (sig == SIGUSR1 || sig == SIGUSR2) {
        release_flag = sig == SIGUSR1 ? 1 : 2;
    } else if (sig == SIGCONT) {
        /* Async-signal-safe: a lock-free atomic load and clock_gettime. */
        k8slease_elector *e = atomic_load(&current);
        int64_t d = e ? k8slease_elector_leader_deadline(e) : 0;

        cont_leader = e ? d != 0 && chaos_now_ns() < d : atomic_load(&seed_leading);
        cont_flag = 1;
    } else {
        quit_flag = 1;
    }
}

static void on_handoff_signal(int sig, siginfo_t *info, void *uc)
{
    (void)sig;
    (void)uc;
    handoff_flag = 1 + (info->si_code == SI_QUEUE ? info->si_value.sival_int : 0);
}

static void on_started(int64_t epoch, void *ud)
{
    term *t = ud;
    int64_t now = chaos_now_ns();

    /* Waits, at most for the end of k8slease_elector_start() in the main
     * thread, until t->e is published. */
    pthread_mutex_lock(&t->mu);
    t->started = 1;
    t->epoch = epoch;
    t->t_started = now;
    t->d_first = t->e ? k8slease_elector_leader_deadline(t->e) : 0;
    pthread_mutex_unlock(&t->mu);
}

static void on_stopped(void *ud)
{
    term *t = ud;
    int64_t now = chaos_now_ns();
    k8slease_elector_stats st = {.version = K8SLEASE_ELECTOR_STATS_VERSION};
    k8slease_elector *e;
    int started;

    pthread_mutex_lock(&t->mu);
    started = t->started && !t->stopped;
    e = t->e;
    pthread_mutex_unlock(&t->mu);
    if (!started)
        return; /* an election that never led */
    /* Every write answered so far is counted; the release comes after. */
    if (e && k8slease_elector_stats_get(e, &st) < 0)
        st.last_renew_ns = 0;
    pthread_mutex_lock(&t->mu);
    t->stopped = 1;
    t->t_stopped = now;
    t->renew_at_stop = st.last_renew_ns;
    pthread_mutex_unlock(&t->mu);
}

static int term_started(term *t)
{
    int s;

    pthread_mutex_lock(&t->mu);
    s = t->started;
    pthread_mutex_unlock(&t->mu);
    return s;
}

static void heartbeat(cand *c, k8slease_elector *e, char state)
{
    int64_t now = chaos_now_ns();
    k8slease_elector_stats st = {.version = K8SLEASE_ELECTOR_STATS_VERSION};

    if (cont_flag) {
        cont_flag = 0;
        emit(now, "CONT", "%d", (int)cont_leader);
    }
    if (now < c->next_hb)
        return;
    c->next_hb = now + HB_INTERVAL_NS;
    if (!e || k8slease_elector_stats_get(e, &st) < 0)
        memset(&st, 0, sizeof(st));
    emit(now, "HB", "%c %d %" PRIu64 " %d", state, c->campaign, st.requests, st.watch_healthy);
}

static int64_t max64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* The leading part of a term, from the first non-zero deadline (or the end
 * of an election that led) to the LOSE line. */
static void report_term(cand *c, term *t, k8slease_elector *e, int64_t lead_lo,
                        int64_t first_nonzero_after)
{
    k8slease_elector_stats st = {.version = K8SLEASE_ELECTOR_STATS_VERSION};
    int64_t epoch, d_first, t_started, dmax, zero_seen = INT64_MAX, valid_lo, ending_since = 0;
    int over = 0, stop_sent = 0;

    /* wait_elected returns only after on_started_leading has returned. */
    if (k8slease_elector_wait_elected(e, WAIT_CALLBACK_MS, NULL) == K8SLEASE_ETIMEOUT)
        emit(chaos_now_ns(), "ERR", "elected, but on_started_leading did not return within %d ms",
             WAIT_CALLBACK_MS);
    pthread_mutex_lock(&t->mu);
    epoch = t->epoch;
    d_first = t->d_first;
    t_started = t->t_started;
    pthread_mutex_unlock(&t->mu);
    if (c->lead_span_ns && d_first)
        lead_lo = max64(lead_lo, d_first - c->lead_span_ns);
    emit(lead_lo, "LEAD", "%" PRId64 " %" PRId64, epoch, min64(t_started, first_nonzero_after));
    dmax = d_first;
    valid_lo = lead_lo;

    while (!over) {
        int64_t t0, d, t1;

        if (handoff_flag && !quit_flag && !stop_sent) {
            int v = handoff_flag - 1;
            const char *to = v > 0 && v <= c->npeers ? c->peers[v - 1] : NULL;
            int64_t t_call = chaos_now_ns();
            int rc;

            handoff_flag = 0;
            release_flag = 0;
            stop_sent = 1;
            /* Like the release below (on_stopped_leading first), but the
             * write names the successor; waits until it is written. */
            rc = k8slease_elector_handoff(e, to, 0);
            if (rc < 0)
                emit(chaos_now_ns(), "ERR", "k8slease_elector_handoff: %s", k8slease_error_last());
            emit(t_call, "HANDOFF", "%s %" PRId64, to ? to : "-",
                 (chaos_now_ns() - t_call) / CHAOS_NS_PER_MS);
        }
        if ((quit_flag || release_flag) && !stop_sent) {
            if (release_flag == 2)
                c->pause_until = chaos_now_ns() + c->t.lease_duration_ms * CHAOS_NS_PER_MS;
            release_flag = 0;
            stop_sent = 1;
            /* on_stopped_leading runs first, then the release; waits until
             * the election is over (at most renew_deadline). */
            k8slease_elector_stop(e, 1);
        }
        t0 = chaos_now_ns();
        d = k8slease_elector_leader_deadline(e);
        t1 = chaos_now_ns();
        if (d != 0) {
            dmax = max64(dmax, d);
            if (t1 < d)
                valid_lo = t0;
        } else if (zero_seen == INT64_MAX) {
            zero_seen = t1;
        }
        if (!ending_since && (d == 0 || t1 >= d))
            ending_since = t1;
        heartbeat(c, e, ending_since ? 'E' : 'L');
        over = k8slease_elector_wait_lost(e, c->sample_ms) == 0;
    }

    /* wait_lost returned 0: the term is over by now. */
    int64_t seen = min64(zero_seen, chaos_now_ns()), dfinal = dmax, last_renew = 0;

    pthread_mutex_lock(&t->mu);
    if (t->stopped) {
        seen = min64(seen, t->t_stopped);
        last_renew = t->renew_at_stop;
    }
    pthread_mutex_unlock(&t->mu);
    /* Without the snapshot of on_stopped_leading (not expected), the final
     * counters: they may include the release, which only makes the bound
     * later. */
    if (!last_renew && k8slease_elector_stats_get(e, &st) == 0)
        last_renew = st.last_renew_ns;
    if (last_renew > 0)
        dfinal = max64(dfinal, last_renew + c->lose_span_ns);
    if (c->naive)
        dfinal = INT64_MAX;
    int64_t lose = min64(seen, dfinal), done = chaos_now_ns();

    emit(lose, "LOSE", "%" PRId64 " %" PRId64 " %s %" PRId64 " %" PRId64 " %" PRId64, epoch,
         min64(valid_lo, lose), seen <= dfinal ? "seen" : "deadline",
         (done - (ending_since ? ending_since : done)) / CHAOS_NS_PER_MS, seen, dfinal);
}

/* One elector: campaign, report the term if there is one. 0, or -1 when
 * no elector could be started. */
static int campaign(cand *c)
{
    k8slease_elector_options o = K8SLEASE_ELECTOR_OPTIONS_INIT;
    k8slease_elector *e = NULL;
    term t = {0};
    int64_t lead_lo, first_nonzero_after = INT64_MAX;
    int rc, over = 0;

    pthread_mutex_init(&t.mu, NULL);
    o.name = c->lease;
    o.identity = c->name;
    o.lease_duration_ms = c->t.lease_duration_ms;
    o.renew_deadline_ms = c->t.renew_deadline_ms;
    o.retry_period_ms = c->t.retry_period_ms;
    o.on_started_leading = on_started;
    o.on_stopped_leading = on_stopped;
    o.user_data = &t;
    o.handoff_candidate = c->handoff_candidate;
    o.revision = c->revision;
    o.priority = c->priority;
    o.poll_only = c->poll_only;
    if (c->pod) {
        o.crash_failover = 1;
        o.pod_namespace = c->pod_ns;
        o.pod_name = c->pod;
    }
    c->campaign++;
    lead_lo = chaos_now_ns(); /* a new elector is not leader before it exists */
    emit(lead_lo, "CAMPAIGN", "%d", c->campaign);
    pthread_mutex_lock(&t.mu);
    rc = k8slease_elector_start(&e, c->client, &o);
    t.e = e;
    pthread_mutex_unlock(&t.mu);
    if (rc < 0) {
        emit(chaos_now_ns(), "ERR", "k8slease_elector_start: %s", k8slease_error_last());
        pthread_mutex_destroy(&t.mu);
        return -1;
    }
    atomic_store(&current, e);

    /* Campaigning: sample the deadline until it is non-zero or the
     * election is over. */
    for (;;) {
        int64_t t0, d;

        release_flag = 0; /* not leading: nothing to hand over */
        handoff_flag = 0;
        if (quit_flag) {
            k8slease_elector_stop(e, 1);
            over = 1;
            break;
        }
        t0 = chaos_now_ns();
        d = k8slease_elector_leader_deadline(e);
        if (d != 0) {
            first_nonzero_after = chaos_now_ns();
            break;
        }
        if (!term_started(&t))
            lead_lo = t0; /* read 0 before t_store, see the top comment */
        heartbeat(c, e, 'C');
        rc = k8slease_elector_wait_elected(e, c->sample_ms, NULL);
        if (rc == K8SLEASE_ESTATE) {
            over = 1;
            break;
        }
    }
    if (term_started(&t))
        report_term(c, &t, e, lead_lo, first_nonzero_after);
    else if (over && !quit_flag)
        /* Both backends keep campaigning until stopped. */
        emit(chaos_now_ns(), "ERR", "election ended without leading: %s", k8slease_error_last());
    atomic_store(&current, NULL);
    k8slease_elector_free(e);
    pthread_mutex_destroy(&t.mu);
    return 0;
}

/* ---- Seed-ABI mode (see the top comment) -------------------------------- */

static void seed_free(char **err)
{
    free(*err); /* the seed ABI's strings are malloc'ed; the caller frees them */
    *err = NULL;
}

/* The master thread: Mooncake's election loop over the seed ABI. */
static void *seed_master(void *arg)
{
    cand *c = arg;
    seed *s = &c->s;
    char *lease = (char *)c->lease, *name = (char *)c->name, *err = NULL;
    int timeout_s = 2 * s->ld_s; /* Mooncake: kElectionTimeoutSec = 2 x lease */

    for (;;) {
        long long epoch = 0;
        int64_t t_elected, t_lost, cancel_ns, pause;
        int rc, quit;

        for (;;) { /* the pause SIGUSR2 asked for */
            struct timespec ts = {0, 10 * CHAOS_NS_PER_MS};

            pthread_mutex_lock(&s->mu);
            quit = s->quit;
            pause = s->pause_until;
            pthread_mutex_unlock(&s->mu);
            if (quit || chaos_now_ns() >= pause)
                break;
            nanosleep(&ts, NULL);
        }
        /* Under mu: a SIGTERM either comes before (no election) or cancels it. */
        pthread_mutex_lock(&s->mu);
        if (s->quit) {
            pthread_mutex_unlock(&s->mu);
            break;
        }
        c->campaign++;
        emit(chaos_now_ns(), "CAMPAIGN", "%d", c->campaign);
        rc = K8sLeaseRunElection(s->ns, lease, name, s->ld_s, s->rd_s, s->rp_s, &err);
        s->state = rc == 0 ? SEED_CAMPAIGNING : SEED_IDLE;
        pthread_mutex_unlock(&s->mu);
        if (rc < 0) {
            /* Never expected: the previous term is over when we get here. */
            emit(chaos_now_ns(), "ERR", "K8sLeaseRunElection: %s", err ? err : "?");
            seed_free(&err);
            s->failed = 1;
            break;
        }

        rc = K8sLeaseWaitElected(s->ns, lease, timeout_s, &epoch, &err);
        t_elected = chaos_now_ns();
        if (rc < 0) {
            pthread_mutex_lock(&s->mu);
            s->state = SEED_IDLE;
            quit = s->quit;
            pthread_mutex_unlock(&s->mu);
            if (!quit && err && strstr(err, "timed out")) {
                char *holder = NULL;
                const char *shown = "-"; /* no holder */
                long long transitions = 0;

                /* As Mooncake's TryAcquireLeadership: the election is over
                 * (the library cancelled it); cancel anyway, read the view. */
                seed_free(&err);
                K8sLeaseCancelElection(s->ns, lease, &err);
                seed_free(&err);
                rc = K8sLeaseGetHolder(s->ns, lease, &holder, &transitions, &err);
                if (rc < 0)
                    shown = "?";
                else if (holder)
                    shown = holder;
                emit(chaos_now_ns(), "TIMEOUT", "%d %s %lld", timeout_s, shown, transitions);
                free(holder);
            } else if (!quit) {
                /* The election ended by itself (the natives' ERR). */
                emit(chaos_now_ns(), "ERR", "K8sLeaseWaitElected: %s", err ? err : "?");
            }
            seed_free(&err);
            continue;
        }

        pthread_mutex_lock(&s->mu);
        s->state = SEED_LEADING;
        s->cancel_ns = 0;
        atomic_store(&seed_leading, 1);
        pthread_mutex_unlock(&s->mu);
        emit(t_elected, "ELECTED", "%lld", epoch);

        /* Mooncake's leadership monitor: its return ends the term. */
        rc = K8sLeaseWaitLost(s->ns, lease, &err);
        t_lost = chaos_now_ns();
        pthread_mutex_lock(&s->mu);
        s->state = SEED_IDLE;
        atomic_store(&seed_leading, 0);
        cancel_ns = s->cancel_ns;
        pthread_mutex_unlock(&s->mu);
        if (rc < 0)
            emit(t_lost, "ERR", "K8sLeaseWaitLost: %s", err ? err : "?");
        seed_free(&err);
        /* The mutant (--naive): the end as the old WaitLost gave it, up to
         * renew_deadline late. */
        emit(c->naive ? t_lost + (int64_t)s->rd_s * CHAOS_NS_PER_S : t_lost, "LOST",
             "%lld %s %" PRId64 " %" PRId64, epoch, cancel_ns ? "cancel" : "lost", cancel_ns,
             t_lost);
    }
    pthread_mutex_lock(&s->mu);
    s->done = 1;
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* The program cancels its term (a graceful handover, SIGUSR1/2, or the
 * end, SIGTERM) (mu held). */
static void seed_cancel(cand *c)
{
    seed *s = &c->s;
    char *err = NULL;

    if (s->state == SEED_LEADING && !s->cancel_ns)
        s->cancel_ns = chaos_now_ns();
    if (K8sLeaseCancelElection(s->ns, (char *)c->lease, &err) < 0)
        emit(chaos_now_ns(), "ERR", "K8sLeaseCancelElection: %s", err ? err : "?");
    seed_free(&err);
}

/* The main thread in seed-ABI mode: signals and heartbeats while the
 * master thread campaigns. 0, or 1 when a call failed. Called with our
 * signals blocked (the master thread inherits that), unblocks them. */
static int seed_run(cand *c, const sigset_t *old)
{
    seed *s = &c->s;
    pthread_t master;
    int quit_sent = 0, done = 0;

    if (pthread_create(&master, NULL, seed_master, c) != 0) {
        emit(chaos_now_ns(), "ERR", "pthread_create failed");
        return 1;
    }
    pthread_sigmask(SIG_SETMASK, old, NULL);
    while (!done) {
        struct timespec ts = {0, 10 * CHAOS_NS_PER_MS};
        int64_t now = chaos_now_ns();
        int campaign;
        char state;

        pthread_mutex_lock(&s->mu);
        if (quit_flag && !quit_sent) {
            quit_sent = 1;
            s->quit = 1;
            if (s->state != SEED_IDLE)
                seed_cancel(c);
        }
        if (release_flag) {
            if (s->state == SEED_LEADING && !s->cancel_ns) {
                if (release_flag == 2)
                    s->pause_until = now + (int64_t)s->ld_s * CHAOS_NS_PER_S;
                seed_cancel(c);
            }
            release_flag = 0;
        }
        state = s->state == SEED_LEADING ? 'L' : now < s->pause_until ? 'P' : 'C';
        done = s->done;
        campaign = c->campaign;
        pthread_mutex_unlock(&s->mu);
        if (cont_flag) {
            cont_flag = 0;
            emit(now, "CONT", "%d", (int)cont_leader);
        }
        if (now >= c->next_hb) {
            c->next_hb = now + HB_INTERVAL_NS;
            emit(now, "HB", "%c %d 0 0", state, campaign);
        }
        if (!done)
            nanosleep(&ts, NULL); /* a signal cuts it short */
    }
    pthread_join(master, NULL);
    return s->failed;
}

/* Seed-ABI mode: the namespace the native candidates use (their client's
 * default), the timings in whole seconds, $KUBECONFIG, K8sLeaseInit. 0 or
 * -1 (an ERR line written). */
static int seed_setup(cand *c)
{
    k8slease_client_options co = K8SLEASE_CLIENT_OPTIONS_INIT;
    k8slease_client *client = NULL;
    seed *s = &c->s;
    char *err = NULL;

    if (c->t.lease_duration_ms % 1000 || c->t.renew_deadline_ms % 1000 ||
        c->t.retry_period_ms % 1000) {
        emit(chaos_now_ns(), "ERR", "--seed-abi: the timings must be whole seconds");
        return -1;
    }
    s->ld_s = (int)(c->t.lease_duration_ms / 1000);
    s->rd_s = (int)(c->t.renew_deadline_ms / 1000);
    s->rp_s = (int)(c->t.retry_period_ms / 1000);
    co.kubeconfig = c->kubeconfig;
    if (k8slease_client_new(&client, &co) < 0) {
        emit(chaos_now_ns(), "ERR", "k8slease_client_new: %s", k8slease_error_last());
        return -1;
    }
    snprintf(s->ns, sizeof(s->ns), "%s", k8slease_client_namespace(client));
    k8slease_client_free(client);
    /* The seed ABI's client: in-cluster config, else $KUBECONFIG. */
    unsetenv("KUBERNETES_SERVICE_HOST");
    setenv("KUBECONFIG", c->kubeconfig, 1);
    /* Crash failover: what the Downward API would give a Pod's program. */
    if (c->pod) {
        setenv("K8SLEASE_CRASH_FAILOVER", "1", 1);
        setenv("POD_NAME", c->pod, 1);
        setenv("POD_NAMESPACE", c->pod_ns, 1);
    } else {
        unsetenv("K8SLEASE_CRASH_FAILOVER");
    }
    if (K8sLeaseInit(&err) < 0) {
        emit(chaos_now_ns(), "ERR", "K8sLeaseInit: %s", err ? err : "?");
        seed_free(&err);
        return -1;
    }
    return 0;
}

static int parse_timing(const char *s, chaos_timing *t)
{
    return sscanf(s, "%" SCNd64 "/%" SCNd64 "/%" SCNd64, &t->lease_duration_ms,
                  &t->renew_deadline_ms, &t->retry_period_ms) == 3
               ? 0
               : -1;
}

static int usage(void)
{
    fprintf(stderr, "usage: k8slease-chaos-candidate --name NAME --lease NAME --timing LD/RD/RP "
                    "(--kubeconfig FILE | --etcd-endpoints URLS) [--sample-ms N]\n"
                    "         [--naive 1] [--seed-abi 1 (with --kubeconfig; timings in whole "
                    "seconds)]\n"
                    "         [--pod NAME --pod-namespace NS (crash failover; with "
                    "--kubeconfig)]\n"
                    "         [--handoff-candidate 1 [--revision REV] [--priority N]] "
                    "[--poll-only 1] [--peers NAME,...]\n");
    return 2;
}

int main(int argc, char **argv)
{
    k8slease_client_options co = K8SLEASE_CLIENT_OPTIONS_INIT;
    cand c = {.sample_ms = 1};
    char agent[96];
    struct sigaction sa;
    sigset_t set, old;
    int code = 0;

    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];

        if (!strcmp(k, "--name"))
            c.name = v;
        else if (!strcmp(k, "--lease"))
            c.lease = v;
        else if (!strcmp(k, "--kubeconfig"))
            c.kubeconfig = v;
        else if (!strcmp(k, "--etcd-endpoints"))
            c.etcd_endpoints = v;
        else if (!strcmp(k, "--naive"))
            c.naive = atoi(v);
        else if (!strcmp(k, "--seed-abi"))
            c.seed_abi = atoi(v);
        else if (!strcmp(k, "--sample-ms"))
            c.sample_ms = atoi(v);
        else if (!strcmp(k, "--pod"))
            c.pod = v;
        else if (!strcmp(k, "--pod-namespace"))
            c.pod_ns = v;
        else if (!strcmp(k, "--handoff-candidate"))
            c.handoff_candidate = atoi(v);
        else if (!strcmp(k, "--revision"))
            c.revision = v;
        else if (!strcmp(k, "--priority"))
            c.priority = atoi(v);
        else if (!strcmp(k, "--poll-only"))
            c.poll_only = atoi(v);
        else if (!strcmp(k, "--peers") && strlen(v) < sizeof(c.peers_buf)) {
            char *save = NULL, *tok;

            snprintf(c.peers_buf, sizeof(c.peers_buf), "%s", v);
            for (tok = strtok_r(c.peers_buf, ",", &save); tok && c.npeers < MAX_PEERS;
                 tok = strtok_r(NULL, ",", &save))
                c.peers[c.npeers++] = tok;
        } else if (!strcmp(k, "--timing") && parse_timing(v, &c.t) == 0)
            continue;
        else
            return usage();
    }
    if (!c.name || !c.lease || !c.t.lease_duration_ms || c.sample_ms <= 0 ||
        !c.kubeconfig == !c.etcd_endpoints || (c.seed_abi && !c.kubeconfig) ||
        !c.pod != !c.pod_ns || (c.pod && !c.kubeconfig) ||
        ((c.handoff_candidate || c.poll_only) && (!c.kubeconfig || c.seed_abi)))
        return usage();
    self = c.name;
    c.etcd = c.etcd_endpoints != NULL;
    if (c.etcd) {
        int64_t ttl_s = (c.t.lease_duration_ms + 999) / 1000;

        c.lead_span_ns = c.lose_span_ns = ttl_s * CHAOS_NS_PER_S;
    } else {
        c.lead_span_ns = c.lose_span_ns = c.t.renew_deadline_ms * CHAOS_NS_PER_MS;
    }
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() == 1)
        return 1; /* the driver died before the prctl */

    /* The library's loop thread inherits a mask blocking our signals, so
     * the handlers run on the main thread only. */
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGUSR2);
    sigaddset(&set, SIGCONT);
    sigaddset(&set, SIGRTMIN);
    pthread_sigmask(SIG_BLOCK, &set, &old);
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGUSR2, &sa, NULL);
    sigaction(SIGCONT, &sa, NULL);
    sa.sa_handler = NULL;
    sa.sa_sigaction = on_handoff_signal;
    sa.sa_flags = SA_RESTART | SA_SIGINFO;
    sigaction(SIGRTMIN, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    if (c.seed_abi) {
        /* The library's threads (K8sLeaseInit) and the master thread
         * inherit the blocked mask. */
        pthread_mutex_init(&c.s.mu, NULL);
        if (seed_setup(&c) < 0)
            return 1;
        code = seed_run(&c, &old);
        emit(chaos_now_ns(), "BYE", NULL);
        /* exit() waits for the releases still on their way (atexit of the
         * seed ABI), bounded by the renew deadline. */
        return code;
    }
    snprintf(agent, sizeof(agent), CHAOS_UA_PREFIX "%s", c.name);
    co.user_agent = agent;
    if (c.etcd) {
        co.backend = K8SLEASE_BACKEND_ETCD;
        co.etcd_endpoints = c.etcd_endpoints;
    } else {
        co.kubeconfig = c.kubeconfig;
    }
    if (k8slease_client_new(&c.client, &co) < 0) {
        emit(chaos_now_ns(), "ERR", "k8slease_client_new: %s", k8slease_error_last());
        return 1;
    }
    /* A library without the etcd driver would fall back to a kubeconfig:
     * make sure we talk to the etcd we were given. */
    if (c.etcd && strncmp(k8slease_client_server(c.client), c.etcd_endpoints,
                          strlen(k8slease_client_server(c.client)))) {
        emit(chaos_now_ns(), "ERR", "backend etcd unavailable: the client talks to %s",
             k8slease_client_server(c.client));
        k8slease_client_free(c.client);
        return 1;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);

    while (!quit_flag) {
        /* The pause SIGUSR2 asked for: a timed part of the fault. */
        while (!quit_flag && chaos_now_ns() < c.pause_until) {
            struct timespec ts = {0, 10 * CHAOS_NS_PER_MS};

            heartbeat(&c, NULL, 'P');
            nanosleep(&ts, NULL);
        }
        if (!quit_flag && campaign(&c) < 0) {
            code = 1;
            break;
        }
    }
    k8slease_client_free(c.client);
    emit(chaos_now_ns(), "BYE", NULL);
    return code;
}
