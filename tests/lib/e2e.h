/* Shared setup of the end-to-end suites: an API server and a client. */
#ifndef K8SLEASE_E2E_H
#define K8SLEASE_E2E_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "k8slease.h"

/* Use $K8SLEASE_TEST_KUBECONFIG when set (any API server: a real cluster,
 * envtest); otherwise start k8slease-testserver. Sets $KUBECONFIG for the
 * seed ABI. client may be NULL. Called again, it reuses the server and
 * makes another client. Returns 0 or -1 (message printed). */
int e2e_setup(k8slease_client **client);
/* Extra flags for the test server e2e_setup starts (NULL-terminated,
 * borrowed; e.g. a feature gate). Call before e2e_setup. */
void e2e_testserver_args(const char *const *args);
/* A log callback printing "k8slease LEVEL: message" on stderr. */
void e2e_log_to_stderr(k8slease_log_level level, const char *msg, void *ud);

/* Free the client, stop the test server; -1 if it did not exit cleanly. */
int e2e_teardown(k8slease_client *client);
/* 1 when the server is our test server (fault injection available). */
int e2e_is_testserver(void);
struct ts_server *e2e_server(void);

/* One request to the API server under test (the test server or a real
 * one), with the credentials of $KUBECONFIG (as set by e2e_setup). path is
 * "/api/..." or "/apis/..."; body may be NULL (JSON; merge patch for
 * PATCH). *status is the HTTP status; *response (if not NULL) a malloc'ed
 * body. Returns 0, or -1 on a transport error (message printed). */
int e2e_api(const char *method, const char *path, const char *body, long *status, char **response);

/* e2e_api POST of body to path; 0 on 201 Created, else -1 with the status
 * and the server's answer on stderr. */
int e2e_create(const char *path, const char *body);

/* The server under test, from $KUBECONFIG: its URL ("https://127.0.0.1:N",
 * malloc'ed), port, and bearer token (malloc'ed; NULL when it uses none). */
char *e2e_url(void);
int e2e_port(void);
char *e2e_token(void);

/* Creates a fresh namespace "<prefix>-<6 hex digits>" and returns its name
 * (valid until e2e_teardown, which deletes it). Real servers refuse
 * objects in a namespace that does not exist, and so does the test server.
 * NULL on failure (message printed). */
const char *e2e_namespace(const char *prefix);

/*
 * Process faults on the server under test. proc: "apiserver" or "etcd";
 * under envtest.sh with K8SLEASE_ENVTEST_REPLICAS=N (N kube-apiservers
 * behind haproxy) "apiserver" is replica 1, "apiserver2" and "apiserver3"
 * the others, and "lb" haproxy (kill, start, restart: every connection
 * through it ends). action: "kill", "start", "restart", "stop" (SIGSTOP),
 * "cont" (SIGCONT), and "rotate-token" (apiserver) and "wipe" (etcd) of
 * envtest.sh; names and actions go to its ctl script as they are.
 * Under tests/integration/envtest.sh they act on the real processes
 * ($K8SLEASE_ENVTEST_CTL; start, restart, rotate-token and wipe return
 * once the process answers again, the apiserver once it also has
 * namespace "default"). There a failed start, restart, rotate-token or
 * wipe is fatal: it leaves no server, so e2e_ctl prints which action
 * failed and how, and exits the test program with status 1 rather than
 * let every later test time out.
 * On k8slease-testserver only the apiserver's stop, cont and restart (in
 * place, keeping state) exist. e2e_has_ctl tells whether proc can be
 * driven at all. e2e_ctl returns 0 or -1 (message printed).
 */
bool e2e_has_ctl(const char *proc);
int e2e_ctl(const char *proc, const char *action);

/* How many kube-apiservers serve the kubeconfig: N under envtest.sh with
 * K8SLEASE_ENVTEST_REPLICAS=N (behind haproxy; its ctl's "replicas"), 1 on
 * k8slease-testserver, a single kube-apiserver or any other server. A test
 * of replicas skips when it is below 2. e2e_has_ctl("apiserver2") and
 * e2e_has_ctl("lb") are false below 2 too. */
int e2e_replicas(void);

/* Under envtest.sh: the path of a file of its directory (e.g.
 * "kubeconfig-user", "kubeconfig-tokenfile"; see envtest.sh), NULL
 * elsewhere or when it does not exist. Valid until the next call. */
const char *e2e_envtest_file(const char *name);

/* CLOCK_MONOTONIC in ms; a pause for polling loops (never synchronisation). */
int64_t e2e_mono_ms(void);
void e2e_pause_ms(int ms);

/* The candidate recorder: what one candidate saw, with CLOCK_MONOTONIC
 * times in ms (e2e_mono_ms). Give the e2e_cand_on_* callbacks as the
 * elector's, with the e2e_cand (mu initialised) as user_data. */
typedef struct e2e_cand {
    pthread_mutex_t mu;
    int64_t started_at, stopped_at;
    int64_t epoch;
    char leader[64];
} e2e_cand;
void e2e_cand_on_started(int64_t epoch, void *ud);
void e2e_cand_on_stopped(void *ud);
void e2e_cand_on_new_leader(const char *id, int64_t epoch, void *ud);

/* A thread in k8slease_elector_wait_lost (or K8sLeaseWaitLost) held where
 * the end of its term woke it, as a thread the scheduler has not run yet
 * (kl__elector_lost_hook): the release waits for it. For cmocka tests, one
 * such thread at a time. e2e_lost_await_waiting: wait until a thread waits
 * in wait_lost (then the end of the term holds it); e2e_lost_await_held:
 * until the end of the term has woken and held it; e2e_lost_let_go: let it
 * return. Each wait is bounded (10 s) and fails the test past it. */
void e2e_lost_await_waiting(void);
void e2e_lost_await_held(void);
void e2e_lost_let_go(void);

/* For cmocka tests. Skip the running test unless the server under test is
 * k8slease-testserver, saying why ("skipped on a real API server: WHY"). */
void e2e_need_testserver(const char *why);
/* Add a fault rule (JSON) on the test server: it must answer 201; returns
 * the rule's id. */
long e2e_add_fault(const char *json);
/* Wait (polling every 20 ms, at most ms) until fault rule id is gone (its
 * count used up, or expired); fail the test otherwise. */
void e2e_wait_fault_retired(long id, int ms);

#endif
