/* Bounce buffers: the host memory a copy between a JS buffer and the
 * device goes through (stream.c says why the GPU never touches a JS
 * buffer). They are page-locked (cuMemHostAlloc) because the driver runs a
 * copy into pageable memory synchronously: a copyFromDevice queued behind a
 * 200 ms kernel held the JS thread for 200 ms on the H200. Allocating and
 * freeing page-locked memory is slow (and cuMemFreeHost waits for the
 * device), so buffers are pooled per device in power-of-two size classes,
 * freed only on the reaper thread: past the pool's cap, and when a JS
 * environment lets go of the device (the primary context may go with it).
 * A reset frees a device's page-locked memory itself: buffers of an older
 * generation are forgotten, never reused or freed.
 *
 * Where page-locked memory cannot be had (no device known for a foreign
 * stream, or cuMemHostAlloc fails), the buffer is malloc'ed: the copy then
 * works as before, holding the JS thread for a copy from the device.
 * Any thread unless marked. */
#ifndef UVCUDA_NODE_BOUNCE_H
#define UVCUDA_NODE_BOUNCE_H

#include <stddef.h>
#include <stdint.h>

#include "cu.h"

struct bounce {
  void *p;      /* NULL: none (a copy of 0 bytes) */
  size_t size;  /* of the allocation: its class's size, or the request */
  int pinned;   /* cuMemHostAlloc'ed in ctx (else malloc'ed) */
  int ordinal;  /* -1: no device known */
  uint64_t gen;
  CUcontext ctx;
};

/* Pooled retention cap, bytes per device. */
#define BOUNCE_POOL_BYTES ((size_t)256 << 20)

/* A buffer of at least n bytes for device `ordinal` of generation gen in
 * ctx (ordinal -1 / ctx NULL: none known). JS thread, inside op_enter (the
 * reset lock held). 0, or UVCUDA_ENOMEM. */
int bounce_get(int ordinal, uint64_t gen, CUcontext ctx, size_t n, struct bounce *b);

/* Back to the pool (or freed): the GPU is done with it. */
void bounce_put(struct bounce *b);

/* bounce_put once the work queued so far on `stream` (NULL: in all of ctx)
 * is done, on the reaper thread. Without a context to wait for, the buffer
 * is left allocated: nothing says when the GPU is done. */
void bounce_put_after(struct bounce *b, CUcontext ctx, CUstream stream);

/* The env that opened device `ordinal` lets it go: the pooled buffers are
 * freed on the reaper thread, after what was queued before (call it before
 * the primary context's release). */
void bounce_drop(int ordinal, uint64_t gen, CUcontext ctx);

#endif
