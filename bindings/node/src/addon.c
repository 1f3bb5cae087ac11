/* The uvcuda Node addon: its entry point. Each JS class is a file of its
 * own (device.c, stream.c, memory.c, module.c, kernel.c), the module's
 * functions are functions.c's; README.md ("Build for development") maps
 * the rest. The only symbols it exports are Node-API's entry points
 * (uvcuda.map); every other non-static symbol of the addon is uvn_*. */
#include <node_api.h>

#include "device.h"
#include "env.h"
#include "functions.h"
#include "kernel.h"
#include "memory.h"
#include "module.h"
#include "stream.h"

static napi_value init(napi_env env, napi_value exports) {
  struct uvn_env *ue = uvn_env_new(env);
  if (ue == NULL ||
      uvn_device_define(env, exports, ue) != napi_ok ||
      uvn_memory_define(env, exports, ue) != napi_ok ||
      uvn_module_define(env, exports, ue) != napi_ok ||
      uvn_kernel_define(env, exports, ue) != napi_ok ||
      uvn_stream_define(env, exports, ue) != napi_ok ||
      uvn_functions_define(env, exports) != napi_ok)
    return NULL;
  return exports;
}

NAPI_MODULE_INIT() { return init(env, exports); }
