/*
 * main.c - k8slease-testserver: command line, files, signals, restarts.
 *
 * Contract with the integration harness (tests/lib/harness.h):
 * exactly one line on stdout once listening,
 *     ready port=<port> dir=<DIR> kubeconfig=<DIR>/kubeconfig
 * then nothing more on stdout; SIGTERM/SIGINT exit 0; a bad flag exits 2
 * with one line on stderr naming the flag.
 */
/* realpath() is an XSI interface. */
#define _XOPEN_SOURCE 700

#include "server.h"
#include "util.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char usage[] =
    "usage: k8slease-testserver [--dir DIR] [--address 127.0.0.1|::1] [--port N]\n"
    "                           [--token T] [--history N] [--bookmark-interval MS|real]\n"
    "                           [--threads N] [--seed N] [--fault JSON]... [--no-http2]\n"
    "                           [--http2-max-streams N]\n"
    "                           [--feature-gates CoordinatedLeaderElection=true]\n"
    "                           [--cle-election-duration MS]\n"
    "                           [--verbose] [--quiet] [--help] [--version]\n"
    "\n"
    "A Kubernetes API server for tests: coordination.k8s.io/v1 Leases, v1 Pods,\n"
    "discovery for kubectl, TLS with bearer-token and client-certificate auth,\n"
    "and fault injection under /testserver/v1 (see k8slease-testserver(1)).\n"
    "\n"
    "  --dir DIR              certificates, token and kubeconfigs go here (reused\n"
    "                         if present); default: a temporary directory removed\n"
    "                         at exit\n"
    "  --address ADDR         127.0.0.1 (default) or ::1\n"
    "  --port N               default 0: any free port\n"
    "  --token T              bearer token (default: DIR/token, or random)\n"
    "  --history N            watch history kept, in events (default 10000)\n"
    "  --bookmark-interval MS bookmark period for allowWatchBookmarks (default 1000);\n"
    "                         'real': the apiserver's, every 60 s and 2 s before\n"
    "                         timeoutSeconds ends\n"
    "  --threads N            transport and HTTP/1.1 worker threads (default 2)\n"
    "  --seed N               seed for fault probabilities (default 1)\n"
    "  --fault JSON           install a fault rule at start (repeatable)\n"
    "  --no-http2             offer only http/1.1 in ALPN (default: h2 and http/1.1)\n"
    "  --http2-max-streams N  SETTINGS_MAX_CONCURRENT_STREAMS advertised (default 100,\n"
    "                         as kube-apiserver v1.36.3; v1.24.0 advertised 250)\n"
    "  --feature-gates G=B,.. CoordinatedLeaderElection=true serves\n"
    "                         coordination.k8s.io/v1beta1 LeaseCandidates and runs\n"
    "                         the apiserver's leader-election controller\n"
    "  --cle-election-duration MS  how long the controller waits for pinged\n"
    "                         candidates, and its requeue interval (default 5000)\n"
    "  --verbose              log every request to stderr\n"
    "  --quiet                log nothing\n";

/* The write end of the main loop's pipe, for the signal handler. */
static int signal_fd = -1;

static void on_signal(int sig)
{
    int saved = errno;
    char c = 'T';
    (void)sig;
    if (signal_fd >= 0 && write(signal_fd, &c, 1) < 0) {
        /* Nothing useful to do in a handler; the pipe is non-blocking. */
    }
    errno = saved;
}

/* A command-line error: one line naming the flag, exit status 2. */
__attribute__((format(printf, 1, 2), noreturn)) static void usage_error(const char *fmt, ...)
{
    va_list ap;
    fputs("k8slease-testserver: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(2);
}

static unsigned long long number(const char *flag, const char *v, unsigned long long min,
                                 unsigned long long max)
{
    char *end;
    errno = 0;
    if (!*v || *v == '-')
        usage_error("invalid value for %s: '%s'", flag, v);
    unsigned long long n = strtoull(v, &end, 10);
    if (*end || errno || n < min || n > max)
        usage_error("invalid value for %s: '%s'", flag, v);
    return n;
}

/*
 * --feature-gates: comma-separated GATE=BOOL, as kube-apiserver takes them.
 * Only CoordinatedLeaderElection is known; any other gate is an error
 * naming it (the apiserver's "unrecognized feature gate").
 */
static void feature_gates(const char *flag, const char *v, ts_config *cfg)
{
    char buf[256];
    if (strlen(v) >= sizeof(buf))
        usage_error("invalid value for %s: '%s'", flag, v);
    snprintf(buf, sizeof(buf), "%s", v);
    for (char *save = NULL, *g = strtok_r(buf, ",", &save); g; g = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(g, '=');
        if (!eq)
            usage_error("invalid value for %s: missing bool value for %s", flag, g);
        *eq = '\0';
        const char *b = eq + 1;
        bool on;
        if (!strcmp(b, "true") || !strcmp(b, "1") || !strcmp(b, "t") || !strcmp(b, "T") ||
            !strcmp(b, "TRUE") || !strcmp(b, "True"))
            on = true;
        else if (!strcmp(b, "false") || !strcmp(b, "0") || !strcmp(b, "f") || !strcmp(b, "F") ||
                 !strcmp(b, "FALSE") || !strcmp(b, "False"))
            on = false;
        else
            usage_error("invalid value for %s: invalid value of %s: %s", flag, g, b);
        if (strcmp(g, "CoordinatedLeaderElection"))
            usage_error("invalid value for %s: unrecognized feature gate: %s", flag, g);
        cfg->cle = on;
    }
}

static void parse_args(int argc, char **argv, ts_config *cfg, const char **dir_arg, bool *quiet)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2)) {
            usage_error("unexpected argument '%s'", a);
        }
        char flag[64];
        const char *v = NULL;
        const char *eq = strchr(a, '=');
        size_t fl = eq ? (size_t)(eq - a) : strlen(a);
        if (fl >= sizeof(flag))
            usage_error("unknown flag %s", a);
        memcpy(flag, a, fl);
        flag[fl] = '\0';

        static const char *const boolean[] = {"--help", "--version", "--quiet", "--verbose",
                                              "--no-http2"};
        static const char *const valued[] = {
            "--dir",     "--address",           "--port",          "--token",
            "--history", "--threads",           "--seed",          "--bookmark-interval",
            "--fault",   "--http2-max-streams", "--feature-gates", "--cle-election-duration"};
        bool is_bool = false, known = false;
        for (size_t k = 0; k < sizeof(boolean) / sizeof(boolean[0]); k++)
            is_bool |= !strcmp(flag, boolean[k]);
        for (size_t k = 0; k < sizeof(valued) / sizeof(valued[0]); k++)
            known |= !strcmp(flag, valued[k]);
        if (!is_bool && !known)
            usage_error("unknown flag %s", flag);
        if (is_bool) {
            if (eq)
                usage_error("flag %s takes no value", flag);
        } else if (eq) {
            v = eq + 1;
        } else if (i + 1 < argc) {
            v = argv[++i];
        } else {
            usage_error("flag %s needs a value", flag);
        }

        if (!strcmp(flag, "--help")) {
            fputs(usage, stdout);
            exit(0);
        } else if (!strcmp(flag, "--version")) {
            printf("k8slease-testserver %s\n", TS_VERSION);
            exit(0);
        } else if (!strcmp(flag, "--quiet")) {
            *quiet = true;
        } else if (!strcmp(flag, "--verbose")) {
            cfg->verbose = true;
        } else if (!strcmp(flag, "--no-http2")) {
            cfg->no_http2 = true;
        } else if (!strcmp(flag, "--dir")) {
            if (!*v)
                usage_error("invalid value for %s: '%s'", flag, v);
            *dir_arg = v;
        } else if (!strcmp(flag, "--address")) {
            if (!strcmp(v, "localhost"))
                v = "127.0.0.1";
            if (strcmp(v, "127.0.0.1") && strcmp(v, "::1"))
                usage_error("invalid value for %s: '%s' (127.0.0.1 or ::1)", flag, v);
            snprintf(cfg->address, sizeof(cfg->address), "%s", v);
        } else if (!strcmp(flag, "--port")) {
            cfg->port = (unsigned)number(flag, v, 0, 65535);
        } else if (!strcmp(flag, "--token")) {
            for (const char *p = v; *p; p++)
                if (*p <= ' ' || *p > '~')
                    usage_error("invalid value for %s: non-printable characters", flag);
            if (!*v || strlen(v) > 256)
                usage_error("invalid value for %s: '%s'", flag, v);
            cfg->token = v;
        } else if (!strcmp(flag, "--history")) {
            cfg->history = (size_t)number(flag, v, 1, 10000000);
        } else if (!strcmp(flag, "--bookmark-interval")) {
            if (!strcmp(v, "real"))
                cfg->bookmarks_real = true;
            else
                cfg->bookmark_ms = (unsigned)number(flag, v, 1, 3600000);
        } else if (!strcmp(flag, "--threads")) {
            cfg->threads = (unsigned)number(flag, v, 1, 64);
        } else if (!strcmp(flag, "--http2-max-streams")) {
            cfg->h2_max_streams = (unsigned)number(flag, v, 1, 100000);
        } else if (!strcmp(flag, "--seed")) {
            cfg->seed = number(flag, v, 0, ULLONG_MAX);
        } else if (!strcmp(flag, "--feature-gates")) {
            feature_gates(flag, v, cfg);
        } else if (!strcmp(flag, "--cle-election-duration")) {
            cfg->cle_election_ms = (unsigned)number(flag, v, 1, 3600000);
        } else if (!strcmp(flag, "--fault")) {
            json_error_t err;
            json_t *rule = json_loads(v, 0, &err);
            if (!json_is_object(rule)) {
                json_decref(rule);
                usage_error("invalid value for %s: '%s' (a JSON object)", flag, v);
            }
            json_array_append_new(cfg->faults, rule);
        }
    }
}

/* Makes DIR (or a temporary one) and stores its absolute path in cfg. */
static int prepare_dir(ts_config *cfg, const char *dir_arg)
{
    if (dir_arg) {
        if (mkdir(dir_arg, 0700) < 0 && errno != EEXIST) {
            ts_log("cannot create %s: %s", dir_arg, strerror(errno));
            return -1;
        }
        if (!(cfg->dir = realpath(dir_arg, NULL))) {
            ts_log("cannot resolve %s: %s", dir_arg, strerror(errno));
            return -1;
        }
        return 0;
    }
    const char *tmp = getenv("TMPDIR");
    ts_buf t = {0};
    if (ts_buf_printf(&t, "%s/k8slease-testserver.XXXXXX", tmp && *tmp ? tmp : "/tmp") < 0)
        return -1;
    if (!mkdtemp(t.data)) {
        ts_log("cannot create a directory under %s: %s", tmp && *tmp ? tmp : "/tmp",
               strerror(errno));
        ts_buf_free(&t);
        return -1;
    }
    cfg->dir = realpath(t.data, NULL);
    if (!cfg->dir) {
        rmdir(t.data);
        ts_buf_free(&t);
        return -1;
    }
    cfg->dir_is_temp = true;
    ts_buf_free(&t);
    return 0;
}

/* --token, else the token a previous run left in DIR, else a fresh one. */
static char *initial_token(const ts_config *cfg)
{
    char *t = NULL;
    if (cfg->token)
        return strdup(cfg->token);
    if (ts_read_file(cfg->dir, "token", &t, NULL) == 0) {
        size_t n = strlen(t);
        while (n && (t[n - 1] == '\n' || t[n - 1] == '\r' || t[n - 1] == ' '))
            t[--n] = '\0';
        bool ok = n > 0 && n <= 256;
        for (size_t i = 0; ok && i < n; i++)
            ok = t[i] > ' ' && t[i] <= '~';
        if (ok)
            return t;
        free(t);
    }
    char fresh[65];
    return ts_random_hex(fresh, 32) == 0 ? strdup(fresh) : NULL;
}

/* Threads inherit the signal mask: keep SIGTERM/SIGINT for the main thread. */
static void block_signals(bool block, sigset_t *saved)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    if (block)
        pthread_sigmask(SIG_BLOCK, &set, saved);
    else
        pthread_sigmask(SIG_SETMASK, saved, NULL);
}

static int start_daemon(ts_server *srv)
{
    sigset_t saved;
    block_signals(true, &saved);
    int rc = ts_server_start(srv);
    block_signals(false, &saved);
    return rc;
}

/*
 * Stops serving, optionally forgets the objects, stays down for down_ms
 * (listening socket closed: connections are refused) and serves again.
 * Returns 0, 1 if SIGTERM/SIGINT came while down (exit now), -1 on failure.
 */
static int restart(ts_server *srv)
{
    pthread_mutex_lock(&srv->mu);
    bool keep = srv->restart_keep_state;
    int64_t down = srv->restart_down_ms;
    pthread_mutex_unlock(&srv->mu);

    ts_log("restarting (%s state, down %lld ms)", keep ? "keeping" : "dropping", (long long)down);
    ts_server_stop(srv);
    pthread_mutex_lock(&srv->mu);
    /* The controller is part of the apiserver: it is down with it. */
    ts_cle_stop(srv);
    if (!keep)
        ts_store_wipe(&srv->store);
    ts_faults_count(&srv->faults, TS_F_RESTART, 1);
    pthread_mutex_unlock(&srv->mu);
    /* Down time, cut short by a termination signal. */
    for (int64_t end = ts_mono_ms() + down, left = down; left > 0; left = end - ts_mono_ms()) {
        struct pollfd pfd = {srv->wake_pipe[0], POLLIN, 0};
        char c;
        if (poll(&pfd, 1, (int)left) > 0 && read(srv->wake_pipe[0], &c, 1) == 1 && c == 'T')
            return 1;
    }
    if (start_daemon(srv) < 0)
        return -1;
    /* Counted once serving again: a client that waits for it can connect. */
    pthread_mutex_lock(&srv->mu);
    srv->restarts++;
    if (srv->cfg.cle)
        ts_cle_start(srv);
    pthread_mutex_unlock(&srv->mu);
    return 0;
}

int main(int argc, char **argv)
{
    static ts_server srv;
    const char *dir_arg = NULL;
    bool quiet = false;
    int rc = 1;

    srv.wake_pipe[0] = srv.wake_pipe[1] = -1;
    srv.cfg.faults = json_array();
    snprintf(srv.cfg.address, sizeof(srv.cfg.address), "127.0.0.1");
    srv.cfg.history = 10000;
    srv.cfg.bookmark_ms = 1000;
    srv.cfg.threads = 2;
    srv.cfg.h2_max_streams = 100;
    srv.cfg.seed = 1;
    srv.cfg.cle_election_ms = 5000;
    parse_args(argc, argv, &srv.cfg, &dir_arg, &quiet);
    ts_log_set_quiet(quiet);

    struct sigaction sa = {0};
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, NULL);

    if (prepare_dir(&srv.cfg, dir_arg) < 0 || ts_server_init(&srv) < 0)
        goto out;
    for (size_t i = 0; i < json_array_size(srv.cfg.faults); i++) {
        char *err = NULL;
        if (!ts_faults_add(&srv.faults, json_array_get(srv.cfg.faults, i), ts_mono_ms(), &err)) {
            fprintf(stderr, "k8slease-testserver: invalid value for --fault: %s\n",
                    err ? err : "out of memory");
            free(err);
            rc = 2;
            goto out;
        }
    }
    if (!(srv.token = initial_token(&srv.cfg)) || ts_write_token(srv.cfg.dir, srv.token) < 0 ||
        ts_pki_init(&srv.pki, srv.cfg.dir) < 0)
        goto out;

    signal_fd = srv.wake_pipe[1];
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    sigset_t saved;
    block_signals(true, &saved);
    int started = ts_sched_start(&srv.sched);
    block_signals(false, &saved);
    if (started < 0 || start_daemon(&srv) < 0)
        goto out;
    if (srv.cfg.cle) {
        pthread_mutex_lock(&srv.mu);
        ts_cle_start(&srv);
        pthread_mutex_unlock(&srv.mu);
    }

    printf("ready port=%u dir=%s kubeconfig=%s/kubeconfig\n", srv.port, srv.cfg.dir, srv.cfg.dir);
    fflush(stdout);
    ts_log("serving %s (dir %s)", srv.server_url, srv.cfg.dir);

    for (;;) {
        char c;
        ssize_t n = read(srv.wake_pipe[0], &c, 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0 || c == 'T')
            break;
        if (c == 'R') {
            int r = restart(&srv);
            if (r < 0)
                goto out;
            if (r > 0)
                break;
        }
    }
    ts_log("shutting down");
    rc = 0;
out:
    signal_fd = -1;
    ts_server_free(&srv);
    if (srv.cfg.dir && srv.cfg.dir_is_temp)
        ts_remove_tree(srv.cfg.dir);
    free(srv.cfg.dir);
    json_decref(srv.cfg.faults);
    return rc;
}
