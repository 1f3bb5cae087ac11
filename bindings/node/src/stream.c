/* Stream: every async op of the JS API. An op is a small struct holding
 * what the enqueue needs and the resources it keeps busy; the promise comes
 * from uvcuda_napi_await_ex, which also holds the JS objects involved (the
 * stream, the TypedArray, the DeviceMemory, the Kernel) by strong
 * references until it settles. The *OnThreadPool variants are the baseline
 * that addons use today (napi_create_async_work + cuStreamSynchronize on a
 * libuv pool thread), kept for comparison and the benchmark.
 *
 * Every method here returns a Promise and reports every error through it
 * (PROMISE_METHOD), argument errors included.
 *
 * Host memory. The GPU never reads or writes a JS buffer: a copy goes
 * through a buffer of ours (the bounce), so that transferring or detaching
 * the JS buffer while the copy is pending cannot make the GPU touch memory
 * JS gave away (or freed):
 *   copyToDevice   copies the source into the bounce at the call; the GPU
 *                  reads the bounce. Later changes to the source, or its
 *                  transfer, change nothing.
 *   copyFromDevice the GPU writes the bounce; once the work is done the
 *                  bytes are copied into dst on the JS thread, unless dst
 *                  was detached or transferred meanwhile (the promise then
 *                  rejects with ERR_INVALID_STATE and nothing is written),
 *                  or the caller's AbortSignal was aborted (dst is left
 *                  alone).
 * The bounce is page-locked and pooled (bounce.h: a copy into pageable
 * memory would hold the JS thread until the GPU reached it). It lives until
 * the GPU is done with it: where the promise ends without the work being
 * known done (env teardown cancels it, a fault or a reset fails it), the
 * reaper thread returns it once the stream (or the context) is idle. The
 * cost: one more memcpy of the bytes on the JS thread, and their size
 * again in host memory while the copy pends. */
#include "addon.h"
#include "bounce.h"
#include "devstate.h"
#include "reaper.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

enum op_kind { OP_FENCE, OP_HTOD, OP_DTOH, OP_DTOD, OP_MEMSET, OP_LAUNCH };

/* What one promise keeps: at most the stream, the kernel, two buffers, a
 * signal and one DeviceMemory per kernel parameter. */
#define OP_MAX_KEEP (5 + ADDON_MAX_PARAMS)

struct op {
  int kind;
  CUstream stream;
  CUdeviceptr dst, src;
  struct bounce bb; /* HTOD / DTOH: the bytes the GPU reads or writes */
  size_t bytes;
  unsigned char byte;
  CUfunction fn;
  unsigned grid[3], block[3], shmem;
  int resolve_keep; /* resolve with kept[resolve_keep]; -1: undefined */
  int signal_keep;  /* DTOH: kept[signal_keep] is the caller's AbortSignal; -1 */
  int enqueued;     /* the op's work reached the stream */
  int nparams;
  void **params;
  uint64_t *slots;
  int nheld;
  struct res **held;
  /* where the GPU work runs: to free the bounce after it, and for faults */
  struct dev *dev;
  int ordinal; /* -1: no device known */
  uint64_t gen;
  CUcontext ctx;
  CUstream own_stream; /* the stream, when it is ours to wait for */
  /* thread-pool baseline */
  napi_async_work work;
  napi_deferred deferred;
  CUresult result;
  size_t nrefs;
  napi_ref *refs;
};

static struct op *op_new(int kind, int nparams, int max_held, size_t max_refs) {
  size_t sz = sizeof(struct op) + (size_t)nparams * (sizeof(uint64_t) + sizeof(void *)) +
              (size_t)max_held * sizeof(struct res *) + max_refs * sizeof(napi_ref);
  struct op *o = calloc(1, sz);
  char *p;
  if (o == NULL) return NULL;
  p = (char *)(o + 1);
  o->slots = (uint64_t *)p;
  p += (size_t)nparams * sizeof(uint64_t);
  o->params = (void **)p;
  p += (size_t)nparams * sizeof(void *);
  o->held = (struct res **)p;
  p += (size_t)max_held * sizeof(struct res *);
  o->refs = (napi_ref *)p;
  o->kind = kind;
  o->resolve_keep = -1;
  o->signal_keep = -1;
  o->ordinal = -1;
  return o;
}

static void op_hold(struct op *o, struct res *r) {
  o->held[o->nheld++] = r;
  res_hold(r);
}

static void op_free(napi_env env, struct op *o) {
  int i;
  for (i = 0; i < o->nheld; i++) res_release(env, o->held[i]);
  bounce_put(&o->bb);
  free(o);
}

/* Where o's work runs, from its stream's res. For a foreign stream of no
 * known device, the stream's context is asked of the driver, and only for
 * a copy (the reaper may have to wait for it before freeing the bounce). */
static void op_place(struct op *o, struct stream_res *s) {
  struct dev *d = s->h.dev;
  o->stream = s->stream;
  o->dev = d;
  if (d != NULL) {
    o->ordinal = d->ordinal;
    o->gen = s->h.gen;
    o->ctx = d->ctx;
    if (s->owned) o->own_stream = s->stream;
  } else if ((o->kind != OP_HTOD && o->kind != OP_DTOH) || cu_load() != 0 ||
             cu.cuStreamGetCtx(s->stream, &o->ctx) != CUDA_SUCCESS) {
    o->ctx = NULL;
  }
}

/* o's bounce of len bytes, after op_place: page-locked and pooled for a
 * stream of a known device (taken under its reset lock), else malloc'ed.
 * Throws. */
static int op_bounce(napi_env env, struct op *o, size_t len) {
  uint64_t gen = 0;
  int err;
  if (o->ordinal >= 0 && devstate_enter(o->ordinal, &gen) != 0) {
    throw_state(env, "device %d is being reset", o->ordinal);
    return -1;
  }
  err = bounce_get(o->ordinal, gen, o->ordinal >= 0 ? o->ctx : NULL, len, &o->bb);
  if (o->ordinal >= 0) devstate_leave(o->ordinal);
  if (err != 0) {
    throw_uv(env, err);
    return -1;
  }
  return 0;
}

/* ---- the uvcuda path --------------------------------------------------- */

static int op_enqueue(uvcuda_stream_t stream, void *data) {
  struct op *o = data;
  CUstream s = (CUstream)stream;
  CUresult r = CUDA_SUCCESS;
  switch (o->kind) {
    case OP_HTOD:
      if (o->bytes) r = cu.cuMemcpyHtoDAsync(o->dst, o->bb.p, o->bytes, s);
      break;
    case OP_DTOH:
      if (o->bytes) r = cu.cuMemcpyDtoHAsync(o->bb.p, o->src, o->bytes, s);
      break;
    case OP_DTOD:
      if (o->bytes) r = cu.cuMemcpyDtoDAsync(o->dst, o->src, o->bytes, s);
      break;
    case OP_MEMSET:
      if (o->bytes) r = cu.cuMemsetD8Async(o->dst, o->byte, o->bytes, s);
      break;
    case OP_LAUNCH:
      r = cu.cuLaunchKernel(o->fn, o->grid[0], o->grid[1], o->grid[2], o->block[0],
                            o->block[1], o->block[2], o->shmem, s,
                            o->nparams ? o->params : NULL, NULL);
      break;
    default:
      break;
  }
  if (r == CUDA_SUCCESS) o->enqueued = 1;
  return (int)r;
}

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
  struct op *o = data;
  if (o->kind == OP_DTOH && kept != NULL && o->resolve_keep >= 0) {
    napi_value dst = kept[o->resolve_keep];
    void *host = NULL;
    size_t len = 0;
    int detached = 0;
    /* The caller gave up on this copy: leave dst as it is. A signal-like
     * object whose getter threw: that error, and dst left alone too. */
    int aborted = o->signal_keep >= 0 ? signal_aborted(env, kept[o->signal_keep]) : 0;
    if (aborted < 0) return napi_pending_exception;
    if (aborted) return napi_ok;
    if (host_bytes(env, dst, &host, &len, &detached) != 0 || detached || len != o->bytes) {
      throw_state(env, "copyFromDevice: dst was %s (its %zu bytes are now %zu) "
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
  struct op *o = data;
  if (status != 0 && status != UVCUDA_ECANCELED) fault_after_settle(env, o->dev, status);
  if (status != 0 && o->enqueued) bounce_put_after(&o->bb, o->ctx, o->own_stream);
  op_free(env, o);
}

static int is_special(CUstream s) {
  return s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
}

/* Starts o on its stream; returns the promise, or NULL (thrown, o freed).
 * Holds the device's reset lock meanwhile, after checking that everything
 * o holds belongs to the device's current generation. The legacy /
 * per-thread / NULL stream handles name the current context's default
 * stream: d's context is made current for the start. */
static napi_value submit(napi_env env, struct op *o, struct dev *d,
                         const napi_value *keep, size_t nkeep, const char *name) {
  uvcuda_napi_await_t a;
  napi_value promise = NULL;
  CUcontext prev = NULL;
  int push = d != NULL && is_special(o->stream);
  uint64_t gen;
  napi_status s;
  CUresult r;

  if (op_enter_await(env, d, o->held, o->nheld, &gen) != 0) {
    op_free(env, o);
    return NULL;
  }
  memset(&a, 0, sizeof(a));
  a.stream = o->stream;
  a.enqueue = o->kind == OP_FENCE ? NULL : op_enqueue;
  a.convert = o->resolve_keep >= 0 ? op_convert : NULL;
  a.release = op_release;
  a.data = o;
  a.keep = keep;
  a.nkeep = nkeep;
  a.resource_name = name;
  if (push && (r = ctx_push(d, &prev)) != CUDA_SUCCESS) {
    op_leave(d);
    op_free(env, o);
    return throw_cu(env, r);
  }
  s = uvcuda_napi_await_ex(env, &a, &promise);
  if (push) ctx_pop(prev, d);
  op_leave(d);
  if (s != napi_ok) {
    op_free(env, o);
    return NULL;
  }
  return promise;
}

/* ---- the thread-pool baseline ------------------------------------------ */

static void pool_execute(napi_env env, void *data) {
  struct op *o = data;
  CUcontext prev = NULL;
  CUresult r = CUDA_SUCCESS;
  uint64_t gen = 0;
  (void)env;
  /* A reset waits for this (its lock is held for reading meanwhile). */
  if (o->ordinal >= 0) devstate_enter_wait(o->ordinal, &gen);
  if (o->ordinal >= 0 && gen != o->gen) {
    r = CUDA_ERROR_CONTEXT_IS_DESTROYED; /* gone with a reset */
  } else {
    r = cu_ctx_push(o->ctx, &prev);
    if (r == CUDA_SUCCESS && o->kind == OP_LAUNCH) r = (CUresult)op_enqueue(o->stream, o);
    if (r == CUDA_SUCCESS) r = cu.cuStreamSynchronize(o->stream);
    cu_ctx_pop(o->ctx, prev);
  }
  if (o->ordinal >= 0) devstate_leave(o->ordinal);
  o->result = r;
}

static void pool_complete(napi_env env, napi_status status, void *data) {
  struct op *o = data;
  napi_value v;
  size_t i;
  int err = status == napi_cancelled ? UVCUDA_ECANCELED
                                     : (o->result ? UVCUDA_ECUDA(o->result) : 0);
  if (!uvcuda_napi_closing(env)) { /* at teardown JS may not run */
    if (err != 0 && uvcuda_napi_create_error(env, err, &v) == napi_ok)
      napi_reject_deferred(env, o->deferred, v);
    else if (err == 0 && napi_get_undefined(env, &v) == napi_ok)
      napi_resolve_deferred(env, o->deferred, v);
    if (err != 0 && err != UVCUDA_ECANCELED) fault_after_settle(env, o->dev, err);
  }
  for (i = 0; i < o->nrefs; i++) napi_delete_reference(env, o->refs[i]);
  napi_delete_async_work(env, o->work);
  op_free(env, o);
}

static napi_value pool_submit(napi_env env, struct op *o, struct dev *d,
                              const napi_value *keep, size_t nkeep,
                              const char *name) {
  napi_value promise = NULL, undef, rname;
  size_t i;
  CUresult r;
  uint64_t gen;

  if (need_driver(env) != 0) goto fail;
  if (op_enter(env, d, o->held, o->nheld, &gen) != 0) goto fail;
  op_leave(d);
  if (d != NULL) {
    o->ctx = d->ctx;
    o->ordinal = d->ordinal;
    o->gen = gen;
  } else if (is_special(o->stream)) {
    throw_type(env, "awaiting a default stream handle (0n, 1n, 2n) needs a Device");
    goto fail;
  } else if ((r = cu.cuStreamGetCtx(o->stream, &o->ctx)) != CUDA_SUCCESS) {
    throw_cu(env, r);
    goto fail;
  }
  /* As an await of a capturing stream: refused. The pool thread's
   * cuStreamSynchronize would fail and invalidate the capture. */
  {
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
    if ((r = cu.cuStreamIsCapturing(o->stream, &cs)) != CUDA_SUCCESS) {
      throw_cu(env, r);
      goto fail;
    }
    if (cs != CU_STREAM_CAPTURE_STATUS_NONE) {
      throw_uv(env, UVCUDA_ECAPTURING);
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
  op_free(env, o);
  return NULL;
}

/* ---- arguments --------------------------------------------------------- */

static struct stream_res *this_stream(napi_env env, napi_callback_info info,
                                      size_t *argc, napi_value *argv,
                                      napi_value *self) {
  struct res *r;
  if (napi_get_cb_info(env, info, argc, argv, self, NULL) != napi_ok) return NULL;
  if (res_unwrap(env, *self, RES_STREAM, "this", 0, &r) != 0) return NULL;
  return (struct stream_res *)r;
}

static int opt_size(napi_env env, napi_value v, const char *what, size_t dflt,
                    size_t *out) {
  *out = dflt;
  if (arg_is_undefined(env, v)) return 0;
  return arg_size(env, v, what, out);
}

/* [off, off + n) must lie inside a buffer of `size` bytes. */
static int check_range(napi_env env, const char *what, size_t off, size_t n,
                       size_t size) {
  if (off > size || n > size - off) {
    throw_range(env, "%s: %zu bytes at offset %zu do not fit in %zu bytes", what, n,
                off, size);
    return -1;
  }
  return 0;
}

static int get_number(napi_env env, napi_value v, const char *what, double *d) {
  napi_valuetype t;
  char got[160];
  if (v == NULL || napi_typeof(env, v, &t) != napi_ok || t != napi_number) {
    throw_type(env, "%s must be a number, got %s", what, describe(env, v, got, sizeof(got)));
    return -1;
  }
  napi_get_value_double(env, v, d);
  return 0;
}

static int get_int(napi_env env, napi_value v, const char *what, double lo, double hi,
                   double *d) {
  char got[160];
  if (get_number(env, v, what, d) != 0) return -1;
  if (!(*d >= lo && *d <= hi) || *d != floor(*d)) {
    throw_range(env, "%s must be an integer from %.0f to %.0f, got %s", what, lo, hi,
                describe(env, v, got, sizeof(got)));
    return -1;
  }
  return 0;
}

/* A 64-bit integer from a BigInt or a safe-integer Number. */
static int get_int64(napi_env env, napi_value v, const char *what, int is_signed,
                     uint64_t *out) {
  napi_valuetype t;
  bool lossless = false;
  char got[160];
  double d;
  if (napi_typeof(env, v, &t) != napi_ok) return -1;
  if (t == napi_bigint) {
    if (is_signed) {
      int64_t i;
      napi_get_value_bigint_int64(env, v, &i, &lossless);
      memcpy(out, &i, sizeof(i));
    } else {
      napi_get_value_bigint_uint64(env, v, out, &lossless);
    }
    if (!lossless) {
      throw_range(env, "%s does not fit in %s, got %s", what, is_signed ? "i64" : "u64",
                  describe(env, v, got, sizeof(got)));
      return -1;
    }
    return 0;
  }
  if (t != napi_number) {
    throw_type(env, "%s must be a BigInt or a number, got %s", what,
               describe(env, v, got, sizeof(got)));
    return -1;
  }
  if (get_int(env, v, what, is_signed ? -9007199254740991.0 : 0.0,
              9007199254740991.0, &d) != 0)
    return -1;
  if (is_signed) {
    int64_t i = (int64_t)d;
    memcpy(out, &i, sizeof(i));
  } else {
    *out = (uint64_t)d;
  }
  return 0;
}

/* Fills o's parameter slots from `args` by k's signature; DeviceMemory
 * arguments are held by o and appended to keep. */
static int marshal(napi_env env, struct kern_res *k, napi_value args, struct op *o,
                   napi_value *keep, size_t *nkeep) {
  uint32_t n = 0, i;
  char what[32];
  napi_value e;
  napi_valuetype t;
  double d;

  if (!arg_is_undefined(env, args)) {
    napi_value a = NULL;
    int arr = arg_array(env, args, &a);
    if (arr < 0) return -1;
    if (!arr) {
      char got[160];
      throw_type(env, "args must be an array, got %s", describe(env, args, got, sizeof(got)));
      return -1;
    }
    args = a;
    napi_get_array_length(env, args, &n);
  }
  if ((int)n != k->nparams) {
    throw_value(env, "kernel %s takes %d argument%s, got %u", k->name, k->nparams,
                k->nparams == 1 ? "" : "s", n);
    return -1;
  }
  for (i = 0; i < n; i++) {
    void *slot = &o->slots[i];
    snprintf(what, sizeof(what), "args[%u]", i);
    if (napi_get_element(env, args, i, &e) != napi_ok) return -1;
    o->params[i] = slot;
    switch (k->sig[i]) {
      case P_PTR: {
        uint64_t p = 0;
        struct res *r;
        if (napi_typeof(env, e, &t) != napi_ok) return -1;
        if (t == napi_bigint) {
          if (arg_u64_handle(env, e, what, &p) != 0) return -1;
        } else if (t == napi_null) {
          p = 0;
        } else if (t == napi_object) {
          if (res_unwrap(env, e, RES_MEMORY, what, 0, &r) != 0) return -1;
          p = (uint64_t)((struct mem_res *)r)->ptr;
          op_hold(o, r);
          keep[(*nkeep)++] = e;
        } else {
          char got[160];
          throw_type(env, "%s (ptr) must be a DeviceMemory, a BigInt or null, got %s", what,
                     describe(env, e, got, sizeof(got)));
          return -1;
        }
        memcpy(slot, &p, sizeof(p));
        break;
      }
      case P_U8: {
        uint8_t x;
        if (get_int(env, e, what, 0, 255, &d) != 0) return -1;
        x = (uint8_t)d;
        memcpy(slot, &x, sizeof(x));
        break;
      }
      case P_I8: {
        int8_t x;
        if (get_int(env, e, what, -128, 127, &d) != 0) return -1;
        x = (int8_t)d;
        memcpy(slot, &x, sizeof(x));
        break;
      }
      case P_U16: {
        uint16_t x;
        if (get_int(env, e, what, 0, 65535, &d) != 0) return -1;
        x = (uint16_t)d;
        memcpy(slot, &x, sizeof(x));
        break;
      }
      case P_I16: {
        int16_t x;
        if (get_int(env, e, what, -32768, 32767, &d) != 0) return -1;
        x = (int16_t)d;
        memcpy(slot, &x, sizeof(x));
        break;
      }
      case P_U32: {
        uint32_t x;
        if (get_int(env, e, what, 0, 4294967295.0, &d) != 0) return -1;
        x = (uint32_t)d;
        memcpy(slot, &x, sizeof(x));
        break;
      }
      case P_I32: {
        int32_t x;
        if (get_int(env, e, what, -2147483648.0, 2147483647.0, &d) != 0) return -1;
        x = (int32_t)d;
        memcpy(slot, &x, sizeof(x));
        break;
      }
      case P_U64:
      case P_I64: {
        uint64_t x;
        if (get_int64(env, e, what, k->sig[i] == P_I64, &x) != 0) return -1;
        memcpy(slot, &x, sizeof(x));
        break;
      }
      case P_F32: {
        float x;
        if (get_number(env, e, what, &d) != 0) return -1;
        x = (float)d;
        memcpy(slot, &x, sizeof(x));
        break;
      }
      case P_F64:
        if (get_number(env, e, what, &d) != 0) return -1;
        memcpy(slot, &d, sizeof(d));
        break;
      default:
        return -1;
    }
  }
  o->nparams = (int)n;
  return 0;
}

/* ---- Stream methods ---------------------------------------------------- */

/* stream.copyToDevice(dst: DeviceMemory, src: BufferSource, dstOffset = 0):
 * src is copied at the call (see the top of this file) */
static napi_value copy_to_device(napi_env env, napi_callback_info info) {
  size_t argc = 3, len, off;
  napi_value argv[3] = {NULL, NULL, NULL}, self, keep[3];
  struct stream_res *s = this_stream(env, info, &argc, argv, &self);
  struct res *mr;
  struct mem_res *m;
  struct op *o;
  void *host;

  if (s == NULL || res_unwrap(env, argv[0], RES_MEMORY, "dst", 0, &mr) != 0 ||
      arg_bytes(env, argv[1], "src", &host, &len) != 0 ||
      opt_size(env, argv[2], "dstOffset", 0, &off) != 0)
    return NULL;
  m = (struct mem_res *)mr;
  if (check_range(env, "copyToDevice", off, len, m->size) != 0) return NULL;
  if ((o = op_new(OP_HTOD, 0, 2, 0)) == NULL) return throw_uv(env, UVCUDA_ENOMEM);
  op_place(o, s);
  if (op_bounce(env, o, len) != 0) {
    op_free(env, o);
    return NULL;
  }
  if (len) memcpy(o->bb.p, host, len);
  o->dst = m->ptr + off;
  o->bytes = len;
  op_hold(o, &s->h);
  op_hold(o, mr);
  keep[0] = self;
  keep[1] = argv[0];
  keep[2] = argv[1];
  return submit(env, o, s->h.dev, keep, 3, "uvcuda.copyToDevice");
}

/* stream.copyFromDevice(dst: BufferSource, src: DeviceMemory, srcOffset = 0,
 * [signal]): resolves with dst. The 4th argument is the caller's
 * AbortSignal (index.js passes it): once aborted, dst is left alone. */
static napi_value copy_from_device(napi_env env, napi_callback_info info) {
  size_t argc = 4, len, off, nkeep = 3;
  napi_value argv[4] = {NULL, NULL, NULL, NULL}, self, keep[4];
  struct stream_res *s = this_stream(env, info, &argc, argv, &self);
  struct res *mr;
  struct mem_res *m;
  struct op *o;
  napi_valuetype t;
  void *host;

  if (s == NULL || arg_bytes(env, argv[0], "dst", &host, &len) != 0 ||
      res_unwrap(env, argv[1], RES_MEMORY, "src", 0, &mr) != 0 ||
      opt_size(env, argv[2], "srcOffset", 0, &off) != 0)
    return NULL;
  m = (struct mem_res *)mr;
  if (check_range(env, "copyFromDevice", off, len, m->size) != 0) return NULL;
  if ((o = op_new(OP_DTOH, 0, 2, 0)) == NULL) return throw_uv(env, UVCUDA_ENOMEM);
  op_place(o, s);
  if (op_bounce(env, o, len) != 0) {
    op_free(env, o);
    return NULL;
  }
  o->src = m->ptr + off;
  o->bytes = len;
  o->resolve_keep = 1;
  op_hold(o, &s->h);
  op_hold(o, mr);
  keep[0] = self;
  keep[1] = argv[0];
  keep[2] = argv[1];
  if (argv[3] != NULL && napi_typeof(env, argv[3], &t) == napi_ok && t == napi_object) {
    o->signal_keep = 3;
    keep[nkeep++] = argv[3];
  }
  return submit(env, o, s->h.dev, keep, nkeep, "uvcuda.copyFromDevice");
}

/* stream.copyDevice(dst, src, byteLength = src.byteLength - srcOffset,
 *                   dstOffset = 0, srcOffset = 0) */
static napi_value copy_device(napi_env env, napi_callback_info info) {
  size_t argc = 5, n, doff, soff;
  napi_value argv[5] = {NULL, NULL, NULL, NULL, NULL}, self, keep[3];
  struct stream_res *s = this_stream(env, info, &argc, argv, &self);
  struct res *dr, *sr;
  struct mem_res *dm, *sm;
  struct op *o;

  if (s == NULL || res_unwrap(env, argv[0], RES_MEMORY, "dst", 0, &dr) != 0 ||
      res_unwrap(env, argv[1], RES_MEMORY, "src", 0, &sr) != 0 ||
      opt_size(env, argv[3], "dstOffset", 0, &doff) != 0 ||
      opt_size(env, argv[4], "srcOffset", 0, &soff) != 0)
    return NULL;
  dm = (struct mem_res *)dr;
  sm = (struct mem_res *)sr;
  if (soff > sm->size)
    return throw_range(env, "srcOffset %zu is past the end of src (%zu bytes)", soff,
                       sm->size);
  if (opt_size(env, argv[2], "byteLength", sm->size - soff, &n) != 0 ||
      check_range(env, "copyDevice (src)", soff, n, sm->size) != 0 ||
      check_range(env, "copyDevice (dst)", doff, n, dm->size) != 0)
    return NULL;
  if ((o = op_new(OP_DTOD, 0, 3, 0)) == NULL) return throw_uv(env, UVCUDA_ENOMEM);
  op_place(o, s);
  o->dst = dm->ptr + doff;
  o->src = sm->ptr + soff;
  o->bytes = n;
  op_hold(o, &s->h);
  op_hold(o, dr);
  op_hold(o, sr);
  keep[0] = self;
  keep[1] = argv[0];
  keep[2] = argv[1];
  return submit(env, o, s->h.dev, keep, 3, "uvcuda.copyDevice");
}

/* stream.memset(dst, value: 0..255, byteLength = dst.byteLength - offset,
 *               offset = 0) */
static napi_value memset_(napi_env env, napi_callback_info info) {
  size_t argc = 4, n, off;
  napi_value argv[4] = {NULL, NULL, NULL, NULL}, self, keep[2];
  struct stream_res *s = this_stream(env, info, &argc, argv, &self);
  struct res *mr;
  struct mem_res *m;
  struct op *o;
  uint32_t value;

  if (s == NULL || res_unwrap(env, argv[0], RES_MEMORY, "dst", 0, &mr) != 0 ||
      arg_u32(env, argv[1], "value", 0, 255, &value) != 0 ||
      opt_size(env, argv[3], "offset", 0, &off) != 0)
    return NULL;
  m = (struct mem_res *)mr;
  if (off > m->size)
    return throw_range(env, "offset %zu is past the end (%zu bytes)", off, m->size);
  if (opt_size(env, argv[2], "byteLength", m->size - off, &n) != 0 ||
      check_range(env, "memset", off, n, m->size) != 0)
    return NULL;
  if ((o = op_new(OP_MEMSET, 0, 2, 0)) == NULL) return throw_uv(env, UVCUDA_ENOMEM);
  op_place(o, s);
  o->dst = m->ptr + off;
  o->byte = (unsigned char)value;
  o->bytes = n;
  op_hold(o, &s->h);
  op_hold(o, mr);
  keep[0] = self;
  keep[1] = argv[0];
  return submit(env, o, s->h.dev, keep, 2, "uvcuda.memset");
}

/* The launch op from (kernel, grid, block, args, sharedMemBytes); NULL if
 * thrown. keep gets this, the kernel and the DeviceMemory arguments. */
static struct op *launch_op(napi_env env, struct stream_res *s, napi_value self,
                            napi_value *argv, napi_value *keep, size_t *nkeep) {
  struct res *kr;
  struct kern_res *k;
  unsigned grid[3], block[3];
  uint32_t shmem = 0;
  struct op *o;

  if (res_unwrap(env, argv[0], RES_KERNEL, "kernel", 0, &kr) != 0) return NULL;
  k = (struct kern_res *)kr;
  if (k->mod == NULL || k->mod->h.closed) {
    throw_closed(env, "Module");
    return NULL;
  }
  if (arg_dim3(env, argv[1], "grid", grid) != 0 ||
      arg_dim3(env, argv[2], "block", block) != 0 ||
      (!arg_is_undefined(env, argv[4]) &&
       arg_u32(env, argv[4], "sharedMemBytes", 0, UINT32_MAX, &shmem) != 0))
    return NULL;
  if ((o = op_new(OP_LAUNCH, k->nparams, 2 + k->nparams, OP_MAX_KEEP)) == NULL) {
    throw_uv(env, UVCUDA_ENOMEM);
    return NULL;
  }
  op_place(o, s);
  o->fn = k->fn;
  memcpy(o->grid, grid, sizeof(grid));
  memcpy(o->block, block, sizeof(block));
  o->shmem = shmem;
  op_hold(o, &s->h);
  op_hold(o, kr);
  keep[0] = self;
  keep[1] = argv[0];
  *nkeep = 2;
  if (marshal(env, k, argv[3], o, keep, nkeep) != 0) {
    op_free(env, o);
    return NULL;
  }
  return o;
}

/* stream.launch(kernel, grid, block, args = [], sharedMemBytes = 0) */
static napi_value launch(napi_env env, napi_callback_info info) {
  size_t argc = 5, nkeep = 0;
  napi_value argv[5] = {NULL, NULL, NULL, NULL, NULL}, self, keep[OP_MAX_KEEP];
  struct stream_res *s = this_stream(env, info, &argc, argv, &self);
  struct op *o;
  if (s == NULL || (o = launch_op(env, s, self, argv, keep, &nkeep)) == NULL)
    return NULL;
  return submit(env, o, s->h.dev, keep, nkeep, "uvcuda.launch");
}

/* stream.fence(): resolves once the work enqueued so far is done */
static napi_value fence(napi_env env, napi_callback_info info) {
  size_t argc = 0;
  napi_value self;
  struct stream_res *s = this_stream(env, info, &argc, NULL, &self);
  struct op *o;
  if (s == NULL) return NULL;
  if ((o = op_new(OP_FENCE, 0, 1, 0)) == NULL) return throw_uv(env, UVCUDA_ENOMEM);
  op_place(o, s);
  op_hold(o, &s->h);
  return submit(env, o, s->h.dev, &self, 1, "uvcuda.fence");
}

/* Baseline: stream.fenceOnThreadPool() */
static napi_value fence_pool(napi_env env, napi_callback_info info) {
  size_t argc = 0;
  napi_value self;
  struct stream_res *s = this_stream(env, info, &argc, NULL, &self);
  struct op *o;
  if (s == NULL) return NULL;
  if ((o = op_new(OP_FENCE, 0, 1, 1)) == NULL) return throw_uv(env, UVCUDA_ENOMEM);
  o->stream = s->stream;
  o->dev = s->h.dev;
  op_hold(o, &s->h);
  return pool_submit(env, o, s->h.dev, &self, 1, "uvcuda.fenceOnThreadPool");
}

/* Baseline: stream.launchOnThreadPool(kernel, grid, block, args, shmem) */
static napi_value launch_pool(napi_env env, napi_callback_info info) {
  size_t argc = 5, nkeep = 0;
  napi_value argv[5] = {NULL, NULL, NULL, NULL, NULL}, self, keep[OP_MAX_KEEP];
  struct stream_res *s = this_stream(env, info, &argc, argv, &self);
  struct op *o;
  if (s == NULL || (o = launch_op(env, s, self, argv, keep, &nkeep)) == NULL)
    return NULL;
  o->ordinal = -1; /* pool_submit places it */
  return pool_submit(env, o, s->h.dev, keep, nkeep, "uvcuda.launchOnThreadPool");
}

PROMISE_METHOD(stream_copy_to_device, copy_to_device)
PROMISE_METHOD(stream_copy_from_device, copy_from_device)
PROMISE_METHOD(stream_copy_device, copy_device)
PROMISE_METHOD(stream_memset, memset_)
PROMISE_METHOD(stream_launch, launch)
PROMISE_METHOD(stream_fence, fence)
PROMISE_METHOD(stream_fence_pool, fence_pool)
PROMISE_METHOD(stream_launch_pool, launch_pool)

/* stream.beginCapture(mode = 'relaxed') / stream.endCapture(): the captured
 * graph is destroyed (this package does not launch graphs); while capturing,
 * awaiting the stream rejects with UVCUDA_ECAPTURING. */
static napi_value stream_begin_capture(napi_env env, napi_callback_info info) {
  static const char *const modes[] = {"global", "thread-local", "relaxed"};
  size_t argc = 1;
  napi_value argv[1] = {NULL}, self;
  struct stream_res *s = this_stream(env, info, &argc, argv, &self);
  struct res *held[1];
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  CUcontext prev = NULL;
  napi_valuetype t;
  uint64_t gen;
  char got[160];
  CUresult r;
  int i;

  if (s == NULL) return NULL;
  if (!arg_is_undefined(env, argv[0])) {
    if (napi_typeof(env, argv[0], &t) != napi_ok || t != napi_string)
      return throw_type(env, "mode must be 'global', 'thread-local' or 'relaxed', got %s",
                        describe(env, argv[0], got, sizeof(got)));
    if ((i = str_one_of(env, argv[0], modes, 3)) < 0)
      return throw_one_of(env, argv[0], "mode", modes, 3);
    mode = i == 0 ? CU_STREAM_CAPTURE_MODE_GLOBAL
                  : i == 1 ? CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
                           : CU_STREAM_CAPTURE_MODE_RELAXED;
  }
  if (need_driver(env) != 0) return NULL;
  held[0] = &s->h;
  if (op_enter(env, s->h.dev, held, 1, &gen) != 0) return NULL;
  r = s->h.dev ? ctx_push(s->h.dev, &prev) : CUDA_SUCCESS;
  if (r == CUDA_SUCCESS) r = cu.cuStreamBeginCapture(s->stream, mode);
  if (s->h.dev) ctx_pop(prev, s->h.dev);
  op_leave(s->h.dev);
  if (r != CUDA_SUCCESS) return throw_cu(env, r);
  return NULL;
}

static napi_value stream_end_capture(napi_env env, napi_callback_info info) {
  size_t argc = 0;
  napi_value self;
  struct stream_res *s = this_stream(env, info, &argc, NULL, &self);
  struct res *held[1];
  CUcontext prev = NULL;
  CUgraph g = NULL;
  uint64_t gen;
  CUresult r;

  if (s == NULL || need_driver(env) != 0) return NULL;
  held[0] = &s->h;
  if (op_enter(env, s->h.dev, held, 1, &gen) != 0) return NULL;
  r = s->h.dev ? ctx_push(s->h.dev, &prev) : CUDA_SUCCESS;
  if (r == CUDA_SUCCESS) r = cu.cuStreamEndCapture(s->stream, &g);
  if (g != NULL) cu.cuGraphDestroy(g);
  if (s->h.dev) ctx_pop(prev, s->h.dev);
  op_leave(s->h.dev);
  if (r != CUDA_SUCCESS) return throw_cu(env, r);
  return NULL;
}

static napi_value stream_handle(napi_env env, napi_callback_info info) {
  napi_value self, v;
  struct res *r;
  if (napi_get_cb_info(env, info, NULL, NULL, &self, NULL) != napi_ok ||
      res_unwrap(env, self, RES_STREAM, "this", 1, &r) != 0)
    return NULL;
  napi_create_bigint_uint64(
      env, (uint64_t)(uintptr_t)((struct stream_res *)r)->stream, &v);
  return v;
}

static napi_value stream_owned(napi_env env, napi_callback_info info) {
  napi_value self, v;
  struct res *r;
  if (napi_get_cb_info(env, info, NULL, NULL, &self, NULL) != napi_ok ||
      res_unwrap(env, self, RES_STREAM, "this", 1, &r) != 0)
    return NULL;
  napi_get_boolean(env, ((struct stream_res *)r)->owned != 0, &v);
  return v;
}

/* ---- creation ---------------------------------------------------------- */

static napi_value wrap_stream(napi_env env, struct stream_res *s, napi_value device) {
  napi_value obj;
  if (res_wrap_new(env, &s->h, &obj) != napi_ok) {
    objects_discard(env, &s->h);
    return NULL;
  }
  objects_set_ro(env, obj, "device", device);
  return obj;
}

/* device.createStream(): a non-blocking stream of the device */
napi_value js_device_create_stream(napi_env env, napi_callback_info info) {
  napi_value self;
  struct res *d;
  struct stream_res *s;
  CUcontext prev;
  uint64_t gen;
  CUresult r;

  if (napi_get_cb_info(env, info, NULL, NULL, &self, NULL) != napi_ok ||
      res_unwrap(env, self, RES_DEVICE, "this", 0, &d) != 0)
    return NULL;
  if (op_enter(env, d->dev, NULL, 0, &gen) != 0) return NULL;
  if ((s = objects_new_stream(env, d->dev)) == NULL) {
    op_leave(d->dev);
    return NULL;
  }
  s->h.gen = gen;
  r = ctx_push(d->dev, &prev);
  if (r == CUDA_SUCCESS) r = cu.cuStreamCreate(&s->stream, CU_STREAM_NON_BLOCKING);
  ctx_pop(prev, d->dev);
  op_leave(d->dev);
  if (r != CUDA_SUCCESS) {
    s->h.destroyed = 1;
    objects_discard(env, &s->h);
    fault_after_error(env, d->dev, UVCUDA_ECUDA(r));
    return throw_cu(env, r);
  }
  s->owned = 1;
  return wrap_stream(env, s, self);
}

/* Parses (handle: bigint, device?: Device) of a stream made elsewhere. */
static int foreign_args(napi_env env, napi_value h, napi_value dv, CUstream *out,
                        struct res **dev) {
  uint64_t u;
  *dev = NULL;
  if (arg_u64_handle(env, h, "handle", &u) != 0) return -1;
  if (!arg_is_undefined(env, dv) &&
      res_unwrap(env, dv, RES_DEVICE, "device", 0, dev) != 0)
    return -1;
  *out = (CUstream)(uintptr_t)u;
  if (*dev == NULL && is_special(*out)) {
    throw_type(env, "the default stream handles (0n, 1n, 2n) need a Device: "
                    "Stream.fromHandle(handle, device)");
    return -1;
  }
  return 0;
}

/* Stream.fromHandle(handle: bigint, device?: Device): wraps a CUstream made
 * by other code; destroy() forgets it, never destroys it. */
static napi_value stream_from_handle(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2] = {NULL, NULL}, dvv;
  struct stream_res *s;
  struct res *dev;
  CUstream h;

  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok ||
      foreign_args(env, argv[0], argv[1], &h, &dev) != 0)
    return NULL;
  if ((s = objects_new_stream(env, dev ? dev->dev : NULL)) == NULL) return NULL;
  s->stream = h;
  s->owned = 0;
  s->h.destroyed = 0;
  if (dev) dvv = argv[1];
  else napi_get_null(env, &dvv);
  return wrap_stream(env, s, dvv);
}

/* uvcuda.fence(stream: Stream | bigint, device?: Device) */
static napi_value fence_any(napi_env env, napi_callback_info info) {
  size_t argc = 2, nkeep = 0;
  napi_value argv[2] = {NULL, NULL}, keep[1];
  struct res *r, *dev;
  napi_valuetype t;
  struct op *o;
  CUstream h;
  char got[160];

  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return NULL;
  if (argv[0] == NULL || napi_typeof(env, argv[0], &t) != napi_ok) t = napi_undefined;
  if (t == napi_object) {
    if (res_unwrap(env, argv[0], RES_STREAM, "stream", 0, &r) != 0) return NULL;
    /* A Stream knows its device; one given anyway must still be a Device. */
    if (!arg_is_undefined(env, argv[1]) &&
        res_unwrap(env, argv[1], RES_DEVICE, "device", 0, &dev) != 0)
      return NULL;
    if ((o = op_new(OP_FENCE, 0, 1, 0)) == NULL) return throw_uv(env, UVCUDA_ENOMEM);
    op_place(o, (struct stream_res *)r);
    op_hold(o, r);
    keep[nkeep++] = argv[0];
    return submit(env, o, r->dev, keep, nkeep, "uvcuda.fence");
  }
  if (t != napi_bigint)
    return throw_type(env, "stream must be a Stream or a BigInt stream handle, got %s",
                      describe(env, argv[0], got, sizeof(got)));
  if (foreign_args(env, argv[0], argv[1], &h, &dev) != 0) return NULL;
  if ((o = op_new(OP_FENCE, 0, 1, 0)) == NULL) return throw_uv(env, UVCUDA_ENOMEM);
  o->stream = h;
  o->dev = dev ? dev->dev : NULL;
  if (dev) {
    op_hold(o, dev);
    keep[nkeep++] = argv[1];
  }
  return submit(env, o, dev ? dev->dev : NULL, keep, nkeep, "uvcuda.fence");
}

PROMISE_METHOD(js_fence_impl, fence_any)

napi_value js_fence(napi_env env, napi_callback_info info) {
  return js_fence_impl(env, info);
}

#define SMETHOD(name, fn) {name, NULL, fn, NULL, NULL, NULL, napi_default_method, NULL}
#define SGETTER(name, fn) \
  {name, NULL, NULL, fn, NULL, NULL, napi_enumerable | napi_configurable, NULL}

napi_status stream_init(napi_env env, napi_value exports, struct addon_env *ae) {
  const napi_property_descriptor props[] = {
      SGETTER("handle", stream_handle),
      SGETTER("owned", stream_owned),
      SMETHOD("copyToDevice", stream_copy_to_device),
      SMETHOD("copyFromDevice", stream_copy_from_device),
      SMETHOD("copyDevice", stream_copy_device),
      SMETHOD("memset", stream_memset),
      SMETHOD("launch", stream_launch),
      SMETHOD("fence", stream_fence),
      SMETHOD("fenceOnThreadPool", stream_fence_pool),
      SMETHOD("launchOnThreadPool", stream_launch_pool),
      SMETHOD("beginCapture", stream_begin_capture),
      SMETHOD("endCapture", stream_end_capture),
      {"fromHandle", NULL, stream_from_handle, NULL, NULL, NULL,
       napi_default_method | napi_static, NULL},
  };
  return objects_define_stream(env, exports, ae, props, sizeof(props) / sizeof(props[0]));
}
