/* STUB: being written (the etcd elector driver). */
#include "elector_impl.h"

static int create(k8slease_elector **out, k8slease_client *client,
                  const k8slease_elector_options *opts)
{
    (void)out, (void)client, (void)opts;
    return kl__error_set(K8SLEASE_EINVAL, "etcd backend not built yet");
}
static void nop(k8slease_elector *e)
{
    (void)e;
}
static void nop2(k8slease_elector *e, int r)
{
    (void)e, (void)r;
}
const kl__elector_backend kl__etcd_elector_backend = {create, nop, nop2, nop, nop};
