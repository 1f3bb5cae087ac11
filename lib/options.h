/* Resolved loop options: defaults and environment applied, times in ns. */
#ifndef UVCUDA_OPTIONS_H
#define UVCUDA_OPTIONS_H

#include <stdint.h>

#include "uvcuda.h"

struct uvcuda__opts {
  uvcuda_completion_t completion;
  uint64_t spin_budget_ns;
  uint64_t probe_interval_ns;
  uint64_t reactor_spin_ns, reactor_yield_ns, reactor_sleep_max_ns;
  uint32_t reactor_backoff_pct;
  uint32_t flags;
  int adaptive; /* resolved: UVCUDA_OPT_ADAPTIVE, NO_ADAPTIVE, env */
};

int uvcuda__opts_resolve(const uvcuda_options_t *in, struct uvcuda__opts *out);

#endif
