/* hostfn-async: enqueue, then cuLaunchHostFunc whose function calls
 * uv_async_send on a uv_async_t made for that sample; the loop runs until
 * its callback. */
#include "bench.h"

typedef struct {
  run_t run;
  uv_async_t as;
  int as_on;
  volatile int closed;
} hostfn_run_t;

static void CUDA_CB hostfn_send(void *arg) { uv_async_send(arg); }

static void on_as(uv_async_t *h) {
  run_t *r = h->data;
  r->t1 = uv_hrtime();
  r->done = 1;
}

static void on_as_closed(uv_handle_t *h) {
  hostfn_run_t *m = container_of((uv_async_t *)h, hostfn_run_t, as);
  m->closed = 1;
}

static void hostfn_prep(run_t *r) {
  hostfn_run_t *m = container_of(r, hostfn_run_t, run);
  uv_async_init(r->loop, &m->as, on_as);
  m->as.data = r;
  m->as_on = 1;
}

static int hostfn_sample(run_t *r, uint64_t *t0) {
  hostfn_run_t *m = container_of(r, hostfn_run_t, run);
  CUresult q;
  *t0 = uv_hrtime();
  if ((q = enqueue_work(r->wl, r->stream)) != CUDA_SUCCESS ||
      (q = bench.cu.cuLaunchHostFunc(r->stream, hostfn_send, &m->as)) !=
          CUDA_SUCCESS) {
    snprintf(r->err, sizeof(r->err), "CUDA: %s", cuname(q));
    return -2;
  }
  if (wait_flag(r->loop, &r->done, r->timeout_ns)) return -1;
  return 0;
}

static void hostfn_post(run_t *r) {
  hostfn_run_t *m = container_of(r, hostfn_run_t, run);
  if (!m->as_on) return;
  m->as_on = 0;
  m->closed = 0;
  uv_close((uv_handle_t *)&m->as, on_as_closed);
  wait_flag(r->loop, &m->closed, 2 * SEC);
}

static int hostfn_close(run_t *r) {
  hostfn_run_t *m = container_of(r, hostfn_run_t, run);
  if (m->as_on) uv_close((uv_handle_t *)&m->as, NULL);
  return 0;
}

const method_ops_t hostfn_async_ops = {sizeof(hostfn_run_t), NULL,
                                       hostfn_prep, hostfn_sample,
                                       hostfn_post, NULL, hostfn_close};
