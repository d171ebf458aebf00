/* The library under faults, and read by a real client (kubectl).
 *
 * On k8slease-testserver the faults are injected through its control API
 * (409 storms, token rotation, hangs, restarts with or without state). Under
 * tests/integration/envtest.sh the same stories run on a real kube-apiserver
 * with the faults a real server has: its process or its etcd killed and
 * started again, or stopped (SIGSTOP) past the renew deadline and continued
 * (e2e_ctl). A test that has no real counterpart skips there, saying why. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include <jansson.h>

#include "e2e.h"
#include "harness.h"
#include "k8slease.h"

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

static void need_ctl(const char *proc)
{
    if (!e2e_has_ctl(proc)) {
        print_message("skipped: no %s process to drive (%s)\n", proc,
                      e2e_is_testserver() ? "k8slease-testserver has no etcd"
                                          : "run under tests/integration/envtest.sh");
        skip();
    }
}

/* What one candidate saw (the recorder of e2e.h). */
typedef e2e_cand cand;

static k8slease_elector *start(k8slease_client *cl, const char *name, const char *id, cand *c)
{
    k8slease_elector_options o = K8SLEASE_ELECTOR_OPTIONS_INIT;
    k8slease_elector *e = NULL;

    o.name = name;
    o.identity = id;
    o.lease_duration_ms = LD_MS;
    o.renew_deadline_ms = RD_MS;
    o.retry_period_ms = RP_MS;
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

/* Server-side count of answers with this status (stats.requests.by_status). */
static long answers_with(const char *status_code)
{
    char *resp = NULL;
    long status = 0, n;
    json_t *root;

    assert_int_equal(ts_control(e2e_server(), "GET", "/testserver/v1/stats", NULL, &status, &resp),
                     0);
    root = json_loads(resp, 0, NULL);
    n = (long)json_integer_value(json_object_get(
        json_object_get(json_object_get(root, "requests"), "by_status"), status_code));
    json_decref(root);
    free(resp);
    return n;
}

static void conflict_storm_keeps_one_leader(void **state)
{
    cand ca, cb;
    k8slease_elector *a, *b;
    long id;
    int leaders = 0;

    (void)state;
    e2e_need_testserver("needs injected 409 answers (a real server gives 409 only to a real race)");
    a = start(client, "faults-storm", "a:1", &ca);
    elected(a, "a");
    b = start(client, "faults-storm", "b:1", &cb);
    /* Every update of this lease fails with 409, eight times in a row. */
    id = e2e_add_fault(
        "{\"kind\":\"error\",\"status\":409,\"count\":8,\"match\":{\"verb\":\"update\","
        "\"path_prefix\":\"/apis/coordination.k8s.io/v1/namespaces/default/leases/"
        "faults-storm\"}}");
    e2e_wait_fault_retired(id, WAIT_MS);
    assert_true(stats(a).conflicts + stats(b).conflicts >= 8);
    /* After the storm: one leader, whoever it is. */
    for (int64_t deadline = e2e_mono_ms() + WAIT_MS; leaders == 0; e2e_pause_ms(50)) {
        leaders = k8slease_elector_is_leader(a) + k8slease_elector_is_leader(b);
        if (e2e_mono_ms() > deadline)
            fail_msg("no leader %d ms after the storm", WAIT_MS);
    }
    assert_int_equal(leaders, 1);
    k8slease_elector_free(a);
    k8slease_elector_free(b);
}

/* Lines logged by a client, for checks on what it said. */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* a line was added */
    char text[65536];
    size_t len;
} logged = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, "", 0};

static void log_keep(k8slease_log_level level, const char *msg, void *ud)
{
    (void)level;
    (void)ud;
    pthread_mutex_lock(&logged.mu);
    logged.len +=
        (size_t)snprintf(logged.text + logged.len, sizeof(logged.text) - logged.len, "%s\n", msg);
    if (logged.len >= sizeof(logged.text))
        logged.len = sizeof(logged.text) - 1;
    pthread_cond_broadcast(&logged.cv);
    pthread_mutex_unlock(&logged.mu);
}

static void log_reset(void)
{
    pthread_mutex_lock(&logged.mu);
    logged.len = 0;
    logged.text[0] = '\0';
    pthread_mutex_unlock(&logged.mu);
}

/* Waits until a line logged since log_reset holds want; fails after
 * WAIT_MS. (wait_lost returns when the deadline passes by the clock, the
 * line comes when the loop thread sees it.) */
static void assert_logged(const char *want)
{
    struct timespec until;
    int found;

    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += WAIT_MS / 1000;
    pthread_mutex_lock(&logged.mu);
    while (!(found = strstr(logged.text, want) != NULL) &&
           pthread_cond_timedwait(&logged.cv, &logged.mu, &until) == 0)
        ;
    pthread_mutex_unlock(&logged.mu);
    if (!found)
        fail_msg("no line with \"%s\" within %d ms; logged:\n%s", want, WAIT_MS, logged.text);
}

/* The Lease's path on the server under test. */
static void lease_path(char *buf, size_t size, const char *name)
{
    snprintf(buf, size, "/apis/coordination.k8s.io/v1/namespaces/%s/leases/%s",
             k8slease_client_namespace(client), name);
}

/* Another process writes holder into the Lease (its resourceVersion
 * guards the write: a renewal in between means reading it again). */
static void write_holder(const char *name, const char *holder)
{
    char path[256];

    lease_path(path, sizeof(path), name);
    for (int i = 0; i < 10; i++) {
        char *body = NULL, *put;
        long status = 0;
        json_t *lease;

        assert_int_equal(e2e_api("GET", path, NULL, &status, &body), 0);
        assert_int_equal(status, 200);
        lease = json_loads(body, 0, NULL);
        free(body);
        assert_non_null(lease);
        json_object_set_new(json_object_get(lease, "spec"), "holderIdentity", json_string(holder));
        put = json_dumps(lease, JSON_COMPACT);
        json_decref(lease);
        assert_non_null(put);
        assert_int_equal(e2e_api("PUT", path, put, &status, NULL), 0);
        free(put);
        if (status == 200)
            return;
        assert_int_equal(status, 409);
    }
    fail_msg("could not write holder %s into %s: 10 conflicts in a row", holder, path);
}

/* A term lost on its own says why, at the CLI's default level (warn): the
 * renew deadline and the last renewal's error (the test server answers
 * the renewals 503; a real kube-apiserver is stopped, and its renewals get
 * no answer), and another holder that took the Lease. */
static void lost_term_says_why(void **state)
{
    k8slease_client_options o = K8SLEASE_CLIENT_OPTIONS_INIT;
    const char *ns;
    k8slease_client *lc = NULL;
    k8slease_elector *a;
    char want[512], path[256], rule[512];
    long fault = -1;
    int64_t epoch;
    int rc;

    (void)state;
    o.kubeconfig = getenv("KUBECONFIG");
    o.log_cb = log_keep;
    o.log_level = K8SLEASE_LOG_WARN; /* the CLI's default */
    assert_int_equal(k8slease_client_new(&lc, &o), 0);
    ns = k8slease_client_namespace(lc);

    if (e2e_is_testserver() || e2e_has_ctl("apiserver")) {
        a = start(lc, "faults-lost-deadline", "a:1", NULL);
        elected(a, "a");
        epoch = k8slease_elector_epoch(a);
        log_reset();
        if (e2e_is_testserver()) {
            lease_path(path, sizeof(path), "faults-lost-deadline");
            snprintf(rule, sizeof(rule),
                     "{\"kind\":\"error\",\"status\":503,\"match\":{\"path_prefix\":\"%s\"}}",
                     path);
            fault = e2e_add_fault(rule);
        } else {
            assert_int_equal(e2e_ctl("apiserver", "stop"), 0);
        }
        rc = k8slease_elector_wait_lost(a, WAIT_MS);
        if (fault < 0)
            assert_int_equal(e2e_ctl("apiserver", "cont"), 0);
        assert_int_equal(rc, 0);
        snprintf(want, sizeof(want),
                 "lease %s/faults-lost-deadline: lost the lease (epoch %lld): no successful "
                 "renewal within the renew deadline of 2 s (%s",
                 ns, (long long)epoch, fault >= 0 ? "last renewal: HTTP 503 " : "");
        assert_logged(want);
        if (fault >= 0) {
            char del[64];
            long status = 0;

            snprintf(del, sizeof(del), "/testserver/v1/faults/%ld", fault);
            assert_int_equal(ts_control(e2e_server(), "DELETE", del, NULL, &status, NULL), 0);
        }
        k8slease_elector_free(a);
    }

    a = start(lc, "faults-lost-taken", "a:1", NULL);
    elected(a, "a");
    epoch = k8slease_elector_epoch(a);
    log_reset();
    write_holder("faults-lost-taken", "intruder:1");
    assert_int_equal(k8slease_elector_wait_lost(a, WAIT_MS), 0);
    snprintf(want, sizeof(want),
             "lease %s/faults-lost-taken: lost the lease (epoch %lld): \"intruder:1\" holds it "
             "now (epoch %lld)",
             ns, (long long)epoch, (long long)epoch);
    assert_logged(want);
    k8slease_elector_free(a);
    k8slease_client_free(lc);
}

/* kube-apiserver reads its --token-auth-file at start: envtest.sh's
 * rotate-token writes the new token to the client's tokenFile, then
 * restarts the server with only the new one. Timings long enough to ride
 * out the restart. */
static void token_rotation_on_real_server(void)
{
    k8slease_client_options o = K8SLEASE_CLIENT_OPTIONS_INIT;
    k8slease_elector_options eo = K8SLEASE_ELECTOR_OPTIONS_INIT;
    k8slease_client *tc = NULL;
    k8slease_elector *a = NULL;
    uint64_t renewals;
    int refused;

    o.kubeconfig = e2e_envtest_file("kubeconfig-tokenfile");
    if (!o.kubeconfig || !e2e_has_ctl("apiserver")) {
        print_message("skipped: no envtest.sh kubeconfig-tokenfile (run under envtest.sh)\n");
        skip();
    }
    o.log_cb = log_keep;
    o.log_level = K8SLEASE_LOG_DEBUG;
    assert_int_equal(k8slease_client_new(&tc, &o), 0);
    eo.name = "faults-token";
    eo.identity = "a:1";
    eo.lease_duration_ms = 60000;
    eo.renew_deadline_ms = 40000;
    eo.retry_period_ms = 1000;
    assert_int_equal(k8slease_elector_start(&a, tc, &eo), 0);
    elected(a, "a");
    assert_int_equal(e2e_ctl("apiserver", "rotate-token"), 0);
    renewals = stats(a).renewals;
    for (int64_t deadline = e2e_mono_ms() + 2 * WAIT_MS; stats(a).renewals < renewals + 3;
         e2e_pause_ms(50))
        if (e2e_mono_ms() > deadline)
            fail_msg("fewer than 3 renewals in %d ms after the token rotation", 2 * WAIT_MS);
    assert_true(k8slease_elector_is_leader(a));
    pthread_mutex_lock(&logged.mu);
    refused = strstr(logged.text, "HTTP 401") != NULL;
    pthread_mutex_unlock(&logged.mu);
    /* The old token was refused, and the file read again. */
    assert_true(refused);
    k8slease_elector_free(a);
    k8slease_client_free(tc);
}

static void token_rotation_is_followed(void **state)
{
    k8slease_client_options o = K8SLEASE_CLIENT_OPTIONS_INIT;
    k8slease_client *tc = NULL;
    k8slease_elector *a;
    char kc[4096];
    long status = 0, before401;
    uint64_t renewals;
    char *old_token;

    (void)state;
    if (!e2e_is_testserver()) {
        token_rotation_on_real_server();
        return;
    }
    snprintf(kc, sizeof(kc), "%s/kubeconfig-tokenfile", ts_dir(e2e_server()));
    o.kubeconfig = kc;
    assert_int_equal(k8slease_client_new(&tc, &o), 0);
    a = start(tc, "faults-token", "a:1", NULL);
    elected(a, "a");
    old_token = ts_token(e2e_server());
    assert_non_null(old_token);
    before401 = answers_with("401");
    assert_int_equal(ts_control(e2e_server(), "POST", "/testserver/v1/token", "{}", &status, NULL),
                     0);
    assert_int_equal(status, 200);
    renewals = stats(a).renewals;
    /* Renewals go on with the new token, read again after a 401. */
    for (int64_t deadline = e2e_mono_ms() + WAIT_MS; stats(a).renewals < renewals + 3;
         e2e_pause_ms(50))
        if (e2e_mono_ms() > deadline)
            fail_msg("fewer than 3 renewals in %d ms after the token rotation", WAIT_MS);
    assert_true(k8slease_elector_is_leader(a));
    assert_true(answers_with("401") > before401);
    k8slease_elector_free(a);
    k8slease_client_free(tc);
    /* The other tests' client has the old token embedded: give it back. */
    snprintf(kc, sizeof(kc), "{\"token\":\"%s\"}", old_token);
    free(old_token);
    assert_int_equal(ts_control(e2e_server(), "POST", "/testserver/v1/token", kc, &status, NULL),
                     0);
    assert_int_equal(status, 200);
}

/* An exec credential plugin that answers at once the first time and takes
 * EXEC_SLOW_S at each refresh (an identity provider that is slow today),
 * with credentials that expire EXEC_EXPIRY_S after each run: the refresh
 * starts 30 s before they expire, while the current ones still hold, and
 * the leader renews with them until the new ones arrive. The plugin takes
 * longer than the renew deadline (RD_MS): run where the renewals run, it
 * would end the term. */
#define EXEC_SLOW_S   6
#define EXEC_EXPIRY_S 33

static void write_text(const char *path, const char *text, int mode)
{
    FILE *f = fopen(path, "w");

    assert_non_null(f);
    assert_true(fputs(text, f) >= 0);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(chmod(path, (mode_t)mode), 0);
}

static int read_count(const char *path)
{
    FILE *f = fopen(path, "r");
    int n = 0;

    if (f) {
        if (fscanf(f, "%d", &n) != 1)
            n = 0;
        fclose(f);
    }
    return n;
}

static void slow_exec_plugin_costs_no_term(void **state)
{
    k8slease_client_options o = K8SLEASE_CLIENT_OPTIONS_INIT;
    k8slease_client *ec = NULL;
    k8slease_elector *a;
    const char *dir;
    char plugin[4096], kc[4096], done[4096], text[16384];
    uint64_t renewals_before;
    int stopped;
    cand c;

    (void)state;
    e2e_need_testserver("the plugin prints the test server's token");
    dir = ts_dir(e2e_server());
    snprintf(plugin, sizeof(plugin), "%s/slow-exec-plugin.sh", dir);
    snprintf(done, sizeof(done), "%s/slow-exec-plugin.done", dir);
    snprintf(kc, sizeof(kc), "%s/kubeconfig-slow-exec", dir);
    unlink(done);
    snprintf(text, sizeof(text),
             "#!/bin/sh\n"
             "n=$(cat '%s' 2>/dev/null || echo 0)\n"
             "[ \"$n\" -gt 0 ] && sleep %d\n"
             "expiry=$(date -u -d \"@$(($(date +%%s) + %d))\" +%%Y-%%m-%%dT%%H:%%M:%%SZ)\n"
             "printf '{\"apiVersion\":\"client.authentication.k8s.io/v1\",'\n"
             "printf '\"kind\":\"ExecCredential\",\"status\":{\"token\":\"%%s\",' "
             "\"$(cat '%s/token')\"\n"
             "printf '\"expirationTimestamp\":\"%%s\"}}\\n' \"$expiry\"\n"
             "echo $((n + 1)) >'%s'\n",
             done, EXEC_SLOW_S, EXEC_EXPIRY_S, dir, done);
    write_text(plugin, text, 0700);
    snprintf(text, sizeof(text),
             "apiVersion: v1\n"
             "kind: Config\n"
             "clusters:\n"
             "- name: testserver\n"
             "  cluster:\n"
             "    server: %s\n"
             "    certificate-authority: %s\n"
             "contexts:\n"
             "- name: testserver\n"
             "  context:\n"
             "    cluster: testserver\n"
             "    user: slow-exec\n"
             "current-context: testserver\n"
             "users:\n"
             "- name: slow-exec\n"
             "  user:\n"
             "    exec:\n"
             "      apiVersion: client.authentication.k8s.io/v1\n"
             "      command: %s\n"
             "      interactiveMode: Never\n",
             ts_url(e2e_server()), ts_ca_file(e2e_server()), plugin);
    write_text(kc, text, 0600);
    o.kubeconfig = kc;
    if (k8slease_client_new(&ec, &o) != 0)
        fail_msg("client: %s", k8slease_error_last());
    a = start(ec, "faults-slow-exec", "a:1", &c);
    elected(a, "a");
    assert_int_equal(read_count(done), 1);
    renewals_before = stats(a).renewals;
    /* The refresh starts EXEC_EXPIRY_S - 30 s after the first run and ends
     * EXEC_SLOW_S later (bounded: four times that). */
    for (int64_t deadline = e2e_mono_ms() + 4 * (EXEC_EXPIRY_S - 30 + EXEC_SLOW_S) * 1000;
         read_count(done) < 2; e2e_pause_ms(50))
        if (e2e_mono_ms() > deadline)
            fail_msg("the plugin's refresh did not end within %d s",
                     4 * (EXEC_EXPIRY_S - 30 + EXEC_SLOW_S));
    pthread_mutex_lock(&c.mu);
    stopped = c.stopped_at != 0;
    pthread_mutex_unlock(&c.mu);
    if (stopped || !k8slease_elector_is_leader(a))
        fail_msg("the leader lost its term while the exec plugin ran (%d s, renew deadline %d ms)",
                 EXEC_SLOW_S, RD_MS);
    /* It renewed all along, at its retry period. */
    assert_true(stats(a).renewals >= renewals_before + EXEC_SLOW_S * 1000 / RP_MS / 2);
    assert_int_equal(stats(a).terms, 1);
    k8slease_elector_free(a);
    k8slease_client_free(ec);
    unlink(kc);
    unlink(plugin);
    unlink(done);
}

/* Waits (bounded) until b has seen a as leader. */
static void wait_seen_leader(cand *cb, const char *leader)
{
    for (int64_t deadline = e2e_mono_ms() + WAIT_MS;; e2e_pause_ms(20)) {
        pthread_mutex_lock(&cb->mu);
        int seen = strcmp(cb->leader, leader) == 0;
        pthread_mutex_unlock(&cb->mu);
        if (seen)
            return;
        if (e2e_mono_ms() > deadline)
            fail_msg("b did not see %s as leader within %d ms", leader, WAIT_MS);
    }
}

/* A client of its own, whose requests carry user_agent (for the test
 * server's fault rules). */
static k8slease_client *client_as(const char *user_agent)
{
    k8slease_client_options o = K8SLEASE_CLIENT_OPTIONS_INIT;
    k8slease_client *c = NULL;

    o.user_agent = user_agent;
    if (k8slease_client_new(&c, &o) != 0)
        fail_msg("client: %s", k8slease_error_last());
    return c;
}

/*
 * A connection that answers nothing (the test server's stall fault: what a
 * hung kube-apiserver replica behind a load balancer looks like): the
 * leader's renewal on it gets no answer, a copy goes on a new connection
 * after a quarter of the request timeout and is answered, the stalled
 * connection is abandoned, and the term goes on without a failed renewal.
 * Everything else on the stalled connection (the leader's own watch) moves
 * with it.
 */
static void stalled_connection_costs_no_term(void **state)
{
    k8slease_client *ca_client;
    cand ca;
    k8slease_elector *a;
    int64_t epoch = -1, stalled_at, back_at = 0;
    k8slease_elector_stats before;

    (void)state;
    e2e_need_testserver("needs a connection that stalls while new ones are served (a hung "
                        "replica behind a load balancer: test_ha)");
    ca_client = client_as("stall-leader");
    a = start(ca_client, "faults-stall", "a:1", &ca);
    assert_int_equal(k8slease_elector_wait_elected(a, WAIT_MS, &epoch), 0);
    before = stats(a);
    /* The next renewal's connection stalls (and, over HTTP/2, the watch
     * stream on it). */
    e2e_add_fault("{\"kind\":\"stall\",\"count\":1,\"match\":{\"verb\":\"update\","
                  "\"user_agent\":\"stall-leader\"}}");
    stalled_at = e2e_mono_ms();
    while (e2e_mono_ms() - stalled_at < 4 * RD_MS) {
        k8slease_elector_stats st = stats(a);

        if (!back_at && st.last_renew_ns > before.last_renew_ns &&
            st.renewals > before.renewals + 1)
            back_at = e2e_mono_ms();
        if (!k8slease_elector_is_leader(a))
            fail_msg("a lost its term %lld ms after its connection stalled",
                     (long long)(e2e_mono_ms() - stalled_at));
        e2e_pause_ms(10);
    }
    print_message("the stalled renewal answered on a new connection; renewing again %lld ms "
                  "after the stall (request timeout %d ms, copy after %d ms)\n",
                  (long long)(back_at - stalled_at), (RD_MS - RP_MS) / 2, 250);
    assert_true(back_at > 0);
    /* The copy's answer came within the request timeout (it has 500 ms;
     * the test server answers in a few): no renewal failed. */
    assert_int_equal(stats(a).transport_errors, before.transport_errors);
    assert_int_equal(k8slease_elector_epoch(a), epoch);
    assert_int_equal(stats(a).terms, 1);
    pthread_mutex_lock(&ca.mu);
    assert_int_equal(ca.stopped_at, 0);
    pthread_mutex_unlock(&ca.mu);
    /* The leader's watch is on a new connection too: healthy. */
    for (int64_t deadline = e2e_mono_ms() + WAIT_MS; !stats(a).watch_healthy; e2e_pause_ms(20))
        if (e2e_mono_ms() > deadline)
            fail_msg("a's watch not healthy %d ms after its connection stalled", WAIT_MS);
    k8slease_elector_free(a);
    k8slease_client_free(ca_client);
}

/*
 * A follower sends nothing while its watch is healthy, so a stalled
 * connection under its watch shows no failing request: the silent stream
 * is probed (a GET after 2 x retry_period), the probe times out, the
 * connection is abandoned, and the stream resumes on a new one: the
 * follower sees the leader's renewals again, well before the 75 s after
 * which a silent stream is restarted anyway.
 */
static void stalled_watch_connection_is_probed(void **state)
{
    k8slease_client *cb_client;
    cand ca, cb;
    k8slease_elector *a, *b;
    int64_t stalled_at, back_at = 0;
    uint64_t events0;

    (void)state;
    e2e_need_testserver("needs a connection that stalls while new ones are served");
    a = start(client, "faults-stall-watch", "a:1", &ca);
    elected(a, "a");
    /* The follower's first watch request stalls its connection. */
    e2e_add_fault("{\"kind\":\"stall\",\"count\":1,\"match\":{\"verb\":\"watch\","
                  "\"user_agent\":\"stall-follower\"}}");
    cb_client = client_as("stall-follower");
    b = start(cb_client, "faults-stall-watch", "b:1", &cb);
    wait_seen_leader(&cb, "a:1"); /* from the list, before the watch */
    stalled_at = e2e_mono_ms();
    events0 = stats(b).watch_events;
    for (int64_t deadline = stalled_at + WAIT_MS; !back_at; e2e_pause_ms(10)) {
        k8slease_elector_stats st = stats(b);

        if (st.watch_events > events0 + 1 && st.watch_healthy)
            back_at = e2e_mono_ms();
        else if (e2e_mono_ms() > deadline)
            fail_msg("b's watch not back %d ms after its connection stalled", WAIT_MS);
    }
    print_message("b's watch back %lld ms after its connection stalled (retry period %d ms)\n",
                  (long long)(back_at - stalled_at), RP_MS);
    assert_int_equal(stats(b).terms, 0);
    assert_true(k8slease_elector_is_leader(a));
    k8slease_elector_free(b);
    k8slease_elector_free(a);
    k8slease_client_free(cb_client);
}

/*
 * a leads, b follows; then the server stops answering for longer than the
 * renew deadline: `down` is applied to `proc` (NULL: the test server's hang
 * fault, which holds every request for 4 s). Where the fault lasts until it
 * is lifted, it is lifted (`up`) once a has stepped down. The old leader
 * must know it is not leader before the new one starts, and the new term
 * has a greater epoch.
 */
static void leader_steps_down_before_takeover(const char *name, const char *proc, const char *down,
                                              const char *up)
{
    k8slease_client *cb_client = NULL;
    cand ca, cb;
    k8slease_elector *a, *b;
    int64_t fault_at;

    assert_int_equal(e2e_setup(&cb_client), 0);
    a = start(client, name, "a:1", &ca);
    elected(a, "a");
    b = start(cb_client, name, "b:1", &cb);
    wait_seen_leader(&cb, "a:1");
    fault_at = e2e_mono_ms();
    if (!proc) {
        e2e_add_fault("{\"kind\":\"hang\",\"duration_ms\":4000}");
    } else {
        assert_int_equal(e2e_ctl(proc, down), 0);
        for (int64_t deadline = e2e_mono_ms() + WAIT_MS;; e2e_pause_ms(20)) {
            pthread_mutex_lock(&ca.mu);
            int64_t stopped = ca.stopped_at;
            pthread_mutex_unlock(&ca.mu);
            if (stopped > 0)
                break;
            if (e2e_mono_ms() > deadline) {
                e2e_ctl(proc, up);
                fail_msg("a still leads %d ms after %s %s", WAIT_MS, proc, down);
            }
        }
        assert_false(k8slease_elector_is_leader(a));
        assert_int_equal(e2e_ctl(proc, up), 0);
        print_message("%s %s: a stepped down after %lld ms; %s %s done after %lld ms\n", proc, down,
                      (long long)(ca.stopped_at - fault_at), proc, up,
                      (long long)(e2e_mono_ms() - fault_at));
    }
    elected(b, "b");
    pthread_mutex_lock(&ca.mu);
    pthread_mutex_lock(&cb.mu);
    print_message("a stepped down %lld ms after the fault began; b led after %lld ms\n",
                  (long long)(ca.stopped_at - fault_at), (long long)(cb.started_at - fault_at));
    assert_true(ca.stopped_at > 0);
    /* The old leader knew it was not leader before the new one started. */
    assert_true(ca.stopped_at < cb.started_at);
    assert_true(cb.epoch > ca.epoch);
    pthread_mutex_unlock(&cb.mu);
    pthread_mutex_unlock(&ca.mu);
    assert_false(k8slease_elector_is_leader(a));
    k8slease_elector_free(a);
    k8slease_elector_free(b);
    k8slease_client_free(cb_client);
}

/* Test server: every request hangs for 4 s. Real server: kube-apiserver
 * stopped (SIGSTOP) until the leader has stepped down, then continued. */
static void hang_longer_than_renew_deadline(void **state)
{
    (void)state;
    if (e2e_is_testserver())
        leader_steps_down_before_takeover("faults-hang", NULL, NULL, NULL);
    else
        leader_steps_down_before_takeover("faults-hang", "apiserver", "stop", "cont");
}

/* A real kube-apiserver killed (SIGKILL), started again on the same etcd
 * once the leader has stepped down (a restart takes seconds, longer than
 * this renew deadline). The test server's in-place restart is below. */
static void apiserver_killed_and_started(void **state)
{
    (void)state;
    if (e2e_is_testserver()) {
        print_message("skipped: kills a real kube-apiserver (the test server restarts in "
                      "restart_keeping_state)\n");
        skip();
    }
    need_ctl("apiserver");
    leader_steps_down_before_takeover("faults-apiserver-kill", "apiserver", "kill", "start");
}

/* etcd killed, then started again on its data: the apiserver's writes fail
 * meanwhile. */
static void etcd_killed_and_started(void **state)
{
    (void)state;
    need_ctl("etcd");
    leader_steps_down_before_takeover("faults-etcd-kill", "etcd", "kill", "start");
}

/* etcd stopped (SIGSTOP): the apiserver's writes hang, then continue. */
static void etcd_stopped_past_renew_deadline(void **state)
{
    (void)state;
    need_ctl("etcd");
    leader_steps_down_before_takeover("faults-etcd-stop", "etcd", "stop", "cont");
}

/* Down for a quarter of the renew deadline: the leader rides it out. On a
 * real server, kube-apiserver killed and started at once with client-go's
 * default timings (15 s / 10 s / 2 s): a restart takes a few seconds, so
 * the leader keeps leading, or (on a slow machine) steps down before
 * anybody else leads. */
static void restart_keeping_state(void **state)
{
    k8slease_elector *a;
    uint64_t renewals;

    (void)state;
    if (!e2e_is_testserver()) {
        k8slease_elector_options o = K8SLEASE_ELECTOR_OPTIONS_INIT;
        cand ca;
        int64_t t0;

        need_ctl("apiserver");
        memset(&ca, 0, sizeof(ca));
        pthread_mutex_init(&ca.mu, NULL);
        o.name = "faults-restart";
        o.identity = "a:1";
        o.on_started_leading = e2e_cand_on_started;
        o.on_stopped_leading = e2e_cand_on_stopped;
        o.user_data = &ca;
        assert_int_equal(k8slease_elector_start(&a, client, &o), 0);
        elected(a, "a");
        t0 = e2e_mono_ms();
        assert_int_equal(e2e_ctl("apiserver", "restart"), 0);
        print_message("kube-apiserver restarted in %lld ms\n", (long long)(e2e_mono_ms() - t0));
        renewals = stats(a).renewals;
        for (int64_t deadline = e2e_mono_ms() + 4 * WAIT_MS;
             k8slease_elector_is_leader(a) && stats(a).renewals < renewals + 2; e2e_pause_ms(50))
            if (e2e_mono_ms() > deadline)
                fail_msg("no renewals in %d ms after the restart", 4 * WAIT_MS);
        pthread_mutex_lock(&ca.mu);
        if (k8slease_elector_is_leader(a)) {
            assert_int_equal(ca.stopped_at, 0);
            assert_true(stats(a).terms == 1);
            print_message("the leader rode out the restart\n");
        } else {
            assert_true(ca.stopped_at > 0);
            print_message("the restart outlasted the renew deadline: the leader stepped down\n");
        }
        pthread_mutex_unlock(&ca.mu);
        k8slease_elector_free(a);
        return;
    }
    a = start(client, "faults-restart", "a:1", NULL);
    elected(a, "a");
    assert_int_equal(ts_restart(e2e_server(), true, RD_MS / 4), 0);
    renewals = stats(a).renewals;
    for (int64_t deadline = e2e_mono_ms() + WAIT_MS; stats(a).renewals < renewals + 2;
         e2e_pause_ms(50))
        if (e2e_mono_ms() > deadline)
            fail_msg("no renewals in %d ms after the restart", WAIT_MS);
    assert_true(k8slease_elector_is_leader(a));
    assert_true(stats(a).terms == 1);
    k8slease_elector_free(a);
}

static void restart_losing_state(void **state)
{
    k8slease_elector *a, *b;
    int64_t deadline;
    int leaders;

    (void)state;
    if (!e2e_is_testserver())
        need_ctl("etcd");
    a = start(client, "faults-amnesia", "a:1", NULL);
    elected(a, "a");
    b = start(client, "faults-amnesia", "b:1", NULL);
    /* A real server forgets only with its etcd data: etcd wiped, both
     * started again; its resourceVersions start again lower. The test
     * server does the same, down longer than the renew deadline as a real
     * restart is: the leader steps down, and b must take over a Lease whose
     * resourceVersions went back. */
    if (e2e_is_testserver())
        assert_int_equal(ts_restart(e2e_server(), false, RD_MS + 1000), 0);
    else
        assert_int_equal(e2e_ctl("etcd", "wipe"), 0);
    /* The Lease is gone: within a few lease durations there is again
     * exactly one leader. */
    for (deadline = e2e_mono_ms() + WAIT_MS;; e2e_pause_ms(50)) {
        k8slease_holder *h = NULL;

        leaders = k8slease_elector_is_leader(a) + k8slease_elector_is_leader(b);
        if (leaders == 1 && k8slease_holder_get(client, NULL, "faults-amnesia", 0, &h) == 0) {
            int named = strcmp(h->identity, k8slease_elector_is_leader(a) ? "a:1" : "b:1") == 0;

            k8slease_holder_free(h);
            if (named)
                break;
        }
        assert_true(leaders <= 1);
        if (e2e_mono_ms() > deadline)
            fail_msg("no single leader %d ms after a restart without state", WAIT_MS);
    }
    /* ... who goes on leading: three more renewals, still the only one. */
    {
        k8slease_elector *leader = k8slease_elector_is_leader(a) ? a : b;
        uint64_t renewals = stats(leader).renewals;

        for (deadline = e2e_mono_ms() + WAIT_MS; stats(leader).renewals < renewals + 3;
             e2e_pause_ms(50)) {
            if (!k8slease_elector_is_leader(leader))
                fail_msg("the new leader stepped down after a restart without state");
            if (e2e_mono_ms() > deadline)
                fail_msg("fewer than 3 renewals %d ms after a restart without state", WAIT_MS);
        }
        assert_true(k8slease_elector_is_leader(leader));
        assert_int_equal(k8slease_elector_is_leader(a) + k8slease_elector_is_leader(b), 1);
    }
    k8slease_elector_free(a);
    k8slease_elector_free(b);
}

/* Run a command; return its stdout (malloc'ed) or NULL. */
static char *run_cmd(const char *cmd)
{
    FILE *p = popen(cmd, "r");
    char *out = NULL;
    size_t len = 0, cap = 0;
    char buf[4096];
    size_t n;

    if (!p)
        return NULL;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0) {
        if (len + n + 1 > cap) {
            cap = (len + n + 1) * 2;
            out = realloc(out, cap);
            assert_non_null(out);
        }
        memcpy(out + len, buf, n);
        len += n;
        out[len] = '\0';
    }
    if (pclose(p) != 0) {
        free(out);
        return NULL;
    }
    return out;
}

static const char *kubectl(void)
{
    return access("/usr/bin/kubectl", X_OK) == 0 ? "/usr/bin/kubectl" : NULL;
}

static void kubectl_reads_our_lease(void **state)
{
    k8slease_elector *a;
    char cmd[4096];
    char *out;
    json_t *root, *spec;
    int64_t epoch = -1;
    const char *renew;

    (void)state;
    if (!kubectl()) {
        print_message("skipped: no /usr/bin/kubectl\n");
        skip();
    }
    a = start(client, "faults-kubectl", "kubectl-reader:1", NULL);
    assert_int_equal(k8slease_elector_wait_elected(a, WAIT_MS, &epoch), 0);
    snprintf(cmd, sizeof(cmd), "%s --kubeconfig %s get lease faults-kubectl -o json", kubectl(),
             getenv("KUBECONFIG"));
    out = run_cmd(cmd);
    assert_non_null(out);
    root = json_loads(out, 0, NULL);
    free(out);
    assert_non_null(root);
    assert_string_equal(json_string_value(json_object_get(root, "kind")), "Lease");
    spec = json_object_get(root, "spec");
    assert_string_equal(json_string_value(json_object_get(spec, "holderIdentity")),
                        "kubectl-reader:1");
    assert_int_equal(json_integer_value(json_object_get(spec, "leaseDurationSeconds")),
                     LD_MS / 1000);
    assert_int_equal(json_integer_value(json_object_get(spec, "leaseTransitions")), epoch);
    /* MicroTime: 2006-01-02T15:04:05.000000Z */
    renew = json_string_value(json_object_get(spec, "renewTime"));
    assert_non_null(renew);
    assert_int_equal(strlen(renew), 27);
    assert_int_equal(renew[19], '.');
    assert_int_equal(renew[26], 'Z');
    json_decref(root);
    k8slease_elector_free(a);
}

static void pod_label_seen_by_kubectl(void **state)
{
    char cmd[4096];
    char *out;
    long status = 0;

    (void)state;
    if (!kubectl()) {
        print_message("skipped: no /usr/bin/kubectl\n");
        skip();
    }
    /* A Pod a real server accepts (no scheduler in envtest: it stays Pending). */
    assert_int_equal(e2e_api("POST", "/api/v1/namespaces/default/pods",
                             "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":"
                             "\"faults-pod\"},\"spec\":{\"containers\":[{\"name\":\"c\","
                             "\"image\":\"k8slease.invalid/none\"}]}}",
                             &status, NULL),
                     0);
    assert_int_equal(status, 201);
    assert_int_equal(k8slease_pod_label(client, NULL, "faults-pod", "role", "leader"), 0);
    snprintf(cmd, sizeof(cmd), "%s --kubeconfig %s get pod faults-pod --show-labels --no-headers",
             kubectl(), getenv("KUBECONFIG"));
    out = run_cmd(cmd);
    assert_non_null(out);
    assert_non_null(strstr(out, "role=leader"));
    free(out);
    assert_int_equal(k8slease_pod_label(client, NULL, "faults-pod", "role", NULL), 0);
    out = run_cmd(cmd);
    assert_non_null(out);
    assert_null(strstr(out, "role=leader"));
    free(out);
    /* Bad input is refused before any request, naming the culprit. */
    assert_int_equal(k8slease_pod_label(client, NULL, "faults-pod", "bad key!", "x"),
                     K8SLEASE_EINVAL);
    assert_non_null(strstr(k8slease_error_last(), "bad key!"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(conflict_storm_keeps_one_leader),
        cmocka_unit_test(stalled_connection_costs_no_term),
        cmocka_unit_test(stalled_watch_connection_is_probed),
        cmocka_unit_test(token_rotation_is_followed),
        cmocka_unit_test(slow_exec_plugin_costs_no_term),
        cmocka_unit_test(hang_longer_than_renew_deadline),
        cmocka_unit_test(lost_term_says_why),
        cmocka_unit_test(restart_keeping_state),
        cmocka_unit_test(restart_losing_state),
        cmocka_unit_test(apiserver_killed_and_started),
        cmocka_unit_test(etcd_killed_and_started),
        cmocka_unit_test(etcd_stopped_past_renew_deadline),
        cmocka_unit_test(kubectl_reads_our_lease),
        cmocka_unit_test(pod_label_seen_by_kubectl),
    };
    const char *only = getenv("K8SLEASE_TEST_FILTER");

    if (only && only[0])
        cmocka_set_test_filter(only); /* e.g. K8SLEASE_TEST_FILTER=lost_term_says_why */
    return cmocka_run_group_tests(tests, setup, teardown);
}
