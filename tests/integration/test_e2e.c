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

#include "e2e.h"
#include "k8slease.h"

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

static k8slease_elector *start(const char *name, const char *identity, int release)
{
    k8slease_elector_options o = K8SLEASE_ELECTOR_OPTIONS_INIT;
    k8slease_elector *e = NULL;

    o.name = name;
    o.identity = identity;
    o.lease_duration_ms = LD_MS;
    o.renew_deadline_ms = RD_MS;
    o.retry_period_ms = RP_MS;
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
    k8slease_elector_options o = K8SLEASE_ELECTOR_OPTIONS_INIT;
    k8slease_elector *e = NULL;

    (void)state;
    o.name = "e2e-callbacks";
    o.identity = "cb:1";
    o.lease_duration_ms = LD_MS;
    o.renew_deadline_ms = RD_MS;
    o.retry_period_ms = RP_MS;
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
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
