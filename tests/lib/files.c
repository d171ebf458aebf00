/* Test files: see testlib.h. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>

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
