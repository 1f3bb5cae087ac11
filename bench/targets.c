/* The targets: each goal against what this run measured, met or missed
 * by how much (see README.md). */
#include "bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void target_line(const char *what, double value, double goal,
                        const char *unit, const char *note) {
  char v[32];
  printf("  %-52s %10s %s  goal <= %g %s  ", what, fmt_num(v, sizeof(v), value, 2),
         unit, goal, unit);
  if (isnan(value)) printf("not measured");
  else if (value <= goal) printf("met");
  else printf("missed by %.2f %s", value - goal, unit);
  if (note && note[0]) printf("  (%s)", note);
  printf("\n");
}

static double diff_rows(const row_t *a, const row_t *b, int p99) {
  if (a == NULL || b == NULL || a->n == 0 || b->n == 0) return NAN;
  return p99 ? a->p99 - b->p99 : a->p50 - b->p50;
}

/* Target line: auto's p50 rise from N=1 to a's N, less the rise of the
 * baseline `base` measured in the same state. */
static void scaling_overhead_line(const row_t *a, const row_t *b,
                                  const char *base) {
  const row_t *ra = a ? row_find("scaling", base, "empty", a->param) : NULL;
  const row_t *rb = row_find("scaling", base, "empty", 1);
  double oa = diff_rows(a, ra, 0), ob = diff_rows(b, rb, 0);
  char what[96], note[240];
  snprintf(what, sizeof(what), "scaling: uvcuda-auto over %s, N=100000 - N=1",
           base);
  snprintf(note, sizeof(note), "p50 over %s in the same state: %.1f us at "
           "N=%.0f, %.1f us at N=1; %s itself %.1f -> %.1f us", base, oa,
           a ? a->param : NAN, ob, base, rb && rb->n ? rb->p50 : NAN,
           ra && ra->n ? ra->p50 : NAN);
  target_line(what, oa - ob, 2, "us", note);
}

/* A target of two or three conditions, all to hold: the figures, then met
 * or NOT met with the conditions that failed. */
static void adapt_verdict(const char *what, const char *figures,
                          const char *f1, const char *f2, const char *f3) {
  printf("  %-40s %s  ", what, figures);
  if (!f1[0] && !f2[0] && !f3[0]) printf("met\n");
  else printf("NOT met (%s%s%s%s%s)\n", f1, f1[0] && (f2[0] || f3[0]) ?
              ", " : "", f2, f2[0] && f3[0] ? ", " : "", f3);
}

/* A number the row's extra holds as key=value; NaN without it. */
static double extra_num(const row_t *w, const char *key) {
  const char *m = w ? strstr(w->extra, key) : NULL;
  return m && m[strlen(key)] == '=' ? strtod(m + strlen(key) + 1, NULL) : NAN;
}

/* delivery: the N=100000 less the N=1 rows of `method`, pooled over the
 * rounds, with start -> seen (the GPU's part) beside them. `same_path`:
 * both states took the same path (spin budget 0), so the line is #20's
 * target; else it is printed for reference. */
static void delivery_line(const char *method, const char *what, int same_path) {
  const row_t *b = row_find("delivery", method, "empty", 1);
  const row_t *a = row_find("delivery", method, "empty", 100000);
  double v = (a && b && a->n && b->n) ? a->ph_deliver - b->ph_deliver : NAN;
  char note[320];
  snprintf(note, sizeof(note), "%spooled p50 %.2f us at N=1, %.2f us at "
           "N=100000; median of the rounds' differences %.2f us; start -> "
           "seen %.1f -> %.1f us", same_path ? "" : "reference only: ",
           b ? b->ph_deliver : NAN, a ? a->ph_deliver : NAN,
           extra_num(a, "rounds_diff_median"), b ? b->ph_seen : NAN,
           a ? a->ph_seen : NAN);
  if (same_path) {
    target_line(what, v, 1, "us", note);
  } else { /* no goal: a different path in each state */
    char s[32];
    printf("  %-52s %10s us  (%s)\n", what, fmt_num(s, sizeof(s), v, 2), note);
  }
}

/* The sleeping floor of a repeated wait: nap-spin, the same run. The
 * p50 and process CPU of `method` against it (issue #39: p50 <= nap-spin
 * + 1.5 us, process CPU <= 1.5 x nap-spin's), with raw-spin's beside. */
static void repeated_line(const char *wl, const char *method) {
  const row_t *w = row_find("adapt", method, wl, NAN);
  const row_t *nap = row_find("adapt", "nap-spin", wl, NAN);
  const row_t *raw = row_find("adapt", "raw-spin", wl, NAN);
  char what[96], fig[384];
  snprintf(what, sizeof(what), "adapt %s: %s vs nap-spin", wl, method);
  if (!w || !nap || !raw || !w->n || !nap->n || !raw->n) {
    printf("  %-40s not measured\n", what);
    return;
  }
  snprintf(fig, sizeof(fig), "p50 %.2f us (goal <= nap-spin %.2f + 1.5; "
           "raw-spin %.2f), process CPU %.2f us/op (goal <= 1.5 x nap-spin's "
           "%.2f = %.2f; loop %.2f, reactor %.2f; raw-spin %.2f)", w->p50,
           nap->p50, raw->p50, w->proc_cpu, nap->proc_cpu, 1.5 * nap->proc_cpu,
           w->loop_cpu, w->reactor_cpu, raw->proc_cpu);
  adapt_verdict(what, fig, w->p50 <= nap->p50 + 1.5 ? "" : "p50",
                w->proc_cpu <= 1.5 * nap->proc_cpu ? "" : "CPU", "");
}

/* Waits nobody can predict: the process's CPU against a raw spin's
 * (issue #39: <= 20 %), and the latency against the other uvcuda path of
 * the same run, read against that path run twice (A/A). */
static void unpredicted_line(const char *wl, const char *method,
                             const char *other) {
  const row_t *w = row_find("adapt", method, wl, NAN);
  const row_t *o = row_find("adapt", other, wl, NAN);
  const row_t *raw = row_find("adapt", "raw-spin", wl, NAN);
  const row_t *aa = row_find("adapt", "uvcuda-today-aa", wl, NAN);
  const row_t *today = row_find("adapt", "uvcuda-today", wl, NAN);
  char what[96], fig[384];
  double pct;
  snprintf(what, sizeof(what), "adapt %s: %s", wl, method);
  if (!w || !o || !raw || !w->n || !o->n || !raw->n) {
    printf("  %-40s not measured\n", what);
    return;
  }
  pct = 100 * w->proc_cpu / raw->proc_cpu;
  snprintf(fig, sizeof(fig), "process CPU %.2f us/op = %.1f%% of raw-spin's "
           "%.2f (goal <= 20%%; loop %.2f, reactor %.2f); p50 %.2f, p99 %.2f "
           "us (%s: %.2f, %.2f)", w->proc_cpu, pct, raw->proc_cpu, w->loop_cpu,
           w->reactor_cpu, w->p50, w->p99, other, o->p50, o->p99);
  adapt_verdict(what, fig, pct <= 20 ? "" : "CPU", "", "");
  if (aa != NULL && aa->n && today != NULL && today->n)
    printf("  %-40s A/A: uvcuda-today run twice, the second less the first: "
           "p50 %+.2f us (per block %+.2f, median), p99 %+.2f us; %s less "
           "%s: p50 %+.2f, p99 %+.2f us\n", "", aa->p50 - today->p50,
           extra_num(aa, "blocks_diff_p50_median"), aa->p99 - today->p99,
           method, other, w->p50 - o->p50, w->p99 - o->p99);
}

static void adapt_targets(void) {
  static const char *const rep[] = {"rep-20us", "rep-50us", "rep-200us",
                                    "rep-2ms"};
  static const char *const var[] = {"mixed", "bimodal"};
  int i;

  /* Repeated work: the default (adaptive) path at the sleeping floor in
   * latency and CPU; uvcuda-today (no prediction) for reference. */
  for (i = 0; i < COUNT(rep); i++) {
    repeated_line(rep[i], "uvcuda-adaptive");
    repeated_line(rep[i], "uvcuda-today");
  }
  for (i = 0; i < COUNT(var); i++) {
    unpredicted_line(var[i], "uvcuda-adaptive", "uvcuda-today");
    unpredicted_line(var[i], "uvcuda-today", "uvcuda-adaptive");
  }
}

void targets(void) {
  static const int full[] = {100000, 30000, 10000};
  const row_t *a, *b;
  char what[96], note[128];
  double v;
  int i;

  section_header("targets, from this run", NULL);
  for (i = W_MEMSET; i <= W_EMPTY; i++) {
    a = row_find("latency", "uvcuda-auto", WL[i].name, NAN);
    b = row_find("latency", "memop-spin", WL[i].name, NAN);
    snprintf(what, sizeof(what), "%s: uvcuda-auto p50 - memop-spin p50", WL[i].name);
    target_line(what, diff_rows(a, b, 0), 0.5, "us",
                "the floor of a GPU-written flag, as uvcuda's counters are");
  }
  a = row_find("latency", "uvcuda-auto", "kernel-200us", NAN);
  b = row_find("latency", "raw-spin", "kernel-200us", NAN);
  target_line("kernel-200us: uvcuda-auto p50 - raw-spin p50", diff_rows(a, b, 0),
              5, "us", NULL);
  target_line("kernel-200us: uvcuda-auto p99 - raw-spin p99", diff_rows(a, b, 1),
              60, "us", NULL);
  {
    /* The loop sleeps while it waits, so it pays one wakeup that the raw
     * spin never does: what is left above that floor is ours. */
    const row_t *wk = row_find("wake", "async-wake", "none", 0);
    v = diff_rows(a, b, 0);
    if (wk && wk->n && !isnan(v)) v -= wk->p50;
    else v = NAN;
    snprintf(note, sizeof(note), "the same, less the p50 of waking a sleeping "
             "loop thread (section wake: %.1f us)", wk && wk->n ? wk->p50 : NAN);
    target_line("kernel-200us: p50 overhead beyond the wake floor", v, 5, "us",
                note);
  }

  /* At N=100000; where that was blocked, at 10000, said so. */
  b = row_find("scaling", "uvcuda-auto", "empty", 1);
  a = NULL;
  note[0] = 0;
  for (i = 0; i < 3 && a == NULL; i++) {
    a = row_find("scaling", "uvcuda-auto", "empty", full[i]);
    if (a && a->n == 0) a = NULL;
  }
  if (a && a->param != 100000)
    snprintf(note, sizeof(note), "N=100000 not measured: this is N=%.0f",
             a->param);
  target_line("scaling: uvcuda-auto p50 at N=100000 - at N=1", diff_rows(a, b, 0),
              2, "us", note);
  /* The GPU itself slows under the hold: against a spin measured in the
   * same state at each N, what is left is uvcuda's own cost. raw-spin
   * waits on the stream; memop-spin on a flag written by the stream, as
   * uvcuda's counters are. */
  scaling_overhead_line(a, b, "raw-spin");
  scaling_overhead_line(a, b, "memop-spin");
  /* uvcuda_future_timing: the library's own part of the latency, from the
   * moment the completion was seen to the callback. */
  v = (a && b) ? a->ph_deliver - b->ph_deliver : NAN;
  snprintf(note, sizeof(note), "p50 %.2f us at N=1, %.2f us at N=%.0f; "
           "start -> seen %.1f -> %.1f us", b ? b->ph_deliver : NAN,
           a ? a->ph_deliver : NAN, a ? a->param : NAN, b ? b->ph_seen : NAN,
           a ? a->ph_seen : NAN);
  target_line("scaling: uvcuda-auto seen -> callback, N=100000 - N=1", v, 2,
              "us", note);
  /* The delivery section: both states in alternating rounds (#20's goal),
   * the default spin budget (for reference: the path may differ between
   * the states) and budget 0 (the same path: the target). */
  delivery_line("uvcuda-auto", "delivery: seen -> callback, N=100000 - N=1, rounds "
                "(default spin; path may differ)", 0);
  delivery_line("uvcuda-auto-nospin", "delivery: seen -> callback, N=100000 - N=1, "
                "rounds, same path (spin 0)", 1);

  a = row_find("throughput", "uvcuda-auto", "empty", NFLIGHT);
  b = row_find("throughput", "raw-launch", "empty", NFLIGHT);
  v = NAN;
  note[0] = 0;
  if (a && b && a->n && b->n) {
    v = a->proc_cpu - b->proc_cpu;
    snprintf(note, sizeof(note), "process CPU per completion %.2f us, of "
             "which the launches alone %.2f us", a->proc_cpu, b->proc_cpu);
  }
  target_line("10k in flight: uvcuda-auto CPU per completion", v, 1, "us", note);
  a = row_find("throughput", "uvcuda-auto", "empty", NFLIGHT);
  b = row_find("throughput", "raw-launch+memop", "empty", NFLIGHT);
  v = (a && b && a->n && b->n) ? a->proc_cpu - b->proc_cpu : NAN;
  snprintf(note, sizeof(note), "the same, less the driver's cost of one "
           "stream memory write per future (raw-launch+memop)");
  target_line("10k in flight: uvcuda-auto CPU beyond launch+marker", v, 1, "us",
              note);
  /* Completions per second against the launches and markers alone (the
   * GPU's own rate for this work): at least 0.95 of it. */
  v = (a && b && a->n && b->n)
          ? extra_num(a, "completions_per_s") / extra_num(b, "completions_per_s")
          : NAN;
  if (!isnan(v)) {
    snprintf(note, sizeof(note), "%.0f against %.0f completions/s",
             extra_num(a, "completions_per_s"), extra_num(b, "completions_per_s"));
    printf("  %-52s %10.3f     goal >= 0.95  %s  (%s)\n",
           "10k in flight: uvcuda-auto rate / launch+marker's", v,
           v >= 0.95 ? "met" : "missed", note);
  } else {
    printf("  %-52s %10s     goal >= 0.95  not measured\n",
           "10k in flight: uvcuda-auto rate / launch+marker's", "-");
  }

  a = row_find("idle", "uvcuda-auto", "nothing-armed", NAN);
  v = a && a->n ? a->reactor_cpu : NAN;
  snprintf(note, sizeof(note), "the reactor thread's own CPU clock");
  target_line("idle reactor CPU, nothing armed", v, 0, "us/s", note);
  b = row_find("idle", "no-loop", "nothing", NAN);
  v = (a && b && a->n && b->n) ? a->proc_cpu - b->proc_cpu : NAN;
  snprintf(note, sizeof(note), "whole process, driver threads included: "
           "noise, shown for reference");
  printf("  %-52s %10.2f us/s  (%s)\n", "idle process CPU, nothing armed, over no-loop",
         v, note);
  /* One future armed on a stream that never completes: at most 1 % of a
   * core (the reactor's back-off grows to its longest step, and it wakes
   * for the fault probe every probe interval). */
  a = row_find("idle", "uvcuda-auto", "one-armed-held", NAN);
  v = a && a->n ? a->reactor_cpu : NAN;
  snprintf(note, sizeof(note), "the reactor thread's own CPU clock; 1%% of "
           "a core is 10000 us/s");
  target_line("one future armed, never completing: reactor CPU", v, 10000,
              "us/s", note);
  adapt_targets();
}
