/* The event loop: one thread, epoll on the descriptors watched
 * (kl__loop_watch), a binary min-heap of timers and a FIFO of closures
 * posted by other threads. The loop knows no protocol: what runs on it (the
 * HTTP layer, core/http.c: kl__loop_new there builds a loop for a rest
 * config) plugs in through kl__loop_hooks and watches its own descriptors.
 *
 * Threads: kl__loop_start/free and kl__loop_post/kl__loop_call may be called
 * from any thread (free not from the loop thread). Everything else only on
 * the loop thread (from a posted closure, a timer or a descriptor's
 * callback). */
#ifndef KL_LOOP_H
#define KL_LOOP_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "core/common.h"

typedef struct kl__loop kl__loop;

/* What runs on a loop. data is its own state (kl__loop_data). */
typedef struct kl__loop_hooks {
    /* Loop thread, once per iteration after "now" was read and the ready
     * descriptors' callbacks ran, before the timers and the posted
     * closures: finish what the I/O brought (run callbacks). */
    void (*run)(void *data);
    /* Loop thread: the longest the next wait may last for what runs on the
     * loop (ms): 0 when work waits already, -1 for no limit. */
    long (*timeout_ms)(void *data);
    /* Loop thread, before a wait: send what the iteration queued. Nonzero:
     * that left work to run (a connection failed), the wait must not
     * sleep. */
    int (*flush)(void *data);
    /* From kl__loop_free, once the thread has stopped and before the timers
     * and the queue are freed: it may cancel timers and unwatch
     * descriptors. */
    void (*destroy)(void *data);
} kl__loop_hooks;

/* Start the loop thread with hooks (copied) and their data. *out is set
 * before the thread starts, so data may hold it (&data->loop) for the
 * hooks. log may be NULL; it is borrowed and must outlive the loop. On
 * failure *out is NULL and nothing of data is freed: the caller still owns
 * it. K8SLEASE_ENOMEM. */
int kl__loop_start(kl__loop **out, const kl__loop_hooks *hooks, void *data, const kl__log *log);
/* Stop the thread; posted closures not yet run are run first; then the
 * hooks' destroy (requests in flight are cancelled without their
 * callbacks). */
void kl__loop_free(kl__loop *loop);
/* The data given to kl__loop_start. */
void *kl__loop_data(const kl__loop *loop);

/* Descriptors (loop thread). cb(fd, events, arg) runs on the loop thread,
 * in the iteration after a wait found fd ready for what it is watched for
 * (EPOLLIN, EPOLLOUT; EPOLLERR and EPOLLHUP always): level-triggered, so
 * it runs again while the descriptor stays ready. */
typedef void (*kl__watch_cb)(int fd, uint32_t events, void *arg);
/* Watch fd for events with cb and arg, replacing what it was watched for
 * (events 0: stop, as kl__loop_unwatch). 0, K8SLEASE_ENOMEM (no room for
 * the descriptor) or K8SLEASE_ETRANSPORT (epoll refused it), error set. */
int kl__loop_watch(kl__loop *loop, int fd, uint32_t events, kl__watch_cb cb, void *arg);
/* Make room to watch fd, so that watching it later cannot fail for want of
 * memory: for a descriptor whose watcher has no way to report a failure.
 * 0 or K8SLEASE_ENOMEM (error set). */
int kl__loop_reserve(kl__loop *loop, int fd);
/* Stop watching fd, before it is closed: no callback follows, not even
 * for readiness a wait found already. Accepts a descriptor not watched. */
void kl__loop_unwatch(kl__loop *loop, int fd);
/* Nonzero while the loop batches its waits (under load: see loop.c): a
 * reader should take what its descriptor has, not one read's worth, as the
 * loop looks again only after its next window. */
int kl__loop_batching(const kl__loop *loop);

/* A thread of the library (the loop's, an exec plugin's): it takes none of
 * the host process's signals. pthread_create's result. Any thread. */
int kl__thread_start(pthread_t *t, void *(*fn)(void *), void *arg);

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
    uint64_t waits;      /* waits that could sleep (a timeout other than 0) */
    uint64_t polls;      /* waits of 0 ms: the descriptors looked at, no sleep */
    uint64_t timers;     /* timer callbacks run */
    uint64_t batches;    /* batching windows waited */
    int last_timeout_ms; /* of the last wait (-1: none) */
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
