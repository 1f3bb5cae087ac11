/* The loop context: what uvcuda keeps per uv_loop_t. */
#ifndef UVCUDA_LOOP_H
#define UVCUDA_LOOP_H

#include <stdint.h>

#include "adapt.h"
#include "hostfn.h"
#include "options.h"
#include "queue.h"
#include "reactor.h"
#include "spin.h"
#include "timeline.h"

struct uvcuda__loop {
  uvcuda_loop_t *pub;
  uv_loop_t *uv;
  uint64_t thread;   /* thread_serial() of the thread that set it up */
  struct uvcuda__opts opts;
  /* One async (rung by the reactor or host functions) and one idle (spin,
   * deliveries, POLL) per loop, never a handle per future: libuv visits
   * every async handle of a loop on each wakeup. */
  uv_async_t async;
  uv_idle_t idle;
  int idle_on, async_ref;
  int handles_to_close;
  int closing; /* uvcuda_loop_close called */
  uvcuda_loop_close_cb close_cb;
  struct uvcuda__port *port;
  struct uvcuda__tlset tls;
  struct uvcuda__spin spin;
  struct uvcuda__adapt adapt;
  uint64_t spin_last_ns; /* the last pass that spun, for stats.spin_ns */
  struct uvcuda__queue dq; /* outcomes whose callbacks run next pass */
  struct uvcuda__queue cq; /* closed futures whose close_cb runs next pass */
  uint64_t nfutures;       /* initialised, close_cb not yet run */
  uint64_t nactive;        /* started, callback not yet run */
  struct uvcuda__rclient rc;
  int reactor_attached;
  unsigned epoch; /* the fault epoch this loop has acted on */
  uvcuda_stats_t stats;
  struct uvcuda__queue live_node; /* live loops (loop.c) */
  uvcuda_future_t *op_future;     /* whose op runs now (future.c) */
};

int uvcuda__on_loop_thread(const struct uvcuda__loop *l);

/* pass.c: the loop's handles and passes. */
int uvcuda__loop_handles_init(struct uvcuda__loop *l);
/* The loop context that embeds h, one of its three handles. Their `data`
 * stays NULL: a loop's owner may walk its handles (uvloop's close reads
 * `data` as one of its own objects), so ours carry nothing there. */
struct uvcuda__loop *uvcuda__loop_of_handle(const uv_handle_t *h);
void uvcuda__loop_update_handles(struct uvcuda__loop *l);
/* Re-syncs the reactor's watches of the timelines touched so far and
 * retires the idle ones (end of a pass; also right after an arm at start,
 * so an armed future is watched before the loop next sleeps). */
void uvcuda__loop_settle(struct uvcuda__loop *l);

#endif
