/* What the drivers of both backends share (k8s/driver.c, etcd/driver.c):
 * the timings of an elector's options, with the library's defaults and
 * the one rule for a request's timeout; the machine's timer and the leader
 * deadline after each step; the stats of requests and of the watch; and
 * the line that says why a term was lost.
 *
 * A driver runs its backend's pure machine on the loop thread:
 *
 *     step the machine with the event
 *     carry out each action (requests, the kl__elector_report_* calls;
 *         STOPPED through kl__elector_report_term_end)
 *     unless it is DONE: kl__elector_settle(e, its leader deadline or 0,
 *         its timer)
 *
 * and counts each request that ends with kl__elector_count_request.
 * Loop thread, unless said otherwise. */
#ifndef KL_CORE_DRIVER_H
#define KL_CORE_DRIVER_H

#include <stdint.h>

#include "core/elector.h"
#include "core/term.h"

/* An elector's timings (ms), the options' or the library's defaults
 * (KL_DEFAULT_*_MS for a 0), and the timeout of each of its requests:
 * kl__request_timeout_ms(renew_deadline, retry_period) (core/timings.h),
 * whatever the backend. */
typedef struct kl__elector_timings {
    int64_t lease_duration_ms, renew_deadline_ms, retry_period_ms;
    int64_t request_timeout_ms;
} kl__elector_timings;

/* Fill t from opts. 0, or K8SLEASE_EINVAL with the message set: "durations
 * must be positive (lease_duration 15000 ms, renew_deadline -1 ms,
 * retry_period 2000 ms)", "lease_duration 9223372036854775 ms is too large"
 * (a duration that nanoseconds cannot hold). The rules between them are
 * kl__timings_check's. Any thread. */
int kl__elector_timings_of(kl__elector_timings *t, const k8slease_elector_options *opts);

/* A backend's elector of size bytes (its struct, whose first member is
 * the head), zeroed, its head set up (kl__elector_head_init, what from
 * what_fmt), its timer calling on_timer(&e->timer, elector). 0 or
 * K8SLEASE_ENOMEM with nothing left allocated; free it with the backend's
 * destroy. Any thread. */
int kl__elector_new(k8slease_elector **out, size_t size, k8slease_client *client,
                    const kl__elector_backend *backend, const k8slease_elector_options *opts,
                    kl__timer_cb on_timer, const char *what_fmt, ...) KL_PRINTF(7, 8);

/* After a step that left the machine running: leader_deadline (monotonic
 * ns) is the term's while it leads (0: not leading, left as it is), and
 * the machine's one timer, e->timer, is armed at `at` (INT64_MAX: none). */
void kl__elector_settle(k8slease_elector *e, int64_t leader_deadline, int64_t at);

/* What a request of the election was, and how it ended. */
typedef enum kl__request_kind {
    KL_REQUEST_OTHER,  /* counted in requests only */
    KL_REQUEST_GET,    /* and in gets (a read) */
    KL_REQUEST_CREATE, /* creates (a write that makes a record) */
    KL_REQUEST_UPDATE  /* updates (a write that renews one) */
} kl__request_kind;

typedef struct kl__request_outcome {
    kl__request_kind kind;
    int64_t started_ns;  /* monotonic, when it was sent */
    int transport_error; /* no answer: timeout, TLS, connection */
    long http_status;    /* the answer's; 0 without one */
    int expected;        /* a 4xx that is the answer it expects: not an error */
    int conflict;        /* another writer came first (HTTP 409, etcd AlreadyExists) */
    /* Sent while leading to keep the term (a renewal, or a read on its
     * way): it ends the renewal kl__elector_renewal_sent began, and its
     * error is what a term lost on its deadline names. */
    int renewing;
    int held;          /* succeeded and holds the term: last_renew_ns (acquisition, renewal) */
    int renewal;       /* a renewal that succeeded: renewals, its latency */
    const char *error; /* what went wrong, without the election's prefix; NULL: nothing */
} kl__request_outcome;

/* Count o in the elector's stats (k8slease_elector_stats: requests, the
 * kind's counter, transport errors, 5xx, 4xx other than 409 and
 * expected, conflicts, renewals and their latency, last_renew_ns). */
void kl__elector_count_request(k8slease_elector *e, const kl__request_outcome *o);
/* A request to keep the term was sent at now (monotonic ns): until it
 * ends (kl__elector_count_request with renewing), a term lost on its
 * deadline says it is still waiting for its answer. */
void kl__elector_renewal_sent(k8slease_elector *e, int64_t now);

/* The watch of the election became healthy (1) or not (0); it saw n
 * changes. */
void kl__elector_watch_healthy(k8slease_elector *e, int healthy);
void kl__elector_watch_events(k8slease_elector *e, uint64_t n);
/* Handoff: the candidate's object is written (1), not (0), or cannot be
 * (-1): stats.candidate_known. */
void kl__elector_candidate_known(k8slease_elector *e, int known);

/* The machine said STOPPED, for the reason why; holder and epoch are
 * KL_TERM_TAKEN's and KL_TERM_RETAKEN's (else ignored). A term that was
 * lost (any reason but KL_TERM_STOPPED, after STARTED) is logged at
 * warning level, saying why, in the backend's words
 * (kl__elector_backend): "lease default/x: lost the lease (epoch 3): no
 * successful renewal within the renew deadline of 10 s (last renewal:
 * HTTP 503 ...)", "(a renewal waits for its answer since 4000 ms)", "(no
 * renewal attempted)"; "\"b\" holds it now (epoch 4)"; ... Then as
 * kl__elector_report_stopped. */
void kl__elector_report_term_end(k8slease_elector *e, kl__term_end why, const char *holder,
                                 int64_t epoch);

#endif
