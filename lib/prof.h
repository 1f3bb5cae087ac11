/* Diagnostic only (meson -Dprofile=true, never in a release): the wall
 * time of the start and of each loop callback, summed per step and
 * printed to stderr at exit (bench/README.md, "profile"). The loop thread
 * runs through each without sleeping, so wall time is its CPU. One hook
 * per callback, none inside the steps. Not thread-safe: one loop thread
 * per process. Compiles to nothing otherwise. */
#ifndef UVCUDA_PROF_H
#define UVCUDA_PROF_H

#include <stdint.h>

enum {
  UVCUDA__P_START,    /* uvcuda_future_start, whole (the op included) */
  UVCUDA__P_OP,       /* of it, the user's op */
  UVCUDA__P_MARK,     /* of it, the marker (tl_mark) */
  UVCUDA__P_TIMER,    /* the pre-wake timer's callback */
  UVCUDA__P_IDLE,     /* the idle callback */
  UVCUDA__P_ASYNC,    /* the async callback */
  UVCUDA__P_CB,       /* the user's callbacks */
  UVCUDA__P_COUNT
};

#ifdef UVCUDA__PROFILE
#include <uv.h>
void uvcuda__prof_add(int step, uint64_t ns);
#define UVCUDA__PROF_BEGIN(v) uint64_t v = uv_hrtime()
#define UVCUDA__PROF_END(step, v) uvcuda__prof_add(step, uv_hrtime() - (v))
#else
#define UVCUDA__PROF_BEGIN(v) (void)0
#define UVCUDA__PROF_END(step, v) (void)0
#endif

#endif
