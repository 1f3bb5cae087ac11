/* The Stream class: a CUDA stream made by device.createStream() (owned:
 * destroyed here) or wrapped by Stream.fromHandle() (another addon's,
 * never destroyed here), and every asynchronous call of the JS API, each
 * an op (op.h) that returns a Promise and reports every error through it,
 * argument errors included. JS thread. */
#ifndef UVN_STREAM_H
#define UVN_STREAM_H

#include <node_api.h>

#include "driver.h"
#include "res.h"

struct uvn_env;

struct uvn_stream {
  struct uvn_res h; /* h.dev: NULL for a foreign stream given without its Device */
  CUstream stream;
  int owned; /* created here: destroyed here */
};

/* NULL, CU_STREAM_LEGACY and CU_STREAM_PER_THREAD name the default stream
 * of the context current when they are used. */
static inline int uvn_stream_is_default(CUstream s) {
  return s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
}

/* device.createStream(): a new owned Stream of the device of `device` (a
 * Device's res), its `device` property device_obj. Throws and returns
 * NULL. */
napi_value uvn_stream_create(napi_env env, struct uvn_res *device, napi_value device_obj);

/* uvcuda.fence(stream: Stream | bigint, device?: Device): Promise<void>. */
napi_value uvn_stream_fence_any(napi_env env, napi_callback_info info);

/* At env deletion, before the graveyard is emptied: the work of promises
 * cancelled by the teardown may still be queued on the env's streams and
 * use its pooled memory, which cuMemFreeAsync on the allocation stream
 * would not wait for. So each device's allocation stream first waits
 * (cuStreamWaitEvent, on the device, not here) for what is queued now on
 * every owned stream of the graveyard; the frees come after. */
void uvn_stream_order_pooled_frees(struct uvn_env *ue);

/* Defines Stream on exports. */
napi_status uvn_stream_define(napi_env env, napi_value exports, struct uvn_env *ue);

#endif
