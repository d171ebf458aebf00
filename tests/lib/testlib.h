/* Helpers every cmocka suite may use (unit and integration): reading test
 * files, base64, a port nothing listens on. Linked into every k8slease_test()
 * program (tests/CMakeLists.txt). The test server and etcd launchers are
 * harness.h and etcd_harness.h, the end-to-end setup and the candidate
 * recorder e2e.h, the fake HTTP(S) server of the unit tests fakehttp.h, all
 * in this directory. */
#ifndef K8SLEASE_TESTLIB_H
#define K8SLEASE_TESTLIB_H

#include <stddef.h>

/* The whole file, NUL-terminated (malloc'ed, free()); *len (may be NULL)
 * its size. Fails the running cmocka test when the file cannot be read. */
char *kl_test_read_file(const char *path, size_t *len);
/* kl_test_read_file of tests/data/DIR/NAME. */
char *kl_test_read_data(const char *dir, const char *name, size_t *len);

/* data in base64 (standard alphabet, padded), malloc'ed (free()): what a
 * kubeconfig's *-data fields hold. */
char *kl_test_base64(const char *data);

/* A loopback TCP port nothing listens on (bound, then closed): connecting
 * to it is refused. Fails the running cmocka test if none can be had. */
int kl_test_closed_port(void);

/* One line from fd (a child's stdout) within timeout_ms, without its
 * newline, into buf (longer lines are cut): 0, or -1 on timeout or end of
 * output (buf then holds what came). */
int kl_test_read_line(int fd, char *buf, size_t size, int timeout_ms);
/* Everything until fd's end of output, within timeout_ms: *out malloc'ed
 * and NUL-terminated (also on failure, with what came), *len its length;
 * 0, or -1 on timeout, read error or out of memory. */
int kl_test_read_all(int fd, char **out, size_t *len, int timeout_ms);

#endif
