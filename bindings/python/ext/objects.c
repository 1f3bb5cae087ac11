/* Device, Stream, DeviceMemory, Module, Kernel, and the op objects through
 * which Stream's async methods and enqueue_* methods enqueue work.
 *
 * An op object (_Op) holds everything its work uses (the stream, memory,
 * the kernel, an exported host buffer: Py_buffer keeps a bytearray from
 * being resized) and a use on each; the await that runs it holds it until
 * the GPU is done with it. It runs only inside an await on its own stream
 * (cur_req): outside one nothing would keep what it uses alive. */
#include "ext.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <structmember.h>

#include "bounce.h"
#include "reaper.h"

#define MAX_PARAMS 64

PyTypeObject *DeviceType, *StreamType, *MemoryType, *ModuleType, *KernelType,
    *OpType;

typedef struct {
  PyObject_HEAD
  struct dev *d;
} devobj;

typedef struct {
  res_t h;
  CUdeviceptr ptr;
  size_t nbytes;
  PyObject *device;
} memobj;

typedef struct {
  res_t h;
  CUmodule mod;
  char *ptx; /* the image as text, for parameter counts; NULL if binary */
  PyObject *device;
} modobj;

enum ptype {
  P_PTR,
  P_U8,
  P_I8,
  P_U16,
  P_I16,
  P_U32,
  P_I32,
  P_U64,
  P_I64,
  P_F32,
  P_F64,
  P_NTYPES
};
static const char *const ptype_names[P_NTYPES] = {
    "ptr", "u8", "i8", "u16", "i16", "u32", "i32", "u64", "i64", "f32", "f64"};

typedef struct {
  res_t h;
  CUfunction fn;
  modobj *module;
  int nparams;
  unsigned char sig[MAX_PARAMS];
  PyObject *name, *signature;
} kernobj;

enum { OP_HTOD = 1, OP_DTOH, OP_DTOD, OP_MEMSET, OP_LAUNCH };

typedef struct {
  PyObject_HEAD
  int kind;
  stream_t *stream; /* each res here holds a use */
  res_t *a, *b;
  PyObject *held; /* more memory (kernel 'ptr' arguments), or NULL */
  PyObject *host;
  Py_buffer view;
  int has_view;
  size_t n, off_a, off_b;
  unsigned char value;
  unsigned grid[3], block[3], shmem;
  int nparams;
  int ran;               /* enqueued (an op runs once) */
  struct bounce *bounce; /* the host side of a copy, or NULL */
  uint64_t slots[MAX_PARAMS];
  void *params[MAX_PARAMS];
} opobj;

/* ---- resources ----------------------------------------------------------- */

static const char *res_noun(const res_t *r) {
  switch (r->kind) {
    case RES_STREAM: return "stream";
    case RES_MEMORY: return "device memory";
    case RES_MODULE: return "module";
    default: return "kernel";
  }
}

static const char *res_closed_word(const res_t *r) {
  switch (r->kind) {
    case RES_STREAM: return "destroyed";
    case RES_MEMORY: return "freed";
    default: return "unloaded";
  }
}

static void res_init(res_t *r, int kind, struct dev *d) {
  r->kind = kind;
  r->dev = d;
  r->gen = dev_gen(d);
}

static int res_stale(const res_t *r) { return r->gen != dev_gen(r->dev); }

int res_check(res_t *r) {
  if (r->kind == RES_KERNEL && res_check(&((kernobj *)r)->module->h) != 0)
    return -1;
  if (r->closed) {
    PyErr_Format(PyExc_ValueError, "the %s is %s", res_noun(r),
                 res_closed_word(r));
    return -1;
  }
  if (res_stale(r)) {
    char why[128];
    snprintf(why, sizeof(why), "the %s was made before device %d was reset",
             res_noun(r), r->dev->ordinal);
    raise_cu(CUDA_ERROR_CONTEXT_IS_DESTROYED, why);
    return -1;
  }
  return 0;
}

/* Destroys the CUDA object (once closed and unused). One that a reset
 * ended is gone already. Memory and modules go on the reaper thread
 * (their destruction waits for the device); a stream here (its destroy
 * returns at once; work still queued on it runs), unless a reset runs:
 * the reset destroys it. */
static void res_destroy(res_t *r) {
  CUcontext prev = NULL;
  if (r->gone) return;
  r->gone = 1;
  switch (r->kind) {
    case RES_KERNEL: res_unuse(&((kernobj *)r)->module->h); return;
    case RES_MEMORY:
      if (!res_stale(r))
        reap(REAP_MEMORY, r->dev, r->gen, (uintptr_t)((memobj *)r)->ptr);
      return;
    case RES_MODULE:
      if (!res_stale(r))
        reap(REAP_MODULE, r->dev, r->gen, (uintptr_t)((modobj *)r)->mod);
      return;
    default: break;
  }
  if (res_stale(r) || pthread_rwlock_tryrdlock(&r->dev->rw) != 0) return;
  if (ctx_push(r->dev->ctx, &prev) == CUDA_SUCCESS) {
    cu.cuStreamDestroy(((stream_t *)r)->stream);
    ctx_pop(r->dev->ctx, prev);
  }
  pthread_rwlock_unlock(&r->dev->rw);
}

void res_use(res_t *r) { r->uses++; }

void res_unuse(res_t *r) {
  if (--r->uses == 0 && r->closed) res_destroy(r);
}

static int is_res(PyObject *o) {
  return PyObject_TypeCheck(o, StreamType) ||
         PyObject_TypeCheck(o, MemoryType) ||
         PyObject_TypeCheck(o, ModuleType) || PyObject_TypeCheck(o, KernelType);
}

/* The await held these ops (or resources): their uses end with it. An op
 * object's own uses end when it is deallocated. */
void res_unuse_list(PyObject *list) {
  Py_ssize_t i, n = PyList_Size(list);
  for (i = 0; i < n; i++) {
    PyObject *o = PyList_GetItem(list, i);
    if (o != NULL && is_res(o)) res_unuse((res_t *)o);
  }
}

/* close(): no new work; the CUDA object goes once unused. */
static PyObject *res_close_method(PyObject *self, PyObject *unused) {
  res_t *r = (res_t *)self;
  (void)unused;
  if (!r->closed) {
    r->closed = 1;
    if (r->uses == 0) res_destroy(r);
  }
  Py_RETURN_NONE;
}

static void res_dealloc_common(res_t *r) {
  if (r->weakrefs != NULL) PyObject_ClearWeakRefs((PyObject *)r);
  r->closed = 1;
  if (r->uses == 0) res_destroy(r);
}

static void free_self(PyObject *o) {
  PyTypeObject *tp = Py_TYPE(o);
  PyObject_Free(o);
  Py_DECREF(tp);
}

static PyObject *get_pending(res_t *r, void *unused) {
  (void)unused;
  return PyLong_FromLong(r->uses);
}

static PyObject *get_closed(res_t *r, void *unused) {
  (void)unused;
  return PyBool_FromLong(r->closed);
}

static PyMemberDef res_members[] = {{"__weaklistoffset__", T_PYSSIZET,
                                     offsetof(res_t, weakrefs), READONLY, NULL},
                                    {NULL, 0, 0, 0, NULL}};

static int same_device(const stream_t *s, const res_t *r) {
  if (s->h.dev == r->dev) return 0;
  PyErr_Format(PyExc_ValueError,
               "%s of device %d used on a stream of device %d", res_noun(r),
               r->dev->ordinal, s->h.dev->ordinal);
  return -1;
}

/* ---- Device ------------------------------------------------------------- */

static PyObject *new_stream(struct dev *d, PyObject *devobj_);

static PyObject *dev_new(PyTypeObject *tp, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"ordinal", NULL};
  int ordinal = 0;
  struct dev *d;
  devobj *o;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|i", kwlist, &ordinal))
    return NULL;
  if ((d = dev_open(ordinal)) == NULL) return NULL;
  if (d->obj != NULL) return Py_NewRef(d->obj);
  if ((o = (devobj *)PyType_GenericAlloc(tp, 0)) == NULL) return NULL;
  o->d = d;
  d->obj = Py_NewRef((PyObject *)o); /* one per ordinal, for the process */
  return (PyObject *)o;
}

static PyObject *dev_repr(devobj *o) {
  return PyUnicode_FromFormat("<uvcuda.Device %d '%s'>", o->d->ordinal,
                              o->d->name);
}

static PyObject *dev_get_ordinal(devobj *o, void *u) {
  (void)u;
  return PyLong_FromLong(o->d->ordinal);
}

static PyObject *dev_get_name(devobj *o, void *u) {
  (void)u;
  return PyUnicode_FromString(o->d->name);
}

static PyObject *dev_get_cc(devobj *o, void *u) {
  (void)u;
  return Py_BuildValue("(ii)", o->d->cc_major, o->d->cc_minor);
}

static PyObject *dev_get_context(devobj *o, void *u) {
  (void)u;
  return PyLong_FromVoidPtr(o->d->ctx);
}

static PyObject *dev_health(devobj *o, PyObject *unused) {
  PyObject *n = PyLong_FromLong(o->d->ordinal), *v;
  (void)unused;
  if (n == NULL) return NULL;
  v = py_health(NULL, n);
  Py_DECREF(n);
  return v;
}

static PyObject *dev_reset(devobj *o, PyObject *unused) {
  (void)unused;
  if (reset_func == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "uvcuda package not initialised");
    return NULL;
  }
  return PyObject_CallFunction(reset_func, "i", o->d->ordinal);
}

static PyObject *dev_create_stream(devobj *o, PyObject *unused) {
  (void)unused;
  return new_stream(o->d, (PyObject *)o);
}

static PyObject *dev_alloc(devobj *o, PyObject *arg) {
  struct dev *d = o->d;
  CUcontext prev = NULL;
  CUdeviceptr p = 0;
  CUresult r;
  size_t n;
  memobj *m;
  if (arg_size(arg, "nbytes", &n) != 0) return NULL;
  if (n == 0) {
    PyErr_SetString(PyExc_ValueError, "nbytes must be at least 1");
    return NULL;
  }
  if (dev_enter(d) != 0) return NULL;
  if ((r = ctx_push(d->ctx, &prev)) == CUDA_SUCCESS) {
    r = cu.cuMemAlloc(&p, n);
    ctx_pop(d->ctx, prev);
  }
  if (r != CUDA_SUCCESS) {
    dev_leave(d);
    return raise_cu(r, "cuMemAlloc");
  }
  if ((m = (memobj *)PyType_GenericAlloc(MemoryType, 0)) == NULL) {
    if (ctx_push(d->ctx, &prev) == CUDA_SUCCESS) {
      cu.cuMemFree(p);
      ctx_pop(d->ctx, prev);
    }
    dev_leave(d);
    return NULL;
  }
  res_init(&m->h, RES_MEMORY, d);
  dev_leave(d);
  m->ptr = p;
  m->nbytes = n;
  m->device = Py_NewRef((PyObject *)o);
  return (PyObject *)m;
}

/* The number of .param entries of `.entry name(...)` in PTX text, or -1. */
static int ptx_params(const char *ptx, const char *name) {
  size_t len = strlen(name);
  const char *p = ptx, *e;
  int n;
  while ((p = strstr(p, ".entry")) != NULL) {
    p += 6;
    while (*p == ' ' || *p == '\t') p++;
    if (strncmp(p, name, len) != 0) continue;
    p += len;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    if (*p != '(') {
      if (*p == '{') return 0; /* no parameter list */
      continue;
    }
    if ((e = strchr(p, ')')) == NULL) return -1;
    for (n = 0; (p = strstr(p, ".param")) != NULL && p < e; p += 6) n++;
    return n;
  }
  return -1;
}

static PyObject *dev_load_module(devobj *o, PyObject *arg) {
  struct dev *d = o->d;
  CUcontext prev = NULL;
  CUmodule mod = NULL;
  CUresult r;
  Py_buffer view;
  char *image;
  modobj *m;
  if (PyUnicode_Check(arg)) {
    Py_ssize_t len;
    const char *s = PyUnicode_AsUTF8AndSize(arg, &len);
    if (s == NULL) return NULL;
    if ((image = malloc((size_t)len + 1)) == NULL) return PyErr_NoMemory();
    memcpy(image, s, (size_t)len + 1);
  } else {
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) != 0) {
      PyErr_Clear();
      PyErr_Format(PyExc_TypeError,
                   "image must be str or a bytes-like object, got %R", arg);
      return NULL;
    }
    if ((image = malloc((size_t)view.len + 1)) == NULL) {
      PyBuffer_Release(&view);
      return PyErr_NoMemory();
    }
    memcpy(image, view.buf, (size_t)view.len);
    image[view.len] = '\0'; /* PTX is read as a C string */
    PyBuffer_Release(&view);
  }
  if (dev_enter(d) != 0) {
    free(image);
    return NULL;
  }
  if ((r = ctx_push(d->ctx, &prev)) == CUDA_SUCCESS) {
    r = cu.cuModuleLoadData(&mod, image);
    ctx_pop(d->ctx, prev);
  }
  if (r != CUDA_SUCCESS) {
    dev_leave(d);
    free(image);
    return raise_cu(r, "cuModuleLoadData");
  }
  if ((m = (modobj *)PyType_GenericAlloc(ModuleType, 0)) == NULL) {
    if (ctx_push(d->ctx, &prev) == CUDA_SUCCESS) {
      cu.cuModuleUnload(mod);
      ctx_pop(d->ctx, prev);
    }
    dev_leave(d);
    free(image);
    return NULL;
  }
  res_init(&m->h, RES_MODULE, d);
  dev_leave(d);
  m->mod = mod;
  m->ptx = strstr(image, ".entry") != NULL ? image : (free(image), NULL);
  m->device = Py_NewRef((PyObject *)o);
  return (PyObject *)m;
}

static PyMethodDef dev_methods[] = {
    {"create_stream", (PyCFunction)dev_create_stream, METH_NOARGS,
     "create_stream() -> Stream: a new non-blocking stream"},
    {"alloc", (PyCFunction)dev_alloc, METH_O,
     "alloc(nbytes) -> DeviceMemory (cuMemAlloc; contents undefined)"},
    {"load_module", (PyCFunction)dev_load_module, METH_O,
     "load_module(image) -> Module: PTX text (str or bytes) or a cubin"},
    {"health", (PyCFunction)dev_health, METH_NOARGS,
     "health() -> str: 'healthy' or the sticky error's name"},
    {"reset", (PyCFunction)dev_reset, METH_NOARGS,
     "reset() -> coroutine: uvcuda.reset(self.ordinal)"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef dev_getset[] = {
    {"ordinal", (getter)dev_get_ordinal, NULL, NULL, NULL},
    {"name", (getter)dev_get_name, NULL, NULL, NULL},
    {"compute_capability", (getter)dev_get_cc, NULL, NULL, NULL},
    {"context", (getter)dev_get_context, NULL,
     "the primary context (CUcontext) as an int", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyType_Slot dev_slots[] = {
    {Py_tp_new, dev_new},
    {Py_tp_repr, dev_repr},
    {Py_tp_methods, dev_methods},
    {Py_tp_getset, dev_getset},
    {Py_tp_doc, "Device(ordinal=0): a CUDA device's primary context"},
    {0, NULL}};

static PyType_Spec dev_spec = {"uvcuda.Device", sizeof(devobj), 0,
                               Py_TPFLAGS_DEFAULT, dev_slots};

/* ---- Stream -------------------------------------------------------------- */

static PyObject *new_stream(struct dev *d, PyObject *device) {
  CUcontext prev = NULL;
  CUstream s = NULL;
  CUresult r;
  stream_t *o;
  if (dev_enter(d) != 0) return NULL;
  if ((r = ctx_push(d->ctx, &prev)) == CUDA_SUCCESS) {
    r = cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
    ctx_pop(d->ctx, prev);
  }
  if (r != CUDA_SUCCESS) {
    dev_leave(d);
    return raise_cu(r, "cuStreamCreate");
  }
  if ((o = (stream_t *)PyType_GenericAlloc(StreamType, 0)) == NULL) {
    if (ctx_push(d->ctx, &prev) == CUDA_SUCCESS) {
      cu.cuStreamDestroy(s);
      ctx_pop(d->ctx, prev);
    }
    dev_leave(d);
    return NULL;
  }
  res_init(&o->h, RES_STREAM, d);
  dev_leave(d);
  o->stream = s;
  o->device = Py_NewRef(device);
  return (PyObject *)o;
}

static void stream_dealloc(stream_t *o) {
  res_dealloc_common(&o->h);
  Py_XDECREF(o->device);
  free_self((PyObject *)o);
}

static PyObject *stream_repr(stream_t *o) {
  return PyUnicode_FromFormat("<uvcuda.Stream %p of device %d%s>",
                              (void *)o->stream, o->h.dev->ordinal,
                              o->h.closed ? " (destroyed)" : "");
}

static PyObject *stream_get_handle(stream_t *o, void *u) {
  (void)u;
  return PyLong_FromVoidPtr(o->stream);
}

static PyObject *stream_get_device(stream_t *o, void *u) {
  (void)u;
  return Py_NewRef(o->device);
}

static PyObject *stream_cuda_stream(stream_t *o, PyObject *unused) {
  (void)unused;
  return Py_BuildValue("(iN)", 0, PyLong_FromVoidPtr(o->stream));
}

static PyObject *stream_ready(stream_t *o, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"op", NULL};
  PyObject *op = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|O", kwlist, &op)) return NULL;
  return PyObject_CallFunctionObjArgs(ready_func, (PyObject *)o, op, NULL);
}

/* ---- ops ----------------------------------------------------------------- */

static opobj *op_new(int kind, stream_t *s) {
  opobj *o;
  if (res_check(&s->h) != 0) return NULL;
  if ((o = (opobj *)PyType_GenericAlloc(OpType, 0)) == NULL) return NULL;
  o->kind = kind;
  o->stream = (stream_t *)Py_NewRef((PyObject *)s);
  res_use(&s->h);
  return o;
}

static void op_hold(res_t **slot, res_t *r) {
  *slot = (res_t *)Py_NewRef((PyObject *)r);
  res_use(r);
}

static void op_dealloc(opobj *o) {
  bounce_put(o->bounce); /* the GPU is done with it: its await held o */
  if (o->has_view) PyBuffer_Release(&o->view);
  if (o->a != NULL) res_unuse(o->a);
  if (o->b != NULL) res_unuse(o->b);
  if (o->held != NULL) res_unuse_list(o->held);
  if (o->stream != NULL) res_unuse(&o->stream->h);
  Py_XDECREF((PyObject *)o->a);
  Py_XDECREF((PyObject *)o->b);
  Py_XDECREF(o->held);
  Py_XDECREF(o->host);
  Py_XDECREF((PyObject *)o->stream);
  free_self((PyObject *)o);
}

static memobj *arg_mem(PyObject *v, const char *what, stream_t *s) {
  if (!PyObject_TypeCheck(v, MemoryType)) {
    PyErr_Format(PyExc_TypeError, "%s must be a uvcuda.DeviceMemory, got %R",
                 what, v);
    return NULL;
  }
  if (res_check((res_t *)v) != 0 || same_device(s, (res_t *)v) != 0)
    return NULL;
  return (memobj *)v;
}

/* off + n within an allocation of `size` bytes. */
static int in_range(size_t off, size_t n, size_t size, const char *what) {
  if (off <= size && n <= size - off) return 0;
  PyErr_Format(PyExc_ValueError,
               "%s: %zu bytes at offset %zu exceed the %zu-byte allocation",
               what, n, off, size);
  return -1;
}

static int arg_opt_size(PyObject *v, const char *what, size_t dflt,
                        size_t *out) {
  if (v == NULL || v == Py_None) {
    *out = dflt;
    return 0;
  }
  return arg_size(v, what, out);
}

static opobj *make_htod(stream_t *s, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"dst", "src", "offset", NULL};
  PyObject *dst, *src, *offv = NULL;
  memobj *m;
  opobj *o;
  size_t off;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O", kwlist, &dst, &src,
                                   &offv) ||
      (m = arg_mem(dst, "dst", s)) == NULL ||
      arg_opt_size(offv, "offset", 0, &off) != 0 ||
      (o = op_new(OP_HTOD, s)) == NULL)
    return NULL;
  if (PyObject_GetBuffer(src, &o->view, PyBUF_SIMPLE) != 0) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError,
                 "src must be a contiguous bytes-like object, got %R", src);
    Py_DECREF((PyObject *)o);
    return NULL;
  }
  o->has_view = 1;
  o->n = (size_t)o->view.len;
  o->off_a = off;
  if (in_range(off, o->n, m->nbytes, "copy_to_device") != 0) {
    Py_DECREF((PyObject *)o);
    return NULL;
  }
  op_hold(&o->a, &m->h);
  return o;
}

static opobj *make_dtoh(stream_t *s, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"dst", "src", "offset", NULL};
  PyObject *dst, *src, *offv = NULL;
  memobj *m;
  opobj *o;
  size_t off;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O", kwlist, &dst, &src,
                                   &offv) ||
      (m = arg_mem(src, "src", s)) == NULL ||
      arg_opt_size(offv, "offset", 0, &off) != 0 ||
      (o = op_new(OP_DTOH, s)) == NULL)
    return NULL;
  if (PyObject_GetBuffer(dst, &o->view, PyBUF_WRITABLE) != 0) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError,
                 "dst must be a writable contiguous bytes-like object, got %R",
                 dst);
    Py_DECREF((PyObject *)o);
    return NULL;
  }
  o->has_view = 1;
  o->host = Py_NewRef(dst);
  o->n = (size_t)o->view.len;
  o->off_a = off;
  if (in_range(off, o->n, m->nbytes, "copy_from_device") != 0) {
    Py_DECREF((PyObject *)o);
    return NULL;
  }
  op_hold(&o->a, &m->h);
  return o;
}

static opobj *make_dtod(stream_t *s, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"dst",        "src",        "nbytes",
                           "dst_offset", "src_offset", NULL};
  PyObject *dst, *src, *nv = NULL, *dov = NULL, *sov = NULL;
  memobj *md, *ms;
  size_t n, doff, soff;
  opobj *o;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|OOO", kwlist, &dst, &src, &nv,
                                   &dov, &sov) ||
      (md = arg_mem(dst, "dst", s)) == NULL ||
      (ms = arg_mem(src, "src", s)) == NULL ||
      arg_opt_size(dov, "dst_offset", 0, &doff) != 0 ||
      arg_opt_size(sov, "src_offset", 0, &soff) != 0)
    return NULL;
  if (soff > ms->nbytes) soff = ms->nbytes + 1; /* reported below */
  if (arg_opt_size(nv, "nbytes", soff <= ms->nbytes ? ms->nbytes - soff : 0,
                   &n) != 0 ||
      in_range(soff, n, ms->nbytes, "copy_device (src)") != 0 ||
      in_range(doff, n, md->nbytes, "copy_device (dst)") != 0 ||
      (o = op_new(OP_DTOD, s)) == NULL)
    return NULL;
  o->n = n;
  o->off_a = doff;
  o->off_b = soff;
  op_hold(&o->a, &md->h);
  op_hold(&o->b, &ms->h);
  return o;
}

static opobj *make_memset(stream_t *s, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"dst", "value", "nbytes", "offset", NULL};
  PyObject *dst, *nv = NULL, *offv = NULL;
  int value;
  memobj *m;
  size_t n, off;
  opobj *o;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "Oi|OO", kwlist, &dst, &value, &nv,
                                   &offv) ||
      (m = arg_mem(dst, "dst", s)) == NULL ||
      arg_opt_size(offv, "offset", 0, &off) != 0)
    return NULL;
  if (value < 0 || value > 255) {
    PyErr_Format(PyExc_ValueError, "value must be a byte (0..255), got %d",
                 value);
    return NULL;
  }
  if (arg_opt_size(nv, "nbytes", off <= m->nbytes ? m->nbytes - off : 0, &n) !=
          0 ||
      in_range(off, n, m->nbytes, "memset") != 0 ||
      (o = op_new(OP_MEMSET, s)) == NULL)
    return NULL;
  o->n = n;
  o->off_a = off;
  o->value = (unsigned char)value;
  op_hold(&o->a, &m->h);
  return o;
}

static int arg_dim3(PyObject *v, const char *what, unsigned out[3]) {
  Py_ssize_t n, i;
  uint64_t x;
  out[0] = out[1] = out[2] = 1;
  if (PyTuple_Check(v) || PyList_Check(v)) {
    PyObject *seq = PySequence_Tuple(v);
    if (seq == NULL) return -1;
    n = PyTuple_Size(seq);
    if (n < 1 || n > 3) {
      Py_DECREF(seq);
      PyErr_Format(PyExc_ValueError, "%s must have 1 to 3 dimensions, got %zd",
                   what, n);
      return -1;
    }
    for (i = 0; i < n; i++) {
      if (arg_u64(PyTuple_GetItem(seq, i), what, &x) != 0 || x < 1 ||
          x > 0x7fffffff) {
        Py_DECREF(seq);
        if (!PyErr_Occurred())
          PyErr_Format(PyExc_ValueError, "%s dimensions must be in 1..2**31-1",
                       what);
        return -1;
      }
      out[i] = (unsigned)x;
    }
    Py_DECREF(seq);
    return 0;
  }
  if (arg_u64(v, what, &x) != 0) return -1;
  if (x < 1 || x > 0x7fffffff) {
    PyErr_Format(PyExc_ValueError, "%s dimensions must be in 1..2**31-1", what);
    return -1;
  }
  out[0] = (unsigned)x;
  return 0;
}

static int pack_int(PyObject *v, int t, uint64_t *slot, int i) {
  static const long long lo[P_NTYPES] = {
      0, 0, -128, 0, -32768, 0, -2147483648LL, 0, INT64_MIN, 0, 0};
  static const unsigned long long hi[P_NTYPES] = {
      0,          255,        127,       65535, 32767, 4294967295ULL,
      2147483647, UINT64_MAX, INT64_MAX, 0,     0};
  PyObject *iv;
  int overflow = 0;
  if (PyBool_Check(v) || PyFloat_Check(v) || (iv = PyNumber_Index(v)) == NULL) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "argument %d (%s) must be an int, got %R", i,
                 ptype_names[t], v);
    return -1;
  }
  if (t == P_U64) {
    unsigned long long u = PyLong_AsUnsignedLongLong(iv);
    Py_DECREF(iv);
    if (u == (unsigned long long)-1 && PyErr_Occurred()) {
      PyErr_Clear();
      PyErr_Format(PyExc_OverflowError, "argument %d (u64) out of range", i);
      return -1;
    }
    *slot = u;
    return 0;
  }
  {
    long long x = PyLong_AsLongLongAndOverflow(iv, &overflow);
    Py_DECREF(iv);
    if (x == -1 && PyErr_Occurred()) return -1;
    if (overflow != 0 || x < lo[t] ||
        (x > 0 && (unsigned long long)x > hi[t])) {
      PyErr_Format(PyExc_OverflowError, "argument %d (%s) out of range", i,
                   ptype_names[t]);
      return -1;
    }
    switch (t) {
      case P_U8:
      case P_I8: {
        uint8_t b = (uint8_t)x;
        memcpy(slot, &b, 1);
        break;
      }
      case P_U16:
      case P_I16: {
        uint16_t b = (uint16_t)x;
        memcpy(slot, &b, 2);
        break;
      }
      case P_U32:
      case P_I32: {
        uint32_t b = (uint32_t)x;
        memcpy(slot, &b, 4);
        break;
      }
      default: {
        int64_t b = x;
        memcpy(slot, &b, 8);
        break;
      }
    }
  }
  return 0;
}

static opobj *make_launch(stream_t *s, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"kernel", "grid",       "block",
                           "args",   "shared_mem", NULL};
  PyObject *kv, *gv, *bv, *av = NULL, *seq = NULL;
  unsigned shmem = 0;
  kernobj *k;
  opobj *o;
  Py_ssize_t n, i;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|OI", kwlist, &kv, &gv, &bv,
                                   &av, &shmem))
    return NULL;
  if (!PyObject_TypeCheck(kv, KernelType)) {
    PyErr_Format(PyExc_TypeError, "kernel must be a uvcuda.Kernel, got %R", kv);
    return NULL;
  }
  k = (kernobj *)kv;
  if (res_check(&k->h) != 0 || same_device(s, &k->h) != 0) return NULL;
  if ((o = op_new(OP_LAUNCH, s)) == NULL) return NULL;
  if (arg_dim3(gv, "grid", o->grid) != 0 ||
      arg_dim3(bv, "block", o->block) != 0)
    goto fail;
  o->shmem = shmem;
  if (av == NULL || av == Py_None) {
    seq = PyTuple_New(0);
  } else if (PyTuple_Check(av) || PyList_Check(av)) {
    seq = PySequence_Tuple(av);
  } else {
    PyErr_Format(PyExc_TypeError, "args must be a tuple or list, got %R", av);
    goto fail;
  }
  if (seq == NULL) goto fail;
  n = PyTuple_Size(seq);
  if (n != k->nparams) {
    PyErr_Format(PyExc_ValueError, "kernel %U takes %d argument%s, got %zd",
                 k->name, k->nparams, k->nparams == 1 ? "" : "s", n);
    goto fail;
  }
  for (i = 0; i < n; i++) {
    PyObject *v = PyTuple_GetItem(seq, i);
    int t = k->sig[i];
    o->params[i] = &o->slots[i];
    if (t == P_PTR) {
      if (PyObject_TypeCheck(v, MemoryType)) {
        memobj *m = (memobj *)v;
        if (res_check(&m->h) != 0 || same_device(s, &m->h) != 0) goto fail;
        if (o->held == NULL && (o->held = PyList_New(0)) == NULL) goto fail;
        if (PyList_Append(o->held, v) != 0) goto fail;
        res_use(&m->h);
        o->slots[i] = (uint64_t)m->ptr;
      } else if (v == Py_None) {
        o->slots[i] = 0;
      } else if (arg_u64(v, "a ptr argument", &o->slots[i]) != 0) {
        goto fail;
      }
    } else if (t == P_F32 || t == P_F64) {
      double x;
      if (PyBool_Check(v) || !(PyFloat_Check(v) || PyLong_Check(v))) {
        PyErr_Format(PyExc_TypeError,
                     "argument %zd (%s) must be a float, got %R", i,
                     ptype_names[t], v);
        goto fail;
      }
      if ((x = PyFloat_AsDouble(v)) == -1.0 && PyErr_Occurred()) goto fail;
      if (t == P_F32) {
        float f = (float)x;
        memcpy(&o->slots[i], &f, sizeof(f));
      } else {
        memcpy(&o->slots[i], &x, sizeof(x));
      }
    } else if (pack_int(v, t, &o->slots[i], (int)i) != 0) {
      goto fail;
    }
  }
  o->nparams = (int)n;
  Py_DECREF(seq);
  op_hold(&o->a, &k->h);
  return o;
fail:
  Py_XDECREF(seq);
  Py_DECREF((PyObject *)o);
  return NULL;
}

/* Enqueues o's work on its stream (whose context uvcuda made current). */
static int op_run(opobj *o) {
  struct dev *d = o->stream->h.dev;
  CUstream s = o->stream->stream;
  CUresult r = CUDA_SUCCESS;
  const char *what = "";
  if (res_check(&o->stream->h) != 0 || (o->a != NULL && res_check(o->a) != 0) ||
      (o->b != NULL && res_check(o->b) != 0))
    return -1;
  if (o->held != NULL) {
    Py_ssize_t i, n = PyList_Size(o->held);
    for (i = 0; i < n; i++)
      if (res_check((res_t *)PyList_GetItem(o->held, i)) != 0) return -1;
  }
  if (o->ran) {
    PyErr_SetString(PyExc_RuntimeError, "an op runs once");
    return -1;
  }
  if (dev_enter(d) != 0) return -1;
  switch (o->kind) {
    case OP_HTOD:
      what = "cuMemcpyHtoDAsync";
      if (o->n == 0) break;
      /* src is read now: through page-locked memory, or as it is */
      if ((o->bounce = bounce_get(d, o->n)) != NULL)
        memcpy(o->bounce->p, o->view.buf, o->n);
      if (o->bounce != NULL) {
        r = cu.cuMemcpyHtoDAsync(((memobj *)o->a)->ptr + o->off_a, o->bounce->p,
                                 o->n, s);
      } else { /* pageable: the driver may hold us; other threads run */
        Py_BEGIN_ALLOW_THREADS
        r = cu.cuMemcpyHtoDAsync(
            ((memobj *)o->a)->ptr + o->off_a, o->view.buf, o->n, s);
        Py_END_ALLOW_THREADS
      }
      break;
    case OP_DTOH:
      what = "cuMemcpyDtoHAsync";
      if (o->n == 0) break;
      o->bounce = bounce_get(d, o->n); /* copied to dst by op_finish */
      if (o->bounce != NULL) {
        r = cu.cuMemcpyDtoHAsync(o->bounce->p, ((memobj *)o->a)->ptr + o->off_a,
                                 o->n, s);
      } else { /* pageable: the driver holds us until the copy is done */
        Py_BEGIN_ALLOW_THREADS
        r = cu.cuMemcpyDtoHAsync(
            o->view.buf, ((memobj *)o->a)->ptr + o->off_a, o->n, s);
        Py_END_ALLOW_THREADS
      }
      break;
    case OP_DTOD:
      what = "cuMemcpyDtoDAsync";
      if (o->n > 0)
        r = cu.cuMemcpyDtoDAsync(((memobj *)o->a)->ptr + o->off_a,
                                 ((memobj *)o->b)->ptr + o->off_b, o->n, s);
      break;
    case OP_MEMSET:
      what = "cuMemsetD8Async";
      if (o->n > 0)
        r = cu.cuMemsetD8Async(((memobj *)o->a)->ptr + o->off_a, o->value, o->n,
                               s);
      break;
    case OP_LAUNCH:
      what = "cuLaunchKernel";
      r = cu.cuLaunchKernel(((kernobj *)o->a)->fn, o->grid[0], o->grid[1],
                            o->grid[2], o->block[0], o->block[1], o->block[2],
                            o->shmem, s, o->nparams > 0 ? o->params : NULL,
                            NULL);
      break;
    default: break;
  }
  dev_leave(d);
  if (r != CUDA_SUCCESS) {
    bounce_put(o->bounce); /* nothing was enqueued */
    o->bounce = NULL;
    raise_cu(r, what);
    return -1;
  }
  o->ran = 1;
  return 0;
}

void op_finish(PyObject *op) {
  opobj *o = (opobj *)op;
  if (!PyObject_TypeCheck(op, OpType) || !o->ran || o->kind != OP_DTOH ||
      o->bounce == NULL)
    return;
  memcpy(o->view.buf, o->bounce->p, o->n);
}

static int in_op_on(stream_t *s, const char *what) {
  if (cur_req != NULL && req_stream(cur_req) == s->stream) return 0;
  PyErr_Format(PyExc_RuntimeError,
               "%s runs only inside an op of an await on this stream "
               "(uvcuda.ready(stream, op)): nothing else keeps what it uses "
               "alive until the GPU is done",
               what);
  return -1;
}

static PyObject *op_call(opobj *o, PyObject *args, PyObject *kw) {
  if (PyTuple_Size(args) != 0 || (kw != NULL && PyDict_Size(kw) != 0)) {
    PyErr_SetString(PyExc_TypeError, "an op takes no arguments");
    return NULL;
  }
  if (in_op_on(o->stream, "this op") != 0 || op_run(o) != 0) return NULL;
  return Py_NewRef(o->host != NULL ? o->host : Py_None);
}

typedef opobj *(*make_fn)(stream_t *, PyObject *, PyObject *);

/* The async form: the op, awaited by uvcuda.ready(stream, op). */
static PyObject *submit(stream_t *s, make_fn make, PyObject *args,
                        PyObject *kw) {
  opobj *o = make(s, args, kw);
  PyObject *fut;
  if (o == NULL) return NULL;
  fut = PyObject_CallFunctionObjArgs(ready_func, (PyObject *)s, (PyObject *)o,
                                     NULL);
  Py_DECREF((PyObject *)o);
  return fut;
}

/* The enqueue_* form. Inside an op on the stream, the await holds the op
 * object until the GPU is done with it. Work that touches no host memory
 * (launches, memsets, copies between allocations) may be enqueued
 * anywhere else too, with the device's context made current: device
 * memory it uses can't go too early (cuMemFree and cuModuleUnload wait
 * for the device); a copy from or to a Python buffer can only be held by
 * an await. */
static PyObject *enqueue(stream_t *s, make_fn make, const char *name,
                         int host_side, PyObject *args, PyObject *kw) {
  CUcontext prev = NULL;
  CUresult r;
  opobj *o;
  PyObject *ret;
  int inside = cur_req != NULL && req_stream(cur_req) == s->stream, rc;
  if (!inside && host_side && in_op_on(s, name) != 0) return NULL;
  if ((o = make(s, args, kw)) == NULL) return NULL;
  if (inside) {
    rc = op_run(o) != 0 || req_keep(cur_req, (PyObject *)o) != 0 ? -1 : 0;
  } else if ((r = ctx_push(s->h.dev->ctx, &prev)) != CUDA_SUCCESS) {
    rc = -1;
    raise_cu(r, "cuCtxSetCurrent");
  } else {
    rc = op_run(o);
    ctx_pop(s->h.dev->ctx, prev);
  }
  ret = rc == 0 ? Py_NewRef(o->host != NULL ? o->host : Py_None) : NULL;
  Py_DECREF((PyObject *)o);
  return ret;
}

#define STREAM_OP(name, make, host_side)                                      \
  static PyObject *stream_##name(stream_t *s, PyObject *args, PyObject *kw) { \
    return submit(s, make, args, kw);                                         \
  }                                                                           \
  static PyObject *stream_enqueue_##name(stream_t *s, PyObject *args,         \
                                         PyObject *kw) {                      \
    return enqueue(s, make, "Stream.enqueue_" #name "()", host_side, args,    \
                   kw);                                                       \
  }
STREAM_OP(copy_to_device, make_htod, 1)
STREAM_OP(copy_from_device, make_dtoh, 1)
STREAM_OP(copy_device, make_dtod, 0)
STREAM_OP(memset, make_memset, 0)
STREAM_OP(launch, make_launch, 0)

/* synchronize(): waits, GIL released (a baseline; blocks the thread). */
static PyObject *stream_synchronize(stream_t *s, PyObject *unused) {
  CUresult r;
  (void)unused;
  if (res_check(&s->h) != 0 || dev_enter(s->h.dev) != 0) return NULL;
  Py_BEGIN_ALLOW_THREADS
  r = cu.cuStreamSynchronize(s->stream);
  Py_END_ALLOW_THREADS
  dev_leave(s->h.dev);
  if (r != CUDA_SUCCESS) return raise_cu(r, "cuStreamSynchronize");
  Py_RETURN_NONE;
}

/* query(): True once the work enqueued so far is done (cuStreamQuery). */
static PyObject *stream_query(stream_t *s, PyObject *unused) {
  CUresult r;
  (void)unused;
  if (res_check(&s->h) != 0 || dev_enter(s->h.dev) != 0) return NULL;
  r = cu.cuStreamQuery(s->stream);
  dev_leave(s->h.dev);
  if (r == CUDA_SUCCESS) Py_RETURN_TRUE;
  if (r == CUDA_ERROR_NOT_READY) Py_RETURN_FALSE;
  return raise_cu(r, "cuStreamQuery");
}

#define M(name, doc)                                   \
  {                                                    \
#name, (PyCFunction)(void (*)(void))stream_##name, \
        METH_VARARGS | METH_KEYWORDS, doc              \
  }
static PyMethodDef stream_methods[] = {
    M(ready, "ready(op=None) -> Future: uvcuda.ready(self, op)"),
    M(copy_to_device, "copy_to_device(dst, src, offset=0) -> Future[None]"),
    M(copy_from_device, "copy_from_device(dst, src, offset=0) -> Future[dst]"),
    M(copy_device,
      "copy_device(dst, src, nbytes=None, dst_offset=0, src_offset=0) -> "
      "Future[None]"),
    M(memset, "memset(dst, value, nbytes=None, offset=0) -> Future[None]"),
    M(launch,
      "launch(kernel, grid, block, args=(), shared_mem=0) -> Future[None]"),
    M(enqueue_copy_to_device,
      "enqueue_copy_to_device(dst, src, offset=0): inside an op"),
    M(enqueue_copy_from_device,
      "enqueue_copy_from_device(dst, src, offset=0) -> dst: inside an op"),
    M(enqueue_copy_device,
      "enqueue_copy_device(dst, src, nbytes=None, dst_offset=0, src_offset=0)"),
    M(enqueue_memset, "enqueue_memset(dst, value, nbytes=None, offset=0)"),
    M(enqueue_launch,
      "enqueue_launch(kernel, grid, block, args=(), shared_mem=0)"),
    {"synchronize", (PyCFunction)stream_synchronize, METH_NOARGS,
     "synchronize(): blocks until the stream's work is done (GIL released)"},
    {"query", (PyCFunction)stream_query, METH_NOARGS,
     "query() -> bool: the work enqueued so far is done"},
    {"destroy", res_close_method, METH_NOARGS,
     "destroy(): no new work; the stream goes once its pending work is done"},
    {"__cuda_stream__", (PyCFunction)stream_cuda_stream, METH_NOARGS,
     "__cuda_stream__() -> (0, handle): the CUDA stream protocol"},
    {NULL, NULL, 0, NULL}};
#undef M

static PyGetSetDef stream_getset[] = {
    {"handle", (getter)stream_get_handle, NULL, "the CUstream as an int", NULL},
    {"device", (getter)stream_get_device, NULL, NULL, NULL},
    {"destroyed", (getter)get_closed, NULL, NULL, NULL},
    {"pending", (getter)get_pending, NULL,
     "awaits and ops whose work on it may still run", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyObject *no_new(PyTypeObject *tp, PyObject *a, PyObject *k) {
  (void)a;
  (void)k;
  PyErr_Format(PyExc_TypeError,
               "cannot create %R instances directly: a Device makes them", tp);
  return NULL;
}

static PyType_Slot stream_slots[] = {
    {Py_tp_new, no_new},
    {Py_tp_dealloc, stream_dealloc},
    {Py_tp_repr, stream_repr},
    {Py_tp_methods, stream_methods},
    {Py_tp_getset, stream_getset},
    {Py_tp_members, res_members},
    {Py_tp_doc, "A CUDA stream made by Device.create_stream()"},
    {0, NULL}};

static PyType_Spec stream_spec = {"uvcuda.Stream", sizeof(stream_t), 0,
                                  Py_TPFLAGS_DEFAULT, stream_slots};

int stream_resolve(PyObject *o, CUstream *h, stream_t **ours, int *dev_hint) {
  PyObject *v = NULL, *hv = NULL;
  uint64_t x;
  *ours = NULL;
  *dev_hint = -1;
  if (PyObject_TypeCheck(o, StreamType)) {
    *ours = (stream_t *)o;
    *h = (*ours)->stream;
    *dev_hint = (*ours)->h.dev->ordinal;
    return 0;
  }
  if (PyBool_Check(o) || PyFloat_Check(o) || PyUnicode_Check(o) ||
      PyBytes_Check(o))
    goto bad;
  if (PyLong_Check(o)) {
    hv = Py_NewRef(o);
  } else if (PyObject_HasAttrString(o, "__cuda_stream__")) {
    /* The CUDA stream protocol: a method returning (version, handle); an
     * early form of it was a property. */
    if ((v = PyObject_GetAttrString(o, "__cuda_stream__")) == NULL) return -1;
    if (PyCallable_Check(v)) {
      PyObject *t = PyObject_CallNoArgs(v);
      Py_DECREF(v);
      if ((v = t) == NULL) return -1;
    }
    if (!PyTuple_Check(v) || PyTuple_Size(v) != 2) {
      Py_DECREF(v);
      PyErr_SetString(PyExc_TypeError,
                      "__cuda_stream__() must return (version, handle)");
      return -1;
    }
    hv = Py_NewRef(PyTuple_GetItem(v, 1));
    Py_DECREF(v);
  } else if (PyObject_HasAttrString(o, "cuda_stream")) { /* PyTorch */
    if ((hv = PyObject_GetAttrString(o, "cuda_stream")) == NULL) return -1;
  } else if (PyObject_HasAttrString(o, "ptr") &&
             PyObject_HasAttrString(o, "device_id")) { /* CuPy */
    if ((hv = PyObject_GetAttrString(o, "ptr")) == NULL) return -1;
  } else if (PyObject_HasAttrString(o, "__int__") ||
             PyObject_HasAttrString(o, "__index__")) { /* cuda-python */
    if ((hv = PyNumber_Long(o)) == NULL) return -1;
  } else {
    goto bad;
  }
  if (arg_u64(hv, "stream handle", &x) != 0) {
    Py_DECREF(hv);
    return -1;
  }
  Py_DECREF(hv);
  *h = (CUstream)(uintptr_t)x;
  /* The device a framework's object names (for its default stream). */
  {
    static const char *const attrs[] = {"device_index", "device_id"};
    size_t i;
    for (i = 0; i < 2 && !PyLong_Check(o); i++) {
      if (PyObject_HasAttrString(o, attrs[i])) {
        PyObject *dv = PyObject_GetAttrString(o, attrs[i]);
        if (dv != NULL && PyLong_Check(dv)) *dev_hint = (int)PyLong_AsLong(dv);
        Py_XDECREF(dv);
        PyErr_Clear();
        break;
      }
    }
  }
  return 0;
bad:
  PyErr_Format(PyExc_TypeError,
               "stream must be a CUDA stream: a uvcuda.Stream, an int handle, "
               "a torch.cuda.Stream, a CuPy Stream, a cuda-python CUstream or "
               "an object with __cuda_stream__; got %R",
               o);
  return -1;
}

/* ---- DeviceMemory -------------------------------------------------------- */

static void mem_dealloc(memobj *o) {
  res_dealloc_common(&o->h);
  Py_XDECREF(o->device);
  free_self((PyObject *)o);
}

static PyObject *mem_repr(memobj *o) {
  return PyUnicode_FromFormat(
      "<uvcuda.DeviceMemory %zu bytes at %p of device %d%s>", o->nbytes,
      (void *)(uintptr_t)o->ptr, o->h.dev->ordinal,
      o->h.closed ? " (freed)" : "");
}

static PyObject *mem_get_ptr(memobj *o, void *u) {
  (void)u;
  return PyLong_FromUnsignedLongLong(o->h.gone || res_stale(&o->h) ? 0
                                                                   : o->ptr);
}

static PyObject *mem_get_nbytes(memobj *o, void *u) {
  (void)u;
  return PyLong_FromSize_t(o->nbytes);
}

static PyObject *mem_get_device(memobj *o, void *u) {
  (void)u;
  return Py_NewRef(o->device);
}

static PyMethodDef mem_methods[] = {
    {"free", res_close_method, METH_NOARGS,
     "free(): no new work; the memory goes once its pending work is done"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef mem_getset[] = {
    {"ptr", (getter)mem_get_ptr, NULL,
     "the CUdeviceptr (0 once freed or gone with a reset)", NULL},
    {"nbytes", (getter)mem_get_nbytes, NULL, NULL, NULL},
    {"device", (getter)mem_get_device, NULL, NULL, NULL},
    {"freed", (getter)get_closed, NULL, NULL, NULL},
    {"pending", (getter)get_pending, NULL, "ops whose work on it may still run",
     NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyType_Slot mem_slots[] = {
    {Py_tp_new, no_new},
    {Py_tp_dealloc, mem_dealloc},
    {Py_tp_repr, mem_repr},
    {Py_tp_methods, mem_methods},
    {Py_tp_getset, mem_getset},
    {Py_tp_members, res_members},
    {Py_tp_doc, "Device memory made by Device.alloc()"},
    {0, NULL}};

static PyType_Spec mem_spec = {"uvcuda.DeviceMemory", sizeof(memobj), 0,
                               Py_TPFLAGS_DEFAULT, mem_slots};

/* ---- Module and Kernel --------------------------------------------------- */

static void mod_dealloc(modobj *o) {
  res_dealloc_common(&o->h);
  free(o->ptx);
  Py_XDECREF(o->device);
  free_self((PyObject *)o);
}

static PyObject *mod_function(modobj *m, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"name", "signature", NULL};
  const char *name;
  PyObject *sigv, *seq = NULL;
  CUfunction fn = NULL;
  CUcontext prev = NULL;
  CUresult r;
  kernobj *k = NULL;
  Py_ssize_t n, i;
  int t, expect;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "sO", kwlist, &name, &sigv))
    return NULL;
  if (res_check(&m->h) != 0) return NULL;
  if (PyUnicode_Check(sigv) || (seq = PySequence_Tuple(sigv)) == NULL) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError,
                 "signature must be a sequence of type names, got %R", sigv);
    return NULL;
  }
  n = PyTuple_Size(seq);
  if (n > MAX_PARAMS) {
    PyErr_Format(PyExc_ValueError, "at most %d parameters", MAX_PARAMS);
    goto fail;
  }
  if ((k = (kernobj *)PyType_GenericAlloc(KernelType, 0)) == NULL) goto fail;
  for (i = 0; i < n; i++) {
    PyObject *tv = PyTuple_GetItem(seq, i);
    const char *ts =
        PyUnicode_Check(tv) ? PyUnicode_AsUTF8AndSize(tv, NULL) : NULL;
    for (t = 0; ts != NULL && t < P_NTYPES; t++)
      if (strcmp(ts, ptype_names[t]) == 0) break;
    if (ts == NULL || t == P_NTYPES) {
      PyErr_Clear();
      PyErr_Format(
          PyExc_ValueError,
          "signature[%zd] must be one of 'ptr', 'u8', 'i8', 'u16', 'i16', "
          "'u32', 'i32', 'u64', 'i64', 'f32', 'f64'; got %R",
          i, tv);
      goto fail;
    }
    k->sig[i] = (unsigned char)t;
  }
  if (m->ptx != NULL && (expect = ptx_params(m->ptx, name)) >= 0 &&
      expect != n) {
    PyErr_Format(PyExc_ValueError,
                 "kernel %s takes %d parameter%s, the signature has %zd", name,
                 expect, expect == 1 ? "" : "s", n);
    goto fail;
  }
  if (dev_enter(m->h.dev) != 0) goto fail;
  if ((r = ctx_push(m->h.dev->ctx, &prev)) == CUDA_SUCCESS) {
    r = cu.cuModuleGetFunction(&fn, m->mod, name);
    ctx_pop(m->h.dev->ctx, prev);
  }
  dev_leave(m->h.dev);
  if (r != CUDA_SUCCESS) {
    raise_cu(r, name);
    goto fail;
  }
  res_init(&k->h, RES_KERNEL, m->h.dev);
  k->fn = fn;
  k->nparams = (int)n;
  k->module = (modobj *)Py_NewRef((PyObject *)m);
  res_use(&m->h);
  k->signature = seq;
  if ((k->name = PyUnicode_FromString(name)) == NULL) {
    Py_DECREF((PyObject *)k);
    return NULL;
  }
  return (PyObject *)k;
fail:
  Py_XDECREF(seq);
  if (k != NULL) {
    k->h.gone = 1; /* never made */
    Py_DECREF((PyObject *)k);
  }
  return NULL;
}

static PyObject *mod_get_device(modobj *o, void *u) {
  (void)u;
  return Py_NewRef(o->device);
}

static PyMethodDef mod_methods[] = {
    {"function", (PyCFunction)(void (*)(void))mod_function,
     METH_VARARGS | METH_KEYWORDS, "function(name, signature) -> Kernel"},
    {"unload", res_close_method, METH_NOARGS,
     "unload(): unloaded once no kernel of it and no launch needs it"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef mod_getset[] = {
    {"device", (getter)mod_get_device, NULL, NULL, NULL},
    {"unloaded", (getter)get_closed, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyType_Slot mod_slots[] = {
    {Py_tp_new, no_new},
    {Py_tp_dealloc, mod_dealloc},
    {Py_tp_methods, mod_methods},
    {Py_tp_getset, mod_getset},
    {Py_tp_members, res_members},
    {Py_tp_doc, "A module loaded by Device.load_module()"},
    {0, NULL}};

static PyType_Spec mod_spec = {"uvcuda.Module", sizeof(modobj), 0,
                               Py_TPFLAGS_DEFAULT, mod_slots};

static void kern_dealloc(kernobj *o) {
  if (o->module == NULL) o->h.gone = 1; /* never made: no use to drop */
  res_dealloc_common(&o->h);
  Py_XDECREF((PyObject *)o->module);
  Py_XDECREF(o->name);
  Py_XDECREF(o->signature);
  free_self((PyObject *)o);
}

static PyObject *kern_repr(kernobj *o) {
  return PyUnicode_FromFormat("<uvcuda.Kernel %U%R>", o->name, o->signature);
}

static PyObject *kern_get_name(kernobj *o, void *u) {
  (void)u;
  return Py_NewRef(o->name);
}

static PyObject *kern_get_signature(kernobj *o, void *u) {
  (void)u;
  return Py_NewRef(o->signature);
}

static PyObject *kern_get_module(kernobj *o, void *u) {
  (void)u;
  return Py_NewRef((PyObject *)o->module);
}

static PyGetSetDef kern_getset[] = {
    {"name", (getter)kern_get_name, NULL, NULL, NULL},
    {"signature", (getter)kern_get_signature, NULL, NULL, NULL},
    {"module", (getter)kern_get_module, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyType_Slot kern_slots[] = {
    {Py_tp_new, no_new},
    {Py_tp_dealloc, kern_dealloc},
    {Py_tp_repr, kern_repr},
    {Py_tp_getset, kern_getset},
    {Py_tp_members, res_members},
    {Py_tp_doc, "A kernel of a Module, with its parameter types"},
    {0, NULL}};

static PyType_Spec kern_spec = {"uvcuda.Kernel", sizeof(kernobj), 0,
                                Py_TPFLAGS_DEFAULT, kern_slots};

static PyType_Slot op_slots[] = {
    {Py_tp_new, no_new},
    {Py_tp_dealloc, op_dealloc},
    {Py_tp_call, op_call},
    {Py_tp_doc, "Work for one stream, run inside an await on it (internal)"},
    {0, NULL}};

static PyType_Spec op_spec = {"uvcuda._uvcuda.Op", sizeof(opobj), 0,
                              Py_TPFLAGS_DEFAULT, op_slots};

int objects_init(PyObject *m) {
  struct {
    PyTypeObject **tp;
    PyType_Spec *spec;
    const char *name;
  } types[] = {{&DeviceType, &dev_spec, "Device"},
               {&StreamType, &stream_spec, "Stream"},
               {&MemoryType, &mem_spec, "DeviceMemory"},
               {&ModuleType, &mod_spec, "Module"},
               {&KernelType, &kern_spec, "Kernel"},
               {&OpType, &op_spec, "Op"}};
  size_t i;
  for (i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
    if ((*types[i].tp = (PyTypeObject *)PyType_FromSpec(types[i].spec)) ==
            NULL ||
        PyModule_AddObjectRef(m, types[i].name, (PyObject *)*types[i].tp) != 0)
      return -1;
  }
  return 0;
}
