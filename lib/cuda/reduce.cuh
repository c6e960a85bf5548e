/* reduce.cuh: the warp and block sums the CUDA kernels share. The xor
 * butterfly adds the same two partial sums on every lane at every step
 * (a + b == b + a in IEEE arithmetic), so all lanes end with the same bits. */
#ifndef PCG_CUDA_REDUCE_CUH
#define PCG_CUDA_REDUCE_CUH

template <typename F> static __device__ __forceinline__ F warp_sum(F v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

/* Sum over the block (blockDim.x a multiple of 32, at most 1024), called by
 * every thread; every thread gets the result. sh: 32 values of shared
 * memory, free again when the call returns. */
template <typename F> static __device__ F block_sum(F v, F *sh)
{
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

	v = warp_sum(v);
	__syncthreads(); /* the previous call's readers are done with sh */
	if (lane == 0)
		sh[warp] = v;
	__syncthreads();
	v = lane < (int)(blockDim.x >> 5) ? sh[lane] : F(0);
	return warp_sum(v);
}

#endif
