/* kind.cu: the hooks of the CUDA device kind (lib/engine/device.h): the device
 * count, the forward pass's backend (backend.cu), asg_build's similar
 * pairs (asg.cu) and the X-codec2 decoder (xcodec2.cu). libpcg's entry in
 * the table of kinds (lib/engine/cudaload.c) gets this one from the library when
 * it opens it (library.cu), and passes each call on. */
extern "C" {
#include "backend.h"
#include "device.h" /* lib/engine/device.h, pcg_device (the CUDA one: cuda_device.h) */
}
#include "cuda/cuda_asg.h"
#include "cuda/cuda_device.h"
#include "cuda/cuda_xcodec2.h"

/* The decoder behind the kind's untyped hooks. */
static void *xc2_open_hook(const xc2_model *m, int device, pcg_err *err)
{
	return xc2_cuda_open(m, device, err);
}

static int xc2_decode_hook(void *g, const int32_t *codes, int T, float *out, pcg_err *err)
{
	return xc2_cuda_decode((xc2_cuda *)g, codes, T, out, err);
}

static void xc2_close_hook(void *g)
{
	xc2_cuda *p = (xc2_cuda *)g;

	xc2_cuda_close(&p);
}

/* By name, in declaration order (C++20 designated initializers). */
extern "C" const pcg_device_kind pcg_cuda_kind = {
	.name = "cuda",
	.label = "CUDA",
	.indexed = 1,
	.host = 0,
	.missing = NULL,
	.count = pcg_cuda_device_count,
	.backend_open = pcg_cuda_backend_open,
	.asg_pairs = asg_cuda_pairs,
	.xc2_open = xc2_open_hook,
	.xc2_decode = xc2_decode_hook,
	.xc2_close = xc2_close_hook,
};
