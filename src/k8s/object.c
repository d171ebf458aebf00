/* What an informer follows, decoded: a Lease or a Pod from a list item, a
 * GET's answer or a watch line, and resourceVersion order (k8s/object.h). */
#include "k8s/object.h"

#include <string.h>

#include <jansson.h>

int kl__object_from_json(int pods, json_t *j, kl__object *o)
{
    int err;

    memset(o, 0, sizeof(*o));
    if (pods) {
        if ((err = kl__pod_from_json(&o->pod, j)) < 0)
            return err;
        o->name = o->pod->name;
        o->rv = o->pod->rv;
    } else {
        if ((err = kl__lease_from_json(&o->lease, j)) < 0)
            return err;
        o->name = o->lease->name;
        o->rv = o->lease->rv;
    }
    return 0;
}

int kl__object_parse(int pods, const char *body, size_t len, kl__object *o)
{
    int err;

    memset(o, 0, sizeof(*o));
    if (pods) {
        if ((err = kl__pod_parse(&o->pod, body, len)) < 0)
            return err;
        o->name = o->pod->name;
        o->rv = o->pod->rv;
    } else {
        if ((err = kl__lease_parse(&o->lease, body, len)) < 0)
            return err;
        o->name = o->lease->name;
        o->rv = o->lease->rv;
    }
    return 0;
}

void kl__object_clear(kl__object *o)
{
    kl__lease_free(o->lease);
    kl__pod_free(o->pod);
    memset(o, 0, sizeof(*o));
}

void kl__object_event_clear(kl__object_event *ev)
{
    kl__object_clear(&ev->obj);
    kl__free(ev->bookmark_rv);
    kl__status_clear(&ev->status);
    memset(ev, 0, sizeof(*ev));
}

static int pod_event_decode(kl__object_event *ev, json_t *root)
{
    const char *type = json_string_value(json_object_get(root, "type"));
    json_t *obj = json_object_get(root, "object");
    const char *rv;
    int err;

    if (!type)
        return kl__error_set(K8SLEASE_EPROTOCOL, "watch event: type missing or not a string");
    if (kl__watch_type_parse(type, &ev->type) < 0)
        return kl__error_set(K8SLEASE_EPROTOCOL, "watch event: unknown type \"%.64s\"", type);
    if (!json_is_object(obj))
        return kl__error_set(K8SLEASE_EPROTOCOL, "watch event: %s: object missing or not an object",
                             type);
    switch (ev->type) {
    case KL_WATCH_BOOKMARK:
        /* A bookmark carries only metadata.resourceVersion, no name. */
        rv =
            json_string_value(json_object_get(json_object_get(obj, "metadata"), "resourceVersion"));
        if (!rv)
            return kl__error_set(K8SLEASE_EPROTOCOL,
                                 "watch event: BOOKMARK: object.metadata.resourceVersion missing");
        if (!(ev->bookmark_rv = kl__strdup(rv)))
            return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
        return 0;
    case KL_WATCH_ERROR:
        return kl__status_from_json(&ev->status, obj);
    default:
        if ((err = kl__pod_from_json(&ev->obj.pod, obj)) < 0)
            return kl__error_wrap(err, "watch event: %s", type);
        ev->obj.name = ev->obj.pod->name;
        ev->obj.rv = ev->obj.pod->rv;
        return 0;
    }
}

int kl__object_event_parse(int pods, const char *line, size_t len, kl__object_event *ev)
{
    kl__watch_event lev;
    json_error_t jerr;
    json_t *root;
    int err;

    memset(ev, 0, sizeof(*ev));
    if (!pods) {
        if ((err = kl__watch_event_parse(&lev, line, len)) < 0)
            return err;
        /* The Lease event's parts move over as they are. */
        ev->type = lev.type;
        ev->obj.lease = lev.lease;
        if (lev.lease) {
            ev->obj.name = lev.lease->name;
            ev->obj.rv = lev.lease->rv;
        }
        ev->bookmark_rv = lev.bookmark_rv;
        ev->status = lev.status;
        return 0;
    }
    memset(&jerr, 0, sizeof(jerr));
    if (!(root = json_loadb(line, len, JSON_DECODE_ANY, &jerr))) {
        if (json_error_code(&jerr) == json_error_out_of_memory || !jerr.text[0])
            return kl__error_set(K8SLEASE_ENOMEM, "watch event: out of memory");
        return kl__error_set(K8SLEASE_EPROTOCOL, "watch event: not valid JSON: %s", jerr.text);
    }
    err = json_is_object(root) ? pod_event_decode(ev, root)
                               : kl__error_set(K8SLEASE_EPROTOCOL, "watch event: not an object");
    json_decref(root);
    if (err < 0)
        kl__object_event_clear(ev);
    return err;
}

/* resourceVersion order: see k8s/object.h. */

int kl__rv_parse(const char *rv, uint64_t *out)
{
    uint64_t v = 0;

    if (!rv || !*rv)
        return 0;
    for (; *rv; rv++) {
        unsigned d = (unsigned)(*rv - '0');

        if (d > 9 || v > (UINT64_MAX - d) / 10)
            return 0;
        v = v * 10 + d;
    }
    *out = v;
    return 1;
}

void kl__rv_gate_set(kl__rv_gate *g, const char *rv)
{
    g->known = kl__rv_parse(rv, &g->last);
}

int kl__rv_gate_pass(kl__rv_gate *g, const char *rv)
{
    uint64_t v;

    if (kl__rv_parse(rv, &v) && g->known && v <= g->last)
        return 0;
    kl__rv_gate_set(g, rv);
    return 1;
}

int kl__rv_gate_older(const kl__rv_gate *g, const char *rv)
{
    uint64_t v;

    return kl__rv_parse(rv, &v) && g->known && v < g->last;
}
