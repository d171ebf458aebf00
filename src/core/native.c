/* The native transport (core/transport.h): the configured API server's
 * requests on HTTP/2 connections of our own (core/h2.c, one per
 * connection).
 *
 * Connections: requests go on the current one; watch streams go there too,
 * up to NATIVE_STREAMS, then on other connections (each up to as many), so
 * that requests never wait behind streams for a stream slot; a hedge (a
 * copy of a request that got no answer: kl__launch.fresh) goes on a new
 * connection of its own, which takes nothing else while the hedge is on it.
 * When the current connection fails or is abandoned, the next request goes
 * on another that is still usable (a hedge's, which answered), else on a
 * new one. A connection that is not the current one goes once nothing is on
 * it.
 *
 * The h2 callbacks only record: a transfer whose stream ended is queued and
 * reported (kl__req_end) by the loop's run hook. */
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <nghttp2/nghttp2.h>

#include "core/h2.h"
#include "core/transport.h"

/* Concurrent streams assumed per HTTP/2 connection: the fewest a server we
 * know advertises (kube-apiserver v1.36.3: 100; v1.24.0: 250) and what RFC
 * 9113 asks a server to allow at least. */
#define H2_STREAMS 100
/* Watch streams on one connection at most: with the requests of the loop
 * (KL__HTTP_MAX_ACTIVE) and a few to spare they fit in H2_STREAMS. */
#define NATIVE_STREAMS (H2_STREAMS - KL__HTTP_MAX_ACTIVE - 4)

typedef struct conn {
    struct conn *next;
    kl__h2 *h2;
    int streams;   /* watch streams on it */
    int hedges;    /* hedges on it: nothing else goes on it */
    int abandoned; /* shut on purpose: its transfers end as abandoned */
} conn;

typedef struct xfer {
    struct native *n;
    kl__http_req *req;
    conn *c; /* NULL once its stream ended */
    int32_t id;
    int stream, fresh;
    int status;
    char *type; /* the answer's content type, NULL: none or KL__JSON_TYPE */
    int json;   /* it was KL__JSON_TYPE (not copied) */
    struct xfer *done_next;
    int queued; /* in n->done */
    kl__xfer_end end;
    char detail[256];
} xfer;

typedef struct native {
    kl__transport t;
    const kl__http_conf *conf;
    struct sockaddr_storage addr;
    socklen_t addrlen;
    char *authority;   /* :authority */
    char *verify_host; /* NULL: not checked */
    SSL_CTX *ctx;
    conn *conns;
    conn *current;           /* where requests go, NULL: none usable */
    xfer *done, **done_tail; /* transfers whose stream ended, to report in order */
    uint64_t opened;
} native;

static const kl__transport_ops native_ops;

/* ------------------------------------------------------------------------ */
/* The connections' callbacks: record only                                  */
/* ------------------------------------------------------------------------ */

/* The transfer's stream ended: off its connection, reported by run. */
static void queue_done(xfer *x)
{
    native *n = x->n;

    if (x->c) {
        x->end.abandoned = x->end.err && x->c->abandoned;
        x->c->streams -= x->stream;
        x->c->hedges -= x->fresh;
        x->c = NULL;
    }
    x->id = 0;
    if (x->queued)
        return;
    x->queued = 1;
    x->done_next = NULL;
    *n->done_tail = x;
    n->done_tail = &x->done_next;
}

static void on_response(void *arg, int status, const char *content_type)
{
    xfer *x = arg;

    x->status = status;
    kl__free(x->type);
    x->type = NULL;
    x->json = strcmp(content_type, KL__JSON_TYPE) == 0;
    /* Out of memory: reported as none. */
    if (!x->json && content_type[0])
        x->type = kl__strdup(content_type);
    kl__req_headers(x->req, status);
}

static int on_body(void *arg, const char *data, size_t len)
{
    xfer *x = arg;

    if (kl__req_body(x->req, data, len) == 0)
        return 0;
    /* The request has its error; the stream is reset, no callback
     * follows for it. */
    x->end.err = K8SLEASE_EPROTOCOL;
    x->end.kind = "receive";
    x->end.detail = "the reader ended the stream";
    queue_done(x);
    return -1;
}

static void on_close(void *arg, const kl__h2_end *end)
{
    xfer *x = arg;

    if (end->err) {
        x->end.err = end->err;
        x->end.kind = end->kind;
        snprintf(x->detail, sizeof(x->detail), "%s", end->detail);
        x->end.detail = x->detail;
        x->end.connection = end->connection;
        x->end.unsent = end->unsent && end->connection;
        x->end.refused = end->unsent && !end->connection;
        x->end.no_h2 = end->no_h2;
    }
    queue_done(x);
}

static const kl__h2_ops h2_ops = {on_response, on_body, on_close};

/* ------------------------------------------------------------------------ */
/* Connections                                                              */
/* ------------------------------------------------------------------------ */

static int usable(const conn *c)
{
    return !c->abandoned && kl__h2_usable(c->h2);
}

/* A new connection (not the current one). NULL: *err and the error set. */
static conn *conn_open(native *n, int64_t connect_ms, int *err)
{
    conn *c = kl__calloc(1, sizeof(*c));
    kl__h2_config cfg = {0};

    if (!c) {
        *err = kl__error_set(K8SLEASE_ENOMEM, "out of memory");
        return NULL;
    }
    cfg.loop = n->conf->loop;
    cfg.addr = (const struct sockaddr *)&n->addr;
    cfg.addrlen = n->addrlen;
    cfg.ctx = n->ctx;
    cfg.verify_host = n->verify_host;
    cfg.connect_timeout_ms = connect_ms;
    cfg.dead_ms = n->conf->dead_ms;
    cfg.ops = &h2_ops;
    if ((*err = kl__h2_open(&c->h2, &cfg)) < 0) {
        kl__free(c);
        return NULL;
    }
    c->next = n->conns;
    n->conns = c;
    n->opened++;
    kl__log_printf(n->conf->log, K8SLEASE_LOG_DEBUG, "%s: a new HTTP/2 connection (native)",
                   n->conf->server);
    return c;
}

/* The connection a transfer goes on (see the top of the file). NULL:
 * *err and the error set. */
static conn *conn_for(native *n, const kl__launch *l, int *err)
{
    conn *c;

    if (l->fresh)
        return conn_open(n, l->connect_ms, err);
    if (n->current && !usable(n->current))
        n->current = NULL;
    for (c = n->conns; !n->current && c; c = c->next)
        if (usable(c) && !c->hedges)
            n->current = c;
    if (!n->current && !(n->current = conn_open(n, l->connect_ms, err)))
        return NULL;
    if (!l->stream || n->current->streams < NATIVE_STREAMS) {
        kl__h2_connect_deadline(n->current->h2, l->connect_ms);
        return n->current;
    }
    for (c = n->conns; c; c = c->next)
        if (usable(c) && !c->hedges && c->streams < NATIVE_STREAMS) {
            kl__h2_connect_deadline(c->h2, l->connect_ms);
            return c;
        }
    return conn_open(n, l->connect_ms, err);
}

static void conn_free(native *n, conn *c)
{
    conn **p = &n->conns;

    while (*p != c)
        p = &(*p)->next;
    *p = c->next;
    if (n->current == c)
        n->current = NULL;
    kl__h2_free(c->h2);
    kl__free(c);
}

/* Free the connections that failed (every stream on them ended), and
 * those nothing is on that are not the current one, once there is a usable
 * current one (until then, one may become it). */
static void reap(native *n)
{
    int have_current = n->current && usable(n->current);
    conn *c = n->conns, *next;

    for (; c; c = next) {
        next = c->next;
        if (kl__h2_dead(c->h2) ||
            (c != n->current && kl__h2_idle(c->h2) && (have_current || !usable(c))))
            conn_free(n, c);
    }
}

/* ------------------------------------------------------------------------ */
/* Transfers                                                                */
/* ------------------------------------------------------------------------ */

#define NV(n, v)                                                                                   \
    {                                                                                              \
        (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE             \
    }

/* n in decimal, at the end of buf[24]. */
static const char *decimal(char buf[24], size_t n)
{
    char *p = buf + 23;

    *p = '\0';
    do {
        *--p = (char)('0' + n % 10);
        n /= 10;
    } while (n);
    return p;
}

static void xfer_free(xfer *x)
{
    kl__free(x->type);
    kl__free(x);
}

static int launch(kl__transport *t, kl__http_req *req, const kl__launch *l, void **out)
{
    native *n = (native *)t;
    char length[24];
    nghttp2_nv nv[10] = {
        NV(":method", l->method),
        NV(":scheme", "https"),
        NV(":authority", n->authority),
        NV(":path", l->path),
        NV("user-agent", n->conf->user_agent),
        NV("accept", "application/json"),
    };
    size_t nvlen = 6;
    xfer *x = kl__calloc(1, sizeof(*x));
    int32_t id;
    int err;
    conn *c;

    *out = NULL;
    if (!x)
        return kl__error_set(K8SLEASE_ENOMEM, "%s%s: out of memory", n->conf->server, l->path);
    x->n = n;
    x->req = req;
    x->stream = l->stream;
    x->fresh = l->fresh;
    if (l->content_type)
        nv[nvlen++] = (nghttp2_nv)NV("content-type", l->content_type);
    if (l->has_body)
        nv[nvlen++] = (nghttp2_nv)NV("content-length", decimal(length, l->body_len));
    if (l->auth_line)
        nv[nvlen++] = (nghttp2_nv)NV("authorization", l->auth_line + strlen("Authorization: "));
    if (!(c = conn_for(n, l, &err))) {
        kl__error_wrap(err, "%s", n->conf->server);
        xfer_free(x);
        return err;
    }
    if ((id = kl__h2_submit(c->h2, nv, nvlen, l->body, l->body_len, l->has_body, x)) < 0) {
        xfer_free(x);
        return kl__error_set((int)id, "%s%s: %s", n->conf->server, l->path,
                             id == K8SLEASE_ENOMEM ? "out of memory"
                                                   : "no HTTP/2 stream to be had");
    }
    x->c = c;
    x->id = id;
    c->streams += x->stream;
    c->hedges += x->fresh;
    *out = x;
    return 0;
}

static void cancel(kl__transport *t, void *arg)
{
    native *n = (native *)t;
    xfer *x = arg;

    if (x->queued) {
        xfer **p = &n->done;

        while (*p != x)
            p = &(*p)->done_next;
        *p = x->done_next;
        if (n->done_tail == &x->done_next)
            n->done_tail = p;
    }
    if (x->c) {
        kl__h2_cancel(x->c->h2, x->id);
        x->c->streams -= x->stream;
        x->c->hedges -= x->fresh;
    }
    xfer_free(x);
}

/* Fail everything on the connection: the transfers end (as abandoned),
 * and the next requests go on another connection. */
static int abandon(kl__transport *t, void *arg, unsigned *port)
{
    xfer *x = arg;
    conn *c = x->c;

    (void)t;
    *port = 0;
    if (!c || c->abandoned)
        return 0;
    *port = kl__h2_port(c->h2);
    c->abandoned = 1;
    kl__h2_fail(c->h2, K8SLEASE_ETIMEOUT, "timeout",
                "its connection answered nothing in time and was abandoned");
    return 1;
}

/* Report the transfers that ended, in order. kl__req_end may cancel or
 * start others: each is taken off the queue before. */
static void report(native *n)
{
    xfer *x;

    while ((x = n->done)) {
        if (!(n->done = x->done_next))
            n->done_tail = &n->done;
        x->queued = 0;
        if (!x->end.err) {
            x->end.status = x->status;
            x->end.content_type = x->json ? KL__JSON_TYPE : x->type ? x->type : "";
        }
        kl__req_end(x->req, &x->end);
        xfer_free(x);
    }
}

static void run(kl__transport *t)
{
    native *n = (native *)t;
    int drain = kl__loop_batching(n->conf->loop);

    /* The reads a draining read left (their bytes may all be in OpenSSL's
     * buffer already, where epoll does not see them). */
    for (conn *c = n->conns; c; c = c->next)
        if (kl__h2_more(c->h2))
            kl__h2_io(c->h2, EPOLLIN, drain);
    report(n);
    reap(n);
}

/* At once when transfers ended or a draining read left bytes. */
static long timeout_ms(kl__transport *t)
{
    native *n = (native *)t;

    if (n->done)
        return 0;
    for (conn *c = n->conns; c; c = c->next)
        if (kl__h2_more(c->h2))
            return 0;
    return -1;
}

/* What the loop's callbacks queued goes out now, as one write per
 * connection. */
static int flush(kl__transport *t)
{
    native *n = (native *)t;

    for (conn *c = n->conns; c; c = c->next)
        kl__h2_flush(c->h2);
    return n->done != NULL;
}

static void native_free(kl__transport *t)
{
    native *n = (native *)t;
    xfer *x;

    while (n->conns)
        conn_free(n, n->conns);
    while ((x = n->done)) {
        n->done = x->done_next;
        xfer_free(x);
    }
    if (n->ctx)
        SSL_CTX_free(n->ctx);
    kl__free(n->authority);
    kl__free(n->verify_host);
    kl__free(n);
}

static const kl__transport_ops native_ops = {"native", launch,     cancel, abandon,
                                             run,      timeout_ms, flush,  native_free};

/* The TLS context of the connections: the loop's TLS setup, and what a
 * connection of our own wants of OpenSSL. NULL: out of memory. */
static SSL_CTX *new_ctx(const kl__tls *tls)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());

    if (!ctx)
        return NULL;
    SSL_CTX_set_read_ahead(ctx, 1);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF
    /* A server that closes without close_notify (a restart, a balancer)
     * ended the connection: not a TLS failure (HTTP/2 frames its own ends). */
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
#endif
    if (kl__tls_setup(tls, ctx) < 0) {
        SSL_CTX_free(ctx);
        return NULL;
    }
    return ctx;
}

int kl__native_new(kl__transport **out, const kl__http_conf *conf, const void *addr,
                   unsigned addrlen, const char *authority, const char *verify_host)
{
    native *n = kl__calloc(1, sizeof(*n));

    *out = NULL;
    if (!n)
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    n->t.ops = &native_ops;
    n->conf = conf;
    n->done_tail = &n->done;
    memcpy(&n->addr, addr, addrlen < sizeof(n->addr) ? addrlen : sizeof(n->addr));
    n->addrlen = addrlen;
    if (!(n->authority = kl__strdup(authority)) ||
        (verify_host && !(n->verify_host = kl__strdup(verify_host))) ||
        !(n->ctx = new_ctx(conf->tls))) {
        native_free(&n->t);
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    }
    *out = &n->t;
    return 0;
}

uint64_t kl__native_opened(const kl__transport *t)
{
    return t && t->ops == &native_ops ? ((const native *)t)->opened : 0;
}
