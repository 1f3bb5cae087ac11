#ifndef CUDA_API_OWN_H
#define CUDA_API_OWN_H

#include <stddef.h>
#include <stdint.h>

struct cuda_api_sizes {
  size_t cuuint32, cuuint64, deviceptr, device, result, driver_table;
  /* CUctxCreateParams: its size and its members' offsets (the one struct
   * cuda-api.h lays out; the self-test cannot declare it twice). */
  size_t ctx_params, ctx_params_affinity, ctx_params_naffinity, ctx_params_cig;
  uintptr_t stream_legacy, stream_per_thread;
  long long success, unknown;
};

/* Filled by own.c, which includes only lib/cuda-api.h (and driver.h). */
void cuda_api_own_sizes(struct cuda_api_sizes *s);
/* real.c: how many PFN list entries were checked against cudaTypedefs.h. */
int cuda_api_real_pfns(void);

#endif
