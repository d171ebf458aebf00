/* Helpers of the suites that test k8slease-testserver itself with libcurl
 * and jansson alone, no library under test (tests/integration:
 * test_testserver.c, test_transport.c): time, formatting, JSON paths,
 * the server's stats and control API, bounded waits on its stats, shell
 * commands. Response buffers: ts_buf (harness.h).
 *
 * Anything that goes wrong fails the running cmocka test. */
#ifndef K8SLEASE_TEST_TSCLIENT_H
#define K8SLEASE_TEST_TSCLIENT_H

#include <stddef.h>
#include <time.h>

#include <jansson.h>

#include "harness.h"

/* CLOCK_MONOTONIC in ms. */
long long tc_now_ms(void);
/* A polling interval between two looks, never a synchronisation. */
void tc_pause_ms(long ms);
/* The time ms from now on clock, for pthread_cond_timedwait (CLOCK_REALTIME
 * for a default condition variable, CLOCK_MONOTONIC for one set so). */
struct timespec tc_deadline_in(clockid_t clock, long ms);

/* printf into a malloc'ed string (free()). */
char *tc_fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));

/* j at a dotted path ("metadata.name", "details.causes.0.field",
 * "connections.h2.total"); NULL when absent. Borrowed. */
json_t *tc_at(json_t *j, const char *path);

/* GET /testserver/v1/stats (must answer 200 with JSON; json_decref it). */
json_t *tc_stats(ts_server *s);
/* The integer at path in the stats (it must be one). */
long long tc_stat_int(ts_server *s, const char *path);
/* The same for a counter that is absent until it first counts (0 then). */
long long tc_stat_or0(ts_server *s, const char *path);
/* Wait (polling every 20 ms, at most ms) until the stats value at path is
 * at least n / at most n; fail with the last value otherwise. */
void tc_wait_stat(ts_server *s, const char *path, long long n, long ms);
void tc_wait_stat_at_most(ts_server *s, const char *path, long long n, long ms);

/* A control-API call (body JSON or NULL) that must answer status want. */
void tc_control(ts_server *s, const char *method, const char *path, const char *body, long want);

/* Run a shell command (printf format; bound it with timeout(1)) and return
 * its stdout (free()); *status is its exit status (-1: killed). A nonzero
 * status prints the command and its output. */
char *tc_run(int *status, const char *f, ...) __attribute__((format(printf, 2, 3)));

#endif
