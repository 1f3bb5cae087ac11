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
  return want_name ? "CUDA_ERROR" : "CUDA driver error (code not known to the driver)";
}

const char *uvcuda_strerror(int err) {
  int r;
  switch (err) {
#define UVCUDA__STRERROR(name, val, msg) case UVCUDA_##name: return msg;
    UVCUDA_ERRNO_MAP(UVCUDA__STRERROR)
#undef UVCUDA__STRERROR
  }
  r = uvcuda_cuda_result(err);
  if (r) return cuda_text(r, 0);
  if (err == 0) return "success";
  /* uv_strerror leaks a string per unknown code; the _r form does not. */
  {
    static _Thread_local char buf[96];
    return uv_strerror_r(err, buf, sizeof(buf));
  }
}

const char *uvcuda_err_name(int err) {
  int r;
  switch (err) {
#define UVCUDA__ERRNAME(name, val, msg) case UVCUDA_##name: return "UVCUDA_" #name;
    UVCUDA_ERRNO_MAP(UVCUDA__ERRNAME)
#undef UVCUDA__ERRNAME
  }
  r = uvcuda_cuda_result(err);
  if (r) return cuda_text(r, 1);
  if (err == 0) return "OK";
  {
    static _Thread_local char buf[48];
    return uv_err_name_r(err, buf, sizeof(buf));
  }
}
