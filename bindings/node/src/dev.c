/* See dev.h. */
#include "dev.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bounce.h"
#include "devstate.h"
#include "env.h"
#include "errors.h"
#include "reaper.h"
#include "uvcuda.h"

void uvn_dev_ref(struct uvn_dev *d) { d->refs++; }

void uvn_dev_unref(struct uvn_dev *d) {
  if (--d->refs > 0) return;
  if (d->alloc_stream) uvn_reap_stream(d->ordinal, d->gen, d->ctx, d->alloc_stream);
  uvn_bounce_drop(d->ordinal, uvn_devstate_gen(d->ordinal), d->ctx);
  uvn_devstate_close(d->ordinal); /* before the release: the watcher lets go */
  uvn_reap_ctx_release(d->ordinal, d->cudev); /* after everything queued before it */
  free(d);
}

CUresult uvn_dev_push(struct uvn_dev *d, CUcontext *prev) {
  return uvn_ctx_push(d->ctx, prev);
}

void uvn_dev_pop(struct uvn_dev *d, CUcontext prev) { uvn_ctx_pop(d->ctx, prev); }

static int has_pools(struct uvn_dev *d) {
  int pools = 0;
  const char *e = getenv("UVCUDA_NODE_NO_POOLS");
  return uvn_cu.cuMemAllocAsync && uvn_cu.cuMemFreeAsync &&
         (e == NULL || strcmp(e, "1") != 0) &&
         uvn_cu.cuDeviceGetAttribute(&pools, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED,
                                     d->cudev) == CUDA_SUCCESS &&
         pools;
}

void uvn_dev_refresh(struct uvn_dev *d, uint64_t gen) {
  CUcontext prev;
  if (d->gen == gen && (d->alloc_stream != NULL || !has_pools(d))) return;
  if (d->gen != gen) d->alloc_stream = NULL; /* gone with the reset */
  d->gen = gen;
  if (!has_pools(d)) return;
  if (uvn_dev_push(d, &prev) != CUDA_SUCCESS ||
      uvn_cu.cuStreamCreate(&d->alloc_stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)
    d->alloc_stream = NULL; /* tried again at the next allocation */
  uvn_dev_pop(d, prev);
}

/* ue->devs sized for n devices. */
static int grow(napi_env env, struct uvn_env *ue, int n) {
  struct uvn_dev **p;
  if (ue->devs != NULL && ue->ndevs >= n) return 0;
  if ((p = realloc(ue->devs, (size_t)n * sizeof(*p))) == NULL) {
    uvn_throw_uv(env, UVCUDA_ENOMEM);
    return -1;
  }
  memset(p + ue->ndevs, 0, (size_t)(n - ue->ndevs) * sizeof(*p));
  ue->devs = p;
  ue->ndevs = n;
  return 0;
}

struct uvn_dev *uvn_dev_open(napi_env env, struct uvn_env *ue, int ordinal) {
  struct uvn_dev *d;
  CUresult r;
  uint64_t gen;
  int n = 0, err, ferr;

  if (uvn_driver_need(env) != 0) return NULL;
  if ((err = uvn_devstate_init()) != 0) {
    uvn_throw_uv(env, err);
    return NULL;
  }
  if ((r = uvn_cu.cuDeviceGetCount(&n)) != CUDA_SUCCESS) {
    uvn_throw_cu(env, r);
    return NULL;
  }
  if (ordinal < 0 || ordinal >= n) {
    uvn_throw_range(env, "device ordinal must be 0 to %d, got %d", n - 1, ordinal);
    return NULL;
  }
  if (grow(env, ue, n) != 0) return NULL;
  if (ue->devs[ordinal]) return ue->devs[ordinal];
  if ((d = calloc(1, sizeof(*d))) == NULL) {
    uvn_throw_uv(env, UVCUDA_ENOMEM);
    return NULL;
  }
  d->ordinal = ordinal;
  uvcuda__queue_init(&d->objects);
  if (uvn_devstate_enter(ordinal, &gen) != 0) {
    free(d);
    uvn_throw_state(env, "device %d is being reset", ordinal);
    return NULL;
  }
  if ((r = uvn_cu.cuDeviceGet(&d->cudev, ordinal)) != CUDA_SUCCESS ||
      (r = uvn_cu.cuDevicePrimaryCtxRetain(&d->ctx, d->cudev)) != CUDA_SUCCESS) {
    uvn_devstate_leave(ordinal);
    free(d);
    uvn_throw_cu(env, r);
    return NULL;
  }
  if (uvn_cu.cuDeviceGetName(d->name, (int)sizeof(d->name), d->cudev) != CUDA_SUCCESS)
    snprintf(d->name, sizeof(d->name), "CUDA device %d", ordinal);
  uvn_cu.cuDeviceGetAttribute(&d->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                              d->cudev);
  uvn_cu.cuDeviceGetAttribute(&d->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                              d->cudev);
  d->gen = gen + 1; /* not yet refreshed */
  uvn_dev_refresh(d, gen);
  uvn_devstate_open(ordinal, d->ctx);
  uvn_devstate_leave(ordinal);
  /* Faults and resets recorded before this env opened the device are not
   * its news. */
  d->faults_seen = uvn_devstate_faults(ordinal, &ferr);
  d->resets_seen = uvn_devstate_gen(ordinal);
  d->refs = 1; /* the env's, until it is deleted */
  ue->devs[ordinal] = d;
  return d;
}
