/* Spare CUDA events of one context, for the spin of the host-function
 * modes (an event query sees short work finish tens of µs before the host
 * function runs). Guarded by the owner's lock. */
#ifndef UVCUDA_EVPOOL_H
#define UVCUDA_EVPOOL_H

#include "driver.h"

struct uvcuda__evpool {
  CUevent *ev;
  unsigned n, cap;
};

/* An event from the pool or a new one (the pool's context is current);
 * NULL if none can be made: the caller spins without one. */
CUevent uvcuda__evpool_get(struct uvcuda__evpool *p);
/* Keeps ev for reuse. */
void uvcuda__evpool_put(struct uvcuda__evpool *p, CUevent ev);

#endif
