/* The reactor's sleep: it waits on a bell, until a deadline or for ever,
 * and an arm (or its retirement) rings it. On Linux the bell is a futex
 * word: a timed wait then costs what a nanosleep does, where a condition
 * variable's costs a third more, and the reactor's wake-ups are most of
 * what waiting for the GPU costs the process. Elsewhere it is a condition
 * variable. The caller holds `mu`; a wait releases it and takes it back,
 * as pthread_cond_timedwait does, and a ring made under `mu` after the
 * waiter last held it is never lost. */
#ifndef UVCUDA_BELL_H
#define UVCUDA_BELL_H

#include <pthread.h>
#include <stdint.h>

struct uvcuda__bell {
  uint32_t rings; /* bumped by each ring (futex word) */
#ifndef __linux__
  pthread_cond_t cond;
#endif
};

/* 0, or nonzero where a condition variable could not be made. */
int uvcuda__bell_init(struct uvcuda__bell *b);
/* Sleeps until `at` (uv_hrtime's clock, CLOCK_MONOTONIC ns; 0: no
 * deadline) or a ring. Returns 1 if it woke at the deadline, else 0 (a
 * ring, or a spurious wake-up: the caller looks again either way). */
int uvcuda__bell_wait(struct uvcuda__bell *b, pthread_mutex_t *mu,
                      uint64_t at);
/* Wakes the waiter, if any. Caller holds the waiter's `mu`. */
void uvcuda__bell_ring(struct uvcuda__bell *b);

#endif
