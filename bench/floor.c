/* The floor under #20's repeated-work CPU goal, measured in the same run as
 * the adapt rows: whatever a completion does, to meet "p50 <= raw spin + 1
 * us" the loop thread must be running when the GPU finishes. It either
 * spun since the launch (CPU = the wait) or slept and was woken before the
 * end (CPU >= the launch + one sleep/wake cycle of the loop). So no method
 * can spend less loop CPU per op than
 *     launch + min(one sleep/wake cycle, wait - launch).
 * Measured here on the loop thread's CPU clock, no uvcuda involved:
 *   launch: cuLaunchKernel of the section's kernel alone (no marker), and
 *           with the stream memory write a GPU-written flag needs (what
 *           uvcuda's marker is: the floor of any counter-based wait);
 *   cycle:  from the end of one callback to the start of the next while
 *           the loop sleeps in epoll_wait: woken by its own timerfd in a
 *           uv_poll_t (what the pre-wake does) or by uv_async_send from
 *           another thread (what a reactor ring does); the cheaper counts. */
#include "bench.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define FLOOR_N 200
#define FLOOR_GAP_NS (30 * US) /* long enough for the loop to fall asleep */

static double thread_cpu_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

typedef struct {
  uv_poll_t poll;
  uv_async_t async;
  const workload_t *wl; /* timer cycle: launch it + a marker when woken */
  int fd, n, want;
  double cpu_end; /* the loop thread's CPU at the last callback's end */
  double lat[FLOOR_N];
  atomic_int ask; /* async: callbacks done, the sender's cue */
  atomic_int stop;
} floor_t;

static void floor_sample(floor_t *fl, double cpu_start) {
  if (fl->cpu_end > 0 && fl->n < fl->want) fl->lat[fl->n++] = cpu_start - fl->cpu_end;
}

static void on_floor_timer(uv_poll_t *h, int status, int events) {
  floor_t *fl = h->data;
  double c = thread_cpu_us();
  uint64_t x;
  struct itimerspec its = {{0, 0}, {0, 0}};
  (void)status;
  (void)events;
  if (fl->wl != NULL) { /* the launch as a woken loop makes it: caches cold */
    if (enqueue_marked(fl->wl, bench.timed, bench.mflag_d,
                       (uint32_t)(fl->n + 1)) != CUDA_SUCCESS)
      fl->want = fl->n; /* stop: no sample */
    c = thread_cpu_us();
  }
  floor_sample(fl, c);
  if (read(fl->fd, &x, sizeof(x)) < 0) { /* nothing to read: still fine */
  }
  if (fl->n >= fl->want) {
    uv_poll_stop(h);
    return;
  }
  its.it_value.tv_nsec = (long)FLOOR_GAP_NS;
  timerfd_settime(fl->fd, 0, &its, NULL);
  fl->cpu_end = thread_cpu_us();
}

static void on_floor_async(uv_async_t *h) {
  floor_t *fl = h->data;
  floor_sample(fl, thread_cpu_us());
  if (fl->n >= fl->want) {
    atomic_store(&fl->stop, 1);
    uv_close((uv_handle_t *)h, NULL);
    return;
  }
  atomic_fetch_add(&fl->ask, 1);
  fl->cpu_end = thread_cpu_us();
}

static void *floor_sender(void *arg) {
  floor_t *fl = arg;
  int sent = 0;
  while (!atomic_load(&fl->stop)) {
    struct timespec gap = {0, (long)FLOOR_GAP_NS};
    if (atomic_load(&fl->ask) < sent) {
      sched_yield();
      continue;
    }
    nanosleep(&gap, NULL);
    sent++;
    uv_async_send(&fl->async);
  }
  return NULL;
}

/* One wake source: the median CPU of a sleep/wake cycle, us; NAN if it
 * could not run. wl (timer only): each wake-up launches it with a marker,
 * counted in the cycle. */
static double floor_cycle(int timer, const workload_t *wl) {
  floor_t *fl = calloc(1, sizeof(*fl));
  uv_loop_t loop;
  pthread_t t;
  double v = NAN;
  if (fl == NULL || uv_loop_init(&loop) != 0) {
    free(fl);
    return NAN;
  }
  fl->want = bench.opt.quick ? 20 : FLOOR_N;
  fl->wl = wl;
  if (timer) {
    struct itimerspec its = {{0, 0}, {0, (long)FLOOR_GAP_NS}};
    fl->fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (fl->fd < 0 || uv_poll_init(&loop, &fl->poll, fl->fd) != 0) goto out;
    fl->poll.data = fl;
    uv_poll_start(&fl->poll, UV_READABLE, on_floor_timer);
    timerfd_settime(fl->fd, 0, &its, NULL);
    uv_run(&loop, UV_RUN_DEFAULT); /* stops with the poll */
    uv_close((uv_handle_t *)&fl->poll, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    close(fl->fd);
    if (wl != NULL) bench.cu.cuStreamSynchronize(bench.timed);
  } else {
    uv_async_init(&loop, &fl->async, on_floor_async);
    fl->async.data = fl;
    if (pthread_create(&t, NULL, floor_sender, fl) != 0) {
      uv_close((uv_handle_t *)&fl->async, NULL);
      uv_run(&loop, UV_RUN_DEFAULT);
      goto out;
    }
    uv_run(&loop, UV_RUN_DEFAULT); /* stops with the async's close */
    atomic_store(&fl->stop, 1);
    pthread_join(t, NULL);
  }
  v = median_of(fl->lat, fl->n);
out:
  uv_loop_close(&loop);
  free(fl);
  return v;
}

/* The launch alone (or with a flag's write after it, marker), on this
 * thread's CPU clock: median us. */
static double floor_launch(const workload_t *wl, int marker) {
  double lat[FLOOR_N];
  int n = bench.opt.quick ? 20 : FLOOR_N, i, k = 0;
  for (i = 0; i < n; i++) {
    double c0 = thread_cpu_us(), c1;
    CUresult q = marker ? enqueue_marked(wl, bench.timed, bench.mflag_d,
                                         (uint32_t)(i + 1))
                        : enqueue_work(wl, bench.timed);
    c1 = thread_cpu_us();
    if (q != CUDA_SUCCESS) break;
    bench.cu.cuStreamSynchronize(bench.timed);
    lat[k++] = c1 - c0;
  }
  return k ? median_of(lat, k) : NAN;
}

void adapt_floor(const workload_t *wl) {
  row_t w;
  double tfd = floor_cycle(1, NULL), asy = floor_cycle(0, NULL);
  double launch = floor_launch(wl, 0), marked = floor_launch(wl, 1);
  double woken = floor_cycle(1, wl) - tfd; /* launch + marker, cold */
  double cycle = isnan(tfd) ? asy : isnan(asy) ? tfd : (tfd < asy ? tfd : asy);
  row_init(&w, "adapt", "floor", "sleep-wake", 0);
  w.n = isnan(cycle) || isnan(launch) ? 0 : 1;
  w.loop_cpu = cycle;
  row_extra(&w, "launch_cpu_us=%.2f;cycle_timerfd_us=%.2f;cycle_async_us=%.2f"
            ";launch_marker_cpu_us=%.2f;launch_marker_woken_cpu_us=%.2f",
            launch, tfd, asy, marked, woken);
  row_emit(&w);
  printf("  floor (loop thread CPU, no uvcuda, this run): launch %.2f us; one "
         "sleep/wake cycle %.2f us (timerfd) / %.2f us (uv_async_send); any "
         "completion awake at the end pays at least launch + min(cycle, "
         "wait - launch); launch + a flag's write %.2f us, %.2f us as the "
         "first thing after a timerfd wake-up\n", launch, tfd, asy, marked,
         woken);
}
