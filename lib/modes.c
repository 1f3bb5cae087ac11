/* Where a stream's recent work lengths cluster (see modes.h). */
#include "modes.h"

#define US 1000u

void uvcuda__modes_add(struct uvcuda__modes *m, uint64_t ns) {
  m->ns[m->next] = ns > UINT32_MAX ? UINT32_MAX : (uint32_t)ns;
  m->next = (m->next + 1) % UVCUDA__MODES_RING;
  if (m->n < UVCUDA__MODES_RING) m->n++;
}

int uvcuda__modes_next(const struct uvcuda__modes *m, uint64_t after,
                       uint64_t *center, uint64_t *spread) {
  uint32_t v[UVCUDA__MODES_RING], x;
  uint32_t i, j, k, strays = 0;

  for (i = 0; i < m->n; i++) { /* insertion sort: 16 numbers */
    x = m->ns[i];
    for (j = i; j > 0 && v[j - 1] > x; j--) v[j] = v[j - 1];
    v[j] = x;
  }
  for (i = 0; i < m->n; i = k) {
    uint64_t tol = v[i] / UVCUDA__MODES_SPAN + 2 * US;
    for (k = i + 1; k < m->n && v[k] - v[i] <= tol; k++) {}
    if (k - i >= UVCUDA__MODES_MIN && v[i + (k - i) / 2] > after) {
      *center = v[i + (k - i) / 2]; /* the median of the run */
      *spread = (v[k - 1] - v[i]) / 2;
      return 1;
    }
    if (k - i < UVCUDA__MODES_MIN) {
      /* No run from here: a length past `after` in no kind says work
       * ends between kinds too; enough of them, and the next kind's
       * length is no longer a time to sleep until. */
      if (v[i] > after && ++strays >= UVCUDA__MODES_STRAYS) return 0;
      k = i + 1;
    }
  }
  return 0;
}

uint64_t uvcuda__modes_spin(const struct uvcuda__modes *m, uint64_t budget_ns) {
  uint64_t top = 0, end;
  uint32_t i, k = 0;
  for (i = 0; i < m->n; i++) {
    if (m->ns[i] > 2 * budget_ns) continue;
    k++;
    if (m->ns[i] > top) top = m->ns[i];
  }
  if (k < UVCUDA__MODES_MIN) return budget_ns;
  end = top + 2 * US;
  if (end > 2 * budget_ns) end = 2 * budget_ns;
  return end > budget_ns ? end : budget_ns;
}
