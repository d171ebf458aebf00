/* The event loop and the HTTP layer against a local HTTPS server
 * (tests/lib/fakehttp, certificates from tests/data/tls): requests, TLS,
 * auth, streaming, timeouts, timers, closures, teardown. The server speaks
 * HTTP/2 and the native transport carries the requests; under
 * K8SLEASE_TRANSPORT=libcurl (unit_http_libcurl) it speaks HTTP/1.1 and
 * libcurl does.
 *
 * Every wait is bounded (WAIT_MS) and fails with a message; no test sleeps
 * to synchronise. The server handlers that block wait on a condition
 * variable the test (or teardown) signals, also bounded.
 *
 * Length: the tests share the HTTPS server group_setup starts once. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <malloc.h>
#include <stdatomic.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <curl/curl.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <microhttpd.h>

#include "core/clock.h"
#include "core/http.h"
#include "fakehttp.h"
#include "k8s/api.h"
#include "testlib.h"

#ifndef K8SLEASE_TEST_DATA
#error "K8SLEASE_TEST_DATA must name tests/data"
#endif

#define WAIT_MS        10000
#define SERVER_WAIT_MS 20000
#define BIG_BODY       (17 * 1024 * 1024)
#define NRESULTS       4

/* ------------------------------------------------------------------------ */
/* Fixtures and synchronisation                                             */
/* ------------------------------------------------------------------------ */

static struct {
    char *ca, *other_ca, *server_cert, *server_key, *client_cert, *client_key;
} fx;

static char *slurp(const char *name)
{
    char path[512];
    FILE *f;
    long n;
    char *buf;

    snprintf(path, sizeof(path), "%s/tls/%s", K8SLEASE_TEST_DATA, name);
    if (!(f = fopen(path, "rb")))
        return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    rewind(f);
    buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    if (buf)
        buf[n] = '\0';
    fclose(f);
    return buf;
}

static void cond_init_mono(pthread_cond_t *c)
{
    pthread_condattr_t attr;

    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(c, &attr);
    pthread_condattr_destroy(&attr);
}

static struct timespec deadline_after(int ms)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* Wait on cond until *flag becomes nonzero or ms pass; mu held. */
static int wait_flag(pthread_mutex_t *mu, pthread_cond_t *cond, const int *flag, int ms)
{
    struct timespec until = deadline_after(ms);

    while (!*flag)
        if (pthread_cond_timedwait(cond, mu, &until) == ETIMEDOUT)
            break;
    (void)mu;
    return *flag;
}

/* ------------------------------------------------------------------------ */
/* The server                                                               */
/* ------------------------------------------------------------------------ */

/* What the server saw: written by its threads under srv.mu, read by the
 * tests from a snapshot (the sockets order them, but TSan cannot see that). */
typedef struct seen {
    int requests;
    int auth_requests;   /* requests to /auth */
    int first_blocks;    /* requests to /first-blocks */
    int line2_after_ack; /* /stream sent line 2 only after the client saw line 1 */
    char method[16], path[256], host[128], auth[256], auth_first[256], content_type[128];
    char accept[128], user_agent[128];
    char body[4096];
    size_t body_len;
} seen;

static struct server {
    kl_fakehttp http; /* .url: "https://127.0.0.1:PORT" */
    pthread_mutex_t mu;
    pthread_cond_t cond;
    char accept_token[64]; /* /auth accepts only "Bearer <this>" */
    int released;          /* blocked handlers may return */
    int line1_acked;       /* the client has seen line 1 of /stream */
    seen rec;
} srv;

static seen S; /* snapshot of srv.rec */

/* A second server with certificates made by the test (test_expired_*). */
static kl_fakehttp expiry;

static void snap(void)
{
    pthread_mutex_lock(&srv.mu);
    S = srv.rec;
    pthread_mutex_unlock(&srv.mu);
}

static void set_accept_token(const char *token)
{
    pthread_mutex_lock(&srv.mu);
    snprintf(srv.accept_token, sizeof(srv.accept_token), "%s", token);
    pthread_mutex_unlock(&srv.mu);
}

static void copy_header(kl_fakehttp_req *r, const char *name, char *dst, size_t len)
{
    const char *v = kl_fakehttp_header(r, name);

    snprintf(dst, len, "%s", v ? v : "");
}

/* Block until the test releases the server (bounded). */
static void wait_released(void)
{
    pthread_mutex_lock(&srv.mu);
    wait_flag(&srv.mu, &srv.cond, &srv.released, SERVER_WAIT_MS);
    pthread_mutex_unlock(&srv.mu);
}

static ssize_t read_stream(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)cls;
    (void)max;
    if (pos == 0) {
        memcpy(buf, "line 1\n", 7);
        return 7;
    }
    if (pos == 7) {
        pthread_mutex_lock(&srv.mu);
        srv.rec.line2_after_ack = wait_flag(&srv.mu, &srv.cond, &srv.line1_acked, WAIT_MS);
        pthread_mutex_unlock(&srv.mu);
        memcpy(buf, "line 2\n", 7);
        return 7;
    }
    return KL_FAKEHTTP_END;
}

static ssize_t read_stall(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)cls;
    (void)max;
    if (pos == 0) {
        memcpy(buf, "line 1\n", 7);
        return 7;
    }
    wait_released();
    return KL_FAKEHTTP_END;
}

static ssize_t read_big(void *cls, uint64_t pos, char *buf, size_t max)
{
    size_t n = BIG_BODY - (size_t)pos < max ? BIG_BODY - (size_t)pos : max;

    (void)cls;
    memset(buf, 'x', n);
    return (ssize_t)n;
}

static void reply_stream(kl_fakehttp_req *c, uint64_t size, kl_fakehttp_reader reader)
{
    kl_fakehttp_respond_stream(c, 200, "application/json", size, reader, NULL);
}

static void handle(void *arg, kl_fakehttp_req *c, const char *method, const char *url,
                   const char *body, size_t body_len)
{
    static const char json[] = "application/json";
    char auth[256], reply[64];
    int ok, n;

    (void)arg;
    copy_header(c, "Authorization", auth, sizeof(auth));
    pthread_mutex_lock(&srv.mu);
    srv.rec.requests++;
    snprintf(srv.rec.method, sizeof(srv.rec.method), "%s", method);
    snprintf(srv.rec.path, sizeof(srv.rec.path), "%s", url);
    snprintf(srv.rec.auth, sizeof(srv.rec.auth), "%s", auth);
    copy_header(c, "Host", srv.rec.host, sizeof(srv.rec.host));
    copy_header(c, "Content-Type", srv.rec.content_type, sizeof(srv.rec.content_type));
    copy_header(c, "Accept", srv.rec.accept, sizeof(srv.rec.accept));
    copy_header(c, "User-Agent", srv.rec.user_agent, sizeof(srv.rec.user_agent));
    memcpy(srv.rec.body, body, body_len);
    srv.rec.body_len = body_len;
    if (strcmp(url, "/auth") == 0 && srv.rec.auth_requests++ == 0)
        snprintf(srv.rec.auth_first, sizeof(srv.rec.auth_first), "%s", auth);
    ok = strncmp(auth, "Bearer ", 7) == 0 && strcmp(auth + 7, srv.accept_token) == 0;
    pthread_mutex_unlock(&srv.mu);

    if (strcmp(url, "/json") == 0) {
        kl_fakehttp_respond(c, 200, json, "{\"kind\":\"Lease\",\"metadata\":{}}");
    } else if (strcmp(url, "/echo") == 0) {
        kl_fakehttp_respond(c, 201, json, "{}");
    } else if (strcmp(url, "/notfound") == 0) {
        kl_fakehttp_respond(c, 404, json,
                            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\","
                            "\"message\":\"leases.coordination.k8s.io \\\"x\\\" not found\","
                            "\"reason\":\"NotFound\",\"code\":404}");
    } else if (strcmp(url, "/auth") == 0) {
        kl_fakehttp_respond(c, ok ? 200 : 401, json,
                            ok ? "{}"
                               : "{\"kind\":\"Status\",\"message\":\"Unauthorized\","
                                 "\"reason\":\"Unauthorized\",\"code\":401}");
    } else if (strcmp(url, "/cert") == 0) {
        kl_fakehttp_respond(c, kl_fakehttp_client_cert_ok(c) ? 200 : 401, json, "{}");
    } else if (strcmp(url, "/block") == 0) {
        wait_released();
        kl_fakehttp_respond(c, 200, json, "{}");
    } else if (strcmp(url, "/first-blocks") == 0) {
        /* A hung replica behind a balancer: the first request hangs, the
         * next ones (on new connections) are answered. */
        pthread_mutex_lock(&srv.mu);
        n = srv.rec.first_blocks++;
        pthread_mutex_unlock(&srv.mu);
        if (n == 0)
            wait_released();
        snprintf(reply, sizeof(reply), "{\"copy\":%d}", n);
        kl_fakehttp_respond(c, 200, json, reply);
    } else if (strcmp(url, "/stream") == 0) {
        reply_stream(c, KL_FAKEHTTP_SIZE_UNKNOWN, read_stream);
    } else if (strcmp(url, "/stall") == 0) {
        reply_stream(c, KL_FAKEHTTP_SIZE_UNKNOWN, read_stall);
    } else if (strcmp(url, "/big") == 0) {
        reply_stream(c, BIG_BODY, read_big);
    } else {
        kl_fakehttp_respond(c, 500, "text/plain", "no such test route");
    }
}

/* The server's protocol: HTTP/2 for the native transport (and libcurl
 * over it, for what libcurl carries); HTTP/1.1 under
 * K8SLEASE_TRANSPORT=libcurl, libcurl's other protocol. */
static kl_fakehttp_proto server_proto(void)
{
    const char *t = getenv("K8SLEASE_TRANSPORT");

    return t && strcmp(t, "libcurl") == 0 ? KL_FAKEHTTP_H1 : KL_FAKEHTTP_H2;
}

static void server_start(void)
{
    kl_fakehttp_serve(&srv.http, server_proto(), handle, NULL, fx.server_key, fx.server_cert,
                      fx.ca);
}

static void server_release(void)
{
    pthread_mutex_lock(&srv.mu);
    srv.released = 1;
    pthread_cond_broadcast(&srv.cond);
    pthread_mutex_unlock(&srv.mu);
}

static void server_ack_line1(void)
{
    pthread_mutex_lock(&srv.mu);
    srv.line1_acked = 1;
    pthread_cond_broadcast(&srv.cond);
    pthread_mutex_unlock(&srv.mu);
}

/* ------------------------------------------------------------------------ */
/* The client side                                                          */
/* ------------------------------------------------------------------------ */

typedef struct result {
    int done_calls;
    int err, unsent;
    char errmsg[1024];
    long status;
    char body[65536];
    size_t body_len;
    char content_type[128];
    /* on_data */
    int data_calls;
    char data[256];
    size_t data_len;
    char first_chunk[64];
    int abort_with; /* on_data returns this after the first chunk */
    int open_calls; /* on_open */
    int data_before_open;
    int cancel_from_data; /* on_data cancels its own request */
    kl__http_req *self;
} result;

/* Everything a test touches from the loop thread lives here, not on a test's
 * stack: a failed assertion longjmps out while the loop may still run. */
static struct {
    kl__loop *loop;
    result r[NRESULTS];
    pthread_mutex_t mu;
    pthread_cond_t cond;
    char tmpdir[64];
    kl__log log;
    char logs[16384];
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
    size_t n = res->body_len < sizeof(r->body) - 1 ? res->body_len : sizeof(r->body) - 1;

    pthread_mutex_lock(&T.mu);
    r->done_calls++;
    r->err = res->err;
    r->unsent = res->unsent;
    snprintf(r->errmsg, sizeof(r->errmsg), "%s", res->errmsg ? res->errmsg : "(null)");
    r->status = res->status;
    memcpy(r->body, res->body, n);
    r->body[n] = '\0';
    r->body_len = res->body_len;
    snprintf(r->content_type, sizeof(r->content_type), "%s", res->content_type);
    pthread_cond_broadcast(&T.cond);
    pthread_mutex_unlock(&T.mu);
}

static int on_data(const char *data, size_t len, void *arg)
{
    result *r = arg;
    size_t room;
    int first, rc = 0;

    pthread_mutex_lock(&T.mu);
    r->data_before_open += r->open_calls == 0;
    first = r->data_calls++ == 0;
    if (first)
        snprintf(r->first_chunk, sizeof(r->first_chunk), "%.*s", (int)len, data);
    room = sizeof(r->data) - 1 - r->data_len;
    if (len < room)
        room = len;
    memcpy(r->data + r->data_len, data, room);
    r->data_len += room;
    r->data[r->data_len] = '\0';
    if (r->abort_with)
        rc = r->abort_with;
    pthread_cond_broadcast(&T.cond);
    pthread_mutex_unlock(&T.mu);
    if (r->cancel_from_data)
        kl__http_cancel(T.loop, r->self);
    if (first && strstr(r->first_chunk, "line 1"))
        server_ack_line1();
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

typedef struct start_args {
    kl__http_opts opts;
    result *r;
    kl__http_req *req;
    int cancel_now;
} start_args;

static void do_start(void *arg)
{
    start_args *s = arg;

    s->req = kl__http_start(T.loop, &s->opts, on_done, s->r);
    s->r->self = s->req;
    if (s->cancel_now)
        kl__http_cancel(T.loop, s->req);
}

static kl__http_req *start_req(const kl__http_opts *opts, result *r, int cancel_now)
{
    start_args s;

    s.opts = *opts;
    s.r = r;
    s.req = NULL;
    s.cancel_now = cancel_now;
    assert_int_equal(kl__loop_call(T.loop, do_start, &s), 0);
    assert_non_null(s.req);
    return s.req;
}

static void do_cancel(void *arg)
{
    kl__http_cancel(T.loop, arg);
}

static void wait_done(result *r)
{
    int done;

    pthread_mutex_lock(&T.mu);
    done = wait_flag(&T.mu, &T.cond, &r->done_calls, WAIT_MS);
    pthread_mutex_unlock(&T.mu);
    if (!done)
        fail_msg("request did not complete within %d ms", WAIT_MS);
    snap();
}

static void run(const char *method, const char *path, result *r)
{
    kl__http_opts o = {0};

    o.method = method;
    o.path = path;
    o.timeout_ms = WAIT_MS;
    start_req(&o, r, 0);
    wait_done(r);
}

static kl__restconfig cfg_default(void)
{
    kl__restconfig c = {0};

    c.server = srv.http.url;
    c.source = "test";
    c.ca_pem = fx.ca;
    c.ca_pem_len = strlen(fx.ca);
    return c;
}

/* cfg with a client certificate and key (PEM). */
static void with_client_cert(kl__restconfig *cfg, char *cert, char *key)
{
    cfg->cert_pem = cert;
    cfg->cert_pem_len = strlen(cert);
    cfg->key_pem = key;
    cfg->key_pem_len = strlen(key);
}

static void loop_start(const kl__restconfig *cfg)
{
    assert_int_equal(kl__loop_new(&T.loop, cfg, &T.log, "unit-test"), 0);
    assert_non_null(T.loop);
}

static int count_in_file(const char *path)
{
    FILE *f = fopen(path, "r");
    int n = -1;

    if (f) {
        if (fscanf(f, "%d", &n) != 1)
            n = -1;
        fclose(f);
    }
    return n;
}

static void write_file(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");

    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(chmod(path, mode), 0);
}

static void tmp_path(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", T.tmpdir, name);
}

static void rm_tmpdir(void)
{
    static const char *const names[] = {"token", "plugin.sh", "count", "done"};
    char path[128];
    size_t i;

    if (!T.tmpdir[0])
        return;
    for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        tmp_path(path, sizeof(path), names[i]);
        unlink(path);
    }
    rmdir(T.tmpdir);
    T.tmpdir[0] = '\0';
}

static int setup(void **state)
{
    (void)state;
    memset(&srv.rec, 0, sizeof(srv.rec));
    memset(&S, 0, sizeof(S));
    srv.released = srv.line1_acked = 0;
    srv.accept_token[0] = '\0';
    memset(T.r, 0, sizeof(T.r));
    T.logs[0] = '\0';
    T.log.cb = on_log;
    T.log.user_data = NULL;
    T.log.level = K8SLEASE_LOG_DEBUG;
    snprintf(T.tmpdir, sizeof(T.tmpdir), "/tmp/k8slease-test-http-XXXXXX");
    if (!mkdtemp(T.tmpdir))
        return -1;
    server_start();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    kl__alloc_fail_after(-1);
    /* The loop first: it closes its connections and calls nothing more. */
    kl__loop_free(T.loop);
    T.loop = NULL;
    server_release();
    kl_fakehttp_stop(&srv.http);
    kl_fakehttp_stop(&expiry);
    rm_tmpdir();
    return 0;
}

static int group_setup(void **state)
{
    (void)state;
    fx.ca = slurp("ca.crt");
    fx.other_ca = slurp("other-ca.crt");
    fx.server_cert = slurp("server.crt");
    fx.server_key = slurp("server.key");
    fx.client_cert = slurp("client.crt");
    fx.client_key = slurp("client.key");
    if (!fx.ca || !fx.other_ca || !fx.server_cert || !fx.server_key || !fx.client_cert ||
        !fx.client_key) {
        fprintf(stderr, "cannot read the fixtures in %s/tls\n", K8SLEASE_TEST_DATA);
        return -1;
    }
    pthread_mutex_init(&srv.mu, NULL);
    cond_init_mono(&srv.cond);
    pthread_mutex_init(&T.mu, NULL);
    cond_init_mono(&T.cond);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    free(fx.ca);
    free(fx.other_ca);
    free(fx.server_cert);
    free(fx.server_key);
    free(fx.client_cert);
    free(fx.client_key);
    pthread_mutex_destroy(&srv.mu);
    pthread_cond_destroy(&srv.cond);
    pthread_mutex_destroy(&T.mu);
    pthread_cond_destroy(&T.cond);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Requests                                                                 */
/* ------------------------------------------------------------------------ */

static struct {
    const char *transport;
    uint64_t h2;
} TF;

static void read_transport(void *arg)
{
    (void)arg;
    TF.transport = kl__loop_transport(T.loop);
    TF.h2 = kl__loop_h2_connections(T.loop);
}

/* The transport this run is about: native over HTTP/2 (one connection of
 * its own), or libcurl under K8SLEASE_TRANSPORT=libcurl. */
static void expect_transport(void)
{
    int native = server_proto() == KL_FAKEHTTP_H2;

    assert_int_equal(kl__loop_call(T.loop, read_transport, NULL), 0);
    assert_string_equal(TF.transport, native ? "native" : "libcurl");
    assert_int_equal(TF.h2, native ? 1 : 0);
}

static void test_get_json(void **state)
{
    kl__restconfig cfg = cfg_default();

    (void)state;
    loop_start(&cfg);
    run("GET", "/json", &T.r[0]);
    expect_transport();
    assert_int_equal(T.r[0].err, 0);
    assert_int_equal(T.r[0].status, 200);
    assert_string_equal(T.r[0].body, "{\"kind\":\"Lease\",\"metadata\":{}}");
    assert_int_equal(T.r[0].body_len, strlen(T.r[0].body));
    assert_string_equal(T.r[0].content_type, "application/json");
    assert_int_equal(T.r[0].done_calls, 1);
    assert_string_equal(S.method, "GET");
    assert_string_equal(S.path, "/json");
    assert_string_equal(S.accept, "application/json");
    assert_string_equal(S.user_agent, "k8slease/" K8SLEASE_VERSION_STRING " unit-test");
    assert_string_equal(S.auth, "");
}

static void test_body_and_content_type(void **state)
{
    static const char *const methods[] = {"PUT", "POST", "PATCH"};
    static const char *const types[] = {"application/json", "application/json",
                                        "application/merge-patch+json"};
    kl__restconfig cfg = cfg_default();
    size_t i;

    (void)state;
    loop_start(&cfg);
    for (i = 0; i < 3; i++) {
        kl__http_opts o = {0};
        char body[64];

        snprintf(body, sizeof(body), "{\"n\":%zu}", i);
        o.method = methods[i];
        o.path = "/echo";
        o.content_type = types[i];
        o.body = body;
        o.body_len = strlen(body);
        o.timeout_ms = WAIT_MS;
        memset(&T.r[0], 0, sizeof(T.r[0]));
        start_req(&o, &T.r[0], 0);
        memset(body, 0, sizeof(body)); /* the request holds its own copy */
        wait_done(&T.r[0]);
        assert_int_equal(T.r[0].err, 0);
        assert_int_equal(T.r[0].status, 201);
        assert_string_equal(S.method, methods[i]);
        assert_string_equal(S.content_type, types[i]);
        snprintf(body, sizeof(body), "{\"n\":%zu}", i);
        assert_int_equal(S.body_len, strlen(body));
        assert_memory_equal(S.body, body, strlen(body));
    }
}

static void test_status_404(void **state)
{
    kl__restconfig cfg = cfg_default();
    int err;

    (void)state;
    loop_start(&cfg);
    run("GET", "/notfound", &T.r[0]);
    assert_int_equal(T.r[0].err, 0);
    assert_int_equal(T.r[0].status, 404);
    err = kl__http_status_error(T.r[0].status, T.r[0].body, T.r[0].body_len, "get lease ns/x");
    assert_int_equal(err, K8SLEASE_ENOTFOUND);
    assert_string_equal(kl__error_get(), "get lease ns/x: HTTP 404 NotFound: "
                                         "leases.coordination.k8s.io \"x\" not found");
}

static void test_status_error_mapping(void **state)
{
    static const char conflict[] = "{\"kind\":\"Status\",\"message\":\"the object has been "
                                   "modified\",\"reason\":\"Conflict\",\"code\":409}";
    static const char no_reason[] = "{\"kind\":\"Status\",\"message\":\"forbidden: no\"}";
    static const char not_status[] = "{\"kind\":\"Lease\",\"message\":\"not a status\"}";
    char html[400];
    char expect[300];

    (void)state;
    assert_int_equal(kl__http_status_error(409, conflict, strlen(conflict), "update"),
                     K8SLEASE_ECONFLICT);
    assert_string_equal(kl__error_get(), "update: HTTP 409 Conflict: the object has been modified");
    assert_int_equal(kl__http_status_error(403, no_reason, strlen(no_reason), "get"),
                     K8SLEASE_EAUTH);
    assert_string_equal(kl__error_get(), "get: HTTP 403: forbidden: no");
    assert_int_equal(kl__http_status_error(401, "", 0, "get"), K8SLEASE_EAUTH);
    assert_string_equal(kl__error_get(), "get: HTTP 401");
    assert_int_equal(kl__http_status_error(422, not_status, strlen(not_status), "create"),
                     K8SLEASE_ESERVER);
    assert_string_equal(kl__error_get(), "create: HTTP 422: {\"kind\":\"Lease\",\"message\":"
                                         "\"not a status\"}");
    /* A long non-Status body: its first 200 bytes, control characters blanked. */
    memset(html, 'a', sizeof(html));
    memcpy(html, "<h1>\n502</h1>", 13);
    assert_int_equal(kl__http_status_error(502, html, sizeof(html), "get"), K8SLEASE_ESERVER);
    snprintf(expect, sizeof(expect), "get: HTTP 502: <h1> 502</h1>%.*s", 200 - 13, html + 13);
    assert_string_equal(kl__error_get(), expect);
    assert_int_equal(kl__http_status_error(500, NULL, 0, NULL), K8SLEASE_ESERVER);
    assert_string_equal(kl__error_get(), "request: HTTP 500");
}

static void test_url_escape(void **state)
{
    char *s;

    (void)state;
    s = kl__url_escape("metadata.name=a b/c?d&e~_-%é");
    assert_non_null(s);
    assert_string_equal(s, "metadata.name%3Da%20b%2Fc%3Fd%26e~_-%25%C3%A9");
    kl__free(s);
    s = kl__url_escape("");
    assert_non_null(s);
    assert_string_equal(s, "");
    kl__free(s);
}

static void test_bad_server_url(void **state)
{
    kl__restconfig cfg = cfg_default();
    kl__loop *loop = NULL;

    (void)state;
    cfg.server = "ftp://127.0.0.1:1";
    assert_int_equal(kl__loop_new(&loop, &cfg, NULL, NULL), K8SLEASE_ECONFIG);
    assert_null(loop);
    assert_non_null(strstr(kl__error_get(), "ftp://127.0.0.1:1"));
    cfg.server = NULL;
    assert_int_equal(kl__loop_new(&loop, &cfg, NULL, NULL), K8SLEASE_ECONFIG);
    assert_null(loop);
}

/* ------------------------------------------------------------------------ */
/* Authentication                                                           */
/* ------------------------------------------------------------------------ */

static void test_bearer_token(void **state)
{
    kl__restconfig cfg = cfg_default();
    char token[] = "static-secret-token";

    (void)state;
    set_accept_token(token);
    cfg.token = token;
    loop_start(&cfg);
    run("GET", "/auth", &T.r[0]);
    assert_int_equal(T.r[0].err, 0);
    assert_int_equal(T.r[0].status, 200);
    assert_string_equal(S.auth, "Bearer static-secret-token");
    /* The debug log shows the requests, never the token. */
    assert_non_null(strstr(T.logs, "/auth"));
    assert_null(strstr(T.logs, token));
}

/* libcurl's allocations go through these (curl_global_init_mem in main):
 * a block it frees that still holds the Authorization line of the secret
 * below was not wiped. */
static struct {
    char line[128];     /* "Authorization: Bearer <secret>", "" when off */
    _Atomic size_t len; /* of line; 0: not watching */
    atomic_int copies;  /* strdup'ed copies of the line made */
    atomic_int unwiped; /* freed with the line in them */
} CW;

static int holds_line(const void *p)
{
    size_t n = atomic_load(&CW.len);

    return p && n && malloc_usable_size((void *)p) >= n && memcmp(p, CW.line, n) == 0;
}

static void *cw_malloc(size_t n)
{
    return malloc(n);
}

static void cw_free(void *p)
{
    if (holds_line(p))
        atomic_fetch_add(&CW.unwiped, 1);
    free(p);
}

static void *cw_realloc(void *p, size_t n)
{
    return realloc(p, n);
}

static char *cw_strdup(const char *s)
{
    char *d = strdup(s);

    if (holds_line(d))
        atomic_fetch_add(&CW.copies, 1);
    return d;
}

static void *cw_calloc(size_t n, size_t size)
{
    return calloc(n, size);
}

/* The Authorization line handed to libcurl (its header list) is wiped
 * before it goes back to the allocator, as every other copy of a
 * credential. */
static void test_bearer_line_wiped(void **state)
{
    kl__restconfig cfg = cfg_default();
    char token[] = "wipe-me-bearer-token";
    kl__http_opts o = {0};

    (void)state;
    set_accept_token(token);
    cfg.token = token;
    snprintf(CW.line, sizeof(CW.line), "Authorization: Bearer %s", token);
    atomic_store(&CW.copies, 0);
    atomic_store(&CW.unwiped, 0);
    atomic_store(&CW.len, strlen(CW.line));
    loop_start(&cfg);
    /* base_url: a request libcurl carries, whatever the transport of the
     * configured server */
    o.method = "GET";
    o.path = "/auth";
    o.base_url = srv.http.url;
    o.timeout_ms = WAIT_MS;
    start_req(&o, &T.r[0], 0);
    wait_done(&T.r[0]);
    assert_int_equal(T.r[0].status, 200);
    assert_string_equal(S.auth, "Bearer wipe-me-bearer-token");
    kl__loop_free(T.loop);
    T.loop = NULL;
    atomic_store(&CW.len, 0);
    assert_true(atomic_load(&CW.copies) >= 1); /* the hook saw the line */
    assert_int_equal(atomic_load(&CW.unwiped), 0);
}

static void test_token_file_rotation(void **state)
{
    kl__restconfig cfg = cfg_default();
    char path[128];

    (void)state;
    tmp_path(path, sizeof(path), "token");
    write_file(path, "old-token\n", 0600);
    set_accept_token("old-token");
    cfg.token_file = path;
    loop_start(&cfg);
    run("GET", "/auth", &T.r[0]);
    assert_int_equal(T.r[0].status, 200);
    assert_string_equal(S.auth, "Bearer old-token");

    /* Rotated: the cached token is refused once, then re-read and retried. */
    pthread_mutex_lock(&srv.mu);
    snprintf(srv.accept_token, sizeof(srv.accept_token), "new-token");
    srv.rec.auth_requests = 0;
    pthread_mutex_unlock(&srv.mu);
    write_file(path, "new-token\n", 0600);
    run("GET", "/auth", &T.r[1]);
    assert_int_equal(T.r[1].err, 0);
    assert_int_equal(T.r[1].status, 200);
    assert_int_equal(T.r[1].done_calls, 1);
    assert_int_equal(S.auth_requests, 2);
    assert_string_equal(S.auth_first, "Bearer old-token");
    assert_string_equal(S.auth, "Bearer new-token");
    assert_null(strstr(T.logs, "old-token"));
    assert_null(strstr(T.logs, "new-token"));
}

static void test_token_file_missing(void **state)
{
    kl__restconfig cfg = cfg_default();
    char path[128];

    (void)state;
    tmp_path(path, sizeof(path), "token");
    cfg.token_file = path;
    loop_start(&cfg);
    run("GET", "/auth", &T.r[0]);
    assert_int_equal(T.r[0].err, K8SLEASE_ECONFIG);
    assert_non_null(strstr(T.r[0].errmsg, path));
    assert_int_equal(S.requests, 0);
}

static void test_client_cert_accepted(void **state)
{
    kl__restconfig cfg = cfg_default();

    (void)state;
    with_client_cert(&cfg, fx.client_cert, fx.client_key);
    loop_start(&cfg);
    run("GET", "/cert", &T.r[0]);
    assert_int_equal(T.r[0].err, 0);
    assert_int_equal(T.r[0].status, 200);
}

static void test_client_cert_files(void **state)
{
    kl__restconfig cfg = cfg_default();
    char cert[256], key[256];

    (void)state;
    snprintf(cert, sizeof(cert), "%s/tls/client.crt", K8SLEASE_TEST_DATA);
    snprintf(key, sizeof(key), "%s/tls/client.key", K8SLEASE_TEST_DATA);
    cfg.cert_file = cert;
    cfg.key_file = key;
    loop_start(&cfg);
    run("GET", "/cert", &T.r[0]);
    assert_int_equal(T.r[0].err, 0);
    assert_int_equal(T.r[0].status, 200);
}

static void test_client_cert_missing(void **state)
{
    kl__restconfig cfg = cfg_default();

    (void)state;
    loop_start(&cfg);
    run("GET", "/cert", &T.r[0]);
    assert_int_equal(T.r[0].err, 0);
    assert_int_equal(T.r[0].status, 401);
}

/* The plugin counts its runs (count, when it starts; done, when it ends)
 * and sleeps slow_s seconds in its runs from the first_slow'th on. */
static void write_plugin(const char *expiry_expr, int first_slow, int slow_s)
{
    char path[128], script[1024];

    tmp_path(path, sizeof(path), "plugin.sh");
    snprintf(script, sizeof(script),
             "#!/bin/sh\n"
             "dir=$(dirname \"$0\")\n"
             "n=$(cat \"$dir/count\" 2>/dev/null || echo 0)\n"
             "echo $((n + 1)) >\"$dir/count\"\n"
             "[ $((n + 1)) -ge %d ] && sleep %d\n"
             "expiry=%s\n"
             "printf '{\"apiVersion\":\"client.authentication.k8s.io/v1\","
             "\"kind\":\"ExecCredential\",\"status\":{\"token\":\"exec-token\","
             "\"expirationTimestamp\":\"%%s\"}}\\n' \"$expiry\"\n"
             "d=$(cat \"$dir/done\" 2>/dev/null || echo 0)\n"
             "echo $((d + 1)) >\"$dir/done\"\n",
             first_slow, slow_s, expiry_expr);
    write_file(path, script, 0700);
}

/* A loop whose credentials come from the plugin. */
static void exec_loop_start(void)
{
    static char *empty[] = {NULL};
    static kl__exec_config exec;
    static char path[128];
    kl__restconfig cfg = cfg_default();

    tmp_path(path, sizeof(path), "plugin.sh");
    memset(&exec, 0, sizeof(exec));
    exec.api_version = "client.authentication.k8s.io/v1";
    exec.command = path;
    exec.args = empty;
    exec.env = empty;
    exec.config_dir = T.tmpdir;
    cfg.exec = &exec;
    set_accept_token("exec-token");
    loop_start(&cfg);
}

static int tmp_count(const char *name)
{
    char path[128];

    tmp_path(path, sizeof(path), name);
    return count_in_file(path);
}

/* Three requests, each answered with the plugin's token. */
static void exec_requests(void)
{
    for (int i = 0; i < 3; i++) {
        memset(&T.r[0], 0, sizeof(T.r[0]));
        run("GET", "/auth", &T.r[0]);
        assert_int_equal(T.r[0].err, 0);
        assert_int_equal(T.r[0].status, 200);
        assert_string_equal(S.auth, "Bearer exec-token");
    }
    pthread_mutex_lock(&T.mu);
    assert_null(strstr(T.logs, "exec-token"));
    pthread_mutex_unlock(&T.mu);
}

static void test_exec_plugin_cached(void **state)
{
    (void)state;
    write_plugin("2099-01-01T00:00:00Z", 99, 0);
    exec_loop_start();
    exec_requests();
    assert_int_equal(tmp_count("count"), 1);
}

/* Credentials that expire in 10 s, inside the 30 s margin: the plugin runs
 * again, on a thread of its own (it sleeps 3 s from its second run on);
 * the requests go on with the current credentials meanwhile, and do not
 * wait for it. */
static void wait_count(const char *name, int n)
{
    for (int64_t deadline = kl__clock_mono_ns() + WAIT_MS * KL_NS_PER_MS; tmp_count(name) < n;
         poll(NULL, 0, 20))
        if (kl__clock_mono_ns() > deadline)
            fail_msg("the plugin's %s count is %d, not %d, after %d ms", name, tmp_count(name), n,
                     WAIT_MS);
}

static void test_exec_plugin_near_expiry(void **state)
{
    int64_t t0;

    (void)state;
    write_plugin("$(date -u -d \"@$(($(date +%s) + 10))\" +%Y-%m-%dT%H:%M:%SZ)", 2, 3);
    exec_loop_start();
    t0 = kl__clock_mono_ns();
    exec_requests();
    /* less than the second run's sleep: no request waited for it */
    assert_true(kl__clock_mono_ns() - t0 < 3 * KL_NS_PER_S);
    wait_count("count", 2); /* one more run, started by the second request */
    assert_int_equal(tmp_count("count"), 2);
    wait_count("done", 2);
}

/* A request with no credentials to go with waits for the plugin, and says
 * so when its deadline passes; freeing the loop ends the plugin at once. */
static void test_exec_plugin_slow_first_run(void **state)
{
    int64_t t0;

    (void)state;
    write_plugin("2099-01-01T00:00:00Z", 1, 30);
    exec_loop_start();
    {
        kl__http_opts o = {0};

        o.method = "GET";
        o.path = "/auth";
        o.timeout_ms = 300;
        start_req(&o, &T.r[0], 0);
        wait_done(&T.r[0]);
    }
    assert_int_equal(T.r[0].err, K8SLEASE_ETIMEOUT);
    assert_non_null(strstr(T.r[0].errmsg, "/auth: timeout: no credentials after 300 ms: the exec "
                                          "plugin \""));
    assert_non_null(strstr(T.r[0].errmsg, "has run for "));
    assert_int_equal(S.requests, 0);
    t0 = kl__clock_mono_ns();
    kl__loop_free(T.loop);
    T.loop = NULL;
    /* not the plugin's 30 s (bound: a tenth of them) */
    assert_true(kl__clock_mono_ns() - t0 < 3 * KL_NS_PER_S);
    assert_int_equal(tmp_count("done"), -1);
}

/* A plugin that fails: the request that waited for it fails with its
 * error, naming the server and the plugin; a request right after does
 * not run it again (it is tried again after a while). */
static void test_exec_plugin_fails(void **state)
{
    char path[128];

    (void)state;
    tmp_path(path, sizeof(path), "plugin.sh");
    write_file(path,
               "#!/bin/sh\n"
               "dir=$(dirname \"$0\")\n"
               "n=$(cat \"$dir/count\" 2>/dev/null || echo 0)\n"
               "echo $((n + 1)) >\"$dir/count\"\n"
               "echo 'the identity provider said no' >&2\n"
               "exit 3\n",
               0700);
    exec_loop_start();
    for (int i = 0; i < 2; i++) {
        run("GET", "/auth", &T.r[i]);
        assert_int_equal(T.r[i].err, K8SLEASE_ECONFIG);
        assert_true(strncmp(T.r[i].errmsg, srv.http.url, strlen(srv.http.url)) == 0);
        assert_non_null(strstr(T.r[i].errmsg, ": credentials: exec plugin \""));
        assert_non_null(
            strstr(T.r[i].errmsg, "exited with status 3: the identity provider said no"));
    }
    assert_int_equal(tmp_count("count"), 1);
    assert_int_equal(S.requests, 0);
}

/* ------------------------------------------------------------------------ */
/* TLS                                                                      */
/* ------------------------------------------------------------------------ */

static void test_wrong_ca(void **state)
{
    kl__restconfig cfg = cfg_default();

    (void)state;
    cfg.ca_pem = fx.other_ca;
    cfg.ca_pem_len = strlen(fx.other_ca);
    loop_start(&cfg);
    run("GET", "/json", &T.r[0]);
    assert_int_equal(T.r[0].err, K8SLEASE_ETLS);
    assert_int_equal(T.r[0].status, 0);
    assert_true(strncmp(T.r[0].errmsg, srv.http.url, strlen(srv.http.url)) == 0);
    assert_non_null(strstr(T.r[0].errmsg, ": TLS: "));
    assert_int_equal(S.requests, 0);
}

/* A part of the TLS configuration OpenSSL cannot use fails every request
 * to the server, naming the part and why, before anything is sent. */
static void test_unusable_tls_config(void **state)
{
    kl__restconfig cfg = cfg_default();

    (void)state;
    cfg.ca_pem = NULL;
    cfg.ca_pem_len = 0;
    cfg.ca_file = "/nonexistent/k8slease-ca.crt";
    loop_start(&cfg);
    run("GET", "/json", &T.r[0]);
    assert_int_equal(T.r[0].err, K8SLEASE_ETLS);
    assert_true(strncmp(T.r[0].errmsg, srv.http.url, strlen(srv.http.url)) == 0);
    assert_non_null(strstr(T.r[0].errmsg, ": TLS: the certificate authority: cannot read "
                                          "/nonexistent/k8slease-ca.crt"));
    kl__loop_free(T.loop);
    T.loop = NULL;

    /* a key that is not the certificate's */
    cfg = cfg_default();
    with_client_cert(&cfg, fx.client_cert, fx.server_key);
    loop_start(&cfg);
    run("GET", "/cert", &T.r[1]);
    assert_int_equal(T.r[1].err, K8SLEASE_ETLS);
    assert_non_null(strstr(T.r[1].errmsg, ": TLS: the client key: "));
    snap();
    assert_int_equal(S.requests, 0);
}

static void test_ca_file(void **state)
{
    kl__restconfig cfg = cfg_default();
    char ca[256];

    (void)state;
    snprintf(ca, sizeof(ca), "%s/tls/ca.crt", K8SLEASE_TEST_DATA);
    cfg.ca_pem = NULL;
    cfg.ca_pem_len = 0;
    cfg.ca_file = ca;
    loop_start(&cfg);
    run("GET", "/json", &T.r[0]);
    assert_int_equal(T.r[0].err, 0);
    assert_int_equal(T.r[0].status, 200);
}

static void test_insecure(void **state)
{
    kl__restconfig cfg = cfg_default();

    (void)state;
    cfg.ca_pem = NULL;
    cfg.ca_pem_len = 0;
    /* Without the CA, verification fails ... */
    loop_start(&cfg);
    run("GET", "/json", &T.r[0]);
    assert_int_equal(T.r[0].err, K8SLEASE_ETLS);
    kl__loop_free(T.loop);
    T.loop = NULL;
    /* ... unless it is off. */
    cfg.insecure = 1;
    loop_start(&cfg);
    run("GET", "/json", &T.r[1]);
    assert_int_equal(T.r[1].err, 0);
    assert_int_equal(T.r[1].status, 200);
}

static void test_tls_server_name(void **state)
{
    kl__restconfig cfg = cfg_default();
    char host[64];

    (void)state;
    /* The URL carries the name (Host header, SNI, verification) while the
     * connection goes to 127.0.0.1. */
    cfg.tls_server_name = "localhost";
    loop_start(&cfg);
    run("GET", "/json", &T.r[0]);
    assert_int_equal(T.r[0].err, 0);
    assert_int_equal(T.r[0].status, 200);
    snprintf(host, sizeof(host), "localhost:%d", srv.http.port);
    assert_string_equal(S.host, host);
    kl__loop_free(T.loop);
    T.loop = NULL;

    /* A name the certificate does not carry (and DNS does not know) fails
     * verification, not resolution: the name is checked, the IP dialled. */
    cfg.tls_server_name = "wrong.invalid";
    loop_start(&cfg);
    run("GET", "/json", &T.r[1]);
    assert_int_equal(T.r[1].err, K8SLEASE_ETLS);
    assert_non_null(strstr(T.r[1].errmsg, srv.http.url));
}

/* An ECDSA key and a certificate for it: a CA (CN=name) or a server
 * certificate for 127.0.0.1, valid from `from` to `to`, signed by
 * issuer/issuer_key or by itself. */
static void make_cert(const char *name, int ca, time_t from, time_t to, gnutls_x509_crt_t issuer,
                      gnutls_x509_privkey_t issuer_key, gnutls_x509_crt_t *crt,
                      gnutls_x509_privkey_t *key)
{
    static const unsigned char loopback[4] = {127, 0, 0, 1};
    static unsigned char serial = 1;
    unsigned char id[64];
    size_t id_len = sizeof(id);
    char dn[128];
    const char *err = NULL;

    assert_int_equal(gnutls_x509_privkey_init(key), 0);
    assert_int_equal(gnutls_x509_privkey_generate(*key, GNUTLS_PK_ECDSA,
                                                  GNUTLS_CURVE_TO_BITS(GNUTLS_ECC_CURVE_SECP256R1),
                                                  0),
                     0);
    assert_int_equal(gnutls_x509_crt_init(crt), 0);
    assert_int_equal(gnutls_x509_crt_set_version(*crt, 3), 0);
    serial++;
    assert_int_equal(gnutls_x509_crt_set_serial(*crt, &serial, 1), 0);
    assert_int_equal(gnutls_x509_crt_set_activation_time(*crt, from), 0);
    assert_int_equal(gnutls_x509_crt_set_expiration_time(*crt, to), 0);
    snprintf(dn, sizeof(dn), "CN=%s", name);
    assert_int_equal(gnutls_x509_crt_set_dn(*crt, dn, &err), 0);
    assert_int_equal(gnutls_x509_crt_set_key(*crt, *key), 0);
    assert_int_equal(gnutls_x509_crt_get_key_id(*crt, 0, id, &id_len), 0);
    assert_int_equal(gnutls_x509_crt_set_subject_key_id(*crt, id, id_len), 0);
    if (ca) {
        assert_int_equal(gnutls_x509_crt_set_basic_constraints(*crt, 1, -1), 0);
        assert_int_equal(
            gnutls_x509_crt_set_key_usage(*crt, GNUTLS_KEY_KEY_CERT_SIGN | GNUTLS_KEY_CRL_SIGN), 0);
    } else {
        assert_int_equal(gnutls_x509_crt_set_basic_constraints(*crt, 0, -1), 0);
        assert_int_equal(gnutls_x509_crt_set_key_usage(*crt, GNUTLS_KEY_DIGITAL_SIGNATURE), 0);
        assert_int_equal(gnutls_x509_crt_set_key_purpose_oid(*crt, GNUTLS_KP_TLS_WWW_SERVER, 0), 0);
        assert_int_equal(gnutls_x509_crt_set_subject_alt_name(*crt, GNUTLS_SAN_IPADDRESS, loopback,
                                                              sizeof(loopback), GNUTLS_FSAN_SET),
                         0);
    }
    if (issuer) {
        id_len = sizeof(id);
        assert_int_equal(gnutls_x509_crt_get_key_id(issuer, 0, id, &id_len), 0);
        assert_int_equal(gnutls_x509_crt_set_authority_key_id(*crt, id, id_len), 0);
    }
    assert_int_equal(gnutls_x509_crt_sign2(*crt, issuer ? issuer : *crt,
                                           issuer_key ? issuer_key : *key, GNUTLS_DIG_SHA256, 0),
                     0);
}

/* PEM of a certificate or key, malloc'ed. */
static char *pem_of(gnutls_x509_crt_t crt, gnutls_x509_privkey_t key)
{
    gnutls_datum_t d = {NULL, 0};
    char *s;

    if (crt)
        assert_int_equal(gnutls_x509_crt_export2(crt, GNUTLS_X509_FMT_PEM, &d), 0);
    else
        assert_int_equal(gnutls_x509_privkey_export2(key, GNUTLS_X509_FMT_PEM, &d), 0);
    s = malloc(d.size + 1);
    assert_non_null(s);
    memcpy(s, d.data, d.size);
    s[d.size] = '\0';
    gnutls_free(d.data);
    return s;
}

/* A GET of /json into r from a server whose CA and certificate are valid
 * as given (seconds relative to now), with that CA trusted. */
static void tls_case(time_t ca_from, time_t ca_to, time_t leaf_from, time_t leaf_to, result *r)
{
    time_t now = time(NULL);
    gnutls_x509_crt_t ca, leaf;
    gnutls_x509_privkey_t ca_key, leaf_key;
    char *ca_pem, *leaf_pem, *key_pem;
    kl__restconfig cfg = cfg_default();

    make_cert("k8slease test CA", 1, now + ca_from, now + ca_to, NULL, NULL, &ca, &ca_key);
    make_cert("127.0.0.1", 0, now + leaf_from, now + leaf_to, ca, ca_key, &leaf, &leaf_key);
    ca_pem = pem_of(ca, NULL);
    leaf_pem = pem_of(leaf, NULL);
    key_pem = pem_of(NULL, leaf_key);
    gnutls_x509_crt_deinit(ca);
    gnutls_x509_crt_deinit(leaf);
    gnutls_x509_privkey_deinit(ca_key);
    gnutls_x509_privkey_deinit(leaf_key);

    kl_fakehttp_serve(&expiry, server_proto(), handle, NULL, key_pem, leaf_pem, NULL);
    free(leaf_pem);
    free(key_pem);

    cfg.server = expiry.url;
    cfg.ca_pem = ca_pem;
    cfg.ca_pem_len = strlen(ca_pem);
    loop_start(&cfg);
    free(ca_pem); /* the loop keeps its own copy */
    run("GET", "/json", r);
    kl__loop_free(T.loop);
    T.loop = NULL;
    kl_fakehttp_stop(&expiry);
}

/* The certificates the test makes work while current (so a failure below
 * is the expiry's doing); expired, they give a TLS error that names the
 * server and says what is wrong. */
static void expired_case(time_t ca_from, time_t ca_to, time_t leaf_from, time_t leaf_to)
{
    result *r = &T.r[1];

    tls_case(-30 * 86400, 30 * 86400, -3600, 30 * 86400, &T.r[0]);
    assert_int_equal(T.r[0].err, 0);
    assert_int_equal(T.r[0].status, 200);
    tls_case(ca_from, ca_to, leaf_from, leaf_to, r);
    print_message("  %s\n", r->errmsg);
    assert_int_equal(r->err, K8SLEASE_ETLS);
    assert_int_equal(r->status, 0);
    assert_true(strncmp(r->errmsg, expiry.url, strlen(expiry.url)) == 0);
    assert_non_null(strstr(r->errmsg, ": TLS: "));
    assert_non_null(strstr(r->errmsg, "expired"));
}

static void test_expired_ca(void **state)
{
    (void)state;
    /* The CA expired yesterday; the server certificate is current. */
    expired_case(-30 * 86400, -86400, -3600, 30 * 86400);
    snap();
    assert_int_equal(S.requests, 1); /* the control's only */
}

static void test_expired_server_certificate(void **state)
{
    (void)state;
    /* A current CA; the server certificate expired an hour ago. */
    expired_case(-30 * 86400, 30 * 86400, -86400, -3600);
    snap();
    assert_int_equal(S.requests, 1); /* the control's only */
}

/* ------------------------------------------------------------------------ */
/* Failures                                                                 */
/* ------------------------------------------------------------------------ */

static void test_timeout(void **state)
{
    kl__restconfig cfg = cfg_default();
    kl__http_opts o = {0};
    int64_t t0;

    (void)state;
    loop_start(&cfg);
    o.method = "GET";
    o.path = "/block";
    o.timeout_ms = 300;
    t0 = kl__clock_mono_ns();
    start_req(&o, &T.r[0], 0);
    wait_done(&T.r[0]);
    assert_int_equal(T.r[0].err, K8SLEASE_ETIMEOUT);
    assert_non_null(strstr(T.r[0].errmsg, "/block: timeout"));
    assert_false(T.r[0].unsent); /* the server had it */
    assert_true(kl__clock_mono_ns() - t0 < 10 * KL_NS_PER_S);
}

static void read_hedges_won(void *arg)
{
    uint64_t *v = arg;

    v[0] = kl__loop_hedges_won(T.loop);
    v[1] = kl__loop_abandoned(T.loop);
}

static void wait_requests(int n)
{
    for (int64_t deadline = kl__clock_mono_ns() + WAIT_MS * KL_NS_PER_MS;; snap()) {
        if (S.requests >= n)
            return;
        if (kl__clock_mono_ns() > deadline)
            fail_msg("the server saw %d requests, expected %d within %d ms", S.requests, n,
                     WAIT_MS);
        poll(NULL, 0, 10);
    }
}

/* A request that gets no answer is sent again on a new connection after
 * hedge_ms; the copy's answer is the request's, and the first connection
 * is abandoned. The copy carries the same method and body. */
static void test_hedge_answers_for_a_hung_connection(void **state)
{
    kl__restconfig cfg = cfg_default();
    kl__http_opts o = {0};
    uint64_t v[2];
    int64_t t0;

    (void)state;
    loop_start(&cfg);
    o.method = "PUT";
    o.path = "/first-blocks";
    o.content_type = "application/json";
    o.body = "{\"x\":1}";
    o.body_len = strlen(o.body);
    o.timeout_ms = 5000;
    o.hedge_ms = 200;
    t0 = kl__clock_mono_ns();
    start_req(&o, &T.r[0], 0);
    wait_done(&T.r[0]);
    print_message("answered by the copy after %lld ms (hedge after 200 ms, timeout 5000 ms)\n",
                  (long long)((kl__clock_mono_ns() - t0) / KL_NS_PER_MS));
    assert_int_equal(T.r[0].done_calls, 1);
    assert_int_equal(T.r[0].err, 0);
    assert_int_equal(T.r[0].status, 200);
    assert_string_equal(T.r[0].body, "{\"copy\":1}");
    assert_int_equal(S.first_blocks, 2);
    assert_string_equal(S.method, "PUT");
    assert_string_equal(S.body, "{\"x\":1}");
    assert_int_equal(kl__loop_call(T.loop, read_hedges_won, v), 0);
    assert_int_equal(v[0], 1);
    assert_int_equal(v[1], 1);
    pthread_mutex_lock(&T.mu);
    assert_non_null(strstr(T.logs, "answered a request later than a new connection: abandoned"));
    pthread_mutex_unlock(&T.mu);
    /* The next request goes on the copy's connection, at once. */
    run("GET", "/json", &T.r[1]);
    assert_int_equal(T.r[1].status, 200);
}

/* Copies are bounded: three per request, four in flight in the loop; a
 * request whose copies all get nothing times out once, at its own
 * deadline; a cancelled one takes its copies along. */
static void test_hedges_bounded(void **state)
{
    kl__restconfig cfg = cfg_default();
    kl__http_opts o = {0};
    kl__http_req *req;
    uint64_t v[2];

    (void)state;
    loop_start(&cfg);
    o.method = "GET";
    o.path = "/block";
    o.timeout_ms = 2000;
    o.hedge_ms = 300;
    start_req(&o, &T.r[0], 0);
    wait_done(&T.r[0]);
    assert_int_equal(T.r[0].done_calls, 1);
    assert_int_equal(T.r[0].err, K8SLEASE_ETIMEOUT);
    assert_non_null(strstr(T.r[0].errmsg, "/block: timeout"));
    assert_int_equal(S.requests, 1 + 3);

    /* Three requests at once: four copies between them, no more. */
    o.timeout_ms = 4000;
    for (int i = 1; i < 4; i++)
        start_req(&o, &T.r[i], 0);
    for (int i = 1; i < 4; i++)
        wait_done(&T.r[i]);
    for (int i = 1; i < 4; i++) {
        assert_int_equal(T.r[i].done_calls, 1);
        assert_int_equal(T.r[i].err, K8SLEASE_ETIMEOUT);
    }
    assert_int_equal(S.requests, 4 + 3 + 4);
    assert_int_equal(kl__loop_call(T.loop, read_hedges_won, v), 0);
    assert_int_equal(v[0], 0);

    /* Cancelled with a copy in flight: no done, nothing left behind (the
     * sanitizers and valgrind runs check the latter). */
    memset(&T.r[0], 0, sizeof(T.r[0]));
    o.timeout_ms = 5000;
    req = start_req(&o, &T.r[0], 0);
    wait_requests(4 + 3 + 4 + 2);
    assert_int_equal(kl__loop_call(T.loop, do_cancel, req), 0);
    memset(&T.r[1], 0, sizeof(T.r[1]));
    run("GET", "/json", &T.r[1]);
    assert_int_equal(T.r[1].status, 200);
    assert_int_equal(T.r[0].done_calls, 0);
}

static void test_connection_refused(void **state)
{
    kl__restconfig cfg = cfg_default();
    char url[64];

    (void)state;
    snprintf(url, sizeof(url), "https://127.0.0.1:%d", kl_test_closed_port());
    cfg.server = url;
    loop_start(&cfg);
    run("GET", "/json", &T.r[0]);
    assert_int_equal(T.r[0].err, K8SLEASE_ETRANSPORT);
    assert_int_equal(T.r[0].status, 0);
    assert_true(strncmp(T.r[0].errmsg, url, strlen(url)) == 0);
    assert_non_null(strstr(T.r[0].errmsg, ": connect: "));
    assert_true(T.r[0].unsent); /* nothing left: safe to send elsewhere */
}

/* A balancer whose backend is gone: it accepts and closes, before a TLS
 * handshake can end; after reading the ClientHello (a clean close), or at
 * once (its unread bytes make it a reset). At most 8 connections. */
typedef struct closer {
    int fd, read_first;
    pthread_t th;
} closer;

static void *closer_main(void *arg)
{
    closer *c = arg;

    for (int i = 0; i < 8; i++) {
        int s = accept(c->fd, NULL, NULL);
        char buf[4096];
        struct pollfd p;

        if (s < 0)
            break; /* shut down */
        p.fd = s;
        p.events = POLLIN;
        if (c->read_first && poll(&p, 1, 10000) == 1 && recv(s, buf, sizeof(buf), 0) < 0)
            perror("closer: recv");
        close(s);
    }
    return NULL;
}

static int closer_start(closer *c, int read_first)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);

    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    c->read_first = read_first;
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(c->fd >= 0);
    assert_int_equal(bind(c->fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(c->fd, 8), 0);
    assert_int_equal(getsockname(c->fd, (struct sockaddr *)&sa, &len), 0);
    assert_int_equal(pthread_create(&c->th, NULL, closer_main, c), 0);
    return ntohs(sa.sin_port);
}

static void closer_stop(closer *c)
{
    shutdown(c->fd, SHUT_RDWR);
    pthread_join(c->th, NULL);
    close(c->fd);
}

/* Closed during the TLS handshake: a failed connection (ETRANSPORT, tried
 * again soon by an election), not a refusal of TLS (ETLS, which waits a
 * retry period); nothing was sent. */
static void test_closed_during_handshake(void **state)
{
    kl__restconfig cfg = cfg_default();
    char url[64];
    closer c;

    (void)state;
    for (int read_first = 1; read_first >= 0; read_first--) {
        snprintf(url, sizeof(url), "https://127.0.0.1:%d", closer_start(&c, read_first));
        cfg.server = url;
        loop_start(&cfg);
        memset(&T.r[0], 0, sizeof(T.r[0]));
        run("GET", "/json", &T.r[0]);
        closer_stop(&c);
        print_message("read_first %d: %s\n", read_first, T.r[0].errmsg);
        assert_int_equal(T.r[0].err, K8SLEASE_ETRANSPORT);
        assert_int_equal(T.r[0].status, 0);
        assert_true(strncmp(T.r[0].errmsg, url, strlen(url)) == 0);
        assert_non_null(strstr(T.r[0].errmsg, ": TLS handshake: "));
        if (read_first)
            assert_non_null(strstr(T.r[0].errmsg, "the server closed the connection"));
        assert_true(T.r[0].unsent);
        kl__loop_free(T.loop);
        T.loop = NULL;
    }
}

static void test_body_cap(void **state)
{
    kl__restconfig cfg = cfg_default();
    char expect[128];

    (void)state;
    loop_start(&cfg);
    run("GET", "/big", &T.r[0]);
    assert_int_equal(T.r[0].err, K8SLEASE_EPROTOCOL);
    snprintf(expect, sizeof(expect), "response body from %s/big larger than 16 MiB", srv.http.url);
    assert_string_equal(T.r[0].errmsg, expect);
}

/* ------------------------------------------------------------------------ */
/* Streams                                                                  */
/* ------------------------------------------------------------------------ */

static void test_stream(void **state)
{
    kl__restconfig cfg = cfg_default();
    kl__http_opts o = {0};

    (void)state;
    loop_start(&cfg);
    o.method = "GET";
    o.path = "/stream";
    o.on_data = on_data;
    o.idle_timeout_ms = WAIT_MS;
    start_req(&o, &T.r[0], 0);
    wait_done(&T.r[0]);
    /* Line 1 reached on_data while the server still held line 2 back. */
    assert_string_equal(T.r[0].first_chunk, "line 1\n");
    assert_true(S.line2_after_ack);
    assert_string_equal(T.r[0].data, "line 1\nline 2\n");
    assert_int_equal(T.r[0].err, 0);
    assert_int_equal(T.r[0].status, 200);
    assert_int_equal(T.r[0].body_len, 0);
}

static void test_stream_non_200_collected(void **state)
{
    kl__restconfig cfg = cfg_default();
    kl__http_opts o = {0};

    (void)state;
    loop_start(&cfg);
    o.method = "GET";
    o.path = "/notfound";
    o.on_data = on_data;
    start_req(&o, &T.r[0], 0);
    wait_done(&T.r[0]);
    assert_int_equal(T.r[0].err, 0);
    assert_int_equal(T.r[0].status, 404);
    assert_int_equal(T.r[0].data_calls, 0);
    assert_non_null(strstr(T.r[0].body, "\"reason\":\"NotFound\""));
}

static void test_stream_idle_timeout(void **state)
{
    kl__restconfig cfg = cfg_default();
    kl__http_opts o = {0};

    (void)state;
    loop_start(&cfg);
    o.method = "GET";
    o.path = "/stall";
    o.on_data = on_data;
    o.idle_timeout_ms = 200;
    start_req(&o, &T.r[0], 0);
    wait_done(&T.r[0]);
    assert_string_equal(T.r[0].data, "line 1\n");
    assert_int_equal(T.r[0].err, K8SLEASE_ETIMEOUT);
    assert_non_null(strstr(T.r[0].errmsg, "/stall: timeout: no data for 200 ms"));
}

static void test_stream_abort(void **state)
{
    kl__restconfig cfg = cfg_default();
    kl__http_opts o = {0};

    (void)state;
    loop_start(&cfg);
    o.method = "GET";
    o.path = "/stall";
    o.on_data = on_data;
    T.r[0].abort_with = K8SLEASE_EPROTOCOL;
    start_req(&o, &T.r[0], 0);
    wait_done(&T.r[0]);
    assert_int_equal(T.r[0].data_calls, 1);
    assert_int_equal(T.r[0].err, K8SLEASE_EPROTOCOL);
}

/* on_open: once, when the 200's headers are in, before any data; never for
 * another status. */
static void test_stream_open(void **state)
{
    kl__restconfig cfg = cfg_default();
    kl__http_opts o = {0};

    (void)state;
    loop_start(&cfg);
    o.method = "GET";
    o.path = "/stream";
    o.on_data = on_data;
    o.on_open = on_open;
    start_req(&o, &T.r[0], 0);
    wait_done(&T.r[0]);
    assert_int_equal(T.r[0].open_calls, 1);
    assert_int_equal(T.r[0].data_before_open, 0);
    assert_string_equal(T.r[0].data, "line 1\nline 2\n");
    o.path = "/notfound";
    start_req(&o, &T.r[1], 0);
    wait_done(&T.r[1]);
    assert_int_equal(T.r[1].status, 404);
    assert_int_equal(T.r[1].open_calls, 0);
}

/* More requests than libcurl gets at once: the others wait their turn, and
 * a waiting request can be cancelled. */
static struct {
    int done, failed, next;
    char why[256];
    kl__http_req *reqs[400];
} many;

static void many_done(const kl__http_result *res, void *arg)
{
    int i = (int)(intptr_t)arg;

    pthread_mutex_lock(&T.mu);
    many.done++;
    if (res->err != 0 || res->status != 200) {
        if (!many.failed++)
            snprintf(many.why, sizeof(many.why), "request %d: HTTP %ld: %s", i, res->status,
                     res->errmsg);
    }
    pthread_cond_broadcast(&T.cond);
    pthread_mutex_unlock(&T.mu);
}

static void start_many(void *arg)
{
    kl__http_opts o = {0};

    (void)arg;
    o.method = "GET";
    o.path = "/json";
    o.timeout_ms = WAIT_MS;
    for (int i = 0; i < 400; i++)
        assert_non_null(many.reqs[i] = kl__http_start(T.loop, &o, many_done, (void *)(intptr_t)i));
    /* still waiting for a slot: cancelled without a callback */
    for (int i = 390; i < 400; i++)
        kl__http_cancel(T.loop, many.reqs[i]);
}

static void start_many_noop(void *arg)
{
    (void)arg;
}

static void test_requests_wait_for_a_slot(void **state)
{
    kl__restconfig cfg = cfg_default();
    int done, failed;

    (void)state;
    memset(&many, 0, sizeof(many));
    loop_start(&cfg);
    assert_int_equal(kl__loop_call(T.loop, start_many, NULL), 0);
    {
        struct timespec until = deadline_after(WAIT_MS);

        pthread_mutex_lock(&T.mu);
        while (many.done < 390 && pthread_cond_timedwait(&T.cond, &T.mu, &until) != ETIMEDOUT)
            ;
        done = many.done;
        pthread_mutex_unlock(&T.mu);
    }
    assert_int_equal(done, 390);
    /* the loop turns on: no callback for the cancelled ones */
    assert_int_equal(kl__loop_call(T.loop, start_many_noop, NULL), 0);
    pthread_mutex_lock(&T.mu);
    done = many.done;
    failed = many.failed;
    pthread_mutex_unlock(&T.mu);
    assert_int_equal(done, 390);
    if (failed)
        fail_msg("%d requests failed, the first: %s", failed, many.why);
}

static void set_dead_timeout(void *arg)
{
    kl__loop_set_dead_timeout(T.loop, *(int64_t *)arg);
}

/* A connected TCP socket of this process whose peer is the test server:
 * the client side of the loop's connection. */
static int client_socket(int *fd_out)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *de;
    int found = 0;

    assert_non_null(d);
    while (!found && (de = readdir(d))) {
        struct sockaddr_in peer;
        socklen_t len = sizeof(peer);
        int fd = atoi(de->d_name);

        if (de->d_name[0] == '.' || getpeername(fd, (struct sockaddr *)&peer, &len) != 0 ||
            peer.sin_family != AF_INET || ntohs(peer.sin_port) != srv.http.port)
            continue;
        *fd_out = fd;
        found = 1;
    }
    closedir(d);
    return found;
}

/* New connections get keepalive and TCP_USER_TIMEOUT from the dead-peer
 * timeout (probes after half of it, whole seconds, at least 1). */
static void test_dead_connection_timeout(void **state)
{
    kl__restconfig cfg = cfg_default();
    int64_t ms = 1500;
    int fd = -1, v = 0;
    unsigned int timeout = 0;
    socklen_t len = sizeof(v);

    (void)state;
    loop_start(&cfg);
    assert_int_equal(kl__loop_call(T.loop, set_dead_timeout, &ms), 0);
    ms = 60000; /* never raised */
    assert_int_equal(kl__loop_call(T.loop, set_dead_timeout, &ms), 0);
    run("GET", "/json", &T.r[0]);
    assert_int_equal(T.r[0].status, 200);
    /* the connection stays in libcurl's cache */
    assert_true(client_socket(&fd));
    assert_int_equal(getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &v, &len), 0);
    assert_int_equal(v, 1);
#ifdef TCP_USER_TIMEOUT
    len = sizeof(timeout);
    assert_int_equal(getsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &timeout, &len), 0);
    assert_int_equal(timeout, 1500);
    len = sizeof(v);
    assert_int_equal(getsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &v, &len), 0);
    assert_int_equal(v, 1);
#endif
}

static void test_cancel(void **state)
{
    kl__restconfig cfg = cfg_default();
    kl__http_opts o = {0};
    kl__http_req *req;

    (void)state;
    loop_start(&cfg);
    o.method = "GET";
    o.path = "/block";
    o.timeout_ms = 2000;
    /* In flight, cancelled later; cancelled at once; cancelled from on_data. */
    req = start_req(&o, &T.r[0], 0);
    start_req(&o, &T.r[1], 1);
    o.path = "/stall";
    o.timeout_ms = 0;
    o.on_data = on_data;
    T.r[2].cancel_from_data = 1;
    start_req(&o, &T.r[2], 0);
    assert_int_equal(kl__loop_call(T.loop, do_cancel, req), 0);
    pthread_mutex_lock(&T.mu);
    wait_flag(&T.mu, &T.cond, &T.r[2].data_calls, WAIT_MS);
    pthread_mutex_unlock(&T.mu);
    assert_int_equal(T.r[2].data_calls, 1);

    /* Had they not been cancelled, their 2 s timeout would have passed by
     * the time this one times out too (long enough that a loaded machine
     * cannot time them out before they are cancelled). */
    o.path = "/block";
    o.on_data = NULL;
    o.timeout_ms = 2500;
    start_req(&o, &T.r[3], 0);
    wait_done(&T.r[3]);
    assert_int_equal(T.r[3].err, K8SLEASE_ETIMEOUT);
    assert_int_equal(T.r[0].done_calls, 0);
    assert_int_equal(T.r[1].done_calls, 0);
    assert_int_equal(T.r[2].done_calls, 0);
}

static void test_free_with_requests_in_flight(void **state)
{
    kl__restconfig cfg = cfg_default();
    kl__http_opts o = {0};
    int i;

    (void)state;
    loop_start(&cfg);
    o.method = "GET";
    o.path = "/block";
    for (i = 0; i < 2; i++)
        start_req(&o, &T.r[i], 0);
    o.path = "/stall";
    o.on_data = on_data;
    start_req(&o, &T.r[2], 0);
    o.path = "/json";
    o.on_data = NULL;
    start_req(&o, &T.r[3], 0);
    pthread_mutex_lock(&T.mu);
    wait_flag(&T.mu, &T.cond, &T.r[2].data_calls, WAIT_MS);
    pthread_mutex_unlock(&T.mu);
    kl__loop_free(T.loop);
    T.loop = NULL;
    for (i = 0; i < 3; i++)
        assert_int_equal(T.r[i].done_calls, 0);
    /* LeakSanitizer checks that the easy handles and buffers went too. */
}

/* ------------------------------------------------------------------------ */
/* Loop: timers, closures, blocking calls                                   */
/* ------------------------------------------------------------------------ */

#define NTIMERS 200

static struct {
    kl__timer t[NTIMERS];
    int64_t at[NTIMERS];
    int armed[NTIMERS];
    int order[NTIMERS];
    int nfired, expected, early;
    kl__timer last; /* after every other deadline, cancelled ones included */
    int last_fired;
} TT;

static void on_timer(kl__timer *t, void *arg)
{
    int i = (int)(t - TT.t);

    (void)arg;
    if (kl__loop_now(T.loop) < t->at || t->slot != 0)
        TT.early++;
    TT.order[TT.nfired++] = i;
}

static void on_last_timer(kl__timer *t, void *arg)
{
    (void)t;
    (void)arg;
    pthread_mutex_lock(&T.mu);
    TT.last_fired = 1;
    pthread_cond_broadcast(&T.cond);
    pthread_mutex_unlock(&T.mu);
}

static void arm_timers(void *arg)
{
    int64_t now = kl__loop_now(T.loop);
    uint32_t seed = 12345;
    int i;

    (void)arg;
    for (i = 0; i < NTIMERS; i++) {
        seed = seed * 1103515245u + 12345u;
        TT.at[i] = now + (int64_t)((seed >> 8) % 100 + 1) * KL_NS_PER_MS;
        kl__timer_init(&TT.t[i], on_timer, NULL);
        kl__timer_arm(T.loop, &TT.t[i], TT.at[i]);
        TT.armed[i] = 1;
    }
    /* Cancel every third, move every seventh (earlier or later). */
    for (i = 0; i < NTIMERS; i++) {
        if (i % 3 == 0) {
            kl__timer_cancel(T.loop, &TT.t[i]);
            kl__timer_cancel(T.loop, &TT.t[i]); /* twice is harmless */
            TT.armed[i] = 0;
        } else if (i % 7 == 0) {
            TT.at[i] = now + (int64_t)((i * 37) % 120 + 1) * KL_NS_PER_MS;
            kl__timer_arm(T.loop, &TT.t[i], TT.at[i]);
        }
    }
    for (i = 0; i < NTIMERS; i++)
        TT.expected += TT.armed[i];
    kl__timer_init(&TT.last, on_last_timer, NULL);
    kl__timer_arm(T.loop, &TT.last, now + 200 * KL_NS_PER_MS);
}

static void test_timers(void **state)
{
    kl__restconfig cfg = cfg_default();
    int i;

    (void)state;
    memset(&TT, 0, sizeof(TT));
    loop_start(&cfg);
    assert_int_equal(kl__loop_call(T.loop, arm_timers, NULL), 0);
    pthread_mutex_lock(&T.mu);
    wait_flag(&T.mu, &T.cond, &TT.last_fired, WAIT_MS);
    pthread_mutex_unlock(&T.mu);
    if (!TT.last_fired)
        fail_msg("the last timer did not fire within %d ms", WAIT_MS);
    kl__loop_free(T.loop);
    T.loop = NULL;
    assert_int_equal(TT.nfired, TT.expected);
    assert_int_equal(TT.early, 0);
    for (i = 0; i < TT.nfired; i++) {
        assert_true(TT.armed[TT.order[i]]);
        if (i > 0)
            assert_true(TT.at[TT.order[i - 1]] <= TT.at[TT.order[i]]);
    }
}

#define NPOSTS 2000

static struct {
    int seen[2][NPOSTS];
    int count[2];
    int out_of_order;
} PP;

static void record_post(void *arg)
{
    intptr_t v = (intptr_t)arg;
    int producer = (int)(v / NPOSTS), n = (int)(v % NPOSTS);

    if (n != PP.count[producer])
        PP.out_of_order++;
    PP.seen[producer][PP.count[producer]++] = n;
}

static void *producer(void *arg)
{
    intptr_t p = (intptr_t)arg, i;

    for (i = 0; i < NPOSTS; i++)
        if (kl__loop_post(T.loop, record_post, (void *)(p * NPOSTS + i)) != 0)
            return (void *)1;
    return NULL;
}

static void noop(void *arg)
{
    (void)arg;
}

static void test_post_fifo(void **state)
{
    kl__restconfig cfg = cfg_default();
    pthread_t th[2];
    void *rc[2];
    intptr_t i;

    (void)state;
    memset(&PP, 0, sizeof(PP));
    loop_start(&cfg);
    for (i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&th[i], NULL, producer, (void *)i), 0);
    for (i = 0; i < 2; i++) {
        pthread_join(th[i], &rc[i]);
        assert_null(rc[i]);
    }
    /* FIFO: this runs after every closure posted before it. */
    assert_int_equal(kl__loop_call(T.loop, noop, NULL), 0);
    assert_int_equal(PP.count[0], NPOSTS);
    assert_int_equal(PP.count[1], NPOSTS);
    assert_int_equal(PP.out_of_order, 0);
}

static struct {
    int ran, on_thread, nested, sync_err, from_test_thread;
} CC;

static void call_probe(void *arg)
{
    kl__http_opts o = {0};

    (void)arg;
    CC.ran = 1;
    CC.on_thread = kl__loop_on_thread(T.loop);
    CC.nested = kl__loop_call(T.loop, noop, NULL);
    o.method = "GET";
    o.path = "/json";
    CC.sync_err = kl__http_sync(T.loop, &o, NULL, NULL, NULL);
}

static void test_call(void **state)
{
    kl__restconfig cfg = cfg_default();

    (void)state;
    memset(&CC, 0, sizeof(CC));
    loop_start(&cfg);
    CC.from_test_thread = kl__loop_on_thread(T.loop);
    assert_int_equal(kl__loop_call(T.loop, call_probe, NULL), 0);
    assert_int_equal(CC.ran, 1); /* returned after the closure ran */
    assert_int_equal(CC.on_thread, 1);
    assert_int_equal(CC.from_test_thread, 0);
    assert_int_equal(CC.nested, K8SLEASE_ESTATE);
    assert_int_equal(CC.sync_err, K8SLEASE_ESTATE);
    snap();
    assert_int_equal(S.requests, 0);
}

static void test_sync(void **state)
{
    kl__restconfig cfg = cfg_default();
    kl__http_opts o = {0};
    long status = 0;
    char *body = NULL;
    size_t len = 0;

    (void)state;
    loop_start(&cfg);
    o.method = "GET";
    o.path = "/json";
    o.timeout_ms = WAIT_MS;
    assert_int_equal(kl__http_sync(T.loop, &o, &status, &body, &len), 0);
    assert_int_equal(status, 200);
    assert_non_null(body);
    assert_string_equal(body, "{\"kind\":\"Lease\",\"metadata\":{}}");
    assert_int_equal(len, strlen(body));
    kl__free(body);
    body = NULL;

    o.path = "/block";
    o.timeout_ms = 200;
    assert_int_equal(kl__http_sync(T.loop, &o, &status, &body, &len), K8SLEASE_ETIMEOUT);
    assert_null(body);
    assert_non_null(strstr(k8slease_error_last(), "/block: timeout"));
}

/* Fail the Nth allocation of the library, for every N along new loop ->
 * request -> free: each attempt fails cleanly (ENOMEM, no crash, no leak
 * under LeakSanitizer) or succeeds. */
static start_args alloc_start; /* not on the stack: see T */

static void try_start(void *arg)
{
    start_args *s = arg;

    s->req = kl__http_start(T.loop, &s->opts, on_done, s->r);
}

static void test_alloc_failures(void **state)
{
    kl__restconfig cfg = cfg_default();
    char token[] = "alloc-token";
    int n, err, completed = 0;

    (void)state;
    set_accept_token(token);
    cfg.token = token;
    for (n = 0; n < 120; n++) {
        memset(&T.r[0], 0, sizeof(T.r[0]));
        memset(&alloc_start, 0, sizeof(alloc_start));
        alloc_start.opts.method = "PUT";
        alloc_start.opts.path = "/auth";
        alloc_start.opts.content_type = "application/json";
        alloc_start.opts.body = "{}";
        alloc_start.opts.body_len = 2;
        alloc_start.opts.timeout_ms = WAIT_MS;
        alloc_start.r = &T.r[0];
        kl__alloc_fail_after(n);
        if ((err = kl__loop_new(&T.loop, &cfg, NULL, NULL)) < 0) {
            kl__alloc_fail_after(-1);
            assert_int_equal(err, K8SLEASE_ENOMEM);
            assert_null(T.loop);
            continue;
        }
        if (kl__loop_call(T.loop, try_start, &alloc_start) == 0 && alloc_start.req) {
            wait_done(&T.r[0]);
            if (T.r[0].err == 0) {
                assert_int_equal(T.r[0].status, 200);
                completed++;
            } else {
                assert_int_equal(T.r[0].err, K8SLEASE_ENOMEM);
            }
        }
        kl__loop_free(T.loop);
        T.loop = NULL;
        kl__alloc_fail_after(-1);
    }
    /* The budget outgrew what a round needs. */
    assert_true(completed > 10);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_get_json, setup, teardown),
        cmocka_unit_test_setup_teardown(test_body_and_content_type, setup, teardown),
        cmocka_unit_test_setup_teardown(test_status_404, setup, teardown),
        cmocka_unit_test(test_status_error_mapping),
        cmocka_unit_test(test_url_escape),
        cmocka_unit_test_setup_teardown(test_bad_server_url, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bearer_token, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bearer_line_wiped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_token_file_rotation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_token_file_missing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_client_cert_accepted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_client_cert_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_client_cert_missing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_exec_plugin_cached, setup, teardown),
        cmocka_unit_test_setup_teardown(test_exec_plugin_near_expiry, setup, teardown),
        cmocka_unit_test_setup_teardown(test_exec_plugin_slow_first_run, setup, teardown),
        cmocka_unit_test_setup_teardown(test_exec_plugin_fails, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wrong_ca, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ca_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unusable_tls_config, setup, teardown),
        cmocka_unit_test_setup_teardown(test_insecure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tls_server_name, setup, teardown),
        cmocka_unit_test_setup_teardown(test_expired_ca, setup, teardown),
        cmocka_unit_test_setup_teardown(test_expired_server_certificate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_connection_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_closed_during_handshake, setup, teardown),
        cmocka_unit_test_setup_teardown(test_body_cap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stream, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stream_non_200_collected, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stream_idle_timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stream_abort, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stream_open, setup, teardown),
        cmocka_unit_test_setup_teardown(test_requests_wait_for_a_slot, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dead_connection_timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cancel, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hedge_answers_for_a_hung_connection, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hedges_bounded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_free_with_requests_in_flight, setup, teardown),
        cmocka_unit_test_setup_teardown(test_timers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_post_fifo, setup, teardown),
        cmocka_unit_test_setup_teardown(test_call, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sync, setup, teardown),
        cmocka_unit_test_setup_teardown(test_alloc_failures, setup, teardown),
    };

    /* before the library's own curl_global_init, which then keeps these */
    if (curl_global_init_mem(CURL_GLOBAL_ALL, cw_malloc, cw_free, cw_realloc, cw_strdup,
                             cw_calloc) != CURLE_OK)
        return 1;
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
