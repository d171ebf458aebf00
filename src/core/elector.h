/* The public elector handle and what every backend implements.
 *
 * A backend's elector starts with a struct k8slease_elector (its first
 * member, so a k8slease_elector * converts to the backend's struct). The
 * generic part (core/elector.c) checks the arguments of the public calls,
 * posts start and stop to the loop, waits, and reads the atomics; the
 * backend campaigns on the loop thread and reports through the
 * kl__elector_report_* functions below, which keep the order the public
 * API promises (on_started_leading returns before wait_elected does; DONE
 * wakes every waiter). */
#ifndef KL_CORE_ELECTOR_H
#define KL_CORE_ELECTOR_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "core/common.h"

#define KL_DEFAULT_LEASE_DURATION_MS 15000
#define KL_DEFAULT_RENEW_DEADLINE_MS 10000
#define KL_DEFAULT_RETRY_PERIOD_MS   2000

typedef struct kl__elector_backend kl__elector_backend;

struct k8slease_elector {
    k8slease_client *client;
    const kl__elector_backend *backend;
    char what[300];                /* "lease NS/NAME", "etcd election NAME": for messages */
    k8slease_elector_options opts; /* callbacks and user_data; strings not kept */

    /* Shared with the threads that wait. */
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_MONOTONIC */
    int elected;       /* STARTED happened */
    int done;          /* DONE happened */
    int stop_posted;   /* a STOP was sent to the loop */
    k8slease_elector_stats stats;
    char end_reason[512]; /* why the election ended on its own, "" if it did not */
    _Atomic int64_t epoch;
    _Atomic int64_t leader_deadline; /* monotonic ns while leader, else 0 */
};

struct kl__elector_backend {
    /* Check the options (version, out, client and opts are checked) and
     * allocate the backend's elector, its head set up with
     * kl__elector_head_init(). Any thread. 0 or a K8SLEASE_E* code with the
     * message set. */
    int (*create)(k8slease_elector **out, k8slease_client *client,
                  const k8slease_elector_options *opts);
    /* Loop thread: begin campaigning. */
    void (*start)(k8slease_elector *e);
    /* Loop thread: stop (release 0 or 1); ends with kl__elector_report_done()
     * now or later. Called at most once. */
    void (*stop)(k8slease_elector *e, int release);
    /* Loop thread: cancel every timer, request and watch; no callback of the
     * election runs afterwards. Also after DONE. */
    void (*detach)(k8slease_elector *e);
    /* Free (head included, with kl__elector_head_destroy()). Any thread,
     * after detach or when start never ran. Accepts NULL. */
    void (*destroy)(k8slease_elector *e);
};

/* Set up the head: copies opts (without its strings), mutex, condition,
 * atomics (epoch -1), stats version. what: printf-style description. */
void kl__elector_head_init(k8slease_elector *e, k8slease_client *client,
                           const kl__elector_backend *backend, const k8slease_elector_options *opts,
                           const char *what_fmt, ...) KL_PRINTF(5, 6);
void kl__elector_head_destroy(k8slease_elector *e);

/* Loop thread, as the backend's machine says: */
/* Leader with epoch until deadline (monotonic ns): log, stores, the
 * callback, then waiters of wait_elected wake up. */
void kl__elector_report_started(k8slease_elector *e, int64_t epoch, int64_t deadline);
/* A renewal moved the leader deadline. */
void kl__elector_report_deadline(k8slease_elector *e, int64_t deadline);
/* Leadership over (or never had): deadline 0, log, callback. */
void kl__elector_report_stopped(k8slease_elector *e);
void kl__elector_report_new_leader(k8slease_elector *e, const char *identity, int64_t epoch);
/* The election cannot go on (before ending it): message is kept for
 * wait_elected's error ("election over without becoming leader: ..."). */
void kl__elector_report_error(k8slease_elector *e, const char *message);
/* The election is over: deadline 0, every waiter wakes up. */
void kl__elector_report_done(k8slease_elector *e);

/* Count one successful renewal that took took_ns, started at started_ns
 * (e->mu held). */
void kl__elector_count_renewal(k8slease_elector_stats *st, int64_t started_ns, int64_t took_ns);

/* Loop-side seed for the jitter of an elector. */
uint64_t kl__elector_seed(const void *p);

#endif
