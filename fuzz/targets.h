/* Fuzz targets over the library's parsers. The same code runs under
 * libFuzzer (fuzz_main.c, built with -DK8SLEASE_FUZZ=ON) and, without
 * libFuzzer, in the unit test that replays fuzz/corpus and fuzz/regressions
 * (replay.c). Each target is in fuzz/target_<name>.c. A target returns 0; a broken property prints
 * what broke and aborts, which both drivers report as a failure. */
#ifndef KL_FUZZ_TARGETS_H
#define KL_FUZZ_TARGETS_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/common.h"
#include "k8s/codec.h"

typedef int (*kl_fuzz_fn)(const uint8_t *data, size_t size);

typedef struct kl_fuzz_target {
    const char *name; /* directory name under fuzz/corpus and fuzz/regressions */
    kl_fuzz_fn fn;
} kl_fuzz_target;

int kl_fuzz_lease(const uint8_t *data, size_t size);
int kl_fuzz_status(const uint8_t *data, size_t size);
int kl_fuzz_watch(const uint8_t *data, size_t size);
int kl_fuzz_kubeconfig(const uint8_t *data, size_t size);
int kl_fuzz_base64(const uint8_t *data, size_t size);
int kl_fuzz_exec_credential(const uint8_t *data, size_t size);
int kl_fuzz_microtime(const uint8_t *data, size_t size);
int kl_fuzz_etcd(const uint8_t *data, size_t size);
int kl_fuzz_etcd_encode(const uint8_t *data, size_t size);
int kl_fuzz_pod(const uint8_t *data, size_t size);

extern const kl_fuzz_target kl_fuzz_targets[];
extern const size_t kl_fuzz_target_count;

/* Name of the input being run, for failure messages (the replay sets it). */
extern const char *kl_fuzz_input_name;

/* ---- Shared by the targets (target_<name>.c) ---- */

#define API_V1      "client.authentication.k8s.io/v1"
#define API_V1BETA1 "client.authentication.k8s.io/v1beta1"

/* RFC 3339 years are 0000..9999: the µs range MicroTime can round-trip. */
#define US_YEAR0     INT64_C(-62167219200000000) /* 0000-01-01T00:00:00Z */
#define US_YEAR10000 INT64_C(253402300800000000) /* 10000-01-01T00:00:00Z */

/* k8s/informer.c's limit on one watch event line (MAX_LINE). */
#define WATCH_MAX_LINE (4 * 1024 * 1024)

/* A parsed Lease keeps the codec's promises (targets lease and watch). */
void kl_fuzz_check_lease(const kl__lease *l);
/* The scanner's Lease (k8s/scan.h) is the jansson path's: every field, and
 * its text is the same JSON value as the tree (targets lease and watch). */
void kl_fuzz_check_same_lease(kl__lease *scanned, kl__lease *parsed);

/* Standard base64 with padding (malloc'ed), the reference of targets base64
 * and etcd_encode. */
char *b64_encode(const unsigned char *in, size_t len);

/* Print what broke (file, line, condition, the input, the library's last
 * error) and abort. */
void kl_fuzz_check_failed(const char *file, int line, const char *cond, const char *fmt, ...)
    KL_PRINTF(4, 5);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            kl_fuzz_check_failed(__FILE__, __LINE__, #cond, "%s", "");                             \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                       \
    do {                                                                                           \
        if (!(cond))                                                                               \
            kl_fuzz_check_failed(__FILE__, __LINE__, #cond, __VA_ARGS__);                          \
    } while (0)

static inline const char *str_or_empty(const char *s)
{
    return s ? s : "";
}

static inline int in_rfc3339_range(int64_t us)
{
    return us >= US_YEAR0 && us < US_YEAR10000;
}

/* The input as a NUL-terminated string (cut at an embedded NUL). */
static inline char *cstring(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);

    CHECK(s != NULL);
    if (size)
        memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

#endif
