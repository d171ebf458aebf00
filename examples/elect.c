/*
 * elect: the smallest useful k8slease program. Campaign for a Lease, print
 * the epoch when elected, release the Lease on SIGTERM or SIGINT.
 *
 *   cc -std=c11 elect.c $(pkg-config --cflags --libs k8slease) -o elect
 *   ./elect [NS/]NAME IDENTITY
 *
 * Output, one line per event: "leader=ID epoch=N" (someone else leads, or
 * "leader= " when nobody does), "elected epoch=N", then "released" after a
 * signal, or "lost" if the term ended by itself (exit status 1).
 *
 * The configuration comes from the environment: in a Pod its service
 * account, else $KUBECONFIG, else ~/.kube/config.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <k8slease.h>

static void on_started_leading(int64_t epoch, void *user_data)
{
    (void)user_data;
    /* The epoch is the fencing token: pass it with every write. */
    printf("elected epoch=%lld\n", (long long)epoch);
    fflush(stdout);
}

static void on_new_leader(const char *identity, int64_t epoch, void *user_data)
{
    (void)user_data;
    printf("leader=%s epoch=%lld\n", identity, (long long)epoch);
    fflush(stdout);
}

static void on_stopped_leading(void *user_data)
{
    (void)user_data;
    /* The term is over (or the election ended): wake main's sigwait(). */
    kill(getpid(), SIGUSR1);
}

int main(int argc, char **argv)
{
    k8slease_client *client = NULL;
    k8slease_elector *elector = NULL;
    k8slease_elector_options o = K8SLEASE_ELECTOR_OPTIONS_INIT;
    char ns[64] = "";
    const char *slash;
    sigset_t sigs;
    int sig = 0, status = 1;

    if (argc != 3) {
        fprintf(stderr, "usage: %s [NS/]NAME IDENTITY\n", argv[0]);
        return 2;
    }
    /* Block the signals before the library starts its thread, which
     * inherits the mask: only sigwait() below ever sees them. */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);

    if ((slash = strchr(argv[1], '/')) != NULL) {
        snprintf(ns, sizeof(ns), "%.*s", (int)(slash - argv[1]), argv[1]);
        o.ns = ns;
        o.name = slash + 1;
    } else {
        o.name = argv[1]; /* in the namespace of the configuration */
    }
    o.identity = argv[2];
    o.on_started_leading = on_started_leading;
    o.on_stopped_leading = on_stopped_leading;
    o.on_new_leader = on_new_leader;

    if (k8slease_client_new(&client, NULL) != 0 ||
        k8slease_elector_start(&elector, client, &o) != 0) {
        fprintf(stderr, "elect: %s\n", k8slease_error_last());
        goto out;
    }
    sigwait(&sigs, &sig);
    if (sig == SIGUSR1) {
        puts("lost");
    } else {
        /* Stops the election; writes holderIdentity "" if we lead, so a
         * standby takes over at once instead of after the lease expires. */
        k8slease_elector_free(elector);
        elector = NULL;
        puts("released");
        status = 0;
    }
out:
    k8slease_elector_free(elector);
    k8slease_client_free(client);
    return status;
}
