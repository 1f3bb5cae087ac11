/* uvcuda demo: a memcpy -> kernel -> memcpy round trip awaited on a libuv
 * loop next to a repeating timer, plus submit->callback latency of a few
 * short and long GPU ops. Without a GPU it runs on uvcuda's simulated
 * driver and says so on its first line. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

/* support/: the driver API (lib/cuda-api.h) and its table, the simulation
 * probe, the test kernels. */
#include "drvtab.h"
#include "kernels.h"
#include "simprobe.h"
#include "uvcuda.h"

#define N 4096

static drvtab_t cu; /* the driver entry points the demo calls */

#define CU(call)                                                            \
  do {                                                                      \
    CUresult r_ = (call);                                                   \
    if (r_ != CUDA_SUCCESS) {                                               \
      fprintf(stderr, "%s failed: %s\n", #call,                             \
              uvcuda_err_name(UVCUDA_ECUDA(r_)));                           \
      exit(1);                                                              \
    }                                                                       \
  } while (0)

static uv_loop_t *loop;
static uvcuda_loop_t ul;
static uvcuda_future_t fut;
static uv_timer_t ticker;
static CUstream stream;
static CUdeviceptr dbuf;
static uint32_t *hbuf;
static CUfunction fn_add, fn_sleep;
static int ticks, step;
static uint64_t t_submit;
static uint64_t sleep_ns;

static int op_upload(uvcuda_future_t *f, uvcuda_stream_t s) {
  (void)f;
  return cu.cuMemcpyHtoDAsync(dbuf, hbuf, N * sizeof(uint32_t), (CUstream)s);
}

static int op_add(uvcuda_future_t *f, uvcuda_stream_t s) {
  uint32_t n = N, value = 1000;
  void *args[] = {&dbuf, &n, &value};
  (void)f;
  return cu.cuLaunchKernel(fn_add, N / 256, 1, 1, 256, 1, 1, 0, (CUstream)s,
                           args, NULL);
}

static int op_download(uvcuda_future_t *f, uvcuda_stream_t s) {
  (void)f;
  return cu.cuMemcpyDtoHAsync(hbuf, dbuf, N * sizeof(uint32_t), (CUstream)s);
}

static int op_sleep(uvcuda_future_t *f, uvcuda_stream_t s) {
  void *args[] = {&sleep_ns};
  (void)f;
  return cu.cuLaunchKernel(fn_sleep, 1, 1, 1, 1, 1, 1, 0, (CUstream)s, args,
                           NULL);
}

static void on_step(uvcuda_future_t *f, int status);

static void start(uvcuda_op_cb op) {
  int err;
  t_submit = uv_hrtime();
  err = uvcuda_future_start(&fut, stream, op, on_step);
  if (err) {
    fprintf(stderr, "start: %s\n", uvcuda_strerror(err));
    exit(1);
  }
}

static const uint64_t sleeps[] = {0, 5000, 50000, 200000, 2000000};

static void on_closed(uvcuda_loop_t *u) { (void)u; }

static void on_step(uvcuda_future_t *f, int status) {
  double us = (double)(uv_hrtime() - t_submit) / 1e3;
  int i, bad = 0;
  (void)f;
  if (status) {
    fprintf(stderr, "step %d failed: %s (%s)\n", step, uvcuda_err_name(status),
            uvcuda_strerror(status));
    exit(1);
  }
  switch (step++) {
    case 0:
      printf("upload   %7.1f us (submit -> callback)\n", us);
      start(op_add);
      break;
    case 1:
      printf("kernel   %7.1f us\n", us);
      start(op_download);
      break;
    case 2:
      printf("download %7.1f us\n", us);
      for (i = 0; i < N; i++) bad += hbuf[i] != (uint32_t)i + 1000;
      printf("result: %s (%d of %d words wrong)\n", bad ? "WRONG" : "correct", bad, N);
      if (bad) exit(1);
      sleep_ns = sleeps[0];
      start(op_sleep);
      break;
    default: {
      int k = step - 4;
      printf("kernel of %7.1f us: %8.1f us\n", (double)sleeps[k] / 1e3, us);
      if (k + 1 < (int)(sizeof(sleeps) / sizeof(sleeps[0]))) {
        sleep_ns = sleeps[k + 1];
        start(op_sleep);
      } else {
        uv_timer_stop(&ticker);
        uv_close((uv_handle_t *)&ticker, NULL);
        uvcuda_future_close(&fut, NULL);
      }
    }
  }
}

static void on_tick(uv_timer_t *t) {
  (void)t;
  ticks++;
}

int main(void) {
  uvcuda_driver_info_t info;
  CUdevice dev;
  CUcontext ctx;
  CUmodule mod;
  char name[128] = "?";
  void *h;
  int i, err;

  /* No GPU driver here: use the simulation, and say so. */
  if (getenv("UVCUDA_LIBCUDA") == NULL) {
    h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h) dlclose(h);
#ifdef UVCUDA_SIMCUDA_PATH
    else setenv("UVCUDA_LIBCUDA", UVCUDA_SIMCUDA_PATH, 1);
#endif
  }
  if ((err = uvcuda_driver_info(&info)) != 0) {
    printf("uvcuda demo: no CUDA driver: %s (%s)\n", uvcuda_strerror(err),
           uvcuda_driver_dlerror() ? uvcuda_driver_dlerror() : "");
    return 1;
  }
  {
    drvtab_miss_t miss;
    if (drvtab_resolve(&cu, &miss) != 0) {
      fprintf(stderr, "%s: %s\n", miss.name, uvcuda_strerror(miss.err));
      exit(1);
    }
  }
  CU(cu.cuDeviceGet(&dev, 0));
  cu.cuDeviceGetName(name, sizeof(name), dev);
  if (support_driver_is_simulation())
    printf("uvcuda demo on the SIMULATED CUDA driver (no GPU here; timings are not GPU numbers): %s\n",
           info.path);
  else
    printf("uvcuda demo on %s (CUDA driver %d)\n", name, info.driver_version);

  CU(cu.cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cu.cuCtxSetCurrent(ctx));
  CU(cu.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CU(cu.cuMemAlloc(&dbuf, N * sizeof(uint32_t)));
  CU(cu.cuMemHostAlloc((void **)&hbuf, N * sizeof(uint32_t), 0));
  for (i = 0; i < N; i++) hbuf[i] = (uint32_t)i;
  CU(cu.cuModuleLoadData(&mod, uvcuda_test_kernels_ptx));
  CU(cu.cuModuleGetFunction(&fn_add, mod, "uvcuda_add_u32"));
  CU(cu.cuModuleGetFunction(&fn_sleep, mod, "uvcuda_sleep_ns"));

  loop = uv_default_loop();
  if ((err = uvcuda_loop_init(loop, &ul, NULL)) != 0) {
    fprintf(stderr, "uvcuda_loop_init: %s\n", uvcuda_strerror(err));
    return 1;
  }
  printf("completion strategy: %s, spin budget %.0f us\n",
         uvcuda_completion_name(uvcuda_loop_completion(&ul)),
         (double)uvcuda_loop_spin_budget_ns(&ul) / 1e3);
  uv_timer_init(loop, &ticker);
  uv_timer_start(&ticker, on_tick, 1, 1);
  uvcuda_future_init(&ul, &fut);
  start(op_upload);
  uv_run(loop, UV_RUN_DEFAULT);
  printf("timer ticked %d times while the GPU work was awaited\n", ticks);
  {
    uvcuda_stats_t st;
    uvcuda_loop_stats(&ul, &st);
    printf("completed: %llu in spin, %llu via reactor, %llu via host function\n",
           (unsigned long long)st.completed_spin,
           (unsigned long long)st.completed_reactor,
           (unsigned long long)st.completed_hostfn);
  }
  uvcuda_loop_close(&ul, on_closed);
  uv_run(loop, UV_RUN_DEFAULT);
  return uv_loop_close(loop) == 0 ? 0 : 1;
}
