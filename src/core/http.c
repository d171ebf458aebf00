/* The request layer of the HTTP stack: a request's life, whichever
 * transport carries it (core/transport.h): waiting for a slot, credentials
 * (core/credential.c), the deadline, the retry after a 401, hedged copies,
 * stream bytes handed to their reader, completion; and abandon, the one
 * way a connection that answers nothing in time is given up. kl__loop_new
 * builds a loop (core/loop.c) for a rest config: the TLS setup
 * (core/tls.c), the credentials and the transports, and picks the
 * transport of the configured server: the native one (core/native.c) when
 * it can serve it, else libcurl (core/curl.c), which also carries every
 * request to another server (etcd's endpoints).
 *
 * User code (closures, timers, on_open, on_data, done) never runs inside a
 * libcurl or nghttp2 callback: the transports only hand bytes up, which are
 * buffered, and report ended transfers from the loop's run hook. So every
 * callback may start or cancel any request, its own included.
 *
 * Dead connections are found by TCP keepalive with TCP_USER_TIMEOUT
 * (kl__loop_set_dead_timeout), on either transport: libcurl's HTTP/2 PING
 * (curl_easy_upkeep) has no deadline, so it would not notice a peer that
 * stopped answering. A peer whose kernel still acknowledges but that
 * answers nothing (a hung kube-apiserver, or one behind a load balancer) is
 * found by the deadline of a request: the connection it went on is
 * abandoned (abandon), so that every request and stream on it fails at
 * once and the next ones open a new connection, through the balancer to a
 * replica that answers. */
#include "core/http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <curl/curl.h>

#include "core/clock.h"
#include "core/credential.h"
#include "core/tls.h"
#include "core/transport.h"

#define BODY_MAX           (16 * 1024 * 1024)
#define CONNECT_TIMEOUT_MS 30000
/* Hedged requests (kl__http_opts.hedge_ms): copies of one request sent on
 * new connections while it waits, at most this many per request and in
 * flight in the loop at once. A thousand elections waiting on one hung
 * HTTP/2 connection need one copy that answers, not a thousand: the winner
 * abandons the connection, and the others retry on the winner's. */
#define HEDGES_PER_REQUEST 3
#define HEDGES_PER_LOOP    4
/* Until an elector asks for less: half of client-go's default renew
 * deadline. */
#define DEFAULT_DEAD_MS 5000
#define USER_AGENT      "k8slease/" K8SLEASE_VERSION_STRING

/* A FIFO of requests. A request is on one at most (its queue), linked
 * through its queue_next. */
typedef struct reqq {
    kl__http_req *head, *tail;
} reqq;

/* The HTTP side of a loop: kl__loop_data() of a loop made by kl__loop_new. */
typedef struct http {
    kl__http_conf conf; /* shared with the transports */
    /* Set by kl__loop_new, read-only afterwards. */
    char *server;                 /* as configured, for messages */
    char *base;                   /* prefix of request URLs; host = tls_server_name if set */
    char *connect_to;             /* tls_server_name: "::host:port" of the real host */
    const char *protocols;        /* "https", or "http" for an http:// server */
    struct sockaddr_storage addr; /* the configured server's address, if its host is one */
    socklen_t addrlen;
    char *verify_host; /* tls_server_name, else the host */
    char *user_agent;
    int exec; /* the credentials come from an exec plugin */
    kl__tls *tls;
    kl__creds *creds;
    kl__transport *curl;          /* libcurl: always there */
    kl__transport *native;        /* NULL when it cannot serve the configured server */
    kl__transport *transports[2]; /* those there are, for the loop's hooks */
    int ntransports;

    /* Loop thread only (and the freeing thread once the loop has stopped). */
    kl__transport *primary; /* the configured server's: native, or libcurl */
    kl__http_req *reqs;     /* every live request */
    reqq ready;             /* streams with an opening or bytes waiting for on_open/on_data */
    reqq slot_wait;         /* requests waiting for a slot */
    reqq creds_wait;        /* requests waiting for credentials */
    long active;            /* requests (not streams) on a transport */
    long hedging;           /* hedges in flight */
    int destroying;
    uint64_t abandoned;  /* connections abandoned */
    uint64_t hedges_won; /* answers that came on a hedge's new connection first */
} http;

struct kl__http_req {
    http *http;
    kl__http_req *prev, *next; /* http->reqs */
    reqq *queue;               /* the queue it is on, NULL: none */
    kl__http_req *queue_next;  /* on it */
    int counted;               /* counts in http->active */
    kl__transport *t;          /* the transport it goes on */
    void *xfer;                /* its transfer there, NULL: none in flight */
    char *method, *path, *content_type;
    char *server;        /* opts->base_url, NULL: the configured server */
    char *authorization; /* opts->authorization, NULL: the configured credentials */
    int has_body;
    char *body; /* a copy: it must outlive kl__http_start while the request waits */
    size_t body_len;
    int64_t timeout_ms, idle_ns, started_at, last_byte;
    int64_t connect_timeout_ms; /* 0: CONNECT_TIMEOUT_MS */
    int64_t deadline_at;        /* when timeout_ms ends (monotonic ns), 0: never */
    /* Hedging: the original sends copies (hedges) on new connections every
     * hedge_ns while it waits; the first answer wins, the others go. */
    int64_t hedge_ns;         /* 0: no hedges */
    int nhedged;              /* hedges started */
    kl__http_req *hedges;     /* the original: its hedges in flight */
    kl__http_req *hedge_next; /* a hedge: next of its original's */
    kl__http_req *original;   /* a hedge: whose copy it is */
    int lost;                 /* the original's own transfer failed; err kept for the end */
    kl__http_data_cb on_data;
    kl__http_open_cb on_open;
    int answered;     /* (part of) the answer arrived */
    int opened;       /* the 200 headers of a stream arrived */
    int open_pending; /* on_open not called yet */
    kl__http_done_cb done;
    void *arg;
    kl__timer timer;   /* deadline, idle timeout or next hedge; delivery of a failed launch */
    kl__buf resp;      /* collected body, or stream bytes not yet given to on_data */
    int streaming;     /* a 200 with on_data: bytes go to on_data */
    int retried;       /* the one retry after a 401 is spent */
    int resent;        /* the one resend after a refusal is spent */
    unsigned auth_gen; /* of the credentials it went with */
    int busy;          /* inside on_open, on_data or done: cancel only marks it */
    int cancelled;
    int err;
    int unsent;   /* err: resolving or connecting failed, nothing was sent */
    char *errmsg; /* why err, on the heap: most requests never need one */
};

/* Free a string that may hold a credential, wiped first. Accepts NULL. */
static void free_secret(char *s)
{
    if (s)
        kl__wipe(s, strlen(s));
    kl__free(s);
}

static const char *req_errmsg(const kl__http_req *req)
{
    return req->errmsg ? req->errmsg : "out of memory describing the error";
}

/* The server of a request, for URLs and messages. */
static const char *req_server(const kl__http_req *req)
{
    return req->server ? req->server : req->http->server;
}

static void set_req_error(kl__http_req *req, int err, const char *fmt, ...) KL_PRINTF(3, 4);

static void set_req_error(kl__http_req *req, int err, const char *fmt, ...)
{
    va_list ap;

    kl__free(req->errmsg);
    va_start(ap, fmt);
    req->errmsg = kl__vsprintf(fmt, ap); /* NULL: req_errmsg() says so */
    va_end(ap);
    req->err = err;
    req->unsent = 0;
}

static void clear_req_error(kl__http_req *req)
{
    req->err = req->unsent = 0;
    kl__free(req->errmsg);
    req->errmsg = NULL;
}

/* ------------------------------------------------------------------------ */
/* A request's transfer                                                     */
/* ------------------------------------------------------------------------ */

static void reqq_push(reqq *q, kl__http_req *req)
{
    req->queue = q;
    req->queue_next = NULL;
    if (q->tail)
        q->tail->queue_next = req;
    else
        q->head = req;
    q->tail = req;
}

static kl__http_req *reqq_pop(reqq *q)
{
    kl__http_req *req = q->head;

    if (req) {
        if (!(q->head = req->queue_next))
            q->tail = NULL;
        req->queue = NULL;
        req->queue_next = NULL;
    }
    return req;
}

/* Off the queue it is on, if any. */
static void reqq_remove(kl__http_req *req)
{
    reqq *q = req->queue;
    kl__http_req **p, *prev = NULL;

    if (!q)
        return;
    for (p = &q->head; *p != req; p = &(*p)->queue_next)
        prev = *p;
    *p = req->queue_next;
    if (q->tail == req)
        q->tail = prev;
    req->queue = NULL;
    req->queue_next = NULL;
}

static void make_ready(http *h, kl__http_req *req)
{
    if (req->queue != &h->ready)
        reqq_push(&h->ready, req);
}

void kl__req_headers(kl__http_req *req, long status)
{
    req->answered = 1;
    req->last_byte = kl__loop_now(req->http->conf.loop);
    req->streaming = req->on_data && status == 200;
    if (req->streaming && req->on_open && !req->opened) {
        req->opened = 1;
        req->open_pending = 1;
        make_ready(req->http, req);
    }
}

int kl__req_body(kl__http_req *req, const char *data, size_t len)
{
    req->answered = 1;
    req->last_byte = kl__loop_now(req->http->conf.loop);
    if (req->resp.len + len > BODY_MAX) {
        set_req_error(req, K8SLEASE_EPROTOCOL, "response body from %s%s larger than 16 MiB",
                      req_server(req), req->path);
        return -1;
    }
    if (kl__buf_append(&req->resp, data, len) < 0) {
        set_req_error(req, K8SLEASE_ENOMEM, "%s%s: out of memory for the response body",
                      req_server(req), req->path);
        return -1;
    }
    if (req->streaming)
        make_ready(req->http, req);
    return 0;
}

/* Forget the request's transfer, if it has one. */
static void xfer_cancel(kl__http_req *req)
{
    if (req->xfer) {
        req->t->ops->cancel(req->t, req->xfer);
        req->xfer = NULL;
    }
}

/* The request's connection answered nothing in time (why says what): its
 * transport shuts it down, so that everything on it fails at once (their
 * owners retry, the informer resumes its streams) and the next requests
 * open a new one. */
static void abandon(http *h, kl__http_req *req, const char *why)
{
    unsigned port;

    if (!req->xfer || !req->t->ops->abandon(req->t, req->xfer, &port))
        return;
    h->abandoned++;
    if (port)
        kl__log_printf(h->conf.log, K8SLEASE_LOG_WARN,
                       "%s: the connection from local port %u %s: abandoned; the next requests "
                       "open a new one",
                       req_server(req), port, why);
    else
        kl__log_printf(h->conf.log, K8SLEASE_LOG_WARN,
                       "%s: a connection still being set up %s: abandoned; the next requests "
                       "open a new one",
                       req_server(req), why);
}

/* What is left of the caller's deadline (a retry gets no more), 0: none. */
static int64_t req_time_left_ms(const kl__http_req *req)
{
    int64_t ms;

    if (req->timeout_ms <= 0)
        return 0;
    ms = req->timeout_ms - (kl__loop_now(req->http->conf.loop) - req->started_at) / KL_NS_PER_MS;
    return ms < 1 ? 1 : ms;
}

/* The connect phase's bound for a request. */
static int64_t req_connect_ms(const kl__http_req *req)
{
    int64_t timeout_ms = req_time_left_ms(req);
    int64_t connect_ms = req->connect_timeout_ms > 0 ? req->connect_timeout_ms : CONNECT_TIMEOUT_MS;

    return timeout_ms > 0 && timeout_ms < connect_ms ? timeout_ms : connect_ms;
}

/* Arm a request's timer at at (0: only for its deadline), or earlier at
 * its deadline: one timer for both. */
static void req_timer_arm(http *h, kl__http_req *req, int64_t at)
{
    if (req->deadline_at && (at == 0 || req->deadline_at < at))
        at = req->deadline_at;
    if (at)
        kl__timer_arm(h->conf.loop, &req->timer, at);
}

/* The idle timeout of a stream, or the first hedge. */
static void arm_req_timer(http *h, kl__http_req *req)
{
    int64_t now = kl__loop_now(h->conf.loop);

    if (req->idle_ns > 0)
        req_timer_arm(h, req, now + req->idle_ns);
    else if (req->hedge_ns > 0 && req->nhedged < HEDGES_PER_REQUEST)
        req_timer_arm(h, req, now + req->hedge_ns);
    else
        req_timer_arm(h, req, 0);
}

/* ------------------------------------------------------------------------ */
/* Credentials                                                              */
/* ------------------------------------------------------------------------ */

/* A request waits for the credentials an exec plugin is getting (its
 * deadline still runs: on_req_timer). */
static void creds_wait(http *h, kl__http_req *req)
{
    reqq_push(&h->creds_wait, req);
    req->deadline_at = 0;
    if (req->timeout_ms > 0) {
        req->deadline_at = req->started_at + req->timeout_ms * KL_NS_PER_MS;
        kl__timer_arm(h->conf.loop, &req->timer, req->deadline_at);
    }
}

static int req_launch(http *h, kl__http_req *req);

/* The plugin's run ended: the requests that waited for it go, or fail with
 * its error (delivered by their timers: nothing here calls back). */
static void creds_ready(void *arg)
{
    http *h = arg;
    reqq list = h->creds_wait;
    kl__http_req *req;

    /* Those that waited, not those that wait again. */
    h->creds_wait.head = h->creds_wait.tail = NULL;
    for (req = list.head; req; req = req->queue_next)
        req->queue = &list;
    while ((req = reqq_pop(&list))) {
        kl__timer_cancel(h->conf.loop, &req->timer);
        req->deadline_at = 0;
        if (req_launch(h, req) < 0)
            kl__timer_arm(h->conf.loop, &req->timer, kl__loop_now(h->conf.loop));
    }
}

/* ------------------------------------------------------------------------ */
/* Launch                                                                   */
/* ------------------------------------------------------------------------ */

/* (Re)send a request with the current credentials, on its transport. On
 * failure req->err and req->errmsg say why; the caller delivers it. */
static int req_launch(http *h, kl__http_req *req)
{
    const char *server = req_server(req), *auth = NULL;
    char *raw = NULL;
    kl__launch l = {0};
    int64_t left;
    int err;

    if (kl__tls_error(h->tls) && strncmp(server, "https:", 6) == 0) {
        set_req_error(req, K8SLEASE_ETLS, "%s: TLS: %s", server, kl__tls_error(h->tls));
        return req->err;
    }
    if (req->authorization) {
        if (!(raw = kl__sprintf("Authorization: %s", req->authorization))) {
            set_req_error(req, K8SLEASE_ENOMEM, "%s%s: out of memory", server, req->path);
            return req->err;
        }
    } else if ((err = kl__creds_get(h->creds, h->conf.loop, &auth)) == KL__CREDS_WAIT) {
        creds_wait(h, req);
        return 0;
    } else if (err < 0) {
        set_req_error(req, err, "%s: credentials: %s", server, kl__error_get());
        return err;
    }
    req->auth_gen = kl__creds_gen(h->creds);
    l.method = req->method;
    l.path = req->path;
    l.content_type = req->content_type;
    l.body = req->body;
    l.body_len = req->body_len;
    l.has_body = req->has_body;
    l.server = req->server;
    l.auth_line = raw ? raw : auth;
    if (!req->authorization)
        kl__creds_identity(h->creds, &l.cert_pem, &l.key_pem);
    l.stream = req->on_data != NULL;
    l.fresh = req->original != NULL;
    l.connect_ms = req_connect_ms(req);
    left = req_time_left_ms(req);
    req->resp.len = 0;
    req->streaming = req->answered = 0;
    req->opened = req->open_pending = 0;
    req->last_byte = kl__loop_now(h->conf.loop);
    err = req->t->ops->launch(req->t, req, &l, &req->xfer);
    free_secret(raw);
    if (err < 0) {
        set_req_error(req, err, "%s", kl__error_get());
        req->unsent = err == K8SLEASE_ETRANSPORT; /* no connection: nothing sent */
        return err;
    }
    req->deadline_at = left > 0 ? kl__loop_now(h->conf.loop) + left * KL_NS_PER_MS : 0;
    arm_req_timer(h, req);
    return 0;
}

/* Launch a request on its transport: the configured server's (or, for a
 * hedge, its original's), libcurl for another server. A failure is
 * reported from the request's timer, in the next iteration: done must not
 * run inside kl__http_start. */
static void dispatch(http *h, kl__http_req *req)
{
    req->t = req->original ? req->original->t : req->server ? h->curl : h->primary;
    if (!req->on_data) {
        req->counted = 1;
        h->active++;
    }
    if (req_launch(h, req) < 0)
        kl__timer_arm(h->conf.loop, &req->timer, kl__loop_now(h->conf.loop));
}

/* Hand waiting requests to their transports as slots free up. */
static void pump(http *h)
{
    while (!h->destroying && h->slot_wait.head && h->active < KL__HTTP_MAX_ACTIVE)
        dispatch(h, reqq_pop(&h->slot_wait));
}

/* ------------------------------------------------------------------------ */
/* The end of a request                                                     */
/* ------------------------------------------------------------------------ */

static void req_free(http *h, kl__http_req *req);

/* A hedge leaves its original's list. */
static void hedge_unlink(http *h, kl__http_req *hg)
{
    kl__http_req **p = &hg->original->hedges;

    while (*p != hg)
        p = &(*p)->hedge_next;
    *p = hg->hedge_next;
    hg->hedge_next = NULL;
    hg->original = NULL;
    h->hedging--;
}

/* The original has its answer, or goes: its hedges go too. A hedge that
 * was sent and got no answer is on a connection no faster than the
 * original's: abandoned, so that the next requests do not pick it (libcurl
 * prefers an idle connection, and a hedge's is idle once it goes). One
 * still connecting is closed by its transport. */
static void hedges_drop(http *h, kl__http_req *req)
{
    while (req->hedges) {
        kl__http_req *hg = req->hedges;

        if (!h->destroying)
            abandon(h, hg, "carried a copy of a request that another answered first");
        hedge_unlink(h, hg);
        req_free(h, hg);
    }
}

static void req_free(http *h, kl__http_req *req)
{
    reqq_remove(req);
    xfer_cancel(req);
    kl__timer_cancel(h->conf.loop, &req->timer);
    hedges_drop(h, req);
    if (req->original)
        hedge_unlink(h, req);
    if (req->prev)
        req->prev->next = req->next;
    else
        h->reqs = req->next;
    if (req->next)
        req->next->prev = req->prev;
    kl__buf_free(&req->resp);
    kl__free(req->method);
    kl__free(req->path);
    kl__free(req->content_type);
    kl__free(req->server);
    /* Bodies may hold a password (etcd's authenticate), headers a token. */
    free_secret(req->authorization);
    kl__wipe(req->body, req->body_len);
    kl__free(req->body);
    kl__free(req->errmsg);
    if (req->counted) {
        h->active--;
        pump(h);
    }
    kl__free(req);
}

static void req_fail(http *h, kl__http_req *req, int err, const char *msg);

/* Hand a stream's opening and buffered bytes to on_open and on_data. 0:
 * it goes on; 1: it is gone (cancelled from a callback, or ended by its
 * reader: completed). */
static int deliver(http *h, kl__http_req *req)
{
    int rc;

    kl__error_clear();
    req->busy = 1;
    if (req->open_pending) {
        req->open_pending = 0;
        req->on_open(req->arg);
    }
    rc = !req->cancelled && req->streaming && req->resp.len > 0
             ? req->on_data(req->resp.data, req->resp.len, req->arg)
             : 0;
    req->busy = 0;
    req->resp.len = 0;
    if (req->cancelled) {
        req_free(h, req);
        return 1;
    }
    if (rc) {
        char msg[1024];

        if (kl__error_get()[0])
            snprintf(msg, sizeof(msg), "%s", kl__error_get());
        else
            snprintf(msg, sizeof(msg), "%s%s: stream ended by its reader", req_server(req),
                     req->path);
        xfer_cancel(req);
        req_fail(h, req, rc, msg);
        return 1;
    }
    return 0;
}

/* Call done with the outcome (status and content type of an answer) and
 * free the request. What a stream had not handed to its reader yet goes
 * first. */
static void req_complete(http *h, kl__http_req *req, long status, const char *content_type)
{
    kl__http_result res = {0};

    xfer_cancel(req);
    kl__timer_cancel(h->conf.loop, &req->timer);
    hedges_drop(h, req);
    if (req->queue == &h->ready) {
        reqq_remove(req);
        if (deliver(h, req))
            return;
    }
    res.err = req->err;
    res.errmsg = req->err ? req_errmsg(req) : "";
    res.unsent = req->err && req->unsent;
    res.status = req->err ? 0 : status;
    res.body = req->resp.data && !req->streaming ? req->resp.data : "";
    res.body_len = req->resp.data && !req->streaming ? req->resp.len : 0;
    res.content_type = !req->err && content_type ? content_type : "";
    if (req->err)
        kl__log_printf(h->conf.log, K8SLEASE_LOG_DEBUG, "%s %s%s: %s", req->method, req_server(req),
                       req->path, req_errmsg(req));
    else
        kl__log_printf(h->conf.log, K8SLEASE_LOG_DEBUG, "%s %s%s: HTTP %ld", req->method,
                       req_server(req), req->path, status);
    req->busy = 1;
    req->done(&res, req->arg);
    req_free(h, req);
}

static void req_fail(http *h, kl__http_req *req, int err, const char *msg)
{
    set_req_error(req, err, "%s", msg);
    req_complete(h, req, 0, NULL);
}

/* A request failed (req->err set): report, unless a hedge may still
 * answer. */
static void req_failed(http *h, kl__http_req *req)
{
    if (req->hedges) {
        /* A hedge may still answer: the error waits for the last. */
        req->lost = 1;
        return;
    }
    req_complete(h, req, 0, NULL);
}

/* An answer arrived: retry once after a 401 with fresh credentials, else
 * report. */
static void req_answered(http *h, kl__http_req *req, long status, const char *content_type)
{
    if (status == 401 && !req->retried && !req->authorization &&
        kl__creds_refused(h->creds, req->auth_gen)) {
        req->retried = 1;
        kl__log_printf(h->conf.log, K8SLEASE_LOG_DEBUG,
                       "%s %s%s: HTTP 401; retrying with fresh credentials", req->method,
                       req_server(req), req->path);
        if (req_launch(h, req) == 0)
            return;
    }
    req_complete(h, req, status, content_type);
}

void kl__req_end(kl__http_req *req, const kl__xfer_end *end)
{
    http *h = req->http;

    req->xfer = NULL;
    /* No more hedges once its own transfer ended. */
    kl__timer_cancel(h->conf.loop, &req->timer);
    req->deadline_at = 0;
    if (!end->err) {
        req_answered(h, req, end->status, end->content_type);
        return;
    }
    if (end->no_h2) {
        /* The native transport gives way to libcurl for good. */
        if (h->primary != h->curl)
            kl__log_printf(h->conf.log, K8SLEASE_LOG_INFO,
                           "%s: no HTTP/2 offered; requests go through libcurl", h->server);
        h->primary = h->curl;
        req->t = h->curl;
        clear_req_error(req);
        if (req_launch(h, req) == 0)
            return;
        req_complete(h, req, 0, NULL);
        return;
    }
    if (end->refused && !req->resent) {
        /* Refused unprocessed (GOAWAY above it, REFUSED_STREAM): once more,
         * on a new connection. */
        req->resent = 1;
        clear_req_error(req);
        if (req_launch(h, req) == 0)
            return;
    }
    if (req->err) {
        /* set while the answer arrived (kl__req_body) */
    } else if (end->abandoned) {
        set_req_error(req, K8SLEASE_ETIMEOUT,
                      "%s%s: timeout: its connection answered nothing in time and was abandoned",
                      req_server(req), req->path);
    } else {
        set_req_error(req, end->err, "%s%s: %s: %s", req_server(req),
                      end->connection ? "" : req->path, end->kind, end->detail);
        req->unsent = end->unsent;
    }
    req_failed(h, req);
}

/* ------------------------------------------------------------------------ */
/* Timers: deadline, idle streams, hedges                                   */
/* ------------------------------------------------------------------------ */

static void hedge_tick(http *h, kl__http_req *req);

static void on_req_timer(kl__timer *t, void *arg)
{
    kl__http_req *req = arg;
    http *h = req->http;
    int64_t now = kl__loop_now(h->conf.loop);
    char msg[1024];

    (void)t;
    if (req->queue == &h->creds_wait) {
        char why[512];

        reqq_remove(req);
        kl__creds_waiting(h->creds, h->conf.loop, why, sizeof(why));
        set_req_error(req, K8SLEASE_ETIMEOUT, "%s%s: timeout: no credentials after %lld ms: %s",
                      req_server(req), req->path, (long long)req->timeout_ms, why);
        req_complete(h, req, 0, NULL);
        return;
    }
    if (!req->xfer) {
        /* The launch (or the set-up of a waiting request) failed. */
        req_complete(h, req, 0, NULL);
        return;
    }
    if (req->deadline_at && now >= req->deadline_at) {
        req->deadline_at = 0;
        if (req->answered)
            set_req_error(req, K8SLEASE_ETIMEOUT,
                          "%s%s: timeout: the answer was not complete after %lld ms",
                          req_server(req), req->path, (long long)req->timeout_ms);
        else
            set_req_error(req, K8SLEASE_ETIMEOUT, "%s%s: timeout: no answer after %lld ms",
                          req_server(req), req->path, (long long)req->timeout_ms);
        abandon(h, req, "answered nothing in time");
        xfer_cancel(req);
        req_failed(h, req);
        return;
    }
    if (req->idle_ns == 0) {
        if (req->hedge_ns > 0)
            hedge_tick(h, req);
        else
            req_timer_arm(h, req, 0);
        return;
    }
    if (now - req->last_byte < req->idle_ns) {
        req_timer_arm(h, req, req->last_byte + req->idle_ns);
        return;
    }
    snprintf(msg, sizeof(msg), "%s%s: timeout: no data for %lld ms", req_server(req), req->path,
             (long long)(req->idle_ns / KL_NS_PER_MS));
    abandon(h, req, "carried a stream that got no data in time");
    req_fail(h, req, K8SLEASE_ETIMEOUT, msg);
}

/* ------------------------------------------------------------------------ */
/* Starting requests, hedges                                                */
/* ------------------------------------------------------------------------ */

/* A new request; original: it is a hedge of that one (sent at once, on a
 * new connection). */
static kl__http_req *req_start(http *h, const kl__http_opts *opts, kl__http_done_cb done, void *arg,
                               kl__http_req *original)
{
    kl__http_req *req = kl__calloc(1, sizeof(*req));
    const char *method = opts->method ? opts->method : "GET";

    if (!req) {
        kl__error_set(K8SLEASE_ENOMEM, "out of memory");
        return NULL;
    }
    req->http = h;
    req->next = h->reqs;
    if (h->reqs)
        h->reqs->prev = req;
    h->reqs = req;
    kl__timer_init(&req->timer, on_req_timer, req);
    req->done = done;
    req->arg = original ? req : arg; /* a hedge's done is hedge_done */
    req->on_data = opts->on_data;
    req->on_open = opts->on_data ? opts->on_open : NULL;
    req->timeout_ms = opts->timeout_ms;
    if (!opts->on_data && opts->timeout_ms > 0 && opts->hedge_ms > 0 && !original)
        req->hedge_ns = opts->hedge_ms * KL_NS_PER_MS;
    if (original) {
        req->original = original;
        req->hedge_next = original->hedges;
        original->hedges = req;
        original->nhedged++;
        h->hedging++;
    }
    req->connect_timeout_ms = opts->connect_timeout_ms;
    req->idle_ns = opts->on_data ? opts->idle_timeout_ms * KL_NS_PER_MS : 0;
    req->started_at = kl__loop_now(h->conf.loop);
    req->has_body = opts->body || strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0 ||
                    strcmp(method, "PATCH") == 0;
    req->method = kl__strdup(method);
    req->path = kl__strdup(opts->path ? opts->path : "/");
    req->content_type = opts->content_type ? kl__strdup(opts->content_type) : NULL;
    req->server = opts->base_url ? kl__strdup(opts->base_url) : NULL;
    req->authorization = opts->authorization ? kl__strdup(opts->authorization) : NULL;
    if (req->has_body) {
        req->body_len = opts->body ? opts->body_len : 0;
        if ((req->body = kl__malloc(req->body_len + 1))) {
            memcpy(req->body, opts->body ? opts->body : "", req->body_len);
            req->body[req->body_len] = '\0';
        }
    }
    if (!req->method || !req->path || (opts->content_type && !req->content_type) ||
        (opts->base_url && !req->server) || (opts->authorization && !req->authorization) ||
        (req->has_body && !req->body)) {
        kl__error_set(K8SLEASE_ENOMEM, "out of memory");
        req_free(h, req);
        return NULL;
    }
    /* Streams start at once: they last and must never wait behind requests;
     * so do hedges, whose original waited already. */
    if (!req->on_data && !original && (h->slot_wait.head || h->active >= KL__HTTP_MAX_ACTIVE)) {
        reqq_push(&h->slot_wait, req);
        return req;
    }
    dispatch(h, req);
    return req;
}

kl__http_req *kl__http_start(kl__loop *l, const kl__http_opts *opts, kl__http_done_cb done,
                             void *arg)
{
    return req_start(kl__loop_data(l), opts, done, arg, NULL);
}

/* A hedge ended. An answer (any HTTP status) is the original's: the
 * original's connection was slower than a new one through the same
 * address, so it is abandoned, and everything else on it retries on a new
 * one. A failure leaves the original waiting, unless it failed already and
 * this was its last hedge. */
static void hedge_done(const kl__http_result *res, void *arg)
{
    kl__http_req *hg = arg, *req = hg->original;
    http *h = hg->http;

    hedge_unlink(h, hg);
    if (res->err) {
        if (req->lost && !req->hedges)
            req_complete(h, req, 0, NULL);
        return;
    }
    h->hedges_won++;
    kl__log_printf(h->conf.log, K8SLEASE_LOG_DEBUG,
                   "%s %s%s: answered on a new connection after %lld ms", req->method,
                   req_server(req), req->path,
                   (long long)((kl__loop_now(h->conf.loop) - req->started_at) / KL_NS_PER_MS));
    abandon(h, req, "answered a request later than a new connection");
    xfer_cancel(req);
    hedges_drop(h, req);
    kl__timer_cancel(h->conf.loop, &req->timer);
    req->busy = 1;
    req->done(res, req->arg);
    req_free(h, req);
}

/* The original has waited another hedge_ns: send one more copy on a new
 * connection, if the loop has room and the copy has time left. */
static void hedge_tick(http *h, kl__http_req *req)
{
    int64_t now = kl__loop_now(h->conf.loop);
    int64_t left_ms = req->timeout_ms - (now - req->started_at) / KL_NS_PER_MS;
    kl__http_opts o = {0};

    if (req->nhedged >= HEDGES_PER_REQUEST || left_ms * KL_NS_PER_MS < req->hedge_ns) {
        req_timer_arm(h, req, 0);
        return;
    }
    req_timer_arm(h, req, now + req->hedge_ns);
    if (h->hedging >= HEDGES_PER_LOOP)
        return;
    o.method = req->method;
    o.path = req->path;
    o.content_type = req->content_type;
    o.body = req->body;
    o.body_len = req->body_len;
    o.timeout_ms = left_ms;
    o.connect_timeout_ms = req->connect_timeout_ms;
    o.base_url = req->server;
    o.authorization = req->authorization;
    kl__log_printf(h->conf.log, K8SLEASE_LOG_DEBUG,
                   "%s %s%s: no answer after %lld ms; the same request on a new connection too",
                   req->method, req_server(req), req->path,
                   (long long)((now - req->started_at) / KL_NS_PER_MS));
    /* Out of memory: the original goes on alone. */
    (void)req_start(h, &o, hedge_done, NULL, req);
}

void kl__http_cancel(kl__loop *l, kl__http_req *req)
{
    http *h = kl__loop_data(l);

    if (!req)
        return;
    if (req->busy) {
        req->cancelled = 1;
        return;
    }
    req_free(h, req);
}

uint64_t kl__loop_abandoned(const kl__loop *l)
{
    const http *h = kl__loop_data(l);

    return h->abandoned;
}

uint64_t kl__loop_hedges_won(const kl__loop *l)
{
    const http *h = kl__loop_data(l);

    return h->hedges_won;
}

const char *kl__loop_transport(const kl__loop *l)
{
    const http *h = kl__loop_data(l);

    return h->primary->ops->name;
}

uint64_t kl__loop_h2_connections(const kl__loop *l)
{
    const http *h = kl__loop_data(l);

    return kl__native_opened(h->native);
}

/* ------------------------------------------------------------------------ */
/* On the loop                                                              */
/* ------------------------------------------------------------------------ */

static void run(void *data)
{
    http *h = data;
    kl__http_req *req;

    for (int i = 0; i < h->ntransports; i++)
        h->transports[i]->ops->run(h->transports[i]);
    /* Stream bytes to their readers, outside the transports' callbacks. */
    while ((req = reqq_pop(&h->ready)))
        (void)deliver(h, req);
}

/* The nearest of the transports' deadlines; at once with streams to feed. */
static long timeout_ms(void *data)
{
    http *h = data;
    long ms = -1, n;

    if (h->ready.head)
        return 0;
    for (int i = 0; i < h->ntransports; i++)
        if ((n = h->transports[i]->ops->timeout_ms(h->transports[i])) >= 0 && (ms < 0 || n < ms))
            ms = n;
    return ms;
}

static int flush(void *data)
{
    http *h = data;
    int more = 0;

    for (int i = 0; i < h->ntransports; i++)
        more |= h->transports[i]->ops->flush(h->transports[i]);
    return more || h->ready.head;
}

/* ------------------------------------------------------------------------ */
/* Setting up                                                               */
/* ------------------------------------------------------------------------ */

/* The configured server's address, when its host is one (a name would need
 * a resolver off the loop thread: libcurl's). */
static void server_address(http *h, const char *host, const char *port)
{
    char ip[64];
    size_t len = strlen(host);
    long p = strtol(port, NULL, 10);

    if (host[0] == '[' && len > 2 && len - 2 < sizeof(ip)) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&h->addr;

        memcpy(ip, host + 1, len - 2);
        ip[len - 2] = '\0';
        if (inet_pton(AF_INET6, ip, &a->sin6_addr) == 1) {
            a->sin6_family = AF_INET6;
            a->sin6_port = htons((uint16_t)p);
            h->addrlen = sizeof(*a);
        }
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&h->addr;

        if (inet_pton(AF_INET, host, &a->sin_addr) == 1) {
            a->sin_family = AF_INET;
            a->sin_port = htons((uint16_t)p);
            h->addrlen = sizeof(*a);
        }
        snprintf(ip, sizeof(ip), "%s", host);
    }
    if (h->addrlen && !(h->verify_host = kl__strdup(ip)))
        h->addrlen = 0;
}

/* Parse the server URL (libcurl's parser) into the request base and, with
 * tls_server_name, a CONNECT_TO rule: the URL carries that name (so SNI and
 * verification use it) while the connection goes to the configured host. */
static int parse_server(http *h, const kl__restconfig *cfg)
{
    CURLU *u = curl_url();
    char *scheme = NULL, *host = NULL, *port = NULL, *url = NULL, *name = NULL;
    const char *source = cfg->source ? cfg->source : "config";
    size_t len;
    int err = 0;

    if (!u) {
        err = kl__error_set(K8SLEASE_ENOMEM, "out of memory");
        goto out;
    }
    if (curl_url_set(u, CURLUPART_URL, cfg->server, CURLU_DEFAULT_SCHEME) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) != CURLUE_OK) {
        err = kl__error_set(K8SLEASE_ECONFIG, "%s: server \"%s\" is not a valid URL", source,
                            cfg->server);
        goto out;
    }
    if (strcmp(scheme, "https") == 0) {
        h->protocols = "https";
    } else if (strcmp(scheme, "http") == 0) {
        h->protocols = "http";
    } else {
        err = kl__error_set(K8SLEASE_ECONFIG, "%s: server \"%s\": scheme must be https or http",
                            source, cfg->server);
        goto out;
    }
    server_address(h, host, port);
    if (h->addrlen && cfg->tls_server_name && cfg->tls_server_name[0]) {
        kl__free(h->verify_host);
        if (!(h->verify_host = kl__strdup(cfg->tls_server_name)))
            h->addrlen = 0;
    }
    if (cfg->tls_server_name && cfg->tls_server_name[0]) {
        name = strchr(cfg->tls_server_name, ':') ? kl__sprintf("[%s]", cfg->tls_server_name)
                                                 : kl__strdup(cfg->tls_server_name);
        if (!name || !(h->connect_to = kl__sprintf("::%s:%s", host, port))) {
            err = kl__error_set(K8SLEASE_ENOMEM, "out of memory");
            goto out;
        }
        if (curl_url_set(u, CURLUPART_HOST, name, 0) != CURLUE_OK) {
            err = kl__error_set(K8SLEASE_ECONFIG, "%s: tls-server-name \"%s\" is not a host name",
                                source, cfg->tls_server_name);
            goto out;
        }
    }
    if (curl_url_get(u, CURLUPART_URL, &url, 0) != CURLUE_OK || !(h->base = kl__strdup(url))) {
        err = kl__error_set(K8SLEASE_ENOMEM, "out of memory");
        goto out;
    }
    /* Request paths start with '/'. */
    len = strlen(h->base);
    while (len > 0 && h->base[len - 1] == '/')
        h->base[--len] = '\0';
out:
    kl__free(name);
    curl_free(url);
    curl_free(port);
    curl_free(host);
    curl_free(scheme);
    curl_url_cleanup(u);
    return err;
}

/* The native transport for the configured server, when it can serve it
 * (and K8SLEASE_TRANSPORT is not libcurl); libcurl serves it otherwise.
 * K8SLEASE_ECONFIG for another value of the variable. */
static int native_setup(http *h)
{
    static const char *const proxies[] = {"https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"};
    const char *mode = getenv("K8SLEASE_TRANSPORT");
    const char *why = NULL;

    if (mode && mode[0] && strcmp(mode, "native") != 0 && strcmp(mode, "libcurl") != 0)
        return kl__error_set(K8SLEASE_ECONFIG,
                             "K8SLEASE_TRANSPORT: \"%.64s\" is neither \"native\" nor \"libcurl\"",
                             mode);
    if (mode && strcmp(mode, "libcurl") == 0)
        return 0;
    if (strcmp(h->protocols, "https") != 0)
        why = "the server is not https";
    else if (!h->addrlen)
        why = "the server's host is not an IP address";
    else if (strchr(h->base + strlen("https://"), '/'))
        why = "the server's URL has a path";
    else if (h->exec)
        why = "exec credentials";
    for (size_t i = 0; !why && i < KL_ARRAY_LEN(proxies); i++)
        if (getenv(proxies[i]) && getenv(proxies[i])[0])
            why = "a proxy is set";
    if (why) {
        kl__log_printf(h->conf.log, K8SLEASE_LOG_INFO, "%s: native transport not used: %s",
                       h->server, why);
        return 0;
    }
    return kl__native_new(&h->native, &h->conf, &h->addr, h->addrlen, h->base + strlen("https://"),
                          kl__tls_insecure(h->tls) ? NULL : h->verify_host);
}

static void destroy(void *data)
{
    http *h = data;

    h->destroying = 1;
    while (h->reqs)
        req_free(h, h->reqs);
    for (int i = 0; i < h->ntransports; i++)
        h->transports[i]->ops->free(h->transports[i]);
    kl__creds_free(h->creds);
    kl__tls_free(h->tls);
    kl__free(h->server);
    kl__free(h->base);
    kl__free(h->connect_to);
    kl__free(h->verify_host);
    kl__free(h->user_agent);
    kl__free(h);
}

static const kl__loop_hooks hooks = {run, timeout_ms, flush, destroy};

int kl__loop_new(kl__loop **out, const kl__restconfig *cfg, const kl__log *log,
                 const char *user_agent)
{
    http *h = NULL;
    size_t len;
    int err = 0;

    *out = NULL;
    if (!cfg->server || !cfg->server[0])
        return kl__error_set(K8SLEASE_ECONFIG, "%s: no server URL",
                             cfg->source ? cfg->source : "config");
    if (!(h = kl__calloc(1, sizeof(*h))))
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    h->conf.log = log;
    h->conf.dead_ms = DEFAULT_DEAD_MS;
    h->exec = cfg->exec != NULL;
    h->user_agent = user_agent && user_agent[0] ? kl__sprintf("%s %s", USER_AGENT, user_agent)
                                                : kl__strdup(USER_AGENT);
    if (!(h->server = kl__strdup(cfg->server)) || !h->user_agent) {
        err = kl__error_set(K8SLEASE_ENOMEM, "out of memory");
        goto out;
    }
    len = strlen(h->server);
    while (len > 0 && h->server[len - 1] == '/')
        h->server[--len] = '\0';
    h->conf.server = h->server;
    h->conf.user_agent = h->user_agent;
    if ((err = parse_server(h, cfg)) < 0 || (err = kl__tls_new(&h->tls, cfg)) < 0 ||
        (err = kl__creds_new(&h->creds, cfg, log, creds_ready, h)) < 0)
        goto out;
    h->conf.tls = h->tls;
    if ((err = kl__curl_new(&h->curl, &h->conf, h->base, h->connect_to, h->protocols)) < 0)
        goto out;
    h->transports[h->ntransports++] = h->curl;
    if ((err = native_setup(h)) < 0)
        goto out;
    if (h->native)
        h->transports[h->ntransports++] = h->native;
    h->primary = h->native ? h->native : h->curl;
    if ((err = kl__loop_start(&h->conf.loop, &hooks, h, log)) < 0)
        goto out;
    *out = h->conf.loop;
    h = NULL;
out:
    if (h)
        destroy(h);
    return err;
}

void kl__loop_set_dead_timeout(kl__loop *l, int64_t ms)
{
    http *h = kl__loop_data(l);

    if (ms > 0 && ms < h->conf.dead_ms)
        h->conf.dead_ms = ms < 100 ? 100 : ms;
}

/* ------------------------------------------------------------------------ */
/* Blocking requests                                                        */
/* ------------------------------------------------------------------------ */

typedef struct sync_req {
    kl__loop *loop;
    const kl__http_opts *opts;
    int finished;
    int err;
    char errmsg[1024];
    long status;
    char *body;
    size_t body_len;
} sync_req;

static void sync_finish(sync_req *s)
{
    kl__loop_set_flag(s->loop, &s->finished);
}

static void sync_done(const kl__http_result *res, void *arg)
{
    sync_req *s = arg;

    s->err = res->err;
    s->status = res->status;
    if (res->err) {
        snprintf(s->errmsg, sizeof(s->errmsg), "%s", res->errmsg);
    } else if ((s->body = kl__malloc(res->body_len + 1))) {
        memcpy(s->body, res->body, res->body_len);
        s->body[res->body_len] = '\0';
        s->body_len = res->body_len;
    } else {
        s->err = K8SLEASE_ENOMEM;
        snprintf(s->errmsg, sizeof(s->errmsg), "out of memory");
    }
    sync_finish(s);
}

static void sync_start(void *arg)
{
    sync_req *s = arg;
    kl__http_opts opts = *s->opts;

    opts.on_data = NULL;
    if (!kl__http_start(s->loop, &opts, sync_done, s)) {
        s->err = K8SLEASE_ENOMEM;
        snprintf(s->errmsg, sizeof(s->errmsg), "%s", kl__error_get());
        sync_finish(s);
    }
}

int kl__http_sync(kl__loop *loop, const kl__http_opts *opts, long *status, char **body,
                  size_t *body_len)
{
    sync_req s = {0};
    int err;

    s.loop = loop;
    s.opts = opts;
    if (kl__loop_on_thread(loop))
        return kl__error_set(K8SLEASE_ESTATE, "blocking request from the loop thread");
    if ((err = kl__loop_post(loop, sync_start, &s)) < 0)
        return err;
    kl__loop_wait_flag(loop, &s.finished);
    if (s.err)
        return kl__error_set(s.err, "%s", s.errmsg);
    if (status)
        *status = s.status;
    if (body_len)
        *body_len = s.body_len;
    if (body)
        *body = s.body;
    else
        kl__free(s.body);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Escaping                                                                 */
/* ------------------------------------------------------------------------ */

static int unreserved(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_' || c == '~';
}

char *kl__url_escape(const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    const unsigned char *p;
    size_t n = 0;
    char *out, *o;

    for (p = (const unsigned char *)s; *p; p++)
        n += unreserved(*p) ? 1 : 3;
    if (!(out = kl__malloc(n + 1))) {
        kl__error_set(K8SLEASE_ENOMEM, "out of memory");
        return NULL;
    }
    for (o = out, p = (const unsigned char *)s; *p; p++) {
        if (unreserved(*p)) {
            *o++ = (char)*p;
        } else {
            *o++ = '%';
            *o++ = hex[*p >> 4];
            *o++ = hex[*p & 15];
        }
    }
    *o = '\0';
    return out;
}
