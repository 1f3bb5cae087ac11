/* Error helpers shared by lib/ (the public codes are in uvcuda.h). */
#ifndef UVCUDA_ERROR_H
#define UVCUDA_ERROR_H

#include "uvcuda.h"

/* A device op returns 0, a negative uvcuda error or a positive CUresult. */
int uvcuda__op_result(int r);

#endif
