/* Adaptive spin and pre-wake. Per future, at start, its stream's
 * prediction (predict.h) chooses one of:
 *   - nothing trusted yet, or other futures pending on the loop: the
 *     fixed spin budget, then arm (as without it); but the loop's one
 *     pending future, once the last MISS_RUN such spins of lone futures
 *     all ended armed (their work outlasted the budget: unpredictable
 *     lengths, mostly long), is armed at once, except one in EXPLORE
 *     that still spins, so that work that turned short is caught again
 *     (a catch ends the run);
 *   - predicted to end within the budget: spin until shortly after the
 *     predicted end, then arm;
 *   - predicted to end later: arm at once (the reactor watches it as
 *     usual) and wake the loop thread `lead` before the predicted end with
 *     a timerfd, then poll its timeline on the idle handle for a window of
 *     at most the spin budget plus four deviations (200 µs at most). A
 *     wrong guess costs nothing but that window: the reactor delivers the
 *     future as it would have anyway.
 * libuv timers tick in ms; a timerfd (CLOCK_MONOTONIC, uv_hrtime's clock,
 * absolute ns) in a uv_poll_t wakes the loop's own epoll within ~µs of the
 * deadline. The loop sets the expiry itself, and reads it when it fires,
 * so the timerfd is never left readable. `lead` learns how late the
 * wake-ups run: their smoothed mean plus two deviations (predict.h's
 * estimator), so wake-ups that vary, as after a long sleep, start early
 * enough. Linux only.
 *
 * The reactor's side of the same plan (uvcuda__adapt_plan): a pre-woken
 * future's watch tells the reactor not to look before the loop's window
 * ends; any other armed future of a trusted stream gives the reactor its
 * predicted end, so that it sleeps until shortly before it (plan.h). */
#ifndef UVCUDA_ADAPT_H
#define UVCUDA_ADAPT_H

#include <stdint.h>

#include "predict.h"
#include "queue.h"
#include "spin.h"
#include "timeline.h"

/* uvcuda_future_t.adapt_: what its prediction made of it. Only this file
 * and adapt.c read it; the layers below report what they saw (who saw a
 * future done, whether it was the loop's first look) instead. */
#define UVCUDA__ADAPT_NONE 0
#define UVCUDA__ADAPT_SPIN 1    /* spins until shortly after its end */
#define UVCUDA__ADAPT_PENDING 2 /* armed, pre-wake timer set */
#define UVCUDA__ADAPT_HOT 3     /* woken: the loop polls it */
/* Its window ended first: counted late when it completes (a failed or
 * cancelled one is none of hit, early or late). */
#define UVCUDA__ADAPT_LATE 4
/* Spins the fixed budget: whether the spin caught it is counted. */
#define UVCUDA__ADAPT_FIXED 5

struct uvcuda__adapt {
  int on;
  int fd; /* timerfd, -1: none */
  uv_poll_t poll;
  int poll_on;
  uint64_t timer_at; /* the expiry set, 0: none (or it fired) */
  struct uvcuda__predict late;  /* how late the wake-ups run */
  uint32_t skip, backoff; /* predictions left out after early ones */
  uint32_t early_run;     /* early ones in a row */
  uint32_t misses;        /* fixed-budget spins in a row that ended armed */
  uint32_t unspun;        /* futures armed at once since the last spin */
  struct uvcuda__queue pending; /* PENDING futures by wake time */
  struct uvcuda__queue hot;     /* HOT futures */
  uvcuda_stats_t *stats;
  uv_poll_cb on_timer;
};

/* loop.c: `on` from the options. The poll handle is the loop's third
 * handle when on (closed by uvcuda__adapt_close, with cb). */
int uvcuda__adapt_init(struct uvcuda__adapt *a, uv_loop_t *uv, int on,
                       uvcuda_stats_t *stats, uv_poll_cb on_timer);
void uvcuda__adapt_close(struct uvcuda__adapt *a, uv_close_cb cb);
/* Stops the timer's poll handle for good (a loop left in a forked child). */
void uvcuda__adapt_stop(struct uvcuda__adapt *a);
/* From cb: closes the timerfd. */
void uvcuda__adapt_closed(struct uvcuda__adapt *a);
/* future.c, after a successful start (alone: f is the loop's only pending
 * future; now: when the op and marker were enqueued, its armed time if it
 * is armed at once): 1 if it placed f (spin or arm), 0 to use the fixed
 * budget. */
int uvcuda__adapt_start(struct uvcuda__adapt *a, struct uvcuda__spin *sp,
                        struct uvcuda__tlset *set, uvcuda_future_t *f,
                        uint64_t budget_ns, int alone,
                        uint64_t now);
/* How long before a predicted end the loop is woken for the wake-up
 * itself: the lateness seen so far, mean + 2 deviations, 200 µs at most. */
uint64_t uvcuda__adapt_wake_lead(const struct uvcuda__adapt *a);
/* What a predicted wait of mean_ns adds to that lead, and to the window
 * polled after the timer: 0 up to 250 µs, then 1/64 of it, 50 µs at most. */
uint64_t uvcuda__adapt_long_lead(uint64_t mean_ns);
/* The timer fired (pass.c's poll callback): reads the expiry, so that the
 * timerfd is not readable until it is set again. Before the clock is
 * read: whatever it read out is due by then. */
void uvcuda__adapt_drain(struct uvcuda__adapt *a);
/* The futures due by `now` become HOT; the timer is asked for the next. */
void uvcuda__adapt_fire(struct uvcuda__adapt *a, uint64_t now);
/* pass.c's settle, before tl's watch is armed: its plan for the reactor
 * (watch.h's plan fields), from its first pending future. */
void uvcuda__adapt_plan(const struct uvcuda__tlset *set,
                        struct uvcuda__timeline *tl);
/* The idle pass: polls the timelines of HOT futures; ends spent windows. */
void uvcuda__adapt_pass(struct uvcuda__adapt *a, struct uvcuda__tlset *set,
                        uint64_t now);
/* f's outcome is being delivered (status) or f closed: counts the
 * prediction (a future seen done while the loop polled for it counts as
 * the loop's: f->done_by_) and takes f off the queues. */
void uvcuda__adapt_forget(struct uvcuda__adapt *a, uvcuda_future_t *f,
                          int status);
static inline int uvcuda__adapt_busy(const struct uvcuda__adapt *a) {
  return !uvcuda__queue_empty(&a->hot);
}

#endif
