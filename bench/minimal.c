/* k8slease-bench-minimal: the smallest useful program, for benchmark 5.
 * It holds one election (client-go's default timings) long enough to renew
 * at least once, then prints its own resident memory and thread count:
 *
 *   RESULT rss_kb=N anon_kb=N file_kb=N hwm_kb=N threads=N leader=1 renewals=N
 *
 * Usage: k8slease-bench-minimal KUBECONFIG */
#define _DEFAULT_SOURCE /* nanosleep() */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "k8slease.h"

static long status_field(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    size_t len = strlen(field);
    char line[256];
    long v = -1;

    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, field, len) == 0 && line[len] == ':')
            v = strtol(line + len + 1, NULL, 10);
    if (f)
        fclose(f);
    return v;
}

int main(int argc, char **argv)
{
    k8slease_client_options co = K8SLEASE_CLIENT_OPTIONS_INIT;
    k8slease_elector_options eo = K8SLEASE_ELECTOR_OPTIONS_INIT;
    k8slease_elector_stats st = {.version = K8SLEASE_ELECTOR_STATS_VERSION};
    struct timespec pause = {.tv_sec = 2, .tv_nsec = 500000000}; /* > one retry period */
    k8slease_client *client = NULL;
    k8slease_elector *e = NULL;
    int rc = 1;

    if (argc != 2) {
        fprintf(stderr, "usage: %s KUBECONFIG\n", argv[0]);
        return 2;
    }
    co.kubeconfig = argv[1];
    eo.name = "bench-minimal";
    eo.identity = "minimal";
    if (k8slease_client_new(&client, &co) < 0 || k8slease_elector_start(&e, client, &eo) < 0 ||
        k8slease_elector_wait_elected(e, 10000, NULL) < 0) {
        fprintf(stderr, "k8slease-bench-minimal: %s\n", k8slease_error_last());
        goto out;
    }
    nanosleep(&pause, NULL);
    k8slease_elector_stats_get(e, &st);
    printf("RESULT rss_kb=%ld anon_kb=%ld file_kb=%ld hwm_kb=%ld threads=%ld leader=%d "
           "renewals=%llu\n",
           status_field("VmRSS"), status_field("RssAnon"), status_field("RssFile"),
           status_field("VmHWM"), status_field("Threads"), k8slease_elector_is_leader(e),
           (unsigned long long)st.renewals);
    rc = 0;
out:
    k8slease_elector_free(e);
    k8slease_client_free(client);
    return rc;
}
