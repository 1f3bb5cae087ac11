/* Completion through CUDA host functions: a port per loop collects the
 * tickets whose host functions ran and rings the loop's async handle. */
#ifndef UVCUDA_HOSTFN_H
#define UVCUDA_HOSTFN_H

#include <stdint.h>

#include "driver.h"
#include "queue.h"

struct uvcuda__timeline;

struct uvcuda__ticket {
  struct uvcuda__queue node; /* the port's out or done queue */
  struct uvcuda__port *port;
  struct uvcuda__timeline *tl; /* the loop's; never dereferenced here */
  uint64_t seq;
  uint64_t seen_ns; /* when the host function ran */
};

struct uvcuda__port {
  uv_mutex_t mu;
  uv_async_t *async;          /* NULL once the loop closed */
  struct uvcuda__queue done;  /* ran, waiting for the loop */
  struct uvcuda__queue out;   /* enqueued, not yet run */
  unsigned refs;              /* the loop's, plus one per ticket */
  struct uvcuda__queue onode; /* orphans: closed with tickets out */
  /* On orphans: set under mu, read by whoever frees the port. Not the
   * link itself, which other ports' closes write under orphans' lock. */
  int orphaned;
};

struct uvcuda__port *uvcuda__port_new(uv_async_t *async);
struct uvcuda__ticket *uvcuda__ticket_new(struct uvcuda__port *p,
                                          struct uvcuda__timeline *tl,
                                          uint64_t seq);
/* Takes back a ticket whose launch failed. */
void uvcuda__ticket_abort(struct uvcuda__ticket *t);
void CUDA_CB uvcuda__hostfn(void *ticket);
/* Moves the tickets that ran, in the order they ran, onto `out`; the loop
 * thread frees each with uvcuda__ticket_release. */
void uvcuda__port_drain(struct uvcuda__port *p, struct uvcuda__queue *out);
void uvcuda__ticket_release(struct uvcuda__ticket *t);
/* Detaches the loop; tickets still out free themselves when they run. */
void uvcuda__port_close(struct uvcuda__port *p);

#endif
