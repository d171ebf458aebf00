/* Shared Lease and Pod watches, as client-go's shared informers: one stream
 * per Lease (or per namespace) per client, whatever number of electors and
 * holder watches of that client follow it. An informer follows one kind of
 * object, chosen when it is made: Leases (kl__informer_new, the client's
 * informer) or Pods (kl__informer_new_pods, the client's pod_informer,
 * for crash failover). What is said below of Leases holds for
 * Pods, with the differences under "Pods".
 *
 * A stream LISTs (fieldSelector metadata.name=NAME, or the whole namespace),
 * then WATCHes from the list's resourceVersion with bookmarks, resuming
 * after every end and re-listing when the history is gone (410). Each
 * subscriber gets the Lease as listed or changed (KL_SUB_LEASE, another
 * name of KL_SUB_OBJECT), its absence (deleted, or missing from a list:
 * KL_SUB_ABSENT), and the stream's health (KL_SUB_HEALTH).
 *
 * Which stream: a Lease gets its own stream (fieldSelector on the name)
 * until a client follows more than KL_INFORMER_NS_THRESHOLD Leases of one
 * namespace; from then on one namespace-wide stream serves them all (events
 * dispatched by name) until none is followed. Over HTTP/1.1 every stream
 * holds a connection; the namespace-wide one costs events for Leases nobody
 * here follows, which the threshold keeps worth it. If the namespace-wide
 * list is forbidden (RBAC by resourceNames), the namespace goes back to one
 * stream per Lease for good.
 *
 * Health: a stream is healthy while it is established (list answered, watch
 * headers received, not failed since) and something (list, event, bookmark)
 * arrived within W = max(3 * RP, 2 * B) + the probe's timeout (below),
 * RP the smallest retry period of
 * its subscribers so far (2 s for holder watches), B the shortest interval
 * between two bookmarks seen on this client (0 until seen). A stream that
 * fails tells its subscribers at once and resumes; one that is silent for
 * max(2 * W, 75 s) is restarted (75 s: longer than the kube-apiserver's
 * one-minute bookmark period, so a quiet healthy stream is never cut before
 * it could teach us B).
 *
 * Probes: a stream silent for 2 * RP (and at most once per 2 * RP) gets a
 * probe, a GET of one of its Leases with a timeout of max(RP, 1 s). If it
 * times out, its connection is abandoned (core/http.h), and the stream
 * with it when it was there: it resumes at once on a new connection
 * (through a load balancer, to a replica that answers). If it is answered
 * with a newer resourceVersion than the stream has shown, the stream missed
 * changes (its connection is another one, or over HTTP/1.1 its own): it
 * resumes, on a new connection. If it is answered with the resourceVersion
 * the stream has shown (nothing missed), that counts as activity: a quiet
 * stream (a Lease nobody renews, a Pod) is a healthy one, kept so by a GET
 * every 2 * RP, and its subscribers can rely on it (a follower acts when
 * the dead leader's Lease expires instead of polling for it). So a stream
 * on a connection that answers nothing is back within 3 * RP (+ a
 * balancer's own detection).
 *
 * Pods: /api/v1/namespaces/NS/pods. A Pod's own stream reads it with a GET
 * of the Pod (404: absent) instead of a list, then WATCHes with
 * fieldSelector metadata.name from its resourceVersion (from the most
 * recent state after a 404), so RBAC's get and watch on pods are enough;
 * the namespace-wide stream (above the same threshold) lists, and goes back
 * to one stream per Pod if that is forbidden, as for Leases. Subscribers
 * get KL_SUB_OBJECT with pod set. A subscriber that starts on a Pod already
 * followed (another subscriber's: an elector's crash failover, a holder
 * read's) is told the last state its stream showed (KL_SUB_OBJECT or
 * KL_SUB_ABSENT) on the next loop turn, unless an event came first: a Pod
 * changes rarely, so waiting for its next change would leave it blind to
 * a report made before it joined. (A Lease subscriber reads the Lease
 * itself instead: a GET at its start.) A change the stream did not deliver is still
 * seen by the next probe (within 2 * RP) and the stream resumed, as for
 * Leases. A read or watch answered 403 (no RBAC permission) tells the
 * subscribers KL_SUB_HEALTH with healthy 0 and forbidden 1 (even when they
 * were told "not healthy" already), is logged once as a warning (until a
 * read or watch of Pods is answered again), and is retried after 1 s, 2 s,
 * 4 s, ... up to 30 s apart. Lease informers keep their rules for 403 (a
 * retry within a second, a warning each time; forbidden is never set).
 *
 * Threads: everything on the loop thread. Callbacks run from the loop's
 * stream, timer and request callbacks, never from kl__sub_start/stop. */
#ifndef KL_INFORMER_H
#define KL_INFORMER_H

#include <stdint.h>

#include "core/http.h"
#include "k8s/codec.h"
#include "k8s/object.h"
#include "k8s/pod.h"

#define KL_INFORMER_NS_THRESHOLD 8

typedef struct kl__informer kl__informer;
typedef struct kl__sub kl__sub;

typedef enum kl__sub_event_type {
    KL_SUB_OBJECT,               /* the object as of rv (listed, added or modified) */
    KL_SUB_ABSENT,               /* no object as of rv (deleted, or not in a list) */
    KL_SUB_HEALTH,               /* the stream became healthy or not, or forbidden */
    KL_SUB_LEASE = KL_SUB_OBJECT /* the same, as the Lease call sites say it */
} kl__sub_event_type;

typedef struct kl__sub_event {
    kl__sub_event_type type;
    const kl__lease *lease; /* KL_SUB_OBJECT of a Lease informer; borrowed for the call */
    const kl__pod *pod;     /* KL_SUB_OBJECT of a Pod informer; borrowed for the call */
    const char *rv;         /* KL_SUB_OBJECT, KL_SUB_ABSENT: resourceVersion of that state */
    int healthy;            /* KL_SUB_HEALTH */
    int forbidden;          /* KL_SUB_HEALTH of a Pod informer: not healthy because the
                               server answered 403 (no permission to read pods);
                               retried with backoff */
} kl__sub_event;

typedef void (*kl__sub_cb)(const kl__sub_event *ev, void *arg);

/* One per client and kind: Leases, Pods. 0 or K8SLEASE_ENOMEM. Any thread
 * (no I/O: nothing is sent until a kl__sub_start). */
int kl__informer_new(kl__informer **out, kl__loop *loop, const kl__log *log);
int kl__informer_new_pods(kl__informer **out, kl__loop *loop, const kl__log *log);
/* Stop every stream (loop thread, before the loop stops; the subscribers
 * should all be gone by then: those left get no more callbacks). */
void kl__informer_shutdown(kl__informer *inf);
/* Free, once the loop has stopped. Accepts NULL. */
void kl__informer_free(kl__informer *inf);

/* Follow ns/name; retry_period_ns (0: none) tightens the health window.
 * Starts a stream when needed; no callback before it returns. NULL on
 * ENOMEM (error set). */
kl__sub *kl__sub_start(kl__informer *inf, const char *ns, const char *name, int64_t retry_period_ns,
                       kl__sub_cb cb, void *arg);
/* No callback after it returns; may be called from a callback (any
 * subscriber's). Accepts NULL. */
void kl__sub_stop(kl__sub *sub);
/* List the subscriber's stream again from scratch (not resumed from its
 * resourceVersion), on the next loop turn: for when the server's
 * resourceVersions went back. Accepts NULL. */
void kl__sub_relist(kl__sub *sub);
/* Health of the subscriber's stream, as last reported to it. */
int kl__sub_healthy(const kl__sub *sub);
/* 1 when the subscriber's stream was last answered 403 (Pod informers),
 * as last reported to it: a subscriber that starts on such a stream is
 * not told again. */
int kl__sub_forbidden(const kl__sub *sub);

#endif
