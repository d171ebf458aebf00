/* The test server's control API, as the benchmarks use it. */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "bench.h"

const char *const srv_verb_names[V_COUNT] = {"get",    "list",  "watch", "create",
                                             "update", "patch", "delete"};

int srv_reset(bench_ctx *ctx)
{
    long status = 0;
    char *body = NULL;
    int rc = ts_control(ctx->server, "POST", "/testserver/v1/reset", "{}", &status, &body);

    free(body);
    if (rc < 0 || status != 200) {
        bench_log("test server reset failed (HTTP %ld)", status);
        return -1;
    }
    return 0;
}

/* Sum of the counts of an object {"200": n, "409": m, ...}. */
static double sum_counts(json_t *by_status)
{
    const char *key;
    json_t *v;
    double sum = 0;

    json_object_foreach(by_status, key, v)
    {
        sum += (double)json_integer_value(v);
    }
    return sum;
}

int srv_stats_get(bench_ctx *ctx, srv_stats *out)
{
    long status = 0;
    char *body = NULL;
    json_t *root = NULL, *requests, *by_verb, *by_status;
    int rc = -1;

    memset(out, 0, sizeof(*out));
    if (ts_control(ctx->server, "GET", "/testserver/v1/stats", NULL, &status, &body) < 0 ||
        status != 200)
        goto out;
    if (!(root = json_loads(body, 0, NULL)))
        goto out;
    requests = json_object_get(root, "requests");
    by_verb = json_object_get(requests, "by_verb");
    by_status = json_object_get(requests, "by_status");
    for (int v = 0; v < V_COUNT; v++)
        out->verb[v] = sum_counts(json_object_get(by_verb, srv_verb_names[v]));
    out->total = (double)json_integer_value(json_object_get(requests, "total"));
    out->conflicts = (double)json_integer_value(json_object_get(by_status, "409"));
    out->watches_open =
        (double)json_integer_value(json_object_get(json_object_get(root, "watches"), "open"));
    rc = 0;
out:
    if (rc < 0)
        bench_log("cannot read the test server's stats (HTTP %ld)", status);
    json_decref(root);
    free(body);
    return rc;
}
