/* See device.h. Its methods parse their arguments here and leave the
 * objects they make to those classes' files: createStream to stream.c,
 * alloc to memory.c, loadModule to module.c; health is fault.c's, reset
 * reset.c's. */
#include "device.h"

#include <stdint.h>
#include <stdlib.h>

#include "args.h"
#include "dev.h"
#include "devstate.h"
#include "env.h"
#include "errors.h"
#include "events.h"
#include "fault.h"
#include "memory.h"
#include "module.h"
#include "reset.h"
#include "stream.h"
#include "uvcuda.h"

/* The wrapper was collected: no more 'fault' for it. */
static void device_finalize(napi_env env, struct uvn_res *r) {
  struct uvn_device *o = (struct uvn_device *)r;
  uvcuda__queue_remove(&o->node);
  if (o->weak) napi_delete_reference(env, o->weak);
  o->weak = NULL;
}

static const struct uvn_class device_class = {UVN_DEVICE, NULL, device_finalize};

/* new Device(ordinal = 0) */
struct device_args {
  uint32_t ordinal;
};

static const struct uvn_arg device_args[] = {
    {.index = 0, .type = UVN_ARG_U32, .optional = 1, .name = "ordinal",
     .offset = offsetof(struct device_args, ordinal), .lo = 0, .hi = INT32_MAX},
};

static napi_value device_ctor(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1] = {NULL}, self, target = NULL;
  struct uvn_env *ue = uvn_env_get(env);
  struct device_args a = {0};
  struct uvn_device *o;
  struct uvn_dev *d;

  if (napi_get_cb_info(env, info, &argc, argv, &self, NULL) != napi_ok) return NULL;
  if (napi_get_new_target(env, info, &target) != napi_ok || target == NULL)
    return uvn_throw_construct_call(env, "Device");
  if (uvn_args_parse(env, argv, device_args, UVN_NARGS(device_args), &a) != 0) return NULL;
  if ((d = uvn_dev_open(env, ue, (int)a.ordinal)) == NULL) return NULL;
  if (uvn_events_subscribe(env, ue) != 0) return NULL;
  o = (struct uvn_device *)uvn_res_new(ue, &device_class, sizeof(*o), d, 0);
  if (o == NULL) return uvn_throw_uv(env, UVCUDA_ENOMEM);
  uvcuda__queue_init(&o->node);
  if (uvn_res_wrap(env, &o->h, self) != napi_ok) {
    uvn_res_discard(env, &o->h);
    return NULL;
  }
  /* Weak: 'fault' goes to every live Device object of the device. */
  if (napi_create_reference(env, self, 0, &o->weak) == napi_ok)
    uvcuda__queue_insert_head(&d->objects, &o->node);
  return self;
}

/* `this` as a Device: its dev, or NULL (thrown). */
static struct uvn_dev *this_dev(napi_env env, napi_callback_info info) {
  struct uvn_res *r = uvn_res_this(env, info, UVN_DEVICE, 1, NULL, NULL, NULL);
  return r != NULL ? r->dev : NULL;
}

static napi_value device_ordinal(napi_env env, napi_callback_info info) {
  struct uvn_dev *d = this_dev(env, info);
  napi_value v;
  if (d == NULL) return NULL;
  napi_create_int32(env, d->ordinal, &v);
  return v;
}

static napi_value device_name(napi_env env, napi_callback_info info) {
  struct uvn_dev *d = this_dev(env, info);
  napi_value v;
  if (d == NULL) return NULL;
  napi_create_string_utf8(env, d->name, NAPI_AUTO_LENGTH, &v);
  return v;
}

/* device.computeCapability: [major, minor] */
static napi_value device_cc(napi_env env, napi_callback_info info) {
  struct uvn_dev *d = this_dev(env, info);
  napi_value a, v;
  if (d == NULL) return NULL;
  napi_create_array_with_length(env, 2, &a);
  napi_create_int32(env, d->cc_major, &v);
  napi_set_element(env, a, 0, v);
  napi_create_int32(env, d->cc_minor, &v);
  napi_set_element(env, a, 1, v);
  return a;
}

/* device.health: 'healthy' or the sticky error's code (fault.c). */
static napi_value device_health(napi_env env, napi_callback_info info) {
  struct uvn_dev *d = this_dev(env, info);
  return d != NULL ? uvn_fault_health(env, d) : NULL;
}

/* device.createStream(): a new non-blocking Stream. */
static napi_value device_create_stream(napi_env env, napi_callback_info info) {
  napi_value self;
  struct uvn_res *r = uvn_res_this(env, info, UVN_DEVICE, 0, NULL, NULL, &self);
  return r != NULL ? uvn_stream_create(env, r, self) : NULL;
}

/* device.alloc(byteLength): DeviceMemory (contents undefined) */
struct alloc_args {
  size_t byte_length;
};

static const struct uvn_arg alloc_args[] = {
    {.index = 0, .type = UVN_ARG_SIZE, .name = "byteLength",
     .offset = offsetof(struct alloc_args, byte_length), .lo = 1},
};

static napi_value device_alloc(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1] = {NULL}, self;
  struct uvn_res *r = uvn_res_this(env, info, UVN_DEVICE, 0, &argc, argv, &self);
  struct alloc_args a;
  if (r == NULL || uvn_args_parse(env, argv, alloc_args, UVN_NARGS(alloc_args), &a) != 0)
    return NULL;
  return uvn_memory_alloc(env, r, self, a.byte_length);
}

/* device.loadModule(image: string | BufferSource): Module (module.c reads
 * the image). */
static napi_value device_load_module(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1] = {NULL}, self;
  struct uvn_res *r = uvn_res_this(env, info, UVN_DEVICE, 0, &argc, argv, &self);
  return r != NULL ? uvn_module_load(env, r, self, argv[0]) : NULL;
}

/* device.reset(): Promise<void> (reset.c). */
static napi_value device_reset_impl(napi_env env, napi_callback_info info) {
  struct uvn_dev *d = this_dev(env, info);
  return d != NULL ? uvn_reset_start(env, d) : NULL;
}

UVN_PROMISE_METHOD(device_reset, device_reset_impl)

/* device.enablePeerAccess(peer: Device): work on this device (its
 * streams' copies, memsets and kernel launches) may use the memory of
 * peer from now on, in every thread of the process, until either device is
 * reset. One way: work on peer using this device's memory needs
 * peer.enablePeerAccess(device). Idempotent. The driver's
 * cuCtxEnablePeerAccess(peer's primary context) with this device's
 * current, after cuDeviceCanAccessPeer (CUDA_ERROR_PEER_ACCESS_UNSUPPORTED
 * where it says no). */
struct peer_args {
  struct uvn_res *peer;
};

static const struct uvn_arg peer_args[] = {
    {.index = 0, .type = UVN_ARG_RES, .name = "peer",
     .offset = offsetof(struct peer_args, peer), .kind = UVN_DEVICE},
};

static napi_value device_enable_peer_access(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1] = {NULL};
  struct uvn_res *r = uvn_res_this(env, info, UVN_DEVICE, 0, &argc, argv, NULL);
  struct peer_args a;
  struct uvn_dev *d, *p;
  uint64_t gen, peer_gen;
  CUcontext prev;
  CUresult cr;
  int can = 0;

  if (r == NULL || uvn_args_parse(env, argv, peer_args, UVN_NARGS(peer_args), &a) != 0)
    return NULL;
  d = r->dev;
  p = a.peer->dev;
  if (p->ordinal == d->ordinal)
    return uvn_throw_value(env, "The argument 'peer' must be another device than device %d. "
                                "Received device %d", d->ordinal, p->ordinal);
  if (uvn_res_enter(env, d, NULL, 0, &gen) != 0) return NULL;
  if (uvn_res_enter(env, p, NULL, 0, &peer_gen) != 0) {
    uvn_res_leave(d);
    return NULL;
  }
  cr = uvn_cu.cuDeviceCanAccessPeer(&can, d->cudev, p->cudev);
  if (cr == CUDA_SUCCESS && !can) cr = CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
  if (cr == CUDA_SUCCESS) {
    cr = uvn_dev_push(d, &prev);
    if (cr == CUDA_SUCCESS) cr = uvn_cu.cuCtxEnablePeerAccess(p->ctx, 0);
    uvn_dev_pop(d, prev);
  }
  if (cr == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) cr = CUDA_SUCCESS;
  if (cr == CUDA_SUCCESS) uvn_devstate_peer_enable(d->ordinal, gen, p->ordinal, peer_gen);
  uvn_res_leave(p);
  uvn_res_leave(d);
  if (cr == CUDA_SUCCESS) return NULL;
  uvn_fault_after_error(d, UVCUDA_ECUDA(cr));
  return uvn_throw_cu(env, cr);
}

napi_status uvn_device_define(napi_env env, napi_value exports, struct uvn_env *ue) {
  const napi_property_descriptor props[] = {
      UVN_GETTER("ordinal", device_ordinal, UVN_DEVICE),
      UVN_GETTER("name", device_name, UVN_DEVICE),
      UVN_GETTER("computeCapability", device_cc, UVN_DEVICE),
      UVN_GETTER("health", device_health, UVN_DEVICE),
      UVN_METHOD("createStream", device_create_stream, UVN_DEVICE),
      UVN_METHOD("alloc", device_alloc, UVN_DEVICE),
      UVN_METHOD("loadModule", device_load_module, UVN_DEVICE),
      UVN_METHOD("reset", device_reset, UVN_DEVICE),
      UVN_METHOD("enablePeerAccess", device_enable_peer_access, UVN_DEVICE),
  };
  return uvn_res_define_class(env, exports, ue, UVN_DEVICE, device_ctor, NULL, props,
                              sizeof(props) / sizeof(props[0]));
}
