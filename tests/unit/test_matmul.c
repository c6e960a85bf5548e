/* test_matmul.c: the weight-times-activation kernels against a float64
 * reference, for every dtype, batch sizes on both sides of the switch to
 * BLAS, widths with and without a tail, row sub-ranges; the f16 and bf16
 * widening checked bit-exactly on every finite value; dtype conversions
 * round to nearest even. The "avx512-bf16" family (vdpbf16ps, activations
 * rounded to bf16) against a float64 reference of the same rounded
 * activations, and against the f32 path within the bound matmul.h states.
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

/* The family under test rounds x to bf16 for bf16 weights ("avx512-bf16"):
 * the references then use the rounded x. */
static int xround;

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
				float xv = x[(size_t)b * K + k];
				if (xround && dt == PCG_BF16)
					xv = pcg_bf16_to_f32(pcg_f32_to_bf16(xv));
				double t = (double)wf[(size_t)(r0 + r) * K + k] * xv;
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
 * exact 1.0 selected with a one-hot x: y must equal the scalar conversion.
 * vdpbf16ps reads subnormal inputs as zero (Intel SDM, VDPBF16PS: DAZ), so
 * on that family a subnormal bf16 weight gives 0. */
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
			if (xround && dt == PCG_BF16 && fabsf(want) < 0x1p-126f)
				want = 0;
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

static void check_grouping_of(pcg_dtype dt, const int K, const int B)
{
	enum { N = 300 };
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
	CHECKF(same, "%s: grouping changes the sums (%d positions, K %d)", pcg_dtype_name(dt), B,
	       K);
	free(wh);
	free(wf);
	free(x);
	free(y);
	free(y1);
}

/* A row's sum does not depend on the grouping of rows and positions: 1, 2
 * and 7 positions over rows [3, 300) (each family's tiles of rows and
 * positions, a tail of K beyond its blocks) equal, bit for bit, each
 * position alone over each row alone. (The policies compare draft and
 * target distributions computed in different groupings.) */
static void check_grouping(pcg_dtype dt)
{
	for (int k = 0; k < 2; k++)
		for (int B = 1; B <= 7; B += B < 2 ? 1 : 5)
			check_grouping_of(dt, k ? 101 : 96, B);
}

/* vdpbf16ps against exact sums. Products of two bf16 values (8 significant
 * bits each) are exact in f32; each vdpbf16ps adds two of them to a lane
 * (at most two roundings), a lane takes ceil(K/32) steps and the 16 lanes
 * are then summed in 4 rounds, so (Higham 3.1) the f32 result is within
 * (2 ceil(K/32) + 4) 2^-24 sum |w x| of the exact sum of the rounded
 * activations: tol1 below, about 3e-7 relative for K = 100, where leaving x
 * unrounded would be off by up to 2^-8 of a term. Against the f32 path the
 * activations' rounding adds at most 2^-8 |w x| per product (round to
 * nearest even, 8 significant bits) and the f32 path's own sums at most
 * (K + 4) 2^-24 sum |w x| (any order): tol2. More than PCG_MATMUL_SMALL
 * rows (a prefill) go through the same kernels, so pcg_matmul gives what
 * pcg_matmul_rows gives, bit for bit. Odd shapes: K not a multiple
 * of 32, row counts not a multiple of 4 or 16, B = 1..8 and 13, r0 > 0. */
static void check_bf16dot_case(int B, int N, int K, int r0, int nr, unsigned seed)
{
	uint16_t *w = malloc((size_t)N * K * 2);
	float *x = malloc((size_t)B * K * 4);
	float *y = malloc((size_t)B * nr * 4), *yf = malloc((size_t)B * nr * 4);
	float *yb = malloc((size_t)B * nr * 4);
	int bad1 = 0, bad2 = 0, bad3 = 0, differ = 0;

	for (size_t i = 0; i < (size_t)N * K; i++)
		w[i] = pcg_f32_to_bf16((float)frand(&seed));
	for (size_t i = 0; i < (size_t)B * K; i++) /* magnitudes over 2^20 */
		x[i] = (float)(frand(&seed) * exp2(20 * frand(&seed)));
	pcg_mat W = { .data = w, .dtype = PCG_BF16, .rows = N, .cols = K };
	CHECK(pcg_matmul_set_isa("avx512") == 0);
	pcg_matmul_rows(yf, nr, x, B, &W, r0, nr);
	CHECK(pcg_matmul_set_isa("avx512-bf16") == 0);
	pcg_matmul_rows(y, nr, x, B, &W, r0, nr);
	if (B > PCG_MATMUL_SMALL) /* a prefill: the rows' bits */
		pcg_matmul(yb, nr, x, B, &W, r0, nr);
	for (int b = 0; b < B; b++)
		for (int r = 0; r < nr; r++) {
			double ref = 0, mag = 0;
			for (int k = 0; k < K; k++) {
				float xr = pcg_bf16_to_f32(pcg_f32_to_bf16(x[(size_t)b * K + k]));
				double t = (double)pcg_bf16_to_f32(w[(size_t)(r0 + r) * K + k]) * xr;
				ref += t;
				mag += fabs(t);
			}
			const double tol1 = (2.0 * ((K + 31) / 32) + 4) * 0x1p-24 * mag;
			const double tol2 = 0x1p-8 * mag + (2.0 * ((K + 31) / 32) + 4 + K + 4) *
							   0x1p-24 * mag * (1 + 0x1p-8);
			const float got = y[(size_t)b * nr + r], f = yf[(size_t)b * nr + r];
			bad1 += !(fabs(got - ref) <= tol1);
			bad2 += !(fabs((double)got - f) <= tol2);
			differ += got != f;
			if (B > PCG_MATMUL_SMALL)
				bad3 += yb[(size_t)b * nr + r] != got;
		}
	CHECKF(bad1 == 0, "bf16 dot B=%d N=%d K=%d rows [%d, %d): %d beyond the f32 sums' bound",
	       B, N, K, r0, r0 + nr, bad1);
	CHECKF(bad2 == 0, "bf16 dot B=%d N=%d K=%d rows [%d, %d): %d beyond 2^-8 of the f32 path",
	       B, N, K, r0, r0 + nr, bad2);
	CHECKF(differ > 0, "bf16 dot B=%d K=%d: no sum differs from the f32 path (x not rounded?)",
	       B, K);
	CHECKF(bad3 == 0, "bf16 weights, a prefill of B=%d K=%d: %d not the rows' bits", B, K,
	       bad3);
	free(yb);
	free(w);
	free(x);
	free(y);
	free(yf);
}

/* NaN and infinity in x reach y as in torch (a NaN activation stays NaN
 * through the rounding; inf times weights of both signs is NaN), and only
 * in their own row of the block. */
static void check_bf16dot_special(void)
{
	enum { N = 21, K = 45, B = 3 };
	uint16_t w[N * K];
	float x[B * K], y[B * N];
	unsigned seed = 5;
	int ok = 1;

	for (int i = 0; i < N * K; i++)
		w[i] = pcg_f32_to_bf16((float)frand(&seed) + 1.0f); /* positive */
	for (int i = 0; i < B * K; i++)
		x[i] = (float)frand(&seed);
	x[K + 40] = NAN;
	x[2 * K + 3] = INFINITY;
	pcg_mat W = { .data = w, .dtype = PCG_BF16, .rows = N, .cols = K };
	pcg_matmul(y, N, x, B, &W, 0, N);
	for (int r = 0; r < N; r++)
		ok &= isfinite(y[r]) && isnan(y[N + r]) && isinf(y[2 * N + r]) && y[2 * N + r] > 0;
	CHECKF(ok, "bf16 dot: NaN/inf in x");
}

static void check_bf16dot(void)
{
	const int Ks[] = { 31, 33, 100, 1000 };

	if (pcg_matmul_set_isa("avx512-bf16") < 0) {
		printf("SKIP kernels avx512-bf16: no AVX512_BF16 on this CPU, not tested\n");
		return;
	}
	printf("kernels avx512-bf16: against exact sums and the f32 path\n");
	for (int t = 0; t < 2; t++) {
		pcg_set_threads(t == 0 ? 1 : 2);
		for (int B = 1; B <= 8; B++)
			for (size_t k = 0; k < sizeof Ks / sizeof *Ks; k++)
				check_bf16dot_case(B, 53, Ks[k], B % 3, 53 - B % 3 - (B & 1),
						   (unsigned)(B * 10 + k));
		check_bf16dot_case(13, 300, 70, 17, 250, 3); /* more rows than a block */
		CHECK(pcg_matmul_set_isa("avx512-bf16") == 0);
		check_bf16dot_special();
	}
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
	/* x86-64's families, then AArch64's: those of the other architecture
	 * are refused (not supported by this CPU). */
	const char *names[] = { "avx512-bf16", "avx512", "avx2", "neon", "generic" };

	check_conversions();
	for (int i = 0; i < (int)(sizeof names / sizeof names[0]); i++) {
		if (pcg_matmul_set_isa(names[i]) < 0) {
			printf("kernels %s: not supported by this CPU, not tested\n", names[i]);
			continue;
		}
		printf("kernels %s\n", names[i]);
		xround = i == 0;
		check_kernels();
	}
	xround = 0;
	check_bf16dot();
	CHECK(pcg_matmul_set_isa("sse9") == -1);
	return check_done("test_matmul");
}
