/* The module's functions that are not methods: driverInfo, deviceCount,
 * configure, stats (stats.h), fence (stream.h), errorName, strerror.
 * JS thread. */
#ifndef UVN_FUNCTIONS_H
#define UVN_FUNCTIONS_H

#include <node_api.h>

/* Defines them, and `version`, on exports. */
napi_status uvn_functions_define(napi_env env, napi_value exports);

#endif
