/* device.c: --device parsing and the question of whether CUDA is here. */
#include "device.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef PCG_CUDA
#include "cuda/device.h"
#endif

int pcg_device_parse(const char *s, int *device, pcg_err *err)
{
	if (s == NULL || *s == '\0' || strcmp(s, "cpu") == 0) {
		*device = PCG_DEVICE_CPU;
		return 0;
	}
	if (strcmp(s, "cuda") == 0) {
		*device = 0;
		return 0;
	}
	if (strncmp(s, "cuda:", 5) == 0 && s[5] >= '0' && s[5] <= '9') {
		char *end;
		errno = 0;
		long n = strtol(s + 5, &end, 10);
		if (*end == '\0' && errno == 0 && n <= INT_MAX) {
			*device = (int)n;
			return 0;
		}
	}
	return pcg_fail(err, "device '%s': want cpu, cuda or cuda:N", s);
}

int pcg_device_have_cuda(void)
{
#ifdef PCG_CUDA
	return 1;
#else
	return 0;
#endif
}

int pcg_device_check(int device, pcg_err *err)
{
	if (device == PCG_DEVICE_CPU)
		return 0;
#ifdef PCG_CUDA
	int n = pcg_cuda_device_count(err);
	if (n < 0)
		return -1;
	if (n == 0)
		return pcg_fail(err, "device cuda:%d: no CUDA device on this machine", device);
	if (device >= n)
		return pcg_fail(err, "device cuda:%d: this machine has %d CUDA device%s", device,
				n, n == 1 ? "" : "s");
	return 0;
#else
	return pcg_fail(err, "device cuda:%d: this build has no CUDA backend "
			"(rebuild with nvcc installed, make CUDA=1)", device);
#endif
}

const char *pcg_device_name(int device, char *buf, int len)
{
	if (device == PCG_DEVICE_CPU)
		snprintf(buf, (size_t)len, "cpu");
	else
		snprintf(buf, (size_t)len, "cuda:%d", device);
	return buf;
}
