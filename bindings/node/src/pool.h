/* The thread-pool baseline (stream.fenceOnThreadPool(),
 * stream.launchOnThreadPool()): what addons do without uvcuda,
 * napi_create_async_work with cuStreamSynchronize on a libuv pool thread.
 * Kept for comparison and the benchmark. JS thread. */
#ifndef UVN_POOL_H
#define UVN_POOL_H

#include <node_api.h>
#include <stddef.h>

#include "op.h"

/* Runs o (a fence, or a launch enqueued on the pool thread) and
 * synchronizes its stream on a pool thread; returns the promise, keeping
 * keep[0..nkeep) alive until it settles, or NULL (thrown, o freed). A
 * capturing stream is refused (UVCUDA_ECAPTURING), as an await refuses
 * it; a default stream handle needs d. The pool thread holds the device's
 * reset lock while it runs. */
napi_value uvn_pool_submit(napi_env env, struct uvn_op *o, struct uvn_dev *d,
                           const napi_value *keep, size_t nkeep, const char *name);

#endif
