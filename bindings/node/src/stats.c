/* See stats.h. A counter of uvcuda_stats_t or uvcuda_napi_stats_t is one
 * row of `rows`: its JS name and where it is. */
#include "stats.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "errors.h"
#include "uvcuda.h"
#include "uvcuda_napi_ext.h"

/* What the returned object holds, in its order. */
enum src {
  LOOP,       /* a uint64_t of uvcuda_stats_t */
  HELPER,     /* a uint64_t of uvcuda_napi_stats_t */
  HELPER_SIZE,/* a size_t of uvcuda_napi_stats_t */
  COMPLETION, /* the strategy in use, by name */
  SPIN,       /* the spin budget in ns */
  ADAPTIVE    /* adaptive spin: a boolean */
};

static const struct row {
  const char *name;
  enum src src;
  size_t offset;
} rows[] = {
    {"completion", COMPLETION, 0},
    {"spinBudgetNs", SPIN, 0},
    {"started", LOOP, offsetof(uvcuda_stats_t, started)},
    {"completedSpin", LOOP, offsetof(uvcuda_stats_t, completed_spin)},
    {"completedReactor", LOOP, offsetof(uvcuda_stats_t, completed_reactor)},
    {"completedHostfn", LOOP, offsetof(uvcuda_stats_t, completed_hostfn)},
    {"completedPoll", LOOP, offsetof(uvcuda_stats_t, completed_poll)},
    {"failed", LOOP, offsetof(uvcuda_stats_t, failed)},
    {"cancelled", LOOP, offsetof(uvcuda_stats_t, cancelled)},
    {"fallbacks", LOOP, offsetof(uvcuda_stats_t, fallbacks)},
    {"reactorWakeups", LOOP, offsetof(uvcuda_stats_t, reactor_wakeups)},
    {"hostfnWakeups", LOOP, offsetof(uvcuda_stats_t, hostfn_wakeups)},
    {"faults", LOOP, offsetof(uvcuda_stats_t, faults)},
    {"timelines", LOOP, offsetof(uvcuda_stats_t, timelines)},
    {"adaptive", ADAPTIVE, 0},
    {"predicted", LOOP, offsetof(uvcuda_stats_t, predicted)},
    {"predictHit", LOOP, offsetof(uvcuda_stats_t, predict_hit)},
    {"predictEarly", LOOP, offsetof(uvcuda_stats_t, predict_early)},
    {"predictLate", LOOP, offsetof(uvcuda_stats_t, predict_late)},
    {"prewakes", LOOP, offsetof(uvcuda_stats_t, prewakes)},
    {"spinNs", LOOP, offsetof(uvcuda_stats_t, spin_ns)},
    {"reactorPolls", LOOP, offsetof(uvcuda_stats_t, reactor_polls)},
    {"reactorSleeps", LOOP, offsetof(uvcuda_stats_t, reactor_sleeps)},
    {"reactorCpuNs", LOOP, offsetof(uvcuda_stats_t, reactor_cpu_ns)},
    {"pending", HELPER_SIZE, offsetof(uvcuda_napi_stats_t, pending)},
    {"awaited", HELPER, offsetof(uvcuda_napi_stats_t, awaited)},
    {"resolved", HELPER, offsetof(uvcuda_napi_stats_t, resolved)},
    {"rejected", HELPER, offsetof(uvcuda_napi_stats_t, rejected)},
};

/* What rows read, for one call. */
struct snapshot {
  uvcuda_stats_t loop;
  uvcuda_napi_stats_t helper;
  uvcuda_completion_t completion;
  uint64_t spin_ns;
  int adaptive;
};

static napi_status row_value(napi_env env, const struct row *r, const struct snapshot *s,
                             napi_value *v) {
  uint64_t u;
  size_t z;
  switch (r->src) {
    case LOOP:
      memcpy(&u, (const char *)&s->loop + r->offset, sizeof(u));
      return napi_create_double(env, (double)u, v);
    case HELPER:
      memcpy(&u, (const char *)&s->helper + r->offset, sizeof(u));
      return napi_create_double(env, (double)u, v);
    case HELPER_SIZE:
      memcpy(&z, (const char *)&s->helper + r->offset, sizeof(z));
      return napi_create_double(env, (double)z, v);
    case COMPLETION:
      return napi_create_string_utf8(env, uvcuda_completion_name(s->completion),
                                     NAPI_AUTO_LENGTH, v);
    case SPIN:
      return napi_create_double(env, (double)s->spin_ns, v);
    case ADAPTIVE:
      return napi_get_boolean(env, s->adaptive != 0, v);
  }
  return napi_generic_failure;
}

napi_value uvn_stats_get(napi_env env, napi_callback_info info) {
  uvcuda_loop_t *ul;
  struct snapshot s;
  napi_value o, hist, n;
  size_t i;
  int err;
  (void)info;

  /* Not a GPU call: before the first one, zeros and the settings to come
   * (configure() still works after it, and no driver is needed). */
  memset(&s, 0, sizeof(s));
  if (uvcuda_napi__settings(env, &ul, &s.completion, &s.spin_ns, &s.adaptive) != napi_ok)
    return NULL;
  if (ul != NULL && (err = uvcuda_loop_stats(ul, &s.loop)) != 0) return uvn_throw_uv(env, err);
  if (uvcuda_napi_stats(env, &s.helper) != napi_ok) return NULL;
  if (napi_create_object(env, &o) != napi_ok) return NULL;
  for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
    if (row_value(env, &rows[i], &s, &n) == napi_ok)
      napi_set_named_property(env, o, rows[i].name, n);
  napi_create_array_with_length(env, UVCUDA_HIST_BUCKETS, &hist);
  for (i = 0; i < UVCUDA_HIST_BUCKETS; i++) {
    napi_create_double(env, (double)s.loop.latency_hist[i], &n);
    napi_set_element(env, hist, (uint32_t)i, n);
  }
  napi_set_named_property(env, o, "latencyHistogram", hist);
  return o;
}
