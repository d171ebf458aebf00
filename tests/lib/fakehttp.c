/* The fake HTTP(S) server of the unit tests: see fakehttp.h.
 *
 * HTTP/2: an accepting thread; per connection a thread that does its TLS
 * (GnuTLS) and HTTP/2 (nghttp2) I/O, the only one to touch them; per
 * request a thread that runs the handler, which hands its answer to the
 * connection's thread (under the connection's lock, and a byte on its wake
 * pipe). A stream's body waits in its buffer until nghttp2 asks for it; a
 * handler that produces faster waits for room. The connection and each
 * stream are freed by the last thread that holds them. */
/* accept4, pipe2 */
#define _GNU_SOURCE 1
#include "fakehttp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gnutls/gnutls.h>
#include <nghttp2/nghttp2.h>

#include <stdarg.h>
#include <setjmp.h>
#include <cmocka.h>

/* A stream's answer waiting to go out at most: its handler waits beyond. */
#define OUT_MAX (256 * 1024)
#define NHDR    32

struct kl_fakehttp_req {
    kl_fakehttp *srv;
    struct MHD_Connection *mhd; /* HTTP/1.1 */
    struct h2stream *h2;        /* HTTP/2 */
    int answered;
};

/* ------------------------------------------------------------------------ */
/* HTTP/1.1: libmicrohttpd                                                  */
/* ------------------------------------------------------------------------ */

typedef struct upload {
    char body[KL_FAKEHTTP_BODY_MAX + 1];
    size_t len;
} upload;

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *data,
                                  size_t *data_size, void **con_cls)
{
    kl_fakehttp *s = cls;
    upload *u = *con_cls;
    kl_fakehttp_req r = {0};

    (void)version;
    if (!u) {
        *con_cls = calloc(1, sizeof(upload));
        return *con_cls ? MHD_YES : MHD_NO;
    }
    if (*data_size) {
        size_t n = *data_size;

        if (n > KL_FAKEHTTP_BODY_MAX - u->len)
            n = KL_FAKEHTTP_BODY_MAX - u->len;
        memcpy(u->body + u->len, data, n);
        u->len += n;
        *data_size = 0;
        return MHD_YES;
    }
    if (s->handler)
        return s->handler(s->arg, c, method, url, u->body, u->len);
    r.srv = s;
    r.mhd = c;
    s->serve(s->arg, &r, method, url, u->body, u->len);
    if (!r.answered)
        kl_fakehttp_respond(&r, 500, "text/plain", "the handler did not answer");
    return MHD_YES;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode code)
{
    (void)cls;
    (void)c;
    (void)code;
    free(*con_cls);
    *con_cls = NULL;
}

static void start_h1(kl_fakehttp *s, const char *key_pem, const char *cert_pem,
                     const char *trust_pem)
{
    struct sockaddr_in sa;
    struct MHD_OptionItem opts[5];
    const union MHD_DaemonInfo *info;
    /* A thread per connection: handlers block on purpose. */
    unsigned int flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD;
    int tls = key_pem && cert_pem, n = 0;

    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = 0;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    opts[n++] = (struct MHD_OptionItem){MHD_OPTION_SOCK_ADDR, 0, &sa};
    if (tls) {
        flags |= MHD_USE_TLS;
        opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, (void *)key_pem};
        opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, (void *)cert_pem};
        if (trust_pem)
            opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_TRUST, 0, (void *)trust_pem};
    }
    opts[n] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    s->daemon = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_NOTIFY_COMPLETED,
                                 on_completed, NULL, MHD_OPTION_ARRAY, opts, MHD_OPTION_END);
    assert_non_null(s->daemon);
    info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    assert_non_null(info);
    s->port = info->port;
    assert_true(s->port > 0);
    snprintf(s->url, sizeof(s->url), "%s://127.0.0.1:%d", tls ? "https" : "http", s->port);
}

enum MHD_Result kl_fakehttp_reply(struct MHD_Connection *c, unsigned int status,
                                  const char *content_type, const char *body)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
    enum MHD_Result ret;

    if (content_type)
        MHD_add_response_header(r, "Content-Type", content_type);
    ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

/* ------------------------------------------------------------------------ */
/* HTTP/2: nghttp2 over GnuTLS                                              */
/* ------------------------------------------------------------------------ */

typedef struct h2stream {
    struct h2stream *next; /* conn->streams */
    struct h2conn *conn;
    int32_t id;
    int refs; /* the connection's (until the stream closes) and the handler's */
    char method[16], path[512], authority[128];
    char *hname[NHDR], *hvalue[NHDR];
    int nhdr;
    char body[KL_FAKEHTTP_BODY_MAX + 1];
    size_t body_len;
    /* The answer, under conn->mu. */
    int answer;    /* status and type are set: to submit */
    int submitted; /* given to nghttp2 */
    unsigned status;
    char type[128];
    char *out; /* its body, out_off of it sent */
    size_t out_len, out_off, out_cap;
    int out_end;  /* the whole body is in out */
    int deferred; /* nghttp2 waits for out */
    int closed;   /* over: the handler stops producing */
} h2stream;

typedef struct h2conn {
    struct h2conn *next; /* server's conns */
    struct kl_fakehttp_h2 *srv;
    int fd, wake[2];
    gnutls_session_t tls;
    nghttp2_session *ng;
    int cert_ok;
    pthread_mutex_t mu;
    pthread_cond_t cond; /* room in a stream's out, or a stream closed */
    h2stream *streams;
    int refs; /* its thread and each handler's */
} h2conn;

struct kl_fakehttp_h2 {
    kl_fakehttp *s;
    pthread_mutex_t mu;
    pthread_cond_t cond; /* a thread ended */
    int threads;         /* running, under mu */
    h2conn *conns;       /* under mu */
    int lfd, stop[2];
    gnutls_certificate_credentials_t cred;
    int want_cert;
};

static void thread_started(struct kl_fakehttp_h2 *h)
{
    pthread_mutex_lock(&h->mu);
    h->threads++;
    pthread_mutex_unlock(&h->mu);
}

static void thread_ended(struct kl_fakehttp_h2 *h)
{
    pthread_mutex_lock(&h->mu);
    h->threads--;
    pthread_cond_broadcast(&h->cond);
    pthread_mutex_unlock(&h->mu);
}

static void wake(h2conn *c)
{
    (void)!write(c->wake[1], "x", 1);
}

static void stream_free(h2stream *st)
{
    for (int i = 0; i < st->nhdr; i++) {
        free(st->hname[i]);
        free(st->hvalue[i]);
    }
    free(st->out);
    free(st);
}

/* Drop a reference to st; c->mu held. */
static void stream_unref(h2stream *st)
{
    if (--st->refs == 0)
        stream_free(st);
}

/* Drop a reference to c; the last frees it. */
static void conn_unref(h2conn *c)
{
    int last;

    pthread_mutex_lock(&c->mu);
    last = --c->refs == 0;
    pthread_mutex_unlock(&c->mu);
    if (!last)
        return;
    close(c->wake[0]);
    close(c->wake[1]);
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* Append to a stream's body; c->mu held. */
static int out_append(h2stream *st, const char *data, size_t len)
{
    if (len == 0)
        return 0;
    if (st->out_off > 0 && st->out_off == st->out_len)
        st->out_off = st->out_len = 0;
    if (st->out_len + len > st->out_cap) {
        size_t cap = st->out_cap ? st->out_cap : 4096;
        char *grown;

        while (cap < st->out_len + len)
            cap *= 2;
        if (!(grown = realloc(st->out, cap)))
            return -1;
        st->out = grown;
        st->out_cap = cap;
    }
    memcpy(st->out + st->out_len, data, len);
    st->out_len += len;
    return 0;
}

static ssize_t read_out(nghttp2_session *ng, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
                        nghttp2_data_source *src, void *ud)
{
    h2stream *st = src->ptr;
    h2conn *c = ud;
    size_t n;

    (void)ng;
    (void)id;
    pthread_mutex_lock(&c->mu);
    n = st->out_len - st->out_off < len ? st->out_len - st->out_off : len;
    if (n > 0)
        memcpy(buf, st->out + st->out_off, n);
    st->out_off += n;
    if (st->out_off == st->out_len && st->out_end) {
        *flags |= NGHTTP2_DATA_FLAG_EOF;
    } else if (n == 0) {
        st->deferred = 1;
        pthread_mutex_unlock(&c->mu);
        return NGHTTP2_ERR_DEFERRED;
    }
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->mu);
    return (ssize_t)n;
}

/* What the handlers answered goes to nghttp2 (the connection's thread). */
static void take_answers(h2conn *c)
{
    pthread_mutex_lock(&c->mu);
    for (h2stream *st = c->streams; st; st = st->next) {
        if (st->answer && !st->submitted) {
            char status[8];
            nghttp2_nv nv[2] = {
                {(uint8_t *)":status", (uint8_t *)status, 7, 0, NGHTTP2_NV_FLAG_NONE},
                {(uint8_t *)"content-type", (uint8_t *)st->type, 12, strlen(st->type),
                 NGHTTP2_NV_FLAG_NONE},
            };
            nghttp2_data_provider prd;

            snprintf(status, sizeof(status), "%u", st->status);
            nv[0].valuelen = strlen(status);
            prd.source.ptr = st;
            prd.read_callback = read_out;
            st->submitted = 1;
            (void)nghttp2_submit_response(c->ng, st->id, nv, st->type[0] ? 2 : 1, &prd);
        } else if (st->submitted && st->deferred && (st->out_len > st->out_off || st->out_end)) {
            st->deferred = 0;
            (void)nghttp2_session_resume_data(c->ng, st->id);
        }
    }
    pthread_mutex_unlock(&c->mu);
}

static int on_begin_headers(nghttp2_session *ng, const nghttp2_frame *frame, void *ud)
{
    h2conn *c = ud;
    h2stream *st;

    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    if (!(st = calloc(1, sizeof(*st))))
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    st->conn = c;
    st->id = frame->hd.stream_id;
    st->refs = 1;
    pthread_mutex_lock(&c->mu);
    st->next = c->streams;
    c->streams = st;
    pthread_mutex_unlock(&c->mu);
    nghttp2_session_set_stream_user_data(ng, st->id, st);
    return 0;
}

static int on_header(nghttp2_session *ng, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags, void *ud)
{
    h2stream *st = nghttp2_session_get_stream_user_data(ng, frame->hd.stream_id);

    (void)flags;
    (void)ud;
    if (!st)
        return 0;
    if (namelen == 7 && memcmp(name, ":method", 7) == 0)
        snprintf(st->method, sizeof(st->method), "%.*s", (int)valuelen, value);
    else if (namelen == 5 && memcmp(name, ":path", 5) == 0)
        snprintf(st->path, sizeof(st->path), "%.*s", (int)valuelen, value);
    else if (namelen == 10 && memcmp(name, ":authority", 10) == 0)
        snprintf(st->authority, sizeof(st->authority), "%.*s", (int)valuelen, value);
    else if (name[0] != ':' && st->nhdr < NHDR) {
        st->hname[st->nhdr] = strndup((const char *)name, namelen);
        st->hvalue[st->nhdr] = strndup((const char *)value, valuelen);
        if (st->hname[st->nhdr] && st->hvalue[st->nhdr])
            st->nhdr++;
    }
    return 0;
}

static int on_data_chunk(nghttp2_session *ng, uint8_t flags, int32_t id, const uint8_t *data,
                         size_t len, void *ud)
{
    h2stream *st = nghttp2_session_get_stream_user_data(ng, id);

    (void)flags;
    (void)ud;
    if (st) {
        size_t n =
            len < KL_FAKEHTTP_BODY_MAX - st->body_len ? len : KL_FAKEHTTP_BODY_MAX - st->body_len;

        memcpy(st->body + st->body_len, data, n);
        st->body_len += n;
    }
    return 0;
}

static void *handler_main(void *arg)
{
    h2stream *st = arg;
    h2conn *c = st->conn;
    struct kl_fakehttp_h2 *h = c->srv;
    kl_fakehttp_req r = {0};

    r.srv = h->s;
    r.h2 = st;
    h->s->serve(h->s->arg, &r, st->method, st->path, st->body, st->body_len);
    if (!r.answered)
        kl_fakehttp_respond(&r, 500, "text/plain", "the handler did not answer");
    pthread_mutex_lock(&c->mu);
    stream_unref(st);
    pthread_mutex_unlock(&c->mu);
    conn_unref(c);
    thread_ended(h);
    return NULL;
}

/* The request is whole: its handler runs. */
static int on_frame_recv(nghttp2_session *ng, const nghttp2_frame *frame, void *ud)
{
    h2conn *c = ud;
    h2stream *st;
    pthread_t t;
    pthread_attr_t attr;
    int rc;

    if ((frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) ||
        !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM) ||
        !(st = nghttp2_session_get_stream_user_data(ng, frame->hd.stream_id)))
        return 0;
    st->body[st->body_len] = '\0';
    pthread_mutex_lock(&c->mu);
    st->refs++;
    c->refs++;
    pthread_mutex_unlock(&c->mu);
    thread_started(c->srv);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    rc = pthread_create(&t, &attr, handler_main, st);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        pthread_mutex_lock(&c->mu);
        st->refs--;
        c->refs--;
        pthread_mutex_unlock(&c->mu);
        thread_ended(c->srv);
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    return 0;
}

static int on_stream_close(nghttp2_session *ng, int32_t id, uint32_t code, void *ud)
{
    h2conn *c = ud;
    h2stream *st = nghttp2_session_get_stream_user_data(ng, id);

    (void)code;
    if (!st)
        return 0;
    pthread_mutex_lock(&c->mu);
    for (h2stream **p = &c->streams; *p; p = &(*p)->next)
        if (*p == st) {
            *p = st->next;
            break;
        }
    st->closed = 1;
    pthread_cond_broadcast(&c->cond);
    stream_unref(st);
    pthread_mutex_unlock(&c->mu);
    return 0;
}

/* Whatever nghttp2 has to send. -1: the connection is over. */
static int send_all(h2conn *c)
{
    for (;;) {
        const uint8_t *data;
        ssize_t n = nghttp2_session_mem_send(c->ng, &data);

        if (n < 0)
            return -1;
        if (n == 0)
            return 0;
        while (n > 0) {
            ssize_t w = gnutls_record_send(c->tls, data, (size_t)n);

            if (w == GNUTLS_E_AGAIN || w == GNUTLS_E_INTERRUPTED)
                continue;
            if (w < 0)
                return -1;
            data += w;
            n -= w;
        }
    }
}

static int new_session(h2conn *c)
{
    nghttp2_session_callbacks *cbs;
    nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 1000}};
    int rc;

    if (nghttp2_session_callbacks_new(&cbs) != 0)
        return -1;
    nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
    rc = nghttp2_session_server_new(&c->ng, cbs, c);
    nghttp2_session_callbacks_del(cbs);
    if (rc != 0)
        return -1;
    return nghttp2_submit_settings(c->ng, NGHTTP2_FLAG_NONE, iv, 1) == 0 ? 0 : -1;
}

static int peer_cert_ok(gnutls_session_t tls)
{
    unsigned int n = 0, status = 1;

    if (!gnutls_certificate_get_peers(tls, &n) || n == 0)
        return 0;
    return gnutls_certificate_verify_peers2(tls, &status) == 0 && status == 0;
}

/* The connection's thread: its TLS and HTTP/2 I/O, until either side ends
 * it (or kl_fakehttp_stop shuts its socket). */
static void *conn_main(void *arg)
{
    h2conn *c = arg;
    struct kl_fakehttp_h2 *h = c->srv;
    char buf[16384];
    int rc;

    do
        rc = gnutls_handshake(c->tls);
    while (rc < 0 && !gnutls_error_is_fatal(rc));
    if (rc == 0 && new_session(c) == 0) {
        c->cert_ok = peer_cert_ok(c->tls);
        for (;;) {
            struct pollfd pfd[2] = {{c->fd, POLLIN, 0}, {c->wake[0], POLLIN, 0}};
            ssize_t n;

            take_answers(c);
            if (send_all(c) < 0 ||
                (!nghttp2_session_want_read(c->ng) && !nghttp2_session_want_write(c->ng)))
                break;
            if (gnutls_record_check_pending(c->tls) == 0 && poll(pfd, 2, -1) < 0 && errno != EINTR)
                break;
            if (pfd[1].revents) {
                char drain[64];

                while (read(c->wake[0], drain, sizeof(drain)) > 0)
                    ;
            }
            if (!pfd[0].revents && gnutls_record_check_pending(c->tls) == 0)
                continue;
            n = gnutls_record_recv(c->tls, buf, sizeof(buf));
            if (n == GNUTLS_E_AGAIN || n == GNUTLS_E_INTERRUPTED)
                continue;
            if (n <= 0 || nghttp2_session_mem_recv(c->ng, (uint8_t *)buf, (size_t)n) < 0)
                break;
        }
    }
    /* Over: the handlers stop producing; the streams go with their last
     * holder. */
    pthread_mutex_lock(&h->mu);
    for (h2conn **p = &h->conns; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            break;
        }
    pthread_mutex_unlock(&h->mu);
    pthread_mutex_lock(&c->mu);
    while (c->streams) {
        h2stream *st = c->streams;

        c->streams = st->next;
        st->closed = 1;
        stream_unref(st);
    }
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->mu);
    if (c->ng)
        nghttp2_session_del(c->ng);
    gnutls_deinit(c->tls);
    close(c->fd);
    conn_unref(c);
    thread_ended(h);
    return NULL;
}

/* GnuTLS's writes, without SIGPIPE when the client has gone. */
static ssize_t push(gnutls_transport_ptr_t ptr, const void *data, size_t len)
{
    return send((int)(intptr_t)ptr, data, len, MSG_NOSIGNAL);
}

static void accept_one(struct kl_fakehttp_h2 *h)
{
    static const gnutls_datum_t alpn = {(unsigned char *)"h2", 2};
    h2conn *c;
    pthread_t t;
    pthread_attr_t attr;
    int fd = accept4(h->lfd, NULL, NULL, SOCK_CLOEXEC);

    if (fd < 0)
        return;
    if (!(c = calloc(1, sizeof(*c))) || pipe2(c->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        free(c);
        close(fd);
        return;
    }
    c->srv = h;
    c->fd = fd;
    c->refs = 1;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cond, NULL);
    gnutls_init(&c->tls, GNUTLS_SERVER);
    gnutls_set_default_priority(c->tls);
    gnutls_credentials_set(c->tls, GNUTLS_CRD_CERTIFICATE, h->cred);
    if (h->want_cert)
        gnutls_certificate_server_set_request(c->tls, GNUTLS_CERT_REQUEST);
    gnutls_alpn_set_protocols(c->tls, &alpn, 1, GNUTLS_ALPN_MANDATORY);
    gnutls_transport_set_int(c->tls, fd);
    gnutls_transport_set_push_function(c->tls, push);
    pthread_mutex_lock(&h->mu);
    c->next = h->conns;
    h->conns = c;
    h->threads++;
    pthread_mutex_unlock(&h->mu);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, conn_main, c) != 0) {
        /* as if the client went at once: its thread's end, here */
        shutdown(fd, SHUT_RDWR);
        conn_main(c);
    }
    pthread_attr_destroy(&attr);
}

static void *accept_main(void *arg)
{
    struct kl_fakehttp_h2 *h = arg;

    for (;;) {
        struct pollfd pfd[2] = {{h->lfd, POLLIN, 0}, {h->stop[0], POLLIN, 0}};

        if (poll(pfd, 2, -1) < 0 && errno != EINTR)
            break;
        if (pfd[1].revents)
            break;
        if (pfd[0].revents)
            accept_one(h);
    }
    thread_ended(h);
    return NULL;
}

static void start_h2(kl_fakehttp *s, const char *key_pem, const char *cert_pem,
                     const char *trust_pem)
{
    struct kl_fakehttp_h2 *h = calloc(1, sizeof(*h));
    gnutls_datum_t key = {(unsigned char *)key_pem, (unsigned)strlen(key_pem)};
    gnutls_datum_t cert = {(unsigned char *)cert_pem, (unsigned)strlen(cert_pem)};
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    pthread_t t;
    pthread_attr_t attr;

    assert_non_null(h);
    h->s = s;
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cond, NULL);
    assert_int_equal(gnutls_certificate_allocate_credentials(&h->cred), 0);
    assert_int_equal(gnutls_certificate_set_x509_key_mem(h->cred, &cert, &key, GNUTLS_X509_FMT_PEM),
                     0);
    if (trust_pem) {
        gnutls_datum_t trust = {(unsigned char *)trust_pem, (unsigned)strlen(trust_pem)};

        assert_true(gnutls_certificate_set_x509_trust_mem(h->cred, &trust, GNUTLS_X509_FMT_PEM) >
                    0);
        h->want_cert = 1;
    }
    assert_int_equal(pipe2(h->stop, O_CLOEXEC), 0);
    h->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(h->lfd >= 0);
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(h->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(h->lfd, 128), 0);
    assert_int_equal(getsockname(h->lfd, (struct sockaddr *)&sa, &len), 0);
    s->port = ntohs(sa.sin_port);
    snprintf(s->url, sizeof(s->url), "https://127.0.0.1:%d", s->port);
    s->h2 = h;
    h->threads = 1;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    assert_int_equal(pthread_create(&t, &attr, accept_main, h), 0);
    pthread_attr_destroy(&attr);
}

static void stop_h2(struct kl_fakehttp_h2 *h)
{
    (void)!write(h->stop[1], "x", 1);
    pthread_mutex_lock(&h->mu);
    for (h2conn *c = h->conns; c; c = c->next)
        shutdown(c->fd, SHUT_RDWR);
    while (h->threads > 0)
        pthread_cond_wait(&h->cond, &h->mu);
    pthread_mutex_unlock(&h->mu);
    close(h->lfd);
    close(h->stop[0]);
    close(h->stop[1]);
    gnutls_certificate_free_credentials(h->cred);
    pthread_cond_destroy(&h->cond);
    pthread_mutex_destroy(&h->mu);
    free(h);
}

/* ------------------------------------------------------------------------ */
/* Either                                                                   */
/* ------------------------------------------------------------------------ */

void kl_fakehttp_serve(kl_fakehttp *s, kl_fakehttp_proto proto, kl_fakehttp_serve_cb handler,
                       void *arg, const char *key_pem, const char *cert_pem, const char *trust_pem)
{
    memset(s, 0, sizeof(*s));
    s->serve = handler;
    s->arg = arg;
    if (proto == KL_FAKEHTTP_H2) {
        assert_true(key_pem && cert_pem);
        start_h2(s, key_pem, cert_pem, trust_pem);
    } else {
        start_h1(s, key_pem, cert_pem, trust_pem);
    }
}

void kl_fakehttp_start(kl_fakehttp *s, kl_fakehttp_handler handler, void *arg, const char *key_pem,
                       const char *cert_pem, const char *trust_pem)
{
    memset(s, 0, sizeof(*s));
    s->handler = handler;
    s->arg = arg;
    start_h1(s, key_pem, cert_pem, trust_pem);
}

void kl_fakehttp_stop(kl_fakehttp *s)
{
    if (s->daemon)
        MHD_stop_daemon(s->daemon);
    s->daemon = NULL;
    if (s->h2)
        stop_h2(s->h2);
    s->h2 = NULL;
}

const char *kl_fakehttp_header(kl_fakehttp_req *r, const char *name)
{
    h2stream *st = r->h2;

    if (r->mhd)
        return MHD_lookup_connection_value(r->mhd, MHD_HEADER_KIND, name);
    if (strcasecmp(name, "Host") == 0)
        return st->authority[0] ? st->authority : NULL;
    for (int i = 0; i < st->nhdr; i++)
        if (strcasecmp(st->hname[i], name) == 0)
            return st->hvalue[i];
    return NULL;
}

int kl_fakehttp_client_cert_ok(kl_fakehttp_req *r)
{
    const union MHD_ConnectionInfo *ci;

    if (r->h2)
        return r->h2->conn->cert_ok;
    ci = MHD_get_connection_info(r->mhd, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    return ci && peer_cert_ok((gnutls_session_t)ci->tls_session);
}

/* An HTTP/2 answer's head; the body follows in out. */
static void h2_answer(h2stream *st, unsigned status, const char *content_type)
{
    h2conn *c = st->conn;

    pthread_mutex_lock(&c->mu);
    st->answer = 1;
    st->status = status;
    snprintf(st->type, sizeof(st->type), "%s", content_type ? content_type : "");
    pthread_mutex_unlock(&c->mu);
}

void kl_fakehttp_respond(kl_fakehttp_req *r, unsigned status, const char *content_type,
                         const char *body)
{
    h2stream *st = r->h2;

    r->answered = 1;
    if (r->mhd) {
        (void)kl_fakehttp_reply(r->mhd, status, content_type, body);
        return;
    }
    h2_answer(st, status, content_type);
    pthread_mutex_lock(&st->conn->mu);
    (void)out_append(st, body, strlen(body));
    st->out_end = 1;
    pthread_mutex_unlock(&st->conn->mu);
    wake(st->conn);
}

void kl_fakehttp_respond_stream(kl_fakehttp_req *r, unsigned status, const char *content_type,
                                uint64_t size, kl_fakehttp_reader reader, void *cls)
{
    h2stream *st = r->h2;
    h2conn *c;
    char buf[16384];
    uint64_t pos = 0;

    r->answered = 1;
    if (r->mhd) {
        struct MHD_Response *resp =
            MHD_create_response_from_callback(size, 64 * 1024, reader, cls, NULL);

        if (content_type)
            MHD_add_response_header(resp, "Content-Type", content_type);
        (void)MHD_queue_response(r->mhd, status, resp);
        MHD_destroy_response(resp);
        return;
    }
    c = st->conn;
    h2_answer(st, status, content_type);
    wake(c);
    while (size == KL_FAKEHTTP_SIZE_UNKNOWN || pos < size) {
        size_t max = size != KL_FAKEHTTP_SIZE_UNKNOWN && size - pos < sizeof(buf)
                         ? (size_t)(size - pos)
                         : sizeof(buf);
        ssize_t n;
        int over;

        pthread_mutex_lock(&c->mu);
        while (!st->closed && st->out_len - st->out_off > OUT_MAX)
            pthread_cond_wait(&c->cond, &c->mu);
        over = st->closed;
        pthread_mutex_unlock(&c->mu);
        if (over || (n = reader(cls, pos, buf, max)) < 0)
            break;
        pthread_mutex_lock(&c->mu);
        (void)out_append(st, buf, (size_t)n);
        pthread_mutex_unlock(&c->mu);
        wake(c);
        pos += (uint64_t)n;
    }
    pthread_mutex_lock(&c->mu);
    st->out_end = 1;
    pthread_mutex_unlock(&c->mu);
    wake(c);
}
