/* See functions.h. */
#include "functions.h"

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "args.h"
#include "driver.h"
#include "errors.h"
#include "simprobe.h"
#include "show.h"
#include "stats.h"
#include "stream.h"
#include "uvcuda.h"
#include "uvcuda/napi.h"

static void set_bool(napi_env env, napi_value o, const char *k, int b) {
  napi_value v;
  if (napi_get_boolean(env, b != 0, &v) == napi_ok) napi_set_named_property(env, o, k, v);
}

static void set_num(napi_env env, napi_value o, const char *k, double d) {
  napi_value v;
  if (napi_create_double(env, d, &v) == napi_ok) napi_set_named_property(env, o, k, v);
}

static void set_str(napi_env env, napi_value o, const char *k, const char *str) {
  napi_value v;
  if (napi_create_string_utf8(env, str ? str : "", NAPI_AUTO_LENGTH, &v) == napi_ok)
    napi_set_named_property(env, o, k, v);
}

/* driverInfo().simulated: whether the loaded driver is uvcuda's test
 * simulation. Decided here alone. */
static int driver_is_simulation(void) { return support_driver_is_simulation(); }

/* driverInfo(): the loaded driver, or throws UVCUDA_ENODRIVER & co. */
static napi_value driver_info(napi_env env, napi_callback_info info) {
  uvcuda_driver_info_t di;
  napi_value o;
  int err;
  (void)info;
  if (uvn_driver_need(env) != 0) return NULL;
  if ((err = uvcuda_driver_info(&di)) != 0) return uvn_throw_uv(env, err);
  if (napi_create_object(env, &o) != napi_ok) return NULL;
  set_str(env, o, "path", di.path);
  set_num(env, o, "driverVersion", di.driver_version);
  set_num(env, o, "deviceCount", di.device_count);
  set_bool(env, o, "memops32", di.memops32);
  set_bool(env, o, "memops64", di.memops64);
  set_bool(env, o, "hostTaskSync", di.host_task_sync);
  set_bool(env, o, "simulated", driver_is_simulation());
  return o;
}

/* deviceCount(): 0 where the driver says CUDA_ERROR_NO_DEVICE (a count,
 * the usual "how many GPUs?" probe); no driver at all still throws. */
static napi_value device_count(napi_env env, napi_callback_info info) {
  int n = 0, err;
  CUresult r;
  napi_value v;
  (void)info;
  if ((err = uvn_driver_load()) != 0 && err != UVCUDA_ECUDA(CUDA_ERROR_NO_DEVICE))
    return uvn_throw_uv(env, err);
  if (err == 0 && (r = uvn_cu.cuDeviceGetCount(&n)) != CUDA_SUCCESS) {
    if (r != CUDA_ERROR_NO_DEVICE) return uvn_throw_cu(env, r);
    n = 0;
  }
  napi_create_int32(env, n, &v);
  return v;
}

/* configure({ completion, spinBudgetUs, probeIntervalUs, latencyHistogram,
 * adaptive } = {}): each option left out (or undefined) takes its default,
 * as Node core reads an options bag; read with plain gets, in this order. */
struct configure_args {
  int completion;          /* 'default' (what a left-out one is) is taken, unlisted */
  uint32_t spin, probe;    /* UINT32_MAX: left out (-1 in uvcuda_options_t) */
  int histogram, adaptive; /* -1: left out */
};

static const char *const completions[] = {"default", "auto", "reactor", "hostfn",
                                          "hostfn-spin", "hostfn-block", "poll"};

static const struct uvn_arg configure_args[] = {
    {.index = 0, .key = "completion", .type = UVN_ARG_ONE_OF, .optional = 1,
     .name = "options.completion", .offset = offsetof(struct configure_args, completion),
     .names = completions, .nnames = 7, .listed_from = 1},
    {.index = 0, .key = "spinBudgetUs", .type = UVN_ARG_U32, .optional = 1,
     .name = "options.spinBudgetUs", .offset = offsetof(struct configure_args, spin),
     .lo = 0, .hi = 1000000},
    {.index = 0, .key = "probeIntervalUs", .type = UVN_ARG_U32, .optional = 1,
     .name = "options.probeIntervalUs", .offset = offsetof(struct configure_args, probe),
     .lo = 50, .hi = 2000},
    {.index = 0, .key = "latencyHistogram", .type = UVN_ARG_BOOL, .optional = 1,
     .name = "options.latencyHistogram",
     .offset = offsetof(struct configure_args, histogram)},
    {.index = 0, .key = "adaptive", .type = UVN_ARG_BOOL, .optional = 1,
     .name = "options.adaptive", .offset = offsetof(struct configure_args, adaptive)},
};

static napi_value configure(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1] = {NULL};
  struct configure_args a = {UVCUDA_COMPLETION_DEFAULT, UINT32_MAX, UINT32_MAX, -1, -1};
  uvcuda_options_t o;
  napi_valuetype t;
  bool is_array = false;
  char got[160];

  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return NULL;
  uvcuda_options_init(&o);
  /* Left out (or undefined): every option left out, all defaults, as Node
   * core takes an omitted options bag. */
  if (argc < 1 || uvn_arg_is_undefined(env, argv[0])) {
    uvcuda_napi_configure(env, &o); /* throws EBUSY once the loop context is open */
    return NULL;
  }
  /* An array is no options bag (Node core's validateObject). */
  if (napi_typeof(env, argv[0], &t) != napi_ok || t != napi_object ||
      napi_is_array(env, argv[0], &is_array) != napi_ok || is_array)
    return uvn_throw_type(env, "options must be an object, got %s",
                          uvn_show(env, argv[0], got, sizeof(got)));
  if (uvn_args_parse(env, argv, configure_args, UVN_NARGS(configure_args), &a) != 0)
    return NULL;
  o.completion = (uvcuda_completion_t)a.completion;
  if (a.spin != UINT32_MAX) o.spin_budget_us = (int32_t)a.spin;
  if (a.probe != UINT32_MAX) o.probe_interval_us = (int32_t)a.probe;
  if (a.histogram == 1) o.flags |= UVCUDA_OPT_LATENCY_HISTOGRAM;
  if (a.adaptive >= 0) o.flags |= a.adaptive ? UVCUDA_OPT_ADAPTIVE : UVCUDA_OPT_NO_ADAPTIVE;
  uvcuda_napi_configure(env, &o);
  return NULL;
}

/* errorName(errno) / strerror(errno): uvcuda's names for any code, errno an
 * integer of the int32 range (not wrapped or truncated, as
 * util.getSystemErrorName). */
static napi_value err_text(napi_env env, napi_callback_info info, int name) {
  size_t argc = 1;
  napi_value argv[1] = {NULL}, v;
  double d;
  int32_t e;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return NULL;
  if (uvn_arg_number(env, argc < 1 ? NULL : argv[0], "errno", &d) != 0) return NULL;
  if (!(d == floor(d)) || d < INT32_MIN || d > INT32_MAX) {
    char got[160];
    return uvn_throw_range(env, "errno must be an integer in the int32 range, got %s",
                           uvn_show(env, argv[0], got, sizeof(got)));
  }
  e = (int32_t)d;
  napi_create_string_utf8(env, name ? uvcuda_err_name(e) : uvcuda_strerror(e),
                          NAPI_AUTO_LENGTH, &v);
  return v;
}

static napi_value error_name(napi_env env, napi_callback_info info) {
  return err_text(env, info, 1);
}

static napi_value strerror_(napi_env env, napi_callback_info info) {
  return err_text(env, info, 0);
}

#define FUNCTION(name, fn) {name, NULL, fn, NULL, NULL, NULL, napi_default, NULL}

napi_status uvn_functions_define(napi_env env, napi_value exports) {
  const napi_property_descriptor fns[] = {
      FUNCTION("driverInfo", driver_info),
      FUNCTION("deviceCount", device_count),
      FUNCTION("configure", configure),
      FUNCTION("stats", uvn_stats_get),
      FUNCTION("fence", uvn_stream_fence_any),
      FUNCTION("errorName", error_name),
      FUNCTION("strerror", strerror_),
  };
  napi_value v;
  char ver[32];
  napi_status s;
  if ((s = napi_define_properties(env, exports, sizeof(fns) / sizeof(fns[0]), fns)) != napi_ok)
    return s;
  snprintf(ver, sizeof(ver), "%d.%d.%d", UVCUDA_VERSION_MAJOR, UVCUDA_VERSION_MINOR,
           UVCUDA_VERSION_PATCH);
  if ((s = napi_create_string_utf8(env, ver, NAPI_AUTO_LENGTH, &v)) != napi_ok) return s;
  return napi_set_named_property(env, exports, "version", v);
}
