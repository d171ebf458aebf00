/* Planned handoff (docs/semantics.md, "Planned handoff"): the leader ends
 * its term in favour of a successor, which leads within a round trip, and
 * if it does not, anyone may take the Lease once a short bound has passed.
 *
 * Candidates make themselves known with a Lease object of their own (any
 * Kubernetes, no feature gate; the same RBAC as the election's Lease, plus
 * delete): named "<lease>-c-<16 hex digits>" (a hash of the identity), in
 * the election's namespace, labelled KL_HANDOFF_LABEL=<16 hex digits of a
 * hash of the election's Lease name>, with holderIdentity = the candidate's
 * identity and the annotation KL_HANDOFF_CANDIDATE (JSON):
 *
 *   {"lease": NAME, "pod": POD, "podUID": UID, "terminating": false,
 *    "revision": REV, "priority": N, "bornAt": RFC3339}
 *
 * bornAt: the Pod's creation (stable across restarts of its container),
 * else the process's start. With a Pod the object is owned by it (an
 * ownerReference: the garbage collector deletes it with the Pod) and is
 * written only at start, when the candidate starts terminating and at the
 * end (deleted), and never expires; without one it lasts
 * leaseDurationSeconds 3600 and is renewed every 30 minutes, and an expired
 * one counts for nothing.
 *
 * The choice (kl__handoff_choose): not the leader, not terminating, not
 * expired (without a Pod); then the newest revision (revisions ranked by
 * the earliest bornAt among their candidates: a rollout's new revision was
 * born last); then the highest priority; then the longest-lived (earliest
 * bornAt); then the identity, for a deterministic order.
 *
 * The handoff itself is a write of the leader's Lease once its term is
 * over for its own program (the machine, k8s/election.h): holderIdentity =
 * the successor, leaseTransitions + 1, acquireTime = renewTime = now,
 * leaseDurationSeconds = the bound, and the annotation KL_HANDOFF_DONE
 * {"from": ID, "to": ID, "epoch": N}. The successor takes it at once as a
 * Lease that names it (client-go's rule too, so a Go or client-go successor
 * takes it at its next poll); the others see a holder until the bound
 * expires; epochs grow (the successor's term is + 2, a client-go
 * successor's + 1).
 *
 * An operator asks a leader for a handoff with the annotation
 * KL_HANDOFF_REQUEST on the Lease ("" or "*": the best candidate, else an
 * identity): `kubectl annotate lease NAME k8slease.io/handoff-request=`;
 * the leader's watch sees it and the handoff write removes it. */
#ifndef KL_K8S_HANDOFF_H
#define KL_K8S_HANDOFF_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "core/client.h"
#include "core/common.h"
#include "core/http.h"

#define KL_HANDOFF_LABEL     "k8slease.io/candidate-of"
#define KL_HANDOFF_CANDIDATE "k8slease.io/candidate"
#define KL_HANDOFF_REQUEST   "k8slease.io/handoff-request"
#define KL_HANDOFF_DONE      "k8slease.io/handoff"

/* A candidate's object lasts this long without a Pod, renewed every half. */
#define KL_HANDOFF_CAND_DURATION_S 3600

typedef struct kl__handoff_cand {
    char *identity; /* spec.holderIdentity */
    char *lease;    /* the election's Lease name */
    char *pod, *pod_uid;
    char *revision;
    int64_t priority;
    int terminating;
    int64_t born_us;  /* wall µs */
    int64_t renew_us; /* spec.renewTime, wall µs */
    int64_t duration_s;
} kl__handoff_cand;

void kl__handoff_cand_clear(kl__handoff_cand *c);

/* The 16 hex digits of the label value of a Lease name's candidates. */
void kl__handoff_label(const char *lease, char out[17]);
/* The candidate object's name for identity (a DNS subdomain of at most 253
 * characters); kl__free. NULL on ENOMEM. */
char *kl__handoff_cand_name(const char *lease, const char *identity);

/* The object's JSON (a Lease, for a CREATE or an UPDATE with rv, NULL for
 * a create), now_us the renewal time; kl__free, NULL on ENOMEM. */
char *kl__handoff_cand_encode(const char *ns, const kl__handoff_cand *c, const char *rv,
                              int64_t now_us);
/* A candidate from a Lease object (a list item or a GET's body, parsed).
 * 0; K8SLEASE_EPROTOCOL (message naming what) when it is not one;
 * K8SLEASE_ENOMEM. */
int kl__handoff_cand_from_json(kl__handoff_cand *out, json_t *lease);

/* The best successor among n candidates for the holder `leader` at wall
 * time now_us: its index, or -1 when none qualifies (see above). */
int kl__handoff_choose(const kl__handoff_cand *c, size_t n, const char *leader, int64_t now_us);

/* The value of KL_HANDOFF_DONE for a handoff from `from` to `to` in term
 * epoch (the successor's Lease's leaseTransitions), with why (NULL: none)
 * when it ended as a release (to ""); kl__free. */
char *kl__handoff_done_value(const char *from, const char *to, int64_t epoch, const char *why);

/* ---- a candidate's own object (loop thread, but new and free) ---------- */

typedef struct kl__handoff_announce kl__handoff_announce;
typedef void (*kl__handoff_gone_cb)(void *arg);
/* The object is written (1), no longer (0: deleted at the stop), or cannot
 * be (-1: no permission). On changes only. */
typedef void (*kl__handoff_known_cb)(int known, void *arg);

typedef struct kl__handoff_announce_config {
    const char *ns, *lease, *identity;
    const char *pod_ns, *pod; /* NULL: no Pod (renewed every half duration) */
    const char *revision;     /* NULL: the Pod's revision label, else "" */
    int64_t priority;
    int64_t retry_period_ns, request_timeout_ms;
    const char *what, *subject; /* for messages */
    kl__handoff_known_cb known; /* NULL: not told */
    void *known_arg;
} kl__handoff_announce_config;

/* Copy cfg; no I/O. 0 or K8SLEASE_ENOMEM. Any thread. */
int kl__handoff_announce_new(kl__handoff_announce **out, k8slease_client *client,
                             const kl__handoff_announce_config *cfg);
/* Read the Pod (when named), then create (or take over) the object. */
void kl__handoff_announce_start(kl__handoff_announce *a);
/* Mark the candidate terminating (a handoff, a stop under way): no leader
 * chooses it from then on. */
void kl__handoff_announce_terminating(kl__handoff_announce *a);
/* Delete the object if written; gone(arg) on a later loop turn once done
 * (or failed, or nothing to delete). At most once. */
void kl__handoff_announce_stop(kl__handoff_announce *a, kl__handoff_gone_cb gone, void *arg);
/* Cancel every timer and request; no callback afterwards. */
void kl__handoff_announce_detach(kl__handoff_announce *a);
void kl__handoff_announce_free(kl__handoff_announce *a);

/* ---- the leader's list of candidates (loop thread) ----------------------- */

/* cands: n of them (borrowed for the call); err 0, or a K8SLEASE_E* code
 * with the message set (n 0). */
typedef void (*kl__handoff_list_cb)(const kl__handoff_cand *cands, size_t n, int err, void *arg);

/* LIST the candidates of Lease ns/lease (a label selector). The request,
 * for kl__http_cancel; NULL on ENOMEM. */
kl__http_req *kl__handoff_list(k8slease_client *client, const char *ns, const char *lease,
                               int64_t timeout_ms, kl__handoff_list_cb cb, void *arg);

/* Annotations of the handoff write on a Lease object: KL_HANDOFF_DONE set
 * (with why, for a handoff that releases), KL_HANDOFF_REQUEST removed. 0 or
 * K8SLEASE_ENOMEM. */
int kl__handoff_annotate(json_t *lease_root, const char *from, const char *to, int64_t epoch,
                         const char *why);
/* The successor a Lease's text asks for with KL_HANDOFF_REQUEST: 1 with
 * *to set (kl__free; NULL for the best: "" or "*"), 0 when it asks none,
 * K8SLEASE_ENOMEM. */
int kl__handoff_requested(const char *lease_json, char **to);

#endif
