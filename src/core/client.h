/* The client object shared by the elector driver, holder reads, watches
 * and pod labels. */
#ifndef KL_CLIENT_H
#define KL_CLIENT_H

#include "core/common.h"
#include "etcd/client.h"
#include "core/http.h"
#include "k8s/informer.h"
#include "k8s/kubeconfig.h"
#include "k8s/codec.h"

struct k8slease_client {
    k8slease_backend backend;
    /* Kubernetes: the kubeconfig's. etcd: made from the options (server =
     * the first endpoint, the TLS files, namespace ""). */
    kl__restconfig *cfg;
    kl__log log;
    kl__loop *loop;
    kl__informer *informer; /* Kubernetes: shared Lease watches (loop thread) */
    kl__etcd_conn *etcd;    /* etcd: endpoints and authentication */
};

/* With etcd, ns must be NULL: "<fn>: ns must be NULL with the etcd
 * backend". 0 or K8SLEASE_EINVAL. */
int kl__etcd_check_ns(const char *fn, const char *ns);

/* Check a namespace (RFC 1123 label) and a Lease or Pod name (RFC 1123
 * subdomain). what names the argument in the message. 0 or K8SLEASE_EINVAL. */
int kl__check_namespace(const char *ns);
int kl__check_name(const char *what, const char *name);

/* "/apis/coordination.k8s.io/v1/namespaces/NS/leases" (+ "/NAME" when name
 * is not NULL). Inputs must have passed the checks above. NULL on ENOMEM. */
char *kl__lease_path(const char *ns, const char *name);

/* Map a completed request for a Lease to a code and message: 0 when the
 * status is 200/201 and *lease was parsed (caller frees), else the error. */
int kl__lease_result(const kl__http_result *res, const char *what, kl__lease **lease);

/* Ask the loop to stop an election without waiting (release < 0: as the
 * options say). 0 or K8SLEASE_ENOMEM. Any thread. */
int kl__elector_stop_async(k8slease_elector *e, int release);

#endif
