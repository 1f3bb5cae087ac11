/* What the addon keeps per JS environment (the main thread, each worker):
 * the classes it defined there, the devices it opened, the graveyard of
 * objects dropped during teardown. Stored with uvcuda_napi_set_data (the
 * promise helper owns the env's instance data) and freed when Node deletes
 * the env, after every wrapper's finalizer. JS thread of the env. */
#ifndef UVN_ENV_H
#define UVN_ENV_H

#include <node_api.h>

#include "queue.h"
#include "res.h"

struct uvn_dev;

struct uvn_env {
  napi_env env;
  napi_ref ctor[UVN_NKINDS];  /* each class's constructor */
  napi_ref guard[UVN_NKINDS]; /* the symbol each class's objects carry (clone guard, res.c) */
  struct uvn_dev **devs;      /* by ordinal, NULL until opened; each holds one reference */
  int ndevs;
  /* Objects closed and idle from env teardown on, destroyed when Node
   * deletes the env (res.c): struct uvn_res, by their `grave` node. */
  struct uvcuda__queue grave;
  napi_threadsafe_function faults; /* fault announcements (events.c); NULL until subscribed */
  napi_ref is_array, array_from; /* Array.isArray, Array.from at load (uvn_arg_array) */
};

/* The env's state, made at module init (uvcuda_napi_set_data). Throws and
 * returns NULL when out of memory. */
struct uvn_env *uvn_env_new(napi_env env);
/* The env's state; NULL before uvn_env_new, or once Node deleted it. */
struct uvn_env *uvn_env_get(napi_env env);
/* The env's device of `ordinal`, NULL if it has not opened it. */
struct uvn_dev *uvn_env_dev(const struct uvn_env *ue, int ordinal);

#endif
