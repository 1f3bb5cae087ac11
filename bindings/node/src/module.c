/* See module.h. */
#include "module.h"

#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "dev.h"
#include "errors.h"
#include "fault.h"
#include "kernel.h"
#include "reaper.h"
#include "show.h"
#include "uvcuda.h"

/* cuModuleUnload waits for the device: on the reaper thread. */
static void module_destroy(napi_env env, struct uvn_res *r) {
  struct uvn_module *m = (struct uvn_module *)r;
  (void)env;
  uvn_reap_module(r->dev->ordinal, r->gen, r->dev->ctx, m->mod);
  free(m->ptx);
  m->ptx = NULL;
}

static const struct uvn_class module_class = {UVN_MODULE, module_destroy, NULL};

/* A PTX text image: NUL-free but for its terminator(s), as C hands PTX to
 * cuModuleLoadData, and naming an .entry (a cubin or fatbin is binary). */
static int is_ptx(const char *img, size_t len) {
  while (len > 0 && img[len - 1] == '\0') len--;
  return len > 0 && memchr(img, '\0', len) == NULL && strstr(img, ".entry") != NULL;
}

/* The image as a NUL-terminated copy (PTX must be), its length in *len.
 * Throws and returns NULL. */
static char *image_copy(napi_env env, napi_value image, size_t *len) {
  napi_valuetype t;
  char *img, got[160];
  void *p;
  *len = 0;
  if (image == NULL || napi_typeof(env, image, &t) != napi_ok) t = napi_undefined;
  if (t == napi_string) {
    napi_get_value_string_utf8(env, image, NULL, 0, len);
    if ((img = malloc(*len + 1)) == NULL) goto nomem;
    napi_get_value_string_utf8(env, image, img, *len + 1, len);
    return img;
  }
  if (uvn_host_bytes(env, image, &p, len, NULL) != 0) {
    uvn_throw_type(env, "image must be a string, a Buffer, a TypedArray, a DataView "
                        "or an ArrayBuffer, got %s",
                   uvn_show(env, image, got, sizeof(got)));
    return NULL;
  }
  if ((img = malloc(*len + 1)) == NULL) goto nomem;
  if (*len) memcpy(img, p, *len);
  img[*len] = '\0';
  return img;
nomem:
  uvn_throw_uv(env, UVCUDA_ENOMEM);
  return NULL;
}

napi_value uvn_module_load(napi_env env, struct uvn_res *device, napi_value device_obj,
                           napi_value image) {
  struct uvn_dev *d = device->dev;
  struct uvn_module *m;
  CUcontext prev;
  CUresult cr;
  uint64_t gen;
  size_t len;
  char *img;

  if ((img = image_copy(env, image, &len)) == NULL) return NULL;
  if (len == 0) {
    free(img);
    return uvn_throw_range(env, "image is empty");
  }
  if (uvn_res_enter(env, d, NULL, 0, &gen) != 0) {
    free(img);
    return NULL;
  }
  m = (struct uvn_module *)uvn_res_new(device->ue, &module_class, sizeof(*m), d, gen);
  if (m == NULL) {
    uvn_res_leave(d);
    free(img);
    return uvn_throw_uv(env, UVCUDA_ENOMEM);
  }
  cr = uvn_dev_push(d, &prev);
  if (cr == CUDA_SUCCESS) cr = uvn_cu.cuModuleLoadData(&m->mod, img);
  uvn_dev_pop(d, prev);
  uvn_res_leave(d);
  if (cr == CUDA_SUCCESS && is_ptx(img, len)) m->ptx = img; /* parameter counts */
  else free(img);
  return uvn_res_made(env, &m->h, cr, "device", device_obj);
}

/* module.getFunction(name, signature: string[]): Kernel. The name as the
 * driver reads it (1 to 255 bytes, no NUL); the signature, one type per
 * parameter, is kernel.c's. */
static napi_value module_get_function(napi_env env, napi_callback_info info) {
  size_t argc = 2, len = 0;
  napi_value argv[2] = {NULL, NULL}, self;
  struct uvn_module *m =
      (struct uvn_module *)uvn_res_this(env, info, UVN_MODULE, 0, &argc, argv, &self);
  unsigned char sig[UVN_MAX_PARAMS];
  char name[256], got[160];
  napi_valuetype t;
  uint32_t n = 0;

  if (m == NULL) return NULL;
  if (argv[0] == NULL || napi_typeof(env, argv[0], &t) != napi_ok || t != napi_string)
    return uvn_throw_type(env, "name must be a string, got %s",
                          uvn_show(env, argv[0], got, sizeof(got)));
  napi_get_value_string_utf8(env, argv[0], NULL, 0, &len);
  if (len == 0 || len >= sizeof(name))
    return uvn_throw_range(env, "name must be 1 to %zu bytes long, got %zu", sizeof(name) - 1,
                           len);
  napi_get_value_string_utf8(env, argv[0], name, sizeof(name), &len);
  /* The driver reads the name up to its first NUL: another kernel. */
  if (strlen(name) != len)
    return uvn_throw_value_shown(env, "The argument 'name' must be a string without null "
                                      "bytes. Received ", argv[0]);
  if (uvn_kernel_signature(env, argv[1], sig, &n) != 0) return NULL;
  return uvn_kernel_new(env, m, self, name, sig, n);
}

napi_status uvn_module_define(napi_env env, napi_value exports, struct uvn_env *ue) {
  const napi_property_descriptor props[] = {
      UVN_GETTER("unloaded", uvn_res_closed_getter, UVN_MODULE),
      UVN_METHOD("getFunction", module_get_function, UVN_MODULE),
      UVN_METHOD("unload", uvn_res_close_method, UVN_MODULE),
  };
  return uvn_res_define_class(env, exports, ue, UVN_MODULE, uvn_res_internal_ctor,
                              (void *)"device.loadModule()", props,
                              sizeof(props) / sizeof(props[0]));
}
