/* Chained hash of stream ids; buckets are queues, grown at load 1. */
#include "streams.h"

#include <stdlib.h>

#include "uvcuda.h"

static uint64_t hash(unsigned long long id) {
  uint64_t h = (uint64_t)id * 0x9e3779b97f4a7c15ull;
  return h ^ (h >> 29);
}

void uvcuda__streams_init(struct uvcuda__streams *m) {
  m->buckets = NULL;
  m->nbuckets = 0;
  m->n = 0;
}

void uvcuda__streams_free(struct uvcuda__streams *m) {
  free(m->buckets);
  uvcuda__streams_init(m);
}

struct uvcuda__queue *uvcuda__streams_find(
    const struct uvcuda__streams *m, unsigned long long id,
    unsigned long long (*key)(const struct uvcuda__queue *)) {
  struct uvcuda__queue *h, *q;
  if (m->nbuckets == 0) return NULL;
  h = &m->buckets[hash(id) & (m->nbuckets - 1)];
  uvcuda__queue_foreach(q, h) {
    if (key(q) == id) return q;
  }
  return NULL;
}

static int grow(struct uvcuda__streams *m,
                unsigned long long (*key)(const struct uvcuda__queue *)) {
  uint64_t n = m->nbuckets ? m->nbuckets * 2 : 64, i;
  struct uvcuda__queue *b = malloc(n * sizeof(*b)), *q;
  if (b == NULL) return UVCUDA_ENOMEM;
  for (i = 0; i < n; i++) uvcuda__queue_init(&b[i]);
  for (i = 0; i < m->nbuckets; i++) {
    while (!uvcuda__queue_empty(&m->buckets[i])) {
      q = uvcuda__queue_head(&m->buckets[i]);
      uvcuda__queue_remove(q);
      uvcuda__queue_insert_tail(&b[hash(key(q)) & (n - 1)], q);
    }
  }
  free(m->buckets);
  m->buckets = b;
  m->nbuckets = n;
  return 0;
}

int uvcuda__streams_insert(
    struct uvcuda__streams *m, unsigned long long id,
    struct uvcuda__queue *node,
    unsigned long long (*key)(const struct uvcuda__queue *)) {
  int err;
  if (m->n + 1 > m->nbuckets && (err = grow(m, key)) != 0) return err;
  uvcuda__queue_insert_tail(&m->buckets[hash(id) & (m->nbuckets - 1)], node);
  m->n++;
  return 0;
}

void uvcuda__streams_remove(struct uvcuda__streams *m,
                            struct uvcuda__queue *node) {
  uvcuda__queue_remove(node);
  m->n--;
}
