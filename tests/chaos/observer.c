/*
 * observer.c - the chaos suite's invariant checker (observer.h).
 */
#include "observer.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct oterm {
    int cand;
    int64_t epoch;
    int64_t lead_lo, lead_hi; /* is_leader turned true in [lead_lo, lead_hi] */
    int64_t lose_lo, lose_hi; /* and false in [lose_lo, lose_hi] */
    int closed;
    int by_deadline; /* LOSE's upper bound came from the deadline */
    int dead;        /* closed because the process was reaped */
    /* Seed-ABI terms (obs_seed_lead): lead = WaitElected's return. */
    int seed;
    int64_t wait_lost; /* WaitLost returned (0: not, e.g. killed) */
    int64_t cancel;    /* the program cancelled (0: it did not) */
    int64_t frozen;    /* frozen at (0: not); lose_hi is then this */
    int64_t thaw;      /* SIGCONT */
    char why[96];      /* the library's reason, from its log line */
} oterm;

typedef struct ofault {
    chaos_fault_kind kind;
    int64_t start, end;
    int blocking;
    int term;      /* the leader's term when it began (obs_fault_term), -1 none */
    int must_keep; /* losing that term is a violation */
} ofault;

typedef struct ocrash {
    chaos_fault_kind kind;
    int cand;
    int64_t t_kill, t_expiry, t_report; /* t_expiry, t_report 0: unknown, none */
    int evidence;
} ocrash;

struct obs {
    obs_params p;
    int64_t begin, end;
    int began, ended;
    oterm *terms;
    int nterms, capterms;
    ofault *faults;
    int nfaults, capfaults;
    ocrash *crashes;
    int ncrashes, capcrashes;
    int violations;
    int quiet;
};

static const char *const fault_names[CF_NKINDS] = {
    "kill",         "stop",           "release",        "cutoff",
    "restart",      "latency",        "hang",           "5xx",
    "429",          "reset",          "freeze",         "etcd-stop",
    "etcd-kill",    "apiserver-stop", "apiserver-kill", "handover",
    "replica-hang", "replica-kill",   "lb-restart",     "crash",
    "handoff"};

const char *chaos_fault_name(chaos_fault_kind k)
{
    return k >= 0 && k < CF_NKINDS ? fault_names[k] : "none";
}

obs *obs_new(const obs_params *p)
{
    obs *o = calloc(1, sizeof(*o));

    if (o)
        o->p = *p;
    return o;
}

void obs_free(obs *o)
{
    if (!o)
        return;
    free(o->terms);
    free(o->faults);
    free(o->crashes);
    free(o);
}

void obs_quiet(obs *o, int quiet)
{
    o->quiet = quiet;
}

static const char *cname(const obs *o, int cand)
{
    return cand >= 0 && cand < o->p.ncand ? o->p.names[cand] : "?";
}

/* Seconds since obs_begin, for messages. */
static double rel(const obs *o, int64_t t)
{
    return (double)(t - o->begin) / CHAOS_NS_PER_S;
}

void obs_begin(obs *o, int64_t t)
{
    o->begin = t;
    o->began = 1;
}

void obs_end(obs *o, int64_t t)
{
    o->end = t;
    o->ended = 1;
}

void obs_violation(obs *o, int64_t t, const char *fmt, ...)
{
    va_list ap;

    o->violations++;
    if (o->quiet)
        return;
    fprintf(stderr, "VIOLATION at +%.3f s: ", rel(o, t));
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

int obs_open_term(const obs *o, int cand)
{
    for (int i = o->nterms - 1; i >= 0; i--)
        if (o->terms[i].cand == cand && !o->terms[i].closed)
            return i;
    return -1;
}

int obs_terms(const obs *o)
{
    return o->nterms;
}

int obs_term_cand(const obs *o, int i)
{
    return o->terms[i].cand;
}

int64_t obs_term_lead(const obs *o, int i)
{
    return o->terms[i].lead_lo;
}

int64_t obs_term_lose(const obs *o, int i)
{
    return o->terms[i].lose_hi;
}

int obs_term_closed(const obs *o, int i)
{
    return o->terms[i].closed;
}

int obs_lead(obs *o, int cand, int64_t epoch, int64_t lo, int64_t hi)
{
    int open = obs_open_term(o, cand);

    if (open >= 0) {
        obs_violation(
            o, lo, "%s: LEAD epoch %" PRId64 " while its term of epoch %" PRId64 " is still open",
            cname(o, cand), epoch, o->terms[open].epoch);
        o->terms[open].closed = 1;
        o->terms[open].lose_hi = o->terms[open].lose_lo = lo;
    }
    if (hi < lo)
        obs_violation(o, lo, "%s: LEAD bounds out of order (%" PRId64 " > %" PRId64 ")",
                      cname(o, cand), lo, hi);
    if (o->nterms == o->capterms) {
        int cap = o->capterms ? 2 * o->capterms : 256;
        oterm *n = realloc(o->terms, (size_t)cap * sizeof(*n));

        if (!n) {
            obs_violation(o, lo, "observer: out of memory");
            return -1;
        }
        o->terms = n;
        o->capterms = cap;
    }
    o->terms[o->nterms] = (oterm){.cand = cand, .epoch = epoch, .lead_lo = lo, .lead_hi = hi};
    return o->nterms++;
}

void obs_lose(obs *o, int cand, int64_t epoch, int64_t hi, int64_t lo, int by_deadline)
{
    int i = obs_open_term(o, cand);
    oterm *t;

    if (i < 0) {
        obs_violation(o, hi, "%s: LOSE epoch %" PRId64 " without an open term", cname(o, cand),
                      epoch);
        return;
    }
    t = &o->terms[i];
    if (t->epoch != epoch)
        obs_violation(o, hi, "%s: LOSE epoch %" PRId64 " ends its term of epoch %" PRId64,
                      cname(o, cand), epoch, t->epoch);
    if (hi < t->lead_lo)
        obs_violation(o, hi, "%s: term of epoch %" PRId64 " ends before it starts", cname(o, cand),
                      epoch);
    t->closed = 1;
    t->lose_hi = hi;
    t->lose_lo = lo < hi ? lo : hi;
    t->by_deadline = by_deadline;
}

int obs_seed_lead(obs *o, int cand, int64_t epoch, int64_t t_elected)
{
    int i = obs_lead(o, cand, epoch, t_elected, t_elected);

    if (i >= 0)
        o->terms[i].seed = 1;
    return i;
}

void obs_seed_lose(obs *o, int cand, int64_t epoch, int64_t t_lost, int64_t cancel_ns,
                   int64_t frozen_ns, int64_t thaw_ns)
{
    int i = obs_open_term(o, cand);
    int64_t limit = o->p.thaw_limit_ns > 0 ? o->p.thaw_limit_ns : CHAOS_NS_PER_S;
    int frozen = frozen_ns > 0 && thaw_ns > 0 && t_lost >= thaw_ns;
    int64_t end = frozen ? frozen_ns : t_lost;
    oterm *t;

    if (i >= 0 && !o->terms[i].seed)
        obs_violation(o, t_lost, "%s: WaitLost returned for a term that is not a seed-ABI one",
                      cname(o, cand));
    /* The same checks as a LOSE line; the term ends where the program
     * stopped acting (LO = HI: the program's own clock decides). */
    obs_lose(o, cand, epoch, end, end, 0);
    if (i < 0)
        return;
    t = &o->terms[i];
    t->wait_lost = t_lost;
    t->cancel = cancel_ns;
    if (frozen) {
        t->frozen = frozen_ns;
        t->thaw = thaw_ns;
        if (t_lost - thaw_ns > limit)
            obs_violation(o, t_lost,
                          "%s: seed ABI: K8sLeaseWaitLost returned %.3f s after SIGCONT "
                          "(epoch %" PRId64 ", frozen for %.3f s; limit %.3f s)",
                          cname(o, cand), (double)(t_lost - thaw_ns) / CHAOS_NS_PER_S, epoch,
                          (double)(thaw_ns - frozen_ns) / CHAOS_NS_PER_S,
                          (double)limit / CHAOS_NS_PER_S);
    }
}

void obs_seed_why(obs *o, int cand, int64_t epoch, const char *why)
{
    for (int i = o->nterms - 1; i >= 0; i--)
        if (o->terms[i].cand == cand && o->terms[i].seed && o->terms[i].epoch == epoch) {
            snprintf(o->terms[i].why, sizeof(o->terms[i].why), "%s", why);
            return;
        }
}

void obs_dead(obs *o, int cand, int64_t t)
{
    int i = obs_open_term(o, cand);

    if (i < 0)
        return;
    o->terms[i].closed = 1;
    o->terms[i].dead = 1;
    o->terms[i].lose_hi = t;
    o->terms[i].lose_lo = o->terms[i].lead_hi;
}

void obs_fault(obs *o, chaos_fault_kind kind, int64_t start, int64_t end, int blocking)
{
    if (o->nfaults == o->capfaults) {
        int cap = o->capfaults ? 2 * o->capfaults : 64;
        ofault *n = realloc(o->faults, (size_t)cap * sizeof(*n));

        if (!n) {
            obs_violation(o, start, "observer: out of memory");
            return;
        }
        o->faults = n;
        o->capfaults = cap;
    }
    o->faults[o->nfaults++] = (ofault){kind, start, end < start ? start : end, blocking, -1, 0};
}

void obs_crash(obs *o, chaos_fault_kind kind, int cand, int64_t t_kill, int64_t t_expiry,
               int64_t t_report, int evidence)
{
    if (o->ncrashes == o->capcrashes) {
        int cap = o->capcrashes ? 2 * o->capcrashes : 32;
        ocrash *n = realloc(o->crashes, (size_t)cap * sizeof(*n));

        if (!n) {
            obs_violation(o, t_kill, "observer: out of memory");
            return;
        }
        o->crashes = n;
        o->capcrashes = cap;
    }
    o->crashes[o->ncrashes++] =
        (ocrash){kind, cand, t_kill, t_expiry, t_report, t_report ? evidence : 0};
}

void obs_fault_term(obs *o, int term, int must_keep)
{
    if (o->nfaults > 0 && term >= 0 && term < o->nterms) {
        o->faults[o->nfaults - 1].term = term;
        o->faults[o->nfaults - 1].must_keep = must_keep;
    }
}

/* Terms lost per fault: the leader's term when fault i began is lost if
 * it ended (LOSE's upper bound: is_leader was false by then) before the
 * fault's end + that candidate's lease duration, and before the next fault
 * began (which may end the term itself). */
static void terms_lost(obs *o, FILE *out, obs_result *r)
{
    for (int i = 0; i < o->nfaults; i++) {
        const ofault *f = &o->faults[i];
        const oterm *t;
        int64_t until, ld = o->p.timing.lease_duration_ms;

        if (f->term < 0)
            continue;
        t = &o->terms[f->term];
        if (o->p.lease_ms && t->cand >= 0 && t->cand < o->p.ncand)
            ld = o->p.lease_ms[t->cand];
        until = f->end + ld * CHAOS_NS_PER_MS;
        if (i + 1 < o->nfaults && o->faults[i + 1].start < until)
            until = o->faults[i + 1].start;
        r->led[f->kind]++;
        r->must_keep[f->kind] += f->must_keep;
        if (!t->closed || t->lose_hi >= until)
            continue;
        r->lost[f->kind]++;
        if (f->must_keep)
            r->lost_errors++;
        if (out)
            fprintf(
                out,
                "%sterm lost: %s lost its term (epoch %" PRId64 ", ended +%.3f..+%.3f s) to the "
                "%s fault of +%.3f..+%.3f s%s\n",
                f->must_keep ? "VIOLATION: " : "", cname(o, t->cand), t->epoch, rel(o, t->lose_lo),
                rel(o, t->lose_hi), chaos_fault_name(f->kind), rel(o, f->start), rel(o, f->end),
                f->must_keep ? ", which the balancer's detection and the timings let a "
                               "leader keep (docs/chaos.md)"
                             : "");
    }
}

static int by_lead(const void *a, const void *b)
{
    const oterm *x = a, *y = b;

    if (x->lead_lo != y->lead_lo)
        return x->lead_lo < y->lead_lo ? -1 : 1;
    return x->lose_hi < y->lose_hi ? -1 : x->lose_hi > y->lose_hi;
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return x < y ? -1 : x > y;
}

/* The fault a gap starting at g0 follows: the latest one started by g0
 * whose effects lasted until at most `bound` before g0. */
static chaos_fault_kind cause(const obs *o, int64_t g0, int64_t bound)
{
    chaos_fault_kind k = CF_NKINDS;
    int64_t latest = INT64_MIN;

    for (int i = 0; i < o->nfaults; i++) {
        const ofault *f = &o->faults[i];

        if (f->start <= g0 && f->end >= g0 - bound && f->start >= latest) {
            latest = f->start;
            k = f->kind;
        }
    }
    return k;
}

/* The recovery bound of a gap after cand's term (-1: no term before). */
static int64_t bound_after(const obs *o, int cand)
{
    const chaos_timing *t = &o->p.timing;
    int64_t ld = t->lease_duration_ms;

    if (o->p.lease_ms && cand >= 0 && cand < o->p.ncand)
        ld = o->p.lease_ms[cand];
    else if (o->p.lease_ms) /* before any term: whichever lease was left */
        for (int i = 0; i < o->p.ncand; i++)
            if (o->p.lease_ms[i] > ld)
                ld = o->p.lease_ms[i];
    return (ld + 2 * t->retry_period_ms) * CHAOS_NS_PER_MS + o->p.allowance_ns;
}

/* One leaderless gap [g0, g1] after cand's term: recovery counts from the
 * later of g0 and the end of every blocking fault overlapping it. */
static void gap(obs *o, FILE *out, obs_result *r, int64_t g0, int64_t g1, int cand, int64_t **lens,
                int *nlens, int final)
{
    int64_t bound = bound_after(o, cand);
    int64_t ref = g0, rec;
    chaos_fault_kind k = o->began && g0 == o->begin ? CF_NKINDS : cause(o, g0, r->bound_ns);

    for (int i = 0; i < o->nfaults; i++) {
        const ofault *f = &o->faults[i];

        if (f->blocking && f->start < g1 && f->end > ref)
            ref = f->end;
    }
    rec = g1 > ref ? g1 - ref : 0;
    r->gaps++;
    if (*lens) {
        (*lens)[(*nlens)++] = rec;
    }
    if (k < CF_NKINDS && rec > r->worst_by_kind[k])
        r->worst_by_kind[k] = rec;
    if (rec > r->worst_recovery_ns) {
        r->worst_recovery_ns = rec;
        r->worst_kind = k;
        r->worst_at_ns = g0 - o->begin;
    }
    if (rec > bound) {
        r->recovery_errors++;
        if (out)
            fprintf(out,
                    "VIOLATION: no leader from +%.3f s to +%.3f s%s: %.3f s after the faults "
                    "stopped (+%.3f s, last fault: %s), bound %.3f s\n",
                    rel(o, g0), rel(o, g1), final ? " (end of the run)" : "",
                    (double)rec / CHAOS_NS_PER_S, rel(o, ref), chaos_fault_name(k),
                    (double)bound / CHAOS_NS_PER_S);
    }
}

/* The seed-ABI terms, in start order (s sorted, n terms): one line each
 * and the figures of r. The margin of a term is the next term's start
 * (lower bound) minus the term's end as the program saw it. */
static void seed_report(const obs *o, FILE *out, obs_result *r, const oterm *s, int n)
{
    r->seed_min_margin_ns = r->seed_min_margin_lost = INT64_MAX;
    for (int i = 0; i < n; i++) {
        const oterm *t = &s[i];
        char how[200], next[160] = "";

        if (!t->seed)
            continue;
        r->seed_terms++;
        if (t->wait_lost) {
            r->seed_closed++;
        } else {
            if (out)
                fprintf(out, "seed-ABI  %s epoch %" PRId64 ": WaitElected +%.6f s, %s\n",
                        cname(o, t->cand), t->epoch, rel(o, t->lead_lo),
                        t->dead ? "killed (its end: reaped)" : "WaitLost never returned");
            continue;
        }
        if (t->frozen) {
            r->seed_frozen++;
            if (t->wait_lost - t->thaw > r->seed_worst_thaw_ns)
                r->seed_worst_thaw_ns = t->wait_lost - t->thaw;
            if (t->wait_lost - t->thaw >
                (o->p.thaw_limit_ns > 0 ? o->p.thaw_limit_ns : CHAOS_NS_PER_S))
                r->seed_thaw_errors++;
            snprintf(how, sizeof(how),
                     "frozen from +%.6f s to +%.6f s, WaitLost returned %.3f ms after SIGCONT",
                     rel(o, t->frozen), rel(o, t->thaw),
                     (double)(t->wait_lost - t->thaw) / CHAOS_NS_PER_MS);
        } else if (t->cancel) {
            r->seed_cancelled++;
            if (t->wait_lost - t->cancel > r->seed_worst_cancel_ns)
                r->seed_worst_cancel_ns = t->wait_lost - t->cancel;
            snprintf(how, sizeof(how), "WaitLost +%.6f s, %.3f ms after K8sLeaseCancelElection",
                     rel(o, t->wait_lost), (double)(t->wait_lost - t->cancel) / CHAOS_NS_PER_MS);
        } else {
            snprintf(how, sizeof(how), "WaitLost +%.6f s (ended by the library%s%s)",
                     rel(o, t->wait_lost), t->why[0] ? ": " : "", t->why);
        }
        if (i + 1 < n) {
            int64_t m = s[i + 1].lead_lo - t->lose_hi;

            r->seed_margins++;
            if (m < r->seed_min_margin_ns)
                r->seed_min_margin_ns = m;
            if (!t->cancel && !t->frozen && m < r->seed_min_margin_lost)
                r->seed_min_margin_lost = m;
            snprintf(next, sizeof(next),
                     "; next term %s epoch %" PRId64 " +%.6f s: margin %.3f ms%s",
                     cname(o, s[i + 1].cand), s[i + 1].epoch, rel(o, s[i + 1].lead_lo),
                     (double)m / CHAOS_NS_PER_MS, m > 0 ? "" : " (NOT after WaitLost)");
        }
        if (out)
            fprintf(out, "seed-ABI  %s epoch %" PRId64 ": WaitElected +%.6f s, %s%s\n",
                    cname(o, t->cand), t->epoch, rel(o, t->lead_lo), how, next);
    }
}

/* The value of rank p (percent, nearest rank) of n sorted values. */
static int64_t rank(const int64_t *v, int n, int p)
{
    int k = (n * p + 99) / 100;

    return n ? v[k > 0 ? k - 1 : 0] : 0;
}

/* Crash failover: for each crash, the next term after the kill (s sorted
 * by start, n terms), one line each and the figures per fault kind. */
static void crash_report(obs *o, FILE *out, obs_result *r, const oterm *s, int n)
{
    int64_t *after_kill = NULL, *after_report = NULL;

    if (o->ncrashes == 0)
        return;
    after_kill = malloc(2 * (size_t)o->ncrashes * sizeof(*after_kill));
    if (!after_kill) {
        obs_violation(o, o->end, "observer: out of memory");
        return;
    }
    after_report = after_kill + o->ncrashes;
    for (int k = 0; k < CF_NKINDS; k++) {
        obs_failover *f = &r->failover[k];
        int na = 0, nr = 0;

        for (int c = 0; c < o->ncrashes; c++) {
            const ocrash *x = &o->crashes[c];
            const oterm *next = NULL;
            int64_t ld = o->p.timing.lease_duration_ms, rd = o->p.timing.renew_deadline_ms;
            int64_t expiry;
            char what[240] = "", report[96] = "no report";

            if (x->kind != (chaos_fault_kind)k)
                continue;
            if (o->p.lease_ms && x->cand >= 0 && x->cand < o->p.ncand)
                ld = o->p.lease_ms[x->cand];
            if (o->p.renew_ms && x->cand >= 0 && x->cand < o->p.ncand)
                rd = o->p.renew_ms[x->cand];
            /* The earliest the Lease could expire for anyone. Unknown: a
             * leader's last renewal is at most a renew deadline old. */
            expiry = x->t_expiry ? x->t_expiry : x->t_kill + (ld - rd) * CHAOS_NS_PER_MS;
            f->count++;
            f->reported += x->t_report != 0;
            f->evidence += x->evidence;
            for (int i = 0; i < n && !next; i++)
                if (s[i].lead_lo >= x->t_kill)
                    next = &s[i];
            if (x->t_report)
                snprintf(report, sizeof(report), "report +%.3f s (%.3f s after it%s)",
                         rel(o, x->t_report), (double)(x->t_report - x->t_kill) / CHAOS_NS_PER_S,
                         x->evidence ? ", evidence" : ", NOT evidence");
            if (next && next->cand == x->cand) {
                /* Restarted before anyone took over: its identity still
                 * holds the Lease, which it takes back at once. Not a
                 * failover to another candidate: not measured. */
                f->self++;
                snprintf(what, sizeof(what),
                         "; next %s epoch %" PRId64 " +%.6f s: %.3f s after the kill, taken back "
                         "by the restarted candidate itself (its identity holds the Lease)",
                         cname(o, next->cand), next->epoch, rel(o, next->lead_hi),
                         (double)(next->lead_hi - x->t_kill) / CHAOS_NS_PER_S);
            } else if (next) {
                int early = next->lead_lo < expiry;
                int evident = x->evidence && x->t_report <= next->lead_lo;
                int late = !(early && evident) && x->evidence && x->t_report < expiry;

                f->measured++;
                after_kill[na++] = next->lead_hi - x->t_kill;
                f->early += early;
                if (early && evident) {
                    f->by_report++;
                    after_report[nr++] = next->lead_hi - x->t_report;
                }
                f->late += late;
                if (!evident && next->lead_lo < expiry - 100 * CHAOS_NS_PER_MS) {
                    r->crash_errors++;
                    if (out)
                        fprintf(out,
                                "VIOLATION: %s took the Lease at +%.6f s, %.3f s after %s was "
                                "killed, before its Lease could expire (+%.3f s at the earliest) "
                                "and without evidence of the crash (%s)\n",
                                cname(o, next->cand), rel(o, next->lead_lo),
                                (double)(next->lead_lo - x->t_kill) / CHAOS_NS_PER_S,
                                cname(o, x->cand), rel(o, expiry), report);
                }
                snprintf(what, sizeof(what),
                         "; next %s epoch %" PRId64 " +%.6f s: %.3f s after the kill, %s",
                         cname(o, next->cand), next->epoch, rel(o, next->lead_hi),
                         (double)(next->lead_hi - x->t_kill) / CHAOS_NS_PER_S,
                         early && evident ? "on the report"
                         : early          ? "before the Lease could expire"
                         : late           ? "at expiry, NOT on the report that came before it"
                                          : "at expiry");
                if (early && evident)
                    snprintf(what + strlen(what), sizeof(what) - strlen(what),
                             " (%.3f ms after it)",
                             (double)(next->lead_hi - x->t_report) / CHAOS_NS_PER_MS);
            } else {
                snprintf(what, sizeof(what), "; no term after it");
            }
            if (out)
                fprintf(out, "%-9s %s killed +%.6f s, its Lease expiring %.3f s later%s, %s%s\n",
                        chaos_fault_name(x->kind), cname(o, x->cand), rel(o, x->t_kill),
                        (double)(expiry - x->t_kill) / CHAOS_NS_PER_S,
                        x->t_expiry ? "" : " at the earliest", report, what);
        }
        if (na) {
            qsort(after_kill, (size_t)na, sizeof(*after_kill), cmp64);
            f->p50_ns = rank(after_kill, na, 50);
            f->p99_ns = rank(after_kill, na, 99);
            f->max_ns = after_kill[na - 1];
        }
        if (nr) {
            qsort(after_report, (size_t)nr, sizeof(*after_report), cmp64);
            f->rep_p50_ns = rank(after_report, nr, 50);
            f->rep_p99_ns = rank(after_report, nr, 99);
            f->rep_max_ns = after_report[nr - 1];
        }
    }
    free(after_kill);
}

int obs_check(obs *o, FILE *out, obs_result *r)
{
    const chaos_timing *t = &o->p.timing;
    oterm *s = NULL;
    int64_t *lens = NULL;
    int n = o->nterms, nlens = 0;

    memset(r, 0, sizeof(*r));
    r->worst_kind = CF_NKINDS;
    r->bound_ns =
        (t->lease_duration_ms + 2 * t->retry_period_ms) * CHAOS_NS_PER_MS + o->p.allowance_ns;
    r->bound_max_ns = r->bound_ns;
    for (int i = 0; i < o->p.ncand; i++)
        if (bound_after(o, i) > r->bound_max_ns)
            r->bound_max_ns = bound_after(o, i);
    for (int i = 0; i < o->nfaults; i++)
        r->faults[o->faults[i].kind]++;
    r->terms = n;
    r->transitions = n > 0 ? n - 1 : 0;
    if (n > 0) {
        s = malloc((size_t)n * sizeof(*s));
        lens = malloc((size_t)(n + 1) * sizeof(*lens));
        if (!s || !lens) {
            free(s);
            free(lens);
            obs_violation(o, o->end, "observer: out of memory");
            r->violations = o->violations;
            return r->violations;
        }
        memcpy(s, o->terms, (size_t)n * sizeof(*s));
        qsort(s, (size_t)n, sizeof(*s), by_lead);
    }

    for (int i = 0; i < n; i++) {
        if (s[i].closed) {
            r->loses++;
        } else {
            o->violations++;
            if (out)
                fprintf(out, "VIOLATION: %s's term of epoch %" PRId64 " never ended\n",
                        cname(o, s[i].cand), s[i].epoch);
            s[i].lose_hi = s[i].lose_lo = o->ended ? o->end : INT64_MAX;
        }
    }

    /* Overlaps: sweep in order of start, against the term reaching furthest. */
    r->min_margin_ns = INT64_MAX;
    for (int i = 1, far = 0; i < n; i++) {
        if (s[i].lead_lo - s[far].lose_hi < r->min_margin_ns) {
            r->min_margin_ns = s[i].lead_lo - s[far].lose_hi;
            r->min_margin_dead = s[far].dead;
        }
        if (s[i].lead_lo < s[far].lose_hi) {
            int certain = s[i].lead_hi < s[far].lose_lo;

            r->overlaps++;
            if (out)
                fprintf(out,
                        "VIOLATION: overlap (%s): %s leader with epoch %" PRId64
                        " from +%.6f s (at the latest +%.6f s) while %s (epoch %" PRId64
                        ") led until +%.6f s (at the earliest +%.6f s)%s%s%s\n",
                        certain ? "certain" : "possible", cname(o, s[i].cand), s[i].epoch,
                        rel(o, s[i].lead_lo), rel(o, s[i].lead_hi), cname(o, s[far].cand),
                        s[far].epoch, rel(o, s[far].lose_hi), rel(o, s[far].lose_lo),
                        s[far].dead ? " (killed; its end is when it was reaped)" : "",
                        s[far].seed ? " (seed ABI: the return of K8sLeaseWaitLost)" : "",
                        s[i].seed ? " (the new one: seed ABI, the return of K8sLeaseWaitElected)"
                                  : "");
        }
        if (s[i].lose_hi > s[far].lose_hi)
            far = i;
    }

    /* Epochs of successive terms. */
    for (int i = 1; i < n; i++)
        if (s[i].epoch <= s[i - 1].epoch) {
            r->epoch_errors++;
            if (out)
                fprintf(out,
                        "VIOLATION: epoch not increasing: %s took epoch %" PRId64
                        " at +%.3f s after %s's epoch %" PRId64 "\n",
                        cname(o, s[i].cand), s[i].epoch, rel(o, s[i].lead_lo),
                        cname(o, s[i - 1].cand), s[i - 1].epoch);
        }

    /* Leaderless gaps, within [begin, end]. A term counts from its LEAD
     * upper bound here: the conservative side for liveness. */
    if (o->began) {
        int64_t covered = o->begin, stop = o->ended ? o->end : INT64_MAX;
        int last = -1; /* the candidate whose term reached `covered` */

        for (int i = 0; i < n && covered < stop; i++) {
            if (s[i].lead_hi > covered)
                gap(o, out, r, covered, s[i].lead_hi < stop ? s[i].lead_hi : stop, last, &lens,
                    &nlens, s[i].lead_hi >= stop);
            if (s[i].lose_hi > covered) {
                covered = s[i].lose_hi;
                last = s[i].cand;
            }
        }
        if (o->ended && covered < stop)
            gap(o, out, r, covered, stop, last, &lens, &nlens, 1);
    }
    seed_report(o, out, r, s, n);
    crash_report(o, out, r, s, n);
    terms_lost(o, out, r);
    if (nlens > 0) {
        qsort(lens, (size_t)nlens, sizeof(*lens), cmp64);
        r->median_gap_ns = lens[nlens / 2];
    }
    free(lens);
    free(s);
    r->violations = o->violations + r->overlaps + r->epoch_errors + r->recovery_errors +
                    r->lost_errors + r->crash_errors;
    return r->violations;
}
