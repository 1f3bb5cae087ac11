/* Arguments of the JS API: readers that check one value and throw a
 * Node-style error naming it (`what`: "byteLength", "args[2]",
 * "options.completion"), and the description tables every method parses
 * its arguments with. Each reader returns 0, or throws and returns -1.
 * JS thread. */
#ifndef UVN_ARGS_H
#define UVN_ARGS_H

#include <node_api.h>
#include <stddef.h>
#include <stdint.h>

/* 1 if v is undefined or left out (NULL), else 0; never throws. */
int uvn_arg_is_undefined(napi_env env, napi_value v);
/* A number (TypeError ERR_INVALID_ARG_TYPE otherwise). */
int uvn_arg_number(napi_env env, napi_value v, const char *what, double *out);
/* An integer number from lo to hi (RangeError ERR_OUT_OF_RANGE naming that
 * range otherwise). */
int uvn_arg_int(napi_env env, napi_value v, const char *what, double lo, double hi,
                double *out);
int uvn_arg_u32(napi_env env, napi_value v, const char *what, uint32_t lo, uint32_t hi,
                uint32_t *out);
/* A size: an integer from lo to 2**53 - 1 (Number.MAX_SAFE_INTEGER). */
int uvn_arg_size(napi_env env, napi_value v, const char *what, size_t lo, size_t *out);
/* A BigInt from 0n to 2n ** 64n - 1n (a CUstream, a device pointer). */
int uvn_arg_handle(napi_env env, napi_value v, const char *what, uint64_t *out);
/* A 64-bit integer: a BigInt, or a safe-integer number; signed or not. */
int uvn_arg_int64(napi_env env, napi_value v, const char *what, int is_signed,
                  uint64_t *out);
/* Host bytes of a TypedArray, Buffer, DataView or ArrayBuffer; a detached
 * one is ERR_INVALID_STATE. */
int uvn_arg_bytes(napi_env env, napi_value v, const char *what, void **data, size_t *len);
/* The same without throwing: 0, or -1 for anything else. *detached (when
 * not NULL) is set when its ArrayBuffer is detached (transferred). */
int uvn_host_bytes(napi_env env, napi_value v, void **data, size_t *len, int *detached);
/* 1 if v is an array as Array.isArray says (a Proxy of one too, as Node
 * core's validateArray), with *out a plain array of its elements; 0 if not
 * (nothing thrown); -1 if a Proxy trap threw. */
int uvn_arg_array(napi_env env, napi_value v, napi_value *out);
/* Grid / block: a number or an array of 1 to 3 positive integers, into
 * out[0..3) (the rest 1). */
int uvn_arg_dim3(napi_env env, napi_value v, const char *what, unsigned out[3]);
/* A string that must be one of names[0..n): its index, or -1 (nothing
 * thrown) for any other string, one cut short at a NUL included. NULL
 * entries match nothing. */
int uvn_str_one_of(napi_env env, napi_value v, const char *const *names, int n);

/* ---- description tables ------------------------------------------------ */

/* What an argument is, and what the parser writes for it at `offset` of the
 * call's own struct. */
enum uvn_arg_type {
  UVN_ARG_RES,    /* an open object of class `kind` (res.h): struct uvn_res * */
  UVN_ARG_BYTES,  /* host bytes (uvn_arg_bytes): struct uvn_bytes */
  UVN_ARG_SIZE,   /* size_t, from lo (uvn_arg_size) */
  UVN_ARG_U32,    /* uint32_t, from lo to hi */
  UVN_ARG_DIM3,   /* unsigned[3] (uvn_arg_dim3) */
  UVN_ARG_HANDLE, /* uint64_t from a BigInt (uvn_arg_handle) */
  UVN_ARG_BOOL,   /* int, 0 or 1: a boolean */
  UVN_ARG_ONE_OF  /* int: the index of the string among names */
};

struct uvn_bytes {
  void *data;
  size_t len;
};

/* One argument: argv[index], or argv[index][key] where key is set (an
 * options bag, read with a plain get as Node core reads one). Optional: an
 * undefined value (or one left out) leaves the output as the caller set it
 * (its default). Entries are read and checked in table order; the first
 * bad one throws. */
struct uvn_arg {
  unsigned index;
  const char *key;
  enum uvn_arg_type type;
  int optional;
  const char *name;   /* as messages name it */
  size_t offset;      /* of the output in the call's struct */
  double lo, hi;      /* UVN_ARG_SIZE: lo; UVN_ARG_U32: both */
  int kind;           /* UVN_ARG_RES */
  const char *const *names; /* UVN_ARG_ONE_OF: what matches; the error lists */
  int nnames, listed_from;  /* names[listed_from..nnames) */
  const char *must;   /* UVN_ARG_ONE_OF: the type its TypeError names
                       * (NULL: "a string") */
};

/* Reads spec[0..n) from argv (as napi_get_cb_info fills it: undefined, or
 * NULL, past the arguments given) into out. 0, or throws and returns -1. */
int uvn_args_parse(napi_env env, const napi_value *argv, const struct uvn_arg *spec,
                   size_t n, void *out);

#define UVN_NARGS(spec) (sizeof(spec) / sizeof((spec)[0]))

#endif
