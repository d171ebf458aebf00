/* Rest configuration: freeing it. Filling it is the backends' part
 * (k8s/kubeconfig.c, etcd/client.c). */
#include "core/restconfig.h"

#include "core/common.h"

static void exec_config_free(kl__exec_config *exec)
{
    char **p;

    if (!exec)
        return;
    for (p = exec->args; p && *p; p++)
        kl__free(*p);
    for (p = exec->env; p && *p; p++)
        kl__free(*p);
    kl__free(exec->args);
    kl__free(exec->env);
    kl__free(exec->api_version);
    kl__free(exec->command);
    kl__free(exec->config_dir);
    kl__free(exec);
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
    exec_config_free(cfg->exec);
    kl__free(cfg);
}
