/* The loop's passes: the async callback (the reactor or a host function
 * rang), the idle callback (spin, POLL, deliveries), and the settle and
 * delivery steps both end with. Callbacks only ever run from here, never
 * from inside a uvcuda call. */
#include "loop.h"

#include "deliver.h"
#include "prof.h"

#define loop_of(h, field) uvcuda__queue_data(h, struct uvcuda__loop, field)
#define tl_of_touch(q) \
  uvcuda__queue_data(q, struct uvcuda__timeline, touch_node)

struct uvcuda__loop *uvcuda__loop_of_handle(const uv_handle_t *h) {
  switch (h->type) {
    case UV_ASYNC: return loop_of(h, async);
    case UV_IDLE: return loop_of(h, idle);
    default: return loop_of(h, adapt.poll); /* the pre-wake timer */
  }
}

static void on_idle(uv_idle_t *h);
static void on_timer(uv_poll_t *h, int status, int events);

/* The idle handle is ref'd only while started (a close callback due holds
 * the loop, as libuv's own): with nothing to do, none of ours is ref'd. */
static void idle_set(struct uvcuda__loop *l, int on) {
  if (on == l->idle_on) return;
  l->idle_on = on;
  if (on) {
    uv_idle_start(&l->idle, on_idle);
    uv_ref((uv_handle_t *)&l->idle);
  } else {
    uv_idle_stop(&l->idle);
    uv_unref((uv_handle_t *)&l->idle);
  }
}

/* While the idle handle runs the loop never sleeps, so the reactor leaves
 * its news in rc.held, read every pass, rather than ringing (reactor.h):
 * the ring's eventfd read and extra pass were a µs or two of loop CPU per
 * pre-woken future. Stopping it, news left just before the reactor saw
 * `polling` cleared gets one more pass. */
static int keep_polling(struct uvcuda__loop *l, int busy) {
  if (!l->reactor_attached) return busy;
  if (busy) {
    if (!atomic_load_explicit(&l->rc.polling, memory_order_relaxed))
      atomic_store(&l->rc.polling, 1);
    return 1;
  }
  if (!atomic_load_explicit(&l->rc.polling, memory_order_relaxed)) return 0;
  atomic_store(&l->rc.polling, 0);
  if (!atomic_load(&l->rc.held)) return 0;
  atomic_store(&l->rc.polling, 1);
  return 1;
}

void uvcuda__loop_update_handles(struct uvcuda__loop *l) {
  int want_ref, busy;
  if (l->port == NULL) return; /* closing: the handles are being closed */
  busy = uvcuda__spin_busy(&l->spin) || uvcuda__adapt_busy(&l->adapt) ||
         !uvcuda__queue_empty(&l->dq) || !uvcuda__queue_empty(&l->cq) ||
         (l->opts.completion == UVCUDA_COMPLETION_POLL && l->nactive > 0);
  idle_set(l, keep_polling(l, busy));
  /* Only pending futures keep the loop alive (as libuv's own requests),
   * and a reactor's ring not yet read (reactor.h: `sent`). */
  want_ref = l->nactive > 0 ||
             (l->reactor_attached && atomic_load(&l->rc.sent));
  if (want_ref != l->async_ref) {
    l->async_ref = want_ref;
    if (want_ref)
      uv_ref((uv_handle_t *)&l->async);
    else
      uv_unref((uv_handle_t *)&l->async);
  }
}

void uvcuda__loop_settle(struct uvcuda__loop *l) {
  struct uvcuda__queue *q;
  int locked = 0;

  /* One locked batch for every watch that changed, each armed with its
   * plan (adapt.h). */
  if (l->reactor_attached) {
    uvcuda__queue_foreach(q, &l->tls.touched) {
      struct uvcuda__timeline *tl = tl_of_touch(q);
      uint64_t want = uvcuda__tl_watch_want(&l->tls, tl);
      if (want == tl->watched) continue;
      if (!locked) {
        uvcuda__reactor_sync_begin(&l->rc);
        locked = 1;
      }
      /* Under the reactor's lock: it reads a watch's plan while armed. */
      if (want != 0) uvcuda__adapt_plan(&l->tls, tl);
      uvcuda__reactor_watch(&l->rc, &tl->watch, want);
      tl->watched = want;
    }
    if (locked) uvcuda__reactor_sync_end(&l->rc);
  }
  while (!uvcuda__queue_empty(&l->tls.touched)) {
    q = uvcuda__queue_head(&l->tls.touched);
    uvcuda__queue_remove(q);
    uvcuda__tl_retire(&l->tls, tl_of_touch(q));
  }
  if (!uvcuda__queue_empty(&l->tls.draining))
    uvcuda__tl_reap(&l->tls, uv_hrtime(), l->opts.probe_interval_ns);
}

static void record_latency(struct uvcuda__loop *l, uvcuda_future_t *f) {
  uint64_t d = uv_hrtime() - f->start_ns_;
  int b = d < 2 ? 0 : 63 - __builtin_clzll(d);
  if (b >= UVCUDA_HIST_BUCKETS) b = UVCUDA_HIST_BUCKETS - 1;
  l->stats.latency_hist[b]++;
}

static void count_completed(uvcuda_stats_t *st, int by) {
  switch (by) {
    case UVCUDA__BY_SPIN: st->completed_spin++; break;
    case UVCUDA__BY_HOSTFN: st->completed_hostfn++; break;
    case UVCUDA__BY_POLL: st->completed_poll++; break;
    default: st->completed_reactor++; break;
  }
}

/* Runs the callbacks queued before this pass; what they queue waits for
 * the next pass, so a callback that restarts a failing future can't spin
 * the loop here. */
static void deliver_done(struct uvcuda__loop *l) {
  struct uvcuda__queue run, *q;
  uvcuda_future_t *f;
  int status;

  uvcuda__queue_init(&run);
  uvcuda__queue_move(&l->dq, &run);
  while (!uvcuda__queue_empty(&run)) {
    q = uvcuda__queue_head(&run);
    uvcuda__queue_remove(q);
    f = uvcuda__queue_data(q, uvcuda_future_t, q_node_);
    uvcuda__spin_forget(f);
    status = f->status_;
    uvcuda__adapt_forget(&l->adapt, f, status);
    l->nactive--;
    if (status == UVCUDA_ECANCELED)
      l->stats.cancelled++;
    else if (status != 0)
      l->stats.failed++;
    else
      count_completed(&l->stats, f->done_by_);
    if (l->opts.flags & UVCUDA_OPT_LATENCY_HISTOGRAM) record_latency(l, f);
    if (l->opts.flags & UVCUDA_OPT_TIMING) f->callback_ns_ = uv_hrtime();
    UVCUDA__PROF_BEGIN(p1);
    if (f->closing_) {
      f->state_ = UVCUDA_FUTURE_CLOSING;
      f->cb_(f, status);
      uvcuda__queue_insert_tail(&l->cq, &f->q_node_);
    } else {
      f->state_ = UVCUDA_FUTURE_IDLE;
      f->cb_(f, status);
    }
    UVCUDA__PROF_END(UVCUDA__P_CB, p1);
  }
}

/* Close callbacks last: one may close the loop (its last future's). */
static void deliver_closed(struct uvcuda__loop *l) {
  struct uvcuda__queue run, *q;
  uvcuda_future_t *f;

  uvcuda__queue_init(&run);
  uvcuda__queue_move(&l->cq, &run);
  while (!uvcuda__queue_empty(&run)) {
    q = uvcuda__queue_head(&run);
    uvcuda__queue_remove(q);
    f = uvcuda__queue_data(q, uvcuda_future_t, q_node_);
    f->state_ = UVCUDA_FUTURE_CLOSED;
    f->magic_ = 0;
    l->nfutures--;
    if (f->close_cb_) f->close_cb_(f);
  }
}

/* A context turned faulted somewhere in the process: its futures here
 * fail now, since no marker of it will land. */
static void check_faults(struct uvcuda__loop *l) {
  unsigned e = uvcuda__context_epoch();
  if (e == l->epoch) return;
  l->epoch = e;
  uvcuda__tl_fail_faulted(&l->tls);
}

/* Callbacks first: the settle takes the reactor's lock (a watch moved on)
 * and retires timelines, which no callback need wait for, and a callback
 * that starts its stream's next future finds the timeline still active.
 * The reactor may see a passed watch meanwhile and leave news for nothing
 * (a flag in a polling loop, keep_polling), which costs less than holding
 * it off that watch (design.md, "Timelines"). */
static void after_pass(struct uvcuda__loop *l) {
  check_faults(l);
  deliver_done(l);
  uvcuda__loop_settle(l);
  deliver_closed(l);
  uvcuda__loop_update_handles(l);
}

/* The parent's loop, run in a child forked after the driver was loaded:
 * its GPU and reactor stayed behind (pinned memory may not even be
 * mapped), so it does nothing and keeps nothing alive. */
static int parked(struct uvcuda__loop *l) {
  if (!uvcuda__driver_forked()) return 0;
  idle_set(l, 0);
  uvcuda__adapt_stop(&l->adapt);
  uv_unref((uv_handle_t *)&l->async);
  l->async_ref = 0;
  return 1;
}

/* What the reactor and the host functions left: their timelines are
 * harvested (an async wakeup, or the reactor's news seen by a pass). */
static void take_news(struct uvcuda__loop *l) {
  struct uvcuda__queue fired, done, *q;

  if (atomic_exchange_explicit(&l->rc.rang, 0, memory_order_relaxed))
    l->stats.reactor_wakeups++;
  /* Before the fired queue: what fires after it is taken rings or sets
   * `held` again. */
  atomic_exchange(&l->rc.held, 0);
  uvcuda__queue_init(&done);
  uvcuda__port_drain(l->port, &done);
  if (!uvcuda__queue_empty(&done)) l->stats.hostfn_wakeups++;
  uvcuda__tl_tickets(&l->tls, &done);
  if (l->reactor_attached) {
    uvcuda__queue_init(&fired);
    uvcuda__reactor_take_fired(&l->rc, &fired);
    while (!uvcuda__queue_empty(&fired)) {
      struct uvcuda__watch *w;
      struct uvcuda__timeline *tl;
      q = uvcuda__queue_head(&fired);
      uvcuda__queue_remove(q);
      w = uvcuda__queue_data(q, struct uvcuda__watch, node);
      tl = uvcuda__tl_of_watch(w);
      tl->seen_ns = w->seen_ns;
      tl->after_ns = w->after_ns;
      tl->seen_early = w->early;
      tl->watched = 0; /* the reactor let it go; settle re-arms */
      uvcuda__tl_touch(&l->tls, tl);
    }
  }
  /* The timelines this wakeup concerns, not every one the loop has. */
  uvcuda__queue_foreach(q, &l->tls.touched)
      uvcuda__tl_harvest(&l->tls, tl_of_touch(q), UVCUDA__SEEN_WAKE);
}

static void on_async(uv_async_t *h) {
  struct uvcuda__loop *l = loop_of(h, async);

  UVCUDA__PROF_BEGIN(p0);
  if (parked(l)) return;
  /* libuv read the eventfd before this callback: what the reactor sends
   * from here on writes it again. */
  atomic_exchange(&l->rc.sent, 0);
  take_news(l);
  after_pass(l);
  UVCUDA__PROF_END(UVCUDA__P_ASYNC, p0);
}

/* POLL: a counter read per timeline with futures, every pass, and a probe
 * of their contexts every probe interval. */
static void poll_active(struct uvcuda__loop *l, uint64_t now) {
  struct uvcuda__queue *q, *next;
  for (q = l->tls.active.next; q != &l->tls.active; q = next) {
    struct uvcuda__timeline *tl =
        uvcuda__queue_data(q, struct uvcuda__timeline, lnode);
    next = q->next;
    if (uvcuda__queue_empty(&tl->futures)) continue;
    uvcuda__context_probe(tl->ctx, now, l->opts.probe_interval_ns);
    uvcuda__tl_harvest(&l->tls, tl, UVCUDA__SEEN_POLL);
  }
}

static void on_idle(uv_idle_t *h) {
  struct uvcuda__loop *l = loop_of(h, idle);
  uint64_t now = uv_hrtime();
  UVCUDA__PROF_BEGIN(p0);

  if (parked(l)) return;
  /* The loop thread does not sleep between two passes that both spin:
   * the time between them is spin time (other handles' callbacks too). */
  if (l->spin_last_ns) l->stats.spin_ns += now - l->spin_last_ns;
  uvcuda__spin_pass(&l->spin, &l->tls, now, l->opts.probe_interval_ns);
  uvcuda__adapt_pass(&l->adapt, &l->tls, now);
  if (l->opts.completion == UVCUDA_COMPLETION_POLL) poll_active(l, now);
  /* After its own polls: what the loop found itself it counts as such. */
  if (atomic_load_explicit(&l->rc.held, memory_order_relaxed)) take_news(l);
  after_pass(l);
  l->spin_last_ns =
      uvcuda__spin_busy(&l->spin) || uvcuda__adapt_busy(&l->adapt) ? now : 0;
  UVCUDA__PROF_END(UVCUDA__P_IDLE, p0);
}

/* The pre-wake timer: the futures due are polled from this pass on. */
static void on_timer(uv_poll_t *h, int status, int events) {
  struct uvcuda__loop *l = uvcuda__loop_of_handle((uv_handle_t *)h);
  uint64_t now;
  (void)status, (void)events;
  if (parked(l)) return;
  UVCUDA__PROF_BEGIN(p0);
  uvcuda__adapt_drain(&l->adapt);
  now = uv_hrtime();
  uvcuda__adapt_fire(&l->adapt, now);
  uvcuda__adapt_pass(&l->adapt, &l->tls, now);
  after_pass(l);
  UVCUDA__PROF_END(UVCUDA__P_TIMER, p0);
}

int uvcuda__loop_handles_init(struct uvcuda__loop *l) {
  int err = uvcuda__adapt_init(&l->adapt, l->uv, l->opts.adaptive, &l->stats,
                               on_timer);
  if (err != 0) return err;
  /* Cannot fail: the eventfd it needs came with uv_loop_init (libuv's own
   * work-queue async handle). */
  uv_async_init(l->uv, &l->async, on_async);
  uv_unref((uv_handle_t *)&l->async);
  uv_idle_init(l->uv, &l->idle);
  uv_unref((uv_handle_t *)&l->idle); /* ref'd while started */
  return 0;
}
