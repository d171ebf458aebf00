/* Reading a child's output with bounded waits (testlib.h). */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "testlib.h"

static long long mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Wait until fd is readable or the deadline passes: 1, 0 on timeout. */
static int readable(int fd, long long until)
{
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        long long left = until - mono_ms();
        int n;

        if (left <= 0)
            return 0;
        n = poll(&p, 1, (int)(left > 60000 ? 60000 : left));
        if (n > 0)
            return 1;
        if (n < 0 && errno != EINTR)
            return 0;
    }
}

int kl_test_read_line(int fd, char *buf, size_t size, int timeout_ms)
{
    long long until = mono_ms() + timeout_ms;
    size_t n = 0;

    if (size == 0)
        return -1;
    for (;;) {
        char c;
        ssize_t r;

        if (!readable(fd, until))
            break;
        if ((r = read(fd, &c, 1)) < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        if (c == '\n') {
            buf[n] = '\0';
            return 0;
        }
        if (n + 1 < size)
            buf[n++] = c;
    }
    buf[n] = '\0';
    return -1;
}

int kl_test_read_all(int fd, char **out, size_t *len, int timeout_ms)
{
    long long until = mono_ms() + timeout_ms;
    size_t cap = 256;
    char *buf = malloc(cap);

    *out = NULL;
    *len = 0;
    if (!buf)
        return -1;
    for (;;) {
        ssize_t r;

        if (*len + 1 == cap) {
            char *grown = realloc(buf, cap * 2);

            if (!grown)
                break;
            buf = grown;
            cap *= 2;
        }
        if (!readable(fd, until))
            break;
        if ((r = read(fd, buf + *len, cap - 1 - *len)) < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            buf[*len] = '\0';
            *out = buf;
            return r == 0 ? 0 : -1;
        }
        *len += (size_t)r;
    }
    buf[*len] = '\0';
    *out = buf;
    return -1;
}
