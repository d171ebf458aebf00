/*
 * dispatch.c - the request life cycle shared by HTTP/1.1 and HTTP/2
 * (ts_exchange: authentication, faults, holding, answering, statistics),
 * between the protocol modules above (h1.c, h2.c) and the handlers below
 * (api.c, control.c).
 *
 * The protocol module creates an exchange per request with the request's
 * ts_conn (conn.h) and runs it until it answers; a request held by a fault,
 * or a streamed body with nothing to send, is parked through the scheduler
 * (sched.h) and the ts_conn's ops, not by blocking a thread, so thousands
 * of idle streams cost neither threads nor CPU.
 */
#include "dispatch.h"
#include "api.h"
#include "control.h"
#include "state.h"
#include "watch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The apiserver's limit for a request body. */
#define MAX_BODY (3 * 1024 * 1024)

enum phase {
    PH_RECV, /* headers (and body) arriving */
    PH_HOLD, /* decided; waiting out latency/hang faults */
    PH_RUN   /* answering */
};

/* ---- request helpers ---------------------------------------------------- */

static const char *bearer_token(ts_conn *c)
{
    const char *h = c->ops->header(c, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7))
        return NULL;
    h += 7;
    while (*h == ' ')
        h++;
    return h;
}

static bool token_equal(const char *a, const char *b)
{
    /* No early exit on the first difference. */
    size_t la = strlen(a), lb = strlen(b);
    unsigned char diff = (unsigned char)(la != lb);
    for (size_t i = 0; i < la && i < lb; i++)
        diff |= (unsigned char)(a[i] ^ b[i]);
    return diff == 0;
}

/*
 * Lock held. A client certificate counts if the transport verified it
 * against our CA and it is meant for client authentication (checked once
 * per connection: c->cert_ok).
 */
static bool authenticated(ts_server *srv, ts_conn *c, const char *token)
{
    if (token && srv->token && token_equal(token, srv->token))
        return true;
    return c->cert_ok;
}

/* curl and browsers get indented JSON from a real apiserver, others compact. */
static bool pretty(ts_conn *c)
{
    const char *p = c->ops->query(c, "pretty");
    if (p)
        return !strcmp(p, "true") || !strcmp(p, "1");
    const char *ua = c->ops->header(c, "User-Agent");
    return ua &&
           (!strncmp(ua, "curl", 4) || !strncmp(ua, "Wget", 4) || !strncmp(ua, "Mozilla/5.0", 11));
}

/* ---- statistics (lock held) -------------------------------------------- */

static void bump(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    if (v)
        json_integer_set(v, json_integer_value(v) + 1);
    else
        json_object_set_new(obj, key, json_integer(1));
}

static void count_request(ts_server *srv, const ts_exchange *x, const char *status)
{
    if (x->control) {
        srv->stats.control++;
        return;
    }
    srv->stats.requests++;
    bump(srv->stats.by_method, x->client.method);
    bump(srv->stats.by_status, status);
    json_t *v = json_object_get(srv->stats.by_verb, x->client.verb);
    if (!v) {
        v = json_object();
        json_object_set_new(srv->stats.by_verb, x->client.verb, v);
    }
    bump(v, status);
    srv->stats.by_proto[strcmp(x->conn->proto, "h2") ? 1 : 0]++;
}

/* ---- stalls (lock held unless said) ------------------------------------- */

void ts_exchange_conn_gone(ts_server *srv, int fd)
{
    pthread_mutex_lock(&srv->mu);
    ts_sched_wake_fd(&srv->sched, fd);
    pthread_mutex_unlock(&srv->mu);
}

/*
 * The hold of a request that hit a stall rule: the first time, stall its
 * connection; then wait for the rule's end. True while it holds, with *rc
 * TS_X_WAIT (parked) or TS_X_DROP (the client left meanwhile: the request
 * is never run, as a server would find its connection closed); false once
 * the stall is over.
 */
static bool stall_hold(ts_server *srv, ts_exchange *x, int64_t now, int *rc)
{
    ts_conn *c = x->conn;
    int64_t until = ts_faults_stall_until(&srv->faults, x->d.stall, now);
    *rc = TS_X_DROP;
    if (!x->stalled && until) {
        x->stalled = true;
        if (c->ops->stall(c, x->d.stall) < 0)
            return true;
    }
    if (x->stalled && c->ops->gone(c))
        return true;
    if (until) {
        if (ts_sched_suspend(&srv->sched, &x->sl, until))
            *rc = TS_X_WAIT;
        return true;
    }
    /* The rule is over: the connection resumes (if nobody saw to it yet), and so do we. */
    x->d.stall = 0;
    ts_stalls_sync(srv, now);
    return false;
}

/* ---- answering ---------------------------------------------------------- */

void ts_answer_free(ts_answer *a)
{
    free(a->data);
    a->data = NULL;
    if (a->body.free)
        a->body.free(a->body.ctx);
    memset(&a->body, 0, sizeof(a->body));
}

/* Lock held on entry, released on return. */
static int answer(ts_server *srv, ts_exchange *x, ts_response *rs, ts_answer *a)
{
    char code[8];
    /* Serialise while the lock is held: bodies share values with the store. */
    if (rs->body) {
        bool indent = pretty(x->conn);
        a->data = json_dumps(rs->body, indent ? JSON_INDENT(2) : JSON_COMPACT);
        json_decref(rs->body);
        rs->body = NULL;
        if (a->data) {
            a->len = strlen(a->data);
            if (!indent) {
                /* Go's json.Encoder ends a compact body with a newline. */
                char *nl = realloc(a->data, a->len + 2);
                if (nl) {
                    a->data = nl;
                    a->data[a->len++] = '\n';
                    a->data[a->len] = '\0';
                }
            }
        } else {
            rs->code = 500;
        }
    } else if (rs->stream) {
        a->body = ts_watch_body(rs->stream);
    } else {
        a->data = strdup(rs->text ? rs->text : "");
        a->len = a->data ? strlen(a->data) : 0;
    }
    snprintf(code, sizeof(code), "%u", rs->code);
    count_request(srv, x, code);
    x->after = rs->after;
    if (srv->cfg.verbose)
        ts_log("%s %s %s -> %u", x->conn->proto, x->client.method, x->client.path, rs->code);
    pthread_mutex_unlock(&srv->mu);

    a->code = rs->code;
    a->content_type = rs->text ? "text/plain; charset=utf-8" : "application/json";
    a->retry_after = rs->retry_after;
    ts_uuid4(a->audit_id);
    if (!a->data && !a->body.read) {
        ts_answer_free(a);
        return -1;
    }
    return TS_X_ANSWER;
}

/*
 * The body of a respond rule that is padded or trickled: produced as the
 * protocol asks for it. A trickle sends its first byte with the headers,
 * then one byte per interval, parked between bytes (no thread waits); a
 * client that gave up is noticed at the next byte.
 */
typedef struct ts_feed {
    ts_server *srv;
    ts_sleeper sl;
    ts_canned *c;
    uint64_t pos;
    int64_t next_ms; /* trickle: when the next byte is due */
} ts_feed;

static long feed_reader(void *cls, char *buf, size_t max)
{
    ts_feed *f = cls;
    ts_server *srv = f->srv;
    const ts_canned *c = f->c;
    uint64_t pos = f->pos;
    size_t n = max;

    pthread_mutex_lock(&srv->mu);
    if (srv->draining) { /* restart or exit */
        pthread_mutex_unlock(&srv->mu);
        return TS_BODY_DROP;
    }
    if (pos >= c->size) {
        pthread_mutex_unlock(&srv->mu);
        return TS_BODY_END;
    }
    if (c->interval_ms > 0) {
        int64_t now = ts_mono_ms();
        if (pos > 0 && now < f->next_ms) {
            bool parked = ts_sched_suspend(&srv->sched, &f->sl, f->next_ms);
            pthread_mutex_unlock(&srv->mu);
            return parked ? 0 : TS_BODY_ERROR;
        }
        f->next_ms = now + c->interval_ms;
        n = 1;
    }
    pthread_mutex_unlock(&srv->mu);
    if (n > c->size - pos)
        n = (size_t)(c->size - pos);
    /* The body, then spaces: a JSON body stays JSON however big. */
    size_t from_body = pos < c->body_len ? c->body_len - (size_t)pos : 0;
    if (from_body > n)
        from_body = n;
    if (from_body)
        memcpy(buf, c->body + pos, from_body);
    memset(buf + from_body, ' ', n - from_body);
    f->pos += n;
    return (long)n;
}

static void feed_free(void *cls)
{
    ts_feed *f = cls;
    pthread_mutex_lock(&f->srv->mu);
    /* An HTTP/2 stream can end while parked (the client reset it). */
    ts_sched_cancel(&f->srv->sched, &f->sl);
    pthread_mutex_unlock(&f->srv->mu);
    ts_canned_unref(f->c);
    free(f);
}

/* Answers with a respond rule's canned response. Lock held, released. */
static int respond(ts_server *srv, ts_exchange *x, ts_answer *a)
{
    const ts_canned *c = x->d.canned;
    char code[8];

    snprintf(code, sizeof(code), "%u", c->status);
    count_request(srv, x, code);
    if (srv->cfg.verbose)
        ts_log("%s %s %s -> %u (respond fault)", x->conn->proto, x->client.method, x->client.path,
               c->status);
    pthread_mutex_unlock(&srv->mu);

    a->code = c->status;
    a->content_type = c->content_type; /* the exchange holds the canned answer */
    a->location = c->location;
    ts_uuid4(a->audit_id);
    if (c->interval_ms == 0 && c->size == c->body_len) {
        if (!(a->data = malloc(c->body_len + 1)))
            return -1;
        memcpy(a->data, c->body, c->body_len);
        a->len = c->body_len;
        return TS_X_ANSWER;
    }
    ts_feed *f = calloc(1, sizeof(*f));
    if (!f)
        return -1;
    f->srv = srv;
    f->c = ts_canned_ref(x->d.canned);
    ts_sleeper_init(&f->sl, x->conn);
    a->body = (ts_body){feed_reader, feed_free, f, c->size};
    return TS_X_ANSWER;
}

/* Closes the connection (stream) without an answer. Lock held, released. */
static int reset(ts_server *srv, ts_exchange *x)
{
    count_request(srv, x, "reset");
    pthread_mutex_unlock(&srv->mu);
    ts_conn_set_reset(x->conn);
    return TS_X_RESET;
}

/*
 * Refuses the request unprocessed (a `goaway` fault): the protocol sends the
 * GOAWAY, or resets an HTTP/1.1 connection. Lock held, released.
 */
static int goaway(ts_server *srv, ts_exchange *x)
{
    count_request(srv, x, "goaway");
    if (srv->cfg.verbose)
        ts_log("%s %s %s -> goaway fault", x->conn->proto, x->client.method, x->client.path);
    pthread_mutex_unlock(&srv->mu);
    return TS_X_GOAWAY;
}

void ts_exchange_init(ts_exchange *x, ts_conn *c)
{
    memset(x, 0, sizeof(*x));
    x->conn = c;
    ts_sleeper_init(&x->sl, c);
}

int ts_exchange_add_body(ts_exchange *x, const void *p, size_t n)
{
    if (x->too_large || x->body.len + n > MAX_BODY) {
        x->too_large = true;
        return 0;
    }
    return ts_buf_append(&x->body, p, n);
}

void ts_exchange_free(ts_server *srv, ts_exchange *x)
{
    pthread_mutex_lock(&srv->mu);
    ts_sched_cancel(&srv->sched, &x->sl);
    pthread_mutex_unlock(&srv->mu);
    ts_canned_unref(x->d.canned);
    x->d.canned = NULL;
    ts_buf_free(&x->body);
}

int ts_exchange_run(ts_server *srv, ts_exchange *x, const char *method, const char *path,
                    ts_answer *a)
{
    ts_response rs = {0};
    ts_conn *c = x->conn;

    memset(a, 0, sizeof(*a));
    pthread_mutex_lock(&srv->mu);
    int64_t now = ts_mono_ms();
    if (x->phase == PH_RECV) {
        bool watch = false;
        const char *w = c->ops->query(c, "watch");
        if (w)
            watch = !strcmp(w, "1") || !strcmp(w, "true") || !strcmp(w, "True");
        x->client.method = method;
        x->client.path = path;
        x->client.verb = ts_api_verb(method, path, watch);
        x->client.user_agent = c->ops->header(c, "User-Agent");
        x->client.token = bearer_token(c);
        x->control = !strncmp(path, "/testserver/", 12);
        if (!x->control) {
            ts_faults_decide(&srv->faults, &x->client, now, &x->d);
            x->latency_until = now + x->d.latency_ms;
        }
        x->phase = PH_HOLD;
    }
    if (x->phase == PH_HOLD) {
        if (!x->control) {
            int64_t until = x->latency_until;
            /* A refused request is not held (below): not caught by a hang either. */
            int64_t hang =
                x->d.goaway ? 0
                            : ts_faults_hang_until(&srv->faults, &x->client, now, !x->hang_counted);
            if (hang) {
                x->hang_counted = true;
                if (hang > until)
                    until = hang;
            }
            if (srv->draining) { /* dropped with its connection */
                count_request(srv, x, "reset");
                pthread_mutex_unlock(&srv->mu);
                return TS_X_DROP;
            }
            int rc;
            if (x->d.stall && stall_hold(srv, x, now, &rc)) {
                pthread_mutex_unlock(&srv->mu);
                return rc;
            }
            /*
             * Refused at once, not after latency or a hang: over HTTP/2 the
             * GOAWAY tells the client that no stream above the one before
             * this was processed, which stays true only if it goes before
             * the streams opened after this one are handled.
             */
            if (x->d.goaway)
                return goaway(srv, x);
            if (now < until && ts_sched_suspend(&srv->sched, &x->sl, until)) {
                pthread_mutex_unlock(&srv->mu);
                return TS_X_WAIT; /* run again when resumed */
            }
            if (x->d.reset)
                return reset(srv, x);
        }
        x->phase = PH_RUN;
    }

    if (!x->control && x->d.canned)
        return respond(srv, x, a); /* unlocks */
    if (!x->control && x->d.status) {
        rs.code = x->d.status;
        rs.body = ts_status_for_code(x->d.status, x->d.retry_after);
        rs.retry_after = x->d.retry_after;
    } else if (!authenticated(srv, c, x->client.token)) {
        rs.code = 401;
        rs.body = ts_status_failure(401, "Unauthorized", "Unauthorized", NULL);
    } else if (x->too_large) {
        rs.code = 413;
        rs.body =
            ts_status_failure(413, "RequestEntityTooLarge", "the request body is too large", NULL);
    } else {
        ts_request rq = {c, method, path, x->body.data, x->body.len, &x->client};
        if (x->control)
            ts_control_handle(srv, &rq, &rs);
        else
            ts_api_handle(srv, &rq, &rs);
    }
    return answer(srv, x, &rs, a); /* unlocks */
}
