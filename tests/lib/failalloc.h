/* The failing allocator (core/common.h, kl__alloc_fail_after) on a
 * client's loop thread: its countdown is the arming thread's own, so a
 * test that wants the loop thread's allocations to fail arms it there.
 * Header-only: the tests that include it link the library's internals. */
#ifndef KL_TEST_FAILALLOC_H
#define KL_TEST_FAILALLOC_H

#include "core/common.h"
#include "core/loop.h"

static inline void kl_test_arm_here(void *arg)
{
    kl__alloc_fail_after(*(const long *)arg);
}

/* The n-th allocation of loop's thread from now fails, and every later one
 * of that thread, until kl__alloc_fail_after(-1) (any thread). */
static inline void kl_test_alloc_fail_on_loop(kl__loop *loop, long n)
{
    kl__loop_call(loop, kl_test_arm_here, &n);
}

#endif
