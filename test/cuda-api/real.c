/* lib/cuda-api.h after the toolkit's <cuda.h>, as a program that has the
 * toolkit may include it: the toolkit's declarations are used, and each
 * entry of our PFN lists must name a typedef cudaTypedefs.h has (the same
 * name and ABI version) with the prototype we list. driver.h builds this
 * way too. */
#include <cuda.h>

#include "driver.h"

#include "own.h"

#define CHECK_PFN(name, ver, params)                                        \
  _Static_assert(__builtin_types_compatible_p(PFN_##name##_v##ver,          \
                                              CUresult (CUDAAPI *) params), \
                 "PFN_" #name "_v" #ver " differs from cudaTypedefs.h");
UVCUDA_CU_PFNS_LIB(CHECK_PFN)
UVCUDA_CU_PFNS_SUPPORT(CHECK_PFN)
UVCUDA_CU_PFNS_SUPPORT_OPTIONAL(CHECK_PFN)
UVCUDA_CU_PFNS_SIM(CHECK_PFN)

#define COUNT_PFN(name, ver, params) +1
int cuda_api_real_pfns(void) {
  return 0 UVCUDA_CU_PFNS_LIB(COUNT_PFN) UVCUDA_CU_PFNS_SUPPORT(COUNT_PFN)
         UVCUDA_CU_PFNS_SUPPORT_OPTIONAL(COUNT_PFN) UVCUDA_CU_PFNS_SIM(COUNT_PFN);
}
