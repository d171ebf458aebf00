/* k8slease-bench: runs benchmarks 1-5 against k8slease-testserver on
 * loopback, then (--envtest, --kubeconfig) against a real kube-apiserver,
 * and prints the result table (Markdown), with CSV files for the plots.
 * See bench/README.md. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "k8slease.h"

static const struct {
    char id;
    void (*run)(bench_ctx *);
} benchmarks[] = {
    {'1', bench_handover},     {'2', bench_failover},     {'3', bench_api_load},
    {'4', bench_scale},        {'5', bench_footprint},    {'6', bench_http},
    {'7', bench_hung_replica}, {'8', bench_crash_report},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: k8slease-bench [--quick] [--out DIR] [--only LIST]\n"
               "                     [--envtest | --kubeconfig FILE]\n"
               "  --quick      fewer samples and shorter windows (under 2 minutes)\n"
               "  --out DIR    where the CSV files and summary go (default bench/results)\n"
               "  --only LIST  benchmarks to run, e.g. 1,3 (default 1,2,3,4,5,6,7,8)\n"
               "  --hang-s N   benchmark 7: how long replica 1 hangs (default 100, quick 20)\n"
               "  --envtest    then the same on the kube-apiserver of envtest.sh\n"
               "               ($K8SLEASE_TEST_KUBECONFIG): all of it, load read from /metrics\n"
               "  --kubeconfig FILE  then on that cluster, as is safe on a shared one:\n"
               "               1, 2, 4 (100 elections), 5; not 3\n");
}

/* The first line of a command's output, "" if none. */
static void command_line(const char *cmd, char *out, size_t size)
{
    FILE *p = popen(cmd, "r");

    out[0] = '\0';
    if (!p)
        return;
    if (fgets(out, (int)size, p))
        out[strcspn(out, "\n")] = '\0';
    pclose(p);
}

static void cpu_model(char *out, size_t size)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];

    snprintf(out, size, "unknown CPU");
    while (f && fgets(line, sizeof(line), f)) {
        char *colon = strchr(line, ':');

        if (strncmp(line, "model name", 10) == 0 && colon) {
            colon += 1 + strspn(colon + 1, " \t");
            colon[strcspn(colon, "\n")] = '\0';
            snprintf(out, size, "%s", colon);
            break;
        }
    }
    if (f)
        fclose(f);
}

/* The first line of a file, "" if unreadable. */
static void first_line(const char *path, char *out, size_t size)
{
    FILE *f = fopen(path, "r");

    out[0] = '\0';
    if (f && fgets(out, (int)size, f))
        out[strcspn(out, "\n")] = '\0';
    if (f)
        fclose(f);
}

static void print_header(FILE *f, const bench_ctx *ctx, int argc, char **argv)
{
    char cpu[256], git[128], date[64], cmd[1024] = "";
    struct utsname u;
    double mem_gib = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE) / (1 << 30);

    cpu_model(cpu, sizeof(cpu));
    uname(&u);
    strftime(date, sizeof(date), "%Y-%m-%d %H:%M UTC", gmtime(&ctx->started));
    command_line("git -C " BENCH_SOURCE_DIR " describe --always --dirty 2>/dev/null", git,
                 sizeof(git));
    for (int i = 0; i < argc; i++) {
        size_t len = strlen(cmd);

        snprintf(cmd + len, sizeof(cmd) - len, "%s%s", i ? " " : "", argv[i]);
    }
    fprintf(f, "# k8slease benchmarks%s\n\n", ctx->quick ? " (quick)" : "");
    fprintf(f, "- k8slease %s, git %s\n", k8slease_version(), git[0] ? git : "unknown");
    fprintf(f, "- date: %s\n", date);
    fprintf(f, "- machine: nproc %ld, %s, %s %s %s, %.1f GiB RAM\n", sysconf(_SC_NPROCESSORS_ONLN),
            cpu, u.sysname, u.release, u.machine, mem_gib);
    fprintf(f, "- command: %s\n", cmd);
    fprintf(f, "- /proc/loadavg at start: %s\n", ctx->loadavg);
    fprintf(f, "- server: k8slease-testserver on 127.0.0.1, same machine (TLS; HTTP/2, negotiated "
               "by ALPN as with a real server)\n");
    if (ctx->real.kind == TARGET_ENVTEST)
        fprintf(f,
                "- real server: %s on 127.0.0.1 with its etcd, same machine, started by "
                "tests/integration/envtest.sh; API load from its /metrics\n",
                ctx->real.label);
    else if (ctx->real.kind == TARGET_CLUSTER)
        fprintf(f,
                "- real server: the cluster of %s (shared: benchmark 3 skipped, scale at most "
                "100 elections)\n",
                ctx->real.kubeconfig);
    if (ctx->etcd_bin)
        fprintf(f,
                "- etcd (benchmarks 1-2, mode etcd): %s%s%s on 127.0.0.1, same machine (plain "
                "http, a fresh data directory in /tmp per run)\n",
                ctx->etcd_bin, ctx->etcd_version[0] ? " " : "", ctx->etcd_version);
    else
        fprintf(f, "- etcd (benchmarks 1-2, mode etcd): not installed, skipped\n");
    fprintf(f,
            "- timings (lease duration / renew deadline / retry period): benchmarks 1-3 "
            "%lld/%lld/%lld ms, 4-5 %lld/%lld/%lld ms (client-go's defaults)\n",
            (long long)ctx->fast.lease_duration_ms, (long long)ctx->fast.renew_deadline_ms,
            (long long)ctx->fast.retry_period_ms, (long long)ctx->regular.lease_duration_ms,
            (long long)ctx->regular.renew_deadline_ms, (long long)ctx->regular.retry_period_ms);
    fprintf(f, "- modes: watch = poll_only 0 (the default), poll-only = poll_only 1 (as "
               "client-go), etcd = the etcd backend (K8SLEASE_BACKEND_ETCD)\n\n");
}

#define COLUMNS 7

static void row_cells(const bench_row *r, const char *cells[COLUMNS])
{
    cells[0] = r->server;
    cells[1] = r->bench;
    cells[2] = r->mode;
    cells[3] = r->n;
    cells[4] = r->result;
    cells[5] = r->target;
    cells[6] = r->met;
}

static void print_cells(FILE *f, const char *const cells[COLUMNS], const size_t w[COLUMNS])
{
    for (int c = 0; c < COLUMNS; c++)
        fprintf(f, "| %-*s ", (int)w[c], cells[c]);
    fputs("|\n", f);
}

/* The rows as a Markdown table, columns padded to line up in a terminal. */
static void print_table(FILE *f, const bench_ctx *ctx)
{
    static const char *const head[COLUMNS] = {"server", "benchmark", "mode", "n",
                                              "result", "target",    "met"};
    const char *cells[COLUMNS];
    size_t w[COLUMNS];

    for (int c = 0; c < COLUMNS; c++)
        w[c] = strlen(head[c]);
    for (int i = 0; i < ctx->nrows; i++) {
        row_cells(&ctx->rows[i], cells);
        for (int c = 0; c < COLUMNS; c++)
            if (strlen(cells[c]) > w[c])
                w[c] = strlen(cells[c]);
    }
    print_cells(f, head, w);
    for (int c = 0; c < COLUMNS; c++) {
        fputs("|-", f);
        for (size_t k = 0; k <= w[c]; k++)
            fputc('-', f);
    }
    fputs("|\n", f);
    for (int i = 0; i < ctx->nrows; i++) {
        row_cells(&ctx->rows[i], cells);
        print_cells(f, cells, w);
    }
}

/* The README's table: watch mode, one column per server. */
static void print_readme_table(FILE *f, const bench_ctx *ctx)
{
    static const char *const what[CELL_COUNT] = {"graceful handover",
                                                 "crash failover beyond lease duration",
                                                 "follower API load",
                                                 "leader API load",
                                                 "elections in one process, retry period 2 s",
                                                 "minimal program, one election",
                                                 "per election, N started at once, 15/10/2: "
                                                 "CPU/renewal, RssAnon, loop wake-ups and "
                                                 "syscalls per renewal (6)",
                                                 "standby polling K8sLeaseGetHolder every "
                                                 "200 ms (6)",
                                                 "one of two replicas hung (7)",
                                                 "crash failover on the kubelet's report (8)"};
    /* The real server's column first: it is the reference. */
    const bench_target *col[2] = {ctx->real.label[0] ? &ctx->real : &ctx->ts, &ctx->ts};
    int ncol = ctx->real.label[0] ? 2 : 1;

    fprintf(f, "| benchmark (watch mode) |");
    for (int c = 0; c < ncol; c++)
        fprintf(f, " %s |", col[c]->label);
    fprintf(f, "\n| --- |%s\n", ncol == 2 ? " --- | --- |" : " --- |");
    for (int k = 0; k < CELL_COUNT; k++) {
        fprintf(f, "| %s |", what[k]);
        for (int c = 0; c < ncol; c++)
            fprintf(f, " %s |", col[c]->cell[k][0] ? col[c]->cell[k] : "not run");
        fputc('\n', f);
    }
}

static void csv_field(FILE *f, const char *s, int last)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputs(last ? "\"\n" : "\",", f);
}

static void write_summary(const bench_ctx *ctx, int argc, char **argv, double run_s)
{
    FILE *md = bench_csv_open(ctx, "summary.md", NULL);
    FILE *csv = bench_csv_open(ctx, "summary.csv", "server,benchmark,mode,n,result,target,met");
    char end_load[64];

    if (md) {
        print_header(md, ctx, argc, argv);
        print_readme_table(md, ctx);
        fputc('\n', md);
        print_table(md, ctx);
        first_line("/proc/loadavg", end_load, sizeof(end_load));
        fprintf(md, "\nrun time: %.0f s; /proc/loadavg at the end: %s\n", run_s, end_load);
        fclose(md);
    }
    for (int i = 0; csv && i < ctx->nrows; i++) {
        const char *cells[COLUMNS];

        row_cells(&ctx->rows[i], cells);
        for (int c = 0; c < COLUMNS; c++)
            csv_field(csv, cells[c], c == COLUMNS - 1);
    }
    if (csv)
        fclose(csv);
}

int main(int argc, char **argv)
{
    static bench_ctx ctx = {
        .out_dir = "bench/results",
        .fast = {2000, 1500, 500},
        .regular = {15000, 10000, 2000},
    };
    const char *only = "12345678";
    int64_t t0 = bench_now_ns();
    ssize_t n;
    int failed = 0;

    ctx.started = time(NULL);
    first_line("/proc/loadavg", ctx.loadavg, sizeof(ctx.loadavg));
    if (argc > 1 && !strcmp(argv[1], "candidate"))
        return candidate_main(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "scale-worker"))
        return scale_worker_main(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "hung-worker"))
        return hung_worker_main(argc - 1, argv + 1);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            ctx.quick = 1;
        else if (!strcmp(argv[i], "--out") && i + 1 < argc)
            ctx.out_dir = argv[++i];
        else if (!strcmp(argv[i], "--hang-s") && i + 1 < argc)
            ctx.hang_s = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else if (!strcmp(argv[i], "--envtest")) {
            const char *kc = getenv("K8SLEASE_TEST_KUBECONFIG");

            if (!kc || !*kc) {
                fprintf(stderr, "k8slease-bench: --envtest runs under tests/integration/envtest.sh "
                                "(K8SLEASE_TEST_KUBECONFIG is not set); see bench/run.sh "
                                "--apiserver DIR\n");
                return 2;
            }
            ctx.real.kind = TARGET_ENVTEST;
            snprintf(ctx.real.kubeconfig, sizeof(ctx.real.kubeconfig), "%s", kc);
        } else if (!strcmp(argv[i], "--kubeconfig") && i + 1 < argc) {
            ctx.real.kind = TARGET_CLUSTER;
            snprintf(ctx.real.kubeconfig, sizeof(ctx.real.kubeconfig), "%s", argv[++i]);
        } else {
            usage(strcmp(argv[i], "--help") ? stderr : stdout);
            return strcmp(argv[i], "--help") ? 2 : 0;
        }
    }

    /* Candidates that die make writes fail with EPIPE, not kill us. */
    signal(SIGPIPE, SIG_IGN);
    if ((n = readlink("/proc/self/exe", ctx.self_exe, sizeof(ctx.self_exe) - 1)) <= 0) {
        fprintf(stderr, "k8slease-bench: cannot find myself: %s\n", strerror(errno));
        return 1;
    }
    ctx.self_exe[n] = '\0';
    if ((ctx.etcd_bin = bench_etcd_find())) {
        char cmd[4200], *v;

        /* "etcd Version: 3.4.23": keep the number. */
        snprintf(cmd, sizeof(cmd), "'%s' --version 2>/dev/null", ctx.etcd_bin);
        command_line(cmd, ctx.etcd_version, sizeof(ctx.etcd_version));
        if ((v = strstr(ctx.etcd_version, "Version: ")))
            memmove(ctx.etcd_version, v + 9, strlen(v + 9) + 1);
    }
    if (mkdir(ctx.out_dir, 0755) < 0 && errno != EEXIST) {
        fprintf(stderr, "k8slease-bench: cannot create %s: %s\n", ctx.out_dir, strerror(errno));
        return 1;
    }
    /* The real server first: its label goes into the header. */
    if (ctx.real.kind != TARGET_TESTSERVER && srv_open(&ctx, &ctx.real) < 0)
        return 1;
    print_header(stdout, &ctx, argc, argv);
    fflush(stdout);
    if (srv_open(&ctx, &ctx.ts) < 0)
        return 1;
    for (size_t i = 0; i < sizeof(benchmarks) / sizeof(benchmarks[0]); i++)
        if (strchr(only, benchmarks[i].id))
            benchmarks[i].run(&ctx);
    srv_close(&ctx.ts);
    if (ctx.real.kind != TARGET_TESTSERVER) {
        /* The same benchmarks on the real server, CSV rows appended. */
        ctx.tgt = &ctx.real;
        ctx.csv_append = 1;
        bench_log("the same on %s", ctx.real.label);
        for (size_t i = 0; i < sizeof(benchmarks) / sizeof(benchmarks[0]); i++)
            if (strchr(only, benchmarks[i].id))
                benchmarks[i].run(&ctx);
        srv_reset(&ctx);
        srv_close(&ctx.real);
        if (ctx.real.kind == TARGET_CLUSTER)
            printf("\nLeft in the cluster (released): Leases bench-handover, bench-failover, "
                   "bench-minimal and scale-00000..scale-00099 in the kubeconfig's namespace.\n");
    }

    print_readme_table(stdout, &ctx);
    printf("\n");
    print_table(stdout, &ctx);
    printf("\nrun time: %.0f s; CSV files and summary.md in %s\n",
           (double)(bench_now_ns() - t0) / NS_PER_S, ctx.out_dir);
    ctx.csv_append = 0; /* the summary files are written whole */
    write_summary(&ctx, argc, argv, (double)(bench_now_ns() - t0) / NS_PER_S);
    for (int i = 0; i < ctx.nrows; i++)
        failed |= !strcmp(ctx.rows[i].met, "failed");
    return failed;
}
