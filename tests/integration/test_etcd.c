/* The etcd backend end to end: k8slease electors, holders and watches
 * against a real etcd (Debian's 3.4) started by etcd_harness, side by side
 * with `etcdctl elect`, over http, https with client certificates, and
 * with etcd authentication; etcd paused and restarted under a leader.
 *
 * The tests with several candidates check "never two leaders" in the on_*
 * callbacks and in a monitor thread that polls k8slease_elector_is_leader()
 * of all candidates. Run one test: K8SLEASE_TEST_FILTER=keepalive_blocked.
 * On a failure, the teardown prints the library's log (DEBUG, all clients)
 * and the tail of etcd's log; K8SLEASE_TEST_VERBOSE=1 prints the library's
 * log as it happens.
 *
 * Length: the tests share the etcd that group_setup starts once (eh_start);
 * more programs would start more etcds. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "e2e.h"
#include "etcd_harness.h"
#include "k8slease.h"

/* Short timings keep the suite fast (the TTL is etcd's lease TTL, whole
 * seconds); waits are generous (more than 10x what they take on an idle
 * machine) so a loaded 2-core machine passes too. */
#define LD_MS   3000
#define RD_MS   2000
#define RP_MS   300
#define WAIT_MS 20000
#define MAXC    8

/* ------------------------------------------------------------------------ */
/* Library log: kept in memory, printed when a test fails                   */
/* ------------------------------------------------------------------------ */

#define LOG_LINES 400

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t log_cv = PTHREAD_COND_INITIALIZER; /* a line came */
static char *log_ring[LOG_LINES];
static unsigned log_next;
static int log_verbose;

static void log_cb(k8slease_log_level level, const char *msg, void *ud)
{
    static const char *names[] = {"error", "warn", "info", "debug"};
    char *line = NULL;

    if (asprintf(&line, "%8" PRId64 " ms [%s] %s: %s", e2e_mono_ms() % 100000000, (const char *)ud,
                 names[level], msg) < 0)
        return;
    if (log_verbose)
        fprintf(stderr, "%s\n", line);
    pthread_mutex_lock(&log_mu);
    free(log_ring[log_next % LOG_LINES]);
    log_ring[log_next++ % LOG_LINES] = line;
    pthread_cond_broadcast(&log_cv);
    pthread_mutex_unlock(&log_mu);
}

/* 1 if the library's log has a line from client `label` containing needle
 * (and needle2, unless NULL); log_mu held. */
static int log_has_locked(const char *label, const char *needle, const char *needle2)
{
    char tag[64];

    snprintf(tag, sizeof(tag), "[%s] ", label);
    for (unsigned i = log_next > LOG_LINES ? log_next - LOG_LINES : 0; i < log_next; i++) {
        const char *l = log_ring[i % LOG_LINES];

        if (strstr(l, tag) && strstr(l, needle) && (!needle2 || strstr(l, needle2)))
            return 1;
    }
    return 0;
}

static int log_has(const char *label, const char *needle)
{
    int found;

    pthread_mutex_lock(&log_mu);
    found = log_has_locked(label, needle, NULL);
    pthread_mutex_unlock(&log_mu);
    return found;
}

/* Waits until client `label` has logged a line with needle and needle2
 * (NULL: any); fails after WAIT_MS. */
static void wait_log(const char *label, const char *needle, const char *needle2)
{
    struct timespec until;
    int found;

    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += WAIT_MS / 1000;
    pthread_mutex_lock(&log_mu);
    while (!(found = log_has_locked(label, needle, needle2)) &&
           pthread_cond_timedwait(&log_cv, &log_mu, &until) == 0)
        ;
    pthread_mutex_unlock(&log_mu);
    if (!found)
        fail_msg("[%s] logged no line with \"%s\"%s%s%s within %d ms", label, needle,
                 needle2 ? " and \"" : "", needle2 ? needle2 : "", needle2 ? "\"" : "", WAIT_MS);
}

static void log_clear(void)
{
    pthread_mutex_lock(&log_mu);
    for (int i = 0; i < LOG_LINES; i++) {
        free(log_ring[i]);
        log_ring[i] = NULL;
    }
    log_next = 0;
    pthread_mutex_unlock(&log_mu);
}

static void log_dump(void)
{
    pthread_mutex_lock(&log_mu);
    fprintf(stderr, "--- k8slease log (last %d lines) ---\n", LOG_LINES);
    for (unsigned i = log_next > LOG_LINES ? log_next - LOG_LINES : 0; i < log_next; i++)
        fprintf(stderr, "%s\n", log_ring[i % LOG_LINES]);
    fprintf(stderr, "--- end of k8slease log ---\n");
    pthread_mutex_unlock(&log_mu);
}

/* ------------------------------------------------------------------------ */
/* Candidates, and the "never two leaders" checks                           */
/* ------------------------------------------------------------------------ */

struct group;

struct cand {
    struct group *g;
    k8slease_elector *e; /* under g->mu; NULL once freed */
    char id[128];
    int started, stopped, new_leader;
    int64_t started_epoch;
    char leader[128]; /* last on_new_leader */
    int64_t leader_epoch;
};

struct group {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_MONOTONIC; broadcast by every callback */
    struct cand *c[MAXC];
    int n;
    int violations;
    char violation[512];
    int64_t first_violation_ns, last_violation_ns; /* CLOCK_MONOTONIC */
    pthread_t monitor;
    int monitor_running, monitor_stop;
};

static int64_t mono_ns(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Two leaders: a leads, b leads, a still leads (so a led throughout, one
 * term per elector, while b led). g->mu held. */
static void check_leaders_locked(struct group *g, const char *where)
{
    for (int i = 0; i < g->n; i++) {
        for (int j = 0; j < g->n; j++) {
            struct cand *a = g->c[i], *b = g->c[j];

            if (i == j || !a || !b || !a->e || !b->e)
                continue;
            if (k8slease_elector_is_leader(a->e) && k8slease_elector_is_leader(b->e) &&
                k8slease_elector_is_leader(a->e)) {
                g->last_violation_ns = mono_ns();
                if (g->violations == 0)
                    g->first_violation_ns = g->last_violation_ns;
                if (g->violations++ == 0)
                    snprintf(g->violation, sizeof(g->violation),
                             "%s: %s and %s are both leader (epochs %" PRId64 ", %" PRId64 ")",
                             where, a->id, b->id, k8slease_elector_epoch(a->e),
                             k8slease_elector_epoch(b->e));
            }
        }
    }
}

static void *monitor_main(void *arg)
{
    struct group *g = arg;

    for (;;) {
        pthread_mutex_lock(&g->mu);
        if (g->monitor_stop) {
            pthread_mutex_unlock(&g->mu);
            return NULL;
        }
        check_leaders_locked(g, "monitor");
        pthread_mutex_unlock(&g->mu);
        e2e_pause_ms(2);
    }
}

static void cb_started(int64_t epoch, void *ud)
{
    struct cand *c = ud;

    pthread_mutex_lock(&c->g->mu);
    c->started++;
    c->started_epoch = epoch;
    check_leaders_locked(c->g, "on_started_leading");
    pthread_cond_broadcast(&c->g->cv);
    pthread_mutex_unlock(&c->g->mu);
}

static void cb_stopped(void *ud)
{
    struct cand *c = ud;

    pthread_mutex_lock(&c->g->mu);
    c->stopped++;
    check_leaders_locked(c->g, "on_stopped_leading");
    pthread_cond_broadcast(&c->g->cv);
    pthread_mutex_unlock(&c->g->mu);
}

static void cb_new_leader(const char *id, int64_t epoch, void *ud)
{
    struct cand *c = ud;

    pthread_mutex_lock(&c->g->mu);
    c->new_leader++;
    snprintf(c->leader, sizeof(c->leader), "%s", id);
    c->leader_epoch = epoch;
    check_leaders_locked(c->g, "on_new_leader");
    pthread_cond_broadcast(&c->g->cv);
    pthread_mutex_unlock(&c->g->mu);
}

/* Deadline for pthread_cond_timedwait on the monotonic clock. */
static struct timespec mono_after(int64_t ms)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += (time_t)(ms / 1000);
    t.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

/* ------------------------------------------------------------------------ */
/* Fixture: everything a test starts, freed by the teardown even on failure */
/* ------------------------------------------------------------------------ */

struct watch_log;

struct fx {
    struct group g;
    k8slease_client *clients[MAXC];
    int nclients;
    k8slease_watch *watches[4];
    int nwatches;
    eh_elect *elects[6];
    int nelects;
    eh_etcd *etcd;          /* this test's own etcd, if any */
    eh_cluster *cluster;    /* this test's own cluster, if any */
    struct watch_log *wlog; /* outlives the watches that write to it */
    k8slease_client *k8s;
    int k8s_started;
    int passed; /* set as the test's last statement */
};

static eh_etcd *shared; /* plain http etcd for the tests that do not disturb it */

static int group_setup(void **state)
{
    (void)state;
    log_verbose = getenv("K8SLEASE_TEST_VERBOSE") && getenv("K8SLEASE_TEST_VERBOSE")[0];
    unsetenv("KUBERNETES_SERVICE_HOST");
    if (eh_start(&shared, NULL) != 0) {
        fprintf(stderr, "test_etcd: cannot start etcd (see above)\n");
        return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    log_clear();
    return eh_stop(shared) == 0 ? 0 : -1;
}

static int setup(void **state)
{
    struct fx *fx = calloc(1, sizeof(*fx));
    pthread_condattr_t ca;

    if (!fx)
        return -1;
    pthread_mutex_init(&fx->g.mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&fx->g.cv, &ca);
    pthread_condattr_destroy(&ca);
    log_clear();
    *state = fx;
    return 0;
}

static void monitor_stop(struct fx *fx)
{
    if (!fx->g.monitor_running)
        return;
    pthread_mutex_lock(&fx->g.mu);
    fx->g.monitor_stop = 1;
    pthread_mutex_unlock(&fx->g.mu);
    pthread_join(fx->g.monitor, NULL);
    fx->g.monitor_running = 0;
}

static void cand_free(struct fx *fx, struct cand *c);

static int teardown(void **state)
{
    struct fx *fx = *state;
    int rc = 0;

    monitor_stop(fx);
    if (!fx->passed) {
        log_dump();
        if (fx->etcd)
            eh_log_tail(fx->etcd, 40);
        else if (fx->cluster)
            for (int i = 0; i < eh_cluster_size(fx->cluster); i++)
                eh_log_tail(eh_cluster_member(fx->cluster, i), 20);
        else if (shared)
            eh_log_tail(shared, 40);
    }
    if (fx->etcd)
        eh_resume(fx->etcd); /* if paused: lets the releases through */
    for (int i = 0; fx->cluster && i < eh_cluster_size(fx->cluster); i++)
        eh_resume(eh_cluster_member(fx->cluster, i));
    for (int i = 0; i < fx->g.n; i++)
        cand_free(fx, fx->g.c[i]);
    for (int i = 0; i < fx->nwatches; i++)
        k8slease_watch_free(fx->watches[i]);
    free(fx->wlog); /* its mutex and condvar need no destruction on Linux */
    for (int i = 0; i < fx->nclients; i++)
        k8slease_client_free(fx->clients[i]);
    for (int i = 0; i < fx->nelects; i++)
        eh_elect_free(fx->elects[i]);
    if (fx->k8s_started && e2e_teardown(fx->k8s) != 0)
        rc = -1;
    if (fx->etcd && eh_stop(fx->etcd) != 0)
        rc = -1;
    if (fx->cluster && eh_cluster_stop(fx->cluster) != 0)
        rc = -1;
    for (int i = 0; i < fx->g.n; i++)
        free(fx->g.c[i]);
    pthread_mutex_destroy(&fx->g.mu);
    pthread_cond_destroy(&fx->g.cv);
    free(fx);
    return rc;
}

static void monitor_start(struct fx *fx)
{
    assert_int_equal(pthread_create(&fx->g.monitor, NULL, monitor_main, &fx->g), 0);
    fx->g.monitor_running = 1;
}

/* Stop the monitor, then fail if it or a callback saw two leaders. */
static void assert_never_two_leaders(struct fx *fx)
{
    monitor_stop(fx);
    pthread_mutex_lock(&fx->g.mu);
    pthread_mutex_unlock(&fx->g.mu);
    if (fx->g.violations)
        fail_msg("two leaders seen %d times over %.1f ms; first: %s", fx->g.violations,
                 (fx->g.last_violation_ns - fx->g.first_violation_ns) / 1e6, fx->g.violation);
}

/* When someone else ends a leader's term (revokes its lease, deletes its
 * key), the leader learns it from etcd, a little after the next candidate
 * may have: fencing by epoch covers that window. Check that it is short:
 * the old leader learns from its watch, not from the lease's expiry. */
static void assert_overlap_below(struct fx *fx, int64_t ms)
{
    double overlap;

    monitor_stop(fx);
    pthread_mutex_lock(&fx->g.mu);
    overlap = fx->g.violations ? (fx->g.last_violation_ns - fx->g.first_violation_ns) / 1e6 : 0;
    pthread_mutex_unlock(&fx->g.mu);
    print_message("old and new leader overlapped for %.1f ms (%d observations)\n", overlap,
                  fx->g.violations);
    if (overlap >= (double)ms)
        fail_msg("old and new leader overlapped for %.1f ms (limit %" PRId64 " ms); first: %s",
                 overlap, ms, fx->g.violation);
}

static eh_etcd *start_etcd(struct fx *fx, const eh_options *o)
{
    if (eh_start(&fx->etcd, o) != 0)
        fail_msg("cannot start etcd (see above)");
    return fx->etcd;
}

/* Client options for etcd e: its endpoint, and its CA and client
 * certificate when it runs TLS. */
static k8slease_client_options etcd_opts(const eh_etcd *e)
{
    k8slease_client_options o = K8SLEASE_CLIENT_OPTIONS_INIT;

    o.backend = K8SLEASE_BACKEND_ETCD;
    o.etcd_endpoints = eh_endpoint(e);
    o.etcd_ca_file = eh_ca_file(e);
    o.etcd_cert_file = eh_cert_file(e);
    o.etcd_key_file = eh_key_file(e);
    o.log_level = K8SLEASE_LOG_DEBUG;
    return o;
}

static k8slease_client *client_new(struct fx *fx, k8slease_client_options *o, const char *label)
{
    k8slease_client *c = NULL;
    int rc;

    assert_true(fx->nclients < MAXC);
    o->log_cb = log_cb;
    o->log_user_data = (void *)label;
    o->log_level = K8SLEASE_LOG_DEBUG;
    rc = k8slease_client_new(&c, o);
    if (rc != 0)
        fail_msg("k8slease_client_new(%s, endpoints %s): %s: %s", label,
                 o->etcd_endpoints ? o->etcd_endpoints : "(null)", k8slease_strerror(rc),
                 k8slease_error_last());
    assert_non_null(c);
    fx->clients[fx->nclients++] = c;
    return c;
}

static k8slease_client *etcd_client(struct fx *fx, const eh_etcd *e, const char *label)
{
    k8slease_client_options o = etcd_opts(e);

    return client_new(fx, &o, label);
}

static k8slease_elector_options cand_opts(struct cand *c, const char *name)
{
    k8slease_elector_options o = K8SLEASE_ELECTOR_OPTIONS_INIT;

    o.name = name;
    o.identity = c->id;
    o.lease_duration_ms = LD_MS;
    o.renew_deadline_ms = RD_MS;
    o.retry_period_ms = RP_MS;
    o.release_on_cancel = 1;
    o.on_started_leading = cb_started;
    o.on_stopped_leading = cb_stopped;
    o.on_new_leader = cb_new_leader;
    o.user_data = c;
    return o;
}

static struct cand *cand_new(struct fx *fx, const char *id)
{
    struct cand *c = calloc(1, sizeof(*c));

    assert_non_null(c);
    assert_true(fx->g.n < MAXC);
    c->g = &fx->g;
    c->started_epoch = -1;
    c->leader_epoch = -1;
    snprintf(c->id, sizeof(c->id), "%s", id);
    pthread_mutex_lock(&fx->g.mu);
    fx->g.c[fx->g.n++] = c;
    pthread_mutex_unlock(&fx->g.mu);
    return c;
}

/* Start campaigning with the suite's timings as identity id. */
static struct cand *cand_start(struct fx *fx, k8slease_client *client, const char *name,
                               const char *id)
{
    struct cand *c = cand_new(fx, id);
    k8slease_elector_options o = cand_opts(c, name);
    k8slease_elector *e = NULL;
    int rc = k8slease_elector_start(&e, client, &o);

    if (rc != 0)
        fail_msg("elector_start(%s, %s): %s: %s", name, id, k8slease_strerror(rc),
                 k8slease_error_last());
    pthread_mutex_lock(&fx->g.mu);
    c->e = e;
    pthread_mutex_unlock(&fx->g.mu);
    return c;
}

/* Take the elector out of the checks, then free it (which releases). */
static void cand_free(struct fx *fx, struct cand *c)
{
    k8slease_elector *e;

    if (!c)
        return;
    pthread_mutex_lock(&fx->g.mu);
    e = c->e;
    c->e = NULL;
    pthread_mutex_unlock(&fx->g.mu);
    k8slease_elector_free(e);
}

static int64_t elected(struct cand *c)
{
    int64_t epoch = -1, t0 = e2e_mono_ms();
    int rc = k8slease_elector_wait_elected(c->e, WAIT_MS, &epoch);

    if (rc != 0)
        fail_msg("%s not elected within %d ms: %s (%s)", c->id, WAIT_MS, k8slease_strerror(rc),
                 k8slease_error_last());
    print_message("%s elected, epoch %" PRId64 " (waited %" PRId64 " ms)\n", c->id, epoch,
                  e2e_mono_ms() - t0);
    assert_true(k8slease_elector_is_leader(c->e) || k8slease_elector_wait_lost(c->e, 0) == 0);
    return epoch;
}

/* Not leader now, and not elected within ms. */
static void assert_waits(struct cand *c, int64_t ms)
{
    int rc = k8slease_elector_wait_elected(c->e, ms, NULL);

    if (rc != K8SLEASE_ETIMEOUT)
        fail_msg("%s: wait_elected(%" PRId64 " ms) = %s, expected K8SLEASE_ETIMEOUT (%s)", c->id,
                 ms, k8slease_strerror(rc), k8slease_error_last());
    assert_false(k8slease_elector_is_leader(c->e));
}

/* Wait until c's on_new_leader reported identity id; returns its epoch. */
static int64_t wait_new_leader(struct fx *fx, struct cand *c, const char *id)
{
    struct timespec until = mono_after(WAIT_MS);
    int64_t epoch;

    pthread_mutex_lock(&fx->g.mu);
    while (strcmp(c->leader, id) != 0)
        if (pthread_cond_timedwait(&fx->g.cv, &fx->g.mu, &until) != 0)
            break;
    epoch = c->leader_epoch;
    if (strcmp(c->leader, id) != 0) {
        char last[128];

        snprintf(last, sizeof(last), "%s", c->leader);
        pthread_mutex_unlock(&fx->g.mu);
        fail_msg("%s: on_new_leader did not report \"%s\" within %d ms (last: \"%s\", %d calls)",
                 c->id, id, WAIT_MS, last, c->new_leader);
    }
    pthread_mutex_unlock(&fx->g.mu);
    return epoch;
}

/* Wait until on_stopped_leading has run for c. */
static void wait_stopped(struct fx *fx, struct cand *c, int64_t ms)
{
    struct timespec until = mono_after(ms);
    int stopped;

    pthread_mutex_lock(&fx->g.mu);
    while (!c->stopped)
        if (pthread_cond_timedwait(&fx->g.cv, &fx->g.mu, &until) != 0)
            break;
    stopped = c->stopped;
    pthread_mutex_unlock(&fx->g.mu);
    if (!stopped)
        fail_msg("%s: on_stopped_leading did not run within %" PRId64 " ms", c->id, ms);
    assert_int_equal(stopped, 1);
}

static int cand_started(struct fx *fx, struct cand *c)
{
    int n;

    pthread_mutex_lock(&fx->g.mu);
    n = c->started;
    pthread_mutex_unlock(&fx->g.mu);
    return n;
}

/* ------------------------------------------------------------------------ */
/* etcd's view, through etcdctl                                             */
/* ------------------------------------------------------------------------ */

struct kv {
    char key[512];
    char value[512];
};

/* The keys under "name/" (etcdctl get --prefix: key and value lines). */
static int kv_list(eh_etcd *e, const char *name, struct kv *kv, int max)
{
    char prefix[512], *out = NULL, *save = NULL;
    int rc, n = 0;

    snprintf(prefix, sizeof(prefix), "%s/", name);
    rc = eh_etcdctl(e, &out, "get", "--prefix", prefix, NULL);
    if (rc != 0) {
        free(out);
        fail_msg("etcdctl get --prefix %s failed (%d): %s", prefix, rc, eh_etcdctl_stderr(e));
    }
    for (char *line = strtok_r(out, "\n", &save); line && n < max;
         line = strtok_r(NULL, "\n", &save)) {
        char *value = strtok_r(NULL, "\n", &save);

        snprintf(kv[n].key, sizeof(kv[n].key), "%s", line);
        snprintf(kv[n].value, sizeof(kv[n].value), "%s", value ? value : "");
        n++;
    }
    free(out);
    return n;
}

/* Wait until a key under "name/" has the value; copy the key to key. */
static void wait_key(eh_etcd *e, const char *name, const char *value, char *key, size_t cap)
{
    int64_t deadline = e2e_mono_ms() + WAIT_MS;
    struct kv kv[16];

    for (;;) {
        int n = kv_list(e, name, kv, 16);

        for (int i = 0; i < n; i++) {
            if (strcmp(kv[i].value, value) == 0) {
                if (key)
                    snprintf(key, cap, "%s", kv[i].key);
                return;
            }
        }
        if (e2e_mono_ms() > deadline)
            fail_msg("no key under %s/ with value \"%s\" within %d ms", name, value, WAIT_MS);
        e2e_pause_ms(50);
    }
}

/* "NAME/<lease ID in lowercase hex, no padding>": the lease ID, or fail. */
static uint64_t key_lease(const char *name, const char *key)
{
    size_t n = strlen(name);
    const char *hex = key + n + 1;
    size_t len = strlen(hex);

    if (strncmp(key, name, n) != 0 || key[n] != '/')
        fail_msg("key \"%s\" is not under \"%s/\"", key, name);
    if (len < 1 || len > 16 || hex[0] == '0' || strspn(hex, "0123456789abcdef") != len)
        fail_msg("key \"%s\": \"%s\" is not a lease ID in lowercase hex without padding", key, hex);
    return strtoull(hex, NULL, 16);
}

/* A decimal field of etcdctl's JSON output ("create_revision":12). */
static int64_t json_int(const char *json, const char *field)
{
    char pat[64];
    const char *p;

    snprintf(pat, sizeof(pat), "\"%s\":", field);
    p = strstr(json, pat);
    if (!p)
        fail_msg("no %s in %s", field, json);
    p += strlen(pat);
    if (*p == '"')
        p++;
    return (int64_t)strtoull(p, NULL, 10);
}

static k8slease_holder *holder(k8slease_client *c, const char *name)
{
    k8slease_holder *h = NULL;
    int rc = k8slease_holder_get(c, NULL, name, 0, &h);

    if (rc != 0)
        fail_msg("holder_get(%s): %s: %s", name, k8slease_strerror(rc), k8slease_error_last());
    assert_non_null(h);
    assert_non_null(h->identity);
    return h;
}

static eh_elect *elect_start(struct fx *fx, eh_etcd *e, const char *name, const char *value)
{
    eh_elect *c = NULL;

    assert_true(fx->nelects < 6);
    if (eh_elect_start(e, &c, name, value) != 0)
        fail_msg("cannot start etcdctl elect %s", name);
    fx->elects[fx->nelects++] = c;
    return c;
}

static void elect_wait_line(eh_elect *c, const char *line)
{
    if (eh_elect_wait_line(c, line, WAIT_MS) != 0)
        fail_msg("etcdctl elect (pid %d) did not print \"%s\" within %d ms (see above)",
                 eh_elect_pid(c), line, WAIT_MS);
}

/* ------------------------------------------------------------------------ */
/* 0. The harness itself (etcd and etcdctl only, no library)                */
/* ------------------------------------------------------------------------ */

static char proc_state(int pid)
{
    char path[64], buf[512], *p;
    FILE *f;
    size_t n;

    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    f = fopen(path, "r");
    if (!f)
        return '?';
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    p = strrchr(buf, ')');
    return p && p[1] == ' ' ? p[2] : '?';
}

static void harness_etcd_and_etcdctl(void **state)
{
    struct fx *fx = *state;
    eh_etcd *e = start_etcd(fx, NULL);
    eh_elect *a, *b, *l;
    char *out = NULL;
    int pid;

    assert_int_equal(strncmp(eh_endpoint(e), "http://127.0.0.1:", 17), 0);
    assert_true(eh_port(e) > 0);
    assert_null(eh_ca_file(e));
    assert_int_equal(eh_etcdctl(e, NULL, "put", "h/k", "v1", NULL), 0);
    assert_int_equal(eh_etcdctl(e, &out, "get", "h/k", "--print-value-only", NULL), 0);
    assert_string_equal(out, "v1\n");
    free(out);
    /* A failing command: its status and stderr come back. */
    assert_true(eh_etcdctl(e, NULL, "lease", "revoke", "123abc", NULL) > 0);
    assert_non_null(strstr(eh_etcdctl_stderr(e), "not found"));

    /* etcdctl elect: elected line, a queued candidate, the observer, and
     * the handover when the first one resigns on SIGINT. */
    a = elect_start(fx, e, "h-el", "hv1");
    elect_wait_line(a, "hv1");
    l = elect_start(fx, e, "h-el", NULL);
    elect_wait_line(l, "hv1");
    b = elect_start(fx, e, "h-el", "hv2");
    wait_key(e, "h-el", "hv2", NULL, 0);
    assert_false(eh_elect_has_line(b, "hv2"));
    assert_int_equal(eh_elect_signal(a, SIGINT), 0);
    elect_wait_line(b, "hv2");
    elect_wait_line(l, "hv2");
    assert_true(eh_elect_wait_exit(a, WAIT_MS) >= 0);
    assert_int_equal(eh_elect_pid(a), -1);

    /* Pause and resume: the process is stopped ('T'), then running again. */
    pid = eh_pid(e);
    assert_int_equal(eh_pause(e), 0);
    assert_int_equal(proc_state(pid), 'T');
    assert_int_equal(eh_resume(e), 0);
    assert_true(proc_state(pid) != 'T');
    assert_int_equal(eh_etcdctl(e, NULL, "get", "h/k", NULL), 0);

    /* Restart, clean and crash: same endpoint, data kept. */
    {
        char endpoint[64];

        snprintf(endpoint, sizeof(endpoint), "%s", eh_endpoint(e));
        assert_int_equal(eh_restart(e, SIGTERM), 0);
        assert_string_equal(eh_endpoint(e), endpoint);
        assert_true(eh_pid(e) != pid);
        assert_int_equal(eh_etcdctl(e, &out, "get", "h/k", "--print-value-only", NULL), 0);
        assert_string_equal(out, "v1\n");
        free(out);
        assert_int_equal(eh_restart(e, SIGKILL), 0);
        assert_int_equal(eh_etcdctl(e, &out, "get", "h/k", "--print-value-only", NULL), 0);
        assert_string_equal(out, "v1\n");
        free(out);
    }
    assert_true(eh_free_port() > 0);
    fx->passed = 1;
}

static void harness_tls_and_auth(void **state)
{
    struct fx *fx = *state;
    eh_options o = {.tls = 1};
    eh_etcd *e = start_etcd(fx, &o);
    eh_elect *a;
    char *out = NULL;

    assert_int_equal(strncmp(eh_endpoint(e), "https://127.0.0.1:", 18), 0);
    assert_non_null(eh_ca_file(e));
    assert_non_null(eh_other_ca_file(e));
    assert_int_equal(access(eh_cert_file(e), R_OK), 0);
    assert_int_equal(access(eh_key_file(e), R_OK), 0);
    assert_int_equal(eh_etcdctl(e, NULL, "put", "t/k", "tv", NULL), 0);
    /* etcdctl (gRPC) with the client certificate; /health answered over
     * https in eh_start; the JSON gateway is tls_client_certificates'. */
    a = elect_start(fx, e, "t-el", "tls-1");
    elect_wait_line(a, "tls-1");
    assert_int_equal(eh_enable_auth(e, "s3cret"), 0);
    assert_int_equal(eh_etcdctl(e, &out, "user", "get", "root", NULL), 0);
    assert_non_null(strstr(out, "root"));
    free(out);
    assert_int_equal(eh_etcdctl(e, &out, "get", "t/k", "--print-value-only", NULL), 0);
    assert_string_equal(out, "tv\n");
    free(out);
    fx->passed = 1;
}

/* ------------------------------------------------------------------------ */
/* 1. One candidate                                                         */
/* ------------------------------------------------------------------------ */

static void single_election(void **state)
{
    struct fx *fx = *state;
    k8slease_client *client = etcd_client(fx, shared, "c1");
    struct cand *a;
    k8slease_holder *h;
    struct kv kv[4];
    char *json = NULL, hex[32], *out = NULL, rv[32];
    int64_t epoch, deadline;
    uint64_t lease;

    assert_int_equal(k8slease_client_backend(client), K8SLEASE_BACKEND_ETCD);
    assert_string_equal(k8slease_client_namespace(client), "");
    assert_string_equal(k8slease_client_server(client), eh_endpoint(shared));
    monitor_start(fx);
    a = cand_start(fx, client, "etcd-single", "node-1:2379");
    epoch = elected(a);
    assert_true(epoch > 0);
    assert_true(k8slease_elector_is_leader(a->e));
    assert_int_equal(k8slease_elector_epoch(a->e), epoch);
    deadline = k8slease_elector_leader_deadline(a->e);
    assert_true(deadline > mono_ns());
    assert_true(deadline <= mono_ns() + (int64_t)LD_MS * 1000000);
    assert_int_equal(cand_started(fx, a), 1);
    assert_int_equal(a->started_epoch, epoch);
    wait_new_leader(fx, a, "node-1:2379");
    assert_int_equal(a->leader_epoch, epoch);

    h = holder(client, "etcd-single");
    assert_string_equal(h->identity, "node-1:2379");
    assert_int_equal(h->epoch, epoch);
    assert_int_equal(h->lease_duration_s, LD_MS / 1000);
    assert_false(h->expired);
    assert_non_null(h->resource_version);
    snprintf(rv, sizeof(rv), "%s", h->resource_version);
    k8slease_holder_free(h);

    /* etcd's view: one key NAME/<our lease in hex>, our value, created at
     * the epoch, attached to that lease. */
    assert_int_equal(kv_list(shared, "etcd-single", kv, 4), 1);
    assert_string_equal(kv[0].value, "node-1:2379");
    lease = key_lease("etcd-single", kv[0].key);
    assert_int_equal(eh_etcdctl(shared, &json, "get", kv[0].key, "-w", "json", NULL), 0);
    assert_int_equal(json_int(json, "create_revision"), epoch);
    assert_int_equal(strtoll(rv, NULL, 10), json_int(json, "mod_revision"));
    assert_int_equal((uint64_t)json_int(json, "lease"), lease);
    free(json);

    /* Stop with release: key deleted and lease revoked before stop returns. */
    assert_int_equal(k8slease_elector_stop(a->e, -1), 0);
    assert_false(k8slease_elector_is_leader(a->e));
    assert_int_equal(k8slease_elector_leader_deadline(a->e), 0);
    assert_int_equal(k8slease_elector_wait_lost(a->e, 0), 0);
    wait_stopped(fx, a, 0);
    assert_int_equal(kv_list(shared, "etcd-single", kv, 4), 0);
    snprintf(hex, sizeof(hex), "%" PRIx64, lease);
    assert_int_equal(eh_etcdctl(shared, &out, "lease", "timetolive", hex, NULL), 0);
    if (!strstr(out, "already expired"))
        fail_msg("lease %s not revoked by the release: %s", hex, out);
    free(out);
    assert_int_equal(k8slease_holder_get(client, NULL, "etcd-single", 0, &h), K8SLEASE_ENOTFOUND);
    assert_null(h);
    assert_never_two_leaders(fx);
    fx->passed = 1;
}

/* ------------------------------------------------------------------------ */
/* 2. Two candidates                                                        */
/* ------------------------------------------------------------------------ */

static void two_candidates(void **state)
{
    struct fx *fx = *state;
    k8slease_client *ca = etcd_client(fx, shared, "a"), *cb = etcd_client(fx, shared, "b");
    struct cand *a, *b, *a2;
    int64_t ea, eb, ea2;

    monitor_start(fx);
    a = cand_start(fx, ca, "etcd-two", "a:1");
    ea = elected(a);
    b = cand_start(fx, cb, "etcd-two", "b:1");
    wait_key(shared, "etcd-two", "b:1", NULL, 0);
    assert_int_equal(wait_new_leader(fx, b, "a:1"), ea);
    assert_waits(b, 3 * RP_MS);
    assert_true(k8slease_elector_is_leader(a->e));

    /* The leader stops (release): the other one takes over, newer epoch. */
    assert_int_equal(k8slease_elector_stop(a->e, 1), 0);
    assert_false(k8slease_elector_is_leader(a->e));
    wait_stopped(fx, a, 0);
    eb = elected(b);
    assert_true(eb > ea);
    wait_new_leader(fx, b, "b:1");

    /* And back: a new candidate on the first client queues, then leads. */
    a2 = cand_start(fx, ca, "etcd-two", "a:2");
    wait_key(shared, "etcd-two", "a:2", NULL, 0);
    assert_int_equal(wait_new_leader(fx, a2, "b:1"), eb);
    assert_waits(a2, 3 * RP_MS);
    assert_int_equal(k8slease_elector_stop(b->e, 1), 0);
    ea2 = elected(a2);
    assert_true(ea2 > eb);
    assert_int_equal(cand_started(fx, a), 1);
    assert_int_equal(cand_started(fx, b), 1);
    assert_never_two_leaders(fx);
    fx->passed = 1;
}

/* A leader that stops without releasing leaves its key to its lease: the
 * follower takes over when etcd expires the lease, not before. */
static void failover_without_release(void **state)
{
    struct fx *fx = *state;
    k8slease_client *ca = etcd_client(fx, shared, "fa"), *cb = etcd_client(fx, shared, "fb");
    struct cand *a, *b;
    struct kv kv[4];
    int64_t ea, eb, t0, waited;

    monitor_start(fx);
    a = cand_start(fx, ca, "etcd-failover", "fa:1");
    ea = elected(a);
    b = cand_start(fx, cb, "etcd-failover", "fb:1");
    wait_key(shared, "etcd-failover", "fb:1", NULL, 0);
    t0 = e2e_mono_ms();
    assert_int_equal(k8slease_elector_stop(a->e, 0), 0); /* "dies": keepalives stop */
    assert_false(k8slease_elector_is_leader(a->e));
    assert_int_equal(kv_list(shared, "etcd-failover", kv, 4), 2); /* both keys still there */
    assert_string_equal(kv[0].value, "fa:1");
    eb = elected(b);
    waited = e2e_mono_ms() - t0;
    print_message("failover after %" PRId64 " ms (TTL %d ms, keepalive every %d ms)\n", waited,
                  LD_MS, LD_MS / 3);
    assert_true(eb > ea);
    /* The last keepalive was at most TTL/3 before the stop: the lease
     * lives at least 2/3 of the TTL after it. */
    assert_true(waited >= LD_MS * 2 / 3 - 100);
    assert_int_equal(kv_list(shared, "etcd-failover", kv, 4), 1);
    assert_string_equal(kv[0].value, "fb:1");
    assert_never_two_leaders(fx);
    fx->passed = 1;
}

/* ------------------------------------------------------------------------ */
/* 3. Five candidates lead in the order they queued                         */
/* ------------------------------------------------------------------------ */

static void five_candidates_in_queue_order(void **state)
{
    enum { N = 5 };
    struct fx *fx = *state;
    k8slease_client *cl[2] = {etcd_client(fx, shared, "q0"), etcd_client(fx, shared, "q1")};
    struct cand *c[N];
    int64_t prev = 0, revs[N];
    k8slease_holder *h;

    monitor_start(fx);
    for (int i = 0; i < N; i++) {
        char id[32], key[512], *json = NULL;

        snprintf(id, sizeof(id), "q%d:7000", i);
        c[i] = cand_start(fx, cl[i % 2], "etcd-queue", id);
        wait_key(shared, "etcd-queue", id, key, sizeof(key));
        assert_int_equal(eh_etcdctl(shared, &json, "get", key, "-w", "json", NULL), 0);
        revs[i] = json_int(json, "create_revision");
        free(json);
        if (i > 0)
            assert_true(revs[i] > revs[i - 1]);
    }
    for (int k = 0; k < N; k++) {
        int64_t epoch = elected(c[k]);

        assert_true(epoch > prev);
        assert_int_equal(epoch, revs[k]); /* the epoch is the key's create revision */
        prev = epoch;
        for (int j = k + 1; j < N; j++)
            assert_false(k8slease_elector_is_leader(c[j]->e));
        h = holder(cl[0], "etcd-queue");
        assert_string_equal(h->identity, c[k]->id);
        assert_int_equal(h->epoch, epoch);
        k8slease_holder_free(h);
        if (k + 1 < N) {
            assert_int_equal(wait_new_leader(fx, c[k + 1], c[k]->id), epoch);
            assert_waits(c[k + 1], RP_MS);
        }
        assert_int_equal(k8slease_elector_stop(c[k]->e, 1), 0);
        wait_stopped(fx, c[k], 0);
    }
    for (int i = 0; i < N; i++)
        assert_int_equal(cand_started(fx, c[i]), 1);
    assert_never_two_leaders(fx);
    fx->passed = 1;
}

/* ------------------------------------------------------------------------ */
/* 4. etcdctl elect and k8slease in one election                            */
/* ------------------------------------------------------------------------ */

static void interop_with_etcdctl_elect(void **state)
{
    struct fx *fx = *state;
    k8slease_client *client = etcd_client(fx, shared, "x");
    eh_elect *v1, *v2, *listen;
    struct cand *x, *y;
    k8slease_holder *h;
    char key[512], hex[32], *out = NULL;
    int64_t ev1, ex, ey, t0;

    /* etcdctl leads; we queue behind it and see its value. */
    v1 = elect_start(fx, shared, "etcd-interop", "v1");
    elect_wait_line(v1, "v1");
    wait_key(shared, "etcd-interop", "v1", key, sizeof(key));
    h = holder(client, "etcd-interop");
    assert_string_equal(h->identity, "v1");
    ev1 = h->epoch;
    assert_true(ev1 > 0);
    k8slease_holder_free(h);
    x = cand_start(fx, client, "etcd-interop", "x:1");
    assert_int_equal(wait_new_leader(fx, x, "v1"), ev1);
    wait_key(shared, "etcd-interop", "x:1", NULL, 0);
    assert_waits(x, 3 * RP_MS);

    /* etcdctl dies without resigning; its session TTL (60 s) is too long to
     * wait for, so revoke its lease as an operator would: we lead at once. */
    assert_int_equal(eh_elect_signal(v1, SIGKILL), 0);
    assert_true(eh_elect_wait_exit(v1, WAIT_MS) >= 0);
    snprintf(hex, sizeof(hex), "%" PRIx64, key_lease("etcd-interop", key));
    assert_int_equal(eh_etcdctl(shared, NULL, "lease", "revoke", hex, NULL), 0);
    ex = elected(x);
    assert_true(ex > ev1);

    /* etcdctl sees us: the observer prints our identity. */
    listen = elect_start(fx, shared, "etcd-interop", NULL);
    elect_wait_line(listen, "x:1");

    /* etcdctl queues behind us and wins when we release. */
    v2 = elect_start(fx, shared, "etcd-interop", "v2");
    wait_key(shared, "etcd-interop", "v2", NULL, 0);
    assert_int_equal(k8slease_elector_wait_elected(x->e, 0, NULL), 0); /* still leader */
    assert_true(k8slease_elector_is_leader(x->e));
    assert_false(eh_elect_has_line(v2, "v2"));
    t0 = e2e_mono_ms();
    assert_int_equal(k8slease_elector_stop(x->e, 1), 0);
    elect_wait_line(v2, "v2");
    print_message("etcdctl elected %" PRId64 " ms after our release\n", e2e_mono_ms() - t0);
    elect_wait_line(listen, "v2");

    /* etcdctl resigns on SIGINT (deletes its key, keeps its lease): the
     * next candidate leads long before etcdctl's lease would expire. */
    y = cand_start(fx, client, "etcd-interop", "y:1");
    wait_new_leader(fx, y, "v2");
    assert_waits(y, 3 * RP_MS);
    t0 = e2e_mono_ms();
    assert_int_equal(eh_elect_signal(v2, SIGINT), 0);
    ey = elected(y);
    assert_true(ey > ex);
    assert_true(e2e_mono_ms() - t0 < 60000);
    elect_wait_line(listen, "y:1");
    assert_true(eh_elect_wait_exit(v2, WAIT_MS) >= 0);
    h = holder(client, "etcd-interop");
    assert_string_equal(h->identity, "y:1");
    assert_int_equal(h->epoch, ey);
    k8slease_holder_free(h);
    assert_int_equal(
        eh_etcdctl(shared, &out, "get", "--prefix", "etcd-interop/", "--print-value-only", NULL),
        0);
    assert_string_equal(out, "y:1\n");
    free(out);
    fx->passed = 1;
}

/* ------------------------------------------------------------------------ */
/* 5. etcd frozen under the leader                                          */
/* ------------------------------------------------------------------------ */

static void keepalive_blocked(void **state)
{
    struct fx *fx = *state;
    eh_etcd *e = start_etcd(fx, NULL);
    k8slease_client *client = etcd_client(fx, e, "p");
    struct cand *a, *b;
    int64_t ea, eb, t_stop, d0, limit, t_false = 0;

    a = cand_start(fx, client, "etcd-pause", "a:1");
    ea = elected(a);
    assert_true(k8slease_elector_is_leader(a->e));

    /* Freeze etcd. Every keepalive that still succeeds was sent before
     * t_stop, so the leader deadline is at most t_stop + TTL. */
    assert_int_equal(eh_pause(e), 0);
    t_stop = mono_ns();
    d0 = k8slease_elector_leader_deadline(a->e);
    assert_true(d0 > 0);
    assert_true(d0 <= t_stop + (int64_t)LD_MS * 1000000);
    limit = t_stop + ((int64_t)LD_MS + WAIT_MS) * 1000000;
    for (;;) {
        int64_t before = mono_ns();
        int leader = k8slease_elector_is_leader(a->e);

        if (leader) {
            if (before >= t_stop + (int64_t)LD_MS * 1000000)
                fail_msg("still leader %.0f ms after etcd froze (TTL %d ms)",
                         (before - t_stop) / 1e6, LD_MS);
        } else {
            t_false = before;
            break;
        }
        if (before > limit)
            fail_msg("is_leader still true %d ms after etcd froze", LD_MS + WAIT_MS);
        e2e_pause_ms(5);
    }
    print_message("is_leader false %.0f ms after SIGSTOP (deadline was %.0f ms after it)\n",
                  (t_false - t_stop) / 1e6, (d0 - t_stop) / 1e6);
    /* Until the loop ends the term, the deadline may still be reported:
     * it must then be in the past. */
    d0 = k8slease_elector_leader_deadline(a->e);
    assert_true(d0 <= mono_ns());
    /* The term ends: on_stopped_leading, wait_lost. */
    wait_stopped(fx, a, WAIT_MS);
    assert_int_equal(k8slease_elector_wait_lost(a->e, WAIT_MS), 0);
    assert_false(k8slease_elector_is_leader(a->e));
    assert_int_equal(k8slease_elector_leader_deadline(a->e), 0);

    /* etcd back: a new candidate is elected (after a's lease expired or
     * was revoked), with a greater epoch. */
    assert_int_equal(eh_resume(e), 0);
    b = cand_start(fx, client, "etcd-pause", "b:1");
    eb = elected(b);
    assert_true(eb > ea);
    assert_false(k8slease_elector_is_leader(a->e));
    assert_int_equal(cand_started(fx, a), 1);
    fx->passed = 1;
}

/* The end of a term is reported when it ends: with etcd
 * frozen, wait_lost returns within 100 ms of the moment is_leader turned
 * false (the leader deadline passing, or the stop), not once the requests
 * to the frozen etcd have timed out; a new elector started then leads once
 * etcd answers; and a stop while etcd hangs is bounded. */
struct lost_waiter {
    k8slease_elector *e;
    int rc;
    int64_t returned_ns;
};

static void *wait_lost_thread(void *arg)
{
    struct lost_waiter *w = arg;

    w->rc = k8slease_elector_wait_lost(w->e, WAIT_MS);
    w->returned_ns = mono_ns();
    return NULL;
}

static void *stop_thread(void *arg)
{
    struct lost_waiter *w = arg;

    w->rc = k8slease_elector_stop(w->e, 1);
    w->returned_ns = mono_ns();
    return NULL;
}

static void frozen_etcd_reports_the_end_on_time(void **state)
{
    struct fx *fx = *state;
    eh_etcd *e = start_etcd(fx, NULL);
    k8slease_client *client = etcd_client(fx, e, "t");
    struct lost_waiter w = {0}, st = {0};
    struct cand *a, *b, *c;
    pthread_t th, th2;
    int64_t ea, eb, ec, deadline = 0, d, late, stopped;
    char want[256];

    /* The deadline passes while etcd is frozen. */
    a = cand_start(fx, client, "etcd-termend", "a:1");
    ea = elected(a);
    w.e = a->e;
    assert_int_equal(pthread_create(&th, NULL, wait_lost_thread, &w), 0);
    assert_int_equal(eh_pause(e), 0);
    while ((d = k8slease_elector_leader_deadline(a->e)) != 0) {
        deadline = d; /* the last one stored: no keepalive succeeds any more */
        e2e_pause_ms(1);
    }
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(w.rc, 0);
    late = w.returned_ns - deadline;
    print_message("wait_lost returned %+.1f ms after the leader deadline (etcd frozen)\n",
                  late / 1e6);
    assert_true(late >= -2000000 && late <= 100000000);
    /* It says why, at warning level: the keepalives got no answer (the
     * last one timed out, or one is still waiting). */
    snprintf(want, sizeof(want),
             "warn: etcd election etcd-termend: lost the lease (epoch %" PRId64
             "): no successful keepalive within the lease TTL of 3 s (",
             ea);
    wait_log("t", want, NULL);
    assert_false(log_has("t", "no keepalive attempted"));
    /* Campaign again at once; it leads once etcd answers. */
    b = cand_start(fx, client, "etcd-termend", "a:1");
    assert_int_equal(eh_resume(e), 0);
    eb = elected(b);
    assert_true(eb > ea);

    /* Stopped while etcd hangs: told at once, the release bounded. */
    assert_int_equal(eh_pause(e), 0);
    w.e = st.e = b->e;
    assert_int_equal(pthread_create(&th, NULL, wait_lost_thread, &w), 0);
    stopped = mono_ns();
    assert_int_equal(pthread_create(&th2, NULL, stop_thread, &st), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(w.rc, 0);
    late = w.returned_ns - stopped;
    print_message("wait_lost returned %.1f ms after the stop (etcd frozen)\n", late / 1e6);
    assert_true(late <= 100000000);
    assert_false(k8slease_elector_is_leader(b->e));
    assert_int_equal(pthread_join(th2, NULL), 0);
    assert_int_equal(st.rc, 0);
    print_message("the stop (its release) returned after %.0f ms\n",
                  (st.returned_ns - stopped) / 1e6);
    assert_true(st.returned_ns - stopped <= (int64_t)(LD_MS + RD_MS + 5000) * 1000000);
    c = cand_start(fx, client, "etcd-termend", "c:1");
    assert_int_equal(eh_resume(e), 0);
    ec = elected(c);
    assert_true(ec > eb);
    assert_never_two_leaders(fx);
    fx->passed = 1;
}

/* The release (DELETE of the key, REVOKE of the lease) waits for a thread
 * that waited in wait_lost when the term ended: held where the end woke
 * it, the key stays until it is let go. */
static void release_waits_for_wait_lost(void **state)
{
    struct fx *fx = *state;
    k8slease_client *client = etcd_client(fx, shared, "w");
    struct lost_waiter w = {0}, st = {0};
    struct kv kv[4];
    pthread_t th, th2;
    int64_t until;
    struct cand *a;

    a = cand_start(fx, client, "etcd-held", "held:1");
    elected(a);
    w.e = st.e = a->e;
    assert_int_equal(pthread_create(&th, NULL, wait_lost_thread, &w), 0);
    e2e_lost_await_waiting();
    assert_int_equal(pthread_create(&th2, NULL, stop_thread, &st), 0);
    e2e_lost_await_held();
    assert_false(k8slease_elector_is_leader(a->e));
    until = mono_ns() + INT64_C(1000000000);
    do {
        if (kv_list(shared, "etcd-held", kv, 4) != 1)
            fail_msg("the key was deleted while a thread in wait_lost was held");
        e2e_pause_ms(20);
    } while (mono_ns() < until);
    if (pthread_tryjoin_np(th2, NULL) == 0)
        fail_msg("k8slease_elector_stop returned while a thread in wait_lost was held");
    e2e_lost_let_go();
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(w.rc, 0);
    assert_int_equal(pthread_join(th2, NULL), 0);
    assert_int_equal(st.rc, 0);
    assert_int_equal(kv_list(shared, "etcd-held", kv, 4), 0);
    fx->passed = 1;
}

/* ------------------------------------------------------------------------ */
/* 6. etcd restarted under a leader and a follower                          */
/* ------------------------------------------------------------------------ */

static void etcd_restart(void **state)
{
    struct fx *fx = *state;
    eh_etcd *e = start_etcd(fx, NULL);
    k8slease_client *ca = etcd_client(fx, e, "ra"), *cb = etcd_client(fx, e, "rb");
    struct cand *live[3], *first, *c;
    int nlive = 3;
    int64_t ea, prev_epoch, deadline;

    monitor_start(fx);
    live[0] = first = cand_start(fx, ca, "etcd-restart", "a:1");
    prev_epoch = ea = elected(first);
    live[1] = cand_start(fx, cb, "etcd-restart", "b:1");
    wait_key(e, "etcd-restart", "b:1", NULL, 0);
    assert_waits(live[1], RP_MS);

    assert_int_equal(eh_restart(e, SIGTERM), 0);
    live[2] = c = cand_start(fx, ca, "etcd-restart", "c:1");

    /* Whoever leads now is stopped (released) in turn until every
     * candidate's election is over, the one started after the restart
     * included: one leader at a time, and every new term has a greater
     * epoch. */
    deadline = e2e_mono_ms() + 3 * WAIT_MS;
    while (nlive > 0) {
        if (e2e_mono_ms() > deadline)
            fail_msg("the candidates did not all get their turn within %d ms of the restart",
                     3 * WAIT_MS);
        for (int i = 0; i < nlive; i++) {
            int64_t epoch = -1;
            int rc = k8slease_elector_wait_elected(live[i]->e, 50, &epoch);

            if (rc == K8SLEASE_ETIMEOUT)
                continue;
            if (rc == 0 && k8slease_elector_is_leader(live[i]->e)) {
                for (int j = 0; j < nlive; j++)
                    if (j != i && k8slease_elector_is_leader(live[j]->e))
                        fail_msg("%s and %s both lead", live[i]->id, live[j]->id);
                print_message("after the restart: %s leads, epoch %" PRId64 "\n", live[i]->id,
                              epoch);
                if (live[i] == first) {
                    assert_int_equal(epoch, ea); /* its term survived the restart */
                } else {
                    assert_true(epoch > prev_epoch);
                    prev_epoch = epoch;
                }
                assert_int_equal(k8slease_elector_stop(live[i]->e, 1), 0);
            } else {
                /* a's term ended in the restart (lease deadline passed). */
                print_message("after the restart: %s's election is over (%s)\n", live[i]->id,
                              rc == 0 ? "term lost" : k8slease_strerror(rc));
                assert_true(live[i] == first);
            }
            assert_int_equal(k8slease_elector_wait_lost(live[i]->e, WAIT_MS), 0);
            live[i] = live[--nlive];
            break;
        }
    }
    assert_int_equal(cand_started(fx, c), 1);
    assert_never_two_leaders(fx);
    fx->passed = 1;
}

/* ------------------------------------------------------------------------ */
/* 7. TLS with client certificates                                          */
/* ------------------------------------------------------------------------ */

static void tls_client_certificates(void **state)
{
    struct fx *fx = *state;
    eh_options eo = {.tls = 1};
    eh_etcd *e = start_etcd(fx, &eo);
    k8slease_client *good = etcd_client(fx, e, "tls"), *bad;
    k8slease_client_options o;
    k8slease_holder *h = NULL;
    struct cand *a, *x;
    char port[16], *out = NULL;
    int64_t ea;
    int rc;

    snprintf(port, sizeof(port), "%d", eh_port(e));
    a = cand_start(fx, good, "etcd-tls", "tls-a:1");
    ea = elected(a);
    assert_true(ea > 0);
    h = holder(good, "etcd-tls");
    assert_string_equal(h->identity, "tls-a:1");
    k8slease_holder_free(h);
    assert_int_equal(
        eh_etcdctl(e, &out, "get", "--prefix", "etcd-tls/", "--print-value-only", NULL), 0);
    assert_string_equal(out, "tls-a:1\n");
    free(out);

    /* The wrong CA: the server's certificate does not verify. */
    o = etcd_opts(e);
    o.etcd_ca_file = eh_other_ca_file(e);
    bad = client_new(fx, &o, "wrong-ca");
    h = NULL;
    rc = k8slease_holder_get(bad, NULL, "etcd-tls", 5000, &h);
    print_message("wrong CA: %s: %s\n", k8slease_strerror(rc), k8slease_error_last());
    assert_int_equal(rc, K8SLEASE_ETLS);
    assert_null(h);
    assert_non_null(strstr(k8slease_error_last(), port));
    /* An election over it never leads (and never sees a leader). */
    x = cand_start(fx, bad, "etcd-tls", "wrong-ca:1");
    assert_int_not_equal(k8slease_elector_wait_elected(x->e, 4 * RP_MS, NULL), 0);
    assert_false(k8slease_elector_is_leader(x->e));
    assert_int_equal(cand_started(fx, x), 0);
    {
        char seen[128];

        pthread_mutex_lock(&fx->g.mu);
        snprintf(seen, sizeof(seen), "%s", x->leader);
        pthread_mutex_unlock(&fx->g.mu);
        assert_string_equal(seen, "");
    }

    /* No client certificate: etcd refuses the handshake. */
    o = etcd_opts(e);
    o.etcd_cert_file = NULL;
    o.etcd_key_file = NULL;
    bad = client_new(fx, &o, "no-cert");
    rc = k8slease_holder_get(bad, NULL, "etcd-tls", 5000, &h);
    print_message("no client certificate: %s: %s\n", k8slease_strerror(rc), k8slease_error_last());
    assert_true(rc == K8SLEASE_ETLS || rc == K8SLEASE_ETRANSPORT);
    assert_null(h);
    assert_non_null(strstr(k8slease_error_last(), port));

    /* The good client still works, the leader still leads. */
    assert_true(k8slease_elector_is_leader(a->e));
    h = holder(good, "etcd-tls");
    assert_int_equal(h->epoch, ea);
    k8slease_holder_free(h);
    fx->passed = 1;
}

/* ------------------------------------------------------------------------ */
/* 8. etcd authentication                                                   */
/* ------------------------------------------------------------------------ */

static void auth_user_password(void **state)
{
    struct fx *fx = *state;
    eh_options eo = {.auth_token_ttl_s = 1};
    eh_etcd *e = start_etcd(fx, &eo);
    k8slease_client_options o = etcd_opts(e);
    k8slease_client *ok, *bad, *none;
    k8slease_holder *h = NULL;
    struct cand *a, *b, *x;
    int64_t ea, eb, until;
    int rc;

    assert_int_equal(eh_enable_auth(e, "rootpw"), 0);
    o.etcd_username = "root";
    o.etcd_password = "rootpw";
    ok = client_new(fx, &o, "auth");
    a = cand_start(fx, ok, "etcd-auth", "auth-a:1");
    ea = elected(a);
    h = holder(ok, "etcd-auth");
    assert_string_equal(h->identity, "auth-a:1");
    assert_int_equal(h->epoch, ea);
    k8slease_holder_free(h);
    wait_key(e, "etcd-auth", "auth-a:1", NULL, 0);

    /* Wrong password: refused, synchronously, and the message says why. */
    o.etcd_password = "wrong";
    bad = client_new(fx, &o, "wrong-password");
    h = NULL;
    rc = k8slease_holder_get(bad, NULL, "etcd-auth", 5000, &h);
    print_message("wrong password: %s: %s\n", k8slease_strerror(rc), k8slease_error_last());
    assert_int_equal(rc, K8SLEASE_EAUTH);
    assert_null(h);
    assert_non_null(strcasestr(k8slease_error_last(), "authenticat"));
    x = cand_start(fx, bad, "etcd-auth", "wrong:1");
    assert_int_not_equal(k8slease_elector_wait_elected(x->e, 4 * RP_MS, NULL), 0);
    assert_false(k8slease_elector_is_leader(x->e));
    assert_int_equal(cand_started(fx, x), 0);

    /* No credentials at all against an etcd with auth: refused too. */
    o.etcd_username = NULL;
    o.etcd_password = NULL;
    none = client_new(fx, &o, "no-user");
    rc = k8slease_holder_get(none, NULL, "etcd-auth", 5000, &h);
    print_message("no user: %s: %s\n", k8slease_strerror(rc), k8slease_error_last());
    assert_true(rc < 0);
    assert_null(h);

    /* A follower whose token expires while it waits (--auth-token-ttl 1)
     * gets a new one when it needs it: it takes over after the release. */
    b = cand_start(fx, ok, "etcd-auth", "auth-b:1");
    wait_key(e, "etcd-auth", "auth-b:1", NULL, 0);
    until = e2e_mono_ms() + 2500; /* > 2 token TTLs: b's token is gone */
    while (e2e_mono_ms() < until) {
        assert_false(k8slease_elector_is_leader(b->e));
        assert_true(k8slease_elector_is_leader(a->e));
        e2e_pause_ms(50);
    }
    assert_int_equal(k8slease_elector_stop(a->e, 1), 0);
    eb = elected(b);
    assert_true(eb > ea);
    h = holder(ok, "etcd-auth");
    assert_string_equal(h->identity, "auth-b:1");
    k8slease_holder_free(h);
    fx->passed = 1;
}

/* ------------------------------------------------------------------------ */
/* 9. Endpoints tried in turn                                               */
/* ------------------------------------------------------------------------ */

/* holder() fails the test on ENOTFOUND; this one expects it. */
static void expect_no_holder(k8slease_client *c, const char *name)
{
    k8slease_holder *h = NULL;
    int rc = k8slease_holder_get(c, NULL, name, 0, &h);

    if (rc != K8SLEASE_ENOTFOUND)
        fail_msg("holder_get(%s) with no candidate: %s (%s), expected K8SLEASE_ENOTFOUND", name,
                 k8slease_strerror(rc), k8slease_error_last());
    assert_null(h);
}

static void endpoints_dead_first(void **state)
{
    struct fx *fx = *state;
    k8slease_client_options o = etcd_opts(shared);
    k8slease_client *client;
    k8slease_holder *h;
    struct cand *a;
    char endpoints[256], dead[64];
    int64_t ea;

    snprintf(dead, sizeof(dead), "http://127.0.0.1:%d", eh_free_port());
    snprintf(endpoints, sizeof(endpoints), "%s,%s", dead, eh_endpoint(shared));
    o.etcd_endpoints = endpoints;
    client = client_new(fx, &o, "ep");
    assert_string_equal(k8slease_client_server(client), dead);
    expect_no_holder(client, "etcd-endpoints");
    a = cand_start(fx, client, "etcd-endpoints", "ep:1");
    ea = elected(a);
    h = holder(client, "etcd-endpoints");
    assert_string_equal(h->identity, "ep:1");
    assert_int_equal(h->epoch, ea);
    k8slease_holder_free(h);
    wait_key(shared, "etcd-endpoints", "ep:1", NULL, 0);
    assert_int_equal(k8slease_elector_stop(a->e, 1), 0);
    assert_int_equal(kv_list(shared, "etcd-endpoints", (struct kv[1]){0}, 1), 0);
    fx->passed = 1;
}

/* ------------------------------------------------------------------------ */
/* 10. Kubernetes and etcd in one process                                   */
/* ------------------------------------------------------------------------ */

static void k8s_and_etcd_together(void **state)
{
    struct fx *fx = *state;
    k8slease_client *ec = etcd_client(fx, shared, "etcd");
    k8slease_elector_options o;
    k8slease_elector *ke = NULL;
    k8slease_holder *h;
    struct cand *a, *k;
    int64_t ea, ek = -1;

    if (e2e_setup(&fx->k8s) != 0)
        fail_msg("cannot start k8slease-testserver / its client");
    fx->k8s_started = 1;
    assert_int_equal(k8slease_client_backend(fx->k8s), K8SLEASE_BACKEND_K8S);
    assert_int_equal(k8slease_client_backend(ec), K8SLEASE_BACKEND_ETCD);

    k = cand_new(fx, "k8s-side:1");
    o = cand_opts(k, "etcd-mixed");
    assert_int_equal(k8slease_elector_start(&ke, fx->k8s, &o), 0);
    pthread_mutex_lock(&fx->g.mu);
    k->e = ke;
    pthread_mutex_unlock(&fx->g.mu);
    a = cand_start(fx, ec, "etcd-mixed", "etcd-side:1");
    ea = elected(a);
    assert_int_equal(k8slease_elector_wait_elected(k->e, WAIT_MS, &ek), 0);
    /* Both lead at the same time: different elections in different stores. */
    assert_true(k8slease_elector_is_leader(a->e));
    assert_true(k8slease_elector_is_leader(k->e));
    assert_true(ea > 0);
    assert_true(ek >= 0);

    h = holder(ec, "etcd-mixed");
    assert_string_equal(h->identity, "etcd-side:1");
    assert_int_equal(h->epoch, ea);
    k8slease_holder_free(h);
    h = holder(fx->k8s, "etcd-mixed");
    assert_string_equal(h->identity, "k8s-side:1");
    assert_int_equal(h->epoch, ek);
    k8slease_holder_free(h);

    assert_int_equal(k8slease_elector_stop(a->e, 1), 0);
    assert_int_equal(k8slease_elector_stop(k->e, 1), 0);
    assert_int_equal(k8slease_elector_wait_lost(a->e, 0), 0);
    assert_int_equal(k8slease_elector_wait_lost(k->e, 0), 0);
    wait_stopped(fx, a, 0);
    wait_stopped(fx, k, 0);
    expect_no_holder(ec, "etcd-mixed");
    h = holder(fx->k8s, "etcd-mixed");
    assert_string_equal(h->identity, "");
    k8slease_holder_free(h);
    cand_free(fx, a);
    cand_free(fx, k);
    /* Both clients shut down cleanly, and so does the test server. */
    k8slease_client_free(ec);
    fx->clients[--fx->nclients] = NULL;
    fx->k8s_started = 0;
    assert_int_equal(e2e_teardown(fx->k8s), 0);
    fx->k8s = NULL;
    fx->passed = 1;
}

/* ------------------------------------------------------------------------ */
/* 11. Options and calls that make no sense with etcd                       */
/* ------------------------------------------------------------------------ */

static void expect_client_einval(k8slease_client_options *o, const char *what, const char *needle)
{
    k8slease_client *c = (k8slease_client *)1;
    int rc = k8slease_client_new(&c, o);

    if (rc != K8SLEASE_EINVAL) {
        if (rc == 0)
            k8slease_client_free(c);
        fail_msg("%s: client_new = %s (%s), expected K8SLEASE_EINVAL", what, k8slease_strerror(rc),
                 k8slease_error_last());
    }
    print_message("%s: %s\n", what, k8slease_error_last());
    if (needle && !strstr(k8slease_error_last(), needle))
        fail_msg("%s: message \"%s\" does not name %s", what, k8slease_error_last(), needle);
}

static void bad_options(void **state)
{
    struct fx *fx = *state;
    k8slease_client_options o = K8SLEASE_CLIENT_OPTIONS_INIT;
    k8slease_client *client, *kc = NULL;
    k8slease_elector_options eo = K8SLEASE_ELECTOR_OPTIONS_INIT;
    k8slease_elector *e = NULL;
    k8slease_watch *w = NULL;
    k8slease_holder *h = NULL;
    char kubeconfig[] = "/tmp/k8slease-etcd-kc-XXXXXX", long_name[402];
    struct cand *l;
    FILE *f;
    int fd;

    /* Client options. */
    o.backend = K8SLEASE_BACKEND_ETCD;
    expect_client_einval(&o, "etcd without endpoints", "etcd_endpoints");
    o.etcd_endpoints = "";
    expect_client_einval(&o, "etcd with empty endpoints", "etcd_endpoints");
    o.etcd_endpoints = "http://127.0.0.1:2379,https://127.0.0.1:2380";
    expect_client_einval(&o, "mixed http/https endpoints", NULL);
    o.etcd_endpoints = "ftp://127.0.0.1:2379";
    expect_client_einval(&o, "an endpoint that is not http(s)", NULL);

    /* etcd fields with the Kubernetes backend (a valid kubeconfig, so the
     * only thing wrong is etcd_endpoints). */
    fd = mkstemp(kubeconfig);
    assert_true(fd >= 0);
    f = fdopen(fd, "w");
    assert_non_null(f);
    fprintf(f,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n"
            "    server: https://127.0.0.1:1\n    certificate-authority: %s/tls/ca.crt\n"
            "users:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: x\n"
            "  context: {cluster: c, user: u}\ncurrent-context: x\n",
            K8SLEASE_TEST_DATA);
    fclose(f);
    o = (k8slease_client_options)K8SLEASE_CLIENT_OPTIONS_INIT;
    o.kubeconfig = kubeconfig;
    if (k8slease_client_new(&kc, &o) != 0) {
        unlink(kubeconfig);
        fail_msg("control: the kubeconfig is refused: %s", k8slease_error_last());
    }
    k8slease_client_free(kc);
    o.etcd_endpoints = eh_endpoint(shared);
    kc = NULL;
    {
        int rc = k8slease_client_new(&kc, &o);

        unlink(kubeconfig);
        if (rc == 0)
            k8slease_client_free(kc);
        if (rc != K8SLEASE_EINVAL || !strstr(k8slease_error_last(), "etcd_"))
            fail_msg("etcd_endpoints with the Kubernetes backend: %s (%s), expected "
                     "K8SLEASE_EINVAL naming the etcd_* options",
                     k8slease_strerror(rc), k8slease_error_last());
    }

    /* Calls on an etcd client. */
    client = etcd_client(fx, shared, "bad");
    eo.name = "etcd-bad";
    eo.identity = "x:1";
    eo.ns = "default";
    assert_int_equal(k8slease_elector_start(&e, client, &eo), K8SLEASE_EINVAL);
    assert_null(e);
    print_message("ns with etcd: %s\n", k8slease_error_last());
    eo.ns = NULL;
    eo.identity = "";
    assert_int_equal(k8slease_elector_start(&e, client, &eo), K8SLEASE_EINVAL);
    assert_non_null(strstr(k8slease_error_last(), "identity"));
    eo.identity = "x:1";
    eo.lease_duration_ms = 1000;
    eo.renew_deadline_ms = 2000;
    assert_int_equal(k8slease_elector_start(&e, client, &eo), K8SLEASE_EINVAL);
    assert_non_null(strstr(k8slease_error_last(), "lease_duration"));
    /* Valid for client-go, but etcd's TTL is whole seconds, at least 1. */
    eo.lease_duration_ms = 900;
    eo.renew_deadline_ms = 600;
    eo.retry_period_ms = 300;
    assert_int_equal(k8slease_elector_start(&e, client, &eo), K8SLEASE_EINVAL);
    print_message("lease_duration 900 ms with etcd: %s\n", k8slease_error_last());
    eo.lease_duration_ms = 0;
    eo.renew_deadline_ms = 0;
    eo.retry_period_ms = 0;
    memset(long_name, 'n', 401);
    long_name[401] = '\0';
    eo.name = long_name;
    assert_int_equal(k8slease_elector_start(&e, client, &eo), K8SLEASE_EINVAL);
    assert_null(e);
    eo.name = "";
    assert_int_equal(k8slease_elector_start(&e, client, &eo), K8SLEASE_EINVAL);

    assert_int_equal(k8slease_holder_get(client, "default", "etcd-bad", 0, &h), K8SLEASE_EINVAL);
    assert_null(h);
    assert_int_equal(k8slease_watch_start(&w, client, "default", "etcd-bad", NULL, NULL),
                     K8SLEASE_EINVAL);
    assert_null(w);
    assert_int_equal(k8slease_lease_release(client, "default", "etcd-bad", "x:1", 0, 0),
                     K8SLEASE_EINVAL);
    assert_int_equal(k8slease_pod_label(client, "default", "pod-0", "role", "leader"),
                     K8SLEASE_ESTATE);
    print_message("pod_label on etcd: %s\n", k8slease_error_last());
    expect_no_holder(client, "etcd-bad");
    assert_non_null(strstr(k8slease_error_last(), "etcd-bad"));
    assert_int_equal(k8slease_lease_release(client, NULL, "etcd-bad", "x:1", 0, 0), 0);

    /* Names are not DNS names with etcd: 400 bytes, spaces, capitals. */
    long_name[400] = '\0';
    l = cand_start(fx, client, long_name, "long:1");
    elected(l);
    h = holder(client, long_name);
    assert_string_equal(h->identity, "long:1");
    k8slease_holder_free(h);
    l = cand_start(fx, client, "Not A_DNS name", "odd:1");
    elected(l);
    wait_key(shared, "Not A_DNS name", "odd:1", NULL, 0);
    fx->passed = 1;
}

/* ------------------------------------------------------------------------ */
/* 12. Watch                                                                */
/* ------------------------------------------------------------------------ */

struct watch_log {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n;
    char ids[32][64];
    int64_t epochs[32];
};

static void on_watch(const char *id, int64_t epoch, void *ud)
{
    struct watch_log *l = ud;

    pthread_mutex_lock(&l->mu);
    if (l->n < 32) {
        snprintf(l->ids[l->n], sizeof(l->ids[0]), "%s", id);
        l->epochs[l->n] = epoch;
        l->n++;
    }
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

/* Wait until the watch reported (id, epoch) (epoch 0: any) at index >= from. */
static int wait_watch(struct watch_log *l, const char *id, int64_t epoch, int from)
{
    struct timespec until = mono_after(WAIT_MS);
    int found = -1;

    pthread_mutex_lock(&l->mu);
    while (found < 0) {
        for (int i = from; i < l->n && found < 0; i++)
            if (strcmp(l->ids[i], id) == 0 && (epoch == 0 || l->epochs[i] == epoch))
                found = i;
        if (found < 0 && pthread_cond_timedwait(&l->cv, &l->mu, &until) != 0)
            break;
    }
    pthread_mutex_unlock(&l->mu);
    if (found < 0)
        fail_msg("watch did not report (\"%s\", %" PRId64 ") within %d ms", id, epoch, WAIT_MS);
    return found;
}

/* A holder watch of election name on client, reporting to fx->wlog (one
 * per test); freed by the teardown. */
static struct watch_log *watch_start(struct fx *fx, k8slease_client *client, const char *name)
{
    struct watch_log *l = calloc(1, sizeof(*l));
    pthread_condattr_t ca;
    k8slease_watch *w = NULL;

    assert_non_null(l);
    assert_null(fx->wlog);
    fx->wlog = l;
    pthread_mutex_init(&l->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&l->cv, &ca);
    pthread_condattr_destroy(&ca);
    assert_int_equal(k8slease_watch_start(&w, client, NULL, name, on_watch, l), 0);
    fx->watches[fx->nwatches++] = w;
    return l;
}

static void watch_reports_leaders(void **state)
{
    struct fx *fx = *state;
    k8slease_client *client = etcd_client(fx, shared, "w");
    struct watch_log *l = watch_start(fx, client, "etcd-watch");
    struct cand *a, *b;
    int64_t ea, eb;
    int i0, ia, ib, iz, n, twice = -1, early = -1;

    i0 = wait_watch(l, "", -1, 0);
    assert_int_equal(i0, 0);

    a = cand_start(fx, client, "etcd-watch", "wa:1");
    ea = elected(a);
    ia = wait_watch(l, "wa:1", ea, i0 + 1);
    b = cand_start(fx, client, "etcd-watch", "wb:1");
    wait_key(shared, "etcd-watch", "wb:1", NULL, 0);
    assert_int_equal(k8slease_elector_stop(a->e, 1), 0);
    eb = elected(b);
    assert_true(eb > ea);
    ib = wait_watch(l, "wb:1", eb, ia + 1);
    assert_int_equal(k8slease_elector_stop(b->e, 1), 0);
    iz = wait_watch(l, "", -1, ib + 1);

    /* Only changes are reported; b queueing behind a was not one, and the
     * handover went straight from a to b (b's key existed throughout). */
    pthread_mutex_lock(&l->mu);
    n = l->n;
    for (int i = 1; i < n; i++)
        if (twice < 0 && strcmp(l->ids[i], l->ids[i - 1]) == 0 && l->epochs[i] == l->epochs[i - 1])
            twice = i;
    for (int i = ia + 1; i < ib; i++)
        if (early < 0)
            early = i;
    pthread_mutex_unlock(&l->mu);
    if (twice >= 0)
        fail_msg("watch reported (\"%s\", %" PRId64 ") twice in a row", l->ids[twice],
                 l->epochs[twice]);
    if (early >= 0)
        fail_msg("watch reported (\"%s\", %" PRId64 ") between wa:1 and wb:1", l->ids[early],
                 l->epochs[early]);
    assert_int_equal(ia, i0 + 1);
    assert_int_equal(iz, ib + 1);
    fx->passed = 1;
}

/* ------------------------------------------------------------------------ */
/* 13. Operator release, and a key deleted by someone else                  */
/* ------------------------------------------------------------------------ */

static void operator_release(void **state)
{
    struct fx *fx = *state;
    k8slease_client *ca = etcd_client(fx, shared, "ra"), *cb = etcd_client(fx, shared, "rb");
    struct cand *a, *b;
    int64_t ea, eb;
    int rc;

    monitor_start(fx);
    a = cand_start(fx, ca, "etcd-release", "rel-a:1");
    ea = elected(a);
    b = cand_start(fx, cb, "etcd-release", "rel-b:1");
    wait_key(shared, "etcd-release", "rel-b:1", NULL, 0);
    /* Someone else's identity: refused unless forced. */
    rc = k8slease_lease_release(cb, NULL, "etcd-release", "rel-b:1", 0, 0);
    assert_int_equal(rc, K8SLEASE_ECONFLICT);
    assert_true(k8slease_elector_is_leader(a->e));
    /* The leader's identity: its lease is revoked, its term ends, b leads. */
    assert_int_equal(k8slease_lease_release(cb, NULL, "etcd-release", "rel-a:1", 0, 0), 0);
    wait_stopped(fx, a, WAIT_MS);
    assert_int_equal(k8slease_elector_wait_lost(a->e, WAIT_MS), 0);
    eb = elected(b);
    assert_true(eb > ea);
    /* Forced, any identity. */
    assert_int_equal(k8slease_lease_release(ca, NULL, "etcd-release", "someone-else", 1, 0), 0);
    wait_stopped(fx, b, WAIT_MS);
    expect_no_holder(ca, "etcd-release");
    assert_overlap_below(fx, 2000);
    fx->passed = 1;
}

static void key_deleted_under_leader(void **state)
{
    struct fx *fx = *state;
    k8slease_client *client = etcd_client(fx, shared, "del");
    struct cand *a, *b;
    char key[512], want[256];
    int64_t ea, eb;

    monitor_start(fx);
    a = cand_start(fx, client, "etcd-delete", "del-a:1");
    ea = elected(a);
    wait_key(shared, "etcd-delete", "del-a:1", key, sizeof(key));
    b = cand_start(fx, client, "etcd-delete", "del-b:1");
    wait_key(shared, "etcd-delete", "del-b:1", NULL, 0);
    assert_int_equal(eh_etcdctl(shared, NULL, "del", key, NULL), 0);
    /* The leader notices that its key is gone: its term is over, and it
     * says why. */
    wait_stopped(fx, a, WAIT_MS);
    assert_int_equal(k8slease_elector_wait_lost(a->e, WAIT_MS), 0);
    assert_false(k8slease_elector_is_leader(a->e));
    snprintf(want, sizeof(want),
             "warn: etcd election etcd-delete: lost the lease (epoch %" PRId64
             "): our key was deleted",
             ea);
    wait_log("del", want, NULL);
    eb = elected(b);
    assert_true(eb > ea);
    assert_overlap_below(fx, 2000);
    fx->passed = 1;
}

/* ------------------------------------------------------------------------ */
/* 14. A 3-member cluster: one member hung, killed, restarted               */
/* ------------------------------------------------------------------------ */

enum cl_fault { CL_HANG, CL_KILL, CL_RESTART };

struct cl_case {
    enum cl_fault fault;
    int raft_leader;    /* 1: the faulty member is the raft leader; 0: a raft follower */
    int64_t ld, rd, rp; /* elector timings; 0: the library's defaults (15 s, 10 s, 2 s) */
};

/* What the observation of the leader during and after a fault found. */
struct cl_obs {
    int64_t t_fault;       /* mono ns */
    int64_t renew_start;   /* start of the first successful keepalive after t_fault, 0: none */
    int64_t renew_seen;    /* when we saw it (at most 10 ms after its answer) */
    int64_t min_margin_ns; /* the least (leader deadline - now) seen */
};

/* For ms: a leads with epoch ea throughout (is_leader, same epoch, no
 * on_stopped_leading), b never leads; records the first successful
 * keepalive of a after o->t_fault and the least margin to a's deadline. */
static void cl_observe(struct fx *fx, struct cand *a, struct cand *b, int64_t ea, int64_t ms,
                       struct cl_obs *o, const char *phase)
{
    int64_t until = mono_ns() + ms * 1000000;

    for (;;) {
        k8slease_elector_stats st = {.version = K8SLEASE_ELECTOR_STATS_VERSION};
        int64_t now = mono_ns(), d = k8slease_elector_leader_deadline(a->e);
        int stopped, b_started;

        if (!k8slease_elector_is_leader(a->e) || d == 0)
            fail_msg("%s: the leader lost its term %.0f ms after the fault (%s)", a->id,
                     (now - o->t_fault) / 1e6, phase);
        if (d - now < o->min_margin_ns)
            o->min_margin_ns = d - now;
        assert_int_equal(k8slease_elector_epoch(a->e), ea);
        if (k8slease_elector_is_leader(b->e))
            fail_msg("%s: the follower leads %.0f ms after the fault (%s)", b->id,
                     (now - o->t_fault) / 1e6, phase);
        pthread_mutex_lock(&fx->g.mu);
        stopped = a->stopped;
        b_started = b->started;
        pthread_mutex_unlock(&fx->g.mu);
        assert_int_equal(stopped, 0);
        assert_int_equal(b_started, 0);
        assert_int_equal(k8slease_elector_stats_get(a->e, &st), 0);
        if (!o->renew_start && st.last_renew_ns > o->t_fault) {
            o->renew_start = st.last_renew_ns;
            o->renew_seen = now;
        }
        if (now >= until)
            return;
        e2e_pause_ms(10);
    }
}

/* Return CL_PHASE_MS before a's next keepalive is due: wait for one to
 * succeed, then for the rest of the keepalive interval (TTL/3). */
#define CL_PHASE_MS 30
static void cl_sync_to_keepalive(struct cand *a, int64_t ld)
{
    k8slease_elector_stats st = {.version = K8SLEASE_ELECTOR_STATS_VERSION};
    int64_t last, until = e2e_mono_ms() + ld;

    assert_int_equal(k8slease_elector_stats_get(a->e, &st), 0);
    last = st.last_renew_ns;
    while (st.last_renew_ns == last) {
        if (e2e_mono_ms() > until)
            fail_msg("%s: no keepalive within a TTL", a->id);
        e2e_pause_ms(1);
        assert_int_equal(k8slease_elector_stats_get(a->e, &st), 0);
    }
    /* last_renew_ns is when it was sent; the next is sent TTL/3 after its
     * answer, a few ms later. */
    while (mono_ns() < st.last_renew_ns + (ld / 3 - CL_PHASE_MS) * 1000000)
        e2e_pause_ms(1);
}

static void skip_test(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Print why, then skip (cmocka's skip() takes no message). */
static void skip_test(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    skip();
}

struct cl_restart {
    eh_etcd *member;
    int rc;
    atomic_int done;
};

static void *cl_restart_main(void *arg)
{
    struct cl_restart *r = arg;

    r->rc = eh_shutdown(r->member);
    atomic_store(&r->done, 1);
    return NULL;
}

static void cluster_fault(struct fx *fx, const struct cl_case *cc)
{
    static const char *const fault_name[] = {"hung (SIGSTOP)", "killed (SIGKILL)",
                                             "restarted (SIGTERM, start)"};
    k8slease_client_options o;
    k8slease_elector_options eo;
    k8slease_elector_stats st0 = {.version = K8SLEASE_ELECTOR_STATS_VERSION},
                           st1 = {.version = K8SLEASE_ELECTOR_STATS_VERSION};
    k8slease_client *ca, *cb;
    struct cand *a, *b;
    struct cl_obs obs = {.min_margin_ns = INT64_MAX};
    eh_etcd *victim;
    char eps_a[512], eps_b[512];
    int64_t ea, eb, ld, hold_ms, t0;
    int v, raft, n, len_a, len_b, maj = 0, min = 0, pat = 0;

    if (eh_cluster_start(&fx->cluster, 3) != 0)
        fail_msg("cannot start a 3-member etcd cluster (see above)");
    n = eh_cluster_size(fx->cluster);
    raft = eh_cluster_raft_leader(fx->cluster, WAIT_MS);
    assert_true(raft >= 0);
    v = cc->raft_leader ? raft : (raft + 1) % n;
    victim = eh_cluster_member(fx->cluster, v);
    /* The leader's client tries the victim first, the follower's last. */
    len_a = snprintf(eps_a, sizeof(eps_a), "%s", eh_endpoint(victim));
    len_b = 0;
    for (int i = 1; i < n; i++) {
        const char *ep = eh_endpoint(eh_cluster_member(fx->cluster, (v + i) % n));

        len_a += snprintf(eps_a + len_a, sizeof(eps_a) - (size_t)len_a, ",%s", ep);
        len_b += snprintf(eps_b + len_b, sizeof(eps_b) - (size_t)len_b, "%s,", ep);
    }
    snprintf(eps_b + len_b, sizeof(eps_b) - (size_t)len_b, "%s", eh_endpoint(victim));
    ld = cc->ld ? cc->ld : 15000;
    assert_int_equal(eh_version(victim, &maj, &min, &pat), 0);
    print_message("etcd %d.%d.%d, 3 members, m%d (%s) to be %s; leader's endpoints %s; "
                  "timings %s\n",
                  maj, min, pat, v, cc->raft_leader ? "the raft leader" : "a raft follower",
                  fault_name[cc->fault], eps_a, cc->ld ? "of the suite" : "the library's defaults");

    o = etcd_opts(victim);
    o.etcd_endpoints = eps_a;
    ca = client_new(fx, &o, "cl-a");
    o.etcd_endpoints = eps_b;
    cb = client_new(fx, &o, "cl-b");

    monitor_start(fx);
    a = cand_new(fx, "cl-a:1");
    eo = cand_opts(a, "etcd-cluster");
    eo.lease_duration_ms = cc->ld;
    eo.renew_deadline_ms = cc->rd;
    eo.retry_period_ms = cc->rp;
    {
        k8slease_elector *e = NULL;

        assert_int_equal(k8slease_elector_start(&e, ca, &eo), 0);
        pthread_mutex_lock(&fx->g.mu);
        a->e = e;
        pthread_mutex_unlock(&fx->g.mu);
    }
    ea = elected(a);
    b = cand_new(fx, "cl-b:1");
    eo = cand_opts(b, "etcd-cluster");
    eo.lease_duration_ms = cc->ld;
    eo.renew_deadline_ms = cc->rd;
    eo.retry_period_ms = cc->rp;
    {
        k8slease_elector *e = NULL;

        assert_int_equal(k8slease_elector_start(&e, cb, &eo), 0);
        pthread_mutex_lock(&fx->g.mu);
        b->e = e;
        pthread_mutex_unlock(&fx->g.mu);
    }
    wait_key(eh_cluster_member(fx->cluster, (v + 1) % n), "etcd-cluster", "cl-b:1", NULL, 0);
    assert_int_equal(wait_new_leader(fx, b, "cl-a:1"), ea);
    /* A keepalive or two on the victim: the leader's client is on it. */
    obs.t_fault = mono_ns();
    cl_observe(fx, a, b, ea, ld / 3 + 500, &obs, "before the fault");
    assert_true(obs.renew_start > 0);
    if (log_has("cl-a", "; trying "))
        fail_msg("the leader's client left %s before the fault", eh_endpoint(victim));

    /* The fault, held for 3 TTLs, just before a keepalive is due (the
     * worst moment: that keepalive goes to the faulty member, and the last
     * successful one was a whole keepalive interval before). */
    cl_sync_to_keepalive(a, ld);
    assert_int_equal(k8slease_elector_stats_get(a->e, &st0), 0);
    obs = (struct cl_obs){.min_margin_ns = INT64_MAX};
    hold_ms = 3 * ld;
    switch (cc->fault) {
    case CL_HANG:
        assert_int_equal(eh_pause(victim), 0);
        obs.t_fault = mono_ns();
        cl_observe(fx, a, b, ea, hold_ms, &obs, "member hung");
        assert_int_equal(eh_resume(victim), 0);
        break;
    case CL_KILL:
        assert_int_equal(eh_kill(victim), 0);
        obs.t_fault = mono_ns();
        cl_observe(fx, a, b, ea, hold_ms, &obs, "member down");
        t0 = e2e_mono_ms();
        assert_int_equal(eh_relaunch(victim), 0);
        print_message("m%d started again, healthy after %" PRId64 " ms\n", v, e2e_mono_ms() - t0);
        break;
    case CL_RESTART: {
        /* Watched while it shuts down (on a thread: 0.1 s with etcd 3.4,
         * up to 8 s with 3.5); started again from this thread, which
         * outlives it (see eh_shutdown). */
        struct cl_restart r = {victim, -1, 0};
        pthread_t th;

        obs.t_fault = mono_ns();
        assert_int_equal(pthread_create(&th, NULL, cl_restart_main, &r), 0);
        while (!atomic_load(&r.done))
            cl_observe(fx, a, b, ea, 50, &obs, "member shutting down");
        assert_int_equal(pthread_join(th, NULL), 0);
        assert_int_equal(r.rc, 0);
        assert_int_equal(eh_relaunch(victim), 0);
        print_message("m%d restarted, healthy after %.0f ms\n", v, (mono_ns() - obs.t_fault) / 1e6);
        break;
    }
    }
    /* And after it, while the member catches up. */
    cl_observe(fx, a, b, ea, cc->fault == CL_RESTART ? hold_ms : ld, &obs, "after the fault");
    assert_int_equal(eh_cluster_wait_healthy(fx->cluster, WAIT_MS), 0);
    assert_int_equal(k8slease_elector_stats_get(a->e, &st1), 0);
    if (!obs.renew_start)
        fail_msg("no successful keepalive after the fault");
    print_message("m%d %s: term kept (epoch %" PRId64 "); first successful keepalive after the "
                  "fault started %.0f ms after it, answered within %.0f ms of it; least margin to "
                  "the leader deadline %.0f ms (TTL %" PRId64 " ms); %" PRIu64
                  " transport errors; leader's client moved on: %s\n",
                  v, fault_name[cc->fault], ea, (obs.renew_start - obs.t_fault) / 1e6,
                  (obs.renew_seen - obs.t_fault) / 1e6, obs.min_margin_ns / 1e6, ld,
                  st1.transport_errors - st0.transport_errors,
                  log_has("cl-a", "; trying ") ? "yes" : "no");

    /* The election still works: a graceful handover to the follower. */
    assert_int_equal(cand_started(fx, a), 1);
    assert_int_equal(k8slease_elector_stop(a->e, 1), 0);
    wait_stopped(fx, a, 0);
    eb = elected(b);
    assert_true(eb > ea);
    assert_int_equal(cand_started(fx, b), 1);
    assert_never_two_leaders(fx);
    fx->passed = 1;
}

static void cluster_follower_hung(void **state)
{
    struct cl_case cc = {CL_HANG, 0, LD_MS, RD_MS, RP_MS};

    cluster_fault(*state, &cc);
}

/* The raft leader hung for 3 TTLs: not run by default (both fail, neither
 * is the library's fault; docs/etcd.md "A 3-member cluster" has the
 * details). K8SLEASE_TEST_ETCD_HUNG_RAFT_LEADER=1 runs them.
 *
 * 1. etcd revokes the leases when the hung raft leader comes back
 *    (etcd-io/etcd#15247): its lessor, still primary, finds every lease
 *    expired and proposes their revocation, which is forwarded to the new
 *    raft leader and committed, although the leases were kept alive there.
 *    etcd 3.4.23 has no fix; 3.5.30 has one (#16822, ensureLeadership),
 *    which SIGSTOP gets around: ensureLeadership trusts a member whose raft
 *    loop ticked within 3 heartbeats (isActive), and after SIGCONT the
 *    ticker runs at once. The leader's key is deleted: its term ends, the
 *    follower leads with a greater epoch, never two leaders. With 3.5.30
 *    and the default timings (45 s) 2 runs of 2; with TTL 3 s about 1 in
 *    20 with 3.4.23.
 * 2. With the suite's TTL of 3 s, also about 1 run in 10: the keepalive
 *    due when the raft leader hangs times out after 1 s on it; the next
 *    goes 300 ms later (retry_period) to another member, which may still
 *    forward keepalives to the hung raft leader (its election timeout, 1 to
 *    2 s, has not run out): that one times out too, 2.3 s after the fault,
 *    and the leader deadline (last keepalive + 3 s) was 2 s after it. */
static void skip_unless_hung_raft_leader(void **state)
{
    const char *on = getenv("K8SLEASE_TEST_ETCD_HUNG_RAFT_LEADER");

    if (!on || strcmp(on, "1") != 0) {
        ((struct fx *)*state)->passed = 1;
        skip_test("the raft leader hung for 3 TTLs: etcd revokes the leases when it comes back "
                  "(etcd-io/etcd#15247; 3.5.30's fix does not cover SIGSTOP), and a TTL of 3 s "
                  "is too short for etcd's raft failover; see docs/etcd.md; "
                  "K8SLEASE_TEST_ETCD_HUNG_RAFT_LEADER=1 runs it");
    }
}

static void cluster_raft_leader_hung(void **state)
{
    struct cl_case cc = {CL_HANG, 1, LD_MS, RD_MS, RP_MS};

    skip_unless_hung_raft_leader(state);
    cluster_fault(*state, &cc);
}

static void cluster_follower_killed(void **state)
{
    struct cl_case cc = {CL_KILL, 0, LD_MS, RD_MS, RP_MS};

    cluster_fault(*state, &cc);
}

/* At TTL 9 s: etcd takes 1-2 s to elect a new raft leader, and at TTL 3 s
 * a keepalive started up to TTL/3 before the fault leaves 2 s (seen lost
 * under ThreadSanitizer's slowdown); at 9 s it leaves 6 s. */
static void cluster_raft_leader_killed(void **state)
{
    struct cl_case cc = {CL_KILL, 1, 3 * LD_MS, 3 * RD_MS, 3 * RP_MS};

    cluster_fault(*state, &cc);
}

static void cluster_follower_restarted(void **state)
{
    struct cl_case cc = {CL_RESTART, 0, LD_MS, RD_MS, RP_MS};

    cluster_fault(*state, &cc);
}

/* At TTL 9 s: etcd takes 1-2 s to elect a new raft leader, and at TTL 3 s
 * a keepalive started up to TTL/3 before the fault leaves 2 s (seen lost
 * under ThreadSanitizer's slowdown); at 9 s it leaves 6 s. */
static void cluster_raft_leader_restarted(void **state)
{
    struct cl_case cc = {CL_RESTART, 1, 3 * LD_MS, 3 * RD_MS, 3 * RP_MS};

    cluster_fault(*state, &cc);
}

static void cluster_raft_leader_hung_default_timings(void **state)
{
    struct cl_case cc = {CL_HANG, 1, 0, 0, 0};

    skip_unless_hung_raft_leader(state);
    cluster_fault(*state, &cc);
}

static void cluster_follower_hung_default_timings(void **state)
{
    struct cl_case cc = {CL_HANG, 0, 0, 0, 0};

    cluster_fault(*state, &cc);
}

/* A follower whose client is on the member that hangs: its watches (the
 * predecessor's key, the leader's key) are streams on that member, and the
 * leader hands over (release) right after it hangs, before anything on the
 * follower's client has noticed. Its streams notice by themselves
 * (etcd/conn.h, kl__etcd_stream_opts_init): a stream silent for TTL/3 is
 * probed on its member, the probe gets no answer within the request
 * timeout, the client moves to another member and the stream resumes there
 * from the revision it had reached, which replays the release. So the
 * follower leads within TTL/3 + request timeout (1 s + 850 ms here) of the
 * release, plus the handover; the test allows a TTL.
 *
 * A holder watch (k8slease_watch) on a client of its own, with the hung
 * member first and nothing else to send (no keepalives to move it on),
 * reports the new leader too: only its probes can tell, with the library's
 * default timings (15 s TTL: 5 s + 4 s); the test allows 15 s. */
static void cluster_follower_on_hung_member(void **state)
{
    struct fx *fx = *state;
    k8slease_client_options o;
    k8slease_client *ca, *cb, *cw;
    struct cand *a, *b;
    struct watch_log *l;
    eh_etcd *victim, *other;
    char eps_a[512], eps_b[512];
    int64_t ea, eb = -1, t0, t_elected, t_watch, bound_b, bound_w = 15000;
    int raft, v, rc, ia;

    if (eh_cluster_start(&fx->cluster, 3) != 0)
        fail_msg("cannot start a 3-member etcd cluster (see above)");
    raft = eh_cluster_raft_leader(fx->cluster, WAIT_MS);
    assert_true(raft >= 0);
    v = (raft + 1) % 3;
    victim = eh_cluster_member(fx->cluster, v);
    other = eh_cluster_member(fx->cluster, (v + 1) % 3);
    snprintf(eps_a, sizeof(eps_a), "%s,%s", eh_endpoint(other),
             eh_endpoint(eh_cluster_member(fx->cluster, (v + 2) % 3)));
    snprintf(eps_b, sizeof(eps_b), "%s,%s,%s", eh_endpoint(victim), eh_endpoint(other),
             eh_endpoint(eh_cluster_member(fx->cluster, (v + 2) % 3)));
    o = etcd_opts(victim);
    o.etcd_endpoints = eps_a;
    ca = client_new(fx, &o, "fh-a");
    o.etcd_endpoints = eps_b;
    cb = client_new(fx, &o, "fh-b");
    cw = client_new(fx, &o, "fh-w");
    monitor_start(fx);
    a = cand_start(fx, ca, "etcd-cluster-fh", "fh-a:1");
    ea = elected(a);
    l = watch_start(fx, cw, "etcd-cluster-fh");
    ia = wait_watch(l, "fh-a:1", ea, 0);
    b = cand_start(fx, cb, "etcd-cluster-fh", "fh-b:1");
    wait_key(other, "etcd-cluster-fh", "fh-b:1", NULL, 0);
    assert_int_equal(wait_new_leader(fx, b, "fh-a:1"), ea);

    assert_int_equal(eh_pause(victim), 0);
    assert_true(k8slease_elector_is_leader(a->e));
    t0 = e2e_mono_ms();
    assert_int_equal(k8slease_elector_stop(a->e, 1), 0);
    rc = k8slease_elector_wait_elected(b->e, 3 * LD_MS, &eb);
    t_elected = e2e_mono_ms() - t0;
    print_message("follower on the hung member m%d: %s %" PRId64 " ms after the release\n", v,
                  rc == 0 ? "elected" : "still not elected", t_elected);
    if (rc != 0)
        fail_msg("the follower on the hung member did not lead within %d ms of the leader's "
                 "release (its watch streams stay on the hung member)",
                 3 * LD_MS);
    assert_true(eb > ea);
    wait_watch(l, "fh-b:1", eb, ia + 1);
    t_watch = e2e_mono_ms() - t0;
    print_message("holder watch on the hung member: reported fh-b:1 %" PRId64
                  " ms after the release\n",
                  t_watch);
    assert_int_equal(eh_resume(victim), 0);
    /* The rule's bound (TTL/3 + request timeout: (renew deadline - retry
     * period) / 2, at least 500 ms), plus a handover's worth */
    bound_b = LD_MS / 3 + ((RD_MS - RP_MS) / 2 > 500 ? (RD_MS - RP_MS) / 2 : 500) + 1000;
    if (t_elected > bound_b)
        fail_msg("the follower on the hung member led %" PRId64 " ms after the release: more "
                 "than TTL/3 + request timeout + 1 s (%" PRId64 " ms)",
                 t_elected, bound_b);
    if (t_watch > bound_w)
        fail_msg("the holder watch on the hung member reported the new leader %" PRId64
                 " ms after the release: more than %" PRId64 " ms (5 s + 4 s + 6 s)",
                 t_watch, bound_w);
    assert_true(log_has("fh-w", "a probe got no answer"));
    assert_never_two_leaders(fx);
    fx->passed = 1;
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(harness_etcd_and_etcdctl),
        T(harness_tls_and_auth),
        T(single_election),
        T(two_candidates),
        T(failover_without_release),
        T(five_candidates_in_queue_order),
        T(interop_with_etcdctl_elect),
        T(keepalive_blocked),
        T(frozen_etcd_reports_the_end_on_time),
        T(release_waits_for_wait_lost),
        T(etcd_restart),
        T(tls_client_certificates),
        T(auth_user_password),
        T(endpoints_dead_first),
        T(k8s_and_etcd_together),
        T(bad_options),
        T(watch_reports_leaders),
        T(operator_release),
        T(key_deleted_under_leader),
        T(cluster_follower_hung),
        T(cluster_raft_leader_hung),
        T(cluster_follower_killed),
        T(cluster_raft_leader_killed),
        T(cluster_follower_restarted),
        T(cluster_raft_leader_restarted),
        T(cluster_follower_on_hung_member),
        T(cluster_follower_hung_default_timings),
        T(cluster_raft_leader_hung_default_timings),
    };
#undef T
    const char *only = getenv("K8SLEASE_TEST_FILTER");

    if (only && only[0])
        cmocka_set_test_filter(only); /* e.g. K8SLEASE_TEST_FILTER=keepalive_blocked */
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
