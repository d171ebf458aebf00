/* Planned handoff: candidates' objects and the choice of a successor; see
 * k8s/handoff.h. */
#include "k8s/handoff.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "k8s/codec.h"

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

/* A candidate that may lead next. */
static int eligible(const kl__handoff_cand *c, const char *leader, int64_t now_us)
{
    return c->identity && c->identity[0] && strcmp(c->identity, leader) != 0 && !c->terminating &&
           c->renew_us + c->duration_s * 1000000 > now_us;
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

char *kl__handoff_done_value(const char *from, const char *to, int64_t epoch)
{
    json_t *v = json_pack("{s:s, s:s, s:I}", "from", from, "to", to, "epoch", (json_int_t)epoch);
    char *text = v ? kl__json_dump(v) : NULL;

    json_decref(v);
    return text;
}
