/* The libcurl transport (core/transport.h): what the native one cannot
 * serve (etcd, a server named by a host name, which libcurl resolves off
 * the loop thread, proxies, exec credentials, a server without HTTP/2), on
 * one libcurl multi handle driven by the loop: each socket libcurl asks for
 * is watched (CURLMOPT_SOCKETFUNCTION, kl__loop_watch) and handed to
 * curl_multi_socket_action when it is ready, and libcurl's timer
 * (CURLMOPT_TIMERFUNCTION) is a deadline of the loop's waits (timeout_ms)
 * run by the loop's run hook: not a loop timer, which counts as an
 * election's (kl__loop_counts). Unlike curl_multi_perform,
 * which runs every transfer at each call and polls each one's socket, this
 * runs only the transfers of a ready socket: an idle watch costs nothing
 * when a renewal goes out.
 *
 * Nothing of the request layer runs inside a libcurl callback: the write
 * and header callbacks only hand bytes up (kl__req_body, which buffers),
 * and ended transfers are reported after curl_multi_socket_action returned.
 *
 * Connections: requests for any number of elections share the multi
 * handle's connection cache (HTTP/2 multiplexing when the server offers
 * it). Each socket libcurl opens is remembered with its addresses, so that
 * the connection a transfer went on is known by its local and remote
 * address and port (CURLOPT_PREREQFUNCTION gives them), which no two open
 * sockets share, and can be shut down when the request layer abandons it. */
/* SO_DOMAIN is not POSIX: glibc shows it with _DEFAULT_SOURCE. */
#define _DEFAULT_SOURCE 1
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <curl/curl.h>

#include "core/clock.h"
#include "core/h2.h"
#include "core/transport.h"

#if LIBCURL_VERSION_NUM < 0x074d00
#error "k8slease needs libcurl >= 7.77 (CURLOPT_SSLCERT_BLOB)"
#endif

/* Connections for plain requests: at a few ms each, enough for thousands of
 * elections renewing every few seconds; more only cost memory (TLS state)
 * and handshakes in the burst of a start. Every open stream adds one: over
 * HTTP/1.1 a watch holds its connection for minutes, and requests must never
 * queue behind watches. Over HTTP/2 all of them share a few connections. */
#define REQUEST_CONNECTIONS 64L
/* Concurrent streams assumed per HTTP/2 connection (as core/native.c):
 * libcurl follows the server's SETTINGS on each connection; this only
 * sizes how many connections it may open, so that streams never wait
 * behind watches. */
#define H2_STREAMS 100L
/* Easy handles kept for reuse: a new one costs an allocation of its buffers
 * and every option again. At most what can be active at once. */
#define SPARE_EASY KL__HTTP_MAX_ACTIVE
/* Each easy handle's receive buffer (CURLOPT_BUFFERSIZE, see easy_setup). */
#define EASY_BUFFER_SIZE 4096L

/* A socket libcurl opened, until it closes it. */
typedef struct sock {
    struct sock *next;
    int fd;
    uint64_t id; /* its connection, for the transfers on it */
    int keyed;   /* local and peer are known */
    struct sockaddr_storage local, peer;
} sock;

typedef struct xfer {
    struct xfer *prev, *next; /* c->xfers */
    struct curl_tr *c;
    kl__http_req *req;
    CURL *easy;
    struct curl_slist *headers;
    uint64_t conn; /* the sock id of its connection, 0: not known (yet) */
    int stream, fresh;
    int abandoned; /* its connection was abandoned */
    int no_socket; /* no memory to open its connection */
    char errbuf[CURL_ERROR_SIZE];
} xfer;

typedef struct curl_tr {
    kl__transport t;
    const kl__http_conf *conf;
    char *base;                    /* prefix of the configured server's URLs */
    struct curl_slist *connect_to; /* its tls-server-name rule, NULL: none */
    const char *protocols;
    CURLM *multi;
    CURL *spare[SPARE_EASY]; /* easy handles set up, idle */
    int nspare;
    xfer *xfers; /* every transfer in the multi handle */
    sock *socks; /* every socket libcurl has open */
    uint64_t next_id;
    int64_t due;  /* monotonic ns when libcurl's timer is due, -1: none */
    long streams; /* transfers of streams */
    long hedging; /* transfers of hedges (each on a new connection) */
    long version; /* CURL_HTTP_VERSION_* of the last answer, 0: none yet */
    int destroying;
} curl_tr;

static const kl__transport_ops curl_ops;

/* Free a header list that may hold a credential (the Authorization line),
 * each line wiped first. Accepts NULL. */
static void free_secret_headers(struct curl_slist *list)
{
    for (struct curl_slist *l = list; l; l = l->next)
        kl__wipe(l->data, strlen(l->data));
    curl_slist_free_all(list);
}

/* ------------------------------------------------------------------------ */
/* Sockets and connections                                                  */
/* ------------------------------------------------------------------------ */

/* Sockets are close-on-exec from birth: a child the program forks and
 * execs (the CLI's supervised command) must not keep the connection to the
 * API server open after we close it, or hold a TLS session it cannot use.
 * Each is remembered until libcurl closes it, and has room in the loop's
 * watch table (libcurl's socket callback cannot fail). Without memory for
 * either, the transfer that opens the connection fails. */
static curl_socket_t on_opensocket(void *arg, curlsocktype purpose, struct curl_sockaddr *addr)
{
    xfer *x = arg;
    curl_tr *c = x->c;
    int fd = socket(addr->family, addr->socktype | SOCK_CLOEXEC, addr->protocol);
    sock *s;

    (void)purpose;
    if (fd < 0)
        return CURL_SOCKET_BAD;
    if (!(s = kl__calloc(1, sizeof(*s))) || kl__loop_reserve(c->conf->loop, fd) < 0) {
        kl__free(s);
        close(fd);
        x->no_socket = 1;
        return CURL_SOCKET_BAD;
    }
    s->fd = fd;
    s->id = ++c->next_id;
    s->next = c->socks;
    c->socks = s;
    return fd;
}

static int on_closesocket(void *arg, curl_socket_t fd)
{
    curl_tr *c = arg;

    kl__loop_unwatch(c->conf->loop, fd);
    for (sock **p = &c->socks; *p; p = &(*p)->next)
        if ((*p)->fd == fd) {
            sock *s = *p;

            *p = s->next;
            kl__free(s);
            break;
        }
    return close(fd);
}

static unsigned port_of(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET)
        return ntohs(((const struct sockaddr_in *)ss)->sin_port);
    if (ss->ss_family == AF_INET6)
        return ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
    return 0;
}

/* Whether ss is the address ip (text) and port. */
static int same_address(const struct sockaddr_storage *ss, const char *ip, int port)
{
    unsigned char a[16];

    if ((int)port_of(ss) != port)
        return 0;
    if (ss->ss_family == AF_INET)
        return inet_pton(AF_INET, ip, a) == 1 &&
               memcmp(a, &((const struct sockaddr_in *)ss)->sin_addr, 4) == 0;
    if (ss->ss_family == AF_INET6)
        return inet_pton(AF_INET6, ip, a) == 1 &&
               memcmp(a, &((const struct sockaddr_in6 *)ss)->sin6_addr, 16) == 0;
    return 0;
}

/* The connection a transfer goes on, new or reused (libcurl 7.80): the
 * socket with these addresses. */
#if LIBCURL_VERSION_NUM >= 0x075000
static int on_prereq(void *arg, char *primary_ip, char *local_ip, int primary_port, int local)
{
    xfer *x = arg;

    x->conn = 0;
    for (sock *s = x->c->socks; s; s = s->next) {
        socklen_t ll = sizeof(s->local), pl = sizeof(s->peer);

        if (!s->keyed && (getsockname(s->fd, (struct sockaddr *)&s->local, &ll) != 0 ||
                          getpeername(s->fd, (struct sockaddr *)&s->peer, &pl) != 0))
            continue; /* not connected (yet) */
        s->keyed = 1;
        if (same_address(&s->local, local_ip, local) &&
            same_address(&s->peer, primary_ip, primary_port)) {
            x->conn = s->id;
            break;
        }
    }
    return CURL_PREREQFUNC_OK;
}
#endif

static int on_sockopt(void *arg, curl_socket_t fd, curlsocktype purpose)
{
    curl_tr *c = arg;

    if (purpose == CURLSOCKTYPE_IPCXN)
        kl__tcp_dead_timeout(fd, c->conf->dead_ms);
    return CURL_SOCKOPT_OK;
}

/* Shut the transfer's connection down: libcurl then sees it end, fails
 * every transfer still on it at once and opens a new connection for the
 * next one. Over HTTP/1.1 libcurl closes a connection whose transfer is
 * removed anyway; over HTTP/2 a cancelled stream would leave the
 * connection in the cache, and the next requests would wait on it too. */
static int abandon(kl__transport *t, void *arg, unsigned *port)
{
    curl_tr *c = (curl_tr *)t;
    xfer *x = arg;
    sock *s;

    *port = 0;
    if (!x->conn)
        return 0;
    for (s = c->socks; s && s->id != x->conn; s = s->next)
        ;
    if (!s)
        return 0;
    for (xfer *y = c->xfers; y; y = y->next)
        if (y->conn == s->id)
            y->abandoned = 1;
    *port = port_of(&s->local);
    (void)shutdown(s->fd, SHUT_RDWR);
    x->conn = 0;
    return 1;
}

#if LIBCURL_VERSION_NUM < 0x080800
/* The open descriptors, sorted by readdir order; NULL when /proc is not
 * there or out of memory (then nothing is fixed: best effort). */
static int *list_fds(size_t *n)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *ent;
    int *fds = NULL, *grown;
    size_t cap = 0;

    *n = 0;
    if (!d)
        return NULL;
    while ((ent = readdir(d))) {
        /* not the directory's own descriptor: closed on return, its number
         * may well be the next socket's */
        if (ent->d_name[0] < '0' || ent->d_name[0] > '9' || atoi(ent->d_name) == dirfd(d))
            continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 64;
            if (!(grown = kl__realloc(fds, cap * sizeof(*fds)))) {
                kl__free(fds);
                closedir(d);
                *n = 0;
                return NULL;
            }
            fds = grown;
        }
        fds[(*n)++] = atoi(ent->d_name);
    }
    closedir(d);
    return fds;
}

/* libcurl before 8.8 opens the wakeup socket pair of a multi handle without
 * close-on-exec (curl issue 13618): mark the AF_UNIX sockets that appeared
 * across curl_multi_init(), so a child the program execs does not inherit
 * them. An AF_UNIX socket another thread opens in that instant is marked
 * too; only a program that hands such sockets to exec'd children by
 * inheritance, at that very moment, could tell. */
static CURLM *multi_init_cloexec(void)
{
    size_t n_before = 0, n_after = 0;
    int *before = list_fds(&n_before), *after;
    CURLM *multi = curl_multi_init();

    if (!multi || !before) {
        kl__free(before);
        return multi;
    }
    after = list_fds(&n_after);
    for (size_t i = 0; i < n_after; i++) {
        int fd = after[i], domain = 0, seen = 0;
        socklen_t len = sizeof(domain);

        for (size_t j = 0; j < n_before && !seen; j++)
            seen = before[j] == fd;
        if (!seen && getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 && domain == AF_UNIX)
            (void)fcntl(fd, F_SETFD, fcntl(fd, F_GETFD) | FD_CLOEXEC);
    }
    kl__free(after);
    kl__free(before);
    return multi;
}
#else
static CURLM *multi_init_cloexec(void)
{
    return curl_multi_init();
}
#endif

/*
 * How many connections libcurl may open to the server. Over HTTP/1.1 each
 * request and each stream needs its own. Over HTTP/2 they all share one
 * connection as far as its streams go: libcurl would otherwise open a new
 * connection whenever one is busy, up to the limit, and keep them all.
 * Until the first answer says which, HTTP/1.1's (CURLOPT_PIPEWAIT keeps the
 * requests of a burst waiting for the first connection's ALPN). Each hedge
 * in flight needs a new connection of its own on top.
 */
static void set_limits(curl_tr *c)
{
    long n = c->version == CURL_HTTP_VERSION_2_0
                 ? (c->streams + KL__HTTP_MAX_ACTIVE + H2_STREAMS - 1) / H2_STREAMS
                 : REQUEST_CONNECTIONS + c->streams;

    n += c->hedging;
    curl_multi_setopt(c->multi, CURLMOPT_MAX_HOST_CONNECTIONS, n);
    curl_multi_setopt(c->multi, CURLMOPT_MAXCONNECTS, n);
}

/* ------------------------------------------------------------------------ */
/* On the loop                                                              */
/* ------------------------------------------------------------------------ */

/* One of libcurl's sockets is ready: tell libcurl, as its own poll would
 * say it (Curl_socket_check). */
static void on_ready(int fd, uint32_t events, void *arg)
{
    curl_tr *c = arg;
    int running, mask = 0;

    if (events & (EPOLLIN | EPOLLERR | EPOLLHUP))
        mask |= CURL_CSELECT_IN;
    if (events & (EPOLLOUT | EPOLLERR | EPOLLHUP))
        mask |= CURL_CSELECT_OUT;
    curl_multi_socket_action(c->multi, fd, mask, &running);
}

/* libcurl's wish for a socket: the events the loop watches it for (the
 * loop's table makes a repeated wish, which libcurl says whenever another
 * transfer starts on a shared HTTP/2 connection, cost nothing). */
static int on_socket(CURL *e, curl_socket_t fd, int what, void *arg, void *sockp)
{
    curl_tr *c = arg;
    uint32_t events;

    (void)e;
    (void)sockp;
    if (what == CURL_POLL_REMOVE) {
        kl__loop_unwatch(c->conf->loop, fd);
        return 0;
    }
    events = (what & CURL_POLL_IN ? EPOLLIN : 0) | (what & CURL_POLL_OUT ? EPOLLOUT : 0);
    /* Not -1 on failure, which would end the whole multi handle for good:
     * the transfers on this socket end by their own deadlines, and the next
     * wish asks again. (Sockets opened through on_opensocket have room.) */
    if (kl__loop_watch(c->conf->loop, fd, events, on_ready, c) < 0)
        kl__log_printf(c->conf->log, K8SLEASE_LOG_ERROR, "%s", kl__error_get());
    return 0;
}

/* libcurl's timer: due in timeout_ms (-1: none). libcurl rounds down to
 * the millisecond, and a call before its time does nothing but ask for
 * another wake-up: one millisecond more. */
static int on_timer(CURLM *multi, long timeout_ms, void *arg)
{
    curl_tr *c = arg;

    (void)multi;
    c->due = timeout_ms < 0
                 ? -1
                 : kl__clock_mono_ns() + (timeout_ms > 0 ? timeout_ms + 1 : 0) * KL_NS_PER_MS;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Transfers                                                                */
/* ------------------------------------------------------------------------ */

/* How a failed transfer ended, from libcurl's code. */
static void map_error(const xfer *x, CURLcode rc, kl__xfer_end *end, char *detail, size_t len)
{
    const char *d = x->errbuf[0] ? x->errbuf : curl_easy_strerror(rc);
    size_t n;

    snprintf(detail, len, "%s", d);
    n = strlen(detail);
    while (n > 0 && (detail[n - 1] == '\n' || detail[n - 1] == '\r'))
        detail[--n] = '\0';
    end->err = K8SLEASE_ETRANSPORT;
    end->kind = "transport";
    end->detail = detail;
    switch (rc) {
    case CURLE_OPERATION_TIMEDOUT:
        end->err = K8SLEASE_ETIMEOUT;
        end->kind = "timeout";
        break;
    case CURLE_SSL_CONNECT_ERROR:
        /* Closed or reset before the handshake ended, with no alert (a
         * balancer whose backend is gone): the connection failed, not TLS,
         * as the native transport says. */
        if (strstr(detail, "SSL_ERROR_SYSCALL") || strstr(detail, "unexpected eof") ||
            strstr(detail, "Connection reset by peer")) {
            snprintf(detail, len, "%s",
                     strstr(detail, "reset") ? "Connection reset by peer"
                                             : "the server closed the connection");
            end->kind = "TLS handshake";
            end->connection = end->unsent = 1;
            break;
        }
        /* fall through */
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CRL_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
    case CURLE_SSL_SHUTDOWN_FAILED:
    case CURLE_SSL_ENGINE_NOTFOUND:
    case CURLE_SSL_ENGINE_SETFAILED:
    case CURLE_SSL_ENGINE_INITFAILED:
    case CURLE_USE_SSL_FAILED:
    case CURLE_SSL_CLIENTCERT:
        end->err = K8SLEASE_ETLS;
        end->kind = "TLS";
        end->connection = 1;
        break;
    case CURLE_COULDNT_RESOLVE_HOST:
        end->kind = "resolve";
        end->connection = end->unsent = 1;
        break;
    case CURLE_COULDNT_CONNECT:
        end->kind = "connect";
        end->connection = end->unsent = 1;
        if (x->no_socket) {
            end->err = K8SLEASE_ENOMEM;
            end->kind = "out of memory";
            snprintf(detail, len, "no room for a connection");
        }
        break;
    case CURLE_SEND_ERROR:
        end->kind = "send";
        break;
    case CURLE_RECV_ERROR:
        /* TLS 1.3 servers refuse a client certificate (or its absence)
         * after the handshake: the alert arrives as a receive error. */
        if (strstr(detail, " alert ")) {
            end->err = K8SLEASE_ETLS;
            end->kind = "TLS";
            break;
        }
        end->kind = "receive";
        break;
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
        end->kind = "receive";
        break;
    case CURLE_WEIRD_SERVER_REPLY:
    case CURLE_BAD_CONTENT_ENCODING:
        end->err = K8SLEASE_EPROTOCOL;
        end->kind = "protocol";
        break;
    case CURLE_OUT_OF_MEMORY:
        end->err = K8SLEASE_ENOMEM;
        end->kind = "out of memory";
        break;
    default:
        break;
    }
    end->abandoned = x->abandoned;
}

/* Only for streams: the blank line ending the headers (for HTTP/2 too:
 * libcurl writes the same blank line) tells their status. */
static size_t on_header(char *data, size_t size, size_t nitems, void *arg)
{
    xfer *x = arg;
    size_t len = size * nitems;
    long status = 0;

    if ((len == 2 && data[0] == '\r' && data[1] == '\n') || (len == 1 && data[0] == '\n')) {
        curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
        kl__req_headers(x->req, status);
    }
    return len;
}

static size_t on_write(char *data, size_t size, size_t nmemb, void *arg)
{
    xfer *x = arg;
    size_t len = size * nmemb;

    return kl__req_body(x->req, data, len) == 0 ? len : 0;
}

/* Each new TLS connection's context: the loop's TLS setup. */
static CURLcode on_ssl_ctx(CURL *e, void *ctx, void *arg)
{
    (void)e;
    return kl__tls_setup(arg, ctx) < 0 ? CURLE_OUT_OF_MEMORY : CURLE_OK;
}

/* The options every transfer of this transport shares, set once per easy
 * handle. */
static CURLcode easy_setup(curl_tr *c, CURL *e)
{
    long verify = !kl__tls_insecure(c->conf->tls);
    CURLcode rc;

    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    /* A Lease or an event is a few hundred bytes: libcurl's default 16 KB
     * receive buffer per handle would be most of a handle's memory, and
     * SPARE_EASY of them stay allocated. Over HTTP/2 it does not size the
     * reads from the socket (the connection's own buffer does). */
    curl_easy_setopt(e, CURLOPT_BUFFERSIZE, EASY_BUFFER_SIZE);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
    curl_easy_setopt(e, CURLOPT_PIPEWAIT, 1L);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, on_opensocket);
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, on_closesocket);
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETDATA, c);
#if LIBCURL_VERSION_NUM >= 0x075000
    curl_easy_setopt(e, CURLOPT_PREREQFUNCTION, on_prereq);
#endif
    curl_easy_setopt(e, CURLOPT_SOCKOPTFUNCTION, on_sockopt);
    curl_easy_setopt(e, CURLOPT_SOCKOPTDATA, c);
    if ((rc = curl_easy_setopt(e, CURLOPT_USERAGENT, c->conf->user_agent)) != CURLE_OK ||
#if LIBCURL_VERSION_NUM >= 0x075500
        (rc = curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, c->protocols)) != CURLE_OK)
#else
        (rc = curl_easy_setopt(e, CURLOPT_PROTOCOLS,
                               strcmp(c->protocols, "http") == 0 ? CURLPROTO_HTTP
                                                                 : CURLPROTO_HTTPS)) != CURLE_OK)
#endif
        return rc;
    /* The trust anchors, the configuration's client certificate and the
     * policy: the loop's TLS setup (core/tls.c), as the native transport's. */
    curl_easy_setopt(e, CURLOPT_CAINFO, NULL);
    curl_easy_setopt(e, CURLOPT_CAPATH, NULL);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, verify);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, verify ? 2L : 0L);
    curl_easy_setopt(e, CURLOPT_SSL_CTX_DATA, c->conf->tls);
    return curl_easy_setopt(e, CURLOPT_SSL_CTX_FUNCTION, on_ssl_ctx);
}

/* An easy handle: a spare one, or a new one set up. */
static CURL *easy_get(curl_tr *c, CURLcode *rc)
{
    CURL *e;

    *rc = CURLE_OK;
    if (c->nspare > 0)
        return c->spare[--c->nspare];
    if (!(e = curl_easy_init())) {
        *rc = CURLE_OUT_OF_MEMORY;
        return NULL;
    }
    if ((*rc = easy_setup(c, e)) != CURLE_OK) {
        curl_easy_cleanup(e);
        return NULL;
    }
    return e;
}

/* Keep a handle no transfer uses for the next one, or free it. Nothing of
 * the transfer it served may stay reachable from it. */
static void easy_put(curl_tr *c, CURL *e)
{
    if (c->destroying || c->nspare == SPARE_EASY) {
        curl_easy_cleanup(e);
        return;
    }
    curl_easy_setopt(e, CURLOPT_PRIVATE, NULL);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, NULL);
#if LIBCURL_VERSION_NUM >= 0x075000
    curl_easy_setopt(e, CURLOPT_PREREQDATA, NULL);
#endif
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, NULL);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, NULL);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, NULL);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, NULL);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, NULL);
    curl_easy_setopt(e, CURLOPT_SSLCERT_BLOB, NULL);
    curl_easy_setopt(e, CURLOPT_SSLKEY_BLOB, NULL);
    curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    c->spare[c->nspare++] = e;
}

static int add_header(struct curl_slist **list, const char *line)
{
    struct curl_slist *l = line ? curl_slist_append(*list, line) : NULL;

    if (!l)
        return K8SLEASE_ENOMEM;
    *list = l;
    return 0;
}

static int build_headers(const kl__launch *l, struct curl_slist **out)
{
    struct curl_slist *h = NULL;
    char *line = NULL;
    int err = 0;

    if (l->content_type)
        line = kl__sprintf("Content-Type: %s", l->content_type);
    else if (l->has_body)
        line = kl__strdup("Content-Type:"); /* not curl's form-urlencoded default */
    if (((l->content_type || l->has_body) && (err = add_header(&h, line)) < 0) ||
        (err = add_header(&h, "Accept: application/json")) < 0 ||
        (err = add_header(&h, "Expect:")) < 0 ||
        (l->auth_line && (err = add_header(&h, l->auth_line)) < 0))
        goto out;
    *out = h;
    h = NULL;
out:
    kl__free(line);
    free_secret_headers(h);
    return err;
}

/* What differs between transfers; every option is set, as the handle may
 * have served another one before. */
static CURLcode xfer_setup(curl_tr *c, xfer *x, const kl__launch *l, const char *url)
{
    struct curl_blob cert = {NULL, 0, CURL_BLOB_COPY}, key = {NULL, 0, CURL_BLOB_COPY};
    CURL *e = x->easy;
    const char *method = l->method;
    CURLcode rc;

    curl_easy_setopt(e, CURLOPT_PRIVATE, x);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, x);
#if LIBCURL_VERSION_NUM >= 0x075000
    curl_easy_setopt(e, CURLOPT_PREREQDATA, x);
#endif
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x->errbuf);
    curl_easy_setopt(e, CURLOPT_FRESH_CONNECT, l->fresh ? 1L : 0L);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, l->stream ? on_header : NULL);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, l->stream ? x : NULL);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)l->connect_ms);
    /* An exec plugin's certificate, as blobs libcurl loads: connections
     * are matched on them, so new ones go to the server once the plugin
     * gives another. The configuration's own comes with the TLS setup
     * (on_ssl_ctx), which leaves a certificate libcurl loaded alone. */
    if (l->cert_pem && l->key_pem) {
        cert.data = (void *)l->cert_pem;
        cert.len = strlen(l->cert_pem);
        key.data = (void *)l->key_pem;
        key.len = strlen(l->key_pem);
    }
    if ((rc = curl_easy_setopt(e, CURLOPT_SSLCERT_BLOB, cert.data ? &cert : NULL)) != CURLE_OK ||
        (rc = curl_easy_setopt(e, CURLOPT_SSLKEY_BLOB, key.data ? &key : NULL)) != CURLE_OK ||
        (rc = curl_easy_setopt(e, CURLOPT_URL, url)) != CURLE_OK ||
        (rc = curl_easy_setopt(e, CURLOPT_CONNECT_TO, !l->server ? c->connect_to : NULL)) !=
            CURLE_OK ||
        (rc = curl_easy_setopt(e, CURLOPT_HTTPHEADER, x->headers)) != CURLE_OK)
        return rc;
    if (l->has_body) {
        /* the request layer keeps the body as long as the transfer: no
         * second copy */
        if ((rc = curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)l->body_len)) !=
                CURLE_OK ||
            (rc = curl_easy_setopt(e, CURLOPT_POSTFIELDS, l->body)) != CURLE_OK)
            return rc;
        if (strcmp(method, "POST") == 0)
            method = NULL;
    } else {
        curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
        if (strcmp(method, "GET") == 0)
            method = NULL;
    }
    return curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
}

/* Out of the multi handle and the transport's list (its easy handle keeps
 * what the transfer got). */
static void xfer_detach(curl_tr *c, xfer *x)
{
    if (!x->prev && c->xfers != x)
        return;
    if (x->prev)
        x->prev->next = x->next;
    else
        c->xfers = x->next;
    if (x->next)
        x->next->prev = x->prev;
    x->prev = x->next = NULL;
    curl_multi_remove_handle(c->multi, x->easy);
    c->streams -= x->stream;
    c->hedging -= x->fresh;
    set_limits(c);
}

/* Detached, freed; the easy handle goes back. */
static void xfer_free(curl_tr *c, xfer *x)
{
    xfer_detach(c, x);
    if (x->easy)
        easy_put(c, x->easy);
    free_secret_headers(x->headers);
    kl__free(x);
}

static int launch(kl__transport *t, kl__http_req *req, const kl__launch *l, void **out)
{
    curl_tr *c = (curl_tr *)t;
    const char *base = l->server ? l->server : c->base;
    xfer *x = kl__calloc(1, sizeof(*x));
    char *url = kl__sprintf("%s%s", base, l->path);
    CURLcode rc = CURLE_OUT_OF_MEMORY;
    int err;

    *out = NULL;
    if (!x || !url || build_headers(l, &x->headers) < 0) {
        err = kl__error_set(K8SLEASE_ENOMEM, "%s%s: out of memory", base, l->path);
        goto fail;
    }
    x->c = c;
    x->req = req;
    x->stream = l->stream;
    x->fresh = l->fresh;
    if (!(x->easy = easy_get(c, &rc)) || (rc = xfer_setup(c, x, l, url)) != CURLE_OK) {
        err =
            kl__error_set(rc == CURLE_OUT_OF_MEMORY ? K8SLEASE_ENOMEM : K8SLEASE_EINVAL,
                          "%s %s%s: libcurl: %s", l->method, base, l->path, curl_easy_strerror(rc));
        goto fail;
    }
    if (curl_multi_add_handle(c->multi, x->easy) != CURLM_OK) {
        err =
            kl__error_set(K8SLEASE_ETRANSPORT, "%s%s: libcurl refused the request", base, l->path);
        goto fail;
    }
    x->next = c->xfers;
    if (c->xfers)
        c->xfers->prev = x;
    c->xfers = x;
    c->streams += x->stream;
    c->hedging += x->fresh;
    set_limits(c);
    kl__free(url);
    *out = x;
    return 0;
fail:
    kl__free(url);
    if (x)
        xfer_free(c, x);
    return err;
}

static void cancel(kl__transport *t, void *arg)
{
    xfer_free((curl_tr *)t, arg);
}

/* Report the transfers that ended. */
static void run(kl__transport *t)
{
    curl_tr *c = (curl_tr *)t;
    CURLMsg *msg;
    int left, running;

    if (c->due >= 0 && kl__loop_now(c->conf->loop) >= c->due) {
        /* libcurl tells the next one through on_timer */
        c->due = -1;
        curl_multi_socket_action(c->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    }
    while ((msg = curl_multi_info_read(c->multi, &left))) {
        kl__xfer_end end = {0};
        char *p = NULL, *type = NULL, detail[CURL_ERROR_SIZE + 64];
        long version = 0;
        xfer *x;

        if (msg->msg != CURLMSG_DONE)
            continue;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &p);
        x = (xfer *)(void *)p;
        if (msg->data.result != CURLE_OK) {
            map_error(x, msg->data.result, &end, detail, sizeof(detail));
        } else {
            curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &end.status);
            curl_easy_getinfo(x->easy, CURLINFO_CONTENT_TYPE, &type);
            end.content_type = type ? type : "";
            /* An answer: size the connections for its protocol. */
            curl_easy_getinfo(x->easy, CURLINFO_HTTP_VERSION, &version);
            if (version && version != c->version) {
                c->version = version;
                set_limits(c);
            }
        }
        /* Out of the multi handle first (its content type stays). */
        xfer_detach(c, x);
        kl__req_end(x->req, &end);
        xfer_free(c, x);
    }
}

/* Until libcurl's timer is due. */
static long timeout_ms(kl__transport *t)
{
    curl_tr *c = (curl_tr *)t;
    int64_t left;

    if (c->due < 0)
        return -1;
    left = c->due - kl__clock_mono_ns();
    return left <= 0 ? 0 : (long)((left + KL_NS_PER_MS - 1) / KL_NS_PER_MS);
}

static int flush(kl__transport *t)
{
    (void)t;
    return 0;
}

static void transport_free(kl__transport *t)
{
    curl_tr *c = (curl_tr *)t;

    c->destroying = 1;
    while (c->xfers)
        xfer_free(c, c->xfers);
    while (c->nspare > 0)
        curl_easy_cleanup(c->spare[--c->nspare]);
    if (c->multi)
        curl_multi_cleanup(c->multi);
    while (c->socks) {
        sock *s = c->socks;

        c->socks = s->next;
        kl__free(s);
    }
    curl_slist_free_all(c->connect_to);
    kl__free(c->base);
    kl__free(c);
}

static const kl__transport_ops curl_ops = {"libcurl", launch,     cancel, abandon,
                                           run,       timeout_ms, flush,  transport_free};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

/* Never cleaned up: other libcurl users in the host process may need it. */
static void curl_init(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_ALL);
}

/* The TLS setup reaches libcurl's connections as OpenSSL contexts
 * (CURLOPT_SSL_CTX_FUNCTION): its TLS must be OpenSSL's. */
static int curl_check(void)
{
    const curl_version_info_data *v;

    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK)
        return kl__error_set(K8SLEASE_ETRANSPORT, "curl_global_init: %s",
                             curl_easy_strerror(curl_init_rc));
    v = curl_version_info(CURLVERSION_NOW);
    if (!v->ssl_version || strncmp(v->ssl_version, "OpenSSL/", 8) != 0)
        return kl__error_set(K8SLEASE_ETRANSPORT, "libcurl's TLS is %s; k8slease needs OpenSSL",
                             v->ssl_version ? v->ssl_version : "none");
    return 0;
}

int kl__curl_new(kl__transport **out, const kl__http_conf *conf, const char *base,
                 const char *connect_to, const char *protocols)
{
    curl_tr *c;
    int err;

    *out = NULL;
    if ((err = curl_check()) < 0)
        return err;
    if (!(c = kl__calloc(1, sizeof(*c))))
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    c->t.ops = &curl_ops;
    c->conf = conf;
    c->protocols = protocols;
    c->due = -1;
    if (!(c->base = kl__strdup(base)) ||
        (connect_to && !(c->connect_to = curl_slist_append(NULL, connect_to))) ||
        !(c->multi = multi_init_cloexec())) {
        transport_free(&c->t);
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    }
    curl_multi_setopt(c->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
    curl_multi_setopt(c->multi, CURLMOPT_SOCKETDATA, c);
    curl_multi_setopt(c->multi, CURLMOPT_TIMERFUNCTION, on_timer);
    curl_multi_setopt(c->multi, CURLMOPT_TIMERDATA, c);
    curl_multi_setopt(c->multi, CURLMOPT_PIPELINING, (long)CURLPIPE_MULTIPLEX);
    set_limits(c);
    *out = &c->t;
    return 0;
}
