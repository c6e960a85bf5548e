/* device.h: CUDA devices seen by this process; the count is the CUDA
 * device kind's hook (lib/cuda/kind.cu, lib/engine/device.h). Compiled only when
 * nvcc is found. */
#ifndef PCG_CUDA_DEVICE_H
#define PCG_CUDA_DEVICE_H

#include "err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices: 0 when there is no device or no driver
 * (not an error: the CPU path serves), -1 with err for any other failure. */
int pcg_cuda_device_count(pcg_err *err);

/* Name and memory of device i, for logs. Returns 0 or -1 with err. */
int pcg_cuda_device_info(int i, char *name, int name_len, size_t *mem_bytes, pcg_err *err);

#ifdef __cplusplus
}
#endif

#endif
