/* k8slease-bench: the benchmark driver (bench/README.md says what each
 * benchmark measures and how).
 *
 * One program with three roles:
 *   k8slease-bench [--quick] ...          the driver: starts the test server,
 *                                         runs benchmarks 1-8, writes results
 *   k8slease-bench candidate ...          one election candidate (benchmarks 1-3
 *                                         and 8), on the test server or on etcd
 *   k8slease-bench scale-worker ...       N elections in one client (4 and 6)
 *   k8slease-bench hung-worker ...        8 clients while a replica hangs (7),
 *                                         inside an HA envtest.sh of its own
 * The driver never creates a k8slease client itself: it only forks and execs
 * the other roles, so every measured client lives in a process of its own
 * and the driver stays single-threaded (safe to fork).
 */
#ifndef K8SLEASE_BENCH_H
#define K8SLEASE_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <time.h>

#include "harness.h"

#define NS_PER_MS INT64_C(1000000)
#define NS_PER_S  INT64_C(1000000000)

/* Election timings handed to candidates and workers. */
typedef struct bench_timing {
    int64_t lease_duration_ms;
    int64_t renew_deadline_ms;
    int64_t retry_period_ms;
} bench_timing;

/* One line of the result table. */
typedef struct bench_row {
    char server[48];  /* "test server", "kube-apiserver v1.36.3", "cluster" */
    char bench[48];   /* "1 graceful handover" */
    char mode[16];    /* "watch", "poll-only", "etcd" or "" */
    char n[24];       /* sample count or size */
    char result[480]; /* the measurement, human-readable */
    char target[64];  /* the target, "" for a comparison row */
    const char *met;  /* "yes", "NO", "-" (no target) or "failed" */
} bench_row;

#define BENCH_MAX_ROWS 96

/* The server a series of benchmarks runs against (server.c). */
typedef enum {
    TARGET_TESTSERVER, /* k8slease-testserver: control API, counters, faults */
    TARGET_ENVTEST,    /* a real kube-apiserver of our own (envtest.sh): /metrics, any load */
    TARGET_CLUSTER     /* a user's cluster (--kubeconfig): shared, so light benchmarks only */
} bench_target_kind;

/* The cells of the README table (main.c), one column per server. */
enum {
    CELL_HANDOVER,
    CELL_FAILOVER,
    CELL_FOLLOWER,
    CELL_LEADER,
    CELL_SCALE,
    CELL_FOOTPRINT,
    CELL_HTTP,
    CELL_STANDBY,
    CELL_HUNG,
    CELL_CRASH,
    CELL_COUNT
};

typedef struct bench_target {
    bench_target_kind kind;
    char cell[CELL_COUNT][480]; /* "" when not measured */
    char label[48];             /* the table's server column */
    char kubeconfig[1024];
    ts_server *ts; /* TARGET_TESTSERVER */
    /* TARGET_ENVTEST: what /metrics needs (from envtest.sh's kubeconfig) */
    char url[256], ca_file[1024], token[256], ns[64];
    pid_t apiserver_pid, etcd_pid; /* for their CPU time, 0: unknown */
    double base_watches;           /* Lease watch streams open before our clients came */
    char etcd_url[64];             /* its etcd's http://127.0.0.1:PORT, "" unknown */
} bench_target;

typedef struct bench_ctx {
    int quick;
    int hang_s; /* benchmark 7's hang (--hang-s); 0: 100 s, quick 20 s */
    time_t started;
    char loadavg[64];     /* /proc/loadavg when the run started */
    const char *out_dir;  /* CSV and PNG files go here */
    char self_exe[4096];  /* this program, to exec the other roles */
    bench_target ts;      /* the test server */
    bench_target real;    /* kind TARGET_TESTSERVER: none */
    bench_target *tgt;    /* the server of the benchmarks running now */
    int csv_append;       /* a later server: CSV files get more rows, no header */
    const char *etcd_bin; /* Debian's etcd for benchmarks 1-2; NULL: not installed */
    char etcd_version[64];
    bench_timing fast;    /* benchmarks 1-3 */
    bench_timing regular; /* benchmarks 4-5 (client-go's defaults) */
    bench_row rows[BENCH_MAX_ROWS];
    int nrows;
} bench_ctx;

/* ---- util.c ------------------------------------------------------------ */

int64_t bench_now_ns(void); /* CLOCK_MONOTONIC: comparable across processes */
void bench_sleep_ms(int64_t ms);
/* Uniform in [0, n) from a PRNG seeded once per process. */
int64_t bench_rand(int64_t n);

/* A growable array of measurements. */
typedef struct samples {
    double *v;
    size_t n, cap;
} samples;

int samples_add(samples *s, double x);
/* Nearest-rank percentile (p in (0, 100]); NAN when empty. Sorts s->v. */
double samples_pct(samples *s, double p);
double samples_max(const samples *s);
void samples_free(samples *s);

/* Add a table row (of the current server); met: 1 yes, 0 NO, -1 no
 * target, -2 the run failed. */
#if defined(__GNUC__)
__attribute__((format(printf, 7, 8)))
#endif
void bench_row_add(bench_ctx *ctx, const char *bench, const char *mode, const char *n,
                   const char *target, int met, const char *fmt, ...);

/* fopen(out_dir/name, "w") and write the header line (if not NULL); NULL,
 * with a message, on failure. */
FILE *bench_csv_open(const bench_ctx *ctx, const char *name, const char *header);
/* Set a cell of the README table for the current server. */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
void bench_cell(bench_ctx *ctx, int cell, const char *fmt, ...);
/* The CSV files' mode column: "watch" on the test server, "apiserver-watch"
 * on a real one (static buffer). */
const char *bench_csv_mode(const bench_ctx *ctx, const char *mode);

/* A field of /proc/self/status ("VmRSS", "Threads", ...) as a number (kB for
 * sizes), -1 if absent. */
long proc_status_field(const char *field);

/* Print a progress line on stderr with the time since start. */
#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
void bench_log(const char *fmt, ...);

/* ---- server.c: the test server's control API --------------------------- */

enum { V_GET, V_LIST, V_WATCH, V_CREATE, V_UPDATE, V_PATCH, V_DELETE, V_COUNT };
extern const char *const srv_verb_names[V_COUNT];

typedef struct srv_stats {
    double verb[V_COUNT]; /* requests answered, any status */
    double total;
    double conflicts;    /* HTTP 409 */
    double watches_open; /* streams open now */
} srv_stats;

/* Start the test server as ctx->tgt (kind TARGET_TESTSERVER), or take the
 * real server of kubeconfig (TARGET_ENVTEST: read its /version, find its
 * processes). 0 or -1. */
int srv_open(bench_ctx *ctx, bench_target *t);
void srv_close(bench_target *t);
const char *srv_kubeconfig(const bench_ctx *ctx);
/* The namespace the candidates' Leases are in ("default" unless the
 * kubeconfig names one). */
const char *srv_namespace(const bench_ctx *ctx);
/* One API request to the current server with the kubeconfig's credentials
 * (test server, envtest; a user's cluster: none, returns 0), a JSON body
 * when json is not NULL (PATCH: a JSON merge patch). The HTTP status, 0 when
 * there was no answer; the answer in *body (free it) when body is not NULL. */
long srv_api(bench_ctx *ctx, const char *method, const char *path, const char *json, char **body);
/* Does the current server count requests for us (test server, envtest)? */
int srv_counts(const bench_ctx *ctx);

/* Test server: forget objects, fault rules and counters. Real servers:
 * delete the Leases the benchmarks use (envtest: every Lease of the
 * namespace; cluster: ours, by name). 0 or -1. */
int srv_reset(bench_ctx *ctx);
/* Request counts (test server: its counters; envtest: /metrics,
 * apiserver_request_total{resource="leases"} without the kube-apiserver's
 * own requests (label system_client, v1.28+: it renews its identity Lease
 * every 10 s; v1.24 writes no Lease), and apiserver_longrunning_requests
 * for the watch streams open, less those open when the server was taken). */
int srv_stats_get(bench_ctx *ctx, srv_stats *out);
/* CPU seconds (user + system) used so far by the envtest kube-apiserver
 * and etcd; -1 when unknown. */
double srv_cpu_s(const bench_ctx *ctx, int etcd);
/* envtest: etcd's WAL fsyncs so far, their count and total seconds (from
 * etcd's /metrics). 0 or -1. */
int srv_etcd_fsyncs(const bench_ctx *ctx, double *count, double *sum_s);

/* ---- etcd.c: the etcd of benchmarks 1-2 --------------------------------- */

/* The etcd binary the etcd harness would run (K8SLEASE_TEST_ETCD, else the
 * one CMake found), NULL if there is none. */
const char *bench_etcd_find(void);
/* Grant a lease of ttl_s seconds at endpoint (http://...) and revoke it:
 * the TTL etcd granted, in seconds, or -1. */
long bench_etcd_granted_ttl(const char *endpoint, long ttl_s);

/* ---- pool.c: candidate processes, seen from the driver ------------------ */

#define POOL_MAX 8

typedef struct cand {
    int id;           /* unique per run; identity "cand-ID" */
    pid_t pid;        /* 0 when gone */
    int cmd_fd;       /* write end of its stdin */
    char leader[128]; /* last holder it reported (OnNewLeader) */
    int leading;      /* between its OnStartedLeading and OnStoppedLeading */
} cand;

/* What a candidate reports, one line each (candidate.c):
 *   'S' OnStartedLeading (epoch)      'X' OnStoppedLeading
 *   'L' OnNewLeader (epoch, identity) 'R' release begins (command 'r')
 *   'D' release done                  'W' a renewal completed (command 'w')
 *   'E' error (text)
 * t_ns is the candidate's CLOCK_MONOTONIC when it happened. */
typedef struct cand_event {
    char kind;
    int slot; /* index in pool.c[], -1 for a candidate no longer in the pool */
    int64_t t_ns;
    long long epoch;
    char text[128];
} cand_event;

typedef struct pool {
    const bench_ctx *ctx;
    const char *lease;
    const char *kubeconfig;    /* the test server's, when etcd_endpoint is NULL */
    const char *etcd_endpoint; /* etcd backend: the endpoint URL; NULL: Kubernetes */
    int poll_only;
    bench_timing timing;
    cand c[POOL_MAX];
    int next_id;
    int ev_rd, ev_wr; /* the event pipe all candidates write to */
    char buf[8192];
    size_t len;
} pool;

/* Candidates of election `lease` on the test server, or on etcd when
 * etcd_endpoint is not NULL (poll_only is then ignored). */
int pool_init(pool *p, const bench_ctx *ctx, const char *lease, int poll_only,
              const char *etcd_endpoint, const bench_timing *t);
/* Start one more candidate; its slot, or -1. */
int pool_spawn(pool *p);
/* The same with crash failover, in Pod `pod` of the Lease's namespace (its
 * only container), or without when pod is NULL. */
int pool_spawn_pod(pool *p, const char *pod);
/* Send a one-character command ('r' release, 'j' join, 'w' report the next
 * renewal, 'q' quit). 0 or -1. */
int pool_send(pool *p, int slot, char cmd);
/* Next event, waiting until deadline_ns (monotonic); 0 or -1 on timeout. */
int pool_next(pool *p, cand_event *ev, int64_t deadline_ns);
/* SIGKILL the candidate and reap it. */
void pool_kill(pool *p, int slot);
/* Wait until some candidate leads; its slot, or -1. */
int pool_wait_leader(pool *p, int64_t deadline_ns);
/* Wait until candidate `slot` has reported `leader_slot` as the leader. */
int pool_wait_sees(pool *p, int slot, int leader_slot, int64_t deadline_ns);
/* Wait until every candidate has reported `leader_slot` as the leader. */
int pool_wait_synced(pool *p, int leader_slot, int64_t deadline_ns);
/* Ask every candidate to quit (releasing), wait a little, SIGKILL the rest. */
void pool_fini(pool *p);

/* ---- the roles and benchmarks ------------------------------------------ */

int candidate_main(int argc, char **argv);
int scale_worker_main(int argc, char **argv);
int hung_worker_main(int argc, char **argv);

void bench_handover(bench_ctx *ctx);     /* 1 */
void bench_failover(bench_ctx *ctx);     /* 2 */
void bench_api_load(bench_ctx *ctx);     /* 3 */
void bench_scale(bench_ctx *ctx);        /* 4 */
void bench_footprint(bench_ctx *ctx);    /* 5 */
void bench_http(bench_ctx *ctx);         /* 6 (http.c) */
void bench_hung_replica(bench_ctx *ctx); /* 7 */
void bench_crash_report(bench_ctx *ctx); /* 8 */

/* ---- scale.c: the scale worker, seen from the driver (benchmarks 4, 6) -- */

/* A worker's RESULT line, decoded (NAN: absent). */
typedef struct scale_result {
    double elected, leading_start, leading_end, elect_s, window_s;
    double rss_client_kb, rss_kb, threads, cpu_s, renewals, errors;
    double late, not_leader, lost, renew_ms_mean, renew_ms_p99_bucket;
    double anon_client_kb, anon_kb, hwm_client_kb, hwm_kb, conns_start, conns_end;
    /* benchmark 6: the loop thread's context switches over the CPU window,
     * how many threads the client started, the syscall window (sys_tool:
     * a sys_tool_kind; sys_lib without the worker's main thread) */
    double wake, wake_inv, loop_threads;
    double sys_tool, sys_lib, sys_all, sys_renewals, sys_window_s;
    double loop_cpu_s; /* the loop thread's CPU over the CPU window */
} scale_result;

typedef struct worker_run {
    const char *kubeconfig; /* NULL: the current server, emptied first */
    int size, batch;        /* batch 0: all at once */
    int64_t window_ms, elect_ms;
    int align;     /* > 0: the CPU window is align retry periods, from 1/2 after a renewal */
    int sys_align; /* > 0: then a syscall window of sys_align retry periods, likewise */
} worker_run;

/* Run the worker (client-go's timings); 0 with *r filled, or its exit
 * status (-1: no RESULT). */
int scale_run_worker(bench_ctx *ctx, const worker_run *w, scale_result *r);
/* Did the worker hold all `size` elections through the window, 0 missed? */
int scale_held(const scale_result *r, int size);

/* ---- sysstat.c: the worker's threads and system calls (benchmark 6) ----- */

#define TIDS_MAX 16
typedef struct tid_set {
    int n;
    pid_t tid[TIDS_MAX];
} tid_set;

void tids_list(tid_set *s); /* this process's threads */
/* The threads of after that are not in before. */
void tids_new(const tid_set *before, const tid_set *after, tid_set *out);
/* Sum of (non)voluntary_ctxt_switches of the threads; -1 if unreadable. */
long tids_ctxt(const tid_set *s, int voluntary);

typedef enum { SYS_FAILED = -1, SYS_NONE = 0, SYS_PERF = 1, SYS_STRACE = 2 } sys_tool_kind;

typedef struct sys_counter {
    sys_tool_kind tool;
    pid_t pid;
    int ctl_fd, ack_fd; /* perf --control */
    char out[128], err[128];
    char why[200]; /* SYS_NONE, SYS_FAILED: why */
} sys_counter;

/* Start counting this process's system calls (perf: ready, counting
 * disabled; strace: attached, counting). 0, or -1 with c->tool SYS_NONE or
 * SYS_FAILED and c->why. */
int sys_start(sys_counter *c);
int sys_enable(sys_counter *c);  /* perf: count from now (acknowledged) */
int sys_disable(sys_counter *c); /* perf: stop counting (acknowledged) */
/* Stop the tool and read its counts: *lib without the main thread (perf),
 * *all every thread. 0 or -1 (c->tool SYS_FAILED, c->why). */
int sys_finish(sys_counter *c, double *lib, double *all);

/* Run argv (argv[0] searched in PATH), read its stdout until it exits or
 * timeout_ms passes (then SIGKILL); the last line starting with "RESULT "
 * goes to result. Returns the exit status, or -1. */
int bench_run_child(char *const argv[], int64_t timeout_ms, char *result, size_t size);
/* Value of key=VALUE in a RESULT line, as a double; NAN if absent. */
double result_field(const char *line, const char *key);

#endif
