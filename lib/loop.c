/* The loop context's life: init, close, and what it reports. */
#include "loop.h"

#include <stdlib.h>
#include <string.h>

/* A number per thread, never given twice. pthread_t values are: glibc
 * hands an ended, joined thread's to the next one, which would then pass
 * for the thread that set a loop context up. */
static uint64_t thread_serial(void) {
  static uint64_t next;
  static _Thread_local uint64_t serial;
  if (serial == 0) serial = __atomic_add_fetch(&next, 1, __ATOMIC_RELAXED);
  return serial;
}

int uvcuda__on_loop_thread(const struct uvcuda__loop *l) {
  return thread_serial() == l->thread;
}


static int needs_reactor(const struct uvcuda__opts *o) {
  return o->completion != UVCUDA_COMPLETION_POLL;
}

/* Live loop contexts (init to close_cb), so that initialising one again
 * is refused instead of cutting its handles off the loop. Found by ul's
 * address: an uninitialised ul's contents are never read (valgrind would
 * rightly call a branch on them an error). */
static uv_once_t live_once = UV_ONCE_INIT;
static uv_mutex_t live_mu;
static struct uvcuda__queue live;

static void live_init(void) {
  if (uv_mutex_init(&live_mu) != 0) abort();
  uvcuda__queue_init(&live);
}

static int live_has(const uvcuda_loop_t *ul) {
  struct uvcuda__queue *q;
  int found = 0;
  uv_once(&live_once, live_init);
  uv_mutex_lock(&live_mu);
  for (q = live.next; q != &live && !found; q = q->next)
    found = uvcuda__queue_data(q, struct uvcuda__loop, live_node)->pub == ul;
  uv_mutex_unlock(&live_mu);
  return found;
}

static void live_set(struct uvcuda__loop *l, int on) {
  uv_mutex_lock(&live_mu);
  if (on)
    uvcuda__queue_insert_tail(&live, &l->live_node);
  else
    uvcuda__queue_remove(&l->live_node);
  uv_mutex_unlock(&live_mu);
}

int uvcuda_loop_init(uv_loop_t *loop, uvcuda_loop_t *ul,
                     const uvcuda_options_t *opts) {
  struct uvcuda__loop *l;
  struct uvcuda__opts o;
  int err;

  if (loop == NULL || ul == NULL) return UVCUDA_EINVAL;
  /* (A forked child's are the parent's, and its lock may be held there:
   * the load below says EFORKED.) */
  if (!uvcuda__driver_forked() && live_has(ul)) return UVCUDA_EBUSY;
  ul->internal_ = NULL;
  ul->loop = NULL;
  if ((err = uvcuda__opts_resolve(opts, &o)) != 0) return err;
  if ((err = uvcuda_driver_load()) != 0) return err;
  if ((o.completion == UVCUDA_COMPLETION_HOSTFN_SPIN ||
       o.completion == UVCUDA_COMPLETION_HOSTFN_BLOCK) &&
      uvcuda__drv.cuLaunchHostFunc_v2 == NULL)
    return UVCUDA_ENOTSUP;

  if ((l = calloc(1, sizeof(*l))) == NULL) return UVCUDA_ENOMEM;
  l->pub = ul;
  l->uv = loop;
  l->thread = thread_serial();
  l->opts = o;
  l->epoch = uvcuda__context_epoch();
  uvcuda__queue_init(&l->dq);
  uvcuda__queue_init(&l->cq);
  uvcuda__spin_init(&l->spin);
  uvcuda__tl_init(&l->tls);
  l->tls.dq = &l->dq;
  l->tls.stats = &l->stats;
  l->tls.completion = o.completion;
  l->tls.flags = o.flags;
  l->tls.adaptive = o.adaptive;
  l->tls.spin_events = o.spin_budget_ns > 0;
  if ((l->port = uvcuda__port_new(&l->async)) == NULL) {
    free(l);
    return UVCUDA_ENOMEM;
  }
  l->tls.port = l->port;
  if (needs_reactor(&o)) {
    l->rc.async = &l->async;
    l->rc.spin_ns = o.reactor_spin_ns;
    l->rc.yield_ns = o.reactor_yield_ns;
    l->rc.sleep_max_ns = o.reactor_sleep_max_ns;
    l->rc.probe_ns = o.probe_interval_ns;
    l->rc.pct = o.reactor_backoff_pct;
    if ((err = uvcuda__reactor_attach(&l->rc)) != 0) {
      uvcuda__port_close(l->port);
      free(l);
      return err;
    }
    l->reactor_attached = 1;
  }
  if ((err = uvcuda__loop_handles_init(l)) != 0) {
    /* No handle was added to the loop: undo the rest. */
    if (l->reactor_attached) uvcuda__reactor_detach(&l->rc);
    uvcuda__port_close(l->port);
    free(l);
    return err;
  }
  /* Only now may the reactor ring the async handle. */
  if (l->reactor_attached) uvcuda__reactor_listen(&l->rc);
  l->handles_to_close = l->adapt.on ? 3 : 2;
  live_set(l, 1);
  ul->loop = loop;
  ul->internal_ = l;
  return 0;
}

static void on_handle_closed(uv_handle_t *h) {
  struct uvcuda__loop *l = uvcuda__loop_of_handle(h);
  uvcuda_loop_t *ul;
  uvcuda_loop_close_cb cb;
  if (h == (uv_handle_t *)&l->adapt.poll) uvcuda__adapt_closed(&l->adapt);
  if (--l->handles_to_close > 0) return;
  ul = l->pub;
  cb = l->close_cb;
  live_set(l, 0);
  free(l);
  ul->internal_ = NULL;
  if (cb) cb(ul);
}

/* Nothing waits for the GPU here: counters with a closed future's write
 * still due go back to their context's pool, which hands them out again
 * only once the write has landed. */
int uvcuda_loop_close(uvcuda_loop_t *ul, uvcuda_loop_close_cb close_cb) {
  struct uvcuda__loop *l;

  if (ul == NULL) return UVCUDA_EINVAL;
  if ((l = ul->internal_) == NULL) return UVCUDA_ENOTINIT;
  /* The parent's loop, in a forked child: its reactor is not there. */
  if (uvcuda__driver_forked()) return UVCUDA_EFORKED;
  if (!uvcuda__on_loop_thread(l)) return UVCUDA_EWRONGTHREAD;
  if (l->closing) return UVCUDA_ECLOSING;
  if (l->nfutures > 0) return UVCUDA_EBUSY;
  l->closing = 1;
  l->close_cb = close_cb;
  if (l->reactor_attached) uvcuda__reactor_detach(&l->rc); /* no watch left */
  l->reactor_attached = 0;
  uvcuda__port_close(l->port);
  l->port = NULL;
  uvcuda__tl_free_all(&l->tls);
  uvcuda__spin_free(&l->spin);
  if (l->idle_on) uv_idle_stop(&l->idle); /* closing: its ref no longer counts */
  l->idle_on = 0;
  uv_close((uv_handle_t *)&l->async, on_handle_closed);
  uv_close((uv_handle_t *)&l->idle, on_handle_closed);
  uvcuda__adapt_close(&l->adapt, on_handle_closed);
  return 0;
}

size_t uvcuda_loop_size(void) { return sizeof(uvcuda_loop_t); }

uvcuda_completion_t uvcuda_loop_completion(const uvcuda_loop_t *ul) {
  if (ul == NULL || ul->internal_ == NULL) return UVCUDA_COMPLETION_DEFAULT;
  return ul->internal_->opts.completion;
}

uint64_t uvcuda_loop_spin_budget_ns(const uvcuda_loop_t *ul) {
  if (ul == NULL || ul->internal_ == NULL) return 0;
  return ul->internal_->opts.spin_budget_ns;
}

int uvcuda_loop_adaptive(const uvcuda_loop_t *ul) {
  if (ul == NULL || ul->internal_ == NULL) return 0;
  return ul->internal_->opts.adaptive;
}

int uvcuda_loop_stats(const uvcuda_loop_t *ul, uvcuda_stats_t *stats) {
  struct uvcuda__reactor_usage u;
  if (ul == NULL || stats == NULL) return UVCUDA_EINVAL;
  if (ul->internal_ == NULL) return UVCUDA_ENOTINIT;
  if (!uvcuda__on_loop_thread(ul->internal_)) return UVCUDA_EWRONGTHREAD;
  *stats = ul->internal_->stats;
  stats->timelines = uvcuda__tl_in_use(&ul->internal_->tls);
  uvcuda__reactor_usage(&u);
  stats->reactor_polls = u.polls;
  stats->reactor_sleeps = u.sleeps;
  stats->reactor_cpu_ns = u.cpu_ns;
  return 0;
}
