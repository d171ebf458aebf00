/*
 * k8slease: leader election for C and C++ over Kubernetes Lease objects.
 *
 * Conventions (see README and docs/):
 *  - Every fallible call returns 0 on success or a negative K8SLEASE_E* code.
 *    The message of the last synchronous failure on the calling thread is
 *    k8slease_error_last(); it names the thing that was wrong.
 *  - Objects returned through an out pointer belong to the caller and are
 *    freed with their _free function, which accepts NULL.
 *  - Inputs are copied on entry; the library never keeps caller pointers
 *    except user_data.
 *  - Each client owns one event-loop thread. Callbacks run on that thread,
 *    one at a time, must not block, and must not call the blocking functions
 *    of the same client (those return K8SLEASE_ESTATE there).
 *  - The library never prints: pass a log callback to see what it does.
 *    Tokens and keys never reach a log line.
 */
#ifndef K8SLEASE_H
#define K8SLEASE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(K8SLEASE_BUILDING) && defined(__GNUC__)
#define K8SLEASE_API __attribute__((visibility("default")))
#else
#define K8SLEASE_API
#endif

#define K8SLEASE_VERSION_MAJOR  0       /**< major version of this header */
#define K8SLEASE_VERSION_MINOR  1       /**< minor version of this header */
#define K8SLEASE_VERSION_PATCH  0       /**< patch version of this header */
#define K8SLEASE_VERSION_STRING "0.1.0" /**< "MAJOR.MINOR.PATCH" of this header */

/** Error codes. Every fallible function returns 0 or one of these. */
enum k8slease_error {
    K8SLEASE_OK = 0,
    K8SLEASE_EINVAL = -1,     /**< an argument broke a rule; the message names it */
    K8SLEASE_ECONFIG = -2,    /**< kubeconfig / in-cluster config unusable (file and field named) */
    K8SLEASE_ENOTFOUND = -3,  /**< the object does not exist (HTTP 404) */
    K8SLEASE_ECONFLICT = -4,  /**< optimistic-concurrency conflict or already exists (HTTP 409) */
    K8SLEASE_EAUTH = -5,      /**< credentials refused (HTTP 401/403) */
    K8SLEASE_ETLS = -6,       /**< TLS handshake or certificate verification failed (a
                                   connection closed during the handshake is ETRANSPORT) */
    K8SLEASE_ETIMEOUT = -7,   /**< a deadline passed */
    K8SLEASE_ETRANSPORT = -8, /**< connection refused, reset, DNS, ... */
    K8SLEASE_EPROTOCOL = -9,  /**< the server answered something we cannot use */
    K8SLEASE_ESTATE = -10,    /**< the call is not valid in the object's current state */
    K8SLEASE_ENOMEM = -11,    /**< out of memory */
    K8SLEASE_ESERVER = -12    /**< any other HTTP error status (5xx, 429, 422, ...) */
};

/** Message of the last failure of a k8slease call on this thread ("" if none).
 *  Valid until the next k8slease call on the same thread. Any thread. */
K8SLEASE_API const char *k8slease_error_last(void);

/** Static name of an error code, e.g. "K8SLEASE_ECONFLICT". Any thread. */
K8SLEASE_API const char *k8slease_strerror(int code);

/** Version string of the library, e.g. "0.1.0". */
K8SLEASE_API const char *k8slease_version(void);

/* ------------------------------------------------------------------------ */
/* Client                                                                   */
/* ------------------------------------------------------------------------ */

/** A connection to one API server: configuration, credentials and one
 *  event-loop thread. Created by k8slease_client_new(). */
typedef struct k8slease_client k8slease_client;

/** Levels of the log callback, most severe first. */
typedef enum k8slease_log_level {
    K8SLEASE_LOG_ERROR = 0,
    K8SLEASE_LOG_WARN = 1,
    K8SLEASE_LOG_INFO = 2,
    K8SLEASE_LOG_DEBUG = 3
} k8slease_log_level;

/** Log sink. Called from any library thread (mostly the loop thread). */
typedef void (*k8slease_log_cb)(k8slease_log_level level, const char *msg, void *user_data);

/** Where elections live; k8slease_client_options.backend. */
typedef enum k8slease_backend {
    /** Kubernetes Lease objects (coordination.k8s.io/v1), as client-go. */
    K8SLEASE_BACKEND_K8S = 0,
    /** etcd v3 over its JSON gateway (/v3/...), with the key scheme of
     *  etcd's clientv3/concurrency.Election, so `etcdctl elect` and Go
     *  programs take part in the same elections. See docs/etcd.md. */
    K8SLEASE_BACKEND_ETCD = 1
} k8slease_backend;

/** Current version of k8slease_client_options. Versions 1 (without the
 *  backend and etcd fields) and 2 (without crash_failover) are still
 *  accepted. */
#define K8SLEASE_CLIENT_OPTIONS_VERSION 3

/** Options of k8slease_client_new(); initialise with K8SLEASE_CLIENT_OPTIONS_INIT. */
typedef struct k8slease_client_options {
    unsigned int version; /**< K8SLEASE_CLIENT_OPTIONS_VERSION */
    /** Path of a kubeconfig file. NULL: in-cluster config when
     *  KUBERNETES_SERVICE_HOST is set, else $KUBECONFIG (colon-separated),
     *  else ~/.kube/config. Kubernetes backend only. */
    const char *kubeconfig;
    /** Context to use. NULL: the kubeconfig's current-context. Kubernetes
     *  backend only. */
    const char *context;
    k8slease_log_cb log_cb;       /**< NULL: no logging */
    void *log_user_data;          /**< passed to log_cb */
    k8slease_log_level log_level; /**< most verbose level passed to log_cb */
    /** Appended to "k8slease/VERSION" in the User-Agent header (e.g. the
     *  program and its identity), so audit logs and proxies can tell
     *  clients apart. NULL: nothing appended. */
    const char *user_agent;
    /* Version 2: */
    k8slease_backend backend; /**< K8SLEASE_BACKEND_K8S (default) or K8SLEASE_BACKEND_ETCD */
    /** etcd: comma-separated endpoint URLs, all http:// or all https://,
     *  e.g. "https://10.0.0.1:2379,https://10.0.0.2:2379". Requests go to
     *  one endpoint and move to the next one when it fails to answer
     *  (connection, TLS or timeout errors, "no leader"). Required with
     *  K8SLEASE_BACKEND_ETCD; must be NULL otherwise. */
    const char *etcd_endpoints;
    /** etcd: PEM file of the CA that signed the servers' certificates.
     *  NULL: the system trust store. */
    const char *etcd_ca_file;
    const char *etcd_cert_file; /**< etcd: PEM client certificate (with etcd_key_file) */
    const char *etcd_key_file;  /**< etcd: PEM private key of etcd_cert_file */
    /** etcd: user name for etcd authentication (/v3/auth/authenticate); the
     *  token it gives is renewed when etcd says it is invalid. NULL: none. */
    const char *etcd_username;
    const char *etcd_password; /**< etcd: password of etcd_username */
    /* Version 3: */
    /** Kubernetes: 1: k8slease_holder_get follows crash failover
     *  (docs/semantics.md, "Crash failover"): when the Lease carries a
     *  crash failover record of its current term, it also reads the Pod
     *  the record names (one more GET, only then), and a holder whose
     *  container instance the kubelet reported terminated is reported with
     *  ended = 1 and expired = 1, as a holder whose Lease expired. A Pod it
     *  cannot read is no evidence (ended 0). 0 (default): one GET of the
     *  Lease, ended always 0. */
    int crash_failover;
} k8slease_client_options;

/** Initialiser of k8slease_client_options with the defaults. */
#define K8SLEASE_CLIENT_OPTIONS_INIT                                                               \
    {                                                                                              \
        K8SLEASE_CLIENT_OPTIONS_VERSION, NULL, NULL, NULL, NULL, K8SLEASE_LOG_INFO, NULL,          \
            K8SLEASE_BACKEND_K8S, NULL, NULL, NULL, NULL, NULL, NULL, 0                            \
    }

/** Create a client: loads the configuration and starts the loop thread.
 *  opts may be NULL (defaults: Kubernetes backend). No network I/O happens
 *  here (with etcd, authentication happens with the first request).
 *  The API server's connection is the library's own HTTP/2 connection when
 *  the configuration allows, else libcurl's; the environment variable
 *  K8SLEASE_TRANSPORT=libcurl forces libcurl, and a value other than
 *  "native" or "libcurl" is K8SLEASE_ECONFIG (docs/configuration.md).
 *  Returns 0, K8SLEASE_EINVAL, K8SLEASE_ECONFIG, K8SLEASE_ENOMEM.
 *  Any thread. */
K8SLEASE_API int k8slease_client_new(k8slease_client **out, const k8slease_client_options *opts);

/** Stop the loop thread and free the client. Every elector and watch of the
 *  client must have been freed first. Accepts NULL. Not from a callback
 *  of the client: its loop thread cannot stop itself, so there it frees
 *  nothing: it logs an error, silences the client's log callback (nothing
 *  is logged through it any more) and sets k8slease_error_last()
 *  (K8SLEASE_ESTATE); the client stays valid, to be freed from another
 *  thread. Any other thread. */
K8SLEASE_API void k8slease_client_free(k8slease_client *client);

/** Namespace of the configuration (context namespace, in-cluster namespace
 *  file, else "default"; "" with etcd). Borrowed, valid for the client's
 *  life. */
K8SLEASE_API const char *k8slease_client_namespace(const k8slease_client *client);

/** Server URL the client talks to (with etcd: the first endpoint).
 *  Borrowed, valid for the client's life. */
K8SLEASE_API const char *k8slease_client_server(const k8slease_client *client);

/** The backend of a client. Any thread. */
K8SLEASE_API k8slease_backend k8slease_client_backend(const k8slease_client *client);

/* ------------------------------------------------------------------------ */
/* Elector                                                                  */
/* ------------------------------------------------------------------------ */

/** One campaign for one Lease (one term at most). Created by
 *  k8slease_elector_start().
 *
 *  With the etcd backend the election is etcd's: the candidate grants a
 *  lease of lease_duration (whole seconds, rounded up), keeps it alive every
 *  lease_duration / 3, and creates the key "NAME/<lease ID in hex>" with
 *  identity as its value; the oldest key under "NAME/" leads, and the epoch
 *  is its create revision (strictly increasing: a fencing token). */
typedef struct k8slease_elector k8slease_elector;

/** Called on the loop thread when this candidate becomes leader; epoch is
 *  the Lease's leaseTransitions written by the acquisition (etcd: the
 *  create revision of our key); a fencing token, strictly greater for every
 *  new term. */
typedef void (*k8slease_elector_started_cb)(int64_t epoch, void *user_data);
/** Called once when the election ends: after having led, or when it ends
 *  without having led (stop, fatal error). */
typedef void (*k8slease_elector_stopped_cb)(void *user_data);
/** Called on every change of the observed holder or of its epoch (a new
 *  term under the same identity is news to a follower that fences by
 *  epoch; client-go reports the holder only); identity is "" when the
 *  Lease has no holder. */
typedef void (*k8slease_elector_new_leader_cb)(const char *identity, int64_t epoch,
                                               void *user_data);

/** Current version of k8slease_elector_options. Versions 1 (without the
 *  coordinated fields) and 2 (without the crash failover fields) are still
 *  accepted. */
#define K8SLEASE_ELECTOR_OPTIONS_VERSION 4

/** The one strategy kube-apiserver's coordinated leader election controller
 *  implements: the candidate with the lowest emulation version leads (then
 *  the lowest binary version, then the oldest candidate). */
#define K8SLEASE_STRATEGY_OLDEST_EMULATION_VERSION "OldestEmulationVersion"

/** Options of k8slease_elector_start(); initialise with K8SLEASE_ELECTOR_OPTIONS_INIT. */
typedef struct k8slease_elector_options {
    unsigned int version; /**< K8SLEASE_ELECTOR_OPTIONS_VERSION */
    /** Lease namespace; NULL: the client's namespace. Must be NULL with etcd. */
    const char *ns;
    /** Lease name (DNS subdomain), required. etcd: the election name, the
     *  prefix of the candidates' keys (as `etcdctl elect NAME`): any bytes
     *  but NUL, at most 400. */
    const char *name;
    const char *identity; /**< our identity, e.g. "host:port"; required, non-empty */
    /** Timing, as client-go: lease_duration > renew_deadline > 1.2 * retry_period > 0.
     *  Defaults (0): 15000 / 10000 / 2000 ms. etcd: lease_duration is the
     *  lease TTL (at least 1 s; the leader deadline is the start of the last
     *  successful keepalive + TTL), renew_deadline bounds each request,
     *  retry_period is the pause after a failed request. */
    int64_t lease_duration_ms;
    int64_t renew_deadline_ms; /**< see lease_duration_ms */
    int64_t retry_period_ms;   /**< see lease_duration_ms */
    /** 1 (default): write holderIdentity "" when the election stops while
     *  leading (etcd: delete our key and revoke our lease, leading or not). */
    int release_on_cancel;
    k8slease_elector_started_cb on_started_leading; /**< may be NULL */
    k8slease_elector_stopped_cb on_stopped_leading; /**< may be NULL */
    k8slease_elector_new_leader_cb on_new_leader;   /**< may be NULL */
    void *user_data;                                /**< passed to the callbacks */
    /** Kubernetes only (ignored with etcd, which always watches).
     *  0 (default): followers watch the Lease and act on a release at once
     *  and on an expiry exactly when it is due (observed time + lease
     *  duration + up to retry_period/20 of jitter), polling only while the
     *  watch is not healthy (no event or bookmark within its expected
     *  interval). The watch is shared with every elector and holder watch of
     *  the same Lease in this client (one namespace-wide watch above 8
     *  Leases of one namespace). 1: no watch, poll every retry_period like
     *  client-go. See docs/semantics.md, "Watch mode". */
    int poll_only;
    /* Version 2: */
    /** Kubernetes only. 1: coordinated leader election (KEP-4355, client-go's
     *  Coordinated mode; docs/coordinated.md). The elector publishes a
     *  LeaseCandidate named identity (so identity must be a DNS subdomain
     *  name) with the versions and strategy below, answers the server's
     *  pings, and deletes it when the election ends. The kube-apiserver's
     *  controller picks the holder and writes it into the Lease; the
     *  elector never takes the Lease itself: it renews it only once the
     *  controller has named it holder (a new term: leaseTransitions + 1, the
     *  epoch, as always), and steps down at once when the controller names
     *  a preferredHolder (then releases it if release_on_cancel). The
     *  server must serve coordination.k8s.io/v1beta1 or v1alpha2
     *  LeaseCandidates (found by discovery); if it does not, the election
     *  ends with an error logged. 0 (default): client-go's classic
     *  election. */
    int coordinated;
    /** Coordinated: this binary's version, "MAJOR.MINOR.PATCH" (semver
     *  without a leading "v"); required. */
    const char *binary_version;
    /** Coordinated: the version whose behaviour this binary keeps
     *  (semver, at most binary_version). NULL: binary_version. */
    const char *emulation_version;
    /** Coordinated: the strategy this candidate asks for;
     *  NULL: K8SLEASE_STRATEGY_OLDEST_EMULATION_VERSION. Any other value
     *  must be "prefix/name" (a strategy some other controller applies). */
    const char *strategy;
    /* Version 3: */
    /** Kubernetes only, not with coordinated. 1: crash failover
     *  (docs/semantics.md, "Crash failover"). As leader the elector reads
     *  its own Pod and records in the Lease (annotation
     *  k8slease.io/holder-container) the containerID of the container
     *  instance this process runs in; as follower it watches the Pod such
     *  a record names and, when the kubelet reports exactly that instance
     *  terminated, takes the Lease at once (a new term: a greater epoch)
     *  instead of waiting for it to expire. Without such a report (no
     *  record, a Pod deleted, a node unreachable, no permission) the
     *  Lease's expiry rules, as without the option. Needs get on its own
     *  Pod, and get and watch on Pods in the holders' namespace
     *  (docs/operations.md, "RBAC"). 0 (default): off. */
    int crash_failover;
    /** Crash failover: the namespace of the Pod this process runs in
     *  (the Downward API's metadata.namespace); NULL: the Lease's. */
    const char *pod_namespace;
    /** Crash failover: the name of the Pod this process runs in (the
     *  Downward API's metadata.name); required. */
    const char *pod_name;
    /** Crash failover: the name of the container this process runs in;
     *  NULL: the Pod's only container (required when it has several). */
    const char *container;
    /* Version 4: */
    /** Kubernetes only. 1: make this candidate known to the leader as a
     *  successor for k8slease_elector_handoff() (docs/semantics.md,
     *  "Planned handoff"): a Lease object of its own,
     *  "<name>-c-<hash of identity>", owned by its Pod (pod_name and
     *  pod_namespace, when set) and deleted at the end; written at start,
     *  when a handoff makes it terminating and at the end: no writes while
     *  idle with a Pod, one every 30 minutes without. Needs create, update
     *  and delete on leases; without them a warning, and the candidate is
     *  chosen only by name. k8slease_elector_stats.candidate_known says
     *  when the object is written (a readiness check for rollouts). 0
     *  (default): unknown to the choice, still a candidate that can win. */
    int handoff_candidate;
    /** Handoff: this candidate's revision; the newest is preferred (the
     *  revisions' order: the earliest birth of their candidates). NULL: the
     *  Pod's label pod-template-hash, else controller-revision-hash (read
     *  with pod_name), else "". */
    const char *revision;
    /** Handoff: among the candidates of the newest revision, the highest
     *  priority is preferred. Default 0. */
    int priority;
} k8slease_elector_options;

/** Initialiser of k8slease_elector_options with the defaults. */
#define K8SLEASE_ELECTOR_OPTIONS_INIT                                                              \
    {                                                                                              \
        K8SLEASE_ELECTOR_OPTIONS_VERSION, NULL, NULL, NULL, 0, 0, 0, 1, NULL, NULL, NULL, NULL, 0, \
            0, NULL, NULL, NULL, 0, NULL, NULL, NULL, 0, NULL, 0                                   \
    }

/** Validate the options and start campaigning (asynchronously).
 *  An elector runs one term, as client-go: once leadership is lost (or the
 *  elector stopped) it is over; start a new one to campaign again.
 *  Returns 0, K8SLEASE_EINVAL (message names the rule), K8SLEASE_ENOMEM.
 *  Any thread. */
K8SLEASE_API int k8slease_elector_start(k8slease_elector **out, k8slease_client *client,
                                        const k8slease_elector_options *opts);

/** Block until elected, the election ends, or timeout_ms passes (<0: no limit).
 *  Returns 0 with *epoch set when leader (after on_started_leading has
 *  returned); K8SLEASE_ETIMEOUT; K8SLEASE_ESTATE
 *  when the election ended without (or after) leading (the message says
 *  why when it ended on its own, e.g. a coordinated election whose
 *  LeaseCandidate the server refused); K8SLEASE_ESTATE from
 *  a callback. Any thread but the loop thread. epoch may be NULL. */
K8SLEASE_API int k8slease_elector_wait_elected(k8slease_elector *elector, int64_t timeout_ms,
                                               int64_t *epoch);

/** 1 while leader and the monotonic clock is before the leader deadline
 *  (start of the last successful renew request + renew_deadline), else 0.
 *  Fencing-safe: a frozen process wakes up as not leader. Any thread. */
K8SLEASE_API int k8slease_elector_is_leader(const k8slease_elector *elector);

/** Leader deadline in CLOCK_MONOTONIC nanoseconds, 0 when not leader. Any thread. */
K8SLEASE_API int64_t k8slease_elector_leader_deadline(const k8slease_elector *elector);

/** Epoch of the current (or last) term, -1 if never elected. Any thread. */
K8SLEASE_API int64_t k8slease_elector_epoch(const k8slease_elector *elector);

/** Number of buckets of the renew latency histogram; bucket i counts renewals
 *  that took at most K8SLEASE_LATENCY_BOUNDS_MS[i] ms, the last one the rest. */
#define K8SLEASE_LATENCY_BUCKETS 12
/** Upper bounds (ms) of the renew latency buckets; -1: no bound. */
#define K8SLEASE_LATENCY_BOUNDS_MS                                                                 \
    {                                                                                              \
        1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, -1                                         \
    }

/** Version 2 added the fields from gets on, version 3 candidate_known;
 *  k8slease_elector_stats_get still accepts versions 1 and 2 (and fills
 *  only the fields they had). */
#define K8SLEASE_ELECTOR_STATS_VERSION 3

/** Counters of one elector, for metrics and health checks. */
typedef struct k8slease_elector_stats {
    unsigned int version;      /**< K8SLEASE_ELECTOR_STATS_VERSION, set by the caller */
    uint64_t requests;         /**< API requests completed (any outcome) */
    uint64_t terms;            /**< times we became leader (0 or 1 for one elector) */
    uint64_t renewals;         /**< successful renewals while leading */
    uint64_t slow_path;        /**< times the leader's fast-path update failed and it
                                    fell back to GET + UPDATE (client-go's slowpath) */
    uint64_t conflicts;        /**< HTTP 409 answers */
    uint64_t http_4xx;         /**< other 4xx answers (expected 404s excluded: GET of a
                                    missing Lease, etcd revoke of a lease already gone) */
    uint64_t http_5xx;         /**< 5xx answers */
    uint64_t transport_errors; /**< timeouts, TLS and connection failures */
    uint64_t renew_latency_bucket[K8SLEASE_LATENCY_BUCKETS]; /**< not cumulative */
    uint64_t renew_latency_count;                            /**< renewals measured */
    double renew_latency_sum_s;                              /**< their total duration, seconds */
    /** CLOCK_MONOTONIC ns of the start of the last successful renewal (or
     *  acquisition); 0 if none. */
    int64_t last_renew_ns;
    /* Version 2: */
    uint64_t gets;         /**< GET requests completed (any outcome) */
    uint64_t creates;      /**< CREATE (POST) requests completed */
    uint64_t updates;      /**< UPDATE (PUT) requests completed */
    uint64_t watch_events; /**< changes of the Lease seen on the watch and fed in
                                (newer than anything seen before) */
    int watch_healthy;     /**< 1 while the watch of the Lease is healthy (always 0
                                with poll_only) */
    /* Version 3: */
    /** handoff_candidate: 1 while this candidate's object is written, so
     *  that a leader choosing a successor sees it (a readiness check for
     *  rolling updates: `k8slease elect`'s /readyz); 0 before that, once
     *  it is deleted at the end, and without handoff_candidate; -1 when it
     *  cannot be written (no permission: a warning said so; the candidate
     *  can still win and be named). */
    int candidate_known;
} k8slease_elector_stats;

/** Copy the elector's counters into *stats (stats->version must be set).
 *  Returns 0 or K8SLEASE_EINVAL. Any thread. */
K8SLEASE_API int k8slease_elector_stats_get(const k8slease_elector *elector,
                                            k8slease_elector_stats *stats);

/** Block until the term is over, or timeout_ms passes (<0: no limit).
 *  The term is over the moment is_leader turns false for good: the renew
 *  deadline passed without a successful renewal (by the monotonic clock,
 *  even if the loop thread has not seen it yet), another holder or a new
 *  term was seen, the Lease was deleted, or the elector was stopped; for
 *  an elector that never led, when its election ends. on_stopped_leading
 *  runs at that moment too. What the election may still do afterwards (a
 *  release, requests waiting for a server that does not answer) is not
 *  waited for: k8slease_elector_stop() waits for that. A release waits
 *  for the threads that were in wait_lost when the term ended: it is
 *  written only once they have returned, so a caller knows its term is
 *  over before another candidate can take the Lease (past the release
 *  deadline without them, no release: the Lease expires).
 *  Returns 0 when over, K8SLEASE_ETIMEOUT, K8SLEASE_ESTATE from a callback
 *  (timeout_ms 0 may be used there). Any thread. */
K8SLEASE_API int k8slease_elector_wait_lost(k8slease_elector *elector, int64_t timeout_ms);

/** Stop the election and wait until it is over, release included.
 *  release: 1 to write holder "" if we lead, 0 to leave the Lease to
 *  expire, -1 to follow the options. The term ends at once (is_leader
 *  false, on_stopped_leading, waiters of wait_lost woken), before the
 *  release is written, and the release waits until those waiters have
 *  returned (k8slease_elector_wait_lost); it is bounded: on a server that does not
 *  answer it gives up renew_deadline after the stop (plus at most one
 *  request timeout). Only the term this elector won is released, never a
 *  later one under the same identity. Idempotent. Returns 0 or
 *  K8SLEASE_ESTATE (from a callback). Any thread but the loop thread. */
K8SLEASE_API int k8slease_elector_stop(k8slease_elector *elector, int release);

/** Hand the term over and wait until that is done (docs/semantics.md,
 *  "Planned handoff"). Like k8slease_elector_stop(elector, 1) (the term
 *  ends at once, is_leader false, on_stopped_leading, the waiters of
 *  wait_lost woken; the write waits until they have returned), but the
 *  write names the successor `to` (NULL: the best known candidate: not
 *  terminating, the newest revision, the highest priority, the
 *  longest-lived, read with one LIST during which the term goes on; none
 *  known: a plain release) holder of a new term of bound_ms (rounded up to
 *  whole seconds, at least 1 s; <= 0: 3 retry periods, which a polling
 *  successor's longest wait, 2.2 retry periods, and its requests fit in):
 *  the successor, watching, leads within a round trip; the others wait
 *  that bound, then anyone may take it. Epochs stay strictly increasing.
 *  Another elector of the same client and identity (the program's next
 *  one) waits for the write rather than take the term back. An elector
 *  that does not lead only stops. An operator can ask a leader for the
 *  same with the Lease's annotation k8slease.io/handoff-request
 *  (k8slease_lease_handoff()).
 *  Returns 0, K8SLEASE_EINVAL (a NULL elector, the etcd backend, a `to`
 *  that is not a valid identity), K8SLEASE_ESTATE (from a callback),
 *  K8SLEASE_ENOMEM. Any thread but the loop thread. */
K8SLEASE_API int k8slease_elector_handoff(k8slease_elector *elector, const char *to,
                                          int64_t bound_ms);

/** Stop (as the options say about release) if running, wait until the
 *  election is over, then free; no callback of the elector runs after it
 *  returns. Accepts NULL. Any thread. From a callback of the elector's
 *  client (the loop thread, which cannot wait), it returns at once: the
 *  elector's callbacks end there (the one running excepted), and the
 *  library stops it and frees it on the loop thread once its election is
 *  over (its release bounded as k8slease_elector_stop says;
 *  k8slease_client_free frees it at the latest). Either way the caller
 *  must not use the elector afterwards. */
K8SLEASE_API void k8slease_elector_free(k8slease_elector *elector);

/* ------------------------------------------------------------------------ */
/* Holder                                                                   */
/* ------------------------------------------------------------------------ */

/** A Lease's holder record, from k8slease_holder_get(). */
typedef struct k8slease_holder {
    char *identity;           /**< holderIdentity; "" when none (never NULL) */
    int64_t epoch;            /**< leaseTransitions (0 when absent) */
    int64_t renew_time_us;    /**< renewTime, µs since the Unix epoch (0 when absent) */
    int64_t acquire_time_us;  /**< acquireTime, µs since the Unix epoch (0 when absent) */
    int64_t lease_duration_s; /**< leaseDurationSeconds (0 when absent) */
    int expired;              /**< 1 when renewTime + duration is in the past by our wall clock */
    char *resource_version;   /**< metadata.resourceVersion */
    /* The library allocates the record, so fields are added at the end. */
    /** spec.strategy, set by coordinated leader election; "" when absent
     *  (and always with etcd). */
    char *strategy;
    /** spec.preferredHolder: the candidate coordinated leader election
     *  wants to lead next (the holder steps down for it); "" when absent. */
    char *preferred_holder;
    /** Crash failover (k8slease_client_options.crash_failover): 1 when the
     *  kubelet reported the container instance of the holder's current
     *  term terminated (expired is 1 then too). */
    int ended;
} k8slease_holder;

/** Read the Lease's holder (blocking, timeout_ms <= 0: 10 s).
 *  Returns 0 with *out set (free with k8slease_holder_free), K8SLEASE_ENOTFOUND
 *  when the Lease does not exist, or another error code.
 *  Kubernetes: the first read of a Lease is a GET. A second read of it
 *  within 60 s makes the client follow the Lease on its shared watch (the
 *  one its electors and holder watches of that Lease use, if any), and from
 *  then on reads are answered from the last state that watch delivered,
 *  without a request, while the watch is healthy (docs/semantics.md,
 *  "Holder reads"): the server's state as of its last event, typically a
 *  few ms old; a watch that stops delivering is found by its probes, so
 *  at worst about 8 s old. A read while the watch is not healthy is a
 *  GET. A write of this client (an election's,
 *  k8slease_lease_release) is seen by its next read. A Lease not read for
 *  60 s is no longer followed. With crash_failover, the holder's Pod (as
 *  its record in the Lease names it) is followed on a watch too, and read
 *  with a GET only while that watch cannot answer.
 *  etcd (ns must be NULL): the leader of election name, i.e. the value and
 *  create revision (epoch) of the oldest key under "name/";
 *  lease_duration_s is its lease's granted TTL, resource_version its mod
 *  revision, the times 0; K8SLEASE_ENOTFOUND when there is no candidate.
 *  Any thread but the loop thread. */
K8SLEASE_API int k8slease_holder_get(k8slease_client *client, const char *ns, const char *name,
                                     int64_t timeout_ms, k8slease_holder **out);

/** Free a holder record. Accepts NULL. Any thread. */
K8SLEASE_API void k8slease_holder_free(k8slease_holder *holder);

/** Release a Lease held by identity (blocking, timeout_ms <= 0: 10 s): write
 *  holderIdentity "", leaseDurationSeconds 1, renewTime = acquireTime = now,
 *  leaseTransitions kept, retrying on 409. For operators: an elector
 *  releases its own lease when stopped. If another identity holds the
 *  Lease, K8SLEASE_ECONFLICT unless force is 1. Returns 0 (also when the
 *  Lease has no holder), K8SLEASE_ENOTFOUND, K8SLEASE_ECONFLICT, or another
 *  error code. etcd (ns must be NULL): revoke the lease of the leader's key
 *  (which deletes it, and ends that candidate's session); 0 when there is
 *  no leader. Any thread but the loop thread. */
K8SLEASE_API int k8slease_lease_release(k8slease_client *client, const char *ns, const char *name,
                                        const char *identity, int force, int64_t timeout_ms);

/** Ask the leader of a Lease to hand it over (Kubernetes only; not
 *  blocking on the handoff): write the Lease's annotation
 *  k8slease.io/handoff-request (a merge PATCH; `to`: the successor's
 *  identity, NULL for the best candidate). A k8slease leader sees it on its
 *  watch and hands the term over as k8slease_elector_handoff() does; its
 *  handoff write removes the annotation. The same with kubectl:
 *  `kubectl annotate lease NAME k8slease.io/handoff-request=[ID]`. Follow
 *  the holder (k8slease_watch_start) to see it happen. Needs patch on
 *  leases. Returns 0, K8SLEASE_EINVAL (names, the etcd backend),
 *  K8SLEASE_ENOTFOUND, K8SLEASE_EAUTH, or a transport error. Any thread
 *  but the loop thread. */
K8SLEASE_API int k8slease_lease_handoff(k8slease_client *client, const char *ns, const char *name,
                                        const char *to);

/* ------------------------------------------------------------------------ */
/* Watch                                                                    */
/* ------------------------------------------------------------------------ */

/** A watch of one Lease's holder. Created by k8slease_watch_start(). */
typedef struct k8slease_watch k8slease_watch;

/** Called on the loop thread when the holder or epoch of the Lease changes
 *  (not on every renew). identity is "" when there is no holder or the Lease
 *  was deleted; epoch is -1 when the Lease does not exist. etcd: the leader's
 *  value and create revision; "" and -1 when there is no candidate. */
typedef void (*k8slease_watch_cb)(const char *identity, int64_t epoch, void *user_data);

/** Start watching a Lease. The first callback reports the current state.
 *  The watch reconnects by itself until cancelled. It shares the client's
 *  stream of that Lease with the electors and other watches of the same
 *  Lease (one stream per Lease per client). etcd (ns must be NULL): a watch
 *  of the election's prefix of its own.
 *  Returns 0, K8SLEASE_EINVAL, K8SLEASE_ENOMEM. Any thread. */
K8SLEASE_API int k8slease_watch_start(k8slease_watch **out, k8slease_client *client, const char *ns,
                                      const char *name, k8slease_watch_cb cb, void *user_data);

/** Cancel the watch and free it; no callback runs after it returns.
 *  Accepts NULL. Not from a callback of the same client. */
K8SLEASE_API void k8slease_watch_free(k8slease_watch *watch);

/* ------------------------------------------------------------------------ */
/* Pod labels                                                               */
/* ------------------------------------------------------------------------ */

/** Set (value != NULL) or remove (value == NULL) metadata.labels[key] of a
 *  Pod with a JSON merge patch (blocking, 10 s timeout).
 *  Returns 0, K8SLEASE_EINVAL, K8SLEASE_ENOTFOUND, or another error code;
 *  K8SLEASE_ESTATE on an etcd client.
 *  Any thread but the loop thread. */
K8SLEASE_API int k8slease_pod_label(k8slease_client *client, const char *ns, const char *pod,
                                    const char *key, const char *value);

#ifdef __cplusplus
}
#endif

#endif /* K8SLEASE_H */
