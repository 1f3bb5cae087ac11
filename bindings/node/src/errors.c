/* See errors.h. */
#include "errors.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "show.h"
#include "uvcuda.h"
#include "uvcuda_napi_ext.h"

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
THROWER(uvn_throw_type, E_TYPE, "ERR_INVALID_ARG_TYPE")
THROWER(uvn_throw_this, E_TYPE, "ERR_INVALID_THIS")
THROWER(uvn_throw_value, E_TYPE, "ERR_INVALID_ARG_VALUE")
THROWER(uvn_throw_range, E_RANGE, "ERR_OUT_OF_RANGE")
THROWER(uvn_throw_state, E_PLAIN, "ERR_INVALID_STATE")
#undef THROWER

static napi_value throw_fixed(napi_env env, int kind, const char *code,
                              const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  throw_coded(env, kind, code, fmt, ap);
  va_end(ap);
  return NULL;
}

napi_value uvn_throw_illegal_constructor(napi_env env, const char *use) {
  return throw_fixed(env, E_TYPE, "ERR_ILLEGAL_CONSTRUCTOR", "Illegal constructor: use %s",
                     use);
}

/* Node core's error for a class called without `new`. */
napi_value uvn_throw_construct_call(napi_env env, const char *cls) {
  return throw_fixed(env, E_TYPE, "ERR_CONSTRUCT_CALL_REQUIRED",
                     "Class constructor %s cannot be invoked without `new`", cls);
}

static void set_errno(napi_env env, napi_value err, int e) {
  napi_value num;
  if (napi_create_int32(env, e, &num) == napi_ok)
    napi_set_named_property(env, err, "errno", num);
}

napi_value uvn_throw_closed(napi_env env, const char *what) {
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

napi_value uvn_throw_stale(napi_env env, const char *what, int ordinal) {
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

napi_value uvn_throw_uv(napi_env env, int err) {
  uvcuda_napi_throw(env, err);
  return NULL;
}

napi_value uvn_throw_cu(napi_env env, CUresult r) {
  return uvn_throw_uv(env, UVCUDA_ECUDA(r));
}

napi_value uvn_reject_thrown(napi_env env, napi_value ret) {
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

napi_value uvn_throw_value_shown(napi_env env, const char *head, napi_value v) {
  char16_t *msg;
  struct uvn_shown shown;
  napi_value text;
  size_t i, hn;
  uvn_show_string(env, v, &shown);
  /* The message in UTF-16, as the value may hold a lone surrogate (UTF-8
   * cannot); head is ASCII. */
  hn = strlen(head);
  if ((msg = malloc((hn + shown.n) * sizeof(*msg) + 1)) == NULL)
    return uvn_throw_value(env, "%s(out of memory)", head);
  for (i = 0; i < hn; i++) msg[i] = (char16_t)(unsigned char)head[i];
  memcpy(msg + hn, shown.u, shown.n * sizeof(*msg));
  if (napi_create_string_utf16(env, msg, hn + shown.n, &text) == napi_ok)
    throw_text(env, E_TYPE, "ERR_INVALID_ARG_VALUE", text);
  free(msg);
  return NULL;
}

napi_value uvn_throw_one_of(napi_env env, napi_value v, const char *what,
                        const char *const *names, size_t n) {
  char list[512], head[640];
  size_t i, o = 0;
  list[0] = '\0';
  for (i = 0; i < n && o < sizeof(list); i++)
    o += (size_t)snprintf(list + o, sizeof(list) - o, "%s'%s'", i ? ", " : "", names[i]);
  snprintf(head, sizeof(head), "The %s '%s' must be one of: %s. Received ",
           strchr(what, '.') != NULL ? "property" : "argument", what, list);
  return uvn_throw_value_shown(env, head, v);
}
