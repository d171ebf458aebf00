/* Fuzz targets over the library's parsers. The same code runs under
 * libFuzzer (fuzz_main.c, built with -DK8SLEASE_FUZZ=ON) and, without
 * libFuzzer, in the unit test that replays fuzz/corpus and fuzz/regressions
 * (replay.c). A target returns 0; a broken property prints what broke and
 * aborts, which both drivers report as a failure. */
#ifndef KL_FUZZ_TARGETS_H
#define KL_FUZZ_TARGETS_H

#include <stddef.h>
#include <stdint.h>

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

extern const kl_fuzz_target kl_fuzz_targets[];
extern const size_t kl_fuzz_target_count;

/* Name of the input being run, for failure messages (the replay sets it). */
extern const char *kl_fuzz_input_name;

#endif
