/* libFuzzer target over the lifecycle fuzzer's core: each input byte is one
 * step (the action), the first eight bytes seed the random choices inside a
 * step. One uvcuda loop on the fuzzing thread, simulated driver with two
 * devices. See test/fuzz/README.md for how to build and run it. */
#include <stdlib.h>
#include <string.h>

#include "lifecycle.h"

CUcontext fuzz_ctx1;

static void setup(void) {
  CUdevice d1;
  setenv("SIMCUDA_DEVICES", "2", 1);
  setenv("UVCUDA_FUZZ_QUIET", "1", 1);
  if (tu_setup(0) != 0 || !tu_is_simulated()) abort(); /* UVCUDA_LIBCUDA=sim */
  if (tu.cuDeviceGet(&d1, 1) == CUDA_SUCCESS)
    tu.cuDevicePrimaryCtxRetain(&fuzz_ctx1, d1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int ready;
  uint64_t seed = 0;
  struct fz *z;
  size_t i;
  if (!ready) {
    setup();
    ready = 1;
  }
  for (i = 0; i < size && i < 8; i++) seed = seed << 8 | data[i];
  z = fuzz_new(seed, fuzz_ctx1 ? 2 : 1);
  if (z == NULL) abort();
  for (; i < size; i++) fuzz_step(z, data[i]);
  if (fuzz_finish(z) != 0) abort(); /* an invariant broke: libFuzzer keeps the input */
  fuzz_free(z);
  return 0;
}
