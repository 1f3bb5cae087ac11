/* How many parameters a kernel takes, so that module.getFunction(name,
 * signature) can refuse a signature of another length (a launch would pass
 * the wrong bytes to the kernel). The driver says, from CUDA 12.4 on
 * (cuFuncGetParamInfo answers CUDA_ERROR_INVALID_VALUE for the first index
 * past the last parameter); else the module's PTX text does: the `.param`
 * declarations in the parenthesised list after `.entry name`. A binary
 * image (cubin, fatbin) on an older driver gives no answer: the signature
 * is then taken as it is. */
#ifndef UVN_PARAMS_H
#define UVN_PARAMS_H

#include "driver.h"

/* The number of parameters of kernel `name` (fn, its CUfunction, from a
 * module whose PTX text is ptx, NULL for a binary image): from
 * cuFuncGetParamInfo, else from the `.entry` in the PTX. -1 when neither
 * says. In fn's context. */
int uvn_params_count(CUfunction fn, const char *ptx, const char *name);

#endif
