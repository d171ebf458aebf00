/* The client: options, the backend (core/backend.h) and its loop thread; the
 * public calls that every backend serves go through client->be. */
#include "core/client.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/elector.h"

/* The options of a version 1 caller end before the backend field. */
#define CLIENT_OPTIONS_V1_SIZE offsetof(k8slease_client_options, backend)
#define CLIENT_OPTIONS_V2_SIZE offsetof(k8slease_client_options, crash_failover)

static int client_new(k8slease_client **out, const k8slease_client_options *opts,
                      kl__log_event_cb log_event_cb)
{
    k8slease_client_options o = K8SLEASE_CLIENT_OPTIONS_INIT;
    k8slease_client *c = NULL;
    int err;

    if (!out)
        return kl__error_set(K8SLEASE_EINVAL, "k8slease_client_new: out is NULL");
    *out = NULL;
    if (opts && opts->version == 1) {
        memcpy(&o, opts, CLIENT_OPTIONS_V1_SIZE); /* the rest keeps the defaults */
    } else if (opts && opts->version == 2) {
        memcpy(&o, opts, CLIENT_OPTIONS_V2_SIZE);
    } else if (opts && opts->version == K8SLEASE_CLIENT_OPTIONS_VERSION) {
        o = *opts;
    } else if (opts) {
        return kl__error_set(K8SLEASE_EINVAL,
                             "k8slease_client_options.version is %u, expected 1 to %u (use "
                             "K8SLEASE_CLIENT_OPTIONS_INIT)",
                             opts->version, K8SLEASE_CLIENT_OPTIONS_VERSION);
    }
    if (o.backend != K8SLEASE_BACKEND_K8S && o.backend != K8SLEASE_BACKEND_ETCD)
        return kl__error_set(K8SLEASE_EINVAL,
                             "k8slease_client_options.backend is %d, expected "
                             "K8SLEASE_BACKEND_K8S or K8SLEASE_BACKEND_ETCD",
                             (int)o.backend);

    c = kl__calloc(1, sizeof(*c));
    if (!c)
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    c->backend = o.backend;
    c->log.cb = o.log_cb;
    c->log.user_data = o.log_user_data;
    c->log.level = o.log_level;
    c->log.event_cb = log_event_cb;
    c->be = kl__backend_get(o.backend);
    err = c->be->client_init(c, &o);
    if (err < 0)
        goto out;
    *out = c;
    c = NULL;
out:
    k8slease_client_free(c);
    return err;
}

K8SLEASE_API int k8slease_client_new(k8slease_client **out, const k8slease_client_options *opts)
{
    return client_new(out, opts, NULL);
}

int kl__client_new_logged(k8slease_client **out, const k8slease_client_options *opts,
                          kl__log_event_cb log_event_cb)
{
    return client_new(out, opts, log_event_cb);
}

static void reap_retired(void *arg)
{
    kl__elector_reap_retired(arg);
}

K8SLEASE_API void k8slease_client_free(k8slease_client *client)
{
    if (!client)
        return;
    if (client->loop && kl__loop_on_thread(client->loop)) {
        /* A callback of the client: its loop thread cannot stop and join
         * itself, and what the loop runs would be freed from under it.
         * Nothing is freed; the log goes quiet, since a caller that
         * thinks the client gone may free what its callback uses. */
        kl__error_set(K8SLEASE_ESTATE, "k8slease_client_free: called from a callback (the "
                                       "client's loop thread): not freed; free it from another "
                                       "thread");
        kl__log_printf(&client->log, K8SLEASE_LOG_ERROR, "%s", kl__error_get());
        client->log.cb = NULL;
        client->log.event_cb = NULL;
        return;
    }
    /* The electors the seed ABI gave up while they released: cut short. */
    if (client->loop)
        kl__loop_call(client->loop, reap_retired, client);
    /* Streams are loop objects: stopped on the loop, before it goes. */
    if (client->loop && client->be->client_shutdown)
        client->be->client_shutdown(client);
    kl__loop_free(client->loop);
    client->be->client_free(client);
    kl__restconfig_free(client->cfg);
    kl__free(client);
}

K8SLEASE_API k8slease_backend k8slease_client_backend(const k8slease_client *client)
{
    return client ? client->backend : K8SLEASE_BACKEND_K8S;
}

K8SLEASE_API const char *k8slease_client_namespace(const k8slease_client *client)
{
    return client ? client->cfg->ns : NULL;
}

K8SLEASE_API const char *k8slease_client_server(const k8slease_client *client)
{
    return client ? client->cfg->server : NULL;
}

K8SLEASE_API void k8slease_holder_free(k8slease_holder *holder)
{
    if (!holder)
        return;
    kl__free(holder->identity);
    kl__free(holder->resource_version);
    kl__free(holder->strategy);
    kl__free(holder->preferred_holder);
    kl__free(holder);
}

K8SLEASE_API int k8slease_holder_get(k8slease_client *client, const char *ns, const char *name,
                                     int64_t timeout_ms, k8slease_holder **out)
{
    if (!client || !out)
        return kl__error_set(K8SLEASE_EINVAL, "k8slease_holder_get: client or out is NULL");
    *out = NULL;
    return client->be->holder_get(client, ns, name, timeout_ms, out);
}

K8SLEASE_API int k8slease_lease_release(k8slease_client *client, const char *ns, const char *name,
                                        const char *identity, int force, int64_t timeout_ms)
{
    if (!client || !identity)
        return kl__error_set(K8SLEASE_EINVAL, "k8slease_lease_release: client or identity is NULL");
    return client->be->lease_release(client, ns, name, identity, force, timeout_ms);
}
