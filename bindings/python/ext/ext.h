/* uvcuda._uvcuda, the CPython extension of the uvcuda package: what its
 * files share.
 *
 *   module.c   the module: errors, the driver table, small functions
 *   devices.c  what the process knows of each device: its primary context
 *              (retained for the life of the process), its reset lock and
 *              generation
 *   loopctx.c  LoopContext (one uvcuda loop context per asyncio loop), the
 *              awaits it runs and their drains, Pending
 *   objects.c  Device, Stream, DeviceMemory, Module, Kernel and the op
 *              objects their async methods enqueue through
 *
 * Threads: every entry point holds the GIL. uvcuda calls back from inside
 * uv_run, which uvloop runs without the GIL: callbacks take it themselves
 * (PyGILState_Ensure), which is also right where it is held already (the
 * embedded loop runs uv_run NOWAIT holding it).
 *
 * Lifetime of CUDA objects: each Stream, DeviceMemory, Module and Kernel is
 * a `struct res`. `uses` counts what may still make the GPU touch it: ops
 * holding it (an op is held by its await until the GPU is done with it)
 * and awaits on a Stream. destroy()/free()/unload() (or deallocation) set
 * `closed`; the CUDA object goes once closed and unused. A device reset
 * destroys every object of the device: an object of an older generation
 * is never passed to the driver again. */
#ifndef UVCUDA_PY_EXT_H
#define UVCUDA_PY_EXT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdint.h>

#include "drvtab.h"
#include "uvcuda.h"

/* ---- module.c ---- */

extern drvtab_t cu;           /* valid once need_driver() returned 0 */
extern PyObject *error_class; /* uvcuda.CudaError (set by the package) */
extern PyObject *ready_func;  /* uvcuda.ready */
extern PyObject *reset_func;  /* uvcuda.reset */

/* Loads the driver and resolves the table once; 0, or -1 with a CudaError
 * set (UVCUDA_ENODRIVER, ...). */
int need_driver(void);
/* A CudaError for uvcuda error err (a new reference; NULL if even that
 * failed, with the exception set). */
PyObject *make_error(int err, const char *detail);
/* Sets it; returns NULL, for `return raise_uv(...)`. */
PyObject *raise_uv(int err, const char *detail);
PyObject *raise_cu(CUresult r, const char *detail);
/* An int that fits the type (TypeError / OverflowError / ValueError
 * naming `what` otherwise): 0, or -1 with the exception set. */
int arg_u64(PyObject *v, const char *what, uint64_t *out);
int arg_size(PyObject *v, const char *what, size_t *out);

/* ---- devices.c ---- */

struct dev {
  int ordinal;
  CUdevice cudev;
  CUcontext ctx;       /* primary context, retained */
  uint64_t gen;        /* resets that reached the driver (atomic) */
  pthread_rwlock_t rw; /* read: a driver call on its objects; write: reset */
  int cc_major, cc_minor;
  char name[256];
  PyObject *obj; /* its Device object, once made (strong) */
};

int dev_count(void); /* -1 with the exception set */
/* Device `ordinal`, its primary context retained (IndexError, CudaError). */
struct dev *dev_open(int ordinal);
/* The read side of the reset lock: 0, or -1 with RuntimeError set while
 * the device is being reset. */
int dev_enter(struct dev *d);
void dev_leave(struct dev *d);
uint64_t dev_gen(const struct dev *d);
/* Makes c current; *prev is what ctx_pop puts back (as bindings/node's
 * cu_ctx_push: what could not be read or changed is not "restored"). */
CUresult ctx_push(CUcontext c, CUcontext *prev);
void ctx_pop(CUcontext c, CUcontext prev);
/* The ordinal of the device whose primary context is c, or -1. */
int dev_of_context(CUcontext c);
PyObject *py_device_reset(PyObject *mod, PyObject *arg);
PyObject *py_health(PyObject *mod, PyObject *arg);

/* ---- objects.c ---- */

enum { RES_STREAM = 1, RES_MEMORY, RES_MODULE, RES_KERNEL };

typedef struct res {
  PyObject_HEAD
  PyObject *weakrefs;
  int kind;
  int uses;
  int closed;
  int gone; /* the CUDA object is destroyed (or went with a reset) */
  uint64_t gen;
  struct dev *dev;
} res_t;

typedef struct {
  res_t h;
  CUstream stream;
  PyObject *device;
} stream_t;

extern PyTypeObject *DeviceType, *StreamType, *MemoryType, *ModuleType,
    *KernelType, *OpType;

int objects_init(PyObject *m);
void res_use(res_t *r);
void res_unuse(res_t *r);
/* Open and of the device's current generation: 0, or -1 with ValueError
 * (closed) or CudaError CUDA_ERROR_CONTEXT_IS_DESTROYED (a reset ended
 * it) set. */
int res_check(res_t *r);
/* The GPU ran op's work (its await completed): a copy from the device
 * lands in its Python buffer. Anything but an op: nothing. */
void op_finish(PyObject *op);
/* Drops every use an await's held objects have (a list of them). */
void res_unuse_list(PyObject *list);
/* The CUstream of a stream-like object: a uvcuda.Stream (*ours), an int,
 * __cuda_stream__(), .cuda_stream (PyTorch), .ptr (CuPy) or __int__
 * (cuda-python's CUstream). *dev_hint: the device the object names
 * (.device_index, .device_id), or -1. 0, or -1 with TypeError/ValueError. */
int stream_resolve(PyObject *o, CUstream *h, stream_t **ours, int *dev_hint);

/* ---- loopctx.c ---- */

struct req;
/* The await whose op is running on this thread, or NULL. */
extern _Thread_local struct req *cur_req;
CUstream req_stream(const struct req *r);
/* Holds obj until the GPU is done with the running op's work (an op
 * object that enqueue_* ran). 0, or -1 with the exception set. */
int req_keep(struct req *r, PyObject *obj);
int loopctx_init(PyObject *m);

#endif
