/* The end of a term is reported when it ends, through every API,
 * on a server that does not answer.
 *
 * A program on the seed ABI learns that its term is over only when
 * K8sLeaseWaitLost returns; one on the native API from is_leader,
 * on_stopped_leading and k8slease_elector_wait_lost. All of them must say
 * "no longer leader" together, the moment the term ends, never after a hung
 * server has answered (the release and the requests still in flight go on
 * in the background). Each scenario runs a native elector and a seed-ABI
 * election side by side, each on its own Lease, ends their terms one way,
 * and checks:
 *
 *  - the native wait_lost returns within 100 ms of the moment is_leader
 *    turned false (the leader deadline, stats.last_renew_ns +
 *    renew_deadline, or the stop), and never before it;
 *  - K8sLeaseWaitLost returns within 100 ms of its own deadline: the test
 *    stops the server right after it saw a renewal of the seed's Lease
 *    (renewTime W, the wall time of that request's start), so the last
 *    successful renewal is W and the term ends at W + renew_deadline;
 *  - a new election on the same Lease, started at that very moment, is
 *    accepted, and leads with a greater epoch once the server answers.
 *
 * Ways to end a term: the renew deadline with the apiserver stopped for
 * 30 s (SIGSTOP: the kernel still accepts, nothing answers), at 5/3/1 (the
 * timings of Mooncake's master) and 15/10/2 (client-go's); the same with
 * etcd stopped behind a running apiserver (real servers only); another
 * holder written into the Lease, then the server stopped; a cancel while
 * the server is stopped; and the process itself frozen past its deadline
 * (a child process, frozen and thawed by the test). The etcd backend's
 * term ends are in test_etcd (frozen_etcd_reports_the_end_on_time).
 *
 * Runs on k8slease-testserver and, under tests/integration/envtest.sh, on
 * a real kube-apiserver (e2e_ctl drives its processes). */
#define _GNU_SOURCE /* timegm */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include <jansson.h>

#include "e2e.h"
#include "testlib.h"
#include "k8slease.h"
#include "libk8s_lease_wrapper.h"
#include "core/elector.h"

#define MS               INT64_C(1000000)
#define WITHIN_MS        100 /* how late a wait may return after the term ended */
#define ELECT_S          60  /* bound of every wait for an election */
#define RENEW_OBSERVE_MS 30000
#define HANG_US          INT64_C(30000000) /* how long the apiserver stays stopped */

static k8slease_client *client;
static const char *ns;

static int64_t mono_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t wall_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int setup(void **state)
{
    (void)state;
    if (e2e_setup(&client) != 0)
        return -1;
    ns = e2e_namespace("termend");
    return ns ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return e2e_teardown(client);
}

/* ---- the Lease as the server has it ------------------------------------- */

/* "2026-12-02T04:10:00.123456Z" -> µs since the epoch; -1 if malformed. */
static int64_t parse_micro_time(const char *s)
{
    struct tm tm = {0};
    int us = 0, n = 0;

    if (!s ||
        sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d.%6d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
               &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &us, &n) != 7 ||
        strcmp(s + n, "Z") != 0)
        return -1;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return (int64_t)timegm(&tm) * 1000000 + us;
}

static char *lease_path(const char *name)
{
    static char path[512];

    snprintf(path, sizeof(path), "/apis/coordination.k8s.io/v1/namespaces/%s/leases/%s", ns, name);
    return path;
}

/* The Lease as JSON (caller json_decref()s); fails the test if unreadable. */
static json_t *get_lease(const char *name)
{
    long status = 0;
    char *body = NULL;
    json_t *lease;

    if (e2e_api("GET", lease_path(name), NULL, &status, &body) != 0 || status != 200)
        fail_msg("GET lease %s: status %ld: %s", name, status, body ? body : "");
    lease = json_loads(body, 0, NULL);
    free(body);
    assert_non_null(lease);
    return lease;
}

static int64_t renew_time_us(const char *name)
{
    json_t *lease = get_lease(name);
    int64_t t = parse_micro_time(
        json_string_value(json_object_get(json_object_get(lease, "spec"), "renewTime")));

    json_decref(lease);
    assert_true(t > 0);
    return t;
}

/* Wait until the Lease's renewTime changes, then return the new one at
 * once: the caller stops the server right after, so that this renewal is
 * the last successful one (the next is a retry period away). */
static int64_t next_renewal_us(const char *name)
{
    int64_t first = renew_time_us(name), t, until = mono_ns() + RENEW_OBSERVE_MS * MS;

    while ((t = renew_time_us(name)) == first) {
        if (mono_ns() > until)
            fail_msg("lease %s: no renewal within %d ms", name, RENEW_OBSERVE_MS);
        e2e_pause_ms(5);
    }
    return t;
}

/* Another holder takes the Lease (as a candidate of another process that
 * found it expired would): holder "intruder", 1 s, transitions + 1. */
static void intrude(const char *name)
{
    json_t *lease = get_lease(name), *spec = json_object_get(lease, "spec");
    json_int_t transitions = json_integer_value(json_object_get(spec, "leaseTransitions"));
    char now[64], *body;
    long status = 0;
    int64_t us = wall_us();
    time_t secs = (time_t)(us / 1000000);
    struct tm tm;

    gmtime_r(&secs, &tm);
    strftime(now, sizeof(now), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(now + strlen(now), sizeof(now) - strlen(now), ".%06dZ", (int)(us % 1000000));
    json_object_set_new(spec, "holderIdentity", json_string("intruder"));
    json_object_set_new(spec, "leaseDurationSeconds", json_integer(1));
    json_object_set_new(spec, "leaseTransitions", json_integer(transitions + 1));
    json_object_set_new(spec, "acquireTime", json_string(now));
    json_object_set_new(spec, "renewTime", json_string(now));
    body = json_dumps(lease, JSON_COMPACT);
    json_decref(lease);
    if (e2e_api("PUT", lease_path(name), body, &status, NULL) != 0 || status != 200)
        fail_msg("PUT intruder into lease %s: status %ld", name, status);
    free(body);
}

/* ---- one native elector and one seed-ABI election, side by side --------- */

typedef struct timing {
    int ld, rd, rp; /* seconds */
} timing;

typedef struct side {
    /* native */
    e2e_cand rec;
    k8slease_elector *e, *next;
    int64_t epoch, next_epoch;
    int64_t lost_ns; /* wait_lost returned */
    int next_rc;
    char next_err[512];
    /* seed ABI */
    char lease[64], id[64];
    long long seed_epoch;
    int64_t seed_lost_ns, seed_lost_wall_us;
    int seed_rc, seed_rerun_rc;
    char seed_err[512];
    timing t;
    pthread_t native_waiter, seed_waiter;
} side;

static k8slease_elector_options native_options(const char *name, const char *id, timing t)
{
    k8slease_elector_options o = K8SLEASE_ELECTOR_OPTIONS_INIT;

    o.ns = ns;
    o.name = name;
    o.identity = id;
    o.lease_duration_ms = t.ld * 1000;
    o.renew_deadline_ms = t.rd * 1000;
    o.retry_period_ms = t.rp * 1000;
    return o;
}

static k8slease_elector *start_native(side *s, const char *name, int record)
{
    k8slease_elector_options o = native_options(name, s->id, s->t);
    k8slease_elector *e = NULL;

    if (record) {
        o.on_started_leading = e2e_cand_on_started;
        o.on_stopped_leading = e2e_cand_on_stopped;
        o.on_new_leader = e2e_cand_on_new_leader;
        o.user_data = &s->rec;
    }
    if (k8slease_elector_start(&e, client, &o) != 0)
        fail_msg("k8slease_elector_start(%s): %s", name, k8slease_error_last());
    return e;
}

/* The moment the native wait returns, a new elector for the same Lease. */
static void *native_waiter(void *arg)
{
    side *s = arg;
    char name[80];

    if (k8slease_elector_wait_lost(s->e, -1) == 0)
        s->lost_ns = mono_ns();
    snprintf(name, sizeof(name), "%s-native", s->lease);
    s->next_rc = k8slease_elector_start(&s->next, client,
                                        &(k8slease_elector_options){
                                            .version = K8SLEASE_ELECTOR_OPTIONS_VERSION,
                                            .ns = ns,
                                            .name = name,
                                            .identity = s->id,
                                            .lease_duration_ms = s->t.ld * 1000,
                                            .renew_deadline_ms = s->t.rd * 1000,
                                            .retry_period_ms = s->t.rp * 1000,
                                            .release_on_cancel = 1,
                                        });
    if (s->next_rc != 0)
        snprintf(s->next_err, sizeof(s->next_err), "%s", k8slease_error_last());
    return NULL;
}

/* The seed ABI as Mooncake's master drives it: the monitor thread's
 * WaitLost ends the term, and the supervisor campaigns again at once. */
static void *seed_waiter(void *arg)
{
    side *s = arg;
    char *err = NULL;

    s->seed_rc = K8sLeaseWaitLost((char *)ns, s->lease, &err);
    s->seed_lost_ns = mono_ns();
    s->seed_lost_wall_us = wall_us();
    if (s->seed_rc != 0)
        snprintf(s->seed_err, sizeof(s->seed_err), "K8sLeaseWaitLost: %s", err ? err : "");
    free(err);
    err = NULL;
    s->seed_rerun_rc =
        K8sLeaseRunElection((char *)ns, s->lease, s->id, s->t.ld, s->t.rd, s->t.rp, &err);
    if (s->seed_rerun_rc != 0)
        snprintf(s->seed_err, sizeof(s->seed_err), "K8sLeaseRunElection again: %s", err ? err : "");
    free(err);
    return NULL;
}

static void side_start(side *s, const char *tag, timing t)
{
    char name[80], *err = NULL;

    memset(s, 0, sizeof(*s));
    pthread_mutex_init(&s->rec.mu, NULL);
    s->t = t;
    snprintf(s->lease, sizeof(s->lease), "%s-%d%d%d", tag, t.ld, t.rd, t.rp);
    snprintf(s->id, sizeof(s->id), "%s:9000", tag);
    snprintf(name, sizeof(name), "%s-native", s->lease);
    s->e = start_native(s, name, 1);
    if (K8sLeaseRunElection((char *)ns, s->lease, s->id, t.ld, t.rd, t.rp, &err) != 0)
        fail_msg("K8sLeaseRunElection(%s): %s", s->lease, err);
    if (k8slease_elector_wait_elected(s->e, ELECT_S * 1000, &s->epoch) != 0)
        fail_msg("native %s not elected: %s", name, k8slease_error_last());
    if (K8sLeaseWaitElected((char *)ns, s->lease, ELECT_S, &s->seed_epoch, &err) != 0)
        fail_msg("seed %s not elected: %s", s->lease, err);
    assert_int_equal(pthread_create(&s->native_waiter, NULL, native_waiter, s), 0);
    assert_int_equal(pthread_create(&s->seed_waiter, NULL, seed_waiter, s), 0);
}

/* Join a waiter, failing the test if it is not back within ms. */
static void join_within(pthread_t th, const char *what, int ms)
{
    struct timespec until;

    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (long)(ms % 1000) * 1000000;
    if (until.tv_nsec >= 1000000000) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000;
    }
    if (pthread_timedjoin_np(th, NULL, &until) != 0)
        fail_msg("%s did not return within %d ms", what, ms);
}

/* When is_leader turned false for the native elector: the stop, or its
 * leader deadline (the start of its last successful write + renew
 * deadline), whichever came first; its on_stopped_leading no later. */
static int64_t native_term_end(side *s, int64_t stopped_at)
{
    k8slease_elector_stats st = {.version = K8SLEASE_ELECTOR_STATS_VERSION};
    int64_t deadline;

    assert_int_equal(k8slease_elector_stats_get(s->e, &st), 0);
    deadline = st.last_renew_ns + (int64_t)s->t.rd * 1000 * MS;
    return stopped_at && stopped_at < deadline ? stopped_at : deadline;
}

static void check_within(const char *what, int64_t returned_ns, int64_t end_ns)
{
    double late = (double)(returned_ns - end_ns) / MS;

    print_message("  %s returned %+.1f ms after the term ended\n", what, late);
    if (returned_ns < end_ns - 2 * MS)
        fail_msg("%s returned %.1f ms BEFORE the term ended", what, -late);
    if (late > WITHIN_MS)
        fail_msg("%s returned %.1f ms after the term ended (at most %d)", what, late, WITHIN_MS);
}

/* After the fault: both new elections were accepted when the waits
 * returned, and lead (greater epochs) once the server answers again. */
static void side_finish(side *s)
{
    char *err = NULL;
    long long epoch2 = -1;
    int64_t native2 = -1, t0;

    assert_int_equal(s->seed_rc, 0);
    if (s->seed_rerun_rc != 0)
        fail_msg("%s", s->seed_err);
    if (s->next_rc != 0)
        fail_msg("a new native elector at the end of the term: %s", s->next_err);
    if (K8sLeaseWaitElected((char *)ns, s->lease, ELECT_S, &epoch2, &err) != 0)
        fail_msg("the new seed election of %s never led: %s", s->lease, err);
    if (k8slease_elector_wait_elected(s->next, ELECT_S * 1000, &native2) != 0)
        fail_msg("the new native elector never led: %s", k8slease_error_last());
    print_message("  new terms: seed epoch %lld -> %lld, native %lld -> %lld\n", s->seed_epoch,
                  epoch2, (long long)s->epoch, (long long)native2);
    assert_true(epoch2 > s->seed_epoch);
    assert_true(native2 > s->epoch);
    /* The old elector is over by now, or close: its release is bounded. */
    t0 = mono_ns();
    k8slease_elector_free(s->e);
    assert_true(mono_ns() - t0 < (int64_t)(s->t.rd + s->t.rd) * 1000 * MS);
    if (K8sLeaseCancelElection((char *)ns, s->lease, &err) != 0 ||
        K8sLeaseWaitLost((char *)ns, s->lease, &err) != 0)
        fail_msg("cancel %s: %s", s->lease, err);
    k8slease_elector_free(s->next);
    pthread_mutex_destroy(&s->rec.mu);
}

static void need(const char *proc)
{
    if (!e2e_has_ctl(proc)) {
        print_message("skipped: no %s process to drive (%s)\n", proc,
                      e2e_is_testserver() ? "k8slease-testserver has no etcd"
                                          : "run under tests/integration/envtest.sh");
        skip();
    }
}

/* The renew deadline passes while proc (the apiserver, or etcd behind it)
 * is stopped. */
static void deadline_while_stopped(const char *proc, timing t)
{
    side s;
    int64_t w, stopped, seed_end_wall;
    const int bound = (t.rd + 10) * 1000;

    need(proc);
    side_start(&s, proc[0] == 'a' ? "hang" : "etcdhang", t);
    w = next_renewal_us(s.lease);
    assert_int_equal(e2e_ctl(proc, "stop"), 0);
    stopped = wall_us();
    print_message("%s stopped %.0f ms after a renewal of the seed's lease, at %d/%d/%d\n", proc,
                  (double)(stopped - w) / 1000, t.ld, t.rd, t.rp);
    join_within(s.native_waiter, "k8slease_elector_wait_lost", bound);
    join_within(s.seed_waiter, "K8sLeaseWaitLost", bound);
    check_within("k8slease_elector_wait_lost", s.lost_ns, native_term_end(&s, 0));
    /* The seed's term ends at W + RD, W the start of its last successful
     * renewal: the one just seen, unless the stop took so long that the
     * next one got through (then only the bound is known: the term ended
     * before the stop + RD). */
    seed_end_wall = w + (int64_t)t.rd * 1000000;
    if (stopped - w < (int64_t)t.rp * 1000000 * 8 / 10) {
        check_within("K8sLeaseWaitLost", s.seed_lost_wall_us * 1000, seed_end_wall * 1000);
    } else {
        print_message("  the stop took %.0f ms, most of a retry period: checking the bound "
                      "only\n",
                      (double)(stopped - w) / 1000);
        check_within("K8sLeaseWaitLost (bound)", s.seed_lost_wall_us * 1000,
                     (stopped + (int64_t)t.rd * 1000000) * 1000 - WITHIN_MS * MS);
    }
    assert_false(k8slease_elector_is_leader(s.e));
    /* A real apiserver stays stopped 30 s in all (the figure): the
     * new elections' requests wait for it, and lead once it answers. */
    if (proc[0] == 'a' && !e2e_is_testserver())
        while (wall_us() - stopped < HANG_US)
            e2e_pause_ms(100);
    assert_int_equal(e2e_ctl(proc, "cont"), 0);
    side_finish(&s);
}

static void deadline_apiserver_stopped_531(void **state)
{
    (void)state;
    deadline_while_stopped("apiserver", (timing){5, 3, 1});
}

static void deadline_apiserver_stopped_15102(void **state)
{
    (void)state;
    deadline_while_stopped("apiserver", (timing){15, 10, 2});
}

static void deadline_etcd_stopped_531(void **state)
{
    (void)state;
    deadline_while_stopped("etcd", (timing){5, 3, 1});
}

/* Another holder is written into the Leases, then the server hangs: the
 * terms end on what the watch (or the renewal's 409 and its read) shows,
 * at the latest at the renew deadline; the new elections wait for the
 * intruder's 1 s lease to expire once the server answers. */
static void other_holder_then_hang(void **state)
{
    side s;
    char name[80];
    int64_t written, stopped_at;
    timing t = {5, 3, 1};

    (void)state;
    need("apiserver");
    side_start(&s, "intruded", t);
    snprintf(name, sizeof(name), "%s-native", s.lease);
    intrude(name);
    intrude(s.lease);
    written = mono_ns();
    assert_int_equal(e2e_ctl("apiserver", "stop"), 0);
    join_within(s.native_waiter, "k8slease_elector_wait_lost", (t.rd + 10) * 1000);
    join_within(s.seed_waiter, "K8sLeaseWaitLost", (t.rd + 10) * 1000);
    pthread_mutex_lock(&s.rec.mu);
    stopped_at = s.rec.stopped_at * MS;
    pthread_mutex_unlock(&s.rec.mu);
    check_within("k8slease_elector_wait_lost", s.lost_ns, native_term_end(&s, stopped_at));
    print_message("  K8sLeaseWaitLost returned %.1f ms after the intruder's write\n",
                  (double)(s.seed_lost_ns - written) / MS);
    if (s.seed_lost_ns - written > ((int64_t)t.rd * 1000 + WITHIN_MS) * MS)
        fail_msg("K8sLeaseWaitLost returned %.0f ms after another holder took the Lease: "
                 "later than the renew deadline (%d s)",
                 (double)(s.seed_lost_ns - written) / MS, t.rd);
    assert_int_equal(e2e_ctl("apiserver", "cont"), 0);
    side_finish(&s);
}

typedef struct stopper {
    k8slease_elector *e;
    int64_t returned_ns;
} stopper;

static void *stop_native(void *arg)
{
    stopper *st = arg;

    k8slease_elector_stop(st->e, 1);
    st->returned_ns = mono_ns();
    return NULL;
}

/* Cancelled while the server hangs: the callers are told at once; the
 * release waits for the server in the background, bounded by the renew
 * deadline (k8slease_elector_stop, which waits for it, returns by then). */
static void cancel_while_server_hangs(timing t)
{
    side s;
    stopper st;
    pthread_t th;
    char *err = NULL;
    int64_t cancelled, seed_cancelled;
    const int64_t release_bound = ((int64_t)t.rd * 1000 + (t.rd * 1000) / 2 + 5000) * MS;

    need("apiserver");
    side_start(&s, "cancel", t);
    assert_int_equal(e2e_ctl("apiserver", "stop"), 0);
    st.e = s.e;
    st.returned_ns = 0;
    cancelled = mono_ns();
    assert_int_equal(pthread_create(&th, NULL, stop_native, &st), 0);
    seed_cancelled = mono_ns();
    if (K8sLeaseCancelElection((char *)ns, s.lease, &err) != 0)
        fail_msg("K8sLeaseCancelElection: %s", err);
    assert_true(mono_ns() - seed_cancelled < WITHIN_MS * MS); /* does not wait */
    join_within(s.native_waiter, "k8slease_elector_wait_lost", 10000);
    join_within(s.seed_waiter, "K8sLeaseWaitLost", 10000);
    check_within("k8slease_elector_wait_lost", s.lost_ns, cancelled);
    check_within("K8sLeaseWaitLost", s.seed_lost_ns, seed_cancelled);
    assert_false(k8slease_elector_is_leader(s.e));
    /* The release gives up while the server still hangs. */
    join_within(th, "k8slease_elector_stop on a hung server", (int)(release_bound / MS));
    print_message("  k8slease_elector_stop returned %.0f ms after the cancel (renew deadline %d "
                  "s)\n",
                  (double)(st.returned_ns - cancelled) / MS, t.rd);
    assert_int_equal(e2e_ctl("apiserver", "cont"), 0);
    side_finish(&s);
}

static void cancel_while_server_hangs_531(void **state)
{
    (void)state;
    cancel_while_server_hangs((timing){5, 3, 1});
}

static void cancel_while_server_hangs_15102(void **state)
{
    (void)state;
    cancel_while_server_hangs((timing){15, 10, 2});
}

/* ---- the release waits for the threads in wait_lost ---------------------
 *
 * A graceful release frees the Lease for the next candidate, which takes
 * it within a millisecond or two; a thread woken in wait_lost may run
 * later than that. So the release is written only once every thread that
 * waited in wait_lost (K8sLeaseWaitLost) when the term ended has returned:
 * the test holds such a thread where the end of the term woke it
 * (kl__elector_lost_hook: a thread the scheduler has not run yet), and
 * checks that the Lease names its holder until the thread is let go; and
 * that a thread held past the release deadline costs the release, not the
 * stop (the Lease then expires on its own). */

typedef struct lost_waiter {
    const char *lease;   /* seed ABI: K8sLeaseWaitLost on it; else ... */
    k8slease_elector *e; /* ... k8slease_elector_wait_lost */
    int rc;
    int64_t returned_ns;
    pthread_t th;
} lost_waiter;

static void *wait_lost_thread(void *arg)
{
    lost_waiter *w = arg;
    char *err = NULL;

    if (w->lease) {
        w->rc = K8sLeaseWaitLost((char *)ns, (char *)w->lease, &err);
        free(err);
    } else {
        w->rc = k8slease_elector_wait_lost(w->e, -1);
    }
    w->returned_ns = mono_ns();
    return NULL;
}

/* Start w's thread; once it waits in wait_lost, the end of the term will
 * hold it. */
static void start_waiter(lost_waiter *w)
{
    assert_int_equal(kl__elector_lost_waiting(), 0);
    assert_int_equal(pthread_create(&w->th, NULL, wait_lost_thread, w), 0);
    e2e_lost_await_waiting();
}

static void let_go(lost_waiter *w, const char *what)
{
    e2e_lost_let_go();
    join_within(w->th, what, 10000);
    assert_int_equal(w->rc, 0);
}

static const char *holder_of(const char *name, char *buf, size_t size)
{
    json_t *lease = get_lease(name);
    const char *h =
        json_string_value(json_object_get(json_object_get(lease, "spec"), "holderIdentity"));

    snprintf(buf, size, "%s", h ? h : "");
    json_decref(lease);
    return buf;
}

/* For ms, every read of the Lease names holder: no release was written. */
static void still_held(const char *name, const char *holder, int ms)
{
    int64_t until = mono_ns() + ms * MS;
    char h[128];

    do {
        if (strcmp(holder_of(name, h, sizeof(h)), holder) != 0)
            fail_msg("lease %s: holder \"%s\" while a thread in wait_lost was held (expected "
                     "\"%s\": released before it returned)",
                     name, h, holder);
        e2e_pause_ms(20);
    } while (mono_ns() < until);
}

static void await_released(const char *name)
{
    int64_t until = mono_ns() + 10000 * MS;
    char h[128];

    while (holder_of(name, h, sizeof(h))[0] != '\0') {
        if (mono_ns() > until)
            fail_msg("lease %s not released within 10 s of the waiter's return (holder \"%s\")",
                     name, h);
        e2e_pause_ms(10);
    }
}

static k8slease_elector *start_held(const char *name, const char *id, timing t)
{
    k8slease_elector_options o = native_options(name, id, t);
    k8slease_elector *e = NULL;

    o.release_on_cancel = 1;
    if (k8slease_elector_start(&e, client, &o) != 0 ||
        k8slease_elector_wait_elected(e, ELECT_S * 1000, NULL) != 0)
        fail_msg("native %s: %s", name, k8slease_error_last());
    return e;
}

static void release_waits_for_wait_lost(void **state)
{
    const timing t = {5, 3, 1};
    const char *id = "held:9000";
    lost_waiter seed = {.lease = "held-seed"}, native = {0};
    stopper st = {0};
    pthread_t th;
    char *err = NULL;
    long long epoch;
    int64_t t0;

    (void)state;
    if (K8sLeaseRunElection((char *)ns, (char *)seed.lease, (char *)id, t.ld, t.rd, t.rp, &err) !=
            0 ||
        K8sLeaseWaitElected((char *)ns, (char *)seed.lease, ELECT_S, &epoch, &err) != 0)
        fail_msg("seed %s: %s", seed.lease, err);
    start_waiter(&seed);
    t0 = mono_ns();
    if (K8sLeaseCancelElection((char *)ns, (char *)seed.lease, &err) != 0)
        fail_msg("K8sLeaseCancelElection: %s", err);
    e2e_lost_await_held();
    still_held(seed.lease, id, 1000);
    let_go(&seed, "K8sLeaseWaitLost");
    await_released(seed.lease);
    print_message("  seed ABI: K8sLeaseWaitLost held 1 s in the wait, returned %.0f ms after the "
                  "cancel; the Lease released after that\n",
                  (double)(seed.returned_ns - t0) / MS);

    native.e = st.e = start_held("held-native", id, t);
    start_waiter(&native);
    assert_int_equal(pthread_create(&th, NULL, stop_native, &st), 0);
    e2e_lost_await_held();
    assert_false(k8slease_elector_is_leader(native.e));
    still_held("held-native", id, 1000);
    if (pthread_tryjoin_np(th, NULL) == 0)
        fail_msg("k8slease_elector_stop returned, its release done, while a thread in wait_lost "
                 "was held");
    let_go(&native, "k8slease_elector_wait_lost");
    join_within(th, "k8slease_elector_stop", 10000);
    await_released("held-native");
    k8slease_elector_free(native.e);
}

/* Held past the release deadline (the renew deadline): the stop ends the
 * election without a release, and the Lease keeps our name until it
 * expires. */
static void wait_lost_held_past_release_deadline(void **state)
{
    const timing t = {5, 3, 1};
    const char *id = "held:9000";
    lost_waiter native = {0};
    stopper st = {0};
    pthread_t th;
    int64_t t0;

    (void)state;
    native.e = st.e = start_held("held-long", id, t);
    start_waiter(&native);
    t0 = mono_ns();
    assert_int_equal(pthread_create(&th, NULL, stop_native, &st), 0);
    e2e_lost_await_held();
    join_within(th, "k8slease_elector_stop with a thread held in wait_lost", t.rd * 1000 * 10);
    print_message("  k8slease_elector_stop returned %.0f ms after it was called (renew deadline "
                  "%d s), the waiter still held\n",
                  (double)(st.returned_ns - t0) / MS, t.rd);
    assert_true(st.returned_ns - t0 >= (int64_t)t.rd * 1000 * MS - 2 * MS);
    still_held("held-long", id, 100);
    let_go(&native, "k8slease_elector_wait_lost");
    k8slease_elector_free(native.e);
}

/* ---- the process frozen past its deadline --------------------------------
 *
 * A child process (this program, "child NS LEASE") leads through both
 * APIs; the test freezes it (SIGSTOP) past the renew deadline and thaws
 * it. Its waits must return at once after the thaw, and new elections
 * started then must lead. The child reports on stdout:
 *   elected SEED_EPOCH NATIVE_EPOCH
 *   lost seed|native MONO_NS RERUN_RC
 *   led SEED_EPOCH NATIVE_EPOCH */

static void *child_native_waiter(void *arg)
{
    side *s = arg;

    native_waiter(s);
    printf("lost native %lld %d\n", (long long)s->lost_ns, s->next_rc);
    fflush(stdout);
    return NULL;
}

static void *child_seed_waiter(void *arg)
{
    side *s = arg;

    seed_waiter(s);
    printf("lost seed %lld %d\n", (long long)s->seed_lost_ns, s->seed_rerun_rc);
    fflush(stdout);
    return NULL;
}

static int child_main(const char *child_ns, const char *lease)
{
    side s;
    char name[80], *err = NULL;
    long long epoch2 = -1;
    int64_t native2 = -1;
    pthread_t a, b;

    ns = child_ns;
    memset(&s, 0, sizeof(s));
    pthread_mutex_init(&s.rec.mu, NULL);
    s.t = (timing){5, 3, 1};
    snprintf(s.lease, sizeof(s.lease), "%s", lease);
    snprintf(s.id, sizeof(s.id), "frozen:9000");
    snprintf(name, sizeof(name), "%s-native", lease);
    if (k8slease_client_new(&client, NULL) != 0)
        return fprintf(stderr, "child: %s\n", k8slease_error_last()), 1;
    s.e = start_native(&s, name, 0);
    if (K8sLeaseRunElection((char *)ns, s.lease, s.id, 5, 3, 1, &err) != 0 ||
        K8sLeaseWaitElected((char *)ns, s.lease, ELECT_S, &s.seed_epoch, &err) != 0)
        return fprintf(stderr, "child: seed: %s\n", err), 1;
    if (k8slease_elector_wait_elected(s.e, ELECT_S * 1000, &s.epoch) != 0)
        return fprintf(stderr, "child: native: %s\n", k8slease_error_last()), 1;
    printf("elected %lld %lld\n", s.seed_epoch, (long long)s.epoch);
    fflush(stdout);
    pthread_create(&a, NULL, child_native_waiter, &s);
    pthread_create(&b, NULL, child_seed_waiter, &s);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    if (s.next_rc != 0 || s.seed_rerun_rc != 0)
        return fprintf(stderr, "child: %s %s\n", s.next_err, s.seed_err), 1;
    if (K8sLeaseWaitElected((char *)ns, s.lease, ELECT_S, &epoch2, &err) != 0)
        return fprintf(stderr, "child: seed again: %s\n", err), 1;
    if (k8slease_elector_wait_elected(s.next, ELECT_S * 1000, &native2) != 0)
        return fprintf(stderr, "child: native again: %s\n", k8slease_error_last()), 1;
    printf("led %lld %lld\n", epoch2, (long long)native2);
    fflush(stdout);
    k8slease_elector_free(s.e);
    k8slease_elector_free(s.next);
    K8sLeaseCancelElection((char *)ns, s.lease, &err);
    K8sLeaseWaitLost((char *)ns, s.lease, &err);
    k8slease_client_free(client);
    return 0;
}

/* Read one line of the child's within ms (into buf); fails the test
 * otherwise. */
static void read_line(int fd, char *buf, size_t size, int ms, const char *what)
{
    if (kl_test_read_line(fd, buf, size, ms) != 0)
        fail_msg("child: no \"%s\" line within %d ms (got \"%s\")", what, ms, buf);
}

static char self_path[4096];

static void process_frozen_past_deadline(void **state)
{
    int out[2];
    pid_t pid;
    char line[256], kind[16];
    long long seed_epoch, native_epoch, when;
    int rc, status;
    int64_t thawed;

    (void)state;
    assert_int_equal(pipe(out), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(out[1], 1);
        close(out[0]);
        close(out[1]);
        execl(self_path, self_path, "child", ns, "frozen", (char *)NULL);
        _exit(127);
    }
    close(out[1]);
    read_line(out[0], line, sizeof(line), ELECT_S * 1000, "elected");
    assert_int_equal(sscanf(line, "elected %lld %lld", &seed_epoch, &native_epoch), 2);
    /* Frozen for the renew deadline and 2 s more: both terms end while it
     * sleeps; it must say so as soon as it runs again. */
    assert_int_equal(kill(pid, SIGSTOP), 0);
    e2e_pause_ms(5000);
    thawed = mono_ns();
    assert_int_equal(kill(pid, SIGCONT), 0);
    for (int i = 0; i < 2; i++) {
        read_line(out[0], line, sizeof(line), 10000, "lost");
        assert_int_equal(sscanf(line, "lost %15s %lld %d", kind, &when, &rc), 3);
        check_within(strcmp(kind, "seed") == 0 ? "K8sLeaseWaitLost (thawed)"
                                               : "k8slease_elector_wait_lost (thawed)",
                     when, thawed);
        assert_int_equal(rc, 0);
    }
    read_line(out[0], line, sizeof(line), ELECT_S * 1000, "led");
    {
        long long s2, n2;

        assert_int_equal(sscanf(line, "led %lld %lld", &s2, &n2), 2);
        assert_true(s2 > seed_epoch);
        assert_true(n2 > native_epoch);
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close(out[0]);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(deadline_apiserver_stopped_531),
        cmocka_unit_test(deadline_apiserver_stopped_15102),
        cmocka_unit_test(deadline_etcd_stopped_531),
        cmocka_unit_test(other_holder_then_hang),
        cmocka_unit_test(cancel_while_server_hangs_531),
        cmocka_unit_test(cancel_while_server_hangs_15102),
        cmocka_unit_test(process_frozen_past_deadline),
        cmocka_unit_test(release_waits_for_wait_lost),
        cmocka_unit_test(wait_lost_held_past_release_deadline),
    };
    ssize_t n;

    if (argc == 4 && strcmp(argv[1], "child") == 0)
        return child_main(argv[2], argv[3]);
    n = readlink("/proc/self/exe", self_path, sizeof(self_path) - 1);
    if (n <= 0)
        return fprintf(stderr, "cannot read /proc/self/exe\n"), 1;
    self_path[n] = '\0';
    signal(SIGPIPE, SIG_IGN);
    setenv("K8SLEASE_LOG_LEVEL", "warn", 0);
    if (getenv("K8SLEASE_TEST_FILTER") && getenv("K8SLEASE_TEST_FILTER")[0])
        cmocka_set_test_filter(getenv("K8SLEASE_TEST_FILTER")); /* e.g. "*wait_lost*" */
    return cmocka_run_group_tests(tests, setup, teardown);
}
