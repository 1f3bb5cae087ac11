/* The floors, with no loop in the wait: raw-spin enqueues and spins on
 * cuStreamQuery on the calling thread; memop-spin enqueues, then a
 * cuStreamWriteValue32 of a sequence number to a host-pinned word, and
 * spins on that word: the floor of any wait on a GPU-written flag, as
 * uvcuda's counters are. nap-spin is memop-spin that first sleeps until
 * NAP_LEAD_NS before the kernel's known end: the floor of any wait that
 * lets its thread sleep, as a pre-woken loop does. */
#include "bench.h"

#include <errno.h>
#include <time.h>

/* Wide enough that the default 50 us timer slack still wakes it early. */
#define NAP_LEAD_NS (100 * US)

typedef struct {
  run_t run;
  uint32_t seq;
} memop_run_t;

static int raw_sample(run_t *r, uint64_t *t0) {
  uint64_t spins = 0;
  CUresult q;
  *t0 = uv_hrtime();
  if ((q = enqueue_work(r->wl, r->stream)) != CUDA_SUCCESS) goto cuda_err;
  r->t_enq = uv_hrtime();
  while ((q = bench.cu.cuStreamQuery(r->stream)) == CUDA_ERROR_NOT_READY) {
    if ((++spins & 1023) == 0 && uv_hrtime() - *t0 > r->timeout_ns) return -1;
  }
  r->t1 = uv_hrtime();
  if (q != CUDA_SUCCESS) goto cuda_err;
  return 0;
cuda_err:
  snprintf(r->err, sizeof(r->err), "CUDA: %s", cuname(q));
  return -2;
}

const method_ops_t raw_spin_ops = {sizeof(run_t), NULL, NULL, raw_sample,
                                   NULL, NULL, NULL};

static int memop_open(run_t *r) {
  memop_run_t *m = container_of(r, memop_run_t, run);
  __atomic_store_n(bench.mflag, 0, __ATOMIC_RELEASE);
  m->seq = 0;
  return 0;
}

/* What any flag-based wait pays, on this thread; `nap`: asleep first
 * until NAP_LEAD_NS before the end it is told (an oracle: the workload's
 * own length), so that only what sleeping costs (the wake-up, and the
 * caches and clocks of an idle core for the next launch) sets nap-spin
 * apart from memop-spin. */
static int flag_sample(run_t *r, uint64_t *t0, int nap) {
  memop_run_t *m = container_of(r, memop_run_t, run);
  uint64_t spins = 0, until;
  struct timespec ts;
  CUresult q;
  if ((q = enqueue_flagged(r, &m->seq, bench.mflag_d, t0)) != CUDA_SUCCESS) {
    snprintf(r->err, sizeof(r->err), "CUDA: %s", cuname(q));
    return -2;
  }
  r->t_enq = uv_hrtime();
  if (nap && r->wl->ns > NAP_LEAD_NS) {
    until = *t0 + r->wl->ns - NAP_LEAD_NS; /* uv_hrtime: CLOCK_MONOTONIC */
    ts.tv_sec = (time_t)(until / SEC);
    ts.tv_nsec = (long)(until % SEC);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
      ;
  }
  while ((int32_t)(__atomic_load_n(bench.mflag, __ATOMIC_ACQUIRE) - m->seq) <
         0) {
    if ((++spins & 1023) == 0 && uv_hrtime() - *t0 > r->timeout_ns) return -1;
  }
  r->t1 = uv_hrtime();
  return 0;
}

static int memop_sample(run_t *r, uint64_t *t0) { return flag_sample(r, t0, 0); }

static int nap_sample(run_t *r, uint64_t *t0) { return flag_sample(r, t0, 1); }

const method_ops_t memop_spin_ops = {sizeof(memop_run_t), memop_open, NULL,
                                     memop_sample, NULL, NULL, NULL};

const method_ops_t nap_spin_ops = {sizeof(memop_run_t), memop_open, NULL,
                                   nap_sample, NULL, NULL, NULL};
