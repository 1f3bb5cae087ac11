/* Error names and messages, from one table (as libuv's uv-common.c). */
#include "driver.h"
#include "error.h"

#include <stdio.h>
#include <string.h>

/* A device op may return a CUresult (positive) or a uvcuda error. */
int uvcuda__op_result(int r) {
  if (r > 0) return r < 10000 ? UVCUDA_ECUDA(r) : UVCUDA_EINVAL;
  return r;
}

int uvcuda_cuda_result(int err) {
  int r = UVCUDA_ECUDA_BASE - err;
  return (err < UVCUDA_ECUDA_BASE && r > 0 && r < 10000) ? r : 0;
}

/* Without the driver's own text (no driver, or cuInit failed: the usual
 * "no GPU here" case), names come from the header's list and the common
 * failures to load or initialise have a message of their own. */
static const struct {
  int r;
  const char *name;
} cu_names[] = {
#define UVCUDA__CU_NAME(name, val) {val, #name},
    UVCUDA_CU_RESULT(UVCUDA__CU_NAME)
#undef UVCUDA__CU_NAME
};

static const struct {
  int r;
  const char *msg;
} cu_msgs[] = {
    {CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"},
    {CUDA_ERROR_STUB_LIBRARY, "CUDA driver is a stub library"},
    {CUDA_ERROR_DEVICE_UNAVAILABLE,
     "CUDA-capable device(s) is/are busy or unavailable"},
    {CUDA_ERROR_NOT_INITIALIZED, "initialization error"},
    {CUDA_ERROR_SYSTEM_DRIVER_MISMATCH,
     "system has unsupported display driver / cuda driver combination"},
    {CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE,
     "forward compatibility was attempted on non supported HW"},
    {CUDA_ERROR_OUT_OF_MEMORY, "out of memory"},
    {CUDA_ERROR_UNKNOWN, "unknown error"},
};

/* Texts that carry a number: a buffer per thread, one for names and one
 * for messages, so that a name and a message can be used together. */
static _Thread_local char name_buf[64], msg_buf[96];

/* A result neither the driver nor CUDA 13.0's table names (a newer
 * driver's): its number. */
static const char *cuda_unknown(int r, int want_name) {
  if (want_name) {
    snprintf(name_buf, sizeof(name_buf), "CUDA_ERROR_%d", r);
    return name_buf;
  }
  snprintf(msg_buf, sizeof(msg_buf), "unknown CUDA driver error %d", r);
  return msg_buf;
}

/* The message of a result named but without a message here (the driver,
 * which has them all, is not loaded). */
static const char *cuda_named(int r, const char *name) {
  snprintf(msg_buf, sizeof(msg_buf), "CUDA driver error %d (%s)", r, name);
  return msg_buf;
}

static const char *cuda_text(int r, int want_name) {
  const char *s = NULL;
  unsigned i;
  if (uvcuda__driver_loaded()) {
    if (want_name)
      uvcuda__drv.cuGetErrorName((CUresult)r, &s);
    else
      uvcuda__drv.cuGetErrorString((CUresult)r, &s);
  }
  if (s != NULL) return s;
  if (want_name) {
    for (i = 0; i < sizeof(cu_names) / sizeof(cu_names[0]); i++)
      if (cu_names[i].r == r) return cu_names[i].name;
  } else {
    for (i = 0; i < sizeof(cu_msgs) / sizeof(cu_msgs[0]); i++)
      if (cu_msgs[i].r == r) return cu_msgs[i].msg;
    for (i = 0; i < sizeof(cu_names) / sizeof(cu_names[0]); i++)
      if (cu_names[i].r == r) return cuda_named(r, cu_names[i].name);
  }
  return cuda_unknown(r, want_name);
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

/* libuv's codes. Its static strings for the ones it knows (uv_err_name
 * and uv_strerror leak one for any other); else the per-thread buffers. */
static const char *uv_text(int err, int want_name) {
  char probe[64];
  uv_err_name_r(err, probe, sizeof(probe));
  if (strncmp(probe, "Unknown system error", 20) != 0)
    return want_name ? uv_err_name(err) : uv_strerror(err);
  return want_name ? uv_err_name_r(err, name_buf, sizeof(name_buf))
                   : uv_strerror_r(err, msg_buf, sizeof(msg_buf));
}

/* want_name: the symbolic name, else the message. */
static const char *describe(int err, int want_name) {
  unsigned i;
  int r;
  for (i = 0; i < sizeof(own) / sizeof(own[0]); i++)
    if (own[i].err == err) return want_name ? own[i].name : own[i].msg;
  if ((r = uvcuda_cuda_result(err)) != 0) return cuda_text(r, want_name);
  if (err == 0) return want_name ? "OK" : "success";
  return uv_text(err, want_name);
}

const char *uvcuda_strerror(int err) { return describe(err, 0); }

const char *uvcuda_err_name(int err) { return describe(err, 1); }
