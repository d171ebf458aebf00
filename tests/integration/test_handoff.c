/* Planned handoff (k8slease_elector_handoff, k8slease_lease_handoff,
 * handoff candidates) end to end.
 *
 * Every candidate has a client of its own (its own connection and watch, as
 * separate processes would) and records its callbacks with CLOCK_MONOTONIC
 * times. In on_started_leading each one reads is_leader of every other live
 * candidate: the old leader's turned false before its handoff write was
 * sent, so one still true there is two leaders at once (a strict check, not
 * a sampling: the new term is already valid when its callback runs). A
 * holder watch of the test's own client follows every Lease and checks that
 * the epoch never goes back and grows with every new holder.
 *
 * What is asserted: the named successor leads well within the bound (so at
 * once, not by expiry) with epochs old < the handoff record's < the
 * successor's; the old leader's term is over (is_leader false,
 * on_stopped_leading run, a waiter of wait_lost returned) before the
 * successor's starts; the best candidate is chosen (newest revision, then
 * priority; never a terminating one; a Pod's candidate however old its
 * object; never an expired object without a Pod); no candidate known: a
 * plain release; a successor that never takes: anyone after the bound,
 * nobody before; the operator's request (library and kubectl-style) is
 * acted on once and removed; candidate objects come and go with their
 * electors; a follower's handoff only stops it; bad input is refused,
 * naming what was wrong; a mixed fleet (poll_only candidates, candidates
 * unknown to the choice) stays safe and the successor leads.
 *
 * Runs on k8slease-testserver and, under tests/integration/envtest.sh, on
 * a real kube-apiserver (label envtest). */
#define _GNU_SOURCE /* timegm */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include <jansson.h>

#include "e2e.h"
#include "testlib.h"
#include "k8slease.h"
#include "libk8s_lease_wrapper.h"

/* Short timings keep the suite fast; generous waits keep it robust. */
#define LD_MS    3000
#define RD_MS    2000
#define RP_MS    500
#define WAIT_MS  30000
#define BOUND_MS 5000 /* an explicit bound: taking at once is far within it */
#define MAX_LIVE 16

#define CAND_LABEL "k8slease.io/candidate-of"
#define CAND_ANN   "k8slease.io/candidate"
#define DONE_ANN   "k8slease.io/handoff"
#define REQ_ANN    "k8slease.io/handoff-request"

static k8slease_client *client;
static const char *ns;

/* ---- candidates ------------------------------------------------------------ */

typedef struct cand_opts {
    int handoff_candidate;
    int poll_only;
    const char *pod;
    const char *revision;
    int priority;
    int version; /* 0: K8SLEASE_ELECTOR_OPTIONS_VERSION */
} cand_opts;

typedef struct cand {
    int used, inited; /* taken from the pool; mu initialised */
    int borrowed;     /* client is another candidate's (cand_share) */
    const char *id;
    k8slease_client *client; /* its own, kept across its electors */
    k8slease_elector *e;
    pthread_mutex_t mu;
    int started, stopped;
    int64_t started_at, stopped_at, epoch; /* ms, CLOCK_MONOTONIC */
    int overlaps;                          /* others leading when our term started */
    char overlap_with[64];
} cand;

/* Candidates live in a pool, not on a test's stack: a failed test leaves
 * them to the teardown (cleanup), whose callbacks may still run. */
static cand pool[MAX_LIVE];

static cand *cand_new(const char *id)
{
    for (int i = 0; i < MAX_LIVE; i++)
        if (!pool[i].used) {
            memset(&pool[i], 0, sizeof(pool[i]));
            pool[i].used = 1;
            pool[i].id = id;
            return &pool[i];
        }
    fail_msg("more than %d candidates", MAX_LIVE);
    return NULL;
}

/* The live candidates, for the cross-check in on_started_leading. */
static struct {
    pthread_mutex_t mu;
    cand *c[MAX_LIVE];
    int n;
} live = {PTHREAD_MUTEX_INITIALIZER, {0}, 0};

static void on_started(int64_t epoch, void *ud)
{
    cand *c = ud;
    int64_t now = e2e_mono_ms();
    int overlaps = 0;
    char with[64] = "";

    /* Our term is valid now: nobody else's may be. */
    pthread_mutex_lock(&live.mu);
    for (int i = 0; i < live.n; i++)
        if (live.c[i] != c && live.c[i]->e && k8slease_elector_is_leader(live.c[i]->e)) {
            overlaps++;
            snprintf(with, sizeof(with), "%s", live.c[i]->id);
        }
    pthread_mutex_unlock(&live.mu);
    pthread_mutex_lock(&c->mu);
    c->started = 1;
    c->started_at = now;
    c->epoch = epoch;
    c->overlaps += overlaps;
    if (overlaps)
        snprintf(c->overlap_with, sizeof(c->overlap_with), "%s", with);
    pthread_mutex_unlock(&c->mu);
}

static void on_stopped(void *ud)
{
    cand *c = ud;
    int64_t now = e2e_mono_ms();

    pthread_mutex_lock(&c->mu);
    if (c->started && !c->stopped) {
        c->stopped = 1;
        c->stopped_at = now;
    }
    pthread_mutex_unlock(&c->mu);
}

static void cand_start(cand *c, const char *lease, const cand_opts *co)
{
    k8slease_elector_options o = K8SLEASE_ELECTOR_OPTIONS_INIT;
    k8slease_elector *e = NULL;

    if (!c->client) {
        k8slease_client_options copts = K8SLEASE_CLIENT_OPTIONS_INIT;

        copts.log_cb = e2e_log_to_stderr;
        copts.log_level = K8SLEASE_LOG_WARN;
        if (!c->inited) {
            pthread_mutex_init(&c->mu, NULL);
            c->inited = 1;
        }
        if (k8slease_client_new(&c->client, &copts) != 0)
            fail_msg("client of %s: %s", c->id, k8slease_error_last());
    }
    pthread_mutex_lock(&c->mu);
    c->started = c->stopped = 0;
    c->started_at = c->stopped_at = 0;
    c->epoch = -1;
    pthread_mutex_unlock(&c->mu);
    if (co && co->version)
        o.version = (unsigned)co->version;
    o.ns = ns;
    o.name = lease;
    o.identity = c->id;
    o.lease_duration_ms = LD_MS;
    o.renew_deadline_ms = RD_MS;
    o.retry_period_ms = RP_MS;
    o.on_started_leading = on_started;
    o.on_stopped_leading = on_stopped;
    o.user_data = c;
    if (co) {
        o.handoff_candidate = co->handoff_candidate;
        o.poll_only = co->poll_only;
        o.pod_name = co->pod;
        o.revision = co->revision;
        o.priority = co->priority;
    }
    if (k8slease_elector_start(&e, c->client, &o) != 0)
        fail_msg("elector_start(%s): %s", c->id, k8slease_error_last());
    pthread_mutex_lock(&live.mu);
    assert_true(live.n < MAX_LIVE);
    c->e = e;
    live.c[live.n++] = c;
    pthread_mutex_unlock(&live.mu);
}

/* Free the elector (as its options say about release), keep the client. */
static void cand_stop(cand *c)
{
    k8slease_elector *e;

    pthread_mutex_lock(&live.mu);
    e = c->e;
    c->e = NULL;
    for (int i = 0; i < live.n; i++)
        if (live.c[i] == c) {
            live.c[i] = live.c[--live.n];
            break;
        }
    pthread_mutex_unlock(&live.mu);
    k8slease_elector_free(e);
}

/* c's electors run on from's client (the next elector of one program);
 * free c first. */
static void cand_share(cand *c, cand *from)
{
    c->client = from->client;
    c->borrowed = 1;
    pthread_mutex_init(&c->mu, NULL);
    c->inited = 1;
}

static void cand_free(cand *c)
{
    if (!c->used)
        return;
    cand_stop(c);
    if (!c->borrowed)
        k8slease_client_free(c->client);
    c->client = NULL;
    if (c->inited)
        pthread_mutex_destroy(&c->mu);
    c->inited = 0;
    c->used = 0;
}

static int64_t cand_elected(cand *c)
{
    int64_t epoch = -1;
    int rc = k8slease_elector_wait_elected(c->e, WAIT_MS, &epoch);

    if (rc != 0)
        fail_msg("%s not elected within %d ms: %s (%s)", c->id, WAIT_MS, k8slease_strerror(rc),
                 k8slease_error_last());
    return epoch;
}

/* c did not lead, and its election goes on. */
static void cand_follows(cand *c)
{
    pthread_mutex_lock(&c->mu);
    if (c->started)
        fail_msg("%s led (epoch %" PRId64 ") and was expected to follow", c->id, c->epoch);
    pthread_mutex_unlock(&c->mu);
    if (k8slease_elector_wait_lost(c->e, 0) == 0)
        fail_msg("%s's election is over: it was expected to go on", c->id);
}

static void cand_times(cand *c, int64_t *started_at, int64_t *stopped_at, int *overlaps)
{
    pthread_mutex_lock(&c->mu);
    if (started_at)
        *started_at = c->started ? c->started_at : 0;
    if (stopped_at)
        *stopped_at = c->stopped ? c->stopped_at : 0;
    if (overlaps)
        *overlaps = c->overlaps;
    if (c->overlaps)
        fprintf(stderr, "test_handoff: %s started while %s led\n", c->id, c->overlap_with);
    pthread_mutex_unlock(&c->mu);
}

/* No term of c overlapped another's (checked when each started). */
static void no_overlap(cand *c)
{
    int overlaps;

    cand_times(c, NULL, NULL, &overlaps);
    if (overlaps)
        fail_msg("%s: its term started while %s still led: two leaders at once", c->id,
                 c->overlap_with);
}

/* ---- the Lease as the server has it --------------------------------------- */

static const char *lease_path(const char *name)
{
    static char path[512];

    snprintf(path, sizeof(path), "/apis/coordination.k8s.io/v1/namespaces/%s/leases/%s", ns, name);
    return path;
}

/* The object (json_decref); fails the test if unreadable. */
static json_t *get_json(const char *path)
{
    long status = 0;
    char *body = NULL;
    json_t *root;

    if (e2e_api("GET", path, NULL, &status, &body) != 0 || status != 200)
        fail_msg("GET %s: HTTP %ld: %s", path, status, body ? body : "");
    root = json_loads(body, 0, NULL);
    free(body);
    assert_non_null(root);
    return root;
}

static json_t *get_lease(const char *name)
{
    return get_json(lease_path(name));
}

typedef struct lease_view {
    char holder[600];
    int64_t transitions, duration_s;
    int has_request;
    /* The handoff record (annotation k8slease.io/handoff), "" / -1 none. */
    char done_from[600], done_to[600];
    int64_t done_epoch;
} lease_view;

static void view(const char *name, lease_view *v)
{
    json_t *root = get_lease(name), *spec = json_object_get(root, "spec");
    json_t *ann = json_object_get(json_object_get(root, "metadata"), "annotations");
    const char *h = json_string_value(json_object_get(spec, "holderIdentity"));
    const char *done = json_string_value(json_object_get(ann, DONE_ANN));

    memset(v, 0, sizeof(*v));
    snprintf(v->holder, sizeof(v->holder), "%s", h ? h : "");
    v->transitions = json_integer_value(json_object_get(spec, "leaseTransitions"));
    v->duration_s = json_integer_value(json_object_get(spec, "leaseDurationSeconds"));
    v->has_request = json_object_get(ann, REQ_ANN) != NULL;
    v->done_epoch = -1;
    if (done) {
        json_t *d = json_loads(done, 0, NULL);
        const char *from = json_string_value(json_object_get(d, "from"));
        const char *to = json_string_value(json_object_get(d, "to"));

        if (!d || !from || !to || !json_is_integer(json_object_get(d, "epoch")))
            fail_msg("lease %s: annotation %s is not {from, to, epoch}: %s", name, DONE_ANN, done);
        snprintf(v->done_from, sizeof(v->done_from), "%s", from);
        snprintf(v->done_to, sizeof(v->done_to), "%s", to);
        v->done_epoch = json_integer_value(json_object_get(d, "epoch"));
        json_decref(d);
    }
    json_decref(root);
}

/* The handoff record says from -> to at epoch. */
static void assert_record(const char *lease, const char *from, const char *to, int64_t epoch)
{
    lease_view v;

    view(lease, &v);
    if (strcmp(v.done_from, from) != 0 || strcmp(v.done_to, to) != 0 || v.done_epoch != epoch)
        fail_msg("lease %s: handoff record {from \"%s\", to \"%s\", epoch %" PRId64
                 "}, expected {\"%s\", \"%s\", %" PRId64 "}",
                 lease, v.done_from, v.done_to, v.done_epoch, from, to, epoch);
}

/* ---- candidates' objects -------------------------------------------------- */

static uint64_t fnv1a(const char *s)
{
    uint64_t h = UINT64_C(14695981039346656037);

    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= UINT64_C(1099511628211);
    }
    return h;
}

/* The candidates' objects of lease (label selector k8slease.io/candidate-of=
 * <FNV-1a of the name, 16 hex digits>): the items array (json_decref the
 * returned list). */
static json_t *candidates(const char *lease, json_t **items)
{
    char path[512];
    json_t *list;

    snprintf(path, sizeof(path),
             "/apis/coordination.k8s.io/v1/namespaces/%s/leases?labelSelector=" CAND_LABEL
             "%%3D%016" PRIx64,
             ns, fnv1a(lease));
    list = get_json(path);
    *items = json_object_get(list, "items");
    assert_true(json_is_array(*items));
    return list;
}

static const char *cand_identity(json_t *item)
{
    return json_string_value(json_object_get(json_object_get(item, "spec"), "holderIdentity"));
}

/* How many of ids[] (n) have an object; the one of id, if asked for
 * (json_incref'ed, json_decref it). */
static int known(const char *lease, const char *const *ids, int n, const char *id, json_t **obj)
{
    json_t *items, *list = candidates(lease, &items), *item;
    size_t i;
    int found = 0;

    if (obj)
        *obj = NULL;
    json_array_foreach(items, i, item)
    {
        const char *h = cand_identity(item);

        for (int k = 0; h && k < n; k++)
            found += strcmp(h, ids[k]) == 0;
        if (obj && id && h && strcmp(h, id) == 0)
            *obj = json_incref(item);
    }
    json_decref(list);
    return found;
}

/* Wait until all of ids[] (n) are known for lease. */
static void await_known(const char *lease, const char *const *ids, int n)
{
    int64_t until = e2e_mono_ms() + WAIT_MS;

    while (known(lease, ids, n, NULL, NULL) != n) {
        if (e2e_mono_ms() > until)
            fail_msg("lease %s: not all %d candidates' objects exist within %d ms", lease, n,
                     WAIT_MS);
        e2e_pause_ms(20);
    }
}

/* The number of candidates' objects of lease. */
static size_t count_known(const char *lease)
{
    json_t *items, *list = candidates(lease, &items);
    size_t n = json_array_size(items);

    json_decref(list);
    return n;
}

/* stats.candidate_known of c's elector. */
static int cand_known_stat(cand *c)
{
    k8slease_elector_stats st = {.version = K8SLEASE_ELECTOR_STATS_VERSION};

    assert_int_equal(k8slease_elector_stats_get(c->e, &st), 0);
    return st.candidate_known;
}

/* Wait until c's elector says candidate_known == want. */
static void await_known_stat(cand *c, int want)
{
    int64_t until = e2e_mono_ms() + WAIT_MS;

    while (cand_known_stat(c) != want) {
        if (e2e_mono_ms() > until)
            fail_msg("%s: stats.candidate_known is %d, not %d within %d ms", c->id,
                     cand_known_stat(c), want, WAIT_MS);
        e2e_pause_ms(20);
    }
}

/* The candidate annotation of an object, parsed (json_decref). */
static json_t *cand_info(json_t *item)
{
    const char *s = json_string_value(json_object_get(
        json_object_get(json_object_get(item, "metadata"), "annotations"), CAND_ANN));
    json_t *info = s ? json_loads(s, 0, NULL) : NULL;

    if (!info)
        fail_msg("candidate object without a JSON %s annotation", CAND_ANN);
    return info;
}

/* ---- Pods (born at their creation; revision from a label) ------------------ */

static void create_pod(const char *name, const char *revision)
{
    char path[256], body[1024];

    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods", ns);
    snprintf(body, sizeof(body),
             "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"%s\","
             "\"labels\":{\"pod-template-hash\":\"%s\"}},\"spec\":{\"containers\":[{\"name\":"
             "\"main\",\"image\":\"registry.k8s.io/pause\"}]}}",
             name, revision);
    if (e2e_create(path, body) != 0)
        fail_msg("cannot create pod %s/%s", ns, name);
}

static char *pod_uid(const char *name)
{
    char path[256];
    json_t *pod;
    char *uid;

    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", ns, name);
    pod = get_json(path);
    uid = strdup(json_string_value(json_object_get(json_object_get(pod, "metadata"), "uid")));
    json_decref(pod);
    return uid;
}

/* Wait (bounded) until the wall clock is in a later second than now: a Pod
 * created afterwards is born later (creationTimestamp has whole seconds). */
static void next_second(void)
{
    time_t first = time(NULL);
    int64_t until = e2e_mono_ms() + 5000;

    while (time(NULL) <= first) {
        if (e2e_mono_ms() > until)
            fail_msg("the wall clock did not move on within 5 s");
        e2e_pause_ms(10);
    }
}

/* ---- a holder watch: epochs never go back ---------------------------------- */

typedef struct follow {
    pthread_mutex_t mu;
    k8slease_watch *w;
    const char *lease;
    char holder[600];
    int64_t epoch;
    int changes;
    int errors;
    char error[1600];
} follow;

static void on_holder(const char *identity, int64_t epoch, void *ud)
{
    follow *f = ud;

    pthread_mutex_lock(&f->mu);
    /* A release keeps the epoch; any holder after another has a greater one. */
    if (f->changes && (epoch < f->epoch ||
                       (identity[0] && strcmp(identity, f->holder) != 0 && epoch <= f->epoch))) {
        f->errors++;
        snprintf(f->error, sizeof(f->error),
                 "lease %s: holder \"%s\" epoch %" PRId64 " after \"%s\" epoch %" PRId64, f->lease,
                 identity, epoch, f->holder, f->epoch);
    }
    snprintf(f->holder, sizeof(f->holder), "%s", identity);
    f->epoch = epoch;
    f->changes++;
    pthread_mutex_unlock(&f->mu);
}

static follow follows[2]; /* a pool, as the candidates' */

static follow *follow_start(const char *lease)
{
    follow *f = NULL;

    for (size_t i = 0; !f && i < sizeof(follows) / sizeof(follows[0]); i++)
        if (!follows[i].lease)
            f = &follows[i];
    assert_non_null(f);
    memset(f, 0, sizeof(*f));
    pthread_mutex_init(&f->mu, NULL);
    f->lease = lease;
    if (k8slease_watch_start(&f->w, client, ns, lease, on_holder, f) != 0)
        fail_msg("watch %s: %s", lease, k8slease_error_last());
    return f;
}

/* Free f's watch; 1 if it saw the epochs go wrong (f->error says how). */
static int follow_free(follow *f)
{
    int errors = f->errors;

    if (!f->lease)
        return 0;
    k8slease_watch_free(f->w);
    pthread_mutex_destroy(&f->mu);
    f->w = NULL;
    f->lease = NULL;
    return errors > 0;
}

static void follow_end(follow *f)
{
    if (follow_free(f))
        fail_msg("%s", f->error);
}

/* ---- one handoff, checked -------------------------------------------------- */

/* from leads with epoch e_from; hand over to `to` (NULL: the best) with a
 * term of bound_ms (0: the default); the successor expected (succ) must
 * lead (within an explicit bound: so at once, not by expiry) with epoch
 * e_from + 2, the record saying e_from + 1, and from's term must be over
 * before succ's started. Returns succ's epoch. */
static int64_t hand_over(const char *lease, cand *from, int64_t e_from, const char *to, cand *succ,
                         int64_t bound_ms)
{
    int64_t t_call, t_done, e_succ = -1, stopped_at, started_at;
    int rc;

    t_call = e2e_mono_ms();
    if ((rc = k8slease_elector_handoff(from->e, to, bound_ms)) != 0)
        fail_msg("k8slease_elector_handoff(%s, %s): %s", from->id, to ? to : "NULL",
                 k8slease_error_last());
    t_done = e2e_mono_ms();
    /* Over for its program before the call returns. */
    assert_false(k8slease_elector_is_leader(from->e));
    assert_int_equal(k8slease_elector_wait_lost(from->e, 0), 0);
    cand_times(from, NULL, &stopped_at, NULL);
    if (!stopped_at)
        fail_msg("%s: on_stopped_leading did not run before k8slease_elector_handoff returned",
                 from->id);
    rc = k8slease_elector_wait_elected(succ->e, WAIT_MS, &e_succ);
    if (rc != 0)
        fail_msg("%s: not leading %d ms after %s's handoff to %s: %s", succ->id, WAIT_MS, from->id,
                 to ? to : "the best", k8slease_error_last());
    cand_times(succ, &started_at, NULL, NULL);
    /* An explicit bound far above a round trip: taken at once, not after
     * the bound (then anyone could have). */
    if (bound_ms > 0 && started_at - t_call >= bound_ms)
        fail_msg("%s led %" PRId64 " ms after the handoff call: not before the bound of %" PRId64
                 " ms",
                 succ->id, started_at - t_call, bound_ms);
    print_message("  %s -> %s: handoff call %" PRId64 " ms, %s led %" PRId64
                  " ms after the call, epochs %" PRId64 " -> %" PRId64 "\n",
                  from->id, succ->id, t_done - t_call, succ->id, started_at - t_call, e_from,
                  e_succ);
    if (stopped_at > started_at)
        fail_msg("%s's on_started_leading (%" PRId64
                 ") ran before %s's on_stopped_leading (%" PRId64 ")",
                 succ->id, started_at, from->id, stopped_at);
    no_overlap(succ);
    assert_int_equal(e_succ, e_from + 2);
    assert_record(lease, from->id, succ->id, e_from + 1);
    return e_succ;
}

/* ---- setup ---------------------------------------------------------------- */

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
    ns = e2e_namespace("handoff");
    return ns ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return e2e_teardown(client);
}

/* After each test: what a failed one left. */
static int cleanup(void **state)
{
    (void)state;
    for (int i = 0; i < MAX_LIVE; i++) /* before the owners of their clients */
        if (pool[i].borrowed)
            cand_free(&pool[i]);
    for (int i = 0; i < MAX_LIVE; i++)
        cand_free(&pool[i]);
    for (size_t i = 0; i < sizeof(follows) / sizeof(follows[0]); i++)
        follow_free(&follows[i]);
    return 0;
}

/* ---- the tests -------------------------------------------------------------- */

/* A thread in k8slease_elector_wait_lost. */
typedef struct lost_waiter {
    k8slease_elector *e;
    int rc;
    int64_t returned_at;
    pthread_t th;
} lost_waiter;

static void *wait_lost_thread(void *arg)
{
    lost_waiter *w = arg;

    w->rc = k8slease_elector_wait_lost(w->e, -1);
    w->returned_at = e2e_mono_ms();
    return NULL;
}

typedef struct handoff_call {
    k8slease_elector *e;
    const char *to;
    int64_t bound_ms;
    int rc;
    pthread_t th;
} handoff_call;

static void *handoff_thread(void *arg)
{
    handoff_call *h = arg;

    h->rc = k8slease_elector_handoff(h->e, h->to, h->bound_ms);
    return NULL;
}

/* To a named successor: it leads at once (well within the bound), the
 * epochs grow by one for the record and one for its term, and the old
 * leader's term is over first: is_leader false, on_stopped_leading, and a
 * thread in wait_lost returned before the write (held there, the Lease
 * keeps naming the old leader and nobody else leads). Another candidate,
 * watching, never leads. */
static void named_successor(void **state)
{
    const char *lease = "ho-named";
    cand *a = cand_new("a"), *b = cand_new("b"), *c = cand_new("c");
    cand_opts known_opts = {.handoff_candidate = 1};
    lost_waiter w = {0};
    handoff_call h = {0};
    follow *f;
    int64_t ea, eb, ea2, b_started;
    lease_view v;

    (void)state;
    f = follow_start(lease);
    cand_start(a, lease, &known_opts);
    ea = cand_elected(a);
    cand_start(b, lease, NULL); /* unknown to the choice: named, it takes it */
    cand_start(c, lease, &known_opts);
    assert_int_equal(k8slease_elector_wait_elected(b->e, 500, NULL), K8SLEASE_ETIMEOUT);

    /* A thread in wait_lost holds the write back until it has returned. */
    w.e = a->e;
    assert_int_equal(pthread_create(&w.th, NULL, wait_lost_thread, &w), 0);
    e2e_lost_await_waiting();
    h.e = a->e;
    h.to = "b";
    h.bound_ms = BOUND_MS;
    assert_int_equal(pthread_create(&h.th, NULL, handoff_thread, &h), 0);
    e2e_lost_await_held();
    assert_false(k8slease_elector_is_leader(a->e));
    /* Held: nothing written, nobody else leads. */
    assert_int_equal(k8slease_elector_wait_elected(b->e, 1000, NULL), K8SLEASE_ETIMEOUT);
    view(lease, &v);
    assert_string_equal(v.holder, "a");
    assert_int_equal(v.transitions, ea);
    e2e_lost_let_go();
    assert_int_equal(pthread_join(w.th, NULL), 0);
    assert_int_equal(w.rc, 0);
    eb = cand_elected(b);
    assert_int_equal(pthread_join(h.th, NULL), 0);
    assert_int_equal(h.rc, 0);
    cand_times(b, &b_started, NULL, NULL);
    if (w.returned_at > b_started)
        fail_msg("b led (%" PRId64 ") before a's wait_lost returned (%" PRId64 ")", b_started,
                 w.returned_at);
    assert_int_equal(eb, ea + 2);
    assert_record(lease, "a", "b", ea + 1);
    no_overlap(b);
    cand_follows(c);

    /* Back again, without a waiter, and checked by hand_over(): b -> a
     * (a new elector of a's). */
    cand_stop(a);
    cand_start(a, lease, &known_opts);
    ea2 = hand_over(lease, b, eb, "a", a, BOUND_MS);
    assert_true(ea2 > eb);
    cand_follows(c);
    view(lease, &v);
    assert_string_equal(v.holder, "a");
    assert_int_equal(v.transitions, ea2);
    cand_free(c);
    cand_free(b);
    cand_free(a);
    follow_end(f);
}

/* The best successor: the newest revision (its Pods born last), then the
 * highest priority; never a terminating one. A chain of handoffs without a
 * name: lead -> n2 (r2, priority 1) -> n1 (r2, priority 0; over old's
 * priority 9 of r1) -> old (r1; term is r2 with priority 10 but
 * terminating) -> nobody left but term: a plain release (term takes it
 * with epoch + 1, and no new handoff record). */
static void best_candidate(void **state)
{
    const char *lease = "ho-best";
    static const char *const ids[] = {"lead", "old", "n1", "n2", "term"};
    cand *lead = cand_new("lead"), *old = cand_new("old"), *n1 = cand_new("n1"),
         *n2 = cand_new("n2"), *term = cand_new("term");
    cand_opts lo = {.handoff_candidate = 1},
              oo = {.handoff_candidate = 1, .pod = "ho-best-old", .priority = 9},
              n1o = {.handoff_candidate = 1, .pod = "ho-best-n1"},
              n2o = {.handoff_candidate = 1, .pod = "ho-best-n2", .priority = 1},
              to = {.handoff_candidate = 1, .pod = "ho-best-term", .priority = 10};
    json_t *obj = NULL, *info;
    char path[512], *text, *patch;
    long status = 0;
    int64_t e_lead, e_n2, e_n1, e_old, e_term;
    lease_view v;
    follow *f;

    (void)state;
    f = follow_start(lease);
    create_pod("ho-best-old", "r1");
    next_second();
    create_pod("ho-best-n1", "r2");
    create_pod("ho-best-n2", "r2");
    create_pod("ho-best-term", "r2");
    cand_start(lead, lease, &lo);
    e_lead = cand_elected(lead);
    cand_start(old, lease, &oo);
    cand_start(n1, lease, &n1o);
    cand_start(n2, lease, &n2o);
    cand_start(term, lease, &to);
    await_known(lease, ids, 5);

    /* The revisions come from the Pods' label. */
    assert_int_equal(known(lease, ids, 5, "old", &obj), 5);
    info = cand_info(obj);
    assert_string_equal(json_string_value(json_object_get(info, "revision")), "r1");
    assert_int_equal(json_integer_value(json_object_get(info, "priority")), 9);
    json_decref(info);
    json_decref(obj);

    /* term says it is terminating (as it would once its Pod is deleted). */
    assert_int_equal(known(lease, ids, 5, "term", &obj), 5);
    info = cand_info(obj);
    json_object_set_new(info, "terminating", json_true());
    text = json_dumps(info, JSON_COMPACT);
    json_decref(info);
    info = json_pack("{s:{s:{s:s}}}", "metadata", "annotations", CAND_ANN, text);
    patch = json_dumps(info, JSON_COMPACT);
    snprintf(path, sizeof(path), "/apis/coordination.k8s.io/v1/namespaces/%s/leases/%s", ns,
             json_string_value(json_object_get(json_object_get(obj, "metadata"), "name")));
    if (e2e_api("PATCH", path, patch, &status, NULL) != 0 || status != 200)
        fail_msg("PATCH %s: HTTP %ld", path, status);
    free(patch);
    free(text);
    json_decref(info);
    json_decref(obj);

    e_n2 = hand_over(lease, lead, e_lead, NULL, n2, BOUND_MS);
    e_n1 = hand_over(lease, n2, e_n2, NULL, n1, BOUND_MS);
    e_old = hand_over(lease, n1, e_n1, NULL, old, BOUND_MS);
    cand_follows(term);

    /* Nobody but a terminating candidate: a plain release. */
    assert_int_equal(k8slease_elector_handoff(old->e, NULL, BOUND_MS), 0);
    e_term = cand_elected(term);
    assert_int_equal(e_term, e_old + 1);
    no_overlap(term);
    view(lease, &v);
    /* The release says it was a handoff that found nobody. */
    assert_string_equal(v.done_to, "");
    assert_int_equal(v.done_epoch, e_old);

    cand_free(term);
    cand_free(old);
    cand_free(n1);
    cand_free(n2);
    cand_free(lead);
    follow_end(f);
}

/* A µs RFC 3339 time `ago_s` seconds back. */
static void micro_time_ago(char *buf, size_t size, int64_t ago_s)
{
    struct timespec ts;
    struct tm tm;
    time_t s;

    clock_gettime(CLOCK_REALTIME, &ts);
    s = ts.tv_sec - (time_t)ago_s;
    gmtime_r(&s, &tm);
    strftime(buf, size, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + strlen(buf), size - strlen(buf), ".%06ldZ", ts.tv_nsec / 1000);
}

/* Make id's candidate object look as it does `ago_s` after it was last
 * written (renewTime and acquireTime that far back). */
static void age_candidate(const char *lease, const char *id, int64_t ago_s)
{
    json_t *obj = NULL, *spec;
    char path[512], when[64], *body;
    long status = 0;

    known(lease, &id, 1, id, &obj);
    if (!obj)
        fail_msg("no candidate object of %s", id);
    spec = json_object_get(obj, "spec");
    micro_time_ago(when, sizeof(when), ago_s);
    json_object_set_new(spec, "renewTime", json_string(when));
    json_object_set_new(spec, "acquireTime", json_string(when));
    snprintf(path, sizeof(path), "/apis/coordination.k8s.io/v1/namespaces/%s/leases/%s", ns,
             json_string_value(json_object_get(json_object_get(obj, "metadata"), "name")));
    body = json_dumps(obj, JSON_COMPACT);
    if (e2e_api("PUT", path, body, &status, NULL) != 0 || status != 200)
        fail_msg("PUT %s: HTTP %ld", path, status);
    free(body);
    json_decref(obj);
}

/* A candidate on a Pod writes its object once (no writes while idle): two
 * hours later it is still a candidate. One without a Pod renews its object
 * every 30 minutes: not renewed for two hours, it is gone (its process
 * died without deleting it) and never chosen, even with a higher
 * priority. */
static void pod_candidate_stays_known(void **state)
{
    const char *lease = "ho-aged";
    static const char *const ids[] = {"b", "c"};
    cand *a = cand_new("a"), *b = cand_new("b"), *c = cand_new("c");
    cand_opts bo = {.handoff_candidate = 1, .pod = "ho-aged-b"},
              co = {.handoff_candidate = 1, .priority = 1};
    int64_t ea;

    (void)state;
    create_pod("ho-aged-b", "r1");
    cand_start(a, lease, NULL);
    ea = cand_elected(a);
    cand_start(b, lease, &bo);
    cand_start(c, lease, &co);
    await_known(lease, ids, 2);
    age_candidate(lease, "b", 7200);
    age_candidate(lease, "c", 7200);
    hand_over(lease, a, ea, NULL, b, BOUND_MS);
    cand_follows(c);
    cand_free(c);
    cand_free(b);
    cand_free(a);
}

/* No candidate known (the others do not make themselves known): a plain
 * release, holder "" with the epoch kept, no handoff record; a follower
 * takes it at once (long before the bound asked), epoch + 1. */
static void no_candidate_releases(void **state)
{
    const char *lease = "ho-none";
    cand *a = cand_new("a"), *b = cand_new("b");
    cand_opts ko = {.handoff_candidate = 1};
    int64_t ea, eb, t_call, b_started;
    lease_view v;

    (void)state;
    cand_start(a, lease, &ko);
    ea = cand_elected(a);
    assert_int_equal(k8slease_elector_handoff(a->e, NULL, 0), 0);
    view(lease, &v);
    assert_string_equal(v.holder, "");
    assert_int_equal(v.transitions, ea);
    assert_int_equal(v.duration_s, 1);
    /* Noted on the Lease: a handoff that found no candidate, and why. */
    assert_string_equal(v.done_to, "");
    assert_int_equal(v.done_epoch, ea);
    cand_stop(a);

    cand_start(a, lease, &ko);
    ea = cand_elected(a);
    cand_start(b, lease, NULL);
    cand_follows(b);
    t_call = e2e_mono_ms();
    assert_int_equal(k8slease_elector_handoff(a->e, NULL, 60000), 0);
    eb = cand_elected(b);
    cand_times(b, &b_started, NULL, NULL);
    print_message("  no candidate known: b led %" PRId64 " ms after the handoff call\n",
                  b_started - t_call);
    if (b_started - t_call >= 60000)
        fail_msg("b led by the handoff's bound, not on a release");
    assert_int_equal(eb, ea + 1);
    no_overlap(b);
    view(lease, &v);
    /* The note of the release stays until the next handoff. */
    assert_string_equal(v.done_to, "");
    assert_int_equal(v.done_epoch, ea);
    cand_free(b);
    cand_free(a);
}

/* A successor that never takes it (no such candidate): the Lease names it
 * for the bound, and nobody leads before the bound has passed; anyone may
 * after. The default bound lets a polling successor (client-go's rules:
 * every retry period plus up to 1.2 of it) meet it. */
static void successor_never_takes(void **state)
{
    const char *lease = "ho-ghost";
    cand *a = cand_new("a"), *c = cand_new("c"), *d = cand_new("d");
    int64_t ea, ec, ed, t_call, started_at, t_start;
    lease_view v;

    (void)state;
    cand_start(a, lease, NULL);
    ea = cand_elected(a);
    assert_int_equal(k8slease_elector_handoff(a->e, "ghost", 0), 0);
    view(lease, &v);
    assert_string_equal(v.holder, "ghost");
    assert_int_equal(v.transitions, ea + 1);
    assert_record(lease, "a", "ghost", ea + 1);
    print_message("  default bound: %" PRId64 " s (retry period %d ms)\n", v.duration_s, RP_MS);
    /* A poller's longest wait (2.2 retry periods) and its two requests. */
    if (v.duration_s * 1000 < RP_MS * 22 / 10 + RP_MS / 2)
        fail_msg("the default bound (%" PRId64 " s) is shorter than a polling successor's longest "
                 "wait (%d ms) and its round trips",
                 v.duration_s, RP_MS * 22 / 10);

    /* A new candidate sees ghost's term and waits for its end. */
    t_start = e2e_mono_ms();
    cand_start(c, lease, NULL);
    ec = cand_elected(c);
    cand_times(c, &started_at, NULL, NULL);
    if (started_at - t_start < v.duration_s * 1000)
        fail_msg("c led %" PRId64 " ms after it started, within ghost's term of %" PRId64 " s",
                 started_at - t_start, v.duration_s);
    assert_int_equal(ec, ea + 2);

    /* A follower that saw the handoff write waits the bound, no less. */
    cand_start(d, lease, NULL);
    cand_follows(d);
    t_call = e2e_mono_ms();
    assert_int_equal(k8slease_elector_handoff(c->e, "ghost", 3000), 0);
    ed = cand_elected(d);
    cand_times(d, &started_at, NULL, NULL);
    print_message("  bound 3 s: d led %" PRId64 " ms after the handoff call\n",
                  started_at - t_call);
    if (started_at - t_call < 3000)
        fail_msg("d led %" PRId64 " ms after the handoff to ghost, before its bound of 3 s",
                 started_at - t_call);
    assert_int_equal(ed, ec + 2);
    no_overlap(d);
    cand_free(d);
    cand_free(c);
    cand_free(a);
}

/* d leads; it has renewed three more times and still leads (it did not
 * hand over again), the Lease unchanged but for renewTime. */
static void keeps_leading(cand *d, int64_t epoch, const char *lease)
{
    k8slease_elector_stats st = {.version = K8SLEASE_ELECTOR_STATS_VERSION};
    uint64_t first;
    lease_view v;

    assert_int_equal(k8slease_elector_stats_get(d->e, &st), 0);
    first = st.renewals;
    for (int64_t until = e2e_mono_ms() + WAIT_MS;; e2e_pause_ms(20)) {
        assert_int_equal(k8slease_elector_stats_get(d->e, &st), 0);
        if (st.renewals >= first + 3)
            break;
        if (e2e_mono_ms() > until)
            fail_msg("%s: fewer than 3 renewals within %d ms", d->id, WAIT_MS);
    }
    assert_true(k8slease_elector_is_leader(d->e));
    view(lease, &v);
    assert_string_equal(v.holder, d->id);
    assert_int_equal(v.transitions, epoch);
    assert_false(v.has_request);
}

/* The operator's request (k8slease_lease_handoff, and a kubectl-style merge
 * patch of the annotation): the leader hands over, named or to the best;
 * the handoff write removes the request, so the next leader does not hand
 * over again. */
static void request_annotation(void **state)
{
    const char *lease = "ho-request";
    static const char *const ids[] = {"a", "b", "c"};
    cand *a = cand_new("a"), *b = cand_new("b"), *c = cand_new("c");
    cand_opts ko = {.handoff_candidate = 1};
    int64_t ea, eb, ec, e2, t_req, started_at;
    long status = 0;
    char *resp = NULL;
    lease_view v;
    follow *f;

    (void)state;
    f = follow_start(lease);
    cand_start(a, lease, &ko);
    ea = cand_elected(a);
    cand_start(b, lease, &ko);
    cand_start(c, lease, &ko);
    await_known(lease, ids, 3);

    /* Named. */
    t_req = e2e_mono_ms();
    assert_int_equal(k8slease_lease_handoff(client, ns, lease, "c"), 0);
    ec = cand_elected(c);
    cand_times(c, &started_at, NULL, NULL);
    print_message("  request to c: c led %" PRId64 " ms after the request\n", started_at - t_req);
    assert_int_equal(k8slease_elector_wait_lost(a->e, WAIT_MS), 0);
    assert_false(k8slease_elector_is_leader(a->e));
    assert_int_equal(ec, ea + 2);
    assert_record(lease, "a", "c", ea + 1);
    view(lease, &v);
    assert_false(v.has_request);
    no_overlap(c);
    cand_follows(b);
    keeps_leading(c, ec, lease);
    cand_stop(a); /* its election is over: its object is deleted */

    /* The best (the only candidate known but the leader: b). */
    assert_int_equal(k8slease_lease_handoff(client, ns, lease, NULL), 0);
    eb = cand_elected(b);
    assert_int_equal(k8slease_elector_wait_lost(c->e, WAIT_MS), 0);
    assert_int_equal(eb, ec + 2);
    assert_record(lease, "c", "b", ec + 1);
    no_overlap(b);
    keeps_leading(b, eb, lease);
    cand_stop(c);

    /* kubectl annotate lease NAME k8slease.io/handoff-request=a: a merge
     * patch of the annotation alone. */
    cand_start(a, lease, &ko);
    cand_follows(a);
    if (e2e_api("PATCH", lease_path(lease),
                "{\"metadata\":{\"annotations\":{\"" REQ_ANN "\":\"a\"}}}", &status, &resp) != 0 ||
        status != 200)
        fail_msg("PATCH %s: HTTP %ld: %s", lease_path(lease), status, resp ? resp : "");
    free(resp);
    e2 = cand_elected(a);
    assert_int_equal(e2, eb + 2);
    assert_record(lease, "b", "a", eb + 1);
    no_overlap(a);
    keeps_leading(a, e2, lease);

    cand_free(c);
    cand_free(b);
    cand_free(a);
    follow_end(f);
}

/* For ms, every read of the Lease shows holder with epoch: nothing was
 * written. */
static void unchanged(const char *lease, const char *holder, int64_t epoch, int ms, const char *why)
{
    int64_t until = e2e_mono_ms() + ms;
    lease_view v;

    do {
        view(lease, &v);
        if (strcmp(v.holder, holder) != 0 || v.transitions != epoch)
            fail_msg("lease %s: holder \"%s\" epoch %" PRId64 " (expected \"%s\" %" PRId64 "): %s",
                     lease, v.holder, v.transitions, holder, epoch, why);
        e2e_pause_ms(20);
    } while (e2e_mono_ms() < until);
}

typedef struct seed_waiter {
    const char *lease;
    int rc;
    pthread_t th;
} seed_waiter;

static void *seed_wait_lost_thread(void *arg)
{
    seed_waiter *w = arg;
    char *err = NULL;

    w->rc = K8sLeaseWaitLost((char *)ns, (char *)w->lease, &err);
    free(err);
    return NULL;
}

/* A program whose term an operator's request ends may campaign again at
 * once under the same identity (the seed ABI allows a new election as soon
 * as the term is over; a C++ program may construct its next elector before
 * the old one is destroyed). The Lease still names it, in the term being
 * handed over: the new election must wait for that handoff, not take the
 * Lease back before the write (the successor would never lead). Made
 * deterministic by holding the program's thread in wait_lost, which holds
 * the handoff write back (the library writes only once it has returned). */
static void same_identity_waits_for_its_handoff(void **state)
{
    const char *lease = "ho-same", *seed_lease = "ho-same-seed";
    cand *a = cand_new("a"), *a2 = cand_new("a"), *b = cand_new("b"), *sb = cand_new("b");
    lost_waiter w = {0};
    seed_waiter sw = {.lease = seed_lease};
    int64_t ea, eb;
    long long epoch = -1;
    char *err = NULL;

    (void)state;
    /* The native API. */
    cand_start(a, lease, NULL);
    ea = cand_elected(a);
    cand_start(b, lease, NULL);
    cand_follows(b);
    w.e = a->e;
    assert_int_equal(pthread_create(&w.th, NULL, wait_lost_thread, &w), 0);
    e2e_lost_await_waiting();
    assert_int_equal(k8slease_lease_handoff(client, ns, lease, "b"), 0);
    e2e_lost_await_held();
    cand_share(a2, a);
    cand_start(a2, lease, NULL); /* the program's next elector, the last not freed */
    unchanged(lease, "a", ea, 1000,
              "a new elector of a took the Lease its own handoff to b was about to write");
    e2e_lost_let_go();
    assert_int_equal(pthread_join(w.th, NULL), 0);
    eb = cand_elected(b);
    assert_int_equal(eb, ea + 2);
    assert_record(lease, "a", "b", ea + 1);
    no_overlap(b);
    cand_follows(a2);
    cand_free(a2);
    cand_free(b);
    cand_free(a);

    /* The seed ABI (Mooncake's loop): K8sLeaseRunElection again as soon
     * as K8sLeaseWaitLost has returned (here: while it is held). */
    if (K8sLeaseRunElection((char *)ns, (char *)seed_lease, "a", 3, 2, 1, &err) != 0 ||
        K8sLeaseWaitElected((char *)ns, (char *)seed_lease, WAIT_MS / 1000, &epoch, &err) != 0)
        fail_msg("seed ABI: %s", err);
    cand_start(sb, seed_lease, NULL);
    cand_follows(sb);
    assert_int_equal(pthread_create(&sw.th, NULL, seed_wait_lost_thread, &sw), 0);
    e2e_lost_await_waiting();
    assert_int_equal(k8slease_lease_handoff(client, ns, seed_lease, "b"), 0);
    e2e_lost_await_held();
    if (K8sLeaseRunElection((char *)ns, (char *)seed_lease, "a", 3, 2, 1, &err) != 0)
        fail_msg("seed ABI: a new election once the term is over: %s", err);
    unchanged(seed_lease, "a", epoch, 1000,
              "the seed ABI's new election took the Lease its handoff to b was about to write");
    e2e_lost_let_go();
    assert_int_equal(pthread_join(sw.th, NULL), 0);
    assert_int_equal(sw.rc, 0);
    eb = cand_elected(sb);
    assert_int_equal(eb, epoch + 2);
    assert_record(seed_lease, "a", "b", epoch + 1);
    no_overlap(sb);
    if (K8sLeaseCancelElection((char *)ns, (char *)seed_lease, &err) != 0)
        fail_msg("K8sLeaseCancelElection: %s", err);
    cand_free(sb);
}

/* A candidate's object exists while its election runs and is gone when
 * k8slease_elector_free (or a stop) returns; an elector without the option,
 * or with options of version 3 (before it), has none. With a Pod: owned by
 * it, its UID and revision label in the annotation. */
static void candidate_objects(void **state)
{
    const char *lease = "ho-objects";
    static const char *const ids[] = {"plain", "onpod"};
    cand *plain = cand_new("plain"), *onpod = cand_new("onpod"), *none = cand_new("none"),
         *v3 = cand_new("v3");
    cand_opts po = {.handoff_candidate = 1, .revision = "v7", .priority = 3},
              podo = {.handoff_candidate = 1, .pod = "ho-objects-p"},
              v3o = {.handoff_candidate = 1, .version = 3};
    json_t *obj = NULL, *info, *meta, *owners;
    char name[128], *uid;

    (void)state;
    create_pod("ho-objects-p", "rev-p");
    uid = pod_uid("ho-objects-p");
    cand_start(plain, lease, &po);
    cand_start(onpod, lease, &podo);
    cand_start(none, lease, NULL);
    cand_start(v3, lease, &v3o);
    /* Known (stats) means written: the objects exist from then on. */
    await_known_stat(plain, 1);
    await_known_stat(onpod, 1);
    assert_int_equal(known(lease, ids, 2, NULL, NULL), 2);
    assert_int_equal(cand_known_stat(none), 0);
    assert_int_equal(cand_known_stat(v3), 0);

    assert_int_equal(known(lease, ids, 2, "plain", &obj), 2);
    meta = json_object_get(obj, "metadata");
    snprintf(name, sizeof(name), "%s-c-%016" PRIx64, lease, fnv1a("plain"));
    assert_string_equal(json_string_value(json_object_get(meta, "name")), name);
    info = cand_info(obj);
    assert_string_equal(json_string_value(json_object_get(info, "lease")), lease);
    assert_string_equal(json_string_value(json_object_get(info, "revision")), "v7");
    assert_int_equal(json_integer_value(json_object_get(info, "priority")), 3);
    assert_true(json_is_false(json_object_get(info, "terminating")));
    assert_null(json_object_get(meta, "ownerReferences"));
    json_decref(info);
    json_decref(obj);

    assert_int_equal(known(lease, ids, 2, "onpod", &obj), 2);
    meta = json_object_get(obj, "metadata");
    info = cand_info(obj);
    assert_string_equal(json_string_value(json_object_get(info, "pod")), "ho-objects-p");
    assert_string_equal(json_string_value(json_object_get(info, "podUID")), uid);
    assert_string_equal(json_string_value(json_object_get(info, "revision")), "rev-p");
    /* Owned by its Pod. k8slease-testserver does not keep ownerReferences
     * (it has no garbage collector either): a real server only. */
    owners = json_object_get(meta, "ownerReferences");
    if (!e2e_is_testserver()) {
        assert_int_equal(json_array_size(owners), 1);
        assert_string_equal(json_string_value(json_object_get(json_array_get(owners, 0), "kind")),
                            "Pod");
        assert_string_equal(json_string_value(json_object_get(json_array_get(owners, 0), "uid")),
                            uid);
    }
    json_decref(info);
    json_decref(obj);
    free(uid);

    /* Only those two. */
    assert_int_equal(count_known(lease), 2);
    cand_free(none);
    cand_free(v3);
    assert_int_equal(count_known(lease), 2);
    cand_free(plain);
    assert_int_equal(count_known(lease), 1);
    assert_int_equal(known(lease, ids, 2, NULL, NULL), 1);
    /* A stop deletes it too, before it returns. */
    assert_int_equal(k8slease_elector_stop(onpod->e, 1), 0);
    assert_int_equal(count_known(lease), 0);
    assert_int_equal(cand_known_stat(onpod), 0);
    cand_free(onpod);
}

/* Callers built against older stats get what their version had; a newer
 * version is refused, naming the versions known. */
static void stats_versions(void **state)
{
    cand *c = cand_new("sv");
    cand_opts co = {.handoff_candidate = 1};
    k8slease_elector_stats st;

    (void)state;
    cand_start(c, "ho-stats", &co);
    await_known_stat(c, 1);
    memset(&st, 0x55, sizeof(st));
    st.version = 2;
    assert_int_equal(k8slease_elector_stats_get(c->e, &st), 0);
    assert_int_equal(st.version, 2);
    assert_true(st.gets > 0);
    assert_int_equal(st.candidate_known, 0x55555555); /* not in version 2 */
    memset(&st, 0x55, sizeof(st));
    st.version = 1;
    assert_int_equal(k8slease_elector_stats_get(c->e, &st), 0);
    assert_int_equal(st.version, 1);
    assert_int_equal(st.gets, 0x5555555555555555ULL); /* not in version 1 */
    st.version = K8SLEASE_ELECTOR_STATS_VERSION + 1;
    assert_int_equal(k8slease_elector_stats_get(c->e, &st), K8SLEASE_EINVAL);
    assert_non_null(strstr(k8slease_error_last(), "k8slease_elector_stats.version is 4, "
                                                  "expected 1 to 3"));
    cand_free(c);
}

/* A candidate that may not write its object (403) says so, and its stats
 * say -1: known to no choice, still a candidate (it leads when the Lease
 * is free). Test server only (the refusal is a fault). */
static void candidate_forbidden(void **state)
{
    const char *lease = "ho-forbidden";
    cand *a = cand_new("fa"), *b = cand_new("fb");
    cand_opts co = {.handoff_candidate = 1};
    char rule[512];

    long id;

    (void)state;
    e2e_need_testserver("the refusal is a fault rule");
    cand_start(a, lease, NULL);
    cand_elected(a);
    /* The Lease exists: b's only create is its candidate object. */
    snprintf(rule, sizeof(rule),
             "{\"kind\":\"error\",\"status\":403,\"count\":1,\"match\":{\"verb\":\"create\","
             "\"path_prefix\":\"/apis/coordination.k8s.io/v1/namespaces/%s/leases\"}}",
             ns);
    id = e2e_add_fault(rule);
    cand_start(b, lease, &co);
    await_known_stat(b, -1);
    e2e_wait_fault_retired(id, WAIT_MS);
    assert_int_equal(count_known(lease), 0);
    cand_free(a);
    cand_elected(b);
    cand_free(b);
}

/* A follower's handoff only stops it: the leader leads on, the Lease is
 * unchanged, no record; its object is gone. A second call, and a stop,
 * after it are no-ops. */
static void follower_only_stops(void **state)
{
    const char *lease = "ho-follower";
    static const char *const ids[] = {"a", "b", "c"};
    cand *a = cand_new("a"), *b = cand_new("b"), *c = cand_new("c");
    cand_opts ko = {.handoff_candidate = 1};
    int64_t ea;
    lease_view v;

    (void)state;
    cand_start(a, lease, &ko);
    ea = cand_elected(a);
    cand_start(b, lease, &ko);
    cand_start(c, lease, &ko);
    await_known(lease, ids, 3);
    assert_int_equal(k8slease_elector_handoff(b->e, NULL, 0), 0);
    assert_int_equal(k8slease_elector_handoff(c->e, "b", 0), 0);
    assert_int_equal(k8slease_elector_wait_lost(b->e, 0), 0);
    assert_int_equal(k8slease_elector_wait_elected(b->e, 0, NULL), K8SLEASE_ESTATE);
    assert_int_equal(k8slease_elector_wait_lost(c->e, 0), 0);
    assert_int_equal(k8slease_elector_handoff(b->e, "a", 0), 0);
    assert_int_equal(k8slease_elector_stop(b->e, 1), 0);
    assert_int_equal(known(lease, ids, 3, NULL, NULL), 1);
    assert_true(k8slease_elector_is_leader(a->e));
    view(lease, &v);
    assert_string_equal(v.holder, "a");
    assert_int_equal(v.transitions, ea);
    assert_int_equal(v.done_epoch, -1);
    keeps_leading(a, ea, lease);
    cand_free(c);
    cand_free(b);
    cand_free(a);
}

/* From a callback of the elector's client: K8SLEASE_ESTATE (it would wait
 * for its own loop). */
typedef struct in_callback {
    k8slease_elector *e;
    int rc, called;
} in_callback;

static void handoff_from_callback(const char *identity, int64_t epoch, void *ud)
{
    in_callback *cb = ud;

    (void)identity;
    (void)epoch;
    if (__atomic_fetch_add(&cb->called, 1, __ATOMIC_ACQ_REL) == 0)
        cb->rc = k8slease_elector_handoff(cb->e, NULL, 0);
}

/* Bad input is refused, naming what was wrong; the term goes on. */
static void bad_input(void **state)
{
    const char *lease = "ho-bad";
    cand *a = cand_new("a");
    char longid[600];
    in_callback cb = {0};
    k8slease_watch *w = NULL;
    k8slease_client_options eo = K8SLEASE_CLIENT_OPTIONS_INIT;
    k8slease_elector_options o = K8SLEASE_ELECTOR_OPTIONS_INIT;
    k8slease_client *etcd = NULL;
    k8slease_elector *ee = NULL;
    char endpoint[64];

    (void)state;
    assert_int_equal(k8slease_elector_handoff(NULL, NULL, 0), K8SLEASE_EINVAL);
    assert_non_null(strstr(k8slease_error_last(), "NULL"));

    cand_start(a, lease, NULL);
    cand_elected(a);
    assert_int_equal(k8slease_elector_handoff(a->e, "", 0), K8SLEASE_EINVAL);
    assert_non_null(strstr(k8slease_error_last(), "to: identity must not be empty"));
    memset(longid, 'x', sizeof(longid) - 1);
    longid[sizeof(longid) - 1] = '\0';
    assert_int_equal(k8slease_elector_handoff(a->e, longid, 0), K8SLEASE_EINVAL);
    assert_non_null(strstr(k8slease_error_last(), "to: identity longer than"));

    /* From a callback of its client (a watch's first report). */
    cb.e = a->e;
    assert_int_equal(k8slease_watch_start(&w, a->client, ns, lease, handoff_from_callback, &cb), 0);
    for (int64_t until = e2e_mono_ms() + WAIT_MS; !__atomic_load_n(&cb.called, __ATOMIC_ACQUIRE);
         e2e_pause_ms(5))
        if (e2e_mono_ms() > until)
            fail_msg("no watch callback within %d ms", WAIT_MS);
    k8slease_watch_free(w);
    assert_int_equal(cb.rc, K8SLEASE_ESTATE);
    assert_true(k8slease_elector_is_leader(a->e));

    /* The operator's request: names checked, the Lease must exist. */
    assert_int_equal(k8slease_lease_handoff(NULL, ns, lease, NULL), K8SLEASE_EINVAL);
    assert_int_equal(k8slease_lease_handoff(client, ns, NULL, NULL), K8SLEASE_EINVAL);
    assert_int_equal(k8slease_lease_handoff(client, ns, "Bad_Name", NULL), K8SLEASE_EINVAL);
    assert_non_null(strstr(k8slease_error_last(), "Bad_Name"));
    assert_int_equal(k8slease_lease_handoff(client, "Bad_NS", lease, NULL), K8SLEASE_EINVAL);
    assert_non_null(strstr(k8slease_error_last(), "Bad_NS"));
    assert_int_equal(k8slease_lease_handoff(client, ns, lease, ""), K8SLEASE_EINVAL);
    assert_non_null(strstr(k8slease_error_last(), "to: identity must not be empty"));
    assert_int_equal(k8slease_lease_handoff(client, ns, "ho-no-such-lease", NULL),
                     K8SLEASE_ENOTFOUND);
    assert_true(k8slease_elector_is_leader(a->e));
    cand_free(a);

    /* etcd has no handoff: an elector and a client of that backend (on a
     * loopback port nothing listens on; both refuse before any I/O). */
    snprintf(endpoint, sizeof(endpoint), "http://127.0.0.1:%d", kl_test_closed_port());
    eo.backend = K8SLEASE_BACKEND_ETCD;
    eo.etcd_endpoints = endpoint;
    assert_int_equal(k8slease_client_new(&etcd, &eo), 0);
    o.name = "ho-etcd";
    o.identity = "x";
    o.lease_duration_ms = LD_MS;
    o.renew_deadline_ms = RD_MS;
    o.retry_period_ms = RP_MS;
    assert_int_equal(k8slease_elector_start(&ee, etcd, &o), 0);
    assert_int_equal(k8slease_elector_handoff(ee, NULL, 0), K8SLEASE_EINVAL);
    assert_non_null(strstr(k8slease_error_last(), "Kubernetes"));
    assert_int_equal(k8slease_lease_handoff(etcd, NULL, "ho-etcd", NULL), K8SLEASE_EINVAL);
    assert_non_null(strstr(k8slease_error_last(), "Kubernetes"));
    k8slease_elector_free(ee);
    k8slease_client_free(etcd);
}

/* A mixed fleet on one Lease: k8slease candidates known to the choice, a
 * poll_only one (client-go's rules: no watch, a poll every retry period
 * plus up to 1.2 of it), one unknown to the choice (like the Go library or
 * an old k8slease). Handoffs with the default bound, by call and by the
 * operator's request (which a polling leader sees on its next renewal's
 * conflict): the successor leads every time, never two leaders at once,
 * the epochs grow. */
static void mixed_fleet(void **state)
{
    const char *lease = "ho-mixed";
    static const char *const known_ids[] = {"k", "p"};
    cand *k = cand_new("k"), *p = cand_new("p"), *u = cand_new("u");
    cand_opts ko = {.handoff_candidate = 1},
              po = {.handoff_candidate = 1, .poll_only = 1, .priority = 1},
              uo = {.handoff_candidate = 0};
    int64_t ek, ep, eu, ek2;
    follow *f;

    (void)state;
    f = follow_start(lease);
    cand_start(k, lease, &ko);
    ek = cand_elected(k);
    cand_start(p, lease, &po);
    cand_start(u, lease, &uo);
    await_known(lease, known_ids, 2);

    /* The best known: p, which polls. */
    ep = hand_over(lease, k, ek, NULL, p, 0); /* the default bound */
    cand_follows(u);
    cand_stop(k);
    cand_start(k, lease, &ko);

    /* The polling leader is asked to hand over to u. */
    assert_int_equal(k8slease_lease_handoff(client, ns, lease, "u"), 0);
    eu = cand_elected(u);
    assert_int_equal(eu, ep + 2);
    assert_record(lease, "p", "u", ep + 1);
    no_overlap(u);
    cand_follows(k);
    cand_stop(p);
    cand_start(p, lease, &po);
    await_known(lease, known_ids, 2);

    /* u (unknown to the choice itself) hands over to the best: p
     * (priority 1) again. */
    ep = hand_over(lease, u, eu, NULL, p, 0);
    cand_follows(k);
    cand_stop(u);
    cand_start(u, lease, &uo);

    /* And p, named, to k. */
    ek2 = hand_over(lease, p, ep, "k", k, 0);
    assert_true(ek2 > ek);
    cand_follows(u);
    keeps_leading(k, ek2, lease);
    cand_free(u);
    cand_free(p);
    cand_free(k);
    follow_end(f);
}

int main(void)
{
#define T(f) cmocka_unit_test_teardown(f, cleanup)
    /* clang-format off */
    const struct CMUnitTest tests[] = {
        T(bad_input),
        T(named_successor),
        T(best_candidate),
        T(pod_candidate_stays_known),
        T(no_candidate_releases),
        T(successor_never_takes),
        T(request_annotation),
        T(same_identity_waits_for_its_handoff),
        T(candidate_objects),
        T(stats_versions),
        T(candidate_forbidden),
        T(follower_only_stops),
        T(mixed_fleet),
    };
    /* clang-format on */
#undef T
    const char *only = getenv("K8SLEASE_TEST_FILTER");

    if (only && only[0])
        cmocka_set_test_filter(only);
    return cmocka_run_group_tests(tests, setup, teardown);
}
