/*
 * cle.c - the coordinated-leader-election controller (see cle.h).
 *
 * A port of reconcileElectionStep and its helpers (leaderelection_controller.go
 * and election.go in kubernetes v1.36), checked against the real server's
 * behaviour in tests/data/k8s-api-samples/leasecandidate/. The state of an
 * election lives only in the objects (pingTime, renewTime, the Lease), as in
 * the real controller: each step reads them and does one of nothing, ping
 * the candidates that have not answered lately, or write the Lease.
 *
 * Times in objects are wall-clock MicroTimes (microseconds here); the queue's
 * deadlines are monotonic milliseconds.
 */
#include "cle.h"
#include "state.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MANAGER             "kube-apiserver"
#define STRATEGY_OEV        "OldestEmulationVersion"
#define LEASE_DURATION_S    5                     /* defaultLeaseDurationSeconds */
#define CANDIDATE_VALID_US  (30LL * 60 * 1000000) /* leaseCandidateValidDuration */
#define NO_REQUEUE          (-1)
#define MAX_STEPS_PER_ROUND 64 /* then let the timer thread breathe */

/* ---- the work queue ------------------------------------------------------ */

static ts_cle_key *find_key(ts_cle *c, const char *ns, const char *name)
{
    for (size_t i = 0; i < c->n; i++)
        if (!strcmp(c->q[i].ns, ns) && !strcmp(c->q[i].name, name))
            return &c->q[i];
    return NULL;
}

/* Add (delay_ms < 0: now) or AddAfter(delay_ms) of the Lease ns/name. */
static void enqueue(ts_server *srv, const char *ns, const char *name, int64_t delay_ms)
{
    ts_cle *c = &srv->cle;
    ts_cle_key *k = find_key(c, ns, name);
    if (!k) {
        if (c->n == c->cap) {
            size_t cap = c->cap ? c->cap * 2 : 16;
            ts_cle_key *q = realloc(c->q, cap * sizeof(*q));
            if (!q)
                return;
            c->q = q;
            c->cap = cap;
        }
        k = &c->q[c->n];
        k->ns = strdup(ns);
        k->name = strdup(name);
        if (!k->ns || !k->name) {
            free(k->ns);
            free(k->name);
            return;
        }
        k->dirty = false;
        k->delayed = INT64_MAX;
        c->n++;
    }
    if (delay_ms < 0) {
        k->dirty = true;
    } else {
        int64_t at = ts_mono_ms() + delay_ms;
        if (at < k->delayed)
            k->delayed = at;
    }
    ts_sched_kick(&srv->sched);
}

static void drop_key(ts_cle *c, size_t i)
{
    free(c->q[i].ns);
    free(c->q[i].name);
    c->q[i] = c->q[--c->n];
}

/* ---- reading objects ------------------------------------------------------ */

/* A MicroTime field of spec in microseconds; false if absent. */
static bool spec_time(const json_t *spec, const char *key, int64_t *us)
{
    return ts_microtime_us(json_string_value(json_object_get(spec, key)), us) == 0;
}

static const char *spec_str(const json_t *spec, const char *key)
{
    return json_string_value(json_object_get(spec, key));
}

typedef struct cand {
    json_t *json; /* a reference: the store may replace the object during the step */
    const char *name;
    bool has_ping, has_renew;
    int64_t ping, renew;
    time_t created;
} cand;

static const json_t *cand_spec(const cand *c)
{
    return json_object_get(c->json, "spec");
}

/* semver.ParseTolerant, for versions validation already took as strict semver. */
static bool version(const cand *c, const char *key, ts_semver *v)
{
    const char *s = spec_str(cand_spec(c), key);
    if (s && (*s == 'v' || *s == 'V'))
        s++;
    return ts_semver_parse(s, v) == 0;
}

/* election.go compare(): -1 lhs better, 1 rhs better. */
static int compare(const cand *l, const cand *r)
{
    ts_semver a, b;
    version(l, "emulationVersion", &a);
    version(r, "emulationVersion", &b);
    int res = ts_semver_cmp(&a, &b);
    if (res == 0) {
        version(l, "binaryVersion", &a);
        version(r, "binaryVersion", &b);
        res = ts_semver_cmp(&a, &b);
    }
    if (res == 0)
        return l->created > r->created ? 1 : -1;
    return res;
}

static const cand *pick_oldest_emulation_version(cand *cs, size_t n)
{
    const cand *best = NULL;
    for (size_t i = 0; i < n; i++) {
        ts_semver v;
        if (!version(&cs[i], "emulationVersion", &v) || !version(&cs[i], "binaryVersion", &v))
            continue;
        if (!best || compare(best, &cs[i]) > 0)
            best = &cs[i];
    }
    return best;
}

/*
 * pickBestStrategy: the strategy of the candidate with the highest binary
 * version; candidates at that version that disagree are an error (NULL).
 */
static const char *pick_strategy(cand *cs, size_t n)
{
    if (!n)
        return NULL;
    const char *strategy = spec_str(cand_spec(&cs[0]), "strategy");
    ts_semver high, v;
    version(&cs[0], "binaryVersion", &high);
    for (size_t i = 1; i < n; i++) {
        const char *s = spec_str(cand_spec(&cs[i]), "strategy");
        version(&cs[i], "binaryVersion", &v);
        int r = ts_semver_cmp(&high, &v);
        if (r < 0) {
            strategy = s;
            high = v;
        } else if (r == 0 && strcmp(s ? s : "", strategy ? strategy : "")) {
            return NULL;
        }
    }
    return strategy;
}

/* isLeaseExpired */
static bool lease_expired(const json_t *lease, int64_t now)
{
    const json_t *spec = json_object_get(lease, "spec");
    json_t *d = json_object_get(spec, "leaseDurationSeconds");
    int64_t renew;
    return !spec_time(spec, "renewTime", &renew) || !json_is_integer(d) ||
           renew + json_integer_value(d) * 1000000 < now;
}

/* listAdmissableCandidates: the Lease's candidates renewed in the last 30 minutes. */
static size_t list_candidates(ts_server *srv, const char *ns, const char *lease, int64_t now,
                              cand **out)
{
    ts_filter f = {.res = TS_LC, .ns = (char *)ns};
    ts_obj **objs = NULL;
    size_t n = 0, k = 0;
    *out = NULL;
    if (ts_store_list(&srv->store, &f, NULL, &objs, &n) < 0 || !n ||
        !(*out = calloc(n, sizeof(**out)))) {
        free(objs);
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *spec = json_object_get(objs[i]->json, "spec");
        const char *ln = spec_str(spec, "leaseName");
        cand c = {0};
        if (!ln || strcmp(ln, lease))
            continue;
        c.has_renew = spec_time(spec, "renewTime", &c.renew);
        if (!c.has_renew || c.renew + CANDIDATE_VALID_US < now)
            continue;
        c.has_ping = spec_time(spec, "pingTime", &c.ping);
        c.json = json_incref(objs[i]->json);
        c.name = objs[i]->name;
        if (ts_parse_time(ts_meta_str(c.json, "creationTimestamp"), &c.created) < 0)
            c.created = 0;
        (*out)[k++] = c;
    }
    free(objs);
    if (!k) {
        free(*out);
        *out = NULL;
    }
    return k;
}

static void free_candidates(cand *cs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        json_decref(cs[i].json);
    free(cs);
}

/* ---- writing -------------------------------------------------------------- */

/*
 * Stores in (a client's body) as the new state of res ns/name, as an Update
 * by the controller's field manager would: canonical shape, validation,
 * managedFields. cur: the object it replaces, or NULL to create.
 */
static int write_object(ts_server *srv, ts_res res, const char *ns, const char *name,
                        const json_t *in, const ts_obj *cur)
{
    char uid[37], created[32];
    unsigned code;
    json_t *status = NULL;
    time_t now = time(NULL);
    ts_sysmeta sys = {ns, name, uid, created, NULL};
    if (cur) {
        sys.uid = ts_meta_str(cur->json, "uid");
        sys.created = ts_meta_str(cur->json, "creationTimestamp");
    } else {
        ts_uuid4(uid);
        ts_format_time(now, created);
    }
    json_t *obj = ts_object_build(res, in, &sys, cur ? cur->json : NULL, &code, &status);
    if (!obj) {
        /* e.g. a leaseName that is no valid Lease name: the real Create fails too. */
        json_decref(status);
        return -1;
    }
    if (ts_managed_fields_update(res, obj, cur ? cur->json : NULL, MANAGER, NULL, now) < 0) {
        json_decref(obj);
        return -1;
    }
    return ts_store_put(&srv->store, res, obj) ? 0 : -1;
}

/* PUT of a candidate with spec.pingTime = now. */
static int ping(ts_server *srv, const char *ns, const cand *c, int64_t now)
{
    ts_obj *cur = ts_store_get(&srv->store, TS_LC, ns, c->name);
    char t[32];
    if (!cur)
        return -1;
    json_t *in = json_deep_copy(cur->json);
    ts_format_microtime(now, t);
    int rc = in ? json_object_set_new(json_object_get(in, "spec"), "pingTime", json_string(t)) : -1;
    if (rc == 0)
        rc = write_object(srv, TS_LC, ns, c->name, in, cur);
    json_decref(in);
    if (rc == 0)
        srv->cle.pings++;
    return rc;
}

/* ---- one election step ------------------------------------------------------ */

/* electionNeeded */
static bool election_needed(ts_server *srv, cand *cs, size_t n, const ts_obj *lease, int64_t now)
{
    (void)srv;
    if (!lease)
        return true;
    const char *holder = spec_str(json_object_get(lease->json, "spec"), "holderIdentity");
    if (lease_expired(lease->json, now) || !holder || !*holder)
        return true;
    /* Every 15 minutes an election refreshes all candidates. */
    for (size_t i = 0; i < n; i++)
        if (cs[i].has_renew && cs[i].renew + CANDIDATE_VALID_US / 2 < now)
            return true;
    const char *strategy = pick_strategy(cs, n);
    if (!strategy || strcmp(strategy, STRATEGY_OEV))
        return false;
    const cand *best = pick_oldest_emulation_version(cs, n);
    return best && strcmp(best->name, holder);
}

/* reconcileElectionStep: returns the requeue delay in ms, or NO_REQUEUE. */
static int64_t reconcile(ts_server *srv, const char *ns, const char *name)
{
    const int64_t requeue = srv->cfg.cle_election_ms;
    const int64_t ed = (int64_t)srv->cfg.cle_election_ms * 1000; /* electionDuration, us */
    int64_t now = ts_wall_us();
    cand *cs;
    size_t n = list_candidates(srv, ns, name, now, &cs);
    int64_t rc = requeue;
    json_t *in = NULL;

    if (!n)
        return NO_REQUEUE;
    ts_obj *lease = ts_store_get(&srv->store, TS_LEASE, ns, name);
    if (!election_needed(srv, cs, n, lease, now))
        goto out;

    /* Ping whoever has neither answered lately nor a ping pending. */
    bool can_vote = true;
    for (size_t i = 0; i < n; i++) {
        cand *c = &cs[i];
        bool pending = c->has_ping && c->renew < c->ping;
        if (pending && c->ping + ed > now) {
            can_vote = false; /* still waiting for its answer */
            continue;
        }
        if (c->renew + ed > now)
            continue; /* answered lately */
        if (!c->has_ping || (c->ping + ed < now && !pending)) {
            if (ping(srv, ns, c, now) < 0)
                goto out;
            can_vote = false;
        }
    }
    if (!can_vote)
        goto out;
    for (size_t i = 0; i < n; i++)
        if (cs[i].has_ping && cs[i].renew < cs[i].ping && cs[i].ping + ed > now) {
            rc = NO_REQUEUE;
            goto out;
        }

    /* Elect among those that answered within the election duration. */
    size_t nacked = 0;
    for (size_t i = 0; i < n; i++) {
        if (cs[i].renew + ed > now) {
            cand t = cs[nacked];
            cs[nacked++] = cs[i];
            cs[i] = t;
        }
    }
    const char *strategy = pick_strategy(cs, nacked);
    if (!nacked || !strategy) {
        rc = NO_REQUEUE; /* "no available candidates", or strategies that disagree */
        goto out;
    }
    const char *holder = NULL;
    if (!strcmp(strategy, STRATEGY_OEV)) {
        const cand *best = pick_oldest_emulation_version(cs, nacked);
        if (!best) {
            rc = NO_REQUEUE;
            goto out;
        }
        holder = best->name;
    }
    char t[32];
    ts_format_microtime(ts_wall_us(), t);

    if (!lease) {
        in = json_pack("{s:{s:s}, s:{s:i, s:s, s:s}}", "metadata", "name", name, "spec",
                       "leaseDurationSeconds", LEASE_DURATION_S, "renewTime", t, "strategy",
                       strategy);
        if (in && holder)
            json_object_set_new(json_object_get(in, "spec"), "holderIdentity", json_string(holder));
        if (!in || write_object(srv, TS_LEASE, ns, name, in, NULL) < 0)
            rc = NO_REQUEUE;
        else
            srv->cle.elections++;
        goto out;
    }

    /* The Lease exists: strategy, then the holder or the preferred holder. */
    in = json_deep_copy(lease->json);
    json_t *spec = json_object_get(in, "spec");
    if (!spec)
        json_object_set_new(in, "spec", spec = json_object());
    const char *cur_holder = spec_str(spec, "holderIdentity");
    bool expired = lease_expired(lease->json, now);
    bool no_holder = !cur_holder || !*cur_holder;
    bool expired_new = expired && holder && (!cur_holder || strcmp(cur_holder, holder));
    bool different = holder && (!cur_holder || strcmp(cur_holder, holder));
    const char *cs_strategy = spec_str(spec, "strategy");
    if (!cs_strategy || strcmp(cs_strategy, strategy))
        json_object_set_new(spec, "strategy", json_string(strategy));
    if (no_holder || expired_new) {
        json_object_del(spec, "preferredHolder");
        if (holder)
            json_object_set_new(spec, "holderIdentity", json_string(holder));
        else
            json_object_del(spec, "holderIdentity");
        json_object_set_new(spec, "renewTime", json_string(t));
        json_object_set_new(spec, "leaseDurationSeconds", json_integer(LEASE_DURATION_S));
        json_object_del(spec, "acquireTime");
    } else if (different) {
        json_object_set_new(spec, "preferredHolder", json_string(holder));
    }
    if (json_equal(spec, json_object_get(lease->json, "spec")))
        goto out; /* already the best leader: requeue to notice an expiry */
    if (write_object(srv, TS_LEASE, ns, name, in, lease) < 0)
        rc = NO_REQUEUE;
    else
        srv->cle.elections++;
out:
    json_decref(in);
    free_candidates(cs, n);
    return rc;
}

/* ---- driving ---------------------------------------------------------------- */

void ts_cle_on_event(ts_server *srv, const ts_event *ev)
{
    if (!srv->cle.running)
        return;
    const char *ns = ts_obj_ns(ev->res, ev->obj);
    if (ev->res == TS_LEASE) {
        enqueue(srv, ns, ts_meta_str(ev->obj, "name"), -1);
    } else if (ev->res == TS_LC) {
        const json_t *spec = json_object_get(ev->obj, "spec");
        const char *lease = spec_str(spec, "leaseName");
        int64_t ping_us, renew_us;
        /* A candidate that has a ping pending: the election is already under way. */
        if (spec_time(spec, "pingTime", &ping_us) && spec_time(spec, "renewTime", &renew_us) &&
            renew_us < ping_us)
            return;
        if (lease && *lease)
            enqueue(srv, ns, lease, -1);
    }
}

int64_t ts_cle_run(ts_server *srv, int64_t now)
{
    ts_cle *c = &srv->cle;
    if (!c->running)
        return INT64_MAX;
    for (int steps = 0; steps < MAX_STEPS_PER_ROUND; steps++) {
        size_t i;
        for (i = 0; i < c->n; i++) {
            if (c->q[i].delayed <= now) {
                c->q[i].delayed = INT64_MAX;
                c->q[i].dirty = true;
            }
            if (c->q[i].dirty)
                break;
        }
        if (i == c->n)
            break;
        /*
         * The slot stays put while the step runs: its writes only add keys
         * (the array may move, not the strings) and mark this one dirty
         * again if they concern it, which runs it once more, as a workqueue
         * re-adds a key that was added while being processed.
         */
        c->q[i].dirty = false;
        int64_t delay = reconcile(srv, c->q[i].ns, c->q[i].name);
        if (delay != NO_REQUEUE) {
            int64_t at = ts_mono_ms() + delay;
            if (at < c->q[i].delayed)
                c->q[i].delayed = at;
        }
    }
    /* Forget keys with nothing pending; report the next deadline. */
    int64_t next = INT64_MAX;
    for (size_t i = 0; i < c->n;) {
        if (!c->q[i].dirty && c->q[i].delayed == INT64_MAX) {
            drop_key(c, i);
            continue;
        }
        int64_t due = c->q[i].dirty ? now : c->q[i].delayed;
        if (due < next)
            next = due;
        i++;
    }
    return next;
}

void ts_cle_start(ts_server *srv)
{
    ts_filter f = {.res = TS_LC};
    ts_obj **objs = NULL;
    size_t n = 0;
    srv->cle.running = true;
    if (ts_store_list(&srv->store, &f, NULL, &objs, &n) < 0)
        return;
    for (size_t i = 0; i < n; i++) {
        const char *lease = spec_str(json_object_get(objs[i]->json, "spec"), "leaseName");
        if (lease && *lease)
            enqueue(srv, objs[i]->ns, lease, -1);
    }
    free(objs);
}

void ts_cle_stop(ts_server *srv)
{
    ts_cle *c = &srv->cle;
    c->running = false;
    while (c->n)
        drop_key(c, c->n - 1);
}

void ts_cle_free(ts_cle *c)
{
    for (size_t i = 0; i < c->n; i++) {
        free(c->q[i].ns);
        free(c->q[i].name);
    }
    free(c->q);
    memset(c, 0, sizeof(*c));
}
