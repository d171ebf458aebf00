/* What an election reads of a v1 Pod: its identity and, for each container,
 * which instance runs and which instances the kubelet reported ended (crash
 * failover on the kubelet's report; docs/semantics.md).
 *
 * A kl__pod keeps the whole object it was parsed from (root); every string
 * of it is borrowed from root. Only the fields below are checked: any other
 * field may hold anything. */
#ifndef KL_POD_H
#define KL_POD_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

/* One of status.containerStatuses[]. */
typedef struct kl__pod_container {
    const char *name;                    /* name; "" if absent */
    const char *container_id;            /* containerID: the current instance, "" if absent */
    int running;                         /* state.running present */
    int64_t started_us;                  /* state.running.startedAt (wall µs), 0 if absent */
    int waiting;                         /* state.waiting present */
    int terminated;                      /* state.terminated present */
    const char *terminated_id;           /* state.terminated.containerID, "" if none */
    int64_t terminated_finished_us;      /* state.terminated.finishedAt (wall µs), 0 if absent */
    const char *last_terminated_id;      /* lastState.terminated.containerID, "" if none */
    int64_t last_terminated_finished_us; /* lastState.terminated.finishedAt, 0 if absent */
} kl__pod_container;

typedef struct kl__pod {
    json_t *root;                     /* the whole object (owned) */
    const char *ns, *name, *uid, *rv; /* metadata; borrowed; "" if absent (name never) */
    size_t ncontainers;
    kl__pod_container *containers; /* owned; NULL when ncontainers is 0 */
} kl__pod;

/* Parse a Pod from a response body. Errors: K8SLEASE_EPROTOCOL with a
 * message naming the Pod and the field (not JSON, not an object, kind
 * present and not "Pod", metadata.name missing, metadata, status,
 * status.containerStatuses[i] or one of the fields above of the wrong
 * type, a bad startedAt or finishedAt); K8SLEASE_ENOMEM. Absent or null fields are
 * "absent". */
int kl__pod_parse(kl__pod **out, const char *body, size_t len);
/* The same from a JSON object (a list item, a watch event's "object");
 * takes a new reference, does not steal. */
int kl__pod_from_json(kl__pod **out, json_t *obj);
/* Accepts NULL. */
void kl__pod_free(kl__pod *pod);

/* Positive evidence that the instance container_id of container `container`
 * of the Pod with UID uid has ended: pod->uid equals uid, and the first
 * status of that container has state.terminated.containerID or
 * lastState.terminated.containerID exactly equal to container_id. Anything
 * else is 0: another UID (the Pod was recreated), another containerID (an
 * earlier instance), waiting, running, a container not listed, NULL or
 * empty strings anywhere. Pure: no allocation, no error set. */
int kl__pod_container_ended(const kl__pod *pod, const char *uid, const char *container,
                            const char *container_id);

/* The status of the instance this process runs in: the status of container
 * `container` (NULL: the Pod's only container status), when it is running,
 * has a containerID, and has a startedAt that is not after process_start_us
 * (wall µs: a container started after this process cannot be the one it
 * runs in, the status is stale). *c is then set, borrowed from pod.
 *
 * Returns 0; K8SLEASE_ENOTFOUND with a message naming what is missing (no
 * status for that container yet, not running yet, no containerID yet, no
 * startedAt, or started after this process); K8SLEASE_EINVAL when container
 * is NULL and the Pod has several container statuses ("the pod has N
 * containers: name one"). *c is NULL on error. Sets no error on success.
 *
 * It cannot tell a status that still shows the previous instance running
 * (started before this process too) from this instance's: a report of that
 * instance then has a finishedAt before this call (see pod.c). */
int kl__pod_own_container(const kl__pod *pod, const char *container, int64_t process_start_us,
                          const kl__pod_container **c);

#endif
