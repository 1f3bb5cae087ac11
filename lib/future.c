/* Device futures: start runs the op, enqueues a marker after it and puts
 * the future on its timeline; the loop's idle pass spins on it for the
 * budget, then arms it. Callbacks only ever run from the loop's own
 * callbacks, never from inside start or close.
 *
 *   IDLE --start--> SPINNING --budget spent--> ARMED
 *     ^                |  marker passed           | marker passed / fault
 *     |                v                          v
 *     +--- callback -- COMPLETE <-----------------+
 *     +--- callback -- FAILED   (error at start, fault, or close)
 *   any --close--> CLOSING --close_cb--> CLOSED
 */
#include "loop.h"

#include <string.h>

#include "deliver.h"
#include "error.h"
#include "prof.h"

#define FUTURE_MAGIC 0x75766366u /* "uvcf" */

/* Bound to f's address: a struct copy of a live future (`g = *f`) reads as
 * never initialised (start: UVCUDA_ENOTINIT); never 0 (closed). */
static uint32_t magic_of(const uvcuda_future_t *f) {
  uint32_t m = FUTURE_MAGIC ^ (uint32_t)((uintptr_t)f >> 4);
  return m != 0 ? m : FUTURE_MAGIC;
}

/* `acts`: the call would change f (start, close), which a child forked
 * from the loop's process may not: CUDA and the reactor stayed behind. */
static int check(const uvcuda_future_t *f, int acts) {
  if (f == NULL) return UVCUDA_EINVAL;
  if (f->magic_ != magic_of(f) || f->loop == NULL ||
      f->loop->internal_ == NULL)
    return f->state_ == UVCUDA_FUTURE_CLOSED ? UVCUDA_ECLOSING
                                             : UVCUDA_ENOTINIT;
  if (acts && uvcuda__driver_forked()) return UVCUDA_EFORKED;
  if (!uvcuda__on_loop_thread(f->loop->internal_)) return UVCUDA_EWRONGTHREAD;
  if (f->closing_) return UVCUDA_ECLOSING;
  return 0;
}

int uvcuda_future_init(uvcuda_loop_t *ul, uvcuda_future_t *f) {
  struct uvcuda__loop *l;
  void *data;
  if (ul == NULL || f == NULL) return UVCUDA_EINVAL;
  if ((l = ul->internal_) == NULL) return UVCUDA_ENOTINIT;
  if (uvcuda__driver_forked()) return UVCUDA_EFORKED;
  if (!uvcuda__on_loop_thread(l)) return UVCUDA_EWRONGTHREAD;
  if (l->closing) return UVCUDA_ECLOSING;
  /* Its own op is running: the start is not done with it. (Found without
   * reading f, which may be uninitialised memory here.) */
  if (l->op_future == f) return UVCUDA_EBUSY;
  data = f->data; /* yours: as libuv's handles, init leaves it alone */
  memset(f, 0, sizeof(*f)); /* state_: UVCUDA_FUTURE_IDLE */
  f->data = data;
  f->loop = ul;
  f->magic_ = magic_of(f);
  uvcuda__queue_init(&f->tl_node_);
  uvcuda__queue_init(&f->spin_node_);
  uvcuda__queue_init(&f->q_node_);
  l->nfutures++;
  return 0;
}

/* A marker on a capturing stream would join the capture (or break it). */
static int capture_check(CUstream s) {
  CUstreamCaptureStatus cap = CU_STREAM_CAPTURE_STATUS_NONE;
  CUresult r = uvcuda__drv.cuStreamIsCapturing(s, &cap);
  if (r != CUDA_SUCCESS) return UVCUDA_ECUDA(r);
  return cap != CU_STREAM_CAPTURE_STATUS_NONE ? UVCUDA_ECAPTURING : 0;
}

/* Everything that can fail once the arguments are right. The capture
 * check comes first: it is the one call the driver answers on a capturing
 * stream (cuStreamGetId of one may return an error; design.md, "Stream
 * capture"). The op and the
 * marker run with the stream's context current, in the thread's own
 * capture mode; the caller's context is restored. */
static int begin(struct uvcuda__loop *l, uvcuda_future_t *f, CUstream s,
                 uvcuda_op_cb op) {
  struct uvcuda__timeline *tl;
  CUcontext prev = NULL, want;
  CUresult r;
  int err;

  if ((err = capture_check(s)) != 0) return err;
  if ((err = uvcuda__tl_get(&l->tls, s, &tl)) != 0) return err;
  /* Its futures failed with their context's record this very pass (a
   * callback restarts them before the settle): the settle lets go of the
   * old record's watch, and the stream gets a timeline of the one it has
   * now. */
  if (uvcuda__tl_stale(tl) == UVCUDA__TL_STALE_WATCHED) {
    uvcuda__loop_settle(l);
    if ((err = uvcuda__tl_get(&l->tls, s, &tl)) != 0) return err;
  }
  if ((r = (CUresult)uvcuda__context_fault(tl->ctx)) != CUDA_SUCCESS) {
    err = UVCUDA_ECUDA(r); /* the context is dead: its op would fail too */
    goto fail;
  }
  want = tl->ctx->cuctx;
  /* If the stream's context can't be made current (or the caller's read,
   * to put back), the op can't run as promised. */
  if ((r = uvcuda__ctx_push(want, &prev)) != CUDA_SUCCESS) {
    err = UVCUDA_ECUDA(r);
    goto fail;
  }
  if (op != NULL) {
    CUcontext now = want;
    uvcuda_future_t *outer = l->op_future; /* an op may start others */
    f->in_op_ = 1; /* a start or close of f from its own op: EBUSY */
    l->op_future = f;
    UVCUDA__PROF_BEGIN(p1);
    err = uvcuda__op_result(op(f, s));
    UVCUDA__PROF_END(UVCUDA__P_OP, p1);
    l->op_future = outer;
    f->in_op_ = 0;
    /* The op may have made another context current: the marker needs the
     * stream's, and the caller gets its own back either way. */
    if (uvcuda__drv.cuCtxGetCurrent(&now) == CUDA_SUCCESS && now != want &&
        (r = uvcuda__drv.cuCtxSetCurrent(want)) != CUDA_SUCCESS) {
      if (err == 0) err = UVCUDA_ECUDA(r);
      uvcuda__ctx_pop(now, prev); /* from the op's, if it differs */
      goto done;
    }
    /* The op may have begun a capture on s: ask again. */
    if (err == 0) err = capture_check(s);
  }
  if (err == 0) {
    UVCUDA__PROF_BEGIN(p2);
    err = uvcuda__tl_mark(&l->tls, tl, s, f);
    UVCUDA__PROF_END(UVCUDA__P_MARK, p2);
  }
  uvcuda__ctx_pop(want, prev);
done:
  if (err == 0) return 0;
  /* A driver error from the op or the marker may be the context's own
   * sticky fault (a kernel of the op faulted before the marker): asked
   * now, it fails the context's other futures and counts as found. */
  if (uvcuda_cuda_result(err) != 0) (void)uvcuda__context_query(tl->ctx);
fail:
  uvcuda__tl_note_fault(&l->tls, tl);
  if (uvcuda__queue_empty(&tl->futures)) uvcuda__tl_touch(&l->tls, tl);
  return err;
}

int uvcuda_future_start(uvcuda_future_t *f, uvcuda_stream_t stream,
                        uvcuda_op_cb op, uvcuda_future_cb cb) {
  struct uvcuda__loop *l;
  uint64_t now;
  int err, adapted;

  if ((err = check(f, 1)) != 0) return err;
  if (cb == NULL) return UVCUDA_EINVAL;
  if (f->state_ != UVCUDA_FUTURE_IDLE || f->in_op_) return UVCUDA_EBUSY;
  l = f->loop->internal_;
  if (l->closing) return UVCUDA_ECLOSING;

  f->stream = stream;
  f->cb_ = cb;
  f->status_ = 0;
  f->done_by_ = 0; /* set by the harvest that finds it done */
  f->start_ns_ = uv_hrtime();
  f->enqueued_ns_ = f->armed_ns_ = f->seen_ns_ = f->callback_ns_ = 0;
  l->nactive++;
  l->stats.started++;
  UVCUDA__PROF_BEGIN(p0);

  err = begin(l, f, (CUstream)stream, op);
  if (err != 0) {
    uvcuda__deliver_push(&l->dq, f, err); /* on the next idle pass */
  } else {
    now = (l->opts.flags & UVCUDA_OPT_TIMING) ? uv_hrtime() : f->start_ns_;
    if (l->opts.flags & UVCUDA_OPT_TIMING) f->enqueued_ns_ = now;
    adapted = uvcuda__adapt_start(&l->adapt, &l->spin, &l->tls, f,
                                  l->opts.spin_budget_ns, l->nactive == 1, now);
    if (adapted) {
      if (f->state_ == UVCUDA_FUTURE_ARMED) uvcuda__loop_settle(l);
    } else if (l->opts.spin_budget_ns > 0) {
      uvcuda__spin_add(&l->spin, f, f->start_ns_ + l->opts.spin_budget_ns);
    } else {
      uvcuda__spin_arm(&l->tls, f, now);
      uvcuda__loop_settle(l); /* watched before the loop can sleep */
    }
  }
  uvcuda__loop_update_handles(l);
  UVCUDA__PROF_END(UVCUDA__P_START, p0);
  return 0;
}

int uvcuda_future_close(uvcuda_future_t *f, uvcuda_future_close_cb close_cb) {
  struct uvcuda__loop *l;
  int err;

  if ((err = check(f, 1)) != 0) return err;
  if (f->in_op_) return UVCUDA_EBUSY; /* its start is not done with it */
  l = f->loop->internal_;
  f->closing_ = 1;
  f->close_cb_ = close_cb;
  switch (f->state_) {
    case UVCUDA_FUTURE_IDLE:
      f->state_ = UVCUDA_FUTURE_CLOSING;
      uvcuda__queue_insert_tail(&l->cq, &f->q_node_);
      break;
    case UVCUDA_FUTURE_SPINNING:
    case UVCUDA_FUTURE_ARMED:
      /* Unhooked now: no thread reads a future, so close_cb may follow
       * the cancellation callback at once; the GPU work runs on. */
      uvcuda__spin_forget(f);
      uvcuda__adapt_forget(&l->adapt, f, UVCUDA_ECANCELED);
      uvcuda__tl_remove(&l->tls, f); /* the next settle re-watches */
      uvcuda__deliver_push(&l->dq, f, UVCUDA_ECANCELED);
      break;
    default: /* COMPLETE / FAILED, already queued: cancel its status */
      f->status_ = UVCUDA_ECANCELED;
      break;
  }
  uvcuda__loop_update_handles(l);
  return 0;
}

int uvcuda_future_timing(const uvcuda_future_t *f, uvcuda_timing_t *t) {
  int err;
  if (t == NULL) return UVCUDA_EINVAL;
  err = check(f, 0);
  /* A closing future (its cancellation callback) still has its stamps. */
  if (err == UVCUDA_ECLOSING && f->magic_ == magic_of(f)) err = 0;
  if (err != 0) return err;
  if (!(f->loop->internal_->opts.flags & UVCUDA_OPT_TIMING))
    return UVCUDA_ENOTSUP;
  t->start_ns = f->start_ns_;
  t->enqueued_ns = f->enqueued_ns_;
  t->armed_ns = f->armed_ns_;
  t->seen_ns = f->seen_ns_;
  t->callback_ns = f->callback_ns_;
  return 0;
}

size_t uvcuda_future_size(void) { return sizeof(uvcuda_future_t); }

uvcuda_future_state_t uvcuda_future_state(const uvcuda_future_t *f) {
  /* Never initialised (or closed): nothing can be done with it. */
  if (f == NULL || f->magic_ != magic_of(f)) return UVCUDA_FUTURE_CLOSED;
  return (uvcuda_future_state_t)f->state_;
}

int uvcuda_future_is_active(const uvcuda_future_t *f) {
  if (f == NULL || f->magic_ != magic_of(f)) return 0;
  switch (f->state_) {
    case UVCUDA_FUTURE_SPINNING:
    case UVCUDA_FUTURE_ARMED:
    case UVCUDA_FUTURE_COMPLETE:
    case UVCUDA_FUTURE_FAILED: return 1;
    default: return 0;
  }
}
