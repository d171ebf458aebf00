/* Crash failover: the record in the Lease, the leader's own container
 * instance, and a follower's watch of the holder's Pod. k8s/crash.h says
 * what it is for and why the rules are safe. */
#include "k8s/crash.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/client.h"
#include "k8s/client.h"
#include "core/clock.h"
#include "k8s/api.h"
#include "k8s/informer.h"

/* A status must show our instance started no later than this process
 * (plus this much: startedAt has whole seconds, our start time from /proc
 * a boot time in whole seconds). */
#define START_SLACK_US INT64_C(1100000)

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
        if (c->terminated_id[0] && kl__crash_same_instance(r->container_id, c->terminated_id) &&
            c->terminated_finished_us / 1000000 > after_s)
            return 1;
        if (c->last_terminated_id[0] &&
            kl__crash_same_instance(r->container_id, c->last_terminated_id) &&
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

    /* What the kernel says of our instance (kl__crash_new): its
     * containerID ("" if /proc/self/cgroup names none), the runtime's prefix
     * of it ("containerd://", or "" when the path does not say), our Pod's
     * UID as the path has it, and our container's name from the mount of
     * /dev/termination-log ("" if none). */
    kl__proc_instance proc;
    int64_t start_us; /* this process's start (wall µs), 0 if unknown */

    /* Loop thread only. */
    kl__sub *self_sub;     /* our own Pod, until the record is the kubelet's */
    kl__crash_record self; /* our instance, once known */
    int self_known;
    int self_exact;    /* self.container_id is the kubelet's, prefix and all */
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

/* ---- this process's instance, from the kernel ----------------------------- */

static int is_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

/* A cgroup path's last two components: the container and its Pod, as the
 * kubelet names them. cgroupfs: ".../pod<UID>/<ID>"; systemd:
 * ".../kubepods-<qos>-pod<UID with _>.slice/<runtime>-<ID>.scope". */
static int cgroup_instance(const char *path, kl__proc_instance *out)
{
    static const struct {
        const char *scope, *prefix;
    } runtimes[] = {
        {"cri-containerd-", "containerd://"}, {"crio-", "cri-o://"}, {"docker-", "docker://"}};
    const char *comp = strrchr(path, '/'), *id, *parent, *end, *uid;
    size_t n, uid_len;

    if (!comp || comp == path)
        return 0;
    comp++;
    id = comp;
    n = strlen(comp);
    out->runtime[0] = '\0';
    if (n > 6 && strcmp(comp + n - 6, ".scope") == 0) {
        size_t i;

        for (i = 0; i < sizeof(runtimes) / sizeof(runtimes[0]); i++)
            if (strncmp(comp, runtimes[i].scope, strlen(runtimes[i].scope)) == 0)
                break;
        if (i == sizeof(runtimes) / sizeof(runtimes[0]))
            return 0;
        snprintf(out->runtime, sizeof(out->runtime), "%s", runtimes[i].prefix);
        id = comp + strlen(runtimes[i].scope);
        n = strlen(id) - 6;
    }
    if (n != 64 || !is_hex(id, 64))
        return 0;
    /* The Pod's component, just before: "pod<UID>" or "...-pod<UID>.slice". */
    for (parent = comp - 1; parent > path && parent[-1] != '/'; parent--)
        ;
    end = comp - 1;
    if (end - parent > 6 && strncmp(end - 6, ".slice", 6) == 0)
        end -= 6;
    uid_len = 36;
    if (end - parent < (ptrdiff_t)uid_len + 3 || strncmp(end - uid_len - 3, "pod", 3) != 0)
        return 0;
    uid = end - uid_len;
    for (size_t i = 0; i < uid_len; i++)
        out->pod_uid[i] = uid[i] == '_' ? '-' : uid[i];
    out->pod_uid[uid_len] = '\0';
    memcpy(out->id, id, 64);
    out->id[64] = '\0';
    return 1;
}

/* The container's name in the kubelet's path of /dev/termination-log:
 * ".../pods/<UID>/containers/<NAME>/<random>". */
static void termination_log_container(FILE *f, kl__proc_instance *out)
{
    char line[4096];

    while (fgets(line, sizeof(line), f)) {
        char root[2048], mnt[256], *c, *end;

        /* mountinfo: ID PARENT MAJ:MIN ROOT MOUNTPOINT ... */
        if (sscanf(line, "%*s %*s %*s %2047s %255s", root, mnt) != 2 ||
            strcmp(mnt, "/dev/termination-log") != 0 || !(c = strstr(root, "/containers/")))
            continue;
        c += strlen("/containers/");
        if (!(end = strchr(c, '/')) || (size_t)(end - c) >= sizeof(out->container))
            continue;
        memcpy(out->container, c, (size_t)(end - c));
        out->container[end - c] = '\0';
        return;
    }
}

void kl__proc_instance_read(kl__proc_instance *out, FILE *cgroup, FILE *mountinfo)
{
    char line[4096];

    memset(out, 0, sizeof(*out));
    while (cgroup && fgets(line, sizeof(line), cgroup)) {
        char *path = strchr(line, ':');

        /* HIERARCHY:CONTROLLERS:PATH */
        if (!path || !(path = strchr(path + 1, ':')))
            continue;
        path[strcspn(path, "\n")] = '\0';
        if (cgroup_instance(path + 1, out))
            break;
        memset(out, 0, sizeof(*out));
    }
    if (mountinfo)
        termination_log_container(mountinfo, out);
}

static void read_proc_instance(kl__proc_instance *out)
{
    FILE *cg = fopen("/proc/self/cgroup", "re"), *mi = fopen("/proc/self/mountinfo", "re");

    kl__proc_instance_read(out, cg, mi);
    if (cg)
        fclose(cg);
    if (mi)
        fclose(mi);
}

int kl__crash_same_instance(const char *recorded, const char *reported)
{
    const char *id;

    if (strcmp(recorded, reported) == 0)
        return 1;
    /* A record made from the kernel's view names the ID without the
     * runtime's prefix when the cgroup path does not say it. */
    return !strstr(recorded, "://") && (id = strstr(reported, "://")) &&
           strcmp(id + 3, recorded) == 0;
}

static int same_either(const char *a, const char *b)
{
    return kl__crash_same_instance(a, b) || kl__crash_same_instance(b, a);
}

int kl__crash_is_predecessor(const kl__crash_record *r, const kl__lease_spec *spec,
                             const char *identity, const char *own_id, int64_t start_us)
{
    if (!spec->holder || strcmp(spec->holder, identity) != 0 || strcmp(r->holder, identity) != 0 ||
        r->epoch != spec->transitions)
        return 0;
    if (own_id && own_id[0])
        return !same_either(r->container_id, own_id);
    /* Our instance not known yet: a record verified before this process
     * started (whole seconds) is an earlier process's. */
    return start_us > 0 && r->verified_us / 1000000 < start_us / 1000000;
}

int kl__crash_predecessor(const kl__crash *c, const kl__lease *lease)
{
    kl__crash_record r;
    const char *own = c->self_known ? c->self.container_id : c->proc.id;
    int is;

    if (!lease->spec.holder || strcmp(lease->spec.holder, c->identity) != 0 ||
        kl__crash_record_of_lease(lease, &r) < 0)
        return 0;
    is = kl__crash_is_predecessor(&r, &lease->spec, c->identity, own, c->start_us);
    kl__crash_record_clear(&r);
    return is;
}

/* ---- the elector's side: our instance ----------------------------------------- */

static void give_up_self(kl__crash *c, const char *why)
{
    c->self_given_up = 1;
    kl__sub_stop(c->self_sub);
    c->self_sub = NULL;
    kl__log_at(&c->client->log, K8SLEASE_LOG_WARN, &c->about,
               "crash failover: %s; this process's crash is found by the Lease's expiry "
               "only",
               why);
}

/* Our container's name for a record from the kernel's view: the
 * configured one, else the one /dev/termination-log's mount names when the
 * Pod has it, else the Pod's only one. NULL when none is sure. */
static const char *kernel_view_container(const kl__crash *c, const kl__pod *pod)
{
    json_t *spec = json_object_get(json_object_get(pod->root, "spec"), "containers"), *v;
    size_t i;

    if (c->container)
        return c->container;
    if (!json_is_array(spec))
        return NULL;
    json_array_foreach(spec, i, v)
    {
        const char *name = json_string_value(json_object_get(v, "name"));

        if (name && c->proc.container[0] && strcmp(name, c->proc.container) == 0)
            return name;
    }
    v = json_array_get(spec, 0);
    return json_array_size(spec) == 1 ? json_string_value(json_object_get(v, "name")) : NULL;
}

static int set_self(kl__crash *c, const kl__pod *pod, const char *container, const char *id)
{
    kl__crash_record r = {0};

    r.holder = kl__strdup(c->identity);
    r.pod_ns = kl__strdup(c->pod_ns);
    r.pod = kl__strdup(c->pod);
    r.pod_uid = kl__strdup(pod->uid);
    r.container = kl__strdup(container);
    r.container_id = kl__strdup(id);
    /* A record being made exact keeps its time: the instance ran then. */
    r.verified_us = c->self_known ? c->self.verified_us : kl__clock_wall_us();
    if (!r.holder || !r.pod_ns || !r.pod || !r.pod_uid || !r.container || !r.container_id) {
        kl__crash_record_clear(&r);
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    }
    kl__crash_record_clear(&c->self);
    c->self = r;
    kl__free(c->value); /* encoded again at the next write */
    c->value = NULL;
    return 0;
}

/* A state of our Pod: our instance as the kubelet reports it (exact), or,
 * until it does, as the kernel shows it, once the Pod's UID agrees. */
static void judge_self(kl__crash *c, const kl__pod *pod)
{
    const kl__pod_container *mine = NULL;
    int was_known = c->self_known, err;
    char id[sizeof(c->proc.runtime) + sizeof(c->proc.id)];

    err = kl__pod_own_container(pod,
                                c->container           ? c->container
                                : c->proc.container[0] ? c->proc.container
                                                       : NULL,
                                kl__process_start_us() + START_SLACK_US, &mine);
    if (err == 0 && c->proc.id[0] && !kl__crash_same_instance(c->proc.id, mine->container_id)) {
        /* The status shows an instance that is not the kernel's: not
         * ours (yet), whatever its start time says. */
        err = K8SLEASE_ENOTFOUND;
    }
    if (err == 0) {
        if (set_self(c, pod, mine->name, mine->container_id) < 0)
            return; /* out of memory: the next state of the Pod tries again */
        c->self_known = c->self_exact = 1;
        kl__sub_stop(c->self_sub);
        c->self_sub = NULL;
        kl__log_at(&c->client->log, K8SLEASE_LOG_INFO, &c->about,
                   "crash failover: this process runs in container %s (%s) of pod %s/%s",
                   c->self.container, c->self.container_id, c->pod_ns, c->pod);
    } else if (err == K8SLEASE_EINVAL) {
        give_up_self(c, kl__error_get());
        return;
    } else if (!c->self_known && c->proc.id[0] && strcmp(c->proc.pod_uid, pod->uid) == 0) {
        const char *container = kernel_view_container(c, pod);

        snprintf(id, sizeof(id), "%s%s", c->proc.runtime, c->proc.id);
        if (!container || set_self(c, pod, container, id) < 0)
            return;
        c->self_known = 1;
        c->self_exact = c->proc.runtime[0] != '\0';
        if (c->self_exact) {
            kl__sub_stop(c->self_sub);
            c->self_sub = NULL;
        }
        kl__log_at(&c->client->log, K8SLEASE_LOG_INFO, &c->about,
                   "crash failover: this process runs in container %s (%s) of pod %s/%s (its "
                   "cgroup; the kubelet has not reported it running yet)",
                   c->self.container, c->self.container_id, c->pod_ns, c->pod);
    } else {
        kl__log_at(&c->client->log, K8SLEASE_LOG_DEBUG, &c->about,
                   "crash failover: %s; waiting for the kubelet's report", kl__error_get());
        return;
    }
    if (!was_known && c->cfg.known)
        c->cfg.known(c->cfg.arg);
}

static void on_self_pod(const kl__sub_event *ev, void *arg)
{
    kl__crash *c = arg;
    char why[300];

    if (c->stopped || c->self_exact || c->self_given_up)
        return;
    if (ev->type == KL_SUB_HEALTH) {
        if (ev->forbidden) {
            snprintf(why, sizeof(why),
                     "cannot read pod %s/%s: forbidden (RBAC: get and watch on pods)", c->pod_ns,
                     c->pod);
            give_up_self(c, why);
        }
        return;
    }
    if (ev->type == KL_SUB_ABSENT) {
        snprintf(why, sizeof(why), "pod %s/%s: not found (is POD_NAME this process's Pod?)",
                 c->pod_ns, c->pod);
        give_up_self(c, why);
        return;
    }
    judge_self(c, ev->pod);
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
    if (!c->pod_ns || !c->pod || (cfg->container && !c->container) || !c->identity || !c->what ||
        !c->subject) {
        kl__crash_free(c);
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    }
    read_proc_instance(&c->proc);
    c->start_us = kl__process_start_us();
    *out = c;
    return 0;
}

void kl__crash_start(kl__crash *c)
{
    if (c->stopped || c->self_sub || c->self_known || c->self_given_up)
        return;
    if (c->proc.id[0])
        kl__log_at(&c->client->log, K8SLEASE_LOG_DEBUG, &c->about,
                   "crash failover: the cgroup names container %s%s of pod UID %s", c->proc.runtime,
                   c->proc.id, c->proc.pod_uid);
    /* A watch of our Pod (get and watch, as for a followed holder's): the
     * kubelet's report of our instance reaches us as it is written. */
    c->self_sub = kl__sub_start(kl__k8s_of(c->client)->pod_informer, c->pod_ns, c->pod,
                                c->cfg.retry_period_ns, on_self_pod, c);
    if (!c->self_sub)
        give_up_self(c, kl__error_get());
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
    kl__sub_stop(c->self_sub);
    c->self_sub = NULL;
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
    kl__free(c);
}
