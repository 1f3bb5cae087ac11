/* The uvcuda Node addon: declarations shared by addon.c (module, argument
 * helpers, errors), objects.c (Device, DeviceMemory, Module, Kernel and the
 * lifetime of everything CUDA), stream.c (Stream and its async ops),
 * fault.c (device health, 'fault' events, reset), params.c (a kernel's
 * parameter count), devstate.c (what the process knows of each device) and
 * reaper.c (destruction off the JS thread).
 *
 * Conventions of the JS API: a method that returns a Promise reports every
 * error as a rejection (argument errors included: such methods are wrapped
 * by PROMISE_METHOD); a synchronous one throws. Errors carry a Node-style
 * `code`: ERR_INVALID_ARG_TYPE, ERR_INVALID_ARG_VALUE, ERR_OUT_OF_RANGE,
 * ERR_INVALID_STATE, ERR_ILLEGAL_CONSTRUCTOR, or uvcuda's / CUDA's name.
 * Methods and accessors are plain functions on the prototypes (not
 * napi_define_class members, whose V8 signature check throws a bare
 * "Illegal invocation"): each checks its receiver itself.
 *
 * Lifetime of CUDA objects. Each JS wrapper points at a `struct res`. A res
 * counts `ops`: promises pending on it plus dependents (a Kernel keeps its
 * Module). free()/destroy()/unload() or the wrapper's finalizer marks it
 * `closed` (no new work); the CUDA object is destroyed once it is closed and
 * `ops` is 0, and the struct is freed once, in addition, no wrapper points
 * at it. From env teardown on, destruction is deferred to a graveyard that
 * is emptied when Node deletes the env, onto the reaper thread, without
 * waiting for the GPU: a worker ends at once, its cancelled work still
 * queued, and the reaper's cuMemFree waits for that work. Devices are
 * refcounted; the env keeps every device it opened retained until then.
 *
 * Resets. A res belongs to its device's generation (devstate.h) at
 * creation; after device.reset() its CUDA object is gone: work on it
 * rejects with CUDA_ERROR_CONTEXT_IS_DESTROYED and its handle is never
 * passed to the driver again. Every driver call on a device's objects is
 * made holding that device's reset lock for reading (op_enter).
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
struct devobj;

/* An env's handle on a device (its primary context, retained). */
struct dev {
  int refs;
  int ordinal;
  CUdevice cudev;
  CUcontext ctx;
  int cc_major, cc_minor;
  /* Stream-ordered allocator (memory pools): allocations and frees go on
   * this internal stream, of generation `gen`; NULL where the device or
   * driver lacks pools. */
  uint64_t gen;
  CUstream alloc_stream;
  uint64_t faults_seen;     /* faults of the device emitted in this env */
  uint64_t resets_seen;     /* generation of its last reset emitted here */
  int own_resets;           /* reset() calls of this env not yet settled */
  struct devobj *objects;   /* its Device wrappers (weak), for 'fault' */
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
  uint64_t gen;    /* the device generation its CUDA object belongs to */
};

/* A Device wrapper: a weak reference to it, on its dev's list. */
struct devobj {
  struct res h;
  napi_ref weak;
  struct devobj *next, *prev;
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
  char *ptx; /* the PTX text, for parameter counts; NULL for binary images */
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
  napi_ref guard[RES_NKINDS]; /* the symbol each kind's objects carry (clone guard) */
  struct dev **devs; /* by ordinal; each holds one reference */
  int ndevs;
  struct res *grave;
  napi_threadsafe_function faults; /* fault announcements (fault.c) */
  napi_ref is_array, array_from; /* Array.isArray / Array.from, taken at load */
};

extern const char *const addon_class_names[RES_NKINDS];
extern const char *const addon_ptype_names[P_NTYPES];

/* ---- addon.c: errors and arguments ---- */

/* Each throws and returns NULL, for `return throw_...;` in callbacks.
 * throw_type: TypeError ERR_INVALID_ARG_TYPE; throw_value: TypeError
 * ERR_INVALID_ARG_VALUE; throw_range: RangeError ERR_OUT_OF_RANGE;
 * throw_state: Error ERR_INVALID_STATE. */
napi_value throw_type(napi_env env, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
napi_value throw_value(napi_env env, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* TypeError ERR_INVALID_THIS: a method or getter called on a wrong
 * receiver, worded as Node core's ('Value of "this" must be of type Blob'). */
napi_value throw_this(napi_env env, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
napi_value throw_range(napi_env env, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
napi_value throw_state(napi_env env, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
napi_value throw_illegal_constructor(napi_env env, const char *use);
/* TypeError ERR_CONSTRUCT_CALL_REQUIRED: class `cls` called without new. */
napi_value throw_construct_call(napi_env env, const char *cls);
/* TypeError, code UVCUDA_ECLOSING, for work on a freed/destroyed object. */
napi_value throw_closed(napi_env env, const char *what);
/* Error CUDA_ERROR_CONTEXT_IS_DESTROYED: `what` was made before a reset. */
napi_value throw_stale(napi_env env, const char *what, int ordinal);
/* For stats() (src/uvcuda_napi.c): the env's loop, or NULL before its
 * first GPU call, and the settings it has or will open with; never opens
 * it. Throws (naming the variable) if the environment is invalid. */
napi_status uvcuda_napi__settings(napi_env env, uvcuda_loop_t **loop,
                                  uvcuda_completion_t *completion,
                                  uint64_t *spin_budget_ns, int *adaptive);
/* src/uvcuda_napi.c: counts, in stats(), a call rejected before it was
 * handed to its stream for what the stream would have rejected it for (a
 * device known to be faulted: op_enter_await), as an await that was
 * rejected: awaited and rejected, the env's loop context opened as by an
 * await. Call it before throwing the rejection's error. Fails (thrown,
 * uncounted) where an await would: the env's settings are invalid. */
napi_status uvcuda_napi__count_rejected(napi_env env);
/* A named uvcuda Error (uvcuda_napi_throw). */
napi_value throw_uv(napi_env env, int err);
/* src/uvcuda_napi.c: an error shown as Node core shows its own
 * (`TypeError [CODE]: message` in its stack and String(err)); called once
 * its message is final. And err's Error with message msg, so shown. */
napi_status uvcuda_napi__show_code(napi_env env, napi_value err);
napi_status uvcuda_napi__error_msg(napi_env env, int err, const char *msg,
                                   napi_value *error);
napi_value throw_cu(napi_env env, CUresult r);
/* Loads the driver table, throwing on failure. Returns 0 or -1. */
int need_driver(napi_env env);

/* If a JS exception is pending, clears it and returns a promise rejected
 * with it; else returns `ret`. */
napi_value reject_thrown(napi_env env, napi_value ret);
/* static napi_value name(env, info): impl(env, info) with every throw
 * turned into a rejection. */
#define PROMISE_METHOD(name, impl)                                     \
  static napi_value name(napi_env env, napi_callback_info info) {      \
    return reject_thrown(env, impl(env, info));                        \
  }

/* v as JavaScript would print it in a message: NaN, 4294967296, 1e+21,
 * 2n, 'text', null, an instance of Foo... Returns buf. */
const char *describe(napi_env env, napi_value v, char *buf, size_t size);

struct addon_env *addon_env_get(napi_env env);

/* Arguments: return 0, or throw and return -1. `what` names the argument in
 * the message. */
int arg_is_undefined(napi_env env, napi_value v);
int arg_size(napi_env env, napi_value v, const char *what, size_t *out);
/* The same, from lo: alloc's byteLength is at least 1. */
int arg_size_min(napi_env env, napi_value v, const char *what, size_t lo, size_t *out);
/* An integer from lo to hi; the message names that range. */
int arg_u32(napi_env env, napi_value v, const char *what, uint32_t lo, uint32_t hi,
            uint32_t *out);
int arg_u64_handle(napi_env env, napi_value v, const char *what, uint64_t *out);
/* Host bytes of a TypedArray, Buffer, DataView or ArrayBuffer. */
int arg_bytes(napi_env env, napi_value v, const char *what, void **data,
              size_t *len);
/* The same, without throwing: -1 for anything else. *detached is set when
 * its ArrayBuffer is detached (transferred). */
int host_bytes(napi_env env, napi_value v, void **data, size_t *len, int *detached);
/* 1 if v is an array as Array.isArray says (a Proxy of one too, as Node
 * core's validateArray), with *out a plain array of its elements; 0 if not
 * (nothing thrown); -1 if a Proxy trap threw. */
int arg_array(napi_env env, napi_value v, napi_value *out);
/* A string argument that must be one of names[0..n): its index, or -1
 * (nothing thrown) for any other string, one cut short at a NUL included.
 * NULL entries match nothing. */
int str_one_of(napi_env env, napi_value v, const char *const *names, int n);
/* ERR_INVALID_ARG_VALUE: head (ASCII), then the string v as Node's
 * messages show it (util.inspect, cut at 128 units). */
napi_value throw_value_shown(napi_env env, const char *head, napi_value v);
/* TypeError ERR_INVALID_ARG_VALUE for the string v of argument `what`
 * (a property where `what` has a dot: 'options.completion'), which is none
 * of names[0..n), as Node core's validateOneOf says it: "The argument
 * 'mode' must be one of: 'global', 'relaxed'. Received 'bogus'". */
napi_value throw_one_of(napi_env env, napi_value v, const char *what,
                        const char *const *names, size_t n);
/* Grid / block: a number or an array of 1..3 positive integers. */
int arg_dim3(napi_env env, napi_value v, const char *what, unsigned out[3]);

/* ---- objects.c ---- */

/* The res behind a wrapper of `kind`, type-tag checked. Throws TypeError
 * for anything else and, unless allow_closed, for a closed one. */
int res_unwrap(napi_env env, napi_value v, int kind, const char *what,
               int allow_closed, struct res **out);
/* `this` of a callback unwrapped as `kind` (NULL: thrown). */
struct res *this_res(napi_env env, napi_callback_info info, int kind,
                     int allow_closed, size_t *argc, napi_value *argv,
                     napi_value *self);
/* Wraps `r` in a new instance of its class. */
napi_status res_wrap_new(napi_env env, struct res *r, napi_value *out);
void res_hold(struct res *r);                   /* ops++ */
void res_release(napi_env env, struct res *r);  /* ops--, maybe destroy */
void res_close(napi_env env, struct res *r);    /* closed = 1, maybe destroy */
void dev_ref(struct dev *d);
void dev_unref(struct dev *d);
/* Makes d's context current (*prev: what ctx_pop puts back). Returns the
 * driver's refusal, if any: then the call that needed the context is not
 * made (it would run in no context, or another device's) and fails with
 * that code; ctx_pop is still right to call. */
CUresult ctx_push(struct dev *d, CUcontext *prev);
void ctx_pop(CUcontext prev, struct dev *d);
void addon_env_free_grave(struct addon_env *ae);

/* Before driver calls on d's objects: takes d's reset lock (devstate.h),
 * then checks that each of rs[0..n) (NULL entries skipped) is open (a
 * Kernel: its Module too) and belongs to the current generation. Returns 0
 * with *gen set (pair with op_leave), or throws (ERR_INVALID_STATE while a
 * reset runs; UVCUDA_ECLOSING for an object closed since the call began,
 * from a getter of its arguments; CUDA_ERROR_CONTEXT_IS_DESTROYED for an
 * object made before the last reset) and returns -1. d may be NULL
 * (a foreign stream of no known device): nothing to take. */
int op_enter(napi_env env, struct dev *d, struct res *const *rs, int n,
             uint64_t *gen);
/* op_enter for a call that returns the promise helper's await (stream.c's
 * submit): where the device's known fault refuses it, stats() counts it
 * as awaited and rejected, as the same fault met at the stream is. */
int op_enter_await(napi_env env, struct dev *d, struct res *const *rs, int n,
                   uint64_t *gen);
void op_leave(struct dev *d);
/* d's allocation stream, made again after a reset (call inside op_enter). */
void dev_refresh(struct dev *d, uint64_t gen);

napi_status objects_init(napi_env env, napi_value exports, struct addon_env *ae);
/* Defines a class: `props` go on its prototype (plain functions), statics
 * (napi_static) on the constructor. */
napi_status objects_define(napi_env env, napi_value exports, struct addon_env *ae,
                           int kind, napi_callback ctor, void *ctor_data,
                           const napi_property_descriptor *props, size_t nprops);
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

/* ---- fault.c ---- */
/* Subscribes the env to fault announcements (once per env). */
int fault_env_init(napi_env env, struct addon_env *ae);
/* Checks d's health (inside op_enter, generation gen) and records a fault;
 * returns the health (0 or UVCUDA_ECUDA(r)). */
int fault_check(struct dev *d, uint64_t gen);
/* After a call on d failed with err: was it the device's fault? Records
 * it (announced to every env, which emits 'fault' on its next turn). */
void fault_after_error(napi_env env, struct dev *d, int err);
/* The same after a promise was rejected with err (JS may run): this env
 * emits 'fault' at once, before the rejection's continuations. */
void fault_after_settle(napi_env env, struct dev *d, int err);
/* device.health, device.reset() */
napi_value js_device_health(napi_env env, napi_callback_info info);
napi_value js_device_reset(napi_env env, napi_callback_info info);

/* ---- params.c ---- */
/* The number of parameters of kernel `name` of module m (fn is its
 * CUfunction): from cuFuncGetParamInfo (CUDA >= 12.4), else from the
 * `.entry` of the module's PTX. -1 when neither says. */
int kernel_param_count(struct mod_res *m, CUfunction fn, const char *name);
/* The PTX parser alone (for its test): params of .entry `name`, or -1. */
int ptx_entry_params(const char *ptx, const char *name);

#endif
