#include "e2e.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "harness.h"

static ts_server *server;

static void log_to_stderr(k8slease_log_level level, const char *msg, void *ud)
{
    static const char *names[] = {"error", "warn", "info", "debug"};

    (void)ud;
    fprintf(stderr, "k8slease %s: %s\n", names[level], msg);
}

int e2e_setup(k8slease_client **client)
{
    k8slease_client_options opts = K8SLEASE_CLIENT_OPTIONS_INIT;
    const char *kc = getenv("K8SLEASE_TEST_KUBECONFIG");
    const char *verbose = getenv("K8SLEASE_TEST_VERBOSE");

    if (server) {
        kc = ts_kubeconfig(server); /* already started: another client */
    } else if (!kc || !kc[0]) {
        if (ts_start(&server, NULL) != 0) {
            fprintf(stderr, "e2e: cannot start k8slease-testserver\n");
            return -1;
        }
        kc = ts_kubeconfig(server);
    }
    setenv("KUBECONFIG", kc, 1);
    unsetenv("KUBERNETES_SERVICE_HOST");
    if (!client)
        return 0;
    opts.kubeconfig = kc;
    if (verbose && verbose[0]) {
        opts.log_cb = log_to_stderr;
        opts.log_level = K8SLEASE_LOG_DEBUG;
    }
    if (k8slease_client_new(client, &opts) != 0) {
        fprintf(stderr, "e2e: client: %s\n", k8slease_error_last());
        return -1;
    }
    return 0;
}

int e2e_teardown(k8slease_client *client)
{
    int status = 0;

    k8slease_client_free(client);
    if (server && (status = ts_stop(server)) != 0)
        fprintf(stderr, "e2e: k8slease-testserver exited with status %d\n", status);
    server = NULL;
    return status == 0 ? 0 : -1;
}

int e2e_is_testserver(void)
{
    return server != NULL;
}

struct ts_server *e2e_server(void)
{
    return server;
}

int64_t e2e_mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void e2e_pause_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};

    nanosleep(&ts, NULL);
}
