/* Text helpers the codecs share: see core/text.h. */
#include "core/text.h"

#include <stdint.h>
#include <string.h>

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

void kl__trim(char *s)
{
    size_t start = 0, end = strlen(s);

    while (start < end && is_space(s[start]))
        start++;
    while (end > start && is_space(s[end - 1]))
        end--;
    memmove(s, s + start, end - start);
    s[end - start] = '\0';
}

/* ------------------------------------------------------------------------ */
/* Line framing                                                             */
/* ------------------------------------------------------------------------ */

void kl__line_splitter_init(kl__line_splitter *s, size_t max_line)
{
    memset(s, 0, sizeof(*s));
    /* Leaves room for the '\r' and NUL without size_t overflow. */
    s->max_line = max_line < SIZE_MAX / 2 ? max_line : SIZE_MAX / 2;
}

/* Appends n bytes of the current line. One byte beyond max_line is allowed
 * while the line is incomplete: it may be the '\r' of "\r\n". So the buffer
 * never holds more than max_line + 2 bytes. */
static int splitter_append(kl__line_splitter *s, const char *data, size_t n)
{
    size_t need, cap;
    char *p;

    if (n > s->max_line + 1 - s->len)
        return kl__error_set(K8SLEASE_EPROTOCOL, "watch stream: line longer than %zu bytes",
                             s->max_line);
    need = s->len + n + 1;
    if (need > s->cap) {
        cap = s->cap ? s->cap : 1024;
        while (cap < need)
            cap *= 2;
        if (cap > s->max_line + 2)
            cap = s->max_line + 2;
        p = kl__realloc(s->buf, cap);
        if (!p)
            return kl__error_set(K8SLEASE_ENOMEM, "watch stream: out of memory");
        s->buf = p;
        s->cap = cap;
    }
    memcpy(s->buf + s->len, data, n);
    s->len += n;
    s->buf[s->len] = '\0';
    return 0;
}

/* Lines are copied into s->buf so on_line always gets a NUL-terminated
 * string; watch events are small, the copy costs nothing that matters.
 * After an error or a nonzero on_line the rest of the chunk is dropped:
 * the caller is expected to abandon the stream. */
int kl__line_splitter_feed(kl__line_splitter *s, const char *data, size_t len,
                           int (*on_line)(const char *line, size_t len, void *arg), void *arg)
{
    const char *nl;
    size_t n, line_len;
    int err = 0;

    while (len > 0) {
        nl = memchr(data, '\n', len);
        n = nl ? (size_t)(nl - data) : len;
        if ((err = splitter_append(s, data, n)) < 0)
            goto out;
        data += n;
        len -= n;
        if (!nl)
            break;
        data++;
        len--;
        line_len = s->len;
        if (line_len > 0 && s->buf[line_len - 1] == '\r')
            s->buf[--line_len] = '\0';
        if (line_len > s->max_line) {
            err = kl__error_set(K8SLEASE_EPROTOCOL, "watch stream: line longer than %zu bytes",
                                s->max_line);
            goto out;
        }
        s->len = 0;
        if (line_len > 0 && (err = on_line(s->buf, line_len, arg)) != 0)
            goto out;
    }
out:
    if (err != 0)
        s->len = 0;
    return err;
}

void kl__line_splitter_free(kl__line_splitter *s)
{
    kl__free(s->buf);
    memset(s, 0, sizeof(*s));
}

/* ------------------------------------------------------------------------ */
/* Base64                                                                   */
/* ------------------------------------------------------------------------ */

static int b64_value(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

char *kl__base64_decode(const char *in, size_t in_len, size_t *out_len, int *ok)
{
    unsigned char *out = NULL;
    unsigned int quad = 0;
    size_t i, len = 0, nq = 0, npad = 0;
    int dummy;

    if (!ok)
        ok = &dummy;
    *ok = 0;
    if (out_len)
        *out_len = 0;
    if (!(out = kl__malloc(in_len / 4 * 3 + 3))) {
        *ok = 1;
        return NULL;
    }
    for (i = 0; i < in_len; i++) {
        int v;

        if (is_space(in[i]))
            continue;
        if (in[i] == '=') {
            /* Padding only ends the last quartet: "xx==" or "xxx=". */
            if (nq < 2)
                goto bad;
            npad++;
            v = 0;
        } else {
            if (npad || (v = b64_value(in[i])) < 0)
                goto bad;
        }
        quad = quad << 6 | (unsigned int)v;
        if (++nq == 4) {
            out[len++] = (unsigned char)(quad >> 16);
            if (npad < 2)
                out[len++] = (unsigned char)(quad >> 8);
            if (npad < 1)
                out[len++] = (unsigned char)quad;
            nq = 0;
            quad = 0;
            if (npad)
                break;
        }
    }
    /* Nothing but whitespace may follow the padding. */
    for (i++; i < in_len; i++)
        if (!is_space(in[i]))
            goto bad;
    if (nq != 0)
        goto bad;
    out[len] = '\0';
    if (out_len)
        *out_len = len;
    *ok = 1;
    return (char *)out;
bad:
    kl__free(out);
    return NULL;
}
