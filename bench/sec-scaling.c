/* The scaling section: the latency of one timed `empty` future while N
 * others are pending on held streams (uvcuda-auto, with raw-spin,
 * memop-spin and uvcuda-poll measured in the same state), and with N idle
 * uv_async_t handles (hostfn-async). */
#include "bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void scaling_row_print(const row_t *w) {
  char a[32], b[32], c[32], d[32], e[32], f[32];
  printf("  %-14s %8.0f %9s %9s %9s %9s %9s %8s  %s\n", w->method, w->param,
         fmt_num(a, sizeof(a), w->p50, 1), fmt_num(b, sizeof(b), w->p90, 1),
         fmt_num(c, sizeof(c), w->p99, 1), fmt_num(d, sizeof(d), w->loop_cpu, 1),
         fmt_num(e, sizeof(e), w->proc_cpu, 1),
         fmt_num(f, sizeof(f), w->reactor_cpu, 1), w->extra);
  fflush(stdout);
}

static int scaling_samples(int *warmup) {
  *warmup = bench.opt.warmup;
  return bench.opt.samples;
}

/* The timed op by another method in the same state (N futures pending on
 * the held streams): raw-spin is the GPU's own latency under that load,
 * uvcuda-poll leaves the reactor out. Opened, and used once, before the
 * streams are held: closing or first use of a loop under the hold could
 * wait for the GPU (cuMemFreeHost synchronises the device). */
static run_t *scaling_base_open(int mi) {
  run_t *r = run_new(&METHODS[mi], bench.timed, &WL[W_EMPTY], -1);
  uint64_t ns;
  if (r == NULL) return NULL;
  if (run_open(r) != 0 || run_prep(r) != 0 || run_sample(r, &ns) != 0) {
    printf("  %s: could not open the baseline: %s\n", METHODS[mi].name, r->err);
    bench.errors++;
    run_close(r);
    if (!r->abandon) free(r);
    return NULL;
  }
  run_post(r);
  return r;
}

static void scaling_base_close(run_t *r) {
  if (r == NULL) return;
  run_close(r);
  if (!r->abandon) free(r);
}

/* measure() while ninit futures are held; 0 only if the hold held. */
static int measure_held(run_t *r, int ninit, row_t *w) {
  int rc;
  row_extra(w, "pending=%d;held_streams=%d;contexts=%d", ninit,
            bench.nxctx * NPEND, bench.nxctx);
  rc = measure(r, bench.opt.warmup, bench.opt.samples, w);
  if (atomic_load(&bench.blocked)) {
    row_note(w, "invalid: the watchdog opened the hold during the "
             "measurement");
    return -1;
  }
  if (bench.held.done > 0) {
    row_note(w, "invalid: %d held futures completed during the "
             "measurement", bench.held.done);
    return -1;
  }
  return rc;
}

static void scaling_baseline(run_t *r, int mi, int N, int ninit) {
  row_t w;
  row_init(&w, "scaling", METHODS[mi].name, "empty", N);
  if (r == NULL || r->abandon)
    row_note(&w, "skipped: the baseline is not open");
  else
    measure_held(r, ninit, &w);
  row_emit(&w);
  scaling_row_print(&w);
}

/* What the reactor's fault probe pays in this state: cuCtxSetCurrent +
 * cuStreamQuery of a held stream of each context (the probe's calls), and
 * of the idle timed stream; median and max of 200, us. */
static void probe_cost(int ninit) {
  double t[200], med, mx;
  int k, i;
  for (k = -1; k < bench.nxctx; k++) {
    CUstream s = k < 0 ? bench.timed : bench.xpend[k][0];
    CUcontext c = k < 0 ? bench.ctx : bench.xctx[k];
    for (i = 0; i < 200; i++) {
      uint64_t t0 = uv_hrtime();
      bench.cu.cuCtxSetCurrent(c);
      bench.cu.cuStreamQuery(s);
      t[i] = (double)(uv_hrtime() - t0) / 1e3;
      bench.cu.cuCtxSetCurrent(bench.ctx);
    }
    qsort(t, 200, sizeof(t[0]), cmp_double);
    med = t[100];
    mx = t[199];
    printf("  probe cost (%d pending): %s: cuCtxSetCurrent+cuStreamQuery "
           "p50 %.2f us, max %.2f us\n", ninit,
           k < 0 ? "timed stream" : "held stream", med, mx);
  }
}

static void scaling_uvcuda(const int *Ns, int nN) {
  const method_t *m = &METHODS[M_AUTO];
  run_t *braw, *bmem, *bpoll;
  uvcuda_future_t *pf = NULL;
  int nmax = Ns[nN - 1], ninit = 0, j, rc, ok;
  char err[200] = "";
  run_t *r;
  row_t w;

  braw = scaling_base_open(M_RAW);
  bmem = scaling_base_open(M_MEMOP);
  bpoll = scaling_base_open(M_POLL);
  r = run_new(m, bench.timed, &WL[W_EMPTY], -1);
  if (r != NULL) r->timing = 1; /* where the time goes, per N */
  if (r == NULL) {
    scaling_base_close(braw);
    scaling_base_close(bmem);
    scaling_base_close(bpoll);
    return;
  }
  rc = run_open(r);
  pf = calloc((size_t)nmax, sizeof(*pf));
  if (rc == 0 && pf != NULL) {
    memset(&bench.held, 0, sizeof(bench.held));
    atomic_store(&bench.blocked, 0);
    rc = hold_all(err, sizeof(err)) ? 1 : 0;
  } else {
    snprintf(err, sizeof(err), "%s", rc ? r->err : "out of memory");
    rc = -1;
  }
  if (rc != 0) {
    for (j = 0; j < nN; j++) {
      row_init(&w, "scaling", m->name, "empty", Ns[j]);
      row_note(&w, rc > 0 ? "skipped: cannot hold streams (%s)" : "error: %s",
               err);
      row_emit(&w);
      scaling_row_print(&w);
    }
    if (rc < 0) bench.errors++;
    run_close(r);
    if (!r->abandon) free(r);
    free(pf);
    scaling_base_close(braw);
    scaling_base_close(bmem);
    scaling_base_close(bpoll);
    return;
  }
  atomic_store(&bench.hold_watch, 1);
  for (j = 0; j < nN; j++) {
    row_init(&w, "scaling", m->name, "empty", Ns[j]);
    ok = 0;
    while (ninit < Ns[j]) {
      if (atomic_load(&bench.blocked) || past_deadline()) break;
      if (ninit == bench.test_stall) { /* test hook: a blocked enqueue */
        uint64_t t_end = uv_hrtime() + 10 * bench.stall_open_ns;
        while (__atomic_load_n(bench.hold, __ATOMIC_ACQUIRE) !=
                   atomic_load(&bench.hold_value) &&
               uv_hrtime() < t_end)
          usleep(1000);
      }
      uvcuda_future_init(uvcuda_run_loop(r), &pf[ninit]);
      rc = uvcuda_future_start(&pf[ninit], pend_stream(ninit), NULL,
                               held_on_done);
      ninit++;
      if (rc) {
        snprintf(err, sizeof(err), "uvcuda_future_start: %s",
                 uvcuda_err_name(rc));
        bench.held.done++; /* no callback will come */
        bench.held.err++;
        break;
      }
      beat();
    }
    if (atomic_load(&bench.blocked)) {
      row_note(&w, "blocked: GPU queue full at N=%d (an enqueue stalled for "
               "%llu s with %d futures pending; the watchdog opened the hold)",
               Ns[j], (unsigned long long)(bench.stall_open_ns / SEC),
               ninit - 1);
    } else if (bench.held.err) {
      row_note(&w, "error: pending future failed (%s)",
               err[0] ? err : "callback error");
      bench.errors++;
    } else if (ninit < Ns[j]) {
      row_note(&w, "skipped: section deadline reached with %d pending", ninit);
    } else {
      /* Let the spin budget of the new ones pass: all armed, none spin. */
      held_wait_armed(r->loop, &pf[ninit - 1]);
      if (bench.held.done > 0) {
        row_note(&w, "error: %d held futures completed: the hold did not hold",
                 bench.held.done);
        bench.errors++;
      } else {
        ok = measure_held(r, ninit, &w) == 0;
      }
    }
    row_emit(&w);
    scaling_row_print(&w);
    if (!isnan(w.ph_seen))
      printf("    phases, p50 us from start: enqueued %.1f, completion seen "
             "%.1f, seen -> callback %.1f\n", w.ph_enq, w.ph_seen,
             w.ph_deliver);
    if (!ok) {
      j++;
      break;
    }
    scaling_baseline(braw, M_RAW, Ns[j], ninit);
    scaling_baseline(bmem, M_MEMOP, Ns[j], ninit);
    scaling_baseline(bpoll, M_POLL, Ns[j], ninit);
  }
  for (; j < nN; j++) { /* the N not reached */
    row_init(&w, "scaling", m->name, "empty", Ns[j]);
    row_note(&w, "skipped: not measured after the step before");
    row_emit(&w);
    scaling_row_print(&w);
  }
  probe_cost(ninit);
  /* Release, drain, close. */
  atomic_store(&bench.hold_watch, 0);
  hold_open();
  scaling_base_close(braw);
  scaling_base_close(bmem);
  scaling_base_close(bpoll);
  if (r->abandon) {
    run_close(r); /* leaks r and the futures: a wait timed out */
    return;
  }
  if ((rc = held_take_back(r->loop, pf, ninit)) != 0) {
    if (rc == -1)
      printf("  held futures did not complete after the release (%d of %d)\n",
             bench.held.done, ninit);
    else
      printf("  held futures did not close\n");
    bench.errors++;
    r->abandon = 1;
    run_close(r);
    return;
  }
  run_close(r);
  if (!r->abandon) {
    free(r);
    free(pf);
  }
}

static void on_never(uv_async_t *h) { (void)h; }

static int handles_closed;

static void on_count_closed(uv_handle_t *h) {
  (void)h;
  handles_closed++;
}

static void scaling_hostfn(const int *Ns, int nN) {
  const method_t *m = &METHODS[M_HOSTFN_ASYNC];
  uv_async_t *hs = NULL;
  int nmax = Ns[nN - 1], nh = 0, j, rc = 0, warmup, n;
  run_t *r;
  row_t w;

  n = scaling_samples(&warmup);
  r = run_new(m, bench.timed, &WL[W_EMPTY], -1);
  if (r == NULL) return;
  hs = calloc((size_t)nmax, sizeof(*hs));
  if (hs == NULL || run_open(r) != 0) {
    bench.errors++;
    free(hs);
    run_close(r);
    if (!r->abandon) free(r);
    return;
  }
  for (j = 0; j < nN; j++) {
    row_init(&w, "scaling", m->name, "empty", Ns[j]);
    if (rc != 0 || past_deadline() || bench.timeouts >= 2) {
      row_note(&w, "skipped: %s", rc ? "the step before failed"
                                     : "section deadline reached");
    } else {
      while (nh < Ns[j]) {
        uv_async_init(r->loop, &hs[nh++], on_never);
        if ((nh & 1023) == 0) beat();
      }
      row_extra(&w, "idle_async_handles=%d", nh);
      rc = measure(r, warmup, n, &w);
    }
    row_emit(&w);
    scaling_row_print(&w);
  }
  if (r->abandon) {
    run_close(r); /* leaks */
    return;
  }
  handles_closed = 0;
  for (j = 0; j < nh; j++) uv_close((uv_handle_t *)&hs[j], on_count_closed);
  if (wait_count(r->loop, &handles_closed, nh, 30 * SEC) != 0) {
    bench.errors++;
    r->abandon = 1;
  }
  run_close(r);
  if (!r->abandon) {
    free(r);
    free(hs);
  }
}

void section_scaling(void) {
  /* On the simulation 100000 pending futures take well under a second
   * (every op is queued in host memory), so --quick keeps them all. */
  static const int full[] = {1, 100, 10000, 100000};
  /* A GPU hardware queue takes about 1,020 markers behind a held wait (an
   * enqueue stalled at 8,160 pending on 8 held streams, H200, 2026-12-02):
   * 31 held streams of one context hold ~31k, so 100k need the streams of
   * several contexts (setup creates them). */
  static const int gpu[] = {1, 100, 1000, 10000, 30000, 100000};
  const int *Ns = bench.sim ? full : gpu;
  int nN = bench.sim ? COUNT(full) : COUNT(gpu);

  /* Without enough contexts, stop where the queues would fill. */
  while (!bench.sim && nN > 1 && Ns[nN - 1] > bench.nxctx * NPEND * 800) nN--;

  section_header("scaling: p50 of one timed `empty` future while N others are "
                 "pending, us",
                 "uvcuda-auto: N futures spread over the held streams "
                 "(cuStreamWaitValue32) of the scaling contexts; "
                 "hostfn-async: N idle uv_async_t handles on the loop");
  printf("  %-14s %8s %9s %9s %9s %9s %9s %8s  %s\n", "method", "N", "p50",
         "p90", "p99", "loopCPU", "procCPU", "rctCPU", "notes");
  scaling_uvcuda(Ns, nN);
  if (!bench.sim && Ns[nN - 1] < 100000)
    printf("  %-14s %8d  not run: beyond what %d held hardware queues take "
           "(~1,020 markers each; only %d context(s))\n", "uvcuda-auto",
           100000, bench.nxctx * NPEND, bench.nxctx);
  scaling_hostfn(full, COUNT(full));
}
