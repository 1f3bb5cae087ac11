/* What the reactor watches: a counter and the value to wait for. The
 * reactor knows watches and the loops' clients, nothing above them; a loop
 * embeds one watch in each of its timelines and gets fired ones back on a
 * queue. */
#ifndef UVCUDA_WATCH_H
#define UVCUDA_WATCH_H

#include <stdint.h>

#include "queue.h"

struct uvcuda__context;

struct uvcuda__watch {
  struct uvcuda__queue node; /* a client's armed, probed or fired queue */
  const void *host;          /* the counter; NULL: host functions, probe only */
  int mode;                  /* UVCUDA__COUNTER_MEM64 / _MEM32 */
  uint64_t threshold;        /* fires once the counter has passed it */
  uint64_t seen_ns;          /* when it fired (UVCUDA_OPT_TIMING) */
  struct uvcuda__context *ctx; /* probed while the watch is armed */
};

static inline void uvcuda__watch_init(struct uvcuda__watch *w,
                                      struct uvcuda__context *ctx) {
  uvcuda__queue_init(&w->node);
  w->host = NULL;
  w->mode = 0;
  w->threshold = 0;
  w->seen_ns = 0;
  w->ctx = ctx;
}

#endif
