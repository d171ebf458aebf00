/* The servers the benchmarks run against: the test server (its control
 * API) or a real kube-apiserver (envtest: /metrics; a user's cluster:
 * nothing but the kubeconfig). */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "bench.h"

const char *const srv_verb_names[V_COUNT] = {"get",    "list",  "watch", "create",
                                             "update", "patch", "delete"};

/* ---- a real server of our own (envtest) ---------------------------------- */

typedef struct buf {
    char *p;
    size_t len;
} buf;

static size_t collect(char *data, size_t size, size_t n, void *ud)
{
    buf *b = ud;
    char *p = realloc(b->p, b->len + size * n + 1);

    if (!p)
        return 0;
    memcpy(p + b->len, data, size * n);
    b->p = p;
    b->len += size * n;
    b->p[b->len] = '\0';
    return size * n;
}

/* The handle of srv_api's requests, kept so that they reuse one connection
 * (a kubelet's writes do): a TLS handshake per write would be part of what
 * benchmark 8 measures. */
static CURL *api_handle;

/* One request to the envtest server with its token, with a JSON request
 * body when json is not NULL (PATCH: a JSON merge patch), on api_handle
 * when keep; the HTTP status (0 when there was no answer), the body in
 * *body (caller frees). */
static long real_send(const bench_target *t, const char *method, const char *path, const char *json,
                      int keep, char **body)
{
    CURL *c = keep ? api_handle : curl_easy_init();
    struct curl_slist *h = NULL;
    char url[1024], auth[300];
    buf b = {0};
    long status = 0;

    if (keep && !c)
        c = api_handle = curl_easy_init();
    if (!c)
        return 0;
    if (keep)
        curl_easy_reset(c);
    snprintf(url, sizeof(url), "%s%s", t->url, path);
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", t->token);
    h = curl_slist_append(h, auth);
    if (json) {
        h = curl_slist_append(h, strcmp(method, "PATCH")
                                     ? "Content-Type: application/json"
                                     : "Content-Type: application/merge-patch+json");
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, json);
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_CAINFO, t->ca_file);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 30000L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(h);
    if (!keep)
        curl_easy_cleanup(c);
    if (body)
        *body = b.p;
    else
        free(b.p);
    return status;
}

static long real_request(const bench_target *t, const char *method, const char *path, char **body)
{
    return real_send(t, method, path, NULL, 0, body);
}

/* The value of "key: value" at the first line holding key (envtest.sh's
 * kubeconfig: one cluster, one user with a token, one context). */
static int kubeconfig_field(const char *text, const char *key, char *out, size_t size)
{
    const char *p = text;
    size_t klen = strlen(key);

    while ((p = strstr(p, key))) {
        if ((p == text || isspace((unsigned char)p[-1]) || p[-1] == '{') && p[klen] == ':') {
            p += klen + 1;
            p += strspn(p, " \t\"");
            snprintf(out, size, "%.*s", (int)strcspn(p, "\"\r\n,}"), p);
            return 0;
        }
        p += klen;
    }
    return -1;
}

static pid_t ctl_pid(const char *what)
{
    const char *ctl = getenv("K8SLEASE_ENVTEST_CTL");
    char cmd[4200], line[64] = "";
    FILE *f;

    if (!ctl)
        return 0;
    snprintf(cmd, sizeof(cmd), "'%s' %s pid 2>/dev/null", ctl, what);
    if (!(f = popen(cmd, "r")))
        return 0;
    if (!fgets(line, sizeof(line), f))
        line[0] = '\0';
    pclose(f);
    return (pid_t)atol(line);
}

/* etcd's client URL, from envtest.sh's directory ($K8SLEASE_ENVTEST_DIR/env,
 * ETCD_PORT=N): benchmark 4 reads etcd's fsync figures. */
static void etcd_url(bench_target *t)
{
    const char *dir = getenv("K8SLEASE_ENVTEST_DIR");
    char path[4200], line[256];
    FILE *f;

    t->etcd_url[0] = '\0';
    if (!dir)
        return;
    snprintf(path, sizeof(path), "%s/env", dir);
    if (!(f = fopen(path, "r")))
        return;
    while (fgets(line, sizeof(line), f))
        if (!strncmp(line, "ETCD_PORT=", 10))
            snprintf(t->etcd_url, sizeof(t->etcd_url), "http://127.0.0.1:%d", atoi(line + 10));
    fclose(f);
}

#define FSYNC_METRIC "etcd_disk_wal_fsync_duration_seconds"

int srv_etcd_fsyncs(const bench_ctx *ctx, double *count, double *sum_s)
{
    const bench_target *t = ctx->tgt;
    CURL *c;
    buf b = {0};
    char url[128];
    const char *p;
    int rc = -1;

    if (t->kind != TARGET_ENVTEST || !t->etcd_url[0] || !(c = curl_easy_init()))
        return -1;
    snprintf(url, sizeof(url), "%s/metrics", t->etcd_url);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    if (curl_easy_perform(c) == CURLE_OK && b.p && (p = strstr(b.p, "\n" FSYNC_METRIC "_sum ")) &&
        sscanf(p + strlen("\n" FSYNC_METRIC "_sum "), "%lf", sum_s) == 1 &&
        (p = strstr(b.p, "\n" FSYNC_METRIC "_count ")) &&
        sscanf(p + strlen("\n" FSYNC_METRIC "_count "), "%lf", count) == 1)
        rc = 0;
    curl_easy_cleanup(c);
    free(b.p);
    return rc;
}

static int envtest_open(bench_target *t)
{
    FILE *f = fopen(t->kubeconfig, "r");
    char text[8192], *body = NULL;
    size_t n = f ? fread(text, 1, sizeof(text) - 1, f) : 0;
    json_t *v;
    srv_stats st;
    bench_ctx tmp = {.tgt = t};

    if (f)
        fclose(f);
    text[n] = '\0';
    if (kubeconfig_field(text, "server", t->url, sizeof(t->url)) < 0 ||
        kubeconfig_field(text, "certificate-authority", t->ca_file, sizeof(t->ca_file)) < 0 ||
        kubeconfig_field(text, "token", t->token, sizeof(t->token)) < 0) {
        bench_log("%s: not an envtest.sh kubeconfig (server, certificate-authority, token)",
                  t->kubeconfig);
        return -1;
    }
    if (kubeconfig_field(text, "namespace", t->ns, sizeof(t->ns)) < 0)
        snprintf(t->ns, sizeof(t->ns), "default");
    if (real_request(t, "GET", "/version", &body) != 200) {
        bench_log("%s: GET /version failed", t->url);
        free(body);
        return -1;
    }
    v = json_loads(body, 0, NULL);
    snprintf(t->label, sizeof(t->label), "kube-apiserver %s",
             json_string_value(json_object_get(v, "gitVersion"))
                 ? json_string_value(json_object_get(v, "gitVersion"))
                 : "?");
    json_decref(v);
    free(body);
    etcd_url(t);
    t->apiserver_pid = ctl_pid("apiserver");
    t->etcd_pid = ctl_pid("etcd");
    /* The server's own Lease watches (none of ours yet). */
    if (srv_stats_get(&tmp, &st) < 0)
        return -1;
    t->base_watches = st.watches_open;
    bench_log("%s at %s, namespace %s, %.0f Lease watch(es) of its own", t->label, t->url, t->ns,
              t->base_watches);
    return 0;
}

/* Value of label `name` in a Prometheus line's {...}, "" if absent. */
static void label(const char *line, const char *name, char *out, size_t size)
{
    char key[64];
    const char *p;

    snprintf(key, sizeof(key), "%s=\"", name);
    out[0] = '\0';
    for (p = line; (p = strstr(p, key)); p++)
        if (p[-1] == '{' || p[-1] == ',') {
            p += strlen(key);
            snprintf(out, size, "%.*s", (int)strcspn(p, "\""), p);
            return;
        }
}

static int verb_index(const char *v)
{
    static const struct {
        const char *name;
        int v;
    } map[] = {{"GET", V_GET},       {"LIST", V_LIST},
               {"WATCH", V_WATCH},   {"WATCHLIST", V_WATCH},
               {"POST", V_CREATE},   {"PUT", V_UPDATE},
               {"PATCH", V_PATCH},   {"APPLY", V_PATCH},
               {"DELETE", V_DELETE}, {"DELETECOLLECTION", V_DELETE}};

    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        if (!strcmp(v, map[i].name))
            return map[i].v;
    return -1;
}

static int envtest_stats(const bench_target *t, srv_stats *out)
{
    char *body = NULL, *line, *next;
    long status = real_request(t, "GET", "/metrics", &body);

    if (status != 200) {
        bench_log("cannot read %s/metrics (HTTP %ld)", t->url, status);
        free(body);
        return -1;
    }
    for (line = body; line && *line; line = next) {
        char verb[32], code[8], sys[64];
        const char *sp;
        int v;

        if ((next = strchr(line, '\n')))
            *next++ = '\0';
        if (!strstr(line, "resource=\"leases\"") ||
            !strstr(line, "group=\"coordination.k8s.io\"") || !(sp = strrchr(line, ' ')))
            continue;
        label(line, "verb", verb, sizeof(verb));
        if (!strncmp(line, "apiserver_request_total{", 24)) {
            /* Requests of the kube-apiserver itself (its identity Lease)
             * carry system_client (v1.28+): not ours. */
            label(line, "system_client", sys, sizeof(sys));
            label(line, "code", code, sizeof(code));
            if (sys[0] || (v = verb_index(verb)) < 0)
                continue;
            out->verb[v] += atof(sp + 1);
            out->total += atof(sp + 1);
            if (!strcmp(code, "409"))
                out->conflicts += atof(sp + 1);
        } else if (!strncmp(line, "apiserver_longrunning_requests{", 31) &&
                   !strcmp(verb, "WATCH")) {
            out->watches_open += atof(sp + 1);
        }
    }
    out->watches_open -= t->base_watches;
    free(body);
    return 0;
}

static double proc_cpu_s(pid_t pid)
{
    char path[64], line[1024], *p;
    unsigned long long ut = 0, st = 0;
    FILE *f;

    if (pid <= 0)
        return -1;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if (!(f = fopen(path, "r")))
        return -1;
    p = fgets(line, sizeof(line), f) ? strrchr(line, ')') : NULL;
    fclose(f);
    /* After "pid (comm)": state is field 3, utime 14, stime 15. */
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

double srv_cpu_s(const bench_ctx *ctx, int etcd)
{
    if (ctx->tgt->kind != TARGET_ENVTEST)
        return -1;
    return proc_cpu_s(etcd ? ctx->tgt->etcd_pid : ctx->tgt->apiserver_pid);
}

/* ---- any server ------------------------------------------------------------ */

int srv_open(bench_ctx *ctx, bench_target *t)
{
    ctx->tgt = t;
    switch (t->kind) {
    case TARGET_TESTSERVER:
        snprintf(t->label, sizeof(t->label), "test server");
        if (ts_start(&t->ts, NULL) < 0) {
            bench_log("cannot start the test server");
            return -1;
        }
        snprintf(t->kubeconfig, sizeof(t->kubeconfig), "%s", ts_kubeconfig(t->ts));
        bench_log("test server at %s", ts_url(t->ts));
        return 0;
    case TARGET_ENVTEST:
        return envtest_open(t);
    case TARGET_CLUSTER:
        snprintf(t->label, sizeof(t->label), "cluster");
        bench_log("cluster of %s (shared: benchmarks 1, 2, 4 up to 100 elections, 5)",
                  t->kubeconfig);
        return 0;
    }
    return -1;
}

void srv_close(bench_target *t)
{
    if (t->kind == TARGET_ENVTEST && api_handle) {
        curl_easy_cleanup(api_handle);
        api_handle = NULL;
    }
    if (t->kind == TARGET_TESTSERVER && t->ts) {
        ts_stop(t->ts);
        t->ts = NULL;
    }
}

const char *srv_kubeconfig(const bench_ctx *ctx)
{
    return ctx->tgt->kubeconfig;
}

const char *srv_namespace(const bench_ctx *ctx)
{
    return ctx->tgt->ns[0] ? ctx->tgt->ns : "default";
}

long srv_api(bench_ctx *ctx, const char *method, const char *path, const char *json, char **body)
{
    bench_target *t = ctx->tgt;
    long status = 0;

    if (body)
        *body = NULL;
    switch (t->kind) {
    case TARGET_TESTSERVER:
        if (ts_request(t->ts, method, path,
                       json && !strcmp(method, "PATCH") ? "application/merge-patch+json" : NULL,
                       json, &status, body) < 0)
            return 0;
        return status;
    case TARGET_ENVTEST:
        return real_send(t, method, path, json, 1, body);
    case TARGET_CLUSTER:
        break;
    }
    return 0;
}

int srv_counts(const bench_ctx *ctx)
{
    return ctx->tgt->kind != TARGET_CLUSTER;
}

int srv_reset(bench_ctx *ctx)
{
    const bench_target *t = ctx->tgt;
    long status = 0;
    char *body = NULL, path[256];
    int rc = -1;

    switch (t->kind) {
    case TARGET_TESTSERVER:
        rc = ts_control(t->ts, "POST", "/testserver/v1/reset", "{}", &status, &body);
        rc = rc < 0 || status != 200 ? -1 : 0;
        break;
    case TARGET_ENVTEST:
        /* Ours alone: every Lease of the namespace, in one request. */
        snprintf(path, sizeof(path), "/apis/coordination.k8s.io/v1/namespaces/%s/leases", t->ns);
        status = real_request(t, "DELETE", path, NULL);
        rc = status == 200 ? 0 : -1;
        break;
    case TARGET_CLUSTER:
        /* Shared: nothing is deleted. Each benchmark has Leases of its own
         * names, and its candidates release them when they quit. */
        return 0;
    }
    free(body);
    if (rc < 0)
        bench_log("%s: reset failed (HTTP %ld)", t->label, status);
    return rc;
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
    if (ctx->tgt->kind == TARGET_ENVTEST)
        return envtest_stats(ctx->tgt, out);
    if (ctx->tgt->kind != TARGET_TESTSERVER)
        return -1;
    if (ts_control(ctx->tgt->ts, "GET", "/testserver/v1/stats", NULL, &status, &body) < 0 ||
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
