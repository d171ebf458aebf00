/* The rules every backend applies to an elector's options: see
 * core/timings.h. */
#include "core/timings.h"

#include <stdio.h>
#include <string.h>

#include "core/clock.h" /* KL_NS_PER_* only */
#include "core/common.h"

const char *kl__duration_format(int64_t ns, char *buf, size_t size)
{
    if (ns % KL_NS_PER_MS == 0)
        snprintf(buf, size, "%lld ms", (long long)(ns / KL_NS_PER_MS));
    else
        snprintf(buf, size, "%lld ns", (long long)ns);
    return buf;
}

static int check_positive(const char *name, int64_t ns)
{
    char buf[32];

    if (ns > 0)
        return 0;
    return kl__error_set(K8SLEASE_EINVAL, "%s (%s) must be greater than zero", name,
                         kl__duration_format(ns, buf, sizeof(buf)));
}

int kl__identity_check(const char *identity)
{
    if (!identity || !identity[0])
        return kl__error_set(K8SLEASE_EINVAL, "identity must not be empty");
    if (strnlen(identity, KL_IDENTITY_MAX) == KL_IDENTITY_MAX)
        return kl__error_set(K8SLEASE_EINVAL, "identity longer than %d bytes", KL_IDENTITY_MAX - 1);
    return 0;
}

int kl__timings_check(int64_t ld, int64_t rd, int64_t rp)
{
    char a[32], b[32];
    int err;

    if ((err = check_positive("lease_duration", ld)) < 0 ||
        (err = check_positive("renew_deadline", rd)) < 0 ||
        (err = check_positive("retry_period", rp)) < 0)
        return err;
    if (ld <= rd)
        return kl__error_set(
            K8SLEASE_EINVAL, "lease_duration (%s) must be greater than renew_deadline (%s)",
            kl__duration_format(ld, a, sizeof(a)), kl__duration_format(rd, b, sizeof(b)));
    /* rd is whole nanoseconds, so rd > 1.2 * rp is rd > floor(1.2 * rp). An
     * rp so large that 1.2 * rp overflows can never be met. */
    if (rp > INT64_MAX / 6 * 5 || rd <= rp + rp / 5)
        return kl__error_set(
            K8SLEASE_EINVAL, "renew_deadline (%s) must be greater than 1.2 * retry_period (%s)",
            kl__duration_format(rd, a, sizeof(a)), kl__duration_format(rp, b, sizeof(b)));
    return 0;
}

int64_t kl__hedge_ms(int64_t request_timeout_ms)
{
    int64_t t = request_timeout_ms / 4;

    return t > KL_HEDGE_MIN_MS ? t : KL_HEDGE_MIN_MS;
}

int64_t kl__request_timeout_ms(int64_t renew_deadline_ms, int64_t retry_period_ms)
{
    int64_t t = (renew_deadline_ms - retry_period_ms) / 2;

    return t > KL_REQUEST_TIMEOUT_MIN_MS ? t : KL_REQUEST_TIMEOUT_MIN_MS;
}
