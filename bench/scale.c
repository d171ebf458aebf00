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

int scale_worker_main(int argc, char **argv)
{
    k8slease_client_options co = K8SLEASE_CLIENT_OPTIONS_INIT;
    k8slease_client *client = NULL;
    k8slease_elector **e = NULL;
    int64_t *last = NULL, window_ms = 10000, elect_ms = 60000, t0, rp_ns, end;
    unsigned char *flags = NULL; /* per elector, during the window */
    bench_timing t = {15000, 10000, 2000};
    const char *kubeconfig = NULL;
    int n = 1, poll_only = 0, elected = 0, batch = BATCH;
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
    if (k8slease_client_new(&client, &co) < 0) {
        fprintf(stderr, "scale-worker: %s\n", k8slease_error_last());
        return 1;
    }
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
        }
    }
    before = sum(e, n);
    cpu0 = cpu_s();
    t0 = bench_now_ns();
    end = t0 + window_ms * NS_PER_MS;

    /* A renewal is missed when a whole retry period passes after the one
     * that was due (2 x retry_period since the last success); a term whose
     * renew deadline passed shows up as not leader. Sampled 4 times per
     * retry period. */
    while (bench_now_ns() < end) {
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
    conns_end = kl_test_tcp_established(0) - conns_base;
    after = sum(e, n);
    for (int i = 0; i < n; i++)
        leading_end += e[i] && k8slease_elector_is_leader(e[i]);
    window_s = (double)(bench_now_ns() - t0) / NS_PER_S;

    printf("RESULT n=%d elected=%d leading_start=%" PRIu64 " leading_end=%" PRIu64
           " elect_s=%.2f window_s=%.2f rss_base_kb=%ld "
           "rss_client_kb=%ld rss_kb=%ld threads=%ld cpu_s=%.4f renewals=%" PRIu64
           " requests=%" PRIu64 " errors=%" PRIu64 " late=%" PRIu64 " not_leader=%" PRIu64
           " lost=%u renew_ms_mean=%.2f renew_ms_p99_bucket=%.0f anon_client_kb=%ld anon_kb=%ld"
           " hwm_client_kb=%ld hwm_kb=%ld conns_start=%ld conns_end=%ld\n",
           n, elected, leading_start, leading_end, elect_s, window_s, rss_base, rss_client,
           proc_status_field("VmRSS"), proc_status_field("Threads"), cpu1 - cpu0,
           after.renewals - before.renewals, after.requests - before.requests,
           after.errors - before.errors, late, not_leader, atomic_load(&stopped_count),
           after.renewals > before.renewals ? (after.latency_sum_s - before.latency_sum_s) * 1000 /
                                                  (double)(after.renewals - before.renewals)
                                            : NAN,
           latency_pct(&before, &after, 99), anon_client, proc_status_field("RssAnon"), hwm_client,
           proc_status_field("VmHWM"), conns_start, conns_end);
    fflush(stdout);
    /* No cleanup: freeing N electors one by one would only wait for their
     * requests in flight, and the driver resets the server next. */
    _exit(0);
}

/* ---- the driver side ----------------------------------------------------- */

/* A worker's RESULT line, decoded. */
typedef struct scale_result {
    double elected, leading_start, leading_end, elect_s, window_s;
    double rss_client_kb, rss_kb, threads, cpu_s, renewals, errors;
    double late, not_leader, lost, renew_ms_mean, renew_ms_p99_bucket;
    double anon_client_kb, anon_kb, hwm_client_kb, hwm_kb, conns_start, conns_end;
} scale_result;

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
        F(conns_start),    F(conns_end),
#undef F
    };

    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
        *(double *)((char *)r + fields[i].offset) = result_field(line, fields[i].key);
}

/* Run the worker for one size, its electors started in batches of batch
 * (0: all at once), on the current server (emptied first), or on the
 * server of kubeconfig when not NULL (a fresh one of the caller's); 0 with
 * *r filled, or its exit status. */
static int run_worker(bench_ctx *ctx, const char *kubeconfig, int size, int batch,
                      int64_t window_ms, int64_t elect_ms, scale_result *r)
{
    const bench_timing *t = &ctx->regular;
    char count[16], nbatch[16], window[24], elect[24], timing[64], result[1024];
    char *argv[] = {ctx->self_exe,
                    "scale-worker",
                    "--kubeconfig",
                    (char *)(kubeconfig ? kubeconfig : srv_kubeconfig(ctx)),
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
                    NULL};
    int rc;

    snprintf(count, sizeof(count), "%d", size);
    snprintf(nbatch, sizeof(nbatch), "%d", batch);
    snprintf(window, sizeof(window), "%" PRId64, window_ms);
    snprintf(elect, sizeof(elect), "%" PRId64, elect_ms);
    snprintf(timing, sizeof(timing), "%" PRId64 "/%" PRId64 "/%" PRId64, t->lease_duration_ms,
             t->renew_deadline_ms, t->retry_period_ms);
    if (!kubeconfig && srv_reset(ctx) < 0)
        return -1;
    rc = bench_run_child(argv, elect_ms + t->retry_period_ms + window_ms + WORKER_SLACK, result,
                         sizeof(result));
    if (rc == 0 && !result[0])
        rc = -1;
    if (rc == 0)
        decode(result, r);
    return rc;
}

/* Did the process hold every election of the window with 0 missed? */
static int held(const scale_result *r, int size)
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
        if ((rc = run_worker(ctx, NULL, size, BATCH, window_ms, elect_ms, &r)) != 0) {
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
        met = held(&r, size) && kb_per < 8 && us_per < 30;
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
        if (!held(&r, size)) {
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

/* ---- benchmark 6: HTTP efficiency ------------------------------------------ */

/*
 * 1,000 elections started at once in one client (client-go's timings), as
 * benchmark 4's worker does them, over HTTP/2 and over HTTP/1.1 on the test
 * server (a second one, started with --no-http2) and over HTTP/2 on a real
 * kube-apiserver: the TCP connections the process holds after the start
 * burst and after the window, the growth of RssAnon (after the burst) and of
 * VmHWM (its peak) per election over the client alone, and CPU per renewal.
 */
void bench_http(bench_ctx *ctx)
{
    enum { N = 1000 };
    const char *target = "HTTP/2: 1 connection; < 8 KB, peak < 16 KB/election; < 30 us/renewal";
    int64_t window_ms = ctx->quick ? 6000 : 16000, elect_ms = ctx->quick ? 30000 : 60000;
    int real = ctx->tgt->kind != TARGET_TESTSERVER;
    FILE *csv;

    if (ctx->tgt->kind == TARGET_CLUSTER) {
        bench_row_add(ctx, "6 HTTP, 1,000 at once", "HTTP/2", "", "", -1,
                      "skipped: 500 PUT/s is too much for a shared cluster");
        return;
    }
    csv = bench_csv_open(ctx, "http.csv",
                         "mode,protocol,elections,conns_after_start,conns_after_window,"
                         "anon_kb_per_election,hwm_kb_per_election,cpu_us_per_renewal,renewals,"
                         "missed_renewals,terms_lost,renew_ms_mean");
    for (int h1 = 0; h1 <= (real ? 0 : 1); h1++) {
        static const char *const no_h2[] = {"--no-http2", NULL};
        const char *proto = h1 ? "HTTP/1.1" : "HTTP/2";
        ts_server *own = NULL;
        scale_result r;
        double anon, hwm, us;
        int rc, met;

        bench_log("6 HTTP: %d elections at once over %s, %.0f s window", N, proto,
                  (double)window_ms / 1000);
        if (h1 && ts_start(&own, no_h2) < 0) {
            bench_row_add(ctx, "6 HTTP, 1,000 at once", proto, "1000", "", -2,
                          "could not start a test server with --no-http2");
            continue;
        }
        rc = run_worker(ctx, own ? ts_kubeconfig(own) : NULL, N, 0, window_ms, elect_ms, &r);
        ts_stop(own);
        if (rc != 0) {
            bench_row_add(ctx, "6 HTTP, 1,000 at once", proto, "1000", h1 ? "" : target, -2,
                          "the worker failed (exit status %d)", rc);
            continue;
        }
        anon = (r.anon_kb - r.anon_client_kb) / N;
        hwm = (r.hwm_kb - r.hwm_client_kb) / N;
        us = r.renewals > 0 ? r.cpu_s * 1e6 / r.renewals : NAN;
        met = r.conns_start == 1 && r.conns_end == 1 && anon < 8 && hwm < 16 && us < 30 &&
              held(&r, N);
        bench_row_add(ctx, "6 HTTP, 1,000 at once", proto, "1000", h1 ? "" : target, h1 ? -1 : met,
                      "%.0f TCP connection(s) after the start, %.0f after the window; RssAnon "
                      "+%.1f KB/election, VmHWM +%.1f KB/election; %.1f us CPU/renewal; missed "
                      "%.0f, terms lost %.0f; renew mean %.1f ms",
                      r.conns_start, r.conns_end, anon, hwm, us, r.late, r.lost, r.renew_ms_mean);
        if (!h1)
            bench_cell(
                ctx, CELL_HTTP,
                "%.0f TCP connection(s); RssAnon +%.1f KB, peak +%.1f KB per election; %.0f us "
                "CPU/renewal",
                r.conns_end, anon, hwm, us);
        if (csv)
            fprintf(csv, "%s,%s,%d,%.0f,%.0f,%.2f,%.2f,%.2f,%.0f,%.0f,%.0f,%.2f\n",
                    bench_csv_mode(ctx, "watch"), proto, N, r.conns_start, r.conns_end, anon, hwm,
                    us, r.renewals, r.late, r.lost, r.renew_ms_mean);
    }
    if (csv)
        fclose(csv);
}
