/*
 * test_testserver.c - k8slease-testserver against the behaviour of a real
 * kube-apiserver (tests/data/k8s-api-samples) and its own control API.
 *
 * Talks HTTP with libcurl only: this suite must pass while the library is
 * still being written. Waits are bounded; nothing sleeps to synchronise
 * (the few bounded waits for an absence of events say so).
 *
 * Length: one test per behaviour of the real API server the test server
 * must match, plus its control API; they need nothing but the test server.
 */
#include "harness.h"
#include "testlib.h"
#include "tsclient.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <jansson.h>

#ifndef K8SLEASE_TEST_DATA
#define K8SLEASE_TEST_DATA "tests/data"
#endif
#define SAMPLES K8SLEASE_TEST_DATA "/k8s-api-samples/"

#define LEASES "/apis/coordination.k8s.io/v1/namespaces/default/leases"
#define PODS   "/api/v1/namespaces/default/pods"
#define MERGE  "application/merge-patch+json"

static ts_server *srv; /* shared by the tests that do not restart or rotate */

/* ---- small helpers ------------------------------------------------------ */

/* A request on server s whose transport must succeed; returns the parsed body. */
static json_t *call(ts_server *s, const char *method, const char *path, const char *ctype,
                    const char *body, long *status)
{
    char *resp = NULL;
    assert_int_equal(ts_request(s, method, path, ctype, body, status, &resp), 0);
    json_t *j = json_loads(resp, 0, NULL);
    if (!j)
        print_message("unparsable body for %s %s: %s\n", method, path, resp);
    free(resp);
    return j;
}

static json_t *api(const char *method, const char *path, const char *ctype, const char *body,
                   long *status)
{
    return call(srv, method, path, ctype, body, status);
}

static const char *str(json_t *j, const char *path)
{
    const char *s = json_string_value(tc_at(j, path));
    return s ? s : "";
}

static unsigned long long rv_of(json_t *obj)
{
    return strtoull(str(obj, "metadata.resourceVersion"), NULL, 10);
}

static void clear_faults(void)
{
    tc_control(srv, "DELETE", "/testserver/v1/faults", NULL, 200);
}

static json_t *create_lease(ts_server *s, const char *name, const char *holder)
{
    long st;
    char *body = tc_fmt("{\"apiVersion\":\"coordination.k8s.io/v1\",\"kind\":\"Lease\","
                        "\"metadata\":{\"name\":\"%s\"},\"spec\":{\"holderIdentity\":\"%s\","
                        "\"leaseDurationSeconds\":15,\"leaseTransitions\":0}}",
                        name, holder);
    json_t *j = call(s, "POST", LEASES, NULL, body, &st);
    free(body);
    assert_int_equal(st, 201);
    return j;
}

/* A raw libcurl GET with full control over credentials and agent. */
static CURLcode raw_get(const char *url, const char *token, const char *cert_dir, const char *agent,
                        long *status, char **body);

/* ---- a watch stream on its own thread --------------------------------- */

typedef struct watcher {
    pthread_t thread;
    CURLM *multi;
    CURL *easy;
    struct curl_slist *hdr;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    json_t *events; /* parsed lines */
    char *partial;
    size_t plen;
    bool done;
    bool stop;
    CURLcode result;
    long status;
} watcher;

static size_t watch_data(char *p, size_t size, size_t n, void *ud)
{
    watcher *w = ud;
    size_t len = size * n;
    pthread_mutex_lock(&w->mu);
    char *np = realloc(w->partial, w->plen + len + 1);
    if (!np) {
        pthread_mutex_unlock(&w->mu);
        return 0;
    }
    w->partial = np;
    memcpy(w->partial + w->plen, p, len);
    w->plen += len;
    w->partial[w->plen] = '\0';
    char *nl;
    while ((nl = memchr(w->partial, '\n', w->plen))) {
        *nl = '\0';
        json_t *ev = json_loads(w->partial, 0, NULL);
        json_array_append_new(w->events, ev ? ev : json_string(w->partial));
        size_t used = (size_t)(nl - w->partial) + 1;
        memmove(w->partial, nl + 1, w->plen - used);
        w->plen -= used;
    }
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return len;
}

static void *watch_main(void *arg)
{
    watcher *w = arg;
    for (;;) {
        int running = 0;
        curl_multi_perform(w->multi, &running);
        int left;
        CURLMsg *m;
        while ((m = curl_multi_info_read(w->multi, &left)))
            if (m->msg == CURLMSG_DONE) {
                pthread_mutex_lock(&w->mu);
                w->result = m->data.result;
                curl_easy_getinfo(w->easy, CURLINFO_RESPONSE_CODE, &w->status);
                w->done = true;
                pthread_cond_broadcast(&w->cv);
                pthread_mutex_unlock(&w->mu);
            }
        pthread_mutex_lock(&w->mu);
        bool stop = w->stop || w->done;
        pthread_mutex_unlock(&w->mu);
        if (stop)
            break;
        curl_multi_poll(w->multi, NULL, 0, 1000, NULL);
    }
    return NULL;
}

static watcher *watch_start(ts_server *s, const char *path, const char *agent)
{
    watcher *w = calloc(1, sizeof(*w));
    pthread_condattr_t ca;
    assert_non_null(w);
    pthread_mutex_init(&w->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cv, &ca);
    pthread_condattr_destroy(&ca);
    w->events = json_array();
    char *tok = ts_token(s);
    char *auth = tc_fmt("Authorization: Bearer %s", tok);
    char *url = tc_fmt("%s%s", ts_url(s), path);
    w->hdr = curl_slist_append(NULL, auth);
    free(tok);
    free(auth);
    w->easy = curl_easy_init();
    curl_easy_setopt(w->easy, CURLOPT_URL, url);
    curl_easy_setopt(w->easy, CURLOPT_CAINFO, ts_ca_file(s));
    curl_easy_setopt(w->easy, CURLOPT_HTTPHEADER, w->hdr);
    curl_easy_setopt(w->easy, CURLOPT_USERAGENT, agent ? agent : "test-watcher");
    curl_easy_setopt(w->easy, CURLOPT_WRITEFUNCTION, watch_data);
    curl_easy_setopt(w->easy, CURLOPT_WRITEDATA, w);
    curl_easy_setopt(w->easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(w->easy, CURLOPT_TIMEOUT, 120L);
    free(url);
    w->multi = curl_multi_init();
    curl_multi_add_handle(w->multi, w->easy);
    assert_int_equal(pthread_create(&w->thread, NULL, watch_main, w), 0);
    return w;
}

/* Waits until at least n events arrived (true) or the time/stream is over. */
static bool watch_wait(watcher *w, size_t n, long ms)
{
    struct timespec dl = tc_deadline_in(CLOCK_MONOTONIC, ms);
    pthread_mutex_lock(&w->mu);
    while (json_array_size(w->events) < n && !w->done)
        if (pthread_cond_timedwait(&w->cv, &w->mu, &dl) == ETIMEDOUT)
            break;
    bool ok = json_array_size(w->events) >= n;
    pthread_mutex_unlock(&w->mu);
    return ok;
}

static bool watch_wait_done(watcher *w, long ms)
{
    struct timespec dl = tc_deadline_in(CLOCK_MONOTONIC, ms);
    pthread_mutex_lock(&w->mu);
    while (!w->done)
        if (pthread_cond_timedwait(&w->cv, &w->mu, &dl) == ETIMEDOUT)
            break;
    bool done = w->done;
    pthread_mutex_unlock(&w->mu);
    return done;
}

/* Event i (borrowed; the array only grows, under the lock). */
static json_t *watch_event(watcher *w, size_t i)
{
    pthread_mutex_lock(&w->mu);
    json_t *e = json_array_get(w->events, i);
    pthread_mutex_unlock(&w->mu);
    return e;
}

static size_t watch_count(watcher *w)
{
    pthread_mutex_lock(&w->mu);
    size_t n = json_array_size(w->events);
    pthread_mutex_unlock(&w->mu);
    return n;
}

/* Events of one type, skipping bookmarks unless asked for. */
static json_t *watch_nth(watcher *w, size_t n, bool skip_bookmarks)
{
    size_t seen = 0;
    for (size_t i = 0; i < watch_count(w); i++) {
        json_t *e = watch_event(w, i);
        if (skip_bookmarks && !strcmp(str(e, "type"), "BOOKMARK"))
            continue;
        if (seen++ == n)
            return e;
    }
    return NULL;
}

/* Waits for n non-bookmark events. */
static bool watch_wait_real(watcher *w, size_t n, long ms)
{
    long long end = tc_now_ms() + ms;
    for (;;) {
        if (watch_nth(w, n - 1, true))
            return true;
        long left = (long)(end - tc_now_ms());
        if (left <= 0 || !watch_wait(w, watch_count(w) + 1, left))
            return watch_nth(w, n - 1, true) != NULL;
    }
}

static void watch_stop(watcher *w)
{
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    pthread_mutex_unlock(&w->mu);
    curl_multi_wakeup(w->multi);
    pthread_join(w->thread, NULL);
    curl_multi_remove_handle(w->multi, w->easy);
    curl_easy_cleanup(w->easy);
    curl_multi_cleanup(w->multi);
    curl_slist_free_all(w->hdr);
    json_decref(w->events);
    free(w->partial);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

/* Waits (bounded) until server s has at least n watch streams open. */
static void wait_open_watches(ts_server *s, long long n)
{
    tc_wait_stat(s, "watches.open", n, 10000);
}

/* ---- raw curl ------------------------------------------------------------- */

static CURLcode raw_get(const char *url, const char *token, const char *cert_dir, const char *agent,
                        long *status, char **body)
{
    ts_buf b = {NULL, 0};
    struct curl_slist *hdr = NULL;
    char *auth = token ? tc_fmt("Authorization: Bearer %s", token) : NULL;
    char *ca = tc_fmt("%s/ca.crt", ts_dir(srv));
    char *crt = cert_dir ? tc_fmt("%s/client.crt", cert_dir) : NULL;
    char *key = cert_dir ? tc_fmt("%s/client.key", cert_dir) : NULL;
    CURL *h = curl_easy_init();
    if (auth)
        hdr = curl_slist_append(hdr, auth);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CAINFO, ca);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(h, CURLOPT_USERAGENT, agent ? agent : "raw");
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, ts_buf_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    if (crt) {
        curl_easy_setopt(h, CURLOPT_SSLCERT, crt);
        curl_easy_setopt(h, CURLOPT_SSLKEY, key);
    }
    CURLcode rc = curl_easy_perform(h);
    *status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
    if (body)
        *body = b.data ? b.data : strdup("");
    else
        free(b.data);
    curl_easy_cleanup(h);
    curl_slist_free_all(hdr);
    free(auth);
    free(ca);
    free(crt);
    free(key);
    return rc;
}

/* ---- fixtures ----------------------------------------------------------- */

static int group_setup(void **state)
{
    (void)state;
    /* Short bookmarks keep the bookmark test quick. */
    static const char *const args[] = {"--bookmark-interval", "200", NULL};
    curl_global_init(CURL_GLOBAL_DEFAULT);
    return ts_start(&srv, args);
}

static int group_teardown(void **state)
{
    (void)state;
    int rc = ts_stop(srv);
    curl_global_cleanup();
    if (rc != 0)
        fprintf(stderr, "the test server exited with %d\n", rc);
    return rc == 0 ? 0 : -1;
}

/* ---- Leases --------------------------------------------------------------- */

static bool is_uuid4(const char *s)
{
    if (strlen(s) != 36 || s[14] != '4')
        return false;
    for (int i = 0; i < 36; i++) {
        bool dash = i == 8 || i == 13 || i == 18 || i == 23;
        if (dash ? s[i] != '-' : !strchr("0123456789abcdef", s[i]))
            return false;
    }
    return strchr("89ab", s[19]) != NULL;
}

static void test_lease_crud(void **state)
{
    long st;
    (void)state;
    json_t *c = create_lease(srv, "crud", "a");
    assert_string_equal(str(c, "kind"), "Lease");
    assert_string_equal(str(c, "metadata.namespace"), "default");
    assert_true(is_uuid4(str(c, "metadata.uid")));
    assert_int_equal(strlen(str(c, "metadata.creationTimestamp")), 20);
    unsigned long long rv1 = rv_of(c);
    assert_true(rv1 > 0);

    json_t *g = api("GET", LEASES "/crud", NULL, NULL, &st);
    assert_int_equal(st, 200);
    assert_true(json_equal(g, c));
    json_decref(g);

    /* POST again: AlreadyExists */
    json_t *e = api("POST", LEASES, NULL, "{\"metadata\":{\"name\":\"crud\"}}", &st);
    assert_int_equal(st, 409);
    assert_string_equal(str(e, "reason"), "AlreadyExists");
    json_decref(e);

    /* PUT with the current resourceVersion */
    json_object_set_new(tc_at(c, "spec"), "holderIdentity", json_string("b"));
    char *body = json_dumps(c, JSON_COMPACT);
    json_t *u = api("PUT", LEASES "/crud", NULL, body, &st);
    assert_int_equal(st, 200);
    assert_string_equal(str(u, "spec.holderIdentity"), "b");
    unsigned long long rv2 = rv_of(u);
    assert_true(rv2 > rv1);

    /* the same body again is now stale: Conflict */
    e = api("PUT", LEASES "/crud", NULL, body, &st);
    free(body);
    assert_int_equal(st, 409);
    assert_string_equal(str(e, "reason"), "Conflict");
    json_decref(e);

    /* no resourceVersion: the Lease strategy refuses unconditional updates (422) */
    e = api("PUT", LEASES "/crud", NULL,
            "{\"metadata\":{\"name\":\"crud\"},\"spec\":{\"holderIdentity\":\"c\","
            "\"leaseDurationSeconds\":7}}",
            &st);
    assert_int_equal(st, 422);
    assert_string_equal(str(e, "reason"), "Invalid");
    assert_string_equal(str(e, "details.causes.0.field"), "metadata.resourceVersion");
    json_decref(e);
    assert_true(rv_of(u) == rv2);
    json_decref(u);

    /* merge patch: change one field, remove another with null */
    u = api("PATCH", LEASES "/crud", MERGE,
            "{\"spec\":{\"holderIdentity\":\"d\",\"leaseDurationSeconds\":null}}", &st);
    assert_int_equal(st, 200);
    assert_string_equal(str(u, "spec.holderIdentity"), "d");
    assert_null(tc_at(u, "spec.leaseDurationSeconds"));
    json_decref(u);

    /* patch with a stale resourceVersion precondition */
    body = tc_fmt(
        "{\"metadata\":{\"resourceVersion\":\"%llu\"},\"spec\":{\"holderIdentity\":\"x\"}}", rv1);
    e = api("PATCH", LEASES "/crud", MERGE, body, &st);
    free(body);
    assert_int_equal(st, 409);
    assert_string_equal(str(e, "reason"), "Conflict");
    json_decref(e);

    json_t *d = api("DELETE", LEASES "/crud", NULL, NULL, &st);
    assert_int_equal(st, 200);
    assert_string_equal(str(d, "status"), "Success");
    assert_string_equal(str(d, "details.uid"), str(c, "metadata.uid"));
    json_decref(d);

    static const char *const methods[] = {"GET", "DELETE", "PATCH"};
    for (int i = 0; i < 3; i++) {
        e = api(methods[i], LEASES "/crud", i == 2 ? MERGE : NULL, i == 2 ? "{}" : NULL, &st);
        assert_int_equal(st, 404);
        assert_string_equal(str(e, "reason"), "NotFound");
        json_decref(e);
    }
    json_decref(c);
}

/* NamespaceLifecycle: namespaces must exist; they are created and deleted through the API. */
static void test_namespaces(void **state)
{
    long st;
    (void)state;
    const char *nsl = "/apis/coordination.k8s.io/v1/namespaces/ns-life/leases";
    const char *lease = "{\"metadata\":{\"name\":\"l\"},\"spec\":{\"holderIdentity\":\"h\"}}";

    /* Writes in a missing namespace: 404 for the namespace; reads: as usual. */
    json_t *e = api("POST", nsl, NULL, lease, &st);
    assert_int_equal(st, 404);
    assert_string_equal(str(e, "message"), "namespaces \"ns-life\" not found");
    assert_string_equal(str(e, "details.kind"), "namespaces");
    assert_null(tc_at(e, "details.group"));
    json_decref(e);
    char *put = tc_fmt("%s/l", nsl);
    e = api("PUT", put, NULL, lease, &st);
    assert_int_equal(st, 404);
    assert_string_equal(str(e, "details.name"), "ns-life");
    json_decref(e);
    e = api("GET", put, NULL, NULL, &st);
    assert_int_equal(st, 404);
    assert_string_equal(str(e, "details.kind"), "leases");
    json_decref(e);
    e = api("GET", nsl, NULL, NULL, &st);
    assert_int_equal(st, 200);
    assert_int_equal(json_array_size(tc_at(e, "items")), 0);
    json_decref(e);
    e = api("POST", "/api/v1/namespaces/ns-life/pods", NULL,
            "{\"metadata\":{\"name\":\"p\"},\"spec\":{}}", &st);
    assert_int_equal(st, 404);
    json_decref(e);

    /* Create it (as kubectl create namespace does): labelled, Active, managedFields. */
    json_t *ns = api("POST", "/api/v1/namespaces?fieldManager=kubectl-create", NULL,
                     "{\"kind\":\"Namespace\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":"
                     "\"ns-life\"}}",
                     &st);
    assert_int_equal(st, 201);
    assert_string_equal(str(ns, "metadata.labels.kubernetes.io/metadata.name"), "");
    assert_string_equal(json_string_value(json_object_get(tc_at(ns, "metadata.labels"),
                                                          "kubernetes.io/metadata.name")),
                        "ns-life");
    assert_null(tc_at(ns, "metadata.namespace"));
    assert_string_equal(str(ns, "status.phase"), "Active");
    assert_string_equal(str(ns, "spec.finalizers.0"), "kubernetes");
    assert_string_equal(str(ns, "metadata.managedFields.0.manager"), "kubectl-create");
    assert_string_equal(str(ns, "metadata.managedFields.0.operation"), "Update");
    assert_string_equal(str(ns, "metadata.managedFields.0.fieldsType"), "FieldsV1");
    json_decref(ns);
    e = api("POST", "/api/v1/namespaces", NULL, "{\"metadata\":{\"name\":\"ns-life\"}}", &st);
    assert_int_equal(st, 409);
    assert_string_equal(str(e, "reason"), "AlreadyExists");
    json_decref(e);
    e = api("GET", "/api/v1/namespaces?fieldSelector=metadata.name%3Dns-life", NULL, NULL, &st);
    assert_int_equal(st, 200);
    assert_int_equal(json_array_size(tc_at(e, "items")), 1);
    json_decref(e);

    /* Now the Lease can be created; its managedFields name the User-Agent's first word. */
    json_t *l = api("POST", nsl, NULL, lease, &st);
    assert_int_equal(st, 201);
    json_t *mf = tc_at(l, "metadata.managedFields.0");
    assert_non_null(mf);
    assert_string_equal(str(mf, "apiVersion"), "coordination.k8s.io/v1");
    assert_non_null(tc_at(mf, "fieldsV1.f:spec.f:holderIdentity"));
    json_decref(l);

    /* The four defaults exist; three of them cannot be deleted. */
    e = api("DELETE", "/api/v1/namespaces/kube-system", NULL, NULL, &st);
    assert_int_equal(st, 403);
    assert_string_equal(str(e, "reason"), "Forbidden");
    json_decref(e);

    /* DELETE answers the Namespace, Terminating; then it and its contents are gone. */
    ns = api("DELETE", "/api/v1/namespaces/ns-life", NULL, NULL, &st);
    assert_int_equal(st, 200);
    assert_string_equal(str(ns, "kind"), "Namespace");
    assert_string_equal(str(ns, "status.phase"), "Terminating");
    assert_true(json_is_string(tc_at(ns, "metadata.deletionTimestamp")));
    json_decref(ns);
    e = api("GET", "/api/v1/namespaces/ns-life", NULL, NULL, &st);
    assert_int_equal(st, 404);
    json_decref(e);
    e = api("GET", put, NULL, NULL, &st);
    assert_int_equal(st, 404);
    json_decref(e);
    e = api("POST", nsl, NULL, lease, &st);
    assert_int_equal(st, 404);
    json_decref(e);
    free(put);
}

static void test_put_missing_creates(void **state)
{
    long st;
    (void)state;
    json_t *j = api("PUT", LEASES "/put-created", NULL,
                    "{\"metadata\":{\"name\":\"put-created\",\"resourceVersion\":\"424242\"},"
                    "\"spec\":{\"holderIdentity\":\"x\"}}",
                    &st);
    assert_int_equal(st, 201);
    assert_string_equal(str(j, "spec.holderIdentity"), "x");
    assert_true(is_uuid4(str(j, "metadata.uid")));
    json_decref(j);
}

static void expect_invalid(const char *spec, const char *field)
{
    long st;
    char *body = tc_fmt("{\"metadata\":{\"name\":\"invalid\"},\"spec\":%s}", spec);
    json_t *j = api("POST", LEASES, NULL, body, &st);
    free(body);
    assert_int_equal(st, 422);
    assert_string_equal(str(j, "kind"), "Status");
    assert_string_equal(str(j, "status"), "Failure");
    assert_string_equal(str(j, "reason"), "Invalid");
    assert_int_equal(json_integer_value(tc_at(j, "code")), 422);
    assert_string_equal(str(j, "details.kind"), "Lease");
    assert_string_equal(str(j, "details.group"), "coordination.k8s.io");
    assert_string_equal(str(j, "details.causes.0.field"), field);
    assert_string_equal(str(j, "details.causes.0.reason"), "FieldValueInvalid");
    json_decref(j);
}

static void test_validation(void **state)
{
    long st;
    (void)state;
    expect_invalid("{\"leaseTransitions\":-1}", "spec.leaseTransitions");
    expect_invalid("{\"leaseDurationSeconds\":0}", "spec.leaseDurationSeconds");

    /* A MicroTime Go cannot parse fails decoding: 400 with time.Parse's words. */
    json_t *j = api("POST", LEASES, NULL,
                    "{\"metadata\":{\"name\":\"t\"},\"spec\":{\"renewTime\":"
                    "\"2026-11-30T10:02:59Z\"}}",
                    &st);
    assert_int_equal(st, 400);
    assert_string_equal(str(j, "message"),
                        "Lease in version \"v1\" cannot be handled as a Lease: parsing time "
                        "\"2026-11-30T10:02:59Z\" as \"2006-01-02T15:04:05.000000Z07:00\": cannot "
                        "parse \"Z\" as \".000000\"");
    json_decref(j);
    j = api("POST", LEASES, NULL,
            "{\"metadata\":{\"name\":\"t\"},\"spec\":{\"acquireTime\":"
            "\"2026-13-30T10:02:59.000000Z\"}}",
            &st);
    assert_int_equal(st, 400);
    assert_non_null(strstr(str(j, "message"), ": month out of range"));
    json_decref(j);

    j = api("POST", LEASES, NULL, "{\"metadata\":", &st);
    assert_int_equal(st, 400);
    assert_string_equal(str(j, "reason"), "BadRequest");
    assert_string_equal(str(j, "message"),
                        "the object provided is unrecognized (must be of type Lease): couldn't "
                        "get version/kind; json parse error: unexpected end of JSON input "
                        "({\"metadata\":)");
    json_decref(j);

    j = api("POST", LEASES, NULL,
            "{\"metadata\":{\"name\":\"x\"},\"spec\":{\"leaseTransitions\":\"1\"}}", &st);
    assert_int_equal(st, 400);
    json_decref(j);

    j = api("PUT", LEASES "/url-name", NULL, "{\"metadata\":{\"name\":\"body-name\"}}", &st);
    assert_int_equal(st, 400);
    assert_string_equal(str(j, "reason"), "BadRequest");
    json_decref(j);

    j = api("POST", LEASES, NULL, "{\"metadata\":{\"name\":\"x\",\"namespace\":\"other\"}}", &st);
    assert_int_equal(st, 400);
    assert_string_equal(str(j, "reason"), "BadRequest");
    json_decref(j);

    /* valid MicroTimes in another zone come back in UTC with 6 digits */
    j = api("POST", LEASES, NULL,
            "{\"metadata\":{\"name\":\"microtime\"},\"spec\":{\"renewTime\":"
            "\"2026-11-30T12:02:59.123456+02:00\"}}",
            &st);
    assert_int_equal(st, 201);
    assert_string_equal(str(j, "spec.renewTime"), "2026-11-30T10:02:59.123456Z");
    json_decref(j);
}

/* Loads a sample, drops managedFields and takes the server-owned fields from ours. */
static char *sample_like(const char *file, json_t *ours, size_t flags)
{
    char *path = tc_fmt("%s%s", SAMPLES, file);
    json_t *s = json_load_file(path, JSON_PRESERVE_ORDER, NULL);
    free(path);
    assert_non_null(s);
    json_t *obj = json_object_get(s, "object") ? json_object_get(s, "object") : s;
    json_t *meta = json_object_get(obj, "metadata");
    if (meta && json_object_get(meta, "uid")) {
        json_t *om = json_object_get(
            json_object_get(ours, "object") ? json_object_get(ours, "object") : ours, "metadata");
        static const char *const keys[] = {"uid", "resourceVersion", "creationTimestamp"};
        for (int i = 0; i < 3; i++)
            json_object_set(meta, keys[i], json_object_get(om, keys[i]));
        /*
         * managedFields: ours (manager and times differ); their shape against
         * a real server is test_differential's business.
         */
        json_object_set(meta, "managedFields", json_object_get(om, "managedFields"));
    }
    json_t *details = json_object_get(s, "details");
    if (details && json_object_get(details, "uid"))
        json_object_set(details, "uid", tc_at(ours, "details.uid"));
    char *text = json_dumps(s, flags);
    json_decref(s);
    return text;
}

/* The server's bodies next to the ones a real kube-apiserver wrote. */
static void test_sample_bodies(void **state)
{
    long st;
    char *resp, *want;
    (void)state;

    struct {
        const char *method, *file;
    } missing[] = {{"GET", "404_notfound_get.json"},
                   {"DELETE", "404_notfound_delete.json"},
                   {"PATCH", "404_notfound_patch.json"}};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(ts_request(srv, missing[i].method, LEASES "/sample-lease?pretty=true",
                                    i == 2 ? MERGE : NULL, i == 2 ? "{}" : NULL, &st, &resp),
                         0);
        assert_int_equal(st, 404);
        want = tc_fmt("%s%s", SAMPLES, missing[i].file);
        char *sample = kl_test_read_file(want, NULL);
        assert_string_equal(resp, sample);
        free(sample);
        free(want);
        free(resp);
    }

    /* Create as in 201_create.json. */
    const char *create = "{\"kind\":\"Lease\",\"apiVersion\":\"coordination.k8s.io/v1\","
                         "\"metadata\":{\"name\":\"sample-lease\",\"namespace\":\"default\"},"
                         "\"spec\":{\"holderIdentity\":\"node-a\",\"leaseDurationSeconds\":15,"
                         "\"acquireTime\":\"2026-11-30T10:02:59.000000Z\",\"renewTime\":"
                         "\"2026-11-30T10:02:59.000000Z\",\"leaseTransitions\":0}}";
    assert_int_equal(ts_request(srv, "POST", LEASES "?pretty=true", NULL, create, &st, &resp), 0);
    assert_int_equal(st, 201);
    json_t *created = json_loads(resp, JSON_PRESERVE_ORDER, NULL);
    want = sample_like("201_create.json", created, JSON_INDENT(2));
    assert_string_equal(resp, want);
    free(want);
    free(resp);

    assert_int_equal(ts_request(srv, "POST", LEASES "?pretty=true", NULL, create, &st, &resp), 0);
    assert_int_equal(st, 409);
    char *sample = kl_test_read_file(SAMPLES "409_alreadyexists.json", NULL);
    assert_string_equal(resp, sample);
    free(sample);
    free(resp);

    /* Watch from the creation, then update as request_put_update_body.json does. */
    char *wpath = tc_fmt(LEASES "?watch=1&fieldSelector=metadata.name%%3Dsample-lease&"
                                "resourceVersion=%s",
                         str(created, "metadata.resourceVersion"));
    watcher *w = watch_start(srv, wpath, NULL);
    free(wpath);

    json_t *put = json_load_file(SAMPLES "request_put_update_body.json", JSON_PRESERVE_ORDER, NULL);
    json_t *stale =
        json_load_file(SAMPLES "request_put_stale_body.json", JSON_PRESERVE_ORDER, NULL);
    assert_non_null(put);
    assert_non_null(stale);
    json_t *cm = tc_at(created, "metadata");
    json_object_set(tc_at(put, "metadata"), "uid", json_object_get(cm, "uid"));
    json_object_set(tc_at(put, "metadata"), "resourceVersion",
                    json_object_get(cm, "resourceVersion"));
    json_object_set(tc_at(stale, "metadata"), "uid", json_object_get(cm, "uid"));
    json_object_set(tc_at(stale, "metadata"), "resourceVersion",
                    json_object_get(cm, "resourceVersion"));
    char *body = json_dumps(put, JSON_COMPACT);
    assert_int_equal(
        ts_request(srv, "PUT", LEASES "/sample-lease?pretty=true", NULL, body, &st, &resp), 0);
    free(body);
    assert_int_equal(st, 200);
    json_t *updated = json_loads(resp, JSON_PRESERVE_ORDER, NULL);
    want = sample_like("200_update.json", updated, JSON_INDENT(2));
    assert_string_equal(resp, want);
    free(want);
    free(resp);

    /* The event line as in watch_event_modified.json. */
    assert_true(watch_wait(w, 1, 10000));
    json_t *ev = watch_event(w, 0);
    char *line = json_dumps(ev, JSON_COMPACT | JSON_PRESERVE_ORDER);
    want = sample_like("watch_event_modified.json", updated, JSON_COMPACT);
    assert_string_equal(line, want);
    free(line);
    free(want);
    watch_stop(w);

    /* The stale body now conflicts: 409_conflict.json. */
    body = json_dumps(stale, JSON_COMPACT);
    assert_int_equal(
        ts_request(srv, "PUT", LEASES "/sample-lease?pretty=true", NULL, body, &st, &resp), 0);
    free(body);
    assert_int_equal(st, 409);
    sample = kl_test_read_file(SAMPLES "409_conflict.json", NULL);
    assert_string_equal(resp, sample);
    free(sample);
    free(resp);

    /* GET and LIST shapes: 200_get.json, 200_list.json */
    assert_int_equal(
        ts_request(srv, "GET", LEASES "/sample-lease?pretty=true", NULL, NULL, &st, &resp), 0);
    want = sample_like("200_get.json", updated, JSON_INDENT(2));
    assert_string_equal(resp, want);
    free(want);
    free(resp);

    /* DELETE: 200_delete.json */
    assert_int_equal(
        ts_request(srv, "DELETE", LEASES "/sample-lease?pretty=true", NULL, NULL, &st, &resp), 0);
    assert_int_equal(st, 200);
    json_t *del = json_loads(resp, 0, NULL);
    want = sample_like("200_delete.json", del, JSON_INDENT(2));
    assert_string_equal(resp, want);
    free(want);
    free(resp);
    json_decref(del);

    /* 401, as curl sees it (pretty for curl's User-Agent). */
    char *url = tc_fmt("%s/api", ts_url(srv));
    assert_int_equal(raw_get(url, NULL, NULL, "curl/7.88.1", &st, &resp), CURLE_OK);
    assert_int_equal(st, 401);
    sample = kl_test_read_file(SAMPLES "401_unauthorized.json", NULL);
    assert_string_equal(resp, sample);
    free(sample);
    free(resp);
    free(url);

    json_decref(put);
    json_decref(stale);
    json_decref(created);
    json_decref(updated);
}

static void test_auth(void **state)
{
    long st;
    char *body;
    (void)state;
    char *url = tc_fmt("%s%s", ts_url(srv), LEASES);
    assert_int_equal(raw_get(url, NULL, NULL, NULL, &st, NULL), CURLE_OK);
    assert_int_equal(st, 401);
    assert_int_equal(raw_get(url, "not-the-token", NULL, NULL, &st, &body), CURLE_OK);
    assert_int_equal(st, 401);
    json_t *j = json_loads(body, 0, NULL);
    assert_string_equal(str(j, "reason"), "Unauthorized");
    json_decref(j);
    free(body);

    /* client certificate, no token */
    assert_int_equal(raw_get(url, NULL, ts_dir(srv), NULL, &st, NULL), CURLE_OK);
    assert_int_equal(st, 200);

    /* plain HTTP on the TLS port gets no HTTP answer */
    char *plain = tc_fmt("http://127.0.0.1:%d%s", ts_port(srv), LEASES);
    CURLcode rc = raw_get(plain, NULL, NULL, NULL, &st, NULL);
    assert_int_not_equal(rc, CURLE_OK);
    assert_int_equal(st, 0);
    free(plain);
    free(url);
}

/* ---- watches -------------------------------------------------------------- */

static char *current_rv(void)
{
    long st;
    json_t *l = api("GET", LEASES "?limit=1", NULL, NULL, &st);
    assert_int_equal(st, 200);
    char *rv = strdup(str(l, "metadata.resourceVersion"));
    json_decref(l);
    return rv;
}

static void test_watch_order(void **state)
{
    long st;
    (void)state;
    char *rv = current_rv();
    char *path =
        tc_fmt(LEASES "?watch=1&fieldSelector=metadata.name%%3Dwatched&resourceVersion=%s", rv);
    watcher *w = watch_start(srv, path, NULL);
    free(path);
    free(rv);

    json_decref(create_lease(srv, "watched", "a"));
    json_decref(
        api("PATCH", LEASES "/watched", MERGE, "{\"spec\":{\"holderIdentity\":\"b\"}}", &st));
    assert_int_equal(st, 200);
    json_decref(create_lease(srv, "unrelated", "z")); /* filtered out */
    json_decref(api("DELETE", LEASES "/watched", NULL, NULL, &st));
    assert_int_equal(st, 200);

    assert_true(watch_wait_real(w, 3, 10000));
    static const char *const want[] = {"ADDED", "MODIFIED", "DELETED"};
    unsigned long long last = 0;
    for (size_t i = 0; i < 3; i++) {
        json_t *e = watch_nth(w, i, true);
        assert_string_equal(str(e, "type"), want[i]);
        assert_string_equal(str(e, "object.metadata.name"), "watched");
        assert_true(rv_of(tc_at(e, "object")) > last);
        last = rv_of(tc_at(e, "object"));
    }
    assert_string_equal(str(watch_nth(w, 1, true), "object.spec.holderIdentity"), "b");
    watch_stop(w);
}

static void test_watch_initial_and_resume(void **state)
{
    long st;
    (void)state;
    json_t *c = create_lease(srv, "resume", "a");
    /* No resourceVersion: a synthetic ADDED of the current object first. */
    watcher *w = watch_start(srv, LEASES "?watch=true&fieldSelector=metadata.name%3Dresume", NULL);
    assert_true(watch_wait_real(w, 1, 10000));
    assert_string_equal(str(watch_nth(w, 0, true), "type"), "ADDED");
    assert_string_equal(str(watch_nth(w, 0, true), "object.metadata.uid"), str(c, "metadata.uid"));
    watch_stop(w);

    json_t *u1 =
        api("PATCH", LEASES "/resume", MERGE, "{\"spec\":{\"holderIdentity\":\"b\"}}", &st);
    json_t *u2 =
        api("PATCH", LEASES "/resume", MERGE, "{\"spec\":{\"holderIdentity\":\"c\"}}", &st);
    /* Resuming from the first update: only what came after it. */
    char *path = tc_fmt(LEASES "?watch=1&fieldSelector=metadata.name%%3Dresume&resourceVersion=%s",
                        str(u1, "metadata.resourceVersion"));
    w = watch_start(srv, path, NULL);
    free(path);
    assert_true(watch_wait_real(w, 1, 10000));
    assert_string_equal(str(watch_nth(w, 0, true), "type"), "MODIFIED");
    assert_string_equal(str(watch_nth(w, 0, true), "object.metadata.resourceVersion"),
                        str(u2, "metadata.resourceVersion"));
    watch_stop(w);
    json_decref(c);
    json_decref(u1);
    json_decref(u2);
}

static void test_watch_compacted(void **state)
{
    long st;
    (void)state;
    json_t *c = create_lease(srv, "compacted", "a");
    json_decref(
        api("PATCH", LEASES "/compacted", MERGE, "{\"spec\":{\"holderIdentity\":\"b\"}}", &st));
    long long before = tc_stat_or0(srv, "faults.compact");
    tc_control(srv, "POST", "/testserver/v1/compact", "{}", 200);
    assert_int_equal(tc_stat_or0(srv, "faults.compact"), before + 1);

    char *path = tc_fmt(LEASES "?watch=1&resourceVersion=%s", str(c, "metadata.resourceVersion"));
    watcher *w = watch_start(srv, path, NULL);
    free(path);
    assert_true(watch_wait_done(w, 10000));
    assert_int_equal(w->result, CURLE_OK);
    assert_int_equal(w->status, 200);
    assert_int_equal(watch_count(w), 1);
    json_t *e = watch_event(w, 0);
    assert_string_equal(str(e, "type"), "ERROR");
    assert_string_equal(str(e, "object.kind"), "Status");
    assert_string_equal(str(e, "object.reason"), "Expired");
    assert_int_equal(json_integer_value(tc_at(e, "object.code")), 410);
    assert_string_equal(str(e, "object.message"),
                        "The resourceVersion for the provided watch is too old.");
    watch_stop(w);
    json_decref(c);
}

static void test_watch_bookmarks(void **state)
{
    (void)state;
    char *rv = current_rv();
    char *path = tc_fmt(LEASES "?watch=1&allowWatchBookmarks=true&resourceVersion=%s", rv);
    watcher *w = watch_start(srv, path, NULL);
    free(path);
    free(rv);
    assert_true(watch_wait(w, 2, 10000)); /* bookmark interval is 200 ms here */
    json_t *e = watch_event(w, 0);
    assert_string_equal(str(e, "type"), "BOOKMARK");
    assert_string_equal(str(e, "object.kind"), "Lease");
    assert_true(rv_of(tc_at(e, "object")) > 0);
    watch_stop(w);

    /* Without allowWatchBookmarks: none, and timeoutSeconds ends the stream. */
    w = watch_start(srv, LEASES "?watch=1&timeoutSeconds=1&fieldSelector=metadata.name%3Dnone",
                    NULL);
    assert_true(watch_wait_done(w, 10000));
    assert_int_equal(w->result, CURLE_OK);
    assert_int_equal(watch_count(w), 0);
    watch_stop(w);
}

/* A client that hangs up on an idle (parked) stream frees it on the server. */
static void test_watch_client_gone(void **state)
{
    (void)state;
    long long open0 = tc_stat_or0(srv, "watches.open");
    watcher *w = watch_start(srv, LEASES "?watch=1&fieldSelector=metadata.name%3Dnobody", NULL);
    wait_open_watches(srv, open0 + 1);
    watch_stop(w);
    tc_wait_stat_at_most(srv, "watches.open", open0, 10000);
    assert_int_equal(tc_stat_or0(srv, "watches.open"), open0);
}

/*
 * A filtered stream that waits quietly must not expire because unrelated
 * traffic overflowed the history (the watch cache would not do that either),
 * while a resume from a version that fell out of it gets the cache's 410.
 */
static void test_watch_quiet_stream_survives(void **state)
{
    ts_server *s;
    long st;
    (void)state;
    static const char *const args[] = {"--history", "50", NULL};
    assert_int_equal(ts_start(&s, args), 0);
    json_t *c = create_lease(s, "quiet", "a");
    char *path = tc_fmt(LEASES "?watch=1&fieldSelector=metadata.name%%3Dquiet&resourceVersion=%s",
                        str(c, "metadata.resourceVersion"));
    watcher *w = watch_start(s, path, NULL);
    free(path);
    wait_open_watches(s, 1); /* the noise must come after the stream started */
    for (int i = 0; i < 200; i++) {
        char *name = tc_fmt("noise-%d", i);
        json_decref(create_lease(s, name, "n"));
        free(name);
    }
    json_decref(
        call(s, "PATCH", LEASES "/quiet", MERGE, "{\"spec\":{\"holderIdentity\":\"b\"}}", &st));
    assert_int_equal(st, 200);
    assert_true(watch_wait_real(w, 1, 10000));
    assert_string_equal(str(watch_nth(w, 0, true), "type"), "MODIFIED");
    watch_stop(w);

    path = tc_fmt(LEASES "?watch=1&resourceVersion=%s", str(c, "metadata.resourceVersion"));
    w = watch_start(s, path, NULL);
    free(path);
    assert_true(watch_wait_done(w, 10000));
    assert_int_equal(watch_count(w), 1);
    assert_string_equal(str(watch_event(w, 0), "type"), "ERROR");
    assert_int_equal(json_integer_value(tc_at(watch_event(w, 0), "object.code")), 410);
    assert_non_null(strstr(str(watch_event(w, 0), "object.message"), "too old resource version"));
    watch_stop(w);
    json_decref(c);
    assert_int_equal(ts_stop(s), 0);
}

static void test_discovery(void **state)
{
    long st;
    (void)state;
    json_t *j = api("GET", "/version", NULL, NULL, &st);
    assert_int_equal(st, 200);
    assert_string_equal(str(j, "major"), "1");
    json_decref(j);

    j = api("GET", "/apis", NULL, NULL, &st);
    assert_string_equal(str(j, "kind"), "APIGroupList");
    assert_string_equal(str(j, "groups.0.name"), "coordination.k8s.io");
    assert_string_equal(str(j, "groups.0.preferredVersion.groupVersion"), "coordination.k8s.io/v1");
    json_decref(j);

    j = api("GET", "/apis/coordination.k8s.io/v1", NULL, NULL, &st);
    assert_int_equal(st, 200);
    assert_string_equal(str(j, "kind"), "APIResourceList");
    assert_string_equal(str(j, "resources.0.name"), "leases");
    assert_string_equal(str(j, "resources.0.kind"), "Lease");
    assert_true(json_is_true(tc_at(j, "resources.0.namespaced")));
    assert_null(tc_at(j, "resources.0.shortNames"));
    bool watch = false;
    for (size_t i = 0; i < json_array_size(tc_at(j, "resources.0.verbs")); i++)
        watch |=
            !strcmp(json_string_value(json_array_get(tc_at(j, "resources.0.verbs"), i)), "watch");
    assert_true(watch);
    json_decref(j);

    j = api("GET", "/api/v1", NULL, NULL, &st);
    assert_string_equal(str(j, "groupVersion"), "v1");
    /* pods/status as v1.36.3 lists it (kubectl's --subresource=status needs it). */
    json_t *sub = NULL, *r;
    size_t i;
    json_array_foreach(tc_at(j, "resources"), i, r)
    {
        if (!strcmp(str(r, "name"), "pods/status"))
            sub = r;
    }
    assert_non_null(sub);
    json_t *want = json_loads("{\"name\":\"pods/status\",\"singularName\":\"\",\"namespaced\":true,"
                              "\"kind\":\"Pod\",\"verbs\":[\"get\",\"patch\",\"update\"]}",
                              0, NULL);
    assert_true(json_equal(sub, want));
    json_decref(want);
    json_decref(j);

    j = api("GET", "/api/v1/namespaces/kube-system", NULL, NULL, &st);
    assert_int_equal(st, 200);
    assert_string_equal(str(j, "kind"), "Namespace");
    assert_string_equal(str(j, "status.phase"), "Active");
    json_decref(j);
    j = api("GET", "/api/v1/namespaces/anything", NULL, NULL, &st);
    assert_int_equal(st, 404);
    assert_string_equal(str(j, "message"), "namespaces \"anything\" not found");
    json_decref(j);
    j = api("GET", "/api/v1/namespaces", NULL, NULL, &st);
    assert_string_equal(str(j, "kind"), "NamespaceList");
    assert_string_equal(str(j, "items.0.metadata.name"), "default");
    json_decref(j);

    /* kubectl's Table form */
    json_decref(create_lease(srv, "tabled", "holder-t"));
    char *resp;
    const char *accept = "Accept: application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
    char *url = tc_fmt("%s%s/tabled", ts_url(srv), LEASES);
    char *tok = ts_token(srv);
    char *auth = tc_fmt("Authorization: Bearer %s", tok);
    struct curl_slist *hdr = curl_slist_append(curl_slist_append(NULL, auth), accept);
    ts_buf b = {NULL, 0};
    CURL *h = curl_easy_init();
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CAINFO, ts_ca_file(srv));
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, ts_buf_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    assert_int_equal(curl_easy_perform(h), CURLE_OK);
    resp = b.data;
    j = json_loads(resp, 0, NULL);
    assert_string_equal(str(j, "kind"), "Table");
    assert_string_equal(str(j, "columnDefinitions.1.name"), "Holder");
    assert_string_equal(str(j, "rows.0.cells.0"), "tabled");
    assert_string_equal(str(j, "rows.0.cells.1"), "holder-t");
    assert_string_equal(str(j, "rows.0.object.kind"), "PartialObjectMetadata");
    json_decref(j);
    free(resp);
    curl_easy_cleanup(h);
    curl_slist_free_all(hdr);
    free(auth);
    free(tok);
    free(url);
}

/* ---- Pods ----------------------------------------------------------------- */

static size_t pod_count(const char *selector)
{
    long st;
    char *path = tc_fmt(PODS "?labelSelector=%s", selector);
    json_t *l = api("GET", path, NULL, NULL, &st);
    free(path);
    assert_int_equal(st, 200);
    assert_string_equal(str(l, "kind"), "PodList");
    size_t n = json_array_size(tc_at(l, "items"));
    json_decref(l);
    return n;
}

static void test_pods_labels(void **state)
{
    long st;
    (void)state;
    json_t *p = api("POST", PODS, NULL,
                    "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"cand-0\","
                    "\"labels\":{\"app\":\"demo\"}},\"spec\":{\"containers\":[{\"name\":\"c\","
                    "\"image\":\"busybox\"}]}}",
                    &st);
    assert_int_equal(st, 201);
    json_decref(p);
    json_decref(api("POST", PODS, NULL,
                    "{\"metadata\":{\"name\":\"cand-1\",\"labels\":{\"app\":\"demo\"}}}", &st));
    assert_int_equal(st, 201);

    p = api("PATCH", PODS "/cand-0", MERGE, "{\"metadata\":{\"labels\":{\"role\":\"leader\"}}}",
            &st);
    assert_int_equal(st, 200);
    assert_string_equal(str(p, "metadata.labels.role"), "leader");
    assert_string_equal(str(p, "metadata.labels.app"), "demo");
    json_decref(p);

    assert_int_equal(pod_count("role%3Dleader"), 1);
    assert_int_equal(pod_count("role%3D%3Dleader,app%3Ddemo"), 1);
    assert_int_equal(pod_count("app%3Ddemo,role!%3Dleader"), 1);
    assert_int_equal(pod_count("role"), 1);
    assert_int_equal(pod_count("app,!role"), 1);
    assert_int_equal(pod_count("role%20in%20(leader,follower)"), 1);

    /* null removes the label */
    p = api("PATCH", PODS "/cand-0", MERGE, "{\"metadata\":{\"labels\":{\"role\":null}}}", &st);
    assert_int_equal(st, 200);
    assert_null(tc_at(p, "metadata.labels.role"));
    json_decref(p);
    assert_int_equal(pod_count("role%3Dleader"), 0);
    assert_int_equal(pod_count("app%3Ddemo"), 2);

    json_t *e = api("GET", PODS "?labelSelector=a%20b%20c", NULL, NULL, &st);
    assert_int_equal(st, 400);
    json_decref(e);

    json_decref(api("DELETE", PODS "/cand-1", NULL, NULL, &st));
    assert_int_equal(st, 200);
    assert_int_equal(pod_count("app%3Ddemo"), 1);
}

/* A GET with kubectl's Accept for Tables; returns the parsed body. */
static json_t *get_table(const char *path, long *status)
{
    char *tok = ts_token(srv);
    char *auth = tc_fmt("Authorization: Bearer %s", tok);
    char *url = tc_fmt("%s%s", ts_url(srv), path);
    struct curl_slist *hdr =
        curl_slist_append(curl_slist_append(NULL, auth),
                          "Accept: application/json;as=Table;v=v1;g=meta.k8s.io,application/json");
    ts_buf b = {NULL, 0};
    CURL *h = curl_easy_init();
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CAINFO, ts_ca_file(srv));
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, ts_buf_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    assert_int_equal(curl_easy_perform(h), CURLE_OK);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
    json_t *j = json_loads(b.data ? b.data : "", 0, NULL);
    free(b.data);
    curl_easy_cleanup(h);
    curl_slist_free_all(hdr);
    free(url);
    free(auth);
    free(tok);
    return j;
}

/* The managedFields entry of manager (subresource "status" or NULL), borrowed. */
static json_t *managed_entry(json_t *obj, const char *manager, const char *subresource)
{
    size_t i;
    json_t *e;
    json_array_foreach(tc_at(obj, "metadata.managedFields"), i, e)
    {
        const char *sub = json_string_value(json_object_get(e, "subresource"));
        if (!strcmp(str(e, "manager"), manager) &&
            (subresource ? sub && !strcmp(sub, subresource) : !sub))
            return e;
    }
    return NULL;
}

#define POD_STATUS PODS "/kl/status"

/* The statuses a kubelet writes while its container runs, crashes and restarts. */
#define KUBELET_RUNNING                                                                            \
    "\"status\":{\"phase\":\"Running\",\"podIP\":\"10.2.0.7\",\"startTime\":"                      \
    "\"2024-05-01T10:00:00Z\",\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\"}],"          \
    "\"containerStatuses\":[{\"name\":\"c\",\"state\":{\"running\":{\"startedAt\":"                \
    "\"2024-05-01T12:00:03.5+02:00\"}},\"ready\":true,\"restartCount\":0,\"image\":"               \
    "\"busybox:1.36\",\"imageID\":\"docker.io/library/busybox@sha256:0123\",\"containerID\":"      \
    "\"containerd://aaaa\",\"started\":true,\"bogus\":1}],\"bogus\":1}"

static void test_pod_status(void **state)
{
    long st;
    (void)state;
    /* Created: Pending, with the QoS class of its resources (limits = requests: Guaranteed). */
    json_t *p = api("POST", PODS, NULL,
                    "{\"metadata\":{\"name\":\"kl\",\"labels\":{\"app\":\"kl\"}},\"spec\":{"
                    "\"containers\":[{\"name\":\"c\",\"image\":\"busybox\",\"resources\":{"
                    "\"limits\":{\"cpu\":\"500m\",\"memory\":\"64Mi\"}}}]},"
                    "\"status\":{\"phase\":\"Running\"}}",
                    &st);
    assert_int_equal(st, 201);
    assert_string_equal(str(p, "status.phase"), "Pending");
    assert_string_equal(str(p, "status.qosClass"), "Guaranteed");
    assert_int_equal(json_object_size(tc_at(p, "status")), 2);
    unsigned long long rv0 = rv_of(p);
    char *watch_path =
        tc_fmt(PODS "?watch=1&fieldSelector=metadata.name%%3Dkl&resourceVersion=%llu", rv0);
    watcher *w = watch_start(srv, watch_path, "pod-status-watch");
    free(watch_path);
    json_t *g = api("GET", POD_STATUS, NULL, NULL, &st);
    assert_int_equal(st, 200);
    assert_true(json_equal(g, p));
    json_decref(g);

    /* The kubelet's PUT: status and labels as sent, canonical; the spec in the body ignored. */
    char *body = tc_fmt(
        "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"kl\","
        "\"resourceVersion\":\"%llu\",\"labels\":{\"app\":\"kl\",\"node\":\"n1\"}},"
        "\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"other\"}]}," KUBELET_RUNNING "}",
        rv0);
    json_t *r = api("PUT", POD_STATUS "?fieldManager=kubelet", NULL, body, &st);
    free(body);
    assert_int_equal(st, 200);
    unsigned long long rv1 = rv_of(r);
    assert_true(rv1 > rv0);
    assert_string_equal(str(r, "spec.containers.0.image"), "busybox");
    assert_string_equal(str(r, "metadata.labels.node"), "n1");
    assert_string_equal(str(r, "status.phase"), "Running");
    assert_string_equal(str(r, "status.podIPs.0.ip"), "10.2.0.7");
    assert_string_equal(str(r, "status.qosClass"), "Guaranteed"); /* kept: absent from the body */
    assert_true(json_is_null(tc_at(r, "status.conditions.0.lastProbeTime")));
    assert_null(tc_at(r, "status.bogus"));
    json_t *cs = tc_at(r, "status.containerStatuses.0");
    assert_string_equal(str(cs, "state.running.startedAt"), "2024-05-01T10:00:03Z");
    assert_string_equal(str(cs, "containerID"), "containerd://aaaa");
    assert_string_equal(str(cs, "imageID"), "docker.io/library/busybox@sha256:0123");
    assert_true(json_is_true(tc_at(cs, "ready")));
    assert_int_equal(json_integer_value(tc_at(cs, "restartCount")), 0);
    assert_int_equal(json_object_size(tc_at(cs, "lastState")), 0);
    assert_null(tc_at(cs, "bogus"));
    json_t *mine = managed_entry(r, "kubelet", "status");
    assert_non_null(mine);
    assert_non_null(tc_at(mine, "fieldsV1.f:status.f:containerStatuses"));
    assert_non_null(tc_at(mine, "fieldsV1.f:metadata.f:labels.f:node"));
    assert_null(tc_at(mine, "fieldsV1.f:spec"));
    assert_non_null(managed_entry(r, "k8slease-testharness", NULL));

    /* A watcher sees the write as MODIFIED. */
    assert_true(watch_wait_real(w, 1, 10000));
    json_t *ev = watch_nth(w, 0, true);
    assert_string_equal(str(ev, "type"), "MODIFIED");
    assert_string_equal(str(ev, "object.status.containerStatuses.0.containerID"),
                        "containerd://aaaa");
    assert_int_equal(rv_of(tc_at(ev, "object")), rv1);
    watch_stop(w);

    /* A stale resourceVersion: 409, nothing written. */
    body = tc_fmt("{\"metadata\":{\"name\":\"kl\",\"resourceVersion\":\"%llu\"},"
                  "\"status\":{\"phase\":\"Failed\"}}",
                  rv0);
    json_t *e = api("PUT", POD_STATUS, NULL, body, &st);
    free(body);
    assert_int_equal(st, 409);
    assert_string_equal(str(e, "reason"), "Conflict");
    assert_string_equal(str(e, "message"),
                        "Operation cannot be fulfilled on pods \"kl\": the object has been "
                        "modified; please apply your changes to the latest version and try again");
    json_decref(e);
    e = api("PATCH", POD_STATUS, MERGE, "{\"metadata\":{\"resourceVersion\":\"1\"}}", &st);
    assert_int_equal(st, 409);
    json_decref(e);

    /* The container is OOM-killed (merge patch, the version as a precondition). */
    body =
        tc_fmt("{\"metadata\":{\"resourceVersion\":\"%llu\"},\"status\":{"
               "\"containerStatuses\":[{\"name\":\"c\",\"state\":{\"terminated\":{"
               "\"exitCode\":137,\"reason\":\"OOMKilled\",\"containerID\":\"containerd://aaaa\","
               "\"startedAt\":\"2024-05-01T10:00:03Z\",\"finishedAt\":\"2024-05-01T10:05:00Z\"}},"
               "\"ready\":false,\"restartCount\":0,\"image\":\"busybox:1.36\","
               "\"containerID\":\"containerd://aaaa\"}]}}",
               rv1);
    json_t *k = api("PATCH", POD_STATUS "?fieldManager=kubelet", MERGE, body, &st);
    free(body);
    assert_int_equal(st, 200);
    json_t *term = tc_at(k, "status.containerStatuses.0.state.terminated");
    assert_int_equal(json_integer_value(json_object_get(term, "exitCode")), 137);
    assert_string_equal(str(term, "reason"), "OOMKilled");
    assert_string_equal(str(term, "finishedAt"), "2024-05-01T10:05:00Z");
    assert_string_equal(str(k, "status.containerStatuses.0.imageID"), ""); /* always written */
    assert_string_equal(str(k, "status.conditions.0.type"), "Ready");      /* untouched */

    /* Restarted (strategic merge patch): running again, the crash in lastState. */
    json_t *s =
        api("PATCH", POD_STATUS "?fieldManager=kubelet", "application/strategic-merge-patch+json",
            "{\"status\":{\"containerStatuses\":[{\"name\":\"c\",\"state\":{\"running\":{"
            "\"startedAt\":\"2024-05-01T10:05:02Z\"}},\"lastState\":{\"terminated\":{"
            "\"exitCode\":137,\"reason\":\"OOMKilled\",\"containerID\":"
            "\"containerd://aaaa\",\"startedAt\":\"2024-05-01T10:00:03Z\",\"finishedAt\":"
            "\"2024-05-01T10:05:00Z\"}},\"ready\":true,\"restartCount\":1,\"image\":"
            "\"busybox:1.36\",\"imageID\":\"docker.io/library/busybox@sha256:0123\","
            "\"containerID\":\"containerd://bbbb\",\"started\":true}]}}",
            &st);
    assert_int_equal(st, 200);
    assert_int_equal(json_integer_value(tc_at(s, "status.containerStatuses.0.restartCount")), 1);
    assert_string_equal(str(s, "status.containerStatuses.0.lastState.terminated.containerID"),
                        "containerd://aaaa");
    unsigned long long rv3 = rv_of(s);

    /* kubectl's columns follow the statuses. */
    json_t *t = get_table(POD_STATUS, &st);
    assert_int_equal(st, 200);
    assert_string_equal(str(t, "kind"), "Table");
    assert_string_equal(str(t, "rows.0.cells.1"), "1/1");
    assert_string_equal(str(t, "rows.0.cells.2"), "Running");
    const char *restarts = str(t, "rows.0.cells.3");
    assert_true(!strncmp(restarts, "1 (", 3) && strstr(restarts, " ago)"));
    json_decref(t);

    /* Writing the same status again writes nothing. */
    json_t *same = api("PATCH", POD_STATUS "?fieldManager=kubelet", MERGE,
                       "{\"status\":{\"phase\":\"Running\"}}", &st);
    assert_int_equal(st, 200);
    assert_int_equal(rv_of(same), rv3);
    json_decref(same);

    /* The main resource leaves the status alone: a status-only patch is a no-op. */
    json_t *m = api("PATCH", PODS "/kl", MERGE, "{\"status\":{\"phase\":\"Failed\"}}", &st);
    assert_int_equal(st, 200);
    assert_int_equal(rv_of(m), rv3);
    assert_string_equal(str(m, "status.phase"), "Running");
    json_decref(m);
    m = api("PATCH", PODS "/kl", MERGE,
            "{\"metadata\":{\"labels\":{\"tier\":\"x\"}},\"status\":{\"phase\":\"Failed\"}}", &st);
    assert_int_equal(st, 200);
    assert_true(rv_of(m) > rv3);
    assert_string_equal(str(m, "status.phase"), "Running");
    assert_string_equal(str(m, "metadata.labels.tier"), "x");
    json_decref(m);

    /* Errors, with the apiserver's Status bodies. */
    e = api("PUT", POD_STATUS, NULL,
            "{\"metadata\":{\"name\":\"kl\"},\"status\":{\"containerStatuses\":[{\"name\":\"c\","
            "\"restartCount\":\"1\"}]}}",
            &st);
    assert_int_equal(st, 400);
    assert_string_equal(str(e, "message"),
                        "Pod in version \"v1\" cannot be handled as a Pod: json: cannot unmarshal "
                        "string into Go struct field ContainerStatus.status.containerStatuses."
                        "restartCount of type int32");
    json_decref(e);
    e = api("PATCH", POD_STATUS, MERGE, "{\"status\":{\"startTime\":\"yesterday\"}}", &st);
    assert_int_equal(st, 422);
    assert_string_equal(str(e, "details.causes.0.field"), "patch");
    assert_non_null(strstr(str(e, "message"),
                           "\": parsing time \"yesterday\" as \"2006-01-02T15:04:05Z07:00\": "
                           "cannot parse \"yesterday\" as \"2006\""));
    json_decref(e);
    e = api("PATCH", POD_STATUS, MERGE, "{\"status\":{\"qosClass\":\"BestEffort\"}}", &st);
    assert_int_equal(st, 422);
    assert_string_equal(str(e, "message"), "Pod \"kl\" is invalid: status.qosClass: Invalid value: "
                                           "\"BestEffort\": field is immutable");
    json_decref(e);
    e = api("PATCH", POD_STATUS, MERGE, "{\"status\":{\"podIP\":\"10.0.0.300\"}}", &st);
    assert_int_equal(st, 422);
    assert_string_equal(str(e, "details.causes.0.field"), "status.podIPs[0]");
    json_decref(e);
    e = api("PATCH", POD_STATUS, "application/json-patch+json",
            "[{\"op\":\"replace\",\"path\":\"/status/phase\",\"value\":\"Failed\"}]", &st);
    assert_int_equal(st, 415);
    json_decref(e);
    e = api("PUT", PODS "/nope/status", NULL, "{\"metadata\":{\"name\":\"nope\"}}", &st);
    assert_int_equal(st, 404);
    assert_string_equal(str(e, "message"), "pods \"nope\" not found");
    json_decref(e);
    e = api("GET", PODS "/nope/status", NULL, NULL, &st);
    assert_int_equal(st, 404);
    json_decref(e);
    e = api("DELETE", POD_STATUS, NULL, NULL, &st);
    assert_int_equal(st, 405);
    assert_string_equal(str(e, "reason"), "MethodNotAllowed");
    json_decref(e);
    e = api("GET", "/apis/coordination.k8s.io/v1/namespaces/default/leases/x/status", NULL, NULL,
            &st);
    assert_int_equal(st, 404);
    json_decref(e);

    /* A PUT without labels removes them: the status subresource writes metadata too. */
    json_t *bare = api("PUT", POD_STATUS, NULL,
                       "{\"metadata\":{\"name\":\"kl\"},\"status\":{\"phase\":\"Failed\"}}", &st);
    assert_int_equal(st, 200);
    assert_null(tc_at(bare, "metadata.labels"));
    assert_null(tc_at(bare, "status.containerStatuses"));
    assert_string_equal(str(bare, "status.qosClass"), "Guaranteed");
    json_decref(bare);

    json_decref(s);
    json_decref(k);
    json_decref(r);
    json_decref(p);
    json_decref(api("DELETE", PODS "/kl", NULL, NULL, &st));
    assert_int_equal(st, 200);
}

/*
 * ValidateContainerStateTransition: what the kubelet will not restart stays
 * terminated (as v1.36.3 answers: init containers follow the pod's policy,
 * sidecars and a pod without a policy - Always - may restart, ephemeral
 * containers never).
 */
static void test_pod_status_transitions(void **state)
{
    long st;
    (void)state;
    static const struct {
        const char *policy;
        int exit_code;
        long want; /* moving the container, and the init container, back to running */
    } cases[] = {{"Never", 1, 422},     {"Never", 0, 422},  {"OnFailure", 0, 422},
                 {"OnFailure", 1, 200}, {"Always", 0, 200}, {"", 0, 200}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *body = tc_fmt("{\"metadata\":{\"name\":\"tr-%zu\"},\"spec\":{%s%s%s\"containers\":"
                            "[{\"name\":\"c\",\"image\":\"busybox\"}],\"initContainers\":[{"
                            "\"name\":\"i\",\"image\":\"busybox\"},{\"name\":\"side\",\"image\":"
                            "\"busybox\",\"restartPolicy\":\"Always\"}]}}",
                            i, *cases[i].policy ? "\"restartPolicy\":\"" : "", cases[i].policy,
                            *cases[i].policy ? "\"," : "");
        json_decref(api("POST", PODS, NULL, body, &st));
        free(body);
        assert_int_equal(st, 201);
        char *path = tc_fmt(PODS "/tr-%zu/status", i);
        body =
            tc_fmt("{\"status\":{\"containerStatuses\":[{\"name\":\"c\",\"state\":{"
                   "\"terminated\":{\"exitCode\":%d}}}],\"initContainerStatuses\":[{\"name\":"
                   "\"i\",\"state\":{\"terminated\":{\"exitCode\":%d}}},{\"name\":\"side\","
                   "\"state\":{\"terminated\":{\"exitCode\":0}}}],\"ephemeralContainerStatuses\":"
                   "[{\"name\":\"e\",\"state\":{\"terminated\":{\"exitCode\":1}}}]}}",
                   cases[i].exit_code, cases[i].exit_code);
        json_decref(api("PATCH", path, MERGE, body, &st));
        free(body);
        assert_int_equal(st, 200);
        /* The sidecar (restartPolicy Always) may start again whatever the pod's policy. */
        json_t *e = api("PATCH", path, MERGE,
                        "{\"status\":{\"containerStatuses\":[{\"name\":\"c\",\"state\":{"
                        "\"running\":{}}}],\"initContainerStatuses\":[{\"name\":\"i\",\"state\":{"
                        "\"running\":{}}},{\"name\":\"side\",\"state\":{\"running\":{}}}]}}",
                        &st);
        if (st != cases[i].want)
            print_message("restartPolicy %s, exit code %d: %ld\n", cases[i].policy,
                          cases[i].exit_code, st);
        assert_int_equal(st, cases[i].want);
        if (st == 422) {
            assert_int_equal(json_array_size(tc_at(e, "details.causes")), 2);
            assert_string_equal(str(e, "details.causes.0.field"),
                                "status.containerStatuses[0].state");
            assert_string_equal(str(e, "details.causes.0.message"),
                                "Forbidden: may not be transitioned to non-terminated state");
            assert_string_equal(str(e, "details.causes.1.field"),
                                "status.initContainerStatuses[0].state");
        }
        json_decref(e);
        e = api("PATCH", path, MERGE,
                "{\"status\":{\"ephemeralContainerStatuses\":[{\"name\":\"e\",\"state\":{"
                "\"running\":{}}}]}}",
                &st);
        assert_int_equal(st, 422);
        assert_string_equal(str(e, "details.causes.0.field"),
                            "status.ephemeralContainerStatuses[0].state");
        json_decref(e);
        free(path);
    }
}

/* ---- faults --------------------------------------------------------------- */

static void test_fault_errors(void **state)
{
    long st;
    char *resp;
    (void)state;
    json_decref(create_lease(srv, "faulty", "a"));
    long long before = tc_stat_or0(srv, "faults.error");
    tc_control(srv, "POST", "/testserver/v1/faults",
               "{\"kind\":\"error\",\"status\":503,\"count\":2,\"match\":{\"path_prefix\":"
               "\"" LEASES "/faulty\"}}",
               201);
    /* Out of scope: not affected. */
    json_decref(api("GET", LEASES, NULL, NULL, &st));
    assert_int_equal(st, 200);
    for (int i = 0; i < 2; i++) {
        json_t *e = api("GET", LEASES "/faulty", NULL, NULL, &st);
        assert_int_equal(st, 503);
        assert_string_equal(str(e, "reason"), "ServiceUnavailable");
        json_decref(e);
    }
    json_decref(api("GET", LEASES "/faulty", NULL, NULL, &st));
    assert_int_equal(st, 200);
    assert_int_equal(tc_stat_or0(srv, "faults.error"), before + 2);

    /* 429 carries Retry-After */
    tc_control(srv, "POST", "/testserver/v1/faults",
               "{\"kind\":\"error\",\"status\":429,\"retry_after\":3,\"count\":1,\"match\":"
               "{\"verb\":\"get\"}}",
               201);
    char *url = tc_fmt("%s%s/faulty", ts_url(srv), LEASES);
    char *tok = ts_token(srv);
    CURL *h = curl_easy_init();
    struct curl_slist *hdr = NULL;
    char *auth = tc_fmt("Authorization: Bearer %s", tok);
    ts_buf hb = {NULL, 0}, bb = {NULL, 0};
    hdr = curl_slist_append(hdr, auth);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CAINFO, ts_ca_file(srv));
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, ts_buf_write);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &hb);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, ts_buf_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &bb);
    assert_int_equal(curl_easy_perform(h), CURLE_OK);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &st);
    assert_int_equal(st, 429);
    /* HTTP/2 sends header names in lower case. */
    assert_true(strstr(hb.data, "Retry-After: 3") || strstr(hb.data, "retry-after: 3"));
    json_t *e = json_loads(bb.data, 0, NULL);
    assert_string_equal(str(e, "reason"), "TooManyRequests");
    assert_int_equal(json_integer_value(tc_at(e, "details.retryAfterSeconds")), 3);
    json_decref(e);
    free(hb.data);
    free(bb.data);
    curl_easy_cleanup(h);
    curl_slist_free_all(hdr);
    free(auth);
    free(tok);
    free(url);

    /* 500 by fraction, with a seeded PRNG: some fail, some pass */
    tc_control(srv, "POST", "/testserver/v1/faults",
               "{\"kind\":\"error\",\"status\":500,\"probability\":0.5,\"seed\":7,\"match\":"
               "{\"path_prefix\":\"" LEASES "/faulty\"}}",
               201);
    int fails = 0;
    for (int i = 0; i < 100; i++) {
        assert_int_equal(ts_request(srv, "GET", LEASES "/faulty", NULL, NULL, &st, &resp), 0);
        free(resp);
        assert_true(st == 200 || st == 500);
        fails += st == 500;
    }
    assert_true(fails > 10 && fails < 90);
    json_t *f = api("GET", "/testserver/v1/faults", NULL, NULL, &st);
    assert_int_equal(json_integer_value(tc_at(f, "faults.0.hits")), fails);
    json_decref(f);
    clear_faults();
}

static void test_fault_reset_latency_hang(void **state)
{
    long st;
    (void)state;
    long long resets = tc_stat_or0(srv, "faults.reset");
    tc_control(srv, "POST", "/testserver/v1/faults", "{\"kind\":\"reset\",\"count\":1}", 201);
    /*
     * A fresh connection: on a reused one libcurl (like Go's transport)
     * silently retries a request whose connection died unanswered.
     */
    char *url = tc_fmt("%s%s", ts_url(srv), LEASES);
    char *tok = ts_token(srv);
    assert_int_not_equal(raw_get(url, tok, NULL, NULL, &st, NULL), CURLE_OK);
    assert_int_equal(st, 0);
    free(url);
    free(tok);
    assert_int_equal(tc_stat_or0(srv, "faults.reset"), resets + 1);
    json_t *s = tc_stats(srv);
    assert_true(json_integer_value(tc_at(s, "requests.by_status.reset")) >= 1);
    json_decref(s);

    tc_control(srv, "POST", "/testserver/v1/faults",
               "{\"kind\":\"latency\",\"delay_ms\":300,\"count\":1}", 201);
    long long t0 = tc_now_ms();
    json_decref(api("GET", LEASES, NULL, NULL, &st));
    assert_int_equal(st, 200);
    assert_true(tc_now_ms() - t0 >= 290);
    assert_true(tc_stat_or0(srv, "faults.latency") >= 1);

    /* A hang window holds requests until it ends. */
    tc_control(srv, "POST", "/testserver/v1/faults", "{\"kind\":\"hang\",\"duration_ms\":600}",
               201);
    t0 = tc_now_ms();
    json_decref(api("GET", LEASES, NULL, NULL, &st));
    assert_int_equal(st, 200);
    assert_true(tc_now_ms() - t0 >= 400);
    assert_true(tc_stat_or0(srv, "faults.hang") >= 1);

    /* An open-ended hang lasts until the rule is deleted: a watcher is held... */
    tc_control(srv, "POST", "/testserver/v1/faults",
               "{\"kind\":\"hang\",\"match\":{\"user_agent\":\"held-client\"}}", 201);
    watcher *w = watch_start(srv, LEASES "?limit=1", "held-client");
    tc_wait_stat(srv, "suspended", 1, 10000);
    assert_true(tc_stat_or0(srv, "suspended") >= 1);
    assert_false(watch_wait_done(w, 300)); /* bounded check that it is still held */
    clear_faults();                        /* ...and released by the delete */
    assert_true(watch_wait_done(w, 10000));
    assert_int_equal(w->result, CURLE_OK);
    assert_int_equal(w->status, 200);
    watch_stop(w);
}

/* ---- goaway: a request refused unprocessed -------------------------------- */

/* libcurl's informational lines (CURLOPT_VERBOSE) into the ts_buf ud. */
static int curl_text(CURL *h, curl_infotype type, char *data, size_t size, void *ud)
{
    (void)h;
    if (type == CURLINFO_TEXT)
        ts_buf_write(data, 1, size, ud);
    return 0;
}

/*
 * An easy handle for a request to srv (a POST of post if not NULL) over
 * HTTP version `version`, its body into *body and libcurl's informational
 * lines, where it reports the GOAWAY frames it gets, into *log.
 */
static CURL *goaway_easy(const char *path, const char *post, struct curl_slist *hdr, long version,
                         ts_buf *body, ts_buf *log)
{
    char *url = tc_fmt("%s%s", ts_url(srv), path);
    CURL *h = curl_easy_init();
    assert_non_null(h);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CAINFO, ts_ca_file(srv));
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(h, CURLOPT_HTTP_VERSION, version);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "goaway-client");
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, ts_buf_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, body);
    curl_easy_setopt(h, CURLOPT_VERBOSE, 1L);
    curl_easy_setopt(h, CURLOPT_DEBUGFUNCTION, curl_text);
    curl_easy_setopt(h, CURLOPT_DEBUGDATA, log);
    if (post)
        curl_easy_setopt(h, CURLOPT_COPYPOSTFIELDS, post);
    free(url);
    return h;
}

/* Drives m (bounded) until h is done; its result, or -1 on time-out. */
static int multi_until_done(CURLM *m, CURL *h, long ms)
{
    long long deadline = tc_now_ms() + ms;
    while (tc_now_ms() < deadline) {
        int running, left;
        CURLMsg *msg;
        curl_multi_perform(m, &running);
        while ((msg = curl_multi_info_read(m, &left)))
            if (msg->msg == CURLMSG_DONE && msg->easy_handle == h)
                return (int)msg->data.result;
        curl_multi_poll(m, NULL, 0, 50, NULL);
    }
    return -1;
}

/* Drives m (bounded) until buf holds needle. */
static bool multi_until_seen(CURLM *m, const ts_buf *buf, const char *needle, long ms)
{
    long long deadline = tc_now_ms() + ms;
    while (tc_now_ms() < deadline) {
        int running;
        if (buf->data && strstr(buf->data, needle))
            return true;
        curl_multi_perform(m, &running);
        curl_multi_poll(m, NULL, 0, 50, NULL);
    }
    return buf->data && strstr(buf->data, needle);
}

static char *lease_body(const char *name)
{
    return tc_fmt("{\"apiVersion\":\"coordination.k8s.io/v1\",\"kind\":\"Lease\",\"metadata\":"
                  "{\"name\":\"%s\"},\"spec\":{\"holderIdentity\":\"a\","
                  "\"leaseDurationSeconds\":15}}",
                  name);
}

/* The Lease name exists exactly once, and it is the last write: its resourceVersion. */
static unsigned long long lease_once(const char *name)
{
    long st;
    char *path = tc_fmt(LEASES "?fieldSelector=metadata.name%%3D%s", name);
    json_t *l = api("GET", path, NULL, NULL, &st);
    assert_int_equal(st, 200);
    assert_int_equal(json_array_size(tc_at(l, "items")), 1);
    unsigned long long rv = rv_of(tc_at(l, "items.0"));
    assert_true(rv > 0);
    json_t *s = tc_stats(srv);
    assert_int_equal(strtoull(str(s, "resourceVersion"), NULL, 10), rv);
    json_decref(s);
    json_decref(l);
    free(path);
    return rv;
}

static unsigned long long store_rv(void)
{
    json_t *s = tc_stats(srv);
    unsigned long long rv = strtoull(str(s, "resourceVersion"), NULL, 10);
    json_decref(s);
    return rv;
}

static void test_fault_goaway(void **state)
{
    long st;
    (void)state;
    char *tok = ts_token(srv);
    char *auth = tc_fmt("Authorization: Bearer %s", tok);
    struct curl_slist *hdr = curl_slist_append(NULL, auth);
    hdr = curl_slist_append(hdr, "Content-Type: application/json");
    long long hits = tc_stat_or0(srv, "faults.goaway");
    long long refused = tc_stat_or0(srv, "requests.by_status.goaway");
    long long open0 = tc_stat_int(srv, "connections.h2.open");

    /*
     * 1. A POST multiplexed on a connection that carries a watch (stream 1)
     * is stream 3: the GOAWAY says last_stream=1, so libcurl retries it on a
     * new connection by itself, and the Lease is created once. The watch,
     * below the last stream, goes on over the old connection.
     */
    CURLM *m = curl_multi_init();
    ts_buf wbody = {NULL, 0}, pbody = {NULL, 0}, log = {NULL, 0};
    CURL *w = goaway_easy(LEASES "?watch=1&fieldSelector=metadata.name%3Dgoaway-a", NULL, hdr,
                          CURL_HTTP_VERSION_2TLS, &wbody, &log);
    curl_easy_setopt(w, CURLOPT_USERAGENT, "goaway-watch");
    curl_easy_setopt(w, CURLOPT_TIMEOUT, 0L);
    curl_multi_add_handle(m, w);
    long code = 0;
    for (long long end = tc_now_ms() + 10000; !code && tc_now_ms() < end;) {
        int running;
        curl_multi_perform(m, &running);
        curl_multi_poll(m, NULL, 0, 20, NULL);
        curl_easy_getinfo(w, CURLINFO_RESPONSE_CODE, &code);
    }
    assert_int_equal(code, 200);

    json_t *r =
        call(srv, "POST", "/testserver/v1/faults", NULL, "{\"kind\":\"goaway\",\"count\":1}", &st);
    assert_int_equal(st, 201);
    assert_string_equal(str(r, "kind"), "goaway");
    assert_int_equal(json_integer_value(tc_at(r, "count")), 1);
    assert_int_equal(json_integer_value(tc_at(r, "hits")), 0);
    json_decref(r);
    unsigned long long rv0 = store_rv();
    char *body = lease_body("goaway-a");
    CURL *p = goaway_easy(LEASES, body, hdr, CURL_HTTP_VERSION_2TLS, &pbody, &log);
    free(body);
    curl_easy_setopt(p, CURLOPT_PIPEWAIT, 1L); /* on the watch's connection */
    curl_multi_add_handle(m, p);
    assert_int_equal(multi_until_done(m, p, 20000), CURLE_OK);
    curl_easy_getinfo(p, CURLINFO_RESPONSE_CODE, &code);
    assert_int_equal(code, 201);
    long version = 0, connects = -1;
    curl_easy_getinfo(p, CURLINFO_HTTP_VERSION, &version);
    curl_easy_getinfo(p, CURLINFO_NUM_CONNECTS, &connects);
    assert_int_equal(version, CURL_HTTP_VERSION_2_0);
    assert_int_equal(connects, 1); /* the retry's: the first try went on the watch's */
    assert_non_null(log.data);
    assert_non_null(strstr(log.data, "GOAWAY, error=0, last_stream=1"));
    assert_int_equal(tc_stat_or0(srv, "faults.goaway"), hits + 1);
    assert_int_equal(tc_stat_or0(srv, "requests.by_status.goaway"), refused + 1);
    assert_int_equal(lease_once("goaway-a"), rv0 + 1);
    json_t *f = api("GET", "/testserver/v1/faults", NULL, NULL, &st);
    assert_int_equal(json_array_size(tc_at(f, "faults")), 0); /* count used up */
    json_decref(f);
    /* Stream 1 is still served after the GOAWAY: the watch sees the Lease... */
    assert_true(multi_until_seen(m, &wbody, "\"ADDED\"", 10000));
    /* ...until it ends; then the old connection closes (FIN, not a reset). */
    tc_control(srv, "POST", "/testserver/v1/watches/close",
               "{\"match\":{\"user_agent\":\"goaway-watch\"}}", 200);
    assert_int_equal(multi_until_done(m, w, 10000), CURLE_OK);
    curl_multi_remove_handle(m, w);
    curl_multi_remove_handle(m, p);
    curl_easy_cleanup(w);
    curl_easy_cleanup(p);
    curl_multi_cleanup(m);
    free(wbody.data);
    free(pbody.data);
    tc_wait_stat_at_most(srv, "connections.h2.open", open0, 10000);

    /*
     * 2. A lone request on a fresh connection is stream 1: last_stream=0.
     * libcurl 7.88 does not retry then: with the refused stream gone the
     * session has nothing left, and it reports CURLE_HTTP2 before it looks
     * at why the stream ended (the REFUSED_STREAM retry path that case 1
     * takes). Nothing was applied; a retry by the caller applies it once.
     */
    free(log.data);
    log = (ts_buf){NULL, 0};
    pbody = (ts_buf){NULL, 0};
    tc_control(srv, "POST", "/testserver/v1/faults", "{\"kind\":\"goaway\",\"count\":1}", 201);
    rv0 = store_rv();
    body = lease_body("goaway-b");
    p = goaway_easy(LEASES, body, hdr, CURL_HTTP_VERSION_2TLS, &pbody, &log);
    free(body);
    CURLcode rc = curl_easy_perform(p);
    code = -1;
    curl_easy_getinfo(p, CURLINFO_RESPONSE_CODE, &code);
    assert_non_null(log.data);
    assert_non_null(strstr(log.data, "GOAWAY, error=0, last_stream=0"));
    assert_int_equal(tc_stat_or0(srv, "faults.goaway"), hits + 2);
    assert_int_equal(tc_stat_or0(srv, "requests.by_status.goaway"), refused + 2);
    if (curl_version_info(CURLVERSION_NOW)->version_num < 0x080000) {
        assert_int_equal(rc, CURLE_HTTP2);
        assert_int_equal(code, 0);
        json_decref(api("GET", LEASES "/goaway-b", NULL, NULL, &st));
        assert_int_equal(st, 404);
        assert_int_equal(store_rv(), rv0);
        rc = curl_easy_perform(p); /* a new connection: the old one is closed */
        curl_easy_getinfo(p, CURLINFO_RESPONSE_CODE, &code);
    }
    /* (A libcurl that retries a refused lone stream itself gets here at once.) */
    assert_int_equal(rc, CURLE_OK);
    assert_int_equal(code, 201);
    assert_int_equal(lease_once("goaway-b"), rv0 + 1);
    curl_easy_cleanup(p);
    free(pbody.data);
    free(log.data);
    tc_wait_stat_at_most(srv, "connections.h2.open", open0, 10000);

    /* 3. HTTP/1.1 cannot say "not processed": the connection is reset, as by `reset`. */
    log = (ts_buf){NULL, 0};
    pbody = (ts_buf){NULL, 0};
    tc_control(srv, "POST", "/testserver/v1/faults", "{\"kind\":\"goaway\",\"count\":1}", 201);
    rv0 = store_rv();
    body = lease_body("goaway-c");
    p = goaway_easy(LEASES, body, hdr, CURL_HTTP_VERSION_1_1, &pbody, &log);
    free(body);
    assert_int_not_equal(curl_easy_perform(p), CURLE_OK);
    code = -1;
    curl_easy_getinfo(p, CURLINFO_RESPONSE_CODE, &code);
    assert_int_equal(code, 0);
    assert_int_equal(tc_stat_or0(srv, "faults.goaway"), hits + 3);
    assert_int_equal(tc_stat_or0(srv, "requests.by_status.goaway"), refused + 3);
    json_decref(api("GET", LEASES "/goaway-c", NULL, NULL, &st));
    assert_int_equal(st, 404);
    assert_int_equal(store_rv(), rv0);
    curl_easy_cleanup(p);
    free(pbody.data);
    free(log.data);

    clear_faults();
    curl_slist_free_all(hdr);
    free(auth);
    free(tok);
}

static void test_fault_client_scope(void **state)
{
    long st;
    char *body;
    (void)state;
    tc_control(srv, "POST", "/testserver/v1/faults",
               "{\"kind\":\"error\",\"status\":500,\"match\":{\"user_agent\":\"cand-b\"}}", 201);
    char *url = tc_fmt("%s%s", ts_url(srv), LEASES);
    char *tok = ts_token(srv);
    assert_int_equal(raw_get(url, tok, NULL, "elector/1.0 cand-a", &st, NULL), CURLE_OK);
    assert_int_equal(st, 200);
    assert_int_equal(raw_get(url, tok, NULL, "elector/1.0 cand-b", &st, &body), CURLE_OK);
    assert_int_equal(st, 500);
    json_t *e = json_loads(body, 0, NULL);
    assert_string_equal(str(e, "reason"), "InternalError");
    json_decref(e);
    free(body);
    clear_faults();

    /* Scoped to a token nobody uses: no effect. */
    tc_control(srv, "POST", "/testserver/v1/faults",
               "{\"kind\":\"reset\",\"match\":{\"token\":\"someone-else\"}}", 201);
    assert_int_equal(raw_get(url, tok, NULL, NULL, &st, NULL), CURLE_OK);
    assert_int_equal(st, 200);
    clear_faults();
    free(tok);
    free(url);
}

static void test_fault_watch_freeze_and_close(void **state)
{
    long st;
    (void)state;
    json_decref(create_lease(srv, "frozen", "a"));
    long long open0 = tc_stat_or0(srv, "watches.open");
    watcher *w =
        watch_start(srv, LEASES "?watch=1&fieldSelector=metadata.name%3Dfrozen", "froze-me");
    assert_true(watch_wait_real(w, 1, 10000)); /* the synthetic ADDED */

    long long frozen = tc_stat_or0(srv, "faults.freeze_watch");
    tc_control(srv, "POST", "/testserver/v1/faults",
               "{\"kind\":\"freeze_watch\",\"match\":{\"user_agent\":\"froze-me\"}}", 201);
    json_decref(
        api("PATCH", LEASES "/frozen", MERGE, "{\"spec\":{\"holderIdentity\":\"b\"}}", &st));
    assert_int_equal(st, 200);
    /* Bounded check for an absence: the frozen stream delivers nothing. */
    assert_false(watch_wait(w, 2, 500));
    assert_int_equal(tc_stat_or0(srv, "faults.freeze_watch"), frozen + 1);
    clear_faults();
    assert_true(watch_wait_real(w, 2, 10000));
    assert_string_equal(str(watch_nth(w, 1, true), "type"), "MODIFIED");

    /* close: a clean end of the stream */
    long long closed = tc_stat_or0(srv, "faults.close_watch");
    tc_control(srv, "POST", "/testserver/v1/watches/close",
               "{\"match\":{\"user_agent\":\"froze-me\"}}", 200);
    assert_true(watch_wait_done(w, 10000));
    assert_int_equal(w->result, CURLE_OK);
    watch_stop(w);

    /* abort: the connection is cut mid-stream */
    w = watch_start(srv, LEASES "?watch=1&fieldSelector=metadata.name%3Dfrozen", "cut-me");
    assert_true(watch_wait_real(w, 1, 10000));
    tc_control(srv, "POST", "/testserver/v1/watches/close",
               "{\"abort\":true,\"match\":{\"user_agent\":\"cut-me\"}}", 200);
    assert_true(watch_wait_done(w, 10000));
    assert_int_not_equal(w->result, CURLE_OK);
    watch_stop(w);
    assert_int_equal(tc_stat_or0(srv, "faults.close_watch"), closed + 2);
    tc_wait_stat_at_most(srv, "watches.open", open0, 10000);
    assert_int_equal(tc_stat_or0(srv, "watches.open"), open0);
}

/* ---- token rotation and restarts (own servers) ---------------------------- */

static void test_token_rotation(void **state)
{
    ts_server *s;
    long st;
    (void)state;
    assert_int_equal(ts_start(&s, NULL), 0);
    char *old = ts_token(s);
    json_t *r = call(s, "POST", "/testserver/v1/token", NULL, "{}", &st);
    assert_int_equal(st, 200);
    char *fresh = ts_token(s); /* DIR/token now holds the new one */
    assert_string_equal(str(r, "token"), fresh);
    assert_string_not_equal(old, fresh);
    json_decref(r);

    char *url = tc_fmt("%s%s", ts_url(s), LEASES);
    char *ca = tc_fmt("%s/ca.crt", ts_dir(s));
    /* raw_get uses the shared server's CA: same code path, so use a local handle */
    CURL *h = curl_easy_init();
    for (int i = 0; i < 2; i++) {
        char *auth = tc_fmt("Authorization: Bearer %s", i == 0 ? old : fresh);
        struct curl_slist *hdr = curl_slist_append(NULL, auth);
        ts_buf b = {NULL, 0};
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_CAINFO, ca);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, ts_buf_write);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
        assert_int_equal(curl_easy_perform(h), CURLE_OK);
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &st);
        assert_int_equal(st, i == 0 ? 401 : 200);
        free(b.data);
        curl_slist_free_all(hdr);
        free(auth);
    }
    curl_easy_cleanup(h);
    /* The embedded-token kubeconfig was rewritten too. */
    char *kc = kl_test_read_file(ts_kubeconfig(s), NULL);
    assert_non_null(strstr(kc, fresh));
    free(kc);
    json_t *sj = tc_stats(s);
    assert_int_equal(json_integer_value(tc_at(sj, "faults.rotate_token")), 1);
    json_decref(sj);
    free(url);
    free(ca);
    free(old);
    free(fresh);
    assert_int_equal(ts_stop(s), 0);
}

static void test_restart(void **state)
{
    ts_server *s;
    long st;
    (void)state;
    char dir[] = "/tmp/k8slease-ts-restart.XXXXXX";
    assert_non_null(mkdtemp(dir));
    const char *args[] = {"--dir", dir, NULL};
    assert_int_equal(ts_start(&s, args), 0);
    char *ca_before = kl_test_read_file(ts_ca_file(s), NULL);

    json_decref(create_lease(s, "survivor", "a"));
    json_decref(
        call(s, "POST", "/api/v1/namespaces", NULL, "{\"metadata\":{\"name\":\"kept\"}}", &st));
    assert_int_equal(st, 201);
    watcher *w = watch_start(s, LEASES "?watch=1", NULL);
    assert_true(watch_wait_real(w, 1, 10000));

    assert_int_equal(ts_restart(s, true, 0), 0);
    /* The watch was dropped with the connection... */
    assert_true(watch_wait_done(w, 10000));
    assert_int_not_equal(w->result, CURLE_OK);
    watch_stop(w);
    /* ...the state was kept, namespaces included. */
    json_decref(call(s, "GET", LEASES "/survivor", NULL, NULL, &st));
    assert_int_equal(st, 200);
    json_decref(call(s, "GET", "/api/v1/namespaces/kept", NULL, NULL, &st));
    assert_int_equal(st, 200);

    /* Down for a while, then back without state. */
    assert_int_equal(ts_restart(s, false, 200), 0);
    json_t *e = call(s, "GET", LEASES "/survivor", NULL, NULL, &st);
    assert_int_equal(st, 404);
    json_decref(e);
    /* Forgotten namespaces are gone; the four defaults are back. */
    json_decref(call(s, "GET", "/api/v1/namespaces/kept", NULL, NULL, &st));
    assert_int_equal(st, 404);
    json_decref(call(s, "GET", "/api/v1/namespaces/kube-node-lease", NULL, NULL, &st));
    assert_int_equal(st, 200);
    assert_int_equal(tc_stat_or0(s, "faults.restart"), 2);
    assert_int_equal(tc_stat_or0(s, "leases"), 0);
    assert_int_equal(ts_stop(s), 0);

    /* A new server on the same directory keeps the CA. */
    assert_int_equal(ts_start(&s, args), 0);
    char *ca_after = kl_test_read_file(ts_ca_file(s), NULL);
    assert_string_equal(ca_before, ca_after);
    assert_int_equal(ts_stop(s), 0);
    free(ca_before);
    free(ca_after);
    char *rm = tc_fmt("rm -rf '%s'", dir);
    assert_int_equal(system(rm), 0);
    free(rm);
}

/* ---- kubectl -------------------------------------------------------------- */

#define KUBECTL "timeout 60 /usr/bin/kubectl --kubeconfig '%s' --cache-dir '%s/kubecache' "

static void test_kubectl(void **state)
{
    long st;
    int rc;
    (void)state;
    if (access("/usr/bin/kubectl", X_OK) != 0) {
        print_message("kubectl not installed: skipping the kubectl checks\n");
        skip();
    }
    const char *kc = ts_kubeconfig(srv), *dir = ts_dir(srv);
    json_t *c = create_lease(srv, "kubectl-lease", "kholder");

    char *out = tc_run(&rc, KUBECTL "get lease kubectl-lease -o json 2>&1", kc, dir);
    assert_int_equal(rc, 0);
    json_t *k = json_loads(out, 0, NULL);
    assert_non_null(k);
    assert_string_equal(str(k, "metadata.uid"), str(c, "metadata.uid"));
    assert_string_equal(str(k, "metadata.resourceVersion"), str(c, "metadata.resourceVersion"));
    assert_string_equal(str(k, "spec.holderIdentity"), "kholder");
    assert_int_equal(json_integer_value(tc_at(k, "spec.leaseDurationSeconds")), 15);
    json_decref(k);
    free(out);

    out = tc_run(&rc, KUBECTL "get lease 2>&1", kc, dir);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "HOLDER"));
    assert_non_null(strstr(out, "kubectl-lease"));
    assert_non_null(strstr(out, "kholder"));
    free(out);

    out = tc_run(&rc, KUBECTL "get lease kubectl-lease -o yaml 2>&1", kc, dir);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "holderIdentity: kholder"));
    free(out);

    json_decref(api("POST", PODS, NULL,
                    "{\"metadata\":{\"name\":\"kubectl-pod\"},\"spec\":{\"containers\":[{\"name\":"
                    "\"c\",\"image\":\"busybox\"}]}}",
                    &st));
    assert_int_equal(st, 201);
    out = tc_run(&rc, KUBECTL "label pod kubectl-pod role=leader 2>&1", kc, dir);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "labeled"));
    free(out);
    out = tc_run(&rc, KUBECTL "get pod --show-labels 2>&1", kc, dir);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "kubectl-pod"));
    assert_non_null(strstr(out, "role=leader"));
    free(out);
    out = tc_run(&rc, KUBECTL "label pod kubectl-pod role- 2>&1", kc, dir);
    assert_int_equal(rc, 0);
    free(out);
    json_t *p = api("GET", PODS "/kubectl-pod", NULL, NULL, &st);
    assert_null(tc_at(p, "metadata.labels.role"));
    json_decref(p);

    /* The status subresource, as kubectl 1.32 writes and reads it (--subresource=status). */
    out = tc_run(&rc,
                 KUBECTL "patch pod kubectl-pod --subresource=status --type=merge -p "
                         "'{\"status\":{\"phase\":\"Running\",\"containerStatuses\":[{\"name\":"
                         "\"c\",\"ready\":true,\"restartCount\":3,\"state\":{\"running\":{"
                         "\"startedAt\":\"2024-05-01T10:00:00Z\"}}}]}}' 2>&1",
                 kc, dir);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "pod/kubectl-pod patched"));
    free(out);
    out = tc_run(&rc, KUBECTL "get pod kubectl-pod --subresource=status -o json 2>&1", kc, dir);
    assert_int_equal(rc, 0);
    p = json_loads(out, 0, NULL);
    assert_non_null(p);
    assert_int_equal(json_integer_value(tc_at(p, "status.containerStatuses.0.restartCount")), 3);
    assert_string_equal(str(p, "status.containerStatuses.0.imageID"), "");
    json_decref(p);
    free(out);
    out = tc_run(&rc, KUBECTL "get pod kubectl-pod --subresource=status 2>&1", kc, dir);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "RESTARTS"));
    assert_non_null(strstr(out, "1/1"));
    assert_non_null(strstr(out, "Running"));
    free(out);

    /* apply with client-side dry run (validation goes through /openapi/v3) */
    char *yaml = tc_fmt("%s/lease.yaml", dir);
    FILE *f = fopen(yaml, "w");
    assert_non_null(f);
    fputs("apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: applied\n"
          "spec:\n  holderIdentity: me\n",
          f);
    fclose(f);
    out = tc_run(&rc, KUBECTL "apply --dry-run=client -f '%s' 2>&1", kc, dir, yaml);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "dry run"));
    free(out);
    free(yaml);

    /*
     * get -w sees a change made while it watches; stopped once it has.
     * kubectl GETs the object, then watches from resourceVersion "0" and
     * skips the synthetic ADDED: change the object only once that watch is
     * open, or the change folds into the skipped event.
     */
    long long open0 = tc_stat_or0(srv, "watches.open");
    char *cmd = tc_fmt("exec timeout 60 /usr/bin/kubectl --kubeconfig '%s' --cache-dir "
                       "'%s/kubecache' get lease kubectl-lease -w 2>&1",
                       kc, dir);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    free(cmd);
    close(fds[1]);
    FILE *wp = fdopen(fds[0], "r");
    assert_non_null(wp);
    char line[512];
    assert_non_null(fgets(line, sizeof(line), wp)); /* header */
    assert_non_null(fgets(line, sizeof(line), wp)); /* the row from the GET */
    wait_open_watches(srv, open0 + 1);
    json_decref(api("PATCH", LEASES "/kubectl-lease", MERGE,
                    "{\"spec\":{\"holderIdentity\":\"new-holder\"}}", &st));
    assert_int_equal(st, 200);
    bool seen = false;
    while (!seen && fgets(line, sizeof(line), wp)) {
        seen = strstr(line, "new-holder") != NULL;
        if (!seen)
            print_message("kubectl get -w: %s", line);
    }
    kill(pid, SIGTERM); /* timeout(1) passes it on to kubectl */
    fclose(wp);
    waitpid(pid, NULL, 0);
    assert_true(seen);
    json_decref(c);
}

/* ---- load ----------------------------------------------------------------- */

/* Runs n requests over `par` kept-alive connections; returns how many got `want`. */
static int blast(int n, int par, bool create, long want, double *secs)
{
    CURLM *m = curl_multi_init();
    CURL *h[16];
    struct curl_slist *hdr = NULL;
    char *tok = ts_token(srv);
    char *auth = tc_fmt("Authorization: Bearer %s", tok);
    char *bodies[16] = {0};
    char *urls[16] = {0};
    int next = 0, ok = 0, done = 0;
    hdr = curl_slist_append(hdr, auth);
    hdr = curl_slist_append(hdr, "Content-Type: application/json");
    long long t0 = tc_now_ms(), deadline = t0 + 240000;

    for (int i = 0; i < par; i++) {
        h[i] = curl_easy_init();
        curl_easy_setopt(h[i], CURLOPT_CAINFO, ts_ca_file(srv));
        curl_easy_setopt(h[i], CURLOPT_HTTPHEADER, hdr);
        curl_easy_setopt(h[i], CURLOPT_WRITEFUNCTION, ts_buf_write);
        curl_easy_setopt(h[i], CURLOPT_TIMEOUT, 30L);
        curl_easy_setopt(h[i], CURLOPT_PRIVATE, (char *)(intptr_t)i);
    }
    ts_buf sink[16] = {{0}};
    for (int i = 0; i < par && next < n; i++, next++) {
        free(urls[i]);
        free(bodies[i]);
        if (create) {
            urls[i] = tc_fmt("%s/apis/coordination.k8s.io/v1/namespaces/load/leases", ts_url(srv));
            bodies[i] = tc_fmt("{\"metadata\":{\"name\":\"l-%05d\"},\"spec\":{\"holderIdentity\":"
                               "\"h\",\"leaseDurationSeconds\":15}}",
                               next);
            curl_easy_setopt(h[i], CURLOPT_POSTFIELDS, bodies[i]);
        } else {
            urls[i] = tc_fmt("%s/apis/coordination.k8s.io/v1/namespaces/load/leases/l-%05d",
                             ts_url(srv), next);
            bodies[i] = NULL;
            curl_easy_setopt(h[i], CURLOPT_HTTPGET, 1L);
        }
        curl_easy_setopt(h[i], CURLOPT_URL, urls[i]);
        curl_easy_setopt(h[i], CURLOPT_WRITEDATA, &sink[i]);
        curl_multi_add_handle(m, h[i]);
    }
    while (done < n && tc_now_ms() < deadline) {
        int running;
        curl_multi_perform(m, &running);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(m, &left))) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            char *priv;
            long code = 0;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &priv);
            curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &code);
            int i = (int)(intptr_t)priv;
            done++;
            ok += msg->data.result == CURLE_OK && code == want;
            sink[i].len = 0;
            curl_multi_remove_handle(m, h[i]);
            if (next < n) {
                free(urls[i]);
                free(bodies[i]);
                if (create) {
                    urls[i] = tc_fmt("%s/apis/coordination.k8s.io/v1/namespaces/load/leases",
                                     ts_url(srv));
                    bodies[i] = tc_fmt("{\"metadata\":{\"name\":\"l-%05d\"},\"spec\":{"
                                       "\"holderIdentity\":\"h\",\"leaseDurationSeconds\":15}}",
                                       next);
                    curl_easy_setopt(h[i], CURLOPT_POSTFIELDS, bodies[i]);
                } else {
                    urls[i] = tc_fmt("%s/apis/coordination.k8s.io/v1/namespaces/load/leases/l-%05d",
                                     ts_url(srv), next);
                    bodies[i] = NULL;
                }
                curl_easy_setopt(h[i], CURLOPT_URL, urls[i]);
                next++;
                curl_multi_add_handle(m, h[i]);
            }
        }
        if (done < n)
            curl_multi_poll(m, NULL, 0, 100, NULL);
    }
    *secs = (double)(tc_now_ms() - t0) / 1000.0;
    for (int i = 0; i < par; i++) {
        curl_multi_remove_handle(m, h[i]);
        curl_easy_cleanup(h[i]);
        free(urls[i]);
        free(bodies[i]);
        free(sink[i].data);
    }
    curl_multi_cleanup(m);
    curl_slist_free_all(hdr);
    free(auth);
    free(tok);
    return ok;
}

static void test_load_10k(void **state)
{
    long st;
    double secs;
    (void)state;
    const int n = 10000;
    json_decref(api("POST", "/api/v1/namespaces", NULL, "{\"metadata\":{\"name\":\"load\"}}", &st));
    assert_int_equal(st, 201);
    int created = blast(n, 8, true, 201, &secs);
    print_message("created %d leases in %.2f s: %.0f requests/s (8 connections)\n", created, secs,
                  created / secs);
    assert_int_equal(created, n);
    int got = blast(n, 8, false, 200, &secs);
    print_message("read %d leases in %.2f s: %.0f requests/s (8 connections)\n", got, secs,
                  got / secs);
    assert_int_equal(got, n);

    json_t *l = api("GET", "/apis/coordination.k8s.io/v1/namespaces/load/leases", NULL, NULL, &st);
    assert_int_equal(st, 200);
    assert_int_equal(json_array_size(tc_at(l, "items")), (size_t)n);
    json_decref(l);
    /* paging as kubectl and client-go do it */
    l = api("GET", "/apis/coordination.k8s.io/v1/namespaces/load/leases?limit=500", NULL, NULL,
            &st);
    assert_int_equal(json_array_size(tc_at(l, "items")), 500);
    assert_int_equal(json_integer_value(tc_at(l, "metadata.remainingItemCount")), n - 500);
    char *cont = curl_easy_escape(NULL, str(l, "metadata.continue"), 0);
    char *path =
        tc_fmt("/apis/coordination.k8s.io/v1/namespaces/load/leases?limit=500&continue=%s", cont);
    curl_free(cont);
    json_t *l2 = api("GET", path, NULL, NULL, &st);
    free(path);
    assert_int_equal(st, 200);
    assert_string_equal(str(l2, "items.0.metadata.name"), "l-00500");
    json_decref(l2);
    json_decref(l);
    assert_true(tc_stat_or0(srv, "leases") >= n);
}

/* ---- LeaseCandidates and coordinated leader election ------------------------ */

/*
 * A server with --feature-gates=CoordinatedLeaderElection=true, started by
 * the first of these tests. Its election duration (how long the controller
 * waits for pinged candidates, and its requeue interval) is 2 s instead of
 * the apiserver's 5 s; the Lease duration it writes stays 5 s.
 */
#define LCS             "/apis/coordination.k8s.io/v1beta1/namespaces/default/leasecandidates"
#define CLE_ELECTION_MS 2000
#define CLE_WAIT_MS     (4 * CLE_ELECTION_MS + 8000) /* an expiry, pings and their timeout, slack */

static ts_server *cle;

static ts_server *cle_server(void)
{
    static const char *const args[] = {"--feature-gates=CoordinatedLeaderElection=true",
                                       "--cle-election-duration", "2000", NULL};
    if (!cle)
        assert_int_equal(ts_start(&cle, args), 0);
    return cle;
}

/* A MicroTime offset_s seconds from now (wall clock), as a client writes it. */
static void microtime(long offset_s, char out[32])
{
    struct timespec ts;
    struct tm tm;
    char sec[24];
    clock_gettime(CLOCK_REALTIME, &ts);
    time_t t = ts.tv_sec + offset_s;
    gmtime_r(&t, &tm);
    strftime(sec, sizeof(sec), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, 32, "%.19s.%06uZ", sec, (unsigned)(ts.tv_nsec / 1000) % 1000000u);
}

/* A canonical MicroTime ("2006-01-02T15:04:05.000000Z") in microseconds since the epoch. */
static long long micros(const char *s)
{
    int y, mo, d, h, mi, se;
    long us;
    if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d.%6ldZ", &y, &mo, &d, &h, &mi, &se, &us) != 7)
        fail_msg("not a MicroTime: '%s'", s);
    /* days_from_civil (Howard Hinnant) */
    y -= mo <= 2;
    long long era = (y >= 0 ? y : y - 399) / 400;
    long long yoe = y - era * 400;
    long long doy = (153 * (mo + (mo > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    long long days = era * 146097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719468;
    return ((days * 86400 + h * 3600 + mi * 60 + se) * 1000000LL) + us;
}

/* POSTs a candidate for lease; renew_offset_s: its renewTime from now (0: fresh). */
static json_t *create_candidate(const char *name, const char *lease, const char *emulation,
                                long renew_offset_s)
{
    long st;
    char t[32];
    microtime(renew_offset_s, t);
    char *body = tc_fmt("{\"apiVersion\":\"coordination.k8s.io/v1beta1\",\"kind\":"
                        "\"LeaseCandidate\",\"metadata\":{\"name\":\"%s\"},\"spec\":{"
                        "\"leaseName\":\"%s\",\"binaryVersion\":\"1.36.0\",\"emulationVersion\":"
                        "\"%s\",\"strategy\":\"OldestEmulationVersion\",\"renewTime\":\"%s\"}}",
                        name, lease, emulation, t);
    json_t *j = call(cle, "POST", LCS, NULL, body, &st);
    free(body);
    assert_int_equal(st, 201);
    return j;
}

static json_t *get_obj(const char *coll, const char *name, long *st)
{
    char *p = tc_fmt("%s/%s", coll, name);
    json_t *j = call(cle, "GET", p, NULL, NULL, st);
    free(p);
    return j;
}

/* A merge patch of spec by a client (manager "probe"). */
static void patch_spec(const char *coll, const char *name, const char *spec_json)
{
    long st;
    char *p = tc_fmt("%s/%s?fieldManager=probe", coll, name);
    char *b = tc_fmt("{\"spec\":%s}", spec_json);
    json_decref(call(cle, "PATCH", p, MERGE, b, &st));
    assert_int_equal(st, 200);
    free(p);
    free(b);
}

/* The candidate answers: renewTime = now. */
static void ack(const char *name)
{
    char t[32], spec[64];
    microtime(0, t);
    snprintf(spec, sizeof(spec), "{\"renewTime\":\"%s\"}", t);
    patch_spec(LCS, name, spec);
}

/* True if the candidate has a ping it has not answered. */
static bool ping_pending(const char *name)
{
    long st;
    json_t *c = get_obj(LCS, name, &st);
    assert_int_equal(st, 200);
    const char *ping = str(c, "spec.pingTime"), *renew = str(c, "spec.renewTime");
    /* Canonical MicroTimes in UTC compare as strings. */
    bool pending = *ping && strcmp(renew, ping) < 0;
    json_decref(c);
    return pending;
}

/*
 * Polls the Lease (every 50 ms, at most ms) until spec.<field> is want,
 * answering the pings of the candidates in responders meanwhile (NULL-
 * terminated, or NULL). Returns the Lease; fails with its last state.
 */
static json_t *wait_lease(const char *lease, const char *field, const char *want,
                          const char *const *responders, long ms)
{
    char path[128];
    snprintf(path, sizeof(path), "spec.%s", field);
    json_t *l = NULL;
    long long end = tc_now_ms() + ms;
    for (;;) {
        long st;
        json_decref(l);
        l = get_obj(LEASES, lease, &st);
        if (st == 200 && !strcmp(str(l, path), want))
            return l;
        if (tc_now_ms() > end)
            break;
        for (size_t i = 0; responders && responders[i]; i++)
            if (ping_pending(responders[i]))
                ack(responders[i]);
        tc_pause_ms(50);
    }
    char *s = json_dumps(l, JSON_COMPACT);
    fail_msg("Lease %s: %s is not \"%s\" after %ld ms; last: %s", lease, path, want, ms, s);
    free(s);
    return NULL;
}

/* Polls until the candidate has a ping pending; fails after ms. */
static void wait_pinged(const char *name, long ms)
{
    long long end = tc_now_ms() + ms;
    while (!ping_pending(name)) {
        if (tc_now_ms() > end)
            fail_msg("LeaseCandidate %s was not pinged within %ld ms", name, ms);
        tc_pause_ms(20);
    }
}

static void test_cle_gate_off(void **state)
{
    long st;
    (void)state;
    /* The shared server runs without the gate: no v1beta1, no LeaseCandidates. */
    json_decref(api("GET", LCS, NULL, NULL, &st));
    assert_int_equal(st, 404);
    json_decref(api("GET", "/apis/coordination.k8s.io/v1beta1", NULL, NULL, &st));
    assert_int_equal(st, 404);
    json_t *g = api("GET", "/apis/coordination.k8s.io", NULL, NULL, &st);
    assert_int_equal(st, 200);
    assert_int_equal(json_array_size(tc_at(g, "versions")), 1);
    json_decref(g);

    /* With it: the group lists v1 then v1beta1 (discovery_group.json, without v1alpha2). */
    cle_server();
    g = call(cle, "GET", "/apis/coordination.k8s.io", NULL, NULL, &st);
    assert_int_equal(st, 200);
    assert_string_equal(str(g, "versions.1.groupVersion"), "coordination.k8s.io/v1beta1");
    assert_string_equal(str(g, "preferredVersion.version"), "v1");
    json_decref(g);
    g = call(cle, "GET", "/apis/coordination.k8s.io/v1beta1", NULL, NULL, &st);
    assert_int_equal(st, 200);
    assert_string_equal(str(g, "resources.0.name"), "leasecandidates");
    assert_string_equal(str(g, "resources.0.kind"), "LeaseCandidate");
    assert_string_equal(str(g, "resources.0.storageVersionHash"), "lvME0iHWE20=");
    json_decref(g);

    /* Flags: an unknown gate is refused, naming it. */
    int rc;
    char *out = tc_run(&rc, "timeout 10 '%s' --feature-gates Bogus=true 2>&1; echo rc=$?",
                       getenv("K8SLEASE_TESTSERVER") ? getenv("K8SLEASE_TESTSERVER")
                                                     : K8SLEASE_TESTSERVER_PATH);
    assert_non_null(strstr(out, "unrecognized feature gate: Bogus"));
    assert_non_null(strstr(out, "rc=2"));
    free(out);
}

/* A Status without the parts that differ from run to run. */
static json_t *sample(const char *file)
{
    char *p = tc_fmt(SAMPLES "leasecandidate/%s", file);
    json_t *j = json_load_file(p, 0, NULL);
    if (!j)
        fail_msg("cannot read %s", p);
    free(p);
    return j;
}

static void test_cle_validation(void **state)
{
    (void)state;
    cle_server();
    /* Each body the real server refused, and what it said (422_*.json, 400_*.json). */
    static const struct {
        const char *file, *name, *spec;
    } cases[] = {
        {"422_nobv.json", "v-nobv",
         "{\"leaseName\":\"x\",\"emulationVersion\":\"1.35.0\",\"strategy\":"
         "\"OldestEmulationVersion\"}"},
        {"422_vbv.json", "v-vbv",
         "{\"leaseName\":\"x\",\"binaryVersion\":\"v1.36.0\",\"emulationVersion\":\"1.35.0\","
         "\"strategy\":\"OldestEmulationVersion\"}"},
        {"422_evgt.json", "v-evgt",
         "{\"leaseName\":\"x\",\"binaryVersion\":\"1.35.0\",\"emulationVersion\":\"1.36.0\","
         "\"strategy\":\"OldestEmulationVersion\"}"},
        {"422_nostrat.json", "v-nostrat",
         "{\"leaseName\":\"x\",\"binaryVersion\":\"1.36.0\",\"emulationVersion\":\"1.35.0\"}"},
        {"422_badstrat.json", "v-badstrat",
         "{\"leaseName\":\"x\",\"binaryVersion\":\"1.36.0\",\"emulationVersion\":\"1.35.0\","
         "\"strategy\":\"Foo\"}"},
        {"422_noname.json", "v-noname",
         "{\"binaryVersion\":\"1.36.0\",\"emulationVersion\":\"1.35.0\",\"strategy\":"
         "\"OldestEmulationVersion\"}"},
        {"422_noev.json", "v-noev",
         "{\"leaseName\":\"x\",\"binaryVersion\":\"1.36.0\",\"strategy\":"
         "\"OldestEmulationVersion\"}"},
        {"422_badev.json", "v-badev",
         "{\"leaseName\":\"x\",\"binaryVersion\":\"1.36.0\",\"emulationVersion\":\"abc\","
         "\"strategy\":\"OldestEmulationVersion\"}"},
        {"422_badbv.json", "v-badbv",
         "{\"leaseName\":\"x\",\"binaryVersion\":\"1.36\",\"emulationVersion\":\"1.35.0\","
         "\"strategy\":\"OldestEmulationVersion\"}"},
        {"422_lead0.json", "v-lead0",
         "{\"leaseName\":\"x\",\"binaryVersion\":\"1.036.0\",\"emulationVersion\":\"1.35.0\","
         "\"strategy\":\"OldestEmulationVersion\"}"},
        {"422_empty.json", "v-empty", "{}"},
        {"422_abc.json", "v-abc",
         "{\"leaseName\":\"x\",\"binaryVersion\":\"1.36.0\",\"emulationVersion\":\"1.35.0\","
         "\"strategy\":\"a/b/c\"}"},
        {"422_upper.json", "v-upper",
         "{\"leaseName\":\"x\",\"binaryVersion\":\"1.36.0\",\"emulationVersion\":\"1.35.0\","
         "\"strategy\":\"Foo.io/x\"}"},
        {"422_slashend.json", "v-slashend",
         "{\"leaseName\":\"x\",\"binaryVersion\":\"1.36.0\",\"emulationVersion\":\"1.35.0\","
         "\"strategy\":\"foo.io/\"}"},
        {"400_bad_renewtime.json", "v-badrt",
         "{\"leaseName\":\"x\",\"binaryVersion\":\"1.36.0\",\"emulationVersion\":\"1.35.0\","
         "\"strategy\":\"OldestEmulationVersion\",\"renewTime\":\"2026-01-01T00:00:00Z\"}"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        long st;
        char *body = tc_fmt("{\"apiVersion\":\"coordination.k8s.io/v1beta1\",\"kind\":"
                            "\"LeaseCandidate\",\"metadata\":{\"name\":\"%s\"},\"spec\":%s}",
                            cases[i].name, cases[i].spec);
        json_t *got = call(cle, "POST", LCS, NULL, body, &st);
        json_t *want = sample(cases[i].file);
        if (!json_equal(got, want)) {
            char *g = json_dumps(got, JSON_COMPACT), *w = json_dumps(want, JSON_COMPACT);
            fail_msg("%s:\n got  %s\n want %s", cases[i].file, g, w);
        }
        assert_int_equal(st, json_integer_value(tc_at(want, "code")));
        json_decref(got);
        json_decref(want);
        free(body);
    }

    /* Accepted: a prerelease with build metadata, a qualified custom strategy. */
    long st;
    json_decref(call(cle, "POST", LCS, NULL,
                     "{\"metadata\":{\"name\":\"v-pre\"},\"spec\":{\"leaseName\":\"x\","
                     "\"binaryVersion\":\"1.36.0-alpha.1+abc\",\"emulationVersion\":\"1.35.0\","
                     "\"strategy\":\"OldestEmulationVersion\"}}",
                     &st));
    assert_int_equal(st, 201);
    json_decref(call(cle, "POST", LCS, NULL,
                     "{\"metadata\":{\"name\":\"v-custom\"},\"spec\":{\"leaseName\":\"x\","
                     "\"binaryVersion\":\"1.36.0\",\"strategy\":\"foo.io/Bar\"}}",
                     &st));
    assert_int_equal(st, 201);

    /* Another kind, or a wrongly typed field: the decoder's 400s. */
    json_t *j = call(cle, "POST", LCS, NULL,
                     "{\"apiVersion\":\"coordination.k8s.io/v1\",\"kind\":\"Lease\","
                     "\"metadata\":{\"name\":\"wk\"}}",
                     &st);
    assert_int_equal(st, 400);
    assert_string_equal(str(j, "message"),
                        "Lease in version \"v1\" cannot be handled as a LeaseCandidate: converting "
                        "(v1.Lease) to (coordination.LeaseCandidate): unknown conversion");
    json_decref(j);
    j = call(cle, "POST", LCS, NULL, "{\"metadata\":{\"name\":\"wk\"},\"spec\":{\"leaseName\":3}}",
             &st);
    assert_int_equal(st, 400);
    assert_string_equal(str(j, "message"),
                        "LeaseCandidate in version \"v1beta1\" cannot be handled as a "
                        "LeaseCandidate: json: cannot unmarshal number into Go struct field "
                        "LeaseCandidateSpec.spec.leaseName of type string");
    json_decref(j);
}

static void test_cle_crud(void **state)
{
    long st;
    (void)state;
    cle_server();
    /* No renewTime: the controller ignores it (never pinged), as the real one. */
    json_t *c = call(cle, "POST", LCS "?fieldManager=probe", NULL,
                     "{\"apiVersion\":\"coordination.k8s.io/v1beta1\",\"kind\":\"LeaseCandidate\","
                     "\"metadata\":{\"name\":\"c-crud\",\"labels\":{\"x\":\"y\"}},\"spec\":{"
                     "\"strategy\":\"OldestEmulationVersion\",\"emulationVersion\":\"1.36.0\","
                     "\"binaryVersion\":\"1.36.0\",\"leaseName\":\"crud-lease\"}}",
                     &st);
    assert_int_equal(st, 201);
    /* The shape of 201_create.json: Go field order in spec, managedFields. */
    json_t *want = sample("201_create.json");
    const char *k;
    json_t *v;
    const char *order[8];
    size_t n = 0;
    json_object_foreach(tc_at(c, "spec"), k, v) order[n++] = k;
    assert_int_equal(n, 4);
    assert_string_equal(order[0], "leaseName");
    assert_string_equal(order[1], "binaryVersion");
    assert_string_equal(order[3], "strategy");
    assert_true(json_equal(tc_at(c, "metadata.managedFields.0.fieldsV1.f:metadata"),
                           tc_at(want, "metadata.managedFields.0.fieldsV1.f:metadata")));
    assert_string_equal(str(c, "metadata.managedFields.0.apiVersion"),
                        "coordination.k8s.io/v1beta1");
    assert_string_equal(str(c, "kind"), "LeaseCandidate");
    json_decref(want);

    json_t *l = call(cle, "GET", LCS "?fieldSelector=metadata.name%3Dc-crud", NULL, NULL, &st);
    assert_int_equal(st, 200);
    assert_string_equal(str(l, "kind"), "LeaseCandidateList");
    assert_int_equal(json_array_size(tc_at(l, "items")), 1);
    json_decref(l);
    l = call(cle, "GET", LCS "?labelSelector=x%3Dz", NULL, NULL, &st);
    assert_int_equal(json_array_size(tc_at(l, "items")), 0);
    json_decref(l);

    /* PUT: resourceVersion required, leaseName immutable (422_leasename_immutable.json). */
    json_t *put = json_deep_copy(c);
    json_object_del(json_object_get(put, "metadata"), "resourceVersion");
    char *body = json_dumps(put, JSON_COMPACT);
    json_t *e = call(cle, "PUT", LCS "/c-crud", NULL, body, &st);
    assert_int_equal(st, 422);
    assert_string_equal(str(e, "details.kind"), "leasecandidates");
    json_decref(e);
    free(body);
    json_object_set(json_object_get(put, "metadata"), "resourceVersion",
                    tc_at(c, "metadata.resourceVersion"));
    json_object_set_new(json_object_get(put, "spec"), "leaseName", json_string("other"));
    body = json_dumps(put, JSON_COMPACT);
    e = call(cle, "PUT", LCS "/c-crud", NULL, body, &st);
    assert_int_equal(st, 422);
    json_t *imm = sample("422_leasename_immutable.json");
    assert_string_equal(str(e, "details.causes.0.message"), str(imm, "details.causes.0.message"));
    assert_string_equal(str(e, "details.causes.0.field"), "spec.leaseName");
    json_decref(imm);
    json_decref(e);
    free(body);
    json_decref(put);

    /* Merge patch; a watch on the name sees it; delete. */
    patch_spec(LCS, "c-crud", "{\"binaryVersion\":\"1.36.1\"}");
    json_t *g = get_obj(LCS, "c-crud", &st);
    assert_string_equal(str(g, "spec.binaryVersion"), "1.36.1");
    char *wpath = tc_fmt(LCS "?watch=1&fieldSelector=metadata.name%%3Dc-crud&resourceVersion=%s"
                             "&allowWatchBookmarks=true&timeoutSeconds=1",
                         str(c, "metadata.resourceVersion"));
    char *resp = NULL;
    assert_int_equal(ts_request(cle, "GET", wpath, NULL, NULL, &st, &resp), 0);
    assert_int_equal(st, 200);
    assert_non_null(strstr(resp, "\"type\":\"MODIFIED\""));
    assert_non_null(strstr(resp, "\"binaryVersion\":\"1.36.1\""));
    free(resp);
    free(wpath);
    json_decref(g);
    json_t *d = call(cle, "DELETE", LCS "/c-crud", NULL, NULL, &st);
    assert_int_equal(st, 200);
    assert_string_equal(str(d, "details.kind"), "leasecandidates");
    json_decref(d);
    json_decref(get_obj(LCS, "c-crud", &st));
    assert_int_equal(st, 404);
    /* No Lease was made for a candidate without renewTime. */
    json_decref(get_obj(LEASES, "crud-lease", &st));
    assert_int_equal(st, 404);
    json_decref(c);
}

/* Two candidates with old renewTimes, created in the given order: pinged, both answer. */
static void elect_oldest(const char *lease, bool old_first)
{
    char a[64], b[64];
    snprintf(a, sizeof(a), "%s-135", lease);
    snprintf(b, sizeof(b), "%s-136", lease);
    if (old_first)
        json_decref(create_candidate(a, lease, "1.35.0", -60));
    json_decref(create_candidate(b, lease, "1.36.0", -60));
    if (!old_first)
        json_decref(create_candidate(a, lease, "1.35.0", -60));
    /* The controller pings both (at once) and waits for their answers. */
    wait_pinged(a, CLE_WAIT_MS);
    wait_pinged(b, CLE_WAIT_MS);
    ack(b);
    ack(a);
    /* Both keep answering, so a slow machine that misses a ping still converges. */
    const char *const responders[] = {a, b, NULL};
    json_t *l = wait_lease(lease, "holderIdentity", a, responders, CLE_WAIT_MS);
    assert_string_equal(str(l, "spec.strategy"), "OldestEmulationVersion");
    assert_int_equal(json_integer_value(tc_at(l, "spec.leaseDurationSeconds")), 5);
    assert_string_equal(str(l, "metadata.managedFields.0.manager"), "kube-apiserver");
    assert_null(tc_at(l, "spec.acquireTime"));
    json_decref(l);
}

static void test_cle_oldest_emulation_version_wins(void **state)
{
    (void)state;
    cle_server();
    elect_oldest("cle-a", true);
    elect_oldest("cle-b", false);
    /* The ping is the controller's: manager kube-apiserver owns spec.pingTime. */
    long st;
    json_t *c = get_obj(LCS, "cle-b-135", &st);
    json_t *mf = tc_at(c, "metadata.managedFields");
    bool found = false;
    for (size_t i = 0; i < json_array_size(mf); i++)
        if (!strcmp(str(json_array_get(mf, i), "manager"), "kube-apiserver"))
            found = tc_at(json_array_get(mf, i), "fieldsV1.f:spec.f:pingTime") != NULL;
    assert_true(found);
    json_decref(c);
}

static void test_cle_unacked_not_elected(void **state)
{
    long st;
    (void)state;
    cle_server();
    json_decref(create_candidate("silent-135", "cle-silent", "1.35.0", -60));
    json_decref(create_candidate("eager-136", "cle-silent", "1.36.0", -60));
    wait_pinged("silent-135", CLE_WAIT_MS);
    wait_pinged("eager-136", CLE_WAIT_MS);
    /* The better candidate never answers: after the election duration the other wins. */
    static const char *const responders[] = {"eager-136", NULL};
    json_t *l = wait_lease("cle-silent", "holderIdentity", "eager-136", responders, CLE_WAIT_MS);
    /* Not before the silent one's ping had run out. */
    json_t *c = get_obj(LCS, "silent-135", &st);
    assert_true(micros(str(l, "spec.renewTime")) >=
                micros(str(c, "spec.pingTime")) + CLE_ELECTION_MS * 1000LL);
    /* It is not pinged again while its ping is unanswered. */
    assert_true(ping_pending("silent-135"));
    json_decref(c);
    json_decref(l);
}

static void test_cle_expiry_moves_holder(void **state)
{
    (void)state;
    cle_server();
    elect_oldest("cle-exp", true);
    /* cle-exp-135 holds it and stops renewing; cle-exp-136 answers every ping. */
    static const char *const responders[] = {"cle-exp-136", NULL};
    json_t *l = wait_lease("cle-exp", "holderIdentity", "cle-exp-136", responders, CLE_WAIT_MS);
    assert_null(tc_at(l, "spec.preferredHolder"));
    json_decref(l);
}

static void test_cle_preferred_holder(void **state)
{
    (void)state;
    cle_server();
    /* A fresh candidate alone is elected without a ping. */
    json_decref(create_candidate("pref-136", "cle-pref", "1.36.0", 0));
    json_t *l = wait_lease("cle-pref", "holderIdentity", "pref-136", NULL, CLE_WAIT_MS);
    json_decref(l);
    /* The holder renews; a better one arrives: preferredHolder, holder unchanged. */
    char t[32], spec[64];
    microtime(0, t);
    snprintf(spec, sizeof(spec), "{\"renewTime\":\"%s\"}", t);
    patch_spec(LEASES, "cle-pref", spec);
    ack("pref-136");
    json_decref(create_candidate("pref-135", "cle-pref", "1.35.0", 0));
    static const char *const responders[] = {"pref-136", NULL};
    l = wait_lease("cle-pref", "preferredHolder", "pref-135", responders, CLE_WAIT_MS);
    assert_string_equal(str(l, "spec.holderIdentity"), "pref-136");
    assert_string_equal(str(l, "spec.renewTime"), t);
    json_decref(l);
}

static void test_cle_released(void **state)
{
    (void)state;
    cle_server();
    json_decref(create_candidate("rel-136", "cle-rel", "1.36.0", 0));
    json_decref(wait_lease("cle-rel", "holderIdentity", "rel-136", NULL, CLE_WAIT_MS));
    json_decref(create_candidate("rel-135", "cle-rel", "1.35.0", 0));
    json_decref(wait_lease("cle-rel", "preferredHolder", "rel-135", NULL, CLE_WAIT_MS));
    /* The holder releases (holder ""): the best that answers is set at once. */
    static const char *const responders[] = {"rel-135", "rel-136", NULL};
    ack("rel-135");
    ack("rel-136");
    patch_spec(LEASES, "cle-rel", "{\"holderIdentity\":\"\"}");
    json_t *l = wait_lease("cle-rel", "holderIdentity", "rel-135", responders, CLE_WAIT_MS);
    assert_null(tc_at(l, "spec.preferredHolder"));
    json_decref(l);
}

static void test_cle_kubectl_and_restart(void **state)
{
    long st;
    int rc;
    (void)state;
    cle_server();
    json_decref(create_candidate("kube-cand", "cle-kube", "1.36.0", -3600));
    if (access("/usr/bin/kubectl", X_OK) == 0) {
        const char *kc = ts_kubeconfig(cle), *dir = ts_dir(cle);
        char *out = tc_run(&rc, KUBECTL "get leasecandidates 2>&1", kc, dir);
        assert_int_equal(rc, 0);
        assert_non_null(strstr(out, "LEASENAME"));
        assert_non_null(strstr(out, "EMULATIONVERSION"));
        assert_non_null(strstr(out, "kube-cand"));
        free(out);
        out = tc_run(&rc, KUBECTL "get leasecandidate kube-cand -o yaml 2>&1", kc, dir);
        assert_int_equal(rc, 0);
        assert_non_null(strstr(out, "kind: LeaseCandidate"));
        assert_non_null(strstr(out, "leaseName: cle-kube"));
        free(out);
    } else {
        print_message("kubectl not installed: skipping its LeaseCandidate checks\n");
    }
    /* Restarts keep or lose candidates as they do Leases; the controller runs again. */
    assert_int_equal(ts_restart(cle, true, 0), 0);
    json_decref(get_obj(LCS, "kube-cand", &st));
    assert_int_equal(st, 200);
    json_decref(create_candidate("after-restart", "cle-after", "1.36.0", 0));
    json_decref(wait_lease("cle-after", "holderIdentity", "after-restart", NULL, CLE_WAIT_MS));
    assert_int_equal(ts_restart(cle, false, 0), 0);
    json_decref(get_obj(LCS, "kube-cand", &st));
    assert_int_equal(st, 404);
    assert_int_equal(ts_stop(cle), 0);
    cle = NULL;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lease_crud),
        cmocka_unit_test(test_namespaces),
        cmocka_unit_test(test_put_missing_creates),
        cmocka_unit_test(test_validation),
        cmocka_unit_test(test_sample_bodies),
        cmocka_unit_test(test_auth),
        cmocka_unit_test(test_watch_order),
        cmocka_unit_test(test_watch_initial_and_resume),
        cmocka_unit_test(test_watch_compacted),
        cmocka_unit_test(test_watch_bookmarks),
        cmocka_unit_test(test_watch_client_gone),
        cmocka_unit_test(test_watch_quiet_stream_survives),
        cmocka_unit_test(test_discovery),
        cmocka_unit_test(test_pods_labels),
        cmocka_unit_test(test_pod_status),
        cmocka_unit_test(test_pod_status_transitions),
        cmocka_unit_test(test_fault_errors),
        cmocka_unit_test(test_fault_reset_latency_hang),
        cmocka_unit_test(test_fault_goaway),
        cmocka_unit_test(test_fault_client_scope),
        cmocka_unit_test(test_fault_watch_freeze_and_close),
        cmocka_unit_test(test_token_rotation),
        cmocka_unit_test(test_restart),
        cmocka_unit_test(test_kubectl),
        cmocka_unit_test(test_cle_gate_off),
        cmocka_unit_test(test_cle_validation),
        cmocka_unit_test(test_cle_crud),
        cmocka_unit_test(test_cle_oldest_emulation_version_wins),
        cmocka_unit_test(test_cle_unacked_not_elected),
        cmocka_unit_test(test_cle_expiry_moves_holder),
        cmocka_unit_test(test_cle_preferred_holder),
        cmocka_unit_test(test_cle_released),
        cmocka_unit_test(test_cle_kubectl_and_restart),
        cmocka_unit_test(test_load_10k),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
