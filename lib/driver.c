/* Run-time loading of the CUDA driver. Nothing links libcuda: we dlopen it,
 * take cuGetProcAddress_v2 with dlsym, and resolve the rest through it at
 * the ABI version of the typedef we call each entry through. */
#include "driver.h"
#include "error.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct uvcuda__driver uvcuda__drv;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int load_status;
/* Set once the load succeeded; read without loading (naming an error must
 * not load the driver). */
static int load_ok;
static char load_path[512];
static char load_error[512];
/* Set in a child forked after the load: CUDA does not follow a fork (its
 * use there is undefined), nor do the reactor's and the driver's threads,
 * so nothing may be used. */
static volatile int forked;

static const struct {
  const char *name;
  int version;
} table[] = {
#define UVCUDA__DRV_ROW(name, ver) {#name, ver},
    UVCUDA__DRIVER_REQUIRED(UVCUDA__DRV_ROW)
        UVCUDA__DRIVER_OPTIONAL(UVCUDA__DRV_ROW)
#undef UVCUDA__DRV_ROW
};

int uvcuda__driver_table_size(void) {
  return (int)(sizeof(table) / sizeof(table[0]));
}

const char *uvcuda__driver_table_name(int i) {
  if (i < 0 || i >= uvcuda__driver_table_size()) return NULL;
  return table[i].name;
}

int uvcuda__driver_table_version(int i) {
  if (i < 0 || i >= uvcuda__driver_table_size()) return 0;
  return table[i].version;
}

int uvcuda__driver_table_resolved(int i) {
  const void *const *slots = (const void *const *)&uvcuda__drv;
  int n = uvcuda__driver_table_size();
  /* The struct lists the required entries first, then cuLaunchHostFunc_v2,
   * in table order. */
  if (i < 0 || i >= n) return 0;
  return slots[i] != NULL;
}

/* cuGetProcAddress rejects versions above the driver's and then leaves
 * `status` unwritten: clamp, and initialise it. */
static int resolve(const char *name, int version, void **pfn) {
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  CUresult r;

  *pfn = NULL;
  if (uvcuda__drv.version != 0 && version > uvcuda__drv.version)
    return UVCUDA_ENOTSUP;
  r = uvcuda__drv.cuGetProcAddress(name, pfn, version,
                                   CU_GET_PROC_ADDRESS_DEFAULT, &status);
  if (r != CUDA_SUCCESS) {
    *pfn = NULL;
    return r == CUDA_ERROR_INVALID_VALUE ? UVCUDA_ENOTSUP : UVCUDA_ECUDA(r);
  }
  if (status != CU_GET_PROC_ADDRESS_SUCCESS || *pfn == NULL) {
    *pfn = NULL;
    return UVCUDA_ENOSYM;
  }
  return 0;
}

static int fail_load(int status, const char *what, const char *detail) {
  snprintf(load_error, sizeof(load_error), "%s%s%s", what, detail ? ": " : "",
           detail ? detail : "");
  if (uvcuda__drv.handle) dlclose(uvcuda__drv.handle);
  memset(&uvcuda__drv, 0, sizeof(uvcuda__drv));
  return status;
}

static int do_load(void) {
  const char *path = getenv("UVCUDA_LIBCUDA");
  void *pfn;
  CUresult r;
  int err;

  if (path == NULL || path[0] == '\0') path = "libcuda.so.1";
  snprintf(load_path, sizeof(load_path), "%s", path);

  uvcuda__drv.handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (uvcuda__drv.handle == NULL)
    return fail_load(UVCUDA_ENODRIVER, "dlopen failed", dlerror());
  pfn = dlsym(uvcuda__drv.handle, "cuGetProcAddress_v2");
  if (pfn == NULL)
    return fail_load(UVCUDA_ENOSYM, "no cuGetProcAddress_v2", dlerror());
  memcpy(&uvcuda__drv.cuGetProcAddress, &pfn, sizeof(pfn));

  /* Version first: it bounds every other request. */
  err = resolve("cuDriverGetVersion", 2020, &pfn);
  if (err) return fail_load(UVCUDA_ENOSYM, "no cuDriverGetVersion", NULL);
  memcpy(&uvcuda__drv.cuDriverGetVersion, &pfn, sizeof(pfn));
  r = uvcuda__drv.cuDriverGetVersion(&uvcuda__drv.version);
  if (r != CUDA_SUCCESS)
    return fail_load(UVCUDA_ECUDA(r), "cuDriverGetVersion failed", NULL);
  if (uvcuda__drv.version < UVCUDA__MIN_DRIVER_VERSION) {
    char v[32];
    snprintf(v, sizeof(v), "version %d", uvcuda__drv.version);
    return fail_load(UVCUDA_EDRIVEROLD, "driver older than 12.0", v);
  }

#define UVCUDA__DRV_RESOLVE(name, ver)                                    \
  err = resolve(#name, ver, &pfn);                                        \
  if (err) return fail_load(UVCUDA_ENOSYM, "missing entry point", #name); \
  memcpy(&uvcuda__drv.name, &pfn, sizeof(pfn));
  UVCUDA__DRIVER_REQUIRED(UVCUDA__DRV_RESOLVE)
#undef UVCUDA__DRV_RESOLVE

  /* cuLaunchHostFunc_v2 is asked for by its base name at 13020 (the
   * cuGetProcAddress convention) and, failing that, by its own name. A
   * pointer equal to the 10000 one is the old ABI, not the new entry. */
  if (uvcuda__drv.version >= 13020) {
    if (resolve("cuLaunchHostFunc", 13020, &pfn) != 0 ||
        pfn == (void *)uvcuda__drv.cuLaunchHostFunc) {
      if (resolve("cuLaunchHostFunc_v2", 13020, &pfn) != 0) pfn = NULL;
    }
    memcpy(&uvcuda__drv.cuLaunchHostFunc_v2, &pfn, sizeof(pfn));
  }

  r = uvcuda__drv.cuInit(0);
  if (r != CUDA_SUCCESS) {
    char code[32];
    snprintf(code, sizeof(code), "CUresult %d", (int)r);
    return fail_load(UVCUDA_ECUDA(r), "cuInit failed", code);
  }
  return 0;
}

static void on_fork_child(void) { forked = 1; }

/* The handler goes in before cuInit, so no child forked after it is
 * missed; glibc drops it if this library is unloaded. */
static void load_once_fn(void) {
  if (pthread_atfork(NULL, NULL, on_fork_child) != 0) {
    load_status = fail_load(UVCUDA_ENOMEM, "pthread_atfork failed", NULL);
    return;
  }
  load_status = do_load();
  if (load_status == 0) __atomic_store_n(&load_ok, 1, __ATOMIC_RELEASE);
}

int uvcuda_driver_load(void) {
  pthread_once(&load_once, load_once_fn);
  if (load_status == 0 && forked) return UVCUDA_EFORKED;
  return load_status;
}

int uvcuda__driver_forked(void) { return forked; }

const char *uvcuda_driver_dlerror(void) {
  uvcuda_driver_load();
  return load_status != 0 && load_error[0] ? load_error : NULL;
}

int uvcuda__driver_loaded(void) {
  return __atomic_load_n(&load_ok, __ATOMIC_ACQUIRE) && !forked;
}

const char *uvcuda__driver_path(void) { return load_path; }

int uvcuda_driver_symbol(const char *name, int cuda_version, void **pfn) {
  int err;

  if (pfn == NULL) return UVCUDA_EINVAL;
  *pfn = NULL; /* on every error, as documented */
  if (name == NULL || cuda_version <= 0) return UVCUDA_EINVAL;
  err = uvcuda_driver_load();
  if (err) return err;
  return resolve(name, cuda_version, pfn);
}
