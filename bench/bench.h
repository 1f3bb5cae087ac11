/* uvcuda-bench: declarations shared by its files. Everything the files
 * share lives in one context, `bench` (main.c); what only one file needs
 * is static there. See README.md for what is measured and why. */
#ifndef UVCUDA_BENCH_H
#define UVCUDA_BENCH_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <uv.h>

#include "drvtab.h" /* support/: the driver API (lib/cuda-api.h), its table */
#include "uvcuda.h"

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

#define container_of(p, T, m) ((T *)((char *)(p) - offsetof(T, m)))
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ---- the context -------------------------------------------------------- */

typedef struct {
  int quick;
  int samples, warmup;
  int probe_us;                      /* uvcuda loops' probe_interval_us */
  int rspin_us, ryield_us, rsleep_us; /* reactor back-off (-1: default) */
  int rbackoff_pct;                  /* reactor_backoff_pct (-1: default) */
  int gap_us;                        /* idle time between two samples */
  int contexts;                      /* contexts of the scaling section */
  const char *csv;
  unsigned sections;                 /* SEC_* bits */
} bench_opts_t;


typedef struct {
  bench_opts_t opt;
  drvtab_t cu; /* the driver entry points (setup.c) */
  uvcuda_driver_info_t info;
  /* Room for an older library's larger uvcuda_driver_info_t: the A/B
   * scripts run this bench against the last release's library too. */
  char info_room[64];
  int sim;
  const char *tag; /* "" or " [simulation, not a GPU measurement]" */
  CUdevice dev;
  CUcontext ctx;
  CUfunction fn_sleep;
  CUdeviceptr dword; /* target of memset4 */
  /* host-pinned words, each on its own cache line: the scaling and idle
   * sections' hold, the flag thread's flag, memop-spin's flag, the wake
   * section's gate */
  uint32_t *hold, *flag, *mflag, *awgate;
  CUdeviceptr hold_d, flag_d, mflag_d, awgate_d;
  CUstream timed; /* created first: its own queue */
  /* Held streams per context; [0] is the primary context. Only scaling
   * uses more than [0], and only on a GPU. */
  CUcontext xctx[NXCTX];
  CUstream xpend[NXCTX][NPEND];
  CUdeviceptr xhold_d[NXCTX];
  int nxctx;
  CUstream tps[NTP]; /* throughput streams */
  int errors;        /* bench or library misbehaviour */

  /* progress (progress.c) */
  const char *volatile section;
  uint64_t deadline; /* of the running section */
  int truncated;     /* the deadline cut something short */
  int timeouts;      /* timed out waits in this section */
  atomic_int hold_watch;  /* 1: the watchdog may open the hold */
  atomic_uint hold_value; /* the store that opens the current hold */
  atomic_int blocked;     /* the watchdog opened the hold */
  /* futures pending on the held streams (held_on_done, held_on_closed) */
  struct {
    int done, err, closed;
  } held;
  /* No progress for this long: the watchdog opens a stream hold
   * (scaling), then gives up on the program. Test hooks (environment, for
   * checking these paths on the simulation): UVCUDA_BENCH_STALL_S=
   * "OPEN,EXIT" sets both in seconds; UVCUDA_BENCH_TEST_STALL=N makes the
   * scaling section act as if the enqueue of pending future N blocked
   * until the hold opens; UVCUDA_BENCH_TEST_HANG=SECTION makes that
   * section hang. */
  uint64_t stall_open_ns, stall_exit_ns;
  long test_stall;
  const char *test_hang;
} bench_t;

extern bench_t bench;

enum {
  SEC_LATENCY = 1,
  SEC_SPIN = 2,
  SEC_SCALING = 4,
  SEC_THROUGHPUT = 8,
  SEC_IDLE = 16,
  SEC_WAKE = 32,
  SEC_ADAPT = 64,
  SEC_DELIVERY = 128,
  SEC_ALL = 255
};

/* setup.c */
int setup(void);
const char *cuname(CUresult r);
/* Makes the bench's context current on a pool thread, once per thread. */
void ctx_on_this_thread(void);

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* ---- progress, deadlines, the watchdog (progress.c) --------------------- */

void beat(void); /* the main thread made progress */
int past_deadline(void);
void hold_open(void);
int watchdog_start(void);
void watchdog_stop(void);

/* ---- CPU clocks (clock.c) ----------------------------------------------- */

typedef struct {
  double thr, proc; /* µs: the calling (loop) thread, the whole process */
} cpu_t;

void cpu_begin(cpu_t *c);
void cpu_end(cpu_t *c);
/* CPU time of uvcuda's reactor thread, us; NAN if there is none. The _now
 * form keeps the thread found (cheap per sample) and says which it read:
 * a difference across two threads means nothing. */
double reactor_cpu_us(void);
double reactor_cpu_now_us(unsigned *tid);

/* ---- result rows, their statistics and the CSV (rows.c) ----------------- */

typedef struct {
  char section[16];
  char method[32];
  char workload[32];
  double param;
  int n; /* samples behind the numbers; 0: nothing measured */
  double p50, p90, p99, mean, loop_cpu, proc_cpu;
  /* The reactor thread's CPU: us per op (idle: per s); NAN: none. */
  double reactor_cpu;
  /* uvcuda_future_timing medians, us from start (runs with r->timing) */
  double ph_enq, ph_seen, ph_deliver; /* deliver: seen -> callback */
  char extra[512];
  char note[256]; /* printed: errors, skips, truncation */
} row_t;

void row_init(row_t *w, const char *sec, const char *method, const char *wl,
              double param);
void row_extra(row_t *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Appends to the CSV's extra and to the printed note. */
void row_note(row_t *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void row_stats(row_t *w, double *lat_us, int n);
void row_emit(row_t *w);
const row_t *row_find(const char *sec, const char *method, const char *wl,
                      double param);
const row_t *row_last(void);
void rows_free(void);
int csv_open(const char *path);
void csv_flush(void);
void csv_close(void);

int cmp_double(const void *a, const void *b);
double median_of(double *v, int n);
const char *fmt_num(char *buf, size_t n, double v, int prec);
void section_header(const char *title, const char *what);
const char *asleep_str(const row_t *w);
void lat_table_head(const char *first);
void lat_table_row(const char *label, const row_t *w, const char *paths);
void stats_extra(row_t *w, const uvcuda_stats_t *st);

/* ---- workloads (run.c) -------------------------------------------------- */

typedef struct {
  const char *name;
  int memset;  /* cuMemsetD32Async of one word, else uvcuda_sleep_ns */
  uint64_t ns; /* kernel duration */
  double us;   /* nominal duration (the CSV's param) */
} workload_t;

enum { W_MEMSET, W_EMPTY, W_K5, W_K20, W_K50, W_K200, W_K2MS, W_COUNT };
extern const workload_t WL[W_COUNT];

CUresult enqueue_work(const workload_t *w, CUstream s);

/* ---- methods: one interface, a file per kind ---------------------------- */

typedef struct run_s run_t;

/* What a method does on its run. open: 0, 1 skipped, -1 failed (r->err).
 * sample: enqueue the work and wait for it, *t0 taken just before the
 * enqueue, r->t1 at completion: 0, -1 timeout, -2 error (r->err). stop:
 * always, even when the run is abandoned (threads to join, stats to take);
 * close: only when it is not, -1 to leak the run instead. Any may be NULL
 * but sample. */
typedef struct {
  size_t size; /* of the method's run, which begins with run_t */
  int (*open)(run_t *r);
  void (*prep)(run_t *r); /* untimed, before each sample */
  int (*sample)(run_t *r, uint64_t *t0);
  void (*post)(run_t *r); /* untimed, after each sample */
  void (*stop)(run_t *r);
  int (*close)(run_t *r);
} method_ops_t;

typedef struct {
  const char *name;
  const method_ops_t *ops;
  uvcuda_completion_t completion; /* uvcuda-*: the strategy */
  uint32_t flags; /* uvcuda-*: UVCUDA_OPT_* added to the loop's options */
} method_t;

extern const method_ops_t raw_spin_ops, memop_spin_ops, hostfn_async_ops,
    threadpool_ops, flag_thread_ops, uvcuda_ops, nap_spin_ops;

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
  M_TODAY,    /* auto, UVCUDA_OPT_NO_ADAPTIVE (the adapt section) */
  M_ADAPTIVE, /* auto, UVCUDA_OPT_ADAPTIVE */
  M_TODAY_AA, /* M_TODAY again: the A/A control of the adapt section */
  M_NAP,      /* memop-spin asleep until shortly before the known end */
  M_COUNT
};
extern const method_t METHODS[M_COUNT];

/* One method on one fresh loop. Heap-allocated with its loop: after a
 * timed out wait both are leaked, since a host function, a pool thread or
 * the reactor may still touch them. */
struct run_s {
  const method_t *m;
  uv_loop_t *loop;
  uv_timer_t tick; /* bounds every blocking uv_run(ONCE) */
  const workload_t *wl;
  /* Per-sample kernel lengths (run_lengths): each prep takes the next into
   * wl_var, which wl then points at. NULL: wl->ns every time. */
  const uint64_t *lens;
  int nlens, ilen;
  workload_t wl_var;
  CUstream stream;
  int spin_budget_us;  /* uvcuda: -1 = library default */
  uint64_t timeout_ns; /* of one sample */
  /* one sample */
  volatile int done;
  int status;
  uint64_t t1;
  uint64_t t0, t_enq; /* the floors: start, and their enqueue's return */
  char err[200];
  int abandon; /* leak instead of closing */
  int timing;  /* uvcuda: UVCUDA_OPT_TIMING, phases into the row */
  /* uvcuda: what the run reports, taken as it closes */
  uvcuda_stats_t stats;
  int have_stats;
  uint64_t spin_ns; /* the spin budget in effect */
};

/* run.c */
run_t *run_new(const method_t *m, CUstream s, const workload_t *wl,
               int spin_budget_us);
/* From the next prep on, sample i runs lens[i % n] ns of the sleep kernel
 * (lens must outlive every sample of the run). */
void run_lengths(run_t *r, const uint64_t *lens, int n);
int run_open(run_t *r);
int run_prep(run_t *r);
int run_sample(run_t *r, uint64_t *lat_ns);
void run_post(run_t *r);
/* Closes the loop and what is on it, or leaks it all on abandon (set here
 * too when closing fails). Never frees r: free it unless r->abandon. */
void run_close(run_t *r);
int measure(run_t *r, int warmup, int n, row_t *w);
/* measure() in parts: timed samples of one run gathered over several calls
 * (interleaved with other runs), then made a row. */
typedef struct {
  double *lat; /* us, k of cap */
  double *ph;  /* phases (r->timing), 3 x cap; NULL: none */
  int cap, k;
  double thr, proc; /* CPU us summed over the k samples */
  double rct;       /* the reactor's, over rct_n of them */
  int rct_n;
} acc_t;
int acc_init(acc_t *a, int n, int timing);
/* warmup untimed samples, then up to n timed ones appended to a; notes to
 * w. 0, or -1 as measure(). */
int measure_into(run_t *r, int warmup, int n, acc_t *a, row_t *w);
void acc_row(acc_t *a, row_t *w);
void acc_free(acc_t *a);
void paths_str(char *buf, size_t n, const run_t *r);
void on_tick(uv_timer_t *t);
int wait_flag(uv_loop_t *loop, volatile int *flag, uint64_t timeout_ns);
int wait_count(uv_loop_t *loop, volatile int *count, int want,
               uint64_t timeout_ns);
CUresult enqueue_marked(const workload_t *w, CUstream s, CUdeviceptr d,
                        uint32_t seq);
CUresult enqueue_flagged(run_t *r, uint32_t *seq, CUdeviceptr d,
                         uint64_t *t0);

/* method-uvcuda.c: what sections reach of a uvcuda run */
uvcuda_loop_t *uvcuda_run_loop(run_t *r);
uvcuda_future_t *uvcuda_run_future(run_t *r);
void uvcuda_run_on_future(uvcuda_future_t *f, int status); /* sets r->done */
/* The future's phases (uvcuda_future_timing, weak): 0 if there are any. */
int uvcuda_run_timing(run_t *r, uvcuda_timing_t *t);
/* uvcuda_loop_adaptive (weak) of an open run; -1 where the library lacks
 * it. */
int uvcuda_run_adaptive(run_t *r);

/* ---- held streams (hold.c) ---------------------------------------------- */

/* Holds streams until hold_open(): a wait for the next hold value. d: the
 * hold word's device address in the streams' context. */
int hold_streams(CUstream *s, int n, CUdeviceptr d, char *err, size_t errlen);
int hold_all(char *err, size_t errlen);
/* Waits (sleeping) until every stream is idle; -1 on timeout. */
int drain_streams(CUstream *s, int n, uint64_t timeout_ns);
void drain_all(uint64_t timeout_ns);
CUstream pend_stream(int i);
/* Callbacks of the futures pending on held streams (scaling, delivery):
 * they count into bench.held (ECANCELED is no error). */
void held_on_done(uvcuda_future_t *f, int status);
void held_on_closed(uvcuda_future_t *f);
/* Runs loop until last (the newest held future) has spun out its budget:
 * from then on all are armed, none spins (5 s at most). */
void held_wait_armed(uv_loop_t *loop, uvcuda_future_t *last);
/* Opens the hold and takes n such futures back on loop: all completed, all
 * closed, the held streams drained. 0; -1 if they did not complete, -2 if
 * they did not close (leak them then). */
int held_take_back(uv_loop_t *loop, uvcuda_future_t *pf, int n);

/* ---- sections ----------------------------------------------------------- */

void section_latency(void);
void section_spin(void);
void section_scaling(void);
void section_delivery(void);
void section_throughput(void);
void section_idle(void);
void section_wake(void);
void section_adapt(void);
/* floor.c: the loop CPU no completion can go below (adapt's targets) */
void adapt_floor(const workload_t *wl);
void targets(void);

#endif
