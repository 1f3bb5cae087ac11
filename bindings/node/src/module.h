/* The Module class: a loaded PTX or cubin image of one device. Loading
 * JIT-compiles PTX and waits for the device (the README says to load
 * modules before starting GPU work); unloading goes to the reaper thread
 * once no Kernel of it and no launch pending needs it. JS thread. */
#ifndef UVN_MODULE_H
#define UVN_MODULE_H

#include <node_api.h>

#include "driver.h"
#include "res.h"

struct uvn_env;

struct uvn_module {
  struct uvn_res h;
  CUmodule mod;
  char *ptx; /* the PTX text, for parameter counts; NULL for binary images */
};

/* device.loadModule(image): a new Module of the device of `device` (a
 * Device's res) from `image` (a string, or a TypedArray, Buffer, DataView
 * or ArrayBuffer), its `device` property device_obj. Throws and returns
 * NULL. */
napi_value uvn_module_load(napi_env env, struct uvn_res *device, napi_value device_obj,
                           napi_value image);

/* Defines Module on exports. */
napi_status uvn_module_define(napi_env env, napi_value exports, struct uvn_env *ue);

#endif
