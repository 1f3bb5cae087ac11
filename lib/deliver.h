/* The delivery queue: futures whose outcome is known, waiting for the
 * loop's next pass to run their callbacks. Whatever finds an outcome
 * (harvest, a fault, a failed start, a close) appends here; only the loop
 * runs callbacks, so nothing below it calls up. */
#ifndef UVCUDA_DELIVER_H
#define UVCUDA_DELIVER_H

#include "queue.h"
#include "uvcuda.h"

/* A closed future's callback gets UVCUDA_ECANCELED whatever happened. */
static inline void uvcuda__deliver_push(struct uvcuda__queue *dq,
                                        uvcuda_future_t *f, int status) {
  if (f->closing_) status = UVCUDA_ECANCELED;
  f->status_ = status;
  f->state_ = status == 0 ? UVCUDA_FUTURE_COMPLETE : UVCUDA_FUTURE_FAILED;
  uvcuda__queue_insert_tail(dq, &f->q_node_);
}

#endif
