/* Setup: the driver entry points, device 0's primary context, the
 * streams (the timed one first: its own hardware queue), the host-pinned
 * words, the test kernels and, on a GPU, the scaling section's extra
 * contexts. */
#include "bench.h"

#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "simprobe.h"

const char *cuname(CUresult r) {
  return uvcuda_err_name(UVCUDA_ECUDA(r));
}

static void print_miss(const char *name, int version, int err) {
  printf("uvcuda-bench: driver entry point %s (ABI %d): %s\n", name, version,
         uvcuda_strerror(err));
}

void ctx_on_this_thread(void) {
  static __thread int set;
  if (set) return;
  bench.cu.cuCtxSetCurrent(bench.ctx);
  set = 1;
}

int setup(void) {
  char name[256] = "?", ver[512] = "";
  int cc_major = 0, cc_minor = 0, err, i, k;
  drvtab_miss_t miss;
  void *pin = NULL;
  CUmodule mod;
  CUresult r;
  FILE *f;

  /* Before the driver loads: a hardware queue per stream (up to 32), so
   * held streams don't share one with the timed stream. */
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 1);
  err = uvcuda_driver_info(&bench.info);
  if (err) {
    printf("uvcuda-bench: no CUDA driver: %s (%s)\n", uvcuda_strerror(err),
           uvcuda_driver_dlerror() ? uvcuda_driver_dlerror() : "");
    return -1;
  }
  bench.sim = support_driver_is_simulation();
  if (drvtab_resolve(&bench.cu, &miss) != 0) {
    print_miss(miss.name, miss.version, miss.err);
    return -1;
  }
  if (bench.info.device_count < 1 ||
      (r = bench.cu.cuDeviceGet(&bench.dev, 0)) != CUDA_SUCCESS) {
    printf("uvcuda-bench: no CUDA device (driver %d)\n",
           bench.info.driver_version);
    return -1;
  }
  bench.cu.cuDeviceGetName(name, sizeof(name), bench.dev);
  bench.cu.cuDeviceGetAttribute(
      &cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, bench.dev);
  bench.cu.cuDeviceGetAttribute(
      &cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, bench.dev);
  if (bench.sim) {
    bench.tag = " [simulation, not a GPU measurement]";
    printf("uvcuda-bench: SIMULATED CUDA driver (%s, reports %d.%d): no GPU; "
           "every number below is simulation, not a GPU measurement\n",
           bench.info.path, bench.info.driver_version / 1000,
           bench.info.driver_version % 1000 / 10);
  } else {
    printf("uvcuda-bench: GPU %s (sm_%d%d), CUDA driver %d.%d (%d)\n", name,
           cc_major, cc_minor, bench.info.driver_version / 1000,
           bench.info.driver_version % 1000 / 10, bench.info.driver_version);
    if ((f = fopen("/proc/driver/nvidia/version", "r")) != NULL) {
      if (fgets(ver, sizeof(ver), f)) {
        ver[strcspn(ver, "\n")] = 0;
        printf("kernel module: %s\n", ver);
      }
      fclose(f);
    }
  }
  printf("device: %s; libcuda: %s; memops32=%d memops64=%d host_task_sync=%d; "
         "CUDA_DEVICE_MAX_CONNECTIONS=%s; libuv %s; uvcuda %d.%d.%d\n",
         name, bench.info.path, bench.info.memops32, bench.info.memops64,
         bench.info.host_task_sync, getenv("CUDA_DEVICE_MAX_CONNECTIONS"),
         uv_version_string(), UVCUDA_VERSION_MAJOR, UVCUDA_VERSION_MINOR,
         UVCUDA_VERSION_PATCH);
  printf("samples: %d after %d warm-up (kernel-2ms: %d after %d)%s\n",
         bench.opt.samples, bench.opt.warmup,
         bench.opt.samples > 200 ? 200 : bench.opt.samples,
         bench.opt.warmup > 20 ? 20 : bench.opt.warmup,
         bench.opt.quick ? "; --quick" : "");

#define CHECK(call)                                                     \
  do {                                                                  \
    if ((r = (call)) != CUDA_SUCCESS) {                                 \
      printf("uvcuda-bench: %s: %s\n", #call, cuname(r));               \
      return -1;                                                        \
    }                                                                   \
  } while (0)
  CHECK(bench.cu.cuDevicePrimaryCtxRetain(&bench.ctx, bench.dev));
  CHECK(bench.cu.cuCtxSetCurrent(bench.ctx));
  /* The timed stream first, then the held ones, then the rest. */
  CHECK(bench.cu.cuStreamCreate(&bench.timed, CU_STREAM_NON_BLOCKING));
  for (i = 0; i < NPEND; i++)
    CHECK(bench.cu.cuStreamCreate(&bench.xpend[0][i], CU_STREAM_NON_BLOCKING));
  for (i = 0; i < NTP; i++)
    CHECK(bench.cu.cuStreamCreate(&bench.tps[i], CU_STREAM_NON_BLOCKING));
  CHECK(bench.cu.cuMemAlloc(&bench.dword, 256));
  CHECK(bench.cu.cuMemHostAlloc(&pin, 4096, CU_MEMHOSTALLOC_PORTABLE |
                                          CU_MEMHOSTALLOC_DEVICEMAP));
  memset(pin, 0, 4096);
  bench.hold = (uint32_t *)pin;
  bench.flag = (uint32_t *)((char *)pin + 64); /* own cache line */
  bench.mflag = (uint32_t *)((char *)pin + 192); /* past raw-launch's word */
  bench.awgate = (uint32_t *)((char *)pin + 256); /* section wake's gate */
  CHECK(bench.cu.cuMemHostGetDevicePointer(&bench.hold_d, pin, 0));
  bench.flag_d = bench.hold_d + 64;
  bench.mflag_d = bench.hold_d + 192;
  bench.awgate_d = bench.hold_d + 256;
  CHECK(bench.cu.cuModuleLoadData(&mod, uvcuda_test_kernels_ptx));
  CHECK(bench.cu.cuModuleGetFunction(&bench.fn_sleep, mod, "uvcuda_sleep_ns"));
#undef CHECK
  bench.xctx[0] = bench.ctx;
  bench.xhold_d[0] = bench.hold_d;
  /* More contexts, more hardware queues: the simulation needs none. */
  if (!bench.sim) {
    for (k = 1; k < bench.opt.contexts; k++) {
      /* makes it current */
      r = bench.cu.cuCtxCreate(&bench.xctx[k], 0, bench.dev);
      for (i = 0; r == CUDA_SUCCESS && i < NPEND; i++)
        r = bench.cu.cuStreamCreate(&bench.xpend[k][i], CU_STREAM_NON_BLOCKING);
      if (r == CUDA_SUCCESS)
        r = bench.cu.cuMemHostGetDevicePointer(&bench.xhold_d[k], pin, 0);
      if (r != CUDA_SUCCESS) {
        printf("scaling: context %d of %d not made (%s); scaling holds "
               "fewer futures\n", k + 1, bench.opt.contexts, cuname(r));
        break;
      }
      bench.nxctx = k + 1;
    }
    bench.cu.cuCtxSetCurrent(bench.ctx);
  }
  printf("scaling: %d context(s) x %d held streams\n", bench.nxctx, NPEND);
  return 0;
}
