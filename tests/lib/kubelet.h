/* What a kubelet writes, as JSON text. There is no kubelet under envtest
 * nor in the test server, so the crash failover suite (test_crash), the
 * chaos suite's driver and benchmark 8 play it, each with its own way to
 * send the request: these build the bodies they send. Each returns 0, or
 * -1 when the text does not fit in buf (len bytes). */
#ifndef KL_TEST_KUBELET_H
#define KL_TEST_KUBELET_H

#include <stddef.h>
#include <stdint.h>

/* "2026-12-02T07:00:00Z" for wall second s, as the kubelet writes times
 * (whole seconds); returns buf. 21 bytes are enough. */
const char *kubelet_json_time(int64_t s, char *buf, size_t len);

/* A Pod named name with one container, "main": the body of the POST that
 * creates it. */
int kubelet_json_pod(char *buf, size_t len, const char *name);

/* The state of an instance running since wall second started_s. */
int kubelet_json_running(char *buf, size_t len, int64_t started_s);

/* The state of instance container_id, ended with exit_code (137: SIGKILL)
 * for reason ("Error", "OOMKilled") at wall second finished_s after
 * starting at started_s. */
int kubelet_json_terminated(char *buf, size_t len, const char *container_id, int exit_code,
                            const char *reason, int64_t started_s, int64_t finished_s);

/* The merge patch of pods/status: container "main" is instance
 * container_id, restarted `restarts` times, in state (JSON from above),
 * after last_state (JSON; "{}" for none). */
int kubelet_json_status(char *buf, size_t len, const char *container_id, int restarts,
                        const char *state, const char *last_state);

#endif
