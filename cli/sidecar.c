/* The HTTP sidecar of `elect --http`; see sidecar.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/types.h>
#include <unistd.h>

#include <microhttpd.h>

#include "sidecar.h"

#define CONNECTION_LIMIT     64
#define CONNECTION_TIMEOUT_S 10

struct cli_sidecar {
    struct MHD_Daemon *daemon;
    cli_view *view;
};

/* ---- the view ------------------------------------------------------------ */

void cli_view_init(cli_view *v)
{
    memset(v, 0, sizeof(*v));
    pthread_mutex_init(&v->mu, NULL);
    v->done.version = K8SLEASE_ELECTOR_STATS_VERSION;
    v->epoch = -1;
    v->backend = cli_backend_name(K8SLEASE_BACKEND_K8S);
}

void cli_view_fini(cli_view *v)
{
    pthread_mutex_destroy(&v->mu);
}

static void add_stats(k8slease_elector_stats *sum, const k8slease_elector_stats *s)
{
    sum->requests += s->requests;
    sum->terms += s->terms;
    sum->renewals += s->renewals;
    sum->slow_path += s->slow_path;
    sum->conflicts += s->conflicts;
    sum->http_4xx += s->http_4xx;
    sum->http_5xx += s->http_5xx;
    sum->transport_errors += s->transport_errors;
    for (int i = 0; i < K8SLEASE_LATENCY_BUCKETS; i++)
        sum->renew_latency_bucket[i] += s->renew_latency_bucket[i];
    sum->renew_latency_count += s->renew_latency_count;
    sum->renew_latency_sum_s += s->renew_latency_sum_s;
    if (s->last_renew_ns > sum->last_renew_ns)
        sum->last_renew_ns = s->last_renew_ns;
}

void cli_view_set_elector(cli_view *v, k8slease_elector *e)
{
    pthread_mutex_lock(&v->mu);
    v->elector = e;
    pthread_mutex_unlock(&v->mu);
}

void cli_view_retire(cli_view *v)
{
    k8slease_elector_stats st = {.version = K8SLEASE_ELECTOR_STATS_VERSION};

    pthread_mutex_lock(&v->mu);
    if (v->elector && k8slease_elector_stats_get(v->elector, &st) == 0)
        add_stats(&v->done, &st);
    v->elector = NULL;
    v->leading = 0;
    pthread_mutex_unlock(&v->mu);
}

void cli_view_set_leading(cli_view *v, int leading)
{
    pthread_mutex_lock(&v->mu);
    v->leading = leading;
    pthread_mutex_unlock(&v->mu);
}

void cli_view_set_holder(cli_view *v, const char *identity, int64_t epoch)
{
    pthread_mutex_lock(&v->mu);
    snprintf(v->holder, sizeof(v->holder), "%s", identity);
    v->epoch = epoch;
    pthread_mutex_unlock(&v->mu);
}

/* A consistent copy of the view, taken once per request. */
typedef struct snapshot {
    int running;         /* an elector: a candidate now */
    int candidate_known; /* its stats' */
    int leading, is_leader;
    int64_t deadline_ns, epoch;
    char holder[CLI_IDENTITY_MAX];
    k8slease_elector_stats st; /* every elector's counters so far */
} snapshot;

static void snapshot_take(cli_view *v, snapshot *s)
{
    k8slease_elector_stats cur = {.version = K8SLEASE_ELECTOR_STATS_VERSION};

    pthread_mutex_lock(&v->mu);
    s->leading = v->leading;
    s->is_leader = k8slease_elector_is_leader(v->elector);
    s->deadline_ns = k8slease_elector_leader_deadline(v->elector);
    s->epoch = v->epoch;
    memcpy(s->holder, v->holder, sizeof(s->holder));
    s->st = v->done;
    s->running = v->elector != NULL;
    s->candidate_known = 0;
    if (v->elector && k8slease_elector_stats_get(v->elector, &cur) == 0) {
        add_stats(&s->st, &cur);
        s->candidate_known = cur.candidate_known;
    }
    pthread_mutex_unlock(&v->mu);
}

/* ---- endpoints ------------------------------------------------------------ */

/* As client-go's HealthzAdaptor: unhealthy only while leader and the last
 * successful renew is older than lease_duration + the request timeout
 * (max(1 s, renew_deadline / 2)). Our is_leader turns false renew_deadline
 * after that renew, so on its own it would never let this fire; the term
 * as the callbacks report it ("leading") is what a stuck election keeps
 * true, so either counts. */
static int unhealthy(const cli_view *v, const snapshot *s, FILE *f)
{
    int64_t timeout_ms = v->renew_deadline_ms / 2 > 1000 ? v->renew_deadline_ms / 2 : 1000;
    int64_t limit_ns = (v->lease_duration_ms + timeout_ms) * 1000000;

    if ((s->leading || s->is_leader) && s->st.last_renew_ns &&
        cli_now_ns() - s->st.last_renew_ns > limit_ns) {
        fprintf(f, "internal server error: failed election to renew leadership on lease %s\n",
                v->lease);
        return MHD_HTTP_INTERNAL_SERVER_ERROR;
    }
    return 0;
}

static int healthz(const cli_view *v, const snapshot *s, FILE *f)
{
    int status = unhealthy(v, s, f);

    if (status)
        return status;
    fputs("ok", f);
    return MHD_HTTP_OK;
}

/* Ready for a rolling update to go on: with handoff, a leader that hands
 * over now would see this candidate (a Pod ready before that would let
 * the old leader choose an old Pod, and the leader change twice). A
 * candidate whose object cannot be written (no permission: logged) is as
 * ready as it will ever be. */
static int readyz(const cli_view *v, const snapshot *s, FILE *f)
{
    int status = unhealthy(v, s, f);

    if (status)
        return status;
    if (v->handoff && !s->running) {
        fprintf(f, "not ready: between terms, not a candidate of lease %s now\n", v->lease);
        return MHD_HTTP_SERVICE_UNAVAILABLE;
    }
    if (v->handoff && s->candidate_known == 0) {
        fprintf(f, "not ready: this candidate of lease %s is not known for a handoff yet\n",
                v->lease);
        return MHD_HTTP_SERVICE_UNAVAILABLE;
    }
    fputs("ok", f);
    return MHD_HTTP_OK;
}

static int leader(const cli_view *v, const snapshot *s, FILE *f)
{
    int64_t left = s->is_leader ? (s->deadline_ns - cli_now_ns()) / 1000000 : 0;

    fputs("{\"lease\":", f);
    cli_json_string(f, v->lease);
    fputs(",\"backend\":", f);
    cli_json_string(f, v->backend);
    fputs(",\"identity\":", f);
    cli_json_string(f, v->identity);
    fputs(",\"holder\":", f);
    cli_json_string(f, s->holder);
    fprintf(f,
            ",\"epoch\":%lld,\"is_leader\":%s,\"renew_deadline_ms_left\":%lld,"
            "\"coordinated\":%s}\n",
            (long long)s->epoch, s->is_leader ? "true" : "false", (long long)(left > 0 ? left : 0),
            v->coordinated ? "true" : "false");
    return MHD_HTTP_OK;
}

static int legacy(const cli_view *v, const snapshot *s, FILE *f)
{
    (void)v;
    fputs("{\"name\":", f);
    cli_json_string(f, s->holder);
    fputs("}\n", f);
    return MHD_HTTP_OK;
}

static void metric_head(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value of the text format: backslash, double quote and line feed
 * escaped (etcd election names may hold any of them). */
static void label_value(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\' || *s == '"')
            fprintf(f, "\\%c", *s);
        else if (*s == '\n')
            fputs("\\n", f);
        else
            putc(*s, f);
    }
}

/* Start a sample: NAME{name="<election>" (the caller closes the braces). */
static void sample(FILE *f, const cli_view *v, const char *metric)
{
    fprintf(f, "%s{name=\"", metric);
    label_value(f, v->name);
    putc('"', f);
}

static int metrics(const cli_view *v, const snapshot *s, FILE *f)
{
    static const int64_t bounds_ms[K8SLEASE_LATENCY_BUCKETS] = K8SLEASE_LATENCY_BOUNDS_MS;
    static const char *const codes[] = {"409", "4xx", "5xx", "transport"};
    const k8slease_elector_stats *st = &s->st;
    const uint64_t errors[] = {st->conflicts, st->http_4xx, st->http_5xx, st->transport_errors};
    uint64_t cumulative = 0;

    metric_head(f, "leader_election_master_status", "gauge",
                "Gauge of if the reporting system is master of the relevant lease, 0 indicates "
                "backup, 1 indicates master. 'name' is the string used to identify the lease. "
                "Please make sure to group by name.");
    sample(f, v, "leader_election_master_status");
    fprintf(f, "} %d\n", s->is_leader);
    metric_head(f, "leader_election_slowpath_total", "counter",
                "Total number of slow path exercised in renewing leader leases. 'name' is the "
                "string used to identify the lease. Please make sure to group by name.");
    sample(f, v, "leader_election_slowpath_total");
    fprintf(f, "} %llu\n", (unsigned long long)st->slow_path);

    /* The backend is a constant of the process: an info metric, so that the
     * series above keep client-go's labels. */
    metric_head(f, "k8slease_election_info", "gauge",
                "Always 1: the election of this process and its backend (k8s: a Kubernetes "
                "Lease, etcd: an etcd election).");
    sample(f, v, "k8slease_election_info");
    fprintf(f, ",backend=\"%s\"} 1\n", v->backend);

    metric_head(f, "k8slease_renew_duration_seconds", "histogram",
                "Duration of the successful renewals of the lease while leader.");
    for (int i = 0; i < K8SLEASE_LATENCY_BUCKETS; i++) {
        cumulative += st->renew_latency_bucket[i];
        sample(f, v, "k8slease_renew_duration_seconds_bucket");
        if (bounds_ms[i] < 0)
            fprintf(f, ",le=\"+Inf\"} %llu\n", (unsigned long long)cumulative);
        else
            fprintf(f, ",le=\"%g\"} %llu\n", (double)bounds_ms[i] / 1000,
                    (unsigned long long)cumulative);
    }
    sample(f, v, "k8slease_renew_duration_seconds_sum");
    fprintf(f, "} %.9g\n", st->renew_latency_sum_s);
    sample(f, v, "k8slease_renew_duration_seconds_count");
    fprintf(f, "} %llu\n", (unsigned long long)cumulative);

    metric_head(f, "k8slease_leader_transitions_total", "counter",
                "Terms this candidate won: times it became leader of the lease.");
    sample(f, v, "k8slease_leader_transitions_total");
    fprintf(f, "} %llu\n", (unsigned long long)st->terms);
    metric_head(f, "k8slease_api_errors_total", "counter",
                "API requests of the election that failed: HTTP 409, other 4xx, 5xx, or "
                "transport (timeout, TLS, connection).");
    for (size_t i = 0; i < CLI_ARRAY_LEN(codes); i++) {
        sample(f, v, "k8slease_api_errors_total");
        fprintf(f, ",code=\"%s\"} %llu\n", codes[i], (unsigned long long)errors[i]);
    }
    metric_head(f, "k8slease_requests_total", "counter",
                "API requests of the election completed, with any outcome.");
    sample(f, v, "k8slease_requests_total");
    fprintf(f, "} %llu\n", (unsigned long long)st->requests);
    return MHD_HTTP_OK;
}

static const struct route {
    const char *path;
    const char *content_type;
    int (*render)(const cli_view *v, const snapshot *s, FILE *f);
} routes[] = {
    {"/healthz", "text/plain; charset=utf-8", healthz},
    {"/readyz", "text/plain; charset=utf-8", readyz},
    {"/leader", "application/json", leader},
    {"/", "application/json", legacy},
    {"/metrics", "text/plain; version=0.0.4; charset=utf-8", metrics},
};

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned int status,
                             const char *content_type, char *body, size_t len, int allocated)
{
    struct MHD_Response *r;
    enum MHD_Result ret;

    r = MHD_create_response_from_buffer(len, body,
                                        allocated ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!r) {
        if (allocated)
            free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result reply_static(struct MHD_Connection *conn, unsigned int status,
                                    const char *text)
{
    return reply(conn, status, "text/plain; charset=utf-8", (char *)text, strlen(text), 0);
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload_data,
                              size_t *upload_data_size, void **req_cls)
{
    static int seen;
    cli_sidecar *sc = cls;
    const struct route *rt = NULL;
    snapshot snap;
    char *body = NULL;
    size_t len = 0;
    FILE *f;
    int status;

    (void)version;
    (void)upload_data;
    /* First call: headers only. Bodies (nobody should send one) are
     * skipped; the answer goes out once the request is complete. */
    if (!*req_cls) {
        *req_cls = &seen;
        return MHD_YES;
    }
    if (*upload_data_size) {
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
        return reply_static(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed\n");
    for (size_t i = 0; i < CLI_ARRAY_LEN(routes) && !rt; i++)
        if (strcmp(url, routes[i].path) == 0)
            rt = &routes[i];
    if (!rt)
        return reply_static(conn, MHD_HTTP_NOT_FOUND,
                            "not found: try /healthz, /readyz, /leader, / or "
                            "/metrics\n");
    snapshot_take(sc->view, &snap);
    if (!(f = open_memstream(&body, &len)))
        return reply_static(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
    status = rt->render(sc->view, &snap, f);
    if (fclose(f) != 0 || !body) {
        free(body);
        return reply_static(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
    }
    return reply(conn, (unsigned int)status, rt->content_type, body, len, 1);
}

/* ---- the server ----------------------------------------------------------- */

int cli_sidecar_parse_addr(const char *s, struct sockaddr_storage *addr, socklen_t *len)
{
    char host[64];
    const char *colon, *port_s;
    char *end;
    long port;

    memset(addr, 0, sizeof(*addr));
    if (s[0] == '[') {
        const char *close = strchr(s, ']');

        if (!close || close[1] != ':' || (size_t)(close - s - 1) >= sizeof(host))
            return -1;
        memcpy(host, s + 1, (size_t)(close - s - 1));
        host[close - s - 1] = '\0';
        port_s = close + 2;
    } else {
        if (!(colon = strrchr(s, ':')) || (size_t)(colon - s) >= sizeof(host))
            return -1;
        memcpy(host, s, (size_t)(colon - s));
        host[colon - s] = '\0';
        port_s = colon + 1;
    }
    if (port_s[0] < '0' || port_s[0] > '9')
        return -1;
    errno = 0;
    port = strtol(port_s, &end, 10);
    if (*end || errno || port < 0 || port > 65535)
        return -1;
    if (s[0] == '[') {
        struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)addr;

        if (inet_pton(AF_INET6, host, &a6->sin6_addr) != 1)
            return -1;
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
        *len = sizeof(*a6);
    } else {
        struct sockaddr_in *a4 = (struct sockaddr_in *)addr;

        if (inet_pton(AF_INET, host, &a4->sin_addr) != 1)
            return -1;
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
        *len = sizeof(*a4);
    }
    return 0;
}

static void format_addr(char *buf, size_t size, const struct sockaddr_storage *addr)
{
    char host[INET6_ADDRSTRLEN];

    if (addr->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)addr;

        inet_ntop(AF_INET6, &a6->sin6_addr, host, sizeof(host));
        snprintf(buf, size, "[%s]:%u", host, (unsigned)ntohs(a6->sin6_port));
    } else {
        const struct sockaddr_in *a4 = (const struct sockaddr_in *)addr;

        inet_ntop(AF_INET, &a4->sin_addr, host, sizeof(host));
        snprintf(buf, size, "%s:%u", host, (unsigned)ntohs(a4->sin_port));
    }
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    char msg[512];
    size_t n;

    (void)cls;
    vsnprintf(msg, sizeof(msg), fmt, ap);
    n = strlen(msg);
    while (n > 0 && msg[n - 1] == '\n')
        msg[--n] = '\0';
    cli_warn("http: %s", msg);
}

int cli_sidecar_start(cli_sidecar **out, const struct sockaddr_storage *addr, socklen_t len,
                      cli_view *view)
{
    struct sockaddr_storage bound;
    socklen_t bound_len = sizeof(bound);
    cli_sidecar *sc = NULL;
    char where[80];
    int fd, one = 1;

    *out = NULL;
    format_addr(where, sizeof(where), addr);
    /* Our own socket: bind errors get a precise message, and it is
     * close-on-exec, so CMD does not inherit it. */
    fd = socket(addr->ss_family, SOCK_STREAM, 0);
    if (fd < 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(fd, (const struct sockaddr *)addr, len) != 0 || listen(fd, 64) != 0 ||
        getsockname(fd, (struct sockaddr *)&bound, &bound_len) != 0) {
        cli_error("--http %s: cannot listen: %s", where, strerror(errno));
        goto fail;
    }
    if (!(sc = calloc(1, sizeof(*sc)))) {
        cli_error("out of memory");
        goto fail;
    }
    sc->view = view;
    sc->daemon =
        MHD_start_daemon(MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG |
                             (addr->ss_family == AF_INET6 ? MHD_USE_IPv6 : 0),
                         0, NULL, NULL, answer, sc, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
                         MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd, MHD_OPTION_CONNECTION_LIMIT,
                         (unsigned int)CONNECTION_LIMIT, MHD_OPTION_CONNECTION_TIMEOUT,
                         (unsigned int)CONNECTION_TIMEOUT_S, MHD_OPTION_END);
    if (!sc->daemon) {
        cli_error("--http %s: cannot start the HTTP server", where);
        goto fail;
    }
    format_addr(where, sizeof(where), &bound);
    cli_notice("http: listening on %s", where);
    *out = sc;
    return 0;
fail:
    free(sc);
    if (fd >= 0)
        close(fd);
    return -1;
}

void cli_sidecar_stop(cli_sidecar *s)
{
    if (!s)
        return;
    /* Also closes the listening socket. */
    MHD_stop_daemon(s->daemon);
    free(s);
}
