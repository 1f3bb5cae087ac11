/* Cases only the simulated driver can stage: entry points that fail or
 * report NOT_SUPPORTED, a 13.2 driver, two devices, injected faults,
 * invalid handles. Cases that change driver-wide settings (version,
 * devices, sticky faults) run in child processes. */
#include "fixture.h"

#include <pthread.h>
#include <time.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "adapt.h"
#include "context.h"
#include "counter.h"
#include "loop.h"
#include "simcuda.h"

/* Cases run in a fixture (test/common/fixture.h); teardown() also takes
 * back what a failed case left staged in the simulation. */
static tu_fx_loop_t *init_loop(tu_fx_t *fx, uvcuda_completion_t c) {
  return tu_fx_open_with(fx, c, -1);
}

/* Starts one future on s and runs the loop until its callback. */
static int await_one(tu_fx_t *fx, tu_fx_loop_t *lp, CUstream s) {
  uvcuda_future_t *f = tu_fx_futures(fx, 1);
  tu_rec_t *r = tu_fx_rec(fx);
  TU_OK(uvcuda_future_init(&lp->ul, f));
  f->data = r;
  TU_OK(uvcuda_future_start(f, s, NULL, tu_rec_done));
  tu_run(&lp->uv, 5000);
  assert_int_equal(r->calls, 1);
  TU_OK(uvcuda_future_close(f, NULL));
  tu_run(&lp->uv, 5000);
  return r->status;
}

static void teardown_failures(void) { simcuda_clear_failures(); }

/* ---- memops missing: AUTO falls back, explicit strategies say so ---- */

static void no_memops_auto_falls_back(void **state) {
  tu_fx_t *fx = tu_fx(state);
  tu_fx_loop_t *lp;
  uvcuda_stats_t st;
  CUstream s = tu_stream();
  int i;
  simcuda_fail("cuStreamWriteValue64", CUDA_ERROR_NOT_SUPPORTED, -1);
  simcuda_fail("cuStreamWriteValue32", CUDA_ERROR_NOT_SUPPORTED, -1);
  lp = init_loop(fx, UVCUDA_COMPLETION_AUTO);
  for (i = 0; i < 20; i++) assert_int_equal(await_one(fx, lp, s), 0);
  TU_OK(uvcuda_loop_stats(&lp->ul, &st));
  assert_true(st.fallbacks >= 1);
  assert_int_equal(st.completed_spin + st.completed_hostfn, 20);
  assert_true(simcuda_hostfn_count() >= 20);
  tu_fx_close(lp);

  lp = init_loop(fx, UVCUDA_COMPLETION_REACTOR);
  assert_int_equal(await_one(fx, lp, s), UVCUDA_ENOTSUP);
  tu_fx_close(lp);
  lp = init_loop(fx, UVCUDA_COMPLETION_POLL);
  assert_int_equal(await_one(fx, lp, s), UVCUDA_ENOTSUP);
  tu_fx_close(lp);
  teardown_failures();
  tu_stream_destroy(s);
}

/* Host memory the driver refuses to register for the device (some VMs and
 * sandboxes): AUTO goes to host functions, as for refused memops, and
 * stops asking; explicit strategies say UVCUDA_ENOTSUP. */
static void no_registration_auto_falls_back(void **state) {
  static const CUresult refusals[] = {CUDA_ERROR_NOT_SUPPORTED,
                                      CUDA_ERROR_NOT_PERMITTED};
  tu_fx_t *fx = tu_fx(state);
  tu_fx_loop_t *lp;
  uvcuda_stats_t st;
  CUstream s;
  uint64_t before;
  size_t k;
  int i;
  for (k = 0; k < sizeof(refusals) / sizeof(refusals[0]); k++) {
    /* A context of its own: the test's has counter pages already. */
    CUcontext c;
    TU_CU(tu.cuCtxCreate(&c, 0, 0));
    TU_CU(tu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    simcuda_fail("cuMemHostRegister", refusals[k], -1);
    lp = init_loop(fx, UVCUDA_COMPLETION_AUTO);
    before = simcuda_call_count("cuMemHostRegister");
    for (i = 0; i < 10; i++) assert_int_equal(await_one(fx, lp, s), 0);
    assert_int_equal(simcuda_call_count("cuMemHostRegister"), before + 1);
    TU_OK(uvcuda_loop_stats(&lp->ul, &st));
    assert_true(st.fallbacks >= 1);
    assert_int_equal(st.completed_spin + st.completed_hostfn, 10);
    tu_fx_close(lp);
    lp = init_loop(fx, UVCUDA_COMPLETION_REACTOR);
    assert_int_equal(await_one(fx, lp, s), UVCUDA_ENOTSUP);
    tu_fx_close(lp);
    lp = init_loop(fx, UVCUDA_COMPLETION_POLL);
    assert_int_equal(await_one(fx, lp, s), UVCUDA_ENOTSUP);
    tu_fx_close(lp);
    teardown_failures();
    TU_CU(tu.cuStreamDestroy(s));
    TU_CU(tu.cuCtxDestroy(c));
    TU_CU(tu.cuCtxSetCurrent(tu_ctx));
  }
}

static void only_32_bit_memops(void **state) {
  tu_fx_t *fx = tu_fx(state);
  tu_fx_loop_t *lp;
  uvcuda_stats_t st;
  CUstream s = tu_stream();
  uint64_t before;
  int i;
  simcuda_fail("cuStreamWriteValue64", CUDA_ERROR_NOT_SUPPORTED, -1);
  lp = init_loop(fx, UVCUDA_COMPLETION_REACTOR);
  before = simcuda_call_count("cuStreamWriteValue32");
  for (i = 0; i < 10; i++) assert_int_equal(await_one(fx, lp, s), 0);
  assert_true(simcuda_call_count("cuStreamWriteValue32") >= before + 10);
  TU_OK(uvcuda_loop_stats(&lp->ul, &st));
  assert_int_equal(st.fallbacks, 0);
  tu_fx_close(lp);
  teardown_failures();
  tu_stream_destroy(s);
}

/* 32-bit counters compare wrap-safe against the 64-bit sequence. */
static void counter_32_wraps(void **state) {
  const int m = UVCUDA__COUNTER_MEM32;
  uint32_t slot;
  (void)state;
  slot = 3; /* seq 0x100000003 landed; the low word wrapped */
  assert_true(uvcuda__counter_passed(uvcuda__counter_load(&slot, m), m, 0x100000003ull));
  assert_true(uvcuda__counter_passed(uvcuda__counter_load(&slot, m), m, 0xfffffffeull));
  assert_false(uvcuda__counter_passed(uvcuda__counter_load(&slot, m), m, 0x100000004ull));
  slot = 0xfffffffeu; /* seq 0xfffffffe, before the wrap */
  assert_true(uvcuda__counter_passed(uvcuda__counter_load(&slot, m), m, 0xfffffffeull));
  assert_false(uvcuda__counter_passed(uvcuda__counter_load(&slot, m), m, 0x100000001ull));
  slot = 5;
  assert_true(uvcuda__counter_passed(uvcuda__counter_load(&slot, m), m, 0x100000005ull));
}

/* ---- enqueue failures and exhausted resources are values ---- */

static void enqueue_failures_reach_the_callback(void **state) {
  tu_fx_t *fx = tu_fx(state);
  tu_fx_loop_t *lp;
  CUstream s = tu_stream();

  lp = init_loop(fx, UVCUDA_COMPLETION_HOSTFN);
  simcuda_fail("cuLaunchHostFunc", CUDA_ERROR_OUT_OF_MEMORY, 1);
  assert_int_equal(await_one(fx, lp, s), UVCUDA_ECUDA(CUDA_ERROR_OUT_OF_MEMORY));
  assert_int_equal(await_one(fx, lp, s), 0); /* and the next one works */
  tu_fx_close(lp);

  lp = init_loop(fx, UVCUDA_COMPLETION_AUTO);
  assert_int_equal(await_one(fx, lp, s), 0);
  simcuda_fail("cuStreamWriteValue64", CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, 1);
  assert_int_equal(await_one(fx, lp, s),
                   UVCUDA_ECUDA(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES));
  assert_int_equal(await_one(fx, lp, s), 0);
  simcuda_fail("cuStreamIsCapturing", CUDA_ERROR_INVALID_HANDLE, 1);
  assert_int_equal(await_one(fx, lp, s), UVCUDA_ECUDA(CUDA_ERROR_INVALID_HANDLE));
  tu_fx_close(lp);
  teardown_failures();
  tu_stream_destroy(s);
}

/* Counter pages are registered per CUDA context: a fresh context's first
 * stream needs one, and a registration that fails is that future's error. */
static void pinned_memory_exhausted(void **state) {
  tu_fx_t *fx = tu_fx(state);
  tu_fx_loop_t *lp;
  CUcontext c;
  CUstream s;
  TU_CU(tu.cuCtxCreate(&c, 0, 0));
  TU_CU(tu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  lp = init_loop(fx, UVCUDA_COMPLETION_AUTO);
  simcuda_fail("cuMemHostRegister", CUDA_ERROR_OUT_OF_MEMORY, 1);
  assert_int_equal(await_one(fx, lp, s), UVCUDA_ECUDA(CUDA_ERROR_OUT_OF_MEMORY));
  assert_int_equal(await_one(fx, lp, s), 0);
  tu_fx_close(lp);
  teardown_failures();
  TU_CU(tu.cuStreamDestroy(s));
  TU_CU(tu.cuCtxDestroy(c));
  TU_CU(tu.cuCtxSetCurrent(tu_ctx));
}

static void invalid_stream_handle(void **state) {
  tu_fx_t *fx = tu_fx(state);
  tu_fx_loop_t *lp;
  lp = init_loop(fx, UVCUDA_COMPLETION_AUTO);
  assert_int_equal(await_one(fx, lp, (CUstream)(uintptr_t)0xdead0),
                   UVCUDA_ECUDA(CUDA_ERROR_INVALID_HANDLE));
  tu_fx_close(lp);
}

/* The legacy default stream (NULL) of the current context works too. */
static void default_stream(void **state) {
  tu_fx_t *fx = tu_fx(state);
  tu_fx_loop_t *lp;
  lp = init_loop(fx, UVCUDA_COMPLETION_AUTO);
  assert_int_equal(await_one(fx, lp, NULL), 0);
  assert_int_equal(await_one(fx, lp, CU_STREAM_PER_THREAD), 0);
  tu_fx_close(lp);
}

/* ---- a stream's timeline is kept between its futures ---- */

/* Making a timeline costs driver calls (cuStreamGetCtx, a counter) and two
 * locks before the op may launch: a stream that runs one future at a time
 * (the common server pattern) keeps its timeline, idle, for the next. */
static void a_stream_keeps_its_timeline(void **state) {
  tu_fx_t *fx = tu_fx(state);
  tu_fx_loop_t *lp;
  uvcuda_stats_t st;
  CUstream s, t;
  uint64_t made;

  lp = init_loop(fx, (uvcuda_completion_t)(intptr_t)tu_fx_prestate(state));
  s = tu_stream();
  assert_int_equal(await_one(fx, lp, s), 0);
  made = simcuda_call_count("cuStreamGetCtx");
  assert_int_equal(await_one(fx, lp, s), 0);
  assert_int_equal(await_one(fx, lp, s), 0);
  assert_true(simcuda_call_count("cuStreamGetCtx") == made);
  /* Idle ones are a cache, not in use. */
  TU_OK(uvcuda_loop_stats(&lp->ul, &st));
  assert_int_equal(st.timelines, 0);
  /* A new stream gets its own, even with the old handle (stream ids are
   * never reused). */
  tu_stream_destroy(s);
  t = tu_stream();
  assert_int_equal(await_one(fx, lp, t), 0);
  assert_true(simcuda_call_count("cuStreamGetCtx") == made + 1);
  tu_stream_destroy(t);
  tu_fx_close(lp);
}

/* The idle ones are bounded: the least recently used goes first. */
static void idle_timelines_are_bounded(void **state) {
  tu_fx_t *fx = tu_fx(state);
  enum { N = UVCUDA__TL_IDLE_MAX + 1 };
  CUstream s[N];
  tu_fx_loop_t *lp;
  uint64_t made;
  int i;

  lp = init_loop(fx, UVCUDA_COMPLETION_AUTO);
  for (i = 0; i < N; i++) {
    s[i] = tu_stream();
    assert_int_equal(await_one(fx, lp, s[i]), 0);
  }
  made = simcuda_call_count("cuStreamGetCtx");
  assert_int_equal(await_one(fx, lp, s[N - 1]), 0); /* kept */
  assert_true(simcuda_call_count("cuStreamGetCtx") == made);
  assert_int_equal(await_one(fx, lp, s[0]), 0); /* the oldest: freed */
  assert_true(simcuda_call_count("cuStreamGetCtx") == made + 1);
  for (i = 0; i < N; i++) tu_stream_destroy(s[i]);
  tu_fx_close(lp);
}

/* ---- a 13.2 driver: the host-task sync modes ---- */

static int c_v2_modes(void *arg) {
  uv_loop_t uv;
  uvcuda_loop_t ul;
  uvcuda_options_t o;
  uvcuda_future_t f;
  tu_rec_t r = {0};
  int mode = (int)(intptr_t)arg;
  CUstream s;
  (void)arg;
  setenv("SIMCUDA_DRIVER_VERSION", "13020", 1);
  if (tu_setup(0) != 0) return 10;
  s = tu_stream();
  uvcuda_options_init(&o);
  o.completion = mode == SIMCUDA_HOST_TASK_SPINWAIT ? UVCUDA_COMPLETION_HOSTFN_SPIN
                                                    : UVCUDA_COMPLETION_HOSTFN_BLOCK;
  o.spin_budget_us = 0;
  uv_loop_init(&uv);
  if (uvcuda_loop_init(&uv, &ul, &o) != 0) return 11;
  uvcuda_future_init(&ul, &f);
  f.data = &r;
  tu_sleep(s, 2000000);
  if (uvcuda_future_start(&f, s, NULL, tu_rec_done) != 0) return 12;
  uv_run(&uv, UV_RUN_DEFAULT);
  if (r.calls != 1 || r.status != 0) return 13;
  if (simcuda_hostfn_v2_count(mode) != 1) return 14;
  if (simcuda_hostfn_v2_count(!mode) != 0) return 15;
  uvcuda_future_close(&f, NULL);
  uv_run(&uv, UV_RUN_DEFAULT);
  uvcuda_loop_close(&ul, NULL);
  uv_run(&uv, UV_RUN_DEFAULT);
  return uv_loop_close(&uv) == 0 ? 0 : 16;
}

static void host_task_modes_on_13_2(void **state) {
  (void)state;
  assert_int_equal(tu_in_child(c_v2_modes, (void *)(intptr_t)SIMCUDA_HOST_TASK_SPINWAIT), 0);
  assert_int_equal(tu_in_child(c_v2_modes, (void *)(intptr_t)SIMCUDA_HOST_TASK_BLOCKING), 0);
}

/* ---- a fault on one device leaves the other working ---- */

static int d_done[2], d_bad[2];
static void on_dev(uvcuda_future_t *f, int status) {
  int d = (int)(intptr_t)f->data;
  d_done[d]++;
  if (d == 0 && uvcuda_cuda_result(status) != CUDA_ERROR_ILLEGAL_ADDRESS) d_bad[0]++;
  if (d == 1 && status != 0) d_bad[1]++;
}

static int c_two_devices(void *arg) {
  uvcuda_completion_t c = (uvcuda_completion_t)(uintptr_t)arg;
  CUdevice d1;
  CUcontext c1;
  CUstream s0, s1;
  uv_loop_t uv;
  uvcuda_loop_t ul;
  uvcuda_options_t o;
  uvcuda_future_t f[40];
  tu_gate_t g;
  int i;

  setenv("SIMCUDA_DEVICES", "2", 1);
  if (tu_setup(0) != 0) return 10;
  if (tu.cuDeviceGet(&d1, 1) || tu.cuDevicePrimaryCtxRetain(&c1, d1)) return 11;
  s0 = tu_stream(); /* device 0 (current) */
  tu_gate_init(&g);
  tu_gate_hold(&g, s0);
  tu.cuCtxSetCurrent(c1);
  s1 = tu_stream(); /* device 1 */
  tu.cuCtxSetCurrent(tu_ctx);
  uvcuda_options_init(&o);
  o.completion = c;
  uv_loop_init(&uv);
  if (uvcuda_loop_init(&uv, &ul, &o) != 0) return 12;
  for (i = 0; i < 40; i++) {
    uvcuda_future_init(&ul, &f[i]);
    f[i].data = (void *)(intptr_t)(i & 1);
    if (uvcuda_future_start(&f[i], (i & 1) ? s1 : s0, NULL, on_dev) != 0) return 13;
  }
  /* The fault comes from another stream of device 0: s0 itself is held. */
  if (simcuda_enqueue_fault(tu_stream(), CUDA_ERROR_ILLEGAL_ADDRESS) != CUDA_SUCCESS)
    return 14;
  uv_run(&uv, UV_RUN_DEFAULT);
  if (d_done[0] != 20 || d_done[1] != 20 || d_bad[0] || d_bad[1]) {
    fprintf(stderr, "dev0 %d/%d bad, dev1 %d/%d bad\n", d_bad[0], d_done[0], d_bad[1], d_done[1]);
    return 15;
  }
  /* Device 1 keeps working after device 0 died. */
  d_done[1] = 0;
  if (uvcuda_future_start(&f[1], s1, NULL, on_dev) != 0) return 16;
  uv_run(&uv, UV_RUN_DEFAULT);
  if (d_done[1] != 1 || d_bad[1]) return 17;
  for (i = 0; i < 40; i++) uvcuda_future_close(&f[i], NULL);
  uv_run(&uv, UV_RUN_DEFAULT);
  if (uvcuda_loop_close(&ul, NULL) != 0) return 18;
  uv_run(&uv, UV_RUN_DEFAULT);
  return uv_loop_close(&uv) == 0 ? 0 : 19;
}

static void fault_on_one_device(void **state) {
  int rc = tu_in_child(c_two_devices, (void *)tu_fx_prestate(state));
  if (rc != 0) fail_msg("child failed with status %d", rc);
}

/* ---- a fault the op itself met counts as found ---- */

/* The op's kernel faults before the marker is enqueued: the marker (or the
 * op) gets the sticky error, the future fails with it, and the loop counts
 * the context in stats.faults, as when the reactor or a probe finds it. */
static int op_faults(uvcuda_future_t *f, uvcuda_stream_t s) {
  (void)f;
  if (simcuda_enqueue_fault((CUstream)s, CUDA_ERROR_ILLEGAL_ADDRESS) != CUDA_SUCCESS)
    return -1;
  (void)tu.cuStreamSynchronize((CUstream)s); /* the fault is there now */
  return 0;
}

static int fault_status;
static void on_fault_done(uvcuda_future_t *f, int status) {
  (void)f;
  fault_status = status;
}

static int c_fault_in_op(void *arg) {
  uvcuda_completion_t c = (uvcuda_completion_t)(uintptr_t)arg;
  uv_loop_t uv;
  uvcuda_loop_t ul;
  uvcuda_options_t o;
  uvcuda_future_t f;
  uvcuda_stats_t st;
  CUstream s;

  if (tu_setup(0) != 0) return 10;
  s = tu_stream();
  uvcuda_options_init(&o);
  o.completion = c;
  uv_loop_init(&uv);
  if (uvcuda_loop_init(&uv, &ul, &o) != 0) return 11;
  uvcuda_future_init(&ul, &f);
  fault_status = 1;
  if (uvcuda_future_start(&f, s, op_faults, on_fault_done) != 0) return 12;
  uv_run(&uv, UV_RUN_DEFAULT);
  if (uvcuda_cuda_result(fault_status) != CUDA_ERROR_ILLEGAL_ADDRESS) {
    fprintf(stderr, "status %s\n", uvcuda_err_name(fault_status));
    return 13;
  }
  if (uvcuda_loop_stats(&ul, &st) != 0) return 14;
  if (st.faults != 1 || st.failed != 1) {
    fprintf(stderr, "faults %llu failed %llu\n", (unsigned long long)st.faults,
            (unsigned long long)st.failed);
    return 15;
  }
  uvcuda_future_close(&f, NULL);
  uv_run(&uv, UV_RUN_DEFAULT);
  if (uvcuda_loop_close(&ul, NULL) != 0) return 16;
  uv_run(&uv, UV_RUN_DEFAULT);
  return uv_loop_close(&uv) == 0 ? 0 : 17;
}

static void a_fault_the_op_met_is_counted(void **state) {
  int rc = tu_in_child(c_fault_in_op, (void *)tu_fx_prestate(state));
  if (rc != 0) fail_msg("child failed with status %d", rc);
}

/* ---- a faulted context's timelines are not in use ---- */

/* A future's stream is busy when another stream of its context faults:
 * the future fails, and its timeline, with nothing due any more (the
 * driver never runs a host function queued before a fault), no longer
 * counts in stats.timelines, in every strategy. */
static int c_fault_leaves_no_timeline(void *arg) {
  uvcuda_completion_t c = (uvcuda_completion_t)(uintptr_t)arg;
  uv_loop_t uv;
  uvcuda_loop_t ul;
  uvcuda_options_t o;
  uvcuda_future_t f;
  uvcuda_stats_t st;
  CUstream s;

  if (tu_setup(0) != 0) return 10;
  s = tu_stream();
  uvcuda_options_init(&o);
  o.completion = c;
  uv_loop_init(&uv);
  if (uvcuda_loop_init(&uv, &ul, &o) != 0) return 11;
  uvcuda_future_init(&ul, &f);
  if (simcuda_enqueue_work(s, 5000000000ull) != CUDA_SUCCESS) return 12;
  fault_status = 1;
  if (uvcuda_future_start(&f, s, NULL, on_fault_done) != 0) return 13;
  if (simcuda_enqueue_fault(tu_stream(), CUDA_ERROR_ILLEGAL_ADDRESS) != CUDA_SUCCESS)
    return 14;
  uv_run(&uv, UV_RUN_DEFAULT);
  if (uvcuda_cuda_result(fault_status) != CUDA_ERROR_ILLEGAL_ADDRESS) return 15;
  if (uvcuda_loop_stats(&ul, &st) != 0) return 16;
  if (st.timelines != 0 || st.faults != 1) {
    fprintf(stderr, "timelines %llu faults %llu\n",
            (unsigned long long)st.timelines, (unsigned long long)st.faults);
    return 17;
  }
  uvcuda_future_close(&f, NULL);
  uv_run(&uv, UV_RUN_DEFAULT);
  if (uvcuda_loop_close(&ul, NULL) != 0) return 18;
  uv_run(&uv, UV_RUN_DEFAULT);
  return uv_loop_close(&uv) == 0 ? 0 : 19;
}

static void a_fault_leaves_no_timeline_in_use(void **state) {
  int rc = tu_in_child(c_fault_leaves_no_timeline, (void *)tu_fx_prestate(state));
  if (rc != 0) fail_msg("child failed with status %d", rc);
}

/* ---- a wakeup looks only at the timelines that moved ---- */

/* 200 streams each hold an armed future; 50 futures then complete one by
 * one on another stream through the reactor. Each wakeup must harvest the
 * timelines that fired, not all 201 (a simulated stream is a thread:
 * valgrind allows 500). */
static void wakeup_cost_is_per_fired_timeline(void **state) {
  enum { HELD = 200, RUNS = 50 };
  tu_fx_t *fx = tu_fx(state);
  tu_fx_loop_t *lp;
  uvcuda_options_t o;
  uvcuda_future_t *held = tu_fx_futures(fx, HELD), *f = tu_fx_futures(fx, 1);
  CUstream *hs = tu_fx_alloc(fx, HELD * sizeof(*hs)), s = tu_stream();
  tu_rec_t *hr = tu_fx_rec(fx), *r = tu_fx_rec(fx);
  uvcuda_stats_t st;
  uint64_t h0, wakeups0;
  tu_gate_t g;
  int i;

  assert_non_null(held);
  assert_non_null(hs);
  uvcuda_options_init(&o);
  o.completion = UVCUDA_COMPLETION_REACTOR;
  o.spin_budget_us = 0; /* every completion through the reactor */
  lp = tu_fx_open(fx, &o);
  tu_gate_init(&g);
  for (i = 0; i < HELD; i++) {
    hs[i] = tu_stream();
    tu_gate_hold(&g, hs[i]);
    TU_OK(uvcuda_future_init(&lp->ul, &held[i]));
    held[i].data = hr;
    TU_OK(uvcuda_future_start(&held[i], hs[i], NULL, tu_rec_done));
  }
  uv_run(&lp->uv, UV_RUN_NOWAIT);
  TU_OK(uvcuda_future_init(&lp->ul, f));
  f->data = r;
  TU_OK(uvcuda_loop_stats(&lp->ul, &st));
  wakeups0 = st.reactor_wakeups;
  h0 = lp->ul.internal_->tls.harvests;
  for (i = 0; i < RUNS; i++) {
    uint64_t end = tu_now_ns() + 5000000000ull;
    TU_OK(uvcuda_future_start(f, s, NULL, tu_rec_done));
    while (r->calls < i + 1 && tu_now_ns() < end) uv_run(&lp->uv, UV_RUN_ONCE);
    assert_int_equal(r->calls, i + 1);
    assert_int_equal(r->status, 0);
  }
  TU_OK(uvcuda_loop_stats(&lp->ul, &st));
  assert_true(st.reactor_wakeups - wakeups0 >= RUNS);
  assert_int_equal(hr->calls, 0);
  /* At most a few timelines per wakeup; looking at every timeline would
   * be over 200 per wakeup. */
  if (lp->ul.internal_->tls.harvests - h0 > 4 * (st.reactor_wakeups - wakeups0))
    fail_msg("%llu harvests over %llu wakeups with %d timelines held",
             (unsigned long long)(lp->ul.internal_->tls.harvests - h0),
             (unsigned long long)(st.reactor_wakeups - wakeups0), HELD);
  tu_gate_open(&g);
  tu_run(&lp->uv, 10000);
  assert_int_equal(hr->calls, HELD);
  TU_OK(uvcuda_future_close(f, NULL));
  for (i = 0; i < HELD; i++) TU_OK(uvcuda_future_close(&held[i], NULL));
  tu_run(&lp->uv, 5000);
  for (i = 0; i < HELD; i++) tu_stream_destroy(hs[i]);
  tu_stream_destroy(s);
  tu_gate_free(&g);
  tu_fx_close(lp);
}

/* ---- a driver call stuck in the reactor's fault probe ---- */

static int tick_count;
static void on_tick(uv_timer_t *t) {
  (void)t;
  tick_count++;
}

/* The reactor's fault probe (a cuStreamQuery of uvcuda's own stream)
 * blocks inside the driver. The loop thread must still arm futures, run
 * its other handles and spin; futures that complete in the spin are
 * delivered at once, on every stream. Only armed futures wait: the reactor
 * that reads their counters is stuck. */
static void stuck_probe_never_blocks_the_loop(void **state) {
  tu_fx_t *fx = tu_fx(state);
  tu_fx_loop_t *lp;
  uvcuda_options_t o;
  uvcuda_future_t *fa = tu_fx_futures(fx, 1), *fa2 = tu_fx_futures(fx, 1);
  uvcuda_future_t *fb = tu_fx_futures(fx, 1), *fc = tu_fx_futures(fx, 1);
  tu_rec_t *ra = tu_fx_rec(fx), *ra2 = tu_fx_rec(fx);
  tu_rec_t *rb = tu_fx_rec(fx), *rc = tu_fx_rec(fx);
  CUstream a = tu_stream(), b = tu_stream(), c = tu_stream();
  uv_timer_t *tick = tu_fx_alloc(fx, sizeof(*tick));
  uint64_t end;
  tu_gate_t g;

  uvcuda_options_init(&o);
  o.completion = UVCUDA_COMPLETION_AUTO;
  o.spin_budget_us = 0;
  o.probe_interval_us = 50;
  lp = tu_fx_open(fx, &o);
  tu_gate_init(&g);
  tu_gate_hold(&g, a);
  TU_OK(uvcuda_future_init(&lp->ul, fa));
  fa->data = ra;
  TU_OK(uvcuda_future_start(fa, a, NULL, tu_rec_done)); /* armed: probed */

  simcuda_hold_calls("cuStreamQuery", 1);
  end = tu_now_ns() + 5000000000ull;
  while (simcuda_held_calls("cuStreamQuery") == 0 && tu_now_ns() < end)
    uv_run(&lp->uv, UV_RUN_NOWAIT);
  assert_int_equal(simcuda_held_calls("cuStreamQuery"), 1); /* the reactor */

  /* Arming takes the reactor's lock: it must not be held by the probe. */
  TU_OK(uvcuda_future_init(&lp->ul, fb));
  fb->data = rb;
  TU_OK(uvcuda_future_start(fb, b, NULL, tu_rec_done));
  /* Futures that complete in the spin while the probe is stuck: fa2 on
   * stream a (and fa ahead of it), fc on another one. */
  tu_gate_open(&g);
  lp->ul.internal_->opts.spin_budget_ns = 1000000000ull;
  TU_OK(uvcuda_future_init(&lp->ul, fa2));
  fa2->data = ra2;
  TU_OK(uvcuda_future_start(fa2, a, NULL, tu_rec_done));
  TU_OK(uvcuda_future_init(&lp->ul, fc));
  fc->data = rc;
  TU_OK(uvcuda_future_start(fc, c, NULL, tu_rec_done));
  lp->ul.internal_->opts.spin_budget_ns = 0;
  uv_timer_init(&lp->uv, tick);
  uv_timer_start(tick, on_tick, 1, 1);
  tick_count = 0;
  /* Loop until the timer ticked 10 times and the spinning futures are
   * done (the probe stays stuck all along: nothing here waits for it). */
  end = tu_now_ns() + 5000000000ull;
  while ((tick_count < 10 || rc->calls == 0 || ra2->calls == 0) &&
         tu_now_ns() < end)
    uv_run(&lp->uv, UV_RUN_NOWAIT);
  assert_true(tick_count >= 10); /* the loop ran its timer all along */
  assert_int_equal(rc->calls, 1);
  assert_int_equal(ra->calls, 1);
  assert_int_equal(ra2->calls, 1);
  assert_int_equal(rb->calls, 0); /* armed: the reactor is stuck */
  assert_int_equal(simcuda_held_calls("cuStreamQuery"), 1);

  simcuda_hold_calls("cuStreamQuery", 0);
  end = tu_now_ns() + 5000000000ull;
  while (rb->calls == 0 && tu_now_ns() < end) uv_run(&lp->uv, UV_RUN_ONCE);
  assert_int_equal(rb->calls, 1);
  assert_int_equal(ra->status | ra2->status | rb->status | rc->status, 0);
  uv_close((uv_handle_t *)tick, NULL);
  TU_OK(uvcuda_future_close(fa, NULL));
  TU_OK(uvcuda_future_close(fa2, NULL));
  TU_OK(uvcuda_future_close(fb, NULL));
  TU_OK(uvcuda_future_close(fc, NULL));
  tu_run(&lp->uv, 5000);
  tu_stream_destroy(a);
  tu_stream_destroy(b);
  tu_stream_destroy(c);
  tu_gate_free(&g);
  tu_fx_close(lp);
}

/* ---- closing a loop never waits for the device ---- */

static void *hold_frees(void *arg) {
  (void)arg;
  /* Every other thread now waits inside these calls, as a real GPU makes
   * them wait while the device (or the context) is busy. */
  simcuda_hold_calls("cuMemFreeHost", 1);
  simcuda_hold_calls("cuMemHostUnregister", 1);
  return NULL;
}

static void *release_frees(void *arg) {
  (void)arg;
  simcuda_hold_calls("cuMemFreeHost", 0);
  simcuda_hold_calls("cuMemHostUnregister", 0);
  return NULL;
}

static int closed_flag;
static void on_loop_closed(uvcuda_loop_t *ul) {
  (void)ul;
  closed_flag = 1;
}

/* Freeing pinned memory waits for the device on a real GPU (on the H200,
 * cuMemHostUnregister behind a 1 s kernel took 1 s). Loop B closes with
 * counters to give back while those calls would block: its close must
 * finish, no thread may call them, and loop A keeps completing. */
static void loop_close_never_waits_for_the_device(void **state) {
  tu_fx_t *fx = tu_fx(state);
  tu_fx_loop_t *a, *b;
  CUstream s = tu_stream(), s2 = tu_stream();
  pthread_t t;
  uint64_t frees0, unregs0;

  a = init_loop(fx, UVCUDA_COMPLETION_AUTO);
  b = init_loop(fx, UVCUDA_COMPLETION_AUTO);
  assert_int_equal(await_one(fx, b, s), 0); /* B has counters */
  assert_int_equal(await_one(fx, b, s2), 0);
  frees0 = simcuda_call_count("cuMemFreeHost");
  unregs0 = simcuda_call_count("cuMemHostUnregister");
  assert_int_equal(pthread_create(&t, NULL, hold_frees, NULL), 0);
  pthread_join(t, NULL);
  closed_flag = 0;
  TU_OK(uvcuda_loop_close(&b->ul, on_loop_closed));
  tu_run_until(&b->uv, &closed_flag, 5000);
  assert_int_equal(closed_flag, 1);
  assert_int_equal(tu_fx_close_uv(b), 0);
  assert_int_equal(await_one(fx, a, s), 0); /* A is unharmed */
  assert_int_equal(await_one(fx, a, s2), 0);
  tu_fx_close(a);
  assert_int_equal(simcuda_call_count("cuMemFreeHost"), frees0);
  assert_int_equal(simcuda_call_count("cuMemHostUnregister"), unregs0);
  assert_int_equal(pthread_create(&t, NULL, release_frees, NULL), 0);
  pthread_join(t, NULL);
  tu_stream_destroy(s);
  tu_stream_destroy(s2);
}

/* The pre-wake's lead for the wake-up itself: wake-ups that vary around
 * the same mean lead by more than steady ones (their mean plus two
 * deviations), and a stalled loop never
 * teaches more than 200 µs. (With the mean alone, a third of the H200's
 * 2 ms futures were done before the loop looked.) The timer's expiry and
 * the wake-up times are fed in by hand: no clock, no loop. */
static uint64_t lead_after(const uint64_t *late, int n, int rounds) {
  struct uvcuda__adapt a;
  uvcuda_stats_t st;
  uint64_t at = 1000000000u;
  int i;
  memset(&st, 0, sizeof(st));
  assert_int_equal(uvcuda__adapt_init(&a, NULL, 0, &st, NULL), 0);
  for (i = 0; i < n * rounds; i++) {
    a.timer_at = at;
    uvcuda__adapt_fire(&a, at + late[i % n]);
    at += 2000000u;
  }
  assert_int_equal(st.prewakes, (uint64_t)(n * rounds));
  return uvcuda__adapt_wake_lead(&a);
}

static void prewake_lead_covers_the_spread_of_wakeups(void **state) {
  static const uint64_t steady[] = {30000}, varied[] = {10000, 50000},
                        stalled[] = {1000000000u};
  uint64_t ls = lead_after(steady, 1, 40), lv = lead_after(varied, 2, 20);
  (void)state;
  assert_true(ls >= 30000 && ls <= 31000);
  assert_true(lv >= ls + 2 * 15000); /* two deviations of ~20 µs */
  assert_int_equal(lead_after(stalled, 1, 5), 200000);
}

/* A long predicted wait is woken earlier still: after a 2 ms sleep the
 * wake-up's tail outran the learnt lateness (about 5 % of predictions
 * early on the H100, run 21). Short ones keep the lead they had. */
static void a_long_wait_is_woken_earlier(void **state) {
  (void)state;
  assert_int_equal(uvcuda__adapt_long_lead(20000), 0);
  assert_int_equal(uvcuda__adapt_long_lead(200000), 0);
  assert_int_equal(uvcuda__adapt_long_lead(250000), 0);
  assert_int_equal(uvcuda__adapt_long_lead(640000), 10000);
  assert_int_equal(uvcuda__adapt_long_lead(2000000), 31250);
  assert_int_equal(uvcuda__adapt_long_lead(100000000), 50000);
}

/* An early prediction (done before the loop looked) among hits is the
 * spread of the work or of the wake-up, a few % of them: it must not send
 * the next future to the fixed budget, whose spin costs the whole budget.
 * Two in a row back off (1, 2, 4 ... predictions left out); a hit ends
 * it. Outcomes are fed in by hand: no clock, no loop. */
static void outcome(struct uvcuda__adapt *a, int adapt) {
  uvcuda_future_t f;
  memset(&f, 0, sizeof(f));
  f.adapt_ = adapt;
  /* On the queue its state puts it on (forget takes it off). */
  uvcuda__queue_insert_tail(adapt == UVCUDA__ADAPT_HOT ? &a->hot : &a->pending,
                            &f.pw_node_);
  uvcuda__adapt_forget(a, &f, 0);
  assert_true(uvcuda__queue_empty(&a->pending) && uvcuda__queue_empty(&a->hot));
}

static void one_early_prediction_is_not_backed_off(void **state) {
  struct uvcuda__adapt a;
  uvcuda_stats_t st;
  (void)state;
  memset(&st, 0, sizeof(st));
  assert_int_equal(uvcuda__adapt_init(&a, NULL, 0, &st, NULL), 0);
  outcome(&a, UVCUDA__ADAPT_HOT);
  outcome(&a, UVCUDA__ADAPT_PENDING); /* early, after a hit */
  assert_int_equal(a.skip, 0);
  outcome(&a, UVCUDA__ADAPT_HOT);
  outcome(&a, UVCUDA__ADAPT_PENDING);
  assert_int_equal(a.skip, 0);
  outcome(&a, UVCUDA__ADAPT_PENDING); /* two in a row */
  assert_int_equal(a.skip, 1);
  outcome(&a, UVCUDA__ADAPT_PENDING);
  assert_int_equal(a.skip, 2);
  outcome(&a, UVCUDA__ADAPT_HOT); /* a hit ends the back-off's growth */
  outcome(&a, UVCUDA__ADAPT_PENDING);
  assert_int_equal(a.backoff, 0);
  assert_int_equal(st.predict_early, 5);
  assert_int_equal(st.predict_hit, 3);
}

/* A failed case may have left calls held or failures staged: the next
 * case must not inherit them (the loops' teardown needs the driver). */
static int teardown(void **state) {
  simcuda_hold_calls("cuStreamQuery", 0);
  simcuda_hold_calls("cuMemFreeHost", 0);
  simcuda_hold_calls("cuMemHostUnregister", 0);
  simcuda_clear_failures();
  return tu_fx_teardown(state);
}

/* ---- closing the last loop while the reactor is stuck in the driver ---- */

/* A safety net only: releases the hold if the close never returns (then
 * `released` says the close waited for it). */
typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cond;
  int stop, released;
} releaser_t;

static void *release_later(void *arg) {
  releaser_t *r = arg;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += 60;
  pthread_mutex_lock(&r->mu);
  while (!r->stop)
    if (pthread_cond_timedwait(&r->cond, &r->mu, &ts) != 0) break;
  if (!r->stop) {
    r->released = 1;
    simcuda_hold_calls("cuStreamQuery", 0);
  }
  pthread_mutex_unlock(&r->mu);
  return NULL;
}

static void on_closed_flag(uvcuda_loop_t *ul) { *(int *)ul->data = 1; }

/* The last loop context leaves while the reactor's fault probe is blocked
 * inside the driver (a cuStreamQuery stuck behind another thread: a
 * module's JIT can hold it for seconds). uvcuda_loop_close and its close
 * callback, and a loop context opened meanwhile on another uv loop, wait
 * for none of it: the stuck thread is left to end on its own. */
static void closing_the_last_loop_never_waits_for_a_stuck_probe(void **state) {
  uv_loop_t uv, uv2;
  uvcuda_loop_t ul, ul2;
  uvcuda_options_t o;
  uvcuda_future_t f, f2;
  tu_rec_t rec, rec2;
  releaser_t rl = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
  CUstream s = tu_stream();
  pthread_t t;
  uint64_t end;
  int closed = 0;
  tu_gate_t g;

  memset(&rec, 0, sizeof(rec));
  memset(&rec2, 0, sizeof(rec2));
  uvcuda_options_init(&o);
  o.completion = UVCUDA_COMPLETION_AUTO;
  o.spin_budget_us = 0;
  o.probe_interval_us = 50;
  assert_int_equal(uv_loop_init(&uv), 0);
  TU_OK(uvcuda_loop_init(&uv, &ul, &o));
  tu_gate_init(&g);
  tu_gate_hold(&g, s);
  TU_OK(uvcuda_future_init(&ul, &f));
  f.data = &rec;
  TU_OK(uvcuda_future_start(&f, s, NULL, tu_rec_done)); /* armed: probed */
  simcuda_hold_calls("cuStreamQuery", 1);
  end = tu_now_ns() + 30000000000ull;
  while (simcuda_held_calls("cuStreamQuery") == 0 && tu_now_ns() < end)
    uv_run(&uv, UV_RUN_NOWAIT);
  assert_int_equal(simcuda_held_calls("cuStreamQuery"), 1); /* the reactor */
  assert_int_equal(pthread_create(&t, NULL, release_later, &rl), 0);

  TU_OK(uvcuda_future_close(&f, NULL));
  uv_run(&uv, UV_RUN_NOWAIT);
  ul.data = &closed;
  TU_OK(uvcuda_loop_close(&ul, on_closed_flag));
  while (!closed) uv_run(&uv, UV_RUN_ONCE);
  assert_int_equal(uv_loop_close(&uv), 0);
  pthread_mutex_lock(&rl.mu);
  assert_int_equal(rl.released, 0); /* the close did not wait for the probe */
  pthread_mutex_unlock(&rl.mu);

  /* A new loop context meanwhile gets a reactor of its own at once, and
   * its work completes (in the spin: the stuck call is a probe's). */
  o.spin_budget_us = 1000000;
  assert_int_equal(uv_loop_init(&uv2), 0);
  TU_OK(uvcuda_loop_init(&uv2, &ul2, &o));
  tu_gate_open(&g);
  TU_OK(uvcuda_future_init(&ul2, &f2));
  f2.data = &rec2;
  TU_OK(uvcuda_future_start(&f2, s, NULL, tu_rec_done));
  while (rec2.calls == 0) uv_run(&uv2, UV_RUN_ONCE);
  assert_int_equal(rec2.status, 0);
  pthread_mutex_lock(&rl.mu);
  assert_int_equal(rl.released, 0);
  rl.stop = 1;
  pthread_cond_signal(&rl.cond);
  pthread_mutex_unlock(&rl.mu);
  pthread_join(t, NULL);
  simcuda_hold_calls("cuStreamQuery", 0);

  TU_OK(uvcuda_future_close(&f2, NULL));
  uv_run(&uv2, UV_RUN_NOWAIT);
  closed = 0;
  ul2.data = &closed;
  TU_OK(uvcuda_loop_close(&ul2, on_closed_flag));
  while (!closed) uv_run(&uv2, UV_RUN_ONCE);
  assert_int_equal(uv_loop_close(&uv2), 0);
  tu_stream_destroy(s);
  tu_gate_free(&g);
  (void)state;
}

/* ---- a released primary context leaves no record behind ---- */

/* A Node worker that opens the device in a process whose main thread does
 * not hold it retains the primary context, and its release destroys it;
 * the next worker's retain makes it again, same handle, new id. Each time
 * uvcuda made a record (a counter page, the record: ~8 KB) and kept it
 * until exit. Now a record of a destroyed context that nothing refers to
 * is freed when its handle's next context gets one. */
static void on_f_closed(uvcuda_future_t *f) { *(int *)f->data = 1; }

static int c_primary_churn(void *arg) {
  enum { ROUNDS = 20 };
  CUcontext c;
  CUdevice dev;
  unsigned first = 0;
  int i;
  (void)arg;

  if (tu_setup(0) != 0) return 10;
  if (tu.cuDeviceGet(&dev, 0) != CUDA_SUCCESS) return 11;
  if (tu.cuDevicePrimaryCtxRelease(dev) != CUDA_SUCCESS) return 12; /* tu's */
  for (i = 0; i < ROUNDS; i++) {
    uv_loop_t uv;
    uvcuda_loop_t ul;
    uvcuda_future_t f;
    CUstream s;
    int closed = 0;
    fault_status = 1;
    if (tu.cuDevicePrimaryCtxRetain(&c, dev) != CUDA_SUCCESS ||
        tu.cuCtxSetCurrent(c) != CUDA_SUCCESS ||
        tu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)
      return 13;
    if (uv_loop_init(&uv) != 0 || uvcuda_loop_init(&uv, &ul, NULL) != 0)
      return 14;
    uvcuda_future_init(&ul, &f);
    if (uvcuda_future_start(&f, s, NULL, on_fault_done) != 0) return 15;
    while (fault_status == 1) uv_run(&uv, UV_RUN_ONCE);
    if (fault_status != 0) return 16;
    f.data = &closed;
    uvcuda_future_close(&f, on_f_closed);
    while (!closed) uv_run(&uv, UV_RUN_ONCE);
    closed = 0;
    ul.data = &closed;
    if (uvcuda_loop_close(&ul, on_closed_flag) != 0) return 17;
    while (!closed) uv_run(&uv, UV_RUN_ONCE);
    if (uv_loop_close(&uv) != 0) return 18;
    if (tu.cuStreamDestroy(s) != CUDA_SUCCESS) return 19;
    if (tu.cuDevicePrimaryCtxRelease(dev) != CUDA_SUCCESS) return 20;
    if (i == 1) first = uvcuda__context_records();
  }
  fprintf(stderr, "context records after round 2: %u, after round %d: %u\n",
          first, ROUNDS, uvcuda__context_records());
  return uvcuda__context_records() <= first ? 0 : 21;
}

static void released_primary_contexts_leave_no_record(void **state) {
  int rc = tu_in_child(c_primary_churn, NULL);
  (void)state;
  if (rc != 0) fail_msg("child failed with status %d", rc);
}

#define CASE(fn, prestate) \
  cmocka_unit_test_prestate_setup_teardown(fn, tu_fx_setup, teardown, prestate)
/* In children: this process must not touch the driver before they fork. */
#define CHILD(fn, prestate)                                               \
  cmocka_unit_test_prestate_setup_teardown(fn, tu_fx_setup, tu_fx_teardown, \
                                           prestate)

int main(void) {
  const struct CMUnitTest tests[] = {
      CASE(no_memops_auto_falls_back, NULL),
      CASE(no_registration_auto_falls_back, NULL),
      CASE(only_32_bit_memops, NULL),
      CASE(counter_32_wraps, NULL),
      CASE(enqueue_failures_reach_the_callback, NULL),
      CASE(pinned_memory_exhausted, NULL),
      CASE(invalid_stream_handle, NULL),
      CASE(default_stream, NULL),
      CASE(a_stream_keeps_its_timeline, (void *)UVCUDA_COMPLETION_AUTO),
      CASE(a_stream_keeps_its_timeline, (void *)UVCUDA_COMPLETION_HOSTFN),
      CASE(a_stream_keeps_its_timeline, (void *)UVCUDA_COMPLETION_POLL),
      CASE(idle_timelines_are_bounded, NULL),
      CASE(wakeup_cost_is_per_fired_timeline, NULL),
      CASE(stuck_probe_never_blocks_the_loop, NULL),
      CASE(loop_close_never_waits_for_the_device, NULL),
      CASE(closing_the_last_loop_never_waits_for_a_stuck_probe, NULL),
      cmocka_unit_test(prewake_lead_covers_the_spread_of_wakeups),
      cmocka_unit_test(a_long_wait_is_woken_earlier),
      cmocka_unit_test(one_early_prediction_is_not_backed_off),
  };
  const struct CMUnitTest child_tests[] = {
      CHILD(host_task_modes_on_13_2, NULL),
      CHILD(fault_on_one_device, (void *)UVCUDA_COMPLETION_AUTO),
      CHILD(fault_on_one_device, (void *)UVCUDA_COMPLETION_HOSTFN),
      CHILD(fault_on_one_device, (void *)UVCUDA_COMPLETION_POLL),
      CHILD(a_fault_the_op_met_is_counted, (void *)UVCUDA_COMPLETION_AUTO),
      CHILD(a_fault_the_op_met_is_counted, (void *)UVCUDA_COMPLETION_HOSTFN),
      CHILD(a_fault_the_op_met_is_counted, (void *)UVCUDA_COMPLETION_POLL),
      CHILD(a_fault_leaves_no_timeline_in_use, (void *)UVCUDA_COMPLETION_AUTO),
      CHILD(a_fault_leaves_no_timeline_in_use, (void *)UVCUDA_COMPLETION_HOSTFN),
      CHILD(a_fault_leaves_no_timeline_in_use, (void *)UVCUDA_COMPLETION_POLL),
      CHILD(released_primary_contexts_leave_no_record, NULL),
  };
  int fails = 0, rc;
  /* Children first, while this process has not loaded the driver. */
  fails += cmocka_run_group_tests_name("sim/children", child_tests, NULL, NULL);
  rc = tu_setup(0);
  if (rc != 0) return 1;
  if (!tu_is_simulated()) return 77;
  fails += cmocka_run_group_tests_name("sim", tests, NULL, NULL);
  tu_teardown();
  return fails ? 1 : 0;
}
