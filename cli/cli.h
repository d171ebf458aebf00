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

/* Flags every subcommand takes; cli_next() handles them itself. */
typedef struct cli_common {
    const char *kubeconfig; /* --kubeconfig */
    const char *context;    /* --context */
    const char *ns;         /* --namespace: for --lease/--pod without "NS/" */
    k8slease_log_level log_level;
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

/* A namespaced object named by a flag: "NS/NAME" or "NAME". */
typedef struct cli_ref {
    char ns[64];    /* "" until resolved: then --namespace or the client's */
    char name[254]; /* DNS subdomain */
} cli_ref;

/* Parse the current flag's value; what is "lease" or "pod". 0 or CLI_USAGE. */
int cli_ref_value(const cli_parser *p, const char *what, cli_ref *ref);
/* Namespace to pass to the library: the ref's, --namespace, or NULL (the
 * client's). */
const char *cli_ref_ns(const cli_ref *ref, const cli_common *c);
/* "NS/NAME" for messages, with the namespace the client resolved. */
void cli_ref_format(char *buf, size_t size, const cli_ref *ref, const cli_common *c,
                    const k8slease_client *client);

/* Label key and value rules of Kubernetes; NULL when valid, else the rule. */
const char *cli_label_key_error(const char *key);
const char *cli_label_value_error(const char *value);

/* Identity: --identity, else $POD_NAME, else the host name; with unique,
 * "-<8 random hex digits>" appended. 0 or CLI_USAGE/CLI_ERROR (printed). */
int cli_identity(const cli_parser *p, const char *flag_value, int unique, char *out, size_t size);

/* ---- runtime ---------------------------------------------------------- */

/* Client options from the common flags: logging to stderr at --log-level. */
void cli_client_options(const cli_common *c, k8slease_client_options *o);
/* Create the client from the common flags. CLI_OK or CLI_ERROR (message
 * printed). */
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
int cli_label(int argc, char **argv);
int cli_demo(int argc, char **argv);

#endif
