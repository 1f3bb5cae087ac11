/* An env's handle on a device: its primary context, retained from the
 * first Device of that ordinal the env made until Node deletes the env.
 * Refcounted: every object made on the device holds a reference, and the
 * env holds one, so the context is released (on the reaper thread, after
 * everything queued before) only once nothing of the env uses it. JS
 * thread of the env. */
#ifndef UVN_DEV_H
#define UVN_DEV_H

#include <node_api.h>
#include <stdint.h>

#include "driver.h"
#include "queue.h"

struct uvn_env;

struct uvn_dev {
  int refs;
  int ordinal;
  CUdevice cudev;
  CUcontext ctx;
  int cc_major, cc_minor;
  /* Stream-ordered allocator (memory pools): allocations and frees go on
   * this internal stream, of generation `gen`; NULL where the device or
   * driver lacks pools (or UVCUDA_NODE_NO_POOLS=1). */
  uint64_t gen;
  CUstream alloc_stream;
  uint64_t faults_seen; /* faults of the device emitted in this env */
  uint64_t resets_seen; /* generation of its last reset emitted here */
  int own_resets;       /* reset() calls of this env not yet settled */
  /* Its Device objects (struct uvn_device, weak), for 'fault' and 'reset'. */
  struct uvcuda__queue objects;
  char name[256];
};

/* The env's device of `ordinal`, opened (primary context retained) on its
 * first use. Throws (the driver's error, RangeError for an ordinal out of
 * range, ERR_INVALID_STATE while it is being reset) and returns NULL. */
struct uvn_dev *uvn_dev_open(napi_env env, struct uvn_env *ue, int ordinal);
void uvn_dev_ref(struct uvn_dev *d);
/* The last reference lets the device go: its allocation stream, bounce
 * pool and context are released on the reaper thread. */
void uvn_dev_unref(struct uvn_dev *d);

/* Makes d's context current (*prev: what uvn_dev_pop puts back). Returns
 * the driver's refusal, if any: then the call that needed the context is
 * not made (it would run in no context, or another device's) and fails
 * with that code; uvn_dev_pop is still right to call. */
CUresult uvn_dev_push(struct uvn_dev *d, CUcontext *prev);
void uvn_dev_pop(struct uvn_dev *d, CUcontext prev);

/* d's allocation stream of generation gen, made again after a reset
 * destroyed the older one (call holding the reset lock: uvn_res_enter). */
void uvn_dev_refresh(struct uvn_dev *d, uint64_t gen);

#endif
