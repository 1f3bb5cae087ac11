/* The module uvcuda._uvcuda: errors, the driver table, small functions. */
#define _GNU_SOURCE 1 /* dladdr, RTLD_NOLOAD */
#include "ext.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "simprobe.h"

drvtab_t cu;
PyObject *error_class;
PyObject *ready_func;
PyObject *reset_func;

static int driver_err; /* the first load's result, once tried */
static int driver_tried;
static char driver_why[256];

int need_driver(void) {
  drvtab_miss_t miss;
  const char *why;
  if (!driver_tried) {
    driver_err = drvtab_resolve(&cu, &miss);
    driver_tried = 1;
    if (driver_err != 0 && miss.name != NULL) /* the driver is too old */
      snprintf(driver_why, sizeof(driver_why), "%s (ABI %d) is missing",
               miss.name, miss.version);
    else if (driver_err != 0 && (why = uvcuda_driver_dlerror()) != NULL)
      snprintf(driver_why, sizeof(driver_why), "%s", why);
  }
  if (driver_err == 0) return 0;
  raise_uv(driver_err, driver_why);
  return -1;
}

PyObject *make_error(int err, const char *detail) {
  PyObject *e;
  if (error_class == NULL) {
    /* The module used without the package (uvcuda/__init__.py sets it). */
    return PyObject_CallFunction(PyExc_RuntimeError, "s", uvcuda_err_name(err));
  }
  e = detail != NULL && detail[0] != '\0'
          ? PyObject_CallFunction(error_class, "is", err, detail)
          : PyObject_CallFunction(error_class, "i", err);
  return e;
}

PyObject *raise_uv(int err, const char *detail) {
  PyObject *e = make_error(err, detail);
  if (e != NULL) {
    PyErr_SetObject((PyObject *)Py_TYPE(e), e);
    Py_DECREF(e);
  }
  return NULL;
}

PyObject *raise_cu(CUresult r, const char *detail) {
  return raise_uv(UVCUDA_ECUDA(r), detail);
}

int arg_u64(PyObject *v, const char *what, uint64_t *out) {
  PyObject *i;
  unsigned long long x;
  if (PyBool_Check(v) || PyFloat_Check(v)) {
    PyErr_Format(PyExc_TypeError, "%s must be an int, not %s", what,
                 Py_TYPE(v) == &PyBool_Type ? "bool" : "float");
    return -1;
  }
  if ((i = PyNumber_Index(v)) == NULL) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "%s must be an int", what);
    return -1;
  }
  x = PyLong_AsUnsignedLongLong(i);
  if (x == (unsigned long long)-1 && PyErr_Occurred()) {
    /* Negative, or too large: the sign says which. */
    long long s;
    int overflow = 0;
    PyErr_Clear();
    s = PyLong_AsLongLongAndOverflow(i, &overflow);
    Py_DECREF(i);
    if (overflow < 0 || (overflow == 0 && s < 0))
      PyErr_Format(PyExc_ValueError, "%s must not be negative", what);
    else
      PyErr_Format(PyExc_OverflowError, "%s is too large", what);
    return -1;
  }
  Py_DECREF(i);
  *out = x;
  return 0;
}

int arg_size(PyObject *v, const char *what, size_t *out) {
  uint64_t x;
  if (arg_u64(v, what, &x) != 0) return -1;
  if (x > (uint64_t)PY_SSIZE_T_MAX) {
    PyErr_Format(PyExc_OverflowError, "%s is too large", what);
    return -1;
  }
  *out = (size_t)x;
  return 0;
}

/* ---- functions --------------------------------------------------------- */

static int arg_code(PyObject *arg, int *out) {
  long v;
  if (PyBool_Check(arg) || !PyLong_Check(arg)) {
    PyErr_SetString(PyExc_TypeError, "error code must be an int");
    return -1;
  }
  v = PyLong_AsLong(arg);
  if (v == -1 && PyErr_Occurred()) return -1;
  if (v < INT_MIN || v > INT_MAX) {
    PyErr_SetString(PyExc_OverflowError, "error code out of the int range");
    return -1;
  }
  *out = (int)v;
  return 0;
}

static PyObject *py_err_name(PyObject *m, PyObject *arg) {
  int code;
  (void)m;
  if (arg_code(arg, &code) != 0) return NULL;
  return PyUnicode_FromString(uvcuda_err_name(code));
}

static PyObject *py_strerror(PyObject *m, PyObject *arg) {
  int code;
  (void)m;
  if (arg_code(arg, &code) != 0) return NULL;
  return PyUnicode_FromString(uvcuda_strerror(code));
}

static PyObject *py_cuda_result(PyObject *m, PyObject *arg) {
  int code;
  (void)m;
  if (arg_code(arg, &code) != 0) return NULL;
  return PyLong_FromLong(uvcuda_cuda_result(code));
}

static PyObject *py_driver_info(PyObject *m, PyObject *unused) {
  uvcuda_driver_info_t info;
  int err;
  (void)m;
  (void)unused;
  if (need_driver() != 0) return NULL;
  memset(&info, 0, sizeof(info));
  if ((err = uvcuda_driver_info(&info)) != 0) return raise_uv(err, NULL);
  return Py_BuildValue(
      "{s:s,s:i,s:i,s:O,s:O,s:O,s:O}", "path", info.path ? info.path : "",
      "driver_version", info.driver_version, "device_count", info.device_count,
      "memops32", info.memops32 ? Py_True : Py_False, "memops64",
      info.memops64 ? Py_True : Py_False, "host_task_sync",
      info.host_task_sync ? Py_True : Py_False, "simulated",
      support_driver_is_simulation() ? Py_True : Py_False);
}

static PyObject *py_device_count(PyObject *m, PyObject *unused) {
  int n;
  (void)m;
  (void)unused;
  if ((n = dev_count()) < 0) return NULL;
  return PyLong_FromLong(n);
}

static PyObject *py_uv_version(PyObject *m, PyObject *unused) {
  (void)m;
  (void)unused;
  return PyUnicode_FromString(uv_version_string());
}

/* Where a symbol's code lives: the file of the object that defines it. */
static const char *object_of(void *addr) {
  Dl_info info;
  if (addr == NULL || dladdr(addr, &info) == 0 || info.dli_fname == NULL)
    return "?";
  return info.dli_fname;
}

/* _check_libuv(path, version): raises unless the extension module at path
 * (uvloop's) runs on the very libuv this extension calls: its uv_version,
 * found through its own handle (itself, then its dependencies), must be
 * ours. A uvloop that bundles a libuv of its own (PyPI's wheels) either
 * exports another uv_version or hides its symbols: both are refused, as
 * futures on its uv_loop_t would be run by another libuv's code. */
static PyObject *py_check_libuv(PyObject *m, PyObject *args) {
  const char *path;
  unsigned long theirs_version;
  void *h, *theirs;
  void *ours = (void *)&uv_version;
  char msg[1536];
  (void)m;
  if (!PyArg_ParseTuple(args, "sk", &path, &theirs_version)) return NULL;
  h = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
  theirs = h != NULL ? dlsym(h, "uv_version") : NULL;
  if (theirs == ours && theirs_version == uv_version()) {
    dlclose(h);
    Py_RETURN_NONE;
  }
  snprintf(msg, sizeof(msg),
           "uvcuda can't run on this uvloop's own libuv: uvloop (%s) uses "
           "libuv %lu.%lu.%lu %s%s%s, uvcuda uses libuv %s from %s. uvcuda "
           "needs a uvloop linked to that shared libuv (Debian's "
           "python3-uvloop is; PyPI's uvloop wheels bundle their own), or "
           "attach with uvcuda.attach(loop, mode='embedded')",
           path, (theirs_version >> 16) & 0xff, (theirs_version >> 8) & 0xff,
           theirs_version & 0xff,
           theirs != NULL ? "from " : "(its symbols are hidden",
           theirs != NULL ? object_of(theirs) : "",
           theirs != NULL ? "" : ": bundled)", uv_version_string(),
           object_of(ours));
  if (h != NULL) dlclose(h);
  PyErr_SetString(PyExc_RuntimeError, msg);
  return NULL;
}

static PyObject *py_init(PyObject *m, PyObject *args) {
  PyObject *err_cls, *ready, *reset;
  (void)m;
  if (!PyArg_ParseTuple(args, "OOO", &err_cls, &ready, &reset)) return NULL;
  Py_XDECREF(error_class);
  Py_XDECREF(ready_func);
  Py_XDECREF(reset_func);
  error_class = Py_NewRef(err_cls);
  ready_func = Py_NewRef(ready);
  reset_func = Py_NewRef(reset);
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"_init", py_init, METH_VARARGS,
     "_init(CudaError, ready, reset): the package's classes and functions"},
    {"err_name", py_err_name, METH_O,
     "err_name(code) -> str: the symbolic name of a uvcuda error code"},
    {"strerror", py_strerror, METH_O,
     "strerror(code) -> str: the message of a uvcuda error code"},
    {"cuda_result", py_cuda_result, METH_O,
     "cuda_result(code) -> int: the CUresult a uvcuda code carries, or 0"},
    {"driver_info", py_driver_info, METH_NOARGS,
     "driver_info() -> dict: loads the driver; what it is and can do"},
    {"device_count", py_device_count, METH_NOARGS,
     "device_count() -> int: loads the driver; 0 where it has no device"},
    {"uv_version", py_uv_version, METH_NOARGS,
     "uv_version() -> str: the version of the libuv this module runs on"},
    {"_check_libuv", py_check_libuv, METH_VARARGS,
     "_check_libuv(path, version): raises unless the module at path runs on "
     "this module's libuv"},
    {"_device_reset", py_device_reset, METH_O,
     "_device_reset(ordinal): uvcuda_device_reset, blocking (GIL released)"},
    {"health", py_health, METH_O,
     "health(ordinal) -> str: 'healthy' or the sticky error's name"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT,
    "_uvcuda",
    "uvcuda's C extension: see the uvcuda package for the API.",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL};

PyMODINIT_FUNC PyInit__uvcuda(void) {
  PyObject *m = PyModule_Create(&moduledef);
  char v[32];
  if (m == NULL) return NULL;
  snprintf(v, sizeof(v), "%d.%d.%d", UVCUDA_VERSION_MAJOR, UVCUDA_VERSION_MINOR,
           UVCUDA_VERSION_PATCH);
  if (PyModule_AddStringConstant(m, "version", v) != 0 ||
      PyModule_AddStringConstant(m, "package_version", UVCUDA_PY_VERSION) !=
          0 ||
      PyModule_AddIntConstant(m, "ECANCELED", UVCUDA_ECANCELED) != 0 ||
      PyModule_AddIntConstant(m, "ECUDA_BASE", UVCUDA_ECUDA_BASE) != 0 ||
#ifdef Py_LIMITED_API
      PyModule_AddIntConstant(m, "limited_api", Py_LIMITED_API) != 0 ||
#else
      PyModule_AddIntConstant(m, "limited_api", 0) != 0 ||
#endif
      objects_init(m) != 0 || loopctx_init(m) != 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
