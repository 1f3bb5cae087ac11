/* Out of host memory, at every allocation the library makes: a loop's life
 * (init, futures on three streams started twice, close) runs in a fresh
 * child with its Nth allocation refused, for N = 1, 2, ... until a run
 * makes fewer than N. Each run must either complete or give
 * UVCUDA_ENOMEM (from uvcuda_loop_init, or through a future's callback,
 * exactly once), close cleanly, leave the uv loop closable and leak
 * nothing (valgrind and LSan check each child). The library is linked
 * statically with malloc, calloc and realloc wrapped; only the loop
 * thread's calls while a run is armed are counted. */
#include "tu.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);

static int armed;
static pthread_t armed_thread;
static long fail_at; /* the allocation refused, 1-based */
static long seen;    /* allocations counted so far */
static int hit;      /* fail_at was reached */

static int refuse(void) {
  if (!armed || !pthread_equal(pthread_self(), armed_thread)) return 0;
  if (++seen != fail_at) return 0;
  hit = 1;
  return 1;
}

void *__wrap_malloc(size_t n) { return refuse() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t size) {
  return refuse() ? NULL : __real_calloc(n, size);
}
void *__wrap_realloc(void *p, size_t n) {
  return refuse() ? NULL : __real_realloc(p, n);
}

/* LSan checks at exit, but a child leaves with _exit: ask it directly. */
extern void __lsan_do_leak_check(void) __attribute__((weak));

#define NSTREAMS 3
#define NFUT 6

typedef struct {
  uvcuda_completion_t completion;
  uint32_t flags;
  long n; /* the allocation to refuse */
} run_t;

typedef struct {
  int calls, ok, nomem, other, closed;
} tally_t;

/* The child's exit status: 0 the run made fewer than n allocations (all
 * done), 42 the refusal was met and handled, 10..41 a check failed (and
 * 1, 23: what ASan or LSan exit with). */
#define HANDLED 42
#define CHECK(cond)                                                     \
  do {                                                                  \
    if (!(cond)) {                                                      \
      fprintf(stderr, "nomem: check failed: %s (line %d, n=%ld)\n", #cond, \
              __LINE__, fail_at);                                       \
      return 10 + __LINE__ % 30;                                        \
    }                                                                   \
  } while (0)

static int op_sleep(uvcuda_future_t *f, uvcuda_stream_t s) {
  (void)f;
  tu_sleep((CUstream)s, 20000);
  return 0;
}

static void on_done(uvcuda_future_t *f, int status) {
  tally_t *t = f->data;
  t->calls++;
  if (status == 0)
    t->ok++;
  else if (status == UVCUDA_ENOMEM)
    t->nomem++;
  else
    t->other++;
}

static void on_closed(uvcuda_future_t *f) { ((tally_t *)f->data)->closed++; }

static int loop_life(const run_t *r) {
  CUstream s[NSTREAMS];
  uvcuda_future_t f[NFUT];
  uvcuda_options_t o;
  uvcuda_loop_t ul;
  uv_loop_t uv;
  tally_t t;
  int i, round, rc;

  if (tu_setup(0) != 0) return 77;
  for (i = 0; i < NSTREAMS; i++) s[i] = tu_stream();
  CHECK(uv_loop_init(&uv) == 0);
  uvcuda_options_init(&o);
  o.completion = r->completion;
  o.flags = r->flags;
  memset(&t, 0, sizeof(t));

  fail_at = r->n;
  armed_thread = pthread_self();
  armed = 1;
  rc = uvcuda_loop_init(&uv, &ul, &o);
  if (rc != 0) {
    armed = 0;
    CHECK(rc == UVCUDA_ENOMEM && hit);
    CHECK(uv_run(&uv, UV_RUN_NOWAIT) == 0); /* nothing was left on it */
    CHECK(uv_loop_close(&uv) == 0);
    if (__lsan_do_leak_check) __lsan_do_leak_check();
    return HANDLED;
  }
  for (i = 0; i < NFUT; i++) {
    f[i].data = &t;
    CHECK(uvcuda_future_init(&ul, &f[i]) == 0);
  }
  /* Twice: the second round reuses what the first one made. */
  for (round = 1; round <= 2; round++) {
    for (i = 0; i < NFUT; i++)
      CHECK(uvcuda_future_start(&f[i], s[i % NSTREAMS], op_sleep, on_done) == 0);
    CHECK(tu_run_bounded(&uv, 20000) == 0);
    CHECK(t.calls == round * NFUT);
  }
  for (i = 0; i < NFUT; i++) CHECK(uvcuda_future_close(&f[i], on_closed) == 0);
  CHECK(tu_run_bounded(&uv, 20000) == 0);
  CHECK(t.closed == NFUT);
  CHECK(uvcuda_loop_close(&ul, NULL) == 0);
  CHECK(tu_run_bounded(&uv, 20000) == 0);
  armed = 0;
  CHECK(uv_loop_close(&uv) == 0);

  /* Only the refusal may fail a future, and it did not go unnoticed. */
  CHECK(t.other == 0);
  CHECK(t.nomem == 0 || hit);
  for (i = 0; i < NSTREAMS; i++) tu_stream_destroy(s[i]);
  tu_teardown();
  if (__lsan_do_leak_check) __lsan_do_leak_check();
  return hit ? HANDLED : 0;
}

static int child(void *arg) { return loop_life(arg); }

static void every_allocation_refused(void **state) {
  const run_t *spec = *state;
  run_t r = *spec;
  int rc;

  for (r.n = 1;; r.n++) {
    rc = tu_in_child(child, &r);
    if (rc == 77) skip();
    if (rc == 0) break; /* fewer than n allocations: every one was tried */
    if (rc != HANDLED)
      fail_msg("allocation %ld refused: child exit %d", r.n, rc);
    if (r.n > 400) fail_msg("over 400 allocations in one loop's life");
  }
  print_message("%s%s: %ld allocation(s), each refused once\n",
                uvcuda_completion_name(r.completion),
                r.flags & UVCUDA_OPT_ADAPTIVE ? " adaptive" : "", r.n - 1);
}

int main(void) {
  static const run_t auto_ = {UVCUDA_COMPLETION_AUTO, 0, 0},
                     adaptive = {UVCUDA_COMPLETION_AUTO, UVCUDA_OPT_ADAPTIVE, 0},
                     hostfn = {UVCUDA_COMPLETION_HOSTFN, 0, 0},
                     poll = {UVCUDA_COMPLETION_POLL, 0, 0};
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_prestate(every_allocation_refused, (void *)&auto_),
      cmocka_unit_test_prestate(every_allocation_refused, (void *)&adaptive),
      cmocka_unit_test_prestate(every_allocation_refused, (void *)&hostfn),
      cmocka_unit_test_prestate(every_allocation_refused, (void *)&poll),
  };
  /* Every run in a child of its own, before this process loads the driver
   * (a child forked after the load could not use it). */
  return cmocka_run_group_tests_name("nomem", tests, NULL, NULL);
}
