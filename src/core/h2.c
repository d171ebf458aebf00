/* One HTTP/2 connection over TLS: a non-blocking socket, an OpenSSL client
 * session and an nghttp2 client session, driven by the loop's epoll (see
 * core/h2.h for the contract).
 *
 * The life of a connection: CONNECTING (the TCP connect is under way) ->
 * HANDSHAKE (TLS, ALPN "h2") -> OPEN -> DEAD (every stream ended, the
 * socket shut). Requests may be submitted from the start: nghttp2 keeps
 * their frames until the connection is open.
 *
 * Writes: nghttp2 serialises the queued frames into one buffer, which goes
 * out as one SSL_write (one TLS record, one send, up to 16 KB). Reads:
 * OpenSSL reads ahead, so a read takes what the socket has in one recv; the
 * socket is level-triggered, so reading stops when OpenSSL has nothing
 * buffered, without a last recv to meet EAGAIN. */
/* TCP_KEEPIDLE, TCP_USER_TIMEOUT are not POSIX. */
#define _DEFAULT_SOURCE 1
#include "core/h2.h"

#include "core/clock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>

/* What one SSL_write carries at most: a TLS record's plaintext. */
#define OUT_MAX (16 * 1024)
/* Plaintext read at once (OpenSSL's read-ahead buffer holds the rest). */
#define IN_CHUNK (16 * 1024)
/* A draining read (kl__h2_io) stops after this much: the loop's other
 * sockets and timers get their turn; kl__h2_more says there is more. */
#define DRAIN_MAX (1024 * 1024)
/* The connection's receive window: the watch streams and a burst of
 * answers never wait for a WINDOW_UPDATE. */
#define CONN_WINDOW (16 * 1024 * 1024)

enum { CONNECTING, HANDSHAKE, OPEN, DEAD };

typedef struct h2_stream {
    struct h2_stream *prev, *next;
    int32_t id;
    void *arg; /* NULL: cancelled, no callbacks */
    int status;
    int responded;
    char *content_type;
    const char *body; /* borrowed (kl__h2_submit) */
    size_t body_len, body_off;
} h2_stream;

struct kl__h2 {
    kl__loop *loop;
    const kl__h2_ops *ops;
    int fd;
    uint32_t events; /* watched for (kl__loop_watch) */
    int state;
    int tcp_up; /* the TCP connection was made */
    unsigned port;
    SSL *ssl;
    nghttp2_session *session;
    h2_stream *streams;
    kl__timer connect_timer;
    int64_t connect_at; /* monotonic ns the connect started */
    int64_t connect_ms;
    int want_write;  /* SSL_write or the handshake waits for the socket */
    int more;        /* a draining read stopped at DRAIN_MAX */
    int connect_err; /* connect(2) failed at once: errno */
    kl__buf out;     /* serialised frames; out_off of them written */
    size_t out_off;
};

static void *h2_malloc(size_t size, void *ud)
{
    (void)ud;
    return kl__malloc(size);
}

static void h2_free(void *p, void *ud)
{
    (void)ud;
    kl__free(p);
}

static void *h2_calloc(size_t n, size_t size, void *ud)
{
    (void)ud;
    return kl__calloc(n, size);
}

static void *h2_realloc(void *p, size_t size, void *ud)
{
    (void)ud;
    return kl__realloc(p, size);
}

static nghttp2_mem h2_mem = {NULL, h2_malloc, h2_free, h2_calloc, h2_realloc};

static void stream_free(kl__h2 *c, h2_stream *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        c->streams = s->next;
    if (s->next)
        s->next->prev = s->prev;
    kl__free(s->content_type);
    kl__free(s);
}

static void on_ready(int fd, uint32_t events, void *arg);

/* Watch the socket for events. A failure (no room in the loop's table) is
 * returned; the caller ends the connection. */
static int set_events(kl__h2 *c, uint32_t events)
{
    int err;

    if (c->fd < 0 || events == c->events)
        return 0;
    if ((err = kl__loop_watch(c->loop, c->fd, events, on_ready, c)) < 0)
        return err;
    c->events = events;
    return 0;
}

/* End every stream with end, shut the socket: DEAD. */
static void fail(kl__h2 *c, const kl__h2_end *end)
{
    h2_stream *s;

    if (c->state == DEAD)
        return;
    c->state = DEAD;
    kl__timer_cancel(c->loop, &c->connect_timer);
    if (c->fd >= 0) {
        kl__loop_unwatch(c->loop, c->fd);
        c->events = 0;
        (void)shutdown(c->fd, SHUT_RDWR);
    }
    while ((s = c->streams)) {
        void *arg = s->arg;

        stream_free(c, s);
        if (arg)
            c->ops->on_close(arg, end);
    }
}

static void fail_with(kl__h2 *c, int err, const char *kind, const char *detail, int unsent)
{
    kl__h2_end end = {0};

    end.err = err;
    end.kind = kind;
    end.detail = detail;
    end.connection = 1;
    end.unsent = unsent;
    fail(c, &end);
}

/* OpenSSL's reason for the last failure, or the system's. */
static void ssl_reason(kl__h2 *c, int rc, int ret, char *buf, size_t len)
{
    unsigned long e = ERR_peek_last_error();
    long verify = c->ssl ? SSL_get_verify_result(c->ssl) : X509_V_OK;

    if (verify != X509_V_OK) {
        snprintf(buf, len, "certificate verify failed: %s", X509_verify_cert_error_string(verify));
    } else if (e) {
        ERR_error_string_n(e, buf, len);
    } else if (rc == SSL_ERROR_SYSCALL && ret == 0) {
        snprintf(buf, len, "the server closed the connection");
    } else if (rc == SSL_ERROR_SYSCALL && errno) {
        kl__strerror(errno, buf, len);
    } else {
        snprintf(buf, len, "TLS error %d", rc);
    }
    ERR_clear_error();
}

/* ------------------------------------------------------------------------ */
/* nghttp2 callbacks                                                        */
/* ------------------------------------------------------------------------ */

static int on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags, void *ud)
{
    h2_stream *s = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);

    (void)flags;
    (void)ud;
    if (!s || frame->hd.type != NGHTTP2_HEADERS || s->responded)
        return 0;
    if (namelen == 7 && memcmp(name, ":status", 7) == 0) {
        int status = 0;

        for (size_t i = 0; i < valuelen && i < 3; i++)
            status = status * 10 + (value[i] - '0');
        s->status = status;
    } else if (namelen == 12 && memcmp(name, "content-type", 12) == 0 && !s->content_type) {
        if (!(s->content_type = kl__strndup((const char *)value, valuelen)))
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* the stream is reset */
    }
    return 0;
}

static int on_frame_recv(nghttp2_session *session, const nghttp2_frame *frame, void *ud)
{
    kl__h2 *c = ud;
    h2_stream *s;

    if (frame->hd.type != NGHTTP2_HEADERS || !(frame->hd.flags & NGHTTP2_FLAG_END_HEADERS))
        return 0;
    s = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
    if (!s || s->responded)
        return 0;
    if (s->status >= 100 && s->status < 200) { /* informational: the answer follows */
        s->status = 0;
        kl__free(s->content_type);
        s->content_type = NULL;
        return 0;
    }
    s->responded = 1;
    if (s->arg)
        c->ops->on_response(s->arg, s->status, s->content_type ? s->content_type : "");
    return 0;
}

static int on_data_chunk(nghttp2_session *session, uint8_t flags, int32_t id, const uint8_t *data,
                         size_t len, void *ud)
{
    kl__h2 *c = ud;
    h2_stream *s = nghttp2_session_get_stream_user_data(session, id);

    (void)flags;
    if (!s || !s->arg || len == 0)
        return 0;
    if (c->ops->on_body(s->arg, (const char *)data, len) != 0) {
        s->arg = NULL;
        (void)nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
    }
    return 0;
}

static int on_stream_close(nghttp2_session *session, int32_t id, uint32_t code, void *ud)
{
    kl__h2 *c = ud;
    h2_stream *s = nghttp2_session_get_stream_user_data(session, id);
    kl__h2_end end = {0};
    char detail[128];
    void *arg;

    if (!s)
        return 0;
    arg = s->arg;
    if (code == NGHTTP2_REFUSED_STREAM) {
        end.err = K8SLEASE_ETRANSPORT;
        end.kind = "send";
        end.detail = "the server refused the stream (GOAWAY or REFUSED_STREAM)";
        end.unsent = 1;
    } else if (code != NGHTTP2_NO_ERROR) {
        snprintf(detail, sizeof(detail), "HTTP/2 stream reset: %s", nghttp2_http2_strerror(code));
        end.err = K8SLEASE_ETRANSPORT;
        end.kind = "receive";
        end.detail = detail;
    } else if (!s->responded) {
        end.err = K8SLEASE_EPROTOCOL;
        end.kind = "protocol";
        end.detail = "the stream ended without an answer";
    }
    nghttp2_session_set_stream_user_data(session, id, NULL);
    stream_free(c, s);
    if (arg)
        c->ops->on_close(arg, &end);
    return 0;
}

/* A request's HEADERS never went out: cancelled while it waited for a
 * stream slot, or refused by nghttp2. Its stream was never opened, so no
 * on_stream_close follows. */
static int on_frame_not_send(nghttp2_session *session, const nghttp2_frame *frame, int error,
                             void *ud)
{
    kl__h2 *c = ud;
    h2_stream *s;
    kl__h2_end end = {0};
    void *arg;

    if (frame->hd.type != NGHTTP2_HEADERS ||
        nghttp2_session_get_stream_user_data(session, frame->hd.stream_id))
        return 0;
    for (s = c->streams; s && s->id != frame->hd.stream_id; s = s->next)
        ;
    if (!s)
        return 0;
    arg = s->arg;
    stream_free(c, s);
    if (arg) {
        end.err = error == NGHTTP2_ERR_NOMEM ? K8SLEASE_ENOMEM : K8SLEASE_ETRANSPORT;
        end.kind = "send";
        end.detail = nghttp2_strerror(error);
        end.unsent = 1;
        end.connection = 1;
        c->ops->on_close(arg, &end);
    }
    return 0;
}

static ssize_t read_body(nghttp2_session *session, int32_t id, uint8_t *buf, size_t length,
                         uint32_t *flags, nghttp2_data_source *source, void *ud)
{
    h2_stream *s = source->ptr;
    size_t n = s->body_len - s->body_off;

    (void)session;
    (void)id;
    (void)ud;
    if (n > length)
        n = length;
    if (n > 0)
        memcpy(buf, s->body + s->body_off, n);
    s->body_off += n;
    if (s->body_off == s->body_len)
        *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

/* ------------------------------------------------------------------------ */
/* I/O                                                                      */
/* ------------------------------------------------------------------------ */

static void update_events(kl__h2 *c)
{
    uint32_t ev = EPOLLIN;

    if (c->state == DEAD)
        return;
    if (c->state == CONNECTING || c->want_write)
        ev = c->state == CONNECTING ? EPOLLOUT : EPOLLIN | EPOLLOUT;
    if (set_events(c, ev) < 0)
        fail_with(c, K8SLEASE_ENOMEM, "receive", kl__error_get(), 0);
}

/* Serialise what nghttp2 has queued into c->out, up to about a record. */
static int gather(kl__h2 *c)
{
    c->out.len = c->out_off = 0;
    while (c->out.len < OUT_MAX) {
        const uint8_t *data;
        ssize_t got = nghttp2_session_mem_send(c->session, &data);

        if (got < 0) {
            fail_with(c, got == NGHTTP2_ERR_NOMEM ? K8SLEASE_ENOMEM : K8SLEASE_EPROTOCOL, "send",
                      nghttp2_strerror((int)got), 0);
            return -1;
        }
        if (got == 0)
            break;
        if (kl__buf_append(&c->out, data, (size_t)got) < 0) {
            fail_with(c, K8SLEASE_ENOMEM, "send", "out of memory", 0);
            return -1;
        }
    }
    return 0;
}

void kl__h2_flush(kl__h2 *c)
{
    if (c->state != OPEN)
        return;
    for (;;) {
        int n, rc;
        char why[256];

        if (c->out_off == c->out.len && (gather(c) < 0 || c->out.len == 0))
            break;
        ERR_clear_error();
        n = SSL_write(c->ssl, c->out.data + c->out_off, (int)(c->out.len - c->out_off));
        if (n > 0) {
            c->out_off += (size_t)n;
            c->want_write = 0;
            continue;
        }
        rc = SSL_get_error(c->ssl, n);
        if (rc == SSL_ERROR_WANT_WRITE || rc == SSL_ERROR_WANT_READ) {
            c->want_write = rc == SSL_ERROR_WANT_WRITE;
            break;
        }
        ssl_reason(c, rc, n, why, sizeof(why));
        fail_with(c, K8SLEASE_ETRANSPORT, "send", why, 0);
        return;
    }
    if (c->state == DEAD)
        return;
    /* Keep a record's worth for the next write; a large body's goes. */
    if (c->out_off == c->out.len && c->out.cap > 4 * OUT_MAX) {
        kl__buf_free(&c->out);
        c->out_off = 0;
    }
    update_events(c);
}

/* Read and hand to nghttp2: what OpenSSL has buffered (one recv's worth,
 * the socket being level-triggered), or with drain until the socket has
 * nothing more, at most DRAIN_MAX. */
static void do_read(kl__h2 *c, int drain)
{
    char buf[IN_CHUNK];
    size_t total = 0;

    c->more = 0;
    do {
        int n, rc;
        ssize_t used;

        ERR_clear_error();
        n = SSL_read(c->ssl, buf, sizeof(buf));
        if (n > 0) {
            used = nghttp2_session_mem_recv(c->session, (const uint8_t *)buf, (size_t)n);
            if (used < 0) {
                fail_with(c, used == NGHTTP2_ERR_NOMEM ? K8SLEASE_ENOMEM : K8SLEASE_EPROTOCOL,
                          used == NGHTTP2_ERR_NOMEM ? "receive" : "protocol",
                          nghttp2_strerror((int)used), 0);
                return;
            }
            if (c->state == DEAD)
                return;
            total += (size_t)n;
            if (drain && total >= DRAIN_MAX) {
                c->more = 1;
                break;
            }
            continue;
        }
        rc = SSL_get_error(c->ssl, n);
        if (rc == SSL_ERROR_WANT_READ)
            break;
        if (rc == SSL_ERROR_WANT_WRITE) {
            c->want_write = 1;
            break;
        }
        if (rc == SSL_ERROR_ZERO_RETURN) {
            fail_with(c, K8SLEASE_ETRANSPORT, "receive", "the server closed the connection", 0);
            return;
        }
        {
            char why[256];
            /* TLS 1.3 servers refuse a client certificate after the
             * handshake: the alert arrives on the first read. */
            int tls = rc == SSL_ERROR_SSL && ERR_GET_LIB(ERR_peek_last_error()) == ERR_LIB_SSL;

            ssl_reason(c, rc, n, why, sizeof(why));
            fail_with(c, tls ? K8SLEASE_ETLS : K8SLEASE_ETRANSPORT, tls ? "TLS" : "receive", why,
                      0);
            return;
        }
    } while (drain || SSL_has_pending(c->ssl));
    if (!nghttp2_session_want_read(c->session) && !nghttp2_session_want_write(c->session))
        fail_with(c, K8SLEASE_ETRANSPORT, "receive", "the server ended the HTTP/2 session", 0);
}

static void handshake(kl__h2 *c)
{
    const unsigned char *alpn = NULL;
    unsigned alpn_len = 0;
    int n, rc;
    char why[256];

    ERR_clear_error();
    n = SSL_do_handshake(c->ssl);
    if (n != 1) {
        rc = SSL_get_error(c->ssl, n);
        if (rc == SSL_ERROR_WANT_READ || rc == SSL_ERROR_WANT_WRITE) {
            c->want_write = rc == SSL_ERROR_WANT_WRITE;
            update_events(c);
            return;
        }
        /* Closed or reset before the handshake ended, with no alert: a
         * balancer whose backend is gone (the connection failed, TLS did
         * not; nothing was sent), to be tried again soon, unlike a refusal
         * of TLS. EOF is ZERO_RETURN with SSL_OP_IGNORE_UNEXPECTED_EOF. */
        if (rc == SSL_ERROR_ZERO_RETURN || (rc == SSL_ERROR_SYSCALL && !ERR_peek_last_error())) {
            if (rc == SSL_ERROR_ZERO_RETURN || n == 0 || !errno)
                snprintf(why, sizeof(why), "the server closed the connection");
            else
                kl__strerror(errno, why, sizeof(why));
            ERR_clear_error();
            fail_with(c, K8SLEASE_ETRANSPORT, "TLS handshake", why, 1);
            return;
        }
        ssl_reason(c, rc, n, why, sizeof(why));
        fail_with(c, K8SLEASE_ETLS, "TLS", why, 0);
        return;
    }
    c->want_write = 0;
    SSL_get0_alpn_selected(c->ssl, &alpn, &alpn_len);
    if (alpn_len != 2 || memcmp(alpn, "h2", 2) != 0) {
        kl__h2_end end = {0};

        end.err = K8SLEASE_EPROTOCOL;
        end.kind = "protocol";
        end.detail = "the server does not offer HTTP/2 (ALPN h2)";
        end.connection = 1;
        end.unsent = 1;
        end.no_h2 = 1;
        fail(c, &end);
        return;
    }
    kl__timer_cancel(c->loop, &c->connect_timer);
    c->state = OPEN;
    /* The server's first frames may have come with the handshake's last
     * record, and wait in OpenSSL's buffer: no event would say so. */
    if (SSL_has_pending(c->ssl))
        do_read(c, 0);
    kl__h2_flush(c);
}

static void start_tls(kl__h2 *c)
{
    int err = 0;
    socklen_t len = sizeof(err);

    if (c->connect_err)
        err = c->connect_err;
    else if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
    if (err) {
        char why[128];

        fail_with(c, K8SLEASE_ETRANSPORT, "connect", kl__strerror(err, why, sizeof(why)), 1);
        return;
    }
    c->tcp_up = 1;
    {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);

        if (getsockname(c->fd, (struct sockaddr *)&ss, &sl) == 0)
            c->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                     : ((struct sockaddr_in *)&ss)->sin_port);
    }
    c->state = HANDSHAKE;
    handshake(c);
}

void kl__h2_io(kl__h2 *c, uint32_t events, int drain)
{
    switch (c->state) {
    case CONNECTING:
        start_tls(c);
        return;
    case HANDSHAKE:
        handshake(c);
        return;
    case OPEN:
        break;
    default:
        return;
    }
    if (events & (EPOLLIN | EPOLLERR | EPOLLHUP))
        do_read(c, drain);
    if (c->state == OPEN)
        kl__h2_flush(c);
}

static void on_ready(int fd, uint32_t events, void *arg)
{
    kl__h2 *c = arg;

    (void)fd;
    kl__h2_io(c, events, kl__loop_batching(c->loop));
}

static void on_connect_timer(kl__timer *t, void *arg)
{
    kl__h2 *c = arg;
    char why[96];

    (void)t;
    snprintf(why, sizeof(why), "no connection after %lld ms", (long long)c->connect_ms);
    fail_with(c, K8SLEASE_ETIMEOUT, "timeout", why, !c->tcp_up);
}

void kl__h2_connect_deadline(kl__h2 *c, int64_t ms)
{
    if (c->state == OPEN || c->state == DEAD || ms <= 0 || ms >= c->connect_ms)
        return;
    c->connect_ms = ms;
    kl__timer_arm(c->loop, &c->connect_timer, c->connect_at + ms * KL_NS_PER_MS);
}

/* ------------------------------------------------------------------------ */
/* The connection                                                           */
/* ------------------------------------------------------------------------ */

void kl__tcp_dead_timeout(int fd, int64_t dead_ms)
{
    int on = 1;
    int idle = (int)(dead_ms / 2000), intvl = (int)(dead_ms / 4000), cnt = 3;
    unsigned int timeout = (unsigned int)dead_ms;

    /* Idle connections are probed after half the timeout; a peer that does
     * not acknowledge probes or data for the whole timeout is dropped by the
     * kernel, and what is on it fails instead of waiting for ever. Failures
     * are not fatal: the request timeouts still hold. */
    idle = idle < 1 ? 1 : idle;
    intvl = intvl < 1 ? 1 : intvl;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
    (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
#ifdef TCP_KEEPIDLE
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
#endif
#ifdef TCP_USER_TIMEOUT
    (void)setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &timeout, sizeof(timeout));
#endif
}

static int new_session(kl__h2 *c)
{
    nghttp2_session_callbacks *cbs = NULL;
    nghttp2_option *opt = NULL;
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1024 * 1024},
    };
    int rc;

    if (nghttp2_session_callbacks_new(&cbs) != 0)
        return K8SLEASE_ENOMEM;
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
    nghttp2_session_callbacks_set_on_frame_not_send_callback(cbs, on_frame_not_send);
    if (nghttp2_option_new(&opt) != 0) {
        nghttp2_session_callbacks_del(cbs);
        return K8SLEASE_ENOMEM;
    }
    rc = nghttp2_session_client_new3(&c->session, cbs, c, opt, &h2_mem);
    nghttp2_option_del(opt);
    nghttp2_session_callbacks_del(cbs);
    if (rc != 0)
        return K8SLEASE_ENOMEM;
    if (nghttp2_submit_settings(c->session, NGHTTP2_FLAG_NONE, iv, KL_ARRAY_LEN(iv)) != 0 ||
        nghttp2_session_set_local_window_size(c->session, NGHTTP2_FLAG_NONE, 0, CONN_WINDOW) != 0)
        return K8SLEASE_ENOMEM;
    return 0;
}

static int new_ssl(kl__h2 *c, const kl__h2_config *cfg)
{
    static const unsigned char alpn[] = {2, 'h', '2'};
    unsigned char ip[16];
    int is_ip;

    if (!(c->ssl = SSL_new(cfg->ctx)))
        return K8SLEASE_ENOMEM;
    if (SSL_set_fd(c->ssl, c->fd) != 1 || SSL_set_alpn_protos(c->ssl, alpn, sizeof(alpn)) != 0)
        return K8SLEASE_ENOMEM;
    SSL_set_connect_state(c->ssl);
    if (!cfg->verify_host)
        return 0;
    is_ip = inet_pton(AF_INET, cfg->verify_host, ip) == 1 ||
            inet_pton(AF_INET6, cfg->verify_host, ip) == 1;
    if (is_ip) {
        if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(c->ssl), cfg->verify_host) != 1)
            return K8SLEASE_ENOMEM;
        return 0;
    }
    if (SSL_set_tlsext_host_name(c->ssl, cfg->verify_host) != 1 ||
        SSL_set1_host(c->ssl, cfg->verify_host) != 1)
        return K8SLEASE_ENOMEM;
    return 0;
}

int kl__h2_open(kl__h2 **out, const kl__h2_config *cfg)
{
    kl__h2 *c = kl__calloc(1, sizeof(*c));
    int err;

    *out = NULL;
    if (!c)
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    c->loop = cfg->loop;
    c->ops = cfg->ops;
    c->state = CONNECTING;
    c->connect_ms = cfg->connect_timeout_ms;
    c->connect_at = kl__loop_now(cfg->loop);
    kl__timer_init(&c->connect_timer, on_connect_timer, c);
    c->fd = socket(cfg->addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
        char why[128];

        err = kl__error_set(K8SLEASE_ETRANSPORT, "connect: socket: %s",
                            kl__strerror(errno, why, sizeof(why)));
        kl__free(c);
        return err;
    }
    kl__tcp_dead_timeout(c->fd, cfg->dead_ms);
    if ((err = new_session(c)) < 0 || (err = new_ssl(c, cfg)) < 0) {
        kl__h2_free(c);
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    }
    kl__timer_arm(c->loop, &c->connect_timer, c->connect_at + c->connect_ms * KL_NS_PER_MS);
    /* A failure reported at once is the streams' at the next io (the
     * socket reports EPOLLHUP): they are not submitted yet. */
    if (connect(c->fd, cfg->addr, cfg->addrlen) != 0 && errno != EINPROGRESS)
        c->connect_err = errno;
    if ((err = set_events(c, EPOLLOUT)) < 0) {
        kl__h2_free(c);
        return err;
    }
    *out = c;
    return 0;
}

void kl__h2_free(kl__h2 *c)
{
    if (!c)
        return;
    kl__timer_cancel(c->loop, &c->connect_timer);
    while (c->streams)
        stream_free(c, c->streams);
    if (c->session)
        nghttp2_session_del(c->session);
    if (c->ssl)
        SSL_free(c->ssl);
    if (c->fd >= 0) {
        if (c->events)
            kl__loop_unwatch(c->loop, c->fd);
        close(c->fd);
    }
    kl__buf_free(&c->out);
    kl__free(c);
}

int kl__h2_usable(const kl__h2 *c)
{
    return c->state != DEAD && nghttp2_session_check_request_allowed(c->session);
}

int kl__h2_dead(const kl__h2 *c)
{
    return c->state == DEAD;
}

unsigned kl__h2_port(const kl__h2 *c)
{
    return c->port;
}

int32_t kl__h2_submit(kl__h2 *c, const nghttp2_nv *nva, size_t nvlen, const char *body,
                      size_t body_len, int has_body, void *arg)
{
    h2_stream *s;
    nghttp2_data_provider prd;
    int32_t id;

    if (!kl__h2_usable(c))
        return K8SLEASE_ESTATE;
    if (!(s = kl__calloc(1, sizeof(*s))))
        return K8SLEASE_ENOMEM;
    s->body = body;
    s->body_len = has_body ? body_len : 0;
    s->arg = arg;
    prd.source.ptr = s;
    prd.read_callback = read_body;
    id = nghttp2_submit_request(c->session, NULL, nva, nvlen, has_body ? &prd : NULL, s);
    if (id < 0) {
        kl__free(s);
        return id == NGHTTP2_ERR_NOMEM ? K8SLEASE_ENOMEM : K8SLEASE_ESTATE;
    }
    s->id = id;
    s->next = c->streams;
    if (c->streams)
        c->streams->prev = s;
    c->streams = s;
    return id;
}

void kl__h2_cancel(kl__h2 *c, int32_t id)
{
    h2_stream *s;

    if (!c || id <= 0 || c->state == DEAD)
        return;
    if (!(s = nghttp2_session_get_stream_user_data(c->session, id))) {
        /* Not open yet (waiting for a concurrency slot): find it. */
        for (s = c->streams; s && s->id != id; s = s->next)
            ;
        if (!s)
            return;
    }
    s->arg = NULL;
    (void)nghttp2_submit_rst_stream(c->session, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
}

void kl__h2_fail(kl__h2 *c, int err, const char *kind, const char *detail)
{
    kl__h2_end end = {0};

    end.err = err;
    end.kind = kind;
    end.detail = detail;
    fail(c, &end);
}

int kl__h2_more(const kl__h2 *c)
{
    return c->more;
}

int kl__h2_idle(const kl__h2 *c)
{
    return c->streams == NULL;
}
