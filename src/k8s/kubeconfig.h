/* Rest configuration: where the API server is and how to authenticate.
 * Sources, as client-go: in-cluster, then $KUBECONFIG, then ~/.kube/config. */
#ifndef KL_KUBECONFIG_H
#define KL_KUBECONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "core/text.h" /* kl__base64_decode decodes the *-data fields */

#define KL_SA_DIR_DEFAULT "/var/run/secrets/kubernetes.io/serviceaccount"

/* An exec credential plugin (users[].user.exec). */
typedef struct kl__exec_config {
    char *api_version; /* client.authentication.k8s.io/v1 or /v1beta1 */
    char *command;     /* resolved against the kubeconfig's dir if it has a '/' and is relative */
    char **args;       /* NULL-terminated */
    char **env;        /* NULL-terminated "NAME=VALUE" */
    char *config_dir;  /* directory of the kubeconfig that defined it */
} kl__exec_config;

/* Result of running an exec plugin. */
typedef struct kl__exec_credential {
    char *token;       /* status.token, NULL if absent */
    char *cert_pem;    /* status.clientCertificateData, NULL if absent */
    char *key_pem;     /* status.clientKeyData, NULL if absent */
    int64_t expiry_us; /* status.expirationTimestamp, wall µs; 0 = never expires */
} kl__exec_credential;

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

void kl__restconfig_free(kl__restconfig *cfg);

/* Run the exec plugin (blocking; stdin /dev/null, KUBERNETES_EXEC_INFO set,
 * 30 s limit) and parse its ExecCredential. Errors name the command. */
int kl__exec_credential_run(const kl__exec_config *exec, kl__exec_credential *out);
/* Parse an ExecCredential JSON (apiVersion must match expected_api_version
 * when that is not NULL). K8SLEASE_ECONFIG on anything wrong. */
int kl__exec_credential_parse(const char *json, size_t len, const char *expected_api_version,
                              kl__exec_credential *out);
void kl__exec_credential_clear(kl__exec_credential *cred);
/* Test hook: time limit of kl__exec_credential_run (ms <= 0: the default 30 s). */
void kl__exec_set_timeout_ms(int64_t ms);

#endif
