/*
 * chaos.h - what the chaos driver (driver.c), its observer (observer.c) and
 * the candidate program (candidate.c) share: the line protocol and a few
 * helpers. docs/chaos.md describes the suite.
 *
 * A candidate writes one line per event on its stdout, a pipe to the
 * driver, each with one write(2) shorter than PIPE_BUF. Times are
 * CLOCK_MONOTONIC nanoseconds: every process runs on the same machine, so
 * they are comparable across processes. "<name> <ns> <EVENT> <args>":
 *
 *   NAME NS CAMPAIGN N                  elector number N started (1, 2, ... per process)
 *   NAME LO LEAD EPOCH HI               leader with EPOCH; is_leader turned true at some
 *                                       instant in [LO, HI] (LO is the honest bound)
 *   NAME HI LOSE EPOCH LO HOW END_MS SEEN DFINAL
 *                                       that term over; is_leader turned false at some
 *                                       instant in [LO, HI] (HI is the honest bound):
 *                                       HI = min(SEEN, DFINAL), SEEN when the candidate
 *                                       saw the end, DFINAL >= the last deadline of the
 *                                       term; HOW: "seen" or "deadline", whichever gave
 *                                       HI; END_MS: from the end to the elector being over
 *   NAME NS HB STATE N REQUESTS HEALTHY heartbeat, every second: STATE C campaigning,
 *                                       L leading, E leadership gone and elector ending,
 *                                       P pausing after a release asked with SIGUSR2
 *   NAME NS HANDOFF TO MS               the leader called k8slease_elector_handoff at NS
 *                                       (SIGRTMIN), to TO ("-": the best known candidate);
 *                                       the call took MS ms (its term ended first: LOSE)
 *   NAME NS CONT LEADER                 after SIGCONT: is_leader of the current elector
 *                                       (0/1), read in the signal handler at once
 *   NAME NS ERR TEXT                    something the candidate could not do
 *   NAME NS BYE                         clean exit after SIGTERM
 *
 * A seed-ABI candidate (--seed-abi, a program on libk8s_lease_wrapper.h)
 * writes CAMPAIGN, HB (states C, L, P), CONT (what the program believes:
 * 1 while WaitLost has not returned), ERR and BYE, and instead of LEAD/LOSE:
 *
 *   NAME NS ELECTED EPOCH               K8sLeaseWaitElected returned 0 and EPOCH: the
 *                                       program leads from NS on
 *   NAME NS LOST EPOCH HOW CANCEL RET   K8sLeaseWaitLost returned: the program's term
 *                                       ended at NS; HOW "cancel" (the program called
 *                                       K8sLeaseCancelElection at CANCEL) or "lost" (the
 *                                       library ended it; CANCEL 0); RET: when WaitLost
 *                                       returned (NS, except for the mutant, whose NS is
 *                                       RET + renew_deadline)
 *   NAME NS TIMEOUT SECS HOLDER EPOCH   K8sLeaseWaitElected timed out after SECS (the
 *                                       library cancelled the election); K8sLeaseGetHolder
 *                                       then read HOLDER ("-" none, "?" failed), EPOCH
 *
 * candidate.c explains why LO and HI are honest bounds, and the seed-ABI
 * program's term.
 */
#ifndef K8SLEASE_CHAOS_H
#define K8SLEASE_CHAOS_H

#include <stdint.h>
#include <time.h>

#define CHAOS_NS_PER_MS INT64_C(1000000)
#define CHAOS_NS_PER_S  INT64_C(1000000000)

/* The election timings every candidate uses. */
typedef struct chaos_timing {
    int64_t lease_duration_ms;
    int64_t renew_deadline_ms;
    int64_t retry_period_ms;
} chaos_timing;

/* The user_agent option of candidate NAME is "chaos/NAME": distinct names
 * of equal length ("cand-a", ...) so a fault rule's substring match picks
 * one candidate only. */
#define CHAOS_UA_PREFIX "chaos/"

static inline int64_t chaos_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * CHAOS_NS_PER_S + ts.tv_nsec;
}

#endif
