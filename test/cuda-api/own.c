/* lib/cuda-api.h as the library compiles it: without the CUDA Toolkit on
 * the include path, with driver.h's table on top. Reports its sizes to the
 * test, which compares them with the toolkit's. */
#ifdef CUDA_VERSION
#error "own.c must see no <cuda.h>"
#endif

#include "driver.h"

#include "own.h"

#ifdef CUDA_VERSION
#error "cuda-api.h must not define CUDA_VERSION (it marks the real <cuda.h>)"
#endif

void cuda_api_own_sizes(struct cuda_api_sizes *s) {
  s->cuuint32 = sizeof(cuuint32_t);
  s->cuuint64 = sizeof(cuuint64_t);
  s->deviceptr = sizeof(CUdeviceptr);
  s->device = sizeof(CUdevice);
  s->result = sizeof(CUresult);
  /* Every PFN of driver.h's table is declared (else this fails to build). */
  s->driver_table = sizeof(struct uvcuda__driver);
  s->ctx_params = sizeof(CUctxCreateParams);
  s->ctx_params_affinity = offsetof(CUctxCreateParams, execAffinityParams);
  s->ctx_params_naffinity = offsetof(CUctxCreateParams, numExecAffinityParams);
  s->ctx_params_cig = offsetof(CUctxCreateParams, cigParams);
  s->stream_legacy = (uintptr_t)CU_STREAM_LEGACY;
  s->stream_per_thread = (uintptr_t)CU_STREAM_PER_THREAD;
  s->success = CUDA_SUCCESS;
  s->unknown = CUDA_ERROR_UNKNOWN;
}
