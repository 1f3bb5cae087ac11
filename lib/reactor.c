/* The reactor: one thread per process that watches the GPU-written counters
 * of armed timelines and rings the owning loop's uv_async_t once a counter
 * passes the loop's threshold. It reads counters and timeline fields under
 * its lock and never dereferences a future. It also probes the streams of
 * armed timelines for sticky errors, since after a fault no counter write
 * and no host function ever arrives.
 *
 * Back-off while armed: busy-poll for spin_ns after the last progress, then
 * sched_yield between passes until yield_ns, then sleep between passes,
 * doubling up to sleep_max_ns. With only host-function timelines armed it
 * just probes, every probe interval. With nothing armed it parks on a
 * condition variable and is woken only when a timeline is armed. Started by
 * the first loop that needs it, joined when the last one detaches. */
#define _GNU_SOURCE 1 /* PTHREAD_MUTEX_ADAPTIVE_NP */
#include "internal.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>

/* Adaptive: the loop thread takes this lock while the reactor is in its
 * spin phase, taking it every pass; a short spin beats a futex sleep. */
static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_mutex_t mu;
static pthread_cond_t cond;
static uv_thread_t thread;
static int running, stopping, parked, joining;
static unsigned users;
static struct uvcuda__loop *loops;
static uint64_t narmed_mem, narmed_probe; /* armed timelines by kind */

static void init_once(void) {
  pthread_mutexattr_t ma;
  pthread_condattr_t ca;
  pthread_mutexattr_init(&ma);
#if defined(__GLIBC__) && defined(__USE_GNU)
  pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
#endif
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  if (pthread_mutex_init(&mu, &ma) != 0 || pthread_cond_init(&cond, &ca) != 0)
    abort();
  pthread_mutexattr_destroy(&ma);
  pthread_condattr_destroy(&ca);
}

#define uv_mutex_lock(m) pthread_mutex_lock(m)
#define uv_mutex_unlock(m) pthread_mutex_unlock(m)

static void cond_timedwait(uint64_t ns) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ts.tv_sec += (time_t)(ns / 1000000000u);
  ts.tv_nsec += (long)(ns % 1000000000u);
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  pthread_cond_timedwait(&cond, &mu, &ts);
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

static int reached(const struct uvcuda__timeline *tl) {
  if (tl->mode == UVCUDA__TL_MEM64)
    return __atomic_load_n((const uint64_t *)tl->slot, __ATOMIC_ACQUIRE) >=
           tl->r_threshold;
  if (tl->mode == UVCUDA__TL_MEM32)
    return (int32_t)(__atomic_load_n((const uint32_t *)tl->slot,
                                     __ATOMIC_ACQUIRE) -
                     (uint32_t)tl->r_threshold) >= 0;
  return 0; /* host-function timelines are only probed */
}

static void unlink_armed(struct uvcuda__loop *l, struct uvcuda__timeline *tl) {
  if (tl->rprev) tl->rprev->rnext = tl->rnext; else l->rarmed = tl->rnext;
  if (tl->rnext) tl->rnext->rprev = tl->rprev;
  tl->rnext = tl->rprev = NULL;
  tl->r_armed = 0;
  if (tl->mode == UVCUDA__TL_HOSTFN) narmed_probe--; else narmed_mem--;
}

static void ring(struct uvcuda__loop *l) {
  atomic_store_explicit(&l->rang, 1, memory_order_relaxed);
  uv_async_send(&l->async); /* under mu: the loop detaches under mu first */
}

/* One pass over every armed counter. Caller holds mu. */
static int scan(void) {
  struct uvcuda__loop *l;
  struct uvcuda__timeline *tl, *next;
  int fired = 0, hit;

  for (l = loops; l; l = l->rnext) {
    hit = 0;
    for (tl = l->rarmed; tl; tl = next) {
      next = tl->rnext;
      if (reached(tl)) {
        unlink_armed(l, tl); /* the loop re-arms what is still pending */
        hit = 1;
      }
    }
    if (hit) {
      ring(l);
      fired = 1;
    }
  }
  return fired;
}

/* cuStreamQuery of one armed stream per context and loop. Caller holds mu;
 * the loop thread can't free a timeline while it is armed here. */
static void probe(void) {
  struct uvcuda__loop *l;
  struct uvcuda__timeline *tl, *t2;
  CUresult r;

  for (l = loops; l; l = l->rnext) {
    for (tl = l->rarmed; tl; tl = tl->rnext) {
      for (t2 = l->rarmed; t2 != tl; t2 = t2->rnext)
        if (t2->cuctx == tl->cuctx) break;
      if (t2 != tl) continue; /* context already probed */
      r = uvcuda__tl_query(tl);
      if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY) {
        atomic_store_explicit(&l->fault_suspect, 1, memory_order_relaxed);
        ring(l);
        break;
      }
    }
  }
}

/* The most eager back-off among loops with armed timelines. */
static void bounds(uint64_t *spin, uint64_t *yield, uint64_t *sleep_max,
                   uint64_t *probe_ns) {
  struct uvcuda__loop *l;
  *spin = *yield = *sleep_max = *probe_ns = UINT64_MAX;
  for (l = loops; l; l = l->rnext) {
    if (l->rarmed == NULL) continue;
    if (l->opts.reactor_spin_ns < *spin) *spin = l->opts.reactor_spin_ns;
    if (l->opts.reactor_yield_ns < *yield) *yield = l->opts.reactor_yield_ns;
    if (l->opts.reactor_sleep_max_ns < *sleep_max)
      *sleep_max = l->opts.reactor_sleep_max_ns;
    if (l->opts.probe_interval_ns < *probe_ns)
      *probe_ns = l->opts.probe_interval_ns;
  }
}

static void reactor_main(void *arg) {
  uint64_t last_progress, next_probe, now, spin, yield, sleep_max, probe_ns;
  uint64_t sleep_ns = 0;
  unsigned i;
  (void)arg;

  uv_mutex_lock(&mu);
  last_progress = uv_hrtime();
  next_probe = last_progress;
  while (!stopping) {
    if (narmed_mem == 0 && narmed_probe == 0) {
      parked = 1;
      pthread_cond_wait(&cond, &mu);
      parked = 0;
      last_progress = uv_hrtime();
      next_probe = last_progress;
      sleep_ns = 0;
      continue;
    }
    if (scan()) {
      last_progress = uv_hrtime();
      sleep_ns = 0;
    }
    bounds(&spin, &yield, &sleep_max, &probe_ns);
    now = uv_hrtime();
    if (now >= next_probe) {
      probe();
      next_probe = now + probe_ns;
    }
    if (narmed_mem == 0) { /* only host functions: nothing to read */
      if (narmed_probe != 0) cond_timedwait(probe_ns);
      continue;
    }
    if (now - last_progress < spin) {
      uv_mutex_unlock(&mu);
      for (i = 0; i < 4; i++) cpu_relax(); /* ~0.5 us: keep latency low */
      uv_mutex_lock(&mu);
    } else if (now - last_progress < yield) {
      uv_mutex_unlock(&mu);
      sched_yield();
      uv_mutex_lock(&mu);
    } else {
      sleep_ns = sleep_ns ? sleep_ns * 2 : 10000;
      if (sleep_ns > sleep_max) sleep_ns = sleep_max;
      if (sleep_ns > probe_ns) sleep_ns = probe_ns;
      cond_timedwait(sleep_ns); /* an arm cuts it short */
    }
  }
  uv_mutex_unlock(&mu);
}

int uvcuda__reactor_attach(struct uvcuda__loop *l) {
  int err = 0;
  pthread_once(&once, init_once);
  uv_mutex_lock(&mu);
  if (!running && !joining) {
    stopping = 0;
    err = uv_thread_create(&thread, reactor_main, NULL);
    if (err == 0) running = 1;
  }
  if (err == 0) {
    users++;
    l->rprev = NULL;
    l->rnext = loops;
    if (loops) loops->rprev = l;
    loops = l;
    l->reactor_attached = 1;
  }
  uv_mutex_unlock(&mu);
  return err;
}

void uvcuda__reactor_detach(struct uvcuda__loop *l) {
  struct uvcuda__timeline *tl;
  int join = 0;

  if (!l->reactor_attached) return;
  uv_mutex_lock(&mu);
  while ((tl = l->rarmed) != NULL) unlink_armed(l, tl);
  if (l->rprev) l->rprev->rnext = l->rnext; else loops = l->rnext;
  if (l->rnext) l->rnext->rprev = l->rprev;
  l->rnext = l->rprev = NULL;
  l->reactor_attached = 0;
  /* One joiner at a time; a loop that detaches while another joins has
   * nothing left to wait for: the thread never touches it again. */
  if (--users == 0 && !joining) {
    stopping = 1;
    joining = 1;
    join = 1;
    pthread_cond_signal(&cond);
  }
  uv_mutex_unlock(&mu);
  if (!join) return;
  uv_thread_join(&thread);
  uv_mutex_lock(&mu);
  running = 0;
  joining = 0;
  /* A loop attached while the thread was stopping found it "running" and
   * started none: start one for it now. */
  if (users > 0) {
    stopping = 0;
    if (uv_thread_create(&thread, reactor_main, NULL) == 0) running = 1;
  }
  uv_mutex_unlock(&mu);
}

/* Caller holds mu. */
static void arm_locked(struct uvcuda__loop *l, struct uvcuda__timeline *tl,
                       uint64_t threshold) {
  tl->r_threshold = threshold;
  tl->r_shadow = 1;
  if (tl->r_armed) return;
  tl->r_armed = 1;
  tl->rprev = NULL;
  tl->rnext = l->rarmed;
  if (l->rarmed) l->rarmed->rprev = tl;
  l->rarmed = tl;
  if (tl->mode == UVCUDA__TL_HOSTFN) narmed_probe++; else narmed_mem++;
  /* Wake only a parked reactor: a running one sees the new entry on its
   * next pass, and signalling it each time costs the loop. */
  if (parked) pthread_cond_signal(&cond);
}

void uvcuda__reactor_arm(struct uvcuda__loop *l, struct uvcuda__timeline *tl,
                         uint64_t threshold) {
  if (!l->reactor_attached) return;
  uv_mutex_lock(&mu);
  arm_locked(l, tl, threshold);
  uv_mutex_unlock(&mu);
}

void uvcuda__reactor_disarm(struct uvcuda__loop *l, struct uvcuda__timeline *tl) {
  tl->r_shadow = 0;
  if (!l->reactor_attached) return;
  uv_mutex_lock(&mu);
  if (tl->r_armed) unlink_armed(l, tl);
  uv_mutex_unlock(&mu);
}

void uvcuda__reactor_sync(struct uvcuda__loop *l) {
  struct uvcuda__timeline *tl;
  uint64_t thr;
  if (!l->reactor_attached) return;
  uv_mutex_lock(&mu);
  for (tl = l->active; tl; tl = tl->anext) {
    if (uvcuda__tl_watch(l, tl, &thr)) {
      arm_locked(l, tl, thr);
    } else if (tl->r_shadow) {
      if (tl->r_armed) unlink_armed(l, tl);
      tl->r_shadow = 0;
    }
  }
  uv_mutex_unlock(&mu);
}

int uvcuda__reactor_running(void) {
  int r;
  pthread_once(&once, init_once);
  uv_mutex_lock(&mu);
  r = running;
  uv_mutex_unlock(&mu);
  return r;
}
