/* Fuzz targets: every parser that reads bytes from outside the process (the
 * API server's bodies and watch streams, kubeconfig files, exec plugin
 * output, the etcd gateway's bodies) plus MicroTime and base64, and the etcd
 * request encoders, each with the properties it must keep
 * beyond "does not crash": round trips, agreement with a reference, and
 * clean errors. See targets.h. Each target is in its own
 * fuzz/target_<name>.c; this file has the table and the shared checks. */
#include "targets.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include <jansson.h>

#include "core/common.h"

const char *kl_fuzz_input_name;

void kl_fuzz_check_failed(const char *file, int line, const char *cond, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "%s:%d: property broken: %s\n", file, line, cond);
    if (kl_fuzz_input_name)
        fprintf(stderr, "  input: %s\n", kl_fuzz_input_name);
    if (fmt[0]) {
        fputs("  ", stderr);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
    }
    fprintf(stderr, "  last library error: %s\n", kl__error_get());
    abort();
}

/* What every parsed Lease must hold (targets lease and watch). */
void kl_fuzz_check_lease(const kl__lease *l)
{
    CHECK(l->root != NULL && json_is_object(l->root));
    CHECK(l->name != NULL && l->name[0] != '\0');
    CHECK(l->ns != NULL && l->rv != NULL && l->uid != NULL);
    CHECK(l->spec.duration_s >= 0 && l->spec.duration_s <= INT32_MAX);
    CHECK(l->spec.transitions >= 0 && l->spec.transitions <= INT32_MAX);
}

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* Reference encoder (targets base64 and etcd_encode). */
char *b64_encode(const unsigned char *in, size_t len)
{
    char *out = malloc((len + 2) / 3 * 4 + 1);
    size_t i, o = 0;

    CHECK(out != NULL);
    for (i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16;

        if (i + 1 < len)
            v |= (uint32_t)in[i + 1] << 8;
        if (i + 2 < len)
            v |= in[i + 2];
        out[o++] = b64_alphabet[v >> 18 & 63];
        out[o++] = b64_alphabet[v >> 12 & 63];
        out[o++] = i + 1 < len ? b64_alphabet[v >> 6 & 63] : '=';
        out[o++] = i + 2 < len ? b64_alphabet[v & 63] : '=';
    }
    out[o] = '\0';
    return out;
}

const kl_fuzz_target kl_fuzz_targets[] = {
    {"lease", kl_fuzz_lease},
    {"status", kl_fuzz_status},
    {"watch", kl_fuzz_watch},
    {"kubeconfig", kl_fuzz_kubeconfig},
    {"base64", kl_fuzz_base64},
    {"exec_credential", kl_fuzz_exec_credential},
    {"microtime", kl_fuzz_microtime},
    {"etcd", kl_fuzz_etcd},
    {"etcd_encode", kl_fuzz_etcd_encode},
    {"pod", kl_fuzz_pod},
};

const size_t kl_fuzz_target_count = KL_ARRAY_LEN(kl_fuzz_targets);
