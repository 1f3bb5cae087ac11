/* See simprobe.h. */
#include "simprobe.h"

#include <string.h>

#include "uvcuda.h"

int support_driver_is_simulation(void) {
  int (*is_sim)(void);
  void *p = NULL;

  if (uvcuda_driver_symbol(SUPPORT_SIM_PROBE_NAME, SUPPORT_SIM_PROBE_VERSION,
                           &p) != 0)
    return 0;
  memcpy(&is_sim, &p, sizeof(p));
  return is_sim() == 1;
}
