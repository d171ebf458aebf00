/* Exec credential plugins (client.authentication.k8s.io ExecCredential):
 * run the plugin a rest config names and parse what it prints. The HTTP
 * layer runs it before requests and again when the credential expires or
 * the server answers 401.
 *
 * Threads: any; kl__exec_credential_run blocks until the plugin exits. */
#ifndef KL_CREDENTIAL_H
#define KL_CREDENTIAL_H

#include <stddef.h>
#include <stdint.h>

#include "core/restconfig.h"

#define KL_EXEC_API_V1      "client.authentication.k8s.io/v1"
#define KL_EXEC_API_V1BETA1 "client.authentication.k8s.io/v1beta1"

/* Result of running an exec plugin. */
typedef struct kl__exec_credential {
    char *token;       /* status.token, NULL if absent */
    char *cert_pem;    /* status.clientCertificateData, NULL if absent */
    char *key_pem;     /* status.clientKeyData, NULL if absent */
    int64_t expiry_us; /* status.expirationTimestamp, wall µs; 0 = never expires */
} kl__exec_credential;

/* 1 when api_version is KL_EXEC_API_V1 or KL_EXEC_API_V1BETA1, else 0. */
int kl__exec_api_supported(const char *api_version);

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
