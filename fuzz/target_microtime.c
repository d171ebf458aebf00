/* Fuzz target "microtime" (fuzz/corpus/microtime): MicroTime parse and format, and agreement with
 * the exec plugin reader's parser. See targets.h. */
#include "targets.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "core/common.h"
#include "core/credential.h"
#include "etcd/codec.h"
#include "core/http.h"
#include "k8s/kubeconfig.h"
#include "k8s/codec.h"

/* ------------------------------------------------------------------------ */
/* MicroTime                                                                */
/* ------------------------------------------------------------------------ */

/* The exec plugin reader has its own RFC 3339 parser (expirationTimestamp):
 * both must accept the same strings with the same value. */
static void compare_with_exec_parser(const char *s, int lease_err, int64_t lease_us)
{
    kl__exec_credential cred;
    char *json;
    int err;

    /* Only strings that need no JSON escaping; "" means "absent" there. */
    if (!s[0])
        return;
    for (const char *p = s; *p; p++)
        if (*p < 0x20 || *p > 0x7e || *p == '"' || *p == '\\')
            return;
    json = kl__sprintf("{\"apiVersion\":\"" API_V1 "\",\"kind\":\"ExecCredential\","
                       "\"status\":{\"token\":\"t\",\"expirationTimestamp\":\"%s\"}}",
                       s);
    CHECK(json != NULL);
    err = kl__exec_credential_parse(json, strlen(json), NULL, &cred);
    CHECK_MSG((err == 0) == (lease_err == 0), "\"%s\": MicroTime parser %d, exec parser %d", s,
              lease_err, err);
    if (err == 0)
        CHECK_MSG(cred.expiry_us == lease_us, "\"%s\": %lld vs %lld", s, (long long)lease_us,
                  (long long)cred.expiry_us);
    kl__exec_credential_clear(&cred);
    kl__free(json);
}

int kl_fuzz_microtime(const uint8_t *data, size_t size)
{
    char buf[KL_MICROTIME_BUFLEN], *s = cstring(data, size);
    int64_t us = 0, back = 0;
    uint64_t raw;
    int err;

    err = kl__microtime_parse(s, &us);
    if (err == 0) {
        kl__microtime_format(us, buf);
        if (in_rfc3339_range(us)) {
            /* format(parse(x)) parses back to the same instant. */
            CHECK_MSG(kl__microtime_parse(buf, &back) == 0 && back == us,
                      "\"%s\" -> %lld -> \"%s\" -> %lld", s, (long long)us, buf, (long long)back);
        } else {
            /* Only an offset pushes a 4-digit year out of 0..9999. */
            CHECK_MSG(strpbrk(s + 19, "+-") != NULL, "\"%s\" -> %lld", s, (long long)us);
        }
    } else {
        CHECK(err == K8SLEASE_EPROTOCOL);
    }
    compare_with_exec_parser(s, err, us);
    free(s);

    if (size < 8)
        return 0;
    memcpy(&raw, data, sizeof(raw));
    /* Any int64 formats within the buffer... */
    kl__microtime_format((int64_t)raw, buf);
    CHECK(strlen(buf) < KL_MICROTIME_BUFLEN);
    /* ...and every instant of years 0..9999 parses back from its text. */
    us = US_YEAR0 + (int64_t)(raw % (uint64_t)(US_YEAR10000 - US_YEAR0));
    kl__microtime_format(us, buf);
    CHECK_MSG(strlen(buf) == 27, "%lld -> \"%s\"", (long long)us, buf);
    CHECK_MSG(kl__microtime_parse(buf, &back) == 0 && back == us, "%lld -> \"%s\" -> %lld",
              (long long)us, buf, (long long)back);
    return 0;
}
