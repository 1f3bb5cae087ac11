/*
 * simcuda.c - a SIMULATED CUDA driver for uvcuda's tests.
 *
 * There is no GPU here. This library stands in for libcuda.so.1 so that
 * uvcuda's completion paths (host functions, stream memory operations,
 * events, sticky faults, capture refusal) can be exercised on machines
 * without one. Nothing it reports is a GPU measurement. README.md lists what
 * is modelled and what is not.
 *
 * Exported: cuGetProcAddress_v2 and the simcuda_* control API. Every driver
 * entry point is static and reachable only through cuGetProcAddress, which
 * is how uvcuda resolves them; a test that also links this library directly
 * therefore shares one driver state with uvcuda.
 *
 * Concurrency: one process-wide mutex (g_mu) guards all simulated state. A
 * test driver does not need throughput, and a single lock makes handle
 * validation and ownership easy to get right. Each stream has a worker
 * thread that pops ops under g_mu (ownership transfers to the worker) and
 * executes them with g_mu released, except ops touching memory, which run
 * under g_mu after re-validating their addresses. g_changed is broadcast on
 * every completion or state change; waiters re-check their condition.
 */
#define _GNU_SOURCE
#include "simcuda.h"

#include "simprobe.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#if defined(CUDA_API_PER_THREAD_DEFAULT_STREAM) || \
    defined(__CUDA_API_PER_THREAD_DEFAULT_STREAM)
#error "build simcuda without the per-thread default stream macros"
#endif

/* A mismatch between an implementation and its PFN_* prototype is a bug. */
#pragma GCC diagnostic error "-Wincompatible-pointer-types"

#define SIM_EXPORT __attribute__((visibility("default")))
#define SIM_MAX_DEVICES 8
#define SIM_CTX_STACK 32
#define SIM_DEFAULT_DRIVER_VERSION 13000
#define SIM_WORKER_STACK (512u * 1024u)
/* CUDA 13.0's CU_DEVICE_ATTRIBUTE_MAX: attributes from here on are refused. */
#define SIM_DEVICE_ATTRIBUTE_MAX 148

/* ------------------------------------------------------------------------
 * Entry-point names (the cuGetProcAddress names, without _v2 suffixes)
 * ------------------------------------------------------------------------ */

/* Spelled without the "cu" prefix: many cu* names are macros in cuda.h. */
// clang-format off
#define SIM_ENTRIES(X)                                                   \
  X(GetProcAddress) X(Init) X(DriverGetVersion)                          \
  X(GetErrorName) X(GetErrorString)                                      \
  X(DeviceGet) X(DeviceGetCount) X(DeviceGetAttribute) X(DeviceGetName)  \
  X(DevicePrimaryCtxRetain) X(DevicePrimaryCtxRelease)                   \
  X(DevicePrimaryCtxReset)                                               \
  X(CtxCreate) X(CtxDestroy) X(CtxGetId)                                 \
  X(CtxGetCurrent) X(CtxSetCurrent) X(CtxPushCurrent) X(CtxPopCurrent)   \
  X(CtxGetDevice) X(CtxSynchronize)                                      \
  X(StreamGetCtx) X(StreamCreate) X(StreamDestroy) X(StreamQuery)        \
  X(StreamSynchronize) X(StreamWaitEvent) X(StreamGetId)                 \
  X(StreamIsCapturing) X(StreamBeginCapture) X(StreamEndCapture)         \
  X(ThreadExchangeStreamCaptureMode)                                     \
  X(GraphDestroy) X(GraphInstantiate) X(GraphInstantiateWithFlags)       \
  X(GraphLaunch) X(GraphExecDestroy)                                     \
  X(EventCreate) X(EventRecord) X(EventQuery) X(EventSynchronize)        \
  X(EventDestroy)                                                        \
  X(LaunchHostFunc) X(LaunchHostFunc_v2) X(StreamAddCallback)            \
  X(StreamWriteValue32) X(StreamWriteValue64) X(StreamWaitValue32)       \
  X(MemHostAlloc) X(MemFreeHost) X(MemHostGetDevicePointer)              \
  X(MemHostRegister) X(MemHostUnregister)                                \
  X(MemAlloc) X(MemFree)                                                 \
  X(MemcpyHtoDAsync) X(MemcpyDtoHAsync) X(MemcpyDtoDAsync)               \
  X(MemcpyPeerAsync) X(MemsetD8Async) X(MemsetD32Async)                  \
  X(ModuleLoadData) X(ModuleGetFunction) X(ModuleUnload) X(LaunchKernel)  \
  X(DeviceCanAccessPeer) X(CtxEnablePeerAccess)
// clang-format on

enum entry_id {
#define X(n) E_##n,
  SIM_ENTRIES(X)
#undef X
      E_COUNT
};

static const char *const g_entry_names[E_COUNT] = {
#define X(n) "cu" #n,
    SIM_ENTRIES(X)
#undef X
};

/* ------------------------------------------------------------------------
 * Object model
 * ------------------------------------------------------------------------ */

struct stream;

/* A context: a device's primary context (retained and released), or one
 * made by cuCtxCreate (destroyed by cuCtxDestroy, its handle never reused).
 * Contexts live in g_ctx_chunks for the life of the process, so a stale
 * handle is always safe to look up. */
struct ctx {
  int dev;
  bool primary;
  int refcount;        /* primary: retains; created: 1 until destroyed */
  unsigned gen;        /* bumped when the context is destroyed (atomic) */
  CUresult fault;      /* sticky error, CUDA_SUCCESS if none (atomic) */
  struct stream *dflt; /* lazily created default stream */
  unsigned long long id;      /* cuCtxGetId: new for each incarnation */
  unsigned long long dflt_id; /* cuStreamGetId of its default stream */
};

/* One cuEventRecord. Shared by the event and by the ops that complete or
 * wait on it, so an event can be destroyed or re-recorded meanwhile. */
struct token {
  int refs;
  bool done;
  struct ctx *ctx;
  unsigned gen;
};

enum op_kind {
  OP_WORK,       /* simulated kernel: busy for ns */
  OP_FAULT,      /* sticky fault when reached */
  OP_HOSTFN,     /* cuLaunchHostFunc(_v2) */
  OP_CALLBACK,   /* cuStreamAddCallback */
  OP_WRITE32,    /* cuStreamWriteValue32 */
  OP_WRITE64,    /* cuStreamWriteValue64 */
  OP_WAIT32,     /* cuStreamWaitValue32 */
  OP_RECORD,     /* cuEventRecord */
  OP_WAIT_EVENT, /* cuStreamWaitEvent */
  OP_COPY,       /* cuMemcpy*Async */
  OP_SET8,       /* cuMemsetD8Async */
  OP_SET32,      /* cuMemsetD32Async */
  OP_ADD_U32,    /* kernel uvcuda_add_u32 */
  OP_CHECKSUM,   /* kernel uvcuda_checksum_u8 */
};

struct op {
  struct op *next;
  enum op_kind kind;
  uint64_t ns;
  union {
    CUresult code;
    struct {
      CUhostFn fn;
      CUstreamCallback cb;
      void *ud;
      CUstream handle; /* as the caller passed it, for the callback */
      bool v2;
      unsigned mode;
    } host;
    struct {
      uintptr_t addr;
      uint64_t value;
      unsigned flags;
    } mem;
    struct token *tok;
    struct {
      uintptr_t dst, src;
      size_t n;
      bool dst_dev, src_dev; /* device-side pointers are re-validated */
    } copy;
    struct {
      uintptr_t dst;
      uint32_t value;
      size_t n;
    } set;
    struct {
      uintptr_t data;
      uint32_t n, value;
    } add;
    struct {
      uintptr_t in, out;
      uint32_t n;
    } sum;
  } u;
};

struct stream {
  struct stream *next; /* g_streams */
  struct ctx *ctx;
  unsigned gen; /* ctx generation it belongs to */
  bool user;    /* from cuStreamCreate (else a default stream) */
  bool destroyed;
  /* The op the worker is executing, or NULL. Held here, not only by the
   * worker: a process forked meanwhile (which has no worker) still reaches
   * it, so leak checkers don't call it lost. */
  struct op *running;
  bool fault_hidden; /* SIMCUDA_BUSY_STREAMS_HIDE_FAULT: queries say NOT_READY */
  int refs;  /* worker + waiters */
  int slot;  /* index in g_slots while it owns its handle, else -1 */
  unsigned long long id; /* cuStreamGetId */
  struct op *head, *tail;
  pthread_cond_t cv; /* wakes the worker */
  CUstreamCaptureStatus cap;
  CUstreamCaptureMode cap_mode; /* as passed to cuStreamBeginCapture */
  pthread_t cap_thread;         /* the thread that began the capture */
  struct op *cap_head, *cap_tail; /* work recorded into the capture */
};

/* Stream handles are addresses of slots in g_slots, not of stream objects:
 * a destroyed stream's handle goes back on a LIFO free list at once and is
 * handed to the next cuStreamCreate (in any context), as the real driver
 * reuses handles, while the old stream object drains its queue unseen. */
enum slot_state {
  SLOT_UNUSED,    /* never handed out */
  SLOT_LIVE,      /* names a stream */
  SLOT_DESTROYED, /* its stream was destroyed by cuStreamDestroy */
  SLOT_ORPHANED,  /* its stream went away with its context */
};

struct sslot {
  struct stream *s;
  uint32_t state;
  uint32_t next_free; /* index + 1 of the next free slot, 0 = none */
};

struct event {
  struct event *next;
  struct ctx *ctx;
  struct token *last; /* latest record, NULL if never recorded */
  bool captured;      /* latest record was into a capture */
};

enum kernel_kind { K_UNKNOWN, K_SLEEP, K_FAULT, K_ADD_U32, K_CHECKSUM };

struct module;
struct func {
  struct func *next;
  struct module *mod;
  enum kernel_kind kind;
  char name[];
};

struct module {
  struct module *next;
  struct ctx *ctx;
  struct func *funcs;
};

/* A captured graph and an instantiated one hold the recorded ops; a launch
 * enqueues copies of them. */
struct graph {
  struct graph *next;
  struct op *ops;
};

struct gexec {
  struct gexec *next;
  struct op *ops;
};

enum alloc_kind {
  A_DEVICE,     /* cuMemAlloc */
  A_PINNED,     /* cuMemHostAlloc: the simulation owns the memory */
  A_REGISTERED, /* cuMemHostRegister: the caller owns the memory */
};

struct alloc {
  struct alloc *next;
  uintptr_t base;
  size_t size;
  struct ctx *ctx;
  enum alloc_kind kind;
};

struct host_job {
  struct host_job *next;
  const struct op *op;
  CUresult status;
  bool done;
};

/* ------------------------------------------------------------------------
 * Global state
 * ------------------------------------------------------------------------ */

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_changed = PTHREAD_COND_INITIALIZER;
static pthread_cond_t g_host_cv = PTHREAD_COND_INITIALIZER;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static int g_driver_version; /* atomic */
static int g_ndev;           /* atomic; fixed once initialized */
static int g_initialized;    /* atomic */

static struct {
  uint64_t calls;
  CUresult fail_result;
  int fail_left; /* < 0: until cleared */
  int fail_skip; /* calls that pass before those fail */
  bool hidden;
  bool held;              /* simcuda_hold_calls: other threads wait */
  pthread_t holder;
  uint64_t waiting;       /* calls waiting in a hold now */
} g_entry[E_COUNT]; /* under g_mu */

/* Under g_mu: e returns r for `left` calls (< 0: until cleared; 0: none)
 * once `skip` more have passed. */
static void set_failure(int e, CUresult r, int left, int skip) {
  g_entry[e].fail_result = r;
  g_entry[e].fail_left = left;
  g_entry[e].fail_skip = skip;
}

/* Contexts: chunk 0 starts with the SIM_MAX_DEVICES primary contexts. */
#define SIM_CTX_CHUNK 1024
#define SIM_CTX_CHUNKS 64
static struct ctx *g_ctx_chunks[SIM_CTX_CHUNKS];
static int g_nctx; /* contexts handed out, primaries included */

#define SIM_MAX_STREAM_HANDLES 32768
static struct sslot g_slots[SIM_MAX_STREAM_HANDLES];
static uint32_t g_slots_used; /* high-water mark */
static uint32_t g_slot_free;  /* index + 1 of the top free slot, 0 = none */

static unsigned long long g_next_ctx_id = 1, g_next_stream_id = 1;

/* Behaviour switches (SIMCUDA_DESTROYED_HANDLES, SIMCUDA_FAULT_SCOPE,
 * SIMCUDA_BUSY_STREAMS_HIDE_FAULT and their setters); under g_mu. */
static bool g_destroyed_abort = true;
static bool g_fault_scope_device;
static bool g_busy_hide_fault;
static int g_captures; /* streams with a capture sequence in progress */

static struct stream *g_streams;
static struct event *g_events;
static struct module *g_modules;
static struct graph *g_graphs;
static struct gexec *g_gexecs;
static struct alloc *g_allocs;
static struct host_job *g_host_head, *g_host_tail;
static int g_live_user_streams;

static uint64_t g_hostfn_runs, g_hostfn_v2_runs[2], g_memop_writes; /* atomic */

static __thread struct ctx *t_ctx_stack[SIM_CTX_STACK];
static __thread int t_ctx_depth;
/* cuThreadExchangeStreamCaptureMode; 0 is CU_STREAM_CAPTURE_MODE_GLOBAL. */
static __thread CUstreamCaptureMode t_cap_mode;
/* The entry point this thread is in, for messages (-1: a simcuda_* call). */
static __thread int t_entry = -1;

#define ALOAD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define ASTORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define ABUMP(p) __atomic_fetch_add((p), 1, __ATOMIC_RELAXED)

#define LOCK() pthread_mutex_lock(&g_mu)
#define UNLOCK() pthread_mutex_unlock(&g_mu)

/* Remove item from a singly linked list threaded through ->next. */
#define LIST_UNLINK(headp, type, item)                  \
  do {                                                  \
    type **pp_ = (headp);                               \
    while (*pp_ && *pp_ != (item)) pp_ = &(*pp_)->next; \
    if (*pp_) *pp_ = (item)->next;                      \
  } while (0)

static void ensure_config(void);

/* ------------------------------------------------------------------------
 * Small helpers: time, entry bookkeeping
 * ------------------------------------------------------------------------ */

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_for_ns(uint64_t ns) {
  struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u),
                        .tv_nsec = (long)(ns % 1000000000u)};
  while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
  }
}

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  sched_yield();
#endif
}

struct stream;
static bool stream_live(const struct stream *s);

/* Keep the calling worker busy for ns: sleep the bulk (at most 1 ms at a
 * time: a fault in the context ends the kernel, as on a GPU), spin the last
 * 100 us so short simulated kernels still have sub-scheduler-tick
 * durations. */
static void simulate_busy(const struct stream *s, uint64_t ns) {
  const uint64_t end = now_ns() + ns;
  for (;;) {
    uint64_t t = now_ns();
    if (t >= end) return;
    if (end - t > 100000u) {
      uint64_t nap = end - t - 100000u;
      sleep_for_ns(nap < 1000000u ? nap : 1000000u);
      if (!stream_live(s)) return;
    } else {
      cpu_relax();
    }
  }
}

static int entry_find(const char *name) {
  if (!name) return -1;
  for (int i = 0; i < E_COUNT; i++)
    if (strcmp(g_entry_names[i], name) == 0) return i;
  return -1;
}

/* Every entry point starts here: count the call, apply injected failures. */
static CUresult enter(enum entry_id e) {
  ensure_config();
  CUresult r = CUDA_SUCCESS;
  t_entry = (int)e;
  LOCK();
  g_entry[e].calls++;
  /* A call that blocks inside the driver, as a real one can (lock held by
   * another thread, a synchronising operation): the caller waits. */
  if (g_entry[e].held && !pthread_equal(g_entry[e].holder, pthread_self())) {
    g_entry[e].waiting++;
    pthread_cond_broadcast(&g_changed);
    while (g_entry[e].held) pthread_cond_wait(&g_changed, &g_mu);
    g_entry[e].waiting--;
  }
  if (g_entry[e].fail_left != 0) {
    if (g_entry[e].fail_skip > 0) {
      g_entry[e].fail_skip--;
    } else {
      r = g_entry[e].fail_result;
      if (g_entry[e].fail_left > 0) g_entry[e].fail_left--;
    }
  }
  UNLOCK();
  return r;
}

#define ENTER(e)                                   \
  do {                                             \
    CUresult enter_r_ = enter(e);                  \
    if (enter_r_ != CUDA_SUCCESS) return enter_r_; \
  } while (0)

#define ENTER_INIT(e)                                              \
  do {                                                             \
    ENTER(e);                                                      \
    if (!ALOAD(&g_initialized)) return CUDA_ERROR_NOT_INITIALIZED; \
  } while (0)

/* ------------------------------------------------------------------------
 * Contexts (under g_mu unless noted)
 * ------------------------------------------------------------------------ */

static struct ctx *ctx_at(int i) {
  return &g_ctx_chunks[i / SIM_CTX_CHUNK][i % SIM_CTX_CHUNK];
}

static struct ctx *primary_ctx(int dev) { return ctx_at(dev); }

/* Any context ever handed out (live or destroyed), or NULL; never
 * dereferences h. Primary contexts of absent devices are not contexts. */
static struct ctx *ctx_lookup(CUcontext h) {
  uintptr_t a = (uintptr_t)(void *)h;
  for (int k = 0; k < SIM_CTX_CHUNKS && g_ctx_chunks[k]; k++) {
    uintptr_t base = (uintptr_t)g_ctx_chunks[k];
    if (a < base || a >= base + SIM_CTX_CHUNK * sizeof(struct ctx)) continue;
    if ((a - base) % sizeof(struct ctx)) return NULL;
    int i = k * SIM_CTX_CHUNK + (int)((a - base) / sizeof(struct ctx));
    if (i >= g_nctx) return NULL;
    if (i < SIM_MAX_DEVICES && i >= ALOAD(&g_ndev)) return NULL;
    return ctx_at(i);
  }
  return NULL;
}

/* A context made by cuCtxCreate and since destroyed. */
static bool ctx_gone(const struct ctx *c) {
  return !c->primary && c->refcount == 0;
}

static CUcontext ctx_handle(struct ctx *c) { return (CUcontext)(void *)c; }

/* A fresh incarnation of c: new ids, no fault. */
static void ctx_incarnate(struct ctx *c) {
  c->id = g_next_ctx_id++;
  c->dflt_id = g_next_stream_id++;
}

/* A new context slot, or NULL when the table is full. */
static struct ctx *ctx_alloc(void) {
  if (g_nctx >= SIM_CTX_CHUNK * SIM_CTX_CHUNKS) return NULL;
  int k = g_nctx / SIM_CTX_CHUNK;
  if (!g_ctx_chunks[k]) {
    g_ctx_chunks[k] = calloc(SIM_CTX_CHUNK, sizeof(struct ctx));
    if (!g_ctx_chunks[k]) return NULL;
  }
  return ctx_at(g_nctx++);
}

static struct ctx *current_ctx(void) {
  return t_ctx_depth > 0 ? t_ctx_stack[t_ctx_depth - 1] : NULL;
}

/* CUDA_SUCCESS, the sticky fault, or 709 once the last release destroyed it. */
static CUresult ctx_status(struct ctx *c) {
  if (c->refcount == 0) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  return ALOAD(&c->fault);
}

static CUresult need_current(struct ctx **out) {
  struct ctx *c = current_ctx();
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  CUresult r = ctx_status(c);
  if (r == CUDA_SUCCESS) *out = c;
  return r;
}

/* Usable without g_mu: gen and fault are read atomically. */
static bool stream_live(const struct stream *s) {
  return s->gen == ALOAD(&s->ctx->gen) && ALOAD(&s->ctx->fault) == CUDA_SUCCESS;
}

static bool token_dead(const struct token *t) {
  return t->gen != ALOAD(&t->ctx->gen) || ALOAD(&t->ctx->fault) != CUDA_SUCCESS;
}

static bool stream_idle(const struct stream *s) { return !s->head && !s->running; }

/* Puts c into the sticky error. With SIMCUDA_BUSY_STREAMS_HIDE_FAULT, the
 * streams of c that had work queued or running (other than `faulting`)
 * answer cuStreamQuery with NOT_READY from now on. */
static void ctx_fault(struct ctx *c, CUresult code, const struct stream *faulting) {
  if (c->refcount == 0 || c->fault != CUDA_SUCCESS) return;
  ASTORE(&c->fault, code);
  if (!g_busy_hide_fault) return;
  for (struct stream *s = g_streams; s; s = s->next)
    if (s->ctx == c && s->gen == c->gen && s != faulting && !s->destroyed &&
        !stream_idle(s))
      s->fault_hidden = true;
}

/* The fault is sticky: the first one wins and later ones are ignored. It
 * stays in the stream's context, or (SIMCUDA_FAULT_SCOPE=device, as seen on
 * an H200) reaches every live context of the device at once. */
static void stream_fault(struct stream *s, CUresult code) {
  struct ctx *c = s->ctx;
  if (s->gen != c->gen || c->fault != CUDA_SUCCESS) return;
  ctx_fault(c, code, s);
  if (g_fault_scope_device) {
    for (int i = 0; i < g_nctx; i++) {
      struct ctx *o = ctx_at(i);
      if (o != c && o->dev == c->dev) ctx_fault(o, code, s);
    }
  }
  pthread_cond_broadcast(&g_changed);
}

static void token_unref(struct token *t) {
  if (t && --t->refs == 0) free(t);
}

static void op_release(struct op *op) {
  if (op->kind == OP_RECORD || op->kind == OP_WAIT_EVENT)
    token_unref(op->u.tok);
  free(op);
}

static struct op *op_new(enum op_kind kind) {
  struct op *op = calloc(1, sizeof *op);
  if (op) op->kind = kind;
  return op;
}

static void op_list_free(struct op *op) {
  while (op) {
    struct op *next = op->next;
    op_release(op);
    op = next;
  }
}

/* A copy of a recorded op (recorded ops carry no event tokens). */
static struct op *op_clone(const struct op *op) {
  struct op *c = malloc(sizeof *c);
  if (c) {
    *c = *op;
    c->next = NULL;
  }
  return c;
}

static void stream_unref(struct stream *s) {
  if (--s->refs == 0) {
    pthread_cond_destroy(&s->cv);
    free(s);
  }
}

/* Ends s's capture sequence, if any, dropping what it recorded. */
static void capture_drop(struct stream *s) {
  if (s->cap == CU_STREAM_CAPTURE_STATUS_NONE) return;
  op_list_free(s->cap_head);
  s->cap_head = s->cap_tail = NULL;
  s->cap = CU_STREAM_CAPTURE_STATUS_NONE;
  g_captures--;
}

static void capture_invalidate(struct stream *s) {
  if (s->cap != CU_STREAM_CAPTURE_STATUS_ACTIVE) return;
  op_list_free(s->cap_head);
  s->cap_head = s->cap_tail = NULL;
  s->cap = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
}

/* The stream gives up its handle: the slot goes on top of the free list,
 * to be handed to the next cuStreamCreate. */
static void stream_retire(struct stream *s, enum slot_state why) {
  s->destroyed = true;
  capture_drop(s);
  if (s->slot >= 0) {
    struct sslot *sl = &g_slots[s->slot];
    sl->s = NULL;
    sl->state = why;
    sl->next_free = g_slot_free;
    g_slot_free = (uint32_t)s->slot + 1;
    s->slot = -1;
  }
  pthread_cond_signal(&s->cv);
}

static void alloc_release(const struct alloc *a);

/* A context is destroyed (cuCtxDestroy, the last primary release, or
 * cuDevicePrimaryCtxReset): like the real driver, everything it owned goes
 * away: streams, events, modules, memory (cuMemHostAlloc memory is freed,
 * cuMemHostRegister registrations end but the memory stays the caller's).
 * Queued ops of its streams are discarded by their workers (the generation
 * no longer matches), and the sticky fault ends. */
static void ctx_teardown(struct ctx *c) {
  ASTORE(&c->gen, c->gen + 1);
  ASTORE(&c->fault, CUDA_SUCCESS);
  c->dflt = NULL;
  ctx_incarnate(c);
  for (struct stream *s = g_streams; s; s = s->next)
    if (s->ctx == c && !s->destroyed) stream_retire(s, SLOT_ORPHANED);
  for (struct event **pp = &g_events; *pp;) {
    struct event *e = *pp;
    if (e->ctx != c) {
      pp = &e->next;
      continue;
    }
    *pp = e->next;
    token_unref(e->last);
    free(e);
  }
  for (struct module **pp = &g_modules; *pp;) {
    struct module *m = *pp;
    if (m->ctx != c) {
      pp = &m->next;
      continue;
    }
    *pp = m->next;
    while (m->funcs) {
      struct func *f = m->funcs;
      m->funcs = f->next;
      free(f);
    }
    free(m);
  }
  for (struct alloc **pp = &g_allocs; *pp;) {
    struct alloc *a = *pp;
    if (a->ctx != c) {
      pp = &a->next;
      continue;
    }
    *pp = a->next;
    alloc_release(a);
    free(a);
  }
  pthread_cond_broadcast(&g_changed);
}

/* ------------------------------------------------------------------------
 * Memory registry (under g_mu)
 * ------------------------------------------------------------------------ */

/* The allocation containing [addr, addr + n), or NULL. */
static const struct alloc *alloc_find(uintptr_t addr, size_t n) {
  if (n == 0) n = 1;
  for (const struct alloc *a = g_allocs; a; a = a->next) {
    if (addr >= a->base && addr - a->base < a->size &&
        n <= a->size - (addr - a->base))
      return a;
  }
  return NULL;
}

static struct alloc *alloc_at(uintptr_t base, enum alloc_kind kind) {
  for (struct alloc *a = g_allocs; a; a = a->next)
    if (a->base == base && a->kind == kind) return a;
  return NULL;
}

/* Pinned host memory is mapped on its own pages and unmapped when freed
 * (by cuMemFreeHost or with its context): touching it afterwards is a
 * SIGSEGV, as on an H200 after cuDevicePrimaryCtxReset, and the kernel
 * tends to hand the same addresses to the next allocation, as a driver's
 * pool does. Device memory is ordinary heap memory. */
static size_t pinned_len(size_t size) {
  const size_t page = 4096;
  return (size + page - 1) / page * page;
}

static void alloc_release(const struct alloc *a) {
  if (a->kind == A_PINNED)
    munmap((void *)a->base, pinned_len(a->size));
  else if (a->kind == A_DEVICE)
    free((void *)a->base);
  /* A_REGISTERED: the caller's memory */
}

static CUresult alloc_new(struct ctx *c, size_t size, size_t align, bool host,
                          void **out) {
  size_t rounded = (size + align - 1) / align * align;
  if (rounded < size || (host && pinned_len(size) < size))
    return CUDA_ERROR_OUT_OF_MEMORY;
  void *p;
  if (host) {
    p = mmap(NULL, pinned_len(size), PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) p = NULL;
  } else {
    p = aligned_alloc(align, rounded);
  }
  struct alloc *a = malloc(sizeof *a);
  if (!p || !a) {
    if (p && host) munmap(p, pinned_len(size));
    if (!host) free(p);
    free(a);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  /* Pinned host memory starts zeroed; device memory gets a pattern so a
   * test cannot rely on it being zero (the real driver does not zero). */
  memset(p, host ? 0 : 0xcd, rounded);
  *a = (struct alloc){.next = g_allocs,
                      .base = (uintptr_t)p,
                      .size = size,
                      .ctx = c,
                      .kind = host ? A_PINNED : A_DEVICE};
  g_allocs = a;
  *out = p;
  return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------
 * The driver host-function thread
 * ------------------------------------------------------------------------ */

static void *host_thread_main(void *arg) {
  (void)arg;
  LOCK();
  for (;;) {
    while (!g_host_head) pthread_cond_wait(&g_host_cv, &g_mu);
    struct host_job *job = g_host_head;
    g_host_head = job->next;
    if (!g_host_head) g_host_tail = NULL;
    const struct op *op = job->op;
    CUresult status = job->status;
    UNLOCK();
    if (op->kind == OP_CALLBACK) {
      op->u.host.cb(op->u.host.handle, status, op->u.host.ud);
    } else {
      /* Counted first: what the function wakes may read the counts. */
      ABUMP(&g_hostfn_runs);
      if (op->u.host.v2) ABUMP(&g_hostfn_v2_runs[op->u.host.mode]);
      op->u.host.fn(op->u.host.ud);
    }
    LOCK();
    job->done = true;
    pthread_cond_broadcast(&g_changed);
  }
  return NULL;
}

/* Run a host function or callback on the host thread; the stream waits for
 * it. A host function queued before a fault never runs; a callback runs with
 * the sticky error as its status (both as on the real driver). */
static void dispatch_host(struct stream *s, const struct op *op) {
  struct host_job job = {.op = op};
  LOCK();
  if (s->gen != ALOAD(&s->ctx->gen)) goto out;
  job.status = ALOAD(&s->ctx->fault);
  if (job.status != CUDA_SUCCESS && op->kind == OP_HOSTFN) goto out;
  if (g_host_tail)
    g_host_tail->next = &job;
  else
    g_host_head = &job;
  g_host_tail = &job;
  pthread_cond_signal(&g_host_cv);
  while (!job.done) pthread_cond_wait(&g_changed, &g_mu);
out:
  UNLOCK();
}

/* ------------------------------------------------------------------------
 * Stream workers: op execution
 * ------------------------------------------------------------------------ */

static bool wait32_holds(uint32_t v, uint32_t ref, unsigned cmp) {
  switch (cmp) {
    case CU_STREAM_WAIT_VALUE_GEQ:
      return (int32_t)(v - ref) >= 0;
    case CU_STREAM_WAIT_VALUE_EQ:
      return v == ref;
    case CU_STREAM_WAIT_VALUE_AND:
      return (v & ref) != 0;
    case CU_STREAM_WAIT_VALUE_NOR:
      return ~(v | ref) != 0;
    default:
      return true;
  }
}

/* Streams waiting in cuStreamWaitValue32 now (atomic). */
static unsigned g_wait32_waiters;

/* Poll with acquire loads: a short spin, then 20 us sleeps, longer when
 * many streams wait at once (tests hold hundreds of streams behind gates;
 * up to 1 ms). g_mu is taken per poll so the memory cannot be freed under
 * the load. */
static void exec_wait32(struct stream *s, const struct op *op) {
  const uint32_t ref = (uint32_t)op->u.mem.value;
  __atomic_fetch_add(&g_wait32_waiters, 1, __ATOMIC_RELAXED);
  for (unsigned polls = 0;; polls++) {
    LOCK();
    if (!stream_live(s)) {
      UNLOCK();
      break;
    }
    if (!alloc_find(op->u.mem.addr, 4)) {
      stream_fault(s, CUDA_ERROR_ILLEGAL_ADDRESS);
      UNLOCK();
      break;
    }
    uint32_t v =
        __atomic_load_n((const uint32_t *)op->u.mem.addr, __ATOMIC_ACQUIRE);
    UNLOCK();
    if (wait32_holds(v, ref, op->u.mem.flags)) break;
    if (polls < 200) {
      cpu_relax();
      continue;
    }
    uint64_t waiters = __atomic_load_n(&g_wait32_waiters, __ATOMIC_RELAXED);
    uint64_t nap = waiters <= 8 ? 20000u : 2500u * waiters;
    sleep_for_ns(nap < 1000000u ? nap : 1000000u);
  }
  __atomic_fetch_sub(&g_wait32_waiters, 1, __ATOMIC_RELAXED);
}

static uint32_t fnv1a32(const uint8_t *p, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 16777619u;
  }
  return h;
}

/* Ops that touch memory or shared state; called with g_mu held and the
 * stream live. A device address no longer backed by an allocation faults
 * the context, as a kernel touching freed memory would. */
static void exec_locked(struct stream *s, struct op *op) {
  switch (op->kind) {
    case OP_FAULT:
      stream_fault(s, op->u.code);
      break;
    case OP_WRITE32:
    case OP_WRITE64: {
      size_t n = op->kind == OP_WRITE32 ? 4 : 8;
      if (!alloc_find(op->u.mem.addr, n)) {
        stream_fault(s, CUDA_ERROR_ILLEGAL_ADDRESS);
        break;
      }
      if (op->kind == OP_WRITE32)
        __atomic_store_n((uint32_t *)op->u.mem.addr, (uint32_t)op->u.mem.value,
                         __ATOMIC_RELEASE);
      else
        __atomic_store_n((uint64_t *)op->u.mem.addr, op->u.mem.value,
                         __ATOMIC_RELEASE);
      ABUMP(&g_memop_writes);
      break;
    }
    case OP_RECORD:
      op->u.tok->done = true;
      pthread_cond_broadcast(&g_changed);
      break;
    case OP_WAIT_EVENT:
      while (!op->u.tok->done && !token_dead(op->u.tok) && stream_live(s))
        pthread_cond_wait(&g_changed, &g_mu);
      break;
    case OP_COPY:
      if ((op->u.copy.dst_dev && !alloc_find(op->u.copy.dst, op->u.copy.n)) ||
          (op->u.copy.src_dev && !alloc_find(op->u.copy.src, op->u.copy.n))) {
        stream_fault(s, CUDA_ERROR_ILLEGAL_ADDRESS);
        break;
      }
      memmove((void *)op->u.copy.dst, (const void *)op->u.copy.src,
              op->u.copy.n);
      break;
    case OP_SET8:
      if (!alloc_find(op->u.set.dst, op->u.set.n)) {
        stream_fault(s, CUDA_ERROR_ILLEGAL_ADDRESS);
        break;
      }
      memset((void *)op->u.set.dst, (int)(uint8_t)op->u.set.value, op->u.set.n);
      break;
    case OP_SET32: {
      if (!alloc_find(op->u.set.dst, op->u.set.n * 4)) {
        stream_fault(s, CUDA_ERROR_ILLEGAL_ADDRESS);
        break;
      }
      uint32_t *d = (uint32_t *)op->u.set.dst;
      for (size_t i = 0; i < op->u.set.n; i++) d[i] = op->u.set.value;
      break;
    }
    case OP_ADD_U32: {
      if (op->u.add.n == 0) break;
      if ((op->u.add.data & 3) ||
          !alloc_find(op->u.add.data, (size_t)op->u.add.n * 4)) {
        stream_fault(s, CUDA_ERROR_ILLEGAL_ADDRESS);
        break;
      }
      uint32_t *d = (uint32_t *)op->u.add.data;
      for (uint32_t i = 0; i < op->u.add.n; i++) d[i] += op->u.add.value;
      break;
    }
    case OP_CHECKSUM:
      if ((op->u.sum.out & 3) || !alloc_find(op->u.sum.out, 4) ||
          (op->u.sum.n && !alloc_find(op->u.sum.in, op->u.sum.n))) {
        stream_fault(s, CUDA_ERROR_ILLEGAL_ADDRESS);
        break;
      }
      *(uint32_t *)op->u.sum.out =
          fnv1a32((const uint8_t *)op->u.sum.in, op->u.sum.n);
      break;
    default:
      break;
  }
}

static void exec_op(struct stream *s, struct op *op) {
  switch (op->kind) {
    case OP_WORK:
      simulate_busy(s, op->ns);
      break;
    case OP_HOSTFN:
    case OP_CALLBACK:
      dispatch_host(s, op);
      break;
    case OP_WAIT32:
      exec_wait32(s, op);
      break;
    default:
      LOCK();
      if (stream_live(s)) exec_locked(s, op);
      UNLOCK();
      break;
  }
}

static void *stream_worker(void *arg) {
  struct stream *s = arg;
  LOCK();
  for (;;) {
    while (!s->head && !s->destroyed) pthread_cond_wait(&s->cv, &g_mu);
    struct op *op = s->head;
    if (!op) break; /* destroyed and drained */
    s->head = op->next;
    if (!s->head) s->tail = NULL;
    s->running = op;
    const bool same_gen = s->gen == s->ctx->gen;
    const CUresult fault = s->ctx->fault;
    UNLOCK();
    /* After a fault queued ops are discarded, except callbacks, which
     * the real driver still calls with the error status. */
    if (same_gen && fault == CUDA_SUCCESS)
      exec_op(s, op);
    else if (same_gen && op->kind == OP_CALLBACK)
      dispatch_host(s, op);
    LOCK();
    s->running = NULL;
    op_release(op);
    pthread_cond_broadcast(&g_changed);
  }
  LIST_UNLINK(&g_streams, struct stream, s);
  if (s->user) g_live_user_streams--;
  pthread_cond_broadcast(&g_changed);
  stream_unref(s);
  UNLOCK();
  return NULL;
}

/* ------------------------------------------------------------------------
 * Streams: creation, lookup, submission (under g_mu)
 * ------------------------------------------------------------------------ */

static CUresult stream_new(struct ctx *c, bool user, struct stream **out) {
  struct stream *s = calloc(1, sizeof *s);
  if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
  s->ctx = c;
  s->gen = c->gen;
  s->user = user;
  s->refs = 1; /* the worker's */
  s->slot = -1;
  s->id = user ? g_next_stream_id++ : c->dflt_id;
  s->cap = CU_STREAM_CAPTURE_STATUS_NONE;
  pthread_cond_init(&s->cv, NULL);

  pthread_attr_t attr;
  pthread_t tid;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, SIM_WORKER_STACK);
  int rc = pthread_create(&tid, &attr, stream_worker, s);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    pthread_cond_destroy(&s->cv);
    free(s);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  s->next = g_streams;
  g_streams = s;
  if (user) g_live_user_streams++;
  *out = s;
  return CUDA_SUCCESS;
}

/* The slot a handle names, or NULL for anything else (never dereferenced
 * before the range check). */
static struct sslot *slot_of(CUstream h) {
  uintptr_t a = (uintptr_t)(void *)h, base = (uintptr_t)g_slots;
  if (a < base || a >= base + sizeof g_slots || (a - base) % sizeof(struct sslot))
    return NULL;
  uint32_t i = (uint32_t)((a - base) / sizeof(struct sslot));
  return i < g_slots_used ? &g_slots[i] : NULL;
}

static CUstream slot_handle(int i) { return (CUstream)(void *)&g_slots[i]; }

/* A handle for s: the most recently freed one, else a new one. */
static CUresult slot_take(struct stream *s) {
  uint32_t i;
  if (g_slot_free) {
    i = g_slot_free - 1;
    g_slot_free = g_slots[i].next_free;
  } else if (g_slots_used < SIM_MAX_STREAM_HANDLES) {
    i = g_slots_used++;
  } else {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  g_slots[i] = (struct sslot){.s = s, .state = SLOT_LIVE};
  s->slot = (int)i;
  return CUDA_SUCCESS;
}

static bool is_special_stream(CUstream h) {
  return h == NULL || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD;
}

/* NULL, CU_STREAM_LEGACY and CU_STREAM_PER_THREAD name the current
 * context's default stream (created on first use when `create`; without it
 * *out may be NULL, meaning an idle default stream). Other handles must be
 * live streams from cuStreamCreate; nothing is dereferenced before that. */
static CUresult stream_resolve(CUstream h, bool create, struct stream **out) {
  *out = NULL;
  if (is_special_stream(h)) {
    struct ctx *c;
    CUresult r = need_current(&c);
    if (r != CUDA_SUCCESS) return r;
    if (!c->dflt && create) {
      r = stream_new(c, false, &c->dflt);
      if (r != CUDA_SUCCESS) return r;
    }
    *out = c->dflt;
    return CUDA_SUCCESS;
  }
  struct sslot *sl = slot_of(h);
  if (!sl) return CUDA_ERROR_INVALID_HANDLE;
  switch (sl->state) {
    case SLOT_LIVE:
      *out = sl->s;
      return CUDA_SUCCESS;
    case SLOT_DESTROYED:
      /* The real driver crashes here (SIGSEGV inside libcuda on an H200). */
      if (g_destroyed_abort) {
        fprintf(stderr, "simcuda: use of destroyed stream handle %p in %s\n",
                (void *)h, t_entry >= 0 ? g_entry_names[t_entry] : "simcuda_*");
        signal(SIGABRT, SIG_DFL); /* a test framework must not catch it */
        abort();
      }
      return CUDA_ERROR_INVALID_HANDLE;
    default:
      return CUDA_ERROR_INVALID_HANDLE;
  }
}

static void stream_append(struct stream *s, struct op *op) {
  op->next = NULL;
  if (s->tail)
    s->tail->next = op;
  else
    s->head = op;
  s->tail = op;
  pthread_cond_signal(&s->cv);
}

/* Takes ownership of op. During capture the work is recorded into the
 * capture (a graph launch replays it) and not run; event records and waits
 * are not recorded (see cuEventRecord, cuStreamWaitEvent). */
static CUresult stream_submit(struct stream *s, struct op *op) {
  CUresult r = ctx_status(s->ctx);
  if (r == CUDA_SUCCESS) {
    if (s->cap == CU_STREAM_CAPTURE_STATUS_NONE) {
      stream_append(s, op);
      return CUDA_SUCCESS;
    }
    if (s->cap == CU_STREAM_CAPTURE_STATUS_INVALIDATED) {
      r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    } else if (op->kind != OP_RECORD && op->kind != OP_WAIT_EVENT) {
      op->next = NULL;
      if (s->cap_tail)
        s->cap_tail->next = op;
      else
        s->cap_head = op;
      s->cap_tail = op;
      return CUDA_SUCCESS;
    }
  }
  op_release(op);
  return r;
}

static CUresult enqueue(CUstream h, struct op *op) {
  if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
  struct stream *s;
  LOCK();
  CUresult r = stream_resolve(h, true, &s);
  if (r == CUDA_SUCCESS)
    r = stream_submit(s, op);
  else
    op_release(op);
  UNLOCK();
  return r;
}

/* Synchronizing on a capturing stream is refused and invalidates the
 * capture, from any thread and in any capture mode. */
static CUresult stream_capture_refuse(struct stream *s) {
  if (s->cap == CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_SUCCESS;
  capture_invalidate(s);
  return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

/* A "potentially unsafe" call (queries and synchronizes of streams, events
 * and contexts; allocation, free, registration, module loads) made while
 * capture sequences are in progress, as CUDA's capture modes define it:
 * a thread whose interaction mode (cuThreadExchangeStreamCaptureMode,
 * default GLOBAL) is
 *   GLOBAL       is prohibited by its own captures begun in GLOBAL or
 *                THREAD_LOCAL mode and by other threads' GLOBAL captures;
 *   THREAD_LOCAL is prohibited by its own GLOBAL or THREAD_LOCAL captures;
 *   RELAXED      is never prohibited.
 * A prohibited call invalidates the captures that prohibit it and returns
 * CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (the capturing thread's next
 * enqueue then gets CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, as on an H200).
 * Under g_mu. */
static CUresult capture_unsafe_call(void) {
  if (g_captures == 0 || t_cap_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
    return CUDA_SUCCESS;
  const pthread_t self = pthread_self();
  bool hit = false;
  for (struct stream *s = g_streams; s; s = s->next) {
    if (s->cap == CU_STREAM_CAPTURE_STATUS_NONE) continue;
    bool own = pthread_equal(s->cap_thread, self);
    bool prohibits = own ? s->cap_mode != CU_STREAM_CAPTURE_MODE_RELAXED
                         : s->cap_mode == CU_STREAM_CAPTURE_MODE_GLOBAL &&
                               t_cap_mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
    if (prohibits) {
      capture_invalidate(s);
      hit = true;
    }
  }
  return hit ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------
 * Initialization, versions, errors
 * ------------------------------------------------------------------------ */

static CUresult sim_cuInit(unsigned int flags) {
  ENTER(E_Init);
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = CUDA_SUCCESS;
  LOCK();
  if (!g_initialized) {
    if (g_ndev == 0) {
      r = CUDA_ERROR_NO_DEVICE;
    } else {
      pthread_attr_t attr;
      pthread_t tid;
      pthread_attr_init(&attr);
      pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
      if (pthread_create(&tid, &attr, host_thread_main, NULL) != 0)
        r = CUDA_ERROR_OUT_OF_MEMORY;
      else
        ASTORE(&g_initialized, 1);
      pthread_attr_destroy(&attr);
    }
  }
  UNLOCK();
  return r;
}

static CUresult sim_cuDriverGetVersion(int *version) {
  ENTER(E_DriverGetVersion);
  if (!version) return CUDA_ERROR_INVALID_VALUE;
  *version = ALOAD(&g_driver_version);
  return CUDA_SUCCESS;
}

/* Strings as the real driver's cuGetErrorString returns them, where known;
 * a few rare codes use the header's description instead. */
#define ERR(code, str) \
  { code, #code, str }
static const struct {
  CUresult code;
  const char *name, *str;
} g_errors[] = {
    ERR(CUDA_SUCCESS, "no error"),
    ERR(CUDA_ERROR_INVALID_VALUE, "invalid argument"),
    ERR(CUDA_ERROR_OUT_OF_MEMORY, "out of memory"),
    ERR(CUDA_ERROR_NOT_INITIALIZED, "initialization error"),
    ERR(CUDA_ERROR_DEINITIALIZED, "driver shutting down"),
    ERR(CUDA_ERROR_PROFILER_DISABLED,
        "profiler disabled while using external profiling tool"),
    ERR(CUDA_ERROR_PROFILER_NOT_INITIALIZED,
        "profiler not initialized: call cudaProfilerInitialize()"),
    ERR(CUDA_ERROR_PROFILER_ALREADY_STARTED, "profiler already started"),
    ERR(CUDA_ERROR_PROFILER_ALREADY_STOPPED, "profiler already stopped"),
    ERR(CUDA_ERROR_STUB_LIBRARY, "CUDA driver is a stub library"),
    ERR(CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER,
        "API call is not supported in the installed CUDA driver"),
    ERR(CUDA_ERROR_DEVICE_UNAVAILABLE,
        "CUDA-capable device(s) is/are busy or unavailable"),
    ERR(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"),
    ERR(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"),
    ERR(CUDA_ERROR_DEVICE_NOT_LICENSED,
        "device doesn't have valid Grid license"),
    ERR(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid"),
    ERR(CUDA_ERROR_INVALID_CONTEXT, "invalid device context"),
    ERR(CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "context already current"),
    ERR(CUDA_ERROR_MAP_FAILED, "mapping of buffer object failed"),
    ERR(CUDA_ERROR_UNMAP_FAILED, "unmapping of buffer object failed"),
    ERR(CUDA_ERROR_ARRAY_IS_MAPPED, "array is mapped"),
    ERR(CUDA_ERROR_ALREADY_MAPPED, "resource already mapped"),
    ERR(CUDA_ERROR_NO_BINARY_FOR_GPU,
        "no kernel image is available for execution on the device"),
    ERR(CUDA_ERROR_ALREADY_ACQUIRED, "resource already acquired"),
    ERR(CUDA_ERROR_NOT_MAPPED, "resource not mapped"),
    ERR(CUDA_ERROR_NOT_MAPPED_AS_ARRAY, "resource not mapped as array"),
    ERR(CUDA_ERROR_NOT_MAPPED_AS_POINTER, "resource not mapped as pointer"),
    ERR(CUDA_ERROR_ECC_UNCORRECTABLE, "uncorrectable ECC error encountered"),
    ERR(CUDA_ERROR_UNSUPPORTED_LIMIT,
        "limit is not supported on this architecture"),
    ERR(CUDA_ERROR_CONTEXT_ALREADY_IN_USE,
        "exclusive-thread device already in use by a different thread"),
    ERR(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED,
        "peer access is not supported between these two devices"),
    ERR(CUDA_ERROR_INVALID_PTX, "a PTX JIT compilation failed"),
    ERR(CUDA_ERROR_INVALID_GRAPHICS_CONTEXT,
        "invalid OpenGL or DirectX context"),
    ERR(CUDA_ERROR_NVLINK_UNCORRECTABLE,
        "uncorrectable NVLink error detected during the execution"),
    ERR(CUDA_ERROR_JIT_COMPILER_NOT_FOUND,
        "PTX JIT compiler library not found"),
    ERR(CUDA_ERROR_UNSUPPORTED_PTX_VERSION,
        "the provided PTX was compiled with an unsupported toolchain."),
    ERR(CUDA_ERROR_JIT_COMPILATION_DISABLED,
        "PTX JIT compilation was disabled"),
    ERR(CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY,
        "the provided execution affinity is not supported"),
    ERR(CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC,
        "the provided PTX contains unsupported call to cudaDeviceSynchronize"),
    ERR(CUDA_ERROR_CONTAINED,
        "an exception occurred on the device that is now contained"),
    ERR(CUDA_ERROR_INVALID_SOURCE, "device kernel image is invalid"),
    ERR(CUDA_ERROR_FILE_NOT_FOUND, "file not found"),
    ERR(CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND,
        "shared object symbol not found"),
    ERR(CUDA_ERROR_SHARED_OBJECT_INIT_FAILED,
        "shared object initialization failed"),
    ERR(CUDA_ERROR_OPERATING_SYSTEM,
        "OS call failed or operation not supported on this OS"),
    ERR(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"),
    ERR(CUDA_ERROR_ILLEGAL_STATE,
        "the operation cannot be performed in the present state"),
    ERR(CUDA_ERROR_LOSSY_QUERY,
        "attempted introspection would be semantically lossy"),
    ERR(CUDA_ERROR_NOT_FOUND, "named symbol not found"),
    ERR(CUDA_ERROR_NOT_READY, "device not ready"),
    ERR(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered"),
    ERR(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,
        "too many resources requested for launch"),
    ERR(CUDA_ERROR_LAUNCH_TIMEOUT, "the launch timed out and was terminated"),
    ERR(CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING,
        "launch uses incompatible texturing mode"),
    ERR(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED,
        "peer access is already enabled"),
    ERR(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "peer access has not been enabled"),
    ERR(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE,
        "cannot set while device is active in this process"),
    ERR(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed"),
    ERR(CUDA_ERROR_ASSERT, "device-side assert triggered"),
    ERR(CUDA_ERROR_TOO_MANY_PEERS, "peer mapping resources exhausted"),
    ERR(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
        "part or all of the requested memory range is already mapped"),
    ERR(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
        "pointer does not correspond to a registered memory region"),
    ERR(CUDA_ERROR_HARDWARE_STACK_ERROR, "hardware stack error"),
    ERR(CUDA_ERROR_ILLEGAL_INSTRUCTION,
        "an illegal instruction was encountered"),
    ERR(CUDA_ERROR_MISALIGNED_ADDRESS, "misaligned address"),
    ERR(CUDA_ERROR_INVALID_ADDRESS_SPACE,
        "operation not supported on global/shared address space"),
    ERR(CUDA_ERROR_INVALID_PC, "invalid program counter"),
    ERR(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure"),
    ERR(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE,
        "too many blocks in cooperative launch"),
    ERR(CUDA_ERROR_TENSOR_MEMORY_LEAK, "tensor memory not completely freed"),
    ERR(CUDA_ERROR_NOT_PERMITTED, "operation not permitted"),
    ERR(CUDA_ERROR_NOT_SUPPORTED, "operation not supported"),
    ERR(CUDA_ERROR_SYSTEM_NOT_READY, "system not yet initialized"),
    ERR(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH,
        "system has unsupported display driver / cuda driver combination"),
    ERR(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE,
        "forward compatibility was attempted on non supported HW"),
    ERR(CUDA_ERROR_MPS_CONNECTION_FAILED,
        "MPS client failed to connect to the MPS control daemon or the MPS server"),
    ERR(CUDA_ERROR_MPS_RPC_FAILURE,
        "the remote procedural call between the MPS server and the MPS client failed"),
    ERR(CUDA_ERROR_MPS_SERVER_NOT_READY,
        "MPS server is not ready to accept new MPS client requests"),
    ERR(CUDA_ERROR_MPS_MAX_CLIENTS_REACHED,
        "the hardware resources required to create MPS client have been exhausted"),
    ERR(CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED,
        "the hardware resources required to support device connections have been exhausted"),
    ERR(CUDA_ERROR_MPS_CLIENT_TERMINATED,
        "the MPS client has been terminated by the server"),
    ERR(CUDA_ERROR_CDP_NOT_SUPPORTED,
        "the module is using CUDA Dynamic Parallelism, but the current configuration does not support it"),
    ERR(CUDA_ERROR_CDP_VERSION_MISMATCH,
        "a module contains an unsupported interaction between different versions of CUDA Dynamic Parallelism"),
    ERR(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
        "operation not permitted when stream is capturing"),
    ERR(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
        "operation failed due to a previous error during capture"),
    ERR(CUDA_ERROR_STREAM_CAPTURE_MERGE,
        "operation would result in a merge of separate capture sequences"),
    ERR(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED,
        "capture was not ended in the same stream as it began"),
    ERR(CUDA_ERROR_STREAM_CAPTURE_UNJOINED,
        "capturing stream has unjoined work"),
    ERR(CUDA_ERROR_STREAM_CAPTURE_ISOLATION,
        "dependency created on uncaptured work in another stream"),
    ERR(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
        "operation would make the legacy stream depend on a capturing blocking stream"),
    ERR(CUDA_ERROR_CAPTURED_EVENT,
        "operation not permitted on an event last recorded in a capturing stream"),
    ERR(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD,
        "attempt to terminate a thread-local capture sequence from another thread"),
    ERR(CUDA_ERROR_TIMEOUT, "wait operation timed out"),
    ERR(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE,
        "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update"),
    ERR(CUDA_ERROR_EXTERNAL_DEVICE,
        "an async error has occured in external entity outside of CUDA"),
    ERR(CUDA_ERROR_INVALID_CLUSTER_SIZE,
        "a kernel launch error has occurred due to cluster misconfiguration"),
    ERR(CUDA_ERROR_FUNCTION_NOT_LOADED,
        "the function handle is not loaded when calling an API that requires a loaded function"),
    ERR(CUDA_ERROR_INVALID_RESOURCE_TYPE,
        "one or more resources passed in are not valid resource types for the operation"),
    ERR(CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION,
        "one or more resources are insufficient or non-applicable for the operation"),
    ERR(CUDA_ERROR_KEY_ROTATION,
        "an error happened during the key rotation sequence"),
    ERR(CUDA_ERROR_UNKNOWN, "unknown error"),
};
#undef ERR

static int error_index(CUresult code) {
  for (size_t i = 0; i < sizeof g_errors / sizeof g_errors[0]; i++)
    if (g_errors[i].code == code) return (int)i;
  return -1;
}

static CUresult sim_cuGetErrorName(CUresult error, const char **pstr) {
  ENTER(E_GetErrorName);
  if (!pstr) return CUDA_ERROR_INVALID_VALUE;
  int i = error_index(error);
  *pstr = i < 0 ? NULL : g_errors[i].name;
  return i < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

static CUresult sim_cuGetErrorString(CUresult error, const char **pstr) {
  ENTER(E_GetErrorString);
  if (!pstr) return CUDA_ERROR_INVALID_VALUE;
  int i = error_index(error);
  *pstr = i < 0 ? NULL : g_errors[i].str;
  return i < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------
 * Devices
 * ------------------------------------------------------------------------ */

static bool dev_valid(CUdevice dev) { return dev >= 0 && dev < ALOAD(&g_ndev); }

static CUresult sim_cuDeviceGetCount(int *count) {
  ENTER_INIT(E_DeviceGetCount);
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  *count = ALOAD(&g_ndev);
  return CUDA_SUCCESS;
}

static CUresult sim_cuDeviceGet(CUdevice *device, int ordinal) {
  ENTER_INIT(E_DeviceGet);
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  if (!dev_valid(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

static CUresult sim_cuDeviceGetName(char *name, int len, CUdevice dev) {
  ENTER_INIT(E_DeviceGetName);
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!dev_valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  snprintf(name, (size_t)len, "uvcuda simulated device %d (not a GPU)", dev);
  return CUDA_SUCCESS;
}

/* Plausible values shaped after an H200; features the simulation does not
 * implement read 0. */
static int attribute_value(CUdevice_attribute a, CUdevice dev) {
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
      return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:
      return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:
      return 64;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:
      return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
      return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:
      return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
      return 49152;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY:
      return 65536;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
      return 32;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK:
      return 65536;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
      return 132;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
      return 1;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
      return 1;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
      return dev + 1;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
      return 2048;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
      return 1;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
      return 9;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
      return 0;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1:
      return 0;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1:
      return 0;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR_V1:
      return 0;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS:
      return 1;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR:
      return 1;
    default:
      return 0;
  }
}

static CUresult sim_cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib,
                                         CUdevice dev) {
  ENTER_INIT(E_DeviceGetAttribute);
  if (!pi) return CUDA_ERROR_INVALID_VALUE;
  if (!dev_valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if ((int)attrib <= 0 || (int)attrib >= SIM_DEVICE_ATTRIBUTE_MAX)
    return CUDA_ERROR_INVALID_VALUE;
  *pi = attribute_value(attrib, dev);
  return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------
 * Primary contexts and the current-context stack
 * ------------------------------------------------------------------------ */

static CUresult sim_cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
  ENTER_INIT(E_DevicePrimaryCtxRetain);
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (!dev_valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  LOCK();
  primary_ctx(dev)->refcount++;
  *pctx = ctx_handle(primary_ctx(dev));
  UNLOCK();
  return CUDA_SUCCESS;
}

static CUresult sim_cuDevicePrimaryCtxRelease(CUdevice dev) {
  ENTER_INIT(E_DevicePrimaryCtxRelease);
  if (!dev_valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  CUresult r = CUDA_SUCCESS;
  LOCK();
  struct ctx *c = primary_ctx(dev);
  if (c->refcount == 0)
    r = CUDA_ERROR_INVALID_CONTEXT;
  else if (--c->refcount == 0)
    ctx_teardown(c);
  UNLOCK();
  return r;
}

/* Destroys the primary context's state as the last release would (a
 * sticky fault ends with it); retains stay, so the same handle names a
 * fresh context. */
static CUresult sim_cuDevicePrimaryCtxReset(CUdevice dev) {
  ENTER_INIT(E_DevicePrimaryCtxReset);
  if (!dev_valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  LOCK();
  struct ctx *c = primary_ctx(dev);
  if (c->refcount > 0) ctx_teardown(c);
  UNLOCK();
  return CUDA_SUCCESS;
}

/* Any number of contexts per device; the new one is pushed on the calling
 * thread's stack. */
static CUresult ctx_create(CUcontext *pctx, unsigned flags, CUdevice dev) {
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (flags > 0xffu) return CUDA_ERROR_INVALID_VALUE;
  if (!dev_valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (t_ctx_depth >= SIM_CTX_STACK) return CUDA_ERROR_OUT_OF_MEMORY;
  LOCK();
  struct ctx *c = ctx_alloc();
  if (c) {
    c->dev = dev;
    c->primary = false;
    c->refcount = 1;
    ctx_incarnate(c);
    t_ctx_stack[t_ctx_depth++] = c;
    *pctx = ctx_handle(c);
  }
  UNLOCK();
  return c ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult sim_cuCtxCreate_v3020(CUcontext *pctx, unsigned int flags,
                                      CUdevice dev) {
  ENTER_INIT(E_CtxCreate);
  return ctx_create(pctx, flags, dev);
}

/* Execution-affinity and CIG parameters are not modelled. */
static CUresult sim_cuCtxCreate_v12050(CUcontext *pctx,
                                       CUctxCreateParams *params,
                                       unsigned int flags, CUdevice dev) {
  ENTER_INIT(E_CtxCreate);
  if (params && (params->numExecAffinityParams || params->execAffinityParams ||
                 params->cigParams))
    return CUDA_ERROR_NOT_SUPPORTED;
  return ctx_create(pctx, flags, dev);
}

/* Created contexts only. Everything the context owned goes away; if it is
 * current to the caller it is popped. Other threads that still have it
 * current get CUDA_ERROR_CONTEXT_IS_DESTROYED from calls that need it. */
static CUresult sim_cuCtxDestroy(CUcontext h) {
  ENTER_INIT(E_CtxDestroy);
  LOCK();
  struct ctx *c = ctx_lookup(h);
  CUresult r = CUDA_SUCCESS;
  if (!c || c->primary || ctx_gone(c)) {
    r = CUDA_ERROR_INVALID_CONTEXT;
  } else {
    ctx_teardown(c);
    c->refcount = 0;
    if (t_ctx_depth > 0 && t_ctx_stack[t_ctx_depth - 1] == c) t_ctx_depth--;
  }
  UNLOCK();
  return r;
}

static CUresult sim_cuCtxGetId(CUcontext h, unsigned long long *id) {
  ENTER_INIT(E_CtxGetId);
  if (!id) return CUDA_ERROR_INVALID_VALUE;
  LOCK();
  struct ctx *c = h ? ctx_lookup(h) : current_ctx();
  CUresult r = !c ? CUDA_ERROR_INVALID_CONTEXT
               : c->refcount == 0 ? CUDA_ERROR_CONTEXT_IS_DESTROYED
                                  : CUDA_SUCCESS;
  if (r == CUDA_SUCCESS) *id = c->id;
  UNLOCK();
  return r;
}

static CUresult sim_cuCtxGetCurrent(CUcontext *pctx) {
  ENTER_INIT(E_CtxGetCurrent);
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  struct ctx *c = current_ctx();
  *pctx = c ? ctx_handle(c) : NULL;
  return CUDA_SUCCESS;
}

/* A context that can be made current: any primary context (a released one
 * answers CONTEXT_IS_DESTROYED later), a created one until destroyed. */
static struct ctx *ctx_lookup_bindable(CUcontext h) {
  LOCK();
  struct ctx *c = ctx_lookup(h);
  if (c && ctx_gone(c)) c = NULL;
  UNLOCK();
  return c;
}

static CUresult sim_cuCtxSetCurrent(CUcontext h) {
  ENTER_INIT(E_CtxSetCurrent);
  if (!h) { /* unbinds: pops the top, or nothing */
    if (t_ctx_depth > 0) t_ctx_depth--;
    return CUDA_SUCCESS;
  }
  struct ctx *c = ctx_lookup_bindable(h);
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  if (t_ctx_depth == 0) t_ctx_depth = 1;
  t_ctx_stack[t_ctx_depth - 1] = c;
  return CUDA_SUCCESS;
}

static CUresult sim_cuCtxPushCurrent(CUcontext h) {
  ENTER_INIT(E_CtxPushCurrent);
  struct ctx *c = ctx_lookup_bindable(h);
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  if (t_ctx_depth >= SIM_CTX_STACK) return CUDA_ERROR_OUT_OF_MEMORY;
  t_ctx_stack[t_ctx_depth++] = c;
  return CUDA_SUCCESS;
}

static CUresult sim_cuCtxPopCurrent(CUcontext *pctx) {
  ENTER_INIT(E_CtxPopCurrent);
  if (t_ctx_depth == 0) return CUDA_ERROR_INVALID_CONTEXT;
  struct ctx *c = t_ctx_stack[--t_ctx_depth];
  if (pctx) *pctx = ctx_handle(c);
  return CUDA_SUCCESS;
}

/* h == NULL means the current context. */
static CUresult ctx_pick(CUcontext h, struct ctx **out) {
  struct ctx *c = h ? ctx_lookup(h) : current_ctx();
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  if (c->refcount == 0) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  *out = c;
  return CUDA_SUCCESS;
}

static CUresult ctx_get_device(CUdevice *device, CUcontext h) {
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  struct ctx *c;
  LOCK();
  CUresult r = ctx_pick(h, &c);
  if (r == CUDA_SUCCESS) *device = c->dev;
  UNLOCK();
  return r;
}

static CUresult sim_cuCtxGetDevice(CUdevice *device) {
  ENTER_INIT(E_CtxGetDevice);
  return ctx_get_device(device, NULL);
}

static CUresult sim_cuCtxGetDevice_v13000(CUdevice *device, CUcontext h) {
  ENTER_INIT(E_CtxGetDevice);
  return ctx_get_device(device, h);
}

/* Wait until every stream of the context is idle, or the context faults. */
static CUresult ctx_synchronize(CUcontext h) {
  struct ctx *c;
  LOCK();
  CUresult r = ctx_pick(h, &c);
  const unsigned gen = r == CUDA_SUCCESS ? c->gen : 0;
  bool checked = false;
  while (r == CUDA_SUCCESS) {
    if (c->gen != gen) {
      r = CUDA_ERROR_CONTEXT_IS_DESTROYED;
      break;
    }
    if ((r = ctx_status(c)) != CUDA_SUCCESS) break;
    if (c->gen == gen && !checked && (r = capture_unsafe_call()) != CUDA_SUCCESS)
      break;
    checked = true;
    bool busy = false, capturing = false;
    for (struct stream *s = g_streams; s; s = s->next) {
      if (s->ctx != c || s->gen != gen) continue;
      if (stream_capture_refuse(s) != CUDA_SUCCESS) capturing = true;
      if (!stream_idle(s)) busy = true;
    }
    if (capturing) {
      r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
      break;
    }
    if (!busy) break;
    pthread_cond_wait(&g_changed, &g_mu);
  }
  UNLOCK();
  return r;
}

static CUresult sim_cuCtxSynchronize(void) {
  ENTER_INIT(E_CtxSynchronize);
  return ctx_synchronize(NULL);
}

static CUresult sim_cuCtxSynchronize_v13000(CUcontext h) {
  ENTER_INIT(E_CtxSynchronize);
  return ctx_synchronize(h);
}

/* ------------------------------------------------------------------------
 * Stream management
 * ------------------------------------------------------------------------ */

static CUresult sim_cuStreamCreate(CUstream *phStream, unsigned int flags) {
  ENTER_INIT(E_StreamCreate);
  if (!phStream) return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~(unsigned)CU_STREAM_NON_BLOCKING)
    return CUDA_ERROR_INVALID_VALUE;
  struct ctx *c;
  struct stream *s;
  LOCK();
  CUresult r = need_current(&c);
  if (r == CUDA_SUCCESS) r = stream_new(c, true, &s);
  if (r == CUDA_SUCCESS && (r = slot_take(s)) != CUDA_SUCCESS) {
    s->destroyed = true; /* no handle: its worker exits at once */
    pthread_cond_signal(&s->cv);
  }
  if (r == CUDA_SUCCESS) *phStream = slot_handle(s->slot);
  UNLOCK();
  return r;
}

/* Returns at once; queued work still runs, then the worker frees it. The
 * handle is free at once: the next cuStreamCreate gets it back. On a
 * faulted context the stream is released but the sticky error returned. */
static CUresult sim_cuStreamDestroy(CUstream h) {
  ENTER_INIT(E_StreamDestroy);
  if (is_special_stream(h)) return CUDA_ERROR_INVALID_HANDLE;
  struct stream *s;
  LOCK();
  CUresult r = stream_resolve(h, false, &s);
  if (r == CUDA_SUCCESS) {
    r = ctx_status(s->ctx);
    stream_retire(s, SLOT_DESTROYED);
  }
  UNLOCK();
  return r;
}

/* Ids are unique and increase; a special handle gives the current
 * context's default stream's id. */
static CUresult sim_cuStreamGetId(CUstream h, unsigned long long *id) {
  ENTER_INIT(E_StreamGetId);
  if (!id) return CUDA_ERROR_INVALID_VALUE;
  struct stream *s;
  LOCK();
  CUresult r = stream_resolve(h, false, &s);
  if (r == CUDA_SUCCESS) *id = s ? s->id : current_ctx()->dflt_id;
  UNLOCK();
  return r;
}

static CUresult sim_cuStreamGetCtx(CUstream h, CUcontext *pctx) {
  ENTER_INIT(E_StreamGetCtx);
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  struct stream *s;
  LOCK();
  CUresult r = stream_resolve(h, false, &s);
  if (r == CUDA_SUCCESS) {
    struct ctx *c = s ? s->ctx : current_ctx();
    r = ctx_status(c);
    if (r == CUDA_SUCCESS) *pctx = ctx_handle(c);
  }
  UNLOCK();
  return r;
}

static CUresult sim_cuStreamQuery(CUstream h) {
  ENTER_INIT(E_StreamQuery);
  struct stream *s;
  LOCK();
  CUresult r = stream_resolve(h, false, &s);
  if (r == CUDA_SUCCESS && s) {
    r = ctx_status(s->ctx);
    if (r != CUDA_SUCCESS && s->fault_hidden) r = CUDA_ERROR_NOT_READY;
    if (r == CUDA_SUCCESS) r = stream_capture_refuse(s);
  }
  if (r == CUDA_SUCCESS) r = capture_unsafe_call();
  if (r == CUDA_SUCCESS && s && !stream_idle(s)) r = CUDA_ERROR_NOT_READY;
  UNLOCK();
  return r;
}

static CUresult sim_cuStreamSynchronize(CUstream h) {
  ENTER_INIT(E_StreamSynchronize);
  struct stream *s;
  LOCK();
  CUresult r = stream_resolve(h, false, &s);
  if (r == CUDA_SUCCESS && s) {
    r = ctx_status(s->ctx);
    if (r == CUDA_SUCCESS) r = stream_capture_refuse(s);
  }
  if (r == CUDA_SUCCESS) r = capture_unsafe_call();
  if (r == CUDA_SUCCESS && s) {
    s->refs++; /* the worker may exit and unlink it while we wait */
    for (;;) {
      if (s->gen != s->ctx->gen) {
        r = CUDA_ERROR_CONTEXT_IS_DESTROYED;
        break;
      }
      if ((r = ctx_status(s->ctx)) != CUDA_SUCCESS) break;
      if ((r = stream_capture_refuse(s)) != CUDA_SUCCESS) break;
      if (stream_idle(s)) break;
      pthread_cond_wait(&g_changed, &g_mu);
    }
    stream_unref(s);
  }
  UNLOCK();
  return r;
}

/* ------------------------------------------------------------------------
 * Stream capture and graphs (recorded, replayed by a launch)
 * ------------------------------------------------------------------------ */

static CUresult stream_begin_capture(CUstream h, CUstreamCaptureMode mode) {
  if ((unsigned)mode > CU_STREAM_CAPTURE_MODE_RELAXED)
    return CUDA_ERROR_INVALID_VALUE;
  struct stream *s;
  LOCK();
  CUresult r = stream_resolve(h, false, &s);
  if (r == CUDA_SUCCESS && is_special_stream(h))
    r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (r == CUDA_SUCCESS) r = ctx_status(s->ctx);
  if (r == CUDA_SUCCESS && s->cap != CU_STREAM_CAPTURE_STATUS_NONE)
    r = CUDA_ERROR_ILLEGAL_STATE;
  if (r == CUDA_SUCCESS) {
    s->cap = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    s->cap_mode = mode;
    s->cap_thread = pthread_self();
    s->cap_head = s->cap_tail = NULL;
    g_captures++;
  }
  UNLOCK();
  return r;
}

static CUresult sim_cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode) {
  ENTER_INIT(E_ThreadExchangeStreamCaptureMode);
  if (!mode || (unsigned)*mode > CU_STREAM_CAPTURE_MODE_RELAXED)
    return CUDA_ERROR_INVALID_VALUE;
  CUstreamCaptureMode old = t_cap_mode;
  t_cap_mode = *mode;
  *mode = old;
  return CUDA_SUCCESS;
}

static CUresult sim_cuStreamBeginCapture_v10000(CUstream h) {
  ENTER_INIT(E_StreamBeginCapture);
  return stream_begin_capture(h, CU_STREAM_CAPTURE_MODE_GLOBAL);
}

static CUresult sim_cuStreamBeginCapture(CUstream h, CUstreamCaptureMode mode) {
  ENTER_INIT(E_StreamBeginCapture);
  return stream_begin_capture(h, mode);
}

static CUresult sim_cuStreamIsCapturing(CUstream h,
                                        CUstreamCaptureStatus *status) {
  ENTER_INIT(E_StreamIsCapturing);
  if (!status) return CUDA_ERROR_INVALID_VALUE;
  struct stream *s;
  LOCK();
  CUresult r = stream_resolve(h, false, &s);
  if (r == CUDA_SUCCESS && s) r = ctx_status(s->ctx);
  if (r == CUDA_SUCCESS) *status = s ? s->cap : CU_STREAM_CAPTURE_STATUS_NONE;
  UNLOCK();
  return r;
}

/* A capture begun in GLOBAL or THREAD_LOCAL mode ends only on its own
 * thread (CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, the capture goes on). */
static CUresult sim_cuStreamEndCapture(CUstream h, CUgraph *phGraph) {
  ENTER_INIT(E_StreamEndCapture);
  if (!phGraph) return CUDA_ERROR_INVALID_VALUE;
  struct stream *s;
  LOCK();
  CUresult r = stream_resolve(h, false, &s);
  if (r == CUDA_SUCCESS && !s)
    r = CUDA_ERROR_ILLEGAL_STATE; /* idle default stream */
  if (r == CUDA_SUCCESS) r = ctx_status(s->ctx);
  if (r == CUDA_SUCCESS) {
    if (s->cap == CU_STREAM_CAPTURE_STATUS_NONE) {
      r = CUDA_ERROR_ILLEGAL_STATE;
    } else if (s->cap_mode != CU_STREAM_CAPTURE_MODE_RELAXED &&
               !pthread_equal(s->cap_thread, pthread_self())) {
      r = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    } else if (s->cap == CU_STREAM_CAPTURE_STATUS_INVALIDATED) {
      capture_drop(s);
      *phGraph = NULL;
      r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    } else {
      struct graph *g = calloc(1, sizeof *g);
      if (!g) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
      } else {
        g->ops = s->cap_head;
        s->cap_head = s->cap_tail = NULL;
        capture_drop(s);
        g->next = g_graphs;
        g_graphs = g;
        *phGraph = (CUgraph)(void *)g;
      }
    }
  }
  UNLOCK();
  return r;
}

static struct graph *graph_lookup(CUgraph h) {
  for (struct graph *g = g_graphs; g; g = g->next)
    if ((CUgraph)(void *)g == h) return g;
  return NULL;
}

static struct gexec *gexec_lookup(CUgraphExec h) {
  for (struct gexec *x = g_gexecs; x; x = x->next)
    if ((CUgraphExec)(void *)x == h) return x;
  return NULL;
}

/* A copy of a list of recorded ops; false when out of memory. */
static bool ops_copy(const struct op *from, struct op **out) {
  struct op *head = NULL, **tail = &head;
  for (; from; from = from->next) {
    struct op *c = op_clone(from);
    if (!c) {
      op_list_free(head);
      return false;
    }
    *tail = c;
    tail = &c->next;
  }
  *out = head;
  return true;
}

static CUresult sim_cuGraphDestroy(CUgraph h) {
  ENTER_INIT(E_GraphDestroy);
  CUresult r = CUDA_ERROR_INVALID_VALUE;
  LOCK();
  struct graph *g = graph_lookup(h);
  if (g) {
    LIST_UNLINK(&g_graphs, struct graph, g);
    op_list_free(g->ops);
    free(g);
    r = CUDA_SUCCESS;
  }
  UNLOCK();
  /* The real driver answers a bad graph handle with INVALID_VALUE for
   * NULL and INVALID_HANDLE otherwise; the simulation does the same. */
  if (r != CUDA_SUCCESS && h) r = CUDA_ERROR_INVALID_HANDLE;
  return r;
}

/* cuGraphInstantiate at 12000 is modelled as cuGraphInstantiateWithFlags,
 * as cudaTypedefs.h declares it; the H200's driver 580 hands out its
 * five-argument cuGraphInstantiate_v2 for that name instead (a three-argument
 * call crashed in it): callers ask for cuGraphInstantiateWithFlags. Flags
 * are accepted and make no difference. */
static CUresult graph_instantiate(CUgraphExec *out, CUgraph h) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  LOCK();
  struct graph *g = graph_lookup(h);
  struct gexec *x = NULL;
  CUresult r = g ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS && !(x = calloc(1, sizeof *x)))
    r = CUDA_ERROR_OUT_OF_MEMORY;
  if (r == CUDA_SUCCESS && !ops_copy(g->ops, &x->ops)) {
    free(x);
    r = CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (r == CUDA_SUCCESS) {
    x->next = g_gexecs;
    g_gexecs = x;
    *out = (CUgraphExec)(void *)x;
  }
  UNLOCK();
  return r;
}

static CUresult sim_cuGraphInstantiate(CUgraphExec *out, CUgraph h,
                                       unsigned long long flags) {
  ENTER_INIT(E_GraphInstantiate);
  (void)flags;
  return graph_instantiate(out, h);
}

static CUresult sim_cuGraphInstantiateWithFlags(CUgraphExec *out, CUgraph h,
                                                unsigned long long flags) {
  ENTER_INIT(E_GraphInstantiateWithFlags);
  (void)flags;
  return graph_instantiate(out, h);
}

/* Enqueues copies of the recorded ops on the stream (or records them, if
 * that stream is capturing). */
static CUresult sim_cuGraphLaunch(CUgraphExec h, CUstream hs) {
  ENTER_INIT(E_GraphLaunch);
  struct stream *s;
  struct op *ops = NULL;
  LOCK();
  struct gexec *x = gexec_lookup(h);
  CUresult r = x ? stream_resolve(hs, true, &s) : CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS) r = ctx_status(s->ctx);
  if (r == CUDA_SUCCESS && s->cap == CU_STREAM_CAPTURE_STATUS_INVALIDATED)
    r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  if (r == CUDA_SUCCESS && !ops_copy(x->ops, &ops)) r = CUDA_ERROR_OUT_OF_MEMORY;
  while (r == CUDA_SUCCESS && ops) {
    struct op *op = ops;
    ops = op->next;
    r = stream_submit(s, op);
  }
  op_list_free(ops);
  UNLOCK();
  return r;
}

static CUresult sim_cuGraphExecDestroy(CUgraphExec h) {
  ENTER_INIT(E_GraphExecDestroy);
  LOCK();
  struct gexec *x = gexec_lookup(h);
  if (x) {
    LIST_UNLINK(&g_gexecs, struct gexec, x);
    op_list_free(x->ops);
    free(x);
  }
  UNLOCK();
  return x ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ------------------------------------------------------------------------
 * Events
 * ------------------------------------------------------------------------ */

static struct event *event_lookup(CUevent h) {
  for (struct event *e = g_events; e; e = e->next)
    if ((CUevent)(void *)e == h) return e;
  return NULL;
}

static CUresult sim_cuEventCreate(CUevent *phEvent, unsigned int flags) {
  ENTER_INIT(E_EventCreate);
  (void)flags; /* timing, blocking sync and IPC flags make no difference here */
  if (!phEvent) return CUDA_ERROR_INVALID_VALUE;
  struct ctx *c;
  LOCK();
  CUresult r = need_current(&c);
  if (r == CUDA_SUCCESS) {
    struct event *e = calloc(1, sizeof *e);
    if (!e) {
      r = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
      e->ctx = c;
      e->next = g_events;
      g_events = e;
      *phEvent = (CUevent)(void *)e;
    }
  }
  UNLOCK();
  return r;
}

static CUresult sim_cuEventRecord(CUevent hEvent, CUstream h) {
  ENTER_INIT(E_EventRecord);
  struct op *op = op_new(OP_RECORD);
  struct token *t = calloc(1, sizeof *t);
  if (!op || !t) {
    free(op);
    free(t);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  struct stream *s;
  LOCK();
  struct event *e = event_lookup(hEvent);
  CUresult r = e ? stream_resolve(h, true, &s) : CUDA_ERROR_INVALID_HANDLE;
  if (r == CUDA_SUCCESS && s->ctx != e->ctx) r = CUDA_ERROR_INVALID_HANDLE;
  if (r == CUDA_SUCCESS) r = ctx_status(s->ctx);
  if (r == CUDA_SUCCESS && s->cap == CU_STREAM_CAPTURE_STATUS_INVALIDATED)
    r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  if (r == CUDA_SUCCESS && s->cap == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
    e->captured =
        true; /* becomes a graph node; the event itself is not recorded */
  } else if (r == CUDA_SUCCESS) {
    *t = (struct token){.refs = 2, .ctx = s->ctx, .gen = s->gen};
    token_unref(e->last);
    e->last = t;
    e->captured = false;
    op->u.tok = t;
    stream_append(s, op);
    op = NULL;
    t = NULL;
  }
  UNLOCK();
  free(op);
  free(t);
  return r;
}

static CUresult sim_cuEventQuery(CUevent hEvent) {
  ENTER_INIT(E_EventQuery);
  LOCK();
  struct event *e = event_lookup(hEvent);
  CUresult r = e ? ctx_status(e->ctx) : CUDA_ERROR_INVALID_HANDLE;
  if (r == CUDA_SUCCESS) r = capture_unsafe_call();
  if (r == CUDA_SUCCESS && e->captured) r = CUDA_ERROR_CAPTURED_EVENT;
  if (r == CUDA_SUCCESS && e->last && !e->last->done) r = CUDA_ERROR_NOT_READY;
  UNLOCK();
  return r;
}

static CUresult sim_cuEventSynchronize(CUevent hEvent) {
  ENTER_INIT(E_EventSynchronize);
  LOCK();
  struct event *e = event_lookup(hEvent);
  CUresult r = e ? ctx_status(e->ctx) : CUDA_ERROR_INVALID_HANDLE;
  if (r == CUDA_SUCCESS) r = capture_unsafe_call();
  if (r == CUDA_SUCCESS && e->captured) r = CUDA_ERROR_CAPTURED_EVENT;
  if (r == CUDA_SUCCESS && e->last) {
    struct token *t = e->last;
    struct ctx *c = e->ctx;
    t->refs++; /* the event may be destroyed while we wait */
    while (!t->done) {
      if (t->gen != c->gen) {
        r = CUDA_ERROR_CONTEXT_IS_DESTROYED;
        break;
      }
      if ((r = ctx_status(c)) != CUDA_SUCCESS) break;
      pthread_cond_wait(&g_changed, &g_mu);
    }
    token_unref(t);
  }
  UNLOCK();
  return r;
}

static CUresult sim_cuEventDestroy(CUevent hEvent) {
  ENTER_INIT(E_EventDestroy);
  LOCK();
  struct event *e = event_lookup(hEvent);
  CUresult r = e ? ctx_status(e->ctx) : CUDA_ERROR_INVALID_HANDLE;
  if (e) {
    LIST_UNLINK(&g_events, struct event, e);
    token_unref(e->last);
    free(e);
  }
  UNLOCK();
  return r;
}

/* The wait covers the record that was latest at the time of this call. */
static CUresult sim_cuStreamWaitEvent(CUstream h, CUevent hEvent,
                                      unsigned int flags) {
  ENTER_INIT(E_StreamWaitEvent);
  if (flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL)
    return CUDA_ERROR_INVALID_VALUE;
  struct op *op = op_new(OP_WAIT_EVENT);
  if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
  struct stream *s;
  LOCK();
  struct event *e = event_lookup(hEvent);
  CUresult r = e ? stream_resolve(h, true, &s) : CUDA_ERROR_INVALID_HANDLE;
  if (r == CUDA_SUCCESS) r = ctx_status(s->ctx);
  if (r == CUDA_SUCCESS && s->cap == CU_STREAM_CAPTURE_STATUS_NONE) {
    if (e->captured) {
      r = CUDA_ERROR_CAPTURED_EVENT;
    } else if (e->last && !e->last->done) {
      e->last->refs++;
      op->u.tok = e->last;
      stream_append(s, op);
      op = NULL;
    }
  } else if (r == CUDA_SUCCESS) {
    r = stream_submit(s, op); /* capture: recorded and dropped */
    op = NULL;
  }
  UNLOCK();
  free(op);
  return r;
}

/* ------------------------------------------------------------------------
 * Host functions and callbacks
 * ------------------------------------------------------------------------ */

static CUresult launch_host(CUstream h, CUhostFn fn, void *ud, bool v2,
                            unsigned mode) {
  if (!fn) return CUDA_ERROR_INVALID_VALUE;
  struct op *op = op_new(OP_HOSTFN);
  if (op) {
    op->u.host.fn = fn;
    op->u.host.ud = ud;
    op->u.host.v2 = v2;
    op->u.host.mode = mode;
  }
  return enqueue(h, op);
}

static CUresult sim_cuLaunchHostFunc(CUstream h, CUhostFn fn, void *ud) {
  ENTER_INIT(E_LaunchHostFunc);
  return launch_host(h, fn, ud, false, 0);
}

/* Both sync modes behave alike here; the mode is only counted. */
static CUresult sim_cuLaunchHostFunc_v2(CUstream h, CUhostFn fn, void *ud,
                                        unsigned int mode) {
  ENTER_INIT(E_LaunchHostFunc_v2);
  if (mode > SIMCUDA_HOST_TASK_SPINWAIT) return CUDA_ERROR_INVALID_VALUE;
  return launch_host(h, fn, ud, true, mode);
}

static CUresult sim_cuStreamAddCallback(CUstream h, CUstreamCallback cb,
                                        void *ud, unsigned int flags) {
  ENTER_INIT(E_StreamAddCallback);
  if (!cb || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  struct op *op = op_new(OP_CALLBACK);
  if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
  op->u.host.cb = cb;
  op->u.host.ud = ud;
  op->u.host.handle = h;
  struct stream *s;
  LOCK();
  CUresult r = stream_resolve(h, true, &s);
  if (r == CUDA_SUCCESS) r = ctx_status(s->ctx);
  if (r == CUDA_SUCCESS) r = stream_capture_refuse(s); /* not capturable */
  if (r == CUDA_SUCCESS) {
    stream_append(s, op);
    op = NULL;
  }
  UNLOCK();
  free(op);
  return r;
}

/* ------------------------------------------------------------------------
 * Stream memory operations
 * ------------------------------------------------------------------------ */

/* The v1 ABI (CUDA 8.0/9.0) needs CAN_USE_STREAM_MEM_OPS_V1, which reads 0
 * here as on an H200, so it answers CUDA_ERROR_NOT_SUPPORTED. */
static CUresult memop_v1(enum entry_id e) {
  ENTER_INIT(e);
  return CUDA_ERROR_NOT_SUPPORTED;
}

static CUresult sim_cuStreamWriteValue32_v1(CUstream s, CUdeviceptr a,
                                            cuuint32_t v, unsigned int f) {
  (void)s, (void)a, (void)v, (void)f;
  return memop_v1(E_StreamWriteValue32);
}

static CUresult sim_cuStreamWriteValue64_v1(CUstream s, CUdeviceptr a,
                                            cuuint64_t v, unsigned int f) {
  (void)s, (void)a, (void)v, (void)f;
  return memop_v1(E_StreamWriteValue64);
}

static CUresult sim_cuStreamWaitValue32_v1(CUstream s, CUdeviceptr a,
                                           cuuint32_t v, unsigned int f) {
  (void)s, (void)a, (void)v, (void)f;
  return memop_v1(E_StreamWaitValue32);
}

/* The address must be naturally aligned and inside memory the device can
 * reach: a cuMemAlloc or cuMemHostAlloc allocation. */
static CUresult memop_enqueue(CUstream h, enum op_kind kind, CUdeviceptr addr,
                              uint64_t value, unsigned flags, size_t size) {
  if (addr == 0 || (addr & (size - 1)) != 0) return CUDA_ERROR_INVALID_VALUE;
  struct op *op = op_new(kind);
  if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
  op->u.mem.addr = (uintptr_t)addr;
  op->u.mem.value = value;
  op->u.mem.flags = flags;
  struct stream *s;
  LOCK();
  CUresult r = stream_resolve(h, true, &s);
  if (r == CUDA_SUCCESS && !alloc_find((uintptr_t)addr, size))
    r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS)
    r = stream_submit(s, op);
  else
    op_release(op);
  UNLOCK();
  return r;
}

static CUresult sim_cuStreamWriteValue32(CUstream h, CUdeviceptr addr,
                                         cuuint32_t value, unsigned int flags) {
  ENTER_INIT(E_StreamWriteValue32);
  if (flags & ~(unsigned)CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER)
    return CUDA_ERROR_INVALID_VALUE;
  return memop_enqueue(h, OP_WRITE32, addr, value, flags, 4);
}

static CUresult sim_cuStreamWriteValue64(CUstream h, CUdeviceptr addr,
                                         cuuint64_t value, unsigned int flags) {
  ENTER_INIT(E_StreamWriteValue64);
  if (flags & ~(unsigned)CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER)
    return CUDA_ERROR_INVALID_VALUE;
  return memop_enqueue(h, OP_WRITE64, addr, value, flags, 8);
}

/* CU_STREAM_WAIT_VALUE_FLUSH is refused: CAN_FLUSH_REMOTE_WRITES reads 0. */
static CUresult sim_cuStreamWaitValue32(CUstream h, CUdeviceptr addr,
                                        cuuint32_t value, unsigned int flags) {
  ENTER_INIT(E_StreamWaitValue32);
  if (flags > CU_STREAM_WAIT_VALUE_NOR) return CUDA_ERROR_INVALID_VALUE;
  return memop_enqueue(h, OP_WAIT32, addr, value, flags, 4);
}

/* ------------------------------------------------------------------------
 * Memory
 * ------------------------------------------------------------------------ */

static CUresult sim_cuMemHostAlloc(void **pp, size_t bytesize,
                                   unsigned int flags) {
  ENTER_INIT(E_MemHostAlloc);
  if (!pp || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                          CU_MEMHOSTALLOC_WRITECOMBINED))
    return CUDA_ERROR_INVALID_VALUE;
  struct ctx *c;
  LOCK();
  CUresult r = need_current(&c);
  if (r == CUDA_SUCCESS) r = capture_unsafe_call();
  if (r == CUDA_SUCCESS) r = alloc_new(c, bytesize, 64, true, pp);
  UNLOCK();
  return r;
}

/* Frees even on a faulted context (then returns the sticky error), so tests
 * that exercise faults do not leak. */
/* The real cuMemFree and cuModuleUnload synchronise: they return once the
 * work already queued in the context is done, so that work never meets
 * freed memory. Waits for every stream of c to drain (a faulted context
 * runs nothing more). Under g_mu. */
static void ctx_drain(struct ctx *c) {
  for (;;) {
    bool busy = false;
    if (ctx_status(c) != CUDA_SUCCESS) return;
    for (struct stream *s = g_streams; s && !busy; s = s->next)
      if (s->ctx == c && s->gen == c->gen && !stream_idle(s)) busy = true;
    if (!busy) return;
    pthread_cond_wait(&g_changed, &g_mu);
  }
}

static CUresult free_alloc(uintptr_t base, enum alloc_kind kind) {
  LOCK();
  struct alloc *a = alloc_at(base, kind);
  CUresult r = a ? ctx_status(a->ctx) : CUDA_ERROR_INVALID_VALUE;
  CUresult cap = capture_unsafe_call();
  if (a && cap == CUDA_SUCCESS && kind == A_DEVICE) {
    ctx_drain(a->ctx);
    a = alloc_at(base, kind); /* the lock was dropped while waiting */
  }
  if (a && cap != CUDA_SUCCESS) {
    r = cap;
  } else if (a) {
    LIST_UNLINK(&g_allocs, struct alloc, a);
    alloc_release(a);
    free(a);
  }
  UNLOCK();
  if (!a && kind == A_REGISTERED) r = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  return r;
}

static CUresult sim_cuMemFreeHost(void *p) {
  ENTER_INIT(E_MemFreeHost);
  return free_alloc((uintptr_t)p, A_PINNED);
}

/* The range becomes a registered allocation of the current context, usable
 * by memory operations and copies like cuMemHostAlloc memory; the memory
 * stays the caller's (never freed here, also not when the context goes). */
static CUresult sim_cuMemHostRegister(void *p, size_t bytesize,
                                      unsigned int flags) {
  ENTER_INIT(E_MemHostRegister);
  if (!p || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~(unsigned)(CU_MEMHOSTREGISTER_PORTABLE |
                          CU_MEMHOSTREGISTER_DEVICEMAP |
                          CU_MEMHOSTREGISTER_READ_ONLY))
    return CUDA_ERROR_INVALID_VALUE;
  const uintptr_t base = (uintptr_t)p;
  if (base + bytesize < base) return CUDA_ERROR_INVALID_VALUE;
  struct ctx *c;
  LOCK();
  CUresult r = need_current(&c);
  if (r == CUDA_SUCCESS) r = capture_unsafe_call();
  for (const struct alloc *a = g_allocs; r == CUDA_SUCCESS && a; a = a->next)
    if (a->kind != A_DEVICE && base < a->base + a->size &&
        a->base < base + bytesize)
      r = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  struct alloc *a = NULL;
  if (r == CUDA_SUCCESS && !(a = malloc(sizeof *a)))
    r = CUDA_ERROR_OUT_OF_MEMORY;
  if (r == CUDA_SUCCESS) {
    *a = (struct alloc){.next = g_allocs,
                        .base = base,
                        .size = bytesize,
                        .ctx = c,
                        .kind = A_REGISTERED};
    g_allocs = a;
  }
  UNLOCK();
  return r;
}

/* CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED unless p starts a registration
 * (one that ended with its context is gone too). */
static CUresult sim_cuMemHostUnregister(void *p) {
  ENTER_INIT(E_MemHostUnregister);
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  return free_alloc((uintptr_t)p, A_REGISTERED);
}

static CUresult sim_cuMemHostGetDevicePointer(CUdeviceptr *pdptr, void *p,
                                              unsigned int flags) {
  ENTER_INIT(E_MemHostGetDevicePointer);
  if (!pdptr || !p || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  struct ctx *c;
  LOCK();
  CUresult r = need_current(&c);
  if (r == CUDA_SUCCESS) {
    const struct alloc *a = alloc_find((uintptr_t)p, 1);
    if (a && a->kind != A_DEVICE)
      *pdptr = (CUdeviceptr)(uintptr_t)p; /* unified addressing: same address */
    else
      r = CUDA_ERROR_INVALID_VALUE;
  }
  UNLOCK();
  return r;
}

static CUresult sim_cuMemAlloc(CUdeviceptr *dptr, size_t bytesize) {
  ENTER_INIT(E_MemAlloc);
  if (!dptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  struct ctx *c;
  void *p = NULL;
  LOCK();
  CUresult r = need_current(&c);
  if (r == CUDA_SUCCESS) r = capture_unsafe_call();
  if (r == CUDA_SUCCESS) r = alloc_new(c, bytesize, 256, false, &p);
  if (r == CUDA_SUCCESS) *dptr = (CUdeviceptr)(uintptr_t)p;
  UNLOCK();
  return r;
}

static CUresult sim_cuMemFree(CUdeviceptr dptr) {
  ENTER_INIT(E_MemFree);
  if (dptr == 0) return CUDA_SUCCESS;
  return free_alloc((uintptr_t)dptr, A_DEVICE);
}

/* Device-side pointers must lie in a registered allocation (the simulation's
 * device memory is host memory, so nothing else stops a stray pointer). */
static CUresult copy_enqueue(CUstream h, uintptr_t dst, bool dst_dev,
                             uintptr_t src, bool src_dev, size_t n) {
  if (n > 0 && (!dst || !src)) return CUDA_ERROR_INVALID_VALUE;
  struct op *op = op_new(OP_COPY);
  if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
  op->u.copy.dst = dst;
  op->u.copy.src = src;
  op->u.copy.n = n;
  op->u.copy.dst_dev = dst_dev;
  op->u.copy.src_dev = src_dev;
  struct stream *s;
  LOCK();
  CUresult r = stream_resolve(h, true, &s);
  if (r == CUDA_SUCCESS && n > 0 &&
      ((dst_dev && !alloc_find(dst, n)) || (src_dev && !alloc_find(src, n))))
    r = CUDA_ERROR_INVALID_VALUE;
  /* As the real driver does: a copy into pageable host memory (not
   * cuMemHostAlloc'd or registered) returns only once it is done, so the
   * calling thread waits for everything queued before it on the stream
   * (CUDA's "API synchronization behavior"; measured on the H200: a
   * copyFromDevice behind a 200 ms kernel held the caller 200 ms). */
  bool pageable = r == CUDA_SUCCESS && n > 0 && !dst_dev && !alloc_find(dst, n) &&
                  s->cap == CU_STREAM_CAPTURE_STATUS_NONE;
  if (r == CUDA_SUCCESS && n == 0) {
    r = ctx_status(s->ctx);
    op_release(op);
  } else if (r == CUDA_SUCCESS) {
    r = stream_submit(s, op);
  } else {
    op_release(op);
  }
  if (r == CUDA_SUCCESS && pageable) {
    s->refs++; /* the worker may exit and unlink it while we wait */
    while (s->gen == s->ctx->gen && ctx_status(s->ctx) == CUDA_SUCCESS &&
           !stream_idle(s))
      pthread_cond_wait(&g_changed, &g_mu);
    stream_unref(s);
  }
  UNLOCK();
  return r;
}

static CUresult sim_cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src,
                                      size_t n, CUstream h) {
  ENTER_INIT(E_MemcpyHtoDAsync);
  return copy_enqueue(h, (uintptr_t)dst, true, (uintptr_t)src, false, n);
}

static CUresult sim_cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t n,
                                      CUstream h) {
  ENTER_INIT(E_MemcpyDtoHAsync);
  return copy_enqueue(h, (uintptr_t)dst, false, (uintptr_t)src, true, n);
}

static CUresult sim_cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src,
                                      size_t n, CUstream h) {
  ENTER_INIT(E_MemcpyDtoDAsync);
  return copy_enqueue(h, (uintptr_t)dst, true, (uintptr_t)src, true, n);
}

static CUresult sim_cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dstCtx,
                                      CUdeviceptr src, CUcontext srcCtx,
                                      size_t n, CUstream h) {
  ENTER_INIT(E_MemcpyPeerAsync);
  LOCK();
  struct ctx *dc = ctx_lookup(dstCtx), *sc = ctx_lookup(srcCtx);
  if (dc && ctx_gone(dc)) dc = NULL;
  if (sc && ctx_gone(sc)) sc = NULL;
  CUresult r = !dc || !sc ? CUDA_ERROR_INVALID_CONTEXT : ctx_status(dc);
  if (r == CUDA_SUCCESS) r = ctx_status(sc);
  UNLOCK();
  if (r != CUDA_SUCCESS) return r;
  return copy_enqueue(h, (uintptr_t)dst, true, (uintptr_t)src, true, n);
}

static CUresult set_enqueue(CUstream h, enum op_kind kind, uintptr_t dst,
                            uint32_t value, size_t n) {
  size_t unit = kind == OP_SET32 ? 4 : 1;
  if (!dst || (dst & (unit - 1)) || n > SIZE_MAX / unit)
    return CUDA_ERROR_INVALID_VALUE;
  struct op *op = op_new(kind);
  if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
  op->u.set.dst = dst;
  op->u.set.value = value;
  op->u.set.n = n;
  struct stream *s;
  LOCK();
  CUresult r = stream_resolve(h, true, &s);
  if (r == CUDA_SUCCESS && n > 0 && !alloc_find(dst, n * unit))
    r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS)
    r = stream_submit(s, op);
  else
    op_release(op);
  UNLOCK();
  return r;
}

static CUresult sim_cuMemsetD8Async(CUdeviceptr dst, unsigned char uc, size_t n,
                                    CUstream h) {
  ENTER_INIT(E_MemsetD8Async);
  return set_enqueue(h, OP_SET8, (uintptr_t)dst, uc, n);
}

static CUresult sim_cuMemsetD32Async(CUdeviceptr dst, unsigned int ui, size_t n,
                                     CUstream h) {
  ENTER_INIT(E_MemsetD32Async);
  return set_enqueue(h, OP_SET32, (uintptr_t)dst, ui, n);
}

/* ------------------------------------------------------------------------
 * Modules and kernels
 * ------------------------------------------------------------------------ */

static enum kernel_kind kernel_kind_of(const char *name, size_t len) {
  static const struct {
    const char *name;
    enum kernel_kind kind;
  } known[] = {
      {"uvcuda_sleep_ns", K_SLEEP},
      {"uvcuda_fault", K_FAULT},
      {"uvcuda_add_u32", K_ADD_U32},
      {"uvcuda_checksum_u8", K_CHECKSUM},
  };
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
    if (strlen(known[i].name) == len && memcmp(known[i].name, name, len) == 0)
      return known[i].kind;
  return K_UNKNOWN;
}

static bool ptx_ident_char(char ch) {
  return isalnum((unsigned char)ch) || ch == '_' || ch == '$';
}

/* Records every ".entry NAME" of a PTX text image. Nothing is compiled; the
 * names select the modelled kernels at launch. */
static CUresult module_parse(struct module *m, const char *text) {
  if (!strstr(text, ".version") && !strstr(text, ".entry"))
    return CUDA_ERROR_INVALID_IMAGE;
  for (const char *p = text; (p = strstr(p, ".entry")) != NULL;) {
    const char *q = p + 6;
    if ((p != text && ptx_ident_char(p[-1])) || !isspace((unsigned char)*q)) {
      p = q;
      continue;
    }
    while (isspace((unsigned char)*q)) q++;
    const char *id = q;
    while (ptx_ident_char(*q)) q++;
    p = q;
    size_t len = (size_t)(q - id);
    if (len == 0) return CUDA_ERROR_INVALID_PTX;
    struct func *f = malloc(sizeof *f + len + 1);
    if (!f) return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(f->name, id, len);
    f->name[len] = '\0';
    f->mod = m;
    f->kind = kernel_kind_of(id, len);
    f->next = m->funcs;
    m->funcs = f;
  }
  return CUDA_SUCCESS;
}

static void module_free(struct module *m) {
  while (m->funcs) {
    struct func *f = m->funcs;
    m->funcs = f->next;
    free(f);
  }
  free(m);
}

static struct module *module_lookup(CUmodule h) {
  for (struct module *m = g_modules; m; m = m->next)
    if ((CUmodule)(void *)m == h) return m;
  return NULL;
}

static struct func *func_lookup(CUfunction h) {
  for (struct module *m = g_modules; m; m = m->next)
    for (struct func *f = m->funcs; f; f = f->next)
      if ((CUfunction)(void *)f == h) return f;
  return NULL;
}

static CUresult sim_cuModuleLoadData(CUmodule *module, const void *image) {
  ENTER_INIT(E_ModuleLoadData);
  if (!module || !image) return CUDA_ERROR_INVALID_VALUE;
  struct ctx *c;
  LOCK();
  CUresult r = need_current(&c);
  struct module *m = NULL;
  if (r == CUDA_SUCCESS) r = capture_unsafe_call();
  if (r == CUDA_SUCCESS) {
    m = calloc(1, sizeof *m);
    r = m ? module_parse(m, image) : CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (r == CUDA_SUCCESS) {
    m->ctx = c;
    m->next = g_modules;
    g_modules = m;
    *module = (CUmodule)(void *)m;
  } else if (m) {
    module_free(m);
  }
  UNLOCK();
  return r;
}

static CUresult sim_cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod,
                                        const char *name) {
  ENTER_INIT(E_ModuleGetFunction);
  if (!hfunc || !name) return CUDA_ERROR_INVALID_VALUE;
  LOCK();
  struct module *m = module_lookup(hmod);
  CUresult r = m ? ctx_status(m->ctx) : CUDA_ERROR_INVALID_HANDLE;
  if (r == CUDA_SUCCESS) {
    r = CUDA_ERROR_NOT_FOUND;
    for (struct func *f = m->funcs; f; f = f->next) {
      if (strcmp(f->name, name) == 0) {
        *hfunc = (CUfunction)(void *)f;
        r = CUDA_SUCCESS;
        break;
      }
    }
  }
  UNLOCK();
  return r;
}

static CUresult sim_cuModuleUnload(CUmodule hmod) {
  ENTER_INIT(E_ModuleUnload);
  LOCK();
  struct module *m = module_lookup(hmod);
  if (m) {
    ctx_drain(m->ctx);
    m = module_lookup(hmod); /* the lock was dropped while waiting */
  }
  CUresult r = m ? ctx_status(m->ctx) : CUDA_ERROR_INVALID_HANDLE;
  if (m) {
    LIST_UNLINK(&g_modules, struct module, m);
    module_free(m);
  }
  UNLOCK();
  return r;
}

static void param_read(void **params, int i, void *out, size_t n) {
  memcpy(out, params[i], n);
}

/* Builds the op for a modelled kernel from its parameters (copied now, as
 * the real driver copies them at launch). */
static CUresult kernel_op(enum kernel_kind kind, void **params,
                          struct op **out) {
  struct op *op = NULL;
  if (kind == K_UNKNOWN)
    return CUDA_ERROR_NOT_SUPPORTED; /* not a modelled kernel */
  bool needs_params = kind != K_FAULT;
  if (needs_params && !params) return CUDA_ERROR_INVALID_VALUE;
  for (int i = 0; needs_params && i < (kind == K_SLEEP ? 1 : 3); i++)
    if (!params[i]) return CUDA_ERROR_INVALID_VALUE;
  switch (kind) {
    case K_SLEEP:
      if ((op = op_new(OP_WORK))) param_read(params, 0, &op->ns, sizeof op->ns);
      break;
    case K_FAULT:
      if ((op = op_new(OP_FAULT))) op->u.code = CUDA_ERROR_ILLEGAL_ADDRESS;
      break;
    case K_ADD_U32:
      if ((op = op_new(OP_ADD_U32))) {
        CUdeviceptr data;
        param_read(params, 0, &data, sizeof data);
        param_read(params, 1, &op->u.add.n, sizeof op->u.add.n);
        param_read(params, 2, &op->u.add.value, sizeof op->u.add.value);
        op->u.add.data = (uintptr_t)data;
      }
      break;
    case K_CHECKSUM:
      if ((op = op_new(OP_CHECKSUM))) {
        CUdeviceptr in, outp;
        param_read(params, 0, &in, sizeof in);
        param_read(params, 1, &op->u.sum.n, sizeof op->u.sum.n);
        param_read(params, 2, &outp, sizeof outp);
        op->u.sum.in = (uintptr_t)in;
        op->u.sum.out = (uintptr_t)outp;
      }
      break;
    default:
      return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
  *out = op;
  return CUDA_SUCCESS;
}

static CUresult sim_cuLaunchKernel(CUfunction f, unsigned int gx,
                                   unsigned int gy, unsigned int gz,
                                   unsigned int bx, unsigned int by,
                                   unsigned int bz, unsigned int sharedMemBytes,
                                   CUstream h, void **params, void **extra) {
  ENTER_INIT(E_LaunchKernel);
  (void)sharedMemBytes;
  if (!gx || !gy || !gz || !bx || !by || !bz) return CUDA_ERROR_INVALID_VALUE;
  if ((uint64_t)bx * by * bz > 1024 || bz > 64 || gx > 2147483647u ||
      gy > 65535 || gz > 65535)
    return CUDA_ERROR_INVALID_VALUE;
  if (params && extra) return CUDA_ERROR_INVALID_VALUE;
  if (extra)
    return CUDA_ERROR_NOT_SUPPORTED; /* the simulation reads kernelParams only
                                      */

  struct stream *s;
  struct op *op = NULL;
  LOCK();
  struct func *fn = func_lookup(f);
  CUresult r = fn ? stream_resolve(h, true, &s) : CUDA_ERROR_INVALID_HANDLE;
  if (r == CUDA_SUCCESS && fn->mod->ctx != s->ctx)
    r = CUDA_ERROR_INVALID_HANDLE;
  if (r == CUDA_SUCCESS) r = ctx_status(s->ctx);
  if (r == CUDA_SUCCESS) r = kernel_op(fn->kind, params, &op);
  if (r == CUDA_SUCCESS) r = stream_submit(s, op);
  UNLOCK();
  return r;
}

/* ------------------------------------------------------------------------
 * Peer access (under g_mu)
 * ------------------------------------------------------------------------ */

/* Every pair of distinct simulated devices can access each other's memory
 * (an NVLink machine). Enabled access is kept per pair of context
 * incarnations (cuCtxGetId), so it ends with either context (a release, a
 * reset, cuCtxDestroy) as on the real driver. Access is not enforced:
 * copies and kernels reach any allocation, enabled or not. */
struct peer_pair {
  unsigned long long from, to; /* cuCtxGetId of the accessing and the peer context */
};

static struct peer_pair *g_peers;
static size_t g_npeers, g_peers_cap;

static CUresult sim_cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev,
                                          CUdevice peerDev) {
  ENTER_INIT(E_DeviceCanAccessPeer);
  if (!canAccessPeer) return CUDA_ERROR_INVALID_VALUE;
  if (!dev_valid(dev) || !dev_valid(peerDev)) return CUDA_ERROR_INVALID_DEVICE;
  *canAccessPeer = dev != peerDev;
  return CUDA_SUCCESS;
}

static CUresult sim_cuCtxEnablePeerAccess(CUcontext peerContext,
                                          unsigned int Flags) {
  ENTER_INIT(E_CtxEnablePeerAccess);
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  struct ctx *c = current_ctx();
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  LOCK();
  struct ctx *p = ctx_lookup(peerContext);
  CUresult r = CUDA_SUCCESS;
  if (!p || ctx_gone(p) || p == c) r = CUDA_ERROR_INVALID_CONTEXT;
  if (r == CUDA_SUCCESS) r = ctx_status(c);
  if (r == CUDA_SUCCESS) r = ctx_status(p);
  if (r == CUDA_SUCCESS && p->dev == c->dev) r = CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
  for (size_t i = 0; r == CUDA_SUCCESS && i < g_npeers; i++)
    if (g_peers[i].from == c->id && g_peers[i].to == p->id)
      r = CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
  if (r == CUDA_SUCCESS && g_npeers == g_peers_cap) {
    size_t cap = g_peers_cap ? 2 * g_peers_cap : 16;
    struct peer_pair *n = realloc(g_peers, cap * sizeof(*n));
    if (n) {
      g_peers = n;
      g_peers_cap = cap;
    } else {
      r = CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  if (r == CUDA_SUCCESS) g_peers[g_npeers++] = (struct peer_pair){c->id, p->id};
  UNLOCK();
  return r;
}

/* ------------------------------------------------------------------------
 * cuGetProcAddress and configuration
 * ------------------------------------------------------------------------ */

struct proc {
  enum entry_id e;
  int version; /* first CUDA version with this ABI */
  void *fn;
};

static struct proc g_procs[128];
static int g_nprocs;

static void proc_add(enum entry_id e, int version, void *fn) {
  if (g_nprocs < (int)(sizeof g_procs / sizeof g_procs[0]))
    g_procs[g_nprocs++] = (struct proc){e, version, fn};
  else
    fprintf(stderr, "simcuda: entry table full\n");
}

/* Compile-time check that each implementation has its PFN_* prototype. */
#define REG(e, ver, pfn_type, impl)                                  \
  do {                                                               \
    _Static_assert(                                                  \
        __builtin_types_compatible_p(pfn_type, __typeof__(&(impl))), \
        #impl " does not match " #pfn_type);                         \
    pfn_type typed_ = (impl);                                        \
    proc_add(E_##e, ver, (void *)typed_);                            \
  } while (0)

static CUresult sim_cuGetProcAddress_v1(const char *symbol, void **pfn,
                                        int cudaVersion, cuuint64_t flags);
SIM_EXPORT CUresult CUDAAPI cuGetProcAddress_v2(
    const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
    CUdriverProcAddressQueryResult *symbolStatus);

/* cudaTypedefs.h keeps this one behind __CUDA_API_VERSION_INTERNAL. */
typedef CUresult(CUDAAPI *sim_PFN_cuStreamBeginCapture_v10000)(
    CUstream hStream);

static void register_procs(void) {
  REG(GetProcAddress, 11030, PFN_cuGetProcAddress_v11030,
      sim_cuGetProcAddress_v1);
  REG(GetProcAddress, 12000, PFN_cuGetProcAddress_v12000, cuGetProcAddress_v2);
  REG(Init, 2000, PFN_cuInit_v2000, sim_cuInit);
  REG(DriverGetVersion, 2020, PFN_cuDriverGetVersion_v2020,
      sim_cuDriverGetVersion);
  REG(GetErrorName, 6000, PFN_cuGetErrorName_v6000, sim_cuGetErrorName);
  REG(GetErrorString, 6000, PFN_cuGetErrorString_v6000, sim_cuGetErrorString);
  REG(DeviceGet, 2000, PFN_cuDeviceGet_v2000, sim_cuDeviceGet);
  REG(DeviceGetCount, 2000, PFN_cuDeviceGetCount_v2000, sim_cuDeviceGetCount);
  REG(DeviceGetAttribute, 2000, PFN_cuDeviceGetAttribute_v2000,
      sim_cuDeviceGetAttribute);
  REG(DeviceGetName, 2000, PFN_cuDeviceGetName_v2000, sim_cuDeviceGetName);
  REG(DevicePrimaryCtxRetain, 7000, PFN_cuDevicePrimaryCtxRetain_v7000,
      sim_cuDevicePrimaryCtxRetain);
  REG(DevicePrimaryCtxRelease, 7000, PFN_cuDevicePrimaryCtxRelease_v11000,
      sim_cuDevicePrimaryCtxRelease);
  REG(DevicePrimaryCtxRelease, 11000, PFN_cuDevicePrimaryCtxRelease_v11000,
      sim_cuDevicePrimaryCtxRelease);
  REG(DevicePrimaryCtxReset, 11000, PFN_cuDevicePrimaryCtxReset_v11000,
      sim_cuDevicePrimaryCtxReset);
  REG(CtxCreate, 3020, PFN_cuCtxCreate_v3020, sim_cuCtxCreate_v3020);
  REG(CtxCreate, 12050, PFN_cuCtxCreate_v12050, sim_cuCtxCreate_v12050);
  REG(CtxDestroy, 4000, PFN_cuCtxDestroy_v4000, sim_cuCtxDestroy);
  REG(CtxGetId, 12000, PFN_cuCtxGetId_v12000, sim_cuCtxGetId);
  REG(CtxGetCurrent, 4000, PFN_cuCtxGetCurrent_v4000, sim_cuCtxGetCurrent);
  REG(CtxSetCurrent, 4000, PFN_cuCtxSetCurrent_v4000, sim_cuCtxSetCurrent);
  REG(CtxPushCurrent, 4000, PFN_cuCtxPushCurrent_v4000, sim_cuCtxPushCurrent);
  REG(CtxPopCurrent, 4000, PFN_cuCtxPopCurrent_v4000, sim_cuCtxPopCurrent);
  REG(CtxGetDevice, 2000, PFN_cuCtxGetDevice_v2000, sim_cuCtxGetDevice);
  REG(CtxGetDevice, 13000, PFN_cuCtxGetDevice_v13000,
      sim_cuCtxGetDevice_v13000);
  REG(CtxSynchronize, 2000, PFN_cuCtxSynchronize_v2000, sim_cuCtxSynchronize);
  REG(CtxSynchronize, 13000, PFN_cuCtxSynchronize_v13000,
      sim_cuCtxSynchronize_v13000);
  REG(StreamGetCtx, 9020, PFN_cuStreamGetCtx_v9020, sim_cuStreamGetCtx);
  REG(StreamCreate, 2000, PFN_cuStreamCreate_v2000, sim_cuStreamCreate);
  REG(StreamDestroy, 4000, PFN_cuStreamDestroy_v4000, sim_cuStreamDestroy);
  REG(StreamQuery, 2000, PFN_cuStreamQuery_v2000, sim_cuStreamQuery);
  REG(StreamSynchronize, 2000, PFN_cuStreamSynchronize_v2000,
      sim_cuStreamSynchronize);
  REG(StreamWaitEvent, 3020, PFN_cuStreamWaitEvent_v3020,
      sim_cuStreamWaitEvent);
  REG(StreamGetId, 12000, PFN_cuStreamGetId_v12000, sim_cuStreamGetId);
  REG(StreamIsCapturing, 10000, PFN_cuStreamIsCapturing_v10000,
      sim_cuStreamIsCapturing);
  REG(StreamBeginCapture, 10000, sim_PFN_cuStreamBeginCapture_v10000,
      sim_cuStreamBeginCapture_v10000);
  REG(StreamBeginCapture, 10010, PFN_cuStreamBeginCapture_v10010,
      sim_cuStreamBeginCapture);
  REG(StreamEndCapture, 10000, PFN_cuStreamEndCapture_v10000,
      sim_cuStreamEndCapture);
  REG(ThreadExchangeStreamCaptureMode, 10010,
      PFN_cuThreadExchangeStreamCaptureMode_v10010,
      sim_cuThreadExchangeStreamCaptureMode);
  REG(GraphDestroy, 10000, PFN_cuGraphDestroy_v10000, sim_cuGraphDestroy);
  REG(GraphInstantiate, 12000, PFN_cuGraphInstantiateWithFlags_v11040,
      sim_cuGraphInstantiate);
  REG(GraphInstantiateWithFlags, 11040, PFN_cuGraphInstantiateWithFlags_v11040,
      sim_cuGraphInstantiateWithFlags);
  REG(GraphLaunch, 10000, PFN_cuGraphLaunch_v10000, sim_cuGraphLaunch);
  REG(GraphExecDestroy, 10000, PFN_cuGraphExecDestroy_v10000,
      sim_cuGraphExecDestroy);
  REG(EventCreate, 2000, PFN_cuEventCreate_v2000, sim_cuEventCreate);
  REG(EventRecord, 2000, PFN_cuEventRecord_v2000, sim_cuEventRecord);
  REG(EventQuery, 2000, PFN_cuEventQuery_v2000, sim_cuEventQuery);
  REG(EventSynchronize, 2000, PFN_cuEventSynchronize_v2000,
      sim_cuEventSynchronize);
  REG(EventDestroy, 4000, PFN_cuEventDestroy_v4000, sim_cuEventDestroy);
  REG(LaunchHostFunc, 10000, PFN_cuLaunchHostFunc_v10000, sim_cuLaunchHostFunc);
  REG(LaunchHostFunc_v2, 13020, simcuda_pfn_cuLaunchHostFunc_v2,
      sim_cuLaunchHostFunc_v2);
  REG(StreamAddCallback, 5000, PFN_cuStreamAddCallback_v5000,
      sim_cuStreamAddCallback);
  REG(StreamWriteValue32, 8000, PFN_cuStreamWriteValue32_v8000,
      sim_cuStreamWriteValue32_v1);
  REG(StreamWriteValue32, 11070, PFN_cuStreamWriteValue32_v11070,
      sim_cuStreamWriteValue32);
  REG(StreamWriteValue64, 9000, PFN_cuStreamWriteValue64_v9000,
      sim_cuStreamWriteValue64_v1);
  REG(StreamWriteValue64, 11070, PFN_cuStreamWriteValue64_v11070,
      sim_cuStreamWriteValue64);
  REG(StreamWaitValue32, 8000, PFN_cuStreamWaitValue32_v8000,
      sim_cuStreamWaitValue32_v1);
  REG(StreamWaitValue32, 11070, PFN_cuStreamWaitValue32_v11070,
      sim_cuStreamWaitValue32);
  REG(MemHostAlloc, 2020, PFN_cuMemHostAlloc_v2020, sim_cuMemHostAlloc);
  REG(MemFreeHost, 2000, PFN_cuMemFreeHost_v2000, sim_cuMemFreeHost);
  REG(MemHostGetDevicePointer, 3020, PFN_cuMemHostGetDevicePointer_v3020,
      sim_cuMemHostGetDevicePointer);
  REG(MemHostRegister, 6050, PFN_cuMemHostRegister_v6050,
      sim_cuMemHostRegister);
  REG(MemHostUnregister, 4000, PFN_cuMemHostUnregister_v4000,
      sim_cuMemHostUnregister);
  REG(MemAlloc, 3020, PFN_cuMemAlloc_v3020, sim_cuMemAlloc);
  REG(MemFree, 3020, PFN_cuMemFree_v3020, sim_cuMemFree);
  REG(MemcpyHtoDAsync, 3020, PFN_cuMemcpyHtoDAsync_v3020,
      sim_cuMemcpyHtoDAsync);
  REG(MemcpyDtoHAsync, 3020, PFN_cuMemcpyDtoHAsync_v3020,
      sim_cuMemcpyDtoHAsync);
  REG(MemcpyDtoDAsync, 3020, PFN_cuMemcpyDtoDAsync_v3020,
      sim_cuMemcpyDtoDAsync);
  REG(MemcpyPeerAsync, 4000, PFN_cuMemcpyPeerAsync_v4000,
      sim_cuMemcpyPeerAsync);
  REG(MemsetD8Async, 3020, PFN_cuMemsetD8Async_v3020, sim_cuMemsetD8Async);
  REG(MemsetD32Async, 3020, PFN_cuMemsetD32Async_v3020, sim_cuMemsetD32Async);
  REG(ModuleLoadData, 2000, PFN_cuModuleLoadData_v2000, sim_cuModuleLoadData);
  REG(ModuleGetFunction, 2000, PFN_cuModuleGetFunction_v2000,
      sim_cuModuleGetFunction);
  REG(ModuleUnload, 2000, PFN_cuModuleUnload_v2000, sim_cuModuleUnload);
  REG(LaunchKernel, 4000, PFN_cuLaunchKernel_v4000, sim_cuLaunchKernel);
  REG(DeviceCanAccessPeer, 4000, PFN_cuDeviceCanAccessPeer_v4000,
      sim_cuDeviceCanAccessPeer);
  REG(CtxEnablePeerAccess, 4000, PFN_cuCtxEnablePeerAccess_v4000,
      sim_cuCtxEnablePeerAccess);
}

/* "CUDA_ERROR_NOT_SUPPORTED" or a number (decimal or 0x...). */
static bool parse_result(const char *text, CUresult *out) {
  for (size_t i = 0; i < sizeof g_errors / sizeof g_errors[0]; i++) {
    if (strcmp(g_errors[i].name, text) == 0) {
      *out = g_errors[i].code;
      return true;
    }
  }
  char *end;
  errno = 0;
  long v = strtol(text, &end, 0);
  if (errno || end == text || *end || v < 0 || v > 0x7fffffff) return false;
  *out = (CUresult)v;
  return true;
}

static char *trim(char *s) {
  while (isspace((unsigned char)*s)) s++;
  char *e = s + strlen(s);
  while (e > s && isspace((unsigned char)e[-1])) *--e = '\0';
  return s;
}

/* SIMCUDA_FAIL="cuInit=100,cuStreamWriteValue64=801:2,cuMemAlloc=2@3"
 * (":count" optional, default: always; "@nth": only the nth call, once).
 * SIMCUDA_HIDE="cuLaunchHostFunc,cuStreamIsCapturing". */
static void parse_env_list(const char *var, bool is_fail) {
  const char *val = getenv(var);
  if (!val || !*val) return;
  char *copy = strdup(val);
  if (!copy) return;
  char *save = NULL;
  for (char *item = strtok_r(copy, ",", &save); item;
       item = strtok_r(NULL, ",", &save)) {
    char *name = trim(item), *code = NULL, *count = NULL, *nth = NULL;
    if (!*name) continue;
    if (is_fail) {
      code = strchr(name, '=');
      if (code) {
        *code++ = '\0';
        count = strchr(code, ':');
        if (count) *count++ = '\0';
        nth = strchr(count ? count : code, '@');
        if (nth) *nth++ = '\0';
      }
      name = trim(name);
    }
    int e = entry_find(name);
    if (e < 0) {
      fprintf(stderr, "simcuda: %s: unknown entry point '%s' ignored\n", var,
              name);
      continue;
    }
    if (!is_fail) {
      g_entry[e].hidden = true;
      continue;
    }
    CUresult r;
    char *end = NULL, *nend = NULL;
    long n = count ? strtol(trim(count), &end, 10) : -1;
    long k = nth ? strtol(trim(nth), &nend, 10) : 1;
    if (!code || !parse_result(trim(code), &r) || r == CUDA_SUCCESS ||
        (count && (*end || n == 0)) || (nth && (*nend || k < 1 || count))) {
      fprintf(stderr, "simcuda: %s: bad item for '%s' ignored\n", var, name);
      continue;
    }
    set_failure(e, r, nth ? 1 : n < 0 ? -1 : (int)n, (int)k - 1);
  }
  free(copy);
}

static int env_int(const char *var, int dflt, int lo, int hi) {
  const char *val = getenv(var);
  if (!val || !*val) return dflt;
  char *end;
  long v = strtol(val, &end, 10);
  if (*end || v < lo || v > hi) {
    fprintf(stderr, "simcuda: %s=%s out of range, using %d\n", var, val, dflt);
    return dflt;
  }
  return (int)v;
}

/* One of `words` (index), or dflt with a warning. */
static int env_word(const char *var, const char *const *words, int n, int dflt) {
  const char *val = getenv(var);
  if (!val || !*val) return dflt;
  for (int i = 0; i < n; i++)
    if (strcmp(val, words[i]) == 0) return i;
  fprintf(stderr, "simcuda: %s=%s not understood, using %s\n", var, val,
          words[dflt]);
  return dflt;
}

/* fork(): the child gets g_mu unlocked (no other thread held it at the
 * fork), but none of the simulation's threads: its streams make no
 * progress there. A child may still use what needs no worker, e.g. to
 * watch a destroyed handle abort. */
static void fork_prepare(void) { LOCK(); }
static void fork_done(void) { UNLOCK(); }

static void load_config(void) {
  static const char *const handles[] = {"error", "abort"};
  pthread_atfork(fork_prepare, fork_done, fork_done);
  static const char *const scopes[] = {"context", "device"};
  LOCK();
  g_driver_version = env_int("SIMCUDA_DRIVER_VERSION",
                             SIM_DEFAULT_DRIVER_VERSION, 1000, 99990);
  g_ndev = env_int("SIMCUDA_DEVICES", 1, 0, SIM_MAX_DEVICES);
  g_destroyed_abort = env_word("SIMCUDA_DESTROYED_HANDLES", handles, 2, 1);
  g_fault_scope_device = env_word("SIMCUDA_FAULT_SCOPE", scopes, 2, 0);
  g_busy_hide_fault = env_int("SIMCUDA_BUSY_STREAMS_HIDE_FAULT", 0, 0, 1);
  for (int i = 0; i < SIM_MAX_DEVICES; i++) {
    struct ctx *c = ctx_alloc();
    if (!c) abort(); /* out of memory at start-up */
    c->dev = i;
    c->primary = true;
    ctx_incarnate(c);
  }
  register_procs();
  parse_env_list("SIMCUDA_FAIL", true);
  parse_env_list("SIMCUDA_HIDE", false);
  UNLOCK();
}

static void ensure_config(void) { pthread_once(&g_once, load_config); }

/* Matches the real driver: the highest ABI <= cudaVersion; a name that the
 * simulated driver version does not know is "not found"; a name known only
 * at higher ABIs is "version not sufficient"; a request newer than the
 * driver is CUDA_ERROR_INVALID_VALUE with *symbolStatus untouched. */
SIM_EXPORT CUresult CUDAAPI cuGetProcAddress_v2(
    const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
    CUdriverProcAddressQueryResult *symbolStatus) {
  ENTER(E_GetProcAddress);
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM |
                            CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
    return CUDA_ERROR_INVALID_VALUE;
  const int drv = ALOAD(&g_driver_version);
  if (cudaVersion > drv) return CUDA_ERROR_INVALID_VALUE;

  /* The simulation's own name (simcuda.h, support/simprobe.h): not a
   * driver entry point, so no count, failure or hiding of its own. */
  if (strcmp(symbol, SUPPORT_SIM_PROBE_NAME) == 0) {
    int (*probe)(void) = simcuda_is_simulation;
    memcpy(pfn, &probe, sizeof(probe));
    if (symbolStatus) *symbolStatus = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
  }
  const int e = entry_find(symbol);
  const struct proc *best = NULL;
  bool known = false;
  for (int i = 0; e >= 0 && i < g_nprocs; i++) {
    const struct proc *p = &g_procs[i];
    if ((int)p->e != e || p->version > drv) continue;
    known = true;
    if (p->version <= cudaVersion && (!best || p->version > best->version))
      best = p;
  }
  if (known) {
    LOCK();
    if (g_entry[e].hidden) known = false;
    UNLOCK();
  }
  CUdriverProcAddressQueryResult status =
      !known  ? CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND
      : !best ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
              : CU_GET_PROC_ADDRESS_SUCCESS;
  *pfn = status == CU_GET_PROC_ADDRESS_SUCCESS ? best->fn : NULL;
  if (symbolStatus) *symbolStatus = status;
  return CUDA_SUCCESS;
}

/* The CUDA 11.3 ABI has no status out-parameter and reports a miss as
 * CUDA_ERROR_NOT_FOUND. */
static CUresult sim_cuGetProcAddress_v1(const char *symbol, void **pfn,
                                        int cudaVersion, cuuint64_t flags) {
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  CUresult r = cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, &status);
  if (r == CUDA_SUCCESS && status != CU_GET_PROC_ADDRESS_SUCCESS)
    r = CUDA_ERROR_NOT_FOUND;
  return r;
}

/* ------------------------------------------------------------------------
 * Test-control API
 * ------------------------------------------------------------------------ */

SIMCUDA_API int simcuda_is_simulation(void) { return 1; }

SIMCUDA_API void simcuda_set_driver_version(int version) {
  ensure_config();
  ASTORE(&g_driver_version, version);
}

SIMCUDA_API void simcuda_set_device_count(int n) {
  ensure_config();
  if (n < 0) n = 0;
  if (n > SIM_MAX_DEVICES) n = SIM_MAX_DEVICES;
  LOCK();
  if (g_initialized)
    fprintf(stderr, "simcuda: simcuda_set_device_count after cuInit ignored\n");
  else
    ASTORE(&g_ndev, n);
  UNLOCK();
}

static int control_entry(const char *entry, const char *what) {
  ensure_config();
  int e = entry_find(entry);
  if (e < 0)
    fprintf(stderr, "simcuda: %s: unknown entry point '%s'\n", what,
            entry ? entry : "(null)");
  return e;
}

SIMCUDA_API void simcuda_fail(const char *entry, CUresult result, int count) {
  int e = control_entry(entry, "simcuda_fail");
  if (e < 0) return;
  LOCK();
  if (count == 0 || result == CUDA_SUCCESS)
    set_failure(e, CUDA_SUCCESS, 0, 0);
  else
    set_failure(e, result, count < 0 ? -1 : count, 0);
  UNLOCK();
}

SIMCUDA_API void simcuda_fail_nth(const char *entry, CUresult result,
                                  int nth) {
  int e = control_entry(entry, "simcuda_fail_nth");
  if (e < 0 || nth < 1 || result == CUDA_SUCCESS) return;
  LOCK();
  set_failure(e, result, 1, nth - 1);
  UNLOCK();
}

SIMCUDA_API void simcuda_hold_calls(const char *entry, int on) {
  int e = control_entry(entry, "simcuda_hold_calls");
  if (e < 0) return;
  LOCK();
  g_entry[e].held = on != 0;
  g_entry[e].holder = pthread_self();
  pthread_cond_broadcast(&g_changed);
  UNLOCK();
}

SIMCUDA_API uint64_t simcuda_held_calls(const char *entry) {
  int e = control_entry(entry, "simcuda_held_calls");
  uint64_t n;
  if (e < 0) return 0;
  LOCK();
  n = g_entry[e].waiting;
  UNLOCK();
  return n;
}

SIMCUDA_API void simcuda_hide(const char *entry) {
  int e = control_entry(entry, "simcuda_hide");
  if (e < 0) return;
  LOCK();
  g_entry[e].hidden = true;
  UNLOCK();
}

SIMCUDA_API void simcuda_clear_failures(void) {
  ensure_config();
  LOCK();
  for (int i = 0; i < E_COUNT; i++) {
    set_failure(i, CUDA_SUCCESS, 0, 0);
    g_entry[i].hidden = false;
  }
  UNLOCK();
}

SIMCUDA_API int simcuda_set_destroyed_handles(int mode) {
  ensure_config();
  LOCK();
  int old = g_destroyed_abort ? SIMCUDA_DESTROYED_HANDLES_ABORT
                              : SIMCUDA_DESTROYED_HANDLES_ERROR;
  g_destroyed_abort = mode == SIMCUDA_DESTROYED_HANDLES_ABORT;
  UNLOCK();
  return old;
}

SIMCUDA_API int simcuda_set_fault_scope(int scope) {
  ensure_config();
  LOCK();
  int old = g_fault_scope_device ? SIMCUDA_FAULT_SCOPE_DEVICE
                                 : SIMCUDA_FAULT_SCOPE_CONTEXT;
  g_fault_scope_device = scope == SIMCUDA_FAULT_SCOPE_DEVICE;
  UNLOCK();
  return old;
}

SIMCUDA_API int simcuda_fault_scope(void) {
  ensure_config();
  LOCK();
  int scope = g_fault_scope_device ? SIMCUDA_FAULT_SCOPE_DEVICE
                                   : SIMCUDA_FAULT_SCOPE_CONTEXT;
  UNLOCK();
  return scope;
}

SIMCUDA_API int simcuda_set_busy_streams_hide_fault(int on) {
  ensure_config();
  LOCK();
  int old = g_busy_hide_fault;
  g_busy_hide_fault = on != 0;
  UNLOCK();
  return old;
}

SIMCUDA_API int simcuda_busy_streams_hide_fault(void) {
  ensure_config();
  LOCK();
  int on = g_busy_hide_fault;
  UNLOCK();
  return on;
}

SIMCUDA_API CUresult simcuda_enqueue_work(CUstream s, uint64_t ns) {
  ensure_config();
  t_entry = -1;
  if (!ALOAD(&g_initialized)) return CUDA_ERROR_NOT_INITIALIZED;
  struct op *op = op_new(OP_WORK);
  if (op) op->ns = ns;
  return enqueue(s, op);
}

SIMCUDA_API CUresult simcuda_enqueue_fault(CUstream s, CUresult code) {
  ensure_config();
  t_entry = -1;
  if (!ALOAD(&g_initialized)) return CUDA_ERROR_NOT_INITIALIZED;
  if (code == CUDA_SUCCESS) return CUDA_ERROR_INVALID_VALUE;
  struct op *op = op_new(OP_FAULT);
  if (op) op->u.code = code;
  return enqueue(s, op);
}

SIMCUDA_API uint64_t simcuda_hostfn_count(void) {
  return ALOAD(&g_hostfn_runs);
}

SIMCUDA_API uint64_t simcuda_hostfn_v2_count(int sync_mode) {
  if (sync_mode < 0 || sync_mode > SIMCUDA_HOST_TASK_SPINWAIT) return 0;
  return ALOAD(&g_hostfn_v2_runs[sync_mode]);
}

SIMCUDA_API uint64_t simcuda_memop_count(void) {
  return ALOAD(&g_memop_writes);
}

SIMCUDA_API uint64_t simcuda_call_count(const char *entry) {
  ensure_config();
  int e = entry_find(entry);
  if (e < 0) return 0;
  LOCK();
  uint64_t n = g_entry[e].calls;
  UNLOCK();
  return n;
}

SIMCUDA_API int simcuda_live_streams(void) {
  LOCK();
  int n = g_live_user_streams;
  UNLOCK();
  return n;
}

SIMCUDA_API void simcuda_quiesce(void) {
  LOCK();
  for (;;) {
    bool idle = true;
    for (struct stream *s = g_streams; s && idle; s = s->next)
      if (!stream_idle(s) || s->destroyed) idle = false;
    if (idle) break;
    pthread_cond_wait(&g_changed, &g_mu);
  }
  UNLOCK();
}
