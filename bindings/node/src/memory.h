/* The DeviceMemory class: an allocation on one device, from the
 * stream-ordered allocator where the device has memory pools (freed with
 * cuMemFreeAsync, never waiting for the device), else cuMemAlloc (freed by
 * cuMemFree on the reaper thread). JS thread. */
#ifndef UVN_MEMORY_H
#define UVN_MEMORY_H

#include <node_api.h>
#include <stddef.h>

#include "driver.h"
#include "res.h"

struct uvn_env;
struct uvn_dev;

struct uvn_memory {
  struct uvn_res h;
  CUdeviceptr ptr;
  size_t size;
  int pooled; /* cuMemAllocAsync'ed: freed with cuMemFreeAsync */
};

/* device.alloc(n): a new DeviceMemory of n bytes on the device of
 * `device` (a Device's res), its `device` property device_obj (that
 * Device). Throws and returns NULL. */
napi_value uvn_memory_alloc(napi_env env, struct uvn_res *device, napi_value device_obj,
                            size_t n);

/* Device affinity: 0 if m may be used by work on device d (its own
 * device, or one given access to it by enablePeerAccess; d NULL: a stream
 * of no known device, not checked); else throws ERR_INVALID_ARG_VALUE
 * naming the argument `what` and returns -1. */
int uvn_memory_check_device(napi_env env, const struct uvn_memory *m,
                            const struct uvn_dev *d, const char *what);

/* Defines DeviceMemory on exports. */
napi_status uvn_memory_define(napi_env env, napi_value exports, struct uvn_env *ue);

#endif
