/* Shared setup of the end-to-end suites: an API server and a client. */
#ifndef K8SLEASE_E2E_H
#define K8SLEASE_E2E_H

#include <stdint.h>

#include "k8slease.h"

/* Use $K8SLEASE_TEST_KUBECONFIG when set (any API server: a real cluster,
 * envtest); otherwise start k8slease-testserver. Sets $KUBECONFIG for the
 * seed ABI. client may be NULL. Called again, it reuses the server and
 * makes another client. Returns 0 or -1 (message printed). */
int e2e_setup(k8slease_client **client);
/* Free the client, stop the test server; -1 if it did not exit cleanly. */
int e2e_teardown(k8slease_client *client);
/* 1 when the server is our test server (fault injection available). */
int e2e_is_testserver(void);
struct ts_server *e2e_server(void);

/* CLOCK_MONOTONIC in ms; a pause for polling loops (never synchronisation). */
int64_t e2e_mono_ms(void);
void e2e_pause_ms(int ms);

#endif
