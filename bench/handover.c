/* Benchmarks 1 and 2: graceful handover and crash failover, with three
 * candidate processes on one Lease, in watch mode and in poll-only mode,
 * and on one etcd election (mode "etcd", when etcd is installed). */
#include <string.h>

#include "bench.h"
#include "etcd_harness.h"

#define CANDIDATES  3
#define START_MS    15000 /* first election, and every wait for a follower to catch up */
#define STEP_GRACE  5000  /* on top of the lease duration for one handover or failover */
#define HANDOVER_TO "p99 < 50 ms (watch)"
#define FAILOVER_TO "p99 < 100 ms (watch)"

/* The modes, in the order they run and appear in the table. */
enum { MODE_WATCH, MODE_POLL_ONLY, MODE_ETCD, MODE_COUNT };

static const char *mode_name(int mode)
{
    static const char *const names[MODE_COUNT] = {"watch", "poll-only", "etcd"};

    return names[mode];
}

static int64_t ms_from_now(int64_t ms)
{
    return bench_now_ns() + ms * NS_PER_MS;
}

/* Three candidates, one of them elected and the others following it.
 * Returns the leader's slot, or -1. */
static int start_election(pool *p)
{
    int leader;

    for (int i = 0; i < CANDIDATES; i++)
        if (pool_spawn(p) < 0)
            return -1;
    if ((leader = pool_wait_leader(p, ms_from_now(START_MS))) < 0 ||
        pool_wait_synced(p, leader, ms_from_now(START_MS)) < 0)
        return -1;
    return leader;
}

/* The server of one run: the test server, emptied, or a fresh etcd (its
 * own temporary data directory and free loopback ports, stopped by
 * run_end). *ttl_ms gets the lease duration the server applies: with etcd
 * the TTL it granted (whole seconds, at least its minimum TTL). Returns
 * NULL, or what went wrong; the pool can be finished either way. */
static const char *run_setup(bench_ctx *ctx, int mode, const char *name, pool *p, eh_etcd **etcd,
                             int64_t *ttl_ms)
{
    const bench_timing *t = &ctx->fast;
    long ttl_s = (long)((t->lease_duration_ms + 999) / 1000), granted;

    *etcd = NULL;
    *ttl_ms = mode == MODE_ETCD ? 0 : t->lease_duration_ms; /* etcd: once granted */
    /* The pool first: run_end can then finish it whatever fails next. */
    if (pool_init(p, ctx, name, mode == MODE_POLL_ONLY, NULL, t) < 0)
        return "setup failed";
    if (mode != MODE_ETCD)
        return srv_reset(ctx) < 0 ? "setup failed" : NULL;
    if (eh_start(etcd, NULL) < 0)
        return "etcd did not start";
    p->etcd_endpoint = eh_endpoint(*etcd);
    if ((granted = bench_etcd_granted_ttl(p->etcd_endpoint, ttl_s)) <= 0)
        return "etcd did not grant a lease";
    if (granted != ttl_s)
        bench_log("etcd grants TTL %ld s when asked for %ld s", granted, ttl_s);
    *ttl_ms = granted * 1000;
    return NULL;
}

static void run_end(pool *p, eh_etcd *etcd)
{
    pool_fini(p);
    eh_stop(etcd);
}

/* Why a run stopped before its count: the time budget, or a step that did
 * not happen (a failure of the library, or of the setup when nothing was
 * measured at all). */
static const char budget_used[] = "time budget used up";

/* Add the table row of one mode. Only watch mode has a target: poll-only
 * and etcd are comparisons. */
static void report(bench_ctx *ctx, const char *bench, int mode, samples *s, const char *target,
                   double limit, const char *failure, const char *note)
{
    char n[24];
    double p50 = samples_pct(s, 50), p99 = samples_pct(s, 99), max = samples_max(s);
    int targeted = mode == MODE_WATCH, met = targeted ? p99 < limit : -1;

    snprintf(n, sizeof(n), "%zu", s->n);
    if (!s->n)
        met = -2;
    else if (failure && failure != budget_used && targeted)
        met = 0; /* a handover that never happened is slower than any target */
    bench_row_add(ctx, bench, mode_name(mode), n, targeted ? target : "", met,
                  "p50 %.1f ms, p99 %.1f ms, max %.1f ms%s%s%s", p50, p99, max, note,
                  failure ? "; stopped early: " : "", failure ? failure : "");
    if (mode == MODE_WATCH)
        bench_cell(ctx, bench[0] == '1' ? CELL_HANDOVER : CELL_FAILOVER,
                   s->n ? "p50 %.1f ms, p99 %.1f ms (%zu)%s" : "failed", p50, p99, s->n,
                   failure && s->n ? " (stopped early)" : "");
}

/* Poll-only is a comparison, and its steps are slow (a retry period or
 * more each): 3/5 of the samples keep the full run near 10 minutes. */
static int mode_count(int mode, int count)
{
    return mode == MODE_POLL_ONLY ? (count * 3 + 4) / 5 : count;
}

/* On a real server only watch mode runs: poll-only and etcd are
 * comparisons the test server's column already makes. */
static int mode_runs(const bench_ctx *ctx, int mode)
{
    return mode == MODE_WATCH || ctx->tgt->kind == TARGET_TESTSERVER;
}

/* The etcd row when there is no etcd to run: not a failure. */
static void report_skipped(bench_ctx *ctx, const char *bench)
{
    bench_row_add(ctx, bench, mode_name(MODE_ETCD), "0", "", -1, "skipped: etcd not installed");
}

/* ---- 1: graceful handover ------------------------------------------------ */

/* Returns NULL, or what went wrong (then s holds what was measured). */
static const char *handover_run(bench_ctx *ctx, int mode, int count, int64_t budget_ms, samples *s,
                                FILE *csv)
{
    const bench_timing *t = &ctx->fast;
    int64_t end, ttl_ms;
    const char *failure;
    eh_etcd *etcd;
    pool p;
    int leader;

    if ((failure = run_setup(ctx, mode, "bench-handover", &p, &etcd, &ttl_ms)))
        goto out;
    end = ms_from_now(budget_ms); /* etcd's start is not part of the budget */
    if ((leader = start_election(&p)) < 0) {
        failure = "no leader elected";
        goto out;
    }
    for (int i = 0; i < count; i++) {
        int64_t step_end = ms_from_now(t->lease_duration_ms + STEP_GRACE);
        int64_t t_release = 0, t_started = 0;
        long long epoch = 0;
        int next = -1;
        cand_event ev;

        if (bench_now_ns() > end) {
            failure = budget_used;
            break;
        }
        pool_send(&p, leader, 'r');
        while ((!t_release || next < 0) && pool_next(&p, &ev, step_end) == 0) {
            if (ev.kind == 'R' && ev.slot == leader)
                t_release = ev.t_ns;
            else if (ev.kind == 'S' && ev.slot != leader && ev.slot >= 0) {
                next = ev.slot;
                t_started = ev.t_ns;
                epoch = ev.epoch;
            }
        }
        if (!t_release || next < 0) {
            failure = "no new leader after a release";
            break;
        }
        samples_add(s, (double)(t_started - t_release) / NS_PER_MS);
        if (csv)
            fprintf(csv, "%s,%d,%.3f,cand-%d,cand-%d,%lld\n", bench_csv_mode(ctx, mode_name(mode)),
                    i + 1, (double)(t_started - t_release) / NS_PER_MS, p.c[leader].id,
                    p.c[next].id, epoch);
        /* The old leader campaigns again and must follow the new one before
         * the next release; then a random pause, so that releases do not
         * fall at a fixed phase of the followers' retry timers. */
        pool_send(&p, leader, 'j');
        if (pool_wait_sees(&p, leader, next, ms_from_now(START_MS)) < 0) {
            failure = "the old leader did not follow the new one";
            break;
        }
        bench_sleep_ms(50 + bench_rand(100));
        leader = next;
    }
out:
    run_end(&p, etcd);
    return failure;
}

void bench_handover(bench_ctx *ctx)
{
    int count = ctx->quick ? 20 : 200;
    /* A real server only runs watch mode: a shorter budget keeps the full
     * run near 10 minutes (about 250 ms per handover there). */
    int64_t budget_ms = ctx->quick ? 20000 : ctx->tgt->kind == TARGET_TESTSERVER ? 110000 : 70000;
    FILE *csv = bench_csv_open(ctx, "handover.csv", "mode,seq,latency_ms,from,to,epoch");

    for (int mode = 0; mode < MODE_COUNT; mode++) {
        samples s = {0};
        const char *failure;

        if (!mode_runs(ctx, mode))
            continue;
        if (mode == MODE_ETCD && !ctx->etcd_bin) {
            report_skipped(ctx, "1 graceful handover");
            continue;
        }
        bench_log("1 graceful handover, %s: %d handovers", mode_name(mode),
                  mode_count(mode, count));
        failure = handover_run(ctx, mode, mode_count(mode, count), budget_ms, &s, csv);
        report(ctx, "1 graceful handover", mode, &s, HANDOVER_TO, 50, failure, "");
        samples_free(&s);
    }
    if (csv)
        fclose(csv);
}

/* ---- 2: crash failover --------------------------------------------------- */

static const char *failover_run(bench_ctx *ctx, int mode, int count, int64_t budget_ms, samples *s,
                                FILE *csv, int64_t *ttl_ms)
{
    const bench_timing *t = &ctx->fast;
    int64_t end;
    const char *failure;
    eh_etcd *etcd;
    pool p;
    int leader;

    if ((failure = run_setup(ctx, mode, "bench-failover", &p, &etcd, ttl_ms)))
        goto out;
    end = ms_from_now(budget_ms);
    if ((leader = start_election(&p)) < 0) {
        failure = "no leader elected";
        goto out;
    }
    for (int i = 0; i < count; i++) {
        int64_t t_kill, t_started = 0;
        int next = -1, renewed = 0, fresh;
        cand_event ev;
        double overhead;

        if (bench_now_ns() > end) {
            failure = budget_used;
            break;
        }
        /* Kill right after a renewal: the Lease then has its whole duration
         * to run, and what follows it is the library's own delay. */
        pool_send(&p, leader, 'w');
        while (!renewed && pool_next(&p, &ev, ms_from_now(3 * t->retry_period_ms + 2000)) == 0)
            renewed = ev.kind == 'W' && ev.slot == leader;
        if (!renewed) {
            failure = "the leader did not renew";
            break;
        }
        t_kill = bench_now_ns();
        pool_kill(&p, leader);
        while (next < 0 && pool_next(&p, &ev, t_kill + (*ttl_ms + STEP_GRACE) * NS_PER_MS) == 0) {
            if (ev.kind == 'S' && ev.slot >= 0) {
                next = ev.slot;
                t_started = ev.t_ns;
            }
        }
        if (next < 0) {
            failure = "no new leader after a kill";
            break;
        }
        overhead = (double)(t_started - t_kill) / NS_PER_MS - (double)*ttl_ms;
        samples_add(s, overhead);
        if (csv)
            fprintf(csv, "%s,%d,%.3f,%.3f,cand-%d,%lld\n", bench_csv_mode(ctx, mode_name(mode)),
                    i + 1, overhead, (double)(t_started - t_kill) / NS_PER_MS, p.c[next].id,
                    ev.epoch);
        /* A fresh candidate replaces the dead one; it must follow the new
         * leader, then a random pause (as for handovers). */
        if ((fresh = pool_spawn(&p)) < 0 ||
            pool_wait_sees(&p, fresh, next, ms_from_now(START_MS)) < 0) {
            failure = "the replacement candidate did not follow the leader";
            break;
        }
        bench_sleep_ms(t->retry_period_ms / 2 + bench_rand(t->retry_period_ms));
        leader = next;
    }
out:
    run_end(&p, etcd);
    return failure;
}

void bench_failover(bench_ctx *ctx)
{
    /* A real server: 15 (2 x lease duration each), to stay near 10 minutes. */
    int count = ctx->quick ? 4 : ctx->tgt->kind == TARGET_TESTSERVER ? 25 : 15;
    int64_t budget_ms = ctx->quick ? 20000 : 100000;
    FILE *csv =
        bench_csv_open(ctx, "failover.csv", "mode,seq,overhead_ms,kill_to_leader_ms,to,epoch");

    for (int mode = 0; mode < MODE_COUNT; mode++) {
        samples s = {0};
        const char *failure;
        char note[48] = "";
        int64_t ttl_ms = 0;

        if (!mode_runs(ctx, mode))
            continue;
        if (mode == MODE_ETCD && !ctx->etcd_bin) {
            report_skipped(ctx, "2 crash failover");
            continue;
        }
        bench_log("2 crash failover, %s: %d kills", mode_name(mode), mode_count(mode, count));
        failure = failover_run(ctx, mode, mode_count(mode, count), budget_ms, &s, csv, &ttl_ms);
        /* etcd's TTL is whole seconds and has a minimum: say what it was. */
        if (mode == MODE_ETCD && ttl_ms > 0)
            snprintf(note, sizeof(note), " (beyond the granted TTL %lld s)",
                     (long long)(ttl_ms / 1000));
        report(ctx, "2 crash failover", mode, &s, FAILOVER_TO, 100, failure, note);
        samples_free(&s);
    }
    if (csv)
        fclose(csv);
}
