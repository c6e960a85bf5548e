/* asg.cu: asg_build's similar pairs on a CUDA device: blocked f32 cuBLAS
 * products of the normalised rows, thresholded on the device (the design
 * and the memory bound are in cuda/cuda_asg.h). Every CUDA and cuBLAS call is
 * checked; device memory comes from pcg_cuda_alloc. */
#include "cuda/cuda_asg.h"

#include <stdint.h>
#include <stdlib.h>

#include "cuda/check.h"

enum { THRESHOLD_THREADS = 256 }; /* one row of a block per thread block */

/* The first pair list holds 2^20 pairs (12 MiB); a block that finds more
 * grows it and thresholds again (the similarities are still there). */
static const size_t FIRST_CAP = (size_t)1 << 20;

/* Most device memory one block of similarities takes (see block_rows). */
static const size_t BLOCK_BYTES_MAX = (size_t)1 << 30;

/* Block C [R, W] holds cos(E_{i0 + a}, E_{i0 + b}) at C[a * W + b]. Appends
 * (i0 + a, i0 + b, C[a, b]) for b > a and C[a, b] > theta to P while fewer
 * than cap are there; *count counts them all, so that the caller sees when
 * P was too small. One thread block per row; one atomic per warp and step:
 * the warp's hits take consecutive slots in lane order. The loop bound is
 * the same for the whole block, so every lane reaches each ballot. */
__global__ void threshold(const float *C, long W, uint32_t i0, float theta, asg_pair *P,
			  unsigned long long cap, unsigned long long *count)
{
	const unsigned a = blockIdx.x, lane = threadIdx.x & 31;
	const float *row = C + (size_t)a * W;

	for (long b0 = (long)a + 1; b0 < W; b0 += blockDim.x) {
		long b = b0 + threadIdx.x;
		float c = b < W ? row[b] : 0.0f;
		bool hit = b < W && c > theta;
		unsigned mask = __ballot_sync(0xffffffffu, hit);
		unsigned long long base = 0;

		if (mask == 0)
			continue;
		if (lane == 0)
			base = atomicAdd(count, (unsigned long long)__popc(mask));
		base = __shfl_sync(0xffffffffu, base, 0);
		if (hit) {
			unsigned long long k = base + __popc(mask & ((1u << lane) - 1));
			if (k < cap)
				P[k] = asg_pair{ i0 + a, i0 + (uint32_t)b, c };
		}
	}
}

/* What one call holds on the device; released on every path. */
typedef struct gpu {
	int prev_device;           /* the caller's current device, restored */
	cublasHandle_t blas;
	float *E;                  /* (n, d) normalised rows */
	float *C;                  /* (rows, n) one block of similarities */
	asg_pair *P;               /* (cap) the block's pairs */
	unsigned long long *count; /* pairs the last threshold found */
	size_t cap;
} gpu;

/* Rows per block: the caller's, else the most whose similarities fit in a
 * quarter of the free memory (the rest is for the pair list and cuBLAS's
 * workspace) and in BLOCK_BYTES_MAX; past that, larger GEMMs gain little
 * and the diagonal squares, computed and discarded, cost rows / n of the
 * work (6% for 4,096 of 65,536 rows). */
static int block_rows(int n, int rows, size_t free_bytes)
{
	size_t budget = free_bytes / 4 < BLOCK_BYTES_MAX ? free_bytes / 4 : BLOCK_BYTES_MAX;
	size_t r = rows > 0 ? (size_t)rows : budget / ((size_t)n * sizeof(float));

	if (r < 1)
		r = 1; /* then the allocation says how much is missing */
	return r > (size_t)n ? n : (int)r;
}

/* Thresholds block C [R, W] into g->P, growing it until the block's pairs
 * fit; returns their count in *found. */
static int threshold_block(gpu *g, int R, long W, uint32_t i0, float theta,
			   unsigned long long *found, pcg_err *err)
{
	for (;;) {
		CU_CHECK(cudaMemset(g->count, 0, sizeof *g->count), err);
		threshold<<<R, THRESHOLD_THREADS>>>(g->C, W, i0, theta, g->P, g->cap, g->count);
		CU_LAUNCH(err);
		CU_CHECK(cudaMemcpy(found, g->count, sizeof *found, cudaMemcpyDeviceToHost), err);
		if (*found <= g->cap)
			return 0;
		CU_CHECK(cudaFree(g->P), err);
		g->P = NULL;
		g->cap = *found + *found / 4;
		if (pcg_cuda_alloc((void **)&g->P, g->cap * sizeof *g->P, "ASG pair list", err) < 0)
			return -1;
	}
}

static int run(gpu *g, int device, const float *E, int n, int d, float theta, int rows,
	       asg_progress_fn *progress, void *progress_ctx, asg_pair **pairs,
	       size_t *npairs, pcg_err *err)
{
	const float one = 1.0f, zero = 0.0f;
	const double total = (double)n * (n - 1) / 2;
	size_t free_bytes, total_bytes;
	double done = 0.0;
	int R, prev;

	CU_CHECK(cudaGetDevice(&prev), err);
	g->prev_device = prev;
	CU_CHECK(cudaSetDevice(device), err);
	CUBLAS_CHECK(cublasCreate(&g->blas), err);
	/* f32 on the CUDA cores: the default math mode never rounds f32
	 * operands to TF32 (CUBLAS_TF32_TENSOR_OP_MATH would). */
	CUBLAS_CHECK(cublasSetMathMode(g->blas, CUBLAS_DEFAULT_MATH), err);
	if (pcg_cuda_alloc((void **)&g->E, (size_t)n * d * sizeof *g->E, "ASG embeddings", err) < 0 ||
	    pcg_cuda_alloc((void **)&g->count, sizeof *g->count, "ASG pair count", err) < 0)
		return -1;
	CU_CHECK(cudaMemcpy(g->E, E, (size_t)n * d * sizeof *g->E, cudaMemcpyHostToDevice), err);
	g->cap = FIRST_CAP;
	if (pcg_cuda_alloc((void **)&g->P, g->cap * sizeof *g->P, "ASG pair list", err) < 0)
		return -1;
	CU_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes), err);
	R = block_rows(n, rows, free_bytes);
	if (pcg_cuda_alloc((void **)&g->C, (size_t)R * n * sizeof *g->C, "ASG similarity block",
			   err) < 0)
		return -1;

	for (int i0 = 0; i0 < n; i0 += R) {
		const int r = n - i0 < R ? n - i0 : R, W = n - i0;
		const float *Ei = g->E + (size_t)i0 * d;
		unsigned long long found;
		asg_pair *v;

		/* C^T [W, r] (column-major, that is C [r, W] row-major) =
		 * E[i0:n] E[i0:i0+r]^T: the rows are E^T's columns. */
		CUBLAS_CHECK(cublasGemmEx(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, W, r, d, &one,
					  Ei, CUDA_R_32F, d, Ei, CUDA_R_32F, d, &zero,
					  g->C, CUDA_R_32F, W, CUBLAS_COMPUTE_32F,
					  CUBLAS_GEMM_DEFAULT), err);
		if (threshold_block(g, r, W, (uint32_t)i0, theta, &found, err) < 0)
			return -1;
		if (found > 0) {
			v = (asg_pair *)realloc(*pairs, (*npairs + found) * sizeof *v);
			if (v == NULL)
				return pcg_fail(err, "out of memory for %zu similar pairs",
						(size_t)(*npairs + found));
			*pairs = v;
			CU_CHECK(cudaMemcpy(v + *npairs, g->P, found * sizeof *v,
					    cudaMemcpyDeviceToHost), err);
			*npairs += found;
		}
		done += (double)r * (r - 1) / 2 + (double)r * (W - r);
		if (progress)
			progress(progress_ctx, done, total);
	}
	return 0;
}

/* cudaFree or cublasDestroy, checked; only the first failure of the call
 * is reported (after a fault they all fail). */
static void release_check(cudaError_t e, const char *what, int line, int *rc, pcg_err *err)
{
	if (e != cudaSuccess && *rc == 0)
		*rc = pcg_fail(err, "%s:%d: %s: %s", __FILE__, line, what, cudaGetErrorString(e));
}

static int release(gpu *g, int rc, pcg_err *err)
{
	if (g->blas) {
		cublasStatus_t s = cublasDestroy(g->blas);
		if (s != CUBLAS_STATUS_SUCCESS && rc == 0)
			rc = pcg_fail(err, "%s:%d: cublasDestroy: %s", __FILE__, __LINE__,
				      cublasGetStatusString(s));
	}
	release_check(cudaFree(g->C), "cudaFree(C)", __LINE__, &rc, err);
	release_check(cudaFree(g->P), "cudaFree(P)", __LINE__, &rc, err);
	release_check(cudaFree(g->count), "cudaFree(count)", __LINE__, &rc, err);
	release_check(cudaFree(g->E), "cudaFree(E)", __LINE__, &rc, err);
	if (g->prev_device >= 0)
		release_check(cudaSetDevice(g->prev_device), "cudaSetDevice", __LINE__, &rc, err);
	(void)cudaGetLastError(); /* reported above or ignored: not for a later check */
	return rc;
}

int asg_cuda_pairs(int device, const float *E, int n, int d, float theta, int rows,
		   asg_progress_fn *progress, void *progress_ctx, asg_pair **pairs,
		   size_t *npairs, pcg_err *err)
{
	gpu g = { -1, NULL, NULL, NULL, NULL, NULL, 0 };

	if (n < 1 || d < 1)
		return pcg_fail(err, "%d x %d rows: nothing to multiply", n, d);
	return release(&g, run(&g, device, E, n, d, theta, rows, progress, progress_ctx, pairs,
			       npairs, err), err);
}
