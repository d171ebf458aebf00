/* The Kubernetes rest configuration (core/restconfig.h): where the API
 * server is and how to authenticate. Sources, as client-go: in-cluster, then
 * $KUBECONFIG, then ~/.kube/config. */
#ifndef KL_KUBECONFIG_H
#define KL_KUBECONFIG_H

#include "core/restconfig.h"
#include "core/text.h" /* kl__base64_decode decodes the *-data fields */

#define KL_SA_DIR_DEFAULT "/var/run/secrets/kubernetes.io/serviceaccount"

/* Load the default chain: if KUBERNETES_SERVICE_HOST is set, in-cluster
 * (service-account dir from $K8SLEASE_SERVICEACCOUNT_DIR, else
 * KL_SA_DIR_DEFAULT); else the kubeconfig chain below with path NULL.
 * When path != NULL only that kubeconfig file is used. context NULL: the
 * current-context. Errors: K8SLEASE_ECONFIG, message naming the file and the
 * field ("~/.kube/config: users[1].user.client-key-data: bad base64"),
 * K8SLEASE_ENOMEM. */
int kl__restconfig_load(kl__restconfig **out, const char *path, const char *context);

/* In-cluster: host/port from KUBERNETES_SERVICE_HOST/_PORT (IPv6 bracketed),
 * token file "<dir>/token" (kept as token_file), CA "<dir>/ca.crt",
 * namespace "<dir>/namespace" (optional, "default" otherwise). */
int kl__restconfig_incluster(kl__restconfig **out, const char *sa_dir);

/* A kubeconfig chain: $KUBECONFIG (colon-separated; the first file that
 * exists and names a current-context, or holds the requested context, wins),
 * else $HOME/.kube/config. */
int kl__restconfig_from_kubeconfig(kl__restconfig **out, const char *path_list,
                                   const char *context);

#endif
