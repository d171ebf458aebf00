/* Benchmark 7, a hung replica (issue 22): two kube-apiservers on one etcd
 * behind haproxy (tests/integration/envtest.sh with
 * K8SLEASE_ENVTEST_REPLICAS=2), replica 1 SIGSTOPped for --hang-s seconds
 * (100 s, quick 20 s) and then continued. 8 candidates, each on a client
 * of its own (its own connection), on 4 Leases: a leader and a follower
 * each. Measured: terms lost, leaderless time per Lease, and per client the
 * time from the hang's start to its first answer (bench/README.md).
 *
 * The driver side starts one HA envtest per scenario (haproxy's balance and
 * check interval are fixed when it starts) and runs the `hung-worker` role
 * in it; the worker holds the clients and prints one RESULT line. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "k8slease.h"

#define HUNG_LEASES  4
#define HUNG_CANDS   (2 * HUNG_LEASES)
#define HUNG_OLD_MAX 16 /* ended electors kept per candidate until the end */
#define ELECT_MS     60000

/* ---- the worker (runs inside the HA envtest) ---------------------------- */

typedef struct hcand {
    k8slease_client *client;
    k8slease_elector *e;                 /* the current elector */
    k8slease_elector *old[HUNG_OLD_MAX]; /* ended ones (freed at the end) */
    int nold;
    int lease;
    int leading;           /* sampled: its current elector was leader */
    int64_t back_ns;       /* first answer after the hang began; 0: none yet */
    uint64_t answered0;    /* requests answered (any status) at the start */
    uint64_t events0;      /* watch events at the start */
    pthread_mutex_t mu;    /* the fields below, written by callbacks */
    int64_t new_leader_ns; /* last on_new_leader */
    int started_after;     /* on_started_leading after the hang began */
} hcand;

static int64_t hang_start_ns; /* read by callbacks: set before the hang */
static const char *hung_ns = "default";

static void on_started(int64_t epoch, void *ud)
{
    hcand *c = ud;

    (void)epoch;
    pthread_mutex_lock(&c->mu);
    if (hang_start_ns && bench_now_ns() >= hang_start_ns)
        c->started_after++;
    pthread_mutex_unlock(&c->mu);
}

static void on_new_leader(const char *identity, int64_t epoch, void *ud)
{
    hcand *c = ud;

    (void)identity;
    (void)epoch;
    pthread_mutex_lock(&c->mu);
    c->new_leader_ns = bench_now_ns();
    pthread_mutex_unlock(&c->mu);
}

/* The library's log on stderr, with the client's number and the time
 * since the hang began: errors, or up to K8SLEASE_BENCH_LOG (warn, info,
 * debug) to see what a client does. */
static void log_line(k8slease_log_level level, const char *msg, void *ud)
{
    static const char *const names[] = {"error", "warn", "info", "debug"};
    int64_t t = hang_start_ns ? bench_now_ns() - hang_start_ns : 0;

    fprintf(stderr, "hung-worker: [%+.3f s] client %d: %s: %s\n", (double)t / NS_PER_S,
            (int)(intptr_t)ud, names[level], msg);
}

static k8slease_log_level log_level(void)
{
    const char *v = getenv("K8SLEASE_BENCH_LOG");

    if (!v)
        return K8SLEASE_LOG_ERROR;
    return !strcmp(v, "debug")  ? K8SLEASE_LOG_DEBUG
           : !strcmp(v, "info") ? K8SLEASE_LOG_INFO
           : !strcmp(v, "warn") ? K8SLEASE_LOG_WARN
                                : K8SLEASE_LOG_ERROR;
}

static int elector_new(hcand *c, int idx, const char *lease, const bench_timing *t)
{
    k8slease_elector_options o = K8SLEASE_ELECTOR_OPTIONS_INIT;
    char id[32];

    snprintf(id, sizeof(id), "hung-%d", idx);
    o.ns = hung_ns;
    o.name = lease;
    o.identity = id;
    o.lease_duration_ms = t->lease_duration_ms;
    o.renew_deadline_ms = t->renew_deadline_ms;
    o.retry_period_ms = t->retry_period_ms;
    o.release_on_cancel = 0; /* the end of the run writes nothing */
    o.on_started_leading = on_started;
    o.on_new_leader = on_new_leader;
    o.user_data = c;
    if (k8slease_elector_start(&c->e, c->client, &o) != 0) {
        fprintf(stderr, "hung-worker: elector %s: %s\n", id, k8slease_error_last());
        return -1;
    }
    return 0;
}

/* Sums over every elector the candidate has had. */
static void cand_totals(const hcand *c, uint64_t *answered, uint64_t *events, int64_t *renew)
{
    *answered = *events = 0;
    *renew = 0;
    for (int i = 0; i <= c->nold; i++) {
        const k8slease_elector *e = i < c->nold ? c->old[i] : c->e;
        k8slease_elector_stats st = {.version = K8SLEASE_ELECTOR_STATS_VERSION};

        if (!e || k8slease_elector_stats_get(e, &st) != 0)
            continue;
        *answered += st.requests - st.transport_errors;
        *events += st.watch_events;
        if (st.last_renew_ns > *renew)
            *renew = st.last_renew_ns;
    }
}

static int64_t max_epoch(const hcand *c)
{
    int64_t m = -1;

    for (int i = 0; i <= c->nold; i++) {
        const k8slease_elector *e = i < c->nold ? c->old[i] : c->e;
        int64_t ep = e ? k8slease_elector_epoch(e) : -1;

        if (ep > m)
            m = ep;
    }
    return m;
}

static int ctl(const char *proc, const char *action)
{
    const char *script = getenv("K8SLEASE_ENVTEST_CTL");
    char cmd[4200];

    if (!script)
        return -1;
    snprintf(cmd, sizeof(cmd), "'%s' %s %s >&2", script, proc, action);
    return system(cmd) == 0 ? 0 : -1;
}

/* haproxy's current sessions on each replica (its stats page as CSV),
 * "apiserver1 4, apiserver2 4", or "" when unreadable. */
static void lb_sessions(char *out, size_t size)
{
    const char *dir = getenv("K8SLEASE_ENVTEST_DIR");
    char path[4200], line[2048], port[16] = "", cmd[256];
    FILE *f;
    size_t len = 0;

    out[0] = '\0';
    snprintf(path, sizeof(path), "%s/env", dir ? dir : ".");
    if (!(f = fopen(path, "r")))
        return;
    while (fgets(line, sizeof(line), f))
        if (!strncmp(line, "LB_STATS_PORT=", 14))
            snprintf(port, sizeof(port), "%.*s", (int)strcspn(line + 14, "\n'"), line + 14);
    fclose(f);
    snprintf(cmd, sizeof(cmd), "curl -sf --max-time 5 'http://127.0.0.1:%s/;csv'", port);
    if (!port[0] || !(f = popen(cmd, "r")))
        return;
    while (fgets(line, sizeof(line), f)) {
        char *fld[8] = {0}, *p = line;
        int n = 0;

        while (n < 8 && p) {
            fld[n++] = p;
            if ((p = strchr(p, ',')))
                *p++ = '\0';
        }
        /* pxname,svname,qcur,qmax,scur,... */
        if (n >= 5 && !strcmp(fld[0], "apiservers") && !strncmp(fld[1], "apiserver", 9) &&
            len < size)
            len +=
                (size_t)snprintf(out + len, size - len, "%s%s %s", len ? ", " : "", fld[1], fld[4]);
    }
    pclose(f);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

int hung_worker_main(int argc, char **argv)
{
    bench_timing t = {15000, 10000, 2000};
    int hang_s = 100, rc = 1;
    static hcand c[HUNG_CANDS];
    char lease[HUNG_LEASES][64], sessions[256], back_list[512] = "", line[2048];
    const char *kc = getenv("K8SLEASE_TEST_KUBECONFIG");
    int64_t epoch0[HUNG_LEASES], leaderless[HUNG_LEASES] = {0}, first_lost[HUNG_LEASES] = {0};
    int64_t again[HUNG_LEASES] = {0}, now, prev, end_ns, cont_ns = 0, settle_ms;
    int terms_lost = 0, new_terms = 0, epoch_changes = 0, not_back = 0, started = 0;
    double back[HUNG_CANDS], lost_first = -1, again_max = -1;

    for (int i = 1; i < argc; i++) {
        long long ld, rd, rp;

        if (!strcmp(argv[i], "--timing") && i + 1 < argc &&
            sscanf(argv[++i], "%lld/%lld/%lld", &ld, &rd, &rp) == 3)
            t = (bench_timing){ld * 1000, rd * 1000, rp * 1000};
        else if (!strcmp(argv[i], "--hang-s") && i + 1 < argc)
            hang_s = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: k8slease-bench hung-worker [--timing LD/RD/RP] [--hang-s N]\n");
            return 2;
        }
    }
    if (!kc || !getenv("K8SLEASE_ENVTEST_CTL")) {
        fprintf(stderr, "hung-worker: runs under tests/integration/envtest.sh\n");
        return 2;
    }
    /* After the replica is back: a lease duration, for a term that would
     * end late (a stale answer of the resumed replica). */
    settle_ms = t.lease_duration_ms;

    for (int j = 0; j < HUNG_LEASES; j++)
        snprintf(lease[j], sizeof(lease[j]), "hung-%lld%lld%lld-%d",
                 (long long)t.lease_duration_ms / 1000, (long long)t.renew_deadline_ms / 1000,
                 (long long)t.retry_period_ms / 1000, j);
    /* Leader, follower, leader, ...: each client's connection opens in
     * that order, so with round robin every leader is on replica 1 and
     * every follower on replica 2 (the round-robin case). */
    for (int i = 0; i < HUNG_CANDS; i++) {
        k8slease_client_options co = K8SLEASE_CLIENT_OPTIONS_INIT;

        c[i].lease = i / 2;
        pthread_mutex_init(&c[i].mu, NULL);
        co.kubeconfig = kc;
        co.log_cb = log_line;
        co.log_user_data = (void *)(intptr_t)i;
        co.log_level = log_level();
        if (k8slease_client_new(&c[i].client, &co) != 0) {
            fprintf(stderr, "hung-worker: client: %s\n", k8slease_error_last());
            goto out;
        }
        started = i + 1;
        if (elector_new(&c[i], i, lease[c[i].lease], &t) < 0)
            goto out;
        if (i % 2 == 0) {
            if (k8slease_elector_wait_elected(c[i].e, ELECT_MS, &epoch0[c[i].lease]) != 0) {
                fprintf(stderr, "hung-worker: %s not won: %s\n", lease[c[i].lease],
                        k8slease_error_last());
                goto out;
            }
        } else {
            /* The follower has read the Lease (its connection is open). */
            int64_t until = bench_now_ns() + 10 * NS_PER_S;

            for (;;) {
                int64_t seen;

                pthread_mutex_lock(&c[i].mu);
                seen = c[i].new_leader_ns;
                pthread_mutex_unlock(&c[i].mu);
                if (seen)
                    break;
                if (bench_now_ns() > until) {
                    fprintf(stderr, "hung-worker: follower %d saw no leader\n", i);
                    goto out;
                }
                bench_sleep_ms(10);
            }
        }
    }
    /* Every follower's watch is up: a renewal's event has come. */
    bench_sleep_ms(2 * t.retry_period_ms + 500);
    lb_sessions(sessions, sizeof(sessions));
    fprintf(stderr, "hung-worker: %d/%d/%d, elected; haproxy sessions: %s\n",
            (int)(t.lease_duration_ms / 1000), (int)(t.renew_deadline_ms / 1000),
            (int)(t.retry_period_ms / 1000), sessions[0] ? sessions : "?");
    for (int i = 0; i < HUNG_CANDS; i++) {
        int64_t renew;

        cand_totals(&c[i], &c[i].answered0, &c[i].events0, &renew);
        c[i].leading = k8slease_elector_is_leader(c[i].e);
    }

    hang_start_ns = bench_now_ns();
    if (ctl("apiserver", "stop") < 0) {
        fprintf(stderr, "hung-worker: cannot stop replica 1\n");
        goto out;
    }
    end_ns = hang_start_ns + (int64_t)hang_s * NS_PER_S + settle_ms * NS_PER_MS;
    prev = hang_start_ns;
    while ((now = bench_now_ns()) < end_ns) {
        int has_leader[HUNG_LEASES] = {0};

        if (!cont_ns && now - hang_start_ns >= (int64_t)hang_s * NS_PER_S) {
            if (ctl("apiserver", "cont") < 0)
                fprintf(stderr, "hung-worker: cannot continue replica 1\n");
            cont_ns = bench_now_ns();
        }
        for (int i = 0; i < HUNG_CANDS; i++) {
            hcand *h = &c[i];
            int leader = k8slease_elector_is_leader(h->e);
            uint64_t answered, events;
            int64_t renew, nl;

            if (h->leading && !leader) {
                terms_lost++;
                if (!first_lost[h->lease])
                    first_lost[h->lease] = now;
                fprintf(stderr, "hung-worker: %s: term of hung-%d ended at +%.1f s\n",
                        lease[h->lease], i, (double)(now - hang_start_ns) / NS_PER_S);
            }
            h->leading = leader;
            has_leader[h->lease] |= leader;
            /* An ended election campaigns again (an elector runs one term),
             * as a program that restarts its election would. */
            if (!leader && k8slease_elector_wait_lost(h->e, 0) == 0 && h->nold < HUNG_OLD_MAX) {
                h->old[h->nold++] = h->e;
                h->e = NULL;
                if (elector_new(h, i, lease[h->lease], &t) < 0) {
                    h->e = h->old[--h->nold];
                    goto out;
                }
            }
            if (h->back_ns)
                continue;
            cand_totals(h, &answered, &events, &renew);
            pthread_mutex_lock(&h->mu);
            nl = h->new_leader_ns;
            pthread_mutex_unlock(&h->mu);
            if (answered > h->answered0 || events > h->events0 || renew > hang_start_ns ||
                nl > hang_start_ns)
                h->back_ns = now;
        }
        for (int j = 0; j < HUNG_LEASES; j++) {
            if (!has_leader[j])
                leaderless[j] += now - prev;
            else if (first_lost[j] && !again[j])
                again[j] = now;
        }
        prev = now;
        bench_sleep_ms(10);
    }

    for (int j = 0; j < HUNG_LEASES; j++) {
        int64_t m = -1;

        for (int i = 0; i < HUNG_CANDS; i++)
            if (c[i].lease == j && max_epoch(&c[i]) > m)
                m = max_epoch(&c[i]);
        epoch_changes += (int)(m - epoch0[j]);
        if (first_lost[j]) {
            double l = (double)(first_lost[j] - hang_start_ns) / NS_PER_S;
            double a = again[j] ? (double)(again[j] - hang_start_ns) / NS_PER_S : -1;

            if (lost_first < 0 || l < lost_first)
                lost_first = l;
            if (a > again_max)
                again_max = a;
        }
    }
    for (int i = 0; i < HUNG_CANDS; i++) {
        size_t len = strlen(back_list);

        pthread_mutex_lock(&c[i].mu);
        new_terms += c[i].started_after;
        pthread_mutex_unlock(&c[i].mu);
        /* Never back: infinity, sorted last. */
        back[i] = c[i].back_ns ? (double)(c[i].back_ns - hang_start_ns) / NS_PER_S : INFINITY;
        not_back += !c[i].back_ns || c[i].back_ns >= cont_ns;
        snprintf(back_list + len, sizeof(back_list) - len, "%s%.2f", i ? "," : "", back[i]);
    }
    qsort(back, HUNG_CANDS, sizeof(back[0]), cmp_double);
    {
        size_t len = 0;
        double lmax = 0, lsum = 0;

        line[0] = '\0';
        for (int j = 0; j < HUNG_LEASES; j++) {
            double l = (double)leaderless[j] / NS_PER_S;

            lsum += l;
            lmax = l > lmax ? l : lmax;
            len += (size_t)snprintf(line + len, sizeof(line) - len, "%s%.2f", j ? "," : "", l);
        }
        /* not_back: the clients with no answer before the replica resumed. */
        printf("RESULT terms_lost=%d new_terms=%d epoch_changes=%d leaderless_max=%.3f "
               "leaderless_sum=%.3f back_p50=%.3f back_max=%.3f not_back=%d first_lost=%.2f "
               "leader_again=%.2f hang_s=%d leaderless=%s back=%s sessions=%s\n",
               terms_lost, new_terms, epoch_changes, lmax, lsum, back[(HUNG_CANDS - 1) / 2],
               back[HUNG_CANDS - 1], not_back, lost_first, again_max, hang_s, line, back_list,
               sessions[0] ? sessions : "?");
        fflush(stdout);
    }
    rc = 0;
out:
    if (cont_ns == 0 && hang_start_ns)
        ctl("apiserver", "cont");
    for (int i = 0; i < started; i++) {
        for (int k = 0; k < c[i].nold; k++)
            k8slease_elector_free(c[i].old[k]);
        k8slease_elector_free(c[i].e);
        k8slease_client_free(c[i].client);
    }
    return rc;
}

/* ---- the driver side ----------------------------------------------------- */

typedef struct hung_cfg {
    bench_timing t;
    const char *balance; /* haproxy's balance */
    int check_ms;        /* haproxy's check interval and timeout */
    int quick;           /* also run with --quick */
} hung_cfg;

static const hung_cfg cfgs[] = {
    {{15000, 10000, 2000}, "first", 1000, 1}, {{15000, 10000, 2000}, "roundrobin", 1000, 1},
    {{5000, 3000, 1000}, "first", 1000, 1},   {{5000, 3000, 1000}, "roundrobin", 1000, 1},
    {{5000, 3000, 1000}, "first", 250, 1},    {{5000, 3000, 1000}, "roundrobin", 250, 0},
};

/* The value of key=VALUE in a RESULT line up to the next space ("" if
 * absent); last: up to the end of the line. */
static void result_str(const char *line, const char *key, int last, char *out, size_t size)
{
    size_t klen = strlen(key);

    out[0] = '\0';
    for (const char *p = line; (p = strstr(p, key)); p += klen)
        if ((p == line || p[-1] == ' ') && p[klen] == '=') {
            p += klen + 1;
            snprintf(out, size, "%.*s", (int)(last ? strlen(p) : strcspn(p, " ")), p);
            return;
        }
}

/* "HAProxy version 2.6.12-1+deb12u4 ..." -> "2.6.12" */
static void haproxy_version(char *out, size_t size)
{
    FILE *p = popen("haproxy -v 2>/dev/null", "r");
    char line[256];

    snprintf(out, size, "?");
    if (p && fgets(line, sizeof(line), p)) {
        const char *v = strstr(line, "version ");

        if (v)
            snprintf(out, size, "%.*s", (int)strcspn(v + 8, " -\n"), v + 8);
    }
    if (p)
        pclose(p);
}

static const char *seconds(double s, char *buf, size_t size)
{
    if (isinf(s) || isnan(s))
        snprintf(buf, size, "never");
    else
        snprintf(buf, size, "%.1f s", s);
    return buf;
}

void bench_hung_replica(bench_ctx *ctx)
{
    static const char name[] = "7 hung replica";
    char envtest[4200], hv[32], cell[480] = "";
    FILE *csv, *ccsv;
    int saved = ctx->csv_append;
    int hang_s = ctx->hang_s > 0 ? ctx->hang_s : ctx->quick ? 20 : 100;

    if (ctx->tgt->kind != TARGET_ENVTEST) {
        bench_row_add(ctx, name, "", "", "", -1, "not run: %s",
                      ctx->tgt->kind == TARGET_TESTSERVER
                          ? "the test server has no replicas (runs with --apiserver DIR, on "
                            "two kube-apiservers of its own behind haproxy)"
                          : "a cluster of yours is not ours to hang");
        bench_cell(ctx, CELL_HUNG, "not run: %s",
                   ctx->tgt->kind == TARGET_TESTSERVER ? "no replicas" : "shared cluster");
        return;
    }
    if (!getenv("KUBEBUILDER_ASSETS") && !getenv("TEST_ASSET_KUBE_APISERVER")) {
        bench_row_add(ctx, name, "", "", "", -2,
                      "failed: KUBEBUILDER_ASSETS is not set (run by bench/run.sh --apiserver)");
        return;
    }
    haproxy_version(hv, sizeof(hv));
    if (!strcmp(hv, "?")) {
        bench_row_add(ctx, name, "", "", "", -1,
                      "skipped: haproxy not installed (Debian package haproxy; envtest.sh puts "
                      "it in front of the replicas)");
        bench_cell(ctx, CELL_HUNG, "skipped: haproxy not installed");
        return;
    }
    snprintf(envtest, sizeof(envtest), "%s/tests/integration/envtest.sh", BENCH_SOURCE_DIR);
    /* Only the real server writes these: new files, with their header. */
    ctx->csv_append = 0;
    csv = bench_csv_open(ctx, "hung_replica.csv",
                         "server,haproxy,balance,lb_check_ms,timing,hang_s,clients,leases,"
                         "terms_lost,new_terms,epoch_changes,leaderless_max_s,leaderless_sum_s,"
                         "back_p50_s,back_max_s,not_back_during_hang,first_lost_s,leader_again_s,"
                         "leaderless_per_lease_s");
    ccsv = bench_csv_open(ctx, "hung_replica_clients.csv",
                          "server,balance,lb_check_ms,timing,client,role,lease,back_s");
    ctx->csv_append = saved;
    for (size_t k = 0; k < sizeof(cfgs) / sizeof(cfgs[0]); k++) {
        const hung_cfg *h = &cfgs[k];
        char timing[72], hang[16], check[16], n[96], result[2048], target[64] = "";
        char backs[512], lless[128], sess[256], b1[32], b2[32];
        char *argv[] = {envtest, ctx->self_exe, "hung-worker", "--timing",
                        timing,  "--hang-s",    hang,          NULL};
        double lost, epochs, p50, max, nb;
        int rc, met;

        if (ctx->quick && !h->quick)
            continue;
        snprintf(timing, sizeof(timing), "%lld/%lld/%lld", (long long)h->t.lease_duration_ms / 1000,
                 (long long)h->t.renew_deadline_ms / 1000, (long long)h->t.retry_period_ms / 1000);
        snprintf(hang, sizeof(hang), "%d", hang_s);
        snprintf(check, sizeof(check), "%d", h->check_ms);
        snprintf(n, sizeof(n), "%s, checks %g s", timing, h->check_ms / 1000.0);
        bench_log("7: replica 1 of 2 hung %d s, %s, balance %s, haproxy checks every %d ms", hang_s,
                  timing, h->balance, h->check_ms);
        setenv("K8SLEASE_ENVTEST_REPLICAS", "2", 1);
        setenv("K8SLEASE_ENVTEST_BALANCE", h->balance, 1);
        setenv("K8SLEASE_ENVTEST_LB_CHECK_MS", check, 1);
        rc = bench_run_child(argv, (int64_t)(hang_s + 240) * 1000, result, sizeof(result));
        unsetenv("K8SLEASE_ENVTEST_REPLICAS");
        unsetenv("K8SLEASE_ENVTEST_BALANCE");
        unsetenv("K8SLEASE_ENVTEST_LB_CHECK_MS");
        if (rc != 0 || !result[0]) {
            bench_row_add(ctx, name, h->balance, n, "", -2,
                          "failed: the worker in the HA envtest exited with %d", rc);
            continue;
        }
        lost = result_field(result, "terms_lost");
        epochs = result_field(result, "epoch_changes");
        p50 = result_field(result, "back_p50");
        max = result_field(result, "back_max");
        nb = result_field(result, "not_back");
        result_str(result, "back", 0, backs, sizeof(backs));
        result_str(result, "leaderless", 0, lless, sizeof(lless));
        result_str(result, "sessions", 1, sess, sizeof(sess));
        /* 15/10/2 must keep every term; 5/3/1 with round robin too (the
         * hedged copies of a renewal reach the other replica), and with
         * balance first only with checks fast enough that the balancer
         * marks the replica down within a request timeout (1 s): at 1 s
         * checks terms are expected to end. */
        if (h->t.retry_period_ms == 2000 || h->check_ms <= 250 ||
            strcmp(h->balance, "roundrobin") == 0) {
            snprintf(target, sizeof(target), "0 terms lost");
            met = lost == 0 && epochs == 0;
        } else {
            snprintf(target, sizeof(target), "(terms lost expected)");
            met = -1;
        }
        {
            char lostwhen[160] = "";
            double fl = result_field(result, "first_lost"),
                   la = result_field(result, "leader_again");

            if (lost > 0)
                snprintf(lostwhen, sizeof(lostwhen),
                         " (first at +%.1f s, every Lease led again "
                         "by %s%s)",
                         fl, la >= 0 ? "+" : "", la >= 0 ? seconds(la, b1, sizeof(b1)) : "never");
            bench_row_add(ctx, name, h->balance, n, target, met,
                          "terms lost %.0f%s, epoch +%.0f; leaderless max %.1f s per Lease "
                          "(sum %.1f s); first answer after the hang began: p50 %s, max %s "
                          "(%.0f of 8 only after it); hung %d s; haproxy sessions before: %s",
                          lost, lostwhen, epochs, result_field(result, "leaderless_max"),
                          result_field(result, "leaderless_sum"), seconds(p50, b1, sizeof(b1)),
                          seconds(max, b2, sizeof(b2)), nb, hang_s, sess);
        }
        if (csv)
            fprintf(csv,
                    "\"%s\",%s,%s,%d,%s,%d,8,4,%.0f,%.0f,%.0f,%.3f,%.3f,%.3f,%.3f,%.0f,%.2f,%.2f,"
                    "\"%s\"\n",
                    ctx->tgt->label, hv, h->balance, h->check_ms, timing, hang_s, lost,
                    result_field(result, "new_terms"), epochs,
                    result_field(result, "leaderless_max"), result_field(result, "leaderless_sum"),
                    p50, max, nb, result_field(result, "first_lost"),
                    result_field(result, "leader_again"), lless);
        if (ccsv) {
            char *save = NULL, *tok = strtok_r(backs, ",", &save);

            for (int i = 0; tok; i++, tok = strtok_r(NULL, ",", &save))
                fprintf(ccsv, "\"%s\",%s,%d,%s,%d,%s,%d,%s\n", ctx->tgt->label, h->balance,
                        h->check_ms, timing, i, i % 2 ? "follower" : "leader", i / 2, tok);
        }
        {
            size_t len = strlen(cell);

            snprintf(cell + len, sizeof(cell) - len, "%s%s %s, %s checks: %.0f lost, back max %s",
                     len ? "; " : "", timing, strcmp(h->balance, "first") ? "rr" : "first",
                     h->check_ms == 1000 ? "1 s" : "250 ms", lost, seconds(max, b1, sizeof(b1)));
        }
    }
    if (csv)
        fclose(csv);
    if (ccsv)
        fclose(ccsv);
    bench_cell(ctx, CELL_HUNG, "%s (haproxy %s, hung %d s)", cell, hv, hang_s);
}
