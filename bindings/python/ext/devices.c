/* What the process knows of each device: its primary context, retained on
 * first use for the life of the process (uvcuda.Device(n) is one object per
 * ordinal), the reset lock and the generation (how many resets reached the
 * driver). Every driver call on this module's objects of a device holds
 * the lock for reading (a try: refused while a reset runs); reset holds it
 * for writing. */
#include "ext.h"

#include <stdlib.h>
#include <string.h>

static struct dev *devs;
static int ndevs = -1;

int dev_count(void) {
  int n = 0, i;
  CUresult r;
  if (ndevs >= 0) return ndevs;
  if (need_driver() != 0) return -1;
  r = cu.cuDeviceGetCount(&n);
  if (r == CUDA_ERROR_NO_DEVICE)
    n = 0;
  else if (r != CUDA_SUCCESS)
    return (raise_cu(r, "cuDeviceGetCount"), -1);
  if (n > 0 && (devs = calloc((size_t)n, sizeof(*devs))) == NULL) {
    PyErr_NoMemory();
    return -1;
  }
  for (i = 0; i < n; i++) {
    devs[i].ordinal = i;
    devs[i].cudev = -1;
    pthread_rwlock_init(&devs[i].rw, NULL);
  }
  ndevs = n;
  return n;
}

struct dev *dev_open(int ordinal) {
  struct dev *d;
  CUresult r;
  int n;
  if ((n = dev_count()) < 0) return NULL;
  if (ordinal < 0 || ordinal >= n) {
    PyErr_Format(PyExc_IndexError, "device %d out of range (%d device%s)",
                 ordinal, n, n == 1 ? "" : "s");
    return NULL;
  }
  d = &devs[ordinal];
  if (d->ctx != NULL) return d;
  if ((r = cu.cuDeviceGet(&d->cudev, ordinal)) != CUDA_SUCCESS)
    return (raise_cu(r, "cuDeviceGet"), NULL);
  if ((r = cu.cuDevicePrimaryCtxRetain(&d->ctx, d->cudev)) != CUDA_SUCCESS) {
    d->ctx = NULL;
    return (raise_cu(r, "cuDevicePrimaryCtxRetain"), NULL);
  }
  if (cu.cuDeviceGetName(d->name, sizeof(d->name) - 1, d->cudev) !=
      CUDA_SUCCESS)
    strcpy(d->name, "?");
  cu.cuDeviceGetAttribute(
      &d->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->cudev);
  cu.cuDeviceGetAttribute(
      &d->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d->cudev);
  return d;
}

int dev_enter(struct dev *d) {
  if (pthread_rwlock_tryrdlock(&d->rw) == 0) return 0;
  PyErr_Format(PyExc_RuntimeError, "device %d is being reset", d->ordinal);
  return -1;
}

void dev_leave(struct dev *d) { pthread_rwlock_unlock(&d->rw); }

uint64_t dev_gen(const struct dev *d) {
  return __atomic_load_n(&d->gen, __ATOMIC_ACQUIRE);
}

int dev_of_context(CUcontext c) {
  int i;
  for (i = 0; i < ndevs; i++)
    if (devs[i].ctx != NULL && devs[i].ctx == c) return i;
  return -1;
}

CUresult ctx_push(CUcontext c, CUcontext *prev) {
  CUresult r = cu.cuCtxGetCurrent(prev);
  if (r == CUDA_SUCCESS && *prev != c) r = cu.cuCtxSetCurrent(c);
  if (r != CUDA_SUCCESS) *prev = c;
  return r;
}

void ctx_pop(CUcontext c, CUcontext prev) {
  if (prev != c) cu.cuCtxSetCurrent(prev);
}

static int arg_ordinal(PyObject *arg, int *out) {
  long v;
  if (PyBool_Check(arg) || !PyLong_Check(arg)) {
    PyErr_SetString(PyExc_TypeError, "device must be an int ordinal");
    return -1;
  }
  v = PyLong_AsLong(arg);
  if (v == -1 && PyErr_Occurred()) return -1;
  if (v < 0 || v > 1 << 20) {
    PyErr_Format(PyExc_IndexError, "device %ld out of range", v);
    return -1;
  }
  *out = (int)v;
  return 0;
}

/* A reset that reached the driver ended every object of the device. */
static int reached_driver(int err) {
  return err != UVCUDA_EINVAL && err != UVCUDA_ENODRIVER &&
         err != UVCUDA_ENOSYM && err != UVCUDA_EDRIVEROLD;
}

PyObject *py_device_reset(PyObject *mod, PyObject *arg) {
  struct dev *d;
  int ordinal, err;
  (void)mod;
  if (arg_ordinal(arg, &ordinal) != 0 || (d = dev_open(ordinal)) == NULL)
    return NULL;
  Py_BEGIN_ALLOW_THREADS
  pthread_rwlock_wrlock(&d->rw);
  err = uvcuda_device_reset(ordinal);
  if (reached_driver(err)) __atomic_add_fetch(&d->gen, 1, __ATOMIC_RELEASE);
  pthread_rwlock_unlock(&d->rw);
  Py_END_ALLOW_THREADS
  if (err != 0 && uvcuda_cuda_result(err) != 0)
    return raise_uv(err, "the driver keeps the fault: restart the process");
  if (err != 0) return raise_uv(err, NULL);
  Py_RETURN_NONE;
}

PyObject *py_health(PyObject *mod, PyObject *arg) {
  struct dev *d;
  int ordinal, err;
  (void)mod;
  if (arg_ordinal(arg, &ordinal) != 0 || (d = dev_open(ordinal)) == NULL)
    return NULL;
  if (dev_enter(d) != 0) return NULL;
  err = uvcuda_context_health((uvcuda_context_t)d->ctx);
  dev_leave(d);
  if (err == 0) return PyUnicode_FromString("healthy");
  if (uvcuda_cuda_result(err) == 0)
    return raise_uv(err, "uvcuda_context_health");
  return PyUnicode_FromString(uvcuda_err_name(err));
}
