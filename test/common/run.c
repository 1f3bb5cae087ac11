/* The watchdog runners: a loop run that fails the case (or, in a forked
 * child, returns -1) instead of hanging. */
#include "tu.h"

static void on_watchdog(uv_timer_t *t) {
  int *fired = t->data;
  *fired = 1;
  uv_stop(t->loop);
}

int tu_run_bounded(uv_loop_t *loop, int timeout_ms) {
  uv_timer_t wd;
  int fired = 0;
  uv_timer_init(loop, &wd);
  wd.data = &fired;
  uv_timer_start(&wd, on_watchdog, (uint64_t)timeout_ms, 0);
  uv_unref((uv_handle_t *)&wd);
  uv_run(loop, UV_RUN_DEFAULT);
  uv_close((uv_handle_t *)&wd, NULL);
  uv_run(loop, UV_RUN_NOWAIT);
  return fired ? -1 : 0;
}

double tu_run(uv_loop_t *loop, int timeout_ms) {
  uint64_t t0 = uv_hrtime();
  if (tu_run_bounded(loop, timeout_ms) != 0)
    fail_msg("loop still running after %d ms", timeout_ms);
  return (double)(uv_hrtime() - t0) / 1e6;
}

int tu_run_until(uv_loop_t *loop, volatile int *flag, int timeout_ms) {
  uint64_t end = uv_hrtime() + (uint64_t)timeout_ms * 1000000u;
  while (!*flag) {
    if (uv_hrtime() > end) return -1;
    uv_run(loop, UV_RUN_NOWAIT);
  }
  return 0;
}

static void on_ul_closed(uvcuda_loop_t *ul) { *(int *)ul->data = 1; }

void tu_loop_close(uv_loop_t *loop, uvcuda_loop_t *ul) {
  int closed = 0;
  ul->data = &closed;
  TU_OK(uvcuda_loop_close(ul, on_ul_closed));
  if (tu_run_until(loop, &closed, 5000) != 0) fail_msg("uvcuda_loop_close never finished");
}

