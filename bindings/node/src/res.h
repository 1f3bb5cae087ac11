/* The lifetime of every CUDA object the addon wraps, whatever its class.
 *
 * Each JS wrapper points at a struct uvn_res (the first member of the
 * class's own struct). A res counts `pending`: promises pending on it plus
 * dependents (a Kernel holds its Module). free()/destroy()/unload() or the
 * wrapper's finalizer marks it `closed` (no new work); its CUDA object is
 * destroyed (its class's destroy hook) once it is closed and `pending` is
 * 0, and the struct is freed once, in addition, no wrapper points at it.
 * From env teardown on, destruction is deferred to the env's graveyard,
 * emptied when Node deletes the env, without waiting for the GPU: a worker
 * ends at once, its cancelled work still queued, and the reaper's
 * cuMemFree waits for that work.
 *
 * Resets. A res belongs to its device's generation (devstate.h) at
 * creation; after device.reset() its CUDA object is gone: work on it
 * rejects with CUDA_ERROR_CONTEXT_IS_DESTROYED and its handle is never
 * passed to the driver again. Every driver call on a device's objects is
 * made between uvn_res_enter and uvn_res_leave, holding that device's
 * reset lock for reading.
 *
 * Classes. Methods and accessors are plain functions on the prototypes
 * (not napi_define_class members, whose V8 signature check throws a bare
 * "Illegal invocation"): each checks its receiver itself (uvn_res_this).
 * Every wrapper carries a type tag of its class and of this copy of the
 * addon, so an object of another copy (another installed version) is never
 * unwrapped, and a symbol that makes structured cloning refuse it.
 * JS thread of the env. */
#ifndef UVN_RES_H
#define UVN_RES_H

#include <node_api.h>
#include <stddef.h>
#include <stdint.h>

#include "queue.h"

enum uvn_kind { UVN_DEVICE = 0, UVN_STREAM, UVN_MEMORY, UVN_MODULE, UVN_KERNEL, UVN_NKINDS };

struct uvn_env;
struct uvn_dev;
struct uvn_res;

/* What a class does with its CUDA object. Defined by each class's file. */
struct uvn_class {
  enum uvn_kind kind;
  /* Destroys the CUDA object (the res is closed and idle, or its env is
   * being deleted), never waiting for the device on this thread. NULL:
   * nothing to destroy. */
  void (*destroy)(napi_env env, struct uvn_res *r);
  /* The wrapper was collected (before the res may be freed). NULL: none. */
  void (*finalize)(napi_env env, struct uvn_res *r);
};

struct uvn_res {
  const struct uvn_class *cls;
  int pending;   /* pending promises and dependents */
  int closed;    /* no new work: freed by the user, or finalized */
  int wrapped;   /* a JS wrapper points at this struct */
  int destroyed; /* the CUDA object is gone (or never was ours) */
  struct uvcuda__queue grave; /* on the env's graveyard, else self-linked */
  struct uvn_env *ue;
  struct uvn_dev *dev; /* a reference; NULL for a foreign stream of no known device */
  uint64_t gen;        /* the device generation its CUDA object belongs to */
  /* What this one needs and holds (uvn_res_hold) until it is destroyed (a
   * Kernel: its Module), or NULL. Closed with it: work on this one is
   * refused once that one is closed. */
  struct uvn_res *holds;
};

/* "Device", "Stream", "DeviceMemory", "Module", "Kernel". */
const char *uvn_class_name(int kind);

/* A new res of `size` bytes (the class's struct), zeroed, holding a
 * reference on d (may be NULL), of generation gen. NULL when out of
 * memory (nothing thrown). */
struct uvn_res *uvn_res_new(struct uvn_env *ue, const struct uvn_class *cls, size_t size,
                            struct uvn_dev *d, uint64_t gen);
/* Drops a res that never got its wrapper (creation failed half way); set
 * `destroyed` first where there is no CUDA object to destroy. r (and its
 * reference on the device) may be gone on return. */
void uvn_res_discard(napi_env env, struct uvn_res *r);
/* Wraps r in a new instance of its class. */
napi_status uvn_res_wrap_new(napi_env env, struct uvn_res *r, napi_value *out);
/* The end of a factory whose driver call made r's CUDA object, returning
 * cr (a CUresult): on success, r in a new wrapper with the read-only
 * property `prop` set to `owner` (the Device or Module it came from); on
 * failure, r dropped (nothing to destroy), the device's health checked
 * (uvn_fault_after_error) and the driver's error thrown. NULL: thrown. */
napi_value uvn_res_made(napi_env env, struct uvn_res *r, int cr, const char *prop,
                        napi_value owner);
/* Wraps r in `self`, an instance being constructed (new Device()). */
napi_status uvn_res_wrap(napi_env env, struct uvn_res *r, napi_value self);

/* The res behind a wrapper of `kind`, type tag checked. Throws and returns
 * -1 for anything else (ERR_INVALID_THIS where what is "this",
 * ERR_INVALID_ARG_TYPE naming `what` otherwise) and, unless allow_closed,
 * UVCUDA_ECLOSING for a closed one (a Kernel whose Module is unloaded
 * too). */
int uvn_res_unwrap(napi_env env, napi_value v, int kind, const char *what,
                   int allow_closed, struct uvn_res **out);
/* `this` of a callback unwrapped as `kind`, with its arguments (argc may
 * be NULL: none read) and the receiver (self may be NULL). NULL: thrown. */
struct uvn_res *uvn_res_this(napi_env env, napi_callback_info info, int kind,
                             int allow_closed, size_t *argc, napi_value *argv,
                             napi_value *self);

void uvn_res_hold(struct uvn_res *r);                  /* pending++ */
void uvn_res_release(napi_env env, struct uvn_res *r); /* pending--, maybe destroy */
void uvn_res_close(napi_env env, struct uvn_res *r);   /* closed = 1, maybe destroy */
/* Whether r's CUDA object went with a reset (its generation ended). */
int uvn_res_stale(const struct uvn_res *r);

/* Before driver calls on d's objects: takes d's reset lock
 * (uvn_devstate_enter), then checks that each of rs[0..n) (NULL entries
 * skipped) is open (a Kernel: its Module too) and belongs to the current
 * generation. Returns 0 with *gen set (pair with uvn_res_leave), or throws
 * (ERR_INVALID_STATE while a reset runs; the device's fault where one of
 * this generation is known; UVCUDA_ECLOSING for an object closed since the
 * call began, by a getter of its arguments; CUDA_ERROR_CONTEXT_IS_DESTROYED
 * for an object made before the last reset) and returns -1. d may be NULL
 * (a foreign stream of no known device): nothing to take. */
int uvn_res_enter(napi_env env, struct uvn_dev *d, struct uvn_res *const *rs, int n,
                  uint64_t *gen);
/* uvn_res_enter for a call that returns the promise helper's await: where
 * the device's known fault refuses it, stats() counts it as awaited and
 * rejected, as the same fault met at the stream is. */
int uvn_res_enter_await(napi_env env, struct uvn_dev *d, struct uvn_res *const *rs, int n,
                        uint64_t *gen);
void uvn_res_leave(struct uvn_dev *d);

/* At env deletion: destroys what the graveyard holds (uvn_env.grave),
 * without waiting for the GPU. */
void uvn_res_free_grave(struct uvn_env *ue);

/* Defines a read-only, enumerable own property (`device`, `module`). */
void uvn_res_set_ro(napi_env env, napi_value obj, const char *name, napi_value v);

/* ---- classes ------------------------------------------------------------ */

/* Prototype members, plain functions whose data is the class's kind
 * (uvn_res_define_class splits statics, napi_static, from them). */
#define UVN_METHOD(name, fn, kind) \
  {name, NULL, fn, NULL, NULL, NULL, napi_default_method, (void *)(intptr_t)(kind)}
#define UVN_STATIC(name, fn, kind) \
  {name, NULL, fn, NULL, NULL, NULL, napi_default_method | napi_static, \
   (void *)(intptr_t)(kind)}
#define UVN_GETTER(name, fn, kind) \
  {name, NULL, NULL, fn, NULL, NULL, napi_default_jsproperty & ~napi_writable, \
   (void *)(intptr_t)(kind)}

/* Defines class `kind` on exports: `props` go on its prototype, statics on
 * the constructor. ctor: uvn_res_internal_ctor with ctor_data the factory
 * to name ("device.alloc()"), for a class only the addon makes. */
napi_status uvn_res_define_class(napi_env env, napi_value exports, struct uvn_env *ue,
                                 int kind, napi_callback ctor, void *ctor_data,
                                 const napi_property_descriptor *props, size_t nprops);
/* `new X()` from JS: ERR_ILLEGAL_CONSTRUCTOR naming the factory. */
napi_value uvn_res_internal_ctor(napi_env env, napi_callback_info info);
/* Members any class may list (their data: its kind). closed: whether
 * freed/destroyed/unloaded; pending: the count above; close: mem.free(),
 * module.unload(), stream.destroy(), idempotent: no new work, the CUDA
 * object goes once the work pending on it is done. */
napi_value uvn_res_closed_getter(napi_env env, napi_callback_info info);
napi_value uvn_res_pending_getter(napi_env env, napi_callback_info info);
napi_value uvn_res_close_method(napi_env env, napi_callback_info info);

#endif
