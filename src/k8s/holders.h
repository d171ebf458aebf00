/* Holder reads answered from a watch: a program that
 * asks for the same Lease's holder again and again (Mooncake's standby
 * calls K8sLeaseGetHolder every 200 ms) is answered from the client's
 * shared stream of that Lease (k8s/informer.c: the election's own when this
 * client campaigns for it) instead of a GET each time.
 *
 * The rules:
 *  - the first read of a Lease is a GET; a second one within IDLE (60 s)
 *    subscribes to the Lease's stream (before its own GET is sent, so any
 *    change after that GET's read comes as an event) and is a GET too;
 *  - from then on a read is answered from the last state seen while the
 *    stream is healthy (as the informer says) and a state is known: the
 *    newest of every event and every GET answer since the stream last
 *    became unhealthy (resourceVersion order, k8s/informer.h's rv gate).
 *    Otherwise a read is a GET, and its answer is that state;
 *  - a Lease nobody reads for IDLE is no longer followed;
 *  - with crash failover, the Pod that the record of the current term (as
 *    the stream showed it) names is followed too, on the Pod informer, and
 *    a read is told from it whether the kubelet reported that instance
 *    ended, while that stream is healthy and has shown the Pod; otherwise
 *    the reader reads the Pod itself.
 * So a cached answer is as fresh as the stream: the server's state a few
 * ms ago on a healthy stream (its events), never older than the stream's
 * health window (max(3 × 2 s, 2 × the bookmark interval), k8s/informer.h)
 * plus the event delivery.
 *
 * Threads: kl__holders_lookup and kl__holders_feed from any thread but the
 * loop thread (they take a mutex and may wait for the loop); the rest on
 * the loop thread or before it runs. */
#ifndef KL_K8S_HOLDERS_H
#define KL_K8S_HOLDERS_H

#include <stdint.h>

#include "core/common.h"
#include "k8s/codec.h"

typedef struct kl__holders kl__holders;
typedef struct kl__informer kl__informer;
typedef struct kl__loop kl__loop;

/* What a holder read reports of a Lease (owned strings). */
typedef struct kl__holder_state {
    int absent; /* no Lease: the rest is empty */
    char *identity, *rv, *strategy, *preferred_holder;
    char *crash_record; /* the k8slease.io/holder-container annotation, NULL if none */
    int64_t epoch, renew_us, acquire_us, duration_s;
    /* Crash failover, from a lookup: the followed Pod of crash_record says
     * whether its instance ended (ended_known 0: read the Pod). */
    int ended_known, ended;
} kl__holder_state;

/* The state of lease; with crash, its crash failover record too (0,
 * K8SLEASE_ENOMEM with out cleared). */
int kl__holder_state_of(kl__holder_state *out, const kl__lease *lease, int crash);
void kl__holder_state_clear(kl__holder_state *s);

/* crash: keep the crash failover records (k8slease_client_options
 * .crash_failover) and follow the Pod a current term's record names on
 * pod_informer, so that reads need not read it. 0 or K8SLEASE_ENOMEM. */
int kl__holders_new(kl__holders **out, kl__loop *loop, kl__informer *informer,
                    kl__informer *pod_informer, int crash, const kl__log *log);
/* Loop thread, before the informer's shutdown: stop following. Lookups
 * after it are always misses. */
void kl__holders_shutdown(kl__holders *hs);
/* Once the loop has stopped. Accepts NULL. */
void kl__holders_free(kl__holders *hs);

/* 1 with *out set (a copy: clear it) when ns/name is answered from the
 * stream; 0 when the caller must read the Lease, and then feed what it
 * read with *ticket; K8SLEASE_ENOMEM. */
int kl__holders_lookup(kl__holders *hs, const char *ns, const char *name, kl__holder_state *out,
                       uint64_t *ticket);
/* What the caller read after a miss (s NULL: the Lease does not exist),
 * with the ticket that lookup gave: taken only when the stream followed
 * the Lease, without a break, since before the read was sent. */
void kl__holders_feed(kl__holders *hs, const char *ns, const char *name, uint64_t ticket,
                      const kl__holder_state *s);

/* A Lease this client wrote, as the server answered the write (an
 * election's acquisition, renewal or release, k8slease_lease_release):
 * taken when the Lease is followed, the stream healthy, a state known and
 * this one newer, so that a read after a write of the same client sees it
 * even before its event comes. Any thread. */
void kl__holders_note(kl__holders *hs, const kl__lease *lease);

/* Reads answered from the stream and reads that were GETs, since the
 * client started (for tests and the benchmark). */
void kl__holders_counts(kl__holders *hs, uint64_t *hits, uint64_t *misses);

/* Tests: how long a Lease is followed without a read (60 s), and how many
 * are followed now. */
void kl__holders_set_idle(kl__holders *hs, int64_t idle_ns);
size_t kl__holders_following(kl__holders *hs);

#endif
