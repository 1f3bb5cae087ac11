/* LoopContext: one uvcuda loop context per asyncio loop, and the awaits it
 * runs.
 *
 * The uv_loop_t is uvloop's own (a capsule from
 * uvloop.loop.libuv_get_loop_t_ptr) or a private one that the package's
 * Python part drives from the asyncio loop ("embedded": add_reader on its
 * backend fd, run_nowait() when it is readable or the loop has work due).
 *
 * An await is a `struct req`: a uvcuda future, the asyncio future it
 * settles, and what it keeps alive (the op and its result, the stream
 * object, the ops enqueue_* ran). `waits` counts the C completions it
 * still needs: its own callback, and its drain's where it has one. It is
 * settled, and lets go of what it keeps, when that reaches 0.
 *
 * A drain is a second future with no op on the same stream, started
 * right after (its marker follows the await's work): its callback says the
 * GPU is done with what the await enqueued when the await itself cannot
 * say it:
 *  - its op raised: uvcuda calls back at once, without a marker, while
 *    what the op enqueued before raising may still run;
 *  - it was cancelled: its future is closed (uvcuda_future_close), and its
 *    UVCUDA_ECANCELED callback comes without waiting for the GPU.
 * An await with nothing to keep (no op, no held objects) needs none.
 *
 * Futures are reused (IDLE after their callback) from a free list.
 *
 * Shutdown (before the asyncio loop closes): every future is closed; the
 * GPU work that awaits still keep objects for is waited for
 * (cuStreamSynchronize, GIL released), then they let go; once the last
 * future's close_cb ran, the loop context is closed, and its close_cb
 * calls the package's callback. */
#include "ext.h"

#include <stdlib.h>
#include <string.h>

#include "queue.h" /* uvcuda's lib/queue.h: its one list type */

#define IDLE_MAX 256

_Thread_local struct req *cur_req;

struct ctxobj;

typedef struct pendobj {
  PyObject_HEAD
  struct req *req;
} pendobj;

struct req {
  uvcuda_future_t fut; /* fut.data == this */
  struct ctxobj *ctx;
  struct uvcuda__queue node; /* on ctx->live or ctx->idle */
  struct req *parent;        /* a drain: the await it drains for */
  pendobj *pend;             /* an await: its Pending, until settled */
  PyObject *fut_py;          /* an await: the asyncio future, until settled */
  PyObject *op, *stream_obj, *result, *exc, *keep;
  CUstream stream;
  CUcontext cuctx; /* a default-stream handle: the context to make current */
  int waits;
  int status, drain_status;
  unsigned char is_drain, active, closing, closed, op_failed, done;
};

typedef struct ctxobj {
  PyObject_HEAD
  uvcuda_loop_t ul;
  uv_loop_t *uv;   /* the loop uvcuda runs on */
  uv_loop_t *priv; /* ours (embedded), else NULL */
  unsigned long thread;
  int inited;   /* uvcuda_loop_init done, its close_cb not yet run */
  int closing;  /* shutdown() began */
  int closed;   /* the loop context's close_cb ran */
  int pump_due; /* embedded: a pump is scheduled */
  int nidle, nfut, nlive;
  struct uvcuda__queue live; /* requests in use, or closing */
  struct uvcuda__queue idle; /* IDLE futures for reuse */
  PyObject *loop;
  PyObject *call_soon, *pump; /* embedded: loop.call_soon and the pump */
  PyObject *on_closed;
  uint64_t awaited, resolved, rejected, cancelled;
  int64_t pending; /* awaits not yet settled or cancelled */
} ctxobj;

static PyTypeObject *CtxType, *PendingType;
static PyObject *s_done, *s_set_result, *s_set_exception, *s_cancel,
    *s_is_closed;

CUstream req_stream(const struct req *r) { return r->stream; }

int req_keep(struct req *r, PyObject *obj) {
  if (r->keep == NULL && (r->keep = PyList_New(0)) == NULL) return -1;
  return PyList_Append(r->keep, obj);
}

/* ---- requests ---------------------------------------------------------- */

static void on_done(uvcuda_future_t *f, int status);
static void on_closed(uvcuda_future_t *f);
static void loop_close(ctxobj *c);

/* An IDLE future of c from the free list, or a new one: in c->live. */
static struct req *req_get(ctxobj *c) {
  struct req *r;
  int err;
  if (!uvcuda__queue_empty(&c->idle)) {
    r = uvcuda__queue_data(uvcuda__queue_head(&c->idle), struct req, node);
    uvcuda__queue_remove(&r->node);
    c->nidle--;
  } else {
    if ((r = calloc(1, sizeof(*r))) == NULL) {
      PyErr_NoMemory();
      return NULL;
    }
    r->ctx = c;
    r->fut.data = r;
    uvcuda__queue_init(&r->node);
    if ((err = uvcuda_future_init(&c->ul, &r->fut)) != 0) {
      free(r);
      raise_uv(err, "uvcuda_future_init");
      return NULL;
    }
    c->nfut++;
  }
  uvcuda__queue_insert_tail(&c->live, &r->node);
  c->nlive++;
  return r;
}

static void req_free(struct req *r) {
  uvcuda__queue_remove(&r->node);
  r->ctx->nlive--;
  free(r);
}

/* r's future is IDLE (its callback ran) and r holds nothing: back to the
 * free list, or closed. A closed one is freed once its close_cb ran. */
static void req_recycle(struct req *r) {
  ctxobj *c = r->ctx;
  if (r->closing) {
    if (r->closed) req_free(r);
    return;
  }
  if (!c->closing && c->nidle < IDLE_MAX) {
    uvcuda__queue_remove(&r->node);
    c->nlive--;
    r->parent = NULL;
    r->pend = NULL;
    r->cuctx = NULL;
    r->waits = r->status = r->drain_status = 0;
    r->is_drain = r->active = r->op_failed = r->done = 0;
    uvcuda__queue_insert_tail(&c->idle, &r->node);
    c->nidle++;
    return;
  }
  r->closing = 1;
  uvcuda_future_close(&r->fut, on_closed);
}

/* Waits for the work on r's stream (a drain could not be started). */
static void sync_wait(struct req *r) {
  CUcontext prev = NULL;
  int pushed;
  Py_BEGIN_ALLOW_THREADS
  pushed = r->cuctx != NULL && ctx_push(r->cuctx, &prev) == CUDA_SUCCESS;
  cu.cuStreamSynchronize(r->stream); /* an error: done too */
  if (pushed) ctx_pop(r->cuctx, prev);
  Py_END_ALLOW_THREADS
}

/* A drain for await p (see the top). Without one, waits here. */
static void start_drain(struct req *p) {
  ctxobj *c = p->ctx;
  CUcontext prev = NULL;
  struct req *d;
  int err;
  if (c->closing || (d = req_get(c)) == NULL) {
    PyErr_Clear();
    sync_wait(p);
    return;
  }
  d->is_drain = 1;
  d->parent = p;
  d->stream = p->stream;
  d->cuctx = p->cuctx;
  if (d->cuctx != NULL && ctx_push(d->cuctx, &prev) != CUDA_SUCCESS) {
    req_recycle(d);
    sync_wait(p);
    return;
  }
  err = uvcuda_future_start(&d->fut, (uvcuda_stream_t)p->stream, NULL, on_done);
  if (d->cuctx != NULL) ctx_pop(d->cuctx, prev);
  if (err != 0) {
    req_recycle(d);
    sync_wait(p);
    return;
  }
  d->active = 1;
  p->waits++;
}

/* The asyncio loop is closed: a future of it can't be settled any more. */
static int loop_is_closed(ctxobj *c) {
  PyObject *v = PyObject_CallMethodObjArgs(c->loop, s_is_closed, NULL);
  int closed = v == NULL || PyObject_IsTrue(v) == 1;
  Py_XDECREF(v);
  PyErr_Clear();
  return closed;
}

static void settle(ctxobj *c, PyObject *fut, PyObject *result, PyObject *exc,
                   int status) {
  PyObject *v, *ret = NULL;
  if ((v = PyObject_CallMethodObjArgs(fut, s_done, NULL)) == NULL) goto fail;
  if (PyObject_IsTrue(v) == 1) { /* cancelled by a path we did not see */
    Py_DECREF(v);
    return;
  }
  Py_DECREF(v);
  if (exc != NULL) {
    c->rejected++;
    ret = PyObject_CallMethodObjArgs(fut, s_set_exception, exc, NULL);
  } else if (status == 0) {
    c->resolved++;
    ret = PyObject_CallMethodObjArgs(fut, s_set_result,
                                     result != NULL ? result : Py_None, NULL);
  } else {
    PyObject *e = make_error(status, NULL);
    c->rejected++;
    if (e == NULL) goto fail;
    ret = PyObject_CallMethodObjArgs(fut, s_set_exception, e, NULL);
    Py_DECREF(e);
  }
  if (ret != NULL) {
    Py_DECREF(ret);
    return;
  }
fail:
  if (loop_is_closed(c)) { /* closed behind our back */
    PyErr_Clear();
    return;
  }
  PyErr_WriteUnraisable(fut);
  /* Nobody may wait for it forever: cancelled instead. */
  if ((ret = PyObject_CallMethodObjArgs(fut, s_cancel, NULL)) == NULL)
    PyErr_WriteUnraisable(fut);
  Py_XDECREF(ret);
}

/* Every completion of await r is in: settle its future, let go of what it
 * keeps (after r is consistent again: letting go runs Python code, which
 * may start or cancel awaits). */
static void finalize(struct req *r) {
  ctxobj *c = r->ctx;
  PyObject *fut = r->fut_py, *op = r->op, *stream_obj = r->stream_obj,
           *result = r->result, *exc = r->exc, *keep = r->keep;
  int status = r->status, op_failed = r->op_failed;
  /* The work ran to its end: copies from the device land in their
   * buffers, before anyone is told. */
  int ran = fut != NULL && (op_failed ? r->drain_status == 0 : status == 0);
  r->fut_py = r->op = r->stream_obj = r->result = r->exc = r->keep = NULL;
  if (r->pend != NULL) {
    r->pend->req = NULL;
    r->pend = NULL;
  }
  r->done = 1;
  req_recycle(r); /* r may be gone from here */
  if (ran) {
    if (op != NULL) op_finish(op);
    if (keep != NULL) {
      Py_ssize_t i;
      for (i = 0; i < PyList_Size(keep); i++)
        op_finish(PyList_GetItem(keep, i));
    }
  }
  if (fut != NULL) {
    c->pending--;
    settle(c, fut, result, op_failed ? exc : NULL, status);
  }
  if (stream_obj != NULL && PyObject_TypeCheck(stream_obj, StreamType))
    res_unuse((res_t *)stream_obj);
  if (keep != NULL) res_unuse_list(keep);
  Py_XDECREF(fut);
  Py_XDECREF(op);
  Py_XDECREF(stream_obj);
  Py_XDECREF(result);
  Py_XDECREF(exc);
  Py_XDECREF(keep);
}

static void on_done(uvcuda_future_t *f, int status) {
  struct req *r = f->data, *p;
  ctxobj *c = r->ctx;
  PyGILState_STATE g = PyGILState_Ensure();
  /* What runs below may let go of the last reference. */
  Py_INCREF((PyObject *)c);
  r->active = 0;
  r->status = status;
  if (r->is_drain) {
    p = r->parent;
    r->parent = NULL;
    req_recycle(r);
    if (p != NULL) p->drain_status = status;
    if (p != NULL && --p->waits == 0 && !p->done) finalize(p);
  } else if (--r->waits == 0 && !r->done) {
    finalize(r);
  }
  Py_DECREF((PyObject *)c);
  PyGILState_Release(g);
}

static void on_closed(uvcuda_future_t *f) {
  struct req *r = f->data;
  ctxobj *c = r->ctx;
  PyGILState_STATE g = PyGILState_Ensure();
  r->closed = 1;
  c->nfut--;
  /* A cancelled await may still wait for its drain: finalize frees it. */
  if (r->done || r->is_drain || r->waits == 0) req_free(r);
  if (c->closing && c->nfut == 0) loop_close(c);
  PyGILState_Release(g);
}

/* The op of an await, inside uvcuda_future_start: its Python callable. */
static int op_cb(uvcuda_future_t *f, uvcuda_stream_t s) {
  struct req *r = f->data;
  PyObject *type, *value, *tb;
  (void)s;
  if ((r->result = PyObject_CallNoArgs(r->op)) != NULL) return 0;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  if (value != NULL && tb != NULL) PyException_SetTraceback(value, tb);
  Py_XDECREF(type);
  Py_XDECREF(tb);
  /* asyncio refuses StopIteration as a future's exception (it would end
   * the awaiting generator): a RuntimeError from it, as a Task makes. */
  if (value != NULL &&
      PyErr_GivenExceptionMatches(value, PyExc_StopIteration)) {
    PyObject *e = PyObject_CallFunction(PyExc_RuntimeError, "s",
                                        "an op raised StopIteration");
    if (e != NULL) {
      PyException_SetCause(e, value); /* steals value */
      PyException_SetContext(e, Py_NewRef(value));
      value = e;
    } else {
      PyErr_Clear();
    }
  }
  r->exc = value != NULL ? value : Py_NewRef(PyExc_RuntimeError);
  r->op_failed = 1;
  return UVCUDA_EINVAL;
}

/* ---- the embedded loop --------------------------------------------------- */

/* A pump soon, unless one is due (embedded mode): after a start or a
 * cancellation, the private loop has work (the spin) before its fd says so. */
static void kick(ctxobj *c) {
  PyObject *v;
  if (c->priv == NULL || c->pump_due || c->call_soon == NULL) return;
  c->pump_due = 1;
  if ((v = PyObject_CallFunctionObjArgs(c->call_soon, c->pump, NULL)) != NULL) {
    Py_DECREF(v);
    return;
  }
  c->pump_due = 0;
  if (loop_is_closed(c))
    PyErr_Clear();
  else
    PyErr_WriteUnraisable(c->pump);
}

/* ---- Pending ------------------------------------------------------------- */

/* Pending.cancel(): the asyncio future was cancelled (the package's future
 * class calls this from its cancel()). Closes the C future at once; what
 * the await keeps stays until the GPU is done with it (its drain). Inside
 * an op (uvcuda's futures may not be closed or started there), the await
 * goes on, only its future is let go. */
static PyObject *pend_cancel(pendobj *p, PyObject *unused) {
  struct req *r = p->req;
  ctxobj *c;
  PyObject *fut;
  (void)unused;
  if (r == NULL) Py_RETURN_FALSE;
  c = r->ctx;
  if (PyThread_get_thread_ident() != c->thread) {
    PyErr_SetString(PyExc_RuntimeError,
                    "uvcuda: an await is cancelled on its loop's thread only");
    return NULL;
  }
  p->req = NULL;
  r->pend = NULL;
  fut = r->fut_py;
  r->fut_py = NULL;
  c->pending--;
  c->cancelled++;
  if (r->active && !r->closing && !r->op_failed && cur_req == NULL) {
    r->closing = 1;
    uvcuda_future_close(&r->fut, on_closed); /* its ECANCELED callback next */
    if (r->op != NULL || r->keep != NULL) start_drain(r);
    kick(c);
  }
  Py_XDECREF(fut);
  Py_RETURN_TRUE;
}

static void pend_dealloc(pendobj *p) {
  PyTypeObject *tp = Py_TYPE((PyObject *)p);
  if (p->req != NULL) p->req->pend = NULL;
  PyObject_Free(p);
  Py_DECREF(tp);
}

static PyMethodDef pend_methods[] = {
    {"cancel", (PyCFunction)pend_cancel, METH_NOARGS,
     "cancel() -> bool: the await's future was cancelled: stop waiting"},
    {NULL, NULL, 0, NULL}};

static PyType_Slot pend_slots[] = {
    {Py_tp_dealloc, pend_dealloc},
    {Py_tp_methods, pend_methods},
    {Py_tp_doc, "An await in flight (internal)."},
    {0, NULL}};

static PyType_Spec pend_spec = {"uvcuda._uvcuda.Pending", sizeof(pendobj), 0,
                                Py_TPFLAGS_DEFAULT, pend_slots};

/* ---- LoopContext --------------------------------------------------------- */

static int check_thread(ctxobj *c) {
  if (PyThread_get_thread_ident() == c->thread) return 0;
  PyErr_SetString(PyExc_RuntimeError,
                  "uvcuda: this loop's uvcuda context belongs to another "
                  "thread (the one that first awaited on it)");
  return -1;
}

static int check_open(ctxobj *c) {
  if (check_thread(c) != 0) return -1;
  if (!c->inited || c->closing) {
    PyErr_SetString(PyExc_RuntimeError,
                    "uvcuda: the loop's uvcuda context is closed");
    return -1;
  }
  return 0;
}

static int opt_int(PyObject *v, const char *what, long lo, long hi,
                   int32_t *out) {
  long x;
  if (v == Py_None) return 0;
  if (PyBool_Check(v) || !PyLong_Check(v)) {
    PyErr_Format(PyExc_TypeError, "%s must be an int or None", what);
    return -1;
  }
  x = PyLong_AsLong(v);
  if (x == -1 && PyErr_Occurred()) return -1;
  if (x < lo || x > hi) {
    PyErr_Format(PyExc_ValueError, "%s must be in %ld..%ld, got %ld", what, lo,
                 hi, x);
    return -1;
  }
  *out = (int32_t)x;
  return 0;
}

static PyObject *ctx_new(PyTypeObject *tp, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"loop",
                           "uv_loop",
                           "completion",
                           "spin_budget_us",
                           "adaptive",
                           "latency_histogram",
                           "timing",
                           "probe_interval_us",
                           "reactor_spin_us",
                           "reactor_yield_us",
                           "reactor_sleep_max_us",
                           "reactor_backoff_pct",
                           NULL};
  PyObject *loop, *cap = Py_None, *spin = Py_None, *adaptive = Py_None,
                  *probe = Py_None, *rspin = Py_None, *ryield = Py_None,
                  *rsleep = Py_None, *rpct = Py_None;
  const char *completion = NULL;
  int hist = 0, timing = 0, err;
  uvcuda_options_t opts;
  uv_loop_t *uv;
  ctxobj *c;

  if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O$zOOppOOOOO", kwlist, &loop,
                                   &cap, &completion, &spin, &adaptive, &hist,
                                   &timing, &probe, &rspin, &ryield, &rsleep,
                                   &rpct))
    return NULL;
  uvcuda_options_init(&opts);
  if (completion != NULL &&
      (err = uvcuda_completion_parse(completion, &opts.completion)) != 0) {
    PyErr_Format(PyExc_ValueError,
                 "completion must be one of 'auto', 'reactor', 'hostfn', "
                 "'hostfn-spin', 'hostfn-block', 'poll', 'default'; got '%s'",
                 completion);
    return NULL;
  }
  /* uvcuda's own ranges (docs/api.md, "Options"). */
  if (opt_int(spin, "spin_budget_us", 0, 1000000, &opts.spin_budget_us) != 0 ||
      opt_int(probe, "probe_interval_us", 50, 2000, &opts.probe_interval_us) !=
          0 ||
      opt_int(rspin, "reactor_spin_us", 0, 1000000, &opts.reactor_spin_us) !=
          0 ||
      opt_int(ryield, "reactor_yield_us", 0, 10000000,
              &opts.reactor_yield_us) != 0 ||
      opt_int(rsleep, "reactor_sleep_max_us", 1, 100000,
              &opts.reactor_sleep_max_us) != 0 ||
      opt_int(rpct, "reactor_backoff_pct", 1, 100, &opts.reactor_backoff_pct) !=
          0)
    return NULL;
  if (adaptive != Py_None) {
    int on = PyObject_IsTrue(adaptive);
    if (on < 0) return NULL;
    opts.flags |= on ? UVCUDA_OPT_ADAPTIVE : UVCUDA_OPT_NO_ADAPTIVE;
  }
  if (hist) opts.flags |= UVCUDA_OPT_LATENCY_HISTOGRAM;
  if (timing) opts.flags |= UVCUDA_OPT_TIMING;
  if (need_driver() != 0) return NULL;

  if (cap != Py_None) {
    if ((uv = PyCapsule_GetPointer(cap, NULL)) == NULL) return NULL;
    /* uvloop's uv_loop_t points back at its Loop. */
    if (uv->data != (void *)loop) {
      PyErr_SetString(PyExc_ValueError,
                      "uv_loop is not this loop's uv_loop_t (its data does "
                      "not point at the loop)");
      return NULL;
    }
  } else {
    if ((uv = malloc(sizeof(*uv))) == NULL) return PyErr_NoMemory();
    if ((err = uv_loop_init(uv)) != 0) {
      free(uv);
      return raise_uv(err, "uv_loop_init");
    }
  }
  if ((c = (ctxobj *)PyType_GenericAlloc(tp, 0)) == NULL) goto fail;
  c->uv = uv;
  c->priv = cap == Py_None ? uv : NULL;
  c->thread = PyThread_get_thread_ident();
  c->loop = Py_NewRef(loop);
  uvcuda__queue_init(&c->live);
  uvcuda__queue_init(&c->idle);
  if ((err = uvcuda_loop_init(uv, &c->ul, &opts)) != 0) {
    c->priv = NULL; /* closed below */
    Py_DECREF((PyObject *)c);
    raise_uv(err, "uvcuda_loop_init");
    goto fail_quiet;
  }
  c->inited = 1;
  /* uvcuda points at c->ul until the loop context's close_cb. */
  Py_INCREF((PyObject *)c);
  return (PyObject *)c;

fail:
  PyErr_NoMemory();
fail_quiet:
  if (cap == Py_None) {
    uv_loop_close(uv);
    free(uv);
  }
  return NULL;
}

static void ctx_dealloc(ctxobj *c) {
  PyTypeObject *tp = Py_TYPE((PyObject *)c);
  /* Only once closed (a live one holds a reference to itself). */
  if (c->priv != NULL && uv_loop_close(c->priv) == 0) free(c->priv);
  Py_XDECREF(c->loop);
  Py_XDECREF(c->call_soon);
  Py_XDECREF(c->pump);
  Py_XDECREF(c->on_closed);
  PyObject_Free(c);
  Py_DECREF(tp);
}

/* start(stream, op, future, device) -> Pending */
static PyObject *ctx_start(ctxobj *c, PyObject *args) {
  PyObject *stream_obj, *op, *fut;
  int device, hint = -1, err;
  CUstream h;
  CUcontext cuctx = NULL, prev = NULL;
  CUresult r;
  stream_t *ours = NULL;
  struct dev *d = NULL;
  struct req *rq, *outer;
  pendobj *p;
  PyObject *etype = NULL, *evalue = NULL, *etb = NULL;

  if (!PyArg_ParseTuple(args, "OOOi", &stream_obj, &op, &fut, &device))
    return NULL;
  if (check_open(c) != 0) return NULL;
  if (cur_req != NULL) {
    PyErr_SetString(PyExc_RuntimeError,
                    "uvcuda: an op must not await (ready() inside an op)");
    return NULL;
  }
  if (op != Py_None && !PyCallable_Check(op)) {
    PyErr_Format(PyExc_TypeError, "op must be callable or None, got %R", op);
    return NULL;
  }
  if (stream_resolve(stream_obj, &h, &ours, &hint) != 0) return NULL;
  if (ours != NULL && res_check(&ours->h) != 0) return NULL;
  if (device >= 0 && (d = dev_open(device)) == NULL) return NULL;
  if (d == NULL && ours != NULL) d = ours->h.dev;
  if ((uintptr_t)h <= 2) {
    /* NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD: the stream of the
     * current context, or of the device's primary one where named. */
    if (d == NULL && hint >= 0 && (d = dev_open(hint)) == NULL) return NULL;
    if (d != NULL) cuctx = d->ctx;
  } else if (device >= 0) {
    CUcontext sctx = NULL;
    if ((r = cu.cuStreamGetCtx(h, &sctx)) != CUDA_SUCCESS)
      return raise_cu(r, "cuStreamGetCtx");
    if (sctx != d->ctx) {
      PyErr_Format(PyExc_ValueError,
                   "stream %p is not a stream of device %d's primary context",
                   (void *)h, device);
      return NULL;
    }
  }
  if ((rq = req_get(c)) == NULL) return NULL;
  if ((p = PyObject_New(pendobj, PendingType)) == NULL) {
    req_recycle(rq);
    return NULL;
  }
  p->req = rq;
  rq->pend = p;
  rq->stream = h;
  rq->cuctx = cuctx;
  rq->op = op != Py_None ? Py_NewRef(op) : NULL;
  rq->stream_obj = Py_NewRef(stream_obj);
  rq->fut_py = Py_NewRef(fut);
  rq->waits = 1;
  if (ours != NULL) res_use(&ours->h);

  /* A device this module knows: no start while it is being reset. */
  if (d != NULL && dev_enter(d) != 0) {
    err = 0;
    goto undo;
  }
  if (cuctx != NULL && (r = ctx_push(cuctx, &prev)) != CUDA_SUCCESS) {
    if (d != NULL) dev_leave(d);
    err = UVCUDA_ECUDA(r);
    goto undo;
  }
  outer = cur_req;
  cur_req = rq;
  err = uvcuda_future_start(&rq->fut, (uvcuda_stream_t)h,
                            rq->op != NULL ? op_cb : NULL, on_done);
  cur_req = outer;
  if (cuctx != NULL) ctx_pop(cuctx, prev);
  if (d != NULL) dev_leave(d);
  if (err != 0) goto undo;
  rq->active = 1;
  c->awaited++;
  c->pending++;
  if (rq->op_failed) start_drain(rq); /* the exception waits for it */
  kick(c);
  return (PyObject *)p;

undo: /* misuse: no callback comes */
  if (err == 0) PyErr_Fetch(&etype, &evalue, &etb); /* raised: kept aside */
  p->req = NULL;
  rq->pend = NULL;
  rq->waits = 0;
  Py_DECREF((PyObject *)p);
  {
    PyObject *o = rq->op, *so = rq->stream_obj, *fu = rq->fut_py,
             *res = rq->result, *ex = rq->exc, *keep = rq->keep;
    rq->op = rq->stream_obj = rq->fut_py = rq->result = rq->exc = rq->keep =
        NULL;
    req_recycle(rq);
    if (ours != NULL) res_unuse(&ours->h);
    if (keep != NULL) res_unuse_list(keep);
    Py_XDECREF(o);
    Py_XDECREF(so);
    Py_XDECREF(fu);
    Py_XDECREF(res);
    Py_XDECREF(ex);
    Py_XDECREF(keep);
  }
  if (err == 0) {
    PyErr_Restore(etype, evalue, etb);
    return NULL;
  }
  return raise_uv(err, "uvcuda_future_start");
}

/* set_pump(call_soon, pump): embedded mode's scheduler. */
static PyObject *ctx_set_pump(ctxobj *c, PyObject *args) {
  PyObject *soon, *pump;
  if (!PyArg_ParseTuple(args, "OO", &soon, &pump)) return NULL;
  Py_XDECREF(c->call_soon);
  Py_XDECREF(c->pump);
  c->call_soon = Py_NewRef(soon);
  c->pump = Py_NewRef(pump);
  Py_RETURN_NONE;
}

/* run_nowait() -> int: one pass of the private loop; then
 * uv_backend_timeout in ms (0: run again soon, -1: wait for the fd). */
/* The pending work of the private loop: 0 when it asks for another pass
 * now (uvcuda's spin, a delivery), -1 when it waits for its fd. A loop
 * with nothing ref'd reads 0 from uv_backend_timeout too. */
static int priv_timeout(ctxobj *c) {
  if (c->priv == NULL || !uv_loop_alive(c->priv)) return -1;
  return uv_backend_timeout(c->priv);
}

/* Passes of the private loop, back to back, while uvcuda spins on a
 * future and nothing was settled: an asyncio iteration between two spin
 * passes costs tens of µs where uvloop's costs one, so the spin is run
 * here, within uvcuda's spin budget (plus one pass), as libuv would run
 * it; a settled await returns to asyncio at once. */
static PyObject *ctx_run_nowait(ctxobj *c, PyObject *unused) {
  uint64_t settled, until;
  int timeout;
  (void)unused;
  if (check_thread(c) != 0) return NULL;
  c->pump_due = 0;
  if (c->priv == NULL) return PyLong_FromLong(-1);
  Py_INCREF((PyObject *)c);
  settled = c->resolved + c->rejected;
  until = uv_hrtime() + uvcuda_loop_spin_budget_ns(&c->ul);
  for (;;) {
    uv_run(c->priv, UV_RUN_NOWAIT); /* callbacks take the GIL we hold */
    timeout = priv_timeout(c);
    if (timeout != 0 || !c->inited || c->resolved + c->rejected != settled ||
        PyErr_Occurred() || uv_hrtime() >= until)
      break;
  }
  Py_DECREF((PyObject *)c);
  if (PyErr_Occurred()) return NULL;
  if (timeout == 0 && c->inited) kick(c); /* work due now */
  return PyLong_FromLong(timeout);
}

static PyObject *ctx_fileno(ctxobj *c, PyObject *unused) {
  (void)unused;
  if (c->priv == NULL) {
    PyErr_SetString(PyExc_ValueError, "not an embedded uvcuda loop");
    return NULL;
  }
  return PyLong_FromLong(uv_backend_fd(c->priv));
}

static void on_loop_closed(uvcuda_loop_t *ul) {
  ctxobj *c = (ctxobj *)((char *)ul - offsetof(ctxobj, ul));
  PyGILState_STATE g = PyGILState_Ensure();
  PyObject *cb = c->on_closed, *v;
  c->on_closed = NULL;
  c->inited = 0;
  c->closed = 1;
  /* The pump refers back to c (a cycle the collector can't see). */
  Py_CLEAR(c->call_soon);
  Py_CLEAR(c->pump);
  if (cb != NULL) {
    if ((v = PyObject_CallNoArgs(cb)) == NULL) PyErr_WriteUnraisable(cb);
    Py_XDECREF(v);
    Py_DECREF(cb);
  }
  Py_DECREF((PyObject *)c); /* the reference it held on itself */
  PyGILState_Release(g);
}

static void loop_close(ctxobj *c) {
  int err = uvcuda_loop_close(&c->ul, on_loop_closed);
  if (err != 0) {
    PyObject *e = make_error(err, "uvcuda_loop_close");
    PyErr_WriteUnraisable(e != NULL ? e : Py_None);
    Py_XDECREF(e);
  }
}

/* shutdown(on_closed): see the top. The loop context's close_cb, on a
 * later pass of the loop, calls on_closed(). */
static PyObject *ctx_shutdown(ctxobj *c, PyObject *cb) {
  struct uvcuda__queue *q, *next;
  struct req *r;
  PyObject *cancel = NULL;
  struct sw {
    CUstream s;
    CUcontext ctx;
  } *waits = NULL;
  size_t nw = 0, i, j;
  if (check_thread(c) != 0) return NULL;
  if (!c->inited || c->closing) Py_RETURN_FALSE;
  c->closing = 1;
  Py_XDECREF(c->on_closed);
  c->on_closed = cb != Py_None ? Py_NewRef(cb) : NULL;
  if ((cancel = PyList_New(0)) == NULL) return NULL;
  if (c->nlive > 0 &&
      (waits = calloc((size_t)c->nlive, sizeof(*waits))) == NULL) {
    Py_DECREF(cancel);
    return PyErr_NoMemory();
  }
  /* 1. Close every future in flight; note what must wait for the GPU. */
  uvcuda__queue_foreach(q, &c->live) {
    r = uvcuda__queue_data(q, struct req, node);
    if (r->is_drain) {
      r->parent = NULL; /* its await lets go below */
    } else if (!r->done) {
      if (r->fut_py != NULL) {
        PyList_Append(cancel, r->fut_py);
        Py_CLEAR(r->fut_py);
        c->pending--;
      }
      if (r->pend != NULL) {
        r->pend->req = NULL;
        r->pend = NULL;
      }
      if (r->op != NULL || r->keep != NULL) {
        for (j = 0; j < nw; j++)
          if (waits[j].s == r->stream && waits[j].ctx == r->cuctx) break;
        if (j == nw) {
          waits[nw].s = r->stream;
          waits[nw++].ctx = r->cuctx;
        }
      }
    }
    if (r->active && !r->closing) {
      r->closing = 1;
      uvcuda_future_close(&r->fut, on_closed);
    }
  }
  /* 2. The GPU work they keep objects for. */
  if (nw > 0) {
    Py_BEGIN_ALLOW_THREADS
    for (i = 0; i < nw; i++) {
      CUcontext prev = NULL;
      int pushed =
          waits[i].ctx != NULL && ctx_push(waits[i].ctx, &prev) == CUDA_SUCCESS;
      cu.cuStreamSynchronize(waits[i].s);
      if (pushed) ctx_pop(waits[i].ctx, prev);
    }
    Py_END_ALLOW_THREADS
  }
  free(waits);
  /* 3. Let go (each is closing: freed at its close_cb). */
  for (q = uvcuda__queue_head(&c->live); q != &c->live; q = next) {
    next = q->next;
    r = uvcuda__queue_data(q, struct req, node);
    if (!r->is_drain && !r->done) {
      r->waits = 0;
      finalize(r); /* may free r: `next` was taken first */
    }
  }
  /* 4. The free list. */
  while (!uvcuda__queue_empty(&c->idle)) {
    r = uvcuda__queue_data(uvcuda__queue_head(&c->idle), struct req, node);
    uvcuda__queue_remove(&r->node);
    c->nidle--;
    uvcuda__queue_insert_tail(&c->live, &r->node);
    c->nlive++;
    r->closing = 1;
    uvcuda_future_close(&r->fut, on_closed);
  }
  if (c->nfut == 0) loop_close(c);
  /* 5. The asyncio futures still waiting. */
  for (i = 0; i < (size_t)PyList_Size(cancel); i++) {
    PyObject *v = PyObject_CallMethodObjArgs(
        PyList_GetItem(cancel, (Py_ssize_t)i), s_cancel, NULL);
    if (v == NULL) PyErr_Clear();
    Py_XDECREF(v);
  }
  Py_DECREF(cancel);
  kick(c);
  Py_RETURN_TRUE;
}

/* run_until_closed(): after shutdown(), runs the uv loop itself until the
 * loop context is closed (the private loop, or a uvloop loop that uvloop
 * closed already: only uvcuda's handles are left on it), GIL released,
 * then closes the uv_loop_t. */
static PyObject *ctx_run_until_closed(ctxobj *c, PyObject *unused) {
  int err = 0, spins = 0;
  (void)unused;
  if (check_thread(c) != 0) return NULL;
  Py_INCREF((PyObject *)c);
  while (!c->closed) {
    int alive;
    Py_BEGIN_ALLOW_THREADS
    alive = uv_run(c->uv, UV_RUN_ONCE);
    Py_END_ALLOW_THREADS
    if (!alive && !c->closed && ++spins > 1000) break;
  }
  if (c->closed) err = uv_loop_close(c->uv);
  if (c->closed && err == 0 && c->priv != NULL) {
    free(c->priv);
    c->priv = NULL;
  }
  Py_DECREF((PyObject *)c);
  if (!c->closed) {
    PyErr_SetString(PyExc_RuntimeError,
                    "uvcuda: the loop context did not close");
    return NULL;
  }
  if (err != 0) return raise_uv(err, "uv_loop_close");
  Py_RETURN_NONE;
}

/* foreign_handles() -> int: handles on the uv loop that are not uvcuda's
 * (uvcuda's keep data NULL), not closing. */
static void count_foreign(uv_handle_t *h, void *arg) {
  if (h->data != NULL && !uv_is_closing(h)) ++*(int *)arg;
}

static PyObject *ctx_foreign_handles(ctxobj *c, PyObject *unused) {
  int n = 0;
  (void)unused;
  uv_walk(c->uv, count_foreign, &n);
  return PyLong_FromLong(n);
}

#define STAT(name) \
  if (set_u64(d, #name, s.name) != 0) goto fail;

static int set_u64(PyObject *d, const char *k, uint64_t v) {
  PyObject *o = PyLong_FromUnsignedLongLong(v);
  int rc = o == NULL ? -1 : PyDict_SetItemString(d, k, o);
  Py_XDECREF(o);
  return rc;
}

static PyObject *ctx_stats(ctxobj *c, PyObject *unused) {
  uvcuda_stats_t s;
  PyObject *d, *hist = NULL, *v;
  int err, i;
  (void)unused;
  if (check_thread(c) != 0) return NULL;
  memset(&s, 0, sizeof(s));
  if (c->inited && (err = uvcuda_loop_stats(&c->ul, &s)) != 0)
    return raise_uv(err, "uvcuda_loop_stats");
  if ((d = PyDict_New()) == NULL) return NULL;
  STAT(started)
  STAT(completed_spin) STAT(completed_reactor) STAT(completed_hostfn) STAT(
      completed_poll) STAT(failed) STAT(cancelled) STAT(fallbacks)
      STAT(reactor_wakeups) STAT(hostfn_wakeups) STAT(faults) STAT(
          timelines) STAT(predicted) STAT(predict_hit) STAT(predict_early)
          STAT(predict_late) STAT(prewakes) STAT(
              spin_ns) if (set_u64(d, "awaited", c->awaited) ||
                           set_u64(d, "resolved", c->resolved) ||
                           set_u64(d, "rejected", c->rejected) ||
                           set_u64(d, "awaits_cancelled", c->cancelled) ||
                           set_u64(d, "pending", (uint64_t)c->pending) ||
                           set_u64(d, "requests_live", (uint64_t)c->nlive) ||
                           set_u64(d, "requests_idle", (uint64_t)c->nidle) ||
                           set_u64(d, "futures", (uint64_t)c->nfut)) goto fail;
  if ((hist = PyList_New(UVCUDA_HIST_BUCKETS)) == NULL) goto fail;
  for (i = 0; i < UVCUDA_HIST_BUCKETS; i++) {
    if ((v = PyLong_FromUnsignedLongLong(s.latency_hist[i])) == NULL) goto fail;
    PyList_SetItem(hist, i, v);
  }
  if (PyDict_SetItemString(d, "latency_hist", hist) != 0) goto fail;
  Py_DECREF(hist);
  v = PyUnicode_FromString(
      c->inited ? uvcuda_completion_name(uvcuda_loop_completion(&c->ul))
                : "closed");
  if (v == NULL || PyDict_SetItemString(d, "completion", v) != 0) {
    Py_XDECREF(v);
    goto fail;
  }
  Py_DECREF(v);
  if (set_u64(d, "spin_budget_ns", uvcuda_loop_spin_budget_ns(&c->ul)) != 0 ||
      PyDict_SetItemString(d, "adaptive",
                           uvcuda_loop_adaptive(&c->ul) ? Py_True : Py_False) !=
          0 ||
      PyDict_SetItemString(d, "embedded",
                           c->priv != NULL ? Py_True : Py_False) != 0)
    goto fail;
  return d;
fail:
  Py_XDECREF(hist);
  Py_DECREF(d);
  return NULL;
}

static PyObject *get_closed(ctxobj *c, void *unused) {
  (void)unused;
  return PyBool_FromLong(c->closed);
}

static PyObject *get_closing(ctxobj *c, void *unused) {
  (void)unused;
  return PyBool_FromLong(c->closing || c->closed);
}

static PyObject *get_embedded(ctxobj *c, void *unused) {
  (void)unused;
  return PyBool_FromLong(c->priv != NULL || (c->closed && c->uv == NULL));
}

static PyObject *get_thread(ctxobj *c, void *unused) {
  (void)unused;
  return PyLong_FromUnsignedLong(c->thread);
}

static PyObject *get_loop(ctxobj *c, void *unused) {
  (void)unused;
  return Py_NewRef(c->loop);
}

static PyMethodDef ctx_methods[] = {
    {"start", (PyCFunction)ctx_start, METH_VARARGS,
     "start(stream, op, future, device) -> Pending"},
    {"set_pump", (PyCFunction)ctx_set_pump, METH_VARARGS,
     "set_pump(call_soon, pump): how the embedded loop asks for a pass"},
    {"run_nowait", (PyCFunction)ctx_run_nowait, METH_NOARGS,
     "run_nowait() -> int: one pass of the embedded loop; its timeout in ms"},
    {"fileno", (PyCFunction)ctx_fileno, METH_NOARGS,
     "fileno() -> int: the embedded loop's backend fd"},
    {"shutdown", (PyCFunction)ctx_shutdown, METH_O,
     "shutdown(on_closed) -> bool: close every future, then the context"},
    {"run_until_closed", (PyCFunction)ctx_run_until_closed, METH_NOARGS,
     "run_until_closed(): after shutdown(), run the uv loop here until the "
     "context is closed, then close the uv loop"},
    {"foreign_handles", (PyCFunction)ctx_foreign_handles, METH_NOARGS,
     "foreign_handles() -> int: open handles on the uv loop that are not "
     "uvcuda's"},
    {"stats", (PyCFunction)ctx_stats, METH_NOARGS, "stats() -> dict"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef ctx_getset[] = {
    {"closed", (getter)get_closed, NULL, "the loop context's close_cb ran",
     NULL},
    {"closing", (getter)get_closing, NULL, "shutdown() began", NULL},
    {"embedded", (getter)get_embedded, NULL, "runs on a private uv loop", NULL},
    {"thread", (getter)get_thread, NULL, "the loop thread's ident", NULL},
    {"loop", (getter)get_loop, NULL, "the asyncio loop", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyType_Slot ctx_slots[] = {
    {Py_tp_new, ctx_new},
    {Py_tp_dealloc, ctx_dealloc},
    {Py_tp_methods, ctx_methods},
    {Py_tp_getset, ctx_getset},
    {Py_tp_doc,
     "LoopContext(loop, uv_loop=None, *, completion=None, "
     "spin_budget_us=None, adaptive=None, latency_histogram=False, "
     "timing=False): uvcuda on an asyncio loop (internal)."},
    {0, NULL}};

static PyType_Spec ctx_spec = {"uvcuda._uvcuda.LoopContext", sizeof(ctxobj), 0,
                               Py_TPFLAGS_DEFAULT, ctx_slots};

int loopctx_init(PyObject *m) {
  if ((s_done = PyUnicode_InternFromString("done")) == NULL ||
      (s_set_result = PyUnicode_InternFromString("set_result")) == NULL ||
      (s_set_exception = PyUnicode_InternFromString("set_exception")) == NULL ||
      (s_cancel = PyUnicode_InternFromString("cancel")) == NULL ||
      (s_is_closed = PyUnicode_InternFromString("is_closed")) == NULL)
    return -1;
  if ((CtxType = (PyTypeObject *)PyType_FromSpec(&ctx_spec)) == NULL ||
      (PendingType = (PyTypeObject *)PyType_FromSpec(&pend_spec)) == NULL)
    return -1;
  if (PyModule_AddObjectRef(m, "LoopContext", (PyObject *)CtxType) != 0 ||
      PyModule_AddObjectRef(m, "Pending", (PyObject *)PendingType) != 0)
    return -1;
  return 0;
}
