/*
 * faults.h - fault-injection rules and the counters behind /testserver/v1/stats.
 *
 * Three families of rules:
 *   per-request  error, reset, latency, respond, goaway: each matching request
 *                rolls the rule's probability; a hit consumes one of its
 *                count (0 = unlimited) and is counted;
 *   windows      hang, freeze_watch: while the rule lives (duration_ms, or
 *                until deleted), every matching request is held / every
 *                matching watch stream delivers nothing;
 *   connections  stall: a matching request rolls the probability like a
 *                per-request kind, and a hit stalls the request's whole
 *                connection (nothing read or written) for as long as the
 *                rule lives; count limits the connections stalled, not the
 *                rule's life.
 * A rule lives until its duration elapses, its count is used up (not a
 * stall rule: see above), or it is deleted. Rules are scoped by HTTP method,
 * Kubernetes verb, path prefix, User-Agent substring and bearer token; an
 * empty scope matches everything.
 *
 * Not thread-safe: called with the server lock held.
 */
#ifndef TS_FAULTS_H
#define TS_FAULTS_H

#include "util.h"

#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

typedef enum ts_fault_kind {
    TS_F_ERROR,        /* answer with an error Status (500, 503, 429 + Retry-After...) */
    TS_F_RESET,        /* close the connection without an answer (TCP RST) */
    TS_F_LATENCY,      /* delay the answer by delay_ms */
    TS_F_HANG,         /* hold matching requests until the rule ends */
    TS_F_FREEZE_WATCH, /* matching watch streams send nothing until the rule ends */
    TS_F_RESPOND,      /* answer with a canned response (body, redirect, trickle, huge) */
    TS_F_STALL,        /* the request's connection carries nothing more while the rule lives */
    TS_F_GOAWAY,       /* refuse the request with an HTTP/2 GOAWAY below its stream (h1: reset) */
    TS_F_NRULEKINDS,
    /* Actions from the control API; counted, never stored as rules. */
    TS_F_CLOSE_WATCH = TS_F_NRULEKINDS, /* watch streams ended on request */
    TS_F_COMPACT,                       /* history compactions */
    TS_F_ROTATE_TOKEN,                  /* bearer token rotations */
    TS_F_RESTART,                       /* restarts */
    TS_F_NKINDS
} ts_fault_kind;

const char *ts_fault_kind_name(ts_fault_kind k);

/* What a request or watch looks like to a rule's scope. */
typedef struct ts_client {
    const char *method;     /* "GET" */
    const char *verb;       /* "get", "list", "watch", "create", ... */
    const char *path;       /* URL path */
    const char *user_agent; /* may be NULL */
    const char *token;      /* bearer token sent, may be NULL */
} ts_client;

typedef struct ts_match {
    char *method, *verb, *path_prefix, *user_agent, *token;
} ts_match;

/* Parses {"method":..,"verb":..,"path_prefix":..,"user_agent":..,"token":..}. */
int ts_match_parse(const json_t *j, ts_match *m, char **err);
bool ts_match_client(const ts_match *m, const ts_client *c);
void ts_match_free(ts_match *m);

/*
 * The answer of a respond rule, shared (reference-counted) by the rule and
 * the requests and responses it answers, which outlive it.
 */
typedef struct ts_canned {
    _Atomic unsigned refs;
    unsigned status;     /* HTTP status, 200-599 */
    char *content_type;  /* NULL: no Content-Type header */
    char *location;      /* NULL: no Location header */
    char *body;          /* body_len bytes (may hold NULs) */
    size_t body_len;     /* the body comes first ... */
    uint64_t size;       /* ... padded with spaces up to size bytes (>= body_len) */
    int64_t interval_ms; /* 0: all at once; else one byte per interval */
} ts_canned;

ts_canned *ts_canned_ref(ts_canned *c);
void ts_canned_unref(ts_canned *c); /* accepts NULL */

typedef struct ts_rule {
    struct ts_rule *next;
    uint64_t id;
    ts_fault_kind kind;
    unsigned status;      /* error: HTTP status */
    unsigned retry_after; /* error 429/503: Retry-After seconds */
    int64_t delay_ms;     /* latency */
    uint64_t count;       /* per-request kinds and stall: hits allowed, 0 = unlimited */
    uint64_t hits;
    double probability;             /* per-request kinds and stall: chance that a match hits */
    int64_t created_ms, expires_ms; /* expires_ms INT64_MAX: until deleted */
    ts_canned *canned;              /* respond */
    ts_match match;
} ts_rule;

typedef struct ts_faults {
    ts_rule *rules; /* in creation order */
    uint64_t next_id;
    ts_rng rng;
    uint64_t counters[TS_F_NKINDS];
} ts_faults;

/* What happens to one request, decided once when it arrives. */
typedef struct ts_decision {
    int64_t latency_ms;
    bool reset;
    bool goaway;     /* refuse it unprocessed: GOAWAY over h2, a reset over HTTP/1.1 */
    unsigned status; /* 0: no injected error */
    unsigned retry_after;
    ts_canned *canned; /* a respond rule's answer (a reference the request owns), or NULL */
    uint64_t stall;    /* the stall rule that stalls the request's connection, or 0 */
} ts_decision;

void ts_faults_init(ts_faults *f, uint64_t seed);
void ts_faults_free(ts_faults *f);

/*
 * Parses a rule from its JSON form (see README.md), adds it and returns it.
 * On a bad body returns NULL with a malloc'ed message in *err.
 */
ts_rule *ts_faults_add(ts_faults *f, const json_t *body, int64_t now, char **err);
bool ts_faults_remove(ts_faults *f, uint64_t id);
void ts_faults_clear(ts_faults *f);
/* Drops rules whose time is up; true if a window rule ended. */
bool ts_faults_expire(ts_faults *f, int64_t now);
json_t *ts_rule_json(const ts_rule *r, int64_t now);
json_t *ts_faults_json(const ts_faults *f, int64_t now);

/* Rolls the per-request rules for c and counts the hits. d->canned, if set,
 * is a reference for the caller to drop with ts_canned_unref. */
void ts_faults_decide(ts_faults *f, const ts_client *c, int64_t now, ts_decision *d);
/*
 * End of the hang windows over c (INT64_MAX: until deleted), or 0 if none.
 * count: this is a new request being caught, count it (once).
 */
int64_t ts_faults_hang_until(ts_faults *f, const ts_client *c, int64_t now, bool count);
/* Same for freeze_watch windows over a watch stream. */
int64_t ts_faults_freeze_until(ts_faults *f, const ts_client *c, int64_t now, bool count);
/*
 * End of stall rule id (INT64_MAX: until deleted), or 0 if it is gone or
 * its time is up: the connections it stalled resume then.
 */
int64_t ts_faults_stall_until(const ts_faults *f, uint64_t id, int64_t now);
/* The earliest expiry among the rules (INT64_MAX if none): the timer's cue. */
int64_t ts_faults_next_expiry(const ts_faults *f);

void ts_faults_count(ts_faults *f, ts_fault_kind k, uint64_t n);

#endif
