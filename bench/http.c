/* Benchmark 6: what an election costs in one process (issue 24), and what
 * a standby that polls the seed ABI costs the server.
 *
 * Sizes 1, 8, 1,000 and 10,000 (quick: 1, 8, 1,000): benchmark 4's worker
 * with every elector started at once (the start burst is part of what is
 * measured), client-go's timings (15/10/2), on an emptied server, a fresh
 * process per size. Per size:
 *   - the CPU window: 8 retry periods (quick 3), opened half a retry period
 *     after a renewal, so it holds as many renewals per elector as periods
 *     and its ends fall between renewals: process CPU (getrusage) /
 *     renewals (and the loop thread's alone); the voluntary switches of the
 *     library's loop thread / renewals (wake-ups; for one election also
 *     per second); connections after the start and after the window;
 *     RssAnon at the end less after k8slease_client_new, per election
 *     (VmHWM likewise: the peak);
 *   - then a second window of 4 retry periods (quick 2) for the
 *     system calls (perf stat raw_syscalls:sys_enter per thread, the
 *     worker's main thread left out; strace -c -f without perf), apart from
 *     the CPU window so the counting does not weigh on the CPU figure.
 * On the test server the sizes run on a test server of their own started
 * with --bookmark-interval real (a bookmark a minute, as kube-apiserver's
 * watch cache): the default 1 s bookmarks would wake a single election's
 * loop twice per retry period, which says nothing about the library.
 * HTTP/1.1 (--no-http2) at 1,000 is a comparison without target.
 *
 * The standby (issue 24 item 5): a leader process (the candidate role, 15/
 * 10/2) holds Lease bench-standby; k8slease-bench-standby, a seed-ABI
 * program, calls K8sLeaseGetHolder every 200 ms for 60 s (quick 20 s). The
 * server counts the Lease requests by verb from just before the first
 * call, just after it, and at the end (the standby still running): the
 * leader's are PUTs, the standby's GETs, LISTs and WATCHes. */
#define _GNU_SOURCE /* pipe2 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

#define STANDBY_INTERVAL_MS 200

#ifndef BENCH_STANDBY_PATH
#define BENCH_STANDBY_PATH "" /* built without libk8s_lease_wrapper */
#endif

static const char *const tool_names[] = {"failed", "none", "perf", "strace"};

static const char *tool_name(double tool)
{
    int t = (int)tool;

    return t >= SYS_FAILED && t <= SYS_STRACE ? tool_names[t + 1] : "?";
}

/* The target and whether it is met, per size: -1 no target. */
static int size_met(int size, const scale_result *r, double us, double anon, double wake,
                    const char **target)
{
    *target = "";
    if (size == 1) {
        *target = "<= 100 us/renewal, <= 1 wake-up/renewal";
        return scale_held(r, size) && us <= 100 && wake <= 1;
    }
    if (size == 1000) {
        *target = "<= 50 us/renewal, <= 6 KB RssAnon/election, 1 connection";
        return scale_held(r, size) && us <= 50 && anon <= 6 && r->conns_start == 1 &&
               r->conns_end == 1;
    }
    return -1;
}

static void syscall_text(const scale_result *r, char *out, size_t size)
{
    if (r->sys_tool == SYS_PERF && r->sys_renewals > 0)
        snprintf(out, size, "%.1f syscalls/renewal (perf, loop thread; %.1f all threads)",
                 r->sys_lib / r->sys_renewals, r->sys_all / r->sys_renewals);
    else if (r->sys_tool == SYS_STRACE && r->sys_renewals > 0)
        snprintf(out, size, "%.1f syscalls/renewal (strace -f, all threads)",
                 r->sys_all / r->sys_renewals);
    else if (r->sys_tool == SYS_NONE)
        snprintf(out, size, "syscalls not counted: %s",
                 getenv("K8SLEASE_BENCH_SYSCALLS") ? "K8SLEASE_BENCH_SYSCALLS=none"
                                                   : "perf and strace not installed");
    else
        snprintf(out, size, "syscalls not counted: %s failed (see the log)",
                 tool_name(r->sys_tool));
}

/* Point the current (test) server at `own` for a while: srv_reset,
 * srv_stats_get and the pool then use it. */
typedef struct saved_server {
    ts_server *ts;
    char kubeconfig[sizeof(((bench_target *)0)->kubeconfig)];
} saved_server;

static void use_server(bench_ctx *ctx, ts_server *own, saved_server *save)
{
    save->ts = ctx->tgt->ts;
    memcpy(save->kubeconfig, ctx->tgt->kubeconfig, sizeof(save->kubeconfig));
    ctx->tgt->ts = own;
    snprintf(ctx->tgt->kubeconfig, sizeof(ctx->tgt->kubeconfig), "%s", ts_kubeconfig(own));
}

static void restore_server(bench_ctx *ctx, const saved_server *save)
{
    ctx->tgt->ts = save->ts;
    memcpy(ctx->tgt->kubeconfig, save->kubeconfig, sizeof(save->kubeconfig));
}

static void cell_append(bench_ctx *ctx, int cell, const char *text)
{
    char *c = ctx->tgt->cell[cell];
    size_t len = strlen(c);

    snprintf(c + len, sizeof(ctx->tgt->cell[cell]) - len, "%s%s", len ? "; " : "", text);
}

static void run_sizes(bench_ctx *ctx, FILE *csv)
{
    static const int full[] = {1, 8, 1000, 10000}, quick[] = {1, 8, 1000};
    const int *sizes = ctx->quick ? quick : full;
    int nsizes = ctx->quick ? 3 : 4;
    int align = ctx->quick ? 3 : 8, sys_align = ctx->quick ? 2 : 4;
    int64_t elect_ms = ctx->quick ? 30000 : 60000;
    double rp_s = (double)ctx->regular.retry_period_ms / 1000;

    for (int k = 0; k < nsizes; k++) {
        int size = sizes[k], rc, met;
        worker_run w = {NULL, size, 0, 0, elect_ms, align, sys_align};
        double anon, hwm, us, loop_us, wake, wake_s;
        const char *target;
        char n[16], sys[240], cell[160];
        scale_result r;

        snprintf(n, sizeof(n), "%d", size);
        bench_log("6 cost per election: %d at once, %.0f s CPU window, %.0f s syscall window", size,
                  align * rp_s, sys_align * rp_s);
        if ((rc = scale_run_worker(ctx, &w, &r)) != 0) {
            size_met(size, &r, 0, 0, 0, &target);
            bench_row_add(ctx, "6 cost per election", "HTTP/2", n, target, -2,
                          "the worker failed (exit status %d)", rc);
            continue;
        }
        anon = (r.anon_kb - r.anon_client_kb) / size;
        hwm = (r.hwm_kb - r.hwm_client_kb) / size;
        us = r.renewals > 0 ? r.cpu_s * 1e6 / r.renewals : NAN;
        loop_us = r.renewals > 0 && r.loop_cpu_s >= 0 ? r.loop_cpu_s * 1e6 / r.renewals : NAN;
        wake = r.renewals > 0 && r.wake >= 0 ? r.wake / r.renewals : NAN;
        wake_s = r.window_s > 0 && r.wake >= 0 ? r.wake / r.window_s : NAN;
        met = size_met(size, &r, us, anon, wake, &target);
        syscall_text(&r, sys, sizeof(sys));
        if (!scale_held(&r, size)) {
            size_t len = strlen(sys);

            /* Not all held: how many, on top of the counts. */
            snprintf(sys + len, sizeof(sys) - len,
                     "; NOT HELD: %.0f elected in %.0f s, leading %.0f -> %.0f", r.elected,
                     r.elect_s, r.leading_start, r.leading_end);
        }
        bench_row_add(ctx, "6 cost per election", "HTTP/2", n, target, met,
                      "%.1f us CPU/renewal (loop thread %.1f); RssAnon +%.2f KB/election (peak "
                      "+%.2f); %s; loop wake-ups %.2f/renewal (%.2f/s); connections %.0f after "
                      "the start, %.0f after; %.0f renewals in %.1f s, missed %.0f, lost %.0f",
                      us, loop_us, anon, hwm, sys, wake, wake_s, r.conns_start, r.conns_end,
                      r.renewals, r.window_s, r.late, r.lost);
        if (size == 1)
            snprintf(cell, sizeof(cell),
                     "1: %.0f us/renewal, %.1f wake-ups/renewal (%.2f/s), %.0f syscalls", us, wake,
                     wake_s, r.sys_renewals > 0 ? r.sys_lib / r.sys_renewals : NAN);
        else
            snprintf(cell, sizeof(cell), "%s: %.0f us, %.1f KB%s, %.1f wake-ups, %.0f syscalls%s",
                     size == 1000    ? "1,000"
                     : size == 10000 ? "10,000"
                                     : n,
                     us, anon, size == 1000 ? " RssAnon/election" : "", wake,
                     r.sys_renewals > 0 ? r.sys_lib / r.sys_renewals : NAN,
                     scale_held(&r, size) ? "" : " (not held)");
        cell_append(ctx, CELL_HTTP, cell);
        if (csv)
            fprintf(csv,
                    "%s,HTTP/2,%d,%.0f,%.0f,%.3f,%.3f,%.2f,%.0f,%.2f,%.0f,%.0f,%.2f,%.3f,%.3f,%s,"
                    "%.2f,%.2f,%.0f,%.2f\n",
                    bench_csv_mode(ctx, "watch"), size, r.conns_start, r.conns_end, anon, hwm, us,
                    r.renewals, r.window_s, r.late, r.lost, r.renew_ms_mean, wake, wake_s,
                    tool_name(r.sys_tool), r.sys_renewals > 0 ? r.sys_lib / r.sys_renewals : NAN,
                    r.sys_renewals > 0 ? r.sys_all / r.sys_renewals : NAN, r.sys_renewals, loop_us);
    }
}

/* HTTP/1.1 at 1,000: a comparison (test server only). */
static void run_http1(bench_ctx *ctx, FILE *csv)
{
    static const char *const args[] = {"--no-http2", "--bookmark-interval", "real", NULL};
    int align = ctx->quick ? 3 : 8;
    worker_run w = {NULL, 1000, 0, 0, ctx->quick ? 30000 : 60000, align, 0};
    ts_server *own = NULL;
    scale_result r;
    double anon, us;
    int rc;

    bench_log("6 cost per election: 1000 at once over HTTP/1.1");
    if (ts_start(&own, args) < 0) {
        bench_row_add(ctx, "6 cost per election", "HTTP/1.1", "1000", "", -2,
                      "could not start a test server with --no-http2");
        return;
    }
    w.kubeconfig = ts_kubeconfig(own);
    rc = scale_run_worker(ctx, &w, &r);
    ts_stop(own);
    if (rc != 0) {
        bench_row_add(ctx, "6 cost per election", "HTTP/1.1", "1000", "", -2,
                      "the worker failed (exit status %d)", rc);
        return;
    }
    anon = (r.anon_kb - r.anon_client_kb) / 1000;
    us = r.renewals > 0 ? r.cpu_s * 1e6 / r.renewals : NAN;
    bench_row_add(ctx, "6 cost per election", "HTTP/1.1", "1000", "", -1,
                  "%.1f us CPU/renewal; RssAnon +%.2f KB/election (peak +%.2f); loop wake-ups "
                  "%.2f/renewal; connections %.0f after the start, %.0f after; missed %.0f, lost "
                  "%.0f",
                  us, anon, (r.hwm_kb - r.hwm_client_kb) / 1000,
                  r.renewals > 0 ? r.wake / r.renewals : NAN, r.conns_start, r.conns_end, r.late,
                  r.lost);
    if (csv)
        fprintf(csv,
                "%s,HTTP/1.1,1000,%.0f,%.0f,%.3f,%.3f,%.2f,%.0f,%.2f,%.0f,%.0f,%.2f,%.3f,,,,,,\n",
                bench_csv_mode(ctx, "watch"), r.conns_start, r.conns_end, anon,
                (r.hwm_kb - r.hwm_client_kb) / 1000, us, r.renewals, r.window_s, r.late, r.lost,
                r.renew_ms_mean, r.renewals > 0 ? r.wake / r.renewals : NAN);
}

/* ---- the standby ---------------------------------------------------------- */

typedef struct child {
    pid_t pid;
    int in, out; /* its stdin (ours to write), its stdout */
    char buf[2048];
    size_t len;
} child;

static int standby_spawn(bench_ctx *ctx, child *c, const char *holder, int64_t duration_ms)
{
    char interval[16], duration[24];
    char *argv[] = {BENCH_STANDBY_PATH,
                    (char *)srv_namespace(ctx),
                    "bench-standby",
                    (char *)holder,
                    interval,
                    duration,
                    NULL};
    int in[2], out[2];

    snprintf(interval, sizeof(interval), "%d", STANDBY_INTERVAL_MS);
    snprintf(duration, sizeof(duration), "%" PRId64, duration_ms);
    memset(c, 0, sizeof(*c));
    if (pipe2(in, O_CLOEXEC) < 0)
        return -1;
    if (pipe2(out, O_CLOEXEC) < 0) {
        close(in[0]);
        close(in[1]);
        return -1;
    }
    fflush(stdout);
    fflush(stderr);
    if ((c->pid = fork()) == 0) {
        dup2(in[0], STDIN_FILENO);
        dup2(out[1], STDOUT_FILENO);
        setenv("KUBECONFIG", srv_kubeconfig(ctx), 1);
        unsetenv("KUBERNETES_SERVICE_HOST"); /* not in a cluster: $KUBECONFIG */
        setenv("K8SLEASE_LOG_LEVEL", "warn", 1);
        execv(argv[0], argv);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    c->in = in[1];
    c->out = out[0];
    if (c->pid < 0) {
        close(c->in);
        close(c->out);
        return -1;
    }
    return 0;
}

/* The next line starting with prefix, within timeout_ms; 0 or -1. */
static int child_line(child *c, const char *prefix, char *line, size_t size, int64_t timeout_ms)
{
    int64_t deadline = bench_now_ns() + timeout_ms * NS_PER_MS;

    for (;;) {
        char *nl;

        while ((nl = memchr(c->buf, '\n', c->len))) {
            int match;

            *nl = '\0';
            match = !strncmp(c->buf, prefix, strlen(prefix));
            if (match) {
                size_t len = strlen(c->buf) < size - 1 ? strlen(c->buf) : size - 1;

                memcpy(line, c->buf, len);
                line[len] = '\0';
            }
            c->len -= (size_t)(nl + 1 - c->buf);
            memmove(c->buf, nl + 1, c->len);
            if (match)
                return 0;
        }
        struct pollfd pfd = {.fd = c->out, .events = POLLIN};
        int64_t left = (deadline - bench_now_ns()) / NS_PER_MS;
        ssize_t n;

        if (left <= 0 || poll(&pfd, 1, (int)left) <= 0)
            return -1;
        if (c->len == sizeof(c->buf))
            c->len = 0;
        if ((n = read(c->out, c->buf + c->len, sizeof(c->buf) - c->len)) <= 0)
            return -1;
        c->len += (size_t)n;
    }
}

static void standby_end(child *c)
{
    int64_t deadline = bench_now_ns() + 10 * NS_PER_S;
    pid_t r;

    if (c->pid <= 0)
        return;
    close(c->in); /* EOF: it exits */
    while ((r = waitpid(c->pid, NULL, WNOHANG)) == 0 && bench_now_ns() < deadline)
        bench_sleep_ms(10);
    if (r == 0) {
        kill(c->pid, SIGKILL);
        waitpid(c->pid, NULL, 0);
    }
    close(c->out);
    c->pid = 0;
}

static void run_standby(bench_ctx *ctx, FILE *csv)
{
    int64_t duration_ms = ctx->quick ? 20000 : 60000;
    double d_s = (double)duration_ms / 1000;
    const char *what = "6 standby polling K8sLeaseGetHolder";
    const char *target = "<= 0.1 GET/s after the first call (<= 6 in 60 s), <= 50 us/call";
    char holder[32], first[256], result[512], n[32];
    srv_stats s0, s1, s2;
    child c = {0};
    pool p;
    int slot, met;

    snprintf(n, sizeof(n), "every %d ms, %.0f s", STANDBY_INTERVAL_MS, d_s);
    if (!BENCH_STANDBY_PATH[0]) {
        bench_row_add(ctx, what, "seed ABI", n, target, -1,
                      "skipped: built without libk8s_lease_wrapper (K8SLEASE_BUILD_COMPAT=OFF)");
        return;
    }
    bench_log("6 standby: a leader at 15/10/2, a seed-ABI standby calling K8sLeaseGetHolder every "
              "%d ms for %.0f s",
              STANDBY_INTERVAL_MS, d_s);
    if (srv_reset(ctx) < 0 || pool_init(&p, ctx, "bench-standby", 0, NULL, &ctx->regular) < 0) {
        bench_row_add(ctx, what, "seed ABI", n, target, -2, "could not reset the server");
        return;
    }
    if ((slot = pool_spawn(&p)) < 0 || pool_wait_leader(&p, bench_now_ns() + 30 * NS_PER_S) < 0) {
        bench_row_add(ctx, what, "seed ABI", n, target, -2, "the leader was not elected in 30 s");
        pool_fini(&p);
        return;
    }
    snprintf(holder, sizeof(holder), "cand-%d", p.c[slot].id);
    /* Past the leader's start: one renewal, its watch open. */
    bench_sleep_ms(ctx->regular.retry_period_ms + 500);
    if (srv_stats_get(ctx, &s0) < 0 || standby_spawn(ctx, &c, holder, duration_ms) < 0 ||
        child_line(&c, "FIRST ", first, sizeof(first), 30000) < 0 || srv_stats_get(ctx, &s1) < 0 ||
        write(c.in, "go\n", 3) != 3 ||
        child_line(&c, "RESULT ", result, sizeof(result), duration_ms + 30000) < 0 ||
        srv_stats_get(ctx, &s2) < 0) {
        bench_row_add(ctx, what, "seed ABI", n, target, -2,
                      "the standby did not run to its end (no %s line)",
                      first[0] ? "RESULT" : "FIRST");
        standby_end(&c);
        pool_fini(&p);
        return;
    }
    standby_end(&c);
    pool_fini(&p);

    double gets = s2.verb[V_GET] - s0.verb[V_GET], gets1 = s2.verb[V_GET] - s1.verb[V_GET];
    double lists = s2.verb[V_LIST] - s0.verb[V_LIST], watches = s2.verb[V_WATCH] - s0.verb[V_WATCH];
    double puts = s2.verb[V_UPDATE] - s0.verb[V_UPDATE];
    double streams = s2.watches_open - s0.watches_open;
    double calls = result_field(result, "calls"), p50 = result_field(result, "p50_us");
    double p99 = result_field(result, "p99_us"), mx = result_field(result, "max_us");
    double first_us = result_field(first, "us"), errors = result_field(result, "errors");
    double wrong = result_field(result, "wrong");

    met = gets1 <= 0.1 * d_s && (duration_ms < 60000 || gets <= 6) && p50 <= 50 && errors == 0 &&
          wrong == 0;
    bench_row_add(ctx, what, "seed ABI", n, target, met,
                  "%.0f GETs of the Lease for %.0f calls (%.0f after the first: %.2f/s), %.0f "
                  "LIST, %.0f WATCH, %+.0f watch streams open; per call p50 %.0f us, p99 %.0f us, "
                  "max %.0f us; first call %.2f ms; %.0f errors, %.0f wrong holder; the leader's "
                  "%.0f PUTs",
                  gets, calls + 1, gets1, gets1 / d_s, lists, watches, streams, p50, p99, mx,
                  first_us / 1000, errors, wrong, puts);
    bench_cell(ctx, CELL_STANDBY,
               "%.0f GETs in %.0f s for %.0f calls (%.2f GET/s after the first), %.0f LIST, %.0f "
               "WATCH; p50 %.0f us, p99 %.0f us per call",
               gets, d_s, calls + 1, gets1 / d_s, lists, watches, p50, p99);
    if (csv)
        fprintf(csv,
                "%s,%d,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.1f,%.1f,%.1f,%.1f,%.0f,%.0f\n",
                bench_csv_mode(ctx, "watch"), STANDBY_INTERVAL_MS, d_s, calls + 1, gets, gets1,
                lists, watches, puts, streams, first_us, p50, p99, mx, errors, wrong);
}

void bench_http(bench_ctx *ctx)
{
    static const char *const real_bookmarks[] = {"--bookmark-interval", "real", NULL};
    int ts = ctx->tgt->kind == TARGET_TESTSERVER;
    ts_server *own = NULL;
    saved_server saved;
    FILE *csv, *standby_csv;

    if (ctx->tgt->kind == TARGET_CLUSTER) {
        bench_row_add(ctx, "6 cost per election", "HTTP/2", "", "", -1,
                      "skipped: 1,000 elections (500 PUT/s) are too much for a shared cluster");
        return;
    }
    if (ts) {
        if (ts_start(&own, real_bookmarks) < 0) {
            bench_row_add(ctx, "6 cost per election", "HTTP/2", "", "", -2,
                          "could not start a test server with --bookmark-interval real");
            return;
        }
        use_server(ctx, own, &saved);
    }
    ctx->tgt->cell[CELL_HTTP][0] = '\0';
    csv = bench_csv_open(ctx, "http.csv",
                         "mode,protocol,elections,conns_after_start,conns_after_window,"
                         "anon_kb_per_election,hwm_kb_per_election,cpu_us_per_renewal,renewals,"
                         "window_s,missed_renewals,terms_lost,renew_ms_mean,wakeups_per_renewal,"
                         "wakeups_per_s,syscall_tool,syscalls_per_renewal,"
                         "syscalls_all_threads_per_renewal,syscall_window_renewals,"
                         "loop_cpu_us_per_renewal");
    standby_csv = bench_csv_open(ctx, "standby.csv",
                                 "mode,interval_ms,duration_s,calls,gets,gets_after_first,lists,"
                                 "watches,puts,watch_streams_opened,first_call_us,p50_us,p99_us,"
                                 "max_us,errors,wrong_holder");
    run_sizes(ctx, csv);
    run_standby(ctx, standby_csv);
    if (ts) {
        restore_server(ctx, &saved);
        ts_stop(own);
        run_http1(ctx, csv);
    }
    if (csv)
        fclose(csv);
    if (standby_csv)
        fclose(standby_csv);
}
