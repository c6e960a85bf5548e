/* rmsnorm.cuh: the one RMSNorm kernel of the CUDA code, for the Llama
 * backend (LlamaRMSNorm, lib/engine/backend.c) and X-codec2's transformer
 * (bs_roformer5.py, lib/codec/xcodec2.c): one block per row t of H,
 *   out[t] = w * (x[t] * r),  r = 1 / sqrt(mean(x[t]^2) + eps),
 * the sum of squares in f32. Each caller passes its own eps; both CPU
 * references compute these products (X-codec2's x * r * w is the same
 * number: IEEE multiplication commutes exactly). blockDim.x: a multiple
 * of 32, at most 1024 (block_sum). */
#ifndef PCG_CUDA_RMSNORM_CUH
#define PCG_CUDA_RMSNORM_CUH

#include "cuda/reduce.cuh"

static __global__ void rmsnorm_kernel(float *out, const float *x, const float *w, int H,
				      float eps)
{
	__shared__ float sh[32];
	const float *xt = x + (size_t)blockIdx.x * H;
	float *ot = out + (size_t)blockIdx.x * H;
	float ss = 0.0f;

	for (int i = threadIdx.x; i < H; i += blockDim.x)
		ss += xt[i] * xt[i];
	ss = block_sum(ss, sh);
	const float r = 1.0f / sqrtf(ss / (float)H + eps);
	for (int i = threadIdx.x; i < H; i += blockDim.x)
		ot[i] = w[i] * (xt[i] * r);
}

#endif
