/* A timerfd (CLOCK_MONOTONIC, uv_hrtime's clock) set to expire at an
 * absolute uv_hrtime() time, or disarmed (0). Setting it also drops an
 * expiry not yet read (timerfd_settime(2)). Linux only. The pre-wake
 * timer's: the reactor sets a near expiry, the loop a far one (adapt.h). */
#ifndef UVCUDA_TIMERFD_H
#define UVCUDA_TIMERFD_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <unistd.h>

/* A non-blocking, close-on-exec timerfd, or -1 with errno set. It takes
 * the number of a fresh eventfd (moved there with a raw dup3) so that a
 * race detector sees the number opened: TSan intercepts eventfd(2) but not
 * timerfd_create(2), and a libuv built without TSan closes its descriptors
 * unseen, so a timerfd reusing another loop's epoll descriptor would look
 * to TSan like a close racing that loop's epoll_wait. Close it with
 * close(2). */
static inline int uvcuda__timerfd_open(void) {
  int t, fd, err;
  t = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (t < 0) return -1;
  fd = eventfd(0, EFD_CLOEXEC);
  if (fd < 0 || syscall(SYS_dup3, t, fd, O_CLOEXEC) < 0) {
    err = errno;
    if (fd >= 0) close(fd);
    (void)syscall(SYS_close, t); /* unseen, as its opening was */
    errno = err;
    return -1;
  }
  (void)syscall(SYS_close, t);
  return fd;
}

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
