/* The 'fault' and 'reset' events of Device objects, as one env sees them.
 * The process-wide records are devstate.c's; each env subscribes to their
 * announcements (a thread-safe function, unref'd: it never keeps an env
 * alive) and turns them into events on its own thread.
 *
 * 'fault' is emitted once per fault (per device generation) on each live
 * Device object of the device in each env that has the device open, with
 * the error (code, errno, cudaResult, ordinal) as argument. 'reset' is
 * emitted there too when a reset of the device (from any env) is done,
 * with null, or the error it failed with: objects made before are gone
 * then, in every env. In the env that called reset(), 'reset' comes before
 * the promise settles (reset.c). Listeners run as any EventEmitter
 * listener does: an exception thrown by one is an uncaught exception
 * ('uncaughtException'), and the other objects still get the event. JS
 * thread of the env. */
#ifndef UVN_EVENTS_H
#define UVN_EVENTS_H

#include <node_api.h>
#include <stdint.h>

struct uvn_dev;
struct uvn_env;

/* Subscribes the env to fault and reset announcements; once per env (0
 * when it is already). 0, or throws and returns -1. */
int uvn_events_subscribe(napi_env env, struct uvn_env *ue);
/* After a promise of work on d was rejected with err (JS may run): where it
 * was the device's fault (uvn_fault_after_error), this env emits 'fault'
 * at once, before the rejection's continuations. Never at teardown. */
void uvn_events_after_settle(napi_env env, struct uvn_dev *d, int err);
/* Emits, once each and in order, every 'reset' of device `ordinal` up to
 * generation gen this env has not emitted yet. */
void uvn_events_emit_reset(napi_env env, struct uvn_env *ue, int ordinal, uint64_t gen);
/* The error of a failed reset of device `ordinal` (err: uvcuda_device_reset's),
 * with a message that says what to do, and `ordinal`; NULL if it could not
 * be made. */
napi_value uvn_events_reset_error(napi_env env, int ordinal, int err);

#endif
