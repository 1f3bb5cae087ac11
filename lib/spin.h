/* The loop's spin: futures poll their timelines on the loop thread for
 * the spin budget, in start order, then are armed (left to the reactor or
 * the host function). This file owns the spin FIFO and the one arm step. */
#ifndef UVCUDA_SPIN_H
#define UVCUDA_SPIN_H

#include <stdint.h>

#include "queue.h"
#include "timeline.h"

struct uvcuda__spin {
  struct uvcuda__queue fifo; /* started futures in deadline order */
  struct uvcuda__timeline **scratch;
  uint64_t cap;
  unsigned stamp;
};

void uvcuda__spin_init(struct uvcuda__spin *sp);
void uvcuda__spin_free(struct uvcuda__spin *sp);
/* f (just started) spins until `deadline`. */
void uvcuda__spin_add(struct uvcuda__spin *sp, uvcuda_future_t *f,
                      uint64_t deadline);
/* Takes f off the FIFO (its outcome is being delivered, or it closed). */
static inline void uvcuda__spin_forget(uvcuda_future_t *f) {
  uvcuda__queue_remove(&f->spin_node_);
}
/* The arm step: f waits for the reactor or its host function from here. */
void uvcuda__spin_arm(struct uvcuda__tlset *set, uvcuda_future_t *f,
                      uint64_t now);
/* One pass: polls each timeline with a spinning future once, probes the
 * context of those spinning for a probe interval already, and arms the
 * futures whose budget is spent. */
void uvcuda__spin_pass(struct uvcuda__spin *sp, struct uvcuda__tlset *set,
                       uint64_t now, uint64_t probe_ns);
static inline int uvcuda__spin_busy(const struct uvcuda__spin *sp) {
  return !uvcuda__queue_empty(&sp->fifo);
}

#endif
