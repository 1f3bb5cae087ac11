/* Held streams: cuStreamWaitValue32(GEQ) on a host-pinned word that
 * hold_open() (progress.c) stores, and waiting for streams to go idle. The
 * scaling, delivery and idle sections hold streams; the wake section holds
 * one. Also the futures scaling and delivery keep pending on them. */
#include "bench.h"

#include <time.h>

static uint32_t hold_gen;

/* d: the hold word's device address in the streams' context. */
int hold_streams(CUstream *s, int n, CUdeviceptr d, char *err,
                 size_t errlen) {
  uint32_t gen = ++hold_gen;
  CUresult r;
  int i;
  atomic_store(&bench.hold_value, gen);
  for (i = 0; i < n; i++) {
    r = bench.cu.cuStreamWaitValue32(s[i], d, gen, CU_STREAM_WAIT_VALUE_GEQ);
    if (r != CUDA_SUCCESS) {
      snprintf(err, errlen, "cuStreamWaitValue32: %s", cuname(r));
      hold_open();
      return -1;
    }
  }
  return 0;
}

/* hold_streams over every scaling context. Each call takes a newer
 * generation; the waits are >=, so hold_open (the newest) opens them all. */
int hold_all(char *err, size_t errlen) {
  int k, rc = 0;
  for (k = 0; k < bench.nxctx && rc == 0; k++) {
    bench.cu.cuCtxSetCurrent(bench.xctx[k]);
    rc = hold_streams(bench.xpend[k], NPEND, bench.xhold_d[k], err, errlen);
  }
  bench.cu.cuCtxSetCurrent(bench.ctx);
  return rc;
}

/* Waits (sleeping) until every stream is idle; -1 on timeout. */
int drain_streams(CUstream *s, int n, uint64_t timeout_ns) {
  uint64_t end = uv_hrtime() + timeout_ns;
  struct timespec ts = {0, 50 * 1000};
  int i = 0;
  CUresult r;
  while (i < n) {
    r = bench.cu.cuStreamQuery(s[i]);
    if (r == CUDA_SUCCESS) {
      i++;
      continue;
    }
    if (r != CUDA_ERROR_NOT_READY) {
      printf("  cuStreamQuery: %s\n", cuname(r));
      bench.errors++;
      return -1;
    }
    if (uv_hrtime() > end) return -1;
    nanosleep(&ts, NULL);
    beat();
  }
  return 0;
}

void drain_all(uint64_t timeout_ns) {
  int k;
  for (k = 0; k < bench.nxctx; k++) {
    bench.cu.cuCtxSetCurrent(bench.xctx[k]);
    drain_streams(bench.xpend[k], NPEND, timeout_ns);
  }
  bench.cu.cuCtxSetCurrent(bench.ctx);
}

/* Pending future i: spread over every held stream of every context. */
CUstream pend_stream(int i) {
  int q = i % (bench.nxctx * NPEND);
  return bench.xpend[q / NPEND][q % NPEND];
}

void held_on_done(uvcuda_future_t *f, int status) {
  (void)f;
  bench.held.done++;
  if (status != 0 && status != UVCUDA_ECANCELED) bench.held.err++;
}

void held_on_closed(uvcuda_future_t *f) {
  (void)f;
  bench.held.closed++;
}

void held_wait_armed(uv_loop_t *loop, uvcuda_future_t *last) {
  uint64_t t0 = uv_hrtime();
  while (uvcuda_future_state(last) == UVCUDA_FUTURE_SPINNING &&
         uv_hrtime() - t0 < 5 * SEC)
    uv_run(loop, UV_RUN_NOWAIT);
}

int held_take_back(uv_loop_t *loop, uvcuda_future_t *pf, int n) {
  int i;
  hold_open();
  if (wait_count(loop, &bench.held.done, n, 60 * SEC) != 0) return -1;
  for (i = 0; i < n; i++) uvcuda_future_close(&pf[i], held_on_closed);
  if (wait_count(loop, &bench.held.closed, n, 30 * SEC) != 0) return -2;
  drain_all(30 * SEC);
  return 0;
}
