/*
 * simcuda.h - test-control API of the SIMULATED CUDA driver (libsimcuda).
 *
 * libsimcuda stands in for libcuda.so.1 in uvcuda's tests. It is a
 * simulation: there is no GPU behind it, and nothing it reports (timings,
 * device names, attributes) is a GPU measurement. See README.md.
 *
 * A test points UVCUDA_LIBCUDA at libsimcuda.so, so uvcuda dlopen()s it and
 * resolves every driver entry point through cuGetProcAddress_v2; the test
 * also links libsimcuda directly for the functions below. Both reach the
 * same loaded object. All functions here are thread-safe; none may be called
 * from inside a host function or stream callback that the simulation runs
 * (the same rule the real driver has for its own API).
 */
#ifndef SIMCUDA_H
#define SIMCUDA_H

#include <stdint.h>

/* The driver API as uvcuda declares it (lib/cuda-api.h): no CUDA Toolkit. */
#include "cuda-api.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define SIMCUDA_API __attribute__((visibility("default")))
#else
#define SIMCUDA_API
#endif

/* cuLaunchHostFunc_v2 (CUDA 13.2 ABI, absent from the 13.0 header). The
 * simulation offers it through cuGetProcAddress only when the simulated
 * driver version is >= 13020. */
#define SIMCUDA_HOST_TASK_BLOCKING 0 /* CU_HOST_TASK_BLOCKING */
#define SIMCUDA_HOST_TASK_SPINWAIT 1 /* CU_HOST_TASK_SPINWAIT */
typedef CUresult(CUDAAPI *simcuda_pfn_cuLaunchHostFunc_v2)(
    CUstream hStream, CUhostFn fn, void *userData, unsigned int syncMode);

/* Always 1: lets a test assert it is talking to the simulation. Also what
 * cuGetProcAddress resolves for the name "uvcudaSimIsSimulation" (at any
 * version the simulated driver accepts), which no real driver knows: how a
 * program that only has uvcuda (uvcuda_driver_symbol) asks whether the
 * loaded driver is the simulation (support/simprobe.h). */
SIMCUDA_API int simcuda_is_simulation(void);

/* Version reported by cuDriverGetVersion; cuGetProcAddress refuses newer
 * requests (CUDA_ERROR_INVALID_VALUE) and hides entries newer than it. */
SIMCUDA_API void simcuda_set_driver_version(int version);

/* Number of simulated devices, 0..8. Only honoured before cuInit. */
SIMCUDA_API void simcuda_set_device_count(int n);

/* The named entry point (its cuGetProcAddress name, e.g.
 * "cuStreamWriteValue64", "cuLaunchHostFunc", "cuInit") returns `result`
 * for its next `count` calls without doing anything; count < 0 means until
 * cleared. count == 0 or result == CUDA_SUCCESS clears it. */
SIMCUDA_API void simcuda_fail(const char *entry, CUresult result, int count);
/* Its nth call from now (1: the next) returns `result`, once; the calls
 * before it work. simcuda_fail(entry, ..., 0) clears it. */
SIMCUDA_API void simcuda_fail_nth(const char *entry, CUresult result, int nth);

/* on != 0: calls of the named entry point from any thread other than the
 * caller block inside the driver until it is called again with on == 0
 * (a driver call stuck behind another thread, as real ones can be). */
SIMCUDA_API void simcuda_hold_calls(const char *entry, int on);

/* Calls of the named entry point waiting in such a hold now. */
SIMCUDA_API uint64_t simcuda_held_calls(const char *entry);

/* cuGetProcAddress reports the named entry as not found (status 1). */
SIMCUDA_API void simcuda_hide(const char *entry);

/* Clears every fail and hide setting (including those from the
 * environment). Sticky context faults are not touched: those end only when
 * the last primary-context retain is released, as on the real driver. */
SIMCUDA_API void simcuda_clear_failures(void);

/* Using a stream handle after cuStreamDestroy (before a new stream got the
 * handle back) crashes the real driver. ABORT (the default; env
 * SIMCUDA_DESTROYED_HANDLES=abort) prints "simcuda: use of destroyed stream
 * handle %p in %s" on stderr and aborts the process; ERROR
 * (SIMCUDA_DESTROYED_HANDLES=error) returns CUDA_ERROR_INVALID_HANDLE.
 * Returns the previous mode. */
#define SIMCUDA_DESTROYED_HANDLES_ERROR 0
#define SIMCUDA_DESTROYED_HANDLES_ABORT 1
SIMCUDA_API int simcuda_set_destroyed_handles(int mode);

/* Where a fault reaches: CONTEXT (the default; env
 * SIMCUDA_FAULT_SCOPE=context): only the faulting context; DEVICE
 * (SIMCUDA_FAULT_SCOPE=device, as measured on an H200): every live context
 * of the device, the primary one included, at the same moment. The setter
 * returns the previous scope. */
#define SIMCUDA_FAULT_SCOPE_CONTEXT 0
#define SIMCUDA_FAULT_SCOPE_DEVICE 1
SIMCUDA_API int simcuda_set_fault_scope(int scope);
SIMCUDA_API int simcuda_fault_scope(void);

/* on != 0 (env SIMCUDA_BUSY_STREAMS_HIDE_FAULT=1; off by default): a
 * stream that had work queued or running when its context faulted answers
 * cuStreamQuery with CUDA_ERROR_NOT_READY forever; idle streams, new
 * enqueues and every other call of the context report the fault. Returns
 * the previous setting. */
SIMCUDA_API int simcuda_set_busy_streams_hide_fault(int on);
SIMCUDA_API int simcuda_busy_streams_hide_fault(void);

/* Enqueue a simulated kernel that keeps the stream busy for ns. Same
 * handle rules and errors as cuLaunchKernel. */
SIMCUDA_API CUresult simcuda_enqueue_work(CUstream s, uint64_t ns);

/* Enqueue an op that, when the stream reaches it, puts the stream's
 * context into the sticky error `code` (e.g. CUDA_ERROR_ILLEGAL_ADDRESS). */
SIMCUDA_API CUresult simcuda_enqueue_fault(CUstream s, CUresult code);

/* Host functions (cuLaunchHostFunc and cuLaunchHostFunc_v2) run so far,
 * each counted as it starts (what it wakes sees it counted).
 * cuStreamAddCallback callbacks are not counted. */
SIMCUDA_API uint64_t simcuda_hostfn_count(void);

/* cuLaunchHostFunc_v2 functions run so far with the given sync mode
 * (SIMCUDA_HOST_TASK_BLOCKING or SIMCUDA_HOST_TASK_SPINWAIT), counted
 * as they start. */
SIMCUDA_API uint64_t simcuda_hostfn_v2_count(int sync_mode);

/* cuStreamWriteValue32/64 writes that actually landed. */
SIMCUDA_API uint64_t simcuda_memop_count(void);

/* Calls made to a named entry point so far (all ABI versions together,
 * including calls refused by simcuda_fail). Unknown names give 0. */
SIMCUDA_API uint64_t simcuda_call_count(const char *entry);

/* Streams made by cuStreamCreate whose worker has not yet exited and freed
 * them (a destroyed stream counts until its queued work has drained).
 * Per-context default streams are not counted. */
SIMCUDA_API int simcuda_live_streams(void);

/* Wait until every stream's queue is empty, nothing is executing, and every
 * destroyed stream has been freed. Blocks for as long as some stream waits
 * on a cuStreamWaitValue32 that nobody satisfies. */
SIMCUDA_API void simcuda_quiesce(void);

#ifdef __cplusplus
}
#endif

#endif /* SIMCUDA_H */
