/* Coordinated leader election (KEP-4355) end to end: candidates publish
 * LeaseCandidates, the server's controller picks the oldest emulation
 * version and writes the Lease, candidates follow.
 *
 * On k8slease-testserver (started with the CoordinatedLeaderElection gate)
 * and on a real kube-apiserver that serves LeaseCandidates, e.g. v1.36.3
 * under tests/integration/envtest.sh with
 *   K8SLEASE_ENVTEST_APISERVER_FLAGS='--feature-gates=CoordinatedLeaderElection=true
 *   --runtime-config=coordination.k8s.io/v1beta1=true'.
 * On a real server without them every test that needs the controller skips
 * and says so.
 *
 * The controller answers within a few seconds (its ack window is 5 s and it
 * writes 5 s Leases); every wait below is bounded by WAIT_MS, ten times
 * the slowest expected path (a preferred-holder handover: ping, ack,
 * preferredHolder, step-down, release, election). */
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

#include <jansson.h>

#include "e2e.h"
#include "harness.h"
#include "k8slease.h"

#define LD_MS   4000
#define RD_MS   3000
#define RP_MS   1000
#define WAIT_MS 60000

static const char *const gate_args[] = {"--feature-gates=CoordinatedLeaderElection=true", NULL};

static k8slease_client *client;
static const char *ns;

/* What the client logged at warn and above, to find an error's message. */
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char log_text[16384];

static void capture_log(k8slease_log_level level, const char *msg, void *ud)
{
    size_t len;

    e2e_log_to_stderr(level, msg, ud);
    pthread_mutex_lock(&log_mu);
    len = strlen(log_text);
    if (len + strlen(msg) + 2 < sizeof(log_text)) {
        strcat(log_text, msg);
        strcat(log_text, "\n");
    }
    pthread_mutex_unlock(&log_mu);
}

static int logged(const char *needle)
{
    int found;

    pthread_mutex_lock(&log_mu);
    found = strstr(log_text, needle) != NULL;
    pthread_mutex_unlock(&log_mu);
    return found;
}

/* Whether the server under test serves LeaseCandidates (discovery). */
static int serves_candidates(void)
{
    char *body = NULL;
    long status = 0;
    int yes;

    if (e2e_api("GET", "/apis/coordination.k8s.io", NULL, &status, &body) != 0)
        return 0;
    yes = status == 200 && body && (strstr(body, "\"v1beta1\"") || strstr(body, "\"v1alpha2\""));
    free(body);
    return yes;
}

static void need_controller(void)
{
    if (!serves_candidates()) {
        print_message("skipped: the server serves no LeaseCandidate API (start kube-apiserver "
                      "with --feature-gates=CoordinatedLeaderElection=true "
                      "--runtime-config=coordination.k8s.io/v1beta1=true)\n");
        skip();
    }
}

static int setup(void **state)
{
    k8slease_client_options o = K8SLEASE_CLIENT_OPTIONS_INIT;

    (void)state;
    e2e_testserver_args(gate_args);
    if (e2e_setup(NULL) != 0 || !(ns = e2e_namespace("cle")))
        return -1;
    o.kubeconfig = getenv("KUBECONFIG");
    o.log_cb = capture_log;
    o.log_level = getenv("K8SLEASE_TEST_VERBOSE") ? K8SLEASE_LOG_DEBUG : K8SLEASE_LOG_WARN;
    if (k8slease_client_new(&client, &o) != 0) {
        fprintf(stderr, "client: %s\n", k8slease_error_last());
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return e2e_teardown(client);
}

typedef struct cand {
    e2e_cand rec;
    k8slease_elector *e;
} cand;

static k8slease_elector_options coordinated_opts(const char *lease, const char *identity,
                                                 const char *emulation)
{
    k8slease_elector_options o = K8SLEASE_ELECTOR_OPTIONS_INIT;

    o.ns = ns;
    o.name = lease;
    o.identity = identity;
    o.lease_duration_ms = LD_MS;
    o.renew_deadline_ms = RD_MS;
    o.retry_period_ms = RP_MS;
    o.coordinated = 1;
    o.binary_version = "1.36.0";
    o.emulation_version = emulation;
    return o;
}

static void cand_start(cand *c, const char *lease, const char *identity, const char *emulation)
{
    k8slease_elector_options o = coordinated_opts(lease, identity, emulation);

    memset(c, 0, sizeof(*c));
    pthread_mutex_init(&c->rec.mu, NULL);
    c->rec.epoch = -1;
    o.on_started_leading = e2e_cand_on_started;
    o.on_stopped_leading = e2e_cand_on_stopped;
    o.on_new_leader = e2e_cand_on_new_leader;
    o.user_data = &c->rec;
    if (k8slease_elector_start(&c->e, client, &o) != 0)
        fail_msg("start %s: %s", identity, k8slease_error_last());
}

static void cand_free(cand *c)
{
    k8slease_elector_free(c->e);
    c->e = NULL;
    pthread_mutex_destroy(&c->rec.mu);
}

/* The LeaseCandidate named id: its HTTP status on GET (200 or 404). */
static long candidate_status(const char *id, char **body)
{
    char path[256];
    long status = 0;

    snprintf(path, sizeof(path),
             "/apis/coordination.k8s.io/v1beta1/namespaces/%s/leasecandidates/%s", ns, id);
    assert_int_equal(e2e_api("GET", path, NULL, &status, body), 0);
    return status;
}

static void assert_holder(const char *lease, const char *id)
{
    k8slease_holder *h = NULL;

    assert_int_equal(k8slease_holder_get(client, ns, lease, 0, &h), 0);
    assert_string_equal(h->identity, id);
    assert_string_equal(h->strategy, K8SLEASE_STRATEGY_OLDEST_EMULATION_VERSION);
    k8slease_holder_free(h);
}

/* The acceptance: 1.35.0 leads whichever of the two started first,
 * and 1.36.0 takes over when it stops. */
static void run_two(const char *lease, int older_first)
{
    cand old_c, new_c;
    int64_t epoch_old = -1, epoch_new = -1, t0;
    char *body = NULL;

    need_controller();
    if (older_first) {
        cand_start(&old_c, lease, "old", "1.35.0");
        cand_start(&new_c, lease, "new", "1.36.0");
    } else {
        /* The newer one alone first: it is elected, then the older one
         * arrives, the controller prefers it and the newer one steps down. */
        cand_start(&new_c, lease, "new", "1.36.0");
        if (k8slease_elector_wait_elected(new_c.e, WAIT_MS, &epoch_new) != 0)
            fail_msg("the only candidate was not elected: %s", k8slease_error_last());
        t0 = e2e_mono_ms();
        cand_start(&old_c, lease, "old", "1.35.0");
        if (k8slease_elector_wait_lost(new_c.e, WAIT_MS) != 0)
            fail_msg("1.36.0 did not step down for the older candidate: %s", k8slease_error_last());
    }
    if (k8slease_elector_wait_elected(old_c.e, WAIT_MS, &epoch_old) != 0)
        fail_msg("1.35.0 was not elected: %s", k8slease_error_last());
    if (!older_first)
        print_message("1.35.0 leads %lld ms after it started (1.36.0 stepped down for it)\n",
                      (long long)(e2e_mono_ms() - t0));
    if (older_first && k8slease_elector_wait_lost(new_c.e, 0) == 0) {
        /* Started together, the newer one can be picked first (its
         * LeaseCandidate reached the controller first) and step down for
         * the older one a moment later: a term of its own, over. Campaign
         * again, as `k8slease elect` does after a term. */
        epoch_new = k8slease_elector_epoch(new_c.e);
        assert_true(epoch_new >= 0); /* it led: not an election that failed */
        print_message("1.36.0 led first (epoch %lld) and stepped down\n", (long long)epoch_new);
        cand_free(&new_c);
        cand_start(&new_c, lease, "new", "1.36.0");
    }
    assert_true(epoch_old > epoch_new);
    assert_true(k8slease_elector_is_leader(old_c.e));
    assert_false(k8slease_elector_is_leader(new_c.e));
    assert_holder(lease, "old");
    if (older_first) {
        /* held past the controller's 5 s Lease: the elector renews it */
        int64_t until = e2e_mono_ms() + 2 * LD_MS;

        while (e2e_mono_ms() < until) {
            assert_true(k8slease_elector_is_leader(old_c.e));
            assert_false(k8slease_elector_is_leader(new_c.e));
            e2e_pause_ms(100);
        }
    }

    /* the older one stops: its candidate goes, the newer one takes over */
    t0 = e2e_mono_ms();
    assert_int_equal(k8slease_elector_stop(old_c.e, 1), 0);
    assert_int_equal(candidate_status("old", NULL), 404);
    if (!older_first) {
        /* the newer one's first elector stepped down; a new term campaigns */
        cand_free(&new_c);
        cand_start(&new_c, lease, "new", "1.36.0");
    }
    if (k8slease_elector_wait_elected(new_c.e, WAIT_MS, &epoch_new) != 0)
        fail_msg("1.36.0 did not take over: %s", k8slease_error_last());
    print_message("1.36.0 leads %lld ms after 1.35.0 was asked to stop\n",
                  (long long)(e2e_mono_ms() - t0));
    assert_true(epoch_new > epoch_old);
    assert_holder(lease, "new");
    assert_int_equal(candidate_status("new", &body), 200);
    assert_non_null(strstr(body, "\"emulationVersion\":\"1.36.0\""));
    free(body);
    cand_free(&old_c);
    cand_free(&new_c);
    assert_int_equal(candidate_status("new", NULL), 404);
}

static void older_started_first(void **state)
{
    (void)state;
    run_two("cle-a", 1);
}

static void newer_started_first(void **state)
{
    (void)state;
    run_two("cle-b", 0);
}

/* spec.<key> of a LeaseCandidate body ("" when absent). */
static const char *spec_field(json_t *root, const char *key)
{
    const char *v = json_string_value(json_object_get(json_object_get(root, "spec"), key));

    return v ? v : "";
}

/* Ping the LeaseCandidate at path as the controller does: pingTime = now,
 * after its renewTime (written earlier, on this machine's clock), before
 * the answer's. The ping goes into ping[64]. */
static void ping_now(const char *path, char *ping)
{
    char patch[160], secs[32];
    long status = 0;
    struct timespec now;
    struct tm tm;

    clock_gettime(CLOCK_REALTIME, &now);
    gmtime_r(&now.tv_sec, &tm);
    strftime(secs, sizeof(secs), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(ping, 64, "%s.%06ldZ", secs, (long)(now.tv_nsec / 1000));
    snprintf(patch, sizeof(patch), "{\"spec\":{\"pingTime\":\"%s\"}}", ping);
    assert_int_equal(e2e_api("PATCH", path, patch, &status, NULL), 0);
    assert_int_equal(status, 200);
}

/* Wait until the ping is answered: renewTime after pingTime (RFC 3339 in
 * UTC with 6 fraction digits: they compare as strings), and pingTime not
 * older than ours (the controller may ping too). */
static void wait_answered(const char *path, const char *ping)
{
    for (int64_t until = e2e_mono_ms() + WAIT_MS;; e2e_pause_ms(50)) {
        char *body = NULL;
        long status = 0;
        json_t *root;
        int answered;

        assert_int_equal(e2e_api("GET", path, NULL, &status, &body), 0);
        assert_int_equal(status, 200);
        root = json_loads(body, 0, NULL);
        assert_non_null(root);
        answered = strcmp(spec_field(root, "pingTime"), ping) >= 0 &&
                   strcmp(spec_field(root, "renewTime"), spec_field(root, "pingTime")) > 0;
        json_decref(root);
        if (answered) {
            free(body);
            return;
        }
        if (e2e_mono_ms() > until)
            fail_msg("the ping at %s was not answered: %s", ping, body);
        free(body);
    }
}

/* A ping (pingTime after renewTime) is answered with a renewTime after it. */
static void ping_answered(void **state)
{
    cand c;
    char path[256], ping[64];

    (void)state;
    need_controller();
    cand_start(&c, "cle-ping", "pinged", "1.36.0");
    if (k8slease_elector_wait_elected(c.e, WAIT_MS, NULL) != 0)
        fail_msg("not elected: %s", k8slease_error_last());
    snprintf(path, sizeof(path),
             "/apis/coordination.k8s.io/v1beta1/namespaces/%s/leasecandidates/pinged", ns);
    ping_now(path, ping);
    wait_answered(path, ping);
    cand_free(&c);
}

/* Without a LeaseCandidate API the election ends, saying why. */
static void no_candidate_api(void **state)
{
    ts_server *plain = NULL;
    k8slease_client_options co = K8SLEASE_CLIENT_OPTIONS_INIT;
    k8slease_elector_options o = coordinated_opts("cle-none", "lonely", "1.36.0");
    k8slease_client *c = NULL;
    k8slease_elector *e = NULL;

    (void)state;
    if (!e2e_is_testserver()) {
        print_message("skipped on a real API server: the test starts a test server without "
                      "the CoordinatedLeaderElection gate\n");
        skip();
    }
    assert_int_equal(ts_start(&plain, NULL), 0); /* no feature gate */
    co.kubeconfig = ts_kubeconfig(plain);
    co.log_cb = capture_log;
    co.log_level = K8SLEASE_LOG_WARN;
    assert_int_equal(k8slease_client_new(&c, &co), 0);
    o.ns = "default";
    assert_int_equal(k8slease_elector_start(&e, c, &o), 0);
    assert_int_equal(k8slease_elector_wait_elected(e, WAIT_MS, NULL), K8SLEASE_ESTATE);
    assert_non_null(strstr(k8slease_error_last(), "without becoming leader: coordinated election: "
                                                  "the server serves no LeaseCandidate API"));
    assert_true(logged("serves no LeaseCandidate API"));
    k8slease_elector_free(e);
    k8slease_client_free(c);
    assert_int_equal(ts_stop(plain), 0);
}

/* A LeaseCandidate of our name for another Lease is somebody else's: the
 * election ends, naming it, and leaves it alone. */
static void candidate_name_taken(void **state)
{
    k8slease_elector_options o = coordinated_opts("cle-mine", "taken", "1.36.0");
    k8slease_elector *e = NULL;
    char path[256], body[512];

    (void)state;
    need_controller();
    snprintf(path, sizeof(path), "/apis/coordination.k8s.io/v1beta1/namespaces/%s/leasecandidates",
             ns);
    snprintf(
        body, sizeof(body),
        "{\"apiVersion\":\"coordination.k8s.io/v1beta1\",\"kind\":\"LeaseCandidate\","
        "\"metadata\":{\"name\":\"taken\"},\"spec\":{\"leaseName\":\"cle-other\","
        "\"binaryVersion\":\"1.36.0\",\"emulationVersion\":\"1.36.0\","
        "\"strategy\":\"OldestEmulationVersion\",\"renewTime\":\"2026-01-01T00:00:00.000000Z\"}}");
    assert_int_equal(e2e_create(path, body), 0);
    assert_int_equal(k8slease_elector_start(&e, client, &o), 0);
    assert_int_equal(k8slease_elector_wait_elected(e, WAIT_MS, NULL), K8SLEASE_ESTATE);
    assert_non_null(strstr(k8slease_error_last(), "already exists for lease \"cle-other\""));
    assert_true(logged("already exists for lease \"cle-other\""));
    k8slease_elector_free(e);
    assert_int_equal(candidate_status("taken", NULL), 200); /* not ours: not deleted */
}

/* A client of its own, told apart by its User-Agent, for fault rules. */
static k8slease_client *fault_client(const char *user_agent)
{
    k8slease_client_options o = K8SLEASE_CLIENT_OPTIONS_INIT;
    k8slease_client *c = NULL;

    o.kubeconfig = getenv("KUBECONFIG");
    o.user_agent = user_agent;
    o.log_cb = capture_log;
    o.log_level = K8SLEASE_LOG_WARN;
    assert_int_equal(k8slease_client_new(&c, &o), 0);
    return c;
}

static long add_fault(const char *user_agent, const char *verb, int status, const char *path)
{
    char rule[512];

    snprintf(rule, sizeof(rule),
             "{\"kind\":\"error\",\"status\":%d,\"count\":1,\"match\":{\"user_agent\":\"%s\","
             "\"verb\":\"%s\",\"path_prefix\":\"%s\"}}",
             status, user_agent, verb, path);
    return e2e_add_fault(rule);
}

/* Every step of the LeaseCandidate's life survives a failed request: the
 * create, the watch, the answer to a ping (409: read again, answer again),
 * and the DELETE when stopping (logged, the stop still completes); a
 * LeaseCandidate deleted by someone else is created again. */
static void candidate_failures_survived(void **state)
{
    k8slease_client *c;
    k8slease_elector_options o = coordinated_opts("cle-faults", "faulty", "1.36.0");
    k8slease_elector *e = NULL;
    char coll[256], path[320], ping[64];
    long create, watch, update, status = 0;

    (void)state;
    e2e_need_testserver("needs injected failures of the LeaseCandidate requests");
    c = fault_client("cle-faults");
    snprintf(coll, sizeof(coll), "/apis/coordination.k8s.io/v1beta1/namespaces/%s/leasecandidates",
             ns);
    snprintf(path, sizeof(path), "%s/faulty", coll);
    create = add_fault("cle-faults", "create", 503, coll);
    watch = add_fault("cle-faults", "watch", 500, coll);
    assert_int_equal(k8slease_elector_start(&e, c, &o), 0);
    if (k8slease_elector_wait_elected(e, WAIT_MS, NULL) != 0)
        fail_msg("not elected after the failures: %s", k8slease_error_last());
    e2e_wait_fault_retired(create, WAIT_MS);
    e2e_wait_fault_retired(watch, WAIT_MS);
    assert_true(logged("create LeaseCandidate"));

    /* a ping whose first answer meets a conflict: read again, answer */
    update = add_fault("cle-faults", "update", 409, path);
    ping_now(path, ping);
    wait_answered(path, ping);
    e2e_wait_fault_retired(update, WAIT_MS);

    /* deleted by someone else: back again */
    assert_int_equal(e2e_api("DELETE", path, NULL, &status, NULL), 0);
    assert_int_equal(status, 200);
    for (int64_t until = e2e_mono_ms() + WAIT_MS; candidate_status("faulty", NULL) != 200;
         e2e_pause_ms(20))
        if (e2e_mono_ms() > until)
            fail_msg("the deleted LeaseCandidate was not created again");

    /* the DELETE at stop fails: said, and the stop completes */
    add_fault("cle-faults", "delete", 500, path);
    assert_int_equal(k8slease_elector_stop(e, 1), 0);
    assert_true(logged("delete LeaseCandidate"));
    k8slease_elector_free(e);
    k8slease_client_free(c);
}

/* The server refuses the LeaseCandidate (422): the election ends, saying
 * why, instead of retrying for ever. */
static void candidate_refused(void **state)
{
    k8slease_client *c;
    k8slease_elector_options o = coordinated_opts("cle-refused", "refused", "1.36.0");
    k8slease_elector *e = NULL;
    char coll[256];

    (void)state;
    e2e_need_testserver("needs the server to refuse a valid LeaseCandidate");
    c = fault_client("cle-refused");
    snprintf(coll, sizeof(coll), "/apis/coordination.k8s.io/v1beta1/namespaces/%s/leasecandidates",
             ns);
    add_fault("cle-refused", "create", 422, coll);
    assert_int_equal(k8slease_elector_start(&e, c, &o), 0);
    assert_int_equal(k8slease_elector_wait_elected(e, WAIT_MS, NULL), K8SLEASE_ESTATE);
    assert_true(logged("coordinated election: create LeaseCandidate"));
    assert_true(logged("HTTP 422"));
    k8slease_elector_free(e);
    k8slease_client_free(c);
}

/* Options are checked at start, each mistake named. */
static void options_rejected(void **state)
{
    static const struct {
        const char *identity, *binary, *emulation, *strategy, *needle;
    } cases[] = {
        {"node-1:8080", "1.36.0", NULL, NULL, "identity (in coordinated election"},
        {"ok", NULL, NULL, NULL, "binary_version is required"},
        {"ok", "v1.36.0", NULL, NULL, "binary_version \"v1.36.0\""},
        {"ok", "1.36", NULL, NULL, "binary_version \"1.36\""},
        {"ok", "1.36.0", "1.37.0", NULL, "emulation_version 1.37.0 must not be greater"},
        {"ok", "1.36.0", "x", NULL, "emulation_version \"x\""},
        {"ok", "1.36.0", NULL, "Newest", "strategy \"Newest\""},
    };
    k8slease_elector *e = NULL;

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        k8slease_elector_options o =
            coordinated_opts("cle-bad", cases[i].identity, cases[i].emulation);

        o.binary_version = cases[i].binary;
        o.strategy = cases[i].strategy;
        assert_int_equal(k8slease_elector_start(&e, client, &o), K8SLEASE_EINVAL);
        assert_null(e);
        if (!strstr(k8slease_error_last(), cases[i].needle))
            fail_msg("case %zu: \"%s\" does not say \"%s\"", i, k8slease_error_last(),
                     cases[i].needle);
    }
    {
        /* versions without coordinated: a forgotten flag, not ignored */
        k8slease_elector_options o = coordinated_opts("cle-bad", "ok", NULL);

        o.coordinated = 0;
        assert_int_equal(k8slease_elector_start(&e, client, &o), K8SLEASE_EINVAL);
        assert_non_null(strstr(k8slease_error_last(), "set coordinated to 1"));
    }
    {
        /* a vendor strategy is a valid request (the controller leaves it) */
        k8slease_elector_options o = coordinated_opts("cle-bad", "ok", NULL);

        o.strategy = "example.com/Custom";
        assert_int_equal(k8slease_elector_start(&e, client, &o), 0);
        k8slease_elector_free(e);
    }
}

/* The etcd backend has no coordinated election. */
static void etcd_refuses(void **state)
{
    k8slease_client_options co = K8SLEASE_CLIENT_OPTIONS_INIT;
    k8slease_elector_options o = K8SLEASE_ELECTOR_OPTIONS_INIT;
    k8slease_client *c = NULL;
    k8slease_elector *e = NULL;

    (void)state;
    co.backend = K8SLEASE_BACKEND_ETCD;
    co.etcd_endpoints = "http://127.0.0.1:9";
    assert_int_equal(k8slease_client_new(&c, &co), 0);
    o.name = "x";
    o.identity = "y";
    o.coordinated = 1;
    o.binary_version = "1.36.0";
    assert_int_equal(k8slease_elector_start(&e, c, &o), K8SLEASE_EINVAL);
    assert_non_null(strstr(k8slease_error_last(), "not with etcd"));
    k8slease_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(options_rejected),    cmocka_unit_test(etcd_refuses),
        cmocka_unit_test(no_candidate_api),    cmocka_unit_test(candidate_name_taken),
        cmocka_unit_test(ping_answered),       cmocka_unit_test(candidate_failures_survived),
        cmocka_unit_test(candidate_refused),   cmocka_unit_test(older_started_first),
        cmocka_unit_test(newer_started_first),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
