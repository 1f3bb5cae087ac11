/* See res.h. */
#include "res.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dev.h"
#include "devstate.h"
#include "env.h"
#include "errors.h"
#include "fault.h"
#include "show.h"
#include "uvcuda.h"
#include "uvcuda_napi_ext.h"

static const char *const class_names[UVN_NKINDS] = {
    "Device", "Stream", "DeviceMemory", "Module", "Kernel"};

const char *uvn_class_name(int kind) { return class_names[kind]; }

/* One tag per class and per loaded copy of the addon: napi_unwrap of a
 * foreign object is never attempted. Constants alone would match the
 * objects of another copy in the process (another package version, its
 * struct layout maybe another), so the upper word mixes in the address of
 * this copy's own table: copies loaded together never share it. Computed
 * at each use (no shared state to initialise between threads). */
static const uint64_t tag_lower[UVN_NKINDS] = {
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

/* ---- lifetime ------------------------------------------------------------ */

struct uvn_res *uvn_res_new(struct uvn_env *ue, const struct uvn_class *cls, size_t size,
                            struct uvn_dev *d, uint64_t gen) {
  struct uvn_res *r = calloc(1, size);
  if (r == NULL) return NULL;
  r->cls = cls;
  r->ue = ue;
  r->dev = d;
  r->gen = gen;
  uvcuda__queue_init(&r->grave);
  if (d) uvn_dev_ref(d);
  return r;
}

int uvn_res_stale(const struct uvn_res *r) {
  return r->dev != NULL && r->cls->kind != UVN_DEVICE &&
         r->gen != uvn_devstate_gen(r->dev->ordinal);
}

/* The CUDA object goes, never waiting for the device on this thread (the
 * class's hook: memory and modules go to the reaper, pooled memory is
 * freed in stream order). An object of a generation a reset ended is gone
 * already: the hooks pass nothing to the driver then. */
static void destroy_now(napi_env env, struct uvn_res *r) {
  struct uvn_res *held = r->holds;
  r->destroyed = 1;
  if (r->cls->destroy != NULL) r->cls->destroy(env, r);
  r->holds = NULL;
  if (held != NULL) uvn_res_release(env, held);
}

static void res_free(struct uvn_res *r) {
  if (r->dev) uvn_dev_unref(r->dev);
  free(r);
}

/* Destroys the CUDA object once closed and idle (or defers that to the
 * graveyard from env teardown on), frees the struct once nothing points at
 * it. r may be gone on return. */
static void settle(napi_env env, struct uvn_res *r) {
  struct uvn_env *ue = r->ue;
  if (!uvcuda__queue_empty(&r->grave)) return;
  if (r->closed && r->pending == 0 && !r->destroyed) {
    if (uvcuda_napi_closing(env) && ue != NULL) {
      uvcuda__queue_insert_head(&ue->grave, &r->grave);
      return;
    }
    destroy_now(env, r);
  }
  if (r->destroyed && !r->wrapped && r->pending == 0) res_free(r);
}

void uvn_res_free_grave(struct uvn_env *ue) {
  struct uvn_res *r;
  /* Destroying a Kernel may put its Module here: until empty. */
  while (!uvcuda__queue_empty(&ue->grave)) {
    r = uvcuda__queue_data(uvcuda__queue_head(&ue->grave), struct uvn_res, grave);
    uvcuda__queue_remove(&r->grave);
    destroy_now(ue->env, r);
    if (!r->wrapped && r->pending == 0) res_free(r);
  }
}

void uvn_res_discard(napi_env env, struct uvn_res *r) {
  r->closed = 1;
  settle(env, r);
}

void uvn_res_hold(struct uvn_res *r) { r->pending++; }

void uvn_res_release(napi_env env, struct uvn_res *r) {
  r->pending--;
  settle(env, r);
}

void uvn_res_close(napi_env env, struct uvn_res *r) {
  if (r->closed) return;
  r->closed = 1;
  settle(env, r);
}

static void res_finalize(napi_env env, void *data, void *hint) {
  struct uvn_res *r = data;
  (void)hint;
  if (r->cls->finalize != NULL) r->cls->finalize(env, r);
  r->wrapped = 0;
  r->closed = 1;
  settle(env, r);
}

/* ---- reset lock and generations ----------------------------------------- */

/* The class of what is closed among r and what it holds (a Kernel's
 * Module), or -1 if nothing is. */
static int closed_kind(const struct uvn_res *r) {
  if (r->closed) return (int)r->cls->kind;
  if (r->holds != NULL && r->holds->closed) return (int)r->holds->cls->kind;
  return -1;
}

static int enter(napi_env env, struct uvn_dev *d, struct uvn_res *const *rs, int n,
                 uint64_t *gen, int counted) {
  int i, err, closed;
  *gen = 0;
  if (d != NULL && uvn_devstate_enter(d->ordinal, gen) != 0) {
    uvn_throw_state(env, "device %d is being reset", d->ordinal);
    return -1;
  }
  /* A fault of this generation (one a reset could not clear, too): the
   * device refuses new work, as the driver would, whatever a fresh
   * context of its says. */
  if (d != NULL && (err = uvn_devstate_fault_now(d->ordinal)) != 0) {
    bool pending = false;
    uvn_devstate_leave(d->ordinal);
    /* An await rejects with it as the stream would: counted as one. */
    if (counted && uvcuda_napi__count_rejected(env) != napi_ok &&
        napi_is_exception_pending(env, &pending) == napi_ok && pending)
      return -1; /* the env's settings are invalid: that error, as for an await */
    uvn_throw_uv(env, err);
    return -1;
  }
  for (i = 0; i < n; i++) {
    struct uvn_res *r = rs[i];
    if (r == NULL) continue;
    /* Closed by JS that ran inside this very call (a getter of one of its
     * arguments): its handle may be destroyed and handed out anew. */
    if ((closed = closed_kind(r)) >= 0) {
      if (d != NULL) uvn_devstate_leave(d->ordinal);
      uvn_throw_closed(env, class_names[closed]);
      return -1;
    }
    if (!uvn_res_stale(r)) continue;
    if (d != NULL) uvn_devstate_leave(d->ordinal);
    uvn_throw_stale(env, class_names[r->cls->kind], r->dev->ordinal);
    return -1;
  }
  return 0;
}

int uvn_res_enter(napi_env env, struct uvn_dev *d, struct uvn_res *const *rs, int n,
                  uint64_t *gen) {
  return enter(env, d, rs, n, gen, 0);
}

int uvn_res_enter_await(napi_env env, struct uvn_dev *d, struct uvn_res *const *rs, int n,
                        uint64_t *gen) {
  return enter(env, d, rs, n, gen, 1);
}

void uvn_res_leave(struct uvn_dev *d) {
  if (d != NULL) uvn_devstate_leave(d->ordinal);
}

/* ---- wrappers ------------------------------------------------------------ */

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
  for (k = 0; k < UVN_NKINDS; k++) {
    tag = tag_of(k);
    if (napi_check_object_type_tag(env, v, &tag, &ok) == napi_ok && ok) return 0;
  }
  return 1;
}

int uvn_res_unwrap(napi_env env, napi_value v, int kind, const char *what,
                   int allow_closed, struct uvn_res **out) {
  napi_valuetype t = napi_undefined;
  bool ok = false;
  void *p = NULL;
  char got[160];
  napi_type_tag tag = tag_of(kind);
  int closed;

  if (v == NULL || napi_typeof(env, v, &t) != napi_ok || t != napi_object ||
      napi_check_object_type_tag(env, v, &tag, &ok) != napi_ok || !ok ||
      napi_unwrap(env, v, &p) != napi_ok || p == NULL) {
    /* Not described: a sloppy call's undefined or 5 arrives as the global
     * object or a Number wrapper, and Node core names only the type. */
    if (strcmp(what, "this") == 0)
      uvn_throw_this(env, "Value of \"this\" must be of type %s", class_names[kind]);
    else
      uvn_throw_type(env, "%s must be a uvcuda %s, got %s%s", what, class_names[kind],
                     uvn_show(env, v, got, sizeof(got)),
                     t == napi_object && foreign_copy(env, v) ? " of another copy of uvcuda"
                                                              : "");
    return -1;
  }
  if (!allow_closed && (closed = closed_kind(p)) >= 0) {
    uvn_throw_closed(env, class_names[closed]);
    return -1;
  }
  *out = p;
  return 0;
}

struct uvn_res *uvn_res_this(napi_env env, napi_callback_info info, int kind,
                             int allow_closed, size_t *argc, napi_value *argv,
                             napi_value *self) {
  napi_value this_;
  struct uvn_res *r;
  if (napi_get_cb_info(env, info, argc, argv, &this_, NULL) != napi_ok) return NULL;
  if (self) *self = this_;
  if (uvn_res_unwrap(env, this_, kind, "this", allow_closed, &r) != 0) return NULL;
  return r;
}

/* The clone guard: an own enumerable property whose value is a symbol,
 * which structured cloning (postMessage, structuredClone) refuses with a
 * DataCloneError naming it. Node 20 has no way to mark an object
 * uncloneable (worker_threads.markAsUncloneable came in 22.10), and a
 * wrapper would otherwise be sent as a plain, empty object. */
static void guard(napi_env env, struct uvn_env *ue, napi_value obj, int kind) {
  napi_value sym = NULL, desc;
  char text[256];
  napi_property_descriptor d = {"threadLocal", NULL, NULL, NULL, NULL, NULL,
                                napi_enumerable, NULL};
  if (ue->guard[kind] == NULL ||
      napi_get_reference_value(env, ue->guard[kind], &sym) != napi_ok || sym == NULL) {
    snprintf(text, sizeof(text),
             "uvcuda %s: a CUDA object of the thread that made it, which cannot be "
             "cloned or posted to another thread (open the device there)",
             class_names[kind]);
    if (napi_create_string_utf8(env, text, NAPI_AUTO_LENGTH, &desc) != napi_ok ||
        napi_create_symbol(env, desc, &sym) != napi_ok)
      return;
    if (ue->guard[kind] == NULL) napi_create_reference(env, sym, 1, &ue->guard[kind]);
  }
  d.value = sym;
  napi_define_properties(env, obj, 1, &d);
}

napi_status uvn_res_wrap(napi_env env, struct uvn_res *r, napi_value self) {
  napi_type_tag tag = tag_of(r->cls->kind);
  napi_status s;
  if ((s = napi_type_tag_object(env, self, &tag)) != napi_ok ||
      (s = napi_wrap(env, self, r, res_finalize, NULL, NULL)) != napi_ok)
    return s;
  r->wrapped = 1;
  guard(env, r->ue, self, r->cls->kind);
  return napi_ok;
}

napi_status uvn_res_wrap_new(napi_env env, struct uvn_res *r, napi_value *out) {
  napi_value ctor;
  napi_status s;
  if ((s = napi_get_reference_value(env, r->ue->ctor[r->cls->kind], &ctor)) != napi_ok)
    return s;
  constructing = 1;
  s = napi_new_instance(env, ctor, 0, NULL, out);
  constructing = 0;
  if (s != napi_ok) return s;
  return uvn_res_wrap(env, r, *out);
}

napi_value uvn_res_made(napi_env env, struct uvn_res *r, int cr, const char *prop,
                        napi_value owner) {
  napi_value obj;
  if (cr != CUDA_SUCCESS) {
    /* Before the discard, which frees r and its hold on the device. */
    uvn_fault_after_error(r->dev, UVCUDA_ECUDA(cr));
    r->destroyed = 1;
    uvn_res_discard(env, r);
    return uvn_throw_cu(env, (CUresult)cr);
  }
  if (uvn_res_wrap_new(env, r, &obj) != napi_ok) {
    uvn_res_discard(env, r);
    return NULL;
  }
  uvn_res_set_ro(env, obj, prop, owner);
  return obj;
}

void uvn_res_set_ro(napi_env env, napi_value obj, const char *name, napi_value v) {
  napi_property_descriptor d = {name, NULL, NULL, NULL, NULL, v, napi_enumerable, NULL};
  napi_define_properties(env, obj, 1, &d);
}

/* ---- classes ------------------------------------------------------------- */

napi_value uvn_res_internal_ctor(napi_env env, napi_callback_info info) {
  napi_value self;
  void *made_by;
  if (napi_get_cb_info(env, info, NULL, NULL, &self, &made_by) != napi_ok) return NULL;
  if (!constructing) return uvn_throw_illegal_constructor(env, (const char *)made_by);
  return self;
}

/* The res of `this`, of the kind the member's data names; closed allowed. */
static struct uvn_res *member_this(napi_env env, napi_callback_info info) {
  napi_value this_;
  void *kind;
  struct uvn_res *r;
  if (napi_get_cb_info(env, info, NULL, NULL, &this_, &kind) != napi_ok) return NULL;
  if (uvn_res_unwrap(env, this_, (int)(intptr_t)kind, "this", 1, &r) != 0) return NULL;
  return r;
}

napi_value uvn_res_closed_getter(napi_env env, napi_callback_info info) {
  struct uvn_res *r = member_this(env, info);
  napi_value v;
  if (r == NULL) return NULL;
  napi_get_boolean(env, r->closed != 0, &v);
  return v;
}

napi_value uvn_res_pending_getter(napi_env env, napi_callback_info info) {
  struct uvn_res *r = member_this(env, info);
  napi_value v;
  if (r == NULL) return NULL;
  napi_create_int32(env, r->pending, &v);
  return v;
}

napi_value uvn_res_close_method(napi_env env, napi_callback_info info) {
  struct uvn_res *r = member_this(env, info);
  if (r != NULL) uvn_res_close(env, r);
  return NULL;
}

napi_status uvn_res_define_class(napi_env env, napi_value exports, struct uvn_env *ue,
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
  if ((s = napi_define_class(env, class_names[kind], NAPI_AUTO_LENGTH, ctor, ctor_data, ns,
                             statics, &cls)) != napi_ok ||
      (s = napi_get_named_property(env, cls, "prototype", &proto)) != napi_ok ||
      (s = napi_define_properties(env, proto, nm, members)) != napi_ok ||
      (s = napi_create_reference(env, cls, 1, &ue->ctor[kind])) != napi_ok)
    goto out;
  s = napi_set_named_property(env, exports, class_names[kind], cls);
out:
  free(statics);
  free(members);
  return s;
}
