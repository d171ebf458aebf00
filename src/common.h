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

/* Set the calling thread's last error message and return code (negative).
 * The message should name the thing that was wrong. */
int kl__error_set(int code, const char *fmt, ...) KL_PRINTF(2, 3);
/* Prefix the current message: "<prefix>: <old message>". Returns code. */
int kl__error_wrap(int code, const char *fmt, ...) KL_PRINTF(2, 3);
void kl__error_clear(void);
const char *kl__error_get(void);

/* Allocation. Every allocation of the library goes through these so that a
 * test build can fail the Nth one (see kl__alloc_fail_after). */
void *kl__malloc(size_t n);
void *kl__calloc(size_t n, size_t size);
void *kl__realloc(void *p, size_t n);
char *kl__strdup(const char *s);
char *kl__strndup(const char *s, size_t n);
void kl__free(void *p);
char *kl__sprintf(const char *fmt, ...) KL_PRINTF(1, 2);
/* Test hook: fail the allocation after n more succeed (n < 0: never). */
void kl__alloc_fail_after(long n);

/* Growable byte buffer, always NUL-terminated when data != NULL. */
typedef struct kl__buf {
    char *data;
    size_t len;
    size_t cap;
} kl__buf;
int kl__buf_append(kl__buf *b, const void *data, size_t len); /* 0 or K8SLEASE_ENOMEM */
int kl__buf_printf(kl__buf *b, const char *fmt, ...) KL_PRINTF(2, 3);
void kl__buf_free(kl__buf *b);

/* Logging: a sink with a level threshold, owned by the client. */
typedef struct kl__log {
    k8slease_log_cb cb;
    void *user_data;
    k8slease_log_level level;
} kl__log;
void kl__log_printf(const kl__log *log, k8slease_log_level level, const char *fmt, ...)
    KL_PRINTF(3, 4);

#endif
