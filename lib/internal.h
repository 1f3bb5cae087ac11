/* Internal declarations shared by the files under lib/. Names are uvcuda__*. */
#ifndef UVCUDA_INTERNAL_H
#define UVCUDA_INTERNAL_H

#define UVCUDA_BUILDING_LIBRARY 1
#include "uvcuda.h"
#include "driver.h"

#include <stdatomic.h>
#include <stdint.h>

#define UVCUDA__HIDDEN __attribute__((visibility("hidden")))

#define UVCUDA__FUTURE_MAGIC 0x75766366u /* "uvcf" */
#define UVCUDA__PROBE_PER_LOOP 4 /* CUDA contexts of a loop probed at once */
#define UVCUDA__PROBE_NONE ((void *)~(uintptr_t)0) /* no stream has it */

/* future flags_ */
#define UVCUDA__F_CLOSING 0x1u  /* close requested */
#define UVCUDA__F_QUEUED 0x2u   /* on the delivery queue */

/* ---- errors / options ---- */
int uvcuda__from_cuda(CUresult r);
int uvcuda__op_result(int r);
int uvcuda__driver_loaded(void);
int uvcuda__driver_simulated(void);

struct uvcuda__opts {
  uvcuda_completion_t completion;
  uint64_t spin_budget_ns;
  uint64_t probe_interval_ns;
  uint64_t reactor_spin_ns, reactor_yield_ns, reactor_sleep_max_ns;
  uint32_t flags;
};
int uvcuda__opts_resolve(const uvcuda_options_t *in, struct uvcuda__opts *out);

/* ---- timelines ---- */
enum uvcuda__tl_mode { UVCUDA__TL_MEM64, UVCUDA__TL_MEM32, UVCUDA__TL_HOSTFN };

/* A page of pinned counters (one cache line each), per loop. */
struct uvcuda__slot_page {
  struct uvcuda__slot_page *next;  /* all pages */
  struct uvcuda__slot_page *fnext; /* pages with a free slot */
  int in_free;
  void *host;
  CUdeviceptr dptr;
  CUcontext cuctx; /* current when allocated; made current to free */
  uint64_t used;
};

struct uvcuda__timeline {
  CUstream stream;
  CUcontext cuctx;
  int special;                /* NULL / legacy / per-thread handle */
  int mode;
  int faulted;
  void *slot;                 /* host address of the GPU-written counter */
  CUdeviceptr dptr;
  struct uvcuda__slot_page *page;
  int slot_index;
  uint64_t next_seq;          /* last sequence number enqueued */
  uint64_t done_seq;          /* HOSTFN: highest sequence seen done */
  uvcuda_future_t *head, *tail; /* pending futures, stream order */
  uint64_t pending;
  uint64_t armed;             /* pending futures in the ARMED state */
  unsigned tickets_out;       /* HOSTFN tickets not yet back */
  uint64_t seen_ns;           /* when a wake source last saw it move, or 0 */
  unsigned stamp;
  struct uvcuda__timeline *hnext;          /* hash chain */
  struct uvcuda__timeline *anext, *aprev;  /* loop's active list */
  int in_active;
  /* Loop thread: on l->touched, the timelines this pass changed (their
   * reactor watch to re-sync, maybe to free): a pass costs O(timelines it
   * touched), not O(timelines alive). Only settle frees a touched one. */
  struct uvcuda__timeline *tnext;
  int touched;
  int need_sync;
  /* reactor's watch: on the loop's rarmed or rfired list; guarded by the
   * reactor lock */
  struct uvcuda__timeline *rnext, *rprev;
  int r_armed;
  int r_fired;   /* its counter passed; the loop takes it on its wakeup */
  uint64_t r_threshold;
  uint64_t r_seen_ns; /* when the reactor saw the counter pass */
  int r_shadow; /* loop side: the reactor may be watching it */
};

/* ---- completion port for host functions ---- */
struct uvcuda__ticket {
  struct uvcuda__ticket *next, *prev;
  struct uvcuda__port *port;
  struct uvcuda__timeline *tl; /* only dereferenced on the loop thread */
  uint64_t seq;
  uint64_t seen_ns; /* when the host function ran */
};

struct uvcuda__port {
  uv_mutex_t mu;
  uv_async_t *async;             /* NULL once the loop closed */
  struct uvcuda__ticket *done;   /* ran, waiting for the loop */
  struct uvcuda__ticket *out;    /* enqueued, not yet run */
  unsigned refs;
  struct uvcuda__port *onext, *oprev; /* closed with tickets out */
  int orphan;
};

struct uvcuda__port *uvcuda__port_new(uv_async_t *async);
struct uvcuda__ticket *uvcuda__ticket_new(struct uvcuda__port *p,
                                          struct uvcuda__timeline *tl,
                                          uint64_t seq);
/* Takes back a ticket whose launch failed. */
void uvcuda__ticket_abort(struct uvcuda__ticket *t);
void CUDA_CB uvcuda__hostfn(void *ticket);
/* Returns the tickets that ran (loop thread frees them with _release). */
struct uvcuda__ticket *uvcuda__port_drain(struct uvcuda__port *p);
void uvcuda__ticket_release(struct uvcuda__ticket *t);
/* Detaches the loop; tickets still out free themselves when they run. */
void uvcuda__port_close(struct uvcuda__port *p);

/* ---- the loop context ---- */
struct uvcuda__evpool {
  struct uvcuda__evpool *next;
  CUcontext cuctx;
  CUevent *ev;
  unsigned n, cap;
};

struct uvcuda__loop {
  uvcuda_loop_t *pub;
  uv_loop_t *uv;
  uv_thread_t thread;
  struct uvcuda__opts opts;
  uv_async_t async;
  uv_idle_t idle;
  int handles_to_close;
  int closing;        /* uvcuda_loop_close called */
  int close_waiting;  /* waiting for GPU writes of cancelled futures */
  int async_ref, idle_on;
  uvcuda_loop_close_cb close_cb;
  struct uvcuda__port *port;

  struct uvcuda__timeline **buckets;
  uint64_t nbuckets, ntimelines;
  struct uvcuda__timeline *active; /* timelines with work or unwritten seqs */
  struct uvcuda__slot_page *pages;
  struct uvcuda__slot_page *free_pages; /* pages with a free slot */
  struct uvcuda__evpool *evpools;
  struct uvcuda__timeline **scratch;
  uint64_t scratch_cap;
  unsigned stamp;

  uvcuda_future_t *spin_head, *spin_tail;
  uvcuda_future_t *dq_head, *dq_tail; /* delivery queue */
  uvcuda_future_t *cq_head, *cq_tail; /* close queue */
  uint64_t nfutures;  /* initialised, close_cb not yet run */
  uint64_t nactive;   /* started, callback not yet run */
  int memops64_bad, memops32_bad;
  struct uvcuda__timeline *touched; /* see uvcuda__timeline.touched */
  uint64_t nneed_sync;
  uint64_t last_probe_ns;

  /* reactor side */
  int reactor_attached;
  struct uvcuda__loop *rnext, *rprev;     /* reactor lock */
  struct uvcuda__timeline *rarmed;        /* reactor lock */
  struct uvcuda__timeline *rfired;        /* reactor lock */
  atomic_int rang;                        /* reactor rang the async */
  atomic_int fault_suspect;               /* reactor saw a stream error */
  /* Streams of this loop the reactor is querying outside its lock: no
   * callback of a future on one of them runs meanwhile (it could destroy
   * the stream). Written under the reactor lock, cleared after the query. */
  atomic_int probe_refs;
  _Atomic(void *) probing[UVCUDA__PROBE_PER_LOOP];

  uvcuda_stats_t stats;
  uint64_t harvests; /* uvcuda__tl_harvest calls: tests check a wakeup's work */
};

int uvcuda__on_loop_thread(const struct uvcuda__loop *l);
void uvcuda__loop_kick(struct uvcuda__loop *l); /* make the idle pass run */
void uvcuda__loop_update_handles(struct uvcuda__loop *l);
void uvcuda__deliver(struct uvcuda__loop *l);
void uvcuda__complete(struct uvcuda__loop *l, uvcuda_future_t *f, int status);
/* Queues f for its close callback (state CLOSING). */
void uvcuda__close_queue_push(struct uvcuda__loop *l, uvcuda_future_t *f);
/* End of a pass over the touched timelines: re-sync the reactor's watch of
 * those that need it (one locked pass), free the idle quiescent ones. */
void uvcuda__loop_settle(struct uvcuda__loop *l);

/* timeline.c */
struct uvcuda__timeline *uvcuda__tl_find(struct uvcuda__loop *l, CUstream s,
                                         CUcontext cuctx, int special);
int uvcuda__tl_create(struct uvcuda__loop *l, CUstream s, CUcontext cuctx,
                      int special, struct uvcuda__timeline **out);
int uvcuda__tl_mark(struct uvcuda__loop *l, struct uvcuda__timeline *tl,
                    uvcuda_future_t *f);
void uvcuda__tl_push(struct uvcuda__loop *l, struct uvcuda__timeline *tl,
                     uvcuda_future_t *f);
/* Puts tl on the loop's touched list; sync: its reactor watch may be stale. */
void uvcuda__tl_touch(struct uvcuda__loop *l, struct uvcuda__timeline *tl,
                      int sync);
void uvcuda__tl_remove(struct uvcuda__loop *l, uvcuda_future_t *f);
uint64_t uvcuda__tl_done(struct uvcuda__loop *l, struct uvcuda__timeline *tl);
int uvcuda__tl_quiescent(struct uvcuda__loop *l, struct uvcuda__timeline *tl);
/* Completes the futures whose marker passed; src: 0 reactor/hostfn, 1 poll */
uint64_t uvcuda__tl_harvest(struct uvcuda__loop *l, struct uvcuda__timeline *tl,
                            int src);
void uvcuda__tl_spin_poll(struct uvcuda__loop *l, struct uvcuda__timeline *tl);
void uvcuda__tl_maybe_free(struct uvcuda__loop *l, struct uvcuda__timeline *tl);
void uvcuda__tl_free_all(struct uvcuda__loop *l);
void uvcuda__pages_free(struct uvcuda__slot_page *pages);
void uvcuda__tl_arm(struct uvcuda__loop *l, struct uvcuda__timeline *tl);
/* Whether the reactor should watch tl, and for which sequence number. */
int uvcuda__tl_watch(struct uvcuda__loop *l, struct uvcuda__timeline *tl,
                     uint64_t *threshold);
CUresult uvcuda__tl_query(struct uvcuda__timeline *tl);
void uvcuda__fail_cuctx(struct uvcuda__loop *l, CUcontext cuctx, int err);
int uvcuda__probe_faults(struct uvcuda__loop *l);
void uvcuda__event_put(struct uvcuda__loop *l, CUcontext cuctx, CUevent ev);
void uvcuda__evpools_free(struct uvcuda__loop *l);

/* reactor.c */
int uvcuda__reactor_attach(struct uvcuda__loop *l);
void uvcuda__reactor_detach(struct uvcuda__loop *l);
void uvcuda__reactor_arm(struct uvcuda__loop *l, struct uvcuda__timeline *tl,
                         uint64_t threshold);
void uvcuda__reactor_disarm(struct uvcuda__loop *l, struct uvcuda__timeline *tl);
/* One locked pass that makes the watch of every active timeline of l
 * match uvcuda__tl_watch (loop close). */
void uvcuda__reactor_sync(struct uvcuda__loop *l);
/* The same for the touched timelines marked need_sync. */
void uvcuda__reactor_sync_touched(struct uvcuda__loop *l);
/* Moves the timelines whose counters the reactor saw pass onto the loop's
 * touched list. */
void uvcuda__reactor_take_fired(struct uvcuda__loop *l);
int uvcuda__reactor_running(void); /* tests: the thread exists */
/* Frees a closed loop's pages on the reactor thread (cuMemFreeHost can
 * block for as long as the device is busy); inline where none runs. */
void uvcuda__reactor_free_pages(struct uvcuda__slot_page *pages);

/* Context switching around our own driver calls. */
static inline CUcontext uvcuda__ctx_enter(CUcontext want) {
  CUcontext prev = NULL;
  uvcuda__drv.cuCtxGetCurrent(&prev);
  if (prev != want) uvcuda__drv.cuCtxSetCurrent(want);
  return prev;
}
static inline void uvcuda__ctx_leave(CUcontext prev, CUcontext want) {
  if (prev != want) uvcuda__drv.cuCtxSetCurrent(prev);
}

#endif
