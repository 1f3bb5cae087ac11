/* Error names and messages, from one table (as libuv's uv-common.c). */
#include "driver.h"
#include "error.h"

#include <stdio.h>

/* A device op may return a CUresult (positive) or a uvcuda error. */
int uvcuda__op_result(int r) {
  if (r > 0) return r < 10000 ? UVCUDA_ECUDA(r) : UVCUDA_EINVAL;
  return r;
}

int uvcuda_cuda_result(int err) {
  int r = UVCUDA_ECUDA_BASE - err;
  return (err < UVCUDA_ECUDA_BASE && r > 0 && r < 10000) ? r : 0;
}

static const char *cuda_text(int r, int want_name) {
  const char *s = NULL;
  if (uvcuda__driver_loaded()) {
    if (want_name)
      uvcuda__drv.cuGetErrorName((CUresult)r, &s);
    else
      uvcuda__drv.cuGetErrorString((CUresult)r, &s);
  }
  if (s != NULL) return s;
  return want_name ? "CUDA_ERROR"
                   : "CUDA driver error (code not known to the driver)";
}

static const struct {
  int err;
  const char *name;
  const char *msg;
} own[] = {
#define UVCUDA__ERR_ROW(name, val, msg) {UVCUDA_##name, "UVCUDA_" #name, msg},
    UVCUDA_ERRNO_MAP(UVCUDA__ERR_ROW)
#undef UVCUDA__ERR_ROW
};

/* want_name: the symbolic name, else the message. */
static const char *describe(int err, int want_name) {
  unsigned i;
  int r;
  for (i = 0; i < sizeof(own) / sizeof(own[0]); i++)
    if (own[i].err == err) return want_name ? own[i].name : own[i].msg;
  if ((r = uvcuda_cuda_result(err)) != 0) return cuda_text(r, want_name);
  if (err == 0) return want_name ? "OK" : "success";
  /* uv_strerror leaks a string per unknown code; the _r forms do not. */
  {
    static _Thread_local char buf[96];
    return want_name ? uv_err_name_r(err, buf, sizeof(buf))
                     : uv_strerror_r(err, buf, sizeof(buf));
  }
}

const char *uvcuda_strerror(int err) { return describe(err, 0); }

const char *uvcuda_err_name(int err) { return describe(err, 1); }
