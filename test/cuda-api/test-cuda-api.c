/* Drift test: lib/cuda-api.h against the CUDA Toolkit's cuda.h and
 * cudaTypedefs.h. The toolkit's headers come first; then ours, with
 * UVCUDA_CUDA_API_SELFTEST, declares again every handle, scalar and
 * PFN_<name>_v<version> typedef under its own name (C11 accepts that only
 * for the very same type: a changed prototype or ABI version does not
 * compile), defines every flag macro again (a different value is a
 * "redefined" error under -Werror), and declares its enums under
 * uvcuda_selftest_<name>, which the asserts below compare with the
 * toolkit's, constant by constant. The one struct it lays out
 * (CUctxCreateParams) is compared at run time: own.c's size and offsets
 * against the toolkit's. */
#include <cuda.h>
#include <cudaTypedefs.h>

#define UVCUDA_CUDA_API_SELFTEST 1
#include "cuda-api.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "own.h"

/* Each constant: our value is the toolkit's. */
#define CHECK_VALUE(name, value)                                           \
  _Static_assert((long long)uvcuda_selftest_##name == (long long)(name),   \
                 #name " differs from <cuda.h>");
/* Each enum: its tag names the toolkit's typedef, and ours has the same
 * size and underlying type (an enum is compatible with its own). */
#define CHECK_ENUM(tag, type, values)                                      \
  values(CHECK_VALUE)                                                      \
  _Static_assert(__builtin_types_compatible_p(enum tag, type),             \
                 "enum " #tag " is not " #type " in <cuda.h>");            \
  _Static_assert(sizeof(uvcuda_selftest_##type) == sizeof(type),           \
                 #type ": size differs from <cuda.h>");                    \
  _Static_assert(                                                          \
      __builtin_types_compatible_p(uvcuda_selftest_##type, unsigned int) ==  \
              __builtin_types_compatible_p(type, unsigned int) &&            \
          __builtin_types_compatible_p(uvcuda_selftest_##type, int) ==       \
              __builtin_types_compatible_p(type, int),                       \
      #type ": underlying type differs from <cuda.h>");
UVCUDA_CU_ENUMS(CHECK_ENUM)

/* The typedefs were checked by being declared twice; a few asserts more
 * to name the failure should a compiler accept a mismatch there. */
_Static_assert(__builtin_types_compatible_p(PFN_cuGetProcAddress_v12000,
                   CUresult (CUDAAPI *)(const char *, void **, int, cuuint64_t,
                                        CUdriverProcAddressQueryResult *)),
               "PFN_cuGetProcAddress_v12000 differs from cudaTypedefs.h");
_Static_assert(__builtin_types_compatible_p(CUhostFn, void (CUDA_CB *)(void *)),
               "CUhostFn differs from <cuda.h>");
_Static_assert(__builtin_types_compatible_p(CUstreamCallback,
                   void (CUDA_CB *)(CUstream, CUresult, void *)),
               "CUstreamCallback differs from <cuda.h>");

#define COUNT_VALUE(name, value) +1
#define COUNT_ENUM_VALUES(tag, type, values) values(COUNT_VALUE)
#define COUNT_ENUM(tag, type, values) +1

int main(void) {
  struct cuda_api_sizes own;
  int values = 0 UVCUDA_CU_ENUMS(COUNT_ENUM_VALUES);
  int enums = 0 UVCUDA_CU_ENUMS(COUNT_ENUM);
  int failed = 0;

  /* What the library's own build of the header (own.c, no toolkit on its
   * include path) sees, against the toolkit. */
  cuda_api_own_sizes(&own);
#define SAME(what, expected)                                                \
  if ((long long)(what) != (long long)(expected)) {                         \
    fprintf(stderr, "cuda-api drift: %s is %lld, <cuda.h> says %lld\n",     \
            #what, (long long)(what), (long long)(expected));               \
    failed = 1;                                                             \
  }
  SAME(own.cuuint32, sizeof(cuuint32_t));
  SAME(own.cuuint64, sizeof(cuuint64_t));
  SAME(own.deviceptr, sizeof(CUdeviceptr));
  SAME(own.device, sizeof(CUdevice));
  SAME(own.result, sizeof(CUresult));
  SAME(own.ctx_params, sizeof(CUctxCreateParams));
  SAME(own.ctx_params_affinity, offsetof(CUctxCreateParams, execAffinityParams));
  SAME(own.ctx_params_naffinity, offsetof(CUctxCreateParams, numExecAffinityParams));
  SAME(own.ctx_params_cig, offsetof(CUctxCreateParams, cigParams));
  SAME(own.stream_legacy, (uintptr_t)CU_STREAM_LEGACY);
  SAME(own.stream_per_thread, (uintptr_t)CU_STREAM_PER_THREAD);
  SAME(own.success, CUDA_SUCCESS);
  SAME(own.unknown, CUDA_ERROR_UNKNOWN);
#undef SAME
  if (failed) return 1;
  printf("lib/cuda-api.h matches the toolkit's headers (CUDA_VERSION %d): "
         "%d enums, %d enum values, %d PFN typedefs, handles and flag "
         "macros (at compile time); driver.h's table (%zu bytes) builds "
         "without the toolkit\n",
         CUDA_VERSION, enums, values, cuda_api_real_pfns(),
         own.driver_table);
  return 0;
}
