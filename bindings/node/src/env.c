/* See env.h. */
#include "env.h"

#include <stdlib.h>

#include "dev.h"
#include "stream.h"
#include "uvcuda_napi_ext.h"

struct uvn_env *uvn_env_get(napi_env env) {
  void *p = NULL;
  if (uvcuda_napi_get_data(env, &p) != napi_ok) return NULL;
  return p;
}

struct uvn_dev *uvn_env_dev(const struct uvn_env *ue, int ordinal) {
  return ordinal >= 0 && ordinal < ue->ndevs ? ue->devs[ordinal] : NULL;
}

/* Runs when Node deletes the env: after the loop context closed and after
 * every wrapper's finalizer, so nothing can use what is destroyed here.
 * Nothing here waits for the GPU: pooled memory is freed in stream order
 * after the work still queued on the env's streams, the rest goes to the
 * reaper. (The fault announcement tsfn was closed by Node's own cleanup
 * before.) */
static void finalize(napi_env env, void *data, void *hint) {
  struct uvn_env *ue = data;
  int i;
  (void)hint;
  uvn_stream_order_pooled_frees(ue);
  uvn_res_free_grave(ue);
  for (i = 0; i < ue->ndevs; i++)
    if (ue->devs[i]) uvn_dev_unref(ue->devs[i]);
  free(ue->devs);
  for (i = 0; i < UVN_NKINDS; i++) {
    if (ue->ctor[i]) napi_delete_reference(env, ue->ctor[i]);
    if (ue->guard[i]) napi_delete_reference(env, ue->guard[i]);
  }
  if (ue->is_array) napi_delete_reference(env, ue->is_array);
  if (ue->array_from) napi_delete_reference(env, ue->array_from);
  free(ue);
}

/* Array.isArray and Array.from as the env starts, for uvn_arg_array.
 * Without them a Proxy of an array is refused as before. */
static void take_array_functions(napi_env env, struct uvn_env *ue) {
  napi_value global, array, fn;
  if (napi_get_global(env, &global) != napi_ok ||
      napi_get_named_property(env, global, "Array", &array) != napi_ok)
    return;
  if (napi_get_named_property(env, array, "isArray", &fn) == napi_ok)
    napi_create_reference(env, fn, 1, &ue->is_array);
  if (napi_get_named_property(env, array, "from", &fn) == napi_ok)
    napi_create_reference(env, fn, 1, &ue->array_from);
}

struct uvn_env *uvn_env_new(napi_env env) {
  struct uvn_env *ue = calloc(1, sizeof(*ue));
  if (ue == NULL) {
    napi_throw_error(env, "ERR_UVCUDA_NOMEM", "out of memory");
    return NULL;
  }
  ue->env = env;
  uvcuda__queue_init(&ue->grave);
  if (uvcuda_napi_set_data(env, ue, finalize, NULL) != napi_ok) {
    free(ue);
    return NULL;
  }
  take_array_functions(env, ue);
  return ue;
}
