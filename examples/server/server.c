/* uvcuda example: a TCP server on 127.0.0.1 that runs each request's payload
 * through a GPU kernel (protocol.h) without ever blocking its libuv loop.
 *
 *   uvcuda-server [--port N] [--threadpool] [options]     (--help lists them)
 *
 * Per request: copy the payload into pinned host memory of a staging slot,
 * then upload -> kernel -> download on one stream of a small pool, then
 * reply straight from the pinned buffer. In the default (uvcuda) mode every
 * step is awaited by a uvcuda future: the loop thread only enqueues work and
 * gets a callback when it is done. In --threadpool mode each request is a
 * uv_queue_work item that enqueues the same work on a pooled stream and
 * waits in cuStreamSynchronize on a libuv worker thread (the usual way).
 *
 * Loop hygiene: GPU submissions and reply writes are queued and done in a
 * uv_check callback, at most --batch submissions per loop iteration (a
 * uv_idle handle keeps the loop from sleeping while some are left), so
 * sockets and pings are served between batches; replies to one connection
 * that are ready together go out in one write.
 *
 * Bounds: requests up to --max-request bytes of payload, --max-conns
 * connections (more get a BUSY reply and are closed), --pipeline requests in
 * flight per connection and --slots (+ --large-slots) in all; reading stops
 * while a connection's limits are reached (backpressure), never buffering
 * without bound. SIGINT/SIGTERM: stop accepting and reading, answer every
 * request already received, shut connections down, free everything, exit 0.
 *
 * Without a GPU driver it runs on uvcuda's simulated driver (when built with
 * tests) and says so.
 */
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uv.h>

/* support/: the driver API (lib/cuda-api.h) and its table, the simulation
 * probe, the test kernels. */
#include "drvtab.h"
#include "kernels.h"
#include "protocol.h"
#include "simprobe.h"
#include "uvcuda.h"

/* ---- small intrusive list -------------------------------------------- */

typedef struct qnode_s {
  struct qnode_s *next, *prev;
} qnode_t;

static void q_init(qnode_t *h) { h->next = h->prev = h; }
static int q_empty(const qnode_t *h) { return h->next == h; }
static int q_linked(const qnode_t *n) { return n->next != NULL && n->next != n; }
static void q_push(qnode_t *h, qnode_t *n) {
  n->prev = h->prev;
  n->next = h;
  h->prev->next = n;
  h->prev = n;
}
static void q_remove(qnode_t *n) {
  n->prev->next = n->next;
  n->next->prev = n->prev;
  n->next = n->prev = n;
}
static qnode_t *q_pop(qnode_t *h) {
  qnode_t *n;
  if (q_empty(h)) return NULL;
  n = h->next;
  q_remove(n);
  return n;
}
#define CONTAINER(ptr, type, field) \
  ((type *)(void *)((char *)(ptr) - offsetof(type, field)))

/* ---- the CUDA driver: support/drvtab.h, through uvcuda_driver_symbol ---- */

static drvtab_t cu;

static int resolve_driver(void) {
  drvtab_miss_t miss;
  if (drvtab_resolve(&cu, &miss) == 0) return 0;
  fprintf(stderr, "uvcuda-server: %s: %s\n", miss.name,
          uvcuda_strerror(miss.err));
  return -1;
}

/* ---- options ----------------------------------------------------------- */

enum { MODE_UVCUDA, MODE_THREADPOOL };
enum { AWAIT_STEP, AWAIT_ONCE };

static struct {
  int port;
  const char *port_file;
  int mode;
  int await;
  size_t max_request; /* payload bytes */
  int max_conns;
  int streams;
  int slots;
  size_t slot_bytes;
  int large_slots;
  int pipeline;
  uint32_t max_sleep_us;
  int batch;
  int drain_timeout_ms;
  int linger_ms;
  size_t write_queue_max;
  int device;
  int require_gpu;
  const char *completion;
  int verbose;
} opt = {
    .port = PROTO_DEFAULT_PORT,
    .mode = MODE_UVCUDA,
    .await = AWAIT_STEP,
    .max_request = 1u << 20,
    .max_conns = 256,
    .streams = 8,
    .slots = 1024,
    .slot_bytes = 64u << 10,
    .large_slots = 8,
    .pipeline = 64,
    .max_sleep_us = 100000,
    .batch = 32,
    .drain_timeout_ms = 10000,
    .linger_ms = 1000,
    .write_queue_max = 4u << 20,
    .device = 0,
};

/* ---- state --------------------------------------------------------------- */

enum slot_state { SLOT_FREE, SLOT_FILL, SLOT_QUEUED, SLOT_GPU, SLOT_REPLY, SLOT_WRITE };
enum step_kind { STEP_UPLOAD, STEP_KERNEL, STEP_DOWNLOAD, STEP_ALL };
enum { CLS_SMALL, CLS_LARGE, NCLS };

/* Pause reasons: reading a connection runs only while none is set. */
#define P_SLOT 0x1u     /* waits for a staging slot */
#define P_PIPELINE 0x2u /* --pipeline requests of it in flight */
#define P_WRITEQ 0x4u   /* its unsent replies exceed --write-queue */

typedef struct conn_s conn_t;
typedef struct slot_s slot_t;

struct slot_s {
  qnode_t link; /* free list, submit queue or its connection's reply list */
  conn_t *conn;
  int cls;
  int state;
  size_t cap;
  unsigned char *h; /* pinned host staging: payload, then the checksum word */
  CUdeviceptr d;
  uint32_t *h_out;
  CUdeviceptr d_out;
  uint8_t op;
  uint32_t id, arg, n;
  size_t got;
  uint8_t steps[3];
  int nsteps, step;
  int status; /* 0 or a uvcuda error */
  CUstream stream;
  uvcuda_future_t fut;
  uv_work_t work;
  unsigned char rep[PROTO_REP_HDR];
  unsigned char sum[4];
  char msg[96];
};

struct conn_s {
  uv_tcp_t tcp;
  qnode_t link;      /* all connections */
  qnode_t wait_link; /* a class's slot waiters */
  qnode_t flush_link;
  qnode_t linger_link;
  qnode_t replies; /* slots ready to be written */
  int wait_cls;
  unsigned pause;
  int reading, finishing, shut, closing, closed, reject;
  int inflight; /* slots it holds */
  slot_t *cur;  /* the request whose payload is being received */
  size_t skip;  /* payload bytes of a refused request still to discard */
  unsigned char *rbuf;
  size_t rlen, rcap;
  uint64_t linger_until;
  uv_shutdown_t sreq;
};

typedef struct {
  uv_write_t req;
  conn_t *conn;
  int n;
  slot_t *slots[];
} wbatch_t;

typedef struct {
  uv_write_t req;
  conn_t *conn;
  unsigned char data[];
} swrite_t;

#define WBATCH_MAX 64
#define RBUF_SIZE (64u << 10)

static struct {
  uv_loop_t *loop;
  uvcuda_loop_t ul;
  int ul_ready;
  uvcuda_stats_t ul_stats; /* taken at close, printed at exit */
  uv_tcp_t listener;
  int listening;
  uv_signal_t sig_int, sig_term;
  uv_check_t check;
  uv_idle_t kick;
  uv_timer_t drain_timer, linger_timer;
  int linger_timer_on;
  qnode_t conns, linger;
  int nactive, nrejecting, nconns;
  qnode_t submit_cont, submit_new, flush;
  qnode_t free_slots[NCLS];
  int nfree[NCLS];
  qnode_t waiters[NCLS];
  int wake_pending;
  slot_t *slots;
  int nslots, busy;
  size_t cls_cap[NCLS];
  int cls_count[NCLS];
  unsigned char *hmem[NCLS];
  CUdeviceptr dmem[NCLS];
  CUdevice dev;
  CUcontext ctx;
  int ctx_retained;
  CUmodule mod;
  CUfunction fn_add, fn_sum, fn_sleep;
  CUstream *streams;
  int nstreams;
  unsigned rr;
  /* --threadpool: streams handed to worker threads */
  uv_mutex_t tp_mu;
  uv_cond_t tp_cv;
  CUstream *tp_free;
  int tp_nfree, tp_ready;
  int draining, forced, torn_down, futures_open;
  uint64_t t_start, t_drain;
  int simulated;
  /* counters */
  uint64_t n_ping, n_gpu, n_err, n_gpu_err, n_rejected, n_accepted;
  uint64_t bytes_in, bytes_out;
  int max_busy, busy_at_signal;
  uint64_t gpu_t0, gpu_idle0, gpu_t1, gpu_idle1; /* first GPU request .. last reply */
  uint64_t answered_after_signal, dropped_after_signal;
} S;

static void conn_parse(conn_t *c);
static void conn_close(conn_t *c);
static void conn_finish(conn_t *c);
static void conn_update_read(conn_t *c);
static void srv_maybe_done(void);
static void slot_reply(slot_t *s);

static void logf_(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("uvcuda-server: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

static void on_kick(uv_idle_t *h) { (void)h; }

/* Keeps the loop from sleeping until the check callback has run. */
static void kick(void) {
  if (!S.torn_down) uv_idle_start(&S.kick, on_kick);
}

/* ---- slots --------------------------------------------------------------- */

static int slot_class_for(size_t n) {
  if (n <= S.cls_cap[CLS_SMALL]) return CLS_SMALL;
  return S.cls_count[CLS_LARGE] > 0 ? CLS_LARGE : -1;
}

static slot_t *slot_get(int cls) {
  qnode_t *n = q_pop(&S.free_slots[cls]);
  slot_t *s;
  if (!n) return NULL;
  S.nfree[cls]--;
  s = CONTAINER(n, slot_t, link);
  s->state = SLOT_FILL;
  S.busy++;
  if (S.gpu_t0 == 0) {
    S.gpu_t0 = uv_hrtime();
    S.gpu_idle0 = uv_metrics_idle_time(S.loop);
  }
  if (S.busy > S.max_busy) S.max_busy = S.busy;
  return s;
}

/* Waiting connections are woken from the check callback, not from here, so
 * that releasing a slot never parses another connection's input
 * recursively. */
static void slot_put(slot_t *s) {
  s->state = SLOT_FREE;
  s->conn = NULL;
  q_push(&S.free_slots[s->cls], &s->link);
  S.nfree[s->cls]++;
  S.busy--;
  if (!q_empty(&S.waiters[s->cls])) {
    S.wake_pending = 1;
    kick();
  }
}

/* ---- connections: lifetime ------------------------------------------------ */

static void conn_maybe_free(conn_t *c) {
  if (!c->closed || c->inflight > 0) return;
  q_remove(&c->link);
  free(c->rbuf);
  free(c);
}

/* A slot of c is no longer needed (its reply was written, or dropped). */
static void conn_slot_done(conn_t *c, slot_t *s) {
  slot_put(s);
  c->inflight--;
  if (c->closed) {
    conn_maybe_free(c);
  } else if (!c->closing) {
    if (c->finishing) {
      if (c->inflight == 0) conn_finish(c); /* now shuts down */
    } else if ((c->pause & P_PIPELINE) && c->inflight < opt.pipeline) {
      c->pause &= ~P_PIPELINE;
      if (!c->pause) conn_parse(c);
    }
  }
  srv_maybe_done();
}

static void on_conn_closed(uv_handle_t *h) {
  conn_t *c = CONTAINER(h, conn_t, tcp);
  c->closed = 1;
  S.nconns--;
  if (c->reject)
    S.nrejecting--;
  else
    S.nactive--;
  conn_maybe_free(c);
  srv_maybe_done();
}

static void conn_unwait(conn_t *c) {
  if (c->wait_cls >= 0) {
    q_remove(&c->wait_link);
    c->wait_cls = -1;
  }
  c->pause &= ~P_SLOT;
}

/* Drops the request whose payload was still arriving (no GPU work yet). */
static void conn_drop_partial(conn_t *c) {
  if (c->cur) {
    slot_t *s = c->cur;
    c->cur = NULL;
    slot_put(s);
    c->inflight--;
  }
  c->skip = 0;
}

/* Immediate close. Slots of c still on the GPU finish there and are freed
 * when their work is done; c itself is freed after that. */
static void conn_close(conn_t *c) {
  qnode_t *n;
  if (c->closing) return;
  c->closing = 1;
  if (c->reading) uv_read_stop((uv_stream_t *)&c->tcp);
  c->reading = 0;
  conn_unwait(c);
  conn_drop_partial(c);
  if (q_linked(&c->flush_link)) q_remove(&c->flush_link);
  if (q_linked(&c->linger_link)) q_remove(&c->linger_link);
  while ((n = q_pop(&c->replies)) != NULL) {
    if (S.draining) S.dropped_after_signal++;
    slot_put(CONTAINER(n, slot_t, link));
    c->inflight--;
  }
  uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

/* Lingering close: after our FIN, read and discard until the peer closes
 * (or --linger-ms), so that unread input does not turn the close into a
 * reset that could destroy the replies just sent. */
static char discard_buf[16384];

static void on_discard_alloc(uv_handle_t *h, size_t sz, uv_buf_t *b) {
  (void)h;
  (void)sz;
  *b = uv_buf_init(discard_buf, sizeof(discard_buf));
}

static void on_discard_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *b) {
  (void)b;
  if (nread < 0) conn_close(CONTAINER(st, conn_t, tcp));
}

static void on_linger_timer(uv_timer_t *t) {
  uint64_t now = uv_now(S.loop);
  qnode_t *n = S.linger.next;
  (void)t;
  while (n != &S.linger) {
    conn_t *c = CONTAINER(n, conn_t, linger_link);
    n = n->next;
    if (now >= c->linger_until || S.forced) conn_close(c);
  }
  if (q_empty(&S.linger)) {
    uv_timer_stop(&S.linger_timer);
    S.linger_timer_on = 0;
  }
}

static void on_shutdown(uv_shutdown_t *req, int status) {
  conn_t *c = CONTAINER(req, conn_t, sreq);
  if (c->closing) return;
  if (status < 0 || opt.linger_ms <= 0 || S.forced ||
      uv_read_start((uv_stream_t *)&c->tcp, on_discard_alloc, on_discard_read)) {
    conn_close(c);
    return;
  }
  c->reading = 1;
  c->linger_until = uv_now(S.loop) + (uint64_t)opt.linger_ms;
  q_push(&S.linger, &c->linger_link);
  if (!S.linger_timer_on) {
    uv_timer_start(&S.linger_timer, on_linger_timer, 50, 50);
    S.linger_timer_on = 1;
  }
}

/* Graceful end: stop reading, drop a partly received request, answer the
 * ones in flight, then shut down (uv_shutdown sends what is queued first). */
static void conn_finish(conn_t *c) {
  if (c->closing) return;
  if (!c->finishing) {
    c->finishing = 1;
    conn_unwait(c);
    conn_drop_partial(c);
    conn_update_read(c);
  }
  if (c->inflight == 0 && !c->shut) {
    c->shut = 1;
    if (uv_shutdown(&c->sreq, (uv_stream_t *)&c->tcp, on_shutdown)) conn_close(c);
  }
}

/* ---- connections: writing ---------------------------------------------- */

static void conn_after_write(conn_t *c) {
  if (c->closing) return;
  if ((c->pause & P_WRITEQ) &&
      uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) <= opt.write_queue_max / 2) {
    c->pause &= ~P_WRITEQ;
    if (!c->pause) conn_parse(c);
  }
}

static void on_swrite(uv_write_t *req, int status) {
  swrite_t *w = CONTAINER(req, swrite_t, req);
  conn_t *c = w->conn;
  free(w);
  if (status < 0)
    conn_close(c);
  else
    conn_after_write(c);
}

/* A reply that does not come from a slot (ping, protocol error): copied. */
static void conn_send_small(conn_t *c, uint8_t status, uint8_t op, uint32_t id,
                            const void *payload, size_t n) {
  swrite_t *w;
  uv_buf_t b;
  if (c->closing) return;
  w = malloc(sizeof(*w) + PROTO_REP_HDR + n);
  if (!w) {
    conn_close(c);
    return;
  }
  w->conn = c;
  proto_rep_header(w->data, status, op, id, (uint32_t)n);
  if (n) memcpy(w->data + PROTO_REP_HDR, payload, n);
  b = uv_buf_init((char *)w->data, (unsigned)(PROTO_REP_HDR + n));
  if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_swrite)) {
    free(w);
    conn_close(c);
    return;
  }
  S.bytes_out += PROTO_REP_HDR + n;
}

static void conn_send_error(conn_t *c, uint8_t status, uint8_t op, uint32_t id,
                            const char *fmt, ...) {
  char msg[160];
  va_list ap;
  int len;
  va_start(ap, fmt);
  len = vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (len < 0) len = 0;
  if ((size_t)len >= sizeof(msg)) len = (int)sizeof(msg) - 1;
  S.n_err++;
  if (opt.verbose) logf_("error reply %s: %s", proto_status_name(status), msg);
  conn_send_small(c, status, op, id, msg, (size_t)len);
}

static void on_wbatch(uv_write_t *req, int status) {
  wbatch_t *w = CONTAINER(req, wbatch_t, req);
  conn_t *c = w->conn;
  int i;
  if (status < 0) conn_close(c);
  for (i = 0; i < w->n; i++) {
    if (S.draining) {
      if (status < 0)
        S.dropped_after_signal++;
      else
        S.answered_after_signal++;
    }
    /* the last one may free c (when it is closed) */
    if (i == w->n - 1 && !c->closed) conn_after_write(c);
    conn_slot_done(c, w->slots[i]);
  }
  free(w);
}

static void reply_payload(slot_t *s, const void **p, size_t *n) {
  *p = NULL;
  *n = 0;
  if (s->status) {
    *p = s->msg;
    *n = strlen(s->msg);
  } else if (s->op == PROTO_OP_CHECKSUM) {
    proto_put_u32(s->sum, *s->h_out);
    *p = s->sum;
    *n = 4;
  } else if (s->op == PROTO_OP_ADD) {
    *p = s->h; /* the words as the GPU left them: little-endian, like x86 */
    *n = s->n;
  }
}

/* Writes every ready reply of c, from the pinned buffers, WBATCH_MAX
 * replies per write request. */
static void conn_flush(conn_t *c) {
  uv_buf_t bufs[2 * WBATCH_MAX];
  while (!q_empty(&c->replies) && !c->closing) {
    wbatch_t *w = malloc(sizeof(*w) + WBATCH_MAX * sizeof(slot_t *));
    unsigned nb = 0;
    size_t bytes = 0;
    if (!w) {
      conn_close(c);
      return;
    }
    w->conn = c;
    w->n = 0;
    while (w->n < WBATCH_MAX && !q_empty(&c->replies)) {
      slot_t *s = CONTAINER(q_pop(&c->replies), slot_t, link);
      const void *p;
      size_t n;
      reply_payload(s, &p, &n);
      proto_rep_header(s->rep, s->status ? PROTO_GPU_ERROR : PROTO_OK, s->op,
                       s->id, (uint32_t)n);
      s->state = SLOT_WRITE;
      w->slots[w->n++] = s;
      bufs[nb++] = uv_buf_init((char *)s->rep, PROTO_REP_HDR);
      if (n) bufs[nb++] = uv_buf_init((char *)(uintptr_t)p, (unsigned)n);
      bytes += PROTO_REP_HDR + n;
    }
    if (uv_write(&w->req, (uv_stream_t *)&c->tcp, bufs, nb, on_wbatch)) {
      int i;
      for (i = 0; i < w->n; i++) {
        w->slots[i]->state = SLOT_REPLY;
        q_push(&c->replies, &w->slots[i]->link);
      }
      free(w);
      conn_close(c);
      return;
    }
    S.bytes_out += bytes;
  }
}

/* ---- GPU work ---------------------------------------------------------- */

static CUresult enqueue_step(slot_t *s, int step, CUstream st) {
  switch (step) {
    case STEP_UPLOAD:
      return cu.cuMemcpyHtoDAsync(s->d, s->h, s->n, st);
    case STEP_KERNEL:
      if (s->op == PROTO_OP_CHECKSUM) {
        void *args[] = {&s->d, &s->n, &s->d_out};
        return cu.cuLaunchKernel(S.fn_sum, 1, 1, 1, 1, 1, 1, 0, st, args, NULL);
      } else if (s->op == PROTO_OP_ADD) {
        uint32_t words = s->n / 4;
        void *args[] = {&s->d, &words, &s->arg};
        return cu.cuLaunchKernel(S.fn_add, (words + 255) / 256, 1, 1, 256, 1, 1, 0,
                               st, args, NULL);
      } else {
        uint64_t ns = (uint64_t)s->arg * 1000u;
        void *args[] = {&ns};
        return cu.cuLaunchKernel(S.fn_sleep, 1, 1, 1, 1, 1, 1, 0, st, args, NULL);
      }
    case STEP_DOWNLOAD:
      if (s->op == PROTO_OP_CHECKSUM) return cu.cuMemcpyDtoHAsync(s->h_out, s->d_out, 4, st);
      return cu.cuMemcpyDtoHAsync(s->h, s->d, s->n, st);
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

static CUresult enqueue_all(slot_t *s, CUstream st) {
  CUresult r = CUDA_SUCCESS;
  int i;
  for (i = 0; i < s->nsteps && r == CUDA_SUCCESS; i++)
    r = enqueue_step(s, s->steps[i], st);
  return r;
}

static void slot_fail(slot_t *s, int err) {
  s->status = err;
  snprintf(s->msg, sizeof(s->msg), "%s: %s", uvcuda_err_name(err),
           uvcuda_strerror(err));
  S.n_gpu_err++;
  if (opt.verbose) logf_("GPU error: %s", s->msg);
}

/* Done with the GPU: queue the reply (written from the check callback). */
static void slot_reply(slot_t *s) {
  conn_t *c = s->conn;
  if (s->status == 0) S.n_gpu++;
  S.gpu_t1 = uv_hrtime();
  S.gpu_idle1 = uv_metrics_idle_time(S.loop);
  if (c->closing) {
    if (S.draining) S.dropped_after_signal++;
    conn_slot_done(c, s);
    return;
  }
  s->state = SLOT_REPLY;
  q_push(&c->replies, &s->link);
  if (!q_linked(&c->flush_link)) q_push(&S.flush, &c->flush_link);
  kick();
}

/* uvcuda mode. The device op enqueues the current step, or every step with
 * --await once. */
static int op_step(uvcuda_future_t *f, uvcuda_stream_t st) {
  slot_t *s = f->data;
  if (opt.await == AWAIT_ONCE) return (int)enqueue_all(s, (CUstream)st);
  return (int)enqueue_step(s, s->steps[s->step], (CUstream)st);
}

static void on_fence(uvcuda_future_t *f, int status) {
  (void)status; /* the request has failed already */
  slot_reply(f->data);
}

static void on_step(uvcuda_future_t *f, int status) {
  slot_t *s = f->data;
  if (status) {
    /* A failed op may have enqueued part of its work (with --await once) and
     * uvcuda does not wait for it: await the stream once more before the
     * buffers are reused. */
    slot_fail(s, status);
    if (uvcuda_future_start(f, s->stream, NULL, on_fence)) slot_reply(s);
    return;
  }
  if (opt.await == AWAIT_STEP && ++s->step < s->nsteps) {
    s->state = SLOT_QUEUED;
    q_push(&S.submit_cont, &s->link); /* next step, from the check callback */
    kick();
    return;
  }
  slot_reply(s);
}

/* --threadpool mode: a libuv worker thread takes a stream from the pool,
 * enqueues the request's work and blocks in cuStreamSynchronize. */
static CUstream tp_take(void) {
  CUstream st;
  uv_mutex_lock(&S.tp_mu);
  while (S.tp_nfree == 0) uv_cond_wait(&S.tp_cv, &S.tp_mu);
  st = S.tp_free[--S.tp_nfree];
  uv_mutex_unlock(&S.tp_mu);
  return st;
}

static void tp_give(CUstream st) {
  uv_mutex_lock(&S.tp_mu);
  S.tp_free[S.tp_nfree++] = st;
  uv_cond_signal(&S.tp_cv);
  uv_mutex_unlock(&S.tp_mu);
}

static void tp_work(uv_work_t *w) {
  slot_t *s = CONTAINER(w, slot_t, work);
  CUstream st = tp_take();
  CUresult r = cu.cuCtxSetCurrent(S.ctx), r2;
  if (r == CUDA_SUCCESS) r = enqueue_all(s, st);
  r2 = cu.cuStreamSynchronize(st); /* also fences a partly enqueued request */
  if (r == CUDA_SUCCESS) r = r2;
  tp_give(st);
  s->status = r == CUDA_SUCCESS ? 0 : UVCUDA_ECUDA(r);
}

static void tp_after(uv_work_t *w, int status) {
  slot_t *s = CONTAINER(w, slot_t, work);
  if (status) s->status = status;
  if (s->status) slot_fail(s, s->status);
  slot_reply(s);
}

static void gpu_start(slot_t *s) {
  int err;
  s->state = SLOT_GPU;
  if (opt.mode == MODE_THREADPOOL) {
    err = uv_queue_work(S.loop, &s->work, tp_work, tp_after);
  } else {
    if (s->step == 0) s->stream = S.streams[S.rr++ % (unsigned)S.nstreams];
    err = uvcuda_future_start(&s->fut, s->stream, op_step, on_step);
  }
  if (err) {
    slot_fail(s, err);
    slot_reply(s);
  }
}

/* Starts at most --batch GPU steps; continuations of started requests go
 * first. */
static void pump(void) {
  int budget = opt.batch;
  while (budget > 0) {
    qnode_t *n = q_pop(&S.submit_cont);
    slot_t *s;
    if (!n) n = q_pop(&S.submit_new);
    if (!n) break;
    s = CONTAINER(n, slot_t, link);
    if (s->conn->closing) { /* nobody to answer; earlier steps are done */
      if (S.draining) S.dropped_after_signal++;
      conn_slot_done(s->conn, s);
      continue;
    }
    budget--;
    gpu_start(s);
  }
}

static void wake_waiters(void) {
  int cls;
  S.wake_pending = 0;
  for (cls = 0; cls < NCLS; cls++) {
    while (S.nfree[cls] > 0 && !q_empty(&S.waiters[cls])) {
      conn_t *c = CONTAINER(q_pop(&S.waiters[cls]), conn_t, wait_link);
      c->wait_cls = -1;
      c->pause &= ~P_SLOT;
      if (!c->pause) conn_parse(c);
    }
  }
}

static void on_check(uv_check_t *h) {
  qnode_t *n;
  (void)h;
  if (S.wake_pending) wake_waiters();
  pump();
  while ((n = q_pop(&S.flush)) != NULL) conn_flush(CONTAINER(n, conn_t, flush_link));
  if (q_empty(&S.submit_cont) && q_empty(&S.submit_new) && q_empty(&S.flush) &&
      !S.wake_pending)
    uv_idle_stop(&S.kick);
}

/* ---- connections: reading and parsing ------------------------------------ */

static void on_alloc(uv_handle_t *h, size_t sz, uv_buf_t *b) {
  conn_t *c = CONTAINER(h, conn_t, tcp);
  (void)sz;
  *b = uv_buf_init((char *)c->rbuf + c->rlen, (unsigned)(c->rcap - c->rlen));
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *b) {
  conn_t *c = CONTAINER(st, conn_t, tcp);
  (void)b;
  if (nread > 0) {
    c->rlen += (size_t)nread;
    S.bytes_in += (uint64_t)nread;
    conn_parse(c);
  } else if (nread == UV_EOF) {
    conn_finish(c); /* answer what was received, then close */
  } else if (nread < 0) {
    conn_close(c);
  }
}

static void conn_update_read(conn_t *c) {
  int want = !c->closing && !c->finishing && !c->reject && c->pause == 0;
  if (want && !c->reading) {
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read)) {
      conn_close(c);
      return;
    }
    c->reading = 1;
  } else if (!want && c->reading && !c->closing) {
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->reading = 0;
  }
}

/* Takes every complete frame out of the read buffer, as far as the limits
 * allow; what is left waits there (reading stops while paused). */
static void conn_parse(conn_t *c) {
  size_t off = 0;
  if (c->closing || c->finishing || c->reject) return;
  if (c->pause) { /* input waits in rbuf until the pause ends */
    conn_update_read(c);
    return;
  }
  while (!c->closing && !c->finishing) {
    const unsigned char *p = c->rbuf + off;
    size_t avail = c->rlen - off, k;
    uint32_t len, id, arg, n;
    uint8_t op;
    int cls;
    slot_t *s;

    if (c->cur) { /* payload of the request being received */
      s = c->cur;
      k = s->n - s->got;
      if (k > avail) k = avail;
      memcpy(s->h + s->got, p, k);
      s->got += k;
      off += k;
      if (s->got < s->n) break;
      c->cur = NULL;
      s->state = SLOT_QUEUED;
      q_push(&S.submit_new, &s->link);
      kick();
      continue;
    }
    if (c->skip) {
      k = c->skip < avail ? c->skip : avail;
      off += k;
      c->skip -= k;
      if (c->skip) break;
      continue;
    }
    if (avail < PROTO_REQ_HDR) break;
    if (c->inflight >= opt.pipeline) {
      c->pause |= P_PIPELINE;
      break;
    }
    if (uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) > opt.write_queue_max) {
      c->pause |= P_WRITEQ;
      break;
    }
    len = proto_get_u32(p);
    op = p[4];
    id = proto_get_u32(p + 8);
    arg = proto_get_u32(p + 12);
    if (len < PROTO_REQ_FIXED) {
      conn_send_error(c, PROTO_MALFORMED, op, id, "frame length %u < %u", len,
                      PROTO_REQ_FIXED);
      conn_finish(c);
      break;
    }
    n = len - PROTO_REQ_FIXED;
    if (n > opt.max_request) {
      conn_send_error(c, PROTO_TOO_LARGE, op, id,
                      "payload of %u bytes > max %zu", n, opt.max_request);
      conn_finish(c);
      break;
    }
    if (p[5] || p[6] || p[7]) {
      conn_send_error(c, PROTO_BAD_REQUEST, op, id, "flags and reserved must be 0");
      off += PROTO_REQ_HDR;
      c->skip = n;
      continue;
    }
    switch (op) {
      case PROTO_OP_PING:
        if (n > PROTO_PING_MAX) {
          conn_send_error(c, PROTO_BAD_REQUEST, op, id, "ping payload %u > %u", n,
                          PROTO_PING_MAX);
          off += PROTO_REQ_HDR;
          c->skip = n;
          continue;
        }
        if (avail < PROTO_REQ_HDR + n) goto out; /* whole ping frames only */
        S.n_ping++;
        conn_send_small(c, PROTO_OK, op, id, p + PROTO_REQ_HDR, n);
        off += PROTO_REQ_HDR + n;
        continue;
      case PROTO_OP_CHECKSUM:
        break;
      case PROTO_OP_ADD:
        if (n % 4) {
          conn_send_error(c, PROTO_BAD_REQUEST, op, id,
                          "add payload of %u bytes is not whole u32 words", n);
          off += PROTO_REQ_HDR;
          c->skip = n;
          continue;
        }
        if (n == 0) { /* nothing to add to */
          conn_send_small(c, PROTO_OK, op, id, NULL, 0);
          off += PROTO_REQ_HDR;
          continue;
        }
        break;
      case PROTO_OP_SLEEP:
        if (n || arg > opt.max_sleep_us) {
          conn_send_error(c, PROTO_BAD_REQUEST, op, id,
                          "sleep takes no payload and at most %u us",
                          opt.max_sleep_us);
          off += PROTO_REQ_HDR;
          c->skip = n;
          continue;
        }
        break;
      default:
        conn_send_error(c, PROTO_BAD_OP, op, id, "unknown op %u", op);
        off += PROTO_REQ_HDR;
        c->skip = n;
        continue;
    }
    cls = slot_class_for(n);
    if (cls < 0) { /* not reached: options make large slots exist */
      conn_send_error(c, PROTO_TOO_LARGE, op, id, "no staging slot that large");
      conn_finish(c);
      break;
    }
    s = slot_get(cls);
    if (!s) { /* backpressure: wait for a slot with the header unread */
      c->pause |= P_SLOT;
      c->wait_cls = cls;
      q_push(&S.waiters[cls], &c->wait_link);
      break;
    }
    s->conn = c;
    s->op = op;
    s->id = id;
    s->arg = arg;
    s->n = n;
    s->got = 0;
    s->status = 0;
    s->msg[0] = '\0';
    s->step = 0;
    s->nsteps = 0;
    if (n > 0) s->steps[s->nsteps++] = STEP_UPLOAD;
    s->steps[s->nsteps++] = STEP_KERNEL;
    if (op != PROTO_OP_SLEEP) s->steps[s->nsteps++] = STEP_DOWNLOAD;
    c->inflight++;
    c->cur = s;
    off += PROTO_REQ_HDR; /* its payload (maybe empty) is taken at the top */
  }
out:
  if (off) {
    memmove(c->rbuf, c->rbuf + off, c->rlen - off);
    c->rlen -= off;
  }
  conn_update_read(c);
}

/* ---- accepting ---------------------------------------------------------- */

static void on_connection(uv_stream_t *l, int status) {
  conn_t *c;
  if (status < 0) {
    logf_("accept: %s", uv_strerror(status));
    return;
  }
  c = calloc(1, sizeof(*c));
  if (!c) {
    logf_("out of memory accepting a connection");
    return;
  }
  q_init(&c->replies);
  c->wait_cls = -1;
  uv_tcp_init(S.loop, &c->tcp);
  q_push(&S.conns, &c->link);
  S.nconns++;
  if (uv_accept(l, (uv_stream_t *)&c->tcp) || S.draining) {
    c->reject = 1;
    S.nrejecting++;
    conn_close(c);
    return;
  }
  if (S.nactive >= opt.max_conns) {
    c->reject = 1;
    S.nrejecting++;
    S.n_rejected++;
    if (S.nrejecting > opt.max_conns) { /* a flood: not even a reply */
      conn_close(c);
      return;
    }
    conn_send_error(c, PROTO_BUSY, 0, 0, "too many connections (max %d)",
                    opt.max_conns);
    conn_finish(c);
    return;
  }
  S.nactive++;
  S.n_accepted++;
  uv_tcp_nodelay(&c->tcp, 1);
  c->rcap = RBUF_SIZE;
  c->rbuf = malloc(c->rcap);
  if (!c->rbuf) {
    conn_close(c);
    return;
  }
  conn_update_read(c);
}

/* ---- shutdown ------------------------------------------------------------ */

static void on_ul_closed(uvcuda_loop_t *ul) {
  (void)ul;
  S.ul_ready = 0;
}

static void close_ul(void) {
  uvcuda_loop_stats(&S.ul, &S.ul_stats);
  uvcuda_loop_close(&S.ul, on_ul_closed);
}

static void on_fut_closed(uvcuda_future_t *f) {
  (void)f;
  if (--S.futures_open == 0) close_ul();
}

/* Every connection is closed and no slot is busy: close our handles; uv_run
 * returns once they are gone, and main frees the CUDA resources. */
static void teardown(void) {
  int i;
  S.torn_down = 1;
  uv_close((uv_handle_t *)&S.drain_timer, NULL);
  uv_close((uv_handle_t *)&S.linger_timer, NULL);
  uv_close((uv_handle_t *)&S.check, NULL);
  uv_close((uv_handle_t *)&S.kick, NULL);
  uv_close((uv_handle_t *)&S.sig_int, NULL);
  uv_close((uv_handle_t *)&S.sig_term, NULL);
  if (S.listening) {
    uv_close((uv_handle_t *)&S.listener, NULL);
    S.listening = 0;
  }
  if (S.ul_ready) {
    S.futures_open = 1;
    for (i = 0; i < S.nslots; i++)
      if (uvcuda_future_close(&S.slots[i].fut, on_fut_closed) == 0) S.futures_open++;
    if (--S.futures_open == 0) close_ul();
  }
}

static void srv_maybe_done(void) {
  if (S.draining && !S.torn_down && S.nconns == 0 && S.busy == 0) teardown();
}

static void on_hard_deadline(uv_timer_t *t) {
  (void)t;
  logf_("GPU work still pending %d ms after the drain timeout: exiting without "
        "cleanup", opt.drain_timeout_ms);
  fflush(NULL);
  _exit(3);
}

/* Drain timeout or a second signal: close every connection now. */
static void force_close(void) {
  qnode_t *n;
  if (S.forced) return;
  S.forced = 1;
  logf_("closing %d connections with %d requests unanswered", S.nconns, S.busy);
  for (n = S.conns.next; n != &S.conns;) {
    conn_t *c = CONTAINER(n, conn_t, link);
    n = n->next;
    conn_close(c);
  }
  uv_timer_start(&S.drain_timer, on_hard_deadline, (uint64_t)opt.drain_timeout_ms, 0);
}

static void on_drain_timeout(uv_timer_t *t) {
  (void)t;
  logf_("drain timeout (%d ms)", opt.drain_timeout_ms);
  force_close();
}

static void on_signal(uv_signal_t *h, int signum) {
  qnode_t *n;
  (void)h;
  if (S.draining) {
    logf_("%s again: not waiting for clients", signum == SIGINT ? "SIGINT" : "SIGTERM");
    force_close();
    return;
  }
  S.draining = 1;
  S.t_drain = uv_hrtime();
  if (S.listening) {
    uv_close((uv_handle_t *)&S.listener, NULL);
    S.listening = 0;
  }
  for (n = S.conns.next; n != &S.conns;) {
    conn_t *c = CONTAINER(n, conn_t, link);
    n = n->next;
    conn_finish(c);
  }
  S.busy_at_signal = S.busy;
  logf_("%s: draining %d requests in flight on %d connections",
        signum == SIGINT ? "SIGINT" : "SIGTERM", S.busy, S.nconns);
  uv_timer_start(&S.drain_timer, on_drain_timeout, (uint64_t)opt.drain_timeout_ms, 0);
  srv_maybe_done();
}

/* ---- setup ---------------------------------------------------------------- */

#define CU(call)                                                           \
  do {                                                                     \
    CUresult r_ = (call);                                                  \
    if (r_ != CUDA_SUCCESS) {                                              \
      logf_("%s: %s", #call, uvcuda_err_name(UVCUDA_ECUDA(r_)));           \
      return -1;                                                           \
    }                                                                      \
  } while (0)

static size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

static int gpu_setup(void) {
  char name[128] = "?";
  int count = 0, i, cls, k = 0;

  CU(cu.cuDeviceGetCount(&count));
  if (opt.device >= count) {
    logf_("--device %d: only %d devices", opt.device, count);
    return -1;
  }
  CU(cu.cuDeviceGet(&S.dev, opt.device));
  cu.cuDeviceGetName(name, sizeof(name), S.dev);
  CU(cu.cuDevicePrimaryCtxRetain(&S.ctx, S.dev));
  S.ctx_retained = 1;
  CU(cu.cuCtxSetCurrent(S.ctx));
  CU(cu.cuModuleLoadData(&S.mod, uvcuda_test_kernels_ptx));
  CU(cu.cuModuleGetFunction(&S.fn_add, S.mod, "uvcuda_add_u32"));
  CU(cu.cuModuleGetFunction(&S.fn_sum, S.mod, "uvcuda_checksum_u8"));
  CU(cu.cuModuleGetFunction(&S.fn_sleep, S.mod, "uvcuda_sleep_ns"));

  S.streams = calloc((size_t)opt.streams, sizeof(CUstream));
  S.tp_free = calloc((size_t)opt.streams, sizeof(CUstream));
  if (!S.streams || !S.tp_free) return -1;
  for (i = 0; i < opt.streams; i++) {
    CU(cu.cuStreamCreate(&S.streams[i], CU_STREAM_NON_BLOCKING));
    S.nstreams++;
    S.tp_free[S.tp_nfree++] = S.streams[i];
  }

  /* Staging: one pinned and one device allocation per size class; a slot
   * holds its payload and, after it, the checksum word. */
  S.cls_cap[CLS_SMALL] = opt.slot_bytes;
  S.cls_count[CLS_SMALL] = opt.slots;
  S.cls_cap[CLS_LARGE] = opt.max_request;
  S.cls_count[CLS_LARGE] = opt.max_request > opt.slot_bytes ? opt.large_slots : 0;
  S.nslots = S.cls_count[CLS_SMALL] + S.cls_count[CLS_LARGE];
  S.slots = calloc((size_t)S.nslots, sizeof(slot_t));
  if (!S.slots) return -1;
  for (cls = 0; cls < NCLS; cls++) {
    size_t stride = round_up(S.cls_cap[cls] + 4, 256);
    void *h = NULL;
    q_init(&S.free_slots[cls]);
    q_init(&S.waiters[cls]);
    if (S.cls_count[cls] == 0) continue;
    CU(cu.cuMemHostAlloc(&h, stride * (size_t)S.cls_count[cls], 0));
    S.hmem[cls] = h;
    CU(cu.cuMemAlloc(&S.dmem[cls], stride * (size_t)S.cls_count[cls]));
    for (i = 0; i < S.cls_count[cls]; i++, k++) {
      slot_t *s = &S.slots[k];
      s->cls = cls;
      s->cap = S.cls_cap[cls];
      s->h = S.hmem[cls] + stride * (size_t)i;
      s->d = S.dmem[cls] + stride * (size_t)i;
      s->h_out = (uint32_t *)(void *)(s->h + round_up(s->cap, 4));
      s->d_out = s->d + round_up(s->cap, 4);
      q_push(&S.free_slots[cls], &s->link);
      S.nfree[cls]++;
    }
  }
  printf("uvcuda-server: %s%s, mode %s, %d streams, %d x %zu B + %d x %zu B "
         "staging slots\n",
         S.simulated ? "SIMULATED CUDA driver (no GPU; timings are not GPU "
                       "numbers): " : "device ", name,
         opt.mode == MODE_THREADPOOL ? "threadpool" :
         opt.await == AWAIT_ONCE ? "uvcuda (await once)" : "uvcuda (await each step)",
         S.nstreams, S.cls_count[CLS_SMALL], S.cls_cap[CLS_SMALL],
         S.cls_count[CLS_LARGE], S.cls_cap[CLS_LARGE]);
  return 0;
}

static void gpu_cleanup(void) {
  int i;
  for (i = 0; i < S.nstreams; i++) {
    cu.cuStreamSynchronize(S.streams[i]);
    cu.cuStreamDestroy(S.streams[i]);
  }
  for (i = 0; i < NCLS; i++) {
    if (S.dmem[i]) cu.cuMemFree(S.dmem[i]);
    if (S.hmem[i]) cu.cuMemFreeHost(S.hmem[i]);
  }
  if (S.mod) cu.cuModuleUnload(S.mod);
  if (S.ctx_retained) cu.cuDevicePrimaryCtxRelease(S.dev);
  free(S.streams);
  free(S.tp_free);
  free(S.slots);
}

static int driver_setup(void) {
  /* Room for an older library's larger struct (bench/ab-server.sh runs
   * this server against the last release's library too). */
  union {
    uvcuda_driver_info_t info;
    char room[256];
  } u;
  uvcuda_driver_info_t *ip = &u.info;
  int err;
  /* No GPU driver installed: use the simulation, and say so. */
  if (getenv("UVCUDA_LIBCUDA") == NULL) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h) dlclose(h);
#ifdef UVCUDA_SIMCUDA_PATH
    else setenv("UVCUDA_LIBCUDA", UVCUDA_SIMCUDA_PATH, 1);
#endif
  }
  if ((err = uvcuda_driver_info(ip)) != 0) {
    logf_("no CUDA driver: %s (%s)", uvcuda_strerror(err),
          uvcuda_driver_dlerror() ? uvcuda_driver_dlerror() : "");
    return -1;
  }
  S.simulated = support_driver_is_simulation();
  if (opt.require_gpu && S.simulated) {
    logf_("--require-gpu: the loaded driver is the simulation (%s)", ip->path);
    return -3;
  }
  return resolve_driver();
}

static int write_port_file(int port) {
  char tmp[4096];
  FILE *f;
  if (!opt.port_file) return 0;
  snprintf(tmp, sizeof(tmp), "%s.tmp", opt.port_file);
  if (!(f = fopen(tmp, "w"))) return -1;
  fprintf(f, "%d\n", port);
  if (fclose(f) != 0) return -1;
  return rename(tmp, opt.port_file);
}

static int listen_setup(void) {
  struct sockaddr_in addr;
  struct sockaddr_storage bound;
  int len = sizeof(bound), err;
  uv_ip4_addr("127.0.0.1", opt.port, &addr);
  uv_tcp_init(S.loop, &S.listener);
  S.listening = 1;
  if ((err = uv_tcp_bind(&S.listener, (const struct sockaddr *)&addr, 0)) ||
      (err = uv_listen((uv_stream_t *)&S.listener, 511, on_connection)) ||
      (err = uv_tcp_getsockname(&S.listener, (struct sockaddr *)&bound, &len))) {
    logf_("127.0.0.1:%d: %s", opt.port, uv_strerror(err));
    return -1;
  }
  opt.port = ntohs(((struct sockaddr_in *)&bound)->sin_port);
  if (write_port_file(opt.port)) {
    logf_("--port-file %s: %s", opt.port_file, strerror(errno));
    return -1;
  }
  printf("uvcuda-server: listening on 127.0.0.1:%d\n", opt.port);
  fflush(stdout);
  return 0;
}

/* ---- options ---------------------------------------------------------------- */

static void usage(FILE *f) {
  fprintf(f,
"usage: uvcuda-server [options]\n"
"  --port N              TCP port on 127.0.0.1 (default %d; 0: any, see --port-file)\n"
"  --port-file PATH      write the bound port there once listening\n"
"  --threadpool          uv_queue_work + cuStreamSynchronize instead of futures\n"
"  --await step|once     uvcuda mode: a future per step (default) or one per request\n"
"  --completion NAME     uvcuda strategy (auto, reactor, hostfn, poll, ...)\n"
"  --max-request BYTES   largest payload (default 1048576)\n"
"  --max-conns N         connections served at once (default 256; more: BUSY)\n"
"  --streams N           CUDA streams in the pool (default 8)\n"
"  --slots N             staging slots of --slot-bytes (default 1024)\n"
"  --slot-bytes BYTES    payload size of a slot (default 65536)\n"
"  --large-slots N       slots of --max-request bytes (default 8)\n"
"  --pipeline N          requests in flight per connection (default 64)\n"
"  --batch N             GPU submissions per loop iteration (default 32)\n"
"  --max-sleep-us N      largest SLEEP request (default 100000)\n"
"  --write-queue BYTES   unsent reply bytes per connection before reading stops\n"
"                        (default 4194304)\n"
"  --drain-timeout-ms N  on SIGINT/SIGTERM wait this long for clients (default 10000)\n"
"  --linger-ms N         after closing, discard input this long (default 1000)\n"
"  --device N            CUDA device (default 0)\n"
"  --require-gpu         refuse to run on the simulated driver\n"
"  --verbose             log error replies\n",
          PROTO_DEFAULT_PORT);
}

static int num(const char *s, unsigned long long lo, unsigned long long hi,
               unsigned long long *out) {
  char *end;
  unsigned long long v;
  errno = 0;
  if (!s || *s == '-' || *s == '\0') return -1;
  v = strtoull(s, &end, 0);
  if (errno || *end || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

static int parse_args(int argc, char **argv) {
  enum {
    O_PORT = 256, O_PORT_FILE, O_TP, O_AWAIT, O_COMPLETION, O_MAXREQ, O_MAXCONN,
    O_STREAMS, O_SLOTS, O_SLOTB, O_LARGE, O_PIPE, O_BATCH, O_SLEEP, O_WQ, O_DRAIN,
    O_LINGER, O_DEVICE, O_REQGPU, O_VERBOSE, O_HELP
  };
  static const struct option lo[] = {
      {"port", 1, 0, O_PORT}, {"port-file", 1, 0, O_PORT_FILE},
      {"threadpool", 0, 0, O_TP}, {"await", 1, 0, O_AWAIT},
      {"completion", 1, 0, O_COMPLETION}, {"max-request", 1, 0, O_MAXREQ},
      {"max-conns", 1, 0, O_MAXCONN}, {"streams", 1, 0, O_STREAMS},
      {"slots", 1, 0, O_SLOTS}, {"slot-bytes", 1, 0, O_SLOTB},
      {"large-slots", 1, 0, O_LARGE}, {"pipeline", 1, 0, O_PIPE},
      {"batch", 1, 0, O_BATCH}, {"max-sleep-us", 1, 0, O_SLEEP},
      {"write-queue", 1, 0, O_WQ}, {"drain-timeout-ms", 1, 0, O_DRAIN},
      {"linger-ms", 1, 0, O_LINGER}, {"device", 1, 0, O_DEVICE},
      {"require-gpu", 0, 0, O_REQGPU}, {"verbose", 0, 0, O_VERBOSE},
      {"help", 0, 0, O_HELP}, {0, 0, 0, 0}};
  int c;
  unsigned long long v = 0;
  while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
    int bad = 0;
    switch (c) {
      case O_PORT: bad = num(optarg, 0, 65535, &v); opt.port = (int)v; break;
      case O_PORT_FILE: opt.port_file = optarg; break;
      case O_TP: opt.mode = MODE_THREADPOOL; break;
      case O_AWAIT:
        if (strcmp(optarg, "step") == 0) opt.await = AWAIT_STEP;
        else if (strcmp(optarg, "once") == 0) opt.await = AWAIT_ONCE;
        else bad = 1;
        break;
      case O_COMPLETION: opt.completion = optarg; break;
      case O_MAXREQ: bad = num(optarg, 4, 1u << 30, &v); opt.max_request = (size_t)v; break;
      case O_MAXCONN: bad = num(optarg, 1, 100000, &v); opt.max_conns = (int)v; break;
      case O_STREAMS: bad = num(optarg, 1, 1024, &v); opt.streams = (int)v; break;
      case O_SLOTS: bad = num(optarg, 1, 1u << 20, &v); opt.slots = (int)v; break;
      case O_SLOTB: bad = num(optarg, 4, 1u << 30, &v); opt.slot_bytes = (size_t)v; break;
      case O_LARGE: bad = num(optarg, 0, 1u << 16, &v); opt.large_slots = (int)v; break;
      case O_PIPE: bad = num(optarg, 1, 1u << 20, &v); opt.pipeline = (int)v; break;
      case O_BATCH: bad = num(optarg, 1, 1u << 20, &v); opt.batch = (int)v; break;
      case O_SLEEP: bad = num(optarg, 0, 10000000, &v); opt.max_sleep_us = (uint32_t)v; break;
      case O_WQ: bad = num(optarg, 4096, 1ull << 32, &v); opt.write_queue_max = (size_t)v; break;
      case O_DRAIN: bad = num(optarg, 1, 3600000, &v); opt.drain_timeout_ms = (int)v; break;
      case O_LINGER: bad = num(optarg, 0, 60000, &v); opt.linger_ms = (int)v; break;
      case O_DEVICE: bad = num(optarg, 0, 1024, &v); opt.device = (int)v; break;
      case O_REQGPU: opt.require_gpu = 1; break;
      case O_VERBOSE: opt.verbose = 1; break;
      case 'h': case O_HELP: usage(stdout); exit(0);
      default: usage(stderr); return -1;
    }
    if (bad) {
      fprintf(stderr, "uvcuda-server: bad value for --%s: %s\n", lo[c - O_PORT].name,
              optarg ? optarg : "");
      return -1;
    }
  }
  if (optind < argc) {
    usage(stderr);
    return -1;
  }
  if (opt.slot_bytes > opt.max_request) opt.slot_bytes = opt.max_request;
  if (opt.max_request > opt.slot_bytes && opt.large_slots == 0) {
    fprintf(stderr, "uvcuda-server: --max-request above --slot-bytes needs "
                    "--large-slots >= 1\n");
    return -1;
  }
  return 0;
}

/* ---- main ------------------------------------------------------------------- */

int main(int argc, char **argv) {
  uvcuda_options_t uo;
  int err, rc;
  double secs, busy, gsecs, gbusy = 0;

  signal(SIGPIPE, SIG_IGN); /* a peer gone mid-write is an error code, not death */
  if (parse_args(argc, argv)) return 2;
  if ((rc = driver_setup()) != 0) return rc == -3 ? 3 : 1;
  S.loop = uv_default_loop();
  uv_loop_configure(S.loop, UV_METRICS_IDLE_TIME);
  q_init(&S.conns);
  q_init(&S.linger);
  q_init(&S.submit_cont);
  q_init(&S.submit_new);
  q_init(&S.flush);
  if (gpu_setup()) {
    gpu_cleanup();
    return 1;
  }
  if (opt.mode == MODE_UVCUDA) {
    int i;
    uvcuda_options_init(&uo);
    if (opt.completion && (err = uvcuda_completion_parse(opt.completion, &uo.completion))) {
      logf_("--completion %s: %s", opt.completion, uvcuda_strerror(err));
      gpu_cleanup();
      return 2;
    }
    if ((err = uvcuda_loop_init(S.loop, &S.ul, &uo)) != 0) {
      logf_("uvcuda_loop_init: %s (%s)", uvcuda_err_name(err), uvcuda_strerror(err));
      gpu_cleanup();
      return 1;
    }
    S.ul_ready = 1;
    for (i = 0; i < S.nslots; i++) {
      uvcuda_future_init(&S.ul, &S.slots[i].fut);
      S.slots[i].fut.data = &S.slots[i];
    }
    printf("uvcuda-server: completion %s, spin budget %.0f us\n",
           uvcuda_completion_name(uvcuda_loop_completion(&S.ul)),
           (double)uvcuda_loop_spin_budget_ns(&S.ul) / 1e3);
  } else {
    uv_mutex_init(&S.tp_mu);
    uv_cond_init(&S.tp_cv);
    S.tp_ready = 1;
  }
  uv_check_init(S.loop, &S.check);
  uv_check_start(&S.check, on_check);
  uv_unref((uv_handle_t *)&S.check);
  uv_idle_init(S.loop, &S.kick);
  uv_timer_init(S.loop, &S.drain_timer);
  uv_timer_init(S.loop, &S.linger_timer);
  uv_signal_init(S.loop, &S.sig_int);
  uv_signal_init(S.loop, &S.sig_term);
  uv_signal_start(&S.sig_int, on_signal, SIGINT);
  uv_signal_start(&S.sig_term, on_signal, SIGTERM);
  S.t_start = uv_hrtime();
  if (listen_setup()) {
    S.draining = 1;
    teardown();
    uv_run(S.loop, UV_RUN_DEFAULT);
    uv_loop_close(S.loop);
    gpu_cleanup();
    return 1;
  }

  uv_run(S.loop, UV_RUN_DEFAULT);

  secs = (double)(uv_hrtime() - S.t_start) / 1e9;
  busy = secs > 0 ? 100.0 * (1.0 - (double)uv_metrics_idle_time(S.loop) / 1e9 / secs) : 0;
  gsecs = (double)(S.gpu_t1 - S.gpu_t0) / 1e9;
  if (S.gpu_t1 > S.gpu_t0)
    gbusy = 100.0 * (1.0 - (double)(S.gpu_idle1 - S.gpu_idle0) / 1e9 / gsecs);
  err = uv_loop_close(S.loop);
  if (err) logf_("uv_loop_close: %s", uv_strerror(err));
  if (S.tp_ready) {
    uv_cond_destroy(&S.tp_cv);
    uv_mutex_destroy(&S.tp_mu);
  }
  gpu_cleanup();
  fprintf(stderr,
          "uvcuda-server: served %llu GPU requests and %llu pings; %llu error "
          "replies (%llu GPU errors); %llu connections, %llu refused (BUSY); "
          "at most %d slots busy; loop busy %.1f%% of %.2f s, busy under load "
          "%.1f%% (first GPU request to last reply, %.2f s)\n",
          (unsigned long long)S.n_gpu, (unsigned long long)S.n_ping,
          (unsigned long long)S.n_err + S.n_gpu_err, (unsigned long long)S.n_gpu_err,
          (unsigned long long)S.n_accepted, (unsigned long long)S.n_rejected,
          S.max_busy, busy, secs, gbusy, S.gpu_t1 > S.gpu_t0 ? gsecs : 0.0);
  fprintf(stderr,
          "uvcuda-server: drain: %d requests in flight at the signal, %llu "
          "answered, %llu dropped (connection gone)%s; took %.1f ms\n",
          S.busy_at_signal, (unsigned long long)S.answered_after_signal,
          (unsigned long long)S.dropped_after_signal,
          S.forced ? ", connections forced closed" : "",
          S.t_drain ? (double)(uv_hrtime() - S.t_drain) / 1e6 : 0.0);
  if (S.ul_stats.started > 0)
    fprintf(stderr,
            "uvcuda-server: futures: %llu started, %llu seen spinning, %llu by "
            "the reactor, %llu by host functions, %llu by polling; %llu "
            "reactor wakeups; "
            "adaptive: %llu predicted (%llu hit, %llu early, %llu late), %llu "
            "pre-wakes; %.1f ms spinning; reactor CPU %.1f ms, %llu polls, "
            "%llu sleeps\n",
            (unsigned long long)S.ul_stats.started,
            (unsigned long long)S.ul_stats.completed_spin,
            (unsigned long long)S.ul_stats.completed_reactor,
            (unsigned long long)S.ul_stats.completed_hostfn,
            (unsigned long long)S.ul_stats.completed_poll,
            (unsigned long long)S.ul_stats.reactor_wakeups,
            (unsigned long long)S.ul_stats.predicted,
            (unsigned long long)S.ul_stats.predict_hit,
            (unsigned long long)S.ul_stats.predict_early,
            (unsigned long long)S.ul_stats.predict_late,
            (unsigned long long)S.ul_stats.prewakes,
            (double)S.ul_stats.spin_ns / 1e6,
            (double)S.ul_stats.reactor_cpu_ns / 1e6,
            (unsigned long long)S.ul_stats.reactor_polls,
            (unsigned long long)S.ul_stats.reactor_sleeps);
  return S.forced || err ? 1 : 0;
}
