/* Completion through CUDA host functions. The host function touches only a
 * ticket and the loop's port, both owned by uvcuda, never a future: a
 * future may be closed and freed while its host function is still queued.
 * Once the loop has closed, a ticket that runs frees itself. */
#include "hostfn.h"

#include <stdlib.h>

struct uvcuda__port *uvcuda__port_new(uv_async_t *async) {
  struct uvcuda__port *p = calloc(1, sizeof(*p));
  if (p == NULL) return NULL;
  if (uv_mutex_init(&p->mu) != 0) {
    free(p);
    return NULL;
  }
  p->async = async;
  p->refs = 1;
  uvcuda__queue_init(&p->done);
  uvcuda__queue_init(&p->out);
  uvcuda__queue_init(&p->onode);
  return p;
}

/* Closed ports whose tickets have not all run. After a device fault the
 * driver never runs queued host functions and never says so; their tickets
 * stay reachable from here (a few dozen bytes each) instead of being freed
 * under a host function that might still run. */
static uv_mutex_t orphans_mu;
static uv_once_t orphans_once = UV_ONCE_INIT;
static struct uvcuda__queue orphans;

static void orphans_init(void) {
  if (uv_mutex_init(&orphans_mu) != 0) abort();
  uvcuda__queue_init(&orphans);
}

static void port_free(struct uvcuda__port *p) {
  if (p->orphaned) {
    uv_mutex_lock(&orphans_mu);
    uvcuda__queue_remove(&p->onode);
    uv_mutex_unlock(&orphans_mu);
  }
  uv_mutex_destroy(&p->mu);
  free(p);
}

struct uvcuda__ticket *uvcuda__ticket_new(struct uvcuda__port *p,
                                          struct uvcuda__timeline *tl,
                                          uint64_t seq) {
  struct uvcuda__ticket *t = malloc(sizeof(*t));
  if (t == NULL) return NULL;
  t->port = p;
  t->tl = tl;
  t->seq = seq;
  t->seen_ns = 0;
  uv_mutex_lock(&p->mu);
  /* Outstanding tickets stay linked from the port so that tickets a dead
   * context never runs remain reachable rather than lost. */
  uvcuda__queue_insert_tail(&p->out, &t->node);
  p->refs++;
  uv_mutex_unlock(&p->mu);
  return t;
}

void uvcuda__ticket_abort(struct uvcuda__ticket *t) {
  struct uvcuda__port *p = t->port;
  uv_mutex_lock(&p->mu);
  uvcuda__queue_remove(&t->node);
  p->refs--; /* the loop still holds its own reference */
  uv_mutex_unlock(&p->mu);
  free(t);
}

/* Runs on the driver's host-function thread: no CUDA calls allowed here. */
void CUDA_CB uvcuda__hostfn(void *arg) {
  struct uvcuda__ticket *t = arg;
  struct uvcuda__port *p = t->port;
  int dead;

  t->seen_ns = uv_hrtime(); /* for uvcuda_future_timing; ~20 ns */
  uv_mutex_lock(&p->mu);
  uvcuda__queue_remove(&t->node);
  if (p->async != NULL) {
    uvcuda__queue_insert_tail(&p->done, &t->node);
    uv_async_send(p->async); /* under the lock: the loop can't close it */
    uv_mutex_unlock(&p->mu);
    return;
  }
  dead = --p->refs == 0;
  uv_mutex_unlock(&p->mu);
  free(t);
  if (dead) port_free(p);
}

void uvcuda__port_drain(struct uvcuda__port *p, struct uvcuda__queue *out) {
  uv_mutex_lock(&p->mu);
  uvcuda__queue_move(&p->done, out);
  uv_mutex_unlock(&p->mu);
}

void uvcuda__ticket_release(struct uvcuda__ticket *t) {
  struct uvcuda__port *p = t->port;
  uv_mutex_lock(&p->mu);
  p->refs--; /* never the last: the loop holds one until port_close */
  uv_mutex_unlock(&p->mu);
  free(t);
}

void uvcuda__port_close(struct uvcuda__port *p) {
  struct uvcuda__queue *q;
  int dead;

  uv_mutex_lock(&p->mu);
  p->async = NULL;
  while (!uvcuda__queue_empty(&p->done)) { /* ran but never drained */
    q = uvcuda__queue_head(&p->done);
    uvcuda__queue_remove(q);
    p->refs--;
    free(uvcuda__queue_data(q, struct uvcuda__ticket, node));
  }
  dead = --p->refs == 0;
  if (!dead) {
    uv_once(&orphans_once, orphans_init);
    uv_mutex_lock(&orphans_mu);
    uvcuda__queue_insert_tail(&orphans, &p->onode);
    uv_mutex_unlock(&orphans_mu);
    p->orphaned = 1;
  }
  uv_mutex_unlock(&p->mu);
  if (dead) port_free(p);
}
