/* How long a stream's work takes: a smoothed mean and mean deviation of
 * its recent start -> done times (TCP's RTT estimator, RFC 6298: gains 1/8
 * and 1/4), a few words per timeline. A prediction is trusted once a few
 * samples agree; mixed lengths keep the deviation high and it never is. */
#ifndef UVCUDA_PREDICT_H
#define UVCUDA_PREDICT_H

#include <stdint.h>

#define UVCUDA__PREDICT_MIN_SAMPLES 4

struct uvcuda__predict {
  uint32_t n;       /* samples taken (saturates) */
  uint64_t mean_ns; /* smoothed start -> done */
  uint64_t dev_ns;  /* smoothed |sample - mean| */
  uint64_t last_ns; /* when its previous future was seen done */
};

static inline void uvcuda__predict_add(struct uvcuda__predict *p,
                                       uint64_t sample) {
  if (p->n == 0) {
    p->mean_ns = sample;
    p->dev_ns = sample / 2;
  } else {
    uint64_t err =
        sample > p->mean_ns ? sample - p->mean_ns : p->mean_ns - sample;
    p->dev_ns = p->dev_ns - p->dev_ns / 4 + err / 4;
    p->mean_ns =
        sample > p->mean_ns ? p->mean_ns + err / 8 : p->mean_ns - err / 8;
  }
  if (p->n < UINT32_MAX) p->n++;
}

/* Trusted: enough samples, spread within a quarter of the mean (+2 µs for
 * the clock and the loop's own jitter). */
static inline int uvcuda__predict_trusted(const struct uvcuda__predict *p) {
  return p->n >= UVCUDA__PREDICT_MIN_SAMPLES &&
         p->dev_ns <= p->mean_ns / 4 + 2000u;
}

#endif
