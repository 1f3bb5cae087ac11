/* Destruction of CUDA objects on a process-wide thread, in FIFO order (see
 * reaper.c: cuMemFree and cuModuleUnload wait for the device; the thread
 * outlives every env, the addon being kept resident). Each item names the
 * device ordinal and the generation (devstate.h) its object belongs to: an
 * object of a generation that a reset ended is gone already, and its handle
 * is never passed to the driver again. Any thread. */
#ifndef UVCUDA_NODE_REAPER_H
#define UVCUDA_NODE_REAPER_H

#include <stdint.h>

#include "cu.h"

enum { REAP_MEMORY = 1, REAP_MODULE, REAP_STREAM, REAP_CTX_RELEASE, REAP_HOST_FREE };

void reap_memory(int ordinal, uint64_t gen, CUcontext ctx, CUdeviceptr ptr);
void reap_module(int ordinal, uint64_t gen, CUcontext ctx, CUmodule mod);
void reap_stream(int ordinal, uint64_t gen, CUcontext ctx, CUstream stream);
/* cuDevicePrimaryCtxRelease, after everything queued before it. */
void reap_ctx_release(int ordinal, CUdevice dev);
/* free(host) once the work queued so far on `stream` (NULL: in all of ctx)
 * is done: a buffer the GPU may still read or write (a copy whose promise
 * was abandoned at env teardown). Without a context (ordinal -1, ctx NULL)
 * the buffer is left allocated: nothing says when the GPU is done with it. */
void reap_host_free(int ordinal, uint64_t gen, CUcontext ctx, CUstream stream,
                    void *host);

#endif
