/* Where a stream's recent work lengths cluster: a ring of the last
 * UVCUDA__MODES_RING samples (the ones its prediction learns from) and
 * the modes among them. Work of two or three kinds on one stream (short
 * and long kernels, a cache hit or a miss) keeps the smoothed prediction
 * (predict.h) from ever being trusted, yet once a short one is known not
 * to have ended, the long kind's length says when the work will end: the
 * reactor sleeps until then instead of backing off (plan.h). */
#ifndef UVCUDA_MODES_H
#define UVCUDA_MODES_H

#include <stdint.h>

#define UVCUDA__MODES_RING 16
/* A mode: at least this many samples of the ring (uniform random lengths
 * make a false one of four in a fifth of rings, of five in 3 %) ... */
#define UVCUDA__MODES_MIN 5
/* ... within 1/UVCUDA__MODES_SPAN of their smallest (+2 µs) of each
 * other. */
#define UVCUDA__MODES_SPAN 16u

struct uvcuda__modes {
  uint32_t ns[UVCUDA__MODES_RING]; /* lengths, ns (saturated at ~4.3 s) */
  uint32_t n, next;                /* samples held, where the next goes */
};

/* Lengths past the age of a wait, in no mode, before the next mode: this
 * many (a quarter of the ring), and that mode is not where the wait will
 * end (see uvcuda__modes_next). Fewer are mostly work of the short kind
 * that a spin missed, seen late (two kinds, 5 and 500 µs on the H100: at
 * two, the reactor backed off through the long kind's waits and spent
 * twice the CPU, run 25). */
#define UVCUDA__MODES_STRAYS 4u

void uvcuda__modes_add(struct uvcuda__modes *m, uint64_t ns);
/* The first mode whose center lies beyond `after` ns: 1, its center and
 * half its spread; 0 if there is none, or if UVCUDA__MODES_STRAYS lengths
 * of the ring, each in no mode, lie between `after` and it (work of a
 * kind not seen often enough to make a mode also ends first). */
int uvcuda__modes_next(const struct uvcuda__modes *m, uint64_t after,
                       uint64_t *center, uint64_t *spread);

/* How long after its start the loop spins for a lone future whose length
 * nobody predicts: `budget_ns`, or, when UVCUDA__MODES_MIN or more of the
 * ring's lengths are within twice the budget (a short kind of work), until
 * the longest of them (+2 us, at most twice the budget). The tail of a
 * short kind a little past the budget (a short kernel behind a slow
 * launch) is then caught by the spin rather than armed just before it
 * ends, for one budget more of spinning at most; what the spin catches is
 * seen exactly, so the stretch shrinks to the kind's real tail. */
uint64_t uvcuda__modes_spin(const struct uvcuda__modes *m, uint64_t budget_ns);

#endif
