/* uvcuda-*: a uvcuda loop with the method's completion strategy and one
 * future, started on each sample with the workload as its op. */
#include "bench.h"

/* Weak: bench/ab*.sh run this binary against older builds of the
 * library, which lack them (the phases are then not measured, the
 * adaptive methods are skipped). Only this file may name them: one strong
 * reference elsewhere would make them required. */
#pragma weak uvcuda_future_timing
#pragma weak uvcuda_loop_adaptive

typedef struct {
  run_t run;
  uvcuda_loop_t ul;
  int ul_on;
  uvcuda_future_t f;
  int f_on;
  volatile int closed;
} uvcuda_run_t;

#define UR(r) container_of(r, uvcuda_run_t, run)

static int op_work(uvcuda_future_t *f, uvcuda_stream_t s) {
  run_t *r = f->data;
  return (int)enqueue_work(r->wl, (CUstream)s);
}

void uvcuda_run_on_future(uvcuda_future_t *f, int status) {
  run_t *r = f->data;
  r->t1 = uv_hrtime();
  r->status = status;
  r->done = 1;
}

static void on_future_closed(uvcuda_future_t *f) {
  run_t *r = f->data;
  UR(r)->closed = 1;
}

static void on_ul_closed(uvcuda_loop_t *ul) {
  run_t *r = ul->data;
  UR(r)->closed = 1;
}

static int uvcuda_open(run_t *r) {
  uvcuda_run_t *u = UR(r);
  uvcuda_options_t o;
  int err;

  uvcuda_options_init(&o);
  o.completion = r->m->completion;
  o.spin_budget_us = r->spin_budget_us;
  o.probe_interval_us = bench.opt.probe_us;
  o.reactor_spin_us = bench.opt.rspin_us;
  o.reactor_yield_us = bench.opt.ryield_us;
  o.reactor_sleep_max_us = bench.opt.rsleep_us;
  o.reactor_backoff_pct = bench.opt.rbackoff_pct;
  o.flags |= r->m->flags;
  if (uvcuda_future_timing == NULL) r->timing = 0;
  if (r->timing) o.flags |= UVCUDA_OPT_TIMING;
  err = uvcuda_loop_init(r->loop, &u->ul, &o);
  if (err == UVCUDA_EINVAL && r->timing) { /* a library without it */
    r->timing = 0;
    o.flags &= ~UVCUDA_OPT_TIMING;
    err = uvcuda_loop_init(r->loop, &u->ul, &o);
  }
  if (err == UVCUDA_EINVAL && uvcuda_loop_adaptive == NULL &&
      (r->m->flags & (UVCUDA_OPT_ADAPTIVE | UVCUDA_OPT_NO_ADAPTIVE))) {
    snprintf(r->err, sizeof(r->err), "this library has no adaptive spin "
             "(UVCUDA_OPT_ADAPTIVE)");
    return 1;
  }
  if (err) {
    snprintf(r->err, sizeof(r->err), "uvcuda_loop_init: %s (%s)",
             uvcuda_err_name(err), uvcuda_strerror(err));
    return err == UVCUDA_ENOTSUP ? 1 : -1;
  }
  u->ul.data = r;
  u->ul_on = 1;
  uvcuda_future_init(&u->ul, &u->f);
  u->f.data = r;
  u->f_on = 1;
  return 0;
}

static int uvcuda_sample(run_t *r, uint64_t *t0) {
  int rc;
  *t0 = uv_hrtime();
  rc = uvcuda_future_start(&UR(r)->f, r->stream, op_work, uvcuda_run_on_future);
  if (rc) {
    snprintf(r->err, sizeof(r->err), "uvcuda_future_start: %s",
             uvcuda_err_name(rc));
    return -2;
  }
  if (wait_flag(r->loop, &r->done, r->timeout_ns)) return -1;
  if (r->status) {
    snprintf(r->err, sizeof(r->err), "future callback: %s (%s)",
             uvcuda_err_name(r->status), uvcuda_strerror(r->status));
    return -2;
  }
  return 0;
}

/* The stats, abandoned or not. */
static void uvcuda_stop(run_t *r) {
  uvcuda_run_t *u = UR(r);
  if (u->ul_on && !r->have_stats) {
    if (uvcuda_loop_stats(&u->ul, &r->stats) == 0) r->have_stats = 1;
    r->spin_ns = uvcuda_loop_spin_budget_ns(&u->ul);
  }
}

static int uvcuda_close(run_t *r) {
  uvcuda_run_t *u = UR(r);
  int rc;
  if (u->f_on) {
    u->closed = 0;
    uvcuda_future_close(&u->f, on_future_closed);
    if (wait_flag(r->loop, &u->closed, 5 * SEC)) return -1;
    u->f_on = 0;
  }
  if (u->ul_on) {
    u->closed = 0;
    rc = uvcuda_loop_close(&u->ul, on_ul_closed);
    if (rc) {
      printf("  uvcuda_loop_close: %s\n", uvcuda_err_name(rc));
      bench.errors++;
      return -1;
    }
    if (wait_flag(r->loop, &u->closed, 10 * SEC)) {
      printf("  uvcuda_loop_close did not finish\n");
      bench.errors++;
      return -1;
    }
    u->ul_on = 0;
  }
  return 0;
}

const method_ops_t uvcuda_ops = {sizeof(uvcuda_run_t), uvcuda_open, NULL,
                                 uvcuda_sample, NULL, uvcuda_stop,
                                 uvcuda_close};

uvcuda_loop_t *uvcuda_run_loop(run_t *r) { return &UR(r)->ul; }

uvcuda_future_t *uvcuda_run_future(run_t *r) { return &UR(r)->f; }

int uvcuda_run_timing(run_t *r, uvcuda_timing_t *t) {
  if (uvcuda_future_timing == NULL || !r->timing) return -1;
  return uvcuda_future_timing(&UR(r)->f, t);
}

int uvcuda_run_adaptive(run_t *r) {
  if (uvcuda_loop_adaptive == NULL || !UR(r)->ul_on) return -1;
  return uvcuda_loop_adaptive(&UR(r)->ul) != 0;
}
