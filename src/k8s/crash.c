/* Crash failover: the record in the Lease, the leader's own container
 * instance, and a follower's watch of the holder's Pod. k8s/crash.h says
 * what it is for and why the rules are safe. */
#include "k8s/crash.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/client.h"
#include "k8s/client.h"
#include "core/clock.h"
#include "core/http.h"
#include "k8s/api.h"
#include "k8s/informer.h"

/* A status must show our instance started no later than this process
 * (plus this much: startedAt has whole seconds, our start time from /proc
 * a boot time in whole seconds). */
#define START_SLACK_US INT64_C(1100000)
#define GET_TIMEOUT_MS 10000

/* ------------------------------------------------------------------------ */
/* The record                                                               */
/* ------------------------------------------------------------------------ */

void kl__crash_record_clear(kl__crash_record *r)
{
    kl__free(r->holder);
    kl__free(r->pod_ns);
    kl__free(r->pod);
    kl__free(r->pod_uid);
    kl__free(r->container);
    kl__free(r->container_id);
    memset(r, 0, sizeof(*r));
}

static int copy_field(json_t *root, const char *key, char **dst)
{
    json_t *v = json_object_get(root, key);

    if (!json_is_string(v) || json_string_length(v) == 0)
        return kl__error_set(K8SLEASE_EPROTOCOL, "annotation %s: \"%s\" missing or not a string",
                             KL_CRASH_ANNOTATION, key);
    if (!(*dst = kl__strdup(json_string_value(v))))
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    return 0;
}

int kl__crash_record_parse(kl__crash_record *out, const char *text)
{
    json_error_t jerr;
    json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &jerr), *epoch, *at;
    int err;

    memset(out, 0, sizeof(*out));
    if (!json_is_object(root)) {
        json_decref(root);
        return kl__error_set(K8SLEASE_EPROTOCOL, "annotation %s: not a JSON object",
                             KL_CRASH_ANNOTATION);
    }
    epoch = json_object_get(root, "epoch");
    at = json_object_get(root, "verifiedAt");
    if ((err = copy_field(root, "holder", &out->holder)) < 0 ||
        (err = copy_field(root, "podNamespace", &out->pod_ns)) < 0 ||
        (err = copy_field(root, "pod", &out->pod)) < 0 ||
        (err = copy_field(root, "podUID", &out->pod_uid)) < 0 ||
        (err = copy_field(root, "container", &out->container)) < 0 ||
        (err = copy_field(root, "containerID", &out->container_id)) < 0)
        goto fail;
    if (!json_is_integer(epoch) || json_integer_value(epoch) < 0) {
        err = kl__error_set(K8SLEASE_EPROTOCOL,
                            "annotation %s: \"epoch\" missing or not a non-negative integer",
                            KL_CRASH_ANNOTATION);
        goto fail;
    }
    out->epoch = json_integer_value(epoch);
    if (!json_is_string(at) || kl__microtime_parse(json_string_value(at), &out->verified_us) < 0) {
        err = kl__error_set(K8SLEASE_EPROTOCOL,
                            "annotation %s: \"verifiedAt\" missing or not an RFC 3339 time",
                            KL_CRASH_ANNOTATION);
        goto fail;
    }
    json_decref(root);
    return 0;
fail:
    json_decref(root);
    kl__crash_record_clear(out);
    return err;
}

char *kl__crash_record_encode(const kl__crash_record *r)
{
    char at[KL_MICROTIME_BUFLEN];
    json_t *root;
    char *text;
    int64_t whole = r->verified_us - r->verified_us % 1000000;

    /* Whole seconds, as the kubelet's times: "2026-12-02T07:00:00Z". */
    kl__microtime_format(whole, at);
    memcpy(at + 19, "Z", 2);
    root = json_pack("{s:s, s:I, s:s, s:s, s:s, s:s, s:s, s:s}", "holder", r->holder, "epoch",
                     (json_int_t)r->epoch, "podNamespace", r->pod_ns, "pod", r->pod, "podUID",
                     r->pod_uid, "container", r->container, "containerID", r->container_id,
                     "verifiedAt", at);
    if (!root)
        return NULL;
    text = kl__json_dump(root);
    json_decref(root);
    return text;
}

int kl__crash_record_of_lease(const kl__lease *lease, kl__crash_record *out)
{
    memset(out, 0, sizeof(*out));
    if (lease->holder_container_bad)
        return kl__error_set(K8SLEASE_EPROTOCOL, "annotation %s: not a string",
                             KL_CRASH_ANNOTATION);
    if (!lease->holder_container)
        return K8SLEASE_ENOTFOUND;
    return kl__crash_record_parse(out, lease->holder_container);
}

int kl__crash_evidence(const kl__crash_record *r, const kl__pod *pod)
{
    int64_t after_s = r->verified_us / 1000000;

    if (!pod->uid[0] || strcmp(pod->uid, r->pod_uid) != 0)
        return 0;
    for (size_t i = 0; i < pod->ncontainers; i++) {
        const kl__pod_container *c = &pod->containers[i];

        if (strcmp(c->name, r->container) != 0)
            continue;
        if (c->terminated_id[0] && strcmp(c->terminated_id, r->container_id) == 0 &&
            c->terminated_finished_us / 1000000 > after_s)
            return 1;
        if (c->last_terminated_id[0] && strcmp(c->last_terminated_id, r->container_id) == 0 &&
            c->last_terminated_finished_us / 1000000 > after_s)
            return 1;
    }
    return 0;
}

int kl__crash_annotate(json_t *root, const char *value)
{
    json_t *meta = json_object_get(root, "metadata"), *ann;

    if (!json_is_object(meta)) {
        if (!value)
            return 0;
        if (!(meta = json_object()) || json_object_set_new(root, "metadata", meta) < 0)
            return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    }
    ann = json_object_get(meta, "annotations");
    if (!value) {
        if (json_is_object(ann))
            json_object_del(ann, KL_CRASH_ANNOTATION);
        return 0;
    }
    if (!json_is_object(ann)) {
        if (!(ann = json_object()) || json_object_set_new(meta, "annotations", ann) < 0)
            return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    }
    if (json_object_set_new(ann, KL_CRASH_ANNOTATION, json_string(value)) < 0)
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    return 0;
}

int kl__crash_text_has(const char *lease_json, const char *value)
{
    static const char key[] = "\"" KL_CRASH_ANNOTATION "\":";
    json_t *s;
    char *quoted, *want;
    int found;

    if (!value)
        return !strstr(lease_json, "\"" KL_CRASH_ANNOTATION "\"");
    if (!(s = json_string(value)))
        return 0;
    quoted = json_dumps(s, JSON_ENCODE_ANY | JSON_COMPACT);
    json_decref(s);
    want = quoted ? kl__sprintf("%s%s", key, quoted) : NULL;
    free(quoted);
    found = want && strstr(lease_json, want) != NULL;
    kl__free(want);
    return found;
}

/* ------------------------------------------------------------------------ */
/* This process's start                                                     */
/* ------------------------------------------------------------------------ */

int64_t kl__process_start_us(void)
{
    char buf[1024], *p;
    unsigned long long start_ticks = 0, btime = 0;
    long hz = sysconf(_SC_CLK_TCK);
    FILE *f = fopen("/proc/self/stat", "re");
    size_t n;

    if (!f)
        return 0;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* Field 22; the command (field 2) may hold spaces and parentheses. */
    if (!(p = strrchr(buf, ')')) ||
        sscanf(p + 1,
               " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
               &start_ticks) != 1)
        return 0;
    if (!(f = fopen("/proc/stat", "re")))
        return 0;
    while (fgets(buf, sizeof(buf), f))
        if (sscanf(buf, "btime %llu", &btime) == 1)
            break;
    fclose(f);
    if (!btime || hz <= 0)
        return 0;
    return (int64_t)btime * 1000000 + (int64_t)(start_ticks * 1000000ULL / (unsigned long long)hz);
}

/* ------------------------------------------------------------------------ */
/* The elector's side                                                       */
/* ------------------------------------------------------------------------ */

struct kl__crash {
    k8slease_client *client;
    kl__crash_config cfg; /* strings below */
    char *pod_ns, *pod, *container, *identity, *what;
    char *subject;
    kl__log_about about; /* its log lines' */
    char *pod_path;

    /* Loop thread only. */
    kl__http_req *req;
    kl__timer retry;
    kl__crash_record self; /* our instance, once known */
    int self_known;
    int self_given_up; /* no permission, or no such Pod: expiry only */
    char *value;       /* kl__crash_value's last answer */
    int64_t value_epoch;

    kl__sub *sub;              /* the Pod of the followed record */
    kl__pod *last;             /* the last state of that Pod seen */
    kl__crash_record followed; /* the record of another holder's current term */
    int following;
    int reported; /* ended() was called for followed */
    int stopped;
};

static void read_self(kl__crash *c);

static void on_retry(kl__timer *t, void *arg)
{
    (void)t;
    read_self(arg);
}

static void retry_self(kl__crash *c)
{
    kl__timer_arm(c->client->loop, &c->retry,
                  kl__loop_now(c->client->loop) + c->cfg.retry_period_ns);
}

static void give_up_self(kl__crash *c, const char *why)
{
    c->self_given_up = 1;
    kl__log_at(&c->client->log, K8SLEASE_LOG_WARN, &c->about,
               "crash failover: %s; this process's crash is found by the Lease's expiry "
               "only",
               why);
}

static void on_self(const kl__http_result *res, void *arg)
{
    kl__crash *c = arg;
    const kl__pod_container *mine = NULL;
    kl__pod *pod = NULL;
    char what[400];
    int err;

    c->req = NULL;
    snprintf(what, sizeof(what), "get pod %s/%s", c->pod_ns, c->pod);
    if (res->err) {
        kl__log_at(&c->client->log, K8SLEASE_LOG_WARN, &c->about, "crash failover: %s; retrying",
                   res->errmsg);
        retry_self(c);
        return;
    }
    if (res->status != 200) {
        err = kl__http_status_error(res->status, res->body, res->body_len, what);
        if (err == K8SLEASE_EAUTH || err == K8SLEASE_ENOTFOUND)
            give_up_self(c, kl__error_get());
        else {
            kl__log_at(&c->client->log, K8SLEASE_LOG_WARN, &c->about,
                       "crash failover: %s; retrying", kl__error_get());
            retry_self(c);
        }
        return;
    }
    if ((err = kl__pod_parse(&pod, res->body, res->body_len)) < 0 ||
        (err = kl__pod_own_container(pod, c->container, kl__process_start_us() + START_SLACK_US,
                                     &mine)) < 0) {
        if (err == K8SLEASE_EINVAL) {
            give_up_self(c, kl__error_get());
        } else {
            kl__log_at(&c->client->log, K8SLEASE_LOG_DEBUG, &c->about,
                       "crash failover: pod %s/%s: %s; reading it again", c->pod_ns, c->pod,
                       kl__error_get());
            retry_self(c);
        }
        kl__pod_free(pod);
        return;
    }
    c->self.holder = kl__strdup(c->identity);
    c->self.pod_ns = kl__strdup(c->pod_ns);
    c->self.pod = kl__strdup(c->pod);
    c->self.pod_uid = kl__strdup(pod->uid);
    c->self.container = kl__strdup(mine->name);
    c->self.container_id = kl__strdup(mine->container_id);
    c->self.verified_us = kl__clock_wall_us();
    kl__pod_free(pod);
    if (!c->self.holder || !c->self.pod_ns || !c->self.pod || !c->self.pod_uid ||
        !c->self.container || !c->self.container_id) {
        kl__crash_record_clear(&c->self);
        retry_self(c);
        return;
    }
    c->self_known = 1;
    kl__log_at(&c->client->log, K8SLEASE_LOG_INFO, &c->about,
               "crash failover: this process runs in container %s (%s) of pod %s/%s",
               c->self.container, c->self.container_id, c->pod_ns, c->pod);
}

static void read_self(kl__crash *c)
{
    kl__http_opts o = {0};

    if (c->stopped || c->self_known || c->self_given_up || c->req)
        return;
    o.method = "GET";
    o.path = c->pod_path;
    o.timeout_ms = GET_TIMEOUT_MS;
    if (!(c->req = kl__http_start(c->client->loop, &o, on_self, c)))
        retry_self(c);
}

int kl__crash_new(kl__crash **out, k8slease_client *client, const kl__crash_config *cfg)
{
    kl__crash *c;
    int err;

    *out = NULL;
    /* Namespaces and container names are both RFC 1123 labels. */
    if (kl__check_namespace(cfg->pod_ns) < 0)
        return kl__error_set(K8SLEASE_EINVAL,
                             "pod_namespace \"%.80s\": must be a lowercase RFC 1123 label (a-z, "
                             "0-9, '-', at most 63 characters)",
                             cfg->pod_ns);
    if ((err = kl__check_name("pod_name", cfg->pod)) < 0)
        return err;
    if (cfg->container && kl__check_namespace(cfg->container) < 0)
        return kl__error_set(K8SLEASE_EINVAL,
                             "container \"%.80s\": must be a lowercase RFC 1123 label (a-z, 0-9, "
                             "'-', at most 63 characters)",
                             cfg->container);
    if (!(c = kl__calloc(1, sizeof(*c))))
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    c->client = client;
    c->cfg = *cfg;
    c->pod_ns = kl__strdup(cfg->pod_ns);
    c->pod = kl__strdup(cfg->pod);
    c->container = cfg->container ? kl__strdup(cfg->container) : NULL;
    c->identity = kl__strdup(cfg->identity);
    c->what = kl__strdup(cfg->what);
    c->subject = kl__strdup(cfg->subject);
    c->about = (kl__log_about){c->what, c->subject, KL_LOG_ELECTION, NULL};
    c->pod_path = kl__sprintf("/api/v1/namespaces/%s/pods/%s", cfg->pod_ns, cfg->pod);
    kl__timer_init(&c->retry, on_retry, c);
    if (!c->pod_ns || !c->pod || (cfg->container && !c->container) || !c->identity || !c->what ||
        !c->subject || !c->pod_path) {
        kl__crash_free(c);
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    }
    *out = c;
    return 0;
}

void kl__crash_start(kl__crash *c)
{
    read_self(c);
}

const char *kl__crash_value(kl__crash *c, const char *holder, int64_t epoch)
{
    if (!c->self_known || !holder || strcmp(holder, c->identity) != 0)
        return NULL;
    if (!c->value || c->value_epoch != epoch) {
        kl__free(c->value);
        c->self.epoch = epoch;
        c->value = kl__crash_record_encode(&c->self);
        c->value_epoch = epoch;
    }
    return c->value;
}

static int same_record(const kl__crash_record *a, const kl__crash_record *b)
{
    return a->epoch == b->epoch && a->verified_us == b->verified_us &&
           strcmp(a->holder, b->holder) == 0 && strcmp(a->pod_ns, b->pod_ns) == 0 &&
           strcmp(a->pod, b->pod) == 0 && strcmp(a->pod_uid, b->pod_uid) == 0 &&
           strcmp(a->container, b->container) == 0 && strcmp(a->container_id, b->container_id) == 0;
}

static void unfollow(kl__crash *c)
{
    kl__sub_stop(c->sub);
    c->sub = NULL;
    kl__pod_free(c->last);
    c->last = NULL;
    if (c->following)
        kl__crash_record_clear(&c->followed);
    c->following = 0;
    c->reported = 0;
}

/* Judge the last state of the followed record's Pod; report once. */
static void judge(kl__crash *c)
{
    kl__crash_record *r = &c->followed;

    if (!c->following || c->reported || !c->last || !kl__crash_evidence(r, c->last))
        return;
    c->reported = 1;
    kl__log_at(&c->client->log, K8SLEASE_LOG_INFO, &c->about,
               "the kubelet reported container %s (%s) of pod %s/%s terminated: the term "
               "of \"%s\" (epoch %lld) is over",
               r->container, r->container_id, r->pod_ns, r->pod, r->holder, (long long)r->epoch);
    c->cfg.ended(r->holder, r->epoch, c->cfg.arg);
}

static void on_pod(const kl__sub_event *ev, void *arg)
{
    kl__crash *c = arg;
    kl__pod *copy = NULL;

    if (ev->type == KL_SUB_HEALTH)
        return;
    /* Deleted, or gone from a list: no evidence, and none to keep (a Pod
     * of the same name later is another Pod: its UID tells). */
    if (ev->type == KL_SUB_OBJECT && ev->pod && kl__pod_from_json(&copy, ev->pod->root) < 0)
        copy = NULL; /* out of memory: no evidence this time; the next state judges */
    kl__pod_free(c->last);
    c->last = copy;
    judge(c);
}

void kl__crash_observe(kl__crash *c, const kl__lease *lease)
{
    kl__crash_record r;
    const char *holder = lease->spec.holder ? lease->spec.holder : "";
    int same_pod;

    if (c->stopped)
        return;
    if (kl__crash_record_of_lease(lease, &r) < 0 || strcmp(r.holder, holder) != 0 ||
        r.epoch != lease->spec.transitions || strcmp(holder, c->identity) == 0) {
        /* No record, a broken one, or not of this term (a new holder that
         * wrote none yet, our own): nothing to watch. */
        if (r.holder)
            kl__crash_record_clear(&r);
        unfollow(c);
        return;
    }
    if (c->following && same_record(&c->followed, &r)) {
        kl__crash_record_clear(&r);
        return;
    }
    same_pod =
        c->sub && strcmp(c->followed.pod_ns, r.pod_ns) == 0 && strcmp(c->followed.pod, r.pod) == 0;
    if (c->following)
        kl__crash_record_clear(&c->followed);
    c->followed = r;
    c->following = 1;
    c->reported = 0;
    if (same_pod) {
        judge(c); /* the last state seen of that Pod, under the new record */
        return;
    }
    kl__sub_stop(c->sub);
    kl__pod_free(c->last);
    c->last = NULL;
    c->sub = kl__sub_start(kl__k8s_of(c->client)->pod_informer, r.pod_ns, r.pod,
                           c->cfg.retry_period_ns, on_pod, c);
    if (!c->sub)
        kl__log_at(&c->client->log, K8SLEASE_LOG_WARN, &c->about,
                   "crash failover: cannot watch pod %s/%s: %s; the Lease's expiry rules", r.pod_ns,
                   r.pod, kl__error_get());
}

void kl__crash_stop(kl__crash *c)
{
    if (!c)
        return;
    c->stopped = 1;
    kl__http_cancel(c->client->loop, c->req);
    c->req = NULL;
    kl__timer_cancel(c->client->loop, &c->retry);
    unfollow(c);
}

void kl__crash_free(kl__crash *c)
{
    if (!c)
        return;
    kl__crash_record_clear(&c->self);
    if (c->following)
        kl__crash_record_clear(&c->followed);
    kl__free(c->value);
    kl__free(c->pod_ns);
    kl__free(c->pod);
    kl__free(c->container);
    kl__free(c->identity);
    kl__free(c->what);
    kl__free(c->subject);
    kl__free(c->pod_path);
    kl__free(c);
}
