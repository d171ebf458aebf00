/* Small helpers of the benchmark driver: clocks, percentiles, the result
 * table, CSV files, /proc, child processes. */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

int64_t bench_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * NS_PER_S + ts.tv_nsec;
}

void bench_sleep_ms(int64_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * NS_PER_MS};

    while (ms > 0 && nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

int64_t bench_rand(int64_t n)
{
    static uint64_t state;

    if (n <= 0)
        return 0;
    if (!state)
        state = (uint64_t)bench_now_ns() ^ ((uint64_t)getpid() << 32) ^ 1;
    /* xorshift64*: plenty for jitter. */
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return (int64_t)((state * UINT64_C(2685821657736338717)) % (uint64_t)n);
}

int samples_add(samples *s, double x)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        double *v = realloc(s->v, cap * sizeof(*v));

        if (!v)
            return -1;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = x;
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

double samples_pct(samples *s, double p)
{
    size_t rank;

    if (!s->n)
        return NAN;
    qsort(s->v, s->n, sizeof(*s->v), cmp_double);
    rank = (size_t)ceil(p / 100.0 * (double)s->n);
    if (rank < 1)
        rank = 1;
    return s->v[rank - 1];
}

double samples_max(const samples *s)
{
    double m = NAN;

    for (size_t i = 0; i < s->n; i++)
        if (i == 0 || s->v[i] > m)
            m = s->v[i];
    return m;
}

void samples_free(samples *s)
{
    free(s->v);
    memset(s, 0, sizeof(*s));
}

void bench_row_add(bench_ctx *ctx, const char *bench, const char *mode, const char *n,
                   const char *target, int met, const char *fmt, ...)
{
    bench_row *r;
    va_list ap;

    if (ctx->nrows == BENCH_MAX_ROWS)
        return;
    r = &ctx->rows[ctx->nrows++];
    snprintf(r->server, sizeof(r->server), "%s", ctx->tgt ? ctx->tgt->label : "");
    snprintf(r->bench, sizeof(r->bench), "%s", bench);
    snprintf(r->mode, sizeof(r->mode), "%s", mode);
    snprintf(r->n, sizeof(r->n), "%s", n);
    snprintf(r->target, sizeof(r->target), "%s", target);
    r->met = met == 1 ? "yes" : met == 0 ? "NO" : met == -1 ? "-" : "failed";
    va_start(ap, fmt);
    vsnprintf(r->result, sizeof(r->result), fmt, ap);
    va_end(ap);
}

void bench_cell(bench_ctx *ctx, int cell, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(ctx->tgt->cell[cell], sizeof(ctx->tgt->cell[cell]), fmt, ap);
    va_end(ap);
}

const char *bench_csv_mode(const bench_ctx *ctx, const char *mode)
{
    static char out[64];

    if (ctx->tgt->kind == TARGET_TESTSERVER)
        return mode;
    snprintf(out, sizeof(out), "%s-%s", ctx->tgt->kind == TARGET_ENVTEST ? "apiserver" : "cluster",
             mode);
    return out;
}

FILE *bench_csv_open(const bench_ctx *ctx, const char *name, const char *header)
{
    char path[4200];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", ctx->out_dir, name);
    if (!(f = fopen(path, ctx->csv_append ? "a" : "w"))) {
        bench_log("cannot write %s: %s", path, strerror(errno));
        return NULL;
    }
    if (header && !ctx->csv_append)
        fprintf(f, "%s\n", header);
    return f;
}

long proc_status_field(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    size_t flen = strlen(field);
    char line[256];
    long v = -1;

    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, field, flen) == 0 && line[flen] == ':') {
            v = strtol(line + flen + 1, NULL, 10);
            break;
        }
    }
    fclose(f);
    return v;
}

void bench_log(const char *fmt, ...)
{
    static int64_t t0;
    int64_t now = bench_now_ns();
    va_list ap;

    if (!t0)
        t0 = now;
    fprintf(stderr, "[%6.1f s] ", (double)(now - t0) / NS_PER_S);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

int bench_run_child(char *const argv[], int64_t timeout_ms, char *result, size_t size)
{
    int64_t deadline = bench_now_ns() + timeout_ms * NS_PER_MS;
    char buf[8192];
    size_t len = 0;
    int fds[2], status = -1, killed = 0;
    pid_t pid;

    result[0] = '\0';
    if (pipe(fds) < 0)
        return -1;
    fflush(stdout);
    fflush(stderr);
    if ((pid = fork()) < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        execvp(argv[0], argv);
        fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    for (;;) {
        struct pollfd pfd = {.fd = fds[0], .events = POLLIN};
        int64_t left_ms = (deadline - bench_now_ns()) / NS_PER_MS;
        ssize_t n;

        if (left_ms <= 0) {
            kill(pid, SIGKILL);
            killed = 1;
            break;
        }
        if (poll(&pfd, 1, (int)left_ms) < 0 && errno != EINTR)
            break;
        if (!(pfd.revents & (POLLIN | POLLHUP)))
            continue;
        if (len == sizeof(buf) - 1)
            len = 0; /* only the RESULT line matters; drop chatter */
        n = read(fds[0], buf + len, sizeof(buf) - 1 - len);
        if (n <= 0)
            break;
        len += (size_t)n;
        buf[len] = '\0';
        /* Keep the last complete RESULT line. */
        for (char *line = buf, *nl; (nl = strchr(line, '\n')); line = nl + 1) {
            *nl = '\0';
            if (strncmp(line, "RESULT ", 7) == 0)
                snprintf(result, size, "%s", line);
            if (!strchr(nl + 1, '\n')) {
                len = strlen(nl + 1);
                memmove(buf, nl + 1, len + 1);
                break;
            }
        }
    }
    close(fds[0]);
    if (waitpid(pid, &status, 0) != pid || killed)
        return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

double result_field(const char *line, const char *key)
{
    size_t klen = strlen(key);

    for (const char *p = line; (p = strstr(p, key)); p += klen) {
        if ((p == line || p[-1] == ' ') && p[klen] == '=')
            return strtod(p + klen + 1, NULL);
    }
    return NAN;
}
