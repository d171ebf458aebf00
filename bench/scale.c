/* Benchmark 4: many elections in one process and one client.
 *
 * The driver runs `k8slease-bench scale-worker` once per size, in a fresh
 * process (so RSS and CPU belong to that size alone), on an empty server.
 * The worker starts N electors on N Leases in batches, waits (within a time
 * budget) until it leads them all, lets them renew for one retry period,
 * then measures for a window: CPU (getrusage, whole process) per successful
 * renewal, RSS, threads, renew latency and renewals missed. It prints one
 * RESULT line of key=value pairs. */
#include <inttypes.h>
#include <math.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "bench.h"
#include "procnet.h"
#include "k8slease.h"

#define BATCH        500   /* electors started before waiting for them */
#define WORKER_SLACK 30000 /* on top of the worker's own budget */

enum {
    WATCHED = 1,      /* led when the window opened */
    LATE = 2,         /* its current renewal is overdue (counted once) */
    PAST_DEADLINE = 4 /* is_leader turned false (counted once) */
};

static atomic_uint started_count, stopped_count;

static void on_started(int64_t epoch, void *ud)
{
    (void)epoch;
    (void)ud;
    atomic_fetch_add(&started_count, 1);
}

static void on_stopped(void *ud)
{
    (void)ud;
    atomic_fetch_add(&stopped_count, 1);
}

static double cpu_s(void)
{
    struct rusage ru;

    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* Counters summed over every elector. */
typedef struct totals {
    uint64_t renewals, requests, errors;
    uint64_t latency[K8SLEASE_LATENCY_BUCKETS]; /* renew latency histogram */
    double latency_sum_s;
} totals;

static totals sum(k8slease_elector **e, int n)
{
    totals t = {0};

    for (int i = 0; i < n; i++) {
        k8slease_elector_stats st = {.version = K8SLEASE_ELECTOR_STATS_VERSION};

        if (!e[i] || k8slease_elector_stats_get(e[i], &st) < 0)
            continue;
        t.renewals += st.renewals;
        t.requests += st.requests;
        t.errors += st.conflicts + st.http_4xx + st.http_5xx + st.transport_errors;
        for (int b = 0; b < K8SLEASE_LATENCY_BUCKETS; b++)
            t.latency[b] += st.renew_latency_bucket[b];
        t.latency_sum_s += st.renew_latency_sum_s;
    }
    return t;
}

/* Upper bound (ms) of the histogram bucket holding the p-th percentile of
 * the renewals between two sums; -1 for the open last bucket, NAN if none. */
static double latency_pct(const totals *a, const totals *b, double p)
{
    static const int64_t bounds_ms[K8SLEASE_LATENCY_BUCKETS] = K8SLEASE_LATENCY_BOUNDS_MS;
    uint64_t n = b->renewals - a->renewals, seen = 0;

    for (int i = 0; n && i < K8SLEASE_LATENCY_BUCKETS; i++) {
        seen += b->latency[i] - a->latency[i];
        if ((double)seen >= p / 100 * (double)n)
            return (double)bounds_ms[i];
    }
    return NAN;
}

/* Start electors [from, to) and wait until they lead or the monotonic
 * deadline passes; the number elected. */
static int start_batch(k8slease_client *client, k8slease_elector **e, int from, int to,
                       const bench_timing *t, int poll_only, int64_t deadline)
{
    int elected = 0;

    for (int i = from; i < to; i++) {
        k8slease_elector_options o = K8SLEASE_ELECTOR_OPTIONS_INIT;
        char name[32];

        snprintf(name, sizeof(name), "scale-%05d", i);
        o.name = name;
        o.identity = "bench-scale";
        o.lease_duration_ms = t->lease_duration_ms;
        o.renew_deadline_ms = t->renew_deadline_ms;
        o.retry_period_ms = t->retry_period_ms;
        o.release_on_cancel = 0; /* the server is reset afterwards */
        o.poll_only = poll_only;
        o.on_started_leading = on_started;
        o.on_stopped_leading = on_stopped;
        if (k8slease_elector_start(&e[i], client, &o) < 0)
            fprintf(stderr, "scale-worker: %s\n", k8slease_error_last());
    }
    for (int i = from; i < to; i++) {
        int64_t left_ms = (deadline - bench_now_ns()) / NS_PER_MS;

        if (e[i] && k8slease_elector_wait_elected(e[i], left_ms > 0 ? left_ms : 0, NULL) == 0)
            elected++;
    }
    return elected;
}

/* Wait (at most 2 retry periods + 1 s) until elector e renews, then half
 * a retry period: a window of whole retry periods opened then holds as
 * many renewals of each elector as it has periods, its ends fall between
 * the renewals of electors started together. */
static void wait_renewal(k8slease_elector *e, int64_t rp_ns)
{
    k8slease_elector_stats st = {.version = K8SLEASE_ELECTOR_STATS_VERSION};
    int64_t deadline = bench_now_ns() + 2 * rp_ns + NS_PER_S, last;

    if (!e || k8slease_elector_stats_get(e, &st) < 0)
        return;
    last = st.last_renew_ns;
    while (bench_now_ns() < deadline) {
        bench_sleep_ms(1);
        if (k8slease_elector_stats_get(e, &st) == 0 && st.last_renew_ns != last)
            break;
    }
    bench_sleep_ms(rp_ns / 2 / NS_PER_MS);
}

/* CPU time of the threads so far (schedstat: ns on the CPU), seconds. */
static double tids_cpu_s(const tid_set *s)
{
    double sum = 0;

    for (int i = 0; i < s->n; i++) {
        char path[64];
        unsigned long long ns = 0;
        FILE *f;

        snprintf(path, sizeof(path), "/proc/self/task/%d/schedstat", (int)s->tid[i]);
        if (!(f = fopen(path, "r")))
            return -1;
        if (fscanf(f, "%llu", &ns) != 1)
            ns = 0;
        fclose(f);
        sum += (double)ns / 1e9;
    }
    return sum;
}

/* Benchmark 6's second window: the process's system calls over align
 * retry periods (perf: from half a retry period after a renewal; strace:
 * from its attach, a second before), with the renewals in it. */
static void syscall_window(k8slease_elector **e, int n, int first, int align, int64_t rp_ns,
                           double out[5], char *why, size_t why_size)
{
    sys_counter c;
    totals a, b;
    int64_t t0;
    int bad = 0;

    out[0] = out[1] = out[2] = out[3] = out[4] = 0;
    if (sys_start(&c) < 0) {
        out[0] = c.tool;
        snprintf(why, why_size, "%s", c.why);
        return;
    }
    if (c.tool == SYS_PERF)
        wait_renewal(first >= 0 ? e[first] : NULL, rp_ns);
    a = b = sum(e, n);
    t0 = bench_now_ns();
    if (sys_enable(&c) < 0)
        bad = 1;
    bench_sleep_ms(align * rp_ns / NS_PER_MS);
    if (sys_disable(&c) < 0)
        bad = 1;
    if (c.tool == SYS_PERF)
        b = sum(e, n);
    out[4] = (double)(bench_now_ns() - t0) / NS_PER_S;
    if (sys_finish(&c, &out[1], &out[2]) == 0 && bad) {
        c.tool = SYS_FAILED;
        snprintf(c.why, sizeof(c.why), "perf did not acknowledge enable or disable");
    }
    if (c.tool == SYS_STRACE)
        b = sum(e, n); /* strace counted until it detached */
    out[0] = c.tool;
    out[3] = (double)(b.renewals - a.renewals);
    snprintf(why, why_size, "%s", c.why);
}

int scale_worker_main(int argc, char **argv)
{
    k8slease_client_options co = K8SLEASE_CLIENT_OPTIONS_INIT;
    k8slease_client *client = NULL;
    k8slease_elector **e = NULL;
    int64_t *last = NULL, window_ms = 10000, elect_ms = 60000, t0, rp_ns, end;
    unsigned char *flags = NULL; /* per elector, during the window */
    uint64_t *ren0 = NULL;       /* per elector, renewals when the window opened (align) */
    bench_timing t = {15000, 10000, 2000};
    const char *kubeconfig = NULL;
    int n = 1, poll_only = 0, elected = 0, batch = BATCH, align = 0, sys_align = 0, first = -1;
    tid_set tids0, tids1, loop_tids;
    long vol0, vol1, inv0, inv1;
    double loop_cpu0, loop_cpu1;
    double sys[5] = {0, 0, 0, 0, 0};
    char sys_why[200] = "";
    long rss_base, rss_client, anon_client, hwm_client, conns_base, conns_start, conns_end;
    uint64_t late = 0, not_leader = 0, leading_start = 0, leading_end = 0;
    double elect_s, cpu0, cpu1, window_s;
    totals before, after;

    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];

        if (!strcmp(k, "--kubeconfig"))
            kubeconfig = v;
        else if (!strcmp(k, "--count"))
            n = atoi(v);
        else if (!strcmp(k, "--window-ms"))
            window_ms = atoll(v);
        else if (!strcmp(k, "--elect-ms"))
            elect_ms = atoll(v);
        else if (!strcmp(k, "--poll-only"))
            poll_only = atoi(v);
        else if (!strcmp(k, "--batch"))
            batch = atoi(v);
        else if (!strcmp(k, "--align"))
            align = atoi(v);
        else if (!strcmp(k, "--sys-align"))
            sys_align = atoi(v);
        else if (!strcmp(k, "--timing"))
            sscanf(v, "%" SCNd64 "/%" SCNd64 "/%" SCNd64, &t.lease_duration_ms,
                   &t.renew_deadline_ms, &t.retry_period_ms);
    }
    if (!kubeconfig || n < 1) {
        fprintf(stderr, "k8slease-bench scale-worker: --kubeconfig and --count are required\n");
        return 2;
    }
    rp_ns = t.retry_period_ms * NS_PER_MS;
    e = calloc((size_t)n, sizeof(*e));
    last = calloc((size_t)n, sizeof(*last));
    flags = calloc((size_t)n, 1);
    if (!e || !last || !flags)
        return 1;

    rss_base = proc_status_field("VmRSS");
    /* Connections inherited from the driver (its control requests) are not
     * the client's. */
    conns_base = kl_test_tcp_established(0);
    co.kubeconfig = kubeconfig;
    co.user_agent = "bench scale-worker";
    tids_list(&tids0);
    if (k8slease_client_new(&client, &co) < 0) {
        fprintf(stderr, "scale-worker: %s\n", k8slease_error_last());
        return 1;
    }
    /* The library's threads: those the client started (its loop). */
    tids_list(&tids1);
    tids_new(&tids0, &tids1, &loop_tids);
    rss_client = proc_status_field("VmRSS");
    anon_client = proc_status_field("RssAnon");
    hwm_client = proc_status_field("VmHWM");
    if (batch <= 0)
        batch = n; /* all at once */

    t0 = bench_now_ns();
    end = t0 + elect_ms * NS_PER_MS;
    for (int from = 0; from < n && bench_now_ns() < end; from += batch)
        elected +=
            start_batch(client, e, from, from + batch < n ? from + batch : n, &t, poll_only, end);
    elect_s = (double)(bench_now_ns() - t0) / NS_PER_S;
    /* Outside the CPU window: reading /proc is slow. */
    conns_start = kl_test_tcp_established(0) - conns_base;

    /* Every elector renews once before the window opens; the window
     * watches those that lead when it opens. */
    bench_sleep_ms(t.retry_period_ms + 200);
    for (int i = 0; i < n; i++) {
        k8slease_elector_stats st = {.version = K8SLEASE_ELECTOR_STATS_VERSION};

        if (e[i] && k8slease_elector_is_leader(e[i]) &&
            k8slease_elector_stats_get(e[i], &st) == 0) {
            last[i] = st.last_renew_ns;
            flags[i] = WATCHED;
            leading_start++;
            if (first < 0)
                first = i;
        }
    }
    if (align > 0) {
        window_ms = align * rp_ns / NS_PER_MS;
        wait_renewal(first >= 0 ? e[first] : NULL, rp_ns);
    }
    vol0 = tids_ctxt(&loop_tids, 1);
    inv0 = tids_ctxt(&loop_tids, 0);
    before = sum(e, n);
    loop_cpu0 = tids_cpu_s(&loop_tids);
    cpu0 = cpu_s();
    t0 = bench_now_ns();
    end = t0 + window_ms * NS_PER_MS;

    /* A renewal is missed when a whole retry period passes after the one
     * that was due (2 x retry_period since the last success); a term whose
     * renew deadline passed shows up as not leader. Sampled 4 times per
     * retry period. */
    /* Benchmark 6 (aligned): no sampling in the window, whose CPU would
     * weigh on a single election's; one sleep, and each elector's renewals
     * compared at the end: one that renewed fewer than align - 1 times in
     * align retry periods missed a renewal (one fewer is the latency's
     * drift: the next renewal is due a period after the last one ended). */
    if (align > 0 && !(ren0 = calloc((size_t)n, sizeof(*ren0))))
        return 1;
    for (int i = 0; align > 0 && i < n; i++) {
        k8slease_elector_stats st = {.version = K8SLEASE_ELECTOR_STATS_VERSION};

        if ((flags[i] & WATCHED) && k8slease_elector_stats_get(e[i], &st) == 0)
            ren0[i] = st.renewals;
    }
    if (align > 0)
        bench_sleep_ms(window_ms);
    while (align <= 0 && bench_now_ns() < end) {
        bench_sleep_ms(t.retry_period_ms / 4);
        for (int i = 0; i < n; i++) {
            k8slease_elector_stats st = {.version = K8SLEASE_ELECTOR_STATS_VERSION};
            int64_t now = bench_now_ns();

            if (!(flags[i] & WATCHED) || k8slease_elector_stats_get(e[i], &st) < 0)
                continue;
            if (st.last_renew_ns != last[i]) {
                last[i] = st.last_renew_ns;
                flags[i] &= ~LATE;
            } else if (now - last[i] > 2 * rp_ns && !(flags[i] & LATE)) {
                late++;
                flags[i] |= LATE;
            }
            if (!k8slease_elector_is_leader(e[i]) && !(flags[i] & PAST_DEADLINE)) {
                not_leader++;
                flags[i] |= PAST_DEADLINE;
            }
        }
    }
    cpu1 = cpu_s();
    loop_cpu1 = tids_cpu_s(&loop_tids);
    after = sum(e, n);
    for (int i = 0; align > 0 && i < n; i++) {
        k8slease_elector_stats st = {.version = K8SLEASE_ELECTOR_STATS_VERSION};

        if (!(flags[i] & WATCHED) || k8slease_elector_stats_get(e[i], &st) < 0)
            continue;
        late += st.renewals - ren0[i] + 1 < (uint64_t)align;
        not_leader += !k8slease_elector_is_leader(e[i]);
    }
    window_s = (double)(bench_now_ns() - t0) / NS_PER_S;
    vol1 = tids_ctxt(&loop_tids, 1);
    inv1 = tids_ctxt(&loop_tids, 0);
    conns_end = kl_test_tcp_established(0) - conns_base;
    for (int i = 0; i < n; i++)
        leading_end += e[i] && k8slease_elector_is_leader(e[i]);
    if (sys_align > 0) {
        syscall_window(e, n, first, sys_align, rp_ns, sys, sys_why, sizeof(sys_why));
        if (sys_why[0])
            fprintf(stderr, "scale-worker: system calls not counted: %s\n", sys_why);
    }

    printf("RESULT n=%d elected=%d leading_start=%" PRIu64 " leading_end=%" PRIu64
           " elect_s=%.2f window_s=%.2f rss_base_kb=%ld "
           "rss_client_kb=%ld rss_kb=%ld threads=%ld cpu_s=%.6f renewals=%" PRIu64
           " requests=%" PRIu64 " errors=%" PRIu64 " late=%" PRIu64 " not_leader=%" PRIu64
           " lost=%u renew_ms_mean=%.2f renew_ms_p99_bucket=%.0f anon_client_kb=%ld anon_kb=%ld"
           " hwm_client_kb=%ld hwm_kb=%ld conns_start=%ld conns_end=%ld wake=%ld wake_inv=%ld"
           " loop_threads=%d sys_tool=%.0f sys_lib=%.0f sys_all=%.0f sys_renewals=%.0f"
           " sys_window_s=%.3f loop_cpu_s=%.6f\n",
           n, elected, leading_start, leading_end, elect_s, window_s, rss_base, rss_client,
           proc_status_field("VmRSS"), proc_status_field("Threads"), cpu1 - cpu0,
           after.renewals - before.renewals, after.requests - before.requests,
           after.errors - before.errors, late, not_leader, atomic_load(&stopped_count),
           after.renewals > before.renewals ? (after.latency_sum_s - before.latency_sum_s) * 1000 /
                                                  (double)(after.renewals - before.renewals)
                                            : NAN,
           latency_pct(&before, &after, 99), anon_client, proc_status_field("RssAnon"), hwm_client,
           proc_status_field("VmHWM"), conns_start, conns_end,
           vol0 < 0 || vol1 < 0 ? -1 : vol1 - vol0, inv0 < 0 || inv1 < 0 ? -1 : inv1 - inv0,
           loop_tids.n, sys[0], sys[1], sys[2], sys[3], sys[4],
           loop_cpu0 < 0 || loop_cpu1 < 0 ? -1.0 : loop_cpu1 - loop_cpu0);
    fflush(stdout);
    /* No cleanup: freeing N electors one by one would only wait for their
     * requests in flight, and the driver resets the server next. */
    _exit(0);
}

/* ---- the driver side ----------------------------------------------------- */

static void decode(const char *line, scale_result *r)
{
    static const struct {
        const char *key;
        size_t offset;
    } fields[] = {
#define F(name) {#name, offsetof(scale_result, name)}
        F(elected),        F(leading_start), F(leading_end),   F(elect_s),
        F(window_s),       F(rss_client_kb), F(rss_kb),        F(threads),
        F(cpu_s),          F(renewals),      F(errors),        F(late),
        F(not_leader),     F(lost),          F(renew_ms_mean), F(renew_ms_p99_bucket),
        F(anon_client_kb), F(anon_kb),       F(hwm_client_kb), F(hwm_kb),
        F(conns_start),    F(conns_end),     F(wake),          F(wake_inv),
        F(loop_threads),   F(sys_tool),      F(sys_lib),       F(sys_all),
        F(sys_renewals),   F(sys_window_s),  F(loop_cpu_s),
#undef F
    };

    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
        *(double *)((char *)r + fields[i].offset) = result_field(line, fields[i].key);
}

int scale_run_worker(bench_ctx *ctx, const worker_run *w, scale_result *r)
{
    const bench_timing *t = &ctx->regular;
    char count[16], nbatch[16], window[24], elect[24], timing[64], align[16], sys_align[16];
    char result[1024];
    char *argv[] = {ctx->self_exe,
                    "scale-worker",
                    "--kubeconfig",
                    (char *)(w->kubeconfig ? w->kubeconfig : srv_kubeconfig(ctx)),
                    "--count",
                    count,
                    "--batch",
                    nbatch,
                    "--window-ms",
                    window,
                    "--elect-ms",
                    elect,
                    "--timing",
                    timing,
                    "--align",
                    align,
                    "--sys-align",
                    sys_align,
                    NULL};
    int64_t rp = t->retry_period_ms, budget;
    int rc;

    snprintf(count, sizeof(count), "%d", w->size);
    snprintf(nbatch, sizeof(nbatch), "%d", w->batch);
    snprintf(window, sizeof(window), "%" PRId64, w->window_ms);
    snprintf(elect, sizeof(elect), "%" PRId64, w->elect_ms);
    snprintf(align, sizeof(align), "%d", w->align);
    snprintf(sys_align, sizeof(sys_align), "%d", w->sys_align);
    snprintf(timing, sizeof(timing), "%" PRId64 "/%" PRId64 "/%" PRId64, t->lease_duration_ms,
             t->renew_deadline_ms, t->retry_period_ms);
    if (!w->kubeconfig && srv_reset(ctx) < 0)
        return -1;
    /* Each aligned window waits up to 2 retry periods for its renewal; the
     * syscall tool up to 10 s to start, 10 s to stop. */
    budget = w->elect_ms + rp + (w->align ? (w->align + 3) * rp : w->window_ms) +
             (w->sys_align ? (w->sys_align + 3) * rp + 30000 : 0) + WORKER_SLACK;
    rc = bench_run_child(argv, budget, result, sizeof(result));
    if (rc == 0 && !result[0])
        rc = -1;
    if (rc == 0)
        decode(result, r);
    return rc;
}

/* Did the process hold every election of the window with 0 missed? */
int scale_held(const scale_result *r, int size)
{
    return r->leading_start == size && r->leading_end == size && r->late == 0 &&
           r->not_leader == 0 && r->lost == 0;
}

/* What kept a size from being held, for the table. */
/* etcd's WAL fsyncs during a worker's run: per second and mean time. */
typedef struct fsyncs {
    double per_s, mean_ms; /* -1: unknown */
} fsyncs;

static void limit_text(const scale_result *r, int size, double api_cores, double etcd_cores,
                       const fsyncs *fs, char *out, size_t len)
{
    size_t n = 0;

    if (r->elected < size)
        n += (size_t)snprintf(out + n, len - n, "only %.0f of %d elected in time; ", r->elected,
                              size);
    if (r->late || r->not_leader || r->lost)
        n += (size_t)snprintf(out + n, len - n,
                              "%.0f renewals missed, %.0f past deadline, %.0f lost; ", r->late,
                              r->not_leader, r->lost);
    if (n < len)
        n += (size_t)snprintf(out + n, len - n, "renew mean %.0f ms, %.0f failed requests",
                              r->renew_ms_mean, r->errors);
    /* Who was busy: the server's processes over the worker's whole run,
     * the worker over its window (cores). */
    if (api_cores >= 0 && n < len)
        snprintf(out + n, len - n,
                 "; CPU: kube-apiserver %.2f, etcd %.2f, worker %.2f of %ld cores", api_cores,
                 etcd_cores, r->window_s > 0 ? r->cpu_s / r->window_s : NAN,
                 sysconf(_SC_NPROCESSORS_ONLN));
    n = strlen(out);
    if (fs->per_s >= 0 && n < len)
        snprintf(out + n, len - n, "; etcd WAL fsync %.0f/s, mean %.1f ms", fs->per_s, fs->mean_ms);
}

void bench_scale(bench_ctx *ctx)
{
    static const int full_sizes[] = {1, 100, 1000, 10000}, quick_sizes[] = {1, 1000, 10000};
    /* A real server of our own: up the sizes until one is not held. A
     * shared cluster: 100 elections at most. */
    static const int real_full[] = {100, 1000, 2000, 5000, 10000}, real_quick[] = {100, 1000};
    static const int cluster[] = {100};
    int real = ctx->tgt->kind != TARGET_TESTSERVER, best = 0;
    const int *sizes = ctx->tgt->kind == TARGET_CLUSTER ? cluster
                       : real                           ? (ctx->quick ? real_quick : real_full)
                       : ctx->quick                     ? quick_sizes
                                                        : full_sizes;
    size_t nsizes = ctx->tgt->kind == TARGET_CLUSTER ? 1
                    : real ? (ctx->quick ? sizeof(real_quick) : sizeof(real_full)) / sizeof(int)
                    : ctx->quick ? sizeof(quick_sizes) / sizeof(int)
                                 : sizeof(full_sizes) / sizeof(int);
    char limit[400] = "";
    int64_t window_ms = ctx->quick ? 4000 : 16000, elect_ms = ctx->quick ? 15000 : 60000;
    const char *target = "all held, 0 missed, <8 KB/election, <30 us/renewal";
    FILE *csv = bench_csv_open(ctx, "scale.csv",
                               "mode,elections,elected,leading_at_start,leading_at_end,elect_s,"
                               "window_s,rss_client_kb,rss_kb,kb_per_election,threads,renewals,"
                               "cpu_us_per_renewal,renew_ms_mean,renew_ms_p99_bucket,"
                               "missed_renewals,past_deadline,terms_lost,errors");

    for (size_t k = 0; k < nsizes; k++) {
        int size = sizes[k], last = k + 1 == nsizes && !real, rc, met;
        double kb_per, us_per, api0 = srv_cpu_s(ctx, 0), etcd0 = srv_cpu_s(ctx, 1);
        double api_cores = -1, etcd_cores = -1, fs_n0 = 0, fs_s0 = 0, fs_n1, fs_s1;
        int have_fs = srv_etcd_fsyncs(ctx, &fs_n0, &fs_s0) == 0;
        fsyncs fs = {-1, -1};
        int64_t w0 = bench_now_ns();
        scale_result r;
        char n[16], p99[32];

        snprintf(n, sizeof(n), "%d", size);
        bench_log("4 scale: %d election(s), %.0f s window", size, (double)window_ms / 1000);
        worker_run w = {NULL, size, BATCH, window_ms, elect_ms, 0, 0};

        if ((rc = scale_run_worker(ctx, &w, &r)) != 0) {
            bench_row_add(ctx, "4 scale", "watch", n, last ? target : "", -2,
                          "the worker failed (exit status %d)", rc);
            snprintf(limit, sizeof(limit), "at %d: the worker failed", size);
            if (real)
                break;
            continue;
        }
        if (api0 >= 0 && etcd0 >= 0) {
            double wall = (double)(bench_now_ns() - w0) / NS_PER_S;

            api_cores = (srv_cpu_s(ctx, 0) - api0) / wall;
            etcd_cores = (srv_cpu_s(ctx, 1) - etcd0) / wall;
            if (have_fs && srv_etcd_fsyncs(ctx, &fs_n1, &fs_s1) == 0 && fs_n1 > fs_n0) {
                fs.per_s = (fs_n1 - fs_n0) / wall;
                fs.mean_ms = (fs_s1 - fs_s0) * 1000 / (fs_n1 - fs_n0);
            }
        }
        kb_per = (r.rss_kb - r.rss_client_kb) / size;
        us_per = r.renewals > 0 ? r.cpu_s * 1e6 / r.renewals : NAN;
        /* The histogram's bucket bound; the last bucket is open. */
        if (r.renew_ms_p99_bucket < 0)
            snprintf(p99, sizeof(p99), "> 2500 ms");
        else
            snprintf(p99, sizeof(p99), "<= %.0f ms", r.renew_ms_p99_bucket);
        met = scale_held(&r, size) && kb_per < 8 && us_per < 30;
        bench_row_add(ctx, "4 scale", "watch", n, last ? target : "", last ? met : -1,
                      "leading %.0f -> %.0f during the window (elections took %.1f s); RSS "
                      "%.1f MB, %.1f KB/election; %.1f us CPU/renewal; renew mean %.1f ms, p99 "
                      "%s; missed %.0f, past deadline %.0f, terms lost %.0f; %.0f threads",
                      r.leading_start, r.leading_end, r.elect_s, r.rss_kb / 1024, kb_per, us_per,
                      r.renew_ms_mean, p99, r.late, r.not_leader, r.lost, r.threads);
        if (api_cores >= 0)
            bench_log("  kube-apiserver %.2f cores, etcd %.2f cores over the worker's run; etcd "
                      "WAL fsync %.0f/s, mean %.1f ms",
                      api_cores, etcd_cores, fs.per_s, fs.mean_ms);
        if (csv)
            fprintf(csv,
                    "%s,%d,%.0f,%.0f,%.0f,%.2f,%.2f,%.0f,%.0f,%.3f,%.0f,%.0f,%.2f,%.2f,%.0f,%.0f,"
                    "%.0f,%.0f,%.0f\n",
                    bench_csv_mode(ctx, "watch"), size, r.elected, r.leading_start, r.leading_end,
                    r.elect_s, r.window_s, r.rss_client_kb, r.rss_kb, kb_per, r.threads, r.renewals,
                    us_per, r.renew_ms_mean, r.renew_ms_p99_bucket, r.late, r.not_leader, r.lost,
                    r.errors);
        if (!scale_held(&r, size)) {
            char why[360];

            limit_text(&r, size, api_cores, etcd_cores, &fs, why, sizeof(why));
            snprintf(limit, sizeof(limit), "at %d: %s", size, why);
            if (real)
                break; /* larger sizes only take longer to fail */
        } else {
            best = size > best ? size : best;
            if (real && k + 1 == nsizes) {
                char why[360];

                limit_text(&r, size, api_cores, etcd_cores, &fs, why, sizeof(why));
                snprintf(limit, sizeof(limit), "largest size tried; at %d: %s", size, why);
            }
            if (size == sizes[nsizes - 1] || real)
                bench_cell(ctx, CELL_SCALE,
                           "%d held, 0 missed; %.1f KB/election; %.0f us CPU/renewal; renew "
                           "mean %.0f ms",
                           size, kb_per, us_per, r.renew_ms_mean);
            if (real)
                bench_log("  %d held", size);
        }
    }
    if (real) {
        bench_row_add(ctx, "4 scale, largest held", "watch", "", "", -1,
                      "%d elections in one process with 0 missed renewals (retry period 2 s); "
                      "limit: %s",
                      best, limit);
        if (best)
            snprintf(ctx->tgt->cell[CELL_SCALE] + strlen(ctx->tgt->cell[CELL_SCALE]),
                     sizeof(ctx->tgt->cell[CELL_SCALE]) - strlen(ctx->tgt->cell[CELL_SCALE]),
                     "; limit %s", limit);
        else
            bench_cell(ctx, CELL_SCALE, "none held; %s", limit);
    } else if (limit[0]) {
        bench_cell(ctx, CELL_SCALE, "not all held: %s", limit);
    }
    if (csv)
        fclose(csv);
}
