/*
 * server.c - the request life cycle shared by HTTP/1.1 and HTTP/2
 * (ts_exchange: authentication, faults, holding, answering, statistics),
 * libmicrohttpd glue for HTTP/1.1, and starting and stopping the server.
 *
 * The transport (transport.c) owns the listening socket and TLS; it serves
 * h2 connections itself (h2.c) and hands decrypted HTTP/1.1 connections to
 * libmicrohttpd, which runs MHD_USE_EPOLL_INTERNAL_THREAD with a small
 * thread pool, MHD_ALLOW_SUSPEND_RESUME and no listening socket of its own.
 * Watches and held requests are suspended connections or deferred streams,
 * not blocked threads, so thousands of idle streams cost neither threads
 * nor CPU.
 */
#include "server.h"
#include "transport.h"
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

#include <microhttpd.h>

/* The apiserver's limit for a request body. */
#define MAX_BODY (3 * 1024 * 1024)

enum phase {
    PH_RECV, /* headers (and body) arriving */
    PH_HOLD, /* decided; waiting out latency/hang faults */
    PH_RUN   /* answering */
};

/* ---- request helpers ---------------------------------------------------- */

const char *ts_request_query(const ts_request *rq, const char *key)
{
    return rq->conn->ops->query(rq->conn, key);
}

const char *ts_request_header(const ts_request *rq, const char *key)
{
    return rq->conn->ops->header(rq->conn, key);
}

static const char *bearer_token(ts_conn *c)
{
    const char *h = c->ops->header(c, "Authorization");
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
 * Lock held. A client certificate counts if GnuTLS verified it against our
 * CA and it is meant for client authentication (checked by the transport
 * once per connection).
 */
static bool authenticated(ts_server *srv, ts_conn *c, const char *token)
{
    if (token && srv->token && token_equal(token, srv->token))
        return true;
    return c->cert_ok;
}

/* curl and browsers get indented JSON from a real apiserver, others compact. */
static bool pretty(ts_conn *c)
{
    const char *p = c->ops->query(c, "pretty");
    if (p)
        return !strcmp(p, "true") || !strcmp(p, "1");
    const char *ua = c->ops->header(c, "User-Agent");
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

static void count_request(ts_server *srv, const ts_exchange *x, const char *status)
{
    if (x->control) {
        srv->stats.control++;
        return;
    }
    srv->stats.requests++;
    bump(srv->stats.by_method, x->client.method);
    bump(srv->stats.by_status, status);
    json_t *v = json_object_get(srv->stats.by_verb, x->client.verb);
    if (!v) {
        v = json_object();
        json_object_set_new(srv->stats.by_verb, x->client.verb, v);
    }
    bump(v, status);
    srv->stats.by_proto[strcmp(x->conn->proto, "h2") ? 1 : 0]++;
}

json_t *ts_server_connections_json(ts_server *srv)
{
    json_t *j = ts_transport_stats_json(srv->transport);
    json_t *h2 = json_object_get(j, "h2"), *h1 = json_object_get(j, "http1");
    if (h2)
        json_object_set_new(h2, "requests", json_integer((json_int_t)srv->stats.by_proto[0]));
    if (h1)
        json_object_set_new(h1, "requests", json_integer((json_int_t)srv->stats.by_proto[1]));
    json_object_set_new(j, "alpn",
                        srv->cfg.no_http2 ? json_pack("[s]", "http/1.1")
                                          : json_pack("[s,s]", "h2", "http/1.1"));
    return j;
}

/* ---- stalls (lock held unless said) ------------------------------------- */

typedef struct stall_ctx {
    ts_faults *faults;
    int64_t now;
} stall_ctx;

static bool stall_alive(void *ctx, uint64_t rule)
{
    stall_ctx *sc = ctx;
    return ts_faults_stall_until(sc->faults, rule, sc->now) != 0;
}

void ts_server_stalls_sync(ts_server *srv, int64_t now)
{
    stall_ctx sc = {&srv->faults, now};
    ts_faults_expire(&srv->faults, now);
    ts_transport_stall_sync(srv->transport, stall_alive, &sc);
}

void ts_server_h1_gone(ts_server *srv, int mhd_fd)
{
    pthread_mutex_lock(&srv->mu);
    ts_sched_wake_fd(&srv->sched, mhd_fd);
    pthread_mutex_unlock(&srv->mu);
}

/*
 * The hold of a request that hit a stall rule: the first time, stall its
 * connection; then wait for the rule's end. True while it holds, with *rc
 * TS_X_WAIT (parked) or TS_X_DROP (the client left meanwhile: the request
 * is never run, as a server would find its connection closed); false once
 * the stall is over.
 */
static bool stall_hold(ts_server *srv, ts_exchange *x, int64_t now, int *rc)
{
    ts_conn *c = x->conn;
    int64_t until = ts_faults_stall_until(&srv->faults, x->d.stall, now);
    *rc = TS_X_DROP;
    if (!x->stalled && until) {
        x->stalled = true;
        if (c->ops->stall(c, x->d.stall) < 0)
            return true;
    }
    if (x->stalled && c->ops->gone(c))
        return true;
    if (until) {
        if (ts_sched_suspend(&srv->sched, &x->sl, until))
            *rc = TS_X_WAIT;
        return true;
    }
    /* The rule is over: the connection resumes (if nobody saw to it yet), and so do we. */
    x->d.stall = 0;
    ts_server_stalls_sync(srv, now);
    return false;
}

/* ---- answering ---------------------------------------------------------- */

void ts_answer_free(ts_answer *a)
{
    free(a->data);
    a->data = NULL;
    if (a->body.free)
        a->body.free(a->body.ctx);
    memset(&a->body, 0, sizeof(a->body));
}

/* Lock held on entry, released on return. */
static int answer(ts_server *srv, ts_exchange *x, ts_response *rs, ts_answer *a)
{
    char code[8];
    /* Serialise while the lock is held: bodies share values with the store. */
    if (rs->body) {
        bool indent = pretty(x->conn);
        a->data = json_dumps(rs->body, indent ? JSON_INDENT(2) : JSON_COMPACT);
        json_decref(rs->body);
        rs->body = NULL;
        if (a->data) {
            a->len = strlen(a->data);
            if (!indent) {
                /* Go's json.Encoder ends a compact body with a newline. */
                char *nl = realloc(a->data, a->len + 2);
                if (nl) {
                    a->data = nl;
                    a->data[a->len++] = '\n';
                    a->data[a->len] = '\0';
                }
            }
        } else {
            rs->code = 500;
        }
    } else if (rs->stream) {
        a->body = ts_watch_body(rs->stream);
    } else {
        a->data = strdup(rs->text ? rs->text : "");
        a->len = a->data ? strlen(a->data) : 0;
    }
    snprintf(code, sizeof(code), "%u", rs->code);
    count_request(srv, x, code);
    x->after = rs->after;
    if (srv->cfg.verbose)
        ts_log("%s %s %s -> %u", x->conn->proto, x->client.method, x->client.path, rs->code);
    pthread_mutex_unlock(&srv->mu);

    a->code = rs->code;
    a->content_type = rs->text ? "text/plain; charset=utf-8" : "application/json";
    a->retry_after = rs->retry_after;
    ts_uuid4(a->audit_id);
    if (!a->data && !a->body.read) {
        ts_answer_free(a);
        return -1;
    }
    return TS_X_ANSWER;
}

/*
 * The body of a respond rule that is padded or trickled: produced as the
 * protocol asks for it. A trickle sends its first byte with the headers,
 * then one byte per interval, parked between bytes (no thread waits); a
 * client that gave up is noticed at the next byte.
 */
typedef struct ts_feed {
    ts_server *srv;
    ts_sleeper sl;
    ts_canned *c;
    uint64_t pos;
    int64_t next_ms; /* trickle: when the next byte is due */
} ts_feed;

static long feed_reader(void *cls, char *buf, size_t max)
{
    ts_feed *f = cls;
    ts_server *srv = f->srv;
    const ts_canned *c = f->c;
    uint64_t pos = f->pos;
    size_t n = max;

    pthread_mutex_lock(&srv->mu);
    if (srv->draining) { /* restart or exit */
        pthread_mutex_unlock(&srv->mu);
        return TS_BODY_DROP;
    }
    if (pos >= c->size) {
        pthread_mutex_unlock(&srv->mu);
        return TS_BODY_END;
    }
    if (c->interval_ms > 0) {
        int64_t now = ts_mono_ms();
        if (pos > 0 && now < f->next_ms) {
            bool parked = ts_sched_suspend(&srv->sched, &f->sl, f->next_ms);
            pthread_mutex_unlock(&srv->mu);
            return parked ? 0 : TS_BODY_ERROR;
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
    f->pos += n;
    return (long)n;
}

static void feed_free(void *cls)
{
    ts_feed *f = cls;
    pthread_mutex_lock(&f->srv->mu);
    /* An HTTP/2 stream can end while parked (the client reset it). */
    ts_sched_cancel(&f->srv->sched, &f->sl);
    pthread_mutex_unlock(&f->srv->mu);
    ts_canned_unref(f->c);
    free(f);
}

/* Answers with a respond rule's canned response. Lock held, released. */
static int respond(ts_server *srv, ts_exchange *x, ts_answer *a)
{
    const ts_canned *c = x->d.canned;
    char code[8];

    snprintf(code, sizeof(code), "%u", c->status);
    count_request(srv, x, code);
    if (srv->cfg.verbose)
        ts_log("%s %s %s -> %u (respond fault)", x->conn->proto, x->client.method, x->client.path,
               c->status);
    pthread_mutex_unlock(&srv->mu);

    a->code = c->status;
    a->content_type = c->content_type; /* the exchange holds the canned answer */
    a->location = c->location;
    ts_uuid4(a->audit_id);
    if (c->interval_ms == 0 && c->size == c->body_len) {
        if (!(a->data = malloc(c->body_len + 1)))
            return -1;
        memcpy(a->data, c->body, c->body_len);
        a->len = c->body_len;
        return TS_X_ANSWER;
    }
    ts_feed *f = calloc(1, sizeof(*f));
    if (!f)
        return -1;
    f->srv = srv;
    f->c = ts_canned_ref(x->d.canned);
    ts_sleeper_init(&f->sl, x->conn);
    a->body = (ts_body){feed_reader, feed_free, f, c->size};
    return TS_X_ANSWER;
}

/* Closes the connection (stream) without an answer. Lock held, released. */
static int reset(ts_server *srv, ts_exchange *x)
{
    count_request(srv, x, "reset");
    pthread_mutex_unlock(&srv->mu);
    ts_conn_set_reset(x->conn);
    return TS_X_RESET;
}

void ts_exchange_init(ts_exchange *x, ts_conn *c)
{
    memset(x, 0, sizeof(*x));
    x->conn = c;
    ts_sleeper_init(&x->sl, c);
}

int ts_exchange_add_body(ts_exchange *x, const void *p, size_t n)
{
    if (x->too_large || x->body.len + n > MAX_BODY) {
        x->too_large = true;
        return 0;
    }
    return ts_buf_append(&x->body, p, n);
}

void ts_exchange_free(ts_server *srv, ts_exchange *x)
{
    pthread_mutex_lock(&srv->mu);
    ts_sched_cancel(&srv->sched, &x->sl);
    pthread_mutex_unlock(&srv->mu);
    ts_canned_unref(x->d.canned);
    x->d.canned = NULL;
    ts_buf_free(&x->body);
}

int ts_exchange_run(ts_server *srv, ts_exchange *x, const char *method, const char *path,
                    ts_answer *a)
{
    ts_response rs = {0};
    ts_conn *c = x->conn;

    memset(a, 0, sizeof(*a));
    pthread_mutex_lock(&srv->mu);
    int64_t now = ts_mono_ms();
    if (x->phase == PH_RECV) {
        bool watch = false;
        const char *w = c->ops->query(c, "watch");
        if (w)
            watch = !strcmp(w, "1") || !strcmp(w, "true") || !strcmp(w, "True");
        x->client.method = method;
        x->client.path = path;
        x->client.verb = ts_api_verb(method, path, watch);
        x->client.user_agent = c->ops->header(c, "User-Agent");
        x->client.token = bearer_token(c);
        x->control = !strncmp(path, "/testserver/", 12);
        if (!x->control) {
            ts_faults_decide(&srv->faults, &x->client, now, &x->d);
            x->latency_until = now + x->d.latency_ms;
        }
        x->phase = PH_HOLD;
    }
    if (x->phase == PH_HOLD) {
        if (!x->control) {
            int64_t until = x->latency_until;
            int64_t hang = ts_faults_hang_until(&srv->faults, &x->client, now, !x->hang_counted);
            if (hang) {
                x->hang_counted = true;
                if (hang > until)
                    until = hang;
            }
            if (srv->draining) { /* dropped with its connection */
                count_request(srv, x, "reset");
                pthread_mutex_unlock(&srv->mu);
                return TS_X_DROP;
            }
            int rc;
            if (x->d.stall && stall_hold(srv, x, now, &rc)) {
                pthread_mutex_unlock(&srv->mu);
                return rc;
            }
            if (now < until && ts_sched_suspend(&srv->sched, &x->sl, until)) {
                pthread_mutex_unlock(&srv->mu);
                return TS_X_WAIT; /* run again when resumed */
            }
            if (x->d.reset)
                return reset(srv, x);
        }
        x->phase = PH_RUN;
    }

    if (!x->control && x->d.canned)
        return respond(srv, x, a); /* unlocks */
    if (!x->control && x->d.status) {
        rs.code = x->d.status;
        rs.body = ts_status_for_code(x->d.status, x->d.retry_after);
        rs.retry_after = x->d.retry_after;
    } else if (!authenticated(srv, c, x->client.token)) {
        rs.code = 401;
        rs.body = ts_status_failure(401, "Unauthorized", "Unauthorized", NULL);
    } else if (x->too_large) {
        rs.code = 413;
        rs.body =
            ts_status_failure(413, "RequestEntityTooLarge", "the request body is too large", NULL);
    } else {
        ts_request rq = {c, method, path, x->body.data, x->body.len, &x->client};
        if (x->control)
            ts_control_handle(srv, &rq, &rs);
        else
            ts_api_handle(srv, &rq, &rs);
    }
    return answer(srv, x, &rs, a); /* unlocks */
}

/* ---- HTTP/1.1: libmicrohttpd ------------------------------------------------ */

/* One per libmicrohttpd connection (its socket context). */
typedef struct h1_conn {
    ts_conn c; /* first: ts_conn * -> h1_conn * */
    ts_server *srv;
    struct MHD_Connection *mhd;
} h1_conn;

static const char *h1_query(ts_conn *c, const char *key)
{
    return MHD_lookup_connection_value(((h1_conn *)c)->mhd, MHD_GET_ARGUMENT_KIND, key);
}

static const char *h1_header(ts_conn *c, const char *key)
{
    return MHD_lookup_connection_value(((h1_conn *)c)->mhd, MHD_HEADER_KIND, key);
}

/* From the connection's own access handler or content reader, as MHD requires. */
static void h1_suspend(ts_conn *c)
{
    MHD_suspend_connection(((h1_conn *)c)->mhd);
}

static void h1_resume(ts_conn *c)
{
    MHD_resume_connection(((h1_conn *)c)->mhd);
}

static void h1_set_reset(ts_conn *c)
{
    h1_conn *h = (h1_conn *)c;
    ts_transport_h1_reset(h->srv->transport, c->reap_fd);
}

static int h1_stall(ts_conn *c, uint64_t rule)
{
    return ts_transport_h1_stall(((h1_conn *)c)->srv->transport, c->reap_fd, rule);
}

static bool h1_gone(ts_conn *c)
{
    return ts_transport_h1_gone(((h1_conn *)c)->srv->transport, c->reap_fd);
}

static const ts_conn_ops h1_ops = {h1_query,     h1_header, h1_suspend, h1_resume,
                                   h1_set_reset, h1_stall,  h1_gone};

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    ts_server *srv = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        h1_conn *h = calloc(1, sizeof(*h));
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!h)
            return; /* on_request refuses the connection */
        h->srv = srv;
        h->mhd = conn;
        h->c.ops = &h1_ops;
        h->c.proto = "http/1.1";
        h->c.reap_fd = ci ? ci->connect_fd : -1;
        h->c.cert_ok = ts_transport_h1_cert_ok(srv->transport, h->c.reap_fd);
        *socket_context = h;
    } else {
        free(*socket_context);
        *socket_context = NULL;
    }
}

static h1_conn *h1_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* A streamed body as libmicrohttpd's content reader. */
typedef struct h1_body {
    ts_body b;
} h1_body;

static ssize_t h1_body_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    h1_body *hb = cls;
    (void)pos;
    long n = hb->b.read(hb->b.ctx, buf, max);
    if (n >= 0)
        return n; /* 0: parked (suspended), called again once resumed */
    return n == TS_BODY_END ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
}

static void h1_body_free(void *cls)
{
    h1_body *hb = cls;
    hb->b.free(hb->b.ctx);
    free(hb);
}

static enum MHD_Result queue(struct MHD_Connection *conn, ts_answer *a)
{
    struct MHD_Response *resp;
    if (a->body.read) {
        h1_body *hb = malloc(sizeof(*hb));
        if (!hb) {
            ts_answer_free(a);
            return MHD_NO;
        }
        hb->b = a->body;
        memset(&a->body, 0, sizeof(a->body));
        bool known = hb->b.size != UINT64_MAX;
        resp = MHD_create_response_from_callback(known ? hb->b.size : MHD_SIZE_UNKNOWN,
                                                 known ? 64 * 1024 : 16 * 1024, h1_body_read, hb,
                                                 h1_body_free);
        if (!resp) {
            h1_body_free(hb);
            return MHD_NO;
        }
    } else {
        resp = MHD_create_response_from_buffer(a->len, a->data, MHD_RESPMEM_MUST_FREE);
        if (!resp) {
            ts_answer_free(a);
            return MHD_NO;
        }
        a->data = NULL;
    }
    if (a->content_type)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, a->content_type);
    if (a->location)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_LOCATION, a->location);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache, private");
    MHD_add_response_header(resp, "Audit-Id", a->audit_id);
    if (a->retry_after) {
        char ra[16];
        snprintf(ra, sizeof(ra), "%u", a->retry_after);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, ra);
    }
    enum MHD_Result ok = MHD_queue_response(conn, a->code, resp);
    MHD_destroy_response(resp);
    return ok;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **req_cls)
{
    ts_server *srv = cls;
    ts_exchange *x = *req_cls;
    ts_answer a;
    (void)version;

    if (!x) {
        /* First call: headers only. */
        h1_conn *h = h1_of(conn);
        if (!h || !(x = malloc(sizeof(*x))))
            return MHD_NO;
        ts_exchange_init(x, &h->c);
        *req_cls = x;
        return MHD_YES;
    }
    if (*upload_data_size) {
        if (ts_exchange_add_body(x, upload_data, *upload_data_size) < 0)
            return MHD_NO;
        *upload_data_size = 0;
        return MHD_YES;
    }
    switch (ts_exchange_run(srv, x, method, url, &a)) {
    case TS_X_WAIT:
        return MHD_YES; /* suspended: called again when resumed */
    case TS_X_ANSWER:
        return queue(conn, &a);
    default: /* TS_X_RESET (the relay sends RST once MHD closes), TS_X_DROP, out of memory */
        return MHD_NO;
    }
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                         enum MHD_RequestTerminationCode toe)
{
    ts_server *srv = cls;
    ts_exchange *x = *req_cls;
    (void)conn;
    if (!x)
        return;
    /* The relay tells the main thread once the answer is on the wire. */
    if (x->after && toe == MHD_REQUEST_TERMINATED_COMPLETED_OK)
        ts_transport_h1_after(srv->transport, x->conn->reap_fd, x->after);
    ts_exchange_free(srv, x);
    free(x);
    *req_cls = NULL;
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    /*
     * libmicrohttpd takes the relay's socketpair for TCP and tries TCP_NODELAY
     * and TCP_CORK on it once per connection; a Unix socket has no Nagle to
     * switch off, so these complaints are noise.
     */
    if (!strncmp(fmt, "Setting TCP_", 12) || !strncmp(fmt, "Failed to push the data", 23))
        return;
    ts_vlog(fmt, ap);
}

/* ---- life cycle ------------------------------------------------------------ */

/* The store's change hook: watches first, then the election controller. */
static void on_store_event(void *ctx, const ts_event *ev)
{
    ts_server *srv = ctx;
    ts_watch_on_event(srv, ev);
    if (srv->cfg.cle)
        ts_cle_on_event(srv, ev);
}

/* The timer thread's round (lock held): expire rules, reap dead streams, run elections. */
static int64_t on_tick(void *ctx, int64_t now)
{
    ts_server *srv = ctx;
    ts_server_stalls_sync(srv, now); /* expires rules; their stalled connections resume */
    int64_t next = ts_faults_next_expiry(&srv->faults);
    if (srv->cfg.cle) {
        int64_t t = ts_cle_run(srv, now);
        if (t < next)
            next = t;
    }
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
    srv->wake_pipe[0] = srv->wake_pipe[1] = -1;
    srv->started_ms = ts_mono_ms();
    if (pthread_mutex_init(&srv->mu, NULL) != 0)
        return -1;
    if (ts_store_init(&srv->store, srv->cfg.history) < 0)
        return -1;
    srv->store.on_event = on_store_event;
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
    if (!srv->transport) {
        /* Under the lock: the timer thread already runs (ts_server_stalls_sync). */
        ts_transport *t = ts_transport_new(srv);
        if (!t) {
            close(fd);
            return -1;
        }
        pthread_mutex_lock(&srv->mu);
        srv->transport = t;
        pthread_mutex_unlock(&srv->mu);
    }
    /*
     * HTTP/1.1 only: no TLS (the transport decrypts) and no listening socket
     * (the transport adds connections), so nothing here can race over a
     * listen descriptor at restart (see ts_server_stop).
     */
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME |
                     MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC;
    if (!ts_log_is_quiet())
        flags |= MHD_USE_ERROR_LOG;
    srv->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, srv,
        /* The logger first, or MHD logs the options parsed before it itself. */
        MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, srv, MHD_OPTION_THREAD_POOL_SIZE, srv->cfg.threads,
        MHD_OPTION_CONNECTION_LIMIT, connection_limit(), MHD_OPTION_CONNECTION_TIMEOUT, 600u,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(128 * 1024), MHD_OPTION_NOTIFY_COMPLETED,
        on_completed, srv, MHD_OPTION_NOTIFY_CONNECTION, on_connection, srv, MHD_OPTION_END);
    if (!srv->daemon) {
        ts_log("cannot start the HTTP/1.1 daemon");
        close(fd);
        return -1;
    }
    if (ts_transport_start(srv->transport, fd, srv->daemon) < 0) { /* owns fd now */
        MHD_stop_daemon(srv->daemon);
        srv->daemon = NULL;
        return -1;
    }
    return 0;
}

void ts_server_stop(ts_server *srv)
{
    if (!srv->daemon)
        return;
    /*
     * Nothing may stay parked: refuse new suspensions, then resume every
     * parked request and stream. Streams see `draining` and end; held
     * requests are dropped.
     */
    pthread_mutex_lock(&srv->mu);
    srv->draining = true;
    srv->sched.refuse = true;
    ts_sched_wake_all(&srv->sched);
    pthread_mutex_unlock(&srv->mu);

    /*
     * The transport closes the listening socket and every connection (h2
     * sessions and the HTTP/1.1 relays, whose libmicrohttpd ends then read
     * EOF) and joins its threads; then libmicrohttpd stops.
     *
     * MHD_quiesce_daemon is not used any more: it removed the listening
     * socket from each worker's epoll set while the worker, seeing
     * was_quiesced, could remove it too; the loser got ENOENT and MHD
     * aborted ("Failed to remove listen FD from epoll set", daemon.c:5531 in
     * 0.9.75). libmicrohttpd has no listening socket now.
     */
    ts_transport_stop(srv->transport);
    MHD_stop_daemon(srv->daemon);
    srv->daemon = NULL;

    pthread_mutex_lock(&srv->mu);
    srv->draining = false;
    srv->sched.refuse = false;
    pthread_mutex_unlock(&srv->mu);
}

void ts_server_free(ts_server *srv)
{
    ts_server_stop(srv);
    pthread_mutex_lock(&srv->mu); /* the timer thread still runs */
    ts_transport *t = srv->transport;
    srv->transport = NULL;
    pthread_mutex_unlock(&srv->mu);
    ts_transport_free(t);
    ts_sched_stop(&srv->sched);
    ts_sched_free(&srv->sched);
    ts_cle_free(&srv->cle);
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
