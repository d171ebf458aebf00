/* Shared Lease and Pod watches: the rules are in k8s/informer.h; this file
 * adds the reasons behind the less obvious choices.
 *
 * Life of what it keeps (loop thread only):
 *  - kl__sub: one per subscriber, freed once stopped and no callback is
 *    running (inf->busy counts the informer's own frames on the stack, so a
 *    subscriber may stop itself or others from its callback);
 *  - entry: one per followed object ("ns/name", in a hash table), attached
 *    to the stream that serves it, gone with its last subscriber;
 *  - stream: per Lease or per namespace, gone with its last entry;
 *  - nsinfo: per namespace, counts its entries to pick the kind of stream. */
#include "k8s/informer.h"
#include "k8s/api.h"

#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "core/clock.h"

#define LIST_PAGE       500 /* items per list page: bounds a relist's memory */
#define RETRY_NS        (1 * KL_NS_PER_S)
#define WATCH_TIMEOUT_S 300 /* the server ends each stream after this, as for informers */
#define MAX_LINE        (4 * 1024 * 1024)
#define DEFAULT_RP_NS   (2 * KL_NS_PER_S)
#define RESTART_MIN_NS  (75 * KL_NS_PER_S)
/* A stream that ends cleanly sooner than this without a word is treated as
 * failed, so a server that closes at once cannot make us spin. */
#define MIN_CLEAN_NS  (1 * KL_NS_PER_S)
#define TABLE_INITIAL 64
#define KEY_MAX       320 /* namespace (63) + '/' + name (253) + NUL */
/* Retries of a Pod stream answered 403: 1 s, 2 s, 4 s, ... up to this. */
#define FORBIDDEN_MAX_NS (30 * KL_NS_PER_S)

/* The kind of object an informer follows. */
typedef struct kind {
    const char *api;    /* the group version's path */
    const char *plural; /* in paths */
    const char *noun;   /* in messages */
} kind;

static const kind lease_kind = {"/apis/coordination.k8s.io/v1", "leases", "lease"};
static const kind pod_kind = {"/api/v1", "pods", "pod"};

typedef struct entry entry;
typedef struct stream stream;
typedef struct nsinfo nsinfo;

struct kl__sub {
    kl__sub *prev, *next; /* en->subs */
    kl__sub *dead_next;   /* inf->dead */
    kl__informer *inf;
    entry *en;
    kl__sub_cb cb;
    void *arg;
    int dead;
    int heard;        /* told an object or its absence */
    kl__timer replay; /* Pods: tells a late joiner the entry's last state */
};

struct entry {
    entry *hnext;       /* hash chain */
    entry *prev, *next; /* st->entries */
    stream *st;
    nsinfo *nsi;
    kl__sub *subs;
    int healthy;     /* as last told to its subscribers */
    int forbidden;   /* as last told to its subscribers */
    unsigned listed; /* st->list_gen of the last list page that had it */
    /* Pods: the last state the stream showed, for subscribers that join
     * later (known: pod, or absent if NULL, as of rv). */
    int known;
    kl__pod *pod;
    char *rv;
    const char *name; /* inside key */
    char key[];       /* "ns/name" */
};

struct nsinfo {
    nsinfo *next;
    size_t leases; /* entries in this namespace (Leases or Pods) */
    stream *wide;  /* the namespace-wide stream, if any */
    int no_wide;   /* its list was forbidden: one stream per object for good */
    char ns[];
};

struct stream {
    kl__informer *inf;
    stream *prev, *next; /* inf->streams */
    nsinfo *nsi;
    char *name; /* NULL: namespace-wide */
    char what[340];
    entry *entries;
    kl__http_req *req;
    kl__http_req *probe; /* a GET asking whether the stream's connection answers */
    int64_t last_probe;  /* when the last probe was answered */
    uint64_t expect_rv;  /* a probe saw this resourceVersion: the stream must show it */
    int64_t expect_by;   /* by then (a retry period after the probe's answer) */
    int behind;          /* resumed for missing it: not healthy until it speaks */
    kl__timer retry, health;
    kl__line_splitter lines;
    char *rv;      /* resume point; NULL: list first */
    char *cont;    /* continue token of the list in progress */
    char *list_rv; /* resourceVersion of the list in progress */
    unsigned list_gen;
    int connected;      /* list answered / watch established, and no failure since */
    int healthy;        /* last health told to (most of) its entries */
    int mixed;          /* some entry was told otherwise (it moved here) */
    int relist;         /* the watch ended with an ERROR: list again */
    int got_line;       /* the current watch delivered something */
    int failures;       /* consecutive */
    int forbidden;      /* consecutive 403 answers (Pods only) */
    int told_forbidden; /* forbidden as last told to (most of) its entries */
    int64_t started, last_activity, last_bookmark;
    int64_t rp; /* smallest retry period of its subscribers */
};

struct kl__informer {
    const kind *kind;
    int pods; /* kind is pod_kind */
    kl__loop *loop;
    const kl__log *log;
    int warned_forbidden; /* a 403 was logged as a warning: the next ones are debug */
    entry **table;
    size_t table_size, n_entries;
    nsinfo *namespaces;
    stream *streams;
    kl__sub *dead; /* stopped, not yet unlinked */
    int busy;
    int64_t bookmark_gap; /* shortest interval between two bookmarks, 0: none seen */
};

/* ------------------------------------------------------------------------ */
/* Subscribers and entries                                                  */
/* ------------------------------------------------------------------------ */

static void sweep(kl__informer *inf);
static void stream_free(stream *st);
static void list(stream *st);
static void watch(stream *st);
static char *object_path(const stream *st, const char *name);

static void enter(kl__informer *inf)
{
    inf->busy++;
}

/* Frees what was stopped meanwhile; the caller must not touch a stream or
 * an entry after this. */
static void leave(kl__informer *inf)
{
    if (--inf->busy == 0 && inf->dead)
        sweep(inf);
}

static uint64_t hash_key(const char *s)
{
    uint64_t h = 14695981039346656037u;

    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211u;
    }
    return h;
}

static entry *lookup(const kl__informer *inf, const char *ns, const char *name)
{
    char key[KEY_MAX];
    entry *en;

    if ((size_t)snprintf(key, sizeof(key), "%s/%s", ns, name) >= sizeof(key))
        return NULL;
    for (en = inf->table[hash_key(key) % inf->table_size]; en; en = en->hnext)
        if (strcmp(en->key, key) == 0)
            return en;
    return NULL;
}

/* Keeps chains short as entries grow; on ENOMEM the old table goes on
 * working, only slower. */
static void table_grow(kl__informer *inf)
{
    size_t size = inf->table_size * 2;
    entry **t = kl__calloc(size, sizeof(*t));

    if (!t)
        return;
    for (size_t i = 0; i < inf->table_size; i++) {
        entry *en, *next;

        for (en = inf->table[i]; en; en = next) {
            size_t b = hash_key(en->key) % size;

            next = en->hnext;
            en->hnext = t[b];
            t[b] = en;
        }
    }
    kl__free(inf->table);
    inf->table = t;
    inf->table_size = size;
}

static void emit(entry *en, const kl__sub_event *ev)
{
    for (kl__sub *s = en->subs; s; s = s->next) {
        if (s->dead)
            continue;
        if (ev->type != KL_SUB_HEALTH)
            s->heard = 1;
        s->cb(ev, s->arg);
    }
}

/* Pods: keep what a later subscriber is told first (out of memory: it is
 * told nothing until the next change, as before this existed). */
static void remember(entry *en, const kl__pod *pod, const char *rv)
{
    kl__pod_free(en->pod);
    kl__free(en->rv);
    en->pod = NULL;
    en->rv = kl__strdup(rv);
    en->known = en->rv && (!pod || kl__pod_from_json(&en->pod, pod->root) == 0);
}

static void emit_object(entry *en, const kl__object *o)
{
    kl__sub_event ev = {KL_SUB_OBJECT, o->lease, o->pod, o->rv, 0, 0};

    if (o->pod)
        remember(en, o->pod, o->rv);
    emit(en, &ev);
}

static void emit_absent(entry *en, const char *rv)
{
    kl__sub_event ev = {KL_SUB_ABSENT, NULL, NULL, rv ? rv : "", 0, 0};

    if (en->st && en->st->inf->pods)
        remember(en, NULL, ev.rv);
    emit(en, &ev);
}

/* A subscriber that joined a Pod already followed: told the last state
 * the stream showed, unless an event told it something first. */
static void on_replay(kl__timer *t, void *arg)
{
    kl__sub *s = arg;
    entry *en = s->en;
    kl__sub_event ev = {en->pod ? KL_SUB_OBJECT : KL_SUB_ABSENT, NULL, en->pod, en->rv, 0, 0};

    (void)t;
    if (s->dead || s->heard || !en->known)
        return;
    s->heard = 1;
    enter(s->inf);
    s->cb(&ev, s->arg);
    leave(s->inf);
}

static void attach(entry *en, stream *st)
{
    kl__loop *loop = st->inf->loop;

    en->st = st;
    en->listed = 0; /* a generation of its old stream means nothing here */
    en->prev = NULL;
    en->next = st->entries;
    if (st->entries)
        st->entries->prev = en;
    st->entries = en;
    /* Told on the loop soon, not from inside kl__sub_start. */
    if (en->healthy != st->healthy || en->forbidden != st->told_forbidden) {
        st->mixed = 1;
        kl__timer_arm(loop, &st->health, kl__loop_now(loop));
    }
}

static void detach(entry *en)
{
    stream *st = en->st;

    if (en->prev)
        en->prev->next = en->next;
    else
        st->entries = en->next;
    if (en->next)
        en->next->prev = en->prev;
    en->prev = en->next = NULL;
    en->st = NULL;
}

static nsinfo *ns_get(kl__informer *inf, const char *ns)
{
    nsinfo *n;
    size_t len = strlen(ns);

    for (n = inf->namespaces; n; n = n->next)
        if (strcmp(n->ns, ns) == 0)
            return n;
    if (!(n = kl__calloc(1, sizeof(*n) + len + 1)))
        return NULL;
    memcpy(n->ns, ns, len + 1);
    n->next = inf->namespaces;
    inf->namespaces = n;
    return n;
}

static void ns_release(kl__informer *inf, nsinfo *n)
{
    nsinfo **p;

    if (n->leases > 0)
        return;
    for (p = &inf->namespaces; *p != n; p = &(*p)->next)
        ;
    *p = n->next;
    kl__free(n);
}

static void entry_remove(kl__informer *inf, entry *en)
{
    stream *st = en->st;
    entry **p = &inf->table[hash_key(en->key) % inf->table_size];

    while (*p != en)
        p = &(*p)->hnext;
    *p = en->hnext;
    inf->n_entries--;
    if (st) {
        detach(en);
        if (!st->entries)
            stream_free(st);
    }
    en->nsi->leases--;
    ns_release(inf, en->nsi);
    kl__pod_free(en->pod);
    kl__free(en->rv);
    kl__free(en);
}

static void sweep(kl__informer *inf)
{
    kl__sub *s;

    while ((s = inf->dead)) {
        entry *en = s->en;

        inf->dead = s->dead_next;
        if (s->prev)
            s->prev->next = s->next;
        else
            en->subs = s->next;
        if (s->next)
            s->next->prev = s->prev;
        kl__timer_cancel(inf->loop, &s->replay);
        kl__free(s);
        if (!en->subs)
            entry_remove(inf, en);
    }
}

/* ------------------------------------------------------------------------ */
/* Health                                                                   */
/* ------------------------------------------------------------------------ */

static int64_t connect_timeout_ms(const stream *st);

/* Pods: the probes keep a quiet stream healthy (on_probe), so W covers a
 * probe sent at 2 * RP and answered within its timeout. */
static int64_t window(const stream *st)
{
    int64_t w = 3 * st->rp, b = 2 * st->inf->bookmark_gap;

    w = w > b ? w : b;
    return w + connect_timeout_ms(st) * KL_NS_PER_MS;
}

static int64_t restart_after(const stream *st)
{
    int64_t r = 2 * window(st);

    return r > RESTART_MIN_NS ? r : RESTART_MIN_NS;
}

/* A stream silent this long is probed: its connection may be one that
 * answers nothing (a hung server, behind a load balancer that still holds
 * the connection). Electors renew every RP, so a followed Lease with a
 * leader shows an event at least every RP. */
static int64_t probe_after(const stream *st)
{
    return 2 * st->rp;
}

/* A stream opening a connection to a server that answers nothing (a hung
 * replica behind a load balancer) must not hold the others' requests,
 * which wait for that connection: as long as a probe may wait. */
static int64_t connect_timeout_ms(const stream *st)
{
    int64_t ms = st->rp / KL_NS_PER_MS;

    return ms > 1000 ? ms : 1000;
}

/* A line of the stream's, "WHAT: ...", about its Lease ("NS/NAME"), or
 * the Leases of its namespace ("NS/" "*"); a Pod stream's are about no
 * Lease. error: KL_LOG_WATCH_FAILED's, NULL for the message. */
static void st_log(const stream *st, k8slease_log_level level, kl__log_kind line_kind,
                   const char *error, const char *fmt, ...) KL_PRINTF(5, 6);

static void st_log(const stream *st, k8slease_log_level level, kl__log_kind line_kind,
                   const char *error, const char *fmt, ...)
{
    char subject[300];
    kl__log_about about = {st->what, NULL, line_kind, error};
    va_list ap;

    if (!st->inf->pods) {
        snprintf(subject, sizeof(subject), "%s/%s", st->nsi->ns, st->name ? st->name : "*");
        about.subject = subject;
    }
    va_start(ap, fmt);
    kl__log_vat(st->inf->log, level, &about, fmt, ap);
    va_end(ap);
}

/* The stream failed (the message is set, naming it): "WHAT: ERROR; THEN". */
static void st_failed(const stream *st, const char *then)
{
    const char *error = kl__after_prefix(kl__error_get(), st->what);

    st_log(st, K8SLEASE_LOG_WARN, KL_LOG_WATCH_FAILED, error, "%s; %s", error, then);
}

/* forbidden is only ever set on Pod streams (st->forbidden). */
static void set_health(stream *st, int healthy, int forbidden)
{
    kl__sub_event ev = {KL_SUB_HEALTH, NULL, NULL, NULL, healthy, forbidden};

    if (healthy != st->healthy || forbidden != st->told_forbidden)
        st_log(st, K8SLEASE_LOG_DEBUG,
               healthy     ? KL_LOG_WATCH_HEALTHY
               : forbidden ? KL_LOG_WATCH
                           : KL_LOG_WATCH_UNHEALTHY,
               NULL, "%s",
               healthy     ? "healthy"
               : forbidden ? "not healthy (forbidden)"
                           : "not healthy");
    st->healthy = healthy;
    st->told_forbidden = forbidden;
    st->mixed = 0;
    for (entry *en = st->entries; en; en = en->next) {
        if (en->healthy == healthy && en->forbidden == forbidden)
            continue;
        en->healthy = healthy;
        en->forbidden = forbidden;
        emit(en, &ev);
    }
}

/* The first moment the health timer has something to do: tell entries that
 * were told otherwise (now), probe, declare the stream not healthy or
 * restart it, check a probe's finding. 0 when nothing is due (the stream is
 * not connected: fail() and the retry take it from there). */
static int health_due(const stream *st, int64_t *at)
{
    if (st->mixed)
        *at = kl__loop_now(st->inf->loop);
    else if (st->connected)
        *at = st->last_activity + (st->healthy ? window(st) : restart_after(st));
    else
        return 0;
    if (!st->probe) {
        int64_t quiet_since =
            st->last_activity > st->last_probe ? st->last_activity : st->last_probe;

        if (quiet_since + probe_after(st) < *at)
            *at = quiet_since + probe_after(st);
    }
    if (st->expect_rv && st->expect_by < *at)
        *at = st->expect_by;
    return 1;
}

/* Only ever moves the health timer earlier; postpone_health moves it
 * later. */
static void arm_health(stream *st)
{
    int64_t at;

    if (health_due(st, &at) && (!st->health.slot || st->health.at > at))
        kl__timer_arm(st->inf->loop, &st->health, at);
}

/* Something arrived on a healthy stream: every deadline of health_due moved
 * later, and the timer follows, so that a stream that speaks at least every
 * probe_after (a followed Lease with a leader: every retry period) never
 * wakes the loop for its health. A timer armed for now (something to tell)
 * stays. One heap operation per event. */
static void postpone_health(stream *st)
{
    kl__loop *loop = st->inf->loop;
    int64_t at;

    if (st->health.slot && st->health.at <= kl__loop_now(loop))
        return;
    if (health_due(st, &at) && (!st->health.slot || at != st->health.at))
        kl__timer_arm(loop, &st->health, at);
}

static void update_health(stream *st)
{
    int64_t now = kl__loop_now(st->inf->loop);
    int healthy = st->connected && !st->behind && now - st->last_activity < window(st);
    int forbidden = !healthy && st->forbidden > 0;

    if (healthy != st->healthy || forbidden != st->told_forbidden || st->mixed)
        set_health(st, healthy, forbidden);
    arm_health(st);
}

static void activity(stream *st)
{
    st->last_activity = kl__loop_now(st->inf->loop);
    st->behind = 0;
    if (!st->healthy || st->mixed)
        update_health(st);
    else
        postpone_health(st);
}

static void set_rv(char **dst, const char *rv)
{
    char *copy = rv && rv[0] ? kl__strdup(rv) : NULL;

    /* Out of memory: forget the resume point, so the next round re-lists. */
    kl__free(*dst);
    *dst = copy;
}

static void restart(stream *st)
{
    kl__http_cancel(st->inf->loop, st->req);
    st->req = NULL;
    kl__line_splitter_free(&st->lines);
    st->connected = 0;
    update_health(st);
    if (st->rv)
        watch(st);
    else
        list(st);
}

static void on_probe(const kl__http_result *res, void *arg)
{
    stream *st = arg;
    kl__informer *inf = st->inf;
    kl__object o = {0};
    uint64_t seen, streamed;

    enter(inf);
    st->probe = NULL;
    st->last_probe = kl__loop_now(inf->loop);
    if (res->err) {
        /* It timed out: its connection is abandoned, and the stream with
         * it if it was there (it then resumes on a new one). */
        st_log(st, K8SLEASE_LOG_DEBUG, KL_LOG_WATCH, NULL, "probe: %s", res->errmsg);
    } else if (res->status == 200 && st->req && !st->behind &&
               kl__object_parse(inf->pods, res->body, res->body_len, &o) == 0 &&
               kl__rv_parse(o.rv, &seen) && kl__rv_parse(st->rv, &streamed)) {
        if (seen > streamed) {
            /* The object changed: the stream must say so soon (its event
             * may just be on the way), or it is on a connection that
             * answers nothing (on_health). */
            st->expect_rv = seen;
            st->expect_by = st->last_probe + st->rp;
        } else {
            /* Nothing missed: a quiet stream is a healthy one. */
            activity(st);
        }
    }
    kl__object_clear(&o);
    arm_health(st);
    leave(inf);
}

/* A probe saw a change the stream did not show in time: the stream is on
 * a connection that answers nothing (another than the probe's, or over
 * HTTP/1.1 its own). Resume it, on a new connection; it counts as not
 * healthy until it delivers something. Once: if the resumed stream stays
 * silent too, the health rules take it from there. */
static void check_expected(stream *st, int64_t now)
{
    uint64_t streamed = 0;

    if (!st->expect_rv || now < st->expect_by)
        return;
    if (st->req && (!kl__rv_parse(st->rv, &streamed) || streamed < st->expect_rv)) {
        st_log(st, K8SLEASE_LOG_WARN, KL_LOG_WATCH_FAILED, NULL,
               "silent while its %s changed (resourceVersion %llu, it showed %s); resuming it",
               st->inf->kind->noun, (unsigned long long)st->expect_rv, st->rv ? st->rv : "none");
        st->behind = 1;
        st->expect_rv = 0;
        restart(st);
        return;
    }
    st->expect_rv = 0;
}

/* Ask the server for one of the stream's objects: over HTTP/2 on the
 * connection the next requests take (the stream's own while there is one
 * connection). */
static void probe(stream *st)
{
    kl__http_opts req = {0};
    char *path;

    if (!st->entries)
        return;
    path = object_path(st, st->entries->name);
    if (!path)
        return; /* out of memory: the health rules still hold */
    req.method = "GET";
    req.path = path;
    req.timeout_ms = connect_timeout_ms(st);
    st->probe = kl__http_start(st->inf->loop, &req, on_probe, st);
    kl__free(path);
}

static void on_health(kl__timer *t, void *arg)
{
    stream *st = arg;
    kl__informer *inf = st->inf;
    int64_t now = kl__loop_now(inf->loop), quiet = now - st->last_activity;

    (void)t;
    enter(inf);
    check_expected(st, now);
    if (st->connected && !st->probe && quiet >= probe_after(st) &&
        now - st->last_probe >= probe_after(st))
        probe(st);
    if (st->connected && quiet >= restart_after(st)) {
        st_log(st, K8SLEASE_LOG_WARN, KL_LOG_WATCH_FAILED, NULL,
               "silent for %lld ms; restarting it", (long long)(quiet / KL_NS_PER_MS));
        restart(st);
    } else {
        update_health(st);
    }
    leave(inf);
}

/* ------------------------------------------------------------------------ */
/* Streams                                                                  */
/* ------------------------------------------------------------------------ */

static void on_retry(kl__timer *t, void *arg)
{
    stream *st = arg;
    kl__informer *inf = st->inf;

    (void)t;
    enter(inf);
    if (st->req) /* kl__sub_relist: end what is in flight first */
        restart(st);
    else if (st->rv)
        watch(st);
    else
        list(st);
    leave(inf);
}

static void retry_later(stream *st)
{
    kl__loop *loop = st->inf->loop;
    int64_t delay = st->failures > 1 ? RETRY_NS : 0;

    /* Permissions are not granted by asking again: back off. */
    if (st->forbidden > 0)
        delay = st->forbidden > 5 ? FORBIDDEN_MAX_NS : RETRY_NS << (st->forbidden - 1);
    if (delay > FORBIDDEN_MAX_NS)
        delay = FORBIDDEN_MAX_NS;
    kl__timer_arm(loop, &st->retry, kl__loop_now(loop) + delay);
}

/* The list or watch failed: the subscribers hear it now (they poll while it
 * lasts), and the stream tries again, at once the first time (a dropped
 * connection resumes without a gap), then every second. */
static void fail(stream *st)
{
    kl__loop *loop = st->inf->loop;

    st->connected = 0;
    st->failures++;
    /* told from the health timer, so that no callback runs in kl__sub_start */
    kl__timer_arm(loop, &st->health, kl__loop_now(loop));
    retry_later(st);
}

static stream *stream_new(kl__informer *inf, nsinfo *nsi, const char *name)
{
    stream *st = kl__calloc(1, sizeof(*st));

    if (!st)
        return NULL;
    if (name && !(st->name = kl__strdup(name))) {
        kl__free(st);
        return NULL;
    }
    st->inf = inf;
    st->nsi = nsi;
    st->rp = DEFAULT_RP_NS;
    kl__timer_init(&st->retry, on_retry, st);
    kl__timer_init(&st->health, on_health, st);
    if (name)
        snprintf(st->what, sizeof(st->what), "watch of %s %s/%s", inf->kind->noun, nsi->ns, name);
    else
        snprintf(st->what, sizeof(st->what), "watch of the %s in namespace %s", inf->kind->plural,
                 nsi->ns);
    st->next = inf->streams;
    if (inf->streams)
        inf->streams->prev = st;
    inf->streams = st;
    return st;
}

static void stream_free(stream *st)
{
    kl__informer *inf = st->inf;

    kl__http_cancel(inf->loop, st->req);
    kl__http_cancel(inf->loop, st->probe);
    kl__timer_cancel(inf->loop, &st->retry);
    kl__timer_cancel(inf->loop, &st->health);
    kl__line_splitter_free(&st->lines);
    if (st->nsi->wide == st)
        st->nsi->wide = NULL;
    if (st->prev)
        st->prev->next = st->next;
    else
        inf->streams = st->next;
    if (st->next)
        st->next->prev = st->prev;
    kl__free(st->rv);
    kl__free(st->cont);
    kl__free(st->list_rv);
    kl__free(st->name);
    kl__free(st);
}

/* "...?fieldSelector=metadata.name%3DNAME&" or "...?" */
static char *collection_path(const stream *st)
{
    const kind *k = st->inf->kind;
    char *sel = NULL, *esc = NULL, *path;

    if (!st->name)
        return kl__sprintf("%s/namespaces/%s/%s?", k->api, st->nsi->ns, k->plural);
    if ((sel = kl__sprintf("metadata.name=%s", st->name)) && (esc = kl__url_escape(sel)))
        path = kl__sprintf("%s/namespaces/%s/%s?fieldSelector=%s&", k->api, st->nsi->ns, k->plural,
                           esc);
    else
        path = NULL;
    kl__free(esc);
    kl__free(sel);
    return path;
}

static entry *find_entry(const stream *st, const char *name)
{
    entry *en;

    if (!name)
        return NULL;
    if (st->name)
        return strcmp(st->name, name) == 0 ? st->entries : NULL;
    en = lookup(st->inf, st->nsi->ns, name);
    return en && en->st == st ? en : NULL;
}

static void on_list(const kl__http_result *res, void *arg);

/* A Pod stream answered 403 (the client may not get, list or watch pods):
 * counted, for the backoff (retry_later) and the subscribers (forbidden in
 * their health events); logged as a warning once per informer until Pods
 * are answered again (permitted), at debug level after that. Returns 1
 * when it took the answer (a Pod stream's 403): the caller logs nothing. */
static int note_forbidden(stream *st, long status)
{
    kl__informer *inf = st->inf;

    if (!inf->pods || status != 403)
        return 0;
    st->forbidden++;
    kl__log_printf(inf->log, inf->warned_forbidden ? K8SLEASE_LOG_DEBUG : K8SLEASE_LOG_WARN,
                   "%s; the client may not read pods (RBAC: get and watch on pods): retrying, "
                   "up to %d s apart (crash failover waits for lease expiry meanwhile)",
                   kl__error_get(), (int)(FORBIDDEN_MAX_NS / KL_NS_PER_S));
    inf->warned_forbidden = 1;
    return 1;
}

/* A list or watch was answered: a 403 later is news again. */
static void permitted(stream *st)
{
    st->forbidden = 0;
    st->inf->warned_forbidden = 0;
}

/* A Pod's own stream reads its Pod with a GET instead of a list: the
 * same state and resourceVersion for one object, and RBAC's get and watch
 * on pods are enough (what a follower needs for crash failover: no list of
 * the namespace's Pods). */
static int get_mode(const stream *st)
{
    return st->inf->pods && st->name;
}

/* "/api/v1/namespaces/NS/pods/NAME": the object of a stream of one. */
static char *object_path(const stream *st, const char *name)
{
    char *esc = kl__url_escape(name), *path = NULL;

    if (esc)
        path = kl__sprintf("%s/namespaces/%s/%s/%s", st->inf->kind->api, st->nsi->ns,
                           st->inf->kind->plural, esc);
    kl__free(esc);
    return path;
}

static void list(stream *st)
{
    kl__http_opts req = {0};
    char *base = get_mode(st) ? NULL : collection_path(st), *esc = NULL, *path = NULL;

    if (get_mode(st))
        path = object_path(st, st->name);
    else if (base && st->cont && (esc = kl__url_escape(st->cont)))
        path = kl__sprintf("%slimit=%d&continue=%s", base, LIST_PAGE, esc);
    else if (base && !st->cont)
        path = kl__sprintf("%slimit=%d", base, LIST_PAGE);
    if (path) {
        req.method = "GET";
        req.path = path;
        req.timeout_ms = 30000;
        req.connect_timeout_ms = connect_timeout_ms(st);
        st->req = kl__http_start(st->inf->loop, &req, on_list, st);
    }
    kl__free(path);
    kl__free(esc);
    kl__free(base);
    if (!st->req) {
        st_log(st, K8SLEASE_LOG_WARN, KL_LOG_WATCH_FAILED, NULL, "cannot list: out of memory");
        fail(st);
    }
}

/* The namespace-wide list was forbidden (RBAC may allow single objects by
 * resourceNames only): give every object its own stream again, for good. An
 * entry left over for lack of memory stays on this stream, which tries again. */
static void go_narrow(stream *wide)
{
    entry *en, *next;

    wide->nsi->no_wide = 1;
    st_log(wide, K8SLEASE_LOG_WARN, KL_LOG_WATCH_FAILED, NULL,
           "forbidden; watching each %s on its own instead", wide->inf->kind->noun);
    for (en = wide->entries; en; en = next) {
        stream *st = stream_new(wide->inf, wide->nsi, en->name);

        next = en->next;
        if (!st)
            break;
        detach(en);
        attach(en, st);
        list(st);
    }
}

/* One page of a list: its items are the current state of the objects they
 * name; after the last page, a followed object the list did not have is
 * absent. */
static int list_page(stream *st, const char *body, size_t len)
{
    json_error_t jerr;
    json_t *root = json_loadb(body, len, 0, &jerr), *items, *meta, *item;
    const char *rv, *cont;
    size_t i;
    int err = 0;

    if (!root) {
        err = kl__error_set(K8SLEASE_EPROTOCOL, "%s: list answer is not JSON: %s", st->what,
                            jerr.text);
        goto out;
    }
    meta = json_object_get(root, "metadata");
    rv = json_string_value(json_object_get(meta, "resourceVersion"));
    cont = json_string_value(json_object_get(meta, "continue"));
    items = json_object_get(root, "items");
    if (!rv || !rv[0] || !json_is_array(items)) {
        err = kl__error_set(K8SLEASE_EPROTOCOL,
                            "%s: list answer without metadata.resourceVersion or items", st->what);
        goto out;
    }
    if (!st->cont) {
        st->list_gen++;
        set_rv(&st->list_rv, rv);
        if (!st->list_rv) {
            err = kl__error_set(K8SLEASE_ENOMEM, "%s: out of memory", st->what);
            goto out;
        }
    }
    json_array_foreach(items, i, item)
    {
        kl__object o;
        entry *en;

        /* One bad object of the namespace must not blind us to the others. */
        if (kl__object_from_json(st->inf->pods, item, &o) < 0) {
            st_log(st, K8SLEASE_LOG_WARN, KL_LOG_WATCH_FAILED, NULL, "%s", kl__error_get());
            continue;
        }
        if ((en = find_entry(st, o.name))) {
            en->listed = st->list_gen;
            emit_object(en, &o);
        }
        kl__object_clear(&o);
    }
    set_rv(&st->cont, cont);
    if (st->cont)
        goto out;
    for (entry *en = st->entries; en; en = en->next)
        if (en->listed != st->list_gen)
            emit_absent(en, st->list_rv);
    set_rv(&st->rv, st->list_rv);
out:
    json_decref(root);
    return err;
}

/* The answer to get_mode's GET: the Pod as it is, or its absence (404);
 * the watch then starts from the Pod's resourceVersion, or, without one,
 * at the most recent state (a Pod created meanwhile comes as ADDED). */
static int get_answer(stream *st, const kl__http_result *res)
{
    kl__object o;
    int err;

    if (res->status == 404) {
        if (st->entries)
            emit_absent(st->entries, "");
        set_rv(&st->rv, NULL);
        return 0;
    }
    if (res->status != 200)
        return kl__http_status_error(res->status, res->body, res->body_len, st->what);
    if ((err = kl__object_parse(st->inf->pods, res->body, res->body_len, &o)) < 0)
        return kl__error_wrap(err, "%s", st->what);
    if (strcmp(o.name, st->name) != 0) {
        err = kl__error_set(K8SLEASE_EPROTOCOL, "%s: the answer is pod %s", st->what, o.name);
    } else {
        if (st->entries)
            emit_object(st->entries, &o);
        set_rv(&st->rv, o.rv);
    }
    kl__object_clear(&o);
    return err;
}

static void on_list(const kl__http_result *res, void *arg)
{
    stream *st = arg;
    kl__informer *inf = st->inf;
    int err;

    enter(inf);
    st->req = NULL;
    if (res->err)
        err = kl__error_set(res->err, "%s: %s: %s", st->what, get_mode(st) ? "get" : "list",
                            res->errmsg);
    else if (get_mode(st))
        err = get_answer(st, res);
    else if (res->status != 200)
        err = kl__http_status_error(res->status, res->body, res->body_len, st->what);
    else
        err = list_page(st, res->body, res->body_len);
    if (err < 0) {
        set_rv(&st->cont, NULL); /* a continue token may have expired: start over */
        if (res->status == 403 && !st->name) {
            st_failed(st, "retrying");
            go_narrow(st);
        } else if (!note_forbidden(st, res->status)) {
            st_failed(st, "retrying");
        }
        if (st->entries)
            fail(st);
        else
            stream_free(st);
    } else if (st->cont) {
        list(st);
    } else {
        permitted(st);
        st->connected = 1;
        st->failures = 0;
        activity(st);
        update_health(st);
        watch(st);
    }
    leave(inf);
}

static int on_line(const char *line, size_t len, void *arg)
{
    stream *st = arg;
    kl__object_event ev;
    entry *en;

    st->got_line = 1;
    if (kl__object_event_parse(st->inf->pods, line, len, &ev) < 0) {
        st_log(st, K8SLEASE_LOG_WARN, KL_LOG_WATCH_FAILED, NULL, "%s", kl__error_get());
        return K8SLEASE_EPROTOCOL;
    }
    switch (ev.type) {
    case KL_WATCH_ADDED:
    case KL_WATCH_MODIFIED:
        set_rv(&st->rv, ev.obj.rv);
        activity(st);
        if ((en = find_entry(st, ev.obj.name)))
            emit_object(en, &ev.obj);
        break;
    case KL_WATCH_DELETED:
        set_rv(&st->rv, ev.obj.rv);
        activity(st);
        if ((en = find_entry(st, ev.obj.name)))
            emit_absent(en, ev.obj.rv);
        break;
    case KL_WATCH_BOOKMARK: {
        int64_t now = kl__loop_now(st->inf->loop);
        int64_t gap = now - st->last_bookmark;

        if (st->last_bookmark && gap > 0 && (!st->inf->bookmark_gap || gap < st->inf->bookmark_gap))
            st->inf->bookmark_gap = gap;
        st->last_bookmark = now;
        set_rv(&st->rv, ev.bookmark_rv);
        activity(st);
        break;
    }
    case KL_WATCH_ERROR:
        /* 410 Gone (or anything else odd): the resume point is useless. */
        st_log(st, K8SLEASE_LOG_INFO, KL_LOG_WATCH, NULL, "server ended it: %d %s", ev.status.code,
               ev.status.message);
        st->relist = 1;
        kl__object_event_clear(&ev);
        return K8SLEASE_EPROTOCOL;
    }
    kl__object_event_clear(&ev);
    return 0;
}

static int on_data(const char *data, size_t len, void *arg)
{
    stream *st = arg;
    kl__informer *inf = st->inf;
    int rc;

    enter(inf);
    rc = kl__line_splitter_feed(&st->lines, data, len, on_line, st);
    leave(inf);
    return rc;
}

static void on_open(void *arg)
{
    stream *st = arg;
    kl__informer *inf = st->inf;

    enter(inf);
    permitted(st);
    st->connected = 1;
    st->failures = 0;
    if (!st->behind) /* resumed for missing a change: healthy once it speaks */
        activity(st);
    update_health(st);
    leave(inf);
}

static void on_watch_end(const kl__http_result *res, void *arg)
{
    stream *st = arg;
    kl__informer *inf = st->inf;
    int64_t now = kl__loop_now(inf->loop);

    enter(inf);
    st->req = NULL;
    kl__line_splitter_free(&st->lines);
    if (st->relist) {
        st->relist = 0;
        set_rv(&st->rv, NULL);
        /* A Pod's own stream: its GET would give the object's own
         * resourceVersion again, which a restarted apiserver's watch cache
         * may already be past (410 at once, again and again: seen in the
         * chaos suite). A watch without one starts from the current state,
         * which it sends first. */
        if (get_mode(st))
            watch(st);
        else
            list(st);
    } else if (!res->err && res->status == 200 &&
               (st->got_line || now - st->started >= MIN_CLEAN_NS)) {
        /* A clean end (timeoutSeconds): resume at once, still healthy. */
        if (st->rv)
            watch(st);
        else
            list(st);
    } else {
        if (res->err)
            kl__error_set(res->err, "%s", res->errmsg);
        else if (res->status == 200)
            kl__error_set(K8SLEASE_EPROTOCOL, "ended at once");
        else
            kl__http_status_error(res->status, res->body, res->body_len, "watch");
        kl__error_wrap(0, "%s", st->what);
        if (!note_forbidden(st, res->status))
            st_failed(st, "resuming");
        if (res->status == 410)
            set_rv(&st->rv, NULL);
        fail(st);
    }
    leave(inf);
}

static void watch(stream *st)
{
    kl__http_opts req = {0};
    char *base = collection_path(st), *path = NULL;

    /* Without a resourceVersion (a Pod's GET answered 404): from the most
     * recent state. */
    if (base)
        path =
            kl__sprintf("%swatch=1&allowWatchBookmarks=true&timeoutSeconds=%d%s%s", base,
                        WATCH_TIMEOUT_S, st->rv ? "&resourceVersion=" : "", st->rv ? st->rv : "");
    kl__line_splitter_init(&st->lines, MAX_LINE);
    st->started = kl__loop_now(st->inf->loop);
    st->last_bookmark = 0;
    st->got_line = 0;
    if (path) {
        req.method = "GET";
        req.path = path;
        req.on_data = on_data;
        req.on_open = on_open;
        req.connect_timeout_ms = connect_timeout_ms(st);
        st->req = kl__http_start(st->inf->loop, &req, on_watch_end, st);
    }
    kl__free(path);
    kl__free(base);
    if (!st->req) {
        st_log(st, K8SLEASE_LOG_WARN, KL_LOG_WATCH_FAILED, NULL, "cannot watch: out of memory");
        kl__line_splitter_free(&st->lines);
        fail(st);
    }
}

/* Above the threshold, one namespace-wide stream takes over every Lease of
 * the namespace; their own streams stop. Its list reports each of them. */
static stream *go_wide(kl__informer *inf, nsinfo *nsi)
{
    stream *wide = stream_new(inf, nsi, NULL), *st, *next;

    if (!wide)
        return NULL;
    nsi->wide = wide;
    for (st = inf->streams; st; st = next) {
        next = st->next;
        if (st == wide || st->nsi != nsi)
            continue;
        while (st->entries) {
            entry *en = st->entries;

            detach(en);
            attach(en, wide);
        }
        stream_free(st);
    }
    st_log(wide, K8SLEASE_LOG_DEBUG, KL_LOG_WATCH, NULL, "more than %d %s followed",
           KL_INFORMER_NS_THRESHOLD, inf->kind->plural);
    return wide;
}

static entry *entry_add(kl__informer *inf, const char *ns, const char *name)
{
    size_t nslen = strlen(ns), len = nslen + 1 + strlen(name);
    nsinfo *nsi = ns_get(inf, ns);
    stream *st = NULL;
    entry *en;
    size_t b;

    if (!nsi)
        return NULL;
    if (len >= KEY_MAX || !(en = kl__calloc(1, sizeof(*en) + len + 1))) {
        ns_release(inf, nsi);
        return NULL;
    }
    snprintf(en->key, len + 1, "%s/%s", ns, name);
    en->name = en->key + nslen + 1;
    en->nsi = nsi;
    if (nsi->wide)
        st = nsi->wide;
    else if (!nsi->no_wide && nsi->leases + 1 > KL_INFORMER_NS_THRESHOLD &&
             (st = go_wide(inf, nsi)))
        list(st);
    else if ((st = stream_new(inf, nsi, name)))
        list(st);
    if (!st) {
        kl__free(en);
        ns_release(inf, nsi);
        return NULL;
    }
    nsi->leases++;
    b = hash_key(en->key) % inf->table_size;
    en->hnext = inf->table[b];
    inf->table[b] = en;
    if (++inf->n_entries > inf->table_size)
        table_grow(inf);
    attach(en, st);
    return en;
}

/* ------------------------------------------------------------------------ */
/* Interface                                                                */
/* ------------------------------------------------------------------------ */

kl__sub *kl__sub_start(kl__informer *inf, const char *ns, const char *name, int64_t retry_period_ns,
                       kl__sub_cb cb, void *arg)
{
    kl__sub *s;
    entry *en;

    /* Streams may move between streams here: never under a callback. */
    if (inf->busy) {
        kl__error_set(K8SLEASE_ESTATE, "kl__sub_start from a subscriber callback");
        return NULL;
    }
    if (!(s = kl__calloc(1, sizeof(*s)))) {
        kl__error_set(K8SLEASE_ENOMEM, "out of memory");
        return NULL;
    }
    enter(inf);
    if (!(en = lookup(inf, ns, name)) && !(en = entry_add(inf, ns, name))) {
        kl__free(s);
        kl__error_set(K8SLEASE_ENOMEM, "out of memory");
        leave(inf);
        return NULL;
    }
    s->inf = inf;
    s->en = en;
    s->cb = cb;
    s->arg = arg;
    kl__timer_init(&s->replay, on_replay, s);
    if (en->known)
        kl__timer_arm(inf->loop, &s->replay, kl__loop_now(inf->loop));
    s->next = en->subs;
    if (en->subs)
        en->subs->prev = s;
    en->subs = s;
    if (retry_period_ns > 0 && retry_period_ns < en->st->rp) {
        en->st->rp = retry_period_ns;
        arm_health(en->st);
    }
    leave(inf);
    return s;
}

void kl__sub_stop(kl__sub *s)
{
    kl__informer *inf;

    if (!s || s->dead)
        return;
    inf = s->inf;
    s->dead = 1;
    s->cb = NULL;
    s->dead_next = inf->dead;
    inf->dead = s;
    if (!inf->busy)
        sweep(inf);
}

void kl__sub_relist(kl__sub *s)
{
    stream *st;

    if (!s || s->dead)
        return;
    st = s->en->st;
    set_rv(&st->rv, NULL);
    set_rv(&st->cont, NULL);
    /* On the next loop turn: the caller may be inside a request's callback. */
    kl__timer_arm(s->inf->loop, &st->retry, kl__loop_now(s->inf->loop));
}

int kl__sub_healthy(const kl__sub *s)
{
    return s && !s->dead && s->en->healthy;
}

int kl__sub_forbidden(const kl__sub *s)
{
    return s && !s->dead && s->en->forbidden;
}

static int informer_new(kl__informer **out, const kind *k, kl__loop *loop, const kl__log *log)
{
    kl__informer *inf = kl__calloc(1, sizeof(*inf));

    *out = NULL;
    if (!inf || !(inf->table = kl__calloc(TABLE_INITIAL, sizeof(*inf->table)))) {
        kl__free(inf);
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    }
    inf->kind = k;
    inf->pods = k == &pod_kind;
    inf->table_size = TABLE_INITIAL;
    inf->loop = loop;
    inf->log = log;
    *out = inf;
    return 0;
}

int kl__informer_new(kl__informer **out, kl__loop *loop, const kl__log *log)
{
    return informer_new(out, &lease_kind, loop, log);
}

int kl__informer_new_pods(kl__informer **out, kl__loop *loop, const kl__log *log)
{
    return informer_new(out, &pod_kind, loop, log);
}

void kl__informer_shutdown(kl__informer *inf)
{
    if (!inf)
        return;
    /* Subscribers left behind get no more callbacks. */
    enter(inf);
    for (size_t i = 0; i < inf->table_size; i++)
        for (entry *en = inf->table[i]; en; en = en->hnext)
            for (kl__sub *s = en->subs; s; s = s->next)
                kl__sub_stop(s);
    leave(inf);
}

void kl__informer_free(kl__informer *inf)
{
    if (!inf)
        return;
    kl__free(inf->table);
    kl__free(inf);
}
