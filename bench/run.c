/* A run: one method on one fresh loop, and its measurement (warm-up, then
 * timed samples into a row). The method itself is behind method_ops_t, one
 * file per kind. Also the workloads and the table of methods. */
#include "bench.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- workloads ---------------------------------------------------------- */

const workload_t WL[W_COUNT] = {
    {"memset4", 1, 0, 0},
    {"empty", 0, 0, 0},
    {"kernel-5us", 0, 5 * US, 5},
    {"kernel-20us", 0, 20 * US, 20},
    {"kernel-50us", 0, 50 * US, 50},
    {"kernel-200us", 0, 200 * US, 200},
    {"kernel-2ms", 0, 2 * MS, 2000},
};

CUresult enqueue_work(const workload_t *w, CUstream s) {
  uint64_t ns = w->ns;
  void *args[] = {&ns};
  if (w->memset)
    return bench.cu.cuMemsetD32Async(bench.dword, 0x5a5a5a5au, 1, s);
  return bench.cu.cuLaunchKernel(bench.fn_sleep, 1, 1, 1, 1, 1, 1, 0, s, args,
                                 NULL);
}

/* The work, then seq's write to the host-pinned flag at d (what any wait
 * on a GPU-written flag enqueues; uvcuda's marker is one). */
CUresult enqueue_marked(const workload_t *w, CUstream s, CUdeviceptr d,
                        uint32_t seq) {
  CUresult q = enqueue_work(w, s);
  if (q != CUDA_SUCCESS) return q;
  return bench.cu.cuStreamWriteValue32(s, d, seq, 0);
}

/* The next sequence number, then (timed from *t0) the work and the
 * number's write to the host-pinned flag at d: memop-spin and flag-thread. */
CUresult enqueue_flagged(run_t *r, uint32_t *seq, CUdeviceptr d,
                         uint64_t *t0) {
  if (++*seq == 0) *seq = 1;
  *t0 = uv_hrtime();
  return enqueue_marked(r->wl, r->stream, d, *seq);
}

/* ---- methods ------------------------------------------------------------ */

const method_t METHODS[M_COUNT] = {
    {"raw-spin", &raw_spin_ops, 0, 0},
    {"memop-spin", &memop_spin_ops, 0, 0},
    {"hostfn-async", &hostfn_async_ops, 0, 0},
    {"threadpool", &threadpool_ops, 0, 0},
    {"flag-thread", &flag_thread_ops, 0, 0},
    {"uvcuda-auto", &uvcuda_ops, UVCUDA_COMPLETION_AUTO, 0},
    {"uvcuda-reactor", &uvcuda_ops, UVCUDA_COMPLETION_REACTOR, 0},
    {"uvcuda-hostfn", &uvcuda_ops, UVCUDA_COMPLETION_HOSTFN, 0},
    {"uvcuda-poll", &uvcuda_ops, UVCUDA_COMPLETION_POLL, 0},
    {"uvcuda-hostfn-spin", &uvcuda_ops, UVCUDA_COMPLETION_HOSTFN_SPIN, 0},
    {"uvcuda-hostfn-block", &uvcuda_ops, UVCUDA_COMPLETION_HOSTFN_BLOCK, 0},
    {"uvcuda-today", &uvcuda_ops, UVCUDA_COMPLETION_AUTO,
     UVCUDA_OPT_NO_ADAPTIVE},
    {"uvcuda-adaptive", &uvcuda_ops, UVCUDA_COMPLETION_AUTO,
     UVCUDA_OPT_ADAPTIVE},
    {"uvcuda-today-aa", &uvcuda_ops, UVCUDA_COMPLETION_AUTO,
     UVCUDA_OPT_NO_ADAPTIVE},
    {"nap-spin", &nap_spin_ops, 0, 0},
};

/* ---- waiting on the loop ------------------------------------------------ */

void on_tick(uv_timer_t *t) { (void)t; }

/* Runs the loop until *flag is set; -1 on timeout. The tick timer makes
 * each blocking pass return within 50 ms. */
int wait_flag(uv_loop_t *loop, volatile int *flag, uint64_t timeout_ns) {
  uint64_t end = uv_hrtime() + timeout_ns;
  while (!*flag) {
    uv_run(loop, UV_RUN_ONCE);
    if (*flag) break;
    if (uv_hrtime() > end) return -1;
  }
  return 0;
}

int wait_count(uv_loop_t *loop, volatile int *count, int want,
               uint64_t timeout_ns) {
  uint64_t end = uv_hrtime() + timeout_ns;
  unsigned k = 0;
  while (*count < want) {
    uv_run(loop, UV_RUN_ONCE);
    if ((++k & 255) == 0) beat();
    if (*count >= want) break;
    if (uv_hrtime() > end) return -1;
  }
  return 0;
}

/* ---- a run -------------------------------------------------------------- */

run_t *run_new(const method_t *m, CUstream s, const workload_t *wl,
               int spin_budget_us) {
  run_t *r = calloc(1, m->ops->size);
  if (r == NULL) return NULL;
  r->m = m;
  r->stream = s;
  r->wl = wl;
  r->spin_budget_us = spin_budget_us;
  r->timeout_ns = 5 * SEC + 4 * wl->ns;
  return r;
}

void run_lengths(run_t *r, const uint64_t *lens, int n) {
  r->wl_var = *r->wl;
  r->wl = &r->wl_var;
  r->lens = lens;
  r->nlens = n;
  r->ilen = 0;
}

/* 0, 1: skipped (r->err says why), -1: failed. */
int run_open(run_t *r) {
  r->loop = malloc(sizeof(*r->loop));
  if (r->loop == NULL || uv_loop_init(r->loop) != 0) {
    free(r->loop);
    r->loop = NULL;
    snprintf(r->err, sizeof(r->err), "uv_loop_init failed");
    return -1;
  }
  uv_timer_init(r->loop, &r->tick);
  uv_timer_start(&r->tick, on_tick, 50, 50);
  return r->m->ops->open ? r->m->ops->open(r) : 0;
}

/* Not timed: the stream is idle (bounded wait: -1 if it is not), stray
 * wakeups of the last sample are handled. */
int run_prep(run_t *r) {
  if (bench.cu.cuStreamQuery(r->stream) != CUDA_SUCCESS &&
      drain_streams(&r->stream, 1, r->timeout_ns) != 0) {
    snprintf(r->err, sizeof(r->err), "the stream did not go idle");
    return -1;
  }
  if (r->loop) uv_run(r->loop, UV_RUN_NOWAIT);
  if (r->lens) r->wl_var.ns = r->lens[r->ilen++ % r->nlens];
  r->done = 0;
  r->status = 0;
  if (r->m->ops->prep) r->m->ops->prep(r);
  return 0;
}

/* One timed sample: 0, -1 timeout, -2 error (r->err). */
int run_sample(run_t *r, uint64_t *lat_ns) {
  uint64_t t0 = 0;
  int rc;
  r->t_enq = 0;
  rc = r->m->ops->sample(r, &t0);
  r->t0 = t0;
  if (rc) return rc;
  *lat_ns = r->t1 - t0;
  return 0;
}

void run_post(run_t *r) {
  if (r->m->ops->post) r->m->ops->post(r);
}

void run_close(run_t *r) {
  uint64_t end;
  int rc;

  if (r->m->ops->stop) r->m->ops->stop(r);
  if (r->abandon || r->loop == NULL) return; /* leaked on purpose */
  if (r->m->ops->close && r->m->ops->close(r) != 0) goto leak;
  uv_close((uv_handle_t *)&r->tick, NULL);
  end = uv_hrtime() + 5 * SEC;
  while (uv_loop_alive(r->loop) && uv_hrtime() < end)
    uv_run(r->loop, UV_RUN_NOWAIT);
  uv_run(r->loop, UV_RUN_NOWAIT);
  rc = uv_loop_close(r->loop);
  if (rc != 0) {
    printf("  uv_loop_close: %s (a handle is still open)\n", uv_err_name(rc));
    bench.errors++;
    goto leak;
  }
  free(r->loop);
  r->loop = NULL;
  return;
leak:
  r->abandon = 1;
}

void paths_str(char *buf, size_t n, const run_t *r) {
  if (!r->have_stats) {
    snprintf(buf, n, "-");
    return;
  }
  snprintf(buf, n, "spin=%" PRIu64 " reactor=%" PRIu64 " hostfn=%" PRIu64
                   " poll=%" PRIu64 "%s",
           r->stats.completed_spin, r->stats.completed_reactor,
           r->stats.completed_hostfn, r->stats.completed_poll,
           r->stats.fallbacks ? " (fell back to host functions)" : "");
}

/* ---- measuring ---------------------------------------------------------- */

int acc_init(acc_t *a, int n, int timing) {
  size_t sz = sizeof(double) * (size_t)(n > 0 ? n : 1);
  memset(a, 0, sizeof(*a));
  a->cap = n;
  a->lat = malloc(sz);
  a->ph = timing ? malloc(3 * sz) : NULL;
  if (a->lat == NULL) {
    free(a->ph);
    a->ph = NULL;
    return -1;
  }
  return 0;
}

void acc_free(acc_t *a) {
  free(a->lat);
  free(a->ph);
  a->lat = a->ph = NULL;
}

/* The timed samples so far into row w. */
void acc_row(acc_t *a, row_t *w) {
  int k = a->k, n = a->cap;
  if (a->ph && k > 0) {
    w->ph_enq = median_of(a->ph, k);
    w->ph_seen = median_of(a->ph + n, k);
    w->ph_deliver = median_of(a->ph + 2 * n, k);
    row_extra(w, "enqueued_p50=%.2f;seen_p50=%.2f;seen_to_callback_p50=%.2f",
              w->ph_enq, w->ph_seen, w->ph_deliver);
  }
  row_stats(w, a->lat, k);
  if (k > 0) {
    w->loop_cpu = a->thr / k;
    w->proc_cpu = a->proc / k;
  }
  if (a->rct_n > 0) w->reactor_cpu = a->rct / a->rct_n;
}

int measure_into(run_t *r, int warmup, int n, acc_t *a, row_t *w) {
  double *ph;
  int i, rc = 0, cap = a->cap;
  uint64_t ns = 0;
  cpu_t c0, c1;
  double r0 = NAN, r1 = NAN;
  unsigned tid0 = 0, tid1 = 0;

  if (n > cap - a->k) n = cap - a->k;
  for (i = 0; i < warmup + n; i++) {
    if (past_deadline()) {
      row_note(w, "truncated by the section deadline");
      break;
    }
    if ((rc = run_prep(r)) == 0) {
      if (r->m->ops == &uvcuda_ops) r0 = reactor_cpu_now_us(&tid0);
      cpu_begin(&c0);
      rc = run_sample(r, &ns);
      cpu_end(&c1);
      if (r->m->ops == &uvcuda_ops) r1 = reactor_cpu_now_us(&tid1);
      if (rc == -1)
        snprintf(r->err, sizeof(r->err), "TIMEOUT: no completion after %.1f s",
                 (double)r->timeout_ns / 1e9);
    }
    if (rc == -1) {
      r->abandon = 1;
      bench.timeouts++;
    }
    if (rc) {
      row_note(w, "error: %s", r->err);
      if (bench.sim) bench.errors++; /* the simulation never fails */
      break;
    }
    run_post(r);
    beat();
    if (bench.opt.gap_us > 0) { /* the GPU idles this long before the next */
      uint64_t t_end = uv_hrtime() + (uint64_t)bench.opt.gap_us * 1000u;
      while (uv_hrtime() < t_end) {}
    }
    if (i >= warmup) {
      uvcuda_timing_t t;
      int k = a->k++;
      if ((ph = a->ph) && uvcuda_run_timing(r, &t) == 0 && t.seen_ns) {
        ph[k] = (double)(t.enqueued_ns - t.start_ns) / 1e3;
        ph[cap + k] = (double)(t.seen_ns - t.start_ns) / 1e3;
        ph[2 * cap + k] = (double)(t.callback_ns - t.seen_ns) / 1e3;
      } else if (ph && r->m->ops != &uvcuda_ops && r->t_enq) {
        /* a floor: it sees the completion itself, with no callback */
        ph[k] = (double)(r->t_enq - r->t0) / 1e3;
        ph[cap + k] = (double)(r->t1 - r->t0) / 1e3;
        ph[2 * cap + k] = 0;
      } else if (ph) {
        free(ph); /* incomplete: no phases for this row */
        a->ph = NULL;
      }
      a->lat[k] = (double)ns / 1e3;
      a->thr += c1.thr - c0.thr;
      a->proc += c1.proc - c0.proc;
      if (!isnan(r0) && !isnan(r1) && tid0 == tid1) {
        a->rct += r1 - r0;
        a->rct_n++;
      } else if (r->m->ops == &uvcuda_ops && isnan(r0) && isnan(r1)) {
        a->rct_n++; /* no reactor (POLL): it spent nothing */
      }
    }
  }
  return rc ? -1 : 0;
}

/* Warm-up, then n timed samples into row w. Returns 0, or -1 when the
 * run failed or timed out (then r->abandon says whether to leak). */
int measure(run_t *r, int warmup, int n, row_t *w) {
  acc_t a;
  int rc;
  if (acc_init(&a, n, r->timing) != 0) return -1;
  rc = measure_into(r, warmup, n, &a, w);
  acc_row(&a, w);
  acc_free(&a);
  return rc;
}
