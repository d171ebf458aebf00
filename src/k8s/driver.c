/* The elector over the Kubernetes Lease API: drives the pure state machine
 * (k8s/election.c) from the client's loop thread, executes its actions as HTTP
 * requests and callbacks, feeds it what the client's shared watch of the
 * Lease sees (k8s/informer.c; not with poll_only), and lets other threads wait
 * on the outcome.
 *
 * Order of what it feeds in: every result (the machine waits for it) and
 * every watch observation whose resourceVersion is newer than the newest
 * state fed in so far, from any source (kl__rv_gate). A stale event, e.g.
 * one delivered after the answer to our own newer write, is dropped; a GET
 * answered with an older state than the watch already showed is answered
 * with that newer state instead. */
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "core/client.h"
#include "k8s/api.h"
#include "k8s/candidate.h"
#include "k8s/client.h"
#include "core/clock.h"
#include "k8s/crash.h"
#include "k8s/election.h"
#include "k8s/handoff.h"
#include "k8s/holders.h"
#include "core/driver.h"
#include "core/elector.h"
#include "k8s/informer.h"
#include "k8s/codec.h"

typedef struct k8s_elector {
    k8slease_elector pub; /* first: the handle the caller holds */
    char *ns, *name, *identity;
    char *path;       /* .../leases/NAME */
    char *collection; /* .../leases */
    int64_t request_timeout_ms;

    /* Loop thread only. */
    kl__k8s_election sm;
    /* The newest Lease object seen, as JSON text: the base of every UPDATE
     * (spliced, k8s/codec.h). Text costs about a tenth of a parsed jansson
     * tree, which matters at thousands of elections. */
    char *base;
    int absent;                /* the newest state seen is "no Lease" */
    kl__rv_gate gate;          /* resourceVersion of the newest state fed in */
    kl__rv_gate gate_at_start; /* gate when the request in flight started */
    kl__sub *sub;              /* the shared watch; NULL with poll_only */
    kl__http_req *req;         /* request in flight, if any */
    kl__k8s_req req_kind;
    int64_t req_started; /* monotonic ns */
    int req_leading;     /* the request in flight was sent while leading */
    int req_renewal;     /* the UPDATE in flight renews our term */
    kl__timer failed;    /* answers a request that could not start */

    /* Coordinated election: our LeaseCandidate. It is deleted as soon as
     * the term (or the campaign) ends, and the Lease is released only once
     * that DELETE is done: the controller, seeing the Lease free, must not
     * find us among the candidates and pick us again (or, from a stale
     * cache, name us preferredHolder over the next leader). DONE is
     * reported once it is gone, so a stopped elector leaves none behind. */
    kl__candidate *cand;
    enum { CAND_RUNNING, CAND_DELETING, CAND_GONE } cand_state;
    int done_waits; /* the machine is DONE; report it when the candidate is gone */
    /* A release request held until then, or until the threads that waited
     * in wait_lost when the term ended have returned (resume_deferred). */
    kl__k8s_election_action deferred;
    int have_deferred;

    kl__crash *crash; /* crash failover, NULL when off */

    /* Planned handoff: our candidate object (NULL without
     * handoff_candidate), deleted before DONE is reported; the leader's
     * list of candidates in flight; the bound of the handoff's term. */
    kl__handoff_announce *announce;
    int announce_gone;
    kl__http_req *handoff_req;
    int64_t handoff_bound_s;
    int handoff_started;  /* a handoff (asked, or requested on the Lease) is under way */
    char *handoff_why;    /* a handoff that ends as a release: why (in its write) */
    char *handoff_target; /* the successor the machine writes (it borrows it) */
    /* On the client's list of handoffs being written (kl__k8s_client's
     * handoffs) with the epoch of the term handed over. */
    int handoff_listed;
    int64_t handoff_epoch;
    struct k8s_elector *handoff_next;
} k8s_elector;

#define LEASE_WHAT "lease "

static void run(k8s_elector *e, const kl__k8s_election_event *ev);

/* ---- handoffs of this client's electors ----------------------------------
 *
 * A program whose term ended by a handoff may start its next elector under
 * the same identity at once (the seed ABI allows it as soon as the term is
 * over, a C++ program may construct the next before destroying the last),
 * while the last one has yet to write the handoff. That elector would see
 * the Lease still naming its identity, in the term being handed over, and
 * take it back at once as its own (a restarted process would): the
 * successor would never lead. So such a record is another holder's for it
 * (the machine's predecessor mark, k8s/election.h) while the handoff is
 * being written: it waits for the write, or for the record to expire if
 * the write never comes. */

static void handoff_list(k8s_elector *e, int on)
{
    kl__k8s_client *k = kl__k8s_of(e->pub.client);
    k8s_elector **p;

    if (on && !e->handoff_listed) {
        e->handoff_epoch = e->sm.epoch;
        e->handoff_next = k->handoffs;
        k->handoffs = e;
        e->handoff_listed = 1;
        return;
    }
    if (on || !e->handoff_listed)
        return;
    for (p = (k8s_elector **)&k->handoffs; *p; p = &(*p)->handoff_next)
        if (*p == e) {
            *p = e->handoff_next;
            break;
        }
    e->handoff_listed = 0;
}

/* lease names our identity in the term another elector of this client is
 * handing over. */
static int handed_over_by_another(const k8s_elector *e, const kl__lease *lease)
{
    const char *h = lease->spec.holder;

    if (!h || strcmp(h, e->identity) != 0)
        return 0;
    for (const k8s_elector *x = kl__k8s_of(e->pub.client)->handoffs; x; x = x->handoff_next)
        if (x != e && lease->spec.transitions == x->handoff_epoch &&
            strcmp(x->identity, e->identity) == 0 && strcmp(x->name, e->name) == 0 &&
            strcmp(x->ns, e->ns) == 0)
            return 1;
    return 0;
}

/* The machine's predecessor mark of an observation of lease. */
static int predecessor(const k8s_elector *e, const kl__lease *lease)
{
    return (e->crash && kl__crash_predecessor(e->crash, lease)) || handed_over_by_another(e, lease);
}
static void check_request(k8s_elector *e, const char *lease_json);

static void on_timer(kl__timer *t, void *arg)
{
    kl__k8s_election_event ev = {.type = KL_KE_EV_TIMER};

    (void)t;
    run(arg, &ev);
}

static void set_base(k8s_elector *e, char *json)
{
    kl__free(e->base);
    e->base = json;
    e->absent = 0;
}

static void set_absent(k8s_elector *e)
{
    kl__free(e->base);
    e->base = NULL;
    e->absent = 1;
}

/* Stats, and the renewal's outcome for the line of a lost term. */
static void count(k8s_elector *e, const kl__http_result *res, int status, const char *message)
{
    kl__request_outcome o = {0};

    o.kind = e->req_kind == KL_KE_REQ_GET      ? KL_REQUEST_GET
             : e->req_kind == KL_KE_REQ_CREATE ? KL_REQUEST_CREATE
                                               : KL_REQUEST_UPDATE;
    o.started_ns = e->req_started;
    o.transport_error = res->err != 0;
    o.http_status = res->err ? 0 : res->status;
    o.expected = res->status == 404 && e->req_kind == KL_KE_REQ_GET;
    o.conflict = !res->err && res->status == 409;
    o.renewing = e->req_leading;
    /* Acquisitions and renewals; not the write that releases the Lease. */
    o.held = status == 0 && e->req_kind != KL_KE_REQ_GET && e->sm.state != KL_KE_RELEASING;
    o.renewal = status == 0 && e->req_renewal;
    o.error = status < 0 && !o.expected ? message : NULL;
    kl__elector_count_request(&e->pub, &o);
}

/* A GET answered with an older state than the watch already showed (the
 * server read it before the change the event reported): answer with the
 * newer state instead, so the machine never steps back. */
static int newer_than_get(k8s_elector *e, const kl__log_about *req, kl__lease *got,
                          kl__lease **newer, kl__k8s_election_event *ev)
{
    if (e->req_kind != KL_KE_REQ_GET || !kl__rv_gate_older(&e->gate, got->rv))
        return 0;
    if (e->absent) {
        ev->status = K8SLEASE_ENOTFOUND;
        ev->spec = NULL;
    } else if (!e->base || kl__lease_parse(newer, e->base, strlen(e->base)) < 0) {
        return 0; /* out of memory: the older state is still a state */
    } else {
        ev->spec = &(*newer)->spec;
        ev->preferred_holder = (*newer)->preferred_holder;
        ev->predecessor = predecessor(e, *newer);
    }
    kl__log_at(&e->pub.client->log, K8SLEASE_LOG_DEBUG, req,
               "rv %s is older than the watch's: using that", got->rv);
    return 1;
}

/* An answer older than what was seen before the request even started is
 * impossible while resourceVersions grow: a read or a write that succeeds
 * reflects at least every change seen before it was sent. The server's
 * storage was restored or replaced (etcd from a backup, or wiped), and its
 * resourceVersions started again lower. Take the answer as the newest
 * state from now on, and have the watch list again: resumed from the old
 * resourceVersion it would stay silent until the new ones caught up. */
static void check_rv_went_back(k8s_elector *e, const kl__lease *got)
{
    if (!kl__rv_gate_older(&e->gate_at_start, got->rv))
        return;
    kl__log_at(&e->pub.client->log, K8SLEASE_LOG_WARN, &e->pub.about,
               "resourceVersion went back from %llu to %s (the server's storage was restored or "
               "replaced): starting over from the server's answer",
               (unsigned long long)e->gate_at_start.last, got->rv);
    kl__rv_gate_set(&e->gate, got->rv);
    kl__sub_relist(e->sub);
}

static void on_result(const kl__http_result *res, void *arg)
{
    k8s_elector *e = arg;
    kl__k8s_election_event ev = {.type = KL_KE_EV_RESULT};
    kl__lease *lease = NULL, *newer = NULL;
    char what[400];
    const char *verb = e->req_kind == KL_KE_REQ_GET      ? "get"
                       : e->req_kind == KL_KE_REQ_CREATE ? "create"
                                                         : "update";
    kl__log_about req = {what, e->pub.about.subject, KL_LOG_REQUEST, NULL};

    e->req = NULL;
    snprintf(what, sizeof(what), "%s %s", verb, e->pub.what);
    ev.status = kl__lease_result(res, what, &lease);
    count(e, res, ev.status, kl__after_prefix(kl__error_get(), what));
    /* Our own write: holder reads of this client see it from now on. */
    if (ev.status == 0 && e->req_kind != KL_KE_REQ_GET)
        kl__holders_note(kl__k8s_of(e->pub.client)->holders, lease);
    if (ev.status == 0)
        check_rv_went_back(e, lease);
    if (ev.status == 0 && newer_than_get(e, &req, lease, &newer, &ev)) {
        /* ev now carries the newer state */
    } else if (ev.status == 0) {
        /* A write answered after an event of a later change (someone else's
         * write) is fed in, the machine waits for it, but the base stays the
         * newer object. */
        if (!kl__rv_gate_older(&e->gate, lease->rv)) {
            /* The answer's text, moved, not copied: the lease's fields stay. */
            char *json = kl__lease_text_take(lease);

            /* Out of memory: no base, so the next UPDATE fails and the
             * machine reads the Lease again. */
            if (json)
                set_base(e, json);
            else
                set_absent(e);
            kl__rv_gate_set(&e->gate, lease->rv);
        }
        ev.spec = &lease->spec;
        ev.preferred_holder = lease->preferred_holder;
        ev.predecessor = predecessor(e, lease);
        kl__log_at(&e->pub.client->log, K8SLEASE_LOG_DEBUG, &req, "ok, holder \"%s\" rv %s",
                   lease->spec.holder ? lease->spec.holder : "", lease->rv);
    } else if (ev.status == K8SLEASE_ENOTFOUND && e->req_kind == KL_KE_REQ_GET) {
        set_absent(e);
        kl__log_at(&e->pub.client->log, K8SLEASE_LOG_DEBUG, &req, "not found");
    } else {
        kl__log_at(&e->pub.client->log,
                   ev.status == K8SLEASE_ECONFLICT ? K8SLEASE_LOG_INFO : K8SLEASE_LOG_WARN, &req,
                   "%s", kl__after_prefix(kl__error_get(), what));
    }
    kl__elector_report_request(&e->pub, verb, ev.status, kl__after_prefix(kl__error_get(), what));
    if (ev.status == 0 && e->req_kind == KL_KE_REQ_UPDATE && e->sm.state == KL_KE_RELEASING &&
        (!lease->spec.holder || !lease->spec.holder[0]))
        kl__elector_report_released(&e->pub, lease->spec.transitions);
    run(e, &ev);
    /* After the machine has the state: a report it leads to feeds it too. */
    if (e->crash && ev.status == 0 && (newer || lease))
        kl__crash_observe(e->crash, newer ? newer : lease);
    if (ev.status == 0)
        check_request(e, e->base);
    kl__lease_free(newer);
    kl__lease_free(lease);
}

static void on_watch(const kl__sub_event *sev, void *arg)
{
    k8s_elector *e = arg;
    kl__k8s_election_event ev = {.type = KL_KE_EV_OBSERVE};

    if (sev->type == KL_SUB_HEALTH) {
        kl__elector_watch_healthy(&e->pub, sev->healthy);
        ev.type = KL_KE_EV_WATCH;
        ev.healthy = sev->healthy;
        run(e, &ev);
        return;
    }
    if (!kl__rv_gate_pass(&e->gate, sev->rv))
        return;
    if (sev->type == KL_SUB_LEASE) {
        char *json = kl__lease_text_dup(sev->lease);

        /* Without the text the state cannot be an UPDATE's base: forget
         * it; the next UPDATE fails and the machine reads the Lease again. */
        if (json)
            set_base(e, json);
        else
            set_absent(e);
        ev.spec = &sev->lease->spec;
        ev.preferred_holder = sev->lease->preferred_holder;
        ev.predecessor = predecessor(e, sev->lease);
        kl__log_at(&e->pub.client->log, K8SLEASE_LOG_DEBUG, &e->pub.about,
                   "watch: holder \"%s\" rv %s",
                   sev->lease->spec.holder ? sev->lease->spec.holder : "", sev->rv);
    } else {
        set_absent(e);
        ev.status = K8SLEASE_ENOTFOUND;
        kl__log_at(&e->pub.client->log, K8SLEASE_LOG_DEBUG, &e->pub.about,
                   "watch: no lease (rv %s)", sev->rv);
    }
    kl__elector_watch_events(&e->pub, 1);
    run(e, &ev);
    if (e->crash && sev->type == KL_SUB_LEASE)
        kl__crash_observe(e->crash, sev->lease);
    if (sev->type == KL_SUB_LEASE)
        check_request(e, e->base);
}

/* Crash failover: the kubelet reported the holder's container of that term
 * terminated. */
static void on_holder_ended(const char *holder, int64_t epoch, void *arg)
{
    kl__lease_spec spec = {holder, 0, 0, 0, epoch};
    kl__k8s_election_event ev = {.type = KL_KE_EV_HOLDER_ENDED, .spec = &spec};

    run(arg, &ev);
}

/* Crash failover: our container instance is known; the record goes with
 * a renewal now rather than the next one. */
static void on_self_known(void *arg)
{
    kl__k8s_election_event ev = {.type = KL_KE_EV_RENEW};

    run(arg, &ev);
}

/* A request that could not even start is answered like a failed one, on a
 * later loop turn so the state machine is never re-entered. */
static void on_failed(kl__timer *t, void *arg)
{
    kl__k8s_election_event ev = {.type = KL_KE_EV_RESULT, .status = K8SLEASE_ENOMEM};

    (void)t;
    run(arg, &ev);
}

/* Body of an UPDATE over the newest object seen; NULL on ENOMEM, or when
 * there is none (the machine asks for an UPDATE only after a result or an
 * observation gave it one; without it there is nothing safe to PUT). */
static char *update_body(const k8s_elector *e, const kl__lease_spec *spec)
{
    kl__lease *base = NULL;
    const char *want;
    char *body = NULL;
    int annotate, handoff, drop_request;

    if (!e->base) {
        kl__error_set(K8SLEASE_ESTATE, "no Lease read yet to base an update on");
        return NULL;
    }
    /* Crash failover: our record on the writes of our term, none on any
     * other (a release, a record of the holder before us). */
    want = e->crash ? kl__crash_value(e->crash, spec->holder, spec->transitions) : NULL;
    annotate = e->crash && !kl__crash_text_has(e->base, want);
    /* A handoff names its successor (k8s/handoff.h); a handoff request is
     * answered by this write whatever it is (the leader acted on it when it
     * saw it): left on the Lease it would make the next leader hand over
     * too. */
    handoff = (spec->holder && spec->holder[0] && strcmp(spec->holder, e->identity) != 0) ||
              (e->handoff_why && spec->holder && !spec->holder[0]);
    drop_request = strstr(e->base, "\"" KL_HANDOFF_REQUEST "\"") != NULL;
    /* Almost always: the text around a new spec, without a parse. */
    switch (annotate || handoff || drop_request
                ? 1
                : kl__lease_splice_update(e->base, strlen(e->base), spec, &body)) {
    case 0:
        return body;
    case 1:
        break;
    default:
        return NULL;
    }
    if (kl__lease_parse(&base, e->base, strlen(e->base)) < 0)
        return NULL;
    if ((annotate || handoff || drop_request) && !kl__lease_root(base))
        goto fail;
    if (annotate && kl__crash_annotate(base->root, want) < 0)
        goto fail;
    if (handoff && kl__handoff_annotate(base->root, e->identity, spec->holder, spec->transitions,
                                        spec->holder[0] ? NULL : e->handoff_why) < 0)
        goto fail;
    if (drop_request && !handoff)
        json_object_del(json_object_get(json_object_get(base->root, "metadata"), "annotations"),
                        KL_HANDOFF_REQUEST);
    body = kl__lease_encode_update_in_place(base, spec);
    kl__lease_free(base);
    return body;
fail:
    kl__lease_free(base);
    return NULL;
}

/* Body of a CREATE: with our crash failover record when we have one. */
static char *create_body(const k8s_elector *e, const kl__lease_spec *spec)
{
    const char *want = e->crash ? kl__crash_value(e->crash, spec->holder, spec->transitions) : NULL;
    char *body = kl__lease_encode_create(e->ns, e->name, spec);
    json_t *root;

    if (!body || !want)
        return body;
    root = json_loads(body, 0, NULL);
    kl__free(body);
    body = root && kl__crash_annotate(root, want) == 0 ? kl__json_dump(root) : NULL;
    json_decref(root);
    return body;
}

static void start_request(k8s_elector *e, const kl__k8s_election_action *a)
{
    kl__http_opts req = {0};
    char *body = NULL;

    req.timeout_ms = e->request_timeout_ms;
    /* A leader's term hangs on its renewals: one that gets no answer is
     * sent again on new connections too (a write guarded by its
     * resourceVersion, so a second copy only gets a conflict nobody sees).
     * Acquisitions are not: a create's copy that answered first with 409
     * would hide the create that won. */
    if (e->sm.state == KL_KE_LEADING && a->type != KL_KE_ACT_CREATE)
        req.hedge_ms = kl__hedge_ms(e->request_timeout_ms);
    e->req_started = kl__clock_mono_ns();
    e->req_leading = e->sm.state == KL_KE_LEADING;
    e->req_renewal = a->type == KL_KE_ACT_UPDATE && e->req_leading;
    if (e->req_leading)
        kl__elector_renewal_sent(&e->pub, e->req_started);
    if (a->type == KL_KE_ACT_GET && e->sm.state == KL_KE_LEADING) {
        pthread_mutex_lock(&e->pub.mu);
        e->pub.stats.slow_path++;
        pthread_mutex_unlock(&e->pub.mu);
    }
    switch (a->type) {
    case KL_KE_ACT_GET:
        req.method = "GET";
        req.path = e->path;
        e->req_kind = KL_KE_REQ_GET;
        break;
    case KL_KE_ACT_CREATE:
        req.method = "POST";
        req.path = e->collection;
        body = create_body(e, &a->spec);
        e->req_kind = KL_KE_REQ_CREATE;
        break;
    default:
        req.method = "PUT";
        req.path = e->path;
        body = update_body(e, &a->spec);
        e->req_kind = KL_KE_REQ_UPDATE;
        break;
    }
    if (a->type != KL_KE_ACT_GET) {
        if (!body)
            goto fail;
        req.content_type = "application/json";
        req.body = body;
        req.body_len = strlen(body);
    }
    e->gate_at_start = e->gate;
    e->req = kl__http_start(e->pub.client->loop, &req, on_result, e);
    kl__free(body);
    if (e->req)
        return;
fail:
    kl__log_at(&e->pub.client->log, K8SLEASE_LOG_ERROR, &e->pub.about, "cannot start request: %s",
               kl__error_get());
    /* A timer of our own (no allocation) answers on the next loop turn. */
    kl__timer_arm(e->pub.client->loop, &e->failed, kl__loop_now(e->pub.client->loop));
}

/* Cancel the Lease side: timers, the request in flight, the watch. */
static void detach_lease(k8s_elector *e)
{
    kl__timer_cancel(e->pub.client->loop, &e->pub.timer);
    kl__timer_cancel(e->pub.client->loop, &e->failed);
    kl__http_cancel(e->pub.client->loop, e->req);
    e->req = NULL;
    kl__sub_stop(e->sub);
    e->sub = NULL;
    kl__http_cancel(e->pub.client->loop, e->handoff_req);
    e->handoff_req = NULL;
    handoff_list(e, 0);
    kl__crash_stop(e->crash);
}

static void detach(k8slease_elector *pub)
{
    k8s_elector *e = (k8s_elector *)pub;

    detach_lease(e);
    kl__candidate_detach(e->cand);
    kl__handoff_announce_detach(e->announce);
}

static void on_lost_seen(k8slease_elector *pub);

/* Whether the release must wait: for our LeaseCandidate's DELETE, or for a
 * thread that waited in wait_lost when the term ended to return. */
static int release_held(k8s_elector *e)
{
    return e->cand_state == CAND_DELETING || kl__elector_hold_release(&e->pub, on_lost_seen);
}

/* Start the release request held back, once nothing holds it any more. */
static void resume_deferred(k8s_elector *e)
{
    if (!e->have_deferred)
        return;
    if (e->sm.state == KL_KE_DONE) {
        e->have_deferred = 0;
        return;
    }
    if (release_held(e))
        return;
    e->have_deferred = 0;
    start_request(e, &e->deferred);
}

static void on_lost_seen(k8slease_elector *pub)
{
    resume_deferred((k8s_elector *)pub);
}

/* What DONE waits for besides the Lease: the coordinated LeaseCandidate's
 * DELETE, the handoff candidate object's. */
static int others_pending(const k8s_elector *e)
{
    return (e->cand && e->cand_state != CAND_GONE) || (e->announce && !e->announce_gone);
}

static void report_done_if_over(k8s_elector *e)
{
    if (e->done_waits && !others_pending(e)) {
        detach(&e->pub);
        kl__elector_report_done(&e->pub);
    }
}

static void on_candidate_gone(void *arg)
{
    k8s_elector *e = arg;

    e->cand_state = CAND_GONE;
    resume_deferred(e);
    report_done_if_over(e);
}

static void on_announce_gone(void *arg)
{
    k8s_elector *e = arg;

    e->announce_gone = 1;
    report_done_if_over(e);
}

static void on_announce_known(int known, void *arg)
{
    k8s_elector *e = arg;

    kl__elector_candidate_known(&e->pub, known);
}

static void stop_candidate(k8s_elector *e)
{
    if (!e->cand || e->cand_state != CAND_RUNNING)
        return;
    e->cand_state = CAND_DELETING;
    kl__candidate_stop(e->cand, on_candidate_gone, e);
}

static void finish(k8s_elector *e)
{
    if (others_pending(e)) {
        /* the Lease side is over; the candidates' DELETEs are not */
        detach_lease(e);
        e->done_waits = 1;
        stop_candidate(e);
        kl__handoff_announce_stop(e->announce, on_announce_gone, e);
        return;
    }
    detach(&e->pub);
    kl__elector_report_done(&e->pub);
}

/* The candidate cannot be published: end the election (released as the
 * options say, though without a candidate it can hardly lead). */
static void on_candidate_fatal(const char *message, void *arg)
{
    k8s_elector *e = arg;
    kl__k8s_election_event ev = {.type = KL_KE_EV_STOP, .release = e->pub.opts.release_on_cancel};

    kl__log_at(&e->pub.client->log, K8SLEASE_LOG_ERROR, &e->pub.about, "%s", message);
    kl__elector_report_error(&e->pub, message);
    stop_candidate(e);
    run(e, &ev);
}

static void exec_action(k8s_elector *e, const kl__k8s_election_action *a)
{
    switch (a->type) {
    case KL_KE_ACT_GET:
    case KL_KE_ACT_CREATE:
    case KL_KE_ACT_UPDATE:
        if (e->sm.state == KL_KE_RELEASING && release_held(e)) {
            e->deferred = *a; /* the machine waits for its answer: one at most */
            e->have_deferred = 1;
        } else {
            start_request(e, a);
        }
        break;
    case KL_KE_ACT_STARTED:
        kl__elector_report_started(&e->pub, a->epoch, kl__k8s_election_leader_deadline(&e->sm));
        break;
    case KL_KE_ACT_STOPPED:
        kl__elector_report_term_end(&e->pub, a->end, a->identity, a->epoch);
        stop_candidate(e);
        break;
    case KL_KE_ACT_NEW_LEADER:
        kl__elector_report_new_leader(&e->pub, a->identity, a->epoch);
        break;
    case KL_KE_ACT_DONE:
        finish(e);
        break;
    }
}

/* Feed one event to the state machine and carry out what it says. */
static void run(k8s_elector *e, const kl__k8s_election_event *ev)
{
    kl__k8s_election_actions acts;

    if (e->sm.state == KL_KE_DONE)
        return;
    kl__k8s_election_step(&e->sm, ev, kl__clock_mono_ns(), kl__clock_wall_us(), &acts);
    for (int i = 0; i < acts.n; i++)
        exec_action(e, &acts.a[i]);
    if (e->sm.state != KL_KE_DONE)
        kl__elector_settle(&e->pub, kl__k8s_election_leader_deadline(&e->sm),
                           kl__k8s_election_timer(&e->sm));
}

static void start(k8slease_elector *pub)
{
    k8s_elector *e = (k8s_elector *)pub;
    kl__k8s_election_event ev = {.type = KL_KE_EV_START};

    kl__loop_set_dead_timeout(e->pub.client->loop, e->sm.cfg.renew_deadline_ns / 2 / KL_NS_PER_MS);
    if (!e->pub.opts.poll_only && e->sm.state == KL_KE_IDLE &&
        !(e->sub = kl__sub_start(kl__k8s_of(e->pub.client)->informer, e->ns, e->name,
                                 e->sm.cfg.retry_period_ns, on_watch, e)))
        kl__log_at(&e->pub.client->log, K8SLEASE_LOG_WARN, &e->pub.about,
                   "%s; polling without a watch", kl__error_get());
    if (e->cand)
        kl__candidate_start(e->cand);
    if (e->crash)
        kl__crash_start(e->crash);
    kl__handoff_announce_start(e->announce);
    run(e, &ev);
    if (kl__sub_healthy(e->sub)) {
        kl__sub_event healthy = {.type = KL_SUB_HEALTH, .healthy = 1};

        on_watch(&healthy, e);
    }
}

static void stop(k8slease_elector *pub, int release)
{
    kl__k8s_election_event ev = {.type = KL_KE_EV_STOP, .release = release};
    k8s_elector *e = (k8s_elector *)pub;

    /* The candidate goes first, so that the controller, seeing the Lease
     * released, does not pick us again. */
    stop_candidate(e);
    run(e, &ev);
}

/* Stop, the release naming `to` (NULL: a plain release) holder of a term
 * of the handoff's bound. */
static void handoff_to(k8s_elector *e, const char *to)
{
    kl__k8s_election_event ev = {.type = KL_KE_EV_STOP, .release = 1};

    /* The machine borrows it until DONE; a candidate's list is freed after
     * this returns. Without memory: a plain release. */
    if (to && !(e->handoff_target = kl__strdup(to)))
        kl__log_at(&e->pub.client->log, K8SLEASE_LOG_WARN, &e->pub.about,
                   "out of memory: releasing the lease instead of handing it over");
    to = e->handoff_target;
    ev.handoff_to = to;
    ev.handoff_bound_s = e->handoff_bound_s;
    if (e->sm.state == KL_KE_LEADING) {
        kl__log_at(&e->pub.client->log, K8SLEASE_LOG_INFO, &e->pub.about,
                   to ? "handing the lease over to \"%s\"" : "%s",
                   to ? to : "releasing the lease (no successor)");
        kl__elector_report_handoff(&e->pub, to ? to : "");
    }
    if (e->sm.state == KL_KE_LEADING && to && strcmp(to, e->identity) != 0)
        handoff_list(e, 1); /* off again when the election is over (detach_lease) */
    stop_candidate(e);
    run(e, &ev);
}

static void on_candidates(const kl__handoff_cand *cands, size_t n, int err, void *arg)
{
    k8s_elector *e = arg;
    int best;

    e->handoff_req = NULL;
    if (err < 0)
        kl__log_at(&e->pub.client->log, K8SLEASE_LOG_WARN, &e->pub.about,
                   "%s; handing over to nobody in particular", kl__error_get());
    best = kl__handoff_choose(cands, n, e->identity, kl__clock_wall_us());
    if (best < 0 && err == 0)
        kl__log_at(&e->pub.client->log, K8SLEASE_LOG_WARN, &e->pub.about,
                   "no candidate to hand the lease over to (%zu listed, none eligible: "
                   "terminating, expired or this one): releasing it",
                   n);
    if (best < 0) {
        kl__free(e->handoff_why);
        e->handoff_why = err < 0 ? kl__sprintf("listing the candidates failed: %s", kl__error_get())
                                 : kl__sprintf("%zu candidates listed, none eligible", n);
    }
    handoff_to(e, best >= 0 ? cands[best].identity : NULL);
}

static void handoff(k8slease_elector *pub, const char *to, int64_t bound_ms)
{
    k8s_elector *e = (k8s_elector *)pub;
    int64_t rp_ms = e->sm.cfg.retry_period_ns / KL_NS_PER_MS;

    if (e->handoff_started)
        return;
    e->handoff_started = 1;
    /* Whole seconds (leaseDurationSeconds), at least 1: by default three
     * retry periods, so that a polling successor (client-go's, or
     * poll_only) meets it: it polls every retry period plus up to 1.2 of
     * it (2.2 in all), then needs a GET and an UPDATE. */
    if (bound_ms <= 0)
        bound_ms = 3 * rp_ms;
    e->handoff_bound_s = (bound_ms + 999) / 1000;
    kl__handoff_announce_terminating(e->announce);
    if (to || e->sm.state != KL_KE_LEADING) {
        handoff_to(e, to);
        return;
    }
    /* The best candidate: one LIST (the term goes on meanwhile). */
    e->handoff_req =
        kl__handoff_list(e->pub.client, e->ns, e->name, e->request_timeout_ms, on_candidates, e);
    if (!e->handoff_req)
        handoff_to(e, NULL);
}

/* A handoff asked on the Lease (its annotation KL_HANDOFF_REQUEST), seen
 * while leading. */
static void check_request(k8s_elector *e, const char *lease_json)
{
    char *to = NULL;

    if (e->handoff_started || e->sm.state != KL_KE_LEADING || !lease_json ||
        kl__handoff_requested(lease_json, &to) <= 0)
        return;
    kl__log_at(&e->pub.client->log, K8SLEASE_LOG_INFO, &e->pub.about,
               "a handoff was requested on the lease (to %s)", to ? to : "the best candidate");
    handoff(&e->pub, to, 0);
    kl__free(to);
}

static void destroy(k8slease_elector *pub)
{
    k8s_elector *e = (k8s_elector *)pub;

    if (!e)
        return;
    kl__candidate_free(e->cand);
    kl__crash_free(e->crash);
    kl__handoff_announce_free(e->announce);
    kl__free(e->handoff_why);
    kl__free(e->handoff_target);
    kl__free(e->base);
    kl__free(e->ns);
    kl__free(e->name);
    kl__free(e->identity);
    kl__free(e->path);
    kl__free(e->collection);
    kl__elector_head_destroy(&e->pub);
    kl__free(e);
}

/* The coordinated options, checked as the apiserver would check the
 * LeaseCandidate, so that a mistake shows at start, not as a 422 later. */
static const char *emulation_of(const k8slease_elector_options *opts)
{
    return opts->emulation_version ? opts->emulation_version : opts->binary_version;
}

static const char *strategy_of(const k8slease_elector_options *opts)
{
    return opts->strategy ? opts->strategy : K8SLEASE_STRATEGY_OLDEST_EMULATION_VERSION;
}

static int check_coordinated(const k8slease_elector_options *opts)
{
    const char *strategy = strategy_of(opts), *emulation = emulation_of(opts);
    const char *slash = strchr(strategy, '/');
    int err;

    if (!opts->coordinated) {
        if (opts->binary_version || opts->emulation_version || opts->strategy)
            return kl__error_set(K8SLEASE_EINVAL,
                                 "binary_version, emulation_version and strategy are for "
                                 "coordinated election: set coordinated to 1");
        return 0;
    }
    if ((err = kl__check_name("identity (in coordinated election it names the LeaseCandidate)",
                              opts->identity)) < 0 ||
        (err = kl__semver_check("binary_version", opts->binary_version)) < 0 ||
        (err = kl__semver_check("emulation_version", emulation)) < 0)
        return err;
    if (kl__semver_cmp(emulation, opts->binary_version) > 0)
        return kl__error_set(K8SLEASE_EINVAL,
                             "emulation_version %s must not be greater than binary_version %s",
                             emulation, opts->binary_version);
    if (strcmp(strategy, K8SLEASE_STRATEGY_OLDEST_EMULATION_VERSION) != 0 &&
        (!slash || slash == strategy || !slash[1] || strchr(slash + 1, '/')))
        return kl__error_set(K8SLEASE_EINVAL,
                             "strategy \"%.80s\": must be \"%s\" or a qualified name "
                             "\"prefix/name\" (a strategy another controller applies)",
                             strategy, K8SLEASE_STRATEGY_OLDEST_EMULATION_VERSION);
    return 0;
}

static int new_candidate(k8s_elector *e, const char *ns, const k8slease_elector_options *opts,
                         int64_t rp_ms)
{
    kl__candidate_config cc = {0};

    cc.ns = ns;
    cc.name = opts->identity;
    cc.lease_name = opts->name;
    cc.binary_version = opts->binary_version;
    cc.emulation_version = emulation_of(opts);
    cc.strategy = strategy_of(opts);
    cc.retry_period_ns = rp_ms * KL_NS_PER_MS;
    cc.request_timeout_ms = e->request_timeout_ms;
    cc.what = e->pub.what;
    cc.subject = e->pub.about.subject;
    return kl__candidate_new(&e->cand, e->pub.client, &cc, on_candidate_fatal, e);
}

static int check_crash(const k8slease_elector_options *opts)
{
    if (!opts->crash_failover) {
        if (opts->container)
            return kl__error_set(K8SLEASE_EINVAL,
                                 "container is for crash failover: set crash_failover to 1");
        if ((opts->pod_namespace || opts->pod_name) && !opts->handoff_candidate)
            return kl__error_set(K8SLEASE_EINVAL,
                                 "pod_namespace and pod_name are for crash failover and handoff "
                                 "candidates: set crash_failover or handoff_candidate to 1");
        return 0;
    }
    if (opts->coordinated)
        return kl__error_set(K8SLEASE_EINVAL,
                             "crash_failover is not for coordinated election (the apiserver's "
                             "controller picks the holder)");
    if (!opts->pod_name)
        return kl__error_set(K8SLEASE_EINVAL,
                             "crash_failover needs pod_name: the Pod this process runs in (the "
                             "Downward API's metadata.name)");
    return 0;
}

static int new_crash(k8s_elector *e, const char *ns, const k8slease_elector_options *opts,
                     int64_t rp_ms)
{
    kl__crash_config cc = {0};

    cc.pod_ns = opts->pod_namespace ? opts->pod_namespace : ns;
    cc.pod = opts->pod_name;
    cc.container = opts->container;
    cc.identity = opts->identity;
    cc.retry_period_ns = rp_ms * KL_NS_PER_MS;
    cc.request_timeout_ms = e->request_timeout_ms;
    cc.what = e->pub.what;
    cc.subject = e->pub.about.subject;
    cc.ended = on_holder_ended;
    cc.known = on_self_known;
    cc.arg = e;
    return kl__crash_new(&e->crash, e->pub.client, &cc);
}

static int create(k8slease_elector **out, k8slease_client *client,
                  const k8slease_elector_options *opts)
{
    kl__k8s_election_config cfg = {0};
    kl__elector_timings t;
    k8slease_elector *pub = NULL;
    k8s_elector *e;
    const char *ns;
    int err;

    ns = opts->ns ? opts->ns : client->cfg->ns;
    if ((err = kl__check_namespace(ns)) < 0 || (err = kl__check_name("lease name", opts->name)) < 0)
        return err;
    if (!opts->identity)
        return kl__error_set(K8SLEASE_EINVAL, "identity is NULL");
    if (!kl__utf8_valid(opts->identity, strlen(opts->identity)))
        return kl__error_set(K8SLEASE_EINVAL,
                             "identity is not valid UTF-8 (a Lease's holderIdentity is a JSON "
                             "string)");
    if ((err = kl__elector_timings_of(&t, opts)) < 0)
        return err;
    if ((err = check_coordinated(opts)) < 0 || (err = check_crash(opts)) < 0)
        return err;

    if ((err = kl__elector_new(&pub, sizeof(*e), client, &kl__k8s_elector_backend, opts, on_timer,
                               LEASE_WHAT "%s/%s", ns, opts->name)) < 0)
        return err;
    e = (k8s_elector *)pub;
    /* Its lines are about the Lease (pub.what is LEASE_WHAT "NS/NAME"). */
    e->pub.about.subject = e->pub.what + strlen(LEASE_WHAT);
    e->ns = kl__strdup(ns);
    e->name = kl__strdup(opts->name);
    e->identity = kl__strdup(opts->identity);
    e->path = kl__lease_path(ns, opts->name);
    e->collection = kl__lease_path(ns, NULL);
    if (!e->ns || !e->name || !e->identity || !e->path || !e->collection) {
        err = kl__error_set(K8SLEASE_ENOMEM, "out of memory");
        goto out;
    }
    /* Room for a stalled attempt and one on a new connection inside the
     * renew deadline (core/timings.h); client-go takes half the renew
     * deadline, which leaves no room for the second. */
    e->request_timeout_ms = t.request_timeout_ms;
    e->pub.term_deadline_ms = t.renew_deadline_ms;

    cfg.identity = e->identity;
    cfg.lease_duration_ns = t.lease_duration_ms * KL_NS_PER_MS;
    cfg.renew_deadline_ns = t.renew_deadline_ms * KL_NS_PER_MS;
    cfg.retry_period_ns = t.retry_period_ms * KL_NS_PER_MS;
    cfg.release_on_cancel = opts->release_on_cancel;
    cfg.seed = kl__elector_seed(e);
    cfg.poll_only = opts->poll_only != 0;
    cfg.coordinated = opts->coordinated != 0;
    if ((err = kl__k8s_election_init(&e->sm, &cfg)) < 0)
        goto out;
    if (opts->coordinated && (err = new_candidate(e, ns, opts, t.retry_period_ms)) < 0)
        goto out;
    if (opts->crash_failover && (err = new_crash(e, ns, opts, t.retry_period_ms)) < 0)
        goto out;
    if (opts->handoff_candidate) {
        kl__handoff_announce_config ac = {0};

        ac.ns = ns;
        ac.lease = opts->name;
        ac.identity = opts->identity;
        ac.pod_ns = opts->pod_namespace ? opts->pod_namespace : ns;
        ac.pod = opts->pod_name;
        ac.revision = opts->revision;
        ac.priority = opts->priority;
        ac.retry_period_ns = cfg.retry_period_ns;
        ac.request_timeout_ms = e->request_timeout_ms;
        ac.what = e->pub.what;
        ac.subject = e->pub.about.subject;
        ac.known = on_announce_known;
        ac.known_arg = e;
        if ((err = kl__handoff_announce_new(&e->announce, client, &ac)) < 0)
            goto out;
    }
    kl__timer_init(&e->failed, on_failed, e);
    *out = pub;
    pub = NULL;
out:
    destroy(pub);
    return err;
}

const kl__elector_backend kl__k8s_elector_backend = {create,
                                                     start,
                                                     stop,
                                                     handoff,
                                                     detach,
                                                     destroy,
                                                     "renewal",
                                                     "renew deadline",
                                                     "the Lease was deleted"};
