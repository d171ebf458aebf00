/* The etcd backend (kl__etcd_backend, core/backend.h) and the state it
 * keeps behind k8slease_client.state: its conn (etcd/conn.h, every etcd
 * request of the client). The elector is in etcd/driver.c, behind
 * kl__etcd_elector_backend; the holder watch in etcd/watch.c. */
#ifndef KL_ETCD_CLIENT_H
#define KL_ETCD_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "core/backend.h"
#include "core/client.h"
#include "core/common.h"
#include "etcd/conn.h"

/* The backend (core/backend.h) and its elector (etcd/driver.c). */
extern const kl__backend kl__etcd_backend;
extern const kl__elector_backend kl__etcd_elector_backend;

/* The state of c, a client of the etcd backend: its conn. */
static inline kl__etcd_conn *kl__etcd_of(const k8slease_client *c)
{
    return (kl__etcd_conn *)c->state;
}

/* With etcd, ns must be NULL: "<fn>: ns must be NULL with the etcd
 * backend". 0 or K8SLEASE_EINVAL. */
int kl__etcd_check_ns(const char *fn, const char *ns);

/* Check an election name: non-empty, no NUL (by construction), at most
 * KL_ETCD_NAME_MAX bytes (k8slease.h; KL_EE_PREFIX_MAX leaves more room).
 * what names the argument. */
int kl__etcd_check_name(const char *what, const char *name);

#endif
