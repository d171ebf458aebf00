/*
 * observer.h - the chaos suite's invariant checker. The driver feeds it
 * what the candidates report (terms with honest bounds, see candidate.c),
 * the faults it injected and the violations it saw itself; obs_check()
 * proves or refutes the invariants of docs/chaos.md from that record:
 *
 *  - 0 overlaps: no two terms intersect, taking each term as
 *    [LEAD lower bound, LOSE upper bound], which contains the whole time
 *    is_leader was true;
 *  - epochs of successive terms (in time order) strictly increase;
 *  - recovery: every leaderless gap ends within the bound (lease_duration
 *    + 2 x retry_period + allowance) after the later of its start and the
 *    end of every fault that blocks a takeover (server-wide faults) and
 *    overlaps it. Gaps are measured conservatively for liveness: a term
 *    counts from its LEAD upper bound. The lease_duration is that of the
 *    candidate whose term the gap follows (a seed-ABI candidate's whole
 *    seconds may be longer);
 *  - crash failover (obs_crash): after a leader killed, the next term of
 *    another candidate comes on the kubelet's report or at expiry, never
 *    earlier than the Lease could expire without evidence; the figures per
 *    fault kind (with the report, without).
 *
 * Seed-ABI terms (obs_seed_lead, obs_seed_lose) are the terms of a program
 * on libk8s_lease_wrapper.h as the program sees them: from the return of
 * K8sLeaseWaitElected to the return of K8sLeaseWaitLost. They take part in
 * every check above like the others (so WaitLost's return must come before
 * the next term's start), and obs_check reports each one with its margin.
 *
 * No I/O but the report, no clock: everything comes in with its time, so
 * the checker is tested on made-up records (test_observer.c).
 */
#ifndef K8SLEASE_CHAOS_OBSERVER_H
#define K8SLEASE_CHAOS_OBSERVER_H

#include <stdint.h>
#include <stdio.h>

#include "chaos.h"

typedef enum chaos_fault_kind {
    CF_KILL,      /* SIGKILL of the leader (restarted later) */
    CF_STOP,      /* SIGSTOP of the leader beyond lease_duration, then SIGCONT */
    CF_RELEASE,   /* SIGUSR1: the leader stops releasing the lease (graceful handover) */
    CF_CUTOFF,    /* one candidate cut off from the server (rule scoped by user agent) */
    CF_RESTART,   /* test server restart keeping its state */
    CF_LATENCY,   /* latency above renew_deadline on every Lease request */
    CF_HANG,      /* the server holds every Lease request */
    CF_ERR5XX,    /* 500/503 storm */
    CF_ERR429,    /* 429 storm */
    CF_RESET,     /* connections reset (RST), open watch streams aborted */
    CF_FREEZE,    /* watch streams frozen (sometimes with a release inside) */
    CF_ETCD_STOP, /* etcd frozen (SIGSTOP, SIGCONT) */
    CF_ETCD_KILL, /* etcd killed and restarted on its data */
    CF_API_STOP,  /* real kube-apiserver frozen (SIGSTOP, SIGCONT) */
    CF_API_KILL,  /* real kube-apiserver killed and started again (same etcd) */
    CF_HANDOVER,  /* to a seed-ABI candidate: native followers frozen, the leader releases */
    /* An HA control plane (envtest.sh with replicas behind haproxy): */
    CF_REPLICA_HANG, /* one kube-apiserver replica frozen beyond renew_deadline, then thawed */
    CF_REPLICA_KILL, /* one replica killed and started again */
    CF_LB_RESTART,   /* the balancer (haproxy) killed and started again */
    /* Crash failover (candidates on Pods, the driver as their kubelet): */
    CF_CRASH, /* SIGKILL of the leader, the kubelet reports its container terminated 0-2 s later */
    /* Planned handoff (the elector's call, or the operator's request): */
    CF_HANDOFF, /* the leader hands over to a named candidate or the best known one */
    CF_NKINDS
} chaos_fault_kind;

const char *chaos_fault_name(chaos_fault_kind k);

typedef struct obs obs;

typedef struct obs_params {
    chaos_timing timing;
    int64_t allowance_ns; /* scheduling allowance on top of LD + 2 x RP */
    int ncand;
    const char *const *names; /* ncand names, borrowed */
    /* Optional: ncand lease durations (ms), for the recovery bound of a gap
     * after that candidate's term; NULL: timing.lease_duration_ms. */
    const int64_t *lease_ms;
    /* A frozen seed-ABI leader's WaitLost must return within this after
     * SIGCONT (obs_seed_lose); 0: 1 s. */
    int64_t thaw_limit_ns;
    /* Optional: ncand renew deadlines (ms), for the earliest expiry of a
     * killed leader's Lease when it is not known (obs_crash);
     * NULL: timing.renew_deadline_ms. */
    const int64_t *renew_ms;
} obs_params;

obs *obs_new(const obs_params *p);
void obs_free(obs *o);

/* The candidates were started at t: the first gap starts here. */
void obs_begin(obs *o, int64_t t);
/* A LEAD line: term of candidate cand. Returns the term's index. */
int obs_lead(obs *o, int cand, int64_t epoch, int64_t lo, int64_t hi);
/* A LOSE line for the open term of cand (violation if none or another epoch). */
void obs_lose(obs *o, int cand, int64_t epoch, int64_t hi, int64_t lo, int by_deadline);
/* A seed-ABI candidate's term: its K8sLeaseWaitElected returned EPOCH at
 * t_elected (the program leads from then on). Returns the term's index. */
int obs_seed_lead(obs *o, int cand, int64_t epoch, int64_t t_elected);
/* Its end: K8sLeaseWaitLost returned at t_lost; cancel_ns > 0: the program
 * had called K8sLeaseCancelElection at cancel_ns. frozen_ns > 0: the
 * process was frozen (SIGSTOP, seen stopped at frozen_ns) during the term
 * and thawed (SIGCONT) at thaw_ns <= t_lost: a frozen program does nothing,
 * so the term ends at frozen_ns for the checks, and WaitLost must return
 * within thaw_limit_ns of the thaw (a violation otherwise): the moment
 * between the thaw and that return is a window no program on the seed ABI
 * can close (it has no is_leader to ask), bounded here. */
void obs_seed_lose(obs *o, int cand, int64_t epoch, int64_t t_lost, int64_t cancel_ns,
                   int64_t frozen_ns, int64_t thaw_ns);
/* Why the library ended a seed-ABI term (its "lost leadership (epoch N):
 * WHY" log line), for the report; the term of cand with that epoch. */
void obs_seed_why(obs *o, int cand, int64_t epoch, const char *why);
/* cand's process is gone (reaped at t): its open term, if any, ends at t. */
void obs_dead(obs *o, int cand, int64_t t);
/* Index of cand's open term, or -1. */
int obs_open_term(const obs *o, int cand);
/* The candidate of term i. */
int obs_term_cand(const obs *o, int i);
/* Lower / upper bound of the start of term i, upper bound of its end. */
int64_t obs_term_lead(const obs *o, int i);
int64_t obs_term_lose(const obs *o, int i);
int obs_term_closed(const obs *o, int i);
/* Number of terms so far. */
int obs_terms(const obs *o);
/* A fault: effects from start to end; blocking: it may keep every
 * candidate from taking over (server-wide), so recovery counts from its end. */
void obs_fault(obs *o, chaos_fault_kind kind, int64_t start, int64_t end, int blocking);
/* The leader's term when the last fault (obs_fault) began: the fault cost
 * that term if it ended before the fault's end + that candidate's lease
 * duration (and before the next fault began). must_keep: losing it is a
 * violation (an HA fault the timings and the balancer let a leader ride
 * out, docs/chaos.md); otherwise it is only counted. */
void obs_fault_term(obs *o, int term, int must_keep);
/* Crash failover: the leader cand was killed (SIGKILL) at t_kill by a
 * fault of kind (CF_CRASH, CF_KILL). t_expiry: the earliest its Lease could
 * expire for anyone (its renewTime, read just before the kill, + its
 * leaseDurationSeconds, on this clock; 0: unknown, then t_kill + its lease
 * duration - its renew deadline: a leader's last renewal is at most a
 * renew deadline old). t_report: when the simulated kubelet began to write
 * the report of its container instance terminated (0: no report, the
 * kubelet silent as on a node that is down); evidence: that report is
 * evidence for the leader's crash failover record in the Lease (the
 * record names that instance and the report's finishedAt is in a later
 * second than its verifiedAt). obs_check measures the failover: the next
 * term's start after t_kill (its LEAD upper bound), from the kill and from
 * the report, unless that term is cand's own (restarted before anyone took
 * over, its identity still holds the Lease and takes it back). A next term
 * whose acquiring write began (LEAD lower bound) before t_expiry came on
 * the report if evidence was reported before; without, 100 ms or more
 * before t_expiry, it is a takeover without evidence: a violation. */
void obs_crash(obs *o, chaos_fault_kind kind, int cand, int64_t t_kill, int64_t t_expiry,
               int64_t t_report, int evidence);
/* A violation seen by the driver (printed at once to stderr and counted). */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
void obs_violation(obs *o, int64_t t, const char *fmt, ...);
/* Observation ends at t (the driver starts shutting down). */
void obs_end(obs *o, int64_t t);
/* Silence obs_violation's immediate printing (tests). */
void obs_quiet(obs *o, int quiet);

/* Crash failover figures of one fault kind (obs_crash). */
typedef struct obs_failover {
    int count;     /* crashes */
    int reported;  /* with the kubelet's report */
    int evidence;  /* of which the report was evidence */
    int self;      /* followed by a term of the same candidate, restarted: not measured */
    int measured;  /* followed by a term of another candidate before the end */
    int early;     /* that term began before the Lease could expire (t_expiry) */
    int by_report; /* early, and after a report that was evidence: the report made it */
    int late;      /* evidence reported before that moment, but the next term only after it */
    /* SIGKILL to the next term (its LEAD upper bound), over `measured`: */
    int64_t p50_ns, p99_ns, max_ns;
    /* The report to the next term, over `by_report`: */
    int64_t rep_p50_ns, rep_p99_ns, rep_max_ns;
} obs_failover;

typedef struct obs_result {
    int terms;           /* LEAD lines (false -> true transitions of is_leader) */
    int loses;           /* terms ended (true -> false), killed ones included */
    int transitions;     /* changes of term: terms - 1 */
    int overlaps;        /* pairs of intersecting terms */
    int epoch_errors;    /* successive terms without a greater epoch */
    int recovery_errors; /* gaps above the bound */
    int violations;      /* all of the above + the driver's */
    int faults[CF_NKINDS];
    int64_t worst_recovery_ns;
    chaos_fault_kind worst_kind; /* the fault the worst gap followed; CF_NKINDS: none */
    int64_t worst_at_ns;         /* start of that gap, from obs_begin */
    int64_t worst_by_kind[CF_NKINDS];
    int led[CF_NKINDS];       /* faults of that kind that began with a leader (obs_fault_term) */
    int lost[CF_NKINDS];      /* of which cost the leader its term */
    int must_keep[CF_NKINDS]; /* faults whose term had to be kept */
    int lost_errors;          /* terms lost that had to be kept */
    int64_t bound_ns;
    int gaps;
    int64_t median_gap_ns;
    /* Closest call: the smallest margin between a term's end (upper bound)
     * and the next term's start (lower bound), and its kind of end. */
    int64_t min_margin_ns;
    int min_margin_dead;  /* that term ended by its process being killed */
    int64_t bound_max_ns; /* the largest per-candidate recovery bound */
    /* Seed-ABI terms: margin = the next term's start (lower bound) - the
     * return of WaitLost (or the freeze, for a frozen one). */
    int seed_terms;
    int seed_closed;              /* of which ended by WaitLost (not killed, not open) */
    int seed_cancelled;           /* ended by the program's K8sLeaseCancelElection */
    int seed_frozen;              /* frozen while leading */
    int seed_margins;             /* terms with a next term to compare with */
    int64_t seed_min_margin_ns;   /* INT64_MAX: none */
    int64_t seed_min_margin_lost; /* the smallest among terms the library ended */
    int64_t seed_worst_cancel_ns; /* largest WaitLost return - K8sLeaseCancelElection */
    int64_t seed_worst_thaw_ns;   /* largest WaitLost return - SIGCONT */
    int seed_thaw_errors;         /* WaitLost later than thaw_limit after SIGCONT */
    /* Crash failover, per fault kind (CF_CRASH: with the report, CF_KILL:
     * without); only kinds given to obs_crash. */
    obs_failover failover[CF_NKINDS];
    int crash_errors; /* takeovers without evidence before the Lease could expire */
} obs_result;

/* Run every check, print the findings (one line each) to out (may be
 * NULL) and fill *r. Returns r->violations. */
int obs_check(obs *o, FILE *out, obs_result *r);

#endif
