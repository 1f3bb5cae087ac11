/* Event pool: events are reused, never destroyed while their context
 * lives (a pool holds as many as were ever in flight at once). */
#include "evpool.h"

#include <stdlib.h>

CUevent uvcuda__evpool_get(struct uvcuda__evpool *p) {
  CUevent ev;
  if (p->n > 0) return p->ev[--p->n];
  if (uvcuda__drv.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
    return NULL;
  return ev;
}

void uvcuda__evpool_put(struct uvcuda__evpool *p, CUevent ev) {
  if (p->n == p->cap) {
    unsigned cap = p->cap ? p->cap * 2 : 16;
    CUevent *n = realloc(p->ev, cap * sizeof(*n));
    if (n == NULL)
      return; /* out of memory: the event is lost, not freed
                              without its context current */
    p->ev = n;
    p->cap = cap;
  }
  p->ev[p->n++] = ev;
}
