/* The reactor's sleep (see bell.h). */
#include "bell.h"

#include <errno.h>
#include <time.h>

#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

int uvcuda__bell_init(struct uvcuda__bell *b) {
  b->rings = 0;
#ifdef __linux__
  return 0;
#else
  pthread_condattr_t ca;
  int rc;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  rc = pthread_cond_init(&b->cond, &ca);
  pthread_condattr_destroy(&ca);
  return rc;
#endif
}

int uvcuda__bell_wait(struct uvcuda__bell *b, pthread_mutex_t *mu,
                      uint64_t at) {
  struct timespec ts;
  int timed_out;
  ts.tv_sec = (time_t)(at / 1000000000u);
  ts.tv_nsec = (long)(at % 1000000000u);
#ifdef __linux__
  {
    /* Read under mu: a ring after it (made under mu, once we let go)
     * changes the word, and the futex then returns at once. */
    uint32_t seen = __atomic_load_n(&b->rings, __ATOMIC_RELAXED);
    long rc;
    pthread_mutex_unlock(mu);
    /* FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC deadline. */
    rc = syscall(SYS_futex, &b->rings, FUTEX_WAIT_BITSET_PRIVATE, seen,
                 at ? &ts : NULL, NULL, FUTEX_BITSET_MATCH_ANY);
    timed_out = rc != 0 && errno == ETIMEDOUT;
    pthread_mutex_lock(mu);
  }
#else
  timed_out = (at ? pthread_cond_timedwait(&b->cond, mu, &ts)
                  : pthread_cond_wait(&b->cond, mu)) == ETIMEDOUT;
#endif
  return timed_out;
}

void uvcuda__bell_ring(struct uvcuda__bell *b) {
  __atomic_add_fetch(&b->rings, 1, __ATOMIC_RELAXED);
#ifdef __linux__
  syscall(SYS_futex, &b->rings, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0);
#else
  pthread_cond_broadcast(&b->cond);
#endif
}
