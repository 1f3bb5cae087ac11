/* The spin FIFO and the arm step. */
#include "spin.h"

#include <stdlib.h>

#define future_of(q) uvcuda__queue_data(q, uvcuda_future_t, spin_node_)

void uvcuda__spin_init(struct uvcuda__spin *sp) {
  uvcuda__queue_init(&sp->fifo);
  sp->scratch = NULL;
  sp->cap = 0;
  sp->stamp = 0;
}

void uvcuda__spin_free(struct uvcuda__spin *sp) {
  free(sp->scratch);
  sp->scratch = NULL;
  sp->cap = 0;
}

void uvcuda__spin_add(struct uvcuda__spin *sp, uvcuda_future_t *f,
                      uint64_t deadline) {
  struct uvcuda__queue *q = sp->fifo.prev;
  f->state_ = UVCUDA_FUTURE_SPINNING;
  f->deadline_ns_ = deadline;
  /* Deadline order; only adaptive spins (shorter) go anywhere but last. */
  while (q != &sp->fifo && future_of(q)->deadline_ns_ > deadline) q = q->prev;
  uvcuda__queue_insert_head(q, &f->spin_node_); /* after q */
}

void uvcuda__spin_arm(struct uvcuda__tlset *set, uvcuda_future_t *f,
                      uint64_t now) {
  f->state_ = UVCUDA_FUTURE_ARMED;
  if (set->flags & UVCUDA_OPT_TIMING) f->armed_ns_ = now;
  f->tl_->armed++;
  uvcuda__tl_touch(set, f->tl_); /* the settle arms its watch */
}

void uvcuda__spin_pass(struct uvcuda__spin *sp, struct uvcuda__tlset *set,
                       uint64_t now, uint64_t probe_ns) {
  struct uvcuda__queue *q, *next;
  uint64_t n = 0, i;

  /* Each timeline once, however many of its futures spin. */
  sp->stamp++;
  uvcuda__queue_foreach(q, &sp->fifo) {
    uvcuda_future_t *f = future_of(q);
    struct uvcuda__timeline *tl = f->tl_;
    if (f->state_ != UVCUDA_FUTURE_SPINNING || tl->stamp == sp->stamp) continue;
    tl->stamp = sp->stamp;
    /* A fault stops every marker: futures spinning for a probe interval
     * have their context probed, as armed ones have by the reactor. */
    if (now - f->start_ns_ >= probe_ns)
      uvcuda__context_probe(tl->ctx, now, probe_ns);
    if (n == sp->cap) {
      uint64_t cap = sp->cap ? sp->cap * 2 : 64;
      void *p = realloc(sp->scratch, cap * sizeof(*sp->scratch));
      if (p == NULL) break; /* poll the rest next pass */
      sp->scratch = p;
      sp->cap = cap;
    }
    sp->scratch[n++] = tl;
  }
  for (i = 0; i < n; i++) uvcuda__tl_spin_poll(set, sp->scratch[i]);

  /* Budget spent: arm, oldest first (the FIFO is in deadline order). */
  for (q = sp->fifo.next; q != &sp->fifo; q = next) {
    uvcuda_future_t *f = future_of(q);
    next = q->next;
    if (f->deadline_ns_ > now) break;
    if (f->state_ != UVCUDA_FUTURE_SPINNING) continue; /* being delivered */
    uvcuda__queue_remove(q);
    uvcuda__spin_arm(set, f, now);
  }
}
