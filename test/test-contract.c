/* Contract tests: what a user of uvcuda may rely on, written as a stranger
 * would write them, against the public header only (uvcuda.h), plus the
 * driver calls of tu.h and, on the simulated driver, the controls of
 * simcuda.h. Each case comes from a bug report of an outside tester.
 *
 * Every case runs in a forked child of its own (a fresh driver, a sticky
 * fault dies with its process, a crash fails one case only), as a cmocka
 * group of one with its own setup and teardown. The parent never loads the
 * driver (a CUDA process must not fork after cuInit). No case bounds a
 * wall-clock time: they assert orders, counts, states and error codes; a
 * watchdog only turns a hang into a failure.
 *
 * Suite `sim` (the simulated driver; SIMCUDA_DEVICES=2) and suite `gpu`
 * (--gpu: the real driver, exit 77 without one). Args: [--gpu] [filter]:
 * only cases whose label contains filter. */
#include "tu.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "simcuda.h"

static int want_real;
/* x10 under UVCUDA_TEST_SLOW (valgrind); env UVCUDA_TEST_WATCHDOG_MS. */
static int watchdog_ms = 20000;

#define ILLEGAL UVCUDA_ECUDA(CUDA_ERROR_ILLEGAL_ADDRESS)

/* ---- the cases' parameters ---------------------------------------------- */

typedef struct case_s case_t;
struct case_s {
  const char *name;
  CMUnitTestFunction fn;
  uvcuda_completion_t c;
  int variant;
  int sim_only; /* needs a simulation control */
  char label[160];
};

static const case_t *param(void **state) { return *state; }

static const char *strategy_name(uvcuda_completion_t c) {
  return uvcuda_completion_name(c);
}

static int sim(void) { return tu_is_simulated(); }

/* Where a fault reaches: the H200 fails every context of the device. */
static int fault_reaches_the_device(void) {
  return !sim() || simcuda_fault_scope() == SIMCUDA_FAULT_SCOPE_DEVICE;
}

/* ---- contexts, streams, kernels ----------------------------------------- */

typedef struct {
  CUcontext ctx;
  CUmodule mod;
  CUfunction fault, sleep;
} tctx_t;

/* A context of device 0 made with cuCtxCreate; the caller's current
 * context stays current. */
static int g_contexts; /* made by this process: a failure says how many */

static void tctx_create(tctx_t *t) {
  CUdevice dev;
  CUresult r;
  memset(t, 0, sizeof(*t));
  TU_CU(tu.cuDeviceGet(&dev, 0));
  if ((r = tu.cuCtxCreate(&t->ctx, 0, dev)) != CUDA_SUCCESS)
    fail_msg("cuCtxCreate = %d after %d contexts made in this case", (int)r, g_contexts);
  g_contexts++;
  TU_CU(tu.cuCtxPopCurrent(NULL));
}

static void tctx_kernels(tctx_t *t) {
  TU_CU(tu.cuCtxPushCurrent(t->ctx));
  TU_CU(tu.cuModuleLoadData(&t->mod, uvcuda_test_kernels_ptx));
  TU_CU(tu.cuModuleGetFunction(&t->fault, t->mod, "uvcuda_fault"));
  TU_CU(tu.cuModuleGetFunction(&t->sleep, t->mod, "uvcuda_sleep_ns"));
  TU_CU(tu.cuCtxPopCurrent(NULL));
}

static void tctx_destroy(tctx_t *t) {
  if (t->ctx) tu.cuCtxDestroy(t->ctx); /* takes its streams and module */
  t->ctx = NULL;
}

/* Contexts whose destroy waits for the end of the case: destroying a
 * context frees the pinned memory made in it, and the next round could be
 * handed the same addresses while the library (which may free its memory
 * late, on another thread) still holds them (see
 * a_context_destroyed_after_its_loop_closed_is_left_alone). */
static tctx_t *g_later;
static int g_nlater;

static void tctx_destroy_later(tctx_t *t) {
  g_later = realloc(g_later, (size_t)(g_nlater + 1) * sizeof(*g_later));
  g_later[g_nlater++] = *t;
  t->ctx = NULL;
}

static void tctx_destroy_the_rest(void) {
  for (int i = 0; i < g_nlater; i++) tctx_destroy(&g_later[i]);
  free(g_later);
  g_later = NULL;
  g_nlater = 0;
}

static CUstream stream_in(CUcontext c) {
  CUstream s;
  TU_CU(tu.cuCtxPushCurrent(c));
  s = tu_stream();
  TU_CU(tu.cuCtxPopCurrent(NULL));
  return s;
}

static void fault_in(const tctx_t *t, CUstream s) {
  TU_CU(tu.cuLaunchKernel(t->fault, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL));
}

static CUresult launch_sleep(CUfunction fn, CUstream s, uint64_t ns) {
  void *args[] = {&ns};
  return tu.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, s, args, NULL);
}

static CUresult sleep_in(const tctx_t *t, CUstream s, uint64_t ns) {
  return launch_sleep(t->sleep, s, ns);
}

/* Longer than any watchdog: a case that waits for it hangs. */
static uint64_t long_kernel_ns(void) { return (uint64_t)watchdog_ms * 4000000u; }

/* ---- futures and loops --------------------------------------------------- */

typedef struct {
  int calls;
  int status;
  int order;      /* position among all callbacks of the case */
  int closed;
  int gate_open;  /* the test had opened the future's gate at the callback */
  int timing_rc;
  uvcuda_timing_t timing;
} rec_t;

static int g_order;
static int g_gates_open; /* set by the test when it opens its gates */
static int g_skipped;

#define SKIP()       \
  do {               \
    g_skipped = 1;   \
    skip();          \
  } while (0)

static void on_rec(uvcuda_future_t *f, int status) {
  rec_t *r = f->data;
  r->calls++;
  r->status = status;
  r->order = ++g_order;
  r->gate_open = g_gates_open;
  r->timing_rc = uvcuda_future_timing(f, &r->timing);
}

static void loop_open(uv_loop_t *uv, uvcuda_loop_t *ul, uvcuda_completion_t c,
                      int spin_us, int probe_us, uint32_t flags) {
  uvcuda_options_t o;
  uvcuda_options_init(&o);
  o.completion = c;
  o.spin_budget_us = spin_us;
  o.probe_interval_us = probe_us;
  o.flags = flags;
  assert_int_equal(uv_loop_init(uv), 0);
  TU_OK(uvcuda_loop_init(uv, ul, &o));
}

static void on_tick(uv_timer_t *t) { (void)t; }

/* Runs the loop (each pass blocks at most 1 ms) until pred(arg) or the
 * watchdog; returns 0, or -1 on the watchdog. */
static int run_until(uv_loop_t *uv, int (*pred)(void *), void *arg) {
  uv_timer_t tick;
  uint64_t end = uv_hrtime() + (uint64_t)watchdog_ms * 1000000u;
  int rc = 0;
  uv_timer_init(uv, &tick);
  uv_timer_start(&tick, on_tick, 1, 1);
  while (!pred(arg)) {
    if (uv_hrtime() > end) {
      rc = -1;
      break;
    }
    uv_run(uv, UV_RUN_ONCE);
  }
  uv_close((uv_handle_t *)&tick, NULL);
  uv_run(uv, UV_RUN_NOWAIT);
  return rc;
}

/* Calls that look at a stream's or event's progress, so far (simulation). */
static uint64_t looks(void) {
  return simcuda_call_count("cuStreamQuery") + simcuda_call_count("cuEventQuery") +
         simcuda_call_count("cuStreamIsCapturing");
}

/* At least `passes` UV_RUN_NOWAIT passes and `probes` fault-probe
 * intervals of probe_us: time for the library to look at its streams. On
 * the simulation also until the library has looked a few times (a busy
 * machine can keep its threads off the CPU for a while), at most 500 ms. */
static void run_passes(uv_loop_t *uv, int passes, int probes, int probe_us) {
  uint64_t t0 = uv_hrtime(), l0 = sim() ? looks() : 0;
  uint64_t until = t0 + (uint64_t)probes * (uint64_t)probe_us * 1000u;
  for (int i = 0;; i++) {
    uint64_t now = uv_hrtime();
    if (i >= passes && now >= until &&
        (!sim() || looks() - l0 >= 3 || now - t0 >= 500000000u))
      break;
    uv_run(uv, UV_RUN_NOWAIT);
  }
}

typedef struct {
  rec_t *r;
  int n;
  int want; /* callbacks wanted, summed over r[0..n) */
} count_t;

static int called(const rec_t *r, int n) {
  int c = 0;
  for (int i = 0; i < n; i++) c += r[i].calls > 0;
  return c;
}

static int enough_called(void *arg) {
  count_t *c = arg;
  return called(c->r, c->n) >= c->want;
}

static int flag_set(void *arg) { return *(volatile int *)arg != 0; }

static void wait_called(uv_loop_t *uv, rec_t *r, int n, int want, const char *what) {
  count_t c = {r, n, want};
  if (run_until(uv, enough_called, &c) != 0)
    fail_msg("%s: %d of %d callbacks after %d ms (hang)", what, called(r, n), want,
             watchdog_ms);
}

static void assert_status(int got, int want, const char *what, int i) {
  if (got != want)
    fail_msg("%s %d: status %d (%s), expected %d (%s)", what, i, got,
             uvcuda_err_name(got), want, uvcuda_err_name(want));
}

static uint64_t memops(void);

static void on_loop_closed(uvcuda_loop_t *ul) {
  *(int *)ul->data = 1;
}

static int g_futures_closed;
static void on_future_closed(uvcuda_future_t *f) {
  (void)f;
  g_futures_closed++;
}

static int futures_closed(void *arg) { return g_futures_closed >= *(int *)arg; }

/* Closes the futures (whose callbacks have run), then the loop. */
static void close_all(uv_loop_t *uv, uvcuda_loop_t *ul, uvcuda_future_t *f,
                      int n) {
  int closed = 0, want = g_futures_closed + n;
  for (int i = 0; i < n; i++) TU_OK(uvcuda_future_close(&f[i], on_future_closed));
  if (run_until(uv, futures_closed, &want) != 0)
    fail_msg("%d of %d futures' close callbacks ran (hang)",
             n - (want - g_futures_closed), n);
  ul->data = &closed;
  TU_OK(uvcuda_loop_close(ul, on_loop_closed));
  if (run_until(uv, flag_set, &closed) != 0)
    fail_msg("uvcuda_loop_close: close_cb never ran (hang)");
  assert_int_equal(uv_loop_close(uv), 0);
}

/* ==== Bug 1: a fault fails the futures of its context, on any number of
 * contexts per loop and any number of loops. ============================= */

/* One loop (spin budget spin_us) with futures held behind a gate on n
 * contexts, all armed; then a fault in context `victim`. Every future of that context fails while
 * the gate is still closed; the others complete after it opens (or fail
 * too, where a fault reaches the whole device, as on an H200). */
static void fault_one_of_n_contexts(const case_t *k, int n, int victim,
                                    int spin_us) {
  const int per = 2, all = fault_reaches_the_device();
  uv_loop_t uv;
  uvcuda_loop_t ul;
  tctx_t *t = calloc((size_t)n, sizeof(*t));
  CUstream *s = calloc((size_t)n, sizeof(*s)), fs;
  uvcuda_future_t *f = calloc((size_t)n * per, sizeof(*f));
  rec_t *r = calloc((size_t)n * per, sizeof(*r)), *v = r + victim * per;
  tu_gate_t g;
  int i, healthy = 0;

  g_gates_open = 0;
  loop_open(&uv, &ul, k->c, spin_us, -1, 0);
  tu_gate_init(&g);
  /* Contexts, streams and the victim's kernels before any gate is held:
   * on a real GPU a module load waits for the device to go idle, and the
   * gate would never open. */
  for (i = 0; i < n; i++) {
    tctx_create(&t[i]);
    s[i] = stream_in(t[i].ctx);
  }
  tctx_kernels(&t[victim]);
  for (i = 0; i < n; i++) tu_gate_hold(&g, s[i]);
  for (i = 0; i < n * per; i++) {
    TU_OK(uvcuda_future_init(&ul, &f[i]));
    f[i].data = &r[i];
    TU_OK(uvcuda_future_start(&f[i], s[i / per], NULL, on_rec));
  }
  run_passes(&uv, 50, 5, 1000); /* every future armed, probes going */
  fs = stream_in(t[victim].ctx);
  fault_in(&t[victim], fs);

  if (all)
    wait_called(&uv, r, n * per, n * per, "futures, the fault reaching every context");
  else
    wait_called(&uv, v, per, per, "futures of the faulted context, gate closed");
  for (i = 0; i < n * per; i++) {
    if (!all && i / per != victim) {
      healthy += r[i].calls;
      continue;
    }
    assert_int_equal(r[i].gate_open, 0);
    assert_status(r[i].status, ILLEGAL, "future of the faulted context", i);
  }
  if (healthy)
    fail_msg("%d future(s) of healthy contexts called back behind a closed gate",
             healthy);
  g_gates_open = 1;
  tu_gate_open(&g);
  wait_called(&uv, r, n * per, n * per, "every future, gate open");
  for (i = 0; i < n * per; i++)
    if (!all && i / per != victim)
      assert_status(r[i].status, 0, "future of a healthy context", i);
  close_all(&uv, &ul, f, n * per);
  for (i = 0; i < n; i++) tctx_destroy_later(&t[i]);
  tu_gate_free(&g);
  free(t), free(s), free(f), free(r);
}

/* n contexts (variant); the faulted one is each of them in turn (n <= 8),
 * or the first, the last and a middle one, each in a loop of its own, with
 * spin budget 0 (armed at start, in start order) and the default (armed
 * in the order the loop's passes find them); one round where a fault
 * reaches the whole device. Wherever the library keeps that context among
 * its others, the fault is seen. */
static void a_fault_fails_futures_on_every_context(void **state) {
  const case_t *k = param(state);
  const int n = k->variant, all = fault_reaches_the_device();
  const int rounds = all ? 1 : n <= 8 ? n : 3;
  for (int spin = 0; spin < (all ? 1 : 2); spin++)
    for (int i = 0; i < rounds; i++)
      fault_one_of_n_contexts(k, n, n <= 8 ? i : i == 0 ? 0 : i == 1 ? n - 1 : n / 2,
                              spin ? -1 : 0);
  tctx_destroy_the_rest();
}

/* 256 loops on one thread, each with a context of its own and futures held
 * behind a gate; a fault in the first loop's context. */
#define NCTX_GPU 8

static void a_fault_fails_futures_of_its_loop_among_256_loops(void **state) {
  const case_t *k = param(state);
  enum { NL = 256, PER = 2 };
  struct lp {
    uv_loop_t uv;
    uvcuda_loop_t ul;
    tctx_t t;
    CUstream s;
    uvcuda_future_t f[PER];
    rec_t r[PER];
  } *L = calloc(NL, sizeof(*L));
  const int all = fault_reaches_the_device();
  tctx_t src = {0};
  tu_gate_t g;
  CUstream fs;
  uint64_t end;
  int i, j, done;

  tu_gate_init(&g);
  /* Every context, stream and the first one's kernels before any gate is
   * held (a module load waits for an idle device on a real GPU). A GPU
   * runs out of memory long before 256 contexts: there the loops share
   * NCTX_GPU of them. */
  for (i = 0; i < NL; i++) {
    if (sim() || i < NCTX_GPU) tctx_create(&L[i].t);
    L[i].s = stream_in(L[sim() ? i : i % NCTX_GPU].t.ctx);
  }
  /* On a GPU, 32 streams of a context held by the gate fill the context's
   * hardware queues: a faulting kernel on one more stream of it would wait
   * behind them and never run (seen on the H200: no future failed in
   * 20 s). There the fault comes from a context of its own, and reaches
   * every context of the device, as the H200's faults do. */
  if (!sim()) {
    tctx_create(&src);
    tctx_kernels(&src);
  } else {
    tctx_kernels(&L[0].t);
  }
  for (i = 0; i < NL; i++) tu_gate_hold(&g, L[i].s);
  for (i = 0; i < NL; i++) {
    loop_open(&L[i].uv, &L[i].ul, k->c, -1, -1, 0);
    for (j = 0; j < PER; j++) {
      TU_OK(uvcuda_future_init(&L[i].ul, &L[i].f[j]));
      L[i].f[j].data = &L[i].r[j];
      TU_OK(uvcuda_future_start(&L[i].f[j], L[i].s, NULL, on_rec));
    }
  }
  /* Every loop runs until its futures are armed and probes go on; then
   * the first loop's context (the first to attach) faults. */
  for (int pass = 0; pass < 20; pass++)
    for (i = 0; i < NL; i++) uv_run(&L[i].uv, UV_RUN_NOWAIT);
  if (!sim()) {
    fs = stream_in(src.ctx);
    fault_in(&src, fs);
  } else {
    fs = stream_in(L[0].t.ctx);
    fault_in(&L[0].t, fs);
  }

  /* Round-robin until the faulted loop's futures (every future, where the
   * fault reaches the device) have called back; the gate stays closed. */
  end = uv_hrtime() + (uint64_t)watchdog_ms * 1000000u;
  for (;;) {
    done = 0;
    for (i = 0; i < (all ? NL : 1); i++) done += called(L[i].r, PER);
    if (done == (all ? NL : 1) * PER) break;
    if (uv_hrtime() > end)
      fail_msg("%d of %d futures of the faulted context called back in %d ms "
               "(hang), gate closed", done, (all ? NL : 1) * PER, watchdog_ms);
    for (i = 0; i < NL; i++) uv_run(&L[i].uv, UV_RUN_NOWAIT);
  }
  for (i = 0; i < (all ? NL : 1); i++)
    for (j = 0; j < PER; j++)
      assert_status(L[i].r[j].status, ILLEGAL, "future of the faulted loop", j);
  for (i = 1; i < NL && !all; i++) assert_int_equal(called(L[i].r, PER), 0);
  g_gates_open = 1;
  tu_gate_open(&g);
  end = uv_hrtime() + (uint64_t)watchdog_ms * 1000000u;
  for (;;) {
    done = 0;
    for (i = 0; i < NL; i++) done += called(L[i].r, PER);
    if (done == NL * PER) break;
    if (uv_hrtime() > end)
      fail_msg("%d of %d futures called back (hang), gate open", done, NL * PER);
    for (i = 0; i < NL; i++) uv_run(&L[i].uv, UV_RUN_NOWAIT);
  }
  for (i = 1; i < NL && !all; i++)
    for (j = 0; j < PER; j++)
      assert_status(L[i].r[j].status, 0, "future of a healthy loop", i);
  for (i = 0; i < NL; i++) close_all(&L[i].uv, &L[i].ul, L[i].f, PER);
  for (i = 0; i < NL; i++) tctx_destroy(&L[i].t);
  tctx_destroy(&src);
  tu_gate_free(&g);
  free(L);
}

/* ==== Bug 1b: a future that is still spinning fails too. =============== */

static void a_fault_fails_a_future_that_is_still_spinning(void **state) {
  const case_t *k = param(state);
  uv_loop_t uv;
  uvcuda_loop_t ul;
  uvcuda_future_t f;
  rec_t r = {0};
  tctx_t t;
  CUstream s, fs;
  tu_gate_t g;

  loop_open(&uv, &ul, k->c, 1000000, -1, UVCUDA_OPT_TIMING);
  tctx_create(&t);
  tctx_kernels(&t);
  s = stream_in(t.ctx);
  fs = stream_in(t.ctx);
  tu_gate_init(&g);
  tu_gate_hold(&g, s);
  TU_OK(uvcuda_future_init(&ul, &f));
  f.data = &r;
  TU_OK(uvcuda_future_start(&f, s, NULL, on_rec));
  assert_int_equal(uvcuda_future_state(&f), UVCUDA_FUTURE_SPINNING);
  fault_in(&t, fs);
  wait_called(&uv, &r, 1, 1, "the spinning future of the faulted context");
  assert_status(r.status, ILLEGAL, "spinning future", 0);
  TU_OK(r.timing_rc);
  if (r.timing.armed_ns != 0)
    fail_msg("the future failed only after its spin budget ran out (armed_ns "
             "%llu ns after its start): a fault must end the spin",
             (unsigned long long)(r.timing.armed_ns - r.timing.start_ns));
  g_gates_open = 1;
  tu_gate_open(&g);
  close_all(&uv, &ul, &f, 1);
  tctx_destroy(&t);
  tu_gate_free(&g);
}

/* ==== Bug 7: every pending future of a faulted context fails, whatever
 * its stream waits for. ==================================================== */

static const tctx_t *g_short_ctx;
static int op_short_kernel(uvcuda_future_t *f, uvcuda_stream_t s) {
  (void)f;
  return (int)sleep_in(g_short_ctx, (CUstream)s, 20000);
}

/* One context, 8 streams x 12 futures: 4 streams behind gates, 2 behind a
 * kernel longer than the watchdog, 2 with short kernels; a kernel on a 9th
 * stream faults. variant 1: the simulation's busy streams hide the fault
 * from cuStreamQuery (SIMCUDA_BUSY_STREAMS_HIDE_FAULT). */
static void a_fault_fails_every_pending_future_of_its_context(void **state) {
  const case_t *k = param(state);
  enum { NS = 8, PER = 12, N = NS * PER };
  uv_loop_t uv;
  uvcuda_loop_t ul;
  uvcuda_future_t f[N + 1];
  rec_t r[N + 1];
  CUstream s[NS + 1];
  tctx_t t;
  tu_gate_t g;
  int i;

  if (k->variant) simcuda_set_busy_streams_hide_fault(1);
  memset(r, 0, sizeof(r));
  loop_open(&uv, &ul, k->c, -1, -1, 0);
  tctx_create(&t);
  tctx_kernels(&t);
  g_short_ctx = &t;
  tu_gate_init(&g);
  for (i = 0; i <= NS; i++) s[i] = stream_in(t.ctx);
  for (i = 0; i < 4; i++) tu_gate_hold(&g, s[i]);
  for (i = 4; i < 6; i++) TU_CU(sleep_in(&t, s[i], long_kernel_ns()));
  for (i = 0; i < N; i++) {
    TU_OK(uvcuda_future_init(&ul, &f[i]));
    f[i].data = &r[i];
    TU_OK(uvcuda_future_start(&f[i], s[i / PER], i / PER >= 6 ? op_short_kernel : NULL,
                              on_rec));
  }
  fault_in(&t, s[NS]);
  wait_called(&uv, r, N, N, "pending futures of the faulted context, gates closed");
  for (i = 0; i < N; i++) {
    assert_int_equal(r[i].gate_open, 0);
    if (i / PER < 6)
      assert_status(r[i].status, ILLEGAL, "future behind a gate or long kernel", i);
    else if (r[i].status != 0)
      assert_status(r[i].status, ILLEGAL, "future with a short kernel", i);
  }
  /* A new start on the dead context calls back with the error. */
  TU_OK(uvcuda_future_init(&ul, &f[N]));
  f[N].data = &r[N];
  TU_OK(uvcuda_future_start(&f[N], s[6], NULL, on_rec));
  wait_called(&uv, &r[N], 1, 1, "a future started after the fault");
  assert_status(r[N].status, ILLEGAL, "future started after the fault", N);
  g_gates_open = 1;
  tu_gate_open(&g);
  close_all(&uv, &ul, f, N + 1);
  tctx_destroy(&t);
  tu_gate_free(&g);
}

/* ==== Bug 2: stream capture while futures are pending. ================== */

static const CUstreamCaptureMode capture_modes[] = {
    CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
    CU_STREAM_CAPTURE_MODE_RELAXED};
static const char *const capture_mode_names[] = {"global", "thread-local",
                                                 "relaxed"};

enum { PROBE_US = 50, PASSES = 300, PROBES = 400 };

/* A future is pending on S (held by a gate) and, with `others`, another on
 * S2 of the same context; the loop thread begins capturing S and keeps the
 * capture open over several hundred loop passes and many probe intervals.
 * The capture ends with a graph that instantiates and launches; the
 * futures complete with 0 once their gates open. */
static void capture_round(const case_t *k, CUstreamCaptureMode mode, int spin_us,
                          int others) {
  uv_loop_t uv;
  uvcuda_loop_t ul;
  uvcuda_future_t f[2];
  rec_t r[2];
  CUstream s, s2;
  tu_gate_t g;
  CUgraph graph = NULL;
  CUgraphExec exec = NULL;
  CUresult first, again, end, inst = CUDA_ERROR_UNKNOWN, launch = CUDA_ERROR_UNKNOWN;
  int during, n = others ? 2 : 1;

  tu_backtrace_on_crash();
  memset(r, 0, sizeof(r));
  g_gates_open = 0;
  loop_open(&uv, &ul, k->c, spin_us, PROBE_US, 0);
  s = tu_stream();
  s2 = tu_stream();
  tu_gate_init(&g);
  tu_gate_hold(&g, s);
  tu_gate_hold(&g, s2);
  for (int i = 0; i < n; i++) {
    TU_OK(uvcuda_future_init(&ul, &f[i]));
    f[i].data = &r[i];
    TU_OK(uvcuda_future_start(&f[i], i ? s2 : s, NULL, on_rec));
  }
  run_passes(&uv, 10, 2, PROBE_US);
  TU_CU(tu.cuStreamBeginCapture(s, mode));
  first = launch_sleep(tu_fn_sleep, s, 1000);
  run_passes(&uv, PASSES, PROBES, PROBE_US);
  again = launch_sleep(tu_fn_sleep, s, 1000);
  during = called(r, n);
  end = tu.cuStreamEndCapture(s, &graph);
  if (end == CUDA_SUCCESS && graph) {
    inst = tu.cuGraphInstantiateWithFlags(&exec, graph, 0);
    if (inst == CUDA_SUCCESS) launch = tu.cuGraphLaunch(exec, s);
  }
  if (during)
    fail_msg("%s: %d future(s) called back while the capture was open (first "
             "status %s)", others ? "with a future on another stream" : "alone",
             during, uvcuda_err_name(r[0].calls ? r[0].status : r[1].status));
  if (first != CUDA_SUCCESS || again != CUDA_SUCCESS)
    fail_msg("%s: enqueue into the capture: %d before the loop passes, %d after",
             others ? "with a future on another stream" : "alone", first, again);
  if (end != CUDA_SUCCESS) fail_msg("cuStreamEndCapture returned %d", end);
  assert_non_null(graph);
  if (inst != CUDA_SUCCESS || launch != CUDA_SUCCESS)
    fail_msg("graph instantiate %d, launch %d", inst, launch);
  g_gates_open = 1;
  tu_gate_open(&g);
  wait_called(&uv, r, n, n, "futures after the capture");
  assert_status(r[0].status, 0, "future on the captured stream", 0);
  if (others) assert_status(r[1].status, 0, "future on another stream", 1);
  TU_CU(tu.cuStreamSynchronize(s));
  tu.cuGraphExecDestroy(exec);
  tu.cuGraphDestroy(graph);
  close_all(&uv, &ul, f, n);
  tu_stream_destroy(s);
  tu_stream_destroy(s2);
  tu_gate_free(&g);
}

/* variant: capture mode * 2 + (spin budget 0 ? 0 : 1). Two rounds: the
 * future on S alone, then with another future pending on S2. */
static void a_capture_leaves_pending_futures_alone(void **state) {
  const case_t *k = param(state);
  const CUstreamCaptureMode mode = capture_modes[k->variant / 2];
  const int spin_us = k->variant % 2 ? -1 : 0;
  capture_round(k, mode, spin_us, 0);
  capture_round(k, mode, spin_us, 1);
}

typedef struct {
  CUstream c;
  volatile int started, may_end;
  CUresult begin, first, again, end, inst, launch;
} capthr_t;

static void *capture_thread(void *arg) {
  capthr_t *x = arg;
  CUgraph graph = NULL;
  CUgraphExec exec = NULL;
  tu.cuCtxSetCurrent(tu_ctx);
  x->begin = tu.cuStreamBeginCapture(x->c, CU_STREAM_CAPTURE_MODE_GLOBAL);
  x->first = launch_sleep(tu_fn_sleep, x->c, 1000);
  __atomic_store_n(&x->started, 1, __ATOMIC_RELEASE);
  while (!__atomic_load_n(&x->may_end, __ATOMIC_ACQUIRE)) usleep(100);
  x->again = launch_sleep(tu_fn_sleep, x->c, 1000);
  x->end = tu.cuStreamEndCapture(x->c, &graph);
  x->inst = x->launch = CUDA_ERROR_UNKNOWN;
  if (x->end == CUDA_SUCCESS && graph) {
    x->inst = tu.cuGraphInstantiateWithFlags(&exec, graph, 0);
    if (x->inst == CUDA_SUCCESS) x->launch = tu.cuGraphLaunch(exec, x->c);
    tu.cuStreamSynchronize(x->c);
    if (exec) tu.cuGraphExecDestroy(exec);
    tu.cuGraphDestroy(graph);
  }
  return NULL;
}

/* Another thread captures a stream of the same context in GLOBAL mode
 * while the loop has futures pending on two other streams. */
static void a_capture_on_another_thread_leaves_the_loop_alone(void **state) {
  const case_t *k = param(state);
  uv_loop_t uv;
  uvcuda_loop_t ul;
  uvcuda_future_t f[2];
  rec_t r[2];
  CUstream s[2];
  tu_gate_t g;
  capthr_t x;
  pthread_t th;
  int during;

  tu_backtrace_on_crash();
  memset(r, 0, sizeof(r));
  memset(&x, 0, sizeof(x));
  loop_open(&uv, &ul, k->c, -1, PROBE_US, 0);
  tu_gate_init(&g);
  x.c = tu_stream();
  for (int i = 0; i < 2; i++) {
    s[i] = tu_stream();
    tu_gate_hold(&g, s[i]);
    TU_OK(uvcuda_future_init(&ul, &f[i]));
    f[i].data = &r[i];
    TU_OK(uvcuda_future_start(&f[i], s[i], NULL, on_rec));
  }
  assert_int_equal(pthread_create(&th, NULL, capture_thread, &x), 0);
  while (!__atomic_load_n(&x.started, __ATOMIC_ACQUIRE)) uv_run(&uv, UV_RUN_NOWAIT);
  run_passes(&uv, PASSES, PROBES, PROBE_US);
  during = called(r, 2);
  __atomic_store_n(&x.may_end, 1, __ATOMIC_RELEASE);
  pthread_join(th, NULL);
  if (during)
    fail_msg("%d future(s) called back during the other thread's capture (first "
             "status %s)", during, uvcuda_err_name(r[0].calls ? r[0].status : r[1].status));
  if (x.begin || x.first || x.again || x.end || x.inst || x.launch)
    fail_msg("the other thread's capture: begin %d, enqueue %d, enqueue after the "
             "loop passes %d, end %d, instantiate %d, launch %d",
             x.begin, x.first, x.again, x.end, x.inst, x.launch);
  g_gates_open = 1;
  tu_gate_open(&g);
  wait_called(&uv, r, 2, 2, "futures after the other thread's capture");
  assert_status(r[0].status, 0, "future", 0);
  assert_status(r[1].status, 0, "future", 1);
  close_all(&uv, &ul, f, 2);
  tu_stream_destroy(s[0]);
  tu_stream_destroy(s[1]);
  tu_stream_destroy(x.c);
  tu_gate_free(&g);
}

/* ==== Bug 3: a stream destroyed once its future has called back. ======= */

typedef struct {
  rec_t r;
  int destroyed;
} destroy_rec_t;

/* The API allows it: the stream must stay valid until the callback runs. */
static void on_destroy_stream(uvcuda_future_t *f, int status) {
  destroy_rec_t *d = f->data;
  d->r.calls++;
  d->r.status = status;
  if (tu.cuStreamDestroy((CUstream)f->stream) == CUDA_SUCCESS) d->destroyed = 1;
}

static void on_destroy_closed(uvcuda_future_t *f) {
  destroy_rec_t *d = f->data;
  d->r.closed++;
}

static int destroy_done(void *arg) {
  destroy_rec_t *d = arg;
  return d->r.calls > 0 && d->r.closed > 0;
}

static int destroy_called(void *arg) { return ((destroy_rec_t *)arg)->r.calls > 0; }

static int uses_memops(uvcuda_completion_t c) { return c != UVCUDA_COMPLETION_HOSTFN; }

static uint64_t memops(void) { return sim() ? simcuda_memop_count() : 0; }


/* A new loop's future on a new stream completes with 0: the context is
 * healthy and the counter pool unharmed. */
static void after_marker_a_new_loop_completes(uvcuda_completion_t c) {
  uv_loop_t uv;
  uvcuda_loop_t ul;
  uvcuda_future_t f;
  rec_t r = {0};
  CUstream s = tu_stream();
  loop_open(&uv, &ul, c, -1, PROBE_US, 0);
  TU_OK(uvcuda_future_init(&ul, &f));
  f.data = &r;
  TU_OK(uvcuda_future_start(&f, s, NULL, on_rec));
  wait_called(&uv, &r, 1, 1, "a new loop's future after the marker landed");
  assert_status(r.status, 0, "a new loop's future after the marker landed", 0);
  close_all(&uv, &ul, &f, 1);
  tu_stream_destroy(s);
}

/* Futures on S1 (held by a gate) and S2; the one on S1 is closed in
 * flight and its cancellation callback destroys S1 (the API allows it).
 * The loop runs on for many probe intervals. variant 0: then a future on
 * S2 and one on a new stream (on the simulation: S1's handle, handed back)
 * complete with 0. Then the loop closes while the gate still holds the
 * cancelled future's marker: the close does not wait for the GPU, and the
 * marker, landing later, must land in memory the library still owns (the
 * simulation faults the context on a write into freed memory): a new
 * loop's future then completes. */
static void a_stream_destroyed_in_a_cancellation_callback_is_never_used_again(
    void **state) {
  const case_t *k = param(state);
  uv_loop_t uv;
  uvcuda_loop_t ul;
  uvcuda_future_t f, f2[2];
  destroy_rec_t d = {{0}, 0};
  rec_t r2[2];
  CUstream s1, s2, s3 = NULL;
  tu_gate_t g;
  uint64_t m0;
  int closed = 0, want;

  memset(r2, 0, sizeof(r2));
  loop_open(&uv, &ul, k->c, -1, PROBE_US, 0);
  tu_gate_init(&g);
  s1 = tu_stream();
  s2 = tu_stream();
  tu_gate_hold(&g, s1);
  TU_OK(uvcuda_future_init(&ul, &f));
  f.data = &d;
  TU_OK(uvcuda_future_start(&f, s1, NULL, on_destroy_stream));
  TU_OK(uvcuda_future_init(&ul, &f2[0]));
  f2[0].data = &r2[0];
  TU_OK(uvcuda_future_start(&f2[0], s2, NULL, on_rec));
  run_passes(&uv, 10, 2, PROBE_US);
  TU_OK(uvcuda_future_close(&f, on_destroy_closed));
  if (run_until(&uv, destroy_done, &d) != 0) fail_msg("no cancellation callback");
  assert_status(d.r.status, UVCUDA_ECANCELED, "closed future", 0);
  assert_true(d.destroyed);
  /* A library that still queries the destroyed stream crashes the real
   * driver here; the simulation aborts the process instead. */
  run_passes(&uv, PASSES, PROBES, PROBE_US);

  wait_called(&uv, r2, 1, 1, "the future on S2");
  assert_status(r2[0].status, 0, "future on S2", 0);
  if (k->variant == 0) {
    memset(r2, 0, sizeof(r2));
    TU_OK(uvcuda_future_start(&f2[0], s2, NULL, on_rec));
    s3 = tu_stream();
    if (sim()) assert_ptr_equal(s3, s1); /* the simulation reuses handles */
    TU_OK(uvcuda_future_init(&ul, &f2[1]));
    f2[1].data = &r2[1];
    TU_OK(uvcuda_future_start(&f2[1], s3, NULL, on_rec));
    wait_called(&uv, r2, 2, 2, "futures on S2 and on a new stream");
    assert_status(r2[0].status, 0, "future on S2", 0);
    assert_status(r2[1].status, 0, "future on a new stream", 1);
  }
  want = g_futures_closed + (k->variant == 0 ? 2 : 1);
  for (int i = 0; i < (k->variant == 0 ? 2 : 1); i++)
    TU_OK(uvcuda_future_close(&f2[i], on_future_closed));
  if (run_until(&uv, futures_closed, &want) != 0)
    fail_msg("the futures' close callbacks never ran (hang)");
  m0 = memops();
  ul.data = &closed;
  TU_OK(uvcuda_loop_close(&ul, on_loop_closed));
  if (run_until(&uv, flag_set, &closed) != 0)
    fail_msg("uvcuda_loop_close: close_cb never ran while the gate held a "
             "marker (the close waits for the GPU)");
  assert_int_equal(uv_loop_close(&uv), 0);
  g_gates_open = 1;
  tu_gate_open(&g);
  if (sim() && uses_memops(k->c)) {
    uint64_t end = tu_now_ns() + 30ull * 1000000000ull;
    while (memops() <= m0 && tu_now_ns() < end) usleep(100);
    if (memops() <= m0) fail_msg("the cancelled future's marker never landed");
  }
  after_marker_a_new_loop_completes(k->c);
  if (s3) tu_stream_destroy(s3);
  tu_stream_destroy(s2);
  tu_gate_free(&g);
}

/* A future completes; its callback destroys the stream; the loop runs on,
 * a future on a new stream completes with 0, the loop closes. */
static void a_stream_destroyed_in_a_completion_callback_is_never_used_again(
    void **state) {
  const case_t *k = param(state);
  uv_loop_t uv;
  uvcuda_loop_t ul;
  uvcuda_future_t f[2];
  destroy_rec_t d = {{0}, 0};
  rec_t r2 = {0};
  CUstream s1, s3;

  loop_open(&uv, &ul, k->c, -1, PROBE_US, 0);
  s1 = tu_stream();
  TU_OK(uvcuda_future_init(&ul, &f[0]));
  f[0].data = &d;
  TU_OK(uvcuda_future_start(&f[0], s1, NULL, on_destroy_stream));
  if (run_until(&uv, destroy_called, &d) != 0) fail_msg("no callback");
  assert_status(d.r.status, 0, "future", 0);
  assert_true(d.destroyed);
  run_passes(&uv, PASSES, PROBES, PROBE_US);
  s3 = tu_stream();
  if (sim()) assert_ptr_equal(s3, s1);
  TU_OK(uvcuda_future_init(&ul, &f[1]));
  f[1].data = &r2;
  TU_OK(uvcuda_future_start(&f[1], s3, NULL, on_rec));
  wait_called(&uv, &r2, 1, 1, "a future on a new stream");
  assert_status(r2.status, 0, "future on a new stream", 0);
  close_all(&uv, &ul, f, 2);
  tu_stream_destroy(s3);
}

/* ==== Bug 4: one loop's close never stalls another loop. =============== */

typedef struct {
  uvcuda_completion_t c;
  int n;
  volatile int a_closing, a_closed, b_done, released, b_closed;
  int b_bad, errors;
} stall_t;

static void on_b(uvcuda_future_t *f, int status) {
  stall_t *x = f->data;
  if (status != 0) x->b_bad++;
  __atomic_add_fetch(&x->b_done, 1, __ATOMIC_RELEASE);
}

static void on_a(uvcuda_future_t *f, int status) {
  stall_t *x = f->data;
  if (status != 0) x->errors++;
}

static void on_a_closed(uvcuda_loop_t *ul) {
  stall_t *x = ul->data;
  __atomic_store_n(&x->a_closed, 1, __ATOMIC_RELEASE);
}

/* Loop A: a few futures (its counters live in pinned memory), then closes
 * while freeing pinned memory is held (a device busy with a long kernel). */
static void *loop_a(void *arg) {
  stall_t *x = arg;
  uv_loop_t uv;
  uvcuda_loop_t ul;
  uvcuda_future_t f[8];
  uvcuda_options_t o;
  CUstream s[4];
  int i;
  tu.cuCtxSetCurrent(tu_ctx);
  uvcuda_options_init(&o);
  o.completion = x->c;
  uv_loop_init(&uv);
  if (uvcuda_loop_init(&uv, &ul, &o) != 0) {
    x->errors++;
    return NULL;
  }
  for (i = 0; i < 4; i++) tu.cuStreamCreate(&s[i], CU_STREAM_NON_BLOCKING);
  for (i = 0; i < 8; i++) {
    uvcuda_future_init(&ul, &f[i]);
    f[i].data = x;
    if (uvcuda_future_start(&f[i], s[i % 4], NULL, on_a) != 0) x->errors++;
  }
  uv_run(&uv, UV_RUN_DEFAULT);
  for (i = 0; i < 8; i++) uvcuda_future_close(&f[i], NULL);
  uv_run(&uv, UV_RUN_DEFAULT);
  ul.data = x;
  __atomic_store_n(&x->a_closing, 1, __ATOMIC_RELEASE);
  if (uvcuda_loop_close(&ul, on_a_closed) != 0) x->errors++;
  uv_run(&uv, UV_RUN_DEFAULT);
  if (uv_loop_close(&uv) != 0) x->errors++;
  for (i = 0; i < 4; i++) tu.cuStreamDestroy(s[i]);
  return NULL;
}

static void on_b_closed(uvcuda_loop_t *ul) {
  stall_t *x = ul->data;
  __atomic_store_n(&x->b_closed, 1, __ATOMIC_RELEASE);
}

/* Loop B: once A is closing, N futures, each armed at once (spin budget
 * 0) behind a short kernel; closes only after the test released the hold. */
static void *loop_b(void *arg) {
  stall_t *x = arg;
  uv_loop_t uv;
  uvcuda_loop_t ul;
  uvcuda_options_t o;
  uvcuda_future_t *f = calloc((size_t)x->n, sizeof(*f));
  CUstream s;
  uint64_t end = uv_hrtime() + (uint64_t)watchdog_ms * 1000000u;
  int i;
  tu.cuCtxSetCurrent(tu_ctx);
  uvcuda_options_init(&o);
  o.completion = x->c;
  o.spin_budget_us = 0;
  uv_loop_init(&uv);
  if (uvcuda_loop_init(&uv, &ul, &o) != 0) {
    x->errors++;
    free(f);
    return NULL;
  }
  tu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
  while (!__atomic_load_n(&x->a_closing, __ATOMIC_ACQUIRE) && uv_hrtime() < end)
    usleep(100);
  for (i = 0; i < x->n; i++) {
    uvcuda_future_init(&ul, &f[i]);
    f[i].data = x;
    if (launch_sleep(tu_fn_sleep, s, 10000) != CUDA_SUCCESS) x->errors++;
    if (uvcuda_future_start(&f[i], s, NULL, on_b) != 0) x->errors++;
  }
  /* The watchdog is the test's: it releases the hold, then this ends. */
  while (__atomic_load_n(&x->b_done, __ATOMIC_ACQUIRE) < x->n &&
         !__atomic_load_n(&x->released, __ATOMIC_ACQUIRE))
    uv_run(&uv, UV_RUN_NOWAIT);
  while (!__atomic_load_n(&x->released, __ATOMIC_ACQUIRE)) usleep(100);
  uv_run(&uv, UV_RUN_DEFAULT); /* what is left after a failure */
  for (i = 0; i < x->n; i++) uvcuda_future_close(&f[i], NULL);
  uv_run(&uv, UV_RUN_DEFAULT);
  ul.data = x;
  if (uvcuda_loop_close(&ul, on_b_closed) != 0) x->errors++;
  uv_run(&uv, UV_RUN_DEFAULT);
  if (uv_loop_close(&uv) != 0) x->errors++;
  tu.cuStreamSynchronize(s);
  tu.cuStreamDestroy(s);
  free(f);
  return NULL;
}

/* Loop A (thread 1) closes while the device is busy; loop B (thread 2)
 * completes N futures meanwhile. Both must finish before the device is
 * idle again: no loop thread may block in a call that waits for the device
 * (cuMemFreeHost, cuMemHostUnregister), and no loop may wait for another's.
 * On the simulation the test thread holds those two calls (every other
 * thread's call blocks in the driver, as behind a busy device) until both
 * loops are done; on a GPU a 3 s kernel on a stream of its own keeps the
 * device busy, and must still run when both are done. */
static void one_loops_close_never_stalls_another_loop(void **state) {
  const case_t *k = param(state);
  stall_t x;
  pthread_t ta, tb;
  uint64_t end;
  int a_closed, b_done, held_free = 0, held_unreg = 0;
  CUstream busy = NULL;
  CUresult busy_after = CUDA_SUCCESS;

  memset(&x, 0, sizeof(x));
  x.c = k->c;
  x.n = 200;
  if (sim()) {
    simcuda_hold_calls("cuMemFreeHost", 1);
    simcuda_hold_calls("cuMemHostUnregister", 1);
  } else {
    busy = tu_stream();
    TU_CU(launch_sleep(tu_fn_sleep, busy, 3000000000ull));
  }
  assert_int_equal(pthread_create(&ta, NULL, loop_a, &x), 0);
  assert_int_equal(pthread_create(&tb, NULL, loop_b, &x), 0);
  end = uv_hrtime() + (uint64_t)watchdog_ms * 1000000u;
  while (uv_hrtime() < end && !(__atomic_load_n(&x.a_closed, __ATOMIC_ACQUIRE) &&
                                __atomic_load_n(&x.b_done, __ATOMIC_ACQUIRE) >= x.n))
    usleep(1000);
  a_closed = __atomic_load_n(&x.a_closed, __ATOMIC_ACQUIRE);
  b_done = __atomic_load_n(&x.b_done, __ATOMIC_ACQUIRE);
  if (sim()) {
    held_free = (int)simcuda_held_calls("cuMemFreeHost");
    held_unreg = (int)simcuda_held_calls("cuMemHostUnregister");
    simcuda_hold_calls("cuMemFreeHost", 0);
    simcuda_hold_calls("cuMemHostUnregister", 0);
  } else {
    busy_after = tu.cuStreamQuery(busy); /* NOT_READY: still running */
  }
  __atomic_store_n(&x.released, 1, __ATOMIC_RELEASE);
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  if (busy != NULL) {
    TU_CU(tu.cuStreamSynchronize(busy));
    tu_stream_destroy(busy);
    if (a_closed && b_done >= x.n && busy_after != CUDA_ERROR_NOT_READY)
      fail_msg("both loops were done only after the 3 s kernel (cuStreamQuery %d)",
               (int)busy_after);
  }
  if (!a_closed || b_done < x.n)
    fail_msg("with freeing pinned memory held for %d ms: loop A %s, loop B had %d of "
             "%d callbacks (calls waiting in the hold: cuMemFreeHost %d, "
             "cuMemHostUnregister %d)",
             watchdog_ms, a_closed ? "closed" : "never finished closing", b_done, x.n,
             held_free, held_unreg);
  assert_int_equal(x.errors, 0);
  assert_int_equal(x.b_bad, 0);
  assert_true(__atomic_load_n(&x.b_closed, __ATOMIC_ACQUIRE));
}

/* ==== Bug 5: a stream handle reused on another device. ================== */

static CUcontext g_op_current, g_op_stream_ctx;
static CUresult g_op_rc;
static int op_note_context(uvcuda_future_t *f, uvcuda_stream_t s) {
  (void)f;
  g_op_rc = tu.cuCtxGetCurrent(&g_op_current);
  if (g_op_rc == CUDA_SUCCESS) g_op_rc = tu.cuStreamGetCtx((CUstream)s, &g_op_stream_ctx);
  return 0;
}

/* A future on a device-0 stream is cancelled while its marker is still
 * due (gate held) and the stream destroyed; a stream made on device 1 gets
 * the same handle; a future on it runs its op with device 1's context
 * current and completes with 0; then device 0's gate opens. */
static void a_reused_stream_handle_runs_in_its_new_context(void **state) {
  const case_t *k = param(state);
  uv_loop_t uv;
  uvcuda_loop_t ul;
  uvcuda_future_t f[2];
  destroy_rec_t d = {{0}, 0};
  rec_t r = {0};
  CUdevice d1;
  CUcontext c1;
  CUstream s0, s1;
  tu_gate_t g;
  int n = 0;

  TU_CU(tu.cuDeviceGetCount(&n));
  if (n < 2) SKIP();
  TU_CU(tu.cuDeviceGet(&d1, 1));
  TU_CU(tu.cuDevicePrimaryCtxRetain(&c1, d1));
  loop_open(&uv, &ul, k->c, -1, PROBE_US, 0);
  tu_gate_init(&g);
  s0 = tu_stream();
  tu_gate_hold(&g, s0);
  TU_OK(uvcuda_future_init(&ul, &f[0]));
  f[0].data = &d;
  TU_OK(uvcuda_future_start(&f[0], s0, NULL, on_destroy_stream));
  run_passes(&uv, 10, 2, PROBE_US);
  TU_OK(uvcuda_future_close(&f[0], on_destroy_closed));
  if (run_until(&uv, destroy_done, &d) != 0) fail_msg("no cancellation callback");
  assert_status(d.r.status, UVCUDA_ECANCELED, "closed future", 0);
  assert_true(d.destroyed);

  TU_CU(tu.cuCtxSetCurrent(c1));
  s1 = tu_stream();
  TU_CU(tu.cuCtxSetCurrent(tu_ctx));
  if (s1 != s0) {
    if (sim()) fail_msg("the simulation did not hand the handle back");
    SKIP(); /* this driver did not reuse it: nothing to test */
  }
  TU_OK(uvcuda_future_init(&ul, &f[1]));
  f[1].data = &r;
  TU_OK(uvcuda_future_start(&f[1], s1, op_note_context, on_rec));
  wait_called(&uv, &r, 1, 1, "a future on the reused handle");
  TU_CU(g_op_rc);
  if (g_op_current != c1 || g_op_stream_ctx != c1)
    fail_msg("the op ran with context %p current; its stream belongs to %p "
             "(device 1's primary context is %p, device 0's %p)",
             (void *)g_op_current, (void *)g_op_stream_ctx, (void *)c1,
             (void *)tu_ctx);
  assert_status(r.status, 0, "future on the reused handle", 0);
  g_gates_open = 1;
  tu_gate_open(&g);
  close_all(&uv, &ul, &f[1], 1); /* f[0] is closed already */
  TU_CU(tu.cuCtxSetCurrent(c1));
  tu_stream_destroy(s1);
  TU_CU(tu.cuCtxSetCurrent(tu_ctx));
  tu.cuDevicePrimaryCtxRelease(d1);
  tu_gate_free(&g);
}

/* ==== Found while checking the cases above: a context destroyed after its
 * loop closed. ============================================================= */

/* Loop A (strategy) runs futures on a stream of a context made with
 * cuCtxCreate, then closes; from its close callback on, the library may
 * not touch anything of A's any more. The context is destroyed (the driver
 * frees the pinned memory made in it) and new pinned memory is made, which
 * may get the same addresses. A second loop keeps the library's background
 * threads running, and cuMemFreeHost is held (a busy device) from before
 * A's close until the new memory exists. The new memory must stay
 * registered: the library must not free memory it no longer owns. */
static void a_context_destroyed_after_its_loop_closed_is_left_alone(void **state) {
  const case_t *k = param(state);
  enum { NB = 8 };
  uv_loop_t uv, uvk;
  uvcuda_loop_t ul, ulk;
  uvcuda_future_t f[4];
  rec_t r[4];
  tctx_t t;
  CUstream s;
  void *blk[NB];
  CUdeviceptr d;
  int i, lost = 0;

  memset(r, 0, sizeof(r));
  loop_open(&uvk, &ulk, UVCUDA_COMPLETION_AUTO, -1, -1, 0);
  loop_open(&uv, &ul, k->c, -1, -1, 0);
  tctx_create(&t);
  s = stream_in(t.ctx);
  for (i = 0; i < 4; i++) {
    TU_OK(uvcuda_future_init(&ul, &f[i]));
    f[i].data = &r[i];
    TU_OK(uvcuda_future_start(&f[i], s, NULL, on_rec));
  }
  wait_called(&uv, r, 4, 4, "futures on the made context");
  for (i = 0; i < 4; i++) assert_status(r[i].status, 0, "future", i);
  simcuda_hold_calls("cuMemFreeHost", 1);
  close_all(&uv, &ul, f, 4);
  tctx_destroy(&t);
  for (i = 0; i < NB; i++)
    TU_CU(tu.cuMemHostAlloc(&blk[i], 4096,
                            CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
  simcuda_hold_calls("cuMemFreeHost", 0);
  /* Whatever was held goes on now; give the library's threads time. */
  run_passes(&uvk, PASSES, PROBES, PROBE_US);
  for (i = 0; i < NB; i++)
    if (tu.cuMemHostGetDevicePointer(&d, blk[i], 0) != CUDA_SUCCESS) lost++;
  if (lost)
    fail_msg("%d of %d new pinned blocks were freed under their owner: the library "
             "freed memory of a destroyed context after its loop's close callback",
             lost, NB);
  for (i = 0; i < NB; i++) tu.cuMemFreeHost(blk[i]);
  close_all(&uvk, &ulk, NULL, 0);
}

/* ==== the case list and the runner ======================================= */

#define A UVCUDA_COMPLETION_AUTO
#define R UVCUDA_COMPLETION_REACTOR
#define H UVCUDA_COMPLETION_HOSTFN
#define P UVCUDA_COMPLETION_POLL
#define CASE(fn, c, v, sim_only) {#fn, fn, c, v, sim_only, ""}
#define EACH(fn, v, sim_only) \
  CASE(fn, A, v, sim_only), CASE(fn, H, v, sim_only), CASE(fn, P, v, sim_only)

static case_t cases[] = {
    EACH(a_fault_fails_futures_on_every_context, 1, 0),
    EACH(a_fault_fails_futures_on_every_context, 5, 0),
    CASE(a_fault_fails_futures_on_every_context, R, 5, 0),
    EACH(a_fault_fails_futures_on_every_context, 64, 0),
    EACH(a_fault_fails_futures_of_its_loop_among_256_loops, 0, 0),
    EACH(a_fault_fails_a_future_that_is_still_spinning, 0, 0),
    EACH(a_fault_fails_every_pending_future_of_its_context, 0, 0),
    EACH(a_fault_fails_every_pending_future_of_its_context, 1, 1),
    EACH(a_capture_leaves_pending_futures_alone, 0, 0),
    EACH(a_capture_leaves_pending_futures_alone, 1, 0),
    EACH(a_capture_leaves_pending_futures_alone, 2, 0),
    EACH(a_capture_leaves_pending_futures_alone, 3, 0),
    EACH(a_capture_leaves_pending_futures_alone, 4, 0),
    EACH(a_capture_leaves_pending_futures_alone, 5, 0),
    EACH(a_capture_on_another_thread_leaves_the_loop_alone, 0, 0),
    EACH(a_stream_destroyed_in_a_cancellation_callback_is_never_used_again, 0, 0),
    EACH(a_stream_destroyed_in_a_cancellation_callback_is_never_used_again, 1, 0),
    EACH(a_stream_destroyed_in_a_completion_callback_is_never_used_again, 0, 0),
    EACH(one_loops_close_never_stalls_another_loop, 0, 0),
    CASE(one_loops_close_never_stalls_another_loop, R, 0, 0),
    EACH(a_reused_stream_handle_runs_in_its_new_context, 0, 0),
    EACH(a_context_destroyed_after_its_loop_closed_is_left_alone, 0, 1),
};

static void label(case_t *k) {
  char v[64] = "";
  CMUnitTestFunction fn = k->fn;
  if (fn == a_fault_fails_futures_on_every_context)
    snprintf(v, sizeof(v), ", %d context%s", k->variant, k->variant > 1 ? "s" : "");
  else if (fn == a_fault_fails_every_pending_future_of_its_context && k->variant)
    snprintf(v, sizeof(v), ", busy streams hide the fault");
  else if (fn == a_capture_leaves_pending_futures_alone)
    snprintf(v, sizeof(v), ", %s capture, spin budget %s",
             capture_mode_names[k->variant / 2], k->variant % 2 ? "default" : "0");
  else if (fn == a_stream_destroyed_in_a_cancellation_callback_is_never_used_again)
    snprintf(v, sizeof(v), k->variant ? ", then the loop closes"
                                      : ", new futures, then the loop closes");
  snprintf(k->label, sizeof(k->label), "%s (%s%s)", k->name, strategy_name(k->c), v);
}

static int case_setup(void **state) {
  (void)state;
  g_order = 0;
  g_gates_open = 0;
  return 0;
}

/* Leaves the simulation's switches as the case found them. */
static int case_teardown(void **state) {
  (void)state;
  if (sim()) {
    simcuda_set_busy_streams_hide_fault(0);
    simcuda_hold_calls("cuMemFreeHost", 0);
    simcuda_hold_calls("cuMemHostUnregister", 0);
  }
  return 0;
}

/* In the child: the driver, then the case as a cmocka group of one. */
static int connections_set_by_user;

/* The driver gives each context CUDA_DEVICE_MAX_CONNECTIONS channels out of
 * a fixed budget per device, and says CUDA_ERROR_OUT_OF_MEMORY from
 * cuCtxCreate once it is spent: on the H200 in run 11, 15 contexts with 32
 * each, 63 with 8, 127 with 4 (test/gpu-probe/ctxcount.py). Cases with more
 * than 8 contexts take 4: enough for a gated stream, the library's own and
 * a faulting one per context. */
static void choose_connections(const case_t *k) {
  if (connections_set_by_user) return;
  if (k->fn == a_fault_fails_futures_on_every_context && k->variant > 8)
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "4", 1);
}

static int run_child(const case_t *k) {
  struct CMUnitTest t[1] = {{k->label, k->fn, case_setup, case_teardown, (void *)k}};
  int rc;
  choose_connections(k); /* before cuInit, which reads it */
  rc = tu_setup(want_real);
  if (rc != 0) return rc;
  if (k->sim_only && !sim()) return 77;
  rc = cmocka_run_group_tests_name(k->label, t, NULL, NULL);
  tu_teardown();
  return rc != 0 ? 1 : g_skipped ? 77 : 0;
}

int main(int argc, char **argv) {
  const char *filter = NULL;
  int i, ran = 0, failed = 0, skipped = 0, st;
  unsigned limit;

  for (i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--gpu") == 0)
      want_real = 1;
    else
      filter = argv[i];
  }
  /* A hardware queue per stream (up to 32): streams held by a gate must not
   * share one with the stream a fault is launched on, or the faulting
   * kernel waits behind the gate. Read by the driver at cuInit, in each
   * child. */
  connections_set_by_user = getenv("CUDA_DEVICE_MAX_CONNECTIONS") != NULL;
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  if (getenv("UVCUDA_TEST_SLOW")) watchdog_ms *= 10;
  if (getenv("UVCUDA_TEST_WATCHDOG_MS")) watchdog_ms = atoi(getenv("UVCUDA_TEST_WATCHDOG_MS"));
  limit = (unsigned)(watchdog_ms / 1000) * 6 + 60; /* seconds per case */
  setenv("SIMCUDA_DEVICES", "2", 0); /* the simulation: a second device */
  for (i = 0; i < (int)(sizeof(cases) / sizeof(cases[0])); i++) {
    case_t *k = &cases[i];
    pid_t pid;
    label(k);
    if (filter && !strstr(k->label, filter)) continue;
    fflush(NULL);
    pid = fork();
    if (pid == 0) {
      int rc;
      alarm(limit); /* a hang outside the watchdog's reach */
      rc = run_child(k);
      if (rc != 0) _exit(rc); /* a failed case leaves things open: no leak check */
      exit(0);
    }
    if (pid < 0 || waitpid(pid, &st, 0) != pid) {
      fprintf(stderr, "contract: cannot run %s\n", k->label);
      return 1;
    }
    ran++;
    if (WIFEXITED(st) && WEXITSTATUS(st) == 77) {
      skipped++;
      printf("contract: SKIP %s\n", k->label);
    } else if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
      printf("contract: PASS %s\n", k->label);
    } else {
      failed++;
      if (WIFSIGNALED(st))
        printf("contract: FAIL %s (killed by signal %d: %s)\n", k->label,
               WTERMSIG(st), strsignal(WTERMSIG(st)));
      else
        printf("contract: FAIL %s (exit status %d)\n", k->label, WEXITSTATUS(st));
    }
    fflush(stdout);
  }
  printf("contract: %d case(s), %d passed, %d failed, %d skipped\n", ran,
         ran - failed - skipped, failed, skipped);
  if (failed) return 1;
  return ran > 0 && skipped == ran ? 77 : 0;
}
