/* The reactor thread. It reads counters and watch fields under its lock
 * and knows nothing above a watch: fired watches go back to their loop on
 * a queue.
 *
 * Back-off while counters are armed: busy-poll for spin_ns after the last
 * progress or arm, then sched_yield between passes until yield_ns, then
 * sleep between passes, doubling up to sleep_max_ns; an arm wakes a
 * sleeping reactor and restarts the back-off. With only host-function
 * watches it just probes, every probe interval. With nothing watched it
 * parks on a condition variable until a watch is armed. Started by the
 * first loop that needs it, joined when the last one detaches.
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

static pthread_once_t once = PTHREAD_ONCE_INIT;
/* Adaptive: the loop thread takes this lock while the reactor, in its spin
 * phase, takes it every pass; a short spin beats a futex sleep. */
static pthread_mutex_t mu;
static pthread_cond_t cond;
static pthread_cond_t joined; /* a joiner is done: an attach may start one */
static uv_thread_t thread;
static int running, stopping, parked, joining;
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
static struct uvcuda__queue probe_list; /* this round's contexts */

static void init_once(void) {
  pthread_mutexattr_t ma;
  pthread_condattr_t ca;
  pthread_mutexattr_init(&ma);
#if defined(__GLIBC__)
  pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
#endif
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  if (pthread_mutex_init(&mu, &ma) != 0 || pthread_cond_init(&cond, &ca) != 0 ||
      pthread_cond_init(&joined, NULL) != 0)
    abort();
  pthread_mutexattr_destroy(&ma);
  pthread_condattr_destroy(&ca);
  uvcuda__queue_init(&clients);
  uvcuda__queue_init(&probe_list);
}

/* mu, taken by a loop thread. */
static void lock_loopside(void) {
  atomic_fetch_add_explicit(&want, 1, memory_order_relaxed);
  pthread_mutex_lock(&mu);
  atomic_fetch_sub_explicit(&want, 1, memory_order_relaxed);
}

/* A timed wait of the back-off; an arm cuts it short. Caller holds mu. */
static void timed_wait(uint64_t ns) {
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

#define client_of(q) uvcuda__queue_data(q, struct uvcuda__rclient, node)
#define watch_of(q) uvcuda__queue_data(q, struct uvcuda__watch, node)

static void ring(struct uvcuda__rclient *c) {
  atomic_store_explicit(&c->rang, 1, memory_order_relaxed);
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

static void take_probes(const struct uvcuda__queue *h) {
  const struct uvcuda__queue *q;
  uvcuda__queue_foreach(q, h) {
    struct uvcuda__context *x = watch_of(q)->ctx;
    if (x->probe_stamp == probe_round) continue;
    x->probe_stamp = probe_round;
    uvcuda__queue_insert_tail(&probe_list, &x->probe_node);
  }
}

/* Probes each context of a watched counter once. Caller holds mu; the
 * driver calls run without it (records live until exit). */
static void probe(uint64_t now, uint64_t interval) {
  struct uvcuda__queue *cq, *q;
  probe_round++;
  uvcuda__queue_foreach(cq, &clients) {
    take_probes(&client_of(cq)->armed);
    take_probes(&client_of(cq)->probed);
  }
  if (uvcuda__queue_empty(&probe_list)) return;
  pthread_mutex_unlock(&mu);
  uvcuda__queue_foreach(q, &probe_list) {
    uvcuda__context_probe(
        uvcuda__queue_data(q, struct uvcuda__context, probe_node), now,
        interval);
  }
  pthread_mutex_lock(&mu);
  while (!uvcuda__queue_empty(&probe_list))
    uvcuda__queue_remove(uvcuda__queue_head(&probe_list));
}

/* A context turned faulted (found here or by a loop): every loop looks. */
static void ring_on_fault(void) {
  struct uvcuda__queue *cq;
  unsigned e = uvcuda__context_epoch();
  if (e == seen_epoch) return;
  seen_epoch = e;
  uvcuda__queue_foreach(cq, &clients) ring(client_of(cq));
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

static void reactor_main(void *arg) {
  uint64_t last_progress, next_probe, now, spin, yield, sleep_max, probe_ns;
  uint64_t sleep_ns = 0;
  int mem, any;
  (void)arg;

#if defined(__GLIBC__)
  pthread_setname_np(pthread_self(), "uvcuda-reactor"); /* top -H, gdb */
#endif
  pthread_mutex_lock(&mu);
  last_progress = uv_hrtime();
  next_probe = last_progress;
  while (!stopping) {
    ring_on_fault();
    bounds(&spin, &yield, &sleep_max, &probe_ns, &mem, &any);
    if (!any) {
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
    now = uv_hrtime();
    if (now >= next_probe) {
      probe(now, probe_ns);
      next_probe = now + probe_ns;
      continue; /* mu was dropped: look at the clients again */
    }
    if (!mem) { /* only host functions: nothing to read */
      timed_wait(next_probe - now);
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
      timed_wait(sleep_ns);
    }
  }
  pthread_mutex_unlock(&mu);
}

int uvcuda__reactor_attach(struct uvcuda__rclient *c) {
  int err = 0;
  pthread_once(&once, init_once);
  uvcuda__queue_init(&c->armed);
  uvcuda__queue_init(&c->probed);
  uvcuda__queue_init(&c->fired);
  uvcuda__queue_init(&c->node); /* not a client until listen */
  atomic_init(&c->rang, 0);
  lock_loopside();
  /* The last loop to leave is joining the thread: wait for it (the thread
   * is stopping, a few µs), then start one here, so that a refusal is
   * this attach's error and never a loop left without a reactor. */
  while (joining) pthread_cond_wait(&joined, &mu);
  if (!running) {
    stopping = 0;
    seen_epoch = uvcuda__context_epoch();
    /* Refused (EAGAIN: out of threads or memory for a stack): exhausted
     * resources, the documented UVCUDA_ENOMEM. */
    err = uv_thread_create(&thread, reactor_main, NULL) == 0 ? 0 : UVCUDA_ENOMEM;
    if (err == 0) running = 1;
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
  int join = 0;

  lock_loopside();
  unwatch_all(&c->armed);
  unwatch_all(&c->probed);
  unwatch_all(&c->fired);
  uvcuda__queue_remove(&c->node);
  /* One joiner at a time; a loop that detaches while another joins has
   * nothing left to wait for: the thread never touches it again. */
  if (--users == 0 && !joining) {
    stopping = 1;
    joining = 1;
    join = 1;
    pthread_cond_signal(&cond);
  }
  pthread_mutex_unlock(&mu);
  if (!join) return;
  uv_thread_join(&thread);
  pthread_mutex_lock(&mu);
  running = 0;
  joining = 0;
  pthread_cond_broadcast(&joined);
  pthread_mutex_unlock(&mu);
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
  r = running;
  pthread_mutex_unlock(&mu);
  return r;
}
