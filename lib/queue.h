/* The one list type of lib/: an intrusive circular doubly linked queue, the
 * pattern of libuv's src/queue.h (written here, not copied). A node that is
 * self-linked is on no queue, so membership needs no flag: every node is
 * initialised once and removing a node re-initialises it. */
#ifndef UVCUDA_QUEUE_H
#define UVCUDA_QUEUE_H

#include <stddef.h>

#include "uvcuda.h" /* struct uvcuda__queue: embedded in uvcuda_future_t */

#define uvcuda__queue_data(node, type, field) \
  ((type *)((char *)(node)-offsetof(type, field)))

#define uvcuda__queue_foreach(q, h) \
  for ((q) = (h)->next; (q) != (h); (q) = (q)->next)

static inline void uvcuda__queue_init(struct uvcuda__queue *q) {
  q->next = q;
  q->prev = q;
}

static inline int uvcuda__queue_empty(const struct uvcuda__queue *q) {
  return q == q->next;
}

static inline struct uvcuda__queue *uvcuda__queue_head(
    const struct uvcuda__queue *q) {
  return q->next;
}

static inline struct uvcuda__queue *uvcuda__queue_last(
    const struct uvcuda__queue *q) {
  return q->prev;
}

static inline void uvcuda__queue_insert_tail(struct uvcuda__queue *h,
                                             struct uvcuda__queue *q) {
  q->next = h;
  q->prev = h->prev;
  q->prev->next = q;
  h->prev = q;
}

static inline void uvcuda__queue_insert_head(struct uvcuda__queue *h,
                                             struct uvcuda__queue *q) {
  q->next = h->next;
  q->prev = h;
  q->next->prev = q;
  h->next = q;
}

/* Unlinks q (a no-op for a node on no queue) and leaves it self-linked. */
static inline void uvcuda__queue_remove(struct uvcuda__queue *q) {
  q->prev->next = q->next;
  q->next->prev = q->prev;
  q->next = q;
  q->prev = q;
}

/* Appends every node of from to the tail of h; from is left empty. */
static inline void uvcuda__queue_move(struct uvcuda__queue *from,
                                      struct uvcuda__queue *h) {
  if (uvcuda__queue_empty(from)) return;
  from->next->prev = h->prev;
  h->prev->next = from->next;
  from->prev->next = h;
  h->prev = from->prev;
  uvcuda__queue_init(from);
}

#endif
