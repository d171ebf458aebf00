/* The etcd backend (kl__etcd_backend): the client's options and
 * endpoints, the one-shot calls of the public API (holder, release), and
 * the backend table. Every request goes through the client's conn
 * (etcd/conn.c); the elector is in etcd/driver.c, the holder watch in
 * etcd/watch.c. */
#include "etcd/client.h"

#include <stdio.h>
#include <string.h>

#include "core/backend.h"
#include "core/client.h"
#include "core/clock.h"
#include "core/elector.h"
#include "etcd/codec.h"
#include "etcd/conn.h"
#include "etcd/watch.h"

#define SYNC_TIMEOUT_MS 10000

/* ------------------------------------------------------------------------ */
/* Checks                                                                   */
/* ------------------------------------------------------------------------ */

int kl__etcd_check_name(const char *what, const char *name)
{
    size_t len;

    if (!name)
        return kl__error_set(K8SLEASE_EINVAL, "%s is NULL", what);
    len = strlen(name);
    if (len == 0)
        return kl__error_set(K8SLEASE_EINVAL, "%s is empty", what);
    if (len > KL_ETCD_NAME_MAX)
        return kl__error_set(K8SLEASE_EINVAL, "%s \"%.40s...\": longer than %d bytes (%zu)", what,
                             name, KL_ETCD_NAME_MAX, len);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Holder, release                                                          */
/* ------------------------------------------------------------------------ */

/* The monotonic deadline of a blocking call (timeout_ms <= 0: the default). */
static int64_t deadline_after(int64_t timeout_ms)
{
    return kl__clock_mono_ns() + (timeout_ms > 0 ? timeout_ms : SYNC_TIMEOUT_MS) * KL_NS_PER_MS;
}

static int64_t ms_left(int64_t deadline)
{
    int64_t left = (deadline - kl__clock_mono_ns()) / KL_NS_PER_MS;

    return left > 0 ? left : 1;
}

/* Range the leader of an election into *r (cleared by the caller). */
static int sync_leader(k8slease_client *client, const kl__etcd_prefix *p, const char *what,
                       int64_t deadline, kl__etcd_range *r)
{
    char *body = kl__etcd_encode_leader_range(p), *resp = NULL;
    size_t len = 0;
    int err;

    if (!body)
        return kl__error_wrap(K8SLEASE_ENOMEM, "%s", what);
    if ((err = kl__etcd_sync(kl__etcd_of(client), "/v3/kv/range", body, ms_left(deadline), &resp,
                             &len)) < 0 ||
        (err = kl__etcd_parse_range(r, resp, len)) < 0)
        kl__error_wrap(err, "%s", what);
    kl__free(resp);
    kl__free(body);
    return err;
}

static int get_holder(k8slease_client *client, const char *name, int64_t timeout_ms,
                      k8slease_holder **out)
{
    int64_t deadline = deadline_after(timeout_ms);
    kl__etcd_range r = {0};
    kl__etcd_lease ttl = {0};
    k8slease_holder *h = NULL;
    char what[512], *body = NULL, *resp = NULL;
    const kl__etcd_kv *kv;
    size_t len = 0;
    kl__etcd_prefix p;
    int err;

    if ((err = kl__etcd_check_name("election name", name)) < 0)
        return err;
    snprintf(what, sizeof(what), "get etcd election %s", name);
    kl__etcd_prefix_set(&p, name);
    if ((err = sync_leader(client, &p, what, deadline, &r)) < 0)
        goto out;
    if (r.n_kvs == 0) {
        err = kl__error_set(K8SLEASE_ENOTFOUND, "%s: no candidate", what);
        goto out;
    }
    kv = &r.kvs[0];
    if (!(h = kl__calloc(1, sizeof(*h))) || !(h->identity = kl__strdup(kv->value)) ||
        !(h->resource_version = kl__sprintf("%lld", (long long)kv->mod_revision)) ||
        !(h->strategy = kl__strdup("")) || !(h->preferred_holder = kl__strdup(""))) {
        err = kl__error_set(K8SLEASE_ENOMEM, "out of memory");
        goto out;
    }
    h->epoch = kv->create_revision;
    /* The TTL is a detail: a failure to read it leaves 0 (as "absent"). */
    if (kv->lease != 0 && (body = kl__etcd_encode_timetolive(kv->lease, 0)) &&
        kl__etcd_sync(kl__etcd_of(client), "/v3/lease/timetolive", body, ms_left(deadline), &resp,
                      &len) == 0 &&
        kl__etcd_parse_timetolive(&ttl, resp, len) == 0)
        h->lease_duration_s = ttl.granted_ttl > 0 ? ttl.granted_ttl : 0;
    *out = h;
    h = NULL;
    err = 0;
out:
    k8slease_holder_free(h);
    kl__etcd_range_clear(&r);
    kl__free(body);
    kl__free(resp);
    return err;
}

static int release(k8slease_client *client, const char *name, const char *identity, int force,
                   int64_t timeout_ms)
{
    int64_t deadline = deadline_after(timeout_ms);
    kl__etcd_range r = {0};
    char what[512], *body = NULL, *resp = NULL;
    const char *path;
    const kl__etcd_kv *kv;
    size_t len = 0;
    kl__etcd_prefix p;
    int err;

    if ((err = kl__etcd_check_name("election name", name)) < 0)
        return err;
    if (!identity[0] && !force)
        return kl__error_set(K8SLEASE_EINVAL, "identity is empty");
    snprintf(what, sizeof(what), "release etcd election %s", name);
    kl__etcd_prefix_set(&p, name);
    if ((err = sync_leader(client, &p, what, deadline, &r)) < 0)
        goto out;
    if (r.n_kvs == 0)
        goto out; /* nobody leads */
    kv = &r.kvs[0];
    /* Only the leader's key is the "holder": a candidate further back holds
     * nothing to release, as a Lease has one holder. */
    if (!force && (kv->value_len != strlen(identity) || strcmp(kv->value, identity) != 0)) {
        err = kl__error_set(K8SLEASE_ECONFLICT,
                            "%s: led by \"%.200s\", not \"%.200s\" (force to release anyway)", what,
                            kv->value, identity);
        goto out;
    }
    /* Revoking the lease deletes the key and ends that candidate's session
     * (its keepalives then say the lease is gone); a key without a lease
     * (put by hand) is deleted if it is still that key. */
    if (kv->lease != 0) {
        path = "/v3/lease/revoke";
        body = kl__etcd_encode_lease_id(kv->lease);
    } else {
        path = "/v3/kv/txn";
        body = kl__etcd_encode_txn_delete(kv->key, kv->key_len, kv->create_revision);
    }
    if (!body) {
        err = kl__error_wrap(K8SLEASE_ENOMEM, "%s", what);
        goto out;
    }
    err = kl__etcd_sync(kl__etcd_of(client), path, body, ms_left(deadline), &resp, &len);
    if (err == K8SLEASE_ENOTFOUND) {
        err = 0; /* the lease expired in between: released all the same */
    } else if (err < 0) {
        kl__error_wrap(err, "%s", what);
    } else {
        kl__log_printf(&client->log, K8SLEASE_LOG_INFO, "%s: released \"%.200s\" (epoch %lld)",
                       what, kv->value, (long long)kv->create_revision);
    }
out:
    kl__etcd_range_clear(&r);
    kl__free(body);
    kl__free(resp);
    return err;
}

/* ---- The backend (core/backend.h) ---- */

int kl__etcd_check_ns(const char *fn, const char *ns)
{
    if (ns)
        return kl__error_set(K8SLEASE_EINVAL,
                             "%s: ns must be NULL with the etcd backend (got \"%s\")", fn, ns);
    return 0;
}

static int check_etcd_file(const char *field, const char *path)
{
    if (path && !path[0])
        return kl__error_set(K8SLEASE_EINVAL, "k8slease_client_options.%s is empty", field);
    return 0;
}

/* etcd: a rest config for the loop (first endpoint, TLS files), the conn
 * (the client's state). */
static int client_init(k8slease_client *c, const k8slease_client_options *opts)
{
    kl__etcd_conn *conn = NULL;
    char **endpoints = NULL;
    size_t n = 0;
    int err;

    if (opts->crash_failover)
        return kl__error_set(K8SLEASE_EINVAL, "k8slease_client_options: crash_failover is "
                                              "Kubernetes only (a Pod's container statuses)");
    if (opts->kubeconfig || opts->context)
        return kl__error_set(K8SLEASE_EINVAL, "k8slease_client_options: kubeconfig and context "
                                              "must be NULL with the etcd backend");
    if (!opts->etcd_endpoints)
        return kl__error_set(K8SLEASE_EINVAL, "k8slease_client_options.etcd_endpoints is NULL "
                                              "(required with the etcd backend)");
    if ((err = check_etcd_file("etcd_ca_file", opts->etcd_ca_file)) < 0 ||
        (err = check_etcd_file("etcd_cert_file", opts->etcd_cert_file)) < 0 ||
        (err = check_etcd_file("etcd_key_file", opts->etcd_key_file)) < 0)
        return err;
    if (!opts->etcd_cert_file != !opts->etcd_key_file)
        return kl__error_set(K8SLEASE_EINVAL, "k8slease_client_options: etcd_cert_file and "
                                              "etcd_key_file go together (one is NULL)");
    if (opts->etcd_username && !opts->etcd_username[0])
        return kl__error_set(K8SLEASE_EINVAL, "k8slease_client_options.etcd_username is empty");
    if (!opts->etcd_username != !opts->etcd_password)
        return kl__error_set(K8SLEASE_EINVAL, "k8slease_client_options: etcd_username and "
                                              "etcd_password go together (one is NULL)");
    if ((err = kl__etcd_endpoints_parse(opts->etcd_endpoints, &endpoints, &n)) < 0)
        return err;
    if (!(c->cfg = kl__calloc(1, sizeof(*c->cfg))) ||
        !(c->cfg->server = kl__strdup(endpoints[0])) ||
        !(c->cfg->source = kl__strdup("etcd_endpoints")) || !(c->cfg->ns = kl__strdup("")) ||
        (opts->etcd_ca_file && !(c->cfg->ca_file = kl__strdup(opts->etcd_ca_file))) ||
        (opts->etcd_cert_file && !(c->cfg->cert_file = kl__strdup(opts->etcd_cert_file))) ||
        (opts->etcd_key_file && !(c->cfg->key_file = kl__strdup(opts->etcd_key_file)))) {
        err = kl__error_set(K8SLEASE_ENOMEM, "out of memory");
        goto out;
    }
    kl__log_printf(&c->log, K8SLEASE_LOG_INFO, "using etcd (%zu endpoint%s, first %s)", n,
                   n == 1 ? "" : "s", endpoints[0]);
    if ((err = kl__loop_new(&c->loop, c->cfg, &c->log, opts->user_agent)) < 0)
        goto out;
    err = kl__etcd_conn_new(&conn, c->loop, &c->log, endpoints, n, opts->etcd_username,
                            opts->etcd_password);
    c->state = conn;
out:
    kl__etcd_endpoints_free(endpoints);
    return err;
}

static void client_free(k8slease_client *c)
{
    kl__etcd_conn_free(kl__etcd_of(c));
    c->state = NULL;
}

static int holder_get(k8slease_client *client, const char *ns, const char *name, int64_t timeout_ms,
                      k8slease_holder **out)
{
    int err;

    return (err = kl__etcd_check_ns("k8slease_holder_get", ns)) < 0
               ? err
               : get_holder(client, name, timeout_ms, out);
}

static int lease_release(k8slease_client *client, const char *ns, const char *name,
                         const char *identity, int force, int64_t timeout_ms)
{
    int err;

    return (err = kl__etcd_check_ns("k8slease_lease_release", ns)) < 0
               ? err
               : release(client, name, identity, force, timeout_ms);
}

static int watch_start(void **out, k8slease_watch *w, k8slease_client *client, const char *ns,
                       const char *name, char *what, size_t what_size, kl__holder_report_cb report)
{
    kl__etcd_watch *ew = NULL;
    int err;

    if ((err = kl__etcd_check_ns("k8slease_watch_start", ns)) < 0)
        return err;
    /* the etcd watch checks the election name and reports through w */
    snprintf(what, what_size, "etcd election %s", name ? name : "(null)");
    if ((err = kl__etcd_watch_new(&ew, client, name, report, w)) < 0)
        return err;
    *out = ew;
    return 0;
}

static void watch_cancel(void *w)
{
    kl__etcd_watch_cancel(w);
}

static void watch_free(void *w)
{
    kl__etcd_watch_free(w);
}

const kl__backend kl__etcd_backend = {
    K8SLEASE_BACKEND_ETCD, client_init, NULL,         client_free, holder_get,
    lease_release,         watch_start, watch_cancel, watch_free,  &kl__etcd_elector_backend};
