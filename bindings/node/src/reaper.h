/* Destruction of CUDA objects on a process-wide thread, in FIFO order (see
 * reaper.c: cuMemFree and cuModuleUnload wait for the device; the thread
 * outlives every env, the addon being kept resident). Each item names the
 * device ordinal and the generation (devstate.h) its object belongs to: an
 * object of a generation that a reset ended is gone already, and its handle
 * is never passed to the driver again. Any thread. */
#ifndef UVN_REAPER_H
#define UVN_REAPER_H

#include <stdint.h>

#include "driver.h"

/* Called on the reaper thread; `current`: the object's generation is still
 * the device's (ctx is then current on the thread), else a reset ended it
 * and its CUDA objects are gone. */
typedef void (*uvn_reap_fn)(void *arg, int current);

void uvn_reap_memory(int ordinal, uint64_t gen, CUcontext ctx, CUdeviceptr ptr);
void uvn_reap_module(int ordinal, uint64_t gen, CUcontext ctx, CUmodule mod);
void uvn_reap_stream(int ordinal, uint64_t gen, CUcontext ctx, CUstream stream);
/* cuDevicePrimaryCtxRelease, after everything queued before it. */
void uvn_reap_ctx_release(int ordinal, CUdevice dev);
/* fn(arg, current) on the reaper thread, in FIFO order with the rest,
 * holding the device's reset lock for reading; with `wait`, once the work
 * queued so far on `stream` (NULL: in all of ctx) is done (a buffer the GPU
 * may still read or write). -1 (fn never called) when out of memory, or
 * asked to wait without a context (nothing says when the GPU is done). */
int uvn_reap_call(int ordinal, uint64_t gen, CUcontext ctx, int wait, CUstream stream,
                  uvn_reap_fn fn, void *arg);

#endif
