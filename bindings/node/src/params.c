/* See params.h. */
#include "params.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* A copy of the PTX with comments turned into spaces. */
static char *strip_comments(const char *ptx) {
  size_t n = strlen(ptx), i = 0, j = 0;
  char *out = malloc(n + 1);
  if (out == NULL) return NULL;
  while (i < n) {
    if (ptx[i] == '/' && ptx[i + 1] == '/') {
      while (i < n && ptx[i] != '\n') i++;
      out[j++] = ' ';
    } else if (ptx[i] == '/' && ptx[i + 1] == '*') {
      i += 2;
      while (i < n && !(ptx[i] == '*' && ptx[i + 1] == '/')) i++;
      i = i < n ? i + 2 : n;
      out[j++] = ' ';
    } else {
      out[j++] = ptx[i++];
    }
  }
  out[j] = '\0';
  return out;
}

static int ident_char(char c) {
  return isalnum((unsigned char)c) || c == '_' || c == '$' || c == '%';
}

/* The parameters of .entry `name` in ptx, or -1 if it has no such entry. */
static int ptx_entry_params(const char *ptx, const char *name) {
  size_t nlen = strlen(name);
  char *text = strip_comments(ptx), *p;
  int count = -1;

  if (text == NULL) return -1;
  for (p = text; (p = strstr(p, ".entry")) != NULL;) {
    char *q = p + 6;
    if (p > text && ident_char(p[-1])) { p = q; continue; }
    if (!isspace((unsigned char)*q)) { p = q; continue; }
    while (isspace((unsigned char)*q)) q++;
    if (strncmp(q, name, nlen) != 0 || ident_char(q[nlen])) { p = q; continue; }
    q += nlen;
    while (isspace((unsigned char)*q)) q++;
    count = 0;
    if (*q == '(') {
      char *end = strchr(q, ')'), *r;
      if (end == NULL) { count = -1; break; }
      for (r = q; (r = strstr(r, ".param")) != NULL && r < end; r += 6)
        if (!ident_char(r[6])) count++;
    }
    break;
  }
  free(text);
  return count;
}

int uvn_params_count(CUfunction fn, const char *ptx, const char *name) {
  if (uvn_cu.cuFuncGetParamInfo != NULL) {
    size_t i, off, size;
    for (i = 0; i < 4096; i++) {
      CUresult r = uvn_cu.cuFuncGetParamInfo(fn, i, &off, &size);
      if (r == CUDA_ERROR_INVALID_VALUE) return (int)i;
      if (r != CUDA_SUCCESS) break; /* no answer from the driver */
    }
  }
  return ptx != NULL ? ptx_entry_params(ptx, name) : -1;
}
