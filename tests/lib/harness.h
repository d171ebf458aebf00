/*
 * harness.h - start and drive k8slease-testserver from integration tests.
 *
 * The server binary is found through the environment variable
 * K8SLEASE_TESTSERVER, else the macro K8SLEASE_TESTSERVER_PATH (set by
 * tests/integration/CMakeLists.txt for every target that links the
 * k8slease_testharness library).
 *
 * Typical use:
 *
 *     ts_server *s;
 *     assert_int_equal(ts_start(&s, NULL), 0);
 *     setenv("KUBECONFIG", ts_kubeconfig(s), 1);
 *     ... run the code under test ...
 *     long status; char *body;
 *     ts_control(s, "POST", "/testserver/v1/faults",
 *                "{\"kind\":\"error\",\"status\":503,\"count\":2}", &status, &body);
 *     free(body);
 *     ts_stop(s);
 *
 * Threads: one ts_server may be used by one thread at a time (it owns a
 * libcurl easy handle); different servers are independent.
 * Errors: functions returning int give 0 on success and -1 on failure, with
 * a one-line reason on stderr.
 */
#ifndef K8SLEASE_TEST_HARNESS_H
#define K8SLEASE_TEST_HARNESS_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ts_server ts_server;

/*
 * Forks and execs the server with `--quiet` (unless K8SLEASE_TESTSERVER_VERBOSE
 * is set in the environment) followed by extra_args (NULL-terminated, or
 * NULL), waits at most 10 s for its ready line and parses it. Without
 * `--dir` among extra_args the server makes (and removes) a temporary
 * directory. The child gets SIGTERM if the test process dies.
 */
int ts_start(ts_server **out, const char *const *extra_args);

/* Borrowed strings, valid until ts_stop(). */
const char *ts_kubeconfig(const ts_server *s); /* DIR/kubeconfig (embedded token) */
const char *ts_dir(const ts_server *s);        /* DIR: ca.crt, client.crt, token, ... */
const char *ts_url(const ts_server *s);        /* https://127.0.0.1:PORT */
const char *ts_ca_file(const ts_server *s);    /* DIR/ca.crt */
int ts_port(const ts_server *s);
int ts_pid(const ts_server *s);

/* The bearer token the server accepts now (re-read from DIR/token); free() it. */
char *ts_token(const ts_server *s);

/*
 * One HTTPS request with the CA and the current bearer token. path is
 * "/apis/..." or "/testserver/v1/..."; content_type may be NULL (then
 * application/json when a body is given); body may be NULL. On success
 * *status is the HTTP status and *response (if response != NULL) a
 * malloc'ed NUL-terminated body. A transport error (connection reset, no
 * answer) returns -1 with *status 0.
 */
int ts_request(ts_server *s, const char *method, const char *path, const char *content_type,
               const char *body, long *status, char **response);

/* ts_request with an application/json body: for /testserver/v1 calls. */
int ts_control(ts_server *s, const char *method, const char *path, const char *json_body,
               long *status, char **response);

/*
 * A growing NUL-terminated buffer for libcurl: ts_buf_write is a
 * CURLOPT_WRITEFUNCTION whose userdata is the ts_buf (0 on ENOMEM, which
 * fails the transfer). free(data) when done.
 */
typedef struct ts_buf {
    char *data;
    size_t len;
} ts_buf;
size_t ts_buf_write(char *p, size_t size, size_t n, void *ud);

/*
 * POST /testserver/v1/restart and wait (at most 10 s) until the restarted
 * server answers again.
 */
int ts_restart(ts_server *s, bool keep_state, unsigned down_ms);

/*
 * SIGTERM, wait (at most 10 s, then SIGKILL), free everything. Returns the
 * server's exit status (0 for a clean shutdown), or -1 if it had to be
 * killed or did not exit normally. Accepts NULL.
 */
int ts_stop(ts_server *s);

#ifdef __cplusplus
}
#endif

#endif
