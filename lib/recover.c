/* Device faults as the application sees them: a context's health, and the
 * reset that lets a process use a device again where the driver allows. */
#include "context.h"

#include <stdlib.h>

int uvcuda_context_health(uvcuda_context_t ctx) {
  struct uvcuda__context *x;
  int err, r;

  if (ctx == NULL) return UVCUDA_EINVAL;
  if ((err = uvcuda_driver_load()) != 0) return err;
  if ((err = uvcuda__context_get((CUcontext)ctx, &x)) != 0) return err;
  r = uvcuda__context_query(x);
  uvcuda__context_release(x);
  return r == 0 ? 0 : UVCUDA_ECUDA(r);
}

static void CUDA_CB set_one(void *p) {
  __atomic_store_n((uint32_t *)p, 1, __ATOMIC_RELEASE);
}

/* The stream writes 1 to the counter: a 64-bit or 32-bit memory op where
 * the device takes them, else a host function, the fallbacks `auto` itself
 * makes. */
struct write_one {
  const struct uvcuda__counter *c;
  int mode;
};

static CUresult write_one(CUstream s, void *arg) {
  struct write_one *w = arg;
  CUresult r;
  w->mode = UVCUDA__COUNTER_MEM64;
  r = uvcuda__drv.cuStreamWriteValue64(s, w->c->dptr, 1, 0);
  if (r != CUDA_ERROR_NOT_SUPPORTED) return r;
  w->mode = UVCUDA__COUNTER_MEM32;
  r = uvcuda__drv.cuStreamWriteValue32(s, w->c->dptr, 1, 0);
  if (r != CUDA_ERROR_NOT_SUPPORTED) return r;
  return uvcuda__drv.cuLaunchHostFunc(s, set_one, w->c->host);
}

static CUresult set_flag(CUstream s, void *flag) {
  return uvcuda__drv.cuLaunchHostFunc(s, set_one, flag);
}

/* enq's work on a stream of its own in ctx, waited for. *due: it was
 * enqueued, so it may still land after a failed wait. */
static CUresult on_own_stream(CUcontext ctx, CUresult (*enq)(CUstream, void *),
                              void *arg, int *due) {
  struct uvcuda__drvscope sc;
  CUstream s;
  CUresult r;
  *due = 0;
  r = uvcuda__drv_enter(&sc, ctx);
  if (r == CUDA_SUCCESS) r = uvcuda__drv.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
  if (r == CUDA_SUCCESS) {
    r = enq(s, arg);
    if (r == CUDA_SUCCESS) {
      *due = 1;
      r = uvcuda__drv.cuStreamSynchronize(s);
    }
    uvcuda__drv.cuStreamDestroy(s);
  }
  uvcuda__drv_leave(&sc);
  return r;
}

/* Where no counter can be registered (as `auto` then does): a host
 * function sets a flag of ours. One that never ran (the sync failed) may
 * still run, so its flag is left to it. */
static int check_hostfn(CUcontext ctx) {
  uint32_t *flag = calloc(1, sizeof(*flag));
  CUresult r;
  int due;
  if (flag == NULL) return UVCUDA_ENOMEM;
  r = on_own_stream(ctx, set_flag, flag, &due);
  if (r == CUDA_SUCCESS && __atomic_load_n(flag, __ATOMIC_ACQUIRE) != 1)
    r = CUDA_ERROR_UNKNOWN;
  if (!due || r == CUDA_SUCCESS) free(flag);
  return r == CUDA_SUCCESS ? 0 : UVCUDA_ECUDA(r);
}

/* New work on the device's fresh primary context: one counter write,
 * awaited on a stream of its own. */
static int check(CUdevice dev) {
  struct uvcuda__context *x;
  struct uvcuda__counter c;
  struct write_one w;
  CUcontext ctx;
  CUresult r;
  int err, due, got;

  if ((r = uvcuda__drv.cuDevicePrimaryCtxRetain(&ctx, dev)) != CUDA_SUCCESS)
    return UVCUDA_ECUDA(r);
  err = uvcuda__context_get(ctx, &x);
  got = err == 0;
  if (err == 0) err = uvcuda__context_counter_get(x, &c);
  if (uvcuda__counter_refused(err)) {
    err = check_hostfn(ctx);
  } else if (err == 0) {
    w.c = &c;
    w.mode = UVCUDA__COUNTER_MEM64;
    r = on_own_stream(ctx, write_one, &w, &due);
    if (r == CUDA_SUCCESS && uvcuda__counter_load(c.host, w.mode) != 1)
      r = CUDA_ERROR_UNKNOWN;
    /* Landed, or never enqueued: the slot is free. Enqueued but not seen
     * to land: it stays out of use until the write lands, if ever. */
    uvcuda__context_counter_put(x, &c, w.mode,
                                due && r != CUDA_SUCCESS ? 1 : 0);
    if (r != CUDA_SUCCESS) err = UVCUDA_ECUDA(r);
  }
  if (err == 0 && (r = uvcuda__context_query(x)) != 0) err = UVCUDA_ECUDA(r);
  if (got) uvcuda__context_release(x);
  uvcuda__drv.cuDevicePrimaryCtxRelease(dev);
  return err;
}

int uvcuda_device_reset(int ordinal) {
  CUdevice dev;
  CUresult r;
  int err;

  if (ordinal < 0) return UVCUDA_EINVAL;
  if ((err = uvcuda_driver_load()) != 0) return err;
  if ((r = uvcuda__drv.cuDeviceGet(&dev, ordinal)) != CUDA_SUCCESS)
    return r == CUDA_ERROR_INVALID_DEVICE ? UVCUDA_EINVAL : UVCUDA_ECUDA(r);
  uvcuda__context_kill_device(dev, CUDA_ERROR_CONTEXT_IS_DESTROYED);
  if ((r = uvcuda__drv.cuDevicePrimaryCtxReset(dev)) != CUDA_SUCCESS)
    return UVCUDA_ECUDA(r);
  return check(dev);
}
