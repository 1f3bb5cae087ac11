/* The reactor thread. It reads counters and watch fields under its lock
 * and knows nothing above a watch: fired watches go back to their loop on
 * a queue.
 *
 * Back-off while counters are armed: busy-poll for spin_ns after the last
 * progress or arm, then sched_yield between passes until yield_ns, then
 * sleep between passes, doubling up to sleep_max_ns; an arm wakes a
 * sleeping reactor and restarts the back-off. With only host-function
 * watches it just probes, every probe interval. With nothing watched it
 * busy-polls for spin_ns more (the next arm then needs no wake-up), then
 * parks on a condition variable until a watch is armed. Started by the
 * first loop that needs it, retired when the last one detaches: joined
 * then, unless it is inside a driver call, which can block for as long as
 * another thread holds the driver (a module's JIT: seconds). Such a thread
 * is detached instead and ends on its own once the call returns; nobody
 * waits for it.
 *
 * Driver calls (the probes) run outside the lock: a driver call can block,
 * and loop threads take this lock to arm. */
#define _GNU_SOURCE 1 /* PTHREAD_MUTEX_ADAPTIVE_NP, pthread_setname_np */
#include "reactor.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>

#include "context.h"
#include "counter.h"
#ifdef __linux__
#include "timerfd.h"
#endif

static pthread_once_t once = PTHREAD_ONCE_INIT;
/* Adaptive: the loop thread takes this lock while the reactor, in its spin
 * phase, takes it every pass; a short spin beats a futex sleep. */
static pthread_mutex_t mu;
static pthread_cond_t cond;
/* This round's contexts, the thread's own: a retired thread still in its
 * driver calls holds its list while the next thread makes one. */
typedef struct {
  struct uvcuda__context **v;
  size_t n, cap;
} plist_t;

/* A reactor thread. `cur` is the one serving the clients; a retired one
 * touches nothing shared once it sees that it is no longer `cur` (checked
 * under mu after every wait and driver call) and returns. */
struct rthread {
  uv_thread_t t;
  int in_driver; /* its probes' driver calls, mu dropped */
  int detached;  /* retired there: it frees itself */
  plist_t pl;    /* here, not on its stack: reachable from `cur` (valgrind
                    in a child forked after the load sees no other thread) */
};
static struct rthread *cur;
static int parked;
/* sleeping: in a timed wait of the back-off (not parked); kicked: a counter
 * was armed since the last pass. An arm restarts the back-off: new work is
 * as likely to finish soon as work right after progress. */
static int sleeping, kicked;
static unsigned users;
static struct uvcuda__queue clients;
/* Loop threads waiting for mu: the reactor, which retakes mu after each
 * pass, lets them in first instead of winning every race for it. */
static atomic_int want;
static unsigned seen_epoch; /* fault epoch the clients were rung for */
static unsigned probe_round;

static void init_once(void) {
  pthread_mutexattr_t ma;
  pthread_condattr_t ca;
  pthread_mutexattr_init(&ma);
#if defined(__GLIBC__)
  pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
#endif
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  if (pthread_mutex_init(&mu, &ma) != 0 || pthread_cond_init(&cond, &ca) != 0)
    abort();
  pthread_mutexattr_destroy(&ma);
  pthread_condattr_destroy(&ca);
  uvcuda__queue_init(&clients);
}

/* mu, taken by a loop thread. */
static void lock_loopside(void) {
  atomic_fetch_add_explicit(&want, 1, memory_order_relaxed);
  pthread_mutex_lock(&mu);
  atomic_fetch_sub_explicit(&want, 1, memory_order_relaxed);
}

/* A timed wait of the back-off; an arm cuts it short. Caller holds mu. */
static void timed_wait(const struct rthread *me, uint64_t ns) {
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
  if (me == cur) sleeping = 0;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

#define client_of(q) uvcuda__queue_data(q, struct uvcuda__rclient, node)
#define watch_of(q) uvcuda__queue_data(q, struct uvcuda__watch, node)

static void ring(struct uvcuda__rclient *c) {
  atomic_store(&c->held, 1);
  if (atomic_load(&c->polling)) return; /* it looks at `held` next pass */
  atomic_store_explicit(&c->rang, 1, memory_order_relaxed);
  atomic_store(&c->sent, 1); /* before the write: the loop clears it after */
  uv_async_send(c->async); /* under mu: a loop detaches under mu first */
}

/* One pass over every armed counter. Caller holds mu. A loop is rung at
 * its first hit, not after the rest of the scan, so that its wake-up
 * overlaps the scan's tail (run 12 on the H200 could not resolve a gain);
 * what fires meanwhile is on its fired queue before it can take mu. */
static int scan(void) {
  struct uvcuda__queue *cq, *q, *next;
  uint64_t now = 0;
  int fired = 0;

  uvcuda__queue_foreach(cq, &clients) {
    struct uvcuda__rclient *c = client_of(cq);
    int hit = 0;
    for (q = c->armed.next; q != &c->armed; q = next) {
      struct uvcuda__watch *w = watch_of(q);
      next = q->next;
      if (!uvcuda__counter_passed(uvcuda__counter_load(w->host, w->mode),
                                  w->mode, w->threshold))
        continue;
      if (c->timing) { /* one clock read a pass */
        if (now == 0) now = uv_hrtime();
        w->seen_ns = now;
      }
      uvcuda__queue_remove(q); /* the loop re-arms what is still pending */
      uvcuda__queue_insert_tail(&c->fired, q);
      if (!hit) ring(c);
      hit = 1;
    }
    fired |= hit;
  }
  return fired;
}

static void take_probes(plist_t *pl, const struct uvcuda__queue *h) {
  const struct uvcuda__queue *q;
  uvcuda__queue_foreach(q, h) {
    struct uvcuda__context *x = watch_of(q)->ctx;
    if (x->probe_stamp == probe_round) continue;
    if (pl->n == pl->cap) {
      size_t cap = pl->cap ? 2 * pl->cap : 16;
      void *v = realloc(pl->v, cap * sizeof(*pl->v));
      if (v == NULL) return; /* the next round probes the rest */
      pl->v = v;
      pl->cap = cap;
    }
    x->probe_stamp = probe_round;
    uvcuda__context_ref(x); /* its timeline may go while mu is dropped */
    pl->v[pl->n++] = x;
  }
}

/* Probes each context of a watched counter once. Caller holds mu; the
 * driver calls run without it (each record is referenced for the round). */
static void probe(struct rthread *me, plist_t *pl, uint64_t now,
                  uint64_t interval) {
  struct uvcuda__queue *cq;
  size_t i;
  probe_round++;
  pl->n = 0;
  uvcuda__queue_foreach(cq, &clients) {
    take_probes(pl, &client_of(cq)->armed);
    take_probes(pl, &client_of(cq)->probed);
  }
  if (pl->n == 0) return;
  me->in_driver = 1;
  pthread_mutex_unlock(&mu);
  for (i = 0; i < pl->n; i++) {
    uvcuda__context_probe(pl->v[i], now, interval);
    uvcuda__context_release(pl->v[i]);
  }
  pthread_mutex_lock(&mu);
  me->in_driver = 0;
}

/* A context turned faulted (found here or by a loop): every loop looks. */
static void ring_on_fault(void) {
  struct uvcuda__queue *cq;
  unsigned e = uvcuda__context_epoch();
  if (e == seen_epoch) return;
  seen_epoch = e;
  /* Only loops with work the reactor serves (watched) or that poll: one
   * with none has no future to fail, and a ring would leave its backend
   * fd readable with nothing to run. */
  uvcuda__queue_foreach(cq, &clients) {
    struct uvcuda__rclient *c = client_of(cq);
    if (!uvcuda__queue_empty(&c->armed) || !uvcuda__queue_empty(&c->probed) ||
        !uvcuda__queue_empty(&c->fired) || atomic_load(&c->polling))
      ring(c);
  }
}

/* The most eager back-off among clients with watches; what they watch. */
static void bounds(uint64_t *spin, uint64_t *yield, uint64_t *sleep_max,
                   uint64_t *probe_ns, int *mem, int *any) {
  struct uvcuda__queue *cq;
  *spin = *yield = *sleep_max = *probe_ns = UINT64_MAX;
  *mem = *any = 0;
  uvcuda__queue_foreach(cq, &clients) {
    struct uvcuda__rclient *c = client_of(cq);
    int m = !uvcuda__queue_empty(&c->armed);
    if (!m && uvcuda__queue_empty(&c->probed)) continue;
    *mem |= m;
    *any = 1;
    if (c->spin_ns < *spin) *spin = c->spin_ns;
    if (c->yield_ns < *yield) *yield = c->yield_ns;
    if (c->sleep_max_ns < *sleep_max) *sleep_max = c->sleep_max_ns;
    if (c->probe_ns < *probe_ns) *probe_ns = c->probe_ns;
  }
}

/* After dropping mu for a moment: a loop thread waiting for it gets it. */
static void step_aside(void) {
  unsigned i;
  for (i = 0; i < 4; i++) cpu_relax(); /* ~0.5 us: keep latency low */
  for (i = 0; i < 1024 && atomic_load_explicit(&want, memory_order_relaxed);
       i++)
    cpu_relax();
}

/* The clients' near pre-wake timers, as their loops last asked. Caller
 * holds mu: a client's fd is closed only after it detached, under mu. */
static void set_timers(void) {
#ifdef __linux__
  struct uvcuda__queue *cq;
  uvcuda__queue_foreach(cq, &clients) {
    struct uvcuda__rclient *c = client_of(cq);
    if (c->wake_want == c->wake_set || c->tfd < 0) continue;
    uvcuda__timerfd_set(c->tfd, c->wake_want);
    c->wake_set = c->wake_want;
  }
#endif
}

/* How long the reactor busy-polls once nothing is watched, before it
 * parks: the smallest spin_ns of the clients. Futures often come back to
 * back (a callback starts the next one), and an arm that finds the
 * reactor parked pays a futex wake on the loop thread, one per future. */
static uint64_t linger_ns(void) {
  struct uvcuda__queue *cq;
  uint64_t ns = UINT64_MAX;
  uvcuda__queue_foreach(cq, &clients) {
    if (client_of(cq)->spin_ns < ns) ns = client_of(cq)->spin_ns;
  }
  return ns == UINT64_MAX ? 0 : ns;
}

static void reactor_main(void *arg) {
  struct rthread *me = arg;
  uint64_t last_progress, next_probe, now, spin, yield, sleep_max, probe_ns;
  uint64_t sleep_ns = 0, idle_since = 0;
  int mem, any, self_free, idle = 0;

#if defined(__GLIBC__)
  pthread_setname_np(pthread_self(), "uvcuda-reactor"); /* top -H, gdb */
#endif
  pthread_mutex_lock(&mu);
  last_progress = uv_hrtime();
  next_probe = last_progress;
  while (me == cur) {
    ring_on_fault();
    set_timers();
    bounds(&spin, &yield, &sleep_max, &probe_ns, &mem, &any);
    if (!any) {
      now = uv_hrtime();
      if (!idle) idle_since = now;
      idle = 1;
      if (now - idle_since < linger_ns()) {
        pthread_mutex_unlock(&mu);
        step_aside();
        pthread_mutex_lock(&mu);
        continue;
      }
      idle = 0;
      parked = 1;
      pthread_cond_wait(&cond, &mu);
      if (me != cur) break;
      parked = 0;
      last_progress = uv_hrtime();
      next_probe = last_progress;
      sleep_ns = 0;
      continue;
    }
    idle = 0;
    if (kicked) {
      kicked = 0;
      last_progress = uv_hrtime();
      sleep_ns = 0;
    }
    if (scan()) {
      last_progress = uv_hrtime();
      sleep_ns = 0;
    }
    now = uv_hrtime();
    if (now >= next_probe) {
      probe(me, &me->pl, now, probe_ns);
      next_probe = now + probe_ns;
      continue; /* mu was dropped: look at the clients again */
    }
    if (!mem) { /* only host functions: nothing to read */
      timed_wait(me, next_probe - now);
      continue;
    }
    if (now - last_progress < spin) {
      pthread_mutex_unlock(&mu);
      step_aside();
      pthread_mutex_lock(&mu);
    } else if (now - last_progress < yield) {
      pthread_mutex_unlock(&mu);
      sched_yield();
      step_aside();
      pthread_mutex_lock(&mu);
    } else {
      sleep_ns = sleep_ns ? sleep_ns * 2 : 10000;
      if (sleep_ns > sleep_max) sleep_ns = sleep_max;
      if (sleep_ns > next_probe - now) sleep_ns = next_probe - now;
      timed_wait(me, sleep_ns);
    }
  }
  self_free = me->detached; /* else its joiner frees it */
  pthread_mutex_unlock(&mu);
  free(me->pl.v);
  if (self_free) free(me);
}

int uvcuda__reactor_attach(struct uvcuda__rclient *c) {
  int err = 0;
  pthread_once(&once, init_once);
  uvcuda__queue_init(&c->armed);
  uvcuda__queue_init(&c->probed);
  uvcuda__queue_init(&c->fired);
  uvcuda__queue_init(&c->node); /* not a client until listen */
  atomic_init(&c->rang, 0);
  atomic_init(&c->held, 0);
  atomic_init(&c->polling, 0);
  atomic_init(&c->sent, 0);
  c->tfd = -1;
  c->wake_want = c->wake_set = 0;
  lock_loopside();
  /* No reactor (the last loop left, its thread retired or still ending):
   * start one here, so that a refusal is this attach's error and never a
   * loop left without a reactor. */
  if (cur == NULL) {
    struct rthread *t = calloc(1, sizeof(*t));
    seen_epoch = uvcuda__context_epoch();
    kicked = sleeping = parked = 0;
    cur = t;
    /* Refused (EAGAIN: out of threads or memory for a stack): exhausted
     * resources, the documented UVCUDA_ENOMEM. */
    if (t == NULL || uv_thread_create(&t->t, reactor_main, t) != 0) {
      cur = NULL;
      free(t);
      err = UVCUDA_ENOMEM;
    }
  }
  if (err == 0) users++;
  pthread_mutex_unlock(&mu);
  return err;
}

void uvcuda__reactor_listen(struct uvcuda__rclient *c) {
  lock_loopside();
  uvcuda__queue_insert_tail(&clients, &c->node);
  pthread_mutex_unlock(&mu);
}

static void unwatch_all(struct uvcuda__queue *h) {
  while (!uvcuda__queue_empty(h)) uvcuda__queue_remove(uvcuda__queue_head(h));
}

void uvcuda__reactor_detach(struct uvcuda__rclient *c) {
  struct rthread *join = NULL;

  lock_loopside();
  unwatch_all(&c->armed);
  unwatch_all(&c->probed);
  unwatch_all(&c->fired);
  uvcuda__queue_remove(&c->node);
  /* The last one retires the thread: from here it never touches a client
   * (it sees it is not `cur` under mu first). Parked, sleeping or between
   * passes it ends in µs and is joined here; inside a driver call it is
   * detached and left to end on its own (and free itself), so that no
   * close waits for the driver. */
  if (--users == 0 && cur != NULL) {
    join = cur;
    cur = NULL;
    kicked = sleeping = parked = 0;
    pthread_cond_broadcast(&cond);
    if (join->in_driver) {
      join->detached = 1;
      pthread_detach(join->t);
      join = NULL;
    }
  }
  pthread_mutex_unlock(&mu);
  if (join != NULL) {
    uv_thread_join(&join->t);
    free(join);
  }
}

void uvcuda__reactor_sync_begin(struct uvcuda__rclient *c) {
  (void)c;
  lock_loopside();
}

void uvcuda__reactor_watch(struct uvcuda__rclient *c, struct uvcuda__watch *w,
                           uint64_t threshold) {
  uvcuda__queue_remove(&w->node); /* from armed, probed or fired */
  if (threshold == 0) return;
  w->threshold = threshold;
  if (w->host == NULL) {
    uvcuda__queue_insert_tail(&c->probed, &w->node);
    if (parked) pthread_cond_signal(&cond);
    return; /* only probed: the probe interval paces it */
  }
  uvcuda__queue_insert_tail(&c->armed, &w->node);
  kicked = 1;
  /* Wake only a waiting reactor: a spinning one sees the new entry on its
   * next pass, and signalling it each time costs the loop a syscall. */
  if (parked || sleeping) pthread_cond_signal(&cond);
}

void uvcuda__reactor_wake_at(struct uvcuda__rclient *c, uint64_t at) {
  c->wake_want = at;
  /* An arm of this batch (kicked) woke it already. */
  if (!kicked && (parked || sleeping)) {
    kicked = 1;
    pthread_cond_signal(&cond);
  }
}

void uvcuda__reactor_wake_set(struct uvcuda__rclient *c, uint64_t at) {
  c->wake_want = c->wake_set = at;
}

void uvcuda__reactor_sync_end(struct uvcuda__rclient *c) {
  (void)c;
  pthread_mutex_unlock(&mu);
}

void uvcuda__reactor_take_fired(struct uvcuda__rclient *c,
                                struct uvcuda__queue *out) {
  lock_loopside();
  uvcuda__queue_move(&c->fired, out);
  pthread_mutex_unlock(&mu);
}

int uvcuda__reactor_running(void) {
  int r;
  pthread_once(&once, init_once);
  lock_loopside();
  r = cur != NULL;
  pthread_mutex_unlock(&mu);
  return r;
}
