/* Test utilities shared by the sim and gpu suites: the driver calls tests
 * make beyond uvcuda's own (resolved through uvcuda_driver_symbol, like a
 * user would), test kernels, streams and gates (tu.c), and the loop
 * runners with a watchdog (run.c). The per-case fixture: fixture.h. */
#ifndef UVCUDA_TU_H
#define UVCUDA_TU_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <uv.h>

#include "drvtab.h"
#include "kernels.h"
#include "uvcuda.h"

/* The driver entry points tests call (support/drvtab.h: lib/cuda-api.h's
 * lists), resolved by tu_setup. */
extern drvtab_t tu;
extern CUcontext tu_ctx;
extern CUfunction tu_fn_sleep, tu_fn_fault, tu_fn_add, tu_fn_checksum;

/* Loads the driver, resolves `tu`, retains device 0's primary context and
 * makes it current, loads the kernels. Returns 0, or 77 when no usable
 * driver/device is there (want_real: also when it is the simulation). */
int tu_setup(int want_real);
/* With UVCUDA_TEST_BACKTRACE set: a crash prints a backtrace (tu.c). */
void tu_backtrace_on_crash(void);
void tu_teardown(void);
/* Whether the loaded driver is the simulation (support/simprobe.h), as
 * tu_setup found it. */
int tu_is_simulated(void);

CUstream tu_stream(void);
void tu_stream_destroy(CUstream s);
/* GPU work of ns nanoseconds on s (kernel uvcuda_sleep_ns). */
void tu_sleep(CUstream s, uint64_t ns);
void tu_fault(CUstream s);

/* Holds a stream until tu_gate_open: cuStreamWaitValue32 on pinned memory. */
typedef struct {
  uint32_t *host;
  CUdeviceptr dptr;
} tu_gate_t;
void tu_gate_init(tu_gate_t *g);
void tu_gate_hold(tu_gate_t *g, CUstream s);
void tu_gate_open(tu_gate_t *g);
void tu_gate_free(tu_gate_t *g);

/* uv_run(DEFAULT) with an unref'd watchdog: fails the test if the loop is
 * still running after timeout_ms. Returns the elapsed ms. */
double tu_run(uv_loop_t *loop, int timeout_ms);
/* The same without cmocka (forked children): 0, or -1 if it timed out. */
int tu_run_bounded(uv_loop_t *loop, int timeout_ms);
/* Runs UV_RUN_ONCE/NOWAIT passes until *flag != 0 or timeout. */
int tu_run_until(uv_loop_t *loop, volatile int *flag, int timeout_ms);

void tu_loop_close(uv_loop_t *loop, uvcuda_loop_t *ul);

uint64_t tu_now_ns(void);

/* Runs fn in a forked child (a fresh process: driver state, sticky CUDA
 * errors); returns its exit status, or -1 if it died by a signal. */
int tu_in_child(int (*fn)(void *), void *arg);

#define TU_OK(expr)                                                      \
  do {                                                                   \
    int tu_rc_ = (expr);                                                 \
    if (tu_rc_ != 0)                                                     \
      fail_msg("%s = %d (%s: %s)", #expr, tu_rc_, uvcuda_err_name(tu_rc_), \
               uvcuda_strerror(tu_rc_));                                 \
  } while (0)
#define TU_CU(expr)                                                      \
  do {                                                                   \
    CUresult tu_r_ = (expr);                                             \
    if (tu_r_ != CUDA_SUCCESS) fail_msg("%s = CUresult %d", #expr, (int)tu_r_); \
  } while (0)

#endif
