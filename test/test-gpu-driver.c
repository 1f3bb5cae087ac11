/* The `gpu` suite's loader checks, on the real driver: every entry of the
 * table resolves at its ABI version, memops are probed as present, and the
 * host-task sync modes are reported as the driver version says. Exit 77
 * (skipped) where there is no real driver or device. */
#include "tu.h"

#include <stdio.h>
#include <string.h>

#include "driver.h"
#include "simprobe.h"

static void table_resolves(void **state) {
  int i;
  void *p;
  (void)state;
  for (i = 0; i < uvcuda__driver_table_size(); i++) {
    const char *n = uvcuda__driver_table_name(i);
    int v = uvcuda__driver_table_version(i);
    if (strcmp(n, "cuLaunchHostFunc_v2") == 0) {
      assert_int_equal(uvcuda__driver_table_resolved(i),
                       uvcuda__drv.version >= 13020);
      continue;
    }
    if (!uvcuda__driver_table_resolved(i)) fail_msg("%s did not resolve", n);
    TU_OK(uvcuda_driver_symbol(n, v, &p));
    assert_non_null(p);
    fprintf(stderr, "resolved %-28s at %5d\n", n, v);
  }
}

static void capabilities(void **state) {
  uvcuda_driver_info_t info;
  (void)state;
  TU_OK(uvcuda_driver_info(&info));
  fprintf(stderr, "driver %s version %d devices %d memops32 %d memops64 %d host_task_sync %d\n",
          info.path, info.driver_version, info.device_count, info.memops32,
          info.memops64, info.host_task_sync);
  assert_int_equal(support_driver_is_simulation(), 0);
  assert_true(info.device_count >= 1);
  assert_int_equal(info.memops64, 1);
  assert_int_equal(info.memops32, 1);
  assert_int_equal(info.host_task_sync, info.driver_version >= 13020);
  assert_string_equal(uvcuda_err_name(UVCUDA_ECUDA(700)), "CUDA_ERROR_ILLEGAL_ADDRESS");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(table_resolves),
      cmocka_unit_test(capabilities),
  };
  int rc = tu_setup(1);
  if (rc != 0) return rc;
  rc = cmocka_run_group_tests_name("gpu/driver", tests, NULL, NULL);
  tu_teardown();
  return rc;
}
