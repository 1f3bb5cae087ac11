/* Options: defaults, environment, validation. The option wins over the
 * environment; a bad value in either is an error, never ignored. */
#include "options.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const char *const names[] = {"default", "auto",        "reactor",
                                    "hostfn",  "hostfn-spin", "hostfn-block",
                                    "poll"};

const char *uvcuda_completion_name(uvcuda_completion_t c) {
  if ((unsigned)c >= sizeof(names) / sizeof(names[0])) return NULL;
  return names[c];
}

int uvcuda_completion_parse(const char *name, uvcuda_completion_t *out) {
  unsigned i;
  if (name == NULL || out == NULL) return UVCUDA_EINVAL;
  for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    if (strcmp(name, names[i]) == 0) {
      *out = (uvcuda_completion_t)i;
      return 0;
    }
  }
  return UVCUDA_ESTRATEGY;
}

void uvcuda_options_init(uvcuda_options_t *opts) {
  if (opts == NULL) return;
  memset(opts, 0, sizeof(*opts));
  opts->completion = UVCUDA_COMPLETION_DEFAULT;
  opts->spin_budget_us = -1;
  opts->probe_interval_us = -1;
  opts->reactor_spin_us = -1;
  opts->reactor_yield_us = -1;
  opts->reactor_sleep_max_us = -1;
  opts->reactor_backoff_pct = -1;
}

/* -1 means default; otherwise lo..hi. */
static int pick(int32_t v, int32_t dflt, int32_t lo, int32_t hi, uint64_t *ns) {
  if (v == -1) v = dflt;
  if (v < lo || v > hi) return UVCUDA_EINVAL;
  *ns = (uint64_t)v * 1000u;
  return 0;
}

/* UVCUDA_OPT_ADAPTIVE / NO_ADAPTIVE, else the environment, else the
 * default (docs/api.md says which and why). */
#define UVCUDA__ADAPTIVE_DEFAULT 1
static int resolve_adaptive(uint32_t flags, int *out) {
  const char *env;
  uint32_t both = UVCUDA_OPT_ADAPTIVE | UVCUDA_OPT_NO_ADAPTIVE;
  if ((flags & both) == both) return UVCUDA_EINVAL;
  if (flags & both) {
    *out = (flags & UVCUDA_OPT_ADAPTIVE) != 0;
    return 0;
  }
  env = getenv("UVCUDA_ADAPTIVE");
  if (env == NULL || env[0] == '\0') {
    *out = UVCUDA__ADAPTIVE_DEFAULT;
    return 0;
  }
  if (strcmp(env, "0") != 0 && strcmp(env, "1") != 0) return UVCUDA_EINVAL;
  *out = env[0] == '1';
  return 0;
}

int uvcuda__opts_resolve(const uvcuda_options_t *in, struct uvcuda__opts *out) {
  uvcuda_options_t d;
  const char *env;
  int32_t spin_default = 20;
  uint64_t pct;
  int err;

  if (in == NULL) {
    uvcuda_options_init(&d);
    in = &d;
  }
  memset(out, 0, sizeof(*out));
  if ((unsigned)in->completion > UVCUDA_COMPLETION_POLL) return UVCUDA_EINVAL;
  if (in->flags & ~(UVCUDA_OPT_LATENCY_HISTOGRAM | UVCUDA_OPT_TIMING |
                    UVCUDA_OPT_ADAPTIVE | UVCUDA_OPT_NO_ADAPTIVE))
    return UVCUDA_EINVAL;
  out->flags = in->flags;
  if ((err = resolve_adaptive(in->flags, &out->adaptive)) != 0) return err;

  out->completion = in->completion;
  if (out->completion == UVCUDA_COMPLETION_DEFAULT) {
    env = getenv("UVCUDA_COMPLETION");
    if (env != NULL && env[0] != '\0') {
      err = uvcuda_completion_parse(env, &out->completion);
      if (err) return err;
    }
    if (out->completion == UVCUDA_COMPLETION_DEFAULT)
      out->completion = UVCUDA_COMPLETION_AUTO;
  }

  if (in->spin_budget_us == -1) {
    env = getenv("UVCUDA_SPIN_BUDGET_US");
    if (env != NULL && env[0] != '\0') {
      char *end;
      long v;
      /* Digits only: strtol would take leading blanks and a sign. */
      if (env[0] < '0' || env[0] > '9') return UVCUDA_EINVAL;
      errno = 0;
      v = strtol(env, &end, 10);
      if (errno || *end != '\0' || v < 0 || v > 1000000) return UVCUDA_EINVAL;
      spin_default = (int32_t)v;
    }
  }
  if ((err = pick(in->spin_budget_us, spin_default, 0, 1000000,
                  &out->spin_budget_ns)) ||
      (err = pick(in->probe_interval_us, 1000, 50, 2000,
                  &out->probe_interval_ns)) ||
      (err = pick(in->reactor_spin_us, 0, 0, 1000000, &out->reactor_spin_ns)) ||
      (err = pick(in->reactor_yield_us, 0, 0, 10000000,
                  &out->reactor_yield_ns)) ||
      (err = pick(in->reactor_sleep_max_us, 2000, 1, 100000,
                  &out->reactor_sleep_max_ns)) ||
      (err = pick(in->reactor_backoff_pct, 5, 1, 100, &pct)))
    return err;
  out->reactor_backoff_pct = (uint32_t)(pct / 1000u);
  return 0;
}

int uvcuda_options_resolve(const uvcuda_options_t *in, uvcuda_options_t *out) {
  const uint32_t both = UVCUDA_OPT_ADAPTIVE | UVCUDA_OPT_NO_ADAPTIVE;
  struct uvcuda__opts r;
  int err;

  if (out == NULL) return UVCUDA_EINVAL;
  if ((err = uvcuda__opts_resolve(in, &r)) != 0) return err;
  out->completion = r.completion;
  out->spin_budget_us = (int32_t)(r.spin_budget_ns / 1000u);
  out->probe_interval_us = (int32_t)(r.probe_interval_ns / 1000u);
  out->reactor_spin_us = (int32_t)(r.reactor_spin_ns / 1000u);
  out->reactor_yield_us = (int32_t)(r.reactor_yield_ns / 1000u);
  out->reactor_sleep_max_us = (int32_t)(r.reactor_sleep_max_ns / 1000u);
  out->reactor_backoff_pct = (int32_t)r.reactor_backoff_pct;
  out->flags = (r.flags & ~both) |
               (r.adaptive ? UVCUDA_OPT_ADAPTIVE : UVCUDA_OPT_NO_ADAPTIVE);
  return 0;
}
