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
    CHECK(l->root != NULL || l->text != NULL);
    CHECK(l->root == NULL || json_is_object(l->root));
    CHECK(l->text == NULL || strlen(l->text) == l->text_len);
    CHECK(l->name != NULL && l->name[0] != '\0');
    CHECK(l->ns != NULL && l->rv != NULL && l->uid != NULL);
    CHECK(l->spec.duration_s >= 0 && l->spec.duration_s <= INT32_MAX);
    CHECK(l->spec.transitions >= 0 && l->spec.transitions <= INT32_MAX);
}

static void check_same_string(const char *field, const char *a, const char *b)
{
    CHECK_MSG((a == NULL) == (b == NULL), "%s: scanner %s, jansson %s", field, a ? a : "NULL",
              b ? b : "NULL");
    CHECK_MSG(!a || strcmp(a, b) == 0, "%s: scanner \"%s\", jansson \"%s\"", field, a, b);
}

void kl_fuzz_check_same_lease(kl__lease *scanned, kl__lease *parsed)
{
    json_t *a, *b;

    kl_fuzz_check_lease(scanned);
    kl_fuzz_check_lease(parsed);
    CHECK(scanned->root == NULL && scanned->text != NULL);
    check_same_string("metadata.name", scanned->name, parsed->name);
    check_same_string("metadata.namespace", scanned->ns, parsed->ns);
    check_same_string("metadata.resourceVersion", scanned->rv, parsed->rv);
    check_same_string("metadata.uid", scanned->uid, parsed->uid);
    check_same_string("spec.holderIdentity", scanned->spec.holder, parsed->spec.holder);
    check_same_string("spec.preferredHolder", scanned->preferred_holder, parsed->preferred_holder);
    check_same_string("spec.strategy", scanned->strategy, parsed->strategy);
    check_same_string("holder-container", scanned->holder_container, parsed->holder_container);
    CHECK(scanned->holder_container_bad == parsed->holder_container_bad);
    CHECK(scanned->spec.duration_s == parsed->spec.duration_s);
    CHECK(scanned->spec.acquire_us == parsed->spec.acquire_us);
    CHECK(scanned->spec.renew_us == parsed->spec.renew_us);
    CHECK(scanned->spec.transitions == parsed->spec.transitions);
    a = kl__lease_root(scanned);
    b = kl__lease_root(parsed);
    CHECK(a != NULL && b != NULL);
    CHECK_MSG(json_equal(a, b), "the scanner's text is not the object: %s", scanned->text);
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
