/* The event loop (core/loop.h) with hooks that count its iterations and
 * say "at once" when told to: a timer's wait is measured from the clock after
 * the iteration's work, an iteration with something due at once does not
 * wait (no wake-up for nothing), arming a timer cannot fail, not even with
 * every allocation failing, and a watched descriptor's callback runs when
 * it is ready and never after it was unwatched. Bounds are ten times what
 * is expected or more. */
#define _DEFAULT_SOURCE 1
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <pthread.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "core/clock.h"
#include "core/common.h"
#include "core/loop.h"

/* What runs on the loop: counts its runs, says "at once" when asked to. */
typedef struct fake_io {
    int zeros_left; /* timeout_ms answers 0 this many more times (loop thread) */
    long runs;      /* run calls */
} fake_io;

static void io_run(void *data)
{
    fake_io *io = data;

    io->runs++;
}

static long io_timeout_ms(void *data)
{
    fake_io *io = data;

    if (io->zeros_left > 0) {
        io->zeros_left--;
        return 0;
    }
    return -1;
}

static int io_flush(void *data)
{
    (void)data;
    return 0;
}

static void io_destroy(void *data)
{
    (void)data;
}

static const kl__loop_hooks fake = {io_run, io_timeout_ms, io_flush, io_destroy};

static void fake_init(fake_io *io)
{
    memset(io, 0, sizeof(*io));
}

static void fake_fini(fake_io *io)
{
    (void)io;
}

/* ---- a timer armed by slow work ---- */

#define TIMER_MS 400 /* twenty times the work: a loaded machine may stretch it */
#define WORK_MS  20

typedef struct slow {
    kl__loop *loop;
    fake_io *io;
    kl__timer timer;
    uint64_t waits_at_arm, waits_at_fire;
    int timeout_seen; /* the wait that ended with the timer due */
    int fired;
} slow;

static uint64_t waits_of(const kl__loop *loop)
{
    kl__loop_counts c;

    kl__loop_counts_get(loop, &c);
    return c.waits + c.polls;
}

static void on_slow_timer(kl__timer *t, void *arg)
{
    slow *s = arg;
    kl__loop_counts c;

    (void)t;
    kl__loop_counts_get(s->loop, &c);
    s->waits_at_fire = c.waits + c.polls;
    s->timeout_seen = c.last_timeout_ms;
    kl__loop_set_flag(s->loop, &s->fired);
}

/* Arms the timer TIMER_MS after the iteration's "now", then works WORK_MS. */
static void arm_then_work(void *arg)
{
    slow *s = arg;
    int64_t end;

    kl__timer_arm(s->loop, &s->timer, kl__loop_now(s->loop) + TIMER_MS * KL_NS_PER_MS);
    s->waits_at_arm = waits_of(s->loop);
    end = kl__clock_mono_ns() + WORK_MS * KL_NS_PER_MS;
    while (kl__clock_mono_ns() < end)
        ;
}

static void nothing(void *arg)
{
    (void)arg;
}

static void timer_wait_counts_from_the_clock(void **state)
{
    fake_io io;
    slow s = {0};

    (void)state;
    fake_init(&io);
    assert_int_equal(kl__loop_start(&s.loop, &fake, &io, NULL), 0);
    s.io = &io;
    kl__timer_init(&s.timer, on_slow_timer, &s);
    /* A call's wake-up is spent by the wait before the call runs, except
     * in the loop's first iteration: past it. */
    assert_int_equal(kl__loop_call(s.loop, nothing, NULL), 0);
    assert_int_equal(kl__loop_call(s.loop, arm_then_work, &s), 0);
    kl__loop_wait_flag(s.loop, &s.fired);
    print_message("timer after %ld wait(s), the last of %d ms\n",
                  (long)(s.waits_at_fire - s.waits_at_arm), s.timeout_seen);
    /* One wait, which ended with the timer due, and which did not count
     * the work done before it (TIMER_MS from the stale "now"). */
    assert_int_equal(s.waits_at_fire - s.waits_at_arm, 1);
    assert_true(s.timeout_seen <= TIMER_MS - WORK_MS + 1);
    kl__loop_free(s.loop);
    fake_fini(&io);
}

/* ---- something due at once ---- */

typedef struct zeros {
    kl__loop *loop;
    fake_io *io;
    long runs_before;
    kl__loop_counts before, counts;
    int zeros_left;
} zeros;

static int zeros_asked;

static void ask_zeros(void *arg)
{
    zeros *z = arg;

    z->io->zeros_left = zeros_asked;
    z->runs_before = z->io->runs;
    kl__loop_counts_get(z->loop, &z->before);
}

static void read_counts(void *arg)
{
    zeros *z = arg;

    kl__loop_counts_get(z->loop, &z->counts);
    z->zeros_left = z->io->zeros_left;
}

/* The hooks say "at once" n times in a row; returns the waits of 0 ms. */
static int zero_waits_after(int n, long *runs)
{
    fake_io io;
    zeros z = {0};
    kl__loop *loop = NULL;
    int zero_waits;

    fake_init(&io);
    z.io = &io;
    zeros_asked = n;
    assert_int_equal(kl__loop_start(&loop, &fake, &io, NULL), 0);
    z.loop = loop;
    /* past the loop's first iteration (see timer_wait_counts_from_the_clock) */
    assert_int_equal(kl__loop_call(loop, nothing, NULL), 0);
    assert_int_equal(kl__loop_call(loop, ask_zeros, &z), 0);
    /* until the io has said them all (bounded: they take microseconds) */
    for (int tries = 0; tries < 1000; tries++) {
        assert_int_equal(kl__loop_call(loop, read_counts, &z), 0);
        if (z.zeros_left == 0)
            break;
    }
    assert_int_equal(z.zeros_left, 0);
    kl__loop_free(loop);
    /* after the loop stopped, its fields are ours */
    *runs = io.runs - z.runs_before;
    zero_waits = (int)(z.counts.polls - z.before.polls);
    fake_fini(&io);
    return zero_waits;
}

static void no_wait_when_something_is_due(void **state)
{
    long runs;

    (void)state;
    /* once: the next iteration at once, no poll of 0 ms */
    assert_int_equal(zero_waits_after(1, &runs), 0);
    assert_true(runs >= 1);
    /* again and again: every other iteration looks at the io (a wait of
     * 0 ms), so that nothing that keeps asking can starve its sockets */
    assert_int_equal(zero_waits_after(6, &runs), 3);
    assert_true(runs >= 6);
}

/* A mutex and a condition variable on the monotonic clock. */
static void sync_init(pthread_mutex_t *mu, pthread_cond_t *cond)
{
    pthread_condattr_t attr;

    pthread_mutex_init(mu, NULL);
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(cond, &attr);
    pthread_condattr_destroy(&attr);
}

/* Wait (at most ms) until *v reaches target, under mu; its last value. */
static int wait_count(pthread_mutex_t *mu, pthread_cond_t *cond, const int *v, int target, int ms)
{
    struct timespec until;
    int got;

    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(mu);
    while (*v < target && pthread_cond_timedwait(cond, mu, &until) == 0)
        ;
    got = *v;
    pthread_mutex_unlock(mu);
    return got;
}

/* ---- timers armed while allocations fail ---- */

#define NARMED        300 /* more than any initial room a timer heap would have */
#define ARMED_WAIT_MS 10000

static struct {
    kl__loop *loop;
    kl__timer t[NARMED];
    pthread_mutex_t mu;
    pthread_cond_t cond;
    int fired; /* under mu */
} AT;

static void on_armed_timer(kl__timer *t, void *arg)
{
    (void)t;
    (void)arg;
    pthread_mutex_lock(&AT.mu);
    AT.fired++;
    pthread_cond_broadcast(&AT.cond);
    pthread_mutex_unlock(&AT.mu);
}

/* On the loop thread: every allocation fails while the timers are armed
 * (the budget counts this thread's allocations as well as any other's). */
static void arm_without_memory(void *arg)
{
    int64_t now = kl__loop_now(AT.loop);

    (void)arg;
    kl__alloc_fail_after(0);
    for (int i = 0; i < NARMED; i++) {
        kl__timer_init(&AT.t[i], on_armed_timer, NULL);
        kl__timer_arm(AT.loop, &AT.t[i], now + (int64_t)(i % 7 + 1) * KL_NS_PER_MS);
    }
    kl__alloc_fail_after(-1);
}

/* A timer that could not be armed would never fire: a release deadline
 * lost that way would leave k8slease_elector_stop waiting for ever. */
static void timers_armed_without_memory(void **state)
{
    fake_io io;
    int fired;

    (void)state;
    fake_init(&io);
    memset(&AT, 0, sizeof(AT));
    sync_init(&AT.mu, &AT.cond);
    assert_int_equal(kl__loop_start(&AT.loop, &fake, &io, NULL), 0);
    assert_int_equal(kl__loop_call(AT.loop, arm_without_memory, NULL), 0);
    fired = wait_count(&AT.mu, &AT.cond, &AT.fired, NARMED, ARMED_WAIT_MS);
    kl__loop_free(AT.loop);
    pthread_cond_destroy(&AT.cond);
    pthread_mutex_destroy(&AT.mu);
    fake_fini(&io);
    if (fired != NARMED)
        fail_msg("%d of the %d timers armed while allocations failed fired within %d ms", fired,
                 NARMED, ARMED_WAIT_MS);
}

/* ---- the heap's order under random arming, re-arming and cancelling ---- */

#define NRANDOM 2000

static struct {
    kl__loop *loop;
    kl__timer t[NRANDOM];
    int64_t at[NRANDOM];
    size_t order[NRANDOM]; /* the arming order of each armed timer */
    int armed[NRANDOM];
    int fired[NRANDOM];
    int nfired, out_of_order, expected;
    int64_t last_at;
    size_t last_order;
    int done;
} RT;

static void on_random_timer(kl__timer *t, void *arg)
{
    size_t i = (size_t)(t - RT.t);

    (void)arg;
    if (RT.nfired > 0 &&
        (RT.at[i] < RT.last_at || (RT.at[i] == RT.last_at && RT.order[i] < RT.last_order)))
        RT.out_of_order++;
    RT.last_at = RT.at[i];
    RT.last_order = RT.order[i];
    RT.fired[i]++;
    if (++RT.nfired == RT.expected)
        kl__loop_set_flag(RT.loop, &RT.done);
}

/* Deadlines in the past, from a few values so that many are equal: all
 * are due at the next iteration, which runs them in order. */
static void arm_random(void *arg)
{
    int64_t now = kl__loop_now(RT.loop);
    uint32_t seed = 2024;
    size_t seq = 0;

    (void)arg;
    for (int round = 0; round < 4 * NRANDOM; round++) {
        int i;

        seed = seed * 1103515245u + 12345u;
        i = (int)((seed >> 8) % NRANDOM);
        seed = seed * 1103515245u + 12345u;
        if ((seed >> 8) % 5 == 0) {
            kl__timer_cancel(RT.loop, &RT.t[i]);
            RT.armed[i] = 0;
            continue;
        }
        RT.at[i] = now - (int64_t)((seed >> 12) % 50 + 1) * KL_NS_PER_MS;
        RT.order[i] = ++seq;
        kl__timer_arm(RT.loop, &RT.t[i], RT.at[i]);
        RT.armed[i] = 1;
    }
    for (int i = 0; i < NRANDOM; i++)
        RT.expected += RT.armed[i];
}

static void timers_fire_in_order(void **state)
{
    fake_io io;

    (void)state;
    fake_init(&io);
    memset(&RT, 0, sizeof(RT));
    assert_int_equal(kl__loop_start(&RT.loop, &fake, &io, NULL), 0);
    for (int i = 0; i < NRANDOM; i++)
        kl__timer_init(&RT.t[i], on_random_timer, NULL);
    assert_int_equal(kl__loop_call(RT.loop, arm_random, NULL), 0);
    assert_true(RT.expected > NRANDOM / 2);
    /* the timers are due already: the next iteration runs them */
    kl__loop_wait_flag(RT.loop, &RT.done);
    kl__loop_free(RT.loop);
    fake_fini(&io);
    assert_int_equal(RT.nfired, RT.expected);
    assert_int_equal(RT.out_of_order, 0);
    for (int i = 0; i < NRANDOM; i++)
        assert_int_equal(RT.fired[i], RT.armed[i]);
}

/* ---- descriptors ---- */

static struct {
    kl__loop *loop;
    int a[2], b[2]; /* pipes */
    int calls_a, calls_b;
    int watch_rc[3], read_rc, events; /* what the loop thread saw */
    pthread_mutex_t mu;
    pthread_cond_t cond;
    int called; /* under mu */
} WT;

/* A pipe is readable: read it, stop watching both. */
static void on_pipe(int fd, uint32_t events, void *arg)
{
    int *calls = arg;
    char c;

    (*calls)++;
    WT.events = (int)events;
    WT.read_rc = (int)read(fd, &c, 1);
    kl__loop_unwatch(WT.loop, WT.a[0]);
    kl__loop_unwatch(WT.loop, WT.b[0]);
    pthread_mutex_lock(&WT.mu);
    WT.called = 1;
    pthread_cond_broadcast(&WT.cond);
    pthread_mutex_unlock(&WT.mu);
}

static void watch_both(void *arg)
{
    (void)arg;
    WT.watch_rc[0] = kl__loop_watch(WT.loop, WT.a[0], EPOLLIN, on_pipe, &WT.calls_a);
    /* twice: the same events again change nothing */
    WT.watch_rc[1] = kl__loop_watch(WT.loop, WT.b[0], EPOLLIN, on_pipe, &WT.calls_b);
    WT.watch_rc[2] = kl__loop_watch(WT.loop, WT.b[0], EPOLLIN, on_pipe, &WT.calls_b);
}

/* Both pipes are readable before they are watched, so one wait finds both
 * ready; the first callback unwatches the other, whose readiness must not
 * reach it. */
static void descriptors_watched_and_unwatched(void **state)
{
    fake_io io;
    int called;

    (void)state;
    fake_init(&io);
    memset(&WT, 0, sizeof(WT));
    sync_init(&WT.mu, &WT.cond);
    assert_int_equal(pipe(WT.a), 0);
    assert_int_equal(pipe(WT.b), 0);
    assert_int_equal(write(WT.a[1], "x", 1), 1);
    assert_int_equal(write(WT.b[1], "x", 1), 1);
    assert_int_equal(kl__loop_start(&WT.loop, &fake, &io, NULL), 0);
    assert_int_equal(kl__loop_call(WT.loop, watch_both, NULL), 0);
    called = wait_count(&WT.mu, &WT.cond, &WT.called, 1, 10000);
    /* an iteration more, in which nothing may run */
    assert_int_equal(kl__loop_call(WT.loop, nothing, NULL), 0);
    kl__loop_free(WT.loop);
    for (int i = 0; i < 3; i++)
        assert_int_equal(WT.watch_rc[i], 0);
    if (!called)
        fail_msg("no callback of a readable pipe within 10 s");
    assert_int_equal(WT.calls_a + WT.calls_b, 1);
    assert_true(WT.events & EPOLLIN);
    assert_int_equal(WT.read_rc, 1);
    for (int i = 0; i < 2; i++) {
        close(WT.a[i]);
        close(WT.b[i]);
    }
    pthread_cond_destroy(&WT.cond);
    pthread_mutex_destroy(&WT.mu);
    fake_fini(&io);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(timer_wait_counts_from_the_clock),
        cmocka_unit_test(no_wait_when_something_is_due),
        cmocka_unit_test(timers_armed_without_memory),
        cmocka_unit_test(timers_fire_in_order),
        cmocka_unit_test(descriptors_watched_and_unwatched),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
