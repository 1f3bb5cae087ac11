/* CPU-only experiment (no GPU, not the library): how long a loop thread
 * waits for the reactor's mutex right after the reactor rang it, when the
 * reactor scans K counters per pass under that mutex, as lib/reactor.c
 * does; with a plain pthread_mutex_lock, or spinning on trylock for up to
 * 20 us first. docs/benchmarks.md, run 13, quotes it.
 *   gcc -O2 -pthread -o /tmp/lockwait bench/facts/lockwait.c
 *   /tmp/lockwait K SPIN SAMPLES      e.g. 156 0 3000, then 156 1 3000
 * Prints the lock wait (woken -> locked) and seen -> locked, p50/p90/p99. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int want, stop, trigger;
static int efd, K, SPIN;
static _Atomic uint64_t seen;

struct ctr { /* a counter on its own cache line, as the library's */
  volatile uint32_t v;
  char pad[60];
};
static struct ctr *ctr;

static uint64_t now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* The reactor's spin phase: scan under mu, ring at the first hit, step
 * aside (a few pauses, more while a loop wants mu), scan again. */
static void *reactor(void *arg) {
  (void)arg;
  pthread_mutex_lock(&mu);
  while (!atomic_load(&stop)) {
    uint64_t sum = 0, one = 1;
    int i;
    for (i = 0; i < K; i++) {
      sum += ctr[i].v;
      if (i == 0 && atomic_exchange(&trigger, 0)) {
        atomic_store(&seen, now());
        if (write(efd, &one, sizeof(one)) < 0) abort();
      }
    }
    (void)sum;
    pthread_mutex_unlock(&mu);
    for (i = 0; i < 4; i++) __builtin_ia32_pause();
    for (i = 0; i < 1024 && atomic_load(&want); i++) __builtin_ia32_pause();
    pthread_mutex_lock(&mu);
  }
  pthread_mutex_unlock(&mu);
  return NULL;
}

static void lock_loopside(void) {
  atomic_fetch_add(&want, 1);
  if (SPIN) {
    uint64_t t0 = now();
    int i;
    do {
      for (i = 0; i < 16; i++) {
        if (pthread_mutex_trylock(&mu) == 0) goto locked;
        __builtin_ia32_pause();
      }
    } while (now() - t0 < 20000);
  }
  pthread_mutex_lock(&mu);
locked:
  atomic_fetch_sub(&want, 1);
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  double *wait, *total;
  pthread_t t;
  int n, s, i;

  if (argc != 4) {
    fprintf(stderr, "usage: %s K SPIN SAMPLES\n", argv[0]);
    return 2;
  }
  K = atoi(argv[1]);
  SPIN = atoi(argv[2]);
  n = atoi(argv[3]);
  if (K < 1 || n < 100) return 2;
  ctr = aligned_alloc(64, sizeof(*ctr) * (size_t)K);
  wait = malloc(sizeof(double) * (size_t)n);
  total = malloc(sizeof(double) * (size_t)n);
  if (!ctr || !wait || !total || (efd = eventfd(0, 0)) < 0) return 1;
  for (i = 0; i < K; i++) ctr[i].v = (uint32_t)i;
  pthread_create(&t, NULL, reactor, NULL);
  for (s = 0; s < n; s++) {
    uint64_t x, woke, locked;
    usleep(200); /* the loop thread sleeps, then is rung */
    atomic_store(&trigger, 1);
    if (read(efd, &x, sizeof(x)) != sizeof(x)) return 1;
    woke = now();
    lock_loopside();
    locked = now();
    pthread_mutex_unlock(&mu);
    wait[s] = (double)(locked - woke) / 1e3;
    total[s] = (double)(locked - atomic_load(&seen)) / 1e3;
  }
  atomic_store(&stop, 1);
  pthread_join(t, NULL);
  qsort(wait, (size_t)n, sizeof(double), cmp);
  qsort(total, (size_t)n, sizeof(double), cmp);
  printf("K=%d spin=%d: lock wait p50 %.2f p90 %.2f p99 %.2f us; seen -> "
         "locked p50 %.2f p90 %.2f us\n", K, SPIN, wait[n / 2],
         wait[n * 9 / 10], wait[n * 99 / 100], total[n / 2], total[n * 9 / 10]);
  return 0;
}
