/*
 * server.h - starting and stopping the server (server.c): the glue that
 * builds the layers and wires them together, for main.c.
 *
 *   transport  transport.c: socket, TLS, I/O threads
 *     -> protocols  h2.c (HTTP/2), h1.c (HTTP/1.1)
 *       -> dispatch   dispatch.c: one request's life cycle
 *         -> handlers   api.c, control.c, watch.c, cle.c
 *           -> store      store.c
 *             -> objects    objects.c
 *
 * server.c is the only file that knows every layer: it registers the
 * callbacks through which a lower layer reaches an upper one (the store's
 * change hook, the scheduler's tick, the transport hooks in state.h, the
 * transport's main-thread notification). The transport itself gives h2.c
 * and h1.c their connections behind ops (h2.h, h1.h).
 */
#ifndef TS_SERVER_H
#define TS_SERVER_H

#include "state.h"

int ts_server_init(ts_server *srv);
/*
 * Binds (cfg address/port, or the port of a previous run) and starts the
 * transport. The first time it also sets server_url and writes the
 * kubeconfigs.
 */
int ts_server_start(ts_server *srv);
/* Ends streams, resumes parked connections and stops the transport (for exit/restart). */
void ts_server_stop(ts_server *srv);
void ts_server_free(ts_server *srv);
/* Wakes the main thread with a command byte ('T' or 'R'). */
void ts_server_notify_main(ts_server *srv, char cmd);

#endif
