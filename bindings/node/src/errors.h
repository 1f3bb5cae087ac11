/* The errors the addon throws, as Node core's own: a TypeError,
 * RangeError or Error with a `code`, shown as `TypeError [CODE]: message`
 * in its stack and String(err) (uvcuda_napi__show_code). Each thrower
 * throws and returns NULL, for `return uvn_throw_...(env, ...);` in a
 * callback. A method that returns a Promise turns every throw into a
 * rejection (UVN_PROMISE_METHOD). JS thread. */
#ifndef UVN_ERRORS_H
#define UVN_ERRORS_H

#include <node_api.h>
#include <stddef.h>

#include "driver.h"

#define UVN_PRINTF(f, a) __attribute__((format(printf, f, a)))

/* TypeError ERR_INVALID_ARG_TYPE: an argument of the wrong type. */
napi_value uvn_throw_type(napi_env env, const char *fmt, ...) UVN_PRINTF(2, 3);
/* TypeError ERR_INVALID_ARG_VALUE: an argument of the right type that the
 * call does not take. */
napi_value uvn_throw_value(napi_env env, const char *fmt, ...) UVN_PRINTF(2, 3);
/* TypeError ERR_INVALID_THIS: a method or getter called on a wrong
 * receiver, worded as Node core's ('Value of "this" must be of type Blob'). */
napi_value uvn_throw_this(napi_env env, const char *fmt, ...) UVN_PRINTF(2, 3);
/* RangeError ERR_OUT_OF_RANGE. */
napi_value uvn_throw_range(napi_env env, const char *fmt, ...) UVN_PRINTF(2, 3);
/* Error ERR_INVALID_STATE: a detached buffer, a device being reset. */
napi_value uvn_throw_state(napi_env env, const char *fmt, ...) UVN_PRINTF(2, 3);
/* TypeError ERR_ILLEGAL_CONSTRUCTOR: "Illegal constructor: use <use>". */
napi_value uvn_throw_illegal_constructor(napi_env env, const char *use);
/* TypeError ERR_CONSTRUCT_CALL_REQUIRED: class `cls` called without new. */
napi_value uvn_throw_construct_call(napi_env env, const char *cls);
/* TypeError UVCUDA_ECLOSING (errno too): `what` (a class name) is freed,
 * destroyed or unloaded. */
napi_value uvn_throw_closed(napi_env env, const char *what);
/* Error CUDA_ERROR_CONTEXT_IS_DESTROYED: `what` was made before a reset of
 * device `ordinal`. */
napi_value uvn_throw_stale(napi_env env, const char *what, int ordinal);
/* uvcuda's Error for err (uvcuda_napi_throw): code, errno, cudaResult. */
napi_value uvn_throw_uv(napi_env env, int err);
napi_value uvn_throw_cu(napi_env env, CUresult r);
/* TypeError ERR_INVALID_ARG_VALUE: head (ASCII), then the string v as
 * Node's messages show it (util.inspect, cut at 128 UTF-16 units). */
napi_value uvn_throw_value_shown(napi_env env, const char *head, napi_value v);
/* TypeError ERR_INVALID_ARG_VALUE for the string v of argument `what` (a
 * property where `what` has a dot: 'options.completion'), which is none of
 * names[0..n), as Node core's validateOneOf says it: "The argument 'mode'
 * must be one of: 'global', 'relaxed'. Received 'bogus'". */
napi_value uvn_throw_one_of(napi_env env, napi_value v, const char *what,
                            const char *const *names, size_t n);

/* If a JS exception is pending, clears it and returns a promise rejected
 * with it; else returns `ret`. */
napi_value uvn_reject_thrown(napi_env env, napi_value ret);

/* static napi_value name(env, info): impl(env, info) with every throw
 * turned into a rejection. */
#define UVN_PROMISE_METHOD(name, impl)                             \
  static napi_value name(napi_env env, napi_callback_info info) {  \
    return uvn_reject_thrown(env, impl(env, info));                \
  }

#endif
