/* See reset.h. */
#include "reset.h"

#include <stdlib.h>

#include "dev.h"
#include "devstate.h"
#include "env.h"
#include "errors.h"
#include "events.h"
#include "uvcuda.h"
#include "uvcuda_napi_ext.h"

struct reset_work {
  napi_async_work work;
  napi_deferred deferred;
  int ordinal;
  int err;
  int ran;
  uint64_t gen; /* the generation the reset began, 0 if it did not reach the driver */
};

static void reset_execute(napi_env env, void *data) {
  struct reset_work *w = data;
  (void)env;
  w->err = uvn_devstate_reset_run(w->ordinal, &w->gen);
  w->ran = 1;
}

static void reset_complete(napi_env env, napi_status status, void *data) {
  struct reset_work *w = data;
  struct uvn_env *ue = uvn_env_get(env);
  struct uvn_dev *d = ue ? uvn_env_dev(ue, w->ordinal) : NULL;
  napi_value v;
  int closing = uvcuda_napi_closing(env);
  if (d != NULL) d->own_resets--;
  /* 'reset' first: the device is usable from the event on, and its
   * listeners run before anything that waits on the promise. Every
   * generation up to the device's (no other reset can begin before
   * uvn_devstate_reset_end below): this reset's, and those whose notes
   * waited for it (events.c), this one having failed before the driver
   * too. */
  if (!closing && ue != NULL)
    uvn_events_emit_reset(env, ue, w->ordinal, uvn_devstate_gen(w->ordinal));
  /* Over only now: a second reset() made before this promise settles (the
   * listeners' too) is refused even if the pool thread has finished. */
  uvn_devstate_reset_end(w->ordinal);
  if (!closing) { /* at env teardown JS may not run */
    if (status == napi_ok && w->ran && w->err == 0) {
      if (napi_get_undefined(env, &v) == napi_ok) napi_resolve_deferred(env, w->deferred, v);
    } else {
      v = uvn_events_reset_error(env, w->ordinal, w->ran ? w->err : UVCUDA_ECANCELED);
      if (v != NULL) napi_reject_deferred(env, w->deferred, v);
    }
  }
  napi_delete_async_work(env, w->work);
  free(w);
}

napi_value uvn_reset_start(napi_env env, struct uvn_dev *d) {
  struct reset_work *w;
  napi_value promise = NULL, name;
  int err;

  if (uvn_driver_need(env) != 0) return NULL;
  if ((err = uvn_devstate_reset_begin(d->ordinal)) != 0)
    return err == UVCUDA_EBUSY
               ? uvn_throw_state(env, "a reset of device %d is already running", d->ordinal)
               : uvn_throw_uv(env, err);
  if ((w = calloc(1, sizeof(*w))) == NULL) {
    uvn_devstate_reset_end(d->ordinal);
    return uvn_throw_uv(env, UVCUDA_ENOMEM);
  }
  w->ordinal = d->ordinal;
  d->own_resets++; /* reset_complete gives it back, the failures below too */
  if (napi_create_promise(env, &w->deferred, &promise) != napi_ok ||
      napi_create_string_utf8(env, "uvcuda.reset", NAPI_AUTO_LENGTH, &name) != napi_ok ||
      napi_create_async_work(env, NULL, name, reset_execute, reset_complete, w,
                             &w->work) != napi_ok) {
    d->own_resets--;
    uvn_devstate_reset_end(w->ordinal);
    if (promise != NULL && napi_get_undefined(env, &name) == napi_ok)
      napi_resolve_deferred(env, w->deferred, name); /* nobody holds it */
    free(w);
    return uvn_throw_uv(env, UVCUDA_ENOMEM);
  }
  if (napi_queue_async_work(env, w->work) != napi_ok) {
    d->own_resets--;
    uvn_devstate_reset_end(w->ordinal);
    napi_delete_async_work(env, w->work);
    if (napi_get_undefined(env, &name) == napi_ok)
      napi_resolve_deferred(env, w->deferred, name);
    free(w);
    return uvn_throw_uv(env, UVCUDA_ENOMEM);
  }
  return promise;
}
