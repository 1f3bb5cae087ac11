/* An asynchronous call of the JS API (a copy, a memset, a launch, a
 * fence): what its enqueue needs, and the objects it keeps busy until its
 * promise settles. The promise comes from the promise helper
 * (uvcuda_napi_await_ex, op.c), or from the thread-pool baseline (pool.c).
 *
 * Host memory. The GPU never reads or writes a JS buffer: a copy goes
 * through a buffer of ours (the bounce, bounce.h), so that transferring or
 * detaching the JS buffer while the copy is pending cannot make the GPU
 * touch memory JS gave away (or freed):
 *   copyToDevice   copies the source into the bounce at the call; the GPU
 *                  reads the bounce. Later changes to the source, or its
 *                  transfer, change nothing.
 *   copyFromDevice the GPU writes the bounce; once the work is done the
 *                  bytes are copied into dst on the JS thread, unless dst
 *                  was detached or transferred meanwhile (the promise then
 *                  rejects with ERR_INVALID_STATE and nothing is written),
 *                  or the caller's AbortSignal was aborted (dst is left
 *                  alone).
 * The bounce lives until the GPU is done with it: where the promise ends
 * without the work being known done (env teardown cancels it, a fault or a
 * reset fails it), the reaper thread returns it once the stream (or the
 * context) is idle. JS thread. */
#ifndef UVN_OP_H
#define UVN_OP_H

#include <node_api.h>
#include <stddef.h>
#include <stdint.h>

#include "bounce.h"
#include "driver.h"
#include "kernel.h"
#include "uvcuda.h"

struct uvn_dev;
struct uvn_res;
struct uvn_stream;

enum uvn_op_kind { UVN_OP_FENCE, UVN_OP_HTOD, UVN_OP_DTOH, UVN_OP_DTOD, UVN_OP_MEMSET,
                   UVN_OP_LAUNCH };

/* What one promise keeps: at most the stream, the kernel, two buffers, a
 * signal and one DeviceMemory per kernel parameter. */
#define UVN_OP_MAX_KEEP (5 + UVN_MAX_PARAMS)

struct uvn_op {
  enum uvn_op_kind kind;
  CUstream stream;
  CUdeviceptr dst, src;
  struct uvn_bounce bb; /* HTOD / DTOH: the bytes the GPU reads or writes */
  size_t bytes;
  unsigned char byte;
  CUfunction fn;
  unsigned grid[3], block[3], shmem;
  int resolve_keep; /* resolve with kept[resolve_keep]; -1: undefined */
  int signal_keep;  /* DTOH: kept[signal_keep] is the caller's AbortSignal; -1 */
  int enqueued;     /* the op's work reached the stream */
  int nparams;
  void **params;    /* LAUNCH: kernelParams, each pointing at its slot */
  uint64_t *slots;
  int nheld;
  struct uvn_res **held; /* each held (uvn_res_hold) until the op is freed */
  /* where the GPU work runs: to free the bounce after it, and for faults */
  struct uvn_dev *dev;
  int ordinal; /* -1: no device known */
  uint64_t gen;
  CUcontext ctx;
  CUstream own_stream; /* the stream, when it is ours to wait for */
  /* the thread-pool baseline (pool.c) */
  napi_async_work work;
  napi_deferred deferred;
  CUresult result;
  size_t nrefs;
  napi_ref *refs;
};

/* A new op with room for nparams kernel parameters, max_held objects and
 * max_refs references (the baseline's); NULL when out of memory. */
struct uvn_op *uvn_op_new(enum uvn_op_kind kind, int nparams, int max_held, size_t max_refs);
/* o holds r (uvn_res_hold) until it is freed. */
void uvn_op_hold(struct uvn_op *o, struct uvn_res *r);
/* Releases what o holds and its bounce, and frees it. */
void uvn_op_free(napi_env env, struct uvn_op *o);
/* Where o's work runs, from its stream. For a foreign stream of no known
 * device, the stream's context is asked of the driver, and only for a copy
 * (the reaper may have to wait for it before freeing the bounce). */
void uvn_op_place(struct uvn_op *o, const struct uvn_stream *s);
/* o's bounce of len bytes, after uvn_op_place: page-locked and pooled for
 * a stream of a known device, else malloc'ed. 0, or throws and returns -1. */
int uvn_op_bounce(napi_env env, struct uvn_op *o, size_t len);
/* Puts o's work on `stream` (the helper's enqueue callback; the
 * baseline's launch): 0 or the CUresult. */
int uvn_op_enqueue(uvcuda_stream_t stream, void *data);
/* Starts o on its stream through the promise helper and returns the
 * promise, keeping keep[0..nkeep) alive until it settles; or NULL (thrown,
 * o freed). Holds d's reset lock meanwhile, after checking that everything
 * o holds belongs to its current generation; d's context is made current
 * for a default stream handle (NULL, legacy, per-thread), which names the
 * current context's. `name`: the async resource's. */
napi_value uvn_op_submit(napi_env env, struct uvn_op *o, struct uvn_dev *d,
                         const napi_value *keep, size_t nkeep, const char *name);

#endif
