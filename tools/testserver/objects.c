/*
 * objects.c - resource types, canonical objects, validation, Status bodies
 * and Tables.
 *
 * The field orders below are those of the Go structs (ObjectMeta, LeaseSpec,
 * Status), which is what encoding/json writes and what the samples in
 * tests/data/k8s-api-samples show.
 */
#include "objects.h"
#include "util.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- resource types --------------------------------------------------- */

const ts_resdef ts_resdefs[TS_NRES] = {
    [TS_LEASE] = {"leases", "lease", "coordination.k8s.io", "Lease", "LeaseList",
                  "coordination.k8s.io/v1", "leases.coordination.k8s.io"},
    [TS_POD] = {"pods", "pod", "", "Pod", "PodList", "v1", "pods"},
    [TS_NS] = {"namespaces", "namespace", "", "Namespace", "NamespaceList", "v1", "namespaces"},
    [TS_LC] = {"leasecandidates", "leasecandidate", "coordination.k8s.io", "LeaseCandidate",
               "LeaseCandidateList", "coordination.k8s.io/v1beta1",
               "leasecandidates.coordination.k8s.io"},
};

const char *ts_meta_str(const json_t *obj, const char *field)
{
    return json_string_value(json_object_get(json_object_get(obj, "metadata"), field));
}

/* ---- Status ----------------------------------------------------------- */

json_t *ts_status_failure(unsigned code, const char *reason, const char *message, json_t *details)
{
    json_t *s = json_object();
    if (!s) {
        json_decref(details);
        return NULL;
    }
    json_object_set_new(s, "kind", json_string("Status"));
    json_object_set_new(s, "apiVersion", json_string("v1"));
    json_object_set_new(s, "metadata", json_object());
    json_object_set_new(s, "status", json_string("Failure"));
    if (message && *message)
        json_object_set_new(s, "message", json_string(message));
    if (reason && *reason)
        json_object_set_new(s, "reason", json_string(reason));
    if (details)
        json_object_set_new(s, "details", details);
    json_object_set_new(s, "code", json_integer(code));
    return s;
}

json_t *ts_status_details(const char *name, const char *group, const char *kind, const char *uid)
{
    json_t *d = json_object();
    if (!d)
        return NULL;
    if (name && *name)
        json_object_set_new(d, "name", json_string(name));
    if (group && *group)
        json_object_set_new(d, "group", json_string(group));
    if (kind && *kind)
        json_object_set_new(d, "kind", json_string(kind));
    if (uid && *uid)
        json_object_set_new(d, "uid", json_string(uid));
    return d;
}

static json_t *res_details(ts_res res, const char *name)
{
    const ts_resdef *rd = &ts_resdefs[res];
    return ts_status_details(name, rd->group, rd->plural, NULL);
}

json_t *ts_status_not_found(ts_res res, const char *name)
{
    ts_buf m = {0};
    ts_buf_printf(&m, "%s \"%s\" not found", ts_resdefs[res].qualified, name);
    json_t *s = ts_status_failure(404, "NotFound", m.data, res_details(res, name));
    ts_buf_free(&m);
    return s;
}

json_t *ts_status_already_exists(ts_res res, const char *name)
{
    ts_buf m = {0};
    ts_buf_printf(&m, "%s \"%s\" already exists", ts_resdefs[res].qualified, name);
    json_t *s = ts_status_failure(409, "AlreadyExists", m.data, res_details(res, name));
    ts_buf_free(&m);
    return s;
}

json_t *ts_status_conflict(ts_res res, const char *name, const char *why)
{
    ts_buf m = {0};
    ts_buf_printf(&m, "Operation cannot be fulfilled on %s \"%s\": %s", ts_resdefs[res].qualified,
                  name, why);
    json_t *s = ts_status_failure(409, "Conflict", m.data, res_details(res, name));
    ts_buf_free(&m);
    return s;
}

json_t *ts_status_conflict_kind(ts_res res, const char *name, const char *why)
{
    const ts_resdef *rd = &ts_resdefs[res];
    ts_buf m = {0};
    ts_buf_printf(&m, "Operation cannot be fulfilled on %s%s%s \"%s\": %s", rd->kind,
                  *rd->group ? "." : "", rd->group, name, why);
    json_t *s = ts_status_failure(409, "Conflict", m.data,
                                  ts_status_details(name, rd->group, rd->kind, NULL));
    ts_buf_free(&m);
    return s;
}

json_t *ts_status_bad_request(const char *message)
{
    return ts_status_failure(400, "BadRequest", message, NULL);
}

json_t *ts_status_deleted(ts_res res, const char *name, const char *uid)
{
    const ts_resdef *rd = &ts_resdefs[res];
    json_t *s = json_object();
    if (!s)
        return NULL;
    json_object_set_new(s, "kind", json_string("Status"));
    json_object_set_new(s, "apiVersion", json_string("v1"));
    json_object_set_new(s, "metadata", json_object());
    json_object_set_new(s, "status", json_string("Success"));
    json_object_set_new(s, "details", ts_status_details(name, rd->group, rd->plural, uid));
    return s;
}

json_t *ts_status_for_code(unsigned code, unsigned retry_after)
{
    switch (code) {
    case 429: {
        json_t *d = json_object();
        json_object_set_new(d, "retryAfterSeconds", json_integer(retry_after));
        return ts_status_failure(429, "TooManyRequests",
                                 "Too many requests, please try again later.", d);
    }
    case 503:
        return ts_status_failure(503, "ServiceUnavailable",
                                 "the server is currently unable to handle the request",
                                 json_object());
    case 504:
        return ts_status_failure(
            504, "Timeout",
            "the server was unable to return a response in the time allotted, but may still "
            "be processing the request",
            json_object());
    case 500: {
        json_t *d = json_object(), *causes = json_array(), *cause = json_object();
        json_object_set_new(cause, "message", json_string("injected fault"));
        json_array_append_new(causes, cause);
        json_object_set_new(d, "causes", causes);
        return ts_status_failure(500, "InternalError", "Internal error occurred: injected fault",
                                 d);
    }
    default: {
        /* Other codes: the StatusReason the apiserver uses for them, if any. */
        static const struct {
            unsigned code;
            const char *reason;
        } reasons[] = {
            {400, "BadRequest"}, {401, "Unauthorized"},          {403, "Forbidden"},
            {404, "NotFound"},   {405, "MethodNotAllowed"},      {409, "Conflict"},
            {410, "Expired"},    {413, "RequestEntityTooLarge"}, {415, "UnsupportedMediaType"},
            {422, "Invalid"}};
        const char *reason = "";
        for (size_t i = 0; i < sizeof(reasons) / sizeof(reasons[0]); i++)
            if (reasons[i].code == code)
                reason = reasons[i].reason;
        return ts_status_failure(code, reason, "injected fault", NULL);
    }
    }
}

/* ---- field errors (422) ----------------------------------------------- */

typedef struct field_errs {
    json_t *causes;
    ts_buf msg; /* "a: x" or "[a: x, b: y]" without the brackets yet */
    size_t n;
} field_errs;

/*
 * Every error is a cause; the message names each distinct one once (the
 * apiserver's ErrorList.ToAggregate drops repeats: its validators check
 * metadata more than once on an update).
 */
static void add_err(field_errs *fe, const char *reason, const char *field, const char *body)
{
    size_t i;
    json_t *e;
    bool repeat = false;
    json_array_foreach(fe->causes, i, e)
    {
        repeat |= !strcmp(json_string_value(json_object_get(e, "field")), field) &&
                  !strcmp(json_string_value(json_object_get(e, "message")), body);
    }
    json_t *c = json_object();
    json_object_set_new(c, "reason", json_string(reason));
    json_object_set_new(c, "message", json_string(body));
    json_object_set_new(c, "field", json_string(field));
    json_array_append_new(fe->causes, c);
    if (repeat)
        return;
    ts_buf_printf(&fe->msg, "%s%s: %s", fe->n ? ", " : "", field, body);
    fe->n++;
}

static void add_invalid(field_errs *fe, const char *field, const json_t *value, const char *why)
{
    ts_buf body = {0};
    char *v = json_dumps(value, JSON_ENCODE_ANY | JSON_COMPACT);
    ts_buf_printf(&body, "Invalid value: %s: %s", v ? v : "null", why);
    add_err(fe, "FieldValueInvalid", field, body.data);
    free(v);
    ts_buf_free(&body);
}

/* 'Lease.coordination.k8s.io "x" is invalid: <errors>' with details.causes. */
static json_t *invalid_status(ts_res res, const char *name, field_errs *fe)
{
    const ts_resdef *rd = &ts_resdefs[res];
    ts_buf m = {0};
    ts_buf_printf(&m, "%s%s%s \"%s\" is invalid: %s%s%s", rd->kind, *rd->group ? "." : "",
                  rd->group, name ? name : "", fe->n > 1 ? "[" : "", fe->msg.data,
                  fe->n > 1 ? "]" : "");
    json_t *d = ts_status_details(name, rd->group, rd->kind, NULL);
    json_object_set(d, "causes", fe->causes);
    json_t *s = ts_status_failure(422, "Invalid", m.data, d);
    ts_buf_free(&m);
    return s;
}

json_t *ts_status_name_required(ts_res res)
{
    field_errs fe = {json_array(), {0}, 0};
    add_err(&fe, "FieldValueRequired", "metadata.name",
            "Required value: name or generateName is required");
    json_t *s = invalid_status(res, "", &fe);
    json_decref(fe.causes);
    ts_buf_free(&fe.msg);
    return s;
}

static bool dns1123_subdomain(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 253)
        return false;
    bool label_start = true;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
        if (c == '.') {
            if (label_start || s[i - 1] == '-')
                return false;
            label_start = true;
        } else if (c == '-') {
            if (label_start)
                return false;
        } else if (alnum) {
            label_start = false;
        } else {
            return false;
        }
    }
    return !label_start && s[n - 1] != '-';
}

static void check_name(field_errs *fe, ts_res res, const char *name)
{
    if (res == TS_NS) {
        /* Namespace names are DNS-1123 labels: no dots, at most 63 characters. */
        if (!dns1123_subdomain(name) || strchr(name, '.') || strlen(name) > 63) {
            json_t *v = json_string(name);
            add_invalid(fe, "metadata.name", v,
                        strlen(name) > 63
                            ? "must be no more than 63 characters"
                            : "a lowercase RFC 1123 label must consist of lower case alphanumeric "
                              "characters or '-', and must start and end with an alphanumeric "
                              "character (e.g. 'my-name',  or '123-abc', regex used for "
                              "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')");
            json_decref(v);
        }
        return;
    }
    if (!dns1123_subdomain(name)) {
        json_t *v = json_string(name);
        add_invalid(fe, "metadata.name", v,
                    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                    "characters, '-' or '.', and must start and end with an alphanumeric "
                    "character (e.g. 'example.com', regex used for validation is "
                    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')");
        json_decref(v);
    }
}

json_t *ts_check_name(ts_res res, const char *name)
{
    field_errs fe = {json_array(), {0}, 0};
    check_name(&fe, res, name);
    json_t *s = fe.n ? invalid_status(res, name, &fe) : NULL;
    json_decref(fe.causes);
    ts_buf_free(&fe.msg);
    return s;
}

/* The qualified-name part of a label key, or a label value ("" allowed). */
static bool label_token(const char *s, size_t n, bool allow_empty)
{
    if (n == 0)
        return allow_empty;
    if (n > 63 || !isalnum((unsigned char)s[0]) || !isalnum((unsigned char)s[n - 1]))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.')
            return false;
    return true;
}

static void check_labels(field_errs *fe, const json_t *labels)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)labels, k, v)
    {
        const char *slash = strrchr(k, '/');
        const char *namepart = slash ? slash + 1 : k;
        bool ok = label_token(namepart, strlen(namepart), false);
        if (ok && slash) {
            char *prefix = strndup(k, (size_t)(slash - k));
            ok = prefix && dns1123_subdomain(prefix);
            free(prefix);
        }
        if (!ok) {
            json_t *jk = json_string(k);
            add_invalid(fe, "metadata.labels", jk,
                        "name part must consist of alphanumeric characters, '-', '_' or '.', "
                        "and must start and end with an alphanumeric character (e.g. 'MyName', "
                        " or 'my.name',  or '123-abc', regex used for validation is "
                        "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')");
            json_decref(jk);
        }
        const char *s = json_string_value(v);
        if (!label_token(s, strlen(s), true))
            add_invalid(fe, "metadata.labels", v,
                        "a valid label must be an empty string or consist of alphanumeric "
                        "characters, '-', '_' or '.', and must start and end with an "
                        "alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', "
                        "regex used for validation is "
                        "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')");
    }
}

/* ---- decoding ----------------------------------------------------------- */

/*
 * A body that does not decode into the Go struct is a 400 whose message is
 * the decoder's: we imitate encoding/json's wording.
 */
typedef struct decode_ctx {
    ts_res res;
    char *err; /* the decoder's first error ("json: cannot unmarshal ..."), unprefixed */
} decode_ctx;

/* The version part of the resource's apiVersion ("v1", "v1beta1"): decode errors name it. */
static const char *res_version(ts_res res)
{
    const char *av = ts_resdefs[res].api_version;
    const char *slash = strchr(av, '/');
    return slash ? slash + 1 : av;
}

/*
 * encoding/json's UnmarshalTypeError: the JSON kind of v ("number 1.5" for a
 * number that does not fit), the struct and JSON path of the field, its Go type.
 */
static void type_err(decode_ctx *dc, const json_t *v, const char *goname, const char *gotype)
{
    static const char *const names[] = {"object", "array", "string", "number",
                                        "number", "bool",  "bool",   "null"};
    if (dc->err)
        return;
    ts_buf b = {0};
    ts_buf_printf(&b, "json: cannot unmarshal %s", names[json_typeof(v)]);
    bool numeric = !strcmp(gotype, "int32") || !strcmp(gotype, "int64");
    if (json_is_number(v) && numeric) {
        char *lit = json_dumps(v, JSON_ENCODE_ANY);
        ts_buf_printf(&b, " %s", lit ? lit : "");
        free(lit);
    }
    ts_buf_printf(&b, " into Go struct field %s of type %s", goname, gotype);
    dc->err = b.data;
}

/* Copies in[key] to out if it is a string (null or absent: omitted). */
static void copy_str(decode_ctx *dc, json_t *out, const json_t *in, const char *key,
                     const char *goname)
{
    json_t *v = json_object_get(in, key);
    if (!v || json_is_null(v))
        return;
    if (!json_is_string(v)) {
        type_err(dc, v, goname, "string");
        return;
    }
    json_object_set(out, key, v);
}

static void copy_int32(decode_ctx *dc, json_t *out, const json_t *in, const char *key,
                       const char *goname)
{
    json_t *v = json_object_get(in, key);
    if (!v || json_is_null(v))
        return;
    if (!json_is_integer(v) || json_integer_value(v) < INT32_MIN ||
        json_integer_value(v) > INT32_MAX) {
        type_err(dc, v, goname, "int32");
        return;
    }
    json_object_set(out, key, v);
}

/* A map[string]string, copied only when non-empty (omitempty). */
static void copy_str_map(decode_ctx *dc, json_t *out, const json_t *in, const char *key,
                         const char *goname)
{
    json_t *v = json_object_get(in, key);
    if (!v || json_is_null(v))
        return;
    if (!json_is_object(v)) {
        type_err(dc, v, goname, "map[string]string");
        return;
    }
    const char *k;
    json_t *e;
    json_object_foreach(v, k, e)
    {
        if (!json_is_string(e)) {
            type_err(dc, e, goname, "string");
            return;
        }
    }
    if (json_object_size(v))
        json_object_set_new(out, key, json_deep_copy(v));
}

static json_t *build_metadata(decode_ctx *dc, const json_t *in, const ts_sysmeta *sys)
{
    json_t *inm = json_object_get(in, "metadata");
    json_t *m = json_object();
    if (inm && !json_is_object(inm) && !json_is_null(inm))
        type_err(dc, inm, "metadata", "v1.ObjectMeta");
    json_object_set_new(m, "name", json_string(sys->name));
    if (json_is_object(inm))
        copy_str(dc, m, inm, "generateName", "ObjectMeta.metadata.generateName");
    if (dc->res != TS_NS)
        json_object_set_new(m, "namespace", json_string(sys->ns));
    json_object_set_new(m, "uid", json_string(sys->uid));
    json_object_set_new(m, "resourceVersion", json_string(""));
    json_object_set_new(m, "creationTimestamp", json_string(sys->created));
    if (sys->deleted)
        json_object_set_new(m, "deletionTimestamp", json_string(sys->deleted));
    if (json_is_object(inm)) {
        copy_str_map(dc, m, inm, "labels", "ObjectMeta.metadata.labels");
        copy_str_map(dc, m, inm, "annotations", "ObjectMeta.metadata.annotations");
    }
    if (dc->res == TS_NS) {
        /* The namespace strategy labels every namespace with its name. */
        json_t *labels = json_object_get(m, "labels");
        if (!labels)
            json_object_set_new(m, "labels", labels = json_object());
        json_object_set_new(labels, "kubernetes.io/metadata.name", json_string(sys->name));
    }
    return m;
}

/* Go's strconv.Quote for the printable ASCII we expect; other bytes as \xNN. */
static void go_quote(ts_buf *b, const char *s)
{
    ts_buf_puts(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            ts_buf_printf(b, "\\%c", *p);
        else if (*p < 0x20 || *p >= 0x7f)
            ts_buf_printf(b, "\\x%02x", *p);
        else
            ts_buf_append(b, p, 1);
    }
    ts_buf_puts(b, "\"");
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/*
 * The error of Go's time.Parse(layout, v) for a value that does not parse,
 * which the apiserver returns (400) for a time that does not decode: the
 * layout element where parsing stopped, or the field out of range. micro:
 * metav1.MicroTime's layout "2006-01-02T15:04:05.000000Z07:00" (exactly six
 * fractional digits); otherwise metav1.Time's RFC 3339 (any fraction, or none).
 */
static void go_time_error(ts_buf *b, const char *v, bool micro)
{
    const char *layout = micro ? "2006-01-02T15:04:05.000000Z07:00" : "2006-01-02T15:04:05Z07:00";
    static const struct {
        const char *lit, *std, *range;
        int lo, hi, width; /* digits: width 4 = year, 2 = fixed, 1 = one or two */
    } el[] = {{"", "2006", NULL, 0, 9999, 4},  {"-", "01", "month", 1, 12, 2},
              {"-", "02", "day", 1, 31, 2},    {"T", "15", "hour", 0, 23, 1},
              {":", "04", "minute", 0, 59, 2}, {":", "05", "second", 0, 59, 2},
              {"", ".000000", NULL, 0, 0, 0},  {"", "Z07:00", NULL, 0, 0, 0}};
    const char *p = v, *bad_elem = NULL, *bad_at = NULL, *range = NULL;
    for (size_t i = 0; i < sizeof(el) / sizeof(el[0]) && !bad_elem && !range; i++) {
        size_t ll = strlen(el[i].lit);
        if (strncmp(p, el[i].lit, ll)) {
            bad_elem = el[i].lit, bad_at = p;
            break;
        }
        p += ll;
        if (el[i].width) {
            size_t n = 0;
            size_t want = el[i].width == 1 ? 2 : (size_t)el[i].width;
            while (n < want && is_digit(p[n]))
                n++;
            if ((el[i].width == 1 && n == 0) || (el[i].width != 1 && n != want)) {
                bad_elem = el[i].std, bad_at = p;
                break;
            }
            int val = atoi((char[8]){p[0], n > 1 ? p[1] : 0, n > 2 ? p[2] : 0, n > 3 ? p[3] : 0});
            if (el[i].range && (val < el[i].lo || val > el[i].hi))
                range = el[i].range;
            p += n;
        } else if (!strcmp(el[i].std, ".000000")) {
            if (!micro) {
                /* Go takes a fraction after the seconds even when the layout has none. */
                if ((p[0] == '.' || p[0] == ',') && is_digit(p[1]))
                    p += 1 + strspn(p + 1, "0123456789");
                continue;
            }
            if ((p[0] != '.' && p[0] != ',') || strspn(p + 1, "0123456789") < 6) {
                bad_elem = el[i].std, bad_at = p;
                break;
            }
            p += 7;
        } else if (p[0] == 'Z') {
            p++;
        } else if ((p[0] == '+' || p[0] == '-') && is_digit(p[1]) && is_digit(p[2]) &&
                   p[3] == ':' && is_digit(p[4]) && is_digit(p[5])) {
            p += 6;
        } else {
            bad_elem = el[i].std, bad_at = p;
        }
    }
    ts_buf_puts(b, "parsing time ");
    go_quote(b, v);
    if (range) {
        ts_buf_printf(b, ": %s out of range", range);
    } else if (bad_elem) {
        ts_buf_puts(b, " as ");
        go_quote(b, layout);
        ts_buf_puts(b, ": cannot parse ");
        go_quote(b, bad_at);
        ts_buf_puts(b, " as ");
        go_quote(b, bad_elem);
    } else if (*p) {
        ts_buf_puts(b, ": extra text: ");
        go_quote(b, p);
    } else {
        ts_buf_puts(b, ": day out of range");
    }
}

/* MicroTime fields: a value Go cannot parse fails decoding, a 400. */
static void copy_microtime(decode_ctx *dc, json_t *out, const json_t *in, const char *key,
                           const char *field)
{
    json_t *v = json_object_get(in, key);
    char norm[32];
    if (!v || json_is_null(v))
        return;
    if (!json_is_string(v)) {
        type_err(dc, v, field, "v1.MicroTime");
        return;
    }
    if (ts_normalize_microtime(json_string_value(v), norm) < 0) {
        if (!dc->err) {
            ts_buf b = {0};
            go_time_error(&b, json_string_value(v), true);
            dc->err = b.data;
        }
        return;
    }
    json_object_set_new(out, key, json_string(norm));
}

static json_t *build_lease_spec(decode_ctx *dc, field_errs *fe, const json_t *in)
{
    json_t *ins = json_object_get(in, "spec");
    json_t *spec = json_object();
    if (!ins || json_is_null(ins))
        return spec;
    if (!json_is_object(ins)) {
        type_err(dc, ins, "Lease.spec", "v1.LeaseSpec");
        return spec;
    }
    copy_str(dc, spec, ins, "holderIdentity", "LeaseSpec.spec.holderIdentity");
    copy_int32(dc, spec, ins, "leaseDurationSeconds", "LeaseSpec.spec.leaseDurationSeconds");
    copy_microtime(dc, spec, ins, "acquireTime", "LeaseSpec.spec.acquireTime");
    copy_microtime(dc, spec, ins, "renewTime", "LeaseSpec.spec.renewTime");
    copy_int32(dc, spec, ins, "leaseTransitions", "LeaseSpec.spec.leaseTransitions");
    copy_str(dc, spec, ins, "strategy", "LeaseSpec.spec.strategy");
    copy_str(dc, spec, ins, "preferredHolder", "LeaseSpec.spec.preferredHolder");

    /* pkg/apis/coordination/validation: ValidateLeaseSpec */
    json_t *d = json_object_get(spec, "leaseDurationSeconds");
    if (d && json_integer_value(d) <= 0)
        add_invalid(fe, "spec.leaseDurationSeconds", d, "must be greater than 0");
    json_t *t = json_object_get(spec, "leaseTransitions");
    if (t && json_integer_value(t) < 0)
        add_invalid(fe, "spec.leaseTransitions", t, "must be greater than or equal to 0");
    return spec;
}

/* ---- LeaseCandidates ---------------------------------------------------- */

/* A numeric semver part: digits, no leading zero unless it is "0". */
static bool semver_num(const char *s, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    if (n == 0 || (n > 1 && s[0] == '0'))
        return false;
    for (size_t i = 0; i < n; i++) {
        if (!is_digit(s[i]) || v > (UINT64_MAX - 9) / 10)
            return false;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    *out = v;
    return true;
}

/* Dot-separated identifiers of [0-9A-Za-z-]; numeric ones without leading zeros if strict. */
static bool semver_idents(const char *s, size_t n, bool numeric_strict)
{
    size_t start = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && s[i] != '.') {
            if (!isalnum((unsigned char)s[i]) && s[i] != '-')
                return false;
            continue;
        }
        size_t len = i - start;
        if (len == 0)
            return false;
        if (numeric_strict && strspn(s + start, "0123456789") >= len && len > 1 && s[start] == '0')
            return false;
        start = i + 1;
    }
    return true;
}

int ts_semver_parse(const char *s, ts_semver *v)
{
    /* github.com/blang/semver/v4 Parse: MAJOR.MINOR.PATCH[-pre][+build], no "v". */
    memset(v, 0, sizeof(*v));
    if (!s || !*s)
        goto fail;
    size_t n = strlen(s);
    size_t core = strcspn(s, "-+");
    const char *dot1 = memchr(s, '.', core);
    const char *dot2 = dot1 ? memchr(dot1 + 1, '.', core - (size_t)(dot1 + 1 - s)) : NULL;
    if (!dot1 || !dot2 || memchr(dot2 + 1, '.', core - (size_t)(dot2 + 1 - s)))
        goto fail;
    if (!semver_num(s, (size_t)(dot1 - s), &v->major) ||
        !semver_num(dot1 + 1, (size_t)(dot2 - dot1 - 1), &v->minor) ||
        !semver_num(dot2 + 1, core - (size_t)(dot2 + 1 - s), &v->patch))
        goto fail;
    const char *p = s + core;
    if (*p == '-') {
        size_t pl = strcspn(p + 1, "+");
        if (!semver_idents(p + 1, pl, true) || pl >= sizeof(v->pre))
            goto fail;
        memcpy(v->pre, p + 1, pl);
        v->pre[pl] = '\0';
        p += 1 + pl;
    }
    if (*p == '+' && !semver_idents(p + 1, n - (size_t)(p + 1 - s), false))
        goto fail;
    return 0;
fail:
    memset(v, 0, sizeof(*v));
    return -1;
}

/* One prerelease identifier against another: numeric < alphanumeric. */
static int pre_ident_cmp(const char *a, size_t al, const char *b, size_t bl)
{
    bool an = strspn(a, "0123456789") >= al, bn = strspn(b, "0123456789") >= bl;
    if (an && bn) {
        if (al != bl)
            return al < bl ? -1 : 1;
        int c = strncmp(a, b, al);
        return c < 0 ? -1 : c > 0;
    }
    if (an != bn)
        return an ? -1 : 1;
    int c = strncmp(a, b, al < bl ? al : bl);
    if (c)
        return c < 0 ? -1 : 1;
    return al == bl ? 0 : al < bl ? -1 : 1;
}

int ts_semver_cmp(const ts_semver *a, const ts_semver *b)
{
    if (a->major != b->major)
        return a->major < b->major ? -1 : 1;
    if (a->minor != b->minor)
        return a->minor < b->minor ? -1 : 1;
    if (a->patch != b->patch)
        return a->patch < b->patch ? -1 : 1;
    /* A version without prerelease is greater than one with. */
    if (!*a->pre || !*b->pre)
        return (!*a->pre) - (!*b->pre);
    const char *p = a->pre, *q = b->pre;
    for (;;) {
        size_t pl = strcspn(p, "."), ql = strcspn(q, ".");
        int c = pre_ident_cmp(p, pl, q, ql);
        if (c)
            return c;
        p += pl;
        q += ql;
        if (!*p || !*q)
            return (*p != 0) - (*q != 0);
        p++;
        q++;
    }
}

/* Kubernetes' IsQualifiedName, with the wording of v1.36 (lc_strategy.json samples). */
static void check_qualified_name(field_errs *fe, const char *field, const json_t *v)
{
    static const char name_re[] =
        "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
        "an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
        "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    const char *s = json_string_value(v);
    const char *slash = strchr(s, '/');
    const char *name = s;
    ts_buf m = {0};
    if (slash && strchr(slash + 1, '/')) {
        ts_buf_printf(&m,
                      "a valid label key %s with an optional DNS subdomain prefix and '/' (e.g. "
                      "'example.com/MyName')",
                      name_re);
        add_invalid(fe, field, v, m.data);
        ts_buf_free(&m);
        return;
    }
    if (slash) {
        size_t pl = (size_t)(slash - s);
        char *prefix = strndup(s, pl);
        name = slash + 1;
        if (pl == 0)
            add_invalid(fe, field, v, "prefix part must be non-empty");
        else if (pl > 253)
            add_invalid(fe, field, v, "prefix part must be no more than 253 characters");
        else if (prefix && !dns1123_subdomain(prefix))
            add_invalid(fe, field, v,
                        "prefix part a lowercase RFC 1123 subdomain must consist of lower case "
                        "alphanumeric characters, '-' or '.', and must start and end with an "
                        "alphanumeric character (e.g. 'example.com', regex used for validation "
                        "is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')");
        free(prefix);
    }
    size_t nl = strlen(name);
    if (nl == 0)
        add_invalid(fe, field, v, "name part must be non-empty");
    else if (nl > 63)
        add_invalid(fe, field, v, "name part must be no more than 63 characters");
    if (!label_token(name, nl, false)) {
        ts_buf_printf(&m, "name part %s", name_re);
        add_invalid(fe, field, v, m.data);
        ts_buf_free(&m);
    }
}

/* ValidateAnnotations: each key, lowercased, a qualified name. */
static void check_annotations(field_errs *fe, const json_t *annotations)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)annotations, k, v)
    {
        char *lower = strdup(k);
        field_errs probe = {json_array(), {0}, 0};
        for (char *p = lower; p && *p; p++)
            *p = (char)tolower((unsigned char)*p);
        json_t *lk = json_string(lower ? lower : k), *ok = json_string(k);
        check_qualified_name(&probe, "metadata.annotations", lk);
        if (probe.n) /* reported with the key as sent */
            check_qualified_name(fe, "metadata.annotations", ok);
        json_decref(lk);
        json_decref(ok);
        json_decref(probe.causes);
        ts_buf_free(&probe.msg);
        free(lower);
    }
}

static void add_required(field_errs *fe, const char *field, const char *detail)
{
    ts_buf b = {0};
    ts_buf_printf(&b, "Required value%s%s", *detail ? ": " : "", detail);
    add_err(fe, "FieldValueRequired", field, b.data);
    ts_buf_free(&b);
}

/* pkg/apis/coordination/validation: ValidateLeaseCandidateSpec (v1.36). */
static void validate_lc_spec(field_errs *fe, const json_t *spec)
{
    const char *lease = json_string_value(json_object_get(spec, "leaseName"));
    json_t *bvj = json_object_get(spec, "binaryVersion");
    json_t *evj = json_object_get(spec, "emulationVersion");
    json_t *stj = json_object_get(spec, "strategy");
    const char *bvs = json_string_value(bvj), *evs = json_string_value(evj);
    const char *strategy = json_string_value(stj);
    ts_semver bv = {0}, ev = {0}, zero = {0};

    if (!lease || !*lease)
        add_required(fe, "spec.leaseName", "");
    if (evs && *evs && ts_semver_parse(evs, &ev) < 0)
        add_invalid(fe, "spec.emulationVersion", evj, "must be a valid semantic version");
    if (!bvs || !*bvs)
        add_required(fe, "spec.binaryVersion", "");
    else if (ts_semver_parse(bvs, &bv) < 0)
        add_invalid(fe, "spec.binaryVersion", bvj, "must be a valid semantic version");
    if (bvs && *bvs && evs && *evs && ts_semver_cmp(&bv, &ev) < 0)
        add_invalid(fe, "spec.binaryVersion", bvj,
                    "must be greater than or equal to `emulationVersion`");
    if (!strategy || !*strategy) {
        add_required(fe, "spec.strategy", "");
    } else if (!strchr(strategy, '/')) {
        if (strcmp(strategy, "OldestEmulationVersion")) {
            ts_buf b = {0};
            ts_buf_puts(&b, "Unsupported value: ");
            go_quote(&b, strategy);
            ts_buf_puts(&b, ": supported values: \"OldestEmulationVersion\"");
            add_err(fe, "FieldValueNotSupported", "spec.strategy.strategy", b.data);
            ts_buf_free(&b);
        }
    } else {
        check_qualified_name(fe, "spec.strategy.strategy", stj);
    }
    if (strategy && !strcmp(strategy, "OldestEmulationVersion") && !ts_semver_cmp(&ev, &zero))
        add_required(fe, "spec.emulationVersion",
                     "must be specified when `strategy` is 'OldestEmulationVersion'");
}

static json_t *build_lc_spec(decode_ctx *dc, field_errs *fe, const json_t *in, const json_t *old)
{
    json_t *ins = json_object_get(in, "spec");
    json_t *spec = json_object();
    if (ins && !json_is_null(ins) && !json_is_object(ins))
        type_err(dc, ins, "LeaseCandidate.spec", "v1beta1.LeaseCandidateSpec");
    if (json_is_object(ins)) {
        copy_str(dc, spec, ins, "leaseName", "LeaseCandidateSpec.spec.leaseName");
        copy_microtime(dc, spec, ins, "pingTime", "LeaseCandidateSpec.spec.pingTime");
        copy_microtime(dc, spec, ins, "renewTime", "LeaseCandidateSpec.spec.renewTime");
        copy_str(dc, spec, ins, "binaryVersion", "LeaseCandidateSpec.spec.binaryVersion");
        copy_str(dc, spec, ins, "emulationVersion", "LeaseCandidateSpec.spec.emulationVersion");
        copy_str(dc, spec, ins, "strategy", "LeaseCandidateSpec.spec.strategy");
    }
    if (old) {
        /* ValidateLeaseCandidateUpdate: the Lease a candidate runs for is fixed. */
        const char *was =
            json_string_value(json_object_get(json_object_get(old, "spec"), "leaseName"));
        const char *now = json_string_value(json_object_get(spec, "leaseName"));
        if (strcmp(was ? was : "", now ? now : "")) {
            json_t *v = json_string(now ? now : "");
            add_invalid(fe, "spec.leaseName", v, "field is immutable");
            json_decref(v);
        }
    }
    validate_lc_spec(fe, spec);
    return spec;
}

/* ---- Pods ----------------------------------------------------------------- */

/*
 * PodStatus as the apiserver decodes and encodes it (k8s.io/api/core/v1 as
 * of v1.36): known fields in Go order, unknown ones dropped, zero values
 * written where the Go field has no omitempty (ready, restartCount, image,
 * ...), metav1.Time in seconds and UTC (null when zero or absent). Each
 * struct is a table of its fields, walked by one decoder that also words
 * encoding/json's type errors. Fields the server only stores (resources,
 * volume mounts, users, claims) are type-checked at their top and kept as
 * sent.
 */
typedef enum pf_kind {
    PF_STR,    /* a string (named string types too) */
    PF_INT32,  /* int32 */
    PF_INT64,  /* int64 */
    PF_BOOL,   /* bool */
    PF_TIME,   /* metav1.Time */
    PF_MAP,    /* a map, or a struct kept as sent */
    PF_LIST,   /* a list kept as sent */
    PF_STRUCT, /* a struct decoded by its table */
    PF_STRUCTS /* a list of structs decoded by their table */
} pf_kind;

typedef enum pf_omit {
    PF_ALWAYS, /* no omitempty: written even when zero */
    PF_EMPTY,  /* omitempty: left out when zero ("", 0, false, empty map or list) */
    PF_NIL     /* a pointer: left out when null, written even when zero */
} pf_omit;

typedef struct pf_struct pf_struct;

typedef struct pf_field {
    const char *name;
    pf_kind kind;
    pf_omit omit;
    const char *gotype;   /* named in decoding errors */
    const pf_struct *sub; /* PF_STRUCT, PF_STRUCTS */
} pf_field;

struct pf_struct {
    const char *name;   /* "ContainerStatus": decoding errors name the struct */
    const char *gotype; /* "v1.ContainerStatus": a list item of the wrong JSON type */
    const pf_field *fields;
};

#define PF_END                                                                                     \
    {                                                                                              \
        NULL, PF_STR, PF_ALWAYS, NULL, NULL                                                        \
    }

static const pf_field waiting_fields[] = {{"reason", PF_STR, PF_EMPTY, "string", NULL},
                                          {"message", PF_STR, PF_EMPTY, "string", NULL},
                                          PF_END};
static const pf_struct waiting_struct = {"ContainerStateWaiting", "v1.ContainerStateWaiting",
                                         waiting_fields};

/* A metav1.Time of the wrong JSON type fails its UnmarshalJSON as a string. */
static const pf_field running_fields[] = {{"startedAt", PF_TIME, PF_ALWAYS, "string", NULL},
                                          PF_END};
static const pf_struct running_struct = {"ContainerStateRunning", "v1.ContainerStateRunning",
                                         running_fields};

static const pf_field terminated_fields[] = {{"exitCode", PF_INT32, PF_ALWAYS, "int32", NULL},
                                             {"signal", PF_INT32, PF_EMPTY, "int32", NULL},
                                             {"reason", PF_STR, PF_EMPTY, "string", NULL},
                                             {"message", PF_STR, PF_EMPTY, "string", NULL},
                                             {"startedAt", PF_TIME, PF_ALWAYS, "string", NULL},
                                             {"finishedAt", PF_TIME, PF_ALWAYS, "string", NULL},
                                             {"containerID", PF_STR, PF_EMPTY, "string", NULL},
                                             PF_END};
static const pf_struct terminated_struct = {"ContainerStateTerminated",
                                            "v1.ContainerStateTerminated", terminated_fields};

static const pf_field state_fields[] = {
    {"waiting", PF_STRUCT, PF_NIL, "v1.ContainerStateWaiting", &waiting_struct},
    {"running", PF_STRUCT, PF_NIL, "v1.ContainerStateRunning", &running_struct},
    {"terminated", PF_STRUCT, PF_NIL, "v1.ContainerStateTerminated", &terminated_struct},
    PF_END};
static const pf_struct state_struct = {"ContainerState", "v1.ContainerState", state_fields};

static const pf_field container_status_fields[] = {
    {"name", PF_STR, PF_ALWAYS, "string", NULL},
    {"state", PF_STRUCT, PF_ALWAYS, "v1.ContainerState", &state_struct},
    {"lastState", PF_STRUCT, PF_ALWAYS, "v1.ContainerState", &state_struct},
    {"ready", PF_BOOL, PF_ALWAYS, "bool", NULL},
    {"restartCount", PF_INT32, PF_ALWAYS, "int32", NULL},
    {"image", PF_STR, PF_ALWAYS, "string", NULL},
    {"imageID", PF_STR, PF_ALWAYS, "string", NULL},
    {"containerID", PF_STR, PF_EMPTY, "string", NULL},
    {"started", PF_BOOL, PF_NIL, "bool", NULL},
    {"allocatedResources", PF_MAP, PF_EMPTY, "v1.ResourceList", NULL},
    {"resources", PF_MAP, PF_NIL, "v1.ResourceRequirements", NULL},
    {"volumeMounts", PF_LIST, PF_EMPTY, "[]v1.VolumeMountStatus", NULL},
    {"user", PF_MAP, PF_NIL, "v1.ContainerUser", NULL},
    {"allocatedResourcesStatus", PF_LIST, PF_EMPTY, "[]v1.ResourceStatus", NULL},
    {"stopSignal", PF_STR, PF_NIL, "v1.Signal", NULL},
    PF_END};
static const pf_struct container_status_struct = {"ContainerStatus", "v1.ContainerStatus",
                                                  container_status_fields};

static const pf_field condition_fields[] = {
    {"type", PF_STR, PF_ALWAYS, "v1.PodConditionType", NULL},
    {"observedGeneration", PF_INT64, PF_EMPTY, "int64", NULL},
    {"status", PF_STR, PF_ALWAYS, "v1.ConditionStatus", NULL},
    {"lastProbeTime", PF_TIME, PF_ALWAYS, "string", NULL},
    {"lastTransitionTime", PF_TIME, PF_ALWAYS, "string", NULL},
    {"reason", PF_STR, PF_EMPTY, "string", NULL},
    {"message", PF_STR, PF_EMPTY, "string", NULL},
    PF_END};
static const pf_struct condition_struct = {"PodCondition", "v1.PodCondition", condition_fields};

static const pf_field ip_fields[] = {{"ip", PF_STR, PF_ALWAYS, "string", NULL}, PF_END};
static const pf_struct pod_ip_struct = {"PodIP", "v1.PodIP", ip_fields};
static const pf_struct host_ip_struct = {"HostIP", "v1.HostIP", ip_fields};

static const pf_field pod_status_fields[] = {
    {"observedGeneration", PF_INT64, PF_EMPTY, "int64", NULL},
    {"phase", PF_STR, PF_EMPTY, "v1.PodPhase", NULL},
    {"conditions", PF_STRUCTS, PF_EMPTY, "[]v1.PodCondition", &condition_struct},
    {"message", PF_STR, PF_EMPTY, "string", NULL},
    {"reason", PF_STR, PF_EMPTY, "string", NULL},
    {"nominatedNodeName", PF_STR, PF_EMPTY, "string", NULL},
    {"hostIP", PF_STR, PF_EMPTY, "string", NULL},
    {"hostIPs", PF_STRUCTS, PF_EMPTY, "[]v1.HostIP", &host_ip_struct},
    {"podIP", PF_STR, PF_EMPTY, "string", NULL},
    {"podIPs", PF_STRUCTS, PF_EMPTY, "[]v1.PodIP", &pod_ip_struct},
    {"startTime", PF_TIME, PF_NIL, "string", NULL},
    {"initContainerStatuses", PF_STRUCTS, PF_EMPTY, "[]v1.ContainerStatus",
     &container_status_struct},
    {"containerStatuses", PF_STRUCTS, PF_EMPTY, "[]v1.ContainerStatus", &container_status_struct},
    {"qosClass", PF_STR, PF_EMPTY, "v1.PodQOSClass", NULL},
    {"ephemeralContainerStatuses", PF_STRUCTS, PF_EMPTY, "[]v1.ContainerStatus",
     &container_status_struct},
    {"resize", PF_STR, PF_EMPTY, "v1.PodResizeStatus", NULL},
    {"resourceClaimStatuses", PF_LIST, PF_EMPTY, "[]v1.PodResourceClaimStatus", NULL},
    {"extendedResourceClaimStatus", PF_MAP, PF_NIL, "v1.PodExtendedResourceClaimStatus", NULL},
    {"allocatedResources", PF_MAP, PF_EMPTY, "v1.ResourceList", NULL},
    {"resources", PF_MAP, PF_NIL, "v1.ResourceRequirements", NULL},
    PF_END};
static const pf_struct pod_status_struct = {"PodStatus", "v1.PodStatus", pod_status_fields};

static const pf_field pod_fields[] = {
    {"status", PF_STRUCT, PF_ALWAYS, "v1.PodStatus", &pod_status_struct}, PF_END};
static const pf_struct pod_struct = {"Pod", "v1.Pod", pod_fields};

/*
 * metav1.Time's UnmarshalJSON: time.Parse(RFC3339) and, when it encodes, UTC
 * in seconds ("" when the time is zero: it encodes as null). -1 with Go's
 * error in *err.
 */
static int go_time(const char *v, char out[32], ts_buf *err)
{
    time_t t;
    if (ts_parse_time(v, &t) < 0) {
        /* Go's parser also takes a one-digit hour ("2024-01-02T3:04:05Z"). */
        ts_buf fixed = {0};
        bool ok = strlen(v) > 13 && v[10] == 'T' && is_digit(v[11]) && v[12] == ':' &&
                  ts_buf_printf(&fixed, "%.11s0%s", v, v + 11) == 0 &&
                  ts_parse_time(fixed.data, &t) == 0;
        ts_buf_free(&fixed);
        if (!ok) {
            go_time_error(err, v, false);
            return -1;
        }
    }
    ts_format_time(t, out);
    if (!strcmp(out, "0001-01-01T00:00:00Z"))
        out[0] = '\0';
    return 0;
}

static json_t *pf_decode(decode_ctx *dc, const json_t *in, const pf_struct *st, const char *path);

/* Decodes in[f->name] into out (or leaves it out), as encoding/json and then the encoder would. */
static void pf_decode_field(decode_ctx *dc, json_t *out, const json_t *in, const pf_struct *st,
                            const char *path, const pf_field *f)
{
    json_t *v = json_object_get(in, f->name);
    bool null = !v || json_is_null(v);
    bool keep_zero = f->omit != PF_EMPTY;
    ts_buf goname = {0}, sub = {0};
    ts_buf_printf(&goname, "%s.%s%s%s", st->name, path, *path ? "." : "", f->name);
    ts_buf_printf(&sub, "%s%s%s", path, *path ? "." : "", f->name);
    if (!goname.data || !sub.data)
        goto out;

    switch (f->kind) {
    case PF_STR:
        if (null) {
            if (f->omit == PF_ALWAYS)
                json_object_set_new(out, f->name, json_string(""));
        } else if (!json_is_string(v)) {
            type_err(dc, v, goname.data, f->gotype);
        } else if (keep_zero || *json_string_value(v)) {
            json_object_set(out, f->name, v);
        }
        break;
    case PF_INT32:
    case PF_INT64:
        if (null) {
            if (f->omit == PF_ALWAYS)
                json_object_set_new(out, f->name, json_integer(0));
        } else if (!json_is_integer(v) ||
                   (f->kind == PF_INT32 &&
                    (json_integer_value(v) < INT32_MIN || json_integer_value(v) > INT32_MAX))) {
            type_err(dc, v, goname.data, f->gotype);
        } else if (keep_zero || json_integer_value(v)) {
            json_object_set(out, f->name, v);
        }
        break;
    case PF_BOOL:
        if (null) {
            if (f->omit == PF_ALWAYS)
                json_object_set_new(out, f->name, json_false());
        } else if (!json_is_boolean(v)) {
            type_err(dc, v, goname.data, f->gotype);
        } else if (keep_zero || json_is_true(v)) {
            json_object_set(out, f->name, v);
        }
        break;
    case PF_TIME: {
        char t[32] = "";
        if (null) {
            if (f->omit == PF_ALWAYS)
                json_object_set_new(out, f->name, json_null());
            break;
        }
        if (!json_is_string(v)) {
            type_err(dc, v, goname.data, f->gotype);
            break;
        }
        ts_buf e = {0};
        if (go_time(json_string_value(v), t, &e) < 0) {
            if (!dc->err)
                dc->err = e.data;
            else
                ts_buf_free(&e);
            break;
        }
        json_object_set_new(out, f->name, *t ? json_string(t) : json_null());
        break;
    }
    case PF_MAP:
        if (null)
            break;
        if (!json_is_object(v))
            type_err(dc, v, goname.data, f->gotype);
        else if (keep_zero || json_object_size(v))
            json_object_set_new(out, f->name, json_deep_copy(v));
        break;
    case PF_LIST:
        if (null)
            break;
        if (!json_is_array(v))
            type_err(dc, v, goname.data, f->gotype);
        else if (json_array_size(v))
            json_object_set_new(out, f->name, json_deep_copy(v));
        break;
    case PF_STRUCT:
        if (null) {
            if (f->omit == PF_ALWAYS)
                json_object_set_new(out, f->name, pf_decode(dc, NULL, f->sub, sub.data));
        } else if (!json_is_object(v)) {
            type_err(dc, v, goname.data, f->gotype);
        } else {
            json_object_set_new(out, f->name, pf_decode(dc, v, f->sub, sub.data));
        }
        break;
    case PF_STRUCTS: {
        if (null)
            break;
        if (!json_is_array(v)) {
            type_err(dc, v, goname.data, f->gotype);
            break;
        }
        json_t *items = json_array();
        size_t i;
        json_t *item;
        json_array_foreach(v, i, item)
        {
            if (!json_is_null(item) && !json_is_object(item))
                type_err(dc, item, goname.data, f->sub->gotype);
            else /* null decodes as the zero struct */
                json_array_append_new(items, pf_decode(dc, item, f->sub, sub.data));
        }
        if (json_array_size(items))
            json_object_set(out, f->name, items);
        json_decref(items);
        break;
    }
    }
out:
    ts_buf_free(&goname);
    ts_buf_free(&sub);
}

/* in: a JSON object or NULL (the zero struct); path: the JSON path of in ("status"). */
static json_t *pf_decode(decode_ctx *dc, const json_t *in, const pf_struct *st, const char *path)
{
    json_t *out = json_object();
    for (const pf_field *f = st->fields; out && f->name; f++)
        pf_decode_field(dc, out, in, st, path, f);
    return out;
}

/*
 * The status in a Pod body, canonical, with the v1 -> internal conversion
 * of the IPs: a podIP wins over a podIPs that disagrees, and each fills in
 * for the other when absent. (hostIP and hostIPs are left as sent: only
 * validation ties them.)
 */
static json_t *pod_status_decode(decode_ctx *dc, const json_t *pod)
{
    json_t *wrapper = pf_decode(dc, pod, &pod_struct, "");
    json_t *st = json_incref(json_object_get(wrapper, "status"));
    json_decref(wrapper);
    if (!st)
        return json_object();
    const char *ip = json_string_value(json_object_get(st, "podIP"));
    json_t *ips = json_object_get(st, "podIPs");
    const char *ip0 = json_string_value(json_object_get(json_array_get(ips, 0), "ip"));
    if (ip && (!ip0 || strcmp(ip, ip0))) {
        json_t *one = json_pack("[{s:s}]", "ip", ip);
        /* Go field order: podIPs follows podIP, so replace it in place or rebuild the tail. */
        json_t *copy = json_object();
        const char *k;
        json_t *v;
        json_object_foreach(st, k, v)
        {
            if (!strcmp(k, "podIPs"))
                continue;
            json_object_set(copy, k, v);
            if (!strcmp(k, "podIP"))
                json_object_set(copy, "podIPs", one);
        }
        json_decref(one);
        json_decref(st);
        st = copy;
    } else if (!ip && ip0) {
        json_t *copy = json_object();
        const char *k;
        json_t *v;
        json_object_foreach(st, k, v)
        {
            if (!strcmp(k, "podIPs"))
                json_object_set_new(copy, "podIP", json_string(ip0));
            json_object_set(copy, k, v);
        }
        json_decref(st);
        st = copy;
    }
    return st;
}

/* ---- quality of service ---- */

/*
 * A resource.Quantity's value, near enough to compare two of them: decimal
 * (n u m k M G T P E) and binary (Ki ... Ei) suffixes and decimal exponents.
 */
static bool quantity(const json_t *q, long double *out)
{
    const char *s = json_string_value(q);
    if (json_is_integer(q) || json_is_real(q)) {
        *out = (long double)json_number_value(q);
        return true;
    }
    if (!s || !(is_digit(*s) || *s == '.' || *s == '+' || *s == '-'))
        return false;
    char *end;
    long double v = strtold(s, &end);
    static const struct {
        const char *suffix;
        long double mult;
    } sfx[] = {{"", 1.0L},
               {"n", 1e-9L},
               {"u", 1e-6L},
               {"m", 1e-3L},
               {"k", 1e3L},
               {"M", 1e6L},
               {"G", 1e9L},
               {"T", 1e12L},
               {"P", 1e15L},
               {"E", 1e18L},
               {"Ki", 1024.0L},
               {"Mi", 1048576.0L},
               {"Gi", 1073741824.0L},
               {"Ti", 1099511627776.0L},
               {"Pi", 1125899906842624.0L},
               {"Ei", 1152921504606846976.0L}};
    for (size_t i = 0; i < sizeof(sfx) / sizeof(sfx[0]); i++) {
        if (!strcmp(end, sfx[i].suffix)) {
            *out = v * sfx[i].mult;
            return true;
        }
    }
    return false;
}

static bool quantity_equal(long double a, long double b)
{
    long double d = a > b ? a - b : b - a, m = a > b ? a : b;
    return d <= m * 1e-12L;
}

/* Adds one container's (or the pod's) requests and limits for cpu and memory. */
static void qos_add(const json_t *resources, long double req[2], long double lim[2],
                    bool has_req[2], bool has_lim[2], bool *guaranteed)
{
    static const char *const names[] = {"cpu", "memory"};
    const json_t *requests = json_object_get(resources, "requests");
    const json_t *limits = json_object_get(resources, "limits");
    bool found[2] = {false, false};
    for (int i = 0; i < 2; i++) {
        long double r = 0, l = 0;
        bool hr = quantity(json_object_get(requests, names[i]), &r);
        bool hl = quantity(json_object_get(limits, names[i]), &l);
        if (!hr && hl) /* SetDefaults: requests default to the limits */
            hr = true, r = l;
        if (hr && r > 0)
            req[i] += r, has_req[i] = true;
        if (hl && l > 0)
            lim[i] += l, has_lim[i] = true, found[i] = true;
    }
    if (!found[0] || !found[1])
        *guaranteed = false;
}

/* pkg/apis/core/helper/qos: ComputePodQOS over cpu and memory. */
static const char *pod_qos_class(const json_t *spec)
{
    long double req[2] = {0, 0}, lim[2] = {0, 0};
    bool has_req[2] = {false, false}, has_lim[2] = {false, false}, guaranteed = true;
    const json_t *pod_resources = json_object_get(spec, "resources");
    if (json_is_object(pod_resources)) {
        qos_add(pod_resources, req, lim, has_req, has_lim, &guaranteed);
    } else {
        static const char *const lists[] = {"containers", "initContainers"};
        for (size_t l = 0; l < 2; l++) {
            size_t i;
            json_t *c;
            json_array_foreach(json_object_get(spec, lists[l]), i, c)
            {
                qos_add(json_object_get(c, "resources"), req, lim, has_req, has_lim, &guaranteed);
            }
        }
    }
    if (!has_req[0] && !has_req[1] && !has_lim[0] && !has_lim[1])
        return "BestEffort";
    for (int i = 0; i < 2 && guaranteed; i++)
        if (has_req[i] && (!has_lim[i] || !quantity_equal(req[i], lim[i])))
            guaranteed = false;
    if (guaranteed && has_req[0] + has_req[1] == has_lim[0] + has_lim[1])
        return "Guaranteed";
    return "Burstable";
}

/* ---- validation (pkg/apis/core/validation: ValidatePodStatusUpdate, v1.36) ---- */

static int ip_family(const char *s)
{
    unsigned char buf[16];
    if (!s)
        return 0;
    if (inet_pton(AF_INET, s, buf) == 1)
        return 4;
    if (inet_pton(AF_INET6, s, buf) == 1)
        return 6;
    return 0;
}

/* podIPs or hostIPs: each a valid IP, at most one per family. */
static void validate_ips(field_errs *fe, const json_t *ips, const char *field)
{
    size_t i, n4 = 0, n6 = 0;
    json_t *e;
    json_array_foreach(ips, i, e)
    {
        json_t *ip = json_object_get(e, "ip");
        int fam = ip_family(json_string_value(ip));
        n4 += fam == 4;
        n6 += fam == 6;
        if (!fam) {
            ts_buf f = {0};
            ts_buf_printf(&f, "%s[%zu]", field, i);
            add_invalid(fe, f.data, ip,
                        "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)");
            ts_buf_free(&f);
        }
    }
    if (n4 > 1 || n6 > 1) {
        /* The value is the internal []core.PodIP, JSON-encoded: {"IP": ...}. */
        json_t *v = json_array();
        json_array_foreach(ips, i, e)
        {
            json_array_append_new(v, json_pack("{s:O}", "IP", json_object_get(e, "ip")));
        }
        add_invalid(fe, field, v, "may specify no more than one IP for each IP family");
        json_decref(v);
    }
}

/* The spec entry of the container a status is for, or NULL. */
static const json_t *spec_container(const json_t *spec, const char *list, const char *name)
{
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(spec, list), i, c)
    {
        const char *n = json_string_value(json_object_get(c, "name"));
        if (n && name && !strcmp(n, name))
            return c;
    }
    return NULL;
}

static const json_t *status_by_name(const json_t *statuses, const char *name)
{
    size_t i;
    json_t *s;
    json_array_foreach(statuses, i, s)
    {
        const char *n = json_string_value(json_object_get(s, "name"));
        if (n && name && !strcmp(n, name))
            return s;
    }
    return NULL;
}

/*
 * ValidateContainerStateTransition and its init-container twin: a container
 * the kubelet will not restart - any under restartPolicy Never, one that
 * exited 0 under OnFailure - may not leave the terminated state. A
 * restartable (sidecar) init container may, whatever the pod's policy.
 */
static void validate_transitions(field_errs *fe, const json_t *st, const json_t *old_st,
                                 const json_t *spec, const char *list, const char *policy)
{
    bool init = !strcmp(list, "initContainerStatuses");
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(st, list), i, s)
    {
        const char *name = json_string_value(json_object_get(s, "name"));
        const json_t *was = status_by_name(json_object_get(old_st, list), name);
        const json_t *term = json_object_get(json_object_get(was, "state"), "terminated");
        if (!term)
            continue;
        if (init) {
            const json_t *c = spec_container(spec, "initContainers", name);
            const char *rp = json_string_value(json_object_get(c, "restartPolicy"));
            if (rp && !strcmp(rp, "Always"))
                continue;
        }
        bool exited0 = json_integer_value(json_object_get(term, "exitCode")) == 0;
        bool may_restart = !strcmp(policy, "Always") || (!strcmp(policy, "OnFailure") && !exited0);
        if (may_restart || json_object_get(json_object_get(s, "state"), "terminated"))
            continue;
        ts_buf f = {0};
        ts_buf_printf(&f, "status.%s[%zu].state", list, i);
        add_err(fe, "FieldValueForbidden", f.data,
                "Forbidden: may not be transitioned to non-terminated state");
        ts_buf_free(&f);
    }
}

static void check_non_negative(field_errs *fe, const char *field, const json_t *v)
{
    if (v && json_integer_value(v) < 0)
        add_invalid(fe, field, v, "must be a non-negative integer");
}

static void validate_pod_status(field_errs *fe, const json_t *st, const json_t *old_st,
                                const json_t *spec)
{
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(st, "conditions"), i, e)
    {
        /* validatePodConditions: the system's own types pass as they are. */
        json_t *type = json_object_get(e, "type");
        const char *t = json_string_value(type);
        ts_buf f = {0};
        if (strcmp(t, "PodScheduled") && strcmp(t, "Ready") && strcmp(t, "Initialized")) {
            ts_buf_printf(&f, "status.conditions[%zu].Type", i);
            check_qualified_name(fe, f.data, type);
        }
        ts_buf_free(&f);
        ts_buf_printf(&f, "status.conditions[%zu].observedGeneration", i);
        check_non_negative(fe, f.data, json_object_get(e, "observedGeneration"));
        ts_buf_free(&f);
    }
    json_t *nnn = json_object_get(st, "nominatedNodeName");
    if (nnn && !dns1123_subdomain(json_string_value(nnn)))
        add_invalid(fe, "status.nominatedNodeName", nnn,
                    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                    "characters, '-' or '.', and must start and end with an alphanumeric "
                    "character (e.g. 'example.com', regex used for validation is "
                    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')");
    json_t *qos = json_object_get(st, "qosClass");
    json_t *old_qos = json_object_get(old_st, "qosClass");
    if (!json_equal(qos, old_qos) && (qos || old_qos)) {
        json_t *v = qos ? json_incref(qos) : json_string("");
        add_invalid(fe, "status.qosClass", v, "field is immutable");
        json_decref(v);
    }
    const char *policy = json_string_value(json_object_get(spec, "restartPolicy"));
    if (!policy || !*policy)
        policy = "Always"; /* the default the mirror does not write into spec */
    validate_transitions(fe, st, old_st, spec, "containerStatuses", policy);
    validate_transitions(fe, st, old_st, spec, "initContainerStatuses", policy);
    /* The kubelet never restarts ephemeral containers. */
    validate_transitions(fe, st, old_st, spec, "ephemeralContainerStatuses", "Never");
    json_array_foreach(json_object_get(st, "resourceClaimStatuses"), i, e)
    {
        json_t *name = json_object_get(e, "name");
        if (!spec_container(spec, "resourceClaims", json_string_value(name))) {
            ts_buf f = {0};
            json_t *v = name ? json_incref(name) : json_string("");
            ts_buf_printf(&f, "status.resourceClaimStatuses[%zu].name", i);
            add_invalid(fe, f.data, v, "must match the name of an entry in `spec.resourceClaims`");
            json_decref(v);
            ts_buf_free(&f);
        }
    }
    validate_ips(fe, json_object_get(st, "podIPs"), "status.podIPs");
    json_t *host_ips = json_object_get(st, "hostIPs");
    if (json_array_size(host_ips)) {
        json_t *ip0 = json_object_get(json_array_get(host_ips, 0), "ip");
        const char *hip = json_string_value(json_object_get(st, "hostIP"));
        if (strcmp(json_string_value(ip0), hip ? hip : ""))
            add_invalid(fe, "status.hostIPs[0].ip", ip0, "must be equal to `hostIP`");
        validate_ips(fe, host_ips, "status.hostIPs");
    }
    check_non_negative(fe, "status.observedGeneration", json_object_get(st, "observedGeneration"));
}

/*
 * The object a write stores, from the client's body in (NULL on allocation
 * failure; decoding errors in dc, validation errors in fe). status_write: a
 * write to pods/NAME/status.
 */
static json_t *build_object(ts_res res, const json_t *in, const ts_sysmeta *sys, const json_t *old,
                            bool status_write, decode_ctx *dc, field_errs *fe)
{
    const ts_resdef *rd = &ts_resdefs[res];
    json_t *out = json_object();
    if (!out)
        return NULL;
    json_object_set_new(out, "kind", json_string(rd->kind));
    json_object_set_new(out, "apiVersion", json_string(rd->api_version));
    json_t *meta = build_metadata(dc, in, sys);
    json_object_set_new(out, "metadata", meta);
    check_name(fe, res, sys->name);
    /*
     * The apiserver validates labels and annotations once on a create, but
     * three or four times on an update (the generic registry, then the
     * strategy's ValidateObjectMetaUpdate, and for Pods and Namespaces once
     * more), and lists every pass's errors in details.causes.
     */
    int passes = !old ? 1 : (res == TS_POD || res == TS_NS) && !status_write ? 4 : 3;
    for (int i = 0; i < passes; i++) {
        check_labels(fe, json_object_get(meta, "labels"));
        check_annotations(fe, json_object_get(meta, "annotations"));
    }

    if (res == TS_LEASE) {
        json_object_set_new(out, "spec", build_lease_spec(dc, fe, in));
    } else if (res == TS_LC) {
        json_object_set_new(out, "spec", build_lc_spec(dc, fe, in, old));
    } else if (res == TS_NS) {
        /*
         * spec.finalizers as sent, plus "kubernetes" (the strategy adds it);
         * status is the server's: Active, or Terminating once deleted.
         */
        json_t *fin = json_array(),
               *infin = json_object_get(json_object_get(in, "spec"), "finalizers");
        bool has_k8s = false;
        size_t i;
        json_t *f;
        json_array_foreach(infin, i, f)
        {
            if (!json_is_string(f))
                continue;
            has_k8s |= !strcmp(json_string_value(f), "kubernetes");
            json_array_append(fin, f);
        }
        if (!has_k8s)
            json_array_append_new(fin, json_string("kubernetes"));
        json_object_set_new(out, "spec", json_pack("{s:o}", "finalizers", fin));
        json_object_set_new(out, "status",
                            json_pack("{s:s}", "phase", sys->deleted ? "Terminating" : "Active"));
    } else {
        /* The spec is a prop, kept as sent (not defaulted); the status is decoded in full. */
        json_t *spec = json_object_get(in, "spec");
        if (spec && !json_is_object(spec) && !json_is_null(spec))
            type_err(dc, spec, "Pod.spec", "v1.PodSpec");
        json_t *st = pod_status_decode(dc, in);
        if (status_write) {
            /*
             * podStatusStrategy: the status and the metadata (labels,
             * annotations) as sent, the spec as stored, and the QoS class
             * kept when the body has none (v1.32+; it is immutable).
             */
            const json_t *old_st = json_object_get(old, "status");
            json_object_set_new(out, "spec", json_deep_copy(json_object_get(old, "spec")));
            if (!json_object_get(st, "qosClass") && json_object_get(old_st, "qosClass")) {
                json_t *copy = json_object();
                const char *k;
                json_t *v;
                bool placed = false;
                /* Go order: qosClass follows containerStatuses. */
                static const char *const after[] = {"ephemeralContainerStatuses",
                                                    "resize",
                                                    "resourceClaimStatuses",
                                                    "extendedResourceClaimStatus",
                                                    "allocatedResources",
                                                    "resources",
                                                    NULL};
                json_object_foreach(st, k, v)
                {
                    for (size_t i = 0; !placed && after[i]; i++) {
                        if (!strcmp(k, after[i])) {
                            json_object_set(copy, "qosClass", json_object_get(old_st, "qosClass"));
                            placed = true;
                        }
                    }
                    json_object_set(copy, k, v);
                }
                if (!placed)
                    json_object_set(copy, "qosClass", json_object_get(old_st, "qosClass"));
                json_decref(st);
                st = copy;
            }
            if (!dc->err)
                validate_pod_status(fe, st, old_st, json_object_get(old, "spec"));
            json_object_set_new(out, "status", st);
        } else {
            /*
             * podStrategy: the main resource never writes the status - an
             * update keeps the stored one, a create starts Pending with the
             * QoS class of its containers' resources.
             */
            json_decref(st);
            json_object_set_new(out, "spec",
                                json_is_object(spec) ? json_deep_copy(spec) : json_object());
            json_t *keep = old ? json_object_get(old, "status") : NULL;
            if (keep)
                json_object_set_new(out, "status", json_deep_copy(keep));
            else
                json_object_set_new(out, "status",
                                    json_pack("{s:s, s:s}", "phase", "Pending", "qosClass",
                                              pod_qos_class(json_object_get(out, "spec"))));
        }
    }
    return out;
}

/* ts_object_build and ts_object_build_status: the build, then its errors as a Status. */
static json_t *build_checked(ts_res res, const json_t *in, const ts_sysmeta *sys, const json_t *old,
                             bool status_write, unsigned *code, json_t **status)
{
    const ts_resdef *rd = &ts_resdefs[res];
    decode_ctx dc = {res, NULL};
    field_errs fe = {json_array(), {0}, 0};
    json_t *out = fe.causes ? build_object(res, in, sys, old, status_write, &dc, &fe) : NULL;

    *status = NULL;
    if (!out) {
        *code = 500;
        *status = ts_status_failure(500, "InternalError", "out of memory", NULL);
        goto fail;
    }
    if (dc.err) {
        ts_buf m = {0};
        ts_buf_printf(&m, "%s in version \"%s\" cannot be handled as a %s: %s", rd->kind,
                      res_version(res), rd->kind, dc.err);
        *code = 400;
        *status = ts_status_bad_request(m.data);
        ts_buf_free(&m);
        goto fail;
    }
    if (fe.n) {
        *code = 422;
        *status = invalid_status(res, sys->name, &fe);
        goto fail;
    }
    json_decref(fe.causes);
    ts_buf_free(&fe.msg);
    return out;
fail:
    free(dc.err);
    json_decref(fe.causes);
    ts_buf_free(&fe.msg);
    json_decref(out);
    return NULL;
}

json_t *ts_object_build(ts_res res, const json_t *in, const ts_sysmeta *sys, const json_t *old,
                        unsigned *code, json_t **status)
{
    return build_checked(res, in, sys, old, false, code, status);
}

json_t *ts_object_build_status(ts_res res, const json_t *in, const ts_sysmeta *sys,
                               const json_t *old, unsigned *code, json_t **status)
{
    return build_checked(res, in, sys, old, true, code, status);
}

char *ts_object_decode_error(ts_res res, const json_t *in)
{
    decode_ctx dc = {res, NULL};
    field_errs fe = {json_array(), {0}, 0};
    ts_sysmeta sys = {"", "", "", "", NULL};
    json_decref(build_object(res, in, &sys, NULL, false, &dc, &fe));
    json_decref(fe.causes);
    ts_buf_free(&fe.msg);
    return dc.err;
}

json_t *ts_status_patch_invalid(const json_t *patched, const char *why)
{
    /* The patcher's error: the patched object as Go marshals a map (sorted keys), quoted. */
    char *j = json_dumps(patched, JSON_COMPACT | JSON_SORT_KEYS);
    ts_buf body = {0}, m = {0};
    ts_buf_puts(&body, "Invalid value: ");
    go_quote(&body, j ? j : "");
    ts_buf_printf(&body, ": %s", why);
    ts_buf_printf(&m, " \"\" is invalid: patch: %s", body.data);
    json_t *d = json_pack("{s:[{s:s, s:s, s:s}]}", "causes", "reason", "FieldValueInvalid",
                          "message", body.data, "field", "patch");
    json_t *s = ts_status_failure(422, "Invalid", m.data, d);
    free(j);
    ts_buf_free(&body);
    ts_buf_free(&m);
    return s;
}

json_t *ts_merge_patch(const json_t *target, const json_t *patch)
{
    if (!json_is_object(patch))
        return json_deep_copy(patch);
    json_t *out = json_is_object(target) ? json_deep_copy(target) : json_object();
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)patch, k, v)
    {
        if (json_is_null(v)) {
            json_object_del(out, k);
        } else {
            json_t *merged = ts_merge_patch(json_object_get(out, k), v);
            if (!merged || json_object_set_new(out, k, merged) < 0) {
                json_decref(out);
                return NULL;
            }
        }
    }
    return out;
}

/* ---- lists and tables ------------------------------------------------- */

json_t *ts_list_item(const json_t *obj)
{
    json_t *item = json_copy((json_t *)obj); /* shallow: values are shared */
    if (item) {
        json_object_del(item, "kind");
        json_object_del(item, "apiVersion");
    }
    return item;
}

bool ts_table_supported(ts_res res)
{
    return res == TS_LEASE || res == TS_POD || res == TS_NS || res == TS_LC;
}

static const char *const meta_name_doc =
    "Name must be unique within a namespace. Is required when creating resources, although "
    "some resources may allow a client to request the generation of an appropriate name "
    "automatically. Name is primarily intended for creation idempotence and configuration "
    "definition. Cannot be updated. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
static const char *const meta_created_doc =
    "CreationTimestamp is a timestamp representing the server time when this object was "
    "created. It is not guaranteed to be set in happens-before order across separate "
    "operations. Clients may not set this value. It is represented in RFC3339 form and is in "
    "UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/"
    "api-conventions.md#metadata";

static void add_column(json_t *cols, const char *name, const char *format, const char *doc,
                       int priority)
{
    json_t *c = json_object();
    json_object_set_new(c, "name", json_string(name));
    json_object_set_new(c, "type", json_string("string"));
    json_object_set_new(c, "format", json_string(format));
    json_object_set_new(c, "description", json_string(doc));
    json_object_set_new(c, "priority", json_integer(priority));
    json_array_append_new(cols, c);
}

json_t *ts_table_new(ts_res res, bool with_columns)
{
    json_t *t = json_object();
    if (!t)
        return NULL;
    json_object_set_new(t, "kind", json_string("Table"));
    json_object_set_new(t, "apiVersion", json_string("meta.k8s.io/v1"));
    json_object_set_new(t, "metadata", json_object());
    json_t *cols = json_array();
    if (with_columns) {
        /* The columns of pkg/printers/internalversion for these kinds. */
        add_column(cols, "Name", "name", meta_name_doc, 0);
        if (res == TS_LEASE) {
            add_column(cols, "Holder", "",
                       "holderIdentity contains the identity of the holder of a current lease. "
                       "If Coordinated Leader Election is used, the holder identity must be "
                       "equal to the elected LeaseCandidate.metadata.name field.",
                       0);
        } else if (res == TS_LC) {
            add_column(cols, "LeaseName", "",
                       "LeaseName is the name of the lease for which this candidate is "
                       "contending. This field is immutable.",
                       0);
            add_column(cols, "BinaryVersion", "", "", 0);
            add_column(cols, "EmulationVersion", "", "", 0);
        } else if (res == TS_NS) {
            add_column(cols, "Status", "", "The status of the namespace", 0);
        } else {
            add_column(cols, "Ready", "",
                       "The aggregate readiness state of this pod for accepting traffic.", 0);
            add_column(cols, "Status", "", "The aggregate status of the containers in this pod.",
                       0);
            add_column(cols, "Restarts", "",
                       "The number of times the containers in this pod have been restarted and "
                       "when the last container in this pod has restarted.",
                       0);
        }
        add_column(cols, "Age", "", meta_created_doc, 0);
        if (res == TS_POD) {
            add_column(cols, "IP", "",
                       "IP address allocated to the pod. Routable at least "
                       "within the cluster. Empty if not yet allocated.",
                       1);
            add_column(cols, "Node", "", "Name of the Node this pod is assigned to.", 1);
            add_column(cols, "Nominated Node", "",
                       "Name of the node where the pod would be scheduled if preemption of "
                       "lower priority pods succeeded.",
                       1);
            add_column(cols, "Readiness Gates", "",
                       "If specified, all readiness gates will be evaluated for pod readiness.", 1);
        }
    }
    json_object_set_new(t, "columnDefinitions", cols);
    json_object_set_new(t, "rows", json_array());
    return t;
}

void ts_human_duration(long long s, char out[32])
{
    /* k8s.io/apimachinery/pkg/util/duration.HumanDuration */
    if (s < -1) {
        snprintf(out, 32, "<invalid>");
    } else if (s < 0) {
        snprintf(out, 32, "0s");
    } else if (s < 120) {
        snprintf(out, 32, "%llds", s);
    } else if (s / 60 < 10) {
        long long m = s / 60, r = s % 60;
        if (r)
            snprintf(out, 32, "%lldm%llds", m, r);
        else
            snprintf(out, 32, "%lldm", m);
    } else if (s / 60 < 180) {
        snprintf(out, 32, "%lldm", s / 60);
    } else if (s / 3600 < 8) {
        long long h = s / 3600, m = (s / 60) % 60;
        if (m)
            snprintf(out, 32, "%lldh%lldm", h, m);
        else
            snprintf(out, 32, "%lldh", h);
    } else if (s / 3600 < 48) {
        snprintf(out, 32, "%lldh", s / 3600);
    } else if (s / 3600 < 24 * 8) {
        long long h = s / 3600;
        if (h % 24)
            snprintf(out, 32, "%lldd%lldh", h / 24, h % 24);
        else
            snprintf(out, 32, "%lldd", h / 24);
    } else if (s / 3600 < 24 * 365 * 2) {
        snprintf(out, 32, "%lldd", s / 86400);
    } else if (s / 3600 < 24 * 365 * 8) {
        long long d = s / 86400;
        if (d % 365)
            snprintf(out, 32, "%lldy%lldd", d / 365, d % 365);
        else
            snprintf(out, 32, "%lldy", d / 365);
    } else {
        snprintf(out, 32, "%lldy", s / 86400 / 365);
    }
}

static const char *str_or(const char *s, const char *dflt)
{
    return s && *s ? s : dflt;
}

static bool has_condition(const json_t *st, const char *type, const char *status)
{
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(st, "conditions"), i, c)
    {
        const char *t = json_string_value(json_object_get(c, "type"));
        const char *v = json_string_value(json_object_get(c, "status"));
        if (t && v && !strcmp(t, type) && !strcmp(v, status))
            return true;
    }
    return false;
}

/* Adds a container's restarts, and keeps the latest end of its last termination. */
static void count_restarts(const json_t *cs, long *restarts, time_t *last)
{
    time_t t;
    const char *fin = json_string_value(json_object_get(
        json_object_get(json_object_get(cs, "lastState"), "terminated"), "finishedAt"));
    *restarts += (long)json_integer_value(json_object_get(cs, "restartCount"));
    if (fin && ts_parse_time(fin, &t) == 0 && t > *last)
        *last = t;
}

/*
 * A Pod's cells: NAME READY STATUS RESTARTS AGE, then the wide ones (IP,
 * NODE, NOMINATED NODE, READINESS GATES), worked out as kubectl's printPod
 * (pkg/printers/internalversion) does from the container statuses.
 */
static void pod_cells(json_t *cells, const json_t *obj, const char *age, time_t now)
{
    const json_t *spec = json_object_get(obj, "spec"), *st = json_object_get(obj, "status");
    const json_t *init_specs = json_object_get(spec, "initContainers");
    long total = (long)json_array_size(json_object_get(spec, "containers")), ready = 0;
    long restarts = 0, sidecar_restarts = 0;
    time_t last = 0, sidecar_last = 0;
    bool initializing = false;
    char reason[160], buf[192];
    size_t i;
    json_t *c;

    snprintf(reason, sizeof(reason), "%s",
             str_or(json_string_value(json_object_get(st, "reason")),
                    str_or(json_string_value(json_object_get(st, "phase")), "")));
    json_array_foreach(json_object_get(st, "conditions"), i, c)
    {
        const char *t = json_string_value(json_object_get(c, "type"));
        const char *r = json_string_value(json_object_get(c, "reason"));
        if (t && r && !strcmp(t, "PodScheduled") && !strcmp(r, "SchedulingGated"))
            snprintf(reason, sizeof(reason), "SchedulingGated");
    }
    json_array_foreach(init_specs, i, c)
    {
        const char *rp = json_string_value(json_object_get(c, "restartPolicy"));
        total += rp && !strcmp(rp, "Always");
    }
    json_array_foreach(json_object_get(st, "initContainerStatuses"), i, c)
    {
        const json_t *state = json_object_get(c, "state");
        const json_t *term = json_object_get(state, "terminated");
        const char *wait =
            json_string_value(json_object_get(json_object_get(state, "waiting"), "reason"));
        const char *rp = json_string_value(json_object_get(
            spec_container(spec, "initContainers", json_string_value(json_object_get(c, "name"))),
            "restartPolicy"));
        bool sidecar = rp && !strcmp(rp, "Always");
        count_restarts(c, &restarts, &last);
        if (sidecar)
            count_restarts(c, &sidecar_restarts, &sidecar_last);
        if (term && json_integer_value(json_object_get(term, "exitCode")) == 0)
            continue;
        if (sidecar && json_is_true(json_object_get(c, "started"))) {
            ready += json_is_true(json_object_get(c, "ready"));
            continue;
        }
        const char *tr = json_string_value(json_object_get(term, "reason"));
        if (term && tr && *tr)
            snprintf(reason, sizeof(reason), "Init:%s", tr);
        else if (term && json_integer_value(json_object_get(term, "signal")))
            snprintf(reason, sizeof(reason), "Init:Signal:%lld",
                     (long long)json_integer_value(json_object_get(term, "signal")));
        else if (term)
            snprintf(reason, sizeof(reason), "Init:ExitCode:%lld",
                     (long long)json_integer_value(json_object_get(term, "exitCode")));
        else if (wait && *wait && strcmp(wait, "PodInitializing"))
            snprintf(reason, sizeof(reason), "Init:%s", wait);
        else
            snprintf(reason, sizeof(reason), "Init:%zu/%zu", i, json_array_size(init_specs));
        initializing = true;
        break;
    }
    if (!initializing || has_condition(st, "Initialized", "True")) {
        const json_t *statuses = json_object_get(st, "containerStatuses");
        bool running = false;
        restarts = sidecar_restarts;
        last = sidecar_last;
        for (size_t k = json_array_size(statuses); k-- > 0;) {
            c = json_array_get(statuses, k);
            const json_t *state = json_object_get(c, "state");
            const json_t *term = json_object_get(state, "terminated");
            const char *wait =
                json_string_value(json_object_get(json_object_get(state, "waiting"), "reason"));
            const char *tr = json_string_value(json_object_get(term, "reason"));
            count_restarts(c, &restarts, &last);
            if (wait && *wait)
                snprintf(reason, sizeof(reason), "%s", wait);
            else if (term && tr && *tr)
                snprintf(reason, sizeof(reason), "%s", tr);
            else if (term && json_integer_value(json_object_get(term, "signal")))
                snprintf(reason, sizeof(reason), "Signal:%lld",
                         (long long)json_integer_value(json_object_get(term, "signal")));
            else if (term)
                snprintf(reason, sizeof(reason), "ExitCode:%lld",
                         (long long)json_integer_value(json_object_get(term, "exitCode")));
            else if (json_is_true(json_object_get(c, "ready")) && json_object_get(state, "running"))
                running = true, ready++;
        }
        if (!strcmp(reason, "Completed") && running)
            snprintf(reason, sizeof(reason), "%s",
                     has_condition(st, "Ready", "True") ? "Running" : "NotReady");
    }
    if (ts_meta_str(obj, "deletionTimestamp")) {
        const char *phase = str_or(json_string_value(json_object_get(st, "phase")), "");
        const char *sr = json_string_value(json_object_get(st, "reason"));
        if (sr && !strcmp(sr, "NodeLost"))
            snprintf(reason, sizeof(reason), "Unknown");
        else if (strcmp(phase, "Succeeded") && strcmp(phase, "Failed"))
            snprintf(reason, sizeof(reason), "Terminating");
    }

    snprintf(buf, sizeof(buf), "%ld/%ld", ready, total);
    json_array_append_new(cells, json_string(buf));
    json_array_append_new(cells, json_string(reason));
    if (restarts && last) {
        char ago[32];
        ts_human_duration((long long)(now - last), ago);
        snprintf(buf, sizeof(buf), "%ld (%s ago)", restarts, ago);
    } else {
        snprintf(buf, sizeof(buf), "%ld", restarts);
    }
    json_array_append_new(cells, json_string(buf));
    json_array_append_new(cells, json_string(age));
    json_array_append_new(
        cells, json_string(str_or(json_string_value(json_object_get(st, "podIP")), "<none>")));
    json_array_append_new(
        cells, json_string(str_or(json_string_value(json_object_get(spec, "nodeName")), "<none>")));
    json_array_append_new(
        cells,
        json_string(str_or(json_string_value(json_object_get(st, "nominatedNodeName")), "<none>")));
    const json_t *gates = json_object_get(spec, "readinessGates");
    if (json_array_size(gates)) {
        size_t met = 0;
        json_array_foreach(gates, i, c)
        {
            const char *type = json_string_value(json_object_get(c, "conditionType"));
            met += has_condition(st, str_or(type, ""), "True");
        }
        snprintf(buf, sizeof(buf), "%zu/%zu", met, json_array_size(gates));
        json_array_append_new(cells, json_string(buf));
    } else {
        json_array_append_new(cells, json_string("<none>"));
    }
}

int ts_table_add_row(json_t *table, ts_res res, const json_t *obj, ts_include inc, time_t now)
{
    json_t *row = json_object(), *cells = json_array();
    const json_t *meta = json_object_get(obj, "metadata");
    const json_t *spec = json_object_get(obj, "spec");
    char age[32] = "<unknown>";
    time_t created;

    if (!row || !cells) {
        json_decref(row);
        json_decref(cells);
        return -1;
    }
    if (ts_parse_time(str_or(ts_meta_str(obj, "creationTimestamp"), ""), &created) == 0)
        ts_human_duration((long long)(now - created), age);

    json_array_append_new(cells, json_string(str_or(ts_meta_str(obj, "name"), "")));
    if (res == TS_LEASE) {
        json_array_append_new(
            cells,
            json_string(str_or(json_string_value(json_object_get(spec, "holderIdentity")), "")));
        json_array_append_new(cells, json_string(age));
    } else if (res == TS_LC) {
        static const char *const cols[] = {"leaseName", "binaryVersion", "emulationVersion"};
        for (size_t i = 0; i < 3; i++)
            json_array_append_new(
                cells, json_string(str_or(json_string_value(json_object_get(spec, cols[i])), "")));
        json_array_append_new(cells, json_string(age));
    } else if (res == TS_NS) {
        json_array_append_new(
            cells,
            json_string(str_or(
                json_string_value(json_object_get(json_object_get(obj, "status"), "phase")), "")));
        json_array_append_new(cells, json_string(age));
    } else {
        pod_cells(cells, obj, age, now);
    }
    json_object_set_new(row, "cells", cells);

    if (inc == TS_INCLUDE_OBJECT) {
        json_object_set(row, "object", (json_t *)obj);
    } else if (inc == TS_INCLUDE_METADATA) {
        json_t *pom = json_object();
        json_object_set_new(pom, "kind", json_string("PartialObjectMetadata"));
        json_object_set_new(pom, "apiVersion", json_string("meta.k8s.io/v1"));
        json_object_set(pom, "metadata", (json_t *)meta);
        json_object_set_new(row, "object", pom);
    }
    return json_array_append_new(json_object_get(table, "rows"), row);
}

/* ---- managedFields ------------------------------------------------------ */

/*
 * A field set is a JSON object whose keys are field paths - FieldsV1 path
 * elements ("f:spec", "k:{\"name\":\"c\"}", ".") joined by PATH_SEP - and
 * whose values are what the object holds there (true for "." entries, the
 * map itself). That is enough for structured-merge-diff's Update rules on
 * these simple types: leaves and maps ("." + one entry per key), keyed
 * lists of objects with a "name", everything else a struct.
 */
#define PATH_SEP "\x01"

static bool is_map_field(const char *key)
{
    static const char *const maps[] = {
        "labels", "annotations", "nodeSelector", "requests", "limits", "allocatedResources", NULL};
    for (size_t i = 0; maps[i]; i++)
        if (!strcmp(key, maps[i]))
            return true;
    return false;
}

/*
 * The key of a list's items as structured-merge-diff sees the list (its
 * x-kubernetes-list-map-keys), or NULL for an atomic list, which is one
 * field. Lists of objects with a "name" not named here are keyed by it
 * (containers, volumes, ...).
 */
static const char *list_key(const char *key, const json_t *list)
{
    static const char *const atomic[] = {"containerStatuses", "initContainerStatuses",
                                         "ephemeralContainerStatuses", "hostIPs", NULL};
    for (size_t i = 0; atomic[i]; i++)
        if (!strcmp(key, atomic[i]))
            return NULL;
    const char *k = !strcmp(key, "conditions")     ? "type"
                    : !strcmp(key, "podIPs")       ? "ip"
                    : !strcmp(key, "volumeMounts") ? "mountPath"
                                                   : "name";
    size_t i;
    json_t *item;
    if (!json_array_size(list))
        return NULL;
    json_array_foreach(list, i, item)
    {
        if (!json_is_string(json_object_get(item, k)))
            return NULL;
    }
    return k;
}

static void fs_add(json_t *set, const char *prefix, const char *elem, json_t *value)
{
    ts_buf p = {0};
    ts_buf_printf(&p, "%s%s%s", prefix, *prefix ? PATH_SEP : "", elem);
    if (p.data)
        json_object_set_new(set, p.data, value);
    ts_buf_free(&p);
}

static void fs_struct(json_t *set, const char *prefix, const json_t *obj);

static void fs_value(json_t *set, const char *path, const char *key, const json_t *v)
{
    if (json_is_object(v) && is_map_field(key)) {
        fs_add(set, path, ".", json_true());
        const char *k;
        json_t *e;
        json_object_foreach((json_t *)v, k, e)
        {
            ts_buf el = {0};
            ts_buf_printf(&el, "f:%s", k);
            fs_add(set, path, el.data, json_incref(e));
            ts_buf_free(&el);
        }
    } else if (json_is_object(v)) {
        fs_struct(set, path, v);
    } else if (json_is_array(v) && list_key(key, v)) {
        const char *lk = list_key(key, v);
        size_t i;
        json_t *item;
        /* The list itself is a field too, unless it is required (no omitempty): containers. */
        if (strcmp(key, "containers"))
            fs_add(set, path, ".", json_true());
        json_array_foreach(v, i, item)
        {
            json_t *kj = json_pack("{s:O}", lk, json_object_get(item, lk));
            char *ks = json_dumps(kj, JSON_COMPACT);
            ts_buf el = {0}, ip = {0};
            ts_buf_printf(&el, "k:%s", ks ? ks : "{}");
            ts_buf_printf(&ip, "%s%s%s", path, PATH_SEP, el.data);
            fs_add(set, ip.data, ".", json_true());
            fs_struct(set, ip.data, item);
            free(ks);
            json_decref(kj);
            ts_buf_free(&el);
            ts_buf_free(&ip);
        }
    } else {
        json_object_set_new(set, path, json_incref((json_t *)v));
    }
}

static void fs_struct(json_t *set, const char *prefix, const json_t *obj)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)obj, k, v)
    {
        ts_buf p = {0};
        ts_buf_printf(&p, "%s%sf:%s", prefix, *prefix ? PATH_SEP : "", k);
        if (p.data)
            fs_value(set, p.data, k, v);
        ts_buf_free(&p);
    }
}

/*
 * The fields a manager can own in obj through the main resource (metadata
 * and spec) or the status subresource (metadata and status); system
 * metadata excluded, and the Namespace's spec and status, which are the
 * strategy's.
 */
static json_t *fieldset_of(ts_res res, const json_t *obj, const char *subresource)
{
    json_t *set = json_object();
    const json_t *meta = json_object_get(obj, "metadata");
    if (!obj)
        return set;
    static const char *const meta_fields[] = {"generateName", "labels", "annotations"};
    for (size_t i = 0; i < 3; i++) {
        json_t *v = json_object_get(meta, meta_fields[i]);
        if (v) {
            ts_buf p = {0};
            ts_buf_printf(&p, "f:metadata" PATH_SEP "f:%s", meta_fields[i]);
            fs_value(set, p.data, meta_fields[i], v);
            ts_buf_free(&p);
        }
    }
    if (subresource)
        fs_value(set, "f:status", "status", json_object_get(obj, "status"));
    else if (res != TS_NS)
        fs_value(set, "f:spec", "spec", json_object_get(obj, "spec"));
    return set;
}

/* FieldsV1 tree -> set of paths (values unknown: true). */
static void fs_from_tree(json_t *set, const char *prefix, const json_t *tree)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)tree, k, v)
    {
        ts_buf p = {0};
        ts_buf_printf(&p, "%s%s%s", prefix, *prefix ? PATH_SEP : "", k);
        if (p.data) {
            if (json_is_object(v) && json_object_size(v))
                fs_from_tree(set, p.data, v);
            else
                json_object_set_new(set, p.data, json_true());
        }
        ts_buf_free(&p);
    }
}

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Set of paths -> FieldsV1 tree, keys in the apiserver's (sorted) order. */
static json_t *fs_to_tree(const json_t *set)
{
    json_t *tree = json_object();
    size_t n = json_object_size(set), i = 0;
    const char **keys = calloc(n ? n : 1, sizeof(*keys));
    const char *k;
    json_t *v;
    if (!keys)
        return tree;
    json_object_foreach((json_t *)set, k, v) keys[i++] = k;
    qsort(keys, n, sizeof(*keys), str_cmp);
    for (i = 0; i < n; i++) {
        char *path = strdup(keys[i]);
        json_t *node = tree;
        for (char *save = NULL, *el = path ? strtok_r(path, PATH_SEP, &save) : NULL; el;
             el = strtok_r(NULL, PATH_SEP, &save)) {
            json_t *child = json_object_get(node, el);
            if (!child)
                json_object_set_new(node, el, child = json_object());
            node = child;
        }
        free(path);
    }
    free(keys);
    return tree;
}

static int entry_cmp(const void *a, const void *b)
{
    const json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
    static const char *const keys[] = {"operation", "time", "manager", "apiVersion", "subresource"};
    for (size_t i = 0; i < 5; i++) {
        const char *p = json_string_value(json_object_get(x, keys[i]));
        const char *q = json_string_value(json_object_get(y, keys[i]));
        int c = strcmp(p ? p : "", q ? q : "");
        if (c)
            return c;
    }
    return 0;
}

int ts_managed_fields_update(ts_res res, json_t *obj, const json_t *old, const char *manager,
                             const char *subresource, time_t now)
{
    json_t *before = fieldset_of(res, old, subresource),
           *after = fieldset_of(res, obj, subresource);
    json_t *changed = json_object(), *removed = json_object();
    json_t *olds = json_object_get(json_object_get(old, "metadata"), "managedFields");
    json_t *entries = json_array();
    json_t *mine = NULL;
    const char *k;
    json_t *v;
    int rc = -1;

    if (!before || !after || !changed || !removed || !entries)
        goto out;
    json_object_foreach(after, k, v)
    {
        json_t *was = json_object_get(before, k);
        if (!was || !json_equal(was, v))
            json_object_set_new(changed, k, json_true());
    }
    json_object_foreach(before, k, v)
    {
        if (!json_object_get(after, k))
            json_object_set_new(removed, k, json_true());
    }
    /* Every manager loses what changed or went; this one gains what changed. */
    size_t i;
    json_t *e;
    json_array_foreach(olds, i, e)
    {
        json_t *set = json_object();
        fs_from_tree(set, "", json_object_get(e, "fieldsV1"));
        size_t n0 = json_object_size(set);
        bool is_mine =
            !strcmp(str_or(json_string_value(json_object_get(e, "manager")), ""), manager) &&
            !strcmp(str_or(json_string_value(json_object_get(e, "operation")), ""), "Update") &&
            !strcmp(str_or(json_string_value(json_object_get(e, "subresource")), ""),
                    subresource ? subresource : "");
        void *tmp;
        json_object_foreach_safe(set, tmp, k, v)
        {
            if (json_object_get(removed, k) || (!is_mine && json_object_get(changed, k)))
                json_object_del(set, k);
        }
        if (is_mine) {
            mine = json_deep_copy(e);
            json_object_update(set, changed);
            /* The time moves when this write took any field. */
            if (json_object_size(changed))
                json_object_set_new(mine, "time", json_null());
            json_object_set_new(mine, "fieldsV1", set);
            continue;
        }
        if (json_object_size(set)) {
            json_t *ne = json_deep_copy(e);
            if (json_object_size(set) != n0)
                json_object_set_new(ne, "fieldsV1", fs_to_tree(set));
            json_array_append_new(entries, ne);
        }
        json_decref(set);
    }
    if (!mine && json_object_size(changed)) {
        mine = json_pack("{s:s, s:s, s:s, s:n, s:s, s:O}", "manager", manager, "operation",
                         "Update", "apiVersion", ts_resdefs[res].api_version, "time", "fieldsType",
                         "FieldsV1", "fieldsV1", changed);
        if (mine && subresource)
            json_object_set_new(mine, "subresource", json_string(subresource));
    }
    if (mine) {
        json_t *set = json_object_get(mine, "fieldsV1");
        /* `set` is a path set here (or `changed`): back to a tree. */
        json_t *tree = fs_to_tree(set);
        if (json_object_size(tree)) {
            char ts[32];
            if (json_is_null(json_object_get(mine, "time"))) {
                ts_format_time(now, ts);
                json_object_set_new(mine, "time", json_string(ts));
                json_object_set_new(mine, "apiVersion", json_string(ts_resdefs[res].api_version));
            }
            json_object_set_new(mine, "fieldsV1", tree);
            json_array_append(entries, mine);
        } else {
            json_decref(tree);
        }
        json_decref(mine);
    }
    size_t n = json_array_size(entries);
    json_t **sorted = calloc(n ? n : 1, sizeof(*sorted));
    if (!sorted)
        goto out;
    for (i = 0; i < n; i++)
        sorted[i] = json_incref(json_array_get(entries, i));
    qsort(sorted, n, sizeof(*sorted), entry_cmp);
    json_array_clear(entries);
    for (i = 0; i < n; i++)
        json_array_append_new(entries, sorted[i]);
    free(sorted);
    json_t *meta = json_object_get(obj, "metadata");
    if (n)
        json_object_set(meta, "managedFields", entries);
    else
        json_object_del(meta, "managedFields");
    rc = 0;
out:
    json_decref(before);
    json_decref(after);
    json_decref(changed);
    json_decref(removed);
    json_decref(entries);
    return rc;
}

json_t *ts_namespace_new(const char *name, const char *manager, time_t now)
{
    char uid[37], created[32];
    unsigned code;
    json_t *status = NULL;
    ts_uuid4(uid);
    ts_format_time(now, created);
    ts_sysmeta sys = {"", name, uid, created, NULL};
    json_t *in = json_pack("{s:{s:s}}", "metadata", "name", name);
    json_t *ns = in ? ts_object_build(TS_NS, in, &sys, NULL, &code, &status) : NULL;
    json_decref(in);
    json_decref(status);
    if (ns && ts_managed_fields_update(TS_NS, ns, NULL, manager, NULL, now) < 0) {
        json_decref(ns);
        ns = NULL;
    }
    return ns;
}
