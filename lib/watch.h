/* What the reactor watches: a counter, the value to wait for, and what the
 * loop knows of the wait (plan.h turns that into the reactor's next look).
 * The reactor knows watches and the loops' clients, nothing above them; a
 * loop embeds one watch in each of its timelines and gets fired ones back
 * on a queue. */
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
  struct uvcuda__context *ctx; /* probed while the watch is armed */
  /* The plan (plan.h), set by the loop in the locked batch that arms it:
   * the reactor reads it while the watch is armed. */
  uint64_t since_ns, due_ns, dev_ns, quiet_until_ns;
  /* Set by the reactor: its last look that found the counter short (0:
   * none yet), when it found it passed, and whether that was the first
   * look inside a predicted window (the work ended before, unseen). */
  uint64_t after_ns, seen_ns;
  int early;
};

static inline void uvcuda__watch_init(struct uvcuda__watch *w,
                                      struct uvcuda__context *ctx) {
  uvcuda__queue_init(&w->node);
  w->host = NULL;
  w->mode = 0;
  w->threshold = 0;
  w->ctx = ctx;
  w->since_ns = w->due_ns = w->dev_ns = w->quiet_until_ns = 0;
  w->after_ns = w->seen_ns = 0;
  w->early = 0;
}

#endif
