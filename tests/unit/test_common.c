/* Errors, allocation, buffers, name checks. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "core/client.h"
#include "core/clock.h"
#include "core/driver.h"
#include "core/elector.h"
#include "k8s/api.h"
#include "core/common.h"

static void error_set_and_wrap(void **state)
{
    (void)state;
    assert_int_equal(kl__error_set(K8SLEASE_ECONFIG, "file %s: field %s", "a", "b"),
                     K8SLEASE_ECONFIG);
    assert_string_equal(k8slease_error_last(), "file a: field b");
    assert_int_equal(kl__error_wrap(K8SLEASE_ECONFIG, "loading %d", 1), K8SLEASE_ECONFIG);
    assert_string_equal(k8slease_error_last(), "loading 1: file a: field b");
    kl__error_clear();
    kl__error_wrap(K8SLEASE_EINVAL, "alone");
    assert_string_equal(k8slease_error_last(), "alone");
}

static void long_messages_truncate(void **state)
{
    char big[4000];

    (void)state;
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    kl__error_set(K8SLEASE_EINVAL, "%s", big);
    assert_true(strlen(k8slease_error_last()) < sizeof(big));
    kl__error_wrap(K8SLEASE_EINVAL, "%s", big);
    assert_true(strlen(k8slease_error_last()) > 0);
}

static void strerror_names_every_code(void **state)
{
    (void)state;
    for (int c = K8SLEASE_OK; c >= K8SLEASE_ESERVER; c--)
        assert_string_not_equal(k8slease_strerror(c), "K8SLEASE_E?");
    assert_string_equal(k8slease_strerror(K8SLEASE_ECONFLICT), "K8SLEASE_ECONFLICT");
    assert_string_equal(k8slease_strerror(-99), "K8SLEASE_E?");
    assert_string_equal(k8slease_version(), K8SLEASE_VERSION_STRING);
}

static void failing_allocator(void **state)
{
    void *a, *b;

    (void)state;
    kl__alloc_fail_after(1);
    a = kl__malloc(10);
    b = kl__malloc(10);
    kl__alloc_fail_after(-1);
    assert_non_null(a);
    assert_null(b);
    kl__free(a);
    a = kl__malloc(10);
    assert_non_null(a);
    kl__free(a);
}

/* Another thread: allocate, report whether it worked; with arm >= 0, arm
 * its own countdown first. */
typedef struct other_alloc {
    long arm;
    int got;
} other_alloc;

static void *allocate_elsewhere(void *arg)
{
    other_alloc *o = arg;
    void *p;

    if (o->arm >= 0)
        kl__alloc_fail_after(o->arm);
    p = kl__malloc(10);
    o->got = p != NULL;
    kl__free(p);
    return NULL;
}

static void run_elsewhere(other_alloc *o)
{
    pthread_t t;

    assert_int_equal(pthread_create(&t, NULL, allocate_elsewhere, o), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
}

/* The countdown is the arming thread's: another thread's allocations
 * neither count nor fail (the loop thread of a client, another client's),
 * so a run fails the same allocation whatever they do; a thread armed
 * from there fails its own; the next arming, from any thread, ends it. */
static void failing_allocator_per_thread(void **state)
{
    other_alloc free_running = {-1, 0}, armed = {0, 0};
    void *a;

    (void)state;
    kl__alloc_fail_after(1);
    run_elsewhere(&free_running);
    assert_true(free_running.got); /* neither counted nor failed */
    a = kl__malloc(10);
    assert_non_null(a); /* the first of this thread's */
    kl__free(a);
    assert_null(kl__malloc(10));
    assert_true(kl__alloc_failed());
    run_elsewhere(&free_running);
    assert_true(free_running.got); /* this thread's failures are its own */
    run_elsewhere(&armed);         /* arms itself: 0 left, and disarms this one */
    assert_false(armed.got);
    a = kl__malloc(10);
    assert_non_null(a);
    kl__free(a);
    kl__alloc_fail_after(-1);
    assert_false(kl__alloc_failed());
}

static void buffers_grow(void **state)
{
    kl__buf b = {0};

    (void)state;
    for (int i = 0; i < 1000; i++)
        assert_int_equal(kl__buf_printf(&b, "%d,", i), 0);
    assert_int_equal(strncmp(b.data, "0,1,2,", 6), 0);
    assert_int_equal(b.len, strlen(b.data));
    assert_int_equal(kl__buf_append(&b, "", 0), 0);
    kl__buf_free(&b);
    assert_null(b.data);

    kl__alloc_fail_after(0);
    assert_int_equal(kl__buf_append(&b, "x", 1), K8SLEASE_ENOMEM);
    kl__alloc_fail_after(-1);
    assert_null(b.data);
}

static void name_checks(void **state)
{
    static const char *good[] = {"a", "lease-1", "my.lease.example", "0abc"};
    static const char *bad[] = {"", "Upper", "-lead", "trail-", "a..b", "a_b", "a/b", ".a"};

    (void)state;
    for (size_t i = 0; i < KL_ARRAY_LEN(good); i++)
        assert_int_equal(kl__check_name("lease name", good[i]), 0);
    for (size_t i = 0; i < KL_ARRAY_LEN(bad); i++) {
        assert_int_equal(kl__check_name("lease name", bad[i]), K8SLEASE_EINVAL);
        assert_non_null(strstr(k8slease_error_last(), "lease name"));
    }
    assert_int_equal(kl__check_name("lease name", NULL), K8SLEASE_EINVAL);
    assert_int_equal(kl__check_namespace("default"), 0);
    assert_int_equal(kl__check_namespace("kube.system"), K8SLEASE_EINVAL);
    assert_non_null(strstr(k8slease_error_last(), "namespace \"kube.system\""));
}

static void utf8_validation(void **state)
{
    static const struct {
        const char *s;
        int valid;
    } cases[] = {
        {"", 1},
        {"host-a:9000", 1},
        {"h\xc3\xa9te", 1},      /* é */
        {"\xe2\x82\xac", 1},     /* € */
        {"\xf0\x9f\x98\x80", 1}, /* U+1F600 */
        {"\xf4\x8f\xbf\xbf", 1}, /* U+10FFFF */
        {"bad\xff\xfe:1", 0},    /* bytes never in UTF-8 */
        {"\xc0\xaf", 0},         /* overlong '/' */
        {"\xe0\x80\xaf", 0},     /* overlong, 3 bytes */
        {"\xed\xa0\x80", 0},     /* surrogate U+D800 */
        {"\xf4\x90\x80\x80", 0}, /* above U+10FFFF */
        {"\xc3", 0},             /* truncated */
        {"\xe2\x82", 0},         /* truncated */
        {"\x80", 0},             /* lone continuation */
        {"a\xc3(", 0},           /* continuation expected */
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (kl__utf8_valid(cases[i].s, strlen(cases[i].s)) != cases[i].valid)
            fail_msg("case %zu: \"%s\": expected %s", i, cases[i].s,
                     cases[i].valid ? "valid" : "invalid");
    }
}

static void capture_log(k8slease_log_level level, const char *msg, void *user_data)
{
    (void)level;
    snprintf(user_data, 256, "%s", msg);
}

static void log_escapes_control_characters(void **state)
{
    char got[256] = "";
    kl__log log = {capture_log, got, K8SLEASE_LOG_DEBUG};

    (void)state;
    /* A holder identity from the server with a line break and an ANSI
     * escape must not forge a second log line or colour a terminal. */
    kl__log_printf(&log, K8SLEASE_LOG_INFO, "leader is \"%s\"", "evil\nERROR forged\x1b[31m\x7f");
    assert_string_equal(got, "leader is \"evil\\x0aERROR forged\\x1b[31m\\x7f\"");
    kl__log_printf(&log, K8SLEASE_LOG_INFO, "plain h\xc3\xa9te");
    assert_string_equal(got, "plain h\xc3\xa9te"); /* UTF-8 passes through */
}

/* The elector head keeps its description and end reason in strings of
 * their size; out of memory, the start fails and a lost reason says so. */
static void elector_head_strings(void **state)
{
    k8slease_elector_options opts = K8SLEASE_ELECTOR_OPTIONS_INIT;
    k8slease_elector e;

    (void)state;
    memset(&e, 0, sizeof(e));
    kl__alloc_fail_after(0);
    assert_int_equal(kl__elector_head_init(&e, NULL, NULL, &opts, "lease %s/%s", "ns", "x"),
                     K8SLEASE_ENOMEM);
    kl__alloc_fail_after(-1);
    assert_string_equal(k8slease_error_last(), "out of memory");
    kl__elector_head_destroy(&e);

    memset(&e, 0, sizeof(e));
    assert_int_equal(kl__elector_head_init(&e, NULL, NULL, &opts, "lease %s/%s", "ns", "x"), 0);
    assert_string_equal(e.what, "lease ns/x");
    assert_null(e.end_reason);
    kl__alloc_fail_after(0);
    kl__elector_report_error(&e, "forbidden");
    kl__alloc_fail_after(-1);
    assert_string_equal(e.end_reason, "out of memory keeping the reason");
    kl__elector_report_error(&e, "forbidden");
    assert_string_equal(e.end_reason, "forbidden");
    kl__elector_report_error(&e, "gone"); /* the last one is kept, the first freed */
    assert_string_equal(e.end_reason, "gone");
    kl__elector_head_destroy(&e); /* frees both (LeakSanitizer in the sanitizer build) */
}

/* pthread_*_init failing (a resource limit): wrapped in this program
 * (-Wl,--wrap, tests/unit/CMakeLists.txt); the next call of the one named
 * fails with EAGAIN (ENOMEM for the attribute, as POSIX says). */
static const char *fail_next_init;

int __real_pthread_mutex_init(pthread_mutex_t *m, const pthread_mutexattr_t *a);
int __real_pthread_cond_init(pthread_cond_t *c, const pthread_condattr_t *a);
int __real_pthread_condattr_init(pthread_condattr_t *a);
int __real_pthread_condattr_setclock(pthread_condattr_t *a, clockid_t clock);
int __wrap_pthread_mutex_init(pthread_mutex_t *m, const pthread_mutexattr_t *a);
int __wrap_pthread_cond_init(pthread_cond_t *c, const pthread_condattr_t *a);
int __wrap_pthread_condattr_init(pthread_condattr_t *a);
int __wrap_pthread_condattr_setclock(pthread_condattr_t *a, clockid_t clock);

static int init_fails(const char *which)
{
    if (!fail_next_init || strcmp(fail_next_init, which) != 0)
        return 0;
    fail_next_init = NULL;
    return 1;
}

int __wrap_pthread_mutex_init(pthread_mutex_t *m, const pthread_mutexattr_t *a)
{
    return init_fails("pthread_mutex_init") ? EAGAIN : __real_pthread_mutex_init(m, a);
}

int __wrap_pthread_cond_init(pthread_cond_t *c, const pthread_condattr_t *a)
{
    return init_fails("pthread_cond_init") ? EAGAIN : __real_pthread_cond_init(c, a);
}

int __wrap_pthread_condattr_init(pthread_condattr_t *a)
{
    return init_fails("pthread_condattr_init") ? ENOMEM : __real_pthread_condattr_init(a);
}

int __wrap_pthread_condattr_setclock(pthread_condattr_t *a, clockid_t clock)
{
    return init_fails("pthread_condattr_setclock") ? EINVAL
                                                   : __real_pthread_condattr_setclock(a, clock);
}

/* An elector's head whose mutex, condition or condition attribute cannot
 * be set up fails with a message naming the call (a condition on another
 * clock would time the waits on the wall clock), and its destroy touches
 * only what was set up. */
static void elector_head_sync_failures(void **state)
{
    static const char *const calls[] = {"pthread_mutex_init", "pthread_condattr_init",
                                        "pthread_condattr_setclock", "pthread_cond_init"};
    k8slease_elector_options opts = K8SLEASE_ELECTOR_OPTIONS_INIT;
    k8slease_elector e;

    (void)state;
    for (size_t i = 0; i < KL_ARRAY_LEN(calls); i++) {
        memset(&e, 0, sizeof(e));
        fail_next_init = calls[i];
        if (kl__elector_head_init(&e, NULL, NULL, &opts, "lease %s/%s", "ns", "x") !=
            K8SLEASE_ENOMEM)
            fail_msg("%s failing: the head was set up (%s)", calls[i], k8slease_error_last());
        assert_null(fail_next_init); /* it was called */
        if (!strstr(k8slease_error_last(), calls[i]))
            fail_msg("%s failing: \"%s\"", calls[i], k8slease_error_last());
        kl__elector_head_destroy(&e);
    }
}

/* The line of a lost term (core/driver.h), as the backend's driver calls
 * it, at the CLI's default level (warn): why, in the backend's words. */
static char lost_line[2048];

static void keep_lost_line(k8slease_log_level level, const char *msg, void *ud)
{
    (void)ud;
    if (level == K8SLEASE_LOG_WARN)
        snprintf(lost_line, sizeof(lost_line), "%s", msg);
}

static const kl__elector_backend words = {
    .renewal = "renewal", .deadline = "renew deadline", .deleted = "the Lease was deleted"};

/* A term of epoch 3 (epoch < 0: none) ended for the reason why; the warn
 * line it made ("" when none). */
static const char *term_end(void (*before)(k8slease_elector *), kl__term_end why,
                            const char *holder, int64_t epoch_seen, int64_t epoch)
{
    k8slease_elector_options opts = K8SLEASE_ELECTOR_OPTIONS_INIT;
    k8slease_client c;
    k8slease_elector e;

    memset(&c, 0, sizeof(c));
    memset(&e, 0, sizeof(e));
    c.log.cb = keep_lost_line;
    c.log.level = K8SLEASE_LOG_WARN;
    lost_line[0] = '\0';
    assert_int_equal(kl__elector_head_init(&e, &c, &words, &opts, "lease %s/%s", "ns", "x"), 0);
    e.about.subject = "ns/x";
    e.term_deadline_ms = 10000;
    atomic_store(&e.epoch, epoch);
    if (before)
        before(&e);
    kl__elector_report_term_end(&e, why, holder, epoch_seen);
    assert_int_equal(e.stopped, 1);
    kl__elector_head_destroy(&e); /* the kept error too (LeakSanitizer) */
    return lost_line;
}

static void renewal_failed(k8slease_elector *e)
{
    kl__request_outcome o = {.kind = KL_REQUEST_UPDATE, .renewing = 1};

    o.error = "HTTP 500 InternalError: first";
    kl__elector_count_request(e, &o);
    o.error = "HTTP 503 ServiceUnavailable: etcd is down";
    kl__elector_count_request(e, &o);       /* the last one is said */
    assert_int_equal(e->stats.http_5xx, 0); /* no status given: not counted as one */
}

static void renewal_failed_and_waits(k8slease_elector *e)
{
    renewal_failed(e);
    kl__elector_renewal_sent(e, kl__clock_mono_ns() - 1500 * KL_NS_PER_MS);
}

static void renewal_waits(k8slease_elector *e)
{
    kl__elector_renewal_sent(e, kl__clock_mono_ns() - 1500 * KL_NS_PER_MS);
}

static void renewal_failed_then_ok(k8slease_elector *e)
{
    kl__request_outcome ok = {.kind = KL_REQUEST_UPDATE, .renewing = 1, .held = 1};

    renewal_failed(e);
    kl__elector_count_request(e, &ok);
}

static void lost_term_says_why(void **state)
{
    const char *l;

    (void)state;
    assert_string_equal(term_end(renewal_failed, KL_TERM_DEADLINE, NULL, 0, 3),
                        "lease ns/x: lost the lease (epoch 3): no successful renewal within the "
                        "renew deadline of 10 s (last renewal: HTTP 503 ServiceUnavailable: etcd "
                        "is down)");
    l = term_end(renewal_failed_and_waits, KL_TERM_DEADLINE, NULL, 0, 3);
    if (!strstr(l, "(last renewal: HTTP 503 ServiceUnavailable: etcd is down; another, sent ") ||
        !strstr(l, " ms before, has no answer)"))
        fail_msg("%s", l);
    l = term_end(renewal_waits, KL_TERM_DEADLINE, NULL, 0, 3);
    if (!strstr(l, "within the renew deadline of 10 s (a renewal sent ") ||
        !strstr(l, " ms before has no answer)"))
        fail_msg("%s", l);
    assert_string_equal(term_end(NULL, KL_TERM_DEADLINE, NULL, 0, 3),
                        "lease ns/x: lost the lease (epoch 3): no successful renewal within the "
                        "renew deadline of 10 s (no renewal attempted)");
    /* A success in between: the error is not the last renewal's. */
    assert_string_equal(term_end(renewal_failed_then_ok, KL_TERM_DEADLINE, NULL, 0, 3),
                        "lease ns/x: lost the lease (epoch 3): no successful renewal within the "
                        "renew deadline of 10 s (no renewal attempted)");
    assert_string_equal(term_end(NULL, KL_TERM_TAKEN, "b:1", 4, 3),
                        "lease ns/x: lost the lease (epoch 3): \"b:1\" holds it now (epoch 4)");
    assert_string_equal(term_end(NULL, KL_TERM_TAKEN, "", 3, 3),
                        "lease ns/x: lost the lease (epoch 3): it names no holder now (epoch 3): "
                        "released by another");
    assert_string_equal(term_end(NULL, KL_TERM_RETAKEN, "a:1", 4, 3),
                        "lease ns/x: lost the lease (epoch 3): a new term under our own identity "
                        "took it (epoch 4)");
    assert_string_equal(term_end(NULL, KL_TERM_DELETED, NULL, 0, 3),
                        "lease ns/x: lost the lease (epoch 3): the Lease was deleted");
    /* Stopped by its owner, or never led: nothing at warn level. */
    assert_string_equal(term_end(renewal_failed, KL_TERM_STOPPED, NULL, 0, 3), "");
    assert_string_equal(term_end(NULL, KL_TERM_DEADLINE, NULL, 0, -1), "");
}

/* The internal log sink gets each line's text (the public callback's),
 * and what it is about as data: subject, kind, the message after the
 * "WHAT: " prefix, a watch failure's error. */
typedef struct seen_line {
    int n;
    kl__log_event ev;
    char text[256], message[256], subject[64], error[256];
} seen_line;

static void keep_event(const kl__log_event *ev, void *user_data)
{
    seen_line *s = user_data;

    s->n++;
    s->ev = *ev;
    snprintf(s->text, sizeof(s->text), "%s", ev->text);
    snprintf(s->message, sizeof(s->message), "%s", ev->message);
    snprintf(s->subject, sizeof(s->subject), "%s", ev->subject ? ev->subject : "(none)");
    snprintf(s->error, sizeof(s->error), "%s", ev->error ? ev->error : "(none)");
}

static void keep_text(k8slease_log_level level, const char *msg, void *user_data)
{
    seen_line *s = user_data;

    (void)level;
    s->n++;
    snprintf(s->text, sizeof(s->text), "%s", msg);
}

static void log_events_carry_their_subject(void **state)
{
    seen_line s = {0};
    kl__log log = {NULL, &s, K8SLEASE_LOG_DEBUG, keep_event};
    kl__log_about lease = {"lease ns/a", "ns/a", KL_LOG_ELECTION, NULL};
    kl__log_about watch = {"watch of lease ns/a", "ns/a", KL_LOG_WATCH_FAILED, "HTTP 500"};
    kl__log_about no_subject = {"holder reads of lease ns/a", NULL, KL_LOG_ELECTION, NULL};

    (void)state;
    kl__log_at(&log, K8SLEASE_LOG_WARN, &lease, "bad \n%s", "thing");
    assert_int_equal(s.n, 1);
    assert_int_equal(s.ev.level, K8SLEASE_LOG_WARN);
    assert_int_equal(s.ev.kind, KL_LOG_ELECTION);
    assert_string_equal(s.subject, "ns/a");
    assert_string_equal(s.text, "lease ns/a: bad \\x0athing");
    assert_string_equal(s.message, "bad \\x0athing");
    assert_string_equal(s.error, "(none)");

    kl__log_at(&log, K8SLEASE_LOG_WARN, &watch, "%s; retrying", "HTTP 500");
    assert_int_equal(s.ev.kind, KL_LOG_WATCH_FAILED);
    assert_string_equal(s.text, "watch of lease ns/a: HTTP 500; retrying");
    assert_string_equal(s.error, "HTTP 500");
    watch.error = NULL; /* the message */
    kl__log_at(&log, K8SLEASE_LOG_WARN, &watch, "silent for %d ms", 3);
    assert_string_equal(s.error, "silent for 3 ms");

    kl__log_at(&log, K8SLEASE_LOG_INFO, &no_subject, "x");
    assert_int_equal(s.ev.kind, KL_LOG_OTHER);
    assert_string_equal(s.subject, "(none)");
    assert_string_equal(s.message, "holder reads of lease ns/a: x");
    kl__log_at(&log, K8SLEASE_LOG_INFO, NULL, "plain");
    assert_string_equal(s.text, "plain");
    assert_int_equal(s.ev.kind, KL_LOG_OTHER);

    /* A plain line is about nothing, whatever its text says. */
    kl__log_printf(&log, K8SLEASE_LOG_INFO, "lease ns/a: after");
    assert_int_equal(s.ev.kind, KL_LOG_OTHER);
    assert_string_equal(s.subject, "(none)");
    assert_int_equal(s.n, 6);

    /* Below the level: nothing. Without the sink: the public callback,
     * the same text. */
    log.level = K8SLEASE_LOG_WARN;
    kl__log_at(&log, K8SLEASE_LOG_INFO, &lease, "quiet");
    assert_int_equal(s.n, 6);
    log.event_cb = NULL;
    log.cb = keep_text;
    kl__log_at(&log, K8SLEASE_LOG_WARN, &lease, "loud");
    assert_int_equal(s.n, 7);
    assert_string_equal(s.text, "lease ns/a: loud");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(error_set_and_wrap),
        cmocka_unit_test(long_messages_truncate),
        cmocka_unit_test(log_events_carry_their_subject),
        cmocka_unit_test(strerror_names_every_code),
        cmocka_unit_test(failing_allocator),
        cmocka_unit_test(failing_allocator_per_thread),
        cmocka_unit_test(buffers_grow),
        cmocka_unit_test(name_checks),
        cmocka_unit_test(utf8_validation),
        cmocka_unit_test(log_escapes_control_characters),
        cmocka_unit_test(elector_head_strings),
        cmocka_unit_test(elector_head_sync_failures),
        cmocka_unit_test(lost_term_says_why),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
