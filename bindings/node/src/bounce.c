/* See bounce.h. A free buffer is linked into its class's list through its
 * own first word (the memory is ours whatever the driver did): the pool
 * needs no memory of its own per buffer. */
#include "bounce.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "devstate.h"
#include "reaper.h"
#include "uvcuda.h"

enum { MIN_SHIFT = 12, NCLASS = 48 }; /* 4 KiB .. 2^59 bytes */

struct pool {
  struct pool *next;
  int ordinal;
  uint64_t gen;         /* of the buffers in it */
  size_t bytes;         /* in it */
  void *free[NCLASS];
};

struct drop {
  int ordinal;
  uint64_t gen;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct pool *pools;

static int class_of(size_t n, size_t *size) {
  int c = 0;
  while (c < NCLASS - 1 && ((size_t)1 << (MIN_SHIFT + c)) < n) c++;
  *size = (size_t)1 << (MIN_SHIFT + c);
  return c;
}

/* The buffers of a list, unregistered where `registered` (ctx current),
 * then freed. */
static void free_list(void *q, int registered) {
  void *next;
  for (; q != NULL; q = next) {
    next = *(void **)q;
    if (registered) cu.cuMemHostUnregister(q);
    free(q);
  }
}

/* Under mu. NULL: out of memory. A pool of an older generation is emptied
 * into *stale (a reset took their registration: free them, no more). */
static struct pool *pool_of(int ordinal, uint64_t gen, void **stale) {
  struct pool *p;
  int c;
  for (p = pools; p != NULL; p = p->next)
    if (p->ordinal == ordinal) break;
  if (p == NULL) {
    if ((p = calloc(1, sizeof(*p))) == NULL) return NULL;
    p->ordinal = ordinal;
    p->gen = gen;
    p->next = pools;
    pools = p;
  }
  if (gen > p->gen) {
    for (c = 0; c < NCLASS; c++)
      while (p->free[c] != NULL) {
        void *q = p->free[c];
        p->free[c] = *(void **)q;
        *(void **)q = *stale;
        *stale = q;
      }
    p->bytes = 0;
    p->gen = gen;
  }
  return p;
}

int bounce_get(int ordinal, uint64_t gen, CUcontext ctx, size_t n, struct bounce *b) {
  struct pool *p;
  CUcontext prev = NULL;
  void *stale = NULL;
  size_t size;
  int c;

  memset(b, 0, sizeof(*b));
  b->ordinal = ordinal;
  b->gen = gen;
  b->ctx = ctx;
  if (n == 0) return 0;
  if (ordinal >= 0 && ctx != NULL) {
    c = class_of(n, &size);
    pthread_mutex_lock(&mu);
    if ((p = pool_of(ordinal, gen, &stale)) != NULL && p->gen == gen &&
        p->free[c] != NULL) {
      b->p = p->free[c];
      p->free[c] = *(void **)b->p;
      p->bytes -= size;
    }
    pthread_mutex_unlock(&mu);
    free_list(stale, 0);
    if (b->p == NULL && (b->p = aligned_alloc(4096, size)) != NULL) {
      /* RELAXED: in the default (GLOBAL) mode the registration would
       * invalidate a capture this thread, or another, is recording. */
      CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
      int relaxed = cu.cuThreadExchangeStreamCaptureMode(&mode) == CUDA_SUCCESS;
      if (relaxed && cu_ctx_push(ctx, &prev) == CUDA_SUCCESS) {
        if (cu.cuMemHostRegister(b->p, size, 0) != CUDA_SUCCESS) {
          free(b->p);
          b->p = NULL;
        }
        cu_ctx_pop(ctx, prev);
      } else {
        free(b->p); /* a pageable buffer below instead */
        b->p = NULL;
      }
      if (relaxed) cu.cuThreadExchangeStreamCaptureMode(&mode);
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
  if (current) cu.cuMemHostUnregister(arg);
  free(arg);
}

void bounce_put(struct bounce *b) {
  struct pool *p;
  void *stale = NULL;
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
  now = devstate_gen(b->ordinal);
  pthread_mutex_lock(&mu);
  if (b->gen == now && (p = pool_of(b->ordinal, now, &stale)) != NULL && p->gen == now &&
      size == b->size && p->bytes + size <= BOUNCE_POOL_BYTES) {
    *(void **)b->p = p->free[c];
    p->free[c] = b->p;
    p->bytes += size;
    kept = 1;
  }
  pthread_mutex_unlock(&mu);
  free_list(stale, 0);
  if (kept) {
    b->p = NULL;
    return;
  }
  if (b->gen != now) {
    free(b->p); /* its registration went with the reset */
  } else if (reap_call(b->ordinal, b->gen, b->ctx, 0, NULL, free_one, b->p) != 0) {
    /* Out of memory for the item: left allocated and registered, never
     * unregistered here (this may be a JS thread, and cuMemHostUnregister
     * waits for the device). */
  }
  b->p = NULL;
}

static void put_later(void *arg, int current) {
  (void)current; /* an ended generation's buffer: bounce_put frees it */
  bounce_put(arg);
  free(arg);
}

void bounce_put_after(struct bounce *b, CUcontext ctx, CUstream stream) {
  struct bounce *copy;
  if (b->p == NULL) return;
  if ((copy = malloc(sizeof(*copy))) != NULL) {
    *copy = *b;
    if (reap_call(b->ordinal, b->gen, ctx, 1, stream, put_later, copy) != 0) free(copy);
  }
  b->p = NULL; /* the reaper's now, or left allocated (bounce.h) */
}

static void drop_pool(void *arg, int current) {
  struct drop *d = arg;
  struct pool *p;
  void *list[NCLASS];
  int c;

  memset(list, 0, sizeof(list));
  pthread_mutex_lock(&mu);
  for (p = pools; p != NULL; p = p->next)
    if (p->ordinal == d->ordinal) break;
  if (p != NULL && p->gen == d->gen) {
    memcpy(list, p->free, sizeof(list));
    memset(p->free, 0, sizeof(p->free));
    p->bytes = 0;
  }
  pthread_mutex_unlock(&mu);
  for (c = 0; c < NCLASS; c++) free_list(list[c], current);
  free(d);
}

void bounce_drop(int ordinal, uint64_t gen, CUcontext ctx) {
  struct drop *d = malloc(sizeof(*d));
  if (d == NULL) return; /* left pooled: the memory stays valid */
  d->ordinal = ordinal;
  d->gen = gen;
  if (reap_call(ordinal, gen, ctx, 0, NULL, drop_pool, d) != 0) free(d);
}
