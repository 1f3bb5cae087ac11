/* The reactor: one thread per process that reads the counters of armed
 * watches and rings the owning loop's uv_async_t once one has passed its
 * threshold; it also probes, every probe interval, the CUDA contexts of the
 * watches it holds, and rings every loop with work in flight when any
 * context turns faulted. */
#ifndef UVCUDA_REACTOR_H
#define UVCUDA_REACTOR_H

#include <stdatomic.h>
#include <stdint.h>

#include "driver.h"
#include "queue.h"
#include "watch.h"

/* A loop as the reactor sees it. The queues are guarded by the reactor's
 * lock; the rest is set before attach. */
struct uvcuda__rclient {
  struct uvcuda__queue node;   /* the reactor's clients */
  struct uvcuda__queue armed;  /* watches with a counter to read */
  struct uvcuda__queue probed; /* host-function watches: contexts to probe */
  struct uvcuda__queue fired;  /* passed; the loop takes them when rung */
  uv_async_t *async;
  /* held: the reactor has news for the loop (a watch fired, a fault).
   * polling: the loop's idle handle runs, so the loop looks at `held`
   * every pass; the reactor then writes no eventfd (uv_async_send), which
   * would cost the loop a read and a pass of its own. Both seq_cst: the
   * loop clears `polling`, then reads `held`; the reactor sets `held`,
   * then reads `polling`; one of them sees the other. */
  atomic_int held, polling;
  atomic_int rang; /* the reactor rang since the loop last looked */
  /* The reactor wrote the async's eventfd, and the loop's async callback
   * has not run since: libuv reads the eventfd only in a pass of a loop
   * that is alive, so the loop holds its async ref'd until then. A ring
   * can come after the loop found the work done on its own, and would
   * otherwise leave a loop with nothing to do with a readable backend fd,
   * which an embedder waiting on that fd spins on. */
  atomic_int sent;
  /* The loop's pre-wake timerfd (adapt.h; -1: none, set before listen).
   * The loop asks for a near expiry in a batch (wake_at); the reactor
   * makes the timerfd_settime call, which cost the loop thread 1.6 to 2.3
   * µs per pre-woken future (H100, run 19), and it runs anyway. A far one
   * the loop sets itself, in the batch (wake_set). Under the lock. */
  int tfd;
  uint64_t wake_want, wake_set; /* absolute uv_hrtime() ns, 0: disarmed */
  uint64_t spin_ns, yield_ns, sleep_max_ns, probe_ns; /* back-off */
  int timing; /* stamp watches' seen_ns */
};

/* Starts the thread for the first client. Loop thread. */
int uvcuda__reactor_attach(struct uvcuda__rclient *c);
/* From here the reactor may ring c->async, which must exist by then (a
 * fault rings every client with work in flight). Loop thread, after
 * attach. */
void uvcuda__reactor_listen(struct uvcuda__rclient *c);
/* From here the reactor never touches c or its watches; the last client
 * joins the thread. Loop thread. */
void uvcuda__reactor_detach(struct uvcuda__rclient *c);

/* Watch changes come in batches, under the reactor lock:
 * begin; watch(w, threshold) or watch(w, 0) to stop watching w; end. */
void uvcuda__reactor_sync_begin(struct uvcuda__rclient *c);
void uvcuda__reactor_watch(struct uvcuda__rclient *c, struct uvcuda__watch *w,
                           uint64_t threshold);
void uvcuda__reactor_sync_end(struct uvcuda__rclient *c);
/* In a batch, after its watches: c's timerfd is to expire at `at`
 * (absolute uv_hrtime() ns, never 0; in the past: at once). The reactor
 * sets it on its next pass. (A disarm the loop makes itself: wake_set.) */
void uvcuda__reactor_wake_at(struct uvcuda__rclient *c, uint64_t at);
/* In a batch: the loop set c's timerfd to `at` itself (0: disarmed); the
 * reactor leaves it as it is. */
void uvcuda__reactor_wake_set(struct uvcuda__rclient *c, uint64_t at);

/* Moves c's fired watches onto `out` (each stays off the reactor's queues
 * once the caller unlinks it from `out`). */
void uvcuda__reactor_take_fired(struct uvcuda__rclient *c,
                                struct uvcuda__queue *out);

int uvcuda__reactor_running(void); /* tests: the thread exists */

#endif
