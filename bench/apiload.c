/* Benchmark 3: API requests per candidate at steady state, by verb, for a
 * leader and for a follower, in watch mode and in poll-only mode.
 *
 * The test server counts requests by verb but not by client, so each role
 * is measured on its own, in two windows of the same length: the leader
 * alone, then the leader with two followers; a follower's count is
 * (second - first) / 2. Both windows start just after a renewal of the
 * leader and last k + 1/2 retry periods, so each holds exactly k of its
 * renewals (as long as a renewal takes less than RP / 2k): the leader's
 * requests cancel out exactly, and its rate is its count over k periods.
 *
 * On a real kube-apiserver of our own (envtest) the counts come from its
 * /metrics (server.c); a shared cluster's counts are not ours to read, so
 * there this benchmark is skipped. */
#include <math.h>
#include <string.h>

#include "bench.h"

#define FOLLOWERS 2
#define START_MS  15000

typedef struct load {
    double leader[V_COUNT], follower[V_COUNT]; /* requests/s */
    double leader_streams, follower_streams;   /* watch streams open per candidate */
} load;

/* Let every candidate settle, then count requests by verb for `periods`
 * + 1/2 retry periods from just after one of the leader's renewals.
 * counts: requests in the window; *secs: its length. */
static int measure(bench_ctx *ctx, pool *p, int leader, int periods, double counts[V_COUNT],
                   double *secs, srv_stats *end)
{
    int64_t rp = ctx->fast.retry_period_ms;
    srv_stats start;
    cand_event ev;
    int64_t t0;
    int renewed = 0;

    bench_sleep_ms(2 * rp + 500);
    pool_send(p, leader, 'w');
    while (!renewed && pool_next(p, &ev, bench_now_ns() + (3 * rp + 2000) * NS_PER_MS) == 0)
        renewed = ev.kind == 'W' && ev.slot == leader;
    if (!renewed || srv_stats_get(ctx, &start) < 0)
        return -1;
    t0 = bench_now_ns();
    bench_sleep_ms(periods * rp + rp / 2);
    if (srv_stats_get(ctx, end) < 0)
        return -1;
    *secs = (double)(bench_now_ns() - t0) / NS_PER_S;
    for (int v = 0; v < V_COUNT; v++)
        counts[v] = end->verb[v] - start.verb[v];
    return 0;
}

static const char *load_run(bench_ctx *ctx, int poll_only, int periods, load *l)
{
    const char *failure = NULL;
    double rp_s = (double)ctx->fast.retry_period_ms / 1000;
    double alone[V_COUNT], all[V_COUNT], secs;
    srv_stats end_alone, end_all;
    pool p;
    int leader;

    if (srv_reset(ctx) < 0 || pool_init(&p, ctx, "bench-load", poll_only, NULL, &ctx->fast) < 0)
        return "setup failed";
    if (pool_spawn(&p) < 0 ||
        (leader = pool_wait_leader(&p, bench_now_ns() + START_MS * NS_PER_MS)) < 0) {
        failure = "no leader elected";
        goto out;
    }
    if (measure(ctx, &p, leader, periods, alone, &secs, &end_alone) < 0) {
        failure = "the leader did not renew, or no stats";
        goto out;
    }
    for (int i = 0; i < FOLLOWERS; i++) {
        if (pool_spawn(&p) < 0) {
            failure = "cannot start a follower";
            goto out;
        }
    }
    if (pool_wait_synced(&p, leader, bench_now_ns() + START_MS * NS_PER_MS) < 0) {
        failure = "the followers did not see the leader";
        goto out;
    }
    if (measure(ctx, &p, leader, periods, all, &secs, &end_all) < 0) {
        failure = "the leader did not renew, or no stats";
        goto out;
    }
    for (int v = 0; v < V_COUNT; v++) {
        l->leader[v] = alone[v] / (periods * rp_s);
        l->follower[v] = (all[v] - alone[v]) / FOLLOWERS / secs;
    }
    l->leader_streams = end_alone.watches_open;
    l->follower_streams = (end_all.watches_open - end_alone.watches_open) / FOLLOWERS;
    if (!p.c[leader].leading)
        failure = "the leader lost its lease during the measurement";
out:
    pool_fini(&p);
    return failure;
}

/* "update 2.00/s, get 0.00/s" for the verbs used (get and update always). */
static void describe(const double r[V_COUNT], char *out, size_t size)
{
    size_t len = 0;

    out[0] = '\0';
    for (int v = 0; v < V_COUNT; v++) {
        if (v != V_GET && v != V_UPDATE && fabs(r[v]) < 0.005)
            continue;
        len += (size_t)snprintf(out + len, size > len ? size - len : 0, "%s%s %.2f/s",
                                len ? ", " : "", srv_verb_names[v], r[v]);
    }
}

static double others(const double r[V_COUNT], int except)
{
    double sum = 0;

    for (int v = 0; v < V_COUNT; v++)
        if (v != except)
            sum += fabs(r[v]);
    return sum;
}

void bench_api_load(bench_ctx *ctx)
{
    int periods = ctx->quick ? 6 : 30;
    int64_t window_ms = periods * ctx->fast.retry_period_ms + ctx->fast.retry_period_ms / 2;
    double rp_s = (double)ctx->fast.retry_period_ms / 1000;
    FILE *csv = bench_csv_open(ctx, "api_load.csv",
                               "mode,role,get_per_s,list_per_s,watch_per_s,create_per_s,"
                               "update_per_s,patch_per_s,delete_per_s,requests_per_retry_period,"
                               "watch_streams_open");
    char n[24];

    snprintf(n, sizeof(n), "%.2f s", (double)window_ms / 1000);
    if (!srv_counts(ctx)) {
        bench_row_add(ctx, "3 API load", "watch", "", "", -1,
                      "skipped: a shared server counts every client's requests, not ours");
        bench_cell(ctx, CELL_FOLLOWER, "skipped (shared server)");
        bench_cell(ctx, CELL_LEADER, "skipped (shared server)");
        goto out;
    }
    /* A real server: watch mode only (poll-only is the test server's
     * comparison). */
    for (int poll_only = 0; poll_only <= (ctx->tgt->kind == TARGET_TESTSERVER); poll_only++) {
        const char *mode = poll_only ? "poll-only" : "watch";
        const char *failure;
        char what[160];
        load l = {0};
        double polls, per_rp;
        int met;

        bench_log("3 API load, %s: %.2f s windows", mode, (double)window_ms / 1000);
        failure = load_run(ctx, poll_only, periods, &l);
        if (failure) {
            bench_row_add(ctx, "3 API load, leader", mode, n, "", -2, "%s", failure);
            if (!poll_only)
                bench_cell(ctx, CELL_LEADER, "failed: %s", failure);
            continue;
        }

        /* The leader: one PUT per retry period and nothing else. */
        per_rp = l.leader[V_UPDATE] * rp_s;
        describe(l.leader, what, sizeof(what));
        met = per_rp > 0.9 && per_rp < 1.05 && others(l.leader, V_UPDATE) * rp_s < 0.05;
        bench_row_add(ctx, "3 API load, leader", mode, n, "1 PUT per retry period", met,
                      "%s = %.2f PUT per retry period", what, per_rp);
        if (!poll_only)
            bench_cell(ctx, CELL_LEADER, "%.2f PUT per retry period (%s)", per_rp, what);

        /* A follower: no polling while its watch is healthy. */
        polls = l.follower[V_GET] + l.follower[V_LIST];
        describe(l.follower, what, sizeof(what));
        met = poll_only ? -1 : fabs(polls) < 0.005 && l.follower_streams >= 0.99;
        bench_row_add(ctx, "3 API load, follower", mode, n,
                      poll_only ? "" : "0 polling requests/s (watch)", met,
                      "%s; %.1f watch stream(s) open", what, l.follower_streams);
        if (!poll_only)
            bench_cell(ctx, CELL_FOLLOWER, "%.2f GET/s (%.1f watch stream open)", polls,
                       l.follower_streams);

        if (csv) {
            for (int role = 0; role < 2; role++) {
                const double *r = role ? l.follower : l.leader;
                double sum = 0;

                fprintf(csv, "%s,%s", bench_csv_mode(ctx, mode), role ? "follower" : "leader");
                for (int v = 0; v < V_COUNT; v++) {
                    fprintf(csv, ",%.4f", r[v]);
                    sum += r[v];
                }
                fprintf(csv, ",%.4f,%.2f\n", sum * rp_s,
                        role ? l.follower_streams : l.leader_streams);
            }
        }
    }
out:
    if (csv)
        fclose(csv);
}
