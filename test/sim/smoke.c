/*
 * smoke.c - standalone smoke test of the SIMULATED CUDA driver (libsimcuda).
 *
 * Resolves the driver the way uvcuda does (dlopen + cuGetProcAddress_v2) and
 * drives the simulation through the linked-in control API. It checks the
 * simulation's own behaviour; it measures nothing about any GPU.
 * Exits 0 when every check passes, 1 otherwise.
 */
#define _GNU_SOURCE
#include "simcuda.h"

#include "simprobe.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int g_failures;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      g_failures++;                                                            \
    }                                                                          \
  } while (0)

#define CHECK_RES(expr, want)                                           \
  do {                                                                  \
    CUresult got_ = (expr);                                             \
    if (got_ != (want)) {                                               \
      fprintf(stderr, "%s:%d: %s returned %d, expected %d\n", __FILE__, \
              __LINE__, #expr, (int)got_, (int)(want));                 \
      g_failures++;                                                     \
    }                                                                   \
  } while (0)

#define OK(expr) CHECK_RES(expr, CUDA_SUCCESS)

/* ---- driver table, resolved like uvcuda resolves it -------------------- */

static PFN_cuGetProcAddress_v12000 gpa;

static struct {
  PFN_cuInit_v2000 Init;
  PFN_cuDriverGetVersion_v2020 DriverGetVersion;
  PFN_cuGetErrorName_v6000 GetErrorName;
  PFN_cuGetErrorString_v6000 GetErrorString;
  PFN_cuDeviceGetCount_v2000 DeviceGetCount;
  PFN_cuDeviceGetName_v2000 DeviceGetName;
  PFN_cuDeviceGetAttribute_v2000 DeviceGetAttribute;
  PFN_cuDevicePrimaryCtxRetain_v7000 PrimaryCtxRetain;
  PFN_cuDevicePrimaryCtxRelease_v11000 PrimaryCtxRelease;
  PFN_cuCtxSetCurrent_v4000 CtxSetCurrent;
  PFN_cuCtxGetCurrent_v4000 CtxGetCurrent;
  PFN_cuCtxPushCurrent_v4000 CtxPushCurrent;
  PFN_cuCtxPopCurrent_v4000 CtxPopCurrent;
  PFN_cuCtxGetDevice_v13000 CtxGetDevice;
  PFN_cuCtxSynchronize_v13000 CtxSynchronize;
  PFN_cuStreamGetCtx_v9020 StreamGetCtx;
  PFN_cuStreamCreate_v2000 StreamCreate;
  PFN_cuStreamDestroy_v4000 StreamDestroy;
  PFN_cuStreamQuery_v2000 StreamQuery;
  PFN_cuStreamSynchronize_v2000 StreamSynchronize;
  PFN_cuStreamWaitEvent_v3020 StreamWaitEvent;
  PFN_cuStreamIsCapturing_v10000 StreamIsCapturing;
  PFN_cuStreamBeginCapture_v10010 StreamBeginCapture;
  PFN_cuStreamEndCapture_v10000 StreamEndCapture;
  PFN_cuGraphDestroy_v10000 GraphDestroy;
  PFN_cuEventCreate_v2000 EventCreate;
  PFN_cuEventRecord_v2000 EventRecord;
  PFN_cuEventQuery_v2000 EventQuery;
  PFN_cuEventSynchronize_v2000 EventSynchronize;
  PFN_cuEventDestroy_v4000 EventDestroy;
  PFN_cuLaunchHostFunc_v10000 LaunchHostFunc;
  simcuda_pfn_cuLaunchHostFunc_v2 LaunchHostFunc_v2;
  PFN_cuStreamAddCallback_v5000 StreamAddCallback;
  PFN_cuStreamWriteValue32_v11070 WriteValue32;
  PFN_cuStreamWriteValue64_v11070 WriteValue64;
  PFN_cuStreamWaitValue32_v11070 WaitValue32;
  PFN_cuMemHostAlloc_v2020 MemHostAlloc;
  PFN_cuMemFreeHost_v2000 MemFreeHost;
  PFN_cuMemHostGetDevicePointer_v3020 MemHostGetDevicePointer;
  PFN_cuMemAlloc_v3020 MemAlloc;
  PFN_cuMemFree_v3020 MemFree;
  PFN_cuMemcpyHtoDAsync_v3020 MemcpyHtoDAsync;
  PFN_cuMemcpyDtoHAsync_v3020 MemcpyDtoHAsync;
  PFN_cuMemsetD8Async_v3020 MemsetD8Async;
  PFN_cuMemsetD32Async_v3020 MemsetD32Async;
  PFN_cuModuleLoadData_v2000 ModuleLoadData;
  PFN_cuModuleGetFunction_v2000 ModuleGetFunction;
  PFN_cuModuleUnload_v2000 ModuleUnload;
  PFN_cuLaunchKernel_v4000 LaunchKernel;
  PFN_cuCtxCreate_v12050 CtxCreate;
  PFN_cuCtxCreate_v3020 CtxCreate_v3020;
  PFN_cuCtxDestroy_v4000 CtxDestroy;
  PFN_cuCtxGetId_v12000 CtxGetId;
  PFN_cuDevicePrimaryCtxReset_v11000 PrimaryCtxReset;
  PFN_cuStreamGetId_v12000 StreamGetId;
  PFN_cuThreadExchangeStreamCaptureMode_v10010 ExchangeCaptureMode;
  PFN_cuGraphInstantiateWithFlags_v11040 GraphInstantiate;
  PFN_cuGraphLaunch_v10000 GraphLaunch;
  PFN_cuGraphExecDestroy_v10000 GraphExecDestroy;
  PFN_cuMemHostRegister_v6050 MemHostRegister;
  PFN_cuMemHostUnregister_v4000 MemHostUnregister;
} cu;

static CUdriverProcAddressQueryResult lookup(const char *name, int version,
                                             void **out) {
  CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)77;
  *out = (void *)1;
  CUresult r = gpa(name, out, version, CU_GET_PROC_ADDRESS_DEFAULT, &st);
  if (r != CUDA_SUCCESS) {
    fprintf(stderr, "cuGetProcAddress(%s, %d) returned %d\n", name, version,
            (int)r);
    g_failures++;
  }
  return st;
}

#define LOAD(field, name, version)                                            \
  do {                                                                        \
    void *p_;                                                                 \
    CUdriverProcAddressQueryResult st_ = lookup(name, version, &p_);          \
    if (st_ != CU_GET_PROC_ADDRESS_SUCCESS || !p_) {                          \
      fprintf(stderr, "cannot resolve %s at %d (status %d)\n", name, version, \
              (int)st_);                                                      \
      exit(1);                                                                \
    }                                                                         \
    memcpy(&cu.field, &p_, sizeof p_);                                        \
  } while (0)

static void load_driver(void) {
  const char *path = getenv("UVCUDA_LIBCUDA");
  Dl_info info;
  if (!path || !*path) { /* fall back to the copy we are linked against */
    if (!dladdr((void *)simcuda_is_simulation, &info) || !info.dli_fname) {
      fprintf(stderr, "cannot locate libsimcuda\n");
      exit(1);
    }
    path = info.dli_fname;
  }
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "dlopen(%s): %s\n", path, dlerror());
    exit(1);
  }
  void *sym = dlsym(h, "cuGetProcAddress_v2");
  if (!sym) {
    fprintf(stderr, "no cuGetProcAddress_v2 in %s\n", path);
    exit(1);
  }
  memcpy(&gpa, &sym, sizeof sym);
  /* Everything else only through cuGetProcAddress: no cuInit etc. exported. */
  CHECK(dlsym(h, "cuInit") == NULL);
  CHECK(dlsym(h, "cuStreamQuery") == NULL);

  const int v = 13000;
  LOAD(Init, "cuInit", v);
  LOAD(DriverGetVersion, "cuDriverGetVersion", v);
  LOAD(GetErrorName, "cuGetErrorName", v);
  LOAD(GetErrorString, "cuGetErrorString", v);
  LOAD(DeviceGetCount, "cuDeviceGetCount", v);
  LOAD(DeviceGetName, "cuDeviceGetName", v);
  LOAD(DeviceGetAttribute, "cuDeviceGetAttribute", v);
  LOAD(PrimaryCtxRetain, "cuDevicePrimaryCtxRetain", v);
  LOAD(PrimaryCtxRelease, "cuDevicePrimaryCtxRelease", v);
  LOAD(CtxSetCurrent, "cuCtxSetCurrent", v);
  LOAD(CtxGetCurrent, "cuCtxGetCurrent", v);
  LOAD(CtxPushCurrent, "cuCtxPushCurrent", v);
  LOAD(CtxPopCurrent, "cuCtxPopCurrent", v);
  LOAD(CtxGetDevice, "cuCtxGetDevice", v);
  LOAD(CtxSynchronize, "cuCtxSynchronize", v);
  LOAD(StreamGetCtx, "cuStreamGetCtx", v);
  LOAD(StreamCreate, "cuStreamCreate", v);
  LOAD(StreamDestroy, "cuStreamDestroy", v);
  LOAD(StreamQuery, "cuStreamQuery", v);
  LOAD(StreamSynchronize, "cuStreamSynchronize", v);
  LOAD(StreamWaitEvent, "cuStreamWaitEvent", v);
  LOAD(StreamIsCapturing, "cuStreamIsCapturing", v);
  LOAD(StreamBeginCapture, "cuStreamBeginCapture", v);
  LOAD(StreamEndCapture, "cuStreamEndCapture", v);
  LOAD(GraphDestroy, "cuGraphDestroy", v);
  LOAD(EventCreate, "cuEventCreate", v);
  LOAD(EventRecord, "cuEventRecord", v);
  LOAD(EventQuery, "cuEventQuery", v);
  LOAD(EventSynchronize, "cuEventSynchronize", v);
  LOAD(EventDestroy, "cuEventDestroy", v);
  LOAD(LaunchHostFunc, "cuLaunchHostFunc", v);
  LOAD(StreamAddCallback, "cuStreamAddCallback", v);
  LOAD(WriteValue32, "cuStreamWriteValue32", v);
  LOAD(WriteValue64, "cuStreamWriteValue64", v);
  LOAD(WaitValue32, "cuStreamWaitValue32", v);
  LOAD(MemHostAlloc, "cuMemHostAlloc", v);
  LOAD(MemFreeHost, "cuMemFreeHost", v);
  LOAD(MemHostGetDevicePointer, "cuMemHostGetDevicePointer", v);
  LOAD(MemAlloc, "cuMemAlloc", v);
  LOAD(MemFree, "cuMemFree", v);
  LOAD(MemcpyHtoDAsync, "cuMemcpyHtoDAsync", v);
  LOAD(MemcpyDtoHAsync, "cuMemcpyDtoHAsync", v);
  LOAD(MemsetD8Async, "cuMemsetD8Async", v);
  LOAD(MemsetD32Async, "cuMemsetD32Async", v);
  LOAD(ModuleLoadData, "cuModuleLoadData", v);
  LOAD(ModuleGetFunction, "cuModuleGetFunction", v);
  LOAD(ModuleUnload, "cuModuleUnload", v);
  LOAD(LaunchKernel, "cuLaunchKernel", v);
  LOAD(CtxCreate, "cuCtxCreate", v);
  LOAD(CtxCreate_v3020, "cuCtxCreate", 3020);
  LOAD(CtxDestroy, "cuCtxDestroy", v);
  LOAD(CtxGetId, "cuCtxGetId", v);
  LOAD(PrimaryCtxReset, "cuDevicePrimaryCtxReset", v);
  LOAD(StreamGetId, "cuStreamGetId", v);
  LOAD(ExchangeCaptureMode, "cuThreadExchangeStreamCaptureMode", v);
  LOAD(GraphInstantiate, "cuGraphInstantiate", v);
  LOAD(GraphLaunch, "cuGraphLaunch", v);
  LOAD(GraphExecDestroy, "cuGraphExecDestroy", v);
  LOAD(MemHostRegister, "cuMemHostRegister", v);
  LOAD(MemHostUnregister, "cuMemHostUnregister", v);
}

/* ---- helpers ------------------------------------------------------------ */

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_ms(unsigned ms) {
  struct timespec ts = {.tv_sec = ms / 1000,
                        .tv_nsec = (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

#define MS 1000000ull

/* Host-function bookkeeping. Written on the driver host thread, read by the
 * main thread after a synchronize (which orders the two). */
struct rec {
  pthread_t thread;
  uint64_t when;
  int order;
  int ran;
};

static int g_seq; /* only touched on the driver host thread, and after syncs */

static void record_fn(void *ud) {
  struct rec *r = ud;
  r->thread = pthread_self();
  r->when = now_ns();
  r->order = ++g_seq;
  r->ran++;
}

/* The counts as a host function sees them while it runs. */
static uint64_t seen_v2_spin, seen_all;
static void count_fn(void *ud) {
  (void)ud;
  seen_v2_spin = simcuda_hostfn_v2_count(SIMCUDA_HOST_TASK_SPINWAIT);
  seen_all = simcuda_hostfn_count();
}

struct cb_rec {
  CUresult status;
  int ran;
};

static void callback_fn(CUstream s, CUresult status, void *ud) {
  (void)s;
  struct cb_rec *c = ud;
  c->status = status;
  c->ran++;
}

static const char k_ptx[] =
    "//\n// simulated module for smoke.c\n//\n"
    ".version 8.0\n.target sm_90\n.address_size 64\n\n"
    ".visible .entry uvcuda_sleep_ns(\n\t.param .u64 uvcuda_sleep_ns_param_0\n)\n{\n\tret;\n}\n"
    ".visible .entry uvcuda_fault()\n{\n\tret;\n}\n"
    ".visible .entry uvcuda_add_u32(.param .u64 a, .param .u32 b, .param .u32 c)\n{\n\tret;\n}\n"
    ".visible .entry uvcuda_checksum_u8(.param .u64 a, .param .u32 b, .param .u64 c)\n{\n\tret;\n}\n"
    ".visible .entry something_else()\n{\n\tret;\n}\n";

static CUfunction f_sleep, f_fault, f_add, f_sum, f_other;

static CUresult launch_sleep(CUstream s, uint64_t ns) {
  void *params[] = {&ns};
  return cu.LaunchKernel(f_sleep, 1, 1, 1, 32, 1, 1, 0, s, params, NULL);
}

static uint32_t fnv1a(const void *p, size_t n) {
  const uint8_t *b = p;
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++) {
    h ^= b[i];
    h *= 16777619u;
  }
  return h;
}

/* ---- tests ----------------------------------------------------------------
 */

static void test_before_init(void) {
  void *p;
  CHECK(simcuda_is_simulation() == 1);

  int v = 0;
  OK(cu.DriverGetVersion(&v));
  CHECK(v == 13000);

  CUstream s;
  CHECK_RES(cu.StreamCreate(&s, 0), CUDA_ERROR_NOT_INITIALIZED);
  int n;
  CHECK_RES(cu.DeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);

  /* Version gating on a 13.0 driver. */
  CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)77;
  p = (void *)1;
  CHECK_RES(gpa("cuLaunchHostFunc_v2", &p, 13020, 0, &st),
            CUDA_ERROR_INVALID_VALUE);
  CHECK(st == (CUdriverProcAddressQueryResult)77); /* left unwritten */
  CHECK(lookup("cuLaunchHostFunc_v2", 13000, &p) ==
            CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND &&
        !p);
  CHECK(lookup("cuNoSuchThing", 13000, &p) ==
            CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND &&
        !p);
  CHECK(lookup("cuMemAlloc", 3000, &p) ==
            CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT &&
        !p);

  /* Two ABIs of one name give different implementations. */
  void *sync_old, *sync_new;
  CHECK(lookup("cuCtxSynchronize", 12080, &sync_old) ==
        CU_GET_PROC_ADDRESS_SUCCESS);
  CHECK(lookup("cuCtxSynchronize", 13000, &sync_new) ==
        CU_GET_PROC_ADDRESS_SUCCESS);
  CHECK(sync_old && sync_new && sync_old != sync_new);

  /* SIMCUDA_HIDE from the environment (set in main). */
  CHECK(lookup("cuMemcpyPeerAsync", 13000, &p) ==
        CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);

  /* The simulation's own name, before cuInit too: simcuda_is_simulation. */
  int (*is_sim)(void) = NULL;
  CHECK(lookup(SUPPORT_SIM_PROBE_NAME, SUPPORT_SIM_PROBE_VERSION, &p) ==
            CU_GET_PROC_ADDRESS_SUCCESS &&
        p);
  memcpy(&is_sim, &p, sizeof p);
  CHECK(is_sim == simcuda_is_simulation && is_sim() == 1);
  CHECK(lookup(SUPPORT_SIM_PROBE_NAME, 2000, &p) == CU_GET_PROC_ADDRESS_SUCCESS);
  st = (CUdriverProcAddressQueryResult)77;
  CHECK_RES(gpa(SUPPORT_SIM_PROBE_NAME, &p, 13020, 0, &st),
            CUDA_ERROR_INVALID_VALUE);
  CHECK(st == (CUdriverProcAddressQueryResult)77);

  /* Error names and strings. */
  const char *str = NULL;
  OK(cu.GetErrorName(CUDA_ERROR_ILLEGAL_ADDRESS, &str));
  CHECK(str && strcmp(str, "CUDA_ERROR_ILLEGAL_ADDRESS") == 0);
  OK(cu.GetErrorString(CUDA_SUCCESS, &str));
  CHECK(str && strcmp(str, "no error") == 0);
  OK(cu.GetErrorString(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, &str));
  CHECK(str &&
        strcmp(str, "operation not permitted when stream is capturing") == 0);
  str = "x";
  CHECK_RES(cu.GetErrorName((CUresult)12345, &str), CUDA_ERROR_INVALID_VALUE);
  CHECK(str == NULL);
}

static void *no_context_thread(void *arg) {
  CUresult *out = arg;
  CUstream s;
  out[0] = cu.StreamQuery(NULL);
  out[1] = cu.StreamCreate(&s, 0);
  return NULL;
}

static void test_devices(CUcontext *c0, CUcontext *c1) {
  OK(cu.Init(0));
  int n = 0;
  OK(cu.DeviceGetCount(&n));
  CHECK(n == 2);
  char name[128];
  OK(cu.DeviceGetName(name, sizeof name, 1));
  CHECK(strcmp(name, "uvcuda simulated device 1 (not a GPU)") == 0);
  int a = -1;
  OK(cu.DeviceGetAttribute(&a, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                           0));
  CHECK(a == 9);
  OK(cu.DeviceGetAttribute(&a, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1,
                           0));
  CHECK(a == 0);
  OK(cu.DeviceGetAttribute(
      &a, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, 0));
  CHECK(a == 1);

  /* No current context yet. */
  CUstream s;
  CHECK_RES(cu.StreamCreate(&s, 0), CUDA_ERROR_INVALID_CONTEXT);
  CHECK_RES(cu.StreamQuery(NULL), CUDA_ERROR_INVALID_CONTEXT);
  CHECK_RES(simcuda_enqueue_work(NULL, 1), CUDA_ERROR_INVALID_CONTEXT);

  CUcontext again;
  OK(cu.PrimaryCtxRetain(c0, 0));
  OK(cu.PrimaryCtxRetain(&again, 0));
  CHECK(again == *c0);
  OK(cu.PrimaryCtxRelease(0));
  OK(cu.PrimaryCtxRetain(c1, 1));
  CHECK(*c1 != *c0);
  OK(cu.CtxSetCurrent(*c0));
  CUcontext cur = NULL;
  OK(cu.CtxGetCurrent(&cur));
  CHECK(cur == *c0);
  CUdevice d = -1;
  OK(cu.CtxGetDevice(&d, *c1));
  CHECK(d == 1);
  OK(cu.CtxGetDevice(&d, NULL));
  CHECK(d == 0);

  /* The current context is per thread. */
  CUresult res[2] = {CUDA_SUCCESS, CUDA_SUCCESS};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, no_context_thread, res) == 0);
  pthread_join(t, NULL);
  CHECK(res[0] == CUDA_ERROR_INVALID_CONTEXT &&
        res[1] == CUDA_ERROR_INVALID_CONTEXT);

  /* Push/pop. */
  OK(cu.CtxPushCurrent(*c1));
  OK(cu.CtxGetCurrent(&cur));
  CHECK(cur == *c1);
  OK(cu.CtxPopCurrent(&cur));
  CHECK(cur == *c1);
  OK(cu.CtxGetCurrent(&cur));
  CHECK(cur == *c0);
}

static void load_module(CUmodule *mod) {
  OK(cu.ModuleLoadData(mod, k_ptx));
  OK(cu.ModuleGetFunction(&f_sleep, *mod, "uvcuda_sleep_ns"));
  OK(cu.ModuleGetFunction(&f_fault, *mod, "uvcuda_fault"));
  OK(cu.ModuleGetFunction(&f_add, *mod, "uvcuda_add_u32"));
  OK(cu.ModuleGetFunction(&f_sum, *mod, "uvcuda_checksum_u8"));
  OK(cu.ModuleGetFunction(&f_other, *mod, "something_else"));
  CUfunction f;
  CHECK_RES(cu.ModuleGetFunction(&f, *mod, "nope"), CUDA_ERROR_NOT_FOUND);
  CHECK_RES(cu.LaunchKernel(f_other, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL),
            CUDA_ERROR_NOT_SUPPORTED);
}

static void test_order_and_async(void) {
  CUstream s1, s2;
  OK(cu.StreamCreate(&s1, 0));
  OK(cu.StreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  CUcontext c;
  OK(cu.StreamGetCtx(s1, &c));

  /* In-order execution within a stream. */
  struct rec a = {0}, b = {0}, d = {0};
  g_seq = 0;
  uint64_t t0 = now_ns();
  OK(cu.LaunchHostFunc(s1, record_fn, &a));
  OK(launch_sleep(s1, 30 * MS));
  OK(cu.LaunchHostFunc(s1, record_fn, &b));
  OK(simcuda_enqueue_work(s1, 10 * MS));
  OK(cu.LaunchHostFunc(s1, record_fn, &d));
  OK(cu.StreamSynchronize(s1));
  CHECK(a.order == 1 && b.order == 2 && d.order == 3);
  CHECK(b.when - a.when >= 30 * MS);
  CHECK(d.when - t0 >= 40 * MS);
  OK(cu.StreamQuery(s1));

  /* Asynchrony: enqueue returns at once, two streams overlap. */
  t0 = now_ns();
  OK(launch_sleep(s1, 200 * MS));
  OK(launch_sleep(s2, 200 * MS));
  uint64_t t_enq = now_ns() - t0;
  CHECK(t_enq < 100 * MS);
  CHECK_RES(cu.StreamQuery(s1), CUDA_ERROR_NOT_READY);
  OK(cu.StreamSynchronize(s1));
  OK(cu.StreamSynchronize(s2));
  uint64_t total = now_ns() - t0;
  CHECK(total >= 200 * MS);
  CHECK(total < 380 * MS); /* serial execution would take >= 400 ms */

  /* Host functions of different streams run on one driver thread. */
  struct rec h1 = {0}, h2 = {0};
  uint64_t before = simcuda_hostfn_count();
  OK(cu.LaunchHostFunc(s1, record_fn, &h1));
  OK(cu.LaunchHostFunc(s2, record_fn, &h2));
  OK(cu.CtxSynchronize(NULL));
  CHECK(h1.ran == 1 && h2.ran == 1);
  CHECK(pthread_equal(h1.thread, h2.thread));
  CHECK(pthread_equal(h1.thread, a.thread));
  CHECK(!pthread_equal(h1.thread, pthread_self()));
  CHECK(simcuda_hostfn_count() == before + 2);

  /* Default stream (NULL) works with a current context. */
  struct rec z = {0};
  OK(cu.LaunchHostFunc(NULL, record_fn, &z));
  OK(cu.StreamSynchronize(CU_STREAM_LEGACY));
  CHECK(z.ran == 1);

  OK(cu.StreamDestroy(s1));
  OK(cu.StreamDestroy(s2));
}

static void test_memops(void) {
  CUstream s;
  OK(cu.StreamCreate(&s, 0));
  uint32_t *flag = NULL, *data = NULL;
  uint64_t *flag64 = NULL;
  OK(cu.MemHostAlloc((void **)&flag, 64,
                     CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
  OK(cu.MemHostAlloc((void **)&data, 16 * sizeof(uint32_t), 0));
  OK(cu.MemHostAlloc((void **)&flag64, 8, 0));
  CHECK(((uintptr_t)flag & 63) == 0 && flag[0] == 0 && flag[15] == 0);
  CUdeviceptr dflag, ddata, dflag64;
  OK(cu.MemHostGetDevicePointer(&dflag, flag, 0));
  OK(cu.MemHostGetDevicePointer(&ddata, data, 0));
  OK(cu.MemHostGetDevicePointer(&dflag64, flag64, 0));
  CHECK(dflag == (CUdeviceptr)(uintptr_t)flag);
  uint32_t stack_var = 0;
  CUdeviceptr dummy;
  CHECK_RES(cu.MemHostGetDevicePointer(&dummy, &stack_var, 0),
            CUDA_ERROR_INVALID_VALUE);

  /* The write lands after prior work and publishes its effects (release). */
  uint64_t landed = simcuda_memop_count();
  uint32_t n = 16, inc = 5;
  void *add_params[] = {&ddata, &n, &inc};
  OK(launch_sleep(s, 20 * MS));
  OK(cu.LaunchKernel(f_add, 1, 1, 1, 16, 1, 1, 0, s, add_params, NULL));
  OK(cu.WriteValue32(s, dflag, 1, 0));
  OK(cu.WriteValue64(s, dflag64, 0x1122334455667788ull, 0));
  CHECK(__atomic_load_n(flag, __ATOMIC_ACQUIRE) == 0);
  while (__atomic_load_n(flag, __ATOMIC_ACQUIRE) != 1) sleep_ms(1);
  CHECK(data[0] == 5 &&
        data[15] == 5); /* no synchronize: ordered by the release store */
  OK(cu.StreamSynchronize(s));
  CHECK(*flag64 == 0x1122334455667788ull);
  CHECK(simcuda_memop_count() == landed + 2);

  /* Misaligned or unregistered addresses are refused. */
  CHECK_RES(cu.WriteValue32(s, dflag + 2, 1, 0), CUDA_ERROR_INVALID_VALUE);
  CHECK_RES(cu.WriteValue32(s, (CUdeviceptr)(uintptr_t)&stack_var, 1, 0),
            CUDA_ERROR_INVALID_VALUE);

  /* WaitValue32 holds the stream until the host stores. */
  __atomic_store_n(flag, 0, __ATOMIC_RELEASE);
  struct rec after = {0};
  OK(cu.WaitValue32(s, dflag, 7, CU_STREAM_WAIT_VALUE_GEQ));
  OK(cu.LaunchHostFunc(s, record_fn, &after));
  sleep_ms(50);
  CHECK_RES(cu.StreamQuery(s), CUDA_ERROR_NOT_READY);
  __atomic_store_n(flag, 6, __ATOMIC_RELEASE);
  sleep_ms(20);
  CHECK_RES(cu.StreamQuery(s), CUDA_ERROR_NOT_READY);
  __atomic_store_n(flag, 7, __ATOMIC_RELEASE);
  OK(cu.StreamSynchronize(s));
  CHECK(after.ran == 1);

  /* GEQ is wrap-safe: 5 is "after" 0xfffffffe. */
  OK(cu.WaitValue32(s, dflag, 0xfffffffeu, CU_STREAM_WAIT_VALUE_GEQ));
  __atomic_store_n(flag, 5, __ATOMIC_RELEASE);
  OK(cu.StreamSynchronize(s));
  /* EQ, AND, NOR. */
  __atomic_store_n(flag, 0x10, __ATOMIC_RELEASE);
  OK(cu.WaitValue32(s, dflag, 0x10, CU_STREAM_WAIT_VALUE_EQ));
  OK(cu.WaitValue32(s, dflag, 0x30, CU_STREAM_WAIT_VALUE_AND));
  OK(cu.WaitValue32(s, dflag, 0x0f, CU_STREAM_WAIT_VALUE_NOR));
  OK(cu.StreamSynchronize(s));
  __atomic_store_n(flag, 0xffffffffu, __ATOMIC_RELEASE);
  OK(cu.WaitValue32(s, dflag, 0,
                    CU_STREAM_WAIT_VALUE_NOR)); /* ~(all ones) == 0: waits */
  sleep_ms(20);
  CHECK_RES(cu.StreamQuery(s), CUDA_ERROR_NOT_READY);
  __atomic_store_n(flag, 0, __ATOMIC_RELEASE);
  OK(cu.StreamSynchronize(s));
  CHECK_RES(cu.WaitValue32(s, dflag, 0, CU_STREAM_WAIT_VALUE_FLUSH),
            CUDA_ERROR_INVALID_VALUE);

  /* The v1 ABI answers NOT_SUPPORTED, as on the real driver. */
  void *p;
  CHECK(lookup("cuStreamWriteValue32", 11000, &p) ==
        CU_GET_PROC_ADDRESS_SUCCESS);
  PFN_cuStreamWriteValue32_v8000 v1;
  memcpy(&v1, &p, sizeof p);
  CHECK(p != (void *)cu.WriteValue32);
  CHECK_RES(v1(s, dflag, 1, 0), CUDA_ERROR_NOT_SUPPORTED);

  /* Device memory, copies, memset and the checksum kernel. */
  static const char msg[] = "uvcuda simulation";
  CUdeviceptr din, dout;
  uint32_t *hout = NULL;
  OK(cu.MemAlloc(&din, sizeof msg));
  OK(cu.MemAlloc(&dout, 4));
  OK(cu.MemHostAlloc((void **)&hout, 4, 0));
  OK(cu.MemsetD8Async(din, 0, sizeof msg, s));
  OK(cu.MemsetD32Async(dout, 0xdeadbeef, 1, s));
  OK(cu.MemcpyHtoDAsync(din, msg, sizeof msg - 1, s));
  uint32_t len = sizeof msg - 1;
  void *sum_params[] = {&din, &len, &dout};
  OK(cu.LaunchKernel(f_sum, 1, 1, 1, 1, 1, 1, 0, s, sum_params, NULL));
  OK(cu.MemcpyDtoHAsync(hout, dout, 4, s));
  OK(cu.StreamSynchronize(s));
  CHECK(*hout == fnv1a(msg, sizeof msg - 1));
  CHECK_RES(cu.MemcpyHtoDAsync(din + 4096, msg, 4, s),
            CUDA_ERROR_INVALID_VALUE);
  OK(cu.MemFree(din));
  OK(cu.MemFree(dout));
  CHECK_RES(cu.MemFree(dout), CUDA_ERROR_INVALID_VALUE);

  OK(cu.MemFreeHost(hout));
  OK(cu.MemFreeHost(flag));
  OK(cu.MemFreeHost(data));
  OK(cu.MemFreeHost(flag64));
  CHECK_RES(cu.MemFreeHost(flag), CUDA_ERROR_INVALID_VALUE);
  OK(cu.StreamDestroy(s));
}

static void test_events(void) {
  CUstream s1, s2;
  OK(cu.StreamCreate(&s1, 0));
  OK(cu.StreamCreate(&s2, 0));
  CUevent ev;
  /* SIMCUDA_FAIL from the environment: the first cuEventCreate fails. */
  CHECK_RES(cu.EventCreate(&ev, 0), CUDA_ERROR_OUT_OF_MEMORY);
  OK(cu.EventCreate(&ev, 0));
  OK(cu.EventQuery(ev)); /* never recorded: complete */

  uint64_t t0 = now_ns();
  OK(launch_sleep(s1, 100 * MS));
  OK(cu.EventRecord(ev, s1));
  CHECK_RES(cu.EventQuery(ev), CUDA_ERROR_NOT_READY);
  struct rec r = {0};
  OK(cu.StreamWaitEvent(s2, ev, 0));
  OK(cu.LaunchHostFunc(s2, record_fn, &r));
  /* Re-recording after the wait was enqueued does not change what s2 waits for.
   */
  OK(launch_sleep(s1, 300 * MS));
  OK(cu.EventRecord(ev, s1));
  OK(cu.StreamSynchronize(s2));
  CHECK(r.ran == 1 && r.when - t0 >= 100 * MS && r.when - t0 < 350 * MS);
  CHECK_RES(cu.EventQuery(ev),
            CUDA_ERROR_NOT_READY); /* the latest record is pending */
  OK(cu.EventSynchronize(ev));
  CHECK(now_ns() - t0 >= 400 * MS);
  OK(cu.EventQuery(ev));
  OK(cu.EventDestroy(ev));
  CHECK_RES(cu.EventQuery(ev), CUDA_ERROR_INVALID_HANDLE);
  CHECK_RES(cu.EventDestroy(ev), CUDA_ERROR_INVALID_HANDLE);
  OK(cu.StreamDestroy(s1));
  OK(cu.StreamDestroy(s2));
}

static void test_capture(void) {
  CUstream s;
  OK(cu.StreamCreate(&s, 0));
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  OK(cu.StreamIsCapturing(s, &st));
  CHECK(st == CU_STREAM_CAPTURE_STATUS_NONE);
  CHECK_RES(cu.StreamBeginCapture(NULL, CU_STREAM_CAPTURE_MODE_GLOBAL),
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);

  OK(cu.StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  OK(cu.StreamIsCapturing(s, &st));
  CHECK(st == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CHECK_RES(cu.StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL),
            CUDA_ERROR_ILLEGAL_STATE);
  struct rec r = {0};
  OK(cu.LaunchHostFunc(s, record_fn, &r)); /* recorded, not run */
  OK(launch_sleep(s, 1 * MS));
  CUgraph g = NULL;
  OK(cu.StreamEndCapture(s, &g));
  CHECK(g != NULL);
  OK(cu.GraphDestroy(g));
  CHECK_RES(cu.GraphDestroy(g), CUDA_ERROR_INVALID_HANDLE);

  /* Synchronizing during capture is refused and invalidates it. */
  OK(cu.StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  CHECK_RES(cu.StreamQuery(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CHECK_RES(cu.StreamSynchronize(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  OK(cu.StreamIsCapturing(s, &st));
  CHECK(st == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  CHECK_RES(cu.LaunchHostFunc(s, record_fn, &r),
            CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  g = (CUgraph)1;
  CHECK_RES(cu.StreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  CHECK(g == NULL);
  OK(cu.StreamIsCapturing(s, &st));
  CHECK(st == CU_STREAM_CAPTURE_STATUS_NONE);
  CHECK_RES(cu.StreamEndCapture(s, &g), CUDA_ERROR_ILLEGAL_STATE);
  OK(cu.StreamSynchronize(s));
  CHECK(r.ran == 0);
  OK(cu.StreamDestroy(s));
}

static void test_failure_injection(void) {
  CUstream s;
  OK(cu.StreamCreate(&s, 0));
  uint64_t *f64 = NULL;
  OK(cu.MemHostAlloc((void **)&f64, 8, 0));
  CUdeviceptr d = (CUdeviceptr)(uintptr_t)f64;

  uint64_t calls = simcuda_call_count("cuStreamWriteValue64");
  simcuda_fail("cuStreamWriteValue64", CUDA_ERROR_NOT_SUPPORTED, 2);
  CHECK_RES(cu.WriteValue64(s, d, 1, 0), CUDA_ERROR_NOT_SUPPORTED);
  CHECK_RES(cu.WriteValue64(s, d, 1, 0), CUDA_ERROR_NOT_SUPPORTED);
  OK(cu.WriteValue64(s, d, 1, 0));
  CHECK(simcuda_call_count("cuStreamWriteValue64") == calls + 3);

  struct rec r = {0};
  simcuda_fail("cuLaunchHostFunc", CUDA_ERROR_LAUNCH_FAILED, -1);
  CHECK_RES(cu.LaunchHostFunc(s, record_fn, &r), CUDA_ERROR_LAUNCH_FAILED);
  CHECK_RES(cu.LaunchHostFunc(s, record_fn, &r), CUDA_ERROR_LAUNCH_FAILED);
  simcuda_clear_failures();
  OK(cu.LaunchHostFunc(s, record_fn, &r));
  OK(cu.StreamSynchronize(s));
  CHECK(r.ran == 1 && *f64 == 1);

  /* Hiding, and the HIDE from the environment is gone after clearing. */
  void *p;
  CHECK(lookup("cuMemcpyPeerAsync", 13000, &p) == CU_GET_PROC_ADDRESS_SUCCESS);
  simcuda_hide("cuStreamIsCapturing");
  CHECK(lookup("cuStreamIsCapturing", 13000, &p) ==
            CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND &&
        !p);
  simcuda_clear_failures();
  CHECK(lookup("cuStreamIsCapturing", 13000, &p) ==
            CU_GET_PROC_ADDRESS_SUCCESS &&
        p);

  OK(cu.MemFreeHost(f64));
  OK(cu.StreamDestroy(s));
}

static void test_version_gating(void) {
  void *p;
  CHECK(lookup("cuLaunchHostFunc_v2", 13000, &p) ==
        CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  simcuda_set_driver_version(13020);
  int v = 0;
  OK(cu.DriverGetVersion(&v));
  CHECK(v == 13020);
  CHECK(lookup("cuLaunchHostFunc_v2", 13000, &p) ==
        CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  CHECK(lookup("cuLaunchHostFunc_v2", 13020, &p) ==
            CU_GET_PROC_ADDRESS_SUCCESS &&
        p);
  memcpy(&cu.LaunchHostFunc_v2, &p, sizeof p);

  CUstream s;
  OK(cu.StreamCreate(&s, 0));
  struct rec a = {0}, b = {0};
  uint64_t spin = simcuda_hostfn_v2_count(SIMCUDA_HOST_TASK_SPINWAIT);
  uint64_t blk = simcuda_hostfn_v2_count(SIMCUDA_HOST_TASK_BLOCKING);
  OK(cu.LaunchHostFunc_v2(s, record_fn, &a, SIMCUDA_HOST_TASK_SPINWAIT));
  OK(cu.LaunchHostFunc_v2(s, record_fn, &b, SIMCUDA_HOST_TASK_BLOCKING));
  CHECK_RES(cu.LaunchHostFunc_v2(s, record_fn, &b, 2),
            CUDA_ERROR_INVALID_VALUE);
  OK(cu.StreamSynchronize(s));
  CHECK(a.ran == 1 && b.ran == 1);
  CHECK(simcuda_hostfn_v2_count(SIMCUDA_HOST_TASK_SPINWAIT) == spin + 1);
  CHECK(simcuda_hostfn_v2_count(SIMCUDA_HOST_TASK_BLOCKING) == blk + 1);
  /* A function is counted before it runs: whatever it wakes (a loop that
   * then reads the count) sees it counted. */
  uint64_t all = simcuda_hostfn_count();
  OK(cu.LaunchHostFunc_v2(s, count_fn, NULL, SIMCUDA_HOST_TASK_SPINWAIT));
  OK(cu.StreamSynchronize(s));
  CHECK(seen_v2_spin == spin + 2);
  CHECK(seen_all == all + 1);
  OK(cu.StreamDestroy(s));
  simcuda_set_driver_version(13000);
  CHECK(lookup("cuLaunchHostFunc_v2", 13000, &p) ==
        CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
}

static void test_invalid_handles(void) {
  CUstream bad = (CUstream)(uintptr_t)0xdeadbeef;
  CHECK_RES(cu.StreamQuery(bad), CUDA_ERROR_INVALID_HANDLE);
  CHECK_RES(cu.StreamSynchronize(bad), CUDA_ERROR_INVALID_HANDLE);
  CHECK_RES(cu.StreamDestroy(bad), CUDA_ERROR_INVALID_HANDLE);
  CHECK_RES(cu.LaunchHostFunc(bad, record_fn, NULL), CUDA_ERROR_INVALID_HANDLE);
  CHECK_RES(cu.EventQuery((CUevent)(uintptr_t)0x1234),
            CUDA_ERROR_INVALID_HANDLE);
  CHECK_RES(cu.EventRecord((CUevent)(uintptr_t)0x1234, NULL),
            CUDA_ERROR_INVALID_HANDLE);
  CHECK_RES(cu.ModuleUnload((CUmodule)(uintptr_t)0x1234),
            CUDA_ERROR_INVALID_HANDLE);
  CHECK_RES(cu.LaunchKernel((CUfunction)(uintptr_t)0x1234, 1, 1, 1, 1, 1, 1, 0,
                            NULL, NULL, NULL),
            CUDA_ERROR_INVALID_HANDLE);
  CHECK_RES(cu.GraphDestroy((CUgraph)(uintptr_t)0x1234),
            CUDA_ERROR_INVALID_HANDLE);
  CUfunction f;
  CHECK_RES(
      cu.ModuleGetFunction(&f, (CUmodule)(uintptr_t)0x1234, "uvcuda_fault"),
      CUDA_ERROR_INVALID_HANDLE);
  CHECK_RES(cu.CtxSetCurrent((CUcontext)(uintptr_t)0x1234),
            CUDA_ERROR_INVALID_CONTEXT);

  /* A destroyed stream is invalid at once; its queued work still runs. */
  simcuda_quiesce(); /* earlier destroyed streams finish exiting */
  int live = simcuda_live_streams();
  CUstream s;
  OK(cu.StreamCreate(&s, 0));
  CHECK(simcuda_live_streams() == live + 1);
  struct rec r = {0};
  OK(launch_sleep(s, 50 * MS));
  OK(cu.LaunchHostFunc(s, record_fn, &r));
  uint64_t t0 = now_ns();
  OK(cu.StreamDestroy(s));
  CHECK(now_ns() - t0 < 40 * MS);
  simcuda_set_destroyed_handles(SIMCUDA_DESTROYED_HANDLES_ERROR);
  CHECK_RES(cu.StreamQuery(s), CUDA_ERROR_INVALID_HANDLE);
  CHECK_RES(cu.LaunchHostFunc(s, record_fn, &r), CUDA_ERROR_INVALID_HANDLE);
  simcuda_set_destroyed_handles(SIMCUDA_DESTROYED_HANDLES_ABORT);
  simcuda_quiesce();
  CHECK(r.ran == 1);
  CHECK(simcuda_live_streams() == live);
}


/* ---- stream handles, ids and contexts ---------------------------------- */

/* Handles are reused LIFO (any context, any device) while ids never are. */
static void test_handles_and_ids(CUcontext c0, CUcontext c1) {
  CUstream a, b, x, y, prev = NULL;
  unsigned long long id, last = 0, d0, d1;
  int same = 0, rising = 1;
  simcuda_quiesce();
  for (int i = 0; i < 100; i++) {
    OK(cu.StreamCreate(&a, CU_STREAM_NON_BLOCKING));
    OK(cu.StreamGetId(a, &id));
    if (id <= last) rising = 0;
    last = id;
    if (a == prev) same++;
    prev = a;
    OK(cu.StreamDestroy(a));
  }
  CHECK(same == 99 && rising);

  /* The most recently destroyed handle comes back first, on device 1 too. */
  OK(cu.StreamCreate(&a, 0));
  OK(cu.StreamCreate(&b, 0));
  OK(cu.StreamDestroy(a));
  OK(cu.StreamDestroy(b));
  OK(cu.CtxPushCurrent(c1));
  OK(cu.StreamCreate(&x, 0));
  OK(cu.CtxPopCurrent(NULL));
  OK(cu.StreamCreate(&y, 0));
  CHECK(x == b && y == a);
  CUcontext cx = NULL;
  OK(cu.StreamGetCtx(x, &cx));
  CHECK(cx == c1);
  OK(cu.StreamGetCtx(y, &cx));
  CHECK(cx == c0);

  /* A busy stream's handle is free at once; its old work still runs. */
  struct rec r = {0};
  OK(launch_sleep(y, 50 * MS));
  OK(cu.LaunchHostFunc(y, record_fn, &r));
  OK(cu.StreamDestroy(y));
  OK(cu.StreamCreate(&a, 0));
  CHECK(a == y);
  OK(cu.StreamQuery(a)); /* the new stream has nothing queued */
  simcuda_quiesce();
  CHECK(r.ran == 1);

  /* Special handles: the current context's default stream. */
  OK(cu.StreamGetId(NULL, &d0));
  OK(cu.StreamGetId(CU_STREAM_LEGACY, &id));
  CHECK(id == d0);
  OK(cu.StreamGetId(CU_STREAM_PER_THREAD, &id));
  CHECK(id == d0);
  OK(cu.CtxPushCurrent(c1));
  OK(cu.StreamGetId(NULL, &d1));
  OK(cu.CtxPopCurrent(NULL));
  CHECK(d1 != d0);
  CHECK_RES(cu.StreamGetId(a, NULL), CUDA_ERROR_INVALID_VALUE);
  CHECK_RES(cu.StreamGetId((CUstream)(uintptr_t)0xdeadbeef, &id),
            CUDA_ERROR_INVALID_HANDLE);

  unsigned long long i0 = 0, i1 = 0;
  OK(cu.CtxGetId(c0, &i0));
  OK(cu.CtxGetId(c1, &i1));
  CHECK(i0 != i1);
  OK(cu.CtxGetId(NULL, &id));
  CHECK(id == i0);
  CHECK_RES(cu.CtxGetId((CUcontext)(uintptr_t)0x1234, &id),
            CUDA_ERROR_INVALID_CONTEXT);
  OK(cu.StreamDestroy(a));
  OK(cu.StreamDestroy(x));
}

/* Runs fn in a child whose stderr is captured; returns how it ended. */
static int in_child_capture(void (*fn)(void *), void *arg, char *err,
                            size_t errlen) {
  int fds[2], st = 0;
  size_t got = 0;
  if (pipe(fds) != 0) return -1;
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 2);
    close(fds[0]);
    fn(arg);
    _exit(0);
  }
  close(fds[1]);
  for (;;) {
    ssize_t n = read(fds[0], err + got, errlen - 1 - got);
    if (n <= 0) break;
    got += (size_t)n;
    if (got == errlen - 1) break;
  }
  err[got] = '\0';
  close(fds[0]);
  waitpid(pid, &st, 0);
  return st;
}

static void query_it(void *s) { cu.StreamQuery((CUstream)s); }
static void launch_on_it(void *s) { cu.LaunchHostFunc((CUstream)s, record_fn, NULL); }
static void destroy_it(void *s) { cu.StreamDestroy((CUstream)s); }

/* A destroyed handle aborts (the real driver crashes); garbage handles and
 * handles given to a new stream do not. */
static void test_destroyed_handles(void) {
  CUstream s, again;
  char err[512];
  OK(cu.StreamCreate(&s, 0));
  OK(cu.StreamDestroy(s));
  void (*uses[])(void *) = {query_it, launch_on_it, destroy_it};
  const char *names[] = {"in cuStreamQuery", "in cuLaunchHostFunc",
                         "in cuStreamDestroy"};
  for (int i = 0; i < 3; i++) {
    int st = in_child_capture(uses[i], (void *)s, err, sizeof err);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
    CHECK(strstr(err, "simcuda: use of destroyed stream handle 0x") != NULL);
    CHECK(strstr(err, names[i]) != NULL);
  }
  CHECK(simcuda_set_destroyed_handles(SIMCUDA_DESTROYED_HANDLES_ERROR) ==
        SIMCUDA_DESTROYED_HANDLES_ABORT);
  CHECK_RES(cu.StreamQuery(s), CUDA_ERROR_INVALID_HANDLE);
  CHECK(simcuda_set_destroyed_handles(SIMCUDA_DESTROYED_HANDLES_ABORT) ==
        SIMCUDA_DESTROYED_HANDLES_ERROR);
  CHECK_RES(cu.StreamQuery((CUstream)(uintptr_t)0xdeadbeef),
            CUDA_ERROR_INVALID_HANDLE);
  OK(cu.StreamCreate(&again, 0));
  CHECK(again == s);
  OK(cu.StreamQuery(s)); /* names the new stream now */
  OK(cu.StreamDestroy(again));
}

static void *ctx_destroyed_thread(void *arg) {
  CUresult *r = arg;
  CUstream s;
  r[1] = cu.StreamCreate(&s, 0); /* its current context was destroyed */
  return NULL;
}

static void *create_on_thread(void *arg) {
  CUresult *r = arg;
  CUcontext c;
  r[0] = cu.CtxCreate(&c, NULL, 0, 1);
  pthread_t t;
  pthread_create(&t, NULL, ctx_destroyed_thread, r); /* no context there */
  pthread_join(t, NULL);
  r[2] = r[1];
  r[3] = cu.CtxDestroy(c);
  r[4] = cu.StreamCreate((CUstream[1]){0}, 0);
  return NULL;
}

/* cuCtxCreate: many contexts per device, pushed current; cuCtxDestroy. */
static void test_contexts(CUcontext c0) {
  enum { N = 300 };
  static CUcontext made[N];
  static unsigned long long ids[N];
  int distinct = 1;
  CUcontext cur;
  for (int i = 0; i < N; i++) {
    CUctxCreateParams none = {0};
    if (i % 3 == 0)
      OK(cu.CtxCreate(&made[i], NULL, 0, i % 2));
    else if (i % 3 == 1)
      OK(cu.CtxCreate(&made[i], &none, CU_CTX_SCHED_AUTO, i % 2));
    else
      OK(cu.CtxCreate_v3020(&made[i], 0, i % 2));
    OK(cu.CtxGetCurrent(&cur));
    CHECK(cur == made[i]);
    OK(cu.CtxPopCurrent(NULL));
    OK(cu.CtxGetId(made[i], &ids[i]));
    CUdevice d = -1;
    OK(cu.CtxGetDevice(&d, made[i]));
    CHECK(d == i % 2);
    for (int j = 0; j < i; j++)
      if (made[j] == made[i] || ids[j] == ids[i]) distinct = 0;
  }
  CHECK(distinct);
  OK(cu.CtxGetCurrent(&cur));
  CHECK(cur == c0);
  CUcontext c;
  /* Any affinity parameter is refused unread: a stand-in will do. */
  static uint64_t aff[4];
  CUctxCreateParams with_aff = {
      .execAffinityParams = (CUexecAffinityParam *)(void *)aff,
      .numExecAffinityParams = 1};
  CHECK_RES(cu.CtxCreate(&c, &with_aff, 0, 0), CUDA_ERROR_NOT_SUPPORTED);
  CHECK_RES(cu.CtxCreate(&c, NULL, 0, 2), CUDA_ERROR_INVALID_DEVICE);
  CHECK_RES(cu.CtxDestroy(c0), CUDA_ERROR_INVALID_CONTEXT); /* primary */

  /* Work in a created context; its destroy takes its streams along. */
  CUstream s;
  struct rec r = {0};
  OK(cu.CtxPushCurrent(made[5]));
  OK(cu.StreamCreate(&s, 0));
  OK(cu.LaunchHostFunc(s, record_fn, &r));
  OK(cu.StreamSynchronize(s));
  CHECK(r.ran == 1);
  OK(cu.StreamGetCtx(s, &cur));
  CHECK(cur == made[5]);
  OK(cu.CtxDestroy(made[5])); /* current: popped */
  OK(cu.CtxGetCurrent(&cur));
  CHECK(cur == c0);
  CHECK_RES(cu.StreamQuery(s), CUDA_ERROR_INVALID_HANDLE); /* gone with it */
  CHECK_RES(cu.CtxDestroy(made[5]), CUDA_ERROR_INVALID_CONTEXT);
  CHECK_RES(cu.CtxSetCurrent(made[5]), CUDA_ERROR_INVALID_CONTEXT);
  CHECK_RES(cu.CtxGetId(made[5], &ids[5]), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  OK(cu.CtxCreate(&c, NULL, 0, 1));
  unsigned long long nid;
  OK(cu.CtxGetId(c, &nid));
  CHECK(c != made[5] && nid > ids[N - 1]);
  OK(cu.CtxDestroy(c));

  /* Another thread destroys the context it made; a thread that still has a
   * destroyed context current gets CONTEXT_IS_DESTROYED. */
  CUresult res[5] = {99, 99, 99, 99, 99};
  pthread_t t;
  pthread_create(&t, NULL, create_on_thread, res);
  pthread_join(t, NULL);
  CHECK(res[0] == CUDA_SUCCESS && res[2] == CUDA_ERROR_INVALID_CONTEXT &&
        res[3] == CUDA_SUCCESS && res[4] == CUDA_ERROR_INVALID_CONTEXT);
  OK(cu.CtxPushCurrent(made[7]));
  OK(cu.CtxDestroy(made[8])); /* not current here: the stack is unchanged */
  OK(cu.CtxPushCurrent(made[9]));
  OK(cu.CtxDestroy(made[7]));  /* under the top: stays on the stack */
  OK(cu.CtxPopCurrent(&cur));
  CHECK(cur == made[9]);
  CHECK_RES(cu.StreamCreate(&s, 0), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  OK(cu.CtxPopCurrent(&cur));
  CHECK(cur == made[7]);
  for (int i = 0; i < N; i++)
    if (i != 5 && i != 7 && i != 8) OK(cu.CtxDestroy(made[i]));
  OK(cu.CtxGetCurrent(&cur));
  CHECK(cur == c0);
}

/* ---- stream capture modes and graphs ------------------------------------ */

struct other_call {
  CUcontext ctx;
  int call;
  CUstreamCaptureMode thread_mode;
  CUstream stream;
  CUevent event;
  CUresult r;
};

static void *other_call_thread(void *arg) {
  struct other_call *o = arg;
  CUstreamCaptureMode m = o->thread_mode;
  static uint64_t buf[512];
  cu.CtxSetCurrent(o->ctx);
  if (m != CU_STREAM_CAPTURE_MODE_GLOBAL) cu.ExchangeCaptureMode(&m);
  switch (o->call) {
    case 0:
      o->r = cu.StreamQuery(o->stream);
      break;
    case 1:
      o->r = cu.EventQuery(o->event);
      break;
    case 2: {
      void *p;
      o->r = cu.MemHostAlloc(&p, 65536,
                             CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
      if (o->r == CUDA_SUCCESS) cu.MemFreeHost(p);
      break;
    }
    case 3:
      o->r = cu.MemHostRegister(buf, sizeof buf, CU_MEMHOSTREGISTER_PORTABLE);
      if (o->r == CUDA_SUCCESS) cu.MemHostUnregister(buf);
      break;
    case 4: {
      CUstream s;
      o->r = cu.StreamCreate(&s, 0);
      if (o->r == CUDA_SUCCESS) cu.StreamDestroy(s);
      break;
    }
    case 5: {
      CUevent e;
      o->r = cu.EventCreate(&e, 0);
      if (o->r == CUDA_SUCCESS) cu.EventDestroy(e);
      break;
    }
    default: {
      unsigned long long id;
      o->r = cu.StreamGetId(o->stream, &id);
      break;
    }
  }
  return NULL;
}

/* Capture on s in cap_mode; another thread (interaction mode thread_mode)
 * makes call; then the capturing thread enqueues and ends the capture.
 * Returns the EndCapture result; *other gets the other thread's. */
static CUresult capture_vs_other(CUcontext c0, CUstreamCaptureMode cap_mode,
                                 int call, CUstreamCaptureMode thread_mode,
                                 CUresult *other) {
  CUstream s, idle;
  CUevent ev;
  CUgraph g = NULL;
  pthread_t t;
  OK(cu.StreamCreate(&s, 0));
  OK(cu.StreamCreate(&idle, 0));
  OK(cu.EventCreate(&ev, 0));
  struct other_call o = {c0, call, thread_mode, idle, ev, 99};
  OK(cu.StreamBeginCapture(s, cap_mode));
  pthread_create(&t, NULL, other_call_thread, &o);
  pthread_join(t, NULL);
  *other = o.r;
  CUresult enq = launch_sleep(s, 1000);
  CUresult end = cu.StreamEndCapture(s, &g);
  CHECK(enq == CUDA_SUCCESS || enq == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  CHECK((enq == CUDA_SUCCESS) == (end == CUDA_SUCCESS));
  if (g) OK(cu.GraphDestroy(g));
  OK(cu.EventDestroy(ev));
  OK(cu.StreamDestroy(idle));
  OK(cu.StreamDestroy(s));
  return end;
}

static void *end_capture_thread(void *arg) {
  CUgraph g = NULL;
  *(CUresult *)((void **)arg)[1] = cu.StreamEndCapture((CUstream)((void **)arg)[0], &g);
  return NULL;
}

static void test_capture_modes(CUcontext c0) {
  const CUresult unsup = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  const CUresult inval = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  const CUstreamCaptureMode G = CU_STREAM_CAPTURE_MODE_GLOBAL,
                            T = CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                            R = CU_STREAM_CAPTURE_MODE_RELAXED;
  CUresult other;
  /* Another thread's query, event query, pinned allocation or registration
   * during a GLOBAL capture invalidates it; creating streams and events or
   * asking a stream's id does not. */
  for (int call = 0; call < 7; call++) {
    CUresult end = capture_vs_other(c0, G, call, G, &other);
    if (call < 4) {
      CHECK_RES(other, unsup);
      CHECK_RES(end, inval);
    } else {
      OK(other);
      OK(end);
    }
  }
  /* THREAD_LOCAL and RELAXED captures ignore other threads; a thread whose
   * own mode is RELAXED (or THREAD_LOCAL) ignores others' GLOBAL captures. */
  OK(capture_vs_other(c0, T, 0, G, &other));
  OK(other);
  OK(capture_vs_other(c0, R, 1, G, &other));
  OK(other);
  OK(capture_vs_other(c0, G, 0, R, &other));
  OK(other);
  OK(capture_vs_other(c0, G, 2, T, &other));
  OK(other);

  /* The capturing thread's own unsafe calls: prohibited unless it captures
   * in RELAXED mode or has set its own mode to RELAXED. */
  CUstream s, idle;
  CUgraph g = NULL;
  CUstreamCaptureMode m;
  OK(cu.StreamCreate(&s, 0));
  OK(cu.StreamCreate(&idle, 0));
  OK(cu.StreamBeginCapture(s, T));
  CHECK_RES(cu.StreamQuery(idle), unsup);
  CHECK_RES(cu.StreamEndCapture(s, &g), inval);
  OK(cu.StreamBeginCapture(s, R));
  OK(cu.StreamQuery(idle));
  OK(cu.StreamEndCapture(s, &g));
  OK(cu.GraphDestroy(g));
  OK(cu.StreamBeginCapture(s, G));
  m = R;
  OK(cu.ExchangeCaptureMode(&m));
  CHECK(m == G);
  OK(cu.StreamQuery(idle));
  /* ...but querying the capturing stream itself always invalidates it. */
  CHECK_RES(cu.StreamQuery(s), unsup);
  OK(cu.ExchangeCaptureMode(&m));
  CHECK(m == R);
  CHECK_RES(cu.StreamEndCapture(s, &g), inval);
  m = (CUstreamCaptureMode)7;
  CHECK_RES(cu.ExchangeCaptureMode(&m), CUDA_ERROR_INVALID_VALUE);

  /* A GLOBAL or THREAD_LOCAL capture ends only on its own thread. */
  CUresult wrong = 99;
  void *args[2] = {(void *)s, &wrong};
  pthread_t t;
  OK(cu.StreamBeginCapture(s, G));
  pthread_create(&t, NULL, end_capture_thread, args);
  pthread_join(t, NULL);
  CHECK_RES(wrong, CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
  OK(cu.StreamEndCapture(s, &g));
  OK(cu.GraphDestroy(g));

  /* A graph replays what was captured, once per launch. */
  struct rec r = {0};
  uint32_t *flag = NULL;
  OK(cu.MemHostAlloc((void **)&flag, 64, 0));
  CUgraphExec x;
  OK(cu.StreamBeginCapture(s, G));
  OK(cu.LaunchHostFunc(s, record_fn, &r));
  OK(launch_sleep(s, 1000));
  OK(cu.WriteValue32(s, (CUdeviceptr)(uintptr_t)flag, 5, 0));
  OK(cu.StreamEndCapture(s, &g));
  OK(cu.StreamSynchronize(s));
  CHECK(r.ran == 0 && *flag == 0); /* captured, not run */
  OK(cu.GraphInstantiate(&x, g, 0));
  OK(cu.GraphDestroy(g)); /* the executable graph keeps its copy */
  OK(cu.GraphLaunch(x, s));
  OK(cu.GraphLaunch(x, idle));
  OK(cu.CtxSynchronize(NULL));
  CHECK(r.ran == 2 && __atomic_load_n(flag, __ATOMIC_ACQUIRE) == 5);
  OK(cu.GraphExecDestroy(x));
  CHECK_RES(cu.GraphExecDestroy(x), CUDA_ERROR_INVALID_VALUE);
  CHECK_RES(cu.GraphLaunch(x, s), CUDA_ERROR_INVALID_VALUE);
  CHECK_RES(cu.GraphInstantiate(&x, g, 0), CUDA_ERROR_INVALID_VALUE);
  OK(cu.MemFreeHost(flag));
  OK(cu.StreamDestroy(idle));
  OK(cu.StreamDestroy(s));
}

/* ---- pinned registrations ----------------------------------------------- */

static void test_host_register(void) {
  CUstream s;
  OK(cu.StreamCreate(&s, 0));
  uint32_t *buf = aligned_alloc(64, 4096);
  memset(buf, 0, 4096);
  OK(cu.MemHostRegister(buf, 4096,
                        CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP));
  CHECK_RES(cu.MemHostRegister(buf + 16, 64, 0),
            CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  CHECK_RES(cu.MemHostRegister(buf, 64, 0x100), CUDA_ERROR_INVALID_VALUE);
  CUdeviceptr d = 0;
  OK(cu.MemHostGetDevicePointer(&d, buf + 2, 0));
  CHECK(d == (CUdeviceptr)(uintptr_t)(buf + 2));
  OK(cu.WriteValue32(s, d, 7, 0));
  static const uint32_t src[4] = {1, 2, 3, 4};
  OK(cu.MemcpyHtoDAsync((CUdeviceptr)(uintptr_t)(buf + 8), src, sizeof src, s));
  OK(cu.StreamSynchronize(s));
  CHECK(buf[2] == 7 && buf[8] == 1 && buf[11] == 4);
  CHECK_RES(cu.MemFreeHost(buf), CUDA_ERROR_INVALID_VALUE); /* not the driver's */
  CHECK_RES(cu.MemHostUnregister(buf + 1), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  OK(cu.MemHostUnregister(buf));
  CHECK_RES(cu.MemHostUnregister(buf), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  CHECK_RES(cu.WriteValue32(s, d, 8, 0), CUDA_ERROR_INVALID_VALUE);
  CHECK_RES(cu.MemHostGetDevicePointer(&d, buf, 0), CUDA_ERROR_INVALID_VALUE);
  buf[0] = 1; /* still the caller's memory */
  free(buf);
  OK(cu.StreamDestroy(s));
}

struct held_call {
  int which;
  CUcontext ctx;
  void *mem;
  CUresult r;
};

static void *held_call_thread(void *arg) {
  struct held_call *h = arg;
  CUstream s;
  cu.CtxSetCurrent(h->ctx);
  if (h->which == 0) h->r = cu.MemHostRegister(h->mem, 4096, 0);
  if (h->which == 1) h->r = cu.MemHostUnregister(h->mem);
  if (h->which == 2 && (h->r = cu.StreamCreate(&s, 0)) == CUDA_SUCCESS)
    cu.StreamDestroy(s);
  return NULL;
}

/* simcuda_hold_calls and simcuda_call_count work for the new entries. */
static void test_holds(CUcontext c0) {
  static const char *const names[] = {"cuMemHostRegister", "cuMemHostUnregister",
                                      "cuStreamCreate"};
  void *mem = aligned_alloc(64, 4096);
  for (int i = 0; i < 3; i++) {
    struct held_call h = {i, c0, mem, 99};
    uint64_t calls = simcuda_call_count(names[i]);
    pthread_t t;
    simcuda_hold_calls(names[i], 1);
    pthread_create(&t, NULL, held_call_thread, &h);
    for (int k = 0; k < 5000 && simcuda_held_calls(names[i]) == 0; k++)
      sleep_ms(1);
    CHECK(simcuda_held_calls(names[i]) == 1);
    CHECK(h.r == 99); /* still inside the driver */
    simcuda_hold_calls(names[i], 0);
    pthread_join(t, NULL);
    OK(h.r);
    CHECK(simcuda_call_count(names[i]) == calls + 1);
  }
  free(mem);
  const char *news[] = {"cuCtxCreate", "cuCtxDestroy", "cuCtxGetId",
                        "cuStreamGetId",
                        "cuThreadExchangeStreamCaptureMode", "cuGraphInstantiate",
                        "cuGraphLaunch", "cuGraphExecDestroy"};
  for (size_t i = 0; i < sizeof news / sizeof news[0]; i++)
    CHECK(simcuda_call_count(news[i]) > 0);
}

/* ---- fault scope, hidden faults, primary-context reset ------------------ */

static void test_fault_scope(CUcontext c1) {
  CUcontext a, b;
  CUstream sa, sb, sp;
  for (int scope = 0; scope < 2; scope++) {
    CHECK(simcuda_set_fault_scope(scope) == SIMCUDA_FAULT_SCOPE_CONTEXT);
    CHECK(simcuda_fault_scope() == scope);
    OK(cu.CtxCreate(&a, NULL, 0, 1));
    OK(cu.StreamCreate(&sa, 0));
    OK(cu.CtxCreate(&b, NULL, 0, 1));
    OK(cu.StreamCreate(&sb, 0));
    OK(cu.CtxSetCurrent(c1));
    OK(cu.StreamCreate(&sp, 0));
    OK(cu.CtxPopCurrent(NULL));
    OK(cu.CtxPopCurrent(NULL)); /* back to device 0's primary */
    OK(simcuda_enqueue_fault(sa, CUDA_ERROR_ILLEGAL_ADDRESS));
    CHECK_RES(cu.StreamSynchronize(sa), CUDA_ERROR_ILLEGAL_ADDRESS);
    CUresult want = scope ? CUDA_ERROR_ILLEGAL_ADDRESS : CUDA_SUCCESS;
    CHECK_RES(cu.StreamQuery(sb), want);
    CHECK_RES(cu.StreamQuery(sp), want);
    CHECK_RES(cu.CtxSynchronize(c1), want);
    CHECK_RES(cu.StreamQuery(NULL), CUDA_SUCCESS); /* device 0 */
    CHECK_RES(cu.StreamDestroy(sp), want);
    OK(cu.CtxDestroy(a)); /* ends a created context's fault */
    OK(cu.CtxDestroy(b));
    OK(cu.PrimaryCtxReset(1)); /* ends the primary's */
    OK(cu.CtxSynchronize(c1));
    simcuda_set_fault_scope(SIMCUDA_FAULT_SCOPE_CONTEXT);
  }
}

static void test_busy_streams_hide_fault(void) {
  CUcontext c;
  CUstream gated, busy, idle, faulting;
  uint32_t *gate = NULL;
  OK(cu.CtxCreate(&c, NULL, 0, 1));
  OK(cu.MemHostAlloc((void **)&gate, 64, CU_MEMHOSTALLOC_DEVICEMAP));
  OK(cu.StreamCreate(&gated, 0));
  OK(cu.StreamCreate(&busy, 0));
  OK(cu.StreamCreate(&idle, 0));
  OK(cu.StreamCreate(&faulting, 0));
  OK(cu.WaitValue32(gated, (CUdeviceptr)(uintptr_t)gate, 1, CU_STREAM_WAIT_VALUE_GEQ));
  OK(simcuda_enqueue_work(busy, 60000 * MS)); /* the fault ends it */
  CHECK(simcuda_set_busy_streams_hide_fault(1) == 0);
  CHECK(simcuda_busy_streams_hide_fault() == 1);
  OK(simcuda_enqueue_fault(faulting, CUDA_ERROR_ILLEGAL_ADDRESS));
  CHECK_RES(cu.StreamSynchronize(faulting), CUDA_ERROR_ILLEGAL_ADDRESS);
  for (int i = 0; i < 3; i++) {
    CHECK_RES(cu.StreamQuery(gated), CUDA_ERROR_NOT_READY);
    CHECK_RES(cu.StreamQuery(busy), CUDA_ERROR_NOT_READY);
    CHECK_RES(cu.StreamQuery(idle), CUDA_ERROR_ILLEGAL_ADDRESS);
    CHECK_RES(cu.StreamQuery(faulting), CUDA_ERROR_ILLEGAL_ADDRESS);
    sleep_ms(50);
  }
  CHECK_RES(simcuda_enqueue_work(gated, 1), CUDA_ERROR_ILLEGAL_ADDRESS);
  CHECK_RES(cu.StreamSynchronize(gated), CUDA_ERROR_ILLEGAL_ADDRESS);
  CHECK(simcuda_set_busy_streams_hide_fault(0) == 1);
  OK(cu.CtxDestroy(c));
  uint64_t t0 = now_ns();
  simcuda_quiesce(); /* the 60 s kernel stopped at the fault */
  CHECK(now_ns() - t0 < 10000 * MS);
}

/* After a fault, cuDevicePrimaryCtxReset gives a fresh context behind the
 * same handle: streams gone, pinned memory freed, registrations ended (the
 * registered memory stays the caller's), a new id. */
static void test_primary_reset(CUcontext c1) {
  CUstream s;
  void *pinned = NULL;
  unsigned long long id0, id1;
  CUcontext cur;
  uint32_t *reg = aligned_alloc(64, 4096);
  OK(cu.CtxPushCurrent(c1));
  OK(cu.CtxGetId(c1, &id0));
  OK(cu.MemHostAlloc(&pinned, 64, CU_MEMHOSTALLOC_PORTABLE));
  OK(cu.MemHostRegister(reg, 4096, CU_MEMHOSTREGISTER_DEVICEMAP));
  OK(cu.StreamCreate(&s, 0));
  OK(simcuda_enqueue_fault(s, CUDA_ERROR_ILLEGAL_ADDRESS));
  CHECK_RES(cu.StreamSynchronize(s), CUDA_ERROR_ILLEGAL_ADDRESS);
  OK(cu.PrimaryCtxReset(1));
  OK(cu.CtxGetCurrent(&cur));
  CHECK(cur == c1);
  OK(cu.CtxGetId(c1, &id1));
  CHECK(id1 != id0);
  CHECK_RES(cu.StreamQuery(s), CUDA_ERROR_INVALID_HANDLE);
  CHECK_RES(cu.MemFreeHost(pinned), CUDA_ERROR_INVALID_VALUE);
  CHECK_RES(cu.MemHostUnregister(reg), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  reg[0] = 1; /* still ours */
  free(reg);
  OK(cu.StreamCreate(&s, 0));
  OK(simcuda_enqueue_work(s, 1000));
  OK(cu.StreamSynchronize(s));
  OK(cu.StreamDestroy(s));
  OK(cu.CtxPopCurrent(NULL));
  CHECK_RES(cu.PrimaryCtxReset(5), CUDA_ERROR_INVALID_DEVICE);
}

static void test_fault(CUcontext c0, CUcontext c1, CUmodule *mod) {
  CUstream sa, sb;
  OK(cu.StreamCreate(&sa, 0));
  OK(cu.StreamCreate(&sb, 0));
  uint32_t *flag = NULL, *gate = NULL;
  OK(cu.MemHostAlloc((void **)&flag, 4, 0));
  OK(cu.MemHostAlloc((void **)&gate, 4, 0));
  CUevent ev;
  OK(cu.EventCreate(&ev, 0));

  struct rec x = {0}, y = {0};
  struct cb_rec cb = {CUDA_SUCCESS, 0};
  uint64_t writes = simcuda_memop_count();
  OK(launch_sleep(sa, 30 * MS));
  OK(cu.LaunchKernel(f_fault, 1, 1, 1, 1, 1, 1, 0, sa, NULL, NULL));
  OK(cu.LaunchHostFunc(sa, record_fn, &x));
  OK(cu.WriteValue32(sa, (CUdeviceptr)(uintptr_t)flag, 1, 0));
  OK(cu.EventRecord(ev, sa));
  OK(cu.StreamAddCallback(sa, callback_fn, &cb, 0));
  /* sb is held by a wait nobody satisfies: the fault must release it. */
  OK(cu.WaitValue32(sb, (CUdeviceptr)(uintptr_t)gate, 1,
                    CU_STREAM_WAIT_VALUE_EQ));
  OK(cu.LaunchHostFunc(sb, record_fn, &y));

  CHECK_RES(cu.StreamSynchronize(sa), CUDA_ERROR_ILLEGAL_ADDRESS);
  simcuda_quiesce();
  CHECK(x.ran == 0 && y.ran == 0);
  CHECK(__atomic_load_n(flag, __ATOMIC_ACQUIRE) == 0);
  CHECK(simcuda_memop_count() == writes);
  CHECK(cb.ran == 1 && cb.status == CUDA_ERROR_ILLEGAL_ADDRESS);

  /* Sticky: every later call on the context reports it. */
  CUstream s;
  CUevent e2;
  CUdeviceptr dp;
  CUmodule m2;
  CHECK_RES(cu.StreamQuery(sa), CUDA_ERROR_ILLEGAL_ADDRESS);
  CHECK_RES(cu.StreamQuery(sb), CUDA_ERROR_ILLEGAL_ADDRESS);
  CHECK_RES(cu.StreamSynchronize(sb), CUDA_ERROR_ILLEGAL_ADDRESS);
  CHECK_RES(cu.StreamQuery(NULL), CUDA_ERROR_ILLEGAL_ADDRESS);
  CHECK_RES(cu.EventQuery(ev), CUDA_ERROR_ILLEGAL_ADDRESS);
  CHECK_RES(cu.EventSynchronize(ev), CUDA_ERROR_ILLEGAL_ADDRESS);
  CHECK_RES(cu.CtxSynchronize(NULL), CUDA_ERROR_ILLEGAL_ADDRESS);
  CHECK_RES(cu.StreamCreate(&s, 0), CUDA_ERROR_ILLEGAL_ADDRESS);
  CHECK_RES(cu.EventCreate(&e2, 0), CUDA_ERROR_ILLEGAL_ADDRESS);
  CHECK_RES(cu.MemAlloc(&dp, 16), CUDA_ERROR_ILLEGAL_ADDRESS);
  CHECK_RES(cu.ModuleLoadData(&m2, k_ptx), CUDA_ERROR_ILLEGAL_ADDRESS);
  CHECK_RES(cu.LaunchHostFunc(sa, record_fn, &x), CUDA_ERROR_ILLEGAL_ADDRESS);
  CHECK_RES(launch_sleep(sa, 1), CUDA_ERROR_ILLEGAL_ADDRESS);
  CHECK_RES(cu.WriteValue32(sb, (CUdeviceptr)(uintptr_t)flag, 1, 0),
            CUDA_ERROR_ILLEGAL_ADDRESS);
  CHECK_RES(cu.StreamAddCallback(sa, callback_fn, &cb, 0),
            CUDA_ERROR_ILLEGAL_ADDRESS);

  /* The second device's context is unaffected. */
  OK(cu.CtxPushCurrent(c1));
  CUstream s1;
  OK(cu.StreamCreate(&s1, 0));
  struct rec w = {0};
  OK(simcuda_enqueue_work(s1, 5 * MS));
  OK(cu.LaunchHostFunc(s1, record_fn, &w));
  OK(cu.StreamSynchronize(s1));
  CHECK(w.ran == 1);
  /* A function of device 0's module cannot run on device 1's stream. */
  CHECK_RES(launch_sleep(s1, 1), CUDA_ERROR_INVALID_HANDLE);
  OK(cu.StreamDestroy(s1));
  OK(cu.CtxPopCurrent(NULL));

  /* Releases still release on a faulted context, but report the fault. */
  CHECK_RES(cu.StreamDestroy(sa), CUDA_ERROR_ILLEGAL_ADDRESS);
  CHECK_RES(cu.MemFreeHost(flag), CUDA_ERROR_ILLEGAL_ADDRESS);
  simcuda_set_destroyed_handles(SIMCUDA_DESTROYED_HANDLES_ERROR);
  CHECK_RES(cu.StreamQuery(sa), CUDA_ERROR_INVALID_HANDLE);
  simcuda_set_destroyed_handles(SIMCUDA_DESTROYED_HANDLES_ABORT);

  /* Only destroying the context (last primary release) ends the fault; it
   * takes the context's streams, events, modules and memory with it. */
  OK(cu.PrimaryCtxRelease(0));
  CHECK_RES(cu.StreamCreate(&s, 0), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  CUcontext again = NULL;
  OK(cu.PrimaryCtxRetain(&again, 0));
  CHECK(again == c0);
  CHECK_RES(cu.StreamQuery(sb), CUDA_ERROR_INVALID_HANDLE);
  CHECK_RES(cu.EventQuery(ev), CUDA_ERROR_INVALID_HANDLE);
  CHECK_RES(cu.ModuleUnload(*mod), CUDA_ERROR_INVALID_HANDLE);
  CHECK_RES(cu.MemFreeHost(gate),
            CUDA_ERROR_INVALID_VALUE); /* freed with the context */
  OK(cu.StreamCreate(&s, 0));
  struct rec v = {0};
  OK(cu.LaunchHostFunc(s, record_fn, &v));
  OK(cu.StreamSynchronize(s));
  CHECK(v.ran == 1);
  OK(cu.StreamDestroy(s));
  OK(cu.CtxSynchronize(c0));

  simcuda_quiesce();
  CHECK(simcuda_live_streams() == 0);
  OK(cu.PrimaryCtxRelease(0));
  OK(cu.PrimaryCtxRelease(1));
  CHECK_RES(cu.PrimaryCtxRelease(1), CUDA_ERROR_INVALID_CONTEXT);
}

int main(void) {
  /* Environment configuration is read at first use; set it before that. */
  setenv("SIMCUDA_DEVICES", "2", 1);
  setenv("SIMCUDA_DRIVER_VERSION", "13000", 1);
  setenv("SIMCUDA_FAIL", "cuEventCreate=CUDA_ERROR_OUT_OF_MEMORY:1", 1);
  setenv("SIMCUDA_HIDE", "cuMemcpyPeerAsync", 1);

  load_driver();
  test_before_init();
  CUcontext c0, c1;
  test_devices(&c0, &c1);
  CUmodule mod;
  load_module(&mod);
  test_order_and_async();
  test_memops();
  test_events();
  test_capture();
  test_failure_injection();
  test_version_gating();
  test_invalid_handles();
  test_handles_and_ids(c0, c1);
  test_destroyed_handles();
  test_contexts(c0);
  test_capture_modes(c0);
  test_host_register();
  test_holds(c0);
  test_fault_scope(c1);
  test_busy_streams_hide_fault();
  test_primary_reset(c1);
  test_fault(c0, c1, &mod);

  if (g_failures) {
    fprintf(stderr, "sim-driver-smoke: %d check(s) failed\n", g_failures);
    return 1;
  }
  printf(
      "sim-driver-smoke: all checks passed (simulated driver, no GPU involved)\n");
  return 0;
}
