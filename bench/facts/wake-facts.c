/* wake-facts: what it costs a thread to sleep until GPU work ends, by each
 * mechanism the host and the CUDA driver offer, in latency and CPU. Plain
 * driver API, no uvcuda, no loop. GPU only (the sleep experiment needs no
 * GPU, but its numbers belong to the machine).
 *
 *   sleep      timed sleeps of a thread (clock_nanosleep and a condition
 *              variable's timed wait), default timer slack and 1 ns: how
 *              late a wake-up comes and what one sleep/wake costs in CPU
 *   wait L     GPU work of L us (0: an empty kernel), awaited by
 *                raw-spin       cuStreamQuery in a loop (the floor)
 *                flag-spin      a GPU-written word (cuStreamWriteValue32)
 *                block-event    cuEventSynchronize on a BLOCKING_SYNC event
 *                block-handoff  a waiter thread in that call, which wakes
 *                               the awaiting thread through a futex (what
 *                               a reactor built on it would add)
 *                hostfn         cuLaunchHostFunc that wakes the awaiting
 *                               thread through a futex
 *                flag-nap5      the flag read every 5 % of the time waited
 *                               so far (at least 10 us), asleep between
 *              latency from the launch to the awaiting thread running, its
 *              CPU, and the process's CPU (the driver's threads too).
 *
 *   cc -O2 -I/usr/local/cuda/include wake-facts.c -o wake-facts \
 *      -L/usr/local/cuda/lib64/stubs -lcuda -lpthread */
#define _GNU_SOURCE
#include <cuda.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static const char *ptx =
    ".version 8.0\n.target sm_80\n.address_size 64\n"
    ".visible .entry sleep_ns(.param .u64 ns)\n{\n .reg .u64 %rd<5>;\n .reg .pred %p;\n"
    " ld.param.u64 %rd1, [ns];\n mov.u64 %rd2, %globaltimer;\nL:\n mov.u64 %rd3, %globaltimer;\n"
    " sub.u64 %rd4, %rd3, %rd2;\n setp.lt.u64 %p, %rd4, %rd1;\n @%p bra L;\n ret;\n}\n";

#define CK(x) do { CUresult r_ = (x); if (r_) { const char *n_ = "?"; cuGetErrorName(r_, &n_); \
  printf("FAIL %s = %d %s (line %d)\n", #x, (int)r_, n_, __LINE__); fflush(stdout); exit(1);} } while (0)

static uint64_t ns_of(clockid_t c) {
  struct timespec ts;
  clock_gettime(c, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
static uint64_t now(void) { return ns_of(CLOCK_MONOTONIC); }

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}
static double pct(uint64_t *v, int n, int p) {
  qsort(v, (size_t)n, sizeof(*v), cmp_u64);
  return v[(size_t)((n - 1) * p / 100)] / 1000.0;
}

/* ---- sleep ---------------------------------------------------------------- */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv;

static void sleep_one(int how, uint64_t d) {
  struct timespec ts;
  uint64_t at = now() + d;
  ts.tv_sec = (time_t)(at / 1000000000u);
  ts.tv_nsec = (long)(at % 1000000000u);
  if (how == 0) {
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
  } else {
    pthread_mutex_lock(&mu);
    pthread_cond_timedwait(&cv, &mu, &ts);
    pthread_mutex_unlock(&mu);
  }
}

static void exp_sleep(void) {
  static const uint64_t ds[] = {5000, 10000, 20000, 50000, 100000, 200000, 1000000};
  pthread_condattr_t ca;
  enum { N = 1000 };
  static uint64_t late[N];
  int slack, how;
  size_t i;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&cv, &ca);
  printf("# sleep: requested us, mechanism, timer slack -> late p50/p99 us, thread CPU per sleep us\n");
  for (slack = 0; slack < 2; slack++) {
    prctl(PR_SET_TIMERSLACK, slack ? 1UL : 50000UL);
    for (how = 0; how < 2; how++) {
      for (i = 0; i < sizeof(ds) / sizeof(ds[0]); i++) {
        int n = ds[i] >= 1000000 ? 200 : N, k;
        uint64_t c0 = ns_of(CLOCK_THREAD_CPUTIME_ID);
        for (k = 0; k < n; k++) {
          uint64_t t0 = now();
          sleep_one(how, ds[i]);
          late[k] = now() - t0 - ds[i];
        }
        printf("sleep %7.0f %-12s slack=%-5s late p50 %7.1f p99 %7.1f  cpu/sleep %5.2f\n",
               ds[i] / 1000.0, how ? "cond-timed" : "nanosleep", slack ? "1ns" : "50us",
               pct(late, n, 50), pct(late, n, 99),
               (ns_of(CLOCK_THREAD_CPUTIME_ID) - c0) / 1000.0 / n);
      }
    }
  }
}

/* ---- wait ----------------------------------------------------------------- */

static CUfunction ksleep;
static CUstream st;
static uint32_t *flag;
static CUdeviceptr flag_d;
static uint32_t seq;
static CUevent bev;

static void launch(uint64_t ns) {
  void *a[] = {&ns};
  CK(cuLaunchKernel(ksleep, 1, 1, 1, 1, 1, 1, 0, st, a, NULL));
}

static int futex(uint32_t *uaddr, int op, uint32_t val) {
  return (int)syscall(SYS_futex, uaddr, op, val, NULL, NULL, 0);
}
static uint32_t wake_word; /* bumped by the waker, waited on by the waiter */
static void wake_main(void) {
  __atomic_add_fetch(&wake_word, 1, __ATOMIC_RELEASE);
  futex(&wake_word, FUTEX_WAKE_PRIVATE, 1);
}
static void wait_main(uint32_t old) {
  while (__atomic_load_n(&wake_word, __ATOMIC_ACQUIRE) == old)
    futex(&wake_word, FUTEX_WAIT_PRIVATE, old);
}

static void CUDA_CB on_host(void *arg) {
  (void)arg;
  wake_main();
}

/* The waiter thread of block-handoff: syncs each event it is handed. */
static CUcontext pctx;
static uint32_t hand_word;
static volatile int hand_quit;
static void *waiter(void *arg) {
  uint32_t seen = 0;
  (void)arg;
  cuCtxSetCurrent(pctx);
  for (;;) {
    while (__atomic_load_n(&hand_word, __ATOMIC_ACQUIRE) == seen)
      futex(&hand_word, FUTEX_WAIT_PRIVATE, seen);
    seen = __atomic_load_n(&hand_word, __ATOMIC_ACQUIRE);
    if (hand_quit) return NULL;
    cuEventSynchronize(bev);
    wake_main();
  }
}

enum { RAW, FLAG, BLOCK, HANDOFF, HOSTFN, NAP, NMETHODS };
static const char *const names[] = {"raw-spin", "flag-spin", "block-event", "block-handoff",
                                    "hostfn", "flag-nap5"};

static uint64_t wait_once(int m, uint64_t ns) {
  uint64_t t0 = now(), t;
  uint32_t old = __atomic_load_n(&wake_word, __ATOMIC_ACQUIRE);
  launch(ns);
  switch (m) {
    case RAW:
      while (cuStreamQuery(st) == CUDA_ERROR_NOT_READY) {}
      break;
    case FLAG:
      CK(cuStreamWriteValue32(st, flag_d, ++seq, 0));
      while ((int32_t)(__atomic_load_n(flag, __ATOMIC_ACQUIRE) - seq) < 0) {}
      break;
    case NAP: {
      CK(cuStreamWriteValue32(st, flag_d, ++seq, 0));
      while ((int32_t)(__atomic_load_n(flag, __ATOMIC_ACQUIRE) - seq) < 0) {
        uint64_t w = (now() - t0) / 20;
        struct timespec ts;
        if (w < 10000) w = 10000;
        ts.tv_sec = 0;
        ts.tv_nsec = (long)w;
        nanosleep(&ts, NULL);
      }
      break;
    }
    case BLOCK:
      CK(cuEventRecord(bev, st));
      CK(cuEventSynchronize(bev));
      break;
    case HANDOFF:
      CK(cuEventRecord(bev, st));
      __atomic_add_fetch(&hand_word, 1, __ATOMIC_RELEASE);
      futex(&hand_word, FUTEX_WAKE_PRIVATE, 1);
      wait_main(old);
      break;
    case HOSTFN:
      CK(cuLaunchHostFunc(st, on_host, NULL));
      wait_main(old);
      break;
  }
  t = now() - t0;
  return t;
}

static void exp_wait(uint64_t us) {
  enum { NMAX = 1000 };
  static uint64_t lat[NMETHODS][NMAX];
  double thr[NMETHODS] = {0}, proc[NMETHODS] = {0};
  CUmodule mod;
  CUdevice dev;
  pthread_t w;
  int n = us >= 1000 ? 200 : us >= 200 ? 500 : NMAX, blk, m, k;
  uint64_t ns = us * 1000;

  CK(cuInit(0));
  CK(cuDeviceGet(&dev, 0));
  CK(cuDevicePrimaryCtxRetain(&pctx, dev));
  CK(cuCtxSetCurrent(pctx));
  CK(cuModuleLoadData(&mod, ptx));
  CK(cuModuleGetFunction(&ksleep, mod, "sleep_ns"));
  CK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
  CK(cuMemHostAlloc((void **)&flag, 64, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
  *flag = 0;
  CK(cuMemHostGetDevicePointer(&flag_d, flag, 0));
  CK(cuEventCreate(&bev, CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING));
  pthread_create(&w, NULL, waiter, NULL);
  for (m = 0; m < NMETHODS; m++) /* warm-up */
    for (k = 0; k < 20; k++) wait_once(m, ns);
  /* 10 blocks, methods taking turns, so drift falls on all alike. */
  for (blk = 0; blk < 10; blk++) {
    for (m = 0; m < NMETHODS; m++) {
      int mm = (m + blk) % NMETHODS;
      for (k = blk * n / 10; k < (blk + 1) * n / 10; k++) {
        uint64_t c0 = ns_of(CLOCK_THREAD_CPUTIME_ID), p0 = ns_of(CLOCK_PROCESS_CPUTIME_ID);
        lat[mm][k] = wait_once(mm, ns);
        thr[mm] += (ns_of(CLOCK_THREAD_CPUTIME_ID) - c0) / 1000.0;
        proc[mm] += (ns_of(CLOCK_PROCESS_CPUTIME_ID) - p0) / 1000.0;
        usleep(50); /* the GPU idles between samples, for every method */
      }
    }
  }
  for (m = 0; m < NMETHODS; m++) {
    printf("wait %5llu us  %-13s p50 %8.1f p99 %8.1f  thread CPU/op %7.1f  process CPU/op %7.1f\n",
           (unsigned long long)us, names[m], pct(lat[m], n, 50), pct(lat[m], n, 99), thr[m] / n,
           proc[m] / n);
  }
  hand_quit = 1;
  __atomic_add_fetch(&hand_word, 1, __ATOMIC_RELEASE);
  futex(&hand_word, FUTEX_WAKE_PRIVATE, 1);
  pthread_join(w, NULL);
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "sleep")) exp_sleep();
  else if (argc > 2 && !strcmp(argv[1], "wait")) exp_wait((uint64_t)atoll(argv[2]));
  else {
    fprintf(stderr, "usage: wake-facts sleep | wait <us>\n");
    return 2;
  }
  fflush(stdout);
  return 0;
}
