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
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>

#include "core/common.h"
#include "core/loop.h"

#define KL_DEFAULT_LEASE_DURATION_MS 15000
#define KL_DEFAULT_RENEW_DEADLINE_MS 10000
#define KL_DEFAULT_RETRY_PERIOD_MS   2000

typedef struct kl__elector_backend kl__elector_backend;

/* What an election does, as typed records, in the order it happens (loop
 * thread): the one source the seed ABI's log lines are made from (and
 * whatever else wants an election's story without parsing log text). */
typedef enum kl__elector_note_type {
    KL_NOTE_STARTED,  /* elected: epoch (on_started_leading follows) */
    KL_NOTE_STOPPED,  /* the term is over, or the election ended without one */
    KL_NOTE_LEADER,   /* observed holder changed: identity ("" none), epoch */
    KL_NOTE_REQUEST,  /* a request of the election ended: verb, status, message */
    KL_NOTE_RELEASED, /* our release was written: the term's epoch (Kubernetes) */
    KL_NOTE_DONE,     /* the election is over, its release included: the last note */
    KL_NOTE_HANDOFF   /* the term ends in a handoff (STOPPED follows): identity, the
                         successor ("" none: a plain release) */
} kl__elector_note_type;

typedef struct kl__elector_note {
    kl__elector_note_type type;
    int64_t epoch;        /* STARTED, LEADER, RELEASED */
    const char *identity; /* LEADER, HANDOFF; borrowed for the call */
    /* REQUEST: "get", "create" or "update" (Kubernetes; the etcd elector
     * reports none); status 0, or a K8SLEASE_E* code (K8SLEASE_ENOTFOUND
     * of a GET is the answer "no Lease", not a failure); message: what went
     * wrong, without the "VERB lease NS/NAME: " prefix, NULL on success. */
    const char *verb;
    int status;
    const char *message;
} kl__elector_note;

typedef void (*kl__elector_note_cb)(const kl__elector_note *note, void *arg);

#define KL_SYNC_MU 1u
#define KL_SYNC_CV 2u

struct k8slease_elector {
    k8slease_client *client;
    const kl__elector_backend *backend;
    char *what; /* "lease NS/NAME", "etcd election NAME": for messages */
    /* What its log lines are about: what, and the subject a backend sets
     * (the Kubernetes one: "NS/NAME"; NULL: none). */
    kl__log_about about;
    k8slease_elector_options opts; /* callbacks and user_data; strings not kept */

    /* Shared with the threads that wait. */
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_MONOTONIC */
    unsigned sync;     /* which of them are set up: KL_SYNC_MU, KL_SYNC_CV */
    int elected;       /* STARTED happened */
    int stopped;       /* STOPPED happened: the term is over (or never was) */
    int done;          /* DONE happened: nothing left in flight */
    int stop_posted;   /* a STOP was sent to the loop */
    /* k8slease_elector_handoff: the successor (NULL: the best known) and the
     * bound, read by the loop's closure after the post. */
    char *handoff_to;
    int64_t handoff_bound_ms;
    /* Threads in wait_lost that came before STOPPED; at STOPPED, how many
     * of them have yet to return (kl__elector_hold_release). */
    int lost_waiters;
    int lost_unseen;
    void (*lost_resume)(k8slease_elector *e); /* run on the loop once they have */
    int lost_resume_posted;                   /* ... posted, not yet run */
    k8slease_elector_stats stats;
    char *end_reason; /* why the election ended on its own, NULL if it did not */
    _Atomic int64_t epoch;
    _Atomic int64_t leader_deadline; /* monotonic ns while leader, else 0 */

    /* Set before the start is posted, then read on the loop thread only. */
    kl__elector_note_cb note_cb;
    void *note_arg;

    /* Loop thread: what the backend's driver keeps here (core/driver.h). */
    kl__timer timer;          /* the machine's one timer (kl__elector_settle); its
                                 callback set by the backend */
    int64_t term_deadline_ms; /* a term with no renewal for this long is lost */
    int64_t renewal_sent;     /* monotonic ns a renewal in flight was sent; 0: none */
    char *renewal_error;      /* the last renewal's error since a success; NULL: none */

    /* Retired (kl__elector_retire): the loop frees it once DONE. Loop thread. */
    int retired;
    void (*reaped)(void *arg); /* called once it is freed */
    void *reaped_arg;
    kl__timer reap;
    k8slease_elector *retired_next; /* the client's list of retired electors */
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
    /* Loop thread: hand the term over to `to` (NULL: the best known
     * candidate) in a term of bound_ms, as stop with release (ends with
     * kl__elector_report_done()); called at most once, instead of stop.
     * NULL: the backend has no handoff. */
    void (*handoff)(k8slease_elector *e, const char *to, int64_t bound_ms);
    /* Loop thread: cancel every timer, request and watch; no callback of the
     * election runs afterwards. Also after DONE. */
    void (*detach)(k8slease_elector *e);
    /* Free (head included, with kl__elector_head_destroy()). Any thread,
     * after detach or when start never ran. Accepts NULL. */
    void (*destroy)(k8slease_elector *e);
    /* The words of the line that tells a lost term (core/driver.h): what
     * keeps the term ("renewal", "keepalive"), the deadline it must
     * succeed within ("renew deadline", "lease TTL": e->term_deadline_ms),
     * and what KL_TERM_DELETED says ("the Lease was deleted"). */
    const char *renewal, *deadline, *deleted;
};

/* Set up the head: copies opts (without its strings), mutex, condition
 * (on CLOCK_MONOTONIC), atomics (epoch -1), stats version. what:
 * printf-style description, kept in a string of its size. 0, or
 * K8SLEASE_ENOMEM with the message set (out of memory, or the mutex or
 * condition could not be set up: "pthread_cond_init: ..."); the head is
 * to be destroyed either way (e zeroed before). */
int kl__elector_head_init(k8slease_elector *e, k8slease_client *client,
                          const kl__elector_backend *backend, const k8slease_elector_options *opts,
                          const char *what_fmt, ...) KL_PRINTF(5, 6);
int kl__elector_head_vinit(k8slease_elector *e, k8slease_client *client,
                           const kl__elector_backend *backend, const k8slease_elector_options *opts,
                           const char *what_fmt, va_list ap) KL_PRINTF(5, 0);
void kl__elector_head_destroy(k8slease_elector *e);

/* Loop thread, as the backend's machine says: */
/* Leader with epoch until deadline (monotonic ns): log, stores, the
 * callback, then waiters of wait_elected wake up. */
void kl__elector_report_started(k8slease_elector *e, int64_t epoch, int64_t deadline);
/* A renewal moved the leader deadline. */
void kl__elector_report_deadline(k8slease_elector *e, int64_t deadline);
/* Leadership over (or never had): deadline 0, log, callback, then the
 * waiters of wait_lost wake up. */
void kl__elector_report_stopped(k8slease_elector *e);
void kl__elector_report_new_leader(k8slease_elector *e, const char *identity, int64_t epoch);
/* The election cannot go on (before ending it): message is kept for
 * wait_elected's error ("election over without becoming leader: ..."). */
void kl__elector_report_error(k8slease_elector *e, const char *message);
/* The election is over: deadline 0, every waiter wakes up. */
void kl__elector_report_done(k8slease_elector *e);

/* A request of the election ended (see kl__elector_note). */
void kl__elector_report_request(k8slease_elector *e, const char *verb, int status,
                                const char *message);

/* Our release was written (the Lease now has no holder); epoch: the term's. */
void kl__elector_report_released(k8slease_elector *e, int64_t epoch);

/* The term is being handed over to `to` ("" none: released instead); before
 * the STOPPED of that term. */
void kl__elector_report_handoff(k8slease_elector *e, const char *to);

/* Loop thread, after kl__elector_report_stopped, before the write that
 * frees the Lease (or the etcd key): whether a thread that was waiting in
 * wait_lost when the term ended has yet to return from it. Then the
 * backend holds its release back, and resume(e) runs on the loop thread
 * once the last such thread has returned (never after DONE). A program
 * that learns the end of its term from wait_lost (the seed ABI's
 * K8sLeaseWaitLost) knows it before another candidate can take the Lease:
 * a release written at once is taken by the next candidate in about a
 * millisecond, sooner than a thread woken up may run. The backend's release
 * deadline bounds the wait: past it the election ends without a release
 * and the Lease expires on its own. */
int kl__elector_hold_release(k8slease_elector *e, void (*resume)(k8slease_elector *e));
/* Tests: threads of the process waiting in k8slease_elector_wait_lost
 * now, every elector's; and a hook that such a thread, woken by the end of
 * the term, calls (mu not held) before it counts as returned: it stands
 * for a thread that the scheduler has not run yet. Set before the
 * electors start. */
int kl__elector_lost_waiting(void);
extern void (*kl__elector_lost_hook)(k8slease_elector *e);

/* k8slease_elector_start with a note hook: cb(note, arg) runs on the loop
 * thread for every note of the election, from its start to DONE. */
int kl__elector_start_noted(k8slease_elector **out, k8slease_client *client,
                            const k8slease_elector_options *opts, kl__elector_note_cb cb,
                            void *arg);

/* Give the elector up without waiting for the server: stop it (releasing
 * as its options say) if it runs, and free it on the loop once its
 * election is over (the release, bounded by renew_deadline, goes on in the
 * background; its notes and callbacks keep coming until DONE). Then
 * reaped(arg) runs on the loop thread. k8slease_client_free frees the
 * retired electors still running (their releases cut short). The caller
 * must not use e afterwards. Any thread but the loop's. */
void kl__elector_retire(k8slease_elector *e, void (*reaped)(void *arg), void *arg);
/* Wait until every retired elector of the client is over and freed (each
 * is bounded by its release deadline). Any thread but the loop's. */
void kl__elector_wait_retired(k8slease_client *client);
/* Wait until the election is over, release included (k8slease_elector_stop
 * without the stop): 0 or K8SLEASE_ETIMEOUT. Any thread but the loop's. */
int kl__elector_wait_done(k8slease_elector *e, int64_t timeout_ms);
/* k8slease_client_free: free every retired elector now (loop thread). */
void kl__elector_reap_retired(k8slease_client *client);

/* Count one successful renewal that took took_ns, started at started_ns
 * (e->mu held). */
void kl__elector_count_renewal(k8slease_elector_stats *st, int64_t started_ns, int64_t took_ns);

/* Loop-side seed for the jitter of an elector. */
uint64_t kl__elector_seed(const void *p);

#endif
