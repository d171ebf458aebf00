/*
 * seed_abi: a master supervisor written against the Go library's C ABI
 * (libk8s_lease_wrapper.h), the way its users drive it, unchanged. Built
 * against k8slease's drop-in libk8s_lease_wrapper.so it needs no Go runtime.
 *
 *   cc -std=c11 seed_abi.c $(pkg-config --cflags --libs k8s_lease_wrapper) -pthread
 *   ./seed_abi NS LEASE IDENTITY [CAMPAIGN_TIMEOUT_SEC]
 *
 * The loop: RunElection(5 s, 3 s, 1 s); WaitElected with a timeout of
 * 2 x lease duration. Elected: serve with the epoch as the view version
 * while a monitor thread blocks in WaitLost. Not elected (the election is
 * cancelled): poll GetHolder every 200 ms to learn the leader, and campaign
 * again once nobody holds the Lease. SIGTERM/SIGINT: CancelElection
 * (releases the Lease if leading) and exit 0.
 *
 * Output: "leader epoch=N", "standby leader=ID epoch=N" (on every change),
 * "lost leadership", "stopped".
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libk8s_lease_wrapper.h>

static char *ns, *lease, *identity;
static atomic_int stopping;

/* Prints and frees an error string of the ABI (malloc'ed, ours to free). */
static void report(const char *what, char *err)
{
    fprintf(stderr, "seed_abi: %s: %s\n", what, err ? err : "(no message)");
    free(err);
}

static void *signal_thread(void *arg)
{
    sigset_t *sigs = arg;
    char *err = NULL;
    int sig;

    sigwait(sigs, &sig);
    atomic_store(&stopping, 1);
    /* Idempotent and callable from any thread: wakes WaitElected and
     * WaitLost, and releases the Lease if we lead. */
    if (K8sLeaseCancelElection(ns, lease, &err) != 0)
        report("K8sLeaseCancelElection", err);
    return NULL;
}

/* The monitor thread of the seed's users: tells the supervisor when
 * leadership is gone. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int lost;

static void *monitor_thread(void *arg)
{
    char *err = NULL;

    (void)arg;
    if (K8sLeaseWaitLost(ns, lease, &err) != 0)
        report("K8sLeaseWaitLost", err);
    pthread_mutex_lock(&mu);
    lost = 1;
    pthread_cond_signal(&cv);
    pthread_mutex_unlock(&mu);
    return NULL;
}

static void serve(long long epoch)
{
    pthread_t monitor;

    printf("leader epoch=%lld\n", epoch);
    fflush(stdout);
    lost = 0;
    if (pthread_create(&monitor, NULL, monitor_thread, NULL) != 0) {
        fprintf(stderr, "seed_abi: cannot start the monitor thread\n");
        return;
    }
    /* A real master serves clients here, stamping writes with epoch. */
    pthread_mutex_lock(&mu);
    while (!lost)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    pthread_join(monitor, NULL);
    if (!atomic_load(&stopping)) {
        puts("lost leadership");
        fflush(stdout);
    }
}

/* Standby: poll the holder every 200 ms until nobody holds the Lease (it
 * was released or expired) or we are asked to stop. */
static void standby(void)
{
    const struct timespec poll_interval = {0, 200 * 1000 * 1000};
    char *last = NULL;
    long long last_epoch = -1;

    while (!atomic_load(&stopping)) {
        char *holder = NULL, *err = NULL;
        long long epoch = 0;
        int rc = K8sLeaseGetHolder(ns, lease, &holder, &epoch, &err);

        if (rc < 0) {
            report("K8sLeaseGetHolder", err);
        } else if (rc == 1 || !holder) {
            free(last);
            return; /* no Lease, or no (live) holder: campaign */
        } else {
            if (!last || strcmp(last, holder) != 0 || epoch != last_epoch) {
                printf("standby leader=%s epoch=%lld\n", holder, epoch);
                fflush(stdout);
            }
            free(last);
            last = holder;
            last_epoch = epoch;
        }
        nanosleep(&poll_interval, NULL);
    }
    free(last);
}

int main(int argc, char **argv)
{
    const int lease_duration = 5, renew_deadline = 3, retry_period = 1;
    int campaign_timeout = 2 * lease_duration;
    pthread_t signals;
    sigset_t sigs;
    char *err = NULL;

    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: %s NS LEASE IDENTITY [CAMPAIGN_TIMEOUT_SEC]\n", argv[0]);
        return 2;
    }
    ns = argv[1], lease = argv[2], identity = argv[3];
    if (argc == 5)
        campaign_timeout = atoi(argv[4]);

    /* Before any library thread exists: they inherit the mask. */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);

    if (K8sLeaseInit(&err) != 0) {
        report("K8sLeaseInit", err);
        return 1;
    }
    if (pthread_create(&signals, NULL, signal_thread, &sigs) != 0) {
        fprintf(stderr, "seed_abi: cannot start the signal thread\n");
        return 1;
    }
    pthread_detach(signals);

    while (!atomic_load(&stopping)) {
        long long epoch = 0;

        if (K8sLeaseRunElection(ns, lease, identity, lease_duration, renew_deadline, retry_period,
                                &err) != 0) {
            report("K8sLeaseRunElection", err);
            return 1;
        }
        if (atomic_load(&stopping)) /* the signal came before the election existed */
            break;
        if (K8sLeaseWaitElected(ns, lease, campaign_timeout, &epoch, &err) == 0) {
            serve(epoch);
            continue;
        }
        free(err), err = NULL; /* timed out (or stopped): the election is cancelled */
        if (K8sLeaseCancelElection(ns, lease, &err) != 0)
            report("K8sLeaseCancelElection", err), err = NULL;
        standby();
    }
    /* Cancel (again: idempotent) and wait until the release is written. */
    if (K8sLeaseCancelElection(ns, lease, &err) != 0)
        report("K8sLeaseCancelElection", err), err = NULL;
    if (K8sLeaseWaitLost(ns, lease, &err) != 0)
        report("K8sLeaseWaitLost", err);
    puts("stopped");
    return 0;
}
