/* flag-thread: enqueue, then cuStreamWriteValue32 of a sequence number to
 * a host-pinned flag; one dedicated thread spins on the flag and calls
 * uv_async_send. */
#include "bench.h"

#include <pthread.h>

typedef struct {
  run_t run;
  uv_async_t fas;
  int fas_on;
  pthread_t thr;
  int thr_on;
  atomic_int stop;
  uint32_t seq;
} flag_run_t;

static void *flag_main(void *arg) {
  flag_run_t *m = arg;
  uint32_t last = 0, v; /* flag_open stored 0 before creating this thread:
                         * a write landing before we first look still counts */
  while (!atomic_load_explicit(&m->stop, memory_order_relaxed)) {
    v = __atomic_load_n(bench.flag, __ATOMIC_ACQUIRE);
    if (v != last) {
      last = v;
      uv_async_send(&m->fas);
    } else {
      cpu_relax();
    }
  }
  return NULL;
}

static void on_fas(uv_async_t *h) {
  flag_run_t *m = container_of(h, flag_run_t, fas);
  uint32_t v = __atomic_load_n(bench.flag, __ATOMIC_ACQUIRE);
  if (!m->run.done && m->seq != 0 && (int32_t)(v - m->seq) >= 0) {
    m->run.t1 = uv_hrtime();
    m->run.done = 1;
  }
}

static int flag_open(run_t *r) {
  flag_run_t *m = container_of(r, flag_run_t, run);
  __atomic_store_n(bench.flag, 0, __ATOMIC_RELEASE);
  m->seq = 0;
  atomic_init(&m->stop, 0);
  uv_async_init(r->loop, &m->fas, on_fas);
  m->fas_on = 1;
  if (pthread_create(&m->thr, NULL, flag_main, m) != 0) {
    snprintf(r->err, sizeof(r->err), "pthread_create failed");
    return -1;
  }
  m->thr_on = 1;
  return 0;
}

static int flag_sample(run_t *r, uint64_t *t0) {
  flag_run_t *m = container_of(r, flag_run_t, run);
  CUresult q;
  if ((q = enqueue_flagged(r, &m->seq, bench.flag_d, t0)) != CUDA_SUCCESS) {
    snprintf(r->err, sizeof(r->err), "CUDA: %s", cuname(q));
    return -2;
  }
  if (wait_flag(r->loop, &r->done, r->timeout_ns)) return -1;
  return 0;
}

/* The spinning thread may go in any case. */
static void flag_stop(run_t *r) {
  flag_run_t *m = container_of(r, flag_run_t, run);
  if (!m->thr_on) return;
  atomic_store(&m->stop, 1);
  pthread_join(m->thr, NULL);
  m->thr_on = 0;
}

static int flag_close(run_t *r) {
  flag_run_t *m = container_of(r, flag_run_t, run);
  if (m->fas_on) uv_close((uv_handle_t *)&m->fas, NULL);
  return 0;
}

const method_ops_t flag_thread_ops = {sizeof(flag_run_t), flag_open, NULL,
                                      flag_sample, NULL, flag_stop,
                                      flag_close};
