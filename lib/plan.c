/* The plan of one watch (see plan.h). */
#include "plan.h"

#define US 1000u

void uvcuda__plan_window(const struct uvcuda__watch *w,
                         const struct uvcuda__plan_params *p, uint64_t *open,
                         uint64_t *close) {
  uint64_t lead;
  *open = *close = 0;
  if (w->due_ns == 0) return;
  lead = p->lead_ns + w->dev_ns + 1 * US;
  *open = w->due_ns > w->since_ns + lead ? w->due_ns - lead : w->since_ns;
  *close = w->due_ns + 2 * w->dev_ns + 2 * US;
}

uint64_t uvcuda__plan_next(const struct uvcuda__watch *w, uint64_t now,
                           const struct uvcuda__plan_params *p) {
  uint64_t open, close, waited, step;

  /* The loop polls it till then and delivers it if done: the reactor,
   * which wakes `lead` before a look and polls on from there, looks only
   * once the loop has let go, without polling up to it. */
  if (now < w->quiet_until_ns) return w->quiet_until_ns + p->lead_ns;
  uvcuda__plan_window(w, p, &open, &close);
  if (now < open) return open;
  if (now < close) return now; /* inside the window: every pass */
  waited = now > w->since_ns ? now - w->since_ns : 0;
  step = waited / 100u * p->pct;
  if (step < p->floor_ns) step = p->floor_ns;
  if (step > p->sleep_max_ns) step = p->sleep_max_ns;
  return now + step;
}

int uvcuda__plan_early(const struct uvcuda__watch *w, uint64_t now,
                       const struct uvcuda__plan_params *p) {
  uint64_t open, close;
  uvcuda__plan_window(w, p, &open, &close);
  return w->due_ns != 0 && now >= open && w->after_ns < open;
}

uint64_t uvcuda__plan_lead(const struct uvcuda__predict *late) {
  uint64_t lead;
  if (late->n == 0) return UVCUDA__PLAN_LATE_INIT_NS;
  lead = late->mean_ns + 2 * late->dev_ns;
  return lead < UVCUDA__PLAN_LATE_MAX_NS ? lead : UVCUDA__PLAN_LATE_MAX_NS;
}

uint64_t uvcuda__plan_floor(uint64_t lead_ns) {
  uint64_t f = 2 * lead_ns;
  return f > UVCUDA__PLAN_FLOOR_NS ? f : UVCUDA__PLAN_FLOOR_NS;
}

uint64_t uvcuda__plan_probe_at(uint64_t last, uint64_t young, uint64_t overdue,
                               uint64_t now, uint64_t interval, uint32_t pct) {
  uint64_t at = last + uvcuda__plan_probe_gap(
                           interval, young && now > young ? now - young : 0, pct);
  return overdue + interval > at ? overdue + interval : at;
}

uint64_t uvcuda__plan_probe_gap(uint64_t interval, uint64_t waited,
                                uint32_t pct) {
  uint64_t gap = waited / 100u * pct;
  if (gap > UVCUDA__PLAN_PROBE_MAX_NS) gap = UVCUDA__PLAN_PROBE_MAX_NS;
  return gap > interval ? gap : interval;
}
