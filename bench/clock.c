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

/* CPU time of uvcuda's reactor thread (it names itself "uvcuda-reactor"),
 * in us, through the thread's own CPU clock; NAN if there is none. */
double reactor_cpu_us(void) {
  char path[64], name[32];
  struct dirent *e;
  double v = NAN;
  DIR *d = opendir("/proc/self/task");
  if (d == NULL) return NAN;
  while (isnan(v) && (e = readdir(d)) != NULL) {
    FILE *f;
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof(path), "/proc/self/task/%.20s/comm", e->d_name);
    if ((f = fopen(path, "r")) == NULL) continue;
    if (fgets(name, sizeof(name), f) && strncmp(name, "uvcuda-reactor", 14) == 0) {
      unsigned tid = (unsigned)atoi(e->d_name);
      /* Linux's MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED) */
      clockid_t id = (clockid_t)((~tid << 3) | 6u);
      struct timespec ts;
      if (clock_gettime(id, &ts) == 0)
        v = (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
    }
    fclose(f);
  }
  closedir(d);
  return v;
}

void cpu_end(cpu_t *c) {
  c->thr = clock_us(CLOCK_THREAD_CPUTIME_ID);
  c->proc = clock_us(CLOCK_PROCESS_CPUTIME_ID);
}
