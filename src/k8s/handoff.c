/* Planned handoff: candidates' objects and the choice of a successor; see
 * k8s/handoff.h. */
#include "k8s/handoff.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "k8s/api.h"
#include "k8s/codec.h"
#include "k8s/crash.h"

/* A Lease name is a DNS subdomain: at most 253 characters. */
#define NAME_MAX_LEN 253

void kl__handoff_cand_clear(kl__handoff_cand *c)
{
    kl__free(c->identity);
    kl__free(c->lease);
    kl__free(c->pod);
    kl__free(c->pod_uid);
    kl__free(c->revision);
    memset(c, 0, sizeof(*c));
}

void kl__handoff_label(const char *lease, char out[17])
{
    snprintf(out, 17, "%016llx", (unsigned long long)kl__fnv1a(lease, strlen(lease)));
}

char *kl__handoff_cand_name(const char *lease, const char *identity)
{
    /* "<lease>-c-<16 hex>": the Lease's name cut to fit, and never ending
     * in '.' or '-' (a subdomain's labels end alphanumeric). */
    size_t keep = strlen(lease);

    if (keep > NAME_MAX_LEN - 19)
        keep = NAME_MAX_LEN - 19;
    while (keep > 0 && (lease[keep - 1] == '.' || lease[keep - 1] == '-'))
        keep--;
    return kl__sprintf("%.*s-c-%016llx", (int)keep, lease,
                       (unsigned long long)kl__fnv1a(identity, strlen(identity)));
}

char *kl__handoff_cand_encode(const char *ns, const kl__handoff_cand *c, const char *rv,
                              int64_t now_us)
{
    char label[17], born[KL_MICROTIME_BUFLEN], now[KL_MICROTIME_BUFLEN];
    json_t *root, *meta, *ann;
    char *name = kl__handoff_cand_name(c->lease, c->identity), *info = NULL, *text = NULL;

    kl__handoff_label(c->lease, label);
    kl__microtime_format(c->born_us, born);
    kl__microtime_format(now_us, now);
    ann = json_pack("{s:s, s:s?, s:s?, s:b, s:s, s:I, s:s}", "lease", c->lease, "pod", c->pod,
                    "podUID", c->pod_uid, "terminating", c->terminating, "revision",
                    c->revision ? c->revision : "", "priority", (json_int_t)c->priority, "bornAt",
                    born);
    if (!name || !ann || !(info = kl__json_dump(ann)))
        goto out;
    meta = json_pack("{s:s, s:s, s:{s:s}, s:{s:s}}", "name", name, "namespace", ns, "labels",
                     KL_HANDOFF_LABEL, label, "annotations", KL_HANDOFF_CANDIDATE, info);
    if (meta && rv && json_object_set_new(meta, "resourceVersion", json_string(rv)) < 0) {
        json_decref(meta);
        meta = NULL;
    }
    /* Owned by its Pod: deleted with it, whatever becomes of the process. */
    if (meta && c->pod && c->pod_uid &&
        json_object_set_new(meta, "ownerReferences",
                            json_pack("[{s:s, s:s, s:s, s:s}]", "apiVersion", "v1", "kind", "Pod",
                                      "name", c->pod, "uid", c->pod_uid)) < 0) {
        json_decref(meta);
        meta = NULL;
    }
    root = meta ? json_pack("{s:s, s:s, s:o, s:{s:s, s:I, s:s, s:s}}", "apiVersion",
                            "coordination.k8s.io/v1", "kind", "Lease", "metadata", meta, "spec",
                            "holderIdentity", c->identity, "leaseDurationSeconds",
                            (json_int_t)KL_HANDOFF_CAND_DURATION_S, "acquireTime", born,
                            "renewTime", now)
                : NULL;
    if (root)
        text = kl__json_dump(root);
    json_decref(root);
out:
    json_decref(ann);
    kl__free(info);
    kl__free(name);
    return text;
}

static int dup_str(json_t *obj, const char *key, char **out, int required, const char *what)
{
    json_t *v = json_object_get(obj, key);

    *out = NULL;
    if (!v || json_is_null(v)) {
        if (required)
            return kl__error_set(K8SLEASE_EPROTOCOL, "%s: \"%s\" missing", what, key);
        return 0;
    }
    if (!json_is_string(v))
        return kl__error_set(K8SLEASE_EPROTOCOL, "%s: \"%s\" is not a string", what, key);
    if (!(*out = kl__strdup(json_string_value(v))))
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    return 0;
}

static int time_of(json_t *obj, const char *key, int64_t *us, const char *what)
{
    json_t *v = json_object_get(obj, key);

    *us = 0;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v) || kl__microtime_parse(json_string_value(v), us) < 0)
        return kl__error_set(K8SLEASE_EPROTOCOL, "%s: \"%s\" is not an RFC 3339 time", what, key);
    return 0;
}

int kl__handoff_cand_from_json(kl__handoff_cand *out, json_t *lease)
{
    json_t *meta = json_object_get(lease, "metadata"), *spec = json_object_get(lease, "spec");
    json_t *ann = json_object_get(json_object_get(meta, "annotations"), KL_HANDOFF_CANDIDATE);
    json_t *info = NULL, *v;
    const char *name = json_string_value(json_object_get(meta, "name"));
    char what[320];
    int err;

    memset(out, 0, sizeof(*out));
    snprintf(what, sizeof(what), "candidate %s", name ? name : "(no name)");
    if (!json_is_object(spec) || !json_is_string(ann))
        return kl__error_set(K8SLEASE_EPROTOCOL, "%s: no spec or no %s annotation", what,
                             KL_HANDOFF_CANDIDATE);
    if (!(info = json_loads(json_string_value(ann), JSON_REJECT_DUPLICATES, NULL)) ||
        !json_is_object(info)) {
        err = kl__error_set(K8SLEASE_EPROTOCOL, "%s: annotation %s: not a JSON object", what,
                            KL_HANDOFF_CANDIDATE);
        goto fail;
    }
    if ((err = dup_str(spec, "holderIdentity", &out->identity, 1, what)) < 0 ||
        (err = dup_str(info, "lease", &out->lease, 1, what)) < 0 ||
        (err = dup_str(info, "pod", &out->pod, 0, what)) < 0 ||
        (err = dup_str(info, "podUID", &out->pod_uid, 0, what)) < 0 ||
        (err = dup_str(info, "revision", &out->revision, 0, what)) < 0 ||
        (err = time_of(info, "bornAt", &out->born_us, what)) < 0 ||
        (err = time_of(spec, "renewTime", &out->renew_us, what)) < 0)
        goto fail;
    v = json_object_get(info, "terminating");
    out->terminating = json_is_true(v);
    v = json_object_get(info, "priority");
    out->priority = json_is_integer(v) ? json_integer_value(v) : 0;
    v = json_object_get(spec, "leaseDurationSeconds");
    out->duration_s = json_is_integer(v) ? json_integer_value(v) : 0;
    json_decref(info);
    return 0;
fail:
    json_decref(info);
    kl__handoff_cand_clear(out);
    return err;
}

/* A candidate that may lead next. One on a Pod writes its object once and
 * never renews it (the Pod's garbage collection deletes it): it does not
 * expire. One without a Pod renews it every half duration: expired, its
 * process is gone. */
static int eligible(const kl__handoff_cand *c, const char *leader, int64_t now_us)
{
    return c->identity && c->identity[0] && strcmp(c->identity, leader) != 0 && !c->terminating &&
           ((c->pod_uid && c->pod_uid[0]) || c->renew_us + c->duration_s * 1000000 > now_us);
}

/* The rank of a revision: the earliest birth among the eligible candidates
 * of that revision (later is newer). */
static int64_t revision_born(const kl__handoff_cand *c, size_t n, const char *revision,
                             const char *leader, int64_t now_us)
{
    int64_t first = INT64_MAX;

    for (size_t i = 0; i < n; i++)
        if (eligible(&c[i], leader, now_us) &&
            strcmp(c[i].revision ? c[i].revision : "", revision) == 0 && c[i].born_us < first)
            first = c[i].born_us;
    return first;
}

int kl__handoff_choose(const kl__handoff_cand *c, size_t n, const char *leader, int64_t now_us)
{
    int best = -1;
    int64_t best_rev = 0;

    for (size_t i = 0; i < n; i++) {
        int64_t rev;
        const kl__handoff_cand *b;

        if (!eligible(&c[i], leader, now_us))
            continue;
        rev = revision_born(c, n, c[i].revision ? c[i].revision : "", leader, now_us);
        if (best < 0) {
            best = (int)i;
            best_rev = rev;
            continue;
        }
        b = &c[best];
        if (rev != best_rev                ? rev > best_rev
            : c[i].priority != b->priority ? c[i].priority > b->priority
            : c[i].born_us != b->born_us   ? c[i].born_us < b->born_us
                                           : strcmp(c[i].identity, b->identity) < 0) {
            best = (int)i;
            best_rev = rev;
        }
    }
    return best;
}

char *kl__handoff_done_value(const char *from, const char *to, int64_t epoch, const char *why)
{
    json_t *v = json_pack("{s:s, s:s, s:I, s:s*}", "from", from, "to", to, "epoch",
                          (json_int_t)epoch, "why", why);
    char *text = v ? kl__json_dump(v) : NULL;

    json_decref(v);
    return text;
}

int kl__handoff_annotate(json_t *root, const char *from, const char *to, int64_t epoch,
                         const char *why)
{
    json_t *meta = json_object_get(root, "metadata"), *ann;
    char *done = kl__handoff_done_value(from, to, epoch, why);

    if (!done)
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    if (!json_is_object(meta) &&
        (!(meta = json_object()) || json_object_set_new(root, "metadata", meta) < 0))
        goto oom;
    if (!json_is_object(ann = json_object_get(meta, "annotations")) &&
        (!(ann = json_object()) || json_object_set_new(meta, "annotations", ann) < 0))
        goto oom;
    json_object_del(ann, KL_HANDOFF_REQUEST);
    if (json_object_set_new(ann, KL_HANDOFF_DONE, json_string(done)) < 0)
        goto oom;
    kl__free(done);
    return 0;
oom:
    kl__free(done);
    return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
}

int kl__handoff_requested(const char *lease_json, char **to)
{
    json_t *root, *v;
    const char *s;

    *to = NULL;
    /* Almost always absent: a look at the text, no parse. */
    if (!strstr(lease_json, "\"" KL_HANDOFF_REQUEST "\""))
        return 0;
    if (!(root = json_loads(lease_json, 0, NULL)))
        return 0;
    v = json_object_get(json_object_get(json_object_get(root, "metadata"), "annotations"),
                        KL_HANDOFF_REQUEST);
    if (!json_is_string(v)) {
        json_decref(root);
        return 0;
    }
    s = json_string_value(v);
    if (s[0] && strcmp(s, "*") != 0 && !(*to = kl__strdup(s))) {
        json_decref(root);
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    }
    json_decref(root);
    return 1;
}

/* ---- the leader's list -------------------------------------------------- */

typedef struct list_req {
    kl__handoff_list_cb cb;
    void *arg;
    char what[300];
} list_req;

static void on_list(const kl__http_result *res, void *arg)
{
    list_req *l = arg;
    kl__handoff_cand *c = NULL;
    json_t *root = NULL, *items, *item;
    size_t n = 0, i;
    int err = 0;

    if (res->err)
        err = kl__error_set(res->err, "%s: %s", l->what, res->errmsg);
    else if (res->status != 200)
        err = kl__http_status_error(res->status, res->body, res->body_len, l->what);
    else if (!(root = json_loadb(res->body, res->body_len, 0, NULL)) ||
             !json_is_array(items = json_object_get(root, "items")))
        err = kl__error_set(K8SLEASE_EPROTOCOL, "%s: not a list", l->what);
    else if (json_array_size(items) && !(c = kl__calloc(json_array_size(items), sizeof(*c))))
        err = kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    if (err == 0) {
        json_array_foreach(items, i, item)
        {
            /* One that is not a candidate's object counts for nothing. */
            if (kl__handoff_cand_from_json(&c[n], item) == 0)
                n++;
        }
    }
    l->cb(c, n, err, l->arg);
    for (i = 0; i < n; i++)
        kl__handoff_cand_clear(&c[i]);
    kl__free(c);
    json_decref(root);
    kl__free(l);
}

kl__http_req *kl__handoff_list(k8slease_client *client, const char *ns, const char *lease,
                               int64_t timeout_ms, kl__handoff_list_cb cb, void *arg)
{
    kl__http_opts o = {0};
    kl__http_req *req;
    char label[17], *path;
    list_req *l = kl__calloc(1, sizeof(*l));

    kl__handoff_label(lease, label);
    path = kl__sprintf(
        "/apis/coordination.k8s.io/v1/namespaces/%s/leases?labelSelector=" KL_HANDOFF_LABEL
        "%%3D%s",
        ns, label);
    if (!l || !path) {
        kl__free(l);
        kl__free(path);
        kl__error_set(K8SLEASE_ENOMEM, "out of memory");
        return NULL;
    }
    l->cb = cb;
    l->arg = arg;
    snprintf(l->what, sizeof(l->what), "list the handoff candidates of lease %s/%s", ns, lease);
    o.method = "GET";
    o.path = path;
    o.timeout_ms = timeout_ms;
    if (!(req = kl__http_start(client->loop, &o, on_list, l)))
        kl__free(l);
    kl__free(path);
    return req;
}

/* ---- a candidate's own object ---------------------------------------------- */

typedef enum ann_req { A_NONE, A_POD, A_CREATE, A_GET, A_UPDATE, A_DELETE } ann_req;

struct kl__handoff_announce {
    k8slease_client *client;
    kl__handoff_announce_config cfg; /* strings below */
    char *ns, *lease, *identity, *pod_ns, *pod, *revision, *what, *subject;
    kl__log_about about;
    char *path;       /* the object's */
    char *collection; /* .../leases */

    /* Loop thread only. */
    kl__handoff_cand self;
    char *rv;    /* of the object as last written or read; NULL: create it */
    int written; /* delete it when stopping */
    int known;   /* as last told to cfg.known */
    int dirty;   /* self changed since the last write */
    int stopping, failed;
    int pod_read; /* the Pod was read, or could not be: announced without it */
    kl__http_req *req;
    ann_req kind;
    kl__timer retry, renew, gone_now;
    kl__handoff_gone_cb gone;
    void *gone_arg;
};

static void ann_step(kl__handoff_announce *a);

static void ann_on_timer(kl__timer *t, void *arg)
{
    kl__handoff_announce *a = arg;

    if (t == &a->renew)
        a->dirty = 1;
    ann_step(a);
}

static void ann_on_gone(kl__timer *t, void *arg)
{
    kl__handoff_announce *a = arg;

    (void)t;
    if (a->gone) {
        kl__handoff_gone_cb gone = a->gone;

        a->gone = NULL;
        gone(a->gone_arg);
    }
}

static void ann_tell(kl__handoff_announce *a, int known)
{
    if (a->known == known)
        return;
    a->known = known;
    if (a->cfg.known)
        a->cfg.known(known, a->cfg.known_arg);
}

static void ann_later(kl__handoff_announce *a)
{
    kl__timer_arm(a->client->loop, &a->retry,
                  kl__loop_now(a->client->loop) + a->cfg.retry_period_ns);
}

static void set_rv_of(kl__handoff_announce *a, const char *body, size_t len)
{
    json_t *root = json_loadb(body, len, 0, NULL);
    const char *rv =
        json_string_value(json_object_get(json_object_get(root, "metadata"), "resourceVersion"));

    kl__free(a->rv);
    a->rv = rv ? kl__strdup(rv) : NULL;
    json_decref(root);
}

/* Our Pod: its UID (the owner), creation (bornAt) and revision label. */
static void take_pod(kl__handoff_announce *a, const char *body, size_t len)
{
    json_t *root = json_loadb(body, len, 0, NULL), *meta = json_object_get(root, "metadata");
    json_t *labels = json_object_get(meta, "labels");
    const char *uid = json_string_value(json_object_get(meta, "uid"));
    const char *created = json_string_value(json_object_get(meta, "creationTimestamp"));
    const char *rev = json_string_value(json_object_get(labels, "pod-template-hash"));
    int64_t born;

    if (!rev)
        rev = json_string_value(json_object_get(labels, "controller-revision-hash"));
    if (uid && !a->self.pod_uid)
        a->self.pod_uid = kl__strdup(uid);
    if (rev && !a->revision && !a->self.revision[0]) {
        kl__free(a->self.revision);
        a->self.revision = kl__strdup(rev);
    }
    if (created && kl__microtime_parse(created, &born) == 0)
        a->self.born_us = born;
    json_decref(root);
}

static void ann_done(const kl__http_result *res, void *arg)
{
    kl__handoff_announce *a = arg;
    ann_req kind = a->kind;
    char what[400];
    int err = 0;

    a->req = NULL;
    a->kind = A_NONE;
    snprintf(what, sizeof(what), "handoff candidate %s", a->self.identity);
    if (res->err)
        err = kl__error_set(res->err, "%s: %s", what, res->errmsg);
    else if (kind == A_DELETE && (res->status == 200 || res->status == 202 || res->status == 404))
        err = 0;
    else if (kind == A_POD && res->status != 200)
        err = kl__http_status_error(res->status, res->body, res->body_len, what);
    else if (kind == A_CREATE && res->status == 409) {
        kl__free(a->rv);
        a->rv = NULL;
        a->kind = A_GET; /* taken over: read it, write ours over it */
        ann_step(a);
        return;
    } else if (res->status == 409 || (kind == A_GET && res->status == 404)) {
        kl__free(a->rv);
        a->rv = NULL;
        a->dirty = 1;
        ann_step(a);
        return;
    } else if (res->status != 200 && res->status != 201)
        err = kl__http_status_error(res->status, res->body, res->body_len, what);
    if (kind == A_DELETE || (err < 0 && a->stopping)) {
        a->written = 0;
        ann_tell(a, 0);
        kl__timer_arm(a->client->loop, &a->gone_now, kl__loop_now(a->client->loop));
        return;
    }
    if (err < 0) {
        /* No permission: say so once, the candidate is unknown to the
         * choice (still a candidate that can win, and a named successor). */
        if (err == K8SLEASE_EAUTH && kind != A_POD) {
            kl__log_at(&a->client->log, K8SLEASE_LOG_WARN, &a->about,
                       "%s; this candidate is not known to the leader's choice", kl__error_get());
            a->failed = 1;
            ann_tell(a, -1);
            return;
        }
        kl__log_at(&a->client->log, K8SLEASE_LOG_DEBUG, &a->about, "%s; again later",
                   kl__error_get());
        if (kind != A_POD) {
            ann_later(a);
            return;
        }
        a->pod_read = 1; /* announced without its Pod: no owner, renewed */
        ann_step(a);
        return;
    }
    if (kind == A_POD) {
        take_pod(a, res->body, res->body_len);
        a->pod_read = 1;
        a->dirty = 1;
    } else if (kind == A_GET) {
        set_rv_of(a, res->body, res->body_len);
        a->dirty = 1;
    } else {
        set_rv_of(a, res->body, res->body_len);
        a->written = 1;
        a->dirty = 0;
        ann_tell(a, 1);
        if (!a->self.pod_uid)
            kl__timer_arm(a->client->loop, &a->renew,
                          kl__loop_now(a->client->loop) +
                              (int64_t)KL_HANDOFF_CAND_DURATION_S / 2 * KL_NS_PER_S);
    }
    ann_step(a);
}

static void ann_send(kl__handoff_announce *a, ann_req kind)
{
    kl__http_opts o = {0};
    char *body = NULL;

    o.timeout_ms = a->cfg.request_timeout_ms;
    switch (kind) {
    case A_POD:
        o.method = "GET";
        o.path = kl__sprintf("/api/v1/namespaces/%s/pods/%s", a->pod_ns, a->pod);
        break;
    case A_GET:
        o.method = "GET";
        o.path = kl__strdup(a->path);
        break;
    case A_DELETE:
        o.method = "DELETE";
        o.path = kl__strdup(a->path);
        break;
    default:
        body = kl__handoff_cand_encode(a->ns, &a->self, a->rv, kl__clock_wall_us());
        o.method = a->rv ? "PUT" : "POST";
        o.path = kl__strdup(a->rv ? a->path : a->collection);
        o.content_type = "application/json";
        o.body = body;
        o.body_len = body ? strlen(body) : 0;
        kind = a->rv ? A_UPDATE : A_CREATE;
        break;
    }
    a->kind = kind;
    if (o.path && (o.method[0] != 'P' || body))
        a->req = kl__http_start(a->client->loop, &o, ann_done, a);
    kl__free((char *)o.path);
    kl__free(body);
    if (!a->req) {
        a->kind = A_NONE;
        ann_later(a);
    }
}

/* The next request, if any is due and none is in flight. */
static void ann_step(kl__handoff_announce *a)
{
    if (a->req || a->failed)
        return;
    if (a->stopping) {
        if (a->written)
            ann_send(a, A_DELETE);
        else
            kl__timer_arm(a->client->loop, &a->gone_now, kl__loop_now(a->client->loop));
        return;
    }
    if (a->kind == A_GET)
        ann_send(a, A_GET);
    else if (a->pod && !a->pod_read)
        ann_send(a, A_POD);
    else if (a->dirty || !a->written)
        ann_send(a, A_CREATE);
}

int kl__handoff_announce_new(kl__handoff_announce **out, k8slease_client *client,
                             const kl__handoff_announce_config *cfg)
{
    kl__handoff_announce *a = kl__calloc(1, sizeof(*a));

    *out = NULL;
    if (!a)
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    a->client = client;
    a->cfg = *cfg;
    a->ns = kl__strdup(cfg->ns);
    a->lease = kl__strdup(cfg->lease);
    a->identity = kl__strdup(cfg->identity);
    a->pod_ns = cfg->pod ? kl__strdup(cfg->pod_ns ? cfg->pod_ns : cfg->ns) : NULL;
    a->pod = cfg->pod ? kl__strdup(cfg->pod) : NULL;
    a->revision = cfg->revision ? kl__strdup(cfg->revision) : NULL;
    a->what = kl__strdup(cfg->what);
    a->subject = kl__strdup(cfg->subject);
    a->collection = kl__sprintf("/apis/coordination.k8s.io/v1/namespaces/%s/leases", cfg->ns);
    a->about = (kl__log_about){a->what, a->subject, KL_LOG_ELECTION, NULL};
    a->self.identity = kl__strdup(cfg->identity);
    a->self.lease = kl__strdup(cfg->lease);
    a->self.pod = cfg->pod ? kl__strdup(cfg->pod) : NULL;
    a->self.revision = kl__strdup(cfg->revision ? cfg->revision : "");
    a->self.priority = cfg->priority;
    a->self.born_us = kl__process_start_us();
    if (!a->self.born_us)
        a->self.born_us = kl__clock_wall_us();
    {
        char *name = a->lease ? kl__handoff_cand_name(cfg->lease, cfg->identity) : NULL;

        a->path = name && a->collection ? kl__sprintf("%s/%s", a->collection, name) : NULL;
        kl__free(name);
    }
    kl__timer_init(&a->retry, ann_on_timer, a);
    kl__timer_init(&a->renew, ann_on_timer, a);
    kl__timer_init(&a->gone_now, ann_on_gone, a);
    if (!a->ns || !a->lease || !a->identity || (cfg->pod && (!a->pod_ns || !a->pod)) ||
        (cfg->revision && !a->revision) || !a->what || !a->subject || !a->collection ||
        !a->self.identity || !a->self.lease || (cfg->pod && !a->self.pod) || !a->self.revision ||
        !a->path) {
        kl__handoff_announce_free(a);
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    }
    *out = a;
    return 0;
}

void kl__handoff_announce_start(kl__handoff_announce *a)
{
    if (a)
        ann_step(a);
}

void kl__handoff_announce_terminating(kl__handoff_announce *a)
{
    if (!a || a->self.terminating || a->stopping)
        return;
    a->self.terminating = 1;
    a->dirty = 1;
    ann_step(a);
}

void kl__handoff_announce_stop(kl__handoff_announce *a, kl__handoff_gone_cb gone, void *arg)
{
    if (!a || a->stopping)
        return;
    a->stopping = 1;
    a->gone = gone;
    a->gone_arg = arg;
    kl__timer_cancel(a->client->loop, &a->retry);
    kl__timer_cancel(a->client->loop, &a->renew);
    /* A write in flight is waited for: it may create the object. */
    if (a->failed) {
        a->failed = 0;
        a->written = 0;
    }
    ann_step(a);
}

void kl__handoff_announce_detach(kl__handoff_announce *a)
{
    if (!a)
        return;
    kl__http_cancel(a->client->loop, a->req);
    a->req = NULL;
    kl__timer_cancel(a->client->loop, &a->retry);
    kl__timer_cancel(a->client->loop, &a->renew);
    kl__timer_cancel(a->client->loop, &a->gone_now);
    a->gone = NULL;
}

void kl__handoff_announce_free(kl__handoff_announce *a)
{
    if (!a)
        return;
    kl__handoff_cand_clear(&a->self);
    kl__free(a->rv);
    kl__free(a->ns);
    kl__free(a->lease);
    kl__free(a->identity);
    kl__free(a->pod_ns);
    kl__free(a->pod);
    kl__free(a->revision);
    kl__free(a->what);
    kl__free(a->subject);
    kl__free(a->path);
    kl__free(a->collection);
    kl__free(a);
}
