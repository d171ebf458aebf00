/*
 * api.h - the handlers' side of a request: what the dispatch layer hands a
 * handler (ts_request) and what the handler answers (ts_response), and the
 * Kubernetes REST API (api.c).
 *
 * Handlers (api.c, control.c) run with the server lock held. They see the
 * request's connection only through conn.h (parameters, headers, and a
 * stream to park for a watch); they know nothing of the transport or its
 * protocols, and nothing of the dispatch layer that calls them.
 */
#ifndef TS_API_H
#define TS_API_H

#include "conn.h"
#include "state.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* Access to one request for the handlers. */
typedef struct ts_request {
    ts_conn *conn;
    const char *method;
    const char *path;
    const char *body;
    size_t body_len;
    const ts_client *client;
} ts_request;

const char *ts_request_query(const ts_request *rq, const char *key);
const char *ts_request_header(const ts_request *rq, const char *key);

/* What a handler answers. */
typedef struct ts_response {
    unsigned code;
    json_t *body;         /* JSON answer (object or Status) */
    const char *text;     /* or a static text/plain answer */
    ts_watch *stream;     /* or a watch stream (watch.h) */
    unsigned retry_after; /* adds Retry-After when > 0 */
    char after;           /* main-thread command after completion, or 0 */
} ts_response;

/* The Kubernetes API (lock held). */
void ts_api_handle(ts_server *srv, const ts_request *rq, ts_response *rs);
/* The Kubernetes verb for stats and fault scopes ("get", "watch", ...). */
const char *ts_api_verb(const char *method, const char *path, bool watch);

#endif
