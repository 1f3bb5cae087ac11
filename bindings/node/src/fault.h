/* Finding a device's faults: a sticky error of its context, recorded
 * process-wide (devstate.h) by whichever thread sees it first, then
 * announced to every env (events.h). Any thread unless marked. */
#ifndef UVN_FAULT_H
#define UVN_FAULT_H

#include <node_api.h>
#include <stdint.h>

struct uvn_dev;

/* Checks d's health (holding its reset lock, generation gen) and records a
 * fault; returns the health: 0 or UVCUDA_ECUDA(r) (or the error of the
 * check itself). */
int uvn_fault_check(struct uvn_dev *d, uint64_t gen);
/* After a call on d failed with err: was it the device's fault? Checks and
 * records it where err is a CUDA error (d NULL: nothing). */
void uvn_fault_after_error(struct uvn_dev *d, int err);
/* device.health: 'healthy', or the code of the sticky error the device's
 * context has ('CUDA_ERROR_ILLEGAL_ADDRESS'). Asks the driver now (about
 * a µs) unless a fault of this generation is known (one a reset could not
 * clear: the driver keeps it although a fresh context's own queries may
 * not show it) or a reset runs (what was last recorded). JS thread. */
napi_value uvn_fault_health(napi_env env, struct uvn_dev *d);

#endif
