/* uvcuda-bench: submit -> callback latency, CPU cost, scaling, throughput
 * and idle cost of awaiting CUDA stream work from a libuv loop, for
 * uvcuda's completion strategies and for baselines built here from plain
 * libuv and CUDA driver calls. See bench/README.md.
 *
 * It runs once, on a GPU host, under a hard time limit, so robustness
 * comes first: every section has a deadline, every wait has a timeout, a
 * watchdog thread opens the stream hold of the scaling section when an
 * enqueue stalls (a GPU's hardware queues are finite) and ends the program,
 * keeping what was measured, if nothing progresses at all. After a timed
 * out wait, whatever another thread could still touch is leaked, never
 * freed. Every measurement goes to the CSV as soon as it is taken. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>
#include <cudaTypedefs.h>
#include <uv.h>

#include "uvcuda.h"
/* Weak: bench/ab*.sh run this binary against older builds of the
 * library, which lack it (the phases are then not measured). */
#pragma weak uvcuda_future_timing

extern const char uvcuda_bench_kernels_ptx[];

#define US 1000ull
#define MS 1000000ull
#define SEC 1000000000ull
#define NPEND 31      /* held streams of the scaling and idle sections: with
                       * CUDA_DEVICE_MAX_CONNECTIONS=32, one hardware queue
                       * each, the timed stream keeps its own */
#define NXCTX 5       /* contexts whose held streams take the scaling
                       * section's pending futures on a GPU: each context
                       * has its own hardware queues (~1,020 commands each
                       * behind a held wait), 5 x 31 hold ~155k */
#define NTP 64        /* streams of the throughput section */
#define NFLIGHT 10000 /* futures in flight in the throughput section */
/* No progress for this long: the watchdog opens a stream hold (scaling),
 * then gives up on the program. Test hooks (environment, for checking
 * these paths on the simulation): UVCUDA_BENCH_STALL_S="OPEN,EXIT" sets
 * both in seconds; UVCUDA_BENCH_TEST_STALL=N makes the scaling section
 * act as if the enqueue of pending future N blocked until the hold opens;
 * UVCUDA_BENCH_TEST_HANG=SECTION makes that section hang. */
static uint64_t g_stall_open_ns = 20 * SEC, g_stall_exit_ns = 60 * SEC;
static long g_test_stall = -1;
static const char *g_test_hang;

#define container_of(p, T, m) ((T *)((char *)(p) - offsetof(T, m)))
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ---- options ----------------------------------------------------------- */

enum {
  SEC_LATENCY = 1,
  SEC_SPIN = 2,
  SEC_SCALING = 4,
  SEC_THROUGHPUT = 8,
  SEC_IDLE = 16,
  SEC_WAKE = 32,
  SEC_ALL = 63
};
static const struct {
  const char *name;
  unsigned bit;
} SECTIONS[] = {{"latency", SEC_LATENCY},
                {"spin", SEC_SPIN},
                {"scaling", SEC_SCALING},
                {"throughput", SEC_THROUGHPUT},
                {"idle", SEC_IDLE},
                {"wake", SEC_WAKE}};

static int opt_quick;
static int opt_samples = 1000, opt_warmup = 100;
static int opt_probe_us = -1; /* uvcuda loops' probe_interval_us */
/* uvcuda loops' reactor back-off (-1: the library's defaults) */
static int opt_rspin_us = -1, opt_ryield_us = -1, opt_rsleep_us = -1;
static int opt_gap_us = 0;         /* idle time between two samples */
static int opt_contexts = NXCTX;   /* contexts of the scaling section */
static const char *opt_csv;
static unsigned opt_sections;

/* ---- the driver -------------------------------------------------------- */

static struct {
  PFN_cuDeviceGet_v2000 cuDeviceGet;
  PFN_cuDeviceGetName_v2000 cuDeviceGetName;
  PFN_cuDeviceGetAttribute_v2000 cuDeviceGetAttribute;
  PFN_cuDevicePrimaryCtxRetain_v7000 cuDevicePrimaryCtxRetain;
  PFN_cuCtxSetCurrent_v4000 cuCtxSetCurrent;
  PFN_cuStreamCreate_v2000 cuStreamCreate;
  PFN_cuStreamSynchronize_v2000 cuStreamSynchronize;
  PFN_cuStreamQuery_v2000 cuStreamQuery;
  PFN_cuStreamWaitValue32_v11070 cuStreamWaitValue32;
  PFN_cuStreamWriteValue32_v11070 cuStreamWriteValue32;
  PFN_cuLaunchHostFunc_v10000 cuLaunchHostFunc;
  PFN_cuMemAlloc_v3020 cuMemAlloc;
  PFN_cuMemHostAlloc_v2020 cuMemHostAlloc;
  PFN_cuMemHostGetDevicePointer_v3020 cuMemHostGetDevicePointer;
  PFN_cuMemsetD32Async_v3020 cuMemsetD32Async;
  PFN_cuModuleLoadData_v2000 cuModuleLoadData;
  PFN_cuModuleGetFunction_v2000 cuModuleGetFunction;
  PFN_cuLaunchKernel_v4000 cuLaunchKernel;
  PFN_cuCtxCreate_v12050 cuCtxCreate; /* optional: scaling's extra contexts */
} cu;

static uvcuda_driver_info_t g_info;
static int g_sim;
static const char *g_tag = ""; /* " [simulation, not a GPU measurement]" */
static CUdevice g_dev;
static CUcontext g_ctx;
static CUfunction g_fn_sleep;
static CUdeviceptr g_dword;         /* target of memset4 */
static uint32_t *g_hold, *g_flag, *g_mflag, *g_awgate; /* host-pinned */
static CUdeviceptr g_hold_d, g_flag_d, g_mflag_d, g_awgate_d;
static CUstream g_timed;            /* created first: its own queue */
/* Held streams per context; [0] is the primary context. Only scaling uses
 * more than [0], and only on a GPU. */
static CUcontext g_xctx[NXCTX];
static CUstream g_xpend[NXCTX][NPEND];
#define g_pend (g_xpend[0]) /* the primary context's held streams */
static CUdeviceptr g_xhold_d[NXCTX];
static int g_nxctx = 1;
static CUstream g_tps[NTP];         /* throughput streams */
static int g_errors;                /* bench or library misbehaviour */

static const char *cuname(CUresult r) {
  return uvcuda_err_name(UVCUDA_ECUDA(r));
}

static int sym(const char *name, int version, void *out) {
  void *p = NULL;
  int err = uvcuda_driver_symbol(name, version, &p);
  if (err) {
    printf("uvcuda-bench: driver entry point %s (ABI %d): %s\n", name, version,
           uvcuda_strerror(err));
    return -1;
  }
  memcpy(out, &p, sizeof(p));
  return 0;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* ---- progress, deadlines, the watchdog --------------------------------- */

static atomic_uint_fast64_t g_hb; /* heartbeat: bumped by the main thread */
static uint64_t g_hb_n;
static atomic_int g_hold_watch;   /* 1: the watchdog may open the hold */
static atomic_uint g_hold_value;  /* the store that opens the current hold */
static atomic_int g_blocked;      /* the watchdog opened the hold */
static atomic_int g_wd_stop;
static const char *volatile g_section = "setup";
static uint64_t g_deadline;       /* of the running section */
static int g_truncated;           /* the deadline cut something short */
static int g_timeouts;            /* timed out waits in this section */
static uint32_t g_hold_gen;

static inline void beat(void) {
  atomic_store_explicit(&g_hb, ++g_hb_n, memory_order_relaxed);
}

static int past_deadline(void) {
  if (uv_hrtime() <= g_deadline) return 0;
  g_truncated = 1;
  return 1;
}

static void hold_open(void) {
  __atomic_store_n(g_hold, atomic_load(&g_hold_value), __ATOMIC_RELEASE);
}

static FILE *g_csv;

static void *watchdog_main(void *arg) {
  uint64_t last = atomic_load(&g_hb), t_last = uv_hrtime(), now, hb;
  struct timespec ts = {0, 100 * 1000 * 1000};
  (void)arg;
  while (!atomic_load(&g_wd_stop)) {
    nanosleep(&ts, NULL);
    hb = atomic_load_explicit(&g_hb, memory_order_relaxed);
    now = uv_hrtime();
    if (hb != last) {
      last = hb;
      t_last = now;
      continue;
    }
    if (now - t_last > g_stall_open_ns && atomic_load(&g_hold_watch) &&
        !atomic_load(&g_blocked)) {
      hold_open(); /* lets the GPU drain what stalled the enqueue */
      atomic_store(&g_blocked, 1);
      fprintf(stderr, "uvcuda-bench watchdog: no progress for %llu s in "
              "section %s while streams are held: opened the hold\n",
              (unsigned long long)(g_stall_open_ns / SEC), g_section);
    }
    if (now - t_last > g_stall_exit_ns) {
      hold_open();
      printf("\nuvcuda-bench watchdog: no progress for %llu s in section %s "
             "(a CUDA call does not return): exiting; the CSV has every "
             "measurement taken so far\n",
             (unsigned long long)(g_stall_exit_ns / SEC), g_section);
      fflush(stdout);
      if (g_csv) fflush(g_csv);
      _exit(3);
    }
  }
  return NULL;
}

/* ---- CPU time ----------------------------------------------------------
 * The loop thread's and the process's CPU time: the counters behind
 * getrusage(RUSAGE_THREAD) and getrusage(RUSAGE_SELF), read through
 * clock_gettime. getrusage(RUSAGE_THREAD) leaves out the time slice the
 * calling thread is running in (a 20 us spin reads as 0 us until the next
 * tick or context switch), which would wreck per-sample accounting;
 * CLOCK_THREAD_CPUTIME_ID includes it. CLOCK_PROCESS_CPUTIME_ID equals
 * RUSAGE_SELF's utime + stime at ns resolution. */

typedef struct {
  double thr, proc; /* µs: the calling (loop) thread, the whole process */
} cpu_t;

static double clock_us(clockid_t id) {
  struct timespec ts;
  if (clock_gettime(id, &ts) != 0) return 0;
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* Around a measured interval: the process clock (it walks every thread,
 * several us with many) outside the thread clock's window, so that the
 * loop thread's CPU holds only the interval. */
static void cpu_begin(cpu_t *c) {
  c->proc = clock_us(CLOCK_PROCESS_CPUTIME_ID);
  c->thr = clock_us(CLOCK_THREAD_CPUTIME_ID);
}

/* CPU time of uvcuda's reactor thread (it names itself "uvcuda-reactor"),
 * in us, through the thread's own CPU clock; NAN if there is none. */
static double reactor_cpu_us(void) {
  char path[64], name[32];
  struct dirent *e;
  double v = NAN;
  DIR *d = opendir("/proc/self/task");
  if (d == NULL) return NAN;
  while (isnan(v) && (e = readdir(d)) != NULL) {
    FILE *f;
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof(path), "/proc/self/task/%.20s/comm", e->d_name);
    if ((f = fopen(path, "r")) == NULL) continue;
    if (fgets(name, sizeof(name), f) && strncmp(name, "uvcuda-reactor", 14) == 0) {
      unsigned tid = (unsigned)atoi(e->d_name);
      /* Linux's MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED) */
      clockid_t id = (clockid_t)((~tid << 3) | 6u);
      struct timespec ts;
      if (clock_gettime(id, &ts) == 0)
        v = (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
    }
    fclose(f);
  }
  closedir(d);
  return v;
}

static void cpu_end(cpu_t *c) {
  c->thr = clock_us(CLOCK_THREAD_CPUTIME_ID);
  c->proc = clock_us(CLOCK_PROCESS_CPUTIME_ID);
}

/* ---- result rows and the CSV ------------------------------------------- */

typedef struct {
  char section[16];
  char method[32];
  char workload[32];
  double param;
  int n; /* samples behind the numbers; 0: nothing measured */
  double p50, p90, p99, mean, loop_cpu, proc_cpu;
  double reactor_cpu; /* idle: the reactor thread's CPU, us per s */
  /* uvcuda_future_timing medians, us from start (runs with r->timing) */
  double ph_enq, ph_seen, ph_deliver; /* deliver: seen -> callback */
  char extra[512];
  char note[256]; /* printed: errors, skips, truncation */
} row_t;

static row_t *g_rows;
static int g_nrows, g_caprows;

static void row_init(row_t *w, const char *sec, const char *method,
                     const char *wl, double param) {
  memset(w, 0, sizeof(*w));
  snprintf(w->section, sizeof(w->section), "%s", sec);
  snprintf(w->method, sizeof(w->method), "%s", method);
  snprintf(w->workload, sizeof(w->workload), "%s", wl);
  w->param = param;
  w->p50 = w->p90 = w->p99 = w->mean = w->loop_cpu = w->proc_cpu = NAN;
  w->reactor_cpu = NAN;
  w->ph_enq = w->ph_seen = w->ph_deliver = NAN;
}

static void row_extra(row_t *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void row_extra(row_t *w, const char *fmt, ...) {
  size_t len = strlen(w->extra);
  va_list ap;
  if (len + 2 >= sizeof(w->extra)) return;
  if (len) w->extra[len++] = ';';
  va_start(ap, fmt);
  vsnprintf(w->extra + len, sizeof(w->extra) - len, fmt, ap);
  va_end(ap);
}

/* Appends to the CSV's extra and to the printed note. */
static void row_note(row_t *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void row_note(row_t *w, const char *fmt, ...) {
  char buf[256];
  size_t len = strlen(w->note);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  row_extra(w, "%s", buf);
  if (len > 0 && len + 2 < sizeof(w->note)) {
    memcpy(w->note + len, "; ", 3);
    len += 2;
  }
  if (len + 1 < sizeof(w->note)) {
    size_t k = strlen(buf);
    if (k > sizeof(w->note) - 1 - len) k = sizeof(w->note) - 1 - len;
    memcpy(w->note + len, buf, k);
    w->note[len + k] = 0;
  }
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Nearest rank. */
static double pct(const double *sorted, int n, int permille) {
  int i = (int)(((long)n * permille + 999) / 1000) - 1;
  if (i < 0) i = 0;
  if (i >= n) i = n - 1;
  return sorted[i];
}

static void row_stats(row_t *w, double *lat_us, int n) {
  double sum = 0;
  int i;
  w->n = n;
  if (n <= 0) return;
  qsort(lat_us, (size_t)n, sizeof(double), cmp_double);
  for (i = 0; i < n; i++) sum += lat_us[i];
  w->p50 = pct(lat_us, n, 500);
  w->p90 = pct(lat_us, n, 900);
  w->p99 = pct(lat_us, n, 990);
  w->mean = sum / n;
}

static void csv_num(double v) {
  if (isnan(v)) fputs(",", g_csv);
  else fprintf(g_csv, ",%.3f", v);
}

static void row_emit(row_t *w) {
  char extra[sizeof(w->extra) + 64];
  char *p;
  if (g_sim) {
    snprintf(extra, sizeof(extra), "simulation-not-a-GPU-measurement%s%s",
             w->extra[0] ? ";" : "", w->extra);
  } else {
    snprintf(extra, sizeof(extra), "%s", w->extra);
  }
  for (p = extra; *p; p++)
    if (*p == ',' || *p == '"' || *p == '\n' || *p == '\r') *p = ' ';
  if (g_nrows == g_caprows) {
    int cap = g_caprows ? g_caprows * 2 : 128;
    row_t *n = realloc(g_rows, (size_t)cap * sizeof(*n));
    if (n != NULL) {
      g_rows = n;
      g_caprows = cap;
    }
  }
  if (g_nrows < g_caprows) g_rows[g_nrows++] = *w;
  if (g_csv == NULL) return;
  fprintf(g_csv, "%s,%s,%s,%.10g,%d", w->section, w->method, w->workload,
          w->param, w->n);
  csv_num(w->p50);
  csv_num(w->p90);
  csv_num(w->p99);
  csv_num(w->mean);
  csv_num(w->loop_cpu);
  csv_num(w->proc_cpu);
  fprintf(g_csv, ",%s\n", extra);
  fflush(g_csv);
}

static const row_t *row_find(const char *sec, const char *method,
                             const char *wl, double param) {
  int i;
  for (i = 0; i < g_nrows; i++) {
    const row_t *w = &g_rows[i];
    if (strcmp(w->section, sec) == 0 && strcmp(w->method, method) == 0 &&
        strcmp(w->workload, wl) == 0 && (isnan(param) || w->param == param))
      return w;
  }
  return NULL;
}

static const char *fmt_num(char *buf, size_t n, double v, int prec) {
  if (isnan(v)) snprintf(buf, n, "-");
  else snprintf(buf, n, "%.*f", prec, v);
  return buf;
}

/* ---- workloads --------------------------------------------------------- */

typedef struct {
  const char *name;
  int memset;  /* cuMemsetD32Async of one word, else uvcuda_sleep_ns */
  uint64_t ns; /* kernel duration */
  double us;   /* nominal duration (the CSV's param) */
} workload_t;

enum { W_MEMSET, W_EMPTY, W_K5, W_K20, W_K50, W_K200, W_K2MS, W_COUNT };
static const workload_t WL[W_COUNT] = {
    {"memset4", 1, 0, 0},
    {"empty", 0, 0, 0},
    {"kernel-5us", 0, 5 * US, 5},
    {"kernel-20us", 0, 20 * US, 20},
    {"kernel-50us", 0, 50 * US, 50},
    {"kernel-200us", 0, 200 * US, 200},
    {"kernel-2ms", 0, 2 * MS, 2000},
};

static CUresult enqueue_work(const workload_t *w, CUstream s) {
  uint64_t ns = w->ns;
  void *args[] = {&ns};
  if (w->memset) return cu.cuMemsetD32Async(g_dword, 0x5a5a5a5au, 1, s);
  return cu.cuLaunchKernel(g_fn_sleep, 1, 1, 1, 1, 1, 1, 0, s, args, NULL);
}

/* ---- methods ----------------------------------------------------------- */

enum kind { K_RAW, K_MEMOP, K_HOSTFN_ASYNC, K_THREADPOOL, K_FLAG, K_UVCUDA };

typedef struct {
  const char *name;
  enum kind kind;
  uvcuda_completion_t completion;
} method_t;

enum {
  M_RAW,
  M_MEMOP,
  M_HOSTFN_ASYNC,
  M_THREADPOOL,
  M_FLAG,
  M_AUTO,
  M_REACTOR,
  M_HOSTFN,
  M_POLL,
  M_HOSTFN_SPIN,
  M_HOSTFN_BLOCK,
  M_COUNT
};
static const method_t METHODS[M_COUNT] = {
    {"raw-spin", K_RAW, 0},
    {"memop-spin", K_MEMOP, 0},
    {"hostfn-async", K_HOSTFN_ASYNC, 0},
    {"threadpool", K_THREADPOOL, 0},
    {"flag-thread", K_FLAG, 0},
    {"uvcuda-auto", K_UVCUDA, UVCUDA_COMPLETION_AUTO},
    {"uvcuda-reactor", K_UVCUDA, UVCUDA_COMPLETION_REACTOR},
    {"uvcuda-hostfn", K_UVCUDA, UVCUDA_COMPLETION_HOSTFN},
    {"uvcuda-poll", K_UVCUDA, UVCUDA_COMPLETION_POLL},
    {"uvcuda-hostfn-spin", K_UVCUDA, UVCUDA_COMPLETION_HOSTFN_SPIN},
    {"uvcuda-hostfn-block", K_UVCUDA, UVCUDA_COMPLETION_HOSTFN_BLOCK},
};

/* One method on one fresh loop. Heap-allocated with its loop: after a
 * timed out wait both are leaked, since a host function, a pool thread or
 * the reactor may still touch them. */
typedef struct run_s {
  const method_t *m;
  uv_loop_t *loop;
  uv_timer_t tick; /* bounds every blocking uv_run(ONCE) */
  const workload_t *wl;
  CUstream stream;
  int spin_budget_us; /* uvcuda: -1 = library default */
  uint64_t timeout_ns; /* of one sample */
  /* one sample */
  volatile int done;
  int status;
  uint64_t t1;
  char err[200];
  int abandon; /* leak instead of closing */
  int timing;  /* uvcuda: UVCUDA_OPT_TIMING, phases into the row */
  /* uvcuda */
  uvcuda_loop_t ul;
  int ul_on;
  uvcuda_future_t f;
  int f_on;
  uvcuda_stats_t stats;
  int have_stats;
  uint64_t spin_ns; /* the spin budget in effect */
  volatile int closed;
  /* hostfn-async: one handle per sample */
  uv_async_t as;
  int as_on;
  /* threadpool */
  uv_work_t req;
  volatile CUresult sync_rc;
  /* flag-thread */
  uv_async_t fas;
  int fas_on;
  pthread_t thr;
  int thr_on;
  atomic_int stop;
  uint32_t seq;
  /* throughput */
  uvcuda_future_t *tf;
  uv_work_t *treq;
  uint64_t *ts, *te;
  int nf, tf_init;
  volatile int tdone;
  int terr;
  atomic_int tsync_err; /* from pool threads */
} run_t;

static void on_tick(uv_timer_t *t) { (void)t; }

/* Runs the loop until *flag is set; -1 on timeout. The tick timer makes
 * each blocking pass return within 50 ms. */
static int wait_flag(uv_loop_t *loop, volatile int *flag, uint64_t timeout_ns) {
  uint64_t end = uv_hrtime() + timeout_ns;
  while (!*flag) {
    uv_run(loop, UV_RUN_ONCE);
    if (*flag) break;
    if (uv_hrtime() > end) return -1;
  }
  return 0;
}

static int wait_count(uv_loop_t *loop, volatile int *count, int want,
                      uint64_t timeout_ns) {
  uint64_t end = uv_hrtime() + timeout_ns;
  unsigned k = 0;
  while (*count < want) {
    uv_run(loop, UV_RUN_ONCE);
    if ((++k & 255) == 0) beat();
    if (*count >= want) break;
    if (uv_hrtime() > end) return -1;
  }
  return 0;
}

/* Waits (sleeping) until every stream is idle; -1 on timeout. */
static int drain_streams(CUstream *s, int n, uint64_t timeout_ns) {
  uint64_t end = uv_hrtime() + timeout_ns;
  struct timespec ts = {0, 50 * 1000};
  int i = 0;
  CUresult r;
  while (i < n) {
    r = cu.cuStreamQuery(s[i]);
    if (r == CUDA_SUCCESS) {
      i++;
      continue;
    }
    if (r != CUDA_ERROR_NOT_READY) {
      printf("  cuStreamQuery: %s\n", cuname(r));
      g_errors++;
      return -1;
    }
    if (uv_hrtime() > end) return -1;
    nanosleep(&ts, NULL);
    beat();
  }
  return 0;
}

static void CUDA_CB hostfn_send(void *arg) { uv_async_send(arg); }

static void on_as(uv_async_t *h) {
  run_t *r = h->data;
  r->t1 = uv_hrtime();
  r->done = 1;
}

static void on_as_closed(uv_handle_t *h) {
  run_t *r = h->data;
  r->closed = 1;
}

static __thread int t_ctx_set;

static void tp_work(uv_work_t *w) {
  run_t *r = w->data;
  if (!t_ctx_set) {
    cu.cuCtxSetCurrent(g_ctx);
    t_ctx_set = 1;
  }
  r->sync_rc = cu.cuStreamSynchronize(r->stream);
}

static void tp_after(uv_work_t *w, int status) {
  run_t *r = w->data;
  r->t1 = uv_hrtime();
  r->status = status;
  r->done = 1;
}

static void *flag_main(void *arg) {
  run_t *r = arg;
  uint32_t last = 0, v; /* run_open stored 0 before creating this thread:
                         * a write landing before we first look still counts */
  while (!atomic_load_explicit(&r->stop, memory_order_relaxed)) {
    v = __atomic_load_n(g_flag, __ATOMIC_ACQUIRE);
    if (v != last) {
      last = v;
      uv_async_send(&r->fas);
    } else {
      cpu_relax();
    }
  }
  return NULL;
}

static void on_fas(uv_async_t *h) {
  run_t *r = container_of(h, run_t, fas);
  uint32_t v = __atomic_load_n(g_flag, __ATOMIC_ACQUIRE);
  if (!r->done && r->seq != 0 && (int32_t)(v - r->seq) >= 0) {
    r->t1 = uv_hrtime();
    r->done = 1;
  }
}

static int op_work(uvcuda_future_t *f, uvcuda_stream_t s) {
  run_t *r = f->data;
  return (int)enqueue_work(r->wl, (CUstream)s);
}

static void on_future(uvcuda_future_t *f, int status) {
  run_t *r = f->data;
  r->t1 = uv_hrtime();
  r->status = status;
  r->done = 1;
}

static void on_future_closed(uvcuda_future_t *f) {
  run_t *r = f->data;
  r->closed = 1;
}

static void on_ul_closed(uvcuda_loop_t *ul) {
  run_t *r = ul->data;
  r->closed = 1;
}

static run_t *run_new(const method_t *m, CUstream s, const workload_t *wl,
                      int spin_budget_us) {
  run_t *r = calloc(1, sizeof(*r));
  if (r == NULL) return NULL;
  r->m = m;
  r->stream = s;
  r->wl = wl;
  r->spin_budget_us = spin_budget_us;
  r->timeout_ns = 5 * SEC + 4 * wl->ns;
  atomic_init(&r->stop, 0);
  atomic_init(&r->tsync_err, 0);
  return r;
}

/* 0, 1: skipped (r->err says why), -1: failed. */
static int run_open(run_t *r) {
  uvcuda_options_t o;
  int err;

  r->loop = malloc(sizeof(*r->loop));
  if (r->loop == NULL || uv_loop_init(r->loop) != 0) {
    free(r->loop);
    r->loop = NULL;
    snprintf(r->err, sizeof(r->err), "uv_loop_init failed");
    return -1;
  }
  uv_timer_init(r->loop, &r->tick);
  uv_timer_start(&r->tick, on_tick, 50, 50);
  switch (r->m->kind) {
    case K_UVCUDA:
      uvcuda_options_init(&o);
      o.completion = r->m->completion;
      o.spin_budget_us = r->spin_budget_us;
      o.probe_interval_us = opt_probe_us;
      o.reactor_spin_us = opt_rspin_us;
      o.reactor_yield_us = opt_ryield_us;
      o.reactor_sleep_max_us = opt_rsleep_us;
      if (uvcuda_future_timing == NULL) r->timing = 0;
      if (r->timing) o.flags |= UVCUDA_OPT_TIMING;
      err = uvcuda_loop_init(r->loop, &r->ul, &o);
      if (err == UVCUDA_EINVAL && r->timing) { /* a library without it */
        r->timing = 0;
        o.flags &= ~UVCUDA_OPT_TIMING;
        err = uvcuda_loop_init(r->loop, &r->ul, &o);
      }
      if (err) {
        snprintf(r->err, sizeof(r->err), "uvcuda_loop_init: %s (%s)",
                 uvcuda_err_name(err), uvcuda_strerror(err));
        return err == UVCUDA_ENOTSUP ? 1 : -1;
      }
      r->ul.data = r;
      r->ul_on = 1;
      uvcuda_future_init(&r->ul, &r->f);
      r->f.data = r;
      r->f_on = 1;
      break;
    case K_MEMOP:
      __atomic_store_n(g_mflag, 0, __ATOMIC_RELEASE);
      r->seq = 0;
      break;
    case K_FLAG:
      __atomic_store_n(g_flag, 0, __ATOMIC_RELEASE);
      r->seq = 0;
      uv_async_init(r->loop, &r->fas, on_fas);
      r->fas_on = 1;
      if (pthread_create(&r->thr, NULL, flag_main, r) != 0) {
        snprintf(r->err, sizeof(r->err), "pthread_create failed");
        return -1;
      }
      r->thr_on = 1;
      break;
    default:
      break;
  }
  return 0;
}

/* Not timed: the stream is idle (bounded wait: -1 if it is not), stray
 * wakeups of the last sample are handled. */
static int run_prep(run_t *r) {
  if (cu.cuStreamQuery(r->stream) != CUDA_SUCCESS &&
      drain_streams(&r->stream, 1, r->timeout_ns) != 0) {
    snprintf(r->err, sizeof(r->err), "the stream did not go idle");
    return -1;
  }
  if (r->loop) uv_run(r->loop, UV_RUN_NOWAIT);
  r->done = 0;
  r->status = 0;
  if (r->m->kind == K_HOSTFN_ASYNC) {
    uv_async_init(r->loop, &r->as, on_as);
    r->as.data = r;
    r->as_on = 1;
  }
  return 0;
}

/* The next sequence number, then (timed from *t0) the work and the
 * number's write to the host-pinned flag at d. */
static CUresult enqueue_flagged(run_t *r, CUdeviceptr d, uint64_t *t0) {
  CUresult q;
  if (++r->seq == 0) r->seq = 1;
  *t0 = uv_hrtime();
  if ((q = enqueue_work(r->wl, r->stream)) != CUDA_SUCCESS) return q;
  return cu.cuStreamWriteValue32(r->stream, d, r->seq, 0);
}

/* One timed sample: 0, -1 timeout, -2 error (r->err). */
static int run_sample(run_t *r, uint64_t *lat_ns) {
  uint64_t t0, spins = 0;
  CUresult q;
  int rc;

  switch (r->m->kind) {
    case K_RAW:
      t0 = uv_hrtime();
      if ((q = enqueue_work(r->wl, r->stream)) != CUDA_SUCCESS) goto cuda_err;
      while ((q = cu.cuStreamQuery(r->stream)) == CUDA_ERROR_NOT_READY) {
        if ((++spins & 1023) == 0 && uv_hrtime() - t0 > r->timeout_ns)
          return -1;
      }
      r->t1 = uv_hrtime();
      if (q != CUDA_SUCCESS) goto cuda_err;
      break;
    case K_MEMOP: /* what any flag-based wait pays, on this thread */
      if ((q = enqueue_flagged(r, g_mflag_d, &t0)) != CUDA_SUCCESS)
        goto cuda_err;
      while ((int32_t)(__atomic_load_n(g_mflag, __ATOMIC_ACQUIRE) - r->seq) <
             0) {
        if ((++spins & 1023) == 0 && uv_hrtime() - t0 > r->timeout_ns)
          return -1;
      }
      r->t1 = uv_hrtime();
      break;
    case K_HOSTFN_ASYNC:
      t0 = uv_hrtime();
      if ((q = enqueue_work(r->wl, r->stream)) != CUDA_SUCCESS) goto cuda_err;
      if ((q = cu.cuLaunchHostFunc(r->stream, hostfn_send, &r->as)) !=
          CUDA_SUCCESS)
        goto cuda_err;
      if (wait_flag(r->loop, &r->done, r->timeout_ns)) return -1;
      break;
    case K_THREADPOOL:
      r->req.data = r;
      t0 = uv_hrtime();
      if ((q = enqueue_work(r->wl, r->stream)) != CUDA_SUCCESS) goto cuda_err;
      uv_queue_work(r->loop, &r->req, tp_work, tp_after);
      if (wait_flag(r->loop, &r->done, r->timeout_ns)) return -1;
      if ((q = r->sync_rc) != CUDA_SUCCESS) goto cuda_err;
      break;
    case K_FLAG:
      if ((q = enqueue_flagged(r, g_flag_d, &t0)) != CUDA_SUCCESS)
        goto cuda_err;
      if (wait_flag(r->loop, &r->done, r->timeout_ns)) return -1;
      break;
    case K_UVCUDA:
      t0 = uv_hrtime();
      rc = uvcuda_future_start(&r->f, r->stream, op_work, on_future);
      if (rc) {
        snprintf(r->err, sizeof(r->err), "uvcuda_future_start: %s",
                 uvcuda_err_name(rc));
        return -2;
      }
      if (wait_flag(r->loop, &r->done, r->timeout_ns)) return -1;
      if (r->status) {
        snprintf(r->err, sizeof(r->err), "future callback: %s (%s)",
                 uvcuda_err_name(r->status), uvcuda_strerror(r->status));
        return -2;
      }
      break;
    default:
      return -2;
  }
  *lat_ns = r->t1 - t0;
  return 0;
cuda_err:
  snprintf(r->err, sizeof(r->err), "CUDA: %s", cuname(q));
  return -2;
}

static void run_post(run_t *r) {
  if (r->m->kind == K_HOSTFN_ASYNC && r->as_on) {
    r->as_on = 0;
    r->closed = 0;
    uv_close((uv_handle_t *)&r->as, on_as_closed);
    wait_flag(r->loop, &r->closed, 2 * SEC);
  }
}

/* Closes the loop and what is on it, or leaks it all on abandon (set here
 * too when closing fails). Never frees r: free it unless r->abandon. */
static void run_close(run_t *r) {
  uint64_t end;
  int rc;

  if (r->thr_on) { /* the spinning thread may go in any case */
    atomic_store(&r->stop, 1);
    pthread_join(r->thr, NULL);
    r->thr_on = 0;
  }
  if (r->ul_on && !r->have_stats) {
    if (uvcuda_loop_stats(&r->ul, &r->stats) == 0) r->have_stats = 1;
    r->spin_ns = uvcuda_loop_spin_budget_ns(&r->ul);
  }
  if (r->abandon || r->loop == NULL) return; /* leaked on purpose */
  if (r->f_on) {
    r->closed = 0;
    uvcuda_future_close(&r->f, on_future_closed);
    if (wait_flag(r->loop, &r->closed, 5 * SEC)) goto leak;
    r->f_on = 0;
  }
  if (r->ul_on) {
    r->closed = 0;
    rc = uvcuda_loop_close(&r->ul, on_ul_closed);
    if (rc) {
      printf("  uvcuda_loop_close: %s\n", uvcuda_err_name(rc));
      g_errors++;
      goto leak;
    }
    if (wait_flag(r->loop, &r->closed, 10 * SEC)) {
      printf("  uvcuda_loop_close did not finish\n");
      g_errors++;
      goto leak;
    }
    r->ul_on = 0;
  }
  if (r->fas_on) uv_close((uv_handle_t *)&r->fas, NULL);
  if (r->as_on) uv_close((uv_handle_t *)&r->as, NULL);
  uv_close((uv_handle_t *)&r->tick, NULL);
  end = uv_hrtime() + 5 * SEC;
  while (uv_loop_alive(r->loop) && uv_hrtime() < end)
    uv_run(r->loop, UV_RUN_NOWAIT);
  uv_run(r->loop, UV_RUN_NOWAIT);
  rc = uv_loop_close(r->loop);
  if (rc != 0) {
    printf("  uv_loop_close: %s (a handle is still open)\n", uv_err_name(rc));
    g_errors++;
    goto leak;
  }
  free(r->loop);
  r->loop = NULL;
  return;
leak:
  r->abandon = 1;
}

static void stats_extra(row_t *w, const uvcuda_stats_t *st) {
  row_extra(w, "paths:spin=%" PRIu64 "/reactor=%" PRIu64 "/hostfn=%" PRIu64
               "/poll=%" PRIu64 ";fallbacks=%" PRIu64 ";reactor_wakeups=%" PRIu64
               ";hostfn_wakeups=%" PRIu64,
            st->completed_spin, st->completed_reactor, st->completed_hostfn,
            st->completed_poll, st->fallbacks, st->reactor_wakeups,
            st->hostfn_wakeups);
}

static void paths_str(char *buf, size_t n, const run_t *r) {
  if (!r->have_stats) {
    snprintf(buf, n, "-");
    return;
  }
  snprintf(buf, n, "spin=%" PRIu64 " reactor=%" PRIu64 " hostfn=%" PRIu64
                   " poll=%" PRIu64 "%s",
           r->stats.completed_spin, r->stats.completed_reactor,
           r->stats.completed_hostfn, r->stats.completed_poll,
           r->stats.fallbacks ? " (fell back to host functions)" : "");
}

/* Warm-up, then n timed samples into row w. Returns 0, or -1 when the
 * run failed or timed out (then r->abandon says whether to leak). */
static double median_of(double *v, int n) {
  if (n <= 0) return NAN;
  qsort(v, (size_t)n, sizeof(v[0]), cmp_double);
  return v[n / 2];
}

static int measure(run_t *r, int warmup, int n, row_t *w) {
  size_t sz = sizeof(double) * (size_t)(n > 0 ? n : 1);
  double *lat = malloc(sz);
  double *ph = r->timing ? malloc(3 * sz) : NULL;
  double thr = 0, proc = 0;
  uint64_t ns = 0;
  cpu_t c0, c1;
  int i, k = 0, rc = 0;

  if (lat == NULL) return -1;
  for (i = 0; i < warmup + n; i++) {
    if (past_deadline()) {
      row_note(w, "truncated by the section deadline");
      break;
    }
    if ((rc = run_prep(r)) == 0) {
      cpu_begin(&c0);
      rc = run_sample(r, &ns);
      cpu_end(&c1);
      if (rc == -1)
        snprintf(r->err, sizeof(r->err), "TIMEOUT: no completion after %.1f s",
                 (double)r->timeout_ns / 1e9);
    }
    if (rc == -1) {
      r->abandon = 1;
      g_timeouts++;
    }
    if (rc) {
      row_note(w, "error: %s", r->err);
      if (g_sim) g_errors++; /* the simulation never fails */
      break;
    }
    run_post(r);
    beat();
    if (opt_gap_us > 0) { /* the GPU idles this long before the next */
      uint64_t t_end = uv_hrtime() + (uint64_t)opt_gap_us * 1000u;
      while (uv_hrtime() < t_end) {}
    }
    if (i >= warmup) {
      uvcuda_timing_t t;
      if (ph && uvcuda_future_timing(&r->f, &t) == 0 && t.seen_ns) {
        ph[k] = (double)(t.enqueued_ns - t.start_ns) / 1e3;
        ph[n + k] = (double)(t.seen_ns - t.start_ns) / 1e3;
        ph[2 * n + k] = (double)(t.callback_ns - t.seen_ns) / 1e3;
      } else if (ph) {
        free(ph); /* incomplete: no phases for this row */
        ph = NULL;
      }
      lat[k++] = (double)ns / 1e3;
      thr += c1.thr - c0.thr;
      proc += c1.proc - c0.proc;
    }
  }
  if (ph && k > 0) {
    w->ph_enq = median_of(ph, k);
    w->ph_seen = median_of(ph + n, k);
    w->ph_deliver = median_of(ph + 2 * n, k);
    row_extra(w, "enqueued_p50=%.2f;seen_p50=%.2f;seen_to_callback_p50=%.2f",
              w->ph_enq, w->ph_seen, w->ph_deliver);
  }
  free(ph);
  row_stats(w, lat, k);
  if (k > 0) {
    w->loop_cpu = thr / k;
    w->proc_cpu = proc / k;
  }
  free(lat);
  return rc ? -1 : 0;
}

/* ---- printing ---------------------------------------------------------- */

static void section_header(const char *title, const char *what) {
  printf("\n== %s ==%s\n", title, g_tag);
  if (what) printf("%s\n", what);
  if (g_sim)
    printf("(every number in this section: simulation, not a GPU "
           "measurement)\n");
}

static const char *asleep_str(const row_t *w) {
  if (w->n == 0 || isnan(w->loop_cpu) || isnan(w->p50)) return "-";
  return w->loop_cpu < 0.25 * w->p50 ? "yes" : "no";
}

static void lat_table_head(const char *first) {
  printf("  %-20s %8s %8s %8s %8s %9s %9s %6s  %s\n", first, "p50", "p90",
         "p99", "mean", "loopCPU", "procCPU", "asleep", "paths / notes");
}

static void lat_table_row(const char *label, const row_t *w, const char *paths) {
  char a[32], b[32], c[32], d[32], e[32], f[32];
  printf("  %-20s %8s %8s %8s %8s %9s %9s %6s  %s%s%s\n", label,
         fmt_num(a, sizeof(a), w->p50, 1), fmt_num(b, sizeof(b), w->p90, 1),
         fmt_num(c, sizeof(c), w->p99, 1), fmt_num(d, sizeof(d), w->mean, 1),
         fmt_num(e, sizeof(e), w->loop_cpu, 1),
         fmt_num(f, sizeof(f), w->proc_cpu, 1), asleep_str(w),
         paths ? paths : "", w->note[0] && paths ? "  " : "", w->note);
}

/* ---- the latency and spin sections ------------------------------------- */

static int method_supported(int mi) {
  if (mi == M_HOSTFN_SPIN || mi == M_HOSTFN_BLOCK) return g_info.host_task_sync;
  return 1;
}

/* One method x workload run into a row; prints it. */
static void lat_run(const char *sec, int mi, const workload_t *wl,
                    int spin_budget_us, double param, const char *label) {
  const method_t *m = &METHODS[mi];
  int warmup = opt_warmup, n = opt_samples, rc;
  char paths[160];
  run_t *r;
  row_t w;

  if (wl->ns >= 2 * MS) { /* bound the time of the long op */
    if (n > 200) n = 200;
    if (warmup > 20) warmup = 20;
  }
  row_init(&w, sec, m->name, wl->name, param);
  r = run_new(m, g_timed, wl, spin_budget_us);
  if (r == NULL) return;
  rc = run_open(r);
  if (rc != 0) {
    row_note(&w, "%s: %s", rc > 0 ? "skipped" : "error", r->err);
    if (rc < 0) g_errors++;
  } else {
    measure(r, warmup, n, &w);
  }
  run_close(r); /* fills the stats; leaks on abandon */
  if (r->have_stats) {
    stats_extra(&w, &r->stats);
    row_extra(&w, "spin_budget_us=%.0f", (double)r->spin_ns / 1e3);
  }
  if (w.n > 0) row_extra(&w, "asleep=%s", asleep_str(&w));
  paths_str(paths, sizeof(paths), r);
  if (!r->abandon) free(r);
  row_emit(&w);
  lat_table_row(label, &w, paths);
  fflush(stdout);
}

static void section_latency(void) {
  static const int order[] = {M_RAW,     M_MEMOP,        M_HOSTFN_ASYNC,
                              M_THREADPOOL, M_FLAG,      M_AUTO,
                              M_REACTOR, M_HOSTFN,       M_POLL,
                              M_HOSTFN_SPIN, M_HOSTFN_BLOCK};
  char a[32];
  int wi, j;

  section_header("latency: submit -> callback on the loop thread, us",
                 "loopCPU/procCPU: us of CPU per op (loop thread / whole "
                 "process); asleep: loop thread CPU < 1/4 of p50");
  if (!g_info.host_task_sync)
    printf("hostfn-spin/block: not supported by this driver (needs CUDA "
           "13.2)\n");
  for (wi = 0; wi < W_COUNT; wi++) {
    printf("\n workload %s (%s)\n", WL[wi].name,
           WL[wi].memset ? "cuMemsetD32Async of 1 word"
                         : "uvcuda_sleep_ns kernel");
    lat_table_head("method");
    for (j = 0; j < COUNT(order); j++) {
      if (!method_supported(order[j])) continue;
      if (past_deadline() || g_timeouts >= 2) {
        printf("  %-20s skipped: %s\n", METHODS[order[j]].name,
               g_timeouts >= 2 ? "two waits timed out in this section"
                               : "section deadline reached");
        continue;
      }
      lat_run("latency", order[j], &WL[wi], -1, WL[wi].us,
              METHODS[order[j]].name);
    }
  }

  /* The p50 matrix. */
  printf("\n p50 latency, us%s\n  %-20s", g_tag, "method");
  for (wi = 0; wi < W_COUNT; wi++) printf(" %12s", WL[wi].name);
  printf("\n");
  for (j = 0; j < COUNT(order); j++) {
    if (!method_supported(order[j])) continue;
    printf("  %-20s", METHODS[order[j]].name);
    for (wi = 0; wi < W_COUNT; wi++) {
      const row_t *w =
          row_find("latency", METHODS[order[j]].name, WL[wi].name, NAN);
      printf(" %12s", fmt_num(a, sizeof(a), w ? w->p50 : NAN, 1));
    }
    printf("\n");
  }
  /* Loop asleep per method (over the workloads of at least 50 us). */
  printf("\n loop thread CPU per op, us (asleep?)%s\n  %-20s", g_tag, "method");
  for (wi = 0; wi < W_COUNT; wi++) printf(" %12s", WL[wi].name);
  printf("\n");
  for (j = 0; j < COUNT(order); j++) {
    if (!method_supported(order[j])) continue;
    printf("  %-20s", METHODS[order[j]].name);
    for (wi = 0; wi < W_COUNT; wi++) {
      const row_t *w =
          row_find("latency", METHODS[order[j]].name, WL[wi].name, NAN);
      char cell[40];
      if (w == NULL || w->n == 0) snprintf(cell, sizeof(cell), "-");
      else snprintf(cell, sizeof(cell), "%.1f(%s)", w->loop_cpu,
                    asleep_str(w));
      printf(" %12s", cell);
    }
    printf("\n");
  }
}

static void section_spin(void) {
  static const int budgets[] = {0, 5, 10, 20, 50, 100};
  static const int wls[] = {W_EMPTY, W_K20};
  char label[64];
  int i, j;

  section_header("spin: uvcuda-auto by spin budget (options.spin_budget_us), us",
                 NULL);
  for (j = 0; j < COUNT(wls); j++) {
    printf("\n workload %s\n", WL[wls[j]].name);
    lat_table_head("spin budget");
    for (i = 0; i < COUNT(budgets); i++) {
      snprintf(label, sizeof(label), "%d us", budgets[i]);
      if (past_deadline() || g_timeouts >= 2) {
        printf("  %-20s skipped: %s\n", label,
               g_timeouts >= 2 ? "two waits timed out in this section"
                               : "section deadline reached");
        continue;
      }
      lat_run("spin", M_AUTO, &WL[wls[j]], budgets[i], budgets[i], label);
    }
  }
}

/* ---- the scaling section ----------------------------------------------- */

static struct {
  int done, err, closed;
} g_pf;

static void on_pending(uvcuda_future_t *f, int status) {
  (void)f;
  g_pf.done++;
  if (status != 0 && status != UVCUDA_ECANCELED) g_pf.err++;
}

static void on_pending_closed(uvcuda_future_t *f) {
  (void)f;
  g_pf.closed++;
}

/* Holds streams until hold_open(): a wait for the next hold value. */
/* d: the hold word's device address in the streams' context. */
static int hold_streams(CUstream *s, int n, CUdeviceptr d, char *err,
                        size_t errlen) {
  uint32_t gen = ++g_hold_gen;
  CUresult r;
  int i;
  atomic_store(&g_hold_value, gen);
  for (i = 0; i < n; i++) {
    r = cu.cuStreamWaitValue32(s[i], d, gen, CU_STREAM_WAIT_VALUE_GEQ);
    if (r != CUDA_SUCCESS) {
      snprintf(err, errlen, "cuStreamWaitValue32: %s", cuname(r));
      hold_open();
      return -1;
    }
  }
  return 0;
}

/* hold_streams over every scaling context. Each call takes a newer
 * generation; the waits are >=, so hold_open (the newest) opens them all. */
static int hold_all(char *err, size_t errlen) {
  int k, rc = 0;
  for (k = 0; k < g_nxctx && rc == 0; k++) {
    cu.cuCtxSetCurrent(g_xctx[k]);
    rc = hold_streams(g_xpend[k], NPEND, g_xhold_d[k], err, errlen);
  }
  cu.cuCtxSetCurrent(g_ctx);
  return rc;
}

static void drain_all(uint64_t timeout_ns) {
  int k;
  for (k = 0; k < g_nxctx; k++) {
    cu.cuCtxSetCurrent(g_xctx[k]);
    drain_streams(g_xpend[k], NPEND, timeout_ns);
  }
  cu.cuCtxSetCurrent(g_ctx);
}

/* Pending future i: spread over every held stream of every context. */
static CUstream pend_stream(int i) {
  int q = i % (g_nxctx * NPEND);
  return g_xpend[q / NPEND][q % NPEND];
}

static void scaling_row_print(const row_t *w) {
  char a[32], b[32], c[32], d[32];
  printf("  %-14s %8.0f %9s %9s %9s %9s  %s\n", w->method, w->param,
         fmt_num(a, sizeof(a), w->p50, 1), fmt_num(b, sizeof(b), w->p90, 1),
         fmt_num(c, sizeof(c), w->p99, 1), fmt_num(d, sizeof(d), w->loop_cpu, 1),
         w->extra);
  fflush(stdout);
}

static int scaling_samples(int *warmup) {
  *warmup = opt_warmup;
  return opt_samples;
}

/* The timed op by another method in the same state (N futures pending on
 * the held streams): raw-spin is the GPU's own latency under that load,
 * uvcuda-poll leaves the reactor out. Opened, and used once, before the
 * streams are held: closing or first use of a loop under the hold could
 * wait for the GPU (cuMemFreeHost synchronises the device). */
static run_t *scaling_base_open(int mi) {
  run_t *r = run_new(&METHODS[mi], g_timed, &WL[W_EMPTY], -1);
  uint64_t ns;
  if (r == NULL) return NULL;
  if (run_open(r) != 0 || run_prep(r) != 0 || run_sample(r, &ns) != 0) {
    printf("  %s: could not open the baseline: %s\n", METHODS[mi].name, r->err);
    g_errors++;
    run_close(r);
    if (!r->abandon) free(r);
    return NULL;
  }
  run_post(r);
  return r;
}

static void scaling_base_close(run_t *r) {
  if (r == NULL) return;
  run_close(r);
  if (!r->abandon) free(r);
}

/* measure() while ninit futures are held; 0 only if the hold held. */
static int measure_held(run_t *r, int ninit, row_t *w) {
  int rc;
  row_extra(w, "pending=%d;held_streams=%d;contexts=%d", ninit,
            g_nxctx * NPEND, g_nxctx);
  rc = measure(r, opt_warmup, opt_samples, w);
  if (atomic_load(&g_blocked)) {
    row_note(w, "invalid: the watchdog opened the hold during the "
             "measurement");
    return -1;
  }
  if (g_pf.done > 0) {
    row_note(w, "invalid: %d held futures completed during the "
             "measurement", g_pf.done);
    return -1;
  }
  return rc;
}

static void scaling_baseline(run_t *r, int mi, int N, int ninit) {
  row_t w;
  row_init(&w, "scaling", METHODS[mi].name, "empty", N);
  if (r == NULL || r->abandon)
    row_note(&w, "skipped: the baseline is not open");
  else
    measure_held(r, ninit, &w);
  row_emit(&w);
  scaling_row_print(&w);
}

/* What the reactor's fault probe pays in this state: cuCtxSetCurrent +
 * cuStreamQuery of a held stream of each context (the probe's calls), and
 * of the idle timed stream; median and max of 200, us. */
static void probe_cost(int ninit) {
  double t[200], med, mx;
  int k, i;
  for (k = -1; k < g_nxctx; k++) {
    CUstream s = k < 0 ? g_timed : g_xpend[k][0];
    CUcontext c = k < 0 ? g_ctx : g_xctx[k];
    for (i = 0; i < 200; i++) {
      uint64_t t0 = uv_hrtime();
      cu.cuCtxSetCurrent(c);
      cu.cuStreamQuery(s);
      t[i] = (double)(uv_hrtime() - t0) / 1e3;
      cu.cuCtxSetCurrent(g_ctx);
    }
    qsort(t, 200, sizeof(t[0]), cmp_double);
    med = t[100];
    mx = t[199];
    printf("  probe cost (%d pending): %s: cuCtxSetCurrent+cuStreamQuery "
           "p50 %.2f us, max %.2f us\n", ninit,
           k < 0 ? "timed stream" : "held stream", med, mx);
  }
}

static void scaling_uvcuda(const int *Ns, int nN) {
  const method_t *m = &METHODS[M_AUTO];
  run_t *braw, *bmem, *bpoll;
  uvcuda_future_t *pf = NULL;
  int nmax = Ns[nN - 1], ninit = 0, j, rc, ok;
  uint64_t t_arm;
  char err[200] = "";
  run_t *r;
  row_t w;

  braw = scaling_base_open(M_RAW);
  bmem = scaling_base_open(M_MEMOP);
  bpoll = scaling_base_open(M_POLL);
  r = run_new(m, g_timed, &WL[W_EMPTY], -1);
  if (r != NULL) r->timing = 1; /* where the time goes, per N */
  if (r == NULL) {
    scaling_base_close(braw);
    scaling_base_close(bmem);
    scaling_base_close(bpoll);
    return;
  }
  rc = run_open(r);
  pf = calloc((size_t)nmax, sizeof(*pf));
  if (rc == 0 && pf != NULL) {
    memset(&g_pf, 0, sizeof(g_pf));
    atomic_store(&g_blocked, 0);
    rc = hold_all(err, sizeof(err)) ? 1 : 0;
  } else {
    snprintf(err, sizeof(err), "%s", rc ? r->err : "out of memory");
    rc = -1;
  }
  if (rc != 0) {
    for (j = 0; j < nN; j++) {
      row_init(&w, "scaling", m->name, "empty", Ns[j]);
      row_note(&w, rc > 0 ? "skipped: cannot hold streams (%s)" : "error: %s",
               err);
      row_emit(&w);
      scaling_row_print(&w);
    }
    if (rc < 0) g_errors++;
    run_close(r);
    if (!r->abandon) free(r);
    free(pf);
    scaling_base_close(braw);
    scaling_base_close(bmem);
    scaling_base_close(bpoll);
    return;
  }
  atomic_store(&g_hold_watch, 1);
  for (j = 0; j < nN; j++) {
    row_init(&w, "scaling", m->name, "empty", Ns[j]);
    ok = 0;
    while (ninit < Ns[j]) {
      if (atomic_load(&g_blocked) || past_deadline()) break;
      if (ninit == g_test_stall) { /* test hook: a blocked enqueue */
        uint64_t t_end = uv_hrtime() + 10 * g_stall_open_ns;
        while (__atomic_load_n(g_hold, __ATOMIC_ACQUIRE) !=
                   atomic_load(&g_hold_value) &&
               uv_hrtime() < t_end)
          usleep(1000);
      }
      uvcuda_future_init(&r->ul, &pf[ninit]);
      rc = uvcuda_future_start(&pf[ninit], pend_stream(ninit), NULL,
                               on_pending);
      ninit++;
      if (rc) {
        snprintf(err, sizeof(err), "uvcuda_future_start: %s",
                 uvcuda_err_name(rc));
        g_pf.done++; /* no callback will come */
        g_pf.err++;
        break;
      }
      beat();
    }
    if (atomic_load(&g_blocked)) {
      row_note(&w, "blocked: GPU queue full at N=%d (an enqueue stalled for "
               "%llu s with %d futures pending; the watchdog opened the hold)",
               Ns[j], (unsigned long long)(g_stall_open_ns / SEC), ninit - 1);
    } else if (g_pf.err) {
      row_note(&w, "error: pending future failed (%s)",
               err[0] ? err : "callback error");
      g_errors++;
    } else if (ninit < Ns[j]) {
      row_note(&w, "skipped: section deadline reached with %d pending", ninit);
    } else {
      /* Let the spin budget of the new ones pass: all armed, none spin. */
      t_arm = uv_hrtime();
      while (uvcuda_future_state(&pf[ninit - 1]) == UVCUDA_FUTURE_SPINNING &&
             uv_hrtime() - t_arm < 5 * SEC)
        uv_run(r->loop, UV_RUN_NOWAIT);
      if (g_pf.done > 0) {
        row_note(&w, "error: %d held futures completed: the hold did not hold",
                 g_pf.done);
        g_errors++;
      } else {
        ok = measure_held(r, ninit, &w) == 0;
      }
    }
    row_emit(&w);
    scaling_row_print(&w);
    if (!isnan(w.ph_seen))
      printf("    phases, p50 us from start: enqueued %.1f, completion seen "
             "%.1f, seen -> callback %.1f\n", w.ph_enq, w.ph_seen,
             w.ph_deliver);
    if (!ok) {
      j++;
      break;
    }
    scaling_baseline(braw, M_RAW, Ns[j], ninit);
    scaling_baseline(bmem, M_MEMOP, Ns[j], ninit);
    scaling_baseline(bpoll, M_POLL, Ns[j], ninit);
  }
  for (; j < nN; j++) { /* the N not reached */
    row_init(&w, "scaling", m->name, "empty", Ns[j]);
    row_note(&w, "skipped: not measured after the step before");
    row_emit(&w);
    scaling_row_print(&w);
  }
  probe_cost(ninit);
  /* Release, drain, close. */
  atomic_store(&g_hold_watch, 0);
  hold_open();
  scaling_base_close(braw);
  scaling_base_close(bmem);
  scaling_base_close(bpoll);
  if (r->abandon) {
    run_close(r); /* leaks r and the futures: a wait timed out */
    return;
  }
  if (wait_count(r->loop, &g_pf.done, ninit, 60 * SEC) != 0) {
    printf("  held futures did not complete after the release (%d of %d)\n",
           g_pf.done, ninit);
    g_errors++;
    r->abandon = 1;
    run_close(r);
    return;
  }
  for (j = 0; j < ninit; j++) uvcuda_future_close(&pf[j], on_pending_closed);
  if (wait_count(r->loop, &g_pf.closed, ninit, 30 * SEC) != 0) {
    printf("  held futures did not close\n");
    g_errors++;
    r->abandon = 1;
    run_close(r);
    return;
  }
  drain_all(30 * SEC);
  run_close(r);
  if (!r->abandon) {
    free(r);
    free(pf);
  }
}

static void on_never(uv_async_t *h) { (void)h; }

static void on_count_closed(uv_handle_t *h) {
  (void)h;
  g_pf.closed++;
}

static void scaling_hostfn(const int *Ns, int nN) {
  const method_t *m = &METHODS[M_HOSTFN_ASYNC];
  uv_async_t *hs = NULL;
  int nmax = Ns[nN - 1], nh = 0, j, rc = 0, warmup, n;
  run_t *r;
  row_t w;

  n = scaling_samples(&warmup);
  r = run_new(m, g_timed, &WL[W_EMPTY], -1);
  if (r == NULL) return;
  hs = calloc((size_t)nmax, sizeof(*hs));
  if (hs == NULL || run_open(r) != 0) {
    g_errors++;
    free(hs);
    run_close(r);
    if (!r->abandon) free(r);
    return;
  }
  for (j = 0; j < nN; j++) {
    row_init(&w, "scaling", m->name, "empty", Ns[j]);
    if (rc != 0 || past_deadline() || g_timeouts >= 2) {
      row_note(&w, "skipped: %s", rc ? "the step before failed"
                                     : "section deadline reached");
    } else {
      while (nh < Ns[j]) {
        uv_async_init(r->loop, &hs[nh++], on_never);
        if ((nh & 1023) == 0) beat();
      }
      row_extra(&w, "idle_async_handles=%d", nh);
      rc = measure(r, warmup, n, &w);
    }
    row_emit(&w);
    scaling_row_print(&w);
  }
  if (r->abandon) {
    run_close(r); /* leaks */
    return;
  }
  g_pf.closed = 0;
  for (j = 0; j < nh; j++) uv_close((uv_handle_t *)&hs[j], on_count_closed);
  if (wait_count(r->loop, &g_pf.closed, nh, 30 * SEC) != 0) {
    g_errors++;
    r->abandon = 1;
  }
  run_close(r);
  if (!r->abandon) {
    free(r);
    free(hs);
  }
}

static void section_scaling(void) {
  /* On the simulation 100000 pending futures take well under a second
   * (every op is queued in host memory), so --quick keeps them all. */
  static const int full[] = {1, 100, 10000, 100000};
  /* A GPU hardware queue takes about 1,020 markers behind a held wait (an
   * enqueue stalled at 8,160 pending on 8 held streams, H200, 2026-12-02):
   * 31 held streams of one context hold ~31k, so 100k need the streams of
   * several contexts (setup creates them). */
  static const int gpu[] = {1, 100, 1000, 10000, 30000, 100000};
  const int *Ns = g_sim ? full : gpu;
  int nN = g_sim ? COUNT(full) : COUNT(gpu);

  /* Without enough contexts, stop where the queues would fill. */
  while (!g_sim && nN > 1 && Ns[nN - 1] > g_nxctx * NPEND * 800) nN--;

  section_header("scaling: p50 of one timed `empty` future while N others are "
                 "pending, us",
                 "uvcuda-auto: N futures spread over the held streams "
                 "(cuStreamWaitValue32) of the scaling contexts; "
                 "hostfn-async: N idle uv_async_t handles on the loop");
  printf("  %-14s %8s %9s %9s %9s %9s  %s\n", "method", "N", "p50", "p90",
         "p99", "loopCPU", "notes");
  scaling_uvcuda(Ns, nN);
  if (!g_sim && Ns[nN - 1] < 100000)
    printf("  %-14s %8d  not run: beyond what %d held hardware queues take "
           "(~1,020 markers each; only %d context(s))\n", "uvcuda-auto",
           100000, g_nxctx * NPEND, g_nxctx);
  scaling_hostfn(full, COUNT(full));
}

/* ---- the throughput section -------------------------------------------- */

static int op_empty(uvcuda_future_t *f, uvcuda_stream_t s) {
  (void)f;
  return (int)enqueue_work(&WL[W_EMPTY], (CUstream)s);
}

static void on_tput(uvcuda_future_t *f, int status) {
  run_t *r = f->data;
  r->te[f - r->tf] = uv_hrtime();
  if (status) r->terr++;
  r->tdone++;
}

static void on_tput_closed(uvcuda_future_t *f) {
  run_t *r = f->data;
  r->tdone++;
}

static void tput_work(uv_work_t *w) {
  run_t *r = w->data;
  if (!t_ctx_set) {
    cu.cuCtxSetCurrent(g_ctx);
    t_ctx_set = 1;
  }
  if (cu.cuStreamSynchronize(g_tps[(w - r->treq) % NTP]) != CUDA_SUCCESS)
    atomic_fetch_add(&r->tsync_err, 1);
}

static void tput_after(uv_work_t *w, int status) {
  run_t *r = w->data;
  r->te[w - r->treq] = uv_hrtime();
  if (status) r->terr++;
  r->tdone++;
}

/* kind: K_UVCUDA (m), K_THREADPOOL, or K_RAW ("raw-launch": enqueue all,
 * then sleep-poll the streams; the CPU cost of the launches alone; with
 * g_raw_memop also one cuStreamWriteValue32 after each launch, the driver
 * cost of the completion marker uvcuda enqueues). */
static int g_raw_memop;
static void tput_run(const method_t *m, const char *label) {
  int rounds = opt_quick ? 1 : 5, nf = NFLIGHT, rd, i, rc = 0, k = 0, done = 0;
  double *lat = NULL, thr = 0, proc = 0, wall = 0, cps = NAN, over = NAN;
  char a[32], b[32], c[32], d[32], e[32], paths[160] = "-";
  const row_t *base;
  uint64_t t0, t1;
  cpu_t c0, c1;
  CUresult q;
  run_t *r;
  row_t w;

  row_init(&w, "throughput", label, "empty", nf);
  r = run_new(m, g_timed, &WL[W_EMPTY], -1);
  if (r == NULL) return;
  r->nf = nf;
  r->ts = calloc((size_t)nf, sizeof(uint64_t));
  r->te = calloc((size_t)nf, sizeof(uint64_t));
  lat = malloc(sizeof(double) * (size_t)nf * (size_t)rounds);
  if (m->kind == K_UVCUDA) r->tf = calloc((size_t)nf, sizeof(uvcuda_future_t));
  if (m->kind == K_THREADPOOL) r->treq = calloc((size_t)nf, sizeof(uv_work_t));
  if (!r->ts || !r->te || !lat || (m->kind == K_UVCUDA && !r->tf) ||
      (m->kind == K_THREADPOOL && !r->treq)) {
    row_note(&w, "error: out of memory");
    g_errors++;
    goto out;
  }
  if (m->kind != K_RAW) {
    rc = run_open(r);
    if (rc != 0) {
      row_note(&w, "%s: %s", rc > 0 ? "skipped" : "error", r->err);
      if (rc < 0) g_errors++;
      goto out;
    }
  }
  if (m->kind == K_UVCUDA) {
    for (i = 0; i < nf; i++) {
      uvcuda_future_init(&r->ul, &r->tf[i]);
      r->tf[i].data = r;
    }
    r->tf_init = nf;
  }
  for (rd = 0; rd < 1 + rounds; rd++) { /* round 0 warms up */
    if (past_deadline()) {
      row_note(&w, "truncated by the section deadline");
      break;
    }
    if (drain_streams(g_tps, NTP, 10 * SEC) != 0) {
      row_note(&w, "error: streams did not drain");
      g_timeouts++;
      break;
    }
    if (r->loop) uv_run(r->loop, UV_RUN_NOWAIT);
    r->tdone = r->terr = 0;
    atomic_store(&r->tsync_err, 0);
    cpu_begin(&c0);
    t0 = uv_hrtime();
    for (i = 0; i < nf && rc == 0; i++) {
      CUstream s = g_tps[i % NTP];
      r->ts[i] = uv_hrtime();
      if (m->kind == K_UVCUDA) {
        rc = uvcuda_future_start(&r->tf[i], s, op_empty, on_tput);
        if (rc)
          snprintf(r->err, sizeof(r->err), "uvcuda_future_start: %s",
                   uvcuda_err_name(rc));
      } else {
        q = enqueue_work(&WL[W_EMPTY], s);
        if (q == CUDA_SUCCESS && m->kind == K_RAW && g_raw_memop)
          q = cu.cuStreamWriteValue32(s, g_flag_d + 64, (cuuint32_t)i, 0);
        if (q != CUDA_SUCCESS) {
          snprintf(r->err, sizeof(r->err), "launch: %s", cuname(q));
          rc = -1;
        } else if (m->kind == K_THREADPOOL) {
          r->treq[i].data = r;
          uv_queue_work(r->loop, &r->treq[i], tput_work, tput_after);
        }
      }
      if ((i & 1023) == 0) beat();
    }
    if (rc) {
      row_note(&w, "error: %s", r->err);
      g_errors++;
      r->abandon = 1; /* some are in flight */
      break;
    }
    if (m->kind == K_RAW)
      rc = drain_streams(g_tps, NTP, 30 * SEC);
    else
      rc = wait_count(r->loop, &r->tdone, nf, 30 * SEC);
    t1 = uv_hrtime();
    cpu_end(&c1);
    if (rc) {
      row_note(&w, "error: TIMEOUT after 30 s with %d of %d complete", r->tdone,
               nf);
      g_timeouts++;
      if (g_sim) g_errors++;
      r->abandon = 1;
      break;
    }
    if (r->terr || atomic_load(&r->tsync_err)) {
      row_note(&w, "error: %d completions failed",
               r->terr + atomic_load(&r->tsync_err));
      g_errors++;
      break;
    }
    if (rd == 0) continue;
    done += nf;
    wall += (double)(t1 - t0) / 1e3;
    thr += c1.thr - c0.thr;
    proc += c1.proc - c0.proc;
    if (m->kind != K_RAW)
      for (i = 0; i < nf; i++) lat[k++] = (double)(r->te[i] - r->ts[i]) / 1e3;
  }
  if (done > 0) {
    if (m->kind != K_RAW) row_stats(&w, lat, k);
    else w.n = done;
    w.loop_cpu = thr / done;
    w.proc_cpu = proc / done;
    cps = done / (wall / 1e6);
    row_extra(&w, "completions_per_s=%.0f;completions=%d;streams=%d;"
              "in_flight=%d", cps, done, NTP, nf);
  }
out:
  if (m->kind == K_UVCUDA && r->tf_init && !r->abandon) {
    r->tdone = 0;
    for (i = 0; i < r->tf_init; i++)
      uvcuda_future_close(&r->tf[i], on_tput_closed);
    if (wait_count(r->loop, &r->tdone, r->tf_init, 30 * SEC) != 0) {
      r->abandon = 1;
      g_errors++;
    }
  }
  run_close(r);
  if (r->have_stats) {
    stats_extra(&w, &r->stats);
    paths_str(paths, sizeof(paths), r);
  }
  if (!r->abandon) { /* else r and its arrays stay allocated */
    free(r->ts);
    free(r->te);
    free(r->tf);
    free(r->treq);
    free(r);
  }
  free(lat);
  row_emit(&w);
  base = row_find("throughput", "raw-launch", "empty", NFLIGHT);
  if (base && base != &g_rows[g_nrows - 1] && base->n && w.n)
    over = w.proc_cpu - base->proc_cpu;
  printf("  %-16s %13s %9s %9s %12s %9s  %s%s%s\n", label,
         fmt_num(a, sizeof(a), cps, 0), fmt_num(b, sizeof(b), w.proc_cpu, 2),
         fmt_num(c, sizeof(c), w.loop_cpu, 2), fmt_num(d, sizeof(d), over, 2),
         fmt_num(e, sizeof(e), w.p50, 0), paths, w.note[0] ? "  " : "",
         w.note);
  fflush(stdout);
}

static void section_throughput(void) {
  static const method_t raw_launch = {"raw-launch", K_RAW, 0};
  static const int order[] = {M_AUTO, M_HOSTFN, M_POLL, M_THREADPOOL};
  int j;

  section_header("throughput: 10000 `empty` kernels in flight over 64 streams",
                 "procCPU/loopCPU: us of CPU per completion (whole process / "
                 "loop thread); over-launch: procCPU minus raw-launch's (the "
                 "launches alone, streams sleep-polled), i.e. the cost of "
                 "awaiting; p50: start -> callback of each future, us");
  printf("  %-16s %13s %9s %9s %12s %9s  %s\n", "method", "completions/s",
         "procCPU", "loopCPU", "over-launch", "p50", "paths");
  tput_run(&raw_launch, "raw-launch");
  if (g_info.memops32) { /* the marker's driver cost, to split uvcuda's */
    g_raw_memop = 1;
    tput_run(&raw_launch, "raw-launch+memop");
    g_raw_memop = 0;
  }
  for (j = 0; j < COUNT(order); j++) {
    if (past_deadline() || g_timeouts >= 2) {
      printf("  %-16s skipped: %s\n", METHODS[order[j]].name,
             g_timeouts >= 2 ? "waits timed out" : "section deadline reached");
      continue;
    }
    tput_run(&METHODS[order[j]], METHODS[order[j]].name);
  }
}

/* ---- the idle section -------------------------------------------------- */

static void on_idle_timer(uv_timer_t *t) { uv_stop(t->loop); }

static void on_flag_closed(uv_handle_t *h) { *(volatile int *)h->data = 1; }

/* Runs the loop (nothing else on it) for dur_ns; CPU per second. */
static void idle_measure(uv_loop_t *loop, uint64_t dur_ns, row_t *w) {
  uv_timer_t t;
  cpu_t c0, c1;
  uint64_t t0, t1;
  volatile int closed = 0;

  double r0, r1;

  uv_timer_init(loop, &t);
  r0 = reactor_cpu_us();
  cpu_begin(&c0);
  t0 = uv_hrtime();
  uv_timer_start(&t, on_idle_timer, dur_ns / MS, 0);
  uv_run(loop, UV_RUN_DEFAULT);
  t1 = uv_hrtime();
  cpu_end(&c1);
  r1 = reactor_cpu_us();
  w->reactor_cpu = (r1 - r0) / ((double)(t1 - t0) / 1e9);
  if (!isnan(w->reactor_cpu))
    row_extra(w, "reactor_cpu_us_per_s=%.1f", w->reactor_cpu);
  t.data = (void *)&closed;
  uv_close((uv_handle_t *)&t, on_flag_closed);
  while (!closed) uv_run(loop, UV_RUN_NOWAIT);
  beat();
  w->n = 1;
  w->loop_cpu = (c1.thr - c0.thr) / ((double)(t1 - t0) / 1e9);
  w->proc_cpu = (c1.proc - c0.proc) / ((double)(t1 - t0) / 1e9);
  row_extra(w, "unit=cpu_us_per_s;wall_ms=%.1f", (double)(t1 - t0) / 1e6);
}

static void idle_print(const row_t *w) {
  char a[32], b[32], c[32];
  printf("  %-16s %-16s %12s %12s %12s  %s\n", w->method, w->workload,
         fmt_num(a, sizeof(a), w->proc_cpu, 1),
         fmt_num(b, sizeof(b), w->loop_cpu, 1),
         fmt_num(c, sizeof(c), w->reactor_cpu, 1), w->note);
  fflush(stdout);
}

static void idle_uvcuda(int mi, int armed, uint64_t dur_ns) {
  const method_t *m = &METHODS[mi];
  char err[200];
  run_t *r;
  row_t w;
  uint64_t ns;
  int rc;

  row_init(&w, "idle", m->name, armed ? "one-armed-held" : "nothing-armed",
           (double)dur_ns / 1e9);
  r = run_new(m, g_timed, &WL[W_EMPTY], -1);
  if (r == NULL) return;
  rc = run_open(r);
  if (rc != 0) {
    row_note(&w, "%s: %s", rc > 0 ? "skipped" : "error", r->err);
    if (rc < 0) g_errors++;
    goto out;
  }
  /* One future completes first, so the reactor thread has run. */
  if ((rc = run_prep(r)) == 0) rc = run_sample(r, &ns);
  if (rc) {
    if (rc == -1) r->abandon = 1;
    row_note(&w, "error: first future: %s", rc == -1 ? "TIMEOUT" : r->err);
    g_errors++;
    goto out;
  }
  uv_timer_stop(&r->tick); /* its wakeups would count */
  if (!armed) {
    uv_run(r->loop, UV_RUN_NOWAIT);
    idle_measure(r->loop, dur_ns, &w);
    goto out;
  }
  if (hold_streams(g_pend, 1, g_hold_d, err, sizeof(err)) != 0) {
    row_note(&w, "skipped: cannot hold a stream (%s)", err);
    goto out;
  }
  r->done = 0;
  r->status = 0;
  rc = uvcuda_future_start(&r->f, g_pend[0], NULL, on_future);
  if (rc) {
    hold_open();
    row_note(&w, "error: uvcuda_future_start: %s", uvcuda_err_name(rc));
    g_errors++;
    goto out;
  }
  idle_measure(r->loop, dur_ns, &w);
  if (r->done) row_note(&w, "invalid: the held future completed early");
  hold_open();
  uv_timer_again(&r->tick);
  if (wait_flag(r->loop, &r->done, 10 * SEC)) {
    r->abandon = 1;
    row_note(&w, "error: the held future did not complete after the release");
    g_errors++;
    goto out;
  }
  drain_streams(g_pend, 1, 10 * SEC);
out:
  run_close(r);
  if (r->have_stats) stats_extra(&w, &r->stats);
  if (!r->abandon) free(r);
  row_emit(&w);
  idle_print(&w);
}

static void section_idle(void) {
  uint64_t dur = opt_quick ? 500 * MS : 1 * SEC;
  uv_loop_t *loop;
  row_t w;

  section_header("idle: CPU time while nothing completes, us of CPU per second",
                 "no-loop: the process without any uvcuda loop (the driver's "
                 "own threads); nothing-armed: a uvcuda loop whose reactor has "
                 "run once; one-armed-held: one future armed on a held stream; "
                 "reactorCPU/s: the reactor thread's own CPU clock");
  printf("  %-16s %-16s %12s %12s %12s  %s\n", "method", "state", "procCPU/s",
         "loopCPU/s", "reactorCPU/s", "notes");
  row_init(&w, "idle", "no-loop", "nothing", (double)dur / 1e9);
  loop = malloc(sizeof(*loop));
  if (loop && uv_loop_init(loop) == 0) {
    idle_measure(loop, dur, &w);
    if (uv_loop_close(loop) != 0) g_errors++;
  }
  free(loop);
  row_emit(&w);
  idle_print(&w);
  if (!past_deadline()) idle_uvcuda(M_AUTO, 0, dur);
  if (!past_deadline()) idle_uvcuda(M_AUTO, 1, dur);
  if (!past_deadline()) idle_uvcuda(M_HOSTFN, 1, dur);
}

/* ---- targets ----------------------------------------------------------- */

static void target_line(const char *what, double value, double goal,
                        const char *unit, const char *note) {
  char v[32];
  printf("  %-52s %10s %s  goal <= %g %s  ", what, fmt_num(v, sizeof(v), value, 2),
         unit, goal, unit);
  if (isnan(value)) printf("not measured");
  else if (value <= goal) printf("met");
  else printf("missed by %.2f %s", value - goal, unit);
  if (note && note[0]) printf("  (%s)", note);
  printf("\n");
}

static double diff_rows(const row_t *a, const row_t *b, int p99) {
  if (a == NULL || b == NULL || a->n == 0 || b->n == 0) return NAN;
  return p99 ? a->p99 - b->p99 : a->p50 - b->p50;
}

/* Target line: auto's p50 rise from N=1 to a's N, less the rise of the
 * baseline `base` measured in the same state. */
static void scaling_overhead_line(const row_t *a, const row_t *b,
                                  const char *base) {
  const row_t *ra = a ? row_find("scaling", base, "empty", a->param) : NULL;
  const row_t *rb = row_find("scaling", base, "empty", 1);
  double oa = diff_rows(a, ra, 0), ob = diff_rows(b, rb, 0);
  char what[96], note[240];
  snprintf(what, sizeof(what), "scaling: uvcuda-auto over %s, N=100000 - N=1",
           base);
  snprintf(note, sizeof(note), "p50 over %s in the same state: %.1f us at "
           "N=%.0f, %.1f us at N=1; %s itself %.1f -> %.1f us", base, oa,
           a ? a->param : NAN, ob, base, rb && rb->n ? rb->p50 : NAN,
           ra && ra->n ? ra->p50 : NAN);
  target_line(what, oa - ob, 2, "us", note);
}

static void targets(void) {
  static const int full[] = {100000, 30000, 10000};
  const row_t *a, *b;
  char what[96], note[128];
  double v;
  int i;

  section_header("targets, from this run", NULL);
  for (i = W_MEMSET; i <= W_EMPTY; i++) {
    a = row_find("latency", "uvcuda-auto", WL[i].name, NAN);
    b = row_find("latency", "raw-spin", WL[i].name, NAN);
    snprintf(what, sizeof(what), "%s: uvcuda-auto p50 - raw-spin p50", WL[i].name);
    target_line(what, diff_rows(a, b, 0), 0.5, "us", NULL);
  }
  a = row_find("latency", "uvcuda-auto", "kernel-200us", NAN);
  b = row_find("latency", "raw-spin", "kernel-200us", NAN);
  target_line("kernel-200us: uvcuda-auto p50 - raw-spin p50", diff_rows(a, b, 0),
              5, "us", NULL);
  target_line("kernel-200us: uvcuda-auto p99 - raw-spin p99", diff_rows(a, b, 1),
              60, "us", NULL);
  {
    /* The loop sleeps while it waits, so it pays one wakeup that the raw
     * spin never does: what is left above that floor is ours. */
    const row_t *wk = row_find("wake", "async-wake", "none", 0);
    v = diff_rows(a, b, 0);
    if (wk && wk->n && !isnan(v)) v -= wk->p50;
    else v = NAN;
    snprintf(note, sizeof(note), "the same, less the p50 of waking a sleeping "
             "loop thread (section wake: %.1f us)", wk && wk->n ? wk->p50 : NAN);
    target_line("kernel-200us: p50 overhead beyond the wake floor", v, 5, "us",
                note);
  }

  /* At N=100000; where that was blocked, at 10000, said so. */
  b = row_find("scaling", "uvcuda-auto", "empty", 1);
  a = NULL;
  note[0] = 0;
  for (i = 0; i < 3 && a == NULL; i++) {
    a = row_find("scaling", "uvcuda-auto", "empty", full[i]);
    if (a && a->n == 0) a = NULL;
  }
  if (a && a->param != 100000)
    snprintf(note, sizeof(note), "N=100000 not measured: this is N=%.0f",
             a->param);
  target_line("scaling: uvcuda-auto p50 at N=100000 - at N=1", diff_rows(a, b, 0),
              2, "us", note);
  /* The GPU itself slows under the hold: against a spin measured in the
   * same state at each N, what is left is uvcuda's own cost. raw-spin
   * waits on the stream; memop-spin on a flag written by the stream, as
   * uvcuda's counters are. */
  scaling_overhead_line(a, b, "raw-spin");
  scaling_overhead_line(a, b, "memop-spin");
  /* uvcuda_future_timing: the library's own part of the latency, from the
   * moment the completion was seen to the callback. */
  v = (a && b) ? a->ph_deliver - b->ph_deliver : NAN;
  snprintf(note, sizeof(note), "p50 %.2f us at N=1, %.2f us at N=%.0f; "
           "start -> seen %.1f -> %.1f us", b ? b->ph_deliver : NAN,
           a ? a->ph_deliver : NAN, a ? a->param : NAN, b ? b->ph_seen : NAN,
           a ? a->ph_seen : NAN);
  target_line("scaling: uvcuda-auto seen -> callback, N=100000 - N=1", v, 2,
              "us", note);

  a = row_find("throughput", "uvcuda-auto", "empty", NFLIGHT);
  b = row_find("throughput", "raw-launch", "empty", NFLIGHT);
  v = NAN;
  note[0] = 0;
  if (a && b && a->n && b->n) {
    v = a->proc_cpu - b->proc_cpu;
    snprintf(note, sizeof(note), "process CPU per completion %.2f us, of "
             "which the launches alone %.2f us", a->proc_cpu, b->proc_cpu);
  }
  target_line("10k in flight: uvcuda-auto CPU per completion", v, 1, "us", note);
  a = row_find("throughput", "uvcuda-auto", "empty", NFLIGHT);
  b = row_find("throughput", "raw-launch+memop", "empty", NFLIGHT);
  v = (a && b && a->n && b->n) ? a->proc_cpu - b->proc_cpu : NAN;
  snprintf(note, sizeof(note), "the same, less the driver's cost of one "
           "stream memory write per future (raw-launch+memop)");
  target_line("10k in flight: uvcuda-auto CPU beyond launch+marker", v, 1, "us",
              note);

  a = row_find("idle", "uvcuda-auto", "nothing-armed", NAN);
  v = a && a->n ? a->reactor_cpu : NAN;
  snprintf(note, sizeof(note), "the reactor thread's own CPU clock");
  target_line("idle reactor CPU, nothing armed", v, 0, "us/s", note);
  b = row_find("idle", "no-loop", "nothing", NAN);
  v = (a && b && a->n && b->n) ? a->proc_cpu - b->proc_cpu : NAN;
  snprintf(note, sizeof(note), "whole process, driver threads included: "
           "noise, shown for reference");
  printf("  %-52s %10.2f us/s  (%s)\n", "idle process CPU, nothing armed, over no-loop",
         v, note);
}

/* ---- the wake section: the floor of a sleeping loop thread -------------- */

/* No GPU: another thread calls uv_async_send at a time it records while the
 * loop thread sleeps in epoll_wait; the callback records its own time. This
 * is what any "loop asleep while waiting" completion pays on top of seeing
 * the work finish: the reactor's, the flag thread's, a host function's. */
/* Shared by the loop thread and the sender: atomics only (the sender
 * writes t0 before its send, the callback reads it after). */
static uv_async_t g_wake_async;
static atomic_uint_fast64_t g_wake_t0;
static atomic_int g_wake_n, g_wake_stop;
static double *g_wake_lat;
static int g_wake_want;

static void on_wake(uv_async_t *h) {
  uint64_t t1 = uv_hrtime();
  int n = atomic_load_explicit(&g_wake_n, memory_order_relaxed);
  (void)h;
  if (n < g_wake_want)
    g_wake_lat[n] = (double)(t1 - atomic_load(&g_wake_t0)) / 1e3;
  atomic_store_explicit(&g_wake_n, n + 1, memory_order_release);
  if (n + 1 >= g_wake_want) uv_close((uv_handle_t *)h, NULL);
}

static void *wake_sender(void *arg) {
  int i, seen;
  (void)arg;
  for (i = 0; i < g_wake_want && !atomic_load(&g_wake_stop); i++) {
    struct timespec ts = {0, 200000}; /* let the loop fall asleep */
    nanosleep(&ts, NULL);
    atomic_store(&g_wake_t0, uv_hrtime());
    uv_async_send(&g_wake_async);
    seen = i + 1;
    while (atomic_load_explicit(&g_wake_n, memory_order_acquire) < seen &&
           !atomic_load(&g_wake_stop))
      ;
  }
  return NULL;
}

/* An arm wakes a sleeping reactor (test-reactor checks that it does; this
 * is what it is worth). One future held armed keeps the reactor from
 * parking; a second one is armed (spin budget 0) on a stream that a gate
 * holds, and the gate opens 5 ms later: timed from the open to the
 * callback. asleep: no reactor spin or yield phase, so at each arm the
 * reactor sleeps in its back-off (2 ms steps); spinning, the baseline of
 * the same run: a 1 s spin phase, restarted by every arm. */
static uint64_t g_aw_t1;
static volatile int g_aw_done;
static int g_aw_status;

static void on_aw(uvcuda_future_t *f, int status) {
  (void)f;
  g_aw_t1 = uv_hrtime();
  g_aw_status = status;
  g_aw_done = 1;
}

static int op_aw_gate(uvcuda_future_t *f, uvcuda_stream_t s) {
  cuuint32_t v = (cuuint32_t)(uintptr_t)f->data;
  return (int)cu.cuStreamWaitValue32((CUstream)s, g_awgate_d, v,
                                     CU_STREAM_WAIT_VALUE_GEQ);
}

static void on_aw_held(uvcuda_future_t *f, int status) {
  (void)status;
  *(volatile int *)f->data = 1;
}

static void on_aw_closed(uvcuda_future_t *f) { (void)f; }

static void wake_arm(int asleep, int n, row_t *w) {
  struct timespec settle = {0, 10 * 1000 * 1000}, gap = {0, 5 * 1000 * 1000};
  uvcuda_options_t o;
  uvcuda_future_t held, f;
  uv_timer_t tick;
  uv_loop_t *loop;
  uvcuda_loop_t ul;
  volatile int held_done = 0;
  double *lat = calloc((size_t)n, sizeof(double));
  uint32_t seq = __atomic_load_n(g_awgate, __ATOMIC_ACQUIRE);
  char err[200];
  int i, k = 0, rc;

  loop = malloc(sizeof(*loop));
  if (lat == NULL || loop == NULL || uv_loop_init(loop) != 0) {
    row_note(w, "error: out of memory");
    g_errors++;
    free(lat);
    free(loop);
    return;
  }
  uv_timer_init(loop, &tick);
  uv_timer_start(&tick, on_tick, 50, 50);
  uvcuda_options_init(&o);
  o.completion = UVCUDA_COMPLETION_REACTOR;
  o.spin_budget_us = 0;
  o.reactor_spin_us = asleep ? 0 : 1000000;
  o.reactor_yield_us = 0;
  o.reactor_sleep_max_us = 2000;
  o.probe_interval_us = 2000;
  if ((rc = uvcuda_loop_init(loop, &ul, &o)) != 0) {
    row_note(w, "error: uvcuda_loop_init: %s", uvcuda_err_name(rc));
    g_errors++;
    return; /* the loop is leaked: its timer is on it */
  }
  if (hold_streams(g_pend, 1, g_hold_d, err, sizeof(err)) != 0) {
    row_note(w, "skipped: cannot hold a stream (%s)", err);
    return;
  }
  uvcuda_future_init(&ul, &held);
  uvcuda_future_init(&ul, &f);
  held.data = (void *)&held_done;
  if ((rc = uvcuda_future_start(&held, g_pend[0], NULL, on_aw_held)) != 0) {
    hold_open();
    row_note(w, "error: uvcuda_future_start: %s", uvcuda_err_name(rc));
    g_errors++;
    return;
  }
  for (i = 0; i < n; i++) {
    uint64_t t0;
    if (past_deadline()) {
      row_note(w, "truncated by the section deadline");
      break;
    }
    uv_run(loop, UV_RUN_NOWAIT);
    nanosleep(&settle, NULL); /* asleep: past the back-off's first steps */
    f.data = (void *)(uintptr_t)++seq;
    g_aw_done = 0;
    if ((rc = uvcuda_future_start(&f, g_timed, op_aw_gate, on_aw)) != 0) {
      row_note(w, "error: uvcuda_future_start: %s", uvcuda_err_name(rc));
      g_errors++;
      break;
    }
    uv_run(loop, UV_RUN_NOWAIT); /* spin budget 0: armed */
    nanosleep(&gap, NULL);
    t0 = uv_hrtime();
    __atomic_store_n(g_awgate, seq, __ATOMIC_RELEASE);
    if (wait_flag(loop, &g_aw_done, 5 * SEC) != 0 || g_aw_status != 0) {
      row_note(w, "error: %s", g_aw_done ? uvcuda_err_name(g_aw_status)
                                         : "TIMEOUT: no callback after 5 s");
      g_errors++;
      hold_open();
      return; /* leaked: the reactor may still ring the loop */
    }
    lat[k++] = (double)(g_aw_t1 - t0) / 1e3;
    beat();
  }
  hold_open();
  if (wait_flag(loop, &held_done, 10 * SEC) != 0) {
    row_note(w, "error: the held future did not complete after the release");
    g_errors++;
    return;
  }
  row_stats(w, lat, k);
  free(lat);
  uvcuda_future_close(&held, on_aw_closed);
  uvcuda_future_close(&f, on_aw_closed);
  uv_run(loop, UV_RUN_NOWAIT);
  if (uvcuda_loop_close(&ul, NULL) != 0) g_errors++;
  uv_close((uv_handle_t *)&tick, NULL);
  uv_run(loop, UV_RUN_DEFAULT);
  if (uv_loop_close(loop) != 0) g_errors++;
  free(loop);
  drain_streams(g_pend, 1, 10 * SEC);
}

static void wake_print(const row_t *w) {
  printf("  %-22s p50 %7.1f  p90 %7.1f  p99 %7.1f  (%d samples)%s%s\n",
         w->method, w->p50, w->p90, w->p99, w->n, w->note[0] ? "  " : "",
         w->note);
}

static void section_wake(void) {
  uv_loop_t loop;
  pthread_t t;
  row_t w, wa, ws;
  int n = opt_quick ? 50 : 2000, k;
  int na = opt_quick ? 21 : 200;

  section_header("wake: uv_async_send from another thread -> callback on a "
                 "sleeping loop thread, us (no GPU)",
                 "the floor under every completion that lets the loop thread "
                 "sleep while the GPU works");
  g_wake_lat = calloc((size_t)n, sizeof(double));
  if (g_wake_lat == NULL) return;
  g_wake_want = n;
  atomic_store(&g_wake_n, 0);
  atomic_store(&g_wake_stop, 0);
  uv_loop_init(&loop);
  uv_async_init(&loop, &g_wake_async, on_wake);
  pthread_create(&t, NULL, wake_sender, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  atomic_store(&g_wake_stop, 1);
  pthread_join(t, NULL);
  uv_loop_close(&loop);
  row_init(&w, "wake", "async-wake", "none", 0);
  k = atomic_load(&g_wake_n);
  row_stats(&w, g_wake_lat, k < n ? k : n);
  row_emit(&w);
  wake_print(&w);
  free(g_wake_lat);

  printf(" an arm wakes a reactor asleep in its back-off: gate open -> "
         "callback, us\n");
  row_init(&wa, "wake", "reactor-arm-asleep", "gate-open", 0);
  wake_arm(1, na, &wa);
  row_emit(&wa);
  wake_print(&wa);
  row_init(&ws, "wake", "reactor-arm-spinning", "gate-open", 0);
  wake_arm(0, na, &ws);
  row_emit(&ws);
  wake_print(&ws);
  if (wa.n && ws.n)
    printf("  asleep - spinning (baseline, this run): p50 %+.1f us, p90 "
           "%+.1f us\n", wa.p50 - ws.p50, wa.p90 - ws.p90);
}

/* ---- setup ------------------------------------------------------------- */

static void usage(FILE *to) {
  fprintf(to,
          "usage: uvcuda-bench [--quick] [--csv FILE] [--section NAME]... "
          "[--samples N]\n"
          "  --quick        few samples (for the simulation and smoke tests)\n"
          "  --csv FILE     write every measurement to FILE\n"
          "  --section NAME latency, spin, scaling, throughput, idle "
          "(repeatable; default all)\n"
          "  --samples N    timed samples per measurement (default 1000, after "
          "N/10 up to 100 warm-up)\n"
          "  --probe-us N   uvcuda loops' fault probe interval (50..2000; "
          "default: the library's)\n"
          "  --reactor-spin-us N, --reactor-yield-us N, --reactor-sleep-max-us N\n"
          "                 uvcuda loops' reactor back-off (default: the "
          "library's)\n"
          "  --gap-us N     idle time between two samples (default 0)\n"
          "  --contexts N   CUDA contexts whose streams scaling holds (1..5, "
          "default 5)\n");
}

/* The integer value of option `name`, lo..hi. */
static int int_arg(const char *name, const char *s, long lo, long hi, int *out) {
  char *end;
  long v = strtol(s, &end, 10);
  if (*s == 0 || *end || v < lo || v > hi) {
    fprintf(stderr, "uvcuda-bench: bad %s %s\n", name, s);
    return -1;
  }
  *out = (int)v;
  return 0;
}

static int parse_args(int argc, char **argv) {
  int i, j, samples = -1;
  for (i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--quick") == 0) {
      opt_quick = 1;
    } else if (strcmp(a, "--csv") == 0 && i + 1 < argc) {
      opt_csv = argv[++i];
    } else if (strcmp(a, "--section") == 0 && i + 1 < argc) {
      const char *n = argv[++i];
      for (j = 0; j < COUNT(SECTIONS); j++)
        if (strcmp(n, SECTIONS[j].name) == 0) break;
      if (j == COUNT(SECTIONS)) {
        fprintf(stderr, "uvcuda-bench: unknown section %s\n", n);
        return -1;
      }
      opt_sections |= SECTIONS[j].bit;
    } else if (strcmp(a, "--samples") == 0 && i + 1 < argc) {
      if (int_arg(a, argv[++i], 1, 1000000, &samples) != 0) return -1;
    } else if (strcmp(a, "--probe-us") == 0 && i + 1 < argc) {
      if (int_arg(a, argv[++i], 50, 2000, &opt_probe_us) != 0) return -1;
    } else if (strcmp(a, "--gap-us") == 0 && i + 1 < argc) {
      if (int_arg(a, argv[++i], 0, 1000000, &opt_gap_us) != 0) return -1;
    } else if (strcmp(a, "--contexts") == 0 && i + 1 < argc) {
      if (int_arg(a, argv[++i], 1, NXCTX, &opt_contexts) != 0) return -1;
    } else if (strcmp(a, "--reactor-spin-us") == 0 && i + 1 < argc) {
      if (int_arg(a, argv[++i], 0, 1000000, &opt_rspin_us) != 0) return -1;
    } else if (strcmp(a, "--reactor-yield-us") == 0 && i + 1 < argc) {
      if (int_arg(a, argv[++i], 0, 10000000, &opt_ryield_us) != 0) return -1;
    } else if (strcmp(a, "--reactor-sleep-max-us") == 0 && i + 1 < argc) {
      if (int_arg(a, argv[++i], 1, 100000, &opt_rsleep_us) != 0) return -1;
    } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      exit(0);
    } else {
      usage(stderr);
      return -1;
    }
  }
  if (opt_sections == 0) opt_sections = SEC_ALL;
  if (opt_quick) {
    opt_samples = 30;
    opt_warmup = 5;
  }
  if (samples > 0) {
    opt_samples = samples;
    opt_warmup = samples / 10 > 100 ? 100 : samples / 10;
  }
  return 0;
}

static int setup(void) {
  char name[256] = "?", ver[512] = "";
  int cc_major = 0, cc_minor = 0, err, i, k;
  void *pin = NULL;
  CUmodule mod;
  CUresult r;
  FILE *f;

  /* Before the driver loads: a hardware queue per stream (up to 32), so
   * held streams don't share one with the timed stream. */
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 1);
  err = uvcuda_driver_info(&g_info);
  if (err) {
    printf("uvcuda-bench: no CUDA driver: %s (%s)\n", uvcuda_strerror(err),
           uvcuda_driver_dlerror() ? uvcuda_driver_dlerror() : "");
    return -1;
  }
  g_sim = g_info.simulated;
  if (sym("cuDeviceGet", 2000, &cu.cuDeviceGet) ||
      sym("cuDeviceGetName", 2000, &cu.cuDeviceGetName) ||
      sym("cuDeviceGetAttribute", 2000, &cu.cuDeviceGetAttribute) ||
      sym("cuDevicePrimaryCtxRetain", 7000, &cu.cuDevicePrimaryCtxRetain) ||
      sym("cuCtxSetCurrent", 4000, &cu.cuCtxSetCurrent) ||
      sym("cuStreamCreate", 2000, &cu.cuStreamCreate) ||
      sym("cuStreamSynchronize", 2000, &cu.cuStreamSynchronize) ||
      sym("cuStreamQuery", 2000, &cu.cuStreamQuery) ||
      sym("cuStreamWaitValue32", 11070, &cu.cuStreamWaitValue32) ||
      sym("cuStreamWriteValue32", 11070, &cu.cuStreamWriteValue32) ||
      sym("cuLaunchHostFunc", 10000, &cu.cuLaunchHostFunc) ||
      sym("cuMemAlloc", 3020, &cu.cuMemAlloc) ||
      sym("cuMemHostAlloc", 2020, &cu.cuMemHostAlloc) ||
      sym("cuMemHostGetDevicePointer", 3020, &cu.cuMemHostGetDevicePointer) ||
      sym("cuMemsetD32Async", 3020, &cu.cuMemsetD32Async) ||
      sym("cuModuleLoadData", 2000, &cu.cuModuleLoadData) ||
      sym("cuModuleGetFunction", 2000, &cu.cuModuleGetFunction) ||
      sym("cuLaunchKernel", 4000, &cu.cuLaunchKernel))
    return -1;
  if (g_info.device_count < 1 ||
      (r = cu.cuDeviceGet(&g_dev, 0)) != CUDA_SUCCESS) {
    printf("uvcuda-bench: no CUDA device (driver %d)\n", g_info.driver_version);
    return -1;
  }
  cu.cuDeviceGetName(name, sizeof(name), g_dev);
  cu.cuDeviceGetAttribute(&cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                          g_dev);
  cu.cuDeviceGetAttribute(&cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                          g_dev);
  if (g_sim) {
    g_tag = " [simulation, not a GPU measurement]";
    printf("uvcuda-bench: SIMULATED CUDA driver (%s, reports %d.%d): no GPU; "
           "every number below is simulation, not a GPU measurement\n",
           g_info.path, g_info.driver_version / 1000,
           g_info.driver_version % 1000 / 10);
  } else {
    printf("uvcuda-bench: GPU %s (sm_%d%d), CUDA driver %d.%d (%d)\n", name,
           cc_major, cc_minor, g_info.driver_version / 1000,
           g_info.driver_version % 1000 / 10, g_info.driver_version);
    if ((f = fopen("/proc/driver/nvidia/version", "r")) != NULL) {
      if (fgets(ver, sizeof(ver), f)) {
        ver[strcspn(ver, "\n")] = 0;
        printf("kernel module: %s\n", ver);
      }
      fclose(f);
    }
  }
  printf("device: %s; libcuda: %s; memops32=%d memops64=%d host_task_sync=%d; "
         "CUDA_DEVICE_MAX_CONNECTIONS=%s; libuv %s; uvcuda %d.%d.%d\n",
         name, g_info.path, g_info.memops32, g_info.memops64,
         g_info.host_task_sync, getenv("CUDA_DEVICE_MAX_CONNECTIONS"),
         uv_version_string(), UVCUDA_VERSION_MAJOR, UVCUDA_VERSION_MINOR,
         UVCUDA_VERSION_PATCH);
  printf("samples: %d after %d warm-up (kernel-2ms: %d after %d)%s\n",
         opt_samples, opt_warmup, opt_samples > 200 ? 200 : opt_samples,
         opt_warmup > 20 ? 20 : opt_warmup, opt_quick ? "; --quick" : "");

#define CHECK(call)                                                     \
  do {                                                                  \
    if ((r = (call)) != CUDA_SUCCESS) {                                 \
      printf("uvcuda-bench: %s: %s\n", #call, cuname(r));               \
      return -1;                                                        \
    }                                                                   \
  } while (0)
  CHECK(cu.cuDevicePrimaryCtxRetain(&g_ctx, g_dev));
  CHECK(cu.cuCtxSetCurrent(g_ctx));
  /* The timed stream first, then the held ones, then the rest. */
  CHECK(cu.cuStreamCreate(&g_timed, CU_STREAM_NON_BLOCKING));
  for (i = 0; i < NPEND; i++)
    CHECK(cu.cuStreamCreate(&g_pend[i], CU_STREAM_NON_BLOCKING));
  for (i = 0; i < NTP; i++)
    CHECK(cu.cuStreamCreate(&g_tps[i], CU_STREAM_NON_BLOCKING));
  CHECK(cu.cuMemAlloc(&g_dword, 256));
  CHECK(cu.cuMemHostAlloc(&pin, 4096, CU_MEMHOSTALLOC_PORTABLE |
                                          CU_MEMHOSTALLOC_DEVICEMAP));
  memset(pin, 0, 4096);
  g_hold = (uint32_t *)pin;
  g_flag = (uint32_t *)((char *)pin + 64); /* own cache line */
  g_mflag = (uint32_t *)((char *)pin + 192); /* past raw-launch's word */
  g_awgate = (uint32_t *)((char *)pin + 256); /* section wake's gate */
  CHECK(cu.cuMemHostGetDevicePointer(&g_hold_d, pin, 0));
  g_flag_d = g_hold_d + 64;
  g_mflag_d = g_hold_d + 192;
  g_awgate_d = g_hold_d + 256;
  CHECK(cu.cuModuleLoadData(&mod, uvcuda_bench_kernels_ptx));
  CHECK(cu.cuModuleGetFunction(&g_fn_sleep, mod, "uvcuda_sleep_ns"));
#undef CHECK
  g_xctx[0] = g_ctx;
  g_xhold_d[0] = g_hold_d;
  /* More contexts, more hardware queues: the simulation needs none. */
  if (!g_sim && sym("cuCtxCreate", 12050, &cu.cuCtxCreate) == 0) {
    for (k = 1; k < opt_contexts; k++) {
      r = cu.cuCtxCreate(&g_xctx[k], NULL, 0, g_dev); /* makes it current */
      for (i = 0; r == CUDA_SUCCESS && i < NPEND; i++)
        r = cu.cuStreamCreate(&g_xpend[k][i], CU_STREAM_NON_BLOCKING);
      if (r == CUDA_SUCCESS)
        r = cu.cuMemHostGetDevicePointer(&g_xhold_d[k], pin, 0);
      if (r != CUDA_SUCCESS) {
        printf("scaling: context %d of %d not made (%s); scaling holds "
               "fewer futures\n", k + 1, opt_contexts, cuname(r));
        break;
      }
      g_nxctx = k + 1;
    }
    cu.cuCtxSetCurrent(g_ctx);
  }
  printf("scaling: %d context(s) x %d held streams\n", g_nxctx, NPEND);
  return 0;
}

struct section_def {
  unsigned bit;
  const char *name;
  void (*fn)(void);
  uint64_t budget_ns, quick_ns;
};

int main(int argc, char **argv) {
  static const struct section_def defs[] = {
      {SEC_LATENCY, "latency", section_latency, 110 * SEC, 25 * SEC},
      {SEC_SPIN, "spin", section_spin, 25 * SEC, 8 * SEC},
      {SEC_SCALING, "scaling", section_scaling, 70 * SEC, 15 * SEC},
      {SEC_THROUGHPUT, "throughput", section_throughput, 30 * SEC, 10 * SEC},
      {SEC_IDLE, "idle", section_idle, 15 * SEC, 8 * SEC},
      {SEC_WAKE, "wake", section_wake, 10 * SEC, 4 * SEC},
  };
  pthread_t wd;
  uint64_t t_start = uv_hrtime(), t_sec;
  int i, wd_on = 0;

  setvbuf(stdout, NULL, _IOLBF, 0);
  if (parse_args(argc, argv) != 0) return 2;
  if (opt_csv) {
    g_csv = fopen(opt_csv, "w");
    if (g_csv == NULL) {
      fprintf(stderr, "uvcuda-bench: %s: %s\n", opt_csv, strerror(errno));
      return 2;
    }
    fprintf(g_csv, "section,method,workload,param,samples,p50_us,p90_us,"
                   "p99_us,mean_us,loop_cpu_us_per_op,proc_cpu_us_per_op,"
                   "extra\n");
    fflush(g_csv);
  }
  if (getenv("UVCUDA_BENCH_STALL_S")) {
    double o = 0, e = 0;
    if (sscanf(getenv("UVCUDA_BENCH_STALL_S"), "%lf,%lf", &o, &e) == 2 &&
        o > 0 && e > o) {
      g_stall_open_ns = (uint64_t)(o * 1e9);
      g_stall_exit_ns = (uint64_t)(e * 1e9);
    }
  }
  if (getenv("UVCUDA_BENCH_TEST_STALL"))
    g_test_stall = atol(getenv("UVCUDA_BENCH_TEST_STALL"));
  g_test_hang = getenv("UVCUDA_BENCH_TEST_HANG");
  if (pthread_create(&wd, NULL, watchdog_main, NULL) == 0) wd_on = 1;
  if (setup() != 0) {
    if (g_csv) fclose(g_csv);
    fflush(stdout);
    _exit(1);
  }
  beat();
  for (i = 0; i < COUNT(defs); i++) {
    if (!(opt_sections & defs[i].bit)) continue;
    g_section = defs[i].name;
    g_truncated = 0;
    g_timeouts = 0;
    t_sec = uv_hrtime();
    g_deadline = t_sec + (opt_quick ? defs[i].quick_ns : defs[i].budget_ns);
    beat();
    if (g_test_hang && strcmp(g_test_hang, defs[i].name) == 0)
      for (;;) pause(); /* test hook: the watchdog must end this */
    defs[i].fn();
    printf(" (section %s: %.1f s%s)\n", defs[i].name,
           (double)(uv_hrtime() - t_sec) / 1e9,
           g_truncated ? "; cut short by its deadline" : "");
  }
  g_section = "targets";
  targets();
  printf("\ntotal %.1f s%s%s\n", (double)(uv_hrtime() - t_start) / 1e9,
         g_errors ? "; ERRORS (see above)" : "",
         g_sim ? "; simulation, not a GPU measurement" : "");
  if (wd_on) {
    atomic_store(&g_wd_stop, 1);
    pthread_join(wd, NULL);
  }
  if (g_csv) fclose(g_csv);
  fflush(stdout);
  free(g_rows);
  /* _exit: a pool thread stuck in a CUDA call must not hold up exit (libuv
   * joins its pool threads in a destructor). */
  _exit(g_errors ? 1 : 0);
}
