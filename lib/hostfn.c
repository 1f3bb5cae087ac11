/* Completion through CUDA host functions. The host function touches only a
 * ticket and the loop's port, both owned by uvcuda, never a future: a
 * future may be closed and freed while its host function is still queued.
 * Once the loop has closed, a ticket that runs frees itself. */
#include "internal.h"

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
  return p;
}

/* Caller holds p->mu; returns nonzero when the port must be freed. */
static int unref_locked(struct uvcuda__port *p) { return --p->refs == 0; }

/* Closed ports whose tickets have not all run. After a device fault the
 * driver never runs queued host functions and never says so; their tickets
 * stay reachable from here (a few dozen bytes each) instead of being freed
 * under a host function that might still run. */
static uv_mutex_t orphans_mu;
static uv_once_t orphans_once = UV_ONCE_INIT;
static struct uvcuda__port *orphans;

static void orphans_init(void) { uv_mutex_init(&orphans_mu); }

static void port_free(struct uvcuda__port *p) {
  if (p->orphan) {
    uv_mutex_lock(&orphans_mu);
    if (p->oprev) p->oprev->onext = p->onext; else orphans = p->onext;
    if (p->onext) p->onext->oprev = p->oprev;
    uv_mutex_unlock(&orphans_mu);
  }
  uv_mutex_destroy(&p->mu);
  free(p);
}

static void unlink_out(struct uvcuda__port *p, struct uvcuda__ticket *t) {
  if (t->prev) t->prev->next = t->next; else p->out = t->next;
  if (t->next) t->next->prev = t->prev;
  t->next = t->prev = NULL;
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
  t->prev = NULL;
  uv_mutex_lock(&p->mu);
  /* Outstanding tickets stay linked from the port so that tickets a dead
   * context never runs remain reachable rather than lost. */
  t->next = p->out;
  if (p->out) p->out->prev = t;
  p->out = t;
  p->refs++;
  uv_mutex_unlock(&p->mu);
  return t;
}

void uvcuda__ticket_abort(struct uvcuda__ticket *t) {
  struct uvcuda__port *p = t->port;
  uv_mutex_lock(&p->mu);
  unlink_out(p, t);
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
  unlink_out(p, t);
  if (p->async != NULL) {
    t->next = p->done;
    p->done = t;
    uv_async_send(p->async); /* under the lock: the loop can't close it */
    uv_mutex_unlock(&p->mu);
    return;
  }
  dead = unref_locked(p);
  uv_mutex_unlock(&p->mu);
  free(t);
  if (dead) port_free(p);
}

/* The list comes back newest first; reverse it to stream order. */
struct uvcuda__ticket *uvcuda__port_drain(struct uvcuda__port *p) {
  struct uvcuda__ticket *t, *next, *rev = NULL;
  uv_mutex_lock(&p->mu);
  t = p->done;
  p->done = NULL;
  uv_mutex_unlock(&p->mu);
  for (; t; t = next) {
    next = t->next;
    t->next = rev;
    rev = t;
  }
  return rev;
}

void uvcuda__ticket_release(struct uvcuda__ticket *t) {
  struct uvcuda__port *p = t->port;
  uv_mutex_lock(&p->mu);
  p->refs--; /* never the last: the loop holds one until port_close */
  uv_mutex_unlock(&p->mu);
  free(t);
}

void uvcuda__port_close(struct uvcuda__port *p) {
  struct uvcuda__ticket *t, *next;
  int dead;

  uv_mutex_lock(&p->mu);
  p->async = NULL;
  t = p->done;
  p->done = NULL;
  for (; t; t = next) { /* ran but never drained */
    next = t->next;
    p->refs--;
    free(t);
  }
  dead = unref_locked(p);
  if (!dead) {
    uv_once(&orphans_once, orphans_init);
    uv_mutex_lock(&orphans_mu);
    p->orphan = 1;
    p->oprev = NULL;
    p->onext = orphans;
    if (orphans) orphans->oprev = p;
    orphans = p;
    uv_mutex_unlock(&orphans_mu);
  }
  uv_mutex_unlock(&p->mu);
  if (dead) port_free(p);
}
