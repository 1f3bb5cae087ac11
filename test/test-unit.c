/* The `unit` suite: no driver at all (UVCUDA_LIBCUDA points at a file that
 * does not exist). Errors, options, and how every entry point behaves when
 * the driver is missing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "simprobe.h"
#include "uvcuda.h"

static const int own_codes[] = {
#define CODE(name, val, msg) UVCUDA_##name,
    UVCUDA_ERRNO_MAP(CODE)
#undef CODE
};

/* The version lives in meson.build (the soname, uvcuda.pc, the CMake
 * package) and in uvcuda.h's macros (package.json's is checked against
 * the addon's by the Node suite): one bump must change both. */
static void header_version_is_the_projects(void **state) {
  char v[32];
  (void)state;
  snprintf(v, sizeof(v), "%d.%d.%d", UVCUDA_VERSION_MAJOR, UVCUDA_VERSION_MINOR,
           UVCUDA_VERSION_PATCH);
  assert_string_equal(v, UVCUDA_PROJECT_VERSION);
}

static void every_code_has_name_and_message(void **state) {
  unsigned i, j;
  (void)state;
  for (i = 0; i < sizeof(own_codes) / sizeof(own_codes[0]); i++) {
    const char *n = uvcuda_err_name(own_codes[i]);
    const char *m = uvcuda_strerror(own_codes[i]);
    assert_non_null(n);
    assert_non_null(m);
    assert_true(strncmp(n, "UVCUDA_E", 8) == 0);
    assert_true(strlen(m) > 10);
    assert_true(own_codes[i] < 0);
    for (j = 0; j < i; j++) {
      assert_int_not_equal(own_codes[i], own_codes[j]);
      assert_string_not_equal(n, uvcuda_err_name(own_codes[j]));
    }
    /* Never confused with libuv's or CUDA's codes. */
    assert_int_equal(uvcuda_cuda_result(own_codes[i]), 0);
    {
      char buf[64];
      assert_string_not_equal(uv_err_name_r(own_codes[i], buf, sizeof(buf)), n);
    }
  }
  assert_string_equal(uvcuda_err_name(UVCUDA_ENODRIVER), "UVCUDA_ENODRIVER");
  assert_string_equal(uvcuda_err_name(UVCUDA_ECAPTURING), "UVCUDA_ECAPTURING");
}

static void libuv_codes_pass_through(void **state) {
  (void)state;
  assert_int_equal(UVCUDA_EINVAL, UV_EINVAL);
  assert_int_equal(UVCUDA_EBUSY, UV_EBUSY);
  assert_int_equal(UVCUDA_ECANCELED, UV_ECANCELED);
  assert_int_equal(UVCUDA_ENOMEM, UV_ENOMEM);
  assert_string_equal(uvcuda_err_name(UV_EBUSY), "EBUSY");
  assert_string_equal(uvcuda_strerror(UV_ECANCELED), uv_strerror(UV_ECANCELED));
  /* Unknown codes: libuv's text, from a per-thread buffer (no leak). */
  assert_non_null(strstr(uvcuda_err_name(-12345), "12345"));
  assert_non_null(uvcuda_strerror(-12345));
  /* api.md: a positive number gets libuv's answer too. */
  assert_non_null(strstr(uvcuda_err_name(10000), "10000"));
  assert_non_null(strstr(uvcuda_strerror(10000), "Unknown system error"));
  assert_string_equal(uvcuda_err_name(0), "OK");
  assert_non_null(uvcuda_strerror(0));
}

/* printf("%s: %s", uvcuda_err_name(e), uvcuda_strerror(e)): the two
 * results, and results for other codes, must not share storage. */
static void names_and_messages_do_not_share_storage(void **state) {
  const char *n, *m, *n2, *un, *um;
  (void)state;
  n = uvcuda_err_name(UVCUDA_EBUSY);
  m = uvcuda_strerror(UVCUDA_EBUSY);
  n2 = uvcuda_err_name(UVCUDA_EINVAL);
  assert_string_equal(n, "EBUSY");
  assert_string_equal(m, uv_strerror(UV_EBUSY));
  assert_string_equal(n2, "EINVAL");
  assert_string_equal(uvcuda_strerror(UVCUDA_ENOMEM), uv_strerror(UV_ENOMEM));
  assert_string_equal(n, "EBUSY");
  assert_string_equal(m, uv_strerror(UV_EBUSY));
  /* Codes libuv does not know: a name buffer and a message buffer. */
  un = uvcuda_err_name(-12345);
  um = uvcuda_strerror(-12345);
  assert_ptr_not_equal(un, um);
  assert_non_null(strstr(un, "12345"));
  assert_non_null(strstr(um, "12345"));
  assert_string_equal(uvcuda_err_name(UVCUDA_ECANCELED), "ECANCELED");
  assert_non_null(strstr(un, "12345"));
}

static void cuda_results_round_trip(void **state) {
  int r;
  (void)state;
  for (r = 1; r < 10000; r++) {
    int e = UVCUDA_ECUDA(r);
    assert_true(e < 0);
    assert_int_equal(uvcuda_cuda_result(e), r);
  }
  assert_int_equal(uvcuda_cuda_result(0), 0);
  assert_int_equal(uvcuda_cuda_result(UV_EINVAL), 0);
  /* A result CUDA 13.0 does not name (a newer driver's, say): its number
   * in the name and the message, not a generic "CUDA_ERROR". */
  assert_string_equal(uvcuda_err_name(UVCUDA_ECUDA(5000)), "CUDA_ERROR_5000");
  assert_non_null(strstr(uvcuda_strerror(UVCUDA_ECUDA(5000)), "5000"));
  assert_string_equal(uvcuda_err_name(UVCUDA_ECUDA(9999)), "CUDA_ERROR_9999");
  assert_string_equal(uvcuda_err_name(UVCUDA_ECUDA(700)), "CUDA_ERROR_ILLEGAL_ADDRESS");
  assert_int_equal(uvcuda_cuda_result(UVCUDA_ECUDA_BASE), 0);
  assert_int_equal(uvcuda_cuda_result(UVCUDA_ECUDA(10000)), 0);
  /* No driver loaded: names from the header's list, messages for the
   * usual failures to load or initialise, generic text beyond. */
  assert_string_equal(uvcuda_err_name(UVCUDA_ECUDA(700)),
                      "CUDA_ERROR_ILLEGAL_ADDRESS");
  assert_string_equal(uvcuda_err_name(UVCUDA_ECUDA(100)), "CUDA_ERROR_NO_DEVICE");
  assert_string_equal(uvcuda_strerror(UVCUDA_ECUDA(100)),
                      "no CUDA-capable device is detected");
  assert_string_equal(uvcuda_err_name(UVCUDA_ECUDA(9998)), "CUDA_ERROR_9998");
  assert_non_null(uvcuda_strerror(UVCUDA_ECUDA(700)));
  assert_non_null(uvcuda_strerror(UVCUDA_ECUDA(9998)));
}

static void completion_names_round_trip(void **state) {
  uvcuda_completion_t c, out;
  (void)state;
  for (c = UVCUDA_COMPLETION_DEFAULT; c <= UVCUDA_COMPLETION_POLL; c++) {
    const char *n = uvcuda_completion_name(c);
    assert_non_null(n);
    assert_int_equal(uvcuda_completion_parse(n, &out), 0);
    assert_int_equal(out, c);
  }
  assert_string_equal(uvcuda_completion_name(UVCUDA_COMPLETION_AUTO), "auto");
  assert_string_equal(uvcuda_completion_name(UVCUDA_COMPLETION_HOSTFN_SPIN), "hostfn-spin");
  assert_null(uvcuda_completion_name((uvcuda_completion_t)99));
  assert_int_equal(uvcuda_completion_parse("Reactor", &out), UVCUDA_ESTRATEGY);
  assert_int_equal(uvcuda_completion_parse("", &out), UVCUDA_ESTRATEGY);
  assert_int_equal(uvcuda_completion_parse(NULL, &out), UVCUDA_EINVAL);
  assert_int_equal(uvcuda_completion_parse("auto", NULL), UVCUDA_EINVAL);
}

/* Options are validated before the driver is loaded, so without a driver a
 * bad option still gives its own error and a good one ENODRIVER. */
static int init_with(uvcuda_options_t *o) {
  uv_loop_t loop;
  uvcuda_loop_t ul;
  int rc;
  uv_loop_init(&loop);
  rc = uvcuda_loop_init(&loop, &ul, o);
  assert_null(ul.internal_);
  uv_loop_close(&loop);
  return rc;
}

static void options_are_validated(void **state) {
  uvcuda_options_t o;
  (void)state;
  uvcuda_options_init(&o);
  assert_int_equal(o.completion, UVCUDA_COMPLETION_DEFAULT);
  assert_int_equal(o.spin_budget_us, -1);
  assert_int_equal(init_with(&o), UVCUDA_ENODRIVER);
  assert_int_equal(init_with(NULL), UVCUDA_ENODRIVER);
  o.spin_budget_us = -2;
  assert_int_equal(init_with(&o), UVCUDA_EINVAL);
  o.spin_budget_us = 1000001;
  assert_int_equal(init_with(&o), UVCUDA_EINVAL);
  o.spin_budget_us = 0;
  assert_int_equal(init_with(&o), UVCUDA_ENODRIVER);
  uvcuda_options_init(&o);
  o.probe_interval_us = 2001; /* faults must be seen within a few ms */
  assert_int_equal(init_with(&o), UVCUDA_EINVAL);
  o.probe_interval_us = 49;
  assert_int_equal(init_with(&o), UVCUDA_EINVAL);
  uvcuda_options_init(&o);
  o.completion = (uvcuda_completion_t)42;
  assert_int_equal(init_with(&o), UVCUDA_EINVAL);
  uvcuda_options_init(&o);
  o.flags = 0x80;
  assert_int_equal(init_with(&o), UVCUDA_EINVAL);
  uvcuda_options_init(&o);
  o.reactor_sleep_max_us = 0;
  assert_int_equal(init_with(&o), UVCUDA_EINVAL);
  uvcuda_options_init(&o);
  o.reactor_backoff_pct = 0; /* 1..100 */
  assert_int_equal(init_with(&o), UVCUDA_EINVAL);
  o.reactor_backoff_pct = 101;
  assert_int_equal(init_with(&o), UVCUDA_EINVAL);
}

static void environment_is_validated(void **state) {
  uvcuda_options_t o;
  (void)state;
  uvcuda_options_init(&o);
  setenv("UVCUDA_COMPLETION", "bogus", 1);
  assert_int_equal(init_with(&o), UVCUDA_ESTRATEGY);
  o.completion = UVCUDA_COMPLETION_HOSTFN; /* the option wins */
  assert_int_equal(init_with(&o), UVCUDA_ENODRIVER);
  unsetenv("UVCUDA_COMPLETION");
  uvcuda_options_init(&o);
  setenv("UVCUDA_SPIN_BUDGET_US", "12x", 1);
  assert_int_equal(init_with(&o), UVCUDA_EINVAL);
  setenv("UVCUDA_SPIN_BUDGET_US", "-1", 1);
  assert_int_equal(init_with(&o), UVCUDA_EINVAL);
  /* Digits only: whitespace or a sign on either side is refused alike. */
  setenv("UVCUDA_SPIN_BUDGET_US", " 5", 1);
  assert_int_equal(init_with(&o), UVCUDA_EINVAL);
  setenv("UVCUDA_SPIN_BUDGET_US", "5 ", 1);
  assert_int_equal(init_with(&o), UVCUDA_EINVAL);
  setenv("UVCUDA_SPIN_BUDGET_US", "+5", 1);
  assert_int_equal(init_with(&o), UVCUDA_EINVAL);
  o.spin_budget_us = 5; /* the option wins */
  assert_int_equal(init_with(&o), UVCUDA_ENODRIVER);
  setenv("UVCUDA_SPIN_BUDGET_US", "7", 1);
  o.spin_budget_us = -1;
  assert_int_equal(init_with(&o), UVCUDA_ENODRIVER);
  unsetenv("UVCUDA_SPIN_BUDGET_US");
}

/* uvcuda_options_resolve: what uvcuda_loop_init would run with, no driver
 * needed; the same errors as uvcuda_loop_init's for the same options. */
static void options_resolve_as_loop_init(void **state) {
  uvcuda_options_t o, r;
  (void)state;
  unsetenv("UVCUDA_COMPLETION");
  unsetenv("UVCUDA_SPIN_BUDGET_US");
  unsetenv("UVCUDA_ADAPTIVE");
  assert_int_equal(uvcuda_options_resolve(NULL, &r), 0);
  assert_int_equal(r.completion, UVCUDA_COMPLETION_AUTO);
  assert_int_equal(r.spin_budget_us, 20);
  assert_int_equal(r.probe_interval_us, 1000);
  assert_int_equal(r.reactor_spin_us, 0);
  assert_int_equal(r.reactor_yield_us, 0);
  assert_int_equal(r.reactor_sleep_max_us, 2000);
  assert_int_equal(r.reactor_backoff_pct, 5);
  assert_int_equal(r.flags, UVCUDA_OPT_ADAPTIVE); /* on by default */
  setenv("UVCUDA_COMPLETION", "poll", 1);
  setenv("UVCUDA_SPIN_BUDGET_US", "7", 1);
  setenv("UVCUDA_ADAPTIVE", "1", 1);
  uvcuda_options_init(&o);
  o.flags = UVCUDA_OPT_LATENCY_HISTOGRAM;
  assert_int_equal(uvcuda_options_resolve(&o, &o), 0); /* in place */
  assert_int_equal(o.completion, UVCUDA_COMPLETION_POLL);
  assert_int_equal(o.spin_budget_us, 7);
  assert_int_equal(o.flags, UVCUDA_OPT_LATENCY_HISTOGRAM | UVCUDA_OPT_ADAPTIVE);
  uvcuda_options_init(&o);
  o.completion = UVCUDA_COMPLETION_HOSTFN; /* the options win */
  o.spin_budget_us = 0;
  o.flags = UVCUDA_OPT_NO_ADAPTIVE;
  assert_int_equal(uvcuda_options_resolve(&o, &r), 0);
  assert_int_equal(r.completion, UVCUDA_COMPLETION_HOSTFN);
  assert_int_equal(r.spin_budget_us, 0);
  assert_int_equal(r.flags, UVCUDA_OPT_NO_ADAPTIVE);
  /* Errors as uvcuda_loop_init's, *out untouched. */
  memset(&r, 0x5a, sizeof(r));
  setenv("UVCUDA_COMPLETION", "bogus", 1);
  assert_int_equal(uvcuda_options_resolve(NULL, &r), UVCUDA_ESTRATEGY);
  assert_int_equal(init_with(NULL), UVCUDA_ESTRATEGY);
  unsetenv("UVCUDA_COMPLETION");
  uvcuda_options_init(&o);
  o.probe_interval_us = 49;
  assert_int_equal(uvcuda_options_resolve(&o, &r), UVCUDA_EINVAL);
  assert_int_equal(init_with(&o), UVCUDA_EINVAL);
  uvcuda_options_init(&o);
  o.flags = UVCUDA_OPT_ADAPTIVE | UVCUDA_OPT_NO_ADAPTIVE;
  assert_int_equal(uvcuda_options_resolve(&o, &r), UVCUDA_EINVAL);
  assert_int_equal(r.spin_budget_us, 0x5a5a5a5a);
  assert_int_equal(uvcuda_options_resolve(NULL, NULL), UVCUDA_EINVAL);
  unsetenv("UVCUDA_SPIN_BUDGET_US");
  unsetenv("UVCUDA_ADAPTIVE");
}

static void missing_driver_is_reported(void **state) {
  uvcuda_driver_info_t info;
  void *p = (void *)1;
  const char *msg;
  (void)state;
  assert_int_equal(uvcuda_driver_load(), UVCUDA_ENODRIVER);
  assert_int_equal(uvcuda_driver_load(), UVCUDA_ENODRIVER); /* cached */
  msg = uvcuda_driver_dlerror();
  assert_non_null(msg);
  assert_non_null(strstr(msg, "dlopen"));
  assert_int_equal(uvcuda_driver_info(&info), UVCUDA_ENODRIVER);
  assert_non_null(info.path);
  assert_non_null(strstr(info.path, "nonexistent"));
  assert_int_equal(uvcuda_driver_info(NULL), UVCUDA_EINVAL);
  assert_int_equal(uvcuda_driver_symbol("cuInit", 2000, &p), UVCUDA_ENODRIVER);
  assert_null(p);
  assert_int_equal(support_driver_is_simulation(), 0); /* no driver: no */
  /* *pfn is NULL on every error (uvcuda.h), bad arguments included. */
  p = (void *)&p;
  assert_int_equal(uvcuda_driver_symbol(NULL, 2000, &p), UVCUDA_EINVAL);
  assert_null(p);
  p = (void *)&p;
  assert_int_equal(uvcuda_driver_symbol("cuInit", 0, &p), UVCUDA_EINVAL);
  assert_null(p);
  p = (void *)&p;
  assert_int_equal(uvcuda_driver_symbol("cuInit", -1, &p), UVCUDA_EINVAL);
  assert_null(p);
}

static void null_arguments_without_driver(void **state) {
  uvcuda_loop_t ul;
  uvcuda_future_t f;
  uvcuda_stats_t st;
  uv_loop_t loop;
  (void)state;
  memset(&ul, 0, sizeof(ul));
  memset(&f, 0, sizeof(f));
  uv_loop_init(&loop);
  assert_int_equal(uvcuda_loop_init(NULL, &ul, NULL), UVCUDA_EINVAL);
  assert_int_equal(uvcuda_loop_init(&loop, NULL, NULL), UVCUDA_EINVAL);
  assert_int_equal(uvcuda_loop_close(NULL, NULL), UVCUDA_EINVAL);
  assert_int_equal(uvcuda_loop_close(&ul, NULL), UVCUDA_ENOTINIT);
  assert_int_equal(uvcuda_loop_stats(&ul, &st), UVCUDA_ENOTINIT);
  assert_int_equal(uvcuda_loop_stats(NULL, &st), UVCUDA_EINVAL);
  assert_int_equal(uvcuda_loop_stats(&ul, NULL), UVCUDA_EINVAL);
  assert_int_equal(uvcuda_future_init(&ul, &f), UVCUDA_ENOTINIT);
  assert_int_equal(uvcuda_future_init(NULL, &f), UVCUDA_EINVAL);
  assert_int_equal(uvcuda_future_start(&f, NULL, NULL, NULL), UVCUDA_ENOTINIT);
  assert_int_equal(uvcuda_future_close(&f, NULL), UVCUDA_ENOTINIT);
  assert_int_equal(uvcuda_future_state(NULL), UVCUDA_FUTURE_CLOSED);
  /* Never initialised: nothing can be done with it, as with a closed one. */
  assert_int_equal(uvcuda_future_state(&f), UVCUDA_FUTURE_CLOSED);
  assert_int_equal(uvcuda_future_is_active(&f), 0);
  assert_int_equal(uvcuda_loop_completion(NULL), UVCUDA_COMPLETION_DEFAULT);
  assert_int_equal(uvcuda_loop_spin_budget_ns(&ul), 0);
  uvcuda_options_init(NULL); /* harmless */
  uv_loop_close(&loop);
}

/* api.md: the sizes an FFI caller allocates are the header's. */
static void sizes_are_the_headers(void **state) {
  (void)state;
  assert_int_equal(uvcuda_future_size(), sizeof(uvcuda_future_t));
  assert_int_equal(uvcuda_loop_size(), sizeof(uvcuda_loop_t));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(sizes_are_the_headers),
      cmocka_unit_test(header_version_is_the_projects),
      cmocka_unit_test(every_code_has_name_and_message),
      cmocka_unit_test(libuv_codes_pass_through),
      cmocka_unit_test(names_and_messages_do_not_share_storage),
      cmocka_unit_test(cuda_results_round_trip),
      cmocka_unit_test(completion_names_round_trip),
      cmocka_unit_test(options_are_validated),
      cmocka_unit_test(environment_is_validated),
      cmocka_unit_test(options_resolve_as_loop_init),
      cmocka_unit_test(missing_driver_is_reported),
      cmocka_unit_test(null_arguments_without_driver),
  };
  setenv("UVCUDA_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
  unsetenv("UVCUDA_COMPLETION");
  unsetenv("UVCUDA_SPIN_BUDGET_US");
  return cmocka_run_group_tests_name("unit", tests, NULL, NULL);
}
