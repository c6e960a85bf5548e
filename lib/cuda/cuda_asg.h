/* cuda_asg.h (lib/cuda): the CUDA backend of asg_build (lib/speculate/asg_build.h). Of the build
 * only the search for similar pairs differs between devices; normalising
 * the rows, the top-k cut, merging identical G(t) and the weights are the
 * same code in lib/speculate/asg_build.c, whose CPU path is the oracle for this one.
 *
 * Design: the normalised rows are uploaded once (f32, n x d); for each block
 * of rows [i0, i0 + R) one cuBLAS GEMM against the columns [i0, n) (the
 * upper triangle plus the block's diagonal square) fills a device buffer of
 * R x (n - i0) similarities, and a kernel appends every pair j > i with
 * cos > theta to a device list; only that list is copied back. The products
 * are f32 on the CUDA cores with f32 accumulation (CUBLAS_COMPUTE_32F, no
 * TF32), so each cosine is an f32 dot product with f32 roundings, as on the
 * CPU, and the two differ only in summation order: a pair decides
 * differently only when its cosine lies within rounding of theta
 * (docs/BENCHMARKS.md, "asg-build on the GPU", derives how close).
 *
 * Device memory: the rows (4 n d bytes), one block of similarities (4 R n
 * bytes at most) and the pair list (12 bytes a pair, grown to the largest
 * block's count). R is the caller's when given, else as many rows as keep
 * the block within a quarter of the device's free memory and 1 GiB. */
#ifndef PCG_CUDA_ASG_H
#define PCG_CUDA_ASG_H

#include <stddef.h>

#include "../speculate/asg_build.h"
#include "err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Appends to *pairs (realloc'd, the caller's to free, also on failure) the
 * pairs i < j of the n normalised rows of E [n, d] (host, row-major f32)
 * whose f32 cosine exceeds theta, in no particular order, and adds their
 * count to *npairs. Runs on CUDA device `device` (restoring the caller's
 * current device); rows is the block height (0: from free memory).
 * progress, when not NULL, is called after each block as asg_build's.
 * Returns 0, or -1 with err (a CUDA or cuBLAS call with file and line, or
 * device memory asked for against what is free). */
int asg_cuda_pairs(int device, const float *E, int n, int d, float theta, int rows,
		   asg_progress_fn *progress, void *progress_ctx, asg_pair **pairs,
		   size_t *npairs, pcg_err *err);

#ifdef __cplusplus
}
#endif

#endif
