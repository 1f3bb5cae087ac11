/* The reactor and timelines at scale, fault handling and reactor lifetime.
 * Runs in the `sim` suite and, with --gpu, in the `gpu` suite. Cases that
 * fault a context run in a child process: CUDA context errors are sticky. */
#include "fixture.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bell.h"
#include "context.h"
#include "loop.h"
#include "reactor.h"
#include "simcuda.h"

static int want_real;

/* ---- 100,000 in flight over 64 streams ---- */

#define BIG_STREAMS 64
#define BIG_N 100000

typedef struct {
  uvcuda_future_t f;
  int stream, index, calls, status;
} item_t;

static int expect_next[BIG_STREAMS], misorder, ndone;

static void on_item(uvcuda_future_t *f, int status) {
  item_t *it = f->data;
  it->calls++;
  it->status = status;
  if (expect_next[it->stream] != it->index) misorder++;
  expect_next[it->stream] = it->index + 1;
  ndone++;
}

static void run_many(tu_fx_t *fx, uvcuda_completion_t c, int n) {
  tu_fx_loop_t *lp;
  CUstream s[BIG_STREAMS];
  item_t *it = tu_fx_alloc(fx, (size_t)n * sizeof(*it));
  int i, per[BIG_STREAMS] = {0};
  uvcuda_stats_t st;
  tu_gate_t g;

  assert_non_null(it);
  tu_fx_track(fx, &it[0].f, (size_t)n, sizeof(*it));
  lp = tu_fx_open_with(fx, c, 20);
  tu_gate_init(&g);
  for (i = 0; i < BIG_STREAMS; i++) {
    s[i] = tu_stream();
    /* The simulation queues without bound: hold every stream so that all
     * n are in flight before any completes. A GPU's hardware queues are
     * finite (an enqueue behind a wait that never ends would block), so
     * there a long kernel heads each stream instead. */
    if (tu_is_simulated()) tu_gate_hold(&g, s[i]);
    else tu_sleep(s[i], 200 * 1000 * 1000);
  }
  memset(expect_next, 0, sizeof(expect_next));
  misorder = ndone = 0;
  for (i = 0; i < n; i++) {
    it[i].stream = i % BIG_STREAMS;
    it[i].index = per[it[i].stream]++;
    TU_OK(uvcuda_future_init(&lp->ul, &it[i].f));
    it[i].f.data = &it[i];
    TU_OK(uvcuda_future_start(&it[i].f, s[it[i].stream], NULL, on_item));
  }
  uv_run(&lp->uv, UV_RUN_NOWAIT);
  if (tu_is_simulated()) assert_int_equal(ndone, 0);
  tu_gate_open(&g);
  tu_run(&lp->uv, 120000);
  assert_int_equal(ndone, n);
  assert_int_equal(misorder, 0);
  for (i = 0; i < n; i++) {
    assert_int_equal(it[i].calls, 1);
    assert_int_equal(it[i].status, 0);
    TU_OK(uvcuda_future_close(&it[i].f, NULL));
  }
  tu_run(&lp->uv, 10000);
  TU_OK(uvcuda_loop_stats(&lp->ul, &st));
  assert_int_equal(st.started, (uint64_t)n);
  assert_int_equal(st.completed_spin + st.completed_reactor + st.completed_hostfn +
                       st.completed_poll,
                   (uint64_t)n);
  for (i = 0; i < BIG_STREAMS; i++) tu_stream_destroy(s[i]);
  tu_gate_free(&g);
  tu_fx_close(lp);
}

static void hundred_thousand_in_flight(void **state) {
  run_many(tu_fx(state), UVCUDA_COMPLETION_AUTO, BIG_N);
}

static void ten_thousand_in_flight_hostfn(void **state) {
  run_many(tu_fx(state), UVCUDA_COMPLETION_HOSTFN, BIG_N / 10);
}

/* ---- park / unpark ---- */

static int pk_done, pk_status;
static void on_pk(uvcuda_future_t *f, int status) {
  (void)f;
  pk_done++;
  if (status) pk_status = status;
}

/* A reactor-strategy loop whose futures are armed at once (spin budget 0:
 * only the reactor sees them), with the options' busy-poll phase after
 * each arm set to reactor_spin_us. */
static tu_fx_loop_t *open_armed_at_once(tu_fx_t *fx, int32_t reactor_spin_us) {
  uvcuda_options_t o;
  uvcuda_options_init(&o);
  o.completion = UVCUDA_COMPLETION_REACTOR;
  o.spin_budget_us = 0;
  o.reactor_spin_us = reactor_spin_us;
  return tu_fx_open(fx, &o);
}

/* Arms land just as the reactor decides to park, right after the last
 * watch left (no linger) or at the end of a short linger: none may be
 * lost. */
static void park_unpark_races(void **state) {
  tu_fx_t *fx = tu_fx(state);
  tu_fx_loop_t *lp =
      open_armed_at_once(fx, (int32_t)(intptr_t)tu_fx_prestate(state));
  uvcuda_future_t *f = tu_fx_futures(fx, 1);
  CUstream s;
  int i, want = 0;

  s = tu_stream();
  TU_OK(uvcuda_future_init(&lp->ul, f));
  pk_done = pk_status = 0;
  for (i = 0; i < 2000; i++) {
    uint64_t end = tu_now_ns() + 5000000000ull;
    TU_OK(uvcuda_future_start(f, s, NULL, on_pk));
    want++;
    while (pk_done < want) {
      if (tu_now_ns() > end) fail_msg("future %d lost", i);
      uv_run(&lp->uv, UV_RUN_NOWAIT);
    }
    if (i % 3 == 0) usleep((useconds_t)(i % 50)); /* let it park, or not */
  }
  assert_int_equal(pk_done, 2000);
  assert_int_equal(pk_status, 0);
  TU_OK(uvcuda_future_close(f, NULL));
  tu_run(&lp->uv, 5000);
  tu_stream_destroy(s);
  tu_fx_close(lp);
}

/* ---- with nothing armed the reactor parks ---- */

/* The reactor's sleep (lib/bell.h; this test links with -Wl,--wrap for
 * its calls, which reaches the library's static archive): a ring is an
 * arm that woke the reactor, a wait with no deadline is a park. The timed
 * waits are wrapped below (arm_wakes_a_sleeping_reactor). */
static atomic_int cv_signals, cv_parks;
static int timed_wait_hook(struct uvcuda__bell *b, pthread_mutex_t *m,
                           uint64_t at);

void __real_uvcuda__bell_ring(struct uvcuda__bell *b);
void __wrap_uvcuda__bell_ring(struct uvcuda__bell *b);
void __wrap_uvcuda__bell_ring(struct uvcuda__bell *b) {
  atomic_fetch_add(&cv_signals, 1);
  __real_uvcuda__bell_ring(b);
}
int __real_uvcuda__bell_wait(struct uvcuda__bell *b, pthread_mutex_t *m,
                             uint64_t at);
int __wrap_uvcuda__bell_wait(struct uvcuda__bell *b, pthread_mutex_t *m,
                             uint64_t at);
int __wrap_uvcuda__bell_wait(struct uvcuda__bell *b, pthread_mutex_t *m,
                             uint64_t at) {
  if (at != 0) return timed_wait_hook(b, m, at);
  atomic_fetch_add(&cv_parks, 1);
  return __real_uvcuda__bell_wait(b, m, 0);
}

/* Runs f on s to its callback (on_pk), with a watchdog. */
static void run_one(tu_fx_loop_t *lp, uvcuda_future_t *f, CUstream s) {
  pk_done = 0;
  TU_OK(uvcuda_future_start(f, s, NULL, on_pk));
  assert_int_equal(tu_run_until(&lp->uv, &pk_done, 10000), 0);
}

/* Nothing armed costs nothing: once a future is delivered and none is
 * watched, the reactor parks (no busy-poll while it waits for the next
 * arm), and the next arm wakes it. Each round waits for the park (the
 * wrapper counts it holding the reactor's lock, so the reactor is parked
 * or about to be once the count moves), then arms: the arm must signal. */
static void with_nothing_armed_the_reactor_parks(void **state) {
  tu_fx_t *fx = tu_fx(state);
  tu_fx_loop_t *lp = open_armed_at_once(fx, 0);
  uvcuda_future_t *f = tu_fx_futures(fx, 1);
  CUstream s;
  uint64_t end;
  int i, parks, signals;

  s = tu_stream();
  TU_OK(uvcuda_future_init(&lp->ul, f));
  pk_status = 0;
  for (i = 0; i < 5; i++) {
    parks = atomic_load(&cv_parks);
    run_one(lp, f, s);
    end = tu_now_ns() + 10000000000ull; /* a watchdog, not a bound */
    while (atomic_load(&cv_parks) == parks) {
      if (tu_now_ns() > end) fail_msg("the reactor never parked (%d)", i);
      usleep(1000);
    }
    signals = atomic_load(&cv_signals);
    run_one(lp, f, s);
    if (atomic_load(&cv_signals) == signals)
      fail_msg("an arm left the parked reactor asleep (%d)", i);
  }
  assert_int_equal(pk_status, 0);
  TU_OK(uvcuda_future_close(f, NULL));
  tu_run(&lp->uv, 5000);
  tu_stream_destroy(s);
  tu_fx_close(lp);
}

/* A wait that never ends is probed ever less often: one probe gap
 * (lib/plan.h) after another, each the probe interval or 5 % of the wait
 * so far, whichever is longer. The loop does not run meanwhile, so every
 * query of a probe stream is the reactor's; counted over two held seconds,
 * they must stay within what those gaps allow for the time it took (a
 * count against the measured time, not a bound on it) and be more than
 * none (a fault there would be found). Simulation only: it counts the
 * driver's calls. */
static void a_wait_that_never_ends_is_probed_ever_less(void **state) {
  tu_fx_t *fx = tu_fx(state);
  tu_fx_loop_t *lp;
  uvcuda_future_t *f;
  tu_gate_t g;
  CUstream s;
  uint64_t t0, t1, q0, q1, t, allowed = 0;
  const uint64_t ivl = 1000000ull; /* the default probe interval */

  if (!tu_is_simulated()) skip();
  lp = open_armed_at_once(fx, 0);
  f = tu_fx_futures(fx, 1);
  s = tu_stream();
  tu_gate_init(&g);
  tu_gate_hold(&g, s);
  TU_OK(uvcuda_future_init(&lp->ul, f));
  pk_done = pk_status = 0;
  t0 = tu_now_ns();
  q0 = simcuda_call_count("cuStreamQuery");
  TU_OK(uvcuda_future_start(f, s, NULL, on_pk)); /* armed: spin budget 0 */
  assert_int_equal(uvcuda_future_state(f), UVCUDA_FUTURE_ARMED);
  usleep(2000000);
  q1 = simcuda_call_count("cuStreamQuery");
  t1 = tu_now_ns();
  /* The shortest steps the reactor may take: a gap, less the half
   * interval by which a probe rides on an earlier wake-up. */
  for (t = 0; t < t1 - t0; allowed++) {
    uint64_t gap = t / 20 > ivl ? t / 20 : ivl;
    t += gap - ivl / 2;
  }
  /* Up to three queries a probe (a query that finds work asks again). */
  if (q1 - q0 > 3 * (allowed + 2))
    fail_msg("%llu probe queries in %.0f ms; its gaps allow %llu probes",
             (unsigned long long)(q1 - q0), (double)(t1 - t0) / 1e6,
             (unsigned long long)allowed);
  assert_true(q1 > q0);
  print_message("%llu probe queries in %.0f ms (the gaps allow %llu probes)\n",
                (unsigned long long)(q1 - q0), (double)(t1 - t0) / 1e6,
                (unsigned long long)allowed);
  tu_gate_open(&g);
  assert_int_equal(tu_run_until(&lp->uv, &pk_done, 10000), 0);
  assert_int_equal(pk_status, 0);
  TU_OK(uvcuda_future_close(f, NULL));
  tu_run(&lp->uv, 5000);
  tu_stream_destroy(s);
  tu_gate_free(&g);
  tu_fx_close(lp);
}

/* ---- several loops share the one reactor ---- */

typedef struct {
  int done, errors;
} share_t;

static void on_share(uvcuda_future_t *f, int status) {
  share_t *x = f->data;
  x->done++;
  if (status) x->errors++;
}

static void *share_thread(void *arg) {
  share_t *x = arg;
  uv_loop_t uv;
  uvcuda_loop_t ul;
  uvcuda_options_t o;
  enum { N = 5000, S = 4 };
  uvcuda_future_t *fs = calloc(N, sizeof(*fs));
  CUstream s[S];
  int i;

  tu.cuCtxSetCurrent(tu_ctx);
  uvcuda_options_init(&o);
  o.completion = UVCUDA_COMPLETION_REACTOR;
  o.spin_budget_us = 0;
  uv_loop_init(&uv);
  if (fs == NULL || uvcuda_loop_init(&uv, &ul, &o) != 0) {
    x->errors = -1;
    free(fs);
    return NULL;
  }
  for (i = 0; i < S; i++) tu.cuStreamCreate(&s[i], CU_STREAM_NON_BLOCKING);
  for (i = 0; i < N; i++) {
    uvcuda_future_init(&ul, &fs[i]);
    fs[i].data = x;
    if (uvcuda_future_start(&fs[i], s[i % S], NULL, on_share) != 0) x->errors++;
    if (i % 500 == 0) uv_run(&uv, UV_RUN_NOWAIT);
  }
  uv_run(&uv, UV_RUN_DEFAULT);
  for (i = 0; i < N; i++) uvcuda_future_close(&fs[i], NULL);
  uv_run(&uv, UV_RUN_DEFAULT);
  if (uvcuda_loop_close(&ul, NULL) != 0) x->errors++;
  uv_run(&uv, UV_RUN_DEFAULT);
  if (uv_loop_close(&uv) != 0) x->errors++;
  for (i = 0; i < S; i++) {
    tu.cuStreamSynchronize(s[i]);
    tu.cuStreamDestroy(s[i]);
  }
  free(fs);
  return NULL;
}

static void loops_share_the_reactor(void **state) {
  share_t x[4];
  pthread_t t[4];
  int i;
  (void)state;
  for (i = 0; i < 4; i++) {
    memset(&x[i], 0, sizeof(x[i]));
    assert_int_equal(pthread_create(&t[i], NULL, share_thread, &x[i]), 0);
  }
  for (i = 0; i < 4; i++) {
    pthread_join(t[i], NULL);
    assert_int_equal(x[i].errors, 0);
    assert_int_equal(x[i].done, 5000);
  }
  assert_false(uvcuda__reactor_running());
}

/* ---- reactor lifetime ---- */

/* Loops opened while the last one closes (the reactor thread being
 * joined) each get a running reactor: every future completes. */
typedef struct {
  int rounds, done, errors;
  volatile int fired; /* this round's callback ran */
  CUstream s;
} churn_t;

static void on_churn(uvcuda_future_t *f, int status) {
  churn_t *c = f->data;
  if (status != 0) c->errors++;
  c->done++;
  c->fired = 1;
}

static void *churn_thread(void *arg) {
  churn_t *c = arg;
  uvcuda_options_t o;
  uv_loop_t uv;
  int i;
  tu.cuCtxSetCurrent(tu_ctx);
  uvcuda_options_init(&o);
  o.completion = UVCUDA_COMPLETION_REACTOR;
  o.spin_budget_us = 0; /* armed at once: only the reactor completes it */
  /* One libuv loop per thread: libuv closes its descriptors with a raw
   * syscall that TSan does not see, so loops made and closed on several
   * threads at once would reuse descriptors under its eyes (a false
   * race in uv_pipe). The reactor's users come and go with the uvcuda
   * contexts alone. */
  if (uv_loop_init(&uv) != 0) {
    c->errors++;
    return NULL;
  }
  for (i = 0; i < c->rounds; i++) {
    uvcuda_loop_t ul;
    uvcuda_future_t f;
    if (uvcuda_loop_init(&uv, &ul, &o) != 0) {
      c->errors++;
      break;
    }
    uvcuda_future_init(&ul, &f);
    f.data = c;
    c->fired = 0;
    if (uvcuda_future_start(&f, c->s, NULL, on_churn) != 0 ||
        tu_run_until(&uv, &c->fired, 10000) != 0)
      c->errors++;
    uvcuda_future_close(&f, NULL);
    uv_run(&uv, UV_RUN_DEFAULT);
    if (uvcuda_loop_close(&ul, NULL) != 0) c->errors++;
    uv_run(&uv, UV_RUN_DEFAULT);
  }
  if (uv_loop_close(&uv) != 0) c->errors++;
  return NULL;
}

static void a_loop_opened_while_the_last_closes_gets_a_reactor(void **state) {
  enum { T = 3, ROUNDS = 150 };
  churn_t c[T];
  pthread_t t[T];
  int i;
  (void)state;
  for (i = 0; i < T; i++) {
    memset(&c[i], 0, sizeof(c[i]));
    c[i].rounds = ROUNDS;
    c[i].s = tu_stream();
    assert_int_equal(pthread_create(&t[i], NULL, churn_thread, &c[i]), 0);
  }
  for (i = 0; i < T; i++) pthread_join(t[i], NULL);
  for (i = 0; i < T; i++) {
    assert_int_equal(c[i].errors, 0);
    assert_int_equal(c[i].done, ROUNDS);
  }
  assert_false(uvcuda__reactor_running());
}

static void reactor_runs_while_loops_need_it(void **state) {
  tu_fx_t *fx = tu_fx(state);
  tu_fx_loop_t *a, *b, *p;
  assert_false(uvcuda__reactor_running());
  p = tu_fx_open_with(fx, UVCUDA_COMPLETION_POLL, 20);
  assert_false(uvcuda__reactor_running()); /* POLL needs none */
  a = tu_fx_open_with(fx, UVCUDA_COMPLETION_AUTO, 20);
  assert_true(uvcuda__reactor_running());
  b = tu_fx_open_with(fx, UVCUDA_COMPLETION_HOSTFN, 20);
  tu_fx_close(a);
  assert_true(uvcuda__reactor_running());
  tu_fx_close(b);
  assert_false(uvcuda__reactor_running()); /* joined */
  tu_fx_close(p);
  /* And it comes back for the next loop. */
  a = tu_fx_open_with(fx, UVCUDA_COMPLETION_REACTOR, 20);
  assert_true(uvcuda__reactor_running());
  tu_fx_close(a);
  assert_false(uvcuda__reactor_running());
}

/* ---- an arm wakes a reactor that sleeps in its back-off ---- */

/* The reactor's timed waits (the bell's, wrapped above). Set aw_stretch
 * and the next wait the reactor asks to last AW_FAR_NS or more lasts a
 * second longer instead: only a ring ends it sooner. aw_until: when that
 * wait was asked to end. */
#define AW_FAR_NS 1000000ull
static atomic_int aw_stretch, aw_asleep, aw_woken;
static _Atomic uint64_t aw_until;

static int timed_wait_hook(struct uvcuda__bell *b, pthread_mutex_t *m,
                           uint64_t at) {
  int timed_out;
  if (!atomic_load(&aw_stretch) || at < tu_now_ns() + AW_FAR_NS)
    return __real_uvcuda__bell_wait(b, m, at);
  atomic_store(&aw_stretch, 0);
  atomic_store(&aw_until, at);
  atomic_store(&aw_asleep, 1); /* m is held: the wait has not begun yet */
  timed_out = __real_uvcuda__bell_wait(b, m, at + 1000000000ull);
  atomic_store(&aw_asleep, 0);
  if (!timed_out) atomic_fetch_add(&aw_woken, 1);
  return timed_out;
}

#define AW_N 21

static int aw_done, aw_status;
static tu_gate_t aw_gate;

static void on_aw(uvcuda_future_t *f, int status) {
  (void)f;
  aw_done++;
  if (status) aw_status = status;
}

static int op_gate(uvcuda_future_t *f, uvcuda_stream_t s) {
  (void)f;
  tu_gate_hold(&aw_gate, s);
  return 0;
}

/* Waits for *v to reach want (another thread moves it); fails after 10 s. */
static void aw_wait(atomic_int *v, int want, const char *what, int i) {
  uint64_t end = tu_now_ns() + 10000000000ull;
  while (atomic_load(v) != want) {
    if (tu_now_ns() > end) fail_msg("arm %d: %s", i, what);
    usleep(100);
  }
}

/* A future that never completes keeps the reactor from parking; once it
 * has waited long, its back-off (100 % of the time waited) lets the
 * reactor sleep until the next probe, up to 2 ms ahead. The test
 * stretches such a sleep (one asked to last 1 ms or more) to an hour,
 * then arms a future: its first look (the floor, at most 400 µs ahead)
 * comes before the reactor's wake-up, so the arm must end that sleep (a
 * signal, not the timeout), else the future would wait for the sleep. An
 * arm that came too late to be sure of that (a slow machine: the asked end
 * less than 500 µs ahead) does not count (its sleep ends a second late);
 * most must count. The
 * future's work is a gate opened after the wake; the reactor must still
 * see it. (What the wake-up is worth in time is measured by the bench:
 * section wake.) */
static void arm_wakes_a_sleeping_reactor(void **state) {
  tu_fx_t *fx = tu_fx(state);
  tu_fx_loop_t *lp;
  uvcuda_options_t o;
  uvcuda_future_t *held = tu_fx_futures(fx, 1), *f = tu_fx_futures(fx, 1);
  tu_gate_t g;
  CUstream hs, s;
  int i, woken, counted = 0;

  uvcuda_options_init(&o);
  o.completion = UVCUDA_COMPLETION_REACTOR;
  o.spin_budget_us = 0; /* armed at once: only the reactor can see it */
  o.reactor_backoff_pct = 100;
  o.reactor_sleep_max_us = 100000;
  o.probe_interval_us = 2000;
  o.reactor_spin_us = 1000000; /* it busy-polls: each wait is a few looks */
  lp = tu_fx_open(fx, &o);
  hs = tu_stream();
  s = tu_stream();
  tu_gate_init(&g);
  tu_gate_init(&aw_gate);
  tu_gate_hold(&g, hs);
  TU_OK(uvcuda_future_init(&lp->ul, held));
  TU_OK(uvcuda_future_init(&lp->ul, f));
  aw_done = aw_status = 0;
  TU_OK(uvcuda_future_start(held, hs, NULL, on_aw));
  usleep(10000); /* its back-off steps reach the probe interval */
  for (i = 0; i < AW_N; i++) {
    uint64_t armed;
    uv_run(&lp->uv, UV_RUN_NOWAIT);
    atomic_store(&aw_stretch, 1);
    aw_wait(&aw_asleep, 1, "the reactor never went to sleep", i);
    woken = atomic_load(&aw_woken);
    TU_OK(uvcuda_future_start(f, s, op_gate, on_aw));
    uv_run(&lp->uv, UV_RUN_NOWAIT); /* spin budget 0: armed here */
    armed = tu_now_ns();
    assert_int_equal(uvcuda_future_state(f), UVCUDA_FUTURE_ARMED);
    if (armed + 500000ull < atomic_load(&aw_until)) {
      counted++;
      aw_wait(&aw_woken, woken + 1,
              "the arm did not wake the sleeping reactor", i);
    }
    assert_int_equal(aw_done, i); /* the gate is still closed */
    tu_gate_open(&aw_gate);
    {
      uint64_t end = tu_now_ns() + 10000000000ull;
      while (aw_done < i + 1) {
        if (tu_now_ns() > end) fail_msg("future %d lost", i);
        uv_run(&lp->uv, UV_RUN_NOWAIT);
      }
    }
  }
  if (counted < AW_N / 2)
    fail_msg("only %d of %d arms came while the reactor slept far ahead",
             counted, AW_N);
  assert_int_equal(aw_status, 0);
  tu_gate_open(&g);
  TU_OK(uvcuda_future_close(held, NULL));
  TU_OK(uvcuda_future_close(f, NULL));
  tu_run(&lp->uv, 5000);
  assert_int_equal(aw_done, AW_N + 1);
  tu_stream_destroy(hs);
  tu_stream_destroy(s);
  tu_gate_free(&g);
  tu_gate_free(&aw_gate);
  tu_fx_close(lp);
}

/* ---- host-task sync modes on a driver without them ---- */

static void host_task_modes_need_13_2(void **state) {
  tu_fx_t *fx = tu_fx(state);
  uvcuda_driver_info_t info;
  tu_fx_loop_t *lp;
  uvcuda_options_t o;
  TU_OK(uvcuda_driver_info(&info));
  if (info.driver_version >= 13020) skip();
  assert_int_equal(info.host_task_sync, 0);
  lp = tu_fx_open_uv(fx);
  uvcuda_options_init(&o);
  o.completion = UVCUDA_COMPLETION_HOSTFN_SPIN;
  assert_int_equal(uvcuda_loop_init(&lp->uv, &lp->ul, &o), UVCUDA_ENOTSUP);
  o.completion = UVCUDA_COMPLETION_HOSTFN_BLOCK;
  assert_int_equal(uvcuda_loop_init(&lp->uv, &lp->ul, &o), UVCUDA_ENOTSUP);
  setenv("UVCUDA_COMPLETION", "hostfn-spin", 1);
  uvcuda_options_init(&o);
  assert_int_equal(uvcuda_loop_init(&lp->uv, &lp->ul, &o), UVCUDA_ENOTSUP);
  unsetenv("UVCUDA_COMPLETION");
  assert_string_equal(uvcuda_err_name(UVCUDA_ENOTSUP), "UVCUDA_ENOTSUP");
  assert_int_equal(tu_fx_close_uv(lp), 0);
}

/* ---- a fault completes every pending future, before their work ends ---- */

#define F_STREAMS 8
#define F_N 100

static int f_done, f_bad;
static uint64_t f_last_ns;

/* The GPU takes a while (over 100 ms seen on the H200) from the faulting
 * launch until the driver reports the error at all; uvcuda's bound counts
 * from the moment the error is observable, which this thread records. */
static CUstream f_stream;
static uint64_t f_seen_ns;
static void *watch_fault(void *arg) {
  uint64_t end = tu_now_ns() + 20000000000ull;
  CUresult r;
  (void)arg;
  tu.cuCtxSetCurrent(tu_ctx);
  while (tu_now_ns() < end) {
    r = tu.cuStreamQuery(f_stream);
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY) {
      __atomic_store_n(&f_seen_ns, tu_now_ns(), __ATOMIC_RELEASE);
      break;
    }
  }
  return NULL;
}
static void on_faulted(uvcuda_future_t *f, int status) {
  (void)f;
  f_done++;
  if (uvcuda_cuda_result(status) != CUDA_ERROR_ILLEGAL_ADDRESS) f_bad++;
  f_last_ns = tu_now_ns();
}

static int c_fault(void *arg) {
  uvcuda_completion_t c = (uvcuda_completion_t)(uintptr_t)arg;
  uv_loop_t uv;
  uvcuda_loop_t ul;
  uvcuda_options_t o;
  uvcuda_future_t *fs;
  CUstream s[F_STREAMS];
  uint64_t t0;
  double ms;
  int i, rc;

  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 1); /* own queue per stream */
  if ((rc = tu_setup(want_real)) != 0) return rc == 77 ? 77 : 10;
  fs = calloc(F_N, sizeof(*fs));
  uvcuda_options_init(&o);
  o.completion = c;
  uv_loop_init(&uv);
  if (uvcuda_loop_init(&uv, &ul, &o) != 0) return 11;
  for (i = 0; i < F_STREAMS; i++) {
    s[i] = tu_stream();
    /* 60 s of work, past the watchdog below: only the fault can end
     * these futures in time. (Not a stream wait: on a GPU, waits on
     * streams sharing a hardware queue with the faulting stream would hold
     * the fault back.) */
    tu_sleep(s[i], 60000ull * 1000 * 1000);
  }
  for (i = 0; i < F_N; i++) {
    uvcuda_future_init(&ul, &fs[i]);
    if (uvcuda_future_start(&fs[i], s[i % F_STREAMS], NULL, on_faulted) != 0) return 12;
  }
  uv_run(&uv, UV_RUN_NOWAIT);
  if (f_done != 0) return 13;
  {
    pthread_t wt;
    f_stream = tu_stream();
    t0 = tu_now_ns();
    tu_fault(f_stream);
    pthread_create(&wt, NULL, watch_fault, NULL);
    rc = tu_run_bounded(&uv, 30000); /* the futures waited for their work */
    pthread_join(wt, NULL);
  }
  if (rc != 0) {
    fprintf(stderr, "fault: %d of %d completed within 30 s\n", f_done, F_N);
    return 21;
  }
  if (f_seen_ns == 0) return 20;
  if (f_done != F_N) {
    fprintf(stderr, "fault: %d of %d completed\n", f_done, F_N);
    return 14;
  }
  if (f_bad != 0) return 15;
  ms = (double)(f_last_ns - (f_seen_ns < f_last_ns ? f_seen_ns : f_last_ns)) / 1e6;
  fprintf(stderr, "fault (%s): %d futures failed with CUDA_ERROR_ILLEGAL_ADDRESS "
                  "%.2f ms after the error was observable (%.2f ms after the "
                  "faulting launch)\n",
          uvcuda_completion_name(c), F_N, ms, (double)(f_last_ns - t0) / 1e6);
  {
    uvcuda_stats_t st;
    uvcuda_loop_stats(&ul, &st);
    if (st.faults < 1 || st.failed != F_N) return 17;
  }
  for (i = 0; i < F_N; i++) uvcuda_future_close(&fs[i], NULL);
  uv_run(&uv, UV_RUN_DEFAULT);
  if (uvcuda_loop_close(&ul, NULL) != 0) return 18;
  uv_run(&uv, UV_RUN_DEFAULT);
  if (uv_loop_close(&uv) != 0) return 19;
  free(fs);
  return 0;
}

static void fault_fails_all_pending(void **state) {
  int rc = tu_in_child(c_fault, (void *)tu_fx_prestate(state));
  if (rc == 77) skip();
  if (rc != 0) fail_msg("child failed with status %d", rc);
}

/* ---- a loop is rung only once its async handle exists ---- */

/* The library's uv_async_init (this test links with
 * -Wl,--wrap=uv_async_init). With ai_stall set, the next call first makes
 * the reactor ring every loop it knows (a fault, found on the primary
 * context's record: the fault epoch moves) and waits until it has rung
 * ai_ring, a loop that is already open. A loop still inside
 * uvcuda_loop_init, whose handle this call has not made yet, must not be
 * rung (uv_async_send on it crashed the 4-loop fuzzer once in ~500 runs). */
static atomic_int ai_stall;
static struct uvcuda__loop *ai_ring;
static int ai_rung;

int __real_uv_async_init(uv_loop_t *loop, uv_async_t *h, uv_async_cb cb);
int __wrap_uv_async_init(uv_loop_t *loop, uv_async_t *h, uv_async_cb cb);
int __wrap_uv_async_init(uv_loop_t *loop, uv_async_t *h, uv_async_cb cb) {
  if (atomic_exchange(&ai_stall, 0)) {
    struct uvcuda__context *x;
    uint64_t end = tu_now_ns() + 10000000000ull;
    atomic_store(&ai_ring->rc.rang, 0);
    /* A fault that stays (every query says so) until uvcuda has it. */
    simcuda_fail("cuStreamQuery", CUDA_ERROR_LAUNCH_FAILED, -1);
    if (uvcuda__context_get(tu_ctx, &x) == 0) uvcuda__context_query(x);
    simcuda_fail("cuStreamQuery", CUDA_SUCCESS, 0);
    while (!(ai_rung = atomic_load(&ai_ring->rc.rang)) && tu_now_ns() < end)
      usleep(100);
    usleep(1000); /* the reactor goes on ringing the loops after it */
  }
  return __real_uv_async_init(loop, h, cb);
}

static void on_ai(uvcuda_future_t *f, int status) { *(int *)f->data = status ? status : 1; }

static int c_ring_before_async(void *arg) {
  uv_loop_t uv1, uv2;
  uvcuda_loop_t ul1, ul2;
  uvcuda_options_t o;
  uvcuda_future_t f;
  tu_gate_t g;
  CUstream s;
  int rc, got = 0;
  (void)arg;
  tu_backtrace_on_crash();
  if ((rc = tu_setup(0)) != 0) return rc;
  uvcuda_options_init(&o);
  o.completion = UVCUDA_COMPLETION_REACTOR;
  o.spin_budget_us = 0;
  uv_loop_init(&uv1);
  uv_loop_init(&uv2);
  if (uvcuda_loop_init(&uv1, &ul1, &o) != 0) return 10;
  /* A future the reactor watches: it runs passes, not parked. */
  s = tu_stream();
  tu_gate_init(&g);
  tu_gate_hold(&g, s);
  uvcuda_future_init(&ul1, &f);
  f.data = &got;
  if (uvcuda_future_start(&f, s, NULL, on_ai) != 0) return 11;
  uv_run(&uv1, UV_RUN_NOWAIT);
  ai_ring = ul1.internal_;
  atomic_store(&ai_stall, 1);
  rc = uvcuda_loop_init(&uv2, &ul2, &o);
  if (atomic_load(&ai_stall) != 0) return 12; /* the wrap never ran */
  if (!ai_rung) return 13;                    /* no ring came */
  if (rc != 0) return 14;
  /* The fault is only in uvcuda's record: the future fails with it, or
   * completes if its marker is seen first; either way it calls back. */
  tu_gate_open(&g);
  if (tu_run_until(&uv1, &got, 10000) != 0) return 15;
  uvcuda_future_close(&f, NULL);
  uv_run(&uv1, UV_RUN_DEFAULT);
  if (uvcuda_loop_close(&ul1, NULL) != 0 || uvcuda_loop_close(&ul2, NULL) != 0) return 17;
  uv_run(&uv1, UV_RUN_DEFAULT);
  uv_run(&uv2, UV_RUN_DEFAULT);
  if (uv_loop_close(&uv1) != 0 || uv_loop_close(&uv2) != 0) return 18;
  tu_gate_free(&g);
  tu_teardown();
  return 0;
}

/* In a child: the primary context's record stays faulted. */
static void a_loop_is_rung_only_once_its_handle_exists(void **state) {
  int rc;
  (void)state;
  if (want_real) skip(); /* the simulation stages the failed query */
  rc = tu_in_child(c_ring_before_async, NULL);
  if (rc == 77) skip();
  if (rc != 0) fail_msg("child failed with status %d (-1: a signal)", rc);
}

static int c_probe(void *arg) {
  (void)arg;
  return tu_setup(want_real);
}

/* Every case in a fixture; a failed one may have left the reactor's next
 * wait stretched (arm_wakes_a_sleeping_reactor). */
static int teardown(void **state) {
  atomic_store(&aw_stretch, 0);
  return tu_fx_teardown(state);
}

#define CASE(fn, prestate) \
  cmocka_unit_test_prestate_setup_teardown(fn, tu_fx_setup, teardown, prestate)

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      CASE(reactor_runs_while_loops_need_it, NULL),
      CASE(host_task_modes_need_13_2, NULL),
      CASE(hundred_thousand_in_flight, NULL),
      CASE(ten_thousand_in_flight_hostfn, NULL),
      CASE(park_unpark_races, (void *)0),
      CASE(park_unpark_races, (void *)20),
      CASE(with_nothing_armed_the_reactor_parks, NULL),
      CASE(a_wait_that_never_ends_is_probed_ever_less, NULL),
      CASE(arm_wakes_a_sleeping_reactor, NULL),
      CASE(loops_share_the_reactor, NULL),
      CASE(a_loop_opened_while_the_last_closes_gets_a_reactor, NULL),
  };
  const struct CMUnitTest fault_tests[] = {
      CASE(fault_fails_all_pending, (void *)UVCUDA_COMPLETION_AUTO),
      CASE(fault_fails_all_pending, (void *)UVCUDA_COMPLETION_HOSTFN),
      CASE(fault_fails_all_pending, (void *)UVCUDA_COMPLETION_POLL),
      CASE(a_loop_is_rung_only_once_its_handle_exists, NULL),
  };
  int rc, fails = 0;

  want_real = argc > 1 && strcmp(argv[1], "--gpu") == 0;
  /* Faults first, in children, before this process touches the driver;
   * a child also tells whether there is a driver to test at all. */
  rc = tu_in_child(c_probe, NULL);
  if (rc != 0) return rc;
  fails += cmocka_run_group_tests_name("reactor/fault", fault_tests, NULL, NULL);
  rc = tu_setup(want_real);
  if (rc != 0) return fails ? 1 : rc;
  fails += cmocka_run_group_tests_name("reactor", tests, NULL, NULL);
  tu_teardown();
  return fails ? 1 : 0;
}
