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
#include "internal.h"

#include <string.h>

static int check(const uvcuda_future_t *f) {
  if (f == NULL) return UVCUDA_EINVAL;
  if (f->magic_ != UVCUDA__FUTURE_MAGIC || f->loop == NULL ||
      f->loop->internal_ == NULL)
    return f->state_ == UVCUDA_FUTURE_CLOSED ? UVCUDA_ECLOSING : UVCUDA_ENOTINIT;
  if (!uvcuda__on_loop_thread(f->loop->internal_)) return UVCUDA_EWRONGTHREAD;
  if (f->flags_ & UVCUDA__F_CLOSING) return UVCUDA_ECLOSING;
  return 0;
}

int uvcuda_future_init(uvcuda_loop_t *ul, uvcuda_future_t *f) {
  struct uvcuda__loop *l;
  if (ul == NULL || f == NULL) return UVCUDA_EINVAL;
  if ((l = ul->internal_) == NULL) return UVCUDA_ENOTINIT;
  if (!uvcuda__on_loop_thread(l)) return UVCUDA_EWRONGTHREAD;
  if (l->closing) return UVCUDA_ECLOSING;
  memset(f, 0, sizeof(*f));
  f->loop = ul;
  f->state_ = UVCUDA_FUTURE_IDLE;
  f->magic_ = UVCUDA__FUTURE_MAGIC;
  l->nfutures++;
  return 0;
}

static int is_special(CUstream s) {
  return s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
}

/* Everything that can fail once the arguments are right. The stream's
 * context is current for the op and our marker; the caller's is restored. */
static int begin(struct uvcuda__loop *l, uvcuda_future_t *f, CUstream s,
                 uvcuda_op_cb op) {
  struct uvcuda__timeline *tl;
  CUstreamCaptureStatus cap = CU_STREAM_CAPTURE_STATUS_NONE;
  CUcontext prev = NULL, cuctx = NULL;
  int special = is_special(s);
  CUresult r;
  int err;

  uvcuda__drv.cuCtxGetCurrent(&prev);
  if (special) {
    if (prev == NULL) return UVCUDA_ECUDA(CUDA_ERROR_INVALID_CONTEXT);
    cuctx = prev;
  }
  tl = uvcuda__tl_find(l, s, prev, special);
  if (tl != NULL) {
    cuctx = tl->cuctx;
  } else if (!special) {
    r = uvcuda__drv.cuStreamGetCtx(s, &cuctx);
    if (r != CUDA_SUCCESS) return UVCUDA_ECUDA(r);
  }
  if (cuctx != prev) uvcuda__drv.cuCtxSetCurrent(cuctx);

  /* A marker on a capturing stream would join the capture (or break it). */
  r = uvcuda__drv.cuStreamIsCapturing(s, &cap);
  if (r != CUDA_SUCCESS) {
    err = UVCUDA_ECUDA(r);
    goto out;
  }
  if (cap != CU_STREAM_CAPTURE_STATUS_NONE) {
    err = UVCUDA_ECAPTURING;
    goto out;
  }
  if (op != NULL && (err = uvcuda__op_result(op(f, s))) != 0) goto out;
  if (tl == NULL && (err = uvcuda__tl_create(l, s, cuctx, special, &tl)) != 0)
    goto out;
  if ((err = uvcuda__tl_mark(l, tl, f)) != 0) {
    uvcuda__tl_maybe_free(l, tl);
    goto out;
  }
  uvcuda__tl_push(l, tl, f);
out:
  if (cuctx != prev) uvcuda__drv.cuCtxSetCurrent(prev);
  return err;
}

int uvcuda_future_start(uvcuda_future_t *f, uvcuda_stream_t stream,
                        uvcuda_op_cb op, uvcuda_future_cb cb) {
  struct uvcuda__loop *l;
  int err;

  if ((err = check(f)) != 0) return err;
  if (cb == NULL) return UVCUDA_EINVAL;
  if (f->state_ != UVCUDA_FUTURE_IDLE) return UVCUDA_EBUSY;
  l = f->loop->internal_;
  if (l->closing) return UVCUDA_ECLOSING;

  f->stream = stream;
  f->cb_ = cb;
  f->status_ = 0;
  f->event_ = NULL;
  f->start_ns_ = uv_hrtime();
  f->enqueued_ns_ = f->armed_ns_ = f->seen_ns_ = f->callback_ns_ = 0;
  l->nactive++;
  l->stats.started++;

  err = begin(l, f, (CUstream)stream, op);
  if (err == 0 && (l->opts.flags & UVCUDA_OPT_TIMING))
    f->enqueued_ns_ = uv_hrtime();
  if (err != 0) {
    uvcuda__complete(l, f, err); /* delivered on the next idle pass */
  } else if (l->opts.spin_budget_ns > 0) {
    f->state_ = UVCUDA_FUTURE_SPINNING;
    f->deadline_ns_ = f->start_ns_ + l->opts.spin_budget_ns;
    f->spin_next_ = NULL;
    f->spin_prev_ = l->spin_tail;
    if (l->spin_tail) l->spin_tail->spin_next_ = f; else l->spin_head = f;
    l->spin_tail = f;
  } else {
    f->state_ = UVCUDA_FUTURE_ARMED;
    f->armed_ns_ = f->enqueued_ns_;
    ((struct uvcuda__timeline *)f->timeline_)->armed++;
    uvcuda__tl_arm(l, f->timeline_);
  }
  uvcuda__loop_update_handles(l);
  return 0;
}

int uvcuda_future_close(uvcuda_future_t *f, uvcuda_future_close_cb close_cb) {
  struct uvcuda__loop *l;
  int err;

  if ((err = check(f)) != 0) return err;
  l = f->loop->internal_;
  f->flags_ |= UVCUDA__F_CLOSING;
  f->close_cb_ = close_cb;
  switch (f->state_) {
    case UVCUDA_FUTURE_IDLE:
      uvcuda__close_queue_push(l, f);
      break;
    case UVCUDA_FUTURE_SPINNING:
    case UVCUDA_FUTURE_ARMED:
      /* Unhooked now: no thread reads a future, so close_cb may follow
       * the cancellation callback at once; the GPU work runs on. */
      uvcuda__tl_remove(l, f); /* the next pass re-syncs the reactor */
      uvcuda__complete(l, f, UVCUDA_ECANCELED);
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
  err = check(f);
  /* A closing future (its cancellation callback) still has its stamps. */
  if (err == UVCUDA_ECLOSING && f->magic_ == UVCUDA__FUTURE_MAGIC) err = 0;
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

uvcuda_future_state_t uvcuda_future_state(const uvcuda_future_t *f) {
  if (f == NULL) return UVCUDA_FUTURE_CLOSED;
  return (uvcuda_future_state_t)f->state_;
}

int uvcuda_future_is_active(const uvcuda_future_t *f) {
  if (f == NULL || f->magic_ != UVCUDA__FUTURE_MAGIC) return 0;
  switch (f->state_) {
    case UVCUDA_FUTURE_SPINNING:
    case UVCUDA_FUTURE_ARMED:
    case UVCUDA_FUTURE_COMPLETE:
    case UVCUDA_FUTURE_FAILED:
      return 1;
    default:
      return (f->flags_ & UVCUDA__F_QUEUED) != 0;
  }
}
