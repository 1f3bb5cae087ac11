/* See show.h. */
#include "show.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

static void js_string(napi_env env, napi_value v, char *buf, size_t size) {
  napi_value str;
  size_t len = 0;
  buf[0] = '\0';
  if (napi_coerce_to_string(env, v, &str) == napi_ok)
    napi_get_value_string_utf8(env, str, buf, size, &len);
}

const char *uvn_show(napi_env env, napi_value v, char *buf, size_t size) {
  napi_valuetype t;
  char tmp[128];
  bool is = false;
  if (v == NULL || napi_typeof(env, v, &t) != napi_ok) {
    snprintf(buf, size, "undefined");
    return buf;
  }
  switch (t) {
    case napi_undefined: snprintf(buf, size, "undefined"); break;
    case napi_null: snprintf(buf, size, "null"); break;
    case napi_boolean:
    case napi_number:
      js_string(env, v, buf, size); /* NaN, 4294967296, 1e+21, -8, true */
      break;
    case napi_bigint:
      js_string(env, v, tmp, sizeof(tmp));
      snprintf(buf, size, "%sn", tmp);
      break;
    case napi_string: {
      size_t len = 0;
      napi_get_value_string_utf8(env, v, tmp, 41, &len);
      snprintf(buf, size, "type string ('%s%s')", tmp, len >= 40 ? "..." : "");
      break;
    }
    case napi_symbol: snprintf(buf, size, "a symbol"); break;
    case napi_function: snprintf(buf, size, "a function"); break;
    default: {
      napi_value ctor, name;
      size_t len = 0;
      if (napi_is_array(env, v, &is) == napi_ok && is) {
        snprintf(buf, size, "an array");
        break;
      }
      tmp[0] = '\0';
      if (napi_get_named_property(env, v, "constructor", &ctor) == napi_ok &&
          napi_typeof(env, ctor, &t) == napi_ok && t == napi_function &&
          napi_get_named_property(env, ctor, "name", &name) == napi_ok &&
          napi_typeof(env, name, &t) == napi_ok && t == napi_string)
        napi_get_value_string_utf8(env, name, tmp, 64, &len);
      if (tmp[0]) snprintf(buf, size, "an instance of %s", tmp);
      else snprintf(buf, size, "an object");
      /* A getter of `constructor` may have thrown: not ours to report. */
      {
        bool pending = false;
        napi_value ignored;
        if (napi_is_exception_pending(env, &pending) == napi_ok && pending)
          napi_get_and_clear_last_exception(env, &ignored);
      }
      break;
    }
  }
  return buf;
}

/* util.inspect reads at most 10000 units of a string (maxStringLength). */
#define INSPECT_MAX 10000
#define SHOWN_MAX UVN_SHOWN_MAX

/* Units are written up to SHOWN_MAX + 1: enough to know that the cut
 * applies. */
static void show_unit(struct uvn_shown *w, char16_t c) {
  if (w->n <= SHOWN_MAX) w->u[w->n++] = c;
}

static void show_ascii(struct uvn_shown *w, const char *p) {
  while (*p) show_unit(w, (char16_t)(unsigned char)*p++);
}

/* The string v as util.inspect (default options) shows it, read as UTF-16
 * units as Node reads it, then cut as ERR_INVALID_ARG_VALUE cuts it: past
 * 128 units the first 128 (a surrogate pair the cut splits keeps its high
 * half, as String.prototype.slice keeps it) and "...". Node's
 * formatPrimitive and strEscape: of a string longer than 10000 units only
 * the first 10000 are shown; one longer than 76 units (breakLength 80 - 4)
 * is split after each "\n", the lines joined by " +\n  ", each quoted on
 * its own. A line is in single quotes, unless it has one: then double
 * quotes if it has none, else backticks if it has neither them nor "${",
 * else single quotes with \'. Escaped: the single quote where it quotes,
 * the backslash, C0 controls (\b \t \n \x0B \f \r, else \xHH), DEL and C1
 * (\xHH, upper-case hex), and a lone surrogate (\uhhhh, lower-case hex). */
void uvn_show_string(napi_env env, napi_value v, struct uvn_shown *w) {
  static const char *const ctl[] = {"\\b", "\\t", "\\n", "\\x0B", "\\f", "\\r"};
  size_t len = 0, start = 0, end, i;
  char16_t *s;
  char esc[8];
  int split;

  w->n = 0;
  if (napi_get_value_string_utf16(env, v, NULL, 0, &len) != napi_ok) return;
  if (len > INSPECT_MAX) len = INSPECT_MAX;
  if ((s = malloc((len + 1) * sizeof(*s))) == NULL) return;
  if (napi_get_value_string_utf16(env, v, s, len + 1, &len) != napi_ok) len = 0;
  split = len > 16 && len > 80 - 4;
  do {
    char16_t quote = '\'';
    int has_single = 0, has_double = 0, has_tick = 0, has_tpl = 0;
    end = start;
    if (split) {
      while (end < len && s[end] != '\n') end++;
      if (end < len) end++; /* the "\n" ends its line */
    } else {
      end = len;
    }
    for (i = start; i < end; i++) {
      if (s[i] == '\'') has_single = 1;
      else if (s[i] == '"') has_double = 1;
      else if (s[i] == '`') has_tick = 1;
      else if (s[i] == '$' && i + 1 < end && s[i + 1] == '{') has_tpl = 1;
    }
    if (has_single) {
      if (!has_double) quote = '"';
      else if (!has_tick && !has_tpl) quote = '`';
    }
    if (start > 0) show_ascii(w, " +\n  ");
    show_unit(w, quote);
    for (i = start; i < end && w->n <= SHOWN_MAX; i++) {
      char16_t c = s[i];
      if (c == '\\' || (c == '\'' && quote == '\'')) {
        snprintf(esc, sizeof(esc), "\\%c", (char)c);
      } else if (c < 0x20 || (c >= 0x7f && c <= 0x9f)) {
        if (c >= 8 && c <= 13) snprintf(esc, sizeof(esc), "%s", ctl[c - 8]);
        else snprintf(esc, sizeof(esc), "\\x%02X", (unsigned)c);
      } else if (c >= 0xd800 && c <= 0xdfff) {
        if (c <= 0xdbff && i + 1 < end && s[i + 1] >= 0xdc00 && s[i + 1] <= 0xdfff) {
          show_unit(w, c); /* a pair, as it is */
          show_unit(w, s[++i]);
          continue;
        }
        snprintf(esc, sizeof(esc), "\\u%x", (unsigned)c);
      } else {
        show_unit(w, c);
        continue;
      }
      show_ascii(w, esc);
    }
    show_unit(w, quote);
    start = end;
  } while (start < len && w->n <= SHOWN_MAX);
  free(s);
  if (w->n > SHOWN_MAX) {
    w->u[SHOWN_MAX] = w->u[SHOWN_MAX + 1] = w->u[SHOWN_MAX + 2] = '.';
    w->n = SHOWN_MAX + 3;
  }
}
