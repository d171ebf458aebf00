/* Fuzz target "watch" (fuzz/corpus/watch): watch streams: the chunked line splitter against a
 * reference framing, and the events. See targets.h. */
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
/* Watch stream                                                             */
/* ------------------------------------------------------------------------ */

/* The framing rules of kl__line_splitter applied to the whole stream at
 * once: the chunked splitter must deliver exactly these lines. */
typedef struct ref_stream {
    const char *data;
    size_t len, pos, max_line;
} ref_stream;

/* 1 with the next non-empty line, 0 when no complete line is left, -1 when
 * the stream breaks the length limit here (a complete line longer than
 * max_line, or an unfinished one that can no longer fit). */
static int ref_next(ref_stream *r, const char **line, size_t *n)
{
    for (;;) {
        const char *start = r->data + r->pos;
        const char *nl;

        if (r->pos >= r->len)
            return 0;
        nl = memchr(start, '\n', r->len - r->pos);
        if (!nl)
            return r->len - r->pos > r->max_line + 1 ? -1 : 0;
        *line = start;
        *n = (size_t)(nl - start);
        r->pos += *n + 1;
        if (*n > 0 && start[*n - 1] == '\r')
            (*n)--;
        if (*n > r->max_line)
            return -1;
        if (*n > 0)
            return 1;
    }
}

/* The scanner accepts only events jansson accepts, and reads the same. */
static void check_scan(const char *line, size_t len)
{
    kl__watch_event a, b;
    int rc = kl__watch_event_scan(&a, line, len);
    int err = kl__watch_event_parse_json(&b, line, len);

    CHECK(rc == 0 || rc == 1);
    if (rc == 0) {
        CHECK_MSG(err == 0, "the scanner accepted what jansson rejects: %s", kl__error_get());
        CHECK(a.type == b.type);
        CHECK((a.lease == NULL) == (b.lease == NULL));
        if (a.lease)
            kl_fuzz_check_same_lease(a.lease, b.lease);
        CHECK((a.bookmark_rv == NULL) == (b.bookmark_rv == NULL));
        CHECK(!a.bookmark_rv || strcmp(a.bookmark_rv, b.bookmark_rv) == 0);
        CHECK(a.type != KL_WATCH_ERROR);
    }
    kl__watch_event_clear(&a);
    kl__watch_event_clear(&b);
}

static void parse_event(const char *line, size_t len)
{
    kl__watch_event ev;
    int err;

    check_scan(line, len);
    err = kl__watch_event_parse(&ev, line, len);

    if (err < 0) {
        CHECK(err == K8SLEASE_EPROTOCOL);
        CHECK(ev.lease == NULL && ev.bookmark_rv == NULL && ev.status.message == NULL);
        return;
    }
    switch (ev.type) {
    case KL_WATCH_ADDED:
    case KL_WATCH_MODIFIED:
    case KL_WATCH_DELETED:
        CHECK(ev.lease != NULL);
        kl_fuzz_check_lease(ev.lease);
        break;
    case KL_WATCH_BOOKMARK:
        CHECK(ev.bookmark_rv != NULL);
        break;
    case KL_WATCH_ERROR:
        CHECK(ev.status.reason != NULL && ev.status.message != NULL);
        break;
    default:
        CHECK_MSG(0, "unknown event type %d", (int)ev.type);
    }
    kl__watch_event_clear(&ev);
}

static int on_line(const char *line, size_t len, void *arg)
{
    ref_stream *ref = arg;
    const char *want = NULL;
    size_t want_len = 0;
    int r = ref_next(ref, &want, &want_len);

    CHECK_MSG(r == 1, "the splitter delivered a line the reference does not have (%d)", r);
    CHECK_MSG(len == want_len && memcmp(line, want, len) == 0, "line %.*s, want %.*s",
              (int)(len < 200 ? len : 200), line, (int)(want_len < 200 ? want_len : 200), want);
    CHECK(line[len] == '\0');
    parse_event(line, len);
    return 0;
}

/* Input: byte 0 picks the line limit (bit 7: k8s/informer.c's 4 MiB, else
 * 8 * (byte & 127) bytes), byte 1 the chunk sizes, the rest is the stream. */
int kl_fuzz_watch(const uint8_t *data, size_t size)
{
    kl__line_splitter s;
    ref_stream ref = {0};
    const char *stream;
    size_t len, off = 0, max_chunk;
    uint32_t rng;
    int err = 0, r;
    const char *line;
    size_t n;

    if (size < 2)
        return 0;
    ref.max_line = (data[0] & 0x80) ? WATCH_MAX_LINE : (size_t)(data[0] & 0x7f) * 8;
    max_chunk = (size_t)1 << (data[1] & 0x0f);
    rng = 0x9e3779b9u ^ ((uint32_t)data[1] * 0x01000193u);
    stream = (const char *)data + 2;
    len = size - 2;
    ref.data = stream;
    ref.len = len;

    kl__line_splitter_init(&s, ref.max_line);
    while (off < len && err == 0) {
        size_t chunk;

        rng ^= rng << 13;
        rng ^= rng >> 17;
        rng ^= rng << 5;
        chunk = 1 + rng % max_chunk;
        if (chunk > len - off)
            chunk = len - off;
        /* A read may also come back empty. */
        if (rng & 0x100)
            CHECK(kl__line_splitter_feed(&s, stream + off, 0, on_line, &ref) == 0);
        err = kl__line_splitter_feed(&s, stream + off, chunk, on_line, &ref);
        off += chunk;
    }
    kl__line_splitter_free(&s);

    r = ref_next(&ref, &line, &n);
    if (err == 0)
        CHECK_MSG(r == 0, "the reference has more lines or an error (%d) the splitter missed", r);
    else
        CHECK_MSG(err == K8SLEASE_EPROTOCOL && r == -1,
                  "splitter error %d where the reference has %d", err, r);
    return 0;
}
