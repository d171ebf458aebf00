/* Fuzz target "pod" (fuzz/corpus/pod): Pod bodies, k8s/pod.h. See targets.h.
 *
 * Besides "no crash, no leak": a parsed Pod keeps the header's promises
 * (name set, no NULL string, one decoded status per element of
 * status.containerStatuses), kl__pod_container_ended agrees with a
 * reference that reads the JSON tree directly, and kl__pod_own_container
 * answers only with a running status that has a containerID and a
 * startedAt not after the given time. An error leaves nothing to free and
 * its message names the Pod. */
#include "targets.h"

#include <string.h>

#include <jansson.h>

#include "core/common.h"
#include "k8s/pod.h"

/* A string member of obj, "" when it is not one. */
static const char *str_of(const json_t *obj, const char *key)
{
    const char *s = json_string_value(json_object_get(obj, key));

    return s ? s : "";
}

/* The reference: the first status named container, read from the tree. */
static int ref_ended(const kl__pod *p, const char *uid, const char *container, const char *id)
{
    json_t *list = json_object_get(json_object_get(p->root, "status"), "containerStatuses");
    json_t *cs;
    size_t i;

    if (!uid[0] || !container[0] || !id[0] ||
        strcmp(str_of(json_object_get(p->root, "metadata"), "uid"), uid) != 0)
        return 0;
    json_array_foreach(list, i, cs)
    {
        json_t *state = json_object_get(cs, "state"), *last = json_object_get(cs, "lastState");

        if (strcmp(str_of(cs, "name"), container) != 0)
            continue;
        return strcmp(str_of(json_object_get(state, "terminated"), "containerID"), id) == 0 ||
               strcmp(str_of(json_object_get(last, "terminated"), "containerID"), id) == 0;
    }
    return 0;
}

static void check_container(const kl__pod_container *c)
{
    CHECK(c->name != NULL && c->container_id != NULL);
    CHECK(c->terminated_id != NULL && c->last_terminated_id != NULL);
    CHECK(c->running == 0 || c->running == 1);
    CHECK(c->waiting == 0 || c->waiting == 1);
    CHECK(c->terminated == 0 || c->terminated == 1);
    CHECK(c->running || c->started_us == 0);
    CHECK(c->terminated || (c->terminated_id[0] == '\0' && c->terminated_finished_us == 0));
}

static void check_own(const kl__pod *p, const char *container, int64_t start)
{
    const kl__pod_container *c = (const kl__pod_container *)&c;
    int err = kl__pod_own_container(p, container, start, &c);

    if (err == 0) {
        CHECK(c != NULL && c >= p->containers && c < p->containers + p->ncontainers);
        CHECK(c->running && c->container_id[0] && c->started_us != 0 && c->started_us <= start);
        CHECK(container ? strcmp(c->name, container) == 0 : p->ncontainers == 1);
        return;
    }
    CHECK(c == NULL);
    CHECK_MSG(err == K8SLEASE_ENOTFOUND || (err == K8SLEASE_EINVAL && !container),
              "own_container: %d", err);
    CHECK(err != K8SLEASE_EINVAL || p->ncontainers > 1);
}

int kl_fuzz_pod(const uint8_t *data, size_t size)
{
    kl__pod *p = (kl__pod *)&p, *again = NULL;
    const char *names[] = {"main", "", NULL};
    int err = kl__pod_parse(&p, (const char *)data, size);

    if (err < 0) {
        CHECK(p == NULL);
        CHECK_MSG(err == K8SLEASE_EPROTOCOL || err == K8SLEASE_ENOMEM, "parse: %d", err);
        CHECK_MSG(strncmp(kl__error_get(), "Pod", 3) == 0, "message: %s", kl__error_get());
        return 0;
    }
    CHECK(p != NULL && json_is_object(p->root));
    CHECK(p->name != NULL && p->name[0] != '\0');
    CHECK(p->ns != NULL && p->uid != NULL && p->rv != NULL);
    CHECK((p->ncontainers == 0) == (p->containers == NULL));
    CHECK(p->ncontainers == json_array_size(json_object_get(json_object_get(p->root, "status"),
                                                            "containerStatuses")));
    for (size_t i = 0; i < p->ncontainers; i++) {
        const kl__pod_container *c = &p->containers[i];

        check_container(c);
        /* Every (container, id) the Pod names, and a few it does not. */
        for (int k = 0; k < 3; k++) {
            const char *id = k == 0   ? c->terminated_id
                             : k == 1 ? c->last_terminated_id
                                      : c->container_id;

            CHECK(kl__pod_container_ended(p, p->uid, c->name, id) ==
                  ref_ended(p, p->uid, c->name, id));
            CHECK(!kl__pod_container_ended(p, "", c->name, id));
            CHECK(!kl__pod_container_ended(p, p->uid, c->name, ""));
        }
        check_own(p, c->name, c->started_us);
        check_own(p, c->name, INT64_MAX);
    }
    for (size_t k = 0; k < KL_ARRAY_LEN(names); k++) {
        check_own(p, names[k], INT64_MAX);
        if (names[k])
            CHECK(kl__pod_container_ended(p, p->uid, names[k], "containerd://x") ==
                  ref_ended(p, p->uid, names[k], "containerd://x"));
    }
    /* From the tree: the same Pod. */
    CHECK(kl__pod_from_json(&again, p->root) == 0);
    CHECK(again->root == p->root && again->ncontainers == p->ncontainers);
    CHECK(strcmp(again->name, p->name) == 0 && strcmp(again->uid, p->uid) == 0);
    kl__pod_free(again);
    kl__pod_free(p);
    return 0;
}
