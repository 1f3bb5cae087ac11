/* See cu.h. */
#include "cu.h"

#include <pthread.h>
#include <string.h>

#include "uvcuda.h"

struct cu_table cu;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int status;

static void resolve(void) {
  void *p;
  int err;

  if ((status = uvcuda_driver_load()) != 0) return;
#define UVCUDA_NODE_CU_RESOLVE(name, ver)                  \
  err = uvcuda_driver_symbol(#name, ver, &p);              \
  if (err != 0) {                                          \
    memset(&cu, 0, sizeof(cu));                            \
    status = err;                                          \
    return;                                                \
  }                                                        \
  memcpy(&cu.name, &p, sizeof(p));
  UVCUDA_NODE_CU(UVCUDA_NODE_CU_RESOLVE)
#undef UVCUDA_NODE_CU_RESOLVE
#define UVCUDA_NODE_CU_OPTIONAL_RESOLVE(name, ver)         \
  if (uvcuda_driver_symbol(#name, ver, &p) == 0)           \
    memcpy(&cu.name, &p, sizeof(p));
  UVCUDA_NODE_CU_OPTIONAL(UVCUDA_NODE_CU_OPTIONAL_RESOLVE)
#undef UVCUDA_NODE_CU_OPTIONAL_RESOLVE
}

int cu_load(void) {
  pthread_once(&once, resolve);
  return status;
}
