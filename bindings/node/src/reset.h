/* device.reset(): recovery after a fault, for every thread of the process.
 * uvcuda_device_reset runs on a libuv pool thread (it blocks for the
 * reset), holding the device's reset lock for writing so that no thread
 * uses the device meanwhile (calls in other threads throw or reject
 * ERR_INVALID_STATE until it is done). Every stream, allocation, module and
 * kernel of the device made before is gone afterwards, in every env: work
 * on them rejects with CUDA_ERROR_CONTEXT_IS_DESTROYED, and promises
 * pending on the device reject so too (or with the fault's error). JS
 * thread. */
#ifndef UVN_RESET_H
#define UVN_RESET_H

#include <node_api.h>

struct uvn_dev;

/* Starts a reset of d's device: a promise that resolves when new work
 * completed on the device, and rejects with the driver's error where the
 * driver keeps the fault (the process must then be restarted; the message
 * says so). This env emits 'reset' before it settles. A second reset of
 * the device, from any env, is ERR_INVALID_STATE until this one's promise
 * settles. Throws and returns NULL. */
napi_value uvn_reset_start(napi_env env, struct uvn_dev *d);

#endif
