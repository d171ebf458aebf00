/*
 * objects.h - the JSON shapes a real kube-apiserver produces: the resource
 * types (ts_res, ts_resdefs), canonical Lease and Pod objects (decode,
 * default, validate, re-encode in Go field order), Status bodies and
 * meta.k8s.io/v1 Tables for kubectl.
 *
 * Pure functions over jansson values; no locking, no I/O. The bottom of
 * the store layer: it includes no other header of the server, and the store
 * (store.h) builds on it.
 */
#ifndef TS_OBJECTS_H
#define TS_OBJECTS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

/* ---- resource types --------------------------------------------------- */

typedef enum ts_res {
    TS_LEASE = 0, /* coordination.k8s.io/v1 leases */
    TS_POD = 1,   /* v1 pods */
    TS_NS = 2,    /* v1 namespaces (cluster-scoped) */
    TS_LC = 3,    /* coordination.k8s.io/v1beta1 leasecandidates (--feature-gates) */
    TS_NRES
} ts_res;

/* What the API layer needs to know about a resource type. */
typedef struct ts_resdef {
    const char *plural;      /* "leases" */
    const char *singular;    /* "lease" */
    const char *group;       /* "coordination.k8s.io"; "" for core */
    const char *kind;        /* "Lease" */
    const char *list_kind;   /* "LeaseList" */
    const char *api_version; /* "coordination.k8s.io/v1" */
    const char *qualified;   /* "leases.coordination.k8s.io": Status messages */
} ts_resdef;

extern const ts_resdef ts_resdefs[TS_NRES];

/* metadata.<field> as a string, or NULL. */
const char *ts_meta_str(const json_t *obj, const char *field);

/* ---- Status (metav1.Status) ------------------------------------------- */

/*
 * A Failure Status in the apiserver's field order: kind, apiVersion,
 * metadata, status, message, reason, details, code. details is stolen and
 * may be NULL (omitted).
 */
json_t *ts_status_failure(unsigned code, const char *reason, const char *message, json_t *details);
/* details {name, group, kind, uid}; empty strings are omitted (omitempty). */
json_t *ts_status_details(const char *name, const char *group, const char *kind, const char *uid);
json_t *ts_status_not_found(ts_res res, const char *name);
json_t *ts_status_already_exists(ts_res res, const char *name);
/* 409 Conflict: 'Operation cannot be fulfilled on <qualified> "<name>": <why>'. */
json_t *ts_status_conflict(ts_res res, const char *name, const char *why);
/* 409 Conflict of a failed DELETE precondition: 'on <Kind>.<group> "<name>"', details.kind Kind. */
json_t *ts_status_conflict_kind(ts_res res, const char *name, const char *why);
json_t *ts_status_bad_request(const char *message);
/* The 200 body of a DELETE (200_delete.json). */
json_t *ts_status_deleted(ts_res res, const char *name, const char *uid);
/* The body of an injected error: InternalError, ServiceUnavailable, ... */
json_t *ts_status_for_code(unsigned code, unsigned retry_after);

/* ---- objects ---------------------------------------------------------- */

/* Server-owned metadata of the object being written. */
typedef struct ts_sysmeta {
    const char *ns;
    const char *name;
    const char *uid;
    const char *created; /* creationTimestamp */
    const char *deleted; /* deletionTimestamp, or NULL (a Namespace being deleted) */
} ts_sysmeta;

/*
 * Builds the canonical object the server would store from a client's body
 * written to the main resource: known fields only, in Go struct order,
 * MicroTimes normalised to UTC with 6 digits, system metadata from sys
 * (resourceVersion left "" for the store to stamp). For Pods, the status in
 * the body is decoded (its type errors count) but not kept: it comes from
 * old, or is {"phase":"Pending","qosClass":...} on create.
 *
 * On a type error (400 BadRequest) or a validation error (422 Invalid)
 * returns NULL and sets *code and *status.
 */
json_t *ts_object_build(ts_res res, const json_t *in, const ts_sysmeta *sys, const json_t *old,
                        unsigned *code, json_t **status);
/*
 * The same for a write to the status subresource of old (Pods only): the
 * status (canonical PodStatus) and the labels and annotations from the body,
 * the spec from old, validated as the apiserver's ValidatePodStatusUpdate.
 */
json_t *ts_object_build_status(ts_res res, const json_t *in, const ts_sysmeta *sys,
                               const json_t *old, unsigned *code, json_t **status);
/*
 * The decoder's error for a body of type res (encoding/json's words, without
 * the "X in version ... cannot be handled" prefix), malloc'ed; NULL if it
 * decodes. A PATCH reports it with ts_status_patch_invalid.
 */
char *ts_object_decode_error(ts_res res, const json_t *in);
/* 422 for a patched object that does not decode: ' "" is invalid: patch: Invalid value: ...'. */
json_t *ts_status_patch_invalid(const json_t *patched, const char *why);

/* 422 for a POST without metadata.name or generateName. */
json_t *ts_status_name_required(ts_res res);
/* Checks a name as a DNS-1123 subdomain; NULL if valid, else a 422 Status. */
json_t *ts_check_name(ts_res res, const char *name);

/*
 * Sets obj's metadata.managedFields (or removes them when no manager owns a
 * field) after an Update operation by manager: structured-merge-diff's
 * rules - fields the write added or changed move to manager, fields it
 * removed leave every manager, entries left empty go; old is the object
 * before the write (its managedFields are the starting point), NULL on
 * create. subresource: NULL for the main resource (which owns metadata and
 * spec), "status" for pods/NAME/status (metadata and status; its entries say
 * "subresource": "status"). Entries sorted as the apiserver sorts them. -1
 * on allocation failure.
 */
int ts_managed_fields_update(ts_res res, json_t *obj, const json_t *old, const char *manager,
                             const char *subresource, time_t now);

/* An Active Namespace, with its name label, created by manager at now. */
json_t *ts_namespace_new(const char *name, const char *manager, time_t now);

/* RFC 7386 JSON merge patch: returns the patched copy of target. */
json_t *ts_merge_patch(const json_t *target, const json_t *patch);

/* ---- versions (LeaseCandidates) --------------------------------------- */

/* A semantic version as github.com/blang/semver/v4 parses it (build metadata dropped). */
typedef struct ts_semver {
    uint64_t major, minor, patch;
    char pre[64]; /* prerelease, "" if none */
} ts_semver;

/* Strict semver (blang's Parse: no "v", three parts, no leading zeros). 0 or -1 (*v zeroed). */
int ts_semver_parse(const char *s, ts_semver *v);
/* -1, 0, 1 by semver precedence. */
int ts_semver_cmp(const ts_semver *a, const ts_semver *b);

/* ---- lists and tables ------------------------------------------------- */

/* A list item is the object without kind and apiVersion (as in 200_list.json). */
json_t *ts_list_item(const json_t *obj);

typedef enum ts_include {
    TS_INCLUDE_NONE,
    TS_INCLUDE_METADATA, /* the apiserver's default: PartialObjectMetadata */
    TS_INCLUDE_OBJECT
} ts_include;

/* True for the resources the server can render as Table rows. */
bool ts_table_supported(ts_res res);
/* An empty Table; column definitions only if with_columns. */
json_t *ts_table_new(ts_res res, bool with_columns);
int ts_table_add_row(json_t *table, ts_res res, const json_t *obj, ts_include inc, time_t now);

/* Kubernetes' HumanDuration ("5s", "3m20s", "5h", "3d4h"). */
void ts_human_duration(long long seconds, char out[32]);

#endif
