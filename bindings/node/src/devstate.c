/* See devstate.h. Lock order: a device's reset lock (rw) before its mutex
 * (mu); subs_mu is never held together with either. uvcuda's own locks are
 * taken inside uvcuda calls made under ours, never the other way round
 * (uvcuda does not call into the addon). */
#include "devstate.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "queue.h"
#include "uvcuda.h"

#define WATCH_INTERVAL_NS 100000000L /* 100 ms */

#define RESETS_KEPT 16 /* a reset takes tens of ms: no env lags 16 behind */

struct devstate {
  pthread_rwlock_t rw; /* the reset lock */
  pthread_mutex_t mu;  /* the fields below but gen */
  uint64_t gen;        /* written under rw (write), read atomically */
  int resetting;     /* the driver part runs: the device is not to be used */
  int reset_pending; /* begun, its promise not yet settled: no second one */
  int users;           /* envs that have the device open */
  CUcontext ctx;       /* its primary context, while users > 0 */
  uint64_t faults;     /* faults recorded (at most one per generation) */
  uint64_t fault_gen;  /* generation of the latest */
  int fault_err;       /* its error */
  /* The id of the context as this copy last knew it (0: not yet). Another
   * copy of uvcuda, or another CUDA library, that resets the device gives
   * the context a new id: found at the next call or watch, that reset is
   * taken as one of ours (foreign_reset). */
  unsigned long long known_ctx;
  /* The results of the latest resets, by the generation each began: an env
   * emits every generation's 'reset' in order, whichever of its own
   * completion or another env's note reaches it first. */
  struct {
    uint64_t gen;
    int err;
  } resets[RESETS_KEPT];
  /* By peer ordinal: access from this device to the peer's memory was
   * enabled while the two had these generations. */
  struct peer {
    int on;
    uint64_t gen, peer_gen;
  } *peers;
};

static void announce(int kind, int ordinal, uint64_t gen);

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int init_status;
static int ndev;
static struct devstate *devs;

static void init(void) {
  struct peer *peers = NULL;
  int i;
  if ((init_status = uvn_driver_load()) != 0) return;
  if (uvn_cu.cuDeviceGetCount(&ndev) != CUDA_SUCCESS || ndev < 0) ndev = 0;
  if (ndev == 0) return;
  if ((devs = calloc((size_t)ndev, sizeof(*devs))) == NULL ||
      (peers = calloc((size_t)ndev * (size_t)ndev, sizeof(*peers))) == NULL) {
    free(devs);
    devs = NULL;
    ndev = 0;
    init_status = UVCUDA_ENOMEM;
    return;
  }
  for (i = 0; i < ndev; i++) {
    pthread_rwlock_init(&devs[i].rw, NULL);
    pthread_mutex_init(&devs[i].mu, NULL);
    devs[i].peers = peers + (size_t)i * (size_t)ndev;
  }
}

int uvn_devstate_init(void) {
  pthread_once(&once, init);
  return init_status;
}

static struct devstate *get(int ordinal) {
  uvn_devstate_init();
  return ordinal >= 0 && ordinal < ndev ? &devs[ordinal] : NULL;
}

/* The id of the device's context now, 0 if none or gone (a reset made
 * elsewhere answers CONTEXT_IS_DESTROYED until the context is made anew).
 * Under d->mu: the last env cannot release the context meanwhile. */
static unsigned long long ctx_id(struct devstate *d) {
  unsigned long long id = 0;
  if (d->ctx == NULL || uvn_cu.cuCtxGetId(d->ctx, &id) != CUDA_SUCCESS) return 0;
  return id;
}

static void foreign_check(struct devstate *d, int ordinal);

int uvn_devstate_enter(int ordinal, uint64_t *gen) {
  struct devstate *d = get(ordinal);
  int busy;
  if (d == NULL) {
    *gen = 0;
    return 0;
  }
  foreign_check(d, ordinal);
  if (pthread_rwlock_tryrdlock(&d->rw) != 0) return UVCUDA_EBUSY;
  pthread_mutex_lock(&d->mu);
  busy = d->resetting;
  pthread_mutex_unlock(&d->mu);
  if (busy) {
    pthread_rwlock_unlock(&d->rw);
    return UVCUDA_EBUSY;
  }
  *gen = __atomic_load_n(&d->gen, __ATOMIC_ACQUIRE);
  return 0;
}

void uvn_devstate_enter_wait(int ordinal, uint64_t *gen) {
  struct devstate *d = get(ordinal);
  *gen = 0;
  if (d == NULL) return;
  foreign_check(d, ordinal);
  pthread_rwlock_rdlock(&d->rw);
  *gen = __atomic_load_n(&d->gen, __ATOMIC_ACQUIRE);
}

void uvn_devstate_leave(int ordinal) {
  struct devstate *d = get(ordinal);
  if (d != NULL) pthread_rwlock_unlock(&d->rw);
}

uint64_t uvn_devstate_gen(int ordinal) {
  struct devstate *d = get(ordinal);
  return d ? __atomic_load_n(&d->gen, __ATOMIC_ACQUIRE) : 0;
}

void uvn_devstate_open(int ordinal, CUcontext ctx) {
  struct devstate *d = get(ordinal);
  if (d == NULL) return;
  pthread_mutex_lock(&d->mu);
  d->ctx = ctx;
  /* The first user retains the primary context, which the driver made
   * anew if every user had released it: its id is known from here. */
  if (d->users++ == 0 || d->known_ctx == 0) d->known_ctx = ctx_id(d);
  pthread_mutex_unlock(&d->mu);
}

void uvn_devstate_close(int ordinal) {
  struct devstate *d = get(ordinal);
  if (d == NULL) return;
  pthread_mutex_lock(&d->mu);
  if (--d->users == 0) d->ctx = NULL; /* the watcher leaves it alone now */
  pthread_mutex_unlock(&d->mu);
}

int uvn_devstate_reset_begin(int ordinal) {
  struct devstate *d = get(ordinal);
  int err = 0;
  if (d == NULL) return UVCUDA_EINVAL;
  pthread_mutex_lock(&d->mu);
  if (d->resetting || d->reset_pending) err = UVCUDA_EBUSY;
  else d->resetting = d->reset_pending = 1;
  pthread_mutex_unlock(&d->mu);
  return err;
}

void uvn_devstate_reset_end(int ordinal) {
  struct devstate *d = get(ordinal);
  if (d == NULL) return;
  pthread_mutex_lock(&d->mu);
  d->resetting = d->reset_pending = 0;
  pthread_mutex_unlock(&d->mu);
}

static int reached_driver(int err) {
  return err != UVCUDA_EINVAL && err != UVCUDA_ENODRIVER && err != UVCUDA_ENOSYM &&
         err != UVCUDA_EDRIVEROLD;
}

int uvn_devstate_reset_run(int ordinal, uint64_t *gen) {
  struct devstate *d = get(ordinal);
  int err;
  *gen = 0;
  if (d == NULL) return UVCUDA_EINVAL;
  pthread_rwlock_wrlock(&d->rw);
  err = uvcuda_device_reset(ordinal);
  /* Whatever its result, once it reached the driver every object made
   * before is gone (uvcuda retired its records; the reset, if it ran,
   * destroyed the context's): nothing may use their handles again. */
  if (reached_driver(err)) *gen = __atomic_add_fetch(&d->gen, 1, __ATOMIC_RELEASE);
  pthread_mutex_lock(&d->mu);
  d->resetting = 0; /* usable again: the 'reset' event says so */
  d->known_ctx = ctx_id(d); /* ours, not a foreign one (0: learnt later) */
  if (*gen != 0) {
    d->resets[*gen % RESETS_KEPT].gen = *gen;
    d->resets[*gen % RESETS_KEPT].err = err;
  }
  /* A driver that keeps the fault (new work still fails with it): the same
   * fault, in the new generation too, not a new one to announce. */
  if (reached_driver(err) && uvcuda_cuda_result(err) != 0 && d->faults > 0) {
    d->fault_gen = __atomic_load_n(&d->gen, __ATOMIC_ACQUIRE);
    d->fault_err = err;
  }
  pthread_mutex_unlock(&d->mu);
  pthread_rwlock_unlock(&d->rw);
  if (reached_driver(err)) announce(UVN_NOTE_RESET, ordinal, *gen);
  return err;
}

/* A reset this copy did not make (another copy of uvcuda in the process,
 * another CUDA library: cuDevicePrimaryCtxReset) destroyed every object
 * of the device, ours too, and the driver may hand their handles out
 * anew. Found by the context's new id, it is taken as our own reset: a new
 * generation, so that no object made before passes its handle to the
 * driver again (a call on one rejects CUDA_ERROR_CONTEXT_IS_DESTROYED, a
 * free forgets it), the fault recorded before goes with the old context,
 * and 'reset' (null) is emitted in every env. Objects made between the
 * reset and its finding count as made before: refused, never misused. */
static void foreign_reset(struct devstate *d, int ordinal, unsigned long long id) {
  uint64_t gen = 0;
  /* Not waited for: a thread in a call holds the lock for a moment, and a
   * reset of ours holds it for long; the next call or watch looks again. */
  if (pthread_rwlock_trywrlock(&d->rw) != 0) return;
  pthread_mutex_lock(&d->mu);
  if (!d->resetting && d->known_ctx != 0 && id != d->known_ctx) {
    gen = __atomic_add_fetch(&d->gen, 1, __ATOMIC_RELEASE);
    d->resets[gen % RESETS_KEPT].gen = gen;
    d->resets[gen % RESETS_KEPT].err = 0;
    d->known_ctx = id;
  }
  pthread_mutex_unlock(&d->mu);
  pthread_rwlock_unlock(&d->rw);
  if (gen != 0) announce(UVN_NOTE_RESET, ordinal, gen);
}

static void foreign_check(struct devstate *d, int ordinal) {
  unsigned long long id;
  int changed;
  pthread_mutex_lock(&d->mu);
  id = ctx_id(d); /* 0 while the context is destroyed and not made anew */
  if (d->known_ctx == 0 && !d->resetting) d->known_ctx = id;
  changed = !d->resetting && d->known_ctx != 0 && id != 0 && id != d->known_ctx;
  pthread_mutex_unlock(&d->mu);
  if (changed) foreign_reset(d, ordinal, id);
}

int uvn_devstate_reset_result(int ordinal, uint64_t gen, int *err) {
  struct devstate *d = get(ordinal);
  int found = 0;
  *err = 0;
  if (d == NULL) return 0;
  pthread_mutex_lock(&d->mu);
  if (d->resets[gen % RESETS_KEPT].gen == gen) {
    *err = d->resets[gen % RESETS_KEPT].err;
    found = 1;
  }
  pthread_mutex_unlock(&d->mu);
  return found;
}

uint64_t uvn_devstate_faults(int ordinal, int *err) {
  struct devstate *d = get(ordinal);
  uint64_t n = 0;
  *err = 0;
  if (d == NULL) return 0;
  pthread_mutex_lock(&d->mu);
  n = d->faults;
  *err = d->fault_err;
  pthread_mutex_unlock(&d->mu);
  return n;
}

int uvn_devstate_fault_now(int ordinal) {
  struct devstate *d = get(ordinal);
  int err = 0;
  if (d == NULL) return 0;
  /* Another copy's reset takes the fault with the old context: found here
   * too, it is a new generation, which the old fault is not of. */
  foreign_check(d, ordinal);
  pthread_mutex_lock(&d->mu);
  if (d->faults > 0 && d->fault_gen == __atomic_load_n(&d->gen, __ATOMIC_ACQUIRE))
    err = d->fault_err;
  pthread_mutex_unlock(&d->mu);
  return err;
}

/* ---- subscribers and the watcher --------------------------------------- */

struct sub {
  napi_threadsafe_function tsfn;
  struct uvcuda__queue node; /* on subs */
};

static pthread_mutex_t subs_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t subs_cv = PTHREAD_COND_INITIALIZER;
static struct uvcuda__queue subs = {&subs, &subs};
static int watcher_started;

static void announce(int kind, int ordinal, uint64_t gen) {
  struct uvcuda__queue *q;
  struct uvn_note *n;
  pthread_mutex_lock(&subs_mu);
  uvcuda__queue_foreach(q, &subs) {
    struct sub *s = uvcuda__queue_data(q, struct sub, node);
    if ((n = malloc(sizeof(*n))) == NULL) continue;
    n->kind = kind;
    n->ordinal = ordinal;
    n->gen = gen;
    /* Non-blocking: an env that is going away answers napi_closing. */
    if (napi_call_threadsafe_function(s->tsfn, n, napi_tsfn_nonblocking) != napi_ok)
      free(n);
  }
  pthread_mutex_unlock(&subs_mu);
}

void uvn_devstate_note_fault(int ordinal, uint64_t gen, int err) {
  struct devstate *d = get(ordinal);
  int fresh = 0;
  if (d == NULL || err == 0) return;
  pthread_mutex_lock(&d->mu);
  if (d->faults == 0 || d->fault_gen != gen) {
    d->faults++;
    d->fault_gen = gen;
    d->fault_err = err;
    fresh = 1;
  }
  pthread_mutex_unlock(&d->mu);
  if (fresh) announce(UVN_NOTE_FAULT, ordinal, gen);
}

/* Every 100 ms while some env is subscribed: the health of every open
 * device, so that a fault no promise of ours meets (work of other code in
 * the same context, or of a worker that was terminated) is announced too.
 * uvcuda_context_health queries a private idle stream of uvcuda's (about a
 * µs) in RELAXED capture mode. */
static void *watch_main(void *arg) {
  struct timespec ts = {0, WATCH_INTERVAL_NS};
  CUstreamCaptureMode relaxed = CU_STREAM_CAPTURE_MODE_RELAXED;
  uint64_t gen;
  CUcontext ctx;
  int i, err;
  (void)arg;
  /* A query from this thread must never invalidate a capture that a JS
   * thread records in the default (GLOBAL) mode. */
  uvn_cu.cuThreadExchangeStreamCaptureMode(&relaxed);
  for (;;) {
    pthread_mutex_lock(&subs_mu);
    while (uvcuda__queue_empty(&subs)) pthread_cond_wait(&subs_cv, &subs_mu);
    pthread_mutex_unlock(&subs_mu);
    nanosleep(&ts, NULL);
    for (i = 0; i < ndev; i++) {
      /* uvn_devstate_enter looks for a foreign reset too: an env with nothing
       * to do hears of it (its 'reset') within a watch interval. */
      if (uvn_devstate_enter(i, &gen) != 0) continue;
      err = 0;
      pthread_mutex_lock(&devs[i].mu);
      ctx = devs[i].ctx;
      /* Under mu: the last env cannot release the context meanwhile. */
      if (ctx != NULL) err = uvcuda_context_health((uvcuda_context_t)ctx);
      pthread_mutex_unlock(&devs[i].mu);
      if (uvcuda_cuda_result(err) != 0) uvn_devstate_note_fault(i, gen, err);
      uvn_devstate_leave(i);
    }
  }
  return NULL;
}

int uvn_devstate_subscribe(napi_threadsafe_function tsfn) {
  struct sub *s = calloc(1, sizeof(*s));
  pthread_t t;
  pthread_attr_t attr;
  if (s == NULL) return UVCUDA_ENOMEM;
  s->tsfn = tsfn;
  pthread_mutex_lock(&subs_mu);
  uvcuda__queue_insert_head(&subs, &s->node);
  if (!watcher_started) {
    /* Detached, for the life of the process (the addon stays resident). */
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, watch_main, NULL) == 0) watcher_started = 1;
    pthread_attr_destroy(&attr);
  }
  pthread_cond_signal(&subs_cv);
  pthread_mutex_unlock(&subs_mu);
  return 0;
}

void uvn_devstate_unsubscribe(napi_threadsafe_function tsfn) {
  struct uvcuda__queue *q;
  struct sub *s = NULL;
  pthread_mutex_lock(&subs_mu);
  uvcuda__queue_foreach(q, &subs) {
    s = uvcuda__queue_data(q, struct sub, node);
    if (s->tsfn == tsfn) break;
    s = NULL;
  }
  if (s != NULL) uvcuda__queue_remove(&s->node);
  pthread_mutex_unlock(&subs_mu);
  free(s);
}

/* ---- peer access ---------------------------------------------------------- */

void uvn_devstate_peer_enable(int from, uint64_t from_gen, int peer, uint64_t peer_gen) {
  struct devstate *d = get(from);
  if (d == NULL || get(peer) == NULL) return;
  pthread_mutex_lock(&d->mu);
  d->peers[peer].on = 1;
  d->peers[peer].gen = from_gen;
  d->peers[peer].peer_gen = peer_gen;
  pthread_mutex_unlock(&d->mu);
}

int uvn_devstate_peer_ok(int from, int peer) {
  struct devstate *d = get(from);
  struct peer p;
  if (from == peer) return 1;
  if (d == NULL || get(peer) == NULL) return 0;
  pthread_mutex_lock(&d->mu);
  p = d->peers[peer];
  pthread_mutex_unlock(&d->mu);
  return p.on && p.gen == uvn_devstate_gen(from) && p.peer_gen == uvn_devstate_gen(peer);
}
