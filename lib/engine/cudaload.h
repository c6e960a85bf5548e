/* cudaload.h: the CUDA device kind of a build with CUDA, whose code is
 * opened on first use (lib/engine/cudaload.c, lib/cuda/library.h). */
#ifndef PCG_CUDALOAD_H
#define PCG_CUDALOAD_H

#include "device.h"

/* The entry of the table of kinds (lib/engine/device.c): name "cuda", hooks that
 * open libpcg-cuda.so on the first call and fail with err, saying why, when
 * it cannot be opened. */
extern const pcg_device_kind pcg_cuda_lazy_kind;

#endif
