/* `k8slease-bench candidate`: one election candidate in a process of its
 * own, for benchmarks 1-3. It reads one-character commands on stdin and
 * reports events on stdout, one line per event (format in bench.h):
 *
 *   r  stop the election, releasing the Lease (reports R before, D after)
 *   j  join again: start a new elector (an elector runs one term)
 *   w  report the next successful renewal (W), polled every millisecond
 *   q  quit (the elector is freed, which releases the Lease if we lead)
 *
 * EOF on stdin also quits; if the driver dies the kernel kills us.
 *
 * The server: --kubeconfig PATH (the test server), or --backend etcd
 * --etcd-endpoints URL (an etcd; --lease is then the election name).
 * --pod NAME turns crash failover on (benchmark 8): the candidate runs in
 * that Pod of the Lease's namespace, in its only container. */
#define _DEFAULT_SOURCE /* prctl() */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "bench.h"
#include "k8slease.h"

static int self_id;

/* One write(2) per line, shorter than PIPE_BUF: lines of different
 * candidates never interleave in the shared pipe. */
static void emit(char kind, int64_t t_ns, long long epoch, const char *text)
{
    char line[256];
    int n = snprintf(line, sizeof(line), "%c %d %lld %lld %s\n", kind, self_id, (long long)t_ns,
                     epoch, text);

    if (n >= (int)sizeof(line)) {
        n = (int)sizeof(line) - 1;
        line[n - 1] = '\n';
    }
    if (write(STDOUT_FILENO, line, (size_t)n) != n)
        _exit(3); /* the driver is gone */
}

static void on_started(int64_t epoch, void *ud)
{
    (void)ud;
    emit('S', bench_now_ns(), epoch, "");
}

static void on_stopped(void *ud)
{
    (void)ud;
    emit('X', bench_now_ns(), 0, "");
}

static void on_new_leader(const char *identity, int64_t epoch, void *ud)
{
    (void)ud;
    emit('L', bench_now_ns(), epoch, identity[0] ? identity : "-");
}

/* The library's log on stderr with the candidate's identity and
 * CLOCK_MONOTONIC (the driver's clock too), when K8SLEASE_BENCH_LOG is
 * warn, info or debug: to see what a candidate does. */
static void log_line(k8slease_log_level level, const char *msg, void *ud)
{
    static const char *const names[] = {"error", "warn", "info", "debug"};

    (void)ud;
    fprintf(stderr, "cand-%d [%.3f]: %s: %s\n", self_id, (double)bench_now_ns() / NS_PER_S,
            names[level], msg);
}

static int log_level(void)
{
    const char *v = getenv("K8SLEASE_BENCH_LOG");

    if (!v)
        return -1;
    return !strcmp(v, "debug")  ? K8SLEASE_LOG_DEBUG
           : !strcmp(v, "info") ? K8SLEASE_LOG_INFO
           : !strcmp(v, "warn") ? K8SLEASE_LOG_WARN
                                : -1;
}

typedef struct cand_args {
    const char *kubeconfig, *etcd_endpoints, *lease;
    const char *pod; /* crash failover in this Pod; NULL: off */
    int etcd;
    int poll_only;
    bench_timing t;
} cand_args;

static k8slease_elector *join(k8slease_client *client, const cand_args *a, const char *identity)
{
    k8slease_elector_options o = K8SLEASE_ELECTOR_OPTIONS_INIT;
    k8slease_elector *e = NULL;

    o.name = a->lease;
    o.identity = identity;
    o.lease_duration_ms = a->t.lease_duration_ms;
    o.renew_deadline_ms = a->t.renew_deadline_ms;
    o.retry_period_ms = a->t.retry_period_ms;
    o.poll_only = a->etcd ? 0 : a->poll_only; /* Kubernetes only */
    o.crash_failover = a->pod != NULL;
    o.pod_name = a->pod;
    o.on_started_leading = on_started;
    o.on_stopped_leading = on_stopped;
    o.on_new_leader = on_new_leader;
    if (k8slease_elector_start(&e, client, &o) < 0)
        emit('E', bench_now_ns(), 0, k8slease_error_last());
    return e;
}

static uint64_t renewals(const k8slease_elector *e)
{
    k8slease_elector_stats st = {.version = K8SLEASE_ELECTOR_STATS_VERSION};

    return e && k8slease_elector_stats_get(e, &st) == 0 ? st.renewals : 0;
}

int candidate_main(int argc, char **argv)
{
    k8slease_client_options co = K8SLEASE_CLIENT_OPTIONS_INIT;
    k8slease_client *client = NULL;
    k8slease_elector *e = NULL;
    cand_args a = {0};
    char identity[32], agent[48];
    int watch_renewal = 0;
    uint64_t base = 0;

    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];

        if (!strcmp(k, "--kubeconfig"))
            a.kubeconfig = v;
        else if (!strcmp(k, "--backend"))
            a.etcd = !strcmp(v, "etcd");
        else if (!strcmp(k, "--etcd-endpoints"))
            a.etcd_endpoints = v;
        else if (!strcmp(k, "--lease"))
            a.lease = v;
        else if (!strcmp(k, "--id"))
            self_id = atoi(v);
        else if (!strcmp(k, "--pod"))
            a.pod = v;
        else if (!strcmp(k, "--poll-only"))
            a.poll_only = atoi(v);
        else if (!strcmp(k, "--timing"))
            sscanf(v, "%" SCNd64 "/%" SCNd64 "/%" SCNd64, &a.t.lease_duration_ms,
                   &a.t.renew_deadline_ms, &a.t.retry_period_ms);
    }
    if (!(a.etcd ? a.etcd_endpoints : a.kubeconfig) || !a.lease) {
        fprintf(stderr, "k8slease-bench candidate: --lease and --kubeconfig (or --backend etcd "
                        "and --etcd-endpoints) are required\n");
        return 2;
    }
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    snprintf(identity, sizeof(identity), "cand-%d", self_id);
    snprintf(agent, sizeof(agent), "bench %s", identity);
    if (a.etcd) {
        co.backend = K8SLEASE_BACKEND_ETCD;
        co.etcd_endpoints = a.etcd_endpoints;
    } else {
        co.kubeconfig = a.kubeconfig;
    }
    co.user_agent = agent;
    if (log_level() >= 0) {
        co.log_cb = log_line;
        co.log_level = (k8slease_log_level)log_level();
    }
    if (k8slease_client_new(&client, &co) < 0) {
        emit('E', bench_now_ns(), 0, k8slease_error_last());
        return 1;
    }
    e = join(client, &a, identity);

    for (;;) {
        struct pollfd pfd = {.fd = STDIN_FILENO, .events = POLLIN};
        char cmd;
        int rc = poll(&pfd, 1, watch_renewal ? 1 : 1000);

        if (rc < 0 && errno != EINTR)
            break;
        if (watch_renewal && renewals(e) > base) {
            emit('W', bench_now_ns(), 0, "");
            watch_renewal = 0;
        }
        if (rc <= 0)
            continue;
        if (read(STDIN_FILENO, &cmd, 1) != 1 || cmd == 'q')
            break;
        switch (cmd) {
        case 'r':
            emit('R', bench_now_ns(), 0, "");
            k8slease_elector_stop(e, 1);
            emit('D', bench_now_ns(), 0, "");
            k8slease_elector_free(e);
            e = NULL;
            break;
        case 'j':
            if (!e)
                e = join(client, &a, identity);
            break;
        case 'w':
            base = renewals(e);
            watch_renewal = e != NULL;
            break;
        }
    }
    k8slease_elector_free(e);
    k8slease_client_free(client);
    return 0;
}
