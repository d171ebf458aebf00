/*
 * server.c - libmicrohttpd glue: listening socket, TLS, authentication,
 * request life cycle (receive, hold for faults, answer), statistics.
 *
 * Mode: MHD_USE_EPOLL_INTERNAL_THREAD with a small thread pool and
 * MHD_ALLOW_SUSPEND_RESUME. Watches and held requests are suspended
 * connections, not blocked threads, so thousands of idle streams cost
 * neither threads nor CPU.
 */
#include "server.h"
#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <microhttpd.h>

/* The apiserver's limit for a request body. */
#define MAX_BODY (3 * 1024 * 1024)

enum phase {
    PH_RECV, /* headers (and body) arriving */
    PH_HOLD, /* decided; waiting out latency/hang faults */
    PH_RUN   /* answering */
};

/* One request, from its headers to MHD_OPTION_NOTIFY_COMPLETED. */
typedef struct ts_req {
    ts_sleeper sl;
    enum phase phase;
    ts_buf body;
    bool too_large;
    bool control;
    bool hang_counted;
    int64_t latency_until;
    ts_decision d;
    ts_client client; /* strings borrowed from MHD: valid until completion */
    char after;       /* main-thread command to send on completion */
} ts_req;

/* ---- request helpers ---------------------------------------------------- */

const char *ts_request_query(const ts_request *rq, const char *key)
{
    return MHD_lookup_connection_value(rq->conn, MHD_GET_ARGUMENT_KIND, key);
}

const char *ts_request_header(const ts_request *rq, const char *key)
{
    return MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, key);
}

static const char *bearer_token(struct MHD_Connection *conn)
{
    const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7))
        return NULL;
    h += 7;
    while (*h == ' ')
        h++;
    return h;
}

static bool token_equal(const char *a, const char *b)
{
    /* No early exit on the first difference. */
    size_t la = strlen(a), lb = strlen(b);
    unsigned char diff = (unsigned char)(la != lb);
    for (size_t i = 0; i < la && i < lb; i++)
        diff |= (unsigned char)(a[i] ^ b[i]);
    return diff == 0;
}

/*
 * A client certificate counts if GnuTLS verifies it against our CA (trust
 * list given to MHD) and it is meant for client authentication.
 */
static bool client_cert_ok(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    if (!ci || !ci->tls_session)
        return false;
    gnutls_session_t s = (gnutls_session_t)ci->tls_session;
    unsigned int n = 0, status = 0;
    if (!gnutls_certificate_get_peers(s, &n) || n == 0)
        return false;
    gnutls_typed_vdata_st purpose = {.type = GNUTLS_DT_KEY_PURPOSE_OID,
                                     .data = (unsigned char *)GNUTLS_KP_TLS_WWW_CLIENT};
    return gnutls_certificate_verify_peers(s, &purpose, 1, &status) == 0 && status == 0;
}

/* Lock held. */
static bool authenticated(ts_server *srv, struct MHD_Connection *conn, const char *token)
{
    if (token && srv->token && token_equal(token, srv->token))
        return true;
    return client_cert_ok(conn);
}

/* curl and browsers get indented JSON from a real apiserver, others compact. */
static bool pretty(struct MHD_Connection *conn)
{
    const char *p = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "pretty");
    if (p)
        return !strcmp(p, "true") || !strcmp(p, "1");
    const char *ua = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "User-Agent");
    return ua &&
           (!strncmp(ua, "curl", 4) || !strncmp(ua, "Wget", 4) || !strncmp(ua, "Mozilla/5.0", 11));
}

/* ---- statistics (lock held) -------------------------------------------- */

static void bump(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    if (v)
        json_integer_set(v, json_integer_value(v) + 1);
    else
        json_object_set_new(obj, key, json_integer(1));
}

static void count_request(ts_server *srv, const ts_req *r, const char *status)
{
    if (r->control) {
        srv->stats.control++;
        return;
    }
    srv->stats.requests++;
    bump(srv->stats.by_method, r->client.method);
    bump(srv->stats.by_status, status);
    json_t *v = json_object_get(srv->stats.by_verb, r->client.verb);
    if (!v) {
        v = json_object();
        json_object_set_new(srv->stats.by_verb, r->client.verb, v);
    }
    bump(v, status);
}

/* ---- answering ---------------------------------------------------------- */

static enum MHD_Result queue(ts_server *srv, struct MHD_Connection *conn, ts_req *r,
                             ts_response *rs)
{
    struct MHD_Response *resp = rs->stream;
    char audit[37], code[8];
    char *data = NULL;
    size_t len = 0;

    /* Serialise while the lock is held: bodies share values with the store. */
    if (rs->body) {
        bool indent = pretty(conn);
        data = json_dumps(rs->body, indent ? JSON_INDENT(2) : JSON_COMPACT);
        json_decref(rs->body);
        rs->body = NULL;
        if (data) {
            len = strlen(data);
            if (!indent) {
                /* Go's json.Encoder ends a compact body with a newline. */
                char *nl = realloc(data, len + 2);
                if (nl) {
                    data = nl;
                    data[len++] = '\n';
                    data[len] = '\0';
                }
            }
        } else {
            rs->code = 500;
        }
    }
    snprintf(code, sizeof(code), "%u", rs->code);
    count_request(srv, r, code);
    r->after = rs->after;
    if (srv->cfg.verbose)
        ts_log("%s %s -> %u", r->client.method, r->client.path, rs->code);
    pthread_mutex_unlock(&srv->mu);

    if (!resp) {
        if (data)
            resp = MHD_create_response_from_buffer(len, data, MHD_RESPMEM_MUST_FREE);
        else
            resp = MHD_create_response_from_buffer(rs->text ? strlen(rs->text) : 0,
                                                   (void *)(rs->text ? rs->text : ""),
                                                   MHD_RESPMEM_PERSISTENT);
        if (!resp) {
            free(data);
            return MHD_NO;
        }
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            rs->text ? "text/plain; charset=utf-8" : "application/json");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache, private");
    ts_uuid4(audit);
    MHD_add_response_header(resp, "Audit-Id", audit);
    if (rs->retry_after) {
        char ra[16];
        snprintf(ra, sizeof(ra), "%u", rs->retry_after);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, ra);
    }
    enum MHD_Result ok = MHD_queue_response(conn, rs->code, resp);
    MHD_destroy_response(resp);
    return ok;
}

/*
 * The body of a respond rule that is padded or trickled: produced as
 * libmicrohttpd asks for it. A trickle sends its first byte with the
 * headers, then one byte per interval, parked between bytes (no thread
 * waits); a client that gave up is noticed at the next byte.
 */
typedef struct ts_feed {
    ts_server *srv;
    ts_sleeper sl;
    ts_canned *c;
    int64_t next_ms; /* trickle: when the next byte is due */
} ts_feed;

static ssize_t feed_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    ts_feed *f = cls;
    ts_server *srv = f->srv;
    const ts_canned *c = f->c;
    size_t n = max;

    pthread_mutex_lock(&srv->mu);
    if (srv->draining) { /* restart or exit */
        pthread_mutex_unlock(&srv->mu);
        return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    if (pos >= c->size) {
        pthread_mutex_unlock(&srv->mu);
        return MHD_CONTENT_READER_END_OF_STREAM;
    }
    if (c->interval_ms > 0) {
        int64_t now = ts_mono_ms();
        if (pos > 0 && now < f->next_ms) {
            bool parked = ts_sched_suspend(&srv->sched, &f->sl, f->next_ms);
            pthread_mutex_unlock(&srv->mu);
            return parked ? 0 : MHD_CONTENT_READER_END_WITH_ERROR;
        }
        f->next_ms = now + c->interval_ms;
        n = 1;
    }
    pthread_mutex_unlock(&srv->mu);
    if (n > c->size - pos)
        n = (size_t)(c->size - pos);
    /* The body, then spaces: a JSON body stays JSON however big. */
    size_t from_body = pos < c->body_len ? c->body_len - (size_t)pos : 0;
    if (from_body > n)
        from_body = n;
    if (from_body)
        memcpy(buf, c->body + pos, from_body);
    memset(buf + from_body, ' ', n - from_body);
    return (ssize_t)n;
}

static void feed_free(void *cls)
{
    ts_feed *f = cls;
    pthread_mutex_lock(&f->srv->mu);
    /* A parked response cannot end (see ts_server_stop); be safe anyway. */
    if (f->sl.suspended)
        ts_sched_wake(&f->srv->sched, &f->sl);
    pthread_mutex_unlock(&f->srv->mu);
    ts_canned_unref(f->c);
    free(f);
}

/* Answers with a respond rule's canned response. Called with the lock. */
static enum MHD_Result respond(ts_server *srv, struct MHD_Connection *conn, ts_req *r)
{
    const ts_canned *c = r->d.canned;
    struct MHD_Response *resp;
    char audit[37], code[8];

    snprintf(code, sizeof(code), "%u", c->status);
    count_request(srv, r, code);
    if (srv->cfg.verbose)
        ts_log("%s %s -> %u (respond fault)", r->client.method, r->client.path, c->status);
    pthread_mutex_unlock(&srv->mu);

    if (c->interval_ms == 0 && c->size == c->body_len) {
        resp = MHD_create_response_from_buffer(c->body_len, c->body, MHD_RESPMEM_MUST_COPY);
    } else {
        ts_feed *f = calloc(1, sizeof(*f));
        if (!f)
            return MHD_NO;
        f->srv = srv;
        f->c = ts_canned_ref(r->d.canned);
        ts_sleeper_init(&f->sl, conn);
        resp = MHD_create_response_from_callback(c->size, c->interval_ms ? 1 : 64 * 1024,
                                                 feed_reader, f, feed_free);
        if (!resp) {
            feed_free(f);
            return MHD_NO;
        }
    }
    if (!resp)
        return MHD_NO;
    if (c->content_type)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, c->content_type);
    if (c->location)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_LOCATION, c->location);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache, private");
    ts_uuid4(audit);
    MHD_add_response_header(resp, "Audit-Id", audit);
    enum MHD_Result ok = MHD_queue_response(conn, c->status, resp);
    MHD_destroy_response(resp);
    return ok;
}

/* Closes the connection without an answer, with RST. Called with the lock. */
static enum MHD_Result reset(ts_server *srv, struct MHD_Connection *conn, ts_req *r)
{
    count_request(srv, r, "reset");
    pthread_mutex_unlock(&srv->mu);
    ts_conn_set_reset(conn);
    return MHD_NO;
}

static enum MHD_Result process(ts_server *srv, struct MHD_Connection *conn, ts_req *r,
                               const char *url, const char *method)
{
    ts_response rs = {0};

    pthread_mutex_lock(&srv->mu);
    int64_t now = ts_mono_ms();
    if (r->phase == PH_RECV) {
        bool watch = false;
        const char *w = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "watch");
        if (w)
            watch = !strcmp(w, "1") || !strcmp(w, "true") || !strcmp(w, "True");
        r->client.method = method;
        r->client.path = url;
        r->client.verb = ts_api_verb(method, url, watch);
        r->client.user_agent = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "User-Agent");
        r->client.token = bearer_token(conn);
        r->control = !strncmp(url, "/testserver/", 12);
        if (!r->control) {
            ts_faults_decide(&srv->faults, &r->client, now, &r->d);
            r->latency_until = now + r->d.latency_ms;
        }
        r->phase = PH_HOLD;
    }
    if (r->phase == PH_HOLD) {
        if (!r->control) {
            int64_t until = r->latency_until;
            int64_t hang = ts_faults_hang_until(&srv->faults, &r->client, now, !r->hang_counted);
            if (hang) {
                r->hang_counted = true;
                if (hang > until)
                    until = hang;
            }
            if (srv->draining)
                return reset(srv, conn, r);
            if (now < until && ts_sched_suspend(&srv->sched, &r->sl, until)) {
                pthread_mutex_unlock(&srv->mu);
                return MHD_YES; /* called again when resumed */
            }
            if (r->d.reset)
                return reset(srv, conn, r);
        }
        r->phase = PH_RUN;
    }

    if (!r->control && r->d.canned)
        return respond(srv, conn, r); /* unlocks */
    if (!r->control && r->d.status) {
        rs.code = r->d.status;
        rs.body = ts_status_for_code(r->d.status, r->d.retry_after);
        rs.retry_after = r->d.retry_after;
    } else if (!authenticated(srv, conn, r->client.token)) {
        rs.code = 401;
        rs.body = ts_status_failure(401, "Unauthorized", "Unauthorized", NULL);
    } else if (r->too_large) {
        rs.code = 413;
        rs.body =
            ts_status_failure(413, "RequestEntityTooLarge", "the request body is too large", NULL);
    } else {
        ts_request rq = {conn, method, url, r->body.data, r->body.len, &r->client};
        if (r->control)
            ts_control_handle(srv, &rq, &rs);
        else
            ts_api_handle(srv, &rq, &rs);
    }
    return queue(srv, conn, r, &rs); /* unlocks */
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **req_cls)
{
    ts_server *srv = cls;
    ts_req *r = *req_cls;
    (void)version;

    if (!r) {
        /* First call: headers only. */
        if (!(r = calloc(1, sizeof(*r))))
            return MHD_NO;
        ts_sleeper_init(&r->sl, conn);
        *req_cls = r;
        return MHD_YES;
    }
    if (*upload_data_size) {
        if (r->body.len + *upload_data_size > MAX_BODY)
            r->too_large = true;
        else if (ts_buf_append(&r->body, upload_data, *upload_data_size) < 0)
            return MHD_NO;
        *upload_data_size = 0;
        return MHD_YES;
    }
    return process(srv, conn, r, url, method);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                         enum MHD_RequestTerminationCode toe)
{
    ts_server *srv = cls;
    ts_req *r = *req_cls;
    (void)conn;
    if (!r)
        return;
    if (r->after && toe == MHD_REQUEST_TERMINATED_COMPLETED_OK)
        ts_server_notify_main(srv, r->after);
    if (r->sl.suspended) {
        /* Cannot happen (suspended connections do not complete); be safe. */
        pthread_mutex_lock(&srv->mu);
        ts_sched_wake(&srv->sched, &r->sl);
        pthread_mutex_unlock(&srv->mu);
    }
    ts_canned_unref(r->d.canned);
    ts_buf_free(&r->body);
    free(r);
    *req_cls = NULL;
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    ts_vlog(fmt, ap);
}

/* ---- life cycle ------------------------------------------------------------ */

/* The timer thread's round (lock held): expire rules, reap dead streams. */
static int64_t on_tick(void *ctx, int64_t now)
{
    ts_server *srv = ctx;
    ts_faults_expire(&srv->faults, now);
    int64_t next = ts_faults_next_expiry(&srv->faults);
    if (srv->nwatches) {
        if (now >= srv->next_reap) {
            ts_watch_reap(srv);
            srv->next_reap = now + 1000;
        }
        if (srv->next_reap < next)
            next = srv->next_reap;
    }
    return next;
}

int ts_server_init(ts_server *srv)
{
    srv->listen_fd = -1;
    srv->wake_pipe[0] = srv->wake_pipe[1] = -1;
    srv->started_ms = ts_mono_ms();
    if (pthread_mutex_init(&srv->mu, NULL) != 0)
        return -1;
    if (ts_store_init(&srv->store, srv->cfg.history) < 0)
        return -1;
    srv->store.on_event = ts_watch_on_event;
    srv->store.on_event_ctx = srv;
    ts_faults_init(&srv->faults, srv->cfg.seed);
    if (ts_sched_init(&srv->sched, &srv->mu, on_tick, srv) < 0)
        return -1;
    srv->stats.by_method = json_object();
    srv->stats.by_verb = json_object();
    srv->stats.by_status = json_object();
    if (!srv->stats.by_method || !srv->stats.by_verb || !srv->stats.by_status)
        return -1;
    if (pipe(srv->wake_pipe) < 0)
        return -1;
    for (int i = 0; i < 2; i++)
        fcntl(srv->wake_pipe[i], F_SETFD, FD_CLOEXEC);
    /* The signal handler must never block on a full pipe. */
    fcntl(srv->wake_pipe[1], F_SETFL, fcntl(srv->wake_pipe[1], F_GETFL) | O_NONBLOCK);
    return 0;
}

void ts_server_notify_main(ts_server *srv, char cmd)
{
    ssize_t rc;
    do
        rc = write(srv->wake_pipe[1], &cmd, 1);
    while (rc < 0 && errno == EINTR);
}

static int bind_listener(ts_server *srv, unsigned port)
{
    bool v6 = strchr(srv->cfg.address, ':') != NULL;
    struct sockaddr_storage ss;
    socklen_t sl;
    int one = 1;

    memset(&ss, 0, sizeof(ss));
    if (v6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons((uint16_t)port);
        if (inet_pton(AF_INET6, srv->cfg.address, &a->sin6_addr) != 1)
            return -1;
        sl = sizeof(*a);
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_port = htons((uint16_t)port);
        if (inet_pton(AF_INET, srv->cfg.address, &a->sin_addr) != 1)
            return -1;
        sl = sizeof(*a);
    }
    int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    /* Restarts rebind the same port while old connections sit in TIME_WAIT. */
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (v6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&ss, sl) < 0 || listen(fd, 1024) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    sl = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
        close(fd);
        return -1;
    }
    srv->port =
        ntohs(v6 ? ((struct sockaddr_in6 *)&ss)->sin6_port : ((struct sockaddr_in *)&ss)->sin_port);
    return fd;
}

/* As many connections as file descriptors allow, leaving some for us. */
static unsigned connection_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max > 65536 ? 65536 : rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur < 256)
        return 128;
    return rl.rlim_cur > 65536 ? 65000 : (unsigned)rl.rlim_cur - 128;
}

int ts_server_start(ts_server *srv)
{
    unsigned port = srv->port ? srv->port : srv->cfg.port;
    int fd = -1;
    /* A restart can race the kernel releasing the port: retry briefly. */
    for (int tries = 0; tries < 50; tries++) {
        if ((fd = bind_listener(srv, port)) >= 0 || errno != EADDRINUSE || !srv->port)
            break;
        struct timespec ts = {0, 100 * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (fd < 0) {
        ts_log("cannot listen on %s port %u: %s", srv->cfg.address, port, strerror(errno));
        return -1;
    }
    if (!srv->server_url) {
        /*
         * First start: the port is known now. Write the kubeconfigs before
         * any handler thread exists (token rotation rewrites them later).
         */
        ts_buf url = {0};
        bool v6 = strchr(srv->cfg.address, ':') != NULL;
        if (ts_buf_printf(&url, "https://%s%s%s:%u", v6 ? "[" : "", srv->cfg.address, v6 ? "]" : "",
                          srv->port) < 0 ||
            ts_write_kubeconfigs(&srv->pki, srv->cfg.dir, url.data, srv->token) < 0) {
            ts_buf_free(&url);
            close(fd);
            return -1;
        }
        srv->server_url = url.data;
    }
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_TLS | MHD_ALLOW_SUSPEND_RESUME;
    if (!ts_log_is_quiet())
        flags |= MHD_USE_ERROR_LOG;
    if (strchr(srv->cfg.address, ':'))
        flags |= MHD_USE_IPv6;
    srv->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, srv,
        /* The logger first, or MHD logs the options parsed before it itself. */
        MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, srv, MHD_OPTION_LISTEN_SOCKET, fd,
        MHD_OPTION_HTTPS_MEM_KEY, srv->pki.server_key, MHD_OPTION_HTTPS_MEM_CERT,
        srv->pki.server_crt, MHD_OPTION_HTTPS_MEM_TRUST, srv->pki.ca_crt,
        MHD_OPTION_THREAD_POOL_SIZE, srv->cfg.threads, MHD_OPTION_CONNECTION_LIMIT,
        connection_limit(), MHD_OPTION_CONNECTION_TIMEOUT, 600u, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        (size_t)(128 * 1024), MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv, MHD_OPTION_END);
    if (!srv->daemon) {
        ts_log("cannot start the HTTPS daemon");
        close(fd);
        return -1;
    }
    srv->listen_fd = fd;
    return 0;
}

void ts_server_stop(ts_server *srv)
{
    if (!srv->daemon)
        return;
    /*
     * MHD_stop_daemon must not find suspended connections: refuse new
     * suspensions, then resume every parked one. Streams see `draining`
     * and end; held requests are dropped.
     */
    pthread_mutex_lock(&srv->mu);
    srv->draining = true;
    srv->sched.refuse = true;
    ts_sched_wake_all(&srv->sched);
    pthread_mutex_unlock(&srv->mu);

    MHD_quiesce_daemon(srv->daemon);
    MHD_stop_daemon(srv->daemon);
    srv->daemon = NULL;
    if (srv->listen_fd >= 0)
        close(srv->listen_fd);
    srv->listen_fd = -1;

    pthread_mutex_lock(&srv->mu);
    srv->draining = false;
    srv->sched.refuse = false;
    pthread_mutex_unlock(&srv->mu);
}

void ts_server_free(ts_server *srv)
{
    ts_server_stop(srv);
    ts_sched_stop(&srv->sched);
    ts_sched_free(&srv->sched);
    ts_store_free(&srv->store);
    ts_faults_free(&srv->faults);
    json_decref(srv->stats.by_method);
    json_decref(srv->stats.by_verb);
    json_decref(srv->stats.by_status);
    ts_pki_free(&srv->pki);
    free(srv->token);
    free(srv->server_url);
    for (int i = 0; i < 2; i++)
        if (srv->wake_pipe[i] >= 0)
            close(srv->wake_pipe[i]);
    pthread_mutex_destroy(&srv->mu);
}
