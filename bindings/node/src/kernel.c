/* See kernel.h. */
#include "kernel.h"

#include <stdio.h>
#include <string.h>

#include "args.h"
#include "dev.h"
#include "errors.h"
#include "memory.h"
#include "module.h"
#include "op.h"
#include "params.h"
#include "show.h"
#include "uvcuda.h"

/* The parameter types: what a signature names, and how an argument of
 * each becomes the bytes of its slot. */
enum { PT_PTR, PT_INT, PT_INT64, PT_FLOAT };

static const struct ptype {
  const char *name;
  unsigned char cls;      /* PT_* */
  unsigned char size;     /* bytes in the slot */
  unsigned char is_signed;
  double lo, hi;          /* PT_INT: the range */
} ptypes[] = {
    {"ptr", PT_PTR, 8, 0, 0, 0},
    {"u8", PT_INT, 1, 0, 0, 255},
    {"i8", PT_INT, 1, 1, -128, 127},
    {"u16", PT_INT, 2, 0, 0, 65535},
    {"i16", PT_INT, 2, 1, -32768, 32767},
    {"u32", PT_INT, 4, 0, 0, 4294967295.0},
    {"i32", PT_INT, 4, 1, -2147483648.0, 2147483647.0},
    {"u64", PT_INT64, 8, 0, 0, 0},
    {"i64", PT_INT64, 8, 1, 0, 0},
    {"f32", PT_FLOAT, 4, 0, 0, 0},
    {"f64", PT_FLOAT, 8, 0, 0, 0},
};

#define NPTYPES ((int)(sizeof(ptypes) / sizeof(ptypes[0])))

static const struct uvn_class kernel_class = {UVN_KERNEL, NULL, NULL};

int uvn_kernel_signature(napi_env env, napi_value v, unsigned char *sig, uint32_t *n) {
  const char *names[NPTYPES];
  char what[32], got[160];
  napi_valuetype t;
  napi_value a = NULL, e;
  uint32_t i;
  int j, arr;

  for (j = 0; j < NPTYPES; j++) names[j] = ptypes[j].name;
  if ((arr = uvn_arg_array(env, v, &a)) < 0) return -1;
  if (!arr) {
    uvn_throw_type(env, "signature must be an array of parameter types "
                        "('ptr', 'u32', 'f32', ...), got %s",
                   uvn_show(env, v, got, sizeof(got)));
    return -1;
  }
  napi_get_array_length(env, a, n);
  if (*n > UVN_MAX_PARAMS) {
    uvn_throw_range(env, "a kernel takes at most %d parameters here, got %u", UVN_MAX_PARAMS,
                    *n);
    return -1;
  }
  for (i = 0; i < *n; i++) {
    napi_get_element(env, a, i, &e);
    if (napi_typeof(env, e, &t) != napi_ok || t != napi_string) {
      uvn_throw_type(env, "signature[%u] must be a string, got %s", i,
                     uvn_show(env, e, got, sizeof(got)));
      return -1;
    }
    if ((j = uvn_str_one_of(env, e, names, NPTYPES)) < 0) {
      snprintf(what, sizeof(what), "signature[%u]", i);
      uvn_throw_one_of(env, e, what, names, NPTYPES);
      return -1;
    }
    sig[i] = (unsigned char)j;
  }
  return 0;
}

napi_value uvn_kernel_new(napi_env env, struct uvn_module *m, napi_value module_obj,
                          const char *name, const unsigned char *sig, uint32_t n) {
  struct uvn_dev *d = m->h.dev;
  struct uvn_res *held[1] = {&m->h};
  struct uvn_kernel *k;
  CUcontext prev;
  CUresult cr;
  uint64_t gen;
  int count;

  if (uvn_res_enter(env, d, held, 1, &gen) != 0) return NULL;
  k = (struct uvn_kernel *)uvn_res_new(m->h.ue, &kernel_class, sizeof(*k), d, m->h.gen);
  if (k == NULL) {
    uvn_res_leave(d);
    return uvn_throw_uv(env, UVCUDA_ENOMEM);
  }
  cr = uvn_dev_push(d, &prev);
  if (cr == CUDA_SUCCESS) cr = uvn_cu.cuModuleGetFunction(&k->fn, m->mod, name);
  count = cr == CUDA_SUCCESS ? uvn_params_count(k->fn, m->ptx, name) : -1;
  uvn_dev_pop(d, prev);
  uvn_res_leave(d);
  if (cr != CUDA_SUCCESS) {
    k->h.destroyed = 1;
    uvn_res_discard(env, &k->h);
    return uvn_throw_cu(env, cr);
  }
  if (count >= 0 && (uint32_t)count != n) {
    k->h.destroyed = 1;
    uvn_res_discard(env, &k->h);
    return uvn_throw_value(env, "kernel %s takes %d parameter%s, but the signature names %u: "
                                "one type per parameter, in order",
                           name, count, count == 1 ? "" : "s", n);
  }
  k->h.holds = &m->h;
  uvn_res_hold(&m->h);
  k->nparams = (int)n;
  memcpy(k->sig, sig, n);
  snprintf(k->name, sizeof(k->name), "%s", name);
  return uvn_res_made(env, &k->h, CUDA_SUCCESS, "module", module_obj);
}

/* A 'ptr' argument: a DeviceMemory (held by o, kept, of a device o's may
 * use), a BigInt address, or null. */
static int marshal_ptr(napi_env env, napi_value e, const char *what, struct uvn_op *o,
                       napi_value *keep, size_t *nkeep, uint64_t *p) {
  struct uvn_res *r;
  napi_valuetype t;
  char got[160];
  if (napi_typeof(env, e, &t) != napi_ok) return -1;
  if (t == napi_bigint) return uvn_arg_handle(env, e, what, p);
  if (t == napi_null) {
    *p = 0;
    return 0;
  }
  if (t != napi_object) {
    uvn_throw_type(env, "%s (ptr) must be a DeviceMemory, a BigInt or null, got %s", what,
                   uvn_show(env, e, got, sizeof(got)));
    return -1;
  }
  if (uvn_res_unwrap(env, e, UVN_MEMORY, what, 0, &r) != 0 ||
      uvn_memory_check_device(env, (struct uvn_memory *)r, o->dev, what) != 0)
    return -1;
  *p = (uint64_t)((struct uvn_memory *)r)->ptr;
  uvn_op_hold(o, r);
  keep[(*nkeep)++] = e;
  return 0;
}

/* The argument e of type t into slot: its low t->size bytes. */
static int marshal_one(napi_env env, napi_value e, const char *what, const struct ptype *t,
                       struct uvn_op *o, napi_value *keep, size_t *nkeep, void *slot) {
  uint64_t u = 0;
  double d;
  switch (t->cls) {
    case PT_PTR:
      if (marshal_ptr(env, e, what, o, keep, nkeep, &u) != 0) return -1;
      break;
    case PT_INT64:
      if (uvn_arg_int64(env, e, what, t->is_signed, &u) != 0) return -1;
      break;
    case PT_INT:
      if (uvn_arg_int(env, e, what, t->lo, t->hi, &d) != 0) return -1;
      u = (uint64_t)(int64_t)d;
      break;
    case PT_FLOAT:
      if (uvn_arg_number(env, e, what, &d) != 0) return -1;
      if (t->size == 4) {
        float f = (float)d;
        memcpy(slot, &f, sizeof(f));
      } else {
        memcpy(slot, &d, sizeof(d));
      }
      return 0;
  }
  switch (t->size) { /* the integer's own width, whatever the byte order */
    case 1: { uint8_t x = (uint8_t)u; memcpy(slot, &x, 1); break; }
    case 2: { uint16_t x = (uint16_t)u; memcpy(slot, &x, 2); break; }
    case 4: { uint32_t x = (uint32_t)u; memcpy(slot, &x, 4); break; }
    default: memcpy(slot, &u, 8); break;
  }
  return 0;
}

int uvn_kernel_marshal(napi_env env, const struct uvn_kernel *k, napi_value args,
                       struct uvn_op *o, napi_value *keep, size_t *nkeep) {
  uint32_t n = 0, i;
  char what[32], got[160];
  napi_value e;

  if (!uvn_arg_is_undefined(env, args)) {
    napi_value a = NULL;
    int arr = uvn_arg_array(env, args, &a);
    if (arr < 0) return -1;
    if (!arr) {
      uvn_throw_type(env, "args must be an array, got %s",
                     uvn_show(env, args, got, sizeof(got)));
      return -1;
    }
    args = a;
    napi_get_array_length(env, args, &n);
  }
  if ((int)n != k->nparams) {
    uvn_throw_value(env, "kernel %s takes %d argument%s, got %u", k->name, k->nparams,
                    k->nparams == 1 ? "" : "s", n);
    return -1;
  }
  for (i = 0; i < n; i++) {
    snprintf(what, sizeof(what), "args[%u]", i);
    if (napi_get_element(env, args, i, &e) != napi_ok) return -1;
    o->params[i] = &o->slots[i];
    if (marshal_one(env, e, what, &ptypes[k->sig[i]], o, keep, nkeep, &o->slots[i]) != 0)
      return -1;
  }
  o->nparams = (int)n;
  return 0;
}

static napi_value kernel_name(napi_env env, napi_callback_info info) {
  struct uvn_kernel *k =
      (struct uvn_kernel *)uvn_res_this(env, info, UVN_KERNEL, 1, NULL, NULL, NULL);
  napi_value v;
  if (k == NULL) return NULL;
  napi_create_string_utf8(env, k->name, NAPI_AUTO_LENGTH, &v);
  return v;
}

/* kernel.signature: a new array each read (index.js freezes one per kernel). */
static napi_value kernel_signature(napi_env env, napi_callback_info info) {
  struct uvn_kernel *k =
      (struct uvn_kernel *)uvn_res_this(env, info, UVN_KERNEL, 1, NULL, NULL, NULL);
  napi_value a, v;
  int i;
  if (k == NULL) return NULL;
  napi_create_array_with_length(env, (size_t)k->nparams, &a);
  for (i = 0; i < k->nparams; i++) {
    napi_create_string_utf8(env, ptypes[k->sig[i]].name, NAPI_AUTO_LENGTH, &v);
    napi_set_element(env, a, (uint32_t)i, v);
  }
  return a;
}

napi_status uvn_kernel_define(napi_env env, napi_value exports, struct uvn_env *ue) {
  const napi_property_descriptor props[] = {
      UVN_GETTER("name", kernel_name, UVN_KERNEL),
      UVN_GETTER("signature", kernel_signature, UVN_KERNEL),
  };
  return uvn_res_define_class(env, exports, ue, UVN_KERNEL, uvn_res_internal_ctor,
                              (void *)"module.getFunction()", props,
                              sizeof(props) / sizeof(props[0]));
}
