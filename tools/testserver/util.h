/*
 * util.h - small helpers shared by the test server's modules: growable
 * buffers, clocks and time formats, UUIDs, a seeded PRNG, logging and files.
 *
 * Nothing here knows about HTTP or Kubernetes objects.
 */
#ifndef TS_UTIL_H
#define TS_UTIL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define TS_VERSION "0.1.0"

/* A growable byte buffer; always NUL-terminated when data != NULL. */
typedef struct ts_buf {
    char *data;
    size_t len;
    size_t cap;
} ts_buf;

int ts_buf_append(ts_buf *b, const void *p, size_t n);
int ts_buf_puts(ts_buf *b, const char *s);
int ts_buf_printf(ts_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ts_buf_free(ts_buf *b);

/* Milliseconds on the monotonic clock: every deadline and timer uses it. */
int64_t ts_mono_ms(void);

/* "2006-01-02T15:04:05Z" (metav1.Time, seconds, UTC). */
void ts_format_time(time_t t, char out[32]);
/* "2006-01-02T15:04:05.000000Z" (metav1.MicroTime) for the current time. */
void ts_format_microtime_now(char out[32]);
/* Parses an RFC 3339 timestamp with optional fraction; -1 if malformed. */
int ts_parse_time(const char *s, time_t *out);
/*
 * Parses a MicroTime exactly as Go's time.Parse("2006-01-02T15:04:05.000000Z07:00")
 * does (6 fractional digits, "Z" or a numeric offset) and writes it back in
 * the canonical UTC form. Returns 0, or -1 if it does not parse.
 */
int ts_normalize_microtime(const char *in, char out[32]);
/* Microseconds since the epoch on the wall clock (MicroTimes are wall time). */
int64_t ts_wall_us(void);
/* A canonical MicroTime (as ts_normalize_microtime writes) to microseconds; -1 if malformed. */
int ts_microtime_us(const char *s, int64_t *us);
/* Microseconds since the epoch as a MicroTime, "2006-01-02T15:04:05.000000Z". */
void ts_format_microtime(int64_t us, char out[32]);

/* Random version-4 UUID, lowercase, 36 characters + NUL. */
void ts_uuid4(char out[37]);
/* n random bytes from the OpenSSL CSPRNG as 2n lowercase hex digits + NUL. */
int ts_random_hex(char *out, size_t nbytes);

/* Deterministic PRNG for fault probabilities (splitmix64): not thread-safe. */
typedef struct ts_rng {
    uint64_t state;
} ts_rng;
void ts_rng_seed(ts_rng *r, uint64_t seed);
double ts_rng_unit(ts_rng *r); /* uniform in [0, 1) */

/* Logging goes to stderr unless --quiet; stdout carries only the ready line. */
void ts_log_set_quiet(bool quiet);
bool ts_log_is_quiet(void);
void ts_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void ts_vlog(const char *fmt, va_list ap);

/* Writes dir/name atomically (temporary file + rename) with the given mode. */
int ts_write_file(const char *dir, const char *name, const void *data, size_t len, int mode);
/* Reads dir/name whole, NUL-terminated; -1 (errno set) if it cannot. */
int ts_read_file(const char *dir, const char *name, char **out, size_t *len);
bool ts_file_exists(const char *dir, const char *name);
/* Removes a directory tree (used only for the temporary directory we made). */
int ts_remove_tree(const char *path);

/* Base64 (standard alphabet, no line breaks); caller frees. */
char *ts_base64_encode(const void *data, size_t len);
/* Returns the decoded length or -1; *out is malloc'ed and NUL-terminated. */
long ts_base64_decode(const char *in, unsigned char **out);

/* strdup that accepts NULL. */
char *ts_strdup(const char *s);

#endif
