/* Bounce buffers: the page-locked host memory a copy between a Python
 * buffer and the device goes through. The driver runs a copy into
 * pageable memory synchronously (the calling thread waits for everything
 * queued before it on the stream: a copy from the device behind a 200 ms
 * kernel held the caller 200 ms on the H200, and the simulated driver
 * does the same), which would stop the event loop.
 *
 * The memory is ours (aligned_alloc), registered with cuMemHostRegister in
 * the device's primary context (as bindings/node's bounce.c: a reset then
 * takes only the registration away, never memory a pending copy points
 * at). Registering costs ~0.1 ms per 64 KiB and unregistering waits for
 * the device, so buffers are kept for reuse per device, in power-of-two
 * classes from 4 KiB to BOUNCE_MAX, and never unregistered: the pool grows
 * to the largest number of copies in flight at once and stays. A buffer of
 * a generation a reset ended is freed (its registration went with it).
 * Copies over BOUNCE_MAX, and any whose registration the driver refuses,
 * use the Python buffer itself (then the driver may block the caller).
 * Called holding the GIL, which guards the pools. */
#include "bounce.h"

#include <stdlib.h>

enum { MIN_SHIFT = 12, NCLASS = 15 }; /* 4 KiB .. 64 MiB */

struct pool {
  uint64_t gen;
  struct bounce *free[NCLASS];
  size_t bytes, in_use;
};

static struct pool *pools; /* by ordinal, sized at first use */
static int npools;

static int class_of(size_t n, size_t *size) {
  int c = 0;
  while (c < NCLASS && ((size_t)1 << (MIN_SHIFT + c)) < n) c++;
  *size = (size_t)1 << (MIN_SHIFT + c);
  return c < NCLASS ? c : -1;
}

static struct pool *pool_of(struct dev *d) {
  int n = dev_count(), i;
  struct bounce *b;
  struct pool *p;
  if (n <= d->ordinal) return NULL;
  if (pools == NULL) {
    if ((pools = calloc((size_t)n, sizeof(*pools))) == NULL) return NULL;
    npools = n;
  }
  p = &pools[d->ordinal];
  if (p->gen != dev_gen(d)) { /* a reset ended the registrations */
    for (i = 0; i < NCLASS; i++)
      while ((b = p->free[i]) != NULL) {
        p->free[i] = b->next;
        free(b->p);
        free(b);
      }
    p->bytes = 0;
    p->gen = dev_gen(d);
  }
  return p;
}

struct bounce *bounce_get(struct dev *d, size_t n) {
  struct pool *p;
  struct bounce *b;
  size_t size;
  int c;
  if (n == 0 || (c = class_of(n, &size)) < 0 || (p = pool_of(d)) == NULL)
    return NULL;
  if ((b = p->free[c]) != NULL) {
    p->free[c] = b->next;
    p->in_use += size;
    return b;
  }
  if ((b = calloc(1, sizeof(*b))) == NULL) return NULL;
  if ((b->p = aligned_alloc(4096, size)) == NULL) {
    free(b);
    return NULL;
  }
  /* In the context current here: the stream's (the device's primary). */
  if (cu.cuMemHostRegister(b->p, size, 0) != CUDA_SUCCESS) {
    free(b->p);
    free(b);
    return NULL;
  }
  b->size = size;
  b->cls = c;
  b->dev = d;
  b->gen = dev_gen(d);
  p->bytes += size;
  p->in_use += size;
  return b;
}

void bounce_put(struct bounce *b) {
  struct pool *p;
  if (b == NULL) return;
  p = pool_of(b->dev);
  if (p == NULL || b->gen != p->gen) { /* registration gone with a reset */
    free(b->p);
    free(b);
    return;
  }
  p->in_use -= b->size;
  b->next = p->free[b->cls];
  p->free[b->cls] = b;
}

void bounce_stats(struct dev *d, size_t *bytes, size_t *in_use) {
  struct pool *p =
      pools != NULL && d->ordinal < npools ? &pools[d->ordinal] : NULL;
  *bytes = p != NULL ? p->bytes : 0;
  *in_use = p != NULL ? p->in_use : 0;
}
