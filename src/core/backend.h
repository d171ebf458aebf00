/* What a backend (src/k8s, src/etcd) gives the core: the calls behind the
 * public client, holder, release and watch functions, and its elector.
 * The core reaches a backend only through this struct, never by name; each
 * backend defines one (kl__k8s_backend in k8s/client.c, kl__etcd_backend in
 * etcd/client.c) and src/backends.c lists them, so the dependencies point
 * one way: backends -> core.
 *
 * Every function gets arguments the core has checked for NULL where the
 * public call says so, and sets the error message on failure (0 or a
 * negative K8SLEASE_E* code). Threads: as the public call (any thread but
 * the loop's for the blocking ones), unless said otherwise. */
#ifndef KL_BACKEND_H
#define KL_BACKEND_H

#include <stdint.h>

#include "core/common.h"

typedef struct kl__elector_backend kl__elector_backend;

/* A holder watch reports (identity, epoch) on the loop thread: the current
 * state first, then changes; "" and -1 when there is no holder. */
typedef void (*kl__holder_report_cb)(void *arg, const char *identity, int64_t epoch);

typedef struct kl__backend {
    k8slease_backend id;
    /* Set up the client: its rest config (c->cfg, for messages and for the
     * loop), its loop (c->loop) and the backend's own state (c->state),
     * checking the options that are the backend's. c->backend and c->log
     * are set; opts is a full copy (version checked). On failure the core
     * calls client_free. */
    int (*client_init)(k8slease_client *c, const k8slease_client_options *opts);
    /* Stop what the backend runs on the loop, before the loop stops (any
     * thread but the loop's). May be NULL. */
    void (*client_shutdown)(k8slease_client *c);
    /* Free the backend's state (c->state, NULL or as far as client_init
     * got), once the loop has stopped; also after a failed client_init. */
    void (*client_free)(k8slease_client *c);

    /* k8slease_holder_get, k8slease_lease_release: client and out (or
     * identity) are checked; ns and name as the caller gave them. */
    int (*holder_get)(k8slease_client *c, const char *ns, const char *name, int64_t timeout_ms,
                      k8slease_holder **out);
    int (*lease_release)(k8slease_client *c, const char *ns, const char *name, const char *identity,
                         int force, int64_t timeout_ms);

    /* k8slease_watch_start: check ns and name (with the public call's
     * messages), write "lease NS/NAME" or the like into what (for
     * messages) and start; report runs on the loop thread. cancel: loop
     * thread, nothing is reported afterwards. free: after cancel, any
     * thread; accepts NULL. */
    int (*watch_start)(void **out, k8slease_watch *w, k8slease_client *c, const char *ns,
                       const char *name, char *what, size_t what_size, kl__holder_report_cb report);
    void (*watch_cancel)(void *watch);
    void (*watch_free)(void *watch);

    const kl__elector_backend *elector;
} kl__backend;

/* The backend for id (src/backends.c), NULL when none. */
const kl__backend *kl__backend_get(k8slease_backend id);

/* For a backend's watch: whether the public watch w has reported a state
 * (a report identical to the last one is dropped; one that could not be
 * stored for lack of memory does not count). Loop thread. */
int kl__watch_reported(const k8slease_watch *w);

#endif
