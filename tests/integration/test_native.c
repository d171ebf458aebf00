/* The native HTTP/2 transport (core/native.c over core/h2.c,
 * K8SLEASE_TRANSPORT=native) driven through kl__http_* against
 * k8slease-testserver, which speaks TLS + HTTP/2 (nghttp2) as a real
 * kube-apiserver does. tests/unit/test_http.c covers the same API against
 * its fake server, over HTTP/2 and HTTP/1.1.
 *
 * Cases: the transport in use and one connection for 50 requests at once;
 * answers (status, body, content type) of GET/POST/PUT/DELETE, 400, 404,
 * 409; watch streams (on_open, on_data, non-200 collected, aborted by the
 * reader, idle timeout, a clean end); faults (hang -> timeout and a new
 * connection, stall -> a hedge on a new native connection answers, reset, a huge body,
 * GOAWAY, a restart); a 401 after a token rotation, retried; connection
 * refused, a wrong CA, a handshake never answered; the fallback to libcurl
 * when the server offers no h2; cancel (also mid-upload) and free with
 * requests in flight. Then what libcurl does and the native transport must
 * too: the server's stream limit, client certificates, tls-server-name,
 * IPv6, a body larger than a stream window, a raw Authorization header, a
 * hedge outliving its failed original, requests beside 100 watches.
 *
 * ctest sets K8SLEASE_TRANSPORT=native (tests/integration/CMakeLists.txt);
 * run by hand, the suite sets it itself. Every wait is bounded (WAIT_MS)
 * and fails with a message; nothing sleeps to synchronise: the tests wait
 * for the loop's callbacks or poll the server's stats (tsclient.h). */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <setjmp.h>
#include <cmocka.h>

#include <jansson.h>

#include "core/http.h"
#include "k8s/kubeconfig.h"
#include "harness.h"
#include "testlib.h"
#include "tsclient.h"

#define WAIT_MS  10000
#define NRESULTS 128
#define NMANY    50
/* Requests of this suite carry this in their User-Agent: fault rules are
 * scoped to it, so the harness's own control requests are never hit. */
#define AGENT  "test-native"
#define LEASES "/apis/coordination.k8s.io/v1/namespaces/default/leases"
/* Bookmarks every 50 ms on watches that ask for them: a live stream is
 * never quiet for the 500 ms idle timeout of test_stream_idle_timeout. */
#define BOOKMARK_MS "50"

/* ------------------------------------------------------------------------ */
/* State shared with the loop thread                                        */
/* ------------------------------------------------------------------------ */

typedef struct result {
    int done_calls;
    int err, unsent;
    char errmsg[1024];
    long status;
    char *body; /* malloc'ed, freed by setup and teardown */
    size_t body_len;
    char content_type[128];
    /* streams */
    int open_calls;
    int data_before_open;
    int data_calls;
    char data[16384]; /* the first bytes of the stream */
    size_t data_len;
    int abort_with;   /* on_data returns this */
    int data_at_done; /* data_calls when done was called */
} result;

/* Everything the loop thread touches lives here, not on a test's stack: a
 * failed assertion longjmps out while the loop may still run. */
static struct {
    ts_server *srv;   /* h2, bookmarks every BOOKMARK_MS */
    ts_server *other; /* a test's own server (test_fallback_to_libcurl) */
    kl__loop *loop;
    kl__restconfig *cfg;
    result r[NRESULTS];
    pthread_mutex_t mu;
    pthread_cond_t cond;
    kl__log log;
    char logs[65536];
    int mute_fd;    /* test_connect_timeout's listener, -1: none */
    char *mute_url; /* its URL */
} T;

static void on_log(k8slease_log_level level, const char *msg, void *arg)
{
    size_t len;

    (void)level;
    (void)arg;
    pthread_mutex_lock(&T.mu);
    len = strlen(T.logs);
    snprintf(T.logs + len, sizeof(T.logs) - len, "%s\n", msg);
    pthread_mutex_unlock(&T.mu);
}

static void on_done(const kl__http_result *res, void *arg)
{
    result *r = arg;
    char *body = malloc(res->body_len + 1);

    if (body) {
        memcpy(body, res->body, res->body_len);
        body[res->body_len] = '\0';
    }
    pthread_mutex_lock(&T.mu);
    r->done_calls++;
    r->data_at_done = r->data_calls;
    r->err = res->err;
    r->unsent = res->unsent;
    snprintf(r->errmsg, sizeof(r->errmsg), "%s", res->errmsg ? res->errmsg : "(null)");
    r->status = res->status;
    free(r->body);
    r->body = body ? body : strdup("(out of memory)");
    r->body_len = res->body_len;
    snprintf(r->content_type, sizeof(r->content_type), "%s",
             res->content_type ? res->content_type : "(null)");
    pthread_cond_broadcast(&T.cond);
    pthread_mutex_unlock(&T.mu);
}

static int on_data(const char *data, size_t len, void *arg)
{
    result *r = arg;
    size_t room;
    int rc;

    pthread_mutex_lock(&T.mu);
    r->data_before_open += r->open_calls == 0;
    r->data_calls++;
    room = sizeof(r->data) - 1 - r->data_len;
    if (len < room)
        room = len;
    memcpy(r->data + r->data_len, data, room);
    r->data_len += room;
    r->data[r->data_len] = '\0';
    rc = r->abort_with;
    pthread_cond_broadcast(&T.cond);
    pthread_mutex_unlock(&T.mu);
    return rc;
}

static void on_open(void *arg)
{
    result *r = arg;

    pthread_mutex_lock(&T.mu);
    r->open_calls++;
    pthread_cond_broadcast(&T.cond);
    pthread_mutex_unlock(&T.mu);
}

/* ------------------------------------------------------------------------ */
/* Driving the loop                                                         */
/* ------------------------------------------------------------------------ */

typedef struct start_args {
    const kl__http_opts *opts; /* n of them */
    result **r;
    kl__http_req **req;
    size_t n;
} start_args;

/* Loop thread: start them all in one iteration. */
static void do_start(void *arg)
{
    start_args *s = arg;

    for (size_t i = 0; i < s->n; i++)
        s->req[i] = kl__http_start(T.loop, &s->opts[i], on_done, s->r[i]);
}

static kl__http_req *start(const kl__http_opts *opts, result *r)
{
    kl__http_req *req = NULL;
    start_args s = {opts, &r, &req, 1};

    assert_int_equal(kl__loop_call(T.loop, do_start, &s), 0);
    if (!req)
        fail_msg("kl__http_start %s %s: NULL", opts->method, opts->path);
    return req;
}

static void do_cancel(void *arg)
{
    kl__http_cancel(T.loop, arg);
}

typedef struct loop_facts {
    const char *transport;
    uint64_t h2, abandoned, hedges_won;
} loop_facts;

static void do_facts(void *arg)
{
    loop_facts *f = arg;

    f->transport = kl__loop_transport(T.loop);
    f->h2 = kl__loop_h2_connections(T.loop);
    f->abandoned = kl__loop_abandoned(T.loop);
    f->hedges_won = kl__loop_hedges_won(T.loop);
}

static loop_facts facts(void)
{
    loop_facts f = {0};

    assert_int_equal(kl__loop_call(T.loop, do_facts, &f), 0);
    return f;
}

static struct timespec deadline_after(int ms)
{
    return tc_deadline_in(CLOCK_MONOTONIC, ms);
}

/* Wait (at most WAIT_MS) until *count >= want; what names it in the message. */
static void wait_count(const int *count, int want, const char *what)
{
    struct timespec until = deadline_after(WAIT_MS);
    int got, rc = 0;

    pthread_mutex_lock(&T.mu);
    while (*count < want && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&T.cond, &T.mu, &until);
    got = *count;
    pthread_mutex_unlock(&T.mu);
    if (got < want)
        fail_msg("%s: %d, not %d, after %d ms", what, got, want, WAIT_MS);
}

static void wait_done(result *r, const char *what)
{
    wait_count(&r->done_calls, 1, what);
}

/* Wait (at most WAIT_MS) until the stream's bytes hold needle. */
static void wait_data(result *r, const char *needle)
{
    struct timespec until = deadline_after(WAIT_MS);
    int found, rc = 0;

    pthread_mutex_lock(&T.mu);
    while (!strstr(r->data, needle) && !r->done_calls && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&T.cond, &T.mu, &until);
    found = strstr(r->data, needle) != NULL;
    pthread_mutex_unlock(&T.mu);
    if (!found)
        fail_msg("the stream did not bring \"%s\" within %d ms (done %d: %d %s); it brought: %s",
                 needle, WAIT_MS, r->done_calls, r->err, r->errmsg, r->data);
}

/* Whether the loop logged a line holding needle. */
static int logged(const char *needle)
{
    int found;

    pthread_mutex_lock(&T.mu);
    found = strstr(T.logs, needle) != NULL;
    pthread_mutex_unlock(&T.mu);
    return found;
}

static int count_of(const int *count)
{
    int n;

    pthread_mutex_lock(&T.mu);
    n = *count;
    pthread_mutex_unlock(&T.mu);
    return n;
}

/* A collected request with a timeout, started and awaited. */
static void run(result *r, const char *method, const char *path, const char *body)
{
    kl__http_opts o = {0};

    o.method = method;
    o.path = path;
    o.timeout_ms = WAIT_MS;
    if (body) {
        o.body = body;
        o.body_len = strlen(body);
        o.content_type = "application/json";
    }
    start(&o, r);
    wait_done(r, path);
}

/* The request got an HTTP answer with this status. */
static void expect_status(const result *r, long status)
{
    if (r->err)
        fail_msg("expected HTTP %ld, got error %d: %s", status, r->err, r->errmsg);
    if (r->status != status)
        fail_msg("expected HTTP %ld, got %ld: %s", status, r->status, r->body);
    assert_int_equal(r->done_calls, 1);
}

/* The request failed with err, its message holding needle. */
static void expect_error(const result *r, int err, const char *needle)
{
    if (r->err != err)
        fail_msg("expected error %d (\"%s\"), got %d (HTTP %ld): %s", err, needle, r->err,
                 r->status, r->err ? r->errmsg : r->body);
    if (!strstr(r->errmsg, needle))
        fail_msg("\"%s\" not in the message: %s", needle, r->errmsg);
    assert_int_equal(r->done_calls, 1);
}

/* The JSON body of an answer (json_decref it). */
static json_t *body_json(const result *r)
{
    json_error_t e;
    json_t *j = json_loads(r->body, 0, &e);

    if (!j)
        fail_msg("not JSON (%s): %.200s", e.text, r->body);
    return j;
}

static const char *json_str(json_t *j, const char *path)
{
    const char *s = json_string_value(tc_at(j, path));

    if (!s)
        fail_msg("no string at %s", path);
    return s ? s : ""; /* fail_msg does not return; the compiler cannot tell */
}

static char *lease_json(const char *name, const char *holder, const char *rv)
{
    return tc_fmt("{\"apiVersion\":\"coordination.k8s.io/v1\",\"kind\":\"Lease\","
                  "\"metadata\":{\"name\":\"%s\"%s%s%s},"
                  "\"spec\":{\"holderIdentity\":\"%s\",\"leaseDurationSeconds\":15}}",
                  name, rv ? ",\"resourceVersion\":\"" : "", rv ? rv : "", rv ? "\"" : "", holder);
}

/* Create Lease name (201). */
static void create_lease(result *r, const char *name)
{
    char *body = lease_json(name, "holder-1", NULL);

    run(r, "POST", LEASES, body);
    free(body);
    expect_status(r, 201);
}

/* A fault rule for this suite's requests (201). */
static void add_fault(ts_server *s, const char *json)
{
    tc_control(s, "POST", "/testserver/v1/faults", json, 201);
}

/* A loop over the server's kubeconfig (kubeconfig, kubeconfig-tokenfile,
 * ...), with cfg changed by edit when not NULL. */
static void loop_start(ts_server *s, const char *kubeconfig, void (*edit)(kl__restconfig *cfg))
{
    char *path = tc_fmt("%s/%s", ts_dir(s), kubeconfig);
    int err = kl__restconfig_load(&T.cfg, path, NULL);

    free(path);
    if (err)
        fail_msg("%s", kl__error_get());
    if (edit)
        edit(T.cfg);
    if (kl__loop_new(&T.loop, T.cfg, &T.log, AGENT) != 0)
        fail_msg("kl__loop_new: %s", kl__error_get());
}

/* ------------------------------------------------------------------------ */
/* Fixtures                                                                 */
/* ------------------------------------------------------------------------ */

static void results_clear(void)
{
    for (int i = 0; i < NRESULTS; i++)
        free(T.r[i].body);
    memset(T.r, 0, sizeof(T.r));
}

static int setup(void **state)
{
    (void)state;
    results_clear();
    T.logs[0] = '\0';
    /* A clean server: no objects, no rules, no counters, and no watch of
     * an earlier test's loop (the tests count open watches). */
    tc_control(T.srv, "POST", "/testserver/v1/reset", "{}", 200);
    tc_wait_stat_at_most(T.srv, "watches.open", 0, WAIT_MS);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    /* The loop first: it closes its connections and calls nothing more. */
    kl__loop_free(T.loop);
    T.loop = NULL;
    kl__restconfig_free(T.cfg);
    T.cfg = NULL;
    ts_stop(T.other);
    T.other = NULL;
    if (T.mute_fd >= 0)
        close(T.mute_fd);
    T.mute_fd = -1;
    free(T.mute_url);
    T.mute_url = NULL;
    results_clear();
    return 0;
}

static int group_setup(void **state)
{
    static const char *const args[] = {"--bookmark-interval", BOOKMARK_MS, NULL};
    pthread_condattr_t attr;
    const char *mode = getenv("K8SLEASE_TRANSPORT");

    (void)state;
    /* ctest sets it; by hand, this suite asks for it itself. */
    if (!mode)
        setenv("K8SLEASE_TRANSPORT", "native", 1);
    else if (strcmp(mode, "native") != 0) {
        fprintf(stderr, "K8SLEASE_TRANSPORT=%s: this suite tests the native transport\n", mode);
        return -1;
    }
    pthread_mutex_init(&T.mu, NULL);
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&T.cond, &attr);
    pthread_condattr_destroy(&attr);
    T.log.cb = on_log;
    T.log.level = K8SLEASE_LOG_DEBUG;
    T.mute_fd = -1;
    return ts_start(&T.srv, args);
}

static int group_teardown(void **state)
{
    (void)state;
    return ts_stop(T.srv) == 0 ? 0 : -1;
}

/* ------------------------------------------------------------------------ */
/* 1. The transport in use                                                  */
/* ------------------------------------------------------------------------ */

/* A GET goes over one native connection; 50 requests started at once (GETs
 * and POSTs creating Leases) share it. */
static void test_transport_in_use(void **state)
{
    kl__http_opts o[NMANY];
    result *rs[NMANY];
    kl__http_req *reqs[NMANY];
    char *bodies[NMANY] = {0}, path[256];
    start_args s = {o, rs, reqs, NMANY};
    loop_facts f;
    json_t *j;

    (void)state;
    loop_start(T.srv, "kubeconfig", NULL);
    run(&T.r[0], "GET", LEASES, NULL);
    expect_status(&T.r[0], 200);
    f = facts();
    assert_string_equal(f.transport, "native");
    assert_int_equal(f.h2, 1);
    assert_true(logged("a new HTTP/2 connection (native)"));

    memset(o, 0, sizeof(o));
    for (int i = 0; i < NMANY; i++) {
        rs[i] = &T.r[i + 1];
        o[i].timeout_ms = WAIT_MS;
        if (i % 2) {
            snprintf(path, sizeof(path), "many-%02d", i);
            bodies[i] = lease_json(path, "holder-1", NULL);
            o[i].method = "POST";
            o[i].path = LEASES;
            o[i].content_type = "application/json";
            o[i].body = bodies[i];
            o[i].body_len = strlen(bodies[i]);
        } else {
            o[i].method = "GET";
            o[i].path = LEASES;
        }
    }
    assert_int_equal(kl__loop_call(T.loop, do_start, &s), 0);
    for (int i = 0; i < NMANY; i++)
        free(bodies[i]);
    for (int i = 0; i < NMANY; i++) {
        assert_non_null(reqs[i]);
        wait_done(rs[i], o[i].method);
        expect_status(rs[i], i % 2 ? 201 : 200);
    }
    f = facts();
    assert_string_equal(f.transport, "native");
    assert_int_equal(f.h2, 1);

    /* The POSTs created what they said. */
    run(&T.r[NMANY + 1], "GET", LEASES, NULL);
    expect_status(&T.r[NMANY + 1], 200);
    j = body_json(&T.r[NMANY + 1]);
    assert_int_equal(json_array_size(tc_at(j, "items")), NMANY / 2);
    json_decref(j);
}

/* ------------------------------------------------------------------------ */
/* 2. Answers                                                               */
/* ------------------------------------------------------------------------ */

static void expect_json_answer(const result *r, long status)
{
    expect_status(r, status);
    if (strncmp(r->content_type, "application/json", 16) != 0)
        fail_msg("content type \"%s\"", r->content_type);
}

static void test_answers(void **state)
{
    char *body, rv1[32];
    json_t *j;

    (void)state;
    loop_start(T.srv, "kubeconfig", NULL);

    /* POST: 201 with the Lease. */
    body = lease_json("crud", "holder-1", NULL);
    run(&T.r[0], "POST", LEASES, body);
    free(body);
    expect_json_answer(&T.r[0], 201);
    assert_int_equal(T.r[0].body_len, strlen(T.r[0].body));
    j = body_json(&T.r[0]);
    assert_string_equal(json_str(j, "metadata.name"), "crud");
    assert_string_equal(json_str(j, "spec.holderIdentity"), "holder-1");
    snprintf(rv1, sizeof(rv1), "%s", json_str(j, "metadata.resourceVersion"));
    json_decref(j);

    /* GET: 200, the same Lease. */
    run(&T.r[1], "GET", LEASES "/crud", NULL);
    expect_json_answer(&T.r[1], 200);
    j = body_json(&T.r[1]);
    assert_string_equal(json_str(j, "kind"), "Lease");
    assert_string_equal(json_str(j, "metadata.resourceVersion"), rv1);
    json_decref(j);

    /* PUT with its resourceVersion: 200, a new version. */
    body = lease_json("crud", "holder-2", rv1);
    run(&T.r[2], "PUT", LEASES "/crud", body);
    expect_json_answer(&T.r[2], 200);
    j = body_json(&T.r[2]);
    assert_string_equal(json_str(j, "spec.holderIdentity"), "holder-2");
    assert_string_not_equal(json_str(j, "metadata.resourceVersion"), rv1);
    json_decref(j);

    /* PUT with the old one again: 409 Conflict, the Status as the body. */
    run(&T.r[3], "PUT", LEASES "/crud", body);
    free(body);
    expect_json_answer(&T.r[3], 409);
    j = body_json(&T.r[3]);
    assert_string_equal(json_str(j, "kind"), "Status");
    assert_string_equal(json_str(j, "reason"), "Conflict");
    json_decref(j);

    /* POST of an existing name: 409 AlreadyExists. */
    body = lease_json("crud", "holder-3", NULL);
    run(&T.r[4], "POST", LEASES, body);
    free(body);
    expect_json_answer(&T.r[4], 409);
    j = body_json(&T.r[4]);
    assert_string_equal(json_str(j, "reason"), "AlreadyExists");
    json_decref(j);

    /* POST without a body (an empty DATA frame): the server's 400. */
    run(&T.r[7], "POST", LEASES, NULL);
    expect_json_answer(&T.r[7], 400);
    j = body_json(&T.r[7]);
    assert_string_equal(json_str(j, "reason"), "BadRequest");
    json_decref(j);

    /* DELETE: 200 with a Success Status; then GET: 404 NotFound. */
    run(&T.r[5], "DELETE", LEASES "/crud", NULL);
    expect_json_answer(&T.r[5], 200);
    j = body_json(&T.r[5]);
    assert_string_equal(json_str(j, "status"), "Success");
    json_decref(j);
    run(&T.r[6], "GET", LEASES "/crud", NULL);
    expect_json_answer(&T.r[6], 404);
    j = body_json(&T.r[6]);
    assert_string_equal(json_str(j, "reason"), "NotFound");
    assert_non_null(strstr(json_str(j, "message"), "\"crud\" not found"));
    json_decref(j);

    assert_string_equal(facts().transport, "native");
    assert_int_equal(facts().h2, 1);
}

/* ------------------------------------------------------------------------ */
/* 3, 4, 7. Streams                                                         */
/* ------------------------------------------------------------------------ */

static kl__http_req *start_watch(result *r, const char *path, int64_t idle_ms)
{
    kl__http_opts o = {0};

    o.method = "GET";
    o.path = path;
    o.on_data = on_data;
    o.on_open = on_open;
    o.idle_timeout_ms = idle_ms;
    return start(&o, r);
}

/* on_open once, then the events of the Lease's changes through on_data;
 * the requests that change it share the stream's connection. */
static void test_watch(void **state)
{
    result *w = &T.r[0];
    kl__http_req *req;
    char *body, rv[32];
    json_t *j;

    (void)state;
    loop_start(T.srv, "kubeconfig", NULL);
    create_lease(&T.r[1], "watched");
    j = body_json(&T.r[1]);
    snprintf(rv, sizeof(rv), "%s", json_str(j, "metadata.resourceVersion"));
    json_decref(j);

    req = start_watch(w, LEASES "?watch=1&fieldSelector=metadata.name%3Dwatched", WAIT_MS);
    wait_count(&w->open_calls, 1, "on_open calls");
    /* Without a resourceVersion the current object comes first. */
    wait_data(w, "\"type\":\"ADDED\"");
    assert_non_null(strstr(w->data, "\"watched\""));

    body = lease_json("watched", "holder-2", rv);
    run(&T.r[2], "PUT", LEASES "/watched", body);
    free(body);
    expect_status(&T.r[2], 200);
    wait_data(w, "\"type\":\"MODIFIED\"");
    wait_data(w, "\"holderIdentity\":\"holder-2\"");

    run(&T.r[3], "DELETE", LEASES "/watched", NULL);
    expect_status(&T.r[3], 200);
    wait_data(w, "\"type\":\"DELETED\"");

    pthread_mutex_lock(&T.mu);
    assert_int_equal(w->open_calls, 1);
    assert_int_equal(w->data_before_open, 0);
    assert_int_equal(w->done_calls, 0);
    pthread_mutex_unlock(&T.mu);
    assert_int_equal(facts().h2, 1);
    assert_int_equal(tc_stat_int(T.srv, "watches.open"), 1);

    /* Cancelled: the stream is reset, and the server sees it end. */
    assert_int_equal(kl__loop_call(T.loop, do_cancel, req), 0);
    tc_wait_stat_at_most(T.srv, "watches.open", 0, WAIT_MS);
    assert_int_equal(count_of(&w->done_calls), 0);
}

/* A stream answered other than 200 is collected and passed to done; no
 * on_open, no on_data. */
static void test_watch_not_200(void **state)
{
    result *bad_rv = &T.r[0], *missing = &T.r[1];

    (void)state;
    loop_start(T.srv, "kubeconfig", NULL);
    start_watch(bad_rv, LEASES "?watch=1&resourceVersion=abc", WAIT_MS);
    start_watch(missing, "/apis/coordination.k8s.io/v1/namespaces/default/nosuchthings?watch=1",
                WAIT_MS);
    wait_done(bad_rv, "watch with a bad resourceVersion");
    wait_done(missing, "watch of a missing resource");

    expect_status(bad_rv, 400);
    assert_non_null(strstr(bad_rv->body, "invalid resource version: abc"));
    assert_string_equal(bad_rv->content_type, "application/json");
    expect_status(missing, 404);
    assert_non_null(strstr(missing->body, "\"reason\":\"NotFound\""));
    for (int i = 0; i < 2; i++) {
        assert_int_equal(T.r[i].open_calls, 0);
        assert_int_equal(T.r[i].data_calls, 0);
    }
    assert_string_equal(facts().transport, "native");
}

/* on_data returning nonzero ends the stream with that code in done; the
 * stream is reset (the server sees it end), the connection goes on. */
static void test_stream_abort(void **state)
{
    enum { READER_ERR = -777 };
    result *w = &T.r[0];

    (void)state;
    loop_start(T.srv, "kubeconfig", NULL);
    create_lease(&T.r[1], "abort");
    w->abort_with = READER_ERR;
    start_watch(w, LEASES "?watch=1", WAIT_MS);
    wait_done(w, "aborted stream");
    expect_error(w, READER_ERR, "stream ended by its reader");
    assert_non_null(strstr(w->errmsg, LEASES));
    assert_int_equal(w->open_calls, 1);
    assert_int_equal(w->data_calls, 1);
    assert_non_null(strstr(w->data, "\"type\":\"ADDED\""));
    tc_wait_stat_at_most(T.srv, "watches.open", 0, WAIT_MS);

    run(&T.r[2], "GET", LEASES "/abort", NULL);
    expect_status(&T.r[2], 200);
    assert_int_equal(facts().h2, 1);
}

/* A live stream (bookmarks every BOOKMARK_MS) frozen by the server ends
 * with ETIMEOUT after idle_timeout_ms without a byte. */
static void test_stream_idle_timeout(void **state)
{
    result *w = &T.r[0];
    loop_facts f;

    (void)state;
    loop_start(T.srv, "kubeconfig", NULL);
    start_watch(w, LEASES "?watch=1&allowWatchBookmarks=true", 500);
    wait_count(&w->open_calls, 1, "on_open calls");
    wait_data(w, "\"type\":\"BOOKMARK\"");
    assert_int_equal(count_of(&w->done_calls), 0);

    add_fault(T.srv, "{\"kind\":\"freeze_watch\",\"match\":{\"user_agent\":\"" AGENT "\"}}");
    wait_done(w, "frozen stream");
    expect_error(w, K8SLEASE_ETIMEOUT, "timeout: no data for 500 ms");
    assert_non_null(strstr(w->errmsg, ts_url(T.srv)));
    f = facts();
    assert_int_equal(f.abandoned, 1);
    assert_string_equal(f.transport, "native");
}

/* ------------------------------------------------------------------------ */
/* 5, 6, 8, 9. Faults                                                       */
/* ------------------------------------------------------------------------ */

/* A held request times out; its connection is abandoned and the next
 * request opens a new one. */
static void test_timeout(void **state)
{
    kl__http_opts o = {0};
    long long t0, elapsed;
    loop_facts f;

    (void)state;
    loop_start(T.srv, "kubeconfig", NULL);
    run(&T.r[0], "GET", LEASES, NULL);
    expect_status(&T.r[0], 200);
    add_fault(T.srv, "{\"kind\":\"hang\",\"match\":{\"path_prefix\":\"" LEASES "/hung\"}}");

    o.method = "GET";
    o.path = LEASES "/hung";
    o.timeout_ms = 300;
    t0 = tc_now_ms();
    start(&o, &T.r[1]);
    wait_done(&T.r[1], "held request");
    elapsed = tc_now_ms() - t0;
    expect_error(&T.r[1], K8SLEASE_ETIMEOUT, "timeout");
    assert_non_null(strstr(T.r[1].errmsg, LEASES "/hung"));
    /* Not before its time (the upper bound is WAIT_MS). */
    if (elapsed < 250)
        fail_msg("timed out after %lld ms, before its 300", elapsed);
    f = facts();
    assert_int_equal(f.abandoned, 1);
    assert_int_equal(f.h2, 1);

    run(&T.r[2], "GET", LEASES, NULL);
    expect_status(&T.r[2], 200);
    f = facts();
    assert_int_equal(f.h2, 2);
    assert_string_equal(f.transport, "native");
    assert_true(logged("abandoned; the next requests open a new one"));
}

/* The connection stalls (a hung replica): the request's copy, sent on a
 * new native connection after hedge_ms, answers for it; that connection
 * carries the next request. */
static void test_hedge(void **state)
{
    kl__http_opts o = {0};
    loop_facts f;
    json_t *j;

    (void)state;
    loop_start(T.srv, "kubeconfig", NULL);
    create_lease(&T.r[0], "hedged");
    add_fault(T.srv, "{\"kind\":\"stall\",\"count\":1,\"match\":{\"path_prefix\":\"" LEASES
                     "/hedged\",\"user_agent\":\"" AGENT "\"}}");

    o.method = "GET";
    o.path = LEASES "/hedged";
    o.timeout_ms = 5000;
    o.hedge_ms = 200;
    start(&o, &T.r[1]);
    wait_done(&T.r[1], "hedged request");
    expect_status(&T.r[1], 200);
    j = body_json(&T.r[1]);
    assert_string_equal(json_str(j, "metadata.name"), "hedged");
    json_decref(j);
    f = facts();
    assert_int_equal(f.hedges_won, 1);
    assert_int_equal(f.abandoned, 1);
    assert_int_equal(tc_stat_int(T.srv, "faults.stall"), 1);
    /* The stalled connection was closed, not just forgotten. */
    tc_wait_stat_at_most(T.srv, "connections.stalled", 0, WAIT_MS);

    run(&T.r[2], "GET", LEASES "/hedged", NULL);
    expect_status(&T.r[2], 200);
    f = facts();
    assert_string_equal(f.transport, "native");
    assert_int_equal(f.h2, 2);
    assert_int_equal(count_of(&T.r[1].done_calls), 1);
}

/* A reset stream (RST_STREAM over h2) fails its request only. */
static void test_reset(void **state)
{
    (void)state;
    loop_start(T.srv, "kubeconfig", NULL);
    run(&T.r[0], "GET", LEASES, NULL);
    expect_status(&T.r[0], 200);
    add_fault(T.srv,
              "{\"kind\":\"reset\",\"count\":1,\"match\":{\"path_prefix\":\"" LEASES "/reset\"}}");

    run(&T.r[1], "GET", LEASES "/reset", NULL);
    expect_error(&T.r[1], K8SLEASE_ETRANSPORT, ts_url(T.srv));
    assert_int_equal(tc_stat_int(T.srv, "faults.reset"), 1);

    run(&T.r[2], "GET", LEASES, NULL);
    expect_status(&T.r[2], 200);
    /* Over HTTP/2 the stream was reset, not the connection. */
    assert_int_equal(facts().h2, 1);
}

/* A body over 16 MiB ends the request with EPROTOCOL; the next one is
 * answered. */
static void test_body_cap(void **state)
{
    (void)state;
    loop_start(T.srv, "kubeconfig", NULL);
    add_fault(T.srv, "{\"kind\":\"respond\",\"count\":1,\"size\":20971520,"
                     "\"body\":\"{\\\"kind\\\":\\\"Lease\\\"}\","
                     "\"match\":{\"path_prefix\":\"" LEASES "/huge\"}}");
    run(&T.r[0], "GET", LEASES "/huge", NULL);
    expect_error(&T.r[0], K8SLEASE_EPROTOCOL, "larger than 16 MiB");
    assert_non_null(strstr(T.r[0].errmsg, LEASES "/huge"));
    assert_int_equal(tc_stat_int(T.srv, "faults.respond"), 1);

    run(&T.r[1], "GET", LEASES, NULL);
    expect_status(&T.r[1], 200);
    assert_string_equal(facts().transport, "native");
}

/* ------------------------------------------------------------------------ */
/* 10. Credentials                                                          */
/* ------------------------------------------------------------------------ */

/* The token rotates (the server rewrites DIR/token): the next request gets
 * 401, the loop re-reads the token file and the retry is answered. */
static void test_token_rotation(void **state)
{
    long long unauthorized;
    char *token;

    (void)state;
    loop_start(T.srv, "kubeconfig-tokenfile", NULL);
    assert_non_null(T.cfg->token_file);
    run(&T.r[0], "GET", LEASES, NULL);
    expect_status(&T.r[0], 200);
    unauthorized = tc_stat_or0(T.srv, "requests.by_status.401");

    tc_control(T.srv, "POST", "/testserver/v1/token", "{}", 200);
    run(&T.r[1], "GET", LEASES, NULL);
    expect_status(&T.r[1], 200);
    /* One 401, then the retry with the new token. */
    assert_int_equal(tc_stat_or0(T.srv, "requests.by_status.401"), unauthorized + 1);
    assert_true(logged("HTTP 401; retrying with fresh credentials"));
    assert_int_equal(facts().h2, 1);
    token = ts_token(T.srv);
    assert_non_null(token);
    assert_false(logged(token));
    free(token);
}

/* ------------------------------------------------------------------------ */
/* 11. Connections that fail                                                */
/* ------------------------------------------------------------------------ */

static void to_closed_port(kl__restconfig *cfg)
{
    char *url = tc_fmt("https://127.0.0.1:%d", kl_test_closed_port());

    kl__free(cfg->server);
    assert_non_null(cfg->server = kl__strdup(url));
    free(url);
}

static void test_connection_refused(void **state)
{
    (void)state;
    loop_start(T.srv, "kubeconfig", to_closed_port);
    assert_string_equal(facts().transport, "native");
    run(&T.r[0], "GET", LEASES, NULL);
    expect_error(&T.r[0], K8SLEASE_ETRANSPORT, ": connect: ");
    assert_non_null(strstr(T.r[0].errmsg, T.cfg->server));
    assert_true(T.r[0].unsent);
    assert_int_equal(T.r[0].status, 0);
}

static void to_other_ca(kl__restconfig *cfg)
{
    size_t len;
    char *pem = kl_test_read_data("tls", "other-ca.crt", &len);

    kl__free(cfg->ca_pem);
    assert_non_null(cfg->ca_pem = kl__malloc(len + 1));
    memcpy(cfg->ca_pem, pem, len + 1);
    cfg->ca_pem_len = len;
    free(pem);
}

static void to_mute_server(kl__restconfig *cfg)
{
    kl__free(cfg->server);
    assert_non_null(cfg->server = kl__strdup(T.mute_url));
}

static void test_wrong_ca(void **state)
{
    (void)state;
    loop_start(T.srv, "kubeconfig", to_other_ca);
    assert_string_equal(facts().transport, "native");
    run(&T.r[0], "GET", LEASES, NULL);
    expect_error(&T.r[0], K8SLEASE_ETLS, "certificate verify failed");
    assert_non_null(strstr(T.r[0].errmsg, ts_url(T.srv)));
    assert_int_equal(T.r[0].status, 0);
}

/* ------------------------------------------------------------------------ */
/* 12. Fallback                                                             */
/* ------------------------------------------------------------------------ */

/* A server that offers no h2: the requests and the watch started with the
 * first connection go through libcurl, and so do the next ones, without
 * another native attempt. */
static void test_fallback_to_libcurl(void **state)
{
    static const char *const args[] = {"--no-http2", NULL};
    kl__http_opts o[4];
    result *rs[4] = {&T.r[0], &T.r[1], &T.r[2], &T.r[3]};
    kl__http_req *reqs[4];
    start_args s = {o, rs, reqs, 4};
    loop_facts f;

    (void)state;
    assert_int_equal(ts_start(&T.other, args), 0);
    loop_start(T.other, "kubeconfig", NULL);
    assert_string_equal(facts().transport, "native");
    memset(o, 0, sizeof(o));
    o[0].method = "GET";
    o[0].path = LEASES "?watch=1";
    o[0].on_data = on_data;
    o[0].on_open = on_open;
    for (int i = 1; i < 4; i++) {
        o[i].method = "GET";
        o[i].path = LEASES;
        o[i].timeout_ms = WAIT_MS;
    }
    assert_int_equal(kl__loop_call(T.loop, do_start, &s), 0);
    for (int i = 1; i < 4; i++) {
        wait_done(rs[i], "GET");
        expect_status(rs[i], 200);
    }
    wait_count(&T.r[0].open_calls, 1, "on_open calls of the watch");
    f = facts();
    assert_string_equal(f.transport, "libcurl");
    assert_int_equal(f.h2, 1);
    assert_true(logged("no HTTP/2 offered; requests go through libcurl"));

    create_lease(&T.r[4], "fallback");
    wait_data(&T.r[0], "\"fallback\"");
    run(&T.r[5], "GET", LEASES "/fallback", NULL);
    expect_status(&T.r[5], 200);
    f = facts();
    assert_string_equal(f.transport, "libcurl");
    assert_int_equal(f.h2, 1);
    assert_int_equal(tc_stat_int(T.other, "connections.h2.requests"), 0);
    assert_int_equal(count_of(&T.r[0].done_calls), 0);
}

/* ------------------------------------------------------------------------ */
/* 13. Cancel and free                                                      */
/* ------------------------------------------------------------------------ */

/* A request cancelled while the server holds it: done is never called,
 * not even once the server answers; the connection goes on. */
static void test_cancel(void **state)
{
    kl__http_opts o = {0};
    kl__http_req *req;

    (void)state;
    loop_start(T.srv, "kubeconfig", NULL);
    create_lease(&T.r[0], "held");
    add_fault(T.srv, "{\"kind\":\"hang\",\"match\":{\"path_prefix\":\"" LEASES "/held\"}}");
    o.method = "GET";
    o.path = LEASES "/held";
    o.timeout_ms = WAIT_MS;
    req = start(&o, &T.r[1]);
    tc_wait_stat(T.srv, "faults.hang", 1, WAIT_MS); /* the server holds it */
    assert_int_equal(kl__loop_call(T.loop, do_cancel, req), 0);
    /* Released: the server answers the held request, if it still may. */
    tc_control(T.srv, "DELETE", "/testserver/v1/faults", NULL, 200);

    run(&T.r[2], "GET", LEASES "/held", NULL);
    expect_status(&T.r[2], 200);
    assert_int_equal(facts().h2, 1);
    assert_int_equal(count_of(&T.r[1].done_calls), 0);
}

static void do_nothing(void *arg)
{
    (void)arg;
}

/* A POST cancelled while its body is on the way (the server stopped
 * reading: a stall): nothing more of the body is read after the cancel
 * (ASan: the body is the request's, freed with it), the stream's reset goes
 * out once the server reads again, and the connection goes on. */
static void test_cancel_during_upload(void **state)
{
    enum { BIG = 8 * 1024 * 1024 };
    kl__http_opts o = {0};
    kl__http_req *req;
    char *body = malloc(BIG);

    (void)state;
    assert_non_null(body);
    memset(body, ' ', BIG);
    body[0] = '{';
    body[BIG - 1] = '}';
    loop_start(T.srv, "kubeconfig", NULL);
    run(&T.r[0], "GET", LEASES, NULL);
    expect_status(&T.r[0], 200);
    add_fault(T.srv, "{\"kind\":\"stall\",\"count\":1,\"match\":{\"path_prefix\":\"" LEASES
                     "/stall\",\"user_agent\":\"" AGENT "\"}}");
    o.method = "GET";
    o.path = LEASES "/stall";
    o.timeout_ms = WAIT_MS;
    start(&o, &T.r[1]);
    tc_wait_stat(T.srv, "connections.stalled", 1, WAIT_MS);

    o.method = "POST";
    o.path = LEASES;
    o.content_type = "application/json";
    o.body = body;
    o.body_len = BIG;
    req = start(&o, &T.r[2]);
    free(body); /* copied by kl__http_start */
    /* An iteration of the loop: it wrote what it could of the body. */
    assert_int_equal(kl__loop_call(T.loop, do_nothing, NULL), 0);
    assert_int_equal(kl__loop_call(T.loop, do_cancel, req), 0);

    /* The server reads again: the held GET is answered, the POST is gone. */
    tc_control(T.srv, "DELETE", "/testserver/v1/faults", NULL, 200);
    wait_done(&T.r[1], "the GET on the connection that stalled");
    expect_status(&T.r[1], 404);
    run(&T.r[3], "GET", LEASES, NULL);
    expect_status(&T.r[3], 200);
    assert_int_equal(facts().h2, 1);
    assert_int_equal(count_of(&T.r[2].done_calls), 0);
}

/* kl__loop_free with requests and a watch in flight: no callback, nothing
 * leaked (ASan), and the server sees the connection go. */
static void test_free_in_flight(void **state)
{
    kl__http_opts o = {0};

    (void)state;
    loop_start(T.srv, "kubeconfig", NULL);
    create_lease(&T.r[0], "held");
    add_fault(T.srv, "{\"kind\":\"hang\",\"match\":{\"path_prefix\":\"" LEASES "/held\"}}");
    start_watch(&T.r[1], LEASES "?watch=1", WAIT_MS);
    o.method = "GET";
    o.path = LEASES "/held";
    o.timeout_ms = WAIT_MS;
    start(&o, &T.r[2]);
    o.method = "PUT";
    o.body = "{}";
    o.body_len = 2;
    o.content_type = "application/json";
    start(&o, &T.r[3]);
    wait_count(&T.r[1].open_calls, 1, "on_open calls");
    tc_wait_stat(T.srv, "faults.hang", 2, WAIT_MS);
    assert_int_equal(tc_stat_int(T.srv, "watches.open"), 1);

    kl__loop_free(T.loop);
    T.loop = NULL;
    for (int i = 1; i <= 3; i++)
        assert_int_equal(T.r[i].done_calls, 0);
    tc_wait_stat_at_most(T.srv, "watches.open", 0, WAIT_MS);
    tc_wait_stat_at_most(T.srv, "connections.h2.open", 1, WAIT_MS); /* the harness's own */
}

/* ------------------------------------------------------------------------ */
/* 14. GOAWAY                                                               */
/* ------------------------------------------------------------------------ */

/* The server refuses the POST's stream with a GOAWAY whose last stream id
 * is below it: the native transport resends it once, on a new connection,
 * and the caller sees only the 201. */
static void test_goaway(void **state)
{
    long status = 0;
    char *resp = NULL;
    json_t *j;

    (void)state;
    loop_start(T.srv, "kubeconfig", NULL);
    run(&T.r[0], "GET", LEASES, NULL);
    expect_status(&T.r[0], 200);
    assert_int_equal(ts_control(T.srv, "POST", "/testserver/v1/faults",
                                "{\"kind\":\"goaway\",\"count\":1,\"match\":{\"verb\":\"create\","
                                "\"user_agent\":\"" AGENT "\"}}",
                                &status, &resp),
                     0);
    if (status == 400) {
        print_message("skipped: the test server has no goaway fault: %s\n", resp);
        free(resp);
        skip();
    }
    free(resp);
    assert_int_equal(status, 201);

    create_lease(&T.r[1], "after-goaway");
    assert_int_equal(tc_stat_int(T.srv, "faults.goaway"), 1);
    assert_int_equal(facts().h2, 2);
    run(&T.r[2], "GET", LEASES, NULL);
    expect_status(&T.r[2], 200);
    j = body_json(&T.r[2]);
    assert_int_equal(json_array_size(tc_at(j, "items")), 1);
    assert_string_equal(json_str(j, "items.0.metadata.name"), "after-goaway");
    json_decref(j);
    assert_int_equal(facts().h2, 2);
}

/* ------------------------------------------------------------------------ */
/* More of what the native transport must do as libcurl does             */
/* ------------------------------------------------------------------------ */

/* 50 requests at once to a server that allows 8 streams: the ones over its
 * limit sent before its SETTINGS arrived are refused (REFUSED_STREAM) and
 * resent; the rest wait for a slot. All answered, on one connection. */
static void test_max_streams(void **state)
{
    static const char *const args[] = {"--http2-max-streams", "8", NULL};
    kl__http_opts o[NMANY];
    result *rs[NMANY];
    kl__http_req *reqs[NMANY];
    start_args s = {o, rs, reqs, NMANY};

    (void)state;
    assert_int_equal(ts_start(&T.other, args), 0);
    loop_start(T.other, "kubeconfig", NULL);
    memset(o, 0, sizeof(o));
    for (int i = 0; i < NMANY; i++) {
        rs[i] = &T.r[i];
        o[i].method = "GET";
        o[i].path = LEASES;
        o[i].timeout_ms = WAIT_MS;
    }
    assert_int_equal(kl__loop_call(T.loop, do_start, &s), 0);
    for (int i = 0; i < NMANY; i++) {
        assert_non_null(reqs[i]);
        wait_done(rs[i], "GET");
        expect_status(rs[i], 200);
    }
    assert_string_equal(facts().transport, "native");
    assert_int_equal(facts().h2, 1);
}

/* Client-certificate authentication (kubeconfig-cert: no token). */
static void test_client_cert(void **state)
{
    (void)state;
    loop_start(T.srv, "kubeconfig-cert", NULL);
    assert_null(T.cfg->token);
    assert_true(T.cfg->cert_pem || T.cfg->cert_file);
    run(&T.r[0], "GET", LEASES, NULL);
    expect_status(&T.r[0], 200);
    assert_string_equal(facts().transport, "native");
    assert_int_equal(facts().h2, 1);
}

static void name_localhost(kl__restconfig *cfg)
{
    assert_non_null(cfg->tls_server_name = kl__strdup("localhost"));
}

static void name_wrong(kl__restconfig *cfg)
{
    assert_non_null(cfg->tls_server_name = kl__strdup("wrong.example"));
}

/* tls-server-name: the certificate must match it, not the address. */
static void test_tls_server_name(void **state)
{
    (void)state;
    loop_start(T.srv, "kubeconfig", name_localhost);
    run(&T.r[0], "GET", LEASES, NULL);
    expect_status(&T.r[0], 200);
    assert_string_equal(facts().transport, "native");
    kl__loop_free(T.loop);
    T.loop = NULL;
    kl__restconfig_free(T.cfg);
    T.cfg = NULL;

    loop_start(T.srv, "kubeconfig", name_wrong);
    assert_string_equal(facts().transport, "native");
    run(&T.r[1], "GET", LEASES, NULL);
    expect_error(&T.r[1], K8SLEASE_ETLS, "certificate verify failed");
}

/* A server on [::1]. */
static void test_ipv6(void **state)
{
    static const char *const args[] = {"--address", "::1", NULL};

    (void)state;
    assert_int_equal(ts_start(&T.other, args), 0);
    loop_start(T.other, "kubeconfig", NULL);
    assert_non_null(strstr(T.cfg->server, "[::1]"));
    assert_string_equal(facts().transport, "native");
    run(&T.r[0], "GET", LEASES, NULL);
    expect_status(&T.r[0], 200);
    assert_int_equal(facts().h2, 1);
}

/* A request body larger than a TLS record and the server's initial stream
 * window (64 KiB): sent in pieces as the window opens. */
static void test_large_request_body(void **state)
{
    enum { BIG = 200 * 1024 };
    char *value = malloc(BIG + 1), *body;
    json_t *j;

    (void)state;
    assert_non_null(value);
    for (int i = 0; i < BIG; i++)
        value[i] = (char)('a' + i % 26);
    value[BIG] = '\0';
    body = tc_fmt("{\"apiVersion\":\"coordination.k8s.io/v1\",\"kind\":\"Lease\","
                  "\"metadata\":{\"name\":\"big\",\"annotations\":{\"x\":\"%s\"}},"
                  "\"spec\":{\"holderIdentity\":\"h\"}}",
                  value);
    loop_start(T.srv, "kubeconfig", NULL);
    run(&T.r[0], "POST", LEASES, body);
    free(body);
    expect_status(&T.r[0], 201);
    run(&T.r[1], "GET", LEASES "/big", NULL);
    expect_status(&T.r[1], 200);
    j = body_json(&T.r[1]);
    assert_string_equal(json_str(j, "metadata.annotations.x"), value);
    json_decref(j);
    free(value);
    assert_int_equal(facts().h2, 1);
}

/* A restart drops the connection: the watch on it ends with a transport
 * error (the server went away without a TLS close_notify: ETRANSPORT, which
 * the elector retries after RP/4, not a TLS failure), and the next request
 * opens a new connection. Regression: the first native transport said
 * K8SLEASE_ETLS ("unexpected eof while reading", OpenSSL 3). */
static void test_server_restart(void **state)
{
    result *w = &T.r[0];
    loop_facts f;

    (void)state;
    loop_start(T.srv, "kubeconfig", NULL);
    start_watch(w, LEASES "?watch=1", 0);
    wait_count(&w->open_calls, 1, "on_open calls");
    run(&T.r[1], "GET", LEASES, NULL);
    expect_status(&T.r[1], 200);
    assert_int_equal(ts_restart(T.srv, true, 0), 0);
    wait_done(w, "the watch on the dropped connection");
    expect_error(w, K8SLEASE_ETRANSPORT, ts_url(T.srv));
    run(&T.r[2], "GET", LEASES, NULL);
    expect_status(&T.r[2], 200);
    f = facts();
    assert_int_equal(f.h2, 2);
    assert_string_equal(f.transport, "native");
}

/* A server that takes the TCP connection but never answers the TLS
 * handshake (a hung replica behind a balancer): connect_timeout_ms bounds
 * the set-up. */
static void test_connect_timeout(void **state)
{
    kl__http_opts o = {0};
    struct sockaddr_in a = {0};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    char *url;

    (void)state;
    assert_true(fd >= 0);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(fd, 4), 0); /* the kernel completes the handshake; nobody reads */
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    T.mute_fd = fd;
    url = tc_fmt("https://127.0.0.1:%d", ntohs(a.sin_port));
    T.mute_url = url;
    loop_start(T.srv, "kubeconfig", to_mute_server);
    assert_string_equal(facts().transport, "native");
    o.method = "GET";
    o.path = LEASES;
    o.timeout_ms = WAIT_MS;
    o.connect_timeout_ms = 300;
    start(&o, &T.r[0]);
    wait_done(&T.r[0], "GET to a server that never answers the handshake");
    expect_error(&T.r[0], K8SLEASE_ETIMEOUT, "no connection after 300 ms");
    assert_non_null(strstr(T.r[0].errmsg, url));
    /* The TCP connection was made: the request may have been sent. */
    assert_false(T.r[0].unsent);
}

/* A watch with timeoutSeconds ends cleanly: its events first, then done
 * with 200 and no error. */
static void test_watch_ends(void **state)
{
    result *w = &T.r[0];

    (void)state;
    loop_start(T.srv, "kubeconfig", NULL);
    create_lease(&T.r[1], "ends");
    start_watch(w, LEASES "?watch=1&timeoutSeconds=1", WAIT_MS);
    wait_done(w, "a watch with timeoutSeconds=1");
    expect_status(w, 200);
    assert_int_equal(w->open_calls, 1);
    assert_true(w->data_calls >= 1);
    assert_true(w->data_at_done == w->data_calls);
    assert_non_null(strstr(w->data, "\"type\":\"ADDED\""));
    assert_string_equal(w->body, "");
}

/* opts.authorization replaces the configured credentials (http.h), on
 * the configured server too: a wrong one gets 401, not retried.
 * Regression: the first native transport sent the configured token. */
static void test_raw_authorization(void **state)
{
    kl__http_opts o = {0};

    (void)state;
    loop_start(T.srv, "kubeconfig", NULL);
    assert_non_null(T.cfg->token);
    o.method = "GET";
    o.path = LEASES;
    o.timeout_ms = WAIT_MS;
    o.authorization = "Bearer not-the-token";
    start(&o, &T.r[0]);
    wait_done(&T.r[0], "GET with a raw Authorization header");
    expect_status(&T.r[0], 401);
}

/* The original fails (its connection is abandoned when another request on
 * it times out) while its hedge is still on the way: the hedge's answer is
 * the request's (http.c req_failed: "the error waits for the last").
 * Regression: the first native transport left the hedge timer armed, and
 * the next tick (2 s) ended the request with the original's error. */
static void test_hedge_outlives_failed_original(void **state)
{
    kl__http_opts o[2];
    result *rs[2] = {&T.r[1], &T.r[2]};
    kl__http_req *reqs[2];
    start_args s = {o, rs, reqs, 2};

    (void)state;
    loop_start(T.srv, "kubeconfig", NULL);
    create_lease(&T.r[0], "slow");
    /* The timed-out request's path: held for good. */
    add_fault(T.srv, "{\"kind\":\"hang\",\"match\":{\"path_prefix\":\"" LEASES "/gone\"}}");
    /* The original's and its hedge's: held 2.5 s, then answered. */
    add_fault(T.srv, "{\"kind\":\"hang\",\"duration_ms\":2500,"
                     "\"match\":{\"path_prefix\":\"" LEASES "/slow\"}}");
    memset(o, 0, sizeof(o));
    o[0].method = "GET";
    o[0].path = LEASES "/gone";
    o[0].timeout_ms = 1500; /* abandons the connection at 1.5 s */
    o[1].method = "GET";
    o[1].path = LEASES "/slow";
    o[1].timeout_ms = WAIT_MS;
    o[1].hedge_ms = 1000; /* a copy at 1 s; the next tick at 2 s */
    assert_int_equal(kl__loop_call(T.loop, do_start, &s), 0);
    wait_done(&T.r[1], "the request that times out");
    expect_error(&T.r[1], K8SLEASE_ETIMEOUT, "timeout");
    wait_done(&T.r[2], "the hedged request");
    expect_status(&T.r[2], 200);
    assert_int_equal(facts().hedges_won, 1);
}

/* As many watches as the server allows streams on a connection
 * (SETTINGS_MAX_CONCURRENT_STREAMS 100, kube-apiserver v1.36.3's): a
 * request still gets an answer; it must not wait behind the watches. The
 * native transport puts 32 watches on a connection and opens others for
 * the rest (core/native.c), all of them HTTP/2 connections of its own. */
static void test_requests_beside_many_watches(void **state)
{
    enum { NWATCH = 100 };
    static const char *const args[] = {"--http2-max-streams", "100", NULL};
    kl__http_opts o[NWATCH];
    result *rs[NWATCH];
    kl__http_req *reqs[NWATCH];
    start_args s = {o, rs, reqs, NWATCH};
    kl__http_opts get = {0};

    (void)state;
    assert_int_equal(ts_start(&T.other, args), 0);
    loop_start(T.other, "kubeconfig", NULL);
    memset(o, 0, sizeof(o));
    for (int i = 0; i < NWATCH; i++) {
        rs[i] = &T.r[i];
        o[i].method = "GET";
        o[i].path = LEASES "?watch=1";
        o[i].on_data = on_data;
        o[i].on_open = on_open;
    }
    assert_int_equal(kl__loop_call(T.loop, do_start, &s), 0);
    for (int i = 0; i < NWATCH; i++)
        wait_count(&rs[i]->open_calls, 1, "on_open calls of a watch");
    tc_wait_stat(T.other, "watches.open", NWATCH, WAIT_MS);

    get.method = "GET";
    get.path = LEASES;
    get.timeout_ms = 3000;
    start(&get, &T.r[NWATCH]);
    wait_done(&T.r[NWATCH], "a GET beside the watches");
    expect_status(&T.r[NWATCH], 200);
    for (int i = 0; i < NWATCH; i++)
        assert_int_equal(count_of(&rs[i]->done_calls), 0);
    /* 100 watches, 32 a connection: four native connections, no other */
    assert_string_equal(facts().transport, "native");
    assert_int_equal(facts().h2, (NWATCH + 31) / 32);
}

int main(void)
{
#define T_(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T_(test_transport_in_use),
        T_(test_answers),
        T_(test_watch),
        T_(test_watch_not_200),
        T_(test_stream_abort),
        T_(test_stream_idle_timeout),
        T_(test_timeout),
        T_(test_hedge),
        T_(test_reset),
        T_(test_body_cap),
        T_(test_token_rotation),
        T_(test_connection_refused),
        T_(test_wrong_ca),
        T_(test_fallback_to_libcurl),
        T_(test_cancel),
        T_(test_cancel_during_upload),
        T_(test_free_in_flight),
        T_(test_goaway),
        T_(test_max_streams),
        T_(test_client_cert),
        T_(test_tls_server_name),
        T_(test_ipv6),
        T_(test_large_request_body),
        T_(test_server_restart),
        T_(test_raw_authorization),
        T_(test_hedge_outlives_failed_original),
        T_(test_connect_timeout),
        T_(test_watch_ends),
        T_(test_requests_beside_many_watches),
    };
#undef T_
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
