/* A third-party Node-API addon that returns Promises for its own GPU work,
 * built on uvcuda/napi.h (docs/guide-node.md walks through this file).
 *
 *   example.fill(byteLength, value)  -> Promise<Buffer>: byteLength bytes of
 *                                       device memory set to value by the GPU,
 *                                       copied back into a new Buffer
 *   example.copyThrough(bytes)       -> Promise<Buffer>: bytes (a Uint8Array
 *                                       or Buffer) to the device and back
 *
 * Each env (main thread, each worker) has its own stream and 1 MiB of device
 * memory on device 0, made on first use and destroyed when Node deletes the
 * env. Work of one env runs in order on its stream.
 *
 * No CUDA header: uvcuda loads the driver at run time, and the few driver
 * types and entry points used here are declared below and resolved with
 * uvcuda_driver_symbol (the ABI version is the NNNN of cuda.h's
 * PFN_<name>_vNNNN). */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "uvcuda/napi.h"

typedef int CUresult; /* 0: CUDA_SUCCESS */
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;

#define SCRATCH_BYTES (1u << 20)

static struct {
  CUresult (*DeviceGet)(CUdevice *dev, int ordinal);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext *ctx, CUdevice dev);
  CUresult (*DevicePrimaryCtxRelease)(CUdevice dev);
  CUresult (*CtxSetCurrent)(CUcontext ctx);
  CUresult (*StreamCreate)(CUstream *stream, unsigned flags);
  CUresult (*StreamDestroy)(CUstream stream);
  CUresult (*StreamSynchronize)(CUstream stream);
  CUresult (*MemAlloc)(CUdeviceptr *ptr, size_t bytes);
  CUresult (*MemFree)(CUdeviceptr ptr);
  CUresult (*MemsetD8Async)(CUdeviceptr dst, unsigned char value, size_t n,
                            CUstream stream);
  CUresult (*MemcpyHtoDAsync)(CUdeviceptr dst, const void *src, size_t n,
                              CUstream stream);
  CUresult (*MemcpyDtoHAsync)(void *dst, CUdeviceptr src, size_t n,
                              CUstream stream);
} cu;

static pthread_once_t cu_once = PTHREAD_ONCE_INIT;
static int cu_status;

static void cu_resolve(void) {
  void *p;
#define RESOLVE(name, version)                                             \
  if ((cu_status = uvcuda_driver_symbol("cu" #name, version, &p)) != 0)    \
    return;                                                                \
  memcpy(&cu.name, &p, sizeof(p));
  RESOLVE(DeviceGet, 2000)
  RESOLVE(DevicePrimaryCtxRetain, 7000)
  RESOLVE(DevicePrimaryCtxRelease, 11000)
  RESOLVE(CtxSetCurrent, 4000)
  RESOLVE(StreamCreate, 2000)
  RESOLVE(StreamDestroy, 4000)
  RESOLVE(StreamSynchronize, 2000)
  RESOLVE(MemAlloc, 3020)
  RESOLVE(MemFree, 3020)
  RESOLVE(MemsetD8Async, 3020)
  RESOLVE(MemcpyHtoDAsync, 3020)
  RESOLVE(MemcpyDtoHAsync, 3020)
#undef RESOLVE
}

/* Resolves cu once per process (the main thread and workers may race for
 * it); 0 or a uvcuda error (UVCUDA_ENODRIVER, ...). */
static int cu_load(void) {
  pthread_once(&cu_once, cu_resolve);
  return cu_status;
}

/* ---- per-env state ------------------------------------------------------ */

struct env_state {
  CUdevice dev;
  CUcontext ctx;
  CUstream stream;
  CUdeviceptr scratch;
};

/* Runs when Node deletes the env, after uvcuda's loop context closed (so no
 * promise of ours is pending and nothing queries the stream any more). Work
 * of promises cancelled by the teardown may still be queued: wait for it
 * before freeing the memory it uses. */
static void env_state_free(napi_env env, void *data, void *hint) {
  struct env_state *st = data;
  (void)env;
  (void)hint;
  cu.CtxSetCurrent(st->ctx);
  cu.StreamSynchronize(st->stream);
  cu.StreamDestroy(st->stream);
  cu.MemFree(st->scratch);
  cu.DevicePrimaryCtxRelease(st->dev);
  free(st);
}

/* This env's state, made on first use. NULL with a JS exception pending. */
static struct env_state *env_state(napi_env env) {
  struct env_state *st = NULL;
  CUresult r;
  int err;

  /* The helper owns the env's instance data: ours goes here. */
  if (uvcuda_napi_get_data(env, (void **)&st) != napi_ok) return NULL;
  if (st != NULL) return st;
  if ((err = cu_load()) != 0) {
    uvcuda_napi_throw(env, err);
    return NULL;
  }
  if ((st = calloc(1, sizeof(*st))) == NULL) {
    uvcuda_napi_throw(env, UVCUDA_ENOMEM);
    return NULL;
  }
  if ((r = cu.DeviceGet(&st->dev, 0)) != 0 ||
      (r = cu.DevicePrimaryCtxRetain(&st->ctx, st->dev)) != 0) {
    free(st);
    uvcuda_napi_throw(env, UVCUDA_ECUDA(r));
    return NULL;
  }
  if ((r = cu.CtxSetCurrent(st->ctx)) != 0 ||
      (r = cu.StreamCreate(&st->stream, 0x1 /* CU_STREAM_NON_BLOCKING */)) != 0 ||
      (r = cu.MemAlloc(&st->scratch, SCRATCH_BYTES)) != 0) {
    if (st->stream) cu.StreamDestroy(st->stream);
    cu.DevicePrimaryCtxRelease(st->dev);
    free(st);
    uvcuda_napi_throw(env, UVCUDA_ECUDA(r));
    return NULL;
  }
  if (uvcuda_napi_set_data(env, st, env_state_free, NULL) != napi_ok) {
    env_state_free(env, st, NULL);
    return NULL;
  }
  return st;
}

/* ---- one piece of GPU work: enqueue, convert, release ------------------- */

struct job {
  CUdeviceptr scratch;
  void *host;     /* the Buffer's bytes (kept alive by `keep`) */
  size_t n;
  int value;      /* fill: the byte; copyThrough: -1 */
};

/* Runs inside uvcuda_napi_await_ex, on the JS thread, with the stream's
 * context current. Returns 0 or a CUresult: an error rejects the promise. */
static int enqueue(uvcuda_stream_t stream, void *data) {
  struct job *j = data;
  CUstream s = (CUstream)stream;
  CUresult r;
  if (j->value >= 0)
    r = cu.MemsetD8Async(j->scratch, (unsigned char)j->value, j->n, s);
  else
    r = cu.MemcpyHtoDAsync(j->scratch, j->host, j->n, s);
  if (r != 0) return r;
  return cu.MemcpyDtoHAsync(j->host, j->scratch, j->n, s);
}

/* The work is done: resolve with the Buffer (kept[0]). */
static napi_status convert(napi_env env, void *data, const napi_value *kept,
                           napi_value *result) {
  (void)env;
  (void)data;
  *result = kept[0];
  return napi_ok;
}

/* After the promise settled, or at env teardown (UVCUDA_ECANCELED: no JS). */
static void release(napi_env env, void *data, int status) {
  (void)env;
  (void)status;
  free(data);
}

/* Awaits `j` on the env's stream, keeping `buffer` alive until it settled. */
static napi_value start(napi_env env, struct env_state *st, struct job *j,
                        napi_value buffer, const char *name) {
  uvcuda_napi_await_t a;
  napi_value promise;

  memset(&a, 0, sizeof(a));
  a.stream = (uvcuda_stream_t)st->stream;
  a.enqueue = enqueue;
  a.convert = convert;
  a.release = release;
  a.data = j;
  a.keep = &buffer;
  a.nkeep = 1;
  a.resource_name = name;
  if (uvcuda_napi_await_ex(env, &a, &promise) != napi_ok) {
    free(j); /* not started: j is still ours; an exception is pending */
    return NULL;
  }
  return promise;
}

/* ---- the JS functions ---------------------------------------------------- */

static napi_value js_fill(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2], buffer;
  double n, value;
  struct env_state *st;
  struct job *j;
  void *host;

  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return NULL;
  if (argc < 2 || napi_get_value_double(env, argv[0], &n) != napi_ok ||
      napi_get_value_double(env, argv[1], &value) != napi_ok) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE",
                          "fill(byteLength, value): two numbers");
    return NULL;
  }
  if (!(n >= 1 && n <= SCRATCH_BYTES && n == (size_t)n) ||
      !(value >= 0 && value <= 255 && value == (int)value)) {
    napi_throw_range_error(env, "ERR_OUT_OF_RANGE",
                           "byteLength must be 1 to 1048576, value 0 to 255");
    return NULL;
  }
  if ((st = env_state(env)) == NULL) return NULL;
  if (napi_create_buffer(env, (size_t)n, &host, &buffer) != napi_ok) return NULL;
  if ((j = calloc(1, sizeof(*j))) == NULL) {
    uvcuda_napi_throw(env, UVCUDA_ENOMEM);
    return NULL;
  }
  j->scratch = st->scratch;
  j->host = host;
  j->n = (size_t)n;
  j->value = (int)value;
  return start(env, st, j, buffer, "example.fill");
}

static napi_value js_copy_through(napi_env env, napi_callback_info info) {
  size_t argc = 1, n = 0;
  napi_value argv[1], buffer;
  napi_typedarray_type type;
  napi_value ab;
  size_t offset;
  void *src = NULL, *host;
  bool is = false;
  struct env_state *st;
  struct job *j;

  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return NULL;
  if (argc < 1 || napi_is_typedarray(env, argv[0], &is) != napi_ok || !is ||
      napi_get_typedarray_info(env, argv[0], &type, &n, &src, &ab, &offset) != napi_ok ||
      type != napi_uint8_array) {
    napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE",
                          "copyThrough(bytes): a Uint8Array or Buffer");
    return NULL;
  }
  if (n < 1 || n > SCRATCH_BYTES) {
    napi_throw_range_error(env, "ERR_OUT_OF_RANGE",
                           "bytes must hold 1 to 1048576 bytes");
    return NULL;
  }
  if ((st = env_state(env)) == NULL) return NULL;
  /* The result is a copy: the caller may change `bytes` right away. */
  if (napi_create_buffer_copy(env, n, src, &host, &buffer) != napi_ok) return NULL;
  if ((j = calloc(1, sizeof(*j))) == NULL) {
    uvcuda_napi_throw(env, UVCUDA_ENOMEM);
    return NULL;
  }
  j->scratch = st->scratch;
  j->host = host;
  j->n = n;
  j->value = -1;
  return start(env, st, j, buffer, "example.copyThrough");
}

NAPI_MODULE_INIT() {
  napi_property_descriptor fns[] = {
      {"fill", NULL, js_fill, NULL, NULL, NULL, napi_default, NULL},
      {"copyThrough", NULL, js_copy_through, NULL, NULL, NULL, napi_default, NULL},
  };
  if (napi_define_properties(env, exports, sizeof(fns) / sizeof(fns[0]), fns) != napi_ok)
    return NULL;
  return exports;
}
