/* The Kubernetes side of a client: kl__k8s_backend (core/backend.h). */
#ifndef KL_K8S_CLIENT_H
#define KL_K8S_CLIENT_H

#include "core/backend.h"
#include "core/elector.h"

extern const kl__backend kl__k8s_backend;
/* The elector (k8s/driver.c). */
extern const kl__elector_backend kl__k8s_elector_backend;

#endif
