/*
 * transport.c - listening socket, TLS with ALPN, and the split by protocol.
 *
 * Why this design: a real kube-apiserver speaks HTTP/2 (ALPN "h2") and
 * HTTP/1.1 on one TLS port. libmicrohttpd can do neither h2 nor ALPN, so
 * the server owns the socket and the TLS session (GnuTLS, offering h2 and
 * http/1.1, requesting - not requiring - a client certificate as
 * libmicrohttpd did). After the handshake:
 *
 *   h2        the connection is served here by an nghttp2 server session
 *             (h2.c) that runs the same request life cycle as HTTP/1.1
 *             (ts_exchange in dispatch.c);
 *   http/1.1  the decrypted bytes are relayed through a socketpair whose
 *             other end was given to libmicrohttpd (h1.c, MHD_add_connection;
 *             the daemon has no TLS and no listening socket of its own), so
 *             HTTP/1.1 keeps libmicrohttpd's parser, chunking and keep-alive.
 *
 * Relaying HTTP/1.1 rather than writing an HTTP/1.1 server keeps every
 * existing behaviour of that path. Client identity survives the relay: a
 * verified client certificate is looked up by the descriptor libmicrohttpd
 * holds (relay_cert_ok); tokens and User-Agent are headers. A `reset`
 * (fault, or a watch closed with abort) marks the relay, which closes the
 * real socket with SO_LINGER 0 (a TCP RST) as soon as libmicrohttpd drops
 * its end. A client that hangs up shows as EOF on libmicrohttpd's end,
 * which is what ts_watch_reap polls.
 *
 * GnuTLS runs on memory buffers (custom push/pull): the socket is read into
 * `in` and written from `out` by the event loop, so TLS never sees EAGAIN on
 * a write and the loop alone decides when to read, write and stop reading
 * (back-pressure: above TS_TCONN_HIGH queued bytes a side stops producing).
 *
 * Stalls (the `stall` fault) model a replica that hangs behind a TCP load
 * balancer: the kernel keeps the connection and ACKs what the client sends,
 * the process does nothing with it. A stalled connection's I/O thread reads
 * nothing from its socket (only EPOLLRDHUP is asked for, so a client that
 * gives up is still noticed and its connection closed), decrypts nothing
 * already read, writes nothing (what sits in `out` stays there) and runs no
 * request; the HTTP/1.1 relay moves nothing either way. The request that
 * hit the rule is held by its exchange (dispatch.c). When the rule ends,
 * ts_transport_stall_sync clears the flag and pokes the thread, which takes
 * up everything where it stopped.
 *
 * Threads: `threads` I/O threads, each with an epoll set holding the shared
 * listening socket (EPOLLEXCLUSIVE), its own connections and an eventfd for
 * pokes from other threads. A connection lives and dies on the thread that
 * accepted it. Restarts stop the threads and close the listener here, so
 * libmicrohttpd never owns a listening socket (the old abort in
 * MHD_quiesce_daemon cannot happen: see ts_transport_stop).
 *
 * Layering: the transport calls down into the protocol modules only, h2.c
 * (h2.h), which it gives each session's connection as ts_tconn_ops, and
 * h1.c (h1.h), which it gives the relays as ts_h1_relays; they run the
 * requests through the dispatch layer. The server is an opaque pointer it
 * hands along. Main-thread commands go through the notify callback of
 * ts_transport_config.
 */
#define _GNU_SOURCE /* accept4, EPOLLEXCLUSIVE */

#include "transport.h"
#include "h1.h"
#include "h2.h"
#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <microhttpd.h>

/* Bytes queued for the socket (or for libmicrohttpd) above which a side stops producing. */
#define TS_TCONN_HIGH (256 * 1024)

enum ev_kind { EV_LISTEN, EV_WAKE, EV_SOCK, EV_PAIR };

typedef struct ts_ev {
    enum ev_kind kind;
    void *p;
} ts_ev;

enum tc_state {
    TC_HANDSHAKE, /* TLS handshake in progress */
    TC_H2,        /* served by an nghttp2 session */
    TC_H1,        /* relayed to libmicrohttpd */
    TC_CLOSING    /* flushing the last bytes (close_notify), then close */
};

typedef struct ts_io ts_io;

struct ts_tconn {
    ts_io *io;
    ts_tconn *prev, *next; /* io->conns */
    ts_tconn *poke_next;   /* io->poked (under io->mu) */
    bool poked;            /* under io->mu */
    char poke_after;       /* HTTP/1.1 after-command from libmicrohttpd (under io->mu) */
    bool dead;             /* closed; freed at the end of the loop round */
    ts_tconn *grave_next;

    int fd;
    ts_ev sock_ev, pair_ev;
    uint32_t sock_mask, pair_mask; /* registered epoll events */
    bool sock_registered, pair_registered;
    bool counted; /* in open_h2 or open_h1 */
    gnutls_session_t tls;
    enum tc_state state;
    ts_buf in; /* ciphertext from the client, in.data[in_off..len) unread */
    size_t in_off;
    ts_buf out; /* ciphertext for the client, out.data[out_off..len) unsent */
    size_t out_off;
    bool cert_ok;
    bool sock_eof; /* FIN or close_notify from the client */
    bool h2_proto; /* counted as h2 (else http/1.1), once established */
    char after;    /* main-thread command once out is flushed */

    /* HTTP/1.1 relay */
    int pair_fd; /* our end; libmicrohttpd has mhd_fd */
    int mhd_fd;
    ts_buf to_mhd; /* plaintext for libmicrohttpd */
    size_t to_mhd_off;
    bool pair_eof;     /* libmicrohttpd closed its end */
    bool pair_drained; /* the last read found nothing */
    bool pair_shut;    /* we shut our writing side (client gone) */
    atomic_bool want_reset;

    ts_h2 *h2;

    /* Stall: set and cleared under t->tmu (with the server lock), obeyed by the I/O thread. */
    atomic_bool stalled;
    bool stall_seen;                   /* I/O thread: it was stalled when last looked at */
    bool stall_listed;                 /* in t->stalls (under tmu) */
    uint64_t stall_rule;               /* under tmu */
    ts_tconn *stall_prev, *stall_next; /* t->stalls (under tmu) */
};

struct ts_io {
    ts_transport *t;
    int epfd, evfd;
    pthread_t thread;
    bool running;
    pthread_mutex_t mu; /* guards poked and stop */
    ts_tconn *poked;
    bool stop;
    ts_tconn *conns; /* owned by the thread */
    ts_tconn *grave;
    ts_ev listen_ev, wake_ev;
};

struct ts_transport {
    ts_server *srv; /* opaque: for the dispatch layer */
    unsigned threads;
    bool no_http2;
    unsigned h2_max_streams;
    void (*notify)(void *ctx, char cmd);
    void *notify_ctx;
    gnutls_certificate_credentials_t creds;
    gnutls_priority_t prio;
    int listen_fd;
    struct MHD_Daemon *h1;
    ts_h1_relays relays; /* what h1 asks of the relays under it */
    ts_io *ios;
    unsigned nios;

    pthread_mutex_t tmu; /* guards by_fd: relays by libmicrohttpd's descriptor; and stalls */
    ts_tconn **by_fd;
    size_t nby_fd;
    ts_tconn *stalls; /* stalled connections */

    atomic_uint_fast64_t open_h2, total_h2, open_h1, total_h1, tls_failures;
};

static void conn_close(ts_tconn *tc, bool rst);
static void conn_update(ts_tconn *tc);
static void relay_from_mhd(ts_tconn *tc);
static void relay_to_mhd(ts_tconn *tc);
static void conn_flush(ts_tconn *tc);

/* ---- GnuTLS on memory buffers ------------------------------------------ */

static ssize_t tls_push(gnutls_transport_ptr_t p, const void *data, size_t n)
{
    ts_tconn *tc = p;
    if (ts_buf_append(&tc->out, data, n) < 0) {
        gnutls_transport_set_errno(tc->tls, ENOMEM);
        return -1;
    }
    return (ssize_t)n;
}

static ssize_t tls_pull(gnutls_transport_ptr_t p, void *data, size_t n)
{
    ts_tconn *tc = p;
    size_t avail = tc->in.len - tc->in_off;
    if (avail == 0) {
        if (tc->sock_eof)
            return 0;
        gnutls_transport_set_errno(tc->tls, EAGAIN);
        return -1;
    }
    if (n > avail)
        n = avail;
    memcpy(data, tc->in.data + tc->in_off, n);
    tc->in_off += n;
    if (tc->in_off == tc->in.len)
        tc->in.len = tc->in_off = 0;
    return (ssize_t)n;
}

static int tls_pull_timeout(gnutls_transport_ptr_t p, unsigned ms)
{
    ts_tconn *tc = p;
    (void)ms;
    return tc->in.len > tc->in_off || tc->sock_eof ? 1 : 0;
}

/* ---- the connection under an HTTP/2 session (ts_tconn_ops, h2.h) -------- */

static int tconn_write(ts_tconn *tc, const void *p, size_t n)
{
    const char *b = p;
    while (n > 0) {
        size_t chunk = n > 16384 ? 16384 : n;
        ssize_t w = gnutls_record_send(tc->tls, b, chunk);
        if (w == GNUTLS_E_AGAIN || w == GNUTLS_E_INTERRUPTED)
            continue; /* cannot happen: the push never blocks */
        if (w <= 0)
            return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

static bool tconn_cert_ok(const ts_tconn *tc)
{
    return tc->cert_ok;
}

static size_t tconn_pending(const ts_tconn *tc)
{
    return tc->out.len - tc->out_off;
}

static bool tconn_full(const ts_tconn *tc, size_t more)
{
    return tconn_pending(tc) + more >= TS_TCONN_HIGH;
}

/* ---- pokes from other threads -------------------------------------------- */

static void tconn_poke(ts_tconn *tc)
{
    ts_io *io = tc->io;
    bool signal = false;
    pthread_mutex_lock(&io->mu);
    if (!tc->poked) {
        tc->poked = true;
        tc->poke_next = io->poked;
        io->poked = tc;
        signal = true;
    }
    pthread_mutex_unlock(&io->mu);
    if (signal) {
        uint64_t one = 1;
        ssize_t rc = write(io->evfd, &one, sizeof(one));
        (void)rc; /* an eventfd only fails when its counter overflows */
    }
}

static void tconn_after(ts_tconn *tc, char cmd)
{
    tc->after = cmd;
}

/* ---- stalls ------------------------------------------------------------------ */

static bool tconn_stalled(const ts_tconn *tc)
{
    return atomic_load(&tc->stalled);
}

/* I/O thread: is tc stalled? Remembers it, so that the end of the stall is seen. */
static bool tc_stalled(ts_tconn *tc)
{
    bool s = atomic_load(&tc->stalled);
    if (s)
        tc->stall_seen = true;
    return s;
}

/* tmu held. */
static void stall_locked(ts_transport *t, ts_tconn *tc, uint64_t rule)
{
    if (!tc->stall_listed) {
        tc->stall_prev = NULL;
        tc->stall_next = t->stalls;
        if (t->stalls)
            t->stalls->stall_prev = tc;
        t->stalls = tc;
        tc->stall_listed = true;
    }
    tc->stall_rule = rule;
    atomic_store(&tc->stalled, true);
    tconn_poke(tc); /* its thread drops EPOLLIN */
}

/* tmu held. */
static void unstall_locked(ts_transport *t, ts_tconn *tc)
{
    if (!tc->stall_listed)
        return;
    if (tc->stall_prev)
        tc->stall_prev->stall_next = tc->stall_next;
    else
        t->stalls = tc->stall_next;
    if (tc->stall_next)
        tc->stall_next->stall_prev = tc->stall_prev;
    tc->stall_prev = tc->stall_next = NULL;
    tc->stall_listed = false;
    atomic_store(&tc->stalled, false);
}

static void tconn_stall(ts_tconn *tc, uint64_t rule)
{
    ts_transport *t = tc->io->t;
    pthread_mutex_lock(&t->tmu);
    stall_locked(t, tc, rule);
    pthread_mutex_unlock(&t->tmu);
}

void ts_transport_stall_sync(ts_transport *t, bool (*alive)(void *ctx, uint64_t rule), void *ctx)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->tmu);
    for (ts_tconn *tc = t->stalls, *next; tc; tc = next) {
        next = tc->stall_next;
        if (!alive(ctx, tc->stall_rule)) {
            unstall_locked(t, tc);
            tconn_poke(tc); /* its thread takes up where it stopped */
        }
    }
    pthread_mutex_unlock(&t->tmu);
}

size_t ts_transport_stalled(ts_transport *t, uint64_t rule)
{
    size_t n = 0;
    if (!t)
        return 0;
    pthread_mutex_lock(&t->tmu);
    for (ts_tconn *tc = t->stalls; tc; tc = tc->stall_next)
        n += !rule || tc->stall_rule == rule;
    pthread_mutex_unlock(&t->tmu);
    return n;
}

static void unpoke(ts_tconn *tc)
{
    ts_io *io = tc->io;
    pthread_mutex_lock(&io->mu);
    if (tc->poked) {
        for (ts_tconn **pp = &io->poked; *pp; pp = &(*pp)->poke_next) {
            if (*pp == tc) {
                *pp = tc->poke_next;
                break;
            }
        }
        tc->poked = false;
    }
    pthread_mutex_unlock(&io->mu);
}

/* ---- relays by libmicrohttpd's descriptor ------------------------------ */

static int table_set(ts_transport *t, int fd, ts_tconn *tc)
{
    int rc = 0;
    pthread_mutex_lock(&t->tmu);
    if ((size_t)fd >= t->nby_fd) {
        size_t n = t->nby_fd ? t->nby_fd : 1024;
        while (n <= (size_t)fd)
            n *= 2;
        ts_tconn **v = realloc(t->by_fd, n * sizeof(*v));
        if (!v) {
            rc = -1;
            goto out;
        }
        memset(v + t->nby_fd, 0, (n - t->nby_fd) * sizeof(*v));
        t->by_fd = v;
        t->nby_fd = n;
    }
    t->by_fd[fd] = tc;
out:
    pthread_mutex_unlock(&t->tmu);
    return rc;
}

/* Only if it is still ours: libmicrohttpd may have closed and reused fd. */
static void table_clear(ts_transport *t, int fd, ts_tconn *tc)
{
    pthread_mutex_lock(&t->tmu);
    if (fd >= 0 && (size_t)fd < t->nby_fd && t->by_fd[fd] == tc)
        t->by_fd[fd] = NULL;
    pthread_mutex_unlock(&t->tmu);
}

static ts_tconn *table_get(ts_transport *t, int fd)
{
    return fd >= 0 && (size_t)fd < t->nby_fd ? t->by_fd[fd] : NULL;
}

/* The relays under libmicrohttpd (ts_h1_relays, h1.h): ctx is the transport. */
static bool relay_cert_ok(void *ctx, int mhd_fd)
{
    ts_transport *t = ctx;
    pthread_mutex_lock(&t->tmu);
    ts_tconn *tc = table_get(t, mhd_fd);
    bool ok = tc && tc->cert_ok;
    pthread_mutex_unlock(&t->tmu);
    return ok;
}

static void relay_reset(void *ctx, int mhd_fd)
{
    ts_transport *t = ctx;
    pthread_mutex_lock(&t->tmu);
    ts_tconn *tc = table_get(t, mhd_fd);
    if (tc)
        atomic_store(&tc->want_reset, true);
    pthread_mutex_unlock(&t->tmu);
}

static int relay_stall(void *ctx, int mhd_fd, uint64_t rule)
{
    ts_transport *t = ctx;
    pthread_mutex_lock(&t->tmu);
    ts_tconn *tc = table_get(t, mhd_fd);
    if (tc)
        stall_locked(t, tc, rule);
    pthread_mutex_unlock(&t->tmu);
    return tc ? 0 : -1;
}

static bool relay_gone(void *ctx, int mhd_fd)
{
    ts_transport *t = ctx;
    pthread_mutex_lock(&t->tmu);
    bool gone = !table_get(t, mhd_fd);
    pthread_mutex_unlock(&t->tmu);
    return gone;
}

static void relay_after(void *ctx, int mhd_fd, char cmd)
{
    ts_transport *t = ctx;
    pthread_mutex_lock(&t->tmu);
    ts_tconn *tc = table_get(t, mhd_fd);
    if (tc) {
        pthread_mutex_lock(&tc->io->mu);
        tc->poke_after = cmd;
        pthread_mutex_unlock(&tc->io->mu);
        tconn_poke(tc);
    }
    pthread_mutex_unlock(&t->tmu);
    if (!tc) /* the client is gone already; the command still stands */
        t->notify(t->notify_ctx, cmd);
}

/* ---- connections ----------------------------------------------------------- */

static int ep_set(ts_io *io, int fd, ts_ev *ev, uint32_t *cur, uint32_t want, bool *registered)
{
    if (*registered && *cur == want)
        return 0;
    struct epoll_event e = {.events = want, .data.ptr = ev};
    int rc = epoll_ctl(io->epfd, *registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &e);
    if (rc == 0) {
        *cur = want;
        *registered = true;
    }
    return rc;
}

/* What each descriptor should wait for, from the buffers' state. */
static void conn_update(ts_tconn *tc)
{
    if (tc->dead)
        return;
    uint32_t sock = 0, pair = 0;
    size_t out = tconn_pending(tc);
    bool room;
    if (tc_stalled(tc)) {
        /*
         * Only a hang-up (EPOLLRDHUP; EPOLLHUP and EPOLLERR always come): the
         * client that gives up is noticed, what it sends stays in the kernel.
         * The relay leaves the epoll set: libmicrohttpd's end must not wake
         * us while nothing may move.
         */
        sock = EPOLLRDHUP;
        if (ep_set(tc->io, tc->fd, &tc->sock_ev, &tc->sock_mask, sock, &tc->sock_registered) < 0) {
            conn_close(tc, false);
            return;
        }
        if (tc->pair_fd >= 0 && tc->pair_registered) {
            epoll_ctl(tc->io->epfd, EPOLL_CTL_DEL, tc->pair_fd, NULL);
            tc->pair_registered = false;
        }
        return;
    }
    switch (tc->state) {
    case TC_HANDSHAKE:
        room = true;
        break;
    case TC_H2:
        room = out < TS_TCONN_HIGH;
        break;
    case TC_H1:
        room = tc->to_mhd.len - tc->to_mhd_off < TS_TCONN_HIGH;
        break;
    default:
        room = false;
    }
    if (room && !tc->sock_eof)
        sock |= EPOLLIN;
    if (out)
        sock |= EPOLLOUT;
    if (ep_set(tc->io, tc->fd, &tc->sock_ev, &tc->sock_mask, sock, &tc->sock_registered) < 0) {
        conn_close(tc, false);
        return;
    }
    if (tc->pair_fd >= 0) {
        if (tc->state == TC_H1 && !tc->pair_eof && out < TS_TCONN_HIGH)
            pair |= EPOLLIN;
        if (tc->to_mhd.len > tc->to_mhd_off)
            pair |= EPOLLOUT;
        if (ep_set(tc->io, tc->pair_fd, &tc->pair_ev, &tc->pair_mask, pair, &tc->pair_registered) <
            0)
            conn_close(tc, false);
    }
}

static void check_after(ts_tconn *tc)
{
    if (tc->after && tconn_pending(tc) == 0 && (tc->state != TC_H1 || tc->pair_drained)) {
        tc->io->t->notify(tc->io->t->notify_ctx, tc->after);
        tc->after = 0;
    }
}

/* HTTP/1.1: our end of the relay; libmicrohttpd reads EOF and drops its side. */
static void close_pair(ts_tconn *tc)
{
    if (tc->pair_fd < 0)
        return;
    table_clear(tc->io->t, tc->mhd_fd, tc);
    close(tc->pair_fd); /* also leaves the epoll set */
    tc->pair_fd = -1;
    tc->pair_registered = false;
}

static void conn_close(ts_tconn *tc, bool rst)
{
    ts_io *io = tc->io;
    ts_transport *t = io->t;
    if (tc->dead)
        return;
    tc->dead = true;
    if (tc->h2) {
        ts_h2_free(tc->h2);
        tc->h2 = NULL;
    }
    close_pair(tc);
    pthread_mutex_lock(&t->tmu);
    bool was_stalled = tc->stall_listed;
    unstall_locked(t, tc);
    pthread_mutex_unlock(&t->tmu);
    /* The client left a stalled HTTP/1.1 connection: h1.c drops the request that stalled it. */
    if (was_stalled && tc->mhd_fd >= 0)
        ts_h1_stall_gone(t->srv, tc->mhd_fd);
    if (rst) {
        struct linger lg = {.l_onoff = 1, .l_linger = 0};
        setsockopt(tc->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    }
    close(tc->fd); /* also leaves the epoll set */
    tc->fd = -1;
    if (tc->counted)
        atomic_fetch_sub(tc->h2_proto ? &t->open_h2 : &t->open_h1, 1);
    /*
     * A command libmicrohttpd handed over for this connection that on_wake
     * has not picked up yet (the client read its answer and hung up first).
     * close_pair cleared the table entry, so no new one can arrive now.
     */
    pthread_mutex_lock(&io->mu);
    if (!tc->after)
        tc->after = tc->poke_after;
    tc->poke_after = 0;
    pthread_mutex_unlock(&io->mu);
    if (tc->after) { /* a restart asked for by this connection still happens */
        t->notify(t->notify_ctx, tc->after);
        tc->after = 0;
    }
    unpoke(tc);
    if (tc->prev)
        tc->prev->next = tc->next;
    else
        io->conns = tc->next;
    if (tc->next)
        tc->next->prev = tc->prev;
    tc->grave_next = io->grave;
    io->grave = tc;
}

static void conn_destroy(ts_tconn *tc)
{
    if (tc->tls)
        gnutls_deinit(tc->tls);
    ts_buf_free(&tc->in);
    ts_buf_free(&tc->out);
    ts_buf_free(&tc->to_mhd);
    free(tc);
}

/* Client finished or libmicrohttpd closed: close_notify, flush, close. */
static void conn_finish(ts_tconn *tc)
{
    if (tc->state == TC_CLOSING)
        return;
    tc->state = TC_CLOSING;
    gnutls_bye(tc->tls, GNUTLS_SHUT_WR); /* queues the alert in out */
    conn_flush(tc);
}

static void start_h1(ts_tconn *tc)
{
    ts_transport *t = tc->io->t;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        conn_close(tc, false);
        return;
    }
    fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
    tc->pair_fd = sv[0];
    tc->mhd_fd = sv[1];
    tc->pair_ev = (ts_ev){EV_PAIR, tc};
    tc->state = TC_H1;
    tc->counted = true;
    atomic_fetch_add(&t->open_h1, 1);
    atomic_fetch_add(&t->total_h1, 1);
    if (table_set(t, sv[1], tc) < 0) {
        close(sv[1]);
        conn_close(tc, false);
        return;
    }
    struct sockaddr_un peer = {.sun_family = AF_UNIX};
    /* libmicrohttpd closes sv[1] itself, also when this fails. */
    if (MHD_add_connection(t->h1, sv[1], (const struct sockaddr *)&peer, sizeof(peer)) != MHD_YES) {
        table_clear(t, sv[1], tc);
        conn_close(tc, false);
        return;
    }
}

/* The connection as its HTTP/2 session sees it (h2.h). */
static const ts_tconn_ops tconn_ops = {
    .write = tconn_write,
    .full = tconn_full,
    .cert_ok = tconn_cert_ok,
    .poke = tconn_poke,
    .after = tconn_after,
    .stall = tconn_stall,
    .stalled = tconn_stalled,
};

static void established(ts_tconn *tc)
{
    ts_transport *t = tc->io->t;
    gnutls_datum_t proto = {0};
    unsigned n = 0, status = 0;

    if (gnutls_certificate_get_peers(tc->tls, &n) && n > 0) {
        /* Verified against our CA and meant for client authentication. */
        gnutls_typed_vdata_st purpose = {.type = GNUTLS_DT_KEY_PURPOSE_OID,
                                         .data = (unsigned char *)GNUTLS_KP_TLS_WWW_CLIENT};
        tc->cert_ok =
            gnutls_certificate_verify_peers(tc->tls, &purpose, 1, &status) == 0 && status == 0;
    }
    if (gnutls_alpn_get_selected_protocol(tc->tls, &proto) == 0 && proto.size == 2 &&
        !memcmp(proto.data, "h2", 2)) {
        tc->state = TC_H2;
        tc->h2_proto = true;
        tc->counted = true;
        atomic_fetch_add(&t->open_h2, 1);
        atomic_fetch_add(&t->total_h2, 1);
        if (!(tc->h2 = ts_h2_new(t->srv, t->h2_max_streams, &tconn_ops, tc))) {
            conn_close(tc, false);
            return;
        }
    } else {
        start_h1(tc);
    }
}

/* Decrypts what arrived and hands it on, as far as there is room. */
static void conn_pump(ts_tconn *tc)
{
    char buf[16384];
    for (;;) {
        if (tc->dead)
            return;
        if (tc_stalled(tc))
            break; /* what was read stays in `in` until the stall ends */
        if (tc->state == TC_HANDSHAKE) {
            int rc = gnutls_handshake(tc->tls);
            if (rc == GNUTLS_E_AGAIN || rc == GNUTLS_E_INTERRUPTED)
                break;
            if (rc < 0) {
                if (!gnutls_error_is_fatal(rc))
                    continue;
                atomic_fetch_add(&tc->io->t->tls_failures, 1);
                conn_flush(tc); /* the alert, if any */
                conn_close(tc, false);
                return;
            }
            established(tc);
            continue;
        }
        if (tc->state == TC_CLOSING)
            break;
        if (tc->state == TC_H2 && tconn_pending(tc) >= TS_TCONN_HIGH)
            break;
        if (tc->state == TC_H1 && tc->to_mhd.len - tc->to_mhd_off >= TS_TCONN_HIGH)
            break;
        ssize_t n = gnutls_record_recv(tc->tls, buf, sizeof(buf));
        if (n == GNUTLS_E_AGAIN || n == GNUTLS_E_INTERRUPTED)
            break;
        if (n == 0 || n == GNUTLS_E_PREMATURE_TERMINATION) {
            tc->sock_eof = true;
            if (tc->state == TC_H2) {
                conn_close(tc, false);
                return;
            }
            break; /* HTTP/1.1: relay_to_mhd shuts the pair down */
        }
        if (n < 0) {
            if (!gnutls_error_is_fatal((int)n))
                continue;
            conn_close(tc, false);
            return;
        }
        if (tc->state == TC_H2) {
            if (ts_h2_recv(tc->h2, (const uint8_t *)buf, (size_t)n) < 0) {
                ts_h2_send(tc->h2); /* the GOAWAY */
                conn_finish(tc);
                return;
            }
        } else if (ts_buf_append(&tc->to_mhd, buf, (size_t)n) < 0) {
            conn_close(tc, false);
            return;
        }
    }
    if (tc->dead)
        return;
    if (tc_stalled(tc)) {
        conn_update(tc);
        return;
    }
    if (tc->state == TC_H2) {
        if (ts_h2_send(tc->h2) < 0 || ts_h2_finished(tc->h2)) {
            conn_finish(tc);
            return;
        }
    } else if (tc->state == TC_H1) {
        relay_to_mhd(tc);
    }
    conn_flush(tc);
}

/* Writes out to the socket; then produces more if it drained. */
static void conn_flush(ts_tconn *tc)
{
    if (!tc->dead && tc_stalled(tc)) {
        conn_update(tc); /* nothing goes out, not even what is queued */
        return;
    }
    for (int round = 0; round < 8 && !tc->dead; round++) {
        while (tc->out.len > tc->out_off) {
            ssize_t w =
                send(tc->fd, tc->out.data + tc->out_off, tc->out.len - tc->out_off, MSG_NOSIGNAL);
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                break;
            if (w <= 0) {
                conn_close(tc, false);
                return;
            }
            tc->out_off += (size_t)w;
        }
        if (tc->out.len == tc->out_off)
            tc->out.len = tc->out_off = 0;
        else
            break; /* the socket is full: EPOLLOUT */
        if (tc->state == TC_CLOSING) {
            conn_close(tc, false);
            return;
        }
        size_t before = tc->out.len;
        if (tc->state == TC_H1)
            relay_from_mhd(tc);
        else if (tc->state == TC_H2 && tc->h2) {
            if (ts_h2_send(tc->h2) < 0) {
                conn_close(tc, false);
                return;
            }
            if (ts_h2_finished(tc->h2)) {
                conn_finish(tc);
                return;
            }
        }
        if (tc->dead || tc->out.len == before)
            break;
    }
    if (tc->dead)
        return;
    check_after(tc);
    conn_update(tc);
}

/* HTTP/1.1: libmicrohttpd's answers, encrypted into out. */
static void relay_from_mhd(ts_tconn *tc)
{
    char buf[16384];
    while (!tc->dead && tc->state == TC_H1 && tconn_pending(tc) < TS_TCONN_HIGH) {
        ssize_t n = read(tc->pair_fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            tc->pair_drained = true;
            break;
        }
        if (n <= 0) {
            /* libmicrohttpd closed the connection. */
            tc->pair_eof = true;
            tc->pair_drained = true;
            close_pair(tc);
            if (atomic_load(&tc->want_reset)) {
                conn_close(tc, true);
                return;
            }
            conn_finish(tc);
            return;
        }
        tc->pair_drained = false;
        if (tconn_write(tc, buf, (size_t)n) < 0) {
            conn_close(tc, false);
            return;
        }
    }
}

/* HTTP/1.1: decrypted requests to libmicrohttpd. */
static void relay_to_mhd(ts_tconn *tc)
{
    while (tc->to_mhd.len > tc->to_mhd_off) {
        ssize_t w = send(tc->pair_fd, tc->to_mhd.data + tc->to_mhd_off,
                         tc->to_mhd.len - tc->to_mhd_off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (w <= 0) { /* libmicrohttpd is gone: its EOF follows on the read side */
            tc->to_mhd.len = tc->to_mhd_off = 0;
            break;
        }
        tc->to_mhd_off += (size_t)w;
    }
    if (tc->to_mhd.len == tc->to_mhd_off)
        tc->to_mhd.len = tc->to_mhd_off = 0;
    if (tc->sock_eof && tc->to_mhd.len == 0 && !tc->pair_shut) {
        shutdown(tc->pair_fd, SHUT_WR); /* libmicrohttpd sees the client leave */
        tc->pair_shut = true;
    }
}

static void on_sock(ts_tconn *tc, uint32_t events)
{
    if (tc_stalled(tc)) {
        /* Nothing is read; a client that gave up (FIN, RST) closes the connection. */
        if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
            conn_close(tc, false);
        else
            conn_update(tc);
        return;
    }
    if ((events & EPOLLERR) || ((events & EPOLLHUP) && tc->sock_eof)) {
        conn_close(tc, false); /* reset, or gone both ways */
        return;
    }
    if (events & (EPOLLIN | EPOLLHUP)) {
        for (int i = 0; i < 16 && !tc->sock_eof; i++) {
            char buf[65536];
            ssize_t n = recv(tc->fd, buf, sizeof(buf), 0);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                break;
            if (n < 0) { /* reset by the client */
                conn_close(tc, false);
                return;
            }
            if (n == 0) {
                tc->sock_eof = true;
                break;
            }
            if (ts_buf_append(&tc->in, buf, (size_t)n) < 0) {
                conn_close(tc, false);
                return;
            }
        }
        conn_pump(tc);
        if (tc->dead)
            return;
        if (tc->sock_eof && (tc->state == TC_HANDSHAKE || tc->state == TC_CLOSING)) {
            conn_close(tc, false);
            return;
        }
    }
    if (events & EPOLLOUT)
        conn_flush(tc);
}

static void on_pair(ts_tconn *tc, uint32_t events)
{
    if (tc->pair_fd < 0)
        return; /* closed earlier in this round */
    if (tc_stalled(tc)) {
        conn_update(tc);
        return;
    }
    if (events & EPOLLOUT) {
        relay_to_mhd(tc);
        conn_pump(tc); /* room again: decrypt what waits */
        if (tc->dead)
            return;
    }
    if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
        relay_from_mhd(tc);
        if (tc->dead)
            return;
        conn_flush(tc);
    }
}

static void on_accept(ts_io *io)
{
    ts_transport *t = io->t;
    for (int i = 0; i < 64; i++) {
        int fd = accept4(t->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return; /* EAGAIN (another thread took it), or EMFILE: retried on the next wakeup */
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        ts_tconn *tc = calloc(1, sizeof(*tc));
        if (!tc || gnutls_init(&tc->tls, GNUTLS_SERVER | GNUTLS_NONBLOCK) != GNUTLS_E_SUCCESS) {
            free(tc);
            close(fd);
            continue;
        }
        tc->io = io;
        tc->fd = fd;
        tc->pair_fd = tc->mhd_fd = -1;
        tc->sock_ev = (ts_ev){EV_SOCK, tc};
        tc->state = TC_HANDSHAKE;
        gnutls_credentials_set(tc->tls, GNUTLS_CRD_CERTIFICATE, t->creds);
        gnutls_certificate_server_set_request(tc->tls, GNUTLS_CERT_REQUEST);
        gnutls_priority_set(tc->tls, t->prio);
        static const gnutls_datum_t both[] = {{(unsigned char *)"h2", 2},
                                              {(unsigned char *)"http/1.1", 8}};
        if (t->no_http2)
            gnutls_alpn_set_protocols(tc->tls, both + 1, 1, GNUTLS_ALPN_SERVER_PRECEDENCE);
        else
            gnutls_alpn_set_protocols(tc->tls, both, 2, GNUTLS_ALPN_SERVER_PRECEDENCE);
        gnutls_transport_set_ptr(tc->tls, tc);
        gnutls_transport_set_push_function(tc->tls, tls_push);
        gnutls_transport_set_pull_function(tc->tls, tls_pull);
        gnutls_transport_set_pull_timeout_function(tc->tls, tls_pull_timeout);
        tc->next = io->conns;
        if (io->conns)
            io->conns->prev = tc;
        io->conns = tc;
        conn_update(tc);
    }
}

static void on_wake(ts_io *io)
{
    uint64_t v;
    ssize_t rc = read(io->evfd, &v, sizeof(v));
    (void)rc;
    pthread_mutex_lock(&io->mu);
    ts_tconn *list = io->poked;
    io->poked = NULL;
    for (ts_tconn *tc = list; tc; tc = tc->poke_next)
        tc->poked = false;
    pthread_mutex_unlock(&io->mu);
    for (ts_tconn *tc = list, *next; tc; tc = next) {
        next = tc->poke_next;
        if (tc->dead)
            continue;
        pthread_mutex_lock(&io->mu);
        char after = tc->poke_after;
        tc->poke_after = 0;
        pthread_mutex_unlock(&io->mu);
        if (tc_stalled(tc)) {
            if (after)
                tc->after = after; /* sent once the stall is over and the answer out */
            conn_update(tc);
            continue;
        }
        /* The stall is over: take up what waits (read, queued, deferred). */
        bool resumed = tc->stall_seen;
        tc->stall_seen = false;
        if (tc->state == TC_H2) {
            ts_h2_wake(tc->h2);
            if (tc->dead)
                continue;
            if (ts_h2_send(tc->h2) < 0) {
                conn_close(tc, false);
                continue;
            }
        } else if (tc->state == TC_H1) {
            if (after)
                tc->after = after;
            relay_from_mhd(tc);
        } else if (after) {
            tc->after = after; /* closing: conn_close sends it */
        }
        if (!tc->dead)
            conn_flush(tc);
        if (resumed && !tc->dead)
            conn_pump(tc);
    }
}

static void *io_main(void *arg)
{
    ts_io *io = arg;
    struct epoll_event evs[64];
    for (;;) {
        int n = epoll_wait(io->epfd, evs, 64, -1);
        if (n < 0 && errno != EINTR)
            break;
        for (int i = 0; i < n; i++) {
            ts_ev *ev = evs[i].data.ptr;
            ts_tconn *tc = ev->p;
            switch (ev->kind) {
            case EV_LISTEN:
                on_accept(io);
                break;
            case EV_WAKE:
                on_wake(io);
                break;
            case EV_SOCK:
                if (!tc->dead)
                    on_sock(tc, evs[i].events);
                break;
            case EV_PAIR:
                if (!tc->dead)
                    on_pair(tc, evs[i].events);
                break;
            }
        }
        while (io->grave) {
            ts_tconn *tc = io->grave;
            io->grave = tc->grave_next;
            conn_destroy(tc);
        }
        pthread_mutex_lock(&io->mu);
        bool stop = io->stop;
        pthread_mutex_unlock(&io->mu);
        if (stop)
            break;
    }
    /*
     * Stopping (exit or restart) drops every connection as a dying process
     * would: closed, with nothing more on their streams (see h2.c).
     */
    while (io->conns)
        conn_close(io->conns, false);
    while (io->grave) {
        ts_tconn *tc = io->grave;
        io->grave = tc->grave_next;
        conn_destroy(tc);
    }
    return NULL;
}

/* ---- life cycle ------------------------------------------------------------ */

int ts_transport_listen(const char *address, unsigned port, unsigned *bound)
{
    bool v6 = strchr(address, ':') != NULL;
    struct sockaddr_storage ss;
    socklen_t sl;
    int one = 1;

    memset(&ss, 0, sizeof(ss));
    if (v6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons((uint16_t)port);
        if (inet_pton(AF_INET6, address, &a->sin6_addr) != 1)
            return -1;
        sl = sizeof(*a);
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_port = htons((uint16_t)port);
        if (inet_pton(AF_INET, address, &a->sin_addr) != 1)
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
    *bound =
        ntohs(v6 ? ((struct sockaddr_in6 *)&ss)->sin6_port : ((struct sockaddr_in *)&ss)->sin_port);
    return fd;
}

ts_transport *ts_transport_new(const ts_transport_config *cfg)
{
    ts_transport *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->srv = cfg->srv;
    t->threads = cfg->threads;
    t->no_http2 = cfg->no_http2;
    t->h2_max_streams = cfg->h2_max_streams;
    t->notify = cfg->notify;
    t->notify_ctx = cfg->notify_ctx;
    t->listen_fd = -1;
    t->relays = (ts_h1_relays){.cert_ok = relay_cert_ok,
                               .reset = relay_reset,
                               .after = relay_after,
                               .stall = relay_stall,
                               .gone = relay_gone,
                               .ctx = t};
    pthread_mutex_init(&t->tmu, NULL);
    gnutls_datum_t crt = {(unsigned char *)cfg->server_crt, (unsigned)strlen(cfg->server_crt)};
    gnutls_datum_t key = {(unsigned char *)cfg->server_key, (unsigned)strlen(cfg->server_key)};
    gnutls_datum_t ca = {(unsigned char *)cfg->ca_crt, (unsigned)strlen(cfg->ca_crt)};
    int rc;
    if ((rc = gnutls_certificate_allocate_credentials(&t->creds)) < 0 ||
        (rc = gnutls_certificate_set_x509_key_mem(t->creds, &crt, &key, GNUTLS_X509_FMT_PEM)) < 0 ||
        (rc = gnutls_certificate_set_x509_trust_mem(t->creds, &ca, GNUTLS_X509_FMT_PEM)) < 0 ||
        (rc = gnutls_priority_init(&t->prio, "NORMAL", NULL)) < 0) {
        ts_log("TLS setup failed: %s", gnutls_strerror(rc));
        ts_transport_free(t);
        return NULL;
    }
    return t;
}

int ts_transport_start(ts_transport *t, int listen_fd)
{
    unsigned n = t->threads ? t->threads : 1;
    if (!(t->h1 = ts_h1_start(t->srv, t->threads, &t->relays))) {
        close(listen_fd);
        return -1;
    }
    t->listen_fd = listen_fd;
    fcntl(listen_fd, F_SETFL, fcntl(listen_fd, F_GETFL) | O_NONBLOCK);
    if (!(t->ios = calloc(n, sizeof(*t->ios))))
        goto fail;
    t->nios = n;
    for (unsigned i = 0; i < n; i++) {
        ts_io *io = &t->ios[i];
        io->t = t;
        io->epfd = epoll_create1(EPOLL_CLOEXEC);
        io->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        pthread_mutex_init(&io->mu, NULL);
        if (io->epfd < 0 || io->evfd < 0)
            goto fail;
        io->listen_ev = (ts_ev){EV_LISTEN, NULL};
        io->wake_ev = (ts_ev){EV_WAKE, NULL};
        struct epoll_event le = {.events = EPOLLIN | EPOLLEXCLUSIVE, .data.ptr = &io->listen_ev};
        struct epoll_event we = {.events = EPOLLIN, .data.ptr = &io->wake_ev};
        if (epoll_ctl(io->epfd, EPOLL_CTL_ADD, listen_fd, &le) < 0 ||
            epoll_ctl(io->epfd, EPOLL_CTL_ADD, io->evfd, &we) < 0)
            goto fail;
        if (pthread_create(&io->thread, NULL, io_main, io) != 0)
            goto fail;
        io->running = true;
    }
    return 0;
fail:
    ts_log("cannot start the transport threads: %s", strerror(errno));
    ts_transport_stop(t);
    return -1;
}

void ts_transport_stop(ts_transport *t)
{
    for (unsigned i = 0; i < t->nios; i++) {
        ts_io *io = &t->ios[i];
        if (!io->running)
            continue;
        pthread_mutex_lock(&io->mu);
        io->stop = true;
        pthread_mutex_unlock(&io->mu);
        uint64_t one = 1;
        ssize_t rc = write(io->evfd, &one, sizeof(one));
        (void)rc;
    }
    for (unsigned i = 0; i < t->nios; i++) {
        ts_io *io = &t->ios[i];
        if (io->running)
            pthread_join(io->thread, NULL);
        if (io->epfd >= 0)
            close(io->epfd);
        if (io->evfd >= 0)
            close(io->evfd);
        pthread_mutex_destroy(&io->mu);
    }
    free(t->ios);
    t->ios = NULL;
    t->nios = 0;
    if (t->listen_fd >= 0)
        close(t->listen_fd);
    t->listen_fd = -1;
    /*
     * libmicrohttpd last: its ends of the relays read EOF once the
     * connections above are closed. MHD_quiesce_daemon is not used any
     * more: it removed the listening socket from each worker's epoll set
     * while the worker, seeing was_quiesced, could remove it too; the loser
     * got ENOENT and MHD aborted ("Failed to remove listen FD from epoll
     * set", daemon.c:5531 in 0.9.75). libmicrohttpd has no listening socket
     * now.
     */
    if (t->h1)
        MHD_stop_daemon(t->h1);
    t->h1 = NULL;
}

void ts_transport_free(ts_transport *t)
{
    if (!t)
        return;
    ts_transport_stop(t);
    if (t->creds)
        gnutls_certificate_free_credentials(t->creds);
    if (t->prio)
        gnutls_priority_deinit(t->prio);
    free(t->by_fd);
    pthread_mutex_destroy(&t->tmu);
    free(t);
}

json_t *ts_transport_stats_json(ts_transport *t)
{
    if (!t)
        return json_object();
    return json_pack("{s:{s:I, s:I}, s:{s:I, s:I}, s:I, s:I}", "h2", "open",
                     (json_int_t)atomic_load(&t->open_h2), "total",
                     (json_int_t)atomic_load(&t->total_h2), "http1", "open",
                     (json_int_t)atomic_load(&t->open_h1), "total",
                     (json_int_t)atomic_load(&t->total_h1), "tls_failures",
                     (json_int_t)atomic_load(&t->tls_failures), "stalled",
                     (json_int_t)ts_transport_stalled(t, 0));
}
