/*
 * h2.c - HTTP/2 connections: an nghttp2 server session per connection
 * (framing, HPACK, flow control and stream states are nghttp2's), driving
 * the same request life cycle as HTTP/1.1 (ts_exchange, dispatch.h).
 *
 * Each stream is a ts_conn: a request held by a latency or hang fault, or a
 * watch or trickled body with nothing to send, parks the stream (the body
 * reader answers NGHTTP2_ERR_DEFERRED). Waking it from another thread
 * queues the stream id and pokes the connection's I/O thread, which runs
 * the request again or resumes its data (ts_h2_wake). Everything else runs
 * on that thread: the session is never shared.
 *
 * Stalls: a request that hits a `stall` rule stalls the whole connection
 * (transport.c): from then on no frame is sent (no answer, PING or SETTINGS
 * ACK, WINDOW_UPDATE, watch event), and requests already decoded from what
 * was read before are deferred, not run; woken streams wait in `woken`.
 * When the stall ends, ts_h2_wake takes them up in order.
 *
 * GOAWAY: a `goaway` fault refuses its request unprocessed (RFC 9113
 * §6.8): a GOAWAY (NO_ERROR) whose last-stream-id is the client's stream
 * before it (id - 2, or 0): the client may retry it, and every stream after
 * it, on a new connection, writes included (libcurl 7.88 does while another
 * of its streams keeps the connection busy; see README.md). The request is not
 * run; neither is any stream above the last-stream-id (nghttp2 closes those
 * as refused once the GOAWAY is out, and ignores new ones), while the
 * streams below it finish; then the session wants nothing more and the
 * connection ends cleanly (TLS close_notify, FIN). Only the first hit on a
 * connection sends a GOAWAY; a later one, or one that would falsely refuse a
 * stream already answered above it (a request that completed out of order),
 * refuses its own stream alone with RST_STREAM (REFUSED_STREAM), which
 * means the same for that request.
 *
 * Resets: a `reset` fault, a watch closed with `abort`, and a body that
 * fails end the stream with RST_STREAM (INTERNAL_ERROR): the client sees a
 * stream error (libcurl: CURLE_HTTP2_STREAM; Go: "stream error ...
 * INTERNAL_ERROR") while other streams on the connection go on, as they
 * would on their own HTTP/1.1 connections. A restart (or exit) closes
 * whole connections and sends nothing more on their streams first: libcurl
 * 7.88 takes an RST_STREAM followed at once by the end of the connection as
 * a clean end of the stream, where a bare close is "stream was not closed
 * cleanly" (CURLE_HTTP2_STREAM) - a watch must see its stream fail.
 */
#include "h2.h"
#include "dispatch.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <nghttp2/nghttp2.h>

/* Uploads can be up to 3 MiB; do not make them crawl. */
#define WINDOW (1 << 20)

typedef struct kv {
    char *k, *v;
} kv;

typedef struct kvs {
    kv *a;
    size_t n, cap;
} kvs;

typedef struct h2_stream {
    ts_conn c; /* first: ts_conn * -> h2_stream * */
    ts_h2 *h;
    int32_t id;
    struct h2_stream *prev, *next; /* h->streams */
    ts_exchange x;
    char *method;
    char *path; /* decoded, without the query */
    kvs headers, args;
    bool complete;      /* the request is complete (END_STREAM) */
    bool started;       /* ... and was run */
    bool answered;      /* a response was submitted */
    bool response_done; /* its end went out */
    bool woken;         /* in h->woken (under h->wmu) */
    bool head;
    ts_answer a;
    size_t data_off;
} h2_stream;

struct ts_h2 {
    ts_server *srv;
    const ts_tconn_ops *ops; /* tc's, from the transport */
    ts_tconn *tc;
    nghttp2_session *s;
    h2_stream *streams;
    pthread_mutex_t wmu; /* guards woken and the streams' woken flags */
    int32_t *woken;
    size_t nwoken, capwoken;
    ts_buf pbuf;         /* frames not yet encrypted */
    bool deferred;       /* complete requests wait for the end of a stall */
    int32_t goaway_last; /* last-stream-id of the GOAWAY a fault submitted, -1: none */
};

/* ---- requests ------------------------------------------------------------- */

static int kvs_add(kvs *l, char *k, char *v)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        kv *a = realloc(l->a, cap * sizeof(*a));
        if (!a)
            return -1;
        l->a = a;
        l->cap = cap;
    }
    l->a[l->n++] = (kv){k, v};
    return 0;
}

static void kvs_free(kvs *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free(l->a[i].k);
        free(l->a[i].v);
    }
    free(l->a);
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* %XX decoding (and '+' as a space in a query), as libmicrohttpd does. */
static char *decode(const char *p, size_t n, bool plus)
{
    char *out = malloc(n + 1), *o = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        int hi, lo;
        if (p[i] == '%' && i + 2 < n && (hi = hexval(p[i + 1])) >= 0 &&
            (lo = hexval(p[i + 2])) >= 0) {
            *o++ = (char)(hi * 16 + lo);
            i += 2;
        } else if (plus && p[i] == '+') {
            *o++ = ' ';
        } else {
            *o++ = p[i];
        }
    }
    *o = '\0';
    return out;
}

static int parse_path(h2_stream *st, const char *p, size_t n)
{
    const char *q = memchr(p, '?', n);
    size_t plen = q ? (size_t)(q - p) : n;
    if (!(st->path = decode(p, plen, false)))
        return -1;
    if (!q)
        return 0;
    const char *a = q + 1, *end = p + n;
    while (a < end) {
        const char *amp = memchr(a, '&', (size_t)(end - a));
        const char *e = amp ? amp : end;
        const char *eq = memchr(a, '=', (size_t)(e - a));
        if (e > a) {
            char *k = decode(a, (size_t)((eq ? eq : e) - a), true);
            char *v = eq ? decode(eq + 1, (size_t)(e - eq - 1), true) : NULL;
            if (!k || (eq && !v) || kvs_add(&st->args, k, v) < 0) {
                free(k);
                free(v);
                return -1;
            }
        }
        a = e + 1;
    }
    return 0;
}

/* ---- ts_conn for a stream --------------------------------------------------- */

static const char *st_query(ts_conn *c, const char *key)
{
    h2_stream *st = (h2_stream *)c;
    for (size_t i = 0; i < st->args.n; i++)
        if (!strcmp(st->args.a[i].k, key))
            return st->args.a[i].v;
    return NULL;
}

static const char *st_header(ts_conn *c, const char *key)
{
    h2_stream *st = (h2_stream *)c;
    for (size_t i = 0; i < st->headers.n; i++)
        if (!strcasecmp(st->headers.a[i].k, key))
            return st->headers.a[i].v;
    return NULL;
}

static void st_suspend(ts_conn *c)
{
    (void)c; /* the caller answers "no data yet" (DEFERRED) or waits to be run again */
}

/* Queues st for ts_h2_wake; true if it was not queued yet. */
static bool queue_woken(ts_h2 *h, h2_stream *st)
{
    bool poke = false;
    pthread_mutex_lock(&h->wmu);
    if (!st->woken) {
        if (h->nwoken == h->capwoken) {
            size_t cap = h->capwoken ? h->capwoken * 2 : 16;
            int32_t *w = realloc(h->woken, cap * sizeof(*w));
            if (w) {
                h->woken = w;
                h->capwoken = cap;
            }
        }
        if (h->nwoken < h->capwoken) {
            h->woken[h->nwoken++] = st->id;
            st->woken = true;
            poke = true;
        }
    }
    pthread_mutex_unlock(&h->wmu);
    return poke;
}

/* Any thread, server lock held: the stream is still alive (see stream_free). */
static void st_resume(ts_conn *c)
{
    h2_stream *st = (h2_stream *)c;
    if (queue_woken(st->h, st))
        st->h->ops->poke(st->h->tc);
}

static void st_set_reset(ts_conn *c)
{
    (void)c; /* a failing body resets the stream anyway */
}

/* On the connection's thread (the request is being run), server lock held. */
static int st_stall(ts_conn *c, uint64_t rule)
{
    ts_h2 *h = ((h2_stream *)c)->h;
    h->ops->stall(h->tc, rule);
    return 0;
}

static bool st_gone(ts_conn *c)
{
    (void)c; /* a stream lives no longer than its connection */
    return false;
}

static const ts_conn_ops stream_ops = {st_query,     st_header, st_suspend, st_resume,
                                       st_set_reset, st_stall,  st_gone};

static void stream_free(ts_h2 *h, h2_stream *st)
{
    /* Unpark first (both take the server lock): after this nobody wakes st. */
    ts_answer_free(&st->a);
    ts_exchange_free(h->srv, &st->x);
    nghttp2_session_set_stream_user_data(h->s, st->id, NULL);
    if (st->prev)
        st->prev->next = st->next;
    else
        h->streams = st->next;
    if (st->next)
        st->next->prev = st->prev;
    free(st->method);
    free(st->path);
    kvs_free(&st->headers);
    kvs_free(&st->args);
    free(st);
}

/* ---- answers ---------------------------------------------------------------- */

static ssize_t read_body(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
                         nghttp2_data_source *src, void *ud)
{
    h2_stream *st = src->ptr;
    (void)s, (void)id, (void)ud;
    if (st->a.body.read) {
        long n = st->a.body.read(st->a.body.ctx, (char *)buf, len);
        if (n > 0)
            return n;
        if (n == 0)
            return NGHTTP2_ERR_DEFERRED; /* parked; st_resume brings it back */
        if (n == TS_BODY_END) {
            *flags |= NGHTTP2_DATA_FLAG_EOF;
            st->response_done = true;
            return 0;
        }
        if (n == TS_BODY_DROP)
            return NGHTTP2_ERR_DEFERRED;              /* the connection closes under it */
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* RST_STREAM INTERNAL_ERROR */
    }
    size_t n = st->a.len - st->data_off;
    if (n > len)
        n = len;
    if (n)
        memcpy(buf, st->a.data + st->data_off, n);
    st->data_off += n;
    if (st->data_off == st->a.len) {
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        st->response_done = true;
    }
    return (ssize_t)n;
}

#define NV(n, v)                                                                                   \
    (nghttp2_nv)                                                                                   \
    {                                                                                              \
        (uint8_t *)(n), (uint8_t *)(v), strlen(n), strlen(v), NGHTTP2_NV_FLAG_NONE                 \
    }

static void submit(ts_h2 *h, h2_stream *st)
{
    ts_answer *a = &st->a;
    char status[8], date[64], retry[16], length[24];
    nghttp2_nv nv[9];
    size_t n = 0;
    struct tm tm;
    time_t now = time(NULL);

    snprintf(status, sizeof(status), "%u", a->code);
    nv[n++] = NV(":status", status);
    if (a->content_type)
        nv[n++] = NV("content-type", a->content_type);
    if (a->location)
        nv[n++] = NV("location", a->location);
    nv[n++] = NV("cache-control", "no-cache, private");
    nv[n++] = NV("audit-id", a->audit_id);
    gmtime_r(&now, &tm);
    strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", &tm);
    nv[n++] = NV("date", date);
    if (a->retry_after) {
        snprintf(retry, sizeof(retry), "%u", a->retry_after);
        nv[n++] = NV("retry-after", retry);
    }
    uint64_t size = a->body.read ? a->body.size : a->len;
    if (size != UINT64_MAX) {
        snprintf(length, sizeof(length), "%llu", (unsigned long long)size);
        nv[n++] = NV("content-length", length);
    }
    st->answered = true;
    nghttp2_data_provider prd = {.source.ptr = st, .read_callback = read_body};
    if (st->head)
        st->response_done = true;
    if (nghttp2_submit_response(h->s, st->id, nv, n, st->head ? NULL : &prd) != 0)
        nghttp2_submit_rst_stream(h->s, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_INTERNAL_ERROR);
}

/* A `goaway` fault hit st: refuse it, and the streams after it (see the top). */
static void refuse(ts_h2 *h, h2_stream *st)
{
    int32_t last = st->id > 2 ? st->id - 2 : 0;
    bool honest = h->goaway_last < 0;
    for (h2_stream *o = h->streams; o && honest; o = o->next)
        honest = !(o->id > last && o->answered);
    if (honest &&
        nghttp2_submit_goaway(h->s, NGHTTP2_FLAG_NONE, last, NGHTTP2_NO_ERROR, NULL, 0) == 0) {
        h->goaway_last = last;
        return;
    }
    nghttp2_submit_rst_stream(h->s, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_REFUSED_STREAM);
}

static void run(ts_h2 *h, h2_stream *st)
{
    if (h->goaway_last >= 0 && st->id > h->goaway_last)
        return; /* refused by our GOAWAY: closed when it goes out */
    st->started = true;
    if (!st->method || !st->path) {
        nghttp2_submit_rst_stream(h->s, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_PROTOCOL_ERROR);
        return;
    }
    switch (ts_exchange_run(h->srv, &st->x, st->method, st->path, &st->a)) {
    case TS_X_WAIT:
        return; /* parked: ts_h2_wake runs it again */
    case TS_X_ANSWER:
        submit(h, st);
        return;
    case TS_X_DROP:
        return; /* the connection closes under it */
    case TS_X_GOAWAY:
        refuse(h, st);
        return;
    default: /* TS_X_RESET, or out of memory */
        nghttp2_submit_rst_stream(h->s, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_INTERNAL_ERROR);
        return;
    }
}

/* ---- nghttp2 callbacks ---------------------------------------------------------- */

static int on_begin_headers(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
    ts_h2 *h = ud;
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    h2_stream *st = calloc(1, sizeof(*st));
    if (!st)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    st->c = (ts_conn){&stream_ops, "h2", h->ops->cert_ok(h->tc), -1};
    st->h = h;
    st->id = f->hd.stream_id;
    ts_exchange_init(&st->x, &st->c);
    st->next = h->streams;
    if (h->streams)
        h->streams->prev = st;
    h->streams = st;
    nghttp2_session_set_stream_user_data(s, st->id, st);
    return 0;
}

static int on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags, void *ud)
{
    (void)flags, (void)ud;
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0; /* trailers are ignored */
    h2_stream *st = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
    if (!st)
        return 0;
    if (namelen == 7 && !memcmp(name, ":method", 7)) {
        free(st->method);
        st->method = strndup((const char *)value, valuelen);
        st->head = st->method && !strcmp(st->method, "HEAD");
        return st->method ? 0 : NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    if (namelen == 5 && !memcmp(name, ":path", 5)) {
        if (st->path)
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        return parse_path(st, (const char *)value, valuelen) < 0
                   ? NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE
                   : 0;
    }
    if (namelen && name[0] == ':')
        return 0;
    char *k = strndup((const char *)name, namelen), *v = strndup((const char *)value, valuelen);
    if (!k || !v || kvs_add(&st->headers, k, v) < 0) {
        free(k);
        free(v);
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    return 0;
}

static int on_data_chunk(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data,
                         size_t len, void *ud)
{
    (void)flags, (void)ud;
    h2_stream *st = nghttp2_session_get_stream_user_data(s, id);
    if (st && ts_exchange_add_body(&st->x, data, len) < 0)
        nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, id, NGHTTP2_INTERNAL_ERROR);
    return 0;
}

static int on_frame_recv(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
    ts_h2 *h = ud;
    if ((f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA) ||
        !(f->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    h2_stream *st = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
    if (!st || st->started)
        return 0;
    st->complete = true;
    /* Read along with the request that stalled the connection: later, in order. */
    if (h->deferred || h->ops->stalled(h->tc)) {
        h->deferred = true;
        return 0;
    }
    run(h, st);
    return 0;
}

/* Runs the requests deferred by a stall, oldest first, until one stalls again. */
static void run_deferred(ts_h2 *h)
{
    if (!h->deferred || h->ops->stalled(h->tc))
        return;
    h->deferred = false;
    h2_stream *st = h->streams;
    while (st && st->next)
        st = st->next;
    for (; st; st = st->prev) { /* run() frees no stream: closes happen while sending */
        if (h->ops->stalled(h->tc)) {
            h->deferred = true;
            return;
        }
        if (st->complete && !st->started)
            run(h, st);
    }
}

static int on_stream_close(nghttp2_session *s, int32_t id, uint32_t error_code, void *ud)
{
    ts_h2 *h = ud;
    h2_stream *st = nghttp2_session_get_stream_user_data(s, id);
    if (!st)
        return 0;
    if (error_code == NGHTTP2_NO_ERROR && st->response_done && st->x.after)
        h->ops->after(h->tc, st->x.after); /* once the bytes are on the wire */
    stream_free(h, st);
    return 0;
}

/* ---- session ---------------------------------------------------------------- */

ts_h2 *ts_h2_new(ts_server *srv, unsigned max_streams, const ts_tconn_ops *ops, ts_tconn *tc)
{
    ts_h2 *h = calloc(1, sizeof(*h));
    nghttp2_session_callbacks *cb = NULL;
    if (!h)
        return NULL;
    h->srv = srv;
    h->ops = ops;
    h->tc = tc;
    h->goaway_last = -1;
    pthread_mutex_init(&h->wmu, NULL);
    if (nghttp2_session_callbacks_new(&cb) != 0)
        goto fail;
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data_chunk);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
    int rc = nghttp2_session_server_new(&h->s, cb, h);
    nghttp2_session_callbacks_del(cb);
    if (rc != 0)
        goto fail;
    nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, max_streams},
                                   {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, WINDOW}};
    if (nghttp2_submit_settings(h->s, NGHTTP2_FLAG_NONE, iv, 2) != 0 ||
        nghttp2_session_set_local_window_size(h->s, NGHTTP2_FLAG_NONE, 0, 4 * WINDOW) != 0)
        goto fail;
    return h;
fail:
    ts_h2_free(h);
    return NULL;
}

int ts_h2_recv(ts_h2 *h, const uint8_t *p, size_t n)
{
    ssize_t rc = nghttp2_session_mem_recv(h->s, p, n);
    run_deferred(h);
    return rc < 0 ? -1 : 0;
}

int ts_h2_send(ts_h2 *h)
{
    if (h->ops->stalled(h->tc))
        return 0; /* not a frame while stalled */
    while (!h->ops->full(h->tc, h->pbuf.len)) {
        const uint8_t *d;
        ssize_t n = nghttp2_session_mem_send(h->s, &d);
        if (n < 0)
            return -1;
        if (n == 0)
            break;
        if (ts_buf_append(&h->pbuf, d, (size_t)n) < 0)
            return -1;
        if (h->pbuf.len >= 16384) { /* full TLS records */
            if (h->ops->write(h->tc, h->pbuf.data, h->pbuf.len) < 0)
                return -1;
            h->pbuf.len = 0;
        }
    }
    if (h->pbuf.len) {
        if (h->ops->write(h->tc, h->pbuf.data, h->pbuf.len) < 0)
            return -1;
        h->pbuf.len = 0;
    }
    return 0;
}

void ts_h2_wake(ts_h2 *h)
{
    if (h->ops->stalled(h->tc))
        return; /* the woken streams wait in the queue for the end of the stall */
    pthread_mutex_lock(&h->wmu);
    int32_t *ids = h->woken;
    size_t n = h->nwoken;
    h->woken = NULL;
    h->nwoken = h->capwoken = 0;
    for (size_t i = 0; i < n; i++) {
        h2_stream *st = nghttp2_session_get_stream_user_data(h->s, ids[i]);
        if (st)
            st->woken = false;
    }
    pthread_mutex_unlock(&h->wmu);
    for (size_t i = 0; i < n; i++) {
        h2_stream *st = nghttp2_session_get_stream_user_data(h->s, ids[i]);
        if (!st)
            continue; /* closed meanwhile */
        if (h->ops->stalled(h->tc)) {
            queue_woken(h, st); /* a request run just now stalled the connection */
            continue;
        }
        if (!st->answered) {
            if (st->started)
                run(h, st);
        } else {
            nghttp2_session_resume_data(h->s, st->id);
        }
    }
    free(ids);
    run_deferred(h);
}

bool ts_h2_finished(ts_h2 *h)
{
    return !nghttp2_session_want_read(h->s) && !nghttp2_session_want_write(h->s);
}

void ts_h2_free(ts_h2 *h)
{
    if (!h)
        return;
    while (h->streams)
        stream_free(h, h->streams);
    if (h->s)
        nghttp2_session_del(h->s);
    free(h->woken);
    ts_buf_free(&h->pbuf);
    pthread_mutex_destroy(&h->wmu);
    free(h);
}
