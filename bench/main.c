/* uvcuda-bench: submit -> callback latency, CPU cost, scaling, throughput
 * and idle cost of awaiting CUDA stream work from a libuv loop, for
 * uvcuda's completion strategies and for baselines built here from plain
 * libuv and CUDA driver calls. See bench/README.md.
 *
 * It runs once, on a GPU host, under a hard time limit, so robustness
 * comes first: every section has a deadline, every wait has a timeout, a
 * watchdog thread opens the stream hold of the scaling section when an
 * enqueue stalls (a GPU's hardware queues are finite) and ends the program,
 * keeping what was measured, if nothing progresses at all. After a timed
 * out wait, whatever another thread could still touch is leaked, never
 * freed. Every measurement goes to the CSV as soon as it is taken.
 *
 * This file: the options, the sections in order, the exit status. */
#include "bench.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

bench_t bench = {
    .opt = {.samples = 1000, .warmup = 100, .probe_us = -1, .rspin_us = -1,
            .ryield_us = -1, .rsleep_us = -1, .rbackoff_pct = -1, .gap_us = 0,
            .contexts = NXCTX},
    .tag = "",
    .nxctx = 1,
    .section = "setup",
    .stall_open_ns = 20 * SEC,
    .stall_exit_ns = 60 * SEC,
    .test_stall = -1,
};

/* ---- options ------------------------------------------------------------ */

static const struct {
  const char *name;
  unsigned bit;
} SECTIONS[] = {{"latency", SEC_LATENCY},
                {"spin", SEC_SPIN},
                {"scaling", SEC_SCALING},
                {"throughput", SEC_THROUGHPUT},
                {"idle", SEC_IDLE},
                {"wake", SEC_WAKE},
                {"adapt", SEC_ADAPT},
                {"delivery", SEC_DELIVERY}};

static void usage(FILE *to) {
  fprintf(to,
          "usage: uvcuda-bench [--quick] [--csv FILE] [--section NAME]... "
          "[--samples N]\n"
          "  --quick        few samples (for the simulation and smoke tests)\n"
          "  --csv FILE     write every measurement to FILE\n"
          "  --section NAME latency, spin, scaling, delivery, throughput, idle, "
          "wake, adapt\n"
          "                 (repeatable; default all)\n"
          "  --samples N    timed samples per measurement (default 1000, after "
          "N/10 up to 100 warm-up)\n"
          "  --probe-us N   uvcuda loops' fault probe interval (50..2000; "
          "default: the library's)\n"
          "  --reactor-spin-us N, --reactor-yield-us N,\n"
          "  --reactor-sleep-max-us N, --reactor-backoff-pct N\n"
          "                 uvcuda loops' reactor back-off (default: the "
          "library's)\n"
          "  --gap-us N     idle time between two samples (default 0)\n"
          "  --contexts N   CUDA contexts whose streams scaling holds (1..5, "
          "default 5)\n");
}

/* The integer value of option `name`, lo..hi. */
static int int_arg(const char *name, const char *s, long lo, long hi, int *out) {
  char *end;
  long v = strtol(s, &end, 10);
  if (*s == 0 || *end || v < lo || v > hi) {
    fprintf(stderr, "uvcuda-bench: bad %s %s\n", name, s);
    return -1;
  }
  *out = (int)v;
  return 0;
}

static int samples_arg = -1;

static int set_quick(const char *v) {
  (void)v;
  bench.opt.quick = 1;
  return 0;
}

static int set_csv(const char *v) {
  bench.opt.csv = v;
  return 0;
}

static int set_section(const char *v) {
  int j;
  for (j = 0; j < COUNT(SECTIONS); j++) {
    if (strcmp(v, SECTIONS[j].name) == 0) {
      bench.opt.sections |= SECTIONS[j].bit;
      return 0;
    }
  }
  fprintf(stderr, "uvcuda-bench: unknown section %s\n", v);
  return -1;
}

static int help(const char *v) {
  (void)v;
  usage(stdout);
  exit(0);
}

/* An option: a handler (set), or an integer option (ival, lo..hi). */
static const struct {
  const char *name;
  int takes_value;
  int (*set)(const char *v);
  int *ival;
  long lo, hi;
} OPTIONS[] = {
    {"--quick", 0, set_quick, NULL, 0, 0},
    {"--csv", 1, set_csv, NULL, 0, 0},
    {"--section", 1, set_section, NULL, 0, 0},
    {"--samples", 1, NULL, &samples_arg, 1, 1000000},
    {"--probe-us", 1, NULL, &bench.opt.probe_us, 50, 2000},
    {"--gap-us", 1, NULL, &bench.opt.gap_us, 0, 1000000},
    {"--contexts", 1, NULL, &bench.opt.contexts, 1, NXCTX},
    {"--reactor-spin-us", 1, NULL, &bench.opt.rspin_us, 0, 1000000},
    {"--reactor-yield-us", 1, NULL, &bench.opt.ryield_us, 0, 10000000},
    {"--reactor-sleep-max-us", 1, NULL, &bench.opt.rsleep_us, 1, 100000},
    {"--reactor-backoff-pct", 1, NULL, &bench.opt.rbackoff_pct, 1, 100},
    {"--help", 0, help, NULL, 0, 0},
    {"-h", 0, help, NULL, 0, 0},
};

static int parse_args(int argc, char **argv) {
  int i, j;
  for (i = 1; i < argc; i++) {
    const char *a = argv[i], *v = NULL;
    for (j = 0; j < COUNT(OPTIONS); j++)
      if (strcmp(a, OPTIONS[j].name) == 0) break;
    if (j == COUNT(OPTIONS) || (OPTIONS[j].takes_value && i + 1 >= argc)) {
      usage(stderr);
      return -1;
    }
    if (OPTIONS[j].takes_value) v = argv[++i];
    if (OPTIONS[j].ival) {
      if (int_arg(a, v, OPTIONS[j].lo, OPTIONS[j].hi, OPTIONS[j].ival) != 0)
        return -1;
    } else if (OPTIONS[j].set(v) != 0) {
      return -1;
    }
  }
  if (bench.opt.sections == 0) bench.opt.sections = SEC_ALL;
  if (bench.opt.quick) {
    bench.opt.samples = 30;
    bench.opt.warmup = 5;
  }
  if (samples_arg > 0) {
    bench.opt.samples = samples_arg;
    bench.opt.warmup = samples_arg / 10 > 100 ? 100 : samples_arg / 10;
  }
  return 0;
}

/* ---- the sections, in order --------------------------------------------- */

struct section_def {
  unsigned bit;
  const char *name;
  void (*fn)(void);
  uint64_t budget_ns, quick_ns;
};

int main(int argc, char **argv) {
  static const struct section_def defs[] = {
      {SEC_LATENCY, "latency", section_latency, 110 * SEC, 25 * SEC},
      {SEC_SPIN, "spin", section_spin, 25 * SEC, 8 * SEC},
      {SEC_SCALING, "scaling", section_scaling, 70 * SEC, 15 * SEC},
      {SEC_DELIVERY, "delivery", section_delivery, 80 * SEC, 20 * SEC},
      {SEC_THROUGHPUT, "throughput", section_throughput, 30 * SEC, 10 * SEC},
      {SEC_IDLE, "idle", section_idle, 15 * SEC, 8 * SEC},
      {SEC_WAKE, "wake", section_wake, 10 * SEC, 4 * SEC},
      {SEC_ADAPT, "adapt", section_adapt, 90 * SEC, 15 * SEC},
  };
  uint64_t t_start = uv_hrtime(), t_sec;
  int i;

  setvbuf(stdout, NULL, _IOLBF, 0);
  if (parse_args(argc, argv) != 0) return 2;
  if (bench.opt.csv && csv_open(bench.opt.csv) != 0) {
    fprintf(stderr, "uvcuda-bench: %s: %s\n", bench.opt.csv, strerror(errno));
    return 2;
  }
  if (getenv("UVCUDA_BENCH_STALL_S")) {
    double o = 0, e = 0;
    if (sscanf(getenv("UVCUDA_BENCH_STALL_S"), "%lf,%lf", &o, &e) == 2 &&
        o > 0 && e > o) {
      bench.stall_open_ns = (uint64_t)(o * 1e9);
      bench.stall_exit_ns = (uint64_t)(e * 1e9);
    }
  }
  if (getenv("UVCUDA_BENCH_TEST_STALL"))
    bench.test_stall = atol(getenv("UVCUDA_BENCH_TEST_STALL"));
  bench.test_hang = getenv("UVCUDA_BENCH_TEST_HANG");
  watchdog_start();
  if (setup() != 0) {
    csv_close();
    fflush(stdout);
    _exit(1);
  }
  beat();
  for (i = 0; i < COUNT(defs); i++) {
    if (!(bench.opt.sections & defs[i].bit)) continue;
    bench.section = defs[i].name;
    bench.truncated = 0;
    bench.timeouts = 0;
    t_sec = uv_hrtime();
    bench.deadline =
        t_sec + (bench.opt.quick ? defs[i].quick_ns : defs[i].budget_ns);
    beat();
    if (bench.test_hang && strcmp(bench.test_hang, defs[i].name) == 0)
      for (;;) pause(); /* test hook: the watchdog must end this */
    defs[i].fn();
    printf(" (section %s: %.1f s%s)\n", defs[i].name,
           (double)(uv_hrtime() - t_sec) / 1e9,
           bench.truncated ? "; cut short by its deadline" : "");
  }
  bench.section = "targets";
  targets();
  printf("\ntotal %.1f s%s%s\n", (double)(uv_hrtime() - t_start) / 1e9,
         bench.errors ? "; ERRORS (see above)" : "",
         bench.sim ? "; simulation, not a GPU measurement" : "");
  watchdog_stop();
  csv_close();
  fflush(stdout);
  rows_free();
  /* _exit: a pool thread stuck in a CUDA call must not hold up exit (libuv
   * joins its pool threads in a destructor). */
  _exit(bench.errors ? 1 : 0);
}
