/* Benchmark 5: footprint. Stripped size of the two shared libraries (a
 * stripped copy; the build output is left alone) and the resident memory
 * and threads of k8slease-bench-minimal holding one election. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"

#define LIB_TARGET_KB 400
#define RSS_TARGET_KB (5 * 1024)
#define MAX_THREADS   2

/* Size in bytes of a stripped copy of path, or -1. */
static long stripped_size(const bench_ctx *ctx, const char *path)
{
    char tmp[4200], result[16];
    char *argv[] = {"strip", "--strip-all", "-o", tmp, (char *)path, NULL};
    struct stat st;
    long size = -1;
    int fd;

    snprintf(tmp, sizeof(tmp), "%s/.stripped-XXXXXX", ctx->out_dir);
    if ((fd = mkstemp(tmp)) < 0)
        return -1;
    close(fd);
    if (bench_run_child(argv, 30000, result, sizeof(result)) == 0 && stat(tmp, &st) == 0)
        size = (long)st.st_size;
    unlink(tmp);
    return size;
}

static void library(bench_ctx *ctx, FILE *csv, const char *name, const char *path)
{
    char target[32];
    struct stat st;
    long size = stripped_size(ctx, path);

    snprintf(target, sizeof(target), "< %d KB", LIB_TARGET_KB);
    if (size < 0 || stat(path, &st) < 0) {
        bench_row_add(ctx, "5 footprint", "", name, target, -2, "cannot strip %s", path);
        return;
    }
    bench_row_add(ctx, "5 footprint", "", name, target, size < LIB_TARGET_KB * 1024L,
                  "%.0f KB stripped (%.0f KB as built, with debug info)", size / 1024.0,
                  (double)st.st_size / 1024);
    if (csv)
        fprintf(csv, "%s stripped,%ld,bytes,%d KB,%s\n", name, size, LIB_TARGET_KB,
                size < LIB_TARGET_KB * 1024L ? "yes" : "NO");
}

void bench_footprint(bench_ctx *ctx)
{
    char result[512], target[64];
    char *argv[] = {BENCH_MINIMAL_PATH, (char *)srv_kubeconfig(ctx), NULL};
    FILE *csv = bench_csv_open(ctx, "footprint.csv", "item,value,unit,target,met");
    double rss, hwm, anon, file, threads;
    const char *pre = ctx->tgt->kind == TARGET_TESTSERVER ? "" : "apiserver: ";
    int met;

    bench_log("5 footprint");
    /* The libraries do not depend on the server: once, on the test server. */
    if (ctx->tgt->kind != TARGET_TESTSERVER)
        goto minimal;
    library(ctx, csv, "libk8slease.so", BENCH_LIB_K8SLEASE);
#ifdef BENCH_LIB_WRAPPER
    library(ctx, csv, "libk8s_lease_wrapper.so", BENCH_LIB_WRAPPER);
#else
    bench_row_add(ctx, "5 footprint", "", "libk8s_lease_wrapper.so", "", -1,
                  "not built (K8SLEASE_BUILD_COMPAT=OFF)");
#endif

minimal:
    snprintf(target, sizeof(target), "< %d MB RSS, <= %d threads", RSS_TARGET_KB / 1024,
             MAX_THREADS);
    if (srv_reset(ctx) < 0 || bench_run_child(argv, 30000, result, sizeof(result)) != 0 ||
        !result[0] || result_field(result, "leader") != 1) {
        bench_row_add(ctx, "5 footprint", "", "1 election", target, -2,
                      "k8slease-bench-minimal failed");
        bench_cell(ctx, CELL_FOOTPRINT, "failed");
        goto out;
    }
    rss = result_field(result, "rss_kb");
    hwm = result_field(result, "hwm_kb");
    anon = result_field(result, "anon_kb");
    file = result_field(result, "file_kb");
    threads = result_field(result, "threads");
    met = rss < RSS_TARGET_KB && threads <= MAX_THREADS;
    bench_row_add(ctx, "5 footprint", "", "1 election", target, met,
                  "VmRSS %.1f MB (anonymous %.1f MB, mapped files %.1f MB; peak %.1f MB), "
                  "%.0f threads",
                  rss / 1024, anon / 1024, file / 1024, hwm / 1024, threads);
    bench_cell(ctx, CELL_FOOTPRINT, "%.0f threads; VmRSS %.1f MB, of which %.1f MB anonymous",
               threads, rss / 1024, anon / 1024);
    if (csv) {
        fprintf(csv, "%sminimal program RSS,%.0f,kB,%d kB,%s\n", pre, rss, RSS_TARGET_KB,
                rss < RSS_TARGET_KB ? "yes" : "NO");
        fprintf(csv, "%sminimal program RssAnon,%.0f,kB,,\n", pre, anon);
        fprintf(csv, "%sminimal program RssFile,%.0f,kB,,\n", pre, file);
        fprintf(csv, "%sminimal program peak RSS,%.0f,kB,,\n", pre, hwm);
        fprintf(csv, "%sminimal program threads,%.0f,threads,%d,%s\n", pre, threads, MAX_THREADS,
                threads <= MAX_THREADS ? "yes" : "NO");
    }
out:
    if (csv)
        fclose(csv);
}
