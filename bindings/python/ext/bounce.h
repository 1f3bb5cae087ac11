/* Bounce buffers: page-locked host memory for copies between Python
 * buffers and the device (see bounce.c). */
#ifndef UVCUDA_PY_BOUNCE_H
#define UVCUDA_PY_BOUNCE_H

#include "ext.h"

struct bounce {
  void *p;
  size_t size;
  int cls;
  uint64_t gen;
  struct dev *dev;
  struct bounce *next; /* in its pool's free list */
};

/* A registered buffer of at least n bytes for device d, in d's current
 * generation, with d's context current (inside an op). NULL when none can
 * be had (n over the largest class, no memory, registration refused): copy
 * from the Python buffer itself then. Nothing is raised. */
struct bounce *bounce_get(struct dev *d, size_t n);
/* Back to its pool: the GPU is done with it. NULL: nothing. */
void bounce_put(struct bounce *b);
/* Bytes registered for device d, and of those, in use. */
void bounce_stats(struct dev *d, size_t *bytes, size_t *in_use);

#endif
