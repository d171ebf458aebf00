/* The etcd conn (src/etcd/conn.c) without an etcd: endpoint parsing and
 * name checks as tables, then the conn against fake gateways on 127.0.0.1
 * (libmicrohttpd, plain http) that answer with the bodies a real etcd 3.4
 * gave (tests/data/etcd-samples): error mapping, failover, authentication
 * and re-authentication, watch stream framing and cancelling, holder get
 * and release, and a failing allocator over the blocking calls.
 *
 * Every wait is bounded; nothing sleeps to synchronise. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
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

#include <microhttpd.h>

#include "core/client.h"
#include "core/clock.h"
#include "core/common.h"
#include "etcd/client.h"
#include "failalloc.h"
#include "etcd/codec.h"
#include "fakehttp.h"
#include "testlib.h"

#ifndef K8SLEASE_TEST_DATA
#error "K8SLEASE_TEST_DATA must name tests/data"
#endif

#define WAIT_MS  10000
#define MAX_REQS 64
#define PASSWORD "s3cret-pw"

static char *read_sample(const char *name)
{
    return kl_test_read_data("etcd-samples", name, NULL);
}

/* ------------------------------------------------------------------------ */
/* Endpoints and names                                                      */
/* ------------------------------------------------------------------------ */

static void endpoints_ok(void **state)
{
    static const struct {
        const char *in;
        size_t n;
        const char *out[3];
    } cases[] = {
        {"http://127.0.0.1:2379", 1, {"http://127.0.0.1:2379"}},
        {"https://etcd-0.example:2379/", 1, {"https://etcd-0.example:2379"}},
        {" HTTP://a:1 ,\thttp://b_c.d-e:65535/ ", 2, {"http://a:1", "http://b_c.d-e:65535"}},
        {"https://[::1]:2379,https://[fe80::1]:2380,https://10.0.0.3:2379",
         3,
         {"https://[::1]:2379", "https://[fe80::1]:2380", "https://10.0.0.3:2379"}},
    };
    (void)state;

    for (size_t i = 0; i < KL_ARRAY_LEN(cases); i++) {
        char **eps = NULL;
        size_t n = 0;

        if (kl__etcd_endpoints_parse(cases[i].in, &eps, &n) != 0)
            fail_msg("\"%s\": %s", cases[i].in, kl__error_get());
        assert_int_equal(n, cases[i].n);
        for (size_t j = 0; j < n; j++)
            assert_string_equal(eps[j], cases[i].out[j]);
        assert_null(eps[n]);
        kl__etcd_endpoints_free(eps);
    }
    kl__etcd_endpoints_free(NULL);
}

static void endpoints_errors(void **state)
{
    static const struct {
        const char *in, *msg;
    } cases[] = {
        {NULL, "etcd_endpoints is NULL"},
        {"", "etcd_endpoints \"\": endpoint 1 is empty"},
        {"http://a:1,,http://b:2", "endpoint 2 is empty"},
        {"http://a:1,", "endpoint 2 is empty"},
        {"127.0.0.1:2379", "\"127.0.0.1:2379\": must be http://host:port or https://host:port"},
        {"ftp://x:1", "etcd_endpoints: \"ftp://x:1\": scheme must be http or https"},
        {"unix://sock", "\"unix://sock\": scheme must be http or https"},
        {"http://x", "\"http://x\": port missing"},
        {"http://x:", "port must be a number from 1 to 65535"},
        {"http://x:0", "port must be a number from 1 to 65535"},
        {"http://x:65536", "port must be a number from 1 to 65535"},
        {"http://x:123456", "port must be a number from 1 to 65535"},
        {"http://x:12a", "port must be a number from 1 to 65535"},
        {"http://root:pw@x:1", "user info is not allowed"},
        {"http://x:1/v3", "\"http://x:1/v3\": a path is not allowed"},
        {"http://x:1//", "a path is not allowed"},
        {"http://x:1?a=b", "a query or fragment is not allowed"},
        {"http://:1", "host missing"},
        {"http://a b:1", "bad character in host name"},
        {"http://[::1", "bad IPv6 address"},
        {"http://[]:1", "bad IPv6 address"},
        {"http://[::g]:1", "bad IPv6 address"},
        {"http://[::1]", "port missing"},
        {"http://a:1,https://b:2",
         "\"https://b:2\": all endpoints must use one scheme (the first is "
         "http)"},
        {"https://a:1,http://b:2", "(the first is https)"},
    };
    (void)state;

    for (size_t i = 0; i < KL_ARRAY_LEN(cases); i++) {
        char **eps = (char **)1;
        size_t n = 7;

        if (kl__etcd_endpoints_parse(cases[i].in, &eps, &n) != K8SLEASE_EINVAL)
            fail_msg("\"%s\": accepted", cases[i].in ? cases[i].in : "(null)");
        assert_null(eps);
        assert_int_equal(n, 0);
        if (!strstr(kl__error_get(), cases[i].msg))
            fail_msg("\"%s\": message \"%s\" lacks \"%s\"", cases[i].in, kl__error_get(),
                     cases[i].msg);
    }
}

static void check_name(void **state)
{
    char name[402];

    (void)state;
    assert_int_equal(kl__etcd_check_name("election name", NULL), K8SLEASE_EINVAL);
    assert_string_equal(kl__error_get(), "election name is NULL");
    assert_int_equal(kl__etcd_check_name("election name", ""), K8SLEASE_EINVAL);
    assert_string_equal(kl__error_get(), "election name is empty");
    /* any bytes but NUL: etcd keys are bytes */
    assert_int_equal(kl__etcd_check_name("election name", "a/b c\xff\x01"), 0);
    memset(name, 'n', sizeof(name));
    name[400] = '\0';
    assert_int_equal(kl__etcd_check_name("election name", name), 0);
    name[400] = 'n';
    name[401] = '\0';
    assert_int_equal(kl__etcd_check_name("election name", name), K8SLEASE_EINVAL);
    assert_non_null(strstr(kl__error_get(), "longer than 400 bytes (401)"));
}

/* ------------------------------------------------------------------------ */
/* Fake gateways                                                            */
/* ------------------------------------------------------------------------ */

/* A canned answer for a path. */
typedef struct route {
    const char *path;
    unsigned status;
    char *body; /* owned */
} route;

typedef struct req_rec {
    char path[64];
    char auth[64];
    char body[1024];
} req_rec;

typedef struct fake {
    kl_fakehttp http; /* http.url: "http://127.0.0.1:PORT" */
    pthread_mutex_t mu;
    pthread_cond_t cv; /* a request arrived, or released */
    route routes[8];
    int nroutes;
    int unavailable;   /* every answer: 503, gRPC 14 "no leader" */
    int auth;          /* tokens required on /v3/kv/ */
    int auth_disabled; /* authenticate: "authentication is not enabled" */
    int refuse_tokens; /* every token is refused, fresh ones too */
    int tokens_issued; /* token i is "tok<i>" */
    char valid[32];    /* the token accepted now ("" none) */
    /* A member that hangs, for the watch streams' liveness bound: */
    int watch_hold;        /* /v3/watch: its route's lines, then silent and open */
    int range_hang;        /* /v3/kv/range: no answer */
    const char *late_line; /* sent on a held watch once a range came (NULL: none) */
    int released;          /* set by fake_stop: held answers end */
    req_rec reqs[MAX_REQS];
    int nreqs;
} fake;

/* Wait on f->cv (f->mu held), 10 ms at most: callers loop on their
 * condition and their own bound. */
static void fake_wait(fake *f)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 10 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&f->cv, &f->mu, &ts);
}

static int count_locked(fake *f, const char *path)
{
    int n = 0;

    for (int i = 0; i < f->nreqs; i++)
        n += strcmp(f->reqs[i].path, path) == 0;
    return n;
}

/* A held watch answer: body first, then f->late_line after the first
 * range, then nothing until the fake stops (bounded). */
typedef struct held {
    fake *f;
    char *body;
    size_t len;
    int late_sent;
} held;

static ssize_t read_held(void *cls, uint64_t pos, char *buf, size_t max)
{
    held *h = cls;
    fake *f = h->f;
    int64_t until = kl__clock_mono_ns() + 20 * KL_NS_PER_S;
    size_t n;

    if (pos < h->len) {
        n = h->len - (size_t)pos < max ? h->len - (size_t)pos : max;
        memcpy(buf, h->body + pos, n);
        return (ssize_t)n;
    }
    pthread_mutex_lock(&f->mu);
    if (f->late_line && !h->late_sent) {
        while (!f->released && count_locked(f, "/v3/kv/range") == 0 && kl__clock_mono_ns() < until)
            fake_wait(f);
        h->late_sent = 1;
        n = strlen(f->late_line);
        if (!f->released && n <= max) {
            memcpy(buf, f->late_line, n);
            pthread_mutex_unlock(&f->mu);
            return (ssize_t)n;
        }
    }
    while (!f->released && kl__clock_mono_ns() < until)
        fake_wait(f);
    pthread_mutex_unlock(&f->mu);
    return MHD_CONTENT_READER_END_OF_STREAM;
}

static void held_free(void *cls)
{
    held *h = cls;

    free(h->body);
    free(h);
}

static enum MHD_Result reply_held(fake *f, struct MHD_Connection *c, const char *body)
{
    held *h = calloc(1, sizeof(*h));
    struct MHD_Response *r;
    enum MHD_Result ret;

    if (!h || !(h->body = strdup(body))) {
        free(h);
        return MHD_NO;
    }
    h->f = f;
    h->len = strlen(body);
    r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, read_held, h, held_free);
    MHD_add_response_header(r, "Content-Type", "application/json");
    ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *body)
{
    return kl_fakehttp_reply(c, status, "application/json", body);
}

static enum MHD_Result handle(void *arg, struct MHD_Connection *c, const char *method,
                              const char *url, const char *body, size_t body_len)
{
    fake *f = arg;
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    char out[256];
    req_rec *rec;

    (void)method;
    (void)body_len;
    pthread_mutex_lock(&f->mu);
    if (f->nreqs < MAX_REQS) {
        rec = &f->reqs[f->nreqs++];
        snprintf(rec->path, sizeof(rec->path), "%s", url);
        snprintf(rec->auth, sizeof(rec->auth), "%s", auth ? auth : "");
        snprintf(rec->body, sizeof(rec->body), "%s", body);
        pthread_cond_broadcast(&f->cv);
    }
    if (strcmp(url, "/v3/kv/range") == 0 && f->range_hang) {
        int64_t until = kl__clock_mono_ns() + 20 * KL_NS_PER_S;

        while (!f->released && kl__clock_mono_ns() < until)
            fake_wait(f);
    }
    if (f->unavailable) {
        pthread_mutex_unlock(&f->mu);
        return reply(c, 503,
                     "{\"error\":\"etcdserver: no leader\",\"message\":\"etcdserver: no "
                     "leader\",\"code\":14}");
    }
    if (strcmp(url, "/v3/auth/authenticate") == 0) {
        if (f->auth_disabled) {
            pthread_mutex_unlock(&f->mu);
            return reply(c, 412,
                         "{\"error\":\"etcdserver: authentication is not enabled\",\"message\":"
                         "\"etcdserver: authentication is not enabled\",\"code\":9}");
        }
        if (!strstr(body, "\"password\":\"" PASSWORD "\"")) {
            pthread_mutex_unlock(&f->mu);
            return reply(c, 400,
                         "{\"error\":\"etcdserver: authentication failed, invalid user ID or "
                         "password\",\"message\":\"etcdserver: authentication failed, invalid "
                         "user ID or password\",\"code\":3}");
        }
        snprintf(f->valid, sizeof(f->valid), "tok%d", ++f->tokens_issued);
        snprintf(out, sizeof(out), "{\"header\":{\"revision\":\"1\"},\"token\":\"%s\"}", f->valid);
        pthread_mutex_unlock(&f->mu);
        return reply(c, 200, out);
    }
    if (f->auth && strncmp(url, "/v3/kv/", 7) == 0 &&
        (!auth || strcmp(auth, f->valid) != 0 || f->refuse_tokens)) {
        pthread_mutex_unlock(&f->mu);
        if (!auth)
            return reply(c, 400,
                         "{\"error\":\"etcdserver: user name is empty\",\"message\":\"etcdserver: "
                         "user name is empty\",\"code\":3}");
        return reply(c, 401,
                     "{\"error\":\"etcdserver: invalid auth token\",\"message\":\"etcdserver: "
                     "invalid auth token\",\"code\":16}");
    }
    for (int i = 0; i < f->nroutes; i++) {
        if (strcmp(f->routes[i].path, url) == 0) {
            unsigned status = f->routes[i].status;
            char *answer = strdup(f->routes[i].body);
            int hold = f->watch_hold && strcmp(url, "/v3/watch") == 0 && status == 200;
            enum MHD_Result ret;

            pthread_mutex_unlock(&f->mu);
            ret = hold ? reply_held(f, c, answer ? answer : "")
                       : reply(c, status, answer ? answer : "");
            free(answer);
            return ret;
        }
    }
    pthread_mutex_unlock(&f->mu);
    return reply(c, 404, "Not Found");
}

static fake *fake_start(void)
{
    fake *f = calloc(1, sizeof(*f));

    assert_non_null(f);
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    kl_fakehttp_start(&f->http, handle, f, NULL, NULL, NULL);
    return f;
}

static void fake_route(fake *f, const char *path, unsigned status, const char *sample_or_body)
{
    route *r = &f->routes[f->nroutes++];

    assert_true(f->nroutes <= (int)KL_ARRAY_LEN(f->routes));
    r->path = path;
    r->status = status;
    r->body = strchr(sample_or_body, '{') || strchr(sample_or_body, ' ')
                  ? strdup(sample_or_body)
                  : read_sample(sample_or_body);
    assert_non_null(r->body);
}

static int fake_count(fake *f, const char *path)
{
    int n;

    pthread_mutex_lock(&f->mu);
    n = count_locked(f, path);
    pthread_mutex_unlock(&f->mu);
    return n;
}

/* Wait until f got n requests for path (bounded); returns how many. */
static int fake_wait_count(fake *f, const char *path, int n, int64_t ms)
{
    int64_t until = kl__clock_mono_ns() + ms * KL_NS_PER_MS;
    int got;

    pthread_mutex_lock(&f->mu);
    while ((got = count_locked(f, path)) < n && kl__clock_mono_ns() < until)
        fake_wait(f);
    pthread_mutex_unlock(&f->mu);
    return got;
}

/* The body of the i-th request for path ("" if none). */
static void fake_body(fake *f, const char *path, int i, char *out, size_t cap)
{
    out[0] = '\0';
    pthread_mutex_lock(&f->mu);
    for (int k = 0; k < f->nreqs; k++)
        if (strcmp(f->reqs[k].path, path) == 0 && i-- == 0) {
            snprintf(out, cap, "%s", f->reqs[k].body);
            break;
        }
    pthread_mutex_unlock(&f->mu);
}

static void fake_stop(fake *f)
{
    pthread_mutex_lock(&f->mu);
    f->released = 1;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
    kl_fakehttp_stop(&f->http);
    for (int i = 0; i < f->nroutes; i++)
        free(f->routes[i].body);
    pthread_cond_destroy(&f->cv);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

/* ------------------------------------------------------------------------ */
/* Clients and their log                                                    */
/* ------------------------------------------------------------------------ */

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static kl__buf logbuf;

static void log_cb(k8slease_log_level level, const char *msg, void *ud)
{
    (void)level;
    (void)ud;
    pthread_mutex_lock(&log_mu);
    kl__buf_printf(&logbuf, "%s\n", msg);
    pthread_mutex_unlock(&log_mu);
}

static int log_has(const char *s)
{
    int has;

    pthread_mutex_lock(&log_mu);
    has = logbuf.data && strstr(logbuf.data, s) != NULL;
    pthread_mutex_unlock(&log_mu);
    return has;
}

static void log_reset(void)
{
    pthread_mutex_lock(&log_mu);
    kl__buf_free(&logbuf);
    pthread_mutex_unlock(&log_mu);
}

static k8slease_client *client_new(const char *endpoints, const char *user, const char *password)
{
    k8slease_client_options o = K8SLEASE_CLIENT_OPTIONS_INIT;
    k8slease_client *c = NULL;

    o.backend = K8SLEASE_BACKEND_ETCD;
    o.etcd_endpoints = endpoints;
    o.etcd_username = user;
    o.etcd_password = password;
    o.log_cb = log_cb;
    o.log_level = K8SLEASE_LOG_DEBUG;
    if (k8slease_client_new(&c, &o) != 0)
        fail_msg("client: %s", k8slease_error_last());
    return c;
}

/* One blocking POST; returns the code, body freed. */
static int post(k8slease_client *c, const char *path, const char *body)
{
    char *out = NULL;
    size_t len = 0;
    int err = kl__etcd_sync(kl__etcd_of(c), path, body, 2000, &out, &len);

    if (err == 0)
        assert_non_null(out);
    else
        assert_null(out);
    kl__free(out);
    return err;
}

static int teardown(void **state)
{
    (void)state;
    kl__alloc_fail_after(-1);
    log_reset();
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The conn                                                                 */
/* ------------------------------------------------------------------------ */

static void answers_mapped(void **state)
{
    fake *f = fake_start();
    k8slease_client *c;
    char want[256];

    (void)state;
    fake_route(f, "/v3/kv/range", 200, "kv_range_leader.json");
    fake_route(f, "/v3/lease/revoke", 404, "lease_revoke_unknown.json");
    fake_route(f, "/v3/lease/grant", 400, "lease_grant_ttl_too_large.json");
    fake_route(f, "/v3/kv/txn", 500, "upstream connect error");
    c = client_new(f->http.url, NULL, NULL);

    assert_int_equal(post(c, "/v3/kv/range", "{}"), 0);
    assert_int_equal(post(c, "/v3/lease/revoke", "{\"ID\":\"1\"}"), K8SLEASE_ENOTFOUND);
    snprintf(want, sizeof(want),
             "etcd %s/v3/lease/revoke: requested lease not found (HTTP 404, gRPC code 5)",
             f->http.url);
    assert_string_equal(k8slease_error_last(), want);
    assert_int_equal(post(c, "/v3/lease/grant", "{}"), K8SLEASE_ESERVER); /* gRPC 11 */
    assert_non_null(strstr(k8slease_error_last(), "(HTTP 400, gRPC code 11)"));
    /* not the gateway: named as such, never taken for an etcd answer */
    assert_int_equal(post(c, "/v3/no/such", "{}"), K8SLEASE_EPROTOCOL);
    snprintf(want, sizeof(want),
             "etcd %s/v3/no/such: HTTP 404: Not Found (not an etcd gateway answer)", f->http.url);
    assert_string_equal(k8slease_error_last(), want);
    assert_int_equal(post(c, "/v3/kv/txn", "{}"), K8SLEASE_ESERVER);
    assert_non_null(strstr(k8slease_error_last(), "HTTP 500: upstream connect error"));
    k8slease_client_free(c);
    fake_stop(f);
}

static void failover_on_refused_connection(void **state)
{
    fake *f = fake_start();
    k8slease_client *c;
    char eps[160], first[64], want[256];

    (void)state;
    fake_route(f, "/v3/kv/range", 200, "kv_range_empty.json");
    snprintf(first, sizeof(first), "http://127.0.0.1:%d", kl_test_closed_port());
    snprintf(eps, sizeof(eps), "%s,%s", first, f->http.url);
    c = client_new(eps, NULL, NULL);
    assert_string_equal(kl__etcd_conn_endpoint(kl__etcd_of(c)), first);
    /* refused: never sent, so tried at once on the next endpoint */
    assert_int_equal(post(c, "/v3/kv/range", "{}"), 0);
    assert_string_equal(kl__etcd_conn_endpoint(kl__etcd_of(c)), f->http.url);
    snprintf(want, sizeof(want), "etcd: %s failed (connect: ", first);
    assert_true(log_has(want));
    snprintf(want, sizeof(want), "; trying %s", f->http.url);
    assert_true(log_has(want));
    k8slease_client_free(c);

    /* alone, the refused endpoint is the error */
    c = client_new(first, NULL, NULL);
    assert_int_equal(post(c, "/v3/kv/range", "{}"), K8SLEASE_ETRANSPORT);
    snprintf(want, sizeof(want), "etcd %s: connect: ", first);
    assert_non_null(strstr(k8slease_error_last(), want));
    k8slease_client_free(c);
    fake_stop(f);
}

static void failover_on_unavailable(void **state)
{
    fake *a = fake_start(), *b = fake_start();
    k8slease_client *c;
    char eps[160];

    (void)state;
    a->unavailable = 1;
    fake_route(b, "/v3/kv/range", 200, "kv_range_empty.json");
    snprintf(eps, sizeof(eps), "%s,%s", a->http.url, b->http.url);
    c = client_new(eps, NULL, NULL);
    /* etcd answered "no leader": the call fails (it may have been applied
     * by a member that lost its leader) and the next one goes elsewhere */
    assert_int_equal(post(c, "/v3/kv/range", "{}"), K8SLEASE_ETRANSPORT);
    assert_non_null(strstr(k8slease_error_last(), "no leader (HTTP 503, gRPC code 14)"));
    assert_string_equal(kl__etcd_conn_endpoint(kl__etcd_of(c)), b->http.url);
    assert_int_equal(post(c, "/v3/kv/range", "{}"), 0);
    assert_int_equal(fake_count(a, "/v3/kv/range"), 1);
    assert_int_equal(fake_count(b, "/v3/kv/range"), 1);
    /* round robin: b failing sends us back to a */
    b->unavailable = 1;
    assert_int_equal(post(c, "/v3/kv/range", "{}"), K8SLEASE_ETRANSPORT);
    assert_string_equal(kl__etcd_conn_endpoint(kl__etcd_of(c)), a->http.url);
    k8slease_client_free(c);
    fake_stop(a);
    fake_stop(b);
}

static void auth_token_and_renewal(void **state)
{
    fake *f = fake_start();
    k8slease_client *c;

    (void)state;
    f->auth = 1;
    fake_route(f, "/v3/kv/range", 200, "kv_range_empty.json");
    fake_route(f, "/v3/lease/keepalive", 200, "lease_keepalive.json");
    c = client_new(f->http.url, "root", PASSWORD);
    /* no request before the first call */
    assert_int_equal(fake_count(f, "/v3/auth/authenticate"), 0);
    assert_int_equal(post(c, "/v3/kv/range", "{}"), 0);
    assert_int_equal(fake_count(f, "/v3/auth/authenticate"), 1);
    pthread_mutex_lock(&f->mu);
    assert_string_equal(f->reqs[f->nreqs - 1].auth, "tok1"); /* raw, no "Bearer" */
    assert_non_null(strstr(f->reqs[0].body, "\"name\":\"root\""));
    pthread_mutex_unlock(&f->mu);
    assert_int_equal(post(c, "/v3/lease/keepalive", "{}"), 0);
    assert_int_equal(fake_count(f, "/v3/auth/authenticate"), 1);

    /* the token expires at the server: one re-authentication, one re-send */
    pthread_mutex_lock(&f->mu);
    f->valid[0] = '\0';
    pthread_mutex_unlock(&f->mu);
    assert_int_equal(post(c, "/v3/kv/range", "{}"), 0);
    assert_int_equal(fake_count(f, "/v3/auth/authenticate"), 2);
    assert_int_equal(fake_count(f, "/v3/kv/range"), 3);
    pthread_mutex_lock(&f->mu);
    assert_string_equal(f->reqs[f->nreqs - 1].auth, "tok2");
    pthread_mutex_unlock(&f->mu);

    /* secrets never reach the log */
    assert_true(log_has("authenticated as \"root\""));
    assert_false(log_has(PASSWORD));
    assert_false(log_has("tok1"));
    assert_false(log_has("tok2"));
    k8slease_client_free(c);
    fake_stop(f);
}

/* A token refused again right after a fresh one: no loop, the error. */
static void auth_refused_twice(void **state)
{
    fake *f = fake_start();
    k8slease_client *c;

    (void)state;
    f->auth = 1;
    fake_route(f, "/v3/kv/range", 200, "kv_range_empty.json");
    c = client_new(f->http.url, "root", PASSWORD);
    assert_int_equal(post(c, "/v3/kv/range", "{}"), 0);
    pthread_mutex_lock(&f->mu);
    f->refuse_tokens = 1;
    pthread_mutex_unlock(&f->mu);
    assert_int_equal(post(c, "/v3/kv/range", "{}"), K8SLEASE_EAUTH);
    assert_non_null(strstr(k8slease_error_last(), "invalid auth token (HTTP 401, gRPC code 16)"));
    assert_int_equal(fake_count(f, "/v3/auth/authenticate"), 2);
    k8slease_client_free(c);
    fake_stop(f);
}

static void auth_wrong_password(void **state)
{
    fake *f = fake_start();
    k8slease_client *c;
    char want[256];

    (void)state;
    f->auth = 1;
    c = client_new(f->http.url, "root", "wrong");
    assert_int_equal(post(c, "/v3/kv/range", "{}"), K8SLEASE_EAUTH);
    snprintf(want, sizeof(want), "etcd %s: authentication failed, invalid user ID or password",
             f->http.url);
    assert_string_equal(k8slease_error_last(), want);
    assert_int_equal(fake_count(f, "/v3/kv/range"), 0);
    /* the next call tries again (the password may have been fixed) */
    assert_int_equal(post(c, "/v3/kv/range", "{}"), K8SLEASE_EAUTH);
    assert_int_equal(fake_count(f, "/v3/auth/authenticate"), 2);
    assert_false(log_has("wrong"));
    k8slease_client_free(c);
    fake_stop(f);
}

static void auth_not_enabled(void **state)
{
    fake *f = fake_start();
    k8slease_client *c;

    (void)state;
    f->auth_disabled = 1;
    fake_route(f, "/v3/kv/range", 200, "kv_range_empty.json");
    c = client_new(f->http.url, "root", PASSWORD);
    /* as clientv3: a user name for a cluster without auth is no error */
    assert_int_equal(post(c, "/v3/kv/range", "{}"), 0);
    assert_int_equal(post(c, "/v3/kv/range", "{}"), 0);
    assert_int_equal(fake_count(f, "/v3/auth/authenticate"), 1);
    pthread_mutex_lock(&f->mu);
    assert_string_equal(f->reqs[f->nreqs - 1].auth, "");
    pthread_mutex_unlock(&f->mu);
    assert_true(log_has("authentication is not enabled; sending requests without a token"));
    k8slease_client_free(c);
    fake_stop(f);
}

/* ------------------------------------------------------------------------ */
/* Watch streams                                                            */
/* ------------------------------------------------------------------------ */

typedef struct stream_test {
    k8slease_client *c;
    kl__etcd_stream *s;
    const kl__etcd_stream_opts *opts; /* NULL: no liveness bound */
    int cancel_after;                 /* cancel from on_msg after this many messages (0: never) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int msgs, created, events, deletes, ended, end_err;
    char end_msg[512];
} stream_test;

static void st_msg(const kl__etcd_watch_msg *m, void *arg)
{
    stream_test *t = arg;

    pthread_mutex_lock(&t->mu);
    t->msgs++;
    t->created += m->created;
    t->events += (int)m->n_events;
    for (size_t i = 0; i < m->n_events; i++)
        t->deletes += m->events[i].type == KL_ETCD_EVENT_DELETE;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    if (t->cancel_after && t->msgs == t->cancel_after) {
        kl__etcd_stream_cancel(t->s);
        t->s = NULL;
    }
}

static void st_end(const kl__etcd_result *res, void *arg)
{
    stream_test *t = arg;

    pthread_mutex_lock(&t->mu);
    t->s = NULL;
    t->ended = 1;
    t->end_err = res->err;
    snprintf(t->end_msg, sizeof(t->end_msg), "%s", res->errmsg);
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

static void st_start(void *arg)
{
    stream_test *t = arg;
    kl__etcd_watch_req wr = {.key = "samples/election/", .key_len = 17, .start_revision = 3};

    t->s = kl__etcd_stream_start(kl__etcd_of(t->c), &wr, t->opts, st_msg, st_end, t);
    assert_non_null(t->s);
}

static void st_cancel(void *arg)
{
    stream_test *t = arg;

    kl__etcd_stream_cancel(t->s);
    t->s = NULL;
}

/* Wait until *flag >= want (bounded); returns what it is. */
static int st_wait(stream_test *t, const int *flag, int want, int64_t ms)
{
    int64_t until = kl__clock_mono_ns() + ms * KL_NS_PER_MS;
    int v;

    pthread_mutex_lock(&t->mu);
    while (*flag < want && kl__clock_mono_ns() < until) {
        struct timespec ts;

        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 10 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&t->cv, &t->mu, &ts);
    }
    v = *flag;
    pthread_mutex_unlock(&t->mu);
    return v;
}

static void stream_test_init(stream_test *t, k8slease_client *c)
{
    memset(t, 0, sizeof(*t));
    t->c = c;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
}

static void stream_test_destroy(stream_test *t)
{
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
}

static void stream_messages(void **state)
{
    fake *f = fake_start();
    stream_test t;

    (void)state;
    /* created, a PUT, a DELETE, then the server ends the response */
    fake_route(f, "/v3/watch", 200, "watch_predecessor_delete.jsonl");
    stream_test_init(&t, client_new(f->http.url, NULL, NULL));
    assert_int_equal(kl__loop_call(t.c->loop, st_start, &t), 0);
    assert_int_equal(st_wait(&t, &t.ended, 1, WAIT_MS), 1);
    assert_int_equal(t.msgs, 3);
    assert_int_equal(t.created, 1);
    assert_int_equal(t.events, 2);
    assert_int_equal(t.deletes, 1);
    assert_int_equal(t.end_err, 0);
    pthread_mutex_lock(&f->mu);
    assert_non_null(
        strstr(f->reqs[0].body, "{\"create_request\":{\"key\":\"c2FtcGxlcy9lbGVjdGlvbi8=\""));
    assert_non_null(strstr(f->reqs[0].body, "\"start_revision\":\"3\""));
    pthread_mutex_unlock(&f->mu);
    k8slease_client_free(t.c);
    stream_test_destroy(&t);
    fake_stop(f);
}

static void stream_cancel_from_message(void **state)
{
    fake *f = fake_start();
    stream_test t;

    (void)state;
    fake_route(f, "/v3/watch", 200, "watch_predecessor_delete.jsonl");
    stream_test_init(&t, client_new(f->http.url, NULL, NULL));
    t.cancel_after = 1; /* the other lines arrive in the same piece */
    assert_int_equal(kl__loop_call(t.c->loop, st_start, &t), 0);
    assert_int_equal(st_wait(&t, &t.msgs, 1, WAIT_MS), 1);
    /* a round trip through the loop: whatever was buffered is handled */
    assert_int_equal(kl__loop_call(t.c->loop, st_cancel, &t), 0);
    assert_int_equal(t.msgs, 1);
    assert_int_equal(t.ended, 0);
    k8slease_client_free(t.c);
    stream_test_destroy(&t);
    fake_stop(f);
}

static void stream_bad_line(void **state)
{
    fake *f = fake_start();
    stream_test t;

    (void)state;
    fake_route(f, "/v3/watch", 200,
               "{\"result\":{\"header\":{\"revision\":\"4\"},\"created\":true}}\n{not json}\n"
               "{\"result\":{\"header\":{\"revision\":\"5\"}}}\n");
    stream_test_init(&t, client_new(f->http.url, NULL, NULL));
    assert_int_equal(kl__loop_call(t.c->loop, st_start, &t), 0);
    assert_int_equal(st_wait(&t, &t.ended, 1, WAIT_MS), 1);
    assert_int_equal(t.msgs, 1);
    assert_int_equal(t.end_err, K8SLEASE_EPROTOCOL);
    assert_non_null(strstr(t.end_msg, "etcd watch message"));
    k8slease_client_free(t.c);
    stream_test_destroy(&t);
    fake_stop(f);
}

/* A watch answered with an error status: on_end with the mapped code. */
static void stream_error_status(void **state)
{
    fake *f = fake_start();
    stream_test t;

    (void)state;
    fake_route(f, "/v3/watch", 500, "watch_bad_base64.json");
    stream_test_init(&t, client_new(f->http.url, NULL, NULL));
    assert_int_equal(kl__loop_call(t.c->loop, st_start, &t), 0);
    assert_int_equal(st_wait(&t, &t.ended, 1, WAIT_MS), 1);
    assert_int_equal(t.msgs, 0);
    assert_true(t.end_err < 0);
    assert_non_null(strstr(t.end_msg, "/v3/watch: "));
    k8slease_client_free(t.c);
    stream_test_destroy(&t);
    fake_stop(f);
}

/* ---- The liveness bound (kl__etcd_stream_opts) ---- */

#define CREATED_4 "{\"result\":{\"header\":{\"revision\":\"4\"},\"created\":true}}\n"

/* Short bounds, so that each case takes a fraction of a second. */
static const kl__etcd_stream_opts quick = {100, 300, 150};

static void stream_liveness_start(stream_test *t, const char *endpoints)
{
    stream_test_init(t, client_new(endpoints, NULL, NULL));
    t->opts = &quick;
    assert_int_equal(kl__loop_call(t->c->loop, st_start, t), 0);
}

static void stream_liveness_end(stream_test *t)
{
    assert_int_equal(kl__loop_call(t->c->loop, st_cancel, t), 0);
    k8slease_client_free(t->c);
    stream_test_destroy(t);
}

/* The member under a silent stream hangs: the probe there gets no answer,
 * the conn moves on, and the stream resumes on the next endpoint from its
 * start revision (nothing was delivered): the events come from there. A
 * silent stream there that answers its probes stays where it is. */
static void stream_probe_without_answer(void **state)
{
    fake *a = fake_start(), *b = fake_start();
    stream_test t;
    char eps[160], body[1024], want[256];

    (void)state;
    a->watch_hold = a->range_hang = 1;
    fake_route(a, "/v3/watch", 200, CREATED_4);
    b->watch_hold = 1;
    fake_route(b, "/v3/watch", 200, "watch_predecessor_delete.jsonl");
    fake_route(b, "/v3/kv/range", 200, "kv_range_leader.json"); /* mod_revision 2 */
    snprintf(eps, sizeof(eps), "%s,%s", a->http.url, b->http.url);
    stream_liveness_start(&t, eps);

    assert_int_equal(st_wait(&t, &t.events, 2, WAIT_MS), 2);
    assert_int_equal(t.created, 2); /* a's, then b's */
    assert_int_equal(t.deletes, 1);
    assert_int_equal(t.ended, 0);
    assert_string_equal(kl__etcd_conn_endpoint(kl__etcd_of(t.c)), b->http.url);
    assert_int_equal(fake_count(a, "/v3/watch"), 1);
    assert_int_equal(fake_count(a, "/v3/kv/range"), 1);
    assert_int_equal(fake_count(b, "/v3/watch"), 1);
    fake_body(a, "/v3/kv/range", 0, body, sizeof(body));
    /* the watched key, last modified first, one, keys only */
    assert_non_null(strstr(body, "\"key\":\"c2FtcGxlcy9lbGVjdGlvbi8=\""));
    assert_non_null(strstr(body, "\"sort_order\":\"DESCEND\""));
    assert_non_null(strstr(body, "\"sort_target\":\"MOD\""));
    assert_non_null(strstr(body, "\"keys_only\":true"));
    fake_body(b, "/v3/watch", 0, body, sizeof(body));
    assert_non_null(strstr(body, "\"start_revision\":\"3\""));
    assert_true(log_has("a probe got no answer"));
    snprintf(want, sizeof(want), "; resuming it on %s from revision 3", b->http.url);
    assert_true(log_has(want));

    /* silent on b, which answers: probed there (not before the silence,
     * once per silence), never resumed */
    assert_int_equal(fake_wait_count(b, "/v3/kv/range", 3, WAIT_MS), 3);
    assert_int_equal(fake_count(b, "/v3/watch"), 1);
    assert_int_equal(fake_count(a, "/v3/kv/range"), 1);
    assert_int_equal(t.created, 2);
    stream_liveness_end(&t);
    fake_stop(a);
    fake_stop(b);
}

/* A probe shows a change at a revision the stream has not delivered, and
 * the stream does not deliver it within the grace: resumed, on the same
 * endpoint (it answers), from the first revision not delivered. */
static void stream_probe_sees_a_missed_change(void **state)
{
    fake *f = fake_start();
    stream_test t;
    char body[1024];

    (void)state;
    f->watch_hold = 1;
    fake_route(f, "/v3/watch", 200, CREATED_4);
    fake_route(f, "/v3/kv/range", 200,
               "{\"header\":{\"revision\":\"7\"},\"kvs\":[{\"key\":\"c2FtcGxlcy9lbGVjdGlvbi8x\","
               "\"create_revision\":\"7\",\"mod_revision\":\"7\",\"version\":\"1\"}],"
               "\"count\":\"1\"}");
    stream_liveness_start(&t, f->http.url);
    assert_int_equal(fake_wait_count(f, "/v3/watch", 2, WAIT_MS), 2);
    assert_true(log_has("has a change at revision 7, not delivered within 150 ms"));
    fake_body(f, "/v3/watch", 1, body, sizeof(body));
    assert_non_null(strstr(body, "\"start_revision\":\"3\""));
    assert_int_equal(t.ended, 0);
    stream_liveness_end(&t);
    fake_stop(f);
}

/* The change a probe saw arrives within the grace (it was on its way):
 * nothing happens, and the resume point moves past it. */
static void stream_probe_change_on_its_way(void **state)
{
    fake *f = fake_start();
    stream_test t;

    (void)state;
    f->watch_hold = 1;
    f->late_line = "{\"result\":{\"header\":{\"revision\":\"7\"},\"events\":[{\"kv\":{\"key\":"
                   "\"c2FtcGxlcy9lbGVjdGlvbi8x\",\"create_revision\":\"7\",\"mod_revision\":"
                   "\"7\",\"version\":\"1\"}}]}}\n";
    fake_route(f, "/v3/watch", 200, CREATED_4);
    fake_route(f, "/v3/kv/range", 200,
               "{\"header\":{\"revision\":\"7\"},\"kvs\":[{\"key\":\"c2FtcGxlcy9lbGVjdGlvbi8x\","
               "\"create_revision\":\"7\",\"mod_revision\":\"7\",\"version\":\"1\"}],"
               "\"count\":\"1\"}");
    stream_liveness_start(&t, f->http.url);
    assert_int_equal(st_wait(&t, &t.events, 1, WAIT_MS), 1);
    /* the next probes show revision 7 again: delivered, so no resume */
    assert_int_equal(fake_wait_count(f, "/v3/kv/range", 3, WAIT_MS), 3);
    assert_int_equal(fake_count(f, "/v3/watch"), 1);
    assert_false(log_has("resuming it"));
    stream_liveness_end(&t);
    fake_stop(f);
}

/* A request on the stream's endpoint failed to get an answer and the conn
 * moved on: the silent stream follows at the end of its silence, without
 * a probe. */
static void stream_follows_the_conn(void **state)
{
    static const kl__etcd_stream_opts slow = {400, 300, 150};
    fake *a = fake_start(), *b = fake_start();
    stream_test t;
    char eps[160], body[1024];

    (void)state;
    a->watch_hold = b->watch_hold = 1;
    fake_route(a, "/v3/watch", 200, CREATED_4);
    fake_route(b, "/v3/watch", 200, CREATED_4);
    snprintf(eps, sizeof(eps), "%s,%s", a->http.url, b->http.url);
    stream_test_init(&t, client_new(eps, NULL, NULL));
    t.opts = &slow;
    assert_int_equal(kl__loop_call(t.c->loop, st_start, &t), 0);
    assert_int_equal(st_wait(&t, &t.created, 1, WAIT_MS), 1);
    pthread_mutex_lock(&a->mu);
    a->unavailable = 1;
    pthread_mutex_unlock(&a->mu);
    assert_int_equal(post(t.c, "/v3/kv/txn", "{}"), K8SLEASE_ETRANSPORT);
    assert_string_equal(kl__etcd_conn_endpoint(kl__etcd_of(t.c)), b->http.url);
    assert_int_equal(st_wait(&t, &t.created, 2, WAIT_MS), 2);
    assert_int_equal(fake_count(a, "/v3/kv/range"), 0);
    assert_int_equal(fake_count(b, "/v3/watch"), 1);
    fake_body(b, "/v3/watch", 0, body, sizeof(body));
    assert_non_null(strstr(body, "\"start_revision\":\"3\""));
    assert_true(log_has("which requests have left"));
    stream_liveness_end(&t);
    fake_stop(a);
    fake_stop(b);
}

/* ------------------------------------------------------------------------ */
/* Holder and release                                                       */
/* ------------------------------------------------------------------------ */

static void holder_get(void **state)
{
    fake *f = fake_start();
    k8slease_client *c;
    k8slease_holder *h = NULL;

    (void)state;
    fake_route(f, "/v3/kv/range", 200, "kv_range_leader.json");
    fake_route(f, "/v3/lease/timetolive", 200, "lease_timetolive_keys.json");
    c = client_new(f->http.url, NULL, NULL);
    assert_int_equal(k8slease_holder_get(c, NULL, "samples/election", 2000, &h), 0);
    assert_string_equal(h->identity, "host-a:8080");
    assert_int_equal(h->epoch, 2);
    assert_int_equal(h->lease_duration_s, 30);
    assert_string_equal(h->resource_version, "2");
    assert_int_equal(h->expired, 0);
    k8slease_holder_free(h);
    /* the leader's range: the prefix, oldest first, one key */
    pthread_mutex_lock(&f->mu);
    assert_string_equal(f->reqs[0].path, "/v3/kv/range");
    assert_string_equal(f->reqs[0].body,
                        "{\"key\":\"c2FtcGxlcy9lbGVjdGlvbi8=\",\"range_end\":"
                        "\"c2FtcGxlcy9lbGVjdGlvbjA=\",\"limit\":\"1\",\"sort_order\":\"ASCEND\","
                        "\"sort_target\":\"CREATE\"}");
    assert_string_equal(f->reqs[1].body, "{\"ID\":\"9196828468227470855\",\"keys\":false}");
    pthread_mutex_unlock(&f->mu);

    assert_int_equal(k8slease_holder_get(c, "ns", "samples/election", 2000, &h), K8SLEASE_EINVAL);
    assert_int_equal(k8slease_holder_get(c, NULL, "", 2000, &h), K8SLEASE_EINVAL);
    k8slease_client_free(c);
    fake_stop(f);
}

static void holder_get_no_candidate_and_no_ttl(void **state)
{
    fake *f = fake_start(), *g = fake_start();
    k8slease_client *c;
    k8slease_holder *h = NULL;

    (void)state;
    fake_route(f, "/v3/kv/range", 200, "kv_range_empty.json");
    c = client_new(f->http.url, NULL, NULL);
    assert_int_equal(k8slease_holder_get(c, NULL, "samples/election", 2000, &h),
                     K8SLEASE_ENOTFOUND);
    assert_string_equal(k8slease_error_last(), "get etcd election samples/election: no candidate");
    assert_null(h);
    k8slease_client_free(c);

    /* timetolive failing is not the holder's failure */
    fake_route(g, "/v3/kv/range", 200, "kv_range_leader.json");
    c = client_new(g->http.url, NULL, NULL);
    assert_int_equal(k8slease_holder_get(c, NULL, "samples/election", 2000, &h), 0);
    assert_string_equal(h->identity, "host-a:8080");
    assert_int_equal(h->lease_duration_s, 0);
    k8slease_holder_free(h);
    k8slease_client_free(c);
    fake_stop(f);
    fake_stop(g);
}

static void release(void **state)
{
    fake *f = fake_start();
    k8slease_client *c;

    (void)state;
    fake_route(f, "/v3/kv/range", 200, "kv_range_leader.json");
    fake_route(f, "/v3/lease/revoke", 200, "lease_revoke.json");
    c = client_new(f->http.url, NULL, NULL);
    assert_int_equal(k8slease_lease_release(c, NULL, "samples/election", "other:1", 0, 2000),
                     K8SLEASE_ECONFLICT);
    assert_string_equal(k8slease_error_last(),
                        "release etcd election samples/election: led by \"host-a:8080\", not "
                        "\"other:1\" (force to release anyway)");
    assert_int_equal(fake_count(f, "/v3/lease/revoke"), 0);
    assert_int_equal(k8slease_lease_release(c, NULL, "samples/election", "", 0, 2000),
                     K8SLEASE_EINVAL);
    assert_int_equal(k8slease_lease_release(c, NULL, "samples/election", "host-a:8080", 0, 2000),
                     0);
    assert_int_equal(fake_count(f, "/v3/lease/revoke"), 1);
    assert_int_equal(k8slease_lease_release(c, NULL, "samples/election", "other:1", 1, 2000), 0);
    assert_int_equal(fake_count(f, "/v3/lease/revoke"), 2);
    pthread_mutex_lock(&f->mu);
    assert_string_equal(f->reqs[f->nreqs - 1].body, "{\"ID\":\"9196828468227470855\"}");
    pthread_mutex_unlock(&f->mu);
    k8slease_client_free(c);
    fake_stop(f);
}

static void release_nobody_or_gone(void **state)
{
    fake *f = fake_start(), *g = fake_start();
    k8slease_client *c;

    (void)state;
    fake_route(f, "/v3/kv/range", 200, "kv_range_empty.json");
    c = client_new(f->http.url, NULL, NULL);
    assert_int_equal(k8slease_lease_release(c, NULL, "samples/election", "x:1", 0, 2000), 0);
    k8slease_client_free(c);
    /* the lease expired between the range and the revoke: released */
    fake_route(g, "/v3/kv/range", 200, "kv_range_leader.json");
    fake_route(g, "/v3/lease/revoke", 404, "lease_revoke_unknown.json");
    c = client_new(g->http.url, NULL, NULL);
    assert_int_equal(k8slease_lease_release(c, NULL, "samples/election", "host-a:8080", 0, 2000),
                     0);
    k8slease_client_free(c);
    fake_stop(f);
    fake_stop(g);
}

/* ------------------------------------------------------------------------ */
/* Failing allocator                                                        */
/* ------------------------------------------------------------------------ */

/* Allocation n of one thread (and every later one of that thread) fails,
 * for n = 0, 1, ... until a run fails none: the calling thread's, then
 * the loop thread's (a call that cannot start or finish must still
 * complete). Every run ends with success or ENOMEM, and frees everything
 * (LeakSanitizer in the sanitizer build). */
static void failalloc(void **state)
{
    fake *f = fake_start();
    k8slease_client *c;
    char eps[200];
    int done = 0;
    long last = 0;

    (void)state;
    f->auth = 1;
    fake_route(f, "/v3/kv/range", 200, "kv_range_leader.json");
    fake_route(f, "/v3/lease/timetolive", 200, "lease_timetolive_keys.json");
    fake_route(f, "/v3/lease/revoke", 200, "lease_revoke.json");
    for (int on_loop = 0; on_loop < 2; on_loop++) {
        done = 0;
        for (long n = 0; !done && n < 5000; n++) {
            char **eps_out = NULL;
            size_t neps = 0;
            k8slease_holder *h = NULL;
            int e1, e2, e3;

            snprintf(eps, sizeof(eps), "http://127.0.0.1:%d, %s", kl_test_closed_port(),
                     f->http.url);
            c = client_new(eps, "root", PASSWORD);
            if (on_loop)
                kl_test_alloc_fail_on_loop(c->loop, n);
            else
                kl__alloc_fail_after(n);
            e1 = kl__etcd_endpoints_parse(eps, &eps_out, &neps);
            e2 = k8slease_holder_get(c, NULL, "samples/election", 2000, &h);
            e3 = k8slease_lease_release(c, NULL, "samples/election", "host-a:8080", 0, 2000);
            done = !kl__alloc_failed();
            kl__alloc_fail_after(-1);
            if ((e1 && e1 != K8SLEASE_ENOMEM) || (e2 && e2 != K8SLEASE_ENOMEM) ||
                (e3 && e3 != K8SLEASE_ENOMEM && e3 != K8SLEASE_EAUTH))
                fail_msg("%s thread's allocation %ld: %d %d %d: %s", on_loop ? "loop" : "caller", n,
                         e1, e2, e3, k8slease_error_last());
            if (done && (e1 || e2 || e3))
                fail_msg("no allocation failed, yet %d %d %d: %s", e1, e2, e3,
                         k8slease_error_last());
            last = n;
            if (e2 == 0)
                assert_string_equal(h->identity, "host-a:8080");
            kl__etcd_endpoints_free(eps_out);
            k8slease_holder_free(h);
            k8slease_client_free(c);
        }
        assert_true(done);
        print_message("failalloc: no failure after %ld allocation(s) of the %s thread\n", last,
                      on_loop ? "loop" : "calling");
    }
    fake_stop(f);
}

int main(void)
{
#define T(f) cmocka_unit_test_teardown(f, teardown)
    const struct CMUnitTest tests[] = {
        T(endpoints_ok),
        T(endpoints_errors),
        T(check_name),
        T(answers_mapped),
        T(failover_on_refused_connection),
        T(failover_on_unavailable),
        T(auth_token_and_renewal),
        T(auth_refused_twice),
        T(auth_wrong_password),
        T(auth_not_enabled),
        T(stream_messages),
        T(stream_cancel_from_message),
        T(stream_bad_line),
        T(stream_error_status),
        T(stream_probe_without_answer),
        T(stream_probe_sees_a_missed_change),
        T(stream_probe_change_on_its_way),
        T(stream_follows_the_conn),
        T(holder_get),
        T(holder_get_no_candidate_and_no_ttl),
        T(release),
        T(release_nobody_or_gone),
        T(failalloc),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
