/*
 * etcd_harness.h - run a real etcd (Debian's etcd 3.4 `etcd` binary, or
 * any other through K8SLEASE_TEST_ETCD, e.g. 3.5.30), alone or as a
 * cluster of members (eh_cluster_start), and `etcdctl` from integration
 * and chaos tests.
 *
 * The binaries are found through the environment variables
 * K8SLEASE_TEST_ETCD and K8SLEASE_TEST_ETCDCTL, else the macros
 * K8SLEASE_ETCD_BIN and K8SLEASE_ETCDCTL_BIN (set by
 * tests/integration/CMakeLists.txt from find_program()).
 *
 * Typical use:
 *
 *     eh_etcd *etcd;
 *     char *out;
 *     assert_int_equal(eh_start(&etcd, NULL), 0);
 *     ... k8slease_client_options.etcd_endpoints = eh_endpoint(etcd) ...
 *     assert_int_equal(eh_etcdctl(etcd, &out, "get", "--prefix", "my-election/", NULL), 0);
 *     free(out);
 *     eh_stop(etcd);
 *
 * Every etcd runs on free loopback ports with its data directory in a fresh
 * mkdtemp() directory, which also holds its log (etcd.log), the generated
 * certificates (TLS) and the output files of `etcdctl elect` children.
 * Children get SIGKILL when the test process dies (PR_SET_PDEATHSIG), and an
 * atexit() handler kills whatever is still running and removes the
 * directories, so a failed test leaves nothing behind.
 *
 * Threads: one eh_etcd (and one eh_elect) may be used by one thread at a
 * time. Children are started with fork + execve of prepared arguments, so
 * the harness can be used while library threads run.
 * Errors: functions returning int give 0 on success and -1 on failure, with
 * a one-line reason (and, for etcd failures, the tail of its log) on stderr.
 */
#ifndef K8SLEASE_ETCD_HARNESS_H
#define K8SLEASE_ETCD_HARNESS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct eh_etcd eh_etcd;
typedef struct eh_elect eh_elect;

/* Options of eh_start(); zero-initialise ({0}) for a plain http etcd. */
typedef struct eh_options {
    /* 1: https on the client port with client-certificate authentication
     * (--client-cert-auth, --trusted-ca-file). A CA, a server certificate
     * (IP:127.0.0.1, serverAuth + clientAuth: etcd's own JSON gateway dials
     * the server with it), a client certificate and an unrelated CA are
     * generated with the openssl command into the temporary directory. */
    int tls;
    /* --auth-token-ttl in seconds (simple tokens); 0: etcd's default (300). */
    int auth_token_ttl_s;
} eh_options;

/* Start etcd (opts may be NULL: plain http) and wait, at most 30 s, until
 * GET /health answers {"health":"true"} and the JSON gateway answers POST
 * /v3/maintenance/status. Retries with other ports when a port was taken in
 * between. */
int eh_start(eh_etcd **out, const eh_options *opts);

/* SIGCONT + SIGTERM, wait (at most 10 s, then SIGKILL), remove the
 * directory, free. Returns 0 if etcd exited by itself after SIGTERM, -1 if
 * it had to be killed. Accepts NULL. Kill and free eh_elect children first
 * (they keep running otherwise, talking to nobody). */
int eh_stop(eh_etcd *e);

/* Stop the process (sig: SIGTERM for a clean shutdown, SIGKILL for a
 * crash) and start it again on the same ports and data directory; waits
 * until healthy. */
int eh_restart(eh_etcd *e, int sig);

/* SIGSTOP / SIGCONT the etcd process: it stops answering, connections stay open.
 * Both return once the process has stopped / continued; eh_resume() of an
 * etcd that is not paused does nothing. */
int eh_pause(eh_etcd *e);
int eh_resume(eh_etcd *e);

/* SIGKILL etcd (a crash) and leave it down; eh_relaunch() starts it
 * again on the same ports and data directory and waits (at most 30 s)
 * until it is healthy. -1 if it was not running / is running. */
int eh_kill(eh_etcd *e);
int eh_relaunch(eh_etcd *e);
/* SIGTERM (a clean shutdown; SIGKILL after 10 s) and leave it down. Forks
 * nothing, so it may run on a thread of its own (children get their
 * PR_SET_PDEATHSIG when the thread that forked them ends: fork from a
 * thread that outlives them). */
int eh_shutdown(eh_etcd *e);

/*
 * A cluster of members on loopback: each member an eh_etcd of its own
 * (its directory, data directory, log, client and peer port, name "m0",
 * "m1", ...), started together with --initial-cluster naming every peer
 * URL and --initial-cluster-state new. eh_pause, eh_resume, eh_kill,
 * eh_relaunch, eh_restart, eh_etcdctl and the getters work on a member;
 * eh_stop does not (eh_cluster_stop stops them all).
 */
#define EH_CLUSTER_MAX 5
typedef struct eh_cluster eh_cluster;

/* Start `members` members and wait, at most 30 s, until each answers
 * /health and the JSON gateway (which needs a raft leader). Retries with
 * other ports when a port was taken in between. */
int eh_cluster_start(eh_cluster **out, int members);
/* SIGTERM every member and wait (as eh_stop), remove the directories,
 * free. Accepts NULL. */
int eh_cluster_stop(eh_cluster *c);
int eh_cluster_size(const eh_cluster *c);
/* Member i (borrowed, valid until eh_cluster_stop), NULL if out of range. */
eh_etcd *eh_cluster_member(eh_cluster *c, int i);
/* "http://127.0.0.1:P0,http://127.0.0.1:P1,...", member 0 first. */
const char *eh_cluster_endpoints(const eh_cluster *c);
/* 1 if this member says it is the raft leader, 0 if it says another one
 * is (or none), -1 if it does not answer within 2 s (down, paused). */
int eh_member_is_raft_leader(const eh_etcd *e);
/* The server's version (GET /version: "etcdserver"), e.g. 3.4.23; -1 if
 * it does not answer within 2 s. */
int eh_version(const eh_etcd *e, int *major, int *minor, int *patch);
/* The index of the member that is the raft leader, polled until one says
 * so (at most timeout_ms), or -1. */
int eh_cluster_raft_leader(eh_cluster *c, int timeout_ms);
/* Wait (at most timeout_ms) until every member is healthy; -1 at once if
 * one is down or paused. */
int eh_cluster_wait_healthy(eh_cluster *c, int timeout_ms);

/* Borrowed strings, valid until eh_stop() (of a member: eh_cluster_stop()). */
const char *eh_endpoint(const eh_etcd *e); /* "http://127.0.0.1:PORT" or "https://..." */
const char *eh_dir(const eh_etcd *e);      /* the temporary directory */
const char *eh_log_file(const eh_etcd *e); /* DIR/etcd.log */
/* TLS only (NULL otherwise): PEM files in DIR. */
const char *eh_ca_file(const eh_etcd *e);       /* the CA of the server and client certificates */
const char *eh_other_ca_file(const eh_etcd *e); /* an unrelated CA (the "wrong CA" tests) */
const char *eh_cert_file(const eh_etcd *e);     /* client certificate (clientAuth) */
const char *eh_key_file(const eh_etcd *e);      /* its key */
int eh_port(const eh_etcd *e);                  /* the client port */
int eh_pid(const eh_etcd *e);                   /* the etcd process, -1 if not running */

/* Print the last `lines` lines of etcd's log to stderr. */
void eh_log_tail(const eh_etcd *e, int lines);

/*
 * Run `etcdctl --endpoints=URL [TLS flags] [--user root:PW] ARGS...` (args
 * NULL-terminated) with ETCDCTL_API=3, at most 20 s. Returns its exit
 * status (0..255), or -1 if it could not run, timed out or died by a
 * signal. *out (if out != NULL) gets its stdout, malloc'ed and
 * NUL-terminated, also on failure; its stderr stays available through
 * eh_etcdctl_stderr() until the next call.
 */
int eh_etcdctl(eh_etcd *e, char **out, ...);
int eh_etcdctlv(eh_etcd *e, char **out, const char *const *args);
const char *eh_etcdctl_stderr(const eh_etcd *e);

/* Create user root with this password, `auth enable`; from then on every
 * etcdctl command of the harness passes --user root:PASSWORD. */
int eh_enable_auth(eh_etcd *e, const char *root_password);

/*
 * Spawn a long-running `etcdctl elect NAME VALUE` (value NULL: `etcdctl
 * elect -l NAME`, which prints every new leader), with the connection
 * flags of eh_etcdctl(); its stdout (key line, then value line, when
 * elected) and stderr go to files in the etcd's directory.
 */
int eh_elect_start(eh_etcd *e, eh_elect **out, const char *name, const char *value);
int eh_elect_pid(const eh_elect *c);
/* What it printed on stdout so far, malloc'ed (NULL on error). */
char *eh_elect_output(const eh_elect *c);
/* Wait (at most timeout_ms) until its stdout contains the line `line`
 * (complete, without the newline). Returns 0, or -1 on timeout or if the
 * process exited first (with what it printed, on stderr). */
int eh_elect_wait_line(eh_elect *c, const char *line, int timeout_ms);
/* 1 if its stdout contains the line `line` now, else 0. */
int eh_elect_has_line(const eh_elect *c, const char *line);
int eh_elect_signal(eh_elect *c, int sig);
/* Wait (at most timeout_ms) until it exits: its exit status (128 + signal
 * when killed), or -1 on timeout. */
int eh_elect_wait_exit(eh_elect *c, int timeout_ms);
/* SIGKILL if still running, reap, remove its files, free. Accepts NULL. */
void eh_elect_free(eh_elect *c);

/* A loopback TCP port on which nobody listens right now (bind port 0, read
 * it back, close), or -1. */
int eh_free_port(void);

/* Kill every child the harness started that is still running, remove the
 * directories (also run by atexit). The objects stay allocated. */
void eh_kill_all(void);

#ifdef __cplusplus
}
#endif

#endif
