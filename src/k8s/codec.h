/* Lease JSON codec (coordination.k8s.io/v1), MicroTime, Status objects.
 *
 * A kl__lease keeps the whole object it was parsed from, so an update sends
 * back every field we do not own (labels, annotations, strategy,
 * preferredHolder, managedFields, ...) untouched. */
#ifndef KL_LEASE_H
#define KL_LEASE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "core/text.h" /* kl__line_splitter frames watch streams */

/* The fields of LeaseSpec an election reads and writes. Times are wall-clock
 * µs since the Unix epoch; 0 means "absent". holder NULL means absent/null. */
typedef struct kl__lease_spec {
    const char *holder;
    int64_t duration_s;
    int64_t acquire_us;
    int64_t renew_us;
    int64_t transitions;
} kl__lease_spec;

/* The annotation crash failover writes (k8s/crash.h); the codec reads it. */
#define KL_LEASE_HOLDER_CONTAINER "k8slease.io/holder-container"

/* A Lease read from a body or a watch event. Most are decoded by the
 * scanner (k8s/scan.h) and keep their JSON text, with no tree: root is
 * built only when something needs it (kl__lease_root). Those decoded from
 * a tree (kl__lease_from_json) have root and no text. */
typedef struct kl__lease {
    json_t *root;        /* the whole object, or NULL until kl__lease_root (owned) */
    char *text;          /* the whole object's JSON text, NUL-terminated, or NULL (owned) */
    size_t text_len;     /* its length */
    const char *ns;      /* metadata.namespace, "" if absent (borrowed, as all below) */
    const char *name;    /* metadata.name */
    const char *rv;      /* metadata.resourceVersion, "" if absent */
    const char *uid;     /* metadata.uid, "" if absent */
    kl__lease_spec spec; /* spec.holder borrowed */
    /* Coordinated leader election (read only: updates keep them as they
     * are). "" when absent. */
    const char *preferred_holder; /* spec.preferredHolder */
    const char *strategy;         /* spec.strategy */
    /* metadata.annotations[KL_LEASE_HOLDER_CONTAINER]: NULL when absent or
     * not a string; holder_container_bad is 1 in the second case. */
    const char *holder_container;
    int holder_container_bad;
} kl__lease;

/* Parse a Lease from a response body: the scanner first, and when it
 * declines, jansson. The Lease keeps a copy of the text either way (but
 * for a body with a NUL byte, which jansson can take: then its tree).
 * Errors (K8SLEASE_EPROTOCOL with a message naming the field): not JSON,
 * not an object, kind present and not "Lease", metadata.name missing, a
 * spec field of the wrong type, a bad MicroTime, negative leaseTransitions
 * or leaseDurationSeconds; K8SLEASE_ENOMEM. Missing or null spec fields
 * are "absent". */
int kl__lease_parse(kl__lease **out, const char *body, size_t len);
/* The two paths of kl__lease_parse, for the tests that compare them.
 * kl__lease_scan: 0 with *out set, 1 when the scanner declines (nothing
 * set, no message), K8SLEASE_ENOMEM. kl__lease_parse_json: jansson only,
 * returns as kl__lease_parse. */
int kl__lease_scan(kl__lease **out, const char *body, size_t len);
int kl__lease_parse_json(kl__lease **out, const char *body, size_t len);
/* Same from a JSON object (e.g. an item of a list); takes a new reference,
 * does not steal. No text. */
int kl__lease_from_json(kl__lease **out, json_t *obj);
void kl__lease_free(kl__lease *lease);
/* The tree of the Lease, built from its text on the first call and kept.
 * NULL with the error set on ENOMEM (or when the text was taken). */
json_t *kl__lease_root(kl__lease *lease);
/* The Lease's JSON text for the caller (kl__free): a copy of its text, or
 * the dump of its tree when it has none. NULL on ENOMEM. */
char *kl__lease_text_dup(const kl__lease *lease);
/* The same, but moves the text out instead of copying it: afterwards the
 * Lease's fields are still good, its text and (unless it had one) tree are
 * not. */
char *kl__lease_text_take(kl__lease *lease);

/* Body of a POST creating ns/name with the given spec (holder NULL: written
 * as ""). Returns a malloc'ed NUL-terminated string (kl__free) or NULL on
 * ENOMEM. Zero times / duration are omitted. */
char *kl__lease_encode_create(const char *ns, const char *name, const kl__lease_spec *spec);
/* Body of a PUT: base (its tree, or its text) with the five spec fields replaced by spec
 * (holder NULL written as ""; acquire/renew 0 written as null... never: the
 * elector always sets them) and everything else, including
 * metadata.resourceVersion, kept. NULL on ENOMEM. */
char *kl__lease_encode_update(const kl__lease *base, const kl__lease_spec *spec);
/* The same, writing into kl__lease_root(base) instead of a copy of it (the
 * renewal's slow path, which parsed base for this alone): afterwards base's
 * fields may dangle, so base is only good for kl__lease_free. */
char *kl__lease_encode_update_in_place(kl__lease *base, const kl__lease_spec *spec);
/* The body kl__lease_encode_update would give for the Lease whose JSON text
 * is base, by copying the text around a new spec instead of parsing it
 * (the renewal path). 0 with *out set (kl__free); 1 when it declines the
 * text (see codec.c: take the jansson path); K8SLEASE_ENOMEM. */
int kl__lease_splice_update(const char *base, size_t len, const kl__lease_spec *spec, char **out);

/* Compact JSON text of root, keys in their order, through kl__buf so that
 * it is freed with kl__free whatever allocator jansson was given (the
 * application may have set its own). NULL on ENOMEM. */
char *kl__json_dump(const json_t *root);

/* MicroTime: format as "YYYY-MM-DDTHH:MM:SS.uuuuuuZ" (UTC, 6 digits) into
 * buf (at least 32 bytes); returns buf. */
#define KL_MICROTIME_BUFLEN 32
char *kl__microtime_format(int64_t us, char *buf);
/* Parse RFC 3339: any number of fraction digits (truncated to µs), "Z" or
 * a +hh:mm / -hh:mm offset, also no fraction ("2006-01-02T15:04:05Z").
 * Returns 0 or K8SLEASE_EPROTOCOL. */
int kl__microtime_parse(const char *s, int64_t *us);

/* A metav1.Status decoded from an error body. */
typedef struct kl__status {
    int code;      /* "code", 0 when absent */
    char *reason;  /* "reason", "" when absent (owned) */
    char *message; /* "message", "" when absent (owned) */
} kl__status;
/* Returns 0 when body is a Status object, K8SLEASE_EPROTOCOL otherwise
 * (out zeroed in that case; nothing to free). */
int kl__status_parse(kl__status *out, const char *body, size_t len);
int kl__status_from_json(kl__status *out, json_t *obj);
void kl__status_clear(kl__status *st);

/* Watch event, one JSON object per line. */
typedef enum kl__watch_type {
    KL_WATCH_ADDED,
    KL_WATCH_MODIFIED,
    KL_WATCH_DELETED,
    KL_WATCH_BOOKMARK,
    KL_WATCH_ERROR
} kl__watch_type;

typedef struct kl__watch_event {
    kl__watch_type type;
    kl__lease *lease;  /* ADDED/MODIFIED/DELETED (owned) */
    char *bookmark_rv; /* BOOKMARK: metadata.resourceVersion (owned) */
    kl__status status; /* ERROR (owned) */
} kl__watch_event;

/* A watch event's "type" ("ADDED", ...): 0 with *out set, -1 if unknown. */
int kl__watch_type_parse(const char *name, kl__watch_type *out);
/* Decode one line of a watch stream: the scanner first (an ADDED, MODIFIED
 * or DELETED Lease then has its text, not a tree), and when it declines,
 * jansson. K8SLEASE_EPROTOCOL on anything else; K8SLEASE_ENOMEM. */
int kl__watch_event_parse(kl__watch_event *out, const char *line, size_t len);
/* Its two paths, as for kl__lease_parse: the scanner (0, 1 when it
 * declines, K8SLEASE_ENOMEM) and jansson. */
int kl__watch_event_scan(kl__watch_event *out, const char *line, size_t len);
int kl__watch_event_parse_json(kl__watch_event *out, const char *line, size_t len);
void kl__watch_event_clear(kl__watch_event *ev);

#endif
