/* Credentials: exec credential plugins (run the command a rest config
 * names, the way client-go does: KUBERNETES_EXEC_INFO, stdin /dev/null, a
 * time limit; parse the ExecCredential it prints), and the credentials of a
 * loop's requests (kl__creds), whose plugin runs on a thread of its own. */
#include "core/credential.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "core/clock.h"
#include "core/common.h"
#include "core/text.h"

/* POSIX leaves declaring environ to the application. */
extern char **environ;

#define EXEC_STDOUT_MAX         (1u << 20)
#define EXEC_STDERR_MAX         200
#define EXEC_TIMEOUT_MS_DEFAULT 30000

static _Atomic int64_t exec_timeout_ms = EXEC_TIMEOUT_MS_DEFAULT;

static int nomem(void)
{
    return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
}

int kl__exec_api_supported(const char *api_version)
{
    return api_version &&
           (!strcmp(api_version, KL_EXEC_API_V1) || !strcmp(api_version, KL_EXEC_API_V1BETA1));
}

void kl__exec_set_timeout_ms(int64_t ms)
{
    exec_timeout_ms = ms > 0 ? ms : EXEC_TIMEOUT_MS_DEFAULT;
}

static int parse_digits(const char **p, int n, int *out)
{
    *out = 0;
    for (; n > 0; n--, (*p)++) {
        if (**p < '0' || **p > '9')
            return 0;
        *out = *out * 10 + (**p - '0');
    }
    return 1;
}

static int days_in_month(int y, int m)
{
    static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;

    return days[m - 1] + (m == 2 && leap);
}

/* RFC 3339 date-time to µs since the epoch; -1 if malformed. */
static int parse_rfc3339(const char *s, int64_t *out_us)
{
    const char *p = s;
    int y, mo, d, h, mi, sec, oh = 0, om = 0, sign = 0;
    int64_t frac_us = 0, scale = 100000, secs;

    if (!parse_digits(&p, 4, &y) || *p++ != '-' || !parse_digits(&p, 2, &mo) || *p++ != '-' ||
        !parse_digits(&p, 2, &d) || (*p != 'T' && *p != 't'))
        return -1;
    p++;
    if (!parse_digits(&p, 2, &h) || *p++ != ':' || !parse_digits(&p, 2, &mi) || *p++ != ':' ||
        !parse_digits(&p, 2, &sec))
        return -1;
    if (*p == '.') {
        p++;
        if (*p < '0' || *p > '9')
            return -1;
        for (; *p >= '0' && *p <= '9'; p++, scale /= 10)
            frac_us += (*p - '0') * scale;
    }
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        sign = *p++ == '-' ? -1 : 1;
        if (!parse_digits(&p, 2, &oh) || *p++ != ':' || !parse_digits(&p, 2, &om))
            return -1;
    } else {
        return -1;
    }
    if (*p || mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 ||
        sec > 59 || oh > 23 || om > 59)
        return -1;
    secs = kl__days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec;
    secs -= sign * (oh * 3600 + om * 60);
    *out_us = secs * 1000000 + frac_us;
    return 0;
}

/* status.<key>: a string (kept unless ""), or absent/null. */
static int cred_str(json_t *status, const char *key, char **out)
{
    json_t *v = json_object_get(status, key);

    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return kl__error_set(K8SLEASE_ECONFIG, "ExecCredential: status.%s: expected a string", key);
    if (json_string_length(v) && !(*out = kl__strdup(json_string_value(v))))
        return nomem();
    return 0;
}

int kl__exec_credential_parse(const char *json, size_t len, const char *expected_api_version,
                              kl__exec_credential *out)
{
    json_error_t jerr;
    json_t *root = NULL, *status;
    char *expiry = NULL;
    const char *api, *kind;
    int err = 0;

    memset(out, 0, sizeof(*out));
    if (!(root = json_loadb(json, len, 0, &jerr))) {
        if (json_error_code(&jerr) == json_error_out_of_memory)
            err = nomem();
        else
            err = kl__error_set(K8SLEASE_ECONFIG,
                                "ExecCredential: invalid JSON: line %d column %d: %s", jerr.line,
                                jerr.column, jerr.text);
        goto out;
    }
    if (!json_is_object(root)) {
        err = kl__error_set(K8SLEASE_ECONFIG, "ExecCredential: expected a JSON object");
        goto out;
    }
    api = json_string_value(json_object_get(root, "apiVersion"));
    kind = json_string_value(json_object_get(root, "kind"));
    if (!kl__exec_api_supported(api)) {
        err = kl__error_set(K8SLEASE_ECONFIG, "ExecCredential: apiVersion: \"%s\" is not supported",
                            api ? api : "");
        goto out;
    }
    if (expected_api_version && strcmp(api, expected_api_version) != 0) {
        err = kl__error_set(K8SLEASE_ECONFIG,
                            "ExecCredential: apiVersion: \"%s\" does not match the configured "
                            "\"%s\"",
                            api, expected_api_version);
        goto out;
    }
    if (!kind || strcmp(kind, "ExecCredential") != 0) {
        err = kl__error_set(K8SLEASE_ECONFIG, "ExecCredential: kind: \"%s\" is not ExecCredential",
                            kind ? kind : "");
        goto out;
    }
    if (!json_is_object(status = json_object_get(root, "status"))) {
        err = kl__error_set(K8SLEASE_ECONFIG, "ExecCredential: status: missing");
        goto out;
    }
    if ((err = cred_str(status, "token", &out->token)) < 0 ||
        (err = cred_str(status, "clientCertificateData", &out->cert_pem)) < 0 ||
        (err = cred_str(status, "clientKeyData", &out->key_pem)) < 0 ||
        (err = cred_str(status, "expirationTimestamp", &expiry)) < 0)
        goto out;
    if (expiry && parse_rfc3339(expiry, &out->expiry_us) < 0) {
        err = kl__error_set(K8SLEASE_ECONFIG,
                            "ExecCredential: status.expirationTimestamp: \"%s\" is not an RFC "
                            "3339 time",
                            expiry);
        goto out;
    }
    if (!out->cert_pem != !out->key_pem) {
        err = kl__error_set(K8SLEASE_ECONFIG, "ExecCredential: status: clientCertificateData and "
                                              "clientKeyData must be set together");
        goto out;
    }
    if (!out->token && !out->cert_pem) {
        err = kl__error_set(K8SLEASE_ECONFIG, "ExecCredential: status: neither token nor "
                                              "clientCertificateData/clientKeyData is set");
        goto out;
    }
out:
    json_decref(root);
    kl__free(expiry);
    if (err < 0)
        kl__exec_credential_clear(out);
    return err;
}

/* Free a string that may hold a credential, wiped first. Accepts NULL. */
static void free_secret(char *s)
{
    if (s)
        kl__wipe(s, strlen(s));
    kl__free(s);
}

void kl__exec_credential_clear(kl__exec_credential *cred)
{
    if (!cred)
        return;
    free_secret(cred->token);
    free_secret(cred->cert_pem);
    free_secret(cred->key_pem);
    memset(cred, 0, sizeof(*cred));
}

/* environ minus what the plugin config overrides, then the plugin's env,
 * then info. The strings are borrowed; only the array is allocated. */
static char **build_env(const kl__exec_config *exec, char *info)
{
    size_t n = 2, i = 0;
    char **envp, **e, **x;

    for (e = environ; e && *e; e++)
        n++;
    for (x = exec->env; x && *x; x++)
        n++;
    if (!(envp = kl__calloc(n, sizeof(*envp))))
        return NULL;
    for (e = environ; e && *e; e++) {
        size_t name_len = strcspn(*e, "=");
        int overridden = !strncmp(*e, "KUBERNETES_EXEC_INFO=", name_len + 1);

        for (x = exec->env; !overridden && x && *x; x++)
            overridden = !strncmp(*x, *e, name_len + 1);
        if (!overridden)
            envp[i++] = *e;
    }
    for (x = exec->env; x && *x; x++)
        envp[i++] = *x;
    envp[i] = info;
    return envp;
}

static char **build_argv(const kl__exec_config *exec)
{
    size_t n = 2, i = 0;
    char **argv, **a;

    for (a = exec->args; a && *a; a++)
        n++;
    if (!(argv = kl__calloc(n, sizeof(*argv))))
        return NULL;
    argv[i++] = exec->command;
    for (a = exec->args; a && *a; a++)
        argv[i++] = *a;
    return argv;
}

static int make_pipe(int fds[2])
{
    if (pipe(fds) < 0)
        return -1;
    fcntl(fds[0], F_SETFD, FD_CLOEXEC);
    fcntl(fds[1], F_SETFD, FD_CLOEXEC);
    return 0;
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* Collects the plugin's stdout (capped) and the head of its stderr until
 * both close, then reaps it (*pid = -1), all before the deadline, unless
 * cancel_fd (-1: none) becomes readable first. */
static int exec_collect(const char *cmd, int cancel_fd, pid_t *pid, int *out_fd, int *err_fd,
                        kl__buf *sout, char *serr, size_t *serr_len, int *status)
{
    int *fds[2] = {out_fd, err_fd};
    int64_t deadline = kl__clock_mono_ns() + exec_timeout_ms * KL_NS_PER_MS;
    char chunk[4096], ebuf[128];

    for (;;) {
        struct pollfd pfd[3];
        int64_t left = deadline - kl__clock_mono_ns();
        int nfds = 0, i, rc, wait_ms;

        if (left <= 0)
            return kl__error_set(K8SLEASE_ECONFIG, "exec plugin \"%s\": timed out after %lld ms",
                                 cmd, (long long)exec_timeout_ms);
        wait_ms = left / KL_NS_PER_MS + 1 > INT_MAX ? INT_MAX : (int)(left / KL_NS_PER_MS + 1);
        if (*out_fd < 0 && *err_fd < 0) {
            pid_t r = waitpid(*pid, status, WNOHANG);

            if (r == *pid) {
                *pid = -1;
                return 0;
            }
            if (r < 0 && errno != EINTR)
                return kl__error_set(K8SLEASE_ECONFIG, "exec plugin \"%s\": waitpid: %s", cmd,
                                     kl__strerror(errno, ebuf, sizeof(ebuf)));
            /* Output closed but not exited yet: usually a matter of
             * microseconds, so a short nap beats a SIGCHLD handler. */
            poll(NULL, 0, wait_ms < 2 ? wait_ms : 2);
            continue;
        }
        for (i = 0; i < 2; i++) {
            if (*fds[i] >= 0) {
                pfd[nfds].fd = *fds[i];
                pfd[nfds].events = POLLIN;
                pfd[nfds].revents = 0;
                nfds++;
            }
        }
        pfd[nfds].fd = cancel_fd; /* ignored when negative */
        pfd[nfds].events = POLLIN;
        pfd[nfds].revents = 0;
        rc = poll(pfd, (nfds_t)nfds + 1, wait_ms);
        if (rc < 0 && errno != EINTR)
            return kl__error_set(K8SLEASE_ECONFIG, "exec plugin \"%s\": poll: %s", cmd,
                                 kl__strerror(errno, ebuf, sizeof(ebuf)));
        if (rc > 0 && pfd[nfds].revents)
            return kl__error_set(K8SLEASE_ECONFIG, "exec plugin \"%s\": cancelled", cmd);
        for (i = 0; rc > 0 && i < nfds; i++) {
            int *fd = pfd[i].fd == *out_fd ? out_fd : err_fd;
            ssize_t n;

            if (!pfd[i].revents)
                continue;
            n = read(*fd, chunk, sizeof(chunk));
            if (n < 0 && (errno == EINTR || errno == EAGAIN))
                continue;
            if (n <= 0) {
                close_fd(fd);
            } else if (fd == out_fd) {
                if (sout->len + (size_t)n > EXEC_STDOUT_MAX)
                    return kl__error_set(K8SLEASE_ECONFIG,
                                         "exec plugin \"%s\": output exceeds %u bytes", cmd,
                                         EXEC_STDOUT_MAX);
                if (kl__buf_append(sout, chunk, (size_t)n) < 0)
                    return nomem();
            } else if (*serr_len < EXEC_STDERR_MAX) {
                size_t take = (size_t)n < EXEC_STDERR_MAX - *serr_len ? (size_t)n
                                                                      : EXEC_STDERR_MAX - *serr_len;

                memcpy(serr + *serr_len, chunk, take);
                *serr_len += take;
            }
        }
    }
}

/* 0 when path is an executable regular file, else an errno value. */
static int check_executable(const char *path)
{
    struct stat st;

    if (stat(path, &st) < 0)
        return errno;
    if (S_ISDIR(st.st_mode))
        return EACCES;
    return access(path, X_OK) < 0 ? errno : 0;
}

/* The PATH search of execvp, done here so that "not found" is reported the
 * same way whatever posix_spawn does (under valgrind, say, a failed exec in
 * the child only shows as exit status 127). */
static int find_executable(const char *cmd, char **out)
{
    const char *path = getenv("PATH"), *p, *end;
    char ebuf[128];
    int e = ENOENT, e_dir;

    *out = NULL;
    if (strchr(cmd, '/')) {
        if ((e = check_executable(cmd)) == 0 && !(*out = kl__strdup(cmd)))
            return nomem();
    } else {
        for (p = path && *path ? path : "/usr/local/bin:/usr/bin:/bin"; !*out; p = end + 1) {
            end = strchr(p, ':');
            if (!end)
                end = p + strlen(p);
            /* An empty entry is the current directory. */
            if (!(*out = kl__sprintf("%.*s%s%s", (int)(end - p), p, end > p ? "/" : "", cmd)))
                return nomem();
            /* As execvp: report EACCES if that is all we found. */
            if ((e_dir = check_executable(*out)) != 0) {
                if (e_dir != ENOENT && e_dir != ENOTDIR)
                    e = e_dir;
                kl__free(*out);
                *out = NULL;
            }
            if (!*end)
                break;
        }
    }
    if (!*out)
        return kl__error_set(K8SLEASE_ECONFIG, "exec plugin \"%s\": cannot run: %s", cmd,
                             kl__strerror(e, ebuf, sizeof(ebuf)));
    return 0;
}

/* posix_spawn rather than fork: the caller may be multi-threaded, and a
 * forked child must not touch malloc locks held by another thread. */
static int spawn_plugin(const kl__exec_config *exec, const char *file, char **argv, char **envp,
                        int out_fd, int err_fd, pid_t *pid)
{
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attr;
    sigset_t sigs;
    char ebuf[128];
    int rc, have_actions = 0, have_attr = 0;

    *pid = -1;
    if ((rc = posix_spawn_file_actions_init(&actions)) != 0)
        goto out;
    have_actions = 1;
    if ((rc = posix_spawnattr_init(&attr)) != 0)
        goto out;
    have_attr = 1;
    /* The host may block signals or ignore SIGPIPE; the plugin should not
     * inherit that. */
    sigemptyset(&sigs);
    if ((rc = posix_spawnattr_setsigmask(&attr, &sigs)) != 0)
        goto out;
    sigaddset(&sigs, SIGPIPE);
    if ((rc = posix_spawnattr_setsigdefault(&attr, &sigs)) != 0 ||
        (rc = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF)) !=
            0 ||
        (rc = posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)) != 0 ||
        (rc = posix_spawn_file_actions_adddup2(&actions, out_fd, 1)) != 0 ||
        (rc = posix_spawn_file_actions_adddup2(&actions, err_fd, 2)) != 0)
        goto out;
    if ((rc = posix_spawn(pid, file, &actions, &attr, argv, envp)) != 0)
        *pid = -1;
out:
    if (have_actions)
        posix_spawn_file_actions_destroy(&actions);
    if (have_attr)
        posix_spawnattr_destroy(&attr);
    if (rc != 0)
        return kl__error_set(K8SLEASE_ECONFIG, "exec plugin \"%s\": cannot run: %s", exec->command,
                             kl__strerror(rc, ebuf, sizeof(ebuf)));
    return 0;
}

static int exec_run(const kl__exec_config *exec, int cancel_fd, kl__exec_credential *out)
{
    char **argv = NULL, **envp = NULL, *info = NULL, *file = NULL;
    char serr[EXEC_STDERR_MAX + 1], ebuf[128];
    int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
    int err = 0, status = 0;
    size_t serr_len = 0;
    kl__buf sout = {0};
    pid_t pid = -1;

    memset(out, 0, sizeof(*out));
    if (!exec || !exec->command || !*exec->command)
        return kl__error_set(K8SLEASE_ECONFIG, "exec plugin: no command");
    if (!kl__exec_api_supported(exec->api_version))
        return kl__error_set(K8SLEASE_ECONFIG,
                             "exec plugin \"%s\": apiVersion \"%s\" is not supported",
                             exec->command, exec->api_version ? exec->api_version : "");
    /* api_version is one of two constants: nothing to escape. */
    if (!(info = kl__sprintf("KUBERNETES_EXEC_INFO={\"apiVersion\":\"%s\",\"kind\":"
                             "\"ExecCredential\",\"spec\":{\"interactive\":false}}",
                             exec->api_version)) ||
        !(argv = build_argv(exec)) || !(envp = build_env(exec, info))) {
        err = nomem();
        goto out;
    }
    if (make_pipe(out_pipe) < 0 || make_pipe(err_pipe) < 0) {
        err = kl__error_set(K8SLEASE_ECONFIG, "exec plugin \"%s\": pipe: %s", exec->command,
                            kl__strerror(errno, ebuf, sizeof(ebuf)));
        goto out;
    }
    if ((err = find_executable(exec->command, &file)) < 0 ||
        (err = spawn_plugin(exec, file, argv, envp, out_pipe[1], err_pipe[1], &pid)) < 0)
        goto out;
    /* Our copies of the write ends would keep EOF from ever arriving. */
    close_fd(&out_pipe[1]);
    close_fd(&err_pipe[1]);
    if ((err = exec_collect(exec->command, cancel_fd, &pid, &out_pipe[0], &err_pipe[0], &sout, serr,
                            &serr_len, &status)) < 0)
        goto out;

    serr[serr_len] = '\0';
    kl__trim(serr);
    if (WIFSIGNALED(status)) {
        err = kl__error_set(K8SLEASE_ECONFIG, "exec plugin \"%s\": killed by signal %d%s%s",
                            exec->command, WTERMSIG(status), *serr ? ": " : "", serr);
        goto out;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        err = kl__error_set(K8SLEASE_ECONFIG, "exec plugin \"%s\": exited with status %d%s%s",
                            exec->command, WEXITSTATUS(status), *serr ? ": " : "", serr);
        goto out;
    }
    err = kl__exec_credential_parse(sout.data ? sout.data : "", sout.len, exec->api_version, out);
    if (err == K8SLEASE_ECONFIG)
        kl__error_wrap(err, "exec plugin \"%s\"", exec->command);
out:
    if (pid > 0) {
        kill(pid, SIGKILL);
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
    }
    close_fd(&out_pipe[0]);
    close_fd(&out_pipe[1]);
    close_fd(&err_pipe[0]);
    close_fd(&err_pipe[1]);
    kl__wipe(sout.data, sout.len);
    kl__buf_free(&sout);
    kl__free(argv);
    kl__free(envp);
    kl__free(info);
    kl__free(file);
    return err;
}

int kl__exec_credential_run(const kl__exec_config *exec, kl__exec_credential *out)
{
    return exec_run(exec, -1, out);
}

/* ------------------------------------------------------------------------ */
/* The credentials of a loop                                                */
/* ------------------------------------------------------------------------ */

#define TOKEN_FILE_MAX (64 * 1024)
/* Bound service-account tokens rotate; client-go re-reads them every minute. */
#define TOKEN_REREAD_NS (60 * KL_NS_PER_S)
/* Run the exec plugin this long before its credentials expire, so that a
 * request never leaves with a token that dies on the way, and the new one
 * is there before the old one goes. */
#define EXEC_EARLY_US INT64_C(30000000)
/* After a failed run: the next run (meanwhile the current credentials
 * hold, or the requests fail with its error). */
#define EXEC_RETRY_NS (5 * KL_NS_PER_S)
#define AUTH_PREFIX   "Authorization: "

/* One run of the exec plugin, on a thread of its own. The thread writes
 * done_fd when it has finished; the loop thread then joins it. */
typedef struct exec_job {
    pthread_t thread;
    const kl__exec_config *exec; /* the kl__creds' own: it outlives the thread */
    int done_fd;                 /* eventfd the loop watches */
    int cancel_fd;               /* eventfd: kl__creds_free ends the run */
    int64_t started_at;          /* monotonic ns */
    /* The thread's, until it writes done_fd. */
    int err;
    char errmsg[1024];
    kl__exec_credential cred;
} exec_job;

struct kl__creds {
    const kl__log *log;
    kl__creds_cb ready;
    void *arg;
    char *token; /* the static token, or the token file's */
    char *token_file;
    int64_t token_read_at; /* monotonic ns */
    kl__exec_config *exec;
    kl__exec_credential cred; /* the plugin's current credentials */
    int have_cred;
    unsigned gen;
    int stale;  /* refused: refresh before the next request */
    char *line; /* the Authorization line of line_gen, NULL: none built */
    unsigned line_gen;
    kl__loop *loop;    /* of the plugin's runs */
    exec_job *job;     /* the run under way, NULL: none */
    int64_t failed_at; /* monotonic ns of the last failed run, 0: none since a good one */
    char *failure;     /* its message */
};

static int read_token_file(const char *path, char **out)
{
    kl__buf b = {0};
    char chunk[4096], why[128];
    FILE *f = fopen(path, "re"); /* close-on-exec */
    size_t n, start = 0, end;
    int err = 0;

    *out = NULL;
    if (!f)
        return kl__error_set(K8SLEASE_ECONFIG, "token file %s: %s", path,
                             kl__strerror(errno, why, sizeof(why)));
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        if (b.len + n > TOKEN_FILE_MAX) {
            err = kl__error_set(K8SLEASE_ECONFIG, "token file %s: larger than %d bytes", path,
                                TOKEN_FILE_MAX);
            goto out;
        }
        if ((err = kl__buf_append(&b, chunk, n)) < 0) {
            kl__error_set(err, "out of memory");
            goto out;
        }
    }
    if (ferror(f)) {
        err = kl__error_set(K8SLEASE_ECONFIG, "token file %s: read error", path);
        goto out;
    }
    end = b.len;
    while (start < end && strchr(" \t\r\n", b.data[start]))
        start++;
    while (end > start && strchr(" \t\r\n", b.data[end - 1]))
        end--;
    if (start == end) {
        err = kl__error_set(K8SLEASE_ECONFIG, "token file %s: empty", path);
        goto out;
    }
    if (!(*out = kl__strndup(b.data + start, end - start)))
        err = kl__error_set(K8SLEASE_ENOMEM, "out of memory");
out:
    fclose(f);
    kl__wipe(chunk, sizeof(chunk));
    kl__wipe(b.data, b.len);
    kl__buf_free(&b);
    return err;
}

static int refresh_token_file(kl__creds *c, int64_t now)
{
    char *token = NULL;
    int err;

    if (c->token && !c->stale && now - c->token_read_at < TOKEN_REREAD_NS)
        return 0;
    c->stale = 0;
    c->token_read_at = now;
    if ((err = read_token_file(c->token_file, &token)) < 0) {
        if (!c->token)
            return err;
        kl__log_printf(c->log, K8SLEASE_LOG_WARN, "%s; keeping the previous token",
                       kl__error_get());
        return 0;
    }
    if (c->token && strcmp(c->token, token) == 0) {
        free_secret(token);
        return 0;
    }
    free_secret(c->token);
    c->token = token;
    c->gen++;
    return 0;
}

/* The Authorization line for token, built once per generation. */
static int line_of(kl__creds *c, const char *token, const char **line)
{
    *line = NULL;
    if (!token)
        return 0;
    if (!c->line || c->line_gen != c->gen) {
        free_secret(c->line);
        if (!(c->line = kl__sprintf(AUTH_PREFIX "Bearer %s", token)))
            return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
        c->line_gen = c->gen;
    }
    *line = c->line;
    return 0;
}

static void *job_main(void *arg)
{
    exec_job *j = arg;

    if ((j->err = exec_run(j->exec, j->cancel_fd, &j->cred)) < 0)
        snprintf(j->errmsg, sizeof(j->errmsg), "%s", kl__error_get());
    /* The loop joins the thread when it sees this. */
    (void)!eventfd_write(j->done_fd, 1);
    return NULL;
}

static void job_free(exec_job *j)
{
    if (!j)
        return;
    if (j->done_fd >= 0)
        close(j->done_fd);
    if (j->cancel_fd >= 0)
        close(j->cancel_fd);
    kl__exec_credential_clear(&j->cred);
    kl__free(j);
}

static void on_job_done(int fd, uint32_t events, void *arg);

/* Start a run of the plugin. Error set when it cannot start. */
static int job_start(kl__creds *c, kl__loop *loop)
{
    exec_job *j = kl__calloc(1, sizeof(*j));
    int rc, err;

    if (!j)
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    j->exec = c->exec;
    j->started_at = kl__loop_now(loop);
    j->cancel_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if ((j->done_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0 || j->cancel_fd < 0) {
        err = kl__error_set(K8SLEASE_ENOMEM, "exec plugin \"%s\": eventfd: error %d",
                            c->exec->command, errno);
        goto fail;
    }
    if ((err = kl__loop_watch(loop, j->done_fd, EPOLLIN, on_job_done, c)) < 0)
        goto fail;
    if ((rc = kl__thread_start(&j->thread, job_main, j)) != 0) {
        kl__loop_unwatch(loop, j->done_fd);
        err = kl__error_set(K8SLEASE_ENOMEM, "exec plugin \"%s\": cannot start a thread: error %d",
                            c->exec->command, rc);
        goto fail;
    }
    c->loop = loop;
    c->job = j;
    kl__log_printf(c->log, K8SLEASE_LOG_DEBUG, "exec plugin \"%s\": running", c->exec->command);
    return 0;
fail:
    job_free(j);
    return err;
}

/* The plugin's run ended: its credentials replace the current ones; a
 * failure keeps them (until they expire). */
static void on_job_done(int fd, uint32_t events, void *arg)
{
    kl__creds *c = arg;
    exec_job *j = c->job;
    int64_t wall = kl__clock_wall_us();

    (void)events;
    kl__loop_unwatch(c->loop, fd);
    pthread_join(j->thread, NULL);
    c->job = NULL;
    c->stale = 0;
    if (j->err == 0) {
        kl__exec_credential_clear(&c->cred);
        c->cred = j->cred;
        memset(&j->cred, 0, sizeof(j->cred));
        c->have_cred = 1;
        c->gen++;
        c->failed_at = 0;
        kl__free(c->failure);
        c->failure = NULL;
        kl__log_printf(c->log, K8SLEASE_LOG_DEBUG,
                       "exec plugin \"%s\": new credentials after %lld ms", c->exec->command,
                       (long long)((kl__loop_now(c->loop) - j->started_at) / KL_NS_PER_MS));
    } else {
        c->failed_at = kl__loop_now(c->loop);
        kl__free(c->failure);
        c->failure = kl__strdup(j->errmsg); /* NULL: kl__creds_get says "out of memory" */
        if (c->have_cred && (c->cred.expiry_us == 0 || wall < c->cred.expiry_us))
            kl__log_printf(c->log, K8SLEASE_LOG_WARN,
                           "%s; keeping the previous credentials until they expire", j->errmsg);
    }
    job_free(j);
    c->ready(c->arg);
}

static int exec_get(kl__creds *c, kl__loop *loop, const char **line)
{
    int64_t wall = kl__clock_wall_us(), now = kl__loop_now(loop);
    int64_t expiry = c->cred.expiry_us;
    int valid = c->have_cred && (expiry == 0 || wall < expiry);
    int due = !valid || c->stale || (expiry != 0 && wall >= expiry - EXEC_EARLY_US);
    int err;

    /* A run that failed is not tried again for a while: the current
     * credentials hold meanwhile, or the requests fail with its error. */
    if (due && !c->job && (!c->failed_at || now - c->failed_at >= EXEC_RETRY_NS)) {
        if ((err = job_start(c, loop)) < 0) {
            c->failed_at = now;
            kl__free(c->failure);
            c->failure = kl__strdup(kl__error_get()); /* NULL: "out of memory" below */
            if (valid)
                kl__log_printf(c->log, K8SLEASE_LOG_WARN,
                               "%s; keeping the previous credentials until they expire",
                               kl__error_get());
        }
    }
    if (c->job && (!valid || c->stale))
        return KL__CREDS_WAIT;
    if (!valid) {
        if (c->have_cred && !c->failure)
            return kl__error_set(K8SLEASE_ECONFIG, "exec plugin \"%s\": its credentials expired",
                                 c->exec->command);
        return kl__error_set(K8SLEASE_ECONFIG, "%s", c->failure ? c->failure : "out of memory");
    }
    return line_of(c, c->cred.token, line);
}

int kl__creds_get(kl__creds *c, kl__loop *loop, const char **line)
{
    int err;

    *line = NULL;
    if (c->exec)
        return exec_get(c, loop, line);
    if (c->token_file && (err = refresh_token_file(c, kl__loop_now(loop))) < 0)
        return err;
    return line_of(c, c->token, line);
}

unsigned kl__creds_gen(const kl__creds *c)
{
    return c->gen;
}

int kl__creds_refused(kl__creds *c, unsigned gen)
{
    if (!c->exec && !c->token_file)
        return 0;
    /* Requests that left with older credentials must not refresh again. */
    if (gen == c->gen)
        c->stale = 1;
    return 1;
}

void kl__creds_identity(const kl__creds *c, const char **cert_pem, const char **key_pem)
{
    int have = c->have_cred && c->cred.cert_pem && c->cred.key_pem;

    *cert_pem = have ? c->cred.cert_pem : NULL;
    *key_pem = have ? c->cred.key_pem : NULL;
}

void kl__creds_waiting(const kl__creds *c, const kl__loop *loop, char *buf, size_t len)
{
    if (c->job)
        snprintf(buf, len, "the exec plugin \"%s\" has run for %lld ms and not answered yet",
                 c->exec->command,
                 (long long)((kl__loop_now(loop) - c->job->started_at) / KL_NS_PER_MS));
    else
        snprintf(buf, len, "no credentials");
}

int kl__creds_new(kl__creds **out, const kl__restconfig *cfg, const kl__log *log,
                  kl__creds_cb ready, void *arg)
{
    kl__creds *c = kl__calloc(1, sizeof(*c));

    *out = NULL;
    if (!c)
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    c->log = log;
    c->ready = ready;
    c->arg = arg;
    if ((cfg->token && !(c->token = kl__strdup(cfg->token))) ||
        (cfg->token_file && !(c->token_file = kl__strdup(cfg->token_file))) ||
        (cfg->exec && !(c->exec = kl__exec_config_dup(cfg->exec)))) {
        kl__creds_free(c);
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    }
    *out = c;
    return 0;
}

void kl__creds_free(kl__creds *c)
{
    if (!c)
        return;
    if (c->job) {
        (void)!eventfd_write(c->job->cancel_fd, 1);
        pthread_join(c->job->thread, NULL);
        kl__loop_unwatch(c->loop, c->job->done_fd);
        job_free(c->job);
    }
    free_secret(c->token);
    free_secret(c->line);
    kl__free(c->token_file);
    kl__exec_config_free(c->exec);
    kl__exec_credential_clear(&c->cred);
    kl__free(c->failure);
    kl__free(c);
}
