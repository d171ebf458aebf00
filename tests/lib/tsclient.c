/* Helpers of the test server's own suites: see tsclient.h. */
#include "tsclient.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <setjmp.h>
#include <cmocka.h>

long long tc_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void tc_pause_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

struct timespec tc_deadline_in(clockid_t clock, long ms)
{
    struct timespec ts;

    clock_gettime(clock, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

static char *vfmt(const char *f, va_list ap)
{
    va_list ap2;
    int n;
    char *s;

    va_copy(ap2, ap);
    n = vsnprintf(NULL, 0, f, ap2);
    va_end(ap2);
    assert_true(n >= 0);
    s = malloc((size_t)n + 1);
    assert_non_null(s);
    vsnprintf(s, (size_t)n + 1, f, ap);
    return s;
}

char *tc_fmt(const char *f, ...)
{
    va_list ap;
    char *s;

    va_start(ap, f);
    s = vfmt(f, ap);
    va_end(ap);
    return s;
}

json_t *tc_at(json_t *j, const char *path)
{
    char tmp[256];

    snprintf(tmp, sizeof(tmp), "%s", path);
    for (char *save = NULL, *t = strtok_r(tmp, ".", &save); t && j; t = strtok_r(NULL, ".", &save))
        j = json_is_array(j) ? json_array_get(j, (size_t)atoi(t)) : json_object_get(j, t);
    return j;
}

json_t *tc_stats(ts_server *s)
{
    long st;
    char *body = NULL;
    json_t *j;

    assert_int_equal(ts_control(s, "GET", "/testserver/v1/stats", NULL, &st, &body), 0);
    assert_int_equal(st, 200);
    j = json_loads(body, 0, NULL);
    free(body);
    assert_non_null(j);
    return j;
}

long long tc_stat_int(ts_server *s, const char *path)
{
    json_t *j = tc_stats(s);
    json_t *v = tc_at(j, path);
    long long n;

    if (!json_is_integer(v))
        print_message("no integer at %s in the stats\n", path);
    assert_true(json_is_integer(v));
    n = json_integer_value(v);
    json_decref(j);
    return n;
}

long long tc_stat_or0(ts_server *s, const char *path)
{
    json_t *j = tc_stats(s);
    long long n = json_integer_value(tc_at(j, path));

    json_decref(j);
    return n;
}

/* most: 0 waits for >= n, 1 for <= n. */
static void wait_stat(ts_server *s, const char *path, long long n, long ms, int most)
{
    long long end = tc_now_ms() + ms, v = 0;

    while (tc_now_ms() < end) {
        v = tc_stat_int(s, path);
        if (most ? v <= n : v >= n)
            return;
        tc_pause_ms(20); /* polling interval, not synchronisation */
    }
    print_message("%s stayed at %lld (%s %lld) for %ld ms\n", path, v, most ? ">" : "<", n, ms);
    fail();
}

void tc_wait_stat(ts_server *s, const char *path, long long n, long ms)
{
    wait_stat(s, path, n, ms, 0);
}

void tc_wait_stat_at_most(ts_server *s, const char *path, long long n, long ms)
{
    wait_stat(s, path, n, ms, 1);
}

void tc_control(ts_server *s, const char *method, const char *path, const char *body, long want)
{
    long st;
    char *resp = NULL;

    assert_int_equal(ts_control(s, method, path, body, &st, &resp), 0);
    if (st != want)
        print_message("%s %s -> %ld: %s\n", method, path, st, resp);
    assert_int_equal(st, want);
    free(resp);
}

char *tc_run(int *status, const char *f, ...)
{
    va_list ap;
    char *cmd, chunk[4096];
    ts_buf b = {0};
    size_t r;
    FILE *p;
    int rc;

    va_start(ap, f);
    cmd = vfmt(f, ap);
    va_end(ap);
    p = popen(cmd, "r");
    assert_non_null(p);
    while ((r = fread(chunk, 1, sizeof(chunk), p)) > 0)
        ts_buf_write(chunk, 1, r, &b);
    rc = pclose(p);
    *status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    if (*status != 0)
        print_message("%s\n-> %d: %s\n", cmd, *status, b.data ? b.data : "");
    free(cmd);
    return b.data ? b.data : strdup("");
}
