/* Replays every file of fuzz/corpus/<target>/ and fuzz/regressions/<target>/
 * through the fuzz targets, built without libFuzzer: the unit suite keeps
 * every input the fuzzers ever broke on (and the seeds) passing, under
 * whatever sanitizer or valgrind runs the suite. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/common.h"
#include "targets.h"

#define FUZZ_DIR K8SLEASE_TEST_DATA "/../../fuzz"

/* The whole file in a buffer of exactly its size, so that ASan catches a
 * read past the end as libFuzzer would. */
static uint8_t *read_input(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf;
    long n;

    if (!f)
        fail_msg("cannot open %s", path);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    n = ftell(f);
    assert_true(n >= 0);
    rewind(f);
    buf = malloc(n ? (size_t)n : 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *size = (size_t)n;
    return buf;
}

/* Runs every regular file of dir (absent: none); returns how many. */
static size_t replay_dir(const kl_fuzz_target *t, const char *dir)
{
    char path[PATH_MAX];
    struct dirent *e;
    size_t n = 0, size;
    uint8_t *data;
    DIR *d = opendir(dir);

    if (!d)
        return 0;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        data = read_input(path, &size);
        kl_fuzz_input_name = path;
        assert_int_equal(t->fn(data, size), 0);
        kl_fuzz_input_name = NULL;
        free(data);
        n++;
    }
    closedir(d);
    return n;
}

static void replay_target(void **state)
{
    const kl_fuzz_target *t = *state;
    char dir[PATH_MAX];
    size_t seeds, regressions;

    snprintf(dir, sizeof(dir), "%s/corpus/%s", FUZZ_DIR, t->name);
    seeds = replay_dir(t, dir);
    snprintf(dir, sizeof(dir), "%s/regressions/%s", FUZZ_DIR, t->name);
    regressions = replay_dir(t, dir);
    print_message("%s: %zu seeds, %zu regressions\n", t->name, seeds, regressions);
    /* A target without seeds means the corpus went missing. */
    assert_true(seeds > 0);
}

int main(void)
{
    struct CMUnitTest tests[16];
    size_t i;

    if (kl_fuzz_target_count > KL_ARRAY_LEN(tests))
        return 1;
    for (i = 0; i < kl_fuzz_target_count; i++) {
        memset(&tests[i], 0, sizeof(tests[i]));
        tests[i].name = kl_fuzz_targets[i].name;
        tests[i].test_func = replay_target;
        tests[i].initial_state = (void *)&kl_fuzz_targets[i];
    }
    return _cmocka_run_group_tests("fuzz_replay", tests, kl_fuzz_target_count, NULL, NULL);
}
