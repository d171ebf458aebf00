/* The etcd election state machine, one test per rule of src/etcd/election.h,
 * then a simulation of three candidates against an in-memory etcd.
 *
 * The tables are (event, now) -> (actions, state, timer); times are
 * milliseconds after T0 on the monotonic clock. Unless a test says
 * otherwise: election "e" (keys "e/<hex>"), our value "me", TTL 9 s
 * (keepalives every 3 s), retry period 1 s, release_on_cancel set; etcd
 * grants us lease 42 (0x2a: key "e/2a") and our key gets create revision 5.
 *
 * Length: one table per rule of src/etcd/election.h (as test_elector.c does
 * for Kubernetes); the tables are the length. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/common.h"
#include "etcd/election.h"

#define MS INT64_C(1000000)
#define T0 (INT64_C(1000) * 1000 * MS) /* any monotonic origin but 0 */

#define TTL_MS 9000
#define KA_MS  3000
#define RP_MS  1000

/* special values of step.at_ms and step.timer_ms */
#define AT_TIMER INT64_MIN /* deliver at kl__etcd_election_timer() */
#define ANY      INT64_MIN /* do not check */
#define NO_TIMER INT64_MAX /* kl__etcd_election_timer() == INT64_MAX */

#define CAMP KL_EE_CH_CAMPAIGN
#define KA   KL_EE_CH_KEEPALIVE
#define OBS  KL_EE_CH_OBSERVE

#define KV(key, value, create, mod, lease)                                                         \
    {                                                                                              \
        (char *)(key), sizeof(key) - 1, (char *)(value), sizeof(value) - 1, (create), (mod), 1,    \
            (lease)                                                                                \
    }

/* ---- fixtures: what the codec would decode from etcd's answers ---- */

static const kl__etcd_lease lease_42 = {1, 42, 9, 0};
static const kl__etcd_lease lease_43 = {1, 43, 9, 0};
static const kl__etcd_lease ka_ok = {5, 42, 9, 0};
static const kl__etcd_lease ka_43_ok = {5, 43, 9, 0};
static const kl__etcd_lease ka_gone = {5, 42, 0, 0};
static const kl__etcd_lease ka_other_lease = {5, 7, 9, 0};

static const kl__etcd_txn created_5 = {5, 1, NULL, 0};
static const kl__etcd_txn txn_ok = {6, 1, NULL, 0};
static const kl__etcd_txn txn_failed = {6, 0, NULL, 0};

static kl__etcd_kv kv_me[] = {KV("e/2a", "me", 5, 5, 42)};
static kl__etcd_kv kv_me_old_value[] = {KV("e/2a", "old", 5, 5, 42)};
static kl__etcd_kv kv_me_pred[] = {KV("e/2a", "me", 5, 5, 42), KV("e/1b", "other", 3, 3, 27)};
static kl__etcd_kv kv_me_pred2[] = {KV("e/2a", "me", 5, 5, 42), KV("e/1c", "third", 4, 4, 28)};
static kl__etcd_kv kv_other[] = {KV("e/1b", "other", 3, 3, 27)};
static kl__etcd_kv kv_third[] = {KV("e/1c", "third", 4, 4, 28)};
static kl__etcd_kv kv_me_new_rev[] = {KV("e/2a", "me", 12, 12, 42)};

static kl__etcd_op op_existing_same[] = {{KL_ETCD_OP_RANGE, {5, kv_me, 1, 0, 1}, 0}};
static kl__etcd_op op_existing_other[] = {{KL_ETCD_OP_RANGE, {5, kv_me_old_value, 1, 0, 1}, 0}};
static const kl__etcd_txn existed_same = {5, 0, op_existing_same, 1};
static const kl__etcd_txn existed_other = {5, 0, op_existing_other, 1};

static const kl__etcd_range range_me = {5, kv_me, 1, 0, 1};
static const kl__etcd_range range_me_pred = {7, kv_me_pred, 2, 0, 3};
static const kl__etcd_range range_me_pred2 = {9, kv_me_pred2, 2, 0, 3};
static const kl__etcd_range range_me_later = {10, kv_me, 1, 0, 1};
static const kl__etcd_range range_none = {7, NULL, 0, 0, 0};
static const kl__etcd_range range_none_later = {20, NULL, 0, 0, 0};
static const kl__etcd_range range_other_only = {7, kv_other, 1, 0, 1};
static const kl__etcd_range range_leader_other = {7, kv_other, 1, 1, 2};
static const kl__etcd_range range_leader_third = {9, kv_third, 1, 1, 2};
static const kl__etcd_range range_leader_other_stale = {6, kv_other, 1, 1, 2};
static const kl__etcd_range range_me_recreated = {12, kv_me_new_rev, 1, 0, 1};

static kl__etcd_watch_event ev_put_pred[] = {{KL_ETCD_EVENT_PUT, KV("e/1b", "other2", 3, 8, 27)}};
static kl__etcd_watch_event ev_put_pred_same[] = {
    {KL_ETCD_EVENT_PUT, KV("e/1b", "other2", 3, 9, 27)}};
static kl__etcd_watch_event ev_del_pred[] = {{KL_ETCD_EVENT_DELETE, KV("e/1b", "", 0, 8, 0)}};
static kl__etcd_watch_event ev_del_pred2[] = {{KL_ETCD_EVENT_DELETE, KV("e/1c", "", 0, 10, 0)}};
static kl__etcd_watch_event ev_del_me[] = {{KL_ETCD_EVENT_DELETE, KV("e/2a", "", 0, 11, 0)}};
static kl__etcd_watch_event ev_del_me_old[] = {{KL_ETCD_EVENT_DELETE, KV("e/2a", "", 0, 4, 0)}};
static kl__etcd_watch_event ev_del_unrelated[] = {{KL_ETCD_EVENT_DELETE, KV("e/99", "", 0, 8, 0)}};

static kl__etcd_watch_event ev_puts_pred[] = {{KL_ETCD_EVENT_PUT, KV("e/1b", "v1", 3, 8, 27)},
                                              {KL_ETCD_EVENT_PUT, KV("e/99", "x", 7, 9, 30)},
                                              {KL_ETCD_EVENT_PUT, KV("e/1b", "v2", 3, 10, 27)},
                                              {KL_ETCD_EVENT_PUT, KV("e/1b", "v3", 3, 11, 27)}};
static const kl__etcd_watch_msg w_created = {7, 0, 1, 0, 0, 0, (char *)"", NULL, 0};
static const kl__etcd_watch_msg w_progress = {8, 0, 0, 0, 0, 0, (char *)"", NULL, 0};
static const kl__etcd_watch_msg w_put_pred = {8, 0, 0, 0, 0, 0, (char *)"", ev_put_pred, 1};
static const kl__etcd_watch_msg w_put_pred_same = {9, 0, 0, 0, 0, 0, (char *)"", ev_put_pred_same,
                                                   1};
static const kl__etcd_watch_msg w_puts_pred = {11, 0, 0, 0, 0, 0, (char *)"", ev_puts_pred, 4};
static const kl__etcd_watch_msg w_del_pred = {8, 0, 0, 0, 0, 0, (char *)"", ev_del_pred, 1};
static const kl__etcd_watch_msg w_del_pred2 = {10, 0, 0, 0, 0, 0, (char *)"", ev_del_pred2, 1};
static const kl__etcd_watch_msg w_del_me = {11, 0, 0, 0, 0, 0, (char *)"", ev_del_me, 1};
static const kl__etcd_watch_msg w_del_me_old = {4, 0, 0, 0, 0, 0, (char *)"", ev_del_me_old, 1};
static const kl__etcd_watch_msg w_del_unrelated = {8, 0, 0, 0, 0, 0, (char *)"", ev_del_unrelated,
                                                   1};
static const kl__etcd_watch_msg w_compacted = {0, 0, 0, 1, 0, 6, (char *)"", NULL, 0};
static const kl__etcd_watch_msg w_denied = {
    7, -1, 1, 1, 0, 0, (char *)"etcdserver: permission denied", NULL, 0};

/* ---- the harness ---- */

typedef struct step {
    kl__etcd_election_event_type type;
    int64_t at_ms;
    kl__etcd_channel ch;
    int status;
    const kl__etcd_lease *lease;
    const kl__etcd_txn *txn;
    const kl__etcd_range *range;
    const kl__etcd_watch_msg *watch;
    int release;
    const char *actions; /* expected, see format_actions() */
    kl__etcd_election_state state;
    int64_t timer_ms;
} step;

#define START(t)          KL_EE_EV_START, (t), CAMP, 0, NULL, NULL, NULL, NULL, 0
#define TIMER(t)          KL_EE_EV_TIMER, (t), CAMP, 0, NULL, NULL, NULL, NULL, 0
#define STOP(t, rel)      KL_EE_EV_STOP, (t), CAMP, 0, NULL, NULL, NULL, NULL, (rel)
#define GRANTED(t, l)     KL_EE_EV_RESULT, (t), CAMP, 0, (l), NULL, NULL, NULL, 0
#define KEPT(t, l)        KL_EE_EV_RESULT, (t), KA, 0, (l), NULL, NULL, NULL, 0
#define TXN(t, x)         KL_EE_EV_RESULT, (t), CAMP, 0, NULL, (x), NULL, NULL, 0
#define RANGED(t, ch, r)  KL_EE_EV_RESULT, (t), (ch), 0, NULL, NULL, (r), NULL, 0
#define FAILED(t, ch, st) KL_EE_EV_RESULT, (t), (ch), (st), NULL, NULL, NULL, NULL, 0
#define DONE_OK(t, ch)    KL_EE_EV_RESULT, (t), (ch), 0, NULL, NULL, NULL, NULL, 0
#define WATCHED(t, ch, m) KL_EE_EV_WATCH, (t), (ch), 0, NULL, NULL, NULL, (m), 0

#define RANGE_PRED(rev) "RANGE_PREDECESSOR(e/..e0,max=" #rev ",limit=2)"
#define RANGE_LEADER    "RANGE_LEADER(e/..e0,limit=1)"

static kl__etcd_election_config default_config(void)
{
    kl__etcd_election_config cfg = {"e", "me", TTL_MS * MS, 0, RP_MS * MS, 1};

    return cfg;
}

static int64_t ms_of(int64_t ns)
{
    return (ns - T0) / MS;
}

static const char *channel_name(kl__etcd_channel ch)
{
    return ch == CAMP ? "campaign" : ch == KA ? "keepalive" : ch == OBS ? "observe" : "?";
}

/* "GRANT(9)", "TXN_CREATE(e/2a,me,42)", "WATCH_KEY(campaign,e/1b,8)",
 * "CANCEL(observe)", "NEW_LEADER(x,5)", ... separated by spaces. Values
 * longer than 16 bytes print as "<N bytes>". */
static const char *format_actions(const kl__etcd_election_actions *out)
{
    static char buf[2048];
    size_t len = 0;

    buf[0] = '\0';
    for (int i = 0; i < out->n; i++) {
        const kl__etcd_election_action *a = &out->a[i];
        char d[256] = "", v[32];

        if (a->value && a->value_len > 16)
            snprintf(v, sizeof(v), "<%zu bytes>", a->value_len);
        else if (a->value)
            snprintf(v, sizeof(v), "%.*s", (int)a->value_len, a->value);
        switch (a->type) {
        case KL_EE_ACT_GRANT:
            snprintf(d, sizeof(d), "GRANT(%lld)", (long long)a->ttl_s);
            break;
        case KL_EE_ACT_KEEPALIVE:
            snprintf(d, sizeof(d), "KEEPALIVE(%lld)", (long long)a->lease_id);
            break;
        case KL_EE_ACT_TXN_CREATE:
            snprintf(d, sizeof(d), "TXN_CREATE(%.*s,%s,%lld)", (int)a->key_len, a->key, v,
                     (long long)a->lease_id);
            break;
        case KL_EE_ACT_PROCLAIM:
            snprintf(d, sizeof(d), "PROCLAIM(%.*s,%s,%lld,%lld)", (int)a->key_len, a->key, v,
                     (long long)a->lease_id, (long long)a->revision);
            break;
        case KL_EE_ACT_RANGE_PREDECESSOR:
            snprintf(d, sizeof(d), "RANGE_PREDECESSOR(%.*s..%.*s,max=%lld,limit=%lld)",
                     (int)a->key_len, a->key, (int)a->range_end_len, a->range_end,
                     (long long)a->revision, (long long)a->limit);
            break;
        case KL_EE_ACT_RANGE_LEADER:
            snprintf(d, sizeof(d), "RANGE_LEADER(%.*s..%.*s,limit=%lld)", (int)a->key_len, a->key,
                     (int)a->range_end_len, a->range_end, (long long)a->limit);
            break;
        case KL_EE_ACT_WATCH_KEY:
            snprintf(d, sizeof(d), "WATCH_KEY(%s,%.*s,%lld)", channel_name(a->channel),
                     a->key_len > 16 ? 3 : (int)a->key_len, a->key, (long long)a->revision);
            break;
        case KL_EE_ACT_CANCEL:
            snprintf(d, sizeof(d), "CANCEL(%s)", channel_name(a->channel));
            break;
        case KL_EE_ACT_DELETE_KEY:
            snprintf(d, sizeof(d), "DELETE_KEY(%.*s,%lld)", (int)a->key_len, a->key,
                     (long long)a->revision);
            break;
        case KL_EE_ACT_REVOKE:
            snprintf(d, sizeof(d), "REVOKE(%lld)", (long long)a->lease_id);
            break;
        case KL_EE_ACT_STARTED:
            snprintf(d, sizeof(d), "STARTED(%lld)", (long long)a->epoch);
            break;
        case KL_EE_ACT_STOPPED:
            /* why, when a term was lost (core/term.h) */
            snprintf(d, sizeof(d), "STOPPED%s",
                     a->end == KL_TERM_STOPPED    ? ""
                     : a->end == KL_TERM_DEADLINE ? "[deadline]"
                     : a->end == KL_TERM_GONE     ? "[gone]"
                     : a->end == KL_TERM_DELETED  ? "[deleted]"
                                                  : "[?]");
            break;
        case KL_EE_ACT_NEW_LEADER:
            snprintf(d, sizeof(d), "NEW_LEADER(%s,%lld)", v, (long long)a->epoch);
            break;
        case KL_EE_ACT_DONE:
            snprintf(d, sizeof(d), "DONE");
            break;
        }
        len += (size_t)snprintf(buf + len, sizeof(buf) - len, "%s%s", i ? " " : "", d);
    }
    return buf;
}

typedef struct run {
    kl__etcd_election e;
    kl__etcd_election_actions out;
    int stopped, done;
} run;

/* Checks the rules every step must keep: channels never get a second
 * request while one is in flight, STOPPED at most once, DONE last. */
static void deliver(run *r, const step *s, int64_t now)
{
    kl__etcd_election_event ev = {s->type, s->ch,    s->status, s->lease,
                                  s->txn,  s->range, s->watch,  s->release};
    kl__etcd_req before[KL_EE_CH_COUNT];

    memcpy(before, r->e.inflight, sizeof(before));
    kl__etcd_election_step(&r->e, &ev, now, &r->out);
    assert_true(r->out.n <= 6); /* the bound push() documents */
    for (int i = 0; i < r->out.n; i++) {
        const kl__etcd_election_action *a = &r->out.a[i];

        assert_int_equal(r->done, 0); /* nothing may follow DONE */
        if (a->type == KL_EE_ACT_STOPPED)
            r->stopped++;
        if (a->type == KL_EE_ACT_DONE) {
            assert_int_equal(i, r->out.n - 1);
            r->done = 1;
        }
        if (a->type == KL_EE_ACT_CANCEL)
            before[a->channel] = KL_EE_REQ_NONE;
        else if (a->type <= KL_EE_ACT_REVOKE) {
            /* a request on a busy channel: the driver would run two */
            if (before[a->channel] != KL_EE_REQ_NONE &&
                !(ev.type == KL_EE_EV_RESULT && ev.channel == a->channel))
                fail_msg("request on the busy %s channel", channel_name(a->channel));
            before[a->channel] = KL_EE_REQ_GRANT; /* anything but NONE */
            if (ev.type == KL_EE_EV_RESULT && ev.channel == a->channel)
                ev.channel = KL_EE_CH_COUNT; /* only one request may follow a result */
        }
    }
    assert_true(r->stopped <= 1);
    if (r->done)
        assert_int_equal(r->stopped, 1);
}

static void run_init(run *r, const kl__etcd_election_config *cfg)
{
    memset(r, 0, sizeof(*r));
    assert_int_equal(kl__etcd_election_init(&r->e, cfg), 0);
}

static void run_steps(run *r, const step *steps, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const step *s = &steps[i];
        int64_t now = s->at_ms == AT_TIMER ? kl__etcd_election_timer(&r->e) : T0 + s->at_ms * MS;
        int64_t timer;
        const char *got;

        assert_true(now != INT64_MAX);
        deliver(r, s, now);
        got = format_actions(&r->out);
        if (strcmp(got, s->actions) != 0)
            fail_msg("step %zu at %lld ms: actions \"%s\", expected \"%s\"", i,
                     (long long)ms_of(now), got, s->actions);
        if (r->e.state != s->state)
            fail_msg("step %zu: state %s, expected %s", i, kl__etcd_election_state_name(r->e.state),
                     kl__etcd_election_state_name(s->state));
        timer = kl__etcd_election_timer(&r->e);
        if (s->timer_ms == NO_TIMER) {
            if (timer != INT64_MAX)
                fail_msg("step %zu: timer at %lld ms, expected none", i, (long long)ms_of(timer));
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

/* Granted at 100 (sent at 0: deadline 9000, first keepalive at 3100),
 * created at 200 (rev 5), alone at 300: leader with epoch 5. OBSERVE's
 * first range is still in flight. */
#define LEAD                                                                                       \
    {START(0), "GRANT(9)", KL_EE_GRANTING, NO_TIMER},                                              \
        {GRANTED(100, &lease_42), "TXN_CREATE(e/2a,me,42)", KL_EE_CREATING, 3100},                 \
        {TXN(200, &created_5), RANGE_PRED(5) " " RANGE_LEADER, KL_EE_RANGING, 3100},               \
    {                                                                                              \
        RANGED(300, CAMP, &range_me), "STARTED(5) NEW_LEADER(me,5)", KL_EE_LEADING, 3100           \
    }

/* ... and OBSERVE then watches our own key. */
#define LEAD_OBSERVED                                                                              \
    LEAD,                                                                                          \
    {                                                                                              \
        RANGED(400, OBS, &range_me_later), "WATCH_KEY(observe,e/2a,11)", KL_EE_LEADING, 3100       \
    }

/* Created at 200 with a predecessor (e/1b, rev 3): waiting on it from 8;
 * OBSERVE reports e/1b and watches it too. */
#define WAIT                                                                                       \
    {START(0), "GRANT(9)", KL_EE_GRANTING, NO_TIMER},                                              \
        {GRANTED(100, &lease_42), "TXN_CREATE(e/2a,me,42)", KL_EE_CREATING, 3100},                 \
        {TXN(200, &created_5), RANGE_PRED(5) " " RANGE_LEADER, KL_EE_RANGING, 3100},               \
        {RANGED(300, CAMP, &range_me_pred), "WATCH_KEY(campaign,e/1b,8)", KL_EE_WAITING, 3100},    \
    {                                                                                              \
        RANGED(350, OBS, &range_leader_other), "NEW_LEADER(other,3) WATCH_KEY(observe,e/1b,8)",    \
            KL_EE_WAITING, 3100                                                                    \
    }

/* ---- validation ---- */

static void expect_invalid(const kl__etcd_election_config *cfg, const char *message)
{
    kl__etcd_election e;

    assert_int_equal(kl__etcd_election_init(&e, cfg), K8SLEASE_EINVAL);
    assert_string_equal(kl__error_get(), message);
}

static void test_validate_prefix_and_value(void **state)
{
    kl__etcd_election_config cfg = default_config();
    char s[KL_EE_VALUE_MAX + 1];
    kl__etcd_election e;

    (void)state;
    cfg.prefix = "";
    expect_invalid(&cfg, "prefix must not be empty");
    cfg.prefix = NULL;
    expect_invalid(&cfg, "prefix must not be empty");
    cfg = default_config();
    cfg.value = "";
    expect_invalid(&cfg, "value must not be empty");
    cfg.value = NULL;
    expect_invalid(&cfg, "value must not be empty");

    /* the longest prefix leaves room for "/" and 16 hex digits */
    cfg = default_config();
    memset(s, 'p', sizeof(s));
    s[KL_EE_PREFIX_MAX - 1] = '\0';
    cfg.prefix = s;
    assert_int_equal(kl__etcd_election_init(&e, &cfg), 0);
    assert_int_equal(e.prefix_len, KL_EE_PREFIX_MAX);
    assert_true(e.prefix_len + 16 < KL_EE_KEY_MAX);
    s[KL_EE_PREFIX_MAX - 1] = 'p';
    s[KL_EE_PREFIX_MAX] = '\0';
    expect_invalid(&cfg, "prefix longer than 493 bytes");

    cfg = default_config();
    memset(s, 'v', sizeof(s));
    s[KL_EE_VALUE_MAX - 1] = '\0';
    cfg.value = s;
    assert_int_equal(kl__etcd_election_init(&e, &cfg), 0);
    s[KL_EE_VALUE_MAX - 1] = 'v';
    s[KL_EE_VALUE_MAX] = '\0';
    expect_invalid(&cfg, "value longer than 511 bytes");
}

static void test_validate_durations(void **state)
{
    kl__etcd_election_config cfg = default_config();
    kl__etcd_election e;

    (void)state;
    cfg.ttl_ns = 999 * MS;
    expect_invalid(&cfg, "ttl (999 ms) must be at least 1 s");
    cfg.ttl_ns = 0;
    expect_invalid(&cfg, "ttl (0 ms) must be at least 1 s");
    cfg.ttl_ns = 1000 * MS; /* 1 s: keepalives every 333 ms */
    assert_int_equal(kl__etcd_election_init(&e, &cfg), 0);
    assert_int_equal(e.keepalive_ns, 333333333);

    cfg = default_config();
    cfg.keepalive_interval_ns = TTL_MS * MS;
    expect_invalid(&cfg, "keepalive_interval (9000 ms) must be less than ttl (9000 ms)");
    cfg.keepalive_interval_ns = -1;
    expect_invalid(&cfg, "keepalive_interval (-1 ns) must not be negative");
    cfg.keepalive_interval_ns = TTL_MS * MS - 1;
    assert_int_equal(kl__etcd_election_init(&e, &cfg), 0);

    cfg = default_config();
    cfg.retry_period_ns = 0;
    expect_invalid(&cfg, "retry_period (0 ms) must be greater than zero");
    cfg.retry_period_ns = -5 * MS;
    expect_invalid(&cfg, "retry_period (-5 ms) must be greater than zero");
    assert_int_equal(kl__etcd_election_init(NULL, &cfg), K8SLEASE_EINVAL);
}

static void test_config_is_copied(void **state)
{
    kl__etcd_election_config cfg = default_config();
    char prefix[8] = "e", value[8] = "me";
    kl__etcd_election e;

    (void)state;
    cfg.prefix = prefix;
    cfg.value = value;
    assert_int_equal(kl__etcd_election_init(&e, &cfg), 0);
    strcpy(prefix, "zz");
    strcpy(value, "zz");
    assert_string_equal(e.cfg.prefix, "e");
    assert_string_equal(e.cfg.value, "me");
    assert_string_equal(e.prefix, "e/");
    assert_string_equal(e.prefix_end, "e0");
}

/* ---- campaign ---- */

static void test_start_grants(void **state)
{
    static const step steps[] = {
        {TIMER(0), "", KL_EE_IDLE, NO_TIMER},
        {START(0), "GRANT(9)", KL_EE_GRANTING, NO_TIMER},
        {START(1), "", KL_EE_GRANTING, NO_TIMER}, /* a second START changes nothing */
    };
    kl__etcd_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

static void test_ttl_rounded_up_to_seconds(void **state)
{
    static const step steps[] = {{START(0), "GRANT(2)", KL_EE_GRANTING, NO_TIMER}};
    kl__etcd_election_config cfg = default_config();

    (void)state;
    cfg.ttl_ns = 1500 * MS;
    RUN(cfg, steps);
}

static void test_grant_creates_key_with_hex_lease_id(void **state)
{
    static const kl__etcd_lease big = {1, INT64_C(0x7fa1b2c3d4e5f607), 9, 0};
    static const step steps[] = {
        {START(0), "GRANT(9)", KL_EE_GRANTING, NO_TIMER},
        /* as `etcdctl elect`: lowercase hex, no padding; keepalive at 3100 */
        {GRANTED(100, &big), "TXN_CREATE(e/7fa1b2c3d4e5f607,me,9196828468227470855)",
         KL_EE_CREATING, 3100},
    };
    kl__etcd_election_config cfg = default_config();
    run r;

    (void)state;
    run_init(&r, &cfg);
    run_steps(&r, steps, KL_ARRAY_LEN(steps));
    /* the deadline counts from the GRANT's send time */
    assert_int_equal(kl__etcd_election_lease_deadline(&r.e), T0 + TTL_MS * MS);
}

static void test_created_alone_leads(void **state)
{
    static const step steps[] = {LEAD};
    kl__etcd_election_config cfg = default_config();
    run r;

    (void)state;
    run_init(&r, &cfg);
    run_steps(&r, steps, KL_ARRAY_LEN(steps));
    assert_int_equal(r.e.epoch, 5);
    assert_true(kl__etcd_election_is_leader(&r.e, T0 + 300 * MS));
    assert_true(kl__etcd_election_is_leader(&r.e, T0 + (TTL_MS - 1) * MS));
    assert_false(kl__etcd_election_is_leader(&r.e, T0 + TTL_MS * MS));
}

static void test_existing_key_with_our_value(void **state)
{
    static const step steps[] = {
        {START(0), "GRANT(9)", KL_EE_GRANTING, NO_TIMER},
        {GRANTED(100, &lease_42), "TXN_CREATE(e/2a,me,42)", KL_EE_CREATING, 3100},
        /* "else get": our key, create revision 5 */
        {TXN(200, &existed_same), RANGE_PRED(5) " " RANGE_LEADER, KL_EE_RANGING, 3100},
    };
    kl__etcd_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

static void test_existing_key_with_other_value_proclaims(void **state)
{
    static const step steps[] = {
        {START(0), "GRANT(9)", KL_EE_GRANTING, NO_TIMER},
        {GRANTED(100, &lease_42), "TXN_CREATE(e/2a,me,42)", KL_EE_CREATING, 3100},
        {TXN(200, &existed_other), "PROCLAIM(e/2a,me,42,5)", KL_EE_PROCLAIMING, 3100},
        {FAILED(300, CAMP, K8SLEASE_ETRANSPORT), "", KL_EE_PROCLAIMING, 1300},
        {TIMER(AT_TIMER), "PROCLAIM(e/2a,me,42,5)", KL_EE_PROCLAIMING, 3100},
        {TXN(1400, &txn_ok), RANGE_PRED(5) " " RANGE_LEADER, KL_EE_RANGING, 3100},
    };
    kl__etcd_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

static void test_proclaim_finds_key_gone_recreates(void **state)
{
    static const step steps[] = {
        {START(0), "GRANT(9)", KL_EE_GRANTING, NO_TIMER},
        {GRANTED(100, &lease_42), "TXN_CREATE(e/2a,me,42)", KL_EE_CREATING, 3100},
        {TXN(200, &existed_other), "PROCLAIM(e/2a,me,42,5)", KL_EE_PROCLAIMING, 3100},
        {TXN(300, &txn_failed), "TXN_CREATE(e/2a,me,42)", KL_EE_CREATING, 3100},
    };
    kl__etcd_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

static void test_predecessor_watched_from_range_revision(void **state)
{
    static const step steps[] = {WAIT};
    kl__etcd_election_config cfg = default_config();
    run r;

    (void)state;
    run_init(&r, &cfg);
    run_steps(&r, steps, KL_ARRAY_LEN(steps));
    assert_false(kl__etcd_election_is_leader(&r.e, T0 + 400 * MS));
}

static void test_predecessor_delete_ranges_again(void **state)
{
    static const step steps[] = {
        WAIT,
        {WATCHED(400, CAMP, &w_created), "", KL_EE_WAITING, 3100},
        {WATCHED(500, CAMP, &w_progress), "", KL_EE_WAITING, 3100},
        {WATCHED(600, CAMP, &w_put_pred), "", KL_EE_WAITING, 3100},
        {WATCHED(650, CAMP, &w_del_unrelated), "", KL_EE_WAITING, 3100},
        {WATCHED(700, CAMP, &w_del_pred), "CANCEL(campaign) " RANGE_PRED(5), KL_EE_RANGING, 3100},
        /* another predecessor now (created before us, seen late) */
        {RANGED(800, CAMP, &range_me_pred2), "WATCH_KEY(campaign,e/1c,10)", KL_EE_WAITING, 3100},
        {WATCHED(900, CAMP, &w_del_pred2), "CANCEL(campaign) " RANGE_PRED(5), KL_EE_RANGING, 3100},
        {RANGED(1000, CAMP, &range_me_later), "STARTED(5) NEW_LEADER(me,5)", KL_EE_LEADING, 3100},
    };
    kl__etcd_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

static void test_own_key_missing_recreates(void **state)
{
    static const step steps[] = {
        {START(0), "GRANT(9)", KL_EE_GRANTING, NO_TIMER},
        {GRANTED(100, &lease_42), "TXN_CREATE(e/2a,me,42)", KL_EE_CREATING, 3100},
        {TXN(200, &created_5), RANGE_PRED(5) " " RANGE_LEADER, KL_EE_RANGING, 3100},
        /* our key was deleted (etcdctl del): not leader, a new key */
        {RANGED(300, CAMP, &range_other_only), "TXN_CREATE(e/2a,me,42)", KL_EE_CREATING, 3100},
        {TXN(400, &created_5), RANGE_PRED(5), KL_EE_RANGING, 3100},
        {RANGED(500, CAMP, &range_none), "TXN_CREATE(e/2a,me,42)", KL_EE_CREATING, 3100},
        /* an older incarnation of our key is not ours either */
        {TXN(600, &created_5), RANGE_PRED(5), KL_EE_RANGING, 3100},
        {RANGED(700, CAMP, &range_me_recreated), "TXN_CREATE(e/2a,me,42)", KL_EE_CREATING, 3100},
    };
    kl__etcd_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

/* ---- keepalive ---- */

static void test_keepalive_schedule_and_deadline(void **state)
{
    static const step steps[] = {
        LEAD,
        {TIMER(3099), "", KL_EE_LEADING, 3100}, /* early: nothing */
        {TIMER(AT_TIMER), "KEEPALIVE(42)", KL_EE_LEADING, 9000},
        /* deadline = send time of the keepalive + TTL */
        {KEPT(3200, &ka_ok), "", KL_EE_LEADING, 6200},
        {TIMER(AT_TIMER), "KEEPALIVE(42)", KL_EE_LEADING, 12100},
        {KEPT(6300, &ka_ok), "", KL_EE_LEADING, 9300},
    };
    kl__etcd_election_config cfg = default_config();
    run r;

    (void)state;
    run_init(&r, &cfg);
    run_steps(&r, steps, KL_ARRAY_LEN(steps));
    assert_int_equal(kl__etcd_election_lease_deadline(&r.e), T0 + (6200 + TTL_MS) * MS);
    assert_true(kl__etcd_election_is_leader(&r.e, T0 + (6200 + TTL_MS - 1) * MS));
    assert_false(kl__etcd_election_is_leader(&r.e, T0 + (6200 + TTL_MS) * MS));
}

static void test_keepalive_configured_interval(void **state)
{
    static const step steps[] = {
        {START(0), "GRANT(9)", KL_EE_GRANTING, NO_TIMER},
        {GRANTED(100, &lease_42), "TXN_CREATE(e/2a,me,42)", KL_EE_CREATING, 2100},
        {TIMER(AT_TIMER), "KEEPALIVE(42)", KL_EE_CREATING, 9000},
        {KEPT(2150, &ka_ok), "", KL_EE_CREATING, 4150},
    };
    kl__etcd_election_config cfg = default_config();

    (void)state;
    cfg.keepalive_interval_ns = 2000 * MS;
    RUN(cfg, steps);
}

static void test_keepalive_error_retried_sooner(void **state)
{
    static const step steps[] = {
        LEAD,
        {TIMER(3100), "KEEPALIVE(42)", KL_EE_LEADING, 9000},
        {FAILED(3200, KA, K8SLEASE_ETRANSPORT), "", KL_EE_LEADING, 4200},
        {TIMER(AT_TIMER), "KEEPALIVE(42)", KL_EE_LEADING, 9000},
        /* an answer for another lease is not ours: an error */
        {KEPT(4300, &ka_other_lease), "", KL_EE_LEADING, 5300},
    };
    kl__etcd_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

static void test_granted_ttl_bounds_deadline(void **state)
{
    static const kl__etcd_lease shorter = {1, 42, 5, 0};
    static const kl__etcd_lease longer = {1, 42, 2, 0};
    static const step short_steps[] = {
        {START(0), "GRANT(9)", KL_EE_GRANTING, NO_TIMER},
        /* etcd granted less than asked: the deadline follows it */
        {GRANTED(100, &shorter), "TXN_CREATE(e/2a,me,42)", KL_EE_CREATING, 3100},
        {TIMER(3100), "KEEPALIVE(42)", KL_EE_CREATING, 5000},
    };
    static const step long_steps[] = {
        /* asked 1 s, got etcd's 2 s minimum: we keep to 1 s */
        {START(0), "GRANT(1)", KL_EE_GRANTING, NO_TIMER},
        {GRANTED(100, &longer), "TXN_CREATE(e/2a,me,42)", KL_EE_CREATING, ANY},
    };
    kl__etcd_election_config cfg = default_config();
    run r;

    (void)state;
    RUN(cfg, short_steps);
    cfg.ttl_ns = 1000 * MS;
    run_init(&r, &cfg);
    run_steps(&r, long_steps, KL_ARRAY_LEN(long_steps));
    assert_int_equal(kl__etcd_election_lease_deadline(&r.e), T0 + 1000 * MS);
}

static void test_grant_answered_after_ttl_regrants(void **state)
{
    static const step steps[] = {
        {START(0), "GRANT(9)", KL_EE_GRANTING, NO_TIMER},
        /* presumed expired, but it may live (etcd restarted): revoked */
        {GRANTED(9000, &lease_42), "GRANT(9) REVOKE(42)", KL_EE_GRANTING, NO_TIMER},
    };
    kl__etcd_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

static void test_keepalive_ttl_zero_ends_term(void **state)
{
    static const step steps[] = {
        LEAD_OBSERVED,
        {TIMER(3100), "KEEPALIVE(42)", KL_EE_LEADING, 9000},
        /* gone at the server: nothing to release (nor to revoke) */
        {KEPT(3200, &ka_gone), "STOPPED[gone] DONE", KL_EE_DONE, NO_TIMER},
    };
    kl__etcd_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

static void test_deadline_without_answer_steps_down(void **state)
{
    static const step steps[] = {
        LEAD_OBSERVED,
        {TIMER(3100), "KEEPALIVE(42)", KL_EE_LEADING, 9000},
        /* no answer: at the deadline STOPPED at once, then resign + revoke
         * (the lease may still live: the answers may be what was lost) */
        {TIMER(AT_TIMER), "STOPPED[deadline] CANCEL(keepalive) CANCEL(observe) DELETE_KEY(e/2a,5)",
         KL_EE_RELEASING, 18000},
        {KEPT(9100, &ka_ok), "", KL_EE_RELEASING, 18000}, /* too late: cancelled */
        {TXN(9200, &txn_ok), "REVOKE(42)", KL_EE_RELEASING, 18000},
        {DONE_OK(9300, CAMP), "DONE", KL_EE_DONE, NO_TIMER},
    };
    kl__etcd_election_config cfg = default_config();
    run r;

    (void)state;
    run_init(&r, &cfg);
    run_steps(&r, steps, 6);
    /* false from the deadline on, before the TIMER is delivered */
    assert_true(kl__etcd_election_is_leader(&r.e, T0 + 9000 * MS - 1));
    assert_false(kl__etcd_election_is_leader(&r.e, T0 + 9000 * MS));
    run_steps(&r, steps + 6, KL_ARRAY_LEN(steps) - 6);
}

static void test_is_leader_false_at_deadline_without_event(void **state)
{
    static const step steps[] = {LEAD, {TIMER(3100), "KEEPALIVE(42)", KL_EE_LEADING, 9000}};
    kl__etcd_election_config cfg = default_config();
    run r;

    (void)state;
    run_init(&r, &cfg);
    run_steps(&r, steps, KL_ARRAY_LEN(steps));
    assert_int_equal(r.e.state, KL_EE_LEADING);
    assert_true(kl__etcd_election_is_leader(&r.e, T0 + 9000 * MS - 1));
    assert_false(kl__etcd_election_is_leader(&r.e, T0 + 9000 * MS));
}

static void test_late_keepalive_answer_does_not_extend(void **state)
{
    static const step steps[] = {
        LEAD,
        {TIMER(3100), "KEEPALIVE(42)", KL_EE_LEADING, 9000},
        /* an answer delivered at the deadline: the deadline wins */
        {KEPT(9000, &ka_ok),
         "STOPPED[deadline] CANCEL(keepalive) CANCEL(observe) DELETE_KEY(e/2a,5)", KL_EE_RELEASING,
         18000},
    };
    kl__etcd_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

static void test_deadline_without_release_on_cancel(void **state)
{
    static const step steps[] = {
        LEAD,
        {TIMER(3100), "KEEPALIVE(42)", KL_EE_LEADING, 9000},
        /* a leader's lease is left to expire: no REVOKE of it either */
        {TIMER(AT_TIMER), "STOPPED[deadline] DONE", KL_EE_DONE, NO_TIMER},
    };
    kl__etcd_election_config cfg = default_config();

    (void)state;
    cfg.release_on_cancel = 0;
    RUN(cfg, steps);
}

static void test_candidate_lease_lost_regrants(void **state)
{
    static const step steps[] = {
        WAIT,
        {TIMER(3100), "KEEPALIVE(42)", KL_EE_WAITING, 9000},
        /* a candidate starts over with a new lease; OBSERVE goes on; the
         * old lease is gone: no REVOKE */
        {KEPT(3200, &ka_gone), "CANCEL(campaign) GRANT(9)", KL_EE_GRANTING, NO_TIMER},
        {WATCHED(3250, CAMP, &w_del_pred), "", KL_EE_GRANTING, NO_TIMER}, /* cancelled watch */
        {GRANTED(3300, &lease_43), "TXN_CREATE(e/2b,me,43)", KL_EE_CREATING, 6300},
        {WATCHED(3400, OBS, &w_put_pred), "NEW_LEADER(other2,3)", KL_EE_CREATING, 6300},
    };
    kl__etcd_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

static void test_candidate_deadline_regrants(void **state)
{
    static const step steps[] = {
        WAIT,
        {TIMER(3100), "KEEPALIVE(42)", KL_EE_WAITING, 9000},
        /* the old lease is revoked on the keepalive channel, see below */
        {TIMER(AT_TIMER), "CANCEL(campaign) CANCEL(keepalive) GRANT(9) REVOKE(42)", KL_EE_GRANTING,
         NO_TIMER},
    };
    kl__etcd_election_config cfg = default_config();
    run r;

    (void)state;
    run_init(&r, &cfg);
    run_steps(&r, steps, KL_ARRAY_LEN(steps));
    assert_int_equal(r.stopped, 0); /* the election goes on */
}

static void test_lease_not_found_on_create_regrants(void **state)
{
    static const step steps[] = {
        {START(0), "GRANT(9)", KL_EE_GRANTING, NO_TIMER},
        {GRANTED(100, &lease_42), "TXN_CREATE(e/2a,me,42)", KL_EE_CREATING, 3100},
        /* etcd's "requested lease not found": gone, no REVOKE */
        {FAILED(200, CAMP, K8SLEASE_ENOTFOUND), "GRANT(9)", KL_EE_GRANTING, NO_TIMER},
    };
    kl__etcd_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

/* ---- the revoke of a lease presumed lost ---- */

static void test_presumed_lost_lease_revoked(void **state)
{
    static const step steps[] = {
        WAIT,
        {TIMER(3100), "KEEPALIVE(42)", KL_EE_WAITING, 9000},
        /* no answer by the deadline: 42 is presumed lost, but it may live
         * and its key e/2a, older than the next one, would hold the queue
         * up: REVOKE(42) on the keepalive channel, next to the GRANT */
        {TIMER(AT_TIMER), "CANCEL(campaign) CANCEL(keepalive) GRANT(9) REVOKE(42)", KL_EE_GRANTING,
         NO_TIMER},
        /* the GRANT does not wait for it */
        {GRANTED(9100, &lease_43), "TXN_CREATE(e/2b,me,43)", KL_EE_CREATING, 12100},
        /* its answer changes nothing: 43 keeps its keepalive schedule */
        {DONE_OK(9150, KA), "", KL_EE_CREATING, 12100},
        {TIMER(AT_TIMER), "KEEPALIVE(43)", KL_EE_CREATING, 18000},
        {KEPT(12200, &ka_43_ok), "", KL_EE_CREATING, 15200},
    };
    static const step not_found[] = {
        WAIT,
        {TIMER(3100), "KEEPALIVE(42)", KL_EE_WAITING, 9000},
        {TIMER(AT_TIMER), "CANCEL(campaign) CANCEL(keepalive) GRANT(9) REVOKE(42)", KL_EE_GRANTING,
         NO_TIMER},
        /* expired meanwhile: nothing more to do, nothing to retry */
        {FAILED(9050, KA, K8SLEASE_ENOTFOUND), "", KL_EE_GRANTING, NO_TIMER},
        {GRANTED(9100, &lease_43), "TXN_CREATE(e/2b,me,43)", KL_EE_CREATING, 12100},
    };
    kl__etcd_election_config cfg = default_config();
    run r;

    (void)state;
    run_init(&r, &cfg);
    run_steps(&r, steps, KL_ARRAY_LEN(steps));
    assert_int_equal(r.stopped, 0);
    assert_int_equal(r.e.revoke_id, 0);
    RUN(cfg, not_found);
}

static void test_presumed_lost_revoke_retried_until_granted(void **state)
{
    static const step steps[] = {
        WAIT,
        {TIMER(3100), "KEEPALIVE(42)", KL_EE_WAITING, 9000},
        {TIMER(AT_TIMER), "CANCEL(campaign) CANCEL(keepalive) GRANT(9) REVOKE(42)", KL_EE_GRANTING,
         NO_TIMER},
        /* etcd is down: both fail, both are retried after retry_period */
        {FAILED(9010, KA, K8SLEASE_ETRANSPORT), "", KL_EE_GRANTING, 10010},
        {FAILED(9020, CAMP, K8SLEASE_ETRANSPORT), "", KL_EE_GRANTING, 10010},
        {TIMER(AT_TIMER), "REVOKE(42)", KL_EE_GRANTING, 10020},
        {TIMER(AT_TIMER), "GRANT(9)", KL_EE_GRANTING, NO_TIMER},
        {FAILED(10030, KA, K8SLEASE_ETRANSPORT), "", KL_EE_GRANTING, 11030},
        /* etcd answers again: the revoke waiting for its retry goes at
         * once, for the last time */
        {GRANTED(10100, &lease_43), "TXN_CREATE(e/2b,me,43) REVOKE(42)", KL_EE_CREATING, 13100},
        {FAILED(10200, KA, K8SLEASE_ETRANSPORT), "", KL_EE_CREATING, 13100},
        {TIMER(AT_TIMER), "KEEPALIVE(43)", KL_EE_CREATING, 19020},
    };
    kl__etcd_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

static void test_presumed_lost_revoke_in_flight_at_grant(void **state)
{
    static const step gives_way[] = {
        WAIT,
        {TIMER(3100), "KEEPALIVE(42)", KL_EE_WAITING, 9000},
        {TIMER(AT_TIMER), "CANCEL(campaign) CANCEL(keepalive) GRANT(9) REVOKE(42)", KL_EE_GRANTING,
         NO_TIMER},
        /* granted while the REVOKE is in flight: not sent again */
        {GRANTED(9100, &lease_43), "TXN_CREATE(e/2b,me,43)", KL_EE_CREATING, 12100},
        /* still unanswered when 43's first keepalive is due: the keepalive
         * takes the channel */
        {TIMER(AT_TIMER), "CANCEL(keepalive) KEEPALIVE(43)", KL_EE_CREATING, 18000},
        {KEPT(12200, &ka_43_ok), "", KL_EE_CREATING, 15200},
    };
    static const step last_try[] = {
        WAIT,
        {TIMER(3100), "KEEPALIVE(42)", KL_EE_WAITING, 9000},
        {TIMER(AT_TIMER), "CANCEL(campaign) CANCEL(keepalive) GRANT(9) REVOKE(42)", KL_EE_GRANTING,
         NO_TIMER},
        {GRANTED(9100, &lease_43), "TXN_CREATE(e/2b,me,43)", KL_EE_CREATING, 12100},
        /* the attempt in flight at the GRANT was the last: not retried */
        {FAILED(9200, KA, K8SLEASE_ETIMEOUT), "", KL_EE_CREATING, 12100},
        {TIMER(AT_TIMER), "KEEPALIVE(43)", KL_EE_CREATING, 18000},
    };
    kl__etcd_election_config cfg = default_config();

    (void)state;
    RUN(cfg, gives_way);
    RUN(cfg, last_try);
}

/* A KEEPALIVE answer for the lost lease can neither renew the new one nor
 * pass for the REVOKE's answer. */
static void test_presumed_lost_stale_keepalive_ignored(void **state)
{
    static const step steps[] = {
        WAIT,
        {TIMER(3100), "KEEPALIVE(42)", KL_EE_WAITING, 9000},
        /* answered at the deadline: too late (the deadline is checked
         * first, and what it answers was cancelled) */
        {KEPT(9000, &ka_ok), "CANCEL(campaign) CANCEL(keepalive) GRANT(9) REVOKE(42)",
         KL_EE_GRANTING, NO_TIMER},
        /* the REVOKE was still in flight: this is its answer, retried */
        {FAILED(9050, KA, K8SLEASE_ETRANSPORT), "", KL_EE_GRANTING, 10050},
        {GRANTED(9100, &lease_43), "TXN_CREATE(e/2b,me,43) REVOKE(42)", KL_EE_CREATING, 12100},
        {DONE_OK(9150, KA), "", KL_EE_CREATING, 12100},
        {TIMER(AT_TIMER), "KEEPALIVE(43)", KL_EE_CREATING, 18000},
        /* an answer naming 42 while 43's keepalive is in flight: an error,
         * retried sooner, 43's deadline unchanged */
        {KEPT(12200, &ka_ok), "", KL_EE_CREATING, 13200},
    };
    kl__etcd_election_config cfg = default_config();
    run r;

    (void)state;
    run_init(&r, &cfg);
    run_steps(&r, steps, KL_ARRAY_LEN(steps));
    assert_int_equal(kl__etcd_election_lease_deadline(&r.e), T0 + 18000 * MS);
}

/* One revoke at a time: another loss or a stop abandons it. */
static void test_presumed_lost_revoke_abandoned(void **state)
{
    static const step gone[] = {
        WAIT,
        {TIMER(3100), "KEEPALIVE(42)", KL_EE_WAITING, 9000},
        {TIMER(AT_TIMER), "CANCEL(campaign) CANCEL(keepalive) GRANT(9) REVOKE(42)", KL_EE_GRANTING,
         NO_TIMER},
        {GRANTED(9100, &lease_43), "TXN_CREATE(e/2b,me,43)", KL_EE_CREATING, 12100},
        /* 43 not found: gone, not revoked; 42's last try is abandoned */
        {FAILED(9200, CAMP, K8SLEASE_ENOTFOUND), "CANCEL(keepalive) GRANT(9)", KL_EE_GRANTING,
         NO_TIMER},
        {DONE_OK(9250, KA), "", KL_EE_GRANTING, NO_TIMER}, /* cancelled: stale */
    };
    static const step presumed_again[] = {
        WAIT,
        {TIMER(3100), "KEEPALIVE(42)", KL_EE_WAITING, 9000},
        {TIMER(AT_TIMER), "CANCEL(campaign) CANCEL(keepalive) GRANT(9) REVOKE(42)", KL_EE_GRANTING,
         NO_TIMER},
        /* 43 granted late (sent at 9000: deadline 18000, before its first
         * keepalive at 19000), then presumed lost as well while 42's
         * revoke is still out: 43 takes its place */
        {GRANTED(16000, &lease_43), "TXN_CREATE(e/2b,me,43)", KL_EE_CREATING, 18000},
        {TIMER(AT_TIMER), "CANCEL(campaign) CANCEL(keepalive) GRANT(9) REVOKE(43)", KL_EE_GRANTING,
         NO_TIMER},
    };
    static const step stop[] = {
        WAIT,
        {TIMER(3100), "KEEPALIVE(42)", KL_EE_WAITING, 9000},
        {TIMER(AT_TIMER), "CANCEL(campaign) CANCEL(keepalive) GRANT(9) REVOKE(42)", KL_EE_GRANTING,
         NO_TIMER},
        /* no lease to release; DONE cancels the revoke */
        {STOP(9050, 1), "STOPPED DONE", KL_EE_DONE, NO_TIMER},
    };
    kl__etcd_election_config cfg = default_config();

    (void)state;
    RUN(cfg, gone);
    RUN(cfg, presumed_again);
    RUN(cfg, stop);
}

/* ---- errors and watches ---- */

static void test_errors_retry_after_retry_period(void **state)
{
    static const step steps[] = {
        {START(0), "GRANT(9)", KL_EE_GRANTING, NO_TIMER},
        {FAILED(100, CAMP, K8SLEASE_ETRANSPORT), "", KL_EE_GRANTING, 1100},
        {TIMER(1099), "", KL_EE_GRANTING, 1100},
        {TIMER(AT_TIMER), "GRANT(9)", KL_EE_GRANTING, NO_TIMER},
        {GRANTED(1200, &lease_42), "TXN_CREATE(e/2a,me,42)", KL_EE_CREATING, 4200},
        {FAILED(1300, CAMP, K8SLEASE_ESERVER), "", KL_EE_CREATING, 2300},
        {TIMER(AT_TIMER), "TXN_CREATE(e/2a,me,42)", KL_EE_CREATING, 4200},
        {TXN(2400, &created_5), RANGE_PRED(5) " " RANGE_LEADER, KL_EE_RANGING, 4200},
        {FAILED(2500, CAMP, K8SLEASE_EAUTH), "", KL_EE_RANGING, 3500},
        {FAILED(2500, OBS, K8SLEASE_ETIMEOUT), "", KL_EE_RANGING, 3500},
        {TIMER(AT_TIMER), RANGE_PRED(5) " " RANGE_LEADER, KL_EE_RANGING, 4200},
        {RANGED(3600, CAMP, &range_me), "STARTED(5) NEW_LEADER(me,5)", KL_EE_LEADING, 4200},
    };
    kl__etcd_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

static void test_ok_without_payload_is_an_error(void **state)
{
    static const step steps[] = {
        {START(0), "GRANT(9)", KL_EE_GRANTING, NO_TIMER},
        {DONE_OK(100, CAMP), "", KL_EE_GRANTING, 1100},
    };
    kl__etcd_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

static void test_compaction_while_waiting_ranges_again(void **state)
{
    static const step steps[] = {
        WAIT,
        {WATCHED(400, CAMP, &w_compacted), "CANCEL(campaign) " RANGE_PRED(5), KL_EE_RANGING, 3100},
        {RANGED(500, CAMP, &range_me_pred), "WATCH_KEY(campaign,e/1b,8)", KL_EE_WAITING, 3100},
        /* canceled for another reason: range again later */
        {WATCHED(600, CAMP, &w_denied), "CANCEL(campaign)", KL_EE_RANGING, 1600},
        {TIMER(AT_TIMER), RANGE_PRED(5), KL_EE_RANGING, 3100},
    };
    kl__etcd_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

static void test_watch_end_ranges_later(void **state)
{
    static const step steps[] = {
        WAIT,
        {FAILED(400, CAMP, K8SLEASE_ETRANSPORT), "", KL_EE_RANGING, 1400},
        {TIMER(AT_TIMER), RANGE_PRED(5), KL_EE_RANGING, 3100},
        {RANGED(1500, CAMP, &range_me_pred), "WATCH_KEY(campaign,e/1b,8)", KL_EE_WAITING, 3100},
        /* a clean end of the stream too */
        {DONE_OK(1600, CAMP), "", KL_EE_RANGING, 2600},
    };
    kl__etcd_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

/* ---- observe ---- */

static void test_new_leader_on_every_change(void **state)
{
    static const step steps[] = {
        WAIT,
        /* a proclaim: same epoch, new value */
        {WATCHED(400, OBS, &w_put_pred), "NEW_LEADER(other2,3)", KL_EE_WAITING, 3100},
        {WATCHED(450, OBS, &w_put_pred_same), "", KL_EE_WAITING, 3100},
        {WATCHED(500, OBS, &w_del_pred), "CANCEL(observe) " RANGE_LEADER, KL_EE_WAITING, 3100},
        {RANGED(600, OBS, &range_leader_third), "NEW_LEADER(third,4) WATCH_KEY(observe,e/1c,10)",
         KL_EE_WAITING, 3100},
        {WATCHED(700, OBS, &w_compacted), "CANCEL(observe) " RANGE_LEADER, KL_EE_WAITING, 3100},
        /* an answer older than what was reported is not reported */
        {RANGED(800, OBS, &range_leader_other_stale), "WATCH_KEY(observe,e/1b,7)", KL_EE_WAITING,
         3100},
        {FAILED(900, OBS, K8SLEASE_ETRANSPORT), "", KL_EE_WAITING, 1900},
        {TIMER(AT_TIMER), RANGE_LEADER, KL_EE_WAITING, 3100},
        /* no leader at all */
        {RANGED(2000, OBS, &range_none_later), "NEW_LEADER(,0)", KL_EE_WAITING, 3000},
    };
    kl__etcd_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

static void test_new_leader_once_per_watch_message(void **state)
{
    static const step steps[] = {
        WAIT,
        /* several proclaims (and another key) in one message: one report,
         * with the last value */
        {WATCHED(400, OBS, &w_puts_pred), "NEW_LEADER(v3,3)", KL_EE_WAITING, 3100},
    };
    kl__etcd_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

static void test_own_key_reported_by_campaign_first(void **state)
{
    static const step steps[] = {
        {START(0), "GRANT(9)", KL_EE_GRANTING, NO_TIMER},
        {GRANTED(100, &lease_42), "TXN_CREATE(e/2a,me,42)", KL_EE_CREATING, 3100},
        {TXN(200, &created_5), RANGE_PRED(5) " " RANGE_LEADER, KL_EE_RANGING, 3100},
        /* OBSERVE answers first and sees us leading: not reported yet */
        {RANGED(250, OBS, &range_me), "WATCH_KEY(observe,e/2a,6)", KL_EE_RANGING, 3100},
        {RANGED(300, CAMP, &range_me), "STARTED(5) NEW_LEADER(me,5)", KL_EE_LEADING, 3100},
    };
    kl__etcd_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

static void test_own_key_deleted_while_leading(void **state)
{
    static const step by_watch[] = {
        LEAD_OBSERVED,
        /* the DELETE of an older incarnation is not ours */
        {WATCHED(500, OBS, &w_del_me_old), "CANCEL(observe) " RANGE_LEADER, KL_EE_LEADING, 3100},
        {RANGED(550, OBS, &range_me_later), "WATCH_KEY(observe,e/2a,11)", KL_EE_LEADING, 3100},
        /* etcdctl del e/2a: term over; the key is gone, the lease is not */
        {WATCHED(600, OBS, &w_del_me), "STOPPED[deleted] CANCEL(observe) REVOKE(42)",
         KL_EE_RELEASING, 9600},
        {DONE_OK(700, CAMP), "DONE", KL_EE_DONE, NO_TIMER},
    };
    static const step by_range[] = {
        LEAD,
        {RANGED(400, OBS, &range_leader_third), "STOPPED[deleted] REVOKE(42)", KL_EE_RELEASING,
         9400},
        {FAILED(500, CAMP, K8SLEASE_ENOTFOUND), "DONE", KL_EE_DONE, NO_TIMER},
    };
    static const step stale_range[] = {
        {START(0), "GRANT(9)", KL_EE_GRANTING, NO_TIMER},
        {GRANTED(100, &lease_42), "TXN_CREATE(e/2a,me,42)", KL_EE_CREATING, 3100},
        {TXN(200, &created_5), RANGE_PRED(5) " " RANGE_LEADER, KL_EE_RANGING, 3100},
        {RANGED(300, CAMP, &range_me_pred), "WATCH_KEY(campaign,e/1b,8)", KL_EE_WAITING, 3100},
        {WATCHED(400, CAMP, &w_del_pred), "CANCEL(campaign) " RANGE_PRED(5), KL_EE_RANGING, 3100},
        {RANGED(500, CAMP, &range_me_later), "STARTED(5) NEW_LEADER(me,5)", KL_EE_LEADING, 3100},
        /* OBSERVE's answer from before (revision 7) shows the previous
         * leader: neither a loss nor a report */
        {RANGED(600, OBS, &range_leader_other), "WATCH_KEY(observe,e/1b,8)", KL_EE_LEADING, 3100},
    };
    kl__etcd_election_config cfg = default_config();

    (void)state;
    RUN(cfg, by_watch);
    RUN(cfg, by_range);
    RUN(cfg, stale_range);
}

/* ---- stop ---- */

static void test_stop_while_leading_releases(void **state)
{
    static const step steps[] = {
        LEAD_OBSERVED,
        {STOP(1000, 1), "STOPPED CANCEL(observe) DELETE_KEY(e/2a,5)", KL_EE_RELEASING, 10000},
        {STOP(1001, 1), "", KL_EE_RELEASING, 10000},
        {TXN(1100, &txn_ok), "REVOKE(42)", KL_EE_RELEASING, 10000},
        {DONE_OK(1200, CAMP), "DONE", KL_EE_DONE, NO_TIMER},
    };
    kl__etcd_election_config cfg = default_config();
    run r;

    (void)state;
    run_init(&r, &cfg);
    run_steps(&r, steps, 5);
    assert_true(kl__etcd_election_is_leader(&r.e, T0 + 999 * MS));
    run_steps(&r, steps + 5, KL_ARRAY_LEN(steps) - 5);
    assert_false(kl__etcd_election_is_leader(&r.e, T0 + 1000 * MS));
}

static void test_stop_while_leading_without_release(void **state)
{
    static const step steps[] = {
        LEAD_OBSERVED,
        {TIMER(3100), "KEEPALIVE(42)", KL_EE_LEADING, 9000},
        /* no revoke: the lease expires by itself, keepalives stop */
        {STOP(3150, 0), "STOPPED DONE", KL_EE_DONE, NO_TIMER},
    };
    kl__etcd_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

static void test_stop_while_waiting(void **state)
{
    static const step steps[] = {
        WAIT,
        {STOP(400, 1), "STOPPED CANCEL(campaign) CANCEL(observe) DELETE_KEY(e/2a,5)",
         KL_EE_RELEASING, 9400},
        {WATCHED(450, CAMP, &w_del_pred), "", KL_EE_RELEASING, 9400}, /* cancelled */
        {FAILED(500, CAMP, K8SLEASE_ETRANSPORT), "REVOKE(42)", KL_EE_RELEASING, 9400},
        {FAILED(600, CAMP, K8SLEASE_ETRANSPORT), "", KL_EE_RELEASING, 1600},
        {TIMER(AT_TIMER), "REVOKE(42)", KL_EE_RELEASING, 9400},
        {DONE_OK(1700, CAMP), "DONE", KL_EE_DONE, NO_TIMER},
    };
    kl__etcd_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

static void test_stop_while_creating_revokes_only(void **state)
{
    static const step steps[] = {
        {START(0), "GRANT(9)", KL_EE_GRANTING, NO_TIMER},
        {GRANTED(100, &lease_42), "TXN_CREATE(e/2a,me,42)", KL_EE_CREATING, 3100},
        /* the create may land or not: REVOKE deletes the key either way */
        {STOP(150, 1), "STOPPED CANCEL(campaign) REVOKE(42)", KL_EE_RELEASING, 9150},
        {DONE_OK(200, CAMP), "DONE", KL_EE_DONE, NO_TIMER},
    };
    kl__etcd_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

static void test_stop_before_lease(void **state)
{
    static const step idle[] = {{STOP(0, 1), "STOPPED DONE", KL_EE_DONE, NO_TIMER}};
    static const step granting[] = {
        {START(0), "GRANT(9)", KL_EE_GRANTING, NO_TIMER},
        {STOP(10, 1), "STOPPED DONE", KL_EE_DONE, NO_TIMER},
        {GRANTED(100, &lease_42), "", KL_EE_DONE, NO_TIMER},
    };
    kl__etcd_election_config cfg = default_config();

    (void)state;
    RUN(cfg, idle);
    RUN(cfg, granting);
}

static void test_release_gives_up_after_ttl(void **state)
{
    static const step steps[] = {
        LEAD,
        {STOP(1000, 1), "STOPPED CANCEL(observe) DELETE_KEY(e/2a,5)", KL_EE_RELEASING, 10000},
        {FAILED(1100, CAMP, K8SLEASE_ETRANSPORT), "REVOKE(42)", KL_EE_RELEASING, 10000},
        {FAILED(5000, CAMP, K8SLEASE_ETRANSPORT), "", KL_EE_RELEASING, 6000},
        {TIMER(AT_TIMER), "REVOKE(42)", KL_EE_RELEASING, 10000},
        /* TTL after the stop the lease is surely gone: stop trying */
        {TIMER(AT_TIMER), "DONE", KL_EE_DONE, NO_TIMER},
    };
    kl__etcd_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

static void test_events_after_done_ignored(void **state)
{
    static const step steps[] = {
        LEAD,
        {STOP(1000, 0), "STOPPED DONE", KL_EE_DONE, NO_TIMER},
        {START(1100), "", KL_EE_DONE, NO_TIMER},
        {TIMER(1200), "", KL_EE_DONE, NO_TIMER},
        {KEPT(1300, &ka_ok), "", KL_EE_DONE, NO_TIMER},
        {RANGED(1400, OBS, &range_me), "", KL_EE_DONE, NO_TIMER},
        {WATCHED(1500, OBS, &w_del_me), "", KL_EE_DONE, NO_TIMER},
        {STOP(1600, 1), "", KL_EE_DONE, NO_TIMER},
    };
    kl__etcd_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

static void test_stale_events_ignored(void **state)
{
    static const step steps[] = {
        {START(0), "GRANT(9)", KL_EE_GRANTING, NO_TIMER},
        /* nothing in flight on these channels */
        {KEPT(10, &ka_ok), "", KL_EE_GRANTING, NO_TIMER},
        {RANGED(20, OBS, &range_me), "", KL_EE_GRANTING, NO_TIMER},
        {WATCHED(30, CAMP, &w_del_pred), "", KL_EE_GRANTING, NO_TIMER}, /* not a watch */
        {FAILED(40, KL_EE_CH_COUNT, K8SLEASE_ETRANSPORT), "", KL_EE_GRANTING, NO_TIMER},
        {GRANTED(100, &lease_42), "TXN_CREATE(e/2a,me,42)", KL_EE_CREATING, 3100},
    };
    kl__etcd_election_config cfg = default_config();

    (void)state;
    RUN(cfg, steps);
}

/* STOPPED exactly once whatever the path: the harness counts it in every
 * test; here the paths that end twice over (deadline then stop, loss then
 * stop, stop then loss). */
static void test_stopped_exactly_once(void **state)
{
    static const step deadline_then_stop[] = {
        LEAD,
        {TIMER(3100), "KEEPALIVE(42)", KL_EE_LEADING, 9000},
        /* the deadline passed first: it is why */
        {STOP(9000, 1), "STOPPED[deadline] CANCEL(keepalive) CANCEL(observe) DELETE_KEY(e/2a,5)",
         KL_EE_RELEASING, 18000},
        {STOP(9001, 0), "", KL_EE_RELEASING, 18000},
        {TXN(9100, &txn_failed), "REVOKE(42)", KL_EE_RELEASING, 18000},
        {FAILED(9200, CAMP, K8SLEASE_ENOTFOUND), "DONE", KL_EE_DONE, NO_TIMER},
    };
    static const step loss_then_stop[] = {
        LEAD_OBSERVED,
        {WATCHED(500, OBS, &w_del_me), "STOPPED[deleted] CANCEL(observe) REVOKE(42)",
         KL_EE_RELEASING, 9500},
        {STOP(600, 1), "", KL_EE_RELEASING, 9500},
        {DONE_OK(700, CAMP), "DONE", KL_EE_DONE, NO_TIMER},
    };
    static const step stop_then_gone[] = {
        LEAD,
        {TIMER(3100), "KEEPALIVE(42)", KL_EE_LEADING, 9000},
        {STOP(3150, 1), "STOPPED CANCEL(keepalive) CANCEL(observe) DELETE_KEY(e/2a,5)",
         KL_EE_RELEASING, 12150},
        {KEPT(3200, &ka_gone), "", KL_EE_RELEASING, 12150},
        {TXN(3300, &txn_ok), "REVOKE(42)", KL_EE_RELEASING, 12150},
        {DONE_OK(3400, CAMP), "DONE", KL_EE_DONE, NO_TIMER},
    };
    static const step candidate_stop[] = {
        WAIT,
        {STOP(400, 0), "STOPPED DONE", KL_EE_DONE, NO_TIMER},
    };
    kl__etcd_election_config cfg = default_config();

    (void)state;
    RUN(cfg, deadline_then_stop);
    RUN(cfg, loss_then_stop);
    RUN(cfg, stop_then_gone);
    RUN(cfg, candidate_stop);
}

/* ---- buffers ---- */

static void test_long_leader_value_truncated_and_compared(void **state)
{
    static char a[2000], b[2000];
    static kl__etcd_kv kv_a[1], kv_b[1];
    static kl__etcd_range ra = {7, kv_a, 1, 0, 1}, rb = {8, kv_b, 1, 0, 1};
    kl__etcd_election_config cfg = default_config();
    step steps[] = {
        {START(0), "GRANT(9)", KL_EE_GRANTING, NO_TIMER},
        {GRANTED(100, &lease_42), "TXN_CREATE(e/2a,me,42)", KL_EE_CREATING, 3100},
        {TXN(200, &created_5), RANGE_PRED(5) " " RANGE_LEADER, KL_EE_RANGING, 3100},
        {RANGED(300, OBS, &ra), "NEW_LEADER(<511 bytes>,3) WATCH_KEY(observe,e/1b,8)",
         KL_EE_RANGING, 3100},
        {FAILED(400, OBS, K8SLEASE_ETRANSPORT), "", KL_EE_RANGING, 1400},
        {TIMER(AT_TIMER), RANGE_LEADER, KL_EE_RANGING, 3100},
        /* differs only after byte 1500: still a change */
        {RANGED(1500, OBS, &rb), "NEW_LEADER(<511 bytes>,3) WATCH_KEY(observe,e/1b,9)",
         KL_EE_RANGING, 3100},
    };
    run r;

    (void)state;
    memset(a, 'x', sizeof(a));
    memcpy(b, a, sizeof(b));
    b[1500] = 'y';
    kv_a[0] = (kl__etcd_kv)KV("e/1b", "", 3, 3, 27);
    kv_a[0].value = a;
    kv_a[0].value_len = sizeof(a);
    kv_b[0] = kv_a[0];
    kv_b[0].value = b;
    run_init(&r, &cfg);
    run_steps(&r, steps, KL_ARRAY_LEN(steps));
    assert_int_equal(r.e.reported_len, sizeof(b));
}

static void test_long_predecessor_key_polled(void **state)
{
    static char key[KL_EE_KEY_MAX + 10];
    static kl__etcd_kv kvs[2] = {KV("e/2a", "me", 5, 5, 42), KV("e/1b", "x", 3, 3, 27)};
    static kl__etcd_range r2 = {7, kvs, 2, 0, 2};
    kl__etcd_election_config cfg = default_config();
    step steps[] = {
        {START(0), "GRANT(9)", KL_EE_GRANTING, NO_TIMER},
        {GRANTED(100, &lease_42), "TXN_CREATE(e/2a,me,42)", KL_EE_CREATING, 3100},
        {TXN(200, &created_5), RANGE_PRED(5) " " RANGE_LEADER, KL_EE_RANGING, 3100},
        /* a predecessor key too long to keep: range again later */
        {RANGED(300, CAMP, &r2), "", KL_EE_RANGING, 1300},
        {TIMER(AT_TIMER), RANGE_PRED(5), KL_EE_RANGING, 3100},
    };
    run r;

    (void)state;
    memset(key, 'k', sizeof(key));
    memcpy(key, "e/", 2);
    kvs[1].key = key;
    kvs[1].key_len = sizeof(key);
    run_init(&r, &cfg);
    run_steps(&r, steps, KL_ARRAY_LEN(steps));
}

static void test_state_names(void **state)
{
    (void)state;
    assert_string_equal(kl__etcd_election_state_name(KL_EE_IDLE), "IDLE");
    assert_string_equal(kl__etcd_election_state_name(KL_EE_WAITING), "WAITING");
    assert_string_equal(kl__etcd_election_state_name(KL_EE_DONE), "DONE");
    assert_string_equal(kl__etcd_election_state_name((kl__etcd_election_state)99), "?");
}

/* ------------------------------------------------------------------------ */
/* Simulation: three candidates, one in-memory etcd                         */
/* ------------------------------------------------------------------------ */

/* The fake etcd keeps etcd's semantics for what an election uses: one
 * revision per write, leases that expire TTL after their last grant or
 * keepalive (by the simulated clock, when the server processes it) and take
 * their keys with them, txn compares on create_revision, ranges sorted by
 * create revision with max_create_revision and limit, watches that replay
 * history from their start revision. Each candidate has a driver that runs
 * its actions with network delays (and, in the chaos runs, lost requests,
 * lost answers and frozen processes).
 *
 * Invariants checked after every event: at most one candidate is_leader;
 * a candidate that is_leader holds the oldest key at the server, the one its
 * epoch names (the fencing property); STARTED epochs strictly increase;
 * STOPPED at most once per election, DONE last. */

#define SIM_N        3
#define SIM_KEYS     32
#define SIM_LEASES   256
#define SIM_HIST     8192
#define SIM_QUEUE    1024
#define SIM_STR      40
#define SIM_MAX_RUNS 64

typedef struct sim_kv {
    char key[SIM_STR], value[SIM_STR];
    int64_t create, mod, lease;
} sim_kv;

typedef struct sim_hist {
    int del;
    sim_kv kv;
} sim_hist;

typedef struct sim_watch {
    int active;
    uint64_t gen;
    char key[SIM_STR];
    int64_t next_rev;
} sim_watch;

typedef struct sim_item {
    int64_t at;
    int kind; /* ARRIVE, RESULT, WATCHMSG */
    int cand, run, ch;
    uint64_t gen;
    /* ARRIVE: the request */
    kl__etcd_election_action_type req;
    char key[SIM_STR], value[SIM_STR];
    int64_t lease_id, ttl_s, rev, limit;
    int lose_answer;
    /* RESULT / WATCHMSG: the answer, pointers fixed at delivery */
    int status;
    int has_lease, has_txn, has_range;
    kl__etcd_lease lease;
    kl__etcd_txn txn;
    kl__etcd_op op;
    kl__etcd_range range;
    kl__etcd_watch_msg msg;
    kl__etcd_watch_event wev;
    kl__etcd_kv kvs[2];
    char kv_keys[2][SIM_STR], kv_values[2][SIM_STR];
    int n_kvs;
} sim_item;

enum { SIM_ARRIVE, SIM_RESULT, SIM_WATCHMSG };

typedef struct sim_cand {
    kl__etcd_election e;
    int run; /* which election of this candidate (restarts) */
    int active, done, stopped;
    uint64_t gen[KL_EE_CH_COUNT];
    sim_watch watch[KL_EE_CH_COUNT];
    int64_t frozen_until;
    int64_t base_delay_ms;
    char value[8];
    int starts;
} sim_cand;

typedef struct sim {
    int64_t now;
    uint64_t rng;
    /* etcd */
    int64_t rev, next_lease;
    sim_kv kvs[SIM_KEYS];
    int n_kvs;
    struct {
        int64_t id, ttl_s, expires;
        int live;
    } leases[SIM_LEASES];
    int n_leases;
    sim_hist hist[SIM_HIST];
    int n_hist;
    /* network */
    sim_item q[SIM_QUEUE];
    int n_q;
    int lose_percent; /* of requests and of answers */
    int down;         /* etcd killed: requests fail, no lease expires (sim_etcd_kill) */
    /* candidates */
    sim_cand c[SIM_N];
    kl__etcd_election_config cfg;
    /* record */
    int64_t last_epoch;
    int leaders[64]; /* candidate of each STARTED, in order */
    int n_leaders;
    int n_stopped_total;
} sim;

static uint64_t sim_rand(sim *s)
{
    uint64_t z = (s->rng += 0x9e3779b97f4a7c15u);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static int sim_chance(sim *s, int percent)
{
    return (int)(sim_rand(s) % 100) < percent;
}

/* ---- the fake etcd ---- */

static int has_prefix(const char *key, const char *prefix)
{
    return strncmp(key, prefix, strlen(prefix)) == 0;
}

static sim_kv *sim_find(sim *s, const char *key)
{
    for (int i = 0; i < s->n_kvs; i++)
        if (!strcmp(s->kvs[i].key, key))
            return &s->kvs[i];
    return NULL;
}

static void sim_record(sim *s, int del, const sim_kv *kv)
{
    assert_true(s->n_hist < SIM_HIST);
    s->hist[s->n_hist].del = del;
    s->hist[s->n_hist].kv = *kv;
    if (del) {
        s->hist[s->n_hist].kv.mod = s->rev;
        s->hist[s->n_hist].kv.value[0] = '\0';
    }
    s->n_hist++;
}

static void sim_delete(sim *s, sim_kv *kv)
{
    s->rev++;
    sim_record(s, 1, kv);
    *kv = s->kvs[--s->n_kvs];
}

static void sim_put(sim *s, const char *key, const char *value, int64_t lease)
{
    sim_kv *kv = sim_find(s, key);

    s->rev++;
    if (!kv) {
        assert_true(s->n_kvs < SIM_KEYS);
        kv = &s->kvs[s->n_kvs++];
        memset(kv, 0, sizeof(*kv));
        snprintf(kv->key, sizeof(kv->key), "%s", key);
        kv->create = s->rev;
    }
    snprintf(kv->value, sizeof(kv->value), "%s", value);
    kv->mod = s->rev;
    kv->lease = lease;
    sim_record(s, 0, kv);
}

static int sim_lease_index(sim *s, int64_t id)
{
    for (int i = 0; i < s->n_leases; i++)
        if (s->leases[i].id == id && s->leases[i].live)
            return i;
    return -1;
}

static void sim_revoke(sim *s, int li)
{
    s->leases[li].live = 0;
    for (int i = 0; i < s->n_kvs;)
        if (s->kvs[i].lease == s->leases[li].id)
            sim_delete(s, &s->kvs[i]);
        else
            i++;
}

static void sim_expire(sim *s)
{
    if (s->down)
        return;
    for (int i = 0; i < s->n_leases; i++)
        if (s->leases[i].live && s->leases[i].expires <= s->now)
            sim_revoke(s, i);
}

/* Keys under prefix, sorted by create revision (ascending or descending),
 * at most max_create (0: any), limit n. */
static int sim_range(sim *s, const char *prefix, int64_t max_create, int descend, int limit,
                     sim_kv *out)
{
    int n = 0;

    for (int k = 0; k < limit; k++) {
        const sim_kv *best = NULL;

        for (int i = 0; i < s->n_kvs; i++) {
            const sim_kv *kv = &s->kvs[i];
            int taken = 0;

            if (!has_prefix(kv->key, prefix) || (max_create && kv->create > max_create))
                continue;
            for (int j = 0; j < n; j++)
                taken |= out[j].create == kv->create;
            if (taken)
                continue;
            if (!best || (descend ? kv->create > best->create : kv->create < best->create))
                best = kv;
        }
        if (!best)
            break;
        out[n++] = *best;
    }
    return n;
}

/* ---- the network ---- */

static int64_t sim_delay(sim *s, int cand)
{
    return (s->c[cand].base_delay_ms + (int64_t)(sim_rand(s) % 20)) * MS;
}

static sim_item *sim_enqueue(sim *s, int kind, int cand, int ch, int64_t at)
{
    sim_item *it;

    assert_true(s->n_q < SIM_QUEUE);
    it = &s->q[s->n_q++];
    memset(it, 0, sizeof(*it));
    it->kind = kind;
    it->cand = cand;
    it->run = s->c[cand].run;
    it->ch = ch;
    it->gen = s->c[cand].gen[ch];
    it->at = at;
    return it;
}

static void sim_set_kv(sim_item *it, int i, const sim_kv *kv, int del)
{
    snprintf(it->kv_keys[i], SIM_STR, "%s", kv->key);
    snprintf(it->kv_values[i], SIM_STR, "%s", del ? "" : kv->value);
    it->kvs[i].key_len = strlen(kv->key);
    it->kvs[i].value_len = del ? 0 : strlen(kv->value);
    it->kvs[i].create_revision = del ? 0 : kv->create;
    it->kvs[i].mod_revision = kv->mod;
    it->kvs[i].version = 1;
    it->kvs[i].lease = del ? 0 : kv->lease;
}

/* Watches replay history from their next revision: every change of their
 * key reaches the candidate, in order, one message per event. */
static void sim_pump_watches(sim *s)
{
    for (int c = 0; c < SIM_N; c++) {
        for (int ch = 0; ch < KL_EE_CH_COUNT; ch++) {
            sim_watch *w = &s->c[c].watch[ch];

            if (!w->active || w->gen != s->c[c].gen[ch])
                continue;
            for (int h = 0; h < s->n_hist; h++) {
                const sim_hist *ev = &s->hist[h];
                sim_item *it;

                if (ev->kv.mod < w->next_rev || strcmp(ev->kv.key, w->key) != 0)
                    continue;
                it = sim_enqueue(s, SIM_WATCHMSG, c, ch, s->now + sim_delay(s, c));
                it->gen = w->gen;
                it->msg.revision = ev->kv.mod;
                it->wev.type = ev->del ? KL_ETCD_EVENT_DELETE : KL_ETCD_EVENT_PUT;
                sim_set_kv(it, 0, &ev->kv, ev->del);
                it->n_kvs = 1;
                w->next_rev = ev->kv.mod + 1;
            }
        }
    }
}

/* The server handles a request that arrived; the answer goes back later. */
static void sim_serve(sim *s, const sim_item *rq)
{
    sim_cand *cd = &s->c[rq->cand];
    sim_item *it;
    sim_kv kvs[2], *kv;
    int li, n;

    if (s->down) { /* connection refused */
        it = sim_enqueue(s, SIM_RESULT, rq->cand, rq->ch, s->now + sim_delay(s, rq->cand));
        it->gen = rq->gen;
        it->run = rq->run;
        it->status = K8SLEASE_ETRANSPORT;
        return;
    }
    if (rq->req == KL_EE_ACT_WATCH_KEY) {
        sim_watch *w = &cd->watch[rq->ch];

        w->active = 1;
        w->gen = rq->gen;
        snprintf(w->key, sizeof(w->key), "%s", rq->key);
        w->next_rev = rq->rev;
        return;
    }
    it = sim_enqueue(s, SIM_RESULT, rq->cand, rq->ch, s->now + sim_delay(s, rq->cand));
    it->gen = rq->gen;
    it->run = rq->run;
    switch (rq->req) {
    case KL_EE_ACT_GRANT:
        assert_true(s->n_leases < SIM_LEASES);
        li = s->n_leases++;
        s->leases[li].id = s->next_lease++;
        s->leases[li].ttl_s = rq->ttl_s;
        s->leases[li].expires = s->now + rq->ttl_s * 1000 * MS;
        s->leases[li].live = 1;
        it->has_lease = 1;
        it->lease = (kl__etcd_lease){s->rev, s->leases[li].id, rq->ttl_s, 0};
        break;
    case KL_EE_ACT_KEEPALIVE:
        li = sim_lease_index(s, rq->lease_id);
        it->has_lease = 1;
        it->lease = (kl__etcd_lease){s->rev, rq->lease_id, 0, 0};
        if (li >= 0) {
            s->leases[li].expires = s->now + s->leases[li].ttl_s * 1000 * MS;
            it->lease.ttl = s->leases[li].ttl_s;
        }
        break;
    case KL_EE_ACT_REVOKE:
        li = sim_lease_index(s, rq->lease_id);
        if (li < 0)
            it->status = K8SLEASE_ENOTFOUND;
        else
            sim_revoke(s, li);
        break;
    case KL_EE_ACT_TXN_CREATE:
    case KL_EE_ACT_PROCLAIM:
        if (sim_lease_index(s, rq->lease_id) < 0) {
            it->status = K8SLEASE_ENOTFOUND;
            break;
        }
        it->has_txn = 1;
        kv = sim_find(s, rq->key);
        if (rq->req == KL_EE_ACT_TXN_CREATE ? !kv : (kv && kv->create == rq->rev)) {
            sim_put(s, rq->key, rq->value, rq->lease_id);
            it->txn.succeeded = 1;
        } else if (rq->req == KL_EE_ACT_TXN_CREATE) {
            sim_set_kv(it, 0, kv, 0);
            it->n_kvs = 1;
            it->op.type = KL_ETCD_OP_RANGE;
            it->txn.n_ops = 1;
        }
        it->txn.revision = s->rev;
        break;
    case KL_EE_ACT_DELETE_KEY:
        it->has_txn = 1;
        kv = sim_find(s, rq->key);
        if (kv && kv->create == rq->rev) {
            sim_delete(s, kv);
            it->txn.succeeded = 1;
        }
        it->txn.revision = s->rev;
        break;
    case KL_EE_ACT_RANGE_PREDECESSOR:
    case KL_EE_ACT_RANGE_LEADER:
        n = sim_range(s, "e/", rq->req == KL_EE_ACT_RANGE_PREDECESSOR ? rq->rev : 0,
                      rq->req == KL_EE_ACT_RANGE_PREDECESSOR, (int)rq->limit, kvs);
        for (int i = 0; i < n; i++)
            sim_set_kv(it, i, &kvs[i], 0);
        it->n_kvs = n;
        it->has_range = 1;
        it->range.revision = s->rev;
        break;
    default:
        fail_msg("unexpected request %d", rq->req);
    }
    if (rq->lose_answer) { /* processed, but the answer never arrives */
        memset(&it->lease, 0, sizeof(it->lease));
        it->has_lease = it->has_txn = it->has_range = 0;
        it->n_kvs = 0;
        it->status = K8SLEASE_ETRANSPORT;
    }
    sim_pump_watches(s);
}

/* SIGKILL: every watch stream breaks, nothing is served until the
 * restart. */
static void sim_etcd_kill(sim *s)
{
    s->down = 1;
    for (int c = 0; c < SIM_N; c++) {
        for (int ch = 0; ch < KL_EE_CH_COUNT; ch++) {
            sim_watch *w = &s->c[c].watch[ch];
            sim_item *it;

            if (!w->active || w->gen != s->c[c].gen[ch])
                continue;
            w->active = 0;
            it = sim_enqueue(s, SIM_RESULT, c, ch, s->now + sim_delay(s, c));
            it->status = K8SLEASE_ETRANSPORT;
        }
    }
}

/* Restarted on its data: as etcd's lessor when it becomes leader, every
 * lease gets a full TTL from now, however long it was down. */
static void sim_etcd_restart(sim *s)
{
    s->down = 0;
    for (int i = 0; i < s->n_leases; i++)
        if (s->leases[i].live)
            s->leases[i].expires = s->now + s->leases[i].ttl_s * 1000 * MS;
}

/* ---- the drivers ---- */

static int sim_is_oldest(sim *s, int cand)
{
    sim_kv first;
    const kl__etcd_election *e = &s->c[cand].e;

    if (sim_range(s, "e/", 0, 0, 1, &first) != 1)
        return 0;
    return first.create == e->epoch && !strcmp(first.key, e->key);
}

static void sim_check(sim *s)
{
    int leaders = 0;

    for (int c = 0; c < SIM_N; c++) {
        if (!s->c[c].active || !kl__etcd_election_is_leader(&s->c[c].e, s->now))
            continue;
        leaders++;
        if (!sim_is_oldest(s, c))
            fail_msg("t=%lld ms: candidate %d believes it leads (epoch %lld) but the server "
                     "disagrees",
                     (long long)ms_of(s->now), c, (long long)s->c[c].e.epoch);
    }
    if (leaders > 1)
        fail_msg("t=%lld ms: %d leaders", (long long)ms_of(s->now), leaders);
}

static void sim_execute(sim *s, int c, const kl__etcd_election_actions *out)
{
    sim_cand *cd = &s->c[c];

    for (int i = 0; i < out->n; i++) {
        const kl__etcd_election_action *a = &out->a[i];
        sim_item *it;

        assert_false(cd->done);
        switch (a->type) {
        case KL_EE_ACT_STARTED:
            if (a->epoch <= s->last_epoch)
                fail_msg("epoch %lld after %lld", (long long)a->epoch, (long long)s->last_epoch);
            s->last_epoch = a->epoch;
            if (!sim_is_oldest(s, c))
                fail_msg("candidate %d started but its key is not the oldest", c);
            assert_true(s->n_leaders < (int)KL_ARRAY_LEN(s->leaders));
            s->leaders[s->n_leaders++] = c;
            cd->starts++;
            break;
        case KL_EE_ACT_STOPPED:
            cd->stopped++;
            s->n_stopped_total++;
            assert_int_equal(cd->stopped, 1);
            break;
        case KL_EE_ACT_NEW_LEADER:
            break;
        case KL_EE_ACT_DONE:
            assert_int_equal(i, out->n - 1);
            assert_int_equal(cd->stopped, 1);
            cd->done = 1;
            for (int ch = 0; ch < KL_EE_CH_COUNT; ch++) {
                cd->gen[ch]++;
                cd->watch[ch].active = 0;
            }
            break;
        case KL_EE_ACT_CANCEL:
            cd->gen[a->channel]++;
            cd->watch[a->channel].active = 0;
            break;
        default: /* a request or a watch */
            cd->gen[a->channel]++;
            if (sim_chance(s, s->lose_percent)) {
                /* lost on the way: the driver reports a transport error */
                it = sim_enqueue(s, SIM_RESULT, c, a->channel, s->now + 2 * sim_delay(s, c));
                it->status = K8SLEASE_ETRANSPORT;
                break;
            }
            it = sim_enqueue(s, SIM_ARRIVE, c, a->channel, s->now + sim_delay(s, c));
            it->req = a->type;
            snprintf(it->key, sizeof(it->key), "%.*s", (int)a->key_len, a->key ? a->key : "");
            snprintf(it->value, sizeof(it->value), "%.*s", (int)a->value_len,
                     a->value ? a->value : "");
            it->lease_id = a->lease_id;
            it->ttl_s = a->ttl_s;
            it->rev = a->revision;
            it->limit = a->limit;
            it->lose_answer = a->type != KL_EE_ACT_WATCH_KEY && sim_chance(s, s->lose_percent);
            break;
        }
    }
}

static void sim_step(sim *s, int c, kl__etcd_election_event *ev)
{
    kl__etcd_election_actions out;

    kl__etcd_election_step(&s->c[c].e, ev, s->now, &out);
    assert_true(out.n <= 6); /* the bound push() documents */
    sim_execute(s, c, &out);
    sim_check(s);
}

static void sim_start(sim *s, int c)
{
    sim_cand *cd = &s->c[c];
    kl__etcd_election_event ev = {KL_EE_EV_START};
    kl__etcd_election_config cfg = s->cfg;

    cd->run++;
    cd->active = 1;
    cd->done = cd->stopped = 0;
    for (int ch = 0; ch < KL_EE_CH_COUNT; ch++) {
        cd->gen[ch]++;
        cd->watch[ch].active = 0;
    }
    snprintf(cd->value, sizeof(cd->value), "%c", 'a' + c);
    cfg.value = cd->value;
    assert_int_equal(kl__etcd_election_init(&cd->e, &cfg), 0);
    sim_step(s, c, &ev);
}

static void sim_stop(sim *s, int c, int release)
{
    kl__etcd_election_event ev = {KL_EE_EV_STOP};

    ev.release = release;
    if (s->c[c].active && !s->c[c].done)
        sim_step(s, c, &ev);
}

static void sim_deliver(sim *s, sim_item *it)
{
    sim_cand *cd = &s->c[it->cand];
    kl__etcd_election_event ev = {KL_EE_EV_RESULT};

    if (it->kind == SIM_ARRIVE) {
        sim_serve(s, it);
        return;
    }
    /* a cancelled request or watch, or an election that is over */
    if (it->run != cd->run || it->gen != cd->gen[it->ch] || cd->done)
        return;
    for (int i = 0; i < it->n_kvs; i++) {
        it->kvs[i].key = it->kv_keys[i];
        it->kvs[i].value = it->kv_values[i];
    }
    ev.channel = (kl__etcd_channel)it->ch;
    ev.status = it->status;
    if (it->kind == SIM_WATCHMSG) {
        ev.type = KL_EE_EV_WATCH;
        it->wev.kv = it->kvs[0];
        it->msg.events = &it->wev;
        it->msg.n_events = 1;
        it->msg.cancel_reason = (char *)"";
        ev.watch = &it->msg;
    } else {
        if (it->has_lease)
            ev.lease = &it->lease;
        if (it->has_range) {
            it->range.kvs = it->n_kvs ? it->kvs : NULL;
            it->range.n_kvs = (size_t)it->n_kvs;
            ev.range = &it->range;
        }
        if (it->has_txn) {
            if (it->txn.n_ops) {
                it->op.range.kvs = it->kvs;
                it->op.range.n_kvs = (size_t)it->n_kvs;
                it->txn.ops = &it->op;
            }
            ev.txn = &it->txn;
        }
    }
    sim_step(s, it->cand, &ev);
}

/* When the next thing happens: a message (a frozen candidate receives
 * nothing until it thaws), a candidate's timer, or the next lease expiry. */
static int64_t sim_next_time(sim *s, int *qi, int *timer_cand)
{
    int64_t best = INT64_MAX;

    *qi = -1;
    *timer_cand = -1;
    for (int i = 0; i < s->n_q; i++) {
        int64_t at = s->q[i].at;

        if (s->q[i].kind != SIM_ARRIVE && at < s->c[s->q[i].cand].frozen_until)
            at = s->c[s->q[i].cand].frozen_until;
        if (at < best) {
            best = at;
            *qi = i;
        }
    }
    for (int c = 0; c < SIM_N; c++) {
        int64_t t;

        if (!s->c[c].active || s->c[c].done)
            continue;
        t = kl__etcd_election_timer(&s->c[c].e);
        if (t != INT64_MAX && t < s->c[c].frozen_until)
            t = s->c[c].frozen_until;
        if (t < best) {
            best = t;
            *qi = -1;
            *timer_cand = c;
        }
    }
    for (int i = 0; i < s->n_leases; i++)
        if (!s->down && s->leases[i].live && s->leases[i].expires < best) {
            best = s->leases[i].expires;
            *qi = -1;
            *timer_cand = -1;
        }
    return best;
}

/* Runs until time `until` (ms after T0). */
static void sim_run_until(sim *s, int64_t until_ms)
{
    int64_t until = T0 + until_ms * MS;
    long same_instant = 0;

    for (;;) {
        int qi, tc;
        int64_t t = sim_next_time(s, &qi, &tc);

        /* a timer that fires without moving the machine on would spin */
        same_instant = t == s->now ? same_instant + 1 : 0;
        if (same_instant > 1000)
            fail_msg("t=%lld ms: livelock (1000 events at one instant)", (long long)ms_of(t));

        if (t > until) {
            s->now = until;
            sim_expire(s);
            sim_pump_watches(s);
            sim_check(s);
            return;
        }
        if (t > s->now)
            s->now = t;
        sim_expire(s);
        sim_pump_watches(s);
        sim_check(s);
        if (qi >= 0) {
            sim_item it = s->q[qi];

            s->q[qi] = s->q[--s->n_q];
            sim_deliver(s, &it);
        } else if (tc >= 0) {
            kl__etcd_election_event ev = {KL_EE_EV_TIMER};

            sim_step(s, tc, &ev);
        }
    }
}

static void sim_init(sim *s, uint64_t seed)
{
    memset(s, 0, sizeof(*s));
    s->now = T0;
    s->rng = seed;
    s->rev = 1;
    s->next_lease = INT64_C(0x694d7a0000000001);
    s->cfg = default_config();
    for (int c = 0; c < SIM_N; c++)
        s->c[c].base_delay_ms = 5 + 10 * c;
}

static int sim_current_leader(sim *s)
{
    for (int c = 0; c < SIM_N; c++)
        if (s->c[c].active && kl__etcd_election_is_leader(&s->c[c].e, s->now))
            return c;
    return -1;
}

static void test_sim_leader_resigns_in_queue_order(void **state)
{
    static sim s;

    (void)state;
    sim_init(&s, 1);
    sim_start(&s, 0);
    sim_run_until(&s, 100);
    sim_start(&s, 1);
    sim_run_until(&s, 200);
    sim_start(&s, 2);
    sim_run_until(&s, 5000);
    assert_int_equal(sim_current_leader(&s), 0);
    /* the queue: a, then b, then c, by create revision */
    assert_true(s.c[0].e.my_rev < s.c[1].e.my_rev && s.c[1].e.my_rev < s.c[2].e.my_rev);
    /* every candidate reports a as leader */
    for (int c = 0; c < SIM_N; c++) {
        assert_true(s.c[c].e.have_reported);
        assert_string_equal(s.c[c].e.reported, "a");
        assert_int_equal(s.c[c].e.reported_epoch, s.c[0].e.my_rev);
    }
    sim_stop(&s, 0, 1);
    sim_run_until(&s, 10000);
    assert_true(s.c[0].done);
    assert_int_equal(sim_current_leader(&s), 1);
    assert_string_equal(s.c[2].e.reported, "b");
    sim_stop(&s, 1, 1);
    sim_run_until(&s, 15000);
    assert_int_equal(sim_current_leader(&s), 2);
    sim_stop(&s, 2, 1);
    sim_run_until(&s, 20000);
    assert_int_equal(s.n_leaders, 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(s.leaders[i], i);
    for (int c = 0; c < SIM_N; c++)
        assert_true(s.c[c].done);
    /* everything released: no key, no live lease */
    assert_int_equal(s.n_kvs, 0);
    for (int i = 0; i < s.n_leases; i++)
        assert_false(s.leases[i].live);
}

static void test_sim_frozen_leader_expires(void **state)
{
    static sim s;

    (void)state;
    sim_init(&s, 2);
    for (int c = 0; c < SIM_N; c++) {
        sim_start(&s, c);
        sim_run_until(&s, 100 * (c + 1));
    }
    sim_run_until(&s, 5000);
    assert_int_equal(sim_current_leader(&s), 0);
    /* SIGSTOP for 30 s: no keepalives; a's lease expires at the server,
     * b takes over, and a never believes it still leads (sim_check) */
    s.c[0].frozen_until = T0 + 35000 * MS;
    sim_run_until(&s, 20000);
    assert_int_equal(sim_current_leader(&s), 1);
    assert_false(kl__etcd_election_is_leader(&s.c[0].e, s.now));
    sim_run_until(&s, 40000);
    /* a thawed: its term is over (STOPPED, nothing left to release) */
    assert_true(s.c[0].done);
    assert_int_equal(s.c[0].stopped, 1);
    assert_int_equal(sim_current_leader(&s), 1);
    assert_int_equal(s.n_leaders, 2);
    assert_true(s.c[1].e.epoch > s.c[0].e.epoch);
    sim_stop(&s, 1, 0); /* no release: c takes over when b's lease expires */
    sim_run_until(&s, 60000);
    assert_int_equal(sim_current_leader(&s), 2);
    sim_stop(&s, 2, 1);
    sim_run_until(&s, 70000);
    assert_int_equal(s.n_leaders, 3);
}

/* etcd killed while a leads, down for longer than the TTL, restarted on
 * its data with every lease extended by a TTL. All deadlines pass during
 * the outage: a's term ends and it releases; b and c presume their leases
 * lost and revoke them, so the old keys are gone about a retry period
 * after the restart. Without the revokes, b's and c's old keys would hold
 * the queue up until etcd expired them, a TTL (9 s) after the restart. */
static void test_sim_etcd_restart_clears_presumed_lost_keys(void **state)
{
    static sim s;
    int64_t t = 17000;

    (void)state;
    sim_init(&s, 3);
    for (int c = 0; c < SIM_N; c++) {
        sim_start(&s, c);
        sim_run_until(&s, 100 * (c + 1));
    }
    sim_run_until(&s, 5000);
    assert_int_equal(sim_current_leader(&s), 0);
    sim_etcd_kill(&s);
    sim_run_until(&s, t); /* every deadline (at most 5000 + TTL) has passed */
    assert_int_equal(sim_current_leader(&s), -1);
    assert_int_equal(s.c[0].e.state, KL_EE_RELEASING);
    for (int c = 1; c < SIM_N; c++) {
        assert_int_equal(s.c[c].e.state, KL_EE_GRANTING);
        assert_true(s.c[c].e.revoke_id != 0);
    }
    sim_etcd_restart(&s);
    while (sim_current_leader(&s) < 0 && t < 17000 + TTL_MS)
        sim_run_until(&s, t += 10);
    /* the retries (every retry period) reach etcd, then a few round trips */
    if (t > 17000 + RP_MS + 300)
        fail_msg("a leader %lld ms after the restart", (long long)(t - 17000));
    assert_true(sim_current_leader(&s) > 0);
    sim_run_until(&s, 17000 + 2 * RP_MS);
    assert_true(s.c[0].done);
    for (int c = 1; c < SIM_N; c++)
        assert_int_equal(s.c[c].e.revoke_id, 0);
    /* only the new keys, on live leases */
    assert_int_equal(s.n_kvs, 2);
    for (int i = 0; i < s.n_kvs; i++)
        assert_true(s.kvs[i].lease == s.c[1].e.lease_id || s.kvs[i].lease == s.c[2].e.lease_id);
}

/* Lost requests and answers, frozen processes, stops and restarts, at
 * random; the invariants are checked after every event. */
static void test_sim_chaos(void **state)
{
    static sim s;
    int total_leaders = 0;

    (void)state;
    for (uint64_t seed = 1; seed <= 20; seed++) {
        sim_init(&s, seed * 7919);
        s.lose_percent = 10;
        for (int c = 0; c < SIM_N; c++)
            sim_start(&s, c);
        for (int64_t t = 1000; t <= 180000; t += 1000) {
            sim_run_until(&s, t);
            for (int c = 0; c < SIM_N; c++) {
                sim_cand *cd = &s.c[c];

                if (cd->done && cd->run < SIM_MAX_RUNS && sim_chance(&s, 50))
                    sim_start(&s, c);
                else if (!cd->done && sim_chance(&s, 2))
                    sim_stop(&s, c, (int)(sim_rand(&s) % 2));
                else if (!cd->done && sim_chance(&s, 2))
                    cd->frozen_until = s.now + (int64_t)(sim_rand(&s) % 15000) * MS;
            }
        }
        for (int c = 0; c < SIM_N; c++) {
            s.c[c].frozen_until = 0;
            sim_stop(&s, c, 1);
        }
        sim_run_until(&s, 200000);
        for (int c = 0; c < SIM_N; c++)
            assert_true(s.c[c].done);
        total_leaders += s.n_leaders;
    }
    /* the runs did elect: the invariants were not checked on an empty set */
    assert_true(total_leaders > 40);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_validate_prefix_and_value),
        cmocka_unit_test(test_validate_durations),
        cmocka_unit_test(test_config_is_copied),
        cmocka_unit_test(test_start_grants),
        cmocka_unit_test(test_ttl_rounded_up_to_seconds),
        cmocka_unit_test(test_grant_creates_key_with_hex_lease_id),
        cmocka_unit_test(test_created_alone_leads),
        cmocka_unit_test(test_existing_key_with_our_value),
        cmocka_unit_test(test_existing_key_with_other_value_proclaims),
        cmocka_unit_test(test_proclaim_finds_key_gone_recreates),
        cmocka_unit_test(test_predecessor_watched_from_range_revision),
        cmocka_unit_test(test_predecessor_delete_ranges_again),
        cmocka_unit_test(test_own_key_missing_recreates),
        cmocka_unit_test(test_keepalive_schedule_and_deadline),
        cmocka_unit_test(test_keepalive_configured_interval),
        cmocka_unit_test(test_keepalive_error_retried_sooner),
        cmocka_unit_test(test_granted_ttl_bounds_deadline),
        cmocka_unit_test(test_grant_answered_after_ttl_regrants),
        cmocka_unit_test(test_keepalive_ttl_zero_ends_term),
        cmocka_unit_test(test_deadline_without_answer_steps_down),
        cmocka_unit_test(test_is_leader_false_at_deadline_without_event),
        cmocka_unit_test(test_late_keepalive_answer_does_not_extend),
        cmocka_unit_test(test_deadline_without_release_on_cancel),
        cmocka_unit_test(test_candidate_lease_lost_regrants),
        cmocka_unit_test(test_candidate_deadline_regrants),
        cmocka_unit_test(test_lease_not_found_on_create_regrants),
        cmocka_unit_test(test_presumed_lost_lease_revoked),
        cmocka_unit_test(test_presumed_lost_revoke_retried_until_granted),
        cmocka_unit_test(test_presumed_lost_revoke_in_flight_at_grant),
        cmocka_unit_test(test_presumed_lost_stale_keepalive_ignored),
        cmocka_unit_test(test_presumed_lost_revoke_abandoned),
        cmocka_unit_test(test_errors_retry_after_retry_period),
        cmocka_unit_test(test_ok_without_payload_is_an_error),
        cmocka_unit_test(test_compaction_while_waiting_ranges_again),
        cmocka_unit_test(test_watch_end_ranges_later),
        cmocka_unit_test(test_new_leader_on_every_change),
        cmocka_unit_test(test_new_leader_once_per_watch_message),
        cmocka_unit_test(test_own_key_reported_by_campaign_first),
        cmocka_unit_test(test_own_key_deleted_while_leading),
        cmocka_unit_test(test_stop_while_leading_releases),
        cmocka_unit_test(test_stop_while_leading_without_release),
        cmocka_unit_test(test_stop_while_waiting),
        cmocka_unit_test(test_stop_while_creating_revokes_only),
        cmocka_unit_test(test_stop_before_lease),
        cmocka_unit_test(test_release_gives_up_after_ttl),
        cmocka_unit_test(test_events_after_done_ignored),
        cmocka_unit_test(test_stale_events_ignored),
        cmocka_unit_test(test_stopped_exactly_once),
        cmocka_unit_test(test_long_leader_value_truncated_and_compared),
        cmocka_unit_test(test_long_predecessor_key_polled),
        cmocka_unit_test(test_state_names),
        cmocka_unit_test(test_sim_leader_resigns_in_queue_order),
        cmocka_unit_test(test_sim_frozen_leader_expires),
        cmocka_unit_test(test_sim_etcd_restart_clears_presumed_lost_keys),
        cmocka_unit_test(test_sim_chaos),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
