/* Result rows: their statistics, printing and the CSV (one line per row,
 * written and flushed as each measurement is taken). */
#include "bench.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static row_t *rows;
static int nrows, caprows;
static FILE *csv;

int csv_open(const char *path) {
  csv = fopen(path, "w");
  if (csv == NULL) return -1;
  fprintf(csv, "section,method,workload,param,samples,p50_us,p90_us,"
               "p99_us,mean_us,loop_cpu_us_per_op,proc_cpu_us_per_op,"
               "reactor_cpu_us_per_op,extra\n");
  fflush(csv);
  return 0;
}

void csv_flush(void) {
  if (csv) fflush(csv);
}

void csv_close(void) {
  if (csv) fclose(csv);
  csv = NULL;
}

const row_t *row_last(void) { return nrows ? &rows[nrows - 1] : NULL; }

void rows_free(void) {
  free(rows);
  rows = NULL;
  nrows = caprows = 0;
}

void row_init(row_t *w, const char *sec, const char *method, const char *wl,
              double param) {
  memset(w, 0, sizeof(*w));
  snprintf(w->section, sizeof(w->section), "%s", sec);
  snprintf(w->method, sizeof(w->method), "%s", method);
  snprintf(w->workload, sizeof(w->workload), "%s", wl);
  w->param = param;
  w->p50 = w->p90 = w->p99 = w->mean = w->loop_cpu = w->proc_cpu = NAN;
  w->reactor_cpu = NAN;
  w->ph_enq = w->ph_seen = w->ph_deliver = NAN;
}

void row_extra(row_t *w, const char *fmt, ...) {
  size_t len = strlen(w->extra);
  va_list ap;
  if (len + 2 >= sizeof(w->extra)) return;
  if (len) w->extra[len++] = ';';
  va_start(ap, fmt);
  vsnprintf(w->extra + len, sizeof(w->extra) - len, fmt, ap);
  va_end(ap);
}

void row_note(row_t *w, const char *fmt, ...) {
  char buf[256];
  size_t len = strlen(w->note);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  row_extra(w, "%s", buf);
  if (len > 0 && len + 2 < sizeof(w->note)) {
    memcpy(w->note + len, "; ", 3);
    len += 2;
  }
  if (len + 1 < sizeof(w->note)) {
    size_t k = strlen(buf);
    if (k > sizeof(w->note) - 1 - len) k = sizeof(w->note) - 1 - len;
    memcpy(w->note + len, buf, k);
    w->note[len + k] = 0;
  }
}

int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Nearest rank. */
static double pct(const double *sorted, int n, int permille) {
  int i = (int)(((long)n * permille + 999) / 1000) - 1;
  if (i < 0) i = 0;
  if (i >= n) i = n - 1;
  return sorted[i];
}

void row_stats(row_t *w, double *lat_us, int n) {
  double sum = 0;
  int i;
  w->n = n;
  if (n <= 0) return;
  qsort(lat_us, (size_t)n, sizeof(double), cmp_double);
  for (i = 0; i < n; i++) sum += lat_us[i];
  w->p50 = pct(lat_us, n, 500);
  w->p90 = pct(lat_us, n, 900);
  w->p99 = pct(lat_us, n, 990);
  w->mean = sum / n;
}

static void csv_num(double v) {
  if (isnan(v)) fputs(",", csv);
  else fprintf(csv, ",%.3f", v);
}

void row_emit(row_t *w) {
  char extra[sizeof(w->extra) + 64];
  char *p;
  if (bench.sim) {
    snprintf(extra, sizeof(extra), "simulation-not-a-GPU-measurement%s%s",
             w->extra[0] ? ";" : "", w->extra);
  } else {
    snprintf(extra, sizeof(extra), "%s", w->extra);
  }
  for (p = extra; *p; p++)
    if (*p == ',' || *p == '"' || *p == '\n' || *p == '\r') *p = ' ';
  if (nrows == caprows) {
    int cap = caprows ? caprows * 2 : 128;
    row_t *n = realloc(rows, (size_t)cap * sizeof(*n));
    if (n != NULL) {
      rows = n;
      caprows = cap;
    }
  }
  if (nrows < caprows) rows[nrows++] = *w;
  if (csv == NULL) return;
  fprintf(csv, "%s,%s,%s,%.10g,%d", w->section, w->method, w->workload,
          w->param, w->n);
  csv_num(w->p50);
  csv_num(w->p90);
  csv_num(w->p99);
  csv_num(w->mean);
  csv_num(w->loop_cpu);
  csv_num(w->proc_cpu);
  csv_num(strcmp(w->section, "idle") == 0 ? NAN : w->reactor_cpu);
  fprintf(csv, ",%s\n", extra);
  fflush(csv);
}

const row_t *row_find(const char *sec, const char *method, const char *wl,
                      double param) {
  int i;
  for (i = 0; i < nrows; i++) {
    const row_t *w = &rows[i];
    if (strcmp(w->section, sec) == 0 && strcmp(w->method, method) == 0 &&
        strcmp(w->workload, wl) == 0 && (isnan(param) || w->param == param))
      return w;
  }
  return NULL;
}

const char *fmt_num(char *buf, size_t n, double v, int prec) {
  if (isnan(v)) snprintf(buf, n, "-");
  else snprintf(buf, n, "%.*f", prec, v);
  return buf;
}

double median_of(double *v, int n) {
  if (n <= 0) return NAN;
  qsort(v, (size_t)n, sizeof(v[0]), cmp_double);
  return v[n / 2];
}

void section_header(const char *title, const char *what) {
  printf("\n== %s ==%s\n", title, bench.tag);
  if (what) printf("%s\n", what);
  if (bench.sim)
    printf("(every number in this section: simulation, not a GPU "
           "measurement)\n");
}

const char *asleep_str(const row_t *w) {
  if (w->n == 0 || isnan(w->loop_cpu) || isnan(w->p50)) return "-";
  return w->loop_cpu < 0.25 * w->p50 ? "yes" : "no";
}

void lat_table_head(const char *first) {
  printf("  %-20s %8s %8s %8s %8s %9s %9s %8s %6s  %s\n", first, "p50", "p90",
         "p99", "mean", "loopCPU", "procCPU", "rctCPU", "asleep",
         "paths / notes");
}

void lat_table_row(const char *label, const row_t *w, const char *paths) {
  char a[32], b[32], c[32], d[32], e[32], f[32], g[32];
  printf("  %-20s %8s %8s %8s %8s %9s %9s %8s %6s  %s%s%s\n", label,
         fmt_num(a, sizeof(a), w->p50, 1), fmt_num(b, sizeof(b), w->p90, 1),
         fmt_num(c, sizeof(c), w->p99, 1), fmt_num(d, sizeof(d), w->mean, 1),
         fmt_num(e, sizeof(e), w->loop_cpu, 1),
         fmt_num(f, sizeof(f), w->proc_cpu, 1),
         fmt_num(g, sizeof(g), w->reactor_cpu, 1), asleep_str(w),
         paths ? paths : "", w->note[0] && paths ? "  " : "", w->note);
}

void stats_extra(row_t *w, const uvcuda_stats_t *st) {
  row_extra(w, "paths:spin=%" PRIu64 "/reactor=%" PRIu64 "/hostfn=%" PRIu64
               "/poll=%" PRIu64 ";fallbacks=%" PRIu64 ";reactor_wakeups=%" PRIu64
               ";hostfn_wakeups=%" PRIu64,
            st->completed_spin, st->completed_reactor, st->completed_hostfn,
            st->completed_poll, st->fallbacks, st->reactor_wakeups,
            st->hostfn_wakeups);
}
