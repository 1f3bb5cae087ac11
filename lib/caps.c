/* What the loaded driver and device 0 can do (uvcuda_driver_info). The
 * attribute that claims memop support (92) reads 0 on drivers where they
 * work, so the memops are tried on device 0's primary context, until one
 * probe gets an answer: a refused call around the write is no answer. */
#include <pthread.h>
#include <string.h>

#include "context.h"

static pthread_mutex_t caps_mu = PTHREAD_MUTEX_INITIALIZER;
static int caps_known, caps_memops32, caps_memops64, caps_devices;
static int caps_unsure; /* a refusal answered: asked again next time */

/* One write of `value` through a counter, synchronised: 1 it landed, 0 the
 * driver refused it (or it wrote something else), or the error that kept
 * it from being tried or seen. */
static int try_write(struct uvcuda__context *x, CUstream s, int mode,
                     uint64_t value) {
  struct uvcuda__counter c;
  CUresult r;
  int ok = 0, err;
  int tries = 2;
  /* No host memory the device may write to (registration refused twice in
   * a row): no write of uvcuda's can work now, which is the answer, but
   * not remembered. */
  while (uvcuda__counter_refused(err = uvcuda__context_counter_get(x, &c))) {
    if (--tries == 0) {
      caps_unsure = 1;
      return 0;
    }
  }
  if (err != 0) return err;
  if (mode == UVCUDA__COUNTER_MEM64)
    r = uvcuda__drv.cuStreamWriteValue64(s, c.dptr, value, 0);
  else
    r = uvcuda__drv.cuStreamWriteValue32(s, c.dptr, (cuuint32_t)value, 0);
  if (r == CUDA_SUCCESS) {
    CUresult sr = uvcuda__drv.cuStreamSynchronize(s);
    ok = sr == CUDA_SUCCESS ? uvcuda__counter_load(c.host, mode) == value
                            : UVCUDA_ECUDA(sr);
  }
  uvcuda__context_counter_put(x, &c, mode, r == CUDA_SUCCESS ? value : 0);
  return ok;
}

/* 0 and caps_* set, or the error that left them unknown. */
static int probe_caps(void) {
  struct uvcuda__context *x;
  CUdevice dev;
  struct uvcuda__drvscope sc;
  CUcontext ctx = NULL;
  CUstream s = NULL;
  CUresult r;
  int n = 0, m32 = 0, m64 = 0, err;

  if ((r = uvcuda__drv.cuDeviceGetCount(&n)) != CUDA_SUCCESS) return UVCUDA_ECUDA(r);
  caps_devices = n;
  if (n <= 0) return 0;
  if ((r = uvcuda__drv.cuDeviceGet(&dev, 0)) != CUDA_SUCCESS) return UVCUDA_ECUDA(r);
  if ((r = uvcuda__drv.cuDevicePrimaryCtxRetain(&ctx, dev)) != CUDA_SUCCESS)
    return UVCUDA_ECUDA(r);
  r = uvcuda__drv_enter(&sc, ctx);
  err = UVCUDA_ECUDA(r);
  if (r == CUDA_SUCCESS && (err = uvcuda__context_get(ctx, &x)) == 0) {
    r = uvcuda__drv.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
    err = UVCUDA_ECUDA(r);
    if (r == CUDA_SUCCESS) {
      m32 = try_write(x, s, UVCUDA__COUNTER_MEM32, 0x5eed);
      m64 = try_write(x, s, UVCUDA__COUNTER_MEM64, 0x5eed00000001ull);
      err = m32 < 0 ? m32 : m64 < 0 ? m64 : 0;
      uvcuda__drv.cuStreamDestroy(s);
    }
    uvcuda__context_release(x);
  }
  uvcuda__drv_leave(&sc);
  uvcuda__drv.cuDevicePrimaryCtxRelease(dev);
  if (err != 0) return err;
  caps_memops32 = m32;
  caps_memops64 = m64;
  return 0;
}

int uvcuda_driver_info(uvcuda_driver_info_t *info) {
  int err;

  if (info == NULL) return UVCUDA_EINVAL;
  memset(info, 0, sizeof(*info));
  err = uvcuda_driver_load();
  info->path = uvcuda__driver_path();
  if (err) return err;
  pthread_mutex_lock(&caps_mu);
  if (!caps_known) {
    caps_unsure = 0;
    caps_known = (err = probe_caps()) == 0 && !caps_unsure;
  }
  pthread_mutex_unlock(&caps_mu);
  if (err) {
    info->driver_version = uvcuda__drv.version;
    return err; /* asked again at the next call */
  }
  info->driver_version = uvcuda__drv.version;
  info->device_count = caps_devices;
  info->memops32 = caps_memops32;
  info->memops64 = caps_memops64;
  info->host_task_sync = uvcuda__drv.cuLaunchHostFunc_v2 != NULL;
  return 0;
}
