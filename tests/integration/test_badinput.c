/* The bad-input table, row by row (docs/bad-input.md names the test of
 * each row), and its security checks: credentials never reach a log line
 * (library at K8SLEASE_LOG_DEBUG, CLI at --log-level debug), and the
 * library's sockets do not leak into programs it forks and execs.
 *
 * The server rows use the test server's "respond" fault (a canned answer:
 * garbage, HTML, a redirect, a 100 MB body, one byte a second) and skip on
 * another API server; the scheme rows use a tiny plain-HTTP listener of
 * their own. Each row checks: the code, a message naming the problem, and
 * where an election is involved that it goes on once the server answers
 * properly again. No leak: the suite runs under ASan/LSan too.
 *
 * Every wait is bounded and fails with a message; pauses appear only in
 * polling loops over a condition.
 *
 * Length: one test per row of the table, in its order, so that each row of
 * docs/bad-input.md names one test of this one program. */
#define _GNU_SOURCE /* accept4, pipe2, memmem */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <curl/curl.h>
#include <jansson.h>

#include "core/client.h"
#include "k8s/client.h"
#include "e2e.h"
#include "harness.h"
#include "k8s/holders.h"
#include "k8slease.h"
#include "libk8s_lease_wrapper.h"
#include "testlib.h"

#define LD_MS   3000
#define RD_MS   2000
#define RP_MS   500
#define WAIT_MS 30000

#define LEASES "/apis/coordination.k8s.io/v1/namespaces/default/leases"

static k8slease_client *client;
static char tmpdir[64];

/* Every holder read here must be a GET: the answers under test are the
 * server's (canned by fault rules, one per GET), and a Lease read twice
 * would otherwise be answered from its watch (k8s/holders.h). With no idle
 * time, no Lease is ever followed. */
static k8slease_client *every_read_a_get(k8slease_client *c)
{
    if (c && kl__k8s_of(c)->holders)
        kl__holders_set_idle(kl__k8s_of(c)->holders, 0);
    return c;
}

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/k8slease-badinput-XXXXXX");
    if (!mkdtemp(tmpdir))
        return -1;
    if (e2e_setup(&client) != 0)
        return -1;
    every_read_a_get(client);
    return 0;
}

static int teardown(void **state)
{
    char cmd[128];

    (void)state;
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", tmpdir);
    return e2e_teardown(client);
}

/* What the canned-answer tests feed the client: no real server sends it. */
#define CANNED "needs the test server's canned answers (bytes no real server sends)"

/* ------------------------------------------------------------------------ */
/* Captured logs                                                            */
/* ------------------------------------------------------------------------ */

/* Every line a client logs, "LEVEL message\n". Global, not on a test's stack:
 * a failed assertion longjmps while the loop thread may still log. */
typedef struct logbuf {
    pthread_mutex_t mu;
    char *text;
    size_t len, cap;
    int lines;
} logbuf;

static logbuf logs;

static void on_log(k8slease_log_level level, const char *msg, void *ud)
{
    static const char *const names[] = {"ERROR", "WARN", "INFO", "DEBUG"};
    logbuf *b = ud;
    size_t n = strlen(msg) + 16;

    pthread_mutex_lock(&b->mu);
    if (b->len + n + 1 > b->cap) {
        size_t cap = (b->len + n + 1) * 2;
        char *t = realloc(b->text, cap);

        if (!t) {
            pthread_mutex_unlock(&b->mu);
            return;
        }
        b->text = t;
        b->cap = cap;
    }
    b->len += (size_t)snprintf(b->text + b->len, b->cap - b->len, "%s %s\n",
                               names[level <= K8SLEASE_LOG_DEBUG ? level : 3], msg);
    b->lines++;
    pthread_mutex_unlock(&b->mu);
}

static void logs_reset(void)
{
    pthread_mutex_lock(&logs.mu);
    logs.len = 0;
    logs.lines = 0;
    if (logs.text)
        logs.text[0] = '\0';
    pthread_mutex_unlock(&logs.mu);
}

/* A malloc'ed copy of what was logged so far. */
static char *logs_copy(void)
{
    char *s;

    pthread_mutex_lock(&logs.mu);
    s = strdup(logs.text ? logs.text : "");
    pthread_mutex_unlock(&logs.mu);
    assert_non_null(s);
    return s;
}

/* 1 if one logged line starts with prefix and contains what. */
static int logs_line(const char *prefix, const char *what)
{
    char *s = logs_copy(), *line, *save = NULL;
    int found = 0;

    for (line = strtok_r(s, "\n", &save); line && !found; line = strtok_r(NULL, "\n", &save))
        found = strncmp(line, prefix, strlen(prefix)) == 0 && strstr(line, what) != NULL;
    free(s);
    return found;
}

static int logs_contain(const char *what)
{
    char *s = logs_copy();
    int found = strstr(s, what) != NULL;

    free(s);
    return found;
}

/* A client of kubeconfig kc that logs into `logs` at DEBUG. */
static k8slease_client *client_logged(const char *kc)
{
    k8slease_client_options o = K8SLEASE_CLIENT_OPTIONS_INIT;
    k8slease_client *c = NULL;

    o.kubeconfig = kc;
    o.log_cb = on_log;
    o.log_user_data = &logs;
    o.log_level = K8SLEASE_LOG_DEBUG;
    if (k8slease_client_new(&c, &o) != 0)
        fail_msg("client for %s: %s", kc, k8slease_error_last());
    return every_read_a_get(c);
}

/* ------------------------------------------------------------------------ */
/* Test server helpers                                                      */
/* ------------------------------------------------------------------------ */

/* A respond rule over the GETs of one Lease: fields is the JSON of the
 * answer without braces ("\"body\":\"...\""), count how many GETs. */
static long add_respond(const char *lease, int count, const char *fields)
{
    char json[4096];

    snprintf(json, sizeof(json),
             "{\"kind\":\"respond\",%s,\"count\":%d,\"match\":{\"verb\":\"get\","
             "\"path_prefix\":\"" LEASES "/%s\"}}",
             fields, count, lease);
    return e2e_add_fault(json);
}

/* holder_get expecting an error: returns the code, message in msg. */
static int holder_fails(k8slease_client *c, const char *lease, int64_t timeout_ms, char *msg,
                        size_t len)
{
    k8slease_holder *h = NULL;
    int rc = k8slease_holder_get(c, "default", lease, timeout_ms, &h);

    snprintf(msg, len, "%s", k8slease_error_last());
    if (rc == 0) {
        k8slease_holder_free(h);
        fail_msg("holder_get(%s) succeeded where it should have failed", lease);
    }
    assert_null(h);
    print_message("  %s: %s: %s\n", lease, k8slease_strerror(rc), msg);
    return rc;
}

static void assert_contains(const char *haystack, const char *needle)
{
    if (!strstr(haystack, needle)) {
        fprintf(stderr, "%s\n", haystack); /* fail_msg truncates */
        fail_msg("the text above does not contain \"%s\"", needle);
    }
}

static k8slease_elector *start_elector_mode(k8slease_client *c, const char *name, const char *id,
                                            int poll_only)
{
    k8slease_elector_options o = K8SLEASE_ELECTOR_OPTIONS_INIT;
    k8slease_elector *e = NULL;

    o.name = name;
    o.identity = id;
    o.poll_only = poll_only;
    o.lease_duration_ms = LD_MS;
    o.renew_deadline_ms = RD_MS;
    o.retry_period_ms = RP_MS;
    if (k8slease_elector_start(&e, c, &o) != 0)
        fail_msg("elector_start(%s): %s", id, k8slease_error_last());
    return e;
}

static k8slease_elector *start_elector(k8slease_client *c, const char *name, const char *id)
{
    return start_elector_mode(c, name, id, 0);
}

static int64_t elected(k8slease_elector *e, const char *who)
{
    int64_t epoch = -1;

    if (k8slease_elector_wait_elected(e, WAIT_MS, &epoch) != 0)
        fail_msg("%s not elected within %d ms: %s", who, WAIT_MS, k8slease_error_last());
    return epoch;
}

static k8slease_elector_stats stats(const k8slease_elector *e)
{
    k8slease_elector_stats st = {.version = K8SLEASE_ELECTOR_STATS_VERSION};

    assert_int_equal(k8slease_elector_stats_get(e, &st), 0);
    return st;
}

/* Wait (bounded) for n more successful renewals of a leader. */
static void renewals(k8slease_elector *e, uint64_t n)
{
    uint64_t from = stats(e).renewals;

    for (int64_t deadline = e2e_mono_ms() + WAIT_MS; stats(e).renewals < from + n; e2e_pause_ms(20))
        if (e2e_mono_ms() > deadline)
            fail_msg("fewer than %llu renewals in %d ms", (unsigned long long)n, WAIT_MS);
}

/*
 * "The election keeps going": the first `count` GETs of the Lease by an
 * elector are answered with the canned `fields`; it logs the failure (a
 * line containing `expect`), never leads on it, and is elected once the
 * server answers properly again.
 */
static void elector_survives(const char *lease, int count, const char *fields, const char *expect)
{
    k8slease_client *c;
    k8slease_elector *e;
    long id;
    char line[600];

    logs_reset();
    c = client_logged(ts_kubeconfig(e2e_server()));
    id = add_respond(lease, count, fields);
    /* Poll-only: its GETs are all it reads, so it meets every bad answer
     * (in watch mode the watch's list could show the Lease first, and the
     * elector would act on that instead of reading again). */
    e = start_elector_mode(c, lease, "survivor:1", 1);
    e2e_wait_fault_retired(id, WAIT_MS);
    elected(e, "the elector after the bad answers");
    snprintf(line, sizeof(line), "WARN get lease default/%s: ", lease);
    if (!logs_line(line, expect)) {
        char *all = logs_copy();

        fprintf(stderr, "%s", all);
        free(all);
        fail_msg("the elector logged no line \"%s...%s...\" (its log above)", line, expect);
    }
    assert_int_equal(stats(e).terms, 1);
    k8slease_elector_free(e);
    k8slease_client_free(c);
}

/* ------------------------------------------------------------------------ */
/* The test server's respond fault itself                                   */
/* ------------------------------------------------------------------------ */

typedef struct got {
    char headers[4096];
    size_t hlen;
    char head[256]; /* the first bytes of the body */
    size_t blen;    /* all of it */
} got;

static size_t got_header(char *data, size_t size, size_t n, void *arg)
{
    got *g = arg;
    size_t len = size * n, room = sizeof(g->headers) - 1 - g->hlen;

    memcpy(g->headers + g->hlen, data, len < room ? len : room);
    g->hlen += len < room ? len : room;
    g->headers[g->hlen] = '\0';
    return len;
}

static size_t got_body(char *data, size_t size, size_t n, void *arg)
{
    got *g = arg;
    size_t len = size * n;

    if (g->blen < sizeof(g->head) - 1) {
        size_t room = sizeof(g->head) - 1 - g->blen;

        memcpy(g->head + g->blen, data, len < room ? len : room);
        g->head[g->blen + (len < room ? len : room)] = '\0';
    }
    g->blen += len;
    return len;
}

/* GET path from the test server with curl (no redirects followed);
 * returns the status; *ms how long it took. */
static long raw_get(const char *path, got *g, int64_t *ms)
{
    char url[512], auth[256];
    char *token = ts_token(e2e_server());
    struct curl_slist *h = NULL;
    CURL *e = curl_easy_init();
    long status = 0;
    int64_t t0 = e2e_mono_ms();

    assert_non_null(e);
    assert_non_null(token);
    memset(g, 0, sizeof(*g));
    snprintf(url, sizeof(url), "%s%s", ts_url(e2e_server()), path);
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
    free(token);
    h = curl_slist_append(h, auth);
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_CAINFO, ts_ca_file(e2e_server()));
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, got_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, g);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, got_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, g);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)WAIT_MS);
    if (curl_easy_perform(e) == CURLE_OK)
        curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(h);
    curl_easy_cleanup(e);
    *ms = e2e_mono_ms() - t0;
    return status;
}

static void testserver_respond_fault(void **state)
{
    static const char *const bad[] = {
        "{\"kind\":\"respond\",\"status\":199}",      "{\"kind\":\"respond\",\"body\":5}",
        "{\"kind\":\"respond\",\"content_type\":[]}", "{\"kind\":\"respond\",\"size\":1073741825}",
        "{\"kind\":\"respond\",\"interval_ms\":-1}",
    };
    const char *path = LEASES "/badinput-respond";
    got g;
    int64_t ms;
    long status = 0;
    char *resp = NULL;

    (void)state;
    e2e_need_testserver(CANNED);
    /* A redirect: status, Location, Content-Type and body as given. */
    add_respond("badinput-respond", 1,
                "\"status\":307,\"location\":\"https://127.0.0.2:1/x\",\"content_type\":"
                "\"text/html\",\"body\":\"<a>moved</a>\"");
    assert_int_equal(raw_get(path, &g, &ms), 307);
    /* Header names compare case-insensitively: HTTP/2 sends them in lower case. */
    assert_non_null(strcasestr(g.headers, "Location: https://127.0.0.2:1/x\r\n"));
    assert_non_null(strcasestr(g.headers, "Content-Type: text/html\r\n"));
    assert_string_equal(g.head, "<a>moved</a>");
    /* Used up (count 1): the real server answers again. */
    assert_int_equal(raw_get(path, &g, &ms), 404);
    assert_non_null(strcasestr(g.headers, "Content-Type: application/json\r\n"));
    /* Padded with spaces to size; no Content-Type when it is null. */
    add_respond("badinput-respond", 1, "\"content_type\":null,\"size\":3000000,\"body\":\"{}\"");
    assert_int_equal(raw_get(path, &g, &ms), 200);
    assert_int_equal(g.blen, 3000000);
    assert_non_null(strcasestr(g.headers, "Content-Length: 3000000\r\n"));
    assert_null(strcasestr(g.headers, "Content-Type:"));
    assert_memory_equal(g.head, "{}      ", 8);
    /* Trickled: 4 bytes at 250 ms: the first at once, then 3 intervals. */
    add_respond("badinput-respond", 1, "\"size\":4,\"body\":\"abcd\",\"interval_ms\":250");
    assert_int_equal(raw_get(path, &g, &ms), 200);
    print_message("  4 bytes at 250 ms intervals took %lld ms\n", (long long)ms);
    assert_string_equal(g.head, "abcd");
    assert_true(ms >= 700);
    assert_true(ms < 20000);
    /* Rules that make no sense are refused. */
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(
            ts_control(e2e_server(), "POST", "/testserver/v1/faults", bad[i], &status, &resp), 0);
        if (status != 400)
            fail_msg("%s: HTTP %ld %s", bad[i], status, resp ? resp : "");
        free(resp);
        resp = NULL;
    }
}

/* ------------------------------------------------------------------------ */
/* Elector options: the native API                                          */
/* ------------------------------------------------------------------------ */

static void native_options_refused(void **state)
{
    static char long_id[600];
    const struct {
        int64_t ld, rd, rp;
        const char *identity;
        const char *expect;
    } rows[] = {
        {-1, 0, 0, "a:1", "durations must be positive (lease_duration -1 ms"},
        {0, -1, 0, "a:1", "renew_deadline -1 ms"},
        {0, 0, -1, "a:1", "retry_period -1 ms"},
        {INT64_MIN, INT64_MIN, INT64_MIN, "a:1", "durations must be positive"},
        {INT64_MAX, 0, 0, "a:1", "lease_duration 9223372036854775807 ms"},
        {10000, 10000, 2000, "a:1",
         "lease_duration (10000 ms) must be greater than renew_deadline"},
        {3000, 2400, 2000, "a:1",
         "renew_deadline (2400 ms) must be greater than 1.2 * retry_period"},
        {0, 0, 0, NULL, "identity is NULL"},
        {0, 0, 0, "", "identity must not be empty"},
        {0, 0, 0, long_id, "identity longer than 511 bytes"},
    };
    k8slease_elector *a;
    k8slease_holder *h = NULL;

    (void)state;
    memset(long_id, 'x', 512);
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        k8slease_elector_options o = K8SLEASE_ELECTOR_OPTIONS_INIT;
        k8slease_elector *e = NULL;
        int rc;

        o.name = "badinput-options";
        o.identity = rows[i].identity;
        o.lease_duration_ms = rows[i].ld;
        o.renew_deadline_ms = rows[i].rd;
        o.retry_period_ms = rows[i].rp;
        rc = k8slease_elector_start(&e, client, &o);
        print_message("  row %zu: %s: %s\n", i, k8slease_strerror(rc), k8slease_error_last());
        assert_int_equal(rc, K8SLEASE_EINVAL);
        assert_null(e);
        assert_contains(k8slease_error_last(), rows[i].expect);
    }
    /* No refused start left anything behind (no Lease was created), and
     * the Lease is free for a valid candidate. */
    assert_int_equal(k8slease_holder_get(client, NULL, "badinput-options", 0, &h),
                     K8SLEASE_ENOTFOUND);
    a = start_elector(client, "badinput-options", "a:1");
    elected(a, "a valid candidate after the refused ones");
    k8slease_elector_free(a);
}

/* An identity is written into the Lease as a JSON string, so it must be
 * UTF-8. Expected: refused at start, naming the rule, like the other
 * identity rules. (At the time of writing the library accepts it and then
 * fails every write with "cannot start request: out of memory", never
 * electing: this test documents the expected behaviour.) */
static void identity_not_utf8_refused(void **state)
{
    static char ns[] = "default", lease[] = "badinput-utf8", bad[] = "bad\xff\xfe:1";
    k8slease_elector_options o = K8SLEASE_ELECTOR_OPTIONS_INIT;
    k8slease_elector *e = NULL;
    char *err = NULL;
    int rc;

    (void)state;
    o.name = lease;
    o.identity = bad;
    rc = k8slease_elector_start(&e, client, &o);
    print_message("  native: %s: %s\n", k8slease_strerror(rc), rc ? k8slease_error_last() : "");
    if (rc == 0) {
        k8slease_elector_free(e);
        fail_msg("an identity that is not UTF-8 was accepted by k8slease_elector_start");
    }
    assert_int_equal(rc, K8SLEASE_EINVAL);
    assert_null(e);
    assert_contains(k8slease_error_last(), "identity");
    assert_contains(k8slease_error_last(), "UTF-8");

    if (K8sLeaseInit(&err) != 0)
        fail_msg("K8sLeaseInit: %s", err);
    rc = K8sLeaseRunElection(ns, lease, bad, 3, 2, 1, &err);
    if (rc == 0) {
        K8sLeaseCancelElection(ns, lease, NULL);
        K8sLeaseWaitLost(ns, lease, NULL);
        fail_msg("an identity that is not UTF-8 was accepted by K8sLeaseRunElection");
    }
    assert_non_null(err);
    assert_contains(err, "UTF-8");
    free(err);
}

/* ------------------------------------------------------------------------ */
/* Elector options: the seed ABI                                            */
/* ------------------------------------------------------------------------ */

static void seed_abi_bad_input(void **state)
{
    static char ns[] = "default", lease[] = "badinput-seed", id[] = "seed:1", empty[] = "",
                bad_name[] = "Bad_Name";
    const struct {
        char *ns, *name, *identity;
        int ld, rd, rp;
        const char *expect;
    } rows[] = {
        {ns, lease, id, 0, 0, 0,
         "failed to create leader elector: durations must be positive (leaseDuration 0s, "
         "renewDeadline 0s, retryPeriod 0s)"},
        {ns, lease, id, -1, 2, 1, "durations must be positive (leaseDuration -1s"},
        {ns, lease, id, 3, -2, 1, "renewDeadline -2s"},
        {ns, lease, id, 3, 2, -1, "retryPeriod -1s"},
        {ns, lease, id, 3, 3, 1, "lease_duration"},
        {ns, lease, NULL, 3, 2, 1, "failed to create leader elector: identity is NULL"},
        {ns, lease, empty, 3, 2, 1, "identity must not be empty"},
        {NULL, lease, id, 3, 2, 1, "must not be NULL"},
        {ns, NULL, id, 3, 2, 1, "must not be NULL"},
        {ns, bad_name, id, 3, 2, 1, "lease name \"Bad_Name\""},
    };
    char *err = NULL;
    long long epoch = -1;

    (void)state;
    if (K8sLeaseInit(&err) != 0)
        fail_msg("K8sLeaseInit: %s", err);
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        int rc = K8sLeaseRunElection(rows[i].ns, rows[i].name, rows[i].identity, rows[i].ld,
                                     rows[i].rd, rows[i].rp, &err);

        print_message("  row %zu: %d: %s\n", i, rc, err ? err : "(no message)");
        assert_int_equal(rc, -1);
        assert_non_null(err);
        assert_contains(err, rows[i].expect);
        free(err);
        err = NULL;
        /* Without a place for the message: the same refusal, no crash. */
        assert_int_equal(K8sLeaseRunElection(rows[i].ns, rows[i].name, rows[i].identity, rows[i].ld,
                                             rows[i].rd, rows[i].rp, NULL),
                         -1);
    }
    /* No election was left behind by the refusals ... */
    assert_int_equal(K8sLeaseWaitLost(ns, lease, &err), 0);
    assert_null(err);
    /* ... and a valid one runs. */
    assert_int_equal(K8sLeaseRunElection(ns, lease, id, 3, 2, 1, &err), 0);
    assert_null(err);
    if (K8sLeaseWaitElected(ns, lease, WAIT_MS / 1000, &epoch, &err) != 0)
        fail_msg("not elected: %s", err);
    assert_true(epoch >= 0);
    assert_int_equal(K8sLeaseCancelElection(ns, lease, &err), 0);
    assert_int_equal(K8sLeaseWaitLost(ns, lease, &err), 0);
    assert_null(err);
}

/* ------------------------------------------------------------------------ */
/* What the server answers                                                  */
/* ------------------------------------------------------------------------ */

static void garbage_json(void **state)
{
    char msg[1024];

    (void)state;
    e2e_need_testserver(CANNED);
    add_respond("badinput-garbage", 1,
                "\"body\":\"{\\\"kind\\\":\\\"Lease\\\",\\\"metadata\\\":{\"");
    assert_int_equal(holder_fails(client, "badinput-garbage", 5000, msg, sizeof(msg)),
                     K8SLEASE_EPROTOCOL);
    assert_contains(msg, "get lease default/badinput-garbage: Lease body: not valid JSON");
    elector_survives("badinput-garbage", 2, "\"body\":\"}}garbage{{\"", "not valid JSON");
}

static void wrong_content_type(void **state)
{
    static const char html[] = "\"content_type\":\"text/html; charset=utf-8\","
                               "\"body\":\"<!DOCTYPE html><html><body>Please sign in to the "
                               "proxy</body></html>\"";
    char msg[1024];
    char fields[512];
    k8slease_holder *h = NULL;

    (void)state;
    e2e_need_testserver(CANNED);
    /* A proxy's HTML page with 200 is not taken for a Lease. */
    add_respond("badinput-html", 1, html);
    assert_int_equal(holder_fails(client, "badinput-html", 5000, msg, sizeof(msg)),
                     K8SLEASE_EPROTOCOL);
    assert_contains(msg, "get lease default/badinput-html: Lease body: not valid JSON");
    assert_contains(msg, "'<'");
    /* The Content-Type itself is not judged: a Lease sent as text/plain
     * reads as that Lease. */
    snprintf(fields, sizeof(fields),
             "\"content_type\":\"text/plain\",\"body\":\"{\\\"kind\\\":\\\"Lease\\\","
             "\\\"apiVersion\\\":\\\"coordination.k8s.io/v1\\\",\\\"metadata\\\":{\\\"name\\\":"
             "\\\"badinput-html\\\",\\\"namespace\\\":\\\"default\\\",\\\"resourceVersion\\\":"
             "\\\"7\\\"},\\\"spec\\\":{\\\"holderIdentity\\\":\\\"plain:1\\\","
             "\\\"leaseTransitions\\\":4}}\"");
    add_respond("badinput-html", 1, fields);
    assert_int_equal(k8slease_holder_get(client, NULL, "badinput-html", 5000, &h), 0);
    assert_string_equal(h->identity, "plain:1");
    assert_int_equal(h->epoch, 4);
    k8slease_holder_free(h);
    elector_survives("badinput-html", 2, html, "not valid JSON");
}

static void huge_body(void **state)
{
    char msg[1024], expect[512];
    int64_t t0;

    (void)state;
    e2e_need_testserver(CANNED);
    /* 100 MiB, a Lease padded with spaces: valid JSON, only too big. */
    add_respond("badinput-huge", 1,
                "\"size\":104857600,\"body\":\"{\\\"kind\\\":\\\"Lease\\\",\\\"apiVersion\\\":"
                "\\\"coordination.k8s.io/v1\\\",\\\"metadata\\\":{\\\"name\\\":\\\"x\\\"}}\"");
    t0 = e2e_mono_ms();
    assert_int_equal(holder_fails(client, "badinput-huge", 60000, msg, sizeof(msg)),
                     K8SLEASE_EPROTOCOL);
    print_message("  refused after %lld ms\n", (long long)(e2e_mono_ms() - t0));
    snprintf(expect, sizeof(expect),
             "get lease default/badinput-huge: response body from %s" LEASES
             "/badinput-huge larger than 16 MiB",
             ts_url(e2e_server()));
    assert_string_equal(msg, expect);
    elector_survives("badinput-huge", 1, "\"size\":104857600", "larger than 16 MiB");
}

static void slowloris(void **state)
{
    char msg[1024];
    int64_t t0, took;

    (void)state;
    e2e_need_testserver(CANNED);
    /* Headers at once, then one byte a second of a 100000-byte body. */
    add_respond("badinput-slow", 1, "\"size\":100000,\"interval_ms\":1000");
    t0 = e2e_mono_ms();
    assert_int_equal(holder_fails(client, "badinput-slow", 2000, msg, sizeof(msg)),
                     K8SLEASE_ETIMEOUT);
    took = e2e_mono_ms() - t0;
    print_message("  timed out after %lld ms\n", (long long)took);
    assert_contains(msg, "get lease default/badinput-slow: ");
    assert_contains(msg, LEASES "/badinput-slow: timeout");
    /* The whole-request timeout, not an idle timeout the trickle resets. */
    assert_true(took >= 1900);
    assert_true(took < 20000);
    /* An elector's request times out at max(renew_deadline / 2, 1 s). */
    elector_survives("badinput-slow", 1, "\"size\":100000,\"interval_ms\":1000", "timeout");
}

/* A listening socket on another loopback address: the host a redirect
 * points to. Connections stay in its backlog, so an attempt is visible. */
static int other_host(char *host, size_t len, int *port)
{
    struct sockaddr_in sa;
    socklen_t sl = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

    assert_true(fd >= 0);
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(0x7f000002); /* 127.0.0.2 */
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    }
    assert_int_equal(listen(fd, 16), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    inet_ntop(AF_INET, &sa.sin_addr, host, (socklen_t)len);
    *port = ntohs(sa.sin_port);
    return fd;
}

/* 1 if someone connected to the listener fd (accepting it), else 0. */
static int connected_to(int fd)
{
    int c = accept4(fd, NULL, NULL, SOCK_CLOEXEC);

    if (c >= 0) {
        close(c);
        return 1;
    }
    assert_true(errno == EAGAIN || errno == EWOULDBLOCK);
    return 0;
}

static void redirect_refused(void **state)
{
    static const int codes[] = {301, 302, 303, 307, 308};
    char host[64], fields[1024], msg[1024], expect[512];
    k8slease_client *c;
    k8slease_elector *e;
    int port, fd;
    long id;

    (void)state;
    e2e_need_testserver(CANNED);
    fd = other_host(host, sizeof(host), &port);
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
        snprintf(fields, sizeof(fields),
                 "\"status\":%d,\"location\":\"https://%s:%d" LEASES "/badinput-redirect\","
                 "\"content_type\":\"text/html\",\"body\":\"<a href='https://%s:%d/'>moved</a>\"",
                 codes[i], host, port, host, port);
        add_respond("badinput-redirect", 1, fields);
        assert_int_equal(holder_fails(client, "badinput-redirect", 5000, msg, sizeof(msg)),
                         K8SLEASE_ESERVER);
        snprintf(expect, sizeof(expect), "get lease default/badinput-redirect: HTTP %d", codes[i]);
        assert_contains(msg, expect);
        assert_int_equal(connected_to(fd), 0);
    }
    /* An elector: a redirected GET is a failed read, ... */
    snprintf(fields, sizeof(fields),
             "\"status\":302,\"location\":\"https://%s:%d" LEASES "/badinput-redirect\"", host,
             port);
    elector_survives("badinput-redirect", 2, fields, "HTTP 302");
    assert_int_equal(connected_to(fd), 0);

    /* ... and a leader whose renewals (PUT, with the bearer token and the
     * body) are answered 307 or 308 does not replay them elsewhere. */
    logs_reset();
    c = client_logged(ts_kubeconfig(e2e_server()));
    e = start_elector(c, "badinput-redirect-put", "leader:1");
    elected(e, "leader:1");
    snprintf(fields, sizeof(fields),
             "{\"kind\":\"respond\",\"status\":307,\"location\":\"https://%s:%d" LEASES
             "/badinput-redirect-put\",\"count\":1,\"match\":{\"verb\":\"update\","
             "\"path_prefix\":\"" LEASES "/badinput-redirect-put\"}}",
             host, port);
    id = e2e_add_fault(fields);
    e2e_wait_fault_retired(id, WAIT_MS);
    renewals(e, 2);
    assert_true(logs_contain("update lease default/badinput-redirect-put: HTTP 307"));
    assert_int_equal(connected_to(fd), 0);
    k8slease_elector_free(e);
    k8slease_client_free(c);

    /* The listener does see a connection when there is one. */
    {
        struct sockaddr_in sa;
        int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct pollfd p = {.fd = fd, .events = POLLIN};

        memset(&sa, 0, sizeof(sa));
        sa.sin_family = AF_INET;
        sa.sin_port = htons((uint16_t)port);
        inet_pton(AF_INET, host, &sa.sin_addr);
        assert_int_equal(connect(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
        assert_int_equal(poll(&p, 1, WAIT_MS), 1);
        assert_int_equal(connected_to(fd), 1);
        close(s);
    }
    close(fd);
}

static const char lease_json_fmt[] =
    "{\"kind\":\"Lease\",\"apiVersion\":\"coordination.k8s.io/v1\",\"metadata\":{\"name\":\"%s\","
    "\"namespace\":\"default\",\"uid\":\"3f1b8c1e-0000-4000-8000-000000000001\","
    "\"resourceVersion\":\"%s\"}%s}";

/* The JSON string literal of text, as a "body" field. */
static void body_field(char *out, size_t len, const char *text)
{
    json_t *s = json_string(text);
    char *enc = json_dumps(s, JSON_ENCODE_ANY);

    assert_non_null(enc);
    snprintf(out, len, "\"body\":%s", enc);
    free(enc);
    json_decref(s);
}

static void negative_transitions(void **state)
{
    char lease[1024], fields[1200], msg[1024];

    (void)state;
    e2e_need_testserver(CANNED);
    snprintf(lease, sizeof(lease), lease_json_fmt, "badinput-negative", "5",
             ",\"spec\":{\"holderIdentity\":\"evil:1\",\"leaseDurationSeconds\":3600,"
             "\"leaseTransitions\":-1}");
    body_field(fields, sizeof(fields), lease);
    add_respond("badinput-negative", 1, fields);
    assert_int_equal(holder_fails(client, "badinput-negative", 5000, msg, sizeof(msg)),
                     K8SLEASE_EPROTOCOL);
    assert_contains(msg, "get lease default/badinput-negative: ");
    assert_contains(msg, "spec.leaseTransitions: must not be negative, got -1");
    /* An elector never takes (nor respects) such a record: it reads again. */
    elector_survives("badinput-negative", 2, fields, "must not be negative");
}

static void missing_spec(void **state)
{
    static const char *const specs[] = {"", ",\"spec\":null"};
    static const char *const created[] = {"badinput-nospec", "badinput-nullspec"};
    char lease[1024], fields[1200], body[512];
    char *resp = NULL;
    long status = 0;
    k8slease_elector *e;

    (void)state;
    /* Bodies without spec: only the test server can send them (a real
     * server always answers with a spec, {} when empty). */
    for (size_t i = 0; e2e_is_testserver() && i < 2; i++) {
        k8slease_holder *h = NULL;

        snprintf(lease, sizeof(lease), lease_json_fmt, "badinput-nospec", "5", specs[i]);
        body_field(fields, sizeof(fields), lease);
        add_respond("badinput-nospec", 1, fields);
        assert_int_equal(k8slease_holder_get(client, NULL, "badinput-nospec", 5000, &h), 0);
        assert_string_equal(h->identity, "");
        assert_int_equal(h->epoch, 0);
        assert_int_equal(h->renew_time_us, 0);
        assert_int_equal(h->lease_duration_s, 0);
        k8slease_holder_free(h);
    }
    /* Leases created without spec and with "spec": null, on either server:
     * no holder, and an elector takes them with an UPDATE at once
     * (poll_only: the GET is all it sees). */
    for (size_t i = 0; i < 2; i++) {
        k8slease_holder *h = NULL;

        snprintf(body, sizeof(body),
                 "{\"apiVersion\":\"coordination.k8s.io/v1\",\"kind\":\"Lease\","
                 "\"metadata\":{\"name\":\"%s\"}%s}",
                 created[i], specs[i]);
        assert_int_equal(e2e_api("POST", LEASES, body, &status, &resp), 0);
        free(resp);
        assert_int_equal(status, 201);
        assert_int_equal(k8slease_holder_get(client, NULL, created[i], 5000, &h), 0);
        assert_string_equal(h->identity, "");
        assert_int_equal(h->epoch, 0);
        assert_int_equal(h->renew_time_us, 0);
        k8slease_holder_free(h);
        e = start_elector_mode(client, created[i], "taker:1", 1);
        elected(e, "taker:1");
        assert_int_equal(stats(e).creates, 0);
        k8slease_elector_free(e);
    }
}

/* ------------------------------------------------------------------------ */
/* Scheme and TLS: a plain-HTTP listener of our own                         */
/* ------------------------------------------------------------------------ */

/* Answers every connection with one canned HTTP response and closes it;
 * records what it was sent. */
static struct plain {
    int fd, port;
    pthread_t thread;
    pthread_mutex_t mu;
    int conns;
    char got[16384];
    size_t got_len;
} plain;

static const char plain_lease[] =
    "{\"kind\":\"Lease\",\"apiVersion\":\"coordination.k8s.io/v1\",\"metadata\":{\"name\":"
    "\"badinput-plain\",\"namespace\":\"default\",\"resourceVersion\":\"9\"},\"spec\":{"
    "\"holderIdentity\":\"plain-http:1\",\"leaseTransitions\":2}}";

static void *plain_main(void *arg)
{
    char reply[1024];
    int n = snprintf(reply, sizeof(reply),
                     "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                     "%zu\r\nConnection: close\r\n\r\n%s",
                     strlen(plain_lease), plain_lease);

    (void)arg;
    for (;;) {
        char buf[4096];
        size_t have = 0;
        int c = accept4(plain.fd, NULL, NULL, SOCK_CLOEXEC);

        if (c < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            break; /* shut down */
        }
        /* An HTTP request ends with an empty line; a TLS ClientHello is one
         * record: take what arrives within a moment of the first bytes. */
        for (;;) {
            struct pollfd p = {.fd = c, .events = POLLIN};
            ssize_t r;

            if (poll(&p, 1, have ? 200 : 10000) != 1)
                break;
            r = read(c, buf + have, sizeof(buf) - 1 - have);
            if (r <= 0)
                break;
            have += (size_t)r;
            buf[have] = '\0';
            if (strstr(buf, "\r\n\r\n") || have == sizeof(buf) - 1)
                break;
        }
        pthread_mutex_lock(&plain.mu);
        plain.conns++;
        if (have > sizeof(plain.got) - plain.got_len)
            have = sizeof(plain.got) - plain.got_len;
        memcpy(plain.got + plain.got_len, buf, have);
        plain.got_len += have;
        pthread_mutex_unlock(&plain.mu);
        if (write(c, reply, (size_t)n) < 0) {
            /* the client is gone: nothing to do */
        }
        close(c);
    }
    return NULL;
}

static void plain_start(void)
{
    struct sockaddr_in sa;
    socklen_t sl = sizeof(sa);

    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    plain.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(plain.fd >= 0);
    assert_int_equal(bind(plain.fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(plain.fd, 16), 0);
    assert_int_equal(getsockname(plain.fd, (struct sockaddr *)&sa, &sl), 0);
    plain.port = ntohs(sa.sin_port);
    plain.conns = 0;
    plain.got_len = 0;
    assert_int_equal(pthread_create(&plain.thread, NULL, plain_main, NULL), 0);
}

static void plain_stop(void)
{
    shutdown(plain.fd, SHUT_RDWR); /* accept() returns */
    pthread_join(plain.thread, NULL);
    close(plain.fd);
}

/* Writes tmpdir/name: a kubeconfig for server with this CA file and user. */
static void write_kubeconfig(char *path, size_t len, const char *name, const char *server,
                             const char *ca_file, const char *user_yaml)
{
    FILE *f;

    snprintf(path, len, "%s/%s", tmpdir, name);
    f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: %s\n"
            "%s%s%s"
            "users:\n- name: u\n  user:\n%s\n"
            "contexts:\n- name: x\n  context:\n    cluster: c\n    user: u\n"
            "    namespace: default\ncurrent-context: x\n",
            server, ca_file ? "    certificate-authority: " : "", ca_file ? ca_file : "",
            ca_file ? "\n" : "", user_yaml);
    assert_int_equal(fclose(f), 0);
}

static k8slease_client *client_for(const char *kc)
{
    k8slease_client_options o = K8SLEASE_CLIENT_OPTIONS_INIT;
    k8slease_client *c = NULL;

    o.kubeconfig = kc;
    if (k8slease_client_new(&c, &o) != 0)
        fail_msg("client for %s: %s", kc, k8slease_error_last());
    return every_read_a_get(c);
}

static void http_instead_of_https(void **state)
{
    static const char token[] = "badinput-cleartext-token-5b1f0c2e";
    char kc[512], server[64], msg[1024], expect[512], user[128];
    const char *ca = e2e_is_testserver() ? ts_ca_file(e2e_server()) : NULL;
    k8slease_client *c;
    k8slease_holder *h = NULL;
    int conns;

    (void)state;
    snprintf(user, sizeof(user), "    token: %s", token);
    plain_start();

    /* https:// in the kubeconfig, plain HTTP at the address: a TLS error
     * naming the server, and nothing readable (no token) went out. */
    snprintf(server, sizeof(server), "https://127.0.0.1:%d", plain.port);
    write_kubeconfig(kc, sizeof(kc), "kc-https-to-http", server, ca, user);
    c = client_for(kc);
    assert_int_equal(holder_fails(c, "badinput-plain", 5000, msg, sizeof(msg)), K8SLEASE_ETLS);
    snprintf(expect, sizeof(expect), "get lease default/badinput-plain: %s: TLS: ", server);
    assert_contains(msg, expect);
    k8slease_client_free(c);
    pthread_mutex_lock(&plain.mu);
    conns = plain.conns;
    plain.got[plain.got_len < sizeof(plain.got) ? plain.got_len : sizeof(plain.got) - 1] = '\0';
    assert_true(conns >= 1); /* it did talk to the listener */
    assert_null(memmem(plain.got, plain.got_len, token, strlen(token)));
    assert_null(memmem(plain.got, plain.got_len, "Authorization", 13));
    plain.got_len = 0;
    pthread_mutex_unlock(&plain.mu);

    /* http:// written explicitly: plain HTTP is used, as kubectl does. */
    snprintf(server, sizeof(server), "http://127.0.0.1:%d", plain.port);
    write_kubeconfig(kc, sizeof(kc), "kc-http", server, NULL, user);
    logs_reset();
    c = client_logged(kc);
    /* ... with a warning that the token travels in clear */
    assert_true(logs_line("WARN", "is plain http://: its bearer token goes unencrypted"));
    assert_int_equal(k8slease_holder_get(c, NULL, "badinput-plain", 5000, &h), 0);
    assert_string_equal(h->identity, "plain-http:1");
    assert_int_equal(h->epoch, 2);
    k8slease_holder_free(h);
    k8slease_client_free(c);
    pthread_mutex_lock(&plain.mu);
    assert_non_null(memmem(plain.got, plain.got_len, "GET " LEASES "/badinput-plain",
                           strlen("GET " LEASES) + 15));
    pthread_mutex_unlock(&plain.mu);
    plain_stop();

    /* http:// against a TLS server: a transport error naming the URL. */
    if (e2e_is_testserver()) {
        snprintf(server, sizeof(server), "http://127.0.0.1:%d", ts_port(e2e_server()));
        write_kubeconfig(kc, sizeof(kc), "kc-http-to-https", server, NULL, user);
        c = client_for(kc);
        assert_int_equal(holder_fails(c, "badinput-plain", 5000, msg, sizeof(msg)),
                         K8SLEASE_ETRANSPORT);
        snprintf(expect, sizeof(expect), "get lease default/badinput-plain: %s" LEASES, server);
        assert_contains(msg, expect);
        k8slease_client_free(c);
    }
}

static void wrong_ca(void **state)
{
    char kc[512], ca[512], user[256], msg[1024], expect[512];
    char *token, *url;
    k8slease_client *c;

    (void)state;
    token = e2e_token();
    url = e2e_url();
    assert_non_null(token);
    assert_non_null(url);
    snprintf(user, sizeof(user), "    token: %s", token);
    free(token);
    snprintf(ca, sizeof(ca), "%s/tls/other-ca.crt", K8SLEASE_TEST_DATA);
    write_kubeconfig(kc, sizeof(kc), "kc-wrong-ca", url, ca, user);
    c = client_for(kc);
    assert_int_equal(holder_fails(c, "badinput-ca", 5000, msg, sizeof(msg)), K8SLEASE_ETLS);
    snprintf(expect, sizeof(expect), "get lease default/badinput-ca: %s: TLS: ", url);
    free(url);
    assert_contains(msg, expect);
    assert_contains(msg, "certificate");
    k8slease_client_free(c);
}

/* ------------------------------------------------------------------------ */
/* Security: no credentials in logs                                         */
/* ------------------------------------------------------------------------ */

/* The secrets to look for: tokens, their base64, the client key's PEM
 * (each of its base64 lines) and the base64 of the whole PEM file (what
 * client-key-data holds). */
typedef struct secrets {
    char *s[64];
    const char *what[64];
    int n;
} secrets;

static secrets SEC;

static void secret_add(char *s, const char *what)
{
    assert_true(SEC.n < 64);
    SEC.s[SEC.n] = s;
    SEC.what[SEC.n++] = what;
}

static void secrets_free(void)
{
    for (int i = 0; i < SEC.n; i++)
        free(SEC.s[i]);
    SEC.n = 0;
}

static void secrets_add_token(const char *token, const char *what)
{
    assert_non_null(token);
    assert_true(strlen(token) >= 16);
    secret_add(strdup(token), what);
    secret_add(kl_test_base64(token), what);
}

static void secrets_add_key(const char *key_file)
{
    char *pem = kl_test_read_file(key_file, NULL);
    char *line, *save = NULL, *copy = strdup(pem);
    int lines = 0;

    assert_non_null(copy);
    assert_non_null(strstr(pem, "PRIVATE KEY-----"));
    for (line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (strncmp(line, "-----", 5) == 0 || strlen(line) < 16)
            continue;
        secret_add(strdup(line), "a line of the client key's PEM");
        lines++;
    }
    assert_true(lines >= 1);
    free(copy);
    secret_add(kl_test_base64(pem), "the base64 of the client key's PEM (client-key-data)");
    free(pem);
}

/* The first 20-character piece of a secret (or the whole of a shorter
 * one) found in text, copied into piece; the index of its secret, or -1. */
static int secret_in(const char *text, char piece[24])
{
    for (int i = 0; i < SEC.n; i++) {
        const char *s = SEC.s[i];
        size_t len = strlen(s), w = len < 20 ? len : 20;

        for (size_t off = 0; off + w <= len; off++) {
            memcpy(piece, s + off, w);
            piece[w] = '\0';
            if (strstr(text, piece))
                return i;
        }
    }
    return -1;
}

static void assert_no_secret(const char *text, const char *where)
{
    char piece[24];
    int i;

    if (strstr(text, "PRIVATE KEY"))
        fail_msg("%s shows a PEM private key header", where);
    if ((i = secret_in(text, piece)) >= 0)
        fail_msg("%s contains \"%s\", a piece of %s", where, piece, SEC.what[i]);
}

/* The check finds what it looks for: a piece from the middle of each
 * secret, in a line around it. */
static void secrets_check_the_check(void)
{
    for (int i = 0; i < SEC.n; i++) {
        char line[256], piece[24];
        size_t len = strlen(SEC.s[i]), off = len > 40 ? len / 2 - 10 : 0;

        snprintf(line, sizeof(line), "DEBUG Authorization: Bearer %.22s (leaked)", SEC.s[i] + off);
        if (secret_in(line, piece) != i)
            fail_msg("the secret check misses a piece of %s", SEC.what[i]);
    }
}

static void watch_seen(const char *identity, int64_t epoch, void *ud)
{
    (void)identity;
    (void)epoch;
    __atomic_store_n((int *)ud, 1, __ATOMIC_SEQ_CST);
}

/* The token file of a real server's kubeconfig-tokenfile, rotated (the
 * server restarts with the new token): a client of it gets a 401, reads
 * the file again and retries. Before any election: the restart takes
 * longer than the suite's renew deadline. */
static void rotate_on_real_server(k8slease_client *c)
{
    k8slease_holder *h = NULL;
    char *now;

    assert_int_equal(k8slease_holder_get(c, NULL, "badinput-rotate", 5000, &h), K8SLEASE_ENOTFOUND);
    assert_int_equal(e2e_ctl("apiserver", "rotate-token"), 0);
    now = kl_test_read_file(e2e_envtest_file("token-rotating"), NULL);
    secrets_add_token(now, "the rotated bearer token");
    free(now);
    assert_int_equal(k8slease_holder_get(c, NULL, "badinput-rotate", 10000, &h),
                     K8SLEASE_ENOTFOUND);
    assert_true(logs_contain("HTTP 401; retrying with fresh credentials"));
}

/* An election, renewals, a holder read, a watch, a pod label and a
 * release through a client of kc that logs everything (and, with
 * rotate_token, the token file rotated on the way). */
static void exercise(const char *kc, const char *lease, int rotate_token)
{
    static int seen;
    k8slease_client *c;
    k8slease_elector *e;
    k8slease_holder *h = NULL;
    k8slease_watch *w = NULL;
    long status = 0;

    c = client_logged(kc);
    if (rotate_token && !e2e_is_testserver())
        rotate_on_real_server(c);
    e = start_elector(c, lease, "secret-keeper:1");
    elected(e, lease);
    renewals(e, 2);
    if (rotate_token && e2e_is_testserver()) {
        char *old = ts_token(e2e_server()), body[256];

        /* A 401, a re-read of the token file, renewals with the new token. */
        assert_int_equal(
            ts_control(e2e_server(), "POST", "/testserver/v1/token", "{}", &status, NULL), 0);
        assert_int_equal(status, 200);
        {
            char *now = ts_token(e2e_server());

            secrets_add_token(now, "the rotated bearer token");
            free(now);
        }
        renewals(e, 3);
        assert_true(logs_contain("HTTP 401; retrying with fresh credentials"));
        snprintf(body, sizeof(body), "{\"token\":\"%s\"}", old);
        free(old);
        assert_int_equal(
            ts_control(e2e_server(), "POST", "/testserver/v1/token", body, &status, NULL), 0);
        assert_int_equal(status, 200);
        renewals(e, 2);
    }
    assert_int_equal(k8slease_holder_get(c, NULL, lease, 5000, &h), 0);
    assert_string_equal(h->identity, "secret-keeper:1");
    k8slease_holder_free(h);
    __atomic_store_n(&seen, 0, __ATOMIC_SEQ_CST);
    assert_int_equal(k8slease_watch_start(&w, c, NULL, lease, watch_seen, &seen), 0);
    for (int64_t deadline = e2e_mono_ms() + WAIT_MS; !__atomic_load_n(&seen, __ATOMIC_SEQ_CST);
         e2e_pause_ms(10))
        if (e2e_mono_ms() > deadline)
            fail_msg("no watch callback within %d ms", WAIT_MS);
    k8slease_watch_free(w);
    /* A pod label (a PATCH). */
    assert_int_equal(e2e_api("POST", "/api/v1/namespaces/default/pods",
                             "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":"
                             "{\"name\":\"badinput-secret-pod\"},\"spec\":{\"containers\":"
                             "[{\"name\":\"c\",\"image\":\"busybox\"}]}}",
                             &status, NULL),
                     0);
    assert_true(status == 201 || status == 409); /* 409: made by an earlier round */
    assert_int_equal(k8slease_pod_label(c, NULL, "badinput-secret-pod", "role", "leader"), 0);
    assert_int_equal(k8slease_pod_label(c, NULL, "badinput-secret-pod", "role", NULL), 0);
    /* Errors are logged too: a 403 on one renewal (a real server: a read
     * by a user RBAC grants nothing, below). */
    if (e2e_is_testserver()) {
        char rule[512];
        long id;

        snprintf(rule, sizeof(rule),
                 "{\"kind\":\"error\",\"status\":403,\"count\":1,\"match\":{\"verb\":\"update\","
                 "\"path_prefix\":\"" LEASES "/%s\"}}",
                 lease);
        id = e2e_add_fault(rule);
        e2e_wait_fault_retired(id, WAIT_MS);
    }
    renewals(e, 1);
    k8slease_elector_free(e); /* releases */
    assert_int_equal(k8slease_lease_release(c, NULL, lease, "secret-keeper:1", 0, 5000), 0);
    k8slease_client_free(c);
}

/* Runs the CLI with args (NULL-terminated), stdout and stderr into one
 * malloc'ed string; returns the exit status (-1: did not exit in time). */
static int run_cli(const char *const *args, char **out)
{
    int p[2], status = 0;
    pid_t pid;
    size_t len = 0, cap = 4096;
    char *buf = malloc(cap);
    int64_t deadline = e2e_mono_ms() + WAIT_MS;

    assert_non_null(buf);
    assert_int_equal(pipe2(p, O_CLOEXEC), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(p[1], 1);
        dup2(p[1], 2);
        /* The CLI starts as from a shell: with 0, 1 and 2 only (this test
         * process has sockets of its own that are not close-on-exec). */
        for (int fd = 3; fd < 4096; fd++)
            close(fd);
        execv(args[0], (char *const *)args);
        _exit(127);
    }
    close(p[1]);
    for (;;) {
        struct pollfd pf = {.fd = p[0], .events = POLLIN};
        int64_t left = deadline - e2e_mono_ms();
        ssize_t r;

        if (left <= 0 || poll(&pf, 1, (int)left) != 1) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            close(p[0]);
            buf[len] = '\0';
            *out = buf;
            return -1;
        }
        if (len + 1024 > cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
        r = read(p[0], buf + len, cap - len - 1);
        if (r <= 0)
            break;
        len += (size_t)r;
    }
    close(p[0]);
    buf[len] = '\0';
    *out = buf;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void cli_does_not_print(const char *kc, const char *lease)
{
#ifdef K8SLEASE_CLI_PATH
    char *out = NULL;
    int rc;
    const char *const elect[] = {K8SLEASE_CLI_PATH,
                                 "elect",
                                 "--lease",
                                 lease,
                                 "--identity",
                                 "cli-secret:1",
                                 "--lease-duration",
                                 "3s",
                                 "--renew-deadline",
                                 "2s",
                                 "--retry-period",
                                 "500ms",
                                 "--once",
                                 "--kubeconfig",
                                 kc,
                                 "--log-level",
                                 "debug",
                                 "--",
                                 "/bin/ls",
                                 "-l",
                                 "/proc/self/fd",
                                 NULL};
    const char *const holder[] = {K8SLEASE_CLI_PATH, "holder", "--lease",     lease,   "--json",
                                  "--kubeconfig",    kc,       "--log-level", "debug", NULL};

    rc = run_cli(elect, &out);
    if (rc != 0) {
        fprintf(stderr, "%s\n", out);
        fail_msg("k8slease elect exited %d (its output above)", rc);
    }
    /* It ran at debug level, and the command ran while leader. */
    assert_contains(out, "debug: ");
    assert_contains(out, "1 -> pipe:["); /* ls's listing: stdout is our pipe */
    assert_no_secret(out, "k8slease elect --log-level debug");
    /* The command inherited none of k8slease's sockets (close-on-exec). */
    if (strstr(out, "socket:[")) {
        fprintf(stderr, "%s\n", out);
        fail_msg("the command run by k8slease elect inherited a socket (output above)");
    }
    free(out);
    rc = run_cli(holder, &out);
    assert_contains(out, "debug: ");
    assert_no_secret(out, "k8slease holder --log-level debug");
    free(out);
    assert_true(rc == 0 || rc == 3); /* held, or released by elect */
#else
    (void)kc;
    (void)lease;
    print_message("  (the CLI is not built: its part is skipped)\n");
#endif
}

/* The path of a kubeconfig the server under test comes with (envtest.sh's
 * directory, or the test server's). */
static void server_kubeconfig(char *kc, size_t size, const char *name)
{
    const char *envtest = e2e_envtest_file(name);

    if (envtest)
        snprintf(kc, size, "%s", envtest);
    else
        snprintf(kc, size, "%s/%s", ts_dir(e2e_server()), name);
}

static void credentials_never_logged(void **state)
{
    char kc[512], key[512], wrong[512], user[256], msg[1024];
    const char *ca;
    char *token, *all, *url;
    k8slease_client *c;
    int real = !e2e_is_testserver();

    (void)state;
    if (real && !e2e_envtest_file("kubeconfig-cert")) {
        print_message("skipped: needs a client certificate and a rotating token file "
                      "(tests/integration/envtest.sh has both)\n");
        skip();
    }
    secrets_free();
    logs_reset();
    token = e2e_token();
    secrets_add_token(token, "the bearer token");
    free(token);
    if (real) {
        char *user_token = kl_test_read_file(e2e_envtest_file("token-rotating"), NULL);

        secrets_add_token(user_token, "the rotating bearer token");
        free(user_token);
        snprintf(key, sizeof(key), "%s", e2e_envtest_file("client.key"));
    } else {
        snprintf(key, sizeof(key), "%s/client.key", ts_dir(e2e_server()));
    }
    secrets_add_key(key);
    secret_add(strdup("badinput-wrong-token-7d1e4a90c3"), "a refused bearer token");
    secrets_check_the_check();

    /* (a) a bearer token in the kubeconfig */
    snprintf(kc, sizeof(kc), "%s", getenv("KUBECONFIG"));
    exercise(kc, "badinput-secret-token", 0);
    cli_does_not_print(kc, "default/badinput-cli-token");
    /* (b) a tokenFile, rotated on the way */
    server_kubeconfig(kc, sizeof(kc), "kubeconfig-tokenfile");
    exercise(kc, "badinput-secret-file", 1);
    cli_does_not_print(kc, "default/badinput-cli-file");
    /* (c) a client certificate and key (no token) */
    server_kubeconfig(kc, sizeof(kc), "kubeconfig-cert");
    exercise(kc, "badinput-secret-cert", 0);
    cli_does_not_print(kc, "default/badinput-cli-cert");
    /* (d) a token the server refuses: the 401 is logged, the token not */
    snprintf(user, sizeof(user), "    token: badinput-wrong-token-7d1e4a90c3");
    url = e2e_url();
    ca = real ? e2e_envtest_file("ca.crt") : ts_ca_file(e2e_server());
    write_kubeconfig(wrong, sizeof(wrong), "kc-wrong-token", url, ca, user);
    free(url);
    c = client_logged(wrong);
    assert_int_equal(holder_fails(c, "badinput-secret-token", 5000, msg, sizeof(msg)),
                     K8SLEASE_EAUTH);
    assert_no_secret(msg, "k8slease_error_last()");
    k8slease_client_free(c);
    /* (e) a real server's 403: a user RBAC grants nothing reads a Lease */
    if (real) {
        char *text, *t, *end;

        snprintf(kc, sizeof(kc), "%s", e2e_envtest_file("kubeconfig-user"));
        text = kl_test_read_file(kc, NULL);
        assert_non_null(t = strstr(text, "token: "));
        t += strlen("token: ");
        if ((end = strchr(t, '\n')))
            *end = '\0';
        secrets_add_token(t, "the bearer token of a user without rights");
        free(text);
        c = client_logged(kc);
        assert_int_equal(holder_fails(c, "badinput-secret-token", 5000, msg, sizeof(msg)),
                         K8SLEASE_EAUTH);
        assert_no_secret(msg, "k8slease_error_last()");
        k8slease_client_free(c);
    }

    all = logs_copy();
    /* The log really is at debug level and covers the requests. */
    assert_true(strstr(all, "DEBUG PUT ") != NULL || strstr(all, "DEBUG POST ") != NULL);
    assert_non_null(strstr(all, "DEBUG GET "));
    assert_non_null(strstr(all, "DEBUG PATCH "));
    assert_non_null(strstr(all, "HTTP 401"));
    assert_non_null(strstr(all, "HTTP 403"));
    print_message("  %d log lines checked\n", logs.lines);
    assert_no_secret(all, "the debug log");
    free(all);
    secrets_free();
}

/* ------------------------------------------------------------------------ */
/* Sockets are close-on-exec                                                */
/* ------------------------------------------------------------------------ */

/* The inodes of this process's sockets, fd by fd (0 where not a socket). */
static void socket_inodes(unsigned long *ino, int max)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *de;

    assert_non_null(d);
    memset(ino, 0, sizeof(*ino) * (size_t)max);
    while ((de = readdir(d))) {
        char path[64], link[64];
        int fd = atoi(de->d_name);
        ssize_t n;

        if (de->d_name[0] == '.' || fd < 0 || fd >= max || fd == dirfd(d))
            continue;
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        n = readlink(path, link, sizeof(link) - 1);
        if (n <= 0)
            continue;
        link[n] = '\0';
        sscanf(link, "socket:[%lu]", &ino[fd]);
    }
    closedir(d);
}

#define MAXFD 1024

static const char *domain_name(int fd)
{
    int domain = -1;
    socklen_t len = sizeof(domain);

    getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len);
    return domain == AF_UNIX    ? "AF_UNIX"
           : domain == AF_INET  ? "AF_INET"
           : domain == AF_INET6 ? "AF_INET6"
                                : "another domain";
}

static void sockets_close_on_exec(void **state)
{
    static unsigned long before[MAXFD], after[MAXFD];
    static char found[4096];
    k8slease_client *c;
    k8slease_elector *e;
    k8slease_holder *h = NULL;
    int lib = 0, to_server = 0, leaks = 0, p[2], status, port;
    char listing[16384];
    size_t len = 0, flen = 0;
    pid_t pid;

    (void)state;
    assert_true((port = e2e_port()) > 0);
    found[0] = '\0';
    socket_inodes(before, MAXFD);
    c = client_for(getenv("KUBECONFIG"));
    e = start_elector(c, "badinput-cloexec", "cloexec:1");
    elected(e, "cloexec:1");
    for (int64_t deadline = e2e_mono_ms() + WAIT_MS; !stats(e).watch_healthy; e2e_pause_ms(20))
        if (e2e_mono_ms() > deadline)
            fail_msg("the watch was not healthy within %d ms", WAIT_MS);
    assert_int_equal(k8slease_holder_get(c, NULL, "badinput-cloexec", 5000, &h), 0);
    k8slease_holder_free(h);
    /* Sockets opened since the first look are the library's (this test
     * makes no other connection in between). */
    socket_inodes(after, MAXFD);

    /* Each of them is close-on-exec ... */
    for (int fd = 0; fd < MAXFD; fd++) {
        struct sockaddr_in peer;
        socklen_t sl = sizeof(peer);
        int flags, api;

        if (!after[fd] || after[fd] == before[fd])
            continue;
        lib++;
        api = getpeername(fd, (struct sockaddr *)&peer, &sl) == 0 && peer.sin_family == AF_INET &&
              ntohs(peer.sin_port) == port;
        to_server += api;
        flags = fcntl(fd, F_GETFD);
        assert_true(flags >= 0);
        if (!(flags & FD_CLOEXEC)) {
            leaks++;
            flen += (size_t)snprintf(
                found + flen, sizeof(found) - flen,
                "  fd %d socket:[%lu] (%s%s) is not close-on-exec%s\n", fd, after[fd],
                domain_name(fd), api ? ", to the API server" : "",
                strcmp(domain_name(fd), "AF_UNIX") == 0
                    ? ": probably libcurl's wakeup socketpair from curl_multi_init(), which "
                      "libcurl before 8.8.0 does not make close-on-exec (curl issue #13618)"
                    : "");
        }
    }
    print_message("  %d new sockets, %d of them to the API server\n", lib, to_server);
    assert_true(to_server >= 1); /* the watch stream at least */

    /* ... and a child that execs has none of them. */
    assert_int_equal(pipe2(p, O_CLOEXEC), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(p[1], 1);
        execl("/bin/ls", "ls", "-l", "/proc/self/fd", (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    for (ssize_t r; (r = read(p[0], listing + len, sizeof(listing) - 1 - len)) > 0;)
        len += (size_t)r;
    listing[len] = '\0';
    close(p[0]);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_non_null(strstr(listing, " -> ")); /* ls did list its fds */
    for (int fd = 0; fd < MAXFD; fd++) {
        char sock[48];

        if (!after[fd] || after[fd] == before[fd])
            continue;
        snprintf(sock, sizeof(sock), "socket:[%lu]", after[fd]);
        if (strstr(listing, sock)) {
            leaks++;
            flen += (size_t)snprintf(found + flen, sizeof(found) - flen,
                                     "  the exec'd child has %s (our fd %d)\n", sock, fd);
        }
    }
    k8slease_elector_free(e);
    k8slease_client_free(c);
    if (leaks) {
        fprintf(stderr, "%s", found);
        fail_msg("%d leaks of the library's sockets across exec (listed above)", leaks);
    }
}

int main(void)
{
    const char *only = getenv("K8SLEASE_TEST_FILTER");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(testserver_respond_fault),
        cmocka_unit_test(native_options_refused),
        cmocka_unit_test(seed_abi_bad_input),
        cmocka_unit_test(identity_not_utf8_refused),
        cmocka_unit_test(garbage_json),
        cmocka_unit_test(wrong_content_type),
        cmocka_unit_test(huge_body),
        cmocka_unit_test(slowloris),
        cmocka_unit_test(redirect_refused),
        cmocka_unit_test(negative_transitions),
        cmocka_unit_test(missing_spec),
        cmocka_unit_test(http_instead_of_https),
        cmocka_unit_test(wrong_ca),
        cmocka_unit_test(credentials_never_logged),
        cmocka_unit_test(sockets_close_on_exec),
    };

    pthread_mutex_init(&logs.mu, NULL);
    if (only && only[0])
        cmocka_set_test_filter(only); /* e.g. K8SLEASE_TEST_FILTER=slowloris */
    return cmocka_run_group_tests(tests, setup, teardown);
}
