/* `elect --label-pod NS/POD --label KEY=VALUE`: keeps a label on a Pod
 * while leader, from a thread of its own (the library's callbacks must not
 * block, and an API outage must not stall the election): the main thread
 * says what it wants, the thread PATCHes until the Pod agrees, retrying
 * with backoff. It starts by removing the label: a leader that crashed may
 * have left it behind. */
#ifndef K8SLEASE_CLI_LABELER_H
#define K8SLEASE_CLI_LABELER_H

#include <stdint.h>

#include "k8slease.h"

typedef struct cli_labeler cli_labeler;

/* ns NULL: the client's namespace. Strings are copied. 0, or -1 (printed). */
int cli_labeler_start(cli_labeler **out, k8slease_client *client, const char *ns, const char *pod,
                      const char *key, const char *value);

/* 1: the label should be set, 0: removed. Never blocks. Main thread. */
void cli_labeler_want(cli_labeler *l, int set);

/* Remove the label and wait up to timeout_ms for the Pod to agree. Main
 * thread. Accepts NULL. */
void cli_labeler_remove(cli_labeler *l, int64_t timeout_ms);

/* Remove the label, waiting up to timeout_ms for the Pod to agree, then
 * stop the thread and free. Accepts NULL. */
void cli_labeler_stop(cli_labeler *l, int64_t timeout_ms);

#endif
