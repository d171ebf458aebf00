/*
 * sched.c - suspended connections, their deadlines, and the timer thread.
 */
#include "sched.h"
#include "conn.h"
#include "util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int ts_sched_init(ts_sched *s, pthread_mutex_t *mu, int64_t (*tick)(void *, int64_t), void *ctx)
{
    pthread_condattr_t attr;
    memset(s, 0, sizeof(*s));
    s->tick = tick;
    s->tick_ctx = ctx;
    s->list.next = s->list.prev = &s->list;
    /* Deadlines are monotonic; so must the condition variable's clock be. */
    if (pthread_condattr_init(&attr) != 0)
        return -1;
    int rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) == 0 &&
                     pthread_cond_init(&s->cv, &attr) == 0
                 ? 0
                 : -1;
    pthread_condattr_destroy(&attr);
    if (rc == 0)
        s->mu = mu; /* marks the scheduler initialised for ts_sched_free */
    return rc;
}

void ts_sched_free(ts_sched *s)
{
    free(s->heap);
    s->heap = NULL;
    if (s->mu)
        pthread_cond_destroy(&s->cv);
    s->mu = NULL;
}

void ts_sleeper_init(ts_sleeper *sl, struct ts_conn *conn)
{
    memset(sl, 0, sizeof(*sl));
    sl->conn = conn;
    sl->wake_ms = INT64_MAX;
    sl->heap_idx = SIZE_MAX;
}

/* ---- heap ------------------------------------------------------------- */

static void heap_set(ts_sched *s, size_t i, ts_sleeper *sl)
{
    s->heap[i] = sl;
    sl->heap_idx = i;
}

static void sift_up(ts_sched *s, size_t i)
{
    ts_sleeper *sl = s->heap[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (s->heap[parent]->wake_ms <= sl->wake_ms)
            break;
        heap_set(s, i, s->heap[parent]);
        i = parent;
    }
    heap_set(s, i, sl);
}

static void sift_down(ts_sched *s, size_t i)
{
    ts_sleeper *sl = s->heap[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= s->n)
            break;
        if (c + 1 < s->n && s->heap[c + 1]->wake_ms < s->heap[c]->wake_ms)
            c++;
        if (sl->wake_ms <= s->heap[c]->wake_ms)
            break;
        heap_set(s, i, s->heap[c]);
        i = c;
    }
    heap_set(s, i, sl);
}

static void heap_remove(ts_sched *s, ts_sleeper *sl)
{
    size_t i = sl->heap_idx;
    if (i == SIZE_MAX)
        return;
    sl->heap_idx = SIZE_MAX;
    ts_sleeper *last = s->heap[--s->n];
    if (i == s->n)
        return;
    heap_set(s, i, last);
    sift_down(s, i);
    sift_up(s, last->heap_idx);
}

/* ---- suspend / resume ------------------------------------------------- */

bool ts_sched_suspend(ts_sched *s, ts_sleeper *sl, int64_t wake_ms)
{
    if (s->refuse || sl->suspended)
        return false;
    if (wake_ms != INT64_MAX) {
        if (s->n == s->cap) {
            size_t cap = s->cap ? s->cap * 2 : 64;
            ts_sleeper **h = realloc(s->heap, cap * sizeof(*h));
            if (!h)
                return false;
            s->heap = h;
            s->cap = cap;
        }
        sl->wake_ms = wake_ms;
        heap_set(s, s->n++, sl);
        sift_up(s, sl->heap_idx);
        /* Only a new earliest deadline needs the timer thread's attention. */
        if (sl->heap_idx == 0)
            pthread_cond_signal(&s->cv);
    } else {
        sl->wake_ms = INT64_MAX;
    }
    sl->next = s->list.next;
    sl->prev = &s->list;
    s->list.next->prev = sl;
    s->list.next = sl;
    s->nsuspended++;
    sl->suspended = true;
    sl->conn->ops->suspend(sl->conn);
    return true;
}

static void unlink_sleeper(ts_sched *s, ts_sleeper *sl)
{
    heap_remove(s, sl);
    sl->prev->next = sl->next;
    sl->next->prev = sl->prev;
    sl->next = sl->prev = NULL;
    s->nsuspended--;
    sl->suspended = false;
    sl->wake_ms = INT64_MAX;
}

void ts_sched_wake(ts_sched *s, ts_sleeper *sl)
{
    if (!sl->suspended)
        return;
    unlink_sleeper(s, sl);
    sl->conn->ops->resume(sl->conn);
}

void ts_sched_cancel(ts_sched *s, ts_sleeper *sl)
{
    if (sl->suspended)
        unlink_sleeper(s, sl);
}

void ts_sched_wake_all(ts_sched *s)
{
    while (s->list.next != &s->list)
        ts_sched_wake(s, s->list.next);
}

void ts_sched_wake_fd(ts_sched *s, int fd)
{
    for (ts_sleeper *sl = s->list.next, *next; sl != &s->list; sl = next) {
        next = sl->next; /* waking unlinks only sl */
        if (fd >= 0 && sl->conn->reap_fd == fd)
            ts_sched_wake(s, sl);
    }
}

void ts_sched_kick(ts_sched *s)
{
    pthread_cond_signal(&s->cv);
}

/* ---- timer thread ----------------------------------------------------- */

static void *timer_main(void *arg)
{
    ts_sched *s = arg;
    pthread_mutex_lock(s->mu);
    while (!s->stop) {
        int64_t now = ts_mono_ms();
        while (s->n && s->heap[0]->wake_ms <= now)
            ts_sched_wake(s, s->heap[0]);
        int64_t next = s->n ? s->heap[0]->wake_ms : INT64_MAX;
        if (s->tick) {
            int64_t t = s->tick(s->tick_ctx, now);
            if (t < next)
                next = t;
        }
        if (next == INT64_MAX) {
            pthread_cond_wait(&s->cv, s->mu);
        } else if (next > now) {
            struct timespec ts = {.tv_sec = (time_t)(next / 1000),
                                  .tv_nsec = (long)(next % 1000) * 1000000L};
            pthread_cond_timedwait(&s->cv, s->mu, &ts);
        }
    }
    pthread_mutex_unlock(s->mu);
    return NULL;
}

int ts_sched_start(ts_sched *s)
{
    s->stop = false;
    if (pthread_create(&s->thread, NULL, timer_main, s) != 0)
        return -1;
    s->started = true;
    return 0;
}

void ts_sched_stop(ts_sched *s)
{
    if (!s->started)
        return;
    pthread_mutex_lock(s->mu);
    s->stop = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(s->mu);
    pthread_join(s->thread, NULL);
    s->started = false;
}
