/* driver-facts: measures the CUDA driver behaviours uvcuda's design rests on
 * (fault visibility per stream, fault spread across contexts, which calls
 * wait for the device, what disturbs a stream capture, primary-context
 * reset, stream ids). Plain driver API, no uvcuda. One experiment per
 * process (sticky errors): driver-facts <experiment> [args]. GPU only.
 *   cc -O2 -I/usr/local/cuda/include driver-facts.c -o driver-facts \
 *      -L/usr/local/cuda/lib64/stubs -lcuda -lpthread */
#define _GNU_SOURCE
#include <cuda.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *ptx =
    ".version 8.0\n.target sm_80\n.address_size 64\n"
    ".visible .entry sleep_ns(.param .u64 ns)\n{\n .reg .u64 %rd<5>;\n .reg .pred %p;\n"
    " ld.param.u64 %rd1, [ns];\n mov.u64 %rd2, %globaltimer;\nL:\n mov.u64 %rd3, %globaltimer;\n"
    " sub.u64 %rd4, %rd3, %rd2;\n setp.lt.u64 %p, %rd4, %rd1;\n @%p bra L;\n ret;\n}\n"
    ".visible .entry fault()\n{\n .reg .u32 %r1;\n .reg .u64 %rd1;\n mov.u32 %r1, 1;\n"
    " mov.u64 %rd1, 16;\n st.global.u32 [%rd1], %r1;\n ret;\n}\n";

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}
#define CK(x) do { CUresult r_ = (x); if (r_) { const char *n_ = "?"; cuGetErrorName(r_, &n_); \
  printf("FAIL %s = %d %s (line %d)\n", #x, (int)r_, n_, __LINE__); fflush(stdout); exit(1);} } while (0)
static const char *en(CUresult r) { const char *n = "?"; cuGetErrorName(r, &n); return n; }

static CUdevice dev;
static CUcontext pctx;
typedef struct { CUmodule m; CUfunction sleep, fault; } kern_t;

static void kern_load(kern_t *k) {
  CK(cuModuleLoadData(&k->m, ptx));
  CK(cuModuleGetFunction(&k->sleep, k->m, "sleep_ns"));
  CK(cuModuleGetFunction(&k->fault, k->m, "fault"));
}
static void ksleep(kern_t *k, CUstream s, uint64_t ns) {
  void *a[] = {&ns};
  CK(cuLaunchKernel(k->sleep, 1, 1, 1, 1, 1, 1, 0, s, a, NULL));
}
static void kfault(kern_t *k, CUstream s) {
  CK(cuLaunchKernel(k->fault, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL));
}
static CUstream mkstream(void) {
  CUstream s;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  return s;
}
typedef struct { uint32_t *h; CUdeviceptr d; } gate_t;
static void gate_init(gate_t *g) {
  CK(cuMemHostAlloc((void **)&g->h, 64, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
  *g->h = 0;
  CK(cuMemHostGetDevicePointer(&g->d, g->h, 0));
}
static void gate_hold(gate_t *g, CUstream s) { CK(cuStreamWaitValue32(s, g->d, 1, CU_STREAM_WAIT_VALUE_GEQ)); }
static void gate_open(gate_t *g) { __atomic_store_n(g->h, 1, __ATOMIC_RELEASE); }

static void setup(void) {
  CK(cuInit(0));
  CK(cuDeviceGet(&dev, 0));
  CK(cuDevicePrimaryCtxRetain(&pctx, dev));
  CK(cuCtxSetCurrent(pctx));
}

/* 1: which query reports a sticky fault, and when, for streams blocked
 * behind a gate, a long kernel, idle streams and fresh enqueues. */
static void fault_visibility(void) {
  kern_t k;
  gate_t g;
  CUstream gated, longk, idle, fs, enq;
  CUevent ev;
  const char *what[] = {"query(gated stream)", "query(3s-kernel stream)", "query(idle stream)",
                        "query(faulting stream)", "eventQuery(done event)", "enqueue writeValue32",
                        "cuStreamIsCapturing(idle)", "cuCtxSynchronize", "cuStreamCreate"};
  enum { N = 9 };
  double first[N];
  CUresult code[N];
  int i;
  uint32_t *slot;
  CUdeviceptr dslot;
  setup();
  gated = mkstream(); longk = mkstream(); idle = mkstream(); fs = mkstream(); enq = mkstream();
  kern_load(&k);
  gate_init(&g);
  CK(cuMemHostAlloc((void **)&slot, 64, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
  CK(cuMemHostGetDevicePointer(&dslot, slot, 0));
  gate_hold(&g, gated);
  ksleep(&k, longk, 3000000000ull);
  CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
  CK(cuEventRecord(ev, idle));
  CK(cuStreamSynchronize(idle));
  for (i = 0; i < N; i++) first[i] = -1;
  double t0 = now_us();
  kfault(&k, fs);
  int polls = 0;
  while (now_us() - t0 < 2500000) {
    CUresult r[N];
    CUstreamCaptureStatus cs;
    r[0] = cuStreamQuery(gated);
    r[1] = cuStreamQuery(longk);
    r[2] = cuStreamQuery(idle);
    r[3] = cuStreamQuery(fs);
    r[4] = cuEventQuery(ev);
    r[5] = (polls % 64 == 0) ? cuStreamWriteValue32(enq, dslot, (cuuint32_t)polls, 0) : CUDA_SUCCESS;
    r[6] = cuStreamIsCapturing(idle, &cs);
    r[7] = CUDA_SUCCESS;
    r[8] = CUDA_SUCCESS;
    if (r[2] != CUDA_SUCCESS && first[7] < 0) { r[7] = cuCtxSynchronize(); }
    if (r[2] != CUDA_SUCCESS && first[8] < 0) { CUstream x; r[8] = cuStreamCreate(&x, CU_STREAM_NON_BLOCKING); }
    double t = now_us() - t0;
    for (i = 0; i < N; i++)
      if (first[i] < 0 && r[i] != CUDA_SUCCESS && r[i] != CUDA_ERROR_NOT_READY) { first[i] = t; code[i] = r[i]; }
    polls++;
    int all = 1;
    for (i = 0; i < N; i++) all &= first[i] >= 0;
    if (all) break;
    usleep(20);
  }
  for (i = 0; i < N; i++) {
    if (first[i] >= 0) printf("fault_visibility: %-28s error %s at %.1f ms after the faulting launch\n", what[i], en(code[i]), first[i] / 1000);
    else printf("fault_visibility: %-28s no error within 2.5 s\n", what[i]);
  }
  printf("fault_visibility: polls %d\n", polls);
  gate_open(&g);
}

/* 2: does a fault in one context reach other contexts of the same device?
 * nctx contexts made with cuCtxCreate (busy: each runs 1 ms kernels) plus
 * the primary context; the fault is in created context 0. */
static void fault_spread(int nctx, int busy) {
  CUcontext c[65];
  CUstream s[65], idle[65];
  kern_t k[65];
  double first[65];
  CUresult code[65];
  int i, n = nctx + 1;
  setup();
  for (i = 0; i < n; i++) {
    if (i < nctx) CK(cuCtxCreate(&c[i], NULL, 0, dev));
    else c[i] = pctx;
    CK(cuCtxSetCurrent(c[i]));
    kern_load(&k[i]);
    s[i] = mkstream();
    idle[i] = mkstream();
    first[i] = -1;
    if (busy) { int j; for (j = 0; j < 400; j++) ksleep(&k[i], s[i], 1000000); }
  }
  CK(cuCtxSetCurrent(c[0]));
  double t0 = now_us();
  kfault(&k[0], idle[0]);
  while (now_us() - t0 < 1500000) {
    for (i = 0; i < n; i++) {
      if (first[i] >= 0) continue;
      cuCtxSetCurrent(c[i]);
      CUresult r = cuStreamQuery(idle[i]);
      if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY) { first[i] = now_us() - t0; code[i] = r; }
    }
    usleep(50);
  }
  for (i = 0; i < n; i++) {
    if (first[i] >= 0) printf("fault_spread(%d created%s): ctx %d%s error %s at %.1f ms\n", nctx, busy ? ", busy" : ", idle", i, i == nctx ? " (primary)" : "", en(code[i]), first[i] / 1000);
    else printf("fault_spread(%d created%s): ctx %d%s healthy after 1.5 s\n", nctx, busy ? ", busy" : ", idle", i, i == nctx ? " (primary)" : "");
  }
}

/* 3: which calls wait for the device, with a 1 s kernel running in another
 * context (or the same one); and what the cheap calls cost. */
static void blocking_calls(int same_ctx) {
  kern_t k;
  CUcontext other;
  CUstream busy;
  void *p;
  double t;
  setup();
  if (same_ctx) other = pctx; else CK(cuCtxCreate(&other, NULL, 0, dev));
  CK(cuCtxSetCurrent(other));
  kern_load(&k);
  busy = mkstream();
  CK(cuCtxSetCurrent(pctx));
  { void *w; CK(cuMemHostAlloc(&w, 4096, CU_MEMHOSTALLOC_PORTABLE)); CK(cuMemFreeHost(w)); }
  CK(cuCtxSetCurrent(other));
  ksleep(&k, busy, 1000000000ull);
  CK(cuCtxSetCurrent(pctx));
  usleep(1000);
#define T(label, call) do { t = now_us(); CUresult r_ = (call); printf("blocking(%s): %-34s %9.1f us (%s)\n", same_ctx ? "same ctx" : "other ctx", label, now_us() - t, en(r_)); } while (0)
  T("cuMemHostAlloc 64KiB", cuMemHostAlloc(&p, 65536, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
  CUdeviceptr d;
  T("cuMemHostGetDevicePointer", cuMemHostGetDevicePointer(&d, p, 0));
  void *q = aligned_alloc(4096, 65536);
  T("cuMemHostRegister 64KiB", cuMemHostRegister(q, 65536, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP));
  CUstream s2;
  T("cuStreamCreate", cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  CUevent e2;
  T("cuEventCreate", cuEventCreate(&e2, CU_EVENT_DISABLE_TIMING));
  T("cuEventDestroy", cuEventDestroy(e2));
  T("cuStreamDestroy (idle)", cuStreamDestroy(s2));
  T("cuMemHostUnregister", cuMemHostUnregister(q));
  T("cuMemFreeHost", cuMemFreeHost(p));
  printf("blocking(%s): kernel still running after these: %s\n", same_ctx ? "same ctx" : "other ctx",
         cuStreamQuery(busy) == CUDA_ERROR_NOT_READY ? "yes" : "no");
  if (!same_ctx) {
    CUstream s = mkstream();
    unsigned long long id;
    CUcontext cx;
    int i, n = 100000;
    t = now_us(); for (i = 0; i < n; i++) cuStreamGetId(s, &id); printf("cost: cuStreamGetId %.3f us\n", (now_us() - t) / n);
    t = now_us(); for (i = 0; i < n; i++) cuCtxGetId(pctx, &id); printf("cost: cuCtxGetId %.3f us\n", (now_us() - t) / n);
    t = now_us(); for (i = 0; i < n; i++) cuStreamGetCtx(s, &cx); printf("cost: cuStreamGetCtx %.3f us\n", (now_us() - t) / n);
    t = now_us(); for (i = 0; i < n; i++) cuCtxGetCurrent(&cx); printf("cost: cuCtxGetCurrent %.3f us\n", (now_us() - t) / n);
    t = now_us(); for (i = 0; i < n; i++) cuStreamQuery(s); printf("cost: cuStreamQuery (idle) %.3f us\n", (now_us() - t) / n);
    CUstreamCaptureStatus cs;
    t = now_us(); for (i = 0; i < n; i++) cuStreamIsCapturing(s, &cs); printf("cost: cuStreamIsCapturing %.3f us\n", (now_us() - t) / n);
    t = now_us(); for (i = 0; i < n; i++) cuStreamGetId(NULL, &id); printf("cost: cuStreamGetId(NULL) %.3f us, id %llu\n", (now_us() - t) / n, id);
    /* ids and handle reuse */
    int reused = 0;
    unsigned long long last = 0;
    CUstream prev = NULL;
    int idmono = 1;
    for (i = 0; i < 1000; i++) {
      CUstream x = mkstream();
      CK(cuStreamGetId(x, &id));
      if (x == prev) reused++;
      if (id <= last) idmono = 0;
      last = id;
      prev = x;
      CK(cuStreamDestroy(x));
    }
    printf("streams: 1000 create/destroy: same handle as the previous one %d times; ids strictly increasing: %s\n", reused, idmono ? "yes" : "no");
    CUcontext c2;
    unsigned long long id1, id2;
    CK(cuCtxCreate(&c2, NULL, 0, dev)); CK(cuCtxGetId(c2, &id1)); CK(cuCtxDestroy(c2));
    CUcontext c3;
    CK(cuCtxCreate(&c3, NULL, 0, dev)); CK(cuCtxGetId(c3, &id2));
    printf("contexts: create/destroy/create: same handle %s, ids %llu then %llu\n", c2 == c3 ? "yes" : "no", id1, id2);
    CK(cuCtxSetCurrent(pctx));
  }
}

/* 4: what another thread may do while a stream captures. */
static int cap_mode;
static const char *cap_call;
static volatile int cap_phase;
static CUstream cap_private;
static CUevent cap_ev;
static CUresult cap_other_r;
static int cap_relaxed;
static void *cap_thread(void *arg) {
  (void)arg;
  cuCtxSetCurrent(pctx);
  if (cap_relaxed) { CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED; cuThreadExchangeStreamCaptureMode(&m); }
  while (cap_phase == 0) {}
  if (!strcmp(cap_call, "query-private")) cap_other_r = cuStreamQuery(cap_private);
  else if (!strcmp(cap_call, "event-query")) cap_other_r = cuEventQuery(cap_ev);
  else if (!strcmp(cap_call, "memhostalloc")) { void *p; cap_other_r = cuMemHostAlloc(&p, 65536, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP); }
  else if (!strcmp(cap_call, "memhostregister")) { void *p = aligned_alloc(4096, 65536); cap_other_r = cuMemHostRegister(p, 65536, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP); }
  else if (!strcmp(cap_call, "streamcreate")) { CUstream s; cap_other_r = cuStreamCreate(&s, CU_STREAM_NON_BLOCKING); }
  else if (!strcmp(cap_call, "eventcreate")) { CUevent e; cap_other_r = cuEventCreate(&e, CU_EVENT_DISABLE_TIMING); }
  else if (!strcmp(cap_call, "write-other-stream")) { static uint64_t *h; CUdeviceptr d; cuMemHostAlloc((void **)&h, 64, CU_MEMHOSTALLOC_DEVICEMAP); cuMemHostGetDevicePointer(&d, h, 0);
    cap_other_r = cuStreamWriteValue64(cap_private, d, 1, 0); }
  else if (!strcmp(cap_call, "streamgetid")) { unsigned long long id; cap_other_r = cuStreamGetId(cap_private, &id); }
  else cap_other_r = CUDA_SUCCESS;
  cap_phase = 2;
  return NULL;
}
static void capture(const char *mode, const char *call) {
  kern_t k;
  gate_t g;
  CUstream s;
  uint64_t *slot;
  CUdeviceptr dslot;
  CUgraph graph = NULL;
  CUgraphExec exec;
  pthread_t th;
  setup();
  kern_load(&k);
  gate_init(&g);
  cap_mode = !strcmp(mode, "global") ? CU_STREAM_CAPTURE_MODE_GLOBAL : !strcmp(mode, "thread") ? CU_STREAM_CAPTURE_MODE_THREAD_LOCAL : CU_STREAM_CAPTURE_MODE_RELAXED;
  cap_call = call;
  s = mkstream();
  cap_private = mkstream();
  CK(cuMemHostAlloc((void **)&slot, 64, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
  CK(cuMemHostGetDevicePointer(&dslot, slot, 0));
  gate_hold(&g, s);
  CK(cuStreamWriteValue64(s, dslot, 7, 0)); /* a pending marker */
  CK(cuEventCreate(&cap_ev, CU_EVENT_DISABLE_TIMING));
  CK(cuEventRecord(cap_ev, s));
  pthread_create(&th, NULL, cap_thread, NULL);
  CK(cuStreamBeginCapture(s, (CUstreamCaptureMode)cap_mode));
  ksleep(&k, s, 1000);
  cap_phase = 1;
  while (cap_phase != 2) {}
  pthread_join(th, NULL);
  { void *a[] = {&(uint64_t){1000}}; cuLaunchKernel(k.sleep, 1, 1, 1, 1, 1, 1, 0, s, a, NULL); }
  CUresult er = cuStreamEndCapture(s, &graph);
  CUresult lr = CUDA_ERROR_INVALID_VALUE;
  if (er == CUDA_SUCCESS && graph) {
    lr = cuGraphInstantiate(&exec, graph, 0);
    if (lr == CUDA_SUCCESS) lr = cuGraphLaunch(exec, s);
  }
  gate_open(&g);
  CUresult sr = cuStreamSynchronize(s);
  printf("capture(%s%s): other thread's %-20s -> %-36s; cuStreamEndCapture %s; graph launch %s; marker landed %s\n",
         mode, cap_relaxed ? ", other thread relaxed" : "", call, en(cap_other_r), en(er), en(lr), __atomic_load_n(slot, __ATOMIC_ACQUIRE) == 7 ? "yes" : "no");
  (void)sr;
}

/* 4b: what the capturing thread itself may call (in its own mode, or
 * after switching itself to RELAXED) without breaking its capture. */
static void capture_self(const char *mode, const char *call, int relax) {
  kern_t k;
  CUstream s, priv;
  CUevent ev;
  CUgraph graph = NULL;
  CUgraphExec exec;
  CUresult r = CUDA_SUCCESS, er, lr = CUDA_ERROR_INVALID_VALUE;
  CUstreamCaptureMode m;
  setup();
  kern_load(&k);
  s = mkstream();
  priv = mkstream();
  CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
  CK(cuEventRecord(ev, priv));
  CK(cuStreamSynchronize(priv));
  m = !strcmp(mode, "global") ? CU_STREAM_CAPTURE_MODE_GLOBAL : !strcmp(mode, "thread") ? CU_STREAM_CAPTURE_MODE_THREAD_LOCAL : CU_STREAM_CAPTURE_MODE_RELAXED;
  CK(cuStreamBeginCapture(s, m));
  ksleep(&k, s, 1000);
  if (relax) { CUstreamCaptureMode x = CU_STREAM_CAPTURE_MODE_RELAXED; cuThreadExchangeStreamCaptureMode(&x); }
  if (!strcmp(call, "getid")) { unsigned long long id; r = cuStreamGetId(s, &id); }
  else if (!strcmp(call, "getctx")) { CUcontext c; r = cuStreamGetCtx(s, &c); }
  else if (!strcmp(call, "iscapturing")) { CUstreamCaptureStatus cs; r = cuStreamIsCapturing(s, &cs); }
  else if (!strcmp(call, "query-private")) r = cuStreamQuery(priv);
  else if (!strcmp(call, "event-query")) r = cuEventQuery(ev);
  else if (!strcmp(call, "memhostregister")) { void *p = aligned_alloc(4096, 4096); r = cuMemHostRegister(p, 4096, CU_MEMHOSTREGISTER_DEVICEMAP); }
  if (relax) { CUstreamCaptureMode x = m; cuThreadExchangeStreamCaptureMode(&x); }
  { uint64_t ns = 1000; void *a[] = {&ns}; cuLaunchKernel(k.sleep, 1, 1, 1, 1, 1, 1, 0, s, a, NULL); }
  er = cuStreamEndCapture(s, &graph);
  if (er == CUDA_SUCCESS && graph) {
    lr = cuGraphInstantiate(&exec, graph, 0);
    if (lr == CUDA_SUCCESS) lr = cuGraphLaunch(exec, s);
    if (lr == CUDA_SUCCESS) lr = cuStreamSynchronize(s);
  }
  printf("capture-self(%s%s): %-16s -> %-36s; cuStreamEndCapture %s; graph runs %s\n", mode,
         relax ? ", relaxed around the call" : "", call, en(r), en(er), en(lr));
}

/* 5: recovering from a fault in the same process: variant "reset"
 * (cuDevicePrimaryCtxReset), "release" (the last cuDevicePrimaryCtxRelease),
 * "create" (a new cuCtxCreate context); retried for 3 s. */
static sigjmp_buf jb;
static void on_segv(int sig) { (void)sig; siglongjmp(jb, 1); }
static void recover(const char *how) {
  kern_t k;
  CUstream s;
  unsigned long long id0, id1 = 0;
  void *pinned;
  CUcontext after = NULL;
  CUresult r;
  double t0;
  int tries = 0;
  setup();
  kern_load(&k);
  s = mkstream();
  CK(cuCtxGetId(pctx, &id0));
  CK(cuMemHostAlloc(&pinned, 65536, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
  kfault(&k, s);
  t0 = now_us();
  while ((r = cuStreamQuery(s)) == CUDA_ERROR_NOT_READY) usleep(100);
  printf("recover(%s): fault observed (%s) after %.1f ms\n", how, en(r), (now_us() - t0) / 1000);
  cuCtxSetCurrent(NULL);
  t0 = now_us();
  if (!strcmp(how, "reset")) r = cuDevicePrimaryCtxReset(dev);
  else if (!strcmp(how, "release")) r = cuDevicePrimaryCtxRelease(dev);
  else r = CUDA_SUCCESS;
  printf("recover(%s): step -> %s in %.1f ms\n", how, en(r), (now_us() - t0) / 1000);
  t0 = now_us();
  for (;;) {
    tries++;
    if (!strcmp(how, "create")) r = cuCtxCreate(&after, NULL, 0, dev);
    else r = cuDevicePrimaryCtxRetain(&after, dev);
    if (r == CUDA_SUCCESS) {
      cuCtxSetCurrent(after);
      kern_t k2;
      CUstream s2;
      r = cuModuleLoadData(&k2.m, ptx);
      if (r == CUDA_SUCCESS) r = cuModuleGetFunction(&k2.sleep, k2.m, "sleep_ns");
      if (r == CUDA_SUCCESS) r = cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING);
      if (r == CUDA_SUCCESS) { uint64_t ns = 1000; void *a[] = {&ns}; r = cuLaunchKernel(k2.sleep, 1,1,1,1,1,1,0,s2,a,NULL); }
      if (r == CUDA_SUCCESS) r = cuStreamSynchronize(s2);
      if (r == CUDA_SUCCESS) break;
      if (strcmp(how, "create")) cuDevicePrimaryCtxRelease(dev);
      cuCtxSetCurrent(NULL);
    }
    if (now_us() - t0 > 3000000) break;
    usleep(10000);
  }
  cuCtxGetId(after, &id1);
  printf("recover(%s): new work -> %s after %d tries, %.1f ms; same handle %s; ctx id %llu -> %llu\n", how, en(r), tries,
         (now_us() - t0) / 1000, after == pctx ? "yes" : "no", id0, id1);
  signal(SIGSEGV, on_segv);
  if (sigsetjmp(jb, 1) == 0) { volatile char c = ((char *)pinned)[100]; (void)c; printf("recover(%s): old cuMemHostAlloc memory still readable\n", how); }
  else printf("recover(%s): old cuMemHostAlloc memory: SIGSEGV on read\n", how);
  signal(SIGSEGV, SIG_DFL);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 2) return 2;
  if (!strcmp(argv[1], "fault-visibility")) fault_visibility();
  else if (!strcmp(argv[1], "fault-spread")) fault_spread(atoi(argv[2]), atoi(argv[3]));
  else if (!strcmp(argv[1], "blocking")) blocking_calls(atoi(argv[2]));
  else if (!strcmp(argv[1], "capture")) { cap_relaxed = argc > 4; capture(argv[2], argv[3]); }
  else if (!strcmp(argv[1], "capture-self")) capture_self(argv[2], argv[3], argc > 4);
  else if (!strcmp(argv[1], "recover")) recover(argv[2]);
  else return 2;
  return 0;
}
