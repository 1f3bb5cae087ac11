/* See args.h. */
#include "args.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "env.h"
#include "errors.h"
#include "res.h"
#include "show.h"

#define MAX_SAFE_INTEGER 9007199254740991.0

int uvn_arg_is_undefined(napi_env env, napi_value v) {
  napi_valuetype t;
  if (v == NULL) return 1;
  if (napi_typeof(env, v, &t) != napi_ok) return 0;
  return t == napi_undefined;
}

int uvn_arg_number(napi_env env, napi_value v, const char *what, double *out) {
  napi_valuetype t;
  char got[160];
  if (v == NULL || napi_typeof(env, v, &t) != napi_ok || t != napi_number) {
    uvn_throw_type(env, "%s must be a number, got %s", what,
                   uvn_show(env, v, got, sizeof(got)));
    return -1;
  }
  napi_get_value_double(env, v, out);
  return 0;
}

int uvn_arg_int(napi_env env, napi_value v, const char *what, double lo, double hi,
                double *out) {
  char got[160];
  if (uvn_arg_number(env, v, what, out) != 0) return -1;
  if (!(*out >= lo && *out <= hi) || *out != floor(*out)) {
    uvn_throw_range(env, "%s must be an integer from %.0f to %.0f, got %s", what, lo, hi,
                    uvn_show(env, v, got, sizeof(got)));
    return -1;
  }
  return 0;
}

int uvn_arg_u32(napi_env env, napi_value v, const char *what, uint32_t lo, uint32_t hi,
                uint32_t *out) {
  double d;
  if (uvn_arg_int(env, v, what, lo, hi, &d) != 0) return -1;
  *out = (uint32_t)d;
  return 0;
}

int uvn_arg_size(napi_env env, napi_value v, const char *what, size_t lo, size_t *out) {
  double d;
  char got[160];
  if (uvn_arg_number(env, v, what, &d) != 0) return -1;
  if (!(d >= (double)lo) || d != floor(d) || d > MAX_SAFE_INTEGER) {
    uvn_throw_range(env, "%s must be an integer from %zu to 2**53 - 1 "
                         "(Number.MAX_SAFE_INTEGER), got %s", what, lo,
                    uvn_show(env, v, got, sizeof(got)));
    return -1;
  }
  *out = (size_t)d;
  return 0;
}

int uvn_arg_handle(napi_env env, napi_value v, const char *what, uint64_t *out) {
  napi_valuetype t;
  bool lossless = false;
  char got[160];
  if (v == NULL || napi_typeof(env, v, &t) != napi_ok || t != napi_bigint) {
    uvn_throw_type(env, "%s must be a BigInt, got %s", what,
                   uvn_show(env, v, got, sizeof(got)));
    return -1;
  }
  napi_get_value_bigint_uint64(env, v, out, &lossless);
  if (!lossless) {
    uvn_throw_range(env, "%s must be a BigInt from 0n to 2n ** 64n - 1n, got %s", what,
                    uvn_show(env, v, got, sizeof(got)));
    return -1;
  }
  return 0;
}

int uvn_arg_int64(napi_env env, napi_value v, const char *what, int is_signed,
                  uint64_t *out) {
  napi_valuetype t;
  bool lossless = false;
  char got[160];
  double d;
  if (napi_typeof(env, v, &t) != napi_ok) return -1;
  if (t == napi_bigint) {
    if (is_signed) {
      int64_t i;
      napi_get_value_bigint_int64(env, v, &i, &lossless);
      memcpy(out, &i, sizeof(i));
    } else {
      napi_get_value_bigint_uint64(env, v, out, &lossless);
    }
    if (!lossless) {
      uvn_throw_range(env, "%s does not fit in %s, got %s", what, is_signed ? "i64" : "u64",
                      uvn_show(env, v, got, sizeof(got)));
      return -1;
    }
    return 0;
  }
  if (t != napi_number) {
    uvn_throw_type(env, "%s must be a BigInt or a number, got %s", what,
                   uvn_show(env, v, got, sizeof(got)));
    return -1;
  }
  if (uvn_arg_int(env, v, what, is_signed ? -MAX_SAFE_INTEGER : 0.0, MAX_SAFE_INTEGER,
                  &d) != 0)
    return -1;
  if (is_signed) {
    int64_t i = (int64_t)d;
    memcpy(out, &i, sizeof(i));
  } else {
    *out = (uint64_t)d;
  }
  return 0;
}

static size_t typed_size(napi_typedarray_type t) {
  switch (t) {
    case napi_int8_array: case napi_uint8_array: case napi_uint8_clamped_array:
      return 1;
    case napi_int16_array: case napi_uint16_array:
      return 2;
    case napi_int32_array: case napi_uint32_array: case napi_float32_array:
      return 4;
    default:
      return 8;
  }
}

int uvn_host_bytes(napi_env env, napi_value v, void **data, size_t *len, int *detached) {
  bool is = false, det = false;
  napi_typedarray_type tt;
  napi_value ab = NULL;
  size_t n = 0, off = 0;
  void *p = NULL, *base = NULL;

  if (v == NULL) return -1;
  if (napi_is_typedarray(env, v, &is) == napi_ok && is) {
    if (napi_get_typedarray_info(env, v, &tt, &n, &p, &ab, &off) != napi_ok) return -1;
    *data = p; /* already at byte_offset */
    *len = n * typed_size(tt);
  } else if (napi_is_dataview(env, v, &is) == napi_ok && is) {
    if (napi_get_dataview_info(env, v, &n, &p, &ab, &off) != napi_ok) return -1;
    if (napi_get_arraybuffer_info(env, ab, &base, NULL) == napi_ok)
      p = base ? (char *)base + off : NULL;
    *data = p;
    *len = n;
  } else if (napi_is_arraybuffer(env, v, &is) == napi_ok && is) {
    if (napi_get_arraybuffer_info(env, v, &p, &n) != napi_ok) return -1;
    ab = v;
    *data = p;
    *len = n;
  } else {
    return -1;
  }
  if (detached) {
    /* A SharedArrayBuffer is never detached (and not an ArrayBuffer here). */
    if (ab != NULL && napi_is_detached_arraybuffer(env, ab, &det) != napi_ok) det = false;
    *detached = det;
  }
  return 0;
}

int uvn_arg_bytes(napi_env env, napi_value v, const char *what, void **data, size_t *len) {
  char got[160];
  int detached = 0;
  if (uvn_host_bytes(env, v, data, len, &detached) == 0) {
    if (!detached) return 0;
    /* Its bytes went with a transfer: nothing to copy, and not a 0-byte copy. */
    uvn_throw_state(env, "%s is detached (its ArrayBuffer was transferred)", what);
    return -1;
  }
  uvn_throw_type(env, "%s must be a TypedArray, Buffer, DataView or ArrayBuffer, got %s", what,
                 uvn_show(env, v, got, sizeof(got)));
  return -1;
}

int uvn_arg_array(napi_env env, napi_value v, napi_value *out) {
  struct uvn_env *ue;
  napi_value fn, undef, r;
  napi_valuetype t;
  bool is = false;

  if (v == NULL) return 0;
  if (napi_is_array(env, v, &is) == napi_ok && is) {
    *out = v;
    return 1;
  }
  /* napi_is_array says no to a Proxy: only an object it refused pays for
   * asking Array.isArray (the functions of load time, not what a user put
   * in their place since), and a Proxy is read once, into a plain array. */
  if (napi_typeof(env, v, &t) != napi_ok || t != napi_object) return 0;
  if ((ue = uvn_env_get(env)) == NULL || ue->is_array == NULL || ue->array_from == NULL ||
      napi_get_undefined(env, &undef) != napi_ok ||
      napi_get_reference_value(env, ue->is_array, &fn) != napi_ok)
    return 0;
  if (napi_call_function(env, undef, fn, 1, &v, &r) != napi_ok) return -1; /* revoked */
  if (napi_get_value_bool(env, r, &is) != napi_ok || !is) return 0;
  if (napi_get_reference_value(env, ue->array_from, &fn) != napi_ok) return 0;
  if (napi_call_function(env, undef, fn, 1, &v, out) != napi_ok) return -1; /* a trap threw */
  return 1;
}

int uvn_arg_dim3(napi_env env, napi_value v, const char *what, unsigned out[3]) {
  uint32_t n = 0, i, x;
  napi_value e, a = NULL;
  napi_valuetype t;
  char name[64], got[160];
  int arr;

  out[0] = out[1] = out[2] = 1;
  if ((arr = uvn_arg_array(env, v, &a)) < 0) return -1;
  if (arr) {
    napi_get_array_length(env, a, &n);
    if (n < 1 || n > 3) {
      uvn_throw_range(env, "%s must have 1 to 3 dimensions, got %u", what, n);
      return -1;
    }
    for (i = 0; i < n; i++) {
      snprintf(name, sizeof(name), "%s[%u]", what, i);
      if (napi_get_element(env, a, i, &e) != napi_ok ||
          uvn_arg_u32(env, e, name, 1, UINT32_MAX, &x) != 0)
        return -1;
      out[i] = x;
    }
    return 0;
  }
  if (v == NULL || napi_typeof(env, v, &t) != napi_ok || t != napi_number) {
    uvn_throw_type(env, "%s must be a number or an array of 1 to 3 numbers, got %s", what,
                   uvn_show(env, v, got, sizeof(got)));
    return -1;
  }
  if (uvn_arg_u32(env, v, what, 1, UINT32_MAX, &x) != 0) return -1;
  out[0] = x;
  return 0;
}

int uvn_str_one_of(napi_env env, napi_value v, const char *const *names, int n) {
  char buf[64];
  size_t len = 0;
  int i;
  if (napi_get_value_string_utf8(env, v, buf, sizeof(buf), &len) != napi_ok ||
      len >= sizeof(buf) - 1 || strlen(buf) != len) /* cut short, or a NUL in it */
    return -1;
  for (i = 0; i < n; i++)
    if (names[i] != NULL && strcmp(buf, names[i]) == 0) return i;
  return -1;
}

/* ---- description tables ------------------------------------------------ */

/* A string among a's names: its index at out, or thrown. */
static int one_of(napi_env env, napi_value v, const struct uvn_arg *a, int *out) {
  napi_valuetype t;
  char got[160];
  int i;
  if (napi_typeof(env, v, &t) != napi_ok || t != napi_string) {
    uvn_throw_type(env, "%s must be %s, got %s", a->name, a->must ? a->must : "a string",
                   uvn_show(env, v, got, sizeof(got)));
    return -1;
  }
  if ((i = uvn_str_one_of(env, v, a->names, a->nnames)) < 0) {
    uvn_throw_one_of(env, v, a->name, a->names + a->listed_from,
                     (size_t)(a->nnames - a->listed_from));
    return -1;
  }
  *out = i;
  return 0;
}

static int parse_one(napi_env env, napi_value v, const struct uvn_arg *a, char *out) {
  switch (a->type) {
    case UVN_ARG_RES:
      return uvn_res_unwrap(env, v, a->kind, a->name, 0, (struct uvn_res **)out);
    case UVN_ARG_BYTES: {
      struct uvn_bytes *b = (struct uvn_bytes *)out;
      return uvn_arg_bytes(env, v, a->name, &b->data, &b->len);
    }
    case UVN_ARG_SIZE:
      return uvn_arg_size(env, v, a->name, (size_t)a->lo, (size_t *)out);
    case UVN_ARG_U32:
      return uvn_arg_u32(env, v, a->name, (uint32_t)a->lo, (uint32_t)a->hi, (uint32_t *)out);
    case UVN_ARG_DIM3:
      return uvn_arg_dim3(env, v, a->name, (unsigned *)out);
    case UVN_ARG_HANDLE:
      return uvn_arg_handle(env, v, a->name, (uint64_t *)out);
    case UVN_ARG_BOOL: {
      bool b = false;
      if (napi_get_value_bool(env, v, &b) != napi_ok) {
        uvn_throw_type(env, "%s must be a boolean", a->name);
        return -1;
      }
      *(int *)out = b;
      return 0;
    }
    case UVN_ARG_ONE_OF:
      return one_of(env, v, a, (int *)out);
  }
  return -1;
}

int uvn_args_parse(napi_env env, const napi_value *argv, const struct uvn_arg *spec,
                   size_t n, void *out) {
  size_t i;
  for (i = 0; i < n; i++) {
    const struct uvn_arg *a = &spec[i];
    napi_value v = argv[a->index];
    if (a->key != NULL &&
        (v == NULL || napi_get_named_property(env, v, a->key, &v) != napi_ok))
      return -1; /* a getter threw */
    if (a->optional && uvn_arg_is_undefined(env, v)) continue;
    if (parse_one(env, v, a, (char *)out + a->offset) != 0) return -1;
  }
  return 0;
}
