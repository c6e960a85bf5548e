/* test_matmul.c: the weight-times-activation kernels against a float64
 * reference, for every dtype, batch sizes on both sides of the switch to
 * BLAS, widths with and without a tail, row sub-ranges; the f16 and bf16
 * widening checked bit-exactly on every finite value; dtype conversions
 * round to nearest even.
 *
 * Tolerance: |y - ref| <= 1e-5 * sum_k |w_k x_k| + 1e-30. A float32 dot
 * product of K terms in any summation order is within about K * 2^-24 of
 * the exact sum relative to sum |w x| (Higham, Accuracy and Stability of
 * Numerical Algorithms, 3.1); with pairwise/vector partial sums it is
 * closer to log2(K) * 2^-24. For K <= 300 that is <= 1.8e-5 worst case and
 * about 5e-7 in practice; 1e-5 sits between and still fails on any wrong
 * element (whose error is of the order of one term, > 1e-3 here).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dtype.h"
#include "matmul.h"

static double frand(unsigned *s)
{
	*s = *s * 1103515245u + 12345u;
	return ((*s >> 8) & 0xffff) / 65536.0 - 0.5;
}

static void check_case(pcg_dtype dt, int B, int N, int K, int r0, int nr, unsigned seed)
{
	const size_t es = pcg_dtype_size(dt);
	unsigned char *w = malloc((size_t)N * K * es);
	float *wf = malloc((size_t)N * K * sizeof *wf);
	float *x = malloc((size_t)B * K * sizeof *x);
	float *y = malloc((size_t)B * (nr + 3) * sizeof *y);
	int bad = 0;

	for (size_t i = 0; i < (size_t)N * K; i++) {
		float v = (float)frand(&seed);
		uint16_t h;
		if (dt == PCG_BF16) {
			h = pcg_f32_to_bf16(v);
			memcpy(w + 2 * i, &h, 2);
			wf[i] = pcg_bf16_to_f32(h);
		} else if (dt == PCG_F16) {
			h = pcg_f32_to_f16(v);
			memcpy(w + 2 * i, &h, 2);
			wf[i] = pcg_f16_to_f32(h);
		} else {
			memcpy(w + 4 * i, &v, 4);
			wf[i] = v;
		}
	}
	for (size_t i = 0; i < (size_t)B * K; i++)
		x[i] = (float)frand(&seed) * 4;
	for (size_t i = 0; i < (size_t)B * (nr + 3); i++)
		y[i] = NAN;
	pcg_mat W = { .data = w, .dtype = dt, .rows = N, .cols = K };
	pcg_matmul(y, nr + 3, x, B, &W, r0, nr); /* ldy > nr: stride respected */
	for (int b = 0; b < B; b++) {
		for (int r = 0; r < nr; r++) {
			double ref = 0, mag = 0;
			for (int k = 0; k < K; k++) {
				double t = (double)wf[(size_t)(r0 + r) * K + k] * x[(size_t)b * K + k];
				ref += t;
				mag += fabs(t);
			}
			double got = y[(size_t)b * (nr + 3) + r];
			if (!(fabs(got - ref) <= 1e-5 * mag + 1e-30))
				bad++;
		}
		for (int r = nr; r < nr + 3; r++)
			if (!isnan(y[(size_t)b * (nr + 3) + r]))
				bad++; /* wrote past nr */
	}
	CHECKF(bad == 0, "%s B=%d N=%d K=%d rows [%d, %d): %d wrong", pcg_dtype_name(dt), B, N,
	       K, r0, r0 + nr, bad);
	free(w);
	free(wf);
	free(x);
	free(y);
}

/* Every finite f16 and bf16 value, widened by the kernel, multiplied by an
 * exact 1.0 selected with a one-hot x: y must equal the scalar conversion. */
static void check_widening(pcg_dtype dt)
{
	const int K = 64, N = 65536 / K;
	uint16_t *w = malloc(65536 * sizeof *w);
	float *x = calloc((size_t)K * K, sizeof *x);
	float *y = malloc((size_t)K * N * sizeof *y);
	int bad = 0;

	for (int i = 0; i < 65536; i++) {
		float f = dt == PCG_F16 ? pcg_f16_to_f32((uint16_t)i) : pcg_bf16_to_f32((uint16_t)i);
		w[i] = isfinite(f) ? (uint16_t)i : 0; /* inf * 0 would be NaN */
	}
	for (int k = 0; k < K; k++)
		x[(size_t)k * K + k] = 1.0f;
	pcg_mat W = { .data = w, .dtype = dt, .rows = N, .cols = K };
	for (int b0 = 0; b0 < K; b0 += PCG_MATMUL_SMALL) /* the streaming kernels */
		pcg_matmul(y + (size_t)b0 * N, N, x + (size_t)b0 * K, PCG_MATMUL_SMALL, &W, 0, N);
	for (int k = 0; k < K; k++)
		for (int r = 0; r < N; r++) {
			uint16_t h = w[r * K + k];
			float want = dt == PCG_F16 ? pcg_f16_to_f32(h) : pcg_bf16_to_f32(h);
			float got = y[(size_t)k * N + r];
			if (memcmp(&got, &want, 4) != 0 && !(got == 0 && want == 0))
				bad++;
		}
	CHECKF(bad == 0, "%s widening: %d values differ", pcg_dtype_name(dt), bad);
	free(w);
	free(x);
	free(y);
}

static void check_conversions(void)
{
	/* Known values: 1, -2, the largest f16, the smallest subnormal. */
	CHECK(pcg_f16_to_f32(0x3c00) == 1.0f && pcg_f16_to_f32(0xc000) == -2.0f);
	CHECK(pcg_f16_to_f32(0x7bff) == 65504.0f && pcg_f16_to_f32(0x0001) == ldexpf(1, -24));
	CHECK(isinf(pcg_f16_to_f32(0x7c00)) && isnan(pcg_f16_to_f32(0x7e00)));
	/* f16 -> f32 -> f16 is the identity on every non-NaN value. */
	int bad = 0;
	for (int i = 0; i < 65536; i++) {
		float f = pcg_f16_to_f32((uint16_t)i);
		if (!isnan(f) && pcg_f32_to_f16(f) != i)
			bad++;
	}
	CHECKF(bad == 0, "f16 round trip: %d values", bad);
	/* Ties round to even: 1 + 2^-11 is halfway between 1 and 1 + 2^-10. */
	CHECK(pcg_f32_to_f16(1.0f + ldexpf(1, -11)) == 0x3c00);
	CHECK(pcg_f32_to_f16(1.0f + 3 * ldexpf(1, -11)) == 0x3c02);
	CHECK(pcg_f32_to_f16(1e6f) == 0x7c00);          /* overflow to inf */
	CHECK(pcg_f32_to_f16(ldexpf(1, -26)) == 0x0000); /* below half the smallest */
	CHECK(pcg_f32_to_bf16(1.0f + ldexpf(1, -8)) == 0x3f80); /* tie to even */
	CHECK(pcg_f32_to_bf16(1.0f + 3 * ldexpf(1, -8)) == 0x3f82);
	CHECK(pcg_bf16_to_f32(pcg_f32_to_bf16(3.140625f)) == 3.140625f);

	/* The bulk conversions (F16C when the CPU has it) equal the scalar ones:
	 * every f16 value, and f32 values around every f16 rounding boundary. */
	uint16_t *h = malloc(65536 * 2), *h2 = malloc(65536 * 2);
	float *f = malloc(65536 * 4);
	for (int i = 0; i < 65536; i++)
		h[i] = (uint16_t)i;
	pcg_to_f32(f, h, PCG_F16, 65536);
	bad = 0;
	for (int i = 0; i < 65536; i++) {
		float w = pcg_f16_to_f32((uint16_t)i);
		bad += !(memcmp(&w, &f[i], 4) == 0 || (isnan(w) && isnan(f[i])));
	}
	CHECKF(bad == 0, "bulk f16 -> f32: %d values differ", bad);
	unsigned seed = 9;
	for (int i = 0; i < 65536; i++) { /* halfway points and their neighbours */
		float a = pcg_f16_to_f32((uint16_t)(i & 0x7bff)), b = pcg_f16_to_f32((uint16_t)((i & 0x7bff) + 1));
		f[i] = (i % 3 == 0) ? (a + b) / 2 : (float)(frand(&seed) * 70000.0);
	}
	pcg_f32_to_f16_n(h2, f, 65536);
	bad = 0;
	for (int i = 0; i < 65536; i++)
		bad += h2[i] != pcg_f32_to_f16(f[i]);
	CHECKF(bad == 0, "bulk f32 -> f16: %d values differ", bad);
	free(h);
	free(h2);
	free(f);
}

/* A row's sum does not depend on the grouping of rows and positions: a
 * block of 7 positions over rows [3, 300) equals, bit for bit, each
 * position alone over each row alone. (The policies compare draft and
 * target distributions computed in different groupings.) */
static void check_grouping(pcg_dtype dt)
{
	enum { N = 300, K = 96, B = 7 };
	uint16_t *wh = malloc((size_t)N * K * 2);
	float *wf = malloc((size_t)N * K * 4), *x = malloc((size_t)B * K * 4);
	float *y = malloc((size_t)B * N * 4), *y1 = malloc(4);
	unsigned seed = 77;
	int same = 1;

	for (int i = 0; i < N * K; i++) {
		wf[i] = (float)frand(&seed);
		wh[i] = dt == PCG_BF16 ? pcg_f32_to_bf16(wf[i]) : pcg_f32_to_f16(wf[i]);
	}
	for (int i = 0; i < B * K; i++)
		x[i] = (float)frand(&seed);
	pcg_mat W = { .data = dt == PCG_F32 ? (const void *)wf : (const void *)wh, .dtype = dt, .rows = N, .cols = K };
	pcg_matmul(y, N, x, B, &W, 3, N - 3);
	for (int b = 0; b < B; b++)
		for (int r = 3; r < N; r += 37) {
			pcg_matmul(y1, 1, x + (size_t)b * K, 1, &W, r, 1);
			same &= memcmp(y1, &y[(size_t)b * N + r - 3], 4) == 0;
		}
	CHECKF(same, "%s: grouping changes the sums", pcg_dtype_name(dt));
	free(wh);
	free(wf);
	free(x);
	free(y);
	free(y1);
}

/* Every dtype, batch size and width, on one and two threads. */
static void check_kernels(void)
{
	const pcg_dtype dts[] = { PCG_F32, PCG_F16, PCG_BF16 };
	const int Bs[] = { 1, 2, 3, 4, 5, 7, 8, 9, 17 };
	const int Ks[] = { 32, 64, 70, 31, 256 };

	for (int t = 0; t < 2; t++) {
		pcg_set_threads(t == 0 ? 1 : 2);
		for (size_t d = 0; d < 3; d++)
			for (size_t b = 0; b < sizeof Bs / sizeof *Bs; b++)
				for (size_t k = 0; k < sizeof Ks / sizeof *Ks; k++)
					check_case(dts[d], Bs[b], 37, Ks[k], 0, 37,
						   (unsigned)(d * 100 + b * 10 + k));
		/* A sub-range of rows, as the LLaSA speech range of the lm_head. */
		for (size_t d = 0; d < 3; d++) {
			check_case(dts[d], 1, 300, 64, 200, 77, 5);
			check_case(dts[d], 12, 300, 64, 13, 250, 6);
		}
	}
	check_widening(PCG_F16);
	check_widening(PCG_BF16);
	check_grouping(PCG_F32);
	check_grouping(PCG_F16);
	check_grouping(PCG_BF16);
}

int main(void)
{
	const char *names[] = { "avx512", "avx2", "generic" };

	check_conversions();
	for (int i = 0; i < 3; i++) {
		if (pcg_matmul_set_isa(names[i]) < 0) {
			printf("kernels %s: not supported by this CPU, not tested\n", names[i]);
			continue;
		}
		printf("kernels %s\n", names[i]);
		check_kernels();
	}
	CHECK(pcg_matmul_set_isa("sse9") == -1);
	return check_done("test_matmul");
}
