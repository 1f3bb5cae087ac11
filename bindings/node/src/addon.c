/* The uvcuda Node addon: module init, errors, argument checks, and the
 * functions that are not methods (driverInfo, deviceCount, configure,
 * stats). See addon.h for how CUDA objects live and die. */
#include "addon.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "simprobe.h"

/* ---- errors ------------------------------------------------------------ */

enum { E_TYPE, E_RANGE, E_PLAIN };

/* Throws a new error of `kind` with .code code_str and message text. */
static napi_value throw_text(napi_env env, int kind, const char *code_str, napi_value text) {
  napi_value code, err;
  napi_status s;
  if (napi_create_string_utf8(env, code_str, NAPI_AUTO_LENGTH, &code) != napi_ok) return NULL;
  if (kind == E_TYPE) s = napi_create_type_error(env, code, text, &err);
  else if (kind == E_RANGE) s = napi_create_range_error(env, code, text, &err);
  else s = napi_create_error(env, code, text, &err);
  if (s == napi_ok) uvcuda_napi__show_code(env, err);
  if (s == napi_ok) napi_throw(env, err);
  return NULL;
}

static napi_value throw_coded(napi_env env, int kind, const char *code_str,
                              const char *fmt, va_list ap) {
  char msg[768];
  napi_value text;
  vsnprintf(msg, sizeof(msg), fmt, ap);
  if (napi_create_string_utf8(env, msg, NAPI_AUTO_LENGTH, &text) != napi_ok) return NULL;
  return throw_text(env, kind, code_str, text);
}

#define THROWER(fn, kind, code)                                  \
  napi_value fn(napi_env env, const char *fmt, ...) {            \
    va_list ap;                                                  \
    va_start(ap, fmt);                                           \
    throw_coded(env, kind, code, fmt, ap);                       \
    va_end(ap);                                                  \
    return NULL;                                                 \
  }
THROWER(throw_type, E_TYPE, "ERR_INVALID_ARG_TYPE")
THROWER(throw_this, E_TYPE, "ERR_INVALID_THIS")
THROWER(throw_value, E_TYPE, "ERR_INVALID_ARG_VALUE")
THROWER(throw_range, E_RANGE, "ERR_OUT_OF_RANGE")
THROWER(throw_state, E_PLAIN, "ERR_INVALID_STATE")
#undef THROWER

static napi_value throw_fixed(napi_env env, int kind, const char *code,
                              const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  throw_coded(env, kind, code, fmt, ap);
  va_end(ap);
  return NULL;
}

napi_value throw_illegal_constructor(napi_env env, const char *use) {
  return throw_fixed(env, E_TYPE, "ERR_ILLEGAL_CONSTRUCTOR", "Illegal constructor: use %s",
                     use);
}

/* Node core's error for a class called without `new`. */
napi_value throw_construct_call(napi_env env, const char *cls) {
  return throw_fixed(env, E_TYPE, "ERR_CONSTRUCT_CALL_REQUIRED",
                     "Class constructor %s cannot be invoked without `new`", cls);
}

static void set_errno(napi_env env, napi_value err, int e) {
  napi_value num;
  if (napi_create_int32(env, e, &num) == napi_ok)
    napi_set_named_property(env, err, "errno", num);
}

napi_value throw_closed(napi_env env, const char *what) {
  char msg[256];
  napi_value code, text, err;
  snprintf(msg, sizeof(msg), "%s is closed (freed, destroyed or unloaded)", what);
  if (napi_create_string_utf8(env, uvcuda_err_name(UVCUDA_ECLOSING),
                              NAPI_AUTO_LENGTH, &code) != napi_ok ||
      napi_create_string_utf8(env, msg, NAPI_AUTO_LENGTH, &text) != napi_ok ||
      napi_create_type_error(env, code, text, &err) != napi_ok)
    return NULL;
  set_errno(env, err, UVCUDA_ECLOSING);
  uvcuda_napi__show_code(env, err);
  napi_throw(env, err);
  return NULL;
}

napi_value throw_stale(napi_env env, const char *what, int ordinal) {
  char msg[256];
  napi_value err;
  snprintf(msg, sizeof(msg),
           "%s was made before device %d was reset: it is gone with the reset; "
           "make a new one", what, ordinal);
  if (uvcuda_napi__error_msg(env, UVCUDA_ECUDA(CUDA_ERROR_CONTEXT_IS_DESTROYED), msg,
                             &err) != napi_ok)
    return NULL;
  napi_throw(env, err);
  return NULL;
}

napi_value throw_uv(napi_env env, int err) {
  uvcuda_napi_throw(env, err);
  return NULL;
}

napi_value throw_cu(napi_env env, CUresult r) {
  return throw_uv(env, UVCUDA_ECUDA(r));
}

int need_driver(napi_env env) {
  int err = cu_load();
  if (err == 0) return 0;
  throw_uv(env, err);
  return -1;
}

napi_value reject_thrown(napi_env env, napi_value ret) {
  bool pending = false;
  napi_value err, promise;
  napi_deferred d;
  if (napi_is_exception_pending(env, &pending) != napi_ok || !pending) return ret;
  if (napi_get_and_clear_last_exception(env, &err) != napi_ok) return NULL;
  if (napi_create_promise(env, &d, &promise) != napi_ok ||
      napi_reject_deferred(env, d, err) != napi_ok) {
    napi_throw(env, err); /* could not even make a promise: rethrow */
    return NULL;
  }
  return promise;
}

struct addon_env *addon_env_get(napi_env env) {
  void *p = NULL;
  if (uvcuda_napi_get_data(env, &p) != napi_ok) return NULL;
  return p;
}

/* ---- describing values ------------------------------------------------- */

static void js_string(napi_env env, napi_value v, char *buf, size_t size) {
  napi_value str;
  size_t len = 0;
  buf[0] = '\0';
  if (napi_coerce_to_string(env, v, &str) == napi_ok)
    napi_get_value_string_utf8(env, str, buf, size, &len);
}

const char *describe(napi_env env, napi_value v, char *buf, size_t size) {
  napi_valuetype t;
  char tmp[128];
  bool is = false;
  if (v == NULL || napi_typeof(env, v, &t) != napi_ok) {
    snprintf(buf, size, "undefined");
    return buf;
  }
  switch (t) {
    case napi_undefined: snprintf(buf, size, "undefined"); break;
    case napi_null: snprintf(buf, size, "null"); break;
    case napi_boolean:
    case napi_number:
      js_string(env, v, buf, size); /* NaN, 4294967296, 1e+21, -8, true */
      break;
    case napi_bigint:
      js_string(env, v, tmp, sizeof(tmp));
      snprintf(buf, size, "%sn", tmp);
      break;
    case napi_string: {
      size_t len = 0;
      napi_get_value_string_utf8(env, v, tmp, 41, &len);
      snprintf(buf, size, "type string ('%s%s')", tmp, len >= 40 ? "..." : "");
      break;
    }
    case napi_symbol: snprintf(buf, size, "a symbol"); break;
    case napi_function: snprintf(buf, size, "a function"); break;
    default: {
      napi_value ctor, name;
      size_t len = 0;
      if (napi_is_array(env, v, &is) == napi_ok && is) {
        snprintf(buf, size, "an array");
        break;
      }
      tmp[0] = '\0';
      if (napi_get_named_property(env, v, "constructor", &ctor) == napi_ok &&
          napi_typeof(env, ctor, &t) == napi_ok && t == napi_function &&
          napi_get_named_property(env, ctor, "name", &name) == napi_ok &&
          napi_typeof(env, name, &t) == napi_ok && t == napi_string)
        napi_get_value_string_utf8(env, name, tmp, 64, &len);
      if (tmp[0]) snprintf(buf, size, "an instance of %s", tmp);
      else snprintf(buf, size, "an object");
      /* A getter of `constructor` may have thrown: not ours to report. */
      {
        bool pending = false;
        napi_value ignored;
        if (napi_is_exception_pending(env, &pending) == napi_ok && pending)
          napi_get_and_clear_last_exception(env, &ignored);
      }
      break;
    }
  }
  return buf;
}

/* Node's ERR_INVALID_ARG_VALUE shows at most 128 UTF-16 units of the
 * value's util.inspect, then "..."; util.inspect reads at most 10000
 * units of a string (maxStringLength). */
#define SHOWN_MAX 128
#define INSPECT_MAX 10000

/* UTF-16 units written so far; SHOWN_MAX + 1 of them are enough to know
 * that the cut applies. */
struct shown {
  char16_t u[SHOWN_MAX + 4]; /* room for "..." */
  size_t n;
};

static void show_unit(struct shown *w, char16_t c) {
  if (w->n <= SHOWN_MAX) w->u[w->n++] = c;
}

static void show_ascii(struct shown *w, const char *p) {
  while (*p) show_unit(w, (char16_t)(unsigned char)*p++);
}

/* The string v as util.inspect (default options) shows it, read as UTF-16
 * units as Node reads it, then cut as ERR_INVALID_ARG_VALUE cuts it: past
 * 128 units the first 128 (a surrogate pair the cut splits keeps its high
 * half, as String.prototype.slice keeps it) and "...". Node's
 * formatPrimitive and strEscape: of a string longer than 10000 units only
 * the first 10000 are shown; one longer than 76 units (breakLength 80 - 4)
 * is split after each "\n", the lines joined by " +\n  ", each quoted on
 * its own. A line is in single quotes, unless it has one: then double
 * quotes if it has none, else backticks if it has neither them nor "${",
 * else single quotes with \'. Escaped: the single quote where it quotes,
 * the backslash, C0 controls (\b \t \n \x0B \f \r, else \xHH), DEL and C1
 * (\xHH, upper-case hex), and a lone surrogate (\uhhhh, lower-case hex). */
static void inspect_string(napi_env env, napi_value v, struct shown *w) {
  static const char *const ctl[] = {"\\b", "\\t", "\\n", "\\x0B", "\\f", "\\r"};
  size_t len = 0, start = 0, end, i;
  char16_t *s;
  char esc[8];
  int split;

  w->n = 0;
  if (napi_get_value_string_utf16(env, v, NULL, 0, &len) != napi_ok) return;
  if (len > INSPECT_MAX) len = INSPECT_MAX;
  if ((s = malloc((len + 1) * sizeof(*s))) == NULL) return;
  if (napi_get_value_string_utf16(env, v, s, len + 1, &len) != napi_ok) len = 0;
  split = len > 16 && len > 80 - 4;
  do {
    char16_t quote = '\'';
    int has_single = 0, has_double = 0, has_tick = 0, has_tpl = 0;
    end = start;
    if (split) {
      while (end < len && s[end] != '\n') end++;
      if (end < len) end++; /* the "\n" ends its line */
    } else {
      end = len;
    }
    for (i = start; i < end; i++) {
      if (s[i] == '\'') has_single = 1;
      else if (s[i] == '"') has_double = 1;
      else if (s[i] == '`') has_tick = 1;
      else if (s[i] == '$' && i + 1 < end && s[i + 1] == '{') has_tpl = 1;
    }
    if (has_single) {
      if (!has_double) quote = '"';
      else if (!has_tick && !has_tpl) quote = '`';
    }
    if (start > 0) show_ascii(w, " +\n  ");
    show_unit(w, quote);
    for (i = start; i < end && w->n <= SHOWN_MAX; i++) {
      char16_t c = s[i];
      if (c == '\\' || (c == '\'' && quote == '\'')) {
        snprintf(esc, sizeof(esc), "\\%c", (char)c);
      } else if (c < 0x20 || (c >= 0x7f && c <= 0x9f)) {
        if (c >= 8 && c <= 13) snprintf(esc, sizeof(esc), "%s", ctl[c - 8]);
        else snprintf(esc, sizeof(esc), "\\x%02X", (unsigned)c);
      } else if (c >= 0xd800 && c <= 0xdfff) {
        if (c <= 0xdbff && i + 1 < end && s[i + 1] >= 0xdc00 && s[i + 1] <= 0xdfff) {
          show_unit(w, c); /* a pair, as it is */
          show_unit(w, s[++i]);
          continue;
        }
        snprintf(esc, sizeof(esc), "\\u%x", (unsigned)c);
      } else {
        show_unit(w, c);
        continue;
      }
      show_ascii(w, esc);
    }
    show_unit(w, quote);
    start = end;
  } while (start < len && w->n <= SHOWN_MAX);
  free(s);
  if (w->n > SHOWN_MAX) {
    w->u[SHOWN_MAX] = w->u[SHOWN_MAX + 1] = w->u[SHOWN_MAX + 2] = '.';
    w->n = SHOWN_MAX + 3;
  }
}

napi_value throw_value_shown(napi_env env, const char *head, napi_value v) {
  char16_t *msg;
  struct shown shown;
  napi_value text;
  size_t i, hn;
  inspect_string(env, v, &shown);
  /* The message in UTF-16, as the value may hold a lone surrogate (UTF-8
   * cannot); head is ASCII. */
  hn = strlen(head);
  if ((msg = malloc((hn + shown.n) * sizeof(*msg) + 1)) == NULL)
    return throw_value(env, "%s(out of memory)", head);
  for (i = 0; i < hn; i++) msg[i] = (char16_t)(unsigned char)head[i];
  memcpy(msg + hn, shown.u, shown.n * sizeof(*msg));
  if (napi_create_string_utf16(env, msg, hn + shown.n, &text) == napi_ok)
    throw_text(env, E_TYPE, "ERR_INVALID_ARG_VALUE", text);
  free(msg);
  return NULL;
}

napi_value throw_one_of(napi_env env, napi_value v, const char *what,
                        const char *const *names, size_t n) {
  char list[512], head[640];
  size_t i, o = 0;
  list[0] = '\0';
  for (i = 0; i < n && o < sizeof(list); i++)
    o += (size_t)snprintf(list + o, sizeof(list) - o, "%s'%s'", i ? ", " : "", names[i]);
  snprintf(head, sizeof(head), "The %s '%s' must be one of: %s. Received ",
           strchr(what, '.') != NULL ? "property" : "argument", what, list);
  return throw_value_shown(env, head, v);
}

int str_one_of(napi_env env, napi_value v, const char *const *names, int n) {
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

/* ---- arguments --------------------------------------------------------- */

int arg_is_undefined(napi_env env, napi_value v) {
  napi_valuetype t;
  if (v == NULL) return 1;
  if (napi_typeof(env, v, &t) != napi_ok) return 0;
  return t == napi_undefined;
}

static int arg_number(napi_env env, napi_value v, const char *what, double *out) {
  napi_valuetype t;
  char got[160];
  if (v == NULL || napi_typeof(env, v, &t) != napi_ok || t != napi_number) {
    throw_type(env, "%s must be a number, got %s", what, describe(env, v, got, sizeof(got)));
    return -1;
  }
  napi_get_value_double(env, v, out);
  return 0;
}

int arg_size_min(napi_env env, napi_value v, const char *what, size_t lo, size_t *out) {
  double d;
  char got[160];
  if (arg_number(env, v, what, &d) != 0) return -1;
  if (!(d >= (double)lo) || d != floor(d) || d > 9007199254740991.0) {
    throw_range(env, "%s must be an integer from %zu to 2**53 - 1 "
                     "(Number.MAX_SAFE_INTEGER), got %s", what, lo,
                describe(env, v, got, sizeof(got)));
    return -1;
  }
  *out = (size_t)d;
  return 0;
}

int arg_size(napi_env env, napi_value v, const char *what, size_t *out) {
  return arg_size_min(env, v, what, 0, out);
}

int arg_u32(napi_env env, napi_value v, const char *what, uint32_t lo, uint32_t hi,
            uint32_t *out) {
  double d;
  char got[160];
  if (arg_number(env, v, what, &d) != 0) return -1;
  if (!(d >= lo) || d != floor(d) || d > hi) {
    throw_range(env, "%s must be an integer from %u to %u, got %s", what, lo, hi,
                describe(env, v, got, sizeof(got)));
    return -1;
  }
  *out = (uint32_t)d;
  return 0;
}

int arg_u64_handle(napi_env env, napi_value v, const char *what, uint64_t *out) {
  napi_valuetype t;
  bool lossless = false;
  char got[160];
  if (v == NULL || napi_typeof(env, v, &t) != napi_ok || t != napi_bigint) {
    throw_type(env, "%s must be a BigInt, got %s", what, describe(env, v, got, sizeof(got)));
    return -1;
  }
  napi_get_value_bigint_uint64(env, v, out, &lossless);
  if (!lossless) {
    throw_range(env, "%s must be a BigInt from 0n to 2n ** 64n - 1n, got %s", what,
                describe(env, v, got, sizeof(got)));
    return -1;
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

int host_bytes(napi_env env, napi_value v, void **data, size_t *len, int *detached) {
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

int arg_bytes(napi_env env, napi_value v, const char *what, void **data,
              size_t *len) {
  char got[160];
  int detached = 0;
  if (host_bytes(env, v, data, len, &detached) == 0) {
    if (!detached) return 0;
    /* Its bytes went with a transfer: nothing to copy, and not a 0-byte copy. */
    throw_state(env, "%s is detached (its ArrayBuffer was transferred)", what);
    return -1;
  }
  throw_type(env, "%s must be a TypedArray, Buffer, DataView or ArrayBuffer, got %s", what,
             describe(env, v, got, sizeof(got)));
  return -1;
}

int arg_array(napi_env env, napi_value v, napi_value *out) {
  struct addon_env *ae;
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
  if ((ae = addon_env_get(env)) == NULL || ae->is_array == NULL || ae->array_from == NULL ||
      napi_get_undefined(env, &undef) != napi_ok ||
      napi_get_reference_value(env, ae->is_array, &fn) != napi_ok)
    return 0;
  if (napi_call_function(env, undef, fn, 1, &v, &r) != napi_ok) return -1; /* revoked */
  if (napi_get_value_bool(env, r, &is) != napi_ok || !is) return 0;
  if (napi_get_reference_value(env, ae->array_from, &fn) != napi_ok) return 0;
  if (napi_call_function(env, undef, fn, 1, &v, out) != napi_ok) return -1; /* a trap threw */
  return 1;
}

int arg_dim3(napi_env env, napi_value v, const char *what, unsigned out[3]) {
  uint32_t n = 0, i, x;
  napi_value e, a = NULL;
  char name[64], got[160];
  int arr;

  out[0] = out[1] = out[2] = 1;
  if ((arr = arg_array(env, v, &a)) < 0) return -1;
  if (arr) {
    v = a;
    napi_get_array_length(env, v, &n);
    if (n < 1 || n > 3) {
      throw_range(env, "%s must have 1 to 3 dimensions, got %u", what, n);
      return -1;
    }
    for (i = 0; i < n; i++) {
      snprintf(name, sizeof(name), "%s[%u]", what, i);
      if (napi_get_element(env, v, i, &e) != napi_ok ||
          arg_u32(env, e, name, 1, UINT32_MAX, &x) != 0)
        return -1;
      out[i] = x;
    }
    return 0;
  }
  {
    napi_valuetype t;
    if (v == NULL || napi_typeof(env, v, &t) != napi_ok || t != napi_number) {
      throw_type(env, "%s must be a number or an array of 1 to 3 numbers, got %s", what,
                 describe(env, v, got, sizeof(got)));
      return -1;
    }
  }
  if (arg_u32(env, v, what, 1, UINT32_MAX, &x) != 0) return -1;
  out[0] = x;
  return 0;
}

/* ---- module functions -------------------------------------------------- */

static napi_status set_bool(napi_env env, napi_value o, const char *k, int b) {
  napi_value v;
  napi_status s = napi_get_boolean(env, b != 0, &v);
  return s == napi_ok ? napi_set_named_property(env, o, k, v) : s;
}

static napi_status set_num(napi_env env, napi_value o, const char *k, double d) {
  napi_value v;
  napi_status s = napi_create_double(env, d, &v);
  return s == napi_ok ? napi_set_named_property(env, o, k, v) : s;
}

static napi_status set_str(napi_env env, napi_value o, const char *k, const char *str) {
  napi_value v;
  napi_status s = napi_create_string_utf8(env, str ? str : "", NAPI_AUTO_LENGTH, &v);
  return s == napi_ok ? napi_set_named_property(env, o, k, v) : s;
}

/* driverInfo(): the loaded driver, or throws UVCUDA_ENODRIVER & co. */
static napi_value js_driver_info(napi_env env, napi_callback_info info) {
  uvcuda_driver_info_t di;
  napi_value o;
  int err;
  (void)info;
  if (need_driver(env) != 0) return NULL;
  if ((err = uvcuda_driver_info(&di)) != 0) return throw_uv(env, err);
  if (napi_create_object(env, &o) != napi_ok) return NULL;
  set_str(env, o, "path", di.path);
  set_num(env, o, "driverVersion", di.driver_version);
  set_num(env, o, "deviceCount", di.device_count);
  set_bool(env, o, "memops32", di.memops32);
  set_bool(env, o, "memops64", di.memops64);
  set_bool(env, o, "hostTaskSync", di.host_task_sync);
  set_bool(env, o, "simulated", support_driver_is_simulation());
  return o;
}

/* deviceCount(): 0 where the driver says CUDA_ERROR_NO_DEVICE (a count,
 * the usual "how many GPUs?" probe); no driver at all still throws. */
static napi_value js_device_count(napi_env env, napi_callback_info info) {
  int n = 0, err;
  CUresult r;
  napi_value v;
  (void)info;
  if ((err = cu_load()) != 0 && err != UVCUDA_ECUDA(CUDA_ERROR_NO_DEVICE))
    return throw_uv(env, err);
  if (err == 0 && (r = cu.cuDeviceGetCount(&n)) != CUDA_SUCCESS) {
    if (r != CUDA_ERROR_NO_DEVICE) return throw_cu(env, r);
    n = 0;
  }
  napi_create_int32(env, n, &v);
  return v;
}

/* 1 and options[key] in *v, 0 if absent or undefined (Node's "use the
 * default"), -1 if a getter threw. A plain get, as Node core reads an
 * options bag: a Proxy's get trap is heard even without a has trap. */
static int option_get(napi_env env, napi_value obj, const char *key, napi_value *v) {
  napi_valuetype t;
  if (napi_get_named_property(env, obj, key, v) != napi_ok ||
      napi_typeof(env, *v, &t) != napi_ok)
    return -1;
  return t != napi_undefined;
}

/* configure({ completion, spinBudgetUs, probeIntervalUs, latencyHistogram,
 * adaptive } = {}) */
static napi_value js_configure(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1], v;
  napi_valuetype t;
  uvcuda_options_t o;
  bool b = false;
  const char *names[7];
  char gotbuf[160];
  int i, got;

  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return NULL;
  uvcuda_options_init(&o);
  /* Left out (or undefined): every option left out, all defaults, as Node
   * core takes an omitted options bag. */
  if (argc < 1 || arg_is_undefined(env, argv[0])) {
    uvcuda_napi_configure(env, &o); /* throws EBUSY once the loop context is open */
    return NULL;
  }
  /* An array is no options bag (Node core's validateObject). */
  if (napi_typeof(env, argv[0], &t) != napi_ok || t != napi_object ||
      napi_is_array(env, argv[0], &b) != napi_ok || b)
    return throw_type(env, "options must be an object, got %s",
                      describe(env, argv[0], gotbuf, sizeof(gotbuf)));

  if ((got = option_get(env, argv[0], "completion", &v)) < 0) return NULL;
  if (got) {
    if (napi_typeof(env, v, &t) != napi_ok || t != napi_string)
      return throw_type(env, "options.completion must be a string, got %s",
                        describe(env, v, gotbuf, sizeof(gotbuf)));
    /* 'default' (what a left-out completion is) is taken too, unlisted. */
    for (i = 0; i < 7; i++) names[i] = uvcuda_completion_name((uvcuda_completion_t)i);
    if ((i = str_one_of(env, v, names, 7)) < 0)
      return throw_one_of(env, v, "options.completion", names + 1, 6);
    o.completion = (uvcuda_completion_t)i;
  }
  if ((got = option_get(env, argv[0], "spinBudgetUs", &v)) < 0) return NULL;
  if (got) {
    uint32_t u;
    if (arg_u32(env, v, "options.spinBudgetUs", 0, 1000000, &u) != 0) return NULL;
    o.spin_budget_us = (int32_t)u;
  }
  if ((got = option_get(env, argv[0], "probeIntervalUs", &v)) < 0) return NULL;
  if (got) {
    uint32_t u;
    if (arg_u32(env, v, "options.probeIntervalUs", 50, 2000, &u) != 0) return NULL;
    o.probe_interval_us = (int32_t)u;
  }
  if ((got = option_get(env, argv[0], "latencyHistogram", &v)) < 0) return NULL;
  if (got) {
    if (napi_get_value_bool(env, v, &b) != napi_ok)
      return throw_type(env, "options.latencyHistogram must be a boolean");
    if (b) o.flags |= UVCUDA_OPT_LATENCY_HISTOGRAM;
  }
  if ((got = option_get(env, argv[0], "adaptive", &v)) < 0) return NULL;
  if (got) {
    if (napi_get_value_bool(env, v, &b) != napi_ok)
      return throw_type(env, "options.adaptive must be a boolean");
    o.flags |= b ? UVCUDA_OPT_ADAPTIVE : UVCUDA_OPT_NO_ADAPTIVE;
  }
  if (uvcuda_napi_configure(env, &o) != napi_ok) return NULL;
  return NULL;
}

/* stats(): this env's uvcuda loop counters and the helper's promise counts. */
static napi_value js_stats(napi_env env, napi_callback_info info) {
  uvcuda_loop_t *ul;
  uvcuda_stats_t s;
  uvcuda_napi_stats_t ns;
  uvcuda_completion_t c;
  uint64_t spin_ns;
  napi_value o, hist, n;
  int err, i, adaptive;
  (void)info;

  /* Not a GPU call: before the first one, zeros and the settings to come
   * (configure() still works after it, and no driver is needed). */
  if (uvcuda_napi__settings(env, &ul, &c, &spin_ns, &adaptive) != napi_ok) return NULL;
  memset(&s, 0, sizeof(s));
  if (ul != NULL && (err = uvcuda_loop_stats(ul, &s)) != 0) return throw_uv(env, err);
  if (uvcuda_napi_stats(env, &ns) != napi_ok) return NULL;
  if (napi_create_object(env, &o) != napi_ok) return NULL;
  set_str(env, o, "completion", uvcuda_completion_name(c));
  set_num(env, o, "spinBudgetNs", (double)spin_ns);
  set_num(env, o, "started", (double)s.started);
  set_num(env, o, "completedSpin", (double)s.completed_spin);
  set_num(env, o, "completedReactor", (double)s.completed_reactor);
  set_num(env, o, "completedHostfn", (double)s.completed_hostfn);
  set_num(env, o, "completedPoll", (double)s.completed_poll);
  set_num(env, o, "failed", (double)s.failed);
  set_num(env, o, "cancelled", (double)s.cancelled);
  set_num(env, o, "fallbacks", (double)s.fallbacks);
  set_num(env, o, "reactorWakeups", (double)s.reactor_wakeups);
  set_num(env, o, "hostfnWakeups", (double)s.hostfn_wakeups);
  set_num(env, o, "faults", (double)s.faults);
  set_num(env, o, "timelines", (double)s.timelines);
  napi_get_boolean(env, adaptive != 0, &n);
  napi_set_named_property(env, o, "adaptive", n);
  set_num(env, o, "predicted", (double)s.predicted);
  set_num(env, o, "predictHit", (double)s.predict_hit);
  set_num(env, o, "predictEarly", (double)s.predict_early);
  set_num(env, o, "predictLate", (double)s.predict_late);
  set_num(env, o, "prewakes", (double)s.prewakes);
  set_num(env, o, "spinNs", (double)s.spin_ns);
  set_num(env, o, "pending", (double)ns.pending);
  set_num(env, o, "awaited", (double)ns.awaited);
  set_num(env, o, "resolved", (double)ns.resolved);
  set_num(env, o, "rejected", (double)ns.rejected);
  napi_create_array_with_length(env, UVCUDA_HIST_BUCKETS, &hist);
  for (i = 0; i < UVCUDA_HIST_BUCKETS; i++) {
    napi_create_double(env, (double)s.latency_hist[i], &n);
    napi_set_element(env, hist, (uint32_t)i, n);
  }
  napi_set_named_property(env, o, "latencyHistogram", hist);
  return o;
}

/* errorName(errno) / strerror(errno): uvcuda's names for any code. */
static napi_value js_err_text(napi_env env, napi_callback_info info, int name) {
  size_t argc = 1;
  napi_value argv[1], v;
  int32_t e;
  double d;
  napi_valuetype t;
  char got[160];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return NULL;
  if (argc < 1 || napi_typeof(env, argv[0], &t) != napi_ok || t != napi_number)
    return throw_type(env, "errno must be a number, got %s",
                      describe(env, argc < 1 ? NULL : argv[0], got, sizeof(got)));
  /* As util.getSystemErrorName: an integer, not wrapped or truncated. */
  napi_get_value_double(env, argv[0], &d);
  if (!(d == floor(d)) || d < INT32_MIN || d > INT32_MAX)
    return throw_range(env, "errno must be an integer in the int32 range, got %s",
                       describe(env, argv[0], got, sizeof(got)));
  e = (int32_t)d;
  napi_create_string_utf8(env, name ? uvcuda_err_name(e) : uvcuda_strerror(e),
                          NAPI_AUTO_LENGTH, &v);
  return v;
}
static napi_value js_error_name(napi_env env, napi_callback_info info) {
  return js_err_text(env, info, 1);
}
static napi_value js_strerror(napi_env env, napi_callback_info info) {
  return js_err_text(env, info, 0);
}

/* ---- per-env state ----------------------------------------------------- */

/* Runs when Node deletes the env: after the loop context closed and after
 * every wrapper's finalizer, so nothing can use what is destroyed here.
 * Nothing here waits for the GPU: the graveyard goes to the reaper. (The
 * fault announcement tsfn was closed by Node's own cleanup before.) */
static void addon_env_finalize(napi_env env, void *data, void *hint) {
  struct addon_env *ae = data;
  int i;
  (void)hint;
  addon_env_free_grave(ae);
  for (i = 0; i < ae->ndevs; i++)
    if (ae->devs[i]) dev_unref(ae->devs[i]);
  free(ae->devs);
  for (i = 0; i < RES_NKINDS; i++) {
    if (ae->ctor[i]) napi_delete_reference(env, ae->ctor[i]);
    if (ae->guard[i]) napi_delete_reference(env, ae->guard[i]);
  }
  if (ae->is_array) napi_delete_reference(env, ae->is_array);
  if (ae->array_from) napi_delete_reference(env, ae->array_from);
  free(ae);
}

/* Array.isArray and Array.from as the env starts, for arg_array. Without
 * them a Proxy of an array is refused as before. */
static void take_array_functions(napi_env env, struct addon_env *ae) {
  napi_value global, array, fn;
  if (napi_get_global(env, &global) != napi_ok ||
      napi_get_named_property(env, global, "Array", &array) != napi_ok)
    return;
  if (napi_get_named_property(env, array, "isArray", &fn) == napi_ok)
    napi_create_reference(env, fn, 1, &ae->is_array);
  if (napi_get_named_property(env, array, "from", &fn) == napi_ok)
    napi_create_reference(env, fn, 1, &ae->array_from);
}

static napi_value init(napi_env env, napi_value exports) {
  struct addon_env *ae = calloc(1, sizeof(*ae));
  napi_value v;
  char ver[32];
  napi_property_descriptor fns[] = {
      {"driverInfo", NULL, js_driver_info, NULL, NULL, NULL, napi_default, NULL},
      {"deviceCount", NULL, js_device_count, NULL, NULL, NULL, napi_default, NULL},
      {"configure", NULL, js_configure, NULL, NULL, NULL, napi_default, NULL},
      {"stats", NULL, js_stats, NULL, NULL, NULL, napi_default, NULL},
      {"fence", NULL, js_fence, NULL, NULL, NULL, napi_default, NULL},
      {"errorName", NULL, js_error_name, NULL, NULL, NULL, napi_default, NULL},
      {"strerror", NULL, js_strerror, NULL, NULL, NULL, napi_default, NULL},
  };

  if (ae == NULL) {
    napi_throw_error(env, "ERR_UVCUDA_NOMEM", "out of memory");
    return NULL;
  }
  ae->env = env;
  if (uvcuda_napi_set_data(env, ae, addon_env_finalize, NULL) != napi_ok) {
    free(ae);
    return NULL;
  }
  take_array_functions(env, ae);
  if (objects_init(env, exports, ae) != napi_ok ||
      stream_init(env, exports, ae) != napi_ok ||
      napi_define_properties(env, exports, sizeof(fns) / sizeof(fns[0]), fns) !=
          napi_ok)
    return NULL;
  snprintf(ver, sizeof(ver), "%d.%d.%d", UVCUDA_VERSION_MAJOR,
           UVCUDA_VERSION_MINOR, UVCUDA_VERSION_PATCH);
  napi_create_string_utf8(env, ver, NAPI_AUTO_LENGTH, &v);
  napi_set_named_property(env, exports, "version", v);
  return exports;
}

NAPI_MODULE_INIT() { return init(env, exports); }
