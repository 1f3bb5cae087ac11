/* The Device class: a CUDA device as one env sees it (its primary
 * context, opened by uvn_dev_open), an EventEmitter ('fault' and 'reset',
 * events.c) whose methods make the other classes' objects. JS thread. */
#ifndef UVN_DEVICE_H
#define UVN_DEVICE_H

#include <node_api.h>

#include "queue.h"
#include "res.h"

struct uvn_env;

/* A Device object: a weak reference to it, on its dev's `objects`. */
struct uvn_device {
  struct uvn_res h;
  napi_ref weak;
  struct uvcuda__queue node; /* on h.dev->objects; self-linked when not */
};

/* Defines Device on exports. */
napi_status uvn_device_define(napi_env env, napi_value exports, struct uvn_env *ue);

#endif
