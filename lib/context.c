/* The process-wide registry of CUDA context records. A record is freed
 * only when no one refers to it (refs, users) and its context is proven
 * destroyed, so that no write due to its counters can land any more. */
#include "context.h"

#include <sched.h>
#include <stdlib.h>

static uv_once_t reg_once = UV_ONCE_INIT;
static uv_mutex_t reg_mu;
static struct uvcuda__queue reg;
static atomic_uint epoch;

static void reg_init(void) {
  if (uv_mutex_init(&reg_mu) != 0) abort();
  uvcuda__queue_init(&reg);
}

/* A retired record (uvcuda_device_reset) is never found again: a context
 * the reset did not touch (one from cuCtxCreate) gets a fresh record on
 * its next use, with its own health. */
static struct uvcuda__context *find(unsigned long long id) {
  struct uvcuda__queue *q;
  uvcuda__queue_foreach(q, &reg) {
    struct uvcuda__context *x =
        uvcuda__queue_data(q, struct uvcuda__context, node);
    if (x->id == id && !atomic_load(&x->dead)) return x;
  }
  return NULL;
}

static int set_fault(struct uvcuda__context *x, int r);

/* Context c now has id `id`: a record of c under another id describes a
 * context the driver destroyed (a handle names one context at a time; the
 * primary context keeps its handle when it is made again). Such a record
 * is retired (its futures fail), and freed where nothing refers to it:
 * its registrations and events went with the context, its probe stream
 * too, so nothing of it is passed to the driver. Caller holds reg_mu. */
static void sweep(CUcontext c, unsigned long long id) {
  struct uvcuda__queue *q, *next;
  for (q = reg.next; q != &reg; q = next) {
    struct uvcuda__context *x =
        uvcuda__queue_data(q, struct uvcuda__context, node);
    next = q->next;
    if (x->cuctx != c || x->id == id) continue;
    if (!atomic_load(&x->dead)) {
      atomic_store_explicit(&x->dead, 1, memory_order_seq_cst);
      set_fault(x, CUDA_ERROR_CONTEXT_IS_DESTROYED);
    }
    if (atomic_load(&x->refs) != 0 || atomic_load(&x->users) != 0) continue;
    uvcuda__queue_remove(q);
    uvcuda__counter_pool_free_gone(&x->counters);
    free(x->events.ev);
    uv_mutex_destroy(&x->mu);
    free(x);
  }
}

static int create(CUcontext c, unsigned long long id,
                  struct uvcuda__context **out) {
  struct uvcuda__context *x;

  sweep(c, id);
  x = calloc(1, sizeof(*x));
  struct uvcuda__drvscope sc;
  CUresult r;

  if (x == NULL) return UVCUDA_ENOMEM;
  if (uv_mutex_init(&x->mu) != 0) {
    free(x);
    return UVCUDA_ENOMEM;
  }
  r = uvcuda__drv_enter(&sc, c);
  if (r == CUDA_SUCCESS) r = uvcuda__drv.cuCtxGetDevice(&x->dev);
  if (r == CUDA_SUCCESS)
    r = uvcuda__drv.cuStreamCreate(&x->probe, CU_STREAM_NON_BLOCKING);
  uvcuda__drv_leave(&sc);
  if (r != CUDA_SUCCESS) {
    uv_mutex_destroy(&x->mu);
    free(x);
    return UVCUDA_ECUDA(r);
  }
  x->id = id;
  x->cuctx = c;
  atomic_init(&x->fault, 0);
  atomic_init(&x->dead, 0);
  atomic_init(&x->users, 0);
  atomic_init(&x->refs, 0);
  atomic_init(&x->next_probe_ns, 0);
  uvcuda__counter_pool_init(&x->counters);
  uvcuda__queue_insert_tail(&reg, &x->node);
  *out = x;
  return 0;
}

int uvcuda__context_get(CUcontext c, struct uvcuda__context **out) {
  unsigned long long id;
  CUresult r;
  int err = 0;

  r = uvcuda__drv.cuCtxGetId(c, &id);
  if (r != CUDA_SUCCESS) return UVCUDA_ECUDA(r);
  uv_once(&reg_once, reg_init);
  uv_mutex_lock(&reg_mu);
  if ((*out = find(id)) == NULL) err = create(c, id, out);
  if (err == 0) atomic_fetch_add_explicit(&(*out)->refs, 1, memory_order_relaxed);
  uv_mutex_unlock(&reg_mu);
  return err;
}

unsigned uvcuda__context_records(void) {
  struct uvcuda__queue *q;
  unsigned n = 0;
  uv_once(&reg_once, reg_init);
  uv_mutex_lock(&reg_mu);
  uvcuda__queue_foreach(q, &reg) n++;
  uv_mutex_unlock(&reg_mu);
  return n;
}

void uvcuda__context_ref(struct uvcuda__context *x) {
  atomic_fetch_add_explicit(&x->refs, 1, memory_order_relaxed);
}

/* Under reg_mu, where sweep reads it: a record is never freed while a
 * release is under way. */
void uvcuda__context_release(struct uvcuda__context *x) {
  uv_once(&reg_once, reg_init);
  uv_mutex_lock(&reg_mu);
  atomic_fetch_sub_explicit(&x->refs, 1, memory_order_relaxed);
  uv_mutex_unlock(&reg_mu);
}

unsigned uvcuda__context_epoch(void) {
  return atomic_load_explicit(&epoch, memory_order_acquire);
}

int uvcuda__context_pin(struct uvcuda__context *x) {
  atomic_fetch_add_explicit(&x->users, 1, memory_order_seq_cst);
  if (!atomic_load_explicit(&x->dead, memory_order_seq_cst)) return 1;
  atomic_fetch_sub_explicit(&x->users, 1, memory_order_release);
  return 0;
}

void uvcuda__context_unpin(struct uvcuda__context *x) {
  atomic_fetch_sub_explicit(&x->users, 1, memory_order_release);
}

static int set_fault(struct uvcuda__context *x, int r) {
  int none = 0;
  if (atomic_compare_exchange_strong(&x->fault, &none, r))
    atomic_fetch_add_explicit(&epoch, 1, memory_order_release);
  return uvcuda__context_fault(x);
}

static int is_error(CUresult r) {
  return r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY;
}

/* A fault is an error that stays: a sticky error answers every query of
 * the idle probe stream, so an error is asked again at once (~1 µs); one
 * the second query does not repeat (a refused call) condemns nothing, and
 * where two errors differ a third query says which one stays. */
int uvcuda__context_query(struct uvcuda__context *x) {
  struct uvcuda__drvscope sc;
  unsigned long long id;
  CUresult r, again;
  if (!uvcuda__context_pin(x)) return uvcuda__context_fault(x);
  /* A reset that uvcuda did not make (another copy of it, a CUDA library:
   * cuDevicePrimaryCtxReset) keeps the primary context's handle but gives
   * it a new id, or CONTEXT_IS_DESTROYED until the next retain. The probe
   * stream went with it and its handle may name a new stream already (the
   * driver reuses them), so it is not asked: the record is done for. Any
   * other error is left to the query below (a refused call condemns
   * nothing; a sticky fault is named by the query). */
  r = uvcuda__drv.cuCtxGetId(x->cuctx, &id);
  if (r == CUDA_ERROR_CONTEXT_IS_DESTROYED)
    r = uvcuda__drv.cuCtxGetId(x->cuctx, &id);
  if (r == CUDA_ERROR_CONTEXT_IS_DESTROYED || (r == CUDA_SUCCESS && id != x->id)) {
    atomic_store_explicit(&x->dead, 1, memory_order_seq_cst);
    uvcuda__context_unpin(x);
    return set_fault(x, CUDA_ERROR_CONTEXT_IS_DESTROYED);
  }
  /* The query names its stream: it needs no context current, so a refused
   * switch does not stop it (a fault is still seen). */
  (void)uvcuda__drv_enter(&sc, x->cuctx);
  r = uvcuda__drv.cuStreamQuery(x->probe);
  if (is_error(r)) {
    again = uvcuda__drv.cuStreamQuery(x->probe);
    if (is_error(again) && again != r)
      again = uvcuda__drv.cuStreamQuery(x->probe);
    r = again;
  }
  uvcuda__drv_leave(&sc);
  uvcuda__context_unpin(x);
  if (!is_error(r)) return uvcuda__context_fault(x);
  return set_fault(x, (int)r);
}

int uvcuda__context_probe(struct uvcuda__context *x, uint64_t now,
                          uint64_t interval) {
  uint64_t due;
  int f = uvcuda__context_fault(x);

  if (f != 0) return f;
  due = atomic_load_explicit(&x->next_probe_ns, memory_order_relaxed);
  if (now < due) return 0;
  /* One prober per interval, whichever thread comes first. */
  if (!atomic_compare_exchange_strong(&x->next_probe_ns, &due, now + interval))
    return 0;
  return uvcuda__context_query(x);
}

void uvcuda__context_kill_device(CUdevice dev, int err) {
  struct uvcuda__queue *q;
  uv_once(&reg_once, reg_init);
  uv_mutex_lock(&reg_mu);
  uvcuda__queue_foreach(q, &reg) {
    struct uvcuda__context *x =
        uvcuda__queue_data(q, struct uvcuda__context, node);
    if (x->dev != dev || atomic_load(&x->dead)) continue;
    atomic_store_explicit(&x->dead, 1, memory_order_seq_cst);
    set_fault(x, err);
    while (atomic_load_explicit(&x->users, memory_order_acquire) > 0)
      sched_yield(); /* a probe or a query is a µs or so */
  }
  uv_mutex_unlock(&reg_mu);
}

int uvcuda__context_counter_get(struct uvcuda__context *x,
                                struct uvcuda__counter *c) {
  struct uvcuda__drvscope sc;
  CUresult r;
  int err;
  if (!uvcuda__context_pin(x))
    return UVCUDA_ECUDA(CUDA_ERROR_CONTEXT_IS_DESTROYED);
  uv_mutex_lock(&x->mu);
  /* A new page is registered in x. */
  r = uvcuda__drv_enter(&sc, x->cuctx);
  err = r == CUDA_SUCCESS ? uvcuda__counter_get(&x->counters, c) : UVCUDA_ECUDA(r);
  uvcuda__drv_leave(&sc);
  uv_mutex_unlock(&x->mu);
  uvcuda__context_unpin(x);
  return err;
}

void uvcuda__context_counter_put(struct uvcuda__context *x,
                                 struct uvcuda__counter *c, int mode,
                                 uint64_t expect) {
  uv_mutex_lock(&x->mu);
  uvcuda__counter_put(&x->counters, c, mode, expect);
  uv_mutex_unlock(&x->mu);
}

CUevent uvcuda__context_event_get(struct uvcuda__context *x) {
  CUevent ev;
  if (!uvcuda__context_pin(x)) return NULL;
  uv_mutex_lock(&x->mu);
  ev = uvcuda__evpool_get(&x->events);
  uv_mutex_unlock(&x->mu);
  uvcuda__context_unpin(x);
  return ev;
}

void uvcuda__context_event_put(struct uvcuda__context *x, CUevent ev) {
  uv_mutex_lock(&x->mu);
  uvcuda__evpool_put(&x->events, ev);
  uv_mutex_unlock(&x->mu);
}
