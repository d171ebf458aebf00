/* Lease JSON codec, MicroTime and Status decoding, watch-stream framing. */
#include "k8s/codec.h"

#include <string.h>

#include "core/clock.h"
#include "core/common.h"
#include "k8s/scan.h"

#define US_PER_S   INT64_C(1000000)
#define US_PER_DAY (US_PER_S * 86400)

/* ------------------------------------------------------------------------ */
/* MicroTime                                                                */
/* ------------------------------------------------------------------------ */

/* Proleptic Gregorian calendar arithmetic (Howard Hinnant's algorithms;
 * days_from_civil is kl__days_from_civil in core/clock.c). */
static void civil_from_days(int64_t z, int64_t *y, int *m, int *d)
{
    int64_t era, doe, yoe, doy, mp;

    z += 719468;
    era = (z >= 0 ? z : z - 146096) / 146097;
    doe = z - era * 146097;
    yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

static int days_in_month(int y, int m)
{
    static const int days[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};

    if (m == 2 && y % 4 == 0 && (y % 100 != 0 || y % 400 == 0))
        return 29;
    return days[m - 1];
}

/* Writes v (>= 0) with at least width digits, zero-padded. */
static char *put_num(char *p, int64_t v, int width)
{
    char tmp[20];
    int n = 0;

    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v > 0 || n < width);
    while (n > 0)
        *p++ = tmp[--n];
    return p;
}

/* Hand-rolled rather than snprintf: no locale, and the compiler can see that
 * it fits. Years outside 0..9999 (not RFC 3339) come out with a sign or more
 * digits; |year| < 300000 for any int64, so at most 31 bytes with the NUL. */
char *kl__microtime_format(int64_t us, char *buf)
{
    int64_t days = us / US_PER_DAY;
    int64_t rem = us % US_PER_DAY;
    int64_t year, secs;
    int month, day;
    char *p = buf;

    /* C division truncates toward zero; times before 1970 need floor. */
    if (rem < 0) {
        rem += US_PER_DAY;
        days--;
    }
    civil_from_days(days, &year, &month, &day);
    secs = rem / US_PER_S;
    if (year < 0) {
        *p++ = '-';
        year = -year;
    }
    p = put_num(p, year, 4);
    *p++ = '-';
    p = put_num(p, month, 2);
    *p++ = '-';
    p = put_num(p, day, 2);
    *p++ = 'T';
    p = put_num(p, secs / 3600, 2);
    *p++ = ':';
    p = put_num(p, secs / 60 % 60, 2);
    *p++ = ':';
    p = put_num(p, secs % 60, 2);
    *p++ = '.';
    p = put_num(p, rem % US_PER_S, 6);
    *p++ = 'Z';
    *p = '\0';
    return buf;
}

/* Reads exactly n decimal digits. Stops at the first non-digit, so it never
 * reads past a NUL. */
static int read_digits(const char *s, int n, int *out)
{
    int v = 0;

    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 0;
}

/* Returns NULL on success, else why s is not an RFC 3339 time. Each check
 * reads a character only after the previous ones matched (&& short-circuits),
 * so a short string is never over-read. */
static const char *parse_rfc3339(const char *s, int64_t *us)
{
    int year, month, day, hour, min, sec, off_h = 0, off_m = 0, off_sign = 0;
    int64_t frac = 0, secs;
    int ndigits = 0;
    const char *p = s;

    if (read_digits(p, 4, &year) || p[4] != '-' || read_digits(p + 5, 2, &month) || p[7] != '-' ||
        read_digits(p + 8, 2, &day) || (p[10] != 'T' && p[10] != 't') ||
        read_digits(p + 11, 2, &hour) || p[13] != ':' || read_digits(p + 14, 2, &min) ||
        p[16] != ':' || read_digits(p + 17, 2, &sec))
        return "want YYYY-MM-DDTHH:MM:SS[.fraction](Z|+hh:mm|-hh:mm)";
    p += 19;
    if (*p == '.') {
        for (p++; *p >= '0' && *p <= '9'; p++, ndigits++) {
            if (ndigits < 6)
                frac = frac * 10 + (*p - '0');
        }
        if (ndigits == 0)
            return "no digits after the decimal point";
        for (int i = ndigits; i < 6; i++)
            frac *= 10;
    }
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        off_sign = *p == '-' ? -1 : 1;
        if (read_digits(p + 1, 2, &off_h) || p[3] != ':' || read_digits(p + 4, 2, &off_m))
            return "bad time zone offset, want +hh:mm or -hh:mm";
        p += 6;
    } else {
        return "missing time zone (Z or +hh:mm)";
    }
    if (*p != '\0')
        return "trailing characters";
    if (month < 1 || month > 12)
        return "month out of range";
    if (day < 1 || day > days_in_month(year, month))
        return "day out of range";
    if (hour > 23)
        return "hour out of range";
    if (min > 59)
        return "minute out of range";
    /* Go's time.Parse rejects leap seconds too. */
    if (sec > 59)
        return "second out of range";
    if (off_h > 23 || off_m > 59)
        return "time zone offset out of range";
    secs = kl__days_from_civil(year, month, day) * 86400 + hour * 3600 + min * 60 + sec -
           off_sign * (off_h * 3600 + off_m * 60);
    *us = secs * US_PER_S + frac;
    return NULL;
}

int kl__microtime_parse(const char *s, int64_t *us)
{
    const char *why;
    int64_t v = 0;

    if (!s)
        return kl__error_set(K8SLEASE_EPROTOCOL, "invalid MicroTime: null");
    why = parse_rfc3339(s, &v);
    if (why)
        return kl__error_set(K8SLEASE_EPROTOCOL, "invalid MicroTime \"%.64s\" (%s)", s, why);
    *us = v;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* JSON helpers                                                             */
/* ------------------------------------------------------------------------ */

/* jansson returns NULL without any message when some allocations fail, so
 * an empty message (jerr zeroed by the caller) means out of memory too. */
static int json_fail(const json_error_t *jerr, const char *what)
{
    if (json_error_code(jerr) == json_error_out_of_memory || jerr->text[0] == '\0')
        return kl__error_set(K8SLEASE_ENOMEM, "%s: out of memory", what);
    return kl__error_set(K8SLEASE_EPROTOCOL, "%s: not valid JSON at line %d column %d: %s", what,
                         jerr->line, jerr->column, jerr->text);
}

/* Optional string member: absent or null gives *out = NULL. */
static int opt_string(const json_t *obj, const char *key, const char *path, const char **out)
{
    json_t *v = json_object_get(obj, key);

    *out = NULL;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return kl__error_set(K8SLEASE_EPROTOCOL, "%s: must be a string", path);
    *out = json_string_value(v);
    return 0;
}

/* A "kind" present and different from want means the server answered with
 * another object (usually a Status) where we expected want. */
static int check_kind(const json_t *obj, const char *want)
{
    const char *kind, *msg = NULL;
    int err;

    if ((err = opt_string(obj, "kind", "kind", &kind)) < 0)
        return err;
    if (!kind || strcmp(kind, want) == 0)
        return 0;
    if (strcmp(kind, "Status") == 0 && opt_string(obj, "message", "message", &msg) == 0 && msg)
        return kl__error_set(K8SLEASE_EPROTOCOL, "expected a %s, got a Status: %s", want, msg);
    return kl__error_set(K8SLEASE_EPROTOCOL, "expected a %s, got a %s", want, kind);
}

/* ------------------------------------------------------------------------ */
/* Lease decoding                                                           */
/* ------------------------------------------------------------------------ */

/* leaseDurationSeconds and leaseTransitions are int32 in the Go API. */
static int spec_int32(const json_t *spec, const char *key, int64_t *out)
{
    json_t *v = json_object_get(spec, key);
    json_int_t n;

    *out = 0;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v))
        return kl__error_set(K8SLEASE_EPROTOCOL, "spec.%s: must be an integer", key);
    n = json_integer_value(v);
    if (n < 0)
        return kl__error_set(K8SLEASE_EPROTOCOL, "spec.%s: must not be negative, got %lld", key,
                             (long long)n);
    if (n > INT32_MAX)
        return kl__error_set(K8SLEASE_EPROTOCOL, "spec.%s: %lld does not fit an int32", key,
                             (long long)n);
    *out = n;
    return 0;
}

static int spec_time(const json_t *spec, const char *key, int64_t *out)
{
    json_t *v = json_object_get(spec, key);
    int err;

    *out = 0;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return kl__error_set(K8SLEASE_EPROTOCOL, "spec.%s: must be a string", key);
    if ((err = kl__microtime_parse(json_string_value(v), out)) < 0)
        return kl__error_wrap(err, "spec.%s", key);
    return 0;
}

static int decode_spec(const json_t *spec, kl__lease_spec *out)
{
    int err;

    if (!spec || json_is_null(spec))
        return 0;
    if (!json_is_object(spec))
        return kl__error_set(K8SLEASE_EPROTOCOL, "spec: must be an object");
    if ((err = opt_string(spec, "holderIdentity", "spec.holderIdentity", &out->holder)) < 0 ||
        (err = spec_int32(spec, "leaseDurationSeconds", &out->duration_s)) < 0 ||
        (err = spec_time(spec, "acquireTime", &out->acquire_us)) < 0 ||
        (err = spec_time(spec, "renewTime", &out->renew_us)) < 0 ||
        (err = spec_int32(spec, "leaseTransitions", &out->transitions)) < 0)
        return err;
    return 0;
}

/* The fields coordinated leader election's controller writes. The election
 * reads them; updates keep them as they are, like every field not ours. */
static int decode_coordination(const json_t *spec, kl__lease *l)
{
    const char *s;
    int err;

    l->preferred_holder = l->strategy = "";
    if (!json_is_object(spec))
        return 0;
    if ((err = opt_string(spec, "preferredHolder", "spec.preferredHolder", &s)) < 0)
        return err;
    if (s)
        l->preferred_holder = s;
    if ((err = opt_string(spec, "strategy", "spec.strategy", &s)) < 0)
        return err;
    if (s)
        l->strategy = s;
    return 0;
}

static int decode_lease(kl__lease *l)
{
    json_t *meta, *ann;
    const char *s;
    int err;

    if ((err = check_kind(l->root, "Lease")) < 0)
        return err;
    meta = json_object_get(l->root, "metadata");
    if (meta && !json_is_object(meta) && !json_is_null(meta))
        return kl__error_set(K8SLEASE_EPROTOCOL, "metadata: must be an object");
    if ((err = opt_string(meta, "name", "metadata.name", &l->name)) < 0)
        return err;
    if (!l->name || !l->name[0]) {
        l->name = NULL;
        return kl__error_set(K8SLEASE_EPROTOCOL, "metadata.name missing");
    }
    if ((err = opt_string(meta, "namespace", "metadata.namespace", &s)) < 0)
        return err;
    l->ns = s ? s : "";
    if ((err = opt_string(meta, "resourceVersion", "metadata.resourceVersion", &s)) < 0)
        return err;
    l->rv = s ? s : "";
    if ((err = opt_string(meta, "uid", "metadata.uid", &s)) < 0)
        return err;
    l->uid = s ? s : "";
    if ((err = decode_spec(json_object_get(l->root, "spec"), &l->spec)) < 0)
        return err;
    /* Not an error here: crash failover says so when it reads the record. */
    ann = json_object_get(json_object_get(meta, "annotations"), KL_LEASE_HOLDER_CONTAINER);
    l->holder_container = json_string_value(ann);
    l->holder_container_bad = ann && !l->holder_container;
    return decode_coordination(json_object_get(l->root, "spec"), l);
}

int kl__lease_from_json(kl__lease **out, json_t *obj)
{
    kl__lease *l = NULL;
    int err = 0;

    *out = NULL;
    if (!json_is_object(obj))
        return kl__error_set(K8SLEASE_EPROTOCOL, "Lease: not a JSON object");
    l = kl__calloc(1, sizeof(*l));
    if (!l)
        return kl__error_set(K8SLEASE_ENOMEM, "Lease: out of memory");
    l->root = json_incref(obj);
    if ((err = decode_lease(l)) < 0)
        goto out;
    *out = l;
    l = NULL;
out:
    /* One place adds "Lease ns/name" so every field error names its object. */
    if (err == K8SLEASE_EPROTOCOL && l && l->name)
        kl__error_wrap(err, "Lease %s%s%s", l->ns ? l->ns : "", l->ns && l->ns[0] ? "/" : "",
                       l->name);
    else if (err == K8SLEASE_EPROTOCOL)
        kl__error_wrap(err, "Lease");
    kl__lease_free(l);
    return err;
}

int kl__lease_parse_json(kl__lease **out, const char *body, size_t len)
{
    json_error_t jerr;
    json_t *root;
    int err;

    *out = NULL;
    memset(&jerr, 0, sizeof(jerr));
    root = json_loadb(body, len, JSON_DECODE_ANY, &jerr);
    if (!root)
        return json_fail(&jerr, "Lease body");
    err = kl__lease_from_json(out, root);
    json_decref(root);
    /* jansson skips a NUL byte after a literal ("null\0,"): such a text is
     * no C string, and the tree's dump stands in for it. */
    if (err < 0 || memchr(body, '\0', len))
        return err;
    if (!((*out)->text = kl__strndup(body, len))) {
        kl__lease_free(*out);
        *out = NULL;
        return kl__error_set(K8SLEASE_ENOMEM, "Lease: out of memory");
    }
    (*out)->text_len = len;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Lease decoding without a tree                                            */
/* ------------------------------------------------------------------------ */

/* The jansson path above takes whatever the scanner declines, so every
 * check here declines (1) rather than fails: a Lease that is wrong gets
 * the jansson path's message, which names the field. */

/* Absent, null or a string: what opt_string accepts. */
static int scan_opt_string(const kl__scan_val *v)
{
    return v->type == KL_SCAN_ABSENT || v->type == KL_SCAN_NULL || v->type == KL_SCAN_STRING;
}

/* Absent, null or an integer in 0..INT32_MAX: what spec_int32 accepts. */
static int scan_int32(const kl__scan_val *v, int64_t *out)
{
    *out = 0;
    if (v->type == KL_SCAN_ABSENT || v->type == KL_SCAN_NULL)
        return 0;
    if (v->type != KL_SCAN_INT || v->n < 0 || v->n > INT32_MAX)
        return -1;
    *out = v->n;
    return 0;
}

/* Absent, null or a MicroTime: what spec_time accepts. */
static int scan_time(const kl__scan_val *v, int64_t *out)
{
    char buf[64];

    *out = 0;
    if (v->type == KL_SCAN_ABSENT || v->type == KL_SCAN_NULL)
        return 0;
    if (v->type != KL_SCAN_STRING || v->len >= sizeof(buf))
        return -1;
    kl__scan_string(v, buf);
    return parse_rfc3339(buf, out) ? -1 : 0;
}

/* The strings a kl__lease points to, decoded into its own block. */
static const int scan_strings[] = {KL_SCAN_NAME,     KL_SCAN_NAMESPACE,       KL_SCAN_RV,
                                   KL_SCAN_UID,      KL_SCAN_HOLDER,          KL_SCAN_PREFERRED,
                                   KL_SCAN_STRATEGY, KL_SCAN_HOLDER_CONTAINER};

/* A string member as a field: decoded into *at, or dflt when absent/null. */
static const char *scan_field(const kl__scan_val *v, char **at, const char *dflt)
{
    const char *s = *at;

    if (v->type != KL_SCAN_STRING)
        return dflt;
    *at += kl__scan_string(v, *at) + 1;
    return s;
}

/* A kl__lease from a scan whose whole object is text[0..len): 0, 1 to
 * decline, K8SLEASE_ENOMEM. */
static int lease_from_scan(kl__lease **out, const kl__scan *sc, const char *text, size_t len)
{
    const kl__scan_val *v = sc->v;
    const kl__scan_val *kind = &v[KL_SCAN_KIND];
    size_t size = sizeof(kl__lease);
    kl__lease_spec spec = {0};
    kl__lease *l;
    char *at;

    *out = NULL;
    if (!(kind->type == KL_SCAN_ABSENT || kind->type == KL_SCAN_NULL ||
          (kind->type == KL_SCAN_STRING && kind->len == 5 && !memcmp(kind->p, "Lease", 5))))
        return 1;
    if (v[KL_SCAN_METADATA].type != KL_SCAN_OBJECT || v[KL_SCAN_NAME].type != KL_SCAN_STRING ||
        v[KL_SCAN_NAME].len == 0 || !scan_opt_string(&v[KL_SCAN_NAMESPACE]) ||
        !scan_opt_string(&v[KL_SCAN_RV]) || !scan_opt_string(&v[KL_SCAN_UID]))
        return 1;
    /* A record that is not a string is crash failover's to report: the
     * jansson path keeps that apart. */
    if (!(v[KL_SCAN_ANNOTATIONS].type == KL_SCAN_ABSENT ||
          v[KL_SCAN_ANNOTATIONS].type == KL_SCAN_NULL ||
          v[KL_SCAN_ANNOTATIONS].type == KL_SCAN_OBJECT) ||
        !(v[KL_SCAN_HOLDER_CONTAINER].type == KL_SCAN_ABSENT ||
          v[KL_SCAN_HOLDER_CONTAINER].type == KL_SCAN_STRING))
        return 1;
    if (!(v[KL_SCAN_SPEC].type == KL_SCAN_ABSENT || v[KL_SCAN_SPEC].type == KL_SCAN_NULL ||
          v[KL_SCAN_SPEC].type == KL_SCAN_OBJECT) ||
        !scan_opt_string(&v[KL_SCAN_HOLDER]) || !scan_opt_string(&v[KL_SCAN_PREFERRED]) ||
        !scan_opt_string(&v[KL_SCAN_STRATEGY]) ||
        scan_int32(&v[KL_SCAN_DURATION], &spec.duration_s) < 0 ||
        scan_int32(&v[KL_SCAN_TRANSITIONS], &spec.transitions) < 0 ||
        scan_time(&v[KL_SCAN_ACQUIRE], &spec.acquire_us) < 0 ||
        scan_time(&v[KL_SCAN_RENEW], &spec.renew_us) < 0)
        return 1;

    for (size_t i = 0; i < KL_ARRAY_LEN(scan_strings); i++)
        if (v[scan_strings[i]].type == KL_SCAN_STRING)
            size += v[scan_strings[i]].len + 1;
    if (!(l = kl__malloc(size)))
        return kl__error_set(K8SLEASE_ENOMEM, "Lease: out of memory");
    memset(l, 0, sizeof(*l));
    if (!(l->text = kl__strndup(text, len))) {
        kl__free(l);
        return kl__error_set(K8SLEASE_ENOMEM, "Lease: out of memory");
    }
    l->text_len = len;
    at = (char *)(l + 1);
    l->spec = spec;
    l->name = scan_field(&v[KL_SCAN_NAME], &at, "");
    l->ns = scan_field(&v[KL_SCAN_NAMESPACE], &at, "");
    l->rv = scan_field(&v[KL_SCAN_RV], &at, "");
    l->uid = scan_field(&v[KL_SCAN_UID], &at, "");
    l->spec.holder = scan_field(&v[KL_SCAN_HOLDER], &at, NULL);
    l->preferred_holder = scan_field(&v[KL_SCAN_PREFERRED], &at, "");
    l->strategy = scan_field(&v[KL_SCAN_STRATEGY], &at, "");
    l->holder_container = scan_field(&v[KL_SCAN_HOLDER_CONTAINER], &at, NULL);
    *out = l;
    return 0;
}

int kl__lease_scan(kl__lease **out, const char *body, size_t len)
{
    kl__scan sc;
    const kl__scan_val *obj = &sc.v[KL_SCAN_OBJ];

    *out = NULL;
    if (kl__scan_lease(&sc, body, len) < 0)
        return 1;
    return lease_from_scan(out, &sc, obj->p, obj->len);
}

int kl__lease_parse(kl__lease **out, const char *body, size_t len)
{
    int err = kl__lease_scan(out, body, len);

    return err == 1 ? kl__lease_parse_json(out, body, len) : err;
}

void kl__lease_free(kl__lease *lease)
{
    if (!lease)
        return;
    json_decref(lease->root);
    kl__free(lease->text);
    kl__free(lease);
}

json_t *kl__lease_root(kl__lease *lease)
{
    json_error_t jerr;

    if (lease->root)
        return lease->root;
    if (!lease->text) {
        kl__error_set(K8SLEASE_ESTATE, "Lease %s: its text was taken", lease->name);
        return NULL;
    }
    memset(&jerr, 0, sizeof(jerr));
    if (!(lease->root = json_loadb(lease->text, lease->text_len, JSON_DECODE_ANY, &jerr)))
        json_fail(&jerr, "Lease text");
    return lease->root;
}

char *kl__lease_text_dup(const kl__lease *lease)
{
    char *t = lease->text ? kl__strndup(lease->text, lease->text_len) : kl__json_dump(lease->root);

    if (!t)
        kl__error_set(K8SLEASE_ENOMEM, "Lease %s: out of memory", lease->name);
    return t;
}

char *kl__lease_text_take(kl__lease *lease)
{
    char *t = lease->text;

    if (!t)
        return kl__lease_text_dup(lease);
    lease->text = NULL;
    return t;
}

/* ------------------------------------------------------------------------ */
/* Lease encoding                                                           */
/* ------------------------------------------------------------------------ */

static int set_time(json_t *obj, const char *key, int64_t us)
{
    char buf[KL_MICROTIME_BUFLEN];

    /* 0 is "absent": omitted, as Go's omitempty does for a nil *MicroTime. */
    if (us == 0) {
        json_object_del(obj, key);
        return 0;
    }
    return json_object_set_new(obj, key, json_string(kl__microtime_format(us, buf)));
}

/* Existing keys keep their position (jansson replaces values in place), so
 * an update reorders nothing. */
static int set_spec(json_t *obj, const kl__lease_spec *spec)
{
    if (json_object_set_new(obj, "holderIdentity", json_string(spec->holder ? spec->holder : "")))
        return -1;
    if (spec->duration_s == 0)
        json_object_del(obj, "leaseDurationSeconds");
    else if (json_object_set_new(obj, "leaseDurationSeconds", json_integer(spec->duration_s)))
        return -1;
    if (set_time(obj, "acquireTime", spec->acquire_us) ||
        set_time(obj, "renewTime", spec->renew_us) ||
        json_object_set_new(obj, "leaseTransitions", json_integer(spec->transitions)))
        return -1;
    return 0;
}

static int dump_cb(const char *buf, size_t size, void *data)
{
    return kl__buf_append(data, buf, size) < 0 ? -1 : 0;
}

char *kl__json_dump(const json_t *root)
{
    kl__buf b = {0};

    if (json_dump_callback(root, dump_cb, &b, JSON_COMPACT | JSON_PRESERVE_ORDER) < 0) {
        kl__buf_free(&b);
        return NULL;
    }
    return b.data;
}

/* jansson refuses strings that are not UTF-8 the same way it reports
 * allocation failure (NULL), so the message names both. */
static void encode_error(const char *ns, const char *name)
{
    kl__error_set(K8SLEASE_ENOMEM,
                  "Lease %s/%s: cannot encode body (out of memory, or a string is not UTF-8)",
                  ns ? ns : "", name ? name : "");
}

char *kl__lease_encode_create(const char *ns, const char *name, const kl__lease_spec *spec)
{
    json_t *root;
    char *body = NULL;

    root = json_pack("{s:s, s:s, s:{s:s, s:s}, s:{}}", "apiVersion", "coordination.k8s.io/v1",
                     "kind", "Lease", "metadata", "name", name, "namespace", ns, "spec");
    if (!root)
        goto out;
    if (set_spec(json_object_get(root, "spec"), spec) < 0)
        goto out;
    body = kl__json_dump(root);
out:
    if (!body)
        encode_error(ns, name);
    json_decref(root);
    return body;
}

/* spec written into root's "spec" object, and root dumped. */
static char *encode_update(json_t *root, const kl__lease *base, const kl__lease_spec *spec)
{
    json_t *obj = json_object_get(root, "spec");
    char *body = NULL;

    if (!json_is_object(obj)) {
        obj = json_object();
        /* set_new steals obj even when it fails. */
        if (json_object_set_new(root, "spec", obj) < 0)
            goto out;
    }
    if (set_spec(obj, spec) < 0)
        goto out;
    body = kl__json_dump(root);
out:
    if (!body)
        encode_error(base->ns, base->name);
    return body;
}

char *kl__lease_encode_update(const kl__lease *base, const kl__lease_spec *spec)
{
    /* From the text, a new tree is the copy. */
    json_t *root = base->root   ? json_deep_copy(base->root)
                   : base->text ? json_loadb(base->text, base->text_len, JSON_DECODE_ANY, NULL)
                                : NULL;
    char *body;

    if (!root) {
        encode_error(base->ns, base->name);
        return NULL;
    }
    body = encode_update(root, base, spec);
    json_decref(root);
    return body;
}

char *kl__lease_encode_update_in_place(kl__lease *base, const kl__lease_spec *spec)
{
    json_t *root = kl__lease_root(base);

    if (!root) {
        encode_error(base->ns, base->name);
        return NULL;
    }
    return encode_update(root, base, spec);
}

/* ------------------------------------------------------------------------ */
/* Updates without a parse                                                  */
/* ------------------------------------------------------------------------ */

/*
 * A renewal PUTs the object it saw last with new spec fields. Parsing that
 * text into a tree (about 6 KB of allocations for a Lease with
 * managedFields) only to dump it again was the largest cost of a renewal,
 * so the text is spliced instead: the top-level "spec" value is written as
 * set_spec would leave it and every other byte is copied. The splice
 * declines whatever it is not sure of (a key with an escape, a duplicate
 * key, deep nesting, more members than it keeps, a holder that is not
 * ASCII, text that is not JSON) and the caller takes the jansson path,
 * which gives the same JSON value (test_lease and the fuzz target
 * lease_splice compare the two).
 */
#define SPLICE_DEPTH   64
#define SPLICE_MEMBERS 32

typedef struct sp_member {
    const char *key; /* inside the quotes; no escapes */
    size_t key_len;
    const char *start; /* the key's opening quote */
    const char *value, *end;
} sp_member;

typedef struct sp_object {
    sp_member m[SPLICE_MEMBERS];
    size_t n;
    const char *close; /* the closing brace */
} sp_object;

static const char *sp_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* Past the string opening at p; NULL if there is none. *esc set if it has
 * an escape. */
static const char *sp_string(const char *p, const char *end, int *esc)
{
    if (p >= end || *p != '"')
        return NULL;
    for (p++; p < end; p++) {
        if (*p == '\\') {
            *esc = 1;
            if (++p == end)
                return NULL;
        } else if (*p == '"') {
            return p + 1;
        }
    }
    return NULL;
}

static const char *sp_value(const char *p, const char *end, int depth);

/* The members of the object opening at p (at '{'); 0, or -1 to decline. */
static int sp_members(const char *p, const char *end, int depth, sp_object *o)
{
    o->n = 0;
    if (depth > SPLICE_DEPTH || p >= end || *p != '{')
        return -1;
    p = sp_ws(p + 1, end);
    if (p < end && *p == '}') {
        o->close = p;
        return 0;
    }
    for (;;) {
        sp_member *m = &o->m[o->n];
        const char *k = p;
        int esc = 0;

        if (o->n == SPLICE_MEMBERS || !(p = sp_string(p, end, &esc)) || esc)
            return -1;
        m->start = k;
        m->key = k + 1;
        m->key_len = (size_t)(p - k - 2);
        for (size_t i = 0; i < o->n; i++)
            if (o->m[i].key_len == m->key_len && !memcmp(o->m[i].key, m->key, m->key_len))
                return -1; /* jansson would keep one of them */
        p = sp_ws(p, end);
        if (p == end || *p != ':')
            return -1;
        m->value = sp_ws(p + 1, end);
        if (!(m->end = sp_value(m->value, end, depth + 1)))
            return -1;
        o->n++;
        p = sp_ws(m->end, end);
        if (p < end && *p == '}') {
            o->close = p;
            return 0;
        }
        if (p == end || *p != ',')
            return -1;
        p = sp_ws(p + 1, end);
    }
}

/* Past the value at p; NULL if it is not one. */
static const char *sp_value(const char *p, const char *end, int depth)
{
    const char *s = p;
    int esc = 0;

    if (p >= end || depth > SPLICE_DEPTH)
        return NULL;
    if (*p == '"')
        return sp_string(p, end, &esc);
    if (*p == '{' || *p == '[') {
        /* Copied as it is: duplicate keys in here mean the same to the
         * server (the last one wins) whether copied or parsed. */
        char close = *p == '{' ? '}' : ']';

        p = sp_ws(p + 1, end);
        if (p < end && *p == close)
            return p + 1;
        for (;;) {
            if (close == '}') {
                if (!(p = sp_string(p, end, &esc)))
                    return NULL;
                p = sp_ws(p, end);
                if (p == end || *p != ':')
                    return NULL;
                p = sp_ws(p + 1, end);
            }
            if (!(p = sp_value(p, end, depth + 1)))
                return NULL;
            p = sp_ws(p, end);
            if (p < end && *p == close)
                return p + 1;
            if (p == end || *p != ',')
                return NULL;
            p = sp_ws(p + 1, end);
        }
    }
    /* A number, true, false or null. */
    while (p < end && ((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') || *p == '-' ||
                       *p == '+' || *p == '.' || *p == 'E'))
        p++;
    return p > s ? p : NULL;
}

static int sp_key_is(const sp_member *m, const char *key)
{
    return m->key_len == strlen(key) && !memcmp(m->key, key, m->key_len);
}

/* The spec fields set_spec writes, in its order. */
static const char *const sp_fields[] = {"holderIdentity", "leaseDurationSeconds", "acquireTime",
                                        "renewTime", "leaseTransitions"};
#define SP_NFIELDS (sizeof(sp_fields) / sizeof(sp_fields[0]))

/* Field i of spec as `"key":value`, after a comma unless *first; nothing
 * for a field set_spec deletes. 0 or K8SLEASE_ENOMEM. */
static int sp_field(kl__buf *b, size_t i, const kl__lease_spec *spec, int *first)
{
    char t[KL_MICROTIME_BUFLEN];
    int64_t us = i == 2 ? spec->acquire_us : spec->renew_us;
    int err = 0;

    if ((i == 1 && spec->duration_s == 0) || ((i == 2 || i == 3) && us == 0))
        return 0;
    if ((err = kl__buf_printf(b, "%s\"%s\":", *first ? "" : ",", sp_fields[i])) < 0)
        return err;
    *first = 0;
    switch (i) {
    case 0: /* checked by the caller: ASCII */
        err = kl__buf_append(b, "\"", 1);
        for (const char *h = spec->holder ? spec->holder : ""; !err && *h; h++) {
            if (*h == '"' || *h == '\\')
                err = kl__buf_printf(b, "\\%c", *h);
            else if ((unsigned char)*h < 0x20)
                err = kl__buf_printf(b, "\\u%04x", (unsigned)*h);
            else
                err = kl__buf_append(b, h, 1);
        }
        return err ? err : kl__buf_append(b, "\"", 1);
    case 1:
        return kl__buf_printf(b, "%lld", (long long)spec->duration_s);
    case 2:
    case 3:
        return kl__buf_printf(b, "\"%s\"", kl__microtime_format(us, t));
    default:
        return kl__buf_printf(b, "%lld", (long long)spec->transitions);
    }
}

/* A whole spec object: what set_spec writes into an empty one, or into the
 * members of old (unknown ones copied, ours in place, missing ones after). */
static int sp_spec(kl__buf *b, const sp_object *old, const kl__lease_spec *spec)
{
    int first = 1, seen[SP_NFIELDS] = {0}, err;

    if ((err = kl__buf_append(b, "{", 1)) < 0)
        return err;
    for (size_t k = 0; old && k < old->n; k++) {
        const sp_member *m = &old->m[k];
        size_t i = 0;

        while (i < SP_NFIELDS && !sp_key_is(m, sp_fields[i]))
            i++;
        if (i < SP_NFIELDS) {
            seen[i] = 1;
            err = sp_field(b, i, spec, &first);
        } else {
            if (!first && (err = kl__buf_append(b, ",", 1)) < 0)
                return err;
            first = 0;
            err = kl__buf_append(b, m->start, (size_t)(m->end - m->start));
        }
        if (err < 0)
            return err;
    }
    for (size_t i = 0; i < SP_NFIELDS; i++)
        if (!seen[i] && (err = sp_field(b, i, spec, &first)) < 0)
            return err;
    return kl__buf_append(b, "}", 1);
}

int kl__lease_splice_update(const char *base, size_t len, const kl__lease_spec *spec, char **out)
{
    const char *end = base + len, *p = sp_ws(base, end);
    sp_object root_members, old_members, *root = &root_members, *old = &old_members;
    const sp_member *s = NULL;
    kl__buf b = {0};
    int err;

    *out = NULL;
    for (const char *h = spec->holder ? spec->holder : ""; *h; h++)
        if ((unsigned char)*h >= 0x80)
            return 1; /* jansson checks the UTF-8 */
    if (sp_members(p, end, 0, root) < 0 || sp_ws(root->close + 1, end) != end)
        return 1;
    for (size_t k = 0; k < root->n && !s; k++)
        if (sp_key_is(&root->m[k], "spec"))
            s = &root->m[k];
    if (s && *s->value == '{' && sp_members(s->value, end, 1, old) < 0)
        return 1;
    if (s) {
        /* In place, as jansson replaces an existing key's value. */
        err = kl__buf_append(&b, base, (size_t)(s->value - base));
        if (!err)
            err = sp_spec(&b, *s->value == '{' ? old : NULL, spec);
        if (!err)
            err = kl__buf_append(&b, s->end, (size_t)(end - s->end));
    } else {
        /* Appended, as jansson adds a new key. */
        err = kl__buf_append(&b, base, (size_t)(root->close - base));
        if (!err)
            err = kl__buf_append(&b, root->n ? ",\"spec\":" : "\"spec\":", root->n ? 8 : 7);
        if (!err)
            err = sp_spec(&b, NULL, spec);
        if (!err)
            err = kl__buf_append(&b, root->close, (size_t)(end - root->close));
    }
    if (err < 0) {
        kl__buf_free(&b);
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    }
    *out = b.data;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Status                                                                   */
/* ------------------------------------------------------------------------ */

int kl__status_from_json(kl__status *out, json_t *obj)
{
    const char *reason, *message;
    json_t *code;
    int err = 0;

    memset(out, 0, sizeof(*out));
    if (!json_is_object(obj))
        return kl__error_set(K8SLEASE_EPROTOCOL, "Status: not a JSON object");
    if ((err = check_kind(obj, "Status")) < 0)
        goto out;
    /* Without a kind, insist on a Status-only field so that, say, a Lease
     * without kind is not taken for a Status with code 0. */
    if (!json_object_get(obj, "kind") && !json_object_get(obj, "status") &&
        !json_object_get(obj, "code")) {
        err = kl__error_set(K8SLEASE_EPROTOCOL, "not a Status: no kind, status or code");
        goto out;
    }
    code = json_object_get(obj, "code");
    if (code && !json_is_null(code)) {
        if (!json_is_integer(code) || json_integer_value(code) < INT32_MIN ||
            json_integer_value(code) > INT32_MAX) {
            err = kl__error_set(K8SLEASE_EPROTOCOL, "code: must be an integer");
            goto out;
        }
        out->code = (int)json_integer_value(code);
    }
    if ((err = opt_string(obj, "reason", "reason", &reason)) < 0 ||
        (err = opt_string(obj, "message", "message", &message)) < 0)
        goto out;
    out->reason = kl__strdup(reason ? reason : "");
    out->message = kl__strdup(message ? message : "");
    if (!out->reason || !out->message)
        err = kl__error_set(K8SLEASE_ENOMEM, "Status: out of memory");
out:
    if (err == K8SLEASE_EPROTOCOL)
        kl__error_wrap(err, "Status");
    if (err < 0)
        kl__status_clear(out);
    return err;
}

int kl__status_parse(kl__status *out, const char *body, size_t len)
{
    json_error_t jerr;
    json_t *root;
    int err;

    memset(out, 0, sizeof(*out));
    memset(&jerr, 0, sizeof(jerr));
    root = json_loadb(body, len, JSON_DECODE_ANY, &jerr);
    if (!root)
        return json_fail(&jerr, "Status body");
    err = kl__status_from_json(out, root);
    json_decref(root);
    return err;
}

void kl__status_clear(kl__status *st)
{
    kl__free(st->reason);
    kl__free(st->message);
    memset(st, 0, sizeof(*st));
}

/* ------------------------------------------------------------------------ */
/* Watch events                                                             */
/* ------------------------------------------------------------------------ */

static const struct {
    const char *name;
    kl__watch_type type;
} watch_types[] = {
    {"ADDED", KL_WATCH_ADDED},       {"MODIFIED", KL_WATCH_MODIFIED}, {"DELETED", KL_WATCH_DELETED},
    {"BOOKMARK", KL_WATCH_BOOKMARK}, {"ERROR", KL_WATCH_ERROR},
};

int kl__watch_type_parse(const char *name, kl__watch_type *out)
{
    for (size_t i = 0; i < KL_ARRAY_LEN(watch_types); i++)
        if (strcmp(name, watch_types[i].name) == 0) {
            *out = watch_types[i].type;
            return 0;
        }
    return -1;
}

static int decode_event(kl__watch_event *out, json_t *root)
{
    const char *type, *rv;
    json_t *obj;
    int err;

    if ((err = opt_string(root, "type", "type", &type)) < 0)
        return err;
    if (!type)
        return kl__error_set(K8SLEASE_EPROTOCOL, "type missing");
    if (kl__watch_type_parse(type, &out->type) < 0)
        return kl__error_set(K8SLEASE_EPROTOCOL, "unknown type \"%.64s\"", type);
    obj = json_object_get(root, "object");
    if (!json_is_object(obj))
        return kl__error_set(K8SLEASE_EPROTOCOL, "%s: object missing or not an object", type);

    switch (out->type) {
    case KL_WATCH_BOOKMARK:
        /* A bookmark carries only metadata.resourceVersion, no name. */
        if ((err = opt_string(json_object_get(obj, "metadata"), "resourceVersion",
                              "object.metadata.resourceVersion", &rv)) < 0)
            break;
        if (!rv) {
            err = kl__error_set(K8SLEASE_EPROTOCOL, "object.metadata.resourceVersion missing");
            break;
        }
        if (!(out->bookmark_rv = kl__strdup(rv)))
            err = kl__error_set(K8SLEASE_ENOMEM, "out of memory");
        break;
    case KL_WATCH_ERROR:
        err = kl__status_from_json(&out->status, obj);
        break;
    default:
        err = kl__lease_from_json(&out->lease, obj);
        break;
    }
    if (err < 0)
        kl__error_wrap(err, "%s", type);
    return err;
}

int kl__watch_event_parse_json(kl__watch_event *out, const char *line, size_t len)
{
    json_error_t jerr;
    json_t *root;
    int err = 0;

    memset(out, 0, sizeof(*out));
    memset(&jerr, 0, sizeof(jerr));
    root = json_loadb(line, len, JSON_DECODE_ANY, &jerr);
    if (!root)
        return json_fail(&jerr, "watch event");
    if (!json_is_object(root)) {
        err = kl__error_set(K8SLEASE_EPROTOCOL, "not a JSON object");
        goto out;
    }
    err = decode_event(out, root);
out:
    if (err < 0) {
        kl__error_wrap(err, "watch event");
        kl__watch_event_clear(out);
    }
    json_decref(root);
    return err;
}

/* ERROR events (a Status) are rare enough to leave to jansson. */
int kl__watch_event_scan(kl__watch_event *out, const char *line, size_t len)
{
    const kl__scan_val *type, *obj, *rv;
    char name[16];
    kl__scan sc;
    int err;

    memset(out, 0, sizeof(*out));
    if (kl__scan_watch_event(&sc, line, len) < 0)
        return 1;
    type = &sc.v[KL_SCAN_TYPE];
    obj = &sc.v[KL_SCAN_OBJ];
    rv = &sc.v[KL_SCAN_RV];
    if (type->type != KL_SCAN_STRING || type->len >= sizeof(name) || obj->type != KL_SCAN_OBJECT)
        return 1;
    kl__scan_string(type, name);
    if (kl__watch_type_parse(name, &out->type) < 0 || out->type == KL_WATCH_ERROR)
        return 1;
    if (out->type != KL_WATCH_BOOKMARK) {
        if ((err = lease_from_scan(&out->lease, &sc, obj->p, obj->len)) < 0)
            kl__error_wrap(err, "watch event: %s", name);
        return err;
    }
    /* A bookmark carries only metadata.resourceVersion, no name. */
    if (sc.v[KL_SCAN_METADATA].type != KL_SCAN_OBJECT || rv->type != KL_SCAN_STRING)
        return 1;
    if (!(out->bookmark_rv = kl__malloc(rv->len + 1)))
        return kl__error_set(K8SLEASE_ENOMEM, "watch event: BOOKMARK: out of memory");
    kl__scan_string(rv, out->bookmark_rv);
    return 0;
}

int kl__watch_event_parse(kl__watch_event *out, const char *line, size_t len)
{
    int err = kl__watch_event_scan(out, line, len);

    return err == 1 ? kl__watch_event_parse_json(out, line, len) : err;
}

void kl__watch_event_clear(kl__watch_event *ev)
{
    kl__lease_free(ev->lease);
    kl__free(ev->bookmark_rv);
    kl__status_clear(&ev->status);
    memset(ev, 0, sizeof(*ev));
}
