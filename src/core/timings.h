/* The rules an elector's options meet in every backend, so that both say
 * the same thing about the same options: client-go's timing rules and the
 * identity's bounds, and the timeout of an elector's requests.
 * k8s/election.c applies the rules when an elector is initialised,
 * etcd/driver.c when one is created.
 *
 * PURE: no I/O, no clock reads, no allocation; the one side effect is
 * kl__error_set naming the rule broken. Any thread. */
#ifndef KL_TIMINGS_H
#define KL_TIMINGS_H

#include <stddef.h>
#include <stdint.h>

/* Buffer size for an identity: the longest accepted is one byte less. */
#define KL_IDENTITY_MAX 512

/* "5000 ms", or "1500001 ns" when milliseconds would hide the value; in
 * buf, which it returns. For the messages of the rules. */
const char *kl__duration_format(int64_t ns, char *buf, size_t size);

/* identity non-NULL, not empty and shorter than KL_IDENTITY_MAX bytes.
 * 0 or K8SLEASE_EINVAL ("identity must not be empty"). */
int kl__identity_check(const char *identity);

/* lease_duration > renew_deadline > 1.2 * retry_period > 0 (nanoseconds).
 * 0 or K8SLEASE_EINVAL naming the rule, e.g. "lease_duration (5000 ms) must
 * be greater than renew_deadline (5000 ms)". */
int kl__timings_check(int64_t lease_duration_ns, int64_t renew_deadline_ns,
                      int64_t retry_period_ns);

/* The timeout of an elector's requests (ms) for its renew deadline and
 * retry period (ms), whatever the backend (kl__elector_timings_of,
 * core/driver.h; etcd's keepalives, campaign requests and watch probes
 * too): (renew_deadline - retry_period) / 2, at least
 * KL_REQUEST_TIMEOUT_MIN_MS. A renewal starts retry_period after the last
 * success and must succeed within renew_deadline of it; what is left holds
 * one attempt that gets no answer (its connection is then abandoned) and
 * one more on a new connection. 15/10/2 s: 4 s; 5/3/1 s: 1 s. The
 * documentation says it in docs/semantics.md ("Request timeout"). */
#define KL_REQUEST_TIMEOUT_MIN_MS 500
int64_t kl__request_timeout_ms(int64_t renew_deadline_ms, int64_t retry_period_ms);

/* When a leader's request (renewal, or the read after a failed one) that
 * got no answer is sent again on a new connection (kl__http_opts.hedge_ms),
 * for its request timeout (ms): a quarter of it, at least
 * KL_HEDGE_MIN_MS. Through a load balancer with round robin a new
 * connection reaches another replica one time in two: three copies before
 * the timeout make a hung replica's cost a fraction of a request timeout.
 * 15/10/2 s: 1 s; 5/3/1 s: 250 ms. */
#define KL_HEDGE_MIN_MS 250
int64_t kl__hedge_ms(int64_t request_timeout_ms);

#endif
