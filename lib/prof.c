/* The diagnostic step timer (prof.h): built only with -Dprofile=true.
 * Builds that take every C file of lib/ (the Node addon's node-gyp) compile it
 * to nothing. */
#include "prof.h"

#ifdef UVCUDA__PROFILE

#include <stdio.h>

static const char *const name[UVCUDA__P_COUNT] = {"start", "op",    "mark", "timer",
                                                   "idle",  "async", "cb"};
static uint64_t total[UVCUDA__P_COUNT], count[UVCUDA__P_COUNT];

void uvcuda__prof_add(int step, uint64_t ns) {
  total[step] += ns;
  count[step]++;
}

__attribute__((destructor)) static void prof_print(void) {
  int i;
  fprintf(stderr, "uvcuda profile (wall ns on the loop thread): step count total_us mean_ns\n");
  for (i = 0; i < UVCUDA__P_COUNT; i++)
    if (count[i])
      fprintf(stderr, "uvcuda profile %-9s %10llu %12.1f %9.1f\n", name[i],
              (unsigned long long)count[i], total[i] / 1e3,
              (double)total[i] / count[i]);
}
#else
typedef int uvcuda__prof_off; /* ISO C wants a declaration in each file */
#endif
