/* Internal helpers shared by every subsystem: errors, allocation, logging. */
#ifndef KL_COMMON_H
#define KL_COMMON_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "k8slease.h"

#if defined(__GNUC__)
#define KL_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define KL_PRINTF(a, b)
#endif

#define KL_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* a + b for b >= 0, saturating: durations come from servers and callers,
 * and an overflow would turn "valid for ages" into "expired". */
static inline int64_t kl__add_sat(int64_t a, int64_t b)
{
    return a > INT64_MAX - b ? INT64_MAX : a + b;
}

/* FNV-1a, 64 bits: cheap equality hints for names kept truncated. */
static inline uint64_t kl__fnv1a(const char *s, size_t len)
{
    uint64_t h = 14695981039346656037u;

    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211u;
    }
    return h;
}

/* splitmix64: advances *state; any seed, including 0, gives a full period. */
static inline uint64_t kl__splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15u);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

/* Set the calling thread's last error message and return code (negative).
 * The message should name the thing that was wrong. */
int kl__error_set(int code, const char *fmt, ...) KL_PRINTF(2, 3);

/* Overwrite n bytes at p (may be NULL) with zeros in a way the compiler
 * keeps: for secrets before their memory goes back to the allocator. */
void kl__wipe(void *p, size_t n);

/* 1 when s[0..len) is valid UTF-8 (no overlong forms, no surrogates, at
 * most U+10FFFF): what JSON strings, and so Kubernetes objects, must be. */
int kl__utf8_valid(const char *s, size_t len);
/* msg without its "what: " prefix (msg when it has none). */
const char *kl__after_prefix(const char *msg, const char *what);
/* Prefix the current message: "<prefix>: <old message>". Returns code. */
int kl__error_wrap(int code, const char *fmt, ...) KL_PRINTF(2, 3);
void kl__error_clear(void);
const char *kl__error_get(void);
/* strerror_r's text for errno value e in buf ("error <e>" if it has none);
 * returns buf. Thread-safe, unlike strerror. */
const char *kl__strerror(int e, char *buf, size_t size);

/* Allocation. Every allocation of the library goes through these so that a
 * test can fail the Nth one (see kl__alloc_fail_after). */
void *kl__malloc(size_t n);
void *kl__calloc(size_t n, size_t size);
void *kl__realloc(void *p, size_t n);
char *kl__strdup(const char *s);
char *kl__strndup(const char *s, size_t n);
void kl__free(void *p);
char *kl__sprintf(const char *fmt, ...) KL_PRINTF(1, 2);
char *kl__vsprintf(const char *fmt, va_list ap) KL_PRINTF(1, 0);
/* Test hook: the calling thread's allocation after n more of its own
 * succeed fails, and every later one of that thread, until the next call
 * (n < 0: none fails). Only that thread's allocations count and fail, so
 * a run fails the same allocation each time and other threads go on
 * unharmed: to fail a loop thread's, arm it from there (kl__loop_call).
 * Any thread; a call makes every other thread's countdown stale. */
void kl__alloc_fail_after(long n);
/* Whether an armed countdown ran out since the last kl__alloc_fail_after. */
int kl__alloc_failed(void);

/* Growable byte buffer, always NUL-terminated when data != NULL. */
typedef struct kl__buf {
    char *data;
    size_t len;
    size_t cap;
} kl__buf;
int kl__buf_append(kl__buf *b, const void *data, size_t len); /* 0 or K8SLEASE_ENOMEM */
int kl__buf_printf(kl__buf *b, const char *fmt, ...) KL_PRINTF(2, 3);
void kl__buf_free(kl__buf *b);

/* What a log line is about, as data: for an internal sink that keeps state
 * per Lease (the seed ABI's log lines, src/compat/compat.c) without reading
 * the text, which is the public log callback's and may change. */
typedef enum kl__log_kind {
    KL_LOG_OTHER,           /* no subject: the process's */
    KL_LOG_REQUEST,         /* the outcome of a request of an election ("get lease ...") */
    KL_LOG_ELECTION,        /* an election's own line, or one of its parts' */
    KL_LOG_WATCH,           /* the watch of the subject: any other line */
    KL_LOG_WATCH_HEALTHY,   /* the watch of the subject is healthy (again) */
    KL_LOG_WATCH_UNHEALTHY, /* no event or bookmark in time */
    KL_LOG_WATCH_FAILED,    /* the watch failed: error */
    KL_LOG_TERM_LOST        /* an election lost its term: why (core/driver.h) */
} kl__log_kind;

typedef struct kl__log_about {
    const char *what;    /* the line's "WHAT: " prefix, "lease NS/NAME" (NULL: none) */
    const char *subject; /* "NS/NAME", "NS/" "*" for a namespace; NULL: the process */
    kl__log_kind kind;
    /* KL_LOG_WATCH_FAILED: what went wrong, without what is done about it
     * ("; retrying"); NULL: the message. */
    const char *error;
} kl__log_about;

/* A line as the internal sink gets it: the text is the one the public
 * callback gets; message is the text after the "WHAT: " prefix. Strings
 * borrowed for the call, control characters escaped. */
typedef struct kl__log_event {
    k8slease_log_level level;
    kl__log_kind kind;   /* KL_LOG_OTHER whenever subject is NULL */
    const char *subject; /* as in kl__log_about */
    const char *text;
    const char *message;
    const char *error; /* KL_LOG_WATCH_FAILED only, else NULL */
} kl__log_event;

typedef void (*kl__log_event_cb)(const kl__log_event *ev, void *user_data);

/* Logging: a sink with a level threshold, owned by the client. With
 * event_cb (internal: kl__client_new_logged), every line goes there
 * instead of cb, with what it is about. */
typedef struct kl__log {
    k8slease_log_cb cb;
    void *user_data;
    k8slease_log_level level;
    kl__log_event_cb event_cb;
} kl__log;
/* A line about nothing in particular. */
void kl__log_printf(const kl__log *log, k8slease_log_level level, const char *fmt, ...)
    KL_PRINTF(3, 4);
/* A line about->what ": " message, about about->subject. about may be NULL
 * (then as kl__log_printf). */
void kl__log_at(const kl__log *log, k8slease_log_level level, const kl__log_about *about,
                const char *fmt, ...) KL_PRINTF(4, 5);
void kl__log_vat(const kl__log *log, k8slease_log_level level, const kl__log_about *about,
                 const char *fmt, va_list ap) KL_PRINTF(4, 0);

#endif
