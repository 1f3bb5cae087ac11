/* uvcuda: await CUDA stream work from a libuv event loop.
 *
 * A uvcuda_loop_t attaches to one uv_loop_t. A uvcuda_future_t runs a device
 * op (a function that enqueues work on a CUDA stream) and calls its callback
 * on the loop thread once the work enqueued by the op is done. No thread is
 * created per wait: completion arrives through one uv_async_t per loop, rung
 * by a process-wide reactor thread (which watches GPU-written counters) or by
 * a CUDA host function, after a short bounded spin on the loop thread.
 *
 * The CUDA driver is loaded at run time (dlopen "libcuda.so.1"); this header
 * does not need <cuda.h>. Streams are passed as uvcuda_stream_t, which is
 * CUstream / cudaStream_t cast to a pointer.
 *
 * Threads: every function is called from the loop's thread (the thread that
 * called uvcuda_loop_init) unless its comment says otherwise. A call from any
 * other thread (a later one too, once the loop's thread has ended) returns
 * UVCUDA_EWRONGTHREAD and changes nothing (uvcuda_loop_init has no loop
 * thread yet: on a live loop context it gives UVCUDA_EBUSY); the getters
 * that return no error code (uvcuda_loop_completion, _spin_budget_ns,
 * _adaptive, uvcuda_future_state, _is_active) don't check the thread.
 *
 * Errors are negative ints. Codes of libuv pass through unchanged
 * (UVCUDA_EINVAL is UV_EINVAL, ...); CUDA driver results are carried as
 * UVCUDA_ECUDA(result) and recovered with uvcuda_cuda_result().
 */
#ifndef UVCUDA_H
#define UVCUDA_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(UVCUDA_BUILDING_LIBRARY)
# define UVCUDA_EXTERN __attribute__((visibility("default")))
#else
# define UVCUDA_EXTERN /* nothing */
#endif

/* The version of this header. Soname libuvcuda.so.0.2: while the major
 * version is 0, a minor release may change the ABI. */
#define UVCUDA_VERSION_MAJOR 0
#define UVCUDA_VERSION_MINOR 2
#define UVCUDA_VERSION_PATCH 0
#define UVCUDA_VERSION_HEX ((UVCUDA_VERSION_MAJOR << 16) | \
                            (UVCUDA_VERSION_MINOR << 8) | UVCUDA_VERSION_PATCH)

/* ---- Errors ------------------------------------------------------------ */

/* uvcuda's own codes: name, value, message (an X-macro; -30007 is unused). */
#define UVCUDA_ERRNO_MAP(XX)                                                  \
  XX(ENODRIVER, -30001, "CUDA driver library could not be loaded")            \
  XX(EDRIVEROLD, -30002, "CUDA driver is older than 12.0")                    \
  XX(ENOSYM, -30003, "a required CUDA driver entry point is missing")         \
  XX(ENOTSUP, -30004, "not supported by this CUDA driver or device")          \
  XX(ECAPTURING, -30005, "stream is capturing into a CUDA graph")             \
  XX(EWRONGTHREAD, -30006, "called from a thread other than the loop's")      \
  XX(ESTRATEGY, -30008, "unknown completion strategy name")                   \
  XX(ECLOSING, -30009, "handle is closing or closed")                         \
  XX(ENOTINIT, -30010, "handle was not initialized")                          \
  XX(EFORKED, -30011, "CUDA can't be used in a process forked after the "      \
                      "driver was loaded")                                    \

typedef enum {
#define UVCUDA__ERR_ENUM(name, val, msg) UVCUDA_##name = (val),
  UVCUDA_ERRNO_MAP(UVCUDA__ERR_ENUM)
#undef UVCUDA__ERR_ENUM
  /* libuv codes used by uvcuda, passed through unchanged. */
  UVCUDA_EINVAL = UV_EINVAL,
  UVCUDA_EBUSY = UV_EBUSY,
  UVCUDA_ENOMEM = UV_ENOMEM,
  UVCUDA_ECANCELED = UV_ECANCELED
} uvcuda_errno_t;

/* A CUDA driver result r (1..9999) travels as UVCUDA_ECUDA(r). */
#define UVCUDA_ECUDA_BASE (-20000)
#define UVCUDA_ECUDA(r) (UVCUDA_ECUDA_BASE - (int)(r))

/* The CUresult carried by err, or 0 if err is not a CUDA driver error. */
UVCUDA_EXTERN int uvcuda_cuda_result(int err);
/* Message and symbolic name of any error this library returns ("success" /
 * "OK" for 0); CUDA results get the driver's own text when the driver is
 * loaded already (naming an error never loads it), else CUDA 13.0's names
 * (CUDA_ERROR_NO_DEVICE when cuInit found no GPU); a result nobody names is
 * CUDA_ERROR_<n> / "unknown CUDA driver error <n>". Static strings, but for
 * codes nobody knows: a per-thread buffer, one for names and one for
 * messages. Never NULL. Any thread. */
UVCUDA_EXTERN const char *uvcuda_strerror(int err);
UVCUDA_EXTERN const char *uvcuda_err_name(int err);

/* ---- The CUDA driver --------------------------------------------------- */

typedef void *uvcuda_stream_t; /* CUstream / cudaStream_t */

typedef struct uvcuda_driver_info_s {
  const char *path;        /* what was dlopen'ed */
  int driver_version;      /* cuDriverGetVersion, e.g. 13000 */
  int device_count;
  int memops32;            /* cuStreamWriteValue32 works (probed on device 0) */
  int memops64;            /* cuStreamWriteValue64 works (probed on device 0) */
  int host_task_sync;      /* cuLaunchHostFunc_v2 sync modes exist (>= 13.2) */
} uvcuda_driver_info_t;

/* Loads and initialises the driver once per process (thread-safe; later
 * calls return the first result). Env UVCUDA_LIBCUDA overrides the path.
 * Returns 0, UVCUDA_ENODRIVER (see uvcuda_driver_dlerror), UVCUDA_EDRIVEROLD,
 * UVCUDA_ENOSYM, UVCUDA_ENOMEM (pthread_atfork refused) or UVCUDA_ECUDA(r)
 * of cuDriverGetVersion or cuInit. Any thread.
 * fork: CUDA does not follow it. In a child forked after a successful load,
 * this and every call that needs the driver, the reactor or a loop or
 * future made before the fork (init, start, close) return UVCUDA_EFORKED;
 * load uvcuda after forking (docs/api.md, "Processes and fork"). */
UVCUDA_EXTERN int uvcuda_driver_load(void);
/* What a failed load met (dlopen's message, the missing entry point, cuInit's
 * result, ...), or NULL if the load succeeded. Loads the driver if no call
 * has yet. Any thread. */
UVCUDA_EXTERN const char *uvcuda_driver_dlerror(void);
/* Loads the driver if needed, probes capabilities once, fills *info. Any
 * thread. Returns 0, UVCUDA_EINVAL (NULL), a load error (path filled),
 * UVCUDA_ENOMEM, or the UVCUDA_ECUDA(r) of a driver call the probe needed
 * and was refused (path and driver_version filled): then the next call
 * probes again. */
UVCUDA_EXTERN int uvcuda_driver_info(uvcuda_driver_info_t *info);
/* Resolves any driver entry point through cuGetProcAddress at the given ABI
 * version (the NNNN of its PFN_name_vNNNN typedef), for callers that want
 * to launch work without linking libcuda. Returns 0, UVCUDA_EINVAL (NULL
 * name or pfn, cuda_version <= 0), a load error, UVCUDA_ENOSYM if absent,
 * UVCUDA_ENOTSUP if cuda_version is above the driver's, or
 * UVCUDA_ECUDA(r) of cuGetProcAddress; *pfn is NULL on error. Any thread. */
UVCUDA_EXTERN int uvcuda_driver_symbol(const char *name, int cuda_version,
                                       void **pfn);

/* ---- Device faults ----------------------------------------------------- */

typedef void *uvcuda_context_t; /* CUcontext */

/* The health of CUDA context ctx: 0, or UVCUDA_ECUDA(r) once a sticky
 * error r (a kernel fault: CUDA_ERROR_ILLEGAL_ADDRESS, ...) is known in it.
 * Queries a private idle stream of uvcuda's in ctx now (about a µs; never
 * a stream of yours), so it also sees a fault no future has met yet. Every
 * pending future of a faulted context has failed, or fails on its loop's
 * next pass, with that error. UVCUDA_EINVAL (NULL), a driver-load error,
 * UVCUDA_ENOMEM, or UVCUDA_ECUDA(r) of the lookup (or of making uvcuda's
 * stream there, the first time ctx is seen). Any thread. */
UVCUDA_EXTERN int uvcuda_context_health(uvcuda_context_t ctx);

/* Recovery after a device fault: resets device `ordinal`'s primary context
 * (cuDevicePrimaryCtxReset) so that it can be used again, then checks that
 * new work completes on it. Before the reset, every uvcuda record of a
 * context of that device is retired: its pending futures, on every loop,
 * fail with the context's error (UVCUDA_ECUDA(CUDA_ERROR_CONTEXT_IS_DESTROYED)
 * where no fault was found), and no uvcuda thread touches its objects
 * again. Your part: no thread may use the device while this runs; every
 * stream, event, module and allocation made before it is gone (make new
 * ones; in a context of your own from cuCtxCreate, which the reset leaves
 * to you, new streams work with fresh records). The check writes with a
 * stream memory op, or a host function where those are refused. Returns
 * 0 when new work completed; UVCUDA_EINVAL (negative ordinal, or no such
 * device), a driver-load error, or UVCUDA_ECUDA(r) of the reset or of the
 * check (UVCUDA_ENOMEM if the check ran out of host memory): on
 * drivers that keep a fault for the life of the process (docs/api.md
 * names those measured), the process must be restarted. Any thread; blocks
 * for the reset (tens of ms). Nothing is retired where it fails before the
 * reset: UVCUDA_EINVAL, a driver-load error, or cuDeviceGet's. */
UVCUDA_EXTERN int uvcuda_device_reset(int ordinal);

/* ---- Options ----------------------------------------------------------- */

typedef enum {
  UVCUDA_COMPLETION_DEFAULT = 0, /* env UVCUDA_COMPLETION, else AUTO */
  UVCUDA_COMPLETION_AUTO,        /* REACTOR; HOSTFN where memops fail */
  UVCUDA_COMPLETION_REACTOR,     /* GPU-written timeline + reactor thread */
  UVCUDA_COMPLETION_HOSTFN,      /* cuLaunchHostFunc */
  UVCUDA_COMPLETION_HOSTFN_SPIN, /* cuLaunchHostFunc_v2, SPINWAIT (13.2+) */
  UVCUDA_COMPLETION_HOSTFN_BLOCK,/* cuLaunchHostFunc_v2, BLOCKING (13.2+) */
  UVCUDA_COMPLETION_POLL         /* loop thread polls timelines, no reactor */
} uvcuda_completion_t;

/* "auto", "reactor", "hostfn", "hostfn-spin", "hostfn-block", "poll";
 * "default" for DEFAULT. NULL for a value outside the enum. Any thread. */
UVCUDA_EXTERN const char *uvcuda_completion_name(uvcuda_completion_t c);
/* Parses the names above (exact, case-sensitive; "default" gives DEFAULT)
 * into *out. Returns 0, UVCUDA_EINVAL (NULL name or out) or
 * UVCUDA_ESTRATEGY (any other name); *out is left alone on error. Any
 * thread. */
UVCUDA_EXTERN int uvcuda_completion_parse(const char *name,
                                          uvcuda_completion_t *out);

/* Record a latency histogram of start -> callback in the stats. */
#define UVCUDA_OPT_LATENCY_HISTOGRAM 0x1u
/* Stamp each future's phases for uvcuda_future_timing (a few clock reads
 * per future, ~20 ns each; off by default). */
#define UVCUDA_OPT_TIMING 0x2u
/* Adaptive spin and pre-wake (docs/api.md, "Adaptive spin"): each stream's
 * recent enqueue -> done times choose, per future, how long to spin, or to
 * arm at once and wake the loop thread shortly before the predicted end.
 * The spin budget bounds every spin before a future is armed; after a
 * pre-wake the loop polls from the timer for at most the wake-up's lead
 * (200 µs at most) plus the budget, four deviations of the stream's times
 * and, for a wait over 250 µs, 1/64 of it (together 200 µs at most); a
 * budget of 0 predicts nothing.
 * ADAPTIVE turns it
 * on, NO_ADAPTIVE off; with neither, env UVCUDA_ADAPTIVE ("1"/"0"), else
 * on. Both: UVCUDA_EINVAL. */
#define UVCUDA_OPT_ADAPTIVE 0x4u
#define UVCUDA_OPT_NO_ADAPTIVE 0x8u

typedef struct uvcuda_options_s {
  uvcuda_completion_t completion;
  /* Bounded spin on the loop thread before a future is armed, in µs.
   * -1: env UVCUDA_SPIN_BUDGET_US, else 20. 0 disables. Max 1000000. */
  int32_t spin_budget_us;
  /* Fault probe interval while futures are armed, in µs: -1 = 1000.
   * 50 .. 2000. Once every armed wait is older, the reactor probes every
   * reactor_backoff_pct % of the youngest one's age instead (at most
   * every 100 ms): docs/api.md, "The reactor". */
  int32_t probe_interval_us;
  /* How the reactor waits for this loop's armed futures (-1 = default;
   * docs/api.md, "The reactor"). With adaptive spin on, it sleeps until
   * just before a future's predicted end. Otherwise, and past that, it
   * backs off: each look that finds the work not done is followed by a
   * sleep of reactor_backoff_pct % (1..100, default 5) of the time waited
   * so far, at least its wake-up floor (20 µs, or twice how late its
   * timed waits come back) and at most reactor_sleep_max_us (1..100000,
   * default 2000). reactor_spin_us and reactor_yield_us (µs, default 0:
   * off) busy-poll, then sched_yield between looks, for that long after
   * each arm: lower latency for a core's worth of CPU. With nothing armed
   * it parks until the next arm. With several loops the reactor takes the
   * most eager value of each. */
  int32_t reactor_spin_us;
  int32_t reactor_yield_us;
  int32_t reactor_sleep_max_us;
  uint32_t flags; /* UVCUDA_OPT_* */
  int32_t reactor_backoff_pct; /* see reactor_spin_us */
} uvcuda_options_t;

/* Fills *opts with "use the default" values (NULL: does nothing). Any
 * thread. */
UVCUDA_EXTERN void uvcuda_options_init(uvcuda_options_t *opts);
/* The options uvcuda_loop_init would run with, without a loop or the
 * driver: `in` (NULL: every default) with its defaults and the environment
 * applied, into *out (which may be in): completion never DEFAULT, no -1,
 * and flags with exactly one of UVCUDA_OPT_ADAPTIVE and
 * UVCUDA_OPT_NO_ADAPTIVE. Returns 0, or the error uvcuda_loop_init gives
 * these options: UVCUDA_EINVAL (also a NULL out) or UVCUDA_ESTRATEGY;
 * *out is written only on success. Any thread. */
UVCUDA_EXTERN int uvcuda_options_resolve(const uvcuda_options_t *in,
                                         uvcuda_options_t *out);

/* ---- The loop context -------------------------------------------------- */

typedef struct uvcuda_loop_s uvcuda_loop_t;
typedef struct uvcuda_future_s uvcuda_future_t;
typedef void (*uvcuda_loop_close_cb)(uvcuda_loop_t *loop);

struct uvcuda__loop; /* private */

struct uvcuda_loop_s {
  void *data;            /* yours */
  uv_loop_t *loop;       /* read-only */
  struct uvcuda__loop *internal_; /* private */
};

/* Attaches uvcuda to `loop`; the calling thread becomes the loop thread.
 * `opts` may be NULL (all defaults). Loads the driver if needed. Returns 0,
 * UVCUDA_EINVAL (NULL loop or ul; an out-of-range option, unknown flag or
 * both ADAPTIVE flags; a bad UVCUDA_SPIN_BUDGET_US or UVCUDA_ADAPTIVE),
 * UVCUDA_ESTRATEGY (unknown UVCUDA_COMPLETION), a driver-load error,
 * UVCUDA_ENOTSUP (the strategy needs a newer driver; adaptive spin without
 * a timerfd), UVCUDA_ENOMEM (memory, descriptors, the reactor thread) or
 * UVCUDA_EBUSY (ul is initialised and its close_cb has not run: left as
 * it is); nothing is added to the loop then. The handles it adds to the
 * loop (an async, an idle and, with adaptive spin, a poll handle) keep it
 * alive only while futures are pending or a close callback is due, and
 * their `data` is NULL from init until the loop context's close_cb: a
 * loop owner that walks its handles (uv_walk) can tell them from its own.
 * Shutdown order: close every future, then the loop context; close the
 * uv_loop_t once the loop context's close_cb has run. */
UVCUDA_EXTERN int uvcuda_loop_init(uv_loop_t *loop, uvcuda_loop_t *ul,
                                   const uvcuda_options_t *opts);
/* Starts closing. UVCUDA_EBUSY while any future of it is initialised and not
 * yet closed (close_cb not yet run). close_cb (may be NULL) runs on a later
 * loop iteration, once no thread can touch `ul` any more; free `ul` there.
 * Also UVCUDA_EINVAL (NULL), UVCUDA_ENOTINIT (never initialised, or its
 * close_cb ran), UVCUDA_EFORKED, UVCUDA_EWRONGTHREAD, UVCUDA_ECLOSING
 * (already closing). */
UVCUDA_EXTERN int uvcuda_loop_close(uvcuda_loop_t *ul,
                                    uvcuda_loop_close_cb close_cb);
/* sizeof(uvcuda_loop_t) as this library was built: for callers that
 * allocate one without a C compiler (FFI), as libuv's uv_handle_size().
 * Any thread. */
UVCUDA_EXTERN size_t uvcuda_loop_size(void);
/* The strategy in effect after resolving DEFAULT; DEFAULT for a NULL or
 * uninitialised ul. */
UVCUDA_EXTERN uvcuda_completion_t uvcuda_loop_completion(const uvcuda_loop_t *ul);
/* The spin budget in effect, in ns; 0 for a NULL or uninitialised ul. */
UVCUDA_EXTERN uint64_t uvcuda_loop_spin_budget_ns(const uvcuda_loop_t *ul);
/* Nonzero when adaptive spin and pre-wake are on for this loop; 0 for a
 * NULL or uninitialised ul. */
UVCUDA_EXTERN int uvcuda_loop_adaptive(const uvcuda_loop_t *ul);

/* latency_hist: bucket i counts [2^i, 2^(i+1)) ns; 0: < 2 ns; the last one
 * also everything longer. */
#define UVCUDA_HIST_BUCKETS 32

typedef struct uvcuda_stats_s {
  uint64_t started;           /* successful uvcuda_future_start calls */
  /* Each callback counts once, by its status: completed_* (status 0, by
   * who saw the work done) + failed + cancelled = callbacks run. */
  uint64_t completed_spin;    /* seen done by the loop's spin, no wakeup */
  uint64_t completed_reactor; /* delivered after a reactor wakeup */
  uint64_t completed_hostfn;  /* delivered after a host function ran */
  uint64_t completed_poll;    /* seen done by a POLL loop's passes */
  uint64_t failed;            /* callback got an error (not cancellation) */
  uint64_t cancelled;         /* callback got UVCUDA_ECANCELED */
  uint64_t fallbacks;         /* timelines that fell back to host functions */
  uint64_t reactor_wakeups;   /* loop wakeups rung by the reactor */
  uint64_t hostfn_wakeups;    /* loop wakeups rung by host functions */
  uint64_t faults;            /* CUDA contexts found in a sticky error */
  uint64_t timelines;         /* timelines in use now (not idle ones) */
  uint64_t latency_hist[UVCUDA_HIST_BUCKETS];
  /* Adaptive spin (these five zero while it is off; spin_ns counts
   * either way). A prediction is "hit" when the
   * loop saw the future done while spinning for it, "early" when it was
   * done before that spin began, "late" when the spin ended first (the
   * reactor or host function then delivers it, as without prediction). */
  uint64_t predicted;         /* futures given a predicted end */
  uint64_t predict_hit;
  uint64_t predict_early;
  uint64_t predict_late;
  uint64_t prewakes;          /* timer wake-ups before a predicted end */
  uint64_t spin_ns;           /* loop-thread time in spin passes */
  /* The process's reactor thread, which every loop context shares (the
   * same numbers from every loop): what waiting has cost it since the
   * first loop context of the process started it, over every reactor
   * thread the process has had. */
  uint64_t reactor_polls;     /* passes that read the armed counters */
  uint64_t reactor_sleeps;    /* timed sleeps and parks */
  uint64_t reactor_cpu_ns;    /* its CPU time */
} uvcuda_stats_t;

/* Copies ul's counters to *stats. UVCUDA_EINVAL (NULL ul or stats),
 * UVCUDA_ENOTINIT (never initialised, or closed), UVCUDA_EWRONGTHREAD. */
UVCUDA_EXTERN int uvcuda_loop_stats(const uvcuda_loop_t *ul,
                                    uvcuda_stats_t *stats);

/* ---- Device futures ---------------------------------------------------- */

typedef enum {
  UVCUDA_FUTURE_IDLE = 0,  /* initialised, not started (or callback ran) */
  UVCUDA_FUTURE_SPINNING,  /* marker enqueued, loop polls it */
  UVCUDA_FUTURE_ARMED,     /* waits for the reactor / host function */
  UVCUDA_FUTURE_COMPLETE,  /* done, callback runs on this iteration */
  UVCUDA_FUTURE_FAILED,    /* error known, callback runs on this iteration;
                            * also a future closed in flight, until its
                            * UVCUDA_ECANCELED callback */
  UVCUDA_FUTURE_CLOSING,   /* callback ran, close_cb not yet */
  UVCUDA_FUTURE_CLOSED
} uvcuda_future_state_t;

/* Enqueues work on `stream`, with the stream's CUDA context current. Returns
 * 0, a negative uvcuda error, or a positive CUresult (taken as
 * UVCUDA_ECUDA(result); 10000 or more: UVCUDA_EINVAL):
 * `return cuMemcpyHtoDAsync(...);` works. Must not await anything, nor
 * start or close futures (its own: UVCUDA_EBUSY). It may switch contexts:
 * the marker runs in the stream's, and the caller's is put back. */
typedef int (*uvcuda_op_cb)(uvcuda_future_t *f, uvcuda_stream_t stream);
/* status: 0, or a negative error (UVCUDA_ECANCELED if the future was closed
 * first). The future is IDLE again: it may be started again from here. */
typedef void (*uvcuda_future_cb)(uvcuda_future_t *f, int status);
typedef void (*uvcuda_future_close_cb)(uvcuda_future_t *f);

/* Private: the one list node type of the library (see lib/queue.h). */
struct uvcuda__queue {
  struct uvcuda__queue *next;
  struct uvcuda__queue *prev;
};
struct uvcuda__timeline;
struct CUevent_st; /* CUevent */

#define UVCUDA_FUTURE_PRIVATE_FIELDS                                         \
  int state_;                                                               \
  int status_;                                                              \
  unsigned short closing_; /* uvcuda_future_close was called */             \
  unsigned short in_op_;   /* its op is running: no start, close, init */   \
  uint32_t magic_;  /* initialised and not yet closed */                    \
  uvcuda_future_cb cb_;                                                     \
  uvcuda_future_close_cb close_cb_;                                         \
  struct uvcuda__timeline *tl_; /* while pending */                         \
  uint64_t seq_;                /* its marker's number on tl_ */            \
  struct CUevent_st *event_;    /* host-function modes: spin on this */     \
  uint64_t start_ns_;                                                       \
  uint64_t deadline_ns_;        /* end of the spin */                       \
  uint64_t enqueued_ns_, armed_ns_, seen_ns_, callback_ns_; /* OPT_TIMING */\
  struct uvcuda__queue tl_node_;   /* its timeline's pending futures */     \
  struct uvcuda__queue spin_node_; /* the loop's spin FIFO */               \
  struct uvcuda__queue q_node_;    /* the loop's delivery or close queue */\
  int adapt_;                      /* adaptive spin: what was predicted */  \
  int done_by_;                    /* who saw it done: its stats counter */ \
  uint64_t wake_ns_, hot_until_ns_; /* pre-wake, end of its spin window */  \
  struct uvcuda__queue pw_node_;   /* the loop's pre-wake or hot queue */

struct uvcuda_future_s {
  void *data;              /* yours */
  uvcuda_loop_t *loop;     /* read-only */
  uvcuda_stream_t stream;  /* read-only: the stream of the last start */
  UVCUDA_FUTURE_PRIVATE_FIELDS
};

/* Where one future's latency went, on the uv_hrtime() clock (ns). A stamp
 * is 0 where the phase did not happen (armed_ns: completed while spinning)
 * or has not happened yet. */
typedef struct uvcuda_timing_s {
  uint64_t start_ns;    /* uvcuda_future_start was called */
  uint64_t enqueued_ns; /* the op and the completion marker were enqueued */
  uint64_t armed_ns;    /* spin budget spent: left to the reactor / host fn */
  uint64_t seen_ns;     /* completion observed: by the loop's spin or poll,
                           the reactor's scan, or the host function's run */
  uint64_t callback_ns; /* the callback was called */
} uvcuda_timing_t;

/* Makes f an IDLE future of ul; f->data is left as it was. Initialising a
 * future that is not closed yet is undefined, as for libuv's handles,
 * except from inside its own op: UVCUDA_EBUSY. Returns 0, UVCUDA_EINVAL
 * (NULL ul or f), UVCUDA_ENOTINIT (ul never initialised, or closed),
 * UVCUDA_EBUSY, UVCUDA_EFORKED, UVCUDA_EWRONGTHREAD or UVCUDA_ECLOSING
 * (ul is closing). */
UVCUDA_EXTERN int uvcuda_future_init(uvcuda_loop_t *ul, uvcuda_future_t *f);
/* Runs `op` (NULL: await what is already on the stream) on `stream`, then
 * enqueues a completion marker after it. Returns 0 when `cb` will be called
 * exactly once, on a later loop iteration, never from inside this call; an
 * error from the op or the driver, or a capturing stream
 * (UVCUDA_ECAPTURING; also one the op began capturing: the marker would
 * join the graph), comes through `cb`. Returns an error, and `cb` is not
 * called, only for misuse: UVCUDA_EINVAL (NULL f or cb), UVCUDA_ENOTINIT,
 * UVCUDA_EBUSY (already started, or called from f's own op),
 * UVCUDA_ECLOSING (f closing or closed), UVCUDA_EWRONGTHREAD,
 * UVCUDA_EFORKED. The stream must stay valid until the callback runs. The
 * caller's current context is put back (cuCtxSetCurrent), even if the op
 * changed it; an op that pushes a context must pop it itself. */
UVCUDA_EXTERN int uvcuda_future_start(uvcuda_future_t *f,
                                      uvcuda_stream_t stream, uvcuda_op_cb op,
                                      uvcuda_future_cb cb);
/* Closes f. If it is started and its callback has not run, the callback
 * runs with UVCUDA_ECANCELED (the GPU work itself goes on; until then f
 * reads FAILED and active); then close_cb (may be NULL) runs, on a later
 * iteration, never from inside this call.
 * Nothing touches f after close_cb: free it there. Returns 0,
 * UVCUDA_EINVAL (NULL), UVCUDA_ENOTINIT, UVCUDA_ECLOSING (already closing
 * or closed), UVCUDA_EBUSY (from f's own op: its start is still running),
 * UVCUDA_EFORKED or UVCUDA_EWRONGTHREAD. */
UVCUDA_EXTERN int uvcuda_future_close(uvcuda_future_t *f,
                                      uvcuda_future_close_cb close_cb);
/* sizeof(uvcuda_future_t) as this library was built (it may change in any
 * 0.x release): for callers that allocate one without a C compiler (FFI).
 * Any thread. */
UVCUDA_EXTERN size_t uvcuda_future_size(void);
/* f's state; CLOSED for NULL or a future never initialised (or closed). */
UVCUDA_EXTERN uvcuda_future_state_t uvcuda_future_state(const uvcuda_future_t *f);
/* The phases of f's last start (valid from its callback until the next
 * start; also while f is closing, up to its close_cb, where f is closed
 * already; before a first start, 0 with every stamp 0). UVCUDA_EINVAL (NULL f or t),
 * UVCUDA_ENOTINIT, UVCUDA_ECLOSING (closed), UVCUDA_EWRONGTHREAD,
 * UVCUDA_ENOTSUP (the loop was not initialised with UVCUDA_OPT_TIMING). */
UVCUDA_EXTERN int uvcuda_future_timing(const uvcuda_future_t *f,
                                       uvcuda_timing_t *t);
/* Nonzero from a successful start until its callback is called (0 inside
 * it); 0 for NULL or a future not initialised or closed. */
UVCUDA_EXTERN int uvcuda_future_is_active(const uvcuda_future_t *f);

#ifdef __cplusplus
}
#endif
#endif /* UVCUDA_H */
