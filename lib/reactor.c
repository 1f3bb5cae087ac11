/* The reactor: one thread per process that watches the GPU-written counters
 * of armed timelines and rings the owning loop's uv_async_t once a counter
 * passes the loop's threshold. It reads counters and timeline fields under
 * its lock and never dereferences a future. It also probes the streams of
 * armed timelines for sticky errors, since after a fault no counter write
 * and no host function ever arrives.
 *
 * Back-off while armed: busy-poll for spin_ns after the last progress or
 * arm, then sched_yield between passes until yield_ns, then sleep between
 * passes, doubling up to sleep_max_ns; an arm wakes a sleeping reactor and
 * restarts the back-off. With only host-function timelines armed it
 * just probes, every probe interval. With nothing armed it parks on a
 * condition variable and is woken only when a timeline is armed. Started by
 * the first loop that needs it, joined when the last one detaches.
 *
 * A counter that passed moves its timeline to the loop's fired list, so the
 * woken loop looks at those timelines only, not at every one it has. Driver
 * calls (the probes) are made outside the lock: a driver call can block,
 * and loop threads take this lock to arm. */
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
/* sleeping: in a timed wait of the back-off (not parked); kicked: a counter
 * was armed since the last pass. An arm restarts the back-off: new work is
 * as likely to finish soon as work right after progress. */
static int sleeping, kicked;
static unsigned users;
static struct uvcuda__loop *loops;
static uint64_t narmed_mem, narmed_probe; /* armed timelines by kind */
/* Loop threads waiting for mu: the reactor, which retakes mu after each
 * pass, lets them in first instead of winning every race for it. */
static atomic_int want;
static struct uvcuda__slot_page *reap; /* closed loops' pages, to free */

#define PROBE_MAX 64 /* (loop, context) pairs probed per round */

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

/* mu, taken by a loop thread. */
static void lock_loopside(void) {
  atomic_fetch_add_explicit(&want, 1, memory_order_relaxed);
  pthread_mutex_lock(&mu);
  atomic_fetch_sub_explicit(&want, 1, memory_order_relaxed);
}

/* A timed wait of the back-off; an arm of a counter cuts it short. */
static void cond_timedwait(uint64_t ns) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ts.tv_sec += (time_t)(ns / 1000000000u);
  ts.tv_nsec += (long)(ns % 1000000000u);
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  sleeping = 1;
  pthread_cond_timedwait(&cond, &mu, &ts);
  sleeping = 0;
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

static void link_fired(struct uvcuda__loop *l, struct uvcuda__timeline *tl) {
  tl->r_fired = 1;
  tl->rprev = NULL;
  tl->rnext = l->rfired;
  if (l->rfired) l->rfired->rprev = tl;
  l->rfired = tl;
}

static void unlink_fired(struct uvcuda__loop *l, struct uvcuda__timeline *tl) {
  if (tl->rprev) tl->rprev->rnext = tl->rnext; else l->rfired = tl->rnext;
  if (tl->rnext) tl->rnext->rprev = tl->rprev;
  tl->rnext = tl->rprev = NULL;
  tl->r_fired = 0;
}

/* Off both of the loop's watch lists. Caller holds mu. */
static void unwatch(struct uvcuda__loop *l, struct uvcuda__timeline *tl) {
  if (tl->r_armed) unlink_armed(l, tl);
  if (tl->r_fired) unlink_fired(l, tl);
}

static void ring(struct uvcuda__loop *l) {
  atomic_store_explicit(&l->rang, 1, memory_order_relaxed);
  uv_async_send(&l->async); /* under mu: the loop detaches under mu first */
}

/* One pass over every armed counter. Caller holds mu. */
static int scan(void) {
  struct uvcuda__loop *l;
  struct uvcuda__timeline *tl, *next;
  uint64_t now = 0;
  int fired = 0, hit;

  for (l = loops; l; l = l->rnext) {
    hit = 0;
    for (tl = l->rarmed; tl; tl = next) {
      next = tl->rnext;
      if (reached(tl)) {
        if (l->opts.flags & UVCUDA_OPT_TIMING) { /* one clock read a pass */
          if (now == 0) now = uv_hrtime();
          tl->r_seen_ns = now;
        }
        unlink_armed(l, tl); /* the loop re-arms what is still pending */
        link_fired(l, tl);
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
 * the queries run without it. A probed loop's probe_refs holds back its
 * callbacks (which may destroy the stream) and its detach. */
static void probe(void) {
  struct {
    struct uvcuda__loop *l;
    CUstream s;
    CUcontext c;
    CUresult r;
    int slot;
  } t[PROBE_MAX];
  struct uvcuda__loop *l;
  struct uvcuda__timeline *tl;
  CUcontext prev = NULL;
  int n = 0, i, k, used;

  for (l = loops; l && n < PROBE_MAX; l = l->rnext) {
    used = 0;
    for (tl = l->rarmed; tl && n < PROBE_MAX; tl = tl->rnext) {
      for (k = n - 1; k >= 0 && t[k].l == l; k--)
        if (t[k].c == tl->cuctx) break;
      if (k >= 0 && t[k].l == l) continue; /* context already taken */
      if (used == UVCUDA__PROBE_PER_LOOP) break; /* the rest next round */
      t[n].l = l;
      t[n].s = tl->stream;
      t[n].c = tl->cuctx;
      t[n].slot = used++;
      atomic_store_explicit(&l->probing[t[n].slot], (void *)tl->stream,
                            memory_order_relaxed);
      atomic_fetch_add_explicit(&l->probe_refs, 1, memory_order_relaxed);
      n++;
    }
  }
  if (n == 0) return;
  uv_mutex_unlock(&mu);
  uvcuda__drv.cuCtxGetCurrent(&prev);
  for (i = 0; i < n; i++) {
    if (t[i].c != prev) uvcuda__drv.cuCtxSetCurrent(t[i].c);
    prev = t[i].c;
    t[i].r = uvcuda__drv.cuStreamQuery(t[i].s);
  }
  uv_mutex_lock(&mu);
  for (i = 0; i < n; i++) {
    l = t[i].l;
    if (t[i].r != CUDA_SUCCESS && t[i].r != CUDA_ERROR_NOT_READY &&
        l->reactor_attached) {
      atomic_store_explicit(&l->fault_suspect, 1, memory_order_relaxed);
      ring(l);
    }
    atomic_store_explicit(&l->probing[t[i].slot], UVCUDA__PROBE_NONE,
                          memory_order_relaxed);
    /* After this the reactor does not touch l again. */
    atomic_fetch_sub_explicit(&l->probe_refs, 1, memory_order_release);
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

/* After dropping mu for a moment: a loop thread waiting for it gets it. */
static void step_aside(void) {
  unsigned i;
  for (i = 0; i < 4; i++) cpu_relax(); /* ~0.5 us: keep latency low */
  for (i = 0; i < 1024 && atomic_load_explicit(&want, memory_order_relaxed); i++)
    cpu_relax();
}

/* Frees the pages of closed loops. Caller holds mu; cuMemFreeHost may
 * block for as long as the device is busy, so it runs without it. */
static void free_reaped(void) {
  struct uvcuda__slot_page *p = reap;
  if (p == NULL) return;
  reap = NULL;
  uv_mutex_unlock(&mu);
  uvcuda__pages_free(p);
  uv_mutex_lock(&mu);
}

static void reactor_main(void *arg) {
  uint64_t last_progress, next_probe, now, spin, yield, sleep_max, probe_ns;
  uint64_t sleep_ns = 0;
  (void)arg;

#if defined(__GLIBC__)
  pthread_setname_np(pthread_self(), "uvcuda-reactor"); /* top -H, gdb */
#endif
  uv_mutex_lock(&mu);
  last_progress = uv_hrtime();
  next_probe = last_progress;
  while (!stopping) {
    if (reap != NULL) {
      free_reaped();
      continue;
    }
    if (narmed_mem == 0 && narmed_probe == 0) {
      parked = 1;
      pthread_cond_wait(&cond, &mu);
      parked = 0;
      last_progress = uv_hrtime();
      next_probe = last_progress;
      sleep_ns = 0;
      continue;
    }
    if (kicked) {
      kicked = 0;
      last_progress = uv_hrtime();
      sleep_ns = 0;
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
      step_aside();
      uv_mutex_lock(&mu);
    } else if (now - last_progress < yield) {
      uv_mutex_unlock(&mu);
      sched_yield();
      step_aside();
      uv_mutex_lock(&mu);
    } else {
      sleep_ns = sleep_ns ? sleep_ns * 2 : 10000;
      if (sleep_ns > sleep_max) sleep_ns = sleep_max;
      if (sleep_ns > probe_ns) sleep_ns = probe_ns;
      cond_timedwait(sleep_ns);
    }
  }
  free_reaped(); /* the last detach joins: it waits for this */
  uv_mutex_unlock(&mu);
}

int uvcuda__reactor_attach(struct uvcuda__loop *l) {
  int err = 0;
  pthread_once(&once, init_once);
  lock_loopside();
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
  lock_loopside();
  while ((tl = l->rarmed) != NULL) unlink_armed(l, tl);
  while ((tl = l->rfired) != NULL) unlink_fired(l, tl);
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
  /* A probe in flight still holds l (it rings it on a fault). */
  while (atomic_load_explicit(&l->probe_refs, memory_order_acquire) > 0)
    sched_yield();
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
  if (tl->r_fired) unlink_fired(l, tl); /* watched again from here */
  if (tl->r_armed) return;
  tl->r_armed = 1;
  tl->rprev = NULL;
  tl->rnext = l->rarmed;
  if (l->rarmed) l->rarmed->rprev = tl;
  l->rarmed = tl;
  if (tl->mode == UVCUDA__TL_HOSTFN) {
    narmed_probe++;
    if (parked) pthread_cond_signal(&cond);
    return; /* only probed: the probe interval paces it */
  }
  narmed_mem++;
  kicked = 1;
  /* Wake only a waiting reactor: a spinning one sees the new entry on its
   * next pass, and signalling it each time costs the loop a syscall. */
  if (parked || sleeping) pthread_cond_signal(&cond);
}

void uvcuda__reactor_arm(struct uvcuda__loop *l, struct uvcuda__timeline *tl,
                         uint64_t threshold) {
  if (!l->reactor_attached) return;
  lock_loopside();
  arm_locked(l, tl, threshold);
  uv_mutex_unlock(&mu);
}

void uvcuda__reactor_disarm(struct uvcuda__loop *l, struct uvcuda__timeline *tl) {
  tl->r_shadow = 0;
  if (!l->reactor_attached) return;
  lock_loopside();
  unwatch(l, tl);
  uv_mutex_unlock(&mu);
}

/* Caller holds mu. */
static void sync_one(struct uvcuda__loop *l, struct uvcuda__timeline *tl) {
  uint64_t thr;
  if (uvcuda__tl_watch(l, tl, &thr)) {
    arm_locked(l, tl, thr);
  } else if (tl->r_shadow) {
    unwatch(l, tl);
    tl->r_shadow = 0;
  }
}

void uvcuda__reactor_sync(struct uvcuda__loop *l) {
  struct uvcuda__timeline *tl;
  if (!l->reactor_attached) return;
  lock_loopside();
  for (tl = l->active; tl; tl = tl->anext) sync_one(l, tl);
  uv_mutex_unlock(&mu);
}

void uvcuda__reactor_sync_touched(struct uvcuda__loop *l) {
  struct uvcuda__timeline *tl;
  int locked = 0;
  for (tl = l->touched; tl; tl = tl->tnext) {
    if (!tl->need_sync) continue;
    tl->need_sync = 0;
    if (!l->reactor_attached) continue; /* POLL: nothing watches */
    if (!locked) {
      lock_loopside();
      locked = 1;
    }
    sync_one(l, tl);
  }
  if (locked) uv_mutex_unlock(&mu);
  l->nneed_sync = 0;
}

void uvcuda__reactor_take_fired(struct uvcuda__loop *l) {
  struct uvcuda__timeline *tl;
  if (!l->reactor_attached) return;
  lock_loopside();
  while ((tl = l->rfired) != NULL) {
    unlink_fired(l, tl);
    tl->seen_ns = tl->r_seen_ns;
    uvcuda__tl_touch(l, tl, 1); /* harvest it, then re-arm what is left */
  }
  uv_mutex_unlock(&mu);
}

void uvcuda__reactor_free_pages(struct uvcuda__slot_page *pages) {
  struct uvcuda__slot_page *last;
  if (pages == NULL) return;
  pthread_once(&once, init_once);
  lock_loopside();
  if (running && !stopping) {
    for (last = pages; last->next; last = last->next) {}
    last->next = reap;
    reap = pages;
    if (parked) pthread_cond_signal(&cond);
    pages = NULL;
  }
  uv_mutex_unlock(&mu);
  uvcuda__pages_free(pages); /* no reactor: here (may wait for the GPU) */
}

int uvcuda__reactor_running(void) {
  int r;
  pthread_once(&once, init_once);
  lock_loopside();
  r = running;
  uv_mutex_unlock(&mu);
  return r;
}
