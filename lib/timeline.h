/* Timelines: one per (loop, stream). Each future gets the next sequence
 * number of its stream's timeline and a marker after its op: the GPU
 * writes the number into the timeline's counter (cuStreamWriteValue64/32),
 * or, in the host-function modes, a host function hands back a ticket
 * carrying it. A future is done when its timeline has passed its number:
 * later work on the stream does not delay it, and futures of one stream
 * complete in stream order. A counter per stream, futures unbounded.
 *
 * A timeline outlives its futures while a GPU write to its counter is due
 * (a closed future's marker): it is "draining" then, and freed once the
 * write has landed. One with nothing due is kept "idle" for the stream's
 * next future (the UVCUDA__TL_IDLE_MAX most recent): making one costs
 * driver calls and two locks before the op may launch. Nothing here calls
 * up into the loop: outcomes go onto the set's delivery queue. */
#ifndef UVCUDA_TIMELINE_H
#define UVCUDA_TIMELINE_H

#include <stdint.h>

#include "context.h"
#include "counter.h"
#include "hostfn.h"
#include "modes.h"
#include "predict.h"
#include "queue.h"
#include "streams.h"
#include "watch.h"

#define UVCUDA__TL_MEM64 UVCUDA__COUNTER_MEM64
#define UVCUDA__TL_MEM32 UVCUDA__COUNTER_MEM32
#define UVCUDA__TL_HOSTFN 3

struct uvcuda__timeline {
  struct uvcuda__queue hnode; /* the set's streams */
  unsigned long long stream_id;
  struct uvcuda__context *ctx;
  int mode;
  int faulted;                    /* its context's fault failed its futures */
  int idle;                       /* on the set's idle queue */
  int special;                    /* NULL, legacy or per-thread handle */
  struct uvcuda__counter counter; /* MEM modes */
  uint64_t next_seq;              /* last sequence number enqueued */
  uint64_t done_seq;              /* HOSTFN: highest number seen done */
  unsigned tickets_out;           /* HOSTFN: host functions not yet run */
  struct uvcuda__queue futures;   /* pending, in stream order */
  uint64_t armed;                 /* pending futures in state ARMED */
  uint64_t seen_ns;               /* when a wake source saw it pass, or 0 */
  /* With a reactor's sighting (seen_ns): its look before, which found the
   * work not done, and whether the sighting was the first look inside a
   * predicted window (watch.h). */
  uint64_t after_ns;
  /* The loop's own last poll of a pre-woken future that found it not done
   * (0: none): a reactor that did not look meanwhile knows less. */
  uint64_t polled_ns;
  int seen_early;
  /* When its last future was seen done (0: none yet): the next one's wait
   * cannot have begun before (the reactor's back-off counts from it). */
  uint64_t done_ns;
  unsigned stamp;                 /* the spin pass that polled it */
  struct uvcuda__watch watch;     /* the reactor's */
  uint64_t watched;               /* the threshold the reactor holds; 0: none */
  struct uvcuda__queue lnode;     /* the set's active, draining or idle queue */
  struct uvcuda__queue touch_node; /* the set's touched queue */
  struct uvcuda__predict pred;    /* adaptive spin: how long its work takes */
  struct uvcuda__modes modes;     /* and where its lengths cluster */
};

/* What a timeline learnt outlives it here (a stream that runs one future
 * at a time has no timeline between them): direct-mapped by stream id,
 * numbers only, never a handle. */
#define UVCUDA__PREDICT_SLOTS 64
struct uvcuda__predict_slot {
  unsigned long long stream_id;
  struct uvcuda__predict p;
  struct uvcuda__modes modes;
};

/* Idle timelines a loop keeps: a stream id is never reused, so one kept
 * for a destroyed stream is only memory and a counter until evicted. */
#define UVCUDA__TL_IDLE_MAX 64

/* The timelines of one loop. */
struct uvcuda__tlset {
  struct uvcuda__streams streams;
  struct uvcuda__queue active;   /* timelines with pending futures */
  struct uvcuda__queue draining; /* none pending, a GPU write still due */
  /* None pending, host functions due that a faulted or destroyed context
   * never runs: not walked by each pass as draining ones are. */
  struct uvcuda__queue dead;
  struct uvcuda__queue idle;     /* none pending, none due: oldest first */
  unsigned nidle;
  struct uvcuda__queue touched;  /* changed this pass: re-watch, maybe free */
  struct uvcuda__queue *dq;      /* where outcomes go */
  struct uvcuda__port *port;
  uvcuda_stats_t *stats;
  uvcuda_completion_t completion;
  uint32_t flags;  /* UVCUDA_OPT_* */
  int adaptive;    /* learn each timeline's durations (adapt.h) */
  int spin_events; /* host-function modes record an event */
  int memops64_bad, memops32_bad;
  int counters_bad; /* host memory can't be registered for counters */
  struct uvcuda__context **faulted; /* contexts counted in stats.faults */
  size_t nfaulted, faulted_cap;
  uint64_t harvests; /* tests count a wakeup's work */
  struct uvcuda__predict_slot learnt[UVCUDA__PREDICT_SLOTS]; /* adaptive */
};

/* Who saw the counters pass, for the stats. */
#define UVCUDA__SEEN_WAKE 0 /* reactor or host function */
#define UVCUDA__SEEN_POLL 1 /* the POLL strategy's pass */
#define UVCUDA__SEEN_LOOP 2 /* the loop's own spin or pre-wake poll */
/* The loop's first look at a pre-woken future, after its wake-up: done
 * then, it ended at some time before, not when seen. */
#define UVCUDA__SEEN_LOOP_FIRST 3

/* A harvested future's stats counter (f->done_by_), counted when its
 * callback runs with status 0: one closed before that is cancelled only. */
enum {
  UVCUDA__BY_SPIN = 1,
  UVCUDA__BY_REACTOR,
  UVCUDA__BY_HOSTFN,
  UVCUDA__BY_POLL
};

void uvcuda__tl_init(struct uvcuda__tlset *set);
/* The timeline of stream s, made on first use. For the NULL, legacy and
 * per-thread handles, the stream is the current context's. */
int uvcuda__tl_get(struct uvcuda__tlset *set, CUstream s,
                   struct uvcuda__timeline **out);
/* Whether tl, found for a start, is stale: made under a context record
 * that was since retired (a device reset) or faulted, while its stream may
 * live on in a context the driver kept. It is replaced once nothing refers
 * to it: no future, no watch the reactor holds (a settle lets go of it),
 * no GPU write or host-function ticket due. */
#define UVCUDA__TL_STALE 1         /* replaceable now */
#define UVCUDA__TL_STALE_WATCHED 2 /* replaceable after a settle */
int uvcuda__tl_stale(const struct uvcuda__timeline *tl);
/* Enqueues f's marker on s (its context current) and puts f on tl. */
int uvcuda__tl_mark(struct uvcuda__tlset *set, struct uvcuda__timeline *tl,
                    CUstream s, uvcuda_future_t *f);
/* Takes a pending f off its timeline (f closed in flight). */
void uvcuda__tl_remove(struct uvcuda__tlset *set, uvcuda_future_t *f);
/* Delivers the futures whose marker passed. */
uint64_t uvcuda__tl_harvest(struct uvcuda__tlset *set,
                            struct uvcuda__timeline *tl, int seen_by);
/* One spin poll: host-function timelines also query an event. */
void uvcuda__tl_spin_poll(struct uvcuda__tlset *set,
                          struct uvcuda__timeline *tl);
/* Host functions that ran (from the port), in order. */
void uvcuda__tl_tickets(struct uvcuda__tlset *set, struct uvcuda__queue *done);
/* Counts tl's context in stats.faults if it is in a sticky error (once
 * per loop; not one a reset retired). */
void uvcuda__tl_note_fault(struct uvcuda__tlset *set,
                           const struct uvcuda__timeline *tl);
/* Fails the futures of every timeline whose context is faulted. */
void uvcuda__tl_fail_faulted(struct uvcuda__tlset *set);
void uvcuda__tl_touch(struct uvcuda__tlset *set, struct uvcuda__timeline *tl);
/* The threshold the reactor should watch tl for, or 0. */
uint64_t uvcuda__tl_watch_want(const struct uvcuda__tlset *set,
                               const struct uvcuda__timeline *tl);
/* A touched timeline with no futures: kept idle if no write is due (the
 * oldest idle one freed beyond UVCUDA__TL_IDLE_MAX), else draining. Its
 * watch must be off. */
void uvcuda__tl_retire(struct uvcuda__tlset *set, struct uvcuda__timeline *tl);
/* stats.timelines: those with a pending future or something still due;
 * not the idle ones, nor a faulted context's. */
uint64_t uvcuda__tl_in_use(const struct uvcuda__tlset *set);
/* Frees the draining timelines whose writes have landed, or whose
 * context a probe (at most one per interval) finds faulted or gone: a
 * write due there never lands (cuCtxDestroy drops queued work). */
void uvcuda__tl_reap(struct uvcuda__tlset *set, uint64_t now,
                     uint64_t probe_interval);
/* Loop close: frees every timeline; counters with writes due drain in
 * their context's pool. No watch may be left. */
void uvcuda__tl_free_all(struct uvcuda__tlset *set);

/* tl's first pending future (its watch waits for it); tl has one. */
static inline uvcuda_future_t *uvcuda__tl_head(
    const struct uvcuda__timeline *tl) {
  return uvcuda__queue_data(uvcuda__queue_head(&tl->futures), uvcuda_future_t,
                            tl_node_);
}

static inline struct uvcuda__timeline *uvcuda__tl_of_watch(
    struct uvcuda__watch *w) {
  return uvcuda__queue_data(w, struct uvcuda__timeline, watch);
}

#endif
