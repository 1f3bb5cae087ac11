/* The uvcuda Node addon: declarations shared by addon.c (module, argument
 * helpers, errors), objects.c (Device, DeviceMemory, Module, Kernel and the
 * lifetime of everything CUDA) and stream.c (Stream and its async ops).
 *
 * Lifetime of CUDA objects. Each JS wrapper points at a `struct res`. A res
 * counts `ops`: promises pending on it plus dependents (a Kernel keeps its
 * Module). free()/destroy()/unload() or the wrapper's finalizer marks it
 * `closed` (no new work); the CUDA object is destroyed once it is closed and
 * `ops` is 0, and the struct is freed once, in addition, no wrapper points
 * at it. From env teardown on, destruction is deferred to a graveyard that
 * is emptied when Node deletes the env (after the uvcuda loop context has
 * closed: it may query a stream until then). Devices are refcounted; the
 * env keeps every device it opened retained until then, too.
 *
 * Nothing here may wait for the device on the JS thread. Measured on the
 * H200 (driver 580) behind a 300 ms kernel: cuMemFree takes 280 ms, and a
 * cuLaunchKernel from another thread waits as long while one is in
 * cuMemFree; cuMemAllocAsync / cuMemFreeAsync take 0.4 / 0.01 ms. So device
 * memory comes from the stream-ordered allocator where the device has
 * memory pools, and what still has to be destroyed synchronously goes to the
 * reaper thread (reaper.c). cuModuleLoadData also waits for the device
 * (280 ms): loadModule() is documented as a call to make before GPU work. */
#ifndef UVCUDA_NODE_ADDON_H
#define UVCUDA_NODE_ADDON_H

#include <node_api.h>
#include <stddef.h>
#include <stdint.h>

#include "cu.h"
#include "uvcuda.h"
#include "uvcuda/napi.h"

#define ADDON_MAX_PARAMS 64

enum res_kind {
  RES_DEVICE = 0,
  RES_STREAM,
  RES_MEMORY,
  RES_MODULE,
  RES_KERNEL,
  RES_NKINDS
};

struct addon_env;

struct dev {
  int refs;
  int ordinal;
  CUdevice cudev;
  CUcontext ctx;
  int cc_major, cc_minor;
  /* Stream-ordered allocator (memory pools): allocations and frees go on
   * this internal stream; NULL where the device or driver lacks pools. */
  CUstream alloc_stream;
  char name[256];
};

struct res {
  int kind;
  int ops;       /* pending promises and dependents */
  int closed;    /* no new work: freed by the user, or finalized */
  int wrapped;   /* a JS wrapper points at this struct */
  int destroyed; /* the CUDA object is gone (or never was ours) */
  int in_grave;
  struct res *grave_next;
  struct addon_env *ae;
  struct dev *dev; /* a reference; NULL for a foreign stream without device */
};

struct stream_res {
  struct res h;
  CUstream stream;
  int owned; /* created here: destroyed here */
};

struct mem_res {
  struct res h;
  CUdeviceptr ptr;
  size_t size;
  int pooled; /* cuMemAllocAsync'ed: freed with cuMemFreeAsync */
};

struct mod_res {
  struct res h;
  CUmodule mod;
};

enum ptype {
  P_PTR = 0, P_U8, P_I8, P_U16, P_I16, P_U32, P_I32, P_U64, P_I64, P_F32, P_F64,
  P_NTYPES
};

struct kern_res {
  struct res h;
  CUfunction fn;
  struct mod_res *mod; /* holds one of mod->h.ops */
  int nparams;
  unsigned char sig[ADDON_MAX_PARAMS];
  char name[256];
};

struct addon_env {
  napi_env env;
  napi_ref ctor[RES_NKINDS];
  struct dev **devs; /* by ordinal; each holds one reference */
  int ndevs;
  struct res *grave;
};

extern const char *const addon_class_names[RES_NKINDS];
extern const char *const addon_ptype_names[P_NTYPES];

/* ---- addon.c: errors and arguments ---- */

/* Each throws and returns NULL, for `return throw_...;` in callbacks. */
napi_value throw_type(napi_env env, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
napi_value throw_range(napi_env env, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* TypeError, code UVCUDA_ECLOSING, for work on a freed/destroyed object. */
napi_value throw_closed(napi_env env, const char *what);
/* A named uvcuda Error (uvcuda_napi_throw). */
napi_value throw_uv(napi_env env, int err);
napi_value throw_cu(napi_env env, CUresult r);
/* Loads the driver table, throwing on failure. Returns 0 or -1. */
int need_driver(napi_env env);

struct addon_env *addon_env_get(napi_env env);

/* Arguments: return 0, or throw and return -1. `what` names the argument in
 * the message. */
int arg_is_undefined(napi_env env, napi_value v);
int arg_size(napi_env env, napi_value v, const char *what, size_t *out);
int arg_u32(napi_env env, napi_value v, const char *what, uint32_t lo,
            uint32_t *out);
int arg_u64_handle(napi_env env, napi_value v, const char *what, uint64_t *out);
/* Host bytes of a TypedArray, Buffer, DataView or ArrayBuffer. */
int arg_bytes(napi_env env, napi_value v, const char *what, void **data,
              size_t *len);
/* Grid / block: a number or an array of 1..3 positive integers. */
int arg_dim3(napi_env env, napi_value v, const char *what, unsigned out[3]);

/* ---- objects.c ---- */

/* The res behind a wrapper of `kind`, type-tag checked. Throws TypeError
 * for anything else and, unless allow_closed, for a closed one. */
int res_unwrap(napi_env env, napi_value v, int kind, const char *what,
               int allow_closed, struct res **out);
/* Wraps `r` in a new instance of its class. */
napi_status res_wrap_new(napi_env env, struct res *r, napi_value *out);
void res_hold(struct res *r);                   /* ops++ */
void res_release(napi_env env, struct res *r);  /* ops--, maybe destroy */
void res_close(napi_env env, struct res *r);    /* closed = 1, maybe destroy */
void dev_ref(struct dev *d);
void dev_unref(struct dev *d);
/* Makes d's context current; returns what to restore with ctx_pop. */
CUcontext ctx_push(struct dev *d);
void ctx_pop(CUcontext prev, struct dev *d);
/* The Device wrapper object for a device ordinal (new wrapper). */
napi_status device_object(napi_env env, struct dev *d, napi_value *out);
void addon_env_free_grave(struct addon_env *ae);

napi_status objects_init(napi_env env, napi_value exports, struct addon_env *ae);
/* Defines the Stream class: `props` (stream.c's members, statics included)
 * plus destroyed, pending and destroy(). */
napi_status objects_define_stream(napi_env env, napi_value exports,
                                  struct addon_env *ae,
                                  const napi_property_descriptor *props,
                                  size_t nprops);
/* A new, unwrapped stream_res holding a reference on d (may be NULL); NULL
 * (thrown) when out of memory. */
struct stream_res *objects_new_stream(napi_env env, struct dev *d);
/* Drops a res that never got its wrapper. */
void objects_discard(napi_env env, struct res *r);
/* Defines a read-only, enumerable own property. */
void objects_set_ro(napi_env env, napi_value obj, const char *name, napi_value v);

/* ---- stream.c ---- */
/* device.createStream() */
napi_value js_device_create_stream(napi_env env, napi_callback_info info);
napi_status stream_init(napi_env env, napi_value exports, struct addon_env *ae);
/* uvcuda.fence(handle | Stream, device?) */
napi_value js_fence(napi_env env, napi_callback_info info);

#endif
