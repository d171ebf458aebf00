/* Rest configuration: copying and freeing it. Filling it is the backends'
 * part (k8s/kubeconfig.c, etcd/client.c). */
#include "core/restconfig.h"

#include "core/common.h"

static char **strv_dup(char *const *v)
{
    size_t n = 0, i;
    char **out;

    while (v && v[n])
        n++;
    if (!(out = kl__calloc(n + 1, sizeof(*out))))
        return NULL;
    for (i = 0; i < n; i++) {
        if (!(out[i] = kl__strdup(v[i]))) {
            while (i > 0)
                kl__free(out[--i]);
            kl__free(out);
            return NULL;
        }
    }
    return out;
}

static void strv_free(char **v)
{
    size_t i;

    for (i = 0; v && v[i]; i++)
        kl__free(v[i]);
    kl__free(v);
}

void kl__exec_config_free(kl__exec_config *e)
{
    if (!e)
        return;
    kl__free(e->api_version);
    kl__free(e->command);
    strv_free(e->args);
    strv_free(e->env);
    kl__free(e->config_dir);
    kl__free(e);
}

kl__exec_config *kl__exec_config_dup(const kl__exec_config *src)
{
    kl__exec_config *e = kl__calloc(1, sizeof(*e));

    if (!e)
        return NULL;
    e->api_version = src->api_version ? kl__strdup(src->api_version) : NULL;
    e->command = src->command ? kl__strdup(src->command) : NULL;
    e->args = strv_dup(src->args);
    e->env = strv_dup(src->env);
    e->config_dir = src->config_dir ? kl__strdup(src->config_dir) : NULL;
    if ((src->api_version && !e->api_version) || (src->command && !e->command) || !e->args ||
        !e->env || (src->config_dir && !e->config_dir)) {
        kl__exec_config_free(e);
        return NULL;
    }
    return e;
}

void kl__restconfig_free(kl__restconfig *cfg)
{
    if (!cfg)
        return;
    kl__free(cfg->server);
    kl__free(cfg->source);
    kl__free(cfg->ns);
    kl__free(cfg->ca_file);
    kl__free(cfg->ca_pem);
    kl__free(cfg->tls_server_name);
    kl__free(cfg->cert_file);
    kl__free(cfg->cert_pem);
    kl__free(cfg->key_file);
    kl__free(cfg->key_pem);
    kl__free(cfg->token);
    kl__free(cfg->token_file);
    kl__exec_config_free(cfg->exec);
    kl__free(cfg);
}
