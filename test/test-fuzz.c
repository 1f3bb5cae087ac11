/* Fixed-seed lifecycle fuzzing: 100,000 operations over 1-4 loops on their
 * own threads, against the simulated driver with two devices (the second
 * may fault). Args: [seed] [total ops] [max loops]; CI runs seed 1,
 * 100,000 ops, up to 4 loops, in every pass of test/ci.sh. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lifecycle.h"

CUcontext fuzz_ctx1;
static uint64_t seed = 1, total = 100000;
static int max_loops = 4;

typedef struct {
  uint64_t seed, ops;
  int failed;
  char what[160];
} job_t;

static void *run(void *arg) {
  job_t *j = arg;
  struct fz *z;
  uint64_t k;
  tu.cuCtxSetCurrent(tu_ctx);
  z = fuzz_new(j->seed, fuzz_ctx1 ? 2 : 1);
  if (z == NULL) {
    j->failed = 1;
    return NULL;
  }
  for (k = 0; k < j->ops; k++) fuzz_step(z, (unsigned)fuzz_rand(z));
  j->failed = fuzz_finish(z);
  if (j->failed) snprintf(j->what, sizeof(j->what), "%s", fuzz_what(z));
  fuzz_free(z);
  return NULL;
}

static void fuzz_threads(void **state) {
  int nthreads = (int)(uintptr_t)*state, i;
  pthread_t t[4];
  if (nthreads > max_loops) skip();
  tu_backtrace_on_crash(); /* a crash on a loop thread, not cmocka's longjmp */
  job_t j[4];
  for (i = 0; i < nthreads; i++) {
    j[i].seed = seed * 16 + (uint64_t)(nthreads * 4 + i);
    j[i].ops = max_loops == 1 ? total
                              : total / 10 * (nthreads == 4 ? 4 : 2) / (uint64_t)nthreads;
    j[i].failed = 0;
    j[i].what[0] = 0;
    assert_int_equal(pthread_create(&t[i], NULL, run, &j[i]), 0);
  }
  for (i = 0; i < nthreads; i++) {
    pthread_join(t[i], NULL);
    if (j[i].failed) fail_msg("seed %llu: %s", (unsigned long long)j[i].seed, j[i].what);
  }
}

int main(int argc, char **argv) {
  /* 1, 2, 3 loops take 2/10 of the ops each, 4 loops 4/10: 100,000 in all. */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_prestate(fuzz_threads, (void *)1),
      cmocka_unit_test_prestate(fuzz_threads, (void *)2),
      cmocka_unit_test_prestate(fuzz_threads, (void *)3),
      cmocka_unit_test_prestate(fuzz_threads, (void *)4),
  };
  CUdevice d1;
  int rc;
  if (argc > 1) seed = strtoull(argv[1], NULL, 0);
  if (argc > 2) total = strtoull(argv[2], NULL, 0);
  if (argc > 3) max_loops = atoi(argv[3]);
  setenv("SIMCUDA_DEVICES", "2", 1);
  if ((rc = tu_setup(0)) != 0) return rc;
  if (!tu_is_simulated()) return 77; /* faults would poison a real GPU */
  if (tu.cuDeviceGet(&d1, 1) == CUDA_SUCCESS)
    tu.cuDevicePrimaryCtxRetain(&fuzz_ctx1, d1);
  rc = cmocka_run_group_tests_name("fuzz/lifecycle", tests, NULL, NULL);
  tu_teardown();
  return rc;
}
