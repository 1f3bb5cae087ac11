/* What the promise helper (uvcuda_napi.c) offers this package's addon
 * beyond include/uvcuda/napi.h: not public API, and nothing a third-party
 * addon that compiles the helper needs. JS thread of env. */
#ifndef UVCUDA_NAPI_EXT_H
#define UVCUDA_NAPI_EXT_H

#include <stdint.h>

#include "uvcuda/napi.h"

/* For stats(): the env's loop context, or NULL before its first await (it
 * is never opened here), and the settings it has or will open with. Throws
 * (naming the variable or option) if those settings are invalid. */
napi_status uvcuda_napi__settings(napi_env env, uvcuda_loop_t **loop,
                                  uvcuda_completion_t *completion,
                                  uint64_t *spin_budget_ns, int *adaptive);

/* Counts, in stats(), a call rejected before it was handed to its stream
 * for what the stream would have rejected it for (a device known to be
 * faulted), as an await that was rejected: awaited and rejected, the env's
 * loop context opened as by an await. Call it before throwing the
 * rejection's error. Fails (thrown, uncounted) where an await would: the
 * env's settings are invalid. */
napi_status uvcuda_napi__count_rejected(napi_env env);

/* Makes err show as Node core shows its own errors (`TypeError [CODE]:
 * message` in its stack and String(err)); call it once its message is
 * final. */
napi_status uvcuda_napi__show_code(napi_env env, napi_value err);

/* uvcuda's Error for err (code, errno, cudaResult) with message msg, shown
 * as above. */
napi_status uvcuda_napi__error_msg(napi_env env, int err, const char *msg,
                                   napi_value *error);

#endif
