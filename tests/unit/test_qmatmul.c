/* test_qmatmul.c: the block-quantised products (lib/engine/qmatmul.c) on every
 * path this CPU can run, against the scalar reference and against a float64
 * product of the dequantised weights (lib/core/quant.c) and the dequantised int8
 * activations: every format, widths that are and are not a multiple of the
 * activation block (256), 1 to 9 weight rows and row sub-ranges, 1 to 9
 * activation rows (9 and more run as blocks of 8), and threads; a block of
 * rows gives bit for bit what its rows give alone; rows repacked in groups
 * (qpack.h) give the same bits on each x86 family.
 *
 * Tolerance. The integer sums I_s are exact on every path; what differs is
 * the f32 summation of the scaled terms dx * (a_s * I_s - m_s * S_s), at
 * most K / 16 + 16 of them per output (sub-blocks, then 16 lanes, then
 * activation blocks). A sum of n f32 terms in any order is within n * u
 * (u = 2^-24) of the exact sum relative to the sum of the terms' magnitudes
 * M (Higham 3.1), and the dequantised weight itself is rounded once
 * (d * sc * q - dmin * m: two roundings, 2u relative to |d sc q| + |dmin m|).
 * So |y - exact| <= (K / 16 + 20) * u * M with
 * M = sum_k (|w_k| + |min_k|) * |x_k|, and two paths differ by at most
 * twice that. A wrong weight or scale costs one term, about M / K, which is
 * 30 times that bound or more for K <= 2304 and fails.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dtype.h"
#include "matmul.h"
#include "qmatmul.h"
#include "qpack.h"
#include "quant.h"

static unsigned seed = 12345;
static int n_packed; /* products run on repacked rows */
/* x86-64's paths, AArch64's, then generic (last: check_qx compares the others with it) */
static const char *const paths[] = { "avx512-vnni", "avx-vnni", "avx2", "neon-i8mm", "neon-dotprod",
				     "neon", "generic" };

static unsigned rnd(void)
{
	seed = seed * 1103515245u + 12345u;
	return seed >> 8;
}

static float frand(void)
{
	return (float)((rnd() & 0xffff) / 65536.0 - 0.5);
}

/* Random blocks: random bytes, then scales set to sane f16 values. */
static void fill_blocks(unsigned char *w, pcg_dtype t, size_t nblocks)
{
	const size_t bs = pcg_dtype_block_bytes(t);

	for (size_t i = 0; i < nblocks * bs; i++)
		w[i] = (unsigned char)rnd();
	for (size_t i = 0; i < nblocks; i++) {
		unsigned char *p = w + i * bs;
		uint16_t d = pcg_f32_to_f16(0.001f + 0.01f * (frand() + 0.5f));
		uint16_t m = pcg_f32_to_f16(0.002f * (frand() + 0.5f));
		switch (t) {
		case PCG_Q8_0:
		case PCG_Q4_0:
			memcpy(p, &d, 2);
			break;
		case PCG_Q4_K:
		case PCG_Q5_K:
			memcpy(p, &d, 2);
			memcpy(p + 2, &m, 2);
			break;
		case PCG_Q6_K:
			memcpy(p + 208, &d, 2);
			break;
		default:
			break;
		}
	}
}

/* |min| of each element of a row (the K-quants' dmin * m; 0 for others). */
static void row_mins(const unsigned char *row, pcg_dtype t, int K, float *mins)
{
	for (int k = 0; k < K; k++)
		mins[k] = 0.0f;
	if (t != PCG_Q4_K && t != PCG_Q5_K)
		return;
	const size_t bs = pcg_dtype_block_bytes(t);
	for (int i = 0; i < K / 256; i++) {
		const unsigned char *p = row + i * bs;
		uint16_t mh;
		memcpy(&mh, p + 2, 2);
		for (int s = 0; s < 8; s++) {
			uint8_t sc, m;
			pcg_get_scale_min(s, p + 4, &sc, &m);
			for (int l = 0; l < 32; l++)
				mins[256 * i + 32 * s + l] = fabsf(pcg_f16_to_f32(mh) * m);
		}
	}
}

static int is_path_ok(const char *p)
{
	return pcg_qmatmul_set_path(p) == 0;
}

static void check_case(pcg_dtype t, int N, int K, int B, int r0, int nr)
{
	const size_t rb = pcg_dtype_row_bytes(t, K);
	unsigned char *w = malloc((size_t)N * rb);
	float *wf = malloc((size_t)N * K * sizeof *wf), *mins = malloc((size_t)K * sizeof *mins);
	float *x = malloc((size_t)B * K * sizeof *x), *xd = malloc((size_t)B * K * sizeof *xd);
	float *y = malloc((size_t)B * (nr + 3) * sizeof *y), *yref = malloc((size_t)B * nr * sizeof *yref);
	float *y1 = malloc((size_t)(nr + 3) * sizeof *y1);
	float *ypk = malloc((size_t)B * (nr + 3) * sizeof *ypk);
	pcg_qx q;
	int bad = 0, bad_ref = 0, bad_block = 0, have_pk = 0;
	const char *pk_path = "";

	fill_blocks(w, t, (size_t)N * K / pcg_dtype_block(t));
	pcg_dequantize(wf, w, t, (size_t)N * K);
	for (int i = 0; i < B * K; i++)
		x[i] = frand() * (i % 97 == 0 ? 40.0f : 4.0f); /* a few outliers */
	CHECK(pcg_qx_alloc(&q, B, K) == 0);
	pcg_qx_quantize(&q, x, B, K);
	for (int b = 0; b < B; b++)
		for (int k = 0; k < K; k++)
			xd[(size_t)b * K + k] = q.d[(size_t)b * q.nb + k / 256] * q.q[(size_t)b * K + k];
	pcg_mat W = { .data = w, .dtype = t, .rows = N, .cols = K };
	pcg_qdot_ref(yref, nr, &q, &W, r0, nr);

	void *packed = NULL;
	for (size_t pi = 0; pi < 2 * sizeof paths / sizeof paths[0]; pi++) {
		/* each path, then each path with the rows repacked where it packs */
		const char *path = paths[pi / 2];
		if (!is_path_ok(path))
			continue;
		W.packed = NULL;
		if (pi % 2 == 1) {
			if (!pcg_qpack_ok(&W))
				continue;
			free(packed);
			packed = aligned_alloc(64, (pcg_qpack_bytes(&W) + 63) / 64 * 64);
			CHECK(packed != NULL);
			pcg_qpack(packed, &W);
			W.packed = packed;
			n_packed++;
		}
		bad = bad_ref = bad_block = 0;
		for (int i = 0; i < B * (nr + 3); i++)
			y[i] = NAN;
		pcg_matmul(y, nr + 3, x, B, &W, r0, nr);
		for (int b = 0; b < B; b++) {
			for (int r = 0; r < nr; r++) {
				const float *wr = wf + (size_t)(r0 + r) * K;
				double exact = 0, M = 0;
				row_mins(w + (size_t)(r0 + r) * rb, t, K, mins);
				for (int k = 0; k < K; k++) {
					double xv = xd[(size_t)b * K + k];
					exact += (double)wr[k] * xv;
					M += (fabs(wr[k]) + mins[k]) * fabs(xv);
				}
				const double tol = (K / 16 + 20) * ldexp(1.0, -24) * M;
				const double got = y[(size_t)b * (nr + 3) + r];
				/* more than PCG_MATMUL_SMALL rows: blocks of 8 through
				 * the same kernels, the same bound */
				if (!(fabs(got - exact) <= tol))
					bad++;
				if (!(fabs(got - yref[(size_t)b * nr + r]) <= 2 * tol))
					bad_ref++;
				if (b == 0 && !(fabs(yref[r] - exact) <= tol))
					bad_ref++;
			}
			for (int r = nr; r < nr + 3; r++)
				if (!isnan(y[(size_t)b * (nr + 3) + r]))
					bad++; /* wrote past nr */
		}
		/* A block gives what each of its rows gives alone, bit for bit. */
		for (int b = 0; b < B; b++) {
			pcg_matmul(y1, nr + 3, x + (size_t)b * K, 1, &W, r0, nr);
			if (memcmp(y1, y + (size_t)b * (nr + 3), (size_t)nr * sizeof *y1))
				bad_block++;
		}
		CHECKF(bad == 0 && bad_ref == 0 && bad_block == 0,
		       "%s path %s N=%d K=%d B=%d rows [%d,%d): %d off, %d off the reference, "
		       "%d rows differ alone", pcg_dtype_name(t), path, N, K, B, r0, r0 + nr,
		       bad, bad_ref, bad_block);
		CHECKF(pi % 2 == 0 || !strcmp(path, "avx512-vnni") || !strcmp(path, "avx-vnni") ||
		       !strcmp(path, "avx2"), "%s packs on path %s", pcg_dtype_name(t), path);
		/* The packs give the same bits on every family that reads them
		 * (exact integer sums, each lane's float steps in one order). */
		if (pi % 2 == 1) {
			int differ = 0;
			for (int b = 0; have_pk && b < B; b++)
				differ += memcmp(ypk + (size_t)b * (nr + 3), y + (size_t)b * (nr + 3),
						 (size_t)nr * sizeof *y) != 0;
			CHECKF(differ == 0, "%s packed on %s N=%d K=%d B=%d: %d rows differ from "
			       "the packs on %s", pcg_dtype_name(t), path, N, K, B, differ,
			       pk_path);
			if (!have_pk) {
				memcpy(ypk, y, (size_t)B * (nr + 3) * sizeof *y);
				pk_path = path;
			}
			have_pk = 1;
		}
	}
	free(packed);
	pcg_qx_free(&q);
	free(w);
	free(wf);
	free(mins);
	free(x);
	free(xd);
	free(y);
	free(yref);
	free(y1);
	free(ypk);
}

/* The activations' int8 form: within half a step of x, the largest at
 * +-127, zero blocks zero, sums per 16 right. */
static void check_qx(void)
{
	const int K = 544; /* two full blocks and a short one of 32 */
	float x[2 * 544];
	pcg_qx q;
	int bad = 0;

	for (int i = 0; i < 2 * K; i++)
		x[i] = frand() * 10.0f;
	for (int i = 256; i < 512; i++)
		x[i] = 0.0f; /* a zero block */
	CHECK(pcg_qx_alloc(&q, 2, K) == 0);
	pcg_qx_quantize(&q, x, 2, K);
	CHECK(q.nb == 3);
	for (int b = 0; b < 2; b++)
		for (int j = 0; j < 3; j++) {
			const float d = q.d[b * 3 + j];
			int amax = 0;
			for (int k = 256 * j; k < K && k < 256 * j + 256; k++) {
				const int v = q.q[b * K + k];
				amax = abs(v) > amax ? abs(v) : amax;
				if (!(fabsf(x[b * K + k] - d * v) <= 0.5001f * d))
					bad++;
			}
			if (b == 0 && j == 1)
				CHECK(d == 0.0f && amax == 0);
			else
				CHECKF(amax == 127, "block %d of row %d: largest |q| %d", j, b, amax);
			for (int s = 0; s < 16; s++) {
				int sum = 0;
				for (int k = 256 * j + 16 * s; k < K && k < 256 * j + 16 * s + 16; k++)
					sum += q.q[b * K + k];
				if (q.s[(b * 3 + j) * 16 + s] != (float)sum)
					bad++;
			}
		}
	CHECKF(bad == 0, "%d activations or sums off", bad);
	/* The vector quantiser (any path but generic) gives the scalar one's
	 * bytes, scales and sums bit for bit, ties and a NaN included. */
	x[544] = 127.0f; /* row 1, block 0: d = 1, so halves are ties */
	for (int i = 600; i < 616; i++)
		x[i] = (float)(i - 608) + 0.5f;
	x[700] = NAN;
	if (pcg_qmatmul_set_path("generic") == 0) {
		pcg_qx g;
		CHECK(pcg_qx_alloc(&g, 2, K) == 0);
		pcg_qx_quantize(&g, x, 2, K);
		for (size_t pi = 0; pi < sizeof paths / sizeof paths[0] - 1; pi++) {
			if (!is_path_ok(paths[pi]))
				continue;
			pcg_qx_quantize(&q, x, 2, K);
			CHECKF(!memcmp(g.q, q.q, 2 * (size_t)K) && !memcmp(g.d, q.d, 6 * sizeof *g.d) &&
				       !memcmp(g.s, q.s, 6 * 16 * sizeof *g.s),
			       "%s: the quantised activations differ from the scalar ones", paths[pi]);
		}
		pcg_qx_free(&g);
	}
	pcg_qx_free(&q);
}

int main(void)
{
	const pcg_dtype types[] = { PCG_Q8_0, PCG_Q4_0, PCG_Q4_K, PCG_Q5_K, PCG_Q6_K };

	check_qx();
	pcg_set_threads(2);
	CHECK(pcg_qmatmul_set_path("no-such-path") < 0);
	for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
		const pcg_dtype t = types[i];
		const int kq = t == PCG_Q8_0 || t == PCG_Q4_0;
		/* widths: one block, a short activation block, several blocks */
		const int Ks[] = { kq ? 32 : 256, kq ? 96 : 512, kq ? 288 : 768, kq ? 2080 : 2304 };
		for (int ki = 0; ki < 4; ki++)
			for (int B = 1; B <= 9; B++) {
				const int N = 1 + (B * 7 + ki) % 9; /* 1 to 9 weight rows */
				check_case(t, N, Ks[ki], B, 0, N);
			}
		check_case(t, 37, kq ? 288 : 512, 4, 5, 29); /* a sub-range over threads */
		check_case(t, 37, kq ? 288 : 512, 1, 36, 1);
	}
	/* Repacked rows, on x86 CPUs with AVX2 or more: Q8_0, Q4_0, Q4_K, Q6_K;
	 * a product of more rows than a block through them at once (prefill). */
	check_case(PCG_Q4_0, 45, 2080, 19, 3, 40);
	check_case(PCG_Q8_0, 21, 544, 11, 2, 17);
	check_case(PCG_Q4_K, 40, 512, 13, 1, 38);
	check_case(PCG_Q6_K, 33, 512, 12, 0, 33);
	/* whole groups for one or two positions: both halves of a group at once */
	check_case(PCG_Q8_0, 33, 544, 2, 0, 33);
	check_case(PCG_Q4_0, 32, 288, 1, 0, 32);
	check_case(PCG_Q4_K, 32, 512, 1, 0, 32);
	check_case(PCG_Q6_K, 48, 256, 2, 0, 48);
	/* whole groups for 3, 4 and 7 positions: Q4_0's and Q4_K's kernels of
	 * their own for blocks of 3 and 4 (q4x3, q4x4) */
	check_case(PCG_Q4_0, 32, 288, 3, 0, 32);
	check_case(PCG_Q4_K, 32, 512, 3, 0, 32);
	check_case(PCG_Q4_0, 48, 544, 4, 0, 48);
	check_case(PCG_Q4_K, 48, 768, 7, 0, 48);
	if (pcg_qmatmul_set_path("avx2") == 0)
		CHECKF(n_packed > 0, "no product ran on repacked rows");
	else
		printf("SKIP repacked rows: no AVX2 on this CPU\n");
	for (size_t pi = 0; pi < sizeof paths / sizeof paths[0]; pi++)
		if (is_path_ok(paths[pi])) {
			printf("qmatmul paths: %s (best here)\n", paths[pi]);
			break;
		}
	return check_done("test_qmatmul");
}
