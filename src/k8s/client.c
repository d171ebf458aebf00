/* The Kubernetes side of a client (kl__k8s_backend): the kubeconfig chain,
 * the shared Lease and Pod watches (k8s/informer.c), and the one-shot calls
 * of the public API (holder, release, pod labels). */
#include "k8s/client.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/backend.h"
#include "core/client.h"
#include "core/clock.h"
#include "core/elector.h"
#include "k8s/crash.h"
#include "core/timings.h"
#include "k8s/handoff.h"
#include "k8s/holders.h"
#include "k8s/pod.h"
#include "k8s/api.h"
#include "k8s/codec.h"
#include "k8s/informer.h"
#include "k8s/kubeconfig.h"
#include "k8s/watch.h"

#define DEFAULT_SYNC_TIMEOUT_MS 10000

/* Kubernetes: the kubeconfig chain; the loop; the shared watches (the Pod
 * informer sends nothing until something follows a Pod: crash failover). */
static int client_init(k8slease_client *c, const k8slease_client_options *opts)
{
    kl__k8s_client *k;
    int err;

    if (opts->etcd_endpoints || opts->etcd_ca_file || opts->etcd_cert_file || opts->etcd_key_file ||
        opts->etcd_username || opts->etcd_password)
        return kl__error_set(K8SLEASE_EINVAL, "k8slease_client_options: etcd_* options are set "
                                              "but backend is K8SLEASE_BACKEND_K8S");
    if (opts->context && !opts->context[0])
        return kl__error_set(K8SLEASE_EINVAL, "k8slease_client_options.context is empty");
    if (!(k = kl__calloc(1, sizeof(*k))))
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    c->state = k;
    k->crash_failover = opts->crash_failover != 0;
    if (opts->kubeconfig)
        err = kl__restconfig_from_kubeconfig(&c->cfg, opts->kubeconfig, opts->context);
    else
        err = kl__restconfig_load(&c->cfg, NULL, opts->context);
    if (err < 0)
        return err;
    kl__log_printf(&c->log, K8SLEASE_LOG_INFO, "using %s (server %s, namespace %s)", c->cfg->source,
                   c->cfg->server, c->cfg->ns);
    if (strncmp(c->cfg->server, "http://", 7) == 0 &&
        (c->cfg->token || c->cfg->token_file || c->cfg->exec))
        kl__log_printf(&c->log, K8SLEASE_LOG_WARN,
                       "%s: server %s is plain http://: its bearer token goes unencrypted",
                       c->cfg->source, c->cfg->server);
    if ((err = kl__loop_new(&c->loop, c->cfg, &c->log, opts->user_agent)) < 0)
        return err;
    if ((err = kl__informer_new(&k->informer, c->loop, &c->log)) < 0)
        return err;
    if ((err = kl__informer_new_pods(&k->pod_informer, c->loop, &c->log)) < 0)
        return err;
    return kl__holders_new(&k->holders, c->loop, k->informer, k->pod_informer, k->crash_failover,
                           &c->log);
}

static void shutdown_informers(void *arg)
{
    kl__k8s_client *k = arg;

    kl__holders_shutdown(k->holders);
    kl__informer_shutdown(k->informer);
    kl__informer_shutdown(k->pod_informer);
}

static void client_shutdown(k8slease_client *c)
{
    kl__k8s_client *k = kl__k8s_of(c);

    if (k && (k->informer || k->pod_informer))
        kl__loop_call(c->loop, shutdown_informers, k);
}

static void client_free(k8slease_client *c)
{
    kl__k8s_client *k = kl__k8s_of(c);

    if (!k)
        return;
    kl__holders_free(k->holders);
    kl__informer_free(k->informer);
    kl__informer_free(k->pod_informer);
    kl__free(k);
    c->state = NULL;
}

static const char *client_ns(const k8slease_client *client, const char *ns)
{
    return ns ? ns : client->cfg->ns;
}

/* GET the Lease at path and decode it (what names it in errors). */
static int get_lease(k8slease_client *client, const char *path, const char *what,
                     int64_t timeout_ms, kl__lease **out)
{
    kl__http_opts req = {0};
    kl__http_result res = {0};
    char *body = NULL;
    size_t body_len = 0;
    long status = 0;
    int err;

    *out = NULL;
    req.method = "GET";
    req.path = path;
    req.timeout_ms = timeout_ms;
    if ((err = kl__http_sync(client->loop, &req, &status, &body, &body_len)) < 0) {
        kl__error_wrap(err, "%s", what);
        goto out;
    }
    res.status = status;
    res.body = body;
    res.body_len = body_len;
    err = kl__lease_result(&res, what, out);
out:
    kl__free(body);
    return err;
}

#define GET_LEASE "get lease "

/* Crash failover: whether the kubelet reported the container instance of
 * the Lease's current term terminated (its record, then its Pod). A Pod
 * that cannot be read is no evidence. */
static int holder_ended(k8slease_client *client, const kl__log_about *about,
                        const char *crash_record, const char *identity, int64_t epoch,
                        int64_t timeout_ms)
{
    kl__crash_record r = {0};
    kl__http_opts req = {0};
    kl__pod *pod = NULL;
    char *path = NULL, *body = NULL;
    size_t body_len = 0;
    long status = 0;
    int ended = 0;

    if (!crash_record || kl__crash_record_parse(&r, crash_record) < 0)
        return 0;
    if (strcmp(r.holder, identity) != 0 || r.epoch != epoch)
        goto out;
    if (!(path = kl__sprintf("/api/v1/namespaces/%s/pods/%s", r.pod_ns, r.pod)))
        goto out;
    req.method = "GET";
    req.path = path;
    req.timeout_ms = timeout_ms;
    if (kl__http_sync(client->loop, &req, &status, &body, &body_len) < 0 || status != 200 ||
        kl__pod_parse(&pod, body, body_len) < 0) {
        kl__log_at(&client->log, K8SLEASE_LOG_DEBUG, about,
                   "crash failover: pod %s/%s not read (HTTP %ld): no evidence", r.pod_ns, r.pod,
                   status);
        goto out;
    }
    ended = kl__crash_evidence(&r, pod);
out:
    kl__pod_free(pod);
    kl__free(body);
    kl__free(path);
    kl__crash_record_clear(&r);
    return ended;
}

/* The Lease's state: from its watch (k8s/holders.h), else a GET. */
static int read_state(k8slease_client *client, const char *ns, const char *name, const char *what,
                      int64_t timeout_ms, kl__holder_state *out)
{
    kl__lease *lease = NULL;
    char *path = NULL;
    uint64_t ticket;
    int err;

    if ((err = kl__holders_lookup(kl__k8s_of(client)->holders, ns, name, out, &ticket)) != 0)
        return err < 0 ? err : 0;
    if (!(path = kl__lease_path(ns, name)))
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    err = get_lease(client, path, what, timeout_ms, &lease);
    if (err == 0)
        err = kl__holder_state_of(out, lease, kl__k8s_of(client)->crash_failover);
    if (err == 0 || err == K8SLEASE_ENOTFOUND)
        kl__holders_feed(kl__k8s_of(client)->holders, ns, name, ticket, err == 0 ? out : NULL);
    kl__lease_free(lease);
    kl__free(path);
    return err;
}

static int holder_get(k8slease_client *client, const char *ns, const char *name, int64_t timeout_ms,
                      k8slease_holder **out)
{
    kl__holder_state s = {0};
    k8slease_holder *h = NULL;
    char what[400];
    /* Its crash failover's lines: "lease NS/NAME: ...", about NS/NAME. */
    kl__log_about about = {what + strlen("get "), what + strlen(GET_LEASE), KL_LOG_ELECTION, NULL};
    int err;

    ns = client_ns(client, ns);
    if ((err = kl__check_namespace(ns)) < 0 || (err = kl__check_name("lease name", name)) < 0)
        return err;
    if (timeout_ms <= 0)
        timeout_ms = DEFAULT_SYNC_TIMEOUT_MS;
    snprintf(what, sizeof(what), GET_LEASE "%s/%s", ns, name);
    if ((err = read_state(client, ns, name, what, timeout_ms, &s)) < 0)
        goto out;
    if (s.absent) {
        /* Deleted, as the stream saw it: what a GET would say. */
        err = kl__error_set(K8SLEASE_ENOTFOUND,
                            "%s: HTTP 404 NotFound: leases.coordination.k8s.io "
                            "\"%s\" not found (from its watch)",
                            what, name);
        goto out;
    }
    if (!(h = kl__calloc(1, sizeof(*h)))) {
        err = kl__error_set(K8SLEASE_ENOMEM, "out of memory");
        goto out;
    }
    /* The strings move over. */
    h->identity = s.identity;
    h->resource_version = s.rv;
    h->strategy = s.strategy;
    h->preferred_holder = s.preferred_holder;
    s.identity = s.rv = s.strategy = s.preferred_holder = NULL;
    h->epoch = s.epoch;
    h->renew_time_us = s.renew_us;
    h->acquire_time_us = s.acquire_us;
    h->lease_duration_s = s.duration_s;
    /* As the seed: expired by renewTime + duration against our wall clock. */
    h->expired = h->identity[0] && h->renew_time_us &&
                 h->renew_time_us + h->lease_duration_s * 1000000 < kl__clock_wall_us();
    if (kl__k8s_of(client)->crash_failover && h->identity[0] && !h->expired &&
        (s.ended_known
             ? s.ended
             : holder_ended(client, &about, s.crash_record, h->identity, h->epoch, timeout_ms)))
        h->ended = h->expired = 1;
    *out = h;
    h = NULL;
out:
    k8slease_holder_free(h);
    kl__holder_state_clear(&s);
    return err;
}

/* A label value, also the name part of a key: at most 63 characters of
 * [A-Za-z0-9._-], starting and ending alphanumeric (or empty). */
static int is_label_value(const char *s)
{
    size_t n = strlen(s);

    if (n > 63)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');

        if (!alnum && (i == 0 || i == n - 1 || (c != '-' && c != '_' && c != '.')))
            return 0;
    }
    return 1;
}

static int check_label_key(const char *key)
{
    const char *slash;
    const char *name;

    if (!key || !key[0])
        return kl__error_set(K8SLEASE_EINVAL, "label key is empty");
    slash = strchr(key, '/');
    name = slash ? slash + 1 : key;
    if (slash) {
        char prefix[254];
        size_t n = (size_t)(slash - key);

        if (n == 0 || n >= sizeof(prefix))
            goto bad;
        memcpy(prefix, key, n);
        prefix[n] = '\0';
        if (kl__check_name("label key prefix", prefix) < 0)
            goto bad;
    }
    if (!name[0] || !is_label_value(name))
        goto bad;
    return 0;
bad:
    return kl__error_set(K8SLEASE_EINVAL,
                         "label key \"%.80s\": must be [prefix/]name with name at most 63 "
                         "characters of [A-Za-z0-9._-] starting and ending alphanumeric",
                         key);
}

static int check_label_value(const char *value)
{
    if (is_label_value(value))
        return 0;
    return kl__error_set(K8SLEASE_EINVAL,
                         "label value \"%.80s\": must be at most 63 characters of [A-Za-z0-9._-] "
                         "starting and ending alphanumeric",
                         value);
}

/* A JSON merge patch of PATH (a reference taken on PATCH; PATH freed),
 * synchronous, 200 expected; WHAT names it in errors. */
static int merge_patch(k8slease_client *client, char *path, json_t *patch, const char *what)
{
    kl__http_opts req = {0};
    char *body = NULL, *resp = NULL;
    size_t resp_len = 0;
    long status = 0;
    int err = 0;

    body = patch ? kl__json_dump(patch) : NULL;
    if (!patch || !path || !body) {
        err = kl__error_set(K8SLEASE_ENOMEM, "out of memory");
        goto out;
    }
    req.method = "PATCH";
    req.path = path;
    req.content_type = "application/merge-patch+json";
    req.body = body;
    req.body_len = strlen(body);
    req.timeout_ms = DEFAULT_SYNC_TIMEOUT_MS;
    if ((err = kl__http_sync(client->loop, &req, &status, &resp, &resp_len)) < 0) {
        kl__error_wrap(err, "%s", what);
        goto out;
    }
    if (status != 200)
        err = kl__http_status_error(status, resp, resp_len, what);
out:
    kl__free(resp);
    kl__free(body);
    kl__free(path);
    json_decref(patch);
    return err;
}

K8SLEASE_API int k8slease_pod_label(k8slease_client *client, const char *ns, const char *pod,
                                    const char *key, const char *value)
{
    char what[400];
    int err;

    if (!client)
        return kl__error_set(K8SLEASE_EINVAL, "k8slease_pod_label: client is NULL");
    if (client->backend == K8SLEASE_BACKEND_ETCD)
        return kl__error_set(K8SLEASE_ESTATE,
                             "k8slease_pod_label: pod labels need the Kubernetes backend");
    ns = client_ns(client, ns);
    if ((err = kl__check_namespace(ns)) < 0 || (err = kl__check_name("pod name", pod)) < 0 ||
        (err = check_label_key(key)) < 0 || (value && (err = check_label_value(value)) < 0))
        return err;
    snprintf(what, sizeof(what), "%s label %s on pod %s/%s", value ? "set" : "remove", key, ns,
             pod);
    return merge_patch(client, kl__sprintf("/api/v1/namespaces/%s/pods/%s", ns, pod),
                       json_pack("{s:{s:{s:o}}}", "metadata", "labels", key,
                                 value ? json_string(value) : json_null()),
                       what);
}

K8SLEASE_API int k8slease_lease_handoff(k8slease_client *client, const char *ns, const char *name,
                                        const char *to)
{
    char what[400];
    int err;

    if (!client || !name)
        return kl__error_set(K8SLEASE_EINVAL, "k8slease_lease_handoff: client or name is NULL");
    if (client->backend == K8SLEASE_BACKEND_ETCD)
        return kl__error_set(K8SLEASE_EINVAL,
                             "k8slease_lease_handoff: handoff is for the Kubernetes backend");
    ns = client_ns(client, ns);
    if ((err = kl__check_namespace(ns)) < 0 || (err = kl__check_name("lease name", name)) < 0)
        return err;
    if (to && kl__identity_check(to) < 0)
        return kl__error_wrap(K8SLEASE_EINVAL, "k8slease_lease_handoff: to");
    snprintf(what, sizeof(what), "request a handoff of lease %s/%s", ns, name);
    /* A merge patch of the annotation only, whatever the leader writes. */
    return merge_patch(
        client, kl__lease_path(ns, name),
        json_pack("{s:{s:{s:s}}}", "metadata", "annotations", KL_HANDOFF_REQUEST, to ? to : ""),
        what);
}

/* One GET + PUT round of k8slease_lease_release: 0 done, K8SLEASE_ECONFLICT
 * on a 409 of the PUT (*retry set), or another error. */
static int release_once(k8slease_client *client, const char *path, const char *what,
                        const char *identity, int force, int64_t timeout_ms, int *retry)
{
    kl__http_opts req = {0};
    kl__lease *lease = NULL;
    kl__lease_spec spec;
    char *body = NULL, *put = NULL;
    size_t body_len = 0;
    long status = 0;
    int err;

    *retry = 0;
    if ((err = get_lease(client, path, what, timeout_ms, &lease)) < 0)
        goto out;
    if (!lease->spec.holder || !lease->spec.holder[0])
        goto out; /* nobody holds it */
    if (strcmp(lease->spec.holder, identity) != 0 && !force) {
        err = kl__error_set(K8SLEASE_ECONFLICT,
                            "%s: held by \"%s\", not \"%s\" (force to release anyway)", what,
                            lease->spec.holder, identity);
        goto out;
    }
    spec = lease->spec;
    spec.holder = "";
    spec.duration_s = 1;
    spec.acquire_us = spec.renew_us = kl__clock_wall_us();
    if (!(put = kl__lease_encode_update(lease, &spec))) {
        err = kl__error_set(K8SLEASE_ENOMEM, "%s: out of memory", what);
        goto out;
    }
    req.method = "PUT";
    req.path = path;
    req.timeout_ms = timeout_ms;
    req.content_type = "application/json";
    req.body = put;
    req.body_len = strlen(put);
    if ((err = kl__http_sync(client->loop, &req, &status, &body, &body_len)) < 0) {
        kl__error_wrap(err, "%s", what);
        goto out;
    }
    if (status != 200 && status != 201) {
        err = kl__http_status_error(status, body, body_len, what);
        *retry = err == K8SLEASE_ECONFLICT;
    } else {
        kl__lease *written = NULL;

        /* A holder read of this client after it sees the release. */
        if (kl__lease_parse(&written, body, body_len) == 0)
            kl__holders_note(kl__k8s_of(client)->holders, written);
        kl__lease_free(written);
    }
out:
    kl__free(put);
    kl__free(body);
    kl__lease_free(lease);
    return err;
}

static int lease_release(k8slease_client *client, const char *ns, const char *name,
                         const char *identity, int force, int64_t timeout_ms)
{
    char what[400];
    char *path = NULL;
    int err, retry = 1;

    ns = client_ns(client, ns);
    if ((err = kl__check_namespace(ns)) < 0 || (err = kl__check_name("lease name", name)) < 0)
        return err;
    if (!identity[0] && !force)
        return kl__error_set(K8SLEASE_EINVAL, "identity is empty");
    snprintf(what, sizeof(what), "release lease %s/%s", ns, name);
    if (!(path = kl__lease_path(ns, name)))
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    /* A 409 means the Lease changed between our GET and PUT: look again. */
    for (int i = 0; i < 5 && retry; i++)
        err = release_once(client, path, what, identity, force,
                           timeout_ms > 0 ? timeout_ms : DEFAULT_SYNC_TIMEOUT_MS, &retry);
    kl__free(path);
    return err;
}

const kl__backend kl__k8s_backend = {K8SLEASE_BACKEND_K8S, client_init,
                                     client_shutdown,      client_free,
                                     holder_get,           lease_release,
                                     kl__k8s_watch_start,  kl__k8s_watch_cancel,
                                     kl__k8s_watch_free,   &kl__k8s_elector_backend};
