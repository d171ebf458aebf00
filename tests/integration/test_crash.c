#define _GNU_SOURCE /* strptime, timegm */
/* Crash failover on the kubelet's report (docs/semantics.md,
 * "Crash failover"), with the test as the kubelet: it creates the Pods the
 * candidates run in and writes their container statuses through the
 * pods/status subresource, as a kubelet does. There is no kubelet under
 * envtest (nor in the test server): nothing else touches a Pod's status.
 *
 * A "crash" is an elector stopped without release (its renewals stop, the
 * Lease stays as it was), then the kubelet's report written. The follower
 * must lead within a small fraction of the lease duration after a report
 * that is evidence, and only by expiry (at least lease_duration -
 * retry_period after the crash) after one that is not.
 *
 * Runs on k8slease-testserver and, under tests/integration/envtest.sh, on
 * a real kube-apiserver (label envtest). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include <jansson.h>

#include "e2e.h"
#include "kubelet.h"
#include "k8slease.h"
#include "libk8s_lease_wrapper.h"
#include "testlib.h"

#define WAIT_MS 30000
#define ID_A    "containerd://aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define ID_A2   "containerd://a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2"
#define ID_B    "containerd://bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define ID_X    "containerd://0000000000000000000000000000000000000000000000000000000000000000"

typedef struct timing {
    int ld, rd, rp; /* ms */
} timing;

static const timing t15102 = {15000, 10000, 2000};
static const timing t531 = {5000, 3000, 1000};

static k8slease_client *client;
static const char *ns;

static int64_t wall_s(void)
{
    return (int64_t)time(NULL);
}

static void create_pod(const char *name)
{
    char path[256], body[512];

    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods", ns);
    assert_int_equal(kubelet_json_pod(body, sizeof(body), name), 0);
    if (e2e_create(path, body) != 0)
        fail_msg("cannot create pod %s/%s", ns, name);
}

static void delete_pod(const char *name)
{
    char path[256];
    long status = 0;

    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s?gracePeriodSeconds=0", ns, name);
    if (e2e_api("DELETE", path, NULL, &status, NULL) != 0 || (status != 200 && status != 202))
        fail_msg("cannot delete pod %s/%s: HTTP %ld", ns, name, status);
}

/* The kubelet's write: container "main" with this state (and lastState). */
static void pod_status(const char *pod, const char *container_id, const char *state,
                       const char *last_state)
{
    char path[256], body[2048];
    long status = 0;
    char *answer = NULL;

    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s/status", ns, pod);
    assert_int_equal(kubelet_json_status(body, sizeof(body), container_id, last_state ? 1 : 0,
                                         state, last_state ? last_state : "{}"),
                     0);
    if (e2e_api("PATCH", path, body, &status, &answer) != 0 || status != 200)
        fail_msg("kubelet write of pod %s/%s: HTTP %ld: %s", ns, pod, status, answer ? answer : "");
    free(answer);
}

static void running(const char *pod, const char *container_id)
{
    char state[128];

    assert_int_equal(kubelet_json_running(state, sizeof(state), wall_s() - 60), 0);
    pod_status(pod, container_id, state, NULL);
}

/* state.terminated of that instance, finished at wall second `finished`. */
static void terminated(const char *pod, const char *container_id, int64_t finished)
{
    char state[512];

    assert_int_equal(kubelet_json_terminated(state, sizeof(state), container_id, 139, "Error",
                                             finished - 60, finished),
                     0);
    pod_status(pod, container_id, state, NULL);
}

static k8slease_elector *start(const char *lease, const char *id, const char *pod, timing t,
                               int crash)
{
    k8slease_elector_options o = K8SLEASE_ELECTOR_OPTIONS_INIT;
    k8slease_elector *e = NULL;

    o.ns = ns;
    o.name = lease;
    o.identity = id;
    o.lease_duration_ms = t.ld;
    o.renew_deadline_ms = t.rd;
    o.retry_period_ms = t.rp;
    o.release_on_cancel = 0; /* a crash writes nothing */
    o.crash_failover = crash;
    o.pod_name = crash ? pod : NULL;
    if (k8slease_elector_start(&e, client, &o) != 0)
        fail_msg("elector_start(%s): %s", id, k8slease_error_last());
    return e;
}

/* The crash failover record in the Lease (the annotation's JSON), or NULL. */
static json_t *lease_record(const char *lease, int64_t *transitions)
{
    char path[256], *body = NULL;
    long status = 0;
    json_t *root, *v, *rec = NULL;

    snprintf(path, sizeof(path), "/apis/coordination.k8s.io/v1/namespaces/%s/leases/%s", ns, lease);
    if (e2e_api("GET", path, NULL, &status, &body) != 0 || status != 200)
        fail_msg("GET lease %s: HTTP %ld", lease, status);
    root = json_loads(body, 0, NULL);
    free(body);
    assert_non_null(root);
    if (transitions)
        *transitions =
            json_integer_value(json_object_get(json_object_get(root, "spec"), "leaseTransitions"));
    v = json_object_get(json_object_get(json_object_get(root, "metadata"), "annotations"),
                        "k8slease.io/holder-container");
    if (json_is_string(v))
        rec = json_loads(json_string_value(v), 0, NULL);
    json_decref(root);
    return rec;
}

/* Wait until the Lease carries a record of holder's term naming
 * container_id; returns its verifiedAt (wall second). */
static int64_t wait_record(const char *lease, const char *holder, const char *container_id)
{
    for (int64_t deadline = e2e_mono_ms() + WAIT_MS;; e2e_pause_ms(50)) {
        int64_t transitions = -1;
        json_t *rec = lease_record(lease, &transitions);

        if (rec) {
            const char *h = json_string_value(json_object_get(rec, "holder"));
            const char *id = json_string_value(json_object_get(rec, "containerID"));
            const char *at = json_string_value(json_object_get(rec, "verifiedAt"));
            int64_t epoch = json_integer_value(json_object_get(rec, "epoch"));

            if (h && id && at && strcmp(h, holder) == 0 && strcmp(id, container_id) == 0 &&
                epoch == transitions) {
                struct tm tm = {0};
                int64_t s;

                assert_non_null(strptime(at, "%Y-%m-%dT%H:%M:%SZ", &tm));
                s = (int64_t)timegm(&tm);
                assert_string_equal(json_string_value(json_object_get(rec, "container")), "main");
                json_decref(rec);
                return s;
            }
            json_decref(rec);
        }
        if (e2e_mono_ms() > deadline)
            fail_msg("lease %s: no crash failover record of %s naming %s within %d ms", lease,
                     holder, container_id, WAIT_MS);
    }
}

/* A report must finish in a later second than verifiedAt to be evidence:
 * wait (bounded) for the clock to pass it. */
static int64_t second_after(int64_t verified_s)
{
    while (wall_s() <= verified_s)
        e2e_pause_ms(20);
    return wall_s();
}

static void elected(k8slease_elector *e, const char *who, int64_t *epoch)
{
    if (k8slease_elector_wait_elected(e, WAIT_MS, epoch) != 0)
        fail_msg("%s not elected within %d ms: %s", who, WAIT_MS, k8slease_error_last());
}

/* Two candidates on their Pods; a leads, b follows; a's record is in the
 * Lease. Returns a's epoch and the record's verifiedAt. */
static void two(const char *lease, timing t, k8slease_elector **a, k8slease_elector **b,
                int64_t *epoch_a, int64_t *verified_s)
{
    char pa[80], pb[80];

    snprintf(pa, sizeof(pa), "%s-a", lease);
    snprintf(pb, sizeof(pb), "%s-b", lease);
    create_pod(pa);
    create_pod(pb);
    running(pa, ID_A);
    running(pb, ID_B);
    *a = start(lease, "a", pa, t, 1);
    elected(*a, "a", epoch_a);
    *verified_s = wait_record(lease, "a", ID_A);
    *b = start(lease, "b", pb, t, 1);
    assert_int_equal(k8slease_elector_wait_elected(*b, 500, NULL), K8SLEASE_ETIMEOUT);
}

/* The follower's election after a's crash at crash_ms: its time from the
 * crash, and the epoch. */
static int64_t b_elected_after(k8slease_elector *b, int64_t crash_ms, int64_t epoch_a)
{
    int64_t eb = -1;

    elected(b, "b", &eb);
    assert_true(eb > epoch_a);
    return e2e_mono_ms() - crash_ms;
}

/* a leads, then crashes; the kubelet reports exactly a's instance
 * terminated: b takes over at once, with a greater epoch. */
static void takeover(timing t, const char *lease)
{
    k8slease_elector *a, *b;
    int64_t ea, verified_s, crash_ms, took;

    two(lease, t, &a, &b, &ea, &verified_s);
    second_after(verified_s);
    crash_ms = e2e_mono_ms();
    k8slease_elector_free(a); /* no release: the Lease stays a's */
    {
        char pa[80];

        snprintf(pa, sizeof(pa), "%s-a", lease);
        terminated(pa, ID_A, wall_s());
    }
    took = b_elected_after(b, crash_ms, ea);
    print_message("%d/%d/%d: b led %lld ms after a's crash was reported (lease duration %d ms)\n",
                  t.ld / 1000, t.rd / 1000, t.rp / 1000, (long long)took, t.ld);
    /* By expiry it would take at least ld - rp; the report takes a few ms
     * (a watch event and a write). */
    if (took >= t.ld - t.rp)
        fail_msg("b led %lld ms after the report: by expiry, not by the report", (long long)took);
    k8slease_elector_free(b);
}

static void takeover_15102(void **state)
{
    (void)state;
    takeover(t15102, "crash-15102");
}

static void takeover_531(void **state)
{
    (void)state;
    takeover(t531, "crash-531");
}

/* The container restarted in place: a new instance runs, the old one is in
 * lastState.terminated. That is the end of a's process too. */
static void restart_in_place(void **state)
{
    k8slease_elector *a, *b;
    int64_t ea, verified_s, crash_ms, took, now_s;
    char state_json[256], last[512];

    (void)state;
    two("crash-restart", t15102, &a, &b, &ea, &verified_s);
    now_s = second_after(verified_s);
    crash_ms = e2e_mono_ms();
    k8slease_elector_free(a);
    assert_int_equal(kubelet_json_running(state_json, sizeof(state_json), now_s), 0);
    assert_int_equal(
        kubelet_json_terminated(last, sizeof(last), ID_A, 137, "OOMKilled", now_s - 60, now_s), 0);
    pod_status("crash-restart-a", ID_A2, state_json, last);
    took = b_elected_after(b, crash_ms, ea);
    print_message("restart in place: b led %lld ms after the report\n", (long long)took);
    if (took >= t15102.ld - t15102.rp)
        fail_msg("b led %lld ms after the report: by expiry", (long long)took);
    k8slease_elector_free(b);
}

/* Reports that are no evidence: b leads only by expiry. */
enum nonevidence { OTHER_ID, WAITING, DELETED, NOT_AFTER_VERIFIED, OTHER_UID };

static const char *const nonevidence_name[] = {
    "a terminated instance with another containerID", "waiting", "the pod deleted",
    "finished in the second of verifiedAt", "a new pod of the same name (another UID)"};

static void no_takeover(enum nonevidence what)
{
    k8slease_elector *a, *b;
    int64_t ea, verified_s, crash_ms, took;
    char lease[48], pa[80];

    snprintf(lease, sizeof(lease), "crash-no-%d", (int)what);
    snprintf(pa, sizeof(pa), "%s-a", lease);
    two(lease, t531, &a, &b, &ea, &verified_s);
    if (what != NOT_AFTER_VERIFIED)
        second_after(verified_s);
    crash_ms = e2e_mono_ms();
    k8slease_elector_free(a);
    switch (what) {
    case OTHER_ID:
        terminated(pa, ID_X, wall_s());
        break;
    case WAITING:
        pod_status(pa, ID_A, "{\"waiting\":{\"reason\":\"CrashLoopBackOff\"}}", NULL);
        break;
    case DELETED:
        delete_pod(pa);
        break;
    case NOT_AFTER_VERIFIED:
        terminated(pa, ID_A, verified_s);
        break;
    case OTHER_UID:
        delete_pod(pa);
        create_pod(pa);
        terminated(pa, ID_A, wall_s());
        break;
    }
    took = b_elected_after(b, crash_ms, ea);
    print_message("%s: b led %lld ms after a's crash (by expiry: lease duration %d ms)\n",
                  nonevidence_name[what], (long long)took, t531.ld);
    if (took < t531.ld - t531.rp)
        fail_msg("%s: b led %lld ms after a's crash, before the Lease could expire",
                 nonevidence_name[what], (long long)took);
    k8slease_elector_free(b);
}

static void no_takeover_other_id(void **state)
{
    (void)state;
    no_takeover(OTHER_ID);
}

static void no_takeover_waiting(void **state)
{
    (void)state;
    no_takeover(WAITING);
}

static void no_takeover_deleted(void **state)
{
    (void)state;
    no_takeover(DELETED);
}

static void no_takeover_not_after_verified(void **state)
{
    (void)state;
    no_takeover(NOT_AFTER_VERIFIED);
}

static void no_takeover_other_uid(void **state)
{
    (void)state;
    no_takeover(OTHER_UID);
}

/* A leader without the option writes no record; a follower with it waits
 * for expiry. A leader with it on a Pod that does not exist writes none
 * either (and says why). */
static void no_record(void **state)
{
    k8slease_elector *a, *b;
    int64_t ea, crash_ms, took;

    (void)state;
    create_pod("crash-norec-b");
    running("crash-norec-b", ID_B);
    a = start("crash-norec", "a", NULL, t531, 0);
    elected(a, "a", &ea);
    b = start("crash-norec", "b", "crash-norec-b", t531, 1);
    assert_int_equal(k8slease_elector_wait_elected(b, 500, NULL), K8SLEASE_ETIMEOUT);
    assert_null(lease_record("crash-norec", NULL));
    crash_ms = e2e_mono_ms();
    k8slease_elector_free(a);
    took = b_elected_after(b, crash_ms, ea);
    assert_true(took >= t531.ld - t531.rp);
    /* b leads on its Pod: its record is there now. */
    wait_record("crash-norec", "b", ID_B);
    k8slease_elector_free(b);
}

/* The seed ABI as Mooncake's master supervisor drives it: a standby polls
 * K8sLeaseGetHolder every 200 ms and calls K8sLeaseRunElection only when
 * it says no holder. With K8SLEASE_CRASH_FAILOVER=1 a holder whose
 * container the kubelet reported terminated is no holder, and the new
 * election takes the Lease at once. */
static void seed_abi_standby(void **state)
{
    k8slease_elector *a;
    int64_t ea, verified_s, report_ms, none_ms = 0, took;
    long long epoch = -1;
    char *holder = NULL, *err = NULL;
    char lease[] = "crash-seed";

    (void)state;
    create_pod("crash-seed-a");
    create_pod("crash-seed-b");
    running("crash-seed-a", ID_A);
    running("crash-seed-b", ID_B);
    a = start(lease, "a", "crash-seed-a", t15102, 1);
    elected(a, "a", &ea);
    verified_s = wait_record(lease, "a", ID_A);
    setenv("K8SLEASE_CRASH_FAILOVER", "1", 1);
    setenv("POD_NAME", "crash-seed-b", 1);
    setenv("POD_NAMESPACE", ns, 1);
    if (K8sLeaseGetHolder((char *)ns, lease, &holder, &epoch, &err) != 0)
        fail_msg("K8sLeaseGetHolder: %s", err);
    assert_non_null(holder);
    assert_string_equal(holder, "a");
    assert_int_equal(epoch, ea);
    free(holder);
    holder = NULL;

    second_after(verified_s);
    k8slease_elector_free(a);
    terminated("crash-seed-a", ID_A, wall_s());
    report_ms = e2e_mono_ms();
    while (!none_ms) {
        if (K8sLeaseGetHolder((char *)ns, lease, &holder, &epoch, &err) != 0)
            fail_msg("K8sLeaseGetHolder: %s", err);
        if (!holder)
            none_ms = e2e_mono_ms();
        free(holder);
        holder = NULL;
        if (!none_ms && e2e_mono_ms() - report_ms > WAIT_MS)
            fail_msg("K8sLeaseGetHolder still names a %d ms after the report", WAIT_MS);
        if (!none_ms)
            e2e_pause_ms(200); /* the supervisor's poll period */
    }
    {
        /* The native read: ended with the client option, not without. */
        k8slease_client_options co = K8SLEASE_CLIENT_OPTIONS_INIT;
        k8slease_client *crash_client = NULL;
        k8slease_holder *h = NULL;

        co.crash_failover = 1;
        assert_int_equal(k8slease_client_new(&crash_client, &co), 0);
        assert_int_equal(k8slease_holder_get(crash_client, ns, lease, 0, &h), 0);
        assert_string_equal(h->identity, "a");
        assert_int_equal(h->ended, 1);
        assert_int_equal(h->expired, 1);
        k8slease_holder_free(h);
        assert_int_equal(k8slease_holder_get(client, ns, lease, 0, &h), 0);
        assert_int_equal(h->ended, 0);
        assert_int_equal(h->expired, 0);
        k8slease_holder_free(h);
        k8slease_client_free(crash_client);
    }
    if (K8sLeaseRunElection((char *)ns, lease, "b", 15, 10, 2, &err) != 0 ||
        K8sLeaseWaitElected((char *)ns, lease, WAIT_MS / 1000, &epoch, &err) != 0)
        fail_msg("seed ABI standby: %s", err);
    took = e2e_mono_ms() - report_ms;
    print_message("seed ABI standby: no holder %lld ms after the report, led %lld ms after it "
                  "(epoch %lld after %lld)\n",
                  (long long)(none_ms - report_ms), (long long)took, epoch, (long long)ea);
    assert_true(epoch > ea);
    if (took >= t15102.ld - t15102.rp)
        fail_msg("the standby led %lld ms after the report: by expiry", (long long)took);
    wait_record(lease, "b", ID_B);
    if (K8sLeaseCancelElection((char *)ns, lease, &err) != 0 ||
        K8sLeaseWaitLost((char *)ns, lease, &err) != 0)
        fail_msg("seed ABI cancel: %s", err);

    /* Anything but 1 or 0 is refused, naming the variable. */
    setenv("K8SLEASE_CRASH_FAILOVER", "yes", 1);
    assert_int_equal(K8sLeaseRunElection((char *)ns, lease, "b", 15, 10, 2, &err), -1);
    assert_non_null(strstr(err, "K8SLEASE_CRASH_FAILOVER"));
    free(err);
    unsetenv("K8SLEASE_CRASH_FAILOVER");
}

/* No permission to read its own Pod (403): one warning, no record, the
 * term goes on; its crash would be found by expiry. Test server only (a
 * fault answers 403 for that Pod). */
static struct {
    pthread_mutex_t mu;
    int warnings;
} logged = {PTHREAD_MUTEX_INITIALIZER, 0};

static void count_warnings(k8slease_log_level level, const char *msg, void *ud)
{
    (void)ud;
    if (level != K8SLEASE_LOG_WARN || !strstr(msg, "crash failover: cannot read pod"))
        return;
    pthread_mutex_lock(&logged.mu);
    logged.warnings++;
    pthread_mutex_unlock(&logged.mu);
    fprintf(stderr, "k8slease warn: %s\n", msg);
}

static int warnings(void)
{
    int n;

    pthread_mutex_lock(&logged.mu);
    n = logged.warnings;
    pthread_mutex_unlock(&logged.mu);
    return n;
}

static void own_pod_forbidden(void **state)
{
    k8slease_client_options co = K8SLEASE_CLIENT_OPTIONS_INIT;
    k8slease_elector_options o = K8SLEASE_ELECTOR_OPTIONS_INIT;
    k8slease_client *c = NULL;
    k8slease_elector *e = NULL;
    k8slease_elector_stats st = {.version = K8SLEASE_ELECTOR_STATS_VERSION};
    char fault[512];

    (void)state;
    e2e_need_testserver("needs a 403 for one Pod (a fault rule); on a real server RBAC is per "
                        "namespace");
    create_pod("crash-403-a");
    running("crash-403-a", ID_A);
    snprintf(fault, sizeof(fault),
             "{\"kind\":\"error\",\"status\":403,\"match\":{\"verb\":\"get\","
             "\"path_prefix\":\"/api/v1/namespaces/%s/pods/crash-403-a\"}}",
             ns);
    e2e_add_fault(fault);
    co.log_cb = count_warnings;
    co.log_level = K8SLEASE_LOG_WARN;
    assert_int_equal(k8slease_client_new(&c, &co), 0);
    o.ns = ns;
    o.name = "crash-403";
    o.identity = "a";
    o.lease_duration_ms = t531.ld;
    o.renew_deadline_ms = t531.rd;
    o.retry_period_ms = t531.rp;
    o.crash_failover = 1;
    o.pod_name = "crash-403-a";
    assert_int_equal(k8slease_elector_start(&e, c, &o), 0);
    elected(e, "a", NULL);
    for (int64_t deadline = e2e_mono_ms() + WAIT_MS; warnings() == 0; e2e_pause_ms(20))
        if (e2e_mono_ms() > deadline)
            fail_msg("no warning about the forbidden Pod within %d ms", WAIT_MS);
    /* Three renewals later: still one warning, no record, still leader. */
    for (int64_t deadline = e2e_mono_ms() + WAIT_MS;; e2e_pause_ms(50)) {
        assert_int_equal(k8slease_elector_stats_get(e, &st), 0);
        if (st.renewals >= 3)
            break;
        if (e2e_mono_ms() > deadline)
            fail_msg("fewer than 3 renewals within %d ms", WAIT_MS);
    }
    assert_int_equal(warnings(), 1);
    assert_null(lease_record("crash-403", NULL));
    assert_true(k8slease_elector_is_leader(e));
    k8slease_elector_free(e);
    k8slease_client_free(c);
}

/* A renewal of the dead leader's term that lands after the crash (it was
 * on its way) changes the record but not the term: the report still ends
 * it. The test writes that renewal as the leader would have. */
static void late_renewal(void **state)
{
    k8slease_elector *a, *b;
    int64_t ea, verified_s, crash_ms, took;
    char path[256], *body = NULL, stamp[40];
    long status = 0;
    json_t *root;
    struct timespec ts;
    struct tm tm;

    (void)state;
    two("crash-late", t15102, &a, &b, &ea, &verified_s);
    second_after(verified_s);
    crash_ms = e2e_mono_ms();
    k8slease_elector_free(a);
    /* The renewal on its way: renewTime now, everything else as it is. */
    snprintf(path, sizeof(path), "/apis/coordination.k8s.io/v1/namespaces/%s/leases/crash-late",
             ns);
    assert_int_equal(e2e_api("GET", path, NULL, &status, &body), 0);
    assert_int_equal(status, 200);
    root = json_loads(body, 0, NULL);
    free(body);
    assert_non_null(root);
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(stamp, 20, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(stamp + 19, sizeof(stamp) - 19, ".%06ldZ", ts.tv_nsec / 1000);
    json_object_set_new(json_object_get(root, "spec"), "renewTime", json_string(stamp));
    body = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    assert_int_equal(e2e_api("PUT", path, body, &status, NULL), 0);
    free(body);
    assert_int_equal(status, 200);
    terminated("crash-late-a", ID_A, wall_s());
    took = b_elected_after(b, crash_ms, ea);
    print_message("late renewal, then the report: b led %lld ms after the crash\n",
                  (long long)took);
    if (took >= t15102.ld - t15102.rp)
        fail_msg("b led %lld ms after the crash: by expiry", (long long)took);
    k8slease_elector_free(b);
}

/* The CLI as the leader, killed with SIGKILL (a real crash of a process),
 * the kubelet's report 1 s later: a native follower takes over. */
static pid_t cli_pid;

static int kill_cli(void **state)
{
    (void)state;
    if (cli_pid > 0) {
        kill(cli_pid, SIGKILL);
        waitpid(cli_pid, NULL, 0);
    }
    cli_pid = 0;
    return 0;
}

static void cli_leader_killed(void **state)
{
    k8slease_elector *b;
    int fds[2];
    char line[256], lease_ref[128];
    int64_t ea = -1, verified_s, kill_ms, took;

    (void)state;
    create_pod("crash-cli-a");
    create_pod("crash-cli-b");
    running("crash-cli-a", ID_A);
    running("crash-cli-b", ID_B);
    snprintf(lease_ref, sizeof(lease_ref), "%s/crash-cli", ns);
    assert_int_equal(pipe(fds), 0);
    cli_pid = fork();
    assert_true(cli_pid >= 0);
    if (cli_pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        setenv("POD_NAME", "crash-cli-a", 1);
        setenv("POD_NAMESPACE", ns, 1);
        execl(K8SLEASE_CLI_PATH, K8SLEASE_CLI_PATH, "elect", "--lease", lease_ref, "--identity",
              "cli", "--crash-failover", (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    do {
        if (kl_test_read_line(fds[0], line, sizeof(line), WAIT_MS) != 0)
            fail_msg("k8slease elect --crash-failover: not elected within %d ms", WAIT_MS);
    } while (sscanf(line, "elected epoch=%" SCNd64, &ea) != 1);
    verified_s = wait_record("crash-cli", "cli", ID_A);
    b = start("crash-cli", "b", "crash-cli-b", t15102, 1);
    assert_int_equal(k8slease_elector_wait_elected(b, 500, NULL), K8SLEASE_ETIMEOUT);
    second_after(verified_s);
    kill_ms = e2e_mono_ms();
    kill_cli(NULL);
    close(fds[0]);
    e2e_pause_ms(1000); /* the kubelet's delay: what is measured, not a synchronisation */
    terminated("crash-cli-a", ID_A, wall_s());
    took = b_elected_after(b, kill_ms, ea);
    print_message("CLI leader SIGKILLed, reported 1 s later: b led %lld ms after the kill\n",
                  (long long)took);
    if (took >= t15102.ld - t15102.rp)
        fail_msg("b led %lld ms after the kill: by expiry", (long long)took);
    k8slease_elector_free(b);
}

/* Bad options are refused, naming the option. */
static void bad_options(void **state)
{
    k8slease_elector_options o = K8SLEASE_ELECTOR_OPTIONS_INIT;
    k8slease_elector *e = NULL;

    (void)state;
    o.name = "crash-bad";
    o.identity = "x";
    o.crash_failover = 1;
    assert_int_equal(k8slease_elector_start(&e, client, &o), K8SLEASE_EINVAL);
    assert_non_null(strstr(k8slease_error_last(), "pod_name"));
    o.pod_name = "Not_A_Name";
    assert_int_equal(k8slease_elector_start(&e, client, &o), K8SLEASE_EINVAL);
    assert_non_null(strstr(k8slease_error_last(), "Not_A_Name"));
    o.pod_name = "p";
    o.container = "Bad Container";
    assert_int_equal(k8slease_elector_start(&e, client, &o), K8SLEASE_EINVAL);
    assert_non_null(strstr(k8slease_error_last(), "Bad Container"));
    o.container = "main.sidecar"; /* a subdomain, not a label */
    assert_int_equal(k8slease_elector_start(&e, client, &o), K8SLEASE_EINVAL);
    assert_non_null(strstr(k8slease_error_last(), "container \"main.sidecar\""));
    o.container = NULL;
    o.pod_namespace = "Bad_NS";
    assert_int_equal(k8slease_elector_start(&e, client, &o), K8SLEASE_EINVAL);
    assert_non_null(strstr(k8slease_error_last(), "pod_namespace \"Bad_NS\""));
    o.pod_namespace = NULL;
    o.crash_failover = 0;
    assert_int_equal(k8slease_elector_start(&e, client, &o), K8SLEASE_EINVAL);
    assert_non_null(strstr(k8slease_error_last(), "crash_failover"));
    assert_null(e);
}

static int setup(void **state)
{
    k8slease_client_options o = K8SLEASE_CLIENT_OPTIONS_INIT;

    (void)state;
    if (e2e_setup(NULL) != 0)
        return -1;
    o.log_cb = e2e_log_to_stderr;
    o.log_level = K8SLEASE_LOG_WARN;
    if (k8slease_client_new(&client, &o) != 0)
        return -1;
    ns = e2e_namespace("crash");
    return ns ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return e2e_teardown(client);
}

int main(void)
{
#define T(f) cmocka_unit_test(f)
    /* clang-format off */
    const struct CMUnitTest tests[] = {
        T(bad_options),
        T(takeover_15102),
        T(takeover_531),
        T(restart_in_place),
        T(no_takeover_other_id),
        T(no_takeover_waiting),
        T(no_takeover_deleted),
        T(no_takeover_not_after_verified),
        T(no_takeover_other_uid),
        T(no_record),
        T(seed_abi_standby),
        T(own_pod_forbidden),
        T(late_renewal),
        cmocka_unit_test_teardown(cli_leader_killed, kill_cli),
    };
    /* clang-format on */
#undef T
    const char *only = getenv("K8SLEASE_TEST_FILTER");

    if (only && only[0])
        cmocka_set_test_filter(only);
    return cmocka_run_group_tests(tests, setup, teardown);
}
