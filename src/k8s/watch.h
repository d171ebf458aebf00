/* Holder watch of a Lease, behind kl__k8s_backend's watch calls
 * (core/backend.h documents them). */
#ifndef KL_K8S_WATCH_H
#define KL_K8S_WATCH_H

#include <stddef.h>

#include "core/backend.h"

int kl__k8s_watch_start(void **out, k8slease_watch *pub, k8slease_client *client, const char *ns,
                        const char *name, char *what, size_t what_size,
                        kl__holder_report_cb report);
void kl__k8s_watch_cancel(void *w);
void kl__k8s_watch_free(void *w);

#endif
