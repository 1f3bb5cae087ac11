/* uvcuda_pool.node: the thread-pool baseline of the HTTP benchmark.
 *
 * What GPU addons for Node do today (node-llama-cpp and others): one
 * napi_create_async_work per request; its execute callback, on a libuv
 * pool thread, enqueues the work on a CUDA stream and blocks in
 * cuStreamSynchronize; its complete callback, on the JS thread, settles
 * the Promise. No uvcuda in here: the driver is dlopen'ed from the path
 * the caller gives (uvcuda's driverInfo().path, so that both addons share
 * one loaded driver, the simulated one included) and resolved through
 * cuGetProcAddress_v2, as uvcuda does. No CUDA headers: the few types
 * needed are declared below.
 *
 *   const pool = require('.../uvcuda_pool.node');
 *   pool.init(driverPath, ptxText, ordinal = 0);     // once
 *   await pool.roundTrip(streamHandle, devicePtr, input, output,
 *                        sleepNs, addValue);
 *
 * roundTrip: on a pool thread, in the device's primary context, on the
 * given CUstream (a uvcuda Stream's .handle): copy input (a Uint32Array)
 * to devicePtr (a uvcuda DeviceMemory's .ptr, at least input.byteLength),
 * uvcuda_sleep_ns(sleepNs) if sleepNs > 0, uvcuda_add_u32(devicePtr, n,
 * addValue), copy back into output (a Uint32Array of the same length), then
 * cuStreamSynchronize. Resolves with undefined, or rejects with an Error
 * whose code is the CUresult's name. */
#define _GNU_SOURCE
#include <node_api.h>

#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the driver API, the part used here -------------------------------- */

typedef int CUresult; /* CUDA_SUCCESS = 0 */
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef unsigned long long CUdeviceptr; /* the _v2 ABI: 64 bits */

typedef CUresult (*gpa_fn)(const char *symbol, void **pfn, int cudaVersion,
                           uint64_t flags, int *symbolStatus);

static struct {
  CUresult (*Init)(unsigned int);
  CUresult (*DeviceGet)(CUdevice *, int);
  CUresult (*PrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*CtxSetCurrent)(CUcontext);
  CUresult (*ModuleLoadData)(CUmodule *, const void *);
  CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*MemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
  CUresult (*MemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
  CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned,
                           unsigned, unsigned, unsigned, CUstream, void **,
                           void **);
  CUresult (*StreamSynchronize)(CUstream);
  CUresult (*GetErrorName)(CUresult, const char **);
} cu;

/* One per process: the driver and the primary context are per process,
 * and the bench uses this addon from the main thread only. */
static struct {
  int ready;
  CUcontext ctx;
  CUfunction sleep_ns, add_u32;
} g;

/* ---- errors ------------------------------------------------------------ */

static const char *cu_name(CUresult r) {
  const char *s = NULL;
  if (cu.GetErrorName && cu.GetErrorName(r, &s) == 0 && s) return s;
  return "CUDA_ERROR_UNKNOWN";
}

static napi_value throw_msg(napi_env env, const char *code, const char *fmt,
                            const char *arg) {
  char msg[4200]; /* fmt is short; arg is at most a path */
  snprintf(msg, sizeof(msg), fmt, arg ? arg : "");
  napi_throw_error(env, code, msg);
  return NULL;
}

static napi_value throw_cu(napi_env env, const char *what, CUresult r) {
  char msg[256];
  snprintf(msg, sizeof(msg), "%s: %s (%d)", what, cu_name(r), r);
  napi_throw_error(env, cu_name(r), msg);
  return NULL;
}

#define NAPI_OK(call)                                         \
  do {                                                        \
    if ((call) != napi_ok) {                                  \
      const napi_extended_error_info *info_ = NULL;           \
      napi_get_last_error_info(env, &info_);                  \
      bool pending_ = false;                                  \
      napi_is_exception_pending(env, &pending_);              \
      if (!pending_)                                          \
        napi_throw_error(env, NULL,                           \
                         info_ && info_->error_message        \
                             ? info_->error_message           \
                             : "Node-API call failed: " #call); \
      return NULL;                                            \
    }                                                         \
  } while (0)

/* ---- init(driverPath, ptx, ordinal = 0) -------------------------------- */

static int resolve(gpa_fn gpa, const char *name, int version, void **out) {
  int status = -1;
  *out = NULL;
  if (gpa(name, out, version, 0 /* CU_GET_PROC_ADDRESS_DEFAULT */, &status) != 0 ||
      status != 0 /* CU_GET_PROC_ADDRESS_SUCCESS */ || *out == NULL)
    return -1;
  return 0;
}

static napi_value js_init(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  char path[4096];
  size_t len = 0, ptx_len = 0;
  char *ptx = NULL;
  int32_t ordinal = 0;
  void *h, *sym;
  gpa_fn gpa;
  CUdevice dev;
  CUmodule mod;
  CUresult r;

  NAPI_OK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (g.ready) return NULL; /* idempotent */
  if (argc < 2) return throw_msg(env, "ERR_INVALID_ARG_TYPE", "init(driverPath, ptx, ordinal)", NULL);
  NAPI_OK(napi_get_value_string_utf8(env, argv[0], path, sizeof(path), &len));
  NAPI_OK(napi_get_value_string_utf8(env, argv[1], NULL, 0, &ptx_len));
  if (argc > 2) NAPI_OK(napi_get_value_int32(env, argv[2], &ordinal));

  h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) return throw_msg(env, "ENODRIVER", "dlopen: %s", dlerror());
  sym = dlsym(h, "cuGetProcAddress_v2");
  if (sym == NULL) return throw_msg(env, "ENOSYM", "no cuGetProcAddress_v2 in %s", path);
  memcpy(&gpa, &sym, sizeof(sym));

  /* Each at the ABI version of its PFN_*_vNNNN typedef: the _v2 copies. */
#define RESOLVE(field, name, version)                                   \
  do {                                                                  \
    void *p_;                                                           \
    if (resolve(gpa, name, version, &p_) != 0)                          \
      return throw_msg(env, "ENOSYM", "cannot resolve %s", name);       \
    memcpy(&cu.field, &p_, sizeof(p_));                                 \
  } while (0)
  RESOLVE(GetErrorName, "cuGetErrorName", 6000);
  RESOLVE(Init, "cuInit", 2000);
  RESOLVE(DeviceGet, "cuDeviceGet", 2000);
  RESOLVE(PrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 7000);
  RESOLVE(CtxSetCurrent, "cuCtxSetCurrent", 4000);
  RESOLVE(ModuleLoadData, "cuModuleLoadData", 2000);
  RESOLVE(ModuleGetFunction, "cuModuleGetFunction", 2000);
  RESOLVE(MemcpyHtoDAsync, "cuMemcpyHtoDAsync", 3020);
  RESOLVE(MemcpyDtoHAsync, "cuMemcpyDtoHAsync", 3020);
  RESOLVE(LaunchKernel, "cuLaunchKernel", 4000);
  RESOLVE(StreamSynchronize, "cuStreamSynchronize", 2000);
#undef RESOLVE

  if ((r = cu.Init(0)) != 0) return throw_cu(env, "cuInit", r);
  if ((r = cu.DeviceGet(&dev, ordinal)) != 0) return throw_cu(env, "cuDeviceGet", r);
  /* The primary context: the one uvcuda's Device uses, so the streams and
   * memory it made are valid here. Retained for the process's life. */
  if ((r = cu.PrimaryCtxRetain(&g.ctx, dev)) != 0)
    return throw_cu(env, "cuDevicePrimaryCtxRetain", r);
  if ((r = cu.CtxSetCurrent(g.ctx)) != 0) return throw_cu(env, "cuCtxSetCurrent", r);

  ptx = malloc(ptx_len + 1);
  if (ptx == NULL) return throw_msg(env, "ENOMEM", "out of memory", NULL);
  if (napi_get_value_string_utf8(env, argv[1], ptx, ptx_len + 1, &len) != napi_ok) {
    free(ptx);
    return throw_msg(env, "ERR_INVALID_ARG_TYPE", "ptx must be a string", NULL);
  }
  r = cu.ModuleLoadData(&mod, ptx);
  free(ptx);
  if (r != 0) return throw_cu(env, "cuModuleLoadData", r);
  if ((r = cu.ModuleGetFunction(&g.sleep_ns, mod, "uvcuda_sleep_ns")) != 0)
    return throw_cu(env, "cuModuleGetFunction(uvcuda_sleep_ns)", r);
  if ((r = cu.ModuleGetFunction(&g.add_u32, mod, "uvcuda_add_u32")) != 0)
    return throw_cu(env, "cuModuleGetFunction(uvcuda_add_u32)", r);
  g.ready = 1;
  return NULL;
}

/* ---- roundTrip(stream, dptr, input, output, sleepNs, addValue) --------- */

struct trip {
  napi_async_work work;
  napi_deferred deferred;
  napi_ref in_ref, out_ref;
  CUstream stream;
  CUdeviceptr dptr;
  void *in, *out;
  size_t bytes;
  uint32_t n, value;
  uint64_t sleep_ns;
  CUresult result;
  const char *failed; /* the call that failed */
};

static void trip_execute(napi_env env, void *data) {
  struct trip *t = data;
  CUresult r;
  (void)env;
  /* On a failure, whatever was enqueued still runs: wait for it, so that
   * the buffers are free when the promise settles. */
#define STEP(what, call)                                    \
  do {                                                      \
    if ((r = (call)) != 0) {                                \
      t->result = r;                                        \
      t->failed = what;                                     \
      if (strcmp(what, "cuCtxSetCurrent") != 0)             \
        (void)cu.StreamSynchronize(t->stream);              \
      return;                                               \
    }                                                       \
  } while (0)
  STEP("cuCtxSetCurrent", cu.CtxSetCurrent(g.ctx));
  STEP("cuMemcpyHtoDAsync", cu.MemcpyHtoDAsync(t->dptr, t->in, t->bytes, t->stream));
  if (t->sleep_ns > 0) {
    void *args[] = {&t->sleep_ns};
    STEP("cuLaunchKernel(uvcuda_sleep_ns)",
         cu.LaunchKernel(g.sleep_ns, 1, 1, 1, 1, 1, 1, 0, t->stream, args, NULL));
  }
  {
    void *args[] = {&t->dptr, &t->n, &t->value};
    STEP("cuLaunchKernel(uvcuda_add_u32)",
         cu.LaunchKernel(g.add_u32, (t->n + 255) / 256, 1, 1, 256, 1, 1, 0, t->stream,
                         args, NULL));
  }
  STEP("cuMemcpyDtoHAsync", cu.MemcpyDtoHAsync(t->out, t->dptr, t->bytes, t->stream));
  /* The wait that occupies this pool thread until the GPU is done. */
  STEP("cuStreamSynchronize", cu.StreamSynchronize(t->stream));
#undef STEP
  t->result = 0;
}

static void trip_complete(napi_env env, napi_status status, void *data) {
  struct trip *t = data;
  napi_value undef, err, code, msg;
  char text[256];

  if (status == napi_ok && t->result == 0) {
    napi_get_undefined(env, &undef);
    napi_resolve_deferred(env, t->deferred, undef);
  } else {
    const char *name = status == napi_cancelled ? "ECANCELED"
                       : status != napi_ok      ? "ENAPI"
                                                : cu_name(t->result);
    snprintf(text, sizeof(text), "%s: %s (%d)", t->failed ? t->failed : "async work",
             name, (int)t->result);
    napi_create_string_utf8(env, name, NAPI_AUTO_LENGTH, &code);
    napi_create_string_utf8(env, text, NAPI_AUTO_LENGTH, &msg);
    napi_create_error(env, code, msg, &err);
    napi_reject_deferred(env, t->deferred, err);
  }
  napi_delete_reference(env, t->in_ref);
  napi_delete_reference(env, t->out_ref);
  napi_delete_async_work(env, t->work);
  free(t);
}

static napi_value get_u64(napi_env env, napi_value v, uint64_t *out) {
  napi_valuetype type;
  bool lossless;
  double d;
  NAPI_OK(napi_typeof(env, v, &type));
  if (type == napi_bigint) {
    NAPI_OK(napi_get_value_bigint_uint64(env, v, out, &lossless));
    return v;
  }
  if (type == napi_number) {
    NAPI_OK(napi_get_value_double(env, v, &d));
    if (d < 0) return throw_msg(env, "ERR_OUT_OF_RANGE", "negative value", NULL);
    *out = (uint64_t)d;
    return v;
  }
  return throw_msg(env, "ERR_INVALID_ARG_TYPE", "expected a BigInt or a number", NULL);
}

static napi_value get_u32_array(napi_env env, napi_value v, void **data, size_t *len) {
  bool is_ta;
  napi_typedarray_type type;
  NAPI_OK(napi_is_typedarray(env, v, &is_ta));
  if (!is_ta) return throw_msg(env, "ERR_INVALID_ARG_TYPE", "expected a Uint32Array", NULL);
  NAPI_OK(napi_get_typedarray_info(env, v, &type, len, data, NULL, NULL));
  if (type != napi_uint32_array)
    return throw_msg(env, "ERR_INVALID_ARG_TYPE", "expected a Uint32Array", NULL);
  return v;
}

static napi_value js_round_trip(napi_env env, napi_callback_info info) {
  size_t argc = 6, n_in, n_out;
  napi_value argv[6], promise, name;
  uint64_t stream, dptr, sleep_ns;
  uint32_t value;
  void *in, *out;
  struct trip *t;

  NAPI_OK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (!g.ready) return throw_msg(env, "ERR_INVALID_STATE", "call init() first", NULL);
  if (argc < 6)
    return throw_msg(env, "ERR_INVALID_ARG_TYPE",
                     "roundTrip(stream, dptr, input, output, sleepNs, addValue)", NULL);
  if (!get_u64(env, argv[0], &stream) || !get_u64(env, argv[1], &dptr) ||
      !get_u32_array(env, argv[2], &in, &n_in) ||
      !get_u32_array(env, argv[3], &out, &n_out) || !get_u64(env, argv[4], &sleep_ns))
    return NULL;
  NAPI_OK(napi_get_value_uint32(env, argv[5], &value));
  if (n_in != n_out || n_in == 0 || n_in > UINT32_MAX)
    return throw_msg(env, "ERR_OUT_OF_RANGE", "input and output: same non-zero length", NULL);

  t = calloc(1, sizeof(*t));
  if (t == NULL) return throw_msg(env, "ENOMEM", "out of memory", NULL);
  t->stream = (CUstream)(uintptr_t)stream;
  t->dptr = (CUdeviceptr)dptr;
  t->in = in;
  t->out = out;
  t->n = (uint32_t)n_in;
  t->bytes = n_in * sizeof(uint32_t);
  t->value = value;
  t->sleep_ns = sleep_ns;
  /* The arrays stay alive (and their off-heap stores in place) until the
   * complete callback. */
  if (napi_create_reference(env, argv[2], 1, &t->in_ref) != napi_ok ||
      napi_create_reference(env, argv[3], 1, &t->out_ref) != napi_ok ||
      napi_create_string_utf8(env, "uvcudaPoolRoundTrip", NAPI_AUTO_LENGTH, &name) != napi_ok ||
      napi_create_async_work(env, NULL, name, trip_execute, trip_complete, t, &t->work) !=
          napi_ok ||
      napi_create_promise(env, &t->deferred, &promise) != napi_ok ||
      napi_queue_async_work(env, t->work) != napi_ok) {
    /* Only reachable on Node-API failure (out of memory): leak the refs
     * rather than track which were made. */
    free(t);
    return throw_msg(env, "ENAPI", "cannot queue the async work", NULL);
  }
  return promise;
}

NAPI_MODULE_INIT() {
  napi_property_descriptor props[] = {
      {"init", NULL, js_init, NULL, NULL, NULL, napi_enumerable, NULL},
      {"roundTrip", NULL, js_round_trip, NULL, NULL, NULL, napi_enumerable, NULL},
  };
  if (napi_define_properties(env, exports, sizeof(props) / sizeof(props[0]), props) != napi_ok)
    return NULL;
  return exports;
}
