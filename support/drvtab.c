/* See drvtab.h. */
#include "drvtab.h"

#include <string.h>

#include "uvcuda.h"

struct entry {
  const char *name;
  int version, required;
  size_t offset;
};

#define DRVTAB_ROW(name, ver, params) {#name, ver, 1, offsetof(drvtab_t, name)},
#define DRVTAB_OPT_ROW(name, ver, params) \
  {#name, ver, 0, offsetof(drvtab_t, name)},
static const struct entry entries[] = {
    UVCUDA_CU_PFNS_LIB(DRVTAB_ROW) UVCUDA_CU_PFNS_SUPPORT(DRVTAB_ROW)
        UVCUDA_CU_PFNS_SUPPORT_OPTIONAL(DRVTAB_OPT_ROW)};
#undef DRVTAB_ROW
#undef DRVTAB_OPT_ROW

int drvtab_resolve(drvtab_t *t, drvtab_miss_t *miss) {
  drvtab_miss_t none;
  size_t i;
  int err, first;

  if (miss == NULL) miss = &none;
  memset(miss, 0, sizeof(*miss));
  memset(t, 0, sizeof(*t));
  if ((first = uvcuda_driver_load()) != 0) return first;
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
