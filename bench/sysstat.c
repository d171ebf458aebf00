/* Benchmark 6, inside the worker: which threads are the library's, their
 * wake-ups, and the process's system calls over a window.
 *
 * The library's threads are those k8slease_client_new started (the loop
 * thread): /proc/self/task listed before and after. A wake-up is a
 * voluntary context switch of such a thread (voluntary_ctxt_switches in
 * /proc/self/task/TID/status): each sleep in epoll_wait, poll or a futex
 * ends with one.
 *
 * System calls are counted by a tool the worker starts on itself:
 *   - perf stat -e raw_syscalls:sys_enter --per-thread -p PID, started with
 *     its events disabled (-D -1) and driven through --control fd:CTL,ACK:
 *     "ping" until it is ready, "enable" and "disable" around the window,
 *     each acknowledged. Per thread, so the worker's own main thread (which
 *     only sleeps through the window) is left out.
 *   - without perf (or when it fails): strace -c -f -p PID, which counts
 *     every thread from its attach to its detach. ptrace stops the process
 *     at every system call, so this never runs during the CPU window.
 *   - neither installed: the row says so.
 * K8SLEASE_BENCH_SYSCALLS=perf|strace|none forces one (to test the
 * fallbacks). */
#define _GNU_SOURCE /* pipe2 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

void tids_list(tid_set *s)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *de;

    s->n = 0;
    while (d && (de = readdir(d)) && s->n < TIDS_MAX)
        if (de->d_name[0] >= '0' && de->d_name[0] <= '9')
            s->tid[s->n++] = (pid_t)atoi(de->d_name);
    if (d)
        closedir(d);
}

void tids_new(const tid_set *before, const tid_set *after, tid_set *out)
{
    out->n = 0;
    for (int i = 0; i < after->n; i++) {
        int seen = 0;

        for (int j = 0; j < before->n && !seen; j++)
            seen = after->tid[i] == before->tid[j];
        if (!seen)
            out->tid[out->n++] = after->tid[i];
    }
}

long tids_ctxt(const tid_set *s, int voluntary)
{
    const char *key = voluntary ? "voluntary_ctxt_switches:" : "nonvoluntary_ctxt_switches:";
    size_t klen = strlen(key);
    long sum = 0;

    for (int i = 0; i < s->n; i++) {
        char path[64], line[256];
        FILE *f;

        snprintf(path, sizeof(path), "/proc/self/task/%d/status", (int)s->tid[i]);
        if (!(f = fopen(path, "r")))
            return -1;
        while (fgets(line, sizeof(line), f))
            if (!strncmp(line, key, klen)) {
                sum += strtol(line + klen, NULL, 10);
                break;
            }
        fclose(f);
    }
    return sum;
}

/* The full path of a program in PATH, or 0 if there is none. */
static int find_program(const char *name, char *out, size_t size)
{
    const char *path = getenv("PATH");
    char dirs[4096], *save = NULL;

    snprintf(dirs, sizeof(dirs), "%s", path && *path ? path : "/usr/bin:/bin");
    for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(out, size, "%s/%s", d, name);
        if (access(out, X_OK) == 0)
            return 1;
    }
    return 0;
}

/* fork + exec argv[0] (a full path), its stdout and stderr to errfile, the
 * descriptors keep[0..1] (>= 0) inherited. The worker has threads: the
 * child calls only async-signal-safe functions. */
static pid_t spawn(char *const argv[], const char *errfile, int keep0, int keep1)
{
    pid_t pid;

    fflush(stdout);
    fflush(stderr);
    if ((pid = fork()) != 0)
        return pid;
    int fd = open(errfile, O_WRONLY | O_CREAT | O_TRUNC, 0600);

    if (fd >= 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
    }
    if (keep0 >= 0)
        fcntl(keep0, F_SETFD, 0);
    if (keep1 >= 0)
        fcntl(keep1, F_SETFD, 0);
    execv(argv[0], argv);
    _exit(127);
}

/* Wait for pid, at most timeout_ms, then SIGKILL it; its exit status or -1. */
static int reap(pid_t pid, int64_t timeout_ms)
{
    int64_t deadline = bench_now_ns() + timeout_ms * NS_PER_MS;
    int status = 0;
    pid_t r;

    while ((r = waitpid(pid, &status, WNOHANG)) == 0 && bench_now_ns() < deadline)
        bench_sleep_ms(10);
    if (r == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        return -1;
    }
    return r == pid && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Send a perf control command and wait for its "ack"; 0 or -1. */
static int perf_command(sys_counter *c, const char *cmd, int64_t timeout_ms)
{
    int64_t deadline = bench_now_ns() + timeout_ms * NS_PER_MS;
    char buf[64];
    size_t len = 0;

    if (write(c->ctl_fd, cmd, strlen(cmd)) != (ssize_t)strlen(cmd))
        return -1;
    for (;;) {
        struct pollfd pfd = {.fd = c->ack_fd, .events = POLLIN};
        int64_t left = (deadline - bench_now_ns()) / NS_PER_MS;
        ssize_t n;

        if (left <= 0 || poll(&pfd, 1, (int)left) <= 0)
            return -1;
        if ((n = read(c->ack_fd, buf + len, sizeof(buf) - 1 - len)) <= 0)
            return -1; /* perf is gone */
        len += (size_t)n;
        buf[len] = '\0';
        if (strstr(buf, "ack"))
            return 0;
        if (len == sizeof(buf) - 1)
            len = 0;
    }
}

static void first_line_of(const char *path, char *out, size_t size)
{
    FILE *f = fopen(path, "r");

    out[0] = '\0';
    while (f && fgets(out, (int)size, f)) {
        out[strcspn(out, "\n")] = '\0';
        if (out[0] && strncmp(out, "Events ", 7))
            break;
        out[0] = '\0';
    }
    if (f)
        fclose(f);
}

static int perf_start(sys_counter *c, const char *prog)
{
    int ctl[2] = {-1, -1}, ack[2] = {-1, -1};
    char pid_s[16], control[64];
    char *argv[] = {(char *)prog,   "stat", "-e",        "raw_syscalls:sys_enter",
                    "--per-thread", "-x,",  "-D",        "-1",
                    "-p",           pid_s,  "--control", control,
                    "-o",           c->out, NULL};

    if (pipe2(ctl, O_CLOEXEC) < 0)
        return -1;
    if (pipe2(ack, O_CLOEXEC) < 0) {
        close(ctl[0]);
        close(ctl[1]);
        return -1;
    }
    snprintf(pid_s, sizeof(pid_s), "%d", (int)getpid());
    snprintf(control, sizeof(control), "fd:%d,%d", ctl[0], ack[1]);
    c->pid = spawn(argv, c->err, ctl[0], ack[1]);
    close(ctl[0]);
    close(ack[1]);
    c->ctl_fd = ctl[1];
    c->ack_fd = ack[0];
    if (c->pid < 0 || perf_command(c, "ping\n", 10000) < 0) {
        first_line_of(c->err, c->why, sizeof(c->why));
        if (c->pid > 0) {
            kill(c->pid, SIGKILL);
            reap(c->pid, 1000);
        }
        close(c->ctl_fd);
        close(c->ack_fd);
        return -1;
    }
    c->tool = SYS_PERF;
    return 0;
}

static int strace_start(sys_counter *c, const char *prog)
{
    char pid_s[16];
    char *argv[] = {(char *)prog, "-c", "-f", "-q", "-o", c->out, "-p", pid_s, NULL};

    snprintf(pid_s, sizeof(pid_s), "%d", (int)getpid());
    if ((c->pid = spawn(argv, c->err, -1, -1)) < 0)
        return -1;
    /* No sign of being attached; it attaches within milliseconds. */
    bench_sleep_ms(1000);
    if (waitpid(c->pid, NULL, WNOHANG) == c->pid) {
        first_line_of(c->err, c->why, sizeof(c->why));
        return -1;
    }
    c->tool = SYS_STRACE;
    return 0;
}

int sys_start(sys_counter *c)
{
    const char *force = getenv("K8SLEASE_BENCH_SYSCALLS");
    char perf[1024], strace[1024];
    int have_perf = find_program("perf", perf, sizeof(perf));
    int have_strace = find_program("strace", strace, sizeof(strace));

    memset(c, 0, sizeof(*c));
    c->ctl_fd = c->ack_fd = -1;
    snprintf(c->out, sizeof(c->out), "/tmp/k8slease-bench-sys-%d.out", (int)getpid());
    snprintf(c->err, sizeof(c->err), "/tmp/k8slease-bench-sys-%d.err", (int)getpid());
    if (force && !strcmp(force, "none"))
        have_perf = have_strace = 0;
    else if (force && !strcmp(force, "strace"))
        have_perf = 0;
    else if (force && !strcmp(force, "perf"))
        have_strace = 0;
    if (have_perf && perf_start(c, perf) == 0)
        return 0;
    if (have_strace && strace_start(c, strace) == 0)
        return 0;
    if (!have_perf && !have_strace) {
        c->tool = SYS_NONE;
        snprintf(c->why, sizeof(c->why), "%s",
                 force && !strcmp(force, "none") ? "K8SLEASE_BENCH_SYSCALLS=none"
                                                 : "perf and strace not installed");
    } else {
        c->tool = SYS_FAILED;
        if (!c->why[0])
            snprintf(c->why, sizeof(c->why), "%s did not start", have_strace ? "strace" : "perf");
    }
    unlink(c->out);
    unlink(c->err);
    return -1;
}

int sys_enable(sys_counter *c)
{
    return c->tool != SYS_PERF ? 0 : perf_command(c, "enable\n", 5000);
}

int sys_disable(sys_counter *c)
{
    return c->tool != SYS_PERF ? 0 : perf_command(c, "disable\n", 5000);
}

/* perf's lines: "COMM-TID,COUNT,,raw_syscalls:sys_enter,...". */
static int perf_parse(FILE *f, pid_t main_tid, double *lib, double *all)
{
    char line[512];
    int found = 0;

    while (fgets(line, sizeof(line), f)) {
        char *comma = strchr(line, ','), *dash, *end;
        double n;

        if (!comma || !strstr(line, "raw_syscalls:sys_enter"))
            continue;
        *comma = '\0';
        if (!(dash = strrchr(line, '-')))
            continue;
        n = strtod(comma + 1, &end);
        if (end == comma + 1)
            continue; /* <not counted> */
        found = 1;
        *all += n;
        if ((pid_t)atoi(dash + 1) != main_tid)
            *lib += n;
    }
    return found ? 0 : -1;
}

/* strace -c's last line: "100.00 SECONDS USECS/CALL CALLS [ERRORS] total". */
static int strace_parse(FILE *f, double *all)
{
    char line[512];
    int found = -1;

    while (fgets(line, sizeof(line), f)) {
        double pct, s, us, calls;

        if (strstr(line, " total") && sscanf(line, "%lf %lf %lf %lf", &pct, &s, &us, &calls) == 4) {
            *all = calls;
            found = 0;
        }
    }
    return found;
}

int sys_finish(sys_counter *c, double *lib, double *all)
{
    FILE *f;
    int rc = -1;

    *lib = *all = 0;
    if (c->tool != SYS_PERF && c->tool != SYS_STRACE)
        return -1;
    kill(c->pid, SIGINT);
    reap(c->pid, 10000);
    if (c->tool == SYS_PERF) {
        close(c->ctl_fd);
        close(c->ack_fd);
    }
    if ((f = fopen(c->out, "r"))) {
        rc = c->tool == SYS_PERF ? perf_parse(f, getpid(), lib, all) : strace_parse(f, all);
        fclose(f);
    }
    if (c->tool == SYS_STRACE)
        *lib = *all; /* not per thread */
    if (rc < 0) {
        first_line_of(c->err, c->why, sizeof(c->why));
        if (!c->why[0])
            snprintf(c->why, sizeof(c->why), "no count in the %s output",
                     c->tool == SYS_PERF ? "perf" : "strace");
        c->tool = SYS_FAILED;
    }
    unlink(c->out);
    unlink(c->err);
    return rc;
}
