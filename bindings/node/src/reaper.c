/* The reaper: destroys CUDA objects off the JS thread.
 *
 * cuMemFree (and cuModuleUnload) synchronize with the device: they return
 * only once the work already queued is done. Called on the JS thread, from
 * free() or from a finalizer run by the GC, they would stall the event loop
 * for as long as any kernel runs, which is what this package is there to
 * avoid. So destruction is queued to one process-wide thread, in FIFO
 * order: a device's primary-context release, queued after the frees of its
 * objects, runs after them. The thread starts on first use and lives as
 * long as the process. That is safe only because the addon never unloads:
 * Node does dlclose() an addon once the last worker that loaded it ends,
 * and the promise helper (uvcuda_napi.c) keeps this shared object resident
 * from its first call on (see make_resident there). The thread is shared by
 * every env of the process, so no single env's teardown could join it.
 *
 * Each item holds the device's reset lock for reading while it runs (a
 * reset waits for it) and skips the driver call when its object belongs to
 * a generation a reset ended (devstate.h).
 *
 * UVCUDA_NODE_FREE_INLINE=1 destroys on the calling thread instead (for
 * comparison and debugging). */
#include "reaper.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "devstate.h"
#include "queue.h"

enum { REAP_MEMORY = 1, REAP_MODULE, REAP_STREAM, REAP_CTX_RELEASE, REAP_CALL };

struct item {
  struct uvcuda__queue node; /* on `items` */
  int kind;
  int ordinal; /* -1: no device known */
  uint64_t gen;
  CUcontext ctx;
  CUstream stream; /* REAP_CALL: what to wait for (NULL: the context) */
  int wait;        /* REAP_CALL: wait for it first */
  union {
    CUdeviceptr ptr;
    CUmodule mod;
    CUstream stream;
    CUdevice dev;
    struct {
      uvn_reap_fn fn;
      void *arg;
    } call;
  } u;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static struct uvcuda__queue items = {&items, &items}; /* FIFO, under mu */
static int started, inline_mode = -1;

static void run_current(struct item *it) {
  CUcontext prev = NULL;
  if (it->kind == REAP_CTX_RELEASE) {
    uvn_cu.cuDevicePrimaryCtxRelease(it->u.dev);
    return;
  }
  /* Never in another device's context, nor in none: what its context
   * could not be made current for stays until the process ends (a refused
   * switch means a driver in trouble; a leak is safe, a stray free not). */
  if (uvn_ctx_push(it->ctx, &prev) != CUDA_SUCCESS) return;
  /* Work still queued may use what goes away (uvcuda's loop close does
   * not wait for the GPU, nor does a worker's teardown: its cancelled
   * kernels may still use its memory): cuMemFree and cuModuleUnload wait
   * for the device first (implicit synchronisation), here, off the JS
   * thread; a host buffer waits for its stream, or its context. */
  switch (it->kind) {
    case REAP_MEMORY: uvn_cu.cuMemFree(it->u.ptr); break;
    case REAP_MODULE: uvn_cu.cuModuleUnload(it->u.mod); break;
    case REAP_STREAM: uvn_cu.cuStreamDestroy(it->u.stream); break;
    default: break;
  }
  uvn_ctx_pop(it->ctx, prev);
}

/* A reset ended the generation (not current): the GPU is done with it. */
static void run_call(struct item *it, int current) {
  CUcontext prev = NULL;
  int push = current && it->ctx != NULL;
  /* Unwaited, fn could hand back a buffer the GPU still uses: left as is,
   * like run_current's. */
  if (push && uvn_ctx_push(it->ctx, &prev) != CUDA_SUCCESS) return;
  if (push) {
    if (it->wait && it->stream)
      uvn_cu.cuStreamSynchronize(it->stream); /* an error: done too */
    else if (it->wait)
      uvn_cu.cuCtxSynchronize();
  }
  it->u.call.fn(it->u.call.arg, current);
  if (push) uvn_ctx_pop(it->ctx, prev);
}

static void run(struct item *it) {
  uint64_t gen = 0;
  int current;
  if (it->ordinal >= 0) uvn_devstate_enter_wait(it->ordinal, &gen);
  /* An object of an older generation went with the reset that ended it. */
  current = it->ordinal < 0 || gen == it->gen;
  if (it->kind == REAP_CALL) run_call(it, current);
  else if (current || it->kind == REAP_CTX_RELEASE) run_current(it);
  if (it->ordinal >= 0) uvn_devstate_leave(it->ordinal);
}

static void *reaper_main(void *arg) {
  CUstreamCaptureMode mode;
  struct item *it;
  int relaxed = 0;
  (void)arg;
  for (;;) {
    pthread_mutex_lock(&mu);
    while (uvcuda__queue_empty(&items)) pthread_cond_wait(&cv, &mu);
    it = uvcuda__queue_data(uvcuda__queue_head(&items), struct item, node);
    uvcuda__queue_remove(&it->node);
    pthread_mutex_unlock(&mu);
    /* Frees and synchronizes here are "potentially unsafe" calls: in the
     * default (GLOBAL) mode one would invalidate a capture that any JS
     * thread is recording. Asked again until the driver agrees. */
    mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    if (!relaxed) relaxed = uvn_cu.cuThreadExchangeStreamCaptureMode(&mode) == CUDA_SUCCESS;
    run(it);
    free(it);
  }
  return NULL;
}

static void push(struct item *it) {
  pthread_t t;
  pthread_attr_t attr;

  if (inline_mode < 0) {
    const char *e = getenv("UVCUDA_NODE_FREE_INLINE");
    inline_mode = e != NULL && strcmp(e, "1") == 0;
  }
  pthread_mutex_lock(&mu);
  if (!inline_mode && !started) {
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, reaper_main, NULL) == 0) started = 1;
    else inline_mode = 1; /* no thread: do it here, slowly but surely */
    pthread_attr_destroy(&attr);
  }
  if (inline_mode) {
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    int relaxed;
    pthread_mutex_unlock(&mu);
    /* RELAXED as on the reaper thread; this thread's own mode put back. */
    relaxed = uvn_cu.cuThreadExchangeStreamCaptureMode(&mode) == CUDA_SUCCESS;
    run(it);
    if (relaxed) uvn_cu.cuThreadExchangeStreamCaptureMode(&mode);
    free(it);
    return;
  }
  uvcuda__queue_insert_tail(&items, &it->node);
  pthread_cond_signal(&cv);
  pthread_mutex_unlock(&mu);
}

static struct item *item_new(int kind, int ordinal, uint64_t gen, CUcontext ctx) {
  struct item *it = calloc(1, sizeof(*it));
  if (it == NULL) return NULL;
  it->kind = kind;
  it->ordinal = ordinal;
  it->gen = gen;
  it->ctx = ctx;
  return it;
}

/* Out of memory for an item: the object is left to the driver (reclaimed
 * with the context or the process), never destroyed on the calling thread,
 * which may be a JS thread. */
void uvn_reap_memory(int ordinal, uint64_t gen, CUcontext ctx, CUdeviceptr ptr) {
  struct item *it = item_new(REAP_MEMORY, ordinal, gen, ctx);
  if (it == NULL) return;
  it->u.ptr = ptr;
  push(it);
}

void uvn_reap_module(int ordinal, uint64_t gen, CUcontext ctx, CUmodule mod) {
  struct item *it = item_new(REAP_MODULE, ordinal, gen, ctx);
  if (it == NULL) return;
  it->u.mod = mod;
  push(it);
}

void uvn_reap_stream(int ordinal, uint64_t gen, CUcontext ctx, CUstream stream) {
  struct item *it = item_new(REAP_STREAM, ordinal, gen, ctx);
  if (it == NULL) return;
  it->u.stream = stream;
  push(it);
}

void uvn_reap_ctx_release(int ordinal, CUdevice dev) {
  struct item *it = item_new(REAP_CTX_RELEASE, ordinal, 0, NULL);
  if (it == NULL) return;
  it->u.dev = dev;
  push(it);
}

int uvn_reap_call(int ordinal, uint64_t gen, CUcontext ctx, int wait, CUstream stream,
                  uvn_reap_fn fn, void *arg) {
  struct item *it;
  if (wait && ctx == NULL) return -1; /* nothing says when the GPU is done */
  if ((it = item_new(REAP_CALL, ordinal, gen, ctx)) == NULL) return -1;
  it->wait = wait;
  it->stream = stream;
  it->u.call.fn = fn;
  it->u.call.arg = arg;
  push(it);
  return 0;
}
