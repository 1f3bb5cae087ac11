/* The throughput section: 10000 `empty` kernels in flight over 64
 * streams, awaited by uvcuda (auto, hostfn, poll) or by the libuv pool
 * (threadpool), against the launches alone (raw-launch, raw-launch+memop:
 * the streams sleep-polled). */
#include "bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* raw-launch: enqueue all, then sleep-poll the streams: the CPU cost of
 * the launches alone; +memop: also one cuStreamWriteValue32 after each
 * launch, the driver cost of the completion marker uvcuda enqueues. */
enum { TP_RAW, TP_RAW_MEMOP, TP_UVCUDA, TP_THREADPOOL };

/* One method's rounds. After a timed out wait it is leaked with its
 * arrays: a pool thread or the reactor may still touch them. */
typedef struct {
  run_t *run; /* the method's, for its loop; NULL for raw-launch */
  int raw_memop;
  uvcuda_future_t *tf;
  uv_work_t *treq;
  uint64_t *ts, *te;
  int nf, tf_init;
  volatile int tdone;
  int terr;
  atomic_int tsync_err; /* from pool threads */
  char err[200];
  int abandon;
} tput_t;

#define LOOP(r) ((r)->run ? (r)->run->loop : NULL)

static int op_empty(uvcuda_future_t *f, uvcuda_stream_t s) {
  (void)f;
  return (int)enqueue_work(&WL[W_EMPTY], (CUstream)s);
}

static void on_tput(uvcuda_future_t *f, int status) {
  tput_t *r = f->data;
  r->te[f - r->tf] = uv_hrtime();
  if (status) r->terr++;
  r->tdone++;
}

static void on_tput_closed(uvcuda_future_t *f) {
  tput_t *r = f->data;
  r->tdone++;
}

static void tput_work(uv_work_t *w) {
  tput_t *r = w->data;
  ctx_on_this_thread();
  if (bench.cu.cuStreamSynchronize(bench.tps[(w - r->treq) % NTP]) !=
      CUDA_SUCCESS)
    atomic_fetch_add(&r->tsync_err, 1);
}

static void tput_after(uv_work_t *w, int status) {
  tput_t *r = w->data;
  r->te[w - r->treq] = uv_hrtime();
  if (status) r->terr++;
  r->tdone++;
}

static void tput_run(const method_t *m, int kind, const char *label) {
  int rounds = bench.opt.quick ? 1 : 5, nf = NFLIGHT, rd, i, rc = 0, k = 0;
  int done = 0;
  double *lat = NULL, thr = 0, proc = 0, wall = 0, cps = NAN, over = NAN;
  char a[32], b[32], c[32], d[32], e[32], f[32], paths[160] = "-";
  const row_t *base;
  uint64_t t0, t1;
  cpu_t c0, c1;
  double rct = 0, q0 = NAN, q1 = NAN;
  unsigned tid0 = 0, tid1 = 0;
  int rct_ok = kind == TP_UVCUDA;
  CUresult q;
  tput_t *r;
  row_t w;

  row_init(&w, "throughput", label, "empty", nf);
  r = calloc(1, sizeof(*r));
  if (r == NULL) return;
  r->raw_memop = kind == TP_RAW_MEMOP;
  if (kind == TP_RAW_MEMOP) kind = TP_RAW;
  atomic_init(&r->tsync_err, 0);
  if (kind != TP_RAW &&
      (r->run = run_new(m, bench.timed, &WL[W_EMPTY], -1)) == NULL) {
    free(r);
    return;
  }
  r->nf = nf;
  r->ts = calloc((size_t)nf, sizeof(uint64_t));
  r->te = calloc((size_t)nf, sizeof(uint64_t));
  lat = malloc(sizeof(double) * (size_t)nf * (size_t)rounds);
  if (kind == TP_UVCUDA) r->tf = calloc((size_t)nf, sizeof(uvcuda_future_t));
  if (kind == TP_THREADPOOL) r->treq = calloc((size_t)nf, sizeof(uv_work_t));
  if (!r->ts || !r->te || !lat || (kind == TP_UVCUDA && !r->tf) ||
      (kind == TP_THREADPOOL && !r->treq)) {
    row_note(&w, "error: out of memory");
    bench.errors++;
    goto out;
  }
  if (kind != TP_RAW) {
    rc = run_open(r->run);
    if (rc != 0) {
      row_note(&w, "%s: %s", rc > 0 ? "skipped" : "error", r->run->err);
      if (rc < 0) bench.errors++;
      goto out;
    }
  }
  if (kind == TP_UVCUDA) {
    for (i = 0; i < nf; i++) {
      uvcuda_future_init(uvcuda_run_loop(r->run), &r->tf[i]);
      r->tf[i].data = r;
    }
    r->tf_init = nf;
  }
  for (rd = 0; rd < 1 + rounds; rd++) { /* round 0 warms up */
    if (past_deadline()) {
      row_note(&w, "truncated by the section deadline");
      break;
    }
    if (drain_streams(bench.tps, NTP, 10 * SEC) != 0) {
      row_note(&w, "error: streams did not drain");
      bench.timeouts++;
      break;
    }
    if (LOOP(r)) uv_run(LOOP(r), UV_RUN_NOWAIT);
    r->tdone = r->terr = 0;
    atomic_store(&r->tsync_err, 0);
    if (kind == TP_UVCUDA) q0 = reactor_cpu_now_us(&tid0);
    cpu_begin(&c0);
    t0 = uv_hrtime();
    for (i = 0; i < nf && rc == 0; i++) {
      CUstream s = bench.tps[i % NTP];
      r->ts[i] = uv_hrtime();
      if (kind == TP_UVCUDA) {
        rc = uvcuda_future_start(&r->tf[i], s, op_empty, on_tput);
        if (rc)
          snprintf(r->err, sizeof(r->err), "uvcuda_future_start: %s",
                   uvcuda_err_name(rc));
      } else {
        q = enqueue_work(&WL[W_EMPTY], s);
        if (q == CUDA_SUCCESS && kind == TP_RAW && r->raw_memop)
          q = bench.cu.cuStreamWriteValue32(s, bench.flag_d + 64,
                                            (cuuint32_t)i, 0);
        if (q != CUDA_SUCCESS) {
          snprintf(r->err, sizeof(r->err), "launch: %s", cuname(q));
          rc = -1;
        } else if (kind == TP_THREADPOOL) {
          r->treq[i].data = r;
          uv_queue_work(LOOP(r), &r->treq[i], tput_work, tput_after);
        }
      }
      if ((i & 1023) == 0) beat();
    }
    if (rc) {
      row_note(&w, "error: %s", r->err);
      bench.errors++;
      r->abandon = 1; /* some are in flight */
      break;
    }
    if (kind == TP_RAW)
      rc = drain_streams(bench.tps, NTP, 30 * SEC);
    else
      rc = wait_count(LOOP(r), &r->tdone, nf, 30 * SEC);
    t1 = uv_hrtime();
    cpu_end(&c1);
    if (kind == TP_UVCUDA) q1 = reactor_cpu_now_us(&tid1);
    if (rc) {
      row_note(&w, "error: TIMEOUT after 30 s with %d of %d complete", r->tdone,
               nf);
      bench.timeouts++;
      if (bench.sim) bench.errors++;
      r->abandon = 1;
      break;
    }
    if (r->terr || atomic_load(&r->tsync_err)) {
      row_note(&w, "error: %d completions failed",
               r->terr + atomic_load(&r->tsync_err));
      bench.errors++;
      break;
    }
    if (rd == 0) continue;
    done += nf;
    wall += (double)(t1 - t0) / 1e3;
    thr += c1.thr - c0.thr;
    proc += c1.proc - c0.proc;
    if (rct_ok && !isnan(q0) && !isnan(q1) && tid0 == tid1) rct += q1 - q0;
    else if (rct_ok && !(isnan(q0) && isnan(q1))) rct_ok = 0;
    if (kind != TP_RAW)
      for (i = 0; i < nf; i++) lat[k++] = (double)(r->te[i] - r->ts[i]) / 1e3;
  }
  if (done > 0) {
    if (kind != TP_RAW) row_stats(&w, lat, k);
    else w.n = done;
    w.loop_cpu = thr / done;
    w.proc_cpu = proc / done;
    if (rct_ok) w.reactor_cpu = rct / done;
    cps = done / (wall / 1e6);
    row_extra(&w, "completions_per_s=%.0f;completions=%d;streams=%d;"
              "in_flight=%d", cps, done, NTP, nf);
  }
out:
  if (kind == TP_UVCUDA && r->tf_init && !r->abandon) {
    r->tdone = 0;
    for (i = 0; i < r->tf_init; i++)
      uvcuda_future_close(&r->tf[i], on_tput_closed);
    if (wait_count(LOOP(r), &r->tdone, r->tf_init, 30 * SEC) != 0) {
      r->abandon = 1;
      bench.errors++;
    }
  }
  if (r->run) {
    if (r->abandon) r->run->abandon = 1;
    run_close(r->run);
    if (r->run->abandon) r->abandon = 1;
    if (r->run->have_stats) {
      stats_extra(&w, &r->run->stats);
      paths_str(paths, sizeof(paths), r->run);
    }
    if (!r->abandon) free(r->run);
  }
  if (!r->abandon) { /* else r and its arrays stay allocated */
    free(r->ts);
    free(r->te);
    free(r->tf);
    free(r->treq);
    free(r);
  }
  free(lat);
  row_emit(&w);
  base = row_find("throughput", "raw-launch", "empty", NFLIGHT);
  if (base && base != row_last() && base->n && w.n)
    over = w.proc_cpu - base->proc_cpu;
  printf("  %-16s %13s %9s %9s %9s %12s %9s  %s%s%s\n", label,
         fmt_num(a, sizeof(a), cps, 0), fmt_num(b, sizeof(b), w.proc_cpu, 2),
         fmt_num(c, sizeof(c), w.loop_cpu, 2),
         fmt_num(f, sizeof(f), w.reactor_cpu, 2), fmt_num(d, sizeof(d), over, 2),
         fmt_num(e, sizeof(e), w.p50, 0), paths, w.note[0] ? "  " : "",
         w.note);
  fflush(stdout);
}

void section_throughput(void) {
  static const int order[] = {M_AUTO, M_HOSTFN, M_POLL, M_THREADPOOL};
  int j;

  section_header("throughput: 10000 `empty` kernels in flight over 64 streams",
                 "procCPU/loopCPU/rctCPU: us of CPU per completion (whole "
                 "process / loop thread / the reactor thread); over-launch: procCPU minus raw-launch's (the "
                 "launches alone, streams sleep-polled), i.e. the cost of "
                 "awaiting; p50: start -> callback of each future, us");
  printf("  %-16s %13s %9s %9s %9s %12s %9s  %s\n", "method",
         "completions/s", "procCPU", "loopCPU", "rctCPU", "over-launch", "p50",
         "paths");
  tput_run(NULL, TP_RAW, "raw-launch");
  if (bench.info.memops32) /* the marker's driver cost, to split uvcuda's */
    tput_run(NULL, TP_RAW_MEMOP, "raw-launch+memop");
  for (j = 0; j < COUNT(order); j++) {
    if (past_deadline() || bench.timeouts >= 2) {
      printf("  %-16s skipped: %s\n", METHODS[order[j]].name,
             bench.timeouts >= 2 ? "waits timed out"
                                 : "section deadline reached");
      continue;
    }
    tput_run(&METHODS[order[j]],
             order[j] == M_THREADPOOL ? TP_THREADPOOL : TP_UVCUDA,
             METHODS[order[j]].name);
  }
}
