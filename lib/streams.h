/* A loop's timelines by stream id (cuStreamGetId): unlike the handle, which
 * the driver hands out again once a stream is destroyed, the id names one
 * stream for the life of the process. */
#ifndef UVCUDA_STREAMS_H
#define UVCUDA_STREAMS_H

#include <stdint.h>

#include "queue.h"

struct uvcuda__streams {
  struct uvcuda__queue *buckets;
  uint64_t nbuckets; /* a power of two, or 0 */
  uint64_t n;
};

void uvcuda__streams_init(struct uvcuda__streams *m);
void uvcuda__streams_free(struct uvcuda__streams *m);
/* The node stored under id, or NULL. `key` reads a node's id. */
struct uvcuda__queue *uvcuda__streams_find(
    const struct uvcuda__streams *m, unsigned long long id,
    unsigned long long (*key)(const struct uvcuda__queue *));
int uvcuda__streams_insert(
    struct uvcuda__streams *m, unsigned long long id,
    struct uvcuda__queue *node,
    unsigned long long (*key)(const struct uvcuda__queue *));
void uvcuda__streams_remove(struct uvcuda__streams *m,
                            struct uvcuda__queue *node);

#endif
