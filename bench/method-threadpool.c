/* threadpool: enqueue, then uv_queue_work whose work does
 * cuStreamSynchronize; after_work is the callback. */
#include "bench.h"

typedef struct {
  run_t run;
  uv_work_t req;
  volatile CUresult sync_rc;
} tp_run_t;

static void tp_work(uv_work_t *w) {
  tp_run_t *m = container_of(w, tp_run_t, req);
  ctx_on_this_thread();
  m->sync_rc = bench.cu.cuStreamSynchronize(m->run.stream);
}

static void tp_after(uv_work_t *w, int status) {
  tp_run_t *m = container_of(w, tp_run_t, req);
  m->run.t1 = uv_hrtime();
  m->run.status = status;
  m->run.done = 1;
}

static int tp_sample(run_t *r, uint64_t *t0) {
  tp_run_t *m = container_of(r, tp_run_t, run);
  CUresult q;
  m->req.data = r;
  *t0 = uv_hrtime();
  if ((q = enqueue_work(r->wl, r->stream)) != CUDA_SUCCESS) goto cuda_err;
  uv_queue_work(r->loop, &m->req, tp_work, tp_after);
  if (wait_flag(r->loop, &r->done, r->timeout_ns)) return -1;
  if ((q = m->sync_rc) != CUDA_SUCCESS) goto cuda_err;
  return 0;
cuda_err:
  snprintf(r->err, sizeof(r->err), "CUDA: %s", cuname(q));
  return -2;
}

const method_ops_t threadpool_ops = {sizeof(tp_run_t), NULL, NULL, tp_sample,
                                     NULL, NULL, NULL};
