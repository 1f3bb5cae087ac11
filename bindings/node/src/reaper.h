/* Destruction of CUDA objects on a process-wide thread, in FIFO order (see
 * reaper.c: cuMemFree and cuModuleUnload wait for the device; the thread
 * outlives every env, the addon being kept resident). Any thread. */
#ifndef UVCUDA_NODE_REAPER_H
#define UVCUDA_NODE_REAPER_H

#include "cu.h"

enum { REAP_MEMORY = 1, REAP_MODULE, REAP_STREAM, REAP_CTX_RELEASE };

void reap_memory(CUcontext ctx, CUdeviceptr ptr);
void reap_module(CUcontext ctx, CUmodule mod);
void reap_stream(CUcontext ctx, CUstream stream);
/* cuDevicePrimaryCtxRelease, after everything queued before it. */
void reap_ctx_release(CUdevice dev);

#endif
