/* The reaper: destruction that waits for the device, on a thread of its
 * own (see reaper.c). Any thread; needs no GIL. */
#ifndef UVCUDA_PY_REAPER_H
#define UVCUDA_PY_REAPER_H

#include "ext.h"

enum { REAP_MEMORY = 1, REAP_MODULE };

/* cuMemFree / cuModuleUnload of handle, of device d in generation gen, in
 * FIFO order on the reaper thread. */
void reap(int kind, struct dev *d, uint64_t gen, uintptr_t handle);
/* Nothing queued or running now. */
int reap_idle(void);

#endif
