/* See events.h. */
#include "events.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "dev.h"
#include "device.h"
#include "devstate.h"
#include "env.h"
#include "errors.h"
#include "fault.h"
#include "uvcuda.h"
#include "uvcuda_napi_ext.h"

struct sub_cell {
  napi_threadsafe_function tsfn;
  struct uvn_env *ue;
};

/* Calls emit(event, value) on every live Device object of d in this env. */
static void emit_all(napi_env env, struct uvn_dev *d, const char *event, napi_value value) {
  struct uvcuda__queue *q;
  napi_value emit, name, *objs;
  napi_valuetype t;
  size_t n = 0, i;

  uvcuda__queue_foreach(q, &d->objects) n++;
  if (n == 0 || (objs = calloc(n, sizeof(*objs))) == NULL) return;
  /* Held by handles first: a listener may run the GC or open devices. */
  n = 0;
  uvcuda__queue_foreach(q, &d->objects) {
    struct uvn_device *o = uvcuda__queue_data(q, struct uvn_device, node);
    napi_value v = NULL;
    if (napi_get_reference_value(env, o->weak, &v) == napi_ok && v != NULL) objs[n++] = v;
  }
  napi_create_string_utf8(env, event, NAPI_AUTO_LENGTH, &name);
  for (i = 0; i < n; i++) {
    napi_value argv[2] = {name, value};
    bool pending = false;
    if (napi_get_named_property(env, objs[i], "emit", &emit) != napi_ok ||
        napi_typeof(env, emit, &t) != napi_ok || t != napi_function)
      continue;
    napi_call_function(env, objs[i], emit, 2, argv, NULL);
    /* A listener threw: an uncaught exception, as from any emitter; it must
     * not stay pending in the env (the promise helper's next settle would
     * fail). The other objects still get the event (each emitter's emit is
     * its own, as diagnostics_channel's subscribers are): with an
     * 'uncaughtException' handler the process goes on. */
    if (napi_is_exception_pending(env, &pending) == napi_ok && pending) {
      napi_value e;
      if (napi_get_and_clear_last_exception(env, &e) == napi_ok) napi_fatal_exception(env, e);
    }
  }
  free(objs);
}

static void emit_fault(napi_env env, struct uvn_env *ue, int ordinal) {
  struct uvn_dev *d = uvn_env_dev(ue, ordinal);
  napi_value err, num;
  uint64_t faults;
  int e;

  if (d == NULL) return;
  faults = uvn_devstate_faults(ordinal, &e);
  if (faults <= d->faults_seen || e == 0) return;
  d->faults_seen = faults;
  if (uvcuda_napi_create_error(env, e, &err) != napi_ok) return;
  if (napi_create_int32(env, ordinal, &num) == napi_ok)
    napi_set_named_property(env, err, "ordinal", num);
  emit_all(env, d, "fault", err);
}

/* Called from reset.c's completion in the env that called reset() (before
 * its promise settles) and for every env's note, whichever comes first (a
 * thread-pool completion can overtake another env's note). */
void uvn_events_emit_reset(napi_env env, struct uvn_env *ue, int ordinal, uint64_t gen) {
  struct uvn_dev *d = uvn_env_dev(ue, ordinal);
  while (d != NULL && d->resets_seen < gen) {
    napi_value v = NULL;
    int err;
    d->resets_seen++;
    uvn_devstate_reset_result(ordinal, d->resets_seen, &err);
    if (err != 0) v = uvn_events_reset_error(env, ordinal, err);
    else napi_get_null(env, &v);
    if (v != NULL) emit_all(env, d, "reset", v);
    d = uvn_env_dev(ue, ordinal); /* a listener ran */
  }
}

static void call_js(napi_env env, napi_value js_cb, void *context, void *data) {
  struct sub_cell *cell = context;
  struct uvn_note *note = data;
  (void)js_cb;
  if (env != NULL && cell->ue != NULL) {
    struct uvn_dev *d = uvn_env_dev(cell->ue, note->ordinal);
    if (note->kind == UVN_NOTE_FAULT) emit_fault(env, cell->ue, note->ordinal);
    /* In the env whose own reset runs, reset.c's completion emits it:
     * there the reset is over with its 'reset', so a reset() made once the
     * listeners have run is not refused. The note can come first (it is
     * sent before the pool thread returns); a note of an earlier reset
     * waits too, and the completion emits every generation in order. */
    else if (d == NULL || d->own_resets == 0)
      uvn_events_emit_reset(env, cell->ue, note->ordinal, note->gen);
  }
  free(note);
}

/* Node closes the tsfn at env teardown (before the env's instance data, so
 * cell->ue is still there). */
static void tsfn_finalize(napi_env env, void *data, void *hint) {
  struct sub_cell *cell = data;
  (void)env;
  (void)hint;
  uvn_devstate_unsubscribe(cell->tsfn);
  if (cell->ue) cell->ue->faults = NULL;
  free(cell);
}

int uvn_events_subscribe(napi_env env, struct uvn_env *ue) {
  struct sub_cell *cell;
  napi_value name;
  int err;

  if (ue->faults != NULL) return 0;
  if ((cell = calloc(1, sizeof(*cell))) == NULL) {
    uvn_throw_uv(env, UVCUDA_ENOMEM);
    return -1;
  }
  cell->ue = ue;
  if (napi_create_string_utf8(env, "uvcuda.fault", NAPI_AUTO_LENGTH, &name) != napi_ok ||
      napi_create_threadsafe_function(env, NULL, NULL, name, 0, 1, cell, tsfn_finalize, cell,
                                      call_js, &cell->tsfn) != napi_ok) {
    free(cell);
    return -1;
  }
  napi_unref_threadsafe_function(env, cell->tsfn);
  if ((err = uvn_devstate_subscribe(cell->tsfn)) != 0) {
    cell->ue = NULL;
    napi_release_threadsafe_function(cell->tsfn, napi_tsfn_abort);
    uvn_throw_uv(env, err);
    return -1;
  }
  ue->faults = cell->tsfn;
  return 0;
}

void uvn_events_after_settle(napi_env env, struct uvn_dev *d, int err) {
  struct uvn_env *ue;
  uvn_fault_after_error(d, err);
  /* This env learns of it now, before the continuations of the rejected
   * promise run (the announcement, queued to every env, is then a no-op
   * here; it is not waited for: an env that has nothing else to do may
   * end first). Never at teardown: JS may not run then. */
  if (d == NULL || uvcuda_cuda_result(err) == 0 || uvcuda_napi_closing(env)) return;
  if ((ue = uvn_env_get(env)) != NULL) emit_fault(env, ue, d->ordinal);
}

napi_value uvn_events_reset_error(napi_env env, int ordinal, int err) {
  napi_value e = NULL, num;
  char msg[768];
  if (uvcuda_cuda_result(err) != 0)
    snprintf(msg, sizeof(msg),
             "device %d could not be recovered: after the reset "
             "(cuDevicePrimaryCtxReset) new work on it still fails with %s (%s). "
             "This CUDA driver keeps a device fault for the life of the process: "
             "restart the process to use the device again",
             ordinal, uvcuda_err_name(err), uvcuda_strerror(err));
  else
    snprintf(msg, sizeof(msg), "device %d could not be reset: %s (%s)", ordinal,
             uvcuda_strerror(err), uvcuda_err_name(err));
  if (uvcuda_napi__error_msg(env, err, msg, &e) != napi_ok) return NULL;
  if (napi_create_int32(env, ordinal, &num) == napi_ok)
    napi_set_named_property(env, e, "ordinal", num);
  return e;
}
