/*
 * control.c - the test-control API under /testserver/v1 (see README.md).
 *
 * Authenticated like the Kubernetes API, never subject to faults, and not
 * counted in the request statistics, so a test can always steer the server.
 * What it needs of the transport (connection counts, stalled connections)
 * it asks through srv->tx, the hooks server.c registers (state.h).
 */
#include "control.h"
#include "util.h"
#include "watch.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void reply(ts_response *rs, unsigned code, json_t *body)
{
    rs->code = code;
    rs->body = body;
}

static void error(ts_response *rs, unsigned code, const char *msg)
{
    reply(rs, code, json_pack("{s:s}", "error", msg ? msg : "out of memory"));
}

static json_t *body_json(const ts_request *rq, ts_response *rs)
{
    json_error_t err;
    if (!rq->body_len)
        return json_object();
    json_t *j = json_loadb(rq->body, rq->body_len, 0, &err);
    if (!j || !json_is_object(j)) {
        error(rs, 400, j ? "the body must be a JSON object" : err.text);
        json_decref(j);
        return NULL;
    }
    return j;
}

static json_t *u64(uint64_t v)
{
    return json_integer((json_int_t)v);
}

static json_t *rv_json(uint64_t rv)
{
    char buf[24];
    snprintf(buf, sizeof(buf), "%" PRIu64, rv);
    return json_string(buf);
}

/* ---- stalls and connections (lock held) ------------------------------- */

typedef struct stall_ctx {
    ts_faults *faults;
    int64_t now;
} stall_ctx;

static bool stall_alive(void *ctx, uint64_t rule)
{
    stall_ctx *sc = ctx;
    return ts_faults_stall_until(sc->faults, rule, sc->now) != 0;
}

void ts_stalls_sync(ts_server *srv, int64_t now)
{
    stall_ctx sc = {&srv->faults, now};
    ts_faults_expire(&srv->faults, now);
    srv->tx->stall_sync(srv->transport, stall_alive, &sc);
}

/* Connection counts per protocol for GET /testserver/v1/stats. */
static json_t *connections_json(ts_server *srv)
{
    json_t *j = srv->tx->stats_json(srv->transport);
    json_t *h2 = json_object_get(j, "h2"), *h1 = json_object_get(j, "http1");
    if (h2)
        json_object_set_new(h2, "requests", json_integer((json_int_t)srv->stats.by_proto[0]));
    if (h1)
        json_object_set_new(h1, "requests", json_integer((json_int_t)srv->stats.by_proto[1]));
    json_object_set_new(j, "alpn",
                        srv->cfg.no_http2 ? json_pack("[s]", "http/1.1")
                                          : json_pack("[s,s]", "h2", "http/1.1"));
    return j;
}

/* ---- endpoints -------------------------------------------------------- */

json_t *ts_stats_json(ts_server *srv)
{
    int64_t now = ts_mono_ms();
    json_t *faults = json_object();
    for (int k = 0; k < TS_F_NKINDS; k++)
        json_object_set_new(faults, ts_fault_kind_name((ts_fault_kind)k),
                            u64(srv->faults.counters[k]));
    size_t rules = 0;
    for (const ts_rule *r = srv->faults.rules; r; r = r->next)
        rules++;

    json_t *j = json_object();
    json_object_set_new(j, "uptime_ms", json_integer(now - srv->started_ms));
    json_object_set_new(j, "resourceVersion", rv_json(srv->store.rv));
    json_object_set_new(j, "leases", u64(srv->store.count[TS_LEASE]));
    json_object_set_new(j, "pods", u64(srv->store.count[TS_POD]));
    json_object_set_new(j, "namespaces", u64(srv->store.count[TS_NS]));
    json_object_set_new(j, "leasecandidates", u64(srv->store.count[TS_LC]));
    json_object_set_new(j, "requests",
                        json_pack("{s:o, s:O, s:O, s:O}", "total", u64(srv->stats.requests),
                                  "by_method", srv->stats.by_method, "by_verb", srv->stats.by_verb,
                                  "by_status", srv->stats.by_status));
    json_object_set_new(j, "control_requests", u64(srv->stats.control));
    json_object_set_new(j, "faults", faults);
    json_object_set_new(j, "fault_rules", u64(rules));
    json_object_set_new(j, "watches",
                        json_pack("{s:o, s:o}", "open", u64(srv->nwatches), "total",
                                  u64(srv->stats.watches_total)));
    json_object_set_new(j, "suspended", u64(srv->sched.nsuspended));
    json_object_set_new(j, "history",
                        json_pack("{s:o, s:o, s:o, s:o}", "size", u64(srv->store.ring_len),
                                  "capacity", u64(srv->store.ring_cap), "floor",
                                  rv_json(srv->store.floor), "compacted",
                                  rv_json(srv->store.compacted)));
    json_object_set_new(j, "restarts", u64(srv->restarts));
    json_object_set_new(j, "connections", connections_json(srv));
    return j;
}

/* A rule as JSON; a stall rule also says how many connections it holds stalled now. */
static json_t *rule_json(ts_server *srv, const ts_rule *r, int64_t now)
{
    json_t *j = ts_rule_json(r, now);
    if (r->kind == TS_F_STALL)
        json_object_set_new(j, "stalled", u64(srv->tx->stalled(srv->transport, r->id)));
    return j;
}

static void faults_collection(ts_server *srv, const ts_request *rq, ts_response *rs)
{
    int64_t now = ts_mono_ms();
    ts_stalls_sync(srv, now);
    if (!strcmp(rq->method, "GET")) {
        json_t *a = json_array();
        for (const ts_rule *r = srv->faults.rules; r; r = r->next)
            json_array_append_new(a, rule_json(srv, r, now));
        reply(rs, 200, json_pack("{s:o}", "faults", a));
    } else if (!strcmp(rq->method, "POST")) {
        json_t *body = body_json(rq, rs);
        if (!body)
            return;
        char *err = NULL;
        ts_rule *r = ts_faults_add(&srv->faults, body, now, &err);
        json_decref(body);
        if (!r) {
            error(rs, 400, err);
            free(err);
            return;
        }
        ts_log("fault %" PRIu64 " added: %s", r->id, ts_fault_kind_name(r->kind));
        /* A new window may end sooner than anything the timer waits for. */
        ts_sched_kick(&srv->sched);
        reply(rs, 201, rule_json(srv, r, now));
    } else if (!strcmp(rq->method, "DELETE")) {
        size_t n = 0;
        for (const ts_rule *r = srv->faults.rules; r; r = r->next)
            n++;
        ts_faults_clear(&srv->faults);
        /* Stalled connections, held requests and frozen streams go on. */
        ts_stalls_sync(srv, now);
        ts_sched_wake_all(&srv->sched);
        reply(rs, 200, json_pack("{s:o}", "deleted", u64(n)));
    } else {
        error(rs, 405, "method not allowed");
    }
}

static void fault_item(ts_server *srv, const ts_request *rq, const char *id, ts_response *rs)
{
    char *end;
    unsigned long long n = strtoull(id, &end, 10);
    if (*end || !*id) {
        error(rs, 404, "no such fault");
        return;
    }
    if (!strcmp(rq->method, "GET")) {
        int64_t now = ts_mono_ms();
        ts_stalls_sync(srv, now);
        for (const ts_rule *r = srv->faults.rules; r; r = r->next) {
            if (r->id == n) {
                reply(rs, 200, rule_json(srv, r, now));
                return;
            }
        }
        error(rs, 404, "no such fault");
    } else if (!strcmp(rq->method, "DELETE")) {
        if (!ts_faults_remove(&srv->faults, n)) {
            error(rs, 404, "no such fault");
            return;
        }
        ts_stalls_sync(srv, ts_mono_ms());
        ts_sched_wake_all(&srv->sched);
        reply(rs, 200, json_pack("{s:o}", "deleted", u64(1)));
    } else {
        error(rs, 405, "method not allowed");
    }
}

static void compact(ts_server *srv, const ts_request *rq, ts_response *rs)
{
    json_t *body = body_json(rq, rs);
    if (!body)
        return;
    uint64_t rv = 0;
    const char *s = json_string_value(json_object_get(body, "resourceVersion"));
    if (s && *s) {
        char *end;
        rv = strtoull(s, &end, 10);
        if (*end) {
            json_decref(body);
            error(rs, 400, "resourceVersion must be a decimal string");
            return;
        }
    }
    json_decref(body);
    ts_store_compact(&srv->store, rv);
    ts_faults_count(&srv->faults, TS_F_COMPACT, 1);
    ts_log("history compacted up to %" PRIu64, srv->store.floor);
    reply(rs, 200,
          json_pack("{s:o, s:o}", "compacted", rv_json(srv->store.compacted), "floor",
                    rv_json(srv->store.floor)));
}

static void close_watches(ts_server *srv, const ts_request *rq, ts_response *rs)
{
    json_t *body = body_json(rq, rs);
    if (!body)
        return;
    ts_match m;
    char *err = NULL;
    if (ts_match_parse(json_object_get(body, "match"), &m, &err) < 0) {
        json_decref(body);
        error(rs, 400, err);
        free(err);
        return;
    }
    bool abort = json_is_true(json_object_get(body, "abort"));
    json_decref(body);
    size_t n = ts_watch_close(srv, &m, abort);
    ts_match_free(&m);
    reply(rs, 200, json_pack("{s:o}", "closed", u64(n)));
}

static bool token_ok(const char *t)
{
    size_t n = strlen(t);
    if (n == 0 || n > 256)
        return false;
    for (const char *p = t; *p; p++)
        if (*p <= ' ' || *p > '~')
            return false;
    return true;
}

static void rotate_token(ts_server *srv, const ts_request *rq, ts_response *rs)
{
    json_t *body = body_json(rq, rs);
    if (!body)
        return;
    char fresh[65];
    const char *t = json_string_value(json_object_get(body, "token"));
    if (!t) {
        if (ts_random_hex(fresh, 32) < 0) {
            json_decref(body);
            error(rs, 500, "no randomness");
            return;
        }
        t = fresh;
    }
    if (!token_ok(t)) {
        json_decref(body);
        error(rs, 400, "token must be 1-256 printable ASCII characters without spaces");
        return;
    }
    char *copy = strdup(t);
    json_decref(body);
    if (!copy) {
        error(rs, 500, NULL);
        return;
    }
    /*
     * Files first, so a tokenFile client never reads a token the server
     * does not accept yet for longer than one request.
     */
    if (ts_write_token(srv->cfg.dir, copy) < 0 ||
        ts_write_kubeconfigs(&srv->pki, srv->cfg.dir, srv->server_url, copy) < 0) {
        free(copy);
        error(rs, 500, "cannot write the token files");
        return;
    }
    free(srv->token);
    srv->token = copy;
    ts_faults_count(&srv->faults, TS_F_ROTATE_TOKEN, 1);
    ts_log("bearer token rotated");
    reply(rs, 200, json_pack("{s:s}", "token", copy));
}

static void restart(ts_server *srv, const ts_request *rq, ts_response *rs)
{
    json_t *body = body_json(rq, rs);
    if (!body)
        return;
    json_t *keep = json_object_get(body, "keep_state");
    json_t *down = json_object_get(body, "down_ms");
    if ((keep && !json_is_boolean(keep)) ||
        (down && (!json_is_integer(down) || json_integer_value(down) < 0 ||
                  json_integer_value(down) > 600000))) {
        json_decref(body);
        error(rs, 400, "keep_state must be a boolean and down_ms an integer in [0, 600000]");
        return;
    }
    srv->restart_keep_state = keep ? json_is_true(keep) : true;
    srv->restart_down_ms = down ? json_integer_value(down) : 0;
    json_decref(body);
    /* The main thread restarts once this answer has been sent. */
    rs->after = 'R';
    reply(rs, 202,
          json_pack("{s:b, s:b, s:o}", "restarting", 1, "keep_state", srv->restart_keep_state,
                    "down_ms", json_integer(srv->restart_down_ms)));
}

static void reset(ts_server *srv, const ts_request *rq, ts_response *rs)
{
    json_t *body = body_json(rq, rs);
    if (!body)
        return;
    json_t *o = json_object_get(body, "objects"), *f = json_object_get(body, "faults");
    json_t *s = json_object_get(body, "stats");
    bool objects = !o || json_is_true(o), faults = !f || json_is_true(f);
    bool stats = !s || json_is_true(s);
    json_decref(body);
    if (objects)
        ts_store_clear(&srv->store);
    if (faults) {
        ts_faults_clear(&srv->faults);
        ts_stalls_sync(srv, ts_mono_ms());
        ts_sched_wake_all(&srv->sched);
    }
    if (stats) {
        srv->stats.requests = srv->stats.control = 0;
        json_object_clear(srv->stats.by_method);
        json_object_clear(srv->stats.by_verb);
        json_object_clear(srv->stats.by_status);
        memset(srv->faults.counters, 0, sizeof(srv->faults.counters));
    }
    reply(rs, 200,
          json_pack("{s:b, s:b, s:b}", "objects", objects, "faults", faults, "stats", stats));
}

void ts_control_handle(ts_server *srv, const ts_request *rq, ts_response *rs)
{
    const char *p = rq->path + strlen("/testserver/v1");
    bool post = !strcmp(rq->method, "POST");

    if (!strcmp(p, "/stats") && !strcmp(rq->method, "GET"))
        reply(rs, 200, ts_stats_json(srv));
    else if (!strcmp(p, "/faults"))
        faults_collection(srv, rq, rs);
    else if (!strncmp(p, "/faults/", 8))
        fault_item(srv, rq, p + 8, rs);
    else if (!strcmp(p, "/compact") && post)
        compact(srv, rq, rs);
    else if (!strcmp(p, "/watches/close") && post)
        close_watches(srv, rq, rs);
    else if (!strcmp(p, "/token") && post)
        rotate_token(srv, rq, rs);
    else if (!strcmp(p, "/restart") && post)
        restart(srv, rq, rs);
    else if (!strcmp(p, "/reset") && post)
        reset(srv, rq, rs);
    else
        error(rs, 404, "no such control endpoint");
}
