/* The strict Lease scanner (k8s/scan.h).
 *
 * A renewal's answer and each watch event used to be decoded into a jansson
 * tree only for a dozen members: about a quarter of a renewal's CPU, in
 * json_loadb and its malloc/free. This reads the text once, checking it is
 * JSON exactly as jansson 2.14's load.c does (its lexer's rules are quoted
 * where they matter), and records where the members of a few objects are:
 * the Lease, its metadata, annotations and spec, and a watch event. Members
 * of every other object are checked and skipped.
 *
 * What jansson does that this does not repeat is declined, never guessed:
 * reals (strtod's overflow), integers near the int64 limits (strtoll's),
 * \u0000 (rejected without JSON_ALLOW_NUL), depth near its limit (2048),
 * and the "last one wins" of a duplicate key, which matters only for the
 * members read: a key with an escape in a read object might spell one. */
#include "k8s/scan.h"

#include <string.h>

#include "k8s/codec.h"

#define SCAN_DEPTH  64
#define SCAN_DIGITS 18 /* < 2^63: never strtoll's ERANGE */

/* The members read of one object; a NULL key ends the list. */
typedef struct member {
    const char *key;
    size_t len;
    int slot;
    const struct member *sub; /* the members read of its value, if an object */
} member;

#define M(k, slot, sub)                                                                            \
    {                                                                                              \
        k, sizeof(k) - 1, slot, sub                                                                \
    }
#define M_END                                                                                      \
    {                                                                                              \
        NULL, 0, 0, NULL                                                                           \
    }

static const member annotation_members[] = {
    M(KL_LEASE_HOLDER_CONTAINER, KL_SCAN_HOLDER_CONTAINER, NULL),
    M_END,
};
static const member metadata_members[] = {
    M("name", KL_SCAN_NAME, NULL),
    M("namespace", KL_SCAN_NAMESPACE, NULL),
    M("resourceVersion", KL_SCAN_RV, NULL),
    M("uid", KL_SCAN_UID, NULL),
    M("annotations", KL_SCAN_ANNOTATIONS, annotation_members),
    M_END,
};
static const member spec_members[] = {
    M("holderIdentity", KL_SCAN_HOLDER, NULL),
    M("leaseDurationSeconds", KL_SCAN_DURATION, NULL),
    M("acquireTime", KL_SCAN_ACQUIRE, NULL),
    M("renewTime", KL_SCAN_RENEW, NULL),
    M("leaseTransitions", KL_SCAN_TRANSITIONS, NULL),
    M("preferredHolder", KL_SCAN_PREFERRED, NULL),
    M("strategy", KL_SCAN_STRATEGY, NULL),
    M_END,
};
static const member lease_members[] = {
    M("kind", KL_SCAN_KIND, NULL),
    M("metadata", KL_SCAN_METADATA, metadata_members),
    M("spec", KL_SCAN_SPEC, spec_members),
    M_END,
};
static const member event_members[] = {
    M("type", KL_SCAN_TYPE, NULL),
    M("object", KL_SCAN_OBJ, lease_members),
    M_END,
};

typedef struct scanner {
    const char *end;
    kl__scan *out;
} scanner;

/* jansson's whitespace: these four, nothing else (no BOM, no form feed). */
static const char *ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r'))
        p++;
    return p;
}

static int hex(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The 4 hex digits at p as a UTF-16 unit, -1 if they are not. */
static long hex4(const char *p, const char *end)
{
    long v = 0;

    if (end - p < 4)
        return -1;
    for (int i = 0; i < 4; i++) {
        int d = hex(p[i]);

        if (d < 0)
            return -1;
        v = v << 4 | d;
    }
    return v;
}

/* Length of the UTF-8 sequence at p, 0 if it is not one: jansson's
 * utf8_check_first and utf8_check_full (no overlong forms, no surrogates,
 * nothing above U+10FFFF). */
static size_t utf8_seq(const char *p, const char *end)
{
    unsigned char c = (unsigned char)*p;
    size_t n;
    unsigned long v, min;

    if (c >= 0xc2 && c <= 0xdf)
        n = 2, v = c & 0x1f, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef)
        n = 3, v = c & 0x0f, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4)
        n = 4, v = c & 0x07, min = 0x10000;
    else
        return 0;
    if ((size_t)(end - p) < n)
        return 0;
    for (size_t i = 1; i < n; i++) {
        unsigned char u = (unsigned char)p[i];

        if (u < 0x80 || u > 0xbf)
            return 0;
        v = v << 6 | (u & 0x3f);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
        return 0;
    return n;
}

/* Past the string whose contents start at p (after the opening quote): at
 * its closing quote, or NULL to decline. *esc set if it has an escape. */
static const char *string_end(const char *p, const char *end, int *esc)
{
    while (p < end) {
        unsigned char c = (unsigned char)*p;

        if (c == '"')
            return p;
        if (c < 0x20)
            return NULL; /* "control character": jansson rejects it */
        if (c >= 0x80) {
            size_t n = utf8_seq(p, end);

            if (!n)
                return NULL;
            p += n;
            continue;
        }
        if (c != '\\') {
            p++;
            continue;
        }
        *esc = 1;
        if (++p == end)
            return NULL;
        switch (*p) {
        case '"':
        case '\\':
        case '/':
        case 'b':
        case 'f':
        case 'n':
        case 'r':
        case 't':
            p++;
            continue;
        case 'u': {
            long u = hex4(p + 1, end), lo;

            /* \u0000: "not allowed without JSON_ALLOW_NUL"; a low
             * surrogate alone, or a high one not followed by a low one:
             * "invalid Unicode". */
            if (u <= 0 || (u >= 0xdc00 && u <= 0xdfff))
                return NULL;
            p += 5;
            if (u >= 0xd800 && u <= 0xdbff) {
                if (end - p < 6 || p[0] != '\\' || p[1] != 'u')
                    return NULL;
                lo = hex4(p + 2, end);
                if (lo < 0xdc00 || lo > 0xdfff)
                    return NULL;
                p += 6;
            }
            continue;
        }
        default:
            return NULL; /* "invalid escape" */
        }
    }
    return NULL;
}

/* An integer as jansson's lex_scan_number reads one: -?(0|[1-9][0-9]*) not
 * followed by a digit ("01" is invalid), '.', 'e' or 'E' (a real: declined). */
static const char *number(const char *p, const char *end, kl__scan_val *v)
{
    const char *digits;
    int neg = 0;
    int64_t n = 0;

    if (p < end && *p == '-') {
        neg = 1;
        p++;
    }
    digits = p;
    if (p < end && *p == '0') {
        p++;
    } else {
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    }
    if (p == digits || p - digits > SCAN_DIGITS)
        return NULL;
    if (p < end && ((*p >= '0' && *p <= '9') || *p == '.' || *p == 'e' || *p == 'E'))
        return NULL;
    for (const char *d = digits; d < p; d++)
        n = n * 10 + (*d - '0');
    v->type = KL_SCAN_INT;
    v->n = neg ? -n : n;
    return p;
}

static const char *literal(const char *p, const char *end, const char *word, size_t len)
{
    return (size_t)(end - p) >= len && memcmp(p, word, len) == 0 ? p + len : NULL;
}

static const char *value(scanner *s, const char *p, int depth, const member *sub, kl__scan_val *v);

/* Past the object at p (at its '{'); NULL to decline. The members listed
 * in read are recorded; a key with an escape, or a read member given
 * twice, declines. */
static const char *object(scanner *s, const char *p, int depth, const member *read)
{
    const char *end = s->end;

    p = ws(p + 1, end);
    if (p < end && *p == '}')
        return p + 1;
    for (;;) {
        const char *key, *key_end;
        const member *sub = NULL;
        kl__scan_val *slot = NULL;
        int esc = 0;

        if (p == end || *p != '"')
            return NULL;
        key = p + 1;
        if (!(key_end = string_end(key, end, &esc)))
            return NULL;
        if (read) {
            if (esc)
                return NULL;
            for (const member *m = read; m->key; m++) {
                if (m->len == (size_t)(key_end - key) && memcmp(m->key, key, m->len) == 0) {
                    slot = &s->out->v[m->slot];
                    if (slot->type != KL_SCAN_ABSENT)
                        return NULL; /* jansson keeps the last one */
                    sub = m->sub;
                    break;
                }
            }
        }
        p = ws(key_end + 1, end);
        if (p == end || *p != ':')
            return NULL;
        p = ws(p + 1, end);
        if (!(p = value(s, p, depth + 1, sub, slot)))
            return NULL;
        p = ws(p, end);
        if (p < end && *p == '}')
            return p + 1;
        if (p == end || *p != ',')
            return NULL;
        p = ws(p + 1, end);
    }
}

static const char *array(scanner *s, const char *p, int depth)
{
    const char *end = s->end;

    p = ws(p + 1, end);
    if (p < end && *p == ']')
        return p + 1;
    for (;;) {
        if (!(p = value(s, p, depth + 1, NULL, NULL)))
            return NULL;
        p = ws(p, end);
        if (p < end && *p == ']')
            return p + 1;
        if (p == end || *p != ',')
            return NULL;
        p = ws(p + 1, end);
    }
}

/* Past the value at p; NULL to decline. v (may be NULL) records it; sub
 * lists the members to read if it is an object. */
static const char *value(scanner *s, const char *p, int depth, const member *sub, kl__scan_val *v)
{
    const char *end = s->end, *q;
    kl__scan_val ignored;
    int esc = 0;

    if (!v)
        v = &ignored;
    if (p == end || depth > SCAN_DEPTH)
        return NULL;
    switch (*p) {
    case '{':
        if (!(q = object(s, p, depth, sub)))
            return NULL;
        v->type = KL_SCAN_OBJECT;
        v->p = p;
        v->len = (size_t)(q - p);
        return q;
    case '[':
        v->type = KL_SCAN_OTHER;
        return array(s, p, depth);
    case '"':
        if (!(q = string_end(p + 1, end, &esc)))
            return NULL;
        v->type = KL_SCAN_STRING;
        v->p = p + 1;
        v->len = (size_t)(q - p - 1);
        v->esc = esc;
        return q + 1;
    case 't':
        v->type = KL_SCAN_OTHER;
        return literal(p, end, "true", 4);
    case 'f':
        v->type = KL_SCAN_OTHER;
        return literal(p, end, "false", 5);
    case 'n':
        v->type = KL_SCAN_NULL;
        return literal(p, end, "null", 4);
    default:
        return number(p, end, v);
    }
}

/* The object that is the whole text, its members read as listed; a
 * Lease's own span goes to KL_SCAN_OBJ, as an event's object does. */
static int scan(kl__scan *out, const char *text, size_t len, const member *read)
{
    scanner s = {text + len, out};
    kl__scan_val *whole = read == lease_members ? &out->v[KL_SCAN_OBJ] : NULL;
    const char *p = ws(text, s.end), *q;

    memset(out, 0, sizeof(*out));
    if (p == s.end || *p != '{' || !(q = value(&s, p, 1, read, whole)) || ws(q, s.end) != s.end)
        return -1;
    return 0;
}

int kl__scan_lease(kl__scan *out, const char *text, size_t len)
{
    return scan(out, text, len, lease_members);
}

int kl__scan_watch_event(kl__scan *out, const char *line, size_t len)
{
    return scan(out, line, len, event_members);
}

/* UTF-8 of a code point the scanner let through (no NUL, no surrogate). */
static char *put_utf8(char *d, unsigned long u)
{
    if (u < 0x80) {
        *d++ = (char)u;
    } else if (u < 0x800) {
        *d++ = (char)(0xc0 | u >> 6);
        *d++ = (char)(0x80 | (u & 0x3f));
    } else if (u < 0x10000) {
        *d++ = (char)(0xe0 | u >> 12);
        *d++ = (char)(0x80 | (u >> 6 & 0x3f));
        *d++ = (char)(0x80 | (u & 0x3f));
    } else {
        *d++ = (char)(0xf0 | u >> 18);
        *d++ = (char)(0x80 | (u >> 12 & 0x3f));
        *d++ = (char)(0x80 | (u >> 6 & 0x3f));
        *d++ = (char)(0x80 | (u & 0x3f));
    }
    return d;
}

size_t kl__scan_string(const kl__scan_val *s, char *dst)
{
    const char *p = s->p, *end = s->p + s->len;
    char *d = dst;

    if (!s->esc) {
        memcpy(dst, s->p, s->len);
        dst[s->len] = '\0';
        return s->len;
    }
    /* string_end checked every escape: this only decodes. */
    while (p < end) {
        unsigned long u;

        if (*p != '\\') {
            *d++ = *p++;
            continue;
        }
        switch (p[1]) {
        case 'b':
            *d++ = '\b';
            break;
        case 'f':
            *d++ = '\f';
            break;
        case 'n':
            *d++ = '\n';
            break;
        case 'r':
            *d++ = '\r';
            break;
        case 't':
            *d++ = '\t';
            break;
        case 'u':
            u = (unsigned long)hex4(p + 2, end);
            if (u >= 0xd800 && u <= 0xdbff) {
                u = 0x10000 + ((u - 0xd800) << 10) + ((unsigned long)hex4(p + 8, end) - 0xdc00);
                p += 6;
            }
            d = put_utf8(d, u);
            p += 4;
            break;
        default: /* '"', '\\', '/' */
            *d++ = p[1];
            break;
        }
        p += 2;
    }
    *d = '\0';
    return (size_t)(d - dst);
}
