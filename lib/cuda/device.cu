/* device.cu: CUDA device discovery, every runtime call checked with file and
 * line. Without a GPU or a driver the count is 0 and the CPU path serves. */
#include "cuda/cuda_device.h"

#include <stdio.h>

#include "cuda/check.h"

int pcg_cuda_device_count(pcg_err *err)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);

	if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver)
		return 0;
	CU_CHECK(e, err);
	return n;
}

int pcg_cuda_device_info(int i, char *name, int name_len, size_t *mem_bytes, pcg_err *err)
{
	cudaDeviceProp p;

	CU_CHECK(cudaGetDeviceProperties(&p, i), err);
	snprintf(name, (size_t)name_len, "%s", p.name);
	*mem_bytes = p.totalGlobalMem;
	return 0;
}

int pcg_cuda_alloc(void **p, size_t bytes, const char *what, pcg_err *err)
{
	cudaError_t e;

	*p = NULL;
	if (bytes == 0)
		bytes = 1;
	e = cudaMalloc(p, bytes);
	if (e == cudaErrorMemoryAllocation) {
		size_t free_b = 0, total = 0;
		(void)cudaGetLastError(); /* not a sticky error: clear it */
		cudaMemGetInfo(&free_b, &total);
		*p = NULL;
		return pcg_fail(err, "%s: out of device memory: %.1f MiB wanted, %.1f of %.1f MiB free",
				what, bytes / 1048576.0, free_b / 1048576.0, total / 1048576.0);
	}
	if (e != cudaSuccess) {
		*p = NULL;
		return pcg_fail(err, "%s: cudaMalloc of %zu bytes: %s", what, bytes,
				cudaGetErrorString(e));
	}
	return 0;
}
