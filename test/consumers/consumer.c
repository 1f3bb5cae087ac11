/* A small uvcuda consumer, built against an installed (or subproject) uvcuda
 * by test/consumers/ci.sh through pkg-config, CMake and Meson. It includes
 * no CUDA header: the few driver calls it makes are resolved through
 * uvcuda_driver_symbol. Without a GPU, run it on the simulated driver:
 * UVCUDA_LIBCUDA=<build>/test/sim/libsimcuda.so.
 *
 * Makes device 0's primary context current, creates a stream, awaits it with
 * one future (no op: the work already on the stream), prints the status. */
#include <stdio.h>
#include <uv.h>

#include "uvcuda.h"

/* CUresult is an int-sized enum; handles are pointers; CUdevice is an int. */
typedef int (*cu_device_get_fn)(int *dev, int ordinal);
typedef int (*cu_ctx_retain_fn)(void **ctx, int dev);
typedef int (*cu_ctx_release_fn)(int dev);
typedef int (*cu_ctx_set_current_fn)(void *ctx);
typedef int (*cu_stream_create_fn)(void **stream, unsigned flags);
typedef int (*cu_stream_destroy_fn)(void *stream);

static int status = 1;

static void future_closed(uvcuda_future_t *f) {
  uvcuda_loop_close(f->loop, NULL);
}

static void done(uvcuda_future_t *f, int st) {
  status = st;
  printf("future: %s\n", st == 0 ? "done" : uvcuda_err_name(st));
  uvcuda_future_close(f, future_closed);
}

#define RESOLVE(var, name, ver)                                          \
  if ((err = uvcuda_driver_symbol(name, ver, (void **)&var)) != 0) {     \
    fprintf(stderr, "%s: %s\n", name, uvcuda_strerror(err));             \
    return 1;                                                            \
  }

int main(void) {
  cu_device_get_fn cu_device_get;
  cu_ctx_retain_fn cu_ctx_retain;
  cu_ctx_release_fn cu_ctx_release;
  cu_ctx_set_current_fn cu_ctx_set_current;
  cu_stream_create_fn cu_stream_create;
  cu_stream_destroy_fn cu_stream_destroy;
  uvcuda_driver_info_t info;
  void *sim = NULL;
  uvcuda_loop_t gpu;
  uvcuda_future_t fut;
  void *ctx = NULL, *stream = NULL;
  int dev, err;

  err = uvcuda_driver_info(&info);
  if (err) {
    fprintf(stderr, "driver %s: %s (%s)\n", info.path ? info.path : "?",
            uvcuda_strerror(err), uvcuda_driver_dlerror());
    return 1;
  }
  /* Only uvcuda's simulated driver resolves this name (support/simprobe.h). */
  uvcuda_driver_symbol("uvcudaSimIsSimulation", 12000, &sim);
  printf("uvcuda %d.%d.%d, driver %d%s, %d device(s)\n", UVCUDA_VERSION_MAJOR,
         UVCUDA_VERSION_MINOR, UVCUDA_VERSION_PATCH, info.driver_version,
         sim != NULL ? " (simulated)" : "", info.device_count);

  RESOLVE(cu_device_get, "cuDeviceGet", 2000);
  RESOLVE(cu_ctx_retain, "cuDevicePrimaryCtxRetain", 7000);
  RESOLVE(cu_ctx_release, "cuDevicePrimaryCtxRelease", 11000);
  RESOLVE(cu_ctx_set_current, "cuCtxSetCurrent", 4000);
  RESOLVE(cu_stream_create, "cuStreamCreate", 2000);
  RESOLVE(cu_stream_destroy, "cuStreamDestroy", 4000);
  if (cu_device_get(&dev, 0) != 0 || cu_ctx_retain(&ctx, dev) != 0 ||
      cu_ctx_set_current(ctx) != 0 || cu_stream_create(&stream, 1) != 0) {
    fprintf(stderr, "no context or stream on device 0\n");
    return 1;
  }

  if ((err = uvcuda_loop_init(uv_default_loop(), &gpu, NULL)) != 0 ||
      (err = uvcuda_future_init(&gpu, &fut)) != 0 ||
      (err = uvcuda_future_start(&fut, stream, NULL, done)) != 0) {
    fprintf(stderr, "uvcuda: %s\n", uvcuda_strerror(err));
    return 1;
  }
  printf("completion: %s\n", uvcuda_completion_name(uvcuda_loop_completion(&gpu)));
  uv_run(uv_default_loop(), UV_RUN_DEFAULT);
  uv_loop_close(uv_default_loop());

  cu_stream_destroy(stream);
  cu_ctx_set_current(NULL);
  cu_ctx_release(dev);
  return status == 0 ? 0 : 1;
}
