/* The one table of CUDA driver entry points for everything in this tree
 * that calls the driver beyond the library itself: the bindings (Node,
 * Python), the tests, the bench and the examples. Its entries are
 * lib/cuda-api.h's lists (the library's own, UVCUDA_CU_PFNS_LIB, and what
 * the others add, UVCUDA_CU_PFNS_SUPPORT and _SUPPORT_OPTIONAL), so a name,
 * its ABI version and its prototype are written once, in cuda-api.h. Each
 * is resolved through the public uvcuda_driver_symbol, as any user of
 * uvcuda would: no CUDA Toolkit is needed to build this. */
#ifndef UVCUDA_SUPPORT_DRVTAB_H
#define UVCUDA_SUPPORT_DRVTAB_H

#include "cuda-api.h"

/* A member per entry, named as the driver names it: tab.cuStreamQuery. */
typedef struct drvtab_s {
#define DRVTAB_FIELD(name, ver, params) PFN_##name##_v##ver name;
  UVCUDA_CU_PFNS_LIB(DRVTAB_FIELD)
  UVCUDA_CU_PFNS_SUPPORT(DRVTAB_FIELD)
  UVCUDA_CU_PFNS_SUPPORT_OPTIONAL(DRVTAB_FIELD)
#undef DRVTAB_FIELD
} drvtab_t;

/* What did not resolve: the first required entry (the error returned),
 * and the first optional one (left NULL). */
typedef struct drvtab_miss_s {
  const char *name;
  int version, err;
  const char *opt_name;
  int opt_version, opt_err;
} drvtab_miss_t;

/* Loads the driver (uvcuda_driver_load) and resolves every entry into *t.
 * Returns 0, the driver's load error, or the uvcuda error of the first
 * required entry that did not resolve (miss says which; miss may be
 * NULL). Optional entries the driver lacks are NULL. Any thread. */
int drvtab_resolve(drvtab_t *t, drvtab_miss_t *miss);

#endif
