/* The Kubernetes side of a client: kl__k8s_backend (core/backend.h) and
 * the state it keeps behind k8slease_client.state. */
#ifndef KL_K8S_CLIENT_H
#define KL_K8S_CLIENT_H

#include "core/backend.h"
#include "core/client.h"
#include "core/elector.h"

typedef struct kl__informer kl__informer;
typedef struct kl__holders kl__holders;

extern const kl__backend kl__k8s_backend;
/* The elector (k8s/driver.c). */
extern const kl__elector_backend kl__k8s_elector_backend;

/* A Kubernetes client's state (loop thread, but for what holders.h says
 * of its own calls). */
typedef struct kl__k8s_client {
    kl__informer *informer;     /* shared Lease watches */
    kl__informer *pod_informer; /* shared Pod watches (crash failover) */
    kl__holders *holders;       /* holder reads answered from the watches */
    int crash_failover;         /* holder reads follow crash failover records */
    /* Electors writing the handoff of their term (k8s/driver.c's list,
     * through its handoff_next): the next elector of the same identity
     * leaves that term alone until the write is done. */
    void *handoffs;
} kl__k8s_client;

/* The state of c, a client of the Kubernetes backend. */
static inline kl__k8s_client *kl__k8s_of(const k8slease_client *c)
{
    return (kl__k8s_client *)c->state;
}

#endif
