/* See stream.h. Each method reads its arguments with a description table
 * (args.h), checks what the table cannot (ranges that depend on another
 * argument, device affinity: memory.h), then builds an op and submits it
 * (op.h; the ...OnThreadPool baselines: pool.h). */
#include "stream.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "args.h"
#include "dev.h"
#include "devstate.h"
#include "env.h"
#include "errors.h"
#include "fault.h"
#include "kernel.h"
#include "memory.h"
#include "op.h"
#include "pool.h"
#include "reaper.h"
#include "show.h"
#include "uvcuda.h"

/* An owned stream is destroyed on the reaper thread (cuStreamDestroy does
 * not wait: its queued work still runs); a foreign one is forgotten. */
static void stream_destroy(napi_env env, struct uvn_res *r) {
  struct uvn_stream *s = (struct uvn_stream *)r;
  (void)env;
  if (s->owned && r->dev) uvn_reap_stream(r->dev->ordinal, r->gen, r->dev->ctx, s->stream);
}

static const struct uvn_class stream_class = {UVN_STREAM, stream_destroy, NULL};

void uvn_stream_order_pooled_frees(struct uvn_env *ue) {
  struct uvcuda__queue *q;
  CUcontext prev;
  CUevent e;
  uint64_t gen;
  int i;
  for (i = 0; i < ue->ndevs; i++) {
    struct uvn_dev *d = ue->devs[i];
    if (d == NULL || uvn_devstate_enter(d->ordinal, &gen) != 0) continue;
    if (d->alloc_stream != NULL && d->gen == gen && uvn_dev_push(d, &prev) == CUDA_SUCCESS) {
      uvcuda__queue_foreach(q, &ue->grave) {
        struct uvn_res *r = uvcuda__queue_data(q, struct uvn_res, grave);
        struct uvn_stream *s = (struct uvn_stream *)r;
        if (r->cls->kind != UVN_STREAM || r->dev != d || !s->owned || r->gen != gen) continue;
        if (uvn_cu.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) continue;
        if (uvn_cu.cuEventRecord(e, s->stream) == CUDA_SUCCESS)
          uvn_cu.cuStreamWaitEvent(d->alloc_stream, e, 0);
        uvn_cu.cuEventDestroy(e); /* the wait keeps what it needs */
      }
      uvn_dev_pop(d, prev);
    }
    uvn_devstate_leave(d->ordinal);
  }
}

/* ---- creation ------------------------------------------------------------ */

/* A new, unwrapped stream holding a reference on d (may be NULL); NULL
 * (thrown) when out of memory. */
static struct uvn_stream *stream_new(napi_env env, struct uvn_env *ue, struct uvn_dev *d) {
  struct uvn_stream *s = (struct uvn_stream *)uvn_res_new(
      ue, &stream_class, sizeof(*s), d, d ? uvn_devstate_gen(d->ordinal) : 0);
  if (s == NULL) uvn_throw_uv(env, UVCUDA_ENOMEM);
  return s;
}

napi_value uvn_stream_create(napi_env env, struct uvn_res *device, napi_value device_obj) {
  struct uvn_dev *d = device->dev;
  struct uvn_stream *s;
  CUcontext prev;
  uint64_t gen;
  CUresult r;

  if (uvn_res_enter(env, d, NULL, 0, &gen) != 0) return NULL;
  if ((s = stream_new(env, device->ue, d)) == NULL) {
    uvn_res_leave(d);
    return NULL;
  }
  s->h.gen = gen;
  r = uvn_dev_push(d, &prev);
  if (r == CUDA_SUCCESS) r = uvn_cu.cuStreamCreate(&s->stream, CU_STREAM_NON_BLOCKING);
  uvn_dev_pop(d, prev);
  uvn_res_leave(d);
  s->owned = 1;
  return uvn_res_made(env, &s->h, r, "device", device_obj);
}

/* (handle: bigint, device?: Device) of a stream made elsewhere. */
struct foreign_args {
  uint64_t handle;
  struct uvn_res *device;
};

static const struct uvn_arg foreign_args[] = {
    {.index = 0, .type = UVN_ARG_HANDLE, .name = "handle",
     .offset = offsetof(struct foreign_args, handle)},
    {.index = 1, .type = UVN_ARG_RES, .optional = 1, .name = "device",
     .offset = offsetof(struct foreign_args, device), .kind = UVN_DEVICE},
};

/* argv as foreign_args; a default stream handle needs its Device. */
static int foreign_parse(napi_env env, const napi_value *argv, struct foreign_args *a) {
  a->device = NULL;
  if (uvn_args_parse(env, argv, foreign_args, UVN_NARGS(foreign_args), a) != 0) return -1;
  if (a->device == NULL && uvn_stream_is_default((CUstream)(uintptr_t)a->handle)) {
    uvn_throw_type(env, "the default stream handles (0n, 1n, 2n) need a Device: "
                        "Stream.fromHandle(handle, device)");
    return -1;
  }
  return 0;
}

/* Stream.fromHandle(handle: bigint, device?: Device): wraps a CUstream made
 * by other code; destroy() forgets it, never destroys it. */
static napi_value stream_from_handle(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2] = {NULL, NULL}, device;
  struct foreign_args a;
  struct uvn_stream *s;

  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok ||
      foreign_parse(env, argv, &a) != 0)
    return NULL;
  if ((s = stream_new(env, uvn_env_get(env), a.device ? a.device->dev : NULL)) == NULL)
    return NULL;
  s->stream = (CUstream)(uintptr_t)a.handle;
  if (a.device) device = argv[1];
  else napi_get_null(env, &device);
  return uvn_res_made(env, &s->h, CUDA_SUCCESS, "device", device);
}

/* ---- calls ----------------------------------------------------------------- */

/* `this` of a Stream method (open), its arguments into argv[0..argc). */
static struct uvn_stream *this_stream(napi_env env, napi_callback_info info, size_t argc,
                                      napi_value *argv, napi_value *self) {
  return (struct uvn_stream *)uvn_res_this(env, info, UVN_STREAM, 0, &argc, argv, self);
}

/* [off, off + n) must lie inside a buffer of `size` bytes. */
static int check_range(napi_env env, const char *what, size_t off, size_t n, size_t size) {
  if (off > size || n > size - off) {
    uvn_throw_range(env, "%s: %zu bytes at offset %zu do not fit in %zu bytes", what, n, off,
                    size);
    return -1;
  }
  return 0;
}

#define MEM(r) ((struct uvn_memory *)(r))

/* stream.copyToDevice(dst: DeviceMemory, src: BufferSource, dstOffset = 0):
 * src is copied at the call (op.h) */
struct copy_to_args {
  struct uvn_res *dst;
  struct uvn_bytes src;
  size_t dst_offset;
};

static const struct uvn_arg copy_to_args[] = {
    {.index = 0, .type = UVN_ARG_RES, .name = "dst",
     .offset = offsetof(struct copy_to_args, dst), .kind = UVN_MEMORY},
    {.index = 1, .type = UVN_ARG_BYTES, .name = "src",
     .offset = offsetof(struct copy_to_args, src)},
    {.index = 2, .type = UVN_ARG_SIZE, .optional = 1, .name = "dstOffset",
     .offset = offsetof(struct copy_to_args, dst_offset)},
};

static napi_value copy_to_device(napi_env env, napi_callback_info info) {
  napi_value argv[3] = {NULL, NULL, NULL}, self;
  struct uvn_stream *s = this_stream(env, info, 3, argv, &self);
  struct copy_to_args a = {.dst_offset = 0};
  struct uvn_op *o;

  if (s == NULL || uvn_args_parse(env, argv, copy_to_args, UVN_NARGS(copy_to_args), &a) != 0 ||
      uvn_memory_check_device(env, MEM(a.dst), s->h.dev, "dst") != 0 ||
      check_range(env, "copyToDevice", a.dst_offset, a.src.len, MEM(a.dst)->size) != 0)
    return NULL;
  if ((o = uvn_op_new(UVN_OP_HTOD, 0, 2, 0)) == NULL)
    return uvn_throw_uv(env, UVCUDA_ENOMEM);
  uvn_op_place(o, s);
  if (uvn_op_bounce(env, o, a.src.len) != 0) {
    uvn_op_free(env, o);
    return NULL;
  }
  if (a.src.len) memcpy(o->bb.p, a.src.data, a.src.len);
  o->dst = MEM(a.dst)->ptr + a.dst_offset;
  o->bytes = a.src.len;
  uvn_op_hold(o, &s->h);
  uvn_op_hold(o, a.dst);
  return uvn_op_submit(env, o, s->h.dev, (napi_value[]){self, argv[0], argv[1]}, 3,
                       "uvcuda.copyToDevice");
}

/* stream.copyFromDevice(dst: BufferSource, src: DeviceMemory, srcOffset = 0,
 * [signal]): resolves with dst. The 4th argument is the caller's
 * AbortSignal (index.js passes it): once aborted, dst is left alone. */
struct copy_from_args {
  struct uvn_bytes dst;
  struct uvn_res *src;
  size_t src_offset;
};

static const struct uvn_arg copy_from_args[] = {
    {.index = 0, .type = UVN_ARG_BYTES, .name = "dst",
     .offset = offsetof(struct copy_from_args, dst)},
    {.index = 1, .type = UVN_ARG_RES, .name = "src",
     .offset = offsetof(struct copy_from_args, src), .kind = UVN_MEMORY},
    {.index = 2, .type = UVN_ARG_SIZE, .optional = 1, .name = "srcOffset",
     .offset = offsetof(struct copy_from_args, src_offset)},
};

static napi_value copy_from_device(napi_env env, napi_callback_info info) {
  napi_value argv[4] = {NULL, NULL, NULL, NULL}, self, keep[4];
  struct uvn_stream *s = this_stream(env, info, 4, argv, &self);
  struct copy_from_args a = {.src_offset = 0};
  struct uvn_op *o;
  napi_valuetype t;
  size_t nkeep = 3;

  if (s == NULL ||
      uvn_args_parse(env, argv, copy_from_args, UVN_NARGS(copy_from_args), &a) != 0 ||
      uvn_memory_check_device(env, MEM(a.src), s->h.dev, "src") != 0 ||
      check_range(env, "copyFromDevice", a.src_offset, a.dst.len, MEM(a.src)->size) != 0)
    return NULL;
  if ((o = uvn_op_new(UVN_OP_DTOH, 0, 2, 0)) == NULL)
    return uvn_throw_uv(env, UVCUDA_ENOMEM);
  uvn_op_place(o, s);
  if (uvn_op_bounce(env, o, a.dst.len) != 0) {
    uvn_op_free(env, o);
    return NULL;
  }
  o->src = MEM(a.src)->ptr + a.src_offset;
  o->bytes = a.dst.len;
  o->resolve_keep = 1;
  uvn_op_hold(o, &s->h);
  uvn_op_hold(o, a.src);
  keep[0] = self;
  keep[1] = argv[0];
  keep[2] = argv[1];
  if (argv[3] != NULL && napi_typeof(env, argv[3], &t) == napi_ok && t == napi_object) {
    o->signal_keep = 3;
    keep[nkeep++] = argv[3];
  }
  return uvn_op_submit(env, o, s->h.dev, keep, nkeep, "uvcuda.copyFromDevice");
}

/* stream.copyDevice(dst, src, byteLength = src.byteLength - srcOffset,
 *                   dstOffset = 0, srcOffset = 0). byteLength is read once
 * srcOffset is known to lie in src (its default depends on it). */
struct copy_device_args {
  struct uvn_res *dst, *src;
  size_t byte_length, dst_offset, src_offset;
};

static const struct uvn_arg copy_device_args[] = {
    {.index = 0, .type = UVN_ARG_RES, .name = "dst",
     .offset = offsetof(struct copy_device_args, dst), .kind = UVN_MEMORY},
    {.index = 1, .type = UVN_ARG_RES, .name = "src",
     .offset = offsetof(struct copy_device_args, src), .kind = UVN_MEMORY},
    {.index = 3, .type = UVN_ARG_SIZE, .optional = 1, .name = "dstOffset",
     .offset = offsetof(struct copy_device_args, dst_offset)},
    {.index = 4, .type = UVN_ARG_SIZE, .optional = 1, .name = "srcOffset",
     .offset = offsetof(struct copy_device_args, src_offset)},
};

static const struct uvn_arg copy_device_length[] = {
    {.index = 2, .type = UVN_ARG_SIZE, .optional = 1, .name = "byteLength",
     .offset = offsetof(struct copy_device_args, byte_length)},
};

static napi_value copy_device(napi_env env, napi_callback_info info) {
  napi_value argv[5] = {NULL, NULL, NULL, NULL, NULL}, self;
  struct uvn_stream *s = this_stream(env, info, 5, argv, &self);
  struct copy_device_args a = {.dst_offset = 0, .src_offset = 0};
  struct uvn_op *o;

  if (s == NULL ||
      uvn_args_parse(env, argv, copy_device_args, UVN_NARGS(copy_device_args), &a) != 0)
    return NULL;
  if (a.src_offset > MEM(a.src)->size)
    return uvn_throw_range(env, "srcOffset %zu is past the end of src (%zu bytes)",
                           a.src_offset, MEM(a.src)->size);
  a.byte_length = MEM(a.src)->size - a.src_offset;
  if (uvn_args_parse(env, argv, copy_device_length, 1, &a) != 0 ||
      uvn_memory_check_device(env, MEM(a.dst), s->h.dev, "dst") != 0 ||
      uvn_memory_check_device(env, MEM(a.src), s->h.dev, "src") != 0 ||
      check_range(env, "copyDevice (src)", a.src_offset, a.byte_length,
                  MEM(a.src)->size) != 0 ||
      check_range(env, "copyDevice (dst)", a.dst_offset, a.byte_length,
                  MEM(a.dst)->size) != 0)
    return NULL;
  if ((o = uvn_op_new(UVN_OP_DTOD, 0, 3, 0)) == NULL)
    return uvn_throw_uv(env, UVCUDA_ENOMEM);
  uvn_op_place(o, s);
  o->dst = MEM(a.dst)->ptr + a.dst_offset;
  o->src = MEM(a.src)->ptr + a.src_offset;
  o->bytes = a.byte_length;
  uvn_op_hold(o, &s->h);
  uvn_op_hold(o, a.dst);
  uvn_op_hold(o, a.src);
  return uvn_op_submit(env, o, s->h.dev, (napi_value[]){self, argv[0], argv[1]}, 3,
                       "uvcuda.copyDevice");
}

/* stream.memset(dst, value: 0..255, byteLength = dst.byteLength - offset,
 *               offset = 0). byteLength is read once offset is known to lie
 * in dst. */
struct memset_args {
  struct uvn_res *dst;
  uint32_t value;
  size_t byte_length, offset;
};

static const struct uvn_arg memset_args[] = {
    {.index = 0, .type = UVN_ARG_RES, .name = "dst",
     .offset = offsetof(struct memset_args, dst), .kind = UVN_MEMORY},
    {.index = 1, .type = UVN_ARG_U32, .name = "value",
     .offset = offsetof(struct memset_args, value), .lo = 0, .hi = 255},
    {.index = 3, .type = UVN_ARG_SIZE, .optional = 1, .name = "offset",
     .offset = offsetof(struct memset_args, offset)},
};

static const struct uvn_arg memset_length[] = {
    {.index = 2, .type = UVN_ARG_SIZE, .optional = 1, .name = "byteLength",
     .offset = offsetof(struct memset_args, byte_length)},
};

static napi_value memset_(napi_env env, napi_callback_info info) {
  napi_value argv[4] = {NULL, NULL, NULL, NULL}, self;
  struct uvn_stream *s = this_stream(env, info, 4, argv, &self);
  struct memset_args a = {.offset = 0};
  struct uvn_op *o;

  if (s == NULL || uvn_args_parse(env, argv, memset_args, UVN_NARGS(memset_args), &a) != 0)
    return NULL;
  if (a.offset > MEM(a.dst)->size)
    return uvn_throw_range(env, "offset %zu is past the end (%zu bytes)", a.offset,
                           MEM(a.dst)->size);
  a.byte_length = MEM(a.dst)->size - a.offset;
  if (uvn_args_parse(env, argv, memset_length, 1, &a) != 0 ||
      uvn_memory_check_device(env, MEM(a.dst), s->h.dev, "dst") != 0 ||
      check_range(env, "memset", a.offset, a.byte_length, MEM(a.dst)->size) != 0)
    return NULL;
  if ((o = uvn_op_new(UVN_OP_MEMSET, 0, 2, 0)) == NULL)
    return uvn_throw_uv(env, UVCUDA_ENOMEM);
  uvn_op_place(o, s);
  o->dst = MEM(a.dst)->ptr + a.offset;
  o->byte = (unsigned char)a.value;
  o->bytes = a.byte_length;
  uvn_op_hold(o, &s->h);
  uvn_op_hold(o, a.dst);
  return uvn_op_submit(env, o, s->h.dev, (napi_value[]){self, argv[0]}, 2, "uvcuda.memset");
}

/* (kernel, grid, block, args = [], sharedMemBytes = 0) of a launch; args
 * are read by the kernel's signature (kernel.c) once the op exists. */
struct launch_args {
  struct uvn_res *kernel;
  unsigned grid[3], block[3];
  uint32_t shmem;
};

static const struct uvn_arg launch_args[] = {
    {.index = 0, .type = UVN_ARG_RES, .name = "kernel",
     .offset = offsetof(struct launch_args, kernel), .kind = UVN_KERNEL},
    {.index = 1, .type = UVN_ARG_DIM3, .name = "grid",
     .offset = offsetof(struct launch_args, grid)},
    {.index = 2, .type = UVN_ARG_DIM3, .name = "block",
     .offset = offsetof(struct launch_args, block)},
    {.index = 4, .type = UVN_ARG_U32, .optional = 1, .name = "sharedMemBytes",
     .offset = offsetof(struct launch_args, shmem), .lo = 0, .hi = UINT32_MAX},
};

/* The launch op from argv; NULL if thrown. keep gets this, the kernel and
 * the DeviceMemory arguments. */
static struct uvn_op *launch_op(napi_env env, struct uvn_stream *s, napi_value self,
                                napi_value *argv, napi_value *keep, size_t *nkeep) {
  struct launch_args a = {.shmem = 0};
  struct uvn_kernel *k;
  struct uvn_op *o;

  if (uvn_args_parse(env, argv, launch_args, UVN_NARGS(launch_args), &a) != 0) return NULL;
  k = (struct uvn_kernel *)a.kernel;
  if ((o = uvn_op_new(UVN_OP_LAUNCH, k->nparams, 2 + k->nparams, UVN_OP_MAX_KEEP)) == NULL) {
    uvn_throw_uv(env, UVCUDA_ENOMEM);
    return NULL;
  }
  uvn_op_place(o, s);
  o->fn = k->fn;
  memcpy(o->grid, a.grid, sizeof(a.grid));
  memcpy(o->block, a.block, sizeof(a.block));
  o->shmem = a.shmem;
  uvn_op_hold(o, &s->h);
  uvn_op_hold(o, a.kernel);
  keep[0] = self;
  keep[1] = argv[0];
  *nkeep = 2;
  if (uvn_kernel_marshal(env, k, argv[3], o, keep, nkeep) != 0) {
    uvn_op_free(env, o);
    return NULL;
  }
  return o;
}

/* stream.launch(kernel, grid, block, args = [], sharedMemBytes = 0) */
static napi_value launch(napi_env env, napi_callback_info info) {
  napi_value argv[5] = {NULL, NULL, NULL, NULL, NULL}, self, keep[UVN_OP_MAX_KEEP];
  struct uvn_stream *s = this_stream(env, info, 5, argv, &self);
  struct uvn_op *o;
  size_t nkeep = 0;
  if (s == NULL || (o = launch_op(env, s, self, argv, keep, &nkeep)) == NULL) return NULL;
  return uvn_op_submit(env, o, s->h.dev, keep, nkeep, "uvcuda.launch");
}

/* stream.fence(): resolves once the work enqueued so far is done */
static napi_value fence(napi_env env, napi_callback_info info) {
  napi_value self;
  struct uvn_stream *s = this_stream(env, info, 0, NULL, &self);
  struct uvn_op *o;
  if (s == NULL) return NULL;
  if ((o = uvn_op_new(UVN_OP_FENCE, 0, 1, 0)) == NULL)
    return uvn_throw_uv(env, UVCUDA_ENOMEM);
  uvn_op_place(o, s);
  uvn_op_hold(o, &s->h);
  return uvn_op_submit(env, o, s->h.dev, &self, 1, "uvcuda.fence");
}

/* Baseline: stream.fenceOnThreadPool() */
static napi_value fence_pool(napi_env env, napi_callback_info info) {
  napi_value self;
  struct uvn_stream *s = this_stream(env, info, 0, NULL, &self);
  struct uvn_op *o;
  if (s == NULL) return NULL;
  if ((o = uvn_op_new(UVN_OP_FENCE, 0, 1, 1)) == NULL)
    return uvn_throw_uv(env, UVCUDA_ENOMEM);
  o->stream = s->stream;
  o->dev = s->h.dev;
  uvn_op_hold(o, &s->h);
  return uvn_pool_submit(env, o, s->h.dev, &self, 1, "uvcuda.fenceOnThreadPool");
}

/* Baseline: stream.launchOnThreadPool(kernel, grid, block, args, shmem) */
static napi_value launch_pool(napi_env env, napi_callback_info info) {
  napi_value argv[5] = {NULL, NULL, NULL, NULL, NULL}, self, keep[UVN_OP_MAX_KEEP];
  struct uvn_stream *s = this_stream(env, info, 5, argv, &self);
  struct uvn_op *o;
  size_t nkeep = 0;
  if (s == NULL || (o = launch_op(env, s, self, argv, keep, &nkeep)) == NULL) return NULL;
  o->ordinal = -1; /* uvn_pool_submit places it */
  return uvn_pool_submit(env, o, s->h.dev, keep, nkeep, "uvcuda.launchOnThreadPool");
}

UVN_PROMISE_METHOD(stream_copy_to_device, copy_to_device)
UVN_PROMISE_METHOD(stream_copy_from_device, copy_from_device)
UVN_PROMISE_METHOD(stream_copy_device, copy_device)
UVN_PROMISE_METHOD(stream_memset, memset_)
UVN_PROMISE_METHOD(stream_launch, launch)
UVN_PROMISE_METHOD(stream_fence, fence)
UVN_PROMISE_METHOD(stream_fence_pool, fence_pool)
UVN_PROMISE_METHOD(stream_launch_pool, launch_pool)

/* ---- capture --------------------------------------------------------------- */

/* stream.beginCapture(mode = 'relaxed') / stream.endCapture(): the captured
 * graph is destroyed (this package does not launch graphs); while capturing,
 * awaiting the stream rejects with UVCUDA_ECAPTURING. */
static const char *const capture_names[] = {"global", "thread-local", "relaxed"};
static const CUstreamCaptureMode capture_modes[] = {CU_STREAM_CAPTURE_MODE_GLOBAL,
                                                    CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                                                    CU_STREAM_CAPTURE_MODE_RELAXED};

struct capture_args {
  int mode;
};

static const struct uvn_arg capture_args[] = {
    {.index = 0, .type = UVN_ARG_ONE_OF, .optional = 1, .name = "mode",
     .offset = offsetof(struct capture_args, mode), .names = capture_names, .nnames = 3,
     .must = "'global', 'thread-local' or 'relaxed'"},
};

/* Runs begin (mode >= 0) or end capture on s, in its device's context,
 * holding its reset lock. Throws and returns -1. */
static int capture(napi_env env, struct uvn_stream *s, int mode) {
  struct uvn_res *held[1] = {&s->h};
  struct uvn_dev *d = s->h.dev;
  CUcontext prev = NULL;
  CUgraph g = NULL;
  uint64_t gen;
  CUresult r;

  if (uvn_driver_need(env) != 0 || uvn_res_enter(env, d, held, 1, &gen) != 0) return -1;
  r = d ? uvn_dev_push(d, &prev) : CUDA_SUCCESS;
  if (r == CUDA_SUCCESS && mode >= 0)
    r = uvn_cu.cuStreamBeginCapture(s->stream, capture_modes[mode]);
  if (r == CUDA_SUCCESS && mode < 0) r = uvn_cu.cuStreamEndCapture(s->stream, &g);
  if (g != NULL) uvn_cu.cuGraphDestroy(g);
  if (d) uvn_dev_pop(d, prev);
  uvn_res_leave(d);
  if (r == CUDA_SUCCESS) return 0;
  uvn_throw_cu(env, r);
  return -1;
}

static napi_value stream_begin_capture(napi_env env, napi_callback_info info) {
  napi_value argv[1] = {NULL};
  struct uvn_stream *s = this_stream(env, info, 1, argv, NULL);
  struct capture_args a = {.mode = 2}; /* relaxed */
  if (s != NULL && uvn_args_parse(env, argv, capture_args, UVN_NARGS(capture_args), &a) == 0)
    capture(env, s, a.mode);
  return NULL;
}

static napi_value stream_end_capture(napi_env env, napi_callback_info info) {
  struct uvn_stream *s = this_stream(env, info, 0, NULL, NULL);
  if (s != NULL) capture(env, s, -1);
  return NULL;
}

/* ---- accessors ------------------------------------------------------------- */

/* stream.handle: the CUstream, also after destroy(). */
static napi_value stream_handle(napi_env env, napi_callback_info info) {
  struct uvn_stream *s =
      (struct uvn_stream *)uvn_res_this(env, info, UVN_STREAM, 1, NULL, NULL, NULL);
  napi_value v;
  if (s == NULL) return NULL;
  napi_create_bigint_uint64(env, (uint64_t)(uintptr_t)s->stream, &v);
  return v;
}

static napi_value stream_owned(napi_env env, napi_callback_info info) {
  struct uvn_stream *s =
      (struct uvn_stream *)uvn_res_this(env, info, UVN_STREAM, 1, NULL, NULL, NULL);
  napi_value v;
  if (s == NULL) return NULL;
  napi_get_boolean(env, s->owned != 0, &v);
  return v;
}

/* ---- uvcuda.fence ---------------------------------------------------------- */

/* uvcuda.fence(stream: Stream, device?: Device): a Stream knows its
 * device; one given anyway must still be a Device. */
struct fence_stream_args {
  struct uvn_res *stream, *device;
};

static const struct uvn_arg fence_stream_args[] = {
    {.index = 0, .type = UVN_ARG_RES, .name = "stream",
     .offset = offsetof(struct fence_stream_args, stream), .kind = UVN_STREAM},
    {.index = 1, .type = UVN_ARG_RES, .optional = 1, .name = "device",
     .offset = offsetof(struct fence_stream_args, device), .kind = UVN_DEVICE},
};

/* uvcuda.fence(stream: Stream | bigint, device?: Device) */
static napi_value fence_any(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2] = {NULL, NULL};
  struct fence_stream_args fs;
  struct foreign_args fa;
  struct uvn_dev *d;
  napi_valuetype t;
  struct uvn_op *o;
  char got[160];

  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return NULL;
  if (argv[0] == NULL || napi_typeof(env, argv[0], &t) != napi_ok) t = napi_undefined;
  if (t == napi_object) {
    if (uvn_args_parse(env, argv, fence_stream_args, UVN_NARGS(fence_stream_args), &fs) != 0)
      return NULL;
    if ((o = uvn_op_new(UVN_OP_FENCE, 0, 1, 0)) == NULL)
      return uvn_throw_uv(env, UVCUDA_ENOMEM);
    uvn_op_place(o, (struct uvn_stream *)fs.stream);
    uvn_op_hold(o, fs.stream);
    return uvn_op_submit(env, o, fs.stream->dev, argv, 1, "uvcuda.fence");
  }
  if (t != napi_bigint)
    return uvn_throw_type(env, "stream must be a Stream or a BigInt stream handle, got %s",
                          uvn_show(env, argv[0], got, sizeof(got)));
  if (foreign_parse(env, argv, &fa) != 0) return NULL;
  if ((o = uvn_op_new(UVN_OP_FENCE, 0, 1, 0)) == NULL)
    return uvn_throw_uv(env, UVCUDA_ENOMEM);
  d = fa.device ? fa.device->dev : NULL;
  o->stream = (CUstream)(uintptr_t)fa.handle;
  o->dev = d;
  if (fa.device == NULL) return uvn_op_submit(env, o, NULL, NULL, 0, "uvcuda.fence");
  uvn_op_hold(o, fa.device);
  return uvn_op_submit(env, o, d, &argv[1], 1, "uvcuda.fence");
}

UVN_PROMISE_METHOD(fence_any_promise, fence_any)

napi_value uvn_stream_fence_any(napi_env env, napi_callback_info info) {
  return fence_any_promise(env, info);
}

napi_status uvn_stream_define(napi_env env, napi_value exports, struct uvn_env *ue) {
  const napi_property_descriptor props[] = {
      UVN_GETTER("handle", stream_handle, UVN_STREAM),
      UVN_GETTER("owned", stream_owned, UVN_STREAM),
      UVN_METHOD("copyToDevice", stream_copy_to_device, UVN_STREAM),
      UVN_METHOD("copyFromDevice", stream_copy_from_device, UVN_STREAM),
      UVN_METHOD("copyDevice", stream_copy_device, UVN_STREAM),
      UVN_METHOD("memset", stream_memset, UVN_STREAM),
      UVN_METHOD("launch", stream_launch, UVN_STREAM),
      UVN_METHOD("fence", stream_fence, UVN_STREAM),
      UVN_METHOD("fenceOnThreadPool", stream_fence_pool, UVN_STREAM),
      UVN_METHOD("launchOnThreadPool", stream_launch_pool, UVN_STREAM),
      UVN_METHOD("beginCapture", stream_begin_capture, UVN_STREAM),
      UVN_METHOD("endCapture", stream_end_capture, UVN_STREAM),
      UVN_STATIC("fromHandle", stream_from_handle, UVN_STREAM),
      UVN_GETTER("destroyed", uvn_res_closed_getter, UVN_STREAM),
      UVN_GETTER("pending", uvn_res_pending_getter, UVN_STREAM),
      UVN_METHOD("destroy", uvn_res_close_method, UVN_STREAM),
  };
  return uvn_res_define_class(env, exports, ue, UVN_STREAM, uvn_res_internal_ctor,
                              (void *)"device.createStream() or Stream.fromHandle()", props,
                              sizeof(props) / sizeof(props[0]));
}
