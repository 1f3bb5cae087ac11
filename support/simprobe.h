/* Whether the loaded CUDA driver is uvcuda's simulated driver (test/sim),
 * for the tests, the bench, the examples and the bindings: they say so
 * where a number or a name could be taken for a GPU's. The library does not
 * know the simulation: the question goes to the driver itself, through the
 * public uvcuda_driver_symbol, for a name that only the simulation's
 * cuGetProcAddress resolves. No CUDA Toolkit needed. */
#ifndef UVCUDA_SUPPORT_SIMPROBE_H
#define UVCUDA_SUPPORT_SIMPROBE_H

/* The simulation's entry point: int (*)(void), returns 1. A real driver's
 * cuGetProcAddress reports the name as not found. */
#define SUPPORT_SIM_PROBE_NAME "uvcudaSimIsSimulation"
/* The ABI version asked for: uvcuda's oldest supported driver (12.0). */
#define SUPPORT_SIM_PROBE_VERSION 12000

/* 1 if the driver loads and is the simulation, else 0 (a real driver, or
 * none: uvcuda_driver_load's error is not reported here). Loads the driver
 * (uvcuda_driver_load) if nothing has yet. Any thread. */
int support_driver_is_simulation(void);

#endif
