/* uvcuda/napi.h: a Promise that settles on the JS thread when CUDA stream
 * work is done, for Node-API addons.
 *
 *   napi_value promise;
 *   uvcuda_napi_await(env, stream, enqueue, convert, release, data, &promise);
 *   return promise;
 *
 * `enqueue(stream, data)` runs at once, on the JS thread, with the stream's
 * CUDA context current, and puts work on the stream (cuLaunchKernel,
 * cuMemcpyHtoDAsync, ...). The promise resolves with `convert`'s value once
 * that work is done, or rejects with an Error naming the uvcuda / CUDA error.
 * No thread waits: completion reaches the env's libuv loop through uvcuda
 * (one uvcuda loop context per napi_env: the main thread and each worker).
 *
 * Build: compile this helper's implementation (bindings/node/src/uvcuda_napi.c)
 * and the C files under uvcuda's lib/ INTO your addon, against Node's headers
 * (its uv.h), with -DNAPI_VERSION=8 (or higher) and hidden visibility. Do not
 * link the system libuv: the uv_* symbols resolve from the node binary, which
 * is the libuv that runs your env's loop. node-gyp: depend on the target
 * uvcuda_napi of require('uvcuda').targets, headers in
 * require('uvcuda').include_dir; Meson: dependency('uvcuda-napi') of uvcuda
 * as a subproject. See docs/guide-node.md and examples/node-addon/.
 *
 * Threads: call every function here from the JS thread of `env`. Once the
 * helper has made its state for `env` (its first call there), a call from
 * any other thread (a thread of yours, a worker passing the main env) is
 * refused before it reaches V8, which would abort the process: status
 * napi_generic_failure, nothing thrown (no JS can run there), outputs NULL;
 * uvcuda_napi_closing() answers nonzero. The first call must come from the
 * JS thread; it always does when the addon's init or a JS call makes it.
 * An env Node has deleted (a worker's, once the worker ended) must never
 * be passed, from any thread: as for every Node-API call, that is not
 * detected (the helper reads the env's instance data first).
 *
 * Instance data: the helper keeps its per-env state in the env's instance
 * data slot (napi_set_instance_data). An addon that uses this helper must
 * not call napi_set_instance_data itself; it stores its own per-env data
 * with uvcuda_napi_set_data() instead.
 *
 * Env teardown (worker exit, main-thread exit, not process.exit() on the
 * main thread, which runs no cleanup): the helper's async cleanup hook
 * closes every pending future (their `release` runs with UVCUDA_ECANCELED;
 * their promises are left unsettled, since JS may no longer run, and each
 * keeps its napi_deferred, a few bytes and a handle: Node-API frees one
 * only when it settles), then
 * closes the loop context. Nothing waits for the GPU: a worker with a long
 * kernel pending ends at once, and the cancelled work goes on running. So
 * a `release` with UVCUDA_ECANCELED must not free what that work still
 * reads or writes (host buffers, device memory): hand it to a thread that
 * waits for the stream first (cuMemFree and cuModuleUnload wait for the
 * device by themselves, off the JS thread). Node runs the finalizers of the
 * env (napi_wrap, instance data, uvcuda_napi_set_data) after all this:
 * destroy CUDA objects there, not in a release that runs with
 * UVCUDA_ECANCELED, because the loop context may still query a stream
 * while it closes. The helper may be called from those finalizers: the env
 * reads as closing (uvcuda_napi_closing nonzero), uvcuda_napi_get_data
 * gives the data inside its own finalizer and NULL after it, and
 * uvcuda_napi_await*, _loop, _configure and _set_data return
 * napi_generic_failure with nothing thrown (JS can't run any more) and
 * their outputs NULL; _set_data does not take the data (it stays yours).
 * This holds in every finalizer, whether Node runs it before or after the
 * uvcuda_napi_set_data one.
 *
 * Unloading: Node dlclose()s an addon once the last worker that loaded it
 * ends (nodejs/node#25577) while uvcuda's threads and CUDA host functions
 * may still run its code. The helper's first call in a process keeps the
 * shared object it is compiled into resident (dlopen of itself with
 * RTLD_NODELETE, as -Wl,-z,nodelete would), so threads and host functions
 * of your addon stay safe too; it is never unloaded before the process
 * exits.
 */
#ifndef UVCUDA_NAPI_H
#define UVCUDA_NAPI_H

#include <node_api.h>
#include <stddef.h>

#include "uvcuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Puts work on `stream`; runs inside uvcuda_napi_await*, on the JS thread,
 * with the stream's CUDA context current (for the default streams, NULL,
 * CU_STREAM_LEGACY and CU_STREAM_PER_THREAD, that is the context current
 * on the JS thread: with none, the promise rejects
 * CUDA_ERROR_INVALID_CONTEXT). Returns 0, a negative uvcuda error or a
 * positive CUresult (`return cuLaunchKernel(...);`); an error rejects the
 * promise (later, never from inside the await call) once the stream has
 * run what the enqueue put on it before failing and the work ahead of it:
 * in stream order, `keep` held until then (a second uvcuda future with no
 * op, started right after, tells when: the loop's stats count it as a
 * start of its own). Return no
 * UVCUDA_ECANCELED: `release` would get the status of a teardown. Must not
 * call into JS or start, close or await futures (a nested await is not
 * detected). Copies between the device and pageable memory (a JS Buffer's
 * bytes) are synchronous in CUDA: the call waits for the work queued
 * before it on the stream, blocking the JS thread; copy through pinned
 * memory (cuMemHostAlloc, cuMemHostRegister) and into the JS bytes in
 * `convert`, as the uvcuda package does. */
typedef int (*uvcuda_napi_enqueue_cb)(uvcuda_stream_t stream, void *data);

/* Makes the value the promise resolves with, once the work is done. Runs on
 * the JS thread inside a handle scope and a callback scope. `kept` holds the
 * values passed in uvcuda_napi_await_t.keep, in order (NULL when none).
 * Return napi_ok and set *result (NULL, or leaving it unset, resolves with
 * undefined). Any other status, or a pending JS exception, rejects the
 * promise with that exception (or with a generic Error if none is
 * pending). */
typedef napi_status (*uvcuda_napi_convert_cb)(napi_env env, void *data,
                                              const napi_value *kept,
                                              napi_value *result);

/* Frees `data`: runs exactly once per successful await, after the promise
 * settled (status 0 or the error it was rejected with), or at env teardown
 * with status UVCUDA_ECANCELED. With UVCUDA_ECANCELED it must not call
 * into JS (creating and deleting references and values is fine), should
 * not destroy CUDA streams, and must not free memory the enqueued work
 * reads or writes: that work may still run (see the teardown note above).
 * Nor may it with an error status once the work reached the stream: a
 * device reset (uvcuda_device_reset) fails pending work before it stops
 * the device. */
typedef void (*uvcuda_napi_release_cb)(napi_env env, void *data, int status);

/* What to await, for uvcuda_napi_await_ex. Zero-initialise, then fill. */
typedef struct uvcuda_napi_await_s {
  uvcuda_stream_t stream;          /* CUstream / cudaStream_t */
  uvcuda_napi_enqueue_cb enqueue;  /* NULL: await the work already there */
  uvcuda_napi_convert_cb convert;  /* NULL: resolve with undefined */
  uvcuda_napi_release_cb release;  /* NULL: nothing to free */
  void *data;                      /* passed to the three callbacks */
  /* Values held by strong references while the work is pending (the
   * TypedArray a copy reads or writes, the objects that own the stream or
   * the device memory), released after `convert` and `release` ran. */
  const napi_value *keep;
  size_t nkeep;
  /* async_hooks resource name; NULL: "uvcuda". */
  const char *resource_name;
} uvcuda_napi_await_t;

/* Runs `enqueue` on `stream` (NULL enqueue: awaits what is already there),
 * then returns in *promise a Promise that settles on the JS thread once
 * that work is done: resolves with `convert`'s value, or rejects with an
 * Error made by uvcuda_napi_create_error (a CUDA error of the work, a
 * device fault, UVCUDA_ECAPTURING for a capturing stream). The stream must
 * stay valid until the promise settled.
 *
 * Returns napi_ok; otherwise nothing was started, *promise is NULL (when
 * `promise` itself is not), a JS
 * exception is pending (the uvcuda error when the driver cannot be loaded,
 * a TypeError ERR_INVALID_ARG_TYPE for a `keep`
 * value that is not an object or function, ...), `release` will not be
 * called and `data` is still yours. A NULL env, req or promise is
 * napi_invalid_arg with nothing thrown, as in Node-API itself; so is a
 * NULL output pointer of the other functions here. In the env's
 * finalizers, see "Env teardown" above. */
napi_status uvcuda_napi_await(napi_env env, uvcuda_stream_t stream,
                              uvcuda_napi_enqueue_cb enqueue,
                              uvcuda_napi_convert_cb convert,
                              uvcuda_napi_release_cb release, void *data,
                              napi_value *promise);

/* The same, with values to keep alive and an async resource name. */
napi_status uvcuda_napi_await_ex(napi_env env, const uvcuda_napi_await_t *req,
                                 napi_value *promise);

/* The env's uvcuda loop context, created on first use on the env's own loop
 * (napi_get_uv_event_loop); it is closed at env teardown, never by you.
 * Use it for uvcuda_loop_stats or to run uvcuda futures of your own (close
 * them before env teardown completes: an open future keeps the teardown
 * waiting). On failure *loop is NULL: the driver not loadable
 * (UVCUDA_ENODRIVER, ...) leaves a JS exception pending and the status
 * napi_pending_exception; the env tearing down (uvcuda_napi_closing) is
 * napi_generic_failure with nothing thrown. */
napi_status uvcuda_napi_loop(napi_env env, uvcuda_loop_t **loop);

/* Options for the env's loop context, taken when it is created. Call before
 * the first await / uvcuda_napi_loop of this env; after that it throws an
 * Error with code 'EBUSY' (UVCUDA_EBUSY is libuv's UV_EBUSY, and named so)
 * saying so. Bad options are reported when the context is created, by an
 * Error naming the option (or the environment variable) and its value;
 * no context was created then, so configure may be called again. NULL
 * opts: every default. */
napi_status uvcuda_napi_configure(napi_env env, const uvcuda_options_t *opts);

/* An Error for a uvcuda error code: message uvcuda_strerror(err) (and, for
 * driver-load errors, uvcuda_driver_dlerror()), `code` uvcuda_err_name(err)
 * ("CUDA_ERROR_ILLEGAL_ADDRESS", "UVCUDA_ECAPTURING", "ECANCELED"),
 * `errno` err (a negative number) and, for CUDA driver results,
 * `cudaResult` (the CUresult). It prints as Node core's errors do,
 * `Error [CODE]: message` (its stack's first line and String(err)). err
 * is a negative uvcuda code (0 or a positive number gives what
 * uvcuda_err_name says of it: 'OK', 'Unknown system error'). */
napi_status uvcuda_napi_create_error(napi_env env, int err, napi_value *error);

/* Throws uvcuda_napi_create_error(err). Returns napi_pending_exception on
 * success (so `return uvcuda_napi_throw(env, err);` reads well in a
 * function returning napi_status), another status if even that failed. */
napi_status uvcuda_napi_throw(napi_env env, int err);

/* Per-env data of the addon (instead of napi_set_instance_data, whose slot
 * the helper uses). `finalize` (may be NULL) runs when Node deletes the env,
 * after the loop context closed, and after the napi_wrap finalizers of the
 * objects wrapped after the env's first uvcuda_napi call (Node finalizes
 * the newest first): call set_data in the module's init to have it after
 * all of them. set_data again replaces the data without finalizing the old
 * one. */
napi_status uvcuda_napi_set_data(napi_env env, void *data, napi_finalize finalize,
                                 void *hint);
napi_status uvcuda_napi_get_data(napi_env env, void **data);

/* Nonzero once env teardown has started (the helper's cleanup hook ran):
 * from then on no promise settles, JS can't run, and uvcuda_napi_await*,
 * _loop, _configure and _set_data return napi_generic_failure with nothing
 * thrown. 0 for a NULL env. */
int uvcuda_napi_closing(napi_env env);

/* Counters of the env's helper (zero before first use). */
typedef struct uvcuda_napi_stats_s {
  size_t pending;    /* awaits whose promise has not settled */
  uint64_t awaited;  /* successful uvcuda_napi_await* calls */
  uint64_t resolved; /* promises resolved */
  uint64_t rejected; /* promises rejected */
} uvcuda_napi_stats_t;

napi_status uvcuda_napi_stats(napi_env env, uvcuda_napi_stats_t *stats);

#ifdef __cplusplus
}
#endif
#endif /* UVCUDA_NAPI_H */
