/*
 * h1.c - HTTP/1.1 connections: libmicrohttpd, fed the decrypted bytes of
 * each connection by the transport's relay (transport.c), driving the same
 * request life cycle as HTTP/2 (ts_exchange, dispatch.h).
 *
 * The daemon runs MHD_USE_EPOLL_INTERNAL_THREAD with a small thread pool,
 * MHD_ALLOW_SUSPEND_RESUME, no TLS (the transport decrypts) and no
 * listening socket of its own (the transport adds connections). Each
 * libmicrohttpd connection is a ts_conn (conn.h): a request held by a fault,
 * or a watch or trickled body with nothing to send, suspends the connection
 * and is resumed from any thread.
 */
#include "h1.h"
#include "dispatch.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <microhttpd.h>

/* One per libmicrohttpd connection (its socket context). */
typedef struct h1_conn {
    ts_conn c; /* first: ts_conn * -> h1_conn * */
    const ts_h1_relays *r;
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
    const ts_h1_relays *r = ((h1_conn *)c)->r;
    r->reset(r->ctx, c->reap_fd);
}

static int h1_stall(ts_conn *c, uint64_t rule)
{
    const ts_h1_relays *r = ((h1_conn *)c)->r;
    return r->stall(r->ctx, c->reap_fd, rule);
}

static bool h1_gone(ts_conn *c)
{
    const ts_h1_relays *r = ((h1_conn *)c)->r;
    return r->gone(r->ctx, c->reap_fd);
}

static const ts_conn_ops h1_ops = {h1_query,     h1_header, h1_suspend, h1_resume,
                                   h1_set_reset, h1_stall,  h1_gone};

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    const ts_h1_relays *r = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        h1_conn *h = calloc(1, sizeof(*h));
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!h)
            return; /* on_request refuses the connection */
        h->r = r;
        h->mhd = conn;
        h->c.ops = &h1_ops;
        h->c.proto = "http/1.1";
        h->c.reap_fd = ci ? ci->connect_fd : -1;
        h->c.cert_ok = r->cert_ok(r->ctx, h->c.reap_fd);
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
    case TS_X_GOAWAY:
        /* HTTP/1.1 has no way to say "not processed": closed as a reset would. */
        ts_conn_set_reset(x->conn);
        return MHD_NO;
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
    if (x->after && toe == MHD_REQUEST_TERMINATED_COMPLETED_OK) {
        const ts_h1_relays *r = ((h1_conn *)x->conn)->r;
        r->after(r->ctx, x->conn->reap_fd, x->after);
    }
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

struct MHD_Daemon *ts_h1_start(ts_server *srv, unsigned threads, ts_h1_relays *relays)
{
    /*
     * HTTP/1.1 only: no TLS (the transport decrypts) and no listening socket
     * (the transport adds connections), so nothing here can race over a
     * listen descriptor at restart (see ts_transport_stop).
     */
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME |
                     MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC;
    if (!ts_log_is_quiet())
        flags |= MHD_USE_ERROR_LOG;
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, srv,
        /* The logger first, or MHD logs the options parsed before it itself. */
        MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, srv, MHD_OPTION_THREAD_POOL_SIZE, threads,
        MHD_OPTION_CONNECTION_LIMIT, connection_limit(), MHD_OPTION_CONNECTION_TIMEOUT, 600u,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(128 * 1024), MHD_OPTION_NOTIFY_COMPLETED,
        on_completed, srv, MHD_OPTION_NOTIFY_CONNECTION, on_connection, relays, MHD_OPTION_END);
    if (!d)
        ts_log("cannot start the HTTP/1.1 daemon");
    return d;
}

void ts_h1_stall_gone(ts_server *srv, int mhd_fd)
{
    ts_exchange_conn_gone(srv, mhd_fd);
}
