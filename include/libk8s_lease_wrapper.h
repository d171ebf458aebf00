/*
 * The C ABI of the Go c-shared library k8slease replaces
 * (libk8s_lease_wrapper.so, built from k8s_lease_wrapper.go with cgo),
 * kept unchanged so programs built against it link against k8slease
 * without a source change. Same signatures (non-const char*, long long*,
 * int return), same behaviour:
 *
 *  - Return 0 on success, -1 on error with *errMsg set to a malloc'ed
 *    message the caller free()s. K8sLeaseGetHolder returns 1 when the Lease
 *    does not exist. Holder strings are malloc'ed; the caller free()s them.
 *  - One process-wide client, created on first use from the in-cluster
 *    config, else $KUBECONFIG, else ~/.kube/config.
 *  - Elections and watches are keyed by "namespace/leaseName".
 *  - Crash failover (docs/semantics.md, "Crash failover"), since the
 *    signatures are fixed, from the environment: K8SLEASE_CRASH_FAILOVER=1
 *    with POD_NAME (and POD_NAMESPACE, default the Lease's namespace;
 *    K8SLEASE_CONTAINER, default the Pod's only container) from the
 *    Downward API. An election then records its container instance in
 *    the Lease and takes a Lease at once whose holder's container the
 *    kubelet reported terminated; K8sLeaseGetHolder reports such a holder
 *    as none, as an expired one, so a standby that polls it campaigns at
 *    once. Any other value than 1 or 0 makes K8sLeaseRunElection fail.
 *
 * Thread-safe: every function may be called from any thread. The holder
 * callback runs on the library's loop thread and must not block: from it,
 * only K8sLeaseCancelWatch and K8sLeaseCancelElection may be called. Its
 * holder string is freed after it returns.
 *
 * Log lines. As the Go library (client-go's klog), and unlike k8slease's
 * native API (k8slease.h, which never prints), these functions print what
 * happens on stderr: attempting to acquire, acquired (with the epoch),
 * a failed request with the server's message, lost leadership and why,
 * released, the watch falling back to polling. One line per event, each
 * written with a single write(2) to file descriptor 2 (lines of several
 * elections never mix), in a stable format:
 *
 *   TIME k8slease[PID] LEVEL NAMESPACE/NAME: MESSAGE
 *   2026-12-01T14:14:00.443463Z k8slease[19004] info default/x: released lease (epoch 3)
 *
 * TIME is UTC with microseconds; LEVEL error, warn, info or debug;
 * NAMESPACE/NAME the Lease ("-" for the process). A failed request is
 * logged once per distinct error, again only after a success. Tokens and
 * keys never appear. The environment variable K8SLEASE_LOG_LEVEL (off,
 * error, warn, info, debug; default info) sets the level; it is read once,
 * by K8sLeaseInit or by the first call when K8sLeaseInit is not called.
 * The lines are listed in docs/migration.md, "Log lines".
 */
#ifndef LIBK8S_LEASE_WRAPPER_H
#define LIBK8S_LEASE_WRAPPER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(K8SLEASE_BUILDING) && defined(__GNUC__)
#define K8SLEASE_COMPAT_API __attribute__((visibility("default")))
#else
#define K8SLEASE_COMPAT_API
#endif

/** holder is NULL (holderSize 0) when the Lease has no holder. */
typedef void (*holder_change_cb_t)(void *ctx, const char *holder, size_t holderSize,
                                   int64_t leaseTransitions);

/** Create the process-wide client (idempotent). Reads K8SLEASE_LOG_LEVEL
 * (see above) unless an earlier call did. */
K8SLEASE_COMPAT_API extern int K8sLeaseInit(char **errMsg);

/** Start campaigning for ns/leaseName (release on cancel). Fails if an
 * election for the same key is running; one whose term is over (the
 * moment K8sLeaseWaitLost returns) may be started again at once, even
 * while the old one still releases the Lease in the background: the old
 * one releases only its own term, never the new one's. Logs "attempting
 * to acquire leader lease", then what the election does. */
K8SLEASE_COMPAT_API extern int K8sLeaseRunElection(char *ns, char *leaseName, char *identity,
                                                   int leaseDurationSec, int renewDeadlineSec,
                                                   int retryPeriodSec, char **errMsg);

/** 0 and *leaseTransitions (the epoch) once elected; -1 if the election ended
 * first; -1 after timeoutSec, having cancelled the election (its term, if
 * it won one meanwhile, is over when this returns). */
K8SLEASE_COMPAT_API extern int K8sLeaseWaitElected(char *ns, char *leaseName, int timeoutSec,
                                                   long long int *leaseTransitions, char **errMsg);

/** Block until the election's term is over (or the election ended without
 * one): returns the moment leadership ends, when the renew deadline passes
 * without a successful renewal (even if the API server still has not
 * answered), another holder is seen, or the election is cancelled. A
 * release and requests still waiting for a server that does not answer
 * go on in the background (bounded by renewDeadlineSec) and are not
 * waited for. 0 at once if no election exists. */
K8SLEASE_COMPAT_API extern int K8sLeaseWaitLost(char *ns, char *leaseName, char **errMsg);

/** Cancel the election (releasing the Lease if leading). Idempotent; does
 * not wait: K8sLeaseWaitLost returns as soon as the term is over, before
 * the release is written; the release goes on in the background, and only
 * once every thread waiting in K8sLeaseWaitLost has returned (so the
 * program knows before another candidate can lead; one that has not
 * returned within renewDeadlineSec costs the release: the Lease expires). */
K8SLEASE_COMPAT_API extern int K8sLeaseCancelElection(char *ns, char *leaseName, char **errMsg);

/** Read the holder: *holderIdentity NULL when none or expired (renewTime +
 * leaseDurationSeconds in the past), or, with K8SLEASE_CRASH_FAILOVER=1,
 * when the kubelet reported the holder's container terminated (crash
 * failover: see below); *leaseTransitions always. Returns 1 when the Lease
 * does not exist. */
K8SLEASE_COMPAT_API extern int K8sLeaseGetHolder(char *ns, char *leaseName, char **holderIdentity,
                                                 long long int *leaseTransitions, char **errMsg);

/** Call callbackFunc(callbackCtx, holder, size, transitions) on every change
 * of holder or transitions (first with the current state). Fails if a
 * watch runs for the key or callbackFunc is NULL. */
K8SLEASE_COMPAT_API extern int K8sLeaseWatchHolder(char *ns, char *leaseName, void *callbackCtx,
                                                   holder_change_cb_t callbackFunc, char **errMsg);

/** Stop the watch; no callback runs after it returns (unless called from the
 * callback itself). Idempotent. */
K8SLEASE_COMPAT_API extern int K8sLeaseCancelWatch(char *ns, char *leaseName, char **errMsg);

/** Set metadata.labels[labelKey] = labelValue on the Pod ns/podName. */
K8SLEASE_COMPAT_API extern int K8sPatchPodLabel(char *ns, char *podName, char *labelKey,
                                                char *labelValue, char **errMsg);

/** Remove metadata.labels[labelKey] from the Pod ns/podName. */
K8SLEASE_COMPAT_API extern int K8sRemovePodLabel(char *ns, char *podName, char *labelKey,
                                                 char **errMsg);

#ifdef __cplusplus
}
#endif

#endif /* LIBK8S_LEASE_WRAPPER_H */
