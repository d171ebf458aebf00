/* The event loop: one thread, a binary min-heap of timers and a FIFO of
 * closures posted by other threads. The loop knows no protocol: the I/O it
 * waits on and drives is plugged in through kl__loop_io (the HTTP layer,
 * core/http.c, is the one user: kl__loop_new there builds a loop over
 * libcurl multi).
 *
 * Threads: kl__loop_start/free and kl__loop_post/kl__loop_call may be called
 * from any thread (free not from the loop thread). Everything else only on
 * the loop thread (from a posted closure, a timer or an I/O callback). */
#ifndef KL_LOOP_H
#define KL_LOOP_H

#include <stddef.h>
#include <stdint.h>

#include "core/common.h"

typedef struct kl__loop kl__loop;

/* The I/O a loop drives. data is the io's own state (kl__loop_io_data). */
typedef struct kl__loop_io {
    /* Loop thread, once per iteration after "now" was read, before the
     * timers and the posted closures: make progress and run callbacks. */
    void (*run)(void *data);
    /* Loop thread: the longest the next wait may last for the io's sake
     * (ms), -1 for no limit. */
    long (*timeout_ms)(void *data);
    /* Loop thread: sleep until the io has work, wakeup is called, or
     * timeout_ms passed. */
    void (*wait)(void *data, int timeout_ms);
    /* Any thread: end the current (or next) wait early. */
    void (*wakeup)(void *data);
    /* Free the io (from kl__loop_free, once the thread has stopped and
     * before the timers and the queue are freed: it may cancel timers). */
    void (*destroy)(void *data);
} kl__loop_io;

/* Start the loop thread over io (copied) and its data. log may be NULL; it
 * is borrowed and must outlive the loop. On failure nothing of io is freed:
 * the caller still owns data. K8SLEASE_ENOMEM. */
int kl__loop_start(kl__loop **out, const kl__loop_io *io, void *data, const kl__log *log);
/* Stop the thread; posted closures not yet run are run first; then the io is
 * destroyed (requests in flight are cancelled without their callbacks). */
void kl__loop_free(kl__loop *loop);
/* The data given to kl__loop_start. */
void *kl__loop_io_data(const kl__loop *loop);

/* Run fn(arg) on the loop thread soon (FIFO). 0 or K8SLEASE_ENOMEM. */
int kl__loop_post(kl__loop *loop, void (*fn)(void *arg), void *arg);
/* Run fn(arg) on the loop thread and wait until it returned. Allocates
 * nothing, so it cannot run out of memory. Returns K8SLEASE_ESTATE when
 * called on the loop thread itself. */
int kl__loop_call(kl__loop *loop, void (*fn)(void *arg), void *arg);
int kl__loop_on_thread(const kl__loop *loop);
/* A thread other than the loop's waits until *flag is nonzero; the loop
 * thread sets it with kl__loop_set_flag (under the loop's lock, so the
 * waiter wakes). */
void kl__loop_wait_flag(kl__loop *loop, const int *flag);
void kl__loop_set_flag(kl__loop *loop, int *flag);

/* What the loop thread did so far, for tests and benchmarks: one election
 * held should cost a wait per renewal and per arrival of data, and no timer
 * but the renewal's. */
typedef struct kl__loop_counts {
    uint64_t waits;  /* io waits that could sleep (a timeout other than 0) */
    uint64_t timers; /* timer callbacks run */
} kl__loop_counts;
/* Loop thread (kl__loop_call from others). */
void kl__loop_counts_get(const kl__loop *loop, kl__loop_counts *out);

/* Monotonic ns read once per loop iteration (loop thread). */
int64_t kl__loop_now(const kl__loop *loop);
const kl__log *kl__loop_log(const kl__loop *loop);

/* Timers (loop thread only). A timer is embedded in its owner's struct and
 * carries its own links in the loop's heap, so arming one allocates nothing
 * and cannot fail. */
typedef struct kl__timer kl__timer;
typedef void (*kl__timer_cb)(kl__timer *t, void *arg);
struct kl__timer {
    int64_t at;  /* monotonic ns */
    size_t slot; /* nonzero while armed: the order it was armed in */
    kl__timer *parent, *left, *right;
    kl__timer_cb cb;
    void *arg;
};
void kl__timer_init(kl__timer *t, kl__timer_cb cb, void *arg);
/* (Re)arm at the monotonic time at (ns). Timers due at the same time run
 * in the order they were armed. */
void kl__timer_arm(kl__loop *loop, kl__timer *t, int64_t at);
void kl__timer_cancel(kl__loop *loop, kl__timer *t);

#endif
