/* The loop context: one uv_async_t (rung by the reactor or by host
 * functions) and one uv_idle_t (bounded spin, deliveries, POLL) per loop,
 * never one handle per future: libuv visits every async handle of a loop
 * on each wakeup. Both handles are unref'd unless futures are pending, so
 * uv_run returns when nothing is left. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#define container_of(ptr, type, member) \
  ((type *)((char *)(ptr) - offsetof(type, member)))

int uvcuda__on_loop_thread(const struct uvcuda__loop *l) {
  uv_thread_t self = uv_thread_self();
  return uv_thread_equal(&self, &l->thread);
}

static int all_quiescent(struct uvcuda__loop *l) {
  struct uvcuda__timeline *tl;
  for (tl = l->active; tl; tl = tl->anext)
    if (tl->mode != UVCUDA__TL_HOSTFN && !uvcuda__tl_quiescent(l, tl))
      return 0;
  return 1;
}

static void on_idle(uv_idle_t *h);

void uvcuda__loop_update_handles(struct uvcuda__loop *l) {
  int want_idle, want_ref;
  if (l->port == NULL) return; /* finish_close ran: handles are closing */
  want_idle = l->spin_head != NULL || l->dq_head != NULL || l->cq_head != NULL ||
              (l->opts.completion == UVCUDA_COMPLETION_POLL &&
               (l->nactive > 0 || l->close_waiting));
  if (want_idle != l->idle_on) {
    l->idle_on = want_idle;
    if (want_idle) uv_idle_start(&l->idle, on_idle);
    else uv_idle_stop(&l->idle);
  }
  want_ref = l->nactive > 0 || l->close_waiting;
  if (want_ref != l->async_ref) {
    l->async_ref = want_ref;
    if (want_ref) uv_ref((uv_handle_t *)&l->async);
    else uv_unref((uv_handle_t *)&l->async);
  }
}

void uvcuda__complete(struct uvcuda__loop *l, uvcuda_future_t *f, int status) {
  if (f->flags_ & UVCUDA__F_CLOSING) status = UVCUDA_ECANCELED;
  f->status_ = status;
  f->state_ = status == 0 ? UVCUDA_FUTURE_COMPLETE : UVCUDA_FUTURE_FAILED;
  f->flags_ |= UVCUDA__F_QUEUED;
  f->q_next_ = NULL;
  if (l->dq_tail) l->dq_tail->q_next_ = f; else l->dq_head = f;
  l->dq_tail = f;
}

static void record_latency(struct uvcuda__loop *l, uvcuda_future_t *f) {
  uint64_t d = uv_hrtime() - f->start_ns_;
  int b = d < 2 ? 0 : 63 - __builtin_clzll(d);
  if (b >= UVCUDA_HIST_BUCKETS) b = UVCUDA_HIST_BUCKETS - 1;
  l->stats.latency_hist[b]++;
}

void uvcuda__close_queue_push(struct uvcuda__loop *l, uvcuda_future_t *f) {
  f->state_ = UVCUDA_FUTURE_CLOSING;
  f->q_next_ = NULL;
  if (l->cq_tail) l->cq_tail->q_next_ = f; else l->cq_head = f;
  l->cq_tail = f;
}

/* Whether f's stream is among the streams the reactor was querying. */
static int probed(void *const *streams, const uvcuda_future_t *f) {
  int k;
  for (k = 0; k < UVCUDA__PROBE_PER_LOOP; k++)
    if (streams[k] == f->stream) return 1;
  return 0;
}

/* Takes the queue (head, tail): returns the futures to run now, keeps in
 * it (at its front) those whose stream the reactor is querying. The
 * streams are read once: decided per future, a probe ending mid-queue
 * would run a stream's later future before its earlier, kept one. */
static uvcuda_future_t *take_queue(struct uvcuda__loop *l, uvcuda_future_t **head,
                                   uvcuda_future_t **tail, int probing) {
  uvcuda_future_t *q = *head, *run = NULL, *run_last = NULL, *keep = NULL,
                  *keep_last = NULL, *f;
  void *streams[UVCUDA__PROBE_PER_LOOP];
  int k;
  *head = *tail = NULL;
  if (!probing) return q;
  for (k = 0; k < UVCUDA__PROBE_PER_LOOP; k++)
    streams[k] = atomic_load_explicit(&l->probing[k], memory_order_acquire);
  while ((f = q) != NULL) {
    q = f->q_next_;
    f->q_next_ = NULL;
    if (probed(streams, f)) {
      if (keep_last) keep_last->q_next_ = f; else keep = f;
      keep_last = f;
    } else {
      if (run_last) run_last->q_next_ = f; else run = f;
      run_last = f;
    }
  }
  *head = keep;
  *tail = keep_last;
  return run;
}

/* Runs the callbacks queued before this pass; what they queue waits for
 * the next pass, so a callback that restarts a failing future can't spin
 * the loop here. A future whose stream the reactor is querying right now
 * (~1 us, once per probe interval) waits for the next pass too: its
 * callback may destroy that stream. */
void uvcuda__deliver(struct uvcuda__loop *l) {
  uvcuda_future_t *q, *f;
  int status, probing;

  probing = atomic_load_explicit(&l->probe_refs, memory_order_acquire) > 0;
  q = take_queue(l, &l->dq_head, &l->dq_tail, probing);
  while ((f = q) != NULL) {
    q = f->q_next_;
    f->q_next_ = NULL;
    f->flags_ &= ~UVCUDA__F_QUEUED;
    status = f->status_;
    l->nactive--;
    if (status == UVCUDA_ECANCELED) l->stats.cancelled++;
    else if (status != 0) l->stats.failed++;
    if (l->opts.flags & UVCUDA_OPT_LATENCY_HISTOGRAM) record_latency(l, f);
    if (l->opts.flags & UVCUDA_OPT_TIMING) f->callback_ns_ = uv_hrtime();
    if (f->flags_ & UVCUDA__F_CLOSING) {
      f->state_ = UVCUDA_FUTURE_CLOSING;
      f->cb_(f, status);
      uvcuda__close_queue_push(l, f);
    } else {
      f->state_ = UVCUDA_FUTURE_IDLE;
      f->cb_(f, status);
    }
  }

  q = take_queue(l, &l->cq_head, &l->cq_tail, probing);
  while ((f = q) != NULL) {
    q = f->q_next_;
    f->q_next_ = NULL;
    f->state_ = UVCUDA_FUTURE_CLOSED;
    f->magic_ = 0;
    l->nfutures--;
    if (f->close_cb_) f->close_cb_(f);
  }
}

static void finish_close(struct uvcuda__loop *l);

void uvcuda__loop_settle(struct uvcuda__loop *l) {
  struct uvcuda__timeline *tl, *next, *keep = NULL;

  if (l->nneed_sync > 0) uvcuda__reactor_sync_touched(l);
  tl = l->touched;
  l->touched = NULL;
  for (; tl; tl = next) {
    next = tl->tnext;
    tl->tnext = NULL;
    tl->touched = 0;
    if (tl->pending == 0 && tl->tickets_out == 0 && !uvcuda__tl_quiescent(l, tl)) {
      /* A closed future's GPU write is still due: look again next pass. */
      tl->touched = 1;
      tl->tnext = keep;
      keep = tl;
      continue;
    }
    uvcuda__tl_maybe_free(l, tl);
  }
  l->touched = keep;
}

/* Shared tail of both callbacks. Returns nonzero if l is gone. */
static int after_pass(struct uvcuda__loop *l) {
  uvcuda__loop_settle(l);
  uvcuda__deliver(l);
  if (l->close_waiting && all_quiescent(l)) {
    l->close_waiting = 0;
    finish_close(l);
    return 1;
  }
  uvcuda__loop_update_handles(l);
  return 0;
}

/* POLL: a memory read per timeline with futures, every pass. */
static void harvest_active(struct uvcuda__loop *l, int src) {
  struct uvcuda__timeline *tl;
  for (tl = l->active; tl; tl = tl->anext) uvcuda__tl_harvest(l, tl, src);
}

/* The timelines this wakeup concerns: those the reactor saw pass and those
 * whose host functions ran, all on the touched list by now. */
static void harvest_touched(struct uvcuda__loop *l) {
  struct uvcuda__timeline *tl;
  for (tl = l->touched; tl; tl = tl->tnext) uvcuda__tl_harvest(l, tl, 0);
}

static void on_async(uv_async_t *h) {
  struct uvcuda__loop *l = container_of(h, struct uvcuda__loop, async);
  struct uvcuda__ticket *t, *next;

  if (atomic_exchange_explicit(&l->rang, 0, memory_order_relaxed))
    l->stats.reactor_wakeups++;
  t = uvcuda__port_drain(l->port);
  if (t != NULL) l->stats.hostfn_wakeups++;
  for (; t; t = next) {
    next = t->next;
    t->tl->tickets_out--;
    if (t->seq > t->tl->done_seq) t->tl->done_seq = t->seq;
    if (t->seen_ns > t->tl->seen_ns) t->tl->seen_ns = t->seen_ns;
    uvcuda__tl_touch(l, t->tl, 0);
    uvcuda__ticket_release(t);
  }
  if (atomic_exchange_explicit(&l->fault_suspect, 0, memory_order_relaxed))
    uvcuda__probe_faults(l);
  uvcuda__reactor_take_fired(l); /* always: rang is only a statistic */
  harvest_touched(l);
  after_pass(l);
}

static void on_idle(uv_idle_t *h) {
  struct uvcuda__loop *l = container_of(h, struct uvcuda__loop, idle);
  uvcuda_future_t *f;
  uint64_t now, n = 0, i;

  /* Spin: poll each timeline that has a spinning future, once. */
  l->stamp++;
  for (f = l->spin_head; f; f = f->spin_next_) {
    struct uvcuda__timeline *tl = f->timeline_;
    if (tl->stamp == l->stamp) continue;
    tl->stamp = l->stamp;
    if (n == l->scratch_cap) {
      uint64_t cap = l->scratch_cap ? l->scratch_cap * 2 : 64;
      void *p = realloc(l->scratch, cap * sizeof(*l->scratch));
      if (p == NULL) break; /* poll the rest next pass */
      l->scratch = p;
      l->scratch_cap = cap;
    }
    l->scratch[n++] = tl;
  }
  for (i = 0; i < n; i++) uvcuda__tl_spin_poll(l, l->scratch[i]);

  now = uv_hrtime();
  if (l->opts.completion == UVCUDA_COMPLETION_POLL) {
    harvest_active(l, 1);
    if (now - l->last_probe_ns >= l->opts.probe_interval_ns) {
      l->last_probe_ns = now;
      uvcuda__probe_faults(l);
    }
  }

  /* Budget spent: arm, oldest first (the FIFO is in deadline order). */
  while ((f = l->spin_head) != NULL && f->deadline_ns_ <= now) {
    l->spin_head = f->spin_next_;
    if (l->spin_head) l->spin_head->spin_prev_ = NULL; else l->spin_tail = NULL;
    f->spin_next_ = f->spin_prev_ = NULL;
    f->state_ = UVCUDA_FUTURE_ARMED;
    if (l->opts.flags & UVCUDA_OPT_TIMING) f->armed_ns_ = now;
    ((struct uvcuda__timeline *)f->timeline_)->armed++;
    uvcuda__tl_touch(l, f->timeline_, 1);
  }
  after_pass(l);
}

void uvcuda__loop_kick(struct uvcuda__loop *l) {
  if (!l->idle_on) {
    l->idle_on = 1;
    uv_idle_start(&l->idle, on_idle);
  }
}

int uvcuda_loop_init(uv_loop_t *loop, uvcuda_loop_t *ul,
                     const uvcuda_options_t *opts) {
  struct uvcuda__loop *l;
  struct uvcuda__opts o;
  int err;

  if (loop == NULL || ul == NULL) return UVCUDA_EINVAL;
  ul->internal_ = NULL;
  ul->loop = NULL;
  if ((err = uvcuda__opts_resolve(opts, &o)) != 0) return err;
  if ((err = uvcuda_driver_load()) != 0) return err;
  if ((o.completion == UVCUDA_COMPLETION_HOSTFN_SPIN ||
       o.completion == UVCUDA_COMPLETION_HOSTFN_BLOCK) &&
      !uvcuda__driver_caps()->host_task_sync)
    return UVCUDA_ENOTSUP;

  l = calloc(1, sizeof(*l));
  if (l == NULL) return UVCUDA_ENOMEM;
  l->pub = ul;
  l->uv = loop;
  l->thread = uv_thread_self();
  l->opts = o;
  atomic_init(&l->rang, 0);
  atomic_init(&l->fault_suspect, 0);
  atomic_init(&l->probe_refs, 0);
  for (err = 0; err < UVCUDA__PROBE_PER_LOOP; err++)
    atomic_init(&l->probing[err], UVCUDA__PROBE_NONE);
  l->port = uvcuda__port_new(&l->async);
  if (l->port == NULL) {
    free(l);
    return UVCUDA_ENOMEM;
  }
  if (o.completion != UVCUDA_COMPLETION_POLL &&
      (err = uvcuda__reactor_attach(l)) != 0) {
    uvcuda__port_close(l->port);
    free(l);
    return err;
  }
  uv_async_init(loop, &l->async, on_async);
  uv_unref((uv_handle_t *)&l->async);
  uv_idle_init(loop, &l->idle);
  l->handles_to_close = 2;
  ul->loop = loop;
  ul->internal_ = l;
  return 0;
}

static void on_handle_closed(uv_handle_t *h) {
  struct uvcuda__loop *l = h->data;
  uvcuda_loop_t *ul;
  uvcuda_loop_close_cb cb;
  if (--l->handles_to_close > 0) return;
  ul = l->pub;
  cb = l->close_cb;
  free(l);
  ul->internal_ = NULL;
  if (cb) cb(ul);
}

static void finish_close(struct uvcuda__loop *l) {
  uvcuda__reactor_detach(l); /* from here no other thread touches l */
  uvcuda__port_close(l->port);
  l->port = NULL;
  uvcuda__tl_free_all(l);
  uvcuda__evpools_free(l);
  if (l->idle_on) uv_idle_stop(&l->idle);
  l->idle_on = 0;
  l->async.data = l;
  l->idle.data = l;
  uv_close((uv_handle_t *)&l->async, on_handle_closed);
  uv_close((uv_handle_t *)&l->idle, on_handle_closed);
}

int uvcuda_loop_close(uvcuda_loop_t *ul, uvcuda_loop_close_cb close_cb) {
  struct uvcuda__loop *l;

  if (ul == NULL) return UVCUDA_EINVAL;
  if ((l = ul->internal_) == NULL) return UVCUDA_ENOTINIT;
  if (!uvcuda__on_loop_thread(l)) return UVCUDA_EWRONGTHREAD;
  if (l->closing) return UVCUDA_ECLOSING;
  if (l->nfutures > 0) return UVCUDA_EBUSY;
  l->closing = 1;
  l->close_cb = close_cb;
  uvcuda__loop_settle(l);
  if (!all_quiescent(l)) {
    /* Closed futures left GPU writes in flight: their counters can be
     * freed only once those writes have landed (or the context died). */
    l->close_waiting = 1;
    uvcuda__reactor_sync(l);
    /* Check again after arming: a write that landed between the first
     * check and the sync got no watch, and nothing would ring for it. */
    if (!all_quiescent(l)) {
      if (l->opts.completion == UVCUDA_COMPLETION_POLL) uvcuda__loop_kick(l);
      uvcuda__loop_update_handles(l);
      return 0;
    }
    l->close_waiting = 0;
  }
  finish_close(l);
  return 0;
}

uvcuda_completion_t uvcuda_loop_completion(const uvcuda_loop_t *ul) {
  if (ul == NULL || ul->internal_ == NULL) return UVCUDA_COMPLETION_DEFAULT;
  return ul->internal_->opts.completion;
}

uint64_t uvcuda_loop_spin_budget_ns(const uvcuda_loop_t *ul) {
  if (ul == NULL || ul->internal_ == NULL) return 0;
  return ul->internal_->opts.spin_budget_ns;
}

int uvcuda_loop_stats(const uvcuda_loop_t *ul, uvcuda_stats_t *stats) {
  if (ul == NULL || stats == NULL) return UVCUDA_EINVAL;
  if (ul->internal_ == NULL) return UVCUDA_ENOTINIT;
  if (!uvcuda__on_loop_thread(ul->internal_)) return UVCUDA_EWRONGTHREAD;
  *stats = ul->internal_->stats;
  return 0;
}
