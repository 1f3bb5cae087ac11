/* Device faults as one env sees them: device.health, the 'fault' event on
 * every Device object, and device.reset(). The process-wide records are
 * devstate.c's; this file subscribes each env to their announcements (a
 * thread-safe function, unref'd: it never keeps an env alive) and turns
 * them into events on the env's own thread.
 *
 * 'fault' is emitted once per fault (per device generation) on each live
 * Device object of the device in each env that has the device open, with
 * the error (code, errno, cudaResult, ordinal) as argument. 'reset' is
 * emitted there too when a reset of the device (from any env) is done,
 * with null, or the error it failed with: objects made before are gone
 * then, in every env. In the env that called reset(), 'reset' comes before
 * the promise settles. Listeners run as any EventEmitter listener does: an
 * exception thrown by one is an uncaught exception ('uncaughtException'). */
#include "addon.h"
#include "devstate.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- announcements ------------------------------------------------------ */

struct sub_cell {
  napi_threadsafe_function tsfn;
  struct addon_env *ae;
};

/* Calls emit(event, value) on every live Device object of d in this env. */
static void emit_all(napi_env env, struct dev *d, const char *event, napi_value value) {
  struct devobj *o;
  napi_value emit, name, *objs;
  napi_valuetype t;
  size_t n = 0, i;

  for (o = d->objects; o; o = o->next) n++;
  if (n == 0 || (objs = calloc(n, sizeof(*objs))) == NULL) return;
  /* Held by handles first: a listener may run the GC or open devices. */
  for (n = 0, o = d->objects; o; o = o->next) {
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

static struct dev *env_dev(struct addon_env *ae, int ordinal) {
  return ordinal >= 0 && ordinal < ae->ndevs ? ae->devs[ordinal] : NULL;
}

static void emit_fault(napi_env env, struct addon_env *ae, int ordinal) {
  struct dev *d = env_dev(ae, ordinal);
  napi_value err, num;
  uint64_t faults;
  int e;

  if (d == NULL) return;
  faults = devstate_faults(ordinal, &e);
  if (faults <= d->faults_seen || e == 0) return;
  d->faults_seen = faults;
  if (uvcuda_napi_create_error(env, e, &err) != napi_ok) return;
  if (napi_create_int32(env, ordinal, &num) == napi_ok)
    napi_set_named_property(env, err, "ordinal", num);
  emit_all(env, d, "fault", err);
}

static napi_value reset_error(napi_env env, int ordinal, int err);

/* Every reset up to generation gen not yet emitted in this env, once each
 * and in order: called from reset_complete in the env that called reset()
 * (before its promise settles) and for every env's note, whichever comes
 * first (a thread-pool completion can overtake another env's note). */
static void emit_reset(napi_env env, struct addon_env *ae, int ordinal, uint64_t gen) {
  struct dev *d = env_dev(ae, ordinal);
  while (d != NULL && d->resets_seen < gen) {
    napi_value v = NULL;
    int err;
    d->resets_seen++;
    devstate_reset_result(ordinal, d->resets_seen, &err);
    if (err != 0) v = reset_error(env, ordinal, err);
    else napi_get_null(env, &v);
    if (v != NULL) emit_all(env, d, "reset", v);
    d = env_dev(ae, ordinal); /* a listener ran */
  }
}

static void call_js(napi_env env, napi_value js_cb, void *context, void *data) {
  struct sub_cell *cell = context;
  struct fault_note *note = data;
  (void)js_cb;
  if (env != NULL && cell->ae != NULL) {
    struct dev *d = env_dev(cell->ae, note->ordinal);
    if (note->kind == NOTE_FAULT) emit_fault(env, cell->ae, note->ordinal);
    /* In the env whose own reset runs, reset_complete emits it: there the
     * reset is over with its 'reset', so a reset() made once the listeners
     * have run is not refused. The note can come first (it is sent before
     * the pool thread returns); a note of an earlier reset waits too, and
     * reset_complete emits every generation in order. */
    else if (d == NULL || d->own_resets == 0)
      emit_reset(env, cell->ae, note->ordinal, note->gen);
  }
  free(note);
}

/* Node closes the tsfn at env teardown (before the env's instance data, so
 * cell->ae is still there). */
static void tsfn_finalize(napi_env env, void *data, void *hint) {
  struct sub_cell *cell = data;
  (void)env;
  (void)hint;
  devstate_unsubscribe(cell->tsfn);
  if (cell->ae) cell->ae->faults = NULL;
  free(cell);
}

int fault_env_init(napi_env env, struct addon_env *ae) {
  struct sub_cell *cell;
  napi_value name;
  int err;

  if (ae->faults != NULL) return 0;
  if ((cell = calloc(1, sizeof(*cell))) == NULL) {
    throw_uv(env, UVCUDA_ENOMEM);
    return -1;
  }
  cell->ae = ae;
  if (napi_create_string_utf8(env, "uvcuda.fault", NAPI_AUTO_LENGTH, &name) != napi_ok ||
      napi_create_threadsafe_function(env, NULL, NULL, name, 0, 1, cell, tsfn_finalize,
                                      cell, call_js, &cell->tsfn) != napi_ok) {
    free(cell);
    return -1;
  }
  napi_unref_threadsafe_function(env, cell->tsfn);
  if ((err = devstate_subscribe(cell->tsfn)) != 0) {
    cell->ae = NULL;
    napi_release_threadsafe_function(cell->tsfn, napi_tsfn_abort);
    throw_uv(env, err);
    return -1;
  }
  ae->faults = cell->tsfn;
  return 0;
}

/* ---- detection ---------------------------------------------------------- */

int fault_check(struct dev *d, uint64_t gen) {
  int err = uvcuda_context_health((uvcuda_context_t)d->ctx);
  if (uvcuda_cuda_result(err) != 0) devstate_note_fault(d->ordinal, gen, err);
  return err;
}

void fault_after_error(napi_env env, struct dev *d, int err) {
  uint64_t gen;
  (void)env;
  if (d == NULL || uvcuda_cuda_result(err) == 0) return;
  if (devstate_enter(d->ordinal, &gen) != 0) return; /* a reset runs */
  fault_check(d, gen);
  devstate_leave(d->ordinal);
}

void fault_after_settle(napi_env env, struct dev *d, int err) {
  struct addon_env *ae;
  fault_after_error(env, d, err);
  /* This env learns of it now, before the continuations of the rejected
   * promise run (the announcement, queued to every env, is then a no-op
   * here; it is not waited for: an env that has nothing else to do may
   * end first). Never at teardown: JS may not run then. */
  if (d == NULL || uvcuda_cuda_result(err) == 0 || uvcuda_napi_closing(env)) return;
  if ((ae = addon_env_get(env)) != NULL) emit_fault(env, ae, d->ordinal);
}

/* device.health: 'healthy', or the code of the sticky error the device's
 * context has ('CUDA_ERROR_ILLEGAL_ADDRESS'). Asks the driver now (about a
 * µs) unless a fault of this generation is known (one a reset could not
 * clear: the driver keeps it although a fresh context's own queries may
 * not show it) or a reset runs (what was last recorded). */
napi_value js_device_health(napi_env env, napi_callback_info info) {
  struct res *r = this_res(env, info, RES_DEVICE, 1, NULL, NULL, NULL);
  napi_value v;
  uint64_t gen;
  int err;
  if (r == NULL) return NULL;
  err = devstate_fault_now(r->dev->ordinal);
  if (err == 0 && devstate_enter(r->dev->ordinal, &gen) == 0) {
    err = fault_check(r->dev, gen);
    devstate_leave(r->dev->ordinal);
    if (uvcuda_cuda_result(err) == 0 && err != 0) return throw_uv(env, err);
  }
  napi_create_string_utf8(env, err == 0 ? "healthy" : uvcuda_err_name(err),
                          NAPI_AUTO_LENGTH, &v);
  return v;
}

/* ---- reset -------------------------------------------------------------- */

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
  w->err = devstate_reset_run(w->ordinal, &w->gen);
  w->ran = 1;
}

/* The rejection of a reset: the error of uvcuda_device_reset, with a
 * message that says what to do. */
static napi_value reset_error(napi_env env, int ordinal, int err) {
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

static void reset_complete(napi_env env, napi_status status, void *data) {
  struct reset_work *w = data;
  struct addon_env *ae = addon_env_get(env);
  struct dev *d = ae ? env_dev(ae, w->ordinal) : NULL;
  napi_value v;
  int closing = uvcuda_napi_closing(env);
  if (d != NULL) d->own_resets--;
  /* 'reset' first: the device is usable from the event on, and its
   * listeners run before anything that waits on the promise. Every
   * generation up to the device's (no other reset can begin before
   * devstate_reset_end below): this reset's, and those whose notes waited
   * for it (call_js), this one having failed before the driver too. */
  if (!closing && ae != NULL) emit_reset(env, ae, w->ordinal, devstate_gen(w->ordinal));
  /* Over only now: a second reset() made before this promise settles (the
   * listeners' too) is refused even if the pool thread has finished. */
  devstate_reset_end(w->ordinal);
  if (!closing) { /* at env teardown JS may not run */
    if (status == napi_ok && w->ran && w->err == 0) {
      if (napi_get_undefined(env, &v) == napi_ok) napi_resolve_deferred(env, w->deferred, v);
    } else {
      v = reset_error(env, w->ordinal, w->ran ? w->err : UVCUDA_ECANCELED);
      if (v != NULL) napi_reject_deferred(env, w->deferred, v);
    }
  }
  napi_delete_async_work(env, w->work);
  free(w);
}

/* device.reset(): Promise<void>. Recovery after a fault, for every thread
 * of the process: uvcuda_device_reset on a libuv pool thread (it blocks for
 * the reset, tens of ms on an H200), holding the device's reset lock so
 * that no thread uses the device meanwhile (calls in other threads throw
 * or reject ERR_INVALID_STATE until it is done). Every stream, allocation,
 * module and kernel of the device made before is gone afterwards, in every
 * env: work on them rejects with CUDA_ERROR_CONTEXT_IS_DESTROYED, and
 * promises pending on the device reject so too (or with the fault's
 * error). Resolves when new work completed on the device; rejects with the
 * driver's error where the driver keeps the fault (the H200 with driver
 * 580: CUDA_ERROR_ILLEGAL_ADDRESS): the process must then be restarted. A
 * second reset while one runs rejects ERR_INVALID_STATE. */
static napi_value device_reset_impl(napi_env env, napi_callback_info info) {
  struct res *r = this_res(env, info, RES_DEVICE, 1, NULL, NULL, NULL);
  struct reset_work *w;
  napi_value promise = NULL, name;
  int err;

  if (r == NULL || need_driver(env) != 0) return NULL;
  if ((err = devstate_reset_begin(r->dev->ordinal)) != 0)
    return err == UVCUDA_EBUSY
               ? throw_state(env, "a reset of device %d is already running", r->dev->ordinal)
               : throw_uv(env, err);
  if ((w = calloc(1, sizeof(*w))) == NULL) {
    devstate_reset_end(r->dev->ordinal);
    return throw_uv(env, UVCUDA_ENOMEM);
  }
  w->ordinal = r->dev->ordinal;
  r->dev->own_resets++; /* reset_complete gives it back, the failures below too */
  if (napi_create_promise(env, &w->deferred, &promise) != napi_ok ||
      napi_create_string_utf8(env, "uvcuda.reset", NAPI_AUTO_LENGTH, &name) != napi_ok ||
      napi_create_async_work(env, NULL, name, reset_execute, reset_complete, w,
                             &w->work) != napi_ok) {
    r->dev->own_resets--;
    devstate_reset_end(w->ordinal);
    if (promise != NULL && napi_get_undefined(env, &name) == napi_ok)
      napi_resolve_deferred(env, w->deferred, name); /* nobody holds it */
    free(w);
    return throw_uv(env, UVCUDA_ENOMEM);
  }
  if (napi_queue_async_work(env, w->work) != napi_ok) {
    r->dev->own_resets--;
    devstate_reset_end(w->ordinal);
    napi_delete_async_work(env, w->work);
    if (napi_get_undefined(env, &name) == napi_ok) napi_resolve_deferred(env, w->deferred, name);
    free(w);
    return throw_uv(env, UVCUDA_ENOMEM);
  }
  return promise;
}

PROMISE_METHOD(device_reset, device_reset_impl)

napi_value js_device_reset(napi_env env, napi_callback_info info) {
  return device_reset(env, info);
}
