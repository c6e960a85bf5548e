/* matmul.c: activations (f32) times checkpoint weights (f32/f16/bf16).
 *
 * Small batches (decode, verification blocks) are memory-bound: the kernel
 * below streams each weight row once, widens it to f32 in registers and
 * multiplies it with up to four activation rows at a time, so extra rows cost
 * FMAs but no extra memory traffic. It is written once with GCC vector
 * extensions and compiled for x86-64-v4 (AVX-512) and the baseline, with
 * bodies of its own in intrinsics for x86-64-v3 (AVX2, FMA, F16C) and for
 * AArch64 (NEON); the first use picks the best the CPU has.
 * Large batches (prefill) go to OpenBLAS sgemm, which wins once
 * the weights are reused many times; block-quantised weights go to
 * lib/engine/qmatmul.c in blocks of 8 instead, which beats sgemm on their
 * dequantised tiles. pcg_matmul_rows runs the streaming kernel on any
 * number of rows, for a batch of sequences whose rows must each get what
 * they get alone.
 *
 * bf16 weights have a second kernel, written with AVX512_BF16 intrinsics:
 * vdpbf16ps takes the weights as stored and the activations rounded to
 * bf16, one instruction per 32 weights and activation row instead of two
 * FMAs and two integer operations. Its error against the f32 path is at most
 * 2^-8 sum |w x| plus the f32 sums' (matmul.h); it is the default where the
 * CPU has it ("avx512-bf16"), and "avx512" keeps the f32 arithmetic.
 */
#include "matmul.h"

#include "qmatmul.h"
#include "qpack.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#include <sys/auxv.h>
#endif

/* The helpers below return 64-byte vectors; they are always inlined, so the
 * ABI warning GCC gives for that does not apply. (Casts between vector
 * types of one size reinterpret the bits.) */
#pragma GCC diagnostic ignored "-Wpsabi"

#define VW 16 /* floats per vector */
typedef float vf __attribute__((vector_size(VW * 4)));
typedef uint16_t vh __attribute__((vector_size(VW * 2)));
typedef uint32_t vu __attribute__((vector_size(VW * 4)));
typedef _Float16 vhf __attribute__((vector_size(VW * 2)));

static int n_threads = 0; /* 0: not set yet, use omp's default */

/* 16 f16 values at p widened to f32 with integer operations (exact for
 * normals, subnormals, infinities and NaN), because GCC widens _Float16
 * vectors one element at a time. */
static inline __attribute__((always_inline)) vf f16x16(const void *p)
{
	vh h;
	vu u, o, e, inf, sub, os;
	vf fs;

	memcpy(&h, p, sizeof h);
	u = __builtin_convertvector(h, vu);
	o = (u & 0x7fffu) << 13;           /* exponent and mantissa in place */
	e = o & 0x0f800000u;               /* the f16 exponent field */
	o += (127u - 15u) << 23;           /* rebias */
	inf = (vu)(e == 0x0f800000u);      /* all ones where inf/NaN */
	o += inf & ((128u - 16u) << 23);
	sub = (vu)(e == 0u);               /* zero or subnormal */
	fs = (vf)(o + (1u << 23)) - (vf)((vu){0} + (113u << 23)); /* renormalise */
	memcpy(&os, &fs, sizeof os);
	o = (o & ~sub) | (os & sub);
	return (vf)(o | ((u & 0x8000u) << 16));
}

static inline __attribute__((always_inline)) float load_w1(const unsigned char *p, pcg_dtype dt)
{
	uint16_t h;

	if (dt == PCG_F32) {
		float f;
		memcpy(&f, p, sizeof f);
		return f;
	}
	memcpy(&h, p, sizeof h);
	return dt == PCG_BF16 ? pcg_bf16_to_f32(h) : pcg_f16_to_f32(h);
}

static inline __attribute__((always_inline)) float hsum(const vf *pv)
{
	const vf v = *pv;
	float s = 0;
	for (int i = 0; i < VW; i++)
		s += v[i];
	return s;
}

/* R weight rows (w, stride row_bytes) times NB activation rows x (stride K):
 * y[b * ldy + r]. xs is x with each block of 32 split into its even and odd
 * elements, the order in which bf16 pairs widen most cheaply: a 32-bit word
 * holding two bf16 values gives the even one by a shift and the odd one by
 * a mask. Several weight rows share each activation load, and several
 * activation rows share each weight load. Every (row, activation row) sum
 * is accumulated in the same order whatever R and NB are, so a logit does
 * not depend on how rows and positions were grouped: a block of positions
 * gives bit for bit what single positions give, and a subset of rows what
 * the full matrix gives. */
/* Bytes ahead of each weight stream to prefetch: with several streams per
 * thread and FMAs between the loads, the hardware prefetcher alone leaves
 * memory bandwidth unused. */
#ifndef PF_LOC
#define PF_LOC 1 /* prefetcht2: into L2/L3, which have the queue depth */
#endif
#ifndef PF_AHEAD
#define PF_AHEAD 0 /* 8192 before: for rows of 4 KB (bf16, K = 2048) that fell in
		    * the rows being read; LLaSA-1B's shape bf16 ran at 80-87 ms a
		    * step (avx512-bf16) against 69-71 ms this way, in one run */
#endif
/* where a pass over R rows of row_bytes prefetches: PF_AHEAD bytes on, or
 * with PF_AHEAD 0 the same place R rows on (the next pass's rows) */
#define PF_DIST(R, row_bytes) (PF_AHEAD ? (size_t)PF_AHEAD : (size_t)(R) * (row_bytes))

static inline __attribute__((always_inline)) void
tile_dot(float *y, int ldy, const float *x, const void *xs, int K, const unsigned char *w,
	 size_t row_bytes, pcg_dtype dt, const int R, const int NB)
{
	const size_t es = dt == PCG_F32 ? 4 : 2;
	const float *xv = dt == PCG_BF16 ? (const float *)xs : x;
	vf acc[4][4];
	int k = 0;

#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
#pragma GCC unroll 4
		for (int b = 0; b < NB; b++)
			acc[r][b] = (vf){0};
	for (; k + 2 * VW <= K; k += 2 * VW) {
		vf w0[4], w1[4];
#pragma GCC unroll 4
		for (int r = 0; r < R; r++) {
			const unsigned char *wr = w + r * row_bytes;
			__builtin_prefetch(wr + es * (size_t)k + PF_DIST(R, row_bytes), 0, PF_LOC);
			if (dt == PCG_BF16) {
				vu u;
				memcpy(&u, wr + 2 * (size_t)k, sizeof u);
				w0[r] = (vf)(u << 16);
				w1[r] = (vf)(u & 0xffff0000u);
			} else if (dt == PCG_F16) {
				w0[r] = f16x16(wr + 2 * (size_t)k);
				w1[r] = f16x16(wr + 2 * (size_t)(k + VW));
			} else {
				memcpy(&w0[r], wr + 4 * (size_t)k, sizeof w0[r]);
				memcpy(&w1[r], wr + 4 * (size_t)(k + VW), sizeof w1[r]);
			}
		}
#pragma GCC unroll 4
		for (int b = 0; b < NB; b++) {
			vf x0, x1;
			memcpy(&x0, xv + (size_t)b * K + k, sizeof x0);
			memcpy(&x1, xv + (size_t)b * K + k + VW, sizeof x1);
#pragma GCC unroll 4
			for (int r = 0; r < R; r++) {
				acc[r][b] += w0[r] * x0;
				acc[r][b] += w1[r] * x1;
			}
		}
	}
#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
#pragma GCC unroll 4
		for (int b = 0; b < NB; b++) {
			float s = hsum(&acc[r][b]);
			for (int j = k; j < K; j++)
				s += load_w1(w + r * row_bytes + j * es, dt) * x[(size_t)b * K + j];
			y[(size_t)b * ldy + r] = s;
		}
}

/* Dispatch on the run-time dtype and batch to the compile-time shapes. */
static inline __attribute__((always_inline)) void
tile(float *y, int ldy, const float *x, const void *xs, int K, const unsigned char *w,
     size_t row_bytes, pcg_dtype dt, const int R, int nb)
{
#define NBS(DT) \
	switch (nb) { \
	case 1: tile_dot(y, ldy, x, xs, K, w, row_bytes, DT, R, 1); break; \
	case 2: tile_dot(y, ldy, x, xs, K, w, row_bytes, DT, R, 2); break; \
	case 3: tile_dot(y, ldy, x, xs, K, w, row_bytes, DT, R, 3); break; \
	default: tile_dot(y, ldy, x, xs, K, w, row_bytes, DT, R, 4); break; \
	}
	if (dt == PCG_BF16)
		NBS(PCG_BF16)
	else if (dt == PCG_F16)
		NBS(PCG_F16)
	else
		NBS(PCG_F32)
#undef NBS
}

/* Rows [r0, r1) of W against all B activation rows: groups of R weight rows
 * times groups of up to four activation rows. The weight rows stay in L1/L2
 * while the groups of activation rows pass over them. */
static inline __attribute__((always_inline)) void
rows_small(float *y, int ldy, const float *x, const void *xs, int B, const pcg_mat *W, int r0,
	   int r1, int yr0, const int R)
{
	const int K = W->cols;
	const pcg_dtype dt = W->dtype;
	const size_t row_bytes = (size_t)K * (dt == PCG_F32 ? 4 : 2);
	int r = r0;

	for (; r < r1; r += R > 1 && r + R <= r1 ? R : 1) {
		const unsigned char *w = (const unsigned char *)W->data + (size_t)r * row_bytes;
		for (int b0 = 0; b0 < B; b0 += 4) {
			const int nb = B - b0 < 4 ? B - b0 : 4;
			float *yb = y + (r - yr0) + (size_t)b0 * ldy;
			const float *xb = x + (size_t)b0 * K, *xsb = (const float *)xs + (size_t)b0 * K;
			if (R > 1 && r + R <= r1)
				tile(yb, ldy, xb, xsb, K, w, row_bytes, dt, R, nb);
			else
				tile(yb, ldy, xb, xsb, K, w, row_bytes, dt, 1, nb);
		}
	}
}

/* The same body compiled for three instruction sets. R, the weight rows per
 * group, fits the registers: AVX-512 has 32 vector registers, enough for 4
 * rows x 4 activation rows of accumulators; AVX2's 16 hold one row. */
typedef void rows_fn(float *, int, const float *, const void *, int, const pcg_mat *, int, int,
		     int);
/* A family whose kernel is a tile of R weight rows by NB activation rows
 * (TILE(y, ldy, x, K, w, row_bytes, dt, R, NB), R 4 with one activation row,
 * 2 with two, else 1; NB up to 4): NAME walks the rows r0..r1 with it, each
 * shape and dtype a compile-time constant (NAME##_dt picks them). The AVX2
 * and NEON families. */
#define TILED_ROWS(NAME, ATTR, TILE) \
static inline __attribute__((always_inline)) ATTR void \
NAME##_dt(float *y, int ldy, const float *x, const float *xs, int K, const unsigned char *w, \
	  size_t row_bytes, const pcg_dtype dt, int R, int nb) \
{ \
	if (R == 4) \
		TILE(y, ldy, x, xs, K, w, row_bytes, dt, 4, 1); \
	else if (R == 2 && nb == 1) \
		TILE(y, ldy, x, xs, K, w, row_bytes, dt, 2, 1); \
	else if (R == 2) \
		TILE(y, ldy, x, xs, K, w, row_bytes, dt, 2, 2); \
	else \
		switch (nb) { \
		case 1: TILE(y, ldy, x, xs, K, w, row_bytes, dt, 1, 1); break; \
		case 2: TILE(y, ldy, x, xs, K, w, row_bytes, dt, 1, 2); break; \
		case 3: TILE(y, ldy, x, xs, K, w, row_bytes, dt, 1, 3); break; \
		default: TILE(y, ldy, x, xs, K, w, row_bytes, dt, 1, 4); break; \
		} \
} \
ATTR static void NAME(float *y, int ldy, const float *x, const void *xs, int B, \
		      const pcg_mat *W, int r0, int r1, int yr0) \
{ \
	const int K = W->cols; \
	const pcg_dtype dt = W->dtype; \
	const size_t row_bytes = (size_t)K * (dt == PCG_F32 ? 4 : 2); \
	const int RB = B == 1 ? 4 : B == 2 ? 2 : 1; /* weight rows at once */ \
	for (int r = r0; r < r1;) { \
		const int R = r + RB <= r1 ? RB : 1; \
		const unsigned char *w = (const unsigned char *)W->data + (size_t)r * row_bytes; \
		for (int b0 = 0; b0 < B; b0 += 4) { \
			const int nb = B - b0 < 4 ? B - b0 : 4; \
			float *yb = y + (r - yr0) + (size_t)b0 * ldy; \
			const float *xb = x + (size_t)b0 * K, *xsb = (const float *)xs + (size_t)b0 * K; \
			if (dt == PCG_BF16) \
				NAME##_dt(yb, ldy, xb, xsb, K, w, row_bytes, PCG_BF16, R, nb); \
			else if (dt == PCG_F16) \
				NAME##_dt(yb, ldy, xb, xsb, K, w, row_bytes, PCG_F16, R, nb); \
			else \
				NAME##_dt(yb, ldy, xb, xsb, K, w, row_bytes, PCG_F32, R, nb); \
		} \
		r += R; \
	} \
}

#define ROWS_FOR(name, attr, R) \
	attr static void name(float *y, int ldy, const float *x, const void *xs, int B, \
			      const pcg_mat *W, int r0, int r1, int yr0) \
	{ \
		rows_small(y, ldy, x, xs, B, W, r0, r1, yr0, R); \
	}
#if defined(__x86_64__)
ROWS_FOR(rows_avx512, __attribute__((target("arch=x86-64-v4"))), 4)
#endif
ROWS_FOR(rows_generic, , 1)

#if defined(__x86_64__)

/* AVX2 (+FMA, F16C) with its own 256-bit intrinsics. The vector-extension
 * body above, compiled for AVX2, split each 64-byte vector over two of its
 * 16 registers, ran out of them and moved accumulators through the stack
 * and general registers: 3.9 ms a step of the shipped voice against 1.2 ms
 * for the portable build (SSE2) and 0.56 ms for AVX-512. Here a weight row
 * is widened in registers (f16: F16C; f32: a load, 16 a step; bf16: below,
 * tile_bf16_avx2) into two accumulators per (row, activation row), and as
 * many weight rows at once as the registers hold for the batch: 4 for one
 * activation row (8 accumulators, 8 FMA chains to hide their latency), 2
 * for two, 1 for three or four. Each (row, activation row) sum runs in one
 * order whatever the grouping (the two accumulators, then the tail), so a
 * row gets what it gets alone. */
#define AVX2_TGT __attribute__((target("arch=x86-64-v3")))
static inline __attribute__((always_inline)) AVX2_TGT __m256 avx2_w8(const unsigned char *p,
								     pcg_dtype dt)
{
	if (dt == PCG_BF16)
		return _mm256_castsi256_ps(_mm256_slli_epi32(
			_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
	if (dt == PCG_F16)
		return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
	return _mm256_loadu_ps((const float *)p);
}

static inline __attribute__((always_inline)) AVX2_TGT float avx2_hsum1(__m256 s)
{
	__m128 t = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
	t = _mm_add_ps(t, _mm_movehl_ps(t, t));
	t = _mm_add_ss(t, _mm_movehdup_ps(t));
	return _mm_cvtss_f32(t);
}

static inline __attribute__((always_inline)) AVX2_TGT float avx2_hsum(__m256 a, __m256 b)
{
	return avx2_hsum1(_mm256_add_ps(a, b));
}

static inline __attribute__((always_inline)) AVX2_TGT void
tile_avx2(float *y, int ldy, const float *x, const float *xs, int K, const unsigned char *w,
	  size_t row_bytes, const pcg_dtype dt, const int R, const int NB)
{
	const size_t es = dt == PCG_F32 ? 4 : 2;
	__m256 acc[4][4][2];
	int k = 0;

	(void)xs; /* f16 and f32 read x as it is (bf16: tile_bf16_avx2) */

#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
#pragma GCC unroll 4
		for (int b = 0; b < NB; b++)
			acc[r][b][0] = acc[r][b][1] = _mm256_setzero_ps();
	for (; k + 16 <= K; k += 16) {
#pragma GCC unroll 4
		for (int r = 0; r < R; r++) {
			const unsigned char *wr = w + r * row_bytes + es * (size_t)k;
			__builtin_prefetch(wr + PF_DIST(R, row_bytes), 0, PF_LOC);
			const __m256 w0 = avx2_w8(wr, dt), w1 = avx2_w8(wr + 8 * es, dt);
#pragma GCC unroll 4
			for (int b = 0; b < NB; b++) {
				const float *xb = x + (size_t)b * K + k;
				acc[r][b][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xb), acc[r][b][0]);
				acc[r][b][1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xb + 8), acc[r][b][1]);
			}
		}
	}
#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
#pragma GCC unroll 4
		for (int b = 0; b < NB; b++) {
			float s = avx2_hsum(acc[r][b][0], acc[r][b][1]);
			for (int j = k; j < K; j++)
				s += load_w1(w + r * row_bytes + j * es, dt) * x[(size_t)b * K + j];
			y[(size_t)b * ldy + r] = s;
		}
}

TILED_ROWS(rows_avx2_f, AVX2_TGT, tile_avx2)

/* bf16 on AVX2: 32 weights a step in two loads, the even weights by a shift
 * and the odd ones by a mask (2 integer operations for 16 weights) against
 * xs, the activations as evens then odds in each block of 32 (pcg_matmul),
 * into one accumulator per (row, activation row): even then odd of the
 * first 16 weights, then of the next 16, then the tail, whatever the tile,
 * so a row gets what it gets alone. One accumulator each leaves registers
 * for the tiles that read the activations least: 8 rows for one activation
 * row (8 FMA chains), 4 rows x 2, 3 rows x 3 or 4; with more than one
 * position the evens of the rows go against each position, then their odds,
 * so that for 3 rows 12 accumulators, the rows' widened weights and one
 * position's activations fill the 16 registers
 * (12 FMA chains where 8 left the FMA units no slack; each position's
 * activations loaded once for 3 rows: a block of 4 costs 1.47x a step for
 * LLaSA-1B's shape where 2 rows x 4 cost 1.64x, docs/BENCHMARKS.md). */
static inline __attribute__((always_inline)) AVX2_TGT void
tile_bf16_avx2(float *y, int ldy, const float *x, const float *xs, int K,
	       const unsigned char *w, size_t row_bytes, const int R, const int NB)
{
	const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
	__m256 acc[8][4];
	int k = 0;

#pragma GCC unroll 8
	for (int r = 0; r < R; r++)
#pragma GCC unroll 4
		for (int b = 0; b < NB; b++)
			acc[r][b] = _mm256_setzero_ps();
	for (; k + 32 <= K; k += 32) {
#pragma GCC unroll 8
		for (int r = 0; r < R; r++)
			__builtin_prefetch(w + r * row_bytes + 2 * (size_t)k + PF_DIST(R, row_bytes), 0,
					   PF_LOC);
#pragma GCC unroll 2
		for (int h = 0; h < 2; h++) {
			if (NB == 1) { /* a row at a time: its weights used once */
				const __m256 xe = _mm256_loadu_ps(xs + k + 8 * h);
				const __m256 xo = _mm256_loadu_ps(xs + k + 16 + 8 * h);
#pragma GCC unroll 8
				for (int r = 0; r < R; r++) {
					const __m256i u = _mm256_loadu_si256(
						(const __m256i *)(w + r * row_bytes + 2 * (size_t)k + 32 * h));
					acc[r][0] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(u, 16)),
								    xe, acc[r][0]);
					acc[r][0] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(u, hi)),
								    xo, acc[r][0]);
				}
				continue;
			}
			/* the evens of the R rows against each position, then their
			 * odds: R x NB sums, R widened rows and one position's
			 * activations in the 16 registers (R = 3: 12 + 3 + 1) */
			__m256 v[4]; /* R <= 4 here */
#pragma GCC unroll 2
			for (int odd = 0; odd < 2; odd++) {
#pragma GCC unroll 4
				for (int r = 0; r < R; r++) {
					const __m256i u = _mm256_loadu_si256(
						(const __m256i *)(w + r * row_bytes + 2 * (size_t)k + 32 * h));
					v[r] = _mm256_castsi256_ps(odd ? _mm256_and_si256(u, hi)
								       : _mm256_slli_epi32(u, 16));
				}
#pragma GCC unroll 4
				for (int b = 0; b < NB; b++) {
					const __m256 xv =
						_mm256_loadu_ps(xs + (size_t)b * K + k + 16 * odd + 8 * h);
#pragma GCC unroll 4
					for (int r = 0; r < R; r++)
						acc[r][b] = _mm256_fmadd_ps(v[r], xv, acc[r][b]);
				}
			}
		}
	}
#pragma GCC unroll 8
	for (int r = 0; r < R; r++)
#pragma GCC unroll 4
		for (int b = 0; b < NB; b++) {
			float sum = avx2_hsum1(acc[r][b]);
			for (int j = k; j < K; j++)
				sum += load_w1(w + r * row_bytes + 2 * (size_t)j, PCG_BF16) *
				       x[(size_t)b * K + j];
			y[(size_t)b * ldy + r] = sum;
		}
}

/* The AVX2 family: bf16 by tile_bf16_avx2, f16 and f32 by tile_avx2. */
AVX2_TGT static void rows_avx2(float *y, int ldy, const float *x, const void *xs, int B,
			       const pcg_mat *W, int r0, int r1, int yr0)
{
	if (W->dtype != PCG_BF16) {
		rows_avx2_f(y, ldy, x, xs, B, W, r0, r1, yr0);
		return;
	}
	const int K = W->cols;
	const size_t row_bytes = (size_t)K * 2;
	const int RB = B == 1 ? 8 : B == 2 ? 4 : 3; /* weight rows at once */
	for (int r = r0; r < r1;) {
		const int R = r + RB <= r1 ? RB : 1;
		const unsigned char *w = (const unsigned char *)W->data + (size_t)r * row_bytes;
		for (int b0 = 0; b0 < B; b0 += 4) {
			const int nb = B - b0 < 4 ? B - b0 : 4;
			float *yb = y + (r - yr0) + (size_t)b0 * ldy;
			const float *xb = x + (size_t)b0 * K, *xsb = (const float *)xs + (size_t)b0 * K;
			/* R is RB (8 for one position, 4 for two, else 3) or 1 */
#define BF16_NB(R) \
	switch (nb) { \
	case 1: tile_bf16_avx2(yb, ldy, xb, xsb, K, w, row_bytes, R, 1); break; \
	case 2: tile_bf16_avx2(yb, ldy, xb, xsb, K, w, row_bytes, R, 2); break; \
	case 3: tile_bf16_avx2(yb, ldy, xb, xsb, K, w, row_bytes, R, 3); break; \
	default: tile_bf16_avx2(yb, ldy, xb, xsb, K, w, row_bytes, R, 4); break; \
	}
			if (R == 8)
				tile_bf16_avx2(yb, ldy, xb, xsb, K, w, row_bytes, 8, 1);
			else if (R == 4)
				tile_bf16_avx2(yb, ldy, xb, xsb, K, w, row_bytes, 4, 2);
			else if (R == 3)
				BF16_NB(3)
			else
				BF16_NB(1)
#undef BF16_NB
		}
		r += R;
	}
}

/* bf16 weights by vdpbf16ps (AVX512_BF16): xb is x rounded to bf16, each row
 * padded with zeros to Kp, a multiple of 32. One instruction multiplies 32
 * weights (as stored: pairs of bf16) by 32 activations and adds the 16 pair
 * sums into 16 f32 lanes, so a step of 32 weights costs one instruction per
 * activation row where widening costs two FMAs and two integer operations.
 * The last partial step loads the weights under a mask (zeros past K, which
 * meet xb's zeros). As in tile_dot, each (row, activation row) sum runs in
 * one order whatever R and NB are. */
#define BF16_TGT __attribute__((target("arch=x86-64-v4,avx512bf16")))
static inline __attribute__((always_inline)) BF16_TGT void
tile_bf16dot(float *y, int ldy, const uint16_t *xb, int Kp, int K, const unsigned char *w,
	     size_t row_bytes, const int R, const int NB)
{
	__m512 acc[4][8];

#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
#pragma GCC unroll 8
		for (int b = 0; b < NB; b++)
			acc[r][b] = _mm512_setzero_ps();
	for (int k = 0; k < K; k += 2 * VW) {
		const __mmask32 m = K - k >= 2 * VW ? ~(__mmask32)0 : ((__mmask32)1 << (K - k)) - 1;
		__m512i wv[4];
#pragma GCC unroll 4
		for (int r = 0; r < R; r++) {
			const unsigned char *wr = w + r * row_bytes + 2 * (size_t)k;
			__builtin_prefetch(wr + PF_DIST(R, row_bytes), 0, PF_LOC);
			wv[r] = _mm512_maskz_loadu_epi16(m, wr);
		}
#pragma GCC unroll 8
		for (int b = 0; b < NB; b++) {
			const __m512i xv = _mm512_loadu_si512(xb + (size_t)b * Kp + k);
#pragma GCC unroll 4
			for (int r = 0; r < R; r++)
				acc[r][b] = _mm512_dpbf16_ps(acc[r][b], (__m512bh)xv, (__m512bh)wv[r]);
		}
	}
#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
#pragma GCC unroll 8
		for (int b = 0; b < NB; b++)
			y[(size_t)b * ldy + r] = _mm512_reduce_add_ps(acc[r][b]);
}

/* Groups of 4 weight rows against groups of up to 4 activation rows (16
 * accumulators, 4 weight vectors, one activation vector: 21 of the 32
 * registers); a second group of activation rows finds the 4 weight rows in
 * L1 (measured on 8 rows: a little faster than 2 weight rows x 8 activation
 * rows, which reads each weight vector once but keeps half the streams in
 * flight). Rows past the last group of 4 one at a time against up to 8
 * activation rows. */
BF16_TGT static void rows_bf16dot(float *y, int ldy, const float *x, const void *xs, int B,
				  const pcg_mat *W, int r0, int r1, int yr0)
{
	const int K = W->cols, Kp = (K + 2 * VW - 1) / (2 * VW) * (2 * VW);
	const size_t row_bytes = (size_t)K * 2;
	const uint16_t *xb = xs;

	(void)x;
	for (int r = r0; r < r1; r += r + 4 <= r1 ? 4 : 1) {
		const unsigned char *w = (const unsigned char *)W->data + (size_t)r * row_bytes;
		const int R = r + 4 <= r1 ? 4 : 1, G = R == 4 ? 4 : 8;
		for (int b0 = 0; b0 < B; b0 += G) {
			const int nb = B - b0 < G ? B - b0 : G;
			float *yb = y + (r - yr0) + (size_t)b0 * ldy;
			const uint16_t *xbb = xb + (size_t)b0 * Kp;
#define T(RR, NB) tile_bf16dot(yb, ldy, xbb, Kp, K, w, row_bytes, RR, NB)
			if (R == 4) {
				switch (nb) {
				case 1: T(4, 1); break;
				case 2: T(4, 2); break;
				case 3: T(4, 3); break;
				default: T(4, 4); break;
				}
			} else {
				switch (nb) {
				case 1: T(1, 1); break;
				case 2: T(1, 2); break;
				case 3: T(1, 3); break;
				case 4: T(1, 4); break;
				case 5: T(1, 5); break;
				case 6: T(1, 6); break;
				case 7: T(1, 7); break;
				default: T(1, 8); break;
				}
			}
#undef T
		}
	}
}

#endif /* __x86_64__ */

#if defined(__aarch64__)
/* NEON (every AArch64 CPU has it): 128-bit vectors, 32 registers. A step is
 * 16 weights of a row, widened in registers (bf16: a shift left by 16 of
 * each half, shll/shll2; f16: fcvtl/fcvtl2; f32: loads), into four
 * accumulators per (row, activation row), each its own chain of FMAs. The
 * registers hold 16 accumulators: 4 weight rows for one activation row (16
 * chains, enough to cover the FMA latency of two pipes), 2 for two, 1 for
 * three or four. Each (row, activation row) sum runs in one order whatever
 * the grouping (the four accumulators, reduced in a fixed order, then the
 * tail), so a row gets what it gets alone. */
static inline __attribute__((always_inline)) void neon_w16(float32x4_t wv[4],
							   const unsigned char *p, pcg_dtype dt)
{
	if (dt == PCG_F32) {
		for (int i = 0; i < 4; i++)
			wv[i] = vreinterpretq_f32_u8(vld1q_u8(p + 16 * i));
		return;
	}
	const uint16x8_t a = vreinterpretq_u16_u8(vld1q_u8(p)),
			 b = vreinterpretq_u16_u8(vld1q_u8(p + 16));
	if (dt == PCG_BF16) {
		wv[0] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(a), 16));
		wv[1] = vreinterpretq_f32_u32(vshll_high_n_u16(a, 16));
		wv[2] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(b), 16));
		wv[3] = vreinterpretq_f32_u32(vshll_high_n_u16(b, 16));
	} else {
		wv[0] = vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(a)));
		wv[1] = vcvt_high_f32_f16(vreinterpretq_f16_u16(a));
		wv[2] = vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(b)));
		wv[3] = vcvt_high_f32_f16(vreinterpretq_f16_u16(b));
	}
}

static inline __attribute__((always_inline)) void
tile_neon(float *y, int ldy, const float *x, const float *xs, int K, const unsigned char *w,
	  size_t row_bytes, const pcg_dtype dt, const int R, const int NB)
{
	const size_t es = dt == PCG_F32 ? 4 : 2;
	(void)xs; /* bf16 widens in place (shll) */
	float32x4_t acc[4][4][4];
	int k = 0;

#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
#pragma GCC unroll 4
		for (int b = 0; b < NB; b++)
#pragma GCC unroll 4
			for (int i = 0; i < 4; i++)
				acc[r][b][i] = vdupq_n_f32(0.0f);
	for (; k + 16 <= K; k += 16) {
#pragma GCC unroll 4
		for (int r = 0; r < R; r++) {
			const unsigned char *wr = w + r * row_bytes + es * (size_t)k;
			float32x4_t wv[4];
			__builtin_prefetch(wr + PF_DIST(R, row_bytes), 0, PF_LOC);
			neon_w16(wv, wr, dt);
#pragma GCC unroll 4
			for (int b = 0; b < NB; b++) {
				const float *xb = x + (size_t)b * K + k;
#pragma GCC unroll 4
				for (int i = 0; i < 4; i++)
					acc[r][b][i] = vfmaq_f32(acc[r][b][i], wv[i], vld1q_f32(xb + 4 * i));
			}
		}
	}
#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
#pragma GCC unroll 4
		for (int b = 0; b < NB; b++) {
			float s = vaddvq_f32(vaddq_f32(vaddq_f32(acc[r][b][0], acc[r][b][1]),
						       vaddq_f32(acc[r][b][2], acc[r][b][3])));
			for (int j = k; j < K; j++)
				s += load_w1(w + r * row_bytes + j * es, dt) * x[(size_t)b * K + j];
			y[(size_t)b * ldy + r] = s;
		}
}

TILED_ROWS(rows_neon, , tile_neon)
#endif /* __aarch64__ */

/* Kernel families, the best first: those of the machine's architecture,
 * then "generic". For bf16 weights a family may use a second kernel
 * (bf16), which rounds the activations to bf16; the others keep the f32
 * arithmetic. */
static const struct {
	const char *name, *cpu;
	rows_fn *fn, *bf16;
} isas[] = {
#if defined(__x86_64__)
	{ "avx512-bf16", "avx512bf16", rows_avx512, rows_bf16dot },
	{ "avx512", "x86-64-v4", rows_avx512, NULL },
	{ "avx2", "x86-64-v3", rows_avx2, NULL },
#elif defined(__aarch64__)
	{ "neon", "asimd", rows_neon, NULL },
#endif
	{ "generic", NULL, rows_generic, NULL },
};
static int isa = -1; /* index into isas; -1: not chosen yet */

static int isa_ok(int i)
{
	if (isas[i].cpu == NULL)
		return 1;
#if defined(__x86_64__)
	__builtin_cpu_init();
	/* __builtin_cpu_supports needs a literal argument. */
	switch (i) {
	case 0: return __builtin_cpu_supports("x86-64-v4") && __builtin_cpu_supports("avx512bf16");
	case 1: return __builtin_cpu_supports("x86-64-v4");
	default: return __builtin_cpu_supports("x86-64-v3");
	}
#elif defined(__aarch64__)
	return (getauxval(AT_HWCAP) & HWCAP_ASIMD) != 0; /* Advanced SIMD */
#else
	return 0;
#endif
}

/* The family: PCG_MATMUL_ISA if it names one the CPU has, else the first
 * (best) the CPU has. */
static void isa_choose(void)
{
	if (isa >= 0) /* before getenv: this runs at every product */
		return;
	const char *env = getenv("PCG_MATMUL_ISA");
	if (env != NULL && *env != '\0' && pcg_matmul_set_isa(env) == 0)
		return;
	int i = 0;
	while (!isa_ok(i))
		i++;
	isa = i;
}

int pcg_matmul_set_isa(const char *name)
{
	for (int i = 0; i < (int)(sizeof isas / sizeof isas[0]); i++)
		if (!strcmp(isas[i].name, name) && isa_ok(i)) {
			isa = i;
			return 0;
		}
	return -1;
}

const char *pcg_matmul_isa(void)
{
	isa_choose();
	return isas[isa].name;
}

/* The name of the core OpenBLAS chose when it has no AVX2 kernels on a CPU
 * with AVX2 and FMA, with *want what OPENBLAS_CORETYPE should say; NULL
 * otherwise (matmul.h). */
static const char *blas_weak_core(const char **want)
{
#if defined(__x86_64__)
	/* OpenBLAS's cores without AVX2 kernels (its DYNAMIC_ARCH names) */
	static const char *old[] = { "Prescott", "Core2", "Penryn", "Dunnington", "Nehalem",
				     "Atom", "Katmai", "Coppermine", "Northwood", "Banias",
				     "Sandybridge", "Barcelona", "Opteron", "Opteron_SSE3",
				     "Bobcat", "Bulldozer", "Piledriver", "Steamroller",
				     "Excavator", "Unknown" };
	const char *core = openblas_get_corename();

	__builtin_cpu_init();
	if (core == NULL || !__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
		return NULL;
	for (size_t i = 0; i < sizeof old / sizeof old[0]; i++)
		if (!strcasecmp(core, old[i])) {
			*want = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
					__builtin_cpu_supports("avx512vl") &&
					__builtin_cpu_supports("avx512dq") ? "SkylakeX" : "Haswell";
			return core;
		}
#endif
	(void)want;
	return NULL;
}

#if defined(__x86_64__) && defined(__GLIBC__)
/* Before main: where OpenBLAS took older kernels than the CPU allows and
 * the user did not choose (OPENBLAS_CORETYPE unset), the program starts
 * again at once with OPENBLAS_CORETYPE set, which OpenBLAS reads only as it
 * loads. So every program takes the same kernels on a CPU, whoever starts
 * it (its sums, and so its tokens, are the same in a pipeline and alone).
 * glibc passes an ELF constructor main's arguments; the exec keeps the
 * process id. PCG_BLAS_CORE=0 leaves OpenBLAS's choice. If the exec fails,
 * the program goes on as it is. */
__attribute__((constructor)) static void blas_core_fix(int argc, char **argv, char **envp)
{
	const char *want = NULL, *off = getenv("PCG_BLAS_CORE");

	(void)argc;
	(void)envp;
	if (getenv("OPENBLAS_CORETYPE") != NULL || (off != NULL && !strcmp(off, "0")) ||
	    argv == NULL || blas_weak_core(&want) == NULL)
		return;
	/* the program's own path, not /proc/self/exe, whose name the process
	 * would take (its comm, which pcg-runtime and pcg-down look for) */
	char self[4096];
	const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n <= 0 || n >= (ssize_t)sizeof self - 1)
		return;
	self[n] = '\0';
	if (setenv("OPENBLAS_CORETYPE", want, 1) == 0)
		execv(self, argv);
	unsetenv("OPENBLAS_CORETYPE"); /* not taken: as OpenBLAS chose */
}
#endif

void pcg_blas_warn(const char *prog)
{
	const char *want = NULL, *core = blas_weak_core(&want);

	if (core != NULL)
		fprintf(stderr, "%s: OpenBLAS chose its %s kernels, older than this CPU's (a model it "
			"does not know): its products (prefill, the codec) run at half their speed or "
			"less; OPENBLAS_CORETYPE=%s would choose better (unset, the programs set it "
			"themselves unless PCG_BLAS_CORE=0)\n", prog, core, want);
}

/* Any number of rows through the streaming kernel: each row gets the same
 * sums whatever B is (tile_dot), and each tile of weight rows is applied to
 * all rows of x while it is in cache. */
static void matmul_small(float *y, int ldy, const float *x, int B, const pcg_mat *W, int r0,
			 int nr)
{
	/* Chunks of 16 rows: enough work per chunk, cache lines not shared. */
	const int chunk = 16;
	const int nchunks = (nr + chunk - 1) / chunk;
	const int K = W->cols;
	const int bf16 = W->dtype == PCG_BF16;
	isa_choose();
	const int dot = bf16 && isas[isa].bf16 != NULL;
	rows_fn *rows = dot ? isas[isa].bf16 : isas[isa].fn;
	/* The bf16 kernels want x prepared: as evens then odds in each block of
	 * 32 (widening) or rounded to bf16 and padded to Kp (vdpbf16ps). On the
	 * stack for a few rows (K <= a few 10^4: a few hundred KB at most). */
	const int Kp = (K + 2 * VW - 1) / (2 * VW) * (2 * VW);
	const size_t xs_n = (size_t)B * (dot && Kp / 2 > K ? Kp / 2 : K); /* floats */
	float xs_small[bf16 && B <= PCG_MATMUL_SMALL ? xs_n : 1];
	float *xw = bf16 && B > PCG_MATMUL_SMALL ? malloc(xs_n * sizeof *xw) : xs_small;
	const void *xs = bf16 ? (const void *)xw : x;

	if (xw == NULL) { /* the same sums, in products that need no memory */
		for (int b = 0; b < B; b += PCG_MATMUL_SMALL)
			matmul_small(y + (size_t)b * ldy, ldy, x + (size_t)b * K,
				     B - b < PCG_MATMUL_SMALL ? B - b : PCG_MATMUL_SMALL, W, r0, nr);
		return;
	}
	for (int b = 0; dot && b < B; b++) { /* as torch's .to(torch.bfloat16) */
		const float *xr = x + (size_t)b * K;
		uint16_t *o = (uint16_t *)xw + (size_t)b * Kp;
		for (int k = 0; k < K; k++)
			o[k] = pcg_f32_to_bf16(xr[k]);
		for (int k = K; k < Kp; k++)
			o[k] = 0;
	}
	for (int b = 0; bf16 && !dot && b < B; b++) {
		const float *xr = x + (size_t)b * K;
		float *o = xw + (size_t)b * K;
		int k = 0;
		for (; k + 2 * VW <= K; k += 2 * VW)
			for (int j = 0; j < VW; j++) {
				o[k + j] = xr[k + 2 * j];
				o[k + VW + j] = xr[k + 2 * j + 1];
			}
	}
	/* one thread: no parallel region (even a team of one wakes futexes at
	 * its end, tens of them a step); the same chunks, so the same sums */
	if (nchunks == 1 || pcg_get_threads() == 1) {
		for (int c = 0; c < nchunks; c++)
			rows(y, ldy, x, xs, B, W, r0 + c * chunk,
			     c + 1 < nchunks ? r0 + (c + 1) * chunk : r0 + nr, r0);
	} else {
#pragma omp parallel for schedule(static)
		for (int c = 0; c < nchunks; c++) {
			int a = r0 + c * chunk;
			int e = a + chunk < r0 + nr ? a + chunk : r0 + nr;
			rows(y, ldy, x, xs, B, W, a, e, r0);
		}
	}
	if (xw != xs_small)
		free(xw);
}

/* Whether W's products run on the vdpbf16ps kernels. */
static int bf16_dot(const pcg_mat *W)
{
	isa_choose();
	return W->dtype == PCG_BF16 && isas[isa].bf16 != NULL;
}

/* Prefill: sgemm on tiles of W widened to f32 (f32 weights are used in
 * place). Each thread takes whole tiles and calls a single-threaded sgemm:
 * OpenMP threads that spin after a parallel region would otherwise fight
 * OpenBLAS's own threads for the same cores (measured: 8x slower on 2 cores),
 * and OpenBLAS documents single-threaded use inside threaded programs. */
static void matmul_blas(float *y, int ldy, const float *x, int B, const pcg_mat *W, int r0, int nr)
{
	const int K = W->cols;
	const size_t rb = pcg_dtype_row_bytes(W->dtype, K);
	enum { TILE = 128 };
	const int ntiles = (nr + TILE - 1) / TILE;
	/* (bf16 weights on the vdpbf16ps kernels never come here: pcg_matmul) */
	int failed = 0;

#pragma omp parallel
	{
		float *tile = W->dtype == PCG_F32 ? NULL : malloc((size_t)TILE * K * sizeof *tile);
		if (W->dtype != PCG_F32 && tile == NULL) {
#pragma omp atomic write
			failed = 1;
		}
#pragma omp for schedule(dynamic, 1)
		for (int t = 0; t < ntiles; t++) {
			const int a = r0 + t * TILE, n = nr - t * TILE < TILE ? nr - t * TILE : TILE;
			const float *w = (const float *)W->data + (size_t)a * K;
			if (W->dtype != PCG_F32) {
				if (tile == NULL)
					continue;
				pcg_to_f32(tile, (const unsigned char *)W->data + (size_t)a * rb,
					   W->dtype, (size_t)n * K);
				w = tile;
			}
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, n, K, 1.0f, x, K, w,
				    K, 0.0f, y + (size_t)t * TILE, ldy);
		}
		free(tile);
	}
	/* No memory for the tiles: the streaming kernel needs none. */
	if (failed)
		for (int b = 0; b < B; b += PCG_MATMUL_SMALL) {
			int nb = B - b < PCG_MATMUL_SMALL ? B - b : PCG_MATMUL_SMALL;
			float *yb = y + (size_t)b * ldy;
			if (!pcg_dtype_is_quant(W->dtype))
				matmul_small(yb, ldy, x + (size_t)b * K, nb, W, r0, nr);
			else if (pcg_qmatmul(yb, ldy, x + (size_t)b * K, nb, W, r0, nr) < 0)
				for (int i = 0; i < nb; i++) /* no memory at all: a NaN row, */
					for (int r = 0; r < nr; r++) /* which the samplers refuse */
						yb[(size_t)i * ldy + r] = NAN;
		}
}

void pcg_matmul(float *y, int ldy, const float *x, int B, const pcg_mat *W, int r0, int nr)
{
	if (B <= 0 || nr <= 0)
		return;
	if (pcg_dtype_is_quant(W->dtype) && pcg_qpack_active(W) &&
	    pcg_qmatmul(y, ldy, x, B, W, r0, nr) == 0) {
		/* repacked rows: every position at once, each group of rows
		 * applied to all of them while it is in cache (qpack.c) */
	} else if (pcg_dtype_is_quant(W->dtype)) {
		/* Blocks of up to 8 positions through the int8 kernels, a prefill
		 * too: they beat dequantised tiles + sgemm per position (1.3x for
		 * Q8_0 to 2x for the K-quants at 8 positions, bench-matmul), and a
		 * prefill's logits are then what single steps give, bit for bit. */
		for (int b = 0; b < B; b += PCG_MATMUL_SMALL) {
			const int nb = B - b < PCG_MATMUL_SMALL ? B - b : PCG_MATMUL_SMALL;
			if (pcg_qmatmul(y + (size_t)b * ldy, ldy, x + (size_t)b * W->cols, nb, W, r0,
					nr) < 0) /* out of memory */
				matmul_blas(y + (size_t)b * ldy, ldy, x + (size_t)b * W->cols, nb, W,
					    r0, nr);
		}
	} else if (B <= PCG_MATMUL_SMALL || bf16_dot(W)) {
		/* bf16 weights on vdpbf16ps: a prefill through the same kernels,
		 * so that its positions are what blocks and single steps give,
		 * bit for bit (a session resent to another server, or whose
		 * cache was lost, goes on with the tokens it would have had);
		 * at LLaSA-1B's shape no slower than sgemm on widened tiles */
		matmul_small(y, ldy, x, B, W, r0, nr);
	} else {
		matmul_blas(y, ldy, x, B, W, r0, nr);
	}
}

void pcg_matmul_rows(float *y, int ldy, const float *x, int B, const pcg_mat *W, int r0,
		     int nr)
{
	if (B <= 0 || nr <= 0)
		return;
	if (pcg_dtype_is_quant(W->dtype) || B <= PCG_MATMUL_SMALL)
		pcg_matmul(y, ldy, x, B, W, r0, nr); /* blocks of 8, or the kernel below */
	else
		matmul_small(y, ldy, x, B, W, r0, nr);
}

void pcg_set_threads(int n)
{
	if (n <= 0)
		n = omp_get_num_procs();
	n_threads = n;
	omp_set_num_threads(n);
	openblas_set_num_threads(1); /* we thread around it: see matmul_blas */
}

int pcg_get_threads(void)
{
	return n_threads > 0 ? n_threads : omp_get_max_threads();
}
