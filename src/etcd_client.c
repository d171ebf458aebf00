/* STUB: being written (the etcd conn, holder, release, watch). */
#include "etcd_client.h"

#include "client.h"

int kl__etcd_endpoints_parse(const char *list, char ***out, size_t *n)
{
    (void)list;
    (void)out;
    (void)n;
    return kl__error_set(K8SLEASE_EINVAL, "etcd backend not built yet");
}
void kl__etcd_endpoints_free(char **endpoints)
{
    (void)endpoints;
}
int kl__etcd_conn_new(kl__etcd_conn **out, kl__loop *loop, const kl__log *log,
                      char *const *endpoints, size_t n, const char *username, const char *password)
{
    (void)out, (void)loop, (void)log, (void)endpoints, (void)n, (void)username, (void)password;
    return K8SLEASE_EINVAL;
}
void kl__etcd_conn_free(kl__etcd_conn *conn)
{
    (void)conn;
}
int kl__etcd_holder_get(k8slease_client *client, const char *name, int64_t timeout_ms,
                        k8slease_holder **out)
{
    (void)client, (void)name, (void)timeout_ms, (void)out;
    return K8SLEASE_EINVAL;
}
int kl__etcd_lease_release(k8slease_client *client, const char *name, const char *identity,
                           int force, int64_t timeout_ms)
{
    (void)client, (void)name, (void)identity, (void)force, (void)timeout_ms;
    return K8SLEASE_EINVAL;
}
int kl__etcd_watch_new(kl__etcd_watch **out, k8slease_client *client, const char *name,
                       kl__etcd_report_cb report, void *arg)
{
    (void)out, (void)client, (void)name, (void)report, (void)arg;
    return K8SLEASE_EINVAL;
}
void kl__etcd_watch_cancel(kl__etcd_watch *w)
{
    (void)w;
}
void kl__etcd_watch_free(kl__etcd_watch *w)
{
    (void)w;
}
