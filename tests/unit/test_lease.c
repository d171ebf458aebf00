/* Lease codec, MicroTime, Status and watch-stream tests, driven by bodies
 * captured from a real kube-apiserver (tests/data/k8s-api-samples). */
/* gmtime_r, the test's oracle for MicroTime formatting. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/common.h"
#include "k8s/codec.h"
#include "testlib.h"

#define T_2026_11_30_10_02_59 INT64_C(1796032979000000)
#define T_CLIENTGO_ACQUIRE    INT64_C(1796033270411031)
#define T_CLIENTGO_RENEW1     INT64_C(1796033270418716)
#define T_CLIENTGO_RENEW2     INT64_C(1796033271424816)
#define T_CLIENTGO_RELEASE    INT64_C(1796033272428635)
#define T_MIN_YEAR1           INT64_C(-62135596800000000) /* 0001-01-01T00:00:00Z */
#define T_MAX_YEAR9999        INT64_C(253402300799999999) /* 9999-12-31T23:59:59.999999Z */

static char *read_sample(const char *name, size_t *len)
{
    return kl_test_read_data("k8s-api-samples", name, len);
}

static void assert_error_contains(const char *needle)
{
    const char *msg = kl__error_get();

    if (!strstr(msg, needle))
        fail_msg("error message \"%s\" does not contain \"%s\"", msg, needle);
}

/* xorshift64*: a fixed seed makes every "random" test reproducible. */
static uint64_t rng_state;

static uint64_t rng_next(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * UINT64_C(2685821657736338717);
}

/* Uniform enough in [lo, hi] for tests. */
static int64_t rng_range(int64_t lo, int64_t hi)
{
    return lo + (int64_t)(rng_next() % (uint64_t)(hi - lo + 1));
}

/* ------------------------------------------------------------------------ */
/* Lease parse                                                              */
/* ------------------------------------------------------------------------ */

static const struct {
    const char *file;
    const char *ns, *name, *rv, *uid, *holder;
    int64_t duration, acquire, renew, transitions;
} lease_samples[] = {
    {"200_get.json", "default", "sample-lease", "209", "55584fcc-8d52-4c07-a0e6-7c41de8f7499",
     "node-b", 15, T_2026_11_30_10_02_59, T_2026_11_30_10_02_59, 1},
    {"201_create.json", "default", "sample-lease", "208", "55584fcc-8d52-4c07-a0e6-7c41de8f7499",
     "node-a", 15, T_2026_11_30_10_02_59, T_2026_11_30_10_02_59, 0},
    {"200_update.json", "default", "sample-lease", "209", "55584fcc-8d52-4c07-a0e6-7c41de8f7499",
     "node-b", 15, T_2026_11_30_10_02_59, T_2026_11_30_10_02_59, 1},
    {"200_get_clientgo_lease.json", "default", "clientgo-lease", "562",
     "c61d7f4e-b567-46f5-b7a2-745a7d73e438", "le-holder-1", 5, T_CLIENTGO_ACQUIRE,
     T_CLIENTGO_RENEW1, 0},
    {"201_put_create_on_update.json", "default", "sample-lease", "206",
     "0c9f7704-3d5c-4de6-8c0e-642f624e3c2b", "x", 0, 0, 0, 0},
    {"get_rv_compacted.json", "default", "gone-lease-compact", "199",
     "a7a74d33-66c2-4810-9723-904dd319d40e", "h3", 0, 0, 0, 0},
    {"request_put_update_body.json", "default", "sample-lease", "208",
     "55584fcc-8d52-4c07-a0e6-7c41de8f7499", "node-b", 15, T_2026_11_30_10_02_59,
     T_2026_11_30_10_02_59, 1},
};

static void test_lease_parse_samples(void **state)
{
    (void)state;
    for (size_t i = 0; i < KL_ARRAY_LEN(lease_samples); i++) {
        size_t len;
        char *body = read_sample(lease_samples[i].file, &len);
        kl__lease *l = NULL;

        if (kl__lease_parse(&l, body, len) != 0)
            fail_msg("%s: %s", lease_samples[i].file, kl__error_get());
        assert_string_equal(l->ns, lease_samples[i].ns);
        assert_string_equal(l->name, lease_samples[i].name);
        assert_string_equal(l->rv, lease_samples[i].rv);
        assert_string_equal(l->uid, lease_samples[i].uid);
        assert_string_equal(l->spec.holder, lease_samples[i].holder);
        assert_int_equal(l->spec.duration_s, lease_samples[i].duration);
        assert_int_equal(l->spec.acquire_us, lease_samples[i].acquire);
        assert_int_equal(l->spec.renew_us, lease_samples[i].renew);
        assert_int_equal(l->spec.transitions, lease_samples[i].transitions);
        /* The whole object is kept, not just what we decode: as text,
         * with the tree built when asked for. */
        assert_null(l->root);
        assert_non_null(l->text);
        assert_string_equal(json_string_value(json_object_get(kl__lease_root(l), "apiVersion")),
                            "coordination.k8s.io/v1");
        kl__lease_free(l);
        kl__free(body);
    }
}

static void test_lease_missing_and_null_fields(void **state)
{
    static const char *bodies[] = {
        "{\"metadata\":{\"name\":\"x\"}}",
        "{\"kind\":null,\"metadata\":{\"name\":\"x\",\"namespace\":null,\"uid\":null},"
        "\"spec\":null}",
        "{\"kind\":\"Lease\",\"metadata\":{\"name\":\"x\",\"resourceVersion\":null},\"spec\":{}}",
        "{\"metadata\":{\"name\":\"x\"},\"spec\":{\"holderIdentity\":null,"
        "\"leaseDurationSeconds\":null,\"acquireTime\":null,\"renewTime\":null,"
        "\"leaseTransitions\":null}}",
    };
    kl__lease *l;

    (void)state;
    for (size_t i = 0; i < KL_ARRAY_LEN(bodies); i++) {
        if (kl__lease_parse(&l, bodies[i], strlen(bodies[i])) != 0)
            fail_msg("%s: %s", bodies[i], kl__error_get());
        assert_string_equal(l->name, "x");
        assert_string_equal(l->ns, "");
        assert_string_equal(l->rv, "");
        assert_string_equal(l->uid, "");
        assert_null(l->spec.holder);
        assert_int_equal(l->spec.duration_s, 0);
        assert_int_equal(l->spec.acquire_us, 0);
        assert_int_equal(l->spec.renew_us, 0);
        assert_int_equal(l->spec.transitions, 0);
        kl__lease_free(l);
    }

    /* An empty holder is "no leader", distinct from an absent one. */
    const char *empty = "{\"metadata\":{\"name\":\"x\"},\"spec\":{\"holderIdentity\":\"\"}}";
    assert_int_equal(kl__lease_parse(&l, empty, strlen(empty)), 0);
    assert_non_null(l->spec.holder);
    assert_string_equal(l->spec.holder, "");
    kl__lease_free(l);
}

static void test_lease_parse_errors(void **state)
{
    static const struct {
        const char *body;
        const char *msg;
    } cases[] = {
        {"", "Lease body: not valid JSON at line"},
        {"{\"kind\"", "Lease body: not valid JSON at line 1 column"},
        {"{\"metadata\":{\"name\":\"x\"}} x", "Lease body: not valid JSON"},
        {"42", "Lease: not a JSON object"},
        {"[1]", "Lease: not a JSON object"},
        {"{}", "Lease: metadata.name missing"},
        {"{\"metadata\":{\"name\":\"\"}}", "Lease: metadata.name missing"},
        {"{\"metadata\":{\"name\":5}}", "Lease: metadata.name: must be a string"},
        {"{\"metadata\":[]}", "Lease: metadata: must be an object"},
        {"{\"kind\":\"Pod\",\"metadata\":{\"name\":\"x\"}}", "expected a Lease, got a Pod"},
        {"{\"kind\":3,\"metadata\":{\"name\":\"x\"}}", "kind: must be a string"},
        {"{\"metadata\":{\"name\":\"x\",\"namespace\":\"default\",\"resourceVersion\":7}}",
         "Lease default/x: metadata.resourceVersion: must be a string"},
        {"{\"metadata\":{\"name\":\"x\",\"namespace\":4}}", "metadata.namespace: must be a string"},
        {"{\"metadata\":{\"name\":\"x\",\"namespace\":\"default\"},\"spec\":{\"renewTime\":"
         "\"abc\"}}",
         "Lease default/x: spec.renewTime: invalid MicroTime \"abc\""},
        {"{\"metadata\":{\"name\":\"x\",\"namespace\":\"default\"},\"spec\":{\"acquireTime\":"
         "\"2026-11-30T10:02:59.000000\"}}",
         "Lease default/x: spec.acquireTime: invalid MicroTime"},
        {"{\"metadata\":{\"name\":\"x\"},\"spec\":{\"renewTime\":\"z\"}}",
         "Lease x: spec.renewTime: invalid MicroTime"},
        {"{\"metadata\":{\"name\":\"x\"},\"spec\":{\"acquireTime\":5}}",
         "spec.acquireTime: must be a string"},
        {"{\"metadata\":{\"name\":\"x\",\"namespace\":\"default\"},\"spec\":{"
         "\"leaseTransitions\":\"1\"}}",
         "Lease default/x: spec.leaseTransitions: must be an integer"},
        {"{\"metadata\":{\"name\":\"x\"},\"spec\":{\"leaseTransitions\":1.0}}",
         "spec.leaseTransitions: must be an integer"},
        {"{\"metadata\":{\"name\":\"x\"},\"spec\":{\"leaseTransitions\":-1}}",
         "spec.leaseTransitions: must not be negative"},
        {"{\"metadata\":{\"name\":\"x\"},\"spec\":{\"leaseDurationSeconds\":-15}}",
         "spec.leaseDurationSeconds: must not be negative"},
        {"{\"metadata\":{\"name\":\"x\"},\"spec\":{\"leaseDurationSeconds\":4294967296}}",
         "spec.leaseDurationSeconds: 4294967296 does not fit an int32"},
        {"{\"metadata\":{\"name\":\"x\"},\"spec\":{\"leaseDurationSeconds\":true}}",
         "spec.leaseDurationSeconds: must be an integer"},
        {"{\"metadata\":{\"name\":\"x\"},\"spec\":{\"holderIdentity\":3}}",
         "spec.holderIdentity: must be a string"},
        {"{\"metadata\":{\"name\":\"x\",\"namespace\":\"default\"},\"spec\":\"x\"}",
         "Lease default/x: spec: must be an object"},
    };

    (void)state;
    for (size_t i = 0; i < KL_ARRAY_LEN(cases); i++) {
        kl__lease *l = (kl__lease *)&l; /* poison: must be reset to NULL */

        kl__error_clear();
        /* The scanner leaves them to jansson, which names the field. */
        assert_int_equal(kl__lease_scan(&l, cases[i].body, strlen(cases[i].body)), 1);
        assert_null(l);
        assert_string_equal(kl__error_get(), "");
        if (kl__lease_parse(&l, cases[i].body, strlen(cases[i].body)) != K8SLEASE_EPROTOCOL)
            fail_msg("case %zu (%s) was not rejected", i, cases[i].body);
        assert_null(l);
        assert_error_contains(cases[i].msg);
    }
}

/* An error body where a Lease was expected must say what came instead. */
static void test_lease_parse_wrong_kind_samples(void **state)
{
    static const struct {
        const char *file, *msg;
    } cases[] = {
        {"404_notfound_get.json",
         "expected a Lease, got a Status: leases.coordination.k8s.io \"sample-lease\" not found"},
        {"409_conflict.json", "expected a Lease, got a Status: Operation cannot be fulfilled"},
        {"401_unauthorized.json", "expected a Lease, got a Status: Unauthorized"},
        {"200_delete.json", "expected a Lease, got a Status"},
        {"200_list.json", "expected a Lease, got a LeaseList"},
    };

    (void)state;
    for (size_t i = 0; i < KL_ARRAY_LEN(cases); i++) {
        size_t len;
        char *body = read_sample(cases[i].file, &len);
        kl__lease *l = NULL;

        assert_int_equal(kl__lease_parse(&l, body, len), K8SLEASE_EPROTOCOL);
        assert_null(l);
        assert_error_contains(cases[i].msg);
        kl__free(body);
    }
}

static void test_lease_from_json_refcount(void **state)
{
    json_t *obj = json_pack("{s:{s:s, s:s}, s:{s:s, s:i}}", "metadata", "name", "x", "namespace",
                            "ns", "spec", "holderIdentity", "me", "leaseTransitions", 4);
    json_t *arr = json_array();
    kl__lease *l = NULL;

    (void)state;
    assert_non_null(obj);
    assert_int_equal(kl__lease_from_json(&l, obj), 0);
    assert_int_equal(obj->refcount, 2);
    assert_ptr_equal(l->root, obj);
    /* Borrowed, not copied. */
    assert_ptr_equal(l->spec.holder, json_string_value(json_object_get(json_object_get(obj, "spec"),
                                                                       "holderIdentity")));
    assert_int_equal(l->spec.transitions, 4);
    kl__lease_free(l);
    assert_int_equal(obj->refcount, 1);

    assert_int_equal(kl__lease_from_json(&l, arr), K8SLEASE_EPROTOCOL);
    assert_null(l);
    assert_int_equal(kl__lease_from_json(&l, NULL), K8SLEASE_EPROTOCOL);
    assert_null(l);
    /* A failed decode must drop its reference too. */
    json_object_set_new(obj, "kind", json_string("Pod"));
    assert_int_equal(kl__lease_from_json(&l, obj), K8SLEASE_EPROTOCOL);
    assert_int_equal(obj->refcount, 1);
    kl__lease_free(NULL);
    json_decref(obj);
    json_decref(arr);
}

/* ------------------------------------------------------------------------ */
/* The scanner against the jansson path                                     */
/* ------------------------------------------------------------------------ */

static void assert_same_string(const char *what, const char *a, const char *b)
{
    if ((a == NULL) != (b == NULL) || (a && strcmp(a, b) != 0))
        fail_msg("%s: scanner \"%s\", jansson \"%s\"", what, a ? a : "(null)", b ? b : "(null)");
}

/* Every field the election reads, and the text is the tree's object. */
static void assert_same_lease(kl__lease *scanned, kl__lease *parsed)
{
    assert_null(scanned->root);
    assert_non_null(scanned->text);
    assert_int_equal(strlen(scanned->text), scanned->text_len);
    assert_same_string("name", scanned->name, parsed->name);
    assert_same_string("namespace", scanned->ns, parsed->ns);
    assert_same_string("resourceVersion", scanned->rv, parsed->rv);
    assert_same_string("uid", scanned->uid, parsed->uid);
    assert_same_string("holderIdentity", scanned->spec.holder, parsed->spec.holder);
    assert_same_string("preferredHolder", scanned->preferred_holder, parsed->preferred_holder);
    assert_same_string("strategy", scanned->strategy, parsed->strategy);
    assert_same_string("holder-container", scanned->holder_container, parsed->holder_container);
    assert_int_equal(scanned->holder_container_bad, parsed->holder_container_bad);
    assert_int_equal(scanned->spec.duration_s, parsed->spec.duration_s);
    assert_int_equal(scanned->spec.acquire_us, parsed->spec.acquire_us);
    assert_int_equal(scanned->spec.renew_us, parsed->spec.renew_us);
    assert_int_equal(scanned->spec.transitions, parsed->spec.transitions);
    assert_non_null(kl__lease_root(scanned));
    assert_non_null(kl__lease_root(parsed));
    assert_true(json_equal(scanned->root, parsed->root));
}

/* Both paths over one body: returns 0 when the scanner took it (and then
 * read the same as jansson), 1 when it declined. jansson's verdict in *err. */
static int scan_vs_jansson(const char *body, size_t len, int *err)
{
    kl__lease *scanned = NULL, *parsed = NULL;
    int rc = kl__lease_scan(&scanned, body, len);

    *err = kl__lease_parse_json(&parsed, body, len);
    if (rc == 0) {
        if (*err != 0)
            fail_msg("the scanner took what jansson rejects (%s): %.*s", kl__error_get(), (int)len,
                     body);
        assert_same_lease(scanned, parsed);
    } else {
        assert_int_equal(rc, 1);
        assert_null(scanned);
    }
    kl__lease_free(scanned);
    kl__lease_free(parsed);
    return rc;
}

/* The same for one watch event line. */
static int event_scan_vs_jansson(const char *line, size_t len, int *err)
{
    kl__watch_event a, b;
    int rc = kl__watch_event_scan(&a, line, len);

    *err = kl__watch_event_parse_json(&b, line, len);
    if (rc == 0) {
        if (*err != 0)
            fail_msg("the scanner took what jansson rejects (%s): %.*s", kl__error_get(), (int)len,
                     line);
        assert_int_equal(a.type, b.type);
        assert_true((a.lease == NULL) == (b.lease == NULL));
        if (a.lease)
            assert_same_lease(a.lease, b.lease);
        assert_same_string("bookmark", a.bookmark_rv, b.bookmark_rv);
    } else {
        assert_int_equal(rc, 1);
        assert_null(a.lease);
        assert_null(a.bookmark_rv);
    }
    kl__watch_event_clear(&a);
    kl__watch_event_clear(&b);
    return rc;
}

/* Every body captured from kube-apiserver: each Lease the scanner must
 * take (the common case must not go to jansson), each other object it
 * must leave to jansson, which rejects it. */
static void test_scan_samples(void **state)
{
    static const char *const not_leases[] = {
        "200_delete.json",          "200_list.json",         "401_unauthorized.json",
        "404_notfound_delete.json", "404_notfound_get.json", "404_notfound_patch.json",
        "409_alreadyexists.json",   "409_conflict.json",     "410_gone_list_compacted.json",
    };
    int err;

    (void)state;
    for (size_t i = 0; i < KL_ARRAY_LEN(lease_samples); i++) {
        size_t len;
        char *body = read_sample(lease_samples[i].file, &len);

        if (scan_vs_jansson(body, len, &err) != 0)
            fail_msg("%s: the scanner declined it", lease_samples[i].file);
        kl__free(body);
    }
    for (size_t i = 0; i < KL_ARRAY_LEN(not_leases); i++) {
        size_t len;
        char *body = read_sample(not_leases[i], &len);

        assert_int_equal(scan_vs_jansson(body, len, &err), 1);
        assert_int_equal(err, K8SLEASE_EPROTOCOL);
        kl__free(body);
    }
}

/* Every line of the captured watch streams; the ERROR events (410) go to
 * jansson, everything else the scanner takes. */
static void test_scan_watch_samples(void **state)
{
    static const char *const files[] = {
        "watch_events.jsonl",
        "watch_events_clientgo_election.jsonl",
        "watch_events_norv.jsonl",
        "watch_http11_body.raw",
        "watch_event_modified.json",
        "410_gone_watch_cache.json",
        "410_gone_watch_compacted.json",
    };
    size_t taken = 0, errors = 0;
    int err;

    (void)state;
    for (size_t i = 0; i < KL_ARRAY_LEN(files); i++) {
        size_t len;
        char *body = read_sample(files[i], &len), *line = body, *nl;

        while (*line) {
            size_t n;

            nl = strchr(line, '\n');
            n = nl ? (size_t)(nl - line) : strlen(line);
            if (n > 0 && line[n - 1] == '\r')
                n--;
            /* The HTTP/1.1 capture has chunk sizes between the lines. */
            if (n > 0 && line[0] == '{') {
                if (event_scan_vs_jansson(line, n, &err) == 0) {
                    taken++;
                } else {
                    assert_int_equal(err, 0);
                    assert_non_null(strstr(line, "\"ERROR\""));
                    errors++;
                }
            }
            line = nl ? nl + 1 : line + strlen(line);
        }
        kl__free(body);
    }
    assert_int_equal(taken, 9);
    assert_int_equal(errors, 2);
}

/* The bodies of the differential capture (kube-apiserver v1.36.3): every
 * Lease among them, as jansson writes it back, compact and indented. */
static void test_scan_capture(void **state)
{
    char path[4096];
    json_t *capture, *results, *r;
    size_t i, leases = 0;
    int err;

    (void)state;
    snprintf(path, sizeof(path), "%s/differential/capture-v1.36.3.json", K8SLEASE_TEST_DATA);
    capture = json_load_file(path, 0, NULL);
    assert_non_null(capture);
    results = json_object_get(capture, "results");
    json_array_foreach(results, i, r)
    {
        json_t *body = json_object_get(json_object_get(r, "response"), "body");
        const char *kind = json_string_value(json_object_get(body, "kind"));
        static const size_t flags[] = {JSON_COMPACT | JSON_PRESERVE_ORDER,
                                       JSON_INDENT(2) | JSON_PRESERVE_ORDER};

        if (!kind || strcmp(kind, "Lease") != 0)
            continue;
        for (size_t f = 0; f < KL_ARRAY_LEN(flags); f++) {
            char *text = json_dumps(body, flags[f]);

            assert_non_null(text);
            if (scan_vs_jansson(text, strlen(text), &err) != 0)
                fail_msg("declined: %s", text);
            free(text);
        }
        leases++;
    }
    assert_true(leases >= 5);
    json_decref(capture);
}

/* Strings with escapes are decoded as jansson decodes them. */
static void test_scan_escapes(void **state)
{
    static const char *const bodies[] = {
        "{\"metadata\":{\"name\":\"a\\\"b\\\\c\\/d\",\"namespace\":\"\\u0041\\u00e9\\u20ac\"},"
        "\"spec\":{\"holderIdentity\":\"\\b\\f\\n\\r\\t \\ud83d\\ude00 \\uD834\\uDD1E\"}}",
        /* Go's encoding/json writes <, > and & so. */
        "{\"metadata\":{\"name\":\"x\",\"uid\":\"\\u003cu\\u003e\\u0026\"},\"spec\":{"
        "\"preferredHolder\":\"\\u2028\",\"strategy\":\"a/b\",\"renewTime\":"
        "\"2026-11-30T10:02:59.000001\\u005a\"}}",
        /* Raw UTF-8 of 2, 3 and 4 bytes. */
        "{\"metadata\":{\"name\":\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"},\"spec\":{}}",
        /* Escapes in members nobody reads, and in keys of objects not read. */
        "{\"metadata\":{\"name\":\"x\",\"labels\":{\"a\\u0062\":\"\\\"\"}},\"x\":{\"y\\n\":["
        "\"\\ud800\\udc00\"]}}",
    };
    kl__lease *l;
    int err;

    (void)state;
    for (size_t i = 0; i < KL_ARRAY_LEN(bodies); i++)
        if (scan_vs_jansson(bodies[i], strlen(bodies[i]), &err) != 0)
            fail_msg("case %zu declined: %s", i, bodies[i]);
    assert_int_equal(kl__lease_scan(&l, bodies[0], strlen(bodies[0])), 0);
    assert_string_equal(l->name, "a\"b\\c/d");
    assert_string_equal(l->ns, "A\xc3\xa9\xe2\x82\xac");
    assert_string_equal(l->spec.holder, "\b\f\n\r\t \xf0\x9f\x98\x80 \xf0\x9d\x84\x9e");
    kl__lease_free(l);
}

/* Crash failover's record is JSON in a string: full of escapes, and read
 * by the scanner like any other. Not a string: jansson's path, which keeps
 * the fact for crash failover to report. */
static void test_scan_holder_container(void **state)
{
    const char *record = "{\"metadata\":{\"name\":\"x\",\"annotations\":{\"a\":\"b\","
                         "\"k8slease.io/holder-container\":\"{\\\"holder\\\":\\\"me\\\","
                         "\\\"epoch\\\":3}\"}},\"spec\":{}}";
    const char *number = "{\"metadata\":{\"name\":\"x\",\"annotations\":{"
                         "\"k8slease.io/holder-container\":5}}}";
    const char *none = "{\"metadata\":{\"name\":\"x\",\"annotations\":{}}}";
    kl__lease *l;
    int err;

    (void)state;
    assert_int_equal(scan_vs_jansson(record, strlen(record), &err), 0);
    assert_int_equal(kl__lease_scan(&l, record, strlen(record)), 0);
    assert_string_equal(l->holder_container, "{\"holder\":\"me\",\"epoch\":3}");
    assert_int_equal(l->holder_container_bad, 0);
    kl__lease_free(l);

    assert_int_equal(scan_vs_jansson(number, strlen(number), &err), 1);
    assert_int_equal(err, 0);
    assert_int_equal(kl__lease_parse(&l, number, strlen(number)), 0);
    assert_null(l->holder_container);
    assert_int_equal(l->holder_container_bad, 1);
    kl__lease_free(l);

    assert_int_equal(scan_vs_jansson(none, strlen(none), &err), 0);
    assert_int_equal(kl__lease_scan(&l, none, strlen(none)), 0);
    assert_null(l->holder_container);
    assert_int_equal(l->holder_container_bad, 0);
    kl__lease_free(l);
}

/* What the scanner is not sure of it declines: jansson then takes it
 * (want_err 0, and kl__lease_parse gives jansson's reading) or rejects it. */
static void test_scan_declines(void **state)
{
    static char deep[400];
    static const struct {
        const char *body;
        int want_err;
    } cases[] = {
        /* A key with an escape in an object whose members are read. */
        {"{\"metadata\":{\"na\\u006de\":\"x\"}}", 0},
        {"{\"metadata\":{\"name\":\"x\"},\"sp\\u0065c\":{\"holderIdentity\":\"h\"}}", 0},
        {"{\"metadata\":{\"name\":\"x\",\"annotations\":{"
         "\"k8slease.io\\/holder-container\":\"{}\"}}}",
         0},
        /* A member read given twice: jansson keeps the last one. */
        {"{\"metadata\":{\"name\":\"x\",\"name\":\"y\"}}", 0},
        {"{\"metadata\":{\"name\":\"x\"},\"spec\":{\"leaseTransitions\":1,"
         "\"leaseTransitions\":2}}",
         0},
        {"{\"metadata\":{\"name\":\"x\"},\"metadata\":{\"name\":\"y\"}}", 0},
        {"{\"metadata\":{\"name\":\"x\"},\"spec\":{},\"spec\":{\"holderIdentity\":\"h\"}}", 0},
        {"{\"kind\":\"Lease\",\"kind\":\"Lease\",\"metadata\":{\"name\":\"x\"}}", 0},
        /* Numbers: reals, more than 18 digits (jansson takes up to 2^63-1). */
        {"{\"metadata\":{\"name\":\"x\"},\"x\":1.5}", 0},
        {"{\"metadata\":{\"name\":\"x\"},\"x\":1e3}", 0},
        {"{\"metadata\":{\"name\":\"x\"},\"x\":1000000000000000000}", 0},
        {"{\"metadata\":{\"name\":\"x\"},\"x\":-9223372036854775808}", 0},
        {"{\"metadata\":{\"name\":\"x\"},\"x\":9223372036854775808}", K8SLEASE_EPROTOCOL},
        {"{\"metadata\":{\"name\":\"x\"},\"x\":1e999}", K8SLEASE_EPROTOCOL},
        {"{\"metadata\":{\"name\":\"x\"},\"spec\":{\"leaseDurationSeconds\":2147483648}}",
         K8SLEASE_EPROTOCOL},
        /* Not JSON, as jansson's lexer has it. */
        {"{\"metadata\":{\"name\":\"x\"},\"x\":01}", K8SLEASE_EPROTOCOL},
        {"{\"metadata\":{\"name\":\"x\"},\"x\":-}", K8SLEASE_EPROTOCOL},
        {"{\"metadata\":{\"name\":\"x\"},\"x\":1.}", K8SLEASE_EPROTOCOL},
        {"{\"metadata\":{\"name\":\"x\"},\"x\":+1}", K8SLEASE_EPROTOCOL},
        {"{\"metadata\":{\"name\":\"x\"},\"x\":tru}", K8SLEASE_EPROTOCOL},
        {"{\"metadata\":{\"name\":\"x\"},\"x\":truex}", K8SLEASE_EPROTOCOL},
        {"{\"metadata\":{\"name\":\"x\"},\"x\":[1,]}", K8SLEASE_EPROTOCOL},
        {"{\"metadata\":{\"name\":\"x\"},}", K8SLEASE_EPROTOCOL},
        {"{\"metadata\":{\"name\":\"x\"}", K8SLEASE_EPROTOCOL},
        {"{\"metadata\":{\"name\":\"x\"}}}", K8SLEASE_EPROTOCOL},
        {"{\"metadata\":{\"name\":\"x\"}} {}", K8SLEASE_EPROTOCOL},
        {"\xef\xbb\xbf{\"metadata\":{\"name\":\"x\"}}", K8SLEASE_EPROTOCOL},
        {"{\"metadata\":{\"name\":\"x\"}}\f", K8SLEASE_EPROTOCOL},
        {"{'metadata':{}}", K8SLEASE_EPROTOCOL},
        /* Strings jansson rejects. */
        {"{\"metadata\":{\"name\":\"x\"},\"x\":\"\\u0000\"}", K8SLEASE_EPROTOCOL},
        {"{\"metadata\":{\"name\":\"x\"},\"x\":\"\\ud800\"}", K8SLEASE_EPROTOCOL},
        {"{\"metadata\":{\"name\":\"x\"},\"x\":\"\\udc00\"}", K8SLEASE_EPROTOCOL},
        {"{\"metadata\":{\"name\":\"x\"},\"x\":\"\\ud800\\u0041\"}", K8SLEASE_EPROTOCOL},
        {"{\"metadata\":{\"name\":\"x\"},\"x\":\"\\u12\"}", K8SLEASE_EPROTOCOL},
        {"{\"metadata\":{\"name\":\"x\"},\"x\":\"\\x\"}", K8SLEASE_EPROTOCOL},
        {"{\"metadata\":{\"name\":\"x\"},\"x\":\"a\tb\"}", K8SLEASE_EPROTOCOL},
        {"{\"metadata\":{\"name\":\"x\"},\"x\":\"\xc0\x80\"}", K8SLEASE_EPROTOCOL},
        {"{\"metadata\":{\"name\":\"x\"},\"x\":\"\xed\xa0\x80\"}", K8SLEASE_EPROTOCOL},
        {"{\"metadata\":{\"name\":\"x\"},\"x\":\"\xf4\x90\x80\x80\"}", K8SLEASE_EPROTOCOL},
        {"{\"metadata\":{\"name\":\"x\"},\"x\":\"\xe2\x82\"}", K8SLEASE_EPROTOCOL},
        {"{\"metadata\":{\"name\":\"x\"},\"x\":\"\xff\"}", K8SLEASE_EPROTOCOL},
        {"{\"metadata\":{\"name\":\"\xe2\x82", K8SLEASE_EPROTOCOL},
        /* Members read of the wrong type or value: jansson names them. */
        {"{\"metadata\":{\"name\":5}}", K8SLEASE_EPROTOCOL},
        {"{\"metadata\":{\"name\":\"\"}}", K8SLEASE_EPROTOCOL},
        {"{\"metadata\":null}", K8SLEASE_EPROTOCOL},
        {"{\"metadata\":{\"name\":\"x\",\"uid\":[]}}", K8SLEASE_EPROTOCOL},
        {"{\"kind\":\"Leases\",\"metadata\":{\"name\":\"x\"}}", K8SLEASE_EPROTOCOL},
        {"{\"kind\":\"L\\u0065ase\",\"metadata\":{\"name\":\"x\"}}", 0},
        {"{\"metadata\":{\"name\":\"x\"},\"spec\":[]}", K8SLEASE_EPROTOCOL},
        {"{\"metadata\":{\"name\":\"x\"},\"spec\":{\"holderIdentity\":true}}", K8SLEASE_EPROTOCOL},
        {"{\"metadata\":{\"name\":\"x\"},\"spec\":{\"strategy\":{}}}", K8SLEASE_EPROTOCOL},
        {"{\"metadata\":{\"name\":\"x\"},\"spec\":{\"renewTime\":\"2026-02-30T00:00:00Z\"}}",
         K8SLEASE_EPROTOCOL},
        {"{\"metadata\":{\"name\":\"x\"},\"spec\":{\"renewTime\":"
         "\"2026-11-30T10:02:59.0000000000000000000000000000000000000000000000000000000000000Z\"}}",
         0},
        {"{\"metadata\":{\"name\":\"x\",\"annotations\":[]}}", 0},
        {"{\"metadata\":{\"name\":\"x\",\"annotations\":{"
         "\"k8slease.io/holder-container\":null}}}",
         0},
        {deep, 0}, /* nested 100 deep in a member nobody reads */
    };
    int err;

    (void)state;
    strcpy(deep, "{\"metadata\":{\"name\":\"x\"},\"x\":");
    for (int i = 0; i < 100; i++)
        strcat(deep, "[");
    for (int i = 0; i < 100; i++)
        strcat(deep, "]");
    strcat(deep, "}");
    for (size_t i = 0; i < KL_ARRAY_LEN(cases); i++) {
        kl__lease *l = NULL;

        if (scan_vs_jansson(cases[i].body, strlen(cases[i].body), &err) != 1)
            fail_msg("case %zu was taken: %s", i, cases[i].body);
        if (err != cases[i].want_err)
            fail_msg("case %zu: jansson says %d (%s), want %d", i, err, kl__error_get(),
                     cases[i].want_err);
        /* kl__lease_parse then gives jansson's answer. */
        assert_int_equal(kl__lease_parse(&l, cases[i].body, strlen(cases[i].body)), err);
        assert_true((l != NULL) == (err == 0));
        kl__lease_free(l);
    }
}

/* jansson skips a NUL byte after a literal (its lexer ungets it, then
 * takes it for an empty buffer): found by the fuzz target. The scanner
 * declines; the Lease keeps no text then (it would be no C string), and
 * its tree's dump stands in. */
static void test_scan_nul_after_literal(void **state)
{
    static const char body[] = "{\"metadata\":{\"name\":\"x\"},\"x\":[null\0,true]}";
    kl__lease *l;
    char *text;
    int err;

    (void)state;
    assert_int_equal(scan_vs_jansson(body, sizeof(body) - 1, &err), 1);
    assert_int_equal(err, 0);
    assert_int_equal(kl__lease_parse(&l, body, sizeof(body) - 1), 0);
    assert_null(l->text);
    text = kl__lease_text_dup(l);
    assert_string_equal(text, "{\"metadata\":{\"name\":\"x\"},\"x\":[null,true]}");
    kl__free(text);
    kl__lease_free(l);
}

/* Watch events: the bookmark, the object before the type, an escaped type
 * are taken; ERROR events, unknown types and duplicates go to jansson. */
static void test_scan_watch_events(void **state)
{
    static const struct {
        const char *line;
        int taken, want_err;
    } cases[] = {
        {"{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"Lease\",\"metadata\":{"
         "\"resourceVersion\":\"7\",\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}}}}",
         1, 0},
        {"{\"object\":{\"metadata\":{\"name\":\"x\",\"resourceVersion\":\"8\"}},"
         "\"type\":\"ADDED\"}",
         1, 0},
        {" {\"type\":\"DELETED\",\"object\":{\"metadata\":{\"name\":\"x\"}}}\r\n", 1, 0},
        {"{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":\"\"}}}", 1, 0},
        {"{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"code\":410}}", 0, 0},
        {"{\"type\":\"MODI\\u0046IED\",\"object\":{\"metadata\":{\"name\":\"x\"}}}", 1, 0},
        {"{\"type\":\"ADDED\",\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"name\":\"x\"}}}", 0,
         0},
        {"{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"x\"}},\"object\":{}}", 0,
         K8SLEASE_EPROTOCOL},
        {"{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"x\"}}}x", 0, K8SLEASE_EPROTOCOL},
        {"{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"x\"},\"x\":0.5}}", 0, 0},
        {"{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":[]}}", 0, K8SLEASE_EPROTOCOL},
        {"{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":null}}}", 0,
         K8SLEASE_EPROTOCOL},
        {"{\"type\":\"ADDEDADDEDADDEDADDED\",\"object\":{}}", 0, K8SLEASE_EPROTOCOL},
        {"{\"type\":\"ADDED\",\"object\":\"x\"}", 0, K8SLEASE_EPROTOCOL},
        {"[{\"type\":\"ADDED\",\"object\":{}}]", 0, K8SLEASE_EPROTOCOL},
        {"", 0, K8SLEASE_EPROTOCOL},
    };
    int err;

    (void)state;
    for (size_t i = 0; i < KL_ARRAY_LEN(cases); i++) {
        kl__watch_event ev;
        int rc = event_scan_vs_jansson(cases[i].line, strlen(cases[i].line), &err);

        if (rc != !cases[i].taken || err != cases[i].want_err)
            fail_msg("case %zu: scanner %d, jansson %d (%s): %s", i, rc, err, kl__error_get(),
                     cases[i].line);
        assert_int_equal(kl__watch_event_parse(&ev, cases[i].line, strlen(cases[i].line)), err);
        kl__watch_event_clear(&ev);
    }
}

/* Text and tree: the tree is built on demand and kept; the text can be
 * copied or moved out; a Lease from a tree gives its dump. */
static void test_lease_text_and_root(void **state)
{
    const char *body = " {\"metadata\":{\"name\":\"x\",\"namespace\":\"ns\"},\"spec\":{"
                       "\"holderIdentity\":\"h\",\"leaseTransitions\":2}}\n";
    kl__lease *l, *t;
    json_t *root;
    char *text, *again;

    (void)state;
    assert_int_equal(kl__lease_parse(&l, body, strlen(body)), 0);
    /* The object's text, without the whitespace around it. */
    assert_int_equal(l->text_len, strlen(body) - 2);
    assert_memory_equal(l->text, body + 1, l->text_len);
    assert_null(l->root);
    root = kl__lease_root(l);
    assert_non_null(root);
    assert_ptr_equal(kl__lease_root(l), root);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(root, "spec"), "holderIdentity")), "h");
    text = kl__lease_text_dup(l);
    assert_string_equal(text, l->text);
    assert_ptr_not_equal(text, l->text);
    kl__free(text);

    /* Taken: the fields stay, the text is gone; the tree built before stays. */
    text = kl__lease_text_take(l);
    assert_null(l->text);
    assert_string_equal(l->name, "x");
    assert_string_equal(l->spec.holder, "h");
    assert_ptr_equal(kl__lease_root(l), root);
    again = kl__lease_text_take(l); /* no text: the tree's dump */
    assert_non_null(again);
    assert_int_equal(kl__lease_parse(&t, again, strlen(again)), 0);
    assert_string_equal(t->ns, "ns");
    assert_int_equal(t->spec.transitions, 2);
    kl__lease_free(t);
    kl__free(again);
    kl__lease_free(l);

    /* Taken before any tree: none can be built any more. */
    assert_int_equal(kl__lease_parse(&l, text, strlen(text)), 0);
    kl__free(text);
    text = kl__lease_text_take(l);
    kl__error_clear();
    assert_null(kl__lease_root(l));
    assert_error_contains("Lease x: its text was taken");
    assert_null(kl__lease_encode_update_in_place(l, &l->spec));
    kl__lease_free(l);

    /* An update from the text alone, without a tree, is the tree's update. */
    assert_int_equal(kl__lease_parse(&l, text, strlen(text)), 0);
    assert_int_equal(kl__lease_parse_json(&t, text, strlen(text)), 0);
    assert_null(l->root);
    assert_non_null(t->root);
    {
        char *a = kl__lease_encode_update(l, &l->spec), *b = kl__lease_encode_update(t, &t->spec);

        assert_non_null(a);
        assert_string_equal(a, b);
        kl__free(a);
        kl__free(b);
    }
    assert_null(l->root); /* the copy was the tree built from the text */
    kl__lease_free(t);
    kl__lease_free(l);
    kl__free(text);

    /* From a tree: no text, the dump instead. */
    root = json_pack("{s:{s:s}}", "metadata", "name", "y");
    assert_int_equal(kl__lease_from_json(&l, root), 0);
    assert_null(l->text);
    text = kl__lease_text_dup(l);
    assert_string_equal(text, "{\"metadata\":{\"name\":\"y\"}}");
    kl__free(text);
    kl__lease_free(l);
    json_decref(root);
}

/* ------------------------------------------------------------------------ */
/* Lease encode                                                             */
/* ------------------------------------------------------------------------ */

static void assert_spec_equal(const kl__lease_spec *a, const kl__lease_spec *b)
{
    assert_string_equal(a->holder ? a->holder : "", b->holder ? b->holder : "");
    assert_int_equal(a->duration_s, b->duration_s);
    assert_int_equal(a->acquire_us, b->acquire_us);
    assert_int_equal(a->renew_us, b->renew_us);
    assert_int_equal(a->transitions, b->transitions);
}

static void test_encode_create(void **state)
{
    kl__lease_spec spec = {"node-a", 15, T_CLIENTGO_ACQUIRE, T_CLIENTGO_RENEW1, 3};
    kl__lease_spec empty = {NULL, 0, 0, 0, 0};
    kl__lease *l = NULL;
    char *body;

    (void)state;
    body = kl__lease_encode_create("default", "my-lease", &spec);
    assert_non_null(body);
    assert_string_equal(body, "{\"apiVersion\":\"coordination.k8s.io/v1\",\"kind\":\"Lease\","
                              "\"metadata\":{\"name\":\"my-lease\",\"namespace\":\"default\"},"
                              "\"spec\":{\"holderIdentity\":\"node-a\",\"leaseDurationSeconds\":15,"
                              "\"acquireTime\":\"2026-11-30T10:07:50.411031Z\","
                              "\"renewTime\":\"2026-11-30T10:07:50.418716Z\","
                              "\"leaseTransitions\":3}}");
    assert_int_equal(kl__lease_parse(&l, body, strlen(body)), 0);
    assert_string_equal(l->ns, "default");
    assert_string_equal(l->name, "my-lease");
    assert_string_equal(l->rv, "");
    assert_spec_equal(&l->spec, &spec);
    kl__lease_free(l);
    kl__free(body);

    /* holder NULL is written as "", zero times and duration are omitted. */
    body = kl__lease_encode_create("default", "my-lease", &empty);
    assert_non_null(body);
    assert_non_null(strstr(body, "\"spec\":{\"holderIdentity\":\"\",\"leaseTransitions\":0}}"));
    assert_int_equal(kl__lease_parse(&l, body, strlen(body)), 0);
    assert_string_equal(l->spec.holder, "");
    assert_int_equal(l->spec.renew_us, 0);
    kl__lease_free(l);
    kl__free(body);
}

static void test_encode_create_escaping(void **state)
{
    kl__lease_spec spec = {"h\"o\\st:80 \xc3\xa9", 1, 1, -1, 0};
    kl__lease *l = NULL;
    char *body;

    (void)state;
    body = kl__lease_encode_create("n\"s", "na\nme", &spec);
    assert_non_null(body);
    assert_null(strchr(body, '\n'));
    assert_int_equal(kl__lease_parse(&l, body, strlen(body)), 0);
    assert_string_equal(l->ns, "n\"s");
    assert_string_equal(l->name, "na\nme");
    assert_spec_equal(&l->spec, &spec);
    kl__lease_free(l);
    kl__free(body);

    /* Not UTF-8: no body, and the message says why it may have failed. */
    spec.holder = "\xff\xfe";
    assert_null(kl__lease_encode_create("default", "x", &spec));
    assert_error_contains("UTF-8");
}

/* The object as a client would GET it from a newer server, with every field
 * we do not own. */
static json_t *rich_lease(void)
{
    size_t len;
    char *body = read_sample("200_get.json", &len);
    json_t *root = json_loadb(body, len, 0, NULL);
    json_t *meta, *spec;

    assert_non_null(root);
    kl__free(body);
    meta = json_object_get(root, "metadata");
    spec = json_object_get(root, "spec");
    assert_int_equal(
        json_object_set_new(meta, "labels",
                            json_pack("{s:s, s:s}", "app", "master", "role", "leader")),
        0);
    assert_int_equal(
        json_object_set_new(meta, "annotations", json_pack("{s:s}", "example.com/note", "keep me")),
        0);
    assert_int_equal(json_object_set_new(spec, "strategy", json_string("OldestEmulationVersion")),
                     0);
    assert_int_equal(json_object_set_new(spec, "preferredHolder", json_string("node-c")), 0);
    assert_int_equal(json_object_set_new(spec, "futureSpecField", json_pack("[i,s]", 1, "two")), 0);
    assert_int_equal(json_object_set_new(root, "futureTopField", json_pack("{s:b}", "x", 1)), 0);
    return root;
}

static void test_encode_update_preserves_unknown(void **state)
{
    kl__lease_spec spec = {"node-c", 20, T_CLIENTGO_ACQUIRE, T_CLIENTGO_RENEW2, 2};
    json_t *root = rich_lease();
    json_t *before = json_deep_copy(root);
    json_t *expected = json_deep_copy(root);
    json_t *espec = json_object_get(expected, "spec");
    json_t *out;
    kl__lease *l = NULL, *back = NULL;
    const char *p;
    char *body;

    (void)state;
    assert_int_equal(kl__lease_from_json(&l, root), 0);
    body = kl__lease_encode_update(l, &spec);
    assert_non_null(body);

    /* Only the five spec fields change; everything else is byte-for-byte the
     * same JSON value, including resourceVersion and managedFields. */
    json_object_set_new(espec, "holderIdentity", json_string("node-c"));
    json_object_set_new(espec, "leaseDurationSeconds", json_integer(20));
    json_object_set_new(espec, "acquireTime", json_string("2026-11-30T10:07:50.411031Z"));
    json_object_set_new(espec, "renewTime", json_string("2026-11-30T10:07:51.424816Z"));
    json_object_set_new(espec, "leaseTransitions", json_integer(2));
    out = json_loads(body, 0, NULL);
    assert_non_null(out);
    assert_true(json_equal(out, expected));
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(out, "metadata"), "resourceVersion")),
        "209");
    assert_true(json_equal(json_object_get(json_object_get(out, "metadata"), "managedFields"),
                           json_object_get(json_object_get(before, "metadata"), "managedFields")));
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(out, "spec"), "strategy")),
        "OldestEmulationVersion");

    /* The base is not modified by encoding. */
    assert_true(json_equal(l->root, before));

    /* Compact, and in the server's order (not sorted). */
    assert_null(strchr(body, '\n'));
    assert_null(strstr(body, "\": "));
    assert_ptr_equal(body, strstr(body, "{\"kind\":\"Lease\",\"apiVersion\""));
    p = strstr(body, "\"spec\":{\"holderIdentity\":\"node-c\",\"leaseDurationSeconds\":20,"
                     "\"acquireTime\":\"2026-11-30T10:07:50.411031Z\","
                     "\"renewTime\":\"2026-11-30T10:07:51.424816Z\",\"leaseTransitions\":2,"
                     "\"strategy\":\"OldestEmulationVersion\",\"preferredHolder\":\"node-c\"");
    assert_non_null(p);
    assert_true(strstr(body, "\"metadata\"") < p);

    assert_int_equal(kl__lease_parse(&back, body, strlen(body)), 0);
    assert_spec_equal(&back->spec, &spec);
    assert_string_equal(back->rv, "209");

    kl__lease_free(back);
    kl__lease_free(l);
    kl__free(body);
    json_decref(out);
    json_decref(expected);
    json_decref(before);
    json_decref(root);
}

/* The renewal path's in-place encoding gives the very same body. */
static void test_encode_update_in_place(void **state)
{
    kl__lease_spec spec = {"node-c", 20, T_CLIENTGO_ACQUIRE, T_CLIENTGO_RENEW2, 2};
    json_t *root = rich_lease();
    char *text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    kl__lease *a = NULL, *b = NULL;
    char *copied, *in_place;

    (void)state;
    assert_non_null(text);
    assert_int_equal(kl__lease_parse(&a, text, strlen(text)), 0);
    assert_int_equal(kl__lease_parse(&b, text, strlen(text)), 0);
    copied = kl__lease_encode_update(a, &spec);
    in_place = kl__lease_encode_update_in_place(b, &spec);
    assert_non_null(copied);
    assert_non_null(in_place);
    assert_string_equal(in_place, copied);
    kl__lease_free(a);
    kl__lease_free(b);
    kl__free(copied);
    kl__free(in_place);
    free(text);
    json_decref(root);
}

/* The splice and the jansson path give the same JSON value; *declined: the
 * splice said no (the jansson path must still work). */
static void splice_vs_jansson(const char *base, const kl__lease_spec *spec, int *declined)
{
    kl__lease *l = NULL;
    char *spliced = NULL, *parsed;
    json_t *a, *b;
    int rc = kl__lease_splice_update(base, strlen(base), spec, &spliced);

    assert_true(rc == 0 || rc == 1);
    *declined = rc == 1;
    assert_int_equal(kl__lease_parse(&l, base, strlen(base)), 0);
    parsed = kl__lease_encode_update(l, spec);
    assert_non_null(parsed);
    if (rc == 0) {
        a = json_loads(spliced, 0, NULL);
        b = json_loads(parsed, 0, NULL);
        if (!a || !json_equal(a, b))
            fail_msg("splice differs from jansson:\n  base    %s\n  splice  %s\n  jansson %s", base,
                     spliced, parsed);
        /* The same order too: the server's, ours where jansson puts them. */
        {
            char *da = json_dumps(a, JSON_COMPACT | JSON_PRESERVE_ORDER);
            char *db = json_dumps(b, JSON_COMPACT | JSON_PRESERVE_ORDER);

            assert_string_equal(da, db);
            free(da);
            free(db);
        }
        json_decref(a);
        json_decref(b);
    } else {
        assert_null(spliced);
    }
    kl__free(spliced);
    kl__free(parsed);
    kl__lease_free(l);
}

static void test_splice_update(void **state)
{
    json_t *rich = rich_lease();
    char *rich_text = json_dumps(rich, JSON_COMPACT | JSON_PRESERVE_ORDER);
    char *rich_pretty = json_dumps(rich, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    size_t len;
    char *sample = read_sample("200_update.json", &len);
    const char *spliced_bases[] = {
        rich_text,
        rich_pretty,
        sample,
        "{\"metadata\":{\"name\":\"x\",\"resourceVersion\":\"5\"}}",
        "{\"metadata\":{\"name\":\"x\",\"resourceVersion\":\"5\"},\"spec\":null}",
        "{\"metadata\":{\"name\":\"x\",\"resourceVersion\":\"5\"},\"spec\":{}}",
        "{\"metadata\":{\"name\":\"x\"},\"spec\":{\"renewTime\":\"2026-01-01T00:00:00.000000Z\","
        "\"x\":[1,{\"a\":\"}\"},\"\\\"\"],\"holderIdentity\":\"old\",\"leaseDurationSeconds\":9}}",
        " {\"spec\":{\"leaseTransitions\":3},\"metadata\":{\"name\":\"x\",\"a\":{\"a\":1,\"a\":2}}}"
        " ",
    };
    const char *declined_bases[] = {
        "{\"metadata\":{\"name\":\"x\"},\"sp\\u0065c\":{}}",       /* escaped key */
        "{\"metadata\":{\"name\":\"x\"},\"spec\":{},\"spec\":{}}", /* duplicate */
        "{\"metadata\":{\"name\":\"x\"},\"spec\":{\"renewTime\":1,\"renewTime\":2}}",
    };
    const kl__lease_spec specs[] = {
        {"node-c", 20, T_CLIENTGO_ACQUIRE, T_CLIENTGO_RENEW2, 2},
        {NULL, 0, 0, 0, 0},
        {"a \"quoted\\\" one\n\x01", 15, 0, T_CLIENTGO_RENEW2, 7},
    };
    const kl__lease_spec utf8 = {"n\xc3\xb6"
                                 "de",
                                 15, 1, 2, 3};
    int declined;

    (void)state;
    assert_non_null(rich_text);
    for (size_t i = 0; i < sizeof(spliced_bases) / sizeof(spliced_bases[0]); i++)
        for (size_t k = 0; k < sizeof(specs) / sizeof(specs[0]); k++) {
            splice_vs_jansson(spliced_bases[i], &specs[k], &declined);
            if (declined)
                fail_msg("base %zu, spec %zu: the splice declined", i, k);
        }
    for (size_t i = 0; i < sizeof(declined_bases) / sizeof(declined_bases[0]); i++) {
        char *out = NULL;

        assert_int_equal(
            kl__lease_splice_update(declined_bases[i], strlen(declined_bases[i]), &specs[0], &out),
            1);
        assert_null(out);
    }
    /* Not JSON, or not an object: declined, nothing read out of bounds. */
    {
        static const char *bad[] = {"",
                                    "{",
                                    "{\"a\"",
                                    "{\"a\":",
                                    "{\"a\":[1,",
                                    "[]",
                                    "{}x",
                                    "{\"a\":\"unterminated}",
                                    "{\"a\":{\"b\":1}"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            char *out = NULL;

            assert_int_equal(kl__lease_splice_update(bad[i], strlen(bad[i]), &specs[0], &out), 1);
            assert_null(out);
        }
    }
    /* A holder that is not ASCII: jansson's path, which checks the UTF-8. */
    splice_vs_jansson(rich_text, &utf8, &declined);
    assert_true(declined);
    free(rich_text);
    free(rich_pretty);
    kl__free(sample);
    json_decref(rich);
}

static void test_encode_update_sparse_base(void **state)
{
    static const char *bases[] = {
        "{\"metadata\":{\"name\":\"x\",\"resourceVersion\":\"5\"}}",
        "{\"metadata\":{\"name\":\"x\",\"resourceVersion\":\"5\"},\"spec\":null}",
        ("{\"metadata\":{\"name\":\"x\",\"resourceVersion\":\"5\"},"
         "\"spec\":{\"holderIdentity\":\"old\"}}"),
    };
    kl__lease_spec spec = {"me", 15, T_CLIENTGO_ACQUIRE, T_CLIENTGO_RENEW1, 1};

    (void)state;
    for (size_t i = 0; i < KL_ARRAY_LEN(bases); i++) {
        kl__lease *base = NULL, *back = NULL;
        char *body;

        assert_int_equal(kl__lease_parse(&base, bases[i], strlen(bases[i])), 0);
        body = kl__lease_encode_update(base, &spec);
        assert_non_null(body);
        assert_int_equal(kl__lease_parse(&back, body, strlen(body)), 0);
        assert_spec_equal(&back->spec, &spec);
        assert_string_equal(back->rv, "5");
        kl__lease_free(back);
        kl__lease_free(base);
        kl__free(body);
    }
}

/* The release written by client-go: holder "", duration 1, times kept in
 * place; a zero time removes the field rather than writing a bogus date. */
static void test_encode_update_release_and_zero(void **state)
{
    size_t len;
    char *raw = read_sample("200_get_clientgo_lease.json", &len);
    kl__lease_spec release = {NULL, 1, T_CLIENTGO_RELEASE, T_CLIENTGO_RELEASE, 0};
    kl__lease_spec zero = {"me", 0, 0, 0, 7};
    kl__lease *base = NULL, *back = NULL;
    char *body;

    (void)state;
    assert_int_equal(kl__lease_parse(&base, raw, len), 0);
    body = kl__lease_encode_update(base, &release);
    assert_non_null(body);
    assert_non_null(strstr(body, "\"spec\":{\"holderIdentity\":\"\",\"leaseDurationSeconds\":1,"
                                 "\"acquireTime\":\"2026-11-30T10:07:52.428635Z\","
                                 "\"renewTime\":\"2026-11-30T10:07:52.428635Z\","
                                 "\"leaseTransitions\":0}"));
    kl__free(body);

    body = kl__lease_encode_update(base, &zero);
    assert_non_null(body);
    assert_null(strstr(body, "acquireTime\":\"2"));
    assert_null(strstr(body, "renewTime\":\"2"));
    assert_null(strstr(body, "\"leaseDurationSeconds\""));
    assert_int_equal(kl__lease_parse(&back, body, strlen(body)), 0);
    assert_spec_equal(&back->spec, &zero);
    kl__lease_free(back);
    kl__free(body);
    kl__lease_free(base);
    kl__free(raw);
}

/* ------------------------------------------------------------------------ */
/* MicroTime                                                                */
/* ------------------------------------------------------------------------ */

static const struct {
    int64_t us;
    const char *s;
} known_times[] = {
    {0, "1970-01-01T00:00:00.000000Z"},
    {1, "1970-01-01T00:00:00.000001Z"},
    {INT64_C(1000000), "1970-01-01T00:00:01.000000Z"},
    {-1, "1969-12-31T23:59:59.999999Z"},
    {INT64_C(-1000000), "1969-12-31T23:59:59.000000Z"},
    {T_2026_11_30_10_02_59, "2026-11-30T10:02:59.000000Z"},
    {T_CLIENTGO_ACQUIRE, "2026-11-30T10:07:50.411031Z"},
    {INT64_C(951825600000000), "2000-02-29T12:00:00.000000Z"},
    {INT64_C(1709251199123456), "2024-02-29T23:59:59.123456Z"},
    {INT64_C(-11670998400000000), "1600-02-29T00:00:00.000000Z"},
    {INT64_C(4107542399000000), "2100-02-28T23:59:59.000000Z"},
    {INT64_C(4107542400000000), "2100-03-01T00:00:00.000000Z"},
    {INT64_C(-2203891200000000), "1900-03-01T00:00:00.000000Z"},
    {INT64_C(2147483647000000), "2038-01-19T03:14:07.000000Z"},
    {INT64_C(2147483648000000), "2038-01-19T03:14:08.000000Z"},
    {T_MIN_YEAR1, "0001-01-01T00:00:00.000000Z"},
    {T_MAX_YEAR9999, "9999-12-31T23:59:59.999999Z"},
};

static void test_microtime_known(void **state)
{
    char buf[KL_MICROTIME_BUFLEN];
    int64_t us;

    (void)state;
    for (size_t i = 0; i < KL_ARRAY_LEN(known_times); i++) {
        assert_string_equal(kl__microtime_format(known_times[i].us, buf), known_times[i].s);
        assert_int_equal(kl__microtime_parse(known_times[i].s, &us), 0);
        assert_int_equal(us, known_times[i].us);
    }
}

/* gmtime_r is an independent oracle here; the library must not use it. */
static void expect_like_gmtime(int64_t us, const char *got)
{
    char want[64];
    struct tm tm;
    time_t secs = (time_t)(us >= 0 ? us / 1000000 : -((-us + 999999) / 1000000));
    int64_t frac = us - (int64_t)secs * 1000000;

    assert_non_null(gmtime_r(&secs, &tm));
    snprintf(want, sizeof(want), "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)frac);
    if (strcmp(want, got) != 0)
        fail_msg("%lld: got %s, gmtime says %s", (long long)us, got, want);
}

static void test_microtime_random_roundtrip(void **state)
{
    char buf[KL_MICROTIME_BUFLEN];
    int64_t us, back;

    (void)state;
    rng_state = UINT64_C(0x9e3779b97f4a7c15);
    for (int i = 0; i < 200000; i++) {
        us = rng_range(T_MIN_YEAR1, T_MAX_YEAR9999);
        kl__microtime_format(us, buf);
        expect_like_gmtime(us, buf);
        assert_int_equal(kl__microtime_parse(buf, &back), 0);
        assert_int_equal(back, us);
    }
}

/* Every day from 1600 to 2500 (leap rules of 1600, 1700, 2000, 2100, 2400),
 * at a random time of day. */
static void test_microtime_every_day(void **state)
{
    char buf[KL_MICROTIME_BUFLEN];
    int64_t day_us = INT64_C(86400000000), us, back;

    (void)state;
    rng_state = 42;
    for (int64_t day = -135140; day <= 193000; day++) {
        us = day * day_us + rng_range(0, day_us - 1);
        kl__microtime_format(us, buf);
        expect_like_gmtime(us, buf);
        assert_int_equal(kl__microtime_parse(buf, &back), 0);
        assert_int_equal(back, us);
    }
}

/* Out of RFC 3339 range: no crash, no overflow of the buffer. */
static void test_microtime_format_extremes(void **state)
{
    static const int64_t values[] = {INT64_MIN, INT64_MIN + 1, INT64_MAX, T_MIN_YEAR1 - 1,
                                     T_MAX_YEAR9999 + 1};
    char buf[KL_MICROTIME_BUFLEN + 8];

    (void)state;
    for (size_t i = 0; i < KL_ARRAY_LEN(values); i++) {
        memset(buf, 'X', sizeof(buf));
        kl__microtime_format(values[i], buf);
        assert_true(strlen(buf) < KL_MICROTIME_BUFLEN);
        assert_int_equal(buf[strlen(buf) - 1], 'Z');
        assert_int_equal(buf[KL_MICROTIME_BUFLEN], 'X');
    }
    kl__microtime_format(T_MAX_YEAR9999 + 1, buf);
    assert_string_equal(buf, "10000-01-01T00:00:00.000000Z");
    kl__microtime_format(T_MIN_YEAR1 - 1, buf);
    assert_string_equal(buf, "0000-12-31T23:59:59.999999Z");
    kl__microtime_format(INT64_MIN, buf);
    assert_int_equal(buf[0], '-');
    assert_int_equal(strlen(buf), KL_MICROTIME_BUFLEN - 2);
}

static void test_microtime_parse_fraction(void **state)
{
    static const struct {
        const char *s;
        int64_t frac;
    } cases[] = {
        {"2026-11-30T10:02:59Z", 0},
        {"2026-11-30T10:02:59.1Z", 100000},
        {"2026-11-30T10:02:59.12Z", 120000},
        {"2026-11-30T10:02:59.123Z", 123000},
        {"2026-11-30T10:02:59.1234Z", 123400},
        {"2026-11-30T10:02:59.12345Z", 123450},
        {"2026-11-30T10:02:59.123456Z", 123456},
        {"2026-11-30T10:02:59.1234567Z", 123456},
        {"2026-11-30T10:02:59.12345678Z", 123456},
        {"2026-11-30T10:02:59.123456789Z", 123456},
        {"2026-11-30T10:02:59.9999999999999Z", 999999}, /* truncated, not rounded */
        {"2026-11-30T10:02:59.000000001Z", 0},
        {"2026-11-30T10:02:59.000001Z", 1},
    };
    int64_t us;

    (void)state;
    for (size_t i = 0; i < KL_ARRAY_LEN(cases); i++) {
        if (kl__microtime_parse(cases[i].s, &us) != 0)
            fail_msg("%s: %s", cases[i].s, kl__error_get());
        assert_int_equal(us, T_2026_11_30_10_02_59 + cases[i].frac);
    }
}

static void test_microtime_parse_offsets(void **state)
{
    static const char *same[] = {
        "2026-11-30T10:02:59Z",          "2026-11-30T10:02:59z",      "2026-11-30t10:02:59Z",
        "2026-11-30T10:02:59+00:00",     "2026-11-30T10:02:59-00:00", "2026-11-30T12:02:59+02:00",
        "2026-11-30T05:32:59-04:30",     "2026-11-29T23:02:59-11:00", "2026-12-01T00:02:59+14:00",
        "2026-11-30T12:02:59.000+02:00", "2026-12-01T10:01:59+23:59", "2026-11-29T10:03:59-23:59",
    };
    int64_t us;

    (void)state;
    for (size_t i = 0; i < KL_ARRAY_LEN(same); i++) {
        if (kl__microtime_parse(same[i], &us) != 0)
            fail_msg("%s: %s", same[i], kl__error_get());
        if (us != T_2026_11_30_10_02_59)
            fail_msg("%s: got %lld", same[i], (long long)us);
    }
    /* An offset across the epoch and a year boundary. */
    assert_int_equal(kl__microtime_parse("1969-12-31T19:00:00.5-05:00", &us), 0);
    assert_int_equal(us, 500000);
}

static void test_microtime_parse_invalid(void **state)
{
    static const char *bad[] = {
        "",
        "abc",
        "2026",
        "2026-11-30",
        "2026-11-30T10:02:59",
        "2026-11-30T10:02:59.123456",
        "2026-11-30 10:02:59Z",
        "2026-11-30T10:02:59.Z",
        "2026-11-30T10:02:59ZZ",
        "2026-11-30T10:02:59Z ",
        " 2026-11-30T10:02:59Z",
        "2026-11-30T10:02:59.12a4Z",
        "2026-11-30T10:02:5Z",
        "2026-1-30T10:02:59Z",
        "20261-11-30T10:02:59Z",
        "-2026-11-30T10:02:59Z",
        "+2026-11-30T10:02:59Z",
        "2026/11/30T10:02:59Z",
        "2026-11-30T10-02-59Z",
        "2026-13-01T00:00:00Z",
        "2026-00-01T00:00:00Z",
        "2026-11-00T00:00:00Z",
        "2026-11-31T00:00:00Z",
        "2026-04-31T00:00:00Z",
        "2026-02-29T00:00:00Z",
        "2100-02-29T00:00:00Z",
        "1900-02-29T00:00:00Z",
        "2026-11-30T24:00:00Z",
        "2026-11-30T10:60:00Z",
        "2026-11-30T10:02:60Z",
        "2016-12-31T23:59:60Z",
        "2026-11-30T10:02:59+24:00",
        "2026-11-30T10:02:59+02:60",
        "2026-11-30T10:02:59+0200",
        "2026-11-30T10:02:59+02",
        "2026-11-30T10:02:59+02:0",
        "2026-11-30T10:02:59+02:00Z",
        "2026-11-30T10:02:59 +02:00",
        "2026-11-30T10:02:59.123456+",
        "2026-11-30T10:02:59UTC",
        "2026-11-30T10:02:59,5Z",
        "2026-11-30T10:02:59.-1Z",
        "\xef\xbc\x92\xef\xbc\x90\xef\xbc\x92\xef\xbc\x96-11-30T10:02:59Z",
    };
    int64_t us = 12345;

    (void)state;
    for (size_t i = 0; i < KL_ARRAY_LEN(bad); i++) {
        kl__error_clear();
        if (kl__microtime_parse(bad[i], &us) != K8SLEASE_EPROTOCOL)
            fail_msg("\"%s\" was accepted", bad[i]);
        assert_int_equal(us, 12345);
        assert_error_contains("invalid MicroTime \"");
        assert_error_contains(bad[i]);
    }
    assert_int_equal(kl__microtime_parse("2026-13-01T00:00:00Z", &us), K8SLEASE_EPROTOCOL);
    assert_error_contains("month out of range");
    assert_int_equal(kl__microtime_parse("2026-02-29T00:00:00Z", &us), K8SLEASE_EPROTOCOL);
    assert_error_contains("day out of range");
    assert_int_equal(kl__microtime_parse(NULL, &us), K8SLEASE_EPROTOCOL);
    assert_int_equal(us, 12345);
}

/* ------------------------------------------------------------------------ */
/* Status                                                                   */
/* ------------------------------------------------------------------------ */

static void test_status_samples(void **state)
{
    static const struct {
        const char *file;
        int code;
        const char *reason, *message;
    } cases[] = {
        {"401_unauthorized.json", 401, "Unauthorized", "Unauthorized"},
        {"404_notfound_get.json", 404, "NotFound",
         "leases.coordination.k8s.io \"sample-lease\" not found"},
        {"404_notfound_delete.json", 404, "NotFound",
         "leases.coordination.k8s.io \"sample-lease\" not found"},
        {"404_notfound_patch.json", 404, "NotFound",
         "leases.coordination.k8s.io \"sample-lease\" not found"},
        {"409_conflict.json", 409, "Conflict",
         "Operation cannot be fulfilled on leases.coordination.k8s.io \"sample-lease\": the "
         "object has been modified; please apply your changes to the latest version and try "
         "again"},
        {"409_alreadyexists.json", 409, "AlreadyExists",
         "leases.coordination.k8s.io \"sample-lease\" already exists"},
        {"410_gone_list_compacted.json", 410, "Expired",
         "The resourceVersion for the provided list is too old."},
        {"200_delete.json", 0, "", ""},
    };

    (void)state;
    for (size_t i = 0; i < KL_ARRAY_LEN(cases); i++) {
        size_t len;
        char *body = read_sample(cases[i].file, &len);
        kl__status st;

        if (kl__status_parse(&st, body, len) != 0)
            fail_msg("%s: %s", cases[i].file, kl__error_get());
        assert_int_equal(st.code, cases[i].code);
        assert_string_equal(st.reason, cases[i].reason);
        assert_string_equal(st.message, cases[i].message);
        kl__status_clear(&st);
        assert_null(st.reason);
        kl__free(body);
    }
}

static void test_status_errors(void **state)
{
    static const struct {
        const char *body, *msg;
    } cases[] = {
        {"", "Status body: not valid JSON"},
        {"<html>Bad Gateway</html>", "Status body: not valid JSON at line 1"},
        {"\"x\"", "Status: not a JSON object"},
        {"{}", "Status: not a Status"},
        {"{\"metadata\":{\"name\":\"x\"},\"spec\":{}}", "Status: not a Status"},
        {"{\"kind\":\"Lease\",\"metadata\":{\"name\":\"x\"}}",
         "Status: expected a Status, got a Lease"},
        {"{\"kind\":\"Status\",\"code\":\"404\"}", "Status: code: must be an integer"},
        {"{\"kind\":\"Status\",\"code\":1e3}", "Status: code: must be an integer"},
        {"{\"kind\":\"Status\",\"code\":404,\"message\":5}", "Status: message: must be a string"},
        {"{\"kind\":\"Status\",\"reason\":[]}", "Status: reason: must be a string"},
    };

    (void)state;
    for (size_t i = 0; i < KL_ARRAY_LEN(cases); i++) {
        kl__status st;

        memset(&st, 0x5a, sizeof(st));
        if (kl__status_parse(&st, cases[i].body, strlen(cases[i].body)) != K8SLEASE_EPROTOCOL)
            fail_msg("case %zu (%s) was not rejected", i, cases[i].body);
        assert_error_contains(cases[i].msg);
        assert_int_equal(st.code, 0);
        assert_null(st.reason);
        assert_null(st.message);
    }

    /* No kind but Status fields: accepted (some proxies strip kind). */
    const char *nokind = "{\"status\":\"Failure\",\"code\":503}";
    kl__status st;
    assert_int_equal(kl__status_parse(&st, nokind, strlen(nokind)), 0);
    assert_int_equal(st.code, 503);
    assert_string_equal(st.reason, "");
    kl__status_clear(&st);
}

/* ------------------------------------------------------------------------ */
/* Watch events                                                             */
/* ------------------------------------------------------------------------ */

typedef struct {
    kl__watch_type type;
    const char *rv, *holder;
    int64_t duration, renew, transitions;
} expected_event;

static const struct {
    const char *file;
    size_t n;
    expected_event ev[4];
} watch_samples[] = {
    {"watch_events.jsonl", 1, {{KL_WATCH_MODIFIED, "209", "node-b", 15, T_2026_11_30_10_02_59, 1}}},
    {"watch_event_modified.json",
     1,
     {{KL_WATCH_MODIFIED, "209", "node-b", 15, T_2026_11_30_10_02_59, 1}}},
    {"watch_events_norv.jsonl",
     2,
     {{KL_WATCH_ADDED, "208", "node-a", 15, T_2026_11_30_10_02_59, 0},
      {KL_WATCH_MODIFIED, "209", "node-b", 15, T_2026_11_30_10_02_59, 1}}},
    {"watch_events_clientgo_election.jsonl",
     4,
     {{KL_WATCH_ADDED, "561", "le-holder-1", 5, T_CLIENTGO_ACQUIRE, 0},
      {KL_WATCH_MODIFIED, "562", "le-holder-1", 5, T_CLIENTGO_RENEW1, 0},
      {KL_WATCH_MODIFIED, "563", "le-holder-1", 5, T_CLIENTGO_RENEW2, 0},
      {KL_WATCH_MODIFIED, "564", "", 1, T_CLIENTGO_RELEASE, 0}}},
    {"watch_http11_body.raw", 1, {{KL_WATCH_ADDED, "564", "", 1, T_CLIENTGO_RELEASE, 0}}},
};

static void check_event(const char *line, size_t len, const expected_event *want)
{
    kl__watch_event ev;

    if (kl__watch_event_parse(&ev, line, len) != 0)
        fail_msg("%.*s: %s", (int)len, line, kl__error_get());
    assert_int_equal(ev.type, want->type);
    assert_non_null(ev.lease);
    assert_null(ev.bookmark_rv);
    assert_string_equal(ev.lease->rv, want->rv);
    assert_string_equal(ev.lease->spec.holder, want->holder);
    assert_int_equal(ev.lease->spec.duration_s, want->duration);
    assert_int_equal(ev.lease->spec.renew_us, want->renew);
    assert_int_equal(ev.lease->spec.transitions, want->transitions);
    kl__watch_event_clear(&ev);
    assert_null(ev.lease);
}

static void test_watch_event_samples(void **state)
{
    (void)state;
    for (size_t i = 0; i < KL_ARRAY_LEN(watch_samples); i++) {
        size_t len, n = 0;
        char *body = read_sample(watch_samples[i].file, &len);
        char *line = body, *nl;

        while ((nl = strchr(line, '\n')) != NULL || *line) {
            size_t line_len = nl ? (size_t)(nl - line) : strlen(line);

            if (line_len > 0) {
                assert_true(n < watch_samples[i].n);
                check_event(line, line_len, &watch_samples[i].ev[n++]);
            }
            line += line_len + (nl ? 1 : 0);
        }
        assert_int_equal(n, watch_samples[i].n);
        kl__free(body);
    }
}

static void test_watch_event_error_410(void **state)
{
    static const struct {
        const char *file, *message;
    } cases[] = {
        {"410_gone_watch_cache.json", "too old resource version: 211 (248)"},
        {"410_gone_watch_compacted.json", "The resourceVersion for the provided watch is too old."},
    };

    (void)state;
    for (size_t i = 0; i < KL_ARRAY_LEN(cases); i++) {
        size_t len;
        char *body = read_sample(cases[i].file, &len);
        kl__watch_event ev;

        assert_int_equal(kl__watch_event_parse(&ev, body, len), 0);
        assert_int_equal(ev.type, KL_WATCH_ERROR);
        assert_null(ev.lease);
        assert_int_equal(ev.status.code, 410);
        assert_string_equal(ev.status.reason, "Expired");
        assert_string_equal(ev.status.message, cases[i].message);
        kl__watch_event_clear(&ev);
        kl__free(body);
    }
}

static void test_watch_event_bookmark_deleted(void **state)
{
    const char *bookmark =
        "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"Lease\",\"apiVersion\":"
        "\"coordination.k8s.io/v1\",\"metadata\":{\"resourceVersion\":\"12345\","
        "\"creationTimestamp\":null,\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}},"
        "\"spec\":{}}}";
    const char *deleted = "{\"type\":\"DELETED\",\"object\":{\"kind\":\"Lease\",\"metadata\":{"
                          "\"name\":\"l\",\"namespace\":\"ns\",\"resourceVersion\":\"99\"},"
                          "\"spec\":{\"holderIdentity\":\"a\"}}}";
    kl__watch_event ev;

    (void)state;
    assert_int_equal(kl__watch_event_parse(&ev, bookmark, strlen(bookmark)), 0);
    assert_int_equal(ev.type, KL_WATCH_BOOKMARK);
    assert_string_equal(ev.bookmark_rv, "12345");
    assert_null(ev.lease);
    kl__watch_event_clear(&ev);

    assert_int_equal(kl__watch_event_parse(&ev, deleted, strlen(deleted)), 0);
    assert_int_equal(ev.type, KL_WATCH_DELETED);
    assert_string_equal(ev.lease->name, "l");
    assert_string_equal(ev.lease->rv, "99");
    kl__watch_event_clear(&ev);
}

static void test_watch_event_errors(void **state)
{
    static const struct {
        const char *line, *msg;
    } cases[] = {
        {"{\"type\":\"ADDED\",", "watch event: not valid JSON"},
        {"[]", "watch event: not a JSON object"},
        {"{\"object\":{}}", "watch event: type missing"},
        {"{\"type\":7,\"object\":{}}", "watch event: type: must be a string"},
        {"{\"type\":\"FOO\",\"object\":{}}", "watch event: unknown type \"FOO\""},
        {"{\"type\":\"added\",\"object\":{}}", "unknown type \"added\""},
        {"{\"type\":\"ADDED\"}", "watch event: ADDED: object missing"},
        {"{\"type\":\"MODIFIED\",\"object\":[]}", "MODIFIED: object missing or not an object"},
        {"{\"type\":\"MODIFIED\",\"object\":{\"kind\":\"Lease\",\"metadata\":{\"name\":\"x\","
         "\"namespace\":\"ns\"},\"spec\":{\"renewTime\":\"bad\"}}}",
         "watch event: MODIFIED: Lease ns/x: spec.renewTime: invalid MicroTime \"bad\""},
        {"{\"type\":\"ADDED\",\"object\":{\"kind\":\"Status\",\"code\":500}}",
         "ADDED: Lease: expected a Lease, got a Status"},
        {"{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{}}}",
         "BOOKMARK: object.metadata.resourceVersion missing"},
        {"{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":1}}}",
         "object.metadata.resourceVersion: must be a string"},
        {"{\"type\":\"ERROR\",\"object\":{\"kind\":\"Lease\"}}",
         "watch event: ERROR: Status: expected a Status, got a Lease"},
    };

    (void)state;
    for (size_t i = 0; i < KL_ARRAY_LEN(cases); i++) {
        kl__watch_event ev;

        memset(&ev, 0x5a, sizeof(ev));
        assert_int_equal(kl__watch_event_scan(&ev, cases[i].line, strlen(cases[i].line)), 1);
        assert_null(ev.lease);
        assert_null(ev.bookmark_rv);
        memset(&ev, 0x5a, sizeof(ev));
        if (kl__watch_event_parse(&ev, cases[i].line, strlen(cases[i].line)) != K8SLEASE_EPROTOCOL)
            fail_msg("case %zu (%s) was not rejected", i, cases[i].line);
        assert_error_contains(cases[i].msg);
        assert_null(ev.lease);
        assert_null(ev.bookmark_rv);
        assert_null(ev.status.reason);
    }
}

/* ------------------------------------------------------------------------ */
/* Line splitter                                                            */
/* ------------------------------------------------------------------------ */

typedef struct {
    char *line[16];
    size_t len[16];
    size_t n;
    size_t stop_after; /* 0: never */
} collected;

static int collect(const char *line, size_t len, void *arg)
{
    collected *c = arg;

    assert_int_equal(line[len], '\0');
    assert_true(c->n < KL_ARRAY_LEN(c->line));
    c->line[c->n] = kl__malloc(len + 1);
    assert_non_null(c->line[c->n]);
    memcpy(c->line[c->n], line, len + 1);
    c->len[c->n] = len;
    c->n++;
    return c->n == c->stop_after ? 42 : 0;
}

static void collected_free(collected *c)
{
    for (size_t i = 0; i < c->n; i++)
        kl__free(c->line[i]);
    memset(c, 0, sizeof(*c));
}

/* Feeds data in chunks of 1..max_chunk bytes (1: byte by byte). */
static int feed_chunks(kl__line_splitter *s, const char *data, size_t len, size_t max_chunk,
                       collected *c)
{
    int err = 0;

    while (len > 0 && err == 0) {
        size_t n = max_chunk <= 1 ? 1 : (size_t)rng_range(1, (int64_t)max_chunk);

        if (n > len)
            n = len;
        err = kl__line_splitter_feed(s, data, n, collect, c);
        data += n;
        len -= n;
    }
    return err;
}

static void test_splitter_samples(void **state)
{
    static const char *files[] = {"watch_events.jsonl", "watch_events_norv.jsonl",
                                  "watch_events_clientgo_election.jsonl", "watch_http11_body.raw"};
    static const size_t max_chunks[] = {1, 2, 7, 64, 700, 5000};

    (void)state;
    rng_state = 7;
    for (size_t f = 0; f < KL_ARRAY_LEN(files); f++) {
        size_t len;
        char *body = read_sample(files[f], &len);

        for (size_t m = 0; m < KL_ARRAY_LEN(max_chunks); m++) {
            for (int round = 0; round < 20; round++) {
                kl__line_splitter s;
                collected c = {0};
                const char *p = body;

                kl__line_splitter_init(&s, 64 * 1024);
                assert_int_equal(feed_chunks(&s, body, len, max_chunks[m], &c), 0);
                /* Same lines as a plain split on '\n'. */
                for (size_t i = 0; i < c.n; i++) {
                    const char *nl = strchr(p, '\n');

                    assert_non_null(nl);
                    assert_int_equal(c.len[i], (size_t)(nl - p));
                    assert_memory_equal(c.line[i], p, c.len[i]);
                    p = nl + 1;
                }
                assert_int_equal(*p, '\0');
                /* And each is a watch event we can decode. */
                for (size_t i = 0; i < c.n; i++) {
                    kl__watch_event ev;

                    assert_int_equal(kl__watch_event_parse(&ev, c.line[i], c.len[i]), 0);
                    kl__watch_event_clear(&ev);
                }
                assert_true(c.n >= 1);
                collected_free(&c);
                kl__line_splitter_free(&s);
                if (max_chunks[m] == 1)
                    break;
            }
        }
        kl__free(body);
    }
}

static void test_splitter_crlf_empty_partial(void **state)
{
    kl__line_splitter s;
    collected c = {0};

    (void)state;
    kl__line_splitter_init(&s, 100);
    assert_int_equal(kl__line_splitter_feed(&s, "a\r\n\r\n\n", 6, collect, &c), 0);
    assert_int_equal(kl__line_splitter_feed(&s, "bb\nc\r", 5, collect, &c), 0);
    /* "c\r" is incomplete: not delivered until its '\n' arrives. */
    assert_int_equal(c.n, 2);
    assert_int_equal(kl__line_splitter_feed(&s, "\nx\ry\n", 5, collect, &c), 0);
    assert_int_equal(kl__line_splitter_feed(&s, "", 0, collect, &c), 0);
    assert_int_equal(c.n, 4);
    assert_string_equal(c.line[0], "a");
    assert_string_equal(c.line[1], "bb");
    assert_string_equal(c.line[2], "c");
    assert_string_equal(c.line[3], "x\ry"); /* only a final '\r' is framing */
    assert_int_equal(c.len[3], 3);
    collected_free(&c);
    kl__line_splitter_free(&s);
    kl__line_splitter_free(&s); /* idempotent */
}

static void test_splitter_too_long(void **state)
{
    static char big[1 << 20];
    kl__line_splitter s;
    collected c = {0};
    int err = 0;
    size_t i;

    (void)state;
    kl__line_splitter_init(&s, 8);
    /* Exactly max_line is fine, with or without "\r". */
    assert_int_equal(kl__line_splitter_feed(&s, "12345678\n12345678\r\n", 19, collect, &c), 0);
    assert_int_equal(c.n, 2);
    assert_int_equal(kl__line_splitter_feed(&s, "123456789\n", 10, collect, &c),
                     K8SLEASE_EPROTOCOL);
    assert_error_contains("watch stream: line longer than 8 bytes");
    /* "9\r": 9 bytes before "\r\n" is too long even though the '\r' fits. */
    assert_int_equal(kl__line_splitter_feed(&s, "123456789\r\n", 11, collect, &c),
                     K8SLEASE_EPROTOCOL);
    assert_int_equal(c.n, 2);
    /* After an error the splitter starts a fresh line. */
    assert_int_equal(kl__line_splitter_feed(&s, "ok\n", 3, collect, &c), 0);
    assert_int_equal(c.n, 3);
    assert_string_equal(c.line[2], "ok");

    /* Byte by byte without a newline: fails by the 10th byte, bounded buffer. */
    for (i = 0; i < 100 && err == 0; i++)
        err = kl__line_splitter_feed(&s, "x", 1, collect, &c);
    assert_int_equal(err, K8SLEASE_EPROTOCOL);
    assert_true(i <= 10);
    assert_true(s.cap <= 10);
    kl__line_splitter_free(&s);

    /* One huge chunk: rejected without buffering it. */
    memset(big, 'y', sizeof(big));
    kl__line_splitter_init(&s, 1000);
    assert_int_equal(kl__line_splitter_feed(&s, big, sizeof(big), collect, &c), K8SLEASE_EPROTOCOL);
    assert_error_contains("line longer than 1000 bytes");
    assert_true(s.cap <= 1002);
    kl__line_splitter_free(&s);
    collected_free(&c);
}

static void test_splitter_callback_stops(void **state)
{
    kl__line_splitter s;
    collected c = {0};

    (void)state;
    c.stop_after = 2;
    kl__line_splitter_init(&s, 100);
    assert_int_equal(kl__line_splitter_feed(&s, "a\nb\nc\nd\n", 8, collect, &c), 42);
    assert_int_equal(c.n, 2);
    assert_string_equal(c.line[1], "b");
    collected_free(&c);
    kl__line_splitter_free(&s);
}

/* ------------------------------------------------------------------------ */
/* Failing allocator: every allocation failure is ENOMEM, never a leak      */
/* (ASan's leak checker runs at exit), never a crash.                       */
/* ------------------------------------------------------------------------ */

static char *fa_body;
static size_t fa_len;

static int fa_parse_and_update(void)
{
    kl__lease_spec spec = {"me", 15, T_CLIENTGO_ACQUIRE, T_CLIENTGO_RENEW1, 2};
    kl__lease *l = NULL;
    char *out;
    int err;

    if ((err = kl__lease_parse(&l, fa_body, fa_len)) < 0)
        return err;
    out = kl__lease_encode_update(l, &spec);
    kl__lease_free(l);
    if (!out)
        return K8SLEASE_ENOMEM;
    kl__free(out);
    return 0;
}

static int fa_create(void)
{
    kl__lease_spec spec = {"me", 15, T_CLIENTGO_ACQUIRE, T_CLIENTGO_RENEW1, 0};
    char *out = kl__lease_encode_create("default", "x", &spec);

    if (!out)
        return K8SLEASE_ENOMEM;
    kl__free(out);
    return 0;
}

/* The scanner's Lease: its text copied and taken, its tree built. */
static int fa_scan_text_root(void)
{
    kl__lease *l = NULL;
    char *text;
    int err;

    if ((err = kl__lease_scan(&l, fa_body, fa_len)) != 0)
        return err;
    err = K8SLEASE_ENOMEM;
    if ((text = kl__lease_text_dup(l)) != NULL && kl__lease_root(l) != NULL)
        err = 0;
    kl__free(text);
    text = kl__lease_text_take(l);
    kl__lease_free(l);
    kl__free(text);
    return err;
}

static int fa_parse_json(void)
{
    kl__lease *l = NULL;
    int err = kl__lease_parse_json(&l, fa_body, fa_len);

    kl__lease_free(l);
    return err;
}

static int fa_watch_json(void)
{
    kl__watch_event ev;
    int err = kl__watch_event_parse_json(&ev, fa_body, fa_len);

    kl__watch_event_clear(&ev);
    return err;
}

static int fa_watch(void)
{
    kl__watch_event ev;
    int err = kl__watch_event_parse(&ev, fa_body, fa_len);

    kl__watch_event_clear(&ev);
    return err;
}

static int fa_status(void)
{
    kl__status st;
    int err = kl__status_parse(&st, fa_body, fa_len);

    kl__status_clear(&st);
    return err;
}

static int count_line(const char *line, size_t len, void *arg)
{
    (void)line;
    (void)len;
    (*(size_t *)arg)++;
    return 0;
}

static int fa_splitter(void)
{
    kl__line_splitter s;
    size_t n = 0;
    int err = 0;

    kl__line_splitter_init(&s, 64 * 1024);
    for (size_t off = 0; off < fa_len && err == 0; off += 7)
        err = kl__line_splitter_feed(&s, fa_body + off, fa_len - off < 7 ? fa_len - off : 7,
                                     count_line, &n);
    kl__line_splitter_free(&s);
    return err;
}

static void run_failalloc(const char *file, int (*op)(void))
{
    long n;
    int err = -1;

    fa_body = read_sample(file, &fa_len);
    for (n = 0; n < 10000; n++) {
        kl__alloc_fail_after(n);
        err = op();
        kl__alloc_fail_after(-1);
        if (err == 0)
            break;
        /* jansson reports a failed string allocation while parsing as a
         * syntax error; nothing to free either way. */
        if (err == K8SLEASE_EPROTOCOL && strstr(kl__error_get(), "not valid JSON"))
            continue;
        if (err != K8SLEASE_ENOMEM)
            fail_msg("%s: allocation %ld failing gave %d: %s", file, n, err, kl__error_get());
    }
    assert_int_equal(err, 0);
    assert_true(n > 0); /* at least one allocation was exercised */
    kl__free(fa_body);
}

static void test_failalloc(void **state)
{
    (void)state;
    run_failalloc("200_get.json", fa_parse_and_update);
    run_failalloc("201_put_create_on_update.json", fa_parse_and_update);
    run_failalloc("200_get.json", fa_create);
    run_failalloc("200_update.json", fa_scan_text_root);
    run_failalloc("200_update.json", fa_parse_json);
    run_failalloc("watch_event_modified.json", fa_watch);
    run_failalloc("watch_event_modified.json", fa_watch_json);
    run_failalloc("410_gone_watch_cache.json", fa_watch);
    run_failalloc("404_notfound_get.json", fa_status);
    run_failalloc("watch_events_clientgo_election.jsonl", fa_splitter);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lease_parse_samples),
        cmocka_unit_test(test_lease_missing_and_null_fields),
        cmocka_unit_test(test_lease_parse_errors),
        cmocka_unit_test(test_lease_parse_wrong_kind_samples),
        cmocka_unit_test(test_lease_from_json_refcount),
        cmocka_unit_test(test_scan_samples),
        cmocka_unit_test(test_scan_watch_samples),
        cmocka_unit_test(test_scan_capture),
        cmocka_unit_test(test_scan_escapes),
        cmocka_unit_test(test_scan_holder_container),
        cmocka_unit_test(test_scan_declines),
        cmocka_unit_test(test_scan_nul_after_literal),
        cmocka_unit_test(test_scan_watch_events),
        cmocka_unit_test(test_lease_text_and_root),
        cmocka_unit_test(test_encode_create),
        cmocka_unit_test(test_encode_create_escaping),
        cmocka_unit_test(test_encode_update_preserves_unknown),
        cmocka_unit_test(test_encode_update_in_place),
        cmocka_unit_test(test_splice_update),
        cmocka_unit_test(test_encode_update_sparse_base),
        cmocka_unit_test(test_encode_update_release_and_zero),
        cmocka_unit_test(test_microtime_known),
        cmocka_unit_test(test_microtime_random_roundtrip),
        cmocka_unit_test(test_microtime_every_day),
        cmocka_unit_test(test_microtime_format_extremes),
        cmocka_unit_test(test_microtime_parse_fraction),
        cmocka_unit_test(test_microtime_parse_offsets),
        cmocka_unit_test(test_microtime_parse_invalid),
        cmocka_unit_test(test_status_samples),
        cmocka_unit_test(test_status_errors),
        cmocka_unit_test(test_watch_event_samples),
        cmocka_unit_test(test_watch_event_error_410),
        cmocka_unit_test(test_watch_event_bookmark_deleted),
        cmocka_unit_test(test_watch_event_errors),
        cmocka_unit_test(test_splitter_samples),
        cmocka_unit_test(test_splitter_crlf_empty_partial),
        cmocka_unit_test(test_splitter_too_long),
        cmocka_unit_test(test_splitter_callback_stops),
        cmocka_unit_test(test_failalloc),
    };

    /* Route jansson through the library allocator so the failing-allocator
     * test reaches jansson's allocations too. */
    json_set_alloc_funcs(kl__malloc, kl__free);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
