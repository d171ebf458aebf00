/* Failing allocator across the library: every entry point that needs no
 * server runs with allocation n failing (and every later one of the same
 * thread: the hook is a budget), for n = 0, 1, 2, ... until a run makes no
 * allocation fail: n counts the calling thread's allocations, and, in a
 * second sweep of the scenarios that make a client, its loop thread's
 * (the requests, the timers' work, the watches).
 * Each run must succeed or fail cleanly with K8SLEASE_ENOMEM (or the
 * documented error of the scenario), and free everything: LeakSanitizer
 * (ASan build) and scripts/valgrind.sh prove the "free everything" part.
 *
 * jansson is routed through the library allocator (json_set_alloc_funcs),
 * so its allocations fail too; libyaml and libcurl keep their own.
 *
 * The server is 127.0.0.1 on a port that was bound and closed: every
 * request fails with "connection refused", fast. */
#include <arpa/inet.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <jansson.h>

#include "core/client.h"
#include "core/common.h"
#include "core/http.h"
#include "k8s/kubeconfig.h"
#include "k8s/codec.h"
#include "k8s/pod.h"
#include "failalloc.h"
#include "libk8s_lease_wrapper.h"
#include "testlib.h"

#ifndef K8SLEASE_TEST_DATA
#error "K8SLEASE_TEST_DATA must name tests/data"
#endif

/* More than any scenario needs (the biggest has a few hundred). */
#define MAX_RUNS 5000
/* How long an elector or a watch may run before it is freed: enough for
 * its first request to fail when allocations do not. */
#define SETTLE_MS 200

static struct {
    char dir[64];
    char kubeconfig[PATH_MAX]; /* the client's: token, certificates, refused port */
    char full[PATH_MAX];       /* every kubeconfig feature the loader knows */
    int port;
    char *lease_body;
    size_t lease_len;
    int recovered; /* the scenario reset the allocator itself to finish cleanly */
    int on_loop;   /* new_client arms its loop thread with n, not the caller */
    long n;
} T;

/* ------------------------------------------------------------------------ */
/* Fixtures                                                                 */
/* ------------------------------------------------------------------------ */

static char *slurp(const char *path, size_t *len)
{
    return kl_test_read_file(path, len);
}

static void write_file(const char *path, const char *content)
{
    FILE *f = fopen(path, "w");

    assert_non_null(f);
    assert_true(fputs(content, f) >= 0);
    assert_int_equal(fclose(f), 0);
}

static int setup(void **state)
{
    char path[PATH_MAX], text[16384];
    char *ca, *cert, *key, *ca64, *cert64, *key64;

    (void)state;
    strcpy(T.dir, "/tmp/kl_failalloc_XXXXXX");
    if (!mkdtemp(T.dir))
        return -1;
    T.port = kl_test_closed_port();
    snprintf(path, sizeof(path), "%s/tls/ca.crt", K8SLEASE_TEST_DATA);
    ca = slurp(path, NULL);
    snprintf(path, sizeof(path), "%s/tls/client.crt", K8SLEASE_TEST_DATA);
    cert = slurp(path, NULL);
    snprintf(path, sizeof(path), "%s/tls/client.key", K8SLEASE_TEST_DATA);
    key = slurp(path, NULL);
    ca64 = kl_test_base64(ca);
    cert64 = kl_test_base64(cert);
    key64 = kl_test_base64(key);

    snprintf(T.kubeconfig, sizeof(T.kubeconfig), "%s/kubeconfig", T.dir);
    snprintf(text, sizeof(text),
             "apiVersion: v1\n"
             "kind: Config\n"
             "current-context: fa\n"
             "clusters:\n"
             "- name: c\n"
             "  cluster:\n"
             "    server: https://127.0.0.1:%d/\n"
             "    certificate-authority-data: %s\n"
             "    tls-server-name: localhost\n"
             "contexts:\n"
             "- name: fa\n"
             "  context: {cluster: c, user: u, namespace: failalloc}\n"
             "users:\n"
             "- name: u\n"
             "  user:\n"
             "    token: failalloc-token\n"
             "    client-certificate-data: %s\n"
             "    client-key-data: %s\n",
             T.port, ca64, cert64, key64);
    write_file(T.kubeconfig, text);

    snprintf(path, sizeof(path), "%s/ca.crt", T.dir);
    write_file(path, ca);
    snprintf(T.full, sizeof(T.full), "%s/full", T.dir);
    snprintf(text, sizeof(text),
             "current-context: full\n"
             "clusters:\n"
             "- name: c\n"
             "  cluster:\n"
             "    server: https://127.0.0.1:%d\n"
             "    certificate-authority: ca.crt\n"
             "    certificate-authority-data: %s\n"
             "    insecure-skip-tls-verify: false\n"
             "    tls-server-name: localhost\n"
             "contexts:\n"
             "- name: other\n"
             "  context: {cluster: nope}\n"
             "- name: full\n"
             "  context: {cluster: c, user: u, namespace: failalloc}\n"
             "users:\n"
             "- name: u\n"
             "  user:\n"
             "    client-certificate-data: %s\n"
             "    client-key-data: %s\n"
             "    token: t\n"
             "    tokenFile: token\n"
             "    exec:\n"
             "      apiVersion: client.authentication.k8s.io/v1\n"
             "      command: ./plugin\n"
             "      args: [a, b, c]\n"
             "      env: [{name: A, value: b}, {name: C}]\n",
             T.port, ca64, cert64, key64);
    write_file(T.full, text);

    snprintf(path, sizeof(path), "%s/k8s-api-samples/200_get.json", K8SLEASE_TEST_DATA);
    T.lease_body = slurp(path, &T.lease_len);

    /* The compat layer's process-wide client reads these. */
    setenv("KUBECONFIG", T.kubeconfig, 1);
    unsetenv("KUBERNETES_SERVICE_HOST");
    free(ca);
    free(cert);
    free(key);
    free(ca64);
    free(cert64);
    free(key64);
    return 0;
}

static int teardown(void **state)
{
    char path[PATH_MAX];

    (void)state;
    kl__alloc_fail_after(-1);
    snprintf(path, sizeof(path), "%s/kubeconfig", T.dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/full", T.dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/ca.crt", T.dir);
    unlink(path);
    rmdir(T.dir);
    free(T.lease_body);
    T.lease_body = NULL;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The sweep                                                                */
/* ------------------------------------------------------------------------ */

typedef struct scenario {
    const char *name;
    int (*run)(void);
    int ok; /* what run returns when no allocation fails */
} scenario;

/* jansson cannot tell a failed allocation from bad input while it parses a
 * string: the codec then says "not valid JSON" (tests/unit/test_lease.c
 * accepts it too). Only allowed in runs where an allocation failed. */
static int jansson_oom(int err)
{
    return err == K8SLEASE_EPROTOCOL && strstr(kl__error_get(), "not valid JSON");
}

/* Runs s with the nth allocation failing, n = 0, 1, ..., until a run
 * makes no allocation fail (its budget was left over): the calling
 * thread's, or (on_loop) the loop thread's of the client the scenario
 * makes. Returns the number of allocation points. */
static long sweep_on(const scenario *s, int on_loop)
{
    long n, enomem = 0, misreported = 0;
    struct timespec t0, t1;
    int err = 0, spent;

    clock_gettime(CLOCK_MONOTONIC, &t0);
    T.on_loop = on_loop;
    for (n = 0; n <= MAX_RUNS; n++) {
        T.recovered = 0;
        T.n = n;
        kl__error_clear();
        kl__alloc_fail_after(on_loop ? -1 : n);
        err = s->run();
        spent = kl__alloc_failed() || T.recovered;
        kl__alloc_fail_after(-1);
        if (!spent)
            break;
        if (err == K8SLEASE_ENOMEM) {
            if (!kl__error_get()[0])
                fail_msg("%s: allocation %ld failing: ENOMEM without a message", s->name, n);
            enomem++;
        } else if (jansson_oom(err)) {
            misreported++;
        } else if (err != s->ok) {
            fail_msg("%s: allocation %ld failing: %s (%s)", s->name, n, k8slease_strerror(err),
                     kl__error_get());
        }
    }
    if (n > MAX_RUNS)
        fail_msg("%s: still failing allocations after %d runs", s->name, MAX_RUNS);
    if (err != s->ok)
        fail_msg("%s: with every allocation succeeding: %s (%s), want %s", s->name,
                 k8slease_strerror(err), kl__error_get(), k8slease_strerror(s->ok));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    print_message("%-16s %4ld allocation points%s, %ld ENOMEM, %ld jansson \"not valid JSON\", "
                  "%.1f s\n",
                  s->name, n, on_loop ? " (loop thread)" : "", enomem, misreported,
                  (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
    T.on_loop = 0;
    return n;
}

static long sweep(const scenario *s)
{
    return sweep_on(s, 0);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) != 0)
        ;
}

static int new_client(k8slease_client **c)
{
    k8slease_client_options opts = K8SLEASE_CLIENT_OPTIONS_INIT;
    int err;

    opts.kubeconfig = T.kubeconfig;
    opts.user_agent = "failalloc";
    if ((err = k8slease_client_new(c, &opts)) == 0 && T.on_loop)
        kl_test_alloc_fail_on_loop((*c)->loop, T.n);
    return err;
}

/* ------------------------------------------------------------------------ */
/* Scenarios                                                                */
/* ------------------------------------------------------------------------ */

static int run_restconfig(void)
{
    kl__restconfig *cfg = NULL;
    int err = kl__restconfig_from_kubeconfig(&cfg, T.full, NULL);

    if (err == 0) {
        assert_non_null(cfg->exec);
        assert_string_equal(cfg->ns, "failalloc");
    }
    kl__restconfig_free(cfg);
    return err;
}

/* Both decoders (the scanner, taking the sample; jansson), an update from
 * the text and one from the tree built on demand, the text moved out. */
static int run_lease_codec(void)
{
    kl__lease_spec spec = {"me", 15, INT64_C(1700000000000000), INT64_C(1700000001000000), 4};
    kl__lease *l = NULL, *j = NULL;
    char *body = NULL, *text = NULL;
    int err;

    if ((err = kl__lease_parse(&l, T.lease_body, T.lease_len)) < 0 ||
        (err = kl__lease_parse_json(&j, T.lease_body, T.lease_len)) < 0)
        goto out;
    assert_null(l->root);
    assert_non_null(j->root);
    err = K8SLEASE_ENOMEM;
    if (!(body = kl__lease_encode_update(l, &spec)))
        goto out;
    kl__free(body);
    if (!(body = kl__lease_encode_update_in_place(l, &spec)) || !(text = kl__lease_text_take(j)))
        goto out;
    err = 0;
out:
    kl__free(text);
    kl__free(body);
    kl__lease_free(j);
    kl__lease_free(l);
    return err;
}

/* Watch events through the scanner (a Lease, a bookmark) and jansson (an
 * ERROR), the Lease's text copied as the elector copies it. */
static int run_watch_codec(void)
{
    static const char *const lines[] = {
        "{\"type\":\"MODIFIED\",\"object\":{\"kind\":\"Lease\",\"metadata\":{\"name\":\"l\","
        "\"namespace\":\"failalloc\",\"resourceVersion\":\"9\",\"annotations\":{"
        "\"k8slease.io/holder-container\":\"{\\\"holder\\\":\\\"a\\\"}\"}},\"spec\":{"
        "\"holderIdentity\":\"a\",\"renewTime\":\"2026-11-30T10:02:59.000000Z\"}}}",
        "{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":\"10\"}}}",
        "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"code\":410,\"message\":\"old\"}}",
    };
    int err = 0;

    for (size_t i = 0; i < KL_ARRAY_LEN(lines) && err == 0; i++) {
        kl__watch_event ev;
        char *text;

        if ((err = kl__watch_event_parse(&ev, lines[i], strlen(lines[i]))) < 0)
            break;
        if (ev.lease) {
            assert_string_equal(ev.lease->holder_container, "{\"holder\":\"a\"}");
            if (!(text = kl__lease_text_dup(ev.lease)))
                err = K8SLEASE_ENOMEM;
            kl__free(text);
        }
        kl__watch_event_clear(&ev);
    }
    return err;
}

/* A Pod as the kubelet leaves it after a restart in place (two container
 * statuses, the previous instance in lastState), as a follower reads it. */
static const char pod_body[] =
    "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"p1\",\"namespace\":"
    "\"failalloc\",\"uid\":\"5ac7dc62-f5fb-4c1a-9e7f-567bba9d7ca8\",\"resourceVersion\":\"209\","
    "\"labels\":{\"app\":\"x\"}},\"spec\":{\"containers\":[{\"name\":\"main\",\"image\":"
    "\"busybox\"},{\"name\":\"side\",\"image\":\"busybox\"}]},\"status\":{\"phase\":"
    "\"Running\",\"containerStatuses\":[{\"name\":\"main\",\"containerID\":\"containerd://bb\","
    "\"state\":{\"running\":{\"startedAt\":\"2024-05-01T10:00:05Z\"}},\"lastState\":{"
    "\"terminated\":{\"exitCode\":137,\"containerID\":\"containerd://aa\"}}},{\"name\":"
    "\"side\",\"state\":{\"waiting\":{\"reason\":\"ContainerCreating\"}},\"lastState\":{}}]}}";

static int run_pod_codec(void)
{
    const kl__pod_container *c = NULL;
    kl__pod *p = NULL;
    int err;

    if ((err = kl__pod_parse(&p, pod_body, strlen(pod_body))) < 0)
        return err;
    assert_true(kl__pod_container_ended(p, p->uid, "main", "containerd://aa"));
    assert_int_equal(kl__pod_own_container(p, "main", INT64_C(1714557605000000), &c), 0);
    assert_string_equal(c->container_id, "containerd://bb");
    kl__pod_free(p);
    return 0;
}

static int run_client(void)
{
    k8slease_client *c = NULL;
    int err = new_client(&c);

    if (err == 0) {
        assert_string_equal(k8slease_client_namespace(c), "failalloc");
        assert_non_null(k8slease_client_server(c));
    } else {
        assert_null(c);
    }
    k8slease_client_free(c);
    return err;
}

static int run_elector(void)
{
    k8slease_elector_options opts = K8SLEASE_ELECTOR_OPTIONS_INIT;
    k8slease_elector_stats st = {K8SLEASE_ELECTOR_STATS_VERSION};
    k8slease_client *c = NULL;
    k8slease_elector *e = NULL;
    int err;

    if ((err = new_client(&c)) < 0)
        return err;
    opts.name = "failalloc";
    opts.identity = "me";
    opts.lease_duration_ms = 3000;
    opts.renew_deadline_ms = 2000;
    opts.retry_period_ms = 500;
    opts.release_on_cancel = 0;
    if ((err = k8slease_elector_start(&e, c, &opts)) == 0) {
        for (int i = 0; i < SETTLE_MS && st.requests == 0; i++) {
            assert_int_equal(k8slease_elector_stats_get(e, &st), 0);
            sleep_ms(1);
        }
        assert_int_equal(k8slease_elector_is_leader(e), 0);
    } else {
        assert_null(e);
    }
    k8slease_elector_free(e);
    k8slease_client_free(c);
    return err;
}

/* Watch callbacks run on the loop thread, where cmocka cannot fail a test:
 * they count, the test checks. None may run with the server down. */
static atomic_int callbacks;

static void on_holder(const char *identity, int64_t epoch, void *user_data)
{
    (void)identity;
    (void)epoch;
    (void)user_data;
    atomic_fetch_add(&callbacks, 1);
}

static int run_watch(void)
{
    k8slease_client *c = NULL;
    k8slease_watch *w = NULL;
    int err;

    if ((err = new_client(&c)) < 0)
        return err;
    if ((err = k8slease_watch_start(&w, c, NULL, "failalloc", on_holder, NULL)) == 0)
        sleep_ms(20); /* the first LIST fails */
    else
        assert_null(w);
    k8slease_watch_free(w);
    k8slease_client_free(c);
    assert_int_equal(atomic_load(&callbacks), 0);
    return err;
}

static int run_holder_get(void)
{
    k8slease_client *c = NULL;
    k8slease_holder *h = NULL;
    int err;

    if ((err = new_client(&c)) < 0)
        return err;
    err = k8slease_holder_get(c, NULL, "failalloc", 5000, &h);
    assert_null(h);
    if (err == K8SLEASE_ETRANSPORT && !strstr(kl__error_get(), "get lease failalloc/failalloc"))
        fail_msg("transport error without the lease: %s", kl__error_get());
    k8slease_client_free(c);
    return err;
}

/* A compat call failed: it must have said why; out of memory maps back to
 * K8SLEASE_ENOMEM. */
static int compat_failure(const char *call, char *msg)
{
    int oom;

    if (!msg)
        fail_msg("%s failed without a message", call);
    oom = strstr(msg, "out of memory") != NULL;
    if (!oom)
        fail_msg("%s: %s", call, msg);
    free(msg);
    return K8SLEASE_ENOMEM;
}

/* The process-wide client, created by the first call that succeeds. */
static int run_compat_init(void)
{
    char *msg = NULL;

    if (K8sLeaseInit(&msg) != 0)
        return compat_failure("K8sLeaseInit", msg);
    return 0;
}

static int run_compat_election(void)
{
    char ns[] = "failalloc", name[] = "compat", id[] = "me";
    char *msg = NULL;

    if (K8sLeaseRunElection(ns, name, id, 3, 2, 1, &msg) != 0)
        return compat_failure("K8sLeaseRunElection", msg);
    if (K8sLeaseCancelElection(ns, name, &msg) != 0) {
        compat_failure("K8sLeaseCancelElection", msg);
        /* A caller retries once memory is back; until then the election
         * goes on. */
        T.recovered = 1;
        kl__alloc_fail_after(-1);
        msg = NULL;
        assert_int_equal(K8sLeaseCancelElection(ns, name, &msg), 0);
    }
    assert_int_equal(K8sLeaseWaitLost(ns, name, &msg), 0);
    return 0;
}

static int run_compat_holder(void)
{
    char ns[] = "failalloc", name[] = "compat";
    char *holder = NULL, *msg = NULL;
    long long transitions = -1;

    if (K8sLeaseGetHolder(ns, name, &holder, &transitions, &msg) == 0)
        fail_msg("K8sLeaseGetHolder succeeded with the server down");
    assert_null(holder);
    if (msg && strstr(msg, "out of memory"))
        return compat_failure("K8sLeaseGetHolder", msg);
    if (!msg || !strstr(msg, "failed to get lease"))
        fail_msg("K8sLeaseGetHolder: %s", msg ? msg : "(no message)");
    free(msg);
    return K8SLEASE_ETRANSPORT;
}

static void on_compat_holder(void *ctx, const char *holder, size_t size, int64_t transitions)
{
    (void)ctx;
    (void)holder;
    (void)size;
    (void)transitions;
    atomic_fetch_add(&callbacks, 1);
}

static int run_compat_watch(void)
{
    char ns[] = "failalloc", name[] = "compat";
    char *msg = NULL;

    if (K8sLeaseWatchHolder(ns, name, NULL, on_compat_holder, &msg) != 0)
        return compat_failure("K8sLeaseWatchHolder", msg);
    sleep_ms(20);
    assert_int_equal(K8sLeaseCancelWatch(ns, name, &msg), 0);
    assert_int_equal(atomic_load(&callbacks), 0);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Tests                                                                    */
/* ------------------------------------------------------------------------ */

static void test_restconfig(void **state)
{
    static const scenario s = {"restconfig", run_restconfig, 0};

    (void)state;
    assert_true(sweep(&s) > 20);
}

static void test_lease_codec(void **state)
{
    static const scenario s = {"lease codec", run_lease_codec, 0};

    (void)state;
    assert_true(sweep(&s) > 20);
}

static void test_watch_codec(void **state)
{
    static const scenario s = {"watch codec", run_watch_codec, 0};

    (void)state;
    assert_true(sweep(&s) > 5);
}

static void test_pod_codec(void **state)
{
    static const scenario s = {"pod codec", run_pod_codec, 0};

    (void)state;
    assert_true(sweep(&s) > 10);
}

static void test_client(void **state)
{
    static const scenario s = {"client", run_client, 0};

    (void)state;
    assert_true(sweep(&s) > 10);
}

static void test_elector(void **state)
{
    static const scenario s = {"elector", run_elector, 0};

    (void)state;
    assert_true(sweep(&s) > 10);
    assert_true(sweep_on(&s, 1) > 10);
}

static void test_watch(void **state)
{
    static const scenario s = {"watch", run_watch, 0};

    (void)state;
    assert_true(sweep(&s) > 10);
    assert_true(sweep_on(&s, 1) > 5);
}

static void test_holder_get(void **state)
{
    static const scenario s = {"holder_get", run_holder_get, K8SLEASE_ETRANSPORT};

    (void)state;
    assert_true(sweep(&s) > 10);
    assert_true(sweep_on(&s, 1) > 5);
}

/* The compat client is created once per process and kept: the first sweep
 * fails creating it until it exists; the others run with it. */
static void test_compat(void **state)
{
    static const scenario init = {"compat init", run_compat_init, 0};
    static const scenario election = {"compat election", run_compat_election, 0};
    static const scenario holder = {"compat holder", run_compat_holder, K8SLEASE_ETRANSPORT};
    static const scenario watch = {"compat watch", run_compat_watch, 0};

    (void)state;
    assert_true(sweep(&init) > 10);
    assert_true(sweep(&election) > 0);
    assert_true(sweep(&holder) > 0);
    assert_true(sweep(&watch) > 0);
}

/* k8slease_elector_free and k8slease_watch_free detach from the loop with
 * kl__loop_call and then free: if kl__loop_call could fail for want of
 * memory, they would free the object while the loop thread still held it
 * (timer, request in flight). kl__loop_call waits for its closure, so it
 * needs no allocation and must not fail. */
static void call_flag(void *arg)
{
    *(int *)arg = 1;
}

static void test_loop_call_needs_no_allocation(void **state)
{
    k8slease_client *c = NULL;
    int ran = 0, err;

    (void)state;
    assert_int_equal(new_client(&c), 0);
    kl__alloc_fail_after(0);
    err = kl__loop_call(c->loop, call_flag, &ran);
    kl__alloc_fail_after(-1);
    k8slease_client_free(c);
    if (err != 0 || !ran)
        fail_msg("kl__loop_call out of memory: %s (%s), closure %s", k8slease_strerror(err),
                 kl__error_get(), ran ? "ran" : "did not run");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_restconfig),
        cmocka_unit_test(test_lease_codec),
        cmocka_unit_test(test_pod_codec),
        cmocka_unit_test(test_client),
        cmocka_unit_test(test_loop_call_needs_no_allocation),
        cmocka_unit_test(test_holder_get),
        cmocka_unit_test(test_elector),
        cmocka_unit_test(test_watch),
        cmocka_unit_test(test_compat),
        cmocka_unit_test(test_watch_codec),
    };

    /* Before any JSON value exists: jansson allocates through the hook. */
    json_set_alloc_funcs(kl__malloc, kl__free);
    return cmocka_run_group_tests(tests, setup, teardown);
}
