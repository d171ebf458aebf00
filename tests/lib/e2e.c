#include "e2e.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "harness.h"
#include "core/elector.h"
#include "k8s/kubeconfig.h"

static ts_server *server;
static const char *const *server_args;

static void delete_namespaces(void);

void e2e_log_to_stderr(k8slease_log_level level, const char *msg, void *ud)
{
    static const char *names[] = {"error", "warn", "info", "debug"};

    (void)ud;
    fprintf(stderr, "k8slease %s: %s\n", names[level], msg);
}

void e2e_testserver_args(const char *const *args)
{
    server_args = args;
}

int e2e_setup(k8slease_client **client)
{
    k8slease_client_options opts = K8SLEASE_CLIENT_OPTIONS_INIT;
    const char *kc = getenv("K8SLEASE_TEST_KUBECONFIG");
    const char *verbose = getenv("K8SLEASE_TEST_VERBOSE");

    if (server) {
        kc = ts_kubeconfig(server); /* already started: another client */
    } else if (!kc || !kc[0]) {
        if (ts_start(&server, server_args) != 0) {
            fprintf(stderr, "e2e: cannot start k8slease-testserver\n");
            return -1;
        }
        kc = ts_kubeconfig(server);
    }
    setenv("KUBECONFIG", kc, 1);
    unsetenv("KUBERNETES_SERVICE_HOST");
    if (!client)
        return 0;
    opts.kubeconfig = kc;
    if (verbose && verbose[0]) {
        opts.log_cb = e2e_log_to_stderr;
        opts.log_level = K8SLEASE_LOG_DEBUG;
    }
    if (k8slease_client_new(client, &opts) != 0) {
        fprintf(stderr, "e2e: client: %s\n", k8slease_error_last());
        return -1;
    }
    return 0;
}

int e2e_teardown(k8slease_client *client)
{
    int status = 0;

    k8slease_client_free(client);
    delete_namespaces();
    if (server && (status = ts_stop(server)) != 0)
        fprintf(stderr, "e2e: k8slease-testserver exited with status %d\n", status);
    server = NULL;
    return status == 0 ? 0 : -1;
}

int e2e_is_testserver(void)
{
    return server != NULL;
}

struct ts_server *e2e_server(void)
{
    return server;
}

int64_t e2e_mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void e2e_pause_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};

    nanosleep(&ts, NULL);
}

/* ---- the API server under test, whichever it is ------------------------ */

/* Reads the token file of the kubeconfig (tokenFile) into buf. */
static int read_token_file(const char *path, char *buf, size_t size)
{
    FILE *f = fopen(path, "r");
    size_t n;

    if (!f)
        return -1;
    n = fread(buf, 1, size - 1, f);
    fclose(f);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        n--;
    buf[n] = '\0';
    return 0;
}

int e2e_api(const char *method, const char *path, const char *body, long *status, char **response)
{
    kl__restconfig *cfg = NULL;
    struct curl_slist *h = NULL;
    ts_buf out = {0};
    char url[2048], auth[8192] = "", token[4096];
    const char *kc = getenv("KUBECONFIG");
    CURLcode cc = CURLE_FAILED_INIT;
    CURL *c;
    int rc = -1;

    *status = 0;
    if (response)
        *response = NULL;
    if (kl__restconfig_load(&cfg, kc, NULL) != 0) {
        fprintf(stderr, "e2e_api: %s: %s\n", kc ? kc : "(no KUBECONFIG)", k8slease_error_last());
        return -1;
    }
    if (!(c = curl_easy_init()))
        goto out;
    snprintf(url, sizeof(url), "%s%s", cfg->server, path);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 30000L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    if (cfg->ca_pem) {
        struct curl_blob blob = {cfg->ca_pem, cfg->ca_pem_len, CURL_BLOB_COPY};
        curl_easy_setopt(c, CURLOPT_CAINFO_BLOB, &blob);
    } else if (cfg->ca_file) {
        curl_easy_setopt(c, CURLOPT_CAINFO, cfg->ca_file);
    }
    if (cfg->cert_pem) {
        struct curl_blob cert = {cfg->cert_pem, cfg->cert_pem_len, CURL_BLOB_COPY};
        struct curl_blob key = {cfg->key_pem, cfg->key_pem_len, CURL_BLOB_COPY};
        curl_easy_setopt(c, CURLOPT_SSLCERT_BLOB, &cert);
        curl_easy_setopt(c, CURLOPT_SSLCERTTYPE, "PEM");
        curl_easy_setopt(c, CURLOPT_SSLKEY_BLOB, &key);
    } else if (cfg->cert_file) {
        curl_easy_setopt(c, CURLOPT_SSLCERT, cfg->cert_file);
        curl_easy_setopt(c, CURLOPT_SSLKEY, cfg->key_file);
    }
    if (cfg->token)
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", cfg->token);
    else if (cfg->token_file && read_token_file(cfg->token_file, token, sizeof(token)) == 0)
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
    if (auth[0])
        h = curl_slist_append(h, auth);
    h = curl_slist_append(h, "Accept: application/json");
    if (body) {
        h = curl_slist_append(h, strcmp(method, "PATCH")
                                     ? "Content-Type: application/json"
                                     : "Content-Type: application/merge-patch+json");
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    }
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, ts_buf_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &out);
    if ((cc = curl_easy_perform(c)) != CURLE_OK) {
        fprintf(stderr, "e2e_api: %s %s: %s\n", method, url, curl_easy_strerror(cc));
        goto out;
    }
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
    if (response) {
        *response = out.data ? out.data : strdup("");
        out.data = NULL;
    }
    rc = 0;
out:
    free(out.data);
    curl_slist_free_all(h);
    if (c)
        curl_easy_cleanup(c);
    memset(auth, 0, sizeof(auth));
    kl__restconfig_free(cfg);
    return rc;
}

/* Namespaces made by e2e_namespace, deleted by e2e_teardown. */
static char namespaces[16][64];
static size_t nnamespaces;

const char *e2e_namespace(const char *prefix)
{
    char body[256];
    char *name;
    long status = 0;
    char *resp = NULL;
    unsigned r;
    FILE *f = fopen("/dev/urandom", "rb");

    if (nnamespaces == sizeof(namespaces) / sizeof(namespaces[0])) {
        fprintf(stderr, "e2e_namespace: more than %zu namespaces in one suite\n", nnamespaces);
        return NULL;
    }
    if (!f || fread(&r, sizeof(r), 1, f) != 1)
        r = (unsigned)getpid() ^ (unsigned)e2e_mono_ms();
    if (f)
        fclose(f);
    name = namespaces[nnamespaces];
    snprintf(name, sizeof(namespaces[0]), "%.40s-%06x", prefix, r & 0xffffff);
    snprintf(body, sizeof(body),
             "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"%s\"}}", name);
    if (e2e_api("POST", "/api/v1/namespaces", body, &status, &resp) != 0 || status != 201) {
        fprintf(stderr, "e2e_namespace: POST /api/v1/namespaces %s: status %ld: %s\n", name, status,
                resp ? resp : "");
        free(resp);
        return NULL;
    }
    free(resp);
    nnamespaces++;
    return name;
}

static void delete_namespaces(void)
{
    char path[256];
    long status;

    /* A real cluster finishes the deletion in its namespace controller;
     * envtest has none, so the namespace stays Terminating there. */
    for (size_t i = 0; i < nnamespaces; i++) {
        snprintf(path, sizeof(path), "/api/v1/namespaces/%.63s", namespaces[i]);
        if (e2e_api("DELETE", path, NULL, &status, NULL) != 0 || status != 200)
            fprintf(stderr, "e2e: DELETE %s: status %ld\n", path, status);
    }
    nnamespaces = 0;
}

/* ---- process faults ----------------------------------------------------- */

static bool envtest_ctl(void)
{
    const char *ctl = getenv("K8SLEASE_ENVTEST_CTL");

    return ctl && ctl[0] && getenv("K8SLEASE_TEST_KUBECONFIG");
}

int e2e_replicas(void)
{
    static int replicas; /* 0: not asked yet */
    const char *ctl = getenv("K8SLEASE_ENVTEST_CTL");
    char cmd[4096], line[32];
    FILE *f;
    int n;

    if (server || !envtest_ctl())
        return 1;
    if (replicas)
        return replicas;
    replicas = 1;
    snprintf(cmd, sizeof(cmd), "'%s' replicas", ctl);
    f = popen(cmd, "r");
    if (!f) {
        fprintf(stderr, "e2e_replicas: %s: %s\n", cmd, strerror(errno));
        return replicas;
    }
    if (fgets(line, sizeof(line), f) && sscanf(line, "%d", &n) == 1 && n >= 1)
        replicas = n;
    if (pclose(f) != 0)
        fprintf(stderr, "e2e_replicas: %s failed; taking 1\n", cmd);
    return replicas;
}

bool e2e_has_ctl(const char *proc)
{
    if (server)
        return strcmp(proc, "apiserver") == 0;
    if (!envtest_ctl())
        return false;
    /* The replicas and the balancer exist only with
     * K8SLEASE_ENVTEST_REPLICAS >= 2; every other name goes to the script. */
    if (!strcmp(proc, "lb"))
        return e2e_replicas() >= 2;
    if (!strncmp(proc, "apiserver", 9) && proc[9] >= '2' && proc[9] <= '9' && !proc[10])
        return e2e_replicas() >= proc[9] - '0';
    return true;
}

/* The actions that end with the process started again: their failure
 * leaves no server. */
static bool brings_back(const char *action)
{
    return !strcmp(action, "start") || !strcmp(action, "restart") ||
           !strcmp(action, "rotate-token") || !strcmp(action, "wipe");
}

int e2e_ctl(const char *proc, const char *action)
{
    const char *ctl = getenv("K8SLEASE_ENVTEST_CTL");
    char cmd[4096], how[128];
    int rc;

    if (server && !strcmp(proc, "apiserver")) {
        /* The mirror is one process: SIGSTOP/SIGCONT it, or restart it in
         * place keeping its state (its kill+start). */
        if (!strcmp(action, "stop") || !strcmp(action, "cont"))
            return kill(ts_pid(server), action[0] == 's' ? SIGSTOP : SIGCONT) == 0 ? 0 : -1;
        if (!strcmp(action, "restart"))
            return ts_restart(server, true, 0);
        fprintf(stderr, "e2e_ctl: apiserver %s: not on k8slease-testserver\n", action);
        return -1;
    }
    if (!e2e_has_ctl(proc)) {
        fprintf(stderr, "e2e_ctl: %s %s: no K8SLEASE_ENVTEST_CTL (run under envtest.sh)\n", proc,
                action);
        return -1;
    }
    snprintf(cmd, sizeof(cmd), "'%s' %s %s", ctl, proc, action);
    rc = system(cmd);
    if (rc == 0)
        return 0;
    if (rc == -1)
        snprintf(how, sizeof(how), "cannot run it: %s", strerror(errno));
    else if (WIFEXITED(rc))
        snprintf(how, sizeof(how), "exit status %d", WEXITSTATUS(rc));
    else if (WIFSIGNALED(rc))
        snprintf(how, sizeof(how), "killed by signal %d", WTERMSIG(rc));
    else
        snprintf(how, sizeof(how), "wait status %d", rc);
    if (brings_back(action)) {
        /* The process is down and did not come back: every later test
         * would time out against nothing, one by one. */
        fflush(stdout);
        fprintf(stderr,
                "e2e_ctl: FATAL: %s %s failed (%s; envtest.sh's message above): the real "
                "server under test is gone, so this suite stops here\n",
                proc, action, how);
        exit(1);
    }
    fprintf(stderr, "e2e_ctl: %s: %s\n", cmd, how);
    return -1;
}

/* ---- the server's address and token ------------------------------------ */

static kl__restconfig *load_config(void)
{
    kl__restconfig *cfg = NULL;

    if (kl__restconfig_load(&cfg, getenv("KUBECONFIG"), NULL) != 0) {
        fprintf(stderr, "e2e: %s\n", k8slease_error_last());
        return NULL;
    }
    return cfg;
}

char *e2e_url(void)
{
    kl__restconfig *cfg = load_config();
    char *url = cfg ? strdup(cfg->server) : NULL;

    kl__restconfig_free(cfg);
    return url;
}

int e2e_port(void)
{
    char *url = e2e_url();
    const char *colon = url ? strrchr(url, ':') : NULL;
    int port = colon ? atoi(colon + 1) : -1;

    free(url);
    return port;
}

char *e2e_token(void)
{
    kl__restconfig *cfg = load_config();
    char buf[4096];
    char *token = NULL;

    if (cfg && cfg->token)
        token = strdup(cfg->token);
    else if (cfg && cfg->token_file && read_token_file(cfg->token_file, buf, sizeof(buf)) == 0)
        token = strdup(buf);
    kl__restconfig_free(cfg);
    return token;
}

const char *e2e_envtest_file(const char *name)
{
    static char path[4096];
    const char *dir = getenv("K8SLEASE_ENVTEST_DIR");

    if (server || !dir || !dir[0] || !getenv("K8SLEASE_TEST_KUBECONFIG"))
        return NULL;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return access(path, R_OK) == 0 ? path : NULL;
}

int e2e_create(const char *path, const char *body)
{
    char *resp = NULL;
    long status = 0;

    if (e2e_api("POST", path, body, &status, &resp) != 0)
        return -1;
    if (status != 201)
        fprintf(stderr, "e2e_create: POST %s: HTTP %ld %s\n", path, status, resp ? resp : "");
    free(resp);
    return status == 201 ? 0 : -1;
}

void e2e_cand_on_started(int64_t epoch, void *ud)
{
    e2e_cand *c = ud;

    pthread_mutex_lock(&c->mu);
    c->started_at = e2e_mono_ms();
    c->epoch = epoch;
    pthread_mutex_unlock(&c->mu);
}

void e2e_cand_on_stopped(void *ud)
{
    e2e_cand *c = ud;

    pthread_mutex_lock(&c->mu);
    c->stopped_at = e2e_mono_ms();
    pthread_mutex_unlock(&c->mu);
}

void e2e_cand_on_new_leader(const char *id, int64_t epoch, void *ud)
{
    e2e_cand *c = ud;

    (void)epoch;
    pthread_mutex_lock(&c->mu);
    snprintf(c->leader, sizeof(c->leader), "%s", id);
    pthread_mutex_unlock(&c->mu);
}

/* ---- for cmocka tests --------------------------------------------------- */

void e2e_need_testserver(const char *why)
{
    if (!e2e_is_testserver()) {
        print_message("skipped on a real API server: %s\n", why);
        skip();
    }
}

long e2e_add_fault(const char *json)
{
    char *resp = NULL;
    long status = 0, id;
    json_t *root;

    assert_int_equal(
        ts_control(e2e_server(), "POST", "/testserver/v1/faults", json, &status, &resp), 0);
    if (status != 201)
        fail_msg("fault %s refused: HTTP %ld %s", json, status, resp ? resp : "");
    root = json_loads(resp, 0, NULL);
    id = (long)json_integer_value(json_object_get(root, "id"));
    json_decref(root);
    free(resp);
    assert_true(id > 0);
    return id;
}

void e2e_wait_fault_retired(long id, int ms)
{
    char path[64];
    int64_t deadline = e2e_mono_ms() + ms;

    snprintf(path, sizeof(path), "/testserver/v1/faults/%ld", id);
    for (;;) {
        long status = 0;

        assert_int_equal(ts_control(e2e_server(), "GET", path, NULL, &status, NULL), 0);
        if (status == 404)
            return;
        if (e2e_mono_ms() > deadline)
            fail_msg("fault %ld still live after %d ms", id, ms);
        e2e_pause_ms(20);
    }
}

/* ---- a thread held in wait_lost ------------------------------------------ */

static int held_in[2] = {-1, -1}, held_out[2] = {-1, -1};

static void hold_here(k8slease_elector *e)
{
    char c = 'h';

    (void)e;
    if (write(held_in[1], &c, 1) != 1 || read(held_out[0], &c, 1) != 1)
        abort();
}

void e2e_lost_await_waiting(void)
{
    int64_t until = e2e_mono_ms() + 10000;

    if (held_in[0] < 0) {
        assert_int_equal(pipe(held_in), 0);
        assert_int_equal(pipe(held_out), 0);
        kl__elector_lost_hook = hold_here;
    }
    while (kl__elector_lost_waiting() == 0) {
        if (e2e_mono_ms() > until)
            fail_msg("no thread waited in wait_lost within 10 s");
        e2e_pause_ms(1);
    }
}

void e2e_lost_await_held(void)
{
    struct pollfd p = {.fd = held_in[0], .events = POLLIN};
    char c;

    if (poll(&p, 1, 10000) != 1 || read(held_in[0], &c, 1) != 1)
        fail_msg("the thread in wait_lost was not woken by the end of the term within 10 s");
}

void e2e_lost_let_go(void)
{
    char c = 'g';

    assert_int_equal(write(held_out[1], &c, 1), 1);
}
