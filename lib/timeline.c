/* Timelines: markers, harvest, faults, and their life in a loop. */
#include "timeline.h"

#include <stdlib.h>

#include "deliver.h"

#define future_of(q) uvcuda__queue_data(q, uvcuda_future_t, tl_node_)
#define tl_of(q, field) uvcuda__queue_data(q, struct uvcuda__timeline, field)

void uvcuda__tl_init(struct uvcuda__tlset *set) {
  uvcuda__streams_init(&set->streams);
  uvcuda__queue_init(&set->active);
  uvcuda__queue_init(&set->draining);
  uvcuda__queue_init(&set->dead);
  uvcuda__queue_init(&set->idle);
  uvcuda__queue_init(&set->touched);
}

static unsigned long long key_of(const struct uvcuda__queue *q) {
  return tl_of(q, hnode)->stream_id;
}

static int is_special(CUstream s) {
  return s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
}

static int wants_memops(const struct uvcuda__tlset *set) {
  switch (set->completion) {
    case UVCUDA_COMPLETION_AUTO:
    case UVCUDA_COMPLETION_REACTOR:
    case UVCUDA_COMPLETION_POLL: return 1;
    default: return 0;
  }
}

/* Host memory the driver won't map for the device (registration refused:
 * some VMs and sandboxes) is as final as refused memops: AUTO goes to
 * host functions for good, an explicit strategy says so. Running out of
 * pinned memory is not: that start fails, the next one tries again. */
static int counter_get(struct uvcuda__tlset *set, struct uvcuda__timeline *tl) {
  int err = uvcuda__context_counter_get(tl->ctx, &tl->counter);
  if (!uvcuda__counter_refused(err)) return err;
  set->counters_bad = 1;
  if (set->completion != UVCUDA_COMPLETION_AUTO) return UVCUDA_ENOTSUP;
  tl->mode = UVCUDA__TL_HOSTFN;
  set->stats->fallbacks++;
  return 0;
}

static int create(struct uvcuda__tlset *set, CUstream s, unsigned long long id,
                  struct uvcuda__timeline **out) {
  struct uvcuda__timeline *tl;
  struct uvcuda__context *x;
  CUcontext c = NULL;
  CUresult r;
  int err;

  r = is_special(s) ? uvcuda__drv.cuCtxGetCurrent(&c)
                    : uvcuda__drv.cuStreamGetCtx(s, &c);
  if (r != CUDA_SUCCESS) return UVCUDA_ECUDA(r);
  if (c == NULL) return UVCUDA_ECUDA(CUDA_ERROR_INVALID_CONTEXT);
  if ((err = uvcuda__context_get(c, &x)) != 0) return err;
  if ((tl = calloc(1, sizeof(*tl))) == NULL) {
    uvcuda__context_release(x);
    return UVCUDA_ENOMEM;
  }
  tl->stream_id = id;
  tl->special = is_special(s);
  tl->ctx = x;
  tl->mode = UVCUDA__TL_HOSTFN;
  uvcuda__queue_init(&tl->futures);
  uvcuda__queue_init(&tl->lnode);
  uvcuda__queue_init(&tl->touch_node);
  uvcuda__watch_init(&tl->watch, x);
  if (wants_memops(set)) {
    if (!set->counters_bad && !set->memops64_bad)
      tl->mode = UVCUDA__TL_MEM64;
    else if (!set->counters_bad && !set->memops32_bad)
      tl->mode = UVCUDA__TL_MEM32;
    else if (set->completion != UVCUDA_COMPLETION_AUTO)
      err = UVCUDA_ENOTSUP;
    else
      set->stats->fallbacks++;
    if (err == 0 && tl->mode != UVCUDA__TL_HOSTFN)
      err = counter_get(set, tl);
  }
  if (err == 0)
    err = uvcuda__streams_insert(&set->streams, id, &tl->hnode, key_of);
  if (err != 0) {
    uvcuda__context_counter_put(x, &tl->counter, tl->mode, 0);
    uvcuda__context_release(x);
    free(tl);
    return err;
  }
  tl->watch.host = tl->counter.host;
  tl->watch.mode = tl->mode;
  if (set->adaptive) {
    struct uvcuda__predict_slot *k = &set->learnt[id % UVCUDA__PREDICT_SLOTS];
    if (k->stream_id == id) {
      tl->pred = k->p;
      tl->modes = k->modes;
    }
  }
  *out = tl;
  return 0;
}

static void destroy(struct uvcuda__tlset *set, struct uvcuda__timeline *tl,
                    int write_due);

int uvcuda__tl_get(struct uvcuda__tlset *set, CUstream s,
                   struct uvcuda__timeline **out) {
  unsigned long long id;
  struct uvcuda__queue *q;
  CUresult r = uvcuda__drv.cuStreamGetId(s, &id);
  if (r != CUDA_SUCCESS) return UVCUDA_ECUDA(r);
  q = uvcuda__streams_find(&set->streams, id, key_of);
  if (q != NULL) {
    struct uvcuda__timeline *tl = tl_of(q, hnode);
    /* Till it can be replaced, a start on it fails as before. */
    if (uvcuda__tl_stale(tl) != UVCUDA__TL_STALE) {
      *out = tl;
      return 0;
    }
    destroy(set, tl, 0);
  }
  return create(set, s, id, out);
}

static void destroy(struct uvcuda__tlset *set, struct uvcuda__timeline *tl,
                    int write_due) {
  if (set->adaptive && tl->pred.n > 0) {
    struct uvcuda__predict_slot *k =
        &set->learnt[tl->stream_id % UVCUDA__PREDICT_SLOTS];
    k->stream_id = tl->stream_id;
    k->p = tl->pred;
    k->modes = tl->modes;
  }
  if (tl->idle) set->nidle--;
  uvcuda__streams_remove(&set->streams, &tl->hnode);
  uvcuda__queue_remove(&tl->lnode);
  uvcuda__queue_remove(&tl->touch_node);
  if (tl->mode != UVCUDA__TL_HOSTFN)
    uvcuda__context_counter_put(tl->ctx, &tl->counter, tl->mode,
                                write_due ? tl->next_seq : 0);
  uvcuda__context_release(tl->ctx);
  free(tl);
}

static CUresult launch_hostfn(struct uvcuda__tlset *set, CUstream s, void *t) {
  switch (set->completion) {
    case UVCUDA_COMPLETION_HOSTFN_SPIN:
      return uvcuda__drv.cuLaunchHostFunc_v2(s, uvcuda__hostfn, t,
                                             UVCUDA__HOST_TASK_SPINWAIT);
    case UVCUDA_COMPLETION_HOSTFN_BLOCK:
      return uvcuda__drv.cuLaunchHostFunc_v2(s, uvcuda__hostfn, t,
                                             UVCUDA__HOST_TASK_BLOCKING);
    default: return uvcuda__drv.cuLaunchHostFunc(s, uvcuda__hostfn, t);
  }
}

/* A fresh timeline whose first write is refused (801) drops to 32 bits,
 * then to host functions (AUTO only), and the set remembers it. */
static int downgrade(struct uvcuda__tlset *set, struct uvcuda__timeline *tl,
                     CUresult r) {
  if (r != CUDA_ERROR_NOT_SUPPORTED || tl->next_seq != 0)
    return UVCUDA_ECUDA(r);
  if (tl->mode == UVCUDA__TL_MEM64) {
    set->memops64_bad = 1;
    tl->mode = UVCUDA__TL_MEM32;
  } else {
    set->memops32_bad = 1;
    if (set->completion != UVCUDA_COMPLETION_AUTO) return UVCUDA_ENOTSUP;
    uvcuda__context_counter_put(tl->ctx, &tl->counter, tl->mode, 0);
    tl->mode = UVCUDA__TL_HOSTFN;
    tl->watch.host = NULL;
    set->stats->fallbacks++;
  }
  tl->watch.mode = tl->mode;
  return 0;
}

static int enqueue_marker(struct uvcuda__tlset *set,
                          struct uvcuda__timeline *tl, CUstream s, uint64_t seq,
                          uvcuda_future_t *f) {
  struct uvcuda__ticket *t;
  CUresult r;
  int err;

  for (;;) {
    if (tl->mode == UVCUDA__TL_MEM64)
      r = uvcuda__drv.cuStreamWriteValue64(s, tl->counter.dptr, seq, 0);
    else if (tl->mode == UVCUDA__TL_MEM32)
      r = uvcuda__drv.cuStreamWriteValue32(s, tl->counter.dptr, (cuuint32_t)seq,
                                           0);
    else
      break;
    if (r == CUDA_SUCCESS) return 0;
    if ((err = downgrade(set, tl, r)) != 0) return err;
  }
  t = uvcuda__ticket_new(set->port, tl, seq);
  if (t == NULL) return UVCUDA_ENOMEM;
  r = launch_hostfn(set, s, t);
  if (r != CUDA_SUCCESS) {
    uvcuda__ticket_abort(t);
    return UVCUDA_ECUDA(r);
  }
  tl->tickets_out++;
  /* Host functions take tens of µs to run: an event lets the spin see
   * short work finish sooner. */
  if (set->spin_events) {
    CUevent ev = uvcuda__context_event_get(tl->ctx);
    if (ev != NULL && uvcuda__drv.cuEventRecord(ev, s) == CUDA_SUCCESS)
      f->event_ = ev;
    else if (ev != NULL)
      uvcuda__context_event_put(tl->ctx, ev);
  }
  return 0;
}

int uvcuda__tl_mark(struct uvcuda__tlset *set, struct uvcuda__timeline *tl,
                    CUstream s, uvcuda_future_t *f) {
  uint64_t seq = tl->next_seq + 1;
  int err;

  f->event_ = NULL;
  if ((err = enqueue_marker(set, tl, s, seq, f)) != 0) {
    if (uvcuda__queue_empty(&tl->futures)) uvcuda__tl_touch(set, tl);
    return err;
  }
  tl->next_seq = seq;
  f->seq_ = seq;
  f->tl_ = tl;
  uvcuda__queue_insert_tail(&tl->futures, &f->tl_node_);
  /* Active from here (it may have been draining, idle, or on no queue). */
  uvcuda__queue_remove(&tl->lnode);
  uvcuda__queue_insert_tail(&set->active, &tl->lnode);
  if (tl->idle) {
    tl->idle = 0;
    set->nidle--;
  }
  return 0;
}

void uvcuda__tl_touch(struct uvcuda__tlset *set, struct uvcuda__timeline *tl) {
  if (uvcuda__queue_empty(&tl->touch_node))
    uvcuda__queue_insert_tail(&set->touched, &tl->touch_node);
}

/* Unhooks f from its timeline: nothing reads it after this. */
static void unhook(struct uvcuda__timeline *tl, uvcuda_future_t *f) {
  uvcuda__queue_remove(&f->tl_node_);
  if (f->state_ == UVCUDA_FUTURE_ARMED) tl->armed--;
  if (f->event_ != NULL) {
    uvcuda__context_event_put(tl->ctx, f->event_);
    f->event_ = NULL;
  }
  f->tl_ = NULL;
}

void uvcuda__tl_remove(struct uvcuda__tlset *set, uvcuda_future_t *f) {
  struct uvcuda__timeline *tl = f->tl_;
  if (tl == NULL) return;
  unhook(tl, f);
  uvcuda__tl_touch(set, tl); /* its watch moves on; maybe now free */
}

static int passed(const struct uvcuda__timeline *tl, uint64_t seq) {
  if (tl->mode == UVCUDA__TL_HOSTFN) return tl->done_seq >= seq;
  return uvcuda__counter_passed(
      uvcuda__counter_load(tl->counter.host, tl->mode), tl->mode, seq);
}

/* No GPU write or ticket is due to tl. A ticket holds a pointer to its
 * timeline, so a host-function timeline waits for every ticket, fault or
 * not (one that ran just before the fault comes back after it); counters
 * are ours to keep, and no write lands after a fault. */
static int quiescent(const struct uvcuda__timeline *tl) {
  if (tl->mode == UVCUDA__TL_HOSTFN) return tl->tickets_out == 0;
  if (tl->faulted || uvcuda__context_fault(tl->ctx) != 0) return 1;
  return passed(tl, tl->next_seq);
}

int uvcuda__tl_stale(const struct uvcuda__timeline *tl) {
  if (!uvcuda__queue_empty(&tl->futures) ||
      uvcuda__context_fault(tl->ctx) == 0)
    return 0;
  if (tl->watched != 0) return UVCUDA__TL_STALE_WATCHED;
  return quiescent(tl) ? UVCUDA__TL_STALE : 0;
}

/* A sighting this close after a look that found the work not done is
 * exact: whoever saw it was polling. */
#define EXACT_GAP_NS 2000u

/* Adaptive spin: the first future a harvest finds done is a sample, from
 * its start (or its predecessor's end, if later) to when it was seen. The
 * ones found with it ended at some unknown earlier time: no sample.
 * `after` (0: none) is the last look that found it not done, so the work
 * ended in (after, seen]; `early`: seen at the first look inside its
 * predicted window. */
static void learn(struct uvcuda__timeline *tl, uvcuda_future_t *f,
                  uint64_t seen, uint64_t after, int early) {
  struct uvcuda__predict *p = &tl->pred;
  uint64_t from = f->start_ns_ > p->last_ns ? f->start_ns_ : p->last_ns;
  uint64_t d = seen > from ? seen - from : 0;
  if (early && p->n > 0) {
    /* Done before the first look of its window: `seen` is only a bound,
     * so the estimate moves earlier by a deviation instead of later. */
    uint64_t step = p->dev_ns > 2000u ? p->dev_ns : 2000u;
    d = d < p->mean_ns ? d : p->mean_ns;
    d = d > step ? d - step : 0;
  } else if (after > from && seen > after + EXACT_GAP_NS) {
    /* Seen by a reactor backing off: it ended between two looks. */
    d = after + (seen - after) / 2 - from;
  }
  if (d > 0) {
    uvcuda__predict_add(p, d);
    uvcuda__modes_add(&tl->modes, d);
  }
  p->last_ns = seen;
}

uint64_t uvcuda__tl_harvest(struct uvcuda__tlset *set,
                            struct uvcuda__timeline *tl, int seen_by) {
  uvcuda_future_t *f;
  uint64_t n = 0, seen = 0;
  int want_seen = (set->flags & UVCUDA_OPT_TIMING) ||
                  (set->adaptive && tl->mode != UVCUDA__TL_HOSTFN);

  set->harvests++;
  while (!uvcuda__queue_empty(&tl->futures)) {
    f = future_of(uvcuda__queue_head(&tl->futures));
    if (!passed(tl, f->seq_)) break;
    if (want_seen && seen == 0) {
      if (tl->seen_ns != 0) { /* a wake source's sighting */
        seen = tl->seen_ns;
        if (set->adaptive)
          learn(tl, f, seen,
                tl->polled_ns > tl->after_ns ? tl->polled_ns : tl->after_ns,
                tl->seen_early);
      } else { /* the loop's own look: now */
        seen = uv_hrtime();
        if (set->adaptive)
          learn(tl, f, seen, 0, seen_by == UVCUDA__SEEN_LOOP_FIRST);
      }
    }
    f->seen_ns_ = seen;
    if (f->state_ == UVCUDA_FUTURE_SPINNING)
      f->done_by_ = UVCUDA__BY_SPIN;
    else if (seen_by != UVCUDA__SEEN_WAKE) /* the loop's own look: no wake-up */
      f->done_by_ = seen_by == UVCUDA__SEEN_POLL ||
                            set->completion == UVCUDA_COMPLETION_POLL
                        ? UVCUDA__BY_POLL
                        : UVCUDA__BY_SPIN;
    else if (tl->mode == UVCUDA__TL_HOSTFN)
      f->done_by_ = UVCUDA__BY_HOSTFN;
    else
      f->done_by_ = UVCUDA__BY_REACTOR;
    unhook(tl, f);
    /* Done, but a reset destroyed the context before the loop saw it: it
     * fails as the reset's pending futures do (api.md), since the reset
     * freed what the work wrote if it wrote the context's cuMemHostAlloc
     * memory: a callback with status 0 would read freed memory. */
    uvcuda__deliver_push(set->dq, f,
                         uvcuda__context_dead(tl->ctx)
                             ? UVCUDA_ECUDA(uvcuda__context_fault(tl->ctx))
                             : 0);
    n++;
  }
  if (n > 0) {
    if (seen == 0) seen = tl->seen_ns ? tl->seen_ns : uv_hrtime();
    tl->done_ns = seen;
    tl->polled_ns = 0;
    if (set->adaptive) tl->pred.last_ns = seen;
    uvcuda__tl_touch(set, tl);
  }
  tl->seen_ns = tl->after_ns = 0;
  tl->seen_early = 0;
  return n;
}

void uvcuda__tl_spin_poll(struct uvcuda__tlset *set,
                          struct uvcuda__timeline *tl) {
  struct uvcuda__drvscope sc;
  uvcuda_future_t *f;

  if (tl->mode == UVCUDA__TL_HOSTFN && !uvcuda__queue_empty(&tl->futures) &&
      uvcuda__context_pin(tl->ctx)) {
    /* The newest event, then the oldest: at most two queries (of named
     * events: they need no context current). */
    (void)uvcuda__drv_enter(&sc, tl->ctx->cuctx);
    f = future_of(uvcuda__queue_last(&tl->futures));
    if (f->event_ == NULL ||
        uvcuda__drv.cuEventQuery(f->event_) != CUDA_SUCCESS)
      f = future_of(uvcuda__queue_head(&tl->futures));
    if (f->event_ != NULL && f->seq_ > tl->done_seq &&
        uvcuda__drv.cuEventQuery(f->event_) == CUDA_SUCCESS)
      tl->done_seq = f->seq_;
    uvcuda__drv_leave(&sc);
    uvcuda__context_unpin(tl->ctx);
  }
  uvcuda__tl_harvest(set, tl, UVCUDA__SEEN_LOOP);
}

void uvcuda__tl_tickets(struct uvcuda__tlset *set, struct uvcuda__queue *done) {
  struct uvcuda__queue *q;
  while (!uvcuda__queue_empty(done)) {
    struct uvcuda__ticket *t;
    struct uvcuda__timeline *tl;
    q = uvcuda__queue_head(done);
    uvcuda__queue_remove(q);
    t = uvcuda__queue_data(q, struct uvcuda__ticket, node);
    tl = t->tl;
    tl->tickets_out--;
    if (t->seq > tl->done_seq) tl->done_seq = t->seq;
    if (t->seen_ns > tl->seen_ns) tl->seen_ns = t->seen_ns;
    uvcuda__tl_touch(set, tl);
    uvcuda__ticket_release(t);
  }
}

/* stats.faults counts contexts: each one once per loop. */
static void count_fault(struct uvcuda__tlset *set, struct uvcuda__context *x) {
  size_t i;
  for (i = 0; i < set->nfaulted; i++)
    if (set->faulted[i] == x) return;
  if (set->nfaulted == set->faulted_cap) {
    size_t cap = set->faulted_cap ? set->faulted_cap * 2 : 4;
    void *p = realloc(set->faulted, cap * sizeof(*set->faulted));
    if (p == NULL) return; /* a statistic: uncounted */
    set->faulted = p;
    set->faulted_cap = cap;
  }
  set->faulted[set->nfaulted++] = x;
  uvcuda__context_ref(x); /* compared by address: not freed meanwhile */
  set->stats->faults++;
}

/* r: its context's fault. One a reset retired is no sticky error found. */
static void note_fault(struct uvcuda__tlset *set, struct uvcuda__context *x,
                       int r) {
  if (r != 0 &&
      !(r == CUDA_ERROR_CONTEXT_IS_DESTROYED && atomic_load(&x->dead)))
    count_fault(set, x);
}

void uvcuda__tl_note_fault(struct uvcuda__tlset *set,
                           const struct uvcuda__timeline *tl) {
  note_fault(set, tl->ctx, uvcuda__context_fault(tl->ctx));
}

void uvcuda__tl_fail_faulted(struct uvcuda__tlset *set) {
  struct uvcuda__queue *q, *next;
  for (q = set->active.next; q != &set->active; q = next) {
    struct uvcuda__timeline *tl = tl_of(q, lnode);
    int r = uvcuda__context_fault(tl->ctx);
    next = q->next;
    if (r == 0 || tl->faulted) continue;
    note_fault(set, tl->ctx, r);
    tl->faulted = 1;
    while (!uvcuda__queue_empty(&tl->futures)) {
      uvcuda_future_t *f = future_of(uvcuda__queue_head(&tl->futures));
      unhook(tl, f);
      uvcuda__deliver_push(set->dq, f, UVCUDA_ECUDA(r));
    }
    uvcuda__tl_touch(set, tl);
  }
}

uint64_t uvcuda__tl_watch_want(const struct uvcuda__tlset *set,
                               const struct uvcuda__timeline *tl) {
  if (set->completion == UVCUDA_COMPLETION_POLL || tl->faulted ||
      tl->armed == 0 || uvcuda__queue_empty(&tl->futures))
    return 0;
  return future_of(uvcuda__queue_head(&tl->futures))->seq_;
}

void uvcuda__tl_retire(struct uvcuda__tlset *set, struct uvcuda__timeline *tl) {
  if (!uvcuda__queue_empty(&tl->futures)) return;
  if (quiescent(tl)) {
    /* A faulted context's streams have no next future to wait for. The
     * NULL, legacy and per-thread handles name the current context's
     * stream: whether their ids differ between contexts is not measured,
     * so they are not kept for a start under another context. */
    if (tl->special || tl->faulted || uvcuda__context_fault(tl->ctx) != 0) {
      destroy(set, tl, 0);
      return;
    }
    uvcuda__queue_remove(&tl->lnode);
    uvcuda__queue_insert_tail(&set->idle, &tl->lnode); /* the newest */
    if (!tl->idle) {
      tl->idle = 1;
      set->nidle++;
    }
    if (set->nidle > UVCUDA__TL_IDLE_MAX)
      destroy(set, tl_of(uvcuda__queue_head(&set->idle), lnode), 0);
    return;
  }
  uvcuda__queue_remove(&tl->lnode);
  uvcuda__queue_insert_tail(&set->draining, &tl->lnode);
}

uint64_t uvcuda__tl_in_use(const struct uvcuda__tlset *set) {
  const struct uvcuda__queue *q;
  uint64_t n = set->streams.n - set->nidle;
  /* A draining timeline of a faulted context waits only for host
   * functions the driver will never run: nothing is due to it. */
  for (q = set->draining.next; q != &set->draining; q = q->next)
    if (uvcuda__context_fault(tl_of(q, lnode)->ctx) != 0) n--;
  for (q = set->dead.next; q != &set->dead; q = q->next) n--;
  return n;
}

void uvcuda__tl_reap(struct uvcuda__tlset *set, uint64_t now,
                     uint64_t probe_interval) {
  struct uvcuda__queue *q, *next;
  for (q = set->draining.next; q != &set->draining; q = next) {
    struct uvcuda__timeline *tl = tl_of(q, lnode);
    next = q->next;
    if (!uvcuda__queue_empty(&tl->touch_node)) continue;
    /* Not landed yet: is the context still there to write it? */
    if (!quiescent(tl) &&
        uvcuda__context_probe(tl->ctx, now, probe_interval) != 0 &&
        !quiescent(tl)) {
      /* Host functions out on a dead context: a ticket that still comes
       * back touches the timeline, which then leaves this queue. */
      uvcuda__queue_remove(&tl->lnode);
      uvcuda__queue_insert_tail(&set->dead, &tl->lnode);
      continue;
    }
    if (quiescent(tl)) destroy(set, tl, 0);
  }
}

void uvcuda__tl_free_all(struct uvcuda__tlset *set) {
  uint64_t i;
  for (i = 0; i < set->streams.nbuckets; i++) {
    struct uvcuda__queue *h = &set->streams.buckets[i];
    while (!uvcuda__queue_empty(h)) {
      struct uvcuda__timeline *tl = tl_of(uvcuda__queue_head(h), hnode);
      destroy(set, tl, !quiescent(tl));
    }
  }
  uvcuda__streams_free(&set->streams);
  for (i = 0; i < set->nfaulted; i++) uvcuda__context_release(set->faulted[i]);
  free(set->faulted);
  set->faulted = NULL;
  set->nfaulted = set->faulted_cap = 0;
}
