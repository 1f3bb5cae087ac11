/* The wake section: what waking a sleeping thread costs, with no GPU work
 * in the way: a loop thread woken by uv_async_send, and uvcuda's reactor
 * woken by an arm (against the reactor spinning, the same run). */
#include "bench.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

/* No GPU: another thread calls uv_async_send at a time it records while the
 * loop thread sleeps in epoll_wait; the callback records its own time. This
 * is what any "loop asleep while waiting" completion pays on top of seeing
 * the work finish: the reactor's, the flag thread's, a host function's. */
/* Shared by the loop thread and the sender: atomics only (the sender
 * writes t0 before its send, the callback reads it after). */
static uv_async_t g_wake_async;
static atomic_uint_fast64_t g_wake_t0;
static atomic_int g_wake_n, g_wake_stop;
static double *g_wake_lat;
static int g_wake_want;

static void on_wake(uv_async_t *h) {
  uint64_t t1 = uv_hrtime();
  int n = atomic_load_explicit(&g_wake_n, memory_order_relaxed);
  (void)h;
  if (n < g_wake_want)
    g_wake_lat[n] = (double)(t1 - atomic_load(&g_wake_t0)) / 1e3;
  atomic_store_explicit(&g_wake_n, n + 1, memory_order_release);
  if (n + 1 >= g_wake_want) uv_close((uv_handle_t *)h, NULL);
}

static void *wake_sender(void *arg) {
  int i, seen;
  (void)arg;
  for (i = 0; i < g_wake_want && !atomic_load(&g_wake_stop); i++) {
    struct timespec ts = {0, 200000}; /* let the loop fall asleep */
    nanosleep(&ts, NULL);
    atomic_store(&g_wake_t0, uv_hrtime());
    uv_async_send(&g_wake_async);
    seen = i + 1;
    while (atomic_load_explicit(&g_wake_n, memory_order_acquire) < seen &&
           !atomic_load(&g_wake_stop))
      ;
  }
  return NULL;
}

/* An arm wakes a sleeping reactor (test-reactor checks that it does; this
 * is what it is worth). One future held armed keeps the reactor from
 * parking; a second one is armed (spin budget 0) on a stream that a gate
 * holds, and the gate opens 5 ms later: timed from the open to the
 * callback. asleep: no reactor spin or yield phase, so at each arm the
 * reactor sleeps in its back-off (2 ms steps); spinning, the baseline of
 * the same run: a 1 s spin phase, restarted by every arm. */
static uint64_t g_aw_t1;
static volatile int g_aw_done;
static int g_aw_status;

static void on_aw(uvcuda_future_t *f, int status) {
  (void)f;
  g_aw_t1 = uv_hrtime();
  g_aw_status = status;
  g_aw_done = 1;
}

static int op_aw_gate(uvcuda_future_t *f, uvcuda_stream_t s) {
  cuuint32_t v = (cuuint32_t)(uintptr_t)f->data;
  return (int)bench.cu.cuStreamWaitValue32((CUstream)s, bench.awgate_d, v,
                                     CU_STREAM_WAIT_VALUE_GEQ);
}

static void on_aw_held(uvcuda_future_t *f, int status) {
  (void)status;
  *(volatile int *)f->data = 1;
}

static void on_aw_closed(uvcuda_future_t *f) { (void)f; }

static void wake_arm(int asleep, int n, row_t *w) {
  struct timespec settle = {0, 10 * 1000 * 1000}, gap = {0, 5 * 1000 * 1000};
  uvcuda_options_t o;
  uvcuda_future_t held, f;
  uv_timer_t tick;
  uv_loop_t *loop;
  uvcuda_loop_t ul;
  volatile int held_done = 0;
  double *lat = calloc((size_t)n, sizeof(double));
  uint32_t seq = __atomic_load_n(bench.awgate, __ATOMIC_ACQUIRE);
  char err[200];
  int i, k = 0, rc;

  loop = malloc(sizeof(*loop));
  if (lat == NULL || loop == NULL || uv_loop_init(loop) != 0) {
    row_note(w, "error: out of memory");
    bench.errors++;
    free(lat);
    free(loop);
    return;
  }
  uv_timer_init(loop, &tick);
  uv_timer_start(&tick, on_tick, 50, 50);
  uvcuda_options_init(&o);
  o.completion = UVCUDA_COMPLETION_REACTOR;
  o.spin_budget_us = 0;
  o.reactor_spin_us = asleep ? 0 : 1000000;
  o.reactor_yield_us = 0;
  o.reactor_sleep_max_us = 2000;
  o.probe_interval_us = 2000;
  if ((rc = uvcuda_loop_init(loop, &ul, &o)) != 0) {
    row_note(w, "error: uvcuda_loop_init: %s", uvcuda_err_name(rc));
    bench.errors++;
    return; /* the loop is leaked: its timer is on it */
  }
  if (hold_streams(bench.xpend[0], 1, bench.hold_d, err, sizeof(err)) != 0) {
    row_note(w, "skipped: cannot hold a stream (%s)", err);
    return;
  }
  uvcuda_future_init(&ul, &held);
  uvcuda_future_init(&ul, &f);
  held.data = (void *)&held_done;
  rc = uvcuda_future_start(&held, bench.xpend[0][0], NULL, on_aw_held);
  if (rc != 0) {
    hold_open();
    row_note(w, "error: uvcuda_future_start: %s", uvcuda_err_name(rc));
    bench.errors++;
    return;
  }
  for (i = 0; i < n; i++) {
    uint64_t t0;
    if (past_deadline()) {
      row_note(w, "truncated by the section deadline");
      break;
    }
    uv_run(loop, UV_RUN_NOWAIT);
    nanosleep(&settle, NULL); /* asleep: past the back-off's first steps */
    f.data = (void *)(uintptr_t)++seq;
    g_aw_done = 0;
    if ((rc = uvcuda_future_start(&f, bench.timed, op_aw_gate, on_aw)) != 0) {
      row_note(w, "error: uvcuda_future_start: %s", uvcuda_err_name(rc));
      bench.errors++;
      break;
    }
    uv_run(loop, UV_RUN_NOWAIT); /* spin budget 0: armed */
    nanosleep(&gap, NULL);
    t0 = uv_hrtime();
    __atomic_store_n(bench.awgate, seq, __ATOMIC_RELEASE);
    if (wait_flag(loop, &g_aw_done, 5 * SEC) != 0 || g_aw_status != 0) {
      row_note(w, "error: %s", g_aw_done ? uvcuda_err_name(g_aw_status)
                                         : "TIMEOUT: no callback after 5 s");
      bench.errors++;
      hold_open();
      return; /* leaked: the reactor may still ring the loop */
    }
    lat[k++] = (double)(g_aw_t1 - t0) / 1e3;
    beat();
  }
  hold_open();
  if (wait_flag(loop, &held_done, 10 * SEC) != 0) {
    row_note(w, "error: the held future did not complete after the release");
    bench.errors++;
    return;
  }
  row_stats(w, lat, k);
  free(lat);
  uvcuda_future_close(&held, on_aw_closed);
  uvcuda_future_close(&f, on_aw_closed);
  uv_run(loop, UV_RUN_NOWAIT);
  if (uvcuda_loop_close(&ul, NULL) != 0) bench.errors++;
  uv_close((uv_handle_t *)&tick, NULL);
  uv_run(loop, UV_RUN_DEFAULT);
  if (uv_loop_close(loop) != 0) bench.errors++;
  free(loop);
  drain_streams(bench.xpend[0], 1, 10 * SEC);
}

static void wake_print(const row_t *w) {
  printf("  %-22s p50 %7.1f  p90 %7.1f  p99 %7.1f  (%d samples)%s%s\n",
         w->method, w->p50, w->p90, w->p99, w->n, w->note[0] ? "  " : "",
         w->note);
}

void section_wake(void) {
  uv_loop_t loop;
  pthread_t t;
  row_t w, wa, ws;
  int n = bench.opt.quick ? 50 : 2000, k;
  int na = bench.opt.quick ? 21 : 200;

  section_header("wake: uv_async_send from another thread -> callback on a "
                 "sleeping loop thread, us (no GPU)",
                 "the floor under every completion that lets the loop thread "
                 "sleep while the GPU works");
  g_wake_lat = calloc((size_t)n, sizeof(double));
  if (g_wake_lat == NULL) return;
  g_wake_want = n;
  atomic_store(&g_wake_n, 0);
  atomic_store(&g_wake_stop, 0);
  uv_loop_init(&loop);
  uv_async_init(&loop, &g_wake_async, on_wake);
  pthread_create(&t, NULL, wake_sender, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  atomic_store(&g_wake_stop, 1);
  pthread_join(t, NULL);
  uv_loop_close(&loop);
  row_init(&w, "wake", "async-wake", "none", 0);
  k = atomic_load(&g_wake_n);
  row_stats(&w, g_wake_lat, k < n ? k : n);
  row_emit(&w);
  wake_print(&w);
  free(g_wake_lat);

  printf(" an arm wakes a reactor asleep in its back-off: gate open -> "
         "callback, us\n");
  row_init(&wa, "wake", "reactor-arm-asleep", "gate-open", 0);
  wake_arm(1, na, &wa);
  row_emit(&wa);
  wake_print(&wa);
  row_init(&ws, "wake", "reactor-arm-spinning", "gate-open", 0);
  wake_arm(0, na, &ws);
  row_emit(&ws);
  wake_print(&ws);
  if (wa.n && ws.n)
    printf("  asleep - spinning (baseline, this run): p50 %+.1f us, p90 "
           "%+.1f us\n", wa.p50 - ws.p50, wa.p90 - ws.p90);
}

