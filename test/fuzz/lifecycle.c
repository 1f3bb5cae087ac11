/* Lifecycle fuzzer: random sequences of loop-context init/close (switching
 * strategies), future init/start/close/restart, ops that fail, stream work
 * of random length, sticky faults (on a second simulated device, and in
 * contexts made with cuCtxCreate), driver calls of the library refused
 * (UVCUDA_FUZZ_SKIP=refuse leaves them out), streams destroyed once their futures
 * have called back and made again (the simulation hands the handle back,
 * often to another context or another fuzzer's thread), and stream
 * captures begun on streams with pending futures, across 1-4 loops on
 * their own threads, each loop using 8 contexts, against the simulated
 * driver.
 *
 * Invariants, checked after every step: a started future gets exactly one
 * callback; no callback while not started; no callback after close_cb;
 * close_cb exactly once per close; a capture ends with CUDA_SUCCESS (the
 * library never disturbed it); at the end every future and context is
 * closed and (under ASan/valgrind) nothing leaks.
 *
 * Captures: RELAXED ones anywhere (only querying the capturing stream
 * itself may break them); THREAD_LOCAL ones while this thread starts no
 * futures and opens or closes no loop context (the library's own calls
 * around the spin, the poll and the fault probes must leave them alone).
 * GLOBAL ones are left to test-contract: any thread's allocation breaks
 * them, so their survival depends on what the other fuzzers do.
 *
 * The core is shared by the cmocka run (test/test-fuzz.c) and the libFuzzer
 * target (test/fuzz/libfuzzer.c). */
#include "lifecycle.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "simcuda.h"

#define NF 24 /* futures per loop */
#define NS 4  /* streams per device's primary context */
#define NC 6  /* contexts made with cuCtxCreate, one stream each */
#define NST (2 * NS + NC)

/* Device 1's context dies (sticky) at the first fault, for the process. */
static int dev1_dead;

static void on_tick(uv_timer_t *t) { (void)t; }

typedef struct {
  uvcuda_future_t f;
  int inited;     /* init called, close_cb not yet run */
  int closing;    /* close called */
  int started;    /* start returned 0, callback not yet run */
  int restart;    /* the callback starts it again */
  int si;         /* stream of the current start */
  uint64_t cbs, starts, closes, close_cbs;
  struct fz *fz;
} slot_t;

/* 0..NS-1: device 0's primary context; NS..2NS-1: device 1's; then one per
 * made context. */
typedef struct {
  CUstream s;
  CUcontext ctx;
  int dev1;     /* on device 1 (its context may die) */
  int made;     /* index + 1 of its made context, or 0 */
  int pending;  /* futures started on it whose callback has not run */
} fstream_t;

struct fz {
  uv_loop_t uv;
  uv_timer_t tick; /* unref'd: bounds every UV_RUN_ONCE to 50 ms */
  uvcuda_loop_t ul;
  int ul_up, ul_closing;
  uvcuda_completion_t strategy;
  slot_t s[NF];
  fstream_t st[NST];
  CUcontext made[NC];
  int made_dead[NC]; /* faulted: its stream is no longer picked */
  int ndev;
  int cap;            /* index + 1 of the capturing stream, or 0 */
  int cap_strict;     /* THREAD_LOCAL: no starts, no loop init/close */
  uint64_t cap_until; /* step at which it ends */
  uint64_t rng;
  uint64_t violations;
  char what[160];
  uint64_t ops;
  uint64_t ctx_inits, ctx_closes, nstarts, ncbs, ncancel, nerr, ncloses;
  uint64_t nrecreated, nreused, ncaptures, nfaults, nrefused;
};

/* UVCUDA_FUZZ_SKIP=capture,recreate,fault: leave those draws out (to tell
 * which one a failure needs). */
static int skip_capture, skip_recreate, skip_fault, skip_refuse;

static pthread_once_t fx_once = PTHREAD_ONCE_INIT;

static void read_skips(void) {
  const char *skip = getenv("UVCUDA_FUZZ_SKIP");
  if (skip) {
    skip_capture = strstr(skip, "capture") != NULL;
    skip_recreate = strstr(skip, "recreate") != NULL;
    skip_fault = strstr(skip, "fault") != NULL;
    skip_refuse = strstr(skip, "refuse") != NULL;
  }
}

static uint64_t rnd(struct fz *z) {
  z->rng ^= z->rng << 13;
  z->rng ^= z->rng >> 7;
  z->rng ^= z->rng << 17;
  return z->rng;
}

static void violation(struct fz *z, const char *msg, int i) {
  if (z->violations++) return; /* keep the first: later ones follow from it */
  snprintf(z->what, sizeof(z->what), "op %llu slot %d: %s",
           (unsigned long long)z->ops, i, msg);
}

/* Simulated work (any device's stream), or an op that fails. */
static int op_work(uvcuda_future_t *f, uvcuda_stream_t s) {
  slot_t *sl = f->data;
  uint64_t r = rnd(sl->fz);
  if (r % 11 == 0) return (int)CUDA_ERROR_INVALID_VALUE;
  if (r % 13 == 0) return UVCUDA_ENOMEM;
  /* Mostly short: simulated work spins a core, and POLL loops spin too;
   * now and then a few ms, so several contexts have futures armed at once. */
  if (r % 17 == 0) return (int)simcuda_enqueue_work((CUstream)s, (r >> 8) % 5000000);
  return (int)simcuda_enqueue_work((CUstream)s, (r >> 8) % 10000);
}

static void on_close(uvcuda_future_t *f) {
  slot_t *sl = f->data;
  struct fz *z = sl->fz;
  int i = (int)(sl - z->s);
  if (!sl->closing) violation(z, "close_cb without close", i);
  if (sl->started) violation(z, "close_cb before the callback", i);
  sl->close_cbs++;
  if (sl->close_cbs != sl->closes) violation(z, "close_cb count", i);
  sl->inited = sl->closing = 0;
}

static int usable(struct fz *z, int i) {
  const fstream_t *st = &z->st[i];
  if (st->s == NULL) return 0;
  if (st->dev1) return z->ndev > 1;
  return !st->made || !z->made_dead[st->made - 1];
}

/* A stream to start on: a device's primary context or a made context.
 * Device 0's primary streams always are (recreate_stream keeps them
 * there); should none be, that is the fuzzer's own violation, never a
 * spin here (it once spun forever once faults had killed every made
 * context its streams had been moved to). */
static int pick_stream(struct fz *z) {
  int k, i;
  for (k = 0; k < 64 * NST; k++) {
    i = (int)(rnd(z) % NST);
    if (usable(z, i)) return i;
  }
  for (i = 0; i < NST; i++)
    if (usable(z, i)) return i;
  violation(z, "no usable stream left", -1);
  return 0;
}

static void on_cb(uvcuda_future_t *f, int status);

static int start_slot(struct fz *z, slot_t *sl, uvcuda_op_cb op) {
  int si = pick_stream(z);
  int rc = uvcuda_future_start(&sl->f, z->st[si].s, op, on_cb);
  if (rc == 0) {
    sl->si = si;
    z->st[si].pending++;
    sl->started = 1;
    sl->starts++;
  }
  return rc;
}

static void on_cb(uvcuda_future_t *f, int status) {
  slot_t *sl = f->data;
  struct fz *z = sl->fz;
  int i = (int)(sl - z->s);
  if (!sl->started) violation(z, "callback while not started", i);
  if (sl->closing && status != UVCUDA_ECANCELED)
    violation(z, "closed future not cancelled", i);
  sl->started = 0;
  z->st[sl->si].pending--;
  sl->cbs++;
  z->ncbs++;
  if (status == UVCUDA_ECANCELED) z->ncancel++;
  else if (status) z->nerr++;
  if (sl->cbs != sl->starts) violation(z, "callback count != start count", i);
  if (uvcuda_future_state(f) != (sl->closing ? UVCUDA_FUTURE_CLOSING : UVCUDA_FUTURE_IDLE))
    violation(z, "state in callback", i);
  if (sl->restart && !sl->closing && !z->cap_strict) {
    sl->restart = 0;
    if (start_slot(z, sl, op_work) != 0) violation(z, "restart from callback refused", i);
  }
}

static const uvcuda_completion_t strategies[] = {
    UVCUDA_COMPLETION_AUTO, UVCUDA_COMPLETION_REACTOR, UVCUDA_COMPLETION_HOSTFN,
    UVCUDA_COMPLETION_POLL};

static int ctx_up(struct fz *z) {
  uvcuda_options_t o;
  uvcuda_options_init(&o);
  z->strategy = strategies[rnd(z) % 4];
  o.completion = z->strategy;
  o.spin_budget_us = (int32_t)(rnd(z) % 3) * 10;
  /* Adaptive spin on half the loops: predictions, pre-wake timers and
   * windows meet closes, destroys and faults too. */
  o.flags = rnd(z) % 2 ? UVCUDA_OPT_ADAPTIVE : UVCUDA_OPT_NO_ADAPTIVE;
  if (uvcuda_loop_init(&z->uv, &z->ul, &o) != 0) return -1;
  z->ul_up = 1;
  z->ul_closing = 0;
  z->ctx_inits++;
  return 0;
}

static void on_ctx_closed(uvcuda_loop_t *ul) {
  struct fz *z = ul->data;
  z->ul_up = 0;
  z->ul_closing = 0;
}

/* ---- streams destroyed and made again ---- */

/* A stream of device 0 or of a live made context whose futures have all
 * called back (the API allows destroying it then) is destroyed, and a new
 * one is made in such a context; the simulation hands handles back LIFO. */
static void recreate_stream(struct fz *z) {
  int i = (int)(rnd(z) % NST), j;
  fstream_t *st = &z->st[i];
  CUstream old = st->s;
  CUcontext ctx;
  if (st->dev1 || !usable(z, i) || st->pending || z->cap == i + 1) return;
  if (tu.cuStreamDestroy(old) != CUDA_SUCCESS) violation(z, "stream destroy failed", -1);
  st->s = NULL;
  j = (int)(rnd(z) % (NC + 1)); /* 0: device 0's primary context */
  if (j > 0 && z->made_dead[j - 1]) j = 0;
  if (i < NS) j = 0; /* device 0's own streams stay there: always usable */
  ctx = j ? z->made[j - 1] : tu_ctx;
  tu.cuCtxSetCurrent(ctx);
  if (tu.cuStreamCreate(&st->s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
    violation(z, "stream create failed", -1);
    st->s = NULL;
  }
  tu.cuCtxSetCurrent(tu_ctx);
  st->ctx = ctx;
  st->made = j;
  z->nrecreated++;
  if (st->s == old) z->nreused++;
}

/* ---- captures ---- */

static void capture_end(struct fz *z) {
  fstream_t *st = &z->st[z->cap - 1];
  CUgraph g = NULL;
  CUgraphExec x = NULL;
  CUresult r = tu.cuStreamEndCapture(st->s, &g);
  if (r != CUDA_SUCCESS) {
    char msg[96];
    snprintf(msg, sizeof(msg), "capture ended with %d (%s mode)", (int)r,
             z->cap_strict ? "thread-local" : "relaxed");
    violation(z, msg, -1);
  }
  if (g != NULL) {
    if (tu.cuGraphInstantiateWithFlags(&x, g, 0) != CUDA_SUCCESS ||
        tu.cuGraphLaunch(x, st->s) != CUDA_SUCCESS)
      violation(z, "captured graph did not launch", -1);
    if (x) tu.cuGraphExecDestroy(x);
    tu.cuGraphDestroy(g);
  }
  z->cap = 0;
  z->cap_strict = 0;
}

/* Begins capturing a stream (one with pending futures when there is one)
 * for a while; work goes into the capture; futures started on it meanwhile
 * are refused through their callbacks (UVCUDA_ECAPTURING). */
static void capture_toggle(struct fz *z) {
  int i, k, best = -1;
  if (z->cap) {
    capture_end(z);
    return;
  }
  for (k = 0; k < 4; k++) {
    i = (int)(rnd(z) % NST);
    if (!usable(z, i) || z->st[i].dev1) continue;
    if (best < 0 || z->st[i].pending > z->st[best].pending) best = i;
  }
  if (best < 0) return;
  /* Not while the loop closes: its last frees may run on this thread. */
  z->cap_strict = rnd(z) % 2 == 0 && !z->ul_closing;
  if (tu.cuStreamBeginCapture(z->st[best].s, z->cap_strict
                                                 ? CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
                                                 : CU_STREAM_CAPTURE_MODE_RELAXED) !=
      CUDA_SUCCESS) {
    violation(z, "capture refused", -1);
    z->cap_strict = 0;
    return;
  }
  z->cap = best + 1;
  z->cap_until = z->ops + 5 + rnd(z) % 200;
  z->ncaptures++;
  if (simcuda_enqueue_work(z->st[best].s, 1000) != CUDA_SUCCESS)
    violation(z, "enqueue into a capture refused", -1);
}

/* ---- faults ---- */

static void fault(struct fz *z) {
  uint64_t r = rnd(z);
  if (z->cap) return; /* a fault in the capture's context would end it */
  if (z->ndev > 1 && r % 500 == 0) { /* device 1 (once per process) */
    __atomic_store_n(&dev1_dead, 1, __ATOMIC_RELAXED);
    simcuda_enqueue_fault(z->st[NS].s, CUDA_ERROR_ILLEGAL_ADDRESS);
    z->ndev = 1; /* stop using it; futures pending on it must fail */
    z->nfaults++;
  } else if (r % 50 == 1) { /* a made context: its pending futures must fail */
    int j, live = 0, i;
    for (i = 0; i < NC; i++) live += !z->made_dead[i];
    if (live <= NC / 2) return; /* half of them stay healthy */
    for (i = 2 * NS; i < NST; i++) { /* one with futures pending, if any */
      j = z->st[i].made - 1;
      if (j >= 0 && !z->made_dead[j] && z->st[i].s && z->st[i].pending) break;
    }
    if (i == NST) return;
    simcuda_enqueue_fault(z->st[i].s, CUDA_ERROR_ILLEGAL_ADDRESS);
    z->made_dead[j] = 1;
    z->nfaults++;
  }
}

/* A driver call of the library's refused, once, a few calls from now:
 * only entry points this harness never calls itself (its own calls must
 * work), with an error a driver gives (NOT_SUPPORTED: a memory op refused,
 * which turns a timeline to host functions). Not the queries: a refused
 * fault probe passes for a sticky fault, which the faults above cover. */
static void refuse_call(struct fz *z) {
  static const char *const entries[] = {
      "cuStreamWriteValue64", "cuStreamWriteValue32", "cuMemHostRegister",
      "cuStreamGetId",        "cuStreamGetCtx",       "cuCtxGetId",
      "cuCtxGetDevice",       "cuStreamIsCapturing",  "cuLaunchHostFunc",
      "cuEventRecord"};
  static const CUresult codes[] = {CUDA_ERROR_OUT_OF_MEMORY,
                                   CUDA_ERROR_NOT_SUPPORTED, CUDA_ERROR_UNKNOWN};
  const char *e = entries[rnd(z) % (sizeof(entries) / sizeof(entries[0]))];
  simcuda_fail_nth(e, codes[rnd(z) % 3], 1 + (int)(rnd(z) % 8));
  z->nrefused++;
}

int fuzz_step(struct fz *z, unsigned action) {
  int i = (int)(rnd(z) % NF), rc, live = 0, j;
  slot_t *sl = &z->s[i];

  z->ops++;
  if (z->cap && z->ops >= z->cap_until) capture_end(z);
  if (!z->ul_up) {
    if (!z->ul_closing && !z->cap_strict && ctx_up(z) != 0)
      violation(z, "loop init failed", -1);
    uv_run(&z->uv, UV_RUN_NOWAIT);
    return 0;
  }
  switch (action % 20) {
    case 0:
    case 1:
    case 2: /* init */
      if (!sl->inited && !z->ul_closing) {
        rc = uvcuda_future_init(&z->ul, &sl->f);
        if (rc) violation(z, "init failed", i);
        sl->f.data = sl;
        sl->inited = 1;
      }
      break;
    case 3:
    case 4:
    case 5:
    case 6: /* start */
      if (sl->inited && !sl->closing && !z->cap_strict) {
        uvcuda_op_cb op = rnd(z) % 4 ? op_work : NULL;
        if (sl->started) {
          if (uvcuda_future_start(&sl->f, z->st[pick_stream(z)].s, op, on_cb) !=
              UVCUDA_EBUSY)
            violation(z, "double start not EBUSY", i);
        } else if (start_slot(z, sl, op) == 0) {
          z->nstarts++;
          sl->restart = rnd(z) % 5 == 0;
        } else {
          violation(z, "start refused", i);
        }
      }
      break;
    case 7:
    case 8: /* close */
      if (sl->inited) {
        rc = uvcuda_future_close(&sl->f, on_close);
        if (sl->closing) {
          if (rc != UVCUDA_ECLOSING) violation(z, "double close not ECLOSING", i);
        } else if (rc == 0) {
          sl->closing = 1;
          sl->closes++;
        } else {
          violation(z, "close refused", i);
        }
      }
      break;
    case 9: /* close the context if possible; EBUSY otherwise */
      if (!z->ul_closing && !z->cap_strict) {
        for (j = 0; j < NF; j++) live += z->s[j].inited;
        if (live && rnd(z) % 8 == 0) { /* sometimes: shut everything down */
          for (j = 0; j < NF; j++) {
            slot_t *o = &z->s[j];
            if (o->inited && !o->closing && uvcuda_future_close(&o->f, on_close) == 0) {
              o->closing = 1;
              o->closes++;
            }
          }
        }
        z->ul.data = z;
        rc = uvcuda_loop_close(&z->ul, on_ctx_closed);
        if (live && rc != UVCUDA_EBUSY) violation(z, "context close not EBUSY", -1);
        if (!live) {
          if (rc != 0) violation(z, "context close failed", -1);
          else {
            z->ul_closing = 1;
            z->ctx_closes++;
          }
        }
      }
      break;
    case 10: /* a fault (rarely) */
      if (!skip_fault) fault(z);
      break;
    case 11: /* a stream destroyed and made again */
      if (!skip_recreate) recreate_stream(z);
      break;
    case 12: /* a capture begins or ends */
      if (rnd(z) % 4 == 0 && !skip_capture) capture_toggle(z);
      break;
    case 13: /* a driver call refused (rarely) */
      if (rnd(z) % 16 == 0 && !skip_refuse) refuse_call(z);
      break;
    default: /* run the loop */
      uv_run(&z->uv, action % 2 ? UV_RUN_NOWAIT : UV_RUN_ONCE);
      break;
  }
  return 0;
}

/* Closes everything and checks the final tallies. */
int fuzz_finish(struct fz *z) {
  int i;
  uint64_t end = uv_hrtime() + 60000000000ull; /* 60 s: only a bug waits that long */
  if (z->cap) capture_end(z);
  for (i = 0; i < NF; i++) {
    slot_t *sl = &z->s[i];
    if (sl->inited && !sl->closing) {
      if (uvcuda_future_close(&sl->f, on_close) != 0) violation(z, "final close", i);
      sl->closing = 1;
      sl->closes++;
    }
  }
  while (uv_hrtime() < end) {
    int busy = 0;
    for (i = 0; i < NF; i++) busy |= z->s[i].inited;
    if (!busy) break;
    uv_run(&z->uv, UV_RUN_NOWAIT);
  }
  if (z->ul_up && !z->ul_closing) {
    z->ul.data = z;
    if (uvcuda_loop_close(&z->ul, on_ctx_closed) != 0) violation(z, "final context close", -1);
    z->ul_closing = 1;
  }
  while (z->ul_up && uv_hrtime() < end) uv_run(&z->uv, UV_RUN_ONCE);
  for (i = 0; i < NF; i++) {
    slot_t *sl = &z->s[i];
    if (sl->inited) violation(z, "future never closed", i);
    if (sl->cbs != sl->starts) violation(z, "lost callback", i);
    if (sl->close_cbs != sl->closes) violation(z, "lost close_cb", i);
  }
  if (z->ul_up) violation(z, "context never closed", -1);
  uv_close((uv_handle_t *)&z->tick, NULL);
  if (!getenv("UVCUDA_FUZZ_QUIET"))
    fprintf(stderr, "fuzz: %llu ops, %llu contexts (%llu closed early), %llu starts, "
          "%llu callbacks (%llu cancelled, %llu errors), %llu streams made again "
          "(%llu on the same handle), %llu captures, %llu faults, %llu driver "
          "calls refused, %llu violations\n",
          (unsigned long long)z->ops, (unsigned long long)z->ctx_inits,
          (unsigned long long)z->ctx_closes, (unsigned long long)z->nstarts,
          (unsigned long long)z->ncbs, (unsigned long long)z->ncancel,
          (unsigned long long)z->nerr, (unsigned long long)z->nrecreated,
          (unsigned long long)z->nreused, (unsigned long long)z->ncaptures,
          (unsigned long long)z->nfaults, (unsigned long long)z->nrefused,
          (unsigned long long)z->violations);
  uv_run(&z->uv, UV_RUN_NOWAIT);
  if (uv_loop_close(&z->uv) != 0) violation(z, "uv loop not empty", -1);
  return z->violations ? 1 : 0;
}

static CUstream new_stream(CUcontext ctx) {
  CUstream s = NULL;
  tu.cuCtxSetCurrent(ctx);
  if (tu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) s = NULL;
  return s;
}

struct fz *fuzz_new(uint64_t seed, int ndev) {
  struct fz *z = calloc(1, sizeof(*z));
  CUdevice d0;
  int k, i;
  if (z == NULL) return NULL;
  pthread_once(&fx_once, read_skips);
  z->rng = seed * 0x9e3779b97f4a7c15ull + 1;
  if (__atomic_load_n(&dev1_dead, __ATOMIC_RELAXED)) ndev = 1;
  z->ndev = ndev;
  for (i = 0; i < NF; i++) z->s[i].fz = z;
  uv_loop_init(&z->uv);
  uv_timer_init(&z->uv, &z->tick);
  uv_timer_start(&z->tick, on_tick, 50, 50);
  uv_unref((uv_handle_t *)&z->tick);
  tu.cuDeviceGet(&d0, 0);
  for (k = 0; k < NC; k++) {
    if (tu.cuCtxCreate(&z->made[k], 0, d0) != CUDA_SUCCESS)
      goto fail;
    tu.cuCtxPopCurrent(NULL);
  }
  for (i = 0; i < NST; i++) {
    fstream_t *st = &z->st[i];
    st->dev1 = i >= NS && i < 2 * NS;
    st->made = i >= 2 * NS ? i - 2 * NS + 1 : 0;
    st->ctx = st->dev1 ? fuzz_ctx1 : st->made ? z->made[st->made - 1] : tu_ctx;
    if (st->dev1 && ndev < 2) continue;
    st->s = new_stream(st->ctx);
    if (st->s == NULL && !st->dev1) goto fail; /* only device 1 may be dead */
    if (st->s == NULL) z->ndev = 1;
  }
  tu.cuCtxSetCurrent(tu_ctx);
  return z;
fail:
  tu.cuCtxSetCurrent(tu_ctx);
  uv_close((uv_handle_t *)&z->tick, NULL);
  uv_run(&z->uv, UV_RUN_NOWAIT);
  uv_loop_close(&z->uv);
  fuzz_free(z);
  return NULL;
}

void fuzz_free(struct fz *z) {
  int i;
  /* A loop context that never finished closing may still have the reactor
   * read counters in memory of these contexts: leave them (a leak, not a
   * use after free, once fuzz_finish has reported it). */
  if (z->ul_up) return;
  for (i = 0; i < NST; i++)
    if (z->st[i].s) {
      tu.cuStreamSynchronize(z->st[i].s);
      tu.cuStreamDestroy(z->st[i].s);
    }
  for (i = 0; i < NC; i++)
    if (z->made[i]) tu.cuCtxDestroy(z->made[i]); /* ends a fault there too */
  free(z);
}

const char *fuzz_what(struct fz *z) { return z->what; }
uint64_t fuzz_rand(struct fz *z) { return rnd(z); }
