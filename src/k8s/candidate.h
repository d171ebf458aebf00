/* The LeaseCandidate of a coordinated election (KEP-4355), as client-go's
 * tools/leaderelection/leasecandidate.go keeps it, plus discovery and
 * deletion:
 *
 *  - Discovery: GET /apis/coordination.k8s.io; the candidate uses v1beta1,
 *    else v1alpha2 (the versions with spec.strategy). Neither served: fatal.
 *  - CREATE {leaseName, binaryVersion, emulationVersion, strategy,
 *    renewTime = now}. 409: GET it; another leaseName is fatal (the name is
 *    the identity, taken by another election); else PUT ours over it.
 *    400/422 (a version the server refuses): fatal. Other failures: again
 *    after the retry period.
 *  - Then a watch of that one object (fieldSelector metadata.name): when
 *    the controller pings (spec.pingTime after spec.renewTime), PUT
 *    renewTime = now at once; it must answer within the controller's
 *    election duration (5 s) to be counted. Deleted (garbage collected):
 *    created again. Also renewed every 5 minutes, as client-go.
 *  - Stop: cancel everything and DELETE the object if this candidate wrote
 *    it, then call gone (on a later loop turn, never from inside stop).
 *
 * Loop thread only, except new/free. */
#ifndef KL_K8S_CANDIDATE_H
#define KL_K8S_CANDIDATE_H

#include <stdint.h>

#include "core/client.h"

typedef struct kl__candidate kl__candidate;

typedef struct kl__candidate_config {
    const char *ns;
    const char *name; /* the elector's identity: the holder the controller writes */
    const char *lease_name;
    const char *binary_version;
    const char *emulation_version;
    const char *strategy;
    int64_t retry_period_ns;    /* pause after a failed request */
    int64_t request_timeout_ms; /* each request */
    const char *what;           /* "lease NS/NAME", for messages */
    const char *subject;        /* "NS/NAME": what they are about (core/common.h) */
} kl__candidate_config;

/* The election cannot go on (message: why, naming what was refused). Called
 * from a request's callback; the candidate may be stopped from it. */
typedef void (*kl__candidate_fatal_cb)(const char *message, void *arg);
typedef void (*kl__candidate_gone_cb)(void *arg);

/* Copy cfg; no I/O. 0 or K8SLEASE_ENOMEM. Any thread. */
int kl__candidate_new(kl__candidate **out, k8slease_client *client, const kl__candidate_config *cfg,
                      kl__candidate_fatal_cb fatal, void *arg);
void kl__candidate_start(kl__candidate *c);
/* Stop; gone(arg) runs once the LeaseCandidate is deleted (or the DELETE
 * failed, or there was nothing to delete). At most once. */
void kl__candidate_stop(kl__candidate *c, kl__candidate_gone_cb gone, void *arg);
/* Cancel every timer and request; no callback afterwards. */
void kl__candidate_detach(kl__candidate *c);
/* Free, after detach or when start never ran. Accepts NULL. Any thread. */
void kl__candidate_free(kl__candidate *c);

/* "MAJOR.MINOR.PATCH" with an optional "-pre" / "+build" suffix, no leading
 * "v" (what the apiserver validates). 0, or K8SLEASE_EINVAL naming what. */
int kl__semver_check(const char *what, const char *v);
/* Order of two versions that passed kl__semver_check, by MAJOR.MINOR.PATCH:
 * <0, 0, >0. */
int kl__semver_cmp(const char *a, const char *b);

#endif
