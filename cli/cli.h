/* The k8slease command: what its subcommands share (exit codes, flag
 * parsing, flag values, client set-up, output helpers). */
#ifndef K8SLEASE_CLI_H
#define K8SLEASE_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "k8slease.h"

#if defined(__GNUC__)
#define CLI_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define CLI_PRINTF(a, b)
#endif

#define CLI_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Exit codes shared by every subcommand (k8slease(1), EXIT STATUS). */
#define CLI_OK        0
#define CLI_ERROR     1 /* API, configuration or runtime error */
#define CLI_USAGE     2 /* bad flag, bad flag value, missing required flag */
#define CLI_NOHOLDER  3 /* holder: no holder, or expired */
#define CLI_TERM_OVER 3 /* elect --once: the term ended */
#define CLI_NOTFOUND  4 /* the Lease or Pod does not exist */

/* Longest identity the library accepts, with its NUL. */
#define CLI_IDENTITY_MAX 512
/* Longest name of a --lease, with its NUL: an etcd election name is at most
 * 400 bytes (k8slease.h), a Lease name 253. */
#define CLI_NAME_MAX 401
/* "NS/NAME" or an election name, with its NUL. */
#define CLI_LEASE_MAX (64 + CLI_NAME_MAX)

/* ---- flags ------------------------------------------------------------ */

/* One flag of a subcommand: "--name", an id > 0, and whether it takes a
 * value ("--name V" or "--name=V"). Tables end with {NULL}. */
typedef struct cli_opt {
    const char *name;
    int id;
    int has_value;
} cli_opt;

/* Return values of cli_next() besides a flag id. */
#define CLI_END  0  /* no more flags: end of argv or after "--" (p->i is the next argument) */
#define CLI_ARG  -1 /* a positional argument, in p->value (p->i is past it) */
#define CLI_STOP -2 /* --help, --version or a bad flag: return p->exit_code */

/* Flags every subcommand takes; cli_next() handles them itself, and
 * cli_backend_check() checks them together once all are parsed. */
typedef struct cli_common {
    const char *kubeconfig; /* --kubeconfig */
    const char *context;    /* --context */
    const char *ns;         /* --namespace: for --lease/--pod without "NS/" */
    k8slease_log_level log_level;
    k8slease_backend backend;        /* --backend k8s|etcd */
    const char *etcd_endpoints;      /* --etcd-endpoints, else $ETCDCTL_ENDPOINTS */
    const char *etcd_endpoints_from; /* "--etcd-endpoints" or "$ETCDCTL_ENDPOINTS" */
    const char *etcd_ca_file;        /* --etcd-cacert, else $ETCDCTL_CACERT */
    const char *etcd_cert_file;      /* --etcd-cert, else $ETCDCTL_CERT */
    const char *etcd_key_file;       /* --etcd-key, else $ETCDCTL_KEY */
    const char *etcd_username;       /* --etcd-user */
    const char *etcd_password_file;  /* --etcd-password-file */
    /* With --etcd-user: the password read from --etcd-password-file (a
     * buffer of common.c, wiped once the client is created) or
     * $K8SLEASE_ETCD_PASSWORD. Never printed. */
    const char *etcd_password;
    const char *k8s_flag;  /* the first Kubernetes-only flag given, or NULL */
    const char *etcd_flag; /* the first --etcd-* flag given, or NULL */
} cli_common;

typedef struct cli_parser {
    const char *cmd;   /* "k8slease elect", the prefix of every message */
    const char *usage; /* printed by --help */
    const cli_opt *opts;
    int argc;
    char **argv;
    int i;             /* next argument to look at */
    const char *flag;  /* the flag just returned (without "=value") */
    const char *value; /* its value, or the positional argument */
    int exit_code;     /* with CLI_STOP */
    cli_common common;
    char flagbuf[64];
} cli_parser;

/* argv[0] is the subcommand's name. */
void cli_parser_init(cli_parser *p, const char *cmd, const char *usage, const cli_opt *opts,
                     int argc, char **argv);
/* Next flag id, CLI_END, CLI_ARG or CLI_STOP (message printed). */
int cli_next(cli_parser *p);

/* Print "<cmd>: <flag> <value>: <rule>" and return CLI_USAGE. */
int cli_flag_error(const cli_parser *p, const char *fmt, ...) CLI_PRINTF(2, 3);
/* Print "<cmd>: <message>" and return CLI_USAGE. */
int cli_usage_error(const cli_parser *p, const char *fmt, ...) CLI_PRINTF(2, 3);

/* ---- flag values ------------------------------------------------------ */

/* Go-style duration ("500ms", "15s", "1m30s", "1.5s", "0") into ms, rounded
 * up to a whole ms. 0, or -1 when s is not a duration. */
int cli_parse_duration(const char *s, int64_t *ms);
/* The inverse, Go style: 1500 -> "1.5s", 90000 -> "1m30s", 500 -> "500ms". */
void cli_format_duration(char *buf, size_t size, int64_t ms);
/* Value of the current flag as a duration (in [min_ms, INT64_MAX]); 0 or
 * CLI_USAGE (message printed). */
int cli_duration_value(const cli_parser *p, int64_t min_ms, int64_t *ms);

/* A namespaced object named by a flag: "NS/NAME" or "NAME"; with etcd, an
 * election name (ns ""). */
typedef struct cli_ref {
    char ns[64];             /* "" until resolved: then --namespace or the client's */
    char name[CLI_NAME_MAX]; /* DNS subdomain (Kubernetes), any non-empty string (etcd) */
} cli_ref;

/* Parse the current flag's value; what is "lease" or "pod". 0 or CLI_USAGE. */
int cli_ref_value(const cli_parser *p, const char *what, cli_ref *ref);
/* The Pod this process runs in, for flag (e.g. "--crash-failover"), from
 * the Downward API's variables: name $POD_NAME (required), namespace
 * $POD_NAMESPACE (ref->ns "" when unset: the caller's default). An empty
 * variable counts as unset. 0 or CLI_USAGE (message printed, naming the
 * flag and the variable). */
int cli_pod_env(const cli_parser *p, const char *flag, cli_ref *ref);
/* Whether s is an RFC 1123 label (a namespace's or a container's name). */
int cli_is_dns_label(const char *s);
/* Parse value, given with --lease, once every flag is parsed (the rules
 * depend on --backend): a Kubernetes [NS/]NAME, or an etcd election name.
 * 0 or CLI_USAGE (message printed). */
int cli_lease_value(cli_parser *p, const char *value, cli_ref *ref);
/* Namespace to pass to the library: the ref's, --namespace, or NULL (the
 * client's; always NULL with etcd). */
const char *cli_ref_ns(const cli_ref *ref, const cli_common *c);
/* "NS/NAME" for messages, with the namespace the client resolved; with
 * etcd, the election name. */
void cli_ref_format(char *buf, size_t size, const cli_ref *ref, const cli_common *c,
                    const k8slease_client *client);
/* What a --lease names, for messages: "lease" or "election" (etcd). */
const char *cli_lease_noun(const cli_common *c);

/* Label key and value rules of Kubernetes; NULL when valid, else the rule. */
const char *cli_label_key_error(const char *key);
const char *cli_label_value_error(const char *value);

/* Identity: --identity, else $POD_NAME, else the host name; with unique,
 * "-<8 random hex digits>" appended. 0 or CLI_USAGE/CLI_ERROR (printed). */
int cli_identity(const cli_parser *p, const char *flag_value, int unique, char *out, size_t size);

/* Once every flag is parsed: check --backend against the other flags, take
 * the $ETCDCTL_* defaults, check that the etcd PEM files can be read, and
 * read the etcd password. k8s_only: NULL, or why this command refuses etcd
 * (its flags are then refused too). CLI_OK, CLI_USAGE or CLI_ERROR (a file
 * that cannot be read); message printed. */
int cli_backend_check(cli_parser *p, const char *k8s_only);
/* "k8s" or "etcd". */
const char *cli_backend_name(k8slease_backend b);

/* ---- runtime ---------------------------------------------------------- */

/* Client options from the common flags: logging to stderr at --log-level;
 * backend and etcd settings. */
void cli_client_options(const cli_common *c, k8slease_client_options *o);
/* Create the client from the common flags (after cli_backend_check). CLI_OK,
 * CLI_USAGE (etcd settings the library refused, e.g. a bad endpoint URL) or
 * CLI_ERROR (message printed). */
int cli_client_new(const cli_common *c, k8slease_client **client);

/* Messages of the CLI itself on stderr: "<cmd>: <message>", filtered by
 * --log-level (errors always shown). Any thread. */
void cli_log(k8slease_log_level level, const char *fmt, ...) CLI_PRINTF(2, 3);
#define cli_error(...) cli_log(K8SLEASE_LOG_ERROR, __VA_ARGS__)
#define cli_warn(...)  cli_log(K8SLEASE_LOG_WARN, __VA_ARGS__)
#define cli_info(...)  cli_log(K8SLEASE_LOG_INFO, __VA_ARGS__)
#define cli_debug(...) cli_log(K8SLEASE_LOG_DEBUG, __VA_ARGS__)
/* Always shown, like an error: for what the user must see (a bound port). */
void cli_notice(const char *fmt, ...) CLI_PRINTF(1, 2);

/* Exit code for a failed library call: CLI_NOTFOUND for K8SLEASE_ENOTFOUND,
 * else CLI_ERROR. */
int cli_exit_code(int err);

int64_t cli_now_ms(void);  /* CLOCK_MONOTONIC */
int64_t cli_now_ns(void);  /* CLOCK_MONOTONIC */
int64_t cli_wall_us(void); /* CLOCK_REALTIME */

/* RFC 3339 UTC: "2006-01-02T15:04:05.000000Z" (digits: 3 or 6). */
void cli_format_time(char *buf, size_t size, int64_t wall_us, int digits);

/* JSON string literal of s (quoted, escaped) on f. */
void cli_json_string(FILE *f, const char *s);

/* A field of an event line: a string, or (s == NULL) a number. */
typedef struct cli_field {
    const char *key;
    const char *s;
    int64_t n;
} cli_field;

/* One event line, flushed: text "[prefix]EVENT k=v ..." (EVENT left out
 * when show_event is 0), or with json {"time":"...","event":"EVENT",k:v,...}.
 * 0, or -1 when f cannot be written (a closed pipe). */
int cli_emit(FILE *f, int json, const char *prefix, const char *event, int show_event,
             const cli_field *fields, size_t n);
/* The holder event of elect and watch: "leader=ID epoch=N", "released
 * epoch=N" (no holder), or "absent" (epoch -1: no such Lease). */
int cli_emit_holder(FILE *f, int json, const char *prefix, const char *identity, int64_t epoch);

/* ---- subcommands ------------------------------------------------------ */

int cli_elect(int argc, char **argv);
int cli_holder(int argc, char **argv);
int cli_watch(int argc, char **argv);
int cli_release(int argc, char **argv);
int cli_handoff(int argc, char **argv);
int cli_label(int argc, char **argv);
int cli_demo(int argc, char **argv);

#endif
