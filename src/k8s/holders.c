/* Holder reads answered from a watch: the rules are in k8s/holders.h.
 *
 * Each Lease read is an entry in a list (a process reads a few Leases, not
 * thousands), under hs->mu: the readers' threads look entries up and feed
 * them; the loop thread starts and stops their subscriptions and feeds them
 * events. An entry is freed only on the loop thread (its idle timer, or the
 * shutdown), after it was unlinked under the mutex, so a reader never sees
 * a freed entry; one that was read once and not followed is freed by the
 * next lookup that finds it idle. */
#include "k8s/holders.h"

#include <pthread.h>
#include <string.h>

#include "core/clock.h"
#include "core/http.h"
#include "k8s/crash.h"
#include "k8s/informer.h"

#define IDLE_NS (60 * KL_NS_PER_S)

typedef struct entry entry;

struct entry {
    entry *next;
    kl__holders *hs;
    char *ns, *name;
    int64_t last_read;   /* monotonic ns of the last lookup */
    int starting;        /* a reader is starting the subscription */
    kl__sub *sub;        /* loop thread; set under the mutex */
    kl__timer idle;      /* loop thread */
    int healthy;         /* as the stream last said */
    int known;           /* st holds a state seen since the stream was last unhealthy */
    uint64_t gen;        /* counts the times the stream became unhealthy (from 1) */
    kl__rv_gate gate;    /* resourceVersion of state */
    kl__holder_state st; /* valid when known */

    /* Crash failover: the Pod a record of the current term names, followed
     * on the client's Pod informer (loop thread; the flags under mu). */
    kl__sub *pod_sub;
    char *pod_record;     /* the record's text it was started for */
    kl__crash_record rec; /* parsed */
    int pod_healthy;      /* as its stream last said */
    int pod_known;        /* a state of the Pod seen since it was last unhealthy */
    int pod_ended;        /* that state is evidence that rec's instance ended */
};

struct kl__holders {
    pthread_mutex_t mu;
    kl__loop *loop;
    kl__informer *informer, *pod_informer;
    const kl__log *log;
    int crash;
    int closed;
    int64_t idle_ns; /* IDLE_NS; tests shorten it */
    entry *entries;
    uint64_t hits, misses;
};

/* ------------------------------------------------------------------------ */
/* States                                                                   */
/* ------------------------------------------------------------------------ */

void kl__holder_state_clear(kl__holder_state *s)
{
    kl__free(s->identity);
    kl__free(s->rv);
    kl__free(s->strategy);
    kl__free(s->preferred_holder);
    kl__free(s->crash_record);
    memset(s, 0, sizeof(*s));
}

int kl__holder_state_of(kl__holder_state *out, const kl__lease *lease, int crash)
{
    memset(out, 0, sizeof(*out));
    out->identity = kl__strdup(lease->spec.holder ? lease->spec.holder : "");
    out->rv = kl__strdup(lease->rv);
    out->strategy = kl__strdup(lease->strategy);
    out->preferred_holder = kl__strdup(lease->preferred_holder);
    out->epoch = lease->spec.transitions;
    out->renew_us = lease->spec.renew_us;
    out->acquire_us = lease->spec.acquire_us;
    out->duration_s = lease->spec.duration_s;
    if (!out->identity || !out->rv || !out->strategy || !out->preferred_holder)
        goto nomem;
    /* The annotation's text as it came: it is parsed where it is used
     * (term_record, holder_ended), and one that is no record is none. */
    if (crash && lease->holder_container &&
        !(out->crash_record = kl__strdup(lease->holder_container)))
        goto nomem;
    return 0;
nomem:
    kl__holder_state_clear(out);
    return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
}

static int copy(kl__holder_state *out, const kl__holder_state *s)
{
    memset(out, 0, sizeof(*out));
    out->absent = s->absent;
    out->epoch = s->epoch;
    out->renew_us = s->renew_us;
    out->acquire_us = s->acquire_us;
    out->duration_s = s->duration_s;
    if (s->absent)
        return 0;
    out->identity = kl__strdup(s->identity);
    out->rv = kl__strdup(s->rv);
    out->strategy = kl__strdup(s->strategy);
    out->preferred_holder = kl__strdup(s->preferred_holder);
    if (s->crash_record && !(out->crash_record = kl__strdup(s->crash_record)))
        goto nomem;
    if (out->identity && out->rv && out->strategy && out->preferred_holder)
        return 0;
nomem:
    kl__holder_state_clear(out);
    return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
}

/* Under the mutex: take s (moved) as the entry's state unless what it has
 * is newer. rv NULL: a state of unknown order (a 404), taken only when
 * nothing is known. */
static void take(entry *en, kl__holder_state *s, const char *rv)
{
    if (rv ? !kl__rv_gate_pass(&en->gate, rv) : en->known) {
        kl__holder_state_clear(s);
        return;
    }
    kl__holder_state_clear(&en->st);
    en->st = *s;
    memset(s, 0, sizeof(*s));
    en->known = 1;
}

/* ------------------------------------------------------------------------ */
/* Entries                                                                  */
/* ------------------------------------------------------------------------ */

static void entry_free(entry *en)
{
    if (!en)
        return;
    kl__holder_state_clear(&en->st);
    kl__free(en->pod_record);
    kl__crash_record_clear(&en->rec);
    kl__free(en->ns);
    kl__free(en->name);
    kl__free(en);
}

static entry **find(kl__holders *hs, const char *ns, const char *name)
{
    entry **p;

    for (p = &hs->entries; *p; p = &(*p)->next)
        if (strcmp((*p)->ns, ns) == 0 && strcmp((*p)->name, name) == 0)
            break;
    return p;
}

/* Under the mutex: free the entries read once and not since, long ago. */
static void sweep_unfollowed(kl__holders *hs, int64_t now)
{
    entry **p = &hs->entries;

    while (*p) {
        entry *en = *p;

        if (!en->sub && !en->starting && now - en->last_read >= hs->idle_ns) {
            *p = en->next;
            entry_free(en);
        } else {
            p = &en->next;
        }
    }
}

/* Under the mutex: the record of s's current term, if any (text). */
static const char *term_record(const kl__holder_state *s, kl__crash_record *r)
{
    if (s->absent || !s->crash_record || kl__crash_record_parse(r, s->crash_record) < 0)
        return NULL;
    if (strcmp(r->holder, s->identity) == 0 && r->epoch == s->epoch)
        return s->crash_record;
    kl__crash_record_clear(r);
    return NULL;
}

/* Loop thread: the followed Pod's news. */
static void on_pod(const kl__sub_event *ev, void *arg)
{
    entry *en = arg;

    pthread_mutex_lock(&en->hs->mu);
    if (ev->type == KL_SUB_HEALTH) {
        en->pod_healthy = ev->healthy;
        if (!ev->healthy)
            en->pod_known = 0;
    } else {
        en->pod_known = 1;
        en->pod_ended = ev->type == KL_SUB_OBJECT && kl__crash_evidence(&en->rec, ev->pod);
    }
    pthread_mutex_unlock(&en->hs->mu);
}

/* Loop thread: follow the Pod the current term's record names (crash
 * failover), or none. A record a read fed in and no event brought yet is
 * not followed: such reads read the Pod themselves. */
static void pod_sync(entry *en)
{
    kl__holders *hs = en->hs;
    kl__crash_record r = {0};
    kl__sub *old = NULL, *sub = NULL;
    const char *want;
    char *text = NULL;

    if (!hs->crash || !hs->pod_informer)
        return;
    pthread_mutex_lock(&hs->mu);
    want = en->known ? term_record(&en->st, &r) : NULL;
    if (want ? en->pod_record && !strcmp(want, en->pod_record) : !en->pod_sub) {
        pthread_mutex_unlock(&hs->mu);
        kl__crash_record_clear(&r);
        return;
    }
    if (want && !(text = kl__strdup(want)))
        want = NULL; /* out of memory: reads read the Pod */
    old = en->pod_sub;
    en->pod_sub = NULL;
    kl__free(en->pod_record);
    kl__crash_record_clear(&en->rec);
    en->pod_record = text;
    en->rec = r;
    en->pod_healthy = en->pod_known = en->pod_ended = 0;
    pthread_mutex_unlock(&hs->mu);
    kl__sub_stop(old);
    if (!want)
        return;
    sub = kl__sub_start(hs->pod_informer, en->rec.pod_ns, en->rec.pod, 0, on_pod, en);
    pthread_mutex_lock(&hs->mu);
    en->pod_sub = sub;
    if (sub)
        en->pod_healthy = kl__sub_healthy(sub);
    pthread_mutex_unlock(&hs->mu);
}

/* Loop thread: the stream's news. */
static void on_event(const kl__sub_event *ev, void *arg)
{
    entry *en = arg;
    kl__holders *hs = en->hs;
    kl__holder_state s;

    if (ev->type == KL_SUB_HEALTH) {
        pthread_mutex_lock(&hs->mu);
        if (!ev->healthy && en->healthy) {
            /* Whatever comes next starts over: events may have been
             * missed, and the server's resourceVersions may even start
             * again lower (its storage restored). */
            en->known = 0;
            en->gate.known = 0;
            en->gen++;
        }
        en->healthy = ev->healthy;
        pthread_mutex_unlock(&hs->mu);
        return;
    }
    memset(&s, 0, sizeof(s));
    if (ev->type == KL_SUB_OBJECT && kl__holder_state_of(&s, ev->lease, hs->crash) < 0) {
        /* Out of memory: the state is unknown until the next one. */
        pthread_mutex_lock(&hs->mu);
        en->known = 0;
        pthread_mutex_unlock(&hs->mu);
        return;
    }
    s.absent = ev->type == KL_SUB_ABSENT;
    pthread_mutex_lock(&hs->mu);
    take(en, &s, ev->rv ? ev->rv : "");
    pthread_mutex_unlock(&hs->mu);
    pod_sync(en);
}

static void on_idle(kl__timer *t, void *arg)
{
    entry *en = arg;
    kl__holders *hs = en->hs;
    entry **p;
    int64_t last, idle;

    (void)t;
    pthread_mutex_lock(&hs->mu);
    last = en->last_read;
    idle = hs->idle_ns;
    if (kl__loop_now(hs->loop) - last < idle) {
        pthread_mutex_unlock(&hs->mu);
        kl__timer_arm(hs->loop, &en->idle, last + idle);
        return;
    }
    p = find(hs, en->ns, en->name);
    if (*p == en)
        *p = en->next;
    pthread_mutex_unlock(&hs->mu);
    kl__log_printf(hs->log, K8SLEASE_LOG_DEBUG,
                   "holder reads of lease %s/%s: none for %lld ms, no longer followed", en->ns,
                   en->name, (long long)(idle / KL_NS_PER_MS));
    kl__sub_stop(en->sub);
    kl__sub_stop(en->pod_sub);
    entry_free(en);
}

/* Loop thread, from kl__loop_call: subscribe. The reader waits, so no
 * event can be newer than the GET it sends next. */
static void follow(void *arg)
{
    entry *en = arg;
    kl__holders *hs = en->hs;
    kl__sub *sub = NULL;
    int64_t idle;

    if (!hs->closed)
        sub = kl__sub_start(hs->informer, en->ns, en->name, 0, on_event, en);

    pthread_mutex_lock(&hs->mu);
    en->sub = sub;
    if (sub)
        en->healthy = kl__sub_healthy(sub);
    idle = hs->idle_ns;
    pthread_mutex_unlock(&hs->mu);
    if (sub) {
        kl__timer_arm(hs->loop, &en->idle, kl__loop_now(hs->loop) + idle);
        kl__log_printf(hs->log, K8SLEASE_LOG_DEBUG,
                       "holder reads of lease %s/%s: answered from its watch from now on", en->ns,
                       en->name);
    }
}

/* ------------------------------------------------------------------------ */
/* The calls                                                                */
/* ------------------------------------------------------------------------ */

int kl__holders_new(kl__holders **out, kl__loop *loop, kl__informer *informer,
                    kl__informer *pod_informer, int crash, const kl__log *log)
{
    kl__holders *hs = kl__calloc(1, sizeof(*hs));

    *out = NULL;
    if (!hs)
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    pthread_mutex_init(&hs->mu, NULL);
    hs->loop = loop;
    hs->informer = informer;
    hs->pod_informer = pod_informer;
    hs->crash = crash;
    hs->log = log;
    hs->idle_ns = IDLE_NS;
    *out = hs;
    return 0;
}

void kl__holders_shutdown(kl__holders *hs)
{
    entry *list;

    if (!hs)
        return;
    pthread_mutex_lock(&hs->mu);
    hs->closed = 1;
    list = hs->entries;
    hs->entries = NULL;
    pthread_mutex_unlock(&hs->mu);
    while (list) {
        entry *en = list;

        list = en->next;
        kl__timer_cancel(hs->loop, &en->idle);
        kl__sub_stop(en->sub);
        kl__sub_stop(en->pod_sub);
        entry_free(en);
    }
}

void kl__holders_free(kl__holders *hs)
{
    if (!hs)
        return;
    while (hs->entries) {
        entry *en = hs->entries;

        hs->entries = en->next;
        entry_free(en);
    }
    pthread_mutex_destroy(&hs->mu);
    kl__free(hs);
}

int kl__holders_lookup(kl__holders *hs, const char *ns, const char *name, kl__holder_state *out,
                       uint64_t *ticket)
{
    int64_t now = kl__clock_mono_ns();
    entry **p, *en = NULL;
    int hit = 0, start = 0, err = 0;

    memset(out, 0, sizeof(*out));
    *ticket = 0;
    pthread_mutex_lock(&hs->mu);
    if (hs->closed)
        goto miss;
    sweep_unfollowed(hs, now);
    p = find(hs, ns, name);
    if (!(en = *p)) {
        /* First read: remember it, follow only if it comes again. */
        if ((en = kl__calloc(1, sizeof(*en))) && (en->ns = kl__strdup(ns)) &&
            (en->name = kl__strdup(name))) {
            en->hs = hs;
            en->gen = 1;
            en->last_read = now;
            kl__timer_init(&en->idle, on_idle, en);
            *p = en;
        } else {
            entry_free(en); /* out of memory: a GET, and the next read tries again */
        }
        goto miss;
    }
    en->last_read = now;
    if (en->sub && en->healthy && en->known) {
        if ((err = copy(out, &en->st)) == 0) {
            hit = 1;
            hs->hits++;
            /* The Pod's word, when it is about this very record. */
            if (out->crash_record && en->pod_sub && en->pod_healthy && en->pod_known &&
                en->pod_record && !strcmp(out->crash_record, en->pod_record)) {
                out->ended_known = 1;
                out->ended = en->pod_ended;
            }
        }
        pthread_mutex_unlock(&hs->mu);
        return err < 0 ? err : hit;
    }
    if (en->sub)
        *ticket = en->gen;
    else if (!en->starting)
        start = en->starting = 1;
miss:
    hs->misses++;
    pthread_mutex_unlock(&hs->mu);
    if (!start)
        return 0;
    /* Not under the mutex: the loop thread takes it in its callbacks. */
    kl__loop_call(hs->loop, follow, en);
    pthread_mutex_lock(&hs->mu);
    en->starting = 0;
    if (en->sub)
        *ticket = en->gen;
    pthread_mutex_unlock(&hs->mu);
    return 0;
}

void kl__holders_feed(kl__holders *hs, const char *ns, const char *name, uint64_t ticket,
                      const kl__holder_state *s)
{
    kl__holder_state mine;
    entry *en;

    if (!ticket)
        return;
    pthread_mutex_lock(&hs->mu);
    en = *find(hs, ns, name);
    /* Only a read sent while the stream followed the Lease, and not before
     * the stream was last unhealthy: every change after such a read comes
     * as an event; a read from before may be older than what the stream
     * showed and will not show again. */
    if (!en || en->gen != ticket || !en->sub || !en->healthy) {
        pthread_mutex_unlock(&hs->mu);
        return;
    }
    if (!s) {
        memset(&mine, 0, sizeof(mine));
        mine.absent = 1;
        take(en, &mine, NULL);
    } else if (copy(&mine, s) == 0) {
        take(en, &mine, s->rv);
    }
    pthread_mutex_unlock(&hs->mu);
}

void kl__holders_note(kl__holders *hs, const kl__lease *lease)
{
    kl__holder_state s;
    entry *en;

    if (!hs || !lease->ns[0])
        return;
    pthread_mutex_lock(&hs->mu);
    en = *find(hs, lease->ns, lease->name);
    /* Unless followed without a break since a state was known, a write's
     * answer might be older than what the stream showed before the break. */
    if (en && en->sub && en->healthy && en->known && !kl__rv_gate_older(&en->gate, lease->rv) &&
        kl__holder_state_of(&s, lease, hs->crash) == 0)
        take(en, &s, lease->rv);
    pthread_mutex_unlock(&hs->mu);
}

void kl__holders_set_idle(kl__holders *hs, int64_t idle_ns)
{
    pthread_mutex_lock(&hs->mu);
    hs->idle_ns = idle_ns;
    pthread_mutex_unlock(&hs->mu);
}

size_t kl__holders_following(kl__holders *hs)
{
    size_t n = 0;

    pthread_mutex_lock(&hs->mu);
    for (const entry *en = hs->entries; en; en = en->next)
        n += en->sub != NULL;
    pthread_mutex_unlock(&hs->mu);
    return n;
}

void kl__holders_counts(kl__holders *hs, uint64_t *hits, uint64_t *misses)
{
    pthread_mutex_lock(&hs->mu);
    *hits = hs->hits;
    *misses = hs->misses;
    pthread_mutex_unlock(&hs->mu);
}
