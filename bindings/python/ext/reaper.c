/* The reaper: frees device memory and unloads modules on a thread of its
 * own. cuMemFree and cuModuleUnload wait for the device (every stream of
 * the context: 280 ms behind a 300 ms kernel on the H200, and the
 * simulated driver waits the same way); called on the loop thread, from
 * free() or from a deallocation the collector runs anywhere, they would
 * stop the event loop, and hold the GIL, for as long as any kernel runs.
 * One process-wide thread, started on first use, takes them in order,
 * without the GIL: each holds its device's reset lock for reading and
 * skips an object a reset ended (the driver may have handed its handle
 * out again). */
#include "reaper.h"

#include <pthread.h>
#include <stdlib.h>

struct item {
  struct item *next;
  int kind;
  struct dev *dev;
  uint64_t gen;
  uintptr_t handle;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static struct item *head, *tail;
static int started, busy;

static void run(struct item *it) {
  CUcontext prev = NULL;
  pthread_rwlock_rdlock(&it->dev->rw);
  if (it->gen == dev_gen(it->dev) &&
      ctx_push(it->dev->ctx, &prev) == CUDA_SUCCESS) {
    if (it->kind == REAP_MEMORY)
      cu.cuMemFree((CUdeviceptr)it->handle);
    else
      cu.cuModuleUnload((CUmodule)it->handle);
    ctx_pop(it->dev->ctx, prev);
  }
  pthread_rwlock_unlock(&it->dev->rw);
}

static void *reaper_main(void *arg) {
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  struct item *it;
  (void)arg;
  /* Its frees must not invalidate a capture another thread records. */
  cu.cuThreadExchangeStreamCaptureMode(&mode);
  for (;;) {
    pthread_mutex_lock(&mu);
    busy = 0;
    pthread_cond_broadcast(&cv);
    while (head == NULL) pthread_cond_wait(&cv, &mu);
    it = head;
    head = it->next;
    if (head == NULL) tail = NULL;
    busy = 1;
    pthread_mutex_unlock(&mu);
    run(it);
    free(it);
  }
  return NULL;
}

void reap(int kind, struct dev *d, uint64_t gen, uintptr_t handle) {
  struct item *it = calloc(1, sizeof(*it));
  pthread_attr_t attr;
  pthread_t t;
  if (it == NULL) return; /* left to the driver: reclaimed with the process */
  it->kind = kind;
  it->dev = d;
  it->gen = gen;
  it->handle = handle;
  pthread_mutex_lock(&mu);
  if (!started) {
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    started = pthread_create(&t, &attr, reaper_main, NULL) == 0;
    pthread_attr_destroy(&attr);
    if (!started) { /* no thread: here, slowly but surely */
      pthread_mutex_unlock(&mu);
      run(it);
      free(it);
      return;
    }
  }
  if (tail != NULL)
    tail->next = it;
  else
    head = it;
  tail = it;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
}

int reap_idle(void) {
  int idle;
  pthread_mutex_lock(&mu);
  idle = head == NULL && !busy;
  pthread_mutex_unlock(&mu);
  return idle;
}
