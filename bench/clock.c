/* CPU time: the loop thread's and the process's CPU time: the counters behind
 * getrusage(RUSAGE_THREAD) and getrusage(RUSAGE_SELF), read through
 * clock_gettime. getrusage(RUSAGE_THREAD) leaves out the time slice the
 * calling thread is running in (a 20 us spin reads as 0 us until the next
 * tick or context switch), which would wreck per-sample accounting;
 * CLOCK_THREAD_CPUTIME_ID includes it. CLOCK_PROCESS_CPUTIME_ID equals
 * RUSAGE_SELF's utime + stime at ns resolution. */
#include "bench.h"

#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double clock_us(clockid_t id) {
  struct timespec ts;
  if (clock_gettime(id, &ts) != 0) return 0;
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* Around a measured interval: the process clock (it walks every thread,
 * several us with many) outside the thread clock's window, so that the
 * loop thread's CPU holds only the interval. */
void cpu_begin(cpu_t *c) {
  c->proc = clock_us(CLOCK_PROCESS_CPUTIME_ID);
  c->thr = clock_us(CLOCK_THREAD_CPUTIME_ID);
}

/* The thread id of uvcuda's reactor (it names itself "uvcuda-reactor"),
 * or 0: found in /proc, which any library version's reactor shows. */
static unsigned reactor_tid(void) {
  char path[64], name[32];
  struct dirent *e;
  unsigned tid = 0;
  DIR *d = opendir("/proc/self/task");
  if (d == NULL) return 0;
  while (tid == 0 && (e = readdir(d)) != NULL) {
    FILE *f;
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof(path), "/proc/self/task/%.20s/comm", e->d_name);
    if ((f = fopen(path, "r")) == NULL) continue;
    if (fgets(name, sizeof(name), f) && strncmp(name, "uvcuda-reactor", 14) == 0)
      tid = (unsigned)atoi(e->d_name);
    fclose(f);
  }
  closedir(d);
  return tid;
}

static double tid_cpu_us(unsigned tid) {
  /* Linux's MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED) */
  clockid_t id = (clockid_t)((~tid << 3) | 6u);
  struct timespec ts;
  if (tid == 0 || clock_gettime(id, &ts) != 0) return NAN;
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

double reactor_cpu_us(void) { return tid_cpu_us(reactor_tid()); }

/* The thread found last time, looked for again once its clock fails (it
 * ended: the reactor retires with its last loop). */
static unsigned cached_tid;

double reactor_cpu_now_us(unsigned *tid) {
  double v = tid_cpu_us(cached_tid);
  if (isnan(v)) {
    cached_tid = reactor_tid();
    v = tid_cpu_us(cached_tid);
  }
  *tid = cached_tid;
  return v;
}

void cpu_end(cpu_t *c) {
  c->thr = clock_us(CLOCK_THREAD_CPUTIME_ID);
  c->proc = clock_us(CLOCK_PROCESS_CPUTIME_ID);
}
