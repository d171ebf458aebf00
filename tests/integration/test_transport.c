/*
 * test_transport.c - k8slease-testserver's transport: HTTP/2 over TLS (ALPN
 * h2) next to HTTP/1.1 on one port, as a real kube-apiserver serves them;
 * every fault kind over h2; stalled connections over both protocols;
 * restarts under load; the real bookmark cadence.
 *
 * libcurl only (no library under test). Every wait is bounded and fails
 * with a message; nothing sleeps to synchronise. The few checks for an
 * absence (a frozen stream sends nothing) wait a fixed, short time and say so.
 */
#include "harness.h"
#include "tsclient.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <jansson.h>

#define LEASES  "/apis/coordination.k8s.io/v1/namespaces/default/leases"
#define KUBECTL "timeout 60 /usr/bin/kubectl --kubeconfig '%s' --cache-dir '%s/kubecache' "

static ts_server *srv; /* default flags, fast bookmarks (200 ms) */

/* ---- helpers -------------------------------------------------------------- */

/* One client: a kept-alive easy handle that negotiates `version`. */
typedef struct client {
    ts_server *s;
    CURL *h;
    long version; /* CURL_HTTP_VERSION_2TLS or CURL_HTTP_VERSION_1_1 */
    const char *agent;
    bool cert;         /* client certificate instead of the token */
    const char *token; /* instead of the current token, or NULL */
    long timeout_ms;   /* per request; 0: 30 s */
} client;

typedef struct reply {
    CURLcode rc;
    long status;
    long version;  /* CURLINFO_HTTP_VERSION */
    long connects; /* CURLINFO_NUM_CONNECTS: 0 on a reused connection */
    char *body;
    size_t len;
    char retry_after[32];
    char content_type[128];
} reply;

static size_t on_header(char *p, size_t size, size_t n, void *ud)
{
    reply *r = ud;
    size_t len = size * n;
    char line[256];
    snprintf(line, sizeof(line), "%.*s", (int)(len < 255 ? len : 255), p);
    line[strcspn(line, "\r\n")] = '\0';
    if (!strncasecmp(line, "retry-after:", 12))
        snprintf(r->retry_after, sizeof(r->retry_after), "%s", line + 12 + strspn(line + 12, " "));
    if (!strncasecmp(line, "content-type:", 13))
        snprintf(r->content_type, sizeof(r->content_type), "%s",
                 line + 13 + strspn(line + 13, " "));
    return len;
}

static void setup_easy(CURL *h, ts_server *s, long version, const char *agent, bool cert,
                       const char *token, struct curl_slist **hdr)
{
    char *tok = ts_token(s);
    assert_non_null(tok);
    char *auth = tc_fmt("Authorization: Bearer %s", cert ? "not-the-token" : token ? token : tok);
    *hdr = curl_slist_append(NULL, auth);
    *hdr = curl_slist_append(*hdr, "Content-Type: application/json");
    free(auth);
    free(tok);
    curl_easy_setopt(h, CURLOPT_CAINFO, ts_ca_file(s));
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, *hdr);
    curl_easy_setopt(h, CURLOPT_HTTP_VERSION, version);
    curl_easy_setopt(h, CURLOPT_USERAGENT, agent ? agent : "test-transport");
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    if (cert) {
        char *crt = tc_fmt("%s/client.crt", ts_dir(s)), *key = tc_fmt("%s/client.key", ts_dir(s));
        curl_easy_setopt(h, CURLOPT_SSLCERT, crt);
        curl_easy_setopt(h, CURLOPT_SSLKEY, key);
        free(crt);
        free(key);
    }
}

/* A request on c; the transport may fail (r->rc). */
static void req(client *c, const char *method, const char *path, const char *body, reply *r)
{
    struct curl_slist *hdr;
    ts_buf b = {0};
    memset(r, 0, sizeof(*r));
    if (!c->h)
        assert_non_null(c->h = curl_easy_init());
    else
        curl_easy_reset(c->h); /* keeps the connection cache */
    setup_easy(c->h, c->s, c->version, c->agent, c->cert, c->token, &hdr);
    char *url = tc_fmt("%s%s", ts_url(c->s), path);
    curl_easy_setopt(c->h, CURLOPT_URL, url);
    curl_easy_setopt(c->h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c->h, CURLOPT_TIMEOUT_MS, c->timeout_ms ? c->timeout_ms : 30000L);
    curl_easy_setopt(c->h, CURLOPT_WRITEFUNCTION, ts_buf_write);
    curl_easy_setopt(c->h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c->h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c->h, CURLOPT_HEADERDATA, r);
    if (body) {
        curl_easy_setopt(c->h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c->h, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    }
    r->rc = curl_easy_perform(c->h);
    curl_easy_getinfo(c->h, CURLINFO_RESPONSE_CODE, &r->status);
    curl_easy_getinfo(c->h, CURLINFO_HTTP_VERSION, &r->version);
    curl_easy_getinfo(c->h, CURLINFO_NUM_CONNECTS, &r->connects);
    r->body = b.data ? b.data : strdup("");
    r->len = b.len;
    curl_slist_free_all(hdr);
    free(url);
}

static void reply_free(reply *r)
{
    free(r->body);
    r->body = NULL;
}

static void client_free(client *c)
{
    if (c->h)
        curl_easy_cleanup(c->h);
    c->h = NULL;
}

/* A request that must get an answer with status want over HTTP/2; returns the body. */
static json_t *h2(client *c, const char *method, const char *path, const char *body, long want)
{
    reply r;
    req(c, method, path, body, &r);
    if (r.rc != CURLE_OK || r.status != want)
        print_message("%s %s: curl %d (%s), HTTP %ld, body %s\n", method, path, r.rc,
                      curl_easy_strerror(r.rc), r.status, r.body);
    assert_int_equal(r.rc, CURLE_OK);
    assert_int_equal(r.status, want);
    assert_int_equal(r.version, c->version == CURL_HTTP_VERSION_1_1 ? CURL_HTTP_VERSION_1_1
                                                                    : CURL_HTTP_VERSION_2_0);
    json_t *j = json_loads(r.body, 0, NULL);
    reply_free(&r);
    return j;
}

static const char *lease_body(const char *name, const char *holder)
{
    static char b[256];
    snprintf(b, sizeof(b),
             "{\"apiVersion\":\"coordination.k8s.io/v1\",\"kind\":\"Lease\",\"metadata\":{"
             "\"name\":\"%s\"},\"spec\":{\"holderIdentity\":\"%s\",\"leaseDurationSeconds\":15}}",
             name, holder);
    return b;
}

/* ---- a watch on its own thread ----------------------------------------------- */

typedef struct event {
    char type[16];
    char name[64];
    long long at_ms;
} event;

typedef struct watcher {
    ts_server *s;
    char *path;
    long version;
    const char *agent;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    ts_buf line;
    event *ev;
    size_t nev;
    bool done, stop;
    CURLcode rc;
    long status, http_version;
    long long started_ms;
} watcher;

static size_t watch_data(char *p, size_t size, size_t n, void *ud)
{
    watcher *w = ud;
    pthread_mutex_lock(&w->mu);
    for (size_t i = 0; i < size * n; i++) {
        if (p[i] != '\n') {
            ts_buf_write(p + i, 1, 1, &w->line);
            continue;
        }
        json_t *j = json_loads(w->line.data ? w->line.data : "", 0, NULL);
        event e = {.at_ms = tc_now_ms()};
        snprintf(e.type, sizeof(e.type), "%s", json_string_value(tc_at(j, "type")) ?: "?");
        snprintf(e.name, sizeof(e.name), "%s",
                 json_string_value(tc_at(j, "object.metadata.name")) ?: "");
        json_decref(j);
        w->ev = realloc(w->ev, (w->nev + 1) * sizeof(*w->ev));
        w->ev[w->nev++] = e;
        w->line.len = 0;
    }
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return size * n;
}

static int watch_progress(void *ud, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    watcher *w = ud;
    (void)a, (void)b, (void)c, (void)d;
    pthread_mutex_lock(&w->mu);
    bool stop = w->stop;
    pthread_mutex_unlock(&w->mu);
    return stop ? 1 : 0;
}

static void *watch_main(void *arg)
{
    watcher *w = arg;
    struct curl_slist *hdr;
    CURL *h = curl_easy_init();
    setup_easy(h, w->s, w->version, w->agent, false, NULL, &hdr);
    char *url = tc_fmt("%s%s", ts_url(w->s), w->path);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, watch_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, w);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, watch_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, w);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 120L);
    CURLcode rc = curl_easy_perform(h);
    long status = 0, ver = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_getinfo(h, CURLINFO_HTTP_VERSION, &ver);
    curl_easy_cleanup(h);
    curl_slist_free_all(hdr);
    free(url);
    pthread_mutex_lock(&w->mu);
    w->rc = rc;
    w->status = status;
    w->http_version = ver;
    w->done = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static watcher *watch_start(ts_server *s, const char *path, long version, const char *agent)
{
    watcher *w = calloc(1, sizeof(*w));
    assert_non_null(w);
    w->s = s;
    w->path = strdup(path);
    w->version = version;
    w->agent = agent;
    w->started_ms = tc_now_ms();
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    assert_int_equal(pthread_create(&w->thread, NULL, watch_main, w), 0);
    return w;
}

static size_t count_type(watcher *w, const char *type)
{
    size_t n = 0;
    for (size_t i = 0; i < w->nev; i++)
        n += !strcmp(w->ev[i].type, type);
    return n;
}

/* Waits until w has at least n events of type (NULL: any); false on timeout. */
static bool watch_wait(watcher *w, const char *type, size_t n, long ms)
{
    struct timespec dl = tc_deadline_in(CLOCK_REALTIME, ms);
    pthread_mutex_lock(&w->mu);
    while ((type ? count_type(w, type) : w->nev) < n && !w->done)
        if (pthread_cond_timedwait(&w->cv, &w->mu, &dl) != 0)
            break;
    bool ok = (type ? count_type(w, type) : w->nev) >= n;
    pthread_mutex_unlock(&w->mu);
    return ok;
}

static bool watch_wait_done(watcher *w, long ms)
{
    struct timespec dl = tc_deadline_in(CLOCK_REALTIME, ms);
    pthread_mutex_lock(&w->mu);
    while (!w->done)
        if (pthread_cond_timedwait(&w->cv, &w->mu, &dl) != 0)
            break;
    bool done = w->done;
    pthread_mutex_unlock(&w->mu);
    return done;
}

static size_t watch_count(watcher *w, const char *type)
{
    pthread_mutex_lock(&w->mu);
    size_t n = type ? count_type(w, type) : w->nev;
    pthread_mutex_unlock(&w->mu);
    return n;
}

static void watch_stop(watcher *w)
{
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    free(w->ev);
    free(w->line.data);
    free(w->path);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
}

/* ---- setup ------------------------------------------------------------------- */

static int group_setup(void **state)
{
    (void)state;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const char *args[] = {"--bookmark-interval", "200", NULL};
    return ts_start(&srv, args) == 0 ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    int rc = ts_stop(srv);
    curl_global_cleanup();
    return rc == 0 ? 0 : -1;
}

/* ---- HTTP/2 negotiated by libcurl ------------------------------------------------ */

static void test_h2_crud(void **state)
{
    (void)state;
    client c = {srv, NULL, CURL_HTTP_VERSION_2TLS, NULL, false};
    json_decref(h2(&c, "GET", LEASES, NULL, 200));
    json_t *made = h2(&c, "POST", LEASES, lease_body("h2-crud", "a"), 201);
    assert_string_equal(json_string_value(tc_at(made, "spec.holderIdentity")), "a");
    json_t *got = h2(&c, "GET", LEASES "/h2-crud", NULL, 200);
    assert_string_equal(json_string_value(tc_at(got, "metadata.uid")),
                        json_string_value(tc_at(made, "metadata.uid")));
    /* PUT with the current resourceVersion, then the stale one: 409. */
    json_object_set_new(tc_at(got, "spec"), "holderIdentity", json_string("b"));
    char *put = json_dumps(got, JSON_COMPACT);
    json_t *upd = h2(&c, "PUT", LEASES "/h2-crud", put, 200);
    assert_string_equal(json_string_value(tc_at(upd, "spec.holderIdentity")), "b");
    json_t *conflict = h2(&c, "PUT", LEASES "/h2-crud", put, 409);
    assert_string_equal(json_string_value(tc_at(conflict, "reason")), "Conflict");
    json_t *missing = h2(&c, "GET", LEASES "/no-such-lease", NULL, 404);
    assert_string_equal(json_string_value(tc_at(missing, "reason")), "NotFound");
    /* Query strings are decoded over h2 as over HTTP/1.1. */
    json_t *sel = h2(&c, "GET", LEASES "?fieldSelector=metadata.name%3Dh2-crud", NULL, 200);
    assert_int_equal(json_array_size(tc_at(sel, "items")), 1);
    json_t *del = h2(&c, "DELETE", LEASES "/h2-crud", NULL, 200);
    assert_string_equal(json_string_value(tc_at(del, "status")), "Success");
    free(put);
    json_decref(made);
    json_decref(got);
    json_decref(upd);
    json_decref(conflict);
    json_decref(missing);
    json_decref(sel);
    json_decref(del);

    /* A body over the apiserver's 3 MiB limit: 413, flow control intact. */
    size_t big = 4 * 1024 * 1024;
    char *huge = malloc(big + 1);
    assert_non_null(huge);
    memset(huge, ' ', big);
    huge[0] = '{';
    huge[big - 1] = '}';
    huge[big] = '\0';
    json_decref(h2(&c, "POST", LEASES, huge, 413));
    free(huge);
    /* ... and the connection still works. */
    json_decref(h2(&c, "GET", LEASES, NULL, 200));

    /* Authentication over h2: client certificate yes, wrong token no. */
    client cc = {srv, NULL, CURL_HTTP_VERSION_2TLS, NULL, true};
    json_decref(h2(&cc, "GET", LEASES, NULL, 200));
    client_free(&cc);
    client bad = {srv, NULL, CURL_HTTP_VERSION_2TLS, NULL, false, "wrong"};
    json_t *unauth = h2(&bad, "GET", LEASES, NULL, 401);
    assert_string_equal(json_string_value(tc_at(unauth, "reason")), "Unauthorized");
    json_decref(unauth);
    client_free(&bad);

    /* One connection carried all of c's requests. */
    long n = 0;
    curl_easy_getinfo(c.h, CURLINFO_NUM_CONNECTS, &n);
    assert_int_equal(n, 0); /* the last request reused the connection */
    client_free(&c);
    json_t *j = tc_stats(srv);
    assert_true(json_integer_value(tc_at(j, "connections.h2.requests")) >= 10);
    assert_true(json_integer_value(tc_at(j, "connections.h2.total")) >= 1);
    json_decref(j);
}

static void test_h2_watch(void **state)
{
    (void)state;
    client c = {srv, NULL, CURL_HTTP_VERSION_2TLS, NULL, false};
    json_decref(h2(&c, "POST", LEASES, lease_body("h2-watch-0", "a"), 201));
    watcher *w = watch_start(srv, LEASES "?watch=1&allowWatchBookmarks=true",
                             CURL_HTTP_VERSION_2TLS, "h2-watcher");
    assert_true(watch_wait(w, "ADDED", 1, 10000)); /* the synthetic ADDED of h2-watch-0 */
    json_decref(h2(&c, "POST", LEASES, lease_body("h2-watch-1", "a"), 201));
    assert_true(watch_wait(w, "ADDED", 2, 10000));
    json_decref(h2(&c, "DELETE", LEASES "/h2-watch-1", NULL, 200));
    assert_true(watch_wait(w, "DELETED", 1, 10000));
    assert_true(watch_wait(w, "BOOKMARK", 2, 10000)); /* every 200 ms */
    watch_stop(w);

    /* timeoutSeconds ends an h2 stream cleanly (END_STREAM). */
    w = watch_start(srv, LEASES "?watch=1&timeoutSeconds=1", CURL_HTTP_VERSION_2TLS, NULL);
    assert_true(watch_wait_done(w, 20000));
    assert_int_equal(w->rc, CURLE_OK);
    assert_int_equal(w->status, 200);
    assert_int_equal(w->http_version, CURL_HTTP_VERSION_2_0);
    watch_stop(w);
    json_decref(h2(&c, "DELETE", LEASES "/h2-watch-0", NULL, 200));
    client_free(&c);
}

/* 200 watches multiplexed over one h2 connection. */
typedef struct mwatch {
    CURL *h;
    struct curl_slist *hdr;
    size_t bytes, lines;
} mwatch;

static size_t mwatch_data(char *p, size_t size, size_t n, void *ud)
{
    mwatch *m = ud;
    m->bytes += size * n;
    for (size_t i = 0; i < size * n; i++)
        m->lines += p[i] == '\n';
    return size * n;
}

static void drive(CURLM *multi, long ms, bool (*done)(void *), void *arg)
{
    long long end = tc_now_ms() + ms;
    int running = 1;
    while (tc_now_ms() < end) {
        assert_int_equal(curl_multi_perform(multi, &running), CURLM_OK);
        if (done(arg))
            return;
        curl_multi_poll(multi, NULL, 0, 50, NULL);
    }
}

typedef struct mstate {
    mwatch *w;
    size_t n;
    size_t want_lines;
    ts_server *s;
} mstate;

static bool all_have_lines(void *arg)
{
    mstate *st = arg;
    for (size_t i = 0; i < st->n; i++)
        if (st->w[i].lines < st->want_lines)
            return false;
    return true;
}

static void test_h2_many_streams_one_connection(void **state)
{
    (void)state;
    enum { N = 200 };
    /* More streams than kube-apiserver v1.36.3 allows (100): ask for them. */
    const char *args[] = {"--bookmark-interval", "3600000", "--http2-max-streams", "1000", NULL};
    ts_server *s;
    assert_int_equal(ts_start(&s, args), 0);
    long long h2_before = tc_stat_int(s, "connections.h2.total");

    CURLM *multi = curl_multi_init();
    curl_multi_setopt(multi, CURLMOPT_PIPELINING, (long)CURLPIPE_MULTIPLEX);
    curl_multi_setopt(multi, CURLMOPT_MAX_CONCURRENT_STREAMS, 1000L);
    curl_multi_setopt(multi, CURLMOPT_MAX_HOST_CONNECTIONS, 1L);
    mwatch *w = calloc(N, sizeof(*w));
    char *url = tc_fmt("%s%s?watch=1", ts_url(s), LEASES);
    for (int i = 0; i < N; i++) {
        w[i].h = curl_easy_init();
        setup_easy(w[i].h, s, CURL_HTTP_VERSION_2TLS, "multi", false, NULL, &w[i].hdr);
        curl_easy_setopt(w[i].h, CURLOPT_URL, url);
        curl_easy_setopt(w[i].h, CURLOPT_PIPEWAIT, 1L);
        curl_easy_setopt(w[i].h, CURLOPT_WRITEFUNCTION, mwatch_data);
        curl_easy_setopt(w[i].h, CURLOPT_WRITEDATA, &w[i]);
        curl_multi_add_handle(multi, w[i].h);
    }
    /* Open: the server counts N watches. */
    mstate st = {w, N, 0, s};
    long long end = tc_now_ms() + 30000;
    while (tc_now_ms() < end) {
        drive(multi, 200, all_have_lines, &st); /* never true: just runs the transfers */
        if (tc_stat_int(s, "watches.open") >= N)
            break;
    }
    assert_int_equal(tc_stat_int(s, "watches.open"), N);
    /* One event reaches every stream. */
    client c = {s, NULL, CURL_HTTP_VERSION_2TLS, NULL, false};
    json_decref(h2(&c, "POST", LEASES, lease_body("many", "a"), 201));
    st.want_lines = 1;
    drive(multi, 30000, all_have_lines, &st);
    size_t got = 0;
    for (int i = 0; i < N; i++)
        got += w[i].lines >= 1;
    if (got != N)
        print_message("%zu of %d streams got the event\n", got, N);
    assert_int_equal(got, N);

    /* All of them on one connection: libcurl made one, the server saw one more. */
    long connects = 0;
    for (int i = 0; i < N; i++) {
        long n = 0;
        long ver = 0;
        curl_easy_getinfo(w[i].h, CURLINFO_NUM_CONNECTS, &n);
        curl_easy_getinfo(w[i].h, CURLINFO_HTTP_VERSION, &ver);
        assert_int_equal(ver, CURL_HTTP_VERSION_2_0);
        connects += n;
    }
    assert_int_equal(connects, 1);
    /* The harness's own connection and c's, plus the multi's one. */
    long long h2_now = tc_stat_int(s, "connections.h2.total");
    assert_true(h2_now - h2_before <= 3);
    assert_int_equal(tc_stat_int(s, "connections.http1.total"), 0);

    /* Closing the streams (RST_STREAM from libcurl) ends the watches at once. */
    for (int i = 0; i < N; i++) {
        curl_multi_remove_handle(multi, w[i].h);
        curl_easy_cleanup(w[i].h);
        curl_slist_free_all(w[i].hdr);
    }
    curl_multi_cleanup(multi);
    tc_wait_stat_at_most(s, "watches.open", 0, 10000);
    client_free(&c);
    free(w);
    free(url);
    assert_int_equal(ts_stop(s), 0);
}

/* ---- HTTP/1.1 still works ---------------------------------------------------------- */

static void test_http11(void **state)
{
    (void)state;
    /* ALPN http/1.1 on the default server. */
    long long h1_before = tc_stat_int(srv, "connections.http1.total");
    client c = {srv, NULL, CURL_HTTP_VERSION_1_1, NULL, false};
    json_decref(h2(&c, "POST", LEASES, lease_body("h1-lease", "a"), 201));
    json_decref(h2(&c, "GET", LEASES "/h1-lease", NULL, 200));
    json_decref(h2(&c, "GET", LEASES "/h1-none", NULL, 404));
    client cc = {srv, NULL, CURL_HTTP_VERSION_1_1, NULL, true};
    json_decref(h2(&cc, "GET", LEASES, NULL, 200)); /* client certificate through the relay */
    client_free(&cc);
    watcher *w =
        watch_start(srv, LEASES "?watch=1&allowWatchBookmarks=true", CURL_HTTP_VERSION_1_1, NULL);
    assert_true(watch_wait(w, "ADDED", 1, 10000));
    assert_true(watch_wait(w, "BOOKMARK", 1, 10000));
    watch_stop(w);
    json_decref(h2(&c, "DELETE", LEASES "/h1-lease", NULL, 200));
    client_free(&c);
    assert_true(tc_stat_int(srv, "connections.http1.total") >= h1_before + 3);

    /* --no-http2: libcurl asks for h2 and gets HTTP/1.1. */
    const char *args[] = {"--no-http2", NULL};
    ts_server *s;
    assert_int_equal(ts_start(&s, args), 0);
    client d = {s, NULL, CURL_HTTP_VERSION_2TLS, NULL, false};
    reply r;
    req(&d, "GET", LEASES, NULL, &r);
    assert_int_equal(r.rc, CURLE_OK);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.version, CURL_HTTP_VERSION_1_1);
    reply_free(&r);
    client_free(&d);
    json_t *j = tc_stats(s);
    assert_int_equal(json_array_size(tc_at(j, "connections.alpn")), 1);
    assert_int_equal(json_integer_value(tc_at(j, "connections.h2.total")), 0);
    json_decref(j);
    assert_int_equal(ts_stop(s), 0);
}

/* ---- kubectl over h2 ------------------------------------------------------------------ */

static void test_kubectl_h2(void **state)
{
    (void)state;
    if (access("/usr/bin/kubectl", X_OK) != 0) {
        print_message("kubectl not installed: skipping\n");
        skip();
    }
    client c = {srv, NULL, CURL_HTTP_VERSION_2TLS, NULL, false};
    json_decref(h2(&c, "POST", LEASES, lease_body("kubectl-h2", "kholder"), 201));
    client_free(&c);
    json_t *before = tc_stats(srv);
    int rc;
    char *cmd =
        tc_fmt(KUBECTL "get lease kubectl-h2 -o json 2>&1", ts_kubeconfig(srv), ts_dir(srv));
    char *out = tc_run(&rc, "%s", cmd);
    assert_int_equal(rc, 0);
    json_t *k = json_loads(out, 0, NULL);
    assert_non_null(k);
    assert_string_equal(json_string_value(tc_at(k, "spec.holderIdentity")), "kholder");
    json_decref(k);
    free(out);
    free(cmd);
    cmd = tc_fmt(KUBECTL "get lease 2>&1", ts_kubeconfig(srv), ts_dir(srv));
    out = tc_run(&rc, "%s", cmd);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "kubectl-h2"));
    free(out);
    free(cmd);
    /* kubectl's requests came over h2 (Go's transport negotiates it), none over HTTP/1.1. */
    json_t *after = tc_stats(srv);
    long long h2req = json_integer_value(tc_at(after, "connections.h2.requests")) -
                      json_integer_value(tc_at(before, "connections.h2.requests"));
    long long h1req = json_integer_value(tc_at(after, "connections.http1.requests")) -
                      json_integer_value(tc_at(before, "connections.http1.requests"));
    print_message("kubectl: %lld requests over h2, %lld over HTTP/1.1\n", h2req, h1req);
    assert_true(h2req >= 2);
    assert_int_equal(h1req, 0);
    json_decref(before);
    json_decref(after);
}

/* ---- every fault kind over h2 -------------------------------------------------------------- */

typedef struct held {
    client c;
    reply r;
    pthread_t t;
} held;

static void *held_main(void *arg)
{
    held *h = arg;
    req(&h->c, "GET", LEASES, NULL, &h->r);
    return NULL;
}

static void test_h2_faults(void **state)
{
    (void)state;
    client c = {srv, NULL, CURL_HTTP_VERSION_2TLS, "fault-client", false};
    reply r;

    /* error: 503 Status; 429 with Retry-After. */
    tc_control(srv, "POST", "/testserver/v1/faults",
               "{\"kind\":\"error\",\"status\":503,\"count\":1}", 201);
    json_t *j = h2(&c, "GET", LEASES, NULL, 503);
    assert_string_equal(json_string_value(tc_at(j, "reason")), "ServiceUnavailable");
    json_decref(j);
    tc_control(srv, "POST", "/testserver/v1/faults",
               "{\"kind\":\"error\",\"status\":429,\"retry_after\":2,\"count\":1}", 201);
    req(&c, "GET", LEASES, NULL, &r);
    assert_int_equal(r.rc, CURLE_OK);
    assert_int_equal(r.status, 429);
    assert_int_equal(r.version, CURL_HTTP_VERSION_2_0);
    assert_string_equal(r.retry_after, "2");
    reply_free(&r);

    /* error scoped by User-Agent: another client is not hit. */
    tc_control(srv, "POST", "/testserver/v1/faults",
               "{\"kind\":\"error\",\"status\":500,\"match\":{\"user_agent\":\"fault-client\"}}",
               201);
    client other = {srv, NULL, CURL_HTTP_VERSION_2TLS, "someone-else", false};
    json_decref(h2(&other, "GET", LEASES, NULL, 200));
    json_decref(h2(&c, "GET", LEASES, NULL, 500));
    tc_control(srv, "DELETE", "/testserver/v1/faults", NULL, 200);

    /* reset: the stream is reset (RST_STREAM): a transport error, no answer. */
    long long resets = tc_stat_or0(srv, "requests.by_status.reset");
    tc_control(srv, "POST", "/testserver/v1/faults", "{\"kind\":\"reset\",\"count\":1}", 201);
    req(&c, "GET", LEASES, NULL, &r);
    if (r.rc == CURLE_OK)
        print_message("reset over h2 answered HTTP %ld\n", r.status);
    assert_int_not_equal(r.rc, CURLE_OK);
    reply_free(&r);
    assert_int_equal(tc_stat_or0(srv, "requests.by_status.reset"), resets + 1);
    json_decref(h2(&c, "GET", LEASES, NULL, 200)); /* the client goes on */

    /* latency: at least delay_ms. */
    tc_control(srv, "POST", "/testserver/v1/faults",
               "{\"kind\":\"latency\",\"delay_ms\":300,\"count\":1}", 201);
    long long t0 = tc_now_ms();
    json_decref(h2(&c, "GET", LEASES, NULL, 200));
    assert_true(tc_now_ms() - t0 >= 300);

    /* hang: held until the rule is deleted (no timing: we wait for it to be parked). */
    tc_control(srv, "POST", "/testserver/v1/faults", "{\"kind\":\"hang\"}", 201);
    long long suspended = tc_stat_int(srv, "suspended");
    held h = {{srv, NULL, CURL_HTTP_VERSION_2TLS, NULL, false}, {0}, 0};
    assert_int_equal(pthread_create(&h.t, NULL, held_main, &h), 0);
    tc_wait_stat(srv, "suspended", suspended + 1, 10000);
    tc_control(srv, "DELETE", "/testserver/v1/faults", NULL, 200);
    pthread_join(h.t, NULL);
    assert_int_equal(h.r.rc, CURLE_OK);
    assert_int_equal(h.r.status, 200);
    assert_int_equal(h.r.version, CURL_HTTP_VERSION_2_0);
    reply_free(&h.r);
    client_free(&h.c);

    /* freeze_watch: a frozen h2 stream is silent, then catches up. */
    watcher *w = watch_start(srv, LEASES "?watch=1", CURL_HTTP_VERSION_2TLS, "frozen");
    tc_wait_stat(srv, "watches.open", 1, 10000);
    tc_control(srv, "POST", "/testserver/v1/faults",
               "{\"kind\":\"freeze_watch\",\"match\":{\"user_agent\":\"frozen\"}}", 201);
    size_t before = watch_count(w, NULL);
    json_decref(h2(&c, "POST", LEASES, lease_body("frozen-1", "a"), 201));
    /* An absence: 500 ms with nothing is enough to catch a leak past the freeze. */
    assert_false(watch_wait(w, NULL, before + 1, 500));
    tc_control(srv, "DELETE", "/testserver/v1/faults", NULL, 200);
    assert_true(watch_wait(w, "ADDED", 1, 10000));

    /* close watches, cleanly: the h2 stream ends with END_STREAM. */
    tc_control(srv, "POST", "/testserver/v1/watches/close",
               "{\"match\":{\"user_agent\":\"frozen\"}}", 200);
    assert_true(watch_wait_done(w, 10000));
    assert_int_equal(w->rc, CURLE_OK);
    watch_stop(w);
    /* ... and with abort: the stream is reset, the client sees an error. */
    w = watch_start(srv, LEASES "?watch=1", CURL_HTTP_VERSION_2TLS, "aborted");
    assert_true(watch_wait(w, "ADDED", 1, 10000));
    tc_control(srv, "POST", "/testserver/v1/watches/close",
               "{\"abort\":true,\"match\":{\"user_agent\":\"aborted\"}}", 200);
    assert_true(watch_wait_done(w, 10000));
    assert_int_not_equal(w->rc, CURLE_OK);
    watch_stop(w);

    /* respond: a canned body, a padded one, and a trickled one. */
    tc_control(srv, "POST", "/testserver/v1/faults",
               "{\"kind\":\"respond\",\"count\":1,\"content_type\":\"text/html\","
               "\"body\":\"<html>sign in</html>\"}",
               201);
    req(&c, "GET", LEASES, NULL, &r);
    assert_int_equal(r.rc, CURLE_OK);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "<html>sign in</html>");
    assert_string_equal(r.content_type, "text/html");
    reply_free(&r);
    tc_control(srv, "POST", "/testserver/v1/faults",
               "{\"kind\":\"respond\",\"count\":1,\"size\":1000000,\"body\":\"{}\"}", 201);
    req(&c, "GET", LEASES, NULL, &r);
    assert_int_equal(r.rc, CURLE_OK);
    assert_int_equal(r.len, 1000000);
    assert_memory_equal(r.body, "{}  ", 4);
    reply_free(&r);
    tc_control(srv, "POST", "/testserver/v1/faults",
               "{\"kind\":\"respond\",\"count\":1,\"status\":503,\"size\":6,\"interval_ms\":50,"
               "\"body\":\"abc\"}",
               201);
    t0 = tc_now_ms();
    req(&c, "GET", LEASES, NULL, &r);
    assert_int_equal(r.rc, CURLE_OK);
    assert_int_equal(r.status, 503);
    assert_string_equal(r.body, "abc   ");
    assert_true(tc_now_ms() - t0 >= 5 * 50); /* one byte per interval after the first */
    reply_free(&r);
    json_decref(h2(&c, "DELETE", LEASES "/frozen-1", NULL, 200));
    client_free(&c);
    client_free(&other);
}

/* ---- stall: a replica that hangs behind a load balancer ------------------------------------ */

/* POST a rule; returns its id. */
static long long add_rule(ts_server *s, const char *json)
{
    long st = 0;
    char *body = NULL;
    assert_int_equal(ts_control(s, "POST", "/testserver/v1/faults", json, &st, &body), 0);
    if (st != 201)
        print_message("POST fault %s: HTTP %ld %s\n", json, st, body ? body : "");
    assert_int_equal(st, 201);
    json_t *j = json_loads(body, 0, NULL);
    long long id = json_integer_value(tc_at(j, "id"));
    json_decref(j);
    free(body);
    assert_true(id > 0);
    return id;
}

/* GET /testserver/v1/faults/ID (NULL when gone; json_decref it). */
static json_t *get_rule(ts_server *s, long long id)
{
    long st = 0;
    char *body = NULL;
    char *path = tc_fmt("/testserver/v1/faults/%lld", id);
    assert_int_equal(ts_control(s, "GET", path, NULL, &st, &body), 0);
    free(path);
    json_t *j = st == 200 ? json_loads(body, 0, NULL) : NULL;
    assert_true(st == 200 || st == 404);
    free(body);
    return j;
}

/* Waits (polling, at most ms) until the rule's integer field is want. */
static void wait_rule(ts_server *s, long long id, const char *field, long long want, long ms)
{
    long long end = tc_now_ms() + ms, have = -1;
    for (;;) {
        json_t *j = get_rule(s, id);
        have = j ? json_integer_value(tc_at(j, field)) : -1;
        json_decref(j);
        if (have == want)
            return;
        if (tc_now_ms() > end) {
            print_message("fault %lld: %s is %lld, not %lld after %ld ms\n", id, field, have, want,
                          ms);
            fail();
        }
        tc_pause_ms(20);
    }
}

/* One transfer of a multi handle: a request, or a watch read line by line. */
typedef struct mxfer {
    CURL *h;
    struct curl_slist *hdr;
    ts_buf body;
    bool done;
    CURLcode rc;
    long status;
    long connects;
} mxfer;

static void mxfer_start(CURLM *m, mxfer *x, ts_server *s, const char *agent, const char *path,
                        long timeout_ms)
{
    memset(x, 0, sizeof(*x));
    assert_non_null(x->h = curl_easy_init());
    setup_easy(x->h, s, CURL_HTTP_VERSION_2TLS, agent, false, NULL, &x->hdr);
    char *url = tc_fmt("%s%s", ts_url(s), path);
    curl_easy_setopt(x->h, CURLOPT_URL, url);
    free(url);
    curl_easy_setopt(x->h, CURLOPT_PIPEWAIT, 1L); /* multiplexed on the connection there is */
    curl_easy_setopt(x->h, CURLOPT_WRITEFUNCTION, ts_buf_write);
    curl_easy_setopt(x->h, CURLOPT_WRITEDATA, &x->body);
    curl_easy_setopt(x->h, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(x->h, CURLOPT_PRIVATE, x);
    assert_int_equal(curl_multi_add_handle(m, x->h), CURLM_OK);
}

static void mxfer_free(CURLM *m, mxfer *x)
{
    curl_multi_remove_handle(m, x->h);
    curl_easy_cleanup(x->h);
    curl_slist_free_all(x->hdr);
    free(x->body.data);
    memset(x, 0, sizeof(*x));
}

/* Complete lines of x's body that contain needle (NULL: all). */
static size_t mxfer_lines(const mxfer *x, const char *needle)
{
    size_t n = 0;
    const char *p = x->body.data, *end = p ? p + x->body.len : NULL;
    while (p && p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl)
            break;
        size_t k = needle ? strlen(needle) : 0, len = (size_t)(nl - p);
        bool found = !needle;
        for (size_t i = 0; !found && i + k <= len; i++)
            found = !memcmp(p + i, needle, k);
        n += found;
        p = nl + 1;
    }
    return n;
}

/* Runs m's transfers (marking those that end) until until(arg) holds or ms pass. */
static bool mdrive(CURLM *m, long ms, bool (*until)(void *), void *arg)
{
    long long end = tc_now_ms() + ms;
    for (;;) {
        int running, left;
        assert_int_equal(curl_multi_perform(m, &running), CURLM_OK);
        CURLMsg *msg;
        while ((msg = curl_multi_info_read(m, &left))) {
            mxfer *x = NULL;
            if (msg->msg != CURLMSG_DONE)
                continue;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
            x->done = true;
            x->rc = msg->data.result;
            curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &x->status);
            curl_easy_getinfo(x->h, CURLINFO_NUM_CONNECTS, &x->connects);
        }
        if (until && until(arg))
            return true;
        if (tc_now_ms() >= end)
            return false;
        curl_multi_poll(m, NULL, 0, 20, NULL);
    }
}

static bool never(void *arg)
{
    (void)arg;
    return false;
}

static bool is_done(void *arg)
{
    return ((mxfer *)arg)->done;
}

static bool has_bookmark(void *arg)
{
    return mxfer_lines(arg, "\"BOOKMARK\"") >= 1;
}

static bool has_added(void *arg)
{
    return mxfer_lines(arg, "\"ADDED\"") >= 1;
}

typedef struct two {
    mxfer *a, *b;
} two;

static bool both_done(void *arg)
{
    two *t = arg;
    return t->a->done && t->b->done;
}

#define STALL_WATCH LEASES "?watch=1&allowWatchBookmarks=true&fieldSelector=metadata.name%3D"

/*
 * HTTP/2: a watch and requests multiplexed on one connection. The request
 * that hits the rule stalls the connection: from then on no frame comes
 * back on it (no answer to it or to a later request, no event, no
 * bookmark), yet it stays open (the clients' timeouts fire; the watch goes
 * on), while new connections are served at once. Deleting the rule
 * resumes the connection: the watch gets what it missed.
 */
static void test_stall_h2(void **state)
{
    (void)state;
    long long h2_open = tc_stat_int(srv, "connections.h2.open");
    long long stalls = tc_stat_or0(srv, "faults.stall");
    CURLM *m = curl_multi_init();
    curl_multi_setopt(m, CURLMOPT_PIPELINING, (long)CURLPIPE_MULTIPLEX);
    curl_multi_setopt(m, CURLMOPT_MAX_HOST_CONNECTIONS, 1L);
    mxfer w, first, second, third;

    /* The watch (bookmarks every 200 ms) and a first request, answered, on one connection. */
    mxfer_start(m, &w, srv, "stall-h2", STALL_WATCH "stall-h2-ev", 0);
    assert_true(mdrive(m, 10000, has_bookmark, &w));
    mxfer_start(m, &first, srv, "stall-h2", LEASES, 10000);
    assert_true(mdrive(m, 10000, is_done, &first));
    assert_int_equal(first.rc, CURLE_OK);
    assert_int_equal(first.status, 200);
    assert_int_equal(first.connects, 0); /* multiplexed */

    /* The second request hits the rule and stalls the connection. */
    long long id = add_rule(srv, "{\"kind\":\"stall\",\"count\":1,\"match\":{\"user_agent\":"
                                 "\"stall-h2\",\"path_prefix\":\"" LEASES "/stall-h2\"}}");
    mxfer_start(m, &second, srv, "stall-h2", LEASES "/stall-h2-x", 2000);
    long long end = tc_now_ms() + 10000;
    for (;;) {
        mdrive(m, 50, never, NULL);
        json_t *r = get_rule(srv, id);
        bool hit = json_integer_value(tc_at(r, "hits")) == 1;
        json_decref(r);
        if (hit)
            break;
        assert_true(tc_now_ms() < end);
    }
    /* Take in what was on the wire before the stall (at most a bookmark), then count. */
    mdrive(m, 300, never, NULL);
    size_t lines = mxfer_lines(&w, NULL);

    /* A third request on the stalled connection, and an event the watch would show. */
    mxfer_start(m, &third, srv, "stall-h2", LEASES, 2000);
    client fresh = {srv, NULL, CURL_HTTP_VERSION_2TLS, "stall-h2", false};
    long long t0 = tc_now_ms();
    json_decref(h2(&fresh, "POST", LEASES, lease_body("stall-h2-ev", "a"), 201));
    /* A new connection is served at once, even in the rule's scope: its count is used up. */
    json_decref(h2(&fresh, "GET", LEASES "/stall-h2-ev", NULL, 200));
    assert_true(tc_now_ms() - t0 < 1000);
    /* ... and so is a new watch, with the event and bookmarks. */
    mxfer nw;
    CURLM *m2 = curl_multi_init();
    mxfer_start(m2, &nw, srv, "stall-h2", STALL_WATCH "stall-h2-ev", 0);
    assert_true(mdrive(m2, 10000, has_added, &nw));
    assert_true(mdrive(m2, 10000, has_bookmark, &nw));

    /* Nothing comes back on the stalled connection: both requests time out, unanswered. */
    two t = {&second, &third};
    assert_true(mdrive(m, 10000, both_done, &t));
    if (second.rc != CURLE_OPERATION_TIMEDOUT || third.rc != CURLE_OPERATION_TIMEDOUT)
        print_message("stalled requests: curl %d (%s), %d (%s)\n", second.rc,
                      curl_easy_strerror(second.rc), third.rc, curl_easy_strerror(third.rc));
    assert_int_equal(second.rc, CURLE_OPERATION_TIMEDOUT);
    assert_int_equal(third.rc, CURLE_OPERATION_TIMEDOUT);
    assert_int_equal(second.status, 0);
    assert_int_equal(third.status, 0);
    assert_int_equal(second.connects, 0); /* both on the watch's connection */
    assert_int_equal(third.connects, 0);
    /* The watch got nothing in those 2 s (no event, no bookmark), and its connection is open. */
    assert_int_equal(mxfer_lines(&w, NULL), lines);
    assert_false(w.done);
    json_t *r = get_rule(srv, id);
    assert_non_null(r);
    assert_string_equal(json_string_value(tc_at(r, "kind")), "stall");
    assert_int_equal(json_integer_value(tc_at(r, "count")), 1);
    assert_int_equal(json_integer_value(tc_at(r, "hits")), 1);
    assert_int_equal(json_integer_value(tc_at(r, "stalled")), 1);
    json_decref(r);
    assert_int_equal(tc_stat_or0(srv, "faults.stall"), stalls + 1);
    assert_int_equal(tc_stat_int(srv, "connections.stalled"), 1);

    /* Deleting the rule resumes the connection where it stopped: the watch catches up. */
    char *path = tc_fmt("/testserver/v1/faults/%lld", id);
    tc_control(srv, "DELETE", path, NULL, 200);
    free(path);
    assert_true(mdrive(m, 10000, has_added, &w));
    assert_true(mdrive(m, 10000, has_bookmark, &w));
    assert_false(w.done);
    assert_int_equal(tc_stat_int(srv, "connections.stalled"), 0);

    mxfer_free(m, &w);
    mxfer_free(m, &first);
    mxfer_free(m, &second);
    mxfer_free(m, &third);
    curl_multi_cleanup(m);
    mxfer_free(m2, &nw);
    curl_multi_cleanup(m2);
    json_decref(h2(&fresh, "DELETE", LEASES "/stall-h2-ev", NULL, 200));
    client_free(&fresh);
    tc_wait_stat_at_most(srv, "connections.h2.open", h2_open, 10000);
}

static void *stalled_main(void *arg)
{
    held *h = arg;
    req(&h->c, "GET", LEASES, NULL, &h->r);
    return NULL;
}

/*
 * HTTP/1.1: the same per connection. The kept-alive connection of the
 * matching request stalls (no answer; the client's timeout fires, not a
 * reset); a new connection is served at once. When the client gives up,
 * the server lets the connection and its held request go.
 */
static void test_stall_h1(void **state)
{
    (void)state;
    long long h1_open = tc_stat_int(srv, "connections.http1.open");
    long long suspended = tc_stat_int(srv, "suspended");
    held h = {{srv, NULL, CURL_HTTP_VERSION_1_1, "stall-h1", false, NULL, 2000}, {0}, 0};
    json_decref(h2(&h.c, "GET", LEASES, NULL, 200)); /* the connection, kept alive */

    long long id = add_rule(srv, "{\"kind\":\"stall\",\"count\":1,\"match\":{\"user_agent\":"
                                 "\"stall-h1\"}}");
    long long t0 = tc_now_ms();
    assert_int_equal(pthread_create(&h.t, NULL, stalled_main, &h), 0);
    wait_rule(srv, id, "stalled", 1, 10000);
    /* Everybody else is served, the same client too on a new connection. */
    client fresh = {srv, NULL, CURL_HTTP_VERSION_1_1, "stall-h1", false};
    long long t1 = tc_now_ms();
    json_decref(h2(&fresh, "GET", LEASES, NULL, 200));
    client other = {srv, NULL, CURL_HTTP_VERSION_2TLS, "someone-else", false};
    json_decref(h2(&other, "GET", LEASES, NULL, 200));
    assert_true(tc_now_ms() - t1 < 1000);
    client_free(&fresh);
    client_free(&other);

    pthread_join(h.t, NULL);
    if (h.r.rc != CURLE_OPERATION_TIMEDOUT)
        print_message("stalled HTTP/1.1 request: curl %d (%s), HTTP %ld\n", h.r.rc,
                      curl_easy_strerror(h.r.rc), h.r.status);
    assert_int_equal(h.r.rc, CURLE_OPERATION_TIMEDOUT);
    assert_int_equal(h.r.status, 0);
    assert_int_equal(h.r.connects, 0); /* on the kept-alive connection */
    assert_true(tc_now_ms() - t0 >= 1990);
    reply_free(&h.r);
    client_free(&h.c);

    /* The client closed it: the server notices, drops the held request, keeps the rule. */
    wait_rule(srv, id, "stalled", 0, 10000);
    wait_rule(srv, id, "hits", 1, 0);
    tc_wait_stat_at_most(srv, "suspended", suspended, 10000);
    tc_wait_stat_at_most(srv, "connections.http1.open", h1_open, 10000);
    tc_control(srv, "DELETE", "/testserver/v1/faults", NULL, 200);
}

/*
 * A watch request that hits the rule stalls its connection: over HTTP/1.1
 * the watch gets nothing at all (not even its headers) while a new watch
 * on a new connection gets the events and bookmarks; deleting the rule
 * resumes it.
 */
static void test_stall_watch_h1(void **state)
{
    (void)state;
    long long id = add_rule(srv, "{\"kind\":\"stall\",\"count\":1,\"match\":{\"user_agent\":"
                                 "\"stall-w1\",\"verb\":\"watch\"}}");
    watcher *stalled =
        watch_start(srv, STALL_WATCH "stall-w1-ev", CURL_HTTP_VERSION_1_1, "stall-w1");
    wait_rule(srv, id, "stalled", 1, 10000);
    client c = {srv, NULL, CURL_HTTP_VERSION_1_1, "stall-w1", false};
    json_decref(h2(&c, "POST", LEASES, lease_body("stall-w1-ev", "a"), 201));
    watcher *fresh = watch_start(srv, STALL_WATCH "stall-w1-ev", CURL_HTTP_VERSION_1_1, "stall-w1");
    assert_true(watch_wait(fresh, "ADDED", 1, 10000));
    assert_true(watch_wait(fresh, "BOOKMARK", 3, 10000));
    /* While the new one got an event and three bookmarks (600 ms), the stalled one got nothing. */
    assert_int_equal(watch_count(stalled, NULL), 0);
    pthread_mutex_lock(&stalled->mu);
    assert_false(stalled->done);
    pthread_mutex_unlock(&stalled->mu);

    char *path = tc_fmt("/testserver/v1/faults/%lld", id);
    tc_control(srv, "DELETE", path, NULL, 200);
    free(path);
    assert_true(watch_wait(stalled, "ADDED", 1, 10000));
    assert_true(watch_wait(stalled, "BOOKMARK", 1, 10000));
    watch_stop(stalled);
    watch_stop(fresh);
    json_decref(h2(&c, "DELETE", LEASES "/stall-w1-ev", NULL, 200));
    client_free(&c);
}

typedef struct timed {
    held h;
    long long done_ms;
} timed;

static void *timed_main(void *arg)
{
    timed *t = arg;
    req(&t->h.c, "GET", LEASES, NULL, &t->h.r);
    t->done_ms = tc_now_ms();
    return NULL;
}

/*
 * duration_ms: when the rule ends, its connections resume where they
 * stopped and the held requests are answered, on the same connection.
 * Without a count, every connection that carries a matching request while
 * the rule lives stalls.
 */
static void test_stall_duration(void **state)
{
    (void)state;
    long long stalls = tc_stat_or0(srv, "faults.stall");
    timed t[2] = {{{{srv, NULL, CURL_HTTP_VERSION_1_1, "stall-dur", false, NULL, 20000}}},
                  {{{srv, NULL, CURL_HTTP_VERSION_2TLS, "stall-dur", false, NULL, 20000}}}};
    for (int i = 0; i < 2; i++)
        json_decref(h2(&t[i].h.c, "GET", LEASES, NULL, 200)); /* connections, kept alive */

    long long t0 = tc_now_ms();
    long long id = add_rule(srv, "{\"kind\":\"stall\",\"duration_ms\":2000,\"match\":{"
                                 "\"user_agent\":\"stall-dur\"}}");
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i].h.t, NULL, timed_main, &t[i]), 0);
    for (int i = 0; i < 2; i++) {
        pthread_join(t[i].h.t, NULL);
        reply *r = &t[i].h.r;
        if (r->rc != CURLE_OK)
            print_message("%s: curl %d (%s)\n", i ? "h2" : "HTTP/1.1", r->rc,
                          curl_easy_strerror(r->rc));
        assert_int_equal(r->rc, CURLE_OK);
        assert_int_equal(r->status, 200);
        assert_int_equal(r->connects, 0); /* answered on the connection that stalled */
        /* Not before the rule's end: it was created after t0. */
        assert_true(t[i].done_ms - t0 >= 1990);
        reply_free(r);
    }
    assert_int_equal(tc_stat_or0(srv, "faults.stall"), stalls + 2);
    json_t *r = get_rule(srv, id);
    assert_null(r); /* over */
    /* The connections work as before. */
    for (int i = 0; i < 2; i++) {
        long long t1 = tc_now_ms();
        reply rr;
        req(&t[i].h.c, "GET", LEASES, NULL, &rr);
        assert_int_equal(rr.rc, CURLE_OK);
        assert_int_equal(rr.status, 200);
        assert_int_equal(rr.connects, 0);
        assert_true(tc_now_ms() - t1 < 1000);
        reply_free(&rr);
        client_free(&t[i].h.c);
    }
    assert_int_equal(tc_stat_int(srv, "connections.stalled"), 0);
}

/* restart over h2 and over HTTP/1.1, and the stress of 50 under load. */
typedef struct loadgen {
    ts_server *s;
    long version;
    bool stop; /* under mu */
    pthread_mutex_t mu;
    long ok, failed;
    pthread_t t;
} loadgen;

static void *load_main(void *arg)
{
    loadgen *g = arg;
    client c = {g->s, NULL, g->version, "load", false};
    for (;;) {
        pthread_mutex_lock(&g->mu);
        bool stop = g->stop;
        pthread_mutex_unlock(&g->mu);
        if (stop)
            break;
        reply r;
        req(&c, "GET", LEASES, NULL, &r);
        pthread_mutex_lock(&g->mu);
        if (r.rc == CURLE_OK && r.status == 200)
            g->ok++;
        else
            g->failed++;
        pthread_mutex_unlock(&g->mu);
        reply_free(&r);
    }
    client_free(&c);
    return NULL;
}

static long load_ok(loadgen *g)
{
    pthread_mutex_lock(&g->mu);
    long n = g->ok;
    pthread_mutex_unlock(&g->mu);
    return n;
}

/* POST /testserver/v1/restart over HTTP/1.1 and wait for the restarts counter. */
static void restart_h1(ts_server *s, bool keep)
{
    long long before = tc_stat_int(s, "restarts");
    client c = {s, NULL, CURL_HTTP_VERSION_1_1, NULL, false};
    reply r;
    req(&c, "POST", "/testserver/v1/restart",
        keep ? "{\"keep_state\":true}" : "{\"keep_state\":false}", &r);
    if (r.rc != CURLE_OK || r.status != 202)
        print_message("restart over HTTP/1.1: curl %d, HTTP %ld\n", r.rc, r.status);
    assert_int_equal(r.rc, CURLE_OK);
    assert_int_equal(r.status, 202);
    assert_int_equal(r.version, CURL_HTTP_VERSION_1_1);
    reply_free(&r);
    client_free(&c);
    long long end = tc_now_ms() + 10000;
    for (;;) {
        long st;
        char *body = NULL;
        if (ts_control(s, "GET", "/testserver/v1/stats", NULL, &st, &body) == 0 && st == 200) {
            json_t *j = json_loads(body, 0, NULL);
            long long n = json_integer_value(tc_at(j, "restarts"));
            json_decref(j);
            free(body);
            if (n > before)
                return;
        } else {
            free(body);
        }
        if (tc_now_ms() > end) {
            print_message("the server did not come back after a restart over HTTP/1.1\n");
            fail();
        }
        tc_pause_ms(20);
    }
}

/*
 * The stress test's load threads and server live here, not on its stack:
 * when an assertion fails, cmocka jumps out of the test and the teardown
 * below stops the threads before anything they read goes away.
 */
static struct {
    ts_server *s;
    loadgen g[2];
    int started;
    watcher *w;
} stress;

static void stress_stop_load(void)
{
    for (int i = 0; i < stress.started; i++) {
        pthread_mutex_lock(&stress.g[i].mu);
        stress.g[i].stop = true;
        pthread_mutex_unlock(&stress.g[i].mu);
        pthread_join(stress.g[i].t, NULL);
    }
    stress.started = 0;
}

static int stress_teardown(void **state)
{
    (void)state;
    stress_stop_load();
    if (stress.w)
        watch_stop(stress.w);
    stress.w = NULL;
    if (stress.s)
        ts_stop(stress.s);
    stress.s = NULL;
    return 0;
}

static void test_restart_stress(void **state)
{
    (void)state;
    enum { RESTARTS = 50 };
    assert_int_equal(ts_start(&stress.s, NULL), 0);
    ts_server *s = stress.s;
    loadgen *g = stress.g;
    for (int i = 0; i < 2; i++) {
        g[i] = (loadgen){.s = s, .version = i ? CURL_HTTP_VERSION_1_1 : CURL_HTTP_VERSION_2TLS};
        assert_int_equal(pthread_mutex_init(&g[i].mu, NULL), 0);
        assert_int_equal(pthread_create(&g[i].t, NULL, load_main, &g[i]), 0);
        stress.started = i + 1;
    }
    stress.w = watch_start(s, LEASES "?watch=1", CURL_HTTP_VERSION_2TLS, NULL);
    long long t0 = tc_now_ms();
    for (int i = 0; i < RESTARTS; i++) {
        bool keep = (i / 2) % 2 == 0;
        if (i % 2 == 0) {
            if (ts_restart(s, keep, 0) != 0) {
                print_message("restart %d over h2 failed\n", i);
                fail();
            }
        } else {
            restart_h1(s, keep);
        }
    }
    long long took = tc_now_ms() - t0;
    print_message("%d restarts in %lld ms\n", RESTARTS, took);
    /* The clients keep getting answers after the last restart. */
    long ok[2] = {load_ok(&g[0]), load_ok(&g[1])};
    long long end = tc_now_ms() + 10000;
    while ((load_ok(&g[0]) <= ok[0] || load_ok(&g[1]) <= ok[1]) && tc_now_ms() < end)
        tc_pause_ms(20);
    assert_true(load_ok(&g[0]) > ok[0]);
    assert_true(load_ok(&g[1]) > ok[1]);
    stress_stop_load();
    for (int i = 0; i < 2; i++)
        print_message("%s client: %ld answered, %ld failed\n", i ? "HTTP/1.1" : "h2", g[i].ok,
                      g[i].failed);
    watch_stop(stress.w);
    stress.w = NULL;
    assert_int_equal(tc_stat_int(s, "restarts"), RESTARTS);
    /* A clean exit: no abort along the way. */
    stress.s = NULL;
    assert_int_equal(ts_stop(s), 0);
}

/* ---- bookmarks at the real server's cadence -------------------------------------------- */

static void test_bookmarks_real(void **state)
{
    (void)state;
    const char *args[] = {"--bookmark-interval", "real", NULL};
    ts_server *s;
    assert_int_equal(ts_start(&s, args), 0);
    /* timeoutSeconds=4: one bookmark 2 s before the end, none before, then the end. */
    watcher *w4 = watch_start(s, LEASES "?watch=1&allowWatchBookmarks=true&timeoutSeconds=4",
                              CURL_HTTP_VERSION_2TLS, NULL);
    /* timeoutSeconds=1: 2 s before its end has passed already: no bookmark. */
    watcher *w1 = watch_start(s, LEASES "?watch=1&allowWatchBookmarks=true&timeoutSeconds=1",
                              CURL_HTTP_VERSION_2TLS, NULL);
    /* No timeout: the next bookmark is a minute away. */
    watcher *wl =
        watch_start(s, LEASES "?watch=1&allowWatchBookmarks=true", CURL_HTTP_VERSION_1_1, NULL);
    assert_true(watch_wait_done(w4, 30000));
    assert_true(watch_wait_done(w1, 30000));
    assert_int_equal(w4->rc, CURLE_OK);
    assert_int_equal(w1->rc, CURLE_OK);
    assert_int_equal(count_type(w4, "BOOKMARK"), 1);
    assert_int_equal(count_type(w1, "BOOKMARK"), 0);
    long long when = -1;
    for (size_t i = 0; i < w4->nev; i++)
        if (!strcmp(w4->ev[i].type, "BOOKMARK"))
            when = w4->ev[i].at_ms - w4->started_ms;
    print_message("bookmark %lld ms after the watch was sent (due at 2000)\n", when);
    /* The server cannot send it before 2 s after it got the request. */
    assert_true(when >= 1990);
    /* The stream lasted its 4 s. */
    assert_int_equal(watch_count(wl, "BOOKMARK"), 0);
    watch_stop(w4);
    watch_stop(w1);
    watch_stop(wl);
    assert_int_equal(ts_stop(s), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_h2_crud),
        cmocka_unit_test(test_h2_watch),
        cmocka_unit_test(test_h2_many_streams_one_connection),
        cmocka_unit_test(test_http11),
        cmocka_unit_test(test_kubectl_h2),
        cmocka_unit_test(test_h2_faults),
        cmocka_unit_test(test_stall_h2),
        cmocka_unit_test(test_stall_h1),
        cmocka_unit_test(test_stall_watch_h1),
        cmocka_unit_test(test_stall_duration),
        cmocka_unit_test_teardown(test_restart_stress, stress_teardown),
        cmocka_unit_test(test_bookmarks_real),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
