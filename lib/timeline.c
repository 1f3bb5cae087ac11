/* Timelines: one per (loop, stream). Each future gets the next sequence
 * number of its stream's timeline and a marker after its op: the GPU writes
 * the number into a host-pinned counter (cuStreamWriteValue64/32), or, in
 * the host-function modes, a host function hands back a ticket carrying it.
 * A future is done when the timeline's done sequence reaches its own: later
 * work on the stream does not delay it, and futures of one stream complete
 * in stream order. No slot pool: a counter per stream, futures unbounded. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#define SLOTS_PER_PAGE 64
#define SLOT_STRIDE 64 /* one cache line per counter */

/* ---- hash of (stream, context) -> timeline ---- */

static uint64_t hash_key(CUstream s, CUcontext c) {
  uint64_t h = (uint64_t)(uintptr_t)s * 0x9e3779b97f4a7c15ull;
  h ^= (uint64_t)(uintptr_t)c * 0xc2b2ae3d27d4eb4full;
  return h ^ (h >> 29);
}

/* Ordinary stream handles are unique among live streams; the special
 * handles name a different stream in every context. */
static CUcontext key_ctx(CUcontext c, int special) {
  return special ? c : NULL;
}

struct uvcuda__timeline *uvcuda__tl_find(struct uvcuda__loop *l, CUstream s,
                                         CUcontext cuctx, int special) {
  struct uvcuda__timeline *tl;
  CUcontext kc = key_ctx(cuctx, special);
  if (l->nbuckets == 0) return NULL;
  tl = l->buckets[hash_key(s, kc) & (l->nbuckets - 1)];
  for (; tl; tl = tl->hnext)
    if (tl->stream == s && key_ctx(tl->cuctx, tl->special) == kc) return tl;
  return NULL;
}

static int hash_grow(struct uvcuda__loop *l) {
  uint64_t n = l->nbuckets ? l->nbuckets * 2 : 64, i;
  struct uvcuda__timeline **b = calloc(n, sizeof(*b)), *tl, *next;
  if (b == NULL) return UVCUDA_ENOMEM;
  for (i = 0; i < l->nbuckets; i++) {
    for (tl = l->buckets[i]; tl; tl = next) {
      uint64_t h = hash_key(tl->stream, key_ctx(tl->cuctx, tl->special));
      next = tl->hnext;
      tl->hnext = b[h & (n - 1)];
      b[h & (n - 1)] = tl;
    }
  }
  free(l->buckets);
  l->buckets = b;
  l->nbuckets = n;
  return 0;
}

static void hash_remove(struct uvcuda__loop *l, struct uvcuda__timeline *tl) {
  uint64_t h = hash_key(tl->stream, key_ctx(tl->cuctx, tl->special));
  struct uvcuda__timeline **pp = &l->buckets[h & (l->nbuckets - 1)];
  for (; *pp; pp = &(*pp)->hnext) {
    if (*pp == tl) {
      *pp = tl->hnext;
      return;
    }
  }
}

/* ---- pinned counters ---- */

static int slot_get(struct uvcuda__loop *l, struct uvcuda__timeline *tl) {
  struct uvcuda__slot_page *pg = l->free_pages;
  CUresult r;
  int i;

  if (pg == NULL) {
    pg = calloc(1, sizeof(*pg));
    if (pg == NULL) return UVCUDA_ENOMEM;
    /* PORTABLE: usable from every context; DEVICEMAP: the GPU writes it.
     * Not WRITECOMBINED: the CPU reads these. */
    r = uvcuda__drv.cuMemHostAlloc(&pg->host, SLOTS_PER_PAGE * SLOT_STRIDE,
                                   CU_MEMHOSTALLOC_PORTABLE |
                                       CU_MEMHOSTALLOC_DEVICEMAP);
    if (r != CUDA_SUCCESS) {
      free(pg);
      return UVCUDA_ECUDA(r);
    }
    r = uvcuda__drv.cuMemHostGetDevicePointer(&pg->dptr, pg->host, 0);
    if (r != CUDA_SUCCESS) {
      uvcuda__drv.cuMemFreeHost(pg->host);
      free(pg);
      return UVCUDA_ECUDA(r);
    }
    uvcuda__drv.cuCtxGetCurrent(&pg->cuctx);
    pg->next = l->pages;
    l->pages = pg;
    pg->fnext = NULL;
    pg->in_free = 1;
    l->free_pages = pg;
  }
  i = __builtin_ctzll(~pg->used);
  pg->used |= 1ull << i;
  if (pg->used == ~0ull) { /* full: off the free list */
    l->free_pages = pg->fnext;
    pg->in_free = 0;
  }
  tl->page = pg;
  tl->slot_index = i;
  tl->slot = (char *)pg->host + (size_t)i * SLOT_STRIDE;
  tl->dptr = pg->dptr + (CUdeviceptr)i * SLOT_STRIDE;
  /* Only quiescent counters are recycled: no GPU write is still due. */
  __atomic_store_n((uint64_t *)tl->slot, 0, __ATOMIC_RELAXED);
  return 0;
}

static void slot_put(struct uvcuda__loop *l, struct uvcuda__timeline *tl) {
  struct uvcuda__slot_page *pg = tl->page;
  if (pg == NULL) return;
  pg->used &= ~(1ull << tl->slot_index);
  if (!pg->in_free) {
    pg->in_free = 1;
    pg->fnext = l->free_pages;
    l->free_pages = pg;
  }
  tl->page = NULL;
  tl->slot = NULL;
}

/* ---- events for spinning in the host-function modes ---- */

static struct uvcuda__evpool *evpool(struct uvcuda__loop *l, CUcontext c) {
  struct uvcuda__evpool *p;
  for (p = l->evpools; p; p = p->next)
    if (p->cuctx == c) return p;
  p = calloc(1, sizeof(*p));
  if (p == NULL) return NULL;
  p->cuctx = c;
  p->next = l->evpools;
  l->evpools = p;
  return p;
}

/* Caller has the stream's context current. NULL: spin without an event. */
static CUevent event_get(struct uvcuda__loop *l, CUcontext c) {
  struct uvcuda__evpool *p = evpool(l, c);
  CUevent ev;
  if (p != NULL && p->n > 0) return p->ev[--p->n];
  if (uvcuda__drv.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
    return NULL;
  return ev;
}

void uvcuda__event_put(struct uvcuda__loop *l, CUcontext c, CUevent ev) {
  struct uvcuda__evpool *p = evpool(l, c);
  if (p != NULL && p->n == p->cap) {
    unsigned cap = p->cap ? p->cap * 2 : 16;
    CUevent *n = realloc(p->ev, cap * sizeof(*n));
    if (n != NULL) {
      p->ev = n;
      p->cap = cap;
    }
  }
  if (p != NULL && p->n < p->cap) {
    p->ev[p->n++] = ev;
    return;
  }
  CUcontext prev = uvcuda__ctx_enter(c);
  uvcuda__drv.cuEventDestroy(ev);
  uvcuda__ctx_leave(prev, c);
}

void uvcuda__evpools_free(struct uvcuda__loop *l) {
  struct uvcuda__evpool *p, *next;
  for (p = l->evpools; p; p = next) {
    CUcontext prev = uvcuda__ctx_enter(p->cuctx);
    next = p->next;
    while (p->n > 0) uvcuda__drv.cuEventDestroy(p->ev[--p->n]);
    uvcuda__ctx_leave(prev, p->cuctx);
    free(p->ev);
    free(p);
  }
  l->evpools = NULL;
}

/* ---- timeline life ---- */

static void active_add(struct uvcuda__loop *l, struct uvcuda__timeline *tl) {
  if (tl->in_active) return;
  tl->in_active = 1;
  tl->aprev = NULL;
  tl->anext = l->active;
  if (l->active) l->active->aprev = tl;
  l->active = tl;
}

static void active_del(struct uvcuda__loop *l, struct uvcuda__timeline *tl) {
  if (!tl->in_active) return;
  if (tl->aprev) tl->aprev->anext = tl->anext; else l->active = tl->anext;
  if (tl->anext) tl->anext->aprev = tl->aprev;
  tl->in_active = 0;
  tl->anext = tl->aprev = NULL;
}

static int wants_memops(const struct uvcuda__loop *l) {
  switch (l->opts.completion) {
    case UVCUDA_COMPLETION_AUTO:
    case UVCUDA_COMPLETION_REACTOR:
    case UVCUDA_COMPLETION_POLL:
      return 1;
    default:
      return 0;
  }
}

int uvcuda__tl_create(struct uvcuda__loop *l, CUstream s, CUcontext cuctx,
                      int special, struct uvcuda__timeline **out) {
  struct uvcuda__timeline *tl;
  uint64_t h;
  int err;

  if (l->ntimelines + 1 > l->nbuckets && (err = hash_grow(l)) != 0) return err;
  tl = calloc(1, sizeof(*tl));
  if (tl == NULL) return UVCUDA_ENOMEM;
  tl->stream = s;
  tl->cuctx = cuctx;
  tl->special = special;
  tl->mode = UVCUDA__TL_HOSTFN;
  if (wants_memops(l)) {
    if (!l->memops64_bad)
      tl->mode = UVCUDA__TL_MEM64;
    else if (!l->memops32_bad)
      tl->mode = UVCUDA__TL_MEM32;
    else if (l->opts.completion != UVCUDA_COMPLETION_AUTO) {
      free(tl);
      return UVCUDA_ENOTSUP;
    } else {
      l->stats.fallbacks++;
    }
    if (tl->mode != UVCUDA__TL_HOSTFN && (err = slot_get(l, tl)) != 0) {
      free(tl);
      return err;
    }
  }
  h = hash_key(s, key_ctx(cuctx, special));
  tl->hnext = l->buckets[h & (l->nbuckets - 1)];
  l->buckets[h & (l->nbuckets - 1)] = tl;
  l->ntimelines++;
  l->stats.timelines = l->ntimelines;
  *out = tl;
  return 0;
}

static void tl_destroy(struct uvcuda__loop *l, struct uvcuda__timeline *tl) {
  if (tl->r_shadow) uvcuda__reactor_disarm(l, tl);
  active_del(l, tl);
  hash_remove(l, tl);
  slot_put(l, tl);
  l->ntimelines--;
  l->stats.timelines = l->ntimelines;
  free(tl);
}

static int is_not_supported(CUresult r) {
  return r == CUDA_ERROR_NOT_SUPPORTED;
}

static CUresult launch_hostfn(struct uvcuda__loop *l, CUstream s, void *t) {
  switch (l->opts.completion) {
    case UVCUDA_COMPLETION_HOSTFN_SPIN:
      return uvcuda__drv.cuLaunchHostFunc_v2(s, uvcuda__hostfn, t,
                                             UVCUDA__HOST_TASK_SPINWAIT);
    case UVCUDA_COMPLETION_HOSTFN_BLOCK:
      return uvcuda__drv.cuLaunchHostFunc_v2(s, uvcuda__hostfn, t,
                                             UVCUDA__HOST_TASK_BLOCKING);
    default:
      return uvcuda__drv.cuLaunchHostFunc(s, uvcuda__hostfn, t);
  }
}

/* Enqueues f's marker; the stream's context is current. A fresh timeline
 * whose first write is refused (801) drops to 32 bits, then to host
 * functions (AUTO only), and the loop remembers it for later timelines. */
int uvcuda__tl_mark(struct uvcuda__loop *l, struct uvcuda__timeline *tl,
                    uvcuda_future_t *f) {
  uint64_t seq = tl->next_seq + 1;
  struct uvcuda__ticket *t;
  CUresult r;

  for (;;) {
    switch (tl->mode) {
      case UVCUDA__TL_MEM64:
        r = uvcuda__drv.cuStreamWriteValue64(tl->stream, tl->dptr, seq, 0);
        if (r == CUDA_SUCCESS) goto marked;
        if (!is_not_supported(r) || tl->next_seq != 0) return UVCUDA_ECUDA(r);
        l->memops64_bad = 1;
        tl->mode = UVCUDA__TL_MEM32;
        continue;
      case UVCUDA__TL_MEM32:
        r = uvcuda__drv.cuStreamWriteValue32(tl->stream, tl->dptr,
                                             (cuuint32_t)seq, 0);
        if (r == CUDA_SUCCESS) goto marked;
        if (!is_not_supported(r) || tl->next_seq != 0) return UVCUDA_ECUDA(r);
        l->memops32_bad = 1;
        if (l->opts.completion != UVCUDA_COMPLETION_AUTO)
          return UVCUDA_ENOTSUP;
        slot_put(l, tl);
        tl->mode = UVCUDA__TL_HOSTFN;
        l->stats.fallbacks++;
        continue;
      default:
        t = uvcuda__ticket_new(l->port, tl, seq);
        if (t == NULL) return UVCUDA_ENOMEM;
        r = launch_hostfn(l, tl->stream, t);
        if (r != CUDA_SUCCESS) {
          uvcuda__ticket_abort(t);
          return UVCUDA_ECUDA(r);
        }
        tl->tickets_out++;
        /* Host functions take tens of µs to run: an event lets the spin
         * see short work finish sooner. */
        if (l->opts.spin_budget_ns > 0) {
          CUevent ev = event_get(l, tl->cuctx);
          if (ev != NULL) {
            if (uvcuda__drv.cuEventRecord(ev, tl->stream) == CUDA_SUCCESS)
              f->event_ = ev;
            else
              uvcuda__event_put(l, tl->cuctx, ev);
          }
        }
        goto marked;
    }
  }
marked:
  tl->next_seq = seq;
  f->seq_ = seq;
  return 0;
}

void uvcuda__tl_push(struct uvcuda__loop *l, struct uvcuda__timeline *tl,
                     uvcuda_future_t *f) {
  f->timeline_ = tl;
  f->tl_next_ = NULL;
  f->tl_prev_ = tl->tail;
  if (tl->tail) tl->tail->tl_next_ = f; else tl->head = f;
  tl->tail = f;
  tl->pending++;
  active_add(l, tl);
}

void uvcuda__tl_touch(struct uvcuda__loop *l, struct uvcuda__timeline *tl,
                      int sync) {
  if (!tl->touched) {
    tl->touched = 1;
    tl->tnext = l->touched;
    l->touched = tl;
  }
  if (sync && !tl->need_sync) {
    tl->need_sync = 1;
    l->nneed_sync++;
  }
}

static void spin_unlink(struct uvcuda__loop *l, uvcuda_future_t *f) {
  if (f->spin_prev_) f->spin_prev_->spin_next_ = f->spin_next_;
  else l->spin_head = f->spin_next_;
  if (f->spin_next_) f->spin_next_->spin_prev_ = f->spin_prev_;
  else l->spin_tail = f->spin_prev_;
  f->spin_next_ = f->spin_prev_ = NULL;
}

void uvcuda__tl_remove(struct uvcuda__loop *l, uvcuda_future_t *f) {
  struct uvcuda__timeline *tl = f->timeline_;
  if (tl == NULL) return;
  if (f->tl_prev_) f->tl_prev_->tl_next_ = f->tl_next_; else tl->head = f->tl_next_;
  if (f->tl_next_) f->tl_next_->tl_prev_ = f->tl_prev_; else tl->tail = f->tl_prev_;
  f->tl_next_ = f->tl_prev_ = NULL;
  tl->pending--;
  if (f->state_ == UVCUDA_FUTURE_SPINNING) spin_unlink(l, f);
  if (f->state_ == UVCUDA_FUTURE_ARMED) tl->armed--;
  if (f->event_ != NULL) {
    uvcuda__event_put(l, tl->cuctx, (CUevent)f->event_);
    f->event_ = NULL;
  }
  f->timeline_ = NULL;
  /* The watch's threshold moved on (one sync per pass); maybe now free. */
  uvcuda__tl_touch(l, tl, tl->r_shadow);
}

uint64_t uvcuda__tl_done(struct uvcuda__loop *l, struct uvcuda__timeline *tl) {
  uint32_t v, diff;
  (void)l;
  switch (tl->mode) {
    case UVCUDA__TL_MEM64:
      return __atomic_load_n((uint64_t *)tl->slot, __ATOMIC_ACQUIRE);
    case UVCUDA__TL_MEM32:
      /* Wrap-safe: the counter trails next_seq by less than 2^31. */
      v = __atomic_load_n((uint32_t *)tl->slot, __ATOMIC_ACQUIRE);
      diff = (uint32_t)tl->next_seq - v;
      return diff > 0x7fffffffu ? tl->next_seq : tl->next_seq - diff;
    default:
      return tl->done_seq;
  }
}

int uvcuda__tl_quiescent(struct uvcuda__loop *l, struct uvcuda__timeline *tl) {
  if (tl->faulted) return 1; /* a write after a fault never lands */
  if (tl->mode == UVCUDA__TL_HOSTFN) return tl->tickets_out == 0;
  return uvcuda__tl_done(l, tl) >= tl->next_seq;
}

uint64_t uvcuda__tl_harvest(struct uvcuda__loop *l, struct uvcuda__timeline *tl,
                            int src) {
  uvcuda_future_t *f;
  uint64_t done, n = 0, seen = 0;

  l->harvests++;
  if (tl->head == NULL) {
    tl->seen_ns = 0;
    return 0;
  }
  done = uvcuda__tl_done(l, tl);
  if ((l->opts.flags & UVCUDA_OPT_TIMING) && tl->head->seq_ <= done)
    seen = tl->seen_ns ? tl->seen_ns : uv_hrtime(); /* else seen right now */
  tl->seen_ns = 0;
  while ((f = tl->head) != NULL && f->seq_ <= done) {
    f->seen_ns_ = seen;
    if (f->state_ == UVCUDA_FUTURE_SPINNING)
      l->stats.completed_spin++;
    else if (src == 1)
      l->stats.completed_poll++;
    else if (tl->mode == UVCUDA__TL_HOSTFN)
      l->stats.completed_hostfn++;
    else
      l->stats.completed_reactor++;
    uvcuda__tl_remove(l, f);
    uvcuda__complete(l, f, 0);
    n++;
  }
  return n;
}

/* One spin poll: a memory read for timelines; for host-function timelines
 * at most two event queries (newest, then oldest pending). */
void uvcuda__tl_spin_poll(struct uvcuda__loop *l, struct uvcuda__timeline *tl) {
  uvcuda_future_t *f;
  if (tl->mode == UVCUDA__TL_HOSTFN && tl->head != NULL) {
    CUcontext prev = uvcuda__ctx_enter(tl->cuctx);
    f = tl->tail;
    if (f->event_ && uvcuda__drv.cuEventQuery((CUevent)f->event_) == CUDA_SUCCESS) {
      if (f->seq_ > tl->done_seq) tl->done_seq = f->seq_;
    } else if ((f = tl->head) != tl->tail && f->event_ &&
               uvcuda__drv.cuEventQuery((CUevent)f->event_) == CUDA_SUCCESS) {
      if (f->seq_ > tl->done_seq) tl->done_seq = f->seq_;
    }
    uvcuda__ctx_leave(prev, tl->cuctx);
  }
  uvcuda__tl_harvest(l, tl, 0);
}

void uvcuda__tl_maybe_free(struct uvcuda__loop *l, struct uvcuda__timeline *tl) {
  if (tl->touched) return; /* settle frees it: it is on the touched list */
  if (tl->pending != 0 || tl->tickets_out != 0) return;
  if (!uvcuda__tl_quiescent(l, tl)) return;
  tl_destroy(l, tl);
}

void uvcuda__tl_arm(struct uvcuda__loop *l, struct uvcuda__timeline *tl) {
  uint64_t thr;
  if (uvcuda__tl_watch(l, tl, &thr)) uvcuda__reactor_arm(l, tl, thr);
}

int uvcuda__tl_watch(struct uvcuda__loop *l, struct uvcuda__timeline *tl,
                     uint64_t *threshold) {
  if (l->opts.completion == UVCUDA_COMPLETION_POLL || tl->faulted) return 0;
  if (tl->armed > 0 && tl->head != NULL) {
    *threshold = tl->head->seq_;
    return 1;
  }
  /* A closing loop waits for the GPU writes of cancelled futures. */
  if (l->close_waiting && tl->mode != UVCUDA__TL_HOSTFN &&
      !uvcuda__tl_quiescent(l, tl)) {
    *threshold = tl->next_seq;
    return 1;
  }
  return 0;
}

CUresult uvcuda__tl_query(struct uvcuda__timeline *tl) {
  CUcontext prev = uvcuda__ctx_enter(tl->cuctx);
  CUresult r = uvcuda__drv.cuStreamQuery(tl->stream);
  uvcuda__ctx_leave(prev, tl->cuctx);
  return r;
}

static int is_stream_fault(CUresult r) {
  return r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY;
}

/* A sticky error belongs to the whole CUDA context: every pending future
 * on any stream of it fails now, since no marker of it will ever land. */
void uvcuda__fail_cuctx(struct uvcuda__loop *l, CUcontext cuctx, int err) {
  struct uvcuda__timeline *tl;
  uvcuda_future_t *f;

  l->stats.faults++;
  for (tl = l->active; tl; tl = tl->anext) {
    if (tl->cuctx != cuctx) continue;
    tl->faulted = 1;
    uvcuda__tl_touch(l, tl, 1); /* no watch on a dead context */
    while ((f = tl->head) != NULL) {
      uvcuda__tl_remove(l, f);
      uvcuda__complete(l, f, err);
    }
  }
}

/* One cuStreamQuery per CUDA context with work due: the errors that stop
 * markers and host functions are sticky to the whole context, so any of
 * its streams reports them. */
int uvcuda__probe_faults(struct uvcuda__loop *l) {
  struct uvcuda__timeline *tl;
  CUcontext seen[8];
  unsigned nseen = 0, i;
  CUresult r;
  int n = 0;

  for (tl = l->active; tl; tl = tl->anext) {
    /* Also timelines with no future left but GPU writes still due: a
     * closing loop waits for those, and after a fault they never land. */
    if (tl->faulted || (tl->head == NULL && uvcuda__tl_quiescent(l, tl))) continue;
    for (i = 0; i < nseen && seen[i] != tl->cuctx; i++) {}
    if (i < nseen) continue; /* context already probed: it is healthy */
    if (nseen < sizeof(seen) / sizeof(seen[0])) seen[nseen++] = tl->cuctx;
    r = uvcuda__tl_query(tl);
    if (is_stream_fault(r)) {
      uvcuda__fail_cuctx(l, tl->cuctx, UVCUDA_ECUDA(r));
      n++;
    }
  }
  return n;
}

/* cuMemFreeHost waits for the whole device to go idle (an implicit
 * synchronisation; on the H200 it blocked for as long as any stream of any
 * context waited), so a closing loop hands its pages to the reactor thread
 * and this runs on the caller's thread only where no reactor runs. */
void uvcuda__pages_free(struct uvcuda__slot_page *pg) {
  struct uvcuda__slot_page *next;
  for (; pg; pg = next) {
    CUcontext prev = uvcuda__ctx_enter(pg->cuctx);
    next = pg->next;
    uvcuda__drv.cuMemFreeHost(pg->host);
    uvcuda__ctx_leave(prev, pg->cuctx);
    free(pg);
  }
}

void uvcuda__tl_free_all(struct uvcuda__loop *l) {
  uint64_t i;

  l->touched = NULL; /* every timeline goes below */
  l->nneed_sync = 0;
  for (i = 0; i < l->nbuckets; i++) {
    while (l->buckets[i] != NULL) tl_destroy(l, l->buckets[i]);
  }
  free(l->buckets);
  l->buckets = NULL;
  l->nbuckets = 0;
  uvcuda__reactor_free_pages(l->pages);
  l->pages = l->free_pages = NULL;
  free(l->scratch);
  l->scratch = NULL;
  l->scratch_cap = 0;
}
