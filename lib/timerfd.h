/* A timerfd (CLOCK_MONOTONIC, uv_hrtime's clock) set to expire at an
 * absolute uv_hrtime() time, or disarmed (0). Setting it also drops an
 * expiry not yet read (timerfd_settime(2)). Linux only. The pre-wake
 * timer's: the reactor sets a near expiry, the loop a far one (adapt.h). */
#ifndef UVCUDA_TIMERFD_H
#define UVCUDA_TIMERFD_H

#include <stdint.h>
#include <string.h>
#include <sys/timerfd.h>

/* A refusal leaves it as it was; the callers' future is then delivered
 * without the pre-wake, as a late prediction is. */
static inline void uvcuda__timerfd_set(int fd, uint64_t at) {
  struct itimerspec its;
  memset(&its, 0, sizeof(its));
  its.it_value.tv_sec = (time_t)(at / 1000000000u);
  its.it_value.tv_nsec = (long)(at % 1000000000u);
  (void)timerfd_settime(fd, TFD_TIMER_ABSTIME, &its, NULL);
}

#endif
