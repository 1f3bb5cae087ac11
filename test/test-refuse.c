/* Refused resources, wherever the library meets them. A loop's life (init,
 * six futures on three streams started twice, closes) runs in a fresh
 * child with one thing refused:
 *   nomem:   the Nth allocation (malloc, calloc, realloc, posix_memalign:
 *            the library is linked statically with them wrapped; only the
 *            loop thread's calls during the life count), for N = 1, 2, ...
 *            until a life makes fewer than N;
 *   drvfail: each driver entry point the library calls fails with
 *            CUDA_ERROR_OUT_OF_MEMORY at its 1st..4th call, then at every
 *            call (the simulation's simcuda_fail_nth / simcuda_fail).
 * Lives vary: the plain one (each strategy) closes one future while it is
 * pending; others meet a kernel fault before their second round, or end
 * in uvcuda_device_reset with a future waiting behind a gate; one runs
 * on a thread with no context current, so that every start switches.
 * Whatever is refused: uvcuda_loop_init succeeds or returns the error
 * with nothing left on the uv loop; otherwise each start's callback runs
 * exactly once, with 0, the error (UVCUDA_ENOMEM, UVCUDA_ECUDA(2)) or what
 * the life itself causes (cancellation, the fault, the reset), a single
 * refusal failing at most one start; nothing hangs, every close
 * completes, the uv loop can be closed, the loop thread's context and
 * capture mode are its own again, and nothing leaks (LSan is asked in
 * each child, which leaves with _exit; valgrind checks each child by its
 * exit status). Every life is forked before this process loads the
 * driver. With UVCUDA_TEST_SLOW (the sanitizer and valgrind passes, where
 * a child costs ~1 s under TSan): the lives marked slow_too, and
 * drvfail's 1st and every call.
 * Usage: test-refuse nomem|drvfail */
#include "tu.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "driver.h"
#include "simcuda.h"

#define NSTREAMS 3
#define NFUT 6
#define EVERY (-1)      /* drvfail: every call fails */
#define HANDLED 42      /* exit: the refusal was met and handled */
#define MAXENTRIES 64

extern void __lsan_do_leak_check(void) __attribute__((weak));

/* ---- nomem: the allocators, wrapped ---- */

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
int __real_posix_memalign(void **p, size_t align, size_t n);

static int armed;
static pthread_t armed_thread;
static long fail_at; /* the allocation refused, 1-based */
static long seen;    /* allocations counted so far */

static int refuse(void) {
  if (!armed || !pthread_equal(pthread_self(), armed_thread)) return 0;
  return ++seen == fail_at;
}

/* The refused allocation was reached. */
static int hit(void) { return seen >= fail_at; }

void *__wrap_malloc(size_t n) { return refuse() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t size) {
  return refuse() ? NULL : __real_calloc(n, size);
}
void *__wrap_realloc(void *p, size_t n) {
  return refuse() ? NULL : __real_realloc(p, n);
}
int __wrap_posix_memalign(void **p, size_t align, size_t n) {
  return refuse() ? ENOMEM : __real_posix_memalign(p, align, n);
}

/* ---- one loop's life ---- */

typedef struct {
  uvcuda_completion_t completion;
  uint32_t flags;
  int reset;         /* the life ends with uvcuda_device_reset */
  int fault;         /* a kernel fault before the second round */
  int bare;          /* the loop thread has no context current (as Node's
                        JS thread, or any thread that never made one) */
  int slow_too;      /* also run under UVCUDA_TEST_SLOW */
  int nomem;         /* 1: refuse allocation n; 0: fail a driver call */
  long n;            /* nomem: the allocation refused */
  const char *entry; /* drvfail: the entry point that fails */
  int nth;           /* drvfail: its call that fails, or EVERY */
} run_t;

typedef struct {
  int expect; /* the error a refusal gives */
  int calls, ok, refused, destroyed, faulted, cancelled, other, closed;
} tally_t;

/* Exit status: 0 the life ran (nomem: with fewer than n allocations),
 * HANDLED the refusal was met and handled, 77 no driver, 10..39 a check
 * failed (ASan and LSan exit with 1 and 23). */
#define CHECK(cond)                                                      \
  do {                                                                   \
    if (!(cond)) {                                                       \
      fprintf(stderr, "refuse: %s: check failed: %s (line %d)\n", what(r), \
              #cond, __LINE__);                                          \
      return 10 + __LINE__ % 30;                                         \
    }                                                                    \
  } while (0)

static const char *label(const run_t *r) {
  return r->flags & UVCUDA_OPT_ADAPTIVE ? " adaptive"
         : r->bare                       ? ", no context current"
         : r->reset                      ? ", ending in a device reset"
         : r->fault                      ? ", with a kernel fault"
                                         : "";
}

static const char *what(const run_t *r) {
  static char buf[128];
  if (r->nomem)
    snprintf(buf, sizeof(buf), "%s%s, allocation %ld refused",
             uvcuda_completion_name(r->completion), label(r), r->n);
  else
    snprintf(buf, sizeof(buf), "%s%s, %s fails at call %d",
             uvcuda_completion_name(r->completion), label(r), r->entry, r->nth);
  return buf;
}

/* tu_sleep's launch with its result returned: a failure goes to the
 * future, not to cmocka (this runs in a child). */
static int op_sleep(uvcuda_future_t *f, uvcuda_stream_t s) {
  uint64_t ns = 20000;
  void *args[] = {&ns};
  (void)f;
  return tu.cuLaunchKernel(tu_fn_sleep, 1, 1, 1, 1, 1, 1, 0, (CUstream)s, args,
                           NULL);
}

static void on_done(uvcuda_future_t *f, int status) {
  tally_t *t = f->data;
  t->calls++;
  if (status == 0)
    t->ok++;
  else if (status == t->expect)
    t->refused++;
  else if (status == UVCUDA_ECUDA(CUDA_ERROR_CONTEXT_IS_DESTROYED))
    t->destroyed++; /* waited through a device reset */
  else if (status == UVCUDA_ECUDA(CUDA_ERROR_ILLEGAL_ADDRESS))
    t->faulted++; /* after the kernel fault */
  else if (status == UVCUDA_ECANCELED)
    t->cancelled++; /* closed while pending */
  else {
    fprintf(stderr, "refuse: a future failed with %s\n", uvcuda_err_name(status));
    t->other++;
  }
}

static void on_closed(uvcuda_future_t *f) { ((tally_t *)f->data)->closed++; }

static void arm(const run_t *r) {
  if (r->nomem) {
    fail_at = r->n;
    armed_thread = pthread_self();
    armed = 1;
  } else if (r->nth == EVERY) {
    simcuda_fail(r->entry, CUDA_ERROR_OUT_OF_MEMORY, -1);
  } else {
    simcuda_fail_nth(r->entry, CUDA_ERROR_OUT_OF_MEMORY, r->nth);
  }
}

static void disarm(const run_t *r) {
  armed = 0;
  if (!r->nomem) simcuda_fail(r->entry, CUDA_SUCCESS, 0);
}

static int life(const run_t *r) {
  CUstream s[NSTREAMS];
  uvcuda_future_t f[NFUT], x;
  uvcuda_options_t o;
  uvcuda_loop_t ul;
  uv_loop_t uv;
  tally_t t;
  tu_gate_t g;
  CUcontext cur = NULL;
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  int i, round, rc;

  if (tu_setup(0) != 0) return 77;
  for (i = 0; i < NSTREAMS; i++) s[i] = tu_stream();
  if (r->bare) CHECK(tu.cuCtxSetCurrent(NULL) == CUDA_SUCCESS);
  CHECK(uv_loop_init(&uv) == 0);
  uvcuda_options_init(&o);
  o.completion = r->completion;
  o.flags = r->flags;
  memset(&t, 0, sizeof(t));
  t.expect = r->nomem ? UVCUDA_ENOMEM : UVCUDA_ECUDA(CUDA_ERROR_OUT_OF_MEMORY);

  if (r->reset) tu_gate_init(&g); /* tu's calls before anything fails */
  arm(r);
  rc = uvcuda_loop_init(&uv, &ul, &o);
  if (rc != 0) {
    disarm(r);
    CHECK(rc == t.expect);
    CHECK(!r->nomem || hit());
    CHECK(uv_run(&uv, UV_RUN_NOWAIT) == 0); /* nothing was left on it */
    CHECK(uv_loop_close(&uv) == 0);
    if (__lsan_do_leak_check) __lsan_do_leak_check();
    return HANDLED;
  }
  for (i = 0; i < NFUT; i++) {
    f[i].data = &t;
    CHECK(uvcuda_future_init(&ul, &f[i]) == 0);
  }
  x.data = &t;
  CHECK(uvcuda_future_init(&ul, &x) == 0);
  /* Twice: the second round reuses what the first one made. The first
   * also closes one future while it is pending (its cancellation). */
  for (round = 1; round <= 2; round++) {
    if (round == 2 && r->fault) tu_fault(s[NSTREAMS - 1]);
    for (i = 0; i < NFUT; i++)
      CHECK(uvcuda_future_start(&f[i], s[i % NSTREAMS], op_sleep, on_done) == 0);
    if (round == 1) {
      CHECK(uvcuda_future_start(&x, s[0], op_sleep, on_done) == 0);
      CHECK(uvcuda_future_close(&x, on_closed) == 0);
    }
    CHECK(tu_run_bounded(&uv, 20000) == 0);
    CHECK(t.calls == round * NFUT + 1);
  }
  CHECK(t.cancelled == 1 && t.closed == 1);
  if (r->reset) {
    /* One future waits behind a gate; the device is reset (by a loop's
     * thread, as recover-sim does): it fails, whatever the reset says. */
    int reset, started;
    tu_gate_hold(&g, s[0]);
    CHECK(uvcuda_future_start(&f[0], s[0], NULL, on_done) == 0);
    reset = uvcuda_device_reset(0);
    if (getenv("UVCUDA_TEST_VERBOSE"))
      fprintf(stderr, "refuse: %s: reset %s\n", what(r), uvcuda_err_name(reset));
    CHECK(reset == 0 || reset == t.expect);
    /* A device that can't be looked up is not reset: nothing is retired,
     * and the future still waits for its gate (api.md). */
    started = !(reset != 0 && strcmp(r->entry, "cuDeviceGet") == 0);
    if (!started) tu_gate_open(&g);
    CHECK(tu_run_bounded(&uv, 20000) == 0);
    CHECK(t.calls == 2 * NFUT + 2);
    if (started) CHECK(t.ok <= 2 * NFUT); /* the gated one was retired */
  }
  for (i = 0; i < NFUT; i++) CHECK(uvcuda_future_close(&f[i], on_closed) == 0);
  CHECK(tu_run_bounded(&uv, 20000) == 0);
  CHECK(t.closed == NFUT + 1);
  CHECK(uvcuda_loop_close(&ul, NULL) == 0);
  CHECK(tu_run_bounded(&uv, 20000) == 0);
  disarm(r);
  CHECK(uv_loop_close(&uv) == 0);
  /* Whatever failed, this thread's context and capture mode are its own
   * (a reset leaves no context current). The exceptions: an exchange that
   * puts the mode back, or a switch that puts the context back, refused;
   * the life's first exchange (switch) is one there, never one back. */
  CHECK(tu.cuCtxGetCurrent(&cur) == CUDA_SUCCESS);
  CHECK(cur == (r->bare ? NULL : tu_ctx) || r->reset ||
        (r->bare && r->nth != 1 && r->nth != EVERY &&
         strcmp(r->entry, "cuCtxSetCurrent") == 0)); /* a put-back refused */
  CHECK(tu.cuThreadExchangeStreamCaptureMode(&mode) == CUDA_SUCCESS);
  CHECK(mode == CU_STREAM_CAPTURE_MODE_GLOBAL ||
        (!r->nomem && r->nth != 1 &&
         strcmp(r->entry, "cuThreadExchangeStreamCaptureMode") == 0));

  if (getenv("UVCUDA_TEST_VERBOSE"))
    fprintf(stderr, "refuse: %s: %d ok, %d refused\n", what(r), t.ok, t.refused);
  /* Only the refusal (or a reset) may fail a future, and only if it
   * happened. */
  CHECK(t.other == 0);
  CHECK(r->reset || t.destroyed == 0);
  CHECK(r->fault || t.faulted == 0);
  CHECK(!r->fault || t.faulted + t.refused > 0); /* the fault was met */
  CHECK(!r->nomem || t.refused == 0 || hit());
  /* One refusal costs the one start it hit, not the context's future:
   * everything after it works (a refused query is no sticky fault). */
  CHECK(r->nth == EVERY || t.refused <= 1);
  if (!r->reset && !r->fault) { /* gone with a reset; dead after a fault */
    CHECK(tu.cuCtxSetCurrent(tu_ctx) == CUDA_SUCCESS);
    for (i = 0; i < NSTREAMS; i++) tu_stream_destroy(s[i]);
    tu_teardown();
  }
  if (__lsan_do_leak_check) __lsan_do_leak_check();
  return r->nomem && !hit() ? 0 : HANDLED;
}

static int child(void *arg) { return life(arg); }


/* ---- nomem ---- */

static void every_allocation_refused(void **state) {
  run_t r = *(const run_t *)*state;
  int rc;

  r.nomem = 1;
  for (r.n = 1;; r.n++) {
    rc = tu_in_child(child, &r);
    if (rc == 77) skip();
    if (rc == 0) break; /* fewer than n allocations: every one was tried */
    if (rc != HANDLED) fail_msg("%s: child exit %d", what(&r), rc);
    if (r.n > 400) fail_msg("over 400 allocations in one loop's life");
  }
  print_message("%s%s: %ld allocation(s), each refused once\n",
                uvcuda_completion_name(r.completion), label(&r), r.n - 1);
}

/* ---- drvfail ---- */

static uint64_t *calls; /* per entry point, shared with the children */

/* The calls of each entry point the library resolves, in one life where
 * nothing fails: only entries and calls that happen are made to fail. */
static int count_calls(void *arg) {
  run_t r = *(const run_t *)arg;
  uint64_t before[MAXENTRIES];
  int i, n = uvcuda__driver_table_size(), rc;
  if (tu_setup(0) != 0) return 77;
  for (i = 0; i < n; i++)
    before[i] = simcuda_call_count(uvcuda__driver_table_name(i));
  r.entry = "cuInit"; /* not called again once loaded: nothing fails */
  r.nth = EVERY;
  if ((rc = life(&r)) != HANDLED) return rc;
  for (i = 0; i < n; i++)
    calls[i] = simcuda_call_count(uvcuda__driver_table_name(i)) - before[i];
  return 0;
}

static void every_driver_call_fails(void **state) {
  static const int nths[] = {1, 2, 3, 4, EVERY};
  int slow = getenv("UVCUDA_TEST_SLOW") != NULL;
  int i, j, n = uvcuda__driver_table_size(), runs = 0, rc;
  run_t r = *(const run_t *)*state;

  assert_true(n <= MAXENTRIES);
  memset(calls, 0, MAXENTRIES * sizeof(*calls));
  if ((rc = tu_in_child(count_calls, &r)) == 77) skip();
  if (rc != 0) fail_msg("the life where nothing fails: child exit %d", rc);
  for (i = 0; i < n; i++) {
    if (calls[i] == 0) continue;
    r.entry = uvcuda__driver_table_name(i);
    for (j = 0; j < (int)(sizeof(nths) / sizeof(nths[0])); j++) {
      r.nth = nths[j];
      if (r.nth != EVERY && (uint64_t)r.nth > calls[i]) continue;
      if (slow && r.nth != 1 && r.nth != EVERY) continue;
      rc = tu_in_child(child, &r);
      if (rc != HANDLED) fail_msg("%s: child exit %d", what(&r), rc);
      runs++;
    }
  }
  print_message("%s%s: %d lives, each with one entry point failing\n",
                uvcuda_completion_name(r.completion), label(&r), runs);
}

/* Under UVCUDA_TEST_SLOW, the cases marked slow_too, moved to the front:
 * how many there are. */
static size_t picked(struct CMUnitTest *t, size_t n) {
  size_t i, k = 0;
  if (!getenv("UVCUDA_TEST_SLOW")) return n;
  for (i = 0; i < n; i++) {
    if (((const run_t *)t[i].initial_state)->slow_too) {
      struct CMUnitTest x = t[k];
      t[k++] = t[i];
      t[i] = x;
    }
  }
  return k;
}

int main(int argc, char **argv) {
#define SPEC(name, c, ...) \
  static const run_t name = {.completion = UVCUDA_COMPLETION_##c, __VA_ARGS__}
  SPEC(auto_, AUTO, .slow_too = 1);
  SPEC(hostfn, HOSTFN, .slow_too = 1);
  SPEC(adaptive, AUTO, .flags = UVCUDA_OPT_ADAPTIVE);
  SPEC(poll, POLL, .slow_too = 0);
  SPEC(auto_bare, AUTO, .bare = 1, .slow_too = 1);
  SPEC(auto_reset, AUTO, .reset = 1);
  SPEC(hostfn_reset, HOSTFN, .reset = 1);
  SPEC(auto_fault, AUTO, .fault = 1, .slow_too = 1);
  SPEC(hostfn_fault, HOSTFN, .fault = 1);
#undef SPEC
  struct CMUnitTest nomem[] = {
      cmocka_unit_test_prestate(every_allocation_refused, (void *)&auto_),
      cmocka_unit_test_prestate(every_allocation_refused, (void *)&hostfn),
      cmocka_unit_test_prestate(every_allocation_refused, (void *)&adaptive),
      cmocka_unit_test_prestate(every_allocation_refused, (void *)&poll),
      cmocka_unit_test_prestate(every_allocation_refused, (void *)&auto_fault),
      cmocka_unit_test_prestate(every_allocation_refused, (void *)&hostfn_fault),
  };
  struct CMUnitTest drvfail[] = {
      cmocka_unit_test_prestate(every_driver_call_fails, (void *)&auto_),
      cmocka_unit_test_prestate(every_driver_call_fails, (void *)&hostfn),
      cmocka_unit_test_prestate(every_driver_call_fails, (void *)&adaptive),
      cmocka_unit_test_prestate(every_driver_call_fails, (void *)&poll),
      cmocka_unit_test_prestate(every_driver_call_fails, (void *)&auto_reset),
      cmocka_unit_test_prestate(every_driver_call_fails, (void *)&hostfn_reset),
      cmocka_unit_test_prestate(every_driver_call_fails, (void *)&auto_fault),
      cmocka_unit_test_prestate(every_driver_call_fails, (void *)&auto_bare),
  };

  if (argc > 1 && strcmp(argv[1], "nomem") == 0)
    return _cmocka_run_group_tests("nomem", nomem, picked(nomem, 6), NULL, NULL);
  if (argc > 1 && strcmp(argv[1], "drvfail") == 0) {
    calls = mmap(NULL, MAXENTRIES * sizeof(*calls), PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (calls == MAP_FAILED) return 1;
    return _cmocka_run_group_tests("drvfail", drvfail, picked(drvfail, 8), NULL,
                                   NULL);
  }
  fprintf(stderr, "usage: %s nomem|drvfail\n", argv[0]);
  return 2;
}
