/* When the reactor looks at an armed counter next: the plan of one watch.
 * A watch carries what its loop knows of the wait (watch.h):
 *   since_ns        when the wait began (its future's start);
 *   due_ns, dev_ns  its stream's predicted end and spread (0: none);
 *   quiet_until_ns  the loop polls it itself until then (a pre-woken
 *                   future's window): the reactor does not look before.
 * With the reactor's own numbers (plan_params) that gives its next look:
 *   - before the loop's quiet time ends: not before then plus the lead
 *     (the reactor, which wakes a lead early and polls on from there,
 *     wakes as it ends instead of polling up to it: the loop delivers
 *     what is done before then);
 *   - before the predicted window opens (due - lead - dev - 1 us): not
 *     before then;
 *   - inside the window (up to due + 2 dev + 2 us): at every pass;
 *   - otherwise (no prediction, or past the window): it backs off, looking
 *     again after pct % of the time waited so far, at least floor_ns and
 *     at most sleep_max_ns later. So a wait nobody predicted is seen at
 *     most that share of itself (or the floor) after its end, and the
 *     reactor's wake-ups per wait grow with the log of its length.
 * Pure functions of their arguments: the reactor calls them under its
 * lock, tests call them with made-up times. */
#ifndef UVCUDA_PLAN_H
#define UVCUDA_PLAN_H

#include <stdint.h>

#include "predict.h"
#include "watch.h"

struct uvcuda__plan_params {
  uint64_t lead_ns;      /* how late the reactor's timed wake-ups come */
  uint64_t floor_ns;     /* the shortest back-off step */
  uint64_t sleep_max_ns; /* the longest back-off step */
  uint32_t pct;          /* back-off step, % of the time waited */
};

#define UVCUDA__PLAN_FLOOR_NS 20000u /* see uvcuda__plan_floor */
#define UVCUDA__PLAN_LATE_INIT_NS 10000u
#define UVCUDA__PLAN_LATE_MAX_NS 200000u
#define UVCUDA__PLAN_PROBE_MAX_NS 100000000u /* see uvcuda__plan_probe_gap */

/* The predicted window of w: [*open, *close) (both 0 without a
 * prediction). */
void uvcuda__plan_window(const struct uvcuda__watch *w,
                         const struct uvcuda__plan_params *p, uint64_t *open,
                         uint64_t *close);
/* The earliest time the reactor should look at w again, having looked (and
 * not found it passed) at `now`. */
uint64_t uvcuda__plan_next(const struct uvcuda__watch *w, uint64_t now,
                           const struct uvcuda__plan_params *p);
/* Whether a look at `now` that found w passed was the first one inside its
 * predicted window (the look before, at w->after_ns, came before it
 * opened): the work ended at some time before, not now. */
int uvcuda__plan_early(const struct uvcuda__watch *w, uint64_t now,
                       const struct uvcuda__plan_params *p);
/* The reactor's wake-up lead from its lateness so far: mean + 2
 * deviations, at most UVCUDA__PLAN_LATE_MAX_NS (before any sample,
 * UVCUDA__PLAN_LATE_INIT_NS). */
uint64_t uvcuda__plan_lead(const struct uvcuda__predict *late);
/* The shortest back-off step: a sleep much shorter than the reactor's own
 * wake-up lateness buys no latency, only wake-ups; twice the lead, at
 * least UVCUDA__PLAN_FLOOR_NS. */
uint64_t uvcuda__plan_floor(uint64_t lead_ns);

/* The time from one fault probe to the next while the youngest watched
 * wait has lasted `waited`: pct % of it, as the back-off's step, but never
 * less than the probe interval nor more than UVCUDA__PLAN_PROBE_MAX_NS
 * (or the interval, if longer). A fault stops a wait as surely as a late
 * completion, so it is found within the same share of every wait, and a
 * wait that never ends costs ever fewer probes (each one is driver
 * calls, the dearest part of a wake-up). */
uint64_t uvcuda__plan_probe_gap(uint64_t interval, uint64_t waited,
                                uint32_t pct);
/* When the next fault probe is due: a probe gap after the last one
 * (last: 0 for none), the youngest watched wait having begun at `young`;
 * but never before the first of them is overdue, a probe interval after
 * `overdue` (the earliest time a watched wait had begun, passed its
 * predicted end and the loop's own polling of it): a fault shows as work
 * that does not end, and work done in time needs no probe. */
uint64_t uvcuda__plan_probe_at(uint64_t last, uint64_t young, uint64_t overdue,
                               uint64_t now, uint64_t interval, uint32_t pct);

#endif
