/*
 * harness.c - fork/exec k8slease-testserver, parse its ready line, talk to
 * it with libcurl.
 */
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <curl/curl.h>

#define READY_TIMEOUT_MS 10000
#define STOP_TIMEOUT_MS  10000

struct ts_server {
    pid_t pid;
    int out_fd; /* the server's stdout; kept open so it never sees EPIPE */
    int port;
    char *dir;
    char *kubeconfig;
    char *url;
    char *ca_file;
    CURL *curl;
};

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

static char *join(const char *a, const char *b)
{
    size_t n = strlen(a) + strlen(b) + 1;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s%s", a, b);
    return s;
}

static const char *server_path(void)
{
    const char *p = getenv("K8SLEASE_TESTSERVER");
    if (p && *p)
        return p;
#ifdef K8SLEASE_TESTSERVER_PATH
    return K8SLEASE_TESTSERVER_PATH;
#else
    return NULL;
#endif
}

/* Reads the first line from fd within the deadline; the child must stay alive. */
static int read_ready_line(ts_server *s, char *line, size_t cap)
{
    size_t len = 0;
    long long deadline = now_ms() + READY_TIMEOUT_MS;
    while (len + 1 < cap) {
        long long left = deadline - now_ms();
        if (left <= 0) {
            fprintf(stderr, "harness: no ready line from the test server within %d ms\n",
                    READY_TIMEOUT_MS);
            return -1;
        }
        struct pollfd pfd = {s->out_fd, POLLIN, 0};
        int rc = poll(&pfd, 1, (int)(left < 200 ? left : 200));
        if (rc < 0 && errno != EINTR)
            return -1;
        if (rc > 0) {
            ssize_t n = read(s->out_fd, line + len, 1);
            if (n == 0) {
                fprintf(stderr, "harness: the test server closed stdout before it was ready\n");
                return -1;
            }
            if (n < 0 && errno != EINTR)
                return -1;
            if (n == 1 && line[len++] == '\n') {
                line[len - 1] = '\0';
                return 0;
            }
        }
        int st;
        if (waitpid(s->pid, &st, WNOHANG) == s->pid) {
            fprintf(stderr, "harness: the test server exited before it was ready (status %d)\n",
                    WIFEXITED(st) ? WEXITSTATUS(st) : -1);
            s->pid = -1;
            return -1;
        }
    }
    fprintf(stderr, "harness: the ready line is too long\n");
    return -1;
}

/* "ready port=<port> dir=<DIR> kubeconfig=<DIR>/kubeconfig" */
static int parse_ready(ts_server *s, const char *line)
{
    const char *p = strstr(line, "port="), *d = strstr(line, " dir="),
               *k = strstr(line, " kubeconfig=");
    if (strncmp(line, "ready ", 6) || !p || !d || !k || d > k) {
        fprintf(stderr, "harness: unexpected ready line: %s\n", line);
        return -1;
    }
    s->port = atoi(p + 5);
    s->dir = strndup(d + 5, (size_t)(k - d - 5));
    s->kubeconfig = strdup(k + 12);
    s->ca_file = s->dir ? join(s->dir, "/ca.crt") : NULL;
    if (s->port <= 0 || !s->dir || !s->kubeconfig || !s->ca_file)
        return -1;
    /* The URL as the kubeconfig has it (127.0.0.1 or [::1]). */
    FILE *f = fopen(s->kubeconfig, "r");
    char buf[512];
    while (f && fgets(buf, sizeof(buf), f)) {
        char *srv = strstr(buf, "server: ");
        if (srv) {
            srv += 8;
            srv[strcspn(srv, "\r\n")] = '\0';
            s->url = strdup(srv);
            break;
        }
    }
    if (f)
        fclose(f);
    return s->url ? 0 : -1;
}

int ts_start(ts_server **out, const char *const *extra_args)
{
    const char *path = server_path();
    int pipefd[2] = {-1, -1};
    char line[4096];
    size_t nextra = 0;

    *out = NULL;
    if (!path) {
        fprintf(stderr, "harness: set K8SLEASE_TESTSERVER to the k8slease-testserver binary\n");
        return -1;
    }
    while (extra_args && extra_args[nextra])
        nextra++;
    ts_server *s = calloc(1, sizeof(*s));
    const char **argv = calloc(nextra + 3, sizeof(*argv));
    if (!s || !argv || pipe(pipefd) < 0) {
        free(s);
        free(argv);
        return -1;
    }
    s->pid = -1;
    s->out_fd = -1;
    size_t argc = 0;
    argv[argc++] = path;
    const char *verbose = getenv("K8SLEASE_TESTSERVER_VERBOSE");
    if (!verbose || !*verbose)
        argv[argc++] = "--quiet";
    for (size_t i = 0; i < nextra; i++)
        argv[argc++] = extra_args[i];
    argv[argc] = NULL;

    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        close(pipefd[0]);
        close(pipefd[1]);
        free(argv);
        free(s);
        return -1;
    }
    if (pid == 0) {
#ifdef __linux__
        /* Do not outlive a crashed test. */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
#endif
        dup2(pipefd[1], STDOUT_FILENO);
        close(pipefd[0]);
        close(pipefd[1]);
        execv(path, (char *const *)argv);
        fprintf(stderr, "harness: cannot run %s: %s\n", path, strerror(errno));
        _exit(127);
    }
    free(argv);
    close(pipefd[1]);
    s->pid = pid;
    s->out_fd = pipefd[0];
    fcntl(s->out_fd, F_SETFD, FD_CLOEXEC);

    if (read_ready_line(s, line, sizeof(line)) < 0 || parse_ready(s, line) < 0 ||
        !(s->curl = curl_easy_init())) {
        ts_stop(s);
        return -1;
    }
    *out = s;
    return 0;
}

const char *ts_kubeconfig(const ts_server *s)
{
    return s->kubeconfig;
}

const char *ts_dir(const ts_server *s)
{
    return s->dir;
}

const char *ts_url(const ts_server *s)
{
    return s->url;
}

const char *ts_ca_file(const ts_server *s)
{
    return s->ca_file;
}

int ts_port(const ts_server *s)
{
    return s->port;
}

int ts_pid(const ts_server *s)
{
    return (int)s->pid;
}

char *ts_token(const ts_server *s)
{
    char *path = join(s->dir, "/token");
    FILE *f = path ? fopen(path, "r") : NULL;
    char buf[512];
    char *tok = NULL;
    free(path);
    if (!f)
        return NULL;
    if (fgets(buf, sizeof(buf), f)) {
        buf[strcspn(buf, "\r\n")] = '\0';
        tok = strdup(buf);
    }
    fclose(f);
    return tok;
}

size_t ts_buf_write(char *p, size_t size, size_t n, void *ud)
{
    ts_buf *b = ud;
    size_t add = size * n;
    char *d = realloc(b->data, b->len + add + 1);
    if (!d)
        return 0;
    memcpy(d + b->len, p, add);
    b->data = d;
    b->len += add;
    b->data[b->len] = '\0';
    return add;
}

int ts_request(ts_server *s, const char *method, const char *path, const char *content_type,
               const char *body, long *status, char **response)
{
    struct curl_slist *hdr = NULL;
    ts_buf b = {NULL, 0};
    char *url = join(s->url, path);
    char *tok = ts_token(s);
    char *auth = tok ? join("Authorization: Bearer ", tok) : NULL;
    char *ctype = NULL;
    int rc = -1;

    *status = 0;
    if (response)
        *response = NULL;
    if (!url || !auth)
        goto out;
    hdr = curl_slist_append(hdr, auth);
    if (body) {
        ctype = join("Content-Type: ", content_type ? content_type : "application/json");
        hdr = curl_slist_append(hdr, ctype);
    }
    CURL *h = s->curl;
    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CAINFO, s->ca_file);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "k8slease-testharness");
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, ts_buf_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    if (body) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    }
    CURLcode cc = curl_easy_perform(h);
    if (cc != CURLE_OK)
        goto out;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
    if (response) {
        *response = b.data ? b.data : strdup("");
        b.data = NULL;
    }
    rc = 0;
out:
    curl_slist_free_all(hdr);
    free(b.data);
    free(url);
    free(tok);
    free(auth);
    free(ctype);
    return rc;
}

int ts_control(ts_server *s, const char *method, const char *path, const char *json_body,
               long *status, char **response)
{
    return ts_request(s, method, path, "application/json", json_body, status, response);
}

/* The "restarts" counter from /testserver/v1/stats, or -1. */
static long restarts(ts_server *s)
{
    long status;
    char *body = NULL;
    long n = -1;
    if (ts_control(s, "GET", "/testserver/v1/stats", NULL, &status, &body) == 0 && status == 200) {
        const char *p = strstr(body, "\"restarts\":");
        if (p)
            n = strtol(p + 11, NULL, 10);
    }
    free(body);
    return n;
}

int ts_restart(ts_server *s, bool keep_state, unsigned down_ms)
{
    char req[96];
    long status;
    long before = restarts(s);
    if (before < 0)
        return -1;
    snprintf(req, sizeof(req), "{\"keep_state\":%s,\"down_ms\":%u}", keep_state ? "true" : "false",
             down_ms);
    if (ts_control(s, "POST", "/testserver/v1/restart", req, &status, NULL) < 0 || status != 202) {
        fprintf(stderr, "harness: restart refused (HTTP %ld)\n", status);
        return -1;
    }
    long long deadline = now_ms() + 10000 + down_ms;
    while (now_ms() < deadline) {
        if (restarts(s) > before)
            return 0;
        sleep_ms(20);
    }
    fprintf(stderr, "harness: the server did not come back after a restart\n");
    return -1;
}

int ts_stop(ts_server *s)
{
    int result = -1;
    if (!s)
        return 0;
    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        long long deadline = now_ms() + STOP_TIMEOUT_MS;
        int st = 0;
        pid_t r = 0;
        while ((r = waitpid(s->pid, &st, WNOHANG)) == 0 && now_ms() < deadline)
            sleep_ms(10);
        if (r == 0) {
            fprintf(stderr, "harness: the test server ignored SIGTERM; killing it\n");
            kill(s->pid, SIGKILL);
            waitpid(s->pid, &st, 0);
        } else if (r == s->pid && WIFEXITED(st)) {
            result = WEXITSTATUS(st);
        }
    }
    if (s->out_fd >= 0)
        close(s->out_fd);
    if (s->curl)
        curl_easy_cleanup(s->curl);
    free(s->dir);
    free(s->kubeconfig);
    free(s->url);
    free(s->ca_file);
    free(s);
    return result;
}
