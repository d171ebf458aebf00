/* End to end through the native API over HTTPS: against the test server
 * started by the harness, or any API server given by $K8SLEASE_TEST_KUBECONFIG. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "core/client.h"
#include "k8s/client.h"
#include "core/common.h"
#include "e2e.h"
#include "failalloc.h"
#include "k8s/holders.h"
#include "k8slease.h"
#include "tsclient.h"

/* Short timings keep the suite fast; generous waits keep it robust. */
#define LD_MS   3000
#define RD_MS   2000
#define RP_MS   500
#define WAIT_MS 20000

static k8slease_client *client;

static int setup(void **state)
{
    (void)state;
    return e2e_setup(&client);
}

static int teardown(void **state)
{
    (void)state;
    return e2e_teardown(client);
}

/* The options of name and identity, with the suite's timings. */
static k8slease_elector_options timed(const char *name, const char *identity)
{
    k8slease_elector_options o = K8SLEASE_ELECTOR_OPTIONS_INIT;

    o.name = name;
    o.identity = identity;
    o.lease_duration_ms = LD_MS;
    o.renew_deadline_ms = RD_MS;
    o.retry_period_ms = RP_MS;
    return o;
}

static k8slease_elector *start(const char *name, const char *identity, int release)
{
    k8slease_elector_options o = timed(name, identity);
    k8slease_elector *e = NULL;

    o.release_on_cancel = release;
    if (k8slease_elector_start(&e, client, &o) != 0)
        fail_msg("elector_start(%s, %s): %s", name, identity, k8slease_error_last());
    return e;
}

static int64_t elected(k8slease_elector *e)
{
    int64_t epoch = -1;
    int rc = k8slease_elector_wait_elected(e, WAIT_MS, &epoch);

    if (rc != 0)
        fail_msg("not elected within %d ms: %s (%s)", WAIT_MS, k8slease_strerror(rc),
                 k8slease_error_last());
    return epoch;
}

static k8slease_holder *holder(const char *name)
{
    k8slease_holder *h = NULL;
    int rc = k8slease_holder_get(client, NULL, name, 0, &h);

    if (rc != 0)
        fail_msg("holder_get(%s): %s", name, k8slease_error_last());
    return h;
}

static void single_election_and_holder(void **state)
{
    k8slease_elector *e = start("e2e-single", "node-1:8080", 1);
    k8slease_holder *h;
    int64_t epoch;

    (void)state;
    epoch = elected(e);
    assert_true(epoch >= 0);
    assert_true(k8slease_elector_is_leader(e));
    assert_true(k8slease_elector_leader_deadline(e) > 0);
    assert_int_equal(k8slease_elector_epoch(e), epoch);
    h = holder("e2e-single");
    assert_string_equal(h->identity, "node-1:8080");
    assert_int_equal(h->epoch, epoch);
    assert_int_equal(h->lease_duration_s, LD_MS / 1000);
    assert_false(h->expired);
    assert_true(h->renew_time_us > 0);
    k8slease_holder_free(h);

    assert_int_equal(k8slease_elector_stop(e, -1), 0);
    assert_false(k8slease_elector_is_leader(e));
    assert_int_equal(k8slease_elector_wait_lost(e, 0), 0);
    /* Released: holder "" written, transitions kept. */
    h = holder("e2e-single");
    assert_string_equal(h->identity, "");
    assert_int_equal(h->epoch, epoch);
    assert_int_equal(h->lease_duration_s, 1);
    k8slease_holder_free(h);
    k8slease_elector_free(e);
}

static void epoch_increments_across_terms(void **state)
{
    int64_t prev = -1;

    (void)state;
    for (int i = 0; i < 3; i++) {
        char id[32];
        k8slease_elector *e;
        int64_t epoch;

        snprintf(id, sizeof(id), "node-%d:8080", i);
        e = start("e2e-epoch", id, 1);
        epoch = elected(e);
        assert_true(epoch > prev);
        prev = epoch;
        k8slease_elector_free(e);
    }
}

static void same_identity_new_term_gets_new_epoch(void **state)
{
    k8slease_elector *a = start("e2e-reacquire", "same:1", 0), *b;
    int64_t e1, e2;

    (void)state;
    e1 = elected(a);
    k8slease_elector_free(a); /* no release: the lease still names us */
    b = start("e2e-reacquire", "same:1", 1);
    e2 = elected(b);
    assert_true(e2 > e1);
    k8slease_elector_free(b);
}

static void released_lease_taken_over_without_expiry(void **state)
{
    k8slease_elector *a = start("e2e-release", "a:1", 1), *b;
    k8slease_holder *h;
    int64_t ea, eb;
    struct timespec t0, t1;

    (void)state;
    ea = elected(a);
    b = start("e2e-release", "b:1", 1);
    /* b waits while a holds it. */
    assert_int_equal(k8slease_elector_wait_elected(b, RP_MS * 2, NULL), K8SLEASE_ETIMEOUT);
    assert_false(k8slease_elector_is_leader(b));
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(k8slease_elector_stop(a, 1), 0);
    eb = elected(b);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    assert_true(eb > ea);
    h = holder("e2e-release");
    assert_string_equal(h->identity, "b:1");
    k8slease_holder_free(h);
    print_message("handover after release: %.0f ms (lease duration %d ms)\n",
                  (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6, LD_MS);
    k8slease_elector_free(a);
    k8slease_elector_free(b);
}

static void failover_after_leader_dies(void **state)
{
    k8slease_elector *a = start("e2e-failover", "a:1", 0), *b;
    k8slease_holder *h;
    int64_t ea, eb;

    (void)state;
    ea = elected(a);
    b = start("e2e-failover", "b:1", 1);
    /* "Death": a stops renewing and does not release. */
    assert_int_equal(k8slease_elector_stop(a, 0), 0);
    h = holder("e2e-failover");
    assert_string_equal(h->identity, "a:1");
    k8slease_holder_free(h);
    eb = elected(b);
    assert_true(eb > ea);
    k8slease_elector_free(a);
    k8slease_elector_free(b);
}

static void holder_expires_after_death(void **state)
{
    k8slease_elector *a = start("e2e-expire", "a:1", 0);
    k8slease_holder *h;
    int64_t deadline;

    (void)state;
    elected(a);
    assert_int_equal(k8slease_elector_stop(a, 0), 0);
    k8slease_elector_free(a);
    h = holder("e2e-expire");
    assert_false(h->expired);
    k8slease_holder_free(h);
    /* Poll (bounded) until renewTime + duration has passed. */
    deadline = (int64_t)time(NULL) + 4 * LD_MS / 1000;
    for (;;) {
        h = holder("e2e-expire");
        if (h->expired)
            break;
        k8slease_holder_free(h);
        if ((int64_t)time(NULL) > deadline)
            fail_msg("lease not reported expired within %d s", 4 * LD_MS / 1000);
        nanosleep(&(struct timespec){.tv_nsec = 100 * 1000 * 1000}, NULL);
    }
    assert_string_equal(h->identity, "a:1");
    k8slease_holder_free(h);
}

static void concurrent_candidates_one_winner(void **state)
{
    enum { N = 4 };
    k8slease_elector *e[N];
    int leaders = 0, winner = -1;

    (void)state;
    for (int i = 0; i < N; i++) {
        char id[32];

        snprintf(id, sizeof(id), "cand-%d:1", i);
        e[i] = start("e2e-concurrent", id, 1);
    }
    /* Wait for someone, then check that exactly one leads. */
    for (int i = 0, tries = 0; winner < 0; i = (i + 1) % N) {
        if (k8slease_elector_wait_elected(e[i], 50, NULL) == 0)
            winner = i;
        else if (++tries > WAIT_MS / 50)
            fail_msg("no candidate elected within about %d ms", WAIT_MS);
    }
    for (int i = 0; i < N; i++)
        leaders += k8slease_elector_is_leader(e[i]);
    assert_int_equal(leaders, 1);
    for (int i = 0; i < N; i++)
        k8slease_elector_free(e[i]);
}

struct cb_log {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int started, stopped, new_leader;
    char last_leader[64];
};

static void cb_started(int64_t epoch, void *ud)
{
    struct cb_log *l = ud;

    (void)epoch;
    pthread_mutex_lock(&l->mu);
    l->started++;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

static void cb_stopped(void *ud)
{
    struct cb_log *l = ud;

    pthread_mutex_lock(&l->mu);
    l->stopped++;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

static void cb_new_leader(const char *id, int64_t epoch, void *ud)
{
    struct cb_log *l = ud;

    (void)epoch;
    pthread_mutex_lock(&l->mu);
    l->new_leader++;
    snprintf(l->last_leader, sizeof(l->last_leader), "%s", id);
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

static void callbacks_fire_once(void **state)
{
    struct cb_log l = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER};
    k8slease_elector_options o = timed("e2e-callbacks", "cb:1");
    k8slease_elector *e = NULL;

    (void)state;
    o.on_started_leading = cb_started;
    o.on_stopped_leading = cb_stopped;
    o.on_new_leader = cb_new_leader;
    o.user_data = &l;
    assert_int_equal(k8slease_elector_start(&e, client, &o), 0);
    elected(e);
    k8slease_elector_free(e);
    /* free returns after the election is over: every callback has run. */
    assert_int_equal(l.started, 1);
    assert_int_equal(l.stopped, 1);
    assert_true(l.new_leader >= 1);
}

static void invalid_options_are_refused(void **state)
{
    k8slease_elector_options o = K8SLEASE_ELECTOR_OPTIONS_INIT;
    k8slease_elector *e = NULL;

    (void)state;
    o.name = "e2e-invalid";
    o.identity = "x";
    o.lease_duration_ms = 1000;
    o.renew_deadline_ms = 2000;
    assert_int_equal(k8slease_elector_start(&e, client, &o), K8SLEASE_EINVAL);
    assert_null(e);
    assert_non_null(strstr(k8slease_error_last(), "lease_duration"));
    o.lease_duration_ms = 0;
    o.renew_deadline_ms = 0;
    o.identity = "";
    assert_int_equal(k8slease_elector_start(&e, client, &o), K8SLEASE_EINVAL);
    assert_non_null(strstr(k8slease_error_last(), "identity"));
    o.identity = "x";
    o.name = "Bad_Name";
    assert_int_equal(k8slease_elector_start(&e, client, &o), K8SLEASE_EINVAL);
    assert_non_null(strstr(k8slease_error_last(), "Bad_Name"));
}

static void holder_of_missing_lease(void **state)
{
    k8slease_holder *h = NULL;

    (void)state;
    assert_int_equal(k8slease_holder_get(client, NULL, "e2e-does-not-exist", 0, &h),
                     K8SLEASE_ENOTFOUND);
    assert_null(h);
    assert_non_null(strstr(k8slease_error_last(), "e2e-does-not-exist"));
}

struct watch_log {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n;
    char ids[16][32];
    int64_t epochs[16];
};

static void on_watch(const char *id, int64_t epoch, void *ud)
{
    struct watch_log *l = ud;

    pthread_mutex_lock(&l->mu);
    if (l->n < 16) {
        snprintf(l->ids[l->n], sizeof(l->ids[0]), "%s", id);
        l->epochs[l->n] = epoch;
        l->n++;
    }
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

/* Wait until the watch reported identity id; returns its index. */
static int wait_watch(struct watch_log *l, const char *id, int from)
{
    struct timespec until;
    int found = -1;

    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += WAIT_MS / 1000;
    pthread_mutex_lock(&l->mu);
    while (found < 0) {
        for (int i = from; i < l->n && found < 0; i++)
            if (strcmp(l->ids[i], id) == 0)
                found = i;
        if (found < 0 && pthread_cond_timedwait(&l->cv, &l->mu, &until) != 0)
            break;
    }
    pthread_mutex_unlock(&l->mu);
    if (found < 0)
        fail_msg("watch did not report holder \"%s\" within %d ms", id, WAIT_MS);
    return found;
}

static void watch_reports_changes_in_order(void **state)
{
    struct watch_log l = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER};
    k8slease_watch *w = NULL;
    k8slease_elector *a, *b;
    int ia, ib, n;

    (void)state;
    assert_int_equal(k8slease_watch_start(&w, client, NULL, "e2e-watch", on_watch, &l), 0);
    a = start("e2e-watch", "wa:1", 1);
    elected(a);
    ia = wait_watch(&l, "wa:1", 0);
    b = start("e2e-watch", "wb:1", 1);
    k8slease_elector_stop(a, 1);
    elected(b);
    ib = wait_watch(&l, "wb:1", ia + 1);
    assert_true(l.epochs[ib] > l.epochs[ia]);
    k8slease_elector_free(b);
    k8slease_watch_free(w);
    /* Renewals in between were not reported: only holder/epoch changes. */
    pthread_mutex_lock(&l.mu);
    n = l.n;
    for (int i = 1; i < n; i++)
        assert_true(strcmp(l.ids[i], l.ids[i - 1]) != 0 || l.epochs[i] != l.epochs[i - 1]);
    pthread_mutex_unlock(&l.mu);
    k8slease_elector_free(a);
}

/* GETs of Leases the server under test has answered so far: the test
 * server's count of GETs (every kind; only Leases are read here), a real
 * server's apiserver_request_total of GET leases (its own identity Lease's,
 * labelled system_client, left out); -1 when the server has no /metrics
 * (the test server standing in for kube-apiserver under envtest.sh). */
static long lease_gets(void)
{
    char *metrics = NULL, *line, *save = NULL;
    long status = 0;
    double n = 0;

    if (e2e_is_testserver())
        return (long)(tc_stat_or0(e2e_server(), "requests.by_verb.get.200") +
                      tc_stat_or0(e2e_server(), "requests.by_verb.get.404"));
    assert_int_equal(e2e_api("GET", "/metrics", NULL, &status, &metrics), 0);
    if (status != 200) {
        free(metrics);
        return -1;
    }
    for (line = strtok_r(metrics, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        const char *value = strrchr(line, ' ');
        const char *sc = strstr(line, "system_client=\"");

        if (!strncmp(line, "apiserver_request_total{", 24) && strstr(line, "resource=\"leases\"") &&
            strstr(line, "verb=\"GET\"") && value && (!sc || sc[15] == '"'))
            n += strtod(value + 1, NULL);
    }
    free(metrics);
    return (long)n;
}

static void pause_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Poll the holder as Mooncake's standby does (every 50 ms here) until it
 * names want (NULL: until the Lease is gone); fail after WAIT_MS. */
static void poll_until(k8slease_client *c, const char *name, const char *want)
{
    int64_t end = now_ms() + WAIT_MS;

    for (;;) {
        k8slease_holder *h = NULL;
        int rc = k8slease_holder_get(c, NULL, name, 0, &h);

        if (want ? rc == 0 && !strcmp(h->identity, want) : rc == K8SLEASE_ENOTFOUND) {
            k8slease_holder_free(h);
            return;
        }
        if (rc != 0 && rc != K8SLEASE_ENOTFOUND)
            fail_msg("holder_get(%s): %s", name, k8slease_error_last());
        k8slease_holder_free(h);
        if (now_ms() > end)
            fail_msg("holder_get(%s) did not show %s within %d ms", name,
                     want ? want : "the Lease deleted", WAIT_MS);
        pause_ms(50);
    }
}

/* GETs of e2e-cached the standby client sent, from its debug log ("GET
 * URL: HTTP n"): the server's count (lease_gets) also has every other
 * client's, and a real server's includes the probes of quiet streams that
 * earlier tests' clients still follow. */
static int standby_gets;

static void count_gets(k8slease_log_level level, const char *msg, void *ud)
{
    (void)ud;
    if (!strncmp(msg, "GET ", 4) && strstr(msg, "/leases/e2e-cached: HTTP"))
        __atomic_add_fetch(&standby_gets, 1, __ATOMIC_SEQ_CST);
    else if (level <= K8SLEASE_LOG_WARN)
        e2e_log_to_stderr(level, msg, NULL);
}

/* A standby polling the holder is answered from a watch of the Lease after
 * its second read (k8s/holders.h): a handful of GETs, not one per read, and
 * every change still seen: a new holder, the Lease deleted. */
static void holder_reads_answered_from_watch(void **state)
{
    const char *name = "e2e-cached";
    k8slease_client_options co = K8SLEASE_CLIENT_OPTIONS_INIT;
    k8slease_client *standby = NULL;
    k8slease_elector *a, *b;
    uint64_t hits0, misses0, hits, misses;
    long gets0, gets, status = 0;
    int64_t ea, eb, first_hit = -1;
    int sent0, sent;
    char path[300];
    int i;

    (void)state;
    co.kubeconfig = getenv("KUBECONFIG");
    co.log_cb = count_gets;
    co.log_level = K8SLEASE_LOG_DEBUG;
    if (k8slease_client_new(&standby, &co) != 0)
        fail_msg("standby client: %s", k8slease_error_last());
    a = start(name, "a", 1);
    ea = elected(a);
    kl__holders_counts(kl__k8s_of(standby)->holders, &hits0, &misses0);
    gets0 = lease_gets();
    sent0 = __atomic_load_n(&standby_gets, __ATOMIC_SEQ_CST);
    /* 40 reads 50 ms apart: 2 s, 4 of the leader's renewals. */
    for (i = 0; i < 40; i++) {
        k8slease_holder *h = NULL;

        if (k8slease_holder_get(standby, NULL, name, 0, &h) != 0)
            fail_msg("holder_get(%s): %s", name, k8slease_error_last());
        assert_string_equal(h->identity, "a");
        assert_int_equal(h->epoch, ea);
        assert_false(h->expired);
        assert_true(h->resource_version[0] != '\0');
        k8slease_holder_free(h);
        kl__holders_counts(kl__k8s_of(standby)->holders, &hits, &misses);
        if (first_hit < 0 && hits > hits0)
            first_hit = i;
        /* Once answered from the watch, always: the stream stays healthy. */
        if (first_hit >= 0)
            assert_int_equal(misses - misses0, (uint64_t)first_hit);
        pause_ms(50);
    }
    gets = gets0 < 0 ? -1 : lease_gets() - gets0;
    sent = __atomic_load_n(&standby_gets, __ATOMIC_SEQ_CST) - sent0;
    kl__holders_counts(kl__k8s_of(standby)->holders, &hits, &misses);
    printf("40 reads: %llu from the watch, %llu GETs (first from the watch: read %lld); the "
           "standby sent %d GETs, the server counted %ld of every client\n",
           (unsigned long long)(hits - hits0), (unsigned long long)(misses - misses0),
           (long long)first_hit + 1, sent, gets);
    if (first_hit < 0)
        fail_msg("40 reads, none answered from the watch");
    /* Each miss is one GET (the first read's at least), and the server
     * answered them. */
    assert_int_equal(sent, (int)(misses - misses0));
    assert_true(sent >= 1);
    assert_true(gets < 0 || gets >= sent);
    /* The test server has only our clients, whose other streams get
     * bookmarks every second: no probes. */
    if (e2e_is_testserver())
        assert_int_equal(gets, sent);

    /* A new holder and a deletion are seen while reads are cache hits. */
    assert_int_equal(k8slease_elector_stop(a, 1), 0);
    k8slease_elector_free(a);
    b = start(name, "b", 1);
    eb = elected(b);
    assert_true(eb > ea);
    poll_until(standby, name, "b");
    assert_int_equal(k8slease_elector_stop(b, 1), 0);
    k8slease_elector_free(b);
    snprintf(path, sizeof(path), "/apis/coordination.k8s.io/v1/namespaces/%s/leases/%s",
             k8slease_client_namespace(client), name);
    assert_int_equal(e2e_api("DELETE", path, NULL, &status, NULL), 0);
    assert_int_equal(status, 200);
    poll_until(standby, name, NULL);
    kl__holders_counts(kl__k8s_of(standby)->holders, &hits, &misses);
    assert_true(hits > hits0 + 30);
    k8slease_client_free(standby);
}

/* A client that wrote the Lease (here: released it) reads what it wrote
 * right away, even while its answers come from the watch. */
static void holder_read_after_own_write(void **state)
{
    const char *name = "e2e-cached-own";
    k8slease_elector *a;
    k8slease_holder *h;
    uint64_t hits0, misses0, hits, misses;
    int64_t end;

    (void)state;
    a = start(name, "a", 1);
    elected(a);
    /* Until a read is answered from the watch. */
    kl__holders_counts(kl__k8s_of(client)->holders, &hits0, &misses0);
    end = now_ms() + WAIT_MS;
    do {
        k8slease_holder_free(holder(name));
        kl__holders_counts(kl__k8s_of(client)->holders, &hits, &misses);
        if (now_ms() > end)
            fail_msg("no read of %s answered from its watch within %d ms", name, WAIT_MS);
    } while (hits == hits0 && (pause_ms(20), 1));
    assert_int_equal(k8slease_elector_stop(a, 1), 0);
    h = holder(name);
    assert_string_equal(h->identity, "");
    k8slease_holder_free(h);
    k8slease_elector_free(a);
}

/* A Lease nobody reads is no longer followed (60 s; 300 ms here), and a
 * read after that starts over: a GET, then followed again. */
static void holder_reads_stop_when_idle(void **state)
{
    const char *name = "e2e-cached-idle";
    k8slease_client *c = NULL;
    k8slease_elector *a;
    int64_t end;

    (void)state;
    assert_int_equal(e2e_setup(&c), 0);
    kl__holders_set_idle(kl__k8s_of(c)->holders, 300 * 1000000LL);
    a = start(name, "a", 1);
    elected(a);
    for (int round = 0; round < 2; round++) {
        poll_until(c, name, "a");
        poll_until(c, name, "a");
        assert_int_equal(kl__holders_following(kl__k8s_of(c)->holders), 1);
        end = now_ms() + WAIT_MS;
        while (kl__holders_following(kl__k8s_of(c)->holders) != 0) {
            if (now_ms() > end)
                fail_msg("still following %s %d ms after the last read (idle 300 ms)", name,
                         WAIT_MS);
            pause_ms(20);
        }
    }
    k8slease_elector_free(a);
    k8slease_client_free(c);
}

/* One read of the standby under the failing allocator: 0 (the Lease names
 * "a") or K8SLEASE_ENOMEM, nothing else. */
static int oom_read(k8slease_client *c, const char *name, long n, int i)
{
    k8slease_holder *h = NULL;
    int rc = k8slease_holder_get(c, NULL, name, 2000, &h), other;
    char got[64];

    if (rc != 0 && rc != K8SLEASE_ENOMEM)
        fail_msg("allocation %ld failing: read %d: %s (%s)", n, i, k8slease_strerror(rc),
                 k8slease_error_last());
    if (rc != 0)
        assert_null(h);
    other = rc == 0 && strcmp(h->identity, "a") != 0;
    snprintf(got, sizeof(got), "%s", rc == 0 ? h->identity : "");
    k8slease_holder_free(h); /* before a failure, which leaves the function */
    if (other)
        fail_msg("allocation %ld failing: read %d: holder \"%s\", not \"a\"", n, i, got);
    return rc;
}

/* Holder reads while allocations fail, from the n-th on (n = 0, 1, ...)
 * of one thread: the reading thread (its reads' GETs, the holder), then
 * the client's loop thread (the requests, the follow's list and watch, the
 * events): the first read (a GET), the second (the Lease followed on the
 * watch, and a GET), then reads until one is answered from the watch. Each
 * ends with the holder or K8SLEASE_ENOMEM, and the client frees everything
 * (LeakSanitizer in the sanitizer build, scripts/valgrind.sh); each sweep
 * ends at the first n where no allocation failed and the last read came
 * from the watch. The countdown is that thread's alone: a run fails the
 * same allocation every time. */
static void holder_reads_out_of_memory(void **state)
{
    static const char *const sweeps[] = {"the reading thread's", "the loop thread's"};
    const char *name = "e2e-cached-oom";
    k8slease_client_options co = K8SLEASE_CLIENT_OPTIONS_INIT;
    k8slease_elector *a;

    (void)state;
    co.kubeconfig = getenv("KUBECONFIG");
    a = start(name, "a", 1);
    elected(a);
    for (int on_loop = 0; on_loop < 2; on_loop++) {
        int clean = 0;
        long n;

        for (n = 0; n < 5000 && !clean; n++) {
            k8slease_client *c = NULL;
            uint64_t hits = 0, misses = 0;
            int failed = 0, reads = 2;
            int64_t end;

            if (k8slease_client_new(&c, &co) != 0)
                fail_msg("client: %s", k8slease_error_last());
            if (on_loop)
                kl_test_alloc_fail_on_loop(c->loop, n);
            else
                kl__alloc_fail_after(n);
            failed |= oom_read(c, name, n, 1) != 0;
            failed |= oom_read(c, name, n, 2) != 0;
            /* Once one of the thread's allocations failed, its later ones
             * do: a read then fails at once (or is answered from the watch),
             * so this waits only while the follow can work. */
            end = now_ms() + WAIT_MS;
            while (!failed && hits == 0 && now_ms() < end) {
                pause_ms(5);
                failed |= oom_read(c, name, n, ++reads) != 0;
                kl__holders_counts(kl__k8s_of(c)->holders, &hits, &misses);
            }
            failed |= kl__alloc_failed();
            kl__alloc_fail_after(-1);
            if (!failed && hits == 0)
                fail_msg("%s allocation %ld failing: no read answered from the watch in %d ms",
                         sweeps[on_loop], n, WAIT_MS);
            clean = !failed;
            k8slease_client_free(c);
        }
        printf("holder reads answered from the watch after %ld runs with %s allocation failing\n",
               n - 1, sweeps[on_loop]);
        assert_true(clean);
        assert_true(n > 1); /* some runs did fail */
    }
    k8slease_elector_free(a);
}

/* What a callback that frees its elector or its client sees. */
typedef struct freeing {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    k8slease_client *c;
    k8slease_elector *e;
    int started;       /* on_started_leading ran (and freed) */
    int after;         /* callbacks that ran after the free */
    char message[512]; /* k8slease_error_last() after it */
    char holder[64];   /* the watch's last report */
    int saw_released;  /* the watch reported "" after "x:1" */
} freeing;

static void freeing_init(freeing *f)
{
    memset(f, 0, sizeof(*f));
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
}

/* on_started_leading: k8slease_elector_free of its own elector. */
static void free_own_elector(int64_t epoch, void *ud)
{
    freeing *f = ud;
    k8slease_elector *e;

    (void)epoch;
    pthread_mutex_lock(&f->mu); /* until the starter has stored e */
    e = f->e;
    pthread_mutex_unlock(&f->mu);
    k8slease_elector_free(e);
    pthread_mutex_lock(&f->mu);
    f->started = 1;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

/* Any callback after the free. */
static void after_stopped(void *ud)
{
    freeing *f = ud;

    pthread_mutex_lock(&f->mu);
    f->after++;
    pthread_mutex_unlock(&f->mu);
}

static void after_new_leader(const char *id, int64_t epoch, void *ud)
{
    freeing *f = ud;

    (void)id;
    (void)epoch;
    pthread_mutex_lock(&f->mu);
    f->after += f->started;
    pthread_mutex_unlock(&f->mu);
}

static void watch_released(const char *identity, int64_t epoch, void *ud)
{
    freeing *f = ud;

    (void)epoch;
    pthread_mutex_lock(&f->mu);
    if (!identity[0] && strcmp(f->holder, "x:1") == 0)
        f->saw_released = 1;
    snprintf(f->holder, sizeof(f->holder), "%s", identity);
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

/* on_started_leading: k8slease_client_free of the elector's client. */
static void free_own_client(int64_t epoch, void *ud)
{
    freeing *f = ud;

    (void)epoch;
    k8slease_client_free(f->c);
    pthread_mutex_lock(&f->mu);
    snprintf(f->message, sizeof(f->message), "%s", k8slease_error_last());
    f->started = 1;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

/* Waits until *flag is set (f->mu); fails after WAIT_MS. */
static void await(freeing *f, const int *flag, const char *what)
{
    struct timespec until;
    int set;

    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += WAIT_MS / 1000;
    pthread_mutex_lock(&f->mu);
    while (!(set = *flag) && pthread_cond_timedwait(&f->cv, &f->mu, &until) == 0)
        ;
    pthread_mutex_unlock(&f->mu);
    if (!set)
        fail_msg("%s: not within %d ms", what, WAIT_MS);
}

/* k8slease_elector_free from a callback of its client cannot wait for the
 * release: no callback of the elector runs after it, and it is stopped
 * (released, as its options say) and freed on the loop once over.
 * k8slease_client_free from a callback frees nothing (the loop thread
 * cannot stop itself): K8SLEASE_ESTATE, and the client still works from
 * another thread. Freeing either while it runs would be a use after free
 * (AddressSanitizer in the sanitizer build). */
static void free_from_a_callback(void **state)
{
    k8slease_elector_options o = timed("e2e-free-cb", "x:1");
    k8slease_client *c = NULL;
    k8slease_watch *w = NULL;
    k8slease_elector *e = NULL;
    freeing f;

    (void)state;
    freeing_init(&f);
    assert_int_equal(e2e_setup(&c), 0);
    assert_int_equal(k8slease_watch_start(&w, client, NULL, "e2e-free-cb", watch_released, &f), 0);
    o.on_started_leading = free_own_elector;
    o.on_stopped_leading = after_stopped;
    o.on_new_leader = after_new_leader;
    o.user_data = &f;
    pthread_mutex_lock(&f.mu);
    assert_int_equal(k8slease_elector_start(&f.e, c, &o), 0);
    pthread_mutex_unlock(&f.mu);
    await(&f, &f.started, "elected (and freed from on_started_leading)");
    await(&f, &f.saw_released, "the Lease released after the free from the callback");
    k8slease_client_free(c); /* frees the elector too if still over its release */
    k8slease_watch_free(w);
    assert_int_equal(f.after, 0);

    /* The client, from a callback of its own. */
    freeing_init(&f);
    assert_int_equal(e2e_setup(&c), 0);
    f.c = c;
    o.name = "e2e-free-client-cb";
    o.on_started_leading = free_own_client;
    o.on_stopped_leading = NULL;
    o.on_new_leader = NULL;
    assert_int_equal(k8slease_elector_start(&e, c, &o), 0);
    await(&f, &f.started, "elected (and the client freed from on_started_leading)");
    if (!strstr(f.message, "k8slease_client_free: called from a callback"))
        fail_msg("k8slease_error_last() after k8slease_client_free from a callback: \"%s\"",
                 f.message);
    /* Still whole: it stops, releases and is freed from here. */
    assert_true(k8slease_elector_is_leader(e));
    assert_int_equal(k8slease_elector_stop(e, 1), 0);
    k8slease_elector_free(e);
    k8slease_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(single_election_and_holder),
        cmocka_unit_test(epoch_increments_across_terms),
        cmocka_unit_test(same_identity_new_term_gets_new_epoch),
        cmocka_unit_test(released_lease_taken_over_without_expiry),
        cmocka_unit_test(failover_after_leader_dies),
        cmocka_unit_test(holder_expires_after_death),
        cmocka_unit_test(concurrent_candidates_one_winner),
        cmocka_unit_test(callbacks_fire_once),
        cmocka_unit_test(invalid_options_are_refused),
        cmocka_unit_test(holder_of_missing_lease),
        cmocka_unit_test(watch_reports_changes_in_order),
        cmocka_unit_test(holder_reads_answered_from_watch),
        cmocka_unit_test(holder_read_after_own_write),
        cmocka_unit_test(holder_reads_stop_when_idle),
        cmocka_unit_test(holder_reads_out_of_memory),
        cmocka_unit_test(free_from_a_callback),
    };
    const char *only = getenv("K8SLEASE_TEST_FILTER");

    if (only && only[0])
        cmocka_set_test_filter(only); /* e.g. K8SLEASE_TEST_FILTER=free_from_a_callback */
    return cmocka_run_group_tests(tests, setup, teardown);
}
