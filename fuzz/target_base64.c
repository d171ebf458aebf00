/* Fuzz target "base64" (fuzz/corpus/base64): base64 decoding against a reference encoder. See
 * targets.h. */
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
#include "etcd/codec.h"
#include "core/http.h"
#include "k8s/kubeconfig.h"
#include "k8s/codec.h"

/* ------------------------------------------------------------------------ */
/* Base64                                                                   */
/* ------------------------------------------------------------------------ */

static int b64_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

int kl_fuzz_base64(const uint8_t *data, size_t size)
{
    const char *in = (const char *)data;
    char *out, *enc, *again, *squeezed;
    size_t len = 0, len2 = 0, n = 0, i;
    int ok = -1;

    out = kl__base64_decode(in, size, &len, &ok);
    if (!out) {
        CHECK(ok == 0); /* ok = 1 would mean out of memory */
        return 0;
    }
    CHECK(ok == 1);
    CHECK(out[len] == '\0');
    CHECK(len <= size / 4 * 3);

    /* The canonical encoding of the result decodes to the same bytes... */
    enc = b64_encode((const unsigned char *)out, len);
    again = kl__base64_decode(enc, strlen(enc), &len2, &ok);
    CHECK(again != NULL && len2 == len && memcmp(again, out, len) == 0);

    /* ...and is the input without whitespace, except for the unused low
     * bits of the last quartet, which decoders ignore as Go's does. */
    squeezed = malloc(size + 1);
    CHECK(squeezed != NULL);
    for (i = 0; i < size; i++)
        if (!b64_space(in[i]))
            squeezed[n++] = in[i];
    squeezed[n] = '\0';
    CHECK_MSG(n == strlen(enc), "input %s re-encodes as %s", squeezed, enc);
    for (i = 0; i < n; i++) {
        int last_data = i + 1 == n || squeezed[i + 1] == '=';

        CHECK_MSG(squeezed[i] == enc[i] || (last_data && n - i <= 3), "input %s re-encodes as %s",
                  squeezed, enc);
    }
    free(squeezed);
    kl__free(again);
    free(enc);
    kl__free(out);
    return 0;
}
