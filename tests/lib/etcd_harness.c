/*
 * etcd_harness.c - fork/exec etcd and etcdctl for the etcd integration
 * tests; readiness through etcd's /health with libcurl.
 */
#define _GNU_SOURCE /* pipe2, nftw */
#include "etcd_harness.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <curl/curl.h>

extern char **environ;

#define READY_TIMEOUT_MS   30000
#define STOP_TIMEOUT_MS    10000
#define ETCDCTL_TIMEOUT_MS 20000
#define OPENSSL_TIMEOUT_MS 20000
#define START_ATTEMPTS     5
#define MAX_ARGS           64

struct eh_etcd {
    pid_t pid;
    int client_port, peer_port;
    int tls, token_ttl_s;
    int paused;
    char *dir, *data_dir, *log_file, *endpoint, *peer_url;
    char name[16];  /* --name: "eh", or "m0".. in a cluster */
    char *cluster;  /* --initial-cluster of a cluster member, NULL alone */
    char *cl_token; /* --initial-cluster-token of a cluster member */
    char *ca, *other_ca, *cert, *key, *server_cert, *server_key;
    char *root_password;
    char *last_stderr;
};

struct eh_elect {
    pid_t pid;
    int exited; /* reaped */
    int status; /* once reaped: exit status, 128 + signal */
    char *out_file, *err_file;
};

/* ------------------------------------------------------------------------ */
/* Registry of children and directories, for eh_kill_all() / atexit         */
/* ------------------------------------------------------------------------ */

#define REG_MAX 128

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static pid_t reg_pids[REG_MAX];
static char *reg_dirs[REG_MAX];
static int reg_atexit_done;

static void rm_rf(const char *dir);

static void reg_atexit(void)
{
    eh_kill_all();
}

static void reg_init(void)
{
    pthread_mutex_lock(&reg_mu);
    if (!reg_atexit_done) {
        reg_atexit_done = 1;
        atexit(reg_atexit);
    }
    pthread_mutex_unlock(&reg_mu);
}

static void reg_pid(pid_t pid, int add)
{
    pthread_mutex_lock(&reg_mu);
    for (int i = 0; i < REG_MAX; i++) {
        if (add && reg_pids[i] == 0) {
            reg_pids[i] = pid;
            break;
        }
        if (!add && reg_pids[i] == pid) {
            reg_pids[i] = 0;
            break;
        }
    }
    pthread_mutex_unlock(&reg_mu);
}

static void reg_dir(const char *dir, int add)
{
    pthread_mutex_lock(&reg_mu);
    for (int i = 0; i < REG_MAX; i++) {
        if (add && !reg_dirs[i]) {
            reg_dirs[i] = strdup(dir);
            break;
        }
        if (!add && reg_dirs[i] && strcmp(reg_dirs[i], dir) == 0) {
            free(reg_dirs[i]);
            reg_dirs[i] = NULL;
            break;
        }
    }
    pthread_mutex_unlock(&reg_mu);
}

void eh_kill_all(void)
{
    pthread_mutex_lock(&reg_mu);
    for (int i = 0; i < REG_MAX; i++) {
        if (reg_pids[i] > 0) {
            kill(reg_pids[i], SIGKILL); /* also ends a stopped process */
            waitpid(reg_pids[i], NULL, 0);
            reg_pids[i] = 0;
        }
    }
    for (int i = 0; i < REG_MAX; i++) {
        if (reg_dirs[i]) {
            rm_rf(reg_dirs[i]);
            free(reg_dirs[i]);
            reg_dirs[i] = NULL;
        }
    }
    pthread_mutex_unlock(&reg_mu);
}

/* ------------------------------------------------------------------------ */
/* Small helpers                                                            */
/* ------------------------------------------------------------------------ */

static long long now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

static char *fmt(const char *f, ...)
{
    va_list ap;
    char *s = NULL;
    int n;

    va_start(ap, f);
    n = vasprintf(&s, f, ap);
    va_end(ap);
    return n < 0 ? NULL : s;
}

static int rm_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)type;
    (void)ftw;
    remove(path);
    return 0;
}

static void rm_rf(const char *dir)
{
    if (dir && dir[0])
        nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* The whole file, NUL-terminated, malloc'ed; NULL if it cannot be read. */
static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t len = 0, cap = 0, n;

    if (!f)
        return NULL;
    do {
        if (cap - len < 4096) {
            char *nb = realloc(buf, cap + 8192);

            if (!nb) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = nb;
            cap += 8192;
        }
        n = fread(buf + len, 1, cap - len - 1, f);
        len += n;
    } while (n > 0);
    fclose(f);
    if (!buf)
        buf = malloc(1);
    if (buf)
        buf[len] = '\0';
    return buf;
}

static int write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    int rc = 0;

    if (!f)
        return -1;
    if (fputs(text, f) < 0)
        rc = -1;
    if (fclose(f) != 0)
        rc = -1;
    return rc;
}

static void print_tail(const char *path, int lines)
{
    char *text = read_file(path);
    const char *p;
    int n = 0;

    if (!text) {
        fprintf(stderr, "etcd_harness: (cannot read %s)\n", path);
        return;
    }
    p = text + strlen(text);
    while (p > text && n <= lines)
        if (*--p == '\n')
            n++;
    if (*p == '\n')
        p++;
    fprintf(stderr, "etcd_harness: --- last lines of %s ---\n%s%s", path, p,
            (p[0] && p[strlen(p) - 1] != '\n') ? "\n" : "");
    fprintf(stderr, "etcd_harness: --- end of %s ---\n", path);
    free(text);
}

/* 1 if text has `line` as a complete line. */
static int has_line(const char *text, const char *line)
{
    size_t n = strlen(line);

    for (const char *p = text; p && (p = strstr(p, line)) != NULL; p++)
        if ((p == text || p[-1] == '\n') && p[n] == '\n')
            return 1;
    return 0;
}

static const char *bin_path(const char *env, const char *builtin)
{
    const char *p = getenv(env);

    return p && p[0] ? p : builtin;
}

static const char *etcd_bin(void)
{
#ifdef K8SLEASE_ETCD_BIN
    return bin_path("K8SLEASE_TEST_ETCD", K8SLEASE_ETCD_BIN);
#else
    return bin_path("K8SLEASE_TEST_ETCD", "etcd");
#endif
}

static const char *etcdctl_bin(void)
{
#ifdef K8SLEASE_ETCDCTL_BIN
    return bin_path("K8SLEASE_TEST_ETCDCTL", K8SLEASE_ETCDCTL_BIN);
#else
    return bin_path("K8SLEASE_TEST_ETCDCTL", "etcdctl");
#endif
}

/* ------------------------------------------------------------------------ */
/* Spawning                                                                 */
/* ------------------------------------------------------------------------ */

static int env_dropped(const char *kv)
{
    static const char *const drop[] = {
        "ETCDCTL_",   "ETCD_",      "http_proxy=", "https_proxy=", "HTTP_PROXY=", "HTTPS_PROXY=",
        "all_proxy=", "ALL_PROXY=", NULL};

    for (int i = 0; drop[i]; i++)
        if (strncmp(kv, drop[i], strlen(drop[i])) == 0)
            return 1;
    return 0;
}

/* The environment of children: ours without etcd's configuration variables
 * (etcd reads ETCD_* as flags) and proxies, plus ETCDCTL_API=3. The strings
 * are borrowed from environ; free only the array. */
static char **child_env(void)
{
    size_t n = 0, j = 0;
    char **env;

    while (environ && environ[n])
        n++;
    env = calloc(n + 2, sizeof(*env));
    if (!env)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (!env_dropped(environ[i]))
            env[j++] = environ[i];
    env[j++] = "ETCDCTL_API=3";
    env[j] = NULL;
    return env;
}

/* fork + execve with stdin from /dev/null and stdout/stderr on the given
 * fds. Everything the child needs is prepared before fork: between fork and
 * exec it only makes async-signal-safe calls. */
static pid_t spawn(char *const argv[], int out_fd, int err_fd)
{
    char **env = child_env();
    int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    pid_t parent = getpid(), pid;
    sigset_t none;

    if (!env || null_fd < 0) {
        free(env);
        if (null_fd >= 0)
            close(null_fd);
        fprintf(stderr, "etcd_harness: cannot prepare to run %s\n", argv[0]);
        return -1;
    }
    sigemptyset(&none);
    pid = fork();
    if (pid == 0) {
#ifdef __linux__
        prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
        if (getppid() != parent)
            _exit(127);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
        dup2(null_fd, 0);
        dup2(out_fd, 1);
        dup2(err_fd, 2);
        execve(argv[0], argv, env);
        _exit(127);
    }
    free(env);
    close(null_fd);
    if (pid < 0) {
        fprintf(stderr, "etcd_harness: fork: %s\n", strerror(errno));
        return -1;
    }
    reg_pid(pid, 1);
    return pid;
}

/* Reap pid if it has exited; *status gets the exit status (128 + signal
 * when killed). Returns 1 when reaped, 0 when still running. */
static int reap(pid_t pid, int *status, int block)
{
    int st;
    pid_t r;

    do
        r = waitpid(pid, &st, block ? 0 : WNOHANG);
    while (r < 0 && errno == EINTR);
    if (r != pid)
        return r < 0 ? 1 : 0; /* ECHILD: already gone */
    reg_pid(pid, 0);
    if (status)
        *status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return 1;
}

struct buf {
    char *p;
    size_t len, cap;
};

static int buf_read(struct buf *b, int fd)
{
    char tmp[4096];
    ssize_t n = read(fd, tmp, sizeof(tmp));

    if (n <= 0)
        return n < 0 && (errno == EINTR || errno == EAGAIN) ? 1 : 0;
    if (b->len + (size_t)n + 1 > b->cap) {
        size_t cap = (b->len + (size_t)n + 1) * 2;
        char *np = realloc(b->p, cap);

        if (!np)
            return 0;
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, tmp, (size_t)n);
    b->len += (size_t)n;
    b->p[b->len] = '\0';
    return 1;
}

static char *buf_take(struct buf *b)
{
    char *p = b->p ? b->p : strdup("");

    b->p = NULL;
    return p;
}

/* Run argv, capture stdout and stderr, at most timeout_ms. Returns the exit
 * status, or -1 (could not run, timeout: killed, died by a signal). */
static int run_capture(char *const argv[], int timeout_ms, char **out, char **err)
{
    int po[2] = {-1, -1}, pe[2] = {-1, -1}, status = -1, open_fds = 2;
    struct buf bo = {0}, be = {0};
    long long deadline = now_ms() + timeout_ms;
    pid_t pid;

    if (pipe2(po, O_CLOEXEC) < 0 || pipe2(pe, O_CLOEXEC) < 0) {
        fprintf(stderr, "etcd_harness: pipe: %s\n", strerror(errno));
        goto out;
    }
    pid = spawn(argv, po[1], pe[1]);
    close(po[1]);
    close(pe[1]);
    po[1] = pe[1] = -1;
    if (pid < 0)
        goto out;
    while (open_fds > 0) {
        struct pollfd fds[2] = {{po[0], POLLIN, 0}, {pe[0], POLLIN, 0}};
        long long left = deadline - now_ms();
        int rc;

        if (left <= 0) {
            fprintf(stderr, "etcd_harness: %s %s did not finish within %d ms: killed\n", argv[0],
                    argv[1] ? argv[1] : "", timeout_ms);
            kill(pid, SIGKILL);
            reap(pid, NULL, 1);
            status = -1;
            goto out;
        }
        rc = poll(fds, 2, (int)left);
        if (rc < 0 && errno != EINTR)
            break;
        for (int i = 0; i < 2 && rc > 0; i++) {
            if (fds[i].fd >= 0 && (fds[i].revents & (POLLIN | POLLHUP | POLLERR))) {
                if (!buf_read(i == 0 ? &bo : &be, fds[i].fd)) {
                    close(fds[i].fd);
                    if (i == 0)
                        po[0] = -1;
                    else
                        pe[0] = -1;
                    open_fds--;
                }
            }
        }
    }
    reap(pid, &status, 1);
    if (status >= 128)
        status = -1;
out:
    for (int i = 0; i < 2; i++) {
        if (po[i] >= 0)
            close(po[i]);
        if (pe[i] >= 0)
            close(pe[i]);
    }
    if (out)
        *out = buf_take(&bo);
    if (err)
        *err = buf_take(&be);
    free(bo.p);
    free(be.p);
    return status;
}

/* ------------------------------------------------------------------------ */
/* Ports, certificates                                                      */
/* ------------------------------------------------------------------------ */

int eh_free_port(void)
{
    struct sockaddr_in sa = {0};
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = -1;

    if (fd < 0)
        return -1;
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        port = ntohs(sa.sin_port);
    close(fd);
    return port;
}

static int openssl(const char *what, const char *const *args)
{
    char *argv[MAX_ARGS];
    char *err = NULL;
    int n = 0, rc;

    argv[n++] = "/usr/bin/openssl";
    if (access(argv[0], X_OK) != 0)
        argv[0] = "/bin/openssl";
    for (int i = 0; args[i] && n < MAX_ARGS - 1; i++)
        argv[n++] = (char *)args[i];
    argv[n] = NULL;
    rc = run_capture(argv, OPENSSL_TIMEOUT_MS, NULL, &err);
    if (rc != 0)
        fprintf(stderr, "etcd_harness: openssl (%s) failed (%d): %s\n", what, rc, err ? err : "");
    free(err);
    return rc == 0 ? 0 : -1;
}

static int make_ca(const char *dir, const char *name, const char *cn)
{
    char *key = fmt("%s/%s.key", dir, name), *crt = fmt("%s/%s.crt", dir, name);
    char *subj = fmt("/CN=%s", cn);
    int rc = -1;

    if (key && crt && subj) {
        /* clang-format off */
        const char *args[] = {
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-days", "2", "-subj", subj, "-keyout", key, "-out", crt,
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign", NULL};
        /* clang-format on */
        rc = openssl(name, args);
    }
    free(key);
    free(crt);
    free(subj);
    return rc;
}

static int make_leaf(const char *dir, const char *name, const char *cn, const char *ext)
{
    char *key = fmt("%s/%s.key", dir, name), *crt = fmt("%s/%s.crt", dir, name);
    char *csr = fmt("%s/%s.csr", dir, name), *extf = fmt("%s/%s.ext", dir, name);
    char *subj = fmt("/CN=%s", cn), *ca = fmt("%s/ca.crt", dir), *ca_key = fmt("%s/ca.key", dir);
    char *serial = fmt("%s/ca.srl", dir);
    int rc = -1;

    if (key && crt && csr && extf && subj && ca && ca_key && serial && write_file(extf, ext) == 0) {
        /* clang-format off */
        const char *req[] = {
            "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-subj", subj, "-keyout", key, "-out", csr, NULL};
        const char *sign[] = {
            "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key,
            "-CAserial", serial, "-CAcreateserial", "-days", "2", "-extfile", extf,
            "-out", crt, NULL};
        /* clang-format on */
        rc = openssl(name, req) == 0 && openssl(name, sign) == 0 ? 0 : -1;
    }
    free(key);
    free(crt);
    free(csr);
    free(extf);
    free(subj);
    free(ca);
    free(ca_key);
    free(serial);
    return rc;
}

static int make_certs(eh_etcd *e)
{
    if (make_ca(e->dir, "ca", "k8slease etcd test CA") != 0 ||
        make_ca(e->dir, "other-ca", "k8slease unrelated etcd test CA") != 0 ||
        /* clientAuth too: etcd's JSON gateway dials the gRPC server with the
         * server certificate, and --client-cert-auth checks it. */
        make_leaf(e->dir, "server", "127.0.0.1",
                  "basicConstraints=critical,CA:FALSE\n"
                  "keyUsage=critical,digitalSignature\n"
                  "extendedKeyUsage=serverAuth,clientAuth\n"
                  "subjectAltName=IP:127.0.0.1\n") != 0 ||
        make_leaf(e->dir, "client", "k8slease-etcd-test",
                  "basicConstraints=critical,CA:FALSE\n"
                  "keyUsage=critical,digitalSignature\n"
                  "extendedKeyUsage=clientAuth\n") != 0)
        return -1;
    e->ca = fmt("%s/ca.crt", e->dir);
    e->other_ca = fmt("%s/other-ca.crt", e->dir);
    e->cert = fmt("%s/client.crt", e->dir);
    e->key = fmt("%s/client.key", e->dir);
    e->server_cert = fmt("%s/server.crt", e->dir);
    e->server_key = fmt("%s/server.key", e->dir);
    return e->ca && e->other_ca && e->cert && e->key && e->server_cert && e->server_key ? 0 : -1;
}

/* ------------------------------------------------------------------------ */
/* etcd                                                                     */
/* ------------------------------------------------------------------------ */

static size_t collect(char *p, size_t size, size_t n, void *ud)
{
    struct buf *b = ud;
    size_t len = size * n;

    if (b->len + len + 1 <= b->cap) {
        memcpy(b->p + b->len, p, len);
        b->len += len;
        b->p[b->len] = '\0';
    }
    return len;
}

/* One request to etcd (GET without a body, else a JSON POST), at most
 * 2 s; 1 when it answered 200. Its body goes to body (cap bytes,
 * NUL-terminated, truncated). */
static int probe_body(const eh_etcd *e, const char *path, const char *post, char *body, size_t cap)
{
    char *url = fmt("%s%s", e->endpoint, path);
    struct buf b = {body, 0, cap};
    struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
    CURL *c = curl_easy_init();
    long status = 0;
    int ok = 0;

    body[0] = '\0';
    if (c && url && hdr) {
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 2000L);
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
        if (post) {
            curl_easy_setopt(c, CURLOPT_POSTFIELDS, post);
            curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
        }
        if (e->tls) {
            curl_easy_setopt(c, CURLOPT_CAINFO, e->ca);
            curl_easy_setopt(c, CURLOPT_SSLCERT, e->cert);
            curl_easy_setopt(c, CURLOPT_SSLKEY, e->key);
        }
        ok = curl_easy_perform(c) == CURLE_OK &&
             curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status) == CURLE_OK && status == 200;
    }
    if (c)
        curl_easy_cleanup(c);
    curl_slist_free_all(hdr);
    free(url);
    return ok;
}

/* 1 when etcd answered 200 with a body containing `expect`. */
static int probe(const eh_etcd *e, const char *path, const char *post, const char *expect)
{
    char body[2048] = "";

    return probe_body(e, path, post, body, sizeof(body)) && strstr(body, expect) != NULL;
}

/* Ready for the library: /health says true (a raft leader) and the JSON
 * gateway answers. The gateway is checked on its own: under
 * --client-cert-auth it dials etcd's gRPC server with the server
 * certificate, and fails ("connection closed") while /health is fine when
 * that certificate lacks clientAuth. */
static int healthy(const eh_etcd *e)
{
    return probe(e, "/health", NULL, "\"health\":\"true\"") &&
           probe(e, "/v3/maintenance/status", "{}", "\"version\"");
}

static int log_says(const eh_etcd *e, const char *what)
{
    char *text = read_file(e->log_file);
    int found = text && strstr(text, what) != NULL;

    free(text);
    return found;
}

/* Fork etcd, without waiting. Returns 0 or -1. */
static int spawn_etcd(eh_etcd *e)
{
    char client_url[64], peer_url[64], cluster[96], ttl[16];
    char *argv[MAX_ARGS];
    int n = 0, log_fd;

    snprintf(client_url, sizeof(client_url), "%s://127.0.0.1:%d", e->tls ? "https" : "http",
             e->client_port);
    snprintf(peer_url, sizeof(peer_url), "http://127.0.0.1:%d", e->peer_port);
    snprintf(cluster, sizeof(cluster), "eh=%s", peer_url);
    snprintf(ttl, sizeof(ttl), "%d", e->token_ttl_s);
    argv[n++] = (char *)etcd_bin();
    argv[n++] = "--name";
    argv[n++] = e->name[0] ? e->name : "eh";
    argv[n++] = "--data-dir";
    argv[n++] = e->data_dir;
    argv[n++] = "--listen-client-urls";
    argv[n++] = client_url;
    argv[n++] = "--advertise-client-urls";
    argv[n++] = client_url;
    argv[n++] = "--listen-peer-urls";
    argv[n++] = peer_url;
    argv[n++] = "--initial-advertise-peer-urls";
    argv[n++] = peer_url;
    argv[n++] = "--initial-cluster";
    argv[n++] = e->cluster ? e->cluster : cluster;
    if (e->cluster) {
        /* Ignored by a member that restarts on its data directory. */
        argv[n++] = "--initial-cluster-state";
        argv[n++] = "new";
        argv[n++] = "--initial-cluster-token";
        argv[n++] = e->cl_token;
    }
    argv[n++] = "--logger";
    argv[n++] = "zap";
    argv[n++] = "--log-outputs";
    argv[n++] = "stderr";
    argv[n++] = "--bcrypt-cost"; /* the minimum: authentication stays fast */
    argv[n++] = "4";
    if (e->token_ttl_s > 0) {
        argv[n++] = "--auth-token-ttl";
        argv[n++] = ttl;
    }
    if (e->tls) {
        argv[n++] = "--cert-file";
        argv[n++] = e->server_cert;
        argv[n++] = "--key-file";
        argv[n++] = e->server_key;
        argv[n++] = "--client-cert-auth";
        argv[n++] = "--trusted-ca-file";
        argv[n++] = e->ca;
    }
    argv[n] = NULL;

    free(e->endpoint);
    e->endpoint = strdup(client_url);
    log_fd = open(e->log_file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (!e->endpoint || log_fd < 0) {
        fprintf(stderr, "etcd_harness: cannot open %s\n", e->log_file);
        if (log_fd >= 0)
            close(log_fd);
        return -1;
    }
    e->pid = spawn(argv, log_fd, log_fd);
    close(log_fd);
    if (e->pid < 0)
        return -1;
    e->paused = 0;
    return 0;
}

/* Wait until the spawned etcd is healthy, at most until deadline (ms).
 * Returns 0, -1 (it was killed), or 1 when a port was in use. */
static int wait_ready(eh_etcd *e, long long deadline)
{
    int status;

    for (;;) {
        if (healthy(e))
            return 0;
        if (reap(e->pid, &status, 0)) {
            e->pid = -1;
            if (log_says(e, "address already in use"))
                return 1;
            fprintf(stderr, "etcd_harness: %s exited (status %d) before it was healthy on %s\n",
                    etcd_bin(), status, e->endpoint);
            print_tail(e->log_file, 30);
            return -1;
        }
        if (now_ms() > deadline) {
            fprintf(stderr, "etcd_harness: etcd %s not healthy on %s within %d ms\n",
                    e->name[0] ? e->name : "eh", e->endpoint, READY_TIMEOUT_MS);
            print_tail(e->log_file, 30);
            kill(e->pid, SIGKILL);
            reap(e->pid, NULL, 1);
            e->pid = -1;
            return -1;
        }
        sleep_ms(50);
    }
}

/* Fork etcd and wait until healthy. Returns 0, -1, or 1 when a port was in
 * use (the caller may retry with others). */
static int launch(eh_etcd *e)
{
    if (spawn_etcd(e) != 0)
        return -1;
    return wait_ready(e, now_ms() + READY_TIMEOUT_MS);
}

static void etcd_free(eh_etcd *e)
{
    if (!e)
        return;
    if (e->dir) {
        rm_rf(e->dir);
        reg_dir(e->dir, 0);
    }
    free(e->dir);
    free(e->data_dir);
    free(e->log_file);
    free(e->endpoint);
    free(e->peer_url);
    free(e->cluster);
    free(e->cl_token);
    free(e->ca);
    free(e->other_ca);
    free(e->cert);
    free(e->key);
    free(e->server_cert);
    free(e->server_key);
    free(e->root_password);
    free(e->last_stderr);
    free(e);
}

/* A new, not yet started etcd with its temporary directory; NULL on
 * failure (said on stderr). */
static eh_etcd *etcd_new(const eh_options *opts)
{
    eh_etcd *e = calloc(1, sizeof(*e));
    char tmpl[] = "/tmp/k8slease-etcd-XXXXXX";

    reg_init();
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (!e)
        return NULL;
    e->pid = -1;
    e->tls = opts && opts->tls;
    e->token_ttl_s = opts ? opts->auth_token_ttl_s : 0;
    if (access(etcd_bin(), X_OK) != 0) {
        fprintf(stderr, "etcd_harness: no etcd binary at %s (install Debian's etcd-server)\n",
                etcd_bin());
        goto fail;
    }
    if (!mkdtemp(tmpl)) {
        fprintf(stderr, "etcd_harness: mkdtemp: %s\n", strerror(errno));
        goto fail;
    }
    e->dir = strdup(tmpl);
    reg_dir(tmpl, 1);
    e->data_dir = fmt("%s/data", tmpl);
    e->log_file = fmt("%s/etcd.log", tmpl);
    if (!e->dir || !e->data_dir || !e->log_file)
        goto fail;
    if (e->tls && make_certs(e) != 0)
        goto fail;
    return e;
fail:
    etcd_free(e);
    return NULL;
}

int eh_start(eh_etcd **out, const eh_options *opts)
{
    eh_etcd *e = etcd_new(opts);
    int rc = -1;

    *out = NULL;
    if (!e)
        return -1;
    for (int attempt = 0; attempt < START_ATTEMPTS; attempt++) {
        e->client_port = eh_free_port();
        do
            e->peer_port = eh_free_port();
        while (e->peer_port == e->client_port);
        if (e->client_port <= 0 || e->peer_port <= 0) {
            fprintf(stderr, "etcd_harness: no free loopback port\n");
            goto out;
        }
        rm_rf(e->data_dir); /* a start that failed may have left a member dir */
        rc = launch(e);
        if (rc <= 0)
            break;
        fprintf(stderr, "etcd_harness: port %d or %d was taken, retrying with others\n",
                e->client_port, e->peer_port);
    }
out:
    if (rc != 0) {
        if (rc > 0)
            fprintf(stderr, "etcd_harness: no free ports after %d attempts\n", START_ATTEMPTS);
        etcd_free(e);
        return -1;
    }
    *out = e;
    return 0;
}

/* Signal etcd and wait for its exit; SIGKILL after STOP_TIMEOUT_MS.
 * Returns 0 when it exited by itself. */
static int terminate(eh_etcd *e, int sig)
{
    long long deadline = now_ms() + STOP_TIMEOUT_MS;
    int status;

    if (e->pid <= 0)
        return 0;
    kill(e->pid, sig);
    kill(e->pid, SIGCONT); /* a stopped process handles SIGTERM only once continued */
    e->paused = 0;
    while (!reap(e->pid, &status, 0)) {
        if (now_ms() > deadline) {
            fprintf(stderr, "etcd_harness: etcd (pid %d) ignored signal %d for %d ms: killed\n",
                    (int)e->pid, sig, STOP_TIMEOUT_MS);
            kill(e->pid, SIGKILL);
            reap(e->pid, NULL, 1);
            e->pid = -1;
            return -1;
        }
        sleep_ms(10);
    }
    e->pid = -1;
    /* etcd re-raises SIGTERM after its shutdown: dying by it is clean. */
    return status == 0 || status == 128 + SIGTERM || sig == SIGKILL ? 0 : -1;
}

int eh_stop(eh_etcd *e)
{
    int rc;

    if (!e)
        return 0;
    rc = terminate(e, SIGTERM);
    etcd_free(e);
    return rc;
}

int eh_restart(eh_etcd *e, int sig)
{
    int rc;

    terminate(e, sig);
    rc = launch(e);
    if (rc > 0)
        fprintf(stderr, "etcd_harness: port %d or %d taken by someone else during the restart\n",
                e->client_port, e->peer_port);
    return rc == 0 ? 0 : -1;
}

int eh_pause(eh_etcd *e)
{
    int st;

    if (e->pid <= 0 || kill(e->pid, SIGSTOP) != 0)
        return -1;
    /* Return once it is stopped, so the caller's clock reading is after. */
    if (waitpid(e->pid, &st, WUNTRACED) != e->pid || !WIFSTOPPED(st)) {
        fprintf(stderr, "etcd_harness: etcd (pid %d) did not stop\n", (int)e->pid);
        return -1;
    }
    e->paused = 1;
    return 0;
}

int eh_resume(eh_etcd *e)
{
    int st;

    if (!e->paused)
        return 0;
    if (e->pid <= 0 || kill(e->pid, SIGCONT) != 0)
        return -1;
    if (waitpid(e->pid, &st, WCONTINUED) != e->pid || !WIFCONTINUED(st)) {
        fprintf(stderr, "etcd_harness: etcd (pid %d) did not continue\n", (int)e->pid);
        return -1;
    }
    e->paused = 0;
    return 0;
}

int eh_kill(eh_etcd *e)
{
    if (e->pid <= 0)
        return -1;
    return terminate(e, SIGKILL);
}

int eh_shutdown(eh_etcd *e)
{
    if (e->pid <= 0)
        return -1;
    return terminate(e, SIGTERM);
}

int eh_relaunch(eh_etcd *e)
{
    int rc;

    if (e->pid > 0) {
        fprintf(stderr, "etcd_harness: eh_relaunch: etcd %s (pid %d) is still running\n",
                e->name[0] ? e->name : "eh", (int)e->pid);
        return -1;
    }
    rc = launch(e);
    if (rc > 0)
        fprintf(stderr, "etcd_harness: port %d or %d taken by someone else during the restart\n",
                e->client_port, e->peer_port);
    return rc == 0 ? 0 : -1;
}

/* ------------------------------------------------------------------------ */
/* Clusters                                                                 */
/* ------------------------------------------------------------------------ */

struct eh_cluster {
    int n;
    eh_etcd *m[EH_CLUSTER_MAX];
    char *endpoints; /* comma-separated client URLs, member 0 first */
};

/* n distinct free loopback ports, or -1. */
static int free_ports(int *ports, int n)
{
    for (int i = 0; i < n; i++) {
        int tries = 0, dup;

        do {
            ports[i] = eh_free_port();
            dup = 0;
            for (int j = 0; j < i; j++)
                dup |= ports[j] == ports[i];
        } while ((dup || ports[i] <= 0) && ++tries < 20);
        if (dup || ports[i] <= 0)
            return -1;
    }
    return 0;
}

static void cluster_free(eh_cluster *c)
{
    for (int i = 0; i < c->n; i++)
        etcd_free(c->m[i]);
    free(c->endpoints);
    free(c);
}

/* Start every member (ports chosen anew), wait until all are healthy.
 * 0, -1, or 1 when a port was taken (members are stopped again). */
static int cluster_launch(eh_cluster *c)
{
    int ports[2 * EH_CLUSTER_MAX], rc = 0;
    size_t len = 0, cap = 0;
    char *cluster = NULL, *eps = NULL;
    long long deadline;

    if (free_ports(ports, 2 * c->n) != 0) {
        fprintf(stderr, "etcd_harness: no free loopback ports\n");
        return -1;
    }
    cap = (size_t)c->n * 64;
    cluster = calloc(1, cap);
    eps = calloc(1, cap);
    if (!cluster || !eps) {
        free(cluster);
        free(eps);
        return -1;
    }
    for (int i = 0; i < c->n; i++) {
        eh_etcd *m = c->m[i];

        m->client_port = ports[2 * i];
        m->peer_port = ports[2 * i + 1];
        len += (size_t)snprintf(cluster + len, cap - len, "%s%s=http://127.0.0.1:%d", i ? "," : "",
                                m->name, m->peer_port);
        snprintf(eps + strlen(eps), cap - strlen(eps), "%shttp://127.0.0.1:%d", i ? "," : "",
                 m->client_port);
    }
    for (int i = 0; i < c->n; i++) {
        free(c->m[i]->cluster);
        c->m[i]->cluster = strdup(cluster);
        rm_rf(c->m[i]->data_dir); /* a start that failed may have left a member dir */
        if (!c->m[i]->cluster || spawn_etcd(c->m[i]) != 0)
            rc = -1;
    }
    free(cluster);
    free(c->endpoints);
    c->endpoints = eps;
    /* Together: a member is healthy once a quorum of them runs. */
    deadline = now_ms() + READY_TIMEOUT_MS;
    for (int i = 0; i < c->n && rc == 0; i++)
        if (c->m[i]->pid > 0)
            rc = wait_ready(c->m[i], deadline);
    if (rc != 0)
        for (int i = 0; i < c->n; i++)
            terminate(c->m[i], SIGKILL);
    return rc;
}

int eh_cluster_start(eh_cluster **out, int members)
{
    eh_cluster *c = calloc(1, sizeof(*c));
    char token[64];
    int rc = -1;

    *out = NULL;
    if (!c)
        return -1;
    if (members < 1 || members > EH_CLUSTER_MAX) {
        fprintf(stderr, "etcd_harness: a cluster has 1 to %d members, not %d\n", EH_CLUSTER_MAX,
                members);
        free(c);
        return -1;
    }
    snprintf(token, sizeof(token), "eh-%d-%lld", (int)getpid(), now_ms());
    for (c->n = 0; c->n < members; c->n++) {
        eh_etcd *m = etcd_new(NULL);

        if (!m || !(m->cl_token = strdup(token))) {
            etcd_free(m);
            cluster_free(c);
            return -1;
        }
        snprintf(m->name, sizeof(m->name), "m%d", c->n);
        c->m[c->n] = m;
    }
    for (int attempt = 0; attempt < START_ATTEMPTS; attempt++) {
        rc = cluster_launch(c);
        if (rc <= 0)
            break;
        fprintf(stderr, "etcd_harness: a port of the cluster was taken, retrying with others\n");
    }
    if (rc != 0) {
        if (rc > 0)
            fprintf(stderr, "etcd_harness: no free ports after %d attempts\n", START_ATTEMPTS);
        for (int i = 0; i < c->n; i++)
            eh_log_tail(c->m[i], 15);
        cluster_free(c);
        return -1;
    }
    *out = c;
    return 0;
}

int eh_cluster_stop(eh_cluster *c)
{
    int rc = 0;

    if (!c)
        return 0;
    for (int i = 0; i < c->n; i++)
        if (terminate(c->m[i], SIGTERM) != 0)
            rc = -1;
    cluster_free(c);
    return rc;
}

int eh_cluster_size(const eh_cluster *c)
{
    return c->n;
}

eh_etcd *eh_cluster_member(eh_cluster *c, int i)
{
    return i >= 0 && i < c->n ? c->m[i] : NULL;
}

const char *eh_cluster_endpoints(const eh_cluster *c)
{
    return c->endpoints;
}

/* The decimal value of a "field":"123" (or "field":123) in json, 0 if
 * absent. */
static unsigned long long json_u64(const char *json, const char *field)
{
    char pat[64];
    const char *p;

    snprintf(pat, sizeof(pat), "\"%s\":", field);
    if (!(p = strstr(json, pat)))
        return 0;
    p += strlen(pat);
    if (*p == '"')
        p++;
    return strtoull(p, NULL, 10);
}

int eh_member_is_raft_leader(const eh_etcd *e)
{
    char body[4096];
    unsigned long long id, leader;

    if (e->pid <= 0 || e->paused ||
        !probe_body(e, "/v3/maintenance/status", "{}", body, sizeof(body)))
        return -1;
    id = json_u64(body, "member_id");
    leader = json_u64(body, "leader");
    if (id == 0)
        return -1;
    return leader == id;
}

int eh_version(const eh_etcd *e, int *major, int *minor, int *patch)
{
    char body[1024];
    const char *p;

    if (e->pid <= 0 || e->paused || !probe_body(e, "/version", NULL, body, sizeof(body)) ||
        !(p = strstr(body, "\"etcdserver\":\"")) ||
        sscanf(p + 14, "%d.%d.%d", major, minor, patch) != 3)
        return -1;
    return 0;
}

int eh_cluster_raft_leader(eh_cluster *c, int timeout_ms)
{
    long long deadline = now_ms() + timeout_ms;

    for (;;) {
        for (int i = 0; i < c->n; i++)
            if (eh_member_is_raft_leader(c->m[i]) == 1)
                return i;
        if (now_ms() > deadline) {
            fprintf(stderr, "etcd_harness: no member says it is the raft leader within %d ms\n",
                    timeout_ms);
            return -1;
        }
        sleep_ms(50);
    }
}

int eh_cluster_wait_healthy(eh_cluster *c, int timeout_ms)
{
    long long deadline = now_ms() + timeout_ms;

    for (int i = 0; i < c->n; i++) {
        eh_etcd *m = c->m[i];

        while (!healthy(m)) {
            if (m->pid <= 0 || m->paused) {
                fprintf(stderr, "etcd_harness: member %s is %s\n", m->name,
                        m->pid <= 0 ? "not running" : "paused");
                return -1;
            }
            if (now_ms() > deadline) {
                fprintf(stderr, "etcd_harness: member %s not healthy on %s within %d ms\n", m->name,
                        m->endpoint, timeout_ms);
                print_tail(m->log_file, 30);
                return -1;
            }
            sleep_ms(50);
        }
    }
    return 0;
}

const char *eh_endpoint(const eh_etcd *e)
{
    return e->endpoint;
}

const char *eh_dir(const eh_etcd *e)
{
    return e->dir;
}

const char *eh_log_file(const eh_etcd *e)
{
    return e->log_file;
}

const char *eh_ca_file(const eh_etcd *e)
{
    return e->ca;
}

const char *eh_other_ca_file(const eh_etcd *e)
{
    return e->other_ca;
}

const char *eh_cert_file(const eh_etcd *e)
{
    return e->cert;
}

const char *eh_key_file(const eh_etcd *e)
{
    return e->key;
}

int eh_port(const eh_etcd *e)
{
    return e->client_port;
}

int eh_pid(const eh_etcd *e)
{
    return e->pid > 0 ? (int)e->pid : -1;
}

void eh_log_tail(const eh_etcd *e, int lines)
{
    print_tail(e->log_file, lines);
}

/* ------------------------------------------------------------------------ */
/* etcdctl                                                                  */
/* ------------------------------------------------------------------------ */

/* argv[0..n) = etcdctl and the connection flags; strings in flags[]. */
static int etcdctl_argv(const eh_etcd *e, char **argv, char flags[6][512])
{
    int n = 0;

    argv[n++] = (char *)etcdctl_bin();
    snprintf(flags[0], sizeof(flags[0]), "--endpoints=%s", e->endpoint);
    argv[n++] = flags[0];
    argv[n++] = "--dial-timeout=3s";
    argv[n++] = "--command-timeout=10s";
    if (e->tls) {
        snprintf(flags[1], sizeof(flags[1]), "--cacert=%s", e->ca);
        snprintf(flags[2], sizeof(flags[2]), "--cert=%s", e->cert);
        snprintf(flags[3], sizeof(flags[3]), "--key=%s", e->key);
        argv[n++] = flags[1];
        argv[n++] = flags[2];
        argv[n++] = flags[3];
    }
    if (e->root_password) {
        snprintf(flags[4], sizeof(flags[4]), "--password=%s", e->root_password);
        argv[n++] = "--user=root";
        argv[n++] = flags[4];
    }
    return n;
}

int eh_etcdctlv(eh_etcd *e, char **out, const char *const *args)
{
    char flags[6][512], *argv[MAX_ARGS];
    int n = etcdctl_argv(e, argv, flags), rc;

    for (int i = 0; args[i]; i++) {
        if (n >= MAX_ARGS - 1) {
            fprintf(stderr, "etcd_harness: too many etcdctl arguments\n");
            if (out)
                *out = strdup("");
            return -1;
        }
        argv[n++] = (char *)args[i];
    }
    argv[n] = NULL;
    free(e->last_stderr);
    e->last_stderr = NULL;
    rc = run_capture(argv, ETCDCTL_TIMEOUT_MS, out, &e->last_stderr);
    return rc;
}

int eh_etcdctl(eh_etcd *e, char **out, ...)
{
    const char *args[MAX_ARGS];
    int n = 0;
    va_list ap;

    va_start(ap, out);
    while (n < MAX_ARGS - 1 && (args[n] = va_arg(ap, const char *)) != NULL)
        n++;
    va_end(ap);
    args[n] = NULL;
    return eh_etcdctlv(e, out, args);
}

const char *eh_etcdctl_stderr(const eh_etcd *e)
{
    return e->last_stderr ? e->last_stderr : "";
}

int eh_enable_auth(eh_etcd *e, const char *root_password)
{
    char *user = fmt("root:%s", root_password), *out = NULL;
    int rc;

    if (!user)
        return -1;
    rc = eh_etcdctl(e, &out, "user", "add", user, "--interactive=false", NULL);
    free(user);
    if (rc != 0) {
        fprintf(stderr, "etcd_harness: etcdctl user add root failed (%d): %s%s\n", rc, out,
                eh_etcdctl_stderr(e));
        free(out);
        return -1;
    }
    free(out);
    rc = eh_etcdctl(e, &out, "auth", "enable", NULL);
    if (rc != 0 || !strstr(out, "Authentication Enabled")) {
        fprintf(stderr, "etcd_harness: etcdctl auth enable failed (%d): %s%s\n", rc, out,
                eh_etcdctl_stderr(e));
        free(out);
        return -1;
    }
    free(out);
    e->root_password = strdup(root_password);
    return e->root_password ? 0 : -1;
}

/* ------------------------------------------------------------------------ */
/* etcdctl elect children                                                   */
/* ------------------------------------------------------------------------ */

int eh_elect_start(eh_etcd *e, eh_elect **out, const char *name, const char *value)
{
    static int seq;
    char flags[6][512], *argv[MAX_ARGS];
    int n = etcdctl_argv(e, argv, flags), fd_out = -1, fd_err = -1;
    eh_elect *c = calloc(1, sizeof(*c));

    *out = NULL;
    if (!c)
        return -1;
    c->pid = -1;
    seq++;
    c->out_file = fmt("%s/elect-%d.out", e->dir, seq);
    c->err_file = fmt("%s/elect-%d.err", e->dir, seq);
    argv[n++] = "elect";
    if (!value)
        argv[n++] = "-l";
    argv[n++] = (char *)name;
    if (value)
        argv[n++] = (char *)value;
    argv[n] = NULL;
    if (c->out_file && c->err_file) {
        fd_out = open(c->out_file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        fd_err = open(c->err_file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    }
    if (fd_out >= 0 && fd_err >= 0)
        c->pid = spawn(argv, fd_out, fd_err);
    if (fd_out >= 0)
        close(fd_out);
    if (fd_err >= 0)
        close(fd_err);
    if (c->pid < 0) {
        fprintf(stderr, "etcd_harness: cannot start etcdctl elect %s\n", name);
        eh_elect_free(c);
        return -1;
    }
    *out = c;
    return 0;
}

int eh_elect_pid(const eh_elect *c)
{
    return c->exited ? -1 : (int)c->pid;
}

/* 1 while running; reaps it once it exited. */
static int elect_running(eh_elect *c)
{
    if (!c->exited && reap(c->pid, &c->status, 0))
        c->exited = 1;
    return !c->exited;
}

char *eh_elect_output(const eh_elect *c)
{
    return read_file(c->out_file);
}

int eh_elect_has_line(const eh_elect *c, const char *line)
{
    char *text = read_file(c->out_file);
    int found = text && has_line(text, line);

    free(text);
    return found;
}

static void elect_report(const eh_elect *c, const char *why)
{
    char *o = read_file(c->out_file), *e = read_file(c->err_file);

    fprintf(stderr, "etcd_harness: etcdctl elect (pid %d) %s; stdout:\n%s\nstderr:\n%s\n",
            (int)c->pid, why, o ? o : "", e ? e : "");
    free(o);
    free(e);
}

int eh_elect_wait_line(eh_elect *c, const char *line, int timeout_ms)
{
    long long deadline = now_ms() + timeout_ms;

    for (;;) {
        int running = elect_running(c);

        if (eh_elect_has_line(c, line))
            return 0;
        if (!running) {
            elect_report(c, "exited before printing the expected line");
            return -1;
        }
        if (now_ms() > deadline) {
            char why[600];

            snprintf(why, sizeof(why), "did not print \"%s\" within %d ms", line, timeout_ms);
            elect_report(c, why);
            return -1;
        }
        sleep_ms(20);
    }
}

int eh_elect_signal(eh_elect *c, int sig)
{
    return elect_running(c) ? kill(c->pid, sig) : -1;
}

int eh_elect_wait_exit(eh_elect *c, int timeout_ms)
{
    long long deadline = now_ms() + timeout_ms;

    while (elect_running(c)) {
        if (now_ms() > deadline)
            return -1;
        sleep_ms(10);
    }
    return c->status;
}

void eh_elect_free(eh_elect *c)
{
    if (!c)
        return;
    if (c->pid > 0 && !c->exited) {
        kill(c->pid, SIGKILL);
        reap(c->pid, NULL, 1);
    }
    if (c->out_file)
        remove(c->out_file);
    if (c->err_file)
        remove(c->err_file);
    free(c->out_file);
    free(c->err_file);
    free(c);
}
