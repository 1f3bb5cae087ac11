/* See pool.h. */
#include "pool.h"

#include "dev.h"
#include "devstate.h"
#include "errors.h"
#include "events.h"
#include "res.h"
#include "stream.h"
#include "uvcuda/napi.h"

static void pool_execute(napi_env env, void *data) {
  struct uvn_op *o = data;
  CUcontext prev = NULL;
  CUresult r = CUDA_SUCCESS;
  uint64_t gen = 0;
  (void)env;
  /* A reset waits for this (its lock is held for reading meanwhile). */
  if (o->ordinal >= 0) uvn_devstate_enter_wait(o->ordinal, &gen);
  if (o->ordinal >= 0 && gen != o->gen) {
    r = CUDA_ERROR_CONTEXT_IS_DESTROYED; /* gone with a reset */
  } else {
    r = uvn_ctx_push(o->ctx, &prev);
    if (r == CUDA_SUCCESS && o->kind == UVN_OP_LAUNCH)
      r = (CUresult)uvn_op_enqueue(o->stream, o);
    if (r == CUDA_SUCCESS) r = uvn_cu.cuStreamSynchronize(o->stream);
    uvn_ctx_pop(o->ctx, prev);
  }
  if (o->ordinal >= 0) uvn_devstate_leave(o->ordinal);
  o->result = r;
}

static void pool_complete(napi_env env, napi_status status, void *data) {
  struct uvn_op *o = data;
  napi_value v;
  size_t i;
  int err = status == napi_cancelled ? UVCUDA_ECANCELED
                                     : (o->result ? UVCUDA_ECUDA(o->result) : 0);
  if (!uvcuda_napi_closing(env)) { /* at teardown JS may not run */
    if (err != 0 && uvcuda_napi_create_error(env, err, &v) == napi_ok)
      napi_reject_deferred(env, o->deferred, v);
    else if (err == 0 && napi_get_undefined(env, &v) == napi_ok)
      napi_resolve_deferred(env, o->deferred, v);
    if (err != 0 && err != UVCUDA_ECANCELED) uvn_events_after_settle(env, o->dev, err);
  }
  for (i = 0; i < o->nrefs; i++) napi_delete_reference(env, o->refs[i]);
  napi_delete_async_work(env, o->work);
  uvn_op_free(env, o);
}

napi_value uvn_pool_submit(napi_env env, struct uvn_op *o, struct uvn_dev *d,
                           const napi_value *keep, size_t nkeep, const char *name) {
  napi_value promise = NULL, undef, rname;
  size_t i;
  CUresult r;
  uint64_t gen;

  if (uvn_driver_need(env) != 0) goto fail;
  if (uvn_res_enter(env, d, o->held, o->nheld, &gen) != 0) goto fail;
  uvn_res_leave(d);
  if (d != NULL) {
    o->ctx = d->ctx;
    o->ordinal = d->ordinal;
    o->gen = gen;
  } else if (uvn_stream_is_default(o->stream)) {
    uvn_throw_type(env, "awaiting a default stream handle (0n, 1n, 2n) needs a Device");
    goto fail;
  } else if ((r = uvn_cu.cuStreamGetCtx(o->stream, &o->ctx)) != CUDA_SUCCESS) {
    uvn_throw_cu(env, r);
    goto fail;
  }
  /* As an await of a capturing stream: refused. The pool thread's
   * cuStreamSynchronize would fail and invalidate the capture. */
  {
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
    if ((r = uvn_cu.cuStreamIsCapturing(o->stream, &cs)) != CUDA_SUCCESS) {
      uvn_throw_cu(env, r);
      goto fail;
    }
    if (cs != CU_STREAM_CAPTURE_STATUS_NONE) {
      uvn_throw_uv(env, UVCUDA_ECAPTURING);
      goto fail;
    }
  }
  if (napi_create_promise(env, &o->deferred, &promise) != napi_ok) goto fail;
  for (i = 0; i < nkeep; i++) {
    if (napi_create_reference(env, keep[i], 1, &o->refs[i]) != napi_ok) goto fail_settle;
    o->nrefs++;
  }
  if (napi_create_string_utf8(env, name, NAPI_AUTO_LENGTH, &rname) != napi_ok ||
      napi_create_async_work(env, NULL, rname, pool_execute, pool_complete, o,
                             &o->work) != napi_ok)
    goto fail_settle;
  if (napi_queue_async_work(env, o->work) != napi_ok) {
    napi_delete_async_work(env, o->work);
    goto fail_settle;
  }
  return promise;

fail_settle:
  if (napi_get_undefined(env, &undef) == napi_ok)
    napi_resolve_deferred(env, o->deferred, undef);
  for (i = 0; i < o->nrefs; i++) napi_delete_reference(env, o->refs[i]);
fail:
  uvn_op_free(env, o);
  return NULL;
}
