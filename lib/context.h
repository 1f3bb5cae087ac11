/* CUDA contexts as uvcuda sees them: one process-wide record per context
 * (found by cuCtxGetId, which is unique per context creation, unlike the
 * handle), shared by every loop. A record owns what uvcuda keeps in that
 * context: its counter pages, spare events, and a private idle stream.
 * A record is freed once nothing refers to it and its context is known to
 * be destroyed: its handle names a context with another id (a released
 * primary context made again, as each worker of a Node process that
 * does not hold the device makes it). Else it lives until exit.
 *
 * Sticky faults are found by querying the private stream, never a user
 * stream: querying a user's stream could break a capture it began, or
 * touch a stream destroyed since (libcuda may crash). An idle stream
 * reports a sticky fault as soon as any stream of the context does
 * (design.md, "Device faults"). A fault found here is kept in the record
 * and bumps a process-wide epoch that loops compare each pass. */
#ifndef UVCUDA_CONTEXT_H
#define UVCUDA_CONTEXT_H

#include <stdatomic.h>
#include <stdint.h>

#include "counter.h"
#include "driver.h"
#include "evpool.h"
#include "queue.h"

struct uvcuda__context {
  struct uvcuda__queue node; /* the registry */
  unsigned long long id;
  CUcontext cuctx;
  CUdevice dev;
  CUstream probe;   /* private and idle: queried for faults */
  atomic_int fault; /* 0, or the sticky CUresult found */
  /* A reset destroyed the context: none of its objects (the probe stream,
   * events, counter registrations) may be touched again. Threads that use
   * them count themselves in `users`; the reset waits for none. */
  atomic_int dead;
  atomic_int users;
  /* Holders of the pointer beyond a call: timelines, a loop's list of
   * faulted contexts, a caller of context_get until its release. */
  atomic_int refs;
  _Atomic uint64_t next_probe_ns;
  uv_mutex_t mu; /* counters, events */
  struct uvcuda__counter_pool counters;
  struct uvcuda__evpool events;
  /* The reactor thread's own: which records one probe round takes. */
  unsigned probe_stamp;
};

/* The record of context c, made on first use (then it creates the private
 * stream, with c current), with a reference the caller gives back with
 * uvcuda__context_release (or passes on). */
int uvcuda__context_get(CUcontext c, struct uvcuda__context **out);
void uvcuda__context_ref(struct uvcuda__context *x);
void uvcuda__context_release(struct uvcuda__context *x);

/* Records in the registry (tests). */
unsigned uvcuda__context_records(void);

/* 0 or the sticky CUresult found in x. Any thread. */
static inline int uvcuda__context_fault(struct uvcuda__context *x) {
  return atomic_load_explicit(&x->fault, memory_order_acquire);
}

/* Whether a reset destroyed x (uvcuda's, or one found by x's new id):
 * none of its objects, nor memory the context allocated, exist now. */
static inline int uvcuda__context_dead(struct uvcuda__context *x) {
  return atomic_load_explicit(&x->dead, memory_order_acquire);
}

/* Queries x's private stream if `interval` ns passed since its last query
 * by any thread; returns 0 or the sticky CUresult. Any thread. */
int uvcuda__context_probe(struct uvcuda__context *x, uint64_t now,
                          uint64_t interval);

/* Bumped each time a record turns faulted. Any thread. */
unsigned uvcuda__context_epoch(void);

/* Around a driver call on one of x's own objects: 0 if x is dead (then
 * make no call and do not unpin). */
int uvcuda__context_pin(struct uvcuda__context *x);
void uvcuda__context_unpin(struct uvcuda__context *x);

/* The sticky error of x's private stream right now (0: healthy); the
 * record keeps it. Any thread. */
int uvcuda__context_query(struct uvcuda__context *x);

/* Marks every record of device dev dead and faulted (`err` where no fault
 * was found yet), and returns once no thread uses their objects. */
void uvcuda__context_kill_device(CUdevice dev, int err);

/* Counters and events of x (its lock is taken here). counter_get needs
 * no context current; event_get/put run with x's context current. */
int uvcuda__context_counter_get(struct uvcuda__context *x,
                                struct uvcuda__counter *c);
void uvcuda__context_counter_put(struct uvcuda__context *x,
                                 struct uvcuda__counter *c, int mode,
                                 uint64_t expect);
CUevent uvcuda__context_event_get(struct uvcuda__context *x);
void uvcuda__context_event_put(struct uvcuda__context *x, CUevent ev);

#endif
