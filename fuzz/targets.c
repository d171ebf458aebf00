/* Fuzz targets: every parser that reads bytes from outside the process (the
 * API server's bodies and watch streams, kubeconfig files, exec plugin
 * output, the etcd gateway's bodies) plus MicroTime and base64, and the etcd
 * request encoders, each with the properties it must keep
 * beyond "does not crash": round trips, agreement with a reference, and
 * clean errors. See targets.h. */
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

#define API_V1      "client.authentication.k8s.io/v1"
#define API_V1BETA1 "client.authentication.k8s.io/v1beta1"

/* RFC 3339 years are 0000..9999: the µs range MicroTime can round-trip. */
#define US_YEAR0     INT64_C(-62167219200000000) /* 0000-01-01T00:00:00Z */
#define US_YEAR10000 INT64_C(253402300800000000) /* 10000-01-01T00:00:00Z */

/* watch.c's limit on one watch event line. */
#define WATCH_MAX_LINE (4 * 1024 * 1024)

const char *kl_fuzz_input_name;

static void check_failed(const char *file, int line, const char *cond, const char *fmt, ...)
    KL_PRINTF(4, 5);

static void check_failed(const char *file, int line, const char *cond, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "%s:%d: property broken: %s\n", file, line, cond);
    if (kl_fuzz_input_name)
        fprintf(stderr, "  input: %s\n", kl_fuzz_input_name);
    if (fmt[0]) {
        fputs("  ", stderr);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
    }
    fprintf(stderr, "  last library error: %s\n", kl__error_get());
    abort();
}

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            check_failed(__FILE__, __LINE__, #cond, "%s", "");                                     \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                       \
    do {                                                                                           \
        if (!(cond))                                                                               \
            check_failed(__FILE__, __LINE__, #cond, __VA_ARGS__);                                  \
    } while (0)

static const char *str_or_empty(const char *s)
{
    return s ? s : "";
}

static int in_rfc3339_range(int64_t us)
{
    return us >= US_YEAR0 && us < US_YEAR10000;
}

/* The input as a NUL-terminated string (cut at an embedded NUL). */
static char *cstring(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);

    CHECK(s != NULL);
    if (size)
        memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

/* ------------------------------------------------------------------------ */
/* Lease                                                                    */
/* ------------------------------------------------------------------------ */

static void check_lease(const kl__lease *l)
{
    CHECK(l->root != NULL && json_is_object(l->root));
    CHECK(l->name != NULL && l->name[0] != '\0');
    CHECK(l->ns != NULL && l->rv != NULL && l->uid != NULL);
    CHECK(l->spec.duration_s >= 0 && l->spec.duration_s <= INT32_MAX);
    CHECK(l->spec.transitions >= 0 && l->spec.transitions <= INT32_MAX);
}

static void check_same_spec(const kl__lease_spec *want, const kl__lease_spec *got)
{
    /* An absent holder is written as "". */
    CHECK(strcmp(str_or_empty(want->holder), str_or_empty(got->holder)) == 0);
    CHECK(want->duration_s == got->duration_s);
    CHECK(want->acquire_us == got->acquire_us);
    CHECK(want->renew_us == got->renew_us);
    CHECK(want->transitions == got->transitions);
}

/* The object without the spec fields the codec owns, with spec {} when it
 * had none: what an update must keep byte for byte. */
static json_t *unowned_fields(const json_t *root)
{
    static const char *const owned[] = {"holderIdentity", "leaseDurationSeconds", "acquireTime",
                                        "renewTime", "leaseTransitions"};
    json_t *copy = json_deep_copy(root), *spec;

    CHECK(copy != NULL);
    spec = json_object_get(copy, "spec");
    if (!json_is_object(spec)) {
        CHECK(json_object_set_new(copy, "spec", json_object()) == 0);
    } else {
        for (size_t i = 0; i < KL_ARRAY_LEN(owned); i++)
            json_object_del(spec, owned[i]);
    }
    return copy;
}

static kl__lease *parse_back(const char *body)
{
    kl__lease *l = NULL;
    int err = kl__lease_parse(&l, body, strlen(body));

    CHECK_MSG(err == 0, "encoded body does not parse back: %s", body);
    check_lease(l);
    return l;
}

int kl_fuzz_lease(const uint8_t *data, size_t size)
{
    kl__lease *l = NULL, *back;
    json_t *want, *got;
    char *body;
    int err;

    err = kl__lease_parse(&l, (const char *)data, size);
    if (err < 0) {
        CHECK(err == K8SLEASE_EPROTOCOL);
        CHECK(l == NULL);
        CHECK(kl__error_get()[0] != '\0');
        return 0;
    }
    check_lease(l);

    /* An UPDATE with the parsed spec reads back as the same Lease. Times
     * outside years 0..9999 cannot be written as RFC 3339 (no server
     * stores one): only the encoding itself is checked then. */
    body = kl__lease_encode_update(l, &l->spec);
    CHECK(body != NULL);
    if (in_rfc3339_range(l->spec.acquire_us) && in_rfc3339_range(l->spec.renew_us)) {
        back = parse_back(body);
        CHECK(strcmp(back->name, l->name) == 0 && strcmp(back->ns, l->ns) == 0);
        CHECK(strcmp(back->rv, l->rv) == 0 && strcmp(back->uid, l->uid) == 0);
        check_same_spec(&l->spec, &back->spec);
        want = unowned_fields(l->root);
        got = unowned_fields(back->root);
        CHECK_MSG(json_equal(want, got), "update changed fields it does not own: %s", body);
        json_decref(want);
        json_decref(got);
        kl__lease_free(back);
    }
    kl__free(body);

    /* A CREATE of the same spec under the same name reads back too. */
    body = kl__lease_encode_create(l->ns, l->name, &l->spec);
    CHECK(body != NULL);
    if (in_rfc3339_range(l->spec.acquire_us) && in_rfc3339_range(l->spec.renew_us)) {
        back = parse_back(body);
        CHECK(strcmp(back->name, l->name) == 0 && strcmp(back->ns, l->ns) == 0);
        check_same_spec(&l->spec, &back->spec);
        kl__lease_free(back);
    }
    kl__free(body);
    kl__lease_free(l);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Status                                                                   */
/* ------------------------------------------------------------------------ */

int kl_fuzz_status(const uint8_t *data, size_t size)
{
    static const struct {
        long status;
        int code;
    } cases[] = {
        {400, K8SLEASE_ESERVER},   {401, K8SLEASE_EAUTH},     {403, K8SLEASE_EAUTH},
        {404, K8SLEASE_ENOTFOUND}, {409, K8SLEASE_ECONFLICT}, {410, K8SLEASE_ESERVER},
        {422, K8SLEASE_ESERVER},   {429, K8SLEASE_ESERVER},   {500, K8SLEASE_ESERVER},
        {503, K8SLEASE_ESERVER},
    };
    static const char what[] = "get lease fuzz/x";
    kl__status st;
    size_t i = size % KL_ARRAY_LEN(cases);
    int err;

    err = kl__status_parse(&st, (const char *)data, size);
    if (err == 0) {
        CHECK(st.reason != NULL && st.message != NULL);
    } else {
        CHECK(err == K8SLEASE_EPROTOCOL);
        CHECK(st.reason == NULL && st.message == NULL && st.code == 0);
    }
    kl__status_clear(&st);

    /* The same body as the error body of an HTTP status. */
    kl__error_clear();
    err = kl__http_status_error(cases[i].status, (const char *)data, size, what);
    CHECK(err == cases[i].code);
    CHECK_MSG(strncmp(kl__error_get(), what, strlen(what)) == 0, "message: %s", kl__error_get());
    return 0;
}

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

static void parse_event(const char *line, size_t len)
{
    kl__watch_event ev;
    int err = kl__watch_event_parse(&ev, line, len);

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
        check_lease(ev.lease);
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

/* Input: byte 0 picks the line limit (bit 7: watch.c's 4 MiB, else
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

/* ------------------------------------------------------------------------ */
/* Kubeconfig                                                               */
/* ------------------------------------------------------------------------ */

/* The loader reads files only: the input goes to one temporary file per
 * process, rewritten for every run. */
static char kc_path[PATH_MAX];

static void kc_remove(void)
{
    if (kc_path[0])
        unlink(kc_path);
}

static const char *kc_write(const uint8_t *data, size_t size)
{
    int fd;

    if (!kc_path[0]) {
        const char *dir = getenv("TMPDIR");

        /* A ':' would split the path as a KUBECONFIG list. */
        if (!dir || !dir[0] || strchr(dir, ':') || strlen(dir) > PATH_MAX - 64)
            dir = "/tmp";
        snprintf(kc_path, sizeof(kc_path), "%s/kl_fuzz_kubeconfig_XXXXXX", dir);
        fd = mkstemp(kc_path);
        CHECK_MSG(fd >= 0, "mkstemp %s", kc_path);
        close(fd);
        atexit(kc_remove);
    }
    fd = open(kc_path, O_WRONLY | O_TRUNC | O_CLOEXEC);
    CHECK(fd >= 0);
    while (size > 0) {
        ssize_t n = write(fd, data, size);

        CHECK(n > 0);
        data += n;
        size -= (size_t)n;
    }
    close(fd);
    return kc_path;
}

static void check_restconfig(int err, const kl__restconfig *cfg, const char *path)
{
    if (err < 0) {
        CHECK(err == K8SLEASE_ECONFIG);
        CHECK(cfg == NULL);
        CHECK_MSG(strstr(kl__error_get(), path) != NULL, "message does not name the file");
        return;
    }
    CHECK(cfg != NULL);
    CHECK(cfg->server != NULL);
    CHECK(!strncmp(cfg->server, "https://", 8) || !strncmp(cfg->server, "http://", 7));
    CHECK(cfg->server[strlen(cfg->server) - 1] != '/');
    CHECK(cfg->ns != NULL && cfg->ns[0] != '\0' && cfg->source != NULL);
    CHECK(!cfg->ca_pem || cfg->ca_pem[cfg->ca_pem_len] == '\0');
    CHECK(!cfg->cert_pem || cfg->cert_pem[cfg->cert_pem_len] == '\0');
    CHECK(!cfg->key_pem || cfg->key_pem[cfg->key_pem_len] == '\0');
    CHECK(!(cfg->cert_file || cfg->cert_pem) == !(cfg->key_file || cfg->key_pem));
    if (cfg->exec) {
        CHECK(cfg->exec->api_version != NULL && cfg->exec->command != NULL);
        CHECK(cfg->exec->args != NULL && cfg->exec->env != NULL);
        for (char **e = cfg->exec->env; *e; e++)
            CHECK(strchr(*e, '=') != NULL);
    }
}

int kl_fuzz_kubeconfig(const uint8_t *data, size_t size)
{
    const char *path = kc_write(data, size);
    kl__restconfig *cfg = NULL;
    int err;

    err = kl__restconfig_from_kubeconfig(&cfg, path, NULL);
    check_restconfig(err, cfg, path);
    kl__restconfig_free(cfg);

    /* A requested context takes the other path through the lookup. */
    cfg = NULL;
    err = kl__restconfig_from_kubeconfig(&cfg, path, "fuzz");
    check_restconfig(err, cfg, path);
    kl__restconfig_free(cfg);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Base64                                                                   */
/* ------------------------------------------------------------------------ */

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *b64_encode(const unsigned char *in, size_t len)
{
    char *out = malloc((len + 2) / 3 * 4 + 1);
    size_t i, o = 0;

    CHECK(out != NULL);
    for (i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16;

        if (i + 1 < len)
            v |= (uint32_t)in[i + 1] << 8;
        if (i + 2 < len)
            v |= in[i + 2];
        out[o++] = b64_alphabet[v >> 18 & 63];
        out[o++] = b64_alphabet[v >> 12 & 63];
        out[o++] = i + 1 < len ? b64_alphabet[v >> 6 & 63] : '=';
        out[o++] = i + 2 < len ? b64_alphabet[v & 63] : '=';
    }
    out[o] = '\0';
    return out;
}

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

/* ------------------------------------------------------------------------ */
/* ExecCredential                                                           */
/* ------------------------------------------------------------------------ */

static void check_cred_empty(const kl__exec_credential *c)
{
    CHECK(!c->token && !c->cert_pem && !c->key_pem && c->expiry_us == 0);
}

static void check_same_cred(const kl__exec_credential *a, const kl__exec_credential *b)
{
    CHECK(strcmp(str_or_empty(a->token), str_or_empty(b->token)) == 0);
    CHECK(strcmp(str_or_empty(a->cert_pem), str_or_empty(b->cert_pem)) == 0);
    CHECK(strcmp(str_or_empty(a->key_pem), str_or_empty(b->key_pem)) == 0);
    CHECK(a->expiry_us == b->expiry_us);
}

int kl_fuzz_exec_credential(const uint8_t *data, size_t size)
{
    kl__exec_credential c, v1, v1beta1;
    const char *json = (const char *)data;
    int err, e1, e2;

    err = kl__exec_credential_parse(json, size, NULL, &c);
    if (err < 0) {
        CHECK(err == K8SLEASE_ECONFIG);
        CHECK(kl__error_get()[0] != '\0');
        check_cred_empty(&c);
        return 0;
    }
    CHECK(c.token || c.cert_pem);
    CHECK(!c.cert_pem == !c.key_pem);
    CHECK(!c.token || c.token[0]);

    /* With a configured apiVersion exactly one of the two is accepted, and
     * it gives the same credential. */
    e1 = kl__exec_credential_parse(json, size, API_V1, &v1);
    e2 = kl__exec_credential_parse(json, size, API_V1BETA1, &v1beta1);
    CHECK((e1 == 0) != (e2 == 0));
    check_same_cred(&c, e1 == 0 ? &v1 : &v1beta1);
    check_cred_empty(e1 == 0 ? &v1beta1 : &v1);
    kl__exec_credential_clear(&v1);
    kl__exec_credential_clear(&v1beta1);
    kl__exec_credential_clear(&c);
    return 0;
}

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

/* ------------------------------------------------------------------------ */
/* etcd gateway: decoders                                                   */
/* ------------------------------------------------------------------------ */

/* The outputs of the decoders of etcd_codec.h, one member per kind. */
typedef struct etcd_out {
    kl__etcd_lease lease; /* grant, keepalive, timetolive */
    int64_t revision;     /* header */
    kl__etcd_range range;
    kl__etcd_txn txn;
    kl__etcd_watch_msg watch;
    char *token;
    kl__etcd_error error;
} etcd_out;

typedef enum etcd_dec {
    DEC_GRANT,
    DEC_KEEPALIVE,
    DEC_TIMETOLIVE,
    DEC_HEADER,
    DEC_RANGE,
    DEC_TXN,
    DEC_WATCH,
    DEC_AUTH,
    DEC_ERROR, /* kl__etcd_error_parse: the others' notion of an error body */
    DEC_COUNT
} etcd_dec;

/* How each decoder's own error messages start (a gateway error body gives
 * "etcd: <its message> (gRPC code N)" instead). */
static const char *const etcd_what[DEC_COUNT] = {
    "etcd lease grant response",
    "etcd lease keepalive response",
    "etcd lease timetolive response",
    "etcd response",
    "etcd range response",
    "etcd txn response",
    "etcd watch message",
    "etcd authenticate response",
    "etcd error body",
};

static int etcd_decode(etcd_dec d, etcd_out *o, const char *body, size_t len)
{
    switch (d) {
    case DEC_GRANT:
        return kl__etcd_parse_grant(&o->lease, body, len);
    case DEC_KEEPALIVE:
        return kl__etcd_parse_keepalive(&o->lease, body, len);
    case DEC_TIMETOLIVE:
        return kl__etcd_parse_timetolive(&o->lease, body, len);
    case DEC_HEADER:
        return kl__etcd_parse_header(&o->revision, body, len);
    case DEC_RANGE:
        return kl__etcd_parse_range(&o->range, body, len);
    case DEC_TXN:
        return kl__etcd_parse_txn(&o->txn, body, len);
    case DEC_WATCH:
        return kl__etcd_parse_watch_msg(&o->watch, body, len);
    case DEC_AUTH:
        return kl__etcd_parse_authenticate(&o->token, body, len);
    case DEC_ERROR:
        return kl__etcd_error_parse(&o->error, body, len);
    default:
        CHECK_MSG(0, "decoder %d", (int)d);
        return 0;
    }
}

static int lease_is_zero(const kl__etcd_lease *l)
{
    return !l->revision && !l->id && !l->ttl && !l->granted_ttl;
}

static int range_is_zero(const kl__etcd_range *r)
{
    return !r->revision && !r->kvs && !r->n_kvs && !r->more && !r->count;
}

static int txn_is_zero(const kl__etcd_txn *t)
{
    return !t->revision && !t->succeeded && !t->ops && !t->n_ops;
}

static int watch_is_zero(const kl__etcd_watch_msg *m)
{
    return !m->revision && !m->watch_id && !m->created && !m->canceled && !m->fragment &&
           !m->compact_revision && !m->cancel_reason && !m->events && !m->n_events;
}

/* The output of decoder d holds nothing (to free). */
static int etcd_out_is_zero(etcd_dec d, const etcd_out *o)
{
    switch (d) {
    case DEC_GRANT:
    case DEC_KEEPALIVE:
    case DEC_TIMETOLIVE:
        return lease_is_zero(&o->lease);
    case DEC_HEADER:
        return o->revision == 0;
    case DEC_RANGE:
        return range_is_zero(&o->range);
    case DEC_TXN:
        return txn_is_zero(&o->txn);
    case DEC_WATCH:
        return watch_is_zero(&o->watch);
    case DEC_AUTH:
        return o->token == NULL;
    default:
        return o->error.grpc_code == 0 && o->error.message == NULL;
    }
}

/* Frees the output of d with its _clear function, twice: a cleared struct
 * is zero and clearing it again is harmless. */
static void etcd_out_clear(etcd_dec d, etcd_out *o)
{
    for (int i = 0; i < 2; i++) {
        switch (d) {
        case DEC_RANGE:
            kl__etcd_range_clear(&o->range);
            break;
        case DEC_TXN:
            kl__etcd_txn_clear(&o->txn);
            break;
        case DEC_WATCH:
            kl__etcd_watch_msg_clear(&o->watch);
            break;
        case DEC_AUTH:
            kl__free(o->token);
            o->token = NULL;
            break;
        case DEC_ERROR:
            kl__etcd_error_clear(&o->error);
            break;
        default: /* nothing owned */
            memset(&o->lease, 0, sizeof(o->lease));
            o->revision = 0;
            break;
        }
        CHECK(etcd_out_is_zero(d, o));
    }
}

static int bytes_eq(const char *a, size_t an, const char *b, size_t bn)
{
    return an == bn && (an == 0 || memcmp(a, b, an) == 0);
}

static int kv_eq(const kl__etcd_kv *a, const kl__etcd_kv *b)
{
    return bytes_eq(a->key, a->key_len, b->key, b->key_len) &&
           bytes_eq(a->value, a->value_len, b->value, b->value_len) &&
           a->create_revision == b->create_revision && a->mod_revision == b->mod_revision &&
           a->version == b->version && a->lease == b->lease;
}

static int range_eq(const kl__etcd_range *a, const kl__etcd_range *b)
{
    if (a->revision != b->revision || a->more != b->more || a->count != b->count ||
        a->n_kvs != b->n_kvs)
        return 0;
    for (size_t i = 0; i < a->n_kvs; i++)
        if (!kv_eq(&a->kvs[i], &b->kvs[i]))
            return 0;
    return 1;
}

static int txn_eq(const kl__etcd_txn *a, const kl__etcd_txn *b)
{
    if (a->revision != b->revision || a->succeeded != b->succeeded || a->n_ops != b->n_ops)
        return 0;
    for (size_t i = 0; i < a->n_ops; i++)
        if (a->ops[i].type != b->ops[i].type || a->ops[i].deleted != b->ops[i].deleted ||
            !range_eq(&a->ops[i].range, &b->ops[i].range))
            return 0;
    return 1;
}

static int watch_eq(const kl__etcd_watch_msg *a, const kl__etcd_watch_msg *b)
{
    if (a->revision != b->revision || a->watch_id != b->watch_id || a->created != b->created ||
        a->canceled != b->canceled || a->fragment != b->fragment ||
        a->compact_revision != b->compact_revision ||
        strcmp(str_or_empty(a->cancel_reason), str_or_empty(b->cancel_reason)) != 0 ||
        a->n_events != b->n_events)
        return 0;
    for (size_t i = 0; i < a->n_events; i++)
        if (a->events[i].type != b->events[i].type || !kv_eq(&a->events[i].kv, &b->events[i].kv))
            return 0;
    return 1;
}

static int lease_eq(const kl__etcd_lease *a, const kl__etcd_lease *b)
{
    return a->revision == b->revision && a->id == b->id && a->ttl == b->ttl &&
           a->granted_ttl == b->granted_ttl;
}

static int etcd_out_eq(etcd_dec d, const etcd_out *a, const etcd_out *b)
{
    switch (d) {
    case DEC_GRANT:
    case DEC_KEEPALIVE:
    case DEC_TIMETOLIVE:
        return lease_eq(&a->lease, &b->lease);
    case DEC_HEADER:
        return a->revision == b->revision;
    case DEC_RANGE:
        return range_eq(&a->range, &b->range);
    case DEC_TXN:
        return txn_eq(&a->txn, &b->txn);
    case DEC_WATCH:
        return watch_eq(&a->watch, &b->watch);
    case DEC_AUTH:
        return strcmp(str_or_empty(a->token), str_or_empty(b->token)) == 0;
    default:
        return a->error.grpc_code == b->error.grpc_code &&
               strcmp(str_or_empty(a->error.message), str_or_empty(b->error.message)) == 0;
    }
}

/* What etcd_codec.h promises of every decoded kv and message, whatever the
 * body said. */
static void check_kv(const kl__etcd_kv *kv)
{
    CHECK(kv->key != NULL && kv->key[kv->key_len] == '\0');
    CHECK(kv->value != NULL && kv->value[kv->value_len] == '\0');
}

static void check_range_out(const kl__etcd_range *r)
{
    CHECK((r->kvs == NULL) == (r->n_kvs == 0));
    CHECK(r->more == 0 || r->more == 1);
    for (size_t i = 0; i < r->n_kvs; i++)
        check_kv(&r->kvs[i]);
}

static void check_success(etcd_dec d, const etcd_out *o)
{
    switch (d) {
    case DEC_GRANT:
        CHECK(o->lease.id > 0 && o->lease.ttl > 0);
        break;
    case DEC_KEEPALIVE:
        CHECK(o->lease.ttl >= 0);
        break;
    case DEC_TIMETOLIVE:
        CHECK(o->lease.ttl >= -1);
        break;
    case DEC_RANGE:
        CHECK(o->range.revision > 0);
        check_range_out(&o->range);
        break;
    case DEC_TXN:
        CHECK(o->txn.revision > 0);
        CHECK((o->txn.ops == NULL) == (o->txn.n_ops == 0));
        CHECK(o->txn.succeeded == 0 || o->txn.succeeded == 1);
        for (size_t i = 0; i < o->txn.n_ops; i++) {
            const kl__etcd_op *op = &o->txn.ops[i];

            CHECK(op->type == KL_ETCD_OP_RANGE || op->type == KL_ETCD_OP_PUT ||
                  op->type == KL_ETCD_OP_DELETE);
            CHECK(op->type == KL_ETCD_OP_DELETE || op->deleted == 0);
            check_range_out(&op->range);
        }
        break;
    case DEC_WATCH:
        CHECK(o->watch.cancel_reason != NULL);
        CHECK((o->watch.events == NULL) == (o->watch.n_events == 0));
        CHECK(o->watch.created <= 1 && o->watch.canceled <= 1 && o->watch.fragment <= 1);
        for (size_t i = 0; i < o->watch.n_events; i++) {
            CHECK(o->watch.events[i].type == KL_ETCD_EVENT_PUT ||
                  o->watch.events[i].type == KL_ETCD_EVENT_DELETE);
            check_kv(&o->watch.events[i].kv);
        }
        break;
    case DEC_AUTH:
        CHECK(o->token != NULL && o->token[0] != '\0');
        break;
    case DEC_ERROR:
        CHECK(o->error.message != NULL);
        break;
    default:
        break;
    }
}

/* ---- the reference: the rules of etcd_codec.h, read with jansson ---- */

/* An int64 member: a JSON integer, or a string of an optional '-' and
 * digits within int64 (strtoll decides). Absent or null: 0, not present.
 * -1 when it is anything else. */
static int ref_int64(const json_t *obj, const char *key, int64_t *out, int *present)
{
    json_t *v = json_object_get(obj, key);

    *out = 0;
    if (present)
        *present = 0;
    if (!v || json_is_null(v))
        return 0;
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
    } else if (json_is_string(v)) {
        const char *s = json_string_value(v), *digits = s + (s[0] == '-');
        char *end;
        long long x;

        if (!digits[0] || strspn(digits, "0123456789") != strlen(digits))
            return -1;
        errno = 0;
        x = strtoll(s, &end, 10);
        if (errno == ERANGE || *end)
            return -1;
        *out = x;
    } else {
        return -1;
    }
    if (present)
        *present = 1;
    return 0;
}

static int ref_bool(const json_t *obj, const char *key, int *out)
{
    json_t *v = json_object_get(obj, key);

    *out = json_is_true(v);
    return !v || json_is_null(v) || json_is_boolean(v) ? 0 : -1;
}

/* A member of the given type, or absent / null (*out NULL). */
static int ref_member(const json_t *obj, const char *key, json_type type, json_t **out)
{
    json_t *v = json_object_get(obj, key);

    *out = NULL;
    if (!v || json_is_null(v))
        return 0;
    if (json_typeof(v) != type)
        return -1;
    *out = v;
    return 0;
}

/* Base64 bytes (the base64 target checks the decoder); absent/null: "". */
static int ref_bytes(const json_t *obj, const char *key, char **out, size_t *len)
{
    json_t *v = json_object_get(obj, key);
    int ok;

    *out = NULL;
    *len = 0;
    if (v && !json_is_null(v) && !json_is_string(v))
        return -1;
    if (!v || json_is_null(v))
        *out = kl__base64_decode("", 0, len, &ok);
    else
        *out = kl__base64_decode(json_string_value(v), json_string_length(v), len, &ok);
    CHECK(*out || !ok);
    return *out ? 0 : -1;
}

static int ref_header(const json_t *msg, int64_t *rev)
{
    json_t *hdr;

    *rev = 0;
    if (ref_member(msg, "header", JSON_OBJECT, &hdr) < 0)
        return -1;
    return ref_int64(hdr, "revision", rev, NULL);
}

/* A kv: an object whose "key" member exists (null reads as ""). */
static int ref_kv(const json_t *obj, kl__etcd_kv *kv)
{
    if (!json_is_object(obj) || !json_object_get(obj, "key"))
        return -1;
    if (ref_bytes(obj, "key", &kv->key, &kv->key_len) < 0 ||
        ref_bytes(obj, "value", &kv->value, &kv->value_len) < 0)
        return -1;
    if (ref_int64(obj, "create_revision", &kv->create_revision, NULL) < 0 ||
        ref_int64(obj, "mod_revision", &kv->mod_revision, NULL) < 0 ||
        ref_int64(obj, "version", &kv->version, NULL) < 0 ||
        ref_int64(obj, "lease", &kv->lease, NULL) < 0)
        return -1;
    return 0;
}

/* A RangeResponse (kl__etcd_range_clear frees *r whatever this returns). */
static int ref_range(const json_t *msg, kl__etcd_range *r)
{
    json_t *kvs;
    size_t n;

    if (ref_header(msg, &r->revision) < 0 || ref_bool(msg, "more", &r->more) < 0 ||
        ref_int64(msg, "count", &r->count, NULL) < 0 ||
        ref_member(msg, "kvs", JSON_ARRAY, &kvs) < 0)
        return -1;
    n = json_array_size(kvs);
    if (n == 0)
        return 0;
    r->kvs = kl__calloc(n, sizeof(*r->kvs));
    CHECK(r->kvs != NULL);
    r->n_kvs = n;
    for (size_t i = 0; i < n; i++)
        if (ref_kv(json_array_get(kvs, i), &r->kvs[i]) < 0)
            return -1;
    return 0;
}

/* A TxnResponse: each response is the first of response_range,
 * response_put, response_delete_range that is not absent or null (and it
 * must be an object). */
static int ref_txn(const json_t *msg, kl__etcd_txn *t)
{
    static const char *const kinds[] = {"response_range", "response_put", "response_delete_range"};
    static const kl__etcd_op_type types[] = {KL_ETCD_OP_RANGE, KL_ETCD_OP_PUT, KL_ETCD_OP_DELETE};
    json_t *resps;
    size_t n;

    if (ref_header(msg, &t->revision) < 0 || t->revision <= 0 ||
        ref_bool(msg, "succeeded", &t->succeeded) < 0 ||
        ref_member(msg, "responses", JSON_ARRAY, &resps) < 0)
        return -1;
    n = json_array_size(resps);
    if (n == 0)
        return 0;
    t->ops = kl__calloc(n, sizeof(*t->ops));
    CHECK(t->ops != NULL);
    t->n_ops = n;
    for (size_t i = 0; i < n; i++) {
        json_t *op = json_array_get(resps, i), *inner = NULL;
        size_t k;

        if (!json_is_object(op))
            return -1;
        for (k = 0; k < KL_ARRAY_LEN(kinds) && !inner; k++)
            if (ref_member(op, kinds[k], JSON_OBJECT, &inner) < 0)
                return -1;
        if (!inner)
            return -1;
        t->ops[i].type = types[k - 1];
        if (ref_range(inner, &t->ops[i].range) < 0)
            return -1;
        if (t->ops[i].type == KL_ETCD_OP_DELETE &&
            ref_int64(inner, "deleted", &t->ops[i].deleted, NULL) < 0)
            return -1;
    }
    return 0;
}

/* A WatchResponse; an event's "type" is absent, null, "PUT" or 0 (PUT),
 * "DELETE" or 1 (DELETE), and its kv is required. */
static int ref_watch(const json_t *msg, kl__etcd_watch_msg *m)
{
    json_t *events, *reason;
    size_t n;

    if (ref_header(msg, &m->revision) < 0 || ref_int64(msg, "watch_id", &m->watch_id, NULL) < 0 ||
        ref_bool(msg, "created", &m->created) < 0 || ref_bool(msg, "canceled", &m->canceled) < 0 ||
        ref_bool(msg, "fragment", &m->fragment) < 0 ||
        ref_int64(msg, "compact_revision", &m->compact_revision, NULL) < 0 ||
        ref_member(msg, "events", JSON_ARRAY, &events) < 0 ||
        ref_member(msg, "cancel_reason", JSON_STRING, &reason) < 0)
        return -1;
    m->cancel_reason = kl__strdup(reason ? json_string_value(reason) : "");
    CHECK(m->cancel_reason != NULL);
    n = json_array_size(events);
    if (n == 0)
        return 0;
    m->events = kl__calloc(n, sizeof(*m->events));
    CHECK(m->events != NULL);
    m->n_events = n;
    for (size_t i = 0; i < n; i++) {
        json_t *ev = json_array_get(events, i), *type, *kv;

        if (!json_is_object(ev))
            return -1;
        type = json_object_get(ev, "type");
        if (!type || json_is_null(type) ||
            (json_is_string(type) && !strcmp(json_string_value(type), "PUT")) ||
            (json_is_integer(type) && json_integer_value(type) == 0))
            m->events[i].type = KL_ETCD_EVENT_PUT;
        else if ((json_is_string(type) && !strcmp(json_string_value(type), "DELETE")) ||
                 (json_is_integer(type) && json_integer_value(type) == 1))
            m->events[i].type = KL_ETCD_EVENT_DELETE;
        else
            return -1;
        if (ref_member(ev, "kv", JSON_OBJECT, &kv) < 0 || !kv || ref_kv(kv, &m->events[i].kv) < 0)
            return -1;
    }
    return 0;
}

/* The three error shapes of etcd_codec.h: {"error": {"grpc_code", "message"}};
 * any "error" member with "code" and "message" beside it (an empty or
 * absent "message" gives way to a string "error"); {"code": integer,
 * "message": string} with neither "header" nor "result". A code that is
 * not an integer within int32 reads as 0. */
static int ref_error_shape(const json_t *root, int *code, const char **message)
{
    json_t *e = json_object_get(root, "error"), *c, *m;

    *code = 0;
    *message = "";
    if (!json_is_object(root))
        return 0;
    if (json_is_object(e)) {
        c = json_object_get(e, "grpc_code");
        m = json_object_get(e, "message");
    } else if (e || (!json_object_get(root, "header") && !json_object_get(root, "result") &&
                     json_is_integer(json_object_get(root, "code")) &&
                     json_is_string(json_object_get(root, "message")))) {
        c = json_object_get(root, "code");
        m = json_object_get(root, "message");
        if (!json_is_string(m) || !json_string_value(m)[0])
            m = e;
    } else {
        return 0;
    }
    if (json_is_integer(c) && json_integer_value(c) >= INT32_MIN &&
        json_integer_value(c) <= INT32_MAX)
        *code = (int)json_integer_value(c);
    if (json_is_string(m))
        *message = json_string_value(m);
    return 1;
}

/* What every decoder should answer for body: err[d], and out[d] when 0.
 * gateway is set when the body is an error body (the decoders then give
 * its code and "etcd: ..."). */
typedef struct etcd_expect {
    int err[DEC_COUNT];
    etcd_out out[DEC_COUNT];
    int gateway;
} etcd_expect;

static void expect_all(etcd_expect *x, int err)
{
    for (int d = 0; d < DEC_COUNT; d++)
        x->err[d] = err;
}

static void ref_expect(etcd_expect *x, const json_t *root)
{
    const char *message;
    json_t *result;
    const json_t *msg;
    kl__etcd_lease l = {0};
    int code, has_id, has_ttl, lease_ok;

    memset(x, 0, sizeof(*x));
    if (!json_is_object(root)) {
        expect_all(x, K8SLEASE_EPROTOCOL);
        return;
    }
    if (ref_error_shape(root, &code, &message)) {
        expect_all(x, kl__etcd_error_code(code, message));
        x->gateway = 1;
        x->err[DEC_ERROR] = 0;
        x->out[DEC_ERROR].error.grpc_code = code;
        x->out[DEC_ERROR].error.message = (char *)message; /* borrowed from root */
        return;
    }
    expect_all(x, K8SLEASE_EPROTOCOL);
    if (ref_member(root, "result", JSON_OBJECT, &result) < 0)
        return;
    msg = result ? result : root;

    lease_ok = ref_header(msg, &l.revision) == 0 && ref_int64(msg, "ID", &l.id, &has_id) == 0 &&
               ref_int64(msg, "TTL", &l.ttl, &has_ttl) == 0 &&
               ref_int64(msg, "grantedTTL", &l.granted_ttl, NULL) == 0;
    if (lease_ok && has_id && l.id > 0 && has_ttl && l.ttl > 0) {
        x->err[DEC_GRANT] = 0;
        x->out[DEC_GRANT].lease = l;
    }
    if (lease_ok) {
        /* keepalive: without an ID or with a negative TTL the lease is gone */
        x->err[DEC_KEEPALIVE] = 0;
        x->out[DEC_KEEPALIVE].lease = l;
        if (!has_id || l.ttl < 0)
            x->out[DEC_KEEPALIVE].lease.ttl = 0;
    }
    if (lease_ok && has_id) {
        /* timetolive: a negative TTL is -1, grantedTTL as given */
        x->err[DEC_TIMETOLIVE] = 0;
        x->out[DEC_TIMETOLIVE].lease = l;
        if (l.ttl < 0)
            x->out[DEC_TIMETOLIVE].lease.ttl = -1;
    }
    if (ref_header(msg, &x->out[DEC_HEADER].revision) == 0)
        x->err[DEC_HEADER] = 0;
    if (ref_range(msg, &x->out[DEC_RANGE].range) == 0 && x->out[DEC_RANGE].range.revision > 0)
        x->err[DEC_RANGE] = 0;
    if (ref_txn(msg, &x->out[DEC_TXN].txn) == 0)
        x->err[DEC_TXN] = 0;
    if (ref_watch(msg, &x->out[DEC_WATCH].watch) == 0)
        x->err[DEC_WATCH] = 0;
    {
        json_t *t = json_object_get(msg, "token");

        if (json_is_string(t) && json_string_value(t)[0]) {
            x->err[DEC_AUTH] = 0;
            x->out[DEC_AUTH].token = (char *)json_string_value(t); /* borrowed */
        }
    }
}

static void ref_expect_free(etcd_expect *x)
{
    kl__etcd_range_clear(&x->out[DEC_RANGE].range);
    kl__etcd_txn_clear(&x->out[DEC_TXN].txn);
    kl__etcd_watch_msg_clear(&x->out[DEC_WATCH].watch);
}

/* Runs every decoder on body and compares with the reference; msgs gets
 * each decoder's error message ("" on success). */
static void check_etcd_body(const char *body, size_t len, char msgs[DEC_COUNT][320])
{
    json_error_t jerr;
    json_t *root = json_loadb(body, len, JSON_DECODE_ANY, &jerr);
    etcd_expect x;

    if (root) {
        ref_expect(&x, root);
    } else {
        memset(&x, 0, sizeof(x));
        expect_all(&x, K8SLEASE_EPROTOCOL);
    }

    for (int i = 0; i < DEC_COUNT; i++) {
        etcd_dec d = (etcd_dec)i;
        etcd_out o;
        const char *m;
        int err;

        /* Garbage in: a decoder must not rely on a zeroed output. */
        memset(&o, 0xa5, sizeof(o));
        kl__error_clear();
        err = etcd_decode(d, &o, body, len);
        m = kl__error_get();
        snprintf(msgs[d], 320, "%s", err < 0 ? m : "");
        CHECK_MSG(err == x.err[d], "%s: got %d, the reference says %d (%s)", etcd_what[d], err,
                  x.err[d], m);
        if (err < 0) {
            CHECK_MSG(etcd_out_is_zero(d, &o), "%s: error %d left an output", etcd_what[d], err);
            /* The message names the response, or is the gateway's. */
            if (x.gateway && d != DEC_ERROR)
                CHECK_MSG(!strncmp(m, "etcd: ", 6), "%s: message \"%s\"", etcd_what[d], m);
            else
                CHECK_MSG(!strncmp(m, etcd_what[d], strlen(etcd_what[d])), "%s: message \"%s\"",
                          etcd_what[d], m);
            continue;
        }
        check_success(d, &o);
        CHECK_MSG(etcd_out_eq(d, &o, &x.out[d]), "%s: decoded output differs from the reference",
                  etcd_what[d]);
        etcd_out_clear(d, &o);
    }
    ref_expect_free(&x);
    json_decref(root);
}

/* Input: one response body (or one line of a watch stream), given to every
 * decoder. When it is a bare message (a JSON object, not an error body,
 * without "result") it is decoded again inside {"result": ...}, which must
 * change nothing, error messages included. */
int kl_fuzz_etcd(const uint8_t *data, size_t size)
{
    static char plain[DEC_COUNT][320], wrapped[DEC_COUNT][320];
    const char *body = (const char *)data;
    json_t *root = json_loadb(body, size, JSON_DECODE_ANY, NULL), *w;
    int code;
    const char *message;
    char *wbody;
    size_t wlen;

    check_etcd_body(body, size, plain);
    if (!json_is_object(root) || ref_error_shape(root, &code, &message) ||
        (json_object_get(root, "result") && !json_is_null(json_object_get(root, "result")))) {
        json_decref(root);
        return 0;
    }
    json_decref(root);

    wlen = size + sizeof("{\"result\":}") - 1;
    wbody = malloc(wlen);
    CHECK(wbody != NULL);
    memcpy(wbody, "{\"result\":", 10);
    memcpy(wbody + 10, data, size);
    wbody[wlen - 1] = '}';
    /* One level deeper can pass jansson's depth limit: nothing to compare. */
    if ((w = json_loadb(wbody, wlen, 0, NULL)) != NULL) {
        json_decref(w);
        check_etcd_body(wbody, wlen, wrapped);
        for (int d = 0; d < DEC_COUNT; d++)
            CHECK_MSG(strcmp(plain[d], wrapped[d]) == 0, "%s: \"%s\" bare, \"%s\" wrapped",
                      etcd_what[d], plain[d], wrapped[d]);
    }
    free(wbody);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* etcd gateway: encoders, and decoders on bodies built to order            */
/* ------------------------------------------------------------------------ */

/* Structured input, read front to back; bytes past the end read as 0. */
typedef struct fz_in {
    const uint8_t *p;
    size_t n;
} fz_in;

/* A byte string of the input, copied to a buffer of exactly its size so
 * that ASan sees a read past its end. */
typedef struct fz_bytes {
    char *p;
    size_t len;
} fz_bytes;

static unsigned fz_u8(fz_in *in)
{
    if (!in->n)
        return 0;
    in->n--;
    return *in->p++;
}

/* A length byte, then that many bytes (fewer at the end of the input). */
static fz_bytes fz_take(fz_in *in)
{
    fz_bytes b;

    b.len = fz_u8(in);
    if (b.len > in->n)
        b.len = in->n;
    b.p = malloc(b.len ? b.len : 1);
    CHECK(b.p != NULL);
    if (b.len)
        memcpy(b.p, in->p, b.len);
    in->p += b.len;
    in->n -= b.len;
    return b;
}

/* A selector byte: below 0x40 an edge of int64 parsing, below 0x80 a small
 * number (-8..55), else the next 8 bytes big-endian. */
static int64_t fz_i64(fz_in *in)
{
    static const int64_t edges[] = {
        0,
        1,
        -1,
        2,
        60,
        INT64_MAX,
        INT64_MIN,
        INT64_MAX - 1,
        INT64_MIN + 1,
        INT64_MAX / 10,
        INT64_MAX / 10 + 1,
        INT64_MIN / 10,
        INT64_MIN / 10 - 1,
        INT64_C(9007199254740993), /* 2^53 + 1: not a double */
        INT64_C(-9007199254740993),
        INT32_MAX,
        INT64_C(2147483648),
        INT32_MIN,
        INT64_C(-2147483649),
        INT64_C(9196828468227470855), /* lease IDs of the capture */
        INT64_C(2130943884683020833),
    };
    unsigned sel = fz_u8(in);
    uint64_t v = 0;

    if (sel < 0x40)
        return edges[sel % KL_ARRAY_LEN(edges)];
    if (sel < 0x80)
        return (int64_t)sel - 0x48;
    for (int i = 0; i < 8; i++)
        v = v << 8 | fz_u8(in);
    return (int64_t)v;
}

/* Printable ASCII of the bytes (for messages, which are JSON strings). */
static char *fz_text(const fz_bytes *b)
{
    char *s = malloc(b->len + 1);

    CHECK(s != NULL);
    for (size_t i = 0; i < b->len; i++)
        s[i] = (char)(0x20 + (unsigned char)b->p[i] % 95);
    s[b->len] = '\0';
    return s;
}

static int bytes_cmp(const char *a, size_t an, const char *b, size_t bn)
{
    size_t n = an < bn ? an : bn;
    int c = n ? memcmp(a, b, n) : 0;

    if (c)
        return c;
    return an < bn ? -1 : an > bn;
}

static int has_prefix(const char *s, size_t n, const char *prefix, size_t pn)
{
    return n >= pn && (pn == 0 || memcmp(s, prefix, pn) == 0);
}

static char *concat(const fz_bytes *a, const fz_bytes *b, size_t *len)
{
    char *s = malloc(a->len + b->len + 1);

    CHECK(s != NULL);
    if (a->len)
        memcpy(s, a->p, a->len);
    if (b->len)
        memcpy(s + a->len, b->p, b->len);
    *len = a->len + b->len;
    return s;
}

/* ---- base64 and prefix range end ---- */

static void check_base64_encode(const fz_bytes *b)
{
    size_t n = 1, back_len = 0;
    char *enc = kl__base64_encode(b->p, b->len, &n), *again, *ref, *back;
    int ok = 0;

    ref = b64_encode((const unsigned char *)b->p, b->len);
    CHECK(enc != NULL && n == strlen(enc));
    CHECK_MSG(strcmp(enc, ref) == 0, "%s, want %s", enc, ref);
    again = kl__base64_encode(b->p, b->len, NULL);
    CHECK(again != NULL && strcmp(again, enc) == 0);
    back = kl__base64_decode(enc, n, &back_len, &ok);
    CHECK(back != NULL && ok == 1 && bytes_eq(back, back_len, b->p, b->len));
    kl__free(back);
    kl__free(again);
    free(ref);
    kl__free(enc);
}

/* kl__etcd_prefix_range_end(prefix) is greater than every key with the
 * prefix and no greater than any other key above the prefix. probes are
 * other byte strings of the input. */
static void check_prefix_range_end(const fz_bytes *prefix, const fz_bytes *probes, size_t n_probes)
{
    size_t cap = prefix->len ? prefix->len : 1, n, i = prefix->len, klen;
    char *end = malloc(cap), *k;

    CHECK(end != NULL);
    n = kl__etcd_prefix_range_end(prefix->p, prefix->len, end);
    while (i > 0 && (unsigned char)prefix->p[i - 1] == 0xff)
        i--;
    if (i == 0) {
        /* no upper bound */
        CHECK(n == 1 && end[0] == '\0');
        free(end);
        return;
    }
    CHECK(n == i);
    CHECK(memcmp(end, prefix->p, n - 1) == 0);
    CHECK((unsigned char)end[n - 1] == (unsigned char)prefix->p[n - 1] + 1);
    CHECK(bytes_cmp(prefix->p, prefix->len, end, n) < 0);
    for (size_t j = 0; j < n_probes; j++) {
        const fz_bytes *x = &probes[j];

        /* prefix + x has the prefix: below the end */
        k = concat(prefix, x, &klen);
        CHECK(bytes_cmp(k, klen, end, n) < 0);
        free(k);
        /* x itself: below the end and not below the prefix means it has
         * the prefix (the end is the least upper bound) */
        if (bytes_cmp(x->p, x->len, end, n) < 0 &&
            bytes_cmp(x->p, x->len, prefix->p, prefix->len) >= 0)
            CHECK(has_prefix(x->p, x->len, prefix->p, prefix->len));
        if (has_prefix(x->p, x->len, prefix->p, prefix->len))
            CHECK(bytes_cmp(x->p, x->len, end, n) < 0);
    }
    /* the largest keys with the prefix */
    k = malloc(prefix->len + 8);
    CHECK(k != NULL);
    memcpy(k, prefix->p, prefix->len);
    memset(k + prefix->len, 0xff, 8);
    CHECK(bytes_cmp(k, prefix->len + 8, end, n) < 0);
    free(k);
    free(end);
}

/* ---- request bodies ---- */

static void jset(json_t *obj, const char *key, json_t *v)
{
    CHECK(v != NULL && json_object_set_new(obj, key, v) == 0);
}

static json_t *jb64(const fz_bytes *b)
{
    char *s = b64_encode((const unsigned char *)b->p, b->len);
    json_t *j = json_string(s);

    free(s);
    return j;
}

/* An int64 as the gateway writes it (a string) or as a JSON integer. */
static json_t *jint64(int64_t v, int number)
{
    char buf[24];

    if (number)
        return json_integer(v);
    snprintf(buf, sizeof(buf), "%" PRId64, v);
    return json_string(buf);
}

/* body (consumed) parses as exactly want (consumed). */
static void check_request(char *body, json_t *want, const char *what)
{
    json_error_t jerr;
    json_t *got;

    CHECK_MSG(body != NULL, "%s: no body (%s)", what, kl__error_get());
    got = json_loads(body, 0, &jerr);
    CHECK_MSG(got != NULL, "%s: not JSON: %s", what, body);
    if (!json_equal(got, want)) {
        char *w = json_dumps(want, JSON_COMPACT | JSON_SORT_KEYS);

        CHECK_MSG(0, "%s: %s, want %s", what, body, w ? w : "?");
    }
    json_decref(got);
    json_decref(want);
    kl__free(body);
}

static json_t *key_range_json(const fz_bytes *key, const fz_bytes *range_end)
{
    json_t *o = json_object();

    CHECK(o != NULL);
    jset(o, "key", jb64(key));
    if (range_end)
        jset(o, "range_end", jb64(range_end));
    return o;
}

static void check_range_request(const fz_bytes *key, const fz_bytes *range_end, int64_t limit,
                                int64_t revision, int64_t max_create, unsigned flags)
{
    static const char *const orders[] = {"NONE", "ASCEND", "DESCEND"};
    static const char *const targets[] = {"KEY", "VERSION", "CREATE", "MOD", "VALUE"};
    kl__etcd_range_req req;
    json_t *want = key_range_json(key, range_end);

    memset(&req, 0, sizeof(req));
    req.key = key->p;
    req.key_len = key->len;
    if (range_end) {
        req.range_end = range_end->p;
        req.range_end_len = range_end->len;
    }
    req.limit = limit;
    req.revision = revision;
    req.max_create_revision = max_create;
    req.sort_order = (kl__etcd_sort_order)((flags >> 1 & 3) % 3);
    req.sort_target = (kl__etcd_sort_target)((flags >> 3 & 7) % 5);
    req.keys_only = flags >> 6 & 1;
    req.count_only = flags >> 7 & 1;
    req.serializable = flags >> 8 & 1;

    /* "zero/NULL fields are left out of the body": the others are in it */
    if (limit)
        jset(want, "limit", jint64(limit, 0));
    if (revision)
        jset(want, "revision", jint64(revision, 0));
    if (req.sort_order != KL_ETCD_SORT_NONE)
        jset(want, "sort_order", json_string(orders[req.sort_order]));
    if (req.sort_target != KL_ETCD_SORT_KEY)
        jset(want, "sort_target", json_string(targets[req.sort_target]));
    if (max_create)
        jset(want, "max_create_revision", jint64(max_create, 0));
    if (req.keys_only)
        jset(want, "keys_only", json_true());
    if (req.count_only)
        jset(want, "count_only", json_true());
    if (req.serializable)
        jset(want, "serializable", json_true());
    check_request(kl__etcd_encode_range(&req), want, "range request");

    check_request(kl__etcd_encode_deleterange(key->p, key->len, range_end ? range_end->p : NULL,
                                              range_end ? range_end->len : 0),
                  key_range_json(key, range_end), "deleterange request");
}

static void check_watch_request(const fz_bytes *key, const fz_bytes *range_end, int64_t start,
                                unsigned flags)
{
    kl__etcd_watch_req req;
    json_t *cr = key_range_json(key, range_end), *want = json_object(), *filters;

    memset(&req, 0, sizeof(req));
    req.key = key->p;
    req.key_len = key->len;
    if (range_end) {
        req.range_end = range_end->p;
        req.range_end_len = range_end->len;
    }
    req.start_revision = start;
    req.progress_notify = flags >> 9 & 1;
    req.no_put = flags >> 10 & 1;
    req.no_delete = flags >> 11 & 1;
    req.prev_kv = flags >> 12 & 1;

    CHECK(want != NULL);
    if (start)
        jset(cr, "start_revision", jint64(start, 0));
    if (req.progress_notify)
        jset(cr, "progress_notify", json_true());
    if (req.prev_kv)
        jset(cr, "prev_kv", json_true());
    if (req.no_put || req.no_delete) {
        filters = json_array();
        CHECK(filters != NULL);
        if (req.no_put)
            CHECK(json_array_append_new(filters, json_string("NOPUT")) == 0);
        if (req.no_delete)
            CHECK(json_array_append_new(filters, json_string("NODELETE")) == 0);
        jset(cr, "filters", filters);
    }
    jset(want, "create_request", cr);
    check_request(kl__etcd_encode_watch_create(&req), want, "watch request");
}

/* [{"target":"CREATE","result":"EQUAL","key":k,"create_revision":rev}] */
static json_t *compare_json(const fz_bytes *key, int64_t rev)
{
    json_t *c = json_object(), *a = json_array();

    CHECK(c != NULL && a != NULL);
    jset(c, "target", json_string("CREATE"));
    jset(c, "result", json_string("EQUAL"));
    jset(c, "key", jb64(key));
    jset(c, "create_revision", jint64(rev, 0));
    CHECK(json_array_append_new(a, c) == 0);
    return a;
}

/* [{op: {"key": k[, "value": v][, "lease": lease]}}] (lease 0 left out) */
static json_t *op_json(const char *op, const fz_bytes *key, const fz_bytes *value, int64_t lease)
{
    json_t *o = json_object(), *r = json_object(), *a = json_array();

    CHECK(o != NULL && r != NULL && a != NULL);
    jset(r, "key", jb64(key));
    if (value)
        jset(r, "value", jb64(value));
    if (lease)
        jset(r, "lease", jint64(lease, 0));
    jset(o, op, r);
    CHECK(json_array_append_new(a, o) == 0);
    return a;
}

static void check_txn_requests(const fz_bytes *key, const fz_bytes *value, int64_t lease,
                               int64_t create_rev)
{
    json_t *want = json_object();

    CHECK(want != NULL);
    jset(want, "compare", compare_json(key, 0));
    jset(want, "success", op_json("request_put", key, value, lease));
    jset(want, "failure", op_json("request_range", key, NULL, 0));
    check_request(kl__etcd_encode_txn_create(key->p, key->len, value->p, value->len, lease), want,
                  "txn create");

    want = json_object();
    CHECK(want != NULL);
    jset(want, "compare", compare_json(key, create_rev));
    jset(want, "success", op_json("request_put", key, value, lease));
    check_request(
        kl__etcd_encode_txn_proclaim(key->p, key->len, value->p, value->len, lease, create_rev),
        want, "txn proclaim");

    want = json_object();
    CHECK(want != NULL);
    jset(want, "compare", compare_json(key, create_rev));
    jset(want, "success", op_json("request_delete_range", key, NULL, 0));
    check_request(kl__etcd_encode_txn_delete(key->p, key->len, create_rev), want, "txn delete");
}

static void check_lease_requests(int64_t ttl, int64_t id, int keys)
{
    json_t *want = json_object();

    CHECK(want != NULL);
    jset(want, "TTL", jint64(ttl, 0));
    if (id)
        jset(want, "ID", jint64(id, 0));
    check_request(kl__etcd_encode_grant(ttl, id), want, "lease grant");

    want = json_object();
    CHECK(want != NULL);
    jset(want, "ID", jint64(id, 0));
    check_request(kl__etcd_encode_lease_id(id), want, "lease id");

    want = json_object();
    CHECK(want != NULL);
    jset(want, "ID", jint64(id, 0));
    jset(want, "keys", json_boolean(keys));
    check_request(kl__etcd_encode_timetolive(id, keys), want, "lease timetolive");
}

/* Name and password as given (cut at a NUL): a body exactly when both are
 * UTF-8, which JSON needs. */
static void check_authenticate_request(const fz_bytes *name_b, const fz_bytes *password_b)
{
    char *name = cstring((const uint8_t *)name_b->p, name_b->len);
    char *password = cstring((const uint8_t *)password_b->p, password_b->len);
    json_t *jn = json_string(name), *jp = json_string(password), *want;
    char *body = kl__etcd_encode_authenticate(name, password);

    if (!jn || !jp) {
        CHECK_MSG(body == NULL, "not UTF-8, yet encoded: %s", body);
        CHECK(!strncmp(kl__error_get(), "etcd authenticate request", 25));
        json_decref(jn);
        json_decref(jp);
    } else {
        want = json_object();
        CHECK(want != NULL);
        jset(want, "name", jn);
        jset(want, "password", jp);
        check_request(body, want, "authenticate request");
    }
    free(name);
    free(password);
}

/* ---- int64 fields of a lease response, written eight ways ---- */

typedef enum int_state { INT_ABSENT, INT_OK, INT_BAD_FIELD, INT_BAD_JSON } int_state;

/* Appends ,"key":<v written as fmt> (nothing when absent) and says what a
 * decoder makes of it: fmt 0 "v", 1 v, 2 absent, 3 null, 4 "+v", 5 "v<digit>",
 * 6 v<digit> (a JSON integer), 7 v.0 (a JSON real). */
static int_state put_int(kl__buf *b, const char *key, int first, int64_t v, unsigned fmt,
                         unsigned digit, int64_t *value)
{
    const char *sep = first ? "" : ",";
    int_state st = INT_OK;
    int fits;

    *value = 0;
    if (fmt == 2)
        return INT_ABSENT;
    if (fmt == 3) {
        CHECK(kl__buf_printf(b, "%s\"%s\":null", sep, key) == 0);
        return INT_ABSENT;
    }
    switch (fmt) {
    case 0:
    case 1:
        CHECK(kl__buf_printf(b, fmt ? "%s\"%s\":%" PRId64 : "%s\"%s\":\"%" PRId64 "\"", sep, key,
                             v) == 0);
        *value = v;
        break;
    case 4:
        CHECK(kl__buf_printf(b, "%s\"%s\":\"+%" PRId64 "\"", sep, key, v) == 0);
        st = INT_BAD_FIELD;
        break;
    case 5:
    case 6:
        fits = v >= 0 ? v <= (INT64_MAX - (int64_t)digit) / 10
                      : v >= (INT64_MIN + (int64_t)digit) / 10;
        CHECK(kl__buf_printf(b, fmt == 6 ? "%s\"%s\":%" PRId64 "%u" : "%s\"%s\":\"%" PRId64 "%u\"",
                             sep, key, v, digit) == 0);
        if (fmt == 6 && v == 0)
            st = INT_BAD_JSON; /* JSON has no leading zeros */
        else if (!fits)
            st = fmt == 6 ? INT_BAD_JSON : INT_BAD_FIELD;
        else
            *value = v >= 0 ? v * 10 + (int64_t)digit : v * 10 - (int64_t)digit;
        break;
    default:
        CHECK(kl__buf_printf(b, "%s\"%s\":%" PRId64 ".0", sep, key, v) == 0);
        st = INT_BAD_FIELD;
        break;
    }
    return st;
}

static void check_lease_response(int64_t rev, int64_t id, int64_t ttl, int64_t granted,
                                 unsigned fmt, int wrap)
{
    static const char *const names[] = {"ID", "TTL", "grantedTTL"};
    int64_t in[4] = {rev, id, ttl, granted}, v[4];
    int_state st[4];
    unsigned digit = fmt >> 12 & 7;
    kl__buf b = {0};
    kl__etcd_lease l;
    int64_t hrev;
    int bad_json = 0, bad_field = 0, err;

    CHECK(kl__buf_printf(&b, "%s{\"header\":{", wrap ? "{\"result\":" : "") == 0);
    st[0] = put_int(&b, "revision", 1, in[0], fmt & 7, digit, &v[0]);
    CHECK(kl__buf_append(&b, "}", 1) == 0);
    for (int i = 1; i < 4; i++)
        st[i] = put_int(&b, names[i - 1], 0, in[i], fmt >> (3 * i) & 7, digit, &v[i]);
    CHECK(kl__buf_append(&b, wrap ? "}}" : "}", wrap ? 2 : 1) == 0);
    for (int i = 0; i < 4; i++) {
        bad_json |= st[i] == INT_BAD_JSON;
        bad_field |= st[i] == INT_BAD_FIELD;
    }

    err = kl__etcd_parse_header(&hrev, b.data, b.len);
    if (bad_json || st[0] == INT_BAD_FIELD)
        CHECK_MSG(err == K8SLEASE_EPROTOCOL && hrev == 0, "%s: %d", b.data, err);
    else
        CHECK_MSG(err == 0 && hrev == v[0], "%s: %d, revision %" PRId64, b.data, err, hrev);

    err = kl__etcd_parse_grant(&l, b.data, b.len);
    if (bad_json || bad_field || st[1] != INT_OK || v[1] <= 0 || st[2] != INT_OK || v[2] <= 0) {
        CHECK_MSG(err == K8SLEASE_EPROTOCOL && lease_is_zero(&l), "%s: grant %d", b.data, err);
    } else {
        CHECK_MSG(err == 0 && l.revision == v[0] && l.id == v[1] && l.ttl == v[2] &&
                      l.granted_ttl == v[3],
                  "%s: grant %d", b.data, err);
    }

    err = kl__etcd_parse_keepalive(&l, b.data, b.len);
    if (bad_json || bad_field) {
        CHECK_MSG(err == K8SLEASE_EPROTOCOL && lease_is_zero(&l), "%s: keepalive %d", b.data, err);
    } else {
        int64_t want_ttl = st[1] == INT_ABSENT || v[2] < 0 ? 0 : v[2];

        CHECK_MSG(err == 0 && l.revision == v[0] && l.id == v[1] && l.ttl == want_ttl &&
                      l.granted_ttl == v[3],
                  "%s: keepalive %d", b.data, err);
    }

    err = kl__etcd_parse_timetolive(&l, b.data, b.len);
    if (bad_json || bad_field || st[1] == INT_ABSENT) {
        CHECK_MSG(err == K8SLEASE_EPROTOCOL && lease_is_zero(&l), "%s: timetolive %d", b.data, err);
    } else {
        CHECK_MSG(err == 0 && l.revision == v[0] && l.id == v[1] &&
                      l.ttl == (v[2] < 0 ? -1 : v[2]) && l.granted_ttl == v[3],
                  "%s: timetolive %d", b.data, err);
    }

    kl__buf_free(&b);
}

/* ---- range, txn and watch responses built from the input's kvs ---- */

typedef struct fz_kv {
    fz_bytes key, value;
    unsigned fmt; /* bit 0: int64s as JSON integers; 1: zeros left out; 2: an empty value
                     left out; 3-5: the event type's spelling */
    int64_t ints[4];
} fz_kv;

#define FZ_MAX_KVS 4

static const char *const kv_int_names[] = {"create_revision", "mod_revision", "version", "lease"};

static json_t *kv_json(const fz_kv *k)
{
    json_t *o = json_object();

    CHECK(o != NULL);
    jset(o, "key", jb64(&k->key));
    if (k->value.len || !(k->fmt & 4))
        jset(o, "value", jb64(&k->value));
    for (int i = 0; i < 4; i++)
        if (k->ints[i] || !(k->fmt & 2))
            jset(o, kv_int_names[i], jint64(k->ints[i], k->fmt & 1));
    return o;
}

static kl__etcd_kv kv_want(const fz_kv *k)
{
    kl__etcd_kv kv;

    kv.key = k->key.p;
    kv.key_len = k->key.len;
    kv.value = k->value.p;
    kv.value_len = k->value.len;
    kv.create_revision = k->ints[0];
    kv.mod_revision = k->ints[1];
    kv.version = k->ints[2];
    kv.lease = k->ints[3];
    return kv;
}

/* A RangeResponse of kvs; want gets it (borrowing wkvs). */
static json_t *range_json(const fz_kv *kvs, size_t n, int64_t rev, int more, int64_t count,
                          int number, kl__etcd_kv *wkvs, kl__etcd_range *want)
{
    json_t *o = json_object(), *hdr = json_object(), *a;

    CHECK(o != NULL && hdr != NULL);
    jset(hdr, "revision", jint64(rev, number));
    jset(o, "header", hdr);
    if (n) {
        a = json_array();
        CHECK(a != NULL);
        for (size_t i = 0; i < n; i++) {
            CHECK(json_array_append_new(a, kv_json(&kvs[i])) == 0);
            wkvs[i] = kv_want(&kvs[i]);
        }
        jset(o, "kvs", a);
    }
    if (more)
        jset(o, "more", json_true());
    if (count)
        jset(o, "count", jint64(count, number));
    memset(want, 0, sizeof(*want));
    want->revision = rev;
    want->kvs = n ? wkvs : NULL;
    want->n_kvs = n;
    want->more = more;
    want->count = count;
    return o;
}

static char *dump_msg(json_t *msg, int wrap, size_t *len)
{
    json_t *root = msg;
    char *s;

    if (wrap) {
        root = json_object();
        CHECK(root != NULL);
        jset(root, "result", msg);
    }
    s = json_dumps(root, JSON_COMPACT);
    CHECK(s != NULL);
    json_decref(root);
    *len = strlen(s);
    return s;
}

static void check_built_responses(const fz_kv *kvs, size_t n, const int64_t *r, unsigned flags,
                                  const char *reason)
{
    static const kl__etcd_event_type ev_types[] = {
        KL_ETCD_EVENT_PUT,    KL_ETCD_EVENT_PUT,    KL_ETCD_EVENT_PUT,    KL_ETCD_EVENT_PUT,
        KL_ETCD_EVENT_DELETE, KL_ETCD_EVENT_DELETE, KL_ETCD_EVENT_DELETE, KL_ETCD_EVENT_DELETE};
    kl__etcd_kv wkvs[FZ_MAX_KVS];
    kl__etcd_watch_event wev[FZ_MAX_KVS];
    kl__etcd_op wops[3];
    kl__etcd_range want, got;
    kl__etcd_txn tgot, twant;
    kl__etcd_watch_msg wgot, wwant;
    json_t *msg, *events, *ev, *a, *o, *hdr;
    int number = flags & 1, wrap = flags >> 1 & 1, more = flags >> 2 & 1, err;
    char *body;
    size_t len, n_ops = 0;

    /* range */
    msg = range_json(kvs, n, r[0], more, r[1], number, wkvs, &want);
    body = dump_msg(msg, wrap, &len);
    err = kl__etcd_parse_range(&got, body, len);
    if (r[0] > 0) {
        CHECK_MSG(err == 0, "%s: %d (%s)", body, err, kl__error_get());
        CHECK_MSG(range_eq(&got, &want), "%s: decoded otherwise", body);
        check_range_out(&got);
    } else {
        CHECK_MSG(err == K8SLEASE_EPROTOCOL && range_is_zero(&got), "%s: %d", body, err);
    }
    kl__etcd_range_clear(&got);
    free(body);

    /* txn: some of a range, a put and a delete response, in that order */
    msg = json_object();
    hdr = json_object();
    a = json_array();
    CHECK(msg != NULL && hdr != NULL && a != NULL);
    jset(hdr, "revision", jint64(r[0], number));
    jset(msg, "header", hdr);
    if (flags >> 3 & 1)
        jset(msg, "succeeded", json_true());
    if (flags >> 4 & 1) {
        o = json_object();
        CHECK(o != NULL);
        jset(o, "response_range",
             range_json(kvs, n, r[2], more, r[1], number, wkvs, &wops[n_ops].range));
        CHECK(json_array_append_new(a, o) == 0);
        wops[n_ops].type = KL_ETCD_OP_RANGE;
        wops[n_ops++].deleted = 0;
    }
    if (flags >> 5 & 1) {
        o = json_object();
        CHECK(o != NULL);
        jset(o, "response_put", range_json(NULL, 0, r[3], 0, 0, number, NULL, &wops[n_ops].range));
        CHECK(json_array_append_new(a, o) == 0);
        wops[n_ops].type = KL_ETCD_OP_PUT;
        wops[n_ops++].deleted = 0;
    }
    if (flags >> 6 & 1) {
        json_t *del = range_json(NULL, 0, r[4], 0, 0, number, NULL, &wops[n_ops].range);

        jset(del, "deleted", jint64(r[5], number));
        o = json_object();
        CHECK(o != NULL);
        jset(o, "response_delete_range", del);
        CHECK(json_array_append_new(a, o) == 0);
        wops[n_ops].type = KL_ETCD_OP_DELETE;
        wops[n_ops++].deleted = r[5];
    }
    jset(msg, "responses", a);
    body = dump_msg(msg, wrap, &len);
    err = kl__etcd_parse_txn(&tgot, body, len);
    if (r[0] > 0) {
        twant.revision = r[0];
        twant.succeeded = flags >> 3 & 1;
        twant.ops = wops;
        twant.n_ops = n_ops;
        CHECK_MSG(err == 0, "%s: %d (%s)", body, err, kl__error_get());
        CHECK_MSG(txn_eq(&tgot, &twant), "%s: decoded otherwise", body);
    } else {
        CHECK_MSG(err == K8SLEASE_EPROTOCOL && txn_is_zero(&tgot), "%s: %d", body, err);
    }
    kl__etcd_txn_clear(&tgot);
    free(body);

    /* watch: the kvs as events */
    msg = json_object();
    hdr = json_object();
    events = json_array();
    CHECK(msg != NULL && hdr != NULL && events != NULL);
    if (r[0])
        jset(hdr, "revision", jint64(r[0], number));
    jset(msg, "header", hdr);
    if (r[1])
        jset(msg, "watch_id", jint64(r[1], number));
    if (flags >> 7 & 1)
        jset(msg, "created", json_true());
    if (flags >> 8 & 1)
        jset(msg, "canceled", json_true());
    if (flags >> 9 & 1)
        jset(msg, "fragment", json_true());
    if (r[2])
        jset(msg, "compact_revision", jint64(r[2], number));
    if (reason[0])
        jset(msg, "cancel_reason", json_string(reason));
    for (size_t i = 0; i < n; i++) {
        static const char *const spell[] = {NULL,     "PUT", NULL,     NULL,
                                            "DELETE", NULL,  "DELETE", "DELETE"};
        unsigned t = kvs[i].fmt >> 3 & 7;

        ev = json_object();
        CHECK(ev != NULL);
        if (spell[t])
            jset(ev, "type", json_string(spell[t]));
        else if (t == 2 || t == 5)
            jset(ev, "type", json_integer(t == 5));
        else if (t == 3)
            jset(ev, "type", json_null());
        jset(ev, "kv", kv_json(&kvs[i]));
        CHECK(json_array_append_new(events, ev) == 0);
        wev[i].type = ev_types[t];
        wev[i].kv = kv_want(&kvs[i]);
    }
    if (n)
        jset(msg, "events", events);
    else
        json_decref(events);
    body = dump_msg(msg, wrap, &len);
    memset(&wwant, 0, sizeof(wwant));
    wwant.revision = r[0];
    wwant.watch_id = r[1];
    wwant.created = flags >> 7 & 1;
    wwant.canceled = flags >> 8 & 1;
    wwant.fragment = flags >> 9 & 1;
    wwant.compact_revision = r[2];
    wwant.cancel_reason = (char *)reason;
    wwant.events = n ? wev : NULL;
    wwant.n_events = n;
    err = kl__etcd_parse_watch_msg(&wgot, body, len);
    CHECK_MSG(err == 0, "%s: %d (%s)", body, err, kl__error_get());
    CHECK_MSG(watch_eq(&wgot, &wwant), "%s: decoded otherwise", body);
    kl__etcd_watch_msg_clear(&wgot);
    free(body);
}

/* ---- gateway errors ---- */

/* The table of kl__etcd_error_code for a message that says nothing. */
static int doc_error_code(int grpc_code)
{
    switch (grpc_code) {
    case 16:
    case 7:
        return K8SLEASE_EAUTH;
    case 5:
        return K8SLEASE_ENOTFOUND;
    case 6:
    case 10:
        return K8SLEASE_ECONFLICT;
    case 3:
        return K8SLEASE_EINVAL;
    case 4:
        return K8SLEASE_ETIMEOUT;
    case 1:
    case 14:
        return K8SLEASE_ETRANSPORT;
    default:
        return K8SLEASE_ESERVER;
    }
}

/* An error body of each shape, with the code and message of the input:
 * kl__etcd_error_parse gives them back, every decoder gives the mapped code
 * and a message quoting the server's. */
static void check_error_bodies(int64_t code64, const char *text, unsigned shape)
{
    static const char *const auth[] = {
        "etcdserver: authentication failed", "etcdserver: user name is empty",
        "etcdserver: authentication is not enabled", "etcdserver: invalid auth token"};
    int code = code64 >= INT32_MIN && code64 <= INT32_MAX ? (int)code64 : 0;
    const char *want_msg = text;
    json_t *root = json_object(), *e;
    kl__etcd_error out;
    char *body, fallback[300];
    size_t len;
    int err;

    CHECK(root != NULL);
    snprintf(fallback, sizeof(fallback), "error: %s", text);
    switch (shape % 4) {
    case 0: /* unary call: "error" and "message", the same text */
        jset(root, "error", json_string(text));
        jset(root, "message", json_string(text));
        jset(root, "code", json_integer(code64));
        break;
    case 1: /* an empty "message" gives way to "error" */
        jset(root, "error", json_string(fallback));
        jset(root, "message", json_string(""));
        jset(root, "code", json_integer(code64));
        want_msg = fallback;
        break;
    case 2: /* a stream failing after its first message */
        e = json_object();
        CHECK(e != NULL);
        jset(e, "grpc_code", json_integer(code64));
        jset(e, "http_code", json_integer(503));
        jset(e, "message", json_string(text));
        jset(e, "http_status", json_string("Service Unavailable"));
        jset(root, "error", e);
        break;
    default: /* newer gateways: google.rpc.Status */
        jset(root, "code", json_integer(code64));
        jset(root, "message", json_string(text));
        jset(root, "details", json_array());
        break;
    }
    body = json_dumps(root, JSON_COMPACT);
    CHECK(body != NULL);
    len = strlen(body);
    json_decref(root);

    err = kl__etcd_error_parse(&out, body, len);
    CHECK_MSG(err == 0, "%s: %d", body, err);
    CHECK_MSG(out.grpc_code == code && out.message && !strcmp(out.message, want_msg),
              "%s: code %d message \"%s\"", body, out.grpc_code, str_or_empty(out.message));
    kl__etcd_error_clear(&out);
    kl__etcd_error_clear(&out);

    for (int d = 0; d < DEC_ERROR; d++) {
        etcd_out o;
        char want_tail[32];

        memset(&o, 0xa5, sizeof(o));
        err = etcd_decode((etcd_dec)d, &o, body, len);
        CHECK_MSG(err == kl__etcd_error_code(code, want_msg), "%s: %s %d", body, etcd_what[d], err);
        CHECK(etcd_out_is_zero((etcd_dec)d, &o));
        CHECK_MSG(!strncmp(kl__error_get(), "etcd: ", 6), "%s", kl__error_get());
        if (want_msg[0] && strlen(want_msg) <= 200)
            CHECK_MSG(strstr(kl__error_get(), want_msg) != NULL, "%s", kl__error_get());
        snprintf(want_tail, sizeof(want_tail), "(gRPC code %d)", code);
        CHECK_MSG(strstr(kl__error_get(), want_tail) != NULL, "%s", kl__error_get());
    }
    kl__free(body);

    /* The mapping as etcd_codec.h documents it. */
    CHECK_MSG(kl__etcd_error_code(code, "") == doc_error_code(code), "code %d", code);
    for (size_t i = 0; i < KL_ARRAY_LEN(auth); i++)
        CHECK_MSG(kl__etcd_error_code(code, auth[i]) == K8SLEASE_EAUTH, "code %d, %s", code,
                  auth[i]);
    CHECK(kl__etcd_error_code(code, "etcdserver: lease already exists") == K8SLEASE_ECONFLICT);
}

/* Input (read in order, missing bytes are 0; a string is a length byte and
 * its bytes, an int64 a selector byte, see fz_i64):
 *   key, range_end, value: strings; flags: 4 bytes (little-endian);
 *   a, b, c, d: int64; lease format: 2 bytes;
 *   n (byte, mod 5) kvs of key, value: strings, format: byte, 4 int64;
 *   r[0..5]: int64; error code: int64; error message: string; shape: byte.
 * flags: 0 no range_end; 1-2 sort order; 3-5 sort target; 6 keys_only;
 * 7 count_only; 8 serializable; 9 progress_notify; 10 NOPUT; 11 NODELETE;
 * 12 prev_kv; 13 timetolive keys; 14 wrap lease response in "result";
 * 16-25 the built responses (see check_built_responses). */
int kl_fuzz_etcd_encode(const uint8_t *data, size_t size)
{
    fz_in in = {data, size};
    fz_bytes key, range_end, value, probes[3], msg_b;
    fz_kv kvs[FZ_MAX_KVS];
    unsigned flags, lease_fmt, shape;
    int64_t a, b, c, d, r[6], code;
    size_t n;
    char *reason, *text;

    key = fz_take(&in);
    range_end = fz_take(&in);
    value = fz_take(&in);
    flags = fz_u8(&in);
    flags |= fz_u8(&in) << 8;
    flags |= fz_u8(&in) << 16;
    flags |= (unsigned)fz_u8(&in) << 24;
    a = fz_i64(&in);
    b = fz_i64(&in);
    c = fz_i64(&in);
    d = fz_i64(&in);
    lease_fmt = fz_u8(&in);
    lease_fmt |= fz_u8(&in) << 8;
    n = fz_u8(&in) % (FZ_MAX_KVS + 1);
    for (size_t i = 0; i < n; i++) {
        kvs[i].key = fz_take(&in);
        kvs[i].value = fz_take(&in);
        kvs[i].fmt = fz_u8(&in);
        for (int j = 0; j < 4; j++)
            kvs[i].ints[j] = fz_i64(&in);
    }
    for (int i = 0; i < 6; i++)
        r[i] = fz_i64(&in);
    code = fz_i64(&in);
    msg_b = fz_take(&in);
    shape = fz_u8(&in);

    check_base64_encode(&key);
    check_base64_encode(&value);
    probes[0] = range_end;
    probes[1] = value;
    probes[2] = key;
    check_prefix_range_end(&key, probes, 3);
    check_prefix_range_end(&range_end, probes, 3);

    check_range_request(&key, flags & 1 ? NULL : &range_end, a, b, c, flags);
    check_watch_request(&key, flags & 1 ? NULL : &range_end, b, flags);
    check_txn_requests(&key, &value, a, b);
    check_lease_requests(c, a, flags >> 13 & 1);
    check_authenticate_request(&key, &value);

    check_lease_response(a, b, c, d, lease_fmt, flags >> 14 & 1);
    reason = fz_text(&range_end);
    check_built_responses(kvs, n, r, flags >> 16, reason);
    text = fz_text(&msg_b);
    check_error_bodies(code, text, shape);

    free(text);
    free(reason);
    free(msg_b.p);
    for (size_t i = 0; i < n; i++) {
        free(kvs[i].key.p);
        free(kvs[i].value.p);
    }
    free(value.p);
    free(range_end.p);
    free(key.p);
    return 0;
}

const kl_fuzz_target kl_fuzz_targets[] = {
    {"lease", kl_fuzz_lease},
    {"status", kl_fuzz_status},
    {"watch", kl_fuzz_watch},
    {"kubeconfig", kl_fuzz_kubeconfig},
    {"base64", kl_fuzz_base64},
    {"exec_credential", kl_fuzz_exec_credential},
    {"microtime", kl_fuzz_microtime},
    {"etcd", kl_fuzz_etcd},
    {"etcd_encode", kl_fuzz_etcd_encode},
};

const size_t kl_fuzz_target_count = KL_ARRAY_LEN(kl_fuzz_targets);
