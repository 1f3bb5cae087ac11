/* The adapt section: adaptive spin (UVCUDA_OPT_ADAPTIVE) against uvcuda
 * without it and against the spinning floors, on sequences of single
 * kernels awaited one at a time on one stream. Repeated lengths are what
 * it can learn (it should reach the floor's latency while the loop
 * sleeps); random lengths are what it cannot (it must do no worse than
 * without it, at a fraction of a spin's CPU). */
#include "bench.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { A_REP, A_MIXED, A_BIMODAL };

static const struct {
  workload_t wl; /* param: the mean nominal length; ns: the longest */
  int kind;
  const char *what;
} AWL[] = {
    {{"rep-20us", 0, 20 * US, 20}, A_REP, "20 us every time"},
    {{"rep-50us", 0, 50 * US, 50}, A_REP, "50 us every time"},
    {{"rep-200us", 0, 200 * US, 200}, A_REP, "200 us every time"},
    {{"rep-2ms", 0, 2 * MS, 2000}, A_REP, "2 ms every time"},
    {{"mixed", 0, 2 * MS, 1002.5}, A_MIXED,
     "uniform 5 us .. 2 ms per sample, fixed seed"},
    {{"bimodal", 0, 500 * US, 252.5}, A_BIMODAL,
     "5 us or 500 us per sample, fixed seed"},
};

/* The last, today's path a second time, runs on the random workloads
 * only: adaptive predicts none of those futures, so its p50 and p99 differ
 * from today's by the noise of two samples, which this A/A pair shows. */
static const int ORDER[] = {M_RAW,      M_MEMOP,   M_NAP,
                            M_TODAY,    M_ADAPTIVE, M_TODAY_AA};
enum { O_RAW, O_MEMOP, O_NAP, O_TODAY, O_ADAPTIVE, O_TODAY_AA }; /* in ORDER */

#define ADAPT_SEED 0x75766375646164ull

/* splitmix64 from a fixed seed: every method waits on the same lengths. */
static uint64_t next_rand(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static void make_lengths(int kind, uint64_t *lens, int n) {
  uint64_t s = ADAPT_SEED;
  int i;
  for (i = 0; i < n; i++) {
    uint64_t x = next_rand(&s);
    if (kind == A_MIXED) lens[i] = 5 * US + x % (2 * MS - 5 * US + 1);
    else lens[i] = (x >> 63) ? 500 * US : 5 * US;
  }
}

/* a - b of what the section reports: the timed samples' share only. */
static void stats_sub(uvcuda_stats_t *d, const uvcuda_stats_t *a,
                      const uvcuda_stats_t *b) {
  *d = *a;
  d->started -= b->started;
  d->completed_spin -= b->completed_spin;
  d->completed_reactor -= b->completed_reactor;
  d->completed_hostfn -= b->completed_hostfn;
  d->completed_poll -= b->completed_poll;
  d->fallbacks -= b->fallbacks;
  d->reactor_wakeups -= b->reactor_wakeups;
  d->hostfn_wakeups -= b->hostfn_wakeups;
  d->predicted -= b->predicted;
  d->predict_hit -= b->predict_hit;
  d->predict_early -= b->predict_early;
  d->predict_late -= b->predict_late;
  d->prewakes -= b->prewakes;
  d->spin_ns -= b->spin_ns;
}

static void adapt_head(void) {
  printf("  %-16s %8s %8s %8s %8s %8s %9s %8s %8s %6s %6s %6s %6s %8s %8s  "
         "%s\n",
         "method", "p50", "p90", "p99", "mean", "loopCPU", "cpu%wait",
         "procCPU", "rctCPU", "predict", "hit", "early", "late", "prewakes",
         "spin/op", "paths / notes");
}

/* d: the timed samples' stats (uvcuda runs), else NULL. */
static void adapt_print(const row_t *w, const uvcuda_stats_t *d,
                        const char *paths) {
  char a[32], b[32], c[32], e[32], f[32], g[32], h[32], i[32], j[32];
  double pct = 100 * w->loop_cpu / w->mean;
  printf("  %-16s %8s %8s %8s %8s %8s %9s %8s %8s", w->method,
         fmt_num(a, sizeof(a), w->p50, 1), fmt_num(b, sizeof(b), w->p90, 1),
         fmt_num(c, sizeof(c), w->p99, 1), fmt_num(e, sizeof(e), w->mean, 1),
         fmt_num(f, sizeof(f), w->loop_cpu, 1),
         fmt_num(g, sizeof(g), w->n ? pct : NAN, 1),
         fmt_num(i, sizeof(i), w->proc_cpu, 1),
         fmt_num(j, sizeof(j), w->reactor_cpu, 1));
  if (d && w->n)
    printf(" %6" PRIu64 " %6" PRIu64 " %6" PRIu64 " %6" PRIu64 " %8" PRIu64
           " %8s", d->predicted, d->predict_hit, d->predict_early,
           d->predict_late, d->prewakes,
           fmt_num(h, sizeof(h), (double)d->spin_ns / 1e3 / w->n, 1));
  else
    printf(" %6s %6s %6s %6s %8s %8s", "-", "-", "-", "-", "-", "-");
  printf("  %s%s%s\n", paths, w->note[0] ? "  " : "", w->note);
  fflush(stdout);
}

/* The methods take turns in this many blocks of samples, each block in a
 * rotated order: the GPU's and the host's drift over a workload's seconds
 * (a 2 ms p50 moved 13 us between two runs of one method, H200 run 12)
 * then falls on every method alike instead of on whichever ran last. */
#define ADAPT_BLOCKS 10

/* One method's run on one workload: a fresh loop, kept open while the
 * methods take turns. */
typedef struct {
  int mi, uv, have, adaptive, ok;
  run_t *r;
  row_t w;
  acc_t acc;
  uvcuda_stats_t s0, d;
  char blocks[160]; /* a per-block comparison (adaptive, A/A), printed under */
} arun_t;

/* lens: per-sample lengths (warm-up first), NULL for the same length every
 * time. */
static void arun_open(arun_t *a, int ai, int mi, const uint64_t *lens,
                      int nlens) {
  const method_t *m = &METHODS[mi];
  const workload_t *wl = &AWL[ai].wl;
  int rc;
  row_t wu;

  memset(a, 0, sizeof(*a));
  a->mi = mi;
  a->uv = m->ops == &uvcuda_ops;
  a->adaptive = -2; /* not asked */
  row_init(&a->w, "adapt", m->name, wl->name, wl->us);
  /* uvcuda's phases (UVCUDA_OPT_TIMING: a clock read per stamp; adaptive
   * takes those stamps anyway): where a gap to the floor arises. */
  if (acc_init(&a->acc, bench.opt.samples,
               a->uv || mi == M_RAW || mi == M_MEMOP || mi == M_NAP) != 0) {
    row_note(&a->w, "error: out of memory");
    bench.errors++;
    return;
  }
  a->r = run_new(m, bench.timed, wl, -1);
  if (a->r == NULL) return;
  a->r->timing = a->uv;
  if (lens) run_lengths(a->r, lens, nlens);
  rc = run_open(a->r);
  if (rc != 0) {
    row_note(&a->w, "%s: %s", rc > 0 ? "skipped" : "error", a->r->err);
    if (rc < 0) bench.errors++;
    return;
  }
  /* The warm-up apart, so that the stats deltas cover what the latency
   * and CPU figures cover: the timed samples. */
  row_init(&wu, "adapt", m->name, wl->name, wl->us);
  if (measure(a->r, 0, bench.opt.warmup, &wu) != 0) {
    row_note(&a->w, "warm-up: %s", wu.note);
    return;
  }
  if (a->uv && uvcuda_loop_stats(uvcuda_run_loop(a->r), &a->s0) == 0)
    a->have = 1;
  a->ok = 1;
}

static void arun_block(arun_t *a, int n) {
  if (!a->ok) return;
  if (measure_into(a->r, 0, n, &a->acc, &a->w) != 0) a->ok = 0;
}

static void arun_close(arun_t *a, const uint64_t *lens) {
  uvcuda_stats_t s1;
  char paths[160] = "-";
  row_t *w = &a->w;
  run_t *r = a->r;
  int i;

  if (r != NULL && r->loop != NULL) {
    if (a->have && uvcuda_loop_stats(uvcuda_run_loop(r), &s1) == 0)
      stats_sub(&a->d, &s1, &a->s0);
    else
      a->have = 0;
    if (a->uv) a->adaptive = uvcuda_run_adaptive(r);
  } else {
    a->have = 0;
  }
  acc_row(&a->acc, w);
  acc_free(&a->acc);
  if (r != NULL) run_close(r); /* leaks on abandon */
  if (w->n > 0) row_extra(w, "cpu_pct_of_wait=%.1f;blocks=%d",
                          100 * w->loop_cpu / w->mean, ADAPT_BLOCKS);
  if (lens && w->n > 0) {
    double sum = 0;
    for (i = 0; i < w->n; i++) sum += (double)lens[bench.opt.warmup + i];
    row_extra(w, "lengths_mean_us=%.1f;seed=0x%llx", sum / w->n / 1e3,
              (unsigned long long)ADAPT_SEED);
  }
  if (a->have) {
    uvcuda_stats_t *d = &a->d;
    stats_extra(w, d);
    row_extra(w, "predicted=%" PRIu64 ";predict_hit=%" PRIu64
                 ";predict_early=%" PRIu64 ";predict_late=%" PRIu64
                 ";prewakes=%" PRIu64 ";spin_us_per_op=%.2f",
              d->predicted, d->predict_hit, d->predict_early, d->predict_late,
              d->prewakes, w->n ? (double)d->spin_ns / 1e3 / w->n : 0.0);
    snprintf(paths, sizeof(paths), "spin=%" PRIu64 " reactor=%" PRIu64
             " hostfn=%" PRIu64 "%s", d->completed_spin, d->completed_reactor,
             d->completed_hostfn,
             d->fallbacks ? " (fell back to host functions)" : "");
  }
  if (r != NULL && a->uv && r->have_stats)
    row_extra(w, "spin_budget_us=%.0f", (double)r->spin_ns / 1e3);
  if (a->adaptive >= 0) row_extra(w, "adaptive=%d", a->adaptive);
  /* The flag was taken but the library did not turn it on (or cannot say
   * so): the row may be uvcuda without adaptive spin, and must not read as
   * adaptive's unremarked. */
  if (a->mi == M_ADAPTIVE && a->adaptive == 0)
    row_note(w, "adaptive spin is off in this library "
             "(uvcuda_loop_adaptive = 0)");
  else if (a->mi == M_ADAPTIVE && a->adaptive == -1)
    row_note(w, "this library has no uvcuda_loop_adaptive: adaptive spin "
             "unconfirmed");
  if (r != NULL && !r->abandon) free(r);
  row_emit(w);
  adapt_print(w, a->have ? &a->d : NULL, paths);
  if (!isnan(w->ph_seen) && a->uv)
    printf("  %-16s phases, p50 us from start: enqueued %.1f, completion "
           "seen %.1f, seen -> callback %.1f\n", "", w->ph_enq, w->ph_seen,
           w->ph_deliver);
  else if (!isnan(w->ph_seen)) /* a floor: it sees and ends at once */
    printf("  %-16s phases, p50 us from start: enqueued %.1f\n", "",
           w->ph_enq);
  if (a->blocks[0]) printf("  %-16s %s\n", "", a->blocks);
}

/* p50 of samples [from, to) of a run's timed ones, in gathering order. */
static double slice_p50(const acc_t *a, int from, int to) {
  double *v, m;
  int n;
  if (to > a->k) to = a->k;
  if ((n = to - from) <= 0 || (v = malloc(sizeof(double) * (size_t)n)) == NULL)
    return NAN;
  memcpy(v, a->lat + from, sizeof(double) * (size_t)n);
  m = median_of(v, n);
  free(v);
  return m;
}

/* Block by block, adaptive's p50 less the baseline's (the same block: the
 * same stretch of time); their median and range into the adaptive row. */
static void block_diffs(arun_t *ad, const arun_t *base, int bs) {
  double d[ADAPT_BLOCKS], lo = NAN, hi = NAN, med;
  int b, nb = 0;
  for (b = 0; b < ADAPT_BLOCKS && (b + 1) * bs <= ad->acc.k &&
              (b + 1) * bs <= base->acc.k;
       b++) {
    d[nb] = slice_p50(&ad->acc, b * bs, (b + 1) * bs) -
            slice_p50(&base->acc, b * bs, (b + 1) * bs);
    if (nb == 0 || d[nb] < lo) lo = d[nb];
    if (nb == 0 || d[nb] > hi) hi = d[nb];
    nb++;
  }
  if (nb == 0) return;
  med = median_of(d, nb);
  row_extra(&ad->w, "block_base=%s;blocks_diff_p50_median=%.2f;"
            "blocks_diff_p50_min=%.2f;blocks_diff_p50_max=%.2f",
            METHODS[base->mi].name, med, lo, hi);
  snprintf(ad->blocks, sizeof(ad->blocks), "per block (%d of %d samples): "
           "p50 less %s's p50 median %+.1f us, range %+.1f .. %+.1f us", nb,
           bs, METHODS[base->mi].name, med, lo, hi);
}

/* Every method on one workload, their samples interleaved in blocks. */
static void adapt_workload(int ai, const uint64_t *lens, int nlens) {
  arun_t runs[COUNT(ORDER)];
  int n = bench.opt.samples, bs = (n + ADAPT_BLOCKS - 1) / ADAPT_BLOCKS;
  int nm = AWL[ai].kind == A_REP ? O_TODAY_AA : COUNT(ORDER); /* methods */
  int b, j, left;

  for (j = 0; j < nm; j++) arun_open(&runs[j], ai, ORDER[j], lens, nlens);
  for (b = 0, left = n; left > 0 && !past_deadline() && bench.timeouts < 2;
       b++, left -= bs)
    for (j = 0; j < nm; j++)
      arun_block(&runs[(j + b) % nm], left < bs ? left : bs);
  /* Learnable lengths against the floor, the others against today. */
  block_diffs(&runs[O_ADAPTIVE], &runs[AWL[ai].kind == A_REP ? O_RAW : O_TODAY],
              bs);
  if (nm > O_TODAY_AA) block_diffs(&runs[O_TODAY_AA], &runs[O_TODAY], bs);
  else block_diffs(&runs[O_NAP], &runs[O_RAW], bs);
  for (j = 0; j < nm; j++) {
    if (runs[j].ok && runs[j].acc.k < n)
      row_note(&runs[j].w, "%d of %d samples (%s)", runs[j].acc.k, n,
               bench.timeouts >= 2 ? "two waits timed out in this section"
                                   : "section deadline reached");
    arun_close(&runs[j], lens);
  }
}

/* A matrix of the section's rows: one line per method, a cell per
 * workload: p50/p99 (cpu 0), the loop's CPU per op and its share of the
 * wait (1), or the process's and the reactor's CPU per op (2). */
static void adapt_matrix(const char *title, int cpu) {
  char a[32], b[32], cell[48];
  int ai, j;
  printf("\n %s%s\n  %-16s", title, bench.tag, "method");
  for (ai = 0; ai < COUNT(AWL); ai++) printf(" %15s", AWL[ai].wl.name);
  printf("\n");
  for (j = 0; j < COUNT(ORDER); j++) {
    printf("  %-16s", METHODS[ORDER[j]].name);
    for (ai = 0; ai < COUNT(AWL); ai++) {
      const row_t *w =
          row_find("adapt", METHODS[ORDER[j]].name, AWL[ai].wl.name, NAN);
      if (w == NULL || w->n == 0) snprintf(cell, sizeof(cell), "-");
      else if (cpu == 2)
        snprintf(cell, sizeof(cell), "%s/%s", fmt_num(a, sizeof(a), w->proc_cpu, 1),
                 fmt_num(b, sizeof(b), w->reactor_cpu, 1));
      else if (cpu)
        snprintf(cell, sizeof(cell), "%s(%s%%)",
                 fmt_num(a, sizeof(a), w->loop_cpu, 1),
                 fmt_num(b, sizeof(b), 100 * w->loop_cpu / w->mean, 0));
      else
        snprintf(cell, sizeof(cell), "%s/%s", fmt_num(a, sizeof(a), w->p50, 1),
                 fmt_num(b, sizeof(b), w->p99, 1));
      printf(" %15s", cell);
    }
    printf("\n");
  }
}

void section_adapt(void) {
  int nlens = bench.opt.warmup + bench.opt.samples, ai;
  uint64_t *lens = malloc(sizeof(uint64_t) * (size_t)nlens);

  section_header("adapt: adaptive spin, submit -> completion, us",
                 "one kernel at a time on one stream; loopCPU: us of loop "
                 "(awaiting) thread CPU per op; cpu%wait: loopCPU / mean; "
                 "predict..spin/op: uvcuda stats over the timed samples "
                 "(spin/op: us of spin passes per op); the methods take "
                 "turns in 10 blocks of samples, in a rotated order");
  if (lens == NULL) {
    printf("  out of memory\n");
    bench.errors++;
    return;
  }
  adapt_floor(&AWL[0].wl);
  for (ai = 0; ai < COUNT(AWL); ai++) {
    int var = AWL[ai].kind != A_REP;
    printf("\n workload %s (uvcuda_sleep_ns kernel, %s)\n", AWL[ai].wl.name,
           AWL[ai].what);
    adapt_head();
    if (past_deadline() || bench.timeouts >= 2) {
      printf("  skipped: %s\n", bench.timeouts >= 2
                                    ? "two waits timed out in this section"
                                    : "section deadline reached");
      continue;
    }
    if (var) make_lengths(AWL[ai].kind, lens, nlens);
    adapt_workload(ai, var ? lens : NULL, nlens);
  }
  free(lens);
  adapt_matrix("p50/p99 latency, us", 0);
  adapt_matrix("loop thread CPU per op, us (% of the mean wait)", 1);
  adapt_matrix("process / reactor thread CPU per op, us", 2);
}
