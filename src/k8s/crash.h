/* Crash failover (docs/semantics.md, "Crash failover"): a
 * leader names, in an annotation of its Lease, the container instance it
 * runs in; a follower watches that Pod and, when the kubelet reports exactly
 * that instance terminated after the leader checked it, tells the election
 * the term is over (KL_KE_EV_HOLDER_ENDED) instead of waiting for the Lease to
 * expire.
 *
 * The record (the annotation's value, JSON): holder and epoch (the term it
 * is about: a record of another term is ignored), the Pod (namespace, name,
 * UID), the container's name and containerID, and verifiedAt: when the
 * leader read its instance running. Only a termination that finished in a
 * later second than verifiedAt is evidence: an instance that ended before
 * the leader's process started (a restart the Pod status had not shown yet)
 * can never be taken for the leader's, and the kubelet's finishedAt and the
 * leader's verifiedAt come from the same node's clock.
 *
 * Threads: the record functions anywhere; a kl__crash on its client's loop
 * thread, like its elector. */
#ifndef KL_K8S_CRASH_H
#define KL_K8S_CRASH_H

#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "core/common.h"
#include "k8s/codec.h"
#include "k8s/pod.h"

#define KL_CRASH_ANNOTATION KL_LEASE_HOLDER_CONTAINER

typedef struct kl__crash_record {
    char *holder;
    int64_t epoch;
    char *pod_ns, *pod, *pod_uid;
    char *container, *container_id;
    int64_t verified_us; /* wall µs; written in whole seconds */
} kl__crash_record;

/* Parse an annotation value. 0; K8SLEASE_EPROTOCOL naming the field;
 * K8SLEASE_ENOMEM. out is cleared on failure. */
int kl__crash_record_parse(kl__crash_record *out, const char *text);
/* Its JSON text (kl__free), NULL on ENOMEM. */
char *kl__crash_record_encode(const kl__crash_record *r);
void kl__crash_record_clear(kl__crash_record *r);
/* The record a Lease carries: 0 with out set; K8SLEASE_ENOTFOUND when it
 * has none; K8SLEASE_EPROTOCOL when it is not one. */
int kl__crash_record_of_lease(const kl__lease *lease, kl__crash_record *out);
/* 1 when pod is positive evidence that r's container instance has ended
 * since r was verified: same Pod UID, and that container's state or
 * lastState terminated with r's containerID, finished in a later second
 * than verifiedAt. */
int kl__crash_evidence(const kl__crash_record *r, const kl__pod *pod);

/* Set (value non-NULL) or remove the annotation in a Lease object. 0 or
 * K8SLEASE_ENOMEM. */
int kl__crash_annotate(json_t *lease_root, const char *value);
/* Whether the JSON text of a Lease carries exactly this value (NULL: no
 * such annotation at all), as the API server writes it. May say 0 for a
 * Lease that does (an encoding it did not expect): the caller then takes
 * the slow path, which is always right. */
int kl__crash_text_has(const char *lease_json, const char *value);

/* Whether the containerID of a record names the instance a status reports:
 * the same string, or the record's is the bare ID (no "runtime://") that
 * the status names with its runtime's prefix. */
int kl__crash_same_instance(const char *recorded, const char *reported);

/* Whether the term of spec (the Lease's), whose holder is our identity,
 * is an earlier process's, by its record r: one of another container
 * instance than own_id (ours; NULL or "" when not known yet), or, without
 * own_id, verified in a second before start_us (this process's start,
 * wall µs). 0 when the holder is not identity or r is of another term. */
int kl__crash_is_predecessor(const kl__crash_record *r, const kl__lease_spec *spec,
                             const char *identity, const char *own_id, int64_t start_us);

/* Wall µs at which this process started (from /proc), 0 if unknown. */
int64_t kl__process_start_us(void);

/* This process's container instance as the kernel shows it, before the
 * kubelet reports it: the kubelet names a container's cgroup after its
 * containerID, under its Pod's UID (cgroupfs: ".../pod<UID>/<ID>";
 * systemd: ".../kubepods-...-pod<UID, _ for ->.slice/<runtime>-<ID>.scope").
 * Empty strings when the paths say nothing (no Pod, a cgroup namespace). */
typedef struct kl__proc_instance {
    char id[65];        /* the 64 hex digits of the containerID */
    char runtime[16];   /* "containerd://" ..., "" when the path does not name it */
    char pod_uid[37];   /* the Pod's UID, as the cgroup path has it */
    char container[64]; /* the name in /dev/termination-log's mount, "" if none */
} kl__proc_instance;

/* Read it from the texts of /proc/self/cgroup and /proc/self/mountinfo
 * (either may be NULL). */
void kl__proc_instance_read(kl__proc_instance *out, FILE *cgroup, FILE *mountinfo);

typedef struct kl__crash kl__crash;
typedef void (*kl__crash_ended_cb)(const char *holder, int64_t epoch, void *arg);
/* Our instance became known: a write of our term carries the record from
 * now on (the elector renews at once, so that it reaches the Lease). */
typedef void (*kl__crash_known_cb)(void *arg);

typedef struct kl__crash_config {
    const char *pod_ns, *pod; /* this process's Pod */
    const char *container;    /* NULL: the Pod's only container */
    const char *identity;     /* the elector's */
    int64_t retry_period_ns;
    int64_t request_timeout_ms;
    const char *what;    /* "lease NS/NAME", for messages */
    const char *subject; /* "NS/NAME": what they are about (core/common.h) */
    kl__crash_ended_cb ended;
    kl__crash_known_cb known; /* may be NULL */
    void *arg;
} kl__crash_config;

/* Strings are copied. 0, K8SLEASE_EINVAL (a bad Pod namespace, name or
 * container name), K8SLEASE_ENOMEM. Any thread. */
int kl__crash_new(kl__crash **out, k8slease_client *client, const kl__crash_config *cfg);
/* Learn this process's container instance (loop): from its cgroup as soon
 * as its Pod's UID agrees (the kubelet reports a container running a second
 * or so after it started), or from the kubelet's report, which a watch of
 * the Pod brings as it is written; the kubelet's exact containerID replaces
 * a cgroup's that lacked the runtime's prefix. */
void kl__crash_start(kl__crash *c);
/* The annotation value a write of term epoch by holder should carry (our
 * identity: our record; anything else, e.g. "" of a release: NULL), NULL
 * also while our instance is not known. Borrowed until the next call. */
const char *kl__crash_value(kl__crash *c, const char *holder, int64_t epoch);
/* A state of the Lease the elector saw: follow the Pod its record names
 * when it is the record of another holder's current term; stop following
 * otherwise. Loop. */
void kl__crash_observe(kl__crash *c, const kl__lease *lease);
/* Whether lease's term, held under our identity, is an earlier instance's
 * of our container (kl__crash_is_predecessor with what c knows of ours):
 * the elector must not take it as its own (a restart in place would take
 * the Lease back before the followers, who act on the kubelet's report).
 * Loop. */
int kl__crash_predecessor(const kl__crash *c, const kl__lease *lease);
/* Cancel everything (loop); no callback after it returns. */
void kl__crash_stop(kl__crash *c);
void kl__crash_free(kl__crash *c);

#endif
