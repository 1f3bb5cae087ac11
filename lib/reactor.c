/* The reactor thread. It reads counters and watch fields under its lock
 * and knows nothing above a watch: fired watches go back to their loop on
 * a queue.
 *
 * Each pass reads every armed counter and asks each watch's plan (plan.h)
 * when to look at it next; the reactor then sleeps until the earliest of
 * those looks and the next fault probe (plan.h: the probe interval, or a
 * share of the youngest wait if longer), waking its own lateness early (it
 * learns how late its timed waits come back), or polls on at once when
 * that look is closer than the lateness. An arm whose first look comes
 * before that wake-up wakes it. With only host-function watches it just
 * probes; with nothing watched it parks on its
 * bell (bell.h) until a watch is armed. The options' spin and yield
 * phases, off by default, busy-poll after each arm instead.
 *
 * Started by the first loop that needs it, retired when the last one
 * detaches: joined then, unless it is inside a driver call, which can
 * block for as long as another thread holds the driver (a module's JIT:
 * seconds). Such a thread is detached instead and ends on its own once
 * the call returns; nobody waits for it.
 *
 * Driver calls (the probes) run outside the lock: a driver call can block,
 * and loop threads take this lock to arm. */
#define _GNU_SOURCE 1 /* PTHREAD_MUTEX_ADAPTIVE_NP, pthread_setname_np */
#include "reactor.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "bell.h"
#include "context.h"
#include "counter.h"
#include "plan.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
/* Adaptive: the loop thread takes this lock while the reactor, in its spin
 * phase, takes it every pass; a short spin beats a futex sleep. */
static pthread_mutex_t mu;
static struct uvcuda__bell bell; /* where it sleeps */
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
/* parked: waiting for an arm, no timeout. sleeping: in a timed wait that
 * ends at wake_at (an arm that wants a look sooner signals). */
static int parked, sleeping;
static uint64_t wake_at;
static uint64_t last_arm; /* for the options' spin and yield phases */
/* How late the timed waits come back (the lead they are asked with), and
 * the plan parameters of the last pass, which an arm uses to decide
 * whether to wake a sleeping reactor. */
static struct uvcuda__predict late;
static struct uvcuda__plan_params pp;
static int pp_valid;
static struct uvcuda__reactor_usage used; /* cpu_ns: ended threads' */
static unsigned users;
static struct uvcuda__queue clients;
/* Loop threads waiting for mu: the reactor, which retakes mu after each
 * pass, lets them in first instead of winning every race for it. */
static atomic_int want;
static unsigned seen_epoch; /* fault epoch the clients were rung for */
static unsigned probe_round;

static void init_once(void) {
  pthread_mutexattr_t ma;
  pthread_mutexattr_init(&ma);
#if defined(__GLIBC__)
  pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
#endif
  if (pthread_mutex_init(&mu, &ma) != 0 || uvcuda__bell_init(&bell) != 0)
    abort();
  pthread_mutexattr_destroy(&ma);
  uvcuda__queue_init(&clients);
}

/* mu, taken by a loop thread. */
static void lock_loopside(void) {
  atomic_fetch_add_explicit(&want, 1, memory_order_relaxed);
  pthread_mutex_lock(&mu);
  atomic_fetch_sub_explicit(&want, 1, memory_order_relaxed);
}

/* Sleeps until `at` (uv_hrtime's clock, CLOCK_MONOTONIC); an arm that
 * wants a look sooner cuts it short. A wait that timed out teaches the
 * lateness. Caller holds mu. */
static void timed_wait(const struct rthread *me, uint64_t at) {
  int timed_out;
  sleeping = 1;
  wake_at = at;
  used.sleeps++;
  timed_out = uvcuda__bell_wait(&bell, &mu, at);
  if (me != cur) return;
  sleeping = 0;
  if (timed_out) {
    uint64_t now = uv_hrtime();
    uint64_t d = now > at ? now - at : 0;
    if (d > UVCUDA__PLAN_LATE_MAX_NS) d = UVCUDA__PLAN_LATE_MAX_NS;
    uvcuda__predict_add(&late, d);
  }
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

/* One pass over every armed counter at `now`: a passed one fires, the
 * others get their next look (plan.h); returns the earliest. Caller holds
 * mu. A loop is rung at its first hit, not after the rest of the scan, so
 * that its wake-up overlaps the scan's tail; what fires meanwhile is on
 * its fired queue before it can take mu. */
static uint64_t scan(uint64_t now) {
  struct uvcuda__queue *cq, *q, *nq;
  uint64_t next = UINT64_MAX, n;

  used.polls++;
  uvcuda__queue_foreach(cq, &clients) {
    struct uvcuda__rclient *c = client_of(cq);
    int hit = 0;
    for (q = c->armed.next; q != &c->armed; q = nq) {
      struct uvcuda__watch *w = watch_of(q);
      nq = q->next;
      if (!uvcuda__counter_passed(uvcuda__counter_load(w->host, w->mode),
                                  w->mode, w->threshold)) {
        w->after_ns = now;
        n = uvcuda__plan_next(w, now, &pp);
        if (n < next) next = n;
        continue;
      }
      w->seen_ns = now;
      w->early = uvcuda__plan_early(w, now, &pp);
      uvcuda__queue_remove(q); /* the loop re-arms what is still pending */
      uvcuda__queue_insert_tail(&c->fired, q);
      if (!hit) ring(c);
      hit = 1;
    }
  }
  return next;
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

/* The most eager options among clients with watches; what they watch;
 * when the youngest of their waits began, and the earliest time one of
 * them is overdue: begun, past its predicted end and past the loop's own
 * polling of it. */
struct bounds {
  uint64_t spin, yield, sleep_max, probe, young, overdue;
  uint32_t pct;
  int mem, any;
};

static void ages(const struct uvcuda__queue *h, struct bounds *b) {
  const struct uvcuda__queue *q;
  uvcuda__queue_foreach(q, h) {
    const struct uvcuda__watch *w = watch_of(q);
    uint64_t t = w->since_ns, due = w->due_ns;
    if (w->since_ns > b->young) b->young = w->since_ns;
    /* A long prediction delays no fault by more than the longest gap. */
    if (due > w->since_ns + UVCUDA__PLAN_PROBE_MAX_NS)
      due = w->since_ns + UVCUDA__PLAN_PROBE_MAX_NS;
    if (due > t) t = due;
    if (w->quiet_until_ns > t) t = w->quiet_until_ns;
    if (t < b->overdue) b->overdue = t;
  }
}

static void bounds(struct bounds *b) {
  struct uvcuda__queue *cq;
  b->spin = b->yield = b->sleep_max = b->probe = UINT64_MAX;
  b->young = 0;
  b->overdue = UINT64_MAX;
  b->pct = 100;
  b->mem = b->any = 0;
  uvcuda__queue_foreach(cq, &clients) {
    struct uvcuda__rclient *c = client_of(cq);
    int m = !uvcuda__queue_empty(&c->armed);
    if (!m && uvcuda__queue_empty(&c->probed)) continue;
    b->mem |= m;
    b->any = 1;
    ages(&c->armed, b);
    ages(&c->probed, b);
    if (c->spin_ns < b->spin) b->spin = c->spin_ns;
    if (c->yield_ns < b->yield) b->yield = c->yield_ns;
    if (c->sleep_max_ns < b->sleep_max) b->sleep_max = c->sleep_max_ns;
    if (c->probe_ns < b->probe) b->probe = c->probe_ns;
    if (c->pct < b->pct) b->pct = c->pct;
  }
}

static void plan_params(const struct bounds *b, struct uvcuda__plan_params *p) {
  p->lead_ns = uvcuda__plan_lead(&late);
  p->floor_ns = uvcuda__plan_floor(p->lead_ns);
  p->sleep_max_ns = b->sleep_max;
  p->pct = b->pct;
}

/* After dropping mu for a moment: a loop thread waiting for it gets it. */
static void step_aside(void) {
  unsigned i;
  for (i = 0; i < 4; i++) cpu_relax(); /* ~0.5 us: keep latency low */
  for (i = 0; i < 1024 && atomic_load_explicit(&want, memory_order_relaxed);
       i++)
    cpu_relax();
}

/* This thread's CPU time so far. */
static uint64_t own_cpu_ns(void) {
  struct timespec ts;
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void reactor_main(void *arg) {
  struct rthread *me = arg;
  struct bounds b;
  uint64_t last_probe, next_probe, now, next, deadline;
  int self_free, slept = 0;

#if defined(__GLIBC__)
  pthread_setname_np(pthread_self(), "uvcuda-reactor"); /* top -H, gdb */
#endif
#ifdef __linux__
  /* Timed waits end when asked, not up to 50 us later (the default
   * slack): a plan aims its looks at a predicted window. */
  prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
#endif
  pthread_mutex_lock(&mu);
  last_probe = 0; /* none yet */
  while (me == cur) {
    ring_on_fault();
    bounds(&b);
    if (!b.any) {
      parked = 1;
      pp_valid = 0;
      used.sleeps++;
      uvcuda__bell_wait(&bell, &mu, 0);
      if (me != cur) break;
      parked = 0;
      last_probe = 0;
      continue;
    }
    plan_params(&b, &pp);
    pp_valid = 1;
    now = uv_hrtime();
    /* Asked again each pass: a new wait brings the interval back. */
    next_probe = uvcuda__plan_probe_at(last_probe, b.young, b.overdue, now,
                                       b.probe, b.pct);
    next = b.mem ? scan(now) : UINT64_MAX;
    /* A probe due within half an interval rides on a wake-up made for a
     * look: a wait that never ends then costs one wake-up per look, not
     * two out of step. */
    if (now >= next_probe || (slept && now + b.probe / 2 >= next_probe)) {
      slept = 0;
      probe(me, &me->pl, now, b.probe);
      last_probe = now;
      continue; /* mu was dropped: look at the clients again */
    }
    slept = 0;
    deadline = next < next_probe ? next : next_probe;
    if (now - last_arm < b.spin || deadline <= now + pp.lead_ns) {
      pthread_mutex_unlock(&mu);
      step_aside();
      pthread_mutex_lock(&mu);
    } else if (now - last_arm < b.yield) {
      pthread_mutex_unlock(&mu);
      sched_yield();
      step_aside();
      pthread_mutex_lock(&mu);
    } else {
      timed_wait(me, deadline - pp.lead_ns);
      slept = 1;
    }
  }
  self_free = me->detached; /* else its joiner frees it */
  used.cpu_ns += own_cpu_ns();
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
  lock_loopside();
  /* No reactor (the last loop left, its thread retired or still ending):
   * start one here, so that a refusal is this attach's error and never a
   * loop left without a reactor. */
  if (cur == NULL) {
    struct rthread *t = calloc(1, sizeof(*t));
    seen_epoch = uvcuda__context_epoch();
    sleeping = parked = pp_valid = 0;
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
    sleeping = parked = pp_valid = 0;
    uvcuda__bell_ring(&bell);
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
  struct uvcuda__plan_params own;
  uint64_t now;

  uvcuda__queue_remove(&w->node); /* from armed, probed or fired */
  if (threshold == 0) return;
  w->threshold = threshold;
  w->after_ns = w->since_ns; /* nothing is done before it starts */
  w->seen_ns = 0;
  w->early = 0;
  now = uv_hrtime();
  if (w->host == NULL) {
    uvcuda__queue_insert_tail(&c->probed, &w->node);
    /* Only probed: the probe interval paces it, from a reactor that may
     * sleep a longer probe gap for older waits. */
    if (parked || (sleeping && now + c->probe_ns < wake_at))
      uvcuda__bell_ring(&bell);
    return;
  }
  uvcuda__queue_insert_tail(&c->armed, &w->node);
  last_arm = now;
  if (parked) {
    uvcuda__bell_ring(&bell);
    return;
  }
  if (!sleeping) return; /* it sees the new entry on its next pass */
  /* Asleep: wake it only if this watch wants a look before it wakes, or
   * the options' spin phase follows each arm. The last pass's parameters
   * are the most eager of every client's then; this client's own, with
   * the lateness learnt, where the reactor has made no pass yet. */
  if (!pp_valid) {
    own.lead_ns = uvcuda__plan_lead(&late);
    own.floor_ns = uvcuda__plan_floor(own.lead_ns);
    own.sleep_max_ns = c->sleep_max_ns;
    own.pct = c->pct;
  }
  if (c->spin_ns > 0 || c->yield_ns > 0 ||
      uvcuda__plan_next(w, now, pp_valid ? &pp : &own) < wake_at)
    uvcuda__bell_ring(&bell);
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

void uvcuda__reactor_usage(struct uvcuda__reactor_usage *u) {
  /* In a child forked after the load the reactor stayed behind, and its
   * lock may have been held at the fork: nothing to read, nothing to wait
   * for. */
  if (uvcuda__driver_forked()) {
    memset(u, 0, sizeof(*u));
    return;
  }
  pthread_once(&once, init_once);
  lock_loopside();
  *u = used;
#ifdef __linux__
  if (cur != NULL) { /* the running thread's CPU, read from here */
    clockid_t cid;
    struct timespec ts;
    if (pthread_getcpuclockid(cur->t, &cid) == 0 &&
        clock_gettime(cid, &ts) == 0)
      u->cpu_ns += (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
  }
#endif
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
