/* The delivery section: seen -> callback (uvcuda_future_timing) of one
 * timed `empty` future with 1 and with N = 100,000 futures pending on the
 * loop, in alternating rounds. The scaling section steps N up once, and the
 * GPU switched between a fast and a slow mode between its rows (H200, run
 * 12), taking the loop's wake-up with it; rounds of both states, each pair
 * a few seconds apart, put both under the same drift, and each round's
 * difference is reported beside the pooled one.
 *
 * Two variants. With the default spin budget (uvcuda-auto), the timed
 * future is seen by the loop's own spin when the GPU answers within it,
 * else by the reactor after a wake-up: if the GPU's start -> seen grows
 * with N (it did on the H100, run 14: 10 -> 130 us), the N rows pay a
 * wake-up the N=1 rows do not, and the difference measures the path, not
 * the delivery. With spin budget 0 (uvcuda-auto-nospin) every sample of
 * both states is armed at once and delivered after a reactor wake-up: the
 * same path, so the difference is what N pending futures cost the
 * delivery itself (the target line uses it). */
#include "bench.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DELIVERY_ROUNDS 6
#define DELIVERY_N 100000

/* n futures on the held streams, all armed (past their spin budget); 0, 1
 * at the section's deadline, or -1 with err. *started: how many were
 * started (to take back). */
static int pend(run_t *r, uvcuda_future_t *pf, int n, int *started, char *err,
                size_t len) {
  int i, rc;

  memset(&bench.held, 0, sizeof(bench.held));
  *started = 0;
  if (hold_all(err, len) != 0) return -1;
  for (i = 0; i < n; i++) {
    if (atomic_load(&bench.blocked)) {
      snprintf(err, len, "an enqueue stalled with %d pending", i);
      return -1;
    }
    if (past_deadline()) { /* not an error: the round is left out */
      snprintf(err, len, "section deadline reached with %d pending", i);
      return 1;
    }
    uvcuda_future_init(uvcuda_run_loop(r), &pf[i]);
    rc = uvcuda_future_start(&pf[i], pend_stream(i), NULL, held_on_done);
    *started = i + 1; /* a failed start still needs its close */
    if (rc) {
      snprintf(err, len, "uvcuda_future_start: %s", uvcuda_err_name(rc));
      bench.held.done++; /* no callback will come */
      bench.held.err++;
      return -1;
    }
    if ((i & 1023) == 0) beat();
  }
  held_wait_armed(r->loop, &pf[n - 1]);
  return 0;
}

static double deliver_p50(acc_t *a) {
  return a->ph && a->k ? median_of(a->ph + 2 * a->cap, a->k) : NAN;
}

static double seen_p50(acc_t *a) {
  return a->ph && a->k ? median_of(a->ph + a->cap, a->k) : NAN;
}

static double enq_p50(acc_t *a) {
  return a->ph && a->k ? median_of(a->ph, a->k) : NAN;
}

/* Every round's samples of one state into one row. */
static void pooled_row(const char *method, acc_t *rounds, int nr, int N, row_t *w) {
  acc_t all;
  int i, j, n = 0;
  for (i = 0; i < nr; i++) n += rounds[i].k;
  row_init(w, "delivery", method, "empty", N);
  if (acc_init(&all, n, 1) != 0) return;
  for (i = 0; i < nr; i++) {
    acc_t *a = &rounds[i];
    for (j = 0; j < a->k; j++) {
      all.lat[all.k] = a->lat[j];
      if (all.ph && a->ph) {
        all.ph[all.k] = a->ph[j];
        all.ph[n + all.k] = a->ph[a->cap + j];
        all.ph[2 * n + all.k] = a->ph[2 * a->cap + j];
      } else if (all.ph) {
        free(all.ph);
        all.ph = NULL;
      }
      all.k++;
    }
    all.thr += a->thr;
    all.proc += a->proc;
  }
  row_extra(w, "rounds=%d", nr);
  acc_row(&all, w);
  acc_free(&all);
}

/* One variant: `method` names its rows, spin_us its spin budget (-1: the
 * default). */
static void delivery_variant(const char *method, int spin_us) {
  acc_t a1[DELIVERY_ROUNDS], aN[DELIVERY_ROUNDS];
  double diff[DELIVERY_ROUNDS];
  int N = DELIVERY_N, bs, i, nr = 0, rc = 0, leak = 0;
  int rounds = bench.opt.quick ? 2 : DELIVERY_ROUNDS;
  uvcuda_future_t *pf = NULL;
  char err[200] = "";
  row_t w1, wN, scratch;
  run_t *r;

  /* Without enough contexts the held queues fill (see scaling). */
  if (!bench.sim && N > bench.nxctx * NPEND * 800)
    N = bench.nxctx * NPEND * 800;
  bs = bench.opt.samples / rounds;
  if (bs < 5) bs = 5;
  printf(" %s (spin budget %s):\n", method, spin_us < 0 ? "default" : "0 us");
  memset(a1, 0, sizeof(a1));
  memset(aN, 0, sizeof(aN));
  r = run_new(&METHODS[M_AUTO], bench.timed, &WL[W_EMPTY], spin_us);
  if (r == NULL) return;
  r->timing = 1;
  row_init(&scratch, "delivery", method, "empty", 1);
  if (run_open(r) != 0 || measure(r, bench.opt.warmup, 1, &scratch) != 0 ||
      (pf = calloc((size_t)N, sizeof(*pf))) == NULL) {
    printf("  could not open the run: %s\n", r->err[0] ? r->err : "no memory");
    bench.errors++;
    goto out;
  }
  atomic_store(&bench.blocked, 0);
  atomic_store(&bench.hold_watch, 1);
  for (i = 0; i < rounds && rc == 0; i++) {
    int s, started = 0;
    if (past_deadline() || bench.timeouts) break;
    if (acc_init(&a1[i], bs, 1) != 0 || acc_init(&aN[i], bs, 1) != 0) break;
    nr = i + 1;
    for (s = 0; s < 2 && rc == 0; s++) {
      int many = (s + i) % 2; /* 1, N in even rounds; N, 1 in odd ones */
      row_t *w = many ? &wN : &w1;
      row_init(w, "delivery", method, "empty", many ? N : 1);
      if (!many) {
        rc = measure_into(r, 0, bs, &a1[i], w);
        continue;
      }
      if ((rc = pend(r, pf, N, &started, err, sizeof(err))) == 0) {
        rc = measure_into(r, 0, bs, &aN[i], w);
        if (bench.held.done > 0 || atomic_load(&bench.blocked)) {
          snprintf(err, sizeof(err), "the hold did not hold");
          rc = -1;
        }
      }
      if (held_take_back(r->loop, pf, started) != 0) {
        snprintf(err, sizeof(err), "held futures did not complete or close");
        leak = 1;
        rc = -1;
      }
    }
    if (rc == 0 && (a1[i].k == 0 || aN[i].k == 0)) { /* cut by the deadline */
      snprintf(err, sizeof(err), "section deadline reached");
      rc = 1;
    }
    if (rc == 0) {
      double p1 = deliver_p50(&a1[i]), pN = deliver_p50(&aN[i]);
      diff[i] = pN - p1;
      printf("  round %d (%s): seen -> callback p50 %.2f (N=1), %.2f (N=%d): "
             "%+.2f us; start -> seen p50 %.1f, %.1f; start -> enqueued "
             "p50 %.1f, %.1f\n", i + 1, method, p1, pN, N, diff[i],
             seen_p50(&a1[i]), seen_p50(&aN[i]), enq_p50(&a1[i]),
             enq_p50(&aN[i]));
      fflush(stdout);
    } else {
      nr = i; /* this round is incomplete: left out */
    }
  }
  atomic_store(&bench.hold_watch, 0);
  hold_open();
  if (rc != 0) {
    printf("  stopped: %s\n", err[0] ? err : r->err);
    if (rc < 0) bench.errors++;
  }
  if (nr > 0) {
    double med;
    pooled_row(method, a1, nr, 1, &w1);
    pooled_row(method, aN, nr, N, &wN);
    med = median_of(diff, nr); /* sorts diff: the rounds are printed */
    row_extra(&wN, "rounds_diff_median=%.2f", med);
    row_emit(&w1);
    row_emit(&wN);
    printf("  pooled over %d rounds (%s): seen -> callback p50 %.2f (N=1), "
           "%.2f (N=%d): %+.2f us; median of the rounds' differences %+.2f "
           "us\n", nr, method, w1.ph_deliver, wN.ph_deliver, N,
           wN.ph_deliver - w1.ph_deliver, med);
  }
out:
  for (i = 0; i < DELIVERY_ROUNDS; i++) {
    acc_free(&a1[i]);
    acc_free(&aN[i]);
  }
  if (leak) r->abandon = 1;
  run_close(r);
  if (!r->abandon) {
    free(r);
    free(pf);
  }
}

void section_delivery(void) {
  section_header("delivery: seen -> callback of one timed `empty` future, 1 vs "
                 "N pending, alternating rounds, us",
                 "N futures on the held streams of the scaling contexts; each "
                 "round measures both states (order alternating), each state "
                 "a block of samples; uvcuda-auto with the default spin "
                 "budget, then uvcuda-auto-nospin (budget 0: every sample "
                 "delivered after a reactor wake-up, in both states)");
  delivery_variant("uvcuda-auto", -1);
  if (past_deadline() || bench.timeouts) return;
  delivery_variant("uvcuda-auto-nospin", 0);
}
