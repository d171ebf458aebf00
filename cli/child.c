/* Supervision of CMD; see child.h. */
/* For posix_spawn_file_actions_addclosefrom_np() (glibc 2.34). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "child.h"
#include "cli.h"

extern char **environ;

/* Descriptors above this one were opened by us or the library (libcurl's
 * sockets are not close-on-exec): CMD gets only what we inherited. */
static int inherited_max = 2;

void cli_child_note_inherited_fds(void)
{
    for (int fd = 3; fd < 4096; fd++)
        if (fcntl(fd, F_GETFD) != -1)
            inherited_max = fd;
}

/* environ without the variables env sets, then env; NULL on ENOMEM. */
static char **merge_env(char *const env[])
{
    size_t n = 0, m = 0, k = 0;
    char **out;

    while (environ && environ[n])
        n++;
    while (env[m])
        m++;
    if (!(out = calloc(n + m + 1, sizeof(*out))))
        return NULL;
    for (size_t i = 0; i < n; i++) {
        size_t name_len = strcspn(environ[i], "=");
        int replaced = 0;

        for (size_t j = 0; j < m && !replaced; j++)
            replaced = strncmp(environ[i], env[j], name_len) == 0 && env[j][name_len] == '=';
        if (!replaced)
            out[k++] = environ[i];
    }
    for (size_t j = 0; j < m; j++)
        out[k++] = env[j];
    out[k] = NULL;
    return out;
}

int cli_child_start(cli_child *c, char *const argv[], char *const env[])
{
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attr;
    sigset_t mask, def;
    char **envp;
    pid_t pid;
    int err;

    memset(c, 0, sizeof(*c));
    if (!(envp = merge_env(env)))
        return ENOMEM;
    /* Handlers are reset by exec anyway; of what we ignore, only SIGPIPE
     * is ours to undo (an ignored SIGHUP, say from nohup, stays ignored). */
    sigemptyset(&mask);
    sigemptyset(&def);
    sigaddset(&def, SIGPIPE);
    posix_spawnattr_init(&attr);
    /* posix_spawn, not fork + setenv + exec: after fork in a threaded
     * process only async-signal-safe calls are allowed. */
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                        POSIX_SPAWN_SETSIGDEF);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setsigmask(&attr, &mask);
    posix_spawnattr_setsigdefault(&attr, &def);
    posix_spawn_file_actions_init(&actions);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 34)
    posix_spawn_file_actions_addclosefrom_np(&actions, inherited_max + 1);
#endif
    err = posix_spawnp(&pid, argv[0], &actions, &attr, argv, envp);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    free(envp);
    if (err == 0)
        c->pid = pid;
    return err;
}

void cli_child_terminate(cli_child *c, int64_t grace_ms)
{
    if (!c->pid || c->terminating)
        return;
    c->terminating = 1;
    c->kill_at = cli_now_ms() + grace_ms;
    kill(-c->pid, SIGTERM);
}

void cli_child_kill(cli_child *c)
{
    if (!c->pid || c->killed)
        return;
    c->terminating = c->killed = 1;
    kill(-c->pid, SIGKILL);
}

int cli_child_tick(cli_child *c)
{
    if (!c->pid || !c->terminating || c->killed || cli_now_ms() < c->kill_at)
        return 0;
    cli_child_kill(c);
    return 1;
}

int64_t cli_child_timeout(const cli_child *c)
{
    int64_t left;

    if (!c->pid || !c->terminating || c->killed)
        return -1;
    left = c->kill_at - cli_now_ms();
    return left > 0 ? left : 0;
}

int cli_child_reap(cli_child *c, int block, int *status)
{
    siginfo_t info;

    if (!c->pid)
        return 0;
    /* Look without reaping: while CMD is a zombie its pid, hence its
     * process group id, cannot be reused, so the kill below cannot hit a
     * stranger. */
    memset(&info, 0, sizeof(info));
    while (waitid(P_PID, (id_t)c->pid, &info, WEXITED | WNOWAIT | (block ? 0 : WNOHANG)) != 0)
        if (errno != EINTR)
            return 0;
    if (info.si_pid == 0)
        return 0;
    kill(-c->pid, SIGKILL);
    while (waitpid(c->pid, status, 0) < 0 && errno == EINTR)
        ;
    c->pid = 0;
    return 1;
}

int cli_child_exit_code(int status)
{
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return CLI_ERROR;
}
