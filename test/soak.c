/* GPU soak: several loops on their own threads keep futures in flight with
 * kernels of random length for a given time, cycling every loop through all
 * strategies (close everything, re-init with the next) every few seconds.
 * The main thread samples RSS and completion counts. At the end: every start
 * got exactly one callback, every close one close callback; RSS must not
 * grow after the warm-up. Exit 0 when all holds.
 *
 *   uvcuda-soak [seconds=300] [loops=4]      (test/soak.sh runs it) */
#include "tu.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NF 64
#define NS 8
#define PHASE_MS 5000

static int stop; /* set by main, read by the loops: atomic */
static const uvcuda_completion_t strategies[] = {
    UVCUDA_COMPLETION_AUTO, UVCUDA_COMPLETION_REACTOR, UVCUDA_COMPLETION_HOSTFN,
    UVCUDA_COMPLETION_POLL};

typedef struct worker worker_t;
typedef struct {
  uvcuda_future_t f;
  worker_t *w;
  uint64_t rng;
  int closing;
} item_t;

struct worker {
  int id;
  uv_loop_t uv;
  uvcuda_loop_t ul;
  int ul_closed;
  item_t it[NF];
  CUstream s[NS];
  int draining;
  uint64_t starts, cbs, errors, closes, close_cbs, phases;
  uint64_t per_strategy[4];
  int cur;
};

static uint64_t xs(uint64_t *r) {
  *r ^= *r << 13;
  *r ^= *r >> 7;
  *r ^= *r << 17;
  return *r;
}

static int op(uvcuda_future_t *f, uvcuda_stream_t s) {
  item_t *it = f->data;
  uint64_t ns = xs(&it->rng) % 200000; /* 0..200 µs */
  void *args[] = {&ns};
  return tu.cuLaunchKernel(tu_fn_sleep, 1, 1, 1, 1, 1, 1, 0, (CUstream)s, args, NULL);
}

static void on_done(uvcuda_future_t *f, int status);

static void start(item_t *it) {
  worker_t *w = it->w;
  if (uvcuda_future_start(&it->f, w->s[xs(&it->rng) % NS], op, on_done) == 0)
    w->starts++;
  else
    __atomic_fetch_add(&w->errors, 1, __ATOMIC_RELAXED);
}

static void on_done(uvcuda_future_t *f, int status) {
  item_t *it = f->data;
  worker_t *w = it->w;
  /* The main thread samples cbs and errors: atomic, relaxed. */
  __atomic_fetch_add(&w->cbs, 1, __ATOMIC_RELAXED);
  if (status != 0 && status != UVCUDA_ECANCELED)
    __atomic_fetch_add(&w->errors, 1, __ATOMIC_RELAXED);
  if (status == 0) w->per_strategy[w->cur]++;
  if (!w->draining && !it->closing) start(it);
}

static void on_closed(uvcuda_future_t *f) {
  item_t *it = f->data;
  it->w->close_cbs++;
}

static void on_ul_closed(uvcuda_loop_t *ul) { ((worker_t *)ul->data)->ul_closed = 1; }

static void *run(void *arg) {
  worker_t *w = arg;
  uvcuda_options_t o;
  int i;

  tu.cuCtxSetCurrent(tu_ctx);
  uv_loop_init(&w->uv);
  for (i = 0; i < NS; i++) tu.cuStreamCreate(&w->s[i], CU_STREAM_NON_BLOCKING);
  while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
    uint64_t end = uv_hrtime() + (uint64_t)PHASE_MS * 1000000u;
    w->cur = (int)((w->phases + (uint64_t)w->id) % 4);
    uvcuda_options_init(&o);
    o.completion = strategies[w->cur];
    if (uvcuda_loop_init(&w->uv, &w->ul, &o) != 0) {
      __atomic_fetch_add(&w->errors, 1, __ATOMIC_RELAXED);
      break;
    }
    w->draining = 0;
    for (i = 0; i < NF; i++) {
      w->it[i].w = w;
      w->it[i].rng = (uint64_t)(w->id + 1) * 0x9e3779b97f4a7c15ull + (uint64_t)i + w->phases;
      w->it[i].closing = 0;
      uvcuda_future_init(&w->ul, &w->it[i].f);
      w->it[i].f.data = &w->it[i];
      start(&w->it[i]);
    }
    while (!__atomic_load_n(&stop, __ATOMIC_RELAXED) && uv_hrtime() < end) {
      uv_run(&w->uv, UV_RUN_ONCE);
      /* Now and then close one in flight and bring it back. */
      i = (int)(xs(&w->it[0].rng) % (NF * 64));
      if (i < NF && !w->it[i].closing) {
        w->it[i].closing = 1;
        w->closes++;
        uvcuda_future_close(&w->it[i].f, on_closed);
      }
      for (i = 0; i < NF; i++) {
        if (w->it[i].closing && uvcuda_future_state(&w->it[i].f) == UVCUDA_FUTURE_CLOSED) {
          w->it[i].closing = 0;
          uvcuda_future_init(&w->ul, &w->it[i].f);
          w->it[i].f.data = &w->it[i];
          start(&w->it[i]);
        }
      }
    }
    w->draining = 1;
    for (i = 0; i < NF; i++) {
      if (!w->it[i].closing) {
        w->it[i].closing = 1;
        w->closes++;
        uvcuda_future_close(&w->it[i].f, on_closed);
      }
    }
    uv_run(&w->uv, UV_RUN_DEFAULT);
    w->ul.data = w;
    w->ul_closed = 0;
    if (uvcuda_loop_close(&w->ul, on_ul_closed) != 0) __atomic_fetch_add(&w->errors, 1, __ATOMIC_RELAXED);
    uv_run(&w->uv, UV_RUN_DEFAULT);
    if (!w->ul_closed) __atomic_fetch_add(&w->errors, 1, __ATOMIC_RELAXED);
    w->phases++;
  }
  for (i = 0; i < NS; i++) {
    tu.cuStreamSynchronize(w->s[i]);
    tu.cuStreamDestroy(w->s[i]);
  }
  if (uv_loop_close(&w->uv) != 0) __atomic_fetch_add(&w->errors, 1, __ATOMIC_RELAXED);
  return NULL;
}

static long rss_kib(void) {
  long pages = 0, resident = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f) {
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    fclose(f);
  }
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

int main(int argc, char **argv) {
  int secs = argc > 1 ? atoi(argv[1]) : 300;
  int nloops = argc > 2 ? atoi(argv[2]) : 4;
  worker_t *w;
  pthread_t *t;
  long rss0 = 0, rss_max_after = 0, rss;
  uint64_t total_cbs, total_starts;
  int i, sec, bad = 0, rc;

  if (nloops < 1 || nloops > 16 || secs < 1) return 2;
  if ((rc = tu_setup(0)) != 0) return rc;
  w = calloc((size_t)nloops, sizeof(*w));
  t = calloc((size_t)nloops, sizeof(*t));
  printf("soak: %d loops, %d s, %s driver\n", nloops, secs,
         tu_is_simulated() ? "SIMULATED" : "real");
  printf("%6s %10s %12s %10s\n", "t_s", "rss_kib", "callbacks", "errors");
  for (i = 0; i < nloops; i++) {
    w[i].id = i;
    pthread_create(&t[i], NULL, run, &w[i]);
  }
  for (sec = 1; sec <= secs; sec++) {
    sleep(1);
    rss = rss_kib();
    if (sec == 10 || (secs < 20 && sec == 1)) rss0 = rss;
    if (sec > 10 && rss > rss_max_after) rss_max_after = rss;
    if (sec % 10 == 0 || sec == secs) {
      uint64_t c = 0, e = 0;
      for (i = 0; i < nloops; i++) {
        c += __atomic_load_n(&w[i].cbs, __ATOMIC_RELAXED);
        e += __atomic_load_n(&w[i].errors, __ATOMIC_RELAXED);
      }
      printf("%6d %10ld %12llu %10llu\n", sec, rss, (unsigned long long)c,
             (unsigned long long)e);
      fflush(stdout);
    }
  }
  __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
  for (i = 0; i < nloops; i++) pthread_join(t[i], NULL);
  total_cbs = total_starts = 0;
  for (i = 0; i < nloops; i++) {
    total_cbs += w[i].cbs;
    total_starts += w[i].starts;
    if (w[i].cbs != w[i].starts || w[i].close_cbs != w[i].closes || w[i].errors) bad = 1;
    printf("loop %d: %llu starts, %llu callbacks, %llu closes, %llu close_cbs, %llu errors, "
           "%llu phases; completed ok by strategy auto %llu reactor %llu hostfn %llu poll %llu\n",
           i, (unsigned long long)w[i].starts, (unsigned long long)w[i].cbs,
           (unsigned long long)w[i].closes, (unsigned long long)w[i].close_cbs,
           (unsigned long long)w[i].errors, (unsigned long long)w[i].phases,
           (unsigned long long)w[i].per_strategy[0], (unsigned long long)w[i].per_strategy[1],
           (unsigned long long)w[i].per_strategy[2], (unsigned long long)w[i].per_strategy[3]);
  }
  printf("total: %llu starts, %llu callbacks, lost %lld; RSS after warm-up %ld KiB, max later %ld KiB "
         "(%+ld KiB)\n",
         (unsigned long long)total_starts, (unsigned long long)total_cbs,
         (long long)(total_starts - total_cbs), rss0, rss_max_after, rss_max_after - rss0);
  /* Flat: growth after warm-up below 2 MiB (allocator noise). */
  if (secs > 20 && rss_max_after - rss0 > 2048) bad = 1;
  printf("soak: %s\n", bad ? "FAILED" : "PASSED");
  tu_teardown();
  free(w);
  free(t);
  return bad;
}
