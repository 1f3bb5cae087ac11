/* See driver.h. */
#include "driver.h"

#include <pthread.h>

#include "errors.h"
#include "uvcuda.h"

drvtab_t uvn_cu;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int status;

static void resolve(void) { status = drvtab_resolve(&uvn_cu, NULL); }

int uvn_driver_load(void) {
  pthread_once(&once, resolve);
  return status;
}

int uvn_driver_need(napi_env env) {
  int err = uvn_driver_load();
  if (err == 0) return 0;
  uvn_throw_uv(env, err);
  return -1;
}
