/* The holder watch of an etcd election (k8slease_watch_start with the
 * etcd backend). */
#ifndef KL_ETCD_WATCH_H
#define KL_ETCD_WATCH_H

#include <stdint.h>

#include "core/common.h"

typedef struct kl__etcd_watch kl__etcd_watch;

/* Holder watch of an election: report(arg, identity, epoch) on the loop
 * thread with the current leader first, then at every change; "" and -1
 * when there is no candidate. Reconnects by itself until cancelled.
 * kl__etcd_watch_new: any thread; checks name, posts the start to the
 * loop. cancel: loop thread, nothing is reported afterwards. free: after
 * cancel, any thread. */
typedef void (*kl__etcd_report_cb)(void *arg, const char *identity, int64_t epoch);
int kl__etcd_watch_new(kl__etcd_watch **out, k8slease_client *client, const char *name,
                       kl__etcd_report_cb report, void *arg);
void kl__etcd_watch_cancel(kl__etcd_watch *w);
void kl__etcd_watch_free(kl__etcd_watch *w);

#endif
