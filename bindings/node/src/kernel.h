/* The Kernel class: a function of a Module with the parameter types its
 * launches marshal their arguments by ('ptr', 'u32', 'f32', ...: one per
 * parameter, checked against the kernel where the driver or the PTX says
 * how many). A Kernel holds its Module. JS thread. */
#ifndef UVN_KERNEL_H
#define UVN_KERNEL_H

#include <node_api.h>
#include <stdint.h>

#include "driver.h"
#include "res.h"

#define UVN_MAX_PARAMS 64

struct uvn_env;
struct uvn_module;
struct uvn_op;

struct uvn_kernel {
  struct uvn_res h; /* h.holds: its Module */
  CUfunction fn;
  int nparams;
  unsigned char sig[UVN_MAX_PARAMS]; /* parameter types, by index in kernel.c's table */
  char name[256];
};

/* A signature: an array of parameter type names, into sig[0..*n). 0, or
 * throws (TypeError ERR_INVALID_ARG_TYPE, ERR_INVALID_ARG_VALUE for another
 * name, RangeError past UVN_MAX_PARAMS) and returns -1. */
int uvn_kernel_signature(napi_env env, napi_value v, unsigned char *sig, uint32_t *n);
/* module.getFunction(name, signature): the Kernel `name` of m with
 * signature sig[0..n), its `module` property module_obj. ERR_INVALID_ARG_VALUE
 * where the kernel takes another number of parameters. Throws and returns
 * NULL. */
napi_value uvn_kernel_new(napi_env env, struct uvn_module *m, napi_value module_obj,
                          const char *name, const unsigned char *sig, uint32_t n);
/* A launch's `args` (undefined: none) by k's signature into o's parameter
 * slots. A DeviceMemory argument must be usable on o's device (memory.h's
 * affinity); o holds it and it is appended to keep[*nkeep]. 0, or throws
 * and returns -1. */
int uvn_kernel_marshal(napi_env env, const struct uvn_kernel *k, napi_value args,
                       struct uvn_op *o, napi_value *keep, size_t *nkeep);

/* Defines Kernel on exports. */
napi_status uvn_kernel_define(napi_env env, napi_value exports, struct uvn_env *ue);

#endif
