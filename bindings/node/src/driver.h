/* The CUDA driver as the addon calls it: support/drvtab.h's table (every
 * entry of lib/cuda-api.h's lists, resolved through uvcuda_driver_symbol;
 * nothing links libcuda), loaded once per process, and the context switch
 * around calls on a device's objects. Any thread unless marked. */
#ifndef UVN_DRIVER_H
#define UVN_DRIVER_H

#include <node_api.h>

#include "drvtab.h"

/* The entry points: uvn_cu.cuMemAlloc(...). Valid once uvn_driver_load
 * returned 0; optional entries (cuMemAllocAsync, cuFuncGetParamInfo, ...)
 * are NULL where the driver lacks them. */
extern drvtab_t uvn_cu;

/* Loads the driver (uvcuda_driver_load) and resolves uvn_cu, once per
 * process; later calls return the first result: 0, the load's error
 * (UVCUDA_ENODRIVER, UVCUDA_ECUDA(CUDA_ERROR_NO_DEVICE), ...) or the
 * first required entry's (UVCUDA_ENOSYM). */
int uvn_driver_load(void);

/* uvn_driver_load for a JS call: 0, or throws its error and returns -1.
 * JS thread. */
int uvn_driver_need(napi_env env);

/* Makes c current; *prev is what uvn_ctx_pop puts back. What could not be
 * read or changed is not "restored" (*prev = c): a refused read would
 * otherwise leave the thread with no context, clobbering whatever another
 * library on this thread had made current. Returns the driver's refusal:
 * then the call that needed the context is not made. */
static inline CUresult uvn_ctx_push(CUcontext c, CUcontext *prev) {
  CUresult r = uvn_cu.cuCtxGetCurrent(prev);
  if (r == CUDA_SUCCESS && *prev != c) r = uvn_cu.cuCtxSetCurrent(c);
  if (r != CUDA_SUCCESS) *prev = c;
  return r;
}

static inline void uvn_ctx_pop(CUcontext c, CUcontext prev) {
  if (prev != c) uvn_cu.cuCtxSetCurrent(prev);
}

#endif
