/* Lifecycle fuzzer: random sequences of loop-context init/close (switching
 * strategies), future init/start/close/restart, ops that fail, stream work
 * of random length, and a sticky fault on a second simulated device, across
 * 1-4 loops on their own threads, against the simulated driver.
 *
 * Invariants, checked after every step: a started future gets exactly one
 * callback; no callback while not started; no callback after close_cb;
 * close_cb exactly once per close; at the end every future and context is
 * closed and (under ASan/valgrind) nothing leaks.
 *
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

/* Device 1's context dies (sticky) at the first fault, for the process. */
static int dev1_dead;

static void on_tick(uv_timer_t *t) { (void)t; }
#define NS 4  /* streams per device */

typedef struct {
  uvcuda_future_t f;
  int inited;     /* init called, close_cb not yet run */
  int closing;    /* close called */
  int started;    /* start returned 0, callback not yet run */
  int restart;    /* the callback starts it again */
  uint64_t cbs, starts, closes, close_cbs;
  struct fz *fz;
} slot_t;

struct fz {
  uv_loop_t uv;
  uv_timer_t tick; /* unref'd: bounds every UV_RUN_ONCE to 50 ms */
  uvcuda_loop_t ul;
  int ul_up, ul_closing;
  uvcuda_completion_t strategy;
  slot_t s[NF];
  CUstream st[2][NS];
  int ndev;
  uint64_t rng;
  uint64_t violations;
  char what[160];
  uint64_t ops;
  uint64_t ctx_inits, ctx_closes, nstarts, ncbs, ncancel, nerr, ncloses;
};

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
  /* Short: simulated work spins a core, and POLL loops spin too. */
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

static CUstream pick_stream(struct fz *z) {
  uint64_t r = rnd(z);
  return z->st[(int)(r % (uint64_t)z->ndev)][(r >> 4) % NS];
}

static void on_cb(uvcuda_future_t *f, int status) {
  slot_t *sl = f->data;
  struct fz *z = sl->fz;
  int i = (int)(sl - z->s);
  if (!sl->started) violation(z, "callback while not started", i);
  if (sl->closing && status != UVCUDA_ECANCELED)
    violation(z, "closed future not cancelled", i);
  sl->started = 0;
  sl->cbs++;
  z->ncbs++;
  if (status == UVCUDA_ECANCELED) z->ncancel++;
  else if (status) z->nerr++;
  if (sl->cbs != sl->starts) violation(z, "callback count != start count", i);
  if (uvcuda_future_state(f) != (sl->closing ? UVCUDA_FUTURE_CLOSING : UVCUDA_FUTURE_IDLE))
    violation(z, "state in callback", i);
  if (sl->restart && !sl->closing) {
    sl->restart = 0;
    if (uvcuda_future_start(f, pick_stream(z), op_work, on_cb) == 0) {
      sl->started = 1;
      sl->starts++;
    } else {
      violation(z, "restart from callback refused", i);
    }
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

int fuzz_step(struct fz *z, unsigned action) {
  int i = (int)(rnd(z) % NF), rc, live = 0, j;
  slot_t *sl = &z->s[i];

  z->ops++;
  if (!z->ul_up) {
    if (!z->ul_closing && ctx_up(z) != 0) violation(z, "loop init failed", -1);
    uv_run(&z->uv, UV_RUN_NOWAIT);
    return 0;
  }
  switch (action % 10) {
    case 0:
    case 1: /* init */
      if (!sl->inited && !z->ul_closing) {
        rc = uvcuda_future_init(&z->ul, &sl->f);
        if (rc) violation(z, "init failed", i);
        sl->f.data = sl;
        sl->inited = 1;
      }
      break;
    case 2:
    case 3: /* start */
      if (sl->inited && !sl->closing) {
        rc = uvcuda_future_start(&sl->f, pick_stream(z),
                                 rnd(z) % 4 ? op_work : NULL, on_cb);
        if (sl->started) {
          if (rc != UVCUDA_EBUSY) violation(z, "double start not EBUSY", i);
        } else if (rc == 0) {
          sl->started = 1;
          sl->starts++;
          z->nstarts++;
          sl->restart = rnd(z) % 5 == 0;
        } else {
          violation(z, "start refused", i);
        }
      }
      break;
    case 4: /* close */
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
    case 5: /* close the context if possible; EBUSY otherwise */
      if (!z->ul_closing) {
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
    case 6: /* a fault on the second device (once) */
      if (z->ndev > 1 && rnd(z) % 500 == 0) {
        __atomic_store_n(&dev1_dead, 1, __ATOMIC_RELAXED);
        simcuda_enqueue_fault(z->st[1][0], CUDA_ERROR_ILLEGAL_ADDRESS);
        z->ndev = 1; /* stop using it; futures pending on it must fail */
      }
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
          "%llu callbacks (%llu cancelled, %llu errors), %llu violations\n",
          (unsigned long long)z->ops, (unsigned long long)z->ctx_inits,
          (unsigned long long)z->ctx_closes, (unsigned long long)z->nstarts,
          (unsigned long long)z->ncbs, (unsigned long long)z->ncancel,
          (unsigned long long)z->nerr, (unsigned long long)z->violations);
  uv_run(&z->uv, UV_RUN_NOWAIT);
  if (uv_loop_close(&z->uv) != 0) violation(z, "uv loop not empty", -1);
  return z->violations ? 1 : 0;
}

struct fz *fuzz_new(uint64_t seed, int ndev) {
  struct fz *z = calloc(1, sizeof(*z));
  int d, k, i;
  if (z == NULL) return NULL;
  z->rng = seed * 0x9e3779b97f4a7c15ull + 1;
  if (__atomic_load_n(&dev1_dead, __ATOMIC_RELAXED)) ndev = 1;
  z->ndev = ndev;
  for (i = 0; i < NF; i++) z->s[i].fz = z;
  uv_loop_init(&z->uv);
  uv_timer_init(&z->uv, &z->tick);
  uv_timer_start(&z->tick, on_tick, 50, 50);
  uv_unref((uv_handle_t *)&z->tick);
  for (d = 0; d < ndev; d++) {
    tu.cuCtxSetCurrent(d == 0 ? tu_ctx : fuzz_ctx1);
    for (k = 0; k < NS; k++) {
      if (tu.cuStreamCreate(&z->st[d][k], CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
        if (d == 0) { /* device 0 never faults: a real failure */
          uv_close((uv_handle_t *)&z->tick, NULL);
          uv_run(&z->uv, UV_RUN_NOWAIT);
          uv_loop_close(&z->uv);
          free(z);
          return NULL;
        }
        z->st[d][k] = NULL;
        z->ndev = 1;
      }
    }
  }
  tu.cuCtxSetCurrent(tu_ctx);
  return z;
}

void fuzz_free(struct fz *z) {
  int d, k;
  for (d = 0; d < 2; d++)
    for (k = 0; k < NS; k++)
      if (z->st[d][k]) {
        tu.cuStreamSynchronize(z->st[d][k]);
        tu.cuStreamDestroy(z->st[d][k]);
      }
  free(z);
}

const char *fuzz_what(struct fz *z) { return z->what; }
uint64_t fuzz_rand(struct fz *z) { return rnd(z); }
