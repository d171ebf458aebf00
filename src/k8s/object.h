/* What an informer (k8s/informer.h) follows, decoded: a Lease or a Pod, as
 * a list item, a GET's answer or a watch line gives it, and the order of
 * resourceVersions. Any thread; no state. */
#ifndef KL_K8S_OBJECT_H
#define KL_K8S_OBJECT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "k8s/codec.h"
#include "k8s/pod.h"

/* A Lease or a Pod (pods: which), with what the informer reads of both. */
typedef struct kl__object {
    kl__lease *lease;
    kl__pod *pod;
    const char *name, *rv; /* borrowed from the one set; rv "" if absent */
} kl__object;

/* Decode a list item (j borrowed) or a GET's answer into o. 0, or a
 * negative code with o cleared and the message set (the codec's). */
int kl__object_from_json(int pods, json_t *j, kl__object *o);
int kl__object_parse(int pods, const char *body, size_t len, kl__object *o);
void kl__object_clear(kl__object *o);

/* One line of a watch stream. Leases: k8s/codec.c's decoder; Pods: the
 * same shape, with the object decoded as a Pod. */
typedef struct kl__object_event {
    kl__watch_type type;
    kl__object obj;    /* ADDED, MODIFIED, DELETED */
    char *bookmark_rv; /* BOOKMARK (owned) */
    kl__status status; /* ERROR (owned) */
} kl__object_event;

/* 0 with ev set (clear it), or a negative code with ev cleared and the
 * message set ("watch event: ..."). */
int kl__object_event_parse(int pods, const char *line, size_t len, kl__object_event *ev);
void kl__object_event_clear(kl__object_event *ev);

/* resourceVersion order. Kubernetes calls resourceVersions opaque, but every
 * real server uses etcd revisions, decimal and increasing: when both parse
 * as unsigned 64-bit decimals they are compared; when either does not, the
 * newer one cannot be told, and the state is taken as new (applying a state
 * twice is harmless, dropping a change is not). */
typedef struct kl__rv_gate {
    uint64_t last; /* the last resourceVersion applied */
    int known;     /* it parsed */
} kl__rv_gate;

/* 1 when rv is not known to be older than or equal to the last applied:
 * then it becomes the last applied. 0: drop it. */
int kl__rv_gate_pass(kl__rv_gate *g, const char *rv);
/* Remember rv as the last applied, whatever the order. */
void kl__rv_gate_set(kl__rv_gate *g, const char *rv);
/* 1 when rv is known to be strictly older than the last applied. */
int kl__rv_gate_older(const kl__rv_gate *g, const char *rv);
/* 1 with *out set when rv is an unsigned 64-bit decimal, else 0. */
int kl__rv_parse(const char *rv, uint64_t *out);

#endif
