/* backend.cu: the CUDA backend of the forward pass (lib/engine/backend.h), its
 * table of operations (lib/engine/backend_impl.h) and the CUDA kind's
 * backend_open hook. One stream and one cuBLAS handle per backend; every
 * call checked (check.h).
 *
 * Products: up to PCG_MATMUL_SMALL rows of activations (decode, a
 * verification block) go through gemv below, which streams each weight row
 * once for all rows, reads the weights in their dtype and keeps the
 * activations in f32, as the CPU kernels do (so the two differ only in
 * summation order, and the block costs about one row: the work is
 * memory-bound). More rows (prefill) go through cublasGemmEx with the
 * activations rounded to the weights' dtype and f32 accumulation
 * (CUBLAS_COMPUTE_32F, never TF32). The other operations are one kernel
 * each, in f32, matching lib/engine/backend.c line for line.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

extern "C" {
#include "backend_impl.h"
}
#include "cuda/check.h"
#include "cuda/reduce.cuh"
#include "cuda/rmsnorm.cuh"
#include "cuda/cuda_sampling.h"

struct cuda_ctx {
	int device;
	cudaStream_t stream;
	cublasHandle_t blas;
	int *tokens;          /* the token ids of a pass */
	size_t tokens_bytes;
	void *xlow;           /* activations rounded for cublasGemmEx */
	size_t xlow_bytes;
	float *att_part;      /* attention's per-chunk partial results */
	size_t att_part_bytes;
};

static cuda_ctx *ctx_of(pcg_backend *be) { return (cuda_ctx *)be->ctx; }

/* Every entry point selects the backend's device (a process may hold
 * models on several). */
#define ENTER(be, err) CU_CHECK(cudaSetDevice(ctx_of(be)->device), err)

static unsigned blocks_for(size_t n, unsigned threads)
{
	size_t b = (n + threads - 1) / threads;
	return (unsigned)(b > 65535 ? 65535 : (b ? b : 1));
}

/* ---------------------------------------------------------------- memory */

static int cu_alloc(pcg_backend *be, void **p, size_t bytes, const char *what, pcg_err *err)
{
	ENTER(be, err);
	return pcg_cuda_alloc(p, bytes, what, err);
}

static void cu_free(pcg_backend *be, void *p)
{
	if (p == NULL)
		return;
	cudaSetDevice(ctx_of(be)->device);
	cudaFree(p); /* synchronises; nothing to report to on a free path */
	(void)cudaGetLastError(); /* nor for a later check to find */
}

static int cu_grow(pcg_backend *be, void **p, size_t keep, size_t bytes, const char *what,
		   pcg_err *err)
{
	void *q;

	ENTER(be, err);
	if (pcg_cuda_alloc(&q, bytes, what, err) < 0)
		return -1;
	if (*p != NULL && keep > 0) {
		cudaError_t e = cudaMemcpyAsync(q, *p, keep < bytes ? keep : bytes,
						cudaMemcpyDeviceToDevice, ctx_of(be)->stream);
		if (e != cudaSuccess) {
			cudaFree(q);
			return pcg_fail(err, "%s:%d: %s: copy of %zu bytes: %s", __FILE__, __LINE__,
					what, keep, cudaGetErrorString(e));
		}
		/* the copy reads *p: done before it is freed (said, not left to
		 * cudaFree's implicit synchronisation) */
		CU_CHECK(cudaStreamSynchronize(ctx_of(be)->stream), err);
	}
	cu_free(be, *p);
	*p = q;
	return 0;
}

static int cu_upload(pcg_backend *be, void *dst, const void *src, size_t bytes, pcg_err *err)
{
	ENTER(be, err);
	CU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx_of(be)->stream), err);
	return 0;
}

static int cu_download(pcg_backend *be, void *dst, const void *src, size_t bytes, pcg_err *err)
{
	ENTER(be, err);
	CU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ctx_of(be)->stream), err);
	CU_CHECK(cudaStreamSynchronize(ctx_of(be)->stream), err);
	return 0;
}

/* A grow-only device buffer of the context. */
static int reserve(pcg_backend *be, void **p, size_t *have, size_t bytes, const char *what,
		   pcg_err *err)
{
	if (bytes <= *have)
		return 0;
	cu_free(be, *p);
	*p = NULL;
	*have = 0;
	if (pcg_cuda_alloc(p, bytes, what, err) < 0)
		return -1;
	*have = bytes;
	return 0;
}

/* --------------------------------------------------------------- helpers */

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

/* ----------------------------------------------------------------- embed */

template <typename T>
__global__ void embed_kernel(float *x, const T *E, const int *tokens, int H)
{
	const T *row = E + (size_t)tokens[blockIdx.x] * H;
	float *xt = x + (size_t)blockIdx.x * H;

	for (int i = threadIdx.x; i < H; i += blockDim.x)
		xt[i] = to_f32(row[i]);
}

static int cu_embed(pcg_backend *be, float *x, const pcg_mat *E, const int *tokens, int n,
		    pcg_err *err)
{
	cuda_ctx *c = ctx_of(be);

	ENTER(be, err);
	if (reserve(be, (void **)&c->tokens, &c->tokens_bytes, (size_t)n * sizeof(int),
		    "token ids", err) < 0)
		return -1;
	CU_CHECK(cudaMemcpyAsync(c->tokens, tokens, (size_t)n * sizeof(int),
				 cudaMemcpyHostToDevice, c->stream), err);
	switch (E->dtype) {
	case PCG_F32:
		embed_kernel<<<n, 256, 0, c->stream>>>(x, (const float *)E->data, c->tokens, E->cols);
		break;
	case PCG_F16:
		embed_kernel<<<n, 256, 0, c->stream>>>(x, (const __half *)E->data, c->tokens, E->cols);
		break;
	case PCG_BF16:
		embed_kernel<<<n, 256, 0, c->stream>>>(x, (const __nv_bfloat16 *)E->data, c->tokens,
						       E->cols);
		break;
	default:
		return pcg_fail(err, "embed: dtype %s", pcg_dtype_name(E->dtype));
	}
	CU_LAUNCH(err);
	return 0;
}

/* --------------------------------------------------------------- rmsnorm */

/* LlamaRMSNorm: x * rsqrt(mean(x^2) + eps) in f32, then * weight
 * (lib/cuda/rmsnorm.cuh). */
static int cu_rmsnorm(pcg_backend *be, float *out, const float *x, const float *w, int T, int H,
		      float eps, pcg_err *err)
{
	ENTER(be, err);
	rmsnorm_kernel<<<T, 256, 0, ctx_of(be)->stream>>>(out, x, w, H, eps);
	CU_LAUNCH(err);
	return 0;
}

/* ---------------------------------------------------------------- matmul */

/* Eight weights from p (16-byte aligned) as f32. */
__device__ __forceinline__ void load8(const float *p, float f[8])
{
	const float4 a = ((const float4 *)p)[0], b = ((const float4 *)p)[1];
	f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
	f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
}

__device__ __forceinline__ void load8(const __half *p, float f[8])
{
	const uint4 u = *(const uint4 *)p;
	const __half2 *h = (const __half2 *)&u;
	for (int i = 0; i < 4; i++) {
		const float2 v = __half22float2(h[i]);
		f[2 * i] = v.x;
		f[2 * i + 1] = v.y;
	}
}

__device__ __forceinline__ void load8(const __nv_bfloat16 *p, float f[8])
{
	const uint4 u = *(const uint4 *)p;
	const uint32_t w[4] = { u.x, u.y, u.z, u.w };
	for (int i = 0; i < 4; i++) { /* bf16 -> f32 is a shift: exact */
		f[2 * i] = __uint_as_float(w[i] << 16);
		f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
	}
}

/* y[b * ldy + r] = sum_k x[b * K + k] * W[r][k] for b < B <= GEMV_B: one
 * warp per weight row, which it reads once for all B rows of x. vec: rows
 * and x are 16-byte aligned and K % 8 == 0, so each lane takes 8 weights at
 * a time; otherwise one at a time. */
#define GEMV_B 8
#define GEMV_WARPS 8
#define GEMV_UNROLL 4

/* acc[b] += f . x[b * K + 0..8) for b < B, in order. */
__device__ __forceinline__ void gemv_fma(float acc[GEMV_B], const float f[8], const float *x,
					 int B, int K)
{
#pragma unroll
	for (int b = 0; b < GEMV_B; b++) {
		if (b < B) {
			float xv[8];
			load8(x + (size_t)b * K, xv);
			float s = acc[b];
#pragma unroll
			for (int i = 0; i < 8; i++)
				s = fmaf(f[i], xv[i], s);
			acc[b] = s;
		}
	}
}

template <typename T>
__global__ void gemv_kernel(float *y, int ldy, const float *x, int B, const T *W, int K, int nr,
			    int vec)
{
	const int r = blockIdx.x * GEMV_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
	float acc[GEMV_B];

	if (r >= nr)
		return; /* the whole warp: no block-wide synchronisation follows */
	const T *w = W + (size_t)r * K;
#pragma unroll
	for (int b = 0; b < GEMV_B; b++)
		acc[b] = 0.0f;
	if (vec) {
		/* GEMV_UNROLL loads of 16 bytes in flight per lane, then their
		 * sums in the order of k (the same order as one at a time) */
		int k = lane * 8;
		for (; k + 32 * 8 * (GEMV_UNROLL - 1) < K; k += 32 * 8 * GEMV_UNROLL) {
			float f[GEMV_UNROLL][8];
#pragma unroll
			for (int u = 0; u < GEMV_UNROLL; u++)
				load8(w + k + 32 * 8 * u, f[u]);
#pragma unroll
			for (int u = 0; u < GEMV_UNROLL; u++)
				gemv_fma(acc, f[u], x + k + 32 * 8 * u, B, K);
		}
		for (; k < K; k += 32 * 8) {
			float f[8];
			load8(w + k, f);
			gemv_fma(acc, f, x + k, B, K);
		}
	} else {
		for (int k = lane; k < K; k += 32) {
			const float f = to_f32(w[k]);
#pragma unroll
			for (int b = 0; b < GEMV_B; b++)
				if (b < B)
					acc[b] = fmaf(f, x[(size_t)b * K + k], acc[b]);
		}
	}
#pragma unroll
	for (int b = 0; b < GEMV_B; b++) {
		if (b < B) {
			const float v = warp_sum(acc[b]);
			if (lane == 0)
				y[(size_t)b * ldy + r] = v;
		}
	}
}

template <typename T>
__global__ void round_kernel(T *dst, const float *src, size_t n);
template <>
__global__ void round_kernel(__half *dst, const float *src, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		dst[i] = __float2half_rn(src[i]);
}
template <>
__global__ void round_kernel(__nv_bfloat16 *dst, const float *src, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		dst[i] = __float2bfloat16_rn(src[i]);
}

template <typename T>
static void gemv(cudaStream_t s, float *y, int ldy, const float *x, int B, const void *W,
		 int K, int nr)
{
	const int vec = K % 8 == 0 && (uintptr_t)W % 16 == 0 && (uintptr_t)x % 16 == 0;
	const unsigned grid = (unsigned)((nr + GEMV_WARPS - 1) / GEMV_WARPS);

	gemv_kernel<T><<<grid, 32 * GEMV_WARPS, 0, s>>>(y, ldy, x, B, (const T *)W, K, nr, vec);
}

static int cu_matmul(pcg_backend *be, float *y, int ldy, const float *x, int B, const pcg_mat *W,
		     int r0, int nr, pcg_err *err)
{
	cuda_ctx *c = ctx_of(be);
	const int K = W->cols;
	const size_t es = pcg_dtype_size(W->dtype);
	const void *w = (const char *)W->data + (size_t)r0 * K * es; /* rows r0.. */
	const float one = 1.0f, zero = 0.0f;

	ENTER(be, err);
	if (W->dtype != PCG_F32 && W->dtype != PCG_F16 && W->dtype != PCG_BF16)
		return pcg_fail(err, "matmul: dtype %s", pcg_dtype_name(W->dtype));
	if (B <= PCG_MATMUL_SMALL) {
		if (W->dtype == PCG_F32)
			gemv<float>(c->stream, y, ldy, x, B, w, K, nr);
		else if (W->dtype == PCG_F16)
			gemv<__half>(c->stream, y, ldy, x, B, w, K, nr);
		else
			gemv<__nv_bfloat16>(c->stream, y, ldy, x, B, w, K, nr);
		CU_LAUNCH(err);
		return 0;
	}
	/* Row-major y [B, ldy] = x [B, K] . W^T is, column-major, the
	 * [nr, B] = W' [K, nr]^T . x' [K, B]. */
	cudaDataType t = CUDA_R_32F;
	const void *xin = x;
	if (W->dtype != PCG_F32) {
		const size_t n = (size_t)B * K;
		if (reserve(be, &c->xlow, &c->xlow_bytes, n * 2, "rounded activations", err) < 0)
			return -1;
		if (W->dtype == PCG_F16) {
			t = CUDA_R_16F;
			round_kernel<<<blocks_for(n, 256), 256, 0, c->stream>>>((__half *)c->xlow, x, n);
		} else {
			t = CUDA_R_16BF;
			round_kernel<<<blocks_for(n, 256), 256, 0, c->stream>>>(
				(__nv_bfloat16 *)c->xlow, x, n);
		}
		CU_LAUNCH(err);
		xin = c->xlow;
	}
	CUBLAS_CHECK(cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, nr, B, K, &one, w, t, K, xin,
				  t, K, &zero, y, CUDA_R_32F, ldy, CUBLAS_COMPUTE_32F,
				  CUBLAS_GEMM_DEFAULT), err);
	return 0;
}

/* Any number of rows through gemv, PCG_MATMUL_SMALL at a time: each row's
 * sums do not depend on the others (one lane's share of a row of x, then a
 * warp sum), and no row goes through cuBLAS on rounded activations. */
static int cu_matmul_rows(pcg_backend *be, float *y, int ldy, const float *x, int B,
			  const pcg_mat *W, int r0, int nr, pcg_err *err)
{
	for (int b = 0; b < B; b += PCG_MATMUL_SMALL) {
		const int nb = B - b < PCG_MATMUL_SMALL ? B - b : PCG_MATMUL_SMALL;
		if (cu_matmul(be, y + (size_t)b * ldy, ldy, x + (size_t)b * W->cols, nb, W, r0, nr,
			      err) < 0)
			return -1;
	}
	return 0;
}

/* ------------------------------------------------------------------ rope */

/* apply_rotary_pos_emb with rotate_half: pairs (x[i], x[i + hd/2]) of every
 * head of every row, angle (pos0 + t) * inv_freq[i] in f32. */
__global__ void rope_kernel(float *x, int T, int nh, int hd, int pos0, const float *inv_freq)
{
	const int half = hd / 2;
	const size_t n = (size_t)T * nh * half;

	for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < n;
	     j += (size_t)gridDim.x * blockDim.x) {
		const int i = (int)(j % half);
		const size_t th = j / half; /* t * nh + h */
		const int t = (int)(th / nh);
		const float a = (float)(pos0 + t) * inv_freq[i];
		const float c = cosf(a), s = sinf(a);
		float *v = x + th * hd;
		const float x1 = v[i], x2 = v[i + half];
		v[i] = x1 * c - x2 * s;
		v[i + half] = x2 * c + x1 * s;
	}
}

static int cu_rope(pcg_backend *be, float *x, int T, int n_heads, int hd, int pos0,
		   const float *inv_freq, pcg_err *err)
{
	const size_t n = (size_t)T * n_heads * (hd / 2);

	ENTER(be, err);
	rope_kernel<<<blocks_for(n, 256), 256, 0, ctx_of(be)->stream>>>(x, T, n_heads, hd, pos0,
									 inv_freq);
	CU_LAUNCH(err);
	return 0;
}

/* ------------------------------------------------------------- attention */

/* Flash-decoding. Block (t * nh + h, c) takes query t of head h and the
 * positions [c * chunk, (c + 1) * chunk) of the n = pos0 + t + 1 it sees,
 * with ATT_WARPS warps; each warp takes every ATT_WARPS-th of them with an
 * online softmax (running max m, sum s, and acc = sum exp(score - m) v);
 * lane l holds elements l, l + 32, ... of q and acc (head_dim <= 32 *
 * ATT_PER). The warps' results are merged in shared memory. With one chunk
 * (prefill: T * nh blocks fill the device) the block writes the output;
 * with several (decode and verification blocks: a few hundred blocks
 * instead of nh) it writes its (M, S, acc) to part and attention_merge
 * combines the chunks. Scores q.k / sqrt(hd) and the softmax in f32. */
#define ATT_WARPS 4
#define ATT_PER 8
#define ATT_CHUNK 64    /* positions per block, at least */
#define ATT_SPLIT_MAX 64 /* chunks per (t, h), at most */
__global__ void attention_kernel(float *out, float *part, const float *q, const float *k,
				 const float *v, int pos0, int nh, int group, int hd, int kv_dim,
				 float scale, int chunk)
{
	extern __shared__ float sh[]; /* m[ATT_WARPS], s[ATT_WARPS], acc[ATT_WARPS][hd] */
	const int t = blockIdx.x / nh, h = blockIdx.x % nh, c = blockIdx.y;
	const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	const int n = pos0 + t + 1, j0 = c * chunk, j1 = min(n, j0 + chunk);
	const float *qh = q + ((size_t)t * nh + h) * hd;
	const float *kb = k + (size_t)(h / group) * hd, *vb = v + (size_t)(h / group) * hd;
	float qr[ATT_PER], acc[ATT_PER], m = -INFINITY, s = 0.0f;

#pragma unroll
	for (int i = 0; i < ATT_PER; i++) {
		const int e = lane + 32 * i;
		qr[i] = e < hd ? qh[e] : 0.0f;
		acc[i] = 0.0f;
	}
	for (int j = j0 + warp; j < j1; j += ATT_WARPS) {
		const float *kj = kb + (size_t)j * kv_dim, *vj = vb + (size_t)j * kv_dim;
		float d = 0.0f;
#pragma unroll
		for (int i = 0; i < ATT_PER; i++) {
			const int e = lane + 32 * i;
			if (e < hd)
				d += qr[i] * kj[e];
		}
		d = warp_sum(d) * scale;
		const float mn = fmaxf(m, d);
		const float cold = expf(m - mn), p = expf(d - mn); /* expf(-inf) = 0 */
		s = s * cold + p;
#pragma unroll
		for (int i = 0; i < ATT_PER; i++) {
			const int e = lane + 32 * i;
			if (e < hd)
				acc[i] = acc[i] * cold + p * vj[e];
		}
		m = mn;
	}
	float *sm = sh, *ss = sh + ATT_WARPS, *sa = sh + 2 * ATT_WARPS;
	if (lane == 0) {
		sm[warp] = m;
		ss[warp] = s;
	}
#pragma unroll
	for (int i = 0; i < ATT_PER; i++) {
		const int e = lane + 32 * i;
		if (e < hd)
			sa[warp * hd + e] = acc[i];
	}
	__syncthreads();
	float M = -INFINITY, S = 0.0f;
	for (int w = 0; w < ATT_WARPS; w++)
		M = fmaxf(M, sm[w]);
	for (int w = 0; w < ATT_WARPS; w++)
		if (sm[w] > -INFINITY) /* a warp that saw no position holds nothing */
			S += ss[w] * expf(sm[w] - M);
	/* one chunk: the output; several: this chunk's (M, S, acc) relative to M
	 * (a chunk past n has M = -inf and is skipped by the merge) */
	float *dst = gridDim.y == 1 ? out + ((size_t)t * nh + h) * hd
				    : part + ((size_t)blockIdx.x * gridDim.y + c) * (hd + 2) + 2;
	if (gridDim.y > 1 && threadIdx.x == 0) {
		dst[-2] = M;
		dst[-1] = S;
	}
	for (int e = threadIdx.x; e < hd; e += blockDim.x) {
		float a = 0.0f;
		for (int w = 0; w < ATT_WARPS; w++)
			if (sm[w] > -INFINITY)
				a += sa[w * hd + e] * expf(sm[w] - M);
		dst[e] = gridDim.y == 1 ? a / S : a;
	}
}

/* out[t, h] from the nsplit chunks of (t, h): sum_c acc_c exp(M_c - M) over
 * sum_c S_c exp(M_c - M), M the largest M_c. Chunk 0 always saw position 0. */
__global__ void attention_merge(float *out, const float *part, int nsplit, int hd)
{
	const float *pb = part + (size_t)blockIdx.x * nsplit * (hd + 2);
	float M = -INFINITY, S = 0.0f;

	for (int c = 0; c < nsplit; c++)
		M = fmaxf(M, pb[(size_t)c * (hd + 2)]);
	for (int c = 0; c < nsplit; c++) {
		const float mc = pb[(size_t)c * (hd + 2)];
		if (mc > -INFINITY)
			S += pb[(size_t)c * (hd + 2) + 1] * expf(mc - M);
	}
	for (int e = threadIdx.x; e < hd; e += blockDim.x) {
		float a = 0.0f;
		for (int c = 0; c < nsplit; c++) {
			const float mc = pb[(size_t)c * (hd + 2)];
			if (mc > -INFINITY)
				a += pb[(size_t)c * (hd + 2) + 2 + e] * expf(mc - M);
		}
		out[(size_t)blockIdx.x * hd + e] = a / S;
	}
}

static int cu_attention(pcg_backend *be, float *out, const float *q, const float *k,
			const float *v, int T, int pos0, int nh, int nkv, int hd, pcg_err *err)
{
	cuda_ctx *c = ctx_of(be);
	const size_t shm = (size_t)ATT_WARPS * (2 + hd) * sizeof(float);
	const int n = pos0 + T; /* positions the last query sees */
	int nsplit = 1, chunk = n;

	ENTER(be, err);
	if (hd > 32 * ATT_PER)
		return pcg_fail(err, "attention: head_dim %d (the CUDA kernel takes up to %d)", hd,
				32 * ATT_PER);
	if (T <= PCG_MATMUL_SMALL && n > ATT_CHUNK) { /* too few blocks otherwise */
		nsplit = (n + ATT_CHUNK - 1) / ATT_CHUNK;
		nsplit = nsplit > ATT_SPLIT_MAX ? ATT_SPLIT_MAX : nsplit;
		chunk = (n + nsplit - 1) / nsplit;
		if (reserve(be, (void **)&c->att_part, &c->att_part_bytes,
			    (size_t)T * nh * nsplit * (hd + 2) * sizeof(float), "attention chunks",
			    err) < 0)
			return -1;
	}
	attention_kernel<<<dim3(T * nh, nsplit), 32 * ATT_WARPS, shm, c->stream>>>(
		out, c->att_part, q, k, v, pos0, nh, nh / nkv, hd, nkv * hd,
		1.0f / sqrtf((float)hd), chunk);
	CU_LAUNCH(err);
	if (nsplit > 1) {
		attention_merge<<<T * nh, 64, 0, c->stream>>>(out, c->att_part, nsplit, hd);
		CU_LAUNCH(err);
	}
	return 0;
}

/* ------------------------------------------------------------ elementwise */

__global__ void add_kernel(float *x, const float *y, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		x[i] += y[i];
}

/* LlamaMLP: act_fn(gate_proj(x)) * up_proj(x), act_fn = silu. */
__global__ void swiglu_kernel(float *g, const float *u, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static int cu_add(pcg_backend *be, float *x, const float *y, size_t n, pcg_err *err)
{
	ENTER(be, err);
	add_kernel<<<blocks_for(n, 256), 256, 0, ctx_of(be)->stream>>>(x, y, n);
	CU_LAUNCH(err);
	return 0;
}

static int cu_swiglu(pcg_backend *be, float *g, const float *u, size_t n, pcg_err *err)
{
	ENTER(be, err);
	swiglu_kernel<<<blocks_for(n, 256), 256, 0, ctx_of(be)->stream>>>(g, u, n);
	CU_LAUNCH(err);
	return 0;
}

/* The samplers of lib/cuda/sampling.cu, on the backend's stream. */
static int cu_probs(pcg_backend *be, float *p, const float *logits, int rows, int n,
		    const pcg_sampling *s, pcg_err *err)
{
	ENTER(be, err);
	return pcg_cuda_probs(logits, rows, n, s, p, ctx_of(be)->stream, err);
}

/* ------------------------------------------------------------------ open */

static void cu_close(pcg_backend *be);

/* By name (C++20 designated initializers, in declaration order): several
 * ops share a signature, so an order slip would compile and swap them. */
static const pcg_backend_ops cuda_ops = {
	.alloc = cu_alloc, .free = cu_free, .grow = cu_grow,
	.upload = cu_upload, .download = cu_download,
	.embed = cu_embed, .rmsnorm = cu_rmsnorm, .matmul = cu_matmul,
	.matmul_rows = cu_matmul_rows, .rope = cu_rope, .attention = cu_attention,
	.add = cu_add, .swiglu = cu_swiglu, .probs = cu_probs, .close = cu_close,
};

static int open_ctx(cuda_ctx *c, int device, pcg_err *err)
{
	CU_CHECK(cudaSetDevice(device), err);
	CU_CHECK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), err);
	CUBLAS_CHECK(cublasCreate(&c->blas), err);
	CUBLAS_CHECK(cublasSetStream(c->blas, c->stream), err);
	/* f32 products stay f32: no TF32 (CUBLAS_DEFAULT_MATH, said aloud) */
	CUBLAS_CHECK(cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH), err);
	return 0;
}

/* The CUDA kind's backend_open hook (lib/engine/device.h): device is the CUDA
 * ordinal, checked by pcg_backend_open. */
extern "C" pcg_backend *pcg_cuda_backend_open(int device, pcg_err *err)
{
	pcg_backend *be = (pcg_backend *)calloc(1, sizeof *be);
	cuda_ctx *c = (cuda_ctx *)calloc(1, sizeof *c);

	if (be == NULL || c == NULL) {
		free(be);
		free(c);
		pcg_fail(err, "out of memory");
		return NULL;
	}
	c->device = device;
	be->ops = &cuda_ops;
	be->host = 0;
	be->ctx = c;
	if (open_ctx(c, device, err) < 0) {
		cu_close(be);
		return NULL;
	}
	return be;
}

static void cu_close(pcg_backend *be)
{
	cuda_ctx *c;

	if (be == NULL)
		return;
	c = ctx_of(be);
	if (c != NULL) {
		cudaSetDevice(c->device);
		if (c->stream)
			cudaStreamSynchronize(c->stream);
		cu_free(be, c->tokens);
		cu_free(be, c->xlow);
		cu_free(be, c->att_part);
		if (c->blas)
			cublasDestroy(c->blas);
		if (c->stream)
			cudaStreamDestroy(c->stream);
		free(c);
		(void)cudaGetLastError(); /* leave no ignored error for a later check */
	}
	free(be);
}
