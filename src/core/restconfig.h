/* Rest configuration: where the server is and how to reach it (TLS, token,
 * exec plugin). The HTTP layer (core/http.c) connects with it; each backend
 * fills one: Kubernetes from a kubeconfig or the in-cluster service account
 * (k8s/kubeconfig.c), etcd from its client options (etcd/client.c). */
#ifndef KL_RESTCONFIG_H
#define KL_RESTCONFIG_H

#include <stddef.h>

/* An exec credential plugin (users[].user.exec); run by core/credential.c. */
typedef struct kl__exec_config {
    char *api_version; /* client.authentication.k8s.io/v1 or /v1beta1 */
    char *command;     /* resolved against the kubeconfig's dir if it has a '/' and is relative */
    char **args;       /* NULL-terminated */
    char **env;        /* NULL-terminated "NAME=VALUE" */
    char *config_dir;  /* directory of the kubeconfig that defined it */
} kl__exec_config;

typedef struct kl__restconfig {
    char *server; /* e.g. "https://127.0.0.1:6443" without trailing '/' */
    char *source; /* "in-cluster" or the kubeconfig path, for messages */
    char *ns;     /* namespace: context's, in-cluster file's, else "default" */

    /* TLS. PEM data takes precedence over the file when both are given. */
    char *ca_file;
    char *ca_pem; /* certificate-authority-data, base64-decoded */
    size_t ca_pem_len;
    int insecure; /* insecure-skip-tls-verify: true */
    char *tls_server_name;
    char *cert_file;
    char *cert_pem;
    size_t cert_pem_len;
    char *key_file;
    char *key_pem;
    size_t key_pem_len;

    /* Auth: token, or token_file (re-read by the HTTP layer), or exec. */
    char *token;
    char *token_file;
    kl__exec_config *exec;
} kl__restconfig;

/* Free cfg, its exec config and every string. Accepts NULL. */
void kl__restconfig_free(kl__restconfig *cfg);
/* A deep copy of an exec plugin config (NULL on ENOMEM), and its free. */
kl__exec_config *kl__exec_config_dup(const kl__exec_config *src);
void kl__exec_config_free(kl__exec_config *exec);

#endif
