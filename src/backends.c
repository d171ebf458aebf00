/* The backends a client can use: the one place that names them all, so the
 * core (src/core) reaches each through its kl__backend only. A table and not
 * a constructor per backend: with the static library, an object file that
 * only registers itself would be left out by the linker. */
#include "core/backend.h"
#include "etcd/client.h"
#include "k8s/client.h"

const kl__backend *kl__backend_get(k8slease_backend id)
{
    static const kl__backend *const all[] = {&kl__k8s_backend, &kl__etcd_backend};

    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        if (all[i]->id == id)
            return all[i];
    return NULL;
}
