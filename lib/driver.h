/* The CUDA driver table: the one place that knows entry-point names and the
 * ABI version each is requested at. Every entry is called through the
 * PFN_<name>_v<version> typedef of cudaTypedefs.h, so the prototype we call
 * and the ABI we ask cuGetProcAddress for cannot drift apart. */
#ifndef UVCUDA_DRIVER_H
#define UVCUDA_DRIVER_H

#include "cuda-api.h"

/* CUDA 13.2's cuLaunchHostFunc_v2 is not in the 13.0 headers. */
typedef CUresult(CUDAAPI *PFN_cuLaunchHostFunc_v13020)(CUstream, CUhostFn,
                                                      void *, unsigned int);
#define UVCUDA__HOST_TASK_BLOCKING 0u
#define UVCUDA__HOST_TASK_SPINWAIT 1u

/* XX(name, abi version) for required entry points. */
#define UVCUDA__DRIVER_REQUIRED(XX)   \
  XX(cuInit, 2000)                    \
  XX(cuDriverGetVersion, 2020)        \
  XX(cuGetErrorName, 6000)            \
  XX(cuGetErrorString, 6000)          \
  XX(cuDeviceGet, 2000)               \
  XX(cuDeviceGetCount, 2000)          \
  XX(cuDevicePrimaryCtxRetain, 7000)  \
  XX(cuDevicePrimaryCtxRelease, 11000)\
  XX(cuDevicePrimaryCtxReset, 11000)  \
  XX(cuCtxGetCurrent, 4000)           \
  XX(cuCtxSetCurrent, 4000)           \
  XX(cuCtxGetDevice, 2000)            \
  XX(cuCtxGetId, 12000)               \
  XX(cuStreamGetCtx, 9020)            \
  XX(cuStreamGetId, 12000)            \
  XX(cuStreamCreate, 2000)            \
  XX(cuStreamDestroy, 4000)           \
  XX(cuStreamQuery, 2000)             \
  XX(cuStreamSynchronize, 2000)       \
  XX(cuStreamIsCapturing, 10000)      \
  XX(cuThreadExchangeStreamCaptureMode, 10010) \
  XX(cuEventCreate, 2000)             \
  XX(cuEventRecord, 2000)             \
  XX(cuEventQuery, 2000)              \
  XX(cuEventDestroy, 4000)            \
  XX(cuLaunchHostFunc, 10000)         \
  XX(cuStreamWriteValue32, 11070)     \
  XX(cuStreamWriteValue64, 11070)     \
  XX(cuMemHostRegister, 6050)         \
  XX(cuMemHostGetDevicePointer, 3020) \

/* Optional: resolved only when the driver is new enough. */
#define UVCUDA__DRIVER_OPTIONAL(XX)   \
  XX(cuLaunchHostFunc_v2, 13020)      \

#define UVCUDA__MIN_DRIVER_VERSION 12000

struct uvcuda__driver {
#define UVCUDA__DRV_FIELD(name, ver) PFN_##name##_v##ver name;
  UVCUDA__DRIVER_REQUIRED(UVCUDA__DRV_FIELD)
#undef UVCUDA__DRV_FIELD
  PFN_cuLaunchHostFunc_v13020 cuLaunchHostFunc_v2;
  PFN_cuGetProcAddress_v12000 cuGetProcAddress;
  void *handle;
  int version;
};

/* Filled once by uvcuda_driver_load(); read-only afterwards. */
extern struct uvcuda__driver uvcuda__drv;

/* Number of entries in the table (tests compare it with what resolved). */
int uvcuda__driver_table_size(void);
const char *uvcuda__driver_table_name(int i);
int uvcuda__driver_table_version(int i);
int uvcuda__driver_table_resolved(int i);
/* Whether uvcuda_driver_load has succeeded already (never loads: naming an
 * error is no use of CUDA); the load's path. */
int uvcuda__driver_loaded(void);
const char *uvcuda__driver_path(void);
/* Nonzero in a process forked after the driver was loaded (then every
 * public call that would touch CUDA, the reactor or a loop or future made
 * before the fork returns UVCUDA_EFORKED). */
int uvcuda__driver_forked(void);

/* The frame of every driver call uvcuda makes on its own behalf: the
 * context it needs is made current, and the thread's stream-capture
 * interaction mode is RELAXED for the duration: a query or a
 * cuMemHostRegister from any thread in the default (GLOBAL) mode can
 * invalidate another thread's capture; a RELAXED thread's calls do not
 * (design.md, "Stream capture"). */
struct uvcuda__drvscope {
  CUcontext prev;
  CUcontext want;
  CUstreamCaptureMode mode;
  int mode_set; /* the exchange worked: exchange back */
};

/* Makes c current; *prev is what to put back with uvcuda__ctx_pop. What
 * could not be read or changed is not "restored" (*prev = c): a failed
 * query would otherwise leave the thread with no context. */
static inline CUresult uvcuda__ctx_push(CUcontext c, CUcontext *prev) {
  CUresult r = uvcuda__drv.cuCtxGetCurrent(prev);
  if (r == CUDA_SUCCESS && *prev != c) r = uvcuda__drv.cuCtxSetCurrent(c);
  if (r != CUDA_SUCCESS) *prev = c;
  return r;
}

static inline void uvcuda__ctx_pop(CUcontext c, CUcontext prev) {
  if (prev != c) uvcuda__drv.cuCtxSetCurrent(prev);
}

/* A refused exchange is not undone either: the thread would stay RELAXED.
 * Returns the refusal of c's push, if any: then no call is made that needs
 * c current (it would run in no context, or another); calls on a named
 * stream or event need none and still run. Leave is still due. */
static inline CUresult uvcuda__drv_enter(struct uvcuda__drvscope *s, CUcontext c) {
  CUresult r;
  s->want = c;
  r = uvcuda__ctx_push(c, &s->prev);
  s->mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  s->mode_set =
      uvcuda__drv.cuThreadExchangeStreamCaptureMode(&s->mode) == CUDA_SUCCESS;
  return r;
}

static inline void uvcuda__drv_leave(struct uvcuda__drvscope *s) {
  if (s->mode_set) uvcuda__drv.cuThreadExchangeStreamCaptureMode(&s->mode);
  uvcuda__ctx_pop(s->want, s->prev);
}

#endif
