/* uvcuda-load: a load client for uvcuda-server (protocol.h), on loopback.
 *
 *   uvcuda-load --port N [--threads T] [--conns N] [--depth D] [--requests M]
 *               [--duration-s S] [--op mix|checksum|add|sleep|ping]
 *               [--size MIN[:MAX]] [--idle-pings K] [--ping-interval-us U] ...
 *
 * N connections (spread over T threads, each with its own libuv loop) keep D
 * requests each in flight until M requests per connection are answered or S
 * seconds have passed; every reply is verified (checksum recomputed on the
 * CPU, added words compared). Meanwhile a separate thread with its own loop
 * and connection sends one PING at a time, every U µs: first K of them
 * before the load starts (the idle round trip), then for as long as the
 * load runs. Its own loop keeps the client's load work out of the ping's
 * round trip.
 *
 * Prints throughput and latency p50/p99 of the load, the ping RTT idle and
 * under load, and one machine-readable line starting with "RESULT".
 * Exit status: 0 all verified, 1 wrong or error replies, 2 connection
 * failures or --timeout-s reached, 64 usage.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "protocol.h"

static struct {
  int port;
  int threads;
  int conns;
  int depth;
  uint64_t requests;
  double duration_s;
  double timeout_s;
  int op; /* 0 = mix of checksum and add */
  uint32_t size_min, size_max;
  uint32_t sleep_us;
  int idle_pings;
  int ping_interval_us;
  int ping;
  const char *label;
  int quiet;
} opt = {
    .port = PROTO_DEFAULT_PORT,
    .threads = 1,
    .conns = 16,
    .depth = 8,
    .requests = 1000,
    .duration_s = 0,
    .timeout_s = 60,
    .op = 0,
    .size_min = 4096,
    .size_max = 4096,
    .sleep_us = 100,
    .idle_pings = 200,
    .ping_interval_us = 1000,
    .ping = 1,
    .label = "load",
};

static int64_t g_inflight;  /* requests of all threads awaiting a reply */
static int g_load_started; /* set by main, read by the pinger */
static int g_load_done;

#define ATOMIC_ADD(p, v) __atomic_add_fetch((p), (v), __ATOMIC_RELAXED)
#define ATOMIC_GET(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define ATOMIC_SET(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)

/* ---- samples ------------------------------------------------------------ */

typedef struct {
  uint32_t *v; /* ns, clamped */
  size_t n, cap, max;
} samples_t;

static void samples_add(samples_t *s, uint64_t ns) {
  if (s->n == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 4096;
    uint32_t *v;
    if (cap > s->max) cap = s->max;
    if (cap <= s->n) return; /* full: keep the first max samples */
    v = realloc(s->v, cap * sizeof(*v));
    if (!v) return;
    s->v = v;
    s->cap = cap;
  }
  s->v[s->n++] = ns > UINT32_MAX ? UINT32_MAX : (uint32_t)ns;
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

/* In µs; the samples get sorted. */
static double pct(samples_t *s, double p) {
  size_t i;
  if (s->n == 0) return 0;
  i = (size_t)(p / 100.0 * (double)(s->n - 1) + 0.5);
  return s->v[i] / 1e3;
}

static void samples_sort(samples_t *s) {
  if (s->n) qsort(s->v, s->n, sizeof(*s->v), cmp_u32);
}

/* ---- reply framing ---------------------------------------------------- */

typedef struct {
  unsigned char *buf;
  size_t len, cap;
} rbuf_t;

static int rbuf_reserve(rbuf_t *r, size_t want) {
  if (r->cap - r->len >= want) return 0;
  {
    size_t cap = r->cap ? r->cap : 65536;
    unsigned char *b;
    while (cap - r->len < want) cap *= 2;
    if (cap > (64u << 20)) return -1;
    b = realloc(r->buf, cap);
    if (!b) return -1;
    r->buf = b;
    r->cap = cap;
  }
  return 0;
}

/* ---- load connections ------------------------------------------------- */

typedef struct worker_s worker_t;

typedef struct {
  uv_write_t wreq;
  uint32_t id, arg, n, expect;
  uint8_t op;
  uint8_t busy, written, answered;
  unsigned char *buf; /* request: header + payload */
  uint64_t t0;
} entry_t;

typedef struct {
  uv_tcp_t tcp;
  uv_connect_t creq;
  worker_t *w;
  int index;
  entry_t *ent;
  int *freeidx, nfree;
  uint32_t seq;
  uint64_t sent, done;
  int connected, closing, failed;
  rbuf_t rb;
  uint64_t rng;
} lconn_t;

struct worker_s {
  uv_loop_t loop;
  uv_thread_t thread;
  uv_timer_t duration, timeout;
  int index;
  lconn_t *conns;
  int nconns, open;
  int stopping, timed_out;
  uint64_t ok, bad, errors_reported, bytes;
  int conn_failures;
  samples_t lat;
  uint64_t t_first, t_last;
};

static uint64_t rng_next(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *s = x;
}

static void report_bad(worker_t *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void report_bad(worker_t *w, const char *fmt, ...) {
  va_list ap;
  w->bad++;
  if (w->errors_reported++ >= 5) return;
  va_start(ap, fmt);
  fprintf(stderr, "uvcuda-load: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

static void worker_maybe_end(worker_t *w) {
  if (w->open > 0) return;
  uv_close((uv_handle_t *)&w->duration, NULL);
  uv_close((uv_handle_t *)&w->timeout, NULL);
}

static void on_lconn_closed(uv_handle_t *h) {
  lconn_t *c = h->data;
  c->w->open--;
  worker_maybe_end(c->w);
}

static void lconn_close(lconn_t *c) {
  if (c->closing) return;
  c->closing = 1;
  uv_close((uv_handle_t *)&c->tcp, on_lconn_closed);
}

static void entry_release(lconn_t *c, int i) {
  entry_t *e = &c->ent[i];
  free(e->buf);
  e->buf = NULL;
  e->busy = 0;
  c->freeidx[c->nfree++] = i;
}

static int lconn_outstanding(const lconn_t *c) { return opt.depth - c->nfree; }

static void lconn_fill(lconn_t *c);

static void lconn_maybe_done(lconn_t *c) {
  if (c->closing) return;
  if ((c->sent >= opt.requests || c->w->stopping) && lconn_outstanding(c) == 0)
    lconn_close(c);
}

static void on_lwrite(uv_write_t *req, int status) {
  entry_t *e = (entry_t *)(void *)req; /* wreq is the first member */
  lconn_t *c = req->data;
  int i = (int)(e - c->ent);
  e->written = 1;
  if (status < 0) {
    if (!c->failed && !c->closing)
      fprintf(stderr, "uvcuda-load: write: %s\n", uv_strerror(status));
    c->failed = 1;
  }
  if (e->answered || status < 0) {
    if (status < 0 && !e->answered) ATOMIC_ADD(&g_inflight, -1);
    entry_release(c, i);
  }
  if (status < 0)
    lconn_close(c);
  else
    lconn_maybe_done(c);
}

static void lconn_send(lconn_t *c) {
  worker_t *w = c->w;
  int i = c->freeidx[--c->nfree];
  entry_t *e = &c->ent[i];
  uint32_t n = opt.size_min, k;
  uv_buf_t b;
  uint64_t seq = c->seq++;

  if (opt.size_max > opt.size_min)
    n += (uint32_t)(rng_next(&c->rng) % (opt.size_max - opt.size_min + 1));
  e->op = opt.op ? (uint8_t)opt.op
                 : (seq % 2 ? PROTO_OP_ADD : PROTO_OP_CHECKSUM);
  if (e->op == PROTO_OP_ADD) n = n < 4 ? 4 : n & ~3u;
  if (e->op == PROTO_OP_SLEEP) n = 0;
  if (e->op == PROTO_OP_PING && n > PROTO_PING_MAX) n = PROTO_PING_MAX;
  e->n = n;
  e->id = (uint32_t)(seq << 8) | (uint32_t)i;
  e->arg = e->op == PROTO_OP_SLEEP ? opt.sleep_us : (uint32_t)rng_next(&c->rng);
  e->busy = 1;
  e->written = e->answered = 0;
  e->buf = malloc(PROTO_REQ_HDR + n);
  if (!e->buf) {
    fprintf(stderr, "uvcuda-load: out of memory\n");
    exit(2);
  }
  proto_req_header(e->buf, e->op, e->id, e->arg, n);
  for (k = 0; k < n; k += 8) {
    uint64_t r = rng_next(&c->rng);
    memcpy(e->buf + PROTO_REQ_HDR + k, &r, n - k < 8 ? n - k : 8);
  }
  if (e->op == PROTO_OP_CHECKSUM) e->expect = proto_fnv1a(e->buf + PROTO_REQ_HDR, n);
  e->wreq.data = c;
  b = uv_buf_init((char *)e->buf, PROTO_REQ_HDR + n);
  e->t0 = uv_hrtime();
  if (w->t_first == 0) w->t_first = e->t0;
  c->sent++;
  ATOMIC_ADD(&g_inflight, 1);
  if (uv_write(&e->wreq, (uv_stream_t *)&c->tcp, &b, 1, on_lwrite)) {
    ATOMIC_ADD(&g_inflight, -1);
    entry_release(c, i);
    c->failed = 1;
    lconn_close(c);
  }
}

static void lconn_fill(lconn_t *c) {
  while (!c->closing && c->nfree > 0 && c->sent < opt.requests && !c->w->stopping)
    lconn_send(c);
  lconn_maybe_done(c);
}

/* One reply frame: b[0..len) after the length field. */
static void lconn_reply(lconn_t *c, const unsigned char *b, uint32_t len) {
  worker_t *w = c->w;
  uint8_t st = b[0], op = b[1];
  uint32_t id = proto_get_u32(b + 4), n = len - PROTO_REP_FIXED;
  const unsigned char *p = b + PROTO_REP_FIXED;
  int i = (int)(id & 0xff);
  entry_t *e = i < opt.depth ? &c->ent[i] : NULL;
  uint64_t now = uv_hrtime();

  if (!e || !e->busy || e->answered || e->id != id) {
    report_bad(w, "conn %d: reply %s for unknown id %u%s%.*s", c->index,
               proto_status_name(st), id, st ? ": " : "", st ? (int)n : 0,
               (const char *)p);
    if (st == PROTO_BUSY || st == PROTO_MALFORMED || st == PROTO_TOO_LARGE) c->failed = 1;
    return;
  }
  e->answered = 1;
  ATOMIC_ADD(&g_inflight, -1);
  c->done++;
  w->t_last = now;
  samples_add(&w->lat, now - e->t0);
  if (st != PROTO_OK || op != e->op) {
    report_bad(w, "conn %d id %u (%s, %u bytes): status %s op %u: %.*s", c->index,
               id, proto_op_name(e->op), e->n, proto_status_name(st), op, (int)n,
               (const char *)p);
  } else if (e->op == PROTO_OP_CHECKSUM) {
    if (n != 4 || proto_get_u32(p) != e->expect)
      report_bad(w, "conn %d id %u: checksum of %u bytes is %08x, want %08x",
                 c->index, id, e->n, n == 4 ? proto_get_u32(p) : 0, e->expect);
    else
      w->ok++;
  } else if (e->op == PROTO_OP_ADD) {
    uint32_t k, wrong = 0;
    if (n != e->n) {
      wrong = 1;
    } else {
      for (k = 0; k < n; k += 4)
        wrong += proto_get_u32(p + k) !=
                 proto_get_u32(e->buf + PROTO_REQ_HDR + k) + e->arg;
    }
    if (wrong)
      report_bad(w, "conn %d id %u: add of %u bytes: %u words wrong", c->index, id,
                 e->n, wrong);
    else
      w->ok++;
  } else if (e->op == PROTO_OP_PING) {
    if (n != e->n || memcmp(p, e->buf + PROTO_REQ_HDR, n))
      report_bad(w, "conn %d id %u: ping echo differs", c->index, id);
    else
      w->ok++;
  } else {
    if (n) report_bad(w, "conn %d id %u: sleep reply has a payload", c->index, id);
    else w->ok++;
  }
  w->bytes += e->n;
  if (e->written) entry_release(c, i);
}

/* Consumes every whole frame of rb; <0 on a frame no reply can be. */
static int parse_frames(rbuf_t *rb, void (*fn)(void *, const unsigned char *, uint32_t),
                        void *arg) {
  size_t off = 0;
  int rc = 0;
  while (rb->len - off >= 4) {
    uint32_t len = proto_get_u32(rb->buf + off);
    if (len < PROTO_REP_FIXED || len > (48u << 20)) {
      rc = -1;
      break;
    }
    if (rb->len - off - 4 < len) {
      if (rbuf_reserve(rb, len + 4 - (rb->len - off))) rc = -1;
      break;
    }
    fn(arg, rb->buf + off + 4, len);
    off += 4 + (size_t)len;
  }
  if (off) {
    memmove(rb->buf, rb->buf + off, rb->len - off);
    rb->len -= off;
  }
  return rc;
}

static void lconn_frame(void *arg, const unsigned char *b, uint32_t len) {
  lconn_reply(arg, b, len);
}

static void on_lalloc(uv_handle_t *h, size_t sz, uv_buf_t *b) {
  lconn_t *c = h->data;
  (void)sz;
  if (rbuf_reserve(&c->rb, 16384)) {
    *b = uv_buf_init(NULL, 0);
    return;
  }
  *b = uv_buf_init((char *)c->rb.buf + c->rb.len, (unsigned)(c->rb.cap - c->rb.len));
}

static void on_lread(uv_stream_t *st, ssize_t nread, const uv_buf_t *b) {
  lconn_t *c = st->data;
  (void)b;
  if (nread < 0) {
    if (lconn_outstanding(c) > 0 || (c->sent < opt.requests && !c->w->stopping)) {
      fprintf(stderr, "uvcuda-load: conn %d: %s with %d requests unanswered\n",
              c->index, nread == UV_EOF ? "closed by the server" : uv_strerror((int)nread),
              lconn_outstanding(c));
      c->failed = 1;
    }
    lconn_close(c);
    return;
  }
  c->rb.len += (size_t)nread;
  if (parse_frames(&c->rb, lconn_frame, c)) {
    report_bad(c->w, "conn %d: bad reply frame", c->index);
    c->failed = 1;
    lconn_close(c);
    return;
  }
  if (c->failed) {
    lconn_close(c);
    return;
  }
  lconn_fill(c);
}

static void on_lconnect(uv_connect_t *req, int status) {
  lconn_t *c = req->data;
  if (status < 0) {
    fprintf(stderr, "uvcuda-load: connect to 127.0.0.1:%d: %s\n", opt.port,
            uv_strerror(status));
    c->failed = 1;
    lconn_close(c);
    return;
  }
  c->connected = 1;
  uv_tcp_nodelay(&c->tcp, 1);
  uv_read_start((uv_stream_t *)&c->tcp, on_lalloc, on_lread);
  lconn_fill(c);
}

static void on_duration(uv_timer_t *t) {
  worker_t *w = t->data;
  int i;
  w->stopping = 1;
  for (i = 0; i < w->nconns; i++) lconn_maybe_done(&w->conns[i]);
}

static void on_timeout(uv_timer_t *t) {
  worker_t *w = t->data;
  int i;
  w->timed_out = 1;
  w->stopping = 1;
  for (i = 0; i < w->nconns; i++) lconn_close(&w->conns[i]);
}

static void worker_run(void *arg) {
  worker_t *w = arg;
  struct sockaddr_in addr;
  int i, j;
  uv_ip4_addr("127.0.0.1", opt.port, &addr);
  uv_loop_init(&w->loop);
  uv_timer_init(&w->loop, &w->duration);
  uv_timer_init(&w->loop, &w->timeout);
  w->duration.data = w->timeout.data = w;
  if (opt.duration_s > 0)
    uv_timer_start(&w->duration, on_duration, (uint64_t)(opt.duration_s * 1e3), 0);
  uv_timer_start(&w->timeout, on_timeout, (uint64_t)(opt.timeout_s * 1e3), 0);
  for (i = 0; i < w->nconns; i++) {
    lconn_t *c = &w->conns[i];
    c->w = w;
    c->rng = 0x9E3779B97F4A7C15ull ^ ((uint64_t)(c->index + 1) * 0xD1B54A32D192ED03ull);
    c->ent = calloc((size_t)opt.depth, sizeof(entry_t));
    c->freeidx = calloc((size_t)opt.depth, sizeof(int));
    if (!c->ent || !c->freeidx) exit(2);
    for (j = opt.depth - 1; j >= 0; j--) c->freeidx[c->nfree++] = j;
    uv_tcp_init(&w->loop, &c->tcp);
    c->tcp.data = c;
    c->creq.data = c;
    w->open++;
    if (uv_tcp_connect(&c->creq, &c->tcp, (const struct sockaddr *)&addr, on_lconnect)) {
      c->failed = 1;
      lconn_close(c);
    }
  }
  uv_run(&w->loop, UV_RUN_DEFAULT);
  for (i = 0; i < w->nconns; i++) {
    lconn_t *c = &w->conns[i];
    if (c->failed || !c->connected) w->conn_failures++;
    if (c->sent != c->done && !w->timed_out && !c->failed) w->conn_failures++;
    for (j = 0; j < opt.depth; j++) free(c->ent[j].buf);
    free(c->ent);
    free(c->freeidx);
    free(c->rb.buf);
  }
  uv_loop_close(&w->loop);
}

/* ---- the pinger --------------------------------------------------------- */

static struct {
  uv_loop_t loop;
  uv_thread_t thread;
  uv_sem_t idle_done;
  uv_tcp_t tcp;
  uv_connect_t creq;
  uv_timer_t tick, timeout;
  uv_write_t wreq;
  unsigned char req[PROTO_REQ_HDR + 8];
  rbuf_t rb;
  int phase; /* 0 idle round, 1 waiting for the load, 2 under load, 3 done */
  int outstanding, posted, failed, closing, connected;
  uint32_t id;
  uint64_t t0;
  int64_t inflight_at_send;
  int sent_idle;
  samples_t idle, load;
  double inflight_sum;
} P;

static void pinger_post(void) {
  if (!P.posted) {
    P.posted = 1;
    uv_sem_post(&P.idle_done);
  }
}

static void pinger_close(void) {
  if (P.closing) return;
  P.closing = 1;
  pinger_post();
  uv_close((uv_handle_t *)&P.tcp, NULL);
  uv_close((uv_handle_t *)&P.tick, NULL);
  uv_close((uv_handle_t *)&P.timeout, NULL);
}

static void on_pwrite(uv_write_t *req, int status) {
  (void)req;
  if (status < 0) {
    P.failed = 1;
    pinger_close();
  }
}

static void pinger_send(void) {
  uv_buf_t b;
  P.id++;
  proto_req_header(P.req, PROTO_OP_PING, P.id, 0, 8);
  memcpy(P.req + PROTO_REQ_HDR, &P.id, 4);
  memcpy(P.req + PROTO_REQ_HDR + 4, "ping", 4);
  b = uv_buf_init((char *)P.req, sizeof(P.req));
  P.inflight_at_send = ATOMIC_GET(&g_inflight);
  P.t0 = uv_hrtime();
  P.outstanding = 1;
  if (uv_write(&P.wreq, (uv_stream_t *)&P.tcp, &b, 1, on_pwrite)) {
    P.failed = 1;
    pinger_close();
  }
}

static void on_ptick(uv_timer_t *t) {
  (void)t;
  if (P.closing || P.outstanding || !P.connected) return;
  if (P.phase == 0) {
    if (P.sent_idle >= opt.idle_pings) {
      P.phase = 1;
      pinger_post();
    } else {
      P.sent_idle++;
      pinger_send();
      return;
    }
  }
  if (P.phase == 1 && ATOMIC_GET(&g_load_started)) P.phase = 2;
  if (P.phase == 2) {
    if (ATOMIC_GET(&g_load_done)) {
      P.phase = 3;
      pinger_close();
      return;
    }
    pinger_send();
  }
}

static void pinger_frame(void *arg, const unsigned char *b, uint32_t len) {
  uint64_t rtt = uv_hrtime() - P.t0;
  (void)arg;
  if (b[0] != PROTO_OK || proto_get_u32(b + 4) != P.id || len != PROTO_REP_FIXED + 8 ||
      memcmp(b + PROTO_REP_FIXED, P.req + PROTO_REQ_HDR, 8) != 0) {
    fprintf(stderr, "uvcuda-load: ping: wrong reply (status %s)\n", proto_status_name(b[0]));
    P.failed = 1;
    pinger_close();
    return;
  }
  P.outstanding = 0;
  if (P.phase == 0) {
    samples_add(&P.idle, rtt);
  } else if (P.phase == 2) {
    samples_add(&P.load, rtt);
    P.inflight_sum += (double)P.inflight_at_send;
  }
}

static void on_palloc(uv_handle_t *h, size_t sz, uv_buf_t *b) {
  (void)h;
  (void)sz;
  if (rbuf_reserve(&P.rb, 4096)) {
    *b = uv_buf_init(NULL, 0);
    return;
  }
  *b = uv_buf_init((char *)P.rb.buf + P.rb.len, (unsigned)(P.rb.cap - P.rb.len));
}

static void on_pread(uv_stream_t *st, ssize_t nread, const uv_buf_t *b) {
  (void)st;
  (void)b;
  if (nread < 0) {
    if (P.phase != 3) {
      fprintf(stderr, "uvcuda-load: ping connection: %s\n",
              nread == UV_EOF ? "closed by the server" : uv_strerror((int)nread));
      P.failed = 1;
    }
    pinger_close();
    return;
  }
  P.rb.len += (size_t)nread;
  if (parse_frames(&P.rb, pinger_frame, NULL)) {
    P.failed = 1;
    pinger_close();
  }
}

static void on_pconnect(uv_connect_t *req, int status) {
  (void)req;
  if (status < 0) {
    fprintf(stderr, "uvcuda-load: ping connection: %s\n", uv_strerror(status));
    P.failed = 1;
    pinger_close();
    return;
  }
  uv_tcp_nodelay(&P.tcp, 1);
  if (uv_read_start((uv_stream_t *)&P.tcp, on_palloc, on_pread)) {
    P.failed = 1;
    pinger_close();
    return;
  }
  P.connected = 1;
}

static void on_ptimeout(uv_timer_t *t) {
  (void)t;
  fprintf(stderr, "uvcuda-load: ping: timeout\n");
  P.failed = 1;
  pinger_close();
}

/* One ping at a time; a timer of the interval (rounded up to whole ms, the
 * resolution of libuv timers) sends the next once the last is answered. */
static void pinger_run(void *arg) {
  struct sockaddr_in addr;
  (void)arg;
  uv_ip4_addr("127.0.0.1", opt.port, &addr);
  uv_loop_init(&P.loop);
  uv_timer_init(&P.loop, &P.tick);
  uv_timer_init(&P.loop, &P.timeout);
  uv_tcp_init(&P.loop, &P.tcp);
  uv_timer_start(&P.timeout, on_ptimeout, (uint64_t)(opt.timeout_s * 1e3) + 2000, 0);
  if (uv_tcp_connect(&P.creq, &P.tcp, (const struct sockaddr *)&addr, on_pconnect)) {
    P.failed = 1;
    pinger_close();
  }
  {
    uint64_t ms = (uint64_t)(opt.ping_interval_us + 999) / 1000;
    uv_timer_start(&P.tick, on_ptick, ms, ms);
  }
  uv_run(&P.loop, UV_RUN_DEFAULT);
  uv_loop_close(&P.loop);
  free(P.rb.buf);
}

/* ---- main ---------------------------------------------------------------- */

static void usage(FILE *f) {
  fprintf(f,
"usage: uvcuda-load --port N [options]\n"
"  --threads T           load threads, each with its own loop (default 1)\n"
"  --conns N             load connections in all (default 16)\n"
"  --depth D             requests in flight per connection, 1..256 (default 8)\n"
"  --requests M          requests per connection (default 1000)\n"
"  --duration-s S        stop sending after S seconds (default: no limit)\n"
"  --timeout-s T         give up after T seconds, exit 2 (default 60)\n"
"  --op OP               mix (checksum and add), checksum, add, sleep, ping\n"
"  --size MIN[:MAX]      payload bytes, uniform in [MIN, MAX] (default 4096)\n"
"  --sleep-us U          SLEEP requests: GPU time each (default 100)\n"
"  --idle-pings K        pings before the load starts (default 200)\n"
"  --ping-interval-us U  between pings (default 1000; 1 ms timer resolution)\n"
"  --no-ping             no ping connection\n"
"  --label TEXT          label of the RESULT line\n"
"  --quiet               only the RESULT line\n");
}

static int parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out) {
  char *end;
  unsigned long long v;
  errno = 0;
  if (!s || *s == '-' || !*s) return -1;
  v = strtoull(s, &end, 0);
  if (errno || *end || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

static int parse_args(int argc, char **argv) {
  static const struct option lo[] = {
      {"port", 1, 0, 'p'}, {"threads", 1, 0, 't'}, {"conns", 1, 0, 'c'},
      {"depth", 1, 0, 'd'}, {"requests", 1, 0, 'n'}, {"duration-s", 1, 0, 'D'},
      {"timeout-s", 1, 0, 'T'}, {"op", 1, 0, 'o'}, {"size", 1, 0, 's'},
      {"sleep-us", 1, 0, 'S'}, {"idle-pings", 1, 0, 'i'},
      {"ping-interval-us", 1, 0, 'I'}, {"no-ping", 0, 0, 'N'},
      {"label", 1, 0, 'l'}, {"quiet", 0, 0, 'q'}, {"help", 0, 0, 'h'},
      {0, 0, 0, 0}};
  int c;
  uint64_t v;
  while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
    int bad = 0;
    char *colon, *end;
    switch (c) {
      case 'p': bad = parse_u64(optarg, 1, 65535, &v); opt.port = (int)v; break;
      case 't': bad = parse_u64(optarg, 1, 64, &v); opt.threads = (int)v; break;
      case 'c': bad = parse_u64(optarg, 1, 10000, &v); opt.conns = (int)v; break;
      case 'd': bad = parse_u64(optarg, 1, 256, &v); opt.depth = (int)v; break;
      case 'n': bad = parse_u64(optarg, 1, 1u << 24, &v); opt.requests = v; break;
      case 'D': opt.duration_s = strtod(optarg, &end); bad = *end || opt.duration_s < 0; break;
      case 'T': opt.timeout_s = strtod(optarg, &end); bad = *end || opt.timeout_s <= 0 || opt.timeout_s > 3600; break;
      case 'o':
        if (!strcmp(optarg, "mix")) opt.op = 0;
        else if (!strcmp(optarg, "checksum")) opt.op = PROTO_OP_CHECKSUM;
        else if (!strcmp(optarg, "add")) opt.op = PROTO_OP_ADD;
        else if (!strcmp(optarg, "sleep")) opt.op = PROTO_OP_SLEEP;
        else if (!strcmp(optarg, "ping")) opt.op = PROTO_OP_PING;
        else bad = 1;
        break;
      case 's':
        colon = strchr(optarg, ':');
        if (colon) *colon = '\0';
        bad = parse_u64(optarg, 0, 1u << 30, &v);
        opt.size_min = opt.size_max = (uint32_t)v;
        if (!bad && colon) {
          bad = parse_u64(colon + 1, opt.size_min, 1u << 30, &v);
          opt.size_max = (uint32_t)v;
        }
        break;
      case 'S': bad = parse_u64(optarg, 0, 10000000, &v); opt.sleep_us = (uint32_t)v; break;
      case 'i': bad = parse_u64(optarg, 0, 1000000, &v); opt.idle_pings = (int)v; break;
      case 'I': bad = parse_u64(optarg, 1, 10000000, &v); opt.ping_interval_us = (int)v; break;
      case 'N': opt.ping = 0; break;
      case 'l': opt.label = optarg; break;
      case 'q': opt.quiet = 1; break;
      case 'h': usage(stdout); exit(0);
      default: usage(stderr); return -1;
    }
    if (bad) {
      fprintf(stderr, "uvcuda-load: bad value: %s\n", optarg ? optarg : "");
      return -1;
    }
  }
  if (optind < argc || opt.conns < opt.threads) {
    usage(stderr);
    return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  worker_t *ws;
  samples_t all = {0};
  uint64_t ok = 0, bad = 0, bytes = 0, t_first = UINT64_MAX, t_last = 0, t0;
  int i, failures = 0, timed_out = 0, k = 0, rc;
  double secs, rps, ping_idle_p99, ping_load_p99, ratio, mean_inflight;

  signal(SIGPIPE, SIG_IGN);
  if (parse_args(argc, argv)) return 64;
  ws = calloc((size_t)opt.threads, sizeof(*ws));
  if (!ws) return 2;
  P.idle.max = 1u << 20;
  P.load.max = 1u << 22;

  if (opt.ping) {
    uv_sem_init(&P.idle_done, 0);
    if (uv_thread_create(&P.thread, pinger_run, NULL)) return 2;
    uv_sem_wait(&P.idle_done); /* the idle round is over (or failed) */
  }
  ATOMIC_SET(&g_load_started, 1);
  t0 = uv_hrtime();
  for (i = 0; i < opt.threads; i++) {
    worker_t *w = &ws[i];
    int j, n = opt.conns / opt.threads + (i < opt.conns % opt.threads);
    w->index = i;
    w->nconns = n;
    w->conns = calloc((size_t)n, sizeof(lconn_t));
    if (!w->conns) return 2;
    for (j = 0; j < n; j++) w->conns[j].index = k++;
    w->lat.max = (size_t)(32u << 20) / (size_t)opt.threads;
    if (uv_thread_create(&w->thread, worker_run, w)) return 2;
  }
  for (i = 0; i < opt.threads; i++) uv_thread_join(&ws[i].thread);
  ATOMIC_SET(&g_load_done, 1);
  if (opt.ping) uv_thread_join(&P.thread);

  for (i = 0; i < opt.threads; i++) {
    worker_t *w = &ws[i];
    ok += w->ok;
    bad += w->bad;
    bytes += w->bytes;
    failures += w->conn_failures;
    timed_out |= w->timed_out;
    if (w->t_first && w->t_first < t_first) t_first = w->t_first;
    if (w->t_last > t_last) t_last = w->t_last;
    if (w->lat.n) {
      uint32_t *v = realloc(all.v, (all.n + w->lat.n) * sizeof(uint32_t));
      if (v) {
        all.v = v;
        memcpy(all.v + all.n, w->lat.v, w->lat.n * sizeof(uint32_t));
        all.n += w->lat.n;
      }
    }
    free(w->lat.v);
    free(w->conns);
  }
  free(ws);
  samples_sort(&all);
  samples_sort(&P.idle);
  samples_sort(&P.load);
  secs = t_last > t_first ? (double)(t_last - t_first) / 1e9 : (double)(uv_hrtime() - t0) / 1e9;
  rps = secs > 0 ? (double)(ok + bad) / secs : 0;
  ping_idle_p99 = pct(&P.idle, 99);
  ping_load_p99 = pct(&P.load, 99);
  ratio = ping_idle_p99 > 0 ? ping_load_p99 / ping_idle_p99 : 0;
  mean_inflight = P.load.n ? P.inflight_sum / (double)P.load.n : 0;

  if (!opt.quiet) {
    printf("uvcuda-load: %d threads, %d connections x depth %d (%d in flight), "
           "op %s, payload %u..%u bytes\n",
           opt.threads, opt.conns, opt.depth, opt.conns * opt.depth,
           opt.op ? proto_op_name(opt.op) : "mix", opt.size_min, opt.size_max);
    printf("requests   %llu verified, %llu wrong or failed, in %.2f s: %.0f req/s, "
           "%.1f MiB/s of payload\n",
           (unsigned long long)ok, (unsigned long long)bad, secs, rps,
           secs > 0 ? (double)bytes / secs / (1 << 20) : 0.0);
    printf("latency    p50 %.1f us, p99 %.1f us, max %.1f us\n", pct(&all, 50),
           pct(&all, 99), pct(&all, 100));
    if (opt.ping) {
      printf("ping idle  %zu pings: p50 %.1f us, p99 %.1f us\n", P.idle.n,
             pct(&P.idle, 50), ping_idle_p99);
      printf("ping load  %zu pings at %.0f requests in flight (mean): p50 %.1f us, "
             "p99 %.1f us; p99 %.2fx idle\n",
             P.load.n, mean_inflight, pct(&P.load, 50), ping_load_p99, ratio);
    }
  }
  printf("RESULT label=%s reqs=%llu bad=%llu secs=%.3f rps=%.0f mibps=%.1f "
         "p50_us=%.1f p99_us=%.1f ping_idle_p50_us=%.1f ping_idle_p99_us=%.1f "
         "ping_load_p50_us=%.1f ping_load_p99_us=%.1f ratio=%.2f inflight=%.0f "
         "pings=%zu failures=%d timeout=%d\n",
         opt.label, (unsigned long long)(ok + bad), (unsigned long long)bad, secs, rps,
         secs > 0 ? (double)bytes / secs / (1 << 20) : 0.0, pct(&all, 50), pct(&all, 99),
         pct(&P.idle, 50), ping_idle_p99, pct(&P.load, 50), ping_load_p99, ratio,
         mean_inflight, P.load.n, failures + P.failed, timed_out);
  fflush(stdout);
  free(all.v);
  free(P.idle.v);
  free(P.load.v);
  if (timed_out) fprintf(stderr, "uvcuda-load: timeout after %.0f s\n", opt.timeout_s);
  rc = bad ? 1 : 0;
  if (failures || P.failed || timed_out) rc = 2;
  return rc;
}
