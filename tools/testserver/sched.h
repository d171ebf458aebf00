/*
 * sched.h - parking connections without parking threads.
 *
 * A watch stream with nothing to send, or a request held by a latency or
 * hang fault, is suspended (an HTTP/1.1 connection in libmicrohttpd, or an
 * HTTP/2 stream whose data is deferred; see ts_conn in conn.h): no thread
 * blocks and no CPU is spent. It is resumed when an event arrives,
 * when it is woken explicitly, or when its deadline passes; one timer thread
 * sleeps on a condition variable until the earliest deadline.
 *
 * Every function here is called with the server lock held (sched->mu);
 * suspending and resuming under that lock is what makes a resume never race
 * a suspend. Suspending and resuming call the connection's ops (conn.h),
 * which the transport registered: the scheduler reaches up through them and
 * includes nothing above it. The timer thread's tick is a callback too
 * (registered by server.c).
 */
#ifndef TS_SCHED_H
#define TS_SCHED_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ts_conn;

typedef struct ts_sleeper {
    struct ts_conn *conn;
    int64_t wake_ms;                /* monotonic deadline, INT64_MAX: none */
    size_t heap_idx;                /* position in the deadline heap, SIZE_MAX: not in it */
    struct ts_sleeper *prev, *next; /* list of all suspended sleepers */
    bool suspended;
} ts_sleeper;

typedef struct ts_sched {
    pthread_mutex_t *mu; /* the server lock */
    pthread_cond_t cv;
    ts_sleeper **heap; /* min-heap on wake_ms */
    size_t n, cap;
    ts_sleeper list; /* sentinel */
    size_t nsuspended;
    bool refuse; /* draining: suspend() says no, so stop_daemon finds none */
    bool stop;
    bool started;
    pthread_t thread;
    /* Called by the timer thread each round; returns its own next deadline. */
    int64_t (*tick)(void *ctx, int64_t now);
    void *tick_ctx;
} ts_sched;

int ts_sched_init(ts_sched *s, pthread_mutex_t *mu, int64_t (*tick)(void *, int64_t), void *ctx);
/* Starts the timer thread (call without the lock). */
int ts_sched_start(ts_sched *s);
/* Stops and joins the timer thread (call without the lock). */
void ts_sched_stop(ts_sched *s);
void ts_sched_free(ts_sched *s);

/* Initialises a sleeper for a connection. */
void ts_sleeper_init(ts_sleeper *sl, struct ts_conn *conn);

/*
 * Suspends sl->conn until woken or until wake_ms (INT64_MAX: no deadline).
 * Only from the connection's own access handler or content reader. Returns
 * false if the caller must not wait (draining, or out of memory).
 */
bool ts_sched_suspend(ts_sched *s, ts_sleeper *sl, int64_t wake_ms);
/* Resumes sl if it is suspended; harmless otherwise. */
void ts_sched_wake(ts_sched *s, ts_sleeper *sl);
/* Forgets sl without resuming it (its request or stream is going away). */
void ts_sched_cancel(ts_sched *s, ts_sleeper *sl);
void ts_sched_wake_all(ts_sched *s);
/* Resumes the sleepers of the connection whose reap_fd is fd (fd >= 0). */
void ts_sched_wake_fd(ts_sched *s, int fd);
/* Deadlines outside the heap changed (a fault rule): re-run tick() now. */
void ts_sched_kick(ts_sched *s);

#endif
