/* gpu.h: what every GPU test shares. gpu_require() skips the test loudly
 * (exit 77) when the machine has no CUDA device, unless PCG_TEST_GPU=1 (set
 * by make test-gpu), where a missing device is a failure: there the point is
 * to prove parity. Comparisons are normalised: the largest absolute
 * difference over the largest absolute value of the CPU result, so one
 * threshold serves activations of any scale.
 *
 * Thresholds (derived in docs/BENCHMARKS.md, "CUDA parity thresholds"): the
 * CPU backend keeps activations in f32, and so does the GPU's gemv (blocks
 * of up to 8 rows: summation order only); cuBLAS (more rows) multiplies them rounded to
 * the weights' dtype (unit roundoff u: bf16 2^-9, f16 2^-11, f32 2^-24) with
 * f32 accumulation. A product's normalised error is then about u (rounding
 * errors of random sign grow as sqrt(K), like the sum itself); a whole
 * forward pass compounds a few such roundings per layer through the
 * residual stream. */
#ifndef PCG_TEST_GPU_H
#define PCG_TEST_GPU_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/check.h"
#include "../unit/fixture.h"
#include "cuda/cuda_device.h"

/* Per-op and per-forward limits on the normalised error, by weight dtype. */
#define GPU_TOL_OP_F32   1e-5  /* f32 products: summation order only */
#define GPU_TOL_OP_F16   4e-3  /* ~8 u of f16 */
#define GPU_TOL_OP_BF16  1.6e-2 /* ~8 u of bf16 */
#define GPU_TOL_ELEMENTWISE 1e-5 /* norms, RoPE, softmax, SwiGLU in f32 */

/* Device count, or exit: 77 (skip) without a device, 1 under PCG_TEST_GPU=1. */
static inline int gpu_require(const char *test)
{
	pcg_err err = { "" };
	int n = pcg_cuda_device_count(&err);
	const char *must = getenv("PCG_TEST_GPU");

	if (n < 0) {
		fprintf(stderr, "%s: %s\n", test, err.msg);
		exit(1);
	}
	if (n == 0) {
		if (must && strcmp(must, "1") == 0) {
			fprintf(stderr, "%s: PCG_TEST_GPU=1 but no CUDA device\n", test);
			exit(1);
		}
		SKIP("%s: no CUDA device: GPU test skipped (compiled and linked)", test);
	}
	return n;
}

/* max |a - b| / max |b| over n values (b the CPU reference); 0 when b is 0
 * everywhere and a equals it. NaN in a counts as infinitely wrong. */
static inline double gpu_norm_err(const float *a, const float *b, size_t n)
{
	return norm_err(a, b, n); /* fixture.h */
}

#endif
