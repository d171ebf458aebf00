/* Errors, allocation and logging shared by every subsystem. */
#include "core/common.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KL_ERRMSG_MAX 1024

static _Thread_local char errmsg[KL_ERRMSG_MAX];

int kl__error_set(int code, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(errmsg, sizeof(errmsg), fmt, ap);
    va_end(ap);
    return code;
}

int kl__error_wrap(int code, const char *fmt, ...)
{
    char prefix[KL_ERRMSG_MAX];
    char old[KL_ERRMSG_MAX];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    memcpy(old, errmsg, sizeof(old));
    /* Truncation is fine: a message is for people. */
    if (snprintf(errmsg, sizeof(errmsg), old[0] ? "%s: %s" : "%s%s", prefix, old) < 0)
        errmsg[0] = '\0';
    return code;
}

void kl__error_clear(void)
{
    errmsg[0] = '\0';
}

const char *kl__error_get(void)
{
    return errmsg;
}

const char *kl__strerror(int e, char *buf, size_t size)
{
    if (strerror_r(e, buf, size) != 0)
        snprintf(buf, size, "error %d", e);
    return buf;
}

K8SLEASE_API const char *k8slease_error_last(void)
{
    return errmsg;
}

K8SLEASE_API const char *k8slease_strerror(int code)
{
    switch (code) {
    case K8SLEASE_OK:
        return "K8SLEASE_OK";
    case K8SLEASE_EINVAL:
        return "K8SLEASE_EINVAL";
    case K8SLEASE_ECONFIG:
        return "K8SLEASE_ECONFIG";
    case K8SLEASE_ENOTFOUND:
        return "K8SLEASE_ENOTFOUND";
    case K8SLEASE_ECONFLICT:
        return "K8SLEASE_ECONFLICT";
    case K8SLEASE_EAUTH:
        return "K8SLEASE_EAUTH";
    case K8SLEASE_ETLS:
        return "K8SLEASE_ETLS";
    case K8SLEASE_ETIMEOUT:
        return "K8SLEASE_ETIMEOUT";
    case K8SLEASE_ETRANSPORT:
        return "K8SLEASE_ETRANSPORT";
    case K8SLEASE_EPROTOCOL:
        return "K8SLEASE_EPROTOCOL";
    case K8SLEASE_ESTATE:
        return "K8SLEASE_ESTATE";
    case K8SLEASE_ENOMEM:
        return "K8SLEASE_ENOMEM";
    case K8SLEASE_ESERVER:
        return "K8SLEASE_ESERVER";
    default:
        return "K8SLEASE_E?";
    }
}

K8SLEASE_API const char *k8slease_version(void)
{
    return K8SLEASE_VERSION_STRING;
}

/* Failing-allocator test hook. The countdown is the arming thread's, and
 * so are the failures: the same run fails the same allocation whatever the
 * other threads (the loop thread, other clients) do meanwhile, and they go
 * on unharmed. A call from any thread makes every other thread's countdown
 * stale (alloc_gen). */
static _Atomic unsigned long alloc_gen;
static _Atomic int alloc_failing; /* an armed countdown ran out */
static _Thread_local long alloc_budget = -1;
static _Thread_local unsigned long alloc_budget_gen;

void kl__alloc_fail_after(long n)
{
    unsigned long gen = atomic_fetch_add(&alloc_gen, 1) + 1;

    atomic_store(&alloc_failing, 0);
    alloc_budget = n;
    alloc_budget_gen = gen;
}

int kl__alloc_failed(void)
{
    return atomic_load(&alloc_failing);
}

static int alloc_allowed(void)
{
    if (alloc_budget < 0 ||
        alloc_budget_gen != atomic_load_explicit(&alloc_gen, memory_order_relaxed))
        return 1;
    if (alloc_budget == 0) {
        atomic_store(&alloc_failing, 1);
        return 0;
    }
    alloc_budget--;
    return 1;
}

void *kl__malloc(size_t n)
{
    if (!alloc_allowed())
        return NULL;
    return malloc(n ? n : 1);
}

void *kl__calloc(size_t n, size_t size)
{
    if (!alloc_allowed())
        return NULL;
    return calloc(n ? n : 1, size ? size : 1);
}

void *kl__realloc(void *p, size_t n)
{
    if (!alloc_allowed())
        return NULL;
    return realloc(p, n ? n : 1);
}

char *kl__strndup(const char *s, size_t n)
{
    size_t len = strnlen(s, n);
    char *d = kl__malloc(len + 1);

    if (!d)
        return NULL;
    memcpy(d, s, len);
    d[len] = '\0';
    return d;
}

char *kl__strdup(const char *s)
{
    return kl__strndup(s, strlen(s));
}

void kl__free(void *p)
{
    free(p);
}

char *kl__vsprintf(const char *fmt, va_list ap)
{
    va_list ap2;
    int n;
    char *s;

    va_copy(ap2, ap);
    n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0 || !(s = kl__malloc((size_t)n + 1)))
        return NULL;
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    return s;
}

char *kl__sprintf(const char *fmt, ...)
{
    va_list ap;
    char *s;

    va_start(ap, fmt);
    s = kl__vsprintf(fmt, ap);
    va_end(ap);
    return s;
}

int kl__buf_append(kl__buf *b, const void *data, size_t len)
{
    if (b->len + len + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        char *p;

        while (cap < b->len + len + 1)
            cap *= 2;
        p = kl__realloc(b->data, cap);
        if (!p)
            return K8SLEASE_ENOMEM;
        b->data = p;
        b->cap = cap;
    }
    if (len)
        memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
    return 0;
}

int kl__buf_printf(kl__buf *b, const char *fmt, ...)
{
    va_list ap;
    char small[256];
    char *big = NULL;
    int n, err;

    va_start(ap, fmt);
    n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (n < 0)
        return K8SLEASE_EINVAL;
    if ((size_t)n < sizeof(small))
        return kl__buf_append(b, small, (size_t)n);
    big = kl__malloc((size_t)n + 1);
    if (!big)
        return K8SLEASE_ENOMEM;
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    err = kl__buf_append(b, big, (size_t)n);
    kl__free(big);
    return err;
}

void kl__buf_free(kl__buf *b)
{
    kl__free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

const char *kl__after_prefix(const char *msg, const char *what)
{
    size_t n = strlen(what);

    return strncmp(msg, what, n) == 0 && msg[n] == ':' && msg[n + 1] == ' ' ? msg + n + 2 : msg;
}

/* Messages quote what servers send (holder identities, error bodies):
 * control characters are escaped, so none can forge a log line or drive a
 * terminal. Returns the length written to out (NUL-terminated). */
static size_t log_escape(char *out, size_t size, const char *in)
{
    size_t o = 0;

    for (const unsigned char *p = (const unsigned char *)in; *p && o + 5 <= size; p++) {
        if (*p < 0x20 || *p == 0x7f)
            o += (size_t)snprintf(out + o, size - o, "\\x%02x", *p);
        else
            out[o++] = (char)*p;
    }
    out[o] = '\0';
    return o;
}

/* The length of msg[0..len) escaped, at most max. */
static size_t escaped_len(const char *msg, size_t len, size_t max)
{
    size_t n = 0;

    for (size_t i = 0; i < len && n < max; i++)
        n += (unsigned char)msg[i] < 0x20 || msg[i] == 0x7f ? 4 : 1;
    return n < max ? n : max;
}

/* msg: the whole line; prefix: the length of its "WHAT: " (0: none). */
static void log_emit(const kl__log *log, k8slease_log_level level, const kl__log_about *about,
                     const char *msg, size_t prefix)
{
    char safe[1024], error[1024];
    kl__log_event ev = {level, KL_LOG_OTHER, NULL, safe, safe, NULL};
    size_t n;

    n = log_escape(safe, sizeof(safe), msg);
    if (!log->event_cb) {
        log->cb(level, safe, log->user_data);
        return;
    }
    if (about && about->subject) {
        ev.kind = about->kind;
        ev.subject = about->subject;
        ev.message = safe + escaped_len(msg, prefix, n);
        if (about->kind == KL_LOG_WATCH_FAILED) {
            log_escape(error, sizeof(error), about->error ? about->error : msg + prefix);
            ev.error = error;
        }
    }
    log->event_cb(&ev, log->user_data);
}

void kl__log_vat(const kl__log *log, k8slease_log_level level, const kl__log_about *about,
                 const char *fmt, va_list ap)
{
    char msg[1024];
    size_t prefix = 0;
    int n;

    if (!log || (!log->cb && !log->event_cb) || level > log->level)
        return;
    if (about && about->what) {
        n = snprintf(msg, sizeof(msg), "%s: ", about->what);
        prefix = n < 0 ? 0 : (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1;
    }
    vsnprintf(msg + prefix, sizeof(msg) - prefix, fmt, ap);
    log_emit(log, level, about, msg, prefix);
}

void kl__log_at(const kl__log *log, k8slease_log_level level, const kl__log_about *about,
                const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    kl__log_vat(log, level, about, fmt, ap);
    va_end(ap);
}

void kl__log_printf(const kl__log *log, k8slease_log_level level, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;

    if (!log || (!log->cb && !log->event_cb) || level > log->level)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    log_emit(log, level, NULL, msg, 0);
}

int kl__utf8_valid(const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s, *end = p + len;

    while (p < end) {
        unsigned c = *p++;
        unsigned need, min, cp;

        if (c < 0x80)
            continue;
        if (c >= 0xc2 && c <= 0xdf)
            need = 1, min = 0x80, cp = c & 0x1f;
        else if (c >= 0xe0 && c <= 0xef)
            need = 2, min = 0x800, cp = c & 0x0f;
        else if (c >= 0xf0 && c <= 0xf4)
            need = 3, min = 0x10000, cp = c & 0x07;
        else
            return 0;
        if ((size_t)(end - p) < need)
            return 0;
        while (need--) {
            if ((*p & 0xc0) != 0x80)
                return 0;
            cp = cp << 6 | (*p++ & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
    }
    return 1;
}

void kl__wipe(void *p, size_t n)
{
    volatile unsigned char *v = p;

    while (v && n--)
        *v++ = 0;
}
