/* Driver loading against the simulated driver. Each case runs in a fresh
 * child process, since loading happens once per process; the parent never
 * touches the driver. */
#define _GNU_SOURCE 1 /* RTLD_NEXT */
#include "tu.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"
#include "simcuda.h"
#include "simprobe.h"

/* A child reports the first failed check by its line number. */
#define CHECK(cond)                                                   \
  do {                                                                \
    if (!(cond)) {                                                    \
      fprintf(stderr, "child check failed: %s (line %d)\n", #cond, __LINE__); \
      return __LINE__ % 250 + 1;                                      \
    }                                                                 \
  } while (0)

static void expect_child(int (*fn)(void *), void *arg) {
  int rc = tu_in_child(fn, arg);
  if (rc != 0) fail_msg("child failed with status %d", rc);
}

static int c_loads(void *arg) {
  uvcuda_driver_info_t info;
  int i;
  void *p;
  (void)arg;
  CHECK(uvcuda_driver_load() == 0);
  CHECK(uvcuda_driver_dlerror() == NULL);
  CHECK(uvcuda_driver_info(&info) == 0);
  CHECK(support_driver_is_simulation() == 1);
  CHECK(info.driver_version == 13000);
  CHECK(info.device_count == 1);
  CHECK(info.memops32 == 1 && info.memops64 == 1);
  CHECK(info.host_task_sync == 0);
  CHECK(strstr(info.path, "simcuda") != NULL);
  /* Every required entry resolved, at its table version. */
  CHECK(uvcuda__drv.cuInit && uvcuda__drv.cuStreamWriteValue64 &&
        uvcuda__drv.cuStreamIsCapturing && uvcuda__drv.cuMemHostRegister);
  CHECK(uvcuda__drv.cuLaunchHostFunc_v2 == NULL);
  CHECK(uvcuda__driver_table_size() > 20);
  for (i = 0; i < uvcuda__driver_table_size(); i++) {
    const char *n = uvcuda__driver_table_name(i);
    if (strcmp(n, "cuLaunchHostFunc_v2") == 0) {
      CHECK(!uvcuda__driver_table_resolved(i)); /* 13.0: absent */
      continue;
    }
    CHECK(uvcuda__driver_table_resolved(i));
    CHECK(uvcuda_driver_symbol(n, uvcuda__driver_table_version(i), &p) == 0);
    CHECK(p != NULL);
  }
  CHECK(uvcuda_driver_symbol("cuNoSuchThing", 12000, &p) == UVCUDA_ENOSYM);
  CHECK(uvcuda_driver_symbol("cuInit", 99000, &p) == UVCUDA_ENOTSUP);
  CHECK(uvcuda_driver_symbol("cuInit", 2000, &p) == 0 && p != NULL);
  /* Names come from the driver once it is loaded. */
  CHECK(strcmp(uvcuda_err_name(UVCUDA_ECUDA(700)), "CUDA_ERROR_ILLEGAL_ADDRESS") == 0);
  CHECK(strlen(uvcuda_strerror(UVCUDA_ECUDA(700))) > 5);
  /* One the driver does not know either: its number, and no claim that
   * the driver is missing. */
  CHECK(strcmp(uvcuda_err_name(UVCUDA_ECUDA(5000)), "CUDA_ERROR_5000") == 0);
  CHECK(strstr(uvcuda_strerror(UVCUDA_ECUDA(5000)), "5000") != NULL);
  CHECK(strstr(uvcuda_strerror(UVCUDA_ECUDA(5000)), "without the driver") == NULL);
  CHECK(simcuda_call_count("cuInit") == 1);
  return 0;
}

static void loads_the_simulated_driver(void **state) {
  (void)state;
  expect_child(c_loads, NULL);
}

static int c_missing(void *arg) {
  uv_loop_t loop;
  uvcuda_loop_t ul;
  (void)arg;
  setenv("UVCUDA_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
  CHECK(uvcuda_driver_load() == UVCUDA_ENODRIVER);
  CHECK(uvcuda_driver_dlerror() != NULL);
  CHECK(strstr(uvcuda_driver_dlerror(), "nonexistent") != NULL);
  uv_loop_init(&loop);
  CHECK(uvcuda_loop_init(&loop, &ul, NULL) == UVCUDA_ENODRIVER);
  uv_loop_close(&loop);
  return 0;
}

static void missing_driver(void **state) {
  (void)state;
  expect_child(c_missing, NULL);
}

static int c_not_a_driver(void *arg) {
  (void)arg;
  setenv("UVCUDA_LIBCUDA", "libm.so.6", 1); /* loads, but no cuGetProcAddress_v2 */
  CHECK(uvcuda_driver_load() == UVCUDA_ENOSYM);
  CHECK(strstr(uvcuda_driver_dlerror(), "cuGetProcAddress_v2") != NULL);
  return 0;
}

static void library_without_entry_point(void **state) {
  (void)state;
  expect_child(c_not_a_driver, NULL);
}

static int c_old(void *arg) {
  (void)arg;
  setenv("SIMCUDA_DRIVER_VERSION", "11080", 1);
  CHECK(uvcuda_driver_load() == UVCUDA_EDRIVEROLD);
  CHECK(strstr(uvcuda_driver_dlerror(), "11080") != NULL);
  CHECK(strcmp(uvcuda_err_name(UVCUDA_EDRIVEROLD), "UVCUDA_EDRIVEROLD") == 0);
  return 0;
}

static void driver_too_old(void **state) {
  (void)state;
  expect_child(c_old, NULL);
}

static int c_missing_required(void *arg) {
  (void)arg;
  setenv("SIMCUDA_HIDE", "cuStreamIsCapturing", 1);
  CHECK(uvcuda_driver_load() == UVCUDA_ENOSYM);
  CHECK(strstr(uvcuda_driver_dlerror(), "cuStreamIsCapturing") != NULL);
  return 0;
}

static void missing_required_symbol(void **state) {
  (void)state;
  expect_child(c_missing_required, NULL);
}

static int c_v2(void *arg) {
  uvcuda_driver_info_t info;
  uv_loop_t loop;
  uvcuda_loop_t ul;
  uvcuda_options_t o;
  int hide = arg != NULL;
  setenv("SIMCUDA_DRIVER_VERSION", "13020", 1);
  if (hide) setenv("SIMCUDA_HIDE", "cuLaunchHostFunc_v2", 1);
  CHECK(uvcuda_driver_info(&info) == 0);
  CHECK(info.driver_version == 13020);
  CHECK(info.host_task_sync == !hide);
  CHECK((uvcuda__drv.cuLaunchHostFunc_v2 != NULL) == !hide);
  uvcuda_options_init(&o);
  o.completion = UVCUDA_COMPLETION_HOSTFN_SPIN;
  uv_loop_init(&loop);
  if (hide) {
    CHECK(uvcuda_loop_init(&loop, &ul, &o) == UVCUDA_ENOTSUP);
  } else {
    CHECK(uvcuda_loop_init(&loop, &ul, &o) == 0);
    CHECK(uvcuda_loop_completion(&ul) == UVCUDA_COMPLETION_HOSTFN_SPIN);
    CHECK(uvcuda_loop_close(&ul, NULL) == 0);
    uv_run(&loop, UV_RUN_DEFAULT);
  }
  CHECK(uv_loop_close(&loop) == 0);
  return 0;
}

static void optional_symbol_present_and_missing(void **state) {
  (void)state;
  expect_child(c_v2, NULL);
  expect_child(c_v2, (void *)1);
}

static int c_cuinit(void *arg) {
  (void)arg;
  setenv("SIMCUDA_FAIL", "cuInit=100", 1);
  CHECK(uvcuda_driver_load() == UVCUDA_ECUDA(CUDA_ERROR_NO_DEVICE));
  CHECK(uvcuda_cuda_result(uvcuda_driver_load()) == CUDA_ERROR_NO_DEVICE);
  CHECK(strstr(uvcuda_driver_dlerror(), "cuInit") != NULL);
  return 0;
}

static void failing_cuinit(void **state) {
  (void)state;
  expect_child(c_cuinit, NULL);
}

static int c_no_memops(void *arg) {
  uvcuda_driver_info_t info;
  (void)arg;
  setenv("SIMCUDA_FAIL", "cuStreamWriteValue64=801", 1);
  CHECK(uvcuda_driver_info(&info) == 0);
  CHECK(info.memops64 == 0);
  CHECK(info.memops32 == 1);
  return 0;
}

static void memops_are_probed(void **state) {
  (void)state;
  expect_child(c_no_memops, NULL);
}

/* A driver call of the capability probe refused once (each entry point the
 * library resolves, at its first call after the load): uvcuda_driver_info
 * answers 0 with the full truth, or the refusal's own code; either way the
 * next call answers 0 and the full truth: a refusal is not remembered as
 * "no devices" or "no memops". Except the probe's own write: a refused
 * cuStreamWriteValue is the driver saying no, and reads as such. */
static int c_probe_refused(void *arg) {
  const char *entry = arg;
  uvcuda_driver_info_t a, b;
  int err, memop;
  CHECK(uvcuda_driver_load() == 0);
  memop = strncmp(entry, "cuStreamWriteValue", 18) == 0;
  simcuda_fail_nth(entry, CUDA_ERROR_NOT_PERMITTED, 1);
  err = uvcuda_driver_info(&a);
  simcuda_clear_failures();
  if (err != 0) {
    fprintf(stderr, "%s refused: %s\n", entry, uvcuda_err_name(err));
    CHECK(err == UVCUDA_ECUDA(CUDA_ERROR_NOT_PERMITTED));
    CHECK(a.driver_version == 13000 && a.path != NULL);
  } else {
    CHECK(a.device_count == 1);
    CHECK((a.memops32 && a.memops64) || memop);
  }
  CHECK(uvcuda_driver_info(&b) == 0);
  CHECK(b.device_count == 1 && b.driver_version == 13000);
  CHECK((b.memops32 && b.memops64) || (memop && err == 0));
  return 0;
}

static void a_refused_probe_is_asked_again(void **state) {
  int i;
  (void)state;
  for (i = 0; i < uvcuda__driver_table_size(); i++) {
    const char *n = uvcuda__driver_table_name(i);
    if (strcmp(n, "cuInit") == 0 || strcmp(n, "cuDriverGetVersion") == 0)
      continue; /* the load's, for the life of the process */
    if (tu_in_child(c_probe_refused, (void *)n) != 0)
      fail_msg("%s refused once: child failed", n);
  }
}

/* The driver refuses to register host memory for good (some VMs): the
 * probe's writes have nowhere to land, so uvcuda_driver_info answers 0
 * with no memops (before, it failed: the Node package's driverInfo()
 * threw), and asks again once registration works. */
static int c_registration_refused(void *arg) {
  uvcuda_driver_info_t a, b;
  (void)arg;
  CHECK(uvcuda_driver_load() == 0);
  simcuda_fail("cuMemHostRegister", CUDA_ERROR_NOT_SUPPORTED, -1);
  CHECK(uvcuda_driver_info(&a) == 0);
  CHECK(a.device_count == 1 && !a.memops32 && !a.memops64);
  simcuda_clear_failures();
  CHECK(uvcuda_driver_info(&b) == 0);
  CHECK(b.memops32 && b.memops64);
  return 0;
}

static void a_refused_registration_reads_as_no_memops(void **state) {
  (void)state;
  expect_child(c_registration_refused, NULL);
}

#define NTHREADS 8
static int results[NTHREADS];
static void *load_thread(void *arg) {
  results[(intptr_t)arg] = uvcuda_driver_load();
  return NULL;
}

static int c_concurrent(void *arg) {
  pthread_t t[NTHREADS];
  intptr_t i;
  (void)arg;
  for (i = 0; i < NTHREADS; i++) pthread_create(&t[i], NULL, load_thread, (void *)i);
  for (i = 0; i < NTHREADS; i++) pthread_join(t[i], NULL);
  for (i = 0; i < NTHREADS; i++) CHECK(results[i] == 0);
  CHECK(simcuda_call_count("cuInit") == 1);
  CHECK(simcuda_call_count("cuDriverGetVersion") == 1);
  return 0;
}

static void concurrent_first_use(void **state) {
  (void)state;
  expect_child(c_concurrent, NULL);
}

static int c_no_device(void *arg) {
  uvcuda_driver_info_t info;
  (void)arg;
  setenv("SIMCUDA_DEVICES", "0", 1);
  /* As the real driver: cuInit itself reports that there is no device. */
  CHECK(uvcuda_driver_info(&info) == UVCUDA_ECUDA(CUDA_ERROR_NO_DEVICE));
  CHECK(info.device_count == 0);
  /* The usual "no GPU here" failure says so by name, driver or not. */
  CHECK(strcmp(uvcuda_err_name(uvcuda_driver_load()), "CUDA_ERROR_NO_DEVICE") == 0);
  CHECK(strcmp(uvcuda_strerror(uvcuda_driver_load()),
               "no CUDA-capable device is detected") == 0);
  return 0;
}

static void no_device(void **state) {
  (void)state;
  expect_child(c_no_device, NULL);
}

/* Thread creation refused on demand: libuv's uv_thread_create calls
 * pthread_create, and this executable's definition comes first in symbol
 * lookup; otherwise it passes the call on. */
static volatile int refuse_threads;
typedef int (*pthread_create_fn)(pthread_t *, const pthread_attr_t *,
                                 void *(*)(void *), void *);

int pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *),
                   void *arg) {
  static pthread_create_fn real;
  if (refuse_threads) return EAGAIN;
  if (real == NULL) {
    void *p = dlsym(RTLD_NEXT, "pthread_create");
    memcpy(&real, &p, sizeof(p));
  }
  return real(t, a, fn, arg);
}

static void on_ul_closed(uvcuda_loop_t *ul) { *(int *)ul->data = 1; }

static int open_close(uv_loop_t *loop) {
  uvcuda_loop_t ul;
  int closed = 0;
  CHECK(uvcuda_loop_init(loop, &ul, NULL) == 0);
  ul.data = &closed;
  CHECK(uvcuda_loop_close(&ul, on_ul_closed) == 0);
  CHECK(uv_run(loop, UV_RUN_DEFAULT) == 0);
  CHECK(closed == 1);
  return 0;
}

/* Out of threads (the reactor's can't start): a documented error,
 * UVCUDA_ENOMEM, and nothing left on the loop; it works once threads can
 * be made again. */
static int c_no_threads(void *arg) {
  uv_loop_t loop;
  uvcuda_loop_t ul;
  int rc;
  (void)arg;
  CHECK(uvcuda_driver_load() == 0);
  CHECK(uv_loop_init(&loop) == 0);
  /* Once with threads: what the driver and the context records start is
   * there before threads are refused; the last close joins the reactor. */
  if ((rc = open_close(&loop)) != 0) return rc;
  refuse_threads = 1;
  rc = uvcuda_loop_init(&loop, &ul, NULL);
  refuse_threads = 0;
  if (rc != UVCUDA_ENOMEM)
    fprintf(stderr, "uvcuda_loop_init without threads: %s\n", uvcuda_err_name(rc));
  CHECK(rc == UVCUDA_ENOMEM);
  CHECK(uv_run(&loop, UV_RUN_NOWAIT) == 0);
  if ((rc = open_close(&loop)) != 0) return rc;
  CHECK(uv_loop_close(&loop) == 0);
  return 0;
}

static void out_of_threads_is_enomem(void **state) {
  (void)state;
  expect_child(c_no_threads, NULL);
}

/* ---- fork ---- */

/* What a process forked after the driver was loaded inherits: a loop with
 * one future pending (armed, its stream held by a gate) and one idle. */
typedef struct {
  uv_loop_t uv, uv2;
  uvcuda_loop_t ul, ul2; /* ul2: POLL, its idle handle busy at the fork */
  uvcuda_future_t pending, idle, polled;
  CUstream s;
  int calls, status;
} forked_t;

static void on_forked_done(uvcuda_future_t *f, int status) {
  forked_t *k = f->data;
  k->calls++;
  if (status != 0) k->status = status;
}

/* In the child: every call that would reach the driver, the reactor or an
 * inherited object is refused with UVCUDA_EFORKED (CUDA can't be used in
 * a child forked after cuInit); nothing hangs, and pure calls still work. */
static int c_forked_child(void *arg) {
  forked_t *k = arg;
  uvcuda_driver_info_t info;
  uvcuda_future_t g;
  uvcuda_loop_t ul2;
  uvcuda_stats_t st;
  uv_loop_t fresh;
  void *p = &p;

  CHECK(uvcuda_driver_load() == UVCUDA_EFORKED);
  CHECK(uvcuda_driver_load() == UVCUDA_EFORKED); /* and stays so */
  CHECK(uvcuda_driver_dlerror() == NULL);        /* the load did not fail */
  CHECK(uvcuda_driver_info(&info) == UVCUDA_EFORKED);
  CHECK(uvcuda_driver_symbol("cuInit", 2000, &p) == UVCUDA_EFORKED);
  CHECK(p == NULL);
  CHECK(uvcuda_context_health(tu_ctx) == UVCUDA_EFORKED);
  CHECK(uvcuda_device_reset(0) == UVCUDA_EFORKED);
  CHECK(strcmp(uvcuda_err_name(UVCUDA_EFORKED), "UVCUDA_EFORKED") == 0);
  CHECK(strstr(uvcuda_strerror(UVCUDA_EFORKED), "fork") != NULL);
  /* A new loop: refused before anything is added to it. */
  CHECK(uv_loop_init(&fresh) == 0);
  CHECK(uvcuda_loop_init(&fresh, &ul2, NULL) == UVCUDA_EFORKED);
  CHECK(uv_run(&fresh, UV_RUN_NOWAIT) == 0);
  CHECK(uv_loop_close(&fresh) == 0);
  /* The parent's loop and futures: refused; their state reads as it was. */
  CHECK(uvcuda_future_init(&k->ul, &g) == UVCUDA_EFORKED);
  CHECK(uvcuda_future_start(&k->idle, k->s, NULL, on_forked_done) ==
        UVCUDA_EFORKED);
  CHECK(uvcuda_future_close(&k->pending, NULL) == UVCUDA_EFORKED);
  CHECK(uvcuda_future_close(&k->idle, NULL) == UVCUDA_EFORKED);
  CHECK(uvcuda_loop_close(&k->ul, NULL) == UVCUDA_EFORKED);
  CHECK(uvcuda_future_state(&k->pending) == UVCUDA_FUTURE_ARMED);
  CHECK(uvcuda_future_is_active(&k->pending));
  /* Its counters as they were; the reactor's, which stayed behind, read
   * 0, and reading them never waits for its lock (held at the fork,
   * maybe). */
  CHECK(uvcuda_loop_stats(&k->ul, &st) == 0 && st.started == 1);
  CHECK(st.reactor_polls == 0 && st.reactor_sleeps == 0 && st.reactor_cpu_ns == 0);
  /* Running the parent's loops calls nothing of the parent's; one whose
   * idle handle was busy (POLL) stops polling and lets its loop end. */
  CHECK(uv_loop_fork(&k->uv) == 0);
  CHECK(uv_run(&k->uv, UV_RUN_NOWAIT) >= 0);
  CHECK(uv_loop_fork(&k->uv2) == 0);
  CHECK(uv_run(&k->uv2, UV_RUN_DEFAULT) == 0);
  CHECK(k->calls == 0);
  return 0;
}

static int c_fork_after_load(void *arg) {
  forked_t k;
  tu_gate_t gate;
  uvcuda_options_t o;
  int rc;
  (void)arg;

  memset(&k, 0, sizeof(k));
  CHECK(tu_setup(0) == 0);
  CHECK(uv_loop_init(&k.uv) == 0);
  CHECK(uvcuda_loop_init(&k.uv, &k.ul, NULL) == 0);
  uvcuda_options_init(&o);
  o.completion = UVCUDA_COMPLETION_POLL;
  CHECK(uv_loop_init(&k.uv2) == 0);
  CHECK(uvcuda_loop_init(&k.uv2, &k.ul2, &o) == 0);
  k.s = tu_stream();
  tu_gate_init(&gate);
  tu_gate_hold(&gate, k.s);
  CHECK(uvcuda_future_init(&k.ul, &k.pending) == 0);
  CHECK(uvcuda_future_init(&k.ul, &k.idle) == 0);
  CHECK(uvcuda_future_init(&k.ul2, &k.polled) == 0);
  k.pending.data = k.idle.data = k.polled.data = &k;
  CHECK(uvcuda_future_start(&k.pending, k.s, NULL, on_forked_done) == 0);
  CHECK(uvcuda_future_start(&k.polled, k.s, NULL, on_forked_done) == 0);
  while (uvcuda_future_state(&k.pending) != UVCUDA_FUTURE_ARMED)
    uv_run(&k.uv, UV_RUN_NOWAIT); /* the spin budget runs out */

  rc = tu_in_child(c_forked_child, &k);
  if (rc != 0) fprintf(stderr, "forked child: status %d\n", rc);
  CHECK(rc == 0);

  /* The parent goes on as if nothing happened. */
  CHECK(uvcuda_driver_load() == 0);
  tu_gate_open(&gate);
  CHECK(tu_run_bounded(&k.uv, 10000) == 0);
  CHECK(tu_run_bounded(&k.uv2, 10000) == 0);
  CHECK(k.calls == 2 && k.status == 0);
  CHECK(uvcuda_future_close(&k.pending, NULL) == 0);
  CHECK(uvcuda_future_close(&k.idle, NULL) == 0);
  CHECK(uvcuda_future_close(&k.polled, NULL) == 0);
  CHECK(uv_run(&k.uv, UV_RUN_DEFAULT) == 0); /* their close callbacks */
  CHECK(uv_run(&k.uv2, UV_RUN_DEFAULT) == 0);
  CHECK(uvcuda_loop_close(&k.ul, NULL) == 0);
  CHECK(uvcuda_loop_close(&k.ul2, NULL) == 0);
  CHECK(uv_run(&k.uv, UV_RUN_DEFAULT) == 0);
  CHECK(uv_run(&k.uv2, UV_RUN_DEFAULT) == 0);
  CHECK(uv_loop_close(&k.uv) == 0);
  CHECK(uv_loop_close(&k.uv2) == 0);
  tu_gate_free(&gate);
  tu_stream_destroy(k.s);
  tu_teardown();
  return 0;
}

static void a_child_forked_after_load_is_refused(void **state) {
  (void)state;
  expect_child(c_fork_after_load, NULL);
}

/* Forked before any load: the child is a fresh process for uvcuda. */
static int c_fork_before_load(void *arg) {
  (void)arg;
  CHECK(uvcuda_driver_load() == 0);
  return 0;
}

static int c_forks_first(void *arg) {
  int rc;
  (void)arg;
  rc = tu_in_child(c_fork_before_load, NULL);
  CHECK(rc == 0);
  CHECK(uvcuda_driver_load() == 0);
  return 0;
}

static void a_child_forked_before_load_loads(void **state) {
  (void)state;
  expect_child(c_forks_first, NULL);
}

/* ---- a loop context's thread ---- */

/* The thread that set a loop context up has ended; a later thread is not
 * it, even where the C library hands that thread the same pthread_t (glibc
 * does, once the first was joined): its calls get UVCUDA_EWRONGTHREAD. The
 * context can never be closed now (its thread is gone), so this runs in a
 * child, which exits without closing it. */
typedef struct {
  uv_loop_t uv;
  uvcuda_loop_t ul;
  pthread_t owner, later;
  int init, stats, finit, lclose;
} ended_t;

static void *ended_owner(void *arg) {
  ended_t *k = arg;
  k->owner = pthread_self();
  if (uv_loop_init(&k->uv) == 0) k->init = uvcuda_loop_init(&k->uv, &k->ul, NULL);
  else k->init = -1;
  return NULL;
}

static void *ended_later(void *arg) {
  ended_t *k = arg;
  uvcuda_future_t f;
  uvcuda_stats_t st;
  k->later = pthread_self();
  k->stats = uvcuda_loop_stats(&k->ul, &st);
  k->finit = uvcuda_future_init(&k->ul, &f);
  k->lclose = uvcuda_loop_close(&k->ul, NULL);
  return NULL;
}

static int c_ended_thread(void *arg) {
  ended_t *k;
  pthread_t t;
  uvcuda_stats_t st;
  int i;
  (void)arg;
  for (i = 0; i < 4; i++) {
    k = calloc(1, sizeof(*k)); /* a live context each time: never freed */
    CHECK(k != NULL);
    CHECK(pthread_create(&t, NULL, ended_owner, k) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    CHECK(k->init == 0);
    CHECK(pthread_create(&t, NULL, ended_later, k) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    if (i == 0 && getenv("UVCUDA_TEST_VERBOSE"))
      fprintf(stderr, "same pthread_t: %d\n", pthread_equal(k->owner, k->later) != 0);
    CHECK(k->stats == UVCUDA_EWRONGTHREAD);
    CHECK(k->finit == UVCUDA_EWRONGTHREAD);
    CHECK(k->lclose == UVCUDA_EWRONGTHREAD);
    CHECK(uvcuda_loop_stats(&k->ul, &st) == UVCUDA_EWRONGTHREAD);
  }
  return 0;
}

static void a_later_thread_is_not_the_ended_one(void **state) {
  (void)state;
  expect_child(c_ended_thread, NULL);
}

/* Naming an error is not a use of CUDA: it loads nothing (a process that
 * prints an error before it forks its workers keeps them usable). CUDA's
 * names are the table's until the driver is loaded, the driver's after. */
static int c_names_before_load(void *arg) {
  int rc;
  (void)arg;
  CHECK(strcmp(uvcuda_err_name(UVCUDA_ECUDA(700)), "CUDA_ERROR_ILLEGAL_ADDRESS") == 0);
  CHECK(strlen(uvcuda_strerror(UVCUDA_ECUDA(700))) > 5);
  CHECK(strcmp(uvcuda_err_name(UVCUDA_ECUDA(5000)), "CUDA_ERROR_5000") == 0);
  CHECK(simcuda_call_count("cuInit") == 0);
  rc = tu_in_child(c_fork_before_load, NULL);
  CHECK(rc == 0);
  CHECK(uvcuda_driver_load() == 0);
  CHECK(strcmp(uvcuda_err_name(UVCUDA_ECUDA(700)), "CUDA_ERROR_ILLEGAL_ADDRESS") == 0);
  return 0;
}

static void naming_an_error_loads_nothing(void **state) {
  (void)state;
  expect_child(c_names_before_load, NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(loads_the_simulated_driver),
      cmocka_unit_test(naming_an_error_loads_nothing),
      cmocka_unit_test(missing_driver),
      cmocka_unit_test(library_without_entry_point),
      cmocka_unit_test(driver_too_old),
      cmocka_unit_test(missing_required_symbol),
      cmocka_unit_test(optional_symbol_present_and_missing),
      cmocka_unit_test(failing_cuinit),
      cmocka_unit_test(memops_are_probed),
      cmocka_unit_test(a_refused_probe_is_asked_again),
      cmocka_unit_test(a_refused_registration_reads_as_no_memops),
      cmocka_unit_test(concurrent_first_use),
      cmocka_unit_test(no_device),
      cmocka_unit_test(out_of_threads_is_enomem),
      cmocka_unit_test(a_child_forked_after_load_is_refused),
      cmocka_unit_test(a_child_forked_before_load_loads),
      cmocka_unit_test(a_later_thread_is_not_the_ended_one),
  };
  if (getenv("UVCUDA_LIBCUDA") == NULL) {
    fprintf(stderr, "UVCUDA_LIBCUDA must name the simulated driver\n");
    return 1;
  }
  return cmocka_run_group_tests_name("loader", tests, NULL, NULL);
}
