/* A consumer of the Go library's C ABI, as its users wrote it: the
 * prototypes below are the ones cgo generated in libk8s_lease_wrapper.h.
 * Redeclaring them after our header fails to compile if any signature
 * differs; the program then links against libk8s_lease_wrapper only and
 * checks the behaviour that needs no API server. Compiled as C and C++. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libk8s_lease_wrapper.h"

#ifdef __cplusplus
extern "C" {
#endif
extern int K8sLeaseInit(char **errMsg);
extern int K8sLeaseRunElection(char *ns, char *leaseName, char *identity, int leaseDurationSec,
                               int renewDeadlineSec, int retryPeriodSec, char **errMsg);
extern int K8sLeaseWaitElected(char *ns, char *leaseName, int timeoutSec,
                               long long int *leaseTransitions, char **errMsg);
extern int K8sLeaseWaitLost(char *ns, char *leaseName, char **errMsg);
extern int K8sLeaseCancelElection(char *ns, char *leaseName, char **errMsg);
extern int K8sLeaseGetHolder(char *ns, char *leaseName, char **holderIdentity,
                             long long int *leaseTransitions, char **errMsg);
extern int K8sLeaseWatchHolder(char *ns, char *leaseName, void *callbackCtx,
                               holder_change_cb_t callbackFunc, char **errMsg);
extern int K8sLeaseCancelWatch(char *ns, char *leaseName, char **errMsg);
extern int K8sPatchPodLabel(char *ns, char *podName, char *labelKey, char *labelValue,
                            char **errMsg);
extern int K8sRemovePodLabel(char *ns, char *podName, char *labelKey, char **errMsg);
#ifdef __cplusplus
}
#endif

static int failures;

#define CHECK(cond, what)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL: %s (%s:%d)\n", what, __FILE__, __LINE__);                       \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

/* Expect -1 and a message containing needle; free it as the Go users did. */
static void expect_error(int rc, char *msg, const char *needle, const char *what)
{
    CHECK(rc == -1, what);
    CHECK(msg != NULL, what);
    if (msg) {
        if (!strstr(msg, needle))
            fprintf(stderr, "FAIL: %s: message \"%s\" lacks \"%s\"\n", what, msg, needle),
                failures++;
        free(msg);
    }
}

static void on_holder(void *ctx, const char *holder, size_t size, int64_t transitions)
{
    (void)ctx, (void)holder, (void)size, (void)transitions;
}

int main(void)
{
    char ns[] = "default", lease[] = "abi-lease", id[] = "node-1:8080";
    char pod[] = "pod-1", key[] = "role", value[] = "leader";
    char *err = NULL, *holder = NULL;
    long long int transitions = 0;
    holder_change_cb_t cb = on_holder;
    int rc;

    /* No cluster is configured (KUBECONFIG points nowhere). */
    rc = K8sLeaseInit(&err);
    expect_error(rc, err, "no-such-kubeconfig", "K8sLeaseInit without config");
    err = NULL;
    rc = K8sLeaseRunElection(ns, lease, id, 5, 3, 1, &err);
    expect_error(rc, err, "failed to build k8s config", "K8sLeaseRunElection without config");
    err = NULL;
    rc = K8sLeaseGetHolder(ns, lease, &holder, &transitions, &err);
    expect_error(rc, err, "failed to build k8s config", "K8sLeaseGetHolder without config");
    CHECK(holder == NULL, "holder stays NULL on error");
    err = NULL;
    rc = K8sLeaseWatchHolder(ns, lease, NULL, NULL, &err);
    expect_error(rc, err, "callback", "K8sLeaseWatchHolder with a NULL callback");
    err = NULL;
    rc = K8sLeaseWatchHolder(ns, lease, NULL, cb, &err);
    expect_error(rc, err, "failed to build k8s config", "K8sLeaseWatchHolder without config");
    err = NULL;
    rc = K8sPatchPodLabel(ns, pod, key, value, &err);
    expect_error(rc, err, "failed to build k8s config", "K8sPatchPodLabel without config");
    err = NULL;
    rc = K8sRemovePodLabel(ns, pod, key, &err);
    expect_error(rc, err, "failed to build k8s config", "K8sRemovePodLabel without config");
    err = NULL;
    rc = K8sLeaseWaitElected(ns, lease, 1, &transitions, &err);
    expect_error(rc, err, "no election running for default/abi-lease", "K8sLeaseWaitElected");

    /* Idempotent calls on keys with nothing running. */
    err = NULL;
    CHECK(K8sLeaseCancelElection(ns, lease, &err) == 0 && err == NULL, "CancelElection idempotent");
    CHECK(K8sLeaseWaitLost(ns, lease, &err) == 0 && err == NULL, "WaitLost without election");
    CHECK(K8sLeaseCancelWatch(ns, lease, &err) == 0 && err == NULL, "CancelWatch idempotent");

    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("ok: seed ABI consumer compiled, linked and behaved\n");
    return 0;
}
