/*
 * control.h - the test-control API under /testserver/v1 (control.c), the
 * statistics it serves, and the end of stall rules.
 *
 * Lock held throughout. The transport is reached only through the hooks
 * server.c registers in state.h.
 */
#ifndef TS_CONTROL_H
#define TS_CONTROL_H

#include "api.h"

#include <jansson.h>
#include <stdint.h>

void ts_control_handle(ts_server *srv, const ts_request *rq, ts_response *rs);
json_t *ts_stats_json(ts_server *srv);

/*
 * Expires rules, and connections stalled by rules that are over resume
 * (call it whenever rules may have ended: expiry, delete, reset).
 */
void ts_stalls_sync(ts_server *srv, int64_t now);

#endif
