/*
 * store.h - the object store: Leases, Pods, Namespaces and LeaseCandidates in a hash map keyed by
 * (resource, namespace, name), one global resourceVersion counter, and the
 * watch history as a bounded ring of change events.
 *
 * Built on objects.h: the resource types, and the default namespaces it
 * creates are canonical objects from there.
 *
 * Not thread-safe: the server calls everything here with its lock held.
 * Stored objects are immutable jansson values: an update replaces the
 * value, so a history event can keep a reference to the old one cheaply.
 */
#ifndef TS_STORE_H
#define TS_STORE_H

#include "objects.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum ts_evtype { TS_ADDED, TS_MODIFIED, TS_DELETED } ts_evtype;

const char *ts_evtype_name(ts_evtype t);

typedef struct ts_obj {
    struct ts_obj *next; /* hash chain */
    uint64_t hash;
    ts_res res;
    const char *ns, *name; /* borrowed from json's metadata */
    json_t *json;          /* canonical object; never modified once stored */
    uint64_t rv;
} ts_obj;

typedef struct ts_event {
    uint64_t rv;
    ts_evtype type;
    ts_res res;
    json_t *obj;  /* state after the change; for DELETED the last state, at rv */
    json_t *prev; /* state before (NULL for ADDED): label selectors need it */
    char *line;   /* cached '{"type":..,"object":..}\n' for plain watchers */
    size_t line_len;
} ts_event;

typedef struct ts_store {
    ts_obj **buckets;
    size_t nbuckets;
    size_t count[TS_NRES];
    uint64_t rv; /* last resourceVersion handed out */

    ts_event *ring; /* history, oldest at head */
    size_t ring_cap, ring_head, ring_len;
    uint64_t floor;     /* every change with rv > floor is in the ring */
    uint64_t compacted; /* highest rv dropped by an explicit compaction */

    /* Called after each change is recorded (the watch layer wakes streams). */
    void (*on_event)(void *ctx, const ts_event *ev);
    void *on_event_ctx;
} ts_store;

/* Starts with the namespaces every cluster has (ts_default_namespaces). */
int ts_store_init(ts_store *s, size_t history);
void ts_store_free(ts_store *s);
/*
 * Drops every object; history is compacted so old resourceVersions give 410.
 * The default namespaces are created again (with new uids and versions).
 */
void ts_store_clear(ts_store *s);
/* A wiped etcd: no objects, no history, and resourceVersions start again
 * from where a new store starts (lower than before). */
void ts_store_wipe(ts_store *s);

/* "default", "kube-node-lease", "kube-public", "kube-system"; NULL-terminated. */
extern const char *const ts_default_namespaces[];

ts_obj *ts_store_get(ts_store *s, ts_res res, const char *ns, const char *name);

/*
 * Stores obj (reference stolen) as the new state of its key: stamps
 * metadata.resourceVersion with a new rv, records ADDED or MODIFIED.
 * Returns the stored object, or NULL on allocation failure (obj released).
 */
ts_obj *ts_store_put(ts_store *s, ts_res res, json_t *obj);
/* Removes the object, recording DELETED. Returns -1 on allocation failure. */
int ts_store_delete(ts_store *s, ts_obj *o);

/* Drops history up to rv (0 = everything): older watches then get 410. */
void ts_store_compact(ts_store *s, uint64_t rv);

/* Index of the first event with rv > after, or ring_len if none. */
size_t ts_store_history_after(const ts_store *s, uint64_t after);
const ts_event *ts_store_history_at(const ts_store *s, size_t i);
/* Builds (once) and returns ev's plain watch line. */
const char *ts_event_line(ts_event *ev, size_t *len);

/* ---- selectors -------------------------------------------------------- */

typedef enum ts_selop {
    TS_SEL_EQ,     /* k=v, k==v */
    TS_SEL_NE,     /* k!=v */
    TS_SEL_IN,     /* k in (a,b) */
    TS_SEL_NOTIN,  /* k notin (a,b) */
    TS_SEL_EXISTS, /* k */
    TS_SEL_ABSENT  /* !k */
} ts_selop;

typedef struct ts_selreq {
    char *key;
    ts_selop op;
    char **vals;
    size_t nvals;
} ts_selreq;

typedef struct ts_selector {
    ts_selreq *reqs;
    size_t n;
} ts_selector;

/* Returns 0, or -1 with a malloc'ed message in *err (ENOMEM: *err NULL). */
int ts_label_selector_parse(const char *s, ts_selector *out, char **err);
/* Field selectors: metadata.name and metadata.namespace with =, ==, !=. */
int ts_field_selector_parse(const char *s, ts_selector *out, char **err);
void ts_selector_free(ts_selector *sel);

/* Which objects a list or watch wants. */
typedef struct ts_filter {
    ts_res res;
    char *ns; /* NULL: all namespaces */
    ts_selector fields, labels;
} ts_filter;

bool ts_filter_match(const ts_filter *f, ts_res res, const json_t *obj);
void ts_filter_free(ts_filter *f);

/*
 * Matching objects sorted by (namespace, name) - the order etcd's keys give
 * a real apiserver - starting after the key `after` ("ns/name", or NULL).
 * *out is malloc'ed (free it; the objects stay owned by the store).
 */
int ts_store_list(ts_store *s, const ts_filter *f, const char *after, ts_obj ***out, size_t *n);

/* The object's namespace key: metadata.namespace, "" for Namespaces. */
const char *ts_obj_ns(ts_res res, const json_t *obj);

#endif
