/* The lifecycle fuzzer's core: one fz drives one libuv loop with one uvcuda
 * context, on the calling thread. */
#ifndef UVCUDA_FUZZ_LIFECYCLE_H
#define UVCUDA_FUZZ_LIFECYCLE_H

#include "tu.h"

struct fz;
extern CUcontext fuzz_ctx1; /* device 1's primary context, or NULL */

/* ndev: 1, or 2 with a second simulated device that may fault. */
struct fz *fuzz_new(uint64_t seed, int ndev);
int fuzz_step(struct fz *z, unsigned action);
/* Closes everything; returns nonzero if an invariant was violated. */
int fuzz_finish(struct fz *z);
void fuzz_free(struct fz *z);
const char *fuzz_what(struct fz *z);
uint64_t fuzz_rand(struct fz *z);

#endif
