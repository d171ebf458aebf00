/*
 * cle.h - the coordinated-leader-election controller of kube-apiserver
 * (pkg/controlplane/controller/leaderelection, v1.36.3): picks a holder for
 * each Lease among the LeaseCandidates that name it and writes the Lease.
 *
 * It runs on the timer thread (sched.c) with the server lock held, driven
 * by store events and its own requeues, and writes through the store as
 * field manager "kube-apiserver", so watches see its writes like anyone's.
 */
#ifndef TS_CLE_H
#define TS_CLE_H

#include "store.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One Lease key of the work queue (client-go's delaying workqueue, per key). */
typedef struct ts_cle_key {
    char *ns, *name;
    bool dirty;      /* Add(): due now */
    int64_t delayed; /* AddAfter(): monotonic ms, INT64_MAX: none */
} ts_cle_key;

typedef struct ts_cle {
    ts_cle_key *q;
    size_t n, cap;
    bool running; /* serving with the gate on; off while a restart keeps the server down */
    uint64_t pings, elections; /* candidate pings, Lease writes (statistics) */
} ts_cle;

struct ts_server;

/* The store's change hook, after the watch layer's (lock held): queues the Lease concerned. */
void ts_cle_on_event(struct ts_server *srv, const ts_event *ev);
/* Runs the election steps that are due (lock held); returns the next due time (monotonic ms). */
int64_t ts_cle_run(struct ts_server *srv, int64_t now);
/* Starts the controller (lock held): queues every candidate's Lease, as its informer's first list.
 */
void ts_cle_start(struct ts_server *srv);
/* Stops it and forgets the queue (lock held). */
void ts_cle_stop(struct ts_server *srv);
void ts_cle_free(ts_cle *c);

#endif
