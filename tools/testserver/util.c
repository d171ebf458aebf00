/*
 * util.c - buffers, clocks, time formats, UUIDs, PRNG, logging and files.
 */
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/rand.h>

/* ---- buffers ---------------------------------------------------------- */

int ts_buf_append(ts_buf *b, const void *p, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d)
            return -1;
        b->data = d;
        b->cap = cap;
    }
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int ts_buf_puts(ts_buf *b, const char *s)
{
    return ts_buf_append(b, s, strlen(s));
}

int ts_buf_printf(ts_buf *b, const char *fmt, ...)
{
    va_list ap;
    char small[256];

    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (n < 0)
        return -1;
    if ((size_t)n < sizeof(small))
        return ts_buf_append(b, small, (size_t)n);

    char *big = malloc((size_t)n + 1);
    if (!big)
        return -1;
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    int rc = ts_buf_append(b, big, (size_t)n);
    free(big);
    return rc;
}

void ts_buf_free(ts_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

/* ---- time ------------------------------------------------------------- */

int64_t ts_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void ts_format_time(time_t t, char out[32])
{
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

void ts_format_microtime_now(char out[32])
{
    struct timespec ts;
    struct tm tm;
    char sec[20];

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(sec, sizeof(sec), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, 32, "%s.%06uZ", sec, (unsigned)(ts.tv_nsec / 1000) % 1000000u);
}

/*
 * Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
 * days_from_civil). timegm() is not POSIX, and we build with
 * _POSIX_C_SOURCE only.
 */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
    y -= m <= 2;
    const int64_t era = (y >= 0 ? y : y - 399) / 400;
    const unsigned yoe = (unsigned)(y - era * 400);
    const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

static bool is_leap(int y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

static int digits(const char *s, int n)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

/*
 * Parses "YYYY-MM-DDTHH:MM:SS", then an optional fraction of frac_min..frac_max
 * digits, then "Z" or "+hh:mm"/"-hh:mm"; the whole string must be consumed.
 * Field ranges are checked as Go's time.Parse does.
 */
static int parse_rfc3339(const char *s, int frac_min, int frac_max, time_t *sec, long *usec)
{
    static const int mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (strlen(s) < 20 || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' ||
        s[16] != ':')
        return -1;
    int y = digits(s, 4), mo = digits(s + 5, 2), d = digits(s + 8, 2);
    int h = digits(s + 11, 2), mi = digits(s + 14, 2), se = digits(s + 17, 2);
    if (y < 0 || mo < 1 || mo > 12 || d < 1 || h < 0 || h > 23 || mi < 0 || mi > 59 || se < 0 ||
        se > 59)
        return -1;
    if (d > mdays[mo - 1] + (mo == 2 && is_leap(y)))
        return -1;

    const char *p = s + 19;
    long frac = 0;
    int nfrac = 0;
    if (*p == '.') {
        p++;
        while (p[nfrac] >= '0' && p[nfrac] <= '9') {
            if (nfrac < 6)
                frac = frac * 10 + (p[nfrac] - '0');
            nfrac++;
        }
        if (nfrac == 0)
            return -1;
        p += nfrac;
    }
    if (nfrac < frac_min || nfrac > frac_max)
        return -1;
    for (int i = nfrac; i < 6; i++)
        frac *= 10;

    long off = 0;
    if (*p == 'Z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int oh = digits(p + 1, 2), om = (p[1] && p[2] && p[3] == ':') ? digits(p + 4, 2) : -1;
        if (oh < 0 || oh > 23 || om < 0 || om > 59)
            return -1;
        off = (oh * 60L + om) * 60L * (*p == '-' ? -1 : 1);
        p += 6;
    } else {
        return -1;
    }
    if (*p != '\0')
        return -1;

    int64_t t = days_from_civil(y, (unsigned)mo, (unsigned)d) * 86400 + h * 3600 + mi * 60 + se;
    *sec = (time_t)(t - off);
    if (usec)
        *usec = frac;
    return 0;
}

int ts_parse_time(const char *s, time_t *out)
{
    return parse_rfc3339(s, 0, 9, out, NULL);
}

int ts_normalize_microtime(const char *in, char out[32])
{
    time_t sec;
    long usec;
    struct tm tm;
    char buf[20];

    /* Go's layout ".000000" demands exactly six digits when parsing. */
    if (parse_rfc3339(in, 6, 6, &sec, &usec) < 0)
        return -1;
    if (!gmtime_r(&sec, &tm))
        return -1;
    strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, 32, "%s.%06uZ", buf, (unsigned)usec % 1000000u);
    return 0;
}

int64_t ts_wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int ts_microtime_us(const char *s, int64_t *us)
{
    time_t sec;
    long usec;
    if (!s || parse_rfc3339(s, 0, 9, &sec, &usec) < 0)
        return -1;
    *us = (int64_t)sec * 1000000 + usec;
    return 0;
}

void ts_format_microtime(int64_t us, char out[32])
{
    time_t sec = (time_t)(us / 1000000);
    struct tm tm;
    char buf[20];
    gmtime_r(&sec, &tm);
    strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, 32, "%s.%06uZ", buf, (unsigned)(us % 1000000));
}

/* ---- randomness ------------------------------------------------------- */

void ts_uuid4(char out[37])
{
    unsigned char b[16];
    if (RAND_bytes(b, sizeof(b)) != 1) {
        /* The CSPRNG does not fail on Linux once seeded; degrade, don't die. */
        for (size_t i = 0; i < sizeof(b); i++)
            b[i] = (unsigned char)rand();
    }
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
    snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
}

int ts_random_hex(char *out, size_t nbytes)
{
    unsigned char b[64];
    if (nbytes > sizeof(b) || RAND_bytes(b, (int)nbytes) != 1)
        return -1;
    for (size_t i = 0; i < nbytes; i++)
        snprintf(out + 2 * i, 3, "%02x", b[i]);
    return 0;
}

void ts_rng_seed(ts_rng *r, uint64_t seed)
{
    r->state = seed;
}

double ts_rng_unit(ts_rng *r)
{
    uint64_t z = (r->state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

/* ---- logging ---------------------------------------------------------- */

static bool log_quiet;

void ts_log_set_quiet(bool quiet)
{
    log_quiet = quiet;
}

bool ts_log_is_quiet(void)
{
    return log_quiet;
}

void ts_vlog(const char *fmt, va_list ap)
{
    char line[1024];
    if (log_quiet)
        return;
    if (vsnprintf(line, sizeof(line), fmt, ap) < 0)
        return;
    size_t len = strlen(line);
    if (len > 0 && line[len - 1] == '\n')
        line[len - 1] = '\0';
    /* One call per line so lines from several threads do not interleave. */
    fprintf(stderr, "k8slease-testserver: %s\n", line);
}

void ts_log(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ts_vlog(fmt, ap);
    va_end(ap);
}

/* ---- files ------------------------------------------------------------ */

static char *path_join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, name);
    return p;
}

int ts_write_file(const char *dir, const char *name, const void *data, size_t len, int mode)
{
    int rc = -1, fd = -1;
    char *path = path_join(dir, name);
    char *tmp = NULL;
    if (!path)
        goto out;
    size_t n = strlen(path) + 8;
    if (!(tmp = malloc(n)))
        goto out;
    snprintf(tmp, n, "%s.tmp", path);

    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, (mode_t)mode);
    if (fd < 0)
        goto out;
    /* O_CREAT does not change the mode of a file left by an earlier run. */
    if (fchmod(fd, (mode_t)mode) < 0)
        goto out;
    const char *p = data;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            goto out;
        }
        p += w;
        len -= (size_t)w;
    }
    if (close(fd) < 0) {
        fd = -1;
        goto out;
    }
    fd = -1;
    /* rename() is atomic: a tokenFile reader never sees half a token. */
    if (rename(tmp, path) < 0)
        goto out;
    rc = 0;
out:
    if (fd >= 0) {
        close(fd);
        unlink(tmp);
    }
    free(tmp);
    free(path);
    return rc;
}

int ts_read_file(const char *dir, const char *name, char **out, size_t *len)
{
    ts_buf b = {0};
    char chunk[4096];
    char *path = path_join(dir, name);
    if (!path)
        return -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    free(path);
    if (fd < 0)
        return -1;
    for (;;) {
        ssize_t r = read(fd, chunk, sizeof(chunk));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 || (r > 0 && ts_buf_append(&b, chunk, (size_t)r) < 0)) {
            close(fd);
            ts_buf_free(&b);
            return -1;
        }
        if (r == 0)
            break;
    }
    close(fd);
    if (!b.data && ts_buf_append(&b, "", 0) < 0)
        return -1;
    *out = b.data;
    if (len)
        *len = b.len;
    return 0;
}

bool ts_file_exists(const char *dir, const char *name)
{
    struct stat st;
    char *path = path_join(dir, name);
    bool ok = path && stat(path, &st) == 0 && S_ISREG(st.st_mode);
    free(path);
    return ok;
}

int ts_remove_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) < 0)
        return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(st.st_mode))
        return unlink(path);

    DIR *d = opendir(path);
    if (!d)
        return -1;
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char *child = path_join(path, e->d_name);
        if (!child || ts_remove_tree(child) < 0)
            rc = -1;
        free(child);
    }
    closedir(d);
    if (rmdir(path) < 0)
        rc = -1;
    return rc;
}

/* ---- base64 ----------------------------------------------------------- */

char *ts_base64_encode(const void *data, size_t len)
{
    if (len > INT_MAX / 2)
        return NULL;
    char *out = malloc(4 * ((len + 2) / 3) + 1);
    if (out)
        EVP_EncodeBlock((unsigned char *)out, data, (int)len);
    return out;
}

long ts_base64_decode(const char *in, unsigned char **out)
{
    size_t n = strlen(in);
    if (n == 0 || n % 4 != 0 || n > INT_MAX / 2)
        return -1;
    unsigned char *buf = malloc(n / 4 * 3 + 1);
    if (!buf)
        return -1;
    int len = EVP_DecodeBlock(buf, (const unsigned char *)in, (int)n);
    if (len < 0) {
        free(buf);
        return -1;
    }
    /* EVP_DecodeBlock counts the padding as zero bytes: drop them. */
    if (in[n - 1] == '=')
        len--;
    if (in[n - 2] == '=')
        len--;
    buf[len] = '\0';
    *out = buf;
    return len;
}

char *ts_strdup(const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}
