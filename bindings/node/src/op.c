/* See op.h. */
#include "op.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "dev.h"
#include "devstate.h"
#include "errors.h"
#include "events.h"
#include "res.h"
#include "stream.h"
#include "uvcuda/napi.h"

struct uvn_op *uvn_op_new(enum uvn_op_kind kind, int nparams, int max_held, size_t max_refs) {
  size_t sz = sizeof(struct uvn_op) + (size_t)nparams * (sizeof(uint64_t) + sizeof(void *)) +
              (size_t)max_held * sizeof(struct uvn_res *) + max_refs * sizeof(napi_ref);
  struct uvn_op *o = calloc(1, sz);
  char *p;
  if (o == NULL) return NULL;
  p = (char *)(o + 1);
  o->slots = (uint64_t *)p;
  p += (size_t)nparams * sizeof(uint64_t);
  o->params = (void **)p;
  p += (size_t)nparams * sizeof(void *);
  o->held = (struct uvn_res **)p;
  p += (size_t)max_held * sizeof(struct uvn_res *);
  o->refs = (napi_ref *)p;
  o->kind = kind;
  o->resolve_keep = -1;
  o->signal_keep = -1;
  o->ordinal = -1;
  return o;
}

void uvn_op_hold(struct uvn_op *o, struct uvn_res *r) {
  o->held[o->nheld++] = r;
  uvn_res_hold(r);
}

void uvn_op_free(napi_env env, struct uvn_op *o) {
  int i;
  for (i = 0; i < o->nheld; i++) uvn_res_release(env, o->held[i]);
  uvn_bounce_put(&o->bb);
  free(o);
}

void uvn_op_place(struct uvn_op *o, const struct uvn_stream *s) {
  struct uvn_dev *d = s->h.dev;
  o->stream = s->stream;
  o->dev = d;
  if (d != NULL) {
    o->ordinal = d->ordinal;
    o->gen = s->h.gen;
    o->ctx = d->ctx;
    if (s->owned) o->own_stream = s->stream;
  } else if ((o->kind != UVN_OP_HTOD && o->kind != UVN_OP_DTOH) || uvn_driver_load() != 0 ||
             uvn_cu.cuStreamGetCtx(s->stream, &o->ctx) != CUDA_SUCCESS) {
    o->ctx = NULL;
  }
}

int uvn_op_bounce(napi_env env, struct uvn_op *o, size_t len) {
  uint64_t gen = 0;
  int err;
  if (o->ordinal >= 0 && uvn_devstate_enter(o->ordinal, &gen) != 0) {
    uvn_throw_state(env, "device %d is being reset", o->ordinal);
    return -1;
  }
  err = uvn_bounce_get(o->ordinal, gen, o->ordinal >= 0 ? o->ctx : NULL, len, &o->bb);
  if (o->ordinal >= 0) uvn_devstate_leave(o->ordinal);
  if (err != 0) {
    uvn_throw_uv(env, err);
    return -1;
  }
  return 0;
}

int uvn_op_enqueue(uvcuda_stream_t stream, void *data) {
  struct uvn_op *o = data;
  CUstream s = (CUstream)stream;
  CUresult r = CUDA_SUCCESS;
  switch (o->kind) {
    case UVN_OP_HTOD:
      if (o->bytes) r = uvn_cu.cuMemcpyHtoDAsync(o->dst, o->bb.p, o->bytes, s);
      break;
    case UVN_OP_DTOH:
      if (o->bytes) r = uvn_cu.cuMemcpyDtoHAsync(o->bb.p, o->src, o->bytes, s);
      break;
    case UVN_OP_DTOD:
      if (o->bytes) r = uvn_cu.cuMemcpyDtoDAsync(o->dst, o->src, o->bytes, s);
      break;
    case UVN_OP_MEMSET:
      if (o->bytes) r = uvn_cu.cuMemsetD8Async(o->dst, o->byte, o->bytes, s);
      break;
    case UVN_OP_LAUNCH:
      r = uvn_cu.cuLaunchKernel(o->fn, o->grid[0], o->grid[1], o->grid[2], o->block[0],
                                o->block[1], o->block[2], o->shmem, s,
                                o->nparams ? o->params : NULL, NULL);
      break;
    default:
      break;
  }
  if (r == CUDA_SUCCESS) o->enqueued = 1;
  return (int)r;
}

/* ---- the promise helper's callbacks -------------------------------------- */

/* 1 if signal.aborted is true, 0 if not, -1 if reading it threw. */
static int signal_aborted(napi_env env, napi_value signal) {
  napi_value v;
  bool b = false, threw = false;
  if (signal == NULL) return 0;
  if (napi_get_named_property(env, signal, "aborted", &v) != napi_ok)
    /* A throwing getter fails the call with the exception pending. */
    return napi_is_exception_pending(env, &threw) == napi_ok && threw ? -1 : 0;
  if (napi_get_value_bool(env, v, &b) != napi_ok) return 0;
  return b;
}

static napi_status op_convert(napi_env env, void *data, const napi_value *kept,
                              napi_value *result) {
  struct uvn_op *o = data;
  if (o->kind == UVN_OP_DTOH && kept != NULL && o->resolve_keep >= 0) {
    napi_value dst = kept[o->resolve_keep];
    void *host = NULL;
    size_t len = 0;
    int detached = 0;
    /* The caller gave up on this copy: leave dst as it is. A signal-like
     * object whose getter threw: that error, and dst left alone too. */
    int aborted = o->signal_keep >= 0 ? signal_aborted(env, kept[o->signal_keep]) : 0;
    if (aborted < 0) return napi_pending_exception;
    if (aborted) return napi_ok;
    if (uvn_host_bytes(env, dst, &host, &len, &detached) != 0 || detached || len != o->bytes) {
      uvn_throw_state(env, "copyFromDevice: dst was %s (its %zu bytes are now %zu) "
                           "while the copy was pending; nothing was written into it",
                      detached ? "detached or transferred" : "resized", o->bytes,
                      detached ? (size_t)0 : len);
      return napi_pending_exception;
    }
    if (o->bytes) memcpy(host, o->bb.p, o->bytes);
  }
  if (o->resolve_keep >= 0 && kept != NULL) *result = kept[o->resolve_keep];
  return napi_ok;
}

/* After the promise settled (status 0 or its error), or at env teardown
 * (UVCUDA_ECANCELED, no JS). Work that reached the stream and is not known
 * done may still use the bounce: the reaper frees it after that work. */
static void op_release(napi_env env, void *data, int status) {
  struct uvn_op *o = data;
  if (status != 0 && status != UVCUDA_ECANCELED) uvn_events_after_settle(env, o->dev, status);
  if (status != 0 && o->enqueued) uvn_bounce_put_after(&o->bb, o->ctx, o->own_stream);
  uvn_op_free(env, o);
}

napi_value uvn_op_submit(napi_env env, struct uvn_op *o, struct uvn_dev *d,
                         const napi_value *keep, size_t nkeep, const char *name) {
  uvcuda_napi_await_t a;
  napi_value promise = NULL;
  CUcontext prev = NULL;
  int push = d != NULL && uvn_stream_is_default(o->stream);
  uint64_t gen;
  napi_status s;
  CUresult r;

  if (uvn_res_enter_await(env, d, o->held, o->nheld, &gen) != 0) {
    uvn_op_free(env, o);
    return NULL;
  }
  memset(&a, 0, sizeof(a));
  a.stream = o->stream;
  a.enqueue = o->kind == UVN_OP_FENCE ? NULL : uvn_op_enqueue;
  a.convert = o->resolve_keep >= 0 ? op_convert : NULL;
  a.release = op_release;
  a.data = o;
  a.keep = keep;
  a.nkeep = nkeep;
  a.resource_name = name;
  if (push && (r = uvn_dev_push(d, &prev)) != CUDA_SUCCESS) {
    uvn_res_leave(d);
    uvn_op_free(env, o);
    return uvn_throw_cu(env, r);
  }
  s = uvcuda_napi_await_ex(env, &a, &promise);
  if (push) uvn_dev_pop(d, prev);
  uvn_res_leave(d);
  if (s != napi_ok) {
    uvn_op_free(env, o);
    return NULL;
  }
  return promise;
}
