/* What the process knows about each CUDA device, shared by every env (the
 * main thread and each worker) and by the addon's threads:
 *
 *  - the reset lock: every use of a device's CUDA objects holds it for
 *    reading (JS threads try, and refuse the call while a reset runs; the
 *    reaper and pool threads wait); device.reset() holds it for writing
 *    while uvcuda_device_reset runs, so that no thread uses the device then
 *    ("no thread may use the device while this runs", uvcuda.h);
 *  - the generation: how many resets the device had. A CUDA object belongs
 *    to the generation it was made in; a reset destroys every object of the
 *    device, and a handle of an older generation is never passed to the
 *    driver again (the driver hands the same stream handles and addresses
 *    out again);
 *  - faults: at most one per generation, recorded by whichever thread sees
 *    it first (a promise rejected with a CUDA error, device.health, or the
 *    watcher thread, which polls uvcuda_context_health of the open devices
 *    every 100 ms), then announced to every subscribed env, which emits
 *    'fault' on its Device objects (events.c); the end of a reset is
 *    announced too ('reset');
 *  - peer access: which device's work may use which other device's memory
 *    (device.enablePeerAccess), for the current generations of both.
 *
 * Ordinals are the driver's; the table is sized by cuDeviceGetCount once the
 * driver is loaded. Any thread unless marked. */
#ifndef UVN_DEVSTATE_H
#define UVN_DEVSTATE_H

#include <node_api.h>
#include <stdint.h>

#include "driver.h"

/* Loads the driver and sizes the table once per process: 0 or a uvcuda
 * error. */
int uvn_devstate_init(void);

/* Read side of the reset lock. uvn_devstate_enter: 0 with *gen the current
 * generation, or UVCUDA_EBUSY while the device is being reset (nothing
 * held). uvn_devstate_enter_wait blocks instead (threads other than JS
 * ones). An ordinal the table does not know holds nothing (*gen 0). */
int uvn_devstate_enter(int ordinal, uint64_t *gen);
void uvn_devstate_enter_wait(int ordinal, uint64_t *gen);
void uvn_devstate_leave(int ordinal);
/* The current generation, without the lock (a reset may end right after). */
uint64_t uvn_devstate_gen(int ordinal);

/* An env opened (retained) / let go of the device; ctx is its primary
 * context, which the watcher polls while some env has it open. */
void uvn_devstate_open(int ordinal, CUcontext ctx);
void uvn_devstate_close(int ordinal);

/* Reset: _begin on the JS thread (UVCUDA_EBUSY if one is running), then
 * _run on a pool thread: takes the lock for writing, uvcuda_device_reset,
 * a new generation where the reset reached the driver (*gen: it, else 0;
 * the 'reset' note carries it). Returns its error. The device is usable
 * again once _run is done (the 'reset' event); a second reset is refused
 * until _end, on the JS thread, after the calling env emitted 'reset' and
 * just before it settles the first one's promise (or it will not run). */
int uvn_devstate_reset_begin(int ordinal);
int uvn_devstate_reset_run(int ordinal, uint64_t *gen);
/* The result of the reset that began generation gen: 1 with *err, or 0 if
 * it is no longer kept. */
int uvn_devstate_reset_result(int ordinal, uint64_t gen, int *err);
void uvn_devstate_reset_end(int ordinal);

/* Records that the device, in generation gen (the caller holds the read
 * lock), has the sticky error err; the first record of a generation is a
 * new fault, announced to every subscriber. */
void uvn_devstate_note_fault(int ordinal, uint64_t gen, int err);
/* Faults recorded so far and the latest one's error (0 if none). */
uint64_t uvn_devstate_faults(int ordinal, int *err);
/* The error of a fault recorded in the current generation, else 0. */
int uvn_devstate_fault_now(int ordinal);

/* Announcements: each subscribed tsfn is called with a malloc'ed struct
 * uvn_note (free it in the tsfn's call_js): a new fault recorded
 * (uvn_devstate_faults says which), or a reset done
 * (uvn_devstate_reset_result says how). */
enum { UVN_NOTE_FAULT = 1, UVN_NOTE_RESET };
struct uvn_note {
  int kind;
  int ordinal;
  uint64_t gen; /* a reset: the generation it began */
};
/* 0, or UVCUDA_ENOMEM. */
int uvn_devstate_subscribe(napi_threadsafe_function tsfn);
void uvn_devstate_unsubscribe(napi_threadsafe_function tsfn);

/* Peer access (device.enablePeerAccess): the primary contexts of `from`
 * and `peer` (the caller holds both reset locks for reading, generations
 * from_gen and peer_gen) were given access from `from` to the memory of
 * `peer`. It lasts until either device is reset (a new generation). */
void uvn_devstate_peer_enable(int from, uint64_t from_gen, int peer, uint64_t peer_gen);
/* 1 if work on device `from` may use memory of device `peer`: the same
 * device, or access enabled in the current generations of both. */
int uvn_devstate_peer_ok(int from, int peer);

#endif
