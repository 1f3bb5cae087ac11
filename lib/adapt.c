/* Adaptive spin and pre-wake (see adapt.h). */
#include "adapt.h"


#include <errno.h>
#include <string.h>
#include <unistd.h>

#ifdef __linux__
#include "timerfd.h"
#endif

#define future_of(q) uvcuda__queue_data(q, uvcuda_future_t, pw_node_)

#define US 1000u
#define LATE_INIT_NS \
  (20u * US) /* a sleeping loop's wake-up, before one is seen */
#define LATE_MAX_NS (200u * US) /* a stalled loop must not teach a huge lead */
#define DUE_SLACK_NS (1u * US)  /* wake-ups this close together share one */
#define WINDOW_MAX_NS (200u * US) /* the longest a pre-woken loop spins */
#define BACKOFF_MAX 64u /* predictions left out after early ones, at most */
/* Fixed-budget spins that must all miss before spins are skipped (two
 * kinds of work, half short, miss 32 in a row once in 4e9; where a slow
 * machine sees even the short kind after the budget, 70 % miss, once in
 * 90,000), and how often one still spins then (adapt.h). */
#define MISS_RUN 32u
#define EXPLORE 16u
/* A predicted wait longer than this wakes the loop earlier still, by
 * 1/LONG_DIV of it (at most LONG_MAX_NS): see uvcuda__adapt_long_lead. */
#define LONG_MIN_NS (250u * US)
#define LONG_DIV 64u
#define LONG_MAX_NS (50u * US)

int uvcuda__adapt_init(struct uvcuda__adapt *a, uv_loop_t *uv, int on,
                       uvcuda_stats_t *stats, uv_poll_cb on_timer) {
  memset(a, 0, sizeof(*a));
  a->fd = -1;
  a->stats = stats;
  a->on_timer = on_timer;
  uvcuda__queue_init(&a->pending);
  uvcuda__queue_init(&a->hot);
  if (!on) return 0;
#ifdef __linux__
  a->fd = uvcuda__timerfd_open();
  if (a->fd < 0) /* out of memory or descriptors: a resource, not a mode */
    return errno == ENOMEM || errno == EMFILE || errno == ENFILE
               ? UVCUDA_ENOMEM
               : UVCUDA_ENOTSUP;
  if (uv_poll_init(uv, &a->poll, a->fd) != 0) {
    close(a->fd);
    a->fd = -1;
    return UVCUDA_ENOTSUP;
  }
  uv_unref((uv_handle_t *)&a->poll); /* pending futures hold the loop */
  a->on = 1;
  return 0;
#else
  (void)uv;
  return UVCUDA_ENOTSUP; /* no timerfd: say so rather than spin blind */
#endif
}

void uvcuda__adapt_stop(struct uvcuda__adapt *a) {
  if (a->poll_on) uv_poll_stop(&a->poll);
  a->poll_on = 0;
}

void uvcuda__adapt_close(struct uvcuda__adapt *a, uv_close_cb cb) {
  if (!a->on) return;
  uvcuda__adapt_stop(a);
  uv_close((uv_handle_t *)&a->poll, cb);
}

void uvcuda__adapt_closed(struct uvcuda__adapt *a) {
  /* Only now: libuv drops the fd from its epoll set during the close. */
  if (a->fd >= 0) close(a->fd);
  a->fd = -1;
}

/* at: absolute uv_hrtime() ns; 0: none. */
static void set_timer(struct uvcuda__adapt *a, uint64_t at) {
  if (at == a->timer_at) return;
  a->timer_at = at;
#ifdef __linux__
  /* Also drops an expiry that fired meanwhile and is not read yet, which
   * would leave the backend fd readable. */
  uvcuda__timerfd_set(a->fd, at);
#endif
  /* Started once and left so: a timerfd that is not set is never
   * readable, and a start and stop per future cost the loop three
   * syscalls each (libuv's epoll_ctl ADD, refused EEXIST, then MOD). */
  if (at != 0 && !a->poll_on &&
      uv_poll_start(&a->poll, UV_READABLE, a->on_timer) == 0)
    a->poll_on = 1;
}

void uvcuda__adapt_drain(struct uvcuda__adapt *a) {
  uint64_t ticks;
  if (read(a->fd, &ticks, sizeof(ticks)) < 0) { /* EAGAIN: set again since */
  }
}

static void pending_insert(struct uvcuda__adapt *a, uvcuda_future_t *f) {
  struct uvcuda__queue *q = a->pending.prev;
  /* Mostly in order already: look back from the tail. */
  while (q != &a->pending && future_of(q)->wake_ns_ > f->wake_ns_) q = q->prev;
  uvcuda__queue_insert_head(q, &f->pw_node_); /* after q */
  if (a->timer_at == 0 || f->wake_ns_ < a->timer_at) set_timer(a, f->wake_ns_);
}

/* The fixed budget (0: the caller spins f), or, for the loop's one
 * pending future, the budget stretched to a kind of its stream's work
 * that ends a little past it (1: spinning), or after a run of such spins
 * that all missed, an arm at once (1). A loop with other work pending
 * does not sleep for it (the spin costs little there) and its spin
 * passes harvest the others too. */
static int fixed(struct uvcuda__adapt *a, struct uvcuda__spin *sp,
                 struct uvcuda__tlset *set, uvcuda_future_t *f,
                 uint64_t budget_ns, int alone, uint64_t now) {
  uint64_t spin_ns;
  if (!alone) return 0;
  if (a->misses < MISS_RUN || ++a->unspun >= EXPLORE) {
    a->unspun = 0;
    f->adapt_ = UVCUDA__ADAPT_FIXED;
    spin_ns = uvcuda__modes_spin(&f->tl_->modes, budget_ns);
    if (spin_ns == budget_ns) return 0;
    uvcuda__spin_add(sp, f, f->start_ns_ + spin_ns);
    return 1;
  }
  uvcuda__spin_arm(set, f, now);
  return 1;
}

int uvcuda__adapt_start(struct uvcuda__adapt *a, struct uvcuda__spin *sp,
                        struct uvcuda__tlset *set, uvcuda_future_t *f,
                        uint64_t budget_ns, int alone, uint64_t now) {
  struct uvcuda__timeline *tl = f->tl_;
  struct uvcuda__predict *p = &tl->pred;
  uint64_t t0 = f->start_ns_, end, margin, wake, extra, lead, window;

  f->adapt_ = UVCUDA__ADAPT_NONE;
  if (!a->on || budget_ns == 0 || tl->mode == UVCUDA__TL_HOSTFN ||
      set->completion == UVCUDA_COMPLETION_POLL)
    return 0;
  /* Only the loop's one pending future: a loop with other work pending
   * rarely sleeps, so a pre-wake saves it nothing, and its late harvests
   * teach late predictions that skip the spin that would have caught the
   * work (design.md, "Adaptive spin and pre-wake"). */
  if (!alone || !uvcuda__predict_trusted(p))
    return fixed(a, sp, set, f, budget_ns, alone, now);
  /* A prediction that came out early cost the spin that would have caught
   * the work (a server's lone futures, learnt under load, may all run
   * shorter than learnt). The next ones take the fixed budget, twice as
   * many after each early one in a row. */
  if (a->skip > 0) {
    a->skip--;
    return fixed(a, sp, set, f, budget_ns, alone, now);
  }
  end = t0 + p->mean_ns; /* learnt from start to seen */
  margin = 2 * p->dev_ns + 2 * US;
  a->stats->predicted++;
  if (end + margin <= t0 + budget_ns) {
    /* Within the spin horizon: spin until just after the predicted end. */
    f->adapt_ = UVCUDA__ADAPT_SPIN;
    uvcuda__spin_add(sp, f, end + margin);
    return 1;
  }
  /* Beyond it: armed now, woken `lead` before the end (the wake-up's
   * own lateness, its spread included, a deviation of the work, and for a
   * long wait a share of it), polled until `margin` after it: from the
   * timer, at most the wake-up's lead plus the spin budget, four
   * deviations and that share (WINDOW_MAX_NS). */
  wake = uvcuda__adapt_wake_lead(a);
  extra = uvcuda__adapt_long_lead(p->mean_ns);
  lead = wake + p->dev_ns + 1 * US + extra;
  f->wake_ns_ = end > t0 + lead ? end - lead : t0;
  f->hot_until_ns_ = end + margin;
  window = budget_ns + 4 * p->dev_ns + extra;
  if (window > WINDOW_MAX_NS) window = WINDOW_MAX_NS;
  if (f->hot_until_ns_ > f->wake_ns_ + wake + window)
    f->hot_until_ns_ = f->wake_ns_ + wake + window;
  uvcuda__spin_arm(set, f, now);
  f->adapt_ = UVCUDA__ADAPT_PENDING;
  pending_insert(a, f);
  return 1;
}

void uvcuda__adapt_plan(const struct uvcuda__tlset *set,
                        struct uvcuda__timeline *tl) {
  struct uvcuda__watch *w = &tl->watch;
  const struct uvcuda__predict *p = &tl->pred;
  uvcuda_future_t *f = uvcuda__tl_head(tl);
  uint64_t from, now, center, spread;

  /* Its wait began at its start, or when the future ahead of it on the
   * stream was seen done, if later: a queue's futures end one by one. */
  w->since_ns = f->start_ns_ > tl->done_ns ? f->start_ns_ : tl->done_ns;
  w->due_ns = w->dev_ns = w->quiet_until_ns = 0;
  if (f->adapt_ == UVCUDA__ADAPT_PENDING || f->adapt_ == UVCUDA__ADAPT_HOT) {
    w->quiet_until_ns = f->hot_until_ns_; /* the loop polls it till then */
    return;
  }
  if (!set->adaptive) return;
  /* Learnt from its start, or its predecessor's end if later. */
  from = f->start_ns_ > p->last_ns ? f->start_ns_ : p->last_ns;
  if (uvcuda__predict_trusted(p)) {
    w->due_ns = from + p->mean_ns;
    w->dev_ns = p->dev_ns;
    return;
  }
  /* Lengths of several kinds: the next kind the wait has not yet
   * outlasted (a short kind is over by the time a future is armed). */
  now = uv_hrtime();
  if (uvcuda__modes_next(&tl->modes, now > from ? now - from : 0, &center,
                         &spread)) {
    w->due_ns = from + center;
    w->dev_ns = spread;
  }
}

/* After a long sleep the loop's wake-up comes later and more spread than
 * its learnt lateness covers at the tail, so a wait longer than
 * LONG_MIN_NS is woken 1/64 of itself earlier (design.md gives the
 * measurement). Shorter waits, whose wake-ups are as tight as the lead,
 * get none. */
uint64_t uvcuda__adapt_long_lead(uint64_t mean_ns) {
  uint64_t extra;
  if (mean_ns <= LONG_MIN_NS) return 0;
  extra = mean_ns / LONG_DIV;
  return extra < LONG_MAX_NS ? extra : LONG_MAX_NS;
}

uint64_t uvcuda__adapt_wake_lead(const struct uvcuda__adapt *a) {
  uint64_t lead;
  if (a->late.n == 0) return LATE_INIT_NS;
  /* Mean + 2 deviations: a wake-up after a long sleep varies, and the
   * mean alone leaves many futures done before the loop looks. */
  lead = a->late.mean_ns + 2 * a->late.dev_ns;
  return lead < LATE_MAX_NS ? lead : LATE_MAX_NS;
}

void uvcuda__adapt_fire(struct uvcuda__adapt *a, uint64_t now) {
  struct uvcuda__queue *q;
  if (a->timer_at != 0 && now >= a->timer_at) {
    uint64_t late = now - a->timer_at;
    if (late > LATE_MAX_NS) late = LATE_MAX_NS;
    uvcuda__predict_add(&a->late, late);
    a->stats->prewakes++;
    a->timer_at = 0; /* spent: a one-shot timerfd needs no disarm */
  }
  while (!uvcuda__queue_empty(&a->pending)) {
    uvcuda_future_t *f;
    q = uvcuda__queue_head(&a->pending);
    f = future_of(q);
    if (f->wake_ns_ > now + DUE_SLACK_NS) break;
    /* Still PENDING until the first poll: done by then is "early". */
    uvcuda__queue_remove(q);
    uvcuda__queue_insert_tail(&a->hot, q);
  }
  set_timer(a, uvcuda__queue_empty(&a->pending)
                   ? 0
                   : future_of(uvcuda__queue_head(&a->pending))->wake_ns_);
}

void uvcuda__adapt_pass(struct uvcuda__adapt *a, struct uvcuda__tlset *set,
                        uint64_t now) {
  struct uvcuda__queue *q, *next;
  for (q = a->hot.next; q != &a->hot; q = next) {
    uvcuda_future_t *f = future_of(q);
    next = q->next;
    if (f->state_ != UVCUDA_FUTURE_ARMED) continue; /* being delivered */
    uvcuda__tl_harvest(set, f->tl_,
                       f->adapt_ == UVCUDA__ADAPT_PENDING ? UVCUDA__SEEN_LOOP_FIRST
                                                          : UVCUDA__SEEN_LOOP);
    if (f->state_ != UVCUDA_FUTURE_ARMED) continue; /* done: forget counts it */
    f->adapt_ =
        UVCUDA__ADAPT_HOT; /* polled and not yet done: spinning for it */
    f->tl_->polled_ns = now; /* a later sighting by the reactor: since */
    if (now >= f->hot_until_ns_) {
      /* Not yet: the reactor delivers it, as without a prediction. */
      uvcuda__queue_remove(q);
      f->adapt_ = UVCUDA__ADAPT_LATE;
    }
  }
}

static void hit(struct uvcuda__adapt *a) {
  a->stats->predict_hit++;
  a->backoff = 0;
  a->early_run = 0;
}

/* From the second early one in a row, the next a->backoff predictions are
 * left out: 1, 2, 4 ... BACKOFF_MAX. One early among hits is the spread of
 * the work or of the wake-up, and the fixed budget it would send the next
 * future to costs a spin of the whole budget. */
static void early(struct uvcuda__adapt *a) {
  a->stats->predict_early++;
  if (++a->early_run < 2) return;
  a->backoff = a->backoff == 0 ? 1 : a->backoff * 2;
  if (a->backoff > BACKOFF_MAX) a->backoff = BACKOFF_MAX;
  a->skip = a->backoff;
}

void uvcuda__adapt_forget(struct uvcuda__adapt *a, uvcuda_future_t *f,
                          int status) {
  int ok = status == 0;
  switch (f->adapt_) {
    case UVCUDA__ADAPT_SPIN: /* armed before it was done: late */
      if (ok && f->done_by_ == UVCUDA__BY_SPIN) hit(a);
      else if (ok) a->stats->predict_late++;
      break;
    case UVCUDA__ADAPT_PENDING:
      if (ok) early(a);
      uvcuda__queue_remove(&f->pw_node_);
      if (uvcuda__queue_empty(&a->pending)) set_timer(a, 0);
      break;
    case UVCUDA__ADAPT_HOT:
      if (ok) hit(a);
      if (ok) f->done_by_ = UVCUDA__BY_SPIN; /* the loop polled for it */
      uvcuda__queue_remove(&f->pw_node_);
      break;
    case UVCUDA__ADAPT_LATE:
      if (ok) a->stats->predict_late++;
      break;
    case UVCUDA__ADAPT_FIXED: /* the loop saw it itself, or a wake-up did */
      if (ok && f->done_by_ == UVCUDA__BY_SPIN) a->misses = 0;
      else if (ok && a->misses < UINT32_MAX) a->misses++;
      break;
    default: break;
  }
  f->adapt_ = UVCUDA__ADAPT_NONE;
}
