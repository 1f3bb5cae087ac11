/* Diagnostic only (meson -Dprofile=true, never in a release): the wall
 * time of a few loop-thread steps, summed per step and printed to stderr
 * at exit, to find where a pre-woken future's CPU goes beyond the launch
 * and one sleep/wake (#20; bench/README.md, "profile"). The loop thread
 * runs through each step without sleeping, so wall time is its CPU. Not
 * thread-safe: one loop thread per process. Compiles to nothing
 * otherwise. */
#ifndef UVCUDA_PROF_H
#define UVCUDA_PROF_H

#include <stdint.h>

enum {
  UVCUDA__P_START,    /* uvcuda_future_start, whole (op included) */
  UVCUDA__P_CAPTURE,  /* cuStreamIsCapturing before the op */
  UVCUDA__P_TLGET,    /* the stream's timeline */
  UVCUDA__P_PUSH,     /* its context made current */
  UVCUDA__P_OP,       /* the user's op */
  UVCUDA__P_POSTOP,   /* current context and capture asked again */
  UVCUDA__P_MARK,     /* the marker */
  UVCUDA__P_POP,      /* the caller's context back */
  UVCUDA__P_ADAPT,    /* uvcuda__adapt_start */
  UVCUDA__P_SETTLE,   /* uvcuda__loop_settle */
  UVCUDA__P_LOCK,     /* waiting for the reactor's lock (settle, news) */
  UVCUDA__P_DRAIN,    /* the pre-wake timerfd read */
  UVCUDA__P_HANDLES,  /* uvcuda__loop_update_handles */
  UVCUDA__P_TIMER,    /* the pre-wake timer's callback */
  UVCUDA__P_IDLE,     /* the idle callback, whole */
  UVCUDA__P_ASYNC,    /* the async callback, whole */
  UVCUDA__P_NEWS,     /* taking the reactor's news */
  UVCUDA__P_DELIVER,  /* delivering outcomes, callbacks included */
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
