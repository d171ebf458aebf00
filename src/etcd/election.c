/* The etcd election state machine. The rules are listed in etcd/election.h;
 * this file adds the reasons behind the less obvious choices. */
#include "etcd/election.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "core/clock.h" /* KL_NS_PER_* only: the machine never reads a clock */
#include "core/common.h"
#include "core/timings.h" /* kl__duration_format */

/* Hook to watch every state change (e.g. printf in a debugging build). */
#ifndef KL_ETCD_ELECTION_TRACE
#define KL_ETCD_ELECTION_TRACE(e, from, to) ((void)0)
#endif

static void set_state(kl__etcd_election *e, kl__etcd_election_state to)
{
    KL_ETCD_ELECTION_TRACE(e, e->state, to);
    e->state = to;
}

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

static int same_bytes(const char *a, size_t a_len, const char *b, size_t b_len)
{
    return a_len == b_len && memcmp(a, b, a_len) == 0;
}

/* Copies a key into a KL_EE_KEY_MAX buffer; 0 if it does not fit. */
static int copy_key(char *dst, size_t *dst_len, const char *key, size_t len)
{
    if (len >= KL_EE_KEY_MAX)
        return 0;
    memcpy(dst, key, len);
    dst[len] = '\0';
    *dst_len = len;
    return 1;
}

static int is_ours(const kl__etcd_election *e, const kl__etcd_kv *kv)
{
    return kv->create_revision == e->my_rev && same_bytes(kv->key, kv->key_len, e->key, e->key_len);
}

/* ------------------------------------------------------------------------ */
/* Actions                                                                  */
/* ------------------------------------------------------------------------ */

static kl__etcd_election_action *push(kl__etcd_election_actions *out,
                                      kl__etcd_election_action_type type)
{
    kl__etcd_election_action *a;

    /* At most six per step (the tests check it): a stop is STOPPED, up to
     * three CANCELs and DELETE_KEY; a candidate whose lease deadline passed
     * as an OBSERVE answer arrives gets CANCEL, CANCEL, GRANT, REVOKE,
     * NEW_LEADER, WATCH_KEY; a TIMER sends one request per channel (and
     * CANCELs a REVOKE for a KEEPALIVE); a watch message makes at most one
     * report. */
    assert(out->n < KL_EE_MAX_ACTIONS);
    a = &out->a[out->n++];
    memset(a, 0, sizeof(*a));
    a->type = type;
    return a;
}

static kl__etcd_election_action *request(kl__etcd_election *e, kl__etcd_channel ch,
                                         kl__etcd_req req, kl__etcd_election_action_type type,
                                         int64_t now, kl__etcd_election_actions *out)
{
    kl__etcd_election_action *a = push(out, type);

    a->channel = ch;
    e->inflight[ch] = req;
    e->sent[ch] = now;
    e->next[ch] = INT64_MAX;
    e->seq[ch]++;
    return a;
}

static void cancel(kl__etcd_election *e, kl__etcd_channel ch, kl__etcd_election_actions *out)
{
    e->next[ch] = INT64_MAX;
    if (e->inflight[ch] == KL_EE_REQ_NONE)
        return;
    push(out, KL_EE_ACT_CANCEL)->channel = ch;
    e->inflight[ch] = KL_EE_REQ_NONE;
    e->seq[ch]++;
}

static void retry_later(kl__etcd_election *e, kl__etcd_channel ch, int64_t now)
{
    e->next[ch] = kl__add_sat(now, e->cfg.retry_period_ns);
}

static void send_grant(kl__etcd_election *e, int64_t now, kl__etcd_election_actions *out)
{
    request(e, KL_EE_CH_CAMPAIGN, KL_EE_REQ_GRANT, KL_EE_ACT_GRANT, now, out)->ttl_s = e->ttl_s;
}

static void send_create(kl__etcd_election *e, int64_t now, kl__etcd_election_actions *out)
{
    kl__etcd_election_action *a =
        request(e, KL_EE_CH_CAMPAIGN, KL_EE_REQ_TXN_CREATE, KL_EE_ACT_TXN_CREATE, now, out);

    a->key = e->key;
    a->key_len = e->key_len;
    a->value = e->value;
    a->value_len = e->value_len;
    a->lease_id = e->lease_id;
}

static void send_proclaim(kl__etcd_election *e, int64_t now, kl__etcd_election_actions *out)
{
    kl__etcd_election_action *a =
        request(e, KL_EE_CH_CAMPAIGN, KL_EE_REQ_PROCLAIM, KL_EE_ACT_PROCLAIM, now, out);

    a->key = e->key;
    a->key_len = e->key_len;
    a->value = e->value;
    a->value_len = e->value_len;
    a->lease_id = e->lease_id;
    a->revision = e->my_rev;
}

static void send_range_predecessor(kl__etcd_election *e, int64_t now,
                                   kl__etcd_election_actions *out)
{
    kl__etcd_election_action *a = request(e, KL_EE_CH_CAMPAIGN, KL_EE_REQ_RANGE_PREDECESSOR,
                                          KL_EE_ACT_RANGE_PREDECESSOR, now, out);

    a->key = e->prefix;
    a->key_len = e->prefix_len;
    a->range_end = e->prefix_end;
    a->range_end_len = e->prefix_end_len;
    a->revision = e->my_rev;
    a->limit = 2;
}

static void send_range_leader(kl__etcd_election *e, int64_t now, kl__etcd_election_actions *out)
{
    kl__etcd_election_action *a =
        request(e, KL_EE_CH_OBSERVE, KL_EE_REQ_RANGE_LEADER, KL_EE_ACT_RANGE_LEADER, now, out);

    a->key = e->prefix;
    a->key_len = e->prefix_len;
    a->range_end = e->prefix_end;
    a->range_end_len = e->prefix_end_len;
    a->limit = 1;
}

static void send_watch(kl__etcd_election *e, kl__etcd_channel ch, const char *key, size_t len,
                       int64_t from_rev, int64_t now, kl__etcd_election_actions *out)
{
    kl__etcd_election_action *a = request(e, ch, KL_EE_REQ_WATCH, KL_EE_ACT_WATCH_KEY, now, out);

    a->key = key;
    a->key_len = len;
    a->revision = from_rev;
}

static void send_keepalive(kl__etcd_election *e, int64_t now, kl__etcd_election_actions *out)
{
    request(e, KL_EE_CH_KEEPALIVE, KL_EE_REQ_KEEPALIVE, KL_EE_ACT_KEEPALIVE, now, out)->lease_id =
        e->lease_id;
}

static void send_delete(kl__etcd_election *e, int64_t now, kl__etcd_election_actions *out)
{
    kl__etcd_election_action *a =
        request(e, KL_EE_CH_CAMPAIGN, KL_EE_REQ_DELETE_KEY, KL_EE_ACT_DELETE_KEY, now, out);

    a->key = e->key;
    a->key_len = e->key_len;
    a->revision = e->my_rev;
}

static void send_revoke(kl__etcd_election *e, int64_t now, kl__etcd_election_actions *out)
{
    request(e, KL_EE_CH_CAMPAIGN, KL_EE_REQ_REVOKE, KL_EE_ACT_REVOKE, now, out)->lease_id =
        e->lease_id;
}

/* The lease presumed lost, on the KEEPALIVE channel (see lease_lost()). */
static void send_revoke_old(kl__etcd_election *e, int64_t now, kl__etcd_election_actions *out)
{
    request(e, KL_EE_CH_KEEPALIVE, KL_EE_REQ_REVOKE, KL_EE_ACT_REVOKE, now, out)->lease_id =
        e->revoke_id;
}

/* The campaign request the current state calls for (first try or retry). */
static void campaign_send(kl__etcd_election *e, int64_t now, kl__etcd_election_actions *out)
{
    switch (e->state) {
    case KL_EE_GRANTING:
        send_grant(e, now, out);
        break;
    case KL_EE_CREATING:
        send_create(e, now, out);
        break;
    case KL_EE_PROCLAIMING:
        send_proclaim(e, now, out);
        break;
    case KL_EE_RANGING:
        send_range_predecessor(e, now, out);
        break;
    case KL_EE_RELEASING:
        if (e->release_delete)
            send_delete(e, now, out);
        else
            send_revoke(e, now, out);
        break;
    default:
        break;
    }
}

/* ------------------------------------------------------------------------ */
/* Leader reports                                                           */
/* ------------------------------------------------------------------------ */

/* NEW_LEADER when (epoch, value) differs from the last report. rev is the
 * revision the information is from: OBSERVE and CAMPAIGN answer in any
 * order, and an older answer must not undo a newer report. */
static void report_leader(kl__etcd_election *e, const char *value, size_t len, int64_t epoch,
                          int64_t rev, kl__etcd_election_actions *out)
{
    uint64_t hash = kl__fnv1a(value, len);
    size_t n = len < KL_EE_VALUE_MAX - 1 ? len : KL_EE_VALUE_MAX - 1;
    kl__etcd_election_action *a;

    if (e->have_reported && rev < e->reported_rev)
        return;
    e->reported_rev = rev;
    if (e->have_reported && e->reported_epoch == epoch && e->reported_len == len &&
        e->reported_hash == hash && memcmp(e->reported, value, n) == 0)
        return;
    memcpy(e->reported, value, n);
    e->reported[n] = '\0';
    e->reported_len = len;
    e->reported_hash = hash;
    e->reported_epoch = epoch;
    e->have_reported = 1;
    a = push(out, KL_EE_ACT_NEW_LEADER);
    a->value = e->reported;
    a->value_len = n;
    a->epoch = epoch;
}

/* ------------------------------------------------------------------------ */
/* Endings                                                                  */
/* ------------------------------------------------------------------------ */

/* STOPPED, once, saying why. */
static void emit_stopped(kl__etcd_election *e, kl__term_end why, kl__etcd_election_actions *out)
{
    if (e->stopped_emitted)
        return;
    e->stopped_emitted = 1;
    push(out, KL_EE_ACT_STOPPED)->end = why;
}

static void finish(kl__etcd_election *e, kl__etcd_election_actions *out)
{
    emit_stopped(e, KL_TERM_STOPPED, out);
    set_state(e, KL_EE_DONE);
    for (int ch = 0; ch < KL_EE_CH_COUNT; ch++) {
        e->inflight[ch] = KL_EE_REQ_NONE;
        e->next[ch] = INT64_MAX;
    }
    e->observing = 0;
    e->revoke_id = 0;
    push(out, KL_EE_ACT_DONE);
}

/* The election is over (stop, or a term that ended, for the reason why).
 * STOPPED goes out first so that is_leader is false before anything is
 * written. Whatever is in flight is abandoned: the release does not depend
 * on its outcome, since REVOKE removes every key on the lease, whether a
 * TXN_CREATE landed or not. */
static void end(kl__etcd_election *e, kl__term_end why, int release, int64_t now,
                kl__etcd_election_actions *out)
{
    emit_stopped(e, why, out);
    if (!release || e->lease_id == 0) {
        finish(e, out);
        return;
    }
    for (int ch = 0; ch < KL_EE_CH_COUNT; ch++)
        cancel(e, (kl__etcd_channel)ch, out);
    e->observing = 0;
    e->revoke_id = 0; /* the revoke of an older lease is abandoned: it expires */
    set_state(e, KL_EE_RELEASING);
    e->release_delete = e->my_rev > 0 && !e->key_gone;
    /* Without keepalives the lease dies at most TTL after its last renewal
     * at the server, which is before now: then there is nothing left. */
    e->release_deadline = kl__add_sat(now, e->cfg.ttl_ns);
    campaign_send(e, now, out);
}

static void drop_lease(kl__etcd_election *e)
{
    e->lease_id = 0;
    e->lease_deadline = 0;
    e->key_len = 0;
    e->key[0] = '\0';
    e->my_rev = 0;
    e->key_gone = 0;
}

/* gone: the server said so (TTL 0, lease not found), else presumed. */
static void lease_lost(kl__etcd_election *e, int gone, int64_t now, kl__etcd_election_actions *out)
{
    int64_t old = e->lease_id;

    if (e->state == KL_EE_LEADING) {
        end(e, gone ? KL_TERM_GONE : KL_TERM_DEADLINE, e->cfg.release_on_cancel && !gone, now, out);
        return;
    }
    /* A candidate never held a term: a new lease, a new key at the back of
     * the queue. OBSERVE goes on (it does not depend on our lease). */
    cancel(e, KL_EE_CH_CAMPAIGN, out);
    cancel(e, KL_EE_CH_KEEPALIVE, out);
    drop_lease(e);
    set_state(e, KL_EE_GRANTING);
    send_grant(e, now, out);
    /* A lease presumed lost may still live: the answers may be what was
     * lost, and an etcd that restarts extends every lease by its TTL. Its
     * key is older than our new one and, without keepalives, would hold
     * the queue up until etcd expires it, a TTL after etcd is back. So it
     * is revoked, on the KEEPALIVE channel, idle until the new lease is
     * granted; nothing waits for the answer. One at a time: an older one
     * still being revoked (on its last attempt, see grant_result()) is
     * abandoned, as it is after TTL 0 or "lease not found". */
    e->revoke_id = gone ? 0 : old;
    if (e->revoke_id != 0)
        send_revoke_old(e, now, out);
}

/* The answer to send_revoke_old(). Errors are retried with the GRANT's
 * rhythm while the new lease is not granted: etcd is most likely down
 * then, the very case the revoke is for. The attempt in flight when the
 * GRANT succeeds, or the one sent then, is the last: etcd answers again. */
static void revoke_old_result(kl__etcd_election *e, int status, int64_t now)
{
    if (status == 0 || status == K8SLEASE_ENOTFOUND || e->lease_id != 0)
        e->revoke_id = 0; /* next[KEEPALIVE] is the new lease's: kept */
    else
        retry_later(e, KL_EE_CH_KEEPALIVE, now);
}

static void lose_key(kl__etcd_election *e, int64_t now, kl__etcd_election_actions *out)
{
    e->key_gone = 1;
    end(e, KL_TERM_DELETED, e->cfg.release_on_cancel, now, out);
}

/* ------------------------------------------------------------------------ */
/* Campaign                                                                 */
/* ------------------------------------------------------------------------ */

static void start_observing(kl__etcd_election *e, int64_t now, kl__etcd_election_actions *out)
{
    if (e->observing)
        return;
    e->observing = 1;
    send_range_leader(e, now, out);
}

static void created(kl__etcd_election *e, int64_t now, kl__etcd_election_actions *out)
{
    set_state(e, KL_EE_RANGING);
    send_range_predecessor(e, now, out);
    start_observing(e, now, out);
}

static void recreate(kl__etcd_election *e, int64_t now, kl__etcd_election_actions *out)
{
    e->my_rev = 0;
    set_state(e, KL_EE_CREATING);
    send_create(e, now, out);
}

static void grant_result(kl__etcd_election *e, int status, const kl__etcd_lease *l, int64_t now,
                         kl__etcd_election_actions *out)
{
    int64_t granted;

    if (status != 0 || l->id <= 0 || l->ttl <= 0) {
        retry_later(e, KL_EE_CH_CAMPAIGN, now);
        return;
    }
    /* etcd may grant more than asked (its minimum TTL), never less; the
     * shorter of the two keeps the deadline on the safe side. */
    granted = l->ttl > INT64_MAX / KL_NS_PER_S ? INT64_MAX : l->ttl * KL_NS_PER_S;
    e->lease_id = l->id;
    e->lease_deadline = kl__add_sat(e->sent[KL_EE_CH_CAMPAIGN], min64(e->cfg.ttl_ns, granted));
    e->key_len =
        (size_t)snprintf(e->key, sizeof(e->key), "%s%llx", e->prefix, (unsigned long long)l->id);
    e->my_rev = 0;
    e->key_gone = 0;
    if (now >= e->lease_deadline) {
        /* the answer took longer than the TTL: presumed expired already */
        lease_lost(e, 0, now, out);
        return;
    }
    set_state(e, KL_EE_CREATING);
    send_create(e, now, out);
    /* etcd answers again: the last try for a revoke still to do */
    if (e->revoke_id != 0 && e->inflight[KL_EE_CH_KEEPALIVE] == KL_EE_REQ_NONE)
        send_revoke_old(e, now, out);
    e->next[KL_EE_CH_KEEPALIVE] = kl__add_sat(now, e->keepalive_ns);
}

static void create_result(kl__etcd_election *e, int status, const kl__etcd_txn *t, int64_t now,
                          kl__etcd_election_actions *out)
{
    const kl__etcd_kv *kv = NULL;

    if (status == K8SLEASE_ENOTFOUND) {
        lease_lost(e, 1, now, out);
        return;
    }
    if (status == 0 && t->succeeded) {
        /* a txn's writes all carry its revision */
        e->my_rev = t->revision;
        created(e, now, out);
        return;
    }
    if (status == 0 && t->n_ops == 1 && t->ops[0].type == KL_ETCD_OP_RANGE &&
        t->ops[0].range.n_kvs == 1)
        kv = &t->ops[0].range.kvs[0];
    if (!kv || !same_bytes(kv->key, kv->key_len, e->key, e->key_len) || kv->create_revision <= 0) {
        retry_later(e, KL_EE_CH_CAMPAIGN, now);
        return;
    }
    /* Our key exists already: a retry whose first attempt landed. */
    e->my_rev = kv->create_revision;
    if (!same_bytes(kv->value, kv->value_len, e->value, e->value_len)) {
        set_state(e, KL_EE_PROCLAIMING);
        send_proclaim(e, now, out);
        return;
    }
    created(e, now, out);
}

static void proclaim_result(kl__etcd_election *e, int status, const kl__etcd_txn *t, int64_t now,
                            kl__etcd_election_actions *out)
{
    if (status == K8SLEASE_ENOTFOUND)
        lease_lost(e, 1, now, out);
    else if (status != 0)
        retry_later(e, KL_EE_CH_CAMPAIGN, now);
    else if (t->succeeded)
        created(e, now, out);
    else
        recreate(e, now, out); /* our key went away in between */
}

static void lead(kl__etcd_election *e, int64_t rev, kl__etcd_election_actions *out)
{
    set_state(e, KL_EE_LEADING);
    e->epoch = e->my_rev;
    e->lead_rev = rev;
    push(out, KL_EE_ACT_STARTED)->epoch = e->epoch;
    report_leader(e, e->value, e->value_len, e->epoch, rev, out);
}

static void predecessor_result(kl__etcd_election *e, int status, const kl__etcd_range *r,
                               int64_t now, kl__etcd_election_actions *out)
{
    const kl__etcd_kv *pred;

    if (status != 0) {
        retry_later(e, KL_EE_CH_CAMPAIGN, now);
        return;
    }
    if (r->n_kvs == 0 || !is_ours(e, &r->kvs[0])) {
        recreate(e, now, out);
        return;
    }
    if (r->n_kvs == 1) {
        lead(e, r->revision, out);
        return;
    }
    pred = &r->kvs[1];
    if (pred->create_revision >= e->my_rev ||
        !copy_key(e->pred, &e->pred_len, pred->key, pred->key_len)) {
        /* not sorted as asked, or a key too long to watch: poll */
        retry_later(e, KL_EE_CH_CAMPAIGN, now);
        return;
    }
    set_state(e, KL_EE_WAITING);
    send_watch(e, KL_EE_CH_CAMPAIGN, e->pred, e->pred_len, kl__add_sat(r->revision, 1), now, out);
}

/* A canceled watch is over on etcd's side; CANCEL closes our stream. After
 * a compaction the range is safe to redo at once; other reasons (auth) would
 * only fail again: wait. */
static int watch_canceled(kl__etcd_election *e, kl__etcd_channel ch, const kl__etcd_watch_msg *m,
                          int64_t now, kl__etcd_election_actions *out)
{
    cancel(e, ch, out);
    if (m->compact_revision > 0)
        return 1;
    retry_later(e, ch, now);
    return 0;
}

static void campaign_watch(kl__etcd_election *e, const kl__etcd_watch_msg *m, int64_t now,
                           kl__etcd_election_actions *out)
{
    if (m->canceled) {
        set_state(e, KL_EE_RANGING);
        if (watch_canceled(e, KL_EE_CH_CAMPAIGN, m, now, out))
            send_range_predecessor(e, now, out);
        return;
    }
    for (size_t i = 0; i < m->n_events; i++) {
        const kl__etcd_watch_event *ev = &m->events[i];

        if (ev->type == KL_ETCD_EVENT_DELETE &&
            same_bytes(ev->kv.key, ev->kv.key_len, e->pred, e->pred_len)) {
            cancel(e, KL_EE_CH_CAMPAIGN, out);
            set_state(e, KL_EE_RANGING);
            send_range_predecessor(e, now, out);
            return;
        }
    }
}

static void release_result(kl__etcd_election *e, kl__etcd_req req, int status, int64_t now,
                           kl__etcd_election_actions *out)
{
    if (req == KL_EE_REQ_DELETE_KEY) {
        /* whatever happened, REVOKE deletes the key if it is still there */
        e->release_delete = 0;
        send_revoke(e, now, out);
    } else if (status == 0 || status == K8SLEASE_ENOTFOUND) {
        finish(e, out);
    } else {
        retry_later(e, KL_EE_CH_CAMPAIGN, now);
    }
}

static void campaign_result(kl__etcd_election *e, kl__etcd_req req, int status,
                            const kl__etcd_election_event *ev, int64_t now,
                            kl__etcd_election_actions *out)
{
    switch (req) {
    case KL_EE_REQ_GRANT:
        grant_result(e, status, ev->lease, now, out);
        break;
    case KL_EE_REQ_TXN_CREATE:
        create_result(e, status, ev->txn, now, out);
        break;
    case KL_EE_REQ_PROCLAIM:
        proclaim_result(e, status, ev->txn, now, out);
        break;
    case KL_EE_REQ_RANGE_PREDECESSOR:
        predecessor_result(e, status, ev->range, now, out);
        break;
    case KL_EE_REQ_WATCH:
        /* the predecessor watch ended without its DELETE */
        set_state(e, KL_EE_RANGING);
        retry_later(e, KL_EE_CH_CAMPAIGN, now);
        break;
    case KL_EE_REQ_DELETE_KEY:
    case KL_EE_REQ_REVOKE:
        release_result(e, req, status, now, out);
        break;
    default:
        break;
    }
}

/* ------------------------------------------------------------------------ */
/* Keepalive                                                                */
/* ------------------------------------------------------------------------ */

static void keepalive_result(kl__etcd_election *e, int status, const kl__etcd_lease *l, int64_t now,
                             kl__etcd_election_actions *out)
{
    int64_t ttl;

    if (status != 0 || (l->id != 0 && l->id != e->lease_id)) {
        e->next[KL_EE_CH_KEEPALIVE] =
            kl__add_sat(now, min64(e->keepalive_ns, e->cfg.retry_period_ns));
        return;
    }
    if (l->ttl <= 0) {
        lease_lost(e, 1, now, out);
        return;
    }
    ttl = l->ttl > INT64_MAX / KL_NS_PER_S ? INT64_MAX : l->ttl * KL_NS_PER_S;
    e->lease_deadline = kl__add_sat(e->sent[KL_EE_CH_KEEPALIVE], min64(e->cfg.ttl_ns, ttl));
    e->next[KL_EE_CH_KEEPALIVE] = kl__add_sat(now, e->keepalive_ns);
}

/* ------------------------------------------------------------------------ */
/* Observe                                                                  */
/* ------------------------------------------------------------------------ */

static void leader_range_result(kl__etcd_election *e, int status, const kl__etcd_range *r,
                                int64_t now, kl__etcd_election_actions *out)
{
    const kl__etcd_kv *kv;

    if (status != 0) {
        retry_later(e, KL_EE_CH_OBSERVE, now);
        return;
    }
    kv = r->n_kvs > 0 ? &r->kvs[0] : NULL;
    if (e->state == KL_EE_LEADING && r->revision >= e->lead_rev && (!kv || !is_ours(e, kv))) {
        lose_key(e, now, out);
        return;
    }
    if (!kv)
        report_leader(e, "", 0, 0, r->revision, out);
    else if (e->state == KL_EE_LEADING || !is_ours(e, kv))
        report_leader(e, kv->value, kv->value_len, kv->create_revision, r->revision, out);
    if (!kv || !copy_key(e->leader_key, &e->leader_key_len, kv->key, kv->key_len)) {
        retry_later(e, KL_EE_CH_OBSERVE, now);
        return;
    }
    send_watch(e, KL_EE_CH_OBSERVE, e->leader_key, e->leader_key_len, kl__add_sat(r->revision, 1),
               now, out);
}

static void observe_watch(kl__etcd_election *e, const kl__etcd_watch_msg *m, int64_t now,
                          kl__etcd_election_actions *out)
{
    int ours = e->my_rev > 0 && same_bytes(e->leader_key, e->leader_key_len, e->key, e->key_len);
    const kl__etcd_watch_event *put = NULL;

    if (m->canceled) {
        if (watch_canceled(e, KL_EE_CH_OBSERVE, m, now, out))
            send_range_leader(e, now, out);
        return;
    }
    for (size_t i = 0; i < m->n_events; i++) {
        const kl__etcd_watch_event *ev = &m->events[i];

        if (!same_bytes(ev->kv.key, ev->kv.key_len, e->leader_key, e->leader_key_len))
            continue;
        if (ev->type == KL_ETCD_EVENT_PUT) {
            put = ev;
            continue;
        }
        /* an older incarnation of our key (deleted before we recreated it)
         * is not the one we lead with */
        if (ours && e->state == KL_EE_LEADING && ev->kv.mod_revision > e->my_rev) {
            lose_key(e, now, out);
            return;
        }
        cancel(e, KL_EE_CH_OBSERVE, out);
        send_range_leader(e, now, out);
        return;
    }
    /* One message may carry several proclaims: the last one is the value
     * (and one report keeps a step's actions bounded). */
    if (put && (!ours || e->state == KL_EE_LEADING))
        report_leader(e, put->kv.value, put->kv.value_len, put->kv.create_revision,
                      put->kv.mod_revision, out);
}

/* ------------------------------------------------------------------------ */
/* Events                                                                   */
/* ------------------------------------------------------------------------ */

static int has_payload(const kl__etcd_election_event *ev, kl__etcd_req req)
{
    switch (req) {
    case KL_EE_REQ_GRANT:
    case KL_EE_REQ_KEEPALIVE:
        return ev->lease != NULL;
    case KL_EE_REQ_TXN_CREATE:
    case KL_EE_REQ_PROCLAIM:
    case KL_EE_REQ_DELETE_KEY:
        return ev->txn != NULL;
    case KL_EE_REQ_RANGE_PREDECESSOR:
    case KL_EE_REQ_RANGE_LEADER:
        return ev->range != NULL;
    default:
        return 1;
    }
}

static void on_result(kl__etcd_election *e, const kl__etcd_election_event *ev, int64_t now,
                      kl__etcd_election_actions *out)
{
    kl__etcd_channel ch = ev->channel;
    kl__etcd_req req = e->inflight[ch];
    int status = ev->status;

    /* a driver bug, but "ok" without its payload must not be taken as one */
    if (status == 0 && !has_payload(ev, req))
        status = K8SLEASE_EPROTOCOL;
    e->inflight[ch] = KL_EE_REQ_NONE;
    if (ch == KL_EE_CH_CAMPAIGN)
        campaign_result(e, req, status, ev, now, out);
    else if (req == KL_EE_REQ_REVOKE)
        revoke_old_result(e, status, now);
    else if (ch == KL_EE_CH_KEEPALIVE)
        keepalive_result(e, status, ev->lease, now, out);
    else if (req == KL_EE_REQ_RANGE_LEADER)
        leader_range_result(e, status, ev->range, now, out);
    else
        retry_later(e, KL_EE_CH_OBSERVE, now); /* the leader watch ended */
}

static void on_timer(kl__etcd_election *e, int64_t now, kl__etcd_election_actions *out)
{
    if (e->inflight[KL_EE_CH_CAMPAIGN] == KL_EE_REQ_NONE && now >= e->next[KL_EE_CH_CAMPAIGN])
        campaign_send(e, now, out);
    if (e->lease_id != 0 && e->state != KL_EE_RELEASING &&
        (e->inflight[KL_EE_CH_KEEPALIVE] == KL_EE_REQ_NONE ||
         e->inflight[KL_EE_CH_KEEPALIVE] == KL_EE_REQ_REVOKE) &&
        now >= e->next[KL_EE_CH_KEEPALIVE]) {
        /* the new lease's keepalives come first: a revoke still in flight
         * (its last attempt) is over */
        cancel(e, KL_EE_CH_KEEPALIVE, out);
        e->revoke_id = 0;
        send_keepalive(e, now, out);
    } else if (e->lease_id == 0 && e->revoke_id != 0 &&
               e->inflight[KL_EE_CH_KEEPALIVE] == KL_EE_REQ_NONE &&
               now >= e->next[KL_EE_CH_KEEPALIVE]) {
        send_revoke_old(e, now, out);
    }
    if (e->observing && e->inflight[KL_EE_CH_OBSERVE] == KL_EE_REQ_NONE &&
        now >= e->next[KL_EE_CH_OBSERVE])
        send_range_leader(e, now, out);
}

static void on_stop(kl__etcd_election *e, int release, int64_t now, kl__etcd_election_actions *out)
{
    if (e->stop_requested)
        return;
    e->stop_requested = 1;
    if (e->state == KL_EE_RELEASING) /* already on its way to DONE */
        return;
    end(e, KL_TERM_STOPPED, release, now, out);
}

void kl__etcd_election_step(kl__etcd_election *e, const kl__etcd_election_event *ev, int64_t now,
                            kl__etcd_election_actions *out)
{
    int ch_ok = (unsigned)ev->channel < KL_EE_CH_COUNT;
    /* what the event answers, decided before the deadline checks, which may
     * cancel it and send another request on the same channel */
    uint64_t seq = ch_ok ? e->seq[ev->channel] : 0;
    kl__etcd_req req = ch_ok ? e->inflight[ev->channel] : KL_EE_REQ_NONE;

    out->n = 0;
    if (e->state == KL_EE_DONE || e->state == KL_EE_IDLE) {
        if (e->state == KL_EE_IDLE && ev->type == KL_EE_EV_START) {
            set_state(e, KL_EE_GRANTING);
            send_grant(e, now, out);
        } else if (e->state == KL_EE_IDLE && ev->type == KL_EE_EV_STOP) {
            e->stop_requested = 1;
            finish(e, out);
        }
        return;
    }
    /* Every event, not only the timer: a late event must never extend a
     * lease (or a term) whose deadline has passed. */
    if (e->state == KL_EE_RELEASING && now >= e->release_deadline) {
        finish(e, out);
        return;
    }
    if (e->lease_id != 0 && e->state != KL_EE_RELEASING && now >= e->lease_deadline)
        lease_lost(e, 0, now, out);
    if (e->state == KL_EE_DONE)
        return;
    if ((ev->type == KL_EE_EV_RESULT || ev->type == KL_EE_EV_WATCH) &&
        (!ch_ok || req == KL_EE_REQ_NONE || seq != e->seq[ev->channel]))
        return; /* stale: nothing (or something else now) in flight there */
    switch (ev->type) {
    case KL_EE_EV_START:
        break;
    case KL_EE_EV_TIMER:
        on_timer(e, now, out);
        break;
    case KL_EE_EV_RESULT:
        on_result(e, ev, now, out);
        break;
    case KL_EE_EV_WATCH:
        if (req != KL_EE_REQ_WATCH || !ev->watch)
            break;
        if (ev->channel == KL_EE_CH_CAMPAIGN)
            campaign_watch(e, ev->watch, now, out);
        else if (ev->channel == KL_EE_CH_OBSERVE)
            observe_watch(e, ev->watch, now, out);
        break;
    case KL_EE_EV_STOP:
        on_stop(e, ev->release, now, out);
        break;
    }
}

int64_t kl__etcd_election_timer(const kl__etcd_election *e)
{
    int64_t t = INT64_MAX;

    if (e->state == KL_EE_IDLE || e->state == KL_EE_DONE)
        return INT64_MAX;
    if (e->inflight[KL_EE_CH_CAMPAIGN] == KL_EE_REQ_NONE)
        t = min64(t, e->next[KL_EE_CH_CAMPAIGN]);
    if (e->observing && e->inflight[KL_EE_CH_OBSERVE] == KL_EE_REQ_NONE)
        t = min64(t, e->next[KL_EE_CH_OBSERVE]);
    if (e->state == KL_EE_RELEASING)
        return min64(t, e->release_deadline);
    if (e->lease_id != 0) {
        if (e->inflight[KL_EE_CH_KEEPALIVE] == KL_EE_REQ_NONE ||
            e->inflight[KL_EE_CH_KEEPALIVE] == KL_EE_REQ_REVOKE)
            t = min64(t, e->next[KL_EE_CH_KEEPALIVE]);
        t = min64(t, e->lease_deadline);
    } else if (e->revoke_id != 0 && e->inflight[KL_EE_CH_KEEPALIVE] == KL_EE_REQ_NONE) {
        t = min64(t, e->next[KL_EE_CH_KEEPALIVE]);
    }
    return t;
}

int kl__etcd_election_is_leader(const kl__etcd_election *e, int64_t now)
{
    return e->state == KL_EE_LEADING && now < e->lease_deadline;
}

int64_t kl__etcd_election_lease_deadline(const kl__etcd_election *e)
{
    return e->lease_id != 0 ? e->lease_deadline : 0;
}

const char *kl__etcd_election_state_name(kl__etcd_election_state s)
{
    static const char *const names[] = {"IDLE",        "GRANTING",  "CREATING",
                                        "PROCLAIMING", "RANGING",   "WAITING",
                                        "LEADING",     "RELEASING", "DONE"};

    return (unsigned)s < KL_ARRAY_LEN(names) ? names[s] : "?";
}

/* ------------------------------------------------------------------------ */
/* Configuration                                                            */
/* ------------------------------------------------------------------------ */

static int validate(const kl__etcd_election_config *cfg)
{
    int64_t ka = cfg->keepalive_interval_ns;
    char a[32], b[32];

    if (!cfg->prefix || !cfg->prefix[0])
        return kl__error_set(K8SLEASE_EINVAL, "prefix must not be empty");
    if (strnlen(cfg->prefix, KL_EE_PREFIX_MAX) == KL_EE_PREFIX_MAX)
        return kl__error_set(K8SLEASE_EINVAL, "prefix longer than %d bytes", KL_EE_PREFIX_MAX - 1);
    if (!cfg->value || !cfg->value[0])
        return kl__error_set(K8SLEASE_EINVAL, "value must not be empty");
    if (strnlen(cfg->value, KL_EE_VALUE_MAX) == KL_EE_VALUE_MAX)
        return kl__error_set(K8SLEASE_EINVAL, "value longer than %d bytes", KL_EE_VALUE_MAX - 1);
    if (cfg->ttl_ns < KL_NS_PER_S)
        return kl__error_set(K8SLEASE_EINVAL, "ttl (%s) must be at least 1 s",
                             kl__duration_format(cfg->ttl_ns, a, sizeof(a)));
    if (ka < 0)
        return kl__error_set(K8SLEASE_EINVAL, "keepalive_interval (%s) must not be negative",
                             kl__duration_format(ka, a, sizeof(a)));
    if (ka >= cfg->ttl_ns)
        return kl__error_set(K8SLEASE_EINVAL, "keepalive_interval (%s) must be less than ttl (%s)",
                             kl__duration_format(ka, a, sizeof(a)),
                             kl__duration_format(cfg->ttl_ns, b, sizeof(b)));
    if (cfg->retry_period_ns <= 0)
        return kl__error_set(K8SLEASE_EINVAL, "retry_period (%s) must be greater than zero",
                             kl__duration_format(cfg->retry_period_ns, a, sizeof(a)));
    return 0;
}

int kl__etcd_election_init(kl__etcd_election *e, const kl__etcd_election_config *cfg)
{
    size_t n;
    int err;

    if (!e || !cfg)
        return kl__error_set(K8SLEASE_EINVAL, "election and config must not be NULL");
    memset(e, 0, sizeof(*e));
    if ((err = validate(cfg)) < 0)
        return err;
    e->cfg = *cfg;
    n = strlen(cfg->prefix);
    memcpy(e->name, cfg->prefix, n + 1);
    /* clientv3/concurrency.NewElection: keys live under "<name>/" */
    memcpy(e->prefix, cfg->prefix, n);
    e->prefix[n] = '/';
    e->prefix[n + 1] = '\0';
    e->prefix_len = n + 1;
    e->prefix_end_len = kl__etcd_prefix_range_end(e->prefix, e->prefix_len, e->prefix_end);
    e->prefix_end[e->prefix_end_len] = '\0';
    e->value_len = strlen(cfg->value);
    memcpy(e->value, cfg->value, e->value_len + 1);
    e->cfg.prefix = e->name;
    e->cfg.value = e->value;
    e->ttl_s = cfg->ttl_ns / KL_NS_PER_S + (cfg->ttl_ns % KL_NS_PER_S != 0);
    e->keepalive_ns = cfg->keepalive_interval_ns ? cfg->keepalive_interval_ns : cfg->ttl_ns / 3;
    e->state = KL_EE_IDLE;
    e->epoch = -1;
    for (int ch = 0; ch < KL_EE_CH_COUNT; ch++)
        e->next[ch] = INT64_MAX;
    return 0;
}
