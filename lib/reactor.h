/* The reactor: one thread per process that reads the counters of armed
 * watches and rings the owning loop's uv_async_t once one has passed its
 * threshold; it also probes, every probe interval, the CUDA contexts of
 * the watches it holds, and rings every loop with work in flight when any
 * context turns faulted. Between looks it sleeps until the earliest next
 * look any watch's plan asks for (plan.h); with nothing watched it parks. */
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
  /* Options (uvcuda_options_t): busy-poll and yield phases after an arm,
   * the longest back-off step and its share of the wait, the probe
   * interval. With several loops the reactor takes the most eager. */
  uint64_t spin_ns, yield_ns, sleep_max_ns, probe_ns;
  uint32_t pct;
};

/* What the reactor has cost so far, over every reactor thread of the
 * process (it retires with its last loop and a later loop starts one). */
struct uvcuda__reactor_usage {
  uint64_t polls;  /* passes that read the armed counters */
  uint64_t sleeps; /* timed waits and parks */
  uint64_t cpu_ns; /* the threads' CPU time */
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

/* Watch changes come in batches, under the reactor lock: begin; watch(w,
 * threshold) with w's plan fields set, or watch(w, 0) to stop watching w;
 * end. An arm wakes the reactor if its plan asks for a look before the
 * reactor would wake anyway. */
void uvcuda__reactor_sync_begin(struct uvcuda__rclient *c);
void uvcuda__reactor_watch(struct uvcuda__rclient *c, struct uvcuda__watch *w,
                           uint64_t threshold);
void uvcuda__reactor_sync_end(struct uvcuda__rclient *c);

/* Moves c's fired watches onto `out` (each stays off the reactor's queues
 * once the caller unlinks it from `out`). */
void uvcuda__reactor_take_fired(struct uvcuda__rclient *c,
                                struct uvcuda__queue *out);

/* The process's reactor costs so far (zeros in a child forked after the
 * load: the reactor did not follow). Any thread. */
void uvcuda__reactor_usage(struct uvcuda__reactor_usage *u);

int uvcuda__reactor_running(void); /* tests: the thread exists */

#endif
