/* Device, DeviceMemory, Module and Kernel, and the lifetime rules of every
 * CUDA object the addon owns (see addon.h). */
#include "addon.h"
#include "devstate.h"
#include "bounce.h"
#include "reaper.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const addon_class_names[RES_NKINDS] = {
    "Device", "Stream", "DeviceMemory", "Module", "Kernel"};

const char *const addon_ptype_names[P_NTYPES] = {
    "ptr", "u8", "i8", "u16", "i16", "u32", "i32", "u64", "i64", "f32", "f64"};

/* One tag per class and per loaded copy of the addon: napi_unwrap of a
 * foreign object is never attempted. Constants alone would match the
 * objects of another copy in the process (another package version, its
 * struct layout maybe another), so the upper word mixes in the address of
 * this copy's own table: copies loaded together never share it. Computed
 * at each use (no shared state to initialise between threads). */
static const uint64_t tag_lower[RES_NKINDS] = {
    0x8a41d3c6f1e20b57ull, 0x3c9e57a1d20f6b84ull, 0xe27b10c45a9d3f16ull,
    0x51f0a8e93b6c2d7aull, 0xb46d29f70c1e85a3ull,
};

static napi_type_tag tag_of(int kind) {
  napi_type_tag t;
  t.lower = tag_lower[kind];
  t.upper = (0x7576637564614e00ull + (uint64_t)kind) ^ (uint64_t)(uintptr_t)&tag_lower[kind];
  return t;
}

/* Set while the addon itself constructs a wrapper: `new Stream()` & co from
 * JS throw. JS threads (main, workers) never share it. */
static _Thread_local int constructing;

/* ---- devices and contexts ---------------------------------------------- */

void dev_ref(struct dev *d) { d->refs++; }

void dev_unref(struct dev *d) {
  if (--d->refs > 0) return;
  if (d->alloc_stream) reap_stream(d->ordinal, d->gen, d->ctx, d->alloc_stream);
  bounce_drop(d->ordinal, devstate_gen(d->ordinal), d->ctx);
  devstate_close(d->ordinal); /* before the release: the watcher lets go */
  reap_ctx_release(d->ordinal, d->cudev); /* after everything queued before it */
  free(d);
}

CUresult ctx_push(struct dev *d, CUcontext *prev) { return cu_ctx_push(d->ctx, prev); }

void ctx_pop(CUcontext prev, struct dev *d) { cu_ctx_pop(d->ctx, prev); }

static int dev_has_pools(struct dev *d) {
  int pools = 0;
  const char *e = getenv("UVCUDA_NODE_NO_POOLS");
  return cu.cuMemAllocAsync && cu.cuMemFreeAsync && (e == NULL || strcmp(e, "1") != 0) &&
         cu.cuDeviceGetAttribute(&pools, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED,
                                 d->cudev) == CUDA_SUCCESS &&
         pools;
}

/* The allocation stream of the current generation (a reset destroyed the
 * older one with everything else). Inside op_enter. */
void dev_refresh(struct dev *d, uint64_t gen) {
  CUcontext prev;
  if (d->gen == gen && (d->alloc_stream != NULL || !dev_has_pools(d))) return;
  if (d->gen != gen) d->alloc_stream = NULL; /* gone with the reset */
  d->gen = gen;
  if (!dev_has_pools(d)) return;
  if (ctx_push(d, &prev) != CUDA_SUCCESS ||
      cu.cuStreamCreate(&d->alloc_stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)
    d->alloc_stream = NULL; /* tried again at the next allocation */
  ctx_pop(prev, d);
}

/* Whether r's CUDA object was destroyed by a reset (its generation ended). */
static int res_stale(const struct res *r) {
  return r->dev != NULL && r->kind != RES_DEVICE && r->gen != devstate_gen(r->dev->ordinal);
}

static int enter(napi_env env, struct dev *d, struct res *const *rs, int n,
                 uint64_t *gen, int counted) {
  int i, err;
  *gen = 0;
  if (d != NULL && devstate_enter(d->ordinal, gen) != 0) {
    throw_state(env, "device %d is being reset", d->ordinal);
    return -1;
  }
  /* A fault of this generation (one a reset could not clear, too): the
   * device refuses new work, as the driver would, whatever a fresh
   * context of its says (after a reset on the H200 it says nothing). */
  if (d != NULL && (err = devstate_fault_now(d->ordinal)) != 0) {
    bool pending = false;
    devstate_leave(d->ordinal);
    /* An await rejects with it as the stream would: counted as one. */
    if (counted && uvcuda_napi__count_rejected(env) != napi_ok &&
        napi_is_exception_pending(env, &pending) == napi_ok && pending)
      return -1; /* the env's settings are invalid: that error, as for an await */
    throw_uv(env, err);
    return -1;
  }
  for (i = 0; i < n; i++) {
    struct res *r = rs[i];
    const struct res *mod;
    if (r == NULL) continue;
    /* Closed by JS that ran inside this very call (a getter of one of its
     * arguments): its handle may be destroyed and handed out anew. */
    mod = r->kind == RES_KERNEL && ((struct kern_res *)r)->mod != NULL
              ? &((struct kern_res *)r)->mod->h : NULL;
    if (r->closed || (mod != NULL && mod->closed)) {
      if (d != NULL) devstate_leave(d->ordinal);
      throw_closed(env, addon_class_names[r->closed ? r->kind : RES_MODULE]);
      return -1;
    }
    if (!res_stale(r)) continue;
    if (d != NULL) devstate_leave(d->ordinal);
    throw_stale(env, addon_class_names[r->kind], r->dev->ordinal);
    return -1;
  }
  return 0;
}

int op_enter(napi_env env, struct dev *d, struct res *const *rs, int n,
             uint64_t *gen) {
  return enter(env, d, rs, n, gen, 0);
}

int op_enter_await(napi_env env, struct dev *d, struct res *const *rs, int n,
                   uint64_t *gen) {
  return enter(env, d, rs, n, gen, 1);
}

void op_leave(struct dev *d) {
  if (d != NULL) devstate_leave(d->ordinal);
}

/* The env's device of `ordinal`, opened (primary context retained) on
 * first use. Throws and returns NULL on failure. */
static struct dev *dev_open(napi_env env, struct addon_env *ae, int ordinal) {
  struct dev *d;
  CUresult r;
  uint64_t gen;
  int n = 0, err;

  if (need_driver(env) != 0) return NULL;
  if ((err = devstate_init()) != 0) {
    throw_uv(env, err);
    return NULL;
  }
  if ((r = cu.cuDeviceGetCount(&n)) != CUDA_SUCCESS) {
    throw_cu(env, r);
    return NULL;
  }
  if (ordinal < 0 || ordinal >= n) {
    throw_range(env, "device ordinal must be 0 to %d, got %d", n - 1, ordinal);
    return NULL;
  }
  if (ae->devs == NULL || ae->ndevs < n) {
    struct dev **p = realloc(ae->devs, (size_t)n * sizeof(*p));
    if (p == NULL) {
      throw_uv(env, UVCUDA_ENOMEM);
      return NULL;
    }
    memset(p + ae->ndevs, 0, (size_t)(n - ae->ndevs) * sizeof(*p));
    ae->devs = p;
    ae->ndevs = n;
  }
  if (ae->devs[ordinal]) return ae->devs[ordinal];
  if (fault_env_init(env, ae) != 0) return NULL;
  if ((d = calloc(1, sizeof(*d))) == NULL) {
    throw_uv(env, UVCUDA_ENOMEM);
    return NULL;
  }
  d->ordinal = ordinal;
  if (devstate_enter(ordinal, &gen) != 0) {
    free(d);
    throw_state(env, "device %d is being reset", ordinal);
    return NULL;
  }
  if ((r = cu.cuDeviceGet(&d->cudev, ordinal)) != CUDA_SUCCESS ||
      (r = cu.cuDevicePrimaryCtxRetain(&d->ctx, d->cudev)) != CUDA_SUCCESS) {
    devstate_leave(ordinal);
    free(d);
    throw_cu(env, r);
    return NULL;
  }
  if (cu.cuDeviceGetName(d->name, (int)sizeof(d->name), d->cudev) != CUDA_SUCCESS)
    snprintf(d->name, sizeof(d->name), "CUDA device %d", ordinal);
  cu.cuDeviceGetAttribute(&d->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                          d->cudev);
  cu.cuDeviceGetAttribute(&d->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                          d->cudev);
  d->gen = gen + 1; /* not yet refreshed */
  dev_refresh(d, gen);
  devstate_open(ordinal, d->ctx);
  devstate_leave(ordinal);
  /* Faults recorded before this env opened the device are not its news. */
  {
    int ferr;
    d->faults_seen = devstate_faults(ordinal, &ferr);
  }
  d->resets_seen = devstate_gen(ordinal); /* the same for resets */
  d->refs = 1; /* the env's, until it is deleted */
  ae->devs[ordinal] = d;
  return d;
}

/* ---- resources --------------------------------------------------------- */

static void res_settle(napi_env env, struct res *r);

/* The CUDA object goes, never waiting for the device on this thread:
 * freeing device memory or unloading a module waits for the device, so
 * those go to the reaper (reaper.c); pooled memory is freed in stream
 * order on the allocation stream (which, at env teardown, first waits for
 * the work still queued on the env's streams: order_pooled_frees). Where
 * that is not possible (a reset runs), the reaper's cuMemFree does it. An
 * object of a generation a reset ended is gone already: nothing is passed
 * to the driver. */
static void destroy_now(napi_env env, struct res *r) {
  struct dev *d = r->dev;
  r->destroyed = 1;
  switch (r->kind) {
    case RES_STREAM: {
      struct stream_res *s = (struct stream_res *)r;
      if (s->owned && d) reap_stream(d->ordinal, r->gen, d->ctx, s->stream);
      break;
    }
    case RES_MEMORY: {
      struct mem_res *m = (struct mem_res *)r;
      uint64_t gen;
      if (m->pooled && devstate_enter(d->ordinal, &gen) == 0) {
        if (gen == r->gen && d->gen == gen && d->alloc_stream) {
          CUcontext prev;
          if (ctx_push(d, &prev) != CUDA_SUCCESS ||
              cu.cuMemFreeAsync(m->ptr, d->alloc_stream) != CUDA_SUCCESS)
            reap_memory(d->ordinal, r->gen, d->ctx, m->ptr);
          ctx_pop(prev, d);
        }
        devstate_leave(d->ordinal);
      } else {
        reap_memory(d->ordinal, r->gen, d->ctx, m->ptr);
      }
      break;
    }
    case RES_MODULE: {
      struct mod_res *m = (struct mod_res *)r;
      reap_module(d->ordinal, r->gen, d->ctx, m->mod);
      free(m->ptx);
      m->ptx = NULL;
      break;
    }
    case RES_KERNEL: {
      struct kern_res *k = (struct kern_res *)r;
      struct mod_res *m = k->mod;
      k->mod = NULL;
      if (m) res_release(env, &m->h);
      break;
    }
    default:
      break;
  }
}

/* Destroys the CUDA object once closed and idle (or defers that to the
 * graveyard from env teardown on), frees the struct once nothing points at
 * it. r may be gone on return. */
static void res_settle(napi_env env, struct res *r) {
  struct addon_env *ae = r->ae;
  if (r->in_grave) return;
  if (r->closed && r->ops == 0 && !r->destroyed) {
    if (uvcuda_napi_closing(env) && ae != NULL) {
      r->in_grave = 1;
      r->grave_next = ae->grave;
      ae->grave = r;
      return;
    }
    destroy_now(env, r);
  }
  if (r->destroyed && !r->wrapped && r->ops == 0) {
    if (r->kind == RES_MODULE) free(((struct mod_res *)r)->ptx);
    if (r->dev) dev_unref(r->dev);
    free(r);
  }
}

/* At env teardown the work of promises cancelled by the teardown may
 * still be queued on the env's streams, and use its pooled memory:
 * cuMemFreeAsync on the allocation stream would not wait for it. So the
 * allocation stream first waits (cuStreamWaitEvent, on the device, not
 * here) for what is queued on every stream of the env now; the frees come
 * after. (A cuMemFree on the reaper would wait too, but on a GPU it holds
 * launches of every other thread for as long: 260 ms behind a 300 ms
 * kernel on the H200.) */
static void order_pooled_frees(struct addon_env *ae) {
  struct res *r;
  CUcontext prev;
  CUevent e;
  uint64_t gen;
  int i;
  for (i = 0; i < ae->ndevs; i++) {
    struct dev *d = ae->devs[i];
    if (d == NULL || devstate_enter(d->ordinal, &gen) != 0) continue;
    if (d->alloc_stream != NULL && d->gen == gen && ctx_push(d, &prev) == CUDA_SUCCESS) {
      for (r = ae->grave; r; r = r->grave_next) {
        struct stream_res *s = (struct stream_res *)r;
        if (r->kind != RES_STREAM || r->dev != d || !s->owned || r->gen != gen) continue;
        if (cu.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) continue;
        if (cu.cuEventRecord(e, s->stream) == CUDA_SUCCESS)
          cu.cuStreamWaitEvent(d->alloc_stream, e, 0);
        cu.cuEventDestroy(e); /* the wait keeps what it needs */
      }
      ctx_pop(prev, d);
    }
    devstate_leave(d->ordinal);
  }
}

/* At env teardown: nothing waits here for the GPU. A worker ends at once;
 * the work of its cancelled promises goes on, and what it uses goes after
 * it: pooled memory in stream order (order_pooled_frees), other memory and
 * modules on the reaper, whose cuMemFree / cuModuleUnload wait for the
 * device (cuStreamDestroy does not wait, and the stream's queued work still
 * runs). */
void addon_env_free_grave(struct addon_env *ae) {
  struct res *r;
  order_pooled_frees(ae);
  /* Destroying a Kernel may put its Module here: loop until empty. */
  while ((r = ae->grave) != NULL) {
    ae->grave = r->grave_next;
    r->in_grave = 0;
    destroy_now(ae->env, r);
    if (!r->wrapped && r->ops == 0) {
      if (r->kind == RES_MODULE) free(((struct mod_res *)r)->ptx);
      if (r->dev) dev_unref(r->dev);
      free(r);
    }
  }
}

void res_hold(struct res *r) { r->ops++; }

void res_release(napi_env env, struct res *r) {
  r->ops--;
  res_settle(env, r);
}

void res_close(napi_env env, struct res *r) {
  if (r->closed) return;
  r->closed = 1;
  res_settle(env, r);
}

static void res_finalize(napi_env env, void *data, void *hint) {
  struct res *r = data;
  (void)hint;
  if (r->kind == RES_DEVICE) {
    struct devobj *o = (struct devobj *)r;
    if (o->prev) o->prev->next = o->next;
    else if (r->dev && r->dev->objects == o) r->dev->objects = o->next;
    if (o->next) o->next->prev = o->prev;
    o->next = o->prev = NULL;
    if (o->weak) napi_delete_reference(env, o->weak);
    o->weak = NULL;
  }
  r->wrapped = 0;
  if (!r->closed) r->closed = 1;
  res_settle(env, r);
}

/* An object of another copy of the package (another version installed):
 * index.js marks every copy's prototypes with Symbol.for('uvcuda.object'),
 * and none of this copy's tags is on it. Said so in the message, since
 * its constructor has the name of ours. */
static int foreign_copy(napi_env env, napi_value v) {
  napi_value global, sym_ctor, sym_for, key, sym, ignored;
  napi_type_tag tag;
  bool has = false, ok = false, pending = false;
  int k;
  if (napi_get_global(env, &global) != napi_ok ||
      napi_get_named_property(env, global, "Symbol", &sym_ctor) != napi_ok ||
      napi_get_named_property(env, sym_ctor, "for", &sym_for) != napi_ok ||
      napi_create_string_utf8(env, "uvcuda.object", NAPI_AUTO_LENGTH, &key) != napi_ok ||
      napi_call_function(env, sym_ctor, sym_for, 1, &key, &sym) != napi_ok ||
      napi_has_property(env, v, sym, &has) != napi_ok) {
    /* a Proxy's trap may throw: not ours to report */
    if (napi_is_exception_pending(env, &pending) == napi_ok && pending)
      napi_get_and_clear_last_exception(env, &ignored);
    return 0;
  }
  if (!has) return 0;
  for (k = 0; k < RES_NKINDS; k++) {
    tag = tag_of(k);
    if (napi_check_object_type_tag(env, v, &tag, &ok) == napi_ok && ok) return 0;
  }
  return 1;
}

int res_unwrap(napi_env env, napi_value v, int kind, const char *what,
               int allow_closed, struct res **out) {
  napi_valuetype t = napi_undefined;
  bool ok = false;
  void *p = NULL;
  char got[160];
  napi_type_tag tag = tag_of(kind);

  if (v == NULL || napi_typeof(env, v, &t) != napi_ok || t != napi_object ||
      napi_check_object_type_tag(env, v, &tag, &ok) != napi_ok || !ok ||
      napi_unwrap(env, v, &p) != napi_ok || p == NULL) {
    /* Not described: a sloppy call's undefined or 5 arrives as the global
     * object or a Number wrapper, and Node core names only the type. */
    if (strcmp(what, "this") == 0)
      throw_this(env, "Value of \"this\" must be of type %s", addon_class_names[kind]);
    else
      throw_type(env, "%s must be a uvcuda %s, got %s%s", what, addon_class_names[kind],
                 describe(env, v, got, sizeof(got)),
                 t == napi_object && foreign_copy(env, v) ? " of another copy of uvcuda" : "");
    return -1;
  }
  if (((struct res *)p)->closed && !allow_closed) {
    throw_closed(env, addon_class_names[kind]);
    return -1;
  }
  *out = p;
  return 0;
}

/* The clone guard: an own enumerable property whose value is a symbol,
 * which structured cloning (postMessage, structuredClone) refuses with a
 * DataCloneError naming it. Node 20 has no way to mark an object
 * uncloneable (worker_threads.markAsUncloneable came in 22.10), and a
 * wrapper would otherwise be sent as a plain, empty object. */
static void guard(napi_env env, struct addon_env *ae, napi_value obj, int kind) {
  napi_value sym = NULL, desc;
  char text[256];
  napi_property_descriptor d = {"threadLocal", NULL, NULL, NULL, NULL, NULL,
                                napi_enumerable, NULL};
  if (ae->guard[kind] == NULL || napi_get_reference_value(env, ae->guard[kind], &sym) != napi_ok ||
      sym == NULL) {
    snprintf(text, sizeof(text),
             "uvcuda %s: a CUDA object of the thread that made it, which cannot be "
             "cloned or posted to another thread (open the device there)",
             addon_class_names[kind]);
    if (napi_create_string_utf8(env, text, NAPI_AUTO_LENGTH, &desc) != napi_ok ||
        napi_create_symbol(env, desc, &sym) != napi_ok)
      return;
    if (ae->guard[kind] == NULL) napi_create_reference(env, sym, 1, &ae->guard[kind]);
  }
  d.value = sym;
  napi_define_properties(env, obj, 1, &d);
}

struct res *this_res(napi_env env, napi_callback_info info, int kind,
                     int allow_closed, size_t *argc, napi_value *argv,
                     napi_value *self) {
  napi_value this_;
  struct res *r;
  if (napi_get_cb_info(env, info, argc, argv, &this_, NULL) != napi_ok) return NULL;
  if (self) *self = this_;
  if (res_unwrap(env, this_, kind, "this", allow_closed, &r) != 0) return NULL;
  return r;
}

napi_status res_wrap_new(napi_env env, struct res *r, napi_value *out) {
  struct addon_env *ae = r->ae;
  napi_type_tag tag;
  napi_value ctor;
  napi_status s;

  if ((s = napi_get_reference_value(env, ae->ctor[r->kind], &ctor)) != napi_ok)
    return s;
  constructing = 1;
  s = napi_new_instance(env, ctor, 0, NULL, out);
  constructing = 0;
  if (s != napi_ok) return s;
  tag = tag_of(r->kind);
  if ((s = napi_type_tag_object(env, *out, &tag)) != napi_ok ||
      (s = napi_wrap(env, *out, r, res_finalize, NULL, NULL)) != napi_ok)
    return s;
  r->wrapped = 1;
  guard(env, ae, *out, r->kind);
  return napi_ok;
}

static struct res *res_new(struct addon_env *ae, int kind, size_t size,
                           struct dev *d, uint64_t gen) {
  struct res *r = calloc(1, size);
  if (r == NULL) return NULL;
  r->kind = kind;
  r->ae = ae;
  r->dev = d;
  r->gen = gen;
  if (d) dev_ref(d);
  return r;
}

/* A struct that never got a wrapper (creation failed half way). */
static void res_discard(napi_env env, struct res *r) {
  r->closed = 1;
  res_settle(env, r);
}

/* Sets a read-only, enumerable own property. */
static void set_ro(napi_env env, napi_value obj, const char *name, napi_value v) {
  napi_property_descriptor d = {name, NULL, NULL, NULL, NULL, v, napi_enumerable,
                                NULL};
  napi_define_properties(env, obj, 1, &d);
}

/* ---- Device ------------------------------------------------------------ */

/* new Device(ordinal = 0) */
static napi_value device_ctor(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1] = {NULL}, self;
  struct addon_env *ae = addon_env_get(env);
  struct devobj *o;
  struct dev *d;
  uint32_t ordinal = 0;
  napi_value target = NULL;
  napi_type_tag tag;

  if (napi_get_cb_info(env, info, &argc, argv, &self, NULL) != napi_ok) return NULL;
  if (napi_get_new_target(env, info, &target) != napi_ok || target == NULL)
    return throw_construct_call(env, "Device");
  if (argc >= 1 && !arg_is_undefined(env, argv[0]) &&
      arg_u32(env, argv[0], "ordinal", 0, INT32_MAX, &ordinal) != 0)
    return NULL;
  if ((d = dev_open(env, ae, (int)ordinal)) == NULL) return NULL;
  o = (struct devobj *)res_new(ae, RES_DEVICE, sizeof(*o), d, 0);
  if (o == NULL) return throw_uv(env, UVCUDA_ENOMEM);
  tag = tag_of(RES_DEVICE);
  if (napi_type_tag_object(env, self, &tag) != napi_ok ||
      napi_wrap(env, self, o, res_finalize, NULL, NULL) != napi_ok) {
    res_discard(env, &o->h);
    return NULL;
  }
  o->h.wrapped = 1;
  /* Weak: 'fault' goes to every live Device object of the device. */
  if (napi_create_reference(env, self, 0, &o->weak) == napi_ok) {
    o->next = d->objects;
    if (d->objects) d->objects->prev = o;
    d->objects = o;
  }
  guard(env, ae, self, RES_DEVICE);
  return self;
}

static napi_value device_ordinal(napi_env env, napi_callback_info info) {
  struct res *r = this_res(env, info, RES_DEVICE, 1, NULL, NULL, NULL);
  napi_value v;
  if (r == NULL) return NULL;
  napi_create_int32(env, r->dev->ordinal, &v);
  return v;
}

static napi_value device_name(napi_env env, napi_callback_info info) {
  struct res *r = this_res(env, info, RES_DEVICE, 1, NULL, NULL, NULL);
  napi_value v;
  if (r == NULL) return NULL;
  napi_create_string_utf8(env, r->dev->name, NAPI_AUTO_LENGTH, &v);
  return v;
}

static napi_value device_cc(napi_env env, napi_callback_info info) {
  struct res *r = this_res(env, info, RES_DEVICE, 1, NULL, NULL, NULL);
  napi_value a, v;
  if (r == NULL) return NULL;
  napi_create_array_with_length(env, 2, &a);
  napi_create_int32(env, r->dev->cc_major, &v);
  napi_set_element(env, a, 0, v);
  napi_create_int32(env, r->dev->cc_minor, &v);
  napi_set_element(env, a, 1, v);
  return a;
}

/* In d's context: pooled where the device has pools, else cuMemAlloc. */
static CUresult mem_alloc(struct dev *d, struct mem_res *m, size_t n) {
  CUresult cr = CUDA_ERROR_NOT_SUPPORTED;
  if (d->alloc_stream) {
    /* The allocation is usable by every stream once its stream reached it;
     * that stream carries nothing but allocations and frees, so the
     * synchronize is short. */
    cr = cu.cuMemAllocAsync(&m->ptr, n, d->alloc_stream);
    if (cr == CUDA_SUCCESS) {
      CUresult sr = cu.cuStreamSynchronize(d->alloc_stream);
      if (sr == CUDA_SUCCESS) {
        m->pooled = 1;
      } else {
        cu.cuMemFreeAsync(m->ptr, d->alloc_stream);
        cr = sr;
      }
    }
  }
  if (!m->pooled && cr == CUDA_ERROR_NOT_SUPPORTED) cr = cu.cuMemAlloc(&m->ptr, n);
  return cr;
}

/* device.alloc(byteLength): DeviceMemory (contents undefined) */

static napi_value device_alloc(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1] = {NULL}, self, obj;
  struct res *r = this_res(env, info, RES_DEVICE, 0, &argc, argv, &self);
  struct mem_res *m;
  struct dev *d;
  CUcontext prev;
  CUresult cr;
  uint64_t gen;
  size_t n;

  if (r == NULL) return NULL;
  d = r->dev;
  if (arg_size_min(env, argv[0], "byteLength", 1, &n) != 0) return NULL;
  if (op_enter(env, d, NULL, 0, &gen) != 0) return NULL;
  dev_refresh(d, gen);
  m = (struct mem_res *)res_new(r->ae, RES_MEMORY, sizeof(*m), d, gen);
  if (m == NULL) {
    op_leave(d);
    return throw_uv(env, UVCUDA_ENOMEM);
  }
  if ((cr = ctx_push(d, &prev)) == CUDA_SUCCESS) cr = mem_alloc(d, m, n);
  ctx_pop(prev, d);
  op_leave(d);
  if (cr != CUDA_SUCCESS) {
    m->h.destroyed = 1;
    res_discard(env, &m->h);
    fault_after_error(env, d, UVCUDA_ECUDA(cr));
    return throw_cu(env, cr);
  }
  m->size = n;
  if (res_wrap_new(env, &m->h, &obj) != napi_ok) {
    res_discard(env, &m->h);
    return NULL;
  }
  set_ro(env, obj, "device", self);
  return obj;
}

/* A PTX text image: NUL-free but for its terminator(s), as C hands PTX to
 * cuModuleLoadData, and naming an .entry (a cubin or fatbin is binary). */
static int is_ptx(const char *img, size_t len) {
  while (len > 0 && img[len - 1] == '\0') len--;
  return len > 0 && memchr(img, '\0', len) == NULL && strstr(img, ".entry") != NULL;
}

/* device.loadModule(image: string | Buffer | TypedArray): Module. PTX is
 * JIT-compiled by the driver, synchronously. */
static napi_value device_load_module(napi_env env, napi_callback_info info) {
  size_t argc = 1, len = 0;
  napi_value argv[1] = {NULL}, self, obj;
  struct res *r = this_res(env, info, RES_DEVICE, 0, &argc, argv, &self);
  struct mod_res *m;
  napi_valuetype t;
  CUcontext prev;
  CUresult cr;
  uint64_t gen;
  char *img, got[160];
  void *p;

  if (r == NULL) return NULL;
  if (argv[0] == NULL || napi_typeof(env, argv[0], &t) != napi_ok) t = napi_undefined;
  if (t == napi_string) {
    napi_get_value_string_utf8(env, argv[0], NULL, 0, &len);
    if ((img = malloc(len + 1)) == NULL) return throw_uv(env, UVCUDA_ENOMEM);
    napi_get_value_string_utf8(env, argv[0], img, len + 1, &len);
  } else {
    if (host_bytes(env, argv[0], &p, &len, NULL) != 0)
      return throw_type(env, "image must be a string, a Buffer, a TypedArray, a DataView "
                             "or an ArrayBuffer, got %s",
                        describe(env, argv[0], got, sizeof(got)));
    if ((img = malloc(len + 1)) == NULL) return throw_uv(env, UVCUDA_ENOMEM);
    if (len) memcpy(img, p, len);
    img[len] = '\0'; /* PTX must be NUL-terminated */
  }
  if (len == 0) {
    free(img);
    return throw_range(env, "image is empty");
  }
  if (op_enter(env, r->dev, NULL, 0, &gen) != 0) {
    free(img);
    return NULL;
  }
  m = (struct mod_res *)res_new(r->ae, RES_MODULE, sizeof(*m), r->dev, gen);
  if (m == NULL) {
    op_leave(r->dev);
    free(img);
    return throw_uv(env, UVCUDA_ENOMEM);
  }
  cr = ctx_push(r->dev, &prev);
  if (cr == CUDA_SUCCESS) cr = cu.cuModuleLoadData(&m->mod, img);
  ctx_pop(prev, r->dev);
  op_leave(r->dev);
  if (cr == CUDA_SUCCESS && is_ptx(img, len)) m->ptx = img; /* parameter counts */
  else free(img);
  if (cr != CUDA_SUCCESS) {
    m->h.destroyed = 1;
    res_discard(env, &m->h);
    fault_after_error(env, r->dev, UVCUDA_ECUDA(cr));
    return throw_cu(env, cr);
  }
  if (res_wrap_new(env, &m->h, &obj) != napi_ok) {
    res_discard(env, &m->h);
    return NULL;
  }
  set_ro(env, obj, "device", self);
  return obj;
}

/* ---- DeviceMemory ------------------------------------------------------ */

static napi_value mem_byte_length(napi_env env, napi_callback_info info) {
  struct mem_res *m =
      (struct mem_res *)this_res(env, info, RES_MEMORY, 1, NULL, NULL, NULL);
  napi_value v;
  if (m == NULL) return NULL;
  napi_create_double(env, (double)m->size, &v);
  return v;
}

static napi_value mem_ptr(napi_env env, napi_callback_info info) {
  struct mem_res *m =
      (struct mem_res *)this_res(env, info, RES_MEMORY, 1, NULL, NULL, NULL);
  napi_value v;
  if (m == NULL) return NULL;
  napi_create_bigint_uint64(env, m->h.closed || res_stale(&m->h) ? 0 : (uint64_t)m->ptr,
                            &v);
  return v;
}

static napi_value mem_stream_ordered(napi_env env, napi_callback_info info) {
  struct mem_res *m =
      (struct mem_res *)this_res(env, info, RES_MEMORY, 1, NULL, NULL, NULL);
  napi_value v;
  if (m == NULL) return NULL;
  napi_get_boolean(env, m->pooled != 0, &v);
  return v;
}

static napi_value res_closed_getter(napi_env env, napi_callback_info info) {
  napi_value this_, v;
  void *kind;
  struct res *r;
  if (napi_get_cb_info(env, info, NULL, NULL, &this_, &kind) != napi_ok) return NULL;
  if (res_unwrap(env, this_, (int)(intptr_t)kind, "this", 1, &r) != 0) return NULL;
  napi_get_boolean(env, r->closed != 0, &v);
  return v;
}

static napi_value res_pending_getter(napi_env env, napi_callback_info info) {
  napi_value this_, v;
  void *kind;
  struct res *r;
  if (napi_get_cb_info(env, info, NULL, NULL, &this_, &kind) != napi_ok) return NULL;
  if (res_unwrap(env, this_, (int)(intptr_t)kind, "this", 1, &r) != 0) return NULL;
  napi_create_int32(env, r->ops, &v);
  return v;
}

/* mem.free() / module.unload() / stream.destroy(): no new work; the CUDA
 * object goes once the work pending on it is done. Idempotent. */
static napi_value res_close_method(napi_env env, napi_callback_info info) {
  napi_value this_;
  void *kind;
  struct res *r;
  if (napi_get_cb_info(env, info, NULL, NULL, &this_, &kind) != napi_ok) return NULL;
  if (res_unwrap(env, this_, (int)(intptr_t)kind, "this", 1, &r) != 0) return NULL;
  res_close(env, r);
  return NULL;
}

/* ---- Module and Kernel ------------------------------------------------- */

/* module.getFunction(name, signature: string[]): Kernel. The signature
 * must have as many entries as the kernel has parameters, where the driver
 * (cuFuncGetParamInfo) or the module's PTX says how many. */
static napi_value module_get_function(napi_env env, napi_callback_info info) {
  size_t argc = 2, len = 0;
  napi_value argv[2] = {NULL, NULL}, self, obj, e, sigs = NULL;
  struct mod_res *m =
      (struct mod_res *)this_res(env, info, RES_MODULE, 0, &argc, argv, &self);
  struct res *held[1];
  struct kern_res *k;
  unsigned char sig[ADDON_MAX_PARAMS];
  char name[256], tname[32], got[160];
  napi_valuetype t;
  uint32_t n = 0, i;
  CUcontext prev;
  CUresult cr;
  uint64_t gen;
  int j, count, arr;

  if (m == NULL) return NULL;
  if (argv[0] == NULL || napi_typeof(env, argv[0], &t) != napi_ok || t != napi_string)
    return throw_type(env, "name must be a string, got %s",
                      describe(env, argv[0], got, sizeof(got)));
  napi_get_value_string_utf8(env, argv[0], NULL, 0, &len);
  if (len == 0 || len >= sizeof(name))
    return throw_range(env, "name must be 1 to %zu bytes long, got %zu", sizeof(name) - 1,
                       len);
  napi_get_value_string_utf8(env, argv[0], name, sizeof(name), &len);
  /* The driver reads the name up to its first NUL: another kernel. */
  if (strlen(name) != len)
    return throw_value_shown(env, "The argument 'name' must be a string without null "
                                  "bytes. Received ", argv[0]);
  if ((arr = arg_array(env, argv[1], &sigs)) < 0) return NULL;
  if (!arr)
    return throw_type(env, "signature must be an array of parameter types "
                           "('ptr', 'u32', 'f32', ...), got %s",
                      describe(env, argv[1], got, sizeof(got)));
  napi_get_array_length(env, sigs, &n);
  if (n > ADDON_MAX_PARAMS)
    return throw_range(env, "a kernel takes at most %d parameters here, got %u",
                       ADDON_MAX_PARAMS, n);
  for (i = 0; i < n; i++) {
    napi_get_element(env, sigs, i, &e);
    if (napi_typeof(env, e, &t) != napi_ok || t != napi_string)
      return throw_type(env, "signature[%u] must be a string, got %s", i,
                        describe(env, e, got, sizeof(got)));
    if ((j = str_one_of(env, e, addon_ptype_names, P_NTYPES)) < 0) {
      snprintf(tname, sizeof(tname), "signature[%u]", i);
      return throw_one_of(env, e, tname, addon_ptype_names, P_NTYPES);
    }
    sig[i] = (unsigned char)j;
  }
  held[0] = &m->h;
  if (op_enter(env, m->h.dev, held, 1, &gen) != 0) return NULL;
  k = (struct kern_res *)res_new(m->h.ae, RES_KERNEL, sizeof(*k), m->h.dev, m->h.gen);
  if (k == NULL) {
    op_leave(m->h.dev);
    return throw_uv(env, UVCUDA_ENOMEM);
  }
  cr = ctx_push(m->h.dev, &prev);
  if (cr == CUDA_SUCCESS) cr = cu.cuModuleGetFunction(&k->fn, m->mod, name);
  count = cr == CUDA_SUCCESS ? kernel_param_count(m, k->fn, name) : -1;
  ctx_pop(prev, m->h.dev);
  op_leave(m->h.dev);
  if (cr != CUDA_SUCCESS) {
    k->h.destroyed = 1;
    res_discard(env, &k->h);
    return throw_cu(env, cr);
  }
  if (count >= 0 && (uint32_t)count != n) {
    k->h.destroyed = 1;
    res_discard(env, &k->h);
    return throw_value(env, "kernel %s takes %d parameter%s, but the signature names %u: "
                            "one type per parameter, in order",
                       name, count, count == 1 ? "" : "s", n);
  }
  k->mod = m;
  res_hold(&m->h);
  k->nparams = (int)n;
  memcpy(k->sig, sig, n);
  snprintf(k->name, sizeof(k->name), "%s", name);
  if (res_wrap_new(env, &k->h, &obj) != napi_ok) {
    res_discard(env, &k->h);
    return NULL;
  }
  set_ro(env, obj, "module", self);
  return obj;
}

static napi_value kernel_name(napi_env env, napi_callback_info info) {
  struct kern_res *k =
      (struct kern_res *)this_res(env, info, RES_KERNEL, 1, NULL, NULL, NULL);
  napi_value v;
  if (k == NULL) return NULL;
  napi_create_string_utf8(env, k->name, NAPI_AUTO_LENGTH, &v);
  return v;
}

static napi_value kernel_signature(napi_env env, napi_callback_info info) {
  struct kern_res *k =
      (struct kern_res *)this_res(env, info, RES_KERNEL, 1, NULL, NULL, NULL);
  napi_value a, v;
  int i;
  if (k == NULL) return NULL;
  napi_create_array_with_length(env, (size_t)k->nparams, &a);
  for (i = 0; i < k->nparams; i++) {
    napi_create_string_utf8(env, addon_ptype_names[k->sig[i]], NAPI_AUTO_LENGTH, &v);
    napi_set_element(env, a, (uint32_t)i, v);
  }
  return a;
}

/* ---- classes ----------------------------------------------------------- */

static napi_value internal_ctor(napi_env env, napi_callback_info info) {
  napi_value self;
  void *made_by;
  if (napi_get_cb_info(env, info, NULL, NULL, &self, &made_by) != napi_ok) return NULL;
  if (!constructing) return throw_illegal_constructor(env, (const char *)made_by);
  return self;
}

#define METHOD(name, fn, kind) \
  {name, NULL, fn, NULL, NULL, NULL, napi_default_method, (void *)(intptr_t)(kind)}
#define GETTER(name, fn, kind) \
  {name, NULL, NULL, fn, NULL, NULL, napi_default_jsproperty & ~napi_writable, \
   (void *)(intptr_t)(kind)}

napi_status objects_define(napi_env env, napi_value exports, struct addon_env *ae,
                           int kind, napi_callback ctor, void *ctor_data,
                           const napi_property_descriptor *props, size_t nprops) {
  napi_property_descriptor *statics = NULL, *members = NULL;
  size_t i, ns = 0, nm = 0;
  napi_value cls, proto;
  napi_status s = napi_generic_failure;

  statics = calloc(nprops + 1, sizeof(*statics));
  members = calloc(nprops + 1, sizeof(*members));
  if (statics == NULL || members == NULL) goto out;
  for (i = 0; i < nprops; i++) {
    if (props[i].attributes & napi_static) statics[ns++] = props[i];
    else members[nm++] = props[i];
  }
  /* Members go on the prototype as plain functions: napi_define_class would
   * give them a V8 receiver check that throws "Illegal invocation", with no
   * code, before our own check can run. */
  if ((s = napi_define_class(env, addon_class_names[kind], NAPI_AUTO_LENGTH, ctor,
                             ctor_data, ns, statics, &cls)) != napi_ok ||
      (s = napi_get_named_property(env, cls, "prototype", &proto)) != napi_ok ||
      (s = napi_define_properties(env, proto, nm, members)) != napi_ok ||
      (s = napi_create_reference(env, cls, 1, &ae->ctor[kind])) != napi_ok)
    goto out;
  s = napi_set_named_property(env, exports, addon_class_names[kind], cls);
out:
  free(statics);
  free(members);
  return s;
}

napi_status objects_init(napi_env env, napi_value exports, struct addon_env *ae) {
  napi_status s;
  const napi_property_descriptor device_props[] = {
      GETTER("ordinal", device_ordinal, RES_DEVICE),
      GETTER("name", device_name, RES_DEVICE),
      GETTER("computeCapability", device_cc, RES_DEVICE),
      GETTER("health", js_device_health, RES_DEVICE),
      METHOD("createStream", js_device_create_stream, RES_DEVICE),
      METHOD("alloc", device_alloc, RES_DEVICE),
      METHOD("loadModule", device_load_module, RES_DEVICE),
      METHOD("reset", js_device_reset, RES_DEVICE),
  };
  const napi_property_descriptor mem_props[] = {
      GETTER("byteLength", mem_byte_length, RES_MEMORY),
      GETTER("ptr", mem_ptr, RES_MEMORY),
      GETTER("streamOrdered", mem_stream_ordered, RES_MEMORY),
      GETTER("freed", res_closed_getter, RES_MEMORY),
      GETTER("pending", res_pending_getter, RES_MEMORY),
      METHOD("free", res_close_method, RES_MEMORY),
  };
  const napi_property_descriptor module_props[] = {
      GETTER("unloaded", res_closed_getter, RES_MODULE),
      METHOD("getFunction", module_get_function, RES_MODULE),
      METHOD("unload", res_close_method, RES_MODULE),
  };
  const napi_property_descriptor kernel_props[] = {
      GETTER("name", kernel_name, RES_KERNEL),
      GETTER("signature", kernel_signature, RES_KERNEL),
  };

  if ((s = objects_define(env, exports, ae, RES_DEVICE, device_ctor, NULL, device_props,
                          sizeof(device_props) / sizeof(device_props[0]))) != napi_ok ||
      (s = objects_define(env, exports, ae, RES_MEMORY, internal_ctor, "device.alloc()",
                          mem_props, sizeof(mem_props) / sizeof(mem_props[0]))) != napi_ok ||
      (s = objects_define(env, exports, ae, RES_MODULE, internal_ctor,
                          "device.loadModule()", module_props,
                          sizeof(module_props) / sizeof(module_props[0]))) != napi_ok ||
      (s = objects_define(env, exports, ae, RES_KERNEL, internal_ctor,
                          "module.getFunction()", kernel_props,
                          sizeof(kernel_props) / sizeof(kernel_props[0]))) != napi_ok)
    return s;
  return napi_ok;
}

/* The Stream class (methods from stream.c) with the generic members. */
napi_status objects_define_stream(napi_env env, napi_value exports,
                                  struct addon_env *ae,
                                  const napi_property_descriptor *props,
                                  size_t nprops) {
  const napi_property_descriptor extra[] = {
      GETTER("destroyed", res_closed_getter, RES_STREAM),
      GETTER("pending", res_pending_getter, RES_STREAM),
      METHOD("destroy", res_close_method, RES_STREAM),
  };
  size_t nextra = sizeof(extra) / sizeof(extra[0]);
  napi_property_descriptor *all = calloc(nprops + nextra, sizeof(*all));
  napi_status s;
  if (all == NULL) return napi_generic_failure;
  memcpy(all, props, nprops * sizeof(*all));
  memcpy(all + nprops, extra, sizeof(extra));
  s = objects_define(env, exports, ae, RES_STREAM, internal_ctor,
                     "device.createStream() or Stream.fromHandle()", all,
                     nprops + nextra);
  free(all);
  return s;
}

struct stream_res *objects_new_stream(napi_env env, struct dev *d) {
  struct stream_res *s = (struct stream_res *)res_new(
      addon_env_get(env), RES_STREAM, sizeof(*s), d, d ? devstate_gen(d->ordinal) : 0);
  if (s == NULL) throw_uv(env, UVCUDA_ENOMEM);
  return s;
}

void objects_discard(napi_env env, struct res *r) { res_discard(env, r); }

void objects_set_ro(napi_env env, napi_value obj, const char *name, napi_value v) {
  set_ro(env, obj, name, v);
}
