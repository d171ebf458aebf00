/*
 * seed_leader: the node suite's program in a Pod, on the seed ABI
 * (libk8s_lease_wrapper.h) as Mooncake's master drives it: RunElection,
 * WaitElected, then WaitLost on a monitor thread; campaign again when the
 * term ends. Crash failover comes from the environment
 * (K8SLEASE_CRASH_FAILOVER=1, POD_NAME, POD_NAMESPACE), as for any seed-ABI
 * program.
 *
 *   seed_leader NS LEASE IDENTITY [LD RD RP]     (seconds; 15 10 2 by default)
 *
 * Prints "elected epoch=N" and "lost epoch=N" (stdout, one line each).
 * SIGUSR1: allocate and touch memory until the kernel kills the process
 * (the container's memory limit: an OOM kill). SIGTERM: cancel the
 * election (release) and exit 0.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libk8s_lease_wrapper.h>

#define CHUNK (4 << 20)

static char *ns, *lease, *identity;

static void fail(const char *what, char *err)
{
    fprintf(stderr, "seed_leader: %s: %s\n", what, err ? err : "(no message)");
    free(err);
}

/* Until the memory limit ends us. */
static void exhaust_memory(void)
{
    fprintf(stderr, "seed_leader: allocating until the memory limit kills us\n");
    for (;;) {
        char *p = malloc(CHUNK);

        if (p)
            memset(p, 1, CHUNK); /* touched: resident */
    }
}

static void *signal_main(void *arg)
{
    sigset_t *sigs = arg;
    char *err = NULL;
    int sig;

    for (;;) {
        if (sigwait(sigs, &sig) != 0)
            continue;
        if (sig == SIGUSR1)
            exhaust_memory();
        if (K8sLeaseCancelElection(ns, lease, &err) != 0)
            fail("K8sLeaseCancelElection", err);
        exit(0);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    static sigset_t sigs;
    int ld = 15, rd = 10, rp = 2;
    pthread_t t;

    if (argc != 4 && argc != 7) {
        fprintf(stderr, "usage: seed_leader NS LEASE IDENTITY [LD RD RP]\n");
        return 2;
    }
    ns = argv[1], lease = argv[2], identity = argv[3];
    if (argc == 7)
        ld = atoi(argv[4]), rd = atoi(argv[5]), rp = atoi(argv[6]);
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    if (pthread_create(&t, NULL, signal_main, &sigs) != 0) {
        fprintf(stderr, "seed_leader: cannot start a thread\n");
        return 1;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (;;) {
        char *err = NULL;
        long long epoch = -1;

        if (K8sLeaseRunElection(ns, lease, identity, ld, rd, rp, &err) != 0) {
            fail("K8sLeaseRunElection", err);
            return 1;
        }
        if (K8sLeaseWaitElected(ns, lease, 3600, &epoch, &err) != 0) {
            fail("K8sLeaseWaitElected", err);
            continue;
        }
        printf("elected epoch=%lld\n", epoch);
        if (K8sLeaseWaitLost(ns, lease, &err) != 0)
            fail("K8sLeaseWaitLost", err);
        printf("lost epoch=%lld\n", epoch);
    }
}
