/* A third-party addon on uvcuda/napi.h that calls the helper from the
 * env's finalizers, as napi.h allows: the uvcuda_napi_set_data finalizer
 * and a napi_wrap finalizer that Node runs after it (the object was wrapped
 * before the env's first helper call). Each prints one line at teardown.
 * Also: a napi_wrap finalizer Node runs before it (wrapped later), await_ex
 * with a keep value Node-API can't reference, and helper calls from a
 * thread that is not the env's. */
#include <pthread.h>
#include <stdio.h>

#include "uvcuda/napi.h"

static int marker;

static void report(napi_env env, const char *who) {
  void *data = (void *)1;
  uvcuda_napi_stats_t st;
  napi_value p = NULL;
  napi_status g = uvcuda_napi_get_data(env, &data);
  napi_status s = uvcuda_napi_stats(env, &st);
  napi_status a = uvcuda_napi_await(env, NULL, NULL, NULL, NULL, NULL, &p);
  printf("%s get=%d data=%s closing=%d stats=%d await=%s\n", who, (int)g,
         data == &marker ? "ours" : data == NULL ? "null" : "other",
         uvcuda_napi_closing(env) != 0, (int)s, a == napi_ok ? "ok" : "refused");
  fflush(stdout);
}

static void data_fin(napi_env env, void *data, void *hint) {
  (void)data, (void)hint;
  report(env, "data-finalizer");
}

static void wrap_fin(napi_env env, void *data, void *hint) {
  (void)data, (void)hint;
  report(env, "wrap-finalizer");
}

/* A wrap made after the helper's state: Node finalizes it before the
 * uvcuda_napi_set_data finalizer, with the instance data still set. Every
 * call must say napi_generic_failure (9) with nothing thrown; set_data
 * must not take the data. */
static void wrap_late_fin(napi_env env, void *data, void *hint) {
  uvcuda_loop_t *ul = (uvcuda_loop_t *)&marker;
  napi_value p = (napi_value)&marker;
  napi_status a, l, c, d;
  bool pending = false, any = false;
  (void)data, (void)hint;
  a = uvcuda_napi_await(env, NULL, NULL, NULL, NULL, NULL, &p);
  napi_is_exception_pending(env, &pending);
  any |= pending;
  l = uvcuda_napi_loop(env, &ul);
  napi_is_exception_pending(env, &pending);
  any |= pending;
  c = uvcuda_napi_configure(env, NULL);
  napi_is_exception_pending(env, &pending);
  any |= pending;
  d = uvcuda_napi_set_data(env, NULL, NULL, NULL);
  printf("late-wrap-finalizer await=%d promise=%s loop=%d ul=%s configure=%d "
         "set_data=%d pending=%d\n", (int)a, p == NULL ? "null" : "set", (int)l,
         ul == NULL ? "null" : "set", (int)c, (int)d, any);
  fflush(stdout);
}

/* A new object wrapped with `fin` as its finalizer. */
static napi_value wrapped(napi_env env, napi_finalize fin) {
  napi_value o;
  napi_create_object(env, &o);
  napi_wrap(env, o, &marker, fin, NULL, NULL);
  return o;
}

static napi_value wrap_late(napi_env env, napi_callback_info info) {
  (void)info;
  return wrapped(env, wrap_late_fin);
}

static napi_value wrap_early(napi_env env, napi_callback_info info) {
  (void)info;
  return wrapped(env, wrap_fin);
}

static napi_value init_data(napi_env env, napi_callback_info info) {
  napi_value p = NULL;
  (void)info;
  if (uvcuda_napi_set_data(env, &marker, data_fin, NULL) != napi_ok) return NULL;
  /* The env's loop context exists from here (the await settles either way). */
  if (uvcuda_napi_await(env, NULL, NULL, NULL, NULL, NULL, &p) != napi_ok) return NULL;
  return p;
}

/* keepPrimitive(v): await_ex keeping v; returns what the call left. */
static napi_value keep_value(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value v, p = (napi_value)&marker, out, x;
  uvcuda_napi_await_t req = {0};
  napi_status s;
  bool pending = false;
  napi_get_cb_info(env, info, &argc, &v, NULL, NULL);
  req.keep = &v;
  req.nkeep = 1;
  s = uvcuda_napi_await_ex(env, &req, &p);
  napi_is_exception_pending(env, &pending);
  if (s == napi_ok) return p;
  if (!pending) { /* the contract: a failed call leaves an exception */
    napi_create_object(env, &out);
    napi_get_boolean(env, p == NULL, &x);
    napi_set_named_property(env, out, "promiseCleared", x);
    return out;
  }
  return NULL; /* the exception propagates */
}

struct off {
  napi_env env;
  napi_status await, loop, configure, stats, get_data, set_data, error, throw_;
  int closing, promise_cleared, data_cleared, loop_cleared, error_cleared;
};

static void *off_thread(void *arg) {
  struct off *o = arg;
  napi_value p = (napi_value)&marker, e = (napi_value)&marker;
  uvcuda_loop_t *ul = (uvcuda_loop_t *)&marker;
  uvcuda_napi_stats_t st;
  void *data = &marker;
  o->await = uvcuda_napi_await(o->env, NULL, NULL, NULL, NULL, NULL, &p);
  o->promise_cleared = p == NULL;
  o->loop = uvcuda_napi_loop(o->env, &ul);
  o->loop_cleared = ul == NULL;
  o->configure = uvcuda_napi_configure(o->env, NULL);
  o->stats = uvcuda_napi_stats(o->env, &st);
  o->get_data = uvcuda_napi_get_data(o->env, &data);
  o->data_cleared = data == NULL;
  o->set_data = uvcuda_napi_set_data(o->env, NULL, NULL, NULL);
  o->error = uvcuda_napi_create_error(o->env, -22, &e);
  o->error_cleared = e == NULL;
  o->throw_ = uvcuda_napi_throw(o->env, -22);
  o->closing = uvcuda_napi_closing(o->env);
  return NULL;
}

static void put_int(napi_env env, napi_value o, const char *k, int v) {
  napi_value x;
  napi_create_int32(env, v, &x);
  napi_set_named_property(env, o, k, x);
}

/* fromThread(): every helper call made from another thread while this one
 * waits; returns their statuses (napi_generic_failure is 9). */
static napi_value from_thread(napi_env env, napi_callback_info info) {
  struct off o = {0};
  napi_value out;
  uvcuda_napi_stats_t st;
  pthread_t t;
  (void)info;
  /* The env's helper state exists from here, made on this thread. */
  if (uvcuda_napi_stats(env, &st) != napi_ok) return NULL;
  o.env = env;
  if (pthread_create(&t, NULL, off_thread, &o) != 0) return NULL;
  pthread_join(t, NULL);
  napi_create_object(env, &out);
  put_int(env, out, "await", o.await);
  put_int(env, out, "promiseCleared", o.promise_cleared);
  put_int(env, out, "loop", o.loop);
  put_int(env, out, "loopCleared", o.loop_cleared);
  put_int(env, out, "configure", o.configure);
  put_int(env, out, "stats", o.stats);
  put_int(env, out, "getData", o.get_data);
  put_int(env, out, "dataCleared", o.data_cleared);
  put_int(env, out, "setData", o.set_data);
  put_int(env, out, "createError", o.error);
  put_int(env, out, "errorCleared", o.error_cleared);
  put_int(env, out, "throw", o.throw_);
  put_int(env, out, "closing", o.closing != 0);
  return out;
}

/* badSpin(): configure a spin budget out of range, then await: the
 * exception the await leaves (the context is made there). */
static napi_value bad_spin(napi_env env, napi_callback_info info) {
  uvcuda_options_t o;
  napi_value p = NULL, e = NULL;
  (void)info;
  uvcuda_options_init(&o);
  o.spin_budget_us = 2000000;
  if (uvcuda_napi_configure(env, &o) != napi_ok) return NULL;
  if (uvcuda_napi_await(env, NULL, NULL, NULL, NULL, NULL, &p) == napi_ok) return p;
  napi_get_and_clear_last_exception(env, &e);
  return e;
}

NAPI_MODULE_INIT() {
  napi_value f;
  napi_create_function(env, "badSpin", NAPI_AUTO_LENGTH, bad_spin, NULL, &f);
  napi_set_named_property(env, exports, "badSpin", f);
  napi_create_function(env, "wrapLate", NAPI_AUTO_LENGTH, wrap_late, NULL, &f);
  napi_set_named_property(env, exports, "wrapLate", f);
  napi_create_function(env, "wrapEarly", NAPI_AUTO_LENGTH, wrap_early, NULL, &f);
  napi_set_named_property(env, exports, "wrapEarly", f);
  napi_create_function(env, "initData", NAPI_AUTO_LENGTH, init_data, NULL, &f);
  napi_set_named_property(env, exports, "initData", f);
  napi_create_function(env, "keepValue", NAPI_AUTO_LENGTH, keep_value, NULL, &f);
  napi_set_named_property(env, exports, "keepValue", f);
  napi_create_function(env, "fromThread", NAPI_AUTO_LENGTH, from_thread, NULL, &f);
  napi_set_named_property(env, exports, "fromThread", f);
  return exports;
}
