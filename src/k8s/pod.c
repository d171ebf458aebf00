/* What an election reads of a v1 Pod (k8s/pod.h).
 *
 * The kubelet writes status.containerStatuses[]: per container, the current
 * instance (containerID, "containerd://<64 hex>"), its state (running with
 * startedAt, waiting, or terminated with the containerID of the instance
 * that ended) and lastState (the previous instance, terminated). Only the
 * kubelet writes a terminated state, and it writes it once the instance's
 * processes are gone; that is the evidence kl__pod_container_ended reads.
 * Nothing else here is evidence: a follower that cannot read a status keeps
 * the rule of lease expiry. */
#include "k8s/pod.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/common.h"
#include "k8s/codec.h"

/* A container status's place in messages: "status.containerStatuses[12]". */
#define WHERE_LEN 48

/* jansson gives NULL without a message when some allocations fail, so an
 * empty message means out of memory too (as k8s/codec.c). */
static int json_fail(const json_error_t *jerr)
{
    if (json_error_code(jerr) == json_error_out_of_memory || jerr->text[0] == '\0')
        return kl__error_set(K8SLEASE_ENOMEM, "Pod body: out of memory");
    return kl__error_set(K8SLEASE_EPROTOCOL, "Pod body: not valid JSON at line %d column %d: %s",
                         jerr->line, jerr->column, jerr->text);
}

/* An optional string member: absent or null gives "". */
static int opt_string(const json_t *obj, const char *key, const char *where, const char **out)
{
    json_t *v = json_object_get(obj, key);

    *out = "";
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return kl__error_set(K8SLEASE_EPROTOCOL, "%s%s%s: must be a string", where,
                             where[0] ? "." : "", key);
    *out = json_string_value(v);
    return 0;
}

/* An optional object member: absent or null gives NULL. */
static int opt_object(const json_t *obj, const char *key, const char *where, json_t **out)
{
    json_t *v = json_object_get(obj, key);

    *out = NULL;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_object(v))
        return kl__error_set(K8SLEASE_EPROTOCOL, "%s%s%s: must be an object", where,
                             where[0] ? "." : "", key);
    *out = v;
    return 0;
}

/* A "kind" present and other than Pod: the server answered with another
 * object (a Status, usually) where a Pod was expected. */
static int check_kind(const json_t *obj)
{
    const char *kind, *msg;
    int err;

    if ((err = opt_string(obj, "kind", "", &kind)) < 0)
        return err;
    if (!kind[0] || strcmp(kind, "Pod") == 0)
        return 0;
    if (strcmp(kind, "Status") == 0 && opt_string(obj, "message", "", &msg) == 0 && msg[0])
        return kl__error_set(K8SLEASE_EPROTOCOL, "expected a Pod, got a Status: %s", msg);
    return kl__error_set(K8SLEASE_EPROTOCOL, "expected a Pod, got a %.64s", kind);
}

/* An optional RFC 3339 time member: absent, null or "" give 0. */
static int opt_time(const json_t *obj, const char *key, const char *where, int64_t *out)
{
    const char *s;
    int err;

    *out = 0;
    if ((err = opt_string(obj, key, where, &s)) < 0 || !s[0])
        return err;
    if ((err = kl__microtime_parse(s, out)) < 0)
        return kl__error_wrap(err, "%s.%s", where, key);
    return 0;
}

/* state.terminated or lastState.terminated of the container at where: the
 * containerID of the instance that ended ("" when none is given) and when
 * it finished. */
static int terminated(const json_t *state, const char *where, const char *state_key, int *present,
                      const char **id, int64_t *finished_us)
{
    char at[WHERE_LEN + 32];
    json_t *term;
    int err;

    *id = "";
    if (!state)
        return 0;
    snprintf(at, sizeof(at), "%s.%s", where, state_key);
    if ((err = opt_object(state, "terminated", at, &term)) < 0 || !term)
        return err;
    if (present)
        *present = 1;
    snprintf(at, sizeof(at), "%s.%s.terminated", where, state_key);
    if ((err = opt_string(term, "containerID", at, id)) < 0)
        return err;
    return opt_time(term, "finishedAt", at, finished_us);
}

static int decode_container(const json_t *cs, size_t i, kl__pod_container *c)
{
    char where[WHERE_LEN], at[WHERE_LEN + 32];
    json_t *state, *last, *running, *waiting;
    int err;

    snprintf(where, sizeof(where), "status.containerStatuses[%zu]", i);
    if (!json_is_object(cs))
        return kl__error_set(K8SLEASE_EPROTOCOL, "%s: must be an object", where);
    if ((err = opt_string(cs, "name", where, &c->name)) < 0 ||
        (err = opt_string(cs, "containerID", where, &c->container_id)) < 0 ||
        (err = opt_object(cs, "state", where, &state)) < 0 ||
        (err = opt_object(cs, "lastState", where, &last)) < 0)
        return err;
    snprintf(at, sizeof(at), "%s.state", where);
    if (state && ((err = opt_object(state, "running", at, &running)) < 0 ||
                  (err = opt_object(state, "waiting", at, &waiting)) < 0))
        return err;
    if (state && running) {
        c->running = 1;
        snprintf(at, sizeof(at), "%s.state.running", where);
        if ((err = opt_time(running, "startedAt", at, &c->started_us)) < 0)
            return err;
    }
    c->waiting = state && waiting;
    if ((err = terminated(state, where, "state", &c->terminated, &c->terminated_id,
                          &c->terminated_finished_us)) < 0 ||
        (err = terminated(last, where, "lastState", NULL, &c->last_terminated_id,
                          &c->last_terminated_finished_us)) < 0)
        return err;
    return 0;
}

static int decode_pod(kl__pod *p)
{
    json_t *meta, *status, *list;
    int err;

    if ((err = check_kind(p->root)) < 0 || (err = opt_object(p->root, "metadata", "", &meta)) < 0)
        return err;
    if ((err = opt_string(meta, "name", "metadata", &p->name)) < 0)
        return err;
    if (!p->name[0])
        return kl__error_set(K8SLEASE_EPROTOCOL, "metadata.name missing");
    if ((err = opt_string(meta, "namespace", "metadata", &p->ns)) < 0 ||
        (err = opt_string(meta, "uid", "metadata", &p->uid)) < 0 ||
        (err = opt_string(meta, "resourceVersion", "metadata", &p->rv)) < 0 ||
        (err = opt_object(p->root, "status", "", &status)) < 0)
        return err;
    list = json_object_get(status, "containerStatuses");
    if (!list || json_is_null(list))
        return 0;
    if (!json_is_array(list))
        return kl__error_set(K8SLEASE_EPROTOCOL, "status.containerStatuses: must be an array");
    if (json_array_size(list) == 0)
        return 0;
    p->containers = kl__calloc(json_array_size(list), sizeof(*p->containers));
    if (!p->containers)
        return kl__error_set(K8SLEASE_ENOMEM, "Pod: out of memory");
    for (size_t i = 0; i < json_array_size(list); i++) {
        if ((err = decode_container(json_array_get(list, i), i, &p->containers[i])) < 0)
            return err;
        p->ncontainers++;
    }
    return 0;
}

int kl__pod_from_json(kl__pod **out, json_t *obj)
{
    kl__pod *p;
    int err;

    *out = NULL;
    if (!json_is_object(obj))
        return kl__error_set(K8SLEASE_EPROTOCOL, "Pod: not a JSON object");
    if (!(p = kl__calloc(1, sizeof(*p))))
        return kl__error_set(K8SLEASE_ENOMEM, "Pod: out of memory");
    p->root = json_incref(obj);
    p->ns = p->name = p->uid = p->rv = "";
    if ((err = decode_pod(p)) < 0) {
        /* One place names the object, so every field error says which Pod. */
        if (err == K8SLEASE_EPROTOCOL && p->name[0])
            kl__error_wrap(err, "Pod %s%s%s", p->ns, p->ns[0] ? "/" : "", p->name);
        else if (err == K8SLEASE_EPROTOCOL)
            kl__error_wrap(err, "Pod");
        kl__pod_free(p);
        return err;
    }
    *out = p;
    return 0;
}

int kl__pod_parse(kl__pod **out, const char *body, size_t len)
{
    json_error_t jerr;
    json_t *root;
    int err;

    *out = NULL;
    memset(&jerr, 0, sizeof(jerr));
    if (!(root = json_loadb(body, len, JSON_DECODE_ANY, &jerr)))
        return json_fail(&jerr);
    err = kl__pod_from_json(out, root);
    json_decref(root);
    return err;
}

void kl__pod_free(kl__pod *pod)
{
    if (!pod)
        return;
    kl__free(pod->containers);
    json_decref(pod->root);
    kl__free(pod);
}

static const kl__pod_container *find(const kl__pod *pod, const char *name)
{
    for (size_t i = 0; i < pod->ncontainers; i++)
        if (strcmp(pod->containers[i].name, name) == 0)
            return &pod->containers[i];
    return NULL;
}

int kl__pod_container_ended(const kl__pod *pod, const char *uid, const char *container,
                            const char *container_id)
{
    const kl__pod_container *c;

    if (!pod || !uid || !uid[0] || !container || !container[0] || !container_id ||
        !container_id[0] || strcmp(pod->uid, uid) != 0 || !(c = find(pod, container)))
        return 0;
    return strcmp(c->terminated_id, container_id) == 0 ||
           strcmp(c->last_terminated_id, container_id) == 0;
}

/*
 * What the startedAt rule does not catch: a container that restarted in
 * place, whose status still shows the previous instance running because the
 * kubelet has not written the new one yet (one update can take it from
 * "running, instance 1" to "running, instance 2, lastState terminated
 * instance 1"). Instance 1 started before this process too, so it passes.
 * The caller tells them apart afterwards: instance 1 finished before this
 * process started, so a report of it has a finishedAt before the time the
 * caller checked its instance (terminated_finished_us,
 * last_terminated_finished_us).
 */
int kl__pod_own_container(const kl__pod *pod, const char *container, int64_t process_start_us,
                          const kl__pod_container **c)
{
    const kl__pod_container *s;
    char t[KL_MICROTIME_BUFLEN], p[KL_MICROTIME_BUFLEN];

    *c = NULL;
    if (!container && pod->ncontainers > 1)
        return kl__error_set(K8SLEASE_EINVAL, "pod %s/%s: the pod has %zu containers: name one",
                             pod->ns, pod->name, pod->ncontainers);
    if (!container && pod->ncontainers == 0)
        return kl__error_set(K8SLEASE_ENOTFOUND, "pod %s/%s: no container status yet", pod->ns,
                             pod->name);
    s = container ? find(pod, container) : &pod->containers[0];
    if (!s)
        return kl__error_set(K8SLEASE_ENOTFOUND, "pod %s/%s: no status of container \"%.64s\" yet",
                             pod->ns, pod->name, container);
    if (!s->running)
        return kl__error_set(K8SLEASE_ENOTFOUND,
                             "pod %s/%s: container \"%.64s\" is not running (%s)", pod->ns,
                             pod->name, s->name,
                             s->waiting      ? "waiting"
                             : s->terminated ? "terminated"
                                             : "no state");
    if (!s->container_id[0])
        return kl__error_set(K8SLEASE_ENOTFOUND,
                             "pod %s/%s: container \"%.64s\" has no containerID yet", pod->ns,
                             pod->name, s->name);
    if (!s->started_us)
        return kl__error_set(K8SLEASE_ENOTFOUND,
                             "pod %s/%s: container \"%.64s\" is running without a startedAt",
                             pod->ns, pod->name, s->name);
    if (s->started_us > process_start_us)
        return kl__error_set(K8SLEASE_ENOTFOUND,
                             "pod %s/%s: container \"%.64s\" (%.80s) started at %s, after this "
                             "process (%s): the status is not this process's instance yet",
                             pod->ns, pod->name, s->name, s->container_id,
                             kl__microtime_format(s->started_us, t),
                             kl__microtime_format(process_start_us, p));
    *c = s;
    return 0;
}
