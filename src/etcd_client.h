/* The etcd backend's side of a client: endpoints, authentication, and the
 * one-shot calls and watches of the public API (the elector is in
 * backend_etcd.c, behind kl__etcd_elector_backend).
 *
 * Every etcd request of a client goes through its kl__etcd_conn: POST
 * <endpoint>/v3/... with a JSON body, to the current endpoint; on a failure
 * to get an answer (connect, TLS, timeout, reset, gRPC Unavailable) the
 * conn moves to the next endpoint for the requests that follow. With a
 * user name, the conn authenticates (/v3/auth/authenticate) before the first
 * request, sends the token as "Authorization: <token>", and authenticates
 * again when etcd says the token is invalid. Tokens and passwords never
 * reach a log line. */
#ifndef KL_ETCD_CLIENT_H
#define KL_ETCD_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "http.h"

typedef struct kl__etcd_conn kl__etcd_conn;
typedef struct kl__etcd_watch kl__etcd_watch;

/* Split and check k8slease_client_options.etcd_endpoints: comma-separated
 * URLs "http(s)://host:port" (optional trailing '/', no other path, no
 * query, no user info), all of one scheme, at least one. *out is a
 * NULL-terminated array of malloc'ed "scheme://host:port" strings (free
 * with kl__etcd_endpoints_free). K8SLEASE_EINVAL naming the endpoint and
 * what is wrong ("etcd_endpoints: \"ftp://x\": scheme must be http or
 * https"), K8SLEASE_ENOMEM. */
int kl__etcd_endpoints_parse(const char *list, char ***out, size_t *n);
void kl__etcd_endpoints_free(char **endpoints);

/* The conn of a client (copies everything; log and loop are borrowed).
 * username NULL: no authentication. Any thread. */
int kl__etcd_conn_new(kl__etcd_conn **out, kl__loop *loop, const kl__log *log,
                      char *const *endpoints, size_t n, const char *username, const char *password);
/* After the loop has stopped (kl__loop_free cancels what is in flight).
 * Accepts NULL. */
void kl__etcd_conn_free(kl__etcd_conn *conn);
/* The endpoint requests go to now (borrowed; loop thread, or any thread for
 * messages). */
const char *kl__etcd_conn_endpoint(const kl__etcd_conn *conn);

/* Public calls on an etcd client (k8slease.h documents them; client.c and
 * watch.c dispatch here). name is the election name; ns was checked NULL. */
int kl__etcd_holder_get(k8slease_client *client, const char *name, int64_t timeout_ms,
                        k8slease_holder **out);
int kl__etcd_lease_release(k8slease_client *client, const char *name, const char *identity,
                           int force, int64_t timeout_ms);

/* Holder watch of an election: report(arg, identity, epoch) on the loop
 * thread with the current leader first, then at every change; "" and -1
 * when there is no candidate. Reconnects by itself until cancelled.
 * kl__etcd_watch_new: any thread; checks name, posts the start to the
 * loop. cancel: loop thread, nothing is reported afterwards. free: after
 * cancel, any thread. */
typedef void (*kl__etcd_report_cb)(void *arg, const char *identity, int64_t epoch);
int kl__etcd_watch_new(kl__etcd_watch **out, k8slease_client *client, const char *name,
                       kl__etcd_report_cb report, void *arg);
void kl__etcd_watch_cancel(kl__etcd_watch *w);
void kl__etcd_watch_free(kl__etcd_watch *w);

/* Check an election name: non-empty, no NUL (by construction), at most
 * KL_EE_PREFIX_MAX - 1 bytes. what names the argument. */
int kl__etcd_check_name(const char *what, const char *name);

#endif
