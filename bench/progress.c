/* Progress: the main thread's heartbeat, the running section's deadline,
 * and the watchdog thread that acts when the heartbeat stops (it opens the
 * scaling section's stream hold, then ends the program, keeping the CSV). */
#include "bench.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static atomic_uint_fast64_t heartbeat; /* bumped by the main thread */
static uint64_t hb_n;
static atomic_int wd_stop;
static pthread_t wd;
static int wd_on;

void beat(void) {
  atomic_store_explicit(&heartbeat, ++hb_n, memory_order_relaxed);
}

int past_deadline(void) {
  if (uv_hrtime() <= bench.deadline) return 0;
  bench.truncated = 1;
  return 1;
}

void hold_open(void) {
  __atomic_store_n(bench.hold, atomic_load(&bench.hold_value),
                   __ATOMIC_RELEASE);
}

static void *watchdog_main(void *arg) {
  uint64_t last = atomic_load(&heartbeat), t_last = uv_hrtime(), now, hb;
  struct timespec ts = {0, 100 * 1000 * 1000};
  (void)arg;
  while (!atomic_load(&wd_stop)) {
    nanosleep(&ts, NULL);
    hb = atomic_load_explicit(&heartbeat, memory_order_relaxed);
    now = uv_hrtime();
    if (hb != last) {
      last = hb;
      t_last = now;
      continue;
    }
    if (now - t_last > bench.stall_open_ns && atomic_load(&bench.hold_watch) &&
        !atomic_load(&bench.blocked)) {
      hold_open(); /* lets the GPU drain what stalled the enqueue */
      atomic_store(&bench.blocked, 1);
      fprintf(stderr, "uvcuda-bench watchdog: no progress for %llu s in "
              "section %s while streams are held: opened the hold\n",
              (unsigned long long)(bench.stall_open_ns / SEC), bench.section);
    }
    if (now - t_last > bench.stall_exit_ns) {
      hold_open();
      printf("\nuvcuda-bench watchdog: no progress for %llu s in section %s "
             "(a CUDA call does not return): exiting; the CSV has every "
             "measurement taken so far\n",
             (unsigned long long)(bench.stall_exit_ns / SEC), bench.section);
      fflush(stdout);
      csv_flush();
      _exit(3);
    }
  }
  return NULL;
}

int watchdog_start(void) {
  if (pthread_create(&wd, NULL, watchdog_main, NULL) != 0) return -1;
  wd_on = 1;
  return 0;
}

void watchdog_stop(void) {
  if (!wd_on) return;
  atomic_store(&wd_stop, 1);
  pthread_join(wd, NULL);
  wd_on = 0;
}
