/* The client object: what the core keeps of a client (the backend, its
 * rest config, log and loop); the backend keeps the rest behind state. */
#ifndef KL_CLIENT_H
#define KL_CLIENT_H

#include "core/backend.h"
#include "core/common.h"
#include "core/http.h"
#include "core/restconfig.h"

struct k8slease_client {
    k8slease_backend backend;
    const kl__backend *be; /* the calls of that backend */
    /* Kubernetes: the kubeconfig's. etcd: made from the options (server =
     * the first endpoint, the TLS files, namespace ""). */
    kl__restconfig *cfg;
    kl__log log;
    kl__loop *loop;
    /* The backend's own state: set by its client_init, freed by its
     * client_free; the core never looks inside (k8s/client.h, etcd/client.h
     * say what it is). */
    void *state;
    k8slease_elector *retired; /* kl__elector_retire: freed once over (loop thread) */
    int *retired_drained;      /* kl__elector_wait_retired's flag, set once none is left */
};

/* k8slease_client_new whose log lines go to log_event_cb (with
 * opts->log_user_data, at opts->log_level and above), with what each is
 * about, instead of opts->log_cb: the seed ABI's. Same codes. Any thread. */
int kl__client_new_logged(k8slease_client **out, const k8slease_client_options *opts,
                          kl__log_event_cb log_event_cb);

/* Ask the loop to stop an election without waiting (release < 0: as the
 * options say). 0 or K8SLEASE_ENOMEM. Any thread. */
int kl__elector_stop_async(k8slease_elector *e, int release);

#endif
