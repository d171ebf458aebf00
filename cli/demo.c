/* k8slease demo: three candidate processes on one Lease. Shows who leads,
 * kills the leader with SIGKILL (failover once the lease expires), then
 * makes the new leader release (handover at once), with a timeline in ms.
 * Runs on a bundled k8slease-testserver unless a cluster is configured. */
#define _DEFAULT_SOURCE /* kill(), sigwait() and friends under -std=c11 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "k8slease.h"

#define CANDIDATES      3
#define LD_MS           3000
#define RD_MS           2000
#define RP_MS           500
#define STEP_TIMEOUT_MS 30000

typedef struct demo {
    int64_t t0;
    pid_t server;
    cli_common common;         /* --kubeconfig, --context, --namespace, --log-level */
    char kubeconfig[PATH_MAX]; /* of the bundled test server, "" if none */
    char lease[64];
    pid_t pid[CANDIDATES + 1]; /* 1-based; 0 once reaped */
    int events;                /* read end of the candidates' event pipe */
    char buf[4096];
    size_t len;
} demo;

/* An event reported by a candidate: 'S' started (epoch), 'X' stopped,
 * 'L' new leader seen (epoch, identity), 'E' error. */
typedef struct event {
    char kind;
    int who;
    long long epoch;
    char text[256];
} event;

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void
say(const demo *d, const char *fmt, ...)
{
    va_list ap;

    printf("%6lld ms  ", (long long)(cli_now_ms() - d->t0));
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

/* ---- candidate processes ---------------------------------------------- */

static int event_fd;
static int self;

static void emit(const char *fmt, ...)
{
    char line[512];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n > (int)sizeof(line) - 1)
        n = (int)sizeof(line) - 1;
    /* One write of less than PIPE_BUF bytes: lines never interleave. */
    if (write(event_fd, line, (size_t)n) < 0)
        _exit(CLI_ERROR);
}

static void on_started(int64_t epoch, void *ud)
{
    (void)ud;
    emit("S %d %lld\n", self, (long long)epoch);
}

static void on_stopped(void *ud)
{
    (void)ud;
    emit("X %d 0\n", self);
}

static void on_new_leader(const char *identity, int64_t epoch, void *ud)
{
    (void)ud;
    emit("L %d %lld %s\n", self, (long long)epoch, identity);
}

static void candidate(int idx, const demo *d)
{
    k8slease_client_options copts = K8SLEASE_CLIENT_OPTIONS_INIT;
    k8slease_elector_options eopts = K8SLEASE_ELECTOR_OPTIONS_INIT;
    k8slease_client *client = NULL;
    k8slease_elector *e = NULL;
    char identity[32];
    sigset_t set;
    int sig;

    self = idx;
    /* Block SIGTERM before the loop thread exists, so only sigwait sees it. */
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);

    cli_client_options(&d->common, &copts);
    if (k8slease_client_new(&client, &copts) != 0) {
        emit("E %d 0 %s\n", idx, k8slease_error_last());
        _exit(CLI_ERROR);
    }
    snprintf(identity, sizeof(identity), "candidate-%d", idx);
    eopts.ns = d->common.ns;
    eopts.name = d->lease;
    eopts.identity = identity;
    eopts.lease_duration_ms = LD_MS;
    eopts.renew_deadline_ms = RD_MS;
    eopts.retry_period_ms = RP_MS;
    eopts.on_started_leading = on_started;
    eopts.on_stopped_leading = on_stopped;
    eopts.on_new_leader = on_new_leader;
    if (k8slease_elector_start(&e, client, &eopts) != 0) {
        emit("E %d 0 %s\n", idx, k8slease_error_last());
        _exit(CLI_ERROR);
    }
    sigwait(&set, &sig);
    k8slease_elector_stop(e, 1);
    k8slease_elector_free(e);
    k8slease_client_free(client);
    _exit(CLI_OK);
}

/* ---- the driver --------------------------------------------------------- */

static int cluster_configured(const demo *d)
{
    const char *kc = getenv("KUBECONFIG"), *home = getenv("HOME");
    char path[PATH_MAX];
    struct stat st;

    if (d->common.kubeconfig || getenv("KUBERNETES_SERVICE_HOST") || (kc && kc[0]))
        return 1;
    if (!home)
        return 0;
    snprintf(path, sizeof(path), "%s/.kube/config", home);
    return stat(path, &st) == 0;
}

/* Where k8slease-testserver is: $K8SLEASE_TESTSERVER, next to us in the
 * build tree or the install, else $PATH. */
static void testserver_path(char *out, size_t size)
{
    const char *env = getenv("K8SLEASE_TESTSERVER");
    static const char *rel[] = {"/../tools/testserver/k8slease-testserver", "/k8slease-testserver"};
    char self_path[PATH_MAX];
    ssize_t n;

    if (env && env[0]) {
        snprintf(out, size, "%s", env);
        return;
    }
    n = readlink("/proc/self/exe", self_path, sizeof(self_path) - 1);
    if (n > 0) {
        char *slash;

        self_path[n] = '\0';
        if ((slash = strrchr(self_path, '/')))
            *slash = '\0';
        for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
            if ((size_t)snprintf(out, size, "%s%s", self_path, rel[i]) < size &&
                access(out, X_OK) == 0)
                return;
        }
    }
    snprintf(out, size, "k8slease-testserver");
}

static int start_testserver(demo *d)
{
    char path[PATH_MAX], line[1024];
    int fds[2];
    size_t len = 0;
    int64_t deadline = cli_now_ms() + 10000;
    const char *kc;

    testserver_path(path, sizeof(path));
    if (pipe(fds) != 0)
        return -1;
    d->server = fork();
    if (d->server < 0)
        return -1;
    if (d->server == 0) {
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        execlp(path, path, "--quiet", (char *)NULL);
        fprintf(stderr, "k8slease demo: cannot run %s: %s\n", path, strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    /* Wait (bounded) for "ready port=... dir=... kubeconfig=PATH". */
    while (len < sizeof(line) - 1 && !memchr(line, '\n', len)) {
        struct pollfd p = {.fd = fds[0], .events = POLLIN};
        int64_t left = deadline - cli_now_ms();
        ssize_t n;

        if (left <= 0 || poll(&p, 1, (int)left) <= 0)
            break;
        if ((n = read(fds[0], line + len, sizeof(line) - 1 - len)) <= 0)
            break;
        len += (size_t)n;
        line[len] = '\0';
    }
    close(fds[0]);
    line[len] = '\0';
    kc = strstr(line, "kubeconfig=");
    if (!kc) {
        fprintf(stderr, "k8slease demo: %s did not report ready within 10 s\n", path);
        return -1;
    }
    kc += strlen("kubeconfig=");
    snprintf(d->kubeconfig, sizeof(d->kubeconfig), "%.*s", (int)strcspn(kc, " \n"), kc);
    /* Its own namespace "default" and context, whatever the flags said. */
    d->common.kubeconfig = d->kubeconfig;
    d->common.context = NULL;
    d->common.ns = NULL;
    return 0;
}

/* Next event from any candidate, or -1 after timeout_ms. */
static int next_event(demo *d, event *ev, int64_t timeout_ms)
{
    int64_t deadline = cli_now_ms() + timeout_ms;

    for (;;) {
        char *nl = memchr(d->buf, '\n', d->len);
        struct pollfd p = {.fd = d->events, .events = POLLIN};
        int64_t left;
        ssize_t n;

        if (nl) {
            *nl = '\0';
            memset(ev, 0, sizeof(*ev));
            if (sscanf(d->buf, "%c %d %lld %255[^\n]", &ev->kind, &ev->who, &ev->epoch, ev->text) <
                3)
                ev->kind = '?';
            d->len -= (size_t)(nl + 1 - d->buf);
            memmove(d->buf, nl + 1, d->len);
            return 0;
        }
        left = deadline - cli_now_ms();
        if (left <= 0 || poll(&p, 1, (int)left) <= 0)
            return -1;
        n = read(d->events, d->buf + d->len, sizeof(d->buf) - d->len);
        if (n <= 0)
            return -1;
        d->len += (size_t)n;
    }
}

/* Print events until one of kind `kind` (from anyone but `not_from`)
 * arrives; returns its candidate, or -1 (message printed) after timeout_ms.
 * With what == NULL, only prints events for timeout_ms and returns -2. */
static int wait_for(demo *d, char kind, int not_from, long long *epoch, const char *what,
                    int64_t timeout_ms)
{
    int64_t deadline = cli_now_ms() + timeout_ms;
    event ev;

    while (next_event(d, &ev, deadline - cli_now_ms()) == 0) {
        switch (ev.kind) {
        case 'S':
            say(d, "candidate-%d elected, epoch %lld", ev.who, ev.epoch);
            break;
        case 'X':
            say(d, "candidate-%d stopped leading", ev.who);
            break;
        case 'L': {
            char mine[32];

            snprintf(mine, sizeof(mine), "candidate-%d", ev.who);
            if (ev.text[0] && strcmp(ev.text, mine) != 0)
                say(d, "candidate-%d sees leader %s (epoch %lld)", ev.who, ev.text, ev.epoch);
            break;
        }
        case 'E':
            fprintf(stderr, "k8slease demo: candidate-%d: %s\n", ev.who, ev.text);
            return -1;
        }
        if (ev.kind == kind && ev.who != not_from) {
            if (epoch)
                *epoch = ev.epoch;
            return ev.who;
        }
    }
    if (!what)
        return -2; /* just watching: the time is up */
    fprintf(stderr, "k8slease demo: no %s within %lld s\n", what, (long long)timeout_ms / 1000);
    return -1;
}

static void reap(demo *d, int idx)
{
    int status;

    if (d->pid[idx] > 0 && waitpid(d->pid[idx], &status, 0) == d->pid[idx])
        d->pid[idx] = 0;
}

static void cleanup(demo *d)
{
    for (int i = 1; i <= CANDIDATES; i++)
        if (d->pid[i] > 0) {
            kill(d->pid[i], SIGKILL);
            reap(d, i);
        }
    if (d->server > 0) {
        kill(d->server, SIGTERM);
        waitpid(d->server, NULL, 0);
    }
}

static int run_demo(demo *d)
{
    int fds[2], first, second, third;
    long long e1, e2, e3;
    int64_t t_kill, t_release;

    if (pipe(fds) != 0)
        return -1;
    d->events = fds[0];
    for (int i = 1; i <= CANDIDATES; i++) {
        fflush(stdout);
        d->pid[i] = fork();
        if (d->pid[i] < 0)
            return -1;
        if (d->pid[i] == 0) {
            close(fds[0]);
            event_fd = fds[1];
            candidate(i, d);
        }
        say(d, "started candidate-%d (pid %d)", i, (int)d->pid[i]);
    }
    close(fds[1]);

    if ((first = wait_for(d, 'S', 0, &e1, "leader", STEP_TIMEOUT_MS)) < 0)
        return -1;
    /* Let it lead for a while (the followers report whom they see). */
    if (wait_for(d, '-', 0, NULL, NULL, 1500) != -2)
        return -1;

    say(d, "SIGKILL candidate-%d (the leader): no release, its lease must expire (%d ms)", first,
        LD_MS);
    t_kill = cli_now_ms();
    kill(d->pid[first], SIGKILL);
    reap(d, first);
    if ((second = wait_for(d, 'S', first, &e2, "failover", STEP_TIMEOUT_MS)) < 0)
        return -1;
    say(d, "failover: %lld ms after the kill (lease duration %d ms), epoch %lld -> %lld",
        (long long)(cli_now_ms() - t_kill), LD_MS, e1, e2);

    say(d, "SIGTERM candidate-%d (the leader): it releases the lease", second);
    t_release = cli_now_ms();
    kill(d->pid[second], SIGTERM);
    third = wait_for(d, 'S', second, &e3, "handover", STEP_TIMEOUT_MS);
    if (third < 0)
        return -1;
    say(d, "handover: %lld ms after SIGTERM, epoch %lld -> %lld",
        (long long)(cli_now_ms() - t_release), e2, e3);
    reap(d, second);
    kill(d->pid[third], SIGTERM);
    wait_for(d, 'X', 0, NULL, "stop of the last leader", STEP_TIMEOUT_MS);
    reap(d, third);
    if (e1 >= e2 || e2 >= e3) {
        fprintf(stderr, "k8slease demo: epochs did not increase: %lld %lld %lld\n", e1, e2, e3);
        return -1;
    }
    say(d, "done: 3 terms, epochs strictly increasing: %lld < %lld < %lld", e1, e2, e3);
    return 0;
}

static const char usage[] =
    "usage: k8slease demo [--local]\n"
    "\n"
    "Three candidate processes on one Lease: who leads, a crash of the leader\n"
    "(SIGKILL: failover once its lease expires), then a graceful handover (SIGTERM:\n"
    "the lease is released), with a timeline in ms. Runs on the configured cluster\n"
    "in a throwaway Lease, or on a bundled k8slease-testserver on loopback when no\n"
    "cluster is configured ($K8SLEASE_TESTSERVER names the binary).\n"
    "\n"
    "  --local                use the bundled test server even if a cluster is configured\n"
    "  --kubeconfig FILE, --context NAME, --namespace NS, --log-level error|warn|info|debug,\n"
    "  --help, --version\n"
    "\n"
    "Exit status: 0 the demo ran as expected; 1 it did not; 2 usage.\n";

enum { OPT_LOCAL = 1 };

static const cli_opt opts[] = {
    {"--local", OPT_LOCAL, 0},
    {NULL, 0, 0},
};

int cli_demo(int argc, char **argv)
{
    cli_parser p;
    demo d;
    int local = 0, rc, id;

    memset(&d, 0, sizeof(d));
    cli_parser_init(&p, "k8slease demo", usage, opts, argc, argv);
    while ((id = cli_next(&p)) == OPT_LOCAL)
        local = 1;
    if (id == CLI_STOP)
        return p.exit_code;
    if (id == CLI_ARG || p.i < p.argc)
        return cli_usage_error(&p, "unexpected argument \"%s\"",
                               id == CLI_ARG ? p.value : p.argv[p.i]);
    if ((rc = cli_backend_check(&p, "the demo runs on Kubernetes (or its test server)")) != CLI_OK)
        return rc;
    d.common = p.common;
    d.t0 = cli_now_ms();
    snprintf(d.lease, sizeof(d.lease), "k8slease-demo-%d", (int)getpid());
    if (local || !cluster_configured(&d)) {
        if (start_testserver(&d) != 0) {
            cleanup(&d);
            return CLI_ERROR;
        }
        say(&d, "%s: started k8slease-testserver (%s)", local ? "--local" : "no cluster configured",
            d.kubeconfig);
    } else {
        say(&d, "using the configured cluster; lease %s in namespace %s", d.lease,
            d.common.ns ? d.common.ns : "of the context");
    }
    say(&d, "lease %s: duration %d ms, renew deadline %d ms, retry period %d ms", d.lease, LD_MS,
        RD_MS, RP_MS);
    rc = run_demo(&d);
    cleanup(&d);
    return rc == 0 ? CLI_OK : CLI_ERROR;
}
