/* The idle section: CPU per second while nothing completes (no loop, a
 * uvcuda loop with nothing armed, one future armed on a held stream). */
#include "bench.h"

#include <math.h>
#include <stdlib.h>

static void on_idle_timer(uv_timer_t *t) { uv_stop(t->loop); }

static void on_flag_closed(uv_handle_t *h) { *(volatile int *)h->data = 1; }

/* Runs the loop (nothing else on it) for dur_ns; CPU per second. */
static void idle_measure(uv_loop_t *loop, uint64_t dur_ns, row_t *w) {
  uv_timer_t t;
  cpu_t c0, c1;
  uint64_t t0, t1;
  volatile int closed = 0;

  double r0, r1;

  uv_timer_init(loop, &t);
  r0 = reactor_cpu_us();
  cpu_begin(&c0);
  t0 = uv_hrtime();
  uv_timer_start(&t, on_idle_timer, dur_ns / MS, 0);
  uv_run(loop, UV_RUN_DEFAULT);
  t1 = uv_hrtime();
  cpu_end(&c1);
  r1 = reactor_cpu_us();
  w->reactor_cpu = (r1 - r0) / ((double)(t1 - t0) / 1e9);
  if (!isnan(w->reactor_cpu))
    row_extra(w, "reactor_cpu_us_per_s=%.1f", w->reactor_cpu);
  t.data = (void *)&closed;
  uv_close((uv_handle_t *)&t, on_flag_closed);
  while (!closed) uv_run(loop, UV_RUN_NOWAIT);
  beat();
  w->n = 1;
  w->loop_cpu = (c1.thr - c0.thr) / ((double)(t1 - t0) / 1e9);
  w->proc_cpu = (c1.proc - c0.proc) / ((double)(t1 - t0) / 1e9);
  row_extra(w, "unit=cpu_us_per_s;wall_ms=%.1f", (double)(t1 - t0) / 1e6);
}

static void idle_print(const row_t *w) {
  char a[32], b[32], c[32];
  printf("  %-16s %-16s %12s %12s %12s  %s\n", w->method, w->workload,
         fmt_num(a, sizeof(a), w->proc_cpu, 1),
         fmt_num(b, sizeof(b), w->loop_cpu, 1),
         fmt_num(c, sizeof(c), w->reactor_cpu, 1), w->note);
  fflush(stdout);
}

static void idle_uvcuda(int mi, int armed, uint64_t dur_ns) {
  const method_t *m = &METHODS[mi];
  char err[200];
  run_t *r;
  row_t w;
  uint64_t ns;
  int rc;

  row_init(&w, "idle", m->name, armed ? "one-armed-held" : "nothing-armed",
           (double)dur_ns / 1e9);
  r = run_new(m, bench.timed, &WL[W_EMPTY], -1);
  if (r == NULL) return;
  rc = run_open(r);
  if (rc != 0) {
    row_note(&w, "%s: %s", rc > 0 ? "skipped" : "error", r->err);
    if (rc < 0) bench.errors++;
    goto out;
  }
  /* One future completes first, so the reactor thread has run. */
  if ((rc = run_prep(r)) == 0) rc = run_sample(r, &ns);
  if (rc) {
    if (rc == -1) r->abandon = 1;
    row_note(&w, "error: first future: %s", rc == -1 ? "TIMEOUT" : r->err);
    bench.errors++;
    goto out;
  }
  uv_timer_stop(&r->tick); /* its wakeups would count */
  if (!armed) {
    uv_run(r->loop, UV_RUN_NOWAIT);
    /* A reactor asleep for a look when the last watch left makes that
     * look, then parks: at most the longest back-off step (1 ms) away.
     * The window opens after it, on the steady state. */
    uv_sleep(50);
    idle_measure(r->loop, dur_ns, &w);
    goto out;
  }
  if (hold_streams(bench.xpend[0], 1, bench.hold_d, err, sizeof(err)) != 0) {
    row_note(&w, "skipped: cannot hold a stream (%s)", err);
    goto out;
  }
  r->done = 0;
  r->status = 0;
  rc = uvcuda_future_start(uvcuda_run_future(r), bench.xpend[0][0], NULL,
                          uvcuda_run_on_future);
  if (rc) {
    hold_open();
    row_note(&w, "error: uvcuda_future_start: %s", uvcuda_err_name(rc));
    bench.errors++;
    goto out;
  }
  idle_measure(r->loop, dur_ns, &w);
  if (r->done) row_note(&w, "invalid: the held future completed early");
  hold_open();
  uv_timer_again(&r->tick);
  if (wait_flag(r->loop, &r->done, 10 * SEC)) {
    r->abandon = 1;
    row_note(&w, "error: the held future did not complete after the release");
    bench.errors++;
    goto out;
  }
  drain_streams(bench.xpend[0], 1, 10 * SEC);
out:
  run_close(r);
  if (r->have_stats) stats_extra(&w, &r->stats);
  if (!r->abandon) free(r);
  row_emit(&w);
  idle_print(&w);
}

void section_idle(void) {
  uint64_t dur = bench.opt.quick ? 500 * MS : 1 * SEC;
  uv_loop_t *loop;
  row_t w;

  section_header("idle: CPU time while nothing completes, us of CPU per second",
                 "no-loop: the process without any uvcuda loop (the driver's "
                 "own threads); nothing-armed: a uvcuda loop whose reactor has "
                 "run once, from 50 ms after its last completion; one-armed-held: one future armed on a held stream; "
                 "reactorCPU/s: the reactor thread's own CPU clock");
  printf("  %-16s %-16s %12s %12s %12s  %s\n", "method", "state", "procCPU/s",
         "loopCPU/s", "reactorCPU/s", "notes");
  row_init(&w, "idle", "no-loop", "nothing", (double)dur / 1e9);
  loop = malloc(sizeof(*loop));
  if (loop && uv_loop_init(loop) == 0) {
    idle_measure(loop, dur, &w);
    if (uv_loop_close(loop) != 0) bench.errors++;
  }
  free(loop);
  row_emit(&w);
  idle_print(&w);
  if (!past_deadline()) idle_uvcuda(M_AUTO, 0, dur);
  if (!past_deadline()) idle_uvcuda(M_AUTO, 1, dur);
  if (!past_deadline()) idle_uvcuda(M_HOSTFN, 1, dur);
}
