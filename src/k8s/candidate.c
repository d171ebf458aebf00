/* The LeaseCandidate of a coordinated election; the rules are in
 * k8s/candidate.h. One request at a time (discovery, create, get, update,
 * delete) beside one watch stream of the object. */
#include "k8s/candidate.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "core/clock.h"
#include "core/http.h"
#include "core/text.h"
#include "k8s/api.h"
#include "k8s/codec.h"
#include "k8s/informer.h" /* kl__rv_gate */

#define RENEW_INTERVAL_NS (5 * 60 * KL_NS_PER_S) /* client-go's requeueInterval */
#define WATCH_TIMEOUT_S   240                    /* the server ends a watch after this */
#define WATCH_IDLE_MS     (WATCH_TIMEOUT_S * 1000 + 30000)
#define MAX_LINE          (1024 * 1024)
#define CANDIDATE_GROUP   "/apis/coordination.k8s.io"

typedef enum cand_req {
    REQ_NONE,
    REQ_DISCOVER,
    REQ_CREATE,
    REQ_GET,
    REQ_UPDATE,
    REQ_DELETE
} cand_req;

struct kl__candidate {
    k8slease_client *client;
    char *ns, *name, *lease_name, *binary_version, *emulation_version, *strategy, *what;
    char *subject;
    kl__log_about about; /* its log lines' */
    int64_t retry_period_ns, request_timeout_ms;
    kl__candidate_fatal_cb fatal;
    kl__candidate_gone_cb gone;
    void *arg, *gone_arg;

    char *collection; /* .../namespaces/NS/leasecandidates, once discovered */
    char *path;       /* collection + "/NAME" */
    json_t *base;     /* the object as last seen; NULL: none (create it) */
    char *rv;         /* the watch resumes from here */
    kl__rv_gate gate; /* resourceVersion of base: older events are dropped */
    int need_read;    /* GET the object before anything else */
    int written;      /* we created or updated it: delete it when stopping */
    int renew_due;    /* an answer (ping or periodic renewal) is owed */
    /* The last pingTime answered: answered once, so that a ping ahead of
     * our clock (renewTime stays before it) cannot make us write forever. */
    int64_t answered_ping;
    int64_t sent_ping; /* the pingTime of the object the UPDATE in flight answers */
    int stopping;

    kl__http_req *req;
    cand_req kind;
    kl__http_req *watch;
    kl__line_splitter lines;
    kl__timer retry;    /* the next step after a failure */
    kl__timer renew;    /* the periodic renewal */
    kl__timer gone_now; /* calls gone on a later loop turn */
};

static void step(kl__candidate *c);

static const kl__log *log_of(const kl__candidate *c)
{
    return &c->client->log;
}

/* ------------------------------------------------------------------------ */
/* Versions                                                                 */
/* ------------------------------------------------------------------------ */

/* Digits of one numeric part, no leading zero (semver); p past it, or NULL. */
static const char *semver_part(const char *p, unsigned long long *v)
{
    const char *s = p;

    *v = 0;
    while (*p >= '0' && *p <= '9') {
        if (*v > 1000000000ULL)
            return NULL;
        *v = *v * 10 + (unsigned)(*p - '0');
        p++;
    }
    if (p == s || (*s == '0' && p - s > 1))
        return NULL;
    return p;
}

static int semver_parse(const char *v, unsigned long long out[3])
{
    const char *p = v;

    for (int i = 0; i < 3; i++) {
        if (!(p = semver_part(p, &out[i])))
            return -1;
        if (i < 2 && *p++ != '.')
            return -1;
    }
    if (*p == '-' || *p == '+') {
        for (p++; *p; p++)
            if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') ||
                  (*p >= 'A' && *p <= 'Z') || *p == '.' || *p == '-' || *p == '+'))
                return -1;
        return 0;
    }
    return *p ? -1 : 0;
}

int kl__semver_check(const char *what, const char *v)
{
    unsigned long long parts[3];

    if (!v || !v[0])
        return kl__error_set(K8SLEASE_EINVAL, "%s is required in coordinated election", what);
    if (semver_parse(v, parts) < 0)
        return kl__error_set(K8SLEASE_EINVAL,
                             "%s \"%.40s\": must be a semantic version MAJOR.MINOR.PATCH without "
                             "a leading \"v\" (e.g. \"1.36.0\")",
                             what, v);
    return 0;
}

int kl__semver_cmp(const char *a, const char *b)
{
    unsigned long long x[3] = {0}, y[3] = {0};

    (void)semver_parse(a, x);
    (void)semver_parse(b, y);
    for (int i = 0; i < 3; i++)
        if (x[i] != y[i])
            return x[i] < y[i] ? -1 : 1;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Requests                                                                 */
/* ------------------------------------------------------------------------ */

static void fail_fatal(kl__candidate *c, const char *fmt, ...) KL_PRINTF(2, 3);

static void fail_fatal(kl__candidate *c, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    kl__timer_cancel(c->client->loop, &c->retry);
    kl__timer_cancel(c->client->loop, &c->renew);
    c->fatal(msg, c->arg); /* may stop us: nothing after this */
}

static void retry_later(kl__candidate *c)
{
    kl__timer_arm(c->client->loop, &c->retry,
                  kl__add_sat(kl__loop_now(c->client->loop), c->retry_period_ns));
}

static void on_retry(kl__timer *t, void *arg)
{
    (void)t;
    step(arg);
}

static void on_renew(kl__timer *t, void *arg)
{
    kl__candidate *c = arg;

    (void)t;
    c->renew_due = 1;
    step(c);
}

static void on_gone_now(kl__timer *t, void *arg)
{
    kl__candidate *c = arg;
    kl__candidate_gone_cb gone = c->gone;

    (void)t;
    c->gone = NULL;
    if (gone)
        gone(c->gone_arg);
}

static void on_done(const kl__http_result *res, void *arg);

static void start_req(kl__candidate *c, cand_req kind, const char *method, const char *path,
                      char *body)
{
    kl__http_opts o = {0};

    o.method = method;
    o.path = path;
    o.timeout_ms = c->request_timeout_ms;
    if (body) {
        o.content_type = "application/json";
        o.body = body;
        o.body_len = strlen(body);
    }
    c->kind = kind;
    c->req = kl__http_start(c->client->loop, &o, on_done, c);
    kl__free(body);
    if (!c->req) {
        kl__log_at(log_of(c), K8SLEASE_LOG_ERROR, &c->about, "LeaseCandidate: %s", kl__error_get());
        c->kind = REQ_NONE;
        retry_later(c);
    }
}

static char *new_object_body(const kl__candidate *c)
{
    char now[KL_MICROTIME_BUFLEN];
    const char *api = strstr(c->collection, "/v1alpha2/") ? "coordination.k8s.io/v1alpha2"
                                                          : "coordination.k8s.io/v1beta1";
    json_t *o = json_pack("{s:s, s:s, s:{s:s, s:s}, s:{s:s, s:s, s:s, s:s, s:s}}", "apiVersion",
                          api, "kind", "LeaseCandidate", "metadata", "name", c->name, "namespace",
                          c->ns, "spec", "leaseName", c->lease_name, "binaryVersion",
                          c->binary_version, "emulationVersion", c->emulation_version, "strategy",
                          c->strategy, "renewTime", kl__microtime_format(kl__clock_wall_us(), now));
    char *s = o ? kl__json_dump(o) : NULL;

    json_decref(o);
    return s;
}

/* base with our fields and renewTime = now (what an answer to a ping, a
 * renewal, or taking over an existing object of ours writes). */
static char *update_body(const kl__candidate *c)
{
    char now[KL_MICROTIME_BUFLEN];
    json_t *o = json_deep_copy(c->base), *spec;
    char *s = NULL;

    if (!o)
        return NULL;
    spec = json_object_get(o, "spec");
    if (json_is_object(spec) &&
        !json_object_set_new(spec, "binaryVersion", json_string(c->binary_version)) &&
        !json_object_set_new(spec, "emulationVersion", json_string(c->emulation_version)) &&
        !json_object_set_new(spec, "strategy", json_string(c->strategy)) &&
        !json_object_set_new(spec, "renewTime",
                             json_string(kl__microtime_format(kl__clock_wall_us(), now))))
        s = kl__json_dump(o);
    json_decref(o);
    return s;
}

static const char *obj_string(const json_t *obj, const char *a, const char *b)
{
    const char *s = json_string_value(json_object_get(json_object_get(obj, a), b));

    return s ? s : "";
}

static int64_t spec_time(const json_t *obj, const char *key)
{
    int64_t us = 0;

    if (kl__microtime_parse(obj_string(obj, "spec", key), &us) < 0)
        return 0;
    return us;
}

/* The controller asks for an answer: a pingTime after renewTime that we
 * have not answered yet. */
static int pinged(const kl__candidate *c, const json_t *obj)
{
    int64_t ping = spec_time(obj, "pingTime");

    return ping != 0 && ping > spec_time(obj, "renewTime") && ping != c->answered_ping;
}

static void set_rv(kl__candidate *c, const char *rv)
{
    char *copy = rv && rv[0] ? kl__strdup(rv) : NULL;

    kl__free(c->rv);
    c->rv = copy;
}

static void set_base(kl__candidate *c, json_t *obj)
{
    json_decref(c->base);
    c->base = obj ? json_incref(obj) : NULL;
    if (obj) {
        set_rv(c, obj_string(obj, "metadata", "resourceVersion"));
        kl__rv_gate_set(&c->gate, c->rv);
    }
}

/* ------------------------------------------------------------------------ */
/* The watch                                                                */
/* ------------------------------------------------------------------------ */

static void on_watch_done(const kl__http_result *res, void *arg);

static int on_line(const char *line, size_t len, void *arg)
{
    kl__candidate *c = arg;
    json_t *ev = json_loadb(line, len, 0, NULL), *obj;
    const char *type;

    obj = json_object_get(ev, "object");
    type = json_string_value(json_object_get(ev, "type"));
    if (!type || !json_is_object(obj)) {
        kl__log_at(log_of(c), K8SLEASE_LOG_WARN, &c->about,
                   "LeaseCandidate watch: bad event %.100s", line);
    } else if (!strcmp(type, "ADDED") || !strcmp(type, "MODIFIED")) {
        /* an event from before our own write's answer: already seen */
        if (c->base && kl__rv_gate_older(&c->gate, obj_string(obj, "metadata", "resourceVersion")))
            goto out;
        set_base(c, obj);
        if (pinged(c, obj)) {
            kl__log_at(log_of(c), K8SLEASE_LOG_DEBUG, &c->about,
                       "LeaseCandidate %s/%s pinged: answering", c->ns, c->name);
            c->renew_due = 1;
        }
    } else if (!strcmp(type, "DELETED")) {
        kl__log_at(log_of(c), K8SLEASE_LOG_INFO, &c->about,
                   "LeaseCandidate %s/%s was deleted: creating it again", c->ns, c->name);
        set_base(c, NULL);
        c->need_read = 0;
    } else if (!strcmp(type, "BOOKMARK")) {
        set_rv(c, obj_string(obj, "metadata", "resourceVersion"));
    } else if (!strcmp(type, "ERROR")) {
        /* 410 Gone and the like: read the object again, then watch */
        kl__log_at(log_of(c), K8SLEASE_LOG_DEBUG, &c->about, "LeaseCandidate watch: %s",
                   json_string_value(json_object_get(obj, "message")));
        c->need_read = 1;
    }
out:
    json_decref(ev);
    return 0;
}

static int on_watch_data(const char *data, size_t len, void *arg)
{
    kl__candidate *c = arg;
    int rc = kl__line_splitter_feed(&c->lines, data, len, on_line, c);

    if (rc == 0 && (c->renew_due || !c->base || c->need_read) && c->kind == REQ_NONE)
        kl__timer_arm(c->client->loop, &c->retry, kl__loop_now(c->client->loop));
    return rc;
}

static void start_watch(kl__candidate *c)
{
    kl__http_opts o = {0};
    char *path;

    path = kl__sprintf("%s?watch=1&fieldSelector=metadata.name%%3D%s&resourceVersion=%s"
                       "&allowWatchBookmarks=true&timeoutSeconds=%d",
                       c->collection, c->name, c->rv, WATCH_TIMEOUT_S);
    if (!path) {
        retry_later(c);
        return;
    }
    o.method = "GET";
    o.path = path;
    o.on_data = on_watch_data;
    o.idle_timeout_ms = WATCH_IDLE_MS;
    o.connect_timeout_ms = c->request_timeout_ms; /* never hold the others' requests longer */
    kl__line_splitter_free(&c->lines);
    kl__line_splitter_init(&c->lines, MAX_LINE);
    c->watch = kl__http_start(c->client->loop, &o, on_watch_done, c);
    kl__free(path);
    if (!c->watch)
        retry_later(c);
}

static void on_watch_done(const kl__http_result *res, void *arg)
{
    kl__candidate *c = arg;

    c->watch = NULL;
    if (res->err) {
        /* a broken stream is routine (a restart, an idle timeout): resume */
        kl__log_at(log_of(c), K8SLEASE_LOG_DEBUG, &c->about, "LeaseCandidate watch: %s",
                   res->errmsg);
        retry_later(c);
        return;
    }
    if (res->status != 200) {
        kl__http_status_error(res->status, res->body, res->body_len, "watch LeaseCandidate");
        kl__log_at(log_of(c), K8SLEASE_LOG_WARN, &c->about, "%s", kl__error_get());
        c->need_read = res->status == 410;
        retry_later(c);
        return;
    }
    step(c); /* ended by timeoutSeconds: resume */
}

/* ------------------------------------------------------------------------ */
/* The steps                                                                */
/* ------------------------------------------------------------------------ */

static int discovered(kl__candidate *c, const kl__http_result *res)
{
    json_t *group = json_loadb(res->body, res->body_len, 0, NULL), *versions, *v;
    const char *found = NULL;
    size_t i;

    versions = json_object_get(group, "versions");
    json_array_foreach(versions, i, v)
    {
        const char *name = json_string_value(json_object_get(v, "version"));

        if (name && !strcmp(name, "v1beta1"))
            found = "v1beta1";
        else if (name && !strcmp(name, "v1alpha2") && !found)
            found = "v1alpha2";
    }
    if (found) {
        c->collection =
            kl__sprintf(CANDIDATE_GROUP "/%s/namespaces/%s/leasecandidates", found, c->ns);
        c->path = c->collection ? kl__sprintf("%s/%s", c->collection, c->name) : NULL;
        kl__log_at(log_of(c), K8SLEASE_LOG_DEBUG, &c->about,
                   "LeaseCandidates: coordination.k8s.io/%s", found);
    }
    json_decref(group);
    if (!found)
        return 0;
    if (!c->collection || !c->path) {
        kl__free(c->collection);
        c->collection = NULL;
        return -1;
    }
    return 1;
}

static void on_done(const kl__http_result *res, void *arg)
{
    kl__candidate *c = arg;
    cand_req kind = c->kind;
    json_t *obj = NULL;
    int ok = !res->err && (res->status == 200 || res->status == 201);
    char what[128];

    c->req = NULL;
    c->kind = REQ_NONE;
    if (kind == REQ_DELETE) {
        if (!ok && res->status != 404) {
            snprintf(what, sizeof(what), "delete LeaseCandidate %s/%s", c->ns, c->name);
            if (res->err)
                kl__error_set(res->err, "%s: %s", what, res->errmsg);
            else
                kl__http_status_error(res->status, res->body, res->body_len, what);
            kl__log_at(log_of(c), K8SLEASE_LOG_WARN, &c->about,
                       "%s (left to the server's garbage collection, 30 min)", kl__error_get());
        }
        on_gone_now(&c->gone_now, c);
        return;
    }
    if (kind == REQ_DISCOVER) {
        int found = ok ? discovered(c, res) : 0;

        if (found > 0) {
            step(c);
        } else if (ok && found == 0) {
            fail_fatal(c, "coordinated election: the server serves no LeaseCandidate API "
                          "(coordination.k8s.io/v1beta1 or v1alpha2); enable the "
                          "CoordinatedLeaderElection feature gate and that API version on the "
                          "kube-apiserver (docs/coordinated.md)");
        } else {
            if (res->err)
                kl__log_at(log_of(c), K8SLEASE_LOG_WARN, &c->about, "discovery of %s: %s",
                           CANDIDATE_GROUP, res->errmsg);
            else if (found == 0)
                kl__log_at(log_of(c), K8SLEASE_LOG_WARN, &c->about, "discovery of %s: HTTP %ld",
                           CANDIDATE_GROUP, res->status);
            retry_later(c);
        }
        return;
    }
    snprintf(what, sizeof(what), "%s LeaseCandidate %s/%s",
             kind == REQ_CREATE ? "create"
             : kind == REQ_GET  ? "get"
                                : "update",
             c->ns, c->name);
    if (ok && !(obj = json_loadb(res->body, res->body_len, 0, NULL))) {
        kl__log_at(log_of(c), K8SLEASE_LOG_WARN, &c->about, "%s: the answer is not JSON", what);
        retry_later(c);
        return;
    }
    if (ok) {
        set_base(c, obj);
        json_decref(obj);
        c->need_read = 0;
        if (kind == REQ_GET) {
            const char *lease = obj_string(c->base, "spec", "leaseName");

            if (strcmp(lease, c->lease_name) != 0) {
                fail_fatal(c,
                           "coordinated election: LeaseCandidate %s/%s already exists for "
                           "lease \"%s\" (a candidate is named after its identity, so "
                           "coordinated elections of one namespace need different identities)",
                           c->ns, c->name, lease);
                return;
            }
            /* Not written by us yet (left by an earlier run with this
             * identity): our versions over it. Pinged: answer. */
            if (!c->written || pinged(c, c->base))
                c->renew_due = 1;
        } else {
            if (kind == REQ_UPDATE)
                c->answered_ping = c->sent_ping;
            c->written = 1;
            c->renew_due = 0;
            kl__timer_arm(c->client->loop, &c->renew,
                          kl__add_sat(kl__loop_now(c->client->loop), RENEW_INTERVAL_NS));
            kl__log_at(log_of(c), K8SLEASE_LOG_DEBUG, &c->about, "%s: ok (rv %s)", what,
                       c->rv ? c->rv : "");
        }
        step(c);
        return;
    }
    if (res->err) {
        kl__log_at(log_of(c), K8SLEASE_LOG_WARN, &c->about, "%s: %s", what, res->errmsg);
        retry_later(c);
        return;
    }
    kl__http_status_error(res->status, res->body, res->body_len, what);
    if (res->status == 409) {
        /* exists already (create), or changed since we read it (update):
         * read it, then write again */
        kl__log_at(log_of(c), K8SLEASE_LOG_DEBUG, &c->about, "%s", kl__error_get());
        c->need_read = 1;
        c->renew_due = c->renew_due || kind == REQ_UPDATE;
        step(c);
    } else if (res->status == 404 && kind != REQ_CREATE) {
        set_base(c, NULL); /* gone: create it */
        c->need_read = 0;
        step(c);
    } else if (res->status == 400 || res->status == 422) {
        fail_fatal(c, "coordinated election: %s", kl__error_get());
    } else {
        kl__log_at(log_of(c), K8SLEASE_LOG_WARN, &c->about, "%s", kl__error_get());
        retry_later(c);
    }
}

/* What to do next, from the state; nothing while a request is in flight. */
static void step(kl__candidate *c)
{
    char *body;

    if (c->stopping || c->req)
        return;
    kl__timer_cancel(c->client->loop, &c->retry);
    if (!c->collection) {
        start_req(c, REQ_DISCOVER, "GET", CANDIDATE_GROUP, NULL);
    } else if (c->need_read) {
        start_req(c, REQ_GET, "GET", c->path, NULL);
    } else if (!c->base || c->renew_due) {
        /* none yet, or deleted while we watched: create; else answer */
        body = c->base ? update_body(c) : new_object_body(c);
        if (!body) {
            kl__log_at(log_of(c), K8SLEASE_LOG_ERROR, &c->about, "LeaseCandidate: out of memory");
            retry_later(c);
            return;
        }
        if (c->base) {
            c->sent_ping = spec_time(c->base, "pingTime");
            start_req(c, REQ_UPDATE, "PUT", c->path, body);
        } else
            start_req(c, REQ_CREATE, "POST", c->collection, body);
    }
    if (!c->req && c->base && c->rv && !c->watch)
        start_watch(c);
}

/* ------------------------------------------------------------------------ */
/* Life cycle                                                               */
/* ------------------------------------------------------------------------ */

int kl__candidate_new(kl__candidate **out, k8slease_client *client, const kl__candidate_config *cfg,
                      kl__candidate_fatal_cb fatal, void *arg)
{
    kl__candidate *c = kl__calloc(1, sizeof(*c));

    *out = NULL;
    if (!c)
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    c->client = client;
    c->fatal = fatal;
    c->arg = arg;
    c->retry_period_ns = cfg->retry_period_ns;
    c->request_timeout_ms = cfg->request_timeout_ms;
    c->ns = kl__strdup(cfg->ns);
    c->name = kl__strdup(cfg->name);
    c->lease_name = kl__strdup(cfg->lease_name);
    c->binary_version = kl__strdup(cfg->binary_version);
    c->emulation_version = kl__strdup(cfg->emulation_version);
    c->strategy = kl__strdup(cfg->strategy);
    c->what = kl__strdup(cfg->what);
    c->subject = kl__strdup(cfg->subject);
    c->about = (kl__log_about){c->what, c->subject, KL_LOG_ELECTION, NULL};
    kl__timer_init(&c->retry, on_retry, c);
    kl__timer_init(&c->renew, on_renew, c);
    kl__timer_init(&c->gone_now, on_gone_now, c);
    kl__line_splitter_init(&c->lines, MAX_LINE);
    if (!c->ns || !c->name || !c->lease_name || !c->binary_version || !c->emulation_version ||
        !c->strategy || !c->what || !c->subject) {
        kl__candidate_free(c);
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    }
    *out = c;
    return 0;
}

void kl__candidate_start(kl__candidate *c)
{
    step(c);
}

void kl__candidate_detach(kl__candidate *c)
{
    kl__loop *loop;

    if (!c)
        return;
    loop = c->client->loop;
    c->stopping = 1;
    kl__timer_cancel(loop, &c->retry);
    kl__timer_cancel(loop, &c->renew);
    kl__timer_cancel(loop, &c->gone_now);
    kl__http_cancel(loop, c->req);
    c->req = NULL;
    kl__http_cancel(loop, c->watch);
    c->watch = NULL;
    c->gone = NULL;
}

void kl__candidate_stop(kl__candidate *c, kl__candidate_gone_cb gone, void *arg)
{
    /* A create still in flight may have landed: delete in that case too. */
    int may_exist = c->written || c->kind == REQ_CREATE || c->kind == REQ_UPDATE;

    if (c->stopping)
        return;
    kl__candidate_detach(c);
    c->gone = gone;
    c->gone_arg = arg;
    if (may_exist && c->path) {
        kl__log_at(log_of(c), K8SLEASE_LOG_DEBUG, &c->about, "deleting LeaseCandidate %s/%s", c->ns,
                   c->name);
        start_req(c, REQ_DELETE, "DELETE", c->path, NULL);
        if (c->req)
            return;
    }
    kl__timer_arm(c->client->loop, &c->gone_now, kl__loop_now(c->client->loop));
}

void kl__candidate_free(kl__candidate *c)
{
    if (!c)
        return;
    json_decref(c->base);
    kl__line_splitter_free(&c->lines);
    kl__free(c->rv);
    kl__free(c->collection);
    kl__free(c->path);
    kl__free(c->ns);
    kl__free(c->name);
    kl__free(c->lease_name);
    kl__free(c->binary_version);
    kl__free(c->emulation_version);
    kl__free(c->strategy);
    kl__free(c->what);
    kl__free(c->subject);
    kl__free(c);
}
