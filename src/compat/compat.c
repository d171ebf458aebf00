/* The seed's C ABI (libk8s_lease_wrapper.h) over the native API: a
 * process-wide client and maps "ns/name" -> election / watch, as the Go
 * library kept them. Blocking calls wait on the native elector; nothing
 * here runs a second election implementation.
 *
 * Unlike the native API, the seed ABI prints: the Go library's client-go
 * logged through klog on stderr, and programs written against it rely on
 * those lines (see "Log lines" below and docs/migration.md). */
#include "libk8s_lease_wrapper.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/client.h"
#include "core/elector.h"
#include "k8slease.h"

#define GET_HOLDER_TIMEOUT_MS 5000
#define LINE_MAX_BYTES        2048
#define ERRS_KEPT             8 /* distinct errors remembered between two successes */

/* What the log lines of one election are made of (lg_mu held). Each
 * election has its own, so that an election still releasing in the
 * background never touches the state of the next one for the same Lease. */
typedef struct election_log {
    char *identity;      /* ours */
    int renew_s;         /* our renew deadline */
    int64_t epoch;       /* of our term */
    int leading;         /* between started and stopped */
    int led;             /* this election led at some point */
    int stopping;        /* cancelled through the ABI (or WaitElected timed out) */
    int deleted;         /* the Lease was not found while leading */
    int released;        /* our release was written */
    int handing;         /* the term ends in a handoff (asked on the Lease) */
    char successor[256]; /* ... to this candidate ("" none: a release) */
    char holder[256];    /* another holder seen while leading ("" if none) */
    int64_t holder_epoch;
    uint64_t errs[ERRS_KEPT]; /* hashes of the request errors printed since the last success */
    int nerrs;
    char last_err[LINE_MAX_BYTES / 2]; /* the last request error since the last success */
} election_log;

typedef struct entry {
    struct entry *next;
    char *key;
    int refs; /* the map's reference + one per caller using it */
    k8slease_elector *elector;
    election_log lg;
    k8slease_watch *watch;
    holder_change_cb_t cb;
    void *cb_ctx;
} entry;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static k8slease_client *g_client;
static entry *g_elections;
static entry *g_watches;

/* ---- Log lines ----------------------------------------------------------
 *
 * One line per event on stderr, each written with one write(2) to fd 2 (at
 * most LINE_MAX_BYTES, below PIPE_BUF), so lines of several elections never
 * interleave:
 *
 *   2026-12-01T14:14:00.443463Z k8slease[19004] info default/hs21363: successfully
 *   acquired lease (epoch 3)
 *
 * (one line), that is: UTC time with microseconds, "k8slease[PID]", the
 * level (error, warn, info, debug), the Lease "namespace/name" (for the
 * watch of a whole namespace "namespace" followed by "/" and "*"; "-" for
 * the process), ": " and the message.
 * Control characters are escaped (\xNN). K8SLEASE_LOG_LEVEL (off, error,
 * warn, info, debug; default info) is read once, at the first call.
 *
 * What the lines are made of: the seed calls themselves (attempting,
 * cancel), each election's notes (core/elector.h: acquired, lost, holder
 * changes, the outcome of its requests, its end), and the client's log
 * lines, which come with what they are about as data (kl__log_event,
 * core/common.h; never parsed from their text): the library's own lines
 * are printed at debug level under the Lease they are about (an
 * election's warnings and errors at theirs, without their "lease
 * NS/NAME: " prefix), and the kind of the lines of a watch tells its
 * health (healthy, not healthy, failed with an error). The client logs
 * everything to us (debug); we choose. A failed request is
 * named once per distinct error; the same error again is printed only
 * after a success of that election's requests. */

#define LOG_OFF (-1)

/* The watch of a Lease (or of a namespace) is the Lease's, not one
 * election's: its state is kept by key. */
typedef struct log_subject {
    struct log_subject *next;
    char key[300];             /* "ns/name" (the watch of a namespace: "ns/" and "*") */
    uint64_t werrs[ERRS_KEPT]; /* hashes of the watch errors printed until it is healthy */
    int nwerrs;
    int watch_trouble; /* a watch problem was printed since it was last healthy */
} log_subject;

static pthread_once_t lg_once = PTHREAD_ONCE_INIT;
/* Recursive: the client may log from inside a call made with it held
 * (k8slease_elector_start, on the caller's thread). Never held while
 * waiting for the loop thread. */
static pthread_mutex_t lg_mu;
static int lg_level = K8SLEASE_LOG_INFO; /* or LOG_OFF; set once, by lg_init */
static log_subject *lg_subjects;

static const char *const lg_names[] = {"error", "warn", "info", "debug"};

static void lg_vwrite(k8slease_log_level level, const char *subject, const char *fmt, va_list ap)
    KL_PRINTF(3, 0);

static void lg_vwrite(k8slease_log_level level, const char *subject, const char *fmt, va_list ap)
{
    char line[LINE_MAX_BYTES], msg[LINE_MAX_BYTES];
    struct timespec ts;
    struct tm tm;
    size_t n, room = sizeof(line) - 5; /* "...\n" and NUL */
    const char *p;

    if ((int)level > lg_level)
        return;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n = strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
    n += (size_t)snprintf(line + n, sizeof(line) - n, ".%06ldZ k8slease[%ld] %s ",
                          ts.tv_nsec / 1000, (long)getpid(), lg_names[level]);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    /* The subject, ": ", the message; nothing can break the line. */
    for (int part = 0; part < 2; part++) {
        for (p = part ? msg : subject; *p && n < room; p++) {
            unsigned char c = (unsigned char)*p;

            if (c < 0x20 || c == 0x7f) {
                if (n + 4 > room)
                    break;
                n += (size_t)snprintf(line + n, sizeof(line) - n, "\\x%02x", c);
            } else {
                line[n++] = (char)c;
            }
        }
        if (!part && n + 2 <= room) {
            line[n++] = ':';
            line[n++] = ' ';
        }
    }
    if (*p || n >= room) {
        memcpy(line + n, "...", 3);
        n += 3;
    }
    line[n++] = '\n';
    for (size_t off = 0; off < n;) {
        ssize_t w = write(2, line + off, n - off);

        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break; /* stderr closed or full: nothing else to do */
        off += (size_t)w;
    }
}

static void lg_write(k8slease_log_level level, const char *subject, const char *fmt, ...)
    KL_PRINTF(3, 4);

static void lg_write(k8slease_log_level level, const char *subject, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    lg_vwrite(level, subject, fmt, ap);
    va_end(ap);
}

static int lg_eq(const char *a, const char *b)
{
    for (; *a && *b; a++, b++)
        if ((*a | 0x20) != (*b | 0x20))
            return 0;
    return *a == *b;
}

static void lg_init(void)
{
    pthread_mutexattr_t attr;
    const char *v = getenv("K8SLEASE_LOG_LEVEL");

    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&lg_mu, &attr);
    pthread_mutexattr_destroy(&attr);
    if (!v || !v[0])
        return;
    if (lg_eq(v, "off")) {
        lg_level = LOG_OFF;
        return;
    }
    for (int i = 0; i < 4; i++)
        if (lg_eq(v, lg_names[i])) {
            lg_level = i;
            return;
        }
    lg_level = K8SLEASE_LOG_WARN; /* so that this one line is printed */
    lg_write(K8SLEASE_LOG_WARN, "-",
             "K8SLEASE_LOG_LEVEL=\"%.100s\" is not one of off, error, warn, info, debug: "
             "using info",
             v);
    lg_level = K8SLEASE_LOG_INFO;
}

/* Every seed call starts here: the level is known before anything logs. */
static void setup(void)
{
    pthread_once(&lg_once, lg_init);
}

/* lg_mu held. Never NULL: a subject that cannot be allocated is a static
 * scratch one (its state is lost, its lines are not). */
static log_subject *lg_subject(const char *key)
{
    static log_subject scratch;
    log_subject *s;

    for (s = lg_subjects; s; s = s->next)
        if (strcmp(s->key, key) == 0)
            return s;
    if (!(s = calloc(1, sizeof(*s)))) {
        s = &scratch;
        memset(s, 0, sizeof(*s));
        snprintf(s->key, sizeof(s->key), "%s", key);
        return s;
    }
    snprintf(s->key, sizeof(s->key), "%s", key);
    s->next = lg_subjects;
    lg_subjects = s;
    return s;
}

/* FNV-1a of a, a separator and b, where a run of digits counts as one
 * digit except after "HTTP ": "timed out after 1003 milliseconds" is the
 * same error as after 1000, a 403 is not a 503. */
static uint64_t lg_hash(const char *a, const char *b)
{
    uint64_t h = 1469598103934665603ULL;

    for (const char *p = a; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    h = (h ^ 0xff) * 1099511628211ULL;
    for (const char *p = b; *p; p++) {
        int status = p - b >= 5 && strncmp(p - 5, "HTTP ", 5) == 0;

        if (*p < '0' || *p > '9' || status) {
            for (; status && p[1] >= '0' && p[1] <= '9'; p++)
                h = (h ^ (unsigned char)*p) * 1099511628211ULL;
            h = (h ^ (unsigned char)*p) * 1099511628211ULL;
            continue;
        }
        h = (h ^ '0') * 1099511628211ULL;
        while (p[1] >= '0' && p[1] <= '9')
            p++;
    }
    return h;
}

/* 1 when the error is new since the set was last cleared (and remembers it). */
static int lg_first_time(uint64_t *set, int *n, uint64_t h)
{
    for (int i = 0; i < *n; i++)
        if (set[i] == h)
            return 0;
    if (*n == ERRS_KEPT) {
        memmove(set, set + 1, (ERRS_KEPT - 1) * sizeof(*set));
        (*n)--;
    }
    set[(*n)++] = h;
    return 1;
}

/* A new election (lg_mu held). */
static int lg_election_begins(entry *x, const char *identity, int renew_s)
{
    election_log *s = &x->lg;

    s->identity = strdup(identity ? identity : "");
    s->renew_s = renew_s;
    s->epoch = -1;
    return s->identity ? 0 : -1;
}

static void lg_stopping(entry *x)
{
    pthread_mutex_lock(&lg_mu);
    x->lg.stopping = 1;
    pthread_mutex_unlock(&lg_mu);
}

static void lg_started(entry *x, int64_t epoch)
{
    election_log *s = &x->lg;

    s->leading = s->led = 1;
    s->handing = 0;
    s->epoch = epoch;
    s->holder[0] = '\0';
    s->nerrs = 0;
    s->last_err[0] = '\0';
    lg_write(K8SLEASE_LOG_INFO, x->key, "successfully acquired lease (epoch %lld)",
             (long long)epoch);
}

static void lg_stopped(entry *x)
{
    election_log *s = &x->lg;

    s->leading = 0;
    if (s->stopping)
        lg_write(K8SLEASE_LOG_DEBUG, x->key, "stopped leading (cancelled) (epoch %lld)",
                 (long long)s->epoch);
    else if (s->handing && s->successor[0])
        lg_write(K8SLEASE_LOG_INFO, x->key,
                 "stopped leading (epoch %lld): a handoff was requested: handing the lease "
                 "over to \"%s\"",
                 (long long)s->epoch, s->successor);
    else if (s->handing)
        lg_write(K8SLEASE_LOG_INFO, x->key,
                 "stopped leading (epoch %lld): a handoff was requested, no successor is "
                 "known: releasing the lease",
                 (long long)s->epoch);
    else if (s->holder[0])
        lg_write(K8SLEASE_LOG_ERROR, x->key,
                 "lost leadership (epoch %lld): lease now held by \"%s\" "
                 "(epoch %lld)",
                 (long long)s->epoch, s->holder, (long long)s->holder_epoch);
    else if (s->deleted)
        lg_write(K8SLEASE_LOG_ERROR, x->key, "lost leadership (epoch %lld): the lease was deleted",
                 (long long)s->epoch);
    else if (s->last_err[0])
        lg_write(K8SLEASE_LOG_ERROR, x->key,
                 "lost leadership (epoch %lld): failed to renew lease within %ds: %s",
                 (long long)s->epoch, s->renew_s, s->last_err);
    else
        lg_write(K8SLEASE_LOG_ERROR, x->key,
                 "lost leadership (epoch %lld): failed to renew lease within %ds",
                 (long long)s->epoch, s->renew_s);
}

static void lg_new_leader(entry *x, const char *identity, int64_t epoch)
{
    election_log *s = &x->lg;

    if (!identity[0] && s->released) {
        /* our own release, said by lg_released */
    } else if (!identity[0]) {
        lg_write(K8SLEASE_LOG_INFO, x->key, "lease has no holder (epoch %lld)", (long long)epoch);
    } else if (strcmp(identity, s->identity) != 0) {
        if (s->leading) {
            snprintf(s->holder, sizeof(s->holder), "%s", identity);
            s->holder_epoch = epoch;
        }
        lg_write(K8SLEASE_LOG_INFO, x->key, "lease held by \"%s\" (epoch %lld)", identity,
                 (long long)epoch);
    }
}

/* Our release: the Lease has no holder now, by our write (another
 * election's release of the same Lease is "lease has no holder"). */
static void lg_released(entry *x, int64_t epoch)
{
    lg_write(K8SLEASE_LOG_INFO, x->key, "released lease (epoch %lld)", (long long)epoch);
    x->lg.released = 1;
    x->lg.led = 0; /* nothing left to release */
}

/* The end of an election, its release included. */
static void lg_election_over(entry *x)
{
    election_log *s = &x->lg;

    if (s->led && s->stopping)
        lg_write(K8SLEASE_LOG_WARN, x->key,
                 "lease not released%s%s: other candidates wait for it to expire",
                 s->last_err[0] ? ": " : "", s->last_err);
    else if (!s->led && s->stopping && s->epoch < 0)
        lg_write(K8SLEASE_LOG_INFO, x->key, "stopped campaigning");
    s->led = 0;
}

/* The outcome of a request of the election. */
static void lg_request(entry *x, const char *verb, int status, const char *message)
{
    election_log *s = &x->lg;
    const char *what;

    if (!message) { /* a success: the Lease read or written, or no Lease */
        s->nerrs = 0;
        s->last_err[0] = '\0';
        if (status == K8SLEASE_ENOTFOUND && s->leading)
            s->deleted = 1;
        return;
    }
    if (status == K8SLEASE_ECONFLICT)
        return; /* another candidate wrote first */
    snprintf(s->last_err, sizeof(s->last_err), "%s", message);
    if (!lg_first_time(s->errs, &s->nerrs, lg_hash(verb, message)))
        return;
    what = verb[0] == 'g'          ? "error retrieving lease"
           : verb[0] == 'c'        ? "error creating lease"
           : s->leading            ? "error renewing lease"
           : s->stopping && s->led ? "error releasing lease"
                                   : "error updating lease";
    lg_write(K8SLEASE_LOG_WARN, x->key, "%s: %s", what, message);
}

/* An election's notes (loop thread), in order. */
static void lg_on_note(const kl__elector_note *n, void *arg)
{
    entry *x = arg;

    pthread_mutex_lock(&lg_mu);
    switch (n->type) {
    case KL_NOTE_STARTED:
        lg_started(x, n->epoch);
        break;
    case KL_NOTE_STOPPED:
        lg_stopped(x);
        break;
    case KL_NOTE_LEADER:
        lg_new_leader(x, n->identity, n->epoch);
        break;
    case KL_NOTE_REQUEST:
        lg_request(x, n->verb, n->status, n->message);
        break;
    case KL_NOTE_RELEASED:
        lg_released(x, n->epoch);
        break;
    case KL_NOTE_DONE:
        lg_election_over(x);
        break;
    case KL_NOTE_HANDOFF:
        x->lg.handing = 1;
        snprintf(x->lg.successor, sizeof(x->lg.successor), "%s", n->identity);
        break;
    }
    pthread_mutex_unlock(&lg_mu);
}

/* The health of the watch of a Lease (or of a namespace), as the library
 * tells it. */
static void lg_watch(log_subject *s, const kl__log_event *ev)
{
    switch (ev->kind) {
    case KL_LOG_WATCH_HEALTHY:
        if (s->watch_trouble)
            lg_write(K8SLEASE_LOG_INFO, s->key, "watch is back: no more polling");
        s->watch_trouble = 0;
        s->nwerrs = 0;
        break;
    case KL_LOG_WATCH_UNHEALTHY:
        if (!s->watch_trouble)
            lg_write(K8SLEASE_LOG_WARN, s->key,
                     "watch not healthy (no event or bookmark in time): polling the lease until "
                     "it is back");
        s->watch_trouble = 1;
        break;
    case KL_LOG_WATCH_FAILED:
        if (!lg_first_time(s->werrs, &s->nwerrs, lg_hash("watch", ev->error)))
            break;
        lg_write(K8SLEASE_LOG_WARN, s->key, "watch failed: %s: polling the lease until it is back",
                 ev->error);
        s->watch_trouble = 1;
        break;
    default:
        break;
    }
}

/* The client's log lines, with what each is about (any library thread,
 * mostly the loop). */
static void lg_event(const kl__log_event *ev, void *user_data)
{
    (void)user_data;
    pthread_mutex_lock(&lg_mu);
    switch (ev->kind) {
    case KL_LOG_REQUEST:
        /* An election's requests: what they mean is in its notes. */
        lg_write(K8SLEASE_LOG_DEBUG, ev->subject, "%s", ev->text);
        break;
    case KL_LOG_TERM_LOST:
        /* Its notes say it in the seed's words ("lost leadership"). */
        lg_write(K8SLEASE_LOG_DEBUG, ev->subject, "%s", ev->message);
        break;
    case KL_LOG_ELECTION:
        /* What an election says at info level is said in its notes in the
         * words of the seed's users; its warnings and errors as they are. */
        lg_write(ev->level <= K8SLEASE_LOG_WARN ? ev->level : K8SLEASE_LOG_DEBUG, ev->subject, "%s",
                 ev->message);
        break;
    case KL_LOG_WATCH:
    case KL_LOG_WATCH_HEALTHY:
    case KL_LOG_WATCH_UNHEALTHY:
    case KL_LOG_WATCH_FAILED:
        lg_write(K8SLEASE_LOG_DEBUG, ev->subject, "%s", ev->text);
        lg_watch(lg_subject(ev->subject), ev);
        break;
    case KL_LOG_OTHER:
        lg_write(ev->level, "-", "%s", ev->text);
        break;
    }
    pthread_mutex_unlock(&lg_mu);
}

static int fail(char **errMsg, const char *fmt, ...) KL_PRINTF(2, 3);

static int fail(char **errMsg, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (errMsg)
        *errMsg = strdup(msg); /* the caller free()s it, as with the Go library */
    return -1;
}

static int fail_last(char **errMsg)
{
    return fail(errMsg, "%s", k8slease_error_last());
}

/* A program that cancels, waits for the end of its term and exits at
 * once (what the Go library's users do) must not lose the release that is
 * on its way: at exit, wait for the elections whose term is over to be
 * done, and for the ones given up (their releases are bounded by their
 * renew deadline). Elections still running at exit end with the process,
 * as with the Go library. Not from the loop thread (a callback that
 * exits): nothing would run the releases.
 *
 * Registered once the client exists: exit handlers run in the reverse
 * order of their registration, and OpenSSL registers its own cleanup when
 * it is first initialised (by libcurl, when the first client is made).
 * Registered before that, this one would run after OpenSSL's: the
 * releases would go out over a TLS library already torn down, and every
 * one that needs a new connection would fail. */
static void wait_releases_at_exit(void)
{
    pthread_mutex_lock(&g_mu);
    if (!g_client || kl__loop_on_thread(g_client->loop)) {
        pthread_mutex_unlock(&g_mu);
        return;
    }
    for (entry *e = g_elections; e; e = e->next)
        if (k8slease_elector_wait_lost(e->elector, 0) == 0)
            kl__elector_wait_done(e->elector, -1);
    pthread_mutex_unlock(&g_mu);
    kl__elector_wait_retired(g_client);
}

static void register_at_exit(void)
{
    atexit(wait_releases_at_exit);
}

/* Crash failover through the seed ABI, whose signatures are fixed: from
 * the environment (docs/semantics.md, "Crash failover"). 1, 0, or -1 with
 * *errMsg set for another value. */
static int crash_env(char **errMsg)
{
    const char *v = getenv("K8SLEASE_CRASH_FAILOVER");

    if (!v || !v[0] || strcmp(v, "0") == 0)
        return 0;
    if (strcmp(v, "1") == 0)
        return 1;
    return fail(errMsg, "K8SLEASE_CRASH_FAILOVER=\"%.40s\": must be 1 (on) or 0 (off)", v);
}

static int ensure_client(char **errMsg)
{
    static pthread_once_t at_exit_once = PTHREAD_ONCE_INIT;

    k8slease_client_options opts = K8SLEASE_CLIENT_OPTIONS_INIT;
    int err = 0;

    setup();
    if (lg_level != LOG_OFF)
        opts.log_level = K8SLEASE_LOG_DEBUG; /* lg_event picks what to print */
    if ((opts.crash_failover = crash_env(errMsg)) < 0)
        return -1;
    pthread_mutex_lock(&g_mu);
    if (!g_client)
        err = kl__client_new_logged(&g_client, &opts, lg_level != LOG_OFF ? lg_event : NULL);
    pthread_mutex_unlock(&g_mu);
    if (err < 0)
        return fail(errMsg, "failed to build k8s config: %s", k8slease_error_last());
    pthread_once(&at_exit_once, register_at_exit); /* after OpenSSL's: see there */
    return 0;
}

static int make_key(char *buf, size_t size, const char *ns, const char *name, char **errMsg)
{
    if (!ns || !name)
        return fail(errMsg, "namespace and lease name must not be NULL");
    if ((size_t)snprintf(buf, size, "%s/%s", ns, name) >= size)
        return fail(errMsg, "namespace/name too long");
    return 0;
}

/* g_mu held. */
static entry *find(entry *list, const char *key)
{
    for (entry *e = list; e; e = e->next)
        if (strcmp(e->key, key) == 0)
            return e;
    return NULL;
}

/* g_mu held. */
static void unlink_entry(entry **list, entry *x)
{
    for (entry **p = list; *p; p = &(*p)->next)
        if (*p == x) {
            *p = x->next;
            return;
        }
}

static entry *ref_election(const char *key)
{
    entry *e;

    pthread_mutex_lock(&g_mu);
    if ((e = find(g_elections, key)))
        e->refs++;
    pthread_mutex_unlock(&g_mu);
    return e;
}

static void free_entry(void *arg)
{
    entry *e = arg;

    free(e->lg.identity);
    free(e->key);
    free(e);
}

/* The last reference gives the election up without waiting for the
 * server: its term is over (it was replaced), but a release may still be
 * on its way; the loop frees it, and the entry its notes go to, once it
 * is done. */
static void unref_election(entry *e)
{
    int last;

    pthread_mutex_lock(&g_mu);
    last = --e->refs == 0;
    pthread_mutex_unlock(&g_mu);
    if (!last)
        return;
    kl__elector_retire(e->elector, free_entry, e);
}

K8SLEASE_COMPAT_API int K8sLeaseInit(char **errMsg)
{
    return ensure_client(errMsg);
}

K8SLEASE_COMPAT_API int K8sLeaseRunElection(char *ns, char *leaseName, char *identity,
                                            int leaseDurationSec, int renewDeadlineSec,
                                            int retryPeriodSec, char **errMsg)
{
    k8slease_elector_options opts = K8SLEASE_ELECTOR_OPTIONS_INIT;
    entry *e = NULL, *old = NULL;
    char key[600];
    int rc = 0;

    setup();
    if (make_key(key, sizeof(key), ns, leaseName, errMsg) < 0 || ensure_client(errMsg) < 0)
        return -1;
    if (leaseDurationSec <= 0 || renewDeadlineSec <= 0 || retryPeriodSec <= 0)
        return fail(errMsg,
                    "failed to create leader elector: durations must be positive (leaseDuration "
                    "%ds, renewDeadline %ds, retryPeriod %ds)",
                    leaseDurationSec, renewDeadlineSec, retryPeriodSec);
    if (!(e = calloc(1, sizeof(*e))) || !(e->key = strdup(key))) {
        free(e);
        return fail(errMsg, "out of memory");
    }
    e->refs = 1;
    opts.ns = ns;
    opts.name = leaseName;
    opts.identity = identity;
    opts.lease_duration_ms = (int64_t)leaseDurationSec * 1000;
    opts.renew_deadline_ms = (int64_t)renewDeadlineSec * 1000;
    opts.retry_period_ms = (int64_t)retryPeriodSec * 1000;
    opts.release_on_cancel = 1;
    if ((opts.crash_failover = crash_env(errMsg)) < 0) {
        rc = -1;
        goto out;
    }
    if (opts.crash_failover) {
        opts.pod_name = getenv("POD_NAME");
        opts.pod_namespace = getenv("POD_NAMESPACE");
        opts.container = getenv("K8SLEASE_CONTAINER");
        if (opts.pod_namespace && !opts.pod_namespace[0])
            opts.pod_namespace = NULL;
        if (opts.container && !opts.container[0])
            opts.container = NULL;
    }

    pthread_mutex_lock(&g_mu);
    if ((old = find(g_elections, key))) {
        if (k8slease_elector_wait_lost(old->elector, 0) != 0) {
            pthread_mutex_unlock(&g_mu);
            old = NULL;
            rc = fail(errMsg, "election already running for %s", key);
            goto out;
        }
        /* The previous election's term for this key is over: a new one
         * may start, even while the old one still releases (it releases
         * only its own term, never the new one's). The map's reference to
         * it goes with the unlinking. */
        unlink_entry(&g_elections, old);
    }
    /* lg_mu from before the start until "attempting" is out: what the
     * loop thread logs for this election comes after it. Its notes go to
     * the entry, which outlives the elector (freed after it). */
    pthread_mutex_lock(&lg_mu);
    if (lg_election_begins(e, identity, renewDeadlineSec) < 0) {
        pthread_mutex_unlock(&lg_mu);
        pthread_mutex_unlock(&g_mu);
        rc = fail(errMsg, "out of memory");
        goto out;
    }
    if (kl__elector_start_noted(&e->elector, g_client, &opts, lg_on_note, e) < 0) {
        pthread_mutex_unlock(&lg_mu);
        pthread_mutex_unlock(&g_mu);
        rc = fail(errMsg, "failed to create leader elector: %s", k8slease_error_last());
        goto out;
    }
    lg_write(K8SLEASE_LOG_INFO, key, "attempting to acquire leader lease as \"%s\"...", identity);
    pthread_mutex_unlock(&lg_mu);
    e->next = g_elections;
    g_elections = e;
    e = NULL;
    pthread_mutex_unlock(&g_mu);
out:
    if (old)
        unref_election(old);
    if (e)
        free_entry(e);
    return rc;
}

K8SLEASE_COMPAT_API int K8sLeaseWaitElected(char *ns, char *leaseName, int timeoutSec,
                                            long long int *leaseTransitions, char **errMsg)
{
    char key[600];
    entry *e;
    int64_t epoch = 0;
    int err, rc = 0;

    setup();
    if (make_key(key, sizeof(key), ns, leaseName, errMsg) < 0)
        return -1;
    if (!(e = ref_election(key)))
        return fail(errMsg, "no election running for %s", key);
    err = k8slease_elector_wait_elected(e->elector,
                                        (int64_t)(timeoutSec < 0 ? 0 : timeoutSec) * 1000, &epoch);
    if (err == 0) {
        if (leaseTransitions)
            *leaseTransitions = epoch;
    } else if (err == K8SLEASE_ETIMEOUT) {
        /* As the Go library: give up the candidacy before reporting; a
         * release goes on in the background, the term is over now. */
        lg_stopping(e);
        if (kl__elector_stop_async(e->elector, -1) == 0)
            k8slease_elector_wait_lost(e->elector, -1);
        rc = fail(errMsg, "election timed out after %ds", timeoutSec);
    } else if (err == K8SLEASE_ESTATE && k8slease_elector_wait_lost(e->elector, 0) == 0 &&
               k8slease_elector_epoch(e->elector) >= 0) {
        /* It led, and the term was over before we looked. */
        rc = fail(errMsg, "leadership already lost (epoch %lld)",
                  (long long)k8slease_elector_epoch(e->elector));
    } else if (err == K8SLEASE_ESTATE && k8slease_elector_wait_lost(e->elector, 0) == 0) {
        rc = fail(errMsg, "election lost before becoming leader");
    } else {
        rc = fail_last(errMsg);
    }
    unref_election(e);
    return rc;
}

K8SLEASE_COMPAT_API int K8sLeaseWaitLost(char *ns, char *leaseName, char **errMsg)
{
    char key[600];
    entry *e;
    int rc = 0;

    setup();
    if (make_key(key, sizeof(key), ns, leaseName, errMsg) < 0)
        return -1;
    if (!(e = ref_election(key)))
        return 0; /* no election: it is over */
    if (k8slease_elector_wait_lost(e->elector, -1) < 0)
        rc = fail_last(errMsg);
    unref_election(e);
    return rc;
}

K8SLEASE_COMPAT_API int K8sLeaseCancelElection(char *ns, char *leaseName, char **errMsg)
{
    char key[600];
    entry *e;
    int rc = 0;

    setup();
    if (make_key(key, sizeof(key), ns, leaseName, errMsg) < 0)
        return -1;
    if (!(e = ref_election(key)))
        return 0;
    lg_stopping(e);
    if (kl__elector_stop_async(e->elector, -1) < 0)
        rc = fail_last(errMsg);
    unref_election(e);
    return rc;
}

K8SLEASE_COMPAT_API int K8sLeaseGetHolder(char *ns, char *leaseName, char **holderIdentity,
                                          long long int *leaseTransitions, char **errMsg)
{
    k8slease_holder *h = NULL;
    int err;

    setup();
    if (!holderIdentity || !leaseTransitions)
        return fail(errMsg, "holderIdentity and leaseTransitions must not be NULL");
    *holderIdentity = NULL;
    *leaseTransitions = 0;
    if (!ns || !leaseName)
        return fail(errMsg, "namespace and lease name must not be NULL");
    if (ensure_client(errMsg) < 0)
        return -1;
    err = k8slease_holder_get(g_client, ns, leaseName, GET_HOLDER_TIMEOUT_MS, &h);
    if (err == K8SLEASE_ENOTFOUND)
        return 1;
    if (err < 0)
        return fail(errMsg, "failed to get lease: %s", k8slease_error_last());
    /* An expired lease has no holder: the caller should campaign. */
    if (h->identity[0] && !h->expired && !(*holderIdentity = strdup(h->identity))) {
        k8slease_holder_free(h);
        return fail(errMsg, "out of memory");
    }
    *leaseTransitions = h->epoch;
    k8slease_holder_free(h);
    return 0;
}

static void watch_trampoline(const char *identity, int64_t epoch, void *user_data)
{
    entry *e = user_data;

    /* A deleted Lease (epoch -1) has no holder, and no transitions left. */
    if (!identity[0])
        e->cb(e->cb_ctx, NULL, 0, epoch < 0 ? 0 : epoch);
    else
        e->cb(e->cb_ctx, identity, strlen(identity), epoch);
}

K8SLEASE_COMPAT_API int K8sLeaseWatchHolder(char *ns, char *leaseName, void *callbackCtx,
                                            holder_change_cb_t callbackFunc, char **errMsg)
{
    entry *e;
    char key[600];
    int rc = 0;

    setup();
    if (!callbackFunc)
        return fail(errMsg, "callback function is NULL");
    if (make_key(key, sizeof(key), ns, leaseName, errMsg) < 0 || ensure_client(errMsg) < 0)
        return -1;
    if (!(e = calloc(1, sizeof(*e))) || !(e->key = strdup(key))) {
        free(e);
        return fail(errMsg, "out of memory");
    }
    e->cb = callbackFunc;
    e->cb_ctx = callbackCtx;
    pthread_mutex_lock(&g_mu);
    if (find(g_watches, key)) {
        rc = fail(errMsg, "watch already running for %s", key);
    } else if (k8slease_watch_start(&e->watch, g_client, ns, leaseName, watch_trampoline, e) < 0) {
        rc = fail(errMsg, "failed to watch lease: %s", k8slease_error_last());
    } else {
        e->next = g_watches;
        g_watches = e;
        e = NULL;
    }
    pthread_mutex_unlock(&g_mu);
    if (e) {
        free(e->key);
        free(e);
    }
    return rc;
}

K8SLEASE_COMPAT_API int K8sLeaseCancelWatch(char *ns, char *leaseName, char **errMsg)
{
    char key[600];
    entry *e;

    setup();
    if (make_key(key, sizeof(key), ns, leaseName, errMsg) < 0)
        return -1;
    pthread_mutex_lock(&g_mu);
    if ((e = find(g_watches, key)))
        unlink_entry(&g_watches, e);
    pthread_mutex_unlock(&g_mu);
    if (!e)
        return 0;
    /* No callback runs once this returns (from the callback itself, none
     * runs after the current one), so the entry can go. */
    k8slease_watch_free(e->watch);
    free(e->key);
    free(e);
    return 0;
}

static int pod_label(char *ns, char *podName, char *labelKey, char *labelValue, char **errMsg)
{
    setup();
    if (!ns || !podName || !labelKey)
        return fail(errMsg, "namespace, pod name and label key must not be NULL");
    if (ensure_client(errMsg) < 0)
        return -1;
    if (k8slease_pod_label(g_client, ns, podName, labelKey, labelValue) < 0)
        return fail_last(errMsg);
    return 0;
}

K8SLEASE_COMPAT_API int K8sPatchPodLabel(char *ns, char *podName, char *labelKey, char *labelValue,
                                         char **errMsg)
{
    if (!labelValue)
        return fail(errMsg, "label value must not be NULL");
    return pod_label(ns, podName, labelKey, labelValue, errMsg);
}

K8SLEASE_COMPAT_API int K8sRemovePodLabel(char *ns, char *podName, char *labelKey, char **errMsg)
{
    return pod_label(ns, podName, labelKey, NULL, errMsg);
}
