/* device.cu: CUDA device discovery, every runtime call checked with file and
 * line. Without a GPU or a driver the count is 0 and the CPU path serves. */
#include "cuda/device.h"

#include <cuda_runtime.h>
#include <stdio.h>

#define CUDA_CHECK(call, err) \
	do { \
		cudaError_t e_ = (call); \
		if (e_ != cudaSuccess) \
			return pcg_fail(err, "%s:%d: %s: %s", __FILE__, __LINE__, #call, \
					cudaGetErrorString(e_)); \
	} while (0)

int pcg_cuda_device_count(pcg_err *err)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);

	if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver)
		return 0;
	CUDA_CHECK(e, err);
	return n;
}

int pcg_cuda_device_info(int i, char *name, int name_len, size_t *mem_bytes, pcg_err *err)
{
	cudaDeviceProp p;

	CUDA_CHECK(cudaGetDeviceProperties(&p, i), err);
	snprintf(name, (size_t)name_len, "%s", p.name);
	*mem_bytes = p.totalGlobalMem;
	return 0;
}
