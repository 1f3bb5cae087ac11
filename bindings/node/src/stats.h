/* stats(): this env's uvcuda loop counters (uvcuda_stats_t), the promise
 * helper's counts (uvcuda_napi_stats_t) and the settings in use. Not a GPU
 * call: before the env's first await it needs no driver, reads zeros and
 * the settings to come, and leaves configure() possible. JS thread. */
#ifndef UVN_STATS_H
#define UVN_STATS_H

#include <node_api.h>

napi_value uvn_stats_get(napi_env env, napi_callback_info info);

#endif
