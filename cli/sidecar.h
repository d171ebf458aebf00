/* `elect --http ADDR:PORT`: a small HTTP server on a thread of its own
 * (libmicrohttpd) for probes, service discovery and metrics:
 *   /healthz  200 "ok"; 500 while leader if no renew succeeded for
 *             lease_duration + request timeout (client-go's HealthzAdaptor)
 *   /readyz   as /healthz; with handoff also 503 until this candidate is
 *             known to a leader choosing a successor (its object written)
 *             and between terms (not a candidate then)
 *   /leader   JSON: lease, backend, identity, holder, epoch, is_leader,
 *             renew_deadline_ms_left, coordinated
 *   /         {"name":"<holder>"} like the legacy leader-elector sidecar
 *   /metrics  Prometheus text: client-go's leader_election_* and ours, and
 *             k8slease_election_info with the backend
 * It reads a cli_view that the main thread keeps up to date. */
#ifndef K8SLEASE_CLI_SIDECAR_H
#define K8SLEASE_CLI_SIDECAR_H

#include <pthread.h>
#include <stdint.h>
#include <sys/socket.h>

#include "cli.h"

/* What the sidecar serves. Constant fields are set before it starts; the
 * others change under mu, from the main thread. */
typedef struct cli_view {
    pthread_mutex_t mu;
    char lease[CLI_LEASE_MAX]; /* "NS/NAME", or the etcd election name */
    char name[CLI_NAME_MAX];   /* NAME: the name label of the metrics */
    const char *backend;       /* "k8s" or "etcd": the backend label */
    int coordinated;           /* elect --coordinated */
    int handoff;               /* elect's planned handoff is on */
    char identity[CLI_IDENTITY_MAX];
    int64_t lease_duration_ms, renew_deadline_ms;

    k8slease_elector *elector;   /* the current term's, NULL between terms */
    k8slease_elector_stats done; /* counters of the electors already freed */
    int leading;                 /* between on_started and on_stopped */
    char holder[CLI_IDENTITY_MAX];
    int64_t epoch; /* of the holder; -1 before anything was observed */
} cli_view;

void cli_view_init(cli_view *v);
void cli_view_fini(cli_view *v);
/* Main thread: a new term's elector / the end of a term. retire adds the
 * elector's counters to done; call it once the elector is stopped and
 * before freeing it. */
void cli_view_set_elector(cli_view *v, k8slease_elector *e);
void cli_view_retire(cli_view *v);
void cli_view_set_leading(cli_view *v, int leading);
void cli_view_set_holder(cli_view *v, const char *identity, int64_t epoch);

/* "HOST:PORT" with a numeric IPv4 address or a bracketed IPv6 one, port
 * 0-65535 (0: any free port). 0, or -1 when malformed. */
int cli_sidecar_parse_addr(const char *s, struct sockaddr_storage *addr, socklen_t *len);

typedef struct cli_sidecar cli_sidecar;

/* Bind to addr, print "<cmd>: http: listening on HOST:PORT" on stderr and
 * serve. 0, or -1 (message printed). */
int cli_sidecar_start(cli_sidecar **out, const struct sockaddr_storage *addr, socklen_t len,
                      cli_view *view);
/* Stop serving and free. Accepts NULL. */
void cli_sidecar_stop(cli_sidecar *s);

#endif
