/* Values as the addon's error messages show them. JS thread. */
#ifndef UVN_SHOW_H
#define UVN_SHOW_H

#include <node_api.h>
#include <stddef.h>

/* v as JavaScript would print it in a message: NaN, 4294967296, 1e+21,
 * 2n, type string ('text'), null, an array, an instance of Foo, a
 * function... (NULL: undefined). Never throws: an exception a getter of
 * `constructor` raises is cleared. Returns buf. */
const char *uvn_show(napi_env env, napi_value v, char *buf, size_t size);

/* Node's ERR_INVALID_ARG_VALUE shows at most this many UTF-16 units of a
 * value, then "...". */
#define UVN_SHOWN_MAX 128

/* A string as ERR_INVALID_ARG_VALUE shows it: n UTF-16 units of u. */
struct uvn_shown {
  char16_t u[UVN_SHOWN_MAX + 4]; /* room for "..." */
  size_t n;
};

/* The string v as util.inspect (default options) shows it, then cut as
 * Node's ERR_INVALID_ARG_VALUE cuts it (show.c has the rules). */
void uvn_show_string(napi_env env, napi_value v, struct uvn_shown *w);

#endif
