/* Benchmark 8: crash failover on the kubelet's report (issue 23;
 * docs/semantics.md, "Crash failover"), next to lease expiry.
 *
 * The driver plays the kubelet, as tests/integration/test_crash.c does: it
 * creates two Pods (bench-crash-a, bench-crash-b: one container, "main")
 * and writes their container statuses through pods/status. There is no
 * kubelet under envtest nor in the test server: nothing else writes them.
 *
 * One trial, on a Lease of its own: Pod A's container runs an instance
 * with a fresh containerd-like ID, and so does Pod B's; a leader (a
 * candidate process with crash failover in Pod A) is elected and records
 * its instance in the Lease; a follower (another candidate process, in Pod
 * B) sees it lead. Once the wall clock is in a later second than the
 * record's verifiedAt (a report must finish after it to be evidence), the
 * leader reports its next renewal and is SIGKILLed right after it, as in
 * benchmark 2, so the Lease has its whole duration left. With the report,
 * the driver waits exactly 1 s (the simulated kubelet's delay) and writes
 * that instance terminated, finishedAt now; without, it writes nothing and
 * the Lease must expire. Measured: the kill to the follower's
 * on_started_leading. */
#define _DEFAULT_SOURCE /* timegm() */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "bench.h"
#include "kubelet.h"

#define POD_A        "bench-crash-a"
#define POD_B        "bench-crash-b"
#define REPORT_MS    1000  /* the simulated kubelet's delay after the kill */
#define TARGET_MS    1500  /* the target: p99 from the kill, with the report */
#define START_MS     15000 /* first election, and a follower catching up */
#define STEP_GRACE   5000  /* on top of expiry for one failover */
#define CRASH_TARGET "p99 < 1.5 s with the report"

/* One series of trials: a timing, with the report or by expiry. */
typedef struct crash_cfg {
    const char *timing; /* "15/10/2": lease duration / renew deadline / retry period, s */
    bench_timing t;
    int report;       /* 1: the kubelet's report 1 s after the kill; 0: expiry */
    int count, quick; /* trials */
    int64_t budget_s, quick_budget_s;
} crash_cfg;

/* A trial with the report takes about 3-4 s at 15/10/2 and 2-2.5 s at
 * 5/3/1 (the record, a renewal to kill after, 1 s); by expiry about 17-20 s
 * and 6-8 s on a real server: fewer of those. About 4-4.5 minutes per server
 * (quick: under 1); a series starts no trial once its budget is used up. */
static const crash_cfg cfgs[] = {
    {"15/10/2", {15000, 10000, 2000}, 1, 20, 5, 80, 25},
    {"15/10/2", {15000, 10000, 2000}, 0, 5, 1, 90, 10},
    {"5/3/1", {5000, 3000, 1000}, 1, 20, 5, 50, 15},
    {"5/3/1", {5000, 3000, 1000}, 0, 6, 1, 50, 5},
};

static int64_t ms_from_now(int64_t ms)
{
    return bench_now_ns() + ms * NS_PER_MS;
}

/* Sleep until monotonic time t_ns. */
static void sleep_until(int64_t t_ns)
{
    int64_t left = t_ns - bench_now_ns();
    struct timespec ts;

    if (left <= 0)
        return;
    ts.tv_sec = (time_t)(t_ns / NS_PER_S);
    ts.tv_nsec = (long)(t_ns % NS_PER_S);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0)
        ;
}

static int64_t rfc3339_parse(const char *s)
{
    struct tm tm = {0};

    if (!s || sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                     &tm.tm_hour, &tm.tm_min, &tm.tm_sec) != 6)
        return -1;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return (int64_t)timegm(&tm);
}

/* A containerd-like ID, unique per trial and Pod. */
static void container_id(char *buf, size_t len, int seq, char pod)
{
    snprintf(buf, len, "containerd://%016" PRIx64 "%016" PRIx64 "%016" PRIx64 "%08x%08x",
             (uint64_t)bench_rand(INT64_MAX), (uint64_t)bench_rand(INT64_MAX),
             (uint64_t)bench_rand(INT64_MAX), (unsigned)pod, (unsigned)seq);
}

/* ---- the kubelet's side ---------------------------------------------------- */

static int pod_create(bench_ctx *ctx, const char *name)
{
    char path[256], body[512];
    long status;

    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods", srv_namespace(ctx));
    if (kubelet_json_pod(body, sizeof(body), name) < 0)
        return -1;
    status = srv_api(ctx, "POST", path, body, NULL);
    if (status == 201 || status == 409) /* 409: left by an earlier run, as good */
        return 0;
    bench_log("cannot create pod %s/%s: HTTP %ld", srv_namespace(ctx), name, status);
    return -1;
}

static void pod_delete(bench_ctx *ctx, const char *name)
{
    char path[256];

    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s?gracePeriodSeconds=0",
             srv_namespace(ctx), name);
    srv_api(ctx, "DELETE", path, NULL, NULL);
}

/* The kubelet's write: container "main" of pod, instance container_id, in
 * this state (JSON). */
static int pod_status(bench_ctx *ctx, const char *pod, const char *container_id, const char *state)
{
    char path[256], body[1024];
    long status;

    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s/status", srv_namespace(ctx), pod);
    if (kubelet_json_status(body, sizeof(body), container_id, 0, state, "{}") < 0)
        return -1;
    if ((status = srv_api(ctx, "PATCH", path, body, NULL)) == 200)
        return 0;
    bench_log("kubelet write of pod %s: HTTP %ld", pod, status);
    return -1;
}

/* The instance runs, started a minute ago (before the candidate's process:
 * the leader checks that). */
static int pod_running(bench_ctx *ctx, const char *pod, const char *container_id)
{
    char state[128];

    if (kubelet_json_running(state, sizeof(state), (int64_t)time(NULL) - 60) < 0)
        return -1;
    return pod_status(ctx, pod, container_id, state);
}

/* The instance ended (SIGKILL: exit code 137), finished at wall second
 * `finished`. */
static int pod_terminated(bench_ctx *ctx, const char *pod, const char *container_id,
                          int64_t finished)
{
    char state[512];

    if (kubelet_json_terminated(state, sizeof(state), container_id, 137, "Error", finished - 60,
                                finished) < 0)
        return -1;
    return pod_status(ctx, pod, container_id, state);
}

/* 1 when the Lease carries the crash failover record of holder's current
 * term naming container_id (then *verified_s and *epoch are set), 0 when
 * not (yet), -1 when it cannot be read. */
static int lease_record(bench_ctx *ctx, const char *lease, const char *holder,
                        const char *container_id, int64_t *verified_s, long long *epoch)
{
    char path[256], *body = NULL;
    json_t *root = NULL, *rec = NULL, *v;
    long status;
    int found = 0;

    snprintf(path, sizeof(path), "/apis/coordination.k8s.io/v1/namespaces/%s/leases/%s",
             srv_namespace(ctx), lease);
    status = srv_api(ctx, "GET", path, NULL, &body);
    if (status != 200 && status != 404) {
        bench_log("GET lease %s: HTTP %ld", lease, status);
        free(body);
        return -1;
    }
    if (status == 200 && (root = json_loads(body, 0, NULL))) {
        json_int_t transitions =
            json_integer_value(json_object_get(json_object_get(root, "spec"), "leaseTransitions"));

        v = json_object_get(json_object_get(json_object_get(root, "metadata"), "annotations"),
                            "k8slease.io/holder-container");
        if (json_is_string(v) && (rec = json_loads(json_string_value(v), 0, NULL))) {
            const char *h = json_string_value(json_object_get(rec, "holder"));
            const char *id = json_string_value(json_object_get(rec, "containerID"));
            int64_t at = rfc3339_parse(json_string_value(json_object_get(rec, "verifiedAt")));
            json_int_t e = json_integer_value(json_object_get(rec, "epoch"));

            if (h && id && at >= 0 && !strcmp(h, holder) && !strcmp(id, container_id) &&
                e == transitions) {
                *verified_s = at;
                *epoch = (long long)e;
                found = 1;
            }
        }
    }
    json_decref(rec);
    json_decref(root);
    free(body);
    return found;
}

/* ---- one trial ------------------------------------------------------------- */

typedef struct trial_out {
    double kill_ms;   /* the kill to the follower's on_started_leading */
    double report_ms; /* the report's write (its start) to it; NAN without */
    double write_ms;  /* the write itself, until the server's answer; NAN without */
    long long epoch_from, epoch_to;
} trial_out;

/* NULL, or what went wrong. Every wait is bounded. */
static const char *trial(bench_ctx *ctx, const crash_cfg *cfg, int seq, trial_out *out)
{
    const bench_timing *t = &cfg->t;
    char lease[48], holder[32], id_a[96], id_b[96];
    const char *failure = NULL;
    int64_t verified_s = 0, deadline, t_kill, t_report = 0, t_started = 0;
    long long epoch = -1;
    int leader, follower, found = 0, renewed = 0;
    cand_event ev;
    pool p;

    out->report_ms = out->write_ms = NAN;
    snprintf(lease, sizeof(lease), "bench-crash-%d", seq);
    container_id(id_a, sizeof(id_a), seq, 'a');
    container_id(id_b, sizeof(id_b), seq, 'b');
    if (pool_init(&p, ctx, lease, 0, NULL, t) < 0)
        return "setup failed";
    if (pod_running(ctx, POD_A, id_a) < 0 || pod_running(ctx, POD_B, id_b) < 0) {
        failure = "cannot write a Pod's status";
        goto out;
    }
    if ((leader = pool_spawn_pod(&p, POD_A)) < 0 ||
        pool_wait_leader(&p, ms_from_now(START_MS)) != leader) {
        failure = "no leader elected";
        goto out;
    }
    /* The record goes in with the first write of the term after the leader
     * read its Pod: at most a renewal later. */
    snprintf(holder, sizeof(holder), "cand-%d", p.c[leader].id);
    deadline = ms_from_now(2 * t->retry_period_ms + 5000);
    while ((found = lease_record(ctx, lease, holder, id_a, &verified_s, &epoch)) == 0 &&
           bench_now_ns() < deadline)
        bench_sleep_ms(50);
    if (found <= 0) {
        failure = "the leader recorded no container instance in the Lease";
        goto out;
    }
    if ((follower = pool_spawn_pod(&p, POD_B)) < 0 ||
        pool_wait_sees(&p, follower, leader, ms_from_now(START_MS)) < 0) {
        failure = "the follower did not see the leader";
        goto out;
    }
    /* A report finished in verifiedAt's second is no evidence. */
    deadline = ms_from_now(2000);
    while ((int64_t)time(NULL) <= verified_s && bench_now_ns() < deadline)
        bench_sleep_ms(20);
    /* Kill right after a renewal: expiry then takes the whole lease. */
    pool_send(&p, leader, 'w');
    deadline = ms_from_now(3 * t->retry_period_ms + 2000);
    while (!renewed && pool_next(&p, &ev, deadline) == 0)
        renewed = ev.kind == 'W' && ev.slot == leader;
    if (!renewed) {
        failure = "the leader did not renew";
        goto out;
    }
    t_kill = bench_now_ns();
    pool_kill(&p, leader);
    if (getenv("K8SLEASE_BENCH_LOG"))
        bench_log("%s: %s killed at %.3f", lease, holder, (double)t_kill / NS_PER_S);
    if (cfg->report) {
        sleep_until(t_kill + REPORT_MS * NS_PER_MS);
        t_report = bench_now_ns();
        /* finishedAt: now, in the kill's second or later, so after verifiedAt. */
        if (pod_terminated(ctx, POD_A, id_a, (int64_t)time(NULL)) < 0) {
            failure = "cannot write the kubelet's report";
            goto out;
        }
        out->write_ms = (double)(bench_now_ns() - t_report) / NS_PER_MS;
    }
    /* A follower whose watch went quiet polls, a retry period or more
     * apart (jittered): expiry is seen up to a few of them late. */
    deadline = t_kill + (t->lease_duration_ms + 3 * t->retry_period_ms + STEP_GRACE) * NS_PER_MS;
    while (!t_started && pool_next(&p, &ev, deadline) == 0)
        if (ev.kind == 'S' && ev.slot == follower) {
            t_started = ev.t_ns;
            out->epoch_to = ev.epoch;
        }
    if (!t_started) {
        failure = "the follower did not lead after the kill";
        goto out;
    }
    out->kill_ms = (double)(t_started - t_kill) / NS_PER_MS;
    out->epoch_from = epoch;
    if (cfg->report)
        out->report_ms = (double)(t_started - t_report) / NS_PER_MS;
    /* Anything earlier than the evidence would be a library bug. */
    if (out->epoch_to <= epoch)
        failure = "the follower's term has no greater epoch";
    else if (cfg->report && t_started < t_report)
        failure = "the follower led before the report and before expiry";
    else if (!cfg->report && out->kill_ms < (double)(t->lease_duration_ms - t->retry_period_ms))
        failure = "the follower led before the Lease could expire, without a report";
out:
    pool_fini(&p);
    return failure;
}

/* ---- the benchmark --------------------------------------------------------- */

static const char budget_used[] = "time budget used up";

/* Run one series; NULL, or why it stopped early. */
static const char *series(bench_ctx *ctx, const crash_cfg *cfg, int *seq, samples *kill_ms,
                          samples *report_ms, samples *write_ms, FILE *csv)
{
    int count = ctx->quick ? cfg->quick : cfg->count;
    int64_t end = ms_from_now((ctx->quick ? cfg->quick_budget_s : cfg->budget_s) * 1000);

    bench_log("8 crash failover, %s, %s: %d trials", cfg->timing,
              cfg->report ? "the kubelet's report 1 s after the kill" : "by expiry", count);
    for (int i = 0; i < count; i++) {
        trial_out o = {0};
        const char *failure;

        if (i > 0 && bench_now_ns() > end)
            return budget_used;
        if ((failure = trial(ctx, cfg, ++*seq, &o)))
            return failure;
        samples_add(kill_ms, o.kill_ms);
        if (cfg->report) {
            samples_add(report_ms, o.report_ms);
            samples_add(write_ms, o.write_ms);
        }
        if (csv) {
            fprintf(csv, "%s,%s,%s,%d,%.3f,", bench_csv_mode(ctx, "watch"), cfg->timing,
                    cfg->report ? "report" : "expiry", i + 1, o.kill_ms);
            if (cfg->report)
                fprintf(csv, "%.3f,%.3f", o.report_ms, o.write_ms);
            else
                fputc(',', csv);
            fprintf(csv, ",%lld,%lld\n", o.epoch_from, o.epoch_to);
            fflush(csv);
        }
    }
    return NULL;
}

static void report(bench_ctx *ctx, const char *timing, samples *rep, samples *rep_lead,
                   samples *rep_write, const char *rep_failure, samples *exp,
                   const char *exp_failure, char *cell, size_t cell_len)
{
    double p50 = samples_pct(rep, 50), p99 = samples_pct(rep, 99), max = samples_max(rep);
    double e50 = samples_pct(exp, 50), e99 = samples_pct(exp, 99);
    double l50 = samples_pct(rep_lead, 50), l99 = samples_pct(rep_lead, 99);
    double w99 = samples_pct(rep_write, 99);
    int met = p99 < TARGET_MS;
    char n[24], expiry[160];
    size_t len = strlen(cell);

    if (!rep->n)
        met = -2;
    else if (rep_failure && rep_failure != budget_used)
        met = 0; /* a failover that never happened is slower than any target */
    snprintf(n, sizeof(n), "%zu + %zu", rep->n, exp->n);
    if (exp->n)
        snprintf(expiry, sizeof(expiry), "by expiry: p50 %.2f s, p99 %.2f s (%zu)%s%s", e50 / 1000,
                 e99 / 1000, exp->n, exp_failure ? "; stopped early: " : "",
                 exp_failure ? exp_failure : "");
    else
        snprintf(expiry, sizeof(expiry), "by expiry: failed: %s",
                 exp_failure ? exp_failure : "no trial");
    if (rep->n)
        bench_row_add(ctx, "8 crash failover, kubelet", timing, n, CRASH_TARGET, met,
                      "with the report 1 s after the kill: p50 %.3f s, p99 %.3f s, max %.3f s "
                      "(report to leader p50 %.1f ms, p99 %.1f ms; the write p99 %.1f ms)%s%s; %s",
                      p50 / 1000, p99 / 1000, max / 1000, l50, l99, w99,
                      rep_failure ? "; stopped early: " : "", rep_failure ? rep_failure : "",
                      expiry);
    else
        bench_row_add(ctx, "8 crash failover, kubelet", timing, n, CRASH_TARGET, met,
                      "with the report: failed: %s; %s", rep_failure ? rep_failure : "no trial",
                      expiry);
    /* The README's cell: "15/10/2: p50 1.02 s, p99 1.03 s with the report
     * (20), by expiry p50 15.0 s (4); 5/3/1: ..." */
    if (rep->n)
        snprintf(cell + len, cell_len - len, "%s%s: p50 %.2f s, p99 %.2f s with the report (%zu%s)",
                 len ? "; " : "", timing, p50 / 1000, p99 / 1000, rep->n,
                 rep_failure && rep_failure != budget_used ? ", stopped early" : "");
    else
        snprintf(cell + len, cell_len - len, "%s%s: with the report failed", len ? "; " : "",
                 timing);
    len = strlen(cell);
    if (exp->n)
        snprintf(cell + len, cell_len - len, ", by expiry p50 %.1f s (%zu)", e50 / 1000, exp->n);
    else
        snprintf(cell + len, cell_len - len, ", by expiry failed");
}

void bench_crash_report(bench_ctx *ctx)
{
    static const char name[] = "8 crash failover, kubelet";
    const size_t ncfg = sizeof(cfgs) / sizeof(cfgs[0]);
    char cell[480] = "";
    FILE *csv;
    int seq = 0;

    if (ctx->tgt->kind == TARGET_CLUSTER) {
        /* Its scheduler would place these Pods, and their node's kubelet
         * would write their status. */
        bench_row_add(ctx, name, "", "", "", -1,
                      "not run: a shared cluster has kubelets (the driver plays the kubelet)");
        bench_cell(ctx, CELL_CRASH, "not run: shared cluster");
        return;
    }
    if (srv_reset(ctx) < 0 || pod_create(ctx, POD_A) < 0 || pod_create(ctx, POD_B) < 0) {
        bench_row_add(ctx, name, "", "", CRASH_TARGET, -2, "setup failed (Pods %s, %s)", POD_A,
                      POD_B);
        bench_cell(ctx, CELL_CRASH, "failed");
        return;
    }
    csv = bench_csv_open(ctx, "crash_report.csv",
                         "mode,timing,evidence,seq,kill_to_leader_ms,report_to_leader_ms,"
                         "report_write_ms,epoch_from,epoch_to");
    /* The series come in pairs: a timing with the report, then by expiry. */
    for (size_t i = 0; i + 1 < ncfg; i += 2) {
        samples rep = {0}, rep_lead = {0}, rep_write = {0}, exp = {0};
        const char *rep_failure = series(ctx, &cfgs[i], &seq, &rep, &rep_lead, &rep_write, csv);
        const char *exp_failure = series(ctx, &cfgs[i + 1], &seq, &exp, NULL, NULL, csv);

        if (rep_failure)
            bench_log("8 crash failover, %s, with the report: %s", cfgs[i].timing, rep_failure);
        if (exp_failure)
            bench_log("8 crash failover, %s, by expiry: %s", cfgs[i].timing, exp_failure);
        report(ctx, cfgs[i].timing, &rep, &rep_lead, &rep_write, rep_failure, &exp, exp_failure,
               cell, sizeof(cell));
        samples_free(&rep);
        samples_free(&rep_lead);
        samples_free(&rep_write);
        samples_free(&exp);
    }
    bench_cell(ctx, CELL_CRASH, "%s", cell);
    if (csv)
        fclose(csv);
    pod_delete(ctx, POD_A);
    pod_delete(ctx, POD_B);
    srv_reset(ctx);
}
