/* What the kernel says about this process's TCP connections (Linux /proc).
 * Plain C and libc only: tests/lib's suites and bench/ both build it. */
#ifndef K8SLEASE_PROCNET_H
#define K8SLEASE_PROCNET_H

/* Established TCP connections (IPv4 and IPv6) held by this process whose
 * remote port is port (0: any); -1 if /proc cannot be read. */
long kl_test_tcp_established(int port);

#endif
