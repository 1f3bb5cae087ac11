/* Bounce buffers: the host memory a copy between a JS buffer and the
 * device goes through (op.h says why the GPU never touches a JS
 * buffer). They are page-locked because the driver runs a copy into
 * pageable memory synchronously: the JS thread would wait for the work
 * queued before it.
 *
 * The memory is ours (aligned_alloc), registered with cuMemHostRegister in
 * the device's primary context, not cuMemHostAlloc'ed: a reset, or the last
 * release of the context, then takes only the registration away, never
 * memory a pending op or the pool still points at (a reset frees
 * cuMemHostAlloc memory). Registering and unregistering are slow
 * (cuMemHostUnregister waits for the device), so buffers are pooled per
 * device in power-of-two size classes from 4 KiB, up to
 * UVN_BOUNCE_POOL_BYTES a device; the rest, and the pool when a JS
 * environment lets go of the device, are unregistered and freed on the
 * reaper thread. Buffers of a generation a reset ended are freed (their
 * registration went with the reset).
 *
 * Where registration fails, or no device is known (a foreign stream given
 * without its Device), the buffer is pageable: the copy then works as
 * before, holding the JS thread for a copy from the device. Any thread
 * unless marked. */
#ifndef UVN_BOUNCE_H
#define UVN_BOUNCE_H

#include <stddef.h>
#include <stdint.h>

#include "driver.h"

struct uvn_bounce {
  void *p;      /* NULL: none (a copy of 0 bytes) */
  size_t size;  /* of the allocation: its class's size, or the request */
  int pinned;   /* registered in ctx (else pageable) */
  int ordinal;  /* -1: no device known */
  uint64_t gen;
  CUcontext ctx;
};

/* Pooled retention cap, bytes per device. */
#define UVN_BOUNCE_POOL_BYTES ((size_t)256 << 20)

/* A buffer of at least n bytes for device `ordinal` of generation gen in
 * ctx (ordinal -1 / ctx NULL: none known). JS thread, holding the device's
 * reset lock. 0, or UVCUDA_ENOMEM. */
int uvn_bounce_get(int ordinal, uint64_t gen, CUcontext ctx, size_t n, struct uvn_bounce *b);

/* Back to the pool (or freed): the GPU is done with it. */
void uvn_bounce_put(struct uvn_bounce *b);

/* uvn_bounce_put once the work queued so far on `stream` (NULL: in all of ctx)
 * is done, on the reaper thread. Without a context to wait for, the buffer
 * is left allocated: nothing says when the GPU is done. */
void uvn_bounce_put_after(struct uvn_bounce *b, CUcontext ctx, CUstream stream);

/* The env that opened device `ordinal` lets it go: the pooled buffers are
 * freed on the reaper thread, after what was queued before (call it before
 * the primary context's release). */
void uvn_bounce_drop(int ordinal, uint64_t gen, CUcontext ctx);

#endif
