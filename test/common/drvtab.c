#include "drvtab.h"

#include <string.h>

#include "uvcuda.h"

int drvtab_resolve(drvtab_t *t, drvtab_miss_t *miss) {
  static const struct {
    const char *name;
    int version, required;
    size_t offset;
  } entries[] = {
#define DRVTAB_ROW(n, v, req) {#n, v, req, offsetof(drvtab_t, n)},
      DRVTAB_ENTRIES(DRVTAB_ROW)
#undef DRVTAB_ROW
  };
  drvtab_miss_t none;
  size_t i;
  int err, first = 0;

  if (miss == NULL) miss = &none;
  memset(miss, 0, sizeof(*miss));
  memset(t, 0, sizeof(*t));
  for (i = 0; i < sizeof(entries) / sizeof(entries[0]); i++) {
    void *p = NULL;
    err = uvcuda_driver_symbol(entries[i].name, entries[i].version, &p);
    if (err == 0) {
      memcpy((char *)t + entries[i].offset, &p, sizeof(p));
    } else if (entries[i].required && first == 0) {
      first = err;
      miss->name = entries[i].name;
      miss->version = entries[i].version;
      miss->err = err;
    } else if (!entries[i].required && miss->opt_name == NULL) {
      miss->opt_name = entries[i].name;
      miss->opt_version = entries[i].version;
      miss->opt_err = err;
    }
  }
  return first;
}
