/* cuda_probe.c: the CUDA build links and runs; with no device it skips
 * loudly (exit 77), with devices it lists them. The GPU tests of the CUDA
 * backend (a later issue) start from here. */
#include <stdio.h>

#include "../unit/check.h"
#include "cuda/cuda_device.h"

int main(void)
{
	pcg_err err = { "" };
	int n = pcg_cuda_device_count(&err);

	CHECKF(n >= 0, "%s", err.msg);
	if (n == 0)
		SKIP("no CUDA device: GPU tests skipped (the CUDA code compiled and linked)");
	for (int i = 0; i < n; i++) {
		char name[256];
		size_t mem = 0;
		CHECKF(pcg_cuda_device_info(i, name, sizeof name, &mem, &err) == 0, "%s", err.msg);
		printf("device %d: %s, %.1f GiB\n", i, name, mem / 1073741824.0);
	}
	return check_done("cuda_probe");
}
