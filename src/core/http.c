/* HTTPS requests to the API server (or etcd's gateway) with the rest
 * config's TLS and credentials: the configured API server's on an HTTP/2
 * connection of our own (core/h2.c, "The native transport" below) when the
 * configuration allows, the others over libcurl multi; the I/O of the event loop
 * (core/loop.c), plugged in through kl__loop_io: kl__loop_new builds a loop
 * whose waits are epoll_wait on the sockets libcurl asks for
 * (CURLMOPT_SOCKETFUNCTION) and an eventfd for wake-ups, and which drives
 * libcurl with curl_multi_socket_action: for each socket that is ready, and
 * when libcurl's own timer (CURLMOPT_TIMERFUNCTION) is due. Unlike
 * curl_multi_perform, which runs every transfer at each call and polls each
 * one's socket to learn whether it is ready, this runs only the transfers of
 * a ready socket, and tells them it is ready: an idle watch costs nothing
 * when a renewal goes out, and a wake-up costs one epoll_wait.
 *
 * User code (closures, timers, on_data, done) never runs inside a libcurl
 * callback: the write callback only buffers, and stream bytes are handed to
 * on_data after curl_multi_socket_action returns. So every callback may start or
 * cancel any request, its own included.
 *
 * Connections: one libcurl multi handle, so requests for any number of
 * elections share its connection cache (HTTP/2 multiplexing when the server
 * offers it). Dead connections are found by TCP keepalive with
 * TCP_USER_TIMEOUT (kl__loop_set_dead_timeout), the same for HTTP/1.1 and
 * HTTP/2: libcurl's HTTP/2 PING (curl_easy_upkeep) has no deadline, so it
 * would not notice a peer that stopped answering. A peer whose kernel still
 * acknowledges but that answers nothing (a hung kube-apiserver, or one
 * behind a load balancer) is found by the timeout of a request: the
 * connection it went on is abandoned (abandon_connection), so that every
 * request and stream on it fails at once and the next ones open a new
 * connection, through the balancer to a replica that answers.
 *
 * Length (about 2,400 lines): a request's whole life (waiting for a slot,
 * credentials, TLS setup, streaming, completion, retry after a 401) works on
 * one request struct whichever transport carries it, and one multi handle;
 * the loop is apart (core/loop.c), and so is the HTTP/2 connection of the
 * native transport (core/h2.c). */
/* SO_DOMAIN is not POSIX: glibc shows it with _DEFAULT_SOURCE. */
#define _DEFAULT_SOURCE 1
#include "core/http.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <curl/curl.h>
#include <jansson.h>
#include <nghttp2/nghttp2.h>
#include <openssl/ssl.h>

#include "core/clock.h"
#include "core/credential.h"
#include "core/h2.h"
#include "core/tls.h"

#if LIBCURL_VERSION_NUM < 0x074d00
#error "k8slease needs libcurl >= 7.77 (CURLOPT_CAINFO_BLOB)"
#endif

#define BODY_MAX (16 * 1024 * 1024)
/* The content type of every answer of the API server: not copied. */
#define JSON_TYPE          "application/json"
#define CONNECT_TIMEOUT_MS 30000L
/* Connections for plain requests: at a few ms each, enough for thousands of
 * elections renewing every few seconds; more only cost memory (TLS state)
 * and handshakes in the burst of a start. Every open stream adds one: over
 * HTTP/1.1 a watch holds its connection for minutes, and requests must never
 * queue behind watches. Over HTTP/2 all of them share a few connections. */
#define REQUEST_CONNECTIONS 64L
/* Requests (not streams) handed to libcurl at a time; the others wait in
 * FIFO order without an easy handle. An easy handle costs about 22 KB (its
 * 16 KB receive buffer), so the burst of ten thousand elections starting at
 * once would otherwise leave MBs of fragmented heap behind. Over HTTP/1.1
 * libcurl could not run more at once anyway (REQUEST_CONNECTIONS); over
 * HTTP/2 these and the open streams fit in one connection's streams. */
#define MAX_ACTIVE 64
/* Concurrent streams assumed per HTTP/2 connection: the fewest a server we
 * know advertises (kube-apiserver v1.36.3: 100; v1.24.0: 250) and what RFC
 * 9113 asks a server to allow at least. libcurl follows the server's
 * SETTINGS on each connection; this only sizes how many connections it may
 * open, so that streams never wait behind watches. */
#define H2_STREAMS 100L
/* Hedged requests (kl__http_opts.hedge_ms): copies of one request sent on
 * new connections while it waits, at most this many per request and in
 * flight in the loop at once. A thousand elections waiting on one hung
 * HTTP/2 connection need one copy that answers, not a thousand: the winner
 * abandons the connection, and the others retry on the winner's. */
/* Streams (watches) on the native transport at most: with MAX_ACTIVE
 * requests they fit in the fewest concurrent streams a server we know
 * allows (H2_STREAMS), so that requests never wait behind streams on its one
 * connection. More go through libcurl, which opens connections for them. */
#define NATIVE_STREAMS     (H2_STREAMS - MAX_ACTIVE - 4)
#define HEDGES_PER_REQUEST 3
#define HEDGES_PER_LOOP    4
/* Easy handles kept for reuse: a new one costs an allocation of its buffers
 * and every option again. At most what can be active at once. */
#define SPARE_EASY MAX_ACTIVE
/* Each easy handle's receive buffer (CURLOPT_BUFFERSIZE, see easy_setup). */
#define EASY_BUFFER_SIZE 4096L
/* Until an elector asks for less: half of client-go's default renew
 * deadline. */
#define DEFAULT_DEAD_MS 5000
#define USER_AGENT      "k8slease/" K8SLEASE_VERSION_STRING
/* The HTTP side of a loop: kl__loop_data() of a loop made by kl__loop_new.
 * Named "loop" in this file, as it was when it held the loop too. */
typedef struct http {
    kl__loop *loop;
    /* Set by kl__loop_new, read-only afterwards. */
    const kl__log *log;
    char *server;                  /* as configured, for messages */
    char *base;                    /* prefix of request URLs; host = tls_server_name if set */
    struct curl_slist *connect_to; /* tls_server_name: connect to the real host */
    const char *protocols;         /* "https", or "http" for an http:// server */
    kl__tls *tls;
    char *user_agent;
    CURLM *multi;

    /* Loop thread only (and the freeing thread once the loop has stopped). */
    kl__http_req *reqs;      /* every live request */
    kl__http_req *ready;     /* streams with an opening or bytes waiting for on_open/on_data */
    long streams;            /* live requests with on_data */
    long active;             /* requests (not streams) handed to libcurl */
    long version;            /* CURL_HTTP_VERSION_* of the last answer, 0: none yet */
    CURL *spare[SPARE_EASY]; /* easy handles set up for this loop, idle */
    int nspare;
    kl__http_req *wait_head, *wait_tail; /* requests waiting for a slot, FIFO */
    int destroying;
    int64_t dead_ms; /* TCP_USER_TIMEOUT of new connections */
    int *socks;      /* the connections' sockets libcurl has open */
    size_t nsocks, socks_cap;
    kl__timer curl_timer; /* libcurl's timer (CURLMOPT_TIMERFUNCTION) */
    uint64_t abandoned;   /* connections abandoned after a timeout */
    long hedging;         /* hedges in flight */
    uint64_t hedges_won;  /* answers that came on a hedge's new connection first */
    /* The native transport (K8SLEASE_TRANSPORT=native, core/h2.c): the
     * configured server's requests, but hedges, on HTTP/2 connections of our
     * own; libcurl for the rest. Off (0) when not asked for, when the
     * configuration needs what only libcurl does (a host name to resolve,
     * a proxy, exec credentials), or once the server did not offer HTTP/2. */
    int native;
    SSL_CTX *ssl_ctx;
    struct sockaddr_storage addr; /* the configured server's address */
    socklen_t addrlen;
    char *authority;   /* :authority, as libcurl's Host header */
    char *verify_host; /* tls_server_name, else the host */
    kl__h2 *h2;        /* the connection new requests go on, NULL: none */
    kl__h2 **h2_old;   /* connections that took no new stream (GOAWAY) */
    size_t nh2_old;
    kl__http_req *h2_done; /* native requests whose stream ended: to finish */
    uint64_t h2_opened;    /* native connections opened */
    long native_streams;   /* live requests with on_data on the native transport */
    kl__creds *creds;
    int exec;                 /* the credentials come from an exec plugin */
    kl__http_req *creds_wait; /* requests waiting for credentials */
} http;

struct kl__http_req {
    http *loop;
    kl__http_req *prev, *next; /* loop->reqs */
    kl__http_req *ready_next;  /* loop->ready */
    kl__http_req *wait_next;   /* loop->wait_head */
    int waiting;               /* in the wait queue */
    int counted;               /* counts in loop->active */
    int on_ready;
    CURL *easy;
    int in_multi;
    struct curl_slist *headers;
    char *method, *path, *content_type;
    char *server;        /* opts->base_url, NULL: the configured server */
    char *authorization; /* opts->authorization, NULL: the configured credentials */
    int has_body;
    char *body; /* a copy: it must outlive kl__http_start while the request waits */
    size_t body_len;
    int64_t timeout_ms, idle_ns, started_at, last_byte;
    int64_t connect_timeout_ms; /* 0: CONNECT_TIMEOUT_MS */
    unsigned conn;              /* local port of the connection it went on, 0: not known (yet) */
    int abandoned;              /* its connection was abandoned: a failure is a timeout */
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
    int opened;       /* the 200 headers arrived */
    int open_pending; /* on_open not called yet */
    kl__http_done_cb done;
    void *arg;
    kl__timer timer;          /* idle timeout, or delivery of a failed launch */
    kl__buf resp;             /* collected body, or stream bytes not yet given to on_data */
    int streaming;            /* a 200 with on_data: bytes go to on_data */
    int retried;              /* the one retry after a 401 is spent */
    unsigned auth_gen;        /* of the credentials it went with */
    kl__http_req *creds_next; /* loop->creds_wait */
    int on_creds_wait;        /* in loop->creds_wait */
    int busy;                 /* inside on_data or done: cancel only marks it */
    int cancelled;
    int err;
    int unsent;   /* err: resolving or connecting failed, nothing was sent */
    char *errmsg; /* why err, on the heap: most requests never need one */
    /* Native transport (loop->native when it started). */
    int native;
    kl__h2 *h2;          /* its stream's connection, NULL: none in flight */
    int32_t h2_id;       /* its stream */
    int h2_status;       /* the answer's status */
    const char *h2_type; /* the answer's content type, NULL: none */
    int h2_type_owned;   /* h2_type is on the heap (not JSON_TYPE) */
    kl__http_req *h2_done_next;
    int on_h2_done;      /* in loop->h2_done */
    int h2_refused;      /* err: the server refused the stream unprocessed */
    int h2_no_h2;        /* err: the server does not speak HTTP/2 */
    int h2_resent;       /* the one resend after a refusal is spent */
    int64_t deadline_at; /* native: when timeout_ms ends (monotonic ns), 0: never;
                            the request's timer fires then at the latest */
    char errbuf[CURL_ERROR_SIZE];
};

/* Free a string that may hold a credential, wiped first. Accepts NULL. */
static void free_secret(char *s)
{
    if (s)
        kl__wipe(s, strlen(s));
    kl__free(s);
}

/* Free a header list that may hold a credential (the Authorization line),
 * each line wiped first. Accepts NULL. */
static void free_secret_headers(struct curl_slist *list)
{
    for (struct curl_slist *l = list; l; l = l->next)
        kl__wipe(l->data, strlen(l->data));
    curl_slist_free_all(list);
}

static const char *req_errmsg(const kl__http_req *req)
{
    return req->errmsg ? req->errmsg : "out of memory describing the error";
}

/* The server of a request, for URLs and messages. */
static const char *req_server(const http *loop, const kl__http_req *req)
{
    return req->server ? req->server : loop->server;
}

/* ------------------------------------------------------------------------ */
/* Requests                                                                 */
/* ------------------------------------------------------------------------ */

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

static void map_curl_error(http *loop, kl__http_req *req, CURLcode rc)
{
    const char *detail = req->errbuf[0] ? req->errbuf : curl_easy_strerror(rc);
    const char *kind = "transport";
    int err = K8SLEASE_ETRANSPORT;
    int connection = 0; /* about the server, not this request */
    size_t n = strlen(req->errbuf);

    while (n > 0 && (req->errbuf[n - 1] == '\n' || req->errbuf[n - 1] == '\r'))
        req->errbuf[--n] = '\0';
    switch (rc) {
    case CURLE_OPERATION_TIMEDOUT:
        err = K8SLEASE_ETIMEOUT;
        kind = "timeout";
        break;
    case CURLE_SSL_CONNECT_ERROR:
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
        err = K8SLEASE_ETLS;
        kind = "TLS";
        connection = 1;
        break;
    case CURLE_COULDNT_RESOLVE_HOST:
        kind = "resolve";
        connection = 1;
        break;
    case CURLE_COULDNT_CONNECT:
        kind = "connect";
        connection = 1;
        break;
    case CURLE_SEND_ERROR:
        kind = "send";
        break;
    case CURLE_RECV_ERROR:
        /* TLS 1.3 servers refuse a client certificate (or its absence)
         * after the handshake: the alert arrives as a receive error. */
        if (strstr(detail, " alert ")) {
            err = K8SLEASE_ETLS;
            kind = "TLS";
            break;
        }
        kind = "receive";
        break;
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
        kind = "receive";
        break;
    case CURLE_WEIRD_SERVER_REPLY:
    case CURLE_BAD_CONTENT_ENCODING:
        err = K8SLEASE_EPROTOCOL;
        kind = "protocol";
        break;
    case CURLE_OUT_OF_MEMORY:
        err = K8SLEASE_ENOMEM;
        kind = "out of memory";
        break;
    default:
        break;
    }
    set_req_error(req, err, "%s%s: %s: %s", req_server(loop, req), connection ? "" : req->path,
                  kind, detail);
    req->unsent = rc == CURLE_COULDNT_RESOLVE_HOST || rc == CURLE_COULDNT_CONNECT;
}

static void make_ready(http *loop, kl__http_req *req)
{
    if (req->on_ready)
        return;
    req->on_ready = 1;
    req->ready_next = loop->ready;
    loop->ready = req;
}

/* Only for streams with on_open: the blank line ending the headers of a
 * 200 means the stream is established (for HTTP/2 too: libcurl writes the
 * same blank line). */
static size_t on_header(char *data, size_t size, size_t nitems, void *arg)
{
    kl__http_req *req = arg;
    size_t len = size * nitems;
    long status = 0;

    if (!req->opened &&
        ((len == 2 && data[0] == '\r' && data[1] == '\n') || (len == 1 && data[0] == '\n'))) {
        curl_easy_getinfo(req->easy, CURLINFO_RESPONSE_CODE, &status);
        if (status == 200) {
            req->opened = 1;
            req->open_pending = 1;
            req->last_byte = kl__loop_now(req->loop->loop);
            make_ready(req->loop, req);
        }
    }
    return len;
}

/* Sockets are close-on-exec from birth: a child the program forks and
 * execs (the CLI's supervised command) must not keep the connection to the
 * API server open after we close it, or hold a TLS session it cannot use.
 * Each is remembered until libcurl closes it, so that a connection that
 * answers nothing can be abandoned, and has room in the loop's watch table
 * (libcurl's socket callback cannot fail). Without memory for either, the
 * request that opens the connection fails. */
static curl_socket_t on_opensocket(void *arg, curlsocktype purpose, struct curl_sockaddr *addr)
{
    kl__http_req *req = arg;
    http *loop = req->loop;
    int fd = socket(addr->family, addr->socktype | SOCK_CLOEXEC, addr->protocol);

    (void)purpose;
    if (fd < 0)
        return CURL_SOCKET_BAD;
    if (loop->nsocks == loop->socks_cap) {
        size_t cap = loop->socks_cap ? loop->socks_cap * 2 : 16;
        int *grown = kl__realloc(loop->socks, cap * sizeof(*grown));

        if (!grown)
            goto nomem;
        loop->socks = grown;
        loop->socks_cap = cap;
    }
    if (kl__loop_reserve(loop->loop, fd) < 0)
        goto nomem;
    loop->socks[loop->nsocks++] = fd;
    return fd;
nomem:
    set_req_error(req, K8SLEASE_ENOMEM, "%s: out of memory for a connection",
                  req_server(loop, req));
    close(fd);
    return CURL_SOCKET_BAD;
}

static int on_closesocket(void *arg, curl_socket_t fd)
{
    http *loop = arg;

    kl__loop_unwatch(loop->loop, fd);
    for (size_t i = 0; i < loop->nsocks; i++)
        if (loop->socks[i] == fd) {
            loop->socks[i] = loop->socks[--loop->nsocks];
            break;
        }
    return close(fd);
}

static unsigned local_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);

    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
        return 0;
    if (ss.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return 0;
}

/* The request's connection answered nothing in time: shut its socket down.
 * libcurl then sees it end, fails every request and stream still on it at
 * once (their owners retry, the informer resumes its streams) and opens a
 * new connection for the next request. Over HTTP/1.1 libcurl has closed it
 * already; over HTTP/2 a timed-out stream would otherwise leave the
 * connection in the cache, and the next requests would wait on it too. */
static void native_abandon(http *loop, kl__http_req *req, const char *why);

static void abandon_connection(http *loop, kl__http_req *req, const char *why)
{
    if (req->native) {
        native_abandon(loop, req, why);
        return;
    }
    if (!req->conn)
        return;
    for (size_t i = 0; i < loop->nsocks; i++) {
        if (local_port(loop->socks[i]) != req->conn)
            continue;
        for (kl__http_req *r = loop->reqs; r; r = r->next)
            if (r->conn == req->conn)
                r->abandoned = 1;
        (void)shutdown(loop->socks[i], SHUT_RDWR);
        loop->abandoned++;
        kl__log_printf(loop->log, K8SLEASE_LOG_WARN,
                       "%s: the connection from local port %u %s: abandoned; the next requests "
                       "open a new one",
                       req_server(loop, req), req->conn, why);
        break;
    }
    req->conn = 0;
}

#if LIBCURL_VERSION_NUM >= 0x075000
/* The connection a request goes on, new or reused (libcurl 7.80). */
static int on_prereq(void *arg, char *primary_ip, char *local_ip, int primary_port, int local)
{
    kl__http_req *req = arg;

    (void)primary_ip;
    (void)local_ip;
    (void)primary_port;
    req->conn = local > 0 ? (unsigned)local : 0;
    return CURL_PREREQFUNC_OK;
}
#endif

static int on_sockopt(void *arg, curl_socket_t fd, curlsocktype purpose)
{
    http *loop = arg;

    if (purpose == CURLSOCKTYPE_IPCXN)
        kl__tcp_dead_timeout(fd, loop->dead_ms);
    return CURL_SOCKOPT_OK;
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
static void set_limits(http *loop)
{
    long n = loop->version == CURL_HTTP_VERSION_2_0
                 ? (loop->streams + MAX_ACTIVE + H2_STREAMS - 1) / H2_STREAMS
                 : REQUEST_CONNECTIONS + loop->streams;

    n += loop->hedging;
    curl_multi_setopt(loop->multi, CURLMOPT_MAX_HOST_CONNECTIONS, n);
    curl_multi_setopt(loop->multi, CURLMOPT_MAXCONNECTS, n);
}

static size_t on_write(char *data, size_t size, size_t nmemb, void *arg)
{
    kl__http_req *req = arg;
    http *loop = req->loop;
    size_t len = size * nmemb;
    long status = 0;

    req->last_byte = kl__loop_now(loop->loop);
    curl_easy_getinfo(req->easy, CURLINFO_RESPONSE_CODE, &status);
    req->streaming = req->on_data && status == 200;
    if (req->resp.len + len > BODY_MAX) {
        set_req_error(req, K8SLEASE_EPROTOCOL, "response body from %s%s larger than 16 MiB",
                      req_server(loop, req), req->path);
        return 0;
    }
    if (kl__buf_append(&req->resp, data, len) < 0) {
        set_req_error(req, K8SLEASE_ENOMEM, "%s%s: out of memory for the response body",
                      req_server(loop, req), req->path);
        return 0;
    }
    if (req->streaming)
        make_ready(loop, req);
    return len;
}

/* An exec plugin's client certificate, as blobs libcurl loads: connections
 * are matched on them, so new ones go to the server once the plugin gives
 * another. The configuration's own comes with the rest of the TLS setup
 * (on_ssl_ctx). A NULL blob clears what a previous request set. */
static int set_client_cert(http *loop, CURL *e)
{
    struct curl_blob cert = {NULL, 0, CURL_BLOB_COPY}, key = {NULL, 0, CURL_BLOB_COPY};
    int bad = 0;

    const char *cert_pem, *key_pem;

    kl__creds_identity(loop->creds, &cert_pem, &key_pem);
    if (cert_pem) {
        cert.data = (void *)cert_pem;
        cert.len = strlen(cert_pem);
        key.data = (void *)key_pem;
        key.len = strlen(key_pem);
    }
    bad |= curl_easy_setopt(e, CURLOPT_SSLCERT_BLOB, cert.data ? &cert : NULL) != CURLE_OK;
    bad |= curl_easy_setopt(e, CURLOPT_SSLKEY_BLOB, key.data ? &key : NULL) != CURLE_OK;
    return bad ? K8SLEASE_ENOMEM : 0;
}

static int add_header(struct curl_slist **list, const char *line)
{
    struct curl_slist *l = line ? curl_slist_append(*list, line) : NULL;

    if (!l)
        return K8SLEASE_ENOMEM;
    *list = l;
    return 0;
}

/* auth: the Authorization line of the credentials (NULL: none). */
static int build_headers(const kl__http_req *req, const char *auth, struct curl_slist **out)
{
    struct curl_slist *h = NULL;
    char *line = NULL;
    int err = 0;

    if (req->content_type)
        line = kl__sprintf("Content-Type: %s", req->content_type);
    else if (req->has_body)
        line = kl__strdup("Content-Type:"); /* not curl's form-urlencoded default */
    if (((req->content_type || req->has_body) && (err = add_header(&h, line)) < 0) ||
        (err = add_header(&h, "Accept: application/json")) < 0 ||
        (err = add_header(&h, "Expect:")) < 0)
        goto out;
    if (req->authorization) {
        free_secret(line);
        line = kl__sprintf("Authorization: %s", req->authorization);
        if ((err = add_header(&h, line)) < 0)
            goto out;
    } else if (auth && (err = add_header(&h, auth)) < 0) {
        goto out;
    }
    *out = h;
    h = NULL;
out:
    free_secret(line);
    free_secret_headers(h);
    return err;
}

static int native_launch(http *loop, kl__http_req *req, const char *auth_line);

/* What is left of the caller's deadline (a retry gets no more), 0: none. */
static int64_t req_time_left_ms(http *loop, const kl__http_req *req)
{
    int64_t ms;

    if (req->timeout_ms <= 0)
        return 0;
    ms = req->timeout_ms - (kl__loop_now(loop->loop) - req->started_at) / KL_NS_PER_MS;
    return ms < 1 ? 1 : ms;
}

/* The connect phase's bound for a request. */
static int64_t req_connect_ms(http *loop, const kl__http_req *req)
{
    int64_t timeout_ms = req_time_left_ms(loop, req);
    int64_t connect_ms = req->connect_timeout_ms > 0 ? req->connect_timeout_ms : CONNECT_TIMEOUT_MS;

    return timeout_ms > 0 && timeout_ms < connect_ms ? timeout_ms : connect_ms;
}

/* Arm a request's timer at at (0: only for its deadline), or earlier at
 * its deadline (native requests: one timer for both). */
static void req_timer_arm(http *loop, kl__http_req *req, int64_t at)
{
    if (req->deadline_at && (at == 0 || req->deadline_at < at))
        at = req->deadline_at;
    if (at)
        kl__timer_arm(loop->loop, &req->timer, at);
}

/* The idle timeout of a stream, or the first hedge. */
static void arm_req_timer(http *loop, kl__http_req *req)
{
    int64_t now = kl__loop_now(loop->loop);

    if (req->idle_ns > 0)
        req_timer_arm(loop, req, now + req->idle_ns);
    else if (req->hedge_ns > 0 && req->nhedged < HEDGES_PER_REQUEST)
        req_timer_arm(loop, req, now + req->hedge_ns);
    else
        req_timer_arm(loop, req, 0);
}

/* (Re)send a request with the current credentials. On failure req->err and
 * req->errmsg say why; the caller delivers it. */
/* A request waits for the credentials an exec plugin is getting (its
 * deadline still runs: on_req_timer). */
static void creds_wait(http *loop, kl__http_req *req)
{
    req->on_creds_wait = 1;
    req->creds_next = loop->creds_wait;
    loop->creds_wait = req;
    req->deadline_at = 0;
    if (req->timeout_ms > 0) {
        req->deadline_at = req->started_at + req->timeout_ms * KL_NS_PER_MS;
        kl__timer_arm(loop->loop, &req->timer, req->deadline_at);
    }
}

static void creds_unwait(http *loop, kl__http_req *req)
{
    kl__http_req **p = &loop->creds_wait;

    while (*p != req)
        p = &(*p)->creds_next;
    *p = req->creds_next;
    req->creds_next = NULL;
    req->on_creds_wait = 0;
}

static int req_launch(http *loop, kl__http_req *req);

/* The plugin's run ended: the requests that waited for it go, or fail with
 * its error (delivered by their timers: nothing here calls back). */
static void creds_ready(void *arg)
{
    http *loop = arg;
    kl__http_req *list = loop->creds_wait, *req;

    loop->creds_wait = NULL;
    while ((req = list)) {
        list = req->creds_next;
        req->creds_next = NULL;
        req->on_creds_wait = 0;
        kl__timer_cancel(loop->loop, &req->timer);
        req->deadline_at = 0;
        if (req_launch(loop, req) < 0)
            kl__timer_arm(loop->loop, &req->timer, kl__loop_now(loop->loop));
    }
}

static int req_launch(http *loop, kl__http_req *req)
{
    struct curl_slist *h = NULL;
    const char *auth = NULL;
    int64_t timeout_ms = 0;
    int err;

    if (kl__tls_error(loop->tls) && strncmp(req_server(loop, req), "https:", 6) == 0) {
        set_req_error(req, K8SLEASE_ETLS, "%s: TLS: %s", req_server(loop, req),
                      kl__tls_error(loop->tls));
        err = req->err;
        goto out;
    }
    if (!req->authorization) {
        if ((err = kl__creds_get(loop->creds, loop->loop, &auth)) == KL__CREDS_WAIT) {
            creds_wait(loop, req);
            return 0;
        }
        if (err < 0) {
            set_req_error(req, err, "%s: credentials: %s", req_server(loop, req), kl__error_get());
            goto out;
        }
    }
    req->auth_gen = kl__creds_gen(loop->creds);
    if (req->native)
        return native_launch(loop, req, auth);
    if ((err = build_headers(req, auth, &h)) < 0 || (err = set_client_cert(loop, req->easy)) < 0 ||
        curl_easy_setopt(req->easy, CURLOPT_HTTPHEADER, h) != CURLE_OK) {
        set_req_error(req, K8SLEASE_ENOMEM, "%s%s: out of memory", req_server(loop, req),
                      req->path);
        err = req->err;
        goto out;
    }
    free_secret_headers(req->headers);
    req->headers = h;
    h = NULL;
    timeout_ms = req_time_left_ms(loop, req);
    curl_easy_setopt(req->easy, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
    curl_easy_setopt(req->easy, CURLOPT_CONNECTTIMEOUT_MS, (long)req_connect_ms(loop, req));
    req->errbuf[0] = '\0';
    req->resp.len = 0;
    req->streaming = 0;
    req->opened = req->open_pending = 0;
    req->conn = 0;
    req->last_byte = kl__loop_now(loop->loop);
    if (curl_multi_add_handle(loop->multi, req->easy) != CURLM_OK) {
        set_req_error(req, K8SLEASE_ETRANSPORT, "%s%s: libcurl refused the request",
                      req_server(loop, req), req->path);
        err = req->err;
        goto out;
    }
    req->in_multi = 1;
    arm_req_timer(loop, req);
out:
    free_secret_headers(h);
    return err;
}

static int dispatch(http *loop, kl__http_req *req);

/* Hand waiting requests to libcurl as slots free up. */
static void pump(http *loop)
{
    while (!loop->destroying && loop->wait_head && loop->active < MAX_ACTIVE) {
        kl__http_req *req = loop->wait_head;

        loop->wait_head = req->wait_next;
        if (!loop->wait_head)
            loop->wait_tail = NULL;
        req->wait_next = NULL;
        req->waiting = 0;
        /* A failure is delivered by the request's timer. */
        if (dispatch(loop, req) < 0) {
            set_req_error(req, K8SLEASE_ENOMEM, "%s%s: %s", req_server(loop, req), req->path,
                          kl__error_get());
            kl__timer_arm(loop->loop, &req->timer, kl__loop_now(loop->loop));
        }
    }
}

static void easy_put(http *loop, CURL *e);
static void req_free(http *loop, kl__http_req *req);

/* A hedge leaves its original's list. */
static void hedge_unlink(http *loop, kl__http_req *h)
{
    kl__http_req **p = &h->original->hedges;

    while (*p != h)
        p = &(*p)->hedge_next;
    *p = h->hedge_next;
    h->hedge_next = NULL;
    h->original = NULL;
    loop->hedging--;
    set_limits(loop);
}

/* The original has its answer, or goes: its hedges go too. A hedge that
 * was sent and got no answer is on a connection no faster than the
 * original's: abandoned, so that the next requests do not pick it (libcurl
 * prefers an idle connection, and a hedge's is idle once it goes). One
 * still connecting is closed by libcurl. */
static void hedges_drop(http *loop, kl__http_req *req)
{
    while (req->hedges) {
        kl__http_req *h = req->hedges;

        abandon_connection(loop, h, "carried a copy of a request that another answered first");
        hedge_unlink(loop, h);
        req_free(loop, h);
    }
}

static void req_free(http *loop, kl__http_req *req)
{
    if (req->waiting) {
        kl__http_req **p = &loop->wait_head, *prev = NULL;

        while (*p != req) {
            prev = *p;
            p = &(*p)->wait_next;
        }
        *p = req->wait_next;
        if (loop->wait_tail == req)
            loop->wait_tail = prev;
    }
    if (req->on_ready) {
        kl__http_req **p = &loop->ready;

        while (*p != req)
            p = &(*p)->ready_next;
        *p = req->ready_next;
    }
    if (req->on_creds_wait)
        creds_unwait(loop, req);
    if (req->on_h2_done) {
        kl__http_req **p = &loop->h2_done;

        while (*p != req)
            p = &(*p)->h2_done_next;
        *p = req->h2_done_next;
    }
    if (req->h2)
        kl__h2_cancel(req->h2, req->h2_id);
    if (req->h2_type_owned)
        kl__free((char *)req->h2_type);
    kl__timer_cancel(loop->loop, &req->timer);
    hedges_drop(loop, req);
    if (req->original)
        hedge_unlink(loop, req);
    if (req->in_multi)
        curl_multi_remove_handle(loop->multi, req->easy);
    if (req->easy)
        easy_put(loop, req->easy);
    if (req->on_data) {
        loop->streams--;
        set_limits(loop);
    }
    if (req->native && req->on_data)
        loop->native_streams--;
    free_secret_headers(req->headers);
    if (req->prev)
        req->prev->next = req->next;
    else
        loop->reqs = req->next;
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
        loop->active--;
        pump(loop);
    }
    kl__free(req);
}

/* Call done with the outcome and free the request. */
static void req_complete(http *loop, kl__http_req *req)
{
    kl__http_result res = {0};
    const char *content_type = NULL;
    long status = 0;

    if (req->in_multi) {
        curl_multi_remove_handle(loop->multi, req->easy);
        req->in_multi = 0;
    }
    kl__timer_cancel(loop->loop, &req->timer);
    hedges_drop(loop, req);
    if (req->native) {
        status = req->h2_status;
        content_type = req->h2_type;
    } else if (req->easy) {
        char *type = NULL;

        curl_easy_getinfo(req->easy, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_getinfo(req->easy, CURLINFO_CONTENT_TYPE, &type);
        content_type = type;
    }
    res.err = req->err;
    res.errmsg = req->err ? req_errmsg(req) : "";
    res.unsent = req->err && req->unsent;
    res.status = status;
    res.body = req->resp.data && !req->streaming ? req->resp.data : "";
    res.body_len = req->resp.data && !req->streaming ? req->resp.len : 0;
    res.content_type = content_type ? content_type : "";
    if (req->err)
        kl__log_printf(loop->log, K8SLEASE_LOG_DEBUG, "%s %s%s: %s", req->method,
                       req_server(loop, req), req->path, req_errmsg(req));
    else
        kl__log_printf(loop->log, K8SLEASE_LOG_DEBUG, "%s %s%s: HTTP %ld", req->method,
                       req_server(loop, req), req->path, status);
    req->busy = 1;
    req->done(&res, req->arg);
    req_free(loop, req);
}

static void req_fail(http *loop, kl__http_req *req, int err, const char *msg)
{
    set_req_error(req, err, "%s", msg);
    req_complete(loop, req);
}

static void hedge_tick(http *loop, kl__http_req *req);
static void native_deadline(http *loop, kl__http_req *req);

static void on_req_timer(kl__timer *t, void *arg)
{
    kl__http_req *req = arg;
    http *loop = req->loop;
    char msg[1024];

    (void)t;
    if (req->on_creds_wait) {
        char why[512];

        creds_unwait(loop, req);
        kl__creds_waiting(loop->creds, loop->loop, why, sizeof(why));
        set_req_error(req, K8SLEASE_ETIMEOUT, "%s%s: timeout: no credentials after %lld ms: %s",
                      req_server(loop, req), req->path, (long long)req->timeout_ms, why);
        req_complete(loop, req);
        return;
    }
    if (req->on_h2_done) /* its stream ended: finished by the next io run */
        return;
    if (!req->in_multi && !req->h2) {
        /* The launch (or the set-up of a waiting request) failed. */
        req_complete(loop, req);
        return;
    }
    if (req->deadline_at && kl__loop_now(loop->loop) >= req->deadline_at) {
        native_deadline(loop, req);
        return;
    }
    if (req->idle_ns == 0) {
        if (req->hedge_ns > 0)
            hedge_tick(loop, req);
        else
            req_timer_arm(loop, req, 0);
        return;
    }
    if (kl__loop_now(loop->loop) - req->last_byte < req->idle_ns) {
        req_timer_arm(loop, req, req->last_byte + req->idle_ns);
        return;
    }
    snprintf(msg, sizeof(msg), "%s%s: timeout: no data for %lld ms", req_server(loop, req),
             req->path, (long long)(req->idle_ns / KL_NS_PER_MS));
    abandon_connection(loop, req, "carried a stream that got no data in time");
    req_fail(loop, req, K8SLEASE_ETIMEOUT, msg);
}

/* An answer came: size the connections for its protocol. */
static void note_version(http *loop, CURL *e)
{
    long version = 0;

    curl_easy_getinfo(e, CURLINFO_HTTP_VERSION, &version);
    if (version && version != loop->version) {
        loop->version = version;
        set_limits(loop);
    }
}

/* A request failed (req->err set): report, unless a hedge may still
 * answer. */
static void req_failed(http *loop, kl__http_req *req)
{
    if (req->hedges) {
        /* A hedge may still answer: the error waits for the last. */
        req->lost = 1;
        req->conn = 0;
        return;
    }
    req_complete(loop, req);
}

/* An answer arrived: retry once after a 401 with fresh credentials, else
 * report. */
static void req_answered(http *loop, kl__http_req *req, long status)
{
    if (status == 401 && !req->retried && !req->authorization &&
        kl__creds_refused(loop->creds, req->auth_gen)) {
        req->retried = 1;
        kl__log_printf(loop->log, K8SLEASE_LOG_DEBUG,
                       "%s %s%s: HTTP 401; retrying with fresh credentials", req->method,
                       req_server(loop, req), req->path);
        if (req_launch(loop, req) == 0)
            return;
    }
    req_complete(loop, req);
}

/* A transfer ended. */
static void req_finish(http *loop, kl__http_req *req, CURLcode rc)
{
    long status = 0;

    curl_multi_remove_handle(loop->multi, req->easy);
    req->in_multi = 0;
    kl__timer_cancel(loop->loop, &req->timer);
    if (rc != CURLE_OK) {
        if (!req->err && req->abandoned && rc != CURLE_OPERATION_TIMEDOUT)
            set_req_error(req, K8SLEASE_ETIMEOUT,
                          "%s%s: timeout: its connection answered nothing in time and was "
                          "abandoned",
                          req_server(loop, req), req->path);
        else if (!req->err)
            map_curl_error(loop, req, rc);
        if (rc == CURLE_OPERATION_TIMEDOUT)
            abandon_connection(loop, req, "answered nothing in time");
        req_failed(loop, req);
        return;
    }
    curl_easy_getinfo(req->easy, CURLINFO_RESPONSE_CODE, &status);
    note_version(loop, req->easy);
    req_answered(loop, req, status);
}

/* Each new TLS connection's context: the loop's TLS setup. */
static CURLcode on_ssl_ctx(CURL *e, void *ctx, void *arg)
{
    (void)e;
    return kl__tls_setup(arg, ctx) < 0 ? CURLE_OUT_OF_MEMORY : CURLE_OK;
}

/* The options every request of this loop shares, set once per easy handle. */
static CURLcode easy_setup(http *loop, CURL *e)
{
    CURLcode rc;
    long verify = !kl__tls_insecure(loop->tls);

    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    /* A Lease or an event is a few hundred bytes: libcurl's default 16 KB
     * receive buffer per handle would be most of a handle's memory, and
     * MAX_ACTIVE of them stay allocated. Over HTTP/2 it does not size the
     * reads from the socket (the connection's own buffer does). */
    curl_easy_setopt(e, CURLOPT_BUFFERSIZE, EASY_BUFFER_SIZE);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
    curl_easy_setopt(e, CURLOPT_PIPEWAIT, 1L);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, on_opensocket);
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, on_closesocket);
    curl_easy_setopt(e, CURLOPT_CLOSESOCKETDATA, loop);
#if LIBCURL_VERSION_NUM >= 0x075000
    curl_easy_setopt(e, CURLOPT_PREREQFUNCTION, on_prereq);
#endif
    curl_easy_setopt(e, CURLOPT_SOCKOPTFUNCTION, on_sockopt);
    curl_easy_setopt(e, CURLOPT_SOCKOPTDATA, loop);
    if ((rc = curl_easy_setopt(e, CURLOPT_USERAGENT, loop->user_agent)) != CURLE_OK ||
#if LIBCURL_VERSION_NUM >= 0x075500
        (rc = curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, loop->protocols)) != CURLE_OK)
#else
        (rc = curl_easy_setopt(e, CURLOPT_PROTOCOLS,
                               strcmp(loop->protocols, "http") == 0 ? CURLPROTO_HTTP
                                                                    : CURLPROTO_HTTPS)) != CURLE_OK)
#endif
        return rc;
    /* The trust anchors, the configuration's client certificate and the
     * policy: the loop's TLS setup (core/tls.c), as the native transport's. */
    curl_easy_setopt(e, CURLOPT_CAINFO, NULL);
    curl_easy_setopt(e, CURLOPT_CAPATH, NULL);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, verify);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, verify ? 2L : 0L);
    curl_easy_setopt(e, CURLOPT_SSL_CTX_DATA, loop->tls);
    return curl_easy_setopt(e, CURLOPT_SSL_CTX_FUNCTION, on_ssl_ctx);
}

/* What differs between requests; every option is set, as the handle may
 * have served another request before. */
static CURLcode req_setup(http *loop, kl__http_req *req, const char *url)
{
    CURL *e = req->easy;
    const char *method = req->method;
    CURLcode rc;

    curl_easy_setopt(e, CURLOPT_PRIVATE, req);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, req);
#if LIBCURL_VERSION_NUM >= 0x075000
    curl_easy_setopt(e, CURLOPT_PREREQDATA, req);
#endif
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, req->errbuf);
    curl_easy_setopt(e, CURLOPT_FRESH_CONNECT, req->original ? 1L : 0L);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, req);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, req->on_open ? on_header : NULL);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, req->on_open ? req : NULL);
    if ((rc = curl_easy_setopt(e, CURLOPT_URL, url)) != CURLE_OK ||
        (rc = curl_easy_setopt(e, CURLOPT_CONNECT_TO, !req->server ? loop->connect_to : NULL)) !=
            CURLE_OK)
        return rc;

    if (req->has_body) {
        /* req->body lives as long as the request: no second copy */
        if ((rc = curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len)) !=
                CURLE_OK ||
            (rc = curl_easy_setopt(e, CURLOPT_POSTFIELDS, req->body)) != CURLE_OK)
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

/* An easy handle for a request: a spare one, or a new one set up. */
static CURL *easy_get(http *loop, CURLcode *rc)
{
    CURL *e;

    *rc = CURLE_OK;
    if (loop->nspare > 0)
        return loop->spare[--loop->nspare];
    if (!(e = curl_easy_init())) {
        *rc = CURLE_OUT_OF_MEMORY;
        return NULL;
    }
    if ((*rc = easy_setup(loop, e)) != CURLE_OK) {
        curl_easy_cleanup(e);
        return NULL;
    }
    return e;
}

/* Keep a handle no transfer uses for the next request, or free it. Nothing
 * of the request it served may stay reachable from it. */
static void easy_put(http *loop, CURL *e)
{
    if (loop->destroying || loop->nspare == SPARE_EASY) {
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
    curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    loop->spare[loop->nspare++] = e;
}

/* Give a request an easy handle set up for it. -1 (error set) when it
 * cannot be. */
static int curl_attach(http *loop, kl__http_req *req)
{
    char *url = kl__sprintf("%s%s", req->server ? req->server : loop->base, req->path);
    CURLcode rc = CURLE_OUT_OF_MEMORY;

    if (!url || !(req->easy = easy_get(loop, &rc)) ||
        (rc = req_setup(loop, req, url)) != CURLE_OK) {
        kl__error_set(rc == CURLE_OUT_OF_MEMORY ? K8SLEASE_ENOMEM : K8SLEASE_EINVAL,
                      "%s %s%s: libcurl: %s", req->method, req->server ? req->server : loop->base,
                      req->path, curl_easy_strerror(rc));
        kl__free(url);
        return -1;
    }
    kl__free(url);
    return 0;
}

/* Launch a request on its transport: the native one for the configured
 * server (not a hedge: those want a new connection each), else libcurl.
 * -1 (error set, nothing to undo but the request itself) when it cannot be
 * set up. */
static int dispatch(http *loop, kl__http_req *req)
{
    req->native = loop->native && !req->server && !req->original &&
                  (!req->on_data || loop->native_streams < NATIVE_STREAMS);
    if (req->native && req->on_data)
        loop->native_streams++;
    if (!req->native && curl_attach(loop, req) < 0)
        return -1;
    if (!req->on_data) {
        req->counted = 1;
        loop->active++;
    }
    /* done must not run inside kl__http_start: a failed launch is reported
     * from the request's timer, in the next iteration. */
    if (req_launch(loop, req) < 0)
        kl__timer_arm(loop->loop, &req->timer, kl__loop_now(loop->loop));
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The native transport (core/h2.c)                                         */
/* ------------------------------------------------------------------------ */

/* A native request's stream ended (or was reset): finished by the next io
 * run (finish_native), outside the connection's callbacks. */
static void h2_queue_done(http *loop, kl__http_req *req)
{
    req->h2 = NULL;
    req->h2_id = 0;
    if (req->on_h2_done)
        return;
    req->on_h2_done = 1;
    req->h2_done_next = loop->h2_done;
    loop->h2_done = req;
}

static void h2_on_response(void *arg, int status, const char *content_type)
{
    kl__http_req *req = arg;
    http *loop = req->loop;

    req->h2_status = status;
    if (req->h2_type_owned)
        kl__free((char *)req->h2_type);
    req->h2_type_owned = 0;
    if (strcmp(content_type, JSON_TYPE) == 0) {
        req->h2_type = JSON_TYPE;
    } else {
        /* Out of memory: reported as none. */
        req->h2_type = content_type[0] ? kl__strdup(content_type) : NULL;
        req->h2_type_owned = req->h2_type != NULL;
    }
    req->last_byte = kl__loop_now(loop->loop);
    req->streaming = req->on_data && status == 200;
    if (req->streaming && req->on_open && !req->opened) {
        req->opened = 1;
        req->open_pending = 1;
        make_ready(loop, req);
    }
}

static int h2_on_body(void *arg, const char *data, size_t len)
{
    kl__http_req *req = arg;
    http *loop = req->loop;

    req->last_byte = kl__loop_now(loop->loop);
    if (req->resp.len + len > BODY_MAX)
        set_req_error(req, K8SLEASE_EPROTOCOL, "response body from %s%s larger than 16 MiB",
                      req_server(loop, req), req->path);
    else if (kl__buf_append(&req->resp, data, len) < 0)
        set_req_error(req, K8SLEASE_ENOMEM, "%s%s: out of memory for the response body",
                      req_server(loop, req), req->path);
    if (req->err) {
        h2_queue_done(loop, req);
        return -1;
    }
    if (req->streaming)
        make_ready(loop, req);
    return 0;
}

static void h2_on_close(void *arg, const kl__h2_end *end)
{
    kl__http_req *req = arg;
    http *loop = req->loop;

    if (end->err) {
        set_req_error(req, end->err, "%s%s: %s: %s", req_server(loop, req),
                      end->connection ? "" : req->path, end->kind, end->detail);
        req->unsent = end->unsent && end->connection;
        req->h2_refused = end->unsent && !end->connection;
        req->h2_no_h2 = end->no_h2;
    }
    h2_queue_done(loop, req);
}

static const kl__h2_ops h2_ops = {h2_on_response, h2_on_body, h2_on_close};

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

/* The connection a new stream goes on: the current one, or a new one.
 * NULL: error set. */
static kl__h2 *native_conn(http *loop, const kl__http_req *req, int *err)
{
    kl__h2_config cfg = {0};
    int64_t connect_ms = req_connect_ms(loop, req);

    if (loop->h2 && kl__h2_usable(loop->h2)) {
        kl__h2_connect_deadline(loop->h2, connect_ms);
        return loop->h2;
    }
    if (loop->h2) {
        /* Its streams end there (after a GOAWAY), or it failed: reaped by
         * the io run once nothing is on it. */
        kl__h2 **grown = kl__realloc(loop->h2_old, (loop->nh2_old + 1) * sizeof(*grown));

        if (!grown) {
            kl__h2_fail(loop->h2, K8SLEASE_ENOMEM, "out of memory",
                        "no room to keep the connection");
            kl__h2_free(loop->h2);
        } else {
            loop->h2_old = grown;
            loop->h2_old[loop->nh2_old++] = loop->h2;
        }
        loop->h2 = NULL;
    }
    cfg.loop = loop->loop;
    cfg.addr = (const struct sockaddr *)&loop->addr;
    cfg.addrlen = loop->addrlen;
    cfg.ctx = loop->ssl_ctx;
    cfg.verify_host = kl__tls_insecure(loop->tls) ? NULL : loop->verify_host;
    cfg.connect_timeout_ms = connect_ms;
    cfg.dead_ms = loop->dead_ms;
    cfg.ops = &h2_ops;
    if ((*err = kl__h2_open(&loop->h2, &cfg)) == 0) {
        loop->h2_opened++;
        kl__log_printf(loop->log, K8SLEASE_LOG_DEBUG, "%s: a new HTTP/2 connection (native)",
                       loop->server);
    }
    return loop->h2;
}

#define NV(n, v)                                                                                   \
    {                                                                                              \
        (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE             \
    }

static int native_launch(http *loop, kl__http_req *req, const char *auth_line)
{
    const char *auth = auth_line ? auth_line + strlen("Authorization: ") : NULL;
    char length[24];
    nghttp2_nv nv[10] = {
        NV(":method", req->method),         NV(":scheme", "https"),
        NV(":authority", loop->authority),  NV(":path", req->path),
        NV("user-agent", loop->user_agent), NV("accept", "application/json"),
    };
    size_t n = 6;
    int64_t timeout_ms = req_time_left_ms(loop, req);
    kl__h2 *c;
    int32_t id;
    int err = 0;

    if (req->content_type)
        nv[n++] = (nghttp2_nv)NV("content-type", req->content_type);
    if (req->has_body)
        nv[n++] = (nghttp2_nv)NV("content-length", decimal(length, req->body_len));
    if (req->authorization)
        auth = req->authorization; /* as build_headers: instead of the configured credentials */
    if (auth)
        nv[n++] = (nghttp2_nv)NV("authorization", auth);
    req->deadline_at = 0;
    if (!(c = native_conn(loop, req, &err))) {
        set_req_error(req, err, "%s: %s", loop->server, kl__error_get());
        req->unsent = err == K8SLEASE_ETRANSPORT; /* no socket: nothing sent */
        id = err;
    } else {
        id = kl__h2_submit(c, nv, n, req->body, req->body_len, req->has_body, req);
        if (id < 0)
            set_req_error(req, (int)id, "%s%s: %s", loop->server, req->path,
                          id == K8SLEASE_ENOMEM ? "out of memory" : "no HTTP/2 stream to be had");
    }
    if (id < 0)
        return req->err;
    req->h2 = c;
    req->h2_id = id;
    req->resp.len = 0;
    req->streaming = 0;
    req->opened = req->open_pending = 0;
    req->h2_status = 0;
    req->last_byte = kl__loop_now(loop->loop);
    if (timeout_ms > 0)
        req->deadline_at = kl__loop_now(loop->loop) + timeout_ms * KL_NS_PER_MS;
    arm_req_timer(loop, req);
    return 0;
}

/* A native request's connection answered nothing in time: fail everything
 * on it, so that the next requests open a new one (abandon_connection). */
static void native_abandon(http *loop, kl__http_req *req, const char *why)
{
    kl__h2 *c = req->h2;

    if (!c)
        return;
    kl__h2_cancel(c, req->h2_id);
    req->h2 = NULL;
    req->h2_id = 0;
    loop->abandoned++;
    kl__log_printf(loop->log, K8SLEASE_LOG_WARN,
                   "%s: the connection from local port %u %s: abandoned; the next requests "
                   "open a new one",
                   loop->server, kl__h2_port(c), why);
    kl__h2_fail(c, K8SLEASE_ETIMEOUT, "timeout",
                "its connection answered nothing in time and was abandoned");
}

/* timeout_ms passed (libcurl's CURLOPT_TIMEOUT_MS for the others). */
static void native_deadline(http *loop, kl__http_req *req)
{
    req->deadline_at = 0;
    set_req_error(req, K8SLEASE_ETIMEOUT, "%s%s: timeout: no answer after %lld ms", loop->server,
                  req->path, (long long)req->timeout_ms);
    abandon_connection(loop, req, "answered nothing in time");
    req_failed(loop, req);
}

static void clear_req_error(kl__http_req *req)
{
    req->err = 0;
    req->unsent = req->h2_refused = req->h2_no_h2 = 0;
    kl__free(req->errmsg);
    req->errmsg = NULL;
}

/* Native requests whose stream ended: resend one the server refused
 * unprocessed (once), hand them all to libcurl when the server does not
 * speak HTTP/2, else as a libcurl transfer's end. */
static void finish_native(http *loop)
{
    kl__http_req *req;

    while ((req = loop->h2_done)) {
        loop->h2_done = req->h2_done_next;
        req->h2_done_next = NULL;
        req->on_h2_done = 0;
        /* as req_finish: no more hedges once its own transfer ended */
        kl__timer_cancel(loop->loop, &req->timer);
        req->deadline_at = 0;
        if (req->err && req->h2_no_h2) {
            if (loop->native)
                kl__log_printf(loop->log, K8SLEASE_LOG_INFO,
                               "%s: no HTTP/2 offered; requests go through libcurl", loop->server);
            loop->native = 0;
            clear_req_error(req);
            req->native = 0;
            if (req->on_data)
                loop->native_streams--;
            if (curl_attach(loop, req) < 0)
                set_req_error(req, K8SLEASE_ENOMEM, "%s%s: %s", loop->server, req->path,
                              kl__error_get());
            else if (req_launch(loop, req) == 0)
                continue;
            req_complete(loop, req);
            continue;
        }
        if (req->err && req->h2_refused && !req->h2_resent) {
            req->h2_resent = 1;
            clear_req_error(req);
            if (req_launch(loop, req) == 0)
                continue;
        }
        if (req->err)
            req_failed(loop, req);
        else
            req_answered(loop, req, req->h2_status);
    }
}

/* Free the connections nothing is on any more. */
static void reap_native(http *loop)
{
    if (loop->h2 && kl__h2_dead(loop->h2)) {
        kl__h2_free(loop->h2);
        loop->h2 = NULL;
    }
    for (size_t i = 0; i < loop->nh2_old;) {
        kl__h2 *c = loop->h2_old[i];

        if (kl__h2_dead(c) || kl__h2_idle(c)) {
            kl__h2_free(c);
            loop->h2_old[i] = loop->h2_old[--loop->nh2_old];
        } else {
            i++;
        }
    }
}

/* Go on with the reads a draining read left (their bytes may all be in
 * OpenSSL's buffer already, where epoll does not see them). */
static void native_continue(http *loop)
{
    int drain = kl__loop_batching(loop->loop);

    if (loop->h2 && kl__h2_more(loop->h2))
        kl__h2_io(loop->h2, EPOLLIN, drain);
    for (size_t i = 0; i < loop->nh2_old; i++)
        if (kl__h2_more(loop->h2_old[i]))
            kl__h2_io(loop->h2_old[i], EPOLLIN, drain);
}

/* A draining read left data behind: no wait before the next. */
static int native_more(const http *loop)
{
    if (loop->h2 && kl__h2_more(loop->h2))
        return 1;
    for (size_t i = 0; i < loop->nh2_old; i++)
        if (kl__h2_more(loop->h2_old[i]))
            return 1;
    return 0;
}

static void native_flush(http *loop)
{
    if (loop->h2)
        kl__h2_flush(loop->h2);
    for (size_t i = 0; i < loop->nh2_old; i++)
        kl__h2_flush(loop->h2_old[i]);
}

/* A new request; original: it is a hedge of that one (sent at once, on a
 * new connection). */
static kl__http_req *req_start(http *loop, const kl__http_opts *opts, kl__http_done_cb done,
                               void *arg, kl__http_req *original)
{
    kl__http_req *req = kl__calloc(1, sizeof(*req));
    const char *method = opts->method ? opts->method : "GET";

    if (!req) {
        kl__error_set(K8SLEASE_ENOMEM, "out of memory");
        return NULL;
    }
    req->loop = loop;
    req->next = loop->reqs;
    if (loop->reqs)
        loop->reqs->prev = req;
    loop->reqs = req;
    kl__timer_init(&req->timer, on_req_timer, req);
    req->done = done;
    req->arg = original ? req : arg; /* a hedge's done is hedge_done */
    req->on_data = opts->on_data;
    req->on_open = opts->on_data ? opts->on_open : NULL;
    if (req->on_data) {
        loop->streams++;
        set_limits(loop);
    }
    req->timeout_ms = opts->timeout_ms;
    if (!opts->on_data && opts->timeout_ms > 0 && opts->hedge_ms > 0 && !original)
        req->hedge_ns = opts->hedge_ms * KL_NS_PER_MS;
    if (original) {
        req->original = original;
        req->hedge_next = original->hedges;
        original->hedges = req;
        original->nhedged++;
        loop->hedging++;
        set_limits(loop);
    }
    req->connect_timeout_ms = opts->connect_timeout_ms;
    req->idle_ns = opts->on_data ? opts->idle_timeout_ms * KL_NS_PER_MS : 0;
    req->started_at = kl__loop_now(loop->loop);
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
        goto fail;
    }
    /* Streams start at once: they last and must never wait behind requests;
     * so do hedges, whose original waited already. */
    if (!req->on_data && !original && (loop->wait_head || loop->active >= MAX_ACTIVE)) {
        req->waiting = 1;
        if (loop->wait_tail)
            loop->wait_tail->wait_next = req;
        else
            loop->wait_head = req;
        loop->wait_tail = req;
        return req;
    }
    if (dispatch(loop, req) < 0)
        goto fail;
    return req;
fail:
    req_free(loop, req);
    return NULL;
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
    kl__http_req *h = arg, *req = h->original;
    http *loop = h->loop;

    hedge_unlink(loop, h);
    if (res->err) {
        if (req->lost && !req->hedges)
            req_complete(loop, req);
        return;
    }
    loop->hedges_won++;
    kl__log_printf(loop->log, K8SLEASE_LOG_DEBUG,
                   "%s %s%s: answered on a new connection after %lld ms", req->method,
                   req_server(loop, req), req->path,
                   (long long)((kl__loop_now(loop->loop) - req->started_at) / KL_NS_PER_MS));
    abandon_connection(loop, req, "answered a request later than a new connection");
    hedges_drop(loop, req);
    kl__timer_cancel(loop->loop, &req->timer);
    req->busy = 1;
    req->done(res, req->arg);
    req_free(loop, req);
}

/* The original has waited another hedge_ns: send one more copy on a new
 * connection, if the loop has room and the copy has time left. */
static void hedge_tick(http *loop, kl__http_req *req)
{
    int64_t now = kl__loop_now(loop->loop);
    int64_t left_ms = req->timeout_ms - (now - req->started_at) / KL_NS_PER_MS;
    kl__http_opts o = {0};
    if (req->nhedged >= HEDGES_PER_REQUEST || left_ms * KL_NS_PER_MS < req->hedge_ns) {
        req_timer_arm(loop, req, 0);
        return;
    }
    req_timer_arm(loop, req, now + req->hedge_ns);
    if (loop->hedging >= HEDGES_PER_LOOP)
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
    kl__log_printf(loop->log, K8SLEASE_LOG_DEBUG,
                   "%s %s%s: no answer after %lld ms; the same request on a new connection too",
                   req->method, req_server(loop, req), req->path,
                   (long long)((now - req->started_at) / KL_NS_PER_MS));
    /* Out of memory: the original goes on alone. */
    (void)req_start(loop, &o, hedge_done, NULL, req);
}

uint64_t kl__loop_abandoned(const kl__loop *l)
{
    const http *loop = kl__loop_data(l);

    return loop->abandoned;
}

uint64_t kl__loop_hedges_won(const kl__loop *l)
{
    const http *loop = kl__loop_data(l);

    return loop->hedges_won;
}

const char *kl__loop_transport(const kl__loop *l)
{
    const http *loop = kl__loop_data(l);

    return loop->native ? "native" : "libcurl";
}

uint64_t kl__loop_h2_connections(const kl__loop *l)
{
    const http *loop = kl__loop_data(l);

    return loop->h2_opened;
}

void kl__http_cancel(kl__loop *l, kl__http_req *req)
{
    http *loop = kl__loop_data(l);

    if (!req)
        return;
    if (req->busy) {
        req->cancelled = 1;
        return;
    }
    req_free(loop, req);
}

/* Hand buffered stream bytes to on_data, outside libcurl's callbacks. */
static void deliver_streams(http *loop)
{
    kl__http_req *req;

    while ((req = loop->ready)) {
        int rc;

        loop->ready = req->ready_next;
        req->ready_next = NULL;
        req->on_ready = 0;
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
            req_free(loop, req);
        } else if (rc) {
            char msg[1024];

            if (kl__error_get()[0])
                snprintf(msg, sizeof(msg), "%s", kl__error_get());
            else
                snprintf(msg, sizeof(msg), "%s%s: stream ended by its reader",
                         req_server(loop, req), req->path);
            req_fail(loop, req, rc, msg);
        }
    }
}

static void finish_transfers(http *loop)
{
    CURLMsg *msg;
    int left;

    while ((msg = curl_multi_info_read(loop->multi, &left))) {
        char *p = NULL;
        CURLcode rc = msg->data.result;

        if (msg->msg != CURLMSG_DONE)
            continue;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &p);
        req_finish(loop, (kl__http_req *)(void *)p, rc);
    }
}

/* ------------------------------------------------------------------------ */
/* On the loop                                                              */
/* ------------------------------------------------------------------------ */

/* One of libcurl's sockets is ready: tell libcurl, as its own poll would
 * say it (Curl_socket_check). */
static void on_curl_ready(int fd, uint32_t events, void *arg)
{
    http *loop = arg;
    int running, mask = 0;

    if (events & (EPOLLIN | EPOLLERR | EPOLLHUP))
        mask |= CURL_CSELECT_IN;
    if (events & (EPOLLOUT | EPOLLERR | EPOLLHUP))
        mask |= CURL_CSELECT_OUT;
    curl_multi_socket_action(loop->multi, fd, mask, &running);
}

/* libcurl's wish for a socket: the events the loop watches it for (the
 * loop's table makes a repeated wish, which libcurl says whenever another
 * transfer starts on a shared HTTP/2 connection, cost nothing). */
static int on_socket(CURL *e, curl_socket_t fd, int what, void *arg, void *sockp)
{
    http *loop = arg;
    uint32_t events;

    (void)e;
    (void)sockp;
    if (what == CURL_POLL_REMOVE) {
        kl__loop_unwatch(loop->loop, fd);
        return 0;
    }
    events = (what & CURL_POLL_IN ? EPOLLIN : 0) | (what & CURL_POLL_OUT ? EPOLLOUT : 0);
    /* Not -1 on failure, which would end the whole multi handle for good:
     * the transfers on this socket end by their own timeouts (a stream's
     * idle timeout), and the next wish asks again. */
    if (kl__loop_watch(loop->loop, fd, events, on_curl_ready, loop) < 0)
        kl__log_printf(loop->log, K8SLEASE_LOG_ERROR, "%s", kl__error_get());
    return 0;
}

static void run(void *data);

static void on_curl_due(kl__timer *t, void *arg)
{
    http *loop = arg;
    int running;

    (void)t;
    curl_multi_socket_action(loop->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    run(loop);
}

/* libcurl's timer: due in timeout_ms (-1: none). libcurl rounds down to
 * the millisecond, and a call before its time does nothing but ask for
 * another wake-up: one millisecond more. */
static int on_curl_timer(CURLM *multi, long timeout_ms, void *arg)
{
    http *loop = arg;

    (void)multi;
    if (timeout_ms < 0)
        kl__timer_cancel(loop->loop, &loop->curl_timer);
    else
        kl__timer_arm(loop->loop, &loop->curl_timer,
                      kl__clock_mono_ns() + (timeout_ms > 0 ? timeout_ms + 1 : 0) * KL_NS_PER_MS);
    return 0;
}

/* The loop's hooks. */
static void run(void *data)
{
    http *loop = data;

    native_continue(loop);
    deliver_streams(loop);
    finish_native(loop);
    finish_transfers(loop);
    reap_native(loop);
}

static int busy(void *data)
{
    http *loop = data;

    return loop->h2_done || loop->ready || native_more(loop);
}

static int flush(void *data)
{
    http *loop = data;

    native_flush(loop);
    return loop->h2_done || loop->ready;
}

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
    const curl_version_info_data *v = curl_version_info(CURLVERSION_NOW);

    if (curl_init_rc != CURLE_OK)
        return kl__error_set(K8SLEASE_ETRANSPORT, "curl_global_init: %s",
                             curl_easy_strerror(curl_init_rc));
    if (!v->ssl_version || strncmp(v->ssl_version, "OpenSSL/", 8) != 0)
        return kl__error_set(K8SLEASE_ETRANSPORT, "libcurl's TLS is %s; k8slease needs OpenSSL",
                             v->ssl_version ? v->ssl_version : "none");
    return 0;
}

/* Copy an optional string; 0 on success. */
static int dup_opt(char **dst, const char *src)
{
    *dst = src ? kl__strdup(src) : NULL;
    return src && !*dst ? K8SLEASE_ENOMEM : 0;
}

/* The configured server's address for the native transport, when its host
 * is one (a name would need a resolver off the loop thread: libcurl's). */
static void native_address(http *loop, const char *host, const char *port)
{
    char ip[64];
    size_t len = strlen(host);
    long p = strtol(port, NULL, 10);

    if (host[0] == '[' && len > 2 && len - 2 < sizeof(ip)) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&loop->addr;

        memcpy(ip, host + 1, len - 2);
        ip[len - 2] = '\0';
        if (inet_pton(AF_INET6, ip, &a->sin6_addr) == 1) {
            a->sin6_family = AF_INET6;
            a->sin6_port = htons((uint16_t)p);
            loop->addrlen = sizeof(*a);
        }
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&loop->addr;

        if (inet_pton(AF_INET, host, &a->sin_addr) == 1) {
            a->sin_family = AF_INET;
            a->sin_port = htons((uint16_t)p);
            loop->addrlen = sizeof(*a);
        }
        snprintf(ip, sizeof(ip), "%s", host);
    }
    if (loop->addrlen && !(loop->verify_host = kl__strdup(ip)))
        loop->addrlen = 0;
}

/* Parse the server URL into the request base and, with tls_server_name, a
 * CONNECT_TO rule: the URL carries that name (so SNI and verification use
 * it) while the connection goes to the configured host. */
static int parse_server(http *loop, const kl__restconfig *cfg)
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
        loop->protocols = "https";
    } else if (strcmp(scheme, "http") == 0) {
        loop->protocols = "http";
    } else {
        err = kl__error_set(K8SLEASE_ECONFIG, "%s: server \"%s\": scheme must be https or http",
                            source, cfg->server);
        goto out;
    }
    native_address(loop, host, port);
    if (loop->addrlen && cfg->tls_server_name && cfg->tls_server_name[0]) {
        kl__free(loop->verify_host);
        if (!(loop->verify_host = kl__strdup(cfg->tls_server_name)))
            loop->addrlen = 0;
    }
    if (cfg->tls_server_name && cfg->tls_server_name[0]) {
        struct curl_slist *l;
        char *rule = kl__sprintf("::%s:%s", host, port);

        name = strchr(cfg->tls_server_name, ':') ? kl__sprintf("[%s]", cfg->tls_server_name)
                                                 : kl__strdup(cfg->tls_server_name);
        l = rule ? curl_slist_append(NULL, rule) : NULL;
        kl__free(rule);
        if (!name || !l) {
            curl_slist_free_all(l);
            err = kl__error_set(K8SLEASE_ENOMEM, "out of memory");
            goto out;
        }
        loop->connect_to = l;
        if (curl_url_set(u, CURLUPART_HOST, name, 0) != CURLUE_OK) {
            err = kl__error_set(K8SLEASE_ECONFIG, "%s: tls-server-name \"%s\" is not a host name",
                                source, cfg->tls_server_name);
            goto out;
        }
    }
    if (curl_url_get(u, CURLUPART_URL, &url, 0) != CURLUE_OK || !(loop->base = kl__strdup(url))) {
        err = kl__error_set(K8SLEASE_ENOMEM, "out of memory");
        goto out;
    }
    /* Request paths start with '/'. */
    len = strlen(loop->base);
    while (len > 0 && loop->base[len - 1] == '/')
        loop->base[--len] = '\0';
out:
    kl__free(name);
    curl_free(url);
    curl_free(port);
    curl_free(host);
    curl_free(scheme);
    curl_url_cleanup(u);
    return err;
}

static int copy_config(http *loop, const kl__restconfig *cfg)
{
    size_t len;
    int err;

    if (!cfg->server || !cfg->server[0])
        return kl__error_set(K8SLEASE_ECONFIG, "%s: no server URL",
                             cfg->source ? cfg->source : "config");
    if ((err = dup_opt(&loop->server, cfg->server)) < 0)
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    loop->exec = cfg->exec != NULL;
    if ((err = kl__creds_new(&loop->creds, cfg, loop->log, creds_ready, loop)) < 0)
        return err;
    len = strlen(loop->server);
    while (len > 0 && loop->server[len - 1] == '/')
        loop->server[--len] = '\0';
    if ((err = kl__tls_new(&loop->tls, cfg)) < 0)
        return err;
    return parse_server(loop, cfg);
}

/* The TLS context of the native transport: the loop's TLS setup, and what
 * a connection of our own wants of OpenSSL. NULL: out of memory. */
static SSL_CTX *native_ctx(const http *loop)
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
    if (kl__tls_setup(loop->tls, ctx) < 0) {
        SSL_CTX_free(ctx);
        return NULL;
    }
    return ctx;
}

/* Whether the native transport serves this configuration (unless
 * K8SLEASE_TRANSPORT=libcurl); libcurl serves it otherwise. K8SLEASE_ECONFIG
 * for another value of the variable. */
static int native_setup(http *loop)
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
    if (strcmp(loop->protocols, "https") != 0)
        why = "the server is not https";
    else if (!loop->addrlen)
        why = "the server's host is not an IP address";
    else if (strchr(loop->base + strlen("https://"), '/'))
        why = "the server's URL has a path";
    else if (loop->exec)
        why = "exec credentials";
    for (size_t i = 0; !why && i < KL_ARRAY_LEN(proxies); i++)
        if (getenv(proxies[i]) && getenv(proxies[i])[0])
            why = "a proxy is set";
    if (!why && !(loop->authority = kl__strdup(loop->base + strlen("https://"))))
        why = "out of memory";
    if (!why && !(loop->ssl_ctx = native_ctx(loop)))
        why = "out of memory";
    if (why) {
        kl__log_printf(loop->log, K8SLEASE_LOG_INFO, "%s: native transport not used: %s",
                       loop->server, why);
        return 0;
    }
    loop->native = 1;
    return 0;
}

static void destroy(void *data)
{
    http *loop = data;

    loop->destroying = 1;
    while (loop->reqs)
        req_free(loop, loop->reqs);
    kl__h2_free(loop->h2);
    for (size_t i = 0; i < loop->nh2_old; i++)
        kl__h2_free(loop->h2_old[i]);
    kl__free(loop->h2_old);
    if (loop->ssl_ctx)
        SSL_CTX_free(loop->ssl_ctx);
    kl__free(loop->authority);
    kl__free(loop->verify_host);
    while (loop->nspare > 0)
        curl_easy_cleanup(loop->spare[--loop->nspare]);
    if (loop->multi)
        curl_multi_cleanup(loop->multi);
    kl__timer_cancel(loop->loop, &loop->curl_timer);
    kl__free(loop->socks);
    curl_slist_free_all(loop->connect_to);
    kl__free(loop->server);
    kl__free(loop->base);
    kl__tls_free(loop->tls);
    kl__free(loop->user_agent);
    kl__creds_free(loop->creds);
    kl__free(loop);
}

static const kl__loop_hooks hooks = {run, busy, flush, destroy};

int kl__loop_new(kl__loop **out, const kl__restconfig *cfg, const kl__log *log,
                 const char *user_agent)
{
    http *loop = NULL;
    int err = 0;

    *out = NULL;
    pthread_once(&curl_once, curl_init);
    if ((err = curl_check()) < 0)
        return err;
    if (!(loop = kl__calloc(1, sizeof(*loop))))
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    loop->log = log;
    kl__timer_init(&loop->curl_timer, on_curl_due, loop);
    if ((err = copy_config(loop, cfg)) < 0)
        goto out;
    loop->user_agent = user_agent && user_agent[0] ? kl__sprintf("%s %s", USER_AGENT, user_agent)
                                                   : kl__strdup(USER_AGENT);
    if (!loop->user_agent) {
        err = kl__error_set(K8SLEASE_ENOMEM, "out of memory");
        goto out;
    }
    if (!(loop->multi = multi_init_cloexec())) {
        err = kl__error_set(K8SLEASE_ENOMEM, "out of memory");
        goto out;
    }
    curl_multi_setopt(loop->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
    curl_multi_setopt(loop->multi, CURLMOPT_SOCKETDATA, loop);
    curl_multi_setopt(loop->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
    curl_multi_setopt(loop->multi, CURLMOPT_TIMERDATA, loop);
    curl_multi_setopt(loop->multi, CURLMOPT_PIPELINING, (long)CURLPIPE_MULTIPLEX);
    loop->dead_ms = DEFAULT_DEAD_MS;
    set_limits(loop);
    if ((err = native_setup(loop)) < 0)
        goto out;
    if ((err = kl__loop_start(&loop->loop, &hooks, loop, log)) < 0)
        goto out;
    *out = loop->loop;
    loop = NULL;
out:
    if (loop)
        destroy(loop);
    return err;
}

void kl__loop_set_dead_timeout(kl__loop *l, int64_t ms)
{
    http *loop = kl__loop_data(l);

    if (ms > 0 && ms < loop->dead_ms)
        loop->dead_ms = ms < 100 ? 100 : ms;
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
