/* The conn of an etcd client: endpoints, authentication and failover for
 * every etcd request, the calls, the watch streams and the blocking calls
 * (etcd/conn.h). The elector (etcd/driver.c), the holder and release
 * (etcd/client.c) and the holder watch (etcd/watch.c) talk to etcd through
 * it.
 *
 * The endpoints come from the client's options (kl__etcd_endpoints_parse).
 *
 * Requests never retry by themselves beyond what cannot have reached etcd
 * (a refused connection is tried once on each other endpoint) and one
 * re-authentication: their owners (the election, the holder watch) already
 * retry on their own schedule, and only they know what is safe to repeat.
 * Watch streams are the exception: one that falls silent on a member that
 * stopped answering is resumed elsewhere by itself, from the revision it
 * had reached (the liveness bound in etcd/conn.h). */
#include "etcd/conn.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "core/clock.h"
#include "core/text.h"
#include "core/timings.h"
#include "etcd/codec.h"

#define AUTH_TIMEOUT_MS 10000
/* A watch message carries every event of one revision: a revoke of a lease
 * holding many keys makes a long line. */
#define STREAM_MAX_LINE (4u << 20)

/* ------------------------------------------------------------------------ */
/* Endpoints                                                                */
/* ------------------------------------------------------------------------ */

static int bad_endpoint(const char *ep, size_t len, const char *why)
{
    return kl__error_set(K8SLEASE_EINVAL, "etcd_endpoints: \"%.*s\": %s",
                         (int)(len > 200 ? 200 : len), ep, why);
}

static int lower(int c)
{
    return c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c;
}

/* Case-insensitive "does s (len bytes) start with lowercase p". */
static int has_prefix(const char *s, size_t len, const char *p)
{
    size_t n = strlen(p);

    if (len < n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (lower((unsigned char)s[i]) != p[i])
            return 0;
    return 1;
}

/* "something://" in s (len bytes, not NUL-terminated). */
static int has_scheme(const char *s, size_t len)
{
    for (size_t i = 1; i + 3 <= len; i++)
        if (s[i] == ':' && s[i + 1] == '/' && s[i + 2] == '/')
            return 1;
    return 0;
}

static int is_host_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_';
}

static int is_ipv6_char(char c)
{
    return (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || (c >= '0' && c <= '9') || c == ':' ||
           c == '.';
}

/* One endpoint (not NUL-terminated, trimmed) to a malloc'ed
 * "scheme://host:port". */
static int parse_endpoint(const char *s, size_t len, char **out, int *https)
{
    const char *p, *end = s + len, *host, *host_end, *port;
    long port_no = 0;

    if (has_prefix(s, len, "http://")) {
        *https = 0;
        p = s + 7;
    } else if (has_prefix(s, len, "https://")) {
        *https = 1;
        p = s + 8;
    } else if (has_scheme(s, len)) {
        return bad_endpoint(s, len, "scheme must be http or https");
    } else {
        return bad_endpoint(s, len, "must be http://host:port or https://host:port");
    }
    if (end > p && end[-1] == '/')
        end--;
    for (const char *q = p; q < end; q++) {
        if (*q == '@')
            return bad_endpoint(s, len, "user info is not allowed (use etcd_username)");
        if (*q == '/')
            return bad_endpoint(s, len, "a path is not allowed (the gateway is at /v3)");
        if (*q == '?' || *q == '#')
            return bad_endpoint(s, len, "a query or fragment is not allowed");
    }
    host = p;
    if (p < end && *p == '[') {
        const char *close = memchr(p, ']', (size_t)(end - p));

        if (!close || close == p + 1)
            return bad_endpoint(s, len, "bad IPv6 address (expected [address]:port)");
        for (const char *q = p + 1; q < close; q++)
            if (!is_ipv6_char(*q))
                return bad_endpoint(s, len, "bad IPv6 address (expected [address]:port)");
        host_end = close + 1;
        if (host_end == end || *host_end != ':')
            return bad_endpoint(s, len, "port missing (e.g. :2379)");
    } else {
        host_end = p;
        while (host_end < end && *host_end != ':')
            host_end++;
        if (host_end == p)
            return bad_endpoint(s, len, "host missing");
        for (const char *q = p; q < host_end; q++)
            if (!is_host_char(*q))
                return bad_endpoint(s, len, "bad character in host name");
        if (host_end == end)
            return bad_endpoint(s, len, "port missing (e.g. :2379)");
    }
    port = host_end + 1;
    if (port == end || end - port > 5)
        return bad_endpoint(s, len, "port must be a number from 1 to 65535");
    for (const char *q = port; q < end; q++) {
        if (*q < '0' || *q > '9')
            return bad_endpoint(s, len, "port must be a number from 1 to 65535");
        port_no = port_no * 10 + (*q - '0');
    }
    if (port_no < 1 || port_no > 65535)
        return bad_endpoint(s, len, "port must be a number from 1 to 65535");
    *out = kl__sprintf("%s://%.*s", *https ? "https" : "http", (int)(end - host), host);
    return *out ? 0 : kl__error_set(K8SLEASE_ENOMEM, "out of memory");
}

static int is_blank(char c)
{
    return c == ' ' || c == '\t';
}

int kl__etcd_endpoints_parse(const char *list, char ***out, size_t *n)
{
    char **eps = NULL;
    size_t count = 1, i = 0;
    int err = 0, first_https = 0;

    *out = NULL;
    *n = 0;
    if (!list)
        return kl__error_set(K8SLEASE_EINVAL, "etcd_endpoints is NULL");
    for (const char *p = list; *p; p++)
        count += *p == ',';
    if (!(eps = kl__calloc(count + 1, sizeof(*eps))))
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    for (const char *p = list;; i++) {
        const char *comma = strchr(p, ','), *end = comma ? comma : p + strlen(p);
        int https = 0;

        while (p < end && is_blank(*p))
            p++;
        while (end > p && is_blank(end[-1]))
            end--;
        if (p == end) {
            err = kl__error_set(K8SLEASE_EINVAL, "etcd_endpoints \"%.200s\": endpoint %zu is empty",
                                list, i + 1);
            goto out;
        }
        if ((err = parse_endpoint(p, (size_t)(end - p), &eps[i], &https)) < 0)
            goto out;
        if (i == 0) {
            first_https = https;
        } else if (https != first_https) {
            err =
                bad_endpoint(p, (size_t)(end - p),
                             first_https ? "all endpoints must use one scheme (the first is https)"
                                         : "all endpoints must use one scheme (the first is http)");
            goto out;
        }
        if (!comma)
            break;
        p = comma + 1;
    }
    *out = eps;
    *n = count;
    eps = NULL;
out:
    kl__etcd_endpoints_free(eps);
    return err;
}

void kl__etcd_endpoints_free(char **endpoints)
{
    if (!endpoints)
        return;
    for (char **p = endpoints; *p; p++)
        kl__free(*p);
    kl__free(endpoints);
}

/* ------------------------------------------------------------------------ */
/* The conn                                                                 */
/* ------------------------------------------------------------------------ */

struct kl__etcd_conn {
    kl__loop *loop;
    const kl__log *log;
    char **endpoints; /* NULL-terminated */
    size_t n;
    _Atomic size_t cur; /* where requests go now */
    char *username, *password;

    /* Loop thread only. */
    char *token;        /* NULL: none yet, or refused */
    uint64_t token_gen; /* bumped by every new token */
    int auth_disabled;  /* etcd said authentication is not enabled */
    kl__http_req *auth_req;
    size_t auth_endpoint;                 /* where auth_req went */
    size_t auth_tries;                    /* endpoints that refused the connection in a row */
    kl__etcd_call *calls;                 /* every live call */
    kl__etcd_call *wait_head, *wait_tail; /* calls waiting for a token */
};

struct kl__etcd_call {
    kl__etcd_conn *conn;
    kl__etcd_call *prev, *next; /* conn->calls */
    kl__etcd_call *wait_next;
    int waiting;
    char *path, *body;
    size_t body_len;
    int64_t deadline; /* monotonic ns, 0: none */
    kl__http_data_cb on_data;
    kl__etcd_done_cb done;
    void *arg;

    kl__http_req *req;
    size_t endpoint;            /* where req went */
    int pinned;                 /* endpoint chosen by the caller (a probe), not the conn */
    int64_t connect_timeout_ms; /* kl__http_opts.connect_timeout_ms */
    uint64_t token_gen;         /* of the token req carries */
    int reauthed;               /* re-sent once after a refused token already */
    size_t tries;               /* other endpoints tried after refused connections */
    int opened;                 /* a stream delivered data: never re-sent */
    int in_done;
    kl__timer timer; /* a failure to deliver later; the deadline while waiting */
    int err;
    char errmsg[1024];
};

/* Overwrite a secret string before its memory goes back to the allocator. */
static void wipe(char *s)
{
    if (s)
        kl__wipe(s, strlen(s));
}

static void free_secret(char *s)
{
    wipe(s);
    kl__free(s);
}

const char *kl__etcd_conn_endpoint(const kl__etcd_conn *conn)
{
    return conn->endpoints[atomic_load(&((kl__etcd_conn *)conn)->cur)];
}

/* The message of a core/http.c error without its leading "<endpoint>" (it
 * names the server first), to put in a sentence that names it already. */
static const char *after_endpoint(const char *msg, const char *ep)
{
    size_t n = strlen(ep);

    if (strncmp(msg, ep, n) == 0) {
        msg += n;
        if (msg[0] == ':' && msg[1] == ' ')
            msg += 2;
    }
    return msg;
}

/* etcd prefixes its messages with "etcdserver: "; ours name etcd already. */
static const char *strip_etcdserver(const char *msg)
{
    return strncmp(msg, "etcdserver: ", 12) == 0 ? msg + 12 : msg;
}

/* Requests go to the next endpoint from now on, if the failed one (from)
 * is still the current one: several calls failing at once move it once. */
static void failover(kl__etcd_conn *conn, size_t from, const char *why)
{
    size_t next;

    if (conn->n < 2 || atomic_load(&conn->cur) != from)
        return;
    next = (from + 1) % conn->n;
    atomic_store(&conn->cur, next);
    kl__log_printf(conn->log, K8SLEASE_LOG_INFO, "etcd: %s failed (%s); trying %s",
                   conn->endpoints[from], after_endpoint(why, conn->endpoints[from]),
                   conn->endpoints[next]);
}

/* Transport failures that say the endpoint did not answer. */
static int is_conn_failure(int err)
{
    return err == K8SLEASE_ETRANSPORT || err == K8SLEASE_ETIMEOUT || err == K8SLEASE_ETLS;
}

/* The request surely never reached etcd, so sending it elsewhere cannot
 * apply it twice. */
static int never_sent(const kl__http_result *res)
{
    return res->err == K8SLEASE_ETLS || (res->err == K8SLEASE_ETRANSPORT && res->unsent);
}

static int need_token(const kl__etcd_conn *conn)
{
    return conn->username && !conn->token && !conn->auth_disabled;
}

static void call_free(kl__etcd_call *c)
{
    kl__etcd_conn *conn = c->conn;

    if (c->prev)
        c->prev->next = c->next;
    else if (conn->calls == c)
        conn->calls = c->next;
    if (c->next)
        c->next->prev = c->prev;
    kl__free(c->path);
    kl__free(c->body);
    kl__free(c);
}

static void dequeue(kl__etcd_call *c)
{
    kl__etcd_conn *conn = c->conn;
    kl__etcd_call **pp = &conn->wait_head, *prev = NULL;

    if (!c->waiting)
        return;
    while (*pp && *pp != c) {
        prev = *pp;
        pp = &(*pp)->wait_next;
    }
    if (*pp)
        *pp = c->wait_next;
    if (conn->wait_tail == c)
        conn->wait_tail = prev;
    c->wait_next = NULL;
    c->waiting = 0;
}

static void complete(kl__etcd_call *c, int err, long status, const char *body, size_t len,
                     const char *errmsg)
{
    kl__etcd_result r = {0};

    kl__timer_cancel(c->conn->loop, &c->timer);
    dequeue(c);
    r.err = err;
    r.errmsg = err ? errmsg : "";
    r.status = status;
    r.body = body ? body : "";
    r.body_len = body ? len : 0;
    c->in_done = 1;
    c->done(&r, c->arg);
    call_free(c);
}

static void fail_later(kl__etcd_call *c, int err, const char *fmt, ...) KL_PRINTF(3, 4);

/* Fail a call from its own timer: its owner may be the caller right now. */
static void fail_later(kl__etcd_call *c, int err, const char *fmt, ...)
{
    va_list ap;

    dequeue(c);
    c->err = err;
    va_start(ap, fmt);
    vsnprintf(c->errmsg, sizeof(c->errmsg), fmt, ap);
    va_end(ap);
    kl__timer_arm(c->conn->loop, &c->timer, kl__loop_now(c->conn->loop));
}

static void on_call_timer(kl__timer *t, void *arg)
{
    kl__etcd_call *c = arg;

    (void)t;
    if (c->waiting && !c->err) {
        char msg[1024];

        snprintf(msg, sizeof(msg), "etcd %s%s: timeout: no token yet (authentication pending)",
                 kl__etcd_conn_endpoint(c->conn), c->path);
        complete(c, K8SLEASE_ETIMEOUT, 0, NULL, 0, msg);
    } else {
        complete(c, c->err, 0, NULL, 0, c->errmsg);
    }
}

static int call_data(const char *data, size_t len, void *arg)
{
    kl__etcd_call *c = arg;

    /* c may be cancelled (freed) inside on_data: not touched afterwards */
    c->opened = 1;
    return c->on_data(data, len, c->arg);
}

static void call_done(const kl__http_result *res, void *arg);
static void ensure_auth(kl__etcd_conn *conn);

static int send_call(kl__etcd_call *c)
{
    kl__etcd_conn *conn = c->conn;
    kl__http_opts o = {0};
    int64_t now = kl__loop_now(conn->loop);

    if (!c->pinned)
        c->endpoint = atomic_load(&conn->cur);
    if (c->deadline && now >= c->deadline)
        return kl__error_set(K8SLEASE_ETIMEOUT, "etcd %s%s: timeout (before it could be sent)",
                             conn->endpoints[c->endpoint], c->path);
    o.method = "POST";
    o.path = c->path;
    o.content_type = "application/json";
    o.body = c->body;
    o.body_len = c->body_len;
    o.timeout_ms = c->deadline ? (c->deadline - now + KL_NS_PER_MS - 1) / KL_NS_PER_MS : 0;
    o.on_data = c->on_data ? call_data : NULL;
    o.connect_timeout_ms = c->connect_timeout_ms;
    o.base_url = conn->endpoints[c->endpoint];
    o.authorization = conn->auth_disabled ? NULL : conn->token;
    c->token_gen = conn->token_gen;
    if (!(c->req = kl__http_start(conn->loop, &o, call_done, c)))
        return kl__error_set(K8SLEASE_ENOMEM, "etcd %s%s: out of memory", o.base_url, c->path);
    return 0;
}

static void enqueue(kl__etcd_call *c)
{
    kl__etcd_conn *conn = c->conn;

    c->waiting = 1;
    c->wait_next = NULL;
    if (conn->wait_tail)
        conn->wait_tail->wait_next = c;
    else
        conn->wait_head = c;
    conn->wait_tail = c;
    /* a deadline passing while the token is on its way fails the call */
    if (c->deadline)
        kl__timer_arm(conn->loop, &c->timer, c->deadline);
}

/* Send now, or after authenticating. Never completes c. */
static void send_or_wait(kl__etcd_call *c)
{
    if (need_token(c->conn)) {
        enqueue(c);
        ensure_auth(c->conn);
    } else {
        int err = send_call(c);

        if (err < 0)
            fail_later(c, err, "%s", kl__error_get());
    }
}

static void fail_waiting(kl__etcd_conn *conn, int err, const char *msg)
{
    while (conn->wait_head)
        fail_later(conn->wait_head, err, "%s", msg);
}

static void send_waiting(kl__etcd_conn *conn)
{
    kl__etcd_call *c = conn->wait_head;

    conn->wait_head = conn->wait_tail = NULL;
    while (c) {
        kl__etcd_call *next = c->wait_next;
        int err;

        c->waiting = 0;
        c->wait_next = NULL;
        kl__timer_cancel(conn->loop, &c->timer);
        if ((err = send_call(c)) < 0)
            fail_later(c, err, "%s", kl__error_get());
        c = next;
    }
}

/* A refused token: etcd's "invalid auth token" (simple tokens expire after
 * --auth-token-ttl of disuse and are known only to the member that issued
 * them), or "user name is empty" when we sent none. */
static int token_refused(const kl__etcd_conn *conn, long status, const kl__etcd_error *ge)
{
    const char *m = ge->message ? ge->message : "";

    if (!conn->username)
        return 0;
    return status == 401 || ge->grpc_code == 16 || strstr(m, "invalid auth token") ||
           strstr(m, "user name is empty");
}

static void call_done(const kl__http_result *res, void *arg)
{
    kl__etcd_call *c = arg;
    kl__etcd_conn *conn = c->conn;
    const char *ep = conn->endpoints[c->endpoint];
    kl__etcd_error ge = {0};
    char msg[1024];
    int code;

    c->req = NULL;
    if (res->err) {
        if (strncmp(res->errmsg, ep, strlen(ep)) == 0)
            snprintf(msg, sizeof(msg), "etcd %s", res->errmsg);
        else
            snprintf(msg, sizeof(msg), "etcd %s%s: %s", ep, c->path, res->errmsg);
        if (is_conn_failure(res->err)) {
            failover(conn, c->endpoint, res->errmsg);
            if (never_sent(res) && !c->opened && !c->pinned && c->tries + 1 < conn->n) {
                c->tries++;
                send_or_wait(c);
                return;
            }
        }
        complete(c, res->err, 0, NULL, 0, msg);
        return;
    }
    if (res->status == 200) {
        complete(c, 0, 200, res->body, res->body_len, NULL);
        return;
    }
    if (kl__etcd_error_parse(&ge, res->body, res->body_len) == 0) {
        code = kl__etcd_error_code(ge.grpc_code, ge.message);
        snprintf(msg, sizeof(msg), "etcd %s%s: %s (HTTP %ld, gRPC code %d)", ep, c->path,
                 strip_etcdserver(ge.message[0] ? ge.message : "error without a message"),
                 res->status, ge.grpc_code);
    } else {
        char snippet[121];
        size_t n = res->body_len < 120 ? res->body_len : 120;

        for (size_t i = 0; i < n; i++)
            snippet[i] = res->body[i] >= 0x20 && res->body[i] < 0x7f ? res->body[i] : ' ';
        while (n > 0 && snippet[n - 1] == ' ')
            n--;
        snippet[n] = '\0';
        code = res->status == 401 || res->status == 403 ? K8SLEASE_EAUTH
               : res->status >= 500                     ? K8SLEASE_ESERVER
                                                        : K8SLEASE_EPROTOCOL;
        snprintf(msg, sizeof(msg), "etcd %s%s: HTTP %ld%s%s (not an etcd gateway answer)", ep,
                 c->path, res->status, n ? ": " : "", snippet);
    }
    if (token_refused(conn, res->status, &ge) && !c->reauthed) {
        c->reauthed = 1;
        /* Only a refusal of the newest token drops it: calls that left
         * with an older one just go again with the new one. */
        if (c->token_gen == conn->token_gen) {
            free_secret(conn->token);
            conn->token = NULL;
            conn->auth_disabled = 0;
        }
        kl__log_printf(conn->log, K8SLEASE_LOG_DEBUG, "etcd %s: token refused (%s); authenticating",
                       ep, strip_etcdserver(ge.message ? ge.message : ""));
        kl__etcd_error_clear(&ge);
        send_or_wait(c);
        return;
    }
    if (ge.grpc_code == 14 || res->status == 503)
        failover(conn, c->endpoint, msg + 5 /* "etcd " */);
    kl__etcd_error_clear(&ge);
    complete(c, code, res->status, NULL, 0, msg);
}

static void auth_done(const kl__http_result *res, void *arg)
{
    kl__etcd_conn *conn = arg;
    const char *ep = conn->endpoints[conn->auth_endpoint];
    kl__etcd_error ge = {0};
    char msg[1024], *token = NULL;
    int code;

    conn->auth_req = NULL;
    if (res->err) {
        if (is_conn_failure(res->err)) {
            failover(conn, conn->auth_endpoint, res->errmsg);
            if (never_sent(res) && conn->auth_tries + 1 < conn->n) {
                conn->auth_tries++;
                ensure_auth(conn);
                return;
            }
        }
        conn->auth_tries = 0;
        snprintf(msg, sizeof(msg), "etcd %s: authenticate: %s", ep,
                 after_endpoint(res->errmsg, ep));
        fail_waiting(conn, res->err, msg);
        return;
    }
    conn->auth_tries = 0;
    if (res->status == 200) {
        if ((code = kl__etcd_parse_authenticate(&token, res->body, res->body_len)) < 0) {
            snprintf(msg, sizeof(msg), "etcd %s: authenticate: %s", ep, kl__error_get());
            fail_waiting(conn, code, msg);
            return;
        }
        free_secret(conn->token);
        conn->token = token;
        conn->token_gen++;
        kl__log_printf(conn->log, K8SLEASE_LOG_DEBUG, "etcd %s: authenticated as \"%s\"", ep,
                       conn->username);
        send_waiting(conn);
        return;
    }
    if (kl__etcd_error_parse(&ge, res->body, res->body_len) == 0) {
        /* As clientv3: a user name for a cluster without authentication
         * is not an error. */
        if (strstr(ge.message, "authentication is not enabled")) {
            kl__etcd_error_clear(&ge);
            conn->auth_disabled = 1;
            kl__log_printf(conn->log, K8SLEASE_LOG_INFO,
                           "etcd %s: authentication is not enabled; sending requests without a "
                           "token",
                           ep);
            send_waiting(conn);
            return;
        }
        code = kl__etcd_error_code(ge.grpc_code, ge.message);
        snprintf(msg, sizeof(msg), "etcd %s: %s", ep,
                 strip_etcdserver(ge.message[0] ? ge.message : "authentication failed"));
        if (ge.grpc_code == 14)
            failover(conn, conn->auth_endpoint, msg + 5);
        kl__etcd_error_clear(&ge);
    } else {
        code = res->status >= 500 ? K8SLEASE_ESERVER : K8SLEASE_EAUTH;
        snprintf(msg, sizeof(msg), "etcd %s: authenticate: HTTP %ld", ep, res->status);
    }
    if (res->status == 503)
        failover(conn, conn->auth_endpoint, msg + 5);
    kl__log_printf(conn->log, K8SLEASE_LOG_WARN, "%s", msg);
    fail_waiting(conn, code, msg);
}

static void ensure_auth(kl__etcd_conn *conn)
{
    kl__http_opts o = {0};
    char *body;

    if (conn->auth_req || !conn->wait_head)
        return;
    conn->auth_endpoint = atomic_load(&conn->cur);
    if ((body = kl__etcd_encode_authenticate(conn->username, conn->password))) {
        o.method = "POST";
        o.path = "/v3/auth/authenticate";
        o.content_type = "application/json";
        o.body = body;
        o.body_len = strlen(body);
        o.timeout_ms = AUTH_TIMEOUT_MS;
        o.base_url = conn->endpoints[conn->auth_endpoint];
        conn->auth_req = kl__http_start(conn->loop, &o, auth_done, conn);
        free_secret(body);
    }
    if (!conn->auth_req) {
        char msg[512];

        snprintf(msg, sizeof(msg), "etcd %s: authenticate: %s",
                 conn->endpoints[conn->auth_endpoint], kl__error_get());
        fail_waiting(conn, K8SLEASE_ENOMEM, msg);
    }
}

/* A call to the current endpoint, or to endpoint pin (< conn->n) and there
 * only: a refused connection is not tried elsewhere. */
static kl__etcd_call *call_start(kl__etcd_conn *conn, const kl__etcd_call_opts *opts, size_t pin,
                                 kl__etcd_done_cb done, void *arg)
{
    kl__etcd_call *c = kl__calloc(1, sizeof(*c));

    if (!c) {
        kl__error_set(K8SLEASE_ENOMEM, "out of memory");
        return NULL;
    }
    c->conn = conn;
    c->next = conn->calls;
    if (conn->calls)
        conn->calls->prev = c;
    conn->calls = c;
    c->path = kl__strdup(opts->path);
    c->body = kl__strndup(opts->body ? opts->body : "", opts->body ? opts->body_len : 0);
    c->body_len = opts->body ? opts->body_len : 0;
    c->on_data = opts->on_data;
    c->connect_timeout_ms = opts->connect_timeout_ms;
    c->pinned = pin < conn->n;
    c->endpoint = c->pinned ? pin : 0;
    c->done = done;
    c->arg = arg;
    if (opts->timeout_ms > 0)
        c->deadline =
            kl__add_sat(kl__loop_now(conn->loop), opts->timeout_ms > INT64_MAX / KL_NS_PER_MS
                                                      ? INT64_MAX
                                                      : opts->timeout_ms * KL_NS_PER_MS);
    kl__timer_init(&c->timer, on_call_timer, c);
    if (!c->path || !c->body) {
        kl__error_set(K8SLEASE_ENOMEM, "out of memory");
        goto fail;
    }
    if (need_token(conn)) {
        enqueue(c);
        ensure_auth(conn);
    } else if (send_call(c) < 0) {
        goto fail;
    }
    return c;
fail:
    call_free(c);
    return NULL;
}

kl__etcd_call *kl__etcd_call_start(kl__etcd_conn *conn, const kl__etcd_call_opts *opts,
                                   kl__etcd_done_cb done, void *arg)
{
    return call_start(conn, opts, SIZE_MAX, done, arg);
}

void kl__etcd_call_cancel(kl__etcd_call *c)
{
    if (!c || c->in_done)
        return;
    kl__http_cancel(c->conn->loop, c->req);
    kl__timer_cancel(c->conn->loop, &c->timer);
    dequeue(c);
    call_free(c);
}

int kl__etcd_conn_new(kl__etcd_conn **out, kl__loop *loop, const kl__log *log,
                      char *const *endpoints, size_t n, const char *username, const char *password)
{
    kl__etcd_conn *conn;
    int err = 0;

    *out = NULL;
    if (n == 0)
        return kl__error_set(K8SLEASE_EINVAL, "etcd_endpoints: no endpoint");
    if (!(conn = kl__calloc(1, sizeof(*conn))))
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    conn->loop = loop;
    conn->log = log;
    conn->n = n;
    atomic_init(&conn->cur, 0);
    if (!(conn->endpoints = kl__calloc(n + 1, sizeof(char *))))
        goto nomem;
    for (size_t i = 0; i < n; i++)
        if (!(conn->endpoints[i] = kl__strdup(endpoints[i])))
            goto nomem;
    if (username && (!(conn->username = kl__strdup(username)) ||
                     !(conn->password = kl__strdup(password ? password : ""))))
        goto nomem;
    *out = conn;
    return 0;
nomem:
    err = kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    kl__etcd_conn_free(conn);
    return err;
}

void kl__etcd_conn_free(kl__etcd_conn *conn)
{
    if (!conn)
        return;
    /* The loop is gone and took the HTTP requests with it; what is left
     * of a call is ours (there should be none: owners cancel theirs). */
    while (conn->calls)
        call_free(conn->calls);
    kl__etcd_endpoints_free(conn->endpoints);
    kl__free(conn->username);
    free_secret(conn->password);
    free_secret(conn->token);
    kl__free(conn);
}

/* ------------------------------------------------------------------------ */
/* Watch streams                                                            */
/* ------------------------------------------------------------------------ */

struct kl__etcd_stream {
    kl__etcd_conn *conn;
    kl__etcd_call *call;  /* the watch */
    kl__etcd_call *probe; /* a range on the watch's endpoint: does it answer? */
    kl__line_splitter split;
    kl__etcd_msg_cb on_msg;
    kl__etcd_done_cb on_end;
    void *arg;
    kl__etcd_stream_opts o; /* o.silence_ms 0: no liveness bound */
    kl__etcd_watch_req req; /* key and range_end point into keys */
    char *keys;             /* key, then range_end (bytes) */
    char what[512];         /* "etcd watch of \"<key>\"", for the log */
    int64_t next_rev;       /* the first revision not delivered yet; 0: unknown (from now) */
    int64_t last_data;      /* loop time of its last byte, or of its (re)start */
    int64_t last_probe;     /* when the last probe was answered (or could not start) */
    int64_t expect_rev;     /* a probe saw this revision: the stream must deliver it */
    int64_t expect_by;      /* by then */
    int over;               /* etcd cancelled the watch: its owner ends the stream */
    kl__timer health;
    int feeding;   /* inside the splitter: freed by stream_data, not cancel */
    int cancelled; /* by its owner: nothing more is delivered */
};

void kl__etcd_stream_opts_init(kl__etcd_stream_opts *o, int64_t lease_duration_ms,
                               int64_t renew_deadline_ms, int64_t retry_period_ms)
{
    o->silence_ms = lease_duration_ms / 3;
    o->probe_timeout_ms = kl__request_timeout_ms(renew_deadline_ms, retry_period_ms);
    o->grace_ms = retry_period_ms;
}

static void stream_free(kl__etcd_stream *s)
{
    kl__etcd_call_cancel(s->probe);
    kl__timer_cancel(s->conn->loop, &s->health);
    kl__line_splitter_free(&s->split);
    kl__free(s->keys);
    kl__free(s);
}

/* Where a resumed watch starts: after the last event delivered. */
static void note_msg(kl__etcd_stream *s, const kl__etcd_watch_msg *m)
{
    if (m->created && s->next_rev == 0 && m->revision > 0)
        s->next_rev = kl__add_sat(m->revision, 1); /* what "from now" meant */
    for (size_t i = 0; i < m->n_events; i++)
        if (m->events[i].kv.mod_revision >= s->next_rev)
            s->next_rev = kl__add_sat(m->events[i].kv.mod_revision, 1);
    if (m->canceled)
        s->over = 1;
    if (s->expect_rev && s->next_rev > s->expect_rev)
        s->expect_rev = 0;
}

static int stream_line(const char *line, size_t len, void *arg)
{
    kl__etcd_stream *s = arg;
    kl__etcd_watch_msg m;
    int err;

    if (s->cancelled)
        return 1;
    if ((err = kl__etcd_parse_watch_msg(&m, line, len)) < 0)
        return err;
    note_msg(s, &m);
    s->on_msg(&m, s->arg);
    kl__etcd_watch_msg_clear(&m);
    return s->cancelled ? 1 : 0;
}

static int stream_data(const char *data, size_t len, void *arg)
{
    kl__etcd_stream *s = arg;
    int rc;

    s->last_data = kl__loop_now(s->conn->loop);
    s->feeding = 1;
    rc = kl__line_splitter_feed(&s->split, data, len, stream_line, s);
    s->feeding = 0;
    if (s->cancelled) {
        /* the call is cancelled too: core/http.c frees the request */
        stream_free(s);
        return 1;
    }
    return rc;
}

static void stream_end(const kl__etcd_result *res, void *arg)
{
    kl__etcd_stream *s = arg;

    s->call = NULL;
    kl__etcd_call_cancel(s->probe);
    s->probe = NULL;
    s->on_end(res, s->arg);
    stream_free(s);
}

/* (Re)create the watch, from next_rev, on the conn's current endpoint. */
static int stream_send(kl__etcd_stream *s)
{
    kl__etcd_call_opts o = {0};
    kl__etcd_watch_req wr = s->req;
    char *body;

    wr.start_revision = s->next_rev;
    if (!(body = kl__etcd_encode_watch_create(&wr)))
        return K8SLEASE_ENOMEM;
    o.path = "/v3/watch";
    o.body = body;
    o.body_len = strlen(body);
    o.on_data = stream_data;
    o.connect_timeout_ms = s->o.silence_ms > 0 ? s->o.probe_timeout_ms : 0;
    s->call = kl__etcd_call_start(s->conn, &o, stream_end, s);
    kl__free(body);
    s->last_data = kl__loop_now(s->conn->loop);
    return s->call ? 0 : K8SLEASE_ENOMEM;
}

/* The health timer: when a revision a probe saw is due, else at the end of
 * the silence (when no probe is in flight). Not moved by data: when it
 * fires early it looks again and re-arms, so a message costs a time stamp. */
static void stream_arm(kl__etcd_stream *s)
{
    int64_t at = INT64_MAX;

    if (s->o.silence_ms <= 0 || s->over)
        return;
    if (s->expect_rev)
        at = s->expect_by;
    else if (!s->probe)
        at = kl__add_sat(s->last_data > s->last_probe ? s->last_data : s->last_probe,
                         s->o.silence_ms * KL_NS_PER_MS);
    if (at < INT64_MAX)
        kl__timer_arm(s->conn->loop, &s->health, at);
}

/* Give the stream up and create the watch again where requests go now.
 * Last thing its caller does: on ENOMEM the stream ends (on_end) and is
 * freed. */
static void stream_resume(kl__etcd_stream *s, const char *why)
{
    kl__etcd_conn *conn = s->conn;
    kl__etcd_result r = {0};

    kl__log_printf(conn->log, K8SLEASE_LOG_WARN, "%s: %s; resuming it on %s from revision %lld",
                   s->what, why, kl__etcd_conn_endpoint(conn), (long long)s->next_rev);
    kl__etcd_call_cancel(s->call);
    s->call = NULL;
    kl__etcd_call_cancel(s->probe);
    s->probe = NULL;
    kl__line_splitter_free(&s->split); /* a line cut in the middle is not the new stream's */
    kl__line_splitter_init(&s->split, STREAM_MAX_LINE);
    s->expect_rev = 0;
    s->last_probe = 0;
    if (stream_send(s) == 0) {
        stream_arm(s);
        return;
    }
    r.err = K8SLEASE_ENOMEM;
    r.errmsg = "etcd /v3/watch: out of memory (resuming the watch)";
    kl__timer_cancel(conn->loop, &s->health);
    s->on_end(&r, s->arg);
    stream_free(s);
}

static void stream_probed(const kl__etcd_result *res, void *arg)
{
    kl__etcd_stream *s = arg;
    kl__etcd_conn *conn = s->conn;
    kl__etcd_range r = {0};
    char why[1280];

    s->probe = NULL;
    s->last_probe = kl__loop_now(conn->loop);
    if (s->over)
        return;
    if (res->err && is_conn_failure(res->err)) {
        /* the call has moved the conn on (failover) */
        snprintf(why, sizeof(why), "silent, and a probe got no answer (%s)",
                 strncmp(res->errmsg, "etcd ", 5) == 0 ? res->errmsg + 5 : res->errmsg);
        stream_resume(s, why);
        return;
    }
    if (res->err) {
        kl__log_printf(conn->log, K8SLEASE_LOG_DEBUG, "%s: probe: %s", s->what, res->errmsg);
    } else if (!s->expect_rev && kl__etcd_parse_range(&r, res->body, res->body_len) == 0 &&
               r.n_kvs > 0 && s->next_rev > 0 && r.kvs[0].mod_revision >= s->next_rev) {
        /* its event may be on the way: it has a retry period to arrive */
        s->expect_rev = r.kvs[0].mod_revision;
        s->expect_by = kl__add_sat(s->last_probe, s->o.grace_ms * KL_NS_PER_MS);
        kl__log_printf(conn->log, K8SLEASE_LOG_DEBUG,
                       "%s: silent, while %s has a change at revision %lld", s->what,
                       conn->endpoints[s->call->endpoint], (long long)s->expect_rev);
    }
    kl__etcd_range_clear(&r);
    stream_arm(s);
}

/* Ask the stream's endpoint for the last change of the watched keys. */
static void stream_probe(kl__etcd_stream *s)
{
    kl__etcd_range_req rr = {0};
    kl__etcd_call_opts o = {0};
    char *body;

    rr.key = s->req.key;
    rr.key_len = s->req.key_len;
    rr.range_end = s->req.range_end;
    rr.range_end_len = s->req.range_end_len;
    rr.limit = 1;
    rr.sort_order = KL_ETCD_SORT_DESCEND;
    rr.sort_target = KL_ETCD_SORT_MOD;
    rr.keys_only = 1;
    if ((body = kl__etcd_encode_range(&rr))) {
        o.path = "/v3/kv/range";
        o.body = body;
        o.body_len = strlen(body);
        o.timeout_ms = s->o.probe_timeout_ms;
        s->probe = call_start(s->conn, &o, s->call->endpoint, stream_probed, s);
        kl__free(body);
    }
    if (!s->probe) /* out of memory: again after another silence */
        s->last_probe = kl__loop_now(s->conn->loop);
}

static void stream_on_health(kl__timer *t, void *arg)
{
    kl__etcd_stream *s = arg;
    kl__etcd_conn *conn = s->conn;
    int64_t now = kl__loop_now(conn->loop);
    int64_t quiet = now - (s->last_data > s->last_probe ? s->last_data : s->last_probe);
    char why[512];

    (void)t;
    if (s->over || !s->call)
        return;
    if (s->expect_rev && now >= s->expect_by) {
        snprintf(why, sizeof(why), "%s has a change at revision %lld, not delivered within %lld ms",
                 conn->endpoints[s->call->endpoint], (long long)s->expect_rev,
                 (long long)s->o.grace_ms);
        stream_resume(s, why);
        return;
    }
    /* no probe while one is due to show up: the next is after it */
    if (!s->probe && !s->expect_rev && quiet >= s->o.silence_ms * KL_NS_PER_MS) {
        if (s->call->waiting) {
            s->last_data = now; /* not sent yet (a token first): nothing to check */
        } else if (s->call->endpoint != atomic_load(&conn->cur)) {
            /* a request there got no answer: no need to ask again */
            snprintf(why, sizeof(why), "silent for %lld ms on %s, which requests have left",
                     (long long)(quiet / KL_NS_PER_MS), conn->endpoints[s->call->endpoint]);
            stream_resume(s, why);
            return;
        } else {
            stream_probe(s);
        }
    }
    stream_arm(s);
}

kl__etcd_stream *kl__etcd_stream_start(kl__etcd_conn *conn, const kl__etcd_watch_req *req,
                                       const kl__etcd_stream_opts *opts, kl__etcd_msg_cb on_msg,
                                       kl__etcd_done_cb on_end, void *arg)
{
    kl__etcd_stream *s = kl__calloc(1, sizeof(*s));
    size_t end_len = req->range_end ? req->range_end_len : 0;

    if (!s)
        goto fail;
    s->conn = conn;
    kl__timer_init(&s->health, stream_on_health, s);
    kl__line_splitter_init(&s->split, STREAM_MAX_LINE);
    if (!(s->keys = kl__malloc(req->key_len + end_len + 1)))
        goto fail;
    memcpy(s->keys, req->key, req->key_len);
    if (end_len)
        memcpy(s->keys + req->key_len, req->range_end, end_len);
    s->req = *req;
    s->req.key = s->keys;
    s->req.range_end = req->range_end ? s->keys + req->key_len : NULL;
    s->next_rev = req->start_revision > 0 ? req->start_revision : 0;
    if (opts)
        s->o = *opts;
    s->on_msg = on_msg;
    s->on_end = on_end;
    s->arg = arg;
    if (req->range_end)
        snprintf(s->what, sizeof(s->what), "etcd watch of \"%.*s\"..\"%.*s\"",
                 (int)(req->key_len > 200 ? 200 : req->key_len), req->key,
                 (int)(end_len > 200 ? 200 : end_len), req->range_end);
    else
        snprintf(s->what, sizeof(s->what), "etcd watch of \"%.*s\"",
                 (int)(req->key_len > 200 ? 200 : req->key_len), req->key);
    if (stream_send(s) < 0)
        goto fail;
    stream_arm(s);
    return s;
fail:
    kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    if (s)
        stream_free(s);
    return NULL;
}

void kl__etcd_stream_cancel(kl__etcd_stream *s)
{
    if (!s)
        return;
    s->cancelled = 1;
    kl__etcd_call_cancel(s->call);
    s->call = NULL;
    kl__etcd_call_cancel(s->probe);
    s->probe = NULL;
    kl__timer_cancel(s->conn->loop, &s->health);
    if (!s->feeding)
        stream_free(s);
}

/* ------------------------------------------------------------------------ */
/* Blocking calls                                                           */
/* ------------------------------------------------------------------------ */

typedef struct sync_call {
    kl__etcd_conn *conn;
    const char *path, *body;
    int64_t timeout_ms;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int finished;
    int err;
    char errmsg[1024];
    char *out;
    size_t out_len;
} sync_call;

static void sync_finish(sync_call *s)
{
    pthread_mutex_lock(&s->mu);
    s->finished = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void sync_done(const kl__etcd_result *res, void *arg)
{
    sync_call *s = arg;

    s->err = res->err;
    if (res->err) {
        snprintf(s->errmsg, sizeof(s->errmsg), "%s", res->errmsg);
    } else if (!(s->out = kl__strndup(res->body, res->body_len))) {
        s->err = K8SLEASE_ENOMEM;
        snprintf(s->errmsg, sizeof(s->errmsg), "out of memory");
    } else {
        s->out_len = res->body_len;
    }
    sync_finish(s);
}

static void sync_start(void *arg)
{
    sync_call *s = arg;
    kl__etcd_call_opts o = {0};

    o.path = s->path;
    o.body = s->body;
    o.body_len = strlen(s->body);
    o.timeout_ms = s->timeout_ms;
    if (!kl__etcd_call_start(s->conn, &o, sync_done, s)) {
        s->err = K8SLEASE_ENOMEM;
        snprintf(s->errmsg, sizeof(s->errmsg), "%s", kl__error_get());
        sync_finish(s);
    }
}

int kl__etcd_sync(kl__etcd_conn *conn, const char *path, const char *body, int64_t timeout_ms,
                  char **out, size_t *out_len)
{
    sync_call s = {0};
    int err;

    *out = NULL;
    *out_len = 0;
    if (kl__loop_on_thread(conn->loop))
        return kl__error_set(K8SLEASE_ESTATE, "blocking etcd request from the loop thread");
    s.conn = conn;
    s.path = path;
    s.body = body;
    s.timeout_ms = timeout_ms;
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.cv, NULL);
    if ((err = kl__loop_post(conn->loop, sync_start, &s)) == 0) {
        pthread_mutex_lock(&s.mu);
        while (!s.finished)
            pthread_cond_wait(&s.cv, &s.mu);
        pthread_mutex_unlock(&s.mu);
        err = s.err ? kl__error_set(s.err, "%s", s.errmsg) : 0;
    } else {
        err = kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    }
    pthread_cond_destroy(&s.cv);
    pthread_mutex_destroy(&s.mu);
    *out = s.out;
    *out_len = s.out_len;
    return err;
}
