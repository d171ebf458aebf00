/* The election state machine, one test per rule of src/k8s/election.h. Most tests are
 * tables of (event, now) -> (actions, state, timer); times are milliseconds
 * after T0 on the monotonic clock, and the wall clock is WALL0 + the same
 * milliseconds, so acquire/renew times in the expected actions read as the
 * millisecond at which the request was sent. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "core/common.h"
#include "k8s/election.h"
#include "k8s/informer.h"

#define MS       INT64_C(1000000)
#define T0       (INT64_C(1000) * 1000 * MS) /* any monotonic origin but 0 */
#define WALL0_US INT64_C(1700000000000000)
#define W(ms)    (WALL0_US + (ms)*1000) /* wall µs at T0 + ms */

/* config used unless a test says otherwise: client-go's defaults */
#define LD_MS 15000
#define RD_MS 10000
#define RP_MS 2000

/* special values of step.at_ms and step.timer_ms */
#define AT_TIMER INT64_MIN       /* deliver at kl__k8s_election_timer() */
#define ANY      INT64_MIN       /* do not check */
#define NO_TIMER INT64_MAX       /* kl__k8s_election_timer() == INT64_MAX */
#define JITTER   (INT64_MIN + 1) /* in [now + RP, now + 2.2 RP) */
/* timer in [ms, ms + RP/20): an attempt timed for an expiry (watch mode) */
#define EXPIRY(ms) (-1 - (ms))

static const kl__lease_spec other_valid = {"other", 15, W(-500), W(-500), 5};
static const kl__lease_spec other_renewed = {"other", 15, W(-500), W(9000), 5};
static const kl__lease_spec ancient = {"other", 15, 1, 1, 5}; /* renewTime in 1970 */
static const kl__lease_spec empty_holder = {"", 1, W(-500), W(-500), 7};
static const kl__lease_spec null_holder = {NULL, 0, 0, 0, 7};
static const kl__lease_spec zero_duration = {"other", 0, W(-500), W(-500), 5};
static const kl__lease_spec mine_before_restart = {"me", 15, W(-500), W(-500), 3};
static const kl__lease_spec mine_other_term = {"me", 15, W(-500), W(-500), 9};

/* What the server answers to our CREATE at 100 and our renews (times are
 * those the elector wrote; the server stores them as sent). */
static const kl__lease_spec created = {"me", 15, W(100), W(100), 0};
static const kl__lease_spec renewed_2200 = {"me", 15, W(100), W(2200), 0};
static const kl__lease_spec renewed_4300 = {"me", 15, W(100), W(4300), 0};
static const kl__lease_spec renewed_9000 = {"me", 15, W(100), W(9000), 0};
static const kl__lease_spec released = {"", 1, W(3000), W(3000), 0};

typedef struct step {
    kl__k8s_election_event_type type;
    int64_t at_ms;
    int status;
    const kl__lease_spec *spec;
    int release;
    const char *actions; /* expected, see format_actions() */
    kl__k8s_election_state state;
    int64_t timer_ms;
    const char *preferred; /* the event's spec.preferredHolder (coordinated) */
    int predecessor;       /* the event's mark: our identity, an earlier instance's term */
    const char *handoff;   /* STOP: hand the term over to this identity (bound 2 s) */
} step;

#define START(t)          KL_KE_EV_START, (t), 0, NULL, 0
#define TIMER(t)          KL_KE_EV_TIMER, (t), 0, NULL, 0
#define RESULT(t, st, sp) KL_KE_EV_RESULT, (t), (st), (sp), 0
#define STOP(t, rel)      KL_KE_EV_STOP, (t), 0, NULL, (rel)
#define OBSERVE(t, sp)    KL_KE_EV_OBSERVE, (t), 0, (sp), 0
#define DELETED(t)        KL_KE_EV_OBSERVE, (t), K8SLEASE_ENOTFOUND, NULL, 0
#define WATCH(t, healthy) KL_KE_EV_WATCH, (t), 0, NULL, (healthy) /* step.release carries it */
#define ENDED(t, sp)      KL_KE_EV_HOLDER_ENDED, (t), 0, (sp), 0
#define RENEW(t)          KL_KE_EV_RENEW, (t), 0, NULL, 0

static kl__k8s_election_config default_config(void)
{
    kl__k8s_election_config cfg = {"me", LD_MS * MS, RD_MS * MS, RP_MS * MS, 1, 42};

    return cfg;
}

static int64_t ms_of(int64_t ns)
{
    return (ns - T0) / MS;
}

static void format_spec(char *buf, size_t size, const kl__lease_spec *s)
{
    snprintf(buf, size, "(%s,%llds,a=%lld,r=%lld,t=%lld)", s->holder ? s->holder : "NULL",
             (long long)s->duration_s, (long long)((s->acquire_us - WALL0_US) / 1000),
             (long long)((s->renew_us - WALL0_US) / 1000), (long long)s->transitions);
}

/* Why a STOPPED says the term ended: nothing for a stop or an election
 * that never led, else "[deadline]", "[taken HOLDER,EPOCH]", "[retaken
 * EPOCH]", "[deleted]", "[preferred]". */
static void format_end(char *buf, size_t size, const kl__k8s_election_action *a)
{
    switch (a->end) {
    case KL_TERM_STOPPED:
        buf[0] = '\0';
        break;
    case KL_TERM_DEADLINE:
        snprintf(buf, size, "[deadline]");
        break;
    case KL_TERM_TAKEN:
        snprintf(buf, size, "[taken %s,%lld]", a->identity, (long long)a->epoch);
        break;
    case KL_TERM_RETAKEN:
        snprintf(buf, size, "[retaken %lld]", (long long)a->epoch);
        break;
    case KL_TERM_DELETED:
        snprintf(buf, size, "[deleted]");
        break;
    case KL_TERM_PREFERRED:
        snprintf(buf, size, "[preferred]");
        break;
    default:
        snprintf(buf, size, "[?]");
        break;
    }
}

/* "GET", "CREATE(me,15s,a=100,r=100,t=0)", "STARTED(0)", "NEW_LEADER(x,5)",
 * "STOPPED[deadline]", ... separated by spaces. */
static const char *format_actions(const kl__k8s_election_actions *out)
{
    static char buf[1024];
    static const char *const names[] = {"GET",     "CREATE",     "UPDATE", "STARTED",
                                        "STOPPED", "NEW_LEADER", "DONE"};
    size_t len = 0;

    buf[0] = '\0';
    for (int i = 0; i < out->n; i++) {
        const kl__k8s_election_action *a = &out->a[i];
        char detail[256] = "";

        if (a->type == KL_KE_ACT_CREATE || a->type == KL_KE_ACT_UPDATE)
            format_spec(detail, sizeof(detail), &a->spec);
        else if (a->type == KL_KE_ACT_STARTED)
            snprintf(detail, sizeof(detail), "(%lld)", (long long)a->epoch);
        else if (a->type == KL_KE_ACT_NEW_LEADER)
            snprintf(detail, sizeof(detail), "(%s,%lld)", a->identity, (long long)a->epoch);
        else if (a->type == KL_KE_ACT_STOPPED)
            format_end(detail, sizeof(detail), a);
        len += (size_t)snprintf(buf + len, sizeof(buf) - len, "%s%s%s", i ? " " : "",
                                names[a->type], detail);
    }
    return buf;
}

typedef struct run {
    kl__k8s_election e;
    kl__k8s_election_actions out;
    int stopped, done;
} run;

static const char *deliver_preferred; /* spec.preferredHolder of the next event */
static int deliver_predecessor;       /* and its predecessor mark */
static const char *deliver_handoff;   /* and the successor of a STOP */

static void deliver(run *r, kl__k8s_election_event_type type, int64_t now, int status,
                    const kl__lease_spec *spec, int release)
{
    kl__k8s_election_event ev = {type,
                                 status,
                                 spec,
                                 release,
                                 release,
                                 deliver_preferred,
                                 deliver_predecessor,
                                 deliver_handoff,
                                 2};

    kl__k8s_election_step(&r->e, &ev, now, WALL0_US + (now - T0) / 1000, &r->out);
    for (int i = 0; i < r->out.n; i++) {
        /* nothing may follow DONE, in the same step or later */
        assert_int_equal(r->done, 0);
        if (r->out.a[i].type == KL_KE_ACT_STOPPED)
            r->stopped++;
        if (r->out.a[i].type == KL_KE_ACT_DONE) {
            assert_int_equal(i, r->out.n - 1);
            r->done = 1;
        }
    }
    assert_true(r->stopped <= 1);
    if (r->done)
        assert_int_equal(r->stopped, 1);
}

static void run_init(run *r, const kl__k8s_election_config *cfg)
{
    memset(r, 0, sizeof(*r));
    assert_int_equal(kl__k8s_election_init(&r->e, cfg), 0);
}

static void run_steps(run *r, const step *steps, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const step *s = &steps[i];
        int64_t now = s->at_ms == AT_TIMER ? kl__k8s_election_timer(&r->e) : T0 + s->at_ms * MS;
        int64_t timer;
        const char *got;

        assert_true(now != INT64_MAX);
        deliver_preferred = s->preferred;
        deliver_predecessor = s->predecessor;
        deliver_handoff = s->handoff;
        deliver(r, s->type, now, s->status, s->spec, s->release);
        got = format_actions(&r->out);
        if (strcmp(got, s->actions) != 0)
            fail_msg("step %zu at %lld ms: actions \"%s\", expected \"%s\"", i,
                     (long long)ms_of(now), got, s->actions);
        if (r->e.state != s->state)
            fail_msg("step %zu: state %s, expected %s", i, kl__k8s_election_state_name(r->e.state),
                     kl__k8s_election_state_name(s->state));
        timer = kl__k8s_election_timer(&r->e);
        if (s->timer_ms == NO_TIMER) {
            if (timer != INT64_MAX)
                fail_msg("step %zu: timer at %lld ms, expected none", i, (long long)ms_of(timer));
        } else if (s->timer_ms == JITTER) {
            if (timer < now + RP_MS * MS || timer >= now + RP_MS * MS * 22 / 10)
                fail_msg("step %zu: retry %lld ms after now, expected [RP, 2.2 RP)", i,
                         (long long)((timer - now) / MS));
        } else if (s->timer_ms < 0 && s->timer_ms != ANY) {
            int64_t from = T0 + (-1 - s->timer_ms) * MS;

            if (timer < from || timer >= from + RP_MS * MS / 20)
                fail_msg("step %zu: timer at %lld ms, expected in [%lld, %lld) ms", i,
                         (long long)ms_of(timer), (long long)ms_of(from),
                         (long long)ms_of(from + RP_MS * MS / 20));
        } else if (s->timer_ms != ANY && timer != T0 + s->timer_ms * MS) {
            fail_msg("step %zu: timer at %lld ms, expected %lld ms", i, (long long)ms_of(timer),
                     (long long)s->timer_ms);
        }
    }
}

#define RUN(cfg, steps)                                                                            \
    do {                                                                                           \
        run r_;                                                                                    \
        run_init(&r_, &(cfg));                                                                     \
        run_steps(&r_, steps, KL_ARRAY_LEN(steps));                                                \
    } while (0)

/* Leader since 100 (CREATE sent at 100, answered at 200): deadline 10100,
 * first renew at 2200. */
#define LEAD_FROM_CREATE                                                                           \
    {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},                                                  \
        {RESULT(100, K8SLEASE_ENOTFOUND, NULL), "CREATE(me,15s,a=100,r=100,t=0)", KL_KE_ACQUIRING, \
         NO_TIMER},                                                                                \
    {                                                                                              \
        RESULT(200, 0, &created), "STARTED(0) NEW_LEADER(me,0)", KL_KE_LEADING, 2200               \
    }

/* ---- validation ---- */

static void expect_invalid(const kl__k8s_election_config *cfg, const char *message)
{
    kl__k8s_election e;

    assert_int_equal(kl__k8s_election_init(&e, cfg), K8SLEASE_EINVAL);
    assert_string_equal(kl__error_get(), message);
}

static void test_validate_identity_empty(void **state)
{
    kl__k8s_election_config cfg = default_config();

    (void)state;
    cfg.identity = "";
    expect_invalid(&cfg, "identity must not be empty");
    cfg.identity = NULL;
    expect_invalid(&cfg, "identity must not be empty");
}

static void test_validate_identity_too_long(void **state)
{
    kl__k8s_election_config cfg = default_config();
    char id[KL_IDENTITY_MAX + 1];
    kl__k8s_election e;

    (void)state;
    memset(id, 'x', sizeof(id));
    id[KL_IDENTITY_MAX - 1] = '\0'; /* 511 bytes: the longest accepted */
    cfg.identity = id;
    assert_int_equal(kl__k8s_election_init(&e, &cfg), 0);
    id[KL_IDENTITY_MAX - 1] = 'x';
    id[KL_IDENTITY_MAX] = '\0';
    expect_invalid(&cfg, "identity longer than 511 bytes");
}

static void test_validate_positive_durations(void **state)
{
    kl__k8s_election_config cfg = default_config();

    (void)state;
    cfg.retry_period_ns = 0;
    expect_invalid(&cfg, "retry_period (0 ms) must be greater than zero");
    cfg.retry_period_ns = -2 * MS;
    expect_invalid(&cfg, "retry_period (-2 ms) must be greater than zero");
    cfg = default_config();
    cfg.renew_deadline_ns = 0;
    expect_invalid(&cfg, "renew_deadline (0 ms) must be greater than zero");
    cfg = default_config();
    cfg.lease_duration_ns = -1;
    expect_invalid(&cfg, "lease_duration (-1 ns) must be greater than zero");
}

static void test_validate_lease_duration_above_renew_deadline(void **state)
{
    kl__k8s_election_config cfg = default_config();
    kl__k8s_election e;

    (void)state;
    cfg.lease_duration_ns = cfg.renew_deadline_ns = 5000 * MS;
    expect_invalid(&cfg, "lease_duration (5000 ms) must be greater than renew_deadline (5000 ms)");
    cfg.lease_duration_ns++;
    assert_int_equal(kl__k8s_election_init(&e, &cfg), 0);
}

static void test_validate_renew_deadline_above_jittered_retry(void **state)
{
    kl__k8s_election_config cfg = default_config();
    kl__k8s_election e;

    (void)state;
    cfg.retry_period_ns = 3000 * MS;
    cfg.renew_deadline_ns = 3000 * MS;
    expect_invalid(&cfg, "renew_deadline (3000 ms) must be greater than 1.2 * retry_period "
                         "(3000 ms)");
    cfg.renew_deadline_ns = 3600 * MS; /* exactly 1.2 * RP: rejected */
    expect_invalid(&cfg, "renew_deadline (3600 ms) must be greater than 1.2 * retry_period "
                         "(3000 ms)");
    cfg.renew_deadline_ns++;
    assert_int_equal(kl__k8s_election_init(&e, &cfg), 0);
    /* 1.2 * 7 ns = 8.4 ns: 8 is not enough, 9 is */
    cfg.lease_duration_ns = 100;
    cfg.retry_period_ns = 7;
    cfg.renew_deadline_ns = 8;
    expect_invalid(&cfg, "renew_deadline (8 ns) must be greater than 1.2 * retry_period (7 ns)");
    cfg.renew_deadline_ns = 9;
    assert_int_equal(kl__k8s_election_init(&e, &cfg), 0);
    /* 1.2 * RP does not fit in 64 bits */
    cfg.lease_duration_ns = INT64_MAX;
    cfg.renew_deadline_ns = INT64_MAX - 1;
    cfg.retry_period_ns = INT64_MAX / 6 * 5 + 1;
    assert_int_equal(kl__k8s_election_init(&e, &cfg), K8SLEASE_EINVAL);
}

/* ---- acquiring ---- */

static void test_start_gets_at_once(void **state)
{
    static const step steps[] = {
        {TIMER(0), "", KL_KE_IDLE, NO_TIMER},
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {START(1), "", KL_KE_ACQUIRING, NO_TIMER}, /* a second START changes nothing */
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

static void test_not_found_creates(void **state)
{
    static const step steps[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, K8SLEASE_ENOTFOUND, NULL), "CREATE(me,15s,a=100,r=100,t=0)", KL_KE_ACQUIRING,
         NO_TIMER},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

static void test_create_ok_leads(void **state)
{
    static const step steps[] = {LEAD_FROM_CREATE};
    kl__k8s_election_config cfg = default_config();
    run r;

    (void)state;
    run_init(&r, &cfg);
    run_steps(&r, steps, KL_ARRAY_LEN(steps));
    assert_int_equal(r.e.epoch, 0);
    assert_int_equal(kl__k8s_election_leader_deadline(&r.e), T0 + (100 + RD_MS) * MS);
    assert_true(kl__k8s_election_is_leader(&r.e, T0 + 200 * MS));
}

static void test_create_conflict_retries_with_jitter(void **state)
{
    static const step steps[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, K8SLEASE_ENOTFOUND, NULL), "CREATE(me,15s,a=100,r=100,t=0)", KL_KE_ACQUIRING,
         NO_TIMER},
        {RESULT(200, K8SLEASE_ECONFLICT, NULL), "", KL_KE_ACQUIRING, JITTER},
        {TIMER(AT_TIMER), "GET", KL_KE_ACQUIRING, NO_TIMER},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

static void test_held_by_other_waits(void **state)
{
    static const step steps[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, 0, &other_valid), "NEW_LEADER(other,5)", KL_KE_ACQUIRING, JITTER},
        {TIMER(AT_TIMER), "GET", KL_KE_ACQUIRING, NO_TIMER},
        /* the same holder again: no second NEW_LEADER */
        {RESULT(5000, 0, &other_valid), "", KL_KE_ACQUIRING, JITTER},
        {RESULT(5001, 0, &other_valid), "", KL_KE_ACQUIRING, ANY}, /* nothing asked: stale */
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

/* The expiry counts from when WE saw the record, by our monotonic clock: a
 * renewTime from 1970 (a skewed clock) does not make the lease expired. */
static void test_expiry_by_local_observed_time(void **state)
{
    static const step early[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, 0, &ancient), "NEW_LEADER(other,5)", KL_KE_ACQUIRING, JITTER},
        {TIMER(15000), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(15099, 0, &ancient), "", KL_KE_ACQUIRING, JITTER}, /* 1 ms short of 15 s */
    };
    static const step expired[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, 0, &ancient), "NEW_LEADER(other,5)", KL_KE_ACQUIRING, JITTER},
        {TIMER(15000), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(15100, 0, &ancient), "UPDATE(me,15s,a=15100,r=15100,t=6)", KL_KE_ACQUIRING,
         NO_TIMER},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, early);
    RUN(cfg, expired);
}

static void test_unchanged_record_keeps_observed_time(void **state)
{
    static const step steps[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, 0, &other_valid), "NEW_LEADER(other,5)", KL_KE_ACQUIRING, JITTER},
        {TIMER(8000), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(8100, 0, &other_valid), "", KL_KE_ACQUIRING, JITTER}, /* still seen at 100 */
        {TIMER(15000), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(15100, 0, &other_valid), "UPDATE(me,15s,a=15100,r=15100,t=6)", KL_KE_ACQUIRING,
         NO_TIMER},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

static void test_changed_record_restarts_observed_time(void **state)
{
    static const step steps[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, 0, &other_valid), "NEW_LEADER(other,5)", KL_KE_ACQUIRING, JITTER},
        {TIMER(9000), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(9100, 0, &other_renewed), "", KL_KE_ACQUIRING, JITTER}, /* a renew */
        {TIMER(24000), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(24099, 0, &other_renewed), "", KL_KE_ACQUIRING, JITTER}, /* 15 s from 9100 */
        {TIMER(30000), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(30000, 0, &other_renewed), "UPDATE(me,15s,a=30000,r=30000,t=6)", KL_KE_ACQUIRING,
         NO_TIMER},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

static void test_zero_duration_is_expired(void **state)
{
    static const step steps[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, 0, &zero_duration), "NEW_LEADER(other,5) UPDATE(me,15s,a=100,r=100,t=6)",
         KL_KE_ACQUIRING, NO_TIMER},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

static void test_empty_holder_acquires_at_once(void **state)
{
    static const step steps[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, 0, &empty_holder), "NEW_LEADER(,7) UPDATE(me,15s,a=100,r=100,t=8)",
         KL_KE_ACQUIRING, NO_TIMER},
    };
    static const step null_steps[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, 0, &null_holder), "NEW_LEADER(,7) UPDATE(me,15s,a=100,r=100,t=8)",
         KL_KE_ACQUIRING, NO_TIMER},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
    RUN(cfg, null_steps);
}

/* Restarted under the same identity: the lease still names us, but this
 * process never led; a new term (a new epoch) starts at once. */
static void test_own_identity_at_start_takes_new_term(void **state)
{
    static const kl__lease_spec taken = {"me", 15, W(100), W(100), 4};
    static const step steps[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, 0, &mine_before_restart), "NEW_LEADER(me,3) UPDATE(me,15s,a=100,r=100,t=4)",
         KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(200, 0, &taken), "STARTED(4) NEW_LEADER(me,4)", KL_KE_LEADING, 2200},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

/* Restarted in place with crash failover: the Lease names our identity,
 * but the driver marks the term as an earlier instance's (its record names
 * another container instance). Another holder's term: held until it
 * expires (the followers take it on the kubelet's report meanwhile), then
 * ours like any expired one. The same record unmarked is ours at once
 * (test_own_identity_at_start_takes_new_term). */
static void test_predecessor_held_until_expiry(void **state)
{
    static const step steps[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {WATCH(50, 1), "", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, 0, &mine_before_restart), "NEW_LEADER(me,3)", KL_KE_ACQUIRING, EXPIRY(15100),
         NULL, 1},
        {OBSERVE(2000, &mine_before_restart), "", KL_KE_ACQUIRING, EXPIRY(15100), NULL, 1},
        {TIMER(AT_TIMER), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(15200, 0, &mine_before_restart), "UPDATE(me,15s,a=15200,r=15200,t=4)",
         KL_KE_ACQUIRING, NO_TIMER, NULL, 1},
    };
    /* A follower took it meanwhile: a holder like any other. */
    static const step follower_took[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {WATCH(50, 1), "", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, 0, &mine_before_restart), "NEW_LEADER(me,3)", KL_KE_ACQUIRING, EXPIRY(15100),
         NULL, 1},
        {OBSERVE(1000, &other_valid), "NEW_LEADER(other,5)", KL_KE_ACQUIRING, EXPIRY(16000)},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
    RUN(cfg, follower_took);
}

static void test_update_conflict_not_leader(void **state)
{
    static const step steps[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, 0, &empty_holder), "NEW_LEADER(,7) UPDATE(me,15s,a=100,r=100,t=8)",
         KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(200, K8SLEASE_ECONFLICT, NULL), "", KL_KE_ACQUIRING, JITTER},
        {TIMER(AT_TIMER), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(10000, K8SLEASE_ETRANSPORT, NULL), "", KL_KE_ACQUIRING, JITTER},
    };
    kl__k8s_election_config cfg = default_config();
    run r;

    (void)state;
    run_init(&r, &cfg);
    run_steps(&r, steps, KL_ARRAY_LEN(steps));
    assert_false(kl__k8s_election_is_leader(&r.e, T0 + 200 * MS));
    assert_int_equal(r.e.epoch, -1);
}

/* A write answered after renew_deadline would start a term that is already
 * over: no STARTED; the next attempt finds our name and starts a fresh term. */
static void test_late_acquisition_not_leader(void **state)
{
    static const kl__lease_spec late = {"me", 15, W(100), W(100), 8};
    static const kl__lease_spec fresh = {"me", 15, W(20200), W(20200), 9};
    static const step steps[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, 0, &empty_holder), "NEW_LEADER(,7) UPDATE(me,15s,a=100,r=100,t=8)",
         KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(10100, 0, &late), "NEW_LEADER(me,8)", KL_KE_ACQUIRING, JITTER},
        {TIMER(20000), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(20200, 0, &late), "UPDATE(me,15s,a=20200,r=20200,t=9)", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(20300, 0, &fresh), "STARTED(9) NEW_LEADER(me,9)", KL_KE_LEADING, 22300},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

static void test_new_leader_on_every_change_of_holder(void **state)
{
    static const kl__lease_spec b = {"b", 15, W(0), W(0), 6};
    static const kl__lease_spec b_later = {"b", 15, W(0), W(3000), 6}; /* a renew: same holder */
    static const step steps[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, 0, &other_valid), "NEW_LEADER(other,5)", KL_KE_ACQUIRING, JITTER},
        {TIMER(5000), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(5100, 0, &b), "NEW_LEADER(b,6)", KL_KE_ACQUIRING, JITTER},
        {TIMER(10000), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(10100, 0, &b_later), "", KL_KE_ACQUIRING, JITTER},
        {TIMER(15000), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(15100, K8SLEASE_ETIMEOUT, NULL), "", KL_KE_ACQUIRING, JITTER},
        {TIMER(20000), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(20100, 0, &empty_holder), "NEW_LEADER(,7) UPDATE(me,15s,a=20100,r=20100,t=8)",
         KL_KE_ACQUIRING, NO_TIMER},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

/* ---- leading ---- */

static void test_fast_path_renew(void **state)
{
    static const step steps[] = {
        LEAD_FROM_CREATE,
        {TIMER(2199), "", KL_KE_LEADING, 2200}, /* early: ignored */
        {TIMER(2200), "UPDATE(me,15s,a=100,r=2200,t=0)", KL_KE_LEADING, 10100},
        {RESULT(2300, 0, &renewed_2200), "", KL_KE_LEADING, 4300},
        {TIMER(4300), "UPDATE(me,15s,a=100,r=4300,t=0)", KL_KE_LEADING, 12200},
        {RESULT(4400, 0, &renewed_4300), "", KL_KE_LEADING, 6400},
    };
    kl__k8s_election_config cfg = default_config();
    run r;

    (void)state;
    run_init(&r, &cfg);
    run_steps(&r, steps, KL_ARRAY_LEN(steps));
    assert_int_equal(kl__k8s_election_leader_deadline(&r.e), T0 + (4300 + RD_MS) * MS);
}

static void test_fast_path_error_falls_back_to_get(void **state)
{
    static const step steps[] = {
        LEAD_FROM_CREATE,
        {TIMER(2200), "UPDATE(me,15s,a=100,r=2200,t=0)", KL_KE_LEADING, 10100},
        {RESULT(2300, K8SLEASE_ECONFLICT, NULL), "GET", KL_KE_LEADING, 10100},
        {RESULT(2400, 0, &renewed_2200), "UPDATE(me,15s,a=100,r=2400,t=0)", KL_KE_LEADING, 10100},
        {RESULT(2500, 0, &renewed_2200), "", KL_KE_LEADING, 4500},
    };
    kl__k8s_election_config cfg = default_config();
    run r;

    (void)state;
    run_init(&r, &cfg);
    run_steps(&r, steps, KL_ARRAY_LEN(steps));
    /* the slow path's UPDATE was sent at 2400 */
    assert_int_equal(kl__k8s_election_leader_deadline(&r.e), T0 + (2400 + RD_MS) * MS);
}

/* A timeout (its connection abandoned) is tried again at once: the stalled
 * attempt spent the time already, and the renew deadline must hold a
 * second attempt on a new connection. */
static void test_timeout_while_leading_retries_at_once(void **state)
{
    static const step steps[] = {
        LEAD_FROM_CREATE,
        {TIMER(2200), "UPDATE(me,15s,a=100,r=2200,t=0)", KL_KE_LEADING, 10100},
        {RESULT(6200, K8SLEASE_ETIMEOUT, NULL), "GET", KL_KE_LEADING, 10100},
        {RESULT(9000, K8SLEASE_ETIMEOUT, NULL), "", KL_KE_LEADING, 9000},
        {TIMER(9000), "UPDATE(me,15s,a=100,r=9000,t=0)", KL_KE_LEADING, 10100},
        {RESULT(9050, 0, &renewed_9000), "", KL_KE_LEADING, 11050},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

static void test_slow_path_failure_retries_after_retry_period(void **state)
{
    static const step steps[] = {
        LEAD_FROM_CREATE,
        {TIMER(2200), "UPDATE(me,15s,a=100,r=2200,t=0)", KL_KE_LEADING, 10100},
        {RESULT(2300, K8SLEASE_ETRANSPORT, NULL), "GET", KL_KE_LEADING, 10100},
        {RESULT(2400, K8SLEASE_ESERVER, NULL), "", KL_KE_LEADING, 4400},
        {TIMER(4400), "UPDATE(me,15s,a=100,r=4400,t=0)", KL_KE_LEADING, 10100},
        {RESULT(4500, K8SLEASE_ETRANSPORT, NULL), "GET", KL_KE_LEADING, 10100},
        {RESULT(4600, 0, &renewed_2200), "UPDATE(me,15s,a=100,r=4600,t=0)", KL_KE_LEADING, 10100},
        {RESULT(4700, K8SLEASE_ECONFLICT, NULL), "", KL_KE_LEADING, 6700},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

/* Renewals keep failing: at the deadline (10100) we step down, exactly once,
 * and release since release_on_cancel is set. */
static void test_renew_failures_until_deadline(void **state)
{
    static const step steps[] = {
        LEAD_FROM_CREATE,
        {TIMER(2200), "UPDATE(me,15s,a=100,r=2200,t=0)", KL_KE_LEADING, 10100},
        {RESULT(2300, K8SLEASE_ETRANSPORT, NULL), "GET", KL_KE_LEADING, 10100},
        {RESULT(2400, K8SLEASE_ESERVER, NULL), "", KL_KE_LEADING, 4400},
        {TIMER(4400), "UPDATE(me,15s,a=100,r=4400,t=0)", KL_KE_LEADING, 10100},
        {RESULT(4500, K8SLEASE_ETRANSPORT, NULL), "GET", KL_KE_LEADING, 10100},
        {RESULT(4600, K8SLEASE_ESERVER, NULL), "", KL_KE_LEADING, 6600},
        {TIMER(6600), "UPDATE(me,15s,a=100,r=6600,t=0)", KL_KE_LEADING, 10100},
        {RESULT(6700, K8SLEASE_ETRANSPORT, NULL), "GET", KL_KE_LEADING, 10100},
        {RESULT(6800, K8SLEASE_ESERVER, NULL), "", KL_KE_LEADING, 8800},
        {TIMER(8800), "UPDATE(me,15s,a=100,r=8800,t=0)", KL_KE_LEADING, 10100},
        {RESULT(8900, K8SLEASE_ETRANSPORT, NULL), "GET", KL_KE_LEADING, 10100},
        {TIMER(AT_TIMER), "STOPPED[deadline]", KL_KE_RELEASING, 20100}, /* GET still in flight */
        {RESULT(10200, K8SLEASE_ETRANSPORT, NULL), "GET", KL_KE_RELEASING, 20100},
        {RESULT(10300, 0, &renewed_2200), "UPDATE(,1s,a=10300,r=10300,t=0)", KL_KE_RELEASING,
         20100},
        {RESULT(10400, 0, &released), "NEW_LEADER(,0) DONE", KL_KE_DONE, NO_TIMER},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

/* A refused or reset connection while leading: the slow path tries again
 * after RP/4 (500 ms here), not after RP: behind a load balancer the next
 * connection may reach a replica that answers. */
static void test_transport_failure_while_leading_retries_soon(void **state)
{
    static const step steps[] = {
        LEAD_FROM_CREATE,
        {TIMER(2200), "UPDATE(me,15s,a=100,r=2200,t=0)", KL_KE_LEADING, 10100},
        {RESULT(2210, K8SLEASE_ETRANSPORT, NULL), "GET", KL_KE_LEADING, 10100},
        {RESULT(2220, K8SLEASE_ETRANSPORT, NULL), "", KL_KE_LEADING, 2720},
        {TIMER(2720), "UPDATE(me,15s,a=100,r=2720,t=0)", KL_KE_LEADING, 10100},
        {RESULT(2730, 0, &renewed_2200), "", KL_KE_LEADING, 4730},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

static void test_deadline_without_release_on_cancel(void **state)
{
    static const step steps[] = {
        LEAD_FROM_CREATE,
        {TIMER(2200), "UPDATE(me,15s,a=100,r=2200,t=0)", KL_KE_LEADING, 10100},
        {TIMER(10100), "STOPPED[deadline]", KL_KE_RELEASING, 20100},
        {RESULT(10200, K8SLEASE_ETIMEOUT, NULL), "DONE", KL_KE_DONE, NO_TIMER},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    cfg.release_on_cancel = 0;
    RUN(cfg, steps);
}

static void test_is_leader_false_at_deadline_without_event(void **state)
{
    static const step steps[] = {LEAD_FROM_CREATE};
    kl__k8s_election_config cfg = default_config();
    run r;

    (void)state;
    run_init(&r, &cfg);
    run_steps(&r, steps, KL_ARRAY_LEN(steps));
    assert_true(kl__k8s_election_is_leader(&r.e, T0 + 10099 * MS));
    assert_true(kl__k8s_election_is_leader(&r.e, T0 + 10100 * MS - 1));
    assert_false(kl__k8s_election_is_leader(&r.e, T0 + 10100 * MS));
    assert_false(kl__k8s_election_is_leader(&r.e, T0 + 99999 * MS));
    assert_int_equal(r.e.state, KL_KE_LEADING); /* no event was delivered */
}

/* The deadline counts from when the successful request was SENT: an answer
 * that took 9.9 s leaves 0.1 s of leadership, not 10 s. */
static void test_deadline_from_request_start(void **state)
{
    static const step steps[] = {
        LEAD_FROM_CREATE,
        {TIMER(2200), "UPDATE(me,15s,a=100,r=2200,t=0)", KL_KE_LEADING, 10100},
        {RESULT(10000, 0, &renewed_2200), "", KL_KE_LEADING, 12000},
    };
    kl__k8s_election_config cfg = default_config();
    run r;

    (void)state;
    run_init(&r, &cfg);
    run_steps(&r, steps, KL_ARRAY_LEN(steps));
    assert_int_equal(kl__k8s_election_leader_deadline(&r.e), T0 + 12200 * MS);
    assert_false(kl__k8s_election_is_leader(&r.e, T0 + 12200 * MS));
}

/* A success that arrives at or after the deadline does not make us leader
 * again; the lease may now name us, so it is released. */
static void test_late_renew_after_deadline(void **state)
{
    static const step steps[] = {
        LEAD_FROM_CREATE,
        {TIMER(2200), "UPDATE(me,15s,a=100,r=2200,t=0)", KL_KE_LEADING, 10100},
        {RESULT(10100, 0, &renewed_2200), "STOPPED[deadline] GET", KL_KE_RELEASING, 20100},
        {RESULT(10200, 0, &renewed_2200), "UPDATE(,1s,a=10200,r=10200,t=0)", KL_KE_RELEASING,
         20100},
    };
    kl__k8s_election_config cfg = default_config();
    run r;

    (void)state;
    run_init(&r, &cfg);
    run_steps(&r, steps, KL_ARRAY_LEN(steps));
    assert_false(kl__k8s_election_is_leader(&r.e, T0 + 10100 * MS));
}

static void test_get_while_leading_shows_other_holder(void **state)
{
    static const kl__lease_spec taken = {"other", 15, W(2000), W(2000), 1};
    static const step steps[] = {
        LEAD_FROM_CREATE,
        {TIMER(2200), "UPDATE(me,15s,a=100,r=2200,t=0)", KL_KE_LEADING, 10100},
        {RESULT(2300, K8SLEASE_ECONFLICT, NULL), "GET", KL_KE_LEADING, 10100},
        {RESULT(2400, 0, &taken), "NEW_LEADER(other,1) STOPPED[taken other,1] DONE", KL_KE_DONE,
         NO_TIMER},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

/* Our identity but another term (the same identity running twice): our
 * epoch no longer fences, so this term is over too. */
static void test_get_while_leading_shows_other_term(void **state)
{
    static const step steps[] = {
        LEAD_FROM_CREATE,
        {TIMER(2200), "UPDATE(me,15s,a=100,r=2200,t=0)", KL_KE_LEADING, 10100},
        {RESULT(2300, K8SLEASE_ECONFLICT, NULL), "GET", KL_KE_LEADING, 10100},
        {RESULT(2400, 0, &mine_other_term), "NEW_LEADER(me,9) STOPPED[retaken 9] DONE", KL_KE_DONE,
         NO_TIMER},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

static void test_lease_deleted_while_leading(void **state)
{
    static const step steps[] = {
        LEAD_FROM_CREATE,
        {TIMER(2200), "UPDATE(me,15s,a=100,r=2200,t=0)", KL_KE_LEADING, 10100},
        {RESULT(2300, K8SLEASE_ENOTFOUND, NULL), "GET", KL_KE_LEADING, 10100},
        {RESULT(2400, K8SLEASE_ENOTFOUND, NULL), "STOPPED[deleted] DONE", KL_KE_DONE, NO_TIMER},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

/* ---- stopping ---- */

static void test_stop_while_leading_releases(void **state)
{
    static const step steps[] = {
        LEAD_FROM_CREATE,
        {STOP(3000, 1), "STOPPED GET", KL_KE_RELEASING, 13000},
        {RESULT(3100, 0, &created), "UPDATE(,1s,a=3100,r=3100,t=0)", KL_KE_RELEASING, 13000},
        {RESULT(3200, K8SLEASE_ECONFLICT, NULL), "GET", KL_KE_RELEASING, 13000},
        {RESULT(3300, 0, &renewed_2200), "UPDATE(,1s,a=3300,r=3300,t=0)", KL_KE_RELEASING, 13000},
        {RESULT(3400, 0, &released), "NEW_LEADER(,0) DONE", KL_KE_DONE, NO_TIMER},
    };
    kl__k8s_election_config cfg = default_config();
    run r;

    (void)state;
    run_init(&r, &cfg);
    run_steps(&r, steps, 4);
    assert_false(kl__k8s_election_is_leader(&r.e, T0 + 3000 * MS));
    run_init(&r, &cfg);
    run_steps(&r, steps, KL_ARRAY_LEN(steps));
}

/* By the time we read it the lease names somebody else: nothing to release. */
static void test_stop_release_finds_other_holder(void **state)
{
    static const step steps[] = {
        LEAD_FROM_CREATE,
        {STOP(3000, 1), "STOPPED GET", KL_KE_RELEASING, 13000},
        {RESULT(3100, 0, &other_valid), "NEW_LEADER(other,5) DONE", KL_KE_DONE, NO_TIMER},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

static void test_release_gives_up_at_renew_deadline(void **state)
{
    static const step steps[] = {
        LEAD_FROM_CREATE,
        {STOP(3000, 1), "STOPPED GET", KL_KE_RELEASING, 13000},
        {RESULT(3100, K8SLEASE_ETRANSPORT, NULL), "", KL_KE_RELEASING, 5100},
        {TIMER(5100), "GET", KL_KE_RELEASING, 13000},
        {RESULT(5200, 0, &created), "UPDATE(,1s,a=5200,r=5200,t=0)", KL_KE_RELEASING, 13000},
        {RESULT(5300, K8SLEASE_ESERVER, NULL), "", KL_KE_RELEASING, 7300},
        {TIMER(7300), "GET", KL_KE_RELEASING, 13000},
        {TIMER(12999), "", KL_KE_RELEASING, 13000},
        {TIMER(13000), "DONE", KL_KE_DONE, NO_TIMER},
        {RESULT(13100, 0, &created), "", KL_KE_DONE, NO_TIMER},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

static void test_stop_without_release(void **state)
{
    static const step steps[] = {
        LEAD_FROM_CREATE,
        {STOP(3000, 0), "STOPPED DONE", KL_KE_DONE, NO_TIMER},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

static void test_stop_idle(void **state)
{
    static const step steps[] = {
        {STOP(0, 1), "STOPPED DONE", KL_KE_DONE, NO_TIMER},
        {START(1), "", KL_KE_DONE, NO_TIMER},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

static void test_stop_twice_is_harmless(void **state)
{
    static const step steps[] = {
        LEAD_FROM_CREATE,
        {STOP(3000, 1), "STOPPED GET", KL_KE_RELEASING, 13000},
        {STOP(3001, 0), "", KL_KE_RELEASING, 13000},
        {STOP(3002, 1), "", KL_KE_RELEASING, 13000},
        {RESULT(3100, 0, &created), "UPDATE(,1s,a=3100,r=3100,t=0)", KL_KE_RELEASING, 13000},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

/* Stop while our CREATE is in flight: STOPPED at once, then wait for the
 * answer; it succeeded, so the lease names us and is released, and STARTED
 * is never reported. */
static void test_stop_waits_for_request_in_flight(void **state)
{
    static const step steps[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, K8SLEASE_ENOTFOUND, NULL), "CREATE(me,15s,a=100,r=100,t=0)", KL_KE_ACQUIRING,
         NO_TIMER},
        {STOP(150, 1), "STOPPED", KL_KE_RELEASING, 10150},
        {RESULT(200, 0, &created), "NEW_LEADER(me,0) GET", KL_KE_RELEASING, 10150},
        {RESULT(300, 0, &created), "UPDATE(,1s,a=300,r=300,t=0)", KL_KE_RELEASING, 10150},
        {RESULT(400, 0, &released), "NEW_LEADER(,0) DONE", KL_KE_DONE, NO_TIMER},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

static void test_stop_while_acquiring(void **state)
{
    /* waiting for the next attempt: nothing to wait for */
    static const step idle[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, 0, &other_valid), "NEW_LEADER(other,5)", KL_KE_ACQUIRING, JITTER},
        {STOP(200, 1), "STOPPED DONE", KL_KE_DONE, NO_TIMER},
    };
    /* a GET in flight never makes us holder, even if it shows our name */
    static const step get_in_flight[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {STOP(50, 1), "STOPPED", KL_KE_RELEASING, 10050},
        {RESULT(100, 0, &mine_before_restart), "NEW_LEADER(me,3) DONE", KL_KE_DONE, NO_TIMER},
    };
    /* the acquisition lost the race: nothing to release */
    static const step lost_race[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, 0, &empty_holder), "NEW_LEADER(,7) UPDATE(me,15s,a=100,r=100,t=8)",
         KL_KE_ACQUIRING, NO_TIMER},
        {STOP(150, 1), "STOPPED", KL_KE_RELEASING, 10150},
        {RESULT(200, K8SLEASE_ECONFLICT, NULL), "DONE", KL_KE_DONE, NO_TIMER},
    };
    /* an acquisition that succeeded, without release: just DONE */
    static const step no_release[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, K8SLEASE_ENOTFOUND, NULL), "CREATE(me,15s,a=100,r=100,t=0)", KL_KE_ACQUIRING,
         NO_TIMER},
        {STOP(150, 0), "STOPPED", KL_KE_RELEASING, 10150},
        {RESULT(200, 0, &created), "NEW_LEADER(me,0) DONE", KL_KE_DONE, NO_TIMER},
    };
    /* the answer never comes: give up at stop + renew_deadline */
    static const step no_answer[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {STOP(50, 1), "STOPPED", KL_KE_RELEASING, 10050},
        {TIMER(10050), "DONE", KL_KE_DONE, NO_TIMER},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, idle);
    RUN(cfg, get_in_flight);
    RUN(cfg, lost_race);
    RUN(cfg, no_release);
    RUN(cfg, no_answer);
}

/* A write that failed without a conflict may still have reached the server:
 * after a stop, check and release. */
static void test_stop_after_ambiguous_write_checks(void **state)
{
    static const step steps[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, K8SLEASE_ENOTFOUND, NULL), "CREATE(me,15s,a=100,r=100,t=0)", KL_KE_ACQUIRING,
         NO_TIMER},
        {STOP(150, 1), "STOPPED", KL_KE_RELEASING, 10150},
        {RESULT(200, K8SLEASE_ETRANSPORT, NULL), "GET", KL_KE_RELEASING, 10150},
        {RESULT(300, K8SLEASE_ENOTFOUND, NULL), "DONE", KL_KE_DONE, NO_TIMER},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

/* The release is for our term only. A later term under our identity (the
 * seed ABI starts a new election of the same process as soon as this
 * one's term is over, while this one still releases) is left alone: by
 * transitions, and by acquireTime when a recreated Lease starts again at
 * 0. The same for the term an ambiguous acquisition may have won. */
static void test_release_leaves_a_later_term_alone(void **state)
{
    static const kl__lease_spec next_term = {"me", 15, W(3050), W(3050), 1};
    static const kl__lease_spec recreated = {"me", 15, W(3050), W(3050), 0};
    static const kl__lease_spec created_later = {"me", 15, W(250), W(250), 0};
    static const step later_term[] = {
        LEAD_FROM_CREATE,
        {STOP(3000, 1), "STOPPED GET", KL_KE_RELEASING, 13000},
        {RESULT(3100, 0, &next_term), "NEW_LEADER(me,1) DONE", KL_KE_DONE, NO_TIMER},
    };
    static const step same_count_later_acquire[] = {
        LEAD_FROM_CREATE,
        {STOP(3000, 1), "STOPPED GET", KL_KE_RELEASING, 13000},
        {RESULT(3100, 0, &recreated), "DONE", KL_KE_DONE, NO_TIMER},
    };
    /* a conflict on the release: read again, and by then it is the next term */
    static const step raced[] = {
        LEAD_FROM_CREATE,
        {STOP(3000, 1), "STOPPED GET", KL_KE_RELEASING, 13000},
        {RESULT(3100, 0, &created), "UPDATE(,1s,a=3100,r=3100,t=0)", KL_KE_RELEASING, 13000},
        {RESULT(3200, K8SLEASE_ECONFLICT, NULL), "GET", KL_KE_RELEASING, 13000},
        {RESULT(3300, 0, &next_term), "NEW_LEADER(me,1) DONE", KL_KE_DONE, NO_TIMER},
    };
    static const step ambiguous_then_later[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, K8SLEASE_ENOTFOUND, NULL), "CREATE(me,15s,a=100,r=100,t=0)", KL_KE_ACQUIRING,
         NO_TIMER},
        {STOP(150, 1), "STOPPED", KL_KE_RELEASING, 10150},
        {RESULT(200, K8SLEASE_ETIMEOUT, NULL), "GET", KL_KE_RELEASING, 10150},
        {RESULT(300, 0, &created_later), "NEW_LEADER(me,0) DONE", KL_KE_DONE, NO_TIMER},
    };
    /* and the term it did win is released */
    static const step ambiguous_won[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, K8SLEASE_ENOTFOUND, NULL), "CREATE(me,15s,a=100,r=100,t=0)", KL_KE_ACQUIRING,
         NO_TIMER},
        {STOP(150, 1), "STOPPED", KL_KE_RELEASING, 10150},
        {RESULT(200, K8SLEASE_ETIMEOUT, NULL), "GET", KL_KE_RELEASING, 10150},
        {RESULT(300, 0, &created), "NEW_LEADER(me,0) UPDATE(,1s,a=300,r=300,t=0)", KL_KE_RELEASING,
         10150},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, later_term);
    RUN(cfg, same_count_later_acquire);
    RUN(cfg, raced);
    RUN(cfg, ambiguous_then_later);
    RUN(cfg, ambiguous_won);
}

/* STOPPED exactly once (run_steps checks "at most once" at every step and
 * "once" at DONE) on every way to the end. */
static void test_stopped_exactly_once(void **state)
{
    static const step never_led[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, K8SLEASE_ETRANSPORT, NULL), "", KL_KE_ACQUIRING, JITTER},
        {STOP(200, 1), "STOPPED DONE", KL_KE_DONE, NO_TIMER},
        {STOP(300, 1), "", KL_KE_DONE, NO_TIMER},
    };
    static const step deadline_then_stop[] = {
        LEAD_FROM_CREATE,
        {TIMER(2200), "UPDATE(me,15s,a=100,r=2200,t=0)", KL_KE_LEADING, 10100},
        {STOP(10100, 1), "STOPPED[deadline]", KL_KE_RELEASING, 20100}, /* passed first */
        {STOP(10200, 1), "", KL_KE_RELEASING, 20100},
        {RESULT(10300, K8SLEASE_ECONFLICT, NULL), "GET", KL_KE_RELEASING, 20100},
        {RESULT(10400, 0, &other_valid), "NEW_LEADER(other,5) DONE", KL_KE_DONE, NO_TIMER},
    };
    static const step lost_then_stop[] = {
        LEAD_FROM_CREATE,
        {TIMER(2200), "UPDATE(me,15s,a=100,r=2200,t=0)", KL_KE_LEADING, 10100},
        {RESULT(2300, K8SLEASE_ECONFLICT, NULL), "GET", KL_KE_LEADING, 10100},
        {RESULT(2400, 0, &other_valid), "NEW_LEADER(other,5) STOPPED[taken other,5] DONE",
         KL_KE_DONE, NO_TIMER},
        {STOP(2500, 1), "", KL_KE_DONE, NO_TIMER},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, never_led);
    RUN(cfg, deadline_then_stop);
    RUN(cfg, lost_then_stop);
}

static void test_events_after_done_do_nothing(void **state)
{
    static const step steps[] = {
        {STOP(0, 1), "STOPPED DONE", KL_KE_DONE, NO_TIMER},
        {START(1), "", KL_KE_DONE, NO_TIMER},
        {TIMER(2), "", KL_KE_DONE, NO_TIMER},
        {RESULT(3, 0, &other_valid), "", KL_KE_DONE, NO_TIMER},
        {RESULT(4, K8SLEASE_ENOTFOUND, NULL), "", KL_KE_DONE, NO_TIMER},
        {STOP(5, 0), "", KL_KE_DONE, NO_TIMER},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

/* The timer in every state (also checked step by step in the tables). */
static void test_timer_per_state(void **state)
{
    kl__k8s_election_config cfg = default_config();
    run r;

    (void)state;
    run_init(&r, &cfg);
    assert_true(kl__k8s_election_timer(&r.e) == INT64_MAX); /* IDLE */
    deliver(&r, KL_KE_EV_START, T0, 0, NULL, 0);
    assert_true(kl__k8s_election_timer(&r.e) == INT64_MAX); /* ACQUIRING, GET in flight */
    deliver(&r, KL_KE_EV_RESULT, T0 + 100 * MS, K8SLEASE_ETRANSPORT, NULL, 0);
    assert_int_equal(kl__k8s_election_timer(&r.e), r.e.next_attempt); /* ACQUIRING, waiting */
    deliver(&r, KL_KE_EV_TIMER, kl__k8s_election_timer(&r.e), 0, NULL, 0);
    deliver(&r, KL_KE_EV_RESULT, T0 + 5000 * MS, K8SLEASE_ENOTFOUND, NULL, 0);
    deliver(&r, KL_KE_EV_RESULT, T0 + 5100 * MS, 0, &created, 0);
    /* LEADING, idle: the next renew comes before the deadline */
    assert_int_equal(kl__k8s_election_timer(&r.e), T0 + 7100 * MS);
    deliver(&r, KL_KE_EV_TIMER, T0 + 7100 * MS, 0, NULL, 0);
    /* LEADING, renew in flight: the deadline (CREATE sent at 5000) */
    assert_int_equal(kl__k8s_election_timer(&r.e), T0 + 15000 * MS);
    deliver(&r, KL_KE_EV_RESULT, T0 + 14000 * MS, K8SLEASE_ETRANSPORT, NULL, 0);
    deliver(&r, KL_KE_EV_RESULT, T0 + 14100 * MS, K8SLEASE_ESERVER, NULL, 0);
    /* LEADING, idle: the deadline comes before the next retry */
    assert_int_equal(kl__k8s_election_timer(&r.e), T0 + 15000 * MS);
    deliver(&r, KL_KE_EV_TIMER, T0 + 15000 * MS, 0, NULL, 0);
    /* RELEASING, GET in flight: the release deadline */
    assert_int_equal(kl__k8s_election_timer(&r.e), T0 + 25000 * MS);
    deliver(&r, KL_KE_EV_RESULT, T0 + 15100 * MS, K8SLEASE_ETRANSPORT, NULL, 0);
    /* RELEASING, waiting: the retry */
    assert_int_equal(kl__k8s_election_timer(&r.e), T0 + 17100 * MS);
    deliver(&r, KL_KE_EV_TIMER, T0 + 25000 * MS, 0, NULL, 0);
    assert_int_equal(r.e.state, KL_KE_DONE);
    assert_true(kl__k8s_election_timer(&r.e) == INT64_MAX); /* DONE */
}

static int64_t next_retry_delay(kl__k8s_election *e, int64_t *now)
{
    kl__k8s_election_event ev = {KL_KE_EV_RESULT, K8SLEASE_ETRANSPORT, NULL, 0};
    kl__k8s_election_event timer = {KL_KE_EV_TIMER, 0, NULL, 0};
    kl__k8s_election_actions out;
    int64_t delay;

    kl__k8s_election_step(e, &ev, *now, 0, &out);
    delay = kl__k8s_election_timer(e) - *now;
    *now = kl__k8s_election_timer(e);
    kl__k8s_election_step(e, &timer, *now, 0, &out);
    assert_int_equal(out.n, 1);
    assert_int_equal(out.a[0].type, KL_KE_ACT_GET);
    return delay;
}

static void test_jitter_deterministic_and_bounded(void **state)
{
    kl__k8s_election_config cfg = default_config();
    kl__k8s_election a, b, c;
    kl__k8s_election_event start = {KL_KE_EV_START, 0, NULL, 0};
    kl__k8s_election_actions out;
    int64_t ta = T0, tb = T0, tc = T0, lo = INT64_MAX, hi = 0;
    int differ = 0;

    (void)state;
    assert_int_equal(kl__k8s_election_init(&a, &cfg), 0);
    assert_int_equal(kl__k8s_election_init(&b, &cfg), 0);
    cfg.seed++;
    assert_int_equal(kl__k8s_election_init(&c, &cfg), 0);
    kl__k8s_election_step(&a, &start, ta, 0, &out);
    kl__k8s_election_step(&b, &start, tb, 0, &out);
    kl__k8s_election_step(&c, &start, tc, 0, &out);
    for (int i = 0; i < 20000; i++) {
        int64_t d = next_retry_delay(&a, &ta);

        assert_int_equal(d, next_retry_delay(&b, &tb));
        differ += d != next_retry_delay(&c, &tc);
        assert_true(d >= RP_MS * MS && d < RP_MS * MS * 22 / 10);
        lo = d < lo ? d : lo;
        hi = d > hi ? d : hi;
    }
    assert_true(differ > 19000);
    /* the draws cover the range, not a corner of it */
    assert_true(lo < RP_MS * MS * 101 / 100);
    assert_true(hi > RP_MS * MS * 219 / 100);
}

static void test_spurious_events_ignored(void **state)
{
    static const step steps[] = {
        {RESULT(0, 0, &other_valid), "", KL_KE_IDLE, NO_TIMER},
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {TIMER(50), "", KL_KE_ACQUIRING, NO_TIMER}, /* no timer armed */
        {RESULT(100, 0, &other_valid), "NEW_LEADER(other,5)", KL_KE_ACQUIRING, JITTER},
        {RESULT(150, 0, &empty_holder), "", KL_KE_ACQUIRING, ANY}, /* nothing asked */
        {TIMER(200), "", KL_KE_ACQUIRING, ANY},                    /* too early */
        /* a result "ok" without a body is treated as an error */
        {TIMER(AT_TIMER), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(5000, 0, NULL), "", KL_KE_ACQUIRING, JITTER},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

/* A huge leaseDurationSeconds from the server saturates instead of wrapping
 * to "expired". */
static void test_huge_duration_does_not_overflow(void **state)
{
    static const kl__lease_spec forever = {"other", INT64_MAX / 2, W(0), W(0), 5};
    static const step steps[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, 0, &forever), "NEW_LEADER(other,5)", KL_KE_ACQUIRING, JITTER},
        {TIMER(INT64_C(3600) * 24 * 365 * 1000), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(INT64_C(3600) * 24 * 366 * 1000, 0, &forever), "", KL_KE_ACQUIRING, JITTER},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

/* The Lease holds whole seconds, rounded up. */
static void test_lease_duration_rounded_up(void **state)
{
    static const step steps[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, K8SLEASE_ENOTFOUND, NULL), "CREATE(me,3s,a=100,r=100,t=0)", KL_KE_ACQUIRING,
         NO_TIMER},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    cfg.lease_duration_ns = 2001 * MS;
    cfg.renew_deadline_ns = 2000 * MS;
    cfg.retry_period_ns = 1000 * MS;
    RUN(cfg, steps);
}

/* A holder longer than the buffer is compared in full, not by its prefix. */
static void test_long_holder_compared_in_full(void **state)
{
    static char h1[1000], h2[1000];
    kl__lease_spec s1 = {h1, 15, W(0), W(0), 5}, s2 = {h2, 15, W(0), W(0), 5};
    kl__k8s_election_config cfg = default_config();
    run r;

    (void)state;
    memset(h1, 'h', sizeof(h1) - 1);
    memcpy(h2, h1, sizeof(h2));
    h2[sizeof(h2) - 2] = 'x'; /* differs after the stored prefix */
    run_init(&r, &cfg);
    deliver(&r, KL_KE_EV_START, T0, 0, NULL, 0);
    deliver(&r, KL_KE_EV_RESULT, T0 + 100 * MS, 0, &s1, 0);
    assert_int_equal(r.out.n, 1);
    assert_int_equal(r.out.a[0].type, KL_KE_ACT_NEW_LEADER);
    assert_int_equal(strlen(r.out.a[0].identity), KL_IDENTITY_MAX - 1);
    deliver(&r, KL_KE_EV_TIMER, kl__k8s_election_timer(&r.e), 0, NULL, 0);
    deliver(&r, KL_KE_EV_RESULT, T0 + 14000 * MS, 0, &s2, 0);
    assert_int_equal(r.out.n, 1);
    assert_int_equal(r.out.a[0].type, KL_KE_ACT_NEW_LEADER);
    assert_int_equal(r.e.observed_time, T0 + 14000 * MS);
}

/* ---- watch mode ---- */

/* Every change reaches a healthy watch: the candidate waits for the expiry
 * of what it saw (observed_time + duration, plus [0, RP/20) of jitter)
 * instead of polling, and a renewal seen on the watch restarts the wait. */
static void test_watch_healthy_waits_for_expiry(void **state)
{
    static const step steps[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {WATCH(50, 1), "", KL_KE_ACQUIRING, NO_TIMER}, /* GET in flight: nothing to move */
        {RESULT(100, 0, &other_valid), "NEW_LEADER(other,5)", KL_KE_ACQUIRING, EXPIRY(15100)},
        {OBSERVE(2000, &other_renewed), "", KL_KE_ACQUIRING, EXPIRY(17000)},
        {TIMER(16999), "", KL_KE_ACQUIRING, EXPIRY(17000)},
        {TIMER(AT_TIMER), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(17200, 0, &other_renewed), "UPDATE(me,15s,a=17200,r=17200,t=6)", KL_KE_ACQUIRING,
         NO_TIMER},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

static void test_watch_unhealthy_polls(void **state)
{
    static const step steps[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {WATCH(50, 1), "", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, 0, &other_valid), "NEW_LEADER(other,5)", KL_KE_ACQUIRING, EXPIRY(15100)},
        {WATCH(1000, 0), "", KL_KE_ACQUIRING, JITTER},
        {WATCH(1001, 0), "", KL_KE_ACQUIRING, ANY}, /* no change: nothing */
        {WATCH(1500, 1), "", KL_KE_ACQUIRING, EXPIRY(15100)},
        {WATCH(1600, 0), "", KL_KE_ACQUIRING, JITTER},
        {TIMER(AT_TIMER), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(5000, 0, &other_valid), "", KL_KE_ACQUIRING, JITTER},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

/* Unhealthy: an observation updates the record but never moves the poll
 * already planned (the leader's renewals would postpone it for ever). */
static void test_observe_while_unhealthy_keeps_poll(void **state)
{
    kl__k8s_election_config cfg = default_config();
    int64_t planned;
    run r;

    (void)state;
    run_init(&r, &cfg);
    deliver(&r, KL_KE_EV_START, T0, 0, NULL, 0);
    deliver(&r, KL_KE_EV_RESULT, T0 + 100 * MS, 0, &other_valid, 0);
    planned = kl__k8s_election_timer(&r.e);
    deliver(&r, KL_KE_EV_OBSERVE, T0 + 1000 * MS, 0, &other_renewed, 0);
    assert_int_equal(r.out.n, 0);
    assert_int_equal(kl__k8s_election_timer(&r.e), planned);
    assert_int_equal(r.e.observed_time, T0 + 1000 * MS);
    assert_int_equal(r.e.renew_us, other_renewed.renew_us);
}

/* A release (holder "") or a deletion seen on the watch is acted on at
 * once, healthy or not; so is an expired record or our own name. */
static void test_observe_release_acquires_at_once(void **state)
{
    static const step released_[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, 0, &other_valid), "NEW_LEADER(other,5)", KL_KE_ACQUIRING, JITTER},
        {OBSERVE(500, &empty_holder), "NEW_LEADER(,7) UPDATE(me,15s,a=500,r=500,t=8)",
         KL_KE_ACQUIRING, NO_TIMER},
    };
    static const step released_healthy[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, 0, &other_valid), "NEW_LEADER(other,5)", KL_KE_ACQUIRING, JITTER},
        {WATCH(200, 1), "", KL_KE_ACQUIRING, EXPIRY(15100)},
        {OBSERVE(500, &null_holder), "NEW_LEADER(,7) UPDATE(me,15s,a=500,r=500,t=8)",
         KL_KE_ACQUIRING, NO_TIMER},
    };
    static const step deleted[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, 0, &other_valid), "NEW_LEADER(other,5)", KL_KE_ACQUIRING, JITTER},
        {WATCH(200, 1), "", KL_KE_ACQUIRING, EXPIRY(15100)},
        {DELETED(500), "CREATE(me,15s,a=500,r=500,t=0)", KL_KE_ACQUIRING, NO_TIMER},
    };
    static const step expired[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, 0, &other_valid), "NEW_LEADER(other,5)", KL_KE_ACQUIRING, JITTER},
        {OBSERVE(500, &zero_duration), "UPDATE(me,15s,a=500,r=500,t=6)", KL_KE_ACQUIRING, NO_TIMER},
    };
    static const step mine[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, 0, &other_valid), "NEW_LEADER(other,5)", KL_KE_ACQUIRING, JITTER},
        {OBSERVE(500, &mine_before_restart), "NEW_LEADER(me,3) UPDATE(me,15s,a=500,r=500,t=4)",
         KL_KE_ACQUIRING, NO_TIMER},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, released_);
    RUN(cfg, released_healthy);
    RUN(cfg, deleted);
    RUN(cfg, expired);
    RUN(cfg, mine);
}

/* With a request in flight its result decides: an observation only
 * updates the record. */
static void test_observe_with_request_in_flight(void **state)
{
    static const step get_in_flight[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {OBSERVE(50, &empty_holder), "NEW_LEADER(,7)", KL_KE_ACQUIRING, NO_TIMER},
        {DELETED(60), "", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, 0, &empty_holder), "UPDATE(me,15s,a=100,r=100,t=8)", KL_KE_ACQUIRING,
         NO_TIMER},
    };
    static const step update_in_flight[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, 0, &empty_holder), "NEW_LEADER(,7) UPDATE(me,15s,a=100,r=100,t=8)",
         KL_KE_ACQUIRING, NO_TIMER},
        {OBSERVE(150, &other_valid), "NEW_LEADER(other,5)", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(200, K8SLEASE_ECONFLICT, NULL), "", KL_KE_ACQUIRING, JITTER},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, get_in_flight);
    RUN(cfg, update_in_flight);
}

/* A conflict with a healthy watch: the record we tried to take was free, so
 * poll until the watch shows the winner; then wait for its expiry. */
static void test_watch_after_conflict(void **state)
{
    static const kl__lease_spec b = {"b", 15, W(250), W(250), 8};
    static const step steps[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {WATCH(50, 1), "", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, 0, &empty_holder), "NEW_LEADER(,7) UPDATE(me,15s,a=100,r=100,t=8)",
         KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(200, K8SLEASE_ECONFLICT, NULL), "", KL_KE_ACQUIRING, JITTER},
        {OBSERVE(300, &b), "NEW_LEADER(b,8)", KL_KE_ACQUIRING, EXPIRY(15300)},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

static void test_observe_while_leading(void **state)
{
    /* our own record (a renewal's event): nothing */
    static const step own[] = {
        LEAD_FROM_CREATE,
        {OBSERVE(1000, &created), "", KL_KE_LEADING, 2200},
        {WATCH(1100, 0), "", KL_KE_LEADING, 2200},
        {WATCH(1200, 1), "", KL_KE_LEADING, 2200},
    };
    static const step other[] = {
        LEAD_FROM_CREATE,
        {OBSERVE(1000, &other_valid), "NEW_LEADER(other,5) STOPPED[taken other,5] DONE", KL_KE_DONE,
         NO_TIMER},
    };
    /* renew in flight: step down at once, end once it is answered */
    static const step other_in_flight[] = {
        LEAD_FROM_CREATE,
        {TIMER(2200), "UPDATE(me,15s,a=100,r=2200,t=0)", KL_KE_LEADING, 10100},
        {OBSERVE(2250, &other_valid), "NEW_LEADER(other,5) STOPPED[taken other,5]", KL_KE_RELEASING,
         12250},
        {RESULT(2300, K8SLEASE_ECONFLICT, NULL), "DONE", KL_KE_DONE, NO_TIMER},
    };
    static const step deleted[] = {
        LEAD_FROM_CREATE,
        {DELETED(1000), "STOPPED[deleted] DONE", KL_KE_DONE, NO_TIMER},
    };
    static const step other_term[] = {
        LEAD_FROM_CREATE,
        {OBSERVE(1000, &mine_other_term), "NEW_LEADER(me,9) STOPPED[retaken 9] DONE", KL_KE_DONE,
         NO_TIMER},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, own);
    RUN(cfg, other);
    RUN(cfg, other_in_flight);
    RUN(cfg, deleted);
    RUN(cfg, other_term);
}

/* ---- crash failover ---- */

static const kl__lease_spec other_term_4 = {"other", 15, W(-500), W(-500), 4};
static const kl__lease_spec someone_else = {"else", 15, W(-500), W(-500), 5};
static const kl__lease_spec took_at_1000 = {"me", 15, W(1000), W(1000), 6};

/* The kubelet reported the holder's container terminated: its term is
 * expired at once, and only that term. */
static void test_holder_ended_takes_at_once(void **state)
{
    static const step waiting[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {WATCH(50, 1), "", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, 0, &other_valid), "NEW_LEADER(other,5)", KL_KE_ACQUIRING, EXPIRY(15100)},
        /* another term, another holder: nothing */
        {ENDED(500, &other_term_4), "", KL_KE_ACQUIRING, EXPIRY(15100)},
        {ENDED(600, &someone_else), "", KL_KE_ACQUIRING, EXPIRY(15100)},
        {ENDED(1000, &other_valid), "UPDATE(me,15s,a=1000,r=1000,t=6)", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(1100, 0, &took_at_1000), "STARTED(6) NEW_LEADER(me,6)", KL_KE_LEADING, 3100},
    };
    /* Reported before this candidate saw the term: taken when seen, also
     * when the dead holder's last renewal is what is seen. */
    static const step before_seen[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {ENDED(50, &other_valid), "", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, 0, &other_valid), "NEW_LEADER(other,5) UPDATE(me,15s,a=100,r=100,t=6)",
         KL_KE_ACQUIRING, NO_TIMER},
    };
    /* The dead holder's last renewal lands first: a conflict, read again
     * at once (not after a retry period), take it. */
    static const step raced[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, 0, &other_valid), "NEW_LEADER(other,5)", KL_KE_ACQUIRING, JITTER},
        {ENDED(1000, &other_valid), "UPDATE(me,15s,a=1000,r=1000,t=6)", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(1050, K8SLEASE_ECONFLICT, NULL), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(1100, 0, &other_renewed), "UPDATE(me,15s,a=1100,r=1100,t=6)", KL_KE_ACQUIRING,
         NO_TIMER},
    };
    /* A new term of the same holder (its container restarted in place and
     * took the Lease again) is not the one reported. */
    static const step new_term_of_holder[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {ENDED(50, &other_term_4), "", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, 0, &other_valid), "NEW_LEADER(other,5)", KL_KE_ACQUIRING, JITTER},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, waiting);
    RUN(cfg, before_seen);
    RUN(cfg, raced);
    RUN(cfg, new_term_of_holder);
}

/* A leader ignores reports (about its own term: the process is alive); a
 * coordinated candidate ignores them (the controller picks the holder); a
 * request in flight is waited for, and its result decides. */
static void test_holder_ended_ignored_or_waits(void **state)
{
    static const step leading[] = {
        LEAD_FROM_CREATE,
        {ENDED(1000, &created), "", KL_KE_LEADING, 2200},
    };
    static const step in_flight[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {ENDED(50, &other_valid), "", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, 0, &other_valid), "NEW_LEADER(other,5) UPDATE(me,15s,a=100,r=100,t=6)",
         KL_KE_ACQUIRING, NO_TIMER},
    };
    static const step coordinated[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, 0, &other_valid), "NEW_LEADER(other,5)", KL_KE_ACQUIRING, JITTER},
        {ENDED(1000, &other_valid), "", KL_KE_ACQUIRING, ANY},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, leading);
    RUN(cfg, in_flight);
    cfg.coordinated = 1;
    RUN(cfg, coordinated);
}

/* RENEW (the record of our instance became known): a renewal at once when
 * nothing is in flight; right after a write of our term that is in flight
 * (it was made without the record); nothing when the next write will carry
 * it anyway, or when there is no term. */
static void test_renew_now(void **state)
{
    static const step idle_leader[] = {
        LEAD_FROM_CREATE,
        {RENEW(1000), "UPDATE(me,15s,a=100,r=1000,t=0)", KL_KE_LEADING, 10100},
        {RESULT(1050, 0, &created), "", KL_KE_LEADING, 3050},
    };
    /* The CREATE that makes us leader is in flight: the term starts, and
     * the first renewal goes at once instead of a retry period later. */
    static const step while_creating[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(50, K8SLEASE_ENOTFOUND, NULL), "CREATE(me,15s,a=50,r=50,t=0)", KL_KE_ACQUIRING,
         NO_TIMER},
        {RENEW(70), "", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, 0, &created), "STARTED(0) NEW_LEADER(me,0)", KL_KE_LEADING, 100},
        {TIMER(100), "UPDATE(me,15s,a=100,r=100,t=0)", KL_KE_LEADING, 10050},
        {RESULT(150, 0, &created), "", KL_KE_LEADING, 2150},
    };
    /* A renewal in flight: the next one right after it. */
    static const step while_renewing[] = {
        LEAD_FROM_CREATE,
        {TIMER(2200), "UPDATE(me,15s,a=100,r=2200,t=0)", KL_KE_LEADING, 10100},
        {RENEW(2250), "", KL_KE_LEADING, 10100},
        {RESULT(2300, 0, &renewed_2200), "", KL_KE_LEADING, 2300},
        {TIMER(2300), "UPDATE(me,15s,a=100,r=2300,t=0)", KL_KE_LEADING, 12200},
        {RESULT(2350, 0, &renewed_2200), "", KL_KE_LEADING, 4350},
    };
    /* A GET in flight: the write after it carries the record; and a
     * candidate without a term has nothing to renew. */
    static const step while_reading[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RENEW(20), "", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(50, K8SLEASE_ENOTFOUND, NULL), "CREATE(me,15s,a=50,r=50,t=0)", KL_KE_ACQUIRING,
         NO_TIMER},
        {RESULT(100, 0, &created), "STARTED(0) NEW_LEADER(me,0)", KL_KE_LEADING, 2100},
    };
    static const step follower[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, 0, &other_valid), "NEW_LEADER(other,5)", KL_KE_ACQUIRING, JITTER},
        {RENEW(200), "", KL_KE_ACQUIRING, ANY},
    };
    /* A failed write forgets it: no term started. */
    static const step failed_create[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(50, K8SLEASE_ENOTFOUND, NULL), "CREATE(me,15s,a=50,r=50,t=0)", KL_KE_ACQUIRING,
         NO_TIMER},
        {RENEW(70), "", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, K8SLEASE_ECONFLICT, NULL), "", KL_KE_ACQUIRING, JITTER},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, idle_leader);
    RUN(cfg, while_creating);
    RUN(cfg, while_renewing);
    RUN(cfg, while_reading);
    RUN(cfg, follower);
    RUN(cfg, failed_create);
}

/* Handoff: a release that names the successor holder of a short new term
 * (transitions + 1); a conflict reads again; to ourselves it is a release. */
static void test_handoff(void **state)
{
    static const kl__lease_spec handed = {"succ", 2, W(3050), W(3050), 1};
    static const step steps[] = {
        LEAD_FROM_CREATE,
        {STOP(3000, 1), "STOPPED GET", KL_KE_RELEASING, 13000, NULL, 0, "succ"},
        {RESULT(3050, 0, &created), "UPDATE(succ,2s,a=3050,r=3050,t=1)", KL_KE_RELEASING, 13000},
        {RESULT(3100, 0, &handed), "NEW_LEADER(succ,1) DONE", KL_KE_DONE, NO_TIMER},
    };
    static const step conflict[] = {
        LEAD_FROM_CREATE,
        {STOP(3000, 1), "STOPPED GET", KL_KE_RELEASING, 13000, NULL, 0, "succ"},
        {RESULT(3050, 0, &created), "UPDATE(succ,2s,a=3050,r=3050,t=1)", KL_KE_RELEASING, 13000},
        {RESULT(3100, K8SLEASE_ECONFLICT, NULL), "GET", KL_KE_RELEASING, 13000},
        /* Someone else's term meanwhile: left alone. */
        {RESULT(3150, 0, &other_valid), "NEW_LEADER(other,5) DONE", KL_KE_DONE, NO_TIMER},
    };
    static const step to_self[] = {
        LEAD_FROM_CREATE,
        {STOP(3000, 1), "STOPPED GET", KL_KE_RELEASING, 13000, NULL, 0, "me"},
        {RESULT(3050, 0, &created), "UPDATE(,1s,a=3050,r=3050,t=0)", KL_KE_RELEASING, 13000},
    };
    /* Without release (a stop that keeps the Lease): nothing written. */
    static const step no_release[] = {
        LEAD_FROM_CREATE,
        {STOP(3000, 0), "STOPPED DONE", KL_KE_DONE, NO_TIMER, NULL, 0, "succ"},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
    RUN(cfg, conflict);
    RUN(cfg, to_self);
    RUN(cfg, no_release);
}

static void test_observe_while_releasing(void **state)
{
    static const step steps[] = {
        LEAD_FROM_CREATE,
        {STOP(3000, 1), "STOPPED GET", KL_KE_RELEASING, 13000},
        {OBSERVE(3050, &other_valid), "NEW_LEADER(other,5)", KL_KE_RELEASING, 13000},
        {DELETED(3060), "", KL_KE_RELEASING, 13000},
        {RESULT(3100, 0, &other_valid), "DONE", KL_KE_DONE, NO_TIMER},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

static void test_watch_events_ignored_when_idle_or_done(void **state)
{
    static const step steps[] = {
        {OBSERVE(0, &empty_holder), "", KL_KE_IDLE, NO_TIMER},
        {DELETED(1), "", KL_KE_IDLE, NO_TIMER},
        {WATCH(2, 1), "", KL_KE_IDLE, NO_TIMER},
        {STOP(3, 1), "STOPPED DONE", KL_KE_DONE, NO_TIMER},
        {OBSERVE(4, &empty_holder), "", KL_KE_DONE, NO_TIMER},
        {DELETED(5), "", KL_KE_DONE, NO_TIMER},
        {WATCH(6, 0), "", KL_KE_DONE, NO_TIMER},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

/* poll_only: client-go's behaviour, the watch events change nothing. */
static void test_poll_only_ignores_watch(void **state)
{
    static const kl__lease_spec taken_at_5000 = {"me", 15, W(5000), W(5000), 8};
    static const step steps[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {WATCH(50, 1), "", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, 0, &other_valid), "NEW_LEADER(other,5)", KL_KE_ACQUIRING, JITTER},
        {OBSERVE(500, &empty_holder), "", KL_KE_ACQUIRING, ANY},
        {DELETED(600), "", KL_KE_ACQUIRING, ANY},
        {TIMER(AT_TIMER), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(5000, 0, &empty_holder), "NEW_LEADER(,7) UPDATE(me,15s,a=5000,r=5000,t=8)",
         KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(5100, 0, &taken_at_5000), "STARTED(8) NEW_LEADER(me,8)", KL_KE_LEADING, 7100},
        {OBSERVE(5200, &other_valid), "", KL_KE_LEADING, 7100},
    };
    kl__k8s_election_config cfg = default_config();

    (void)state;
    cfg.poll_only = 1;
    RUN(cfg, steps);
}

/* The expiry jitter stays in [0, RP/20) and covers that range. */
static void test_expiry_jitter_bounded(void **state)
{
    kl__k8s_election_config cfg = default_config();
    int64_t lo = INT64_MAX, hi = INT64_MIN;

    (void)state;
    for (uint64_t seed = 0; seed < 2000; seed++) {
        run r;
        int64_t j;

        cfg.seed = seed;
        run_init(&r, &cfg);
        deliver(&r, KL_KE_EV_WATCH, T0, 0, NULL, 1);
        deliver(&r, KL_KE_EV_START, T0, 0, NULL, 0);
        deliver(&r, KL_KE_EV_RESULT, T0 + 100 * MS, 0, &other_valid, 0);
        j = kl__k8s_election_timer(&r.e) - (T0 + (100 + LD_MS) * MS);
        assert_true(j >= 0 && j < RP_MS * MS / 20);
        lo = j < lo ? j : lo;
        hi = j > hi ? j : hi;
    }
    assert_true(lo < RP_MS * MS / 20 / 50);
    assert_true(hi > RP_MS * MS / 20 * 49 / 50);
}

/* The driver's order of states (src/k8s/informer.h): decimal resourceVersions are
 * compared as numbers, anything else is taken as new. */
static void test_rv_gate(void **state)
{
    kl__rv_gate g = {0};

    (void)state;
    assert_true(kl__rv_gate_pass(&g, "100"));
    assert_false(kl__rv_gate_pass(&g, "100")); /* the same state again */
    assert_false(kl__rv_gate_pass(&g, "99"));
    assert_false(kl__rv_gate_pass(&g, "0099"));
    assert_true(kl__rv_gate_older(&g, "99"));
    assert_false(kl__rv_gate_older(&g, "100"));
    assert_true(kl__rv_gate_pass(&g, "1000")); /* numbers, not strings */
    assert_true(kl__rv_gate_pass(&g, "18446744073709551615"));
    assert_true(kl__rv_gate_pass(&g, "18446744073709551616")); /* overflows: opaque */
    assert_true(kl__rv_gate_pass(&g, "5"));                    /* after an opaque one: anything */
    assert_false(kl__rv_gate_pass(&g, "4"));
    assert_true(kl__rv_gate_pass(&g, "abc"));
    assert_false(kl__rv_gate_older(&g, "1"));
    assert_true(kl__rv_gate_pass(&g, ""));
    assert_true(kl__rv_gate_pass(&g, "-1"));
    assert_true(kl__rv_gate_pass(&g, NULL));
    kl__rv_gate_set(&g, "7");
    assert_true(kl__rv_gate_older(&g, "6"));
    assert_false(kl__rv_gate_older(&g, "x"));
}

/* ---- coordinated mode: the controller writes the holder ---- */

/* What the controller writes when it picks us (5 s, renewTime now,
 * transitions kept), and what our first write of the term makes of it. */
static const kl__lease_spec named = {"me", 5, 0, W(50), 7};
static const kl__lease_spec named_expired = {"me", 0, 0, W(50), 7};
static const kl__lease_spec taken_term = {"me", 15, W(100), W(100), 8};
static const kl__lease_spec renewed_term = {"me", 15, W(100), W(1200), 8};

static kl__k8s_election_config coordinated_config(void)
{
    kl__k8s_election_config cfg = default_config();

    cfg.coordinated = 1;
    return cfg;
}

static void test_coordinated_never_creates(void **state)
{
    kl__k8s_election_config cfg = coordinated_config();
    static const step steps[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, K8SLEASE_ENOTFOUND, NULL), "", KL_KE_ACQUIRING, JITTER},
        {WATCH(200, 1), "", KL_KE_ACQUIRING, ANY},
        {DELETED(300), "", KL_KE_ACQUIRING, 300 + LD_MS},
    };

    (void)state;
    RUN(cfg, steps);
}

/* Held by another, released, or expired: all the controller's to decide. */
static void test_coordinated_never_takes_from_others(void **state)
{
    kl__k8s_election_config cfg = coordinated_config();
    static const step steps[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, 0, &ancient), "NEW_LEADER(other,5)", KL_KE_ACQUIRING, JITTER},
        {TIMER(AT_TIMER), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(20000, 0, &empty_holder), "NEW_LEADER(,7)", KL_KE_ACQUIRING, JITTER},
        /* the watch is not healthy: observations leave the planned poll */
        {OBSERVE(20100, &zero_duration), "NEW_LEADER(other,5)", KL_KE_ACQUIRING, ANY},
        {OBSERVE(20200, &null_holder), "NEW_LEADER(,7)", KL_KE_ACQUIRING, ANY},
    };

    (void)state;
    RUN(cfg, steps);
}

/* Named by the controller: a new term (transitions + 1: the epoch). */
static void test_coordinated_takes_when_named(void **state)
{
    kl__k8s_election_config cfg = coordinated_config();
    static const step steps[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, 0, &named), "NEW_LEADER(me,7) UPDATE(me,15s,a=100,r=100,t=8)", KL_KE_ACQUIRING,
         NO_TIMER},
        {RESULT(200, 0, &taken_term), "STARTED(8) NEW_LEADER(me,8)", KL_KE_LEADING, 2200},
        {TIMER(2200), "UPDATE(me,15s,a=100,r=2200,t=8)", KL_KE_LEADING, 10100},
    };

    (void)state;
    RUN(cfg, steps);
}

/* Named, but a preferredHolder names another, or the record expired by our
 * clock (duration 0) before we saw it: not ours to take. */
static void test_coordinated_named_but_not_taken(void **state)
{
    kl__k8s_election_config cfg = coordinated_config();
    static const step preferred[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, 0, &named), "NEW_LEADER(me,7)", KL_KE_ACQUIRING, JITTER, "other"},
        /* the preferredHolder cleared: a change, and now it is ours */
        {OBSERVE(150, &named), "UPDATE(me,15s,a=150,r=150,t=8)", KL_KE_ACQUIRING, NO_TIMER},
    };
    static const step expired[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, 0, &named_expired), "NEW_LEADER(me,7)", KL_KE_ACQUIRING, JITTER},
    };
    static const step self_preferred[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, 0, &named), "NEW_LEADER(me,7) UPDATE(me,15s,a=100,r=100,t=8)", KL_KE_ACQUIRING,
         NO_TIMER, "me"},
    };

    (void)state;
    RUN(cfg, preferred);
    RUN(cfg, expired);
    RUN(cfg, self_preferred);
}

/* Leading, the controller prefers another: step down at once and release
 * (the watch shows it), or without release_on_cancel just stop. */
static void test_coordinated_steps_down_for_preferred(void **state)
{
    kl__k8s_election_config cfg = coordinated_config();
    static const step release[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, 0, &named), "NEW_LEADER(me,7) UPDATE(me,15s,a=100,r=100,t=8)", KL_KE_ACQUIRING,
         NO_TIMER},
        {RESULT(200, 0, &taken_term), "STARTED(8) NEW_LEADER(me,8)", KL_KE_LEADING, 2200},
        {OBSERVE(1300, &renewed_term), "STOPPED[preferred] GET", KL_KE_RELEASING, 11300, "other"},
        {RESULT(1400, 0, &renewed_term), "UPDATE(,1s,a=1400,r=1400,t=8)", KL_KE_RELEASING, 11300,
         "other"},
        {RESULT(1500, 0, &released), "NEW_LEADER(,0) DONE", KL_KE_DONE, NO_TIMER, "other"},
    };
    static const step keep[] = {
        {START(0), "GET", KL_KE_ACQUIRING, NO_TIMER},
        {RESULT(100, 0, &named), "NEW_LEADER(me,7) UPDATE(me,15s,a=100,r=100,t=8)", KL_KE_ACQUIRING,
         NO_TIMER},
        {RESULT(200, 0, &taken_term), "STARTED(8) NEW_LEADER(me,8)", KL_KE_LEADING, 2200},
        /* polling: the fast-path renew fails, the GET shows it */
        {TIMER(2200), "UPDATE(me,15s,a=100,r=2200,t=8)", KL_KE_LEADING, 10100},
        {RESULT(2300, K8SLEASE_ECONFLICT, NULL), "GET", KL_KE_LEADING, 10100},
        {RESULT(2400, 0, &renewed_term), "STOPPED[preferred] DONE", KL_KE_DONE, NO_TIMER, "other"},
    };
    kl__k8s_election_config no_release = coordinated_config();

    (void)state;
    no_release.release_on_cancel = 0;
    RUN(cfg, release);
    RUN(no_release, keep);
}

/* A preferredHolder means nothing to a classic election (client-go's too). */
static void test_classic_ignores_preferred(void **state)
{
    kl__k8s_election_config cfg = default_config();
    static const step steps[] = {
        LEAD_FROM_CREATE,
        {OBSERVE(1000, &created), "", KL_KE_LEADING, 2200, "other"},
        {TIMER(2200), "UPDATE(me,15s,a=100,r=2200,t=0)", KL_KE_LEADING, 10100},
    };

    (void)state;
    RUN(cfg, steps);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_validate_identity_empty),
        cmocka_unit_test(test_validate_identity_too_long),
        cmocka_unit_test(test_validate_positive_durations),
        cmocka_unit_test(test_validate_lease_duration_above_renew_deadline),
        cmocka_unit_test(test_validate_renew_deadline_above_jittered_retry),
        cmocka_unit_test(test_start_gets_at_once),
        cmocka_unit_test(test_not_found_creates),
        cmocka_unit_test(test_create_ok_leads),
        cmocka_unit_test(test_create_conflict_retries_with_jitter),
        cmocka_unit_test(test_held_by_other_waits),
        cmocka_unit_test(test_expiry_by_local_observed_time),
        cmocka_unit_test(test_unchanged_record_keeps_observed_time),
        cmocka_unit_test(test_changed_record_restarts_observed_time),
        cmocka_unit_test(test_zero_duration_is_expired),
        cmocka_unit_test(test_empty_holder_acquires_at_once),
        cmocka_unit_test(test_own_identity_at_start_takes_new_term),
        cmocka_unit_test(test_update_conflict_not_leader),
        cmocka_unit_test(test_late_acquisition_not_leader),
        cmocka_unit_test(test_new_leader_on_every_change_of_holder),
        cmocka_unit_test(test_fast_path_renew),
        cmocka_unit_test(test_fast_path_error_falls_back_to_get),
        cmocka_unit_test(test_slow_path_failure_retries_after_retry_period),
        cmocka_unit_test(test_transport_failure_while_leading_retries_soon),
        cmocka_unit_test(test_timeout_while_leading_retries_at_once),
        cmocka_unit_test(test_renew_failures_until_deadline),
        cmocka_unit_test(test_deadline_without_release_on_cancel),
        cmocka_unit_test(test_is_leader_false_at_deadline_without_event),
        cmocka_unit_test(test_deadline_from_request_start),
        cmocka_unit_test(test_late_renew_after_deadline),
        cmocka_unit_test(test_get_while_leading_shows_other_holder),
        cmocka_unit_test(test_get_while_leading_shows_other_term),
        cmocka_unit_test(test_lease_deleted_while_leading),
        cmocka_unit_test(test_stop_while_leading_releases),
        cmocka_unit_test(test_stop_release_finds_other_holder),
        cmocka_unit_test(test_release_gives_up_at_renew_deadline),
        cmocka_unit_test(test_stop_without_release),
        cmocka_unit_test(test_stop_idle),
        cmocka_unit_test(test_stop_twice_is_harmless),
        cmocka_unit_test(test_stop_waits_for_request_in_flight),
        cmocka_unit_test(test_stop_while_acquiring),
        cmocka_unit_test(test_stop_after_ambiguous_write_checks),
        cmocka_unit_test(test_release_leaves_a_later_term_alone),
        cmocka_unit_test(test_stopped_exactly_once),
        cmocka_unit_test(test_events_after_done_do_nothing),
        cmocka_unit_test(test_timer_per_state),
        cmocka_unit_test(test_jitter_deterministic_and_bounded),
        cmocka_unit_test(test_spurious_events_ignored),
        cmocka_unit_test(test_huge_duration_does_not_overflow),
        cmocka_unit_test(test_lease_duration_rounded_up),
        cmocka_unit_test(test_long_holder_compared_in_full),
        cmocka_unit_test(test_watch_healthy_waits_for_expiry),
        cmocka_unit_test(test_watch_unhealthy_polls),
        cmocka_unit_test(test_observe_while_unhealthy_keeps_poll),
        cmocka_unit_test(test_observe_release_acquires_at_once),
        cmocka_unit_test(test_observe_with_request_in_flight),
        cmocka_unit_test(test_watch_after_conflict),
        cmocka_unit_test(test_observe_while_leading),
        cmocka_unit_test(test_observe_while_releasing),
        cmocka_unit_test(test_handoff),
        cmocka_unit_test(test_holder_ended_takes_at_once),
        cmocka_unit_test(test_holder_ended_ignored_or_waits),
        cmocka_unit_test(test_renew_now),
        cmocka_unit_test(test_predecessor_held_until_expiry),
        cmocka_unit_test(test_watch_events_ignored_when_idle_or_done),
        cmocka_unit_test(test_poll_only_ignores_watch),
        cmocka_unit_test(test_expiry_jitter_bounded),
        cmocka_unit_test(test_rv_gate),
        cmocka_unit_test(test_coordinated_never_creates),
        cmocka_unit_test(test_coordinated_never_takes_from_others),
        cmocka_unit_test(test_coordinated_takes_when_named),
        cmocka_unit_test(test_coordinated_named_but_not_taken),
        cmocka_unit_test(test_coordinated_steps_down_for_preferred),
        cmocka_unit_test(test_classic_ignores_preferred),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
