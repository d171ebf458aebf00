/* The seed ABI's log lines on stderr: what a program written against the
 * Go library sees of an election, a refused request, a lost term;
 * K8SLEASE_LOG_LEVEL; lines of several elections never mixed; releases
 * (and their lines) not lost when the program exits at once.
 *
 * The program under test is this binary run as a child ("child" as its
 * argument): a seed-ABI program reading commands on stdin ("run LEASE ID",
 * "wait LEASE", ...) and answering one line each on stdout, its stderr a
 * pipe this process reads. The level is read once per process, hence a
 * child per case. On a real server (envtest.sh) the 403 comes from RBAC
 * (kubeconfig-user), the lost term from a stopped kube-apiserver. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <regex.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include <jansson.h>

#include "e2e.h"
#include "harness.h"
#include "libk8s_lease_wrapper.h"

extern char **environ;

#define LD      3
#define RD      2
#define RP      1
#define WAIT_S  60    /* a child's WaitElected (10x what a loaded machine needs) */
#define WAIT_MS 60000 /* any wait of the parent */
#define NS      "default"
#define MANY    8
/* An identity that would forge a line of its own if printed as it is. */
#define FORGED "forger:1\n2026-12-01T00:00:00.000000Z k8slease[1] error default/x: forged"

/* ---- the child: a seed-ABI program ------------------------------------ */

static void *many_one(void *arg)
{
    char *lease = arg, id[200], *err = NULL;
    long long t = -1;
    int rc;

    snprintf(id, sizeof(id), "%s:8080", lease);
    rc = K8sLeaseRunElection(NS, lease, id, LD, RD, RP, &err);
    if (rc == 0)
        rc = K8sLeaseWaitElected(NS, lease, WAIT_S, &t, &err);
    if (rc == 0)
        rc = K8sLeaseCancelElection(NS, lease, &err);
    if (rc == 0)
        rc = K8sLeaseWaitLost(NS, lease, &err);
    free(err);
    return rc == 0 ? NULL : lease;
}

/* Commands (one a line): init | run LEASE ID | wait LEASE | cancel LEASE |
 * waitlost LEASE | forge LEASE (run with the identity FORGED) | many PREFIX (MANY elections at
 * once, from as many threads) | exit. Answers "ok EPOCH" or "err RC MESSAGE". */
static int child_main(void)
{
    char line[512], cmd[32], a[128], b[128];

    while (fgets(line, sizeof(line), stdin)) {
        char *err = NULL;
        long long t = -1;
        int rc = 0;

        a[0] = b[0] = '\0';
        if (sscanf(line, "%31s %127s %127s", cmd, a, b) < 1)
            continue;
        if (strcmp(cmd, "init") == 0) {
            rc = K8sLeaseInit(&err);
        } else if (strcmp(cmd, "run") == 0) {
            rc = K8sLeaseRunElection((char *)NS, a, b, LD, RD, RP, &err);
        } else if (strcmp(cmd, "forge") == 0) {
            rc = K8sLeaseRunElection((char *)NS, a, (char *)FORGED, LD, RD, RP, &err);
        } else if (strcmp(cmd, "wait") == 0) {
            rc = K8sLeaseWaitElected((char *)NS, a, WAIT_S, &t, &err);
        } else if (strcmp(cmd, "cancel") == 0) {
            rc = K8sLeaseCancelElection((char *)NS, a, &err);
        } else if (strcmp(cmd, "waitlost") == 0) {
            rc = K8sLeaseWaitLost((char *)NS, a, &err);
        } else if (strcmp(cmd, "many") == 0) {
            static char leases[MANY][160];
            pthread_t th[MANY];
            void *res;

            for (int i = 0; i < MANY; i++) {
                snprintf(leases[i], sizeof(leases[i]), "%s-%d", a, i);
                pthread_create(&th[i], NULL, many_one, leases[i]);
            }
            for (int i = 0; i < MANY; i++)
                if (pthread_join(th[i], &res) == 0 && res)
                    rc = -1;
        } else if (strcmp(cmd, "exit") == 0) {
            printf("ok -1\n");
            fflush(stdout);
            break;
        } else {
            rc = -2;
        }
        if (rc == 0)
            printf("ok %lld\n", t);
        else
            printf("err %d %s\n", rc, err ? err : "");
        fflush(stdout);
        free(err);
    }
    return 0;
}

/* ---- the parent: driving a child and reading its stderr ---------------- */

typedef struct child {
    pid_t pid;
    int in, out, err; /* its stdin, stdout, stderr */
    pthread_t reader;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *text; /* all of its stderr so far */
    size_t len, cap;
    int eof;
} child;

static void *read_stderr(void *arg)
{
    child *c = arg;
    char buf[4096];
    ssize_t n;

    for (;;) {
        n = read(c->err, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        pthread_mutex_lock(&c->mu);
        if (n > 0) {
            if (c->len + (size_t)n + 1 > c->cap) {
                c->cap = (c->len + (size_t)n + 1) * 2;
                c->text = realloc(c->text, c->cap);
            }
            memcpy(c->text + c->len, buf, (size_t)n);
            c->len += (size_t)n;
            c->text[c->len] = '\0';
        } else {
            c->eof = 1;
        }
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
        if (n <= 0)
            return NULL;
    }
}

/* Starts this binary as a child with K8SLEASE_LOG_LEVEL=level (NULL:
 * unset) and KUBECONFIG=kubeconfig (NULL: ours). */
static child *child_start(const char *level, const char *kubeconfig)
{
    static char level_var[128], kc_var[4096];
    posix_spawn_file_actions_t fa;
    char *argv[] = {(char *)"/proc/self/exe", (char *)"child", NULL};
    char **env;
    int pin[2], pout[2], perr[2], n = 0, k = 0;
    child *c = calloc(1, sizeof(*c));

    assert_non_null(c);
    while (environ[n])
        n++;
    env = calloc((size_t)n + 3, sizeof(*env));
    assert_non_null(env);
    for (int i = 0; i < n; i++)
        if (strncmp(environ[i], "K8SLEASE_LOG_LEVEL=", 19) != 0 &&
            (!kubeconfig || strncmp(environ[i], "KUBECONFIG=", 11) != 0))
            env[k++] = environ[i];
    if (level) {
        snprintf(level_var, sizeof(level_var), "K8SLEASE_LOG_LEVEL=%s", level);
        env[k++] = level_var;
    }
    if (kubeconfig) {
        snprintf(kc_var, sizeof(kc_var), "KUBECONFIG=%s", kubeconfig);
        env[k++] = kc_var;
    }
    assert_int_equal(pipe(pin), 0);
    assert_int_equal(pipe(pout), 0);
    assert_int_equal(pipe(perr), 0);
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pin[0], 0);
    posix_spawn_file_actions_adddup2(&fa, pout[1], 1);
    posix_spawn_file_actions_adddup2(&fa, perr[1], 2);
    for (int i = 0; i < 2; i++) {
        posix_spawn_file_actions_addclose(&fa, pin[i]);
        posix_spawn_file_actions_addclose(&fa, pout[i]);
        posix_spawn_file_actions_addclose(&fa, perr[i]);
    }
    assert_int_equal(posix_spawn(&c->pid, argv[0], &fa, NULL, argv, env), 0);
    posix_spawn_file_actions_destroy(&fa);
    free(env);
    close(pin[0]);
    close(pout[1]);
    close(perr[1]);
    c->in = pin[1];
    c->out = pout[0];
    c->err = perr[0];
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    assert_int_equal(pthread_create(&c->reader, NULL, read_stderr, c), 0);
    return c;
}

/* A copy of the child's stderr so far (free it). */
static char *child_stderr(child *c)
{
    char *s;

    pthread_mutex_lock(&c->mu);
    s = strdup(c->text ? c->text : "");
    pthread_mutex_unlock(&c->mu);
    assert_non_null(s);
    return s;
}

/* Sends one command and returns its answer line (static buffer). */
static const char *child_cmd(child *c, const char *fmt, ...)
{
    static char answer[1024];
    char cmd[512];
    size_t n = 0;
    int64_t deadline = e2e_mono_ms() + WAIT_MS + WAIT_S * 1000;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    strcat(cmd, "\n");
    assert_int_equal(write(c->in, cmd, strlen(cmd)), (ssize_t)strlen(cmd));
    for (;;) {
        struct pollfd p = {c->out, POLLIN, 0};
        int64_t left = deadline - e2e_mono_ms();
        char ch;

        if (left <= 0 || poll(&p, 1, (int)left) == 0)
            fail_msg("child: no answer to \"%.*s\" within %d s", (int)strlen(cmd) - 1, cmd,
                     (WAIT_MS / 1000 + WAIT_S));
        if (read(c->out, &ch, 1) != 1)
            fail_msg("child: died during \"%.*s\"", (int)strlen(cmd) - 1, cmd);
        if (ch == '\n')
            break;
        if (n < sizeof(answer) - 1)
            answer[n++] = ch;
    }
    answer[n] = '\0';
    return answer;
}

/* A command that must succeed; returns the epoch it answers. */
static long long child_ok(child *c, const char *fmt, const char *lease, const char *arg)
{
    const char *a = child_cmd(c, fmt, lease, arg);

    if (strncmp(a, "ok ", 3) != 0)
        fail_msg("child: \"%s %s\": %s", fmt, lease, a);
    return atoll(a + 3);
}

/* Number of stderr lines holding every one of the NULL-terminated needles. */
static int vcount(const char *text, const char *needle, va_list ap0)
{
    int n = 0;

    for (const char *line = text; *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        char *l = strndup(line, len);
        int all = strstr(l, needle) != NULL;
        va_list ap;
        const char *more;

        va_copy(ap, ap0);
        while (all && (more = va_arg(ap, const char *)))
            all = strstr(l, more) != NULL;
        va_end(ap);
        n += all;
        free(l);
        line += len + (end ? 1 : 0);
    }
    return n;
}

/* The same in text; the needles end with NULL. */
static int count_in(const char *text, const char *needle, ...)
{
    va_list ap;
    int n;

    va_start(ap, needle);
    n = vcount(text, needle, ap);
    va_end(ap);
    return n;
}

/* want is in text exactly once. */
static void once(const char *text, const char *want)
{
    if (count_in(text, want, NULL) != 1)
        fail_msg("not one line \"%s\":\n%s", want, text);
}

static int count_lines(child *c, const char *needle, ...)
{
    va_list ap;
    char *text = child_stderr(c);
    int n;

    va_start(ap, needle);
    n = vcount(text, needle, ap);
    va_end(ap);
    free(text);
    return n;
}

/* Waits until at least n lines hold every needle; fails after WAIT_MS. */
static void wait_lines(child *c, int n, const char *needle, ...)
{
    struct timespec until;
    int have = 0;

    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += WAIT_MS / 1000;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        va_list ap;

        va_start(ap, needle);
        have = vcount(c->text ? c->text : "", needle, ap);
        va_end(ap);
        if (have >= n || c->eof || pthread_cond_timedwait(&c->cv, &c->mu, &until) != 0)
            break;
    }
    pthread_mutex_unlock(&c->mu);
    if (have < n) {
        char *text = child_stderr(c);

        fail_msg("%d line(s) with \"%s\" on the child's stderr, waited for %d within %d s; its "
                 "stderr:\n%s",
                 have, needle, n, WAIT_MS / 1000, text);
    }
}

/* "exit", then wait for the end of its stderr (it has exited) and reap it.
 * Returns its stderr (free it). */
static char *child_finish(child *c)
{
    struct timespec until;
    int status = -1;
    char *text;

    child_cmd(c, "exit");
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += WAIT_MS / 1000;
    pthread_mutex_lock(&c->mu);
    while (!c->eof && pthread_cond_timedwait(&c->cv, &c->mu, &until) == 0)
        ;
    pthread_mutex_unlock(&c->mu);
    if (!c->eof)
        kill(c->pid, SIGKILL);
    pthread_join(c->reader, NULL);
    waitpid(c->pid, &status, 0);
    text = child_stderr(c);
    close(c->in);
    close(c->out);
    close(c->err);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c->text);
    free(c);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("child exited with status %d; its stderr:\n%s", status, text);
    if (getenv("K8SLEASE_TEST_VERBOSE"))
        fprintf(stderr, "---- the child's stderr:\n%s----\n", text);
    return text;
}

/* Another line's start inside this line (TIME is 26 characters before
 * "Z k8slease["), unless escaped: after "\x0a" it was text that only
 * looked like a line. */
static int second_header(const char *l)
{
    for (const char *q = strstr(l, "Z k8slease[") + 1; (q = strstr(q, "Z k8slease[")); q++)
        if (q - l < 30 || strncmp(q - 30, "\\x0a", 4) != 0)
            return 1;
    return 0;
}

/* Every line has the documented shape, and nothing else is on stderr:
 * TIME k8slease[PID] LEVEL SUBJECT: MESSAGE. Returns the number of lines. */
static int check_format(const char *text)
{
    regex_t re;
    int n = 0;

    assert_int_equal(regcomp(&re,
                             "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{6}Z "
                             "k8slease\\[[0-9]+\\] (error|warn|info|debug) "
                             "(-|[a-z0-9.-]+/([a-z0-9.-]+|\\*)): [[:print:]]+$",
                             REG_EXTENDED | REG_NOSUB),
                     0);
    for (const char *line = text; *line; n++) {
        const char *end = strchr(line, '\n');
        char *l;

        if (!end)
            fail_msg("stderr does not end with a newline: \"%s\"", line);
        l = strndup(line, (size_t)(end - line));
        if (regexec(&re, l, 0, NULL, 0) != 0 || second_header(l))
            fail_msg("line %d is not one log line: \"%s\"", n + 1, l);
        free(l);
        line = end + 1;
    }
    regfree(&re);
    return n;
}

/* No credential of the server under test in the output. */
static void check_no_token(const char *text)
{
    char *token = e2e_token();

    if (token && token[0] && strstr(text, token))
        fail_msg("the bearer token is in the log lines:\n%s", text);
    free(token);
}

static void fault(const char *json)
{
    long status = 0;
    char *body = NULL;

    assert_int_equal(
        ts_control(e2e_server(), "POST", "/testserver/v1/faults", json, &status, &body), 0);
    if (status != 201)
        fail_msg("fault %s: HTTP %ld %s", json, status, body ? body : "");
    free(body);
}

static void remove_fault(long id)
{
    char path[64];
    long status = 0;

    snprintf(path, sizeof(path), "/testserver/v1/faults/%ld", id);
    assert_int_equal(ts_control(e2e_server(), "DELETE", path, NULL, &status, NULL), 0);
    assert_int_equal(status, 200);
}

/* ---- cases ------------------------------------------------------------- */

static int setup(void **state)
{
    (void)state;
    return e2e_setup(NULL);
}

static int teardown(void **state)
{
    (void)state;
    return e2e_teardown(NULL);
}

/* What the Go library printed for one election (attempting, acquired),
 * plus the release; without K8sLeaseInit (the level is read by the first
 * call) and without K8SLEASE_LOG_LEVEL (info). */
static void election_lines(void **state)
{
    child *c = child_start(NULL, NULL);
    const char *lease = "log-elect";
    long long epoch;
    char *text, want[128];
    const char *a, *b, *r;

    (void)state;
    child_ok(c, "run %s %s", lease, "log-1:8080");
    epoch = child_ok(c, "wait %s%s", lease, "");
    child_ok(c, "cancel %s%s", lease, "");
    child_ok(c, "waitlost %s%s", lease, "");
    text = child_finish(c);
    check_format(text);
    check_no_token(text);
    a = strstr(text, " info default/log-elect: attempting to acquire leader lease as "
                     "\"log-1:8080\"...\n");
    snprintf(want, sizeof(want),
             " info default/log-elect: successfully acquired lease (epoch %lld)\n", epoch);
    b = strstr(text, want);
    snprintf(want, sizeof(want), " info default/log-elect: released lease (epoch %lld)\n", epoch);
    r = strstr(text, want);
    if (!a || !b || !r || !(a < b && b < r))
        fail_msg("expected attempting, acquired (epoch %lld), released, in that order; got:\n%s",
                 epoch, text);
    assert_null(strstr(text, " debug ")); /* not at the default level */
    free(text);
}

/* What comes from outside (here an identity with a newline) cannot forge
 * a line: control characters are escaped. */
static void identity_cannot_forge_a_line(void **state)
{
    child *c = child_start(NULL, NULL);
    const char *lease = "log-forge";
    char *text;

    (void)state;
    child_ok(c, "forge %s%s", lease, "");
    child_ok(c, "wait %s%s", lease, "");
    child_ok(c, "cancel %s%s", lease, "");
    child_ok(c, "waitlost %s%s", lease, "");
    text = child_finish(c);
    check_format(text);
    assert_int_equal(count_in(text, "forged", NULL), 1);
    assert_int_equal(count_in(text,
                              " info default/log-forge: attempting to acquire leader lease as "
                              "\"forger:1\\x0a2026-12-01T00:00:00.000000Z k8slease[1] error "
                              "default/x: forged\"...",
                              NULL),
                     1);
    free(text);
}

/* A 403 is named, with the server's message, once: not once per retry
 * period. On the test server the same error is named again after a
 * success (debug level shows each request); on a real server the user of
 * kubeconfig-user has no RBAC grant at all. */
static void forbidden_named_once(void **state)
{
    const char *user_kc = e2e_envtest_file("kubeconfig-user");
    const char *lease = "log-forbidden";
    long list_fault = -1;
    child *c;
    char *text;

    (void)state;
    if (!e2e_is_testserver() && !user_kc) {
        print_message("skipped: no kubeconfig-user for a 403 (run under envtest.sh)\n");
        skip();
    }
    c = child_start("debug", e2e_is_testserver() ? NULL : user_kc);
    if (e2e_is_testserver()) {
        /* The watch's list is refused too, for good: otherwise the order
         * of its answer ("no Lease") and the first refused GET decides
         * whether the candidate reads again or creates at once. */
        list_fault = e2e_add_fault(
            "{\"kind\":\"error\",\"status\":403,\"match\":{\"verb\":\"list\","
            "\"path_prefix\":\"/apis/coordination.k8s.io/v1/namespaces/default/leases\"}}");
        fault("{\"kind\":\"error\",\"status\":403,\"count\":3,\"match\":{\"verb\":\"get\","
              "\"path_prefix\":\"/apis/coordination.k8s.io/v1/namespaces/default/leases/"
              "log-forbidden\"}}");
    }
    child_ok(c, "run %s %s", lease, "log-403:8080");
    /* Three refused GETs, three retry periods. */
    wait_lines(c, 3, " debug default/log-forbidden: get lease default/log-forbidden: HTTP 403",
               NULL);
    assert_int_equal(count_lines(c,
                                 " warn default/log-forbidden: error retrieving lease: HTTP 403 "
                                 "Forbidden: ",
                                 NULL),
                     1);
    if (e2e_is_testserver()) {
        /* The fault is used up: the next GET succeeds and the election
         * wins (successes). Then the release's read is refused, the same
         * error again: named again, once. */
        child_ok(c, "wait %s%s", lease, "");
        fault("{\"kind\":\"error\",\"status\":403,\"count\":1,\"match\":{\"verb\":\"get\","
              "\"path_prefix\":\"/apis/coordination.k8s.io/v1/namespaces/default/leases/"
              "log-forbidden\"}}");
        child_ok(c, "cancel %s%s", lease, "");
        child_ok(c, "waitlost %s%s", lease, "");
        remove_fault(list_fault);
    } else {
        char forbidden[128];

        snprintf(forbidden, sizeof(forbidden),
                 "leases.coordination.k8s.io \"%s\" is forbidden: User \"envtest-user\"", lease);
        assert_int_equal(count_lines(c, " warn default/log-forbidden: error retrieving lease: ",
                                     forbidden, NULL),
                         1);
        child_ok(c, "cancel %s%s", lease, "");
        child_ok(c, "waitlost %s%s", lease, "");
    }
    text = child_finish(c);
    check_format(text);
    check_no_token(text);
    if (e2e_is_testserver() &&
        (count_in(text, " debug default/log-forbidden: get lease default/log-forbidden: HTTP 403",
                  NULL) != 4 ||
         count_in(text, " warn default/log-forbidden: error retrieving lease: HTTP 403 ", NULL) !=
             2))
        fail_msg("4 refused reads (3, a success, 1) should be named twice:\n%s", text);
    free(text);
}

/* A leader whose renewals fail past the renew deadline says it lost, at
 * error level, with the deadline. */
static void failed_renewal_says_lost(void **state)
{
    child *c;
    const char *lease = "log-lost";
    long long epoch, epoch2;
    char want[128], *text;

    (void)state;
    if (!e2e_has_ctl("apiserver")) {
        print_message("skipped: the API server cannot be stopped here\n");
        skip();
    }
    c = child_start(NULL, NULL);
    child_ok(c, "init%s%s", "", "");
    child_ok(c, "run %s %s", lease, "log-lost:8080");
    epoch = child_ok(c, "wait %s%s", lease, "");
    assert_int_equal(e2e_ctl("apiserver", "stop"), 0);
    snprintf(want, sizeof(want),
             " error default/log-lost: lost leadership (epoch %lld): failed to renew lease within "
             "2s",
             epoch);
    wait_lines(c, 1, want, NULL);
    /* The term is over while the server still hangs: WaitLost says so
     * now, and the supervisor campaigns again at once (the old election's
     * release is still waiting for the server, in the background). */
    child_ok(c, "waitlost %s%s", lease, "");
    child_ok(c, "run %s %s", lease, "log-lost:8080");
    assert_int_equal(e2e_ctl("apiserver", "cont"), 0);
    epoch2 = child_ok(c, "wait %s%s", lease, "");
    assert_true(epoch2 > epoch);
    child_ok(c, "cancel %s%s", lease, "");
    child_ok(c, "waitlost %s%s", lease, "");
    text = child_finish(c);
    check_format(text);
    /* Each election's lines tell its own story: one loss (of the first
     * term), one acquisition per term, the second term's release. */
    assert_int_equal(count_in(text, " lost leadership ", NULL), 1);
    assert_int_equal(count_in(text, ": attempting to acquire leader lease as ", NULL), 2);
    snprintf(want, sizeof(want), " info default/log-lost: successfully acquired lease (epoch %lld)",
             epoch2);
    assert_int_equal(count_in(text, want, NULL), 1);
    snprintf(want, sizeof(want), " info default/log-lost: released lease (epoch %lld)", epoch2);
    assert_int_equal(count_in(text, want, NULL), 1);
    assert_int_equal(count_in(text, "lease not released", NULL), 0);
    free(text);
}

/* off: nothing at all, errors included; error: only errors; an invalid
 * value: one line naming the variable and the value, then info. */
static void level_from_environment(void **state)
{
    child *c;
    char *text;

    (void)state;
    c = child_start("off", NULL);
    if (e2e_is_testserver())
        fault("{\"kind\":\"error\",\"status\":403,\"count\":2,\"match\":{\"verb\":\"get\","
              "\"path_prefix\":\"/apis/coordination.k8s.io/v1/namespaces/default/leases/"
              "log-off\"}}");
    child_ok(c, "init%s%s", "", "");
    child_ok(c, "run %s %s", "log-off", "log-off:8080");
    child_ok(c, "wait %s%s", "log-off", "");
    child_ok(c, "cancel %s%s", "log-off", "");
    child_ok(c, "waitlost %s%s", "log-off", "");
    text = child_finish(c);
    if (text[0])
        fail_msg("K8SLEASE_LOG_LEVEL=off, yet on stderr:\n%s", text);
    free(text);

    c = child_start("ERROR", NULL); /* any case */
    child_ok(c, "run %s %s", "log-error", "log-error:8080");
    child_ok(c, "wait %s%s", "log-error", "");
    child_ok(c, "cancel %s%s", "log-error", "");
    child_ok(c, "waitlost %s%s", "log-error", "");
    text = child_finish(c);
    if (text[0])
        fail_msg("K8SLEASE_LOG_LEVEL=error and no error, yet on stderr:\n%s", text);
    free(text);

    c = child_start("loud", NULL);
    child_ok(c, "init%s%s", "", "");
    child_ok(c, "run %s %s", "log-loud", "log-loud:8080");
    child_ok(c, "wait %s%s", "log-loud", "");
    child_ok(c, "cancel %s%s", "log-loud", "");
    child_ok(c, "waitlost %s%s", "log-loud", "");
    text = child_finish(c);
    check_format(text);
    assert_int_equal(count_in(text, "K8SLEASE_LOG_LEVEL", NULL), 1);
    assert_int_equal(count_in(text,
                              " warn -: K8SLEASE_LOG_LEVEL=\"loud\" is not one of off, error, "
                              "warn, info, debug: using info",
                              NULL),
                     1);
    assert_int_equal(count_in(text, " info default/log-loud: successfully acquired lease", NULL),
                     1);
    free(text);
}

/* How many of the Leases PREFIX-0 .. PREFIX-(MANY-1) the server shows
 * released (holderIdentity "" or absent), naming them in names. */
static int released_on_server(const char *prefix, char *names, size_t size)
{
    int n = 0;

    names[0] = '\0';
    for (int i = 0; i < MANY; i++) {
        char path[256];
        char *body = NULL;
        long status = 0;
        json_t *lease;
        const char *holder;

        snprintf(path, sizeof(path), "/apis/coordination.k8s.io/v1/namespaces/%s/leases/%s-%d", NS,
                 prefix, i);
        assert_int_equal(e2e_api("GET", path, NULL, &status, &body), 0);
        if (status != 200)
            fail_msg("GET %s: HTTP %ld %s", path, status, body ? body : "");
        lease = json_loads(body, 0, NULL);
        assert_non_null(lease);
        holder =
            json_string_value(json_object_get(json_object_get(lease, "spec"), "holderIdentity"));
        if (!holder || !holder[0]) {
            size_t len = strlen(names);

            n++;
            snprintf(names + len, size - len, "%s%s-%d", len ? ", " : "", prefix, i);
        }
        json_decref(lease);
        free(body);
    }
    return n;
}

/* MANY elections at once, at debug level (the most lines): every line
 * whole, every election's lines there. Each election is cancelled, waited
 * for in K8sLeaseWaitLost, and the program exits at once: the releases
 * still on their way are written before the process is gone (the exit
 * waits for them) and so are their lines. Which one is missing, when one
 * is, is told apart: the Leases on the server say whether the releases
 * were written. */
static void many_releases_at_exit(const char *prefix)
{
    child *c = child_start("debug", NULL);
    char *text, names[MANY * 64];
    int lines, released, said;

    child_ok(c, "many %s%s", prefix, "");
    text = child_finish(c);
    lines = check_format(text);
    check_no_token(text);
    assert_int_equal(count_in(text, ": attempting to acquire leader lease as ", NULL), MANY);
    assert_int_equal(count_in(text, ": successfully acquired lease (epoch ", NULL), MANY);
    released = released_on_server(prefix, names, sizeof(names));
    said = count_in(text, ": released lease (epoch ", NULL);
    if (released != MANY)
        fail_msg("%d of %d releases written before the program exited (released: %s); %d "
                 "\"released lease\" lines; its stderr:\n%s",
                 released, MANY, names[0] ? names : "none", said, text);
    if (said != MANY)
        fail_msg("all %d releases written, but %d \"released lease\" lines; its stderr:\n%s", MANY,
                 said, text);
    assert_true(lines > 8 * MANY);
    free(text);
}

static void concurrent_lines_never_mix(void **state)
{
    (void)state;
    many_releases_at_exit("log-many");
}

/* The same with every release still on its way when the program exits,
 * on a new connection: the connection that carries the first release's
 * write (of log-exit-*: the terms end at once, before any renewal) stalls,
 * the releases on it time out (a request timeout of 500 ms at 3/2/1 s)
 * and are sent again on a new connection, while the program exits. */
static void releases_in_flight_at_exit(void **state)
{
    long id;

    (void)state;
    e2e_need_testserver("it stalls the releases' connection with a fault rule");
    id = e2e_add_fault("{\"kind\":\"stall\",\"count\":1,\"duration_ms\":10000,\"match\":{"
                       "\"verb\":\"update\","
                       "\"path_prefix\":\"/apis/coordination.k8s.io/v1/namespaces/default/leases/"
                       "log-exit-\"}}");
    many_releases_at_exit("log-exit");
    e2e_wait_fault_retired(id, WAIT_MS);
}

/* Ask the leader of default/LEASE for a handoff (to: "" the best
 * candidate), as an operator does with kubectl annotate. */
static void request_handoff(const char *lease, const char *to)
{
    char path[160], body[200];
    long status = 0;

    snprintf(path, sizeof(path), "/apis/coordination.k8s.io/v1/namespaces/default/leases/%s",
             lease);
    snprintf(body, sizeof(body),
             "{\"metadata\":{\"annotations\":{\"k8slease.io/handoff-request\":\"%s\"}}}", to);
    assert_int_equal(e2e_api("PATCH", path, body, &status, NULL), 0);
    assert_int_equal(status, 200);
}

/* A handoff an operator asks for ends the term at info level, saying so
 * (to a named successor; with none known, a release): not as a lost
 * term, at error level. */
static void handoff_request_says_so(void **state)
{
    child *c;
    long long named, best;
    char want[256], *text;

    (void)state;
    c = child_start(NULL, NULL);
    child_ok(c, "init%s%s", "", "");
    child_ok(c, "run %s %s", "log-handoff-named", "log-handoff-a:8080");
    child_ok(c, "run %s %s", "log-handoff-best", "log-handoff-a:8080");
    named = child_ok(c, "wait %s%s", "log-handoff-named", "");
    best = child_ok(c, "wait %s%s", "log-handoff-best", "");
    request_handoff("log-handoff-named", "log-handoff-b");
    request_handoff("log-handoff-best", "");
    child_ok(c, "waitlost %s%s", "log-handoff-named", "");
    child_ok(c, "waitlost %s%s", "log-handoff-best", "");
    text = child_finish(c);
    check_format(text);
    snprintf(want, sizeof(want),
             " info default/log-handoff-named: stopped leading (epoch %lld): a handoff was "
             "requested: handing the lease over to \"log-handoff-b\"",
             named);
    once(text, want);
    snprintf(want, sizeof(want),
             " info default/log-handoff-best: stopped leading (epoch %lld): a handoff was "
             "requested, no successor is known: releasing the lease",
             best);
    once(text, want);
    if (count_in(text, " lost leadership ", NULL) != 0)
        fail_msg("a requested handoff said \"lost leadership\":\n%s", text);
    free(text);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(election_lines),
        cmocka_unit_test(identity_cannot_forge_a_line),
        cmocka_unit_test(forbidden_named_once),
        cmocka_unit_test(failed_renewal_says_lost),
        cmocka_unit_test(level_from_environment),
        cmocka_unit_test(concurrent_lines_never_mix),
        cmocka_unit_test(releases_in_flight_at_exit),
        cmocka_unit_test(handoff_request_says_so),
    };

    if (argc == 2 && strcmp(argv[1], "child") == 0)
        return child_main();
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, setup, teardown);
}
