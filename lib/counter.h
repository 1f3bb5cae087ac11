/* GPU-written counters: the one place that reads them and the pool they
 * come from. A counter is a cache line of host memory registered with the
 * driver; the GPU stores a timeline's sequence numbers into it
 * (cuStreamWriteValue64/32) and CPU threads read it with acquire loads. */
#ifndef UVCUDA_COUNTER_H
#define UVCUDA_COUNTER_H

#include <stdint.h>

#include "driver.h"
#include "queue.h"

#define UVCUDA__COUNTER_MEM64 1 /* 64-bit writes */
#define UVCUDA__COUNTER_MEM32 2 /* 32-bit writes: compared wrap-safe */

#define UVCUDA__SLOTS_PER_PAGE 64
#define UVCUDA__SLOT_STRIDE 64 /* one cache line per counter */

/* One page of counters, registered in one CUDA context. Pages are never
 * unregistered or freed while the context lives: cuMemHostUnregister waits
 * for the context's device work (all of it: a long kernel holds it), and
 * a write still due must never land in memory given back. */
struct uvcuda__counter_page {
  struct uvcuda__queue node; /* the pool's pages */
  char *host;
  CUdeviceptr dptr;
  uint64_t used;     /* slots handed out */
  uint64_t draining; /* slots given back with a GPU write still due */
  uint64_t
      expect[UVCUDA__SLOTS_PER_PAGE]; /* draining: the last write's value */
  unsigned char mode[UVCUDA__SLOTS_PER_PAGE];
};

/* The pages of one CUDA context (guarded by the owner's lock). */
struct uvcuda__counter_pool {
  struct uvcuda__queue pages;
  uint64_t npages;
};

/* A slot handed to a timeline. */
struct uvcuda__counter {
  void *host;
  CUdeviceptr dptr;
  struct uvcuda__counter_page *page;
  int index;
};

void uvcuda__counter_pool_init(struct uvcuda__counter_pool *p);
/* Takes a slot whose counter reads 0 and has no write due; registers a new
 * page when none is free. The pool's context is current. */
int uvcuda__counter_get(struct uvcuda__counter_pool *p,
                        struct uvcuda__counter *c);
/* Gives a slot back. `expect` is the value of the last write enqueued to
 * it (0: none); until the counter shows it, the slot is not handed out. */
void uvcuda__counter_put(struct uvcuda__counter_pool *p,
                         struct uvcuda__counter *c, int mode, uint64_t expect);

/* Frees the pages of a pool whose context the driver has destroyed: its
 * registrations went with it and no write can land any more, so the
 * memory is freed without a driver call. */
void uvcuda__counter_pool_free_gone(struct uvcuda__counter_pool *p);

/* The driver refused to register host memory for the device (some VMs and
 * sandboxes): as final as refused memops, unlike running out of pinned
 * memory. err: what uvcuda__counter_get (or a caller of it) returned. */
static inline int uvcuda__counter_refused(int err) {
  return err == UVCUDA_ECUDA(CUDA_ERROR_NOT_SUPPORTED) ||
         err == UVCUDA_ECUDA(CUDA_ERROR_NOT_PERMITTED);
}

static inline uint64_t uvcuda__counter_load(const void *host, int mode) {
  if (mode == UVCUDA__COUNTER_MEM64)
    return __atomic_load_n((const uint64_t *)host, __ATOMIC_ACQUIRE);
  return __atomic_load_n((const uint32_t *)host, __ATOMIC_ACQUIRE);
}

/* Whether a counter value `v` (from counter_load) has reached `seq`. 32-bit
 * counters trail the enqueued sequence by less than 2^31, so the signed
 * distance decides. */
static inline int uvcuda__counter_passed(uint64_t v, int mode, uint64_t seq) {
  if (mode == UVCUDA__COUNTER_MEM64) return v >= seq;
  return (int32_t)((uint32_t)v - (uint32_t)seq) >= 0;
}

#endif
