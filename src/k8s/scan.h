/* A strict scanner of Lease JSON text: reads what the election reads from a
 * Lease (or a watch event of one) without building a jansson tree.
 *
 * It accepts a text only when it is sure jansson (json_loadb with
 * JSON_DECODE_ANY, as k8s/codec.c calls it) would accept the whole text and
 * give the same values for every member it reports; otherwise it declines
 * and the caller takes the jansson path. It declines, among others: any
 * text that is not JSON, a real number, an integer of more than 18 digits,
 * \u0000, nesting deeper than 64, an escape in a key of an object whose
 * members it reads, and a member it reads given twice. It never allocates
 * and sets no error message. */
#ifndef KL_K8S_SCAN_H
#define KL_K8S_SCAN_H

#include <stddef.h>
#include <stdint.h>

/* What a member is, as far as the election cares. */
typedef enum kl__scan_type {
    KL_SCAN_ABSENT = 0, /* no such member (or its parent is not an object) */
    KL_SCAN_NULL,       /* null */
    KL_SCAN_STRING,     /* a string */
    KL_SCAN_INT,        /* an integer of at most 18 digits */
    KL_SCAN_OBJECT,     /* an object */
    KL_SCAN_OTHER       /* true, false or an array */
} kl__scan_type;

typedef struct kl__scan_val {
    kl__scan_type type;
    const char *p; /* STRING: after the opening quote; OBJECT: at its '{' */
    size_t len;    /* STRING: bytes before the closing quote; OBJECT: through its '}' */
    int esc;       /* STRING: has an escape (decode with kl__scan_string) */
    int64_t n;     /* INT: the value */
} kl__scan_val;

/* The members the scanner reports, by path. */
enum {
    KL_SCAN_TYPE,             /* event: type */
    KL_SCAN_OBJ,              /* event: object; a Lease: the whole object */
    KL_SCAN_KIND,             /* kind */
    KL_SCAN_METADATA,         /* metadata */
    KL_SCAN_SPEC,             /* spec */
    KL_SCAN_NAME,             /* metadata.name */
    KL_SCAN_NAMESPACE,        /* metadata.namespace */
    KL_SCAN_RV,               /* metadata.resourceVersion */
    KL_SCAN_UID,              /* metadata.uid */
    KL_SCAN_ANNOTATIONS,      /* metadata.annotations */
    KL_SCAN_HOLDER_CONTAINER, /* metadata.annotations[KL_LEASE_HOLDER_CONTAINER] */
    KL_SCAN_HOLDER,           /* spec.holderIdentity */
    KL_SCAN_DURATION,         /* spec.leaseDurationSeconds */
    KL_SCAN_ACQUIRE,          /* spec.acquireTime */
    KL_SCAN_RENEW,            /* spec.renewTime */
    KL_SCAN_TRANSITIONS,      /* spec.leaseTransitions */
    KL_SCAN_PREFERRED,        /* spec.preferredHolder */
    KL_SCAN_STRATEGY,         /* spec.strategy */
    KL_SCAN_N
};

typedef struct kl__scan {
    kl__scan_val v[KL_SCAN_N];
} kl__scan;

/* text is a Lease object (any object: the caller judges the members): 0
 * with out filled (members point into text), -1 to decline. */
int kl__scan_lease(kl__scan *out, const char *text, size_t len);
/* line is a watch event {"type": ..., "object": {...}}, the object read as
 * a Lease: 0 or -1 as above. */
int kl__scan_watch_event(kl__scan *out, const char *line, size_t len);
/* The string s decoded into dst, which has room for s->len + 1 bytes (a
 * decoded string is never longer), NUL-terminated; returns its length. */
size_t kl__scan_string(const kl__scan_val *s, char *dst);

#endif
