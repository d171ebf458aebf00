/* The two clocks: monotonic for every deadline and expiry decision, wall
 * time only to write and read MicroTime fields. */
#ifndef KL_CLOCK_H
#define KL_CLOCK_H

#include <stdint.h>

#define KL_NS_PER_MS INT64_C(1000000)
#define KL_NS_PER_S  INT64_C(1000000000)

int64_t kl__clock_mono_ns(void); /* CLOCK_MONOTONIC in ns */
int64_t kl__clock_wall_us(void); /* CLOCK_REALTIME in µs since the Unix epoch */

/* Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
 * days_from_civil): exact for every year, no tables, and unlike timegm (not
 * POSIX) no libc time zone state, so thread-safe and cheap. */
int64_t kl__days_from_civil(int64_t y, int m, int d);

#endif
