/* See bounce.h. A free buffer is linked into its class's queue through a
 * node in its own first bytes (the memory is ours whatever the driver did):
 * the pool needs no memory of its own per buffer. */
#include "bounce.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "devstate.h"
#include "queue.h"
#include "reaper.h"
#include "uvcuda.h"

enum { MIN_SHIFT = 12, NCLASS = 48 }; /* 4 KiB .. 2^59 bytes */

/* A device's pooled buffers, of one generation. */
struct pool {
  struct uvcuda__queue node; /* on `pools` */
  int ordinal;
  uint64_t gen;         /* of the buffers in it */
  size_t bytes;         /* in it */
  struct uvcuda__queue free[NCLASS]; /* buffers, by size class */
};

struct drop {
  int ordinal;
  uint64_t gen;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct uvcuda__queue pools = {&pools, &pools}; /* under mu */

static int class_of(size_t n, size_t *size) {
  int c = 0;
  while (c < NCLASS - 1 && ((size_t)1 << (MIN_SHIFT + c)) < n) c++;
  *size = (size_t)1 << (MIN_SHIFT + c);
  return c;
}

/* The buffers of a queue, unregistered where `registered` (ctx current),
 * then freed; the queue is left empty. */
static void free_all(struct uvcuda__queue *q, int registered) {
  while (!uvcuda__queue_empty(q)) {
    struct uvcuda__queue *b = uvcuda__queue_head(q);
    uvcuda__queue_remove(b);
    if (registered) uvn_cu.cuMemHostUnregister(b);
    free(b);
  }
}

/* Under mu. NULL: out of memory. A pool of an older generation is emptied
 * into `stale` (a reset took their registration: free them, no more). */
static struct pool *pool_of(int ordinal, uint64_t gen, struct uvcuda__queue *stale) {
  struct uvcuda__queue *q;
  struct pool *p;
  int c;
  uvcuda__queue_foreach(q, &pools) {
    p = uvcuda__queue_data(q, struct pool, node);
    if (p->ordinal == ordinal) break;
  }
  if (q == &pools) {
    if ((p = calloc(1, sizeof(*p))) == NULL) return NULL;
    p->ordinal = ordinal;
    p->gen = gen;
    for (c = 0; c < NCLASS; c++) uvcuda__queue_init(&p->free[c]);
    uvcuda__queue_insert_head(&pools, &p->node);
  }
  if (gen > p->gen) {
    for (c = 0; c < NCLASS; c++) uvcuda__queue_move(&p->free[c], stale);
    p->bytes = 0;
    p->gen = gen;
  }
  return p;
}

int uvn_bounce_get(int ordinal, uint64_t gen, CUcontext ctx, size_t n, struct uvn_bounce *b) {
  struct uvcuda__queue stale;
  struct pool *p;
  CUcontext prev = NULL;
  size_t size;
  int c;

  memset(b, 0, sizeof(*b));
  b->ordinal = ordinal;
  b->gen = gen;
  b->ctx = ctx;
  if (n == 0) return 0;
  if (ordinal >= 0 && ctx != NULL) {
    c = class_of(n, &size);
    uvcuda__queue_init(&stale);
    pthread_mutex_lock(&mu);
    if ((p = pool_of(ordinal, gen, &stale)) != NULL && p->gen == gen &&
        !uvcuda__queue_empty(&p->free[c])) {
      b->p = uvcuda__queue_head(&p->free[c]);
      uvcuda__queue_remove(b->p);
      p->bytes -= size;
    }
    pthread_mutex_unlock(&mu);
    free_all(&stale, 0);
    if (b->p == NULL && (b->p = aligned_alloc(4096, size)) != NULL) {
      /* RELAXED: in the default (GLOBAL) mode the registration would
       * invalidate a capture this thread, or another, is recording. */
      CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
      int relaxed = uvn_cu.cuThreadExchangeStreamCaptureMode(&mode) == CUDA_SUCCESS;
      if (relaxed && uvn_ctx_push(ctx, &prev) == CUDA_SUCCESS) {
        if (uvn_cu.cuMemHostRegister(b->p, size, 0) != CUDA_SUCCESS) {
          free(b->p);
          b->p = NULL;
        }
        uvn_ctx_pop(ctx, prev);
      } else {
        free(b->p); /* a pageable buffer below instead */
        b->p = NULL;
      }
      if (relaxed) uvn_cu.cuThreadExchangeStreamCaptureMode(&mode);
    }
    if (b->p != NULL) {
      b->size = size;
      b->pinned = 1;
      return 0;
    }
  }
  if ((b->p = malloc(n)) == NULL) return UVCUDA_ENOMEM;
  b->size = n;
  return 0;
}

/* On the reaper thread, ctx current where `current`. */
static void free_one(void *arg, int current) {
  if (current) uvn_cu.cuMemHostUnregister(arg);
  free(arg);
}

void uvn_bounce_put(struct uvn_bounce *b) {
  struct uvcuda__queue stale;
  struct pool *p;
  uint64_t now;
  size_t size;
  int c, kept = 0;

  if (b->p == NULL) return;
  if (!b->pinned) {
    free(b->p);
    b->p = NULL;
    return;
  }
  c = class_of(b->size, &size);
  now = uvn_devstate_gen(b->ordinal);
  uvcuda__queue_init(&stale);
  pthread_mutex_lock(&mu);
  if (b->gen == now && (p = pool_of(b->ordinal, now, &stale)) != NULL && p->gen == now &&
      size == b->size && p->bytes + size <= UVN_BOUNCE_POOL_BYTES) {
    uvcuda__queue_insert_head(&p->free[c], b->p);
    p->bytes += size;
    kept = 1;
  }
  pthread_mutex_unlock(&mu);
  free_all(&stale, 0);
  if (kept) {
    b->p = NULL;
    return;
  }
  if (b->gen != now) {
    free(b->p); /* its registration went with the reset */
  } else if (uvn_reap_call(b->ordinal, b->gen, b->ctx, 0, NULL, free_one, b->p) != 0) {
    /* Out of memory for the item: left allocated and registered, never
     * unregistered here (this may be a JS thread, and cuMemHostUnregister
     * waits for the device). */
  }
  b->p = NULL;
}

static void put_later(void *arg, int current) {
  (void)current; /* an ended generation's buffer: uvn_bounce_put frees it */
  uvn_bounce_put(arg);
  free(arg);
}

void uvn_bounce_put_after(struct uvn_bounce *b, CUcontext ctx, CUstream stream) {
  struct uvn_bounce *copy;
  if (b->p == NULL) return;
  if ((copy = malloc(sizeof(*copy))) != NULL) {
    *copy = *b;
    if (uvn_reap_call(b->ordinal, b->gen, ctx, 1, stream, put_later, copy) != 0) free(copy);
  }
  b->p = NULL; /* the reaper's now, or left allocated (bounce.h) */
}

static void drop_pool(void *arg, int current) {
  struct drop *d = arg;
  struct uvcuda__queue *q, all;
  struct pool *p;
  int c;

  uvcuda__queue_init(&all);
  pthread_mutex_lock(&mu);
  uvcuda__queue_foreach(q, &pools) {
    p = uvcuda__queue_data(q, struct pool, node);
    if (p->ordinal != d->ordinal) continue;
    if (p->gen == d->gen) {
      for (c = 0; c < NCLASS; c++) uvcuda__queue_move(&p->free[c], &all);
      p->bytes = 0;
    }
    break;
  }
  pthread_mutex_unlock(&mu);
  free_all(&all, current);
  free(d);
}

void uvn_bounce_drop(int ordinal, uint64_t gen, CUcontext ctx) {
  struct drop *d = malloc(sizeof(*d));
  if (d == NULL) return; /* left pooled: the memory stays valid */
  d->ordinal = ordinal;
  d->gen = gen;
  if (uvn_reap_call(ordinal, gen, ctx, 0, NULL, drop_pool, d) != 0) free(d);
}
