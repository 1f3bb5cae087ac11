/* The CUDA driver entry points that the tests, the bench and the examples
 * call beyond uvcuda's own: one list (name, ABI version, whether required),
 * resolved by one function through uvcuda_driver_symbol, as a user of
 * uvcuda would. Nothing in these programs resolves a driver entry point
 * any other way. Every required entry exists in the simulated driver and
 * in every driver uvcuda supports. */
#ifndef UVCUDA_DRVTAB_H
#define UVCUDA_DRVTAB_H

#include <cuda.h>
#include <cudaTypedefs.h>

#define DRVTAB_ENTRIES(X)                  \
  X(cuCtxCreate, 12050, 0) /* the bench's extra contexts */ \
  X(cuCtxDestroy, 4000, 1)                 \
  X(cuCtxGetCurrent, 4000, 1)              \
  X(cuCtxSetCurrent, 4000, 1)              \
  X(cuDeviceGet, 2000, 1)                  \
  X(cuDeviceGetAttribute, 2000, 1)         \
  X(cuDeviceGetCount, 2000, 1)             \
  X(cuDeviceGetName, 2000, 1)              \
  X(cuDevicePrimaryCtxRelease, 11000, 1)   \
  X(cuDevicePrimaryCtxReset, 11000, 1)     \
  X(cuDevicePrimaryCtxRetain, 7000, 1)     \
  X(cuGraphDestroy, 10000, 1)              \
  X(cuLaunchHostFunc, 10000, 1)            \
  X(cuLaunchKernel, 4000, 1)               \
  X(cuMemAlloc, 3020, 1)                   \
  X(cuMemFree, 3020, 1)                    \
  X(cuMemFreeHost, 2000, 1)                \
  X(cuMemHostAlloc, 2020, 1)               \
  X(cuMemHostGetDevicePointer, 3020, 1)    \
  X(cuMemcpyDtoHAsync, 3020, 1)            \
  X(cuMemcpyHtoDAsync, 3020, 1)            \
  X(cuMemsetD32Async, 3020, 1)             \
  X(cuModuleGetFunction, 2000, 1)          \
  X(cuModuleLoadData, 2000, 1)             \
  X(cuModuleUnload, 2000, 1)               \
  X(cuStreamBeginCapture, 10010, 1)        \
  X(cuStreamCreate, 2000, 1)               \
  X(cuStreamDestroy, 4000, 1)              \
  X(cuStreamEndCapture, 10000, 1)          \
  X(cuStreamIsCapturing, 10000, 1)         \
  X(cuStreamQuery, 2000, 1)                \
  X(cuStreamSynchronize, 2000, 1)          \
  X(cuStreamWaitValue32, 11070, 1)         \
  X(cuStreamWriteValue32, 11070, 1)        \
  X(cuThreadExchangeStreamCaptureMode, 10010, 1)

/* A member per entry, named as the driver names it: tab.cuStreamQuery. */
typedef struct {
#define DRVTAB_FIELD(name, version, required) PFN_##name##_v##version name;
  DRVTAB_ENTRIES(DRVTAB_FIELD)
#undef DRVTAB_FIELD
} drvtab_t;

/* What did not resolve: the first required entry (the error returned), and
 * the first optional one (left NULL). */
typedef struct {
  const char *name;
  int version, err;
  const char *opt_name;
  int opt_version, opt_err;
} drvtab_miss_t;

/* Resolves every entry into t. Returns 0, or the uvcuda error of the first
 * required entry that did not resolve (miss says which; miss may be NULL).
 * The driver must load: call uvcuda_driver_info or _load first to tell
 * "no driver" apart. */
int drvtab_resolve(drvtab_t *t, drvtab_miss_t *miss);

#endif
