/* The kubelet's bodies (kubelet.h). */
#include "kubelet.h"

#include <stdio.h>
#include <time.h>

static int fits(int n, size_t len)
{
    return n >= 0 && (size_t)n < len ? 0 : -1;
}

const char *kubelet_json_time(int64_t s, char *buf, size_t len)
{
    time_t t = (time_t)s;
    struct tm tm;

    gmtime_r(&t, &tm);
    if (strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0 && len > 0)
        buf[0] = '\0';
    return buf;
}

int kubelet_json_pod(char *buf, size_t len, const char *name)
{
    return fits(snprintf(buf, len,
                         "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"%s\"},"
                         "\"spec\":{\"containers\":[{\"name\":\"main\",\"image\":"
                         "\"registry.k8s.io/pause\"}]}}",
                         name),
                len);
}

int kubelet_json_running(char *buf, size_t len, int64_t started_s)
{
    char at[32];

    return fits(snprintf(buf, len, "{\"running\":{\"startedAt\":\"%s\"}}",
                         kubelet_json_time(started_s, at, sizeof(at))),
                len);
}

int kubelet_json_terminated(char *buf, size_t len, const char *container_id, int exit_code,
                            const char *reason, int64_t started_s, int64_t finished_s)
{
    char started[32], finished[32];

    return fits(snprintf(buf, len,
                         "{\"terminated\":{\"exitCode\":%d,\"reason\":\"%s\",\"startedAt\":"
                         "\"%s\",\"finishedAt\":\"%s\",\"containerID\":\"%s\"}}",
                         exit_code, reason, kubelet_json_time(started_s, started, sizeof(started)),
                         kubelet_json_time(finished_s, finished, sizeof(finished)), container_id),
                len);
}

int kubelet_json_status(char *buf, size_t len, const char *container_id, int restarts,
                        const char *state, const char *last_state)
{
    return fits(
        snprintf(buf, len,
                 "{\"status\":{\"phase\":\"Running\",\"containerStatuses\":[{\"name\":"
                 "\"main\",\"containerID\":\"%s\",\"ready\":true,\"restartCount\":%d,"
                 "\"image\":\"pause\",\"imageID\":\"pause\",\"state\":%s,\"lastState\":%s}]}}",
                 container_id, restarts, state, last_state),
        len);
}
