/* The seed's integration scenarios through its C ABI (K8sLease*), end to end
 * over HTTPS, plus the behaviours its users rely on. */
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
#include "harness.h"
#include "libk8s_lease_wrapper.h"

#define LD     3
#define RD     2
#define RP     1
#define WAIT_S 20

static char ns[] = "default";

static int setup(void **state)
{
    char *err = NULL;

    (void)state;
    if (e2e_setup(NULL) != 0)
        return -1;
    if (K8sLeaseInit(&err) != 0) {
        fprintf(stderr, "K8sLeaseInit: %s\n", err);
        free(err);
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return e2e_teardown(NULL);
}

/* Assert rc == 0 and no message; on failure print (and free) the message.
 * err is read after the call, hence the pointer. */
static void ok(int rc, char **err, const char *what)
{
    if (rc != 0) {
        fail_msg("%s returned %d: %s", what, rc, *err ? *err : "(no message)");
    }
    assert_null(*err);
}

static void run(char *lease, char *id)
{
    char *err = NULL;

    ok(K8sLeaseRunElection(ns, lease, id, LD, RD, RP, &err), &err, "K8sLeaseRunElection");
}

static long long wait_elected(char *lease)
{
    long long t = -1;
    char *err = NULL;

    ok(K8sLeaseWaitElected(ns, lease, WAIT_S, &t, &err), &err, "K8sLeaseWaitElected");
    return t;
}

static void cancel_and_wait(char *lease)
{
    char *err = NULL;

    ok(K8sLeaseCancelElection(ns, lease, &err), &err, "K8sLeaseCancelElection");
    ok(K8sLeaseWaitLost(ns, lease, &err), &err, "K8sLeaseWaitLost");
}

/* Returns the holder (caller frees, NULL when none) and the transitions. */
static char *get_holder(char *lease, long long *transitions)
{
    char *h = NULL, *err = NULL;
    int rc = K8sLeaseGetHolder(ns, lease, &h, transitions, &err);

    if (rc != 0)
        fail_msg("K8sLeaseGetHolder(%s) returned %d: %s", lease, rc, err ? err : "");
    return h;
}

/* The holder once the Lease has none (at most 5 s), NULL; else the holder. */
static char *wait_no_holder(char *lease, long long *transitions)
{
    int64_t until = e2e_mono_ms() + 5000;
    char *h;

    while ((h = get_holder(lease, transitions)) && e2e_mono_ms() < until) {
        free(h);
        e2e_pause_ms(10);
    }
    return h;
}

static void single_election(void **state)
{
    char lease[] = "compat-single", id[] = "node-1:8080";
    long long t, t2 = -1;
    char *h;

    (void)state;
    run(lease, id);
    t = wait_elected(lease);
    assert_true(t >= 0);
    h = get_holder(lease, &t2);
    assert_non_null(h);
    assert_string_equal(h, id);
    assert_int_equal(t2, t);
    free(h);
    cancel_and_wait(lease);
    /* Released on cancel, right after the term ended (K8sLeaseWaitLost
     * returns first: our master stops before a standby can take over). */
    h = wait_no_holder(lease, &t2);
    assert_null(h);
    assert_int_equal(t2, t);
}

static void epoch_increments_and_key_reusable(void **state)
{
    char lease[] = "compat-epoch", a[] = "node-epoch-1:8080", b[] = "node-epoch-2:8080";
    long long t1, t2;

    (void)state;
    run(lease, a);
    t1 = wait_elected(lease);
    cancel_and_wait(lease);
    run(lease, b); /* same key again after the first election ended */
    t2 = wait_elected(lease);
    assert_true(t2 > t1);
    cancel_and_wait(lease);
}

static void run_twice_fails(void **state)
{
    char lease[] = "compat-twice", id[] = "x:1";
    char *err = NULL;

    (void)state;
    run(lease, id);
    assert_int_equal(K8sLeaseRunElection(ns, lease, id, LD, RD, RP, &err), -1);
    assert_non_null(err);
    assert_non_null(strstr(err, "election already running for default/compat-twice"));
    free(err);
    wait_elected(lease);
    cancel_and_wait(lease);
}

static void invalid_durations_fail(void **state)
{
    char lease[] = "compat-invalid", id[] = "x:1", empty[] = "";
    char *err = NULL;

    (void)state;
    assert_int_equal(K8sLeaseRunElection(ns, lease, id, 3, 3, 1, &err), -1);
    assert_non_null(err);
    assert_non_null(strstr(err, "lease_duration"));
    free(err);
    err = NULL;
    assert_int_equal(K8sLeaseRunElection(ns, lease, empty, LD, RD, RP, &err), -1);
    assert_non_null(strstr(err, "identity"));
    free(err);
    err = NULL;
    /* A failed start leaves no election behind. */
    assert_int_equal(K8sLeaseWaitLost(ns, lease, &err), 0);
}

static void sequential_handoff(void **state)
{
    char lease[] = "compat-handoff", a[] = "candidate-a:8080", b[] = "candidate-b:8080";
    char lease_b[] = "compat-handoff";
    long long t;
    char *h;

    (void)state;
    run(lease, a);
    wait_elected(lease);
    h = get_holder(lease, &t);
    assert_string_equal(h, a);
    free(h);
    cancel_and_wait(lease);
    run(lease_b, b);
    wait_elected(lease_b);
    h = get_holder(lease, &t);
    assert_string_equal(h, b);
    free(h);
    cancel_and_wait(lease);
}

static void wait_elected_times_out_and_cancels(void **state)
{
    k8slease_elector_options o = K8SLEASE_ELECTOR_OPTIONS_INIT;
    k8slease_client *c = NULL;
    k8slease_elector *holder_el = NULL;
    char lease[] = "compat-timeout", id[] = "late:1";
    long long t = -1;
    char *err = NULL;

    (void)state;
    /* Someone else holds the lease for the whole test. */
    assert_int_equal(e2e_setup(&c), 0);
    o.name = lease;
    o.identity = "holder:1";
    o.lease_duration_ms = 15000;
    o.renew_deadline_ms = 10000;
    o.retry_period_ms = 1000;
    assert_int_equal(k8slease_elector_start(&holder_el, c, &o), 0);
    assert_int_equal(k8slease_elector_wait_elected(holder_el, WAIT_S * 1000, NULL), 0);

    run(lease, id);
    assert_int_equal(K8sLeaseWaitElected(ns, lease, 1, &t, &err), -1);
    assert_non_null(err);
    assert_non_null(strstr(err, "timed out after 1s"));
    free(err);
    err = NULL;
    /* The election was cancelled: WaitLost returns, the key can be reused. */
    ok(K8sLeaseWaitLost(ns, lease, &err), &err, "K8sLeaseWaitLost");
    run(lease, id);
    cancel_and_wait(lease);
    k8slease_elector_free(holder_el);
    k8slease_client_free(c);
}

struct holder_thread {
    char lease[64];
    int errors, seen;
};

/* K8sLeaseWaitElected once the election is over says which way it ended:
 * after a term ("leadership already lost (epoch N)"), or without one. */
static void wait_elected_after_the_end_says_why(void **state)
{
    char led[] = "compat-over", never[] = "compat-never", id[] = "node-over:8080";
    k8slease_client *c;
    k8slease_elector *holder;
    k8slease_elector_options o = K8SLEASE_ELECTOR_OPTIONS_INIT;
    long long t, t2 = -1;
    char *err = NULL, want[64];

    (void)state;
    run(led, id);
    t = wait_elected(led);
    cancel_and_wait(led);
    assert_int_equal(K8sLeaseWaitElected(ns, led, WAIT_S, &t2, &err), -1);
    snprintf(want, sizeof(want), "leadership already lost (epoch %lld)", t);
    assert_non_null(err);
    assert_string_equal(err, want);
    free(err);
    err = NULL;

    /* Held by another: cancelled before it could lead. */
    assert_int_equal(e2e_setup(&c), 0);
    o.name = never;
    o.identity = "other:8080";
    assert_int_equal(k8slease_elector_start(&holder, c, &o), 0);
    assert_int_equal(k8slease_elector_wait_elected(holder, WAIT_S * 1000, NULL), 0);
    run(never, id);
    cancel_and_wait(never);
    assert_int_equal(K8sLeaseWaitElected(ns, never, WAIT_S, &t2, &err), -1);
    assert_non_null(err);
    assert_string_equal(err, "election lost before becoming leader");
    free(err);
    k8slease_elector_free(holder);
    k8slease_client_free(c);
}

static void *get_holder_loop(void *arg)
{
    struct holder_thread *ht = arg;

    for (int i = 0; i < 20; i++) {
        char *h = NULL, *err = NULL;
        long long t;

        if (K8sLeaseGetHolder(ns, ht->lease, &h, &t, &err) != 0) {
            ht->errors++;
            free(err);
            continue;
        }
        ht->seen += h && strcmp(h, "concurrent:1") == 0;
        free(h);
    }
    return NULL;
}

static void get_holder_from_five_threads(void **state)
{
    char lease[] = "compat-threads", id[] = "concurrent:1";
    struct holder_thread ht[5];
    pthread_t th[5];

    (void)state;
    run(lease, id);
    wait_elected(lease);
    for (int i = 0; i < 5; i++) {
        memset(&ht[i], 0, sizeof(ht[i]));
        snprintf(ht[i].lease, sizeof(ht[i].lease), "%s", lease);
        assert_int_equal(pthread_create(&th[i], NULL, get_holder_loop, &ht[i]), 0);
    }
    for (int i = 0; i < 5; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(ht[i].errors, 0);
        assert_int_equal(ht[i].seen, 20);
    }
    cancel_and_wait(lease);
}

static void get_holder_not_found(void **state)
{
    char lease[] = "compat-missing";
    char *h = (char *)"sentinel", *err = NULL;
    long long t = 42;

    (void)state;
    assert_int_equal(K8sLeaseGetHolder(ns, lease, &h, &t, &err), 1);
    assert_null(h);
    assert_int_equal(t, 0);
    assert_null(err);
}

static void holder_empty_after_death_and_expiry(void **state)
{
    k8slease_elector_options o = K8SLEASE_ELECTOR_OPTIONS_INIT;
    k8slease_client *c = NULL;
    k8slease_elector *e = NULL;
    char lease[] = "compat-dead";
    long long t;
    char *h;
    time_t deadline;

    (void)state;
    assert_int_equal(e2e_setup(&c), 0);
    o.name = lease;
    o.identity = "dead:1";
    o.lease_duration_ms = LD * 1000;
    o.renew_deadline_ms = RD * 1000;
    o.retry_period_ms = RP * 1000;
    o.release_on_cancel = 0;
    assert_int_equal(k8slease_elector_start(&e, c, &o), 0);
    assert_int_equal(k8slease_elector_wait_elected(e, WAIT_S * 1000, NULL), 0);
    h = get_holder(lease, &t);
    assert_string_equal(h, "dead:1");
    free(h);
    k8slease_elector_free(e); /* dies without releasing */
    deadline = time(NULL) + 4 * LD;
    while ((h = get_holder(lease, &t)) != NULL) {
        free(h);
        if (time(NULL) > deadline)
            fail_msg("holder still reported %d s after the leader died", 4 * LD);
        nanosleep(&(struct timespec){.tv_nsec = 100 * 1000 * 1000}, NULL);
    }
    k8slease_client_free(c);
}

static void failover_after_leader_death(void **state)
{
    k8slease_elector_options o = K8SLEASE_ELECTOR_OPTIONS_INIT;
    k8slease_client *c = NULL;
    k8slease_elector *e = NULL;
    char lease[] = "compat-failover", id[] = "survivor:1";
    long long t;
    int64_t t0 = -1;

    (void)state;
    assert_int_equal(e2e_setup(&c), 0);
    o.name = lease;
    o.identity = "dying:1";
    o.lease_duration_ms = LD * 1000;
    o.renew_deadline_ms = RD * 1000;
    o.retry_period_ms = RP * 1000;
    o.release_on_cancel = 0;
    assert_int_equal(k8slease_elector_start(&e, c, &o), 0);
    assert_int_equal(k8slease_elector_wait_elected(e, WAIT_S * 1000, &t0), 0);
    run(lease, id);
    k8slease_elector_free(e); /* the leader dies */
    t = wait_elected(lease);
    assert_true(t > t0);
    cancel_and_wait(lease);
    k8slease_client_free(c);
}

struct seen {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n;
    char holders[16][32];
    long long transitions[16];
};

static void on_holder(void *ctx, const char *holder, size_t size, int64_t transitions)
{
    struct seen *s = ctx;

    pthread_mutex_lock(&s->mu);
    if (s->n < 16) {
        snprintf(s->holders[s->n], sizeof(s->holders[0]), "%.*s", (int)size, holder ? holder : "");
        s->transitions[s->n] = transitions;
        s->n++;
    }
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static int wait_seen(struct seen *s, const char *holder)
{
    struct timespec until;
    int found = -1;

    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += WAIT_S;
    pthread_mutex_lock(&s->mu);
    while (found < 0) {
        for (int i = 0; i < s->n && found < 0; i++)
            if (strcmp(s->holders[i], holder) == 0)
                found = i;
        if (found < 0 && pthread_cond_timedwait(&s->cv, &s->mu, &until) != 0)
            break;
    }
    pthread_mutex_unlock(&s->mu);
    if (found < 0)
        fail_msg("WatchHolder did not report \"%s\" within %d s", holder, WAIT_S);
    return found;
}

static void watch_holder(void **state)
{
    struct seen s = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER};
    char lease[] = "compat-watch", a[] = "wa:1", b[] = "wb:1";
    char *err = NULL;
    int ia, ib, n;

    (void)state;
    ok(K8sLeaseWatchHolder(ns, lease, &s, on_holder, &err), &err, "K8sLeaseWatchHolder");
    assert_int_equal(K8sLeaseWatchHolder(ns, lease, &s, on_holder, &err), -1);
    assert_non_null(strstr(err, "watch already running for default/compat-watch"));
    free(err);
    err = NULL;

    run(lease, a);
    wait_elected(lease);
    ia = wait_seen(&s, a);
    cancel_and_wait(lease);
    run(lease, b);
    wait_elected(lease);
    ib = wait_seen(&s, b);
    assert_true(ib > ia);
    assert_true(s.transitions[ib] > s.transitions[ia]);
    ok(K8sLeaseCancelWatch(ns, lease, &err), &err, "K8sLeaseCancelWatch");
    ok(K8sLeaseCancelWatch(ns, lease, &err), &err, "K8sLeaseCancelWatch again");
    pthread_mutex_lock(&s.mu);
    n = s.n;
    pthread_mutex_unlock(&s.mu);
    /* No callback after CancelWatch returned. */
    cancel_and_wait(lease);
    pthread_mutex_lock(&s.mu);
    assert_int_equal(s.n, n);
    pthread_mutex_unlock(&s.mu);
}

static void pod_labels(void **state)
{
    char pod[] = "compat-pod", key[] = "role", value[] = "leader";
    char *err = NULL, *resp = NULL;
    long status = 0;

    (void)state;
    /* A Pod a real server accepts too (it stays Pending: no scheduler). */
    assert_int_equal(e2e_api("POST", "/api/v1/namespaces/default/pods",
                             "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":"
                             "{\"name\":\"compat-pod\",\"labels\":{\"app\":\"x\"}},"
                             "\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":"
                             "\"k8slease.invalid/none\"}]}}",
                             &status, &resp),
                     0);
    free(resp);
    assert_int_equal(status, 201);
    ok(K8sPatchPodLabel(ns, pod, key, value, &err), &err, "K8sPatchPodLabel");
    assert_int_equal(
        e2e_api("GET", "/api/v1/namespaces/default/pods/compat-pod", NULL, &status, &resp), 0);
    assert_non_null(strstr(resp, "\"role\":\"leader\""));
    assert_non_null(strstr(resp, "\"app\":\"x\""));
    free(resp);
    ok(K8sRemovePodLabel(ns, pod, key, &err), &err, "K8sRemovePodLabel");
    assert_int_equal(
        e2e_api("GET", "/api/v1/namespaces/default/pods/compat-pod", NULL, &status, &resp), 0);
    assert_null(strstr(resp, "\"role\""));
    assert_non_null(strstr(resp, "\"app\":\"x\""));
    free(resp);
    /* A missing pod is an error naming it. */
    {
        char missing[] = "no-such-pod";

        assert_int_equal(K8sPatchPodLabel(ns, missing, key, value, &err), -1);
        assert_non_null(strstr(err, "no-such-pod"));
        free(err);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(single_election),
        cmocka_unit_test(epoch_increments_and_key_reusable),
        cmocka_unit_test(run_twice_fails),
        cmocka_unit_test(invalid_durations_fail),
        cmocka_unit_test(sequential_handoff),
        cmocka_unit_test(wait_elected_times_out_and_cancels),
        cmocka_unit_test(wait_elected_after_the_end_says_why),
        cmocka_unit_test(get_holder_from_five_threads),
        cmocka_unit_test(get_holder_not_found),
        cmocka_unit_test(holder_empty_after_death_and_expiry),
        cmocka_unit_test(failover_after_leader_death),
        cmocka_unit_test(watch_holder),
        cmocka_unit_test(pod_labels),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
