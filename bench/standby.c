/* k8slease-bench-standby: benchmark 6's polling standby, a program of the
 * seed ABI (libk8s_lease_wrapper.so) as Mooncake's master supervisor is:
 * while another process leads, it calls K8sLeaseGetHolder every interval
 * to learn the leader.
 *
 *   k8slease-bench-standby NS LEASE EXPECTED_HOLDER INTERVAL_MS DURATION_MS
 *
 * The server is the one of $KUBECONFIG (the ABI's client: in-cluster
 * config, else $KUBECONFIG). Protocol with the driver (bench/http.c):
 *   1. one call (it creates the ABI's client); prints
 *      "FIRST us=T rc=RC holder=H"
 *   2. waits for a line on stdin (the driver reads the server's counters
 *      in between)
 *   3. one call every INTERVAL_MS (an absolute schedule on
 *      CLOCK_MONOTONIC) for DURATION_MS; prints "RESULT calls=N p50_us=..
 *      p99_us=.. max_us=.. errors=.. wrong=.." (wrong: rc 0 but another
 *      holder than EXPECTED_HOLDER, or none)
 *   4. exits at EOF on stdin, so that whatever the library keeps open (a
 *      watch) is still open while the driver reads the counters again.
 * Wall time of each call on CLOCK_MONOTONIC, in microseconds. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libk8s_lease_wrapper.h>

static int64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* Nearest rank, v sorted. */
static double pct(const double *v, size_t n, double p)
{
    size_t rank = (size_t)(p / 100.0 * (double)n + 0.999999);

    if (!n)
        return -1;
    if (rank < 1)
        rank = 1;
    return v[(rank > n ? n : rank) - 1];
}

/* One call; its wall time in us; *rc and *holder_ok set. */
static double call(char *ns, char *lease, const char *expected, int *rc, int *holder_ok)
{
    char *holder = NULL, *err = NULL;
    long long transitions = 0;
    int64_t t0 = now_ns();
    double us;

    *rc = K8sLeaseGetHolder(ns, lease, &holder, &transitions, &err);
    us = (double)(now_ns() - t0) / 1000.0;
    *holder_ok = *rc == 0 && holder && !strcmp(holder, expected);
    if (*rc < 0) {
        fprintf(stderr, "standby: K8sLeaseGetHolder: %s\n", err ? err : "(no message)");
        free(err);
    }
    free(holder);
    return us;
}

int main(int argc, char **argv)
{
    int64_t interval_ns, duration_ns, t0, next;
    size_t n = 0, cap;
    double *v, first;
    int rc, ok, errors = 0, wrong = 0;
    char line[64];

    if (argc != 6) {
        fprintf(stderr, "usage: k8slease-bench-standby NS LEASE EXPECTED_HOLDER INTERVAL_MS "
                        "DURATION_MS\n");
        return 2;
    }
    interval_ns = atoll(argv[4]) * 1000000;
    duration_ns = atoll(argv[5]) * 1000000;
    if (interval_ns <= 0 || duration_ns <= 0)
        return 2;
    cap = (size_t)(duration_ns / interval_ns) + 2;
    if (!(v = calloc(cap, sizeof(*v))))
        return 1;

    first = call(argv[1], argv[2], argv[3], &rc, &ok);
    printf("FIRST us=%.1f rc=%d holder_ok=%d\n", first, rc, ok);
    fflush(stdout);
    if (!fgets(line, sizeof(line), stdin))
        return 0;

    t0 = next = now_ns();
    while (next - t0 < duration_ns && n < cap) {
        struct timespec ts = {(time_t)(next / 1000000000), (long)(next % 1000000000)};

        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
            ;
        v[n++] = call(argv[1], argv[2], argv[3], &rc, &ok);
        errors += rc < 0;
        wrong += rc >= 0 && !ok;
        next += interval_ns;
    }
    qsort(v, n, sizeof(*v), cmp);
    printf("RESULT calls=%zu first_us=%.1f p50_us=%.1f p99_us=%.1f max_us=%.1f errors=%d "
           "wrong=%d\n",
           n, first, pct(v, n, 50), pct(v, n, 99), n ? v[n - 1] : -1.0, errors, wrong);
    fflush(stdout);
    while (fgets(line, sizeof(line), stdin))
        ;
    free(v);
    return 0;
}
