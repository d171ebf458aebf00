/*
 * faults.c - fault rules: parsing, matching, decisions, counters.
 */
#include "faults.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[TS_F_NKINDS] = {
    [TS_F_ERROR] = "error",
    [TS_F_RESET] = "reset",
    [TS_F_LATENCY] = "latency",
    [TS_F_HANG] = "hang",
    [TS_F_FREEZE_WATCH] = "freeze_watch",
    [TS_F_RESPOND] = "respond",
    [TS_F_STALL] = "stall",
    [TS_F_GOAWAY] = "goaway",
    [TS_F_CLOSE_WATCH] = "close_watch",
    [TS_F_COMPACT] = "compact",
    [TS_F_ROTATE_TOKEN] = "rotate_token",
    [TS_F_RESTART] = "restart",
};

const char *ts_fault_kind_name(ts_fault_kind k)
{
    return k < TS_F_NKINDS ? kind_names[k] : "unknown";
}

/* Kinds that act on single requests (probability, count, hits). */
static bool per_request(ts_fault_kind k)
{
    return k == TS_F_ERROR || k == TS_F_RESET || k == TS_F_LATENCY || k == TS_F_RESPOND ||
           k == TS_F_GOAWAY;
}

/* Kinds whose rules end with their window, not with their count. */
static bool windowed(ts_fault_kind k)
{
    return k == TS_F_HANG || k == TS_F_FREEZE_WATCH || k == TS_F_STALL;
}

ts_canned *ts_canned_ref(ts_canned *c)
{
    atomic_fetch_add(&c->refs, 1);
    return c;
}

void ts_canned_unref(ts_canned *c)
{
    if (!c || atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    free(c->content_type);
    free(c->location);
    free(c->body);
    free(c);
}

/* Sets *err to a malloc'ed message (NULL if out of memory); returns -1. */
__attribute__((format(printf, 2, 3))) static int fail(char **err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    *err = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (*err) {
        va_start(ap, fmt);
        vsnprintf(*err, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* ---- scopes ----------------------------------------------------------- */

int ts_match_parse(const json_t *j, ts_match *m, char **err)
{
    static const char *const keys[] = {"method", "verb", "path_prefix", "user_agent", "token"};
    char **fields[] = {&m->method, &m->verb, &m->path_prefix, &m->user_agent, &m->token};
    const char *k;
    json_t *v;

    memset(m, 0, sizeof(*m));
    *err = NULL;
    if (!j || json_is_null(j))
        return 0;
    if (!json_is_object(j))
        return fail(err, "match must be an object");
    json_object_foreach((json_t *)j, k, v)
    {
        size_t i;
        for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
            if (!strcmp(k, keys[i]))
                break;
        if (i == sizeof(keys) / sizeof(keys[0])) {
            ts_match_free(m);
            return fail(err, "unknown match field \"%s\"", k);
        }
        if (!json_is_string(v)) {
            ts_match_free(m);
            return fail(err, "match.%s must be a string", k);
        }
        if (!(*fields[i] = ts_strdup(json_string_value(v)))) {
            ts_match_free(m);
            return -1;
        }
    }
    return 0;
}

void ts_match_free(ts_match *m)
{
    free(m->method);
    free(m->verb);
    free(m->path_prefix);
    free(m->user_agent);
    free(m->token);
    memset(m, 0, sizeof(*m));
}

static bool str_eq(const char *want, const char *have)
{
    return !want || (have && !strcmp(want, have));
}

bool ts_match_client(const ts_match *m, const ts_client *c)
{
    if (!str_eq(m->method, c->method) || !str_eq(m->verb, c->verb) || !str_eq(m->token, c->token))
        return false;
    if (m->path_prefix && (!c->path || strncmp(c->path, m->path_prefix, strlen(m->path_prefix))))
        return false;
    if (m->user_agent && (!c->user_agent || !strstr(c->user_agent, m->user_agent)))
        return false;
    return true;
}

static json_t *match_json(const ts_match *m)
{
    json_t *j = json_object();
    if (m->method)
        json_object_set_new(j, "method", json_string(m->method));
    if (m->verb)
        json_object_set_new(j, "verb", json_string(m->verb));
    if (m->path_prefix)
        json_object_set_new(j, "path_prefix", json_string(m->path_prefix));
    if (m->user_agent)
        json_object_set_new(j, "user_agent", json_string(m->user_agent));
    if (m->token)
        json_object_set_new(j, "token", json_string(m->token));
    return j;
}

/* ---- rules ------------------------------------------------------------ */

void ts_faults_init(ts_faults *f, uint64_t seed)
{
    memset(f, 0, sizeof(*f));
    f->next_id = 1;
    ts_rng_seed(&f->rng, seed);
}

static void rule_free(ts_rule *r)
{
    ts_match_free(&r->match);
    ts_canned_unref(r->canned);
    free(r);
}

void ts_faults_clear(ts_faults *f)
{
    while (f->rules) {
        ts_rule *r = f->rules;
        f->rules = r->next;
        rule_free(r);
    }
}

void ts_faults_free(ts_faults *f)
{
    ts_faults_clear(f);
}

static int get_uint(const json_t *body, const char *key, uint64_t max, uint64_t *out, char **err)
{
    json_t *v = json_object_get(body, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || (uint64_t)json_integer_value(v) > max)
        return fail(err, "%s must be a non-negative integer in range", key);
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

ts_rule *ts_faults_add(ts_faults *f, const json_t *body, int64_t now, char **err)
{
    static const char *const known[] = {
        "kind",  "status", "retry_after",  "delay_ms", "count",    "probability", "duration_ms",
        "match", "seed",   "content_type", "body",     "location", "size",        "interval_ms"};
    ts_rule *r = NULL;
    ts_canned *canned = NULL;
    uint64_t status = 0, retry_after = UINT64_MAX, delay = 0, count = 0, duration = 0;
    uint64_t seed = 0, size = 0, interval = 0;
    const char *k;
    json_t *v;

    *err = NULL;
    if (!json_is_object(body)) {
        fail(err, "the body must be a JSON object");
        return NULL;
    }
    json_object_foreach((json_t *)body, k, v)
    {
        size_t i;
        for (i = 0; i < sizeof(known) / sizeof(known[0]); i++)
            if (!strcmp(k, known[i]))
                break;
        if (i == sizeof(known) / sizeof(known[0])) {
            fail(err, "unknown field \"%s\"", k);
            return NULL;
        }
    }
    const char *kind = json_string_value(json_object_get(body, "kind"));
    int kid = -1;
    for (int i = 0; kind && i < TS_F_NRULEKINDS; i++)
        if (!strcmp(kind, kind_names[i]))
            kid = i;
    if (kid < 0) {
        fail(err,
             "kind must be one of error, reset, latency, hang, freeze_watch, respond, stall, "
             "goaway (got %s)",
             kind ? kind : "nothing");
        return NULL;
    }
    if (get_uint(body, "status", 599, &status, err) < 0 ||
        get_uint(body, "size", 1024 * 1024 * 1024, &size, err) < 0 ||
        get_uint(body, "interval_ms", 3600000, &interval, err) < 0 ||
        get_uint(body, "retry_after", 86400, &retry_after, err) < 0 ||
        get_uint(body, "delay_ms", 3600000, &delay, err) < 0 ||
        get_uint(body, "count", UINT32_MAX, &count, err) < 0 ||
        get_uint(body, "duration_ms", 86400000, &duration, err) < 0 ||
        get_uint(body, "seed", INT64_MAX, &seed, err) < 0)
        return NULL;
    json_t *js = json_object_get(body, "status");
    if (!js || json_is_null(js))
        status = kid == TS_F_RESPOND ? 200 : 500;
    if (kid == TS_F_ERROR && status < 400) {
        fail(err, "status must be an HTTP error code (400-599)");
        return NULL;
    }
    if (kid == TS_F_RESPOND && status < 200) {
        fail(err, "status must be an HTTP status (200-599)");
        return NULL;
    }
    static const char *const strings[] = {"content_type", "body", "location"};
    for (size_t i = 0; i < sizeof(strings) / sizeof(strings[0]); i++) {
        json_t *sv = json_object_get(body, strings[i]);
        if (sv && !json_is_null(sv) && !json_is_string(sv)) {
            fail(err, "%s must be a string", strings[i]);
            return NULL;
        }
    }
    if (kid == TS_F_LATENCY && delay == 0) {
        fail(err, "a latency rule needs delay_ms > 0");
        return NULL;
    }
    double p = 1.0;
    json_t *jp = json_object_get(body, "probability");
    if (jp && !json_is_null(jp)) {
        if (!json_is_number(jp) || json_number_value(jp) <= 0 || json_number_value(jp) > 1) {
            fail(err, "probability must be a number in (0, 1]");
            return NULL;
        }
        p = json_number_value(jp);
    }

    if (kid == TS_F_RESPOND) {
        json_t *ct = json_object_get(body, "content_type");
        json_t *b = json_object_get(body, "body");
        /* No field: JSON, as the apiserver; null: no Content-Type at all. */
        const char *ctype = ct ? json_string_value(ct) : "application/json";
        const char *loc = json_string_value(json_object_get(body, "location"));
        size_t blen = json_is_string(b) ? json_string_length(b) : 0;
        if (!(canned = calloc(1, sizeof(*canned))))
            return NULL;
        atomic_init(&canned->refs, 1);
        canned->status = (unsigned)status;
        canned->content_type = ts_strdup(ctype);
        canned->location = ts_strdup(loc);
        canned->body = malloc(blen + 1);
        if (canned->body && blen)
            memcpy(canned->body, json_string_value(b), blen);
        canned->body_len = blen;
        canned->size = size > blen ? size : blen;
        canned->interval_ms = (int64_t)interval;
        if (!canned->body || (ctype && !canned->content_type) || (loc && !canned->location)) {
            ts_canned_unref(canned);
            return NULL;
        }
    }
    if (!(r = calloc(1, sizeof(*r)))) {
        ts_canned_unref(canned);
        return NULL;
    }
    if (ts_match_parse(json_object_get(body, "match"), &r->match, err) < 0) {
        ts_canned_unref(canned);
        free(r);
        return NULL;
    }
    r->canned = canned;
    r->id = f->next_id++;
    r->kind = (ts_fault_kind)kid;
    r->status = (unsigned)status;
    /* Clients need a Retry-After to back off on 429; default it to 1 s. */
    r->retry_after = retry_after != UINT64_MAX ? (unsigned)retry_after : (status == 429 ? 1 : 0);
    r->delay_ms = (int64_t)delay;
    r->count = count;
    r->probability = p;
    r->created_ms = now;
    r->expires_ms = duration ? now + (int64_t)duration : INT64_MAX;
    if (json_object_get(body, "seed"))
        ts_rng_seed(&f->rng, seed);

    ts_rule **pp = &f->rules;
    while (*pp)
        pp = &(*pp)->next;
    *pp = r;
    return r;
}

bool ts_faults_remove(ts_faults *f, uint64_t id)
{
    for (ts_rule **pp = &f->rules; *pp; pp = &(*pp)->next) {
        if ((*pp)->id == id) {
            ts_rule *r = *pp;
            *pp = r->next;
            rule_free(r);
            return true;
        }
    }
    return false;
}

bool ts_faults_expire(ts_faults *f, int64_t now)
{
    bool window_ended = false;
    ts_rule **pp = &f->rules;
    while (*pp) {
        ts_rule *r = *pp;
        if (r->expires_ms <= now) {
            window_ended |= windowed(r->kind);
            *pp = r->next;
            rule_free(r);
        } else {
            pp = &r->next;
        }
    }
    return window_ended;
}

int64_t ts_faults_next_expiry(const ts_faults *f)
{
    int64_t next = INT64_MAX;
    for (const ts_rule *r = f->rules; r; r = r->next)
        if (r->expires_ms < next)
            next = r->expires_ms;
    return next;
}

json_t *ts_rule_json(const ts_rule *r, int64_t now)
{
    json_t *j = json_object();
    json_object_set_new(j, "id", json_integer((json_int_t)r->id));
    json_object_set_new(j, "kind", json_string(kind_names[r->kind]));
    if (r->kind == TS_F_ERROR) {
        json_object_set_new(j, "status", json_integer(r->status));
        json_object_set_new(j, "retry_after", json_integer(r->retry_after));
    }
    if (r->kind == TS_F_LATENCY)
        json_object_set_new(j, "delay_ms", json_integer(r->delay_ms));
    if (r->kind == TS_F_RESPOND) {
        const ts_canned *c = r->canned;
        json_object_set_new(j, "status", json_integer(c->status));
        json_object_set_new(j, "content_type",
                            c->content_type ? json_string(c->content_type) : json_null());
        json_object_set_new(j, "body", json_stringn(c->body, c->body_len));
        json_object_set_new(j, "location", c->location ? json_string(c->location) : json_null());
        json_object_set_new(j, "size", json_integer((json_int_t)c->size));
        json_object_set_new(j, "interval_ms", json_integer(c->interval_ms));
    }
    if (per_request(r->kind) || r->kind == TS_F_STALL) {
        json_object_set_new(j, "count", json_integer((json_int_t)r->count));
        json_object_set_new(j, "probability", json_real(r->probability));
    }
    json_object_set_new(j, "hits", json_integer((json_int_t)r->hits));
    json_object_set_new(j, "remaining_ms",
                        r->expires_ms == INT64_MAX ? json_null()
                                                   : json_integer(r->expires_ms - now));
    json_object_set_new(j, "match", match_json(&r->match));
    return j;
}

json_t *ts_faults_json(const ts_faults *f, int64_t now)
{
    json_t *a = json_array();
    for (const ts_rule *r = f->rules; r; r = r->next)
        json_array_append_new(a, ts_rule_json(r, now));
    return a;
}

/* ---- decisions -------------------------------------------------------- */

void ts_faults_decide(ts_faults *f, const ts_client *c, int64_t now, ts_decision *d)
{
    memset(d, 0, sizeof(*d));
    ts_rule **pp = &f->rules;
    while (*pp) {
        ts_rule *r = *pp;
        bool hit = false;
        if (r->kind == TS_F_STALL && !d->stall && r->expires_ms > now &&
            (!r->count || r->hits < r->count) && ts_match_client(&r->match, c) &&
            (r->probability >= 1.0 || ts_rng_unit(&f->rng) < r->probability)) {
            /* Counted per connection; the rule stays while its connections are stalled. */
            r->hits++;
            f->counters[r->kind]++;
            d->stall = r->id;
        }
        if (per_request(r->kind) && r->expires_ms > now && ts_match_client(&r->match, c)) {
            /* An error, reset, canned answer or goaway excludes the others: the older rule wins. */
            bool applies =
                r->kind == TS_F_LATENCY || (!d->reset && !d->status && !d->canned && !d->goaway);
            if (applies && (r->probability >= 1.0 || ts_rng_unit(&f->rng) < r->probability)) {
                hit = true;
                r->hits++;
                f->counters[r->kind]++;
                if (r->kind == TS_F_LATENCY) {
                    d->latency_ms += r->delay_ms;
                } else if (r->kind == TS_F_RESET) {
                    d->reset = true;
                } else if (r->kind == TS_F_GOAWAY) {
                    d->goaway = true;
                } else if (r->kind == TS_F_RESPOND) {
                    d->canned = ts_canned_ref(r->canned);
                } else {
                    d->status = r->status;
                    d->retry_after = r->retry_after;
                }
            }
        }
        if (hit && r->count && r->hits >= r->count) {
            *pp = r->next;
            rule_free(r);
        } else {
            pp = &r->next;
        }
    }
}

/*
 * Latest end among the matching windows of this kind, 0 if none. With count,
 * the matching rules' hits and the kind's counter go up (once per subject).
 */
static int64_t window_until(ts_faults *f, ts_fault_kind kind, const ts_client *c, int64_t now,
                            bool count)
{
    int64_t until = 0;
    for (ts_rule *r = f->rules; r; r = r->next) {
        if (r->kind != kind || r->expires_ms <= now || !ts_match_client(&r->match, c))
            continue;
        if (count)
            r->hits++;
        if (r->expires_ms > until)
            until = r->expires_ms;
    }
    if (count && until)
        f->counters[kind]++;
    return until;
}

int64_t ts_faults_hang_until(ts_faults *f, const ts_client *c, int64_t now, bool count)
{
    return window_until(f, TS_F_HANG, c, now, count);
}

int64_t ts_faults_freeze_until(ts_faults *f, const ts_client *c, int64_t now, bool count)
{
    return window_until(f, TS_F_FREEZE_WATCH, c, now, count);
}

int64_t ts_faults_stall_until(const ts_faults *f, uint64_t id, int64_t now)
{
    for (const ts_rule *r = f->rules; r; r = r->next)
        if (r->id == id)
            return r->kind == TS_F_STALL && r->expires_ms > now ? r->expires_ms : 0;
    return 0;
}

void ts_faults_count(ts_faults *f, ts_fault_kind k, uint64_t n)
{
    if (k < TS_F_NKINDS)
        f->counters[k] += n;
}
