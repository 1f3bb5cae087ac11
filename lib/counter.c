/* The counter pool of one CUDA context. Pages are our own page-aligned
 * memory registered with cuMemHostRegister, not cuMemHostAlloc memory: a
 * context reset or destroy frees cuMemHostAlloc memory (a later CPU read
 * of it faults), while registered memory stays ours to read whatever
 * happens to the context. */
#include "counter.h"

#include <stdlib.h>
#include <string.h>

#define PAGE_BYTES (UVCUDA__SLOTS_PER_PAGE * UVCUDA__SLOT_STRIDE)

void uvcuda__counter_pool_init(struct uvcuda__counter_pool *p) {
  uvcuda__queue_init(&p->pages);
  p->npages = 0;
}

static int page_new(struct uvcuda__counter_pool *p,
                    struct uvcuda__counter_page **out) {
  struct uvcuda__counter_page *pg = calloc(1, sizeof(*pg));
  void *host = NULL;
  CUresult r;

  if (pg == NULL || posix_memalign(&host, 4096, PAGE_BYTES) != 0) {
    free(pg);
    return UVCUDA_ENOMEM;
  }
  memset(host, 0, PAGE_BYTES);
  r = uvcuda__drv.cuMemHostRegister(host, PAGE_BYTES,
                                    CU_MEMHOSTREGISTER_DEVICEMAP);
  if (r != CUDA_SUCCESS) {
    free(host);
    free(pg);
    return UVCUDA_ECUDA(r);
  }
  r = uvcuda__drv.cuMemHostGetDevicePointer(&pg->dptr, host, 0);
  if (r != CUDA_SUCCESS) {
    /* Registered but unusable: kept as a full page, never handed out
     * (unregistering would wait for the device). */
    pg->host = host;
    pg->used = ~0ull;
    uvcuda__queue_insert_tail(&p->pages, &pg->node);
    p->npages++;
    return UVCUDA_ECUDA(r);
  }
  pg->host = host;
  uvcuda__queue_insert_tail(&p->pages, &pg->node);
  p->npages++;
  *out = pg;
  return 0;
}

/* Draining slots whose last write has landed become free. */
static void reclaim(struct uvcuda__counter_page *pg) {
  uint64_t d = pg->draining;
  while (d != 0) {
    int i = __builtin_ctzll(d);
    const void *host = pg->host + (size_t)i * UVCUDA__SLOT_STRIDE;
    d &= d - 1;
    if (uvcuda__counter_passed(uvcuda__counter_load(host, pg->mode[i]),
                               pg->mode[i], pg->expect[i])) {
      pg->draining &= ~(1ull << i);
      pg->used &= ~(1ull << i);
    }
  }
}

int uvcuda__counter_get(struct uvcuda__counter_pool *p,
                        struct uvcuda__counter *c) {
  struct uvcuda__counter_page *pg = NULL;
  struct uvcuda__queue *q;
  int i, err;

  uvcuda__queue_foreach(q, &p->pages) {
    struct uvcuda__counter_page *x =
        uvcuda__queue_data(q, struct uvcuda__counter_page, node);
    if (x->used == ~0ull && x->draining != 0) reclaim(x);
    if (x->used != ~0ull) {
      pg = x;
      break;
    }
  }
  if (pg == NULL && (err = page_new(p, &pg)) != 0) return err;
  i = __builtin_ctzll(~pg->used);
  pg->used |= 1ull << i;
  c->page = pg;
  c->index = i;
  c->host = pg->host + (size_t)i * UVCUDA__SLOT_STRIDE;
  c->dptr = pg->dptr + (CUdeviceptr)i * UVCUDA__SLOT_STRIDE;
  /* No write is due to a free slot: a plain store restarts it. */
  __atomic_store_n((uint64_t *)c->host, 0, __ATOMIC_RELAXED);
  return 0;
}

void uvcuda__counter_put(struct uvcuda__counter_pool *p,
                         struct uvcuda__counter *c, int mode, uint64_t expect) {
  struct uvcuda__counter_page *pg = c->page;
  uint64_t bit;
  (void)p;
  if (pg == NULL) return;
  bit = 1ull << c->index;
  if (expect != 0 && !uvcuda__counter_passed(
                         uvcuda__counter_load(c->host, mode), mode, expect)) {
    pg->draining |= bit;
    pg->expect[c->index] = expect;
    pg->mode[c->index] = (unsigned char)mode;
  } else {
    pg->used &= ~bit;
  }
  c->page = NULL;
  c->host = NULL;
}

void uvcuda__counter_pool_free_gone(struct uvcuda__counter_pool *p) {
  while (!uvcuda__queue_empty(&p->pages)) {
    struct uvcuda__queue *q = uvcuda__queue_head(&p->pages);
    struct uvcuda__counter_page *pg =
        uvcuda__queue_data(q, struct uvcuda__counter_page, node);
    uvcuda__queue_remove(q);
    free(pg->host);
    free(pg);
  }
  p->npages = 0;
}
