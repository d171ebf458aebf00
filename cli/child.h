/* Supervision of the command `k8slease elect -- CMD` runs while leader.
 * CMD gets a process group of its own: stopping it signals the group, so a
 * shell script's children stop too, and whatever is left of the group when
 * CMD exits is killed (nothing of it may outlive the term). */
#ifndef K8SLEASE_CLI_CHILD_H
#define K8SLEASE_CLI_CHILD_H

#include <stdint.h>
#include <sys/types.h>

typedef struct cli_child {
    pid_t pid;       /* also its process group; 0 when not running */
    int terminating; /* SIGTERM sent */
    int killed;      /* SIGKILL sent */
    int64_t kill_at; /* monotonic ms of the SIGKILL once terminating */
} cli_child;

/* Remember which descriptors k8slease inherited: only those are passed on
 * to CMD. Call it first thing, before any thread or file is opened. */
void cli_child_note_inherited_fds(void);

/* Start argv[0] (searched in $PATH) with argv, the environment plus env
 * ("NAME=VALUE" strings, replacing variables of the same name; NULL-
 * terminated), SIGPIPE back to default and an empty signal mask.
 * 0, or an errno value. */
int cli_child_start(cli_child *c, char *const argv[], char *const env[]);

/* SIGTERM to the group now and SIGKILL grace_ms later (see
 * cli_child_tick). Does nothing if not running or already terminating. */
void cli_child_terminate(cli_child *c, int64_t grace_ms);

/* SIGKILL to the group now. */
void cli_child_kill(cli_child *c);

/* Send the SIGKILL if due; 1 when it was sent now. */
int cli_child_tick(cli_child *c);

/* ms until cli_child_tick has something to do, -1 if never. */
int64_t cli_child_timeout(const cli_child *c);

/* If CMD has exited (with block: once it has): kill the rest of its
 * group, reap it, set *status (as waitpid) and return 1; else 0. */
int cli_child_reap(cli_child *c, int block, int *status);

/* A wait status as a shell would report it: the exit code, or 128 + the
 * signal number. */
int cli_child_exit_code(int status);

#endif
