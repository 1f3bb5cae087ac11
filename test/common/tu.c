#include "tu.h"

#include "fixture.h"
#include "simprobe.h"

#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

drvtab_t tu;
CUcontext tu_ctx;
CUfunction tu_fn_sleep, tu_fn_fault, tu_fn_add, tu_fn_checksum;
static CUmodule module;
static CUdevice device;
static int simulated;

static int resolve(void) {
  drvtab_miss_t miss;
  if (drvtab_resolve(&tu, &miss) == 0) return 0;
  fprintf(stderr, "tu: missing %s\n", miss.name);
  return 1;
}

int tu_setup(int want_real) {
  uvcuda_driver_info_t info;
  int n = 0;

  if (uvcuda_driver_info(&info) != 0) {
    fprintf(stderr, "tu: no CUDA driver (%s): skipping\n",
            uvcuda_driver_dlerror() ? uvcuda_driver_dlerror() : "?");
    return 77;
  }
  simulated = support_driver_is_simulation();
  if (want_real && simulated) {
    fprintf(stderr, "tu: the loaded driver is the simulation: skipping\n");
    return 77;
  }
  if (resolve() != 0) return 1;
  if (tu.cuDeviceGetCount(&n) != CUDA_SUCCESS || n < 1) {
    fprintf(stderr, "tu: no CUDA device: skipping\n");
    return 77;
  }
  if (tu.cuDeviceGet(&device, 0) != CUDA_SUCCESS ||
      tu.cuDevicePrimaryCtxRetain(&tu_ctx, device) != CUDA_SUCCESS ||
      tu.cuCtxSetCurrent(tu_ctx) != CUDA_SUCCESS)
    return 1;
  if (tu.cuModuleLoadData(&module, uvcuda_test_kernels_ptx) != CUDA_SUCCESS ||
      tu.cuModuleGetFunction(&tu_fn_sleep, module, "uvcuda_sleep_ns") ||
      tu.cuModuleGetFunction(&tu_fn_fault, module, "uvcuda_fault") ||
      tu.cuModuleGetFunction(&tu_fn_add, module, "uvcuda_add_u32") ||
      tu.cuModuleGetFunction(&tu_fn_checksum, module, "uvcuda_checksum_u8")) {
    fprintf(stderr, "tu: loading the test kernels failed\n");
    return 1;
  }
  return 0;
}

void tu_teardown(void) {
  if (module) tu.cuModuleUnload(module);
  module = NULL;
  if (tu_ctx) tu.cuDevicePrimaryCtxRelease(device);
  tu_ctx = NULL;
}

int tu_is_simulated(void) { return simulated; }

CUstream tu_stream(void) {
  CUstream s = NULL;
  TU_CU(tu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  tu_fx_note_stream(s, 1);
  return s;
}

void tu_stream_destroy(CUstream s) {
  tu_fx_note_stream(s, 0);
  tu.cuStreamSynchronize(s);
  tu.cuStreamDestroy(s);
}

void tu_sleep(CUstream s, uint64_t ns) {
  void *args[] = {&ns};
  TU_CU(tu.cuLaunchKernel(tu_fn_sleep, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
}

void tu_fault(CUstream s) {
  TU_CU(tu.cuLaunchKernel(tu_fn_fault, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL));
}

void tu_gate_init(tu_gate_t *g) {
  void *p = NULL;
  TU_CU(tu.cuMemHostAlloc(&p, 64, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
  g->host = p;
  *g->host = 0;
  tu_fx_note_gate(g->host, 1);
  TU_CU(tu.cuMemHostGetDevicePointer(&g->dptr, p, 0));
}

void tu_gate_hold(tu_gate_t *g, CUstream s) {
  __atomic_store_n(g->host, 0, __ATOMIC_RELEASE);
  TU_CU(tu.cuStreamWaitValue32(s, g->dptr, 1, CU_STREAM_WAIT_VALUE_GEQ));
}

void tu_gate_open(tu_gate_t *g) { __atomic_store_n(g->host, 1, __ATOMIC_RELEASE); }

void tu_gate_free(tu_gate_t *g) {
  if (g->host) tu_fx_note_gate(g->host, 0);
  if (g->host) tu.cuMemFreeHost(g->host);
  g->host = NULL;
}

uint64_t tu_now_ns(void) { return uv_hrtime(); }

int tu_in_child(int (*fn)(void *), void *arg) {
  int st;
  pid_t pid;
  fflush(NULL);
  pid = fork();
  if (pid == 0) {
    alarm(60); /* a hang in a child fails the test instead of CI */
    _exit(fn(arg));
  }
  if (pid < 0 || waitpid(pid, &st, 0) != pid) return -2;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Where a crash happened, for a GPU run with no debugger that stops in time
 * (cuda-gdb changed the timing enough to hide one): a backtrace on stderr,
 * then exit 139. cmocka installs its own handler around each case (one that
 * longjmps back into the case, wrong from another thread): call this at the
 * start of the case. Only where UVCUDA_TEST_BACKTRACE is set; with
 * UVCUDA_TEST_CORE too, the signal is then raised again for a core. */
static void crash(int sig) {
  void *pc[64];
  char line[96];
  int n = backtrace(pc, 64), len;
  len = snprintf(line, sizeof(line), "crash: signal %d in thread %ld (pid %ld)\n", sig,
                 (long)syscall(SYS_gettid), (long)getpid());
  if (write(2, line, (size_t)len) < 0) _exit(139);
  backtrace_symbols_fd(pc, n, 2);
  if (getenv("UVCUDA_TEST_CORE")) { /* and a core file, where allowed */
    signal(sig, SIG_DFL);
    raise(sig);
  }
  _exit(139);
}

void tu_backtrace_on_crash(void) {
  struct sigaction sa;
  if (getenv("UVCUDA_TEST_BACKTRACE") == NULL) return;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = crash;
  sigaction(SIGSEGV, &sa, NULL);
  sigaction(SIGBUS, &sa, NULL);
  sigaction(SIGABRT, &sa, NULL);
}
