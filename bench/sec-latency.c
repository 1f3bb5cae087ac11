/* The latency section (submit -> callback, every method x workload, a
 * fresh loop each) and the spin section (uvcuda-auto by spin budget). */
#include "bench.h"

#include <math.h>
#include <stdlib.h>

static int method_supported(int mi) {
  if (mi == M_HOSTFN_SPIN || mi == M_HOSTFN_BLOCK)
    return bench.info.host_task_sync;
  return 1;
}

/* One method x workload run into a row; prints it. */
static void lat_run(const char *sec, int mi, const workload_t *wl,
                    int spin_budget_us, double param, const char *label) {
  const method_t *m = &METHODS[mi];
  int warmup = bench.opt.warmup, n = bench.opt.samples, rc;
  char paths[160];
  run_t *r;
  row_t w;

  if (wl->ns >= 2 * MS) { /* bound the time of the long op */
    if (n > 200) n = 200;
    if (warmup > 20) warmup = 20;
  }
  row_init(&w, sec, m->name, wl->name, param);
  r = run_new(m, bench.timed, wl, spin_budget_us);
  if (r == NULL) return;
  rc = run_open(r);
  if (rc != 0) {
    row_note(&w, "%s: %s", rc > 0 ? "skipped" : "error", r->err);
    if (rc < 0) bench.errors++;
  } else {
    measure(r, warmup, n, &w);
  }
  run_close(r); /* fills the stats; leaks on abandon */
  if (r->have_stats) {
    stats_extra(&w, &r->stats);
    row_extra(&w, "spin_budget_us=%.0f", (double)r->spin_ns / 1e3);
  }
  if (w.n > 0) row_extra(&w, "asleep=%s", asleep_str(&w));
  paths_str(paths, sizeof(paths), r);
  if (!r->abandon) free(r);
  row_emit(&w);
  lat_table_row(label, &w, paths);
  fflush(stdout);
}

void section_latency(void) {
  static const int order[] = {M_RAW,     M_MEMOP,        M_HOSTFN_ASYNC,
                              M_THREADPOOL, M_FLAG,      M_AUTO,
                              M_REACTOR, M_HOSTFN,       M_POLL,
                              M_HOSTFN_SPIN, M_HOSTFN_BLOCK};
  char a[32];
  int wi, j;

  section_header("latency: submit -> callback on the loop thread, us",
                 "loopCPU/procCPU: us of CPU per op (loop thread / whole "
                 "process); asleep: loop thread CPU < 1/4 of p50");
  if (!bench.info.host_task_sync)
    printf("hostfn-spin/block: not supported by this driver (needs CUDA "
           "13.2)\n");
  for (wi = 0; wi < W_COUNT; wi++) {
    printf("\n workload %s (%s)\n", WL[wi].name,
           WL[wi].memset ? "cuMemsetD32Async of 1 word"
                         : "uvcuda_sleep_ns kernel");
    lat_table_head("method");
    for (j = 0; j < COUNT(order); j++) {
      if (!method_supported(order[j])) continue;
      if (past_deadline() || bench.timeouts >= 2) {
        printf("  %-20s skipped: %s\n", METHODS[order[j]].name,
               bench.timeouts >= 2 ? "two waits timed out in this section"
                               : "section deadline reached");
        continue;
      }
      lat_run("latency", order[j], &WL[wi], -1, WL[wi].us,
              METHODS[order[j]].name);
    }
  }

  /* The p50 matrix. */
  printf("\n p50 latency, us%s\n  %-20s", bench.tag, "method");
  for (wi = 0; wi < W_COUNT; wi++) printf(" %12s", WL[wi].name);
  printf("\n");
  for (j = 0; j < COUNT(order); j++) {
    if (!method_supported(order[j])) continue;
    printf("  %-20s", METHODS[order[j]].name);
    for (wi = 0; wi < W_COUNT; wi++) {
      const row_t *w =
          row_find("latency", METHODS[order[j]].name, WL[wi].name, NAN);
      printf(" %12s", fmt_num(a, sizeof(a), w ? w->p50 : NAN, 1));
    }
    printf("\n");
  }
  /* Loop asleep per method (over the workloads of at least 50 us). */
  printf("\n loop thread CPU per op, us (asleep?)%s\n  %-20s", bench.tag,
         "method");
  for (wi = 0; wi < W_COUNT; wi++) printf(" %12s", WL[wi].name);
  printf("\n");
  for (j = 0; j < COUNT(order); j++) {
    if (!method_supported(order[j])) continue;
    printf("  %-20s", METHODS[order[j]].name);
    for (wi = 0; wi < W_COUNT; wi++) {
      const row_t *w =
          row_find("latency", METHODS[order[j]].name, WL[wi].name, NAN);
      char cell[40];
      if (w == NULL || w->n == 0) snprintf(cell, sizeof(cell), "-");
      else snprintf(cell, sizeof(cell), "%.1f(%s)", w->loop_cpu,
                    asleep_str(w));
      printf(" %12s", cell);
    }
    printf("\n");
  }
}

void section_spin(void) {
  static const int budgets[] = {0, 5, 10, 20, 50, 100};
  static const int wls[] = {W_EMPTY, W_K20};
  char label[64];
  int i, j;

  section_header("spin: uvcuda-auto by spin budget (options.spin_budget_us), us",
                 NULL);
  for (j = 0; j < COUNT(wls); j++) {
    printf("\n workload %s\n", WL[wls[j]].name);
    lat_table_head("spin budget");
    for (i = 0; i < COUNT(budgets); i++) {
      snprintf(label, sizeof(label), "%d us", budgets[i]);
      if (past_deadline() || bench.timeouts >= 2) {
        printf("  %-20s skipped: %s\n", label,
               bench.timeouts >= 2 ? "two waits timed out in this section"
                               : "section deadline reached");
        continue;
      }
      lat_run("spin", M_AUTO, &WL[wls[j]], budgets[i], budgets[i], label);
    }
  }
}
