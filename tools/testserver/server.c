/*
 * server.c - the request life cycle shared by HTTP/1.1 and HTTP/2
 * (ts_exchange: authentication, faults, holding, answering, statistics),
 * and starting and stopping the server.
 *
 * The transport (transport.c) owns the listening socket and TLS; it serves
 * h2 connections itself (h2.c) and hands decrypted HTTP/1.1 connections to
 * libmicrohttpd (h1.c). Watches and held requests are suspended
 * connections or deferred streams, not blocked threads, so thousands of
 * idle streams cost neither threads nor CPU.
 */
#include "server.h"
#include "transport.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

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

/* The transport's main-thread notification. */
static void on_transport_notify(void *ctx, char cmd)
{
    ts_server_notify_main(ctx, cmd);
}

void ts_server_notify_main(ts_server *srv, char cmd)
{
    ssize_t rc;
    do
        rc = write(srv->wake_pipe[1], &cmd, 1);
    while (rc < 0 && errno == EINTR);
}

int ts_server_start(ts_server *srv)
{
    unsigned port = srv->port ? srv->port : srv->cfg.port;
    int fd = -1;
    /* A restart can race the kernel releasing the port: retry briefly. */
    for (int tries = 0; tries < 50; tries++) {
        if ((fd = ts_transport_listen(srv->cfg.address, port, &srv->port)) >= 0 ||
            errno != EADDRINUSE || !srv->port)
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
        ts_transport_config tcfg = {.srv = srv,
                                    .threads = srv->cfg.threads,
                                    .no_http2 = srv->cfg.no_http2,
                                    .h2_max_streams = srv->cfg.h2_max_streams,
                                    .server_crt = srv->pki.server_crt,
                                    .server_key = srv->pki.server_key,
                                    .ca_crt = srv->pki.ca_crt,
                                    .notify = on_transport_notify,
                                    .notify_ctx = srv};
        /* Under the lock: the timer thread already runs (ts_server_stalls_sync). */
        ts_transport *t = ts_transport_new(&tcfg);
        if (!t) {
            close(fd);
            return -1;
        }
        pthread_mutex_lock(&srv->mu);
        srv->transport = t;
        pthread_mutex_unlock(&srv->mu);
    }
    /* libmicrohttpd (HTTP/1.1) and the I/O threads; fd is the transport's now. */
    if (ts_transport_start(srv->transport, fd) < 0)
        return -1;
    srv->serving = true;
    return 0;
}

void ts_server_stop(ts_server *srv)
{
    if (!srv->serving)
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
     * EOF) and joins its threads; then libmicrohttpd stops (see
     * ts_transport_stop).
     */
    ts_transport_stop(srv->transport);
    srv->serving = false;

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
