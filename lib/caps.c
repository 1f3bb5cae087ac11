/* What the loaded driver and device 0 can do (uvcuda_driver_info). The
 * attribute that claims memop support (92) reads 0 on drivers where they
 * work, so the memops are tried, once, on device 0's primary context. */
#include <pthread.h>
#include <string.h>

#include "context.h"

static pthread_once_t caps_once = PTHREAD_ONCE_INIT;
static int caps_memops32, caps_memops64, caps_devices;

/* One write of `value` through a counter, synchronised. */
static int try_write(struct uvcuda__context *x, CUstream s, int mode,
                     uint64_t value) {
  struct uvcuda__counter c;
  CUresult r;
  int ok = 0;
  if (uvcuda__context_counter_get(x, &c) != 0) return 0;
  if (mode == UVCUDA__COUNTER_MEM64)
    r = uvcuda__drv.cuStreamWriteValue64(s, c.dptr, value, 0);
  else
    r = uvcuda__drv.cuStreamWriteValue32(s, c.dptr, (cuuint32_t)value, 0);
  if (r == CUDA_SUCCESS && uvcuda__drv.cuStreamSynchronize(s) == CUDA_SUCCESS)
    ok = uvcuda__counter_load(c.host, mode) == value;
  uvcuda__context_counter_put(x, &c, mode, r == CUDA_SUCCESS ? value : 0);
  return ok;
}

static void probe_caps(void) {
  struct uvcuda__context *x;
  CUdevice dev;
  struct uvcuda__drvscope sc;
  CUcontext ctx = NULL;
  CUstream s = NULL;
  int n = 0;

  if (uvcuda__drv.cuDeviceGetCount(&n) != CUDA_SUCCESS || n <= 0) return;
  caps_devices = n;
  if (uvcuda__drv.cuDeviceGet(&dev, 0) != CUDA_SUCCESS) return;
  if (uvcuda__drv.cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS) return;
  if (uvcuda__drv_enter(&sc, ctx) == CUDA_SUCCESS &&
      uvcuda__context_get(ctx, &x) == 0 &&
      uvcuda__drv.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS) {
    caps_memops32 = try_write(x, s, UVCUDA__COUNTER_MEM32, 0x5eed);
    caps_memops64 = try_write(x, s, UVCUDA__COUNTER_MEM64, 0x5eed00000001ull);
    uvcuda__drv.cuStreamDestroy(s);
  }
  uvcuda__drv_leave(&sc);
  uvcuda__drv.cuDevicePrimaryCtxRelease(dev);
}

int uvcuda_driver_info(uvcuda_driver_info_t *info) {
  int err;

  if (info == NULL) return UVCUDA_EINVAL;
  memset(info, 0, sizeof(*info));
  err = uvcuda_driver_load();
  info->path = uvcuda__driver_path();
  if (err) return err;
  pthread_once(&caps_once, probe_caps);
  info->driver_version = uvcuda__drv.version;
  info->device_count = caps_devices;
  info->memops32 = caps_memops32;
  info->memops64 = caps_memops64;
  info->host_task_sync = uvcuda__drv.cuLaunchHostFunc_v2 != NULL;
  info->simulated = uvcuda__driver_simulated();
  return 0;
}
