/* Test files and their encodings: see testlib.h. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"

char *kl_test_read_file(const char *path, size_t *len)
{
    FILE *f;
    long n;
    char *buf;

    f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s", path);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    n = ftell(f);
    assert_true(n >= 0);
    rewind(f);
    buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    if (len)
        *len = (size_t)n;
    return buf;
}

char *kl_test_read_data(const char *dir, const char *name, size_t *len)
{
    char path[512];

    snprintf(path, sizeof(path), "%s/%s/%s", K8SLEASE_TEST_DATA, dir, name);
    return kl_test_read_file(path, len);
}

char *kl_test_base64(const char *data)
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *in = (const unsigned char *)data;
    size_t len = strlen(data), i, o = 0;
    char *out = malloc((len + 2) / 3 * 4 + 1);

    assert_non_null(out);
    for (i = 0; i < len; i += 3) {
        unsigned v = (unsigned)in[i] << 16;

        if (i + 1 < len)
            v |= (unsigned)in[i + 1] << 8;
        if (i + 2 < len)
            v |= in[i + 2];
        out[o++] = alphabet[v >> 18 & 63];
        out[o++] = alphabet[v >> 12 & 63];
        out[o++] = i + 1 < len ? alphabet[v >> 6 & 63] : '=';
        out[o++] = i + 2 < len ? alphabet[v & 63] : '=';
    }
    out[o] = '\0';
    return out;
}
