/* Credentials: exec credential plugins (client.authentication.k8s.io
 * ExecCredential: run the plugin a rest config names and parse what it
 * prints), and the credentials a loop's requests carry (kl__creds: a token,
 * a token file, or an exec plugin run on a thread of its own).
 *
 * Threads: kl__exec_* any (kl__exec_credential_run blocks until the plugin
 * exits); kl__creds: see there. */
#ifndef KL_CREDENTIAL_H
#define KL_CREDENTIAL_H

#include <stddef.h>
#include <stdint.h>

#include "core/loop.h"
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

/* The credentials of a loop's requests (core/http.c): a static token, a
 * token file (read again every minute and after a 401: bound tokens
 * rotate), or an exec plugin, which runs on a thread of its own, before it
 * is needed (30 s before its credentials expire) and after a 401. While it
 * runs, requests go on with the current credentials until they expire;
 * only a request that has none to go with waits for it.
 *
 * Threads: kl__creds_new any; kl__creds_free any once the loop's thread
 * has stopped (the loop must still exist); the rest on the loop thread. */
typedef struct kl__creds kl__creds;
/* A plugin run ended (loop thread): requests waiting may ask again. */
typedef void (*kl__creds_cb)(void *arg);

/* From the rest config (copied). ready(arg) is called when a plugin run
 * the requests waited for ended. K8SLEASE_ENOMEM. */
int kl__creds_new(kl__creds **out, const kl__restconfig *cfg, const kl__log *log,
                  kl__creds_cb ready, void *arg);
/* Ends a running plugin (SIGKILL) and waits for its thread. Accepts NULL. */
void kl__creds_free(kl__creds *c);

/* kl__creds_get: a plugin run is under way and the request must wait. */
#define KL__CREDS_WAIT 1
/* Credentials for a request about to leave, on loop (the loop thread).
 * 0: *line is the Authorization header line ("Authorization: Bearer ...",
 * valid until the next call), NULL when there is no token (or only a
 * client certificate: kl__creds_identity). KL__CREDS_WAIT: the ready
 * callback tells when to ask again. Else none can be had: K8SLEASE_ECONFIG
 * or K8SLEASE_ENOMEM, error set (the token file's or the plugin's failure). */
int kl__creds_get(kl__creds *c, kl__loop *loop, const char **line);
/* Bumped whenever the credentials change. */
unsigned kl__creds_gen(const kl__creds *c);
/* The server refused the credentials of generation gen (HTTP 401): the
 * next kl__creds_get refreshes them, unless that is done already. 0 when
 * they cannot be refreshed (a static token, or none). */
int kl__creds_refused(kl__creds *c, unsigned gen);
/* The exec plugin's client certificate and key (PEM), NULL: none. */
void kl__creds_identity(const kl__creds *c, const char **cert_pem, const char **key_pem);
/* Why a request waits (for its message if it times out waiting), into buf. */
void kl__creds_waiting(const kl__creds *c, const kl__loop *loop, char *buf, size_t len);

#endif
