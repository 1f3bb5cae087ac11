/* The CUDA driver entry points the addon calls, resolved at run time through
 * uvcuda_driver_symbol (nothing links libcuda), each at the ABI version of
 * the PFN_<name>_v<version> typedef it is called through. The types and
 * typedefs come from uvcuda's lib/cuda-api.h (its lists UVCUDA_CU_PFNS_LIB
 * and UVCUDA_CU_PFNS_NODE): no CUDA Toolkit is needed to build the addon. */
#ifndef UVCUDA_NODE_CU_H
#define UVCUDA_NODE_CU_H

#include <stddef.h>

#include "cuda-api.h"

#define UVCUDA_NODE_CU(XX)               \
  XX(cuDeviceGet, 2000)                  \
  XX(cuDeviceGetCount, 2000)             \
  XX(cuDeviceGetName, 2000)              \
  XX(cuDeviceGetAttribute, 2000)         \
  XX(cuDevicePrimaryCtxRetain, 7000)     \
  XX(cuDevicePrimaryCtxRelease, 11000)   \
  XX(cuCtxGetCurrent, 4000)              \
  XX(cuCtxSetCurrent, 4000)              \
  XX(cuCtxSynchronize, 2000)             \
  XX(cuCtxGetId, 12000)                  \
  XX(cuThreadExchangeStreamCaptureMode, 10010) \
  XX(cuStreamCreate, 2000)               \
  XX(cuStreamDestroy, 4000)              \
  XX(cuStreamSynchronize, 2000)          \
  XX(cuStreamGetCtx, 9020)               \
  XX(cuStreamIsCapturing, 10000)         \
  XX(cuStreamWaitEvent, 3020)            \
  XX(cuEventCreate, 2000)                \
  XX(cuEventRecord, 2000)                \
  XX(cuEventDestroy, 4000)               \
  XX(cuStreamBeginCapture, 10010)        \
  XX(cuStreamEndCapture, 10000)          \
  XX(cuGraphDestroy, 10000)              \
  XX(cuMemAlloc, 3020)                   \
  XX(cuMemFree, 3020)                    \
  XX(cuMemHostRegister, 6050)            \
  XX(cuMemHostUnregister, 4000)          \
  XX(cuMemcpyHtoDAsync, 3020)            \
  XX(cuMemcpyDtoHAsync, 3020)            \
  XX(cuMemcpyDtoDAsync, 3020)            \
  XX(cuMemsetD8Async, 3020)              \
  XX(cuModuleLoadData, 2000)             \
  XX(cuModuleGetFunction, 2000)          \
  XX(cuModuleUnload, 2000)               \
  XX(cuLaunchKernel, 4000)

/* Optional: NULL where the driver lacks them (the simulation does). The
 * stream-ordered allocator frees without waiting for the device;
 * cuFuncGetParamInfo (CUDA >= 12.4) gives a kernel's parameter count. */
#define UVCUDA_NODE_CU_OPTIONAL(XX)      \
  XX(cuMemAllocAsync, 11020)             \
  XX(cuMemFreeAsync, 11020)              \
  XX(cuFuncGetParamInfo, 12040)

/* CUDA 12.4's: not in lib/cuda-api.h's lists (which need only 12.0), so
 * declared here unless a 12.4+ <cuda.h> came first. */
#if !defined(CUDA_VERSION) || CUDA_VERSION < 12040
typedef CUresult (CUDAAPI *PFN_cuFuncGetParamInfo_v12040)(CUfunction func,
                                                          size_t paramIndex,
                                                          size_t *paramOffset,
                                                          size_t *paramSize);
#endif

struct cu_table {
#define UVCUDA_NODE_CU_FIELD(name, ver) PFN_##name##_v##ver name;
  UVCUDA_NODE_CU(UVCUDA_NODE_CU_FIELD)
  UVCUDA_NODE_CU_OPTIONAL(UVCUDA_NODE_CU_FIELD)
#undef UVCUDA_NODE_CU_FIELD
};

extern struct cu_table cu;

/* Makes c current; *prev is what cu_ctx_pop puts back. What could not be
 * read or changed is not "restored" (*prev = c): a refused read would
 * otherwise leave the thread with no context, clobbering whatever another
 * library on this thread had made current. */
static inline CUresult cu_ctx_push(CUcontext c, CUcontext *prev) {
  CUresult r = cu.cuCtxGetCurrent(prev);
  if (r == CUDA_SUCCESS && *prev != c) r = cu.cuCtxSetCurrent(c);
  if (r != CUDA_SUCCESS) *prev = c;
  return r;
}

static inline void cu_ctx_pop(CUcontext c, CUcontext prev) {
  if (prev != c) cu.cuCtxSetCurrent(prev);
}

/* Loads the driver (uvcuda_driver_load) and resolves the table once per
 * process. Returns 0 or a uvcuda error (UVCUDA_ENODRIVER, UVCUDA_ENOSYM,
 * ...). Any thread. */
int cu_load(void);

#endif
