/* See memory.h. */
#include "memory.h"

#include <stdint.h>

#include "dev.h"
#include "devstate.h"
#include "errors.h"
#include "fault.h"
#include "reaper.h"
#include "uvcuda.h"

/* Pooled memory is freed in stream order on the allocation stream (at env
 * teardown that stream first waits for the work still queued on the env's
 * streams: uvn_stream_order_pooled_frees); where that is not possible (a
 * reset runs, the free is refused), and for cuMemAlloc memory, the
 * reaper's cuMemFree does it. Memory of a generation a reset ended is
 * gone already: nothing reaches the driver. */
static void memory_destroy(napi_env env, struct uvn_res *r) {
  struct uvn_memory *m = (struct uvn_memory *)r;
  struct uvn_dev *d = r->dev;
  CUcontext prev;
  uint64_t gen;
  (void)env;
  if (!m->pooled || uvn_devstate_enter(d->ordinal, &gen) != 0) {
    uvn_reap_memory(d->ordinal, r->gen, d->ctx, m->ptr);
    return;
  }
  if (gen == r->gen && d->gen == gen && d->alloc_stream) {
    if (uvn_dev_push(d, &prev) != CUDA_SUCCESS ||
        uvn_cu.cuMemFreeAsync(m->ptr, d->alloc_stream) != CUDA_SUCCESS)
      uvn_reap_memory(d->ordinal, r->gen, d->ctx, m->ptr);
    uvn_dev_pop(d, prev);
  }
  uvn_devstate_leave(d->ordinal);
}

static const struct uvn_class memory_class = {UVN_MEMORY, memory_destroy, NULL};

/* In d's context: pooled where the device has pools, else cuMemAlloc. */
static CUresult allocate(struct uvn_dev *d, struct uvn_memory *m, size_t n) {
  CUresult cr = CUDA_ERROR_NOT_SUPPORTED;
  if (d->alloc_stream) {
    /* The allocation is usable by every stream once its stream reached it;
     * that stream carries nothing but allocations and frees, so the
     * synchronize is short. */
    cr = uvn_cu.cuMemAllocAsync(&m->ptr, n, d->alloc_stream);
    if (cr == CUDA_SUCCESS) {
      CUresult sr = uvn_cu.cuStreamSynchronize(d->alloc_stream);
      if (sr == CUDA_SUCCESS) {
        m->pooled = 1;
      } else {
        uvn_cu.cuMemFreeAsync(m->ptr, d->alloc_stream);
        cr = sr;
      }
    }
  }
  if (!m->pooled && cr == CUDA_ERROR_NOT_SUPPORTED) cr = uvn_cu.cuMemAlloc(&m->ptr, n);
  return cr;
}

napi_value uvn_memory_alloc(napi_env env, struct uvn_res *device, napi_value device_obj,
                            size_t n) {
  struct uvn_dev *d = device->dev;
  struct uvn_memory *m;
  CUcontext prev;
  CUresult cr;
  uint64_t gen;

  if (uvn_res_enter(env, d, NULL, 0, &gen) != 0) return NULL;
  uvn_dev_refresh(d, gen);
  m = (struct uvn_memory *)uvn_res_new(device->ue, &memory_class, sizeof(*m), d, gen);
  if (m == NULL) {
    uvn_res_leave(d);
    return uvn_throw_uv(env, UVCUDA_ENOMEM);
  }
  if ((cr = uvn_dev_push(d, &prev)) == CUDA_SUCCESS) cr = allocate(d, m, n);
  uvn_dev_pop(d, prev);
  uvn_res_leave(d);
  m->size = n;
  return uvn_res_made(env, &m->h, cr, "device", device_obj);
}

int uvn_memory_check_device(napi_env env, const struct uvn_memory *m,
                            const struct uvn_dev *d, const char *what) {
  int from, peer;
  if (d == NULL || m->h.dev == NULL) return 0;
  from = d->ordinal;
  peer = m->h.dev->ordinal;
  if (uvn_devstate_peer_ok(from, peer)) return 0;
  uvn_throw_value(env, "The argument '%s' must be memory of device %d, the stream's, or of a "
                       "device it was given access to (device%d.enablePeerAccess(device%d)). "
                       "Received memory of device %d", what, from, from, peer, peer);
  return -1;
}

/* `this` as DeviceMemory (closed allowed: its getters still answer). */
static struct uvn_memory *this_memory(napi_env env, napi_callback_info info) {
  return (struct uvn_memory *)uvn_res_this(env, info, UVN_MEMORY, 1, NULL, NULL, NULL);
}

static napi_value memory_byte_length(napi_env env, napi_callback_info info) {
  struct uvn_memory *m = this_memory(env, info);
  napi_value v;
  if (m == NULL) return NULL;
  napi_create_double(env, (double)m->size, &v);
  return v;
}

/* mem.ptr: 0n once freed or gone with a reset. */
static napi_value memory_ptr(napi_env env, napi_callback_info info) {
  struct uvn_memory *m = this_memory(env, info);
  napi_value v;
  if (m == NULL) return NULL;
  napi_create_bigint_uint64(env, m->h.closed || uvn_res_stale(&m->h) ? 0 : (uint64_t)m->ptr,
                            &v);
  return v;
}

static napi_value memory_stream_ordered(napi_env env, napi_callback_info info) {
  struct uvn_memory *m = this_memory(env, info);
  napi_value v;
  if (m == NULL) return NULL;
  napi_get_boolean(env, m->pooled != 0, &v);
  return v;
}

napi_status uvn_memory_define(napi_env env, napi_value exports, struct uvn_env *ue) {
  const napi_property_descriptor props[] = {
      UVN_GETTER("byteLength", memory_byte_length, UVN_MEMORY),
      UVN_GETTER("ptr", memory_ptr, UVN_MEMORY),
      UVN_GETTER("streamOrdered", memory_stream_ordered, UVN_MEMORY),
      UVN_GETTER("freed", uvn_res_closed_getter, UVN_MEMORY),
      UVN_GETTER("pending", uvn_res_pending_getter, UVN_MEMORY),
      UVN_METHOD("free", uvn_res_close_method, UVN_MEMORY),
  };
  return uvn_res_define_class(env, exports, ue, UVN_MEMORY, uvn_res_internal_ctor,
                              (void *)"device.alloc()", props,
                              sizeof(props) / sizeof(props[0]));
}
