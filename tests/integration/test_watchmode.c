/* Watch mode end to end: followers watch the Lease instead of polling, act
 * on a release at once and on a crash exactly at the expiry, fall back to
 * polling when the watch stalls, resume and re-list; watches of one Lease in
 * one client share one stream; one client runs hundreds of elections on its
 * one thread; the client's Pod informer (k8s/informer.h, crash failover)
 * follows a Pod's labels and status, keeps a quiet Pod stream healthy, and
 * backs off when it may not list pods. Tests that need fault injection or
 * the server's statistics skip on another API server.
 *
 * Bounds on speed are at least ten times what is expected: a handover on a
 * watch takes a few ms here (one event, one GET, one UPDATE), so "well under
 * the retry period" is asserted as RP / 2 with RP = 1 s; poll-only mode is
 * asserted on nothing about speed. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include <jansson.h>

#include "e2e.h"
#include "procnet.h"
#include "harness.h"
#include "k8slease.h"
#include "core/client.h"
#include "k8s/client.h"
#include "core/loop.h"
#include "k8s/informer.h"
#include "k8s/pod.h"

#define LD_MS   3000
#define RD_MS   2000
#define RP_MS   1000
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

/* Another client (another "process"), told apart by its User-Agent. */
static k8slease_client *new_client(const char *user_agent)
{
    k8slease_client_options o = K8SLEASE_CLIENT_OPTIONS_INIT;
    k8slease_client *c = NULL;

    o.kubeconfig = getenv("KUBECONFIG");
    o.user_agent = user_agent;
    o.log_cb = e2e_log_to_stderr; /* warnings and errors: the story of a failure */
    o.log_level = K8SLEASE_LOG_WARN;
    if (k8slease_client_new(&c, &o) != 0)
        fail_msg("client_new(%s): %s", user_agent, k8slease_error_last());
    return c;
}

/* What one candidate saw (the recorder of e2e.h). */
typedef e2e_cand cand;

typedef struct timing {
    int64_t ld, rd, rp;
    int poll_only;
    int release;
} timing;

static const timing fast = {LD_MS, RD_MS, RP_MS, 0, 1};

static k8slease_elector *start_with(k8slease_client *cl, const char *ns, const char *name,
                                    const char *id, cand *c, const timing *t)
{
    k8slease_elector_options o = K8SLEASE_ELECTOR_OPTIONS_INIT;
    k8slease_elector *e = NULL;

    o.ns = ns;
    o.name = name;
    o.identity = id;
    o.lease_duration_ms = t->ld;
    o.renew_deadline_ms = t->rd;
    o.retry_period_ms = t->rp;
    o.poll_only = t->poll_only;
    o.release_on_cancel = t->release;
    if (c) {
        memset(c, 0, sizeof(*c));
        pthread_mutex_init(&c->mu, NULL);
        o.on_started_leading = e2e_cand_on_started;
        o.on_stopped_leading = e2e_cand_on_stopped;
        o.on_new_leader = e2e_cand_on_new_leader;
        o.user_data = c;
    }
    if (k8slease_elector_start(&e, cl, &o) != 0)
        fail_msg("elector_start(%s): %s", id, k8slease_error_last());
    return e;
}

static k8slease_elector *start(k8slease_client *cl, const char *name, const char *id, cand *c)
{
    return start_with(cl, NULL, name, id, c, &fast);
}

static void elected(k8slease_elector *e, const char *who)
{
    int rc = k8slease_elector_wait_elected(e, WAIT_MS, NULL);

    if (rc != 0)
        fail_msg("%s not elected within %d ms: %s", who, WAIT_MS, k8slease_error_last());
}

static k8slease_elector_stats stats(const k8slease_elector *e)
{
    k8slease_elector_stats st = {.version = K8SLEASE_ELECTOR_STATS_VERSION};

    assert_int_equal(k8slease_elector_stats_get(e, &st), 0);
    return st;
}

/* Wait (bounded) until the follower has seen who leads, on a healthy watch. */
static void wait_following(k8slease_elector *e, cand *c, const char *leader)
{
    for (int64_t deadline = e2e_mono_ms() + WAIT_MS;; e2e_pause_ms(10)) {
        int seen;

        pthread_mutex_lock(&c->mu);
        seen = strcmp(c->leader, leader) == 0;
        pthread_mutex_unlock(&c->mu);
        if (seen && stats(e).watch_healthy)
            return;
        if (e2e_mono_ms() > deadline)
            fail_msg("follower did not see \"%s\" on a healthy watch within %d ms", leader,
                     WAIT_MS);
    }
}

static int64_t started_at(cand *c)
{
    int64_t t;

    pthread_mutex_lock(&c->mu);
    t = c->started_at;
    pthread_mutex_unlock(&c->mu);
    return t;
}

/* ---- the test server's statistics and controls ---- */

static json_t *server_stats(void)
{
    char *resp = NULL;
    long status = 0;
    json_t *root;

    assert_int_equal(ts_control(e2e_server(), "GET", "/testserver/v1/stats", NULL, &status, &resp),
                     0);
    assert_int_equal(status, 200);
    root = json_loads(resp, 0, NULL);
    free(resp);
    assert_non_null(root);
    return root;
}

/* A real server's count of open Lease watches, all clients:
 * apiserver_longrunning_requests{resource="leases",verb="WATCH"} summed. */
static long real_lease_watches_open(void)
{
    char *metrics = NULL, *line, *save = NULL;
    long status = 0;
    double n = 0;

    assert_int_equal(e2e_api("GET", "/metrics", NULL, &status, &metrics), 0);
    assert_int_equal(status, 200);
    for (line = strtok_r(metrics, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        const char *value = strrchr(line, ' ');

        if (!strncmp(line, "apiserver_longrunning_requests{", 31) &&
            strstr(line, "resource=\"leases\"") && strstr(line, "verb=\"WATCH\"") && value)
            n += strtod(value + 1, NULL);
    }
    free(metrics);
    return (long)n;
}

static long watches_open(void)
{
    if (!e2e_is_testserver())
        return real_lease_watches_open();
    json_t *root = server_stats();
    long n = (long)json_integer_value(json_object_get(json_object_get(root, "watches"), "open"));

    json_decref(root);
    return n;
}

static long watches_total(void)
{
    json_t *root = server_stats();
    long n = (long)json_integer_value(json_object_get(json_object_get(root, "watches"), "total"));

    json_decref(root);
    return n;
}

/* Answers 200 to requests of this verb ("list", "get", ...). */
static long verb_ok(const char *verb)
{
    json_t *root = server_stats();
    json_t *v =
        json_object_get(json_object_get(json_object_get(root, "requests"), "by_verb"), verb);
    long n = (long)json_integer_value(json_object_get(v, "200"));

    json_decref(root);
    return n;
}

static void control(const char *path, const char *body, long expect)
{
    long status = 0;

    assert_int_equal(ts_control(e2e_server(), "POST", path, body, &status, NULL), 0);
    assert_int_equal(status, expect);
}

static void delete_faults(void)
{
    long status = 0;

    assert_int_equal(
        ts_control(e2e_server(), "DELETE", "/testserver/v1/faults", NULL, &status, NULL), 0);
    assert_int_equal(status, 200);
}

static void wait_watches_open(long n)
{
    for (int64_t deadline = e2e_mono_ms() + WAIT_MS; watches_open() != n; e2e_pause_ms(20))
        if (e2e_mono_ms() > deadline)
            fail_msg("watches open: %ld, expected %ld within %d ms", watches_open(), n, WAIT_MS);
}

/* ---- tests ---- */

/* RP 2 s as in client-go's defaults: a release is acted on within RP / 2,
 * where polling would take RP to 2.2 RP. */
static void release_taken_over_at_once(void **state)
{
    static const timing defaults = {15000, 10000, 2000, 0, 1};
    k8slease_client *ca = new_client("wm-release-a"), *cb = new_client("wm-release-b");
    cand a_, b_;
    k8slease_elector *a, *b;
    int64_t t0, dt;

    (void)state;
    a = start_with(ca, NULL, "wm-release", "a:1", &a_, &defaults);
    elected(a, "a");
    b = start_with(cb, NULL, "wm-release", "b:1", &b_, &defaults);
    wait_following(b, &b_, "a:1");
    t0 = e2e_mono_ms();
    assert_int_equal(k8slease_elector_stop(a, 1), 0);
    elected(b, "b");
    dt = started_at(&b_) - t0;
    print_message("handover after release: %lld ms (retry period %lld ms)\n", (long long)dt,
                  (long long)defaults.rp);
    assert_true(dt < defaults.rp / 2);
    k8slease_elector_free(a);
    k8slease_elector_free(b);
    k8slease_client_free(ca);
    k8slease_client_free(cb);
}

/* The leader dies (stops renewing, no release): the follower acquires no
 * earlier than lease_duration after the last write it could have seen
 * (the start of the leader's last renewal), and no later than
 * lease_duration (+ RP/20 jitter + a GET and an UPDATE) after the death,
 * asserted with RP / 2 of margin. */
static void failover_exactly_at_expiry(void **state)
{
    k8slease_client *ca = new_client("wm-death-a"), *cb = new_client("wm-death-b");
    timing no_release = fast;
    cand a_, b_;
    k8slease_elector *a, *b;
    int64_t died, last_renew, t;

    (void)state;
    no_release.release = 0;
    a = start_with(ca, NULL, "wm-death", "a:1", &a_, &no_release);
    elected(a, "a");
    b = start(cb, "wm-death", "b:1", &b_);
    wait_following(b, &b_, "a:1");
    assert_int_equal(k8slease_elector_stop(a, 0), 0);
    died = e2e_mono_ms();
    last_renew = stats(a).last_renew_ns / 1000000;
    elected(b, "b");
    t = started_at(&b_);
    print_message("acquired %lld ms after the last renewal started, %lld ms after the leader "
                  "died (lease duration %d ms)\n",
                  (long long)(t - last_renew), (long long)(t - died), LD_MS);
    assert_true(t >= last_renew + LD_MS);
    assert_true(t < died + LD_MS + RP_MS / 2);
    /* on the watch, not by polling: one GET at the start, one at the expiry */
    assert_true(stats(b).gets <= 3);
    k8slease_elector_free(a);
    k8slease_elector_free(b);
    k8slease_client_free(ca);
    k8slease_client_free(cb);
}

/* While the watch is healthy a follower sends nothing; a poll-only one
 * polls every retry period and opens no watch. */
static void followers_do_not_poll(void **state)
{
    k8slease_client *cp = new_client("wm-quiet-poll");
    timing poll = fast;
    cand a_, b_, c_;
    k8slease_elector *a, *b, *c;
    k8slease_elector_stats b0, b1, c0, c1;
    long total = 0;

    (void)state;
    poll.poll_only = 1;
    a = start(client, "wm-quiet", "a:1", &a_);
    elected(a, "a");
    b = start(client, "wm-quiet", "b:1", &b_);
    wait_following(b, &b_, "a:1");
    if (e2e_is_testserver())
        total = watches_total();
    c = start_with(cp, NULL, "wm-quiet", "c:1", &c_, &poll);
    b0 = stats(b);
    c0 = stats(c);
    e2e_pause_ms(5 * RP_MS);
    b1 = stats(b);
    c1 = stats(c);
    print_message("in %d ms: watching follower %llu GETs, %llu events; poll-only follower %llu "
                  "GETs\n",
                  5 * RP_MS, (unsigned long long)(b1.gets - b0.gets),
                  (unsigned long long)(b1.watch_events - b0.watch_events),
                  (unsigned long long)(c1.gets - c0.gets));
    assert_int_equal(b1.gets, b0.gets);
    assert_int_equal(b1.requests, b0.requests);
    assert_true(b1.watch_events > b0.watch_events); /* the leader's renewals */
    assert_true(b1.watch_healthy);
    assert_true(c1.gets >= c0.gets + 2);
    assert_int_equal(c1.watch_events, 0);
    assert_int_equal(c1.watch_healthy, 0);
    if (e2e_is_testserver())
        assert_int_equal(watches_total(), total); /* c opened none */
    k8slease_elector_free(c);
    k8slease_elector_free(a);
    k8slease_elector_free(b);
    k8slease_client_free(cp);
}

typedef struct counts_call {
    kl__loop *loop;
    kl__loop_counts c;
} counts_call;

static void counts_on_loop(void *arg)
{
    counts_call *cc = arg;

    kl__loop_counts_get(cc->loop, &cc->c);
}

static kl__loop_counts loop_counts(k8slease_client *cl)
{
    counts_call cc = {cl->loop, {0, 0}};

    assert_int_equal(kl__loop_call(cl->loop, counts_on_loop, &cc), 0);
    return cc.c;
}

/* No idle work: with one election held, the leader's loop runs
 * one timer per renewal (the renewal's), the follower's none (its watch's
 * health checks and its expiry move with each event instead of waking it);
 * both wait once per renewal and per arrival of data. Bounds with slack
 * for a loaded machine: a renewal late by more than 2 retry periods makes
 * the follower probe its watch (one timer, one more wait). */
static void idle_loops_wake_for_renewals_only(void **state)
{
    k8slease_client *cl = new_client("wm-idle-leader"), *cf = new_client("wm-idle-follower");
    cand a_, b_;
    k8slease_elector *a, *b;
    kl__loop_counts l0, l1, f0, f1;
    uint64_t r0, renewals;

    (void)state;
    a = start(cl, "wm-idle", "a:1", &a_);
    elected(a, "a");
    b = start(cf, "wm-idle", "b:1", &b_);
    wait_following(b, &b_, "a:1");
    e2e_pause_ms(RP_MS); /* past the start's own requests */
    r0 = stats(a).renewals;
    l0 = loop_counts(cl);
    f0 = loop_counts(cf);
    e2e_pause_ms(8 * RP_MS);
    l1 = loop_counts(cl);
    f1 = loop_counts(cf);
    renewals = stats(a).renewals - r0;
    print_message("%llu renewals: leader's loop %llu timers, %llu waits; follower's %llu timers, "
                  "%llu waits\n",
                  (unsigned long long)renewals, (unsigned long long)(l1.timers - l0.timers),
                  (unsigned long long)(l1.waits - l0.waits),
                  (unsigned long long)(f1.timers - f0.timers),
                  (unsigned long long)(f1.waits - f0.waits));
    assert_true(renewals >= 4);
    assert_true(l1.timers - l0.timers <= renewals + 1 + renewals / 4);
    assert_true(f1.timers - f0.timers <= 1 + renewals / 4);
    /* Each TLS record may come on its own. Leader: the renewal's timer,
     * the server's WINDOW_UPDATE (kube-apiserver), the answer's HEADERS
     * and DATA, its own event, a bookmark (the test server's come every
     * second); follower: the event, a bookmark. */
    assert_true(l1.waits - l0.waits <= 6 * renewals + 2);
    assert_true(f1.waits - f0.waits <= 3 * renewals + 2);
    k8slease_elector_free(b);
    k8slease_elector_free(a);
    k8slease_client_free(cf);
    k8slease_client_free(cl);
}

/* poll_only: client-go's behaviour, still correct (nothing about speed). */
static void poll_only_still_takes_over(void **state)
{
    timing poll = fast;
    cand a_, b_;
    k8slease_elector *a, *b;

    (void)state;
    poll.poll_only = 1;
    a = start_with(client, NULL, "wm-poll", "a:1", &a_, &poll);
    elected(a, "a");
    b = start_with(client, NULL, "wm-poll", "b:1", &b_, &poll);
    assert_int_equal(k8slease_elector_wait_elected(b, 2 * RP_MS, NULL), K8SLEASE_ETIMEOUT);
    assert_int_equal(k8slease_elector_stop(a, 1), 0);
    elected(b, "b");
    assert_int_equal(stats(b).watch_events, 0);
    assert_true(stats(b).gets >= 2);
    k8slease_elector_free(a);
    k8slease_elector_free(b);
}

/* A watch frozen by the server (no events, no bookmarks): the follower
 * notices within the health window, polls, and still fails over. */
static void frozen_watch_falls_back_to_polling(void **state)
{
    k8slease_client *ca, *cb;
    timing no_release = fast;
    cand a_, b_;
    k8slease_elector *a, *b;
    uint64_t gets;
    int64_t died;

    (void)state;
    e2e_need_testserver("needs a watch frozen on its own (SIGSTOP would freeze the leader too)");
    ca = new_client("wm-frozen-a");
    cb = new_client("wm-frozen-b");
    no_release.release = 0;
    a = start_with(ca, NULL, "wm-frozen", "a:1", &a_, &no_release);
    elected(a, "a");
    b = start(cb, "wm-frozen", "b:1", &b_);
    wait_following(b, &b_, "a:1");
    control("/testserver/v1/faults",
            "{\"kind\":\"freeze_watch\",\"match\":{\"user_agent\":\"wm-frozen-b\"}}", 201);
    for (int64_t deadline = e2e_mono_ms() + WAIT_MS; stats(b).watch_healthy; e2e_pause_ms(20))
        if (e2e_mono_ms() > deadline)
            fail_msg("frozen watch still healthy after %d ms", WAIT_MS);
    gets = stats(b).gets;
    assert_int_equal(k8slease_elector_stop(a, 0), 0);
    died = e2e_mono_ms();
    elected(b, "b");
    print_message("frozen watch: took over %lld ms after the leader died, %llu GETs meanwhile\n",
                  (long long)(started_at(&b_) - died), (unsigned long long)(stats(b).gets - gets));
    assert_true(stats(b).gets > gets);
    delete_faults();
    k8slease_elector_free(a);
    k8slease_elector_free(b);
    k8slease_client_free(ca);
    k8slease_client_free(cb);
}

/* The server closes the follower's watch (cleanly, then with a reset): it
 * is resumed, and the next release is still seen at once. */
/* On a real server: kube-apiserver killed and started again ends every
 * watch. Timings long enough for the leader to ride out the restart (a few
 * seconds); the follower's watch is resumed (it reports the leader's next
 * renewal) and the next release is still seen at once. */
static void restarted_watch_is_resumed(void)
{
    static const timing relaxed = {60000, 40000, 2000, 0, 1};
    k8slease_client *ca, *cb;
    cand a_, b_;
    k8slease_elector *a, *b;
    uint64_t events;
    int64_t t0, dt;

    if (!e2e_has_ctl("apiserver")) {
        print_message("skipped: no kube-apiserver to restart (run under envtest.sh)\n");
        skip();
    }
    ca = new_client("wm-closed-a");
    cb = new_client("wm-closed-b");
    a = start_with(ca, NULL, "wm-restarted", "a:1", &a_, &relaxed);
    elected(a, "a");
    b = start_with(cb, NULL, "wm-restarted", "b:1", &b_, &relaxed);
    wait_following(b, &b_, "a:1");
    events = stats(b).watch_events;
    assert_int_equal(e2e_ctl("apiserver", "restart"), 0);
    for (int64_t deadline = e2e_mono_ms() + 2 * WAIT_MS;
         stats(b).watch_events <= events || !stats(b).watch_healthy; e2e_pause_ms(20))
        if (e2e_mono_ms() > deadline)
            fail_msg("no event on a healthy watch within %d ms of the restart", 2 * WAIT_MS);
    assert_true(k8slease_elector_is_leader(a));
    t0 = e2e_mono_ms();
    assert_int_equal(k8slease_elector_stop(a, 1), 0);
    elected(b, "b");
    dt = started_at(&b_) - t0;
    print_message("after a kube-apiserver restart: handover %lld ms\n", (long long)dt);
    assert_true(dt < relaxed.rp / 2);
    k8slease_elector_free(a);
    k8slease_elector_free(b);
    k8slease_client_free(ca);
    k8slease_client_free(cb);
}

static void closed_watch_is_resumed(void **state)
{
    static const char *const closes[] = {
        "{\"match\":{\"user_agent\":\"wm-closed-b\"}}",
        "{\"abort\":true,\"match\":{\"user_agent\":\"wm-closed-b\"}}",
    };
    k8slease_client *ca, *cb;
    cand a_, b_;
    k8slease_elector *a, *b;
    int64_t t0, dt;

    (void)state;
    if (!e2e_is_testserver()) {
        restarted_watch_is_resumed();
        return;
    }
    ca = new_client("wm-closed-a");
    cb = new_client("wm-closed-b");
    a = start(ca, "wm-closed", "a:1", &a_);
    elected(a, "a");
    b = start(cb, "wm-closed", "b:1", &b_);
    wait_following(b, &b_, "a:1");
    for (size_t i = 0; i < 2; i++) {
        long total = watches_total();

        control("/testserver/v1/watches/close", closes[i], 200);
        for (int64_t deadline = e2e_mono_ms() + WAIT_MS;
             watches_total() <= total || !stats(b).watch_healthy; e2e_pause_ms(20))
            if (e2e_mono_ms() > deadline)
                fail_msg("watch not resumed within %d ms", WAIT_MS);
    }
    t0 = e2e_mono_ms();
    assert_int_equal(k8slease_elector_stop(a, 1), 0);
    elected(b, "b");
    dt = started_at(&b_) - t0;
    print_message("after a closed and an aborted watch: handover %lld ms\n", (long long)dt);
    assert_true(dt < RP_MS / 2);
    k8slease_elector_free(a);
    k8slease_elector_free(b);
    k8slease_client_free(ca);
    k8slease_client_free(cb);
}

/* The follower's stream falls behind (frozen while the leader renews) and
 * the history is compacted: when it thaws the server ends it with ERROR
 * 410, the stream lists again, and the follower keeps following. */
static void gone_resume_relists(void **state)
{
    k8slease_client *ca, *cb;
    cand a_, b_;
    k8slease_elector *a, *b;
    long lists;
    int64_t t0, dt;

    (void)state;
    e2e_need_testserver("needs one watch held back while its history is compacted");
    ca = new_client("wm-gone-a");
    cb = new_client("wm-gone-b");
    a = start(ca, "wm-gone", "a:1", &a_);
    elected(a, "a");
    b = start(cb, "wm-gone", "b:1", &b_);
    wait_following(b, &b_, "a:1");
    lists = verb_ok("list");
    control("/testserver/v1/faults",
            "{\"kind\":\"freeze_watch\",\"match\":{\"user_agent\":\"wm-gone-b\"}}", 201);
    for (uint64_t renewals = stats(a).renewals; stats(a).renewals < renewals + 2; e2e_pause_ms(20))
        ;
    control("/testserver/v1/compact", "{}", 200);
    delete_faults();
    for (int64_t deadline = e2e_mono_ms() + WAIT_MS;
         verb_ok("list") <= lists || !stats(b).watch_healthy; e2e_pause_ms(20))
        if (e2e_mono_ms() > deadline)
            fail_msg("no relist within %d ms", WAIT_MS);
    t0 = e2e_mono_ms();
    assert_int_equal(k8slease_elector_stop(a, 1), 0);
    elected(b, "b");
    dt = started_at(&b_) - t0;
    print_message("after a relist: handover %lld ms\n", (long long)dt);
    assert_true(dt < RP_MS / 2);
    k8slease_elector_free(a);
    k8slease_elector_free(b);
    k8slease_client_free(ca);
    k8slease_client_free(cb);
}

struct holder_log {
    pthread_mutex_t mu;
    char last[64];
    int n;
};

static void on_holder(const char *id, int64_t epoch, void *ud)
{
    struct holder_log *l = ud;

    (void)epoch;
    pthread_mutex_lock(&l->mu);
    snprintf(l->last, sizeof(l->last), "%s", id);
    l->n++;
    pthread_mutex_unlock(&l->mu);
}

/* An elector and a holder watch of one Lease in one client: one stream. */
static void holder_watch_shares_the_stream(void **state)
{
    struct holder_log l = {PTHREAD_MUTEX_INITIALIZER, "", 0};
    k8slease_client *c;
    k8slease_watch *w = NULL;
    k8slease_elector *e;
    long before = 0, open;

    (void)state;
    c = new_client("wm-shared");
    if (e2e_is_testserver()) {
        wait_watches_open(0); /* the other tests' streams are gone */
        before = watches_total();
    }
    open = watches_open(); /* a real server's own watches included */
    e = start(c, "wm-shared", "e:1", NULL);
    assert_int_equal(k8slease_watch_start(&w, c, NULL, "wm-shared", on_holder, &l), 0);
    elected(e, "e");
    for (int64_t deadline = e2e_mono_ms() + WAIT_MS;; e2e_pause_ms(10)) {
        int seen;

        pthread_mutex_lock(&l.mu);
        seen = strcmp(l.last, "e:1") == 0;
        pthread_mutex_unlock(&l.mu);
        if (seen && stats(e).watch_healthy)
            break;
        if (e2e_mono_ms() > deadline)
            fail_msg("holder watch did not report e:1 within %d ms", WAIT_MS);
    }
    assert_int_equal(watches_open(), open + 1);
    if (e2e_is_testserver())
        assert_int_equal(watches_total(), before + 1);
    k8slease_watch_free(w);
    k8slease_elector_free(e);
    /* Over HTTP/2 the stream's RST_STREAM leaves with the connection's next
     * frame (libcurl 7.88 queues it; docs/semantics.md): one more request
     * on this client, then the server has let the stream go. */
    {
        k8slease_holder *h = NULL;

        assert_int_equal(k8slease_holder_get(c, NULL, "wm-shared", 5000, &h), 0);
        k8slease_holder_free(h);
    }
    wait_watches_open(open);
    k8slease_client_free(c);
}

/* On a real server: a fresh namespace where envtest-user may get, update,
 * list and watch only the Leases lease-0 ... lease-8 by name (and create
 * Leases), so that a list of the whole namespace is forbidden (403) while a
 * list or watch with fieldSelector metadata.name is allowed; a client of
 * that user. */
static k8slease_client *narrow_client_on_real_server(const char **ns)
{
    k8slease_client_options o = K8SLEASE_CLIENT_OPTIONS_INIT;
    k8slease_client *c = NULL;
    char path[256];

    o.kubeconfig = e2e_envtest_file("kubeconfig-user");
    if (!o.kubeconfig) {
        print_message("skipped: no envtest.sh kubeconfig-user (run under envtest.sh)\n");
        skip();
    }
    assert_non_null(*ns = e2e_namespace("wm-narrow"));
    snprintf(path, sizeof(path), "/apis/rbac.authorization.k8s.io/v1/namespaces/%s/roles", *ns);
    assert_int_equal(
        e2e_create(path,
                   "{\"apiVersion\":\"rbac.authorization.k8s.io/v1\",\"kind\":\"Role\","
                   "\"metadata\":{\"name\":\"wm-narrow\"},\"rules\":[{\"apiGroups\":["
                   "\"coordination.k8s.io\"],\"resources\":[\"leases\"],\"resourceNames\":["
                   "\"lease-0\",\"lease-1\",\"lease-2\",\"lease-3\",\"lease-4\",\"lease-5\","
                   "\"lease-6\",\"lease-7\",\"lease-8\"],\"verbs\":[\"get\",\"update\",\"list\","
                   "\"watch\"]},{\"apiGroups\":[\"coordination.k8s.io\"],\"resources\":["
                   "\"leases\"],\"verbs\":[\"create\"]}]}"),
        0);
    snprintf(path, sizeof(path), "/apis/rbac.authorization.k8s.io/v1/namespaces/%s/rolebindings",
             *ns);
    assert_int_equal(
        e2e_create(path,
                   "{\"apiVersion\":\"rbac.authorization.k8s.io/v1\",\"kind\":\"RoleBinding\","
                   "\"metadata\":{\"name\":\"wm-narrow\"},\"roleRef\":{\"apiGroup\":"
                   "\"rbac.authorization.k8s.io\",\"kind\":\"Role\",\"name\":\"wm-narrow\"},"
                   "\"subjects\":[{\"kind\":\"User\",\"apiGroup\":\"rbac.authorization.k8s.io\","
                   "\"name\":\"envtest-user\"}]}"),
        0);
    o.user_agent = "wm-narrow";
    o.log_cb = e2e_log_to_stderr;
    o.log_level = K8SLEASE_LOG_WARN;
    if (k8slease_client_new(&c, &o) != 0)
        fail_msg("client_new(envtest-user): %s", k8slease_error_last());
    return c;
}

/* Above 8 Leases of one namespace a client watches the whole namespace;
 * when that list is forbidden (RBAC by resourceNames), it goes back to one
 * stream per Lease and every election still follows its Lease. The test
 * server answers one 403; a real server has the RBAC rules above. */
static void namespace_watch_forbidden_goes_back(void **state)
{
    enum { N = 9 };
    static k8slease_elector *e[N];
    k8slease_client *c;
    const char *ns = NULL;
    long open;

    (void)state;
    c = e2e_is_testserver() ? new_client("wm-narrow") : narrow_client_on_real_server(&ns);
    open = watches_open();
    for (int k = 0; k < N - 1; k++) {
        char name[32];

        snprintf(name, sizeof(name), "lease-%d", k);
        e[k] = start_with(c, ns, name, "narrow:1", NULL, &fast);
    }
    for (int k = 0; k < N - 1; k++) {
        elected(e[k], "narrow");
        for (int64_t deadline = e2e_mono_ms() + WAIT_MS; !stats(e[k]).watch_healthy;
             e2e_pause_ms(10))
            if (e2e_mono_ms() > deadline)
                fail_msg("election %d: no healthy watch within %d ms", k, WAIT_MS);
    }
    wait_watches_open(open + N - 1);
    if (e2e_is_testserver())
        control("/testserver/v1/faults",
                "{\"kind\":\"error\",\"status\":403,\"count\":1,\"match\":{\"verb\":\"list\","
                "\"user_agent\":\"wm-narrow\"}}",
                201);
    e[N - 1] = start_with(c, ns, "lease-8", "narrow:1", NULL, &fast);
    elected(e[N - 1], "narrow");
    wait_watches_open(open + N);
    for (int k = 0; k < N; k++)
        for (int64_t deadline = e2e_mono_ms() + WAIT_MS; !stats(e[k]).watch_healthy;
             e2e_pause_ms(10))
            if (e2e_mono_ms() > deadline)
                fail_msg("election %d: no healthy watch within %d ms", k, WAIT_MS);
    if (e2e_is_testserver())
        delete_faults();
    for (int k = 0; k < N; k++)
        k8slease_elector_free(e[k]);
    k8slease_client_free(c);
}

/* ---- the Pod informer (internal: k8s/informer.h) ---- */

#define CID_A "containerd://aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define CID_B "containerd://bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

/* What a Pod subscriber was told (written on the loop thread). */
typedef struct pod_rec {
    pthread_mutex_t mu;
    int objects, absents, unhealthy, forbidden_events;
    int healthy, forbidden; /* as last told */
    char uid[64], app[64];  /* of the last state: metadata.uid, labels.app */
    size_t ncontainers;
    int main_running;
    int ended_a, ended_b; /* kl__pod_container_ended("main", CID_A / CID_B) */
    int wrong;            /* an event that broke the informer's promises */
} pod_rec;

static void on_pod_event(const kl__sub_event *ev, void *arg)
{
    pod_rec *r = arg;

    pthread_mutex_lock(&r->mu);
    switch (ev->type) {
    case KL_SUB_OBJECT: {
        const char *app = json_string_value(json_object_get(
            json_object_get(json_object_get(ev->pod ? ev->pod->root : NULL, "metadata"), "labels"),
            "app"));

        if (!ev->pod || ev->lease || strcmp(ev->rv, ev->pod->rv) != 0) {
            r->wrong++;
            break;
        }
        r->objects++;
        snprintf(r->uid, sizeof(r->uid), "%s", ev->pod->uid);
        snprintf(r->app, sizeof(r->app), "%s", app ? app : "");
        r->ncontainers = ev->pod->ncontainers;
        r->main_running = ev->pod->ncontainers > 0 && ev->pod->containers[0].running;
        r->ended_a = kl__pod_container_ended(ev->pod, ev->pod->uid, "main", CID_A);
        r->ended_b = kl__pod_container_ended(ev->pod, ev->pod->uid, "main", CID_B);
        break;
    }
    case KL_SUB_ABSENT:
        r->absents++;
        break;
    case KL_SUB_HEALTH:
        r->unhealthy += !ev->healthy && r->healthy;
        r->forbidden_events += ev->forbidden;
        r->healthy = ev->healthy;
        r->forbidden = ev->forbidden;
        break;
    }
    pthread_mutex_unlock(&r->mu);
}

/* kl__sub_start and kl__sub_stop belong to the loop thread. */
typedef struct sub_call {
    kl__informer *inf;
    const char *ns, *name;
    int64_t rp_ms;
    pod_rec *rec;
    kl__sub *sub;
    int forbidden; /* kl__sub_forbidden right after the start */
} sub_call;

static void sub_start_on_loop(void *arg)
{
    sub_call *sc = arg;

    sc->sub = kl__sub_start(sc->inf, sc->ns, sc->name, sc->rp_ms * 1000000, on_pod_event, sc->rec);
    sc->forbidden = kl__sub_forbidden(sc->sub);
}

static void sub_stop_on_loop(void *arg)
{
    kl__sub_stop(arg);
}

static kl__sub *pod_sub_start(k8slease_client *cl, const char *ns, const char *name, int64_t rp_ms,
                              pod_rec *r, int *forbidden)
{
    sub_call sc = {kl__k8s_of(cl)->pod_informer, ns, name, rp_ms, r, NULL, 0};

    assert_non_null(kl__k8s_of(cl)->pod_informer);
    assert_int_equal(kl__loop_call(cl->loop, sub_start_on_loop, &sc), 0);
    assert_non_null(sc.sub);
    if (forbidden)
        *forbidden = sc.forbidden;
    return sc.sub;
}

static void pod_sub_stop(k8slease_client *cl, kl__sub *sub)
{
    assert_int_equal(kl__loop_call(cl->loop, sub_stop_on_loop, sub), 0);
}

static void pod_rec_init(pod_rec *r)
{
    memset(r, 0, sizeof(*r));
    pthread_mutex_init(&r->mu, NULL);
}

/* Wait (bounded) until cond holds of r; what says what was awaited. */
#define WAIT_POD(r, ms, cond, what)                                                                \
    do {                                                                                           \
        int64_t deadline_ = e2e_mono_ms() + (ms);                                                  \
        for (;;) {                                                                                 \
            int ok_;                                                                               \
            pthread_mutex_lock(&(r)->mu);                                                          \
            ok_ = (cond);                                                                          \
            pthread_mutex_unlock(&(r)->mu);                                                        \
            if (ok_)                                                                               \
                break;                                                                             \
            if (e2e_mono_ms() > deadline_)                                                         \
                fail_msg("pod subscriber: %s not within %d ms", what, (int)(ms));                  \
            e2e_pause_ms(10);                                                                      \
        }                                                                                          \
    } while (0)

static void create_pod(const char *ns, const char *name)
{
    char path[256], body[512];

    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods", ns);
    snprintf(
        body, sizeof(body),
        "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"%s\",\"labels\":{"
        "\"app\":\"v1\"}},\"spec\":{\"containers\":[{\"name\":\"main\",\"image\":\"busybox\"}]}}",
        name);
    assert_int_equal(e2e_create(path, body), 0);
}

/* PATCH (merge) of pods/NAME or, with subresource, pods/NAME/SUBRESOURCE. */
static void patch_pod(const char *ns, const char *name, const char *subresource, const char *patch)
{
    char path[256], *resp = NULL;
    long status = 0;

    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s%s%s", ns, name,
             subresource ? "/" : "", subresource ? subresource : "");
    assert_int_equal(e2e_api("PATCH", path, patch, &status, &resp), 0);
    if (status != 200)
        fail_msg("PATCH %s: HTTP %ld %s", path, status, resp ? resp : "");
    free(resp);
}

/* A Pod's subscriber sees it absent, then created, its label changed, the
 * kubelet's status (written through pods/status, as a kubelet does) with
 * the terminated instance, and its deletion; a second subscriber of that
 * Pod in the client shares the stream, and a subscriber that joins is told
 * the last state at once (a report made before it joined is not missed).
 * A Pod's own stream reads it with a GET, never a list (RBAC: get and
 * watch are enough). */
static void pod_subscription_follows_the_pod(void **state)
{
    pod_rec r, r2, r3;
    k8slease_client *c;
    kl__sub *sub, *sub2, *sub3;
    const char *ns;
    long open = 0, lists = 0;
    char path[256];
    long status = 0;

    (void)state;
    pod_rec_init(&r);
    pod_rec_init(&r2);
    pod_rec_init(&r3);
    assert_non_null(ns = e2e_namespace("wm-pod"));
    c = new_client("wm-pod");
    if (e2e_is_testserver()) {
        wait_watches_open(0);
        open = watches_open();
        lists = verb_ok("list");
    }
    sub = pod_sub_start(c, ns, "p1", RP_MS, &r, NULL);
    WAIT_POD(&r, WAIT_MS, r.absents == 1 && r.healthy, "no pod yet, on a healthy stream");
    create_pod(ns, "p1");
    WAIT_POD(&r, WAIT_MS, r.objects >= 1, "the pod created");
    pthread_mutex_lock(&r.mu);
    assert_true(r.uid[0] != '\0');
    assert_string_equal(r.app, "v1");
    assert_int_equal(r.ncontainers, 0);
    pthread_mutex_unlock(&r.mu);

    sub2 = pod_sub_start(c, ns, "p1", RP_MS, &r2, NULL);
    if (e2e_is_testserver())
        wait_watches_open(open + 1);
    WAIT_POD(&r2, WAIT_MS, r2.objects == 1 && strcmp(r2.app, "v1") == 0,
             "the last state (app=v1), told to the second subscriber as it joined");

    patch_pod(ns, "p1", NULL, "{\"metadata\":{\"labels\":{\"app\":\"v2\"}}}");
    WAIT_POD(&r, WAIT_MS, strcmp(r.app, "v2") == 0, "label app=v2");
    WAIT_POD(&r2, WAIT_MS, strcmp(r2.app, "v2") == 0, "label app=v2 (second subscriber)");

    patch_pod(ns, "p1", "status",
              "{\"status\":{\"phase\":\"Running\",\"containerStatuses\":[{\"name\":\"main\","
              "\"image\":\"busybox\",\"imageID\":\"\",\"ready\":true,\"restartCount\":1,"
              "\"containerID\":\"" CID_B "\",\"state\":{\"running\":{\"startedAt\":"
              "\"2024-05-01T10:00:05Z\"}},\"lastState\":{\"terminated\":{\"exitCode\":137,"
              "\"startedAt\":\"2024-05-01T09:00:00Z\",\"finishedAt\":\"2024-05-01T10:00:04Z\","
              "\"containerID\":\"" CID_A "\"}}}]}}");
    WAIT_POD(&r, WAIT_MS, r.main_running && r.ended_a && !r.ended_b,
             "status: B running, A terminated");
    patch_pod(ns, "p1", "status",
              "{\"status\":{\"containerStatuses\":[{\"name\":\"main\",\"image\":\"busybox\","
              "\"imageID\":\"\",\"ready\":false,\"restartCount\":1,\"containerID\":\"" CID_B
              "\",\"state\":{\"terminated\":{\"exitCode\":139,\"startedAt\":"
              "\"2024-05-01T10:00:05Z\",\"finishedAt\":\"2024-05-01T10:30:00Z\",\"containerID\":"
              "\"" CID_B "\"}},\"lastState\":{}}]}}");
    WAIT_POD(&r, WAIT_MS, !r.main_running && r.ended_b, "status: B terminated");
    sub3 = pod_sub_start(c, ns, "p1", RP_MS, &r3, NULL);
    WAIT_POD(&r3, WAIT_MS, r3.objects == 1 && !r3.main_running && r3.ended_b,
             "B terminated, told to a subscriber that joined after the report");
    pod_sub_stop(c, sub3);

    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/p1", ns);
    assert_int_equal(e2e_api("DELETE", path, NULL, &status, NULL), 0);
    assert_true(status == 200 || status == 202);
    WAIT_POD(&r, WAIT_MS, r.absents >= 1, "the deletion");
    WAIT_POD(&r2, WAIT_MS, r2.absents >= 1, "the deletion (second subscriber)");
    pthread_mutex_lock(&r.mu);
    assert_int_equal(r.wrong, 0);
    assert_int_equal(r.unhealthy, 0);
    pthread_mutex_unlock(&r.mu);
    if (e2e_is_testserver())
        assert_int_equal(verb_ok("list"), lists);
    pod_sub_stop(c, sub);
    pod_sub_stop(c, sub2);
    k8slease_client_free(c);
}

/* A Pod changes rarely: a stream of a Pod nothing changes stays healthy on
 * its probes (GETs of the Pod every 2 RP that show nothing it missed), where
 * a Lease stream that quiet is told unhealthy after 3 RP. On the test server
 * the stream is frozen (no bookmarks either, which would keep it healthy
 * anyway); then a change it does not deliver is seen by the next probe: the
 * stream is resumed and told unhealthy until it delivers again. */
static void quiet_pod_stream_stays_healthy(void **state)
{
    enum { RP = 200 };
    pod_rec r;
    k8slease_client *c;
    kl__sub *sub;
    const char *ns;
    char json[256];
    long gets = 0;

    (void)state;
    pod_rec_init(&r);
    assert_non_null(ns = e2e_namespace("wm-podq"));
    create_pod(ns, "quiet");
    c = new_client("wm-podq");
    sub = pod_sub_start(c, ns, "quiet", RP, &r, NULL);
    WAIT_POD(&r, WAIT_MS, r.objects >= 1 && r.healthy, "the pod, on a healthy stream");
    if (e2e_is_testserver()) {
        snprintf(json, sizeof(json),
                 "{\"kind\":\"freeze_watch\",\"match\":{\"path_prefix\":"
                 "\"/api/v1/namespaces/%s/pods\",\"user_agent\":\"wm-podq\"}}",
                 ns);
        e2e_add_fault(json);
        gets = verb_ok("get");
    }
    e2e_pause_ms(20 * RP);
    pthread_mutex_lock(&r.mu);
    assert_int_equal(r.unhealthy, 0);
    assert_true(r.healthy);
    assert_int_equal(r.objects, 1);
    pthread_mutex_unlock(&r.mu);
    if (!e2e_is_testserver()) {
        pod_sub_stop(c, sub);
        k8slease_client_free(c);
        return;
    }
    /* Probes: one per 2 RP, give or take. */
    assert_true(verb_ok("get") - gets >= 5);
    patch_pod(ns, "quiet", NULL, "{\"metadata\":{\"labels\":{\"app\":\"v2\"}}}");
    WAIT_POD(&r, 3000, r.unhealthy == 1, "unhealthy after a change the frozen stream missed");
    pthread_mutex_lock(&r.mu);
    assert_string_equal(r.app, "v1");
    pthread_mutex_unlock(&r.mu);
    delete_faults();
    WAIT_POD(&r, WAIT_MS, r.healthy && strcmp(r.app, "v2") == 0, "the change, once thawed");
    pod_sub_stop(c, sub);
    k8slease_client_free(c);
}

/* Above KL_INFORMER_NS_THRESHOLD Pods of one namespace, one namespace-wide
 * stream (a list, then a watch) serves them all, each subscriber its own
 * Pod's states. */
static void many_pods_one_stream(void **state)
{
    enum { N = KL_INFORMER_NS_THRESHOLD + 1 };
    static pod_rec r[N];
    kl__sub *sub[N];
    k8slease_client *c;
    const char *ns;
    long open = 0;

    (void)state;
    assert_non_null(ns = e2e_namespace("wm-pods"));
    c = new_client("wm-pods");
    if (e2e_is_testserver()) {
        wait_watches_open(0);
        open = watches_open();
    }
    for (int k = 0; k < N; k++) {
        char name[32];

        snprintf(name, sizeof(name), "pod-%d", k);
        create_pod(ns, name);
        pod_rec_init(&r[k]);
        sub[k] = pod_sub_start(c, ns, name, RP_MS, &r[k], NULL);
    }
    for (int k = 0; k < N; k++)
        WAIT_POD(&r[k], WAIT_MS, r[k].objects >= 1 && r[k].healthy, "each pod, healthy");
    if (e2e_is_testserver())
        wait_watches_open(open + 1);
    patch_pod(ns, "pod-5", NULL, "{\"metadata\":{\"labels\":{\"app\":\"v2\"}}}");
    WAIT_POD(&r[5], WAIT_MS, strcmp(r[5].app, "v2") == 0, "pod-5's label");
    for (int k = 0; k < N; k++) {
        pthread_mutex_lock(&r[k].mu);
        assert_string_equal(r[k].app, k == 5 ? "v2" : "v1");
        assert_int_equal(r[k].wrong, 0);
        pthread_mutex_unlock(&r[k].mu);
        pod_sub_stop(c, sub[k]);
    }
    k8slease_client_free(c);
}

static struct {
    pthread_mutex_t mu;
    int warnings; /* about pods forbidden */
} pod_log = {PTHREAD_MUTEX_INITIALIZER, 0};

static void count_pod_warnings(k8slease_log_level level, const char *msg, void *ud)
{
    (void)ud;
    if (level == K8SLEASE_LOG_WARN && strstr(msg, "may not read pods")) {
        pthread_mutex_lock(&pod_log.mu);
        pod_log.warnings++;
        pthread_mutex_unlock(&pod_log.mu);
    }
    e2e_log_to_stderr(level, msg, ud);
}

/* Reads of the Pod (its stream's GET; a list for a namespace-wide one)
 * answered 403. */
static long reads_forbidden(void)
{
    json_t *root = server_stats();
    json_t *by_verb = json_object_get(json_object_get(root, "requests"), "by_verb");
    long n = (long)json_integer_value(json_object_get(json_object_get(by_verb, "get"), "403")) +
             (long)json_integer_value(json_object_get(json_object_get(by_verb, "list"), "403"));

    json_decref(root);
    return n;
}

/* A client that may not read pods: the subscriber hears "not healthy,
 * forbidden" (and one that starts later finds it said), the informer warns
 * once and retries 1 s, 2 s, 4 s ... apart; once allowed, the subscriber
 * gets the Pod and a healthy stream. The test server answers 403 by a
 * fault; a real server has envtest-user, allowed nothing until a Role
 * lets it get and watch pods (not list them: a follower's RBAC). */
static void pod_list_forbidden_backs_off(void **state)
{
    k8slease_client_options o = K8SLEASE_CLIENT_OPTIONS_INIT;
    k8slease_client *c = NULL;
    pod_rec r, r2;
    kl__sub *sub, *sub2;
    const char *ns;
    char json[512], path[256];
    long before = 0;
    int64_t t0;
    int forbidden = 0;

    (void)state;
    pod_rec_init(&r);
    pod_rec_init(&r2);
    o.kubeconfig = getenv("KUBECONFIG");
    if (!e2e_is_testserver() && !(o.kubeconfig = e2e_envtest_file("kubeconfig-user"))) {
        print_message("skipped: no envtest.sh kubeconfig-user (run under envtest.sh)\n");
        skip();
    }
    assert_non_null(ns = e2e_namespace("wm-podf"));
    create_pod(ns, "p1");
    if (e2e_is_testserver()) {
        snprintf(json, sizeof(json),
                 "{\"kind\":\"error\",\"status\":403,\"match\":{\"path_prefix\":"
                 "\"/api/v1/namespaces/%s/pods\",\"user_agent\":\"wm-podf\"}}",
                 ns);
        e2e_add_fault(json);
        before = reads_forbidden();
    }
    o.user_agent = "wm-podf";
    o.log_cb = count_pod_warnings;
    o.log_level = K8SLEASE_LOG_WARN;
    if (k8slease_client_new(&c, &o) != 0)
        fail_msg("client_new: %s", k8slease_error_last());
    t0 = e2e_mono_ms();
    sub = pod_sub_start(c, ns, "p1", RP_MS, &r, NULL);
    WAIT_POD(&r, 5000, r.forbidden_events == 1 && r.forbidden && !r.healthy, "health: forbidden");
    sub2 = pod_sub_start(c, ns, "p1", RP_MS, &r2, &forbidden);
    assert_true(forbidden);
    /* 0, 1, 3, 7 s: 4 lists by 7.5 s (a retry each second would be 8). */
    e2e_pause_ms((int)(t0 + 7500 - e2e_mono_ms()));
    if (e2e_is_testserver()) {
        long n = reads_forbidden() - before;

        if (n < 3 || n > 4)
            fail_msg("%ld reads answered 403 within 7.5 s, expected 4 (1, 2, 4 s apart)", n);
    }
    pthread_mutex_lock(&pod_log.mu);
    assert_int_equal(pod_log.warnings, 1);
    pthread_mutex_unlock(&pod_log.mu);
    pthread_mutex_lock(&r.mu);
    assert_int_equal(r.forbidden_events, 1); /* told once, not at every retry */
    assert_int_equal(r.objects, 0);
    pthread_mutex_unlock(&r.mu);

    if (e2e_is_testserver()) {
        delete_faults();
    } else {
        snprintf(path, sizeof(path), "/apis/rbac.authorization.k8s.io/v1/namespaces/%s/roles", ns);
        assert_int_equal(
            e2e_create(path, "{\"apiVersion\":\"rbac.authorization.k8s.io/v1\",\"kind\":\"Role\","
                             "\"metadata\":{\"name\":\"wm-podf\"},\"rules\":[{\"apiGroups\":[\"\"],"
                             "\"resources\":[\"pods\"],\"verbs\":[\"get\",\"watch\"]}]}"),
            0);
        snprintf(path, sizeof(path),
                 "/apis/rbac.authorization.k8s.io/v1/namespaces/%s/rolebindings", ns);
        assert_int_equal(
            e2e_create(path,
                       "{\"apiVersion\":\"rbac.authorization.k8s.io/v1\",\"kind\":"
                       "\"RoleBinding\",\"metadata\":{\"name\":\"wm-podf\"},\"roleRef\":{"
                       "\"apiGroup\":\"rbac.authorization.k8s.io\",\"kind\":\"Role\",\"name\":"
                       "\"wm-podf\"},\"subjects\":[{\"kind\":\"User\",\"apiGroup\":"
                       "\"rbac.authorization.k8s.io\",\"name\":\"envtest-user\"}]}"),
            0);
    }
    /* The next retry is at most 8 s away (at 15 s). */
    WAIT_POD(&r, 15000, r.objects >= 1 && r.healthy && !r.forbidden, "the pod once allowed");
    WAIT_POD(&r2, 5000, r2.objects >= 1 && r2.healthy && !r2.forbidden,
             "the pod once allowed (second subscriber)");
    pthread_mutex_lock(&pod_log.mu);
    assert_int_equal(pod_log.warnings, 1);
    pthread_mutex_unlock(&pod_log.mu);
    pod_sub_stop(c, sub);
    pod_sub_stop(c, sub2);
    k8slease_client_free(c);
}

/* Threads of this process (/proc/self/task). */
static int threads(void)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *de;
    int n = 0;

    if (!d)
        return -1;
    while ((de = readdir(d)))
        n += de->d_name[0] != '.';
    closedir(d);
    return n;
}

static long rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;

    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb;
}

/* 200 elections (distinct Leases of one namespace) in one client: all
 * elected and renewing on the client's one thread, over one namespace-wide
 * watch, and each released when freed. */
static void many_elections_one_thread(void **state)
{
    enum { N = 200 };
    static const timing relaxed = {8000, 5000, 1000, 0, 1};
    static k8slease_elector *e[N];
    k8slease_client *c = new_client("wm-many");
    int64_t t0, all_at;
    long rss0, rss1, open = 0, conns0, conns1;
    int th0;
    char *body = NULL;
    long status = 0;
    json_t *root;
    size_t i;
    json_t *item;
    const char *ns = e2e_namespace("wm-many");
    char path[256];

    (void)state;
    assert_non_null(ns);
    if (e2e_is_testserver())
        wait_watches_open(open); /* the other tests' streams are gone */
    th0 = threads();
    rss0 = rss_kb();
    conns0 = kl_test_tcp_established(e2e_port());
    t0 = e2e_mono_ms();
    for (int k = 0; k < N; k++) {
        char name[32];

        snprintf(name, sizeof(name), "lease-%03d", k);
        e[k] = start_with(c, ns, name, "many:1", NULL, &relaxed);
    }
    for (int k = 0; k < N; k++)
        elected(e[k], "many");
    all_at = e2e_mono_ms();
    for (int k = 0; k < N; k++)
        for (int64_t deadline = e2e_mono_ms() + WAIT_MS; stats(e[k]).renewals < 2; e2e_pause_ms(50))
            if (e2e_mono_ms() > deadline) {
                k8slease_elector_stats st = stats(e[k]);

                fail_msg("election %d: fewer than 2 renewals within %d ms (leader %d, "
                         "requests %llu, renewals %llu, updates %llu, gets %llu, 409 %llu, "
                         "4xx %llu, 5xx %llu, transport errors %llu)",
                         k, WAIT_MS, k8slease_elector_is_leader(e[k]),
                         (unsigned long long)st.requests, (unsigned long long)st.renewals,
                         (unsigned long long)st.updates, (unsigned long long)st.gets,
                         (unsigned long long)st.conflicts, (unsigned long long)st.http_4xx,
                         (unsigned long long)st.http_5xx, (unsigned long long)st.transport_errors);
            }
    rss1 = rss_kb();
    conns1 = kl_test_tcp_established(e2e_port());
    print_message("%d elections and their watch over %ld TCP connection(s) to the server\n", N,
                  conns1 - conns0);
    print_message("%d elections in one client: all elected in %lld ms; %d threads before, %d "
                  "after; RSS +%ld kB (%.1f kB per election, connections included)\n",
                  N, (long long)(all_at - t0), th0, threads(), rss1 - rss0,
                  (double)(rss1 - rss0) / N);
    assert_int_equal(threads(), th0);
    /* HTTP/2 (both servers speak it): the client's requests and stream share
     * one connection, as client-go's do; 64 before the connections were
     * sized by protocol. Others of this process may have closed meanwhile. */
    assert_true(conns0 >= 0 && conns1 >= 0);
    assert_true(conns1 - conns0 <= 1);
    for (int k = 0; k < N; k++) {
        assert_true(k8slease_elector_is_leader(e[k]));
        assert_true(stats(e[k]).watch_healthy);
    }
    if (e2e_is_testserver())
        assert_int_equal(watches_open(), open + 1); /* one namespace-wide stream */
    for (int k = 0; k < N; k++)
        k8slease_elector_free(e[k]);
    /* Every Lease released, on either server. */
    snprintf(path, sizeof(path), "/apis/coordination.k8s.io/v1/namespaces/%s/leases", ns);
    assert_int_equal(e2e_api("GET", path, NULL, &status, &body), 0);
    assert_int_equal(status, 200);
    root = json_loads(body, 0, NULL);
    free(body);
    assert_int_equal(json_array_size(json_object_get(root, "items")), N);
    json_array_foreach(json_object_get(root, "items"), i, item) assert_string_equal(
        json_string_value(json_object_get(json_object_get(item, "spec"), "holderIdentity")), "");
    json_decref(root);
    k8slease_client_free(c);
}

/* Over HTTP/1.1 (a server or proxy without h2) each request in flight needs
 * its own connection: many elections still run, on a bounded number of them.
 * Only the test server can be asked to refuse h2, so this test starts one of
 * its own, also when the suite runs against a real server. */
static void many_elections_over_http11(void **state)
{
    enum { N = 150 };
    static const timing relaxed = {8000, 5000, 1000, 0, 1};
    static const char *const args[] = {"--no-http2", NULL};
    static k8slease_elector *e[N];
    k8slease_client_options o = K8SLEASE_CLIENT_OPTIONS_INIT;
    k8slease_client *c = NULL;
    ts_server *s = NULL;
    long conns;

    (void)state;
    assert_int_equal(ts_start(&s, args), 0);
    o.kubeconfig = ts_kubeconfig(s);
    o.user_agent = "wm-http11";
    o.log_cb = e2e_log_to_stderr;
    o.log_level = K8SLEASE_LOG_WARN;
    assert_int_equal(k8slease_client_new(&c, &o), 0);
    for (int k = 0; k < N; k++) {
        char name[32];

        snprintf(name, sizeof(name), "h1-%03d", k);
        e[k] = start_with(c, "default", name, "h1:1", NULL, &relaxed);
    }
    for (int k = 0; k < N; k++)
        elected(e[k], "over HTTP/1.1");
    for (int k = 0; k < N; k++)
        for (int64_t deadline = e2e_mono_ms() + WAIT_MS; stats(e[k]).renewals < 1; e2e_pause_ms(50))
            if (e2e_mono_ms() > deadline)
                fail_msg("election %d over HTTP/1.1: no renewal within %d ms", k, WAIT_MS);
    /* At most 64 requests at once and the watch: never one per election.
     * While the elections start, each Lease has its own watch until the
     * namespace-wide one takes over, and libcurl may open a connection for
     * each; it closes the extra ones as connections come back idle. */
    for (int64_t deadline = e2e_mono_ms() + WAIT_MS;; e2e_pause_ms(50)) {
        conns = kl_test_tcp_established(ts_port(s));
        if (conns >= 1 && conns <= 65)
            break;
        if (e2e_mono_ms() > deadline)
            fail_msg("%d elections over HTTP/1.1: still %ld TCP connections after %d ms "
                     "(expected 1 to 65)",
                     N, conns, WAIT_MS);
    }
    print_message("%d elections over HTTP/1.1: %ld TCP connections\n", N, conns);
    for (int k = 0; k < N; k++) {
        assert_true(k8slease_elector_is_leader(e[k]));
        k8slease_elector_free(e[k]);
    }
    k8slease_client_free(c);
    assert_int_equal(ts_stop(s), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(release_taken_over_at_once),
        cmocka_unit_test(failover_exactly_at_expiry),
        cmocka_unit_test(followers_do_not_poll),
        cmocka_unit_test(idle_loops_wake_for_renewals_only),
        cmocka_unit_test(poll_only_still_takes_over),
        cmocka_unit_test(frozen_watch_falls_back_to_polling),
        cmocka_unit_test(closed_watch_is_resumed),
        cmocka_unit_test(gone_resume_relists),
        cmocka_unit_test(holder_watch_shares_the_stream),
        cmocka_unit_test(namespace_watch_forbidden_goes_back),
        cmocka_unit_test(pod_subscription_follows_the_pod),
        cmocka_unit_test(quiet_pod_stream_stays_healthy),
        cmocka_unit_test(many_pods_one_stream),
        cmocka_unit_test(pod_list_forbidden_backs_off),
        cmocka_unit_test(many_elections_one_thread),
        cmocka_unit_test(many_elections_over_http11),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
