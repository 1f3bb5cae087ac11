/* Device futures on a libuv loop: states, spin, precise completion, order,
 * reuse, errors, capture, threads, close. Built once, run in the `sim`
 * suite (simulated driver) and the `gpu` suite (real driver; skipped, exit
 * 77, where there is none). Every case runs under each strategy given. */
#include "fixture.h"

#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int want_real;

/* Every case runs in a fixture (test/common/fixture.h); the prestate is a
 * tu_fx_spec_t: the strategy and the spin budget of loop 0, which setup
 * opens (cases that open their own loops get no loop from setup). */
static uvcuda_completion_t strategy_of(void **state) {
  return ((const tu_fx_spec_t *)tu_fx_prestate(state))->completion;
}

/* Closes f, then the loop. */
static void env_close_keep(tu_fx_loop_t *e, uvcuda_future_t *f) {
  TU_OK(uvcuda_future_close(f, NULL));
  tu_run(&e->uv, 5000);
  tu_fx_close(e);
}

static uvcuda_stats_t stats_of(tu_fx_loop_t *e) {
  uvcuda_stats_t s;
  TU_OK(uvcuda_loop_stats(&e->ul, &s));
  return s;
}

/* ---- common callbacks: tu_rec_done, tu_rec_closed ---- */

static uint64_t op_ns;
static int op_sleep(uvcuda_future_t *f, uvcuda_stream_t s) {
  (void)f;
  tu_sleep((CUstream)s, op_ns);
  return 0;
}

static void close_future(tu_fx_loop_t *e, uvcuda_future_t *f) {
  tu_rec_t *r = f->data;
  int before = r->closed;
  TU_OK(uvcuda_future_close(f, tu_rec_closed));
  tu_run(&e->uv, 5000);
  assert_int_equal(r->closed, before + 1);
}

/* ---- states and spin ---- */

static void short_op_completes_while_spinning(void **state) {
  tu_fx_t *fx = tu_fx(state);
  tu_fx_loop_t *e = tu_fx_loop(state, 0);
  uvcuda_future_t *f = tu_fx_futures(fx, 1);
  tu_rec_t *r = tu_fx_rec(fx);
  CUstream s;
  uvcuda_stats_t st;

  /* A generous budget (CASES): the simulation's worker threads wake in
   * tens of µs. */
  s = tu_stream();
  f->data = r; /* as libuv's handles: init leaves data alone */
  TU_OK(uvcuda_future_init(&e->ul, f));
  assert_ptr_equal(f->data, r);
  op_ns = 1000;
  TU_OK(uvcuda_future_start(f, s, op_sleep, tu_rec_done));
  assert_int_equal(uvcuda_future_state(f), UVCUDA_FUTURE_SPINNING);
  assert_int_equal(r->calls, 0); /* never from inside start */
  tu_run(&e->uv, 5000);
  assert_int_equal(r->calls, 1);
  assert_int_equal(r->status, 0);
  assert_int_equal(uvcuda_future_state(f), UVCUDA_FUTURE_IDLE);
  st = stats_of(e);
  assert_int_equal(st.completed_spin, 1);
  assert_int_equal(st.started, 1);
  close_future(e, f);
  tu_stream_destroy(s);
  tu_fx_close(e);
}

static void long_op_completes_armed(void **state) {
  tu_fx_t *fx = tu_fx(state);
  tu_fx_loop_t *e = tu_fx_loop(state, 0);
  uvcuda_future_t *f = tu_fx_futures(fx, 1);
  tu_rec_t *r = tu_fx_rec(fx);
  CUstream s;
  uvcuda_stats_t st;
  uvcuda_completion_t c = strategy_of(state);
  uint64_t t0;

  s = tu_stream();
  TU_OK(uvcuda_future_init(&e->ul, f));
  f->data = r;
  op_ns = 30 * 1000 * 1000; /* 30 ms: well past the spin budget */
  t0 = tu_now_ns();
  TU_OK(uvcuda_future_start(f, s, op_sleep, tu_rec_done));
  tu_run(&e->uv, 10000);
  assert_int_equal(r->calls, 1);
  assert_int_equal(r->status, 0);
  /* The kernel times itself with %globaltimer, which need not tick at
   * exactly the host clock's rate (seen about 5% fast on the H200 host). */
  assert_true(r->t_ns - t0 >= 24 * 1000 * 1000ull);
  st = stats_of(e);
  assert_int_equal(st.completed_spin, 0);
  if (c == UVCUDA_COMPLETION_HOSTFN) {
    assert_int_equal(st.completed_hostfn, 1);
    assert_true(st.hostfn_wakeups >= 1);
  } else if (c == UVCUDA_COMPLETION_POLL) {
    assert_int_equal(st.completed_poll, 1);
  } else {
    assert_int_equal(st.completed_reactor, 1);
    assert_true(st.reactor_wakeups >= 1);
  }
  close_future(e, f);
  tu_stream_destroy(s);
  tu_fx_close(e);
}

static void no_spin_goes_straight_to_armed(void **state) {
  tu_fx_t *fx = tu_fx(state);
  tu_fx_loop_t *e = tu_fx_loop(state, 0);
  uvcuda_future_t *f = tu_fx_futures(fx, 1);
  tu_rec_t *r = tu_fx_rec(fx);
  CUstream s;
  tu_gate_t g;

  assert_int_equal(uvcuda_loop_spin_budget_ns(&e->ul), 0);
  s = tu_stream();
  tu_gate_init(&g);
  tu_gate_hold(&g, s);
  TU_OK(uvcuda_future_init(&e->ul, f));
  f->data = r;
  TU_OK(uvcuda_future_start(f, s, NULL, tu_rec_done));
  assert_int_equal(uvcuda_future_state(f), UVCUDA_FUTURE_ARMED);
  assert_true(uvcuda_future_is_active(f));
  uv_run(&e->uv, UV_RUN_NOWAIT);
  assert_int_equal(r->calls, 0);
  tu_gate_open(&g);
  tu_run(&e->uv, 5000);
  assert_int_equal(r->calls, 1);
  assert_int_equal(r->status, 0);
  assert_false(uvcuda_future_is_active(f));
  close_future(e, f);
  tu_stream_destroy(s);
  tu_gate_free(&g);
  tu_fx_close(e);
}

/* The outcome counters add up: each callback is counted once, as what it
 * got. Two futures complete in the same pass; the first one's callback
 * closes the second, already COMPLETE: it gets UVCUDA_ECANCELED, and is
 * counted as cancelled, not as completed too. */
static uvcuda_future_t *close_in_cb;
static int close_in_cb_state;
static void done_then_close(uvcuda_future_t *f, int status) {
  tu_rec_done(f, status);
  close_in_cb_state = (int)uvcuda_future_state(close_in_cb);
  TU_OK(uvcuda_future_close(close_in_cb, NULL));
}

static uint64_t outcomes(const uvcuda_stats_t *st) {
  return st->completed_spin + st->completed_reactor + st->completed_hostfn +
         st->completed_poll + st->failed + st->cancelled;
}

static void wait_armed(tu_fx_loop_t *e, uvcuda_future_t *f) {
  while (uvcuda_future_state(f) == UVCUDA_FUTURE_SPINNING)
    uv_run(&e->uv, UV_RUN_NOWAIT);
  assert_int_equal(uvcuda_future_state(f), UVCUDA_FUTURE_ARMED);
}

/* Two initialised futures (recorders r0, r1) and a new stream held by g. */
static CUstream gated_pair(tu_fx_loop_t *e, tu_gate_t *g, uvcuda_future_t *f,
                           tu_rec_t *r0, tu_rec_t *r1) {
  CUstream s = tu_stream();
  tu_gate_init(g);
  tu_gate_hold(g, s);
  TU_OK(uvcuda_future_init(&e->ul, &f[0]));
  TU_OK(uvcuda_future_init(&e->ul, &f[1]));
  f[0].data = r0;
  f[1].data = r1;
  return s;
}

static void each_callback_counted_once(void **state) {
  tu_fx_t *fx = tu_fx(state);
  tu_fx_loop_t *e = tu_fx_loop(state, 0);
  uvcuda_future_t *f = tu_fx_futures(fx, 2);
  tu_rec_t *r0 = tu_fx_rec(fx), *r1 = tu_fx_rec(fx);
  uvcuda_stats_t st;
  CUstream s;
  tu_gate_t g;

  s = gated_pair(e, &g, f, r0, r1);
  close_in_cb = &f[1];
  TU_OK(uvcuda_future_start(&f[0], s, NULL, done_then_close));
  TU_OK(uvcuda_future_start(&f[1], s, NULL, tu_rec_done));
  wait_armed(e, &f[0]);
  wait_armed(e, &f[1]);
  /* Both done before the loop looks again: one pass finds both. */
  tu_gate_open(&g);
  TU_CU(tu.cuStreamSynchronize(s));
  tu_run(&e->uv, 5000);
  assert_int_equal(r0->calls, 1);
  assert_int_equal(r0->status, 0);
  assert_int_equal(close_in_cb_state, UVCUDA_FUTURE_COMPLETE);
  assert_int_equal(r1->calls, 1);
  assert_int_equal(r1->status, UVCUDA_ECANCELED);
  st = stats_of(e);
  assert_int_equal(st.started, 2);
  assert_int_equal(st.cancelled, 1);
  assert_int_equal(st.completed_spin + st.completed_reactor + st.completed_hostfn +
                       st.completed_poll,
                   1);
  assert_int_equal(outcomes(&st), st.started);
  close_future(e, &f[0]);
  tu_stream_destroy(s);
  tu_gate_free(&g);
  tu_fx_close(e);
}

/* A future found done by the loop's own poll (another future's spin on its
 * stream), before any wake-up: counted as seen by the loop, never as a
 * reactor's or host function's delivery (a POLL loop has no reactor). */
static void loop_found_completion_is_not_a_wakeup(void **state) {
  tu_fx_t *fx = tu_fx(state);
  tu_fx_loop_t *e = tu_fx_loop(state, 0);
  uvcuda_future_t *f = tu_fx_futures(fx, 2);
  tu_rec_t *r0 = tu_fx_rec(fx), *r1 = tu_fx_rec(fx);
  uvcuda_completion_t c = strategy_of(state);
  uvcuda_stats_t st;
  CUstream s;
  tu_gate_t g;

  s = gated_pair(e, &g, f, r0, r1);
  TU_OK(uvcuda_future_start(&f[0], s, NULL, tu_rec_done));
  wait_armed(e, &f[0]);
  tu_gate_open(&g);
  TU_CU(tu.cuStreamSynchronize(s));
  /* f[1] spins on the same stream (a budget far beyond the simulation's
   * marker): libuv runs the idle handle (the spin) before it polls for the
   * reactor's or host function's ring. */
  TU_OK(uvcuda_future_start(&f[1], s, NULL, tu_rec_done));
  tu_run(&e->uv, 5000);
  assert_int_equal(r0->calls, 1);
  assert_int_equal(r1->calls, 1);
  assert_int_equal(r0->status, 0);
  assert_int_equal(r1->status, 0);
  st = stats_of(e);
  assert_int_equal(st.completed_reactor, 0);
  assert_int_equal(st.completed_hostfn, 0);
  if (c == UVCUDA_COMPLETION_POLL) {
    assert_int_equal(st.completed_poll, 1); /* f[0]: the POLL loop's own */
    assert_int_equal(st.completed_spin, 1);
  } else {
    assert_int_equal(st.completed_spin, 2);
  }
  assert_int_equal(outcomes(&st), st.started);
  close_future(e, &f[0]);
  close_future(e, &f[1]);
  tu_stream_destroy(s);
  tu_gate_free(&g);
  tu_fx_close(e);
}

/* Two futures (recorders r[0], r[1]), each on a stream of its own with a
 * gate (not held). */
typedef struct {
  uvcuda_future_t *f;
  tu_rec_t *r[2];
  CUstream s[2];
  tu_gate_t g[2];
} two_t;

static void two_open(tu_fx_t *fx, tu_fx_loop_t *e, two_t *t) {
  int i;
  t->f = tu_fx_futures(fx, 2);
  for (i = 0; i < 2; i++) {
    t->r[i] = tu_fx_rec(fx);
    t->s[i] = tu_stream();
    tu_gate_init(&t->g[i]);
    TU_OK(uvcuda_future_init(&e->ul, &t->f[i]));
    t->f[i].data = t->r[i];
  }
}

static void two_close(tu_fx_loop_t *e, two_t *t) {
  int i;
  for (i = 0; i < 2; i++) {
    close_future(e, &t->f[i]);
    tu_stream_destroy(t->s[i]);
    tu_gate_free(&t->g[i]);
  }
}

/* While one future spins (the loop's idle handle runs, so the loop never
 * sleeps), another, armed, is done: it is delivered as the strategy
 * delivers it, and the reactor wakes nobody, since a spinning loop looks
 * at the reactor's news on its own each pass. The budget is the longest
 * there is (1 s): f[1] still spins when f[0] is delivered. */
static void a_spinning_loop_is_not_rung(void **state) {
  tu_fx_t *fx = tu_fx(state);
  tu_fx_loop_t *e = tu_fx_loop(state, 0);
  uvcuda_completion_t c = strategy_of(state);
  uvcuda_stats_t st0, st;
  two_t t;

  two_open(fx, e, &t);
  tu_gate_hold(&t.g[0], t.s[0]);
  tu_gate_hold(&t.g[1], t.s[1]);
  TU_OK(uvcuda_future_start(&t.f[0], t.s[0], NULL, tu_rec_done));
  wait_armed(e, &t.f[0]);
  TU_OK(uvcuda_future_start(&t.f[1], t.s[1], NULL, tu_rec_done));
  st0 = stats_of(e);
  tu_gate_open(&t.g[0]);
  while (t.r[0]->calls == 0 &&
         uvcuda_future_state(&t.f[1]) == UVCUDA_FUTURE_SPINNING)
    uv_run(&e->uv, UV_RUN_NOWAIT);
  assert_int_equal(t.r[0]->calls, 1);
  assert_int_equal(t.r[0]->status, 0);
  assert_int_equal(uvcuda_future_state(&t.f[1]), UVCUDA_FUTURE_SPINNING);
  st = stats_of(e);
  assert_int_equal(st.reactor_wakeups, st0.reactor_wakeups);
  assert_int_equal(st.completed_spin, 0);
  if (c == UVCUDA_COMPLETION_HOSTFN)
    assert_int_equal(st.completed_hostfn, 1);
  else if (c == UVCUDA_COMPLETION_POLL)
    assert_int_equal(st.completed_poll, 1);
  else
    assert_int_equal(st.completed_reactor, 1);
  tu_gate_open(&t.g[1]);
  tu_run(&e->uv, 5000);
  assert_int_equal(t.r[1]->calls, 1);
  assert_int_equal(t.r[1]->status, 0);
  st = stats_of(e);
  assert_int_equal(st.completed_spin, 1);
  assert_int_equal(outcomes(&st), st.started);
  two_close(e, &t);
  tu_fx_close(e);
}

/* A loop embedded as libuv's test-embed.c runs one: poll(2) on
 * uv_backend_fd for at most uv_backend_timeout, then
 * uv_run(UV_RUN_NOWAIT). Its futures complete whether they were armed
 * alone (the fd turns readable), found while another spins (the timeout
 * is 0), or spun for. Each wait is capped at 10 s: a future whose news
 * never reaches the fd fails the case instead of hanging it. */
static void embed_run_until(tu_fx_loop_t *e, const tu_rec_t *r, int calls) {
  while (r->calls < calls) {
    struct pollfd p;
    int t = uv_backend_timeout(&e->uv), capped = t < 0 || t > 10000;
    p.fd = uv_backend_fd(&e->uv);
    p.events = POLLIN;
    p.revents = 0;
    if (poll(&p, 1, capped ? 10000 : t) == 0 && capped)
      fail_msg("10 s without news: %d of %d callbacks", r->calls, calls);
    uv_run(&e->uv, UV_RUN_NOWAIT);
  }
}

static void an_embedded_loop_completes_its_futures(void **state) {
  tu_fx_t *fx = tu_fx(state);
  tu_fx_loop_t *e = tu_fx_loop(state, 0);
  uvcuda_stats_t st;
  two_t t;

  two_open(fx, e, &t);
  /* Armed alone, then done: only the fd can tell. */
  tu_gate_hold(&t.g[0], t.s[0]);
  TU_OK(uvcuda_future_start(&t.f[0], t.s[0], NULL, tu_rec_done));
  wait_armed(e, &t.f[0]);
  tu_gate_open(&t.g[0]);
  embed_run_until(e, t.r[0], 1);
  /* Armed, and done while another spins. */
  tu_gate_hold(&t.g[0], t.s[0]);
  tu_gate_hold(&t.g[1], t.s[1]);
  TU_OK(uvcuda_future_start(&t.f[0], t.s[0], NULL, tu_rec_done));
  wait_armed(e, &t.f[0]);
  TU_OK(uvcuda_future_start(&t.f[1], t.s[1], NULL, tu_rec_done));
  tu_gate_open(&t.g[0]);
  embed_run_until(e, t.r[0], 2);
  tu_gate_open(&t.g[1]);
  embed_run_until(e, t.r[1], 1);
  assert_int_equal(t.r[0]->status, 0);
  assert_int_equal(t.r[1]->status, 0);
  st = stats_of(e);
  assert_int_equal(st.started, 3);
  assert_int_equal(outcomes(&st), 3);
  two_close(e, &t);
  tu_fx_close(e);
}

/* uvcuda_future_timing: the phases are in order, and "seen" is when the
 * strategy's wake source saw the work finish, not when it was started or
 * armed. The work is a gate opened after the future is armed; a future on
 * an idle stream completes while spinning (armed_ns 0). */
static void timing_shows_where_latency_went(void **state) {
  tu_fx_t *fx = tu_fx(state);
  tu_fx_loop_t *e = tu_fx_loop(state, 0);
  uvcuda_options_t o;
  uvcuda_future_t *f = tu_fx_futures(fx, 1);
  uvcuda_timing_t t;
  tu_rec_t *r = tu_fx_rec(fx);
  CUstream s;
  tu_gate_t g;
  uint64_t t_open;

  /* Without the option: ENOTSUP; misuse: EINVAL. */
  s = tu_stream();
  TU_OK(uvcuda_future_init(&e->ul, f));
  assert_int_equal(uvcuda_future_timing(f, &t), UVCUDA_ENOTSUP);
  assert_int_equal(uvcuda_future_timing(NULL, &t), UVCUDA_EINVAL);
  assert_int_equal(uvcuda_future_timing(f, NULL), UVCUDA_EINVAL);
  TU_OK(uvcuda_future_close(f, NULL));
  tu_run(&e->uv, 5000);
  assert_int_equal(uvcuda_future_timing(f, &t), UVCUDA_ECLOSING); /* closed */
  tu_fx_close(e);

  uvcuda_options_init(&o);
  o.completion = strategy_of(state);
  o.spin_budget_us = 0; /* armed at once */
  o.flags = UVCUDA_OPT_TIMING;
  e = tu_fx_open(fx, &o);
  TU_OK(uvcuda_future_init(&e->ul, f));
  f->data = r;
  /* api.md: before its first start, 0 with every stamp 0. */
  memset(&t, 0xa5, sizeof(t));
  TU_OK(uvcuda_future_timing(f, &t));
  assert_true(t.start_ns == 0 && t.enqueued_ns == 0 && t.armed_ns == 0 &&
              t.seen_ns == 0 && t.callback_ns == 0);
  tu_gate_init(&g);
  tu_gate_hold(&g, s);
  TU_OK(uvcuda_future_start(f, s, NULL, tu_rec_done));
  TU_OK(uvcuda_future_timing(f, &t));
  assert_true(t.start_ns > 0 && t.enqueued_ns >= t.start_ns);
  assert_true(t.armed_ns >= t.enqueued_ns);
  assert_int_equal(t.seen_ns, 0);
  assert_int_equal(t.callback_ns, 0);
  uv_run(&e->uv, UV_RUN_NOWAIT);
  usleep(2000);
  t_open = tu_now_ns();
  tu_gate_open(&g);
  tu_run(&e->uv, 5000);
  assert_int_equal(r->calls, 1);
  assert_int_equal(r->status, 0);
  TU_OK(uvcuda_future_timing(f, &t));
  if (!(t.armed_ns < t_open && t.seen_ns >= t_open &&
        t.callback_ns >= t.seen_ns && r->t_ns >= t.callback_ns))
    fail_msg("phases out of order: start %llu enqueued +%lld armed +%lld "
             "opened +%lld seen +%lld callback +%lld",
             (unsigned long long)t.start_ns,
             (long long)(t.enqueued_ns - t.start_ns),
             (long long)(t.armed_ns - t.start_ns),
             (long long)(t_open - t.start_ns),
             (long long)(t.seen_ns - t.start_ns),
             (long long)(t.callback_ns - t.start_ns));
  tu_gate_free(&g);
  env_close_keep(e, f);
  tu_stream_destroy(s);
}

/* The loop keeps running only while a future is pending. */
static void count_ref(uv_handle_t *h, void *arg) {
  if (uv_has_ref(h) && !uv_is_closing(h)) ++*(int *)arg;
}

/* api.md: uvcuda's handles are "all unref'd while no future is pending"
 * (a uv_walk that checks uv_has_ref sees none of them). */
static int refd_handles(uv_loop_t *uv) {
  int n = 0;
  uv_walk(uv, count_ref, &n);
  return n;
}

static void loop_alive_only_while_pending(void **state) {
  tu_fx_t *fx = tu_fx(state);
  tu_fx_loop_t *e = tu_fx_loop(state, 0);
  uvcuda_future_t *f = tu_fx_futures(fx, 1);
  tu_rec_t *r = tu_fx_rec(fx);
  CUstream s;
  double ms;

  /* Nothing pending: nothing holds the loop (uv_run returns at once). */
  assert_false(uv_loop_alive(&e->uv));
  assert_int_equal(refd_handles(&e->uv), 0);
  tu_run(&e->uv, 1000);
  s = tu_stream();
  TU_OK(uvcuda_future_init(&e->ul, f));
  f->data = r;
  assert_false(uv_loop_alive(&e->uv)); /* an idle future does not hold it */
  assert_int_equal(refd_handles(&e->uv), 0);
  tu_run(&e->uv, 1000);
  op_ns = 20 * 1000 * 1000;
  TU_OK(uvcuda_future_start(f, s, op_sleep, tu_rec_done));
  assert_true(uv_loop_alive(&e->uv)); /* a pending one does */
  assert_true(refd_handles(&e->uv) >= 1);
  ms = tu_run(&e->uv, 5000);
  assert_int_equal(r->calls, 1);
  assert_true(ms >= 15.0); /* see long_op_completes_armed on %globaltimer */
  assert_false(uv_loop_alive(&e->uv));
  assert_int_equal(refd_handles(&e->uv), 0);
  close_future(e, f);
  tu_stream_destroy(s);
  tu_fx_close(e);
}

/* uvcuda.h: the handles uvcuda adds to a loop carry data == NULL, from
 * init to the loop context's close_cb, so that a loop owner walking its
 * handles (uvloop's close reads `data` as one of its own objects) can
 * tell them apart. Adaptive spin on: its poll handle too. */
static void ours_without_data(uv_handle_t *h, void *arg) {
  if (h->type != UV_ASYNC && h->type != UV_IDLE && h->type != UV_POLL) return;
  ++((int *)arg)[0];
  if (h->data != NULL) ++((int *)arg)[1];
}

static void assert_handles_carry_no_data(uv_loop_t *uv, int want) {
  int n[2] = {0, 0};
  uv_walk(uv, ours_without_data, n);
  assert_int_equal(n[0], want);
  assert_int_equal(n[1], 0);
}

static int closed_checked;
static void on_data_check_closed(uvcuda_loop_t *ul) {
  closed_checked++;
  /* Its handles are closed: libuv dropped them from the loop. */
  assert_handles_carry_no_data(ul->loop, 0);
}

static void handles_carry_no_data(void **state) {
  tu_fx_t *fx = tu_fx(state);
  uvcuda_future_t *f = tu_fx_futures(fx, 1);
  tu_rec_t *r = tu_fx_rec(fx);
  uvcuda_options_t o;
  tu_fx_loop_t *e;
  CUstream s;

  closed_checked = 0;
  uvcuda_options_init(&o);
  o.completion = strategy_of(state);
  o.flags = UVCUDA_OPT_ADAPTIVE;
  e = tu_fx_open(fx, &o);
  assert_handles_carry_no_data(&e->uv, 3);
  s = tu_stream();
  TU_OK(uvcuda_future_init(&e->ul, f));
  f->data = r;
  op_ns = 2 * 1000 * 1000;
  TU_OK(uvcuda_future_start(f, s, op_sleep, tu_rec_done));
  assert_handles_carry_no_data(&e->uv, 3);
  tu_run(&e->uv, 5000);
  assert_int_equal(r->calls, 1);
  assert_handles_carry_no_data(&e->uv, 3);
  close_future(e, f);
  TU_OK(uvcuda_loop_close(&e->ul, on_data_check_closed));
  assert_handles_carry_no_data(&e->uv, 3); /* closing, still walked */
  tu_run(&e->uv, 5000);
  assert_int_equal(closed_checked, 1);
  e->ul_on = 0;
  assert_int_equal(tu_fx_close_uv(e), 0);
  tu_stream_destroy(s);
}

/* ---- precise completion and order ---- */

static void precise_despite_later_work(void **state) {
  tu_fx_t *fx = tu_fx(state);
  tu_fx_loop_t *e = tu_fx_loop(state, 0);
  uvcuda_future_t *f1 = tu_fx_futures(fx, 1);
  uvcuda_future_t *f2 = tu_fx_futures(fx, 1);
  tu_rec_t *r1 = tu_fx_rec(fx);
  tu_rec_t *r2 = tu_fx_rec(fx);
  CUstream s;
  tu_gate_t g;

  s = tu_stream();
  tu_gate_init(&g);
  TU_OK(uvcuda_future_init(&e->ul, f1));
  TU_OK(uvcuda_future_init(&e->ul, f2));
  f1->data = r1;
  f2->data = r2;
  op_ns = 1000;
  TU_OK(uvcuda_future_start(f1, s, op_sleep, tu_rec_done));
  tu_gate_hold(&g, s); /* work after f1's marker that never finishes */
  TU_OK(uvcuda_future_start(f2, s, NULL, tu_rec_done));
  assert_int_equal(tu_run_until(&e->uv, &r1->calls, 5000), 0);
  assert_int_equal(r1->status, 0);
  assert_int_equal(r2->calls, 0);
  assert_int_equal(tu.cuStreamQuery(s), CUDA_ERROR_NOT_READY);
  tu_gate_open(&g);
  tu_run(&e->uv, 5000);
  assert_int_equal(r2->calls, 1);
  assert_int_equal(r2->status, 0);
  close_future(e, f1);
  close_future(e, f2);
  tu_stream_destroy(s);
  tu_gate_free(&g);
  tu_fx_close(e);
}

#define NSTREAMS 8
#define NFUT 1000

typedef struct {
  uvcuda_future_t f;
  int stream;
  int index;
  int calls;
  int status;
} ord_t;

static int next_expected[NSTREAMS];
static int order_errors;
static int done_total;

static void on_ordered(uvcuda_future_t *f, int status) {
  ord_t *o = f->data;
  o->calls++;
  o->status = status;
  if (next_expected[o->stream] != o->index) order_errors++;
  next_expected[o->stream] = o->index + 1;
  done_total++;
}

static int op_tiny(uvcuda_future_t *f, uvcuda_stream_t s) {
  ord_t *o = f->data;
  tu_sleep((CUstream)s, (uint64_t)(o->index % 7) * 2000);
  return 0;
}

static void many_futures_in_stream_order(void **state) {
  tu_fx_t *fx = tu_fx(state);
  tu_fx_loop_t *e = tu_fx_loop(state, 0);
  CUstream s[NSTREAMS];
  ord_t *o = tu_fx_alloc(fx, NFUT * sizeof(*o));
  int i, per[NSTREAMS] = {0};

  assert_non_null(o);
  tu_fx_track(fx, &o[0].f, NFUT, sizeof(*o));
  for (i = 0; i < NSTREAMS; i++) s[i] = tu_stream();
  memset(next_expected, 0, sizeof(next_expected));
  order_errors = done_total = 0;
  for (i = 0; i < NFUT; i++) {
    o[i].stream = i % NSTREAMS;
    o[i].index = per[o[i].stream]++;
    TU_OK(uvcuda_future_init(&e->ul, &o[i].f));
    o[i].f.data = &o[i];
    TU_OK(uvcuda_future_start(&o[i].f, s[o[i].stream], op_tiny, on_ordered));
  }
  tu_run(&e->uv, 30000);
  assert_int_equal(done_total, NFUT);
  assert_int_equal(order_errors, 0);
  for (i = 0; i < NFUT; i++) {
    assert_int_equal(o[i].calls, 1);
    assert_int_equal(o[i].status, 0);
    TU_OK(uvcuda_future_close(&o[i].f, NULL));
  }
  tu_run(&e->uv, 5000);
  for (i = 0; i < NSTREAMS; i++) tu_stream_destroy(s[i]);
  tu_fx_close(e);
}

/* ---- reuse and chaining ---- */

typedef struct {
  uvcuda_future_t f, g;
  int restarts, chained, g_status;
  CUstream s;
} chain_t;

static void on_g(uvcuda_future_t *g, int status) {
  chain_t *c = g->data;
  c->chained++;
  c->g_status = status;
}

static void on_again(uvcuda_future_t *f, int status) {
  chain_t *c = f->data;
  assert_int_equal(status, 0);
  assert_int_equal(uvcuda_future_state(f), UVCUDA_FUTURE_IDLE);
  if (++c->restarts < 10) {
    TU_OK(uvcuda_future_start(f, c->s, op_sleep, on_again));
  } else {
    TU_OK(uvcuda_future_start(&c->g, c->s, NULL, on_g)); /* chain */
  }
}

static void reuse_and_chain(void **state) {
  tu_fx_t *fx = tu_fx(state);
  tu_fx_loop_t *e = tu_fx_loop(state, 0);
  chain_t *c = tu_fx_alloc(fx, sizeof(*c));

  tu_fx_track(fx, &c->f, 1, 0);
  tu_fx_track(fx, &c->g, 1, 0);
  c->s = tu_stream();
  TU_OK(uvcuda_future_init(&e->ul, &c->f));
  TU_OK(uvcuda_future_init(&e->ul, &c->g));
  c->f.data = c->g.data = c;
  op_ns = 50000;
  TU_OK(uvcuda_future_start(&c->f, c->s, op_sleep, on_again));
  tu_run(&e->uv, 10000);
  assert_int_equal(c->restarts, 10);
  assert_int_equal(c->chained, 1);
  assert_int_equal(c->g_status, 0);
  assert_int_equal(stats_of(e).started, 11);
  TU_OK(uvcuda_future_close(&c->f, NULL));
  TU_OK(uvcuda_future_close(&c->g, NULL));
  tu_run(&e->uv, 5000);
  tu_stream_destroy(c->s);
  tu_fx_close(e);
}

/* ---- errors ---- */

static int op_ret;
static int op_fail(uvcuda_future_t *f, uvcuda_stream_t s) {
  (void)f;
  (void)s;
  return op_ret;
}

static void op_errors_reach_the_callback(void **state) {
  static const int rets[] = {UVCUDA_ENOMEM, (int)CUDA_ERROR_OUT_OF_MEMORY, -77};
  static const int want[] = {UVCUDA_ENOMEM, UVCUDA_ECUDA(CUDA_ERROR_OUT_OF_MEMORY), -77};
  tu_fx_t *fx = tu_fx(state);
  tu_fx_loop_t *e = tu_fx_loop(state, 0);
  uvcuda_future_t *f = tu_fx_futures(fx, 1);
  tu_rec_t *r = tu_fx_rec(fx);
  CUstream s;
  unsigned i;

  s = tu_stream();
  TU_OK(uvcuda_future_init(&e->ul, f));
  for (i = 0; i < sizeof(rets) / sizeof(rets[0]); i++) {
    memset(r, 0, sizeof(*r));
    f->data = r;
    op_ret = rets[i];
    TU_OK(uvcuda_future_start(f, s, op_fail, tu_rec_done));
    assert_int_equal(uvcuda_future_state(f), UVCUDA_FUTURE_FAILED);
    assert_int_equal(r->calls, 0);
    tu_run(&e->uv, 5000);
    assert_int_equal(r->calls, 1);
    assert_int_equal(r->status, want[i]);
  }
  assert_int_equal(uvcuda_cuda_result(r->status), 0);
  assert_int_equal(stats_of(e).failed, 3);
  f->data = r;
  close_future(e, f);
  tu_stream_destroy(s);
  tu_fx_close(e);
}

/* NULL stream with no current context: the driver's error, as a value. */
static void driver_error_reaches_the_callback(void **state) {
  tu_fx_t *fx = tu_fx(state);
  tu_fx_loop_t *e = tu_fx_loop(state, 0);
  uvcuda_future_t *f = tu_fx_futures(fx, 1);
  tu_rec_t *r = tu_fx_rec(fx);

  TU_OK(uvcuda_future_init(&e->ul, f));
  f->data = r;
  TU_CU(tu.cuCtxSetCurrent(NULL));
  TU_OK(uvcuda_future_start(f, NULL, NULL, tu_rec_done));
  TU_CU(tu.cuCtxSetCurrent(tu_ctx));
  tu_run(&e->uv, 5000);
  assert_int_equal(r->calls, 1);
  assert_int_equal(uvcuda_cuda_result(r->status), CUDA_ERROR_INVALID_CONTEXT);
  assert_string_equal(uvcuda_err_name(r->status), "CUDA_ERROR_INVALID_CONTEXT");
  close_future(e, f);
  tu_fx_close(e);
}

static void capturing_stream_is_refused(void **state) {
  tu_fx_t *fx = tu_fx(state);
  tu_fx_loop_t *e = tu_fx_loop(state, 0);
  uvcuda_future_t *f = tu_fx_futures(fx, 1);
  tu_rec_t *r = tu_fx_rec(fx);
  CUstream s;
  CUstreamCaptureStatus cs;
  CUgraph graph = NULL;

  s = tu_stream();
  TU_OK(uvcuda_future_init(&e->ul, f));
  f->data = r;
  TU_CU(tu.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
  op_ret = 0;
  TU_OK(uvcuda_future_start(f, s, op_fail, tu_rec_done));
  tu_run(&e->uv, 5000);
  assert_int_equal(r->calls, 1);
  assert_int_equal(r->status, UVCUDA_ECAPTURING);
  TU_CU(tu.cuStreamIsCapturing(s, &cs));
  assert_int_equal(cs, CU_STREAM_CAPTURE_STATUS_ACTIVE); /* left intact */
  TU_CU(tu.cuStreamEndCapture(s, &graph));
  if (graph) tu.cuGraphDestroy(graph);
  /* The same stream works once the capture ended. */
  TU_OK(uvcuda_future_start(f, s, NULL, tu_rec_done));
  tu_run(&e->uv, 5000);
  assert_int_equal(r->calls, 2);
  assert_int_equal(r->status, 0);
  close_future(e, f);
  tu_stream_destroy(s);
  tu_fx_close(e);
}

/* An op may begin a capture on its own stream (nothing forbids it): the
 * marker would join the capture and never be written, so the future fails
 * with UVCUDA_ECAPTURING, once, and the capture is left as the op made it. */
static CUstreamCaptureMode op_capture_mode;
static int op_begins_capture(uvcuda_future_t *f, uvcuda_stream_t s) {
  (void)f;
  return (int)tu.cuStreamBeginCapture((CUstream)s, op_capture_mode);
}

static void op_that_begins_a_capture_is_refused(void **state) {
  static const CUstreamCaptureMode modes[] = {CU_STREAM_CAPTURE_MODE_RELAXED,
                                              CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                                              CU_STREAM_CAPTURE_MODE_GLOBAL};
  tu_fx_t *fx = tu_fx(state);
  tu_fx_loop_t *e = tu_fx_loop(state, 0);
  uvcuda_future_t *f = tu_fx_futures(fx, 1);
  tu_rec_t *r = tu_fx_rec(fx);
  CUstreamCaptureStatus cs;
  CUgraph graph;
  CUstream s;
  size_t i;

  s = tu_stream();
  TU_OK(uvcuda_future_init(&e->ul, f));
  f->data = r;
  for (i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
    op_capture_mode = modes[i];
    TU_OK(uvcuda_future_start(f, s, op_begins_capture, tu_rec_done));
    tu_run(&e->uv, 5000);
    assert_int_equal(r->calls, (int)(2 * i + 1));
    assert_int_equal(r->status, UVCUDA_ECAPTURING);
    assert_int_equal(uvcuda_future_state(f), UVCUDA_FUTURE_IDLE);
    TU_CU(tu.cuStreamIsCapturing(s, &cs));
    assert_int_equal(cs, CU_STREAM_CAPTURE_STATUS_ACTIVE); /* the op's, intact */
    graph = NULL;
    TU_CU(tu.cuStreamEndCapture(s, &graph));
    if (graph) tu.cuGraphDestroy(graph);
    /* The stream works again once the capture ended. */
    TU_OK(uvcuda_future_start(f, s, NULL, tu_rec_done));
    tu_run(&e->uv, 5000);
    assert_int_equal(r->calls, (int)(2 * i + 2));
    assert_int_equal(r->status, 0);
  }
  close_future(e, f);
  tu_stream_destroy(s);
  tu_fx_close(e);
}

/* The caller's context is restored; the stream's is current for the op. */
static CUcontext seen_in_op;
static int op_see_ctx(uvcuda_future_t *f, uvcuda_stream_t s) {
  (void)f;
  (void)s;
  tu.cuCtxGetCurrent(&seen_in_op);
  return 0;
}

static void stream_context_made_current(void **state) {
  tu_fx_t *fx = tu_fx(state);
  tu_fx_loop_t *e = tu_fx_loop(state, 0);
  uvcuda_future_t *f = tu_fx_futures(fx, 1);
  tu_rec_t *r = tu_fx_rec(fx);
  CUstream s;
  CUcontext cur = (CUcontext)1;

  s = tu_stream();
  TU_OK(uvcuda_future_init(&e->ul, f));
  f->data = r;
  TU_CU(tu.cuCtxSetCurrent(NULL));
  seen_in_op = NULL;
  TU_OK(uvcuda_future_start(f, s, op_see_ctx, tu_rec_done));
  TU_CU(tu.cuCtxGetCurrent(&cur));
  assert_null(cur);
  assert_ptr_equal(seen_in_op, tu_ctx);
  tu_run(&e->uv, 5000);
  TU_CU(tu.cuCtxSetCurrent(tu_ctx));
  assert_int_equal(r->calls, 1);
  assert_int_equal(r->status, 0);
  close_future(e, f);
  tu_stream_destroy(s);
  tu_fx_close(e);
}

/* An op that switches the thread to another context gets the caller's
 * back, even where the stream's context was the caller's (no switch of
 * uvcuda's own to undo); the marker still runs in the stream's. */
static int op_switches_ctx(uvcuda_future_t *f, uvcuda_stream_t s) {
  (void)f;
  (void)s;
  return tu.cuCtxSetCurrent(NULL);
}

static void an_op_that_switches_context_is_undone(void **state) {
  tu_fx_t *fx = tu_fx(state);
  tu_fx_loop_t *e = tu_fx_loop(state, 0);
  uvcuda_future_t *f = tu_fx_futures(fx, 1);
  tu_rec_t *r = tu_fx_rec(fx);
  CUstream s;
  CUcontext cur = NULL;

  s = tu_stream();
  TU_OK(uvcuda_future_init(&e->ul, f));
  f->data = r;
  TU_CU(tu.cuCtxSetCurrent(tu_ctx)); /* the stream's */
  TU_OK(uvcuda_future_start(f, s, op_switches_ctx, tu_rec_done));
  TU_CU(tu.cuCtxGetCurrent(&cur));
  assert_ptr_equal(cur, tu_ctx);
  tu_run(&e->uv, 5000);
  assert_int_equal(r->calls, 1);
  assert_int_equal(r->status, 0);
  close_future(e, f);
  tu_stream_destroy(s);
  tu_fx_close(e);
}

/* ---- misuse ---- */

/* The op runs inside uvcuda_future_start: its own future is not started
 * yet, nor free to be closed or initialised again. */
static int in_op_start, in_op_close, in_op_init;
static int op_reenters(uvcuda_future_t *f, uvcuda_stream_t s) {
  in_op_close = uvcuda_future_close(f, tu_rec_closed);
  in_op_start = uvcuda_future_start(f, s, NULL, tu_rec_done);
  in_op_init = uvcuda_future_init(f->loop, f);
  return 0;
}

static void an_op_may_not_start_or_close_its_future(void **state) {
  tu_fx_t *fx = tu_fx(state);
  tu_fx_loop_t *e = tu_fx_loop(state, 0);
  uvcuda_future_t *f = tu_fx_futures(fx, 1);
  tu_rec_t *r = tu_fx_rec(fx);
  CUstream s;
  int i;

  s = tu_stream();
  TU_OK(uvcuda_future_init(&e->ul, f));
  f->data = r;
  for (i = 0; i < 2; i++) { /* again after its callback: it is reusable */
    in_op_start = in_op_close = in_op_init = 1;
    TU_OK(uvcuda_future_start(f, s, op_reenters, tu_rec_done));
    assert_int_equal(in_op_close, UVCUDA_EBUSY);
    assert_int_equal(in_op_start, UVCUDA_EBUSY);
    assert_int_equal(in_op_init, UVCUDA_EBUSY);
    tu_run(&e->uv, 5000);
    assert_int_equal(r->calls, i + 1);
    assert_int_equal(r->status, 0);
    assert_int_equal(r->closed, 0);
  }
  close_future(e, f);
  assert_int_equal(r->calls, 2);
  tu_stream_destroy(s);
  tu_fx_close(e);
}

typedef struct {
  tu_fx_loop_t *e;
  uvcuda_future_t *f;
  int start, close, init, lclose, stats;
} foreign_t;

static void *foreign_thread(void *arg) {
  foreign_t *x = arg;
  uvcuda_future_t g;
  uvcuda_stats_t st;
  x->start = uvcuda_future_start(x->f, NULL, NULL, tu_rec_done);
  x->close = uvcuda_future_close(x->f, NULL);
  x->init = uvcuda_future_init(&x->e->ul, &g);
  x->lclose = uvcuda_loop_close(&x->e->ul, NULL);
  x->stats = uvcuda_loop_stats(&x->e->ul, &st);
  return NULL;
}

static void calls_from_another_thread_fail(void **state) {
  tu_fx_t *fx = tu_fx(state);
  tu_fx_loop_t *e = tu_fx_loop(state, 0);
  uvcuda_future_t *f = tu_fx_futures(fx, 1);
  tu_rec_t *r = tu_fx_rec(fx);
  foreign_t x;
  pthread_t t;

  TU_OK(uvcuda_future_init(&e->ul, f));
  f->data = r;
  x.e = e;
  x.f = f;
  assert_int_equal(pthread_create(&t, NULL, foreign_thread, &x), 0);
  pthread_join(t, NULL);
  assert_int_equal(x.start, UVCUDA_EWRONGTHREAD);
  assert_int_equal(x.close, UVCUDA_EWRONGTHREAD);
  assert_int_equal(x.init, UVCUDA_EWRONGTHREAD);
  assert_int_equal(x.lclose, UVCUDA_EWRONGTHREAD);
  assert_int_equal(x.stats, UVCUDA_EWRONGTHREAD);
  assert_int_equal(uvcuda_future_state(f), UVCUDA_FUTURE_IDLE);
  close_future(e, f);
  assert_int_equal(r->calls, 0);
  tu_fx_close(e);
}

static void misuse_returns_errors(void **state) {
  tu_fx_t *fx = tu_fx(state);
  tu_fx_loop_t *e = tu_fx_loop(state, 0);
  uvcuda_future_t *f = tu_fx_futures(fx, 1);
  uvcuda_future_t *z = tu_fx_futures(fx, 1);
  tu_rec_t *r = tu_fx_rec(fx);
  CUstream s;
  tu_gate_t g;

  s = tu_stream();
  tu_gate_init(&g);
  assert_int_equal(uvcuda_future_init(NULL, f), UVCUDA_EINVAL);
  assert_int_equal(uvcuda_future_init(&e->ul, NULL), UVCUDA_EINVAL);
  assert_int_equal(uvcuda_future_start(NULL, s, NULL, tu_rec_done), UVCUDA_EINVAL);
  memset(z, 0, sizeof(*z));
  assert_int_equal(uvcuda_future_start(z, s, NULL, tu_rec_done), UVCUDA_ENOTINIT);
  assert_int_equal(uvcuda_future_close(z, NULL), UVCUDA_ENOTINIT);
  assert_int_equal(uvcuda_future_close(NULL, NULL), UVCUDA_EINVAL);
  assert_int_equal(uvcuda_future_state(z), UVCUDA_FUTURE_CLOSED);
  TU_OK(uvcuda_future_init(&e->ul, f));
  f->data = r;
  /* A live loop context is not initialised again (that would cut its
   * handles off the loop); it stays usable. */
  assert_int_equal(uvcuda_loop_init(&e->uv, &e->ul, NULL), UVCUDA_EBUSY);
  assert_int_equal(uvcuda_future_state(f), UVCUDA_FUTURE_IDLE);
  /* A struct copy of a live handle is not that handle: never initialised,
   * it may be (as libuv's init overwrites a copied handle). */
  {
    uvcuda_future_t *g = tu_fx_futures(fx, 1);
    uvcuda_loop_t ul2 = e->ul;
    *g = *f;
    g->data = tu_fx_rec(fx); /* its own record */
    assert_int_equal(uvcuda_future_state(g), UVCUDA_FUTURE_CLOSED);
    assert_int_equal(uvcuda_future_start(g, s, NULL, tu_rec_done), UVCUDA_ENOTINIT);
    TU_OK(uvcuda_future_init(&e->ul, g));
    assert_int_equal(uvcuda_future_state(g), UVCUDA_FUTURE_IDLE);
    close_future(e, g);
    TU_OK(uvcuda_loop_init(&e->uv, &ul2, NULL));
    TU_OK(uvcuda_loop_close(&ul2, NULL));
    tu_run(&e->uv, 5000);
    assert_int_equal(uvcuda_loop_stats(&ul2, &(uvcuda_stats_t){0}), UVCUDA_ENOTINIT);
  }
  assert_int_equal(uvcuda_future_start(f, s, NULL, NULL), UVCUDA_EINVAL);
  tu_gate_hold(&g, s);
  TU_OK(uvcuda_future_start(f, s, NULL, tu_rec_done));
  assert_int_equal(uvcuda_future_start(f, s, NULL, tu_rec_done), UVCUDA_EBUSY);
  assert_int_equal(uvcuda_loop_close(&e->ul, NULL), UVCUDA_EBUSY);
  tu_gate_open(&g);
  tu_run(&e->uv, 5000);
  assert_int_equal(r->calls, 1);
  TU_OK(uvcuda_future_close(f, tu_rec_closed));
  assert_int_equal(uvcuda_future_close(f, tu_rec_closed), UVCUDA_ECLOSING);
  assert_int_equal(uvcuda_future_start(f, s, NULL, tu_rec_done), UVCUDA_ECLOSING);
  assert_int_equal(r->closed, 0); /* not from inside close */
  tu_run(&e->uv, 5000);
  assert_int_equal(r->closed, 1);
  assert_int_equal(uvcuda_future_start(f, s, NULL, tu_rec_done), UVCUDA_ECLOSING);
  assert_int_equal(uvcuda_future_state(f), UVCUDA_FUTURE_CLOSED);
  assert_int_equal(r->calls, 1);
  /* Closed: it may be initialised again (and must be closed again). */
  TU_OK(uvcuda_future_init(&e->ul, f));
  close_future(e, f);
  tu_stream_destroy(s);
  tu_gate_free(&g);
  tu_fx_close(e);
  assert_int_equal(uvcuda_loop_close(&e->ul, NULL), UVCUDA_ENOTINIT);
}

/* ---- close at every state ---- */

static void close_at_every_state(void **state) {
  tu_fx_t *fx = tu_fx(state);
  tu_fx_loop_t *e;
  uvcuda_future_t *f = tu_fx_futures(fx, 1);
  tu_rec_t *r = tu_fx_rec(fx);
  CUstream s;
  tu_gate_t g;
  int spin;

  for (spin = 0; spin < 2; spin++) {
    /* spin 0: budget 0, the future is ARMED; spin 1: long budget, SPINNING */
    e = tu_fx_open_with(fx, strategy_of(state), spin ? 1000000 : 0);
    s = tu_stream();
    tu_gate_init(&g);

    /* IDLE: close_cb only */
    memset(r, 0, sizeof(*r));
    TU_OK(uvcuda_future_init(&e->ul, f));
    f->data = r;
    close_future(e, f);
    assert_int_equal(r->calls, 0);

    /* SPINNING or ARMED, GPU work held: cancelled, then close_cb */
    memset(r, 0, sizeof(*r));
    TU_OK(uvcuda_future_init(&e->ul, f));
    f->data = r;
    tu_gate_hold(&g, s);
    TU_OK(uvcuda_future_start(f, s, NULL, tu_rec_done));
    assert_int_equal(uvcuda_future_state(f),
                     spin ? UVCUDA_FUTURE_SPINNING : UVCUDA_FUTURE_ARMED);
    TU_OK(uvcuda_future_close(f, tu_rec_closed));
    assert_int_equal(r->calls, 0);
    assert_int_equal(r->closed, 0);
    /* As api.md says: FAILED and active until the cancellation callback,
     * CLOSING (not active) in it, CLOSED in the close callback. */
    assert_int_equal(uvcuda_future_state(f), UVCUDA_FUTURE_FAILED);
    assert_true(uvcuda_future_is_active(f));
    tu_run(&e->uv, 5000);
    assert_int_equal(r->calls, 1);
    assert_int_equal(r->status, UVCUDA_ECANCELED);
    assert_int_equal(r->cb_state, UVCUDA_FUTURE_CLOSING);
    assert_false(r->cb_active);
    assert_int_equal(r->closed, 1);
    assert_int_equal(r->closed_state, UVCUDA_FUTURE_CLOSED);
    /* Poison the future's memory: nothing may touch it any more. */
    memset(f, 0xa5, sizeof(*f));
    tu_gate_open(&g);
    TU_CU(tu.cuStreamSynchronize(s));

    /* FAILED, queued for delivery: cancelled */
    memset(r, 0, sizeof(*r));
    TU_OK(uvcuda_future_init(&e->ul, f));
    f->data = r;
    op_ret = UVCUDA_ENOMEM;
    TU_OK(uvcuda_future_start(f, s, op_fail, tu_rec_done));
    TU_OK(uvcuda_future_close(f, tu_rec_closed));
    tu_run(&e->uv, 5000);
    assert_int_equal(r->calls, 1);
    assert_int_equal(r->status, UVCUDA_ECANCELED);
    assert_int_equal(r->closed, 1);
    assert_int_equal(stats_of(e).cancelled, 2);

    tu_stream_destroy(s);
    tu_gate_free(&g);
    tu_fx_close(e);
  }
}

/* Close from inside its own callback. */
static void on_done_close(uvcuda_future_t *f, int status) {
  tu_rec_done(f, status);
  TU_OK(uvcuda_future_close(f, tu_rec_closed));
}

static void close_from_callback(void **state) {
  tu_fx_t *fx = tu_fx(state);
  tu_fx_loop_t *e = tu_fx_loop(state, 0);
  uvcuda_future_t *f = tu_fx_futures(fx, 1);
  tu_rec_t *r = tu_fx_rec(fx);
  CUstream s;

  s = tu_stream();
  TU_OK(uvcuda_future_init(&e->ul, f));
  f->data = r;
  TU_OK(uvcuda_future_start(f, s, NULL, on_done_close));
  tu_run(&e->uv, 5000);
  assert_int_equal(r->calls, 1);
  assert_int_equal(r->closed, 1);
  tu_stream_destroy(s);
  tu_fx_close(e);
}

/* Loop close while a closed future's GPU write is still due: the close
 * does not wait for the GPU, and the counter that write lands in is not
 * handed to anyone before it has landed (a later future on another stream,
 * from a new loop, would otherwise see the old write as its own). */
static int lclosed;
static void on_lclosed(uvcuda_loop_t *ul) {
  (void)ul;
  lclosed++;
}

static void loop_close_never_waits_for_gpu_writes(void **state) {
  tu_fx_t *fx = tu_fx(state);
  tu_fx_loop_t *e = tu_fx_loop(state, 0), *e2;
  uvcuda_future_t *f = tu_fx_futures(fx, 2);
  tu_rec_t *r = tu_fx_rec(fx), *r2 = tu_fx_rec(fx);
  CUstream s, s2;
  tu_gate_t g, g2;
  int i;

  s = tu_stream();
  s2 = tu_stream();
  tu_gate_init(&g);
  tu_gate_init(&g2);
  TU_OK(uvcuda_future_init(&e->ul, &f[0]));
  f[0].data = r;
  tu_gate_hold(&g, s);
  TU_OK(uvcuda_future_start(&f[0], s, NULL, tu_rec_done));
  close_future(e, &f[0]);
  assert_int_equal(r->status, UVCUDA_ECANCELED);
  lclosed = 0;
  TU_OK(uvcuda_loop_close(&e->ul, on_lclosed));
  assert_int_equal(uvcuda_loop_close(&e->ul, on_lclosed), UVCUDA_ECLOSING);
  tu_run(&e->uv, 5000); /* the gate is still closed */
  assert_int_equal(lclosed, 1);
  assert_int_equal(tu_fx_close_uv(e), 0);

  /* A new loop's future on another stream, held, while the old write
   * lands: it must stay pending. */
  e2 = tu_fx_open_with(fx, strategy_of(state), 0);
  TU_OK(uvcuda_future_init(&e2->ul, &f[1]));
  f[1].data = r2;
  tu_gate_hold(&g2, s2);
  TU_OK(uvcuda_future_start(&f[1], s2, NULL, tu_rec_done));
  tu_gate_open(&g);
  TU_CU(tu.cuStreamSynchronize(s)); /* the old write has landed */
  for (i = 0; i < 100; i++) uv_run(&e2->uv, UV_RUN_NOWAIT);
  assert_int_equal(r2->calls, 0);
  tu_gate_open(&g2);
  tu_run(&e2->uv, 5000);
  assert_int_equal(r2->calls, 1);
  assert_int_equal(r2->status, 0);
  TU_OK(uvcuda_future_close(&f[1], NULL));
  tu_run(&e2->uv, 5000);
  tu_fx_close(e2);
  tu_stream_destroy(s);
  tu_stream_destroy(s2);
  tu_gate_free(&g);
  tu_gate_free(&g2);
}

/* Loops closed one after another, each with a future closed in flight:
 * under hostfn each leaves its host function queued, and the loop's port
 * waits for it on the list of orphaned ports, linked through the ports.
 * The second close links its port to the first's; the first's host
 * function then runs on the driver's thread and frees that port while
 * this thread only sleeps (no lock between them). TSan (CI) reports any
 * access to the link that the list's lock does not order: an outside
 * tester found port_free reading it unlocked. The other strategies run it
 * too: their closes must leave nothing behind either. */
static int op_sleep_50ms(uvcuda_future_t *f, uvcuda_stream_t s) {
  (void)f;
  tu_sleep((CUstream)s, 50000000);
  return 0;
}

static void loops_closed_with_their_work_queued(void **state) {
  tu_fx_t *fx = tu_fx(state);
  uvcuda_future_t *f = tu_fx_futures(fx, 2);
  CUstream s[2];
  int i;

  for (i = 0; i < 2; i++) {
    tu_fx_loop_t *e = tu_fx_open_with(fx, strategy_of(state), 0);
    tu_rec_t *r = tu_fx_rec(fx);
    s[i] = tu_stream();
    TU_OK(uvcuda_future_init(&e->ul, &f[i]));
    f[i].data = r;
    TU_OK(uvcuda_future_start(&f[i], s[i], op_sleep_50ms, tu_rec_done));
    close_future(e, &f[i]);
    assert_int_equal(r->status, UVCUDA_ECANCELED);
    lclosed = 0;
    TU_OK(uvcuda_loop_close(&e->ul, on_lclosed));
    tu_run(&e->uv, 5000);
    assert_int_equal(lclosed, 1);
    assert_int_equal(tu_fx_close_uv(e), 0);
  }
  /* Not a bound: time for the host functions to run while this thread
   * makes no driver call that would order it before them. */
  uv_sleep(200);
  for (i = 0; i < 2; i++) {
    TU_CU(tu.cuStreamSynchronize(s[i])); /* its host function has run */
    tu_stream_destroy(s[i]);
  }
}

/* ---- several loops on several threads ---- */

typedef struct {
  uvcuda_completion_t c;
  int done, errors;
} thr_t;

static void on_thr(uvcuda_future_t *f, int status) {
  thr_t *t = f->data;
  if (status != 0) t->errors++;
  t->done++;
}

static void *loop_thread(void *arg) {
  thr_t *t = arg;
  uv_loop_t uv;
  uvcuda_loop_t ul;
  uvcuda_options_t o;
  uvcuda_future_t *fs = calloc(200, sizeof(*fs));
  CUstream s;
  int i;

  tu.cuCtxSetCurrent(tu_ctx);
  uvcuda_options_init(&o);
  o.completion = t->c;
  uv_loop_init(&uv);
  if (uvcuda_loop_init(&uv, &ul, &o) != 0) {
    t->errors = 1000;
    free(fs);
    return NULL;
  }
  tu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
  for (i = 0; i < 200; i++) {
    uvcuda_future_init(&ul, &fs[i]);
    fs[i].data = t;
    if (uvcuda_future_start(&fs[i], s, NULL, on_thr) != 0) t->errors++;
  }
  uv_run(&uv, UV_RUN_DEFAULT);
  for (i = 0; i < 200; i++) uvcuda_future_close(&fs[i], NULL);
  uv_run(&uv, UV_RUN_DEFAULT);
  if (uvcuda_loop_close(&ul, NULL) != 0) t->errors++;
  uv_run(&uv, UV_RUN_DEFAULT);
  if (uv_loop_close(&uv) != 0) t->errors++;
  tu.cuStreamSynchronize(s);
  tu.cuStreamDestroy(s);
  free(fs);
  return NULL;
}

static void loops_on_threads(void **state) {
  thr_t t[3];
  pthread_t th[3];
  int i;
  for (i = 0; i < 3; i++) {
    memset(&t[i], 0, sizeof(t[i]));
    t[i].c = strategy_of(state);
    assert_int_equal(pthread_create(&th[i], NULL, loop_thread, &t[i]), 0);
  }
  for (i = 0; i < 3; i++) {
    pthread_join(th[i], NULL);
    assert_int_equal(t[i].errors, 0);
    assert_int_equal(t[i].done, 200);
  }
}

/* LOOP: setup opens loop 0 with strategy c and spin budget spin (us);
 * OWN: the case opens its own loops. Teardown closes what is left. */
#define LOOP(fn, c, spin)                                                  \
  cmocka_unit_test_prestate_setup_teardown(fn, tu_fx_setup_loop,           \
                                           tu_fx_teardown,                 \
                                           (&(tu_fx_spec_t){c, spin}))
#define OWN(fn, c)                                                         \
  cmocka_unit_test_prestate_setup_teardown(fn, tu_fx_setup, tu_fx_teardown, \
                                           (&(tu_fx_spec_t){c, -1}))

#define CASES(c)                                        \
  LOOP(short_op_completes_while_spinning, c, 200000),   \
  LOOP(long_op_completes_armed, c, 20),                 \
  LOOP(no_spin_goes_straight_to_armed, c, 0),           \
  LOOP(each_callback_counted_once, c, 20),              \
  LOOP(loop_found_completion_is_not_a_wakeup, c, 200000), \
  LOOP(a_spinning_loop_is_not_rung, c, 1000000),        \
  LOOP(an_embedded_loop_completes_its_futures, c, 20000), \
  LOOP(timing_shows_where_latency_went, c, 20),         \
  LOOP(loop_alive_only_while_pending, c, 20),           \
  OWN(handles_carry_no_data, c),                        \
  LOOP(precise_despite_later_work, c, 20),              \
  LOOP(many_futures_in_stream_order, c, 20),            \
  LOOP(reuse_and_chain, c, 20),                         \
  LOOP(op_errors_reach_the_callback, c, 20),            \
  LOOP(driver_error_reaches_the_callback, c, 20),       \
  LOOP(capturing_stream_is_refused, c, 20),             \
  LOOP(op_that_begins_a_capture_is_refused, c, 20),     \
  LOOP(stream_context_made_current, c, 20),             \
  LOOP(an_op_that_switches_context_is_undone, c, 20),   \
  LOOP(an_op_may_not_start_or_close_its_future, c, 20), \
  LOOP(calls_from_another_thread_fail, c, 20),          \
  LOOP(misuse_returns_errors, c, 20),                   \
  OWN(close_at_every_state, c),                         \
  LOOP(close_from_callback, c, 20),                     \
  LOOP(loop_close_never_waits_for_gpu_writes, c, 20),  \
  OWN(loops_closed_with_their_work_queued, c),          \
  OWN(loops_on_threads, c)

int main(int argc, char **argv) {
  const struct CMUnitTest auto_tests[] = {CASES(UVCUDA_COMPLETION_AUTO)};
  const struct CMUnitTest hostfn_tests[] = {CASES(UVCUDA_COMPLETION_HOSTFN)};
  const struct CMUnitTest poll_tests[] = {CASES(UVCUDA_COMPLETION_POLL)};
  int rc, fails = 0;

  want_real = argc > 1 && strcmp(argv[1], "--gpu") == 0;
  rc = tu_setup(want_real);
  if (rc != 0) return rc;
  fails += cmocka_run_group_tests_name("future/auto", auto_tests, NULL, NULL);
  fails += cmocka_run_group_tests_name("future/hostfn", hostfn_tests, NULL, NULL);
  fails += cmocka_run_group_tests_name("future/poll", poll_tests, NULL, NULL);
  tu_teardown();
  return fails ? 1 : 0;
}
