/* qmatmul.c: f32 activations times ggml block-quantised weights (Q8_0,
 * Q4_0, Q4_K, Q5_K, Q6_K) for small batches: decode (1 row) and
 * verification blocks (up to PCG_MATMUL_SMALL rows).
 *
 * The activations are quantised first, per row, in blocks of 256 (the last
 * block may be shorter, a multiple of 32): xq = nearest(x / dx) with
 * dx = max |x| / 127, as ggml's Q8_K. Every weight format is then a set of
 * sub-blocks s (32 elements; 16 for Q6_K) with small integers w and float
 * coefficients a_s (and m_s for the K-quants' mins), so that
 *
 *   y = sum over activation blocks of dx * (sum_s a_s * I_s - m_s * S_s),
 *   I_s = sum over s of w * xq  (exact, in int32),  S_s = sum over s of xq,
 *
 *   Q8_0: w = qs,      a = d          Q4_K: w = q,      a = d * sc, m = dmin * m
 *   Q4_0: w = q - 8,   a = d          Q5_K: w = q | h,  a = d * sc, m = dmin * m
 *   Q6_K: w = q - 32,  a = d * sc (per 16)
 *
 * which is ggml's dequantised weight times the quantised activation. The
 * integer sums are exact on every path; only the float sums of the terms
 * differ in order between paths (the test bounds that difference).
 *
 * Paths, chosen by CPUID at first use (or by pcg_qmatmul_set_path; on
 * AArch64 by HWCAP, the NEON paths further down):
 *   avx512-vnni  64 weights a step, each activation row one vpdpbusd, one
 *                convert and one FMA per step. vpdpbusd multiplies unsigned
 *                by signed bytes: the K-quants' q are unsigned (their mins
 *                and Q6_K's offset of 32 come off per 16 against the sums of
 *                xq); Q8_0 and Q4_0 take w signed against xq + 128 unsigned,
 *                the accumulator started at -128 * sum(w), which is computed
 *                once per step for all activation rows;
 *   avx-vnni,    32 weights a step in 256-bit vectors, with vpdpbusd (AVX-VNNI)
 *   avx2         or vpmaddubsw + vpmaddwd (AVX2), for CPUs without AVX-512;
 *   generic      the formula above in C, also the tests' reference.
 * Each weight chunk is loaded and unpacked once for all activation rows of
 * the batch, so a block of positions reads the weights once.
 */
#include "qmatmul.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "qpack.h"
#include "quant.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#include <sys/auxv.h>
#endif

#pragma GCC diagnostic ignored "-Wpsabi"

#define QB 256 /* activation block */
#ifndef PF_AHEAD
#define PF_AHEAD 4096 /* bytes */
#endif

/* ------------------------------------------------------- the activations */

/* ggml's nearest_int: round half to even through the float adder. */
static inline int nearest(float f)
{
	return (int)lrintf(f);
}

#if defined(__x86_64__)
/* One block of n (a multiple of 16) values, as the loop below quantises
 * it, bit for bit: the same products, round half to even (vcvtps2dq under
 * the default rounding mode is lrintf), the same clamp; a NaN is skipped by
 * the maximum as there (vmaxps returns its second operand) and becomes 0. */
__attribute__((target("avx512f,avx512bw,avx512dq"))) static void
quantize_block512(const float *x, int n, int8_t *qr, float *d_out, float *s_out)
{
	__m512 mx = _mm512_setzero_ps();
	for (int i = 0; i < n; i += 16)
		mx = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + i)), mx);
	const float amax = _mm512_reduce_max_ps(mx);
	const float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
	const __m512 idv = _mm512_set1_ps(id);
	const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
	*d_out = d;
	for (int s = 0; s < 16; s++) {
		if (16 * s >= n) {
			s_out[s] = 0.0f;
			continue;
		}
		const __m512 xv = _mm512_loadu_ps(x + 16 * s);
		__m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(xv, idv));
		/* a NaN is 0, as (int)lrintf gives it */
		v = _mm512_maskz_mov_epi32(_mm512_cmp_ps_mask(xv, xv, _CMP_ORD_Q),
					   _mm512_min_epi32(_mm512_max_epi32(v, lo), hi));
		_mm_storeu_si128((__m128i *)(qr + 16 * s), _mm512_cvtepi32_epi8(v));
		s_out[s] = (float)_mm512_reduce_add_epi32(v);
	}
}

/* The same with AVX2 (16 values as two vectors of 8), for CPUs without
 * AVX-512 and for the AVX2 and AVX-VNNI families pinned: bit for bit the
 * loop below, as quantize_block512 is. */
__attribute__((target("avx2,fma"))) static void
quantize_block256(const float *x, int n, int8_t *qr, float *d_out, float *s_out)
{
	const __m256 sign = _mm256_set1_ps(-0.0f);
	__m256 mx = _mm256_setzero_ps();
	for (int i = 0; i < n; i += 8)
		mx = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)), mx);
	__m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
	m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
	m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
	const float amax = _mm_cvtss_f32(m4);
	const float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
	const __m256 idv = _mm256_set1_ps(id);
	const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
	*d_out = d;
	for (int s = 0; s < 16; s++) {
		if (16 * s >= n) {
			s_out[s] = 0.0f;
			continue;
		}
		__m256i v[2];
		for (int h = 0; h < 2; h++) {
			const __m256 xv = _mm256_loadu_ps(x + 16 * s + 8 * h);
			const __m256i c = _mm256_cvtps_epi32(_mm256_mul_ps(xv, idv));
			/* a NaN is 0, as (int)lrintf gives it */
			const __m256 ord = _mm256_cmp_ps(xv, xv, _CMP_ORD_Q);
			v[h] = _mm256_and_si256(_mm256_castps_si256(ord),
						_mm256_min_epi32(_mm256_max_epi32(c, lo), hi));
		}
		const __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(v[0], v[1]), 0xd8);
		const __m128i q16 = _mm_packs_epi16(_mm256_castsi256_si128(w),
						    _mm256_extracti128_si256(w, 1));
		_mm_storeu_si128((__m128i *)(qr + 16 * s), q16);
		const __m256i t = _mm256_add_epi32(v[0], v[1]);
		__m128i t4 = _mm_add_epi32(_mm256_castsi256_si128(t),
					   _mm256_extracti128_si256(t, 1));
		t4 = _mm_add_epi32(t4, _mm_shuffle_epi32(t4, 0x4e));
		t4 = _mm_add_epi32(t4, _mm_shuffle_epi32(t4, 0xb1));
		s_out[s] = (float)_mm_cvtsi128_si32(t4);
	}
}

static int have_avx512bw(void)
{
	static int have = -1; /* asked once: every product quantises its activations */
	if (have < 0) {
		__builtin_cpu_init();
		have = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
		       __builtin_cpu_supports("avx512dq");
	}
	return have;
}
#endif

void pcg_qx_quantize(pcg_qx *q, const float *x, int B, int K)
{
	const int nb = (K + QB - 1) / QB;

	q->B = B;
	q->K = K;
	q->nb = nb;
#if defined(__x86_64__)
	/* The family's own width: AVX-512 for its path, AVX2 for the AVX2
	 * and AVX-VNNI paths (what a CPU without AVX-512 runs, also when
	 * pinned on one with it). */
	const char *path = pcg_qmatmul_path();
	const int w512 = !strcmp(path, "avx512-vnni") && have_avx512bw();
	const int w256 = !strcmp(path, "avx2") || !strcmp(path, "avx-vnni"); /* CPUs with AVX2 */
	if (K % 16 == 0 && (w512 || w256)) {
		for (int b = 0; b < B; b++)
			for (int j = 0; j < nb; j++) {
				const int k0 = j * QB, n = K - k0 < QB ? K - k0 : QB;
				(w512 ? quantize_block512 : quantize_block256)(
					x + (size_t)b * K + k0, n, q->q + (size_t)b * K + k0,
					q->d + (size_t)b * nb + j,
					q->s + ((size_t)b * nb + j) * 16);
			}
		return;
	}
#endif
	for (int b = 0; b < B; b++) {
		const float *xr = x + (size_t)b * K;
		int8_t *qr = q->q + (size_t)b * K;
		for (int j = 0; j < nb; j++) {
			const int k0 = j * QB, n = K - k0 < QB ? K - k0 : QB;
			float amax = 0.0f;
			for (int i = 0; i < n; i++) {
				float a = fabsf(xr[k0 + i]);
				amax = a > amax ? a : amax;
			}
			const float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
			q->d[(size_t)b * nb + j] = d;
			for (int i = 0; i < n; i++) {
				int v = nearest(xr[k0 + i] * id);
				qr[k0 + i] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
			}
			/* Sums per 16 for the K-quants' mins and Q6_K's offset. */
			for (int s = 0; s < 16; s++) {
				int sum = 0;
				for (int i = 16 * s; i < 16 * s + 16 && i < n; i++)
					sum += qr[k0 + i];
				q->s[((size_t)b * nb + j) * 16 + s] = (float)sum;
			}
		}
	}
}

/* ------------------------------------------------------------ generic path */

/* The integers w and coefficients of one weight row, sub-block by sub-block,
 * for the reference path: w[K] and a[K / 16], m[K / 32] (per 16 elements a
 * coefficient, repeated for 32-element sub-blocks). */
static void unpack_row(const unsigned char *row, pcg_dtype t, int K, int8_t *w, float *a,
		       float *m)
{
	const size_t bs = pcg_dtype_block_bytes(t);
	const int qk = pcg_dtype_block(t);

	for (int i = 0; i < K / qk; i++) {
		const unsigned char *p = row + (size_t)i * bs;
		int8_t *wi = w + (size_t)i * qk;
		float *ai = a + (size_t)i * qk / 16, *mi = m + (size_t)i * qk / 32;
		switch (t) {
		case PCG_Q8_0: {
			pcg_block_q8_0 b;
			memcpy(&b, p, sizeof b);
			memcpy(wi, b.qs, 32);
			ai[0] = ai[1] = pcg_f16_to_f32(b.d);
			mi[0] = 0.0f;
			break;
		}
		case PCG_Q4_0: {
			pcg_block_q4_0 b;
			memcpy(&b, p, sizeof b);
			for (int l = 0; l < 16; l++) {
				wi[l] = (int8_t)((b.qs[l] & 15) - 8);
				wi[l + 16] = (int8_t)((b.qs[l] >> 4) - 8);
			}
			ai[0] = ai[1] = pcg_f16_to_f32(b.d);
			mi[0] = 0.0f;
			break;
		}
		case PCG_Q4_K:
		case PCG_Q5_K: {
			pcg_block_q5_k b; /* Q4_K: the same fields but qh */
			if (t == PCG_Q4_K) {
				pcg_block_q4_k b4;
				memcpy(&b4, p, sizeof b4);
				b.d = b4.d;
				b.dmin = b4.dmin;
				memcpy(b.scales, b4.scales, 12);
				memset(b.qh, 0, 32);
				memcpy(b.qs, b4.qs, 128);
			} else {
				memcpy(&b, p, sizeof b);
			}
			const float d = pcg_f16_to_f32(b.d), dmin = pcg_f16_to_f32(b.dmin);
			for (int s = 0; s < 8; s++) {
				uint8_t sc, mn;
				pcg_get_scale_min(s, b.scales, &sc, &mn);
				ai[2 * s] = ai[2 * s + 1] = d * sc;
				mi[s] = dmin * mn;
			}
			for (int j = 0; j < 4; j++)
				for (int l = 0; l < 32; l++) {
					wi[64 * j + l] = (int8_t)((b.qs[32 * j + l] & 15) |
								  ((b.qh[l] >> (2 * j) & 1) << 4));
					wi[64 * j + 32 + l] =
						(int8_t)((b.qs[32 * j + l] >> 4) |
							 ((b.qh[l] >> (2 * j + 1) & 1) << 4));
				}
			break;
		}
		case PCG_Q6_K: {
			pcg_block_q6_k b;
			memcpy(&b, p, sizeof b);
			const float d = pcg_f16_to_f32(b.d);
			for (int h = 0; h < 2; h++) {
				const uint8_t *ql = b.ql + 64 * h, *qh = b.qh + 32 * h;
				int8_t *o = wi + 128 * h;
				for (int l = 0; l < 32; l++) {
					o[l] = (int8_t)(((ql[l] & 15) | ((qh[l] & 3) << 4)) - 32);
					o[l + 32] = (int8_t)(((ql[l + 32] & 15) |
							      ((qh[l] >> 2 & 3) << 4)) - 32);
					o[l + 64] = (int8_t)(((ql[l] >> 4) | ((qh[l] >> 4 & 3) << 4)) -
							     32);
					o[l + 96] = (int8_t)(((ql[l + 32] >> 4) |
							      ((qh[l] >> 6 & 3) << 4)) - 32);
				}
			}
			for (int s = 0; s < 16; s++)
				ai[s] = d * (float)b.scales[s];
			for (int s = 0; s < 8; s++)
				mi[s] = 0.0f;
			break;
		}
		default:
			break;
		}
	}
}

void pcg_qdot_ref(float *y, int ldy, const pcg_qx *q, const pcg_mat *W, int r0, int nr)
{
	const int K = W->cols;
	const size_t rb = pcg_dtype_row_bytes(W->dtype, K);
	int8_t *w = malloc((size_t)K);
	float *a = malloc((size_t)(K / 16) * sizeof *a), *m = malloc((size_t)(K / 32) * sizeof *m);

	if (w == NULL || a == NULL || m == NULL)
		abort(); /* K is at most a few 10^4: a few hundred KB */
	for (int r = 0; r < nr; r++) {
		unpack_row((const unsigned char *)W->data + (size_t)(r0 + r) * rb, W->dtype, K, w, a,
			   m);
		for (int b = 0; b < q->B; b++) {
			const int8_t *xq = q->q + (size_t)b * K;
			float y_b = 0.0f;
			for (int j = 0; j < q->nb; j++) {
				const int k0 = j * QB, n = K - k0 < QB ? K - k0 : QB;
				float t = 0.0f;
				for (int s = 0; s < n / 16; s++) {
					int I = 0;
					for (int i = k0 + 16 * s; i < k0 + 16 * s + 16; i++)
						I += w[i] * xq[i];
					t += a[k0 / 16 + s] * (float)I;
				}
				const float *S = q->s + ((size_t)b * q->nb + j) * 16;
				for (int s = 0; s < n / 32; s++)
					t -= m[k0 / 32 + s] * (S[2 * s] + S[2 * s + 1]);
				y_b += q->d[(size_t)b * q->nb + j] * t;
			}
			y[(size_t)b * ldy + r] = y_b;
		}
	}
	free(w);
	free(a);
	free(m);
}

/* ------------------------------------------------------- AVX-512 VNNI path */

#if defined(__x86_64__)
#define V512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,f16c,fma")))

/* The two 256-bit halves into one vector. */
V512 static inline __m512i cat(__m256i lo, __m256i hi)
{
	return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

V512 static inline float f16s(uint16_t h)
{
	return _cvtsh_ss(h);
}

/* The f16 scales at the start of n (<= 8) consecutive blocks of bs bytes
 * (Q8_0: 34, Q4_0: 18) as f32 in lanes 0 to n - 1 (the upper lanes are
 * garbage for n = 8, zero otherwise; only lanes < n are used): word permutes
 * or a gather, instead of a conversion per scale. */
V512 static inline __m512 scales8(const unsigned char *p, int bs, int n)
{
	if (n == 8) {
		/* All 8: the 16-bit words at 0, bs / 2, 2 bs / 2, ... picked out of
		 * 128-byte windows, which stay inside the 8 blocks (Q4_0: one
		 * window; Q8_0: blocks 0-3 and 4-7) */
		const int h = bs / 2;
		const __m512i idx = _mm512_castsi128_si512(_mm_setr_epi16(
			0, (short)h, (short)(2 * h), (short)(3 * h), (short)(4 * h), (short)(5 * h),
			(short)(6 * h), (short)(7 * h)));
		__m128i w = _mm512_castsi512_si128(_mm512_permutex2var_epi16(
			_mm512_loadu_si512(p), idx, _mm512_loadu_si512(p + 64)));
		if (8 * bs > 144) { /* Q8_0: blocks 4-7 from a second window */
			const __m128i w2 = _mm512_castsi512_si128(_mm512_permutex2var_epi16(
				_mm512_loadu_si512(p + 4 * bs), idx,
				_mm512_loadu_si512(p + 4 * bs + 64)));
			w = _mm_unpacklo_epi64(w, w2);
		}
		return _mm512_castps256_ps512(_mm256_cvtph_ps(w));
	}
	const __m256i off = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
					       _mm256_set1_epi32(bs));
	const __mmask8 m = (__mmask8)((1u << n) - 1u);
	const __m256i g = _mm256_mmask_i32gather_epi32(_mm256_setzero_si256(), m, off,
						       (const void *)p, 1);
	return _mm512_castps256_ps512(_mm256_cvtph_ps(_mm256_cvtepi32_epi16(g)));
}

/* Scales of blocks 2c and 2c + 1 over the two halves of a 64-weight chunk
 * (the indices a load, not rebuilt in registers for every chunk). */
static const int32_t pair_idx[4][16] __attribute__((aligned(64))) = {
	{ 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1 },
	{ 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3 },
	{ 4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5 },
	{ 6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7 },
};
/* The same for Q4_0's nibble order: lanes of 16 weights from blocks 2c,
 * 2c + 1, 2c, 2c + 1. */
static const int32_t nib_idx[4][16] __attribute__((aligned(64))) = {
	{ 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1 },
	{ 2, 2, 2, 2, 3, 3, 3, 3, 2, 2, 2, 2, 3, 3, 3, 3 },
	{ 4, 4, 4, 4, 5, 5, 5, 5, 4, 4, 4, 4, 5, 5, 5, 5 },
	{ 6, 6, 6, 6, 7, 7, 7, 7, 6, 6, 6, 6, 7, 7, 7, 7 },
};
V512 static inline __m512 pair_ps(__m512 d8, int c)
{
	return _mm512_permutexvar_ps(_mm512_load_si512((const void *)pair_idx[c]), d8);
}

/* One weight chunk of 64 against every activation row b, whose 64 bytes at
 * k of xu are x_: t[b] += av * (the sums per 4-byte lane of U * S, started
 * at I0), U the unsigned and S the signed operand, one of them x_:
 *   Q8_0: DOT(x_, w, nc, ...): xu = xq + 128 against w signed, started at
 *         nc = -128 * (w's sums), which makes it w * xq;
 *   Q4_0: DOT(w, x_, 0, ...): q (0 to 15) against xq signed in the order of
 *         the unpacked nibbles (see pcg_qmatmul). */
#define DOT(U, S, I0, av, k) \
	do { \
		_Pragma("GCC unroll 8") \
		for (int b_ = 0; b_ < NB; b_++) { \
			const __m512i x_ = _mm512_load_si512(xu + (size_t)b_ * Kp + (k)); \
			const __m512i i_ = _mm512_dpbusd_epi32((I0), (U), (S)); \
			t[b_] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i_), (av), t[b_]); \
		} \
	} while (0)

/* The correction of a Q8_0 chunk w: -128 * (the sums of w per lane). */
#define NEG128(w) _mm512_sub_epi32(_mm512_setzero_si512(), \
	_mm512_dpbusd_epi32(_mm512_setzero_si512(), c128, (w)))

/* The K-quants: w unsigned (0 to 63) against xq signed, pairs summed in
 * int16 (vpmaddubsw; at most 2 * 63 * 127, no saturation) and multiplied by
 * the sub-blocks' integer scales sv into ti[b] (vpdpwssd): one exact int32
 * sum per lane for the whole block of 256, converted and scaled once. */
#define DOT_I(w, sv, k) \
	do { \
		_Pragma("GCC unroll 8") \
		for (int b_ = 0; b_ < NB; b_++) { \
			const __m512i x_ = _mm512_loadu_si512(q->q + (size_t)b_ * K + (k)); \
			ti[b_] = _mm512_dpwssd_epi32(ti[b_], _mm512_maddubs_epi16((w), x_), (sv)); \
		} \
	} while (0)

/* Rows [r, r + nr) of W against NB activation rows (xu: xq + 128). */
V512 static inline __attribute__((always_inline)) void
rows_vnni(float *y, int ldy, const pcg_qx *q, const uint8_t *xu, const pcg_mat *W, int r0,
	  int nr, int yr0, const int NB)
{
	const int K = W->cols, nb = q->nb, Kp = (K + 63) / 64 * 64;
	const pcg_dtype dt = W->dtype;
	const size_t rb = pcg_dtype_row_bytes(dt, K);
	const size_t bpb = pcg_dtype_row_bytes(dt, QB); /* bytes per 256 weights */
	const __m512i c128 = _mm512_set1_epi8((char)0x80), m15x = _mm512_set1_epi8(15);

	for (int r = r0; r < r0 + nr; r++) {
		const unsigned char *row = (const unsigned char *)W->data + (size_t)r * rb;
		__m512 acc[8];
		#pragma GCC unroll 8
		for (int b = 0; b < NB; b++)
			acc[b] = _mm512_setzero_ps();
		for (int j = 0; j < nb; j++) {
			const int k0 = j * QB, n = K - k0 < QB ? K - k0 : QB;
			__m512 t[8];
			__m512i ti[8];
			#pragma GCC unroll 8
			for (int b = 0; b < NB; b++) {
				t[b] = _mm512_setzero_ps();
				ti[b] = _mm512_setzero_si512();
			}
			{ /* the block's weights, PF_AHEAD bytes ahead, a prefetch per line:
			   * with several rows of activations between the loads, the
			   * hardware prefetcher alone leaves bandwidth unused */
				const size_t sb = n == QB ? bpb : pcg_dtype_row_bytes(dt, n);
				const unsigned char *pf = row + bpb * (size_t)j + PF_AHEAD;
				for (size_t o = 0; o < sb; o += 64)
					__builtin_prefetch(pf + o, 0, 1);
			}
			if (dt == PCG_Q8_0 || dt == PCG_Q4_0) {
				const int q8 = dt == PCG_Q8_0, bs = q8 ? 34 : 18;
				const unsigned char *p = row + (size_t)(k0 / 32) * bs;
				const __m512 d8 = scales8(p, bs, n / 32);
				if (q8 && n == QB) { /* the common case, without the tests below */
					#pragma GCC unroll 4
					for (int c = 0; c < 4; c++) {
						const unsigned char *pc = p + 2 * c * 34;
						const __m512i w = cat(_mm256_loadu_si256((const void *)(pc + 2)),
								      _mm256_loadu_si256((const void *)(pc + 36)));
						DOT(x_, w, NEG128(w), pair_ps(d8, c), k0 + 64 * c);
					}
				} else if (q8) {
					#pragma GCC unroll 4
					for (int c = 0; c < 4; c++) {
						if (64 * c >= n)
							break;
						const unsigned char *pc = p + 2 * c * 34;
						/* a last lone block of 32: the upper half zero
						 * (its scale is too: xu past n is padding) */
						const __m256i hi = 64 * c + 32 < n
							? _mm256_loadu_si256((const void *)(pc + 36))
							: _mm256_setzero_si256();
						const __m512i w = cat(_mm256_loadu_si256((const void *)(pc + 2)), hi);
						DOT(x_, w, NEG128(w), pair_ps(d8, c), k0 + 64 * c);
					}
				} else {
					/* q unsigned (0 to 15) against xq signed; the offset of
					 * 8 comes off per 16 against the sums of xq */
					const int full = n == QB;
					#pragma GCC unroll 4
					for (int c = 0; c < 4; c++) {
						if (!full && 64 * c >= n)
							break;
						const unsigned char *pc = p + 2 * c * 18;
						const __m128i b1 = full || 64 * c + 32 < n
							? _mm_loadu_si128((const void *)(pc + 20))
							: _mm_set1_epi8(0x00);
						const __m256i v = _mm256_set_m128i(
							b1, _mm_loadu_si128((const void *)(pc + 2)));
						/* [lo 0, lo 1, hi 0, hi 1] of blocks 0 and 1: xu is
						 * in this order, the scales follow it */
						const __m512i w = _mm512_and_si512(m15x, _mm512_inserti64x4(
							_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1));
						DOT(w, x_, _mm512_setzero_si512(), _mm512_permutexvar_ps(
							_mm512_load_si512((const void *)nib_idx[c]), d8), k0 + 64 * c);
					}
					/* 8 d per 16 weights: lane s of the sums is sub-block s / 2 */
					const __m512 mv = _mm512_mul_ps(_mm512_permutexvar_ps(
						_mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7), d8),
						_mm512_set1_ps(8.0f));
					#pragma GCC unroll 8
					for (int b = 0; b < NB; b++)
						t[b] = _mm512_fnmadd_ps(
							mv, _mm512_loadu_ps(q->s + ((size_t)b * nb + j) * 16), t[b]);
				}
			} else if (dt == PCG_Q4_K || dt == PCG_Q5_K) {
				/* q unsigned against xq signed: no correction; the mins
				 * come off per 16 (each min twice) against the sums. */
				const int q5 = dt == PCG_Q5_K;
				const unsigned char *p = row + (size_t)(k0 / 256) * (q5 ? 176 : 144);
				const uint8_t *qs = p + (q5 ? 48 : 16), *qh = p + 16;
				uint16_t dh, mh;
				uint32_t u[3];
				memcpy(&dh, p, 2);
				memcpy(&mh, p + 2, 2);
				memcpy(u, p + 4, 12);
				/* pcg_get_scale_min on four sub-blocks at once, one per byte */
				const uint32_t sc03 = u[0] & 0x3f3f3f3fu, m03 = u[1] & 0x3f3f3f3fu;
				const uint32_t sc47 = (u[2] & 0x0f0f0f0fu) | ((u[0] >> 6 & 0x03030303u) << 4);
				const uint32_t m47 = (u[2] >> 4 & 0x0f0f0f0fu) | ((u[1] >> 6 & 0x03030303u) << 4);
				const __m128i sm = _mm_setr_epi32((int)sc03, (int)sc47, (int)m03, (int)m47);
				/* the scales as int16, and per 16 weights dmin * m[s] */
				const __m128i sc16 = _mm_cvtepu8_epi16(sm);
				const __m512 mv = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
					_mm_shuffle_epi8(sm, _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12,
									   13, 13, 14, 14, 15, 15)))),
					_mm512_set1_ps(f16s(mh)));
				const __m256i m15 = _mm256_set1_epi8(15);
				const __m256i hv = q5 ? _mm256_loadu_si256((const void *)qh)
						      : _mm256_setzero_si256();
				for (int c = 0; c < 4; c++) {
					const __m256i v = _mm256_loadu_si256((const void *)(qs + 32 * c));
					__m256i lo = _mm256_and_si256(v, m15);
					__m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m15);
					if (q5) {
						const __m256i b16 = _mm256_set1_epi8(16);
						lo = _mm256_or_si256(lo, _mm256_and_si256(
							_mm256_slli_epi16(_mm256_srli_epi16(hv, 2 * c), 4), b16));
						hi = _mm256_or_si256(hi, _mm256_and_si256(
							_mm256_slli_epi16(_mm256_srli_epi16(hv, 2 * c + 1), 4), b16));
					}
					/* int16 lanes 0-15: sc[2c], 16-31: sc[2c + 1] */
					const __m512i sv = _mm512_permutexvar_epi16(
						_mm512_inserti64x4(_mm512_set1_epi16((short)(2 * c)),
								   _mm256_set1_epi16((short)(2 * c + 1)), 1),
						_mm512_castsi128_si512(sc16));
					DOT_I(cat(lo, hi), sv, k0 + 64 * c);
				}
				const __m512 dv = _mm512_set1_ps(f16s(dh));
				#pragma GCC unroll 8
				for (int b = 0; b < NB; b++)
					t[b] = _mm512_fnmadd_ps(
						mv, _mm512_loadu_ps(q->s + ((size_t)b * nb + j) * 16),
						_mm512_mul_ps(_mm512_cvtepi32_ps(ti[b]), dv));
			} else { /* Q6_K: q unsigned, the offset 32 off per 16 against the sums */
				const unsigned char *p = row + (size_t)(k0 / 256) * 210;
				uint16_t dh;
				memcpy(&dh, p + 208, 2);
				const __m128i sc8 = _mm_loadu_si128((const void *)(p + 192));
				const __m512i sc16 = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(sc8));
				const __m512 dv = _mm512_set1_ps(f16s(dh));
				const __m512 sf = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc8)),
								dv); /* d * sc[s], s < 16 */
				const __m256i m15 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(3);
				for (int h = 0; h < 2; h++) {
					const uint8_t *ql = p + 64 * h, *qh = p + 128 + 32 * h;
					const __m256i la = _mm256_loadu_si256((const void *)ql);
					const __m256i lb = _mm256_loadu_si256((const void *)(ql + 32));
					const __m256i hv = _mm256_loadu_si256((const void *)qh);
#define Q6(l, sh) _mm256_or_si256(l, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hv, sh), m3), 4))
					const __m256i q1 = Q6(_mm256_and_si256(la, m15), 0);
					const __m256i q2 = Q6(_mm256_and_si256(lb, m15), 2);
					const __m256i q3 = Q6(_mm256_and_si256(_mm256_srli_epi16(la, 4), m15), 4);
					const __m256i q4 = Q6(_mm256_and_si256(_mm256_srli_epi16(lb, 4), m15), 6);
#undef Q6
					for (int c = 0; c < 2; c++) {
						/* scales 8h + 4c .. + 3, each over 4 lanes (16 weights) */
						const int k = 8 * h + 4 * c;
						/* int16 lanes 8i to 8i + 7: sc[k + i] */
						const __m512i sv = _mm512_permutexvar_epi16(_mm512_add_epi16(
							_mm512_set1_epi16((short)k), _mm512_setr_epi64(
								0, 0, 0x0001000100010001, 0x0001000100010001,
								0x0002000200020002, 0x0002000200020002,
								0x0003000300030003, 0x0003000300030003)), sc16);
						DOT_I(c ? cat(q3, q4) : cat(q1, q2), sv, k0 + 128 * h + 64 * c);
					}
				}
				const __m512 mv = _mm512_mul_ps(sf, _mm512_set1_ps(32.0f));
				#pragma GCC unroll 8
				for (int b = 0; b < NB; b++)
					t[b] = _mm512_fnmadd_ps(
						mv, _mm512_loadu_ps(q->s + ((size_t)b * nb + j) * 16),
						_mm512_mul_ps(_mm512_cvtepi32_ps(ti[b]), dv));
			}
			for (int b = 0; b < NB; b++)
				acc[b] = _mm512_fmadd_ps(t[b], _mm512_set1_ps(q->d[(size_t)b * nb + j]),
							 acc[b]);
		}
		#pragma GCC unroll 8
		for (int b = 0; b < NB; b++)
			y[(size_t)b * ldy + (r - yr0)] = _mm512_reduce_add_ps(acc[b]);
	}
}
#undef DOT
#undef NEG128
#undef DOT_I

V512 static void rows_vnni_any(float *y, int ldy, const pcg_qx *q, const uint8_t *xu,
			       const pcg_mat *W, int r0, int nr, int yr0)
{
	switch (q->B) {
	case 1: rows_vnni(y, ldy, q, xu, W, r0, nr, yr0, 1); break;
	case 2: rows_vnni(y, ldy, q, xu, W, r0, nr, yr0, 2); break;
	case 3: rows_vnni(y, ldy, q, xu, W, r0, nr, yr0, 3); break;
	case 4: rows_vnni(y, ldy, q, xu, W, r0, nr, yr0, 4); break;
	case 5: rows_vnni(y, ldy, q, xu, W, r0, nr, yr0, 5); break;
	case 6: rows_vnni(y, ldy, q, xu, W, r0, nr, yr0, 6); break;
	case 7: rows_vnni(y, ldy, q, xu, W, r0, nr, yr0, 7); break;
	default: rows_vnni(y, ldy, q, xu, W, r0, nr, yr0, 8); break;
	}
}

/* ------------------------------------------------- AVX2 and AVX-VNNI paths
 *
 * 32 weights a step in 256-bit vectors, for CPUs without AVX-512. The
 * product of unsigned by signed bytes summed per 4 is vpdpbusd with
 * AVX-VNNI; with AVX2 alone it is vpmaddubsw (pairs into int16) and
 * vpmaddwd by ones, exact because no pair can saturate: the K-quants' q are
 * at most 63 (63 * 127 * 2 < 32767), and Q8_0 / Q4_0 take |w| <= 128 against
 * xq with w's sign (128 * 127 * 2 < 32767). */
#define V256 "avx2,fma,f16c"

/* A Q8_0 (q8) or Q4_0 block's 32 weights at p as signed bytes (Q4_0's
 * nibbles less 8), in the order the activations are laid out. */
__attribute__((target(V256))) static inline __attribute__((always_inline)) __m256i
w32_q8q4(const unsigned char *p, int q8)
{
	if (q8)
		return _mm256_loadu_si256((const void *)(p + 2));
	const __m128i v = _mm_loadu_si128((const void *)(p + 2));
	return _mm256_sub_epi8(_mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v),
						_mm256_set1_epi8(15)), _mm256_set1_epi8(8));
}

/* The 8 lanes' sum, in the order every 256-bit path sums them. */
__attribute__((target(V256))) static inline __attribute__((always_inline)) float
hsum256(__m256 a)
{
	const __m128 h = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
	const __m128 h2 = _mm_add_ps(h, _mm_movehl_ps(h, h));
	return _mm_cvtss_f32(_mm_add_ss(h2, _mm_shuffle_ps(h2, h2, 1)));
}

#define BODY256(NAME, ATTR, DOT) \
ATTR static inline __attribute__((always_inline)) void \
NAME(float *y, int ldy, const pcg_qx *q, const pcg_mat *W, int r0, int nr, int yr0, const int NB) \
{ \
	const int K = W->cols, nb = q->nb; \
	const pcg_dtype dt = W->dtype; \
	const size_t rb = pcg_dtype_row_bytes(dt, K); \
	const __m256i m15 = _mm256_set1_epi8(15); \
	for (int r = r0; r < r0 + nr; r++) { \
		const unsigned char *row = (const unsigned char *)W->data + (size_t)r * rb; \
		__m256 acc[8]; \
		_Pragma("GCC unroll 8") \
		for (int b = 0; b < NB; b++) \
			acc[b] = _mm256_setzero_ps(); \
		for (int j = 0; j < nb; j++) { \
			const int k0 = j * QB, n = K - k0 < QB ? K - k0 : QB; \
			__m256 t[8]; \
			float mv[16]; /* per 16 weights: a K-quant's mins, Q6_K's offset */ \
			int kq = 0;   /* mv is set */ \
			_Pragma("GCC unroll 8") \
			for (int b = 0; b < NB; b++) \
				t[b] = _mm256_setzero_ps(); \
			if (dt == PCG_Q8_0 || dt == PCG_Q4_0) { \
				const int q8 = dt == PCG_Q8_0; \
				const unsigned char *p = row + (size_t)(k0 / 32) * (q8 ? 34 : 18); \
				for (int k = 0; k < n; k += 32, p += q8 ? 34 : 18) { \
					uint16_t dh; \
					memcpy(&dh, p, 2); \
					const __m256i w = w32_q8q4(p, q8); \
					const __m256i aw = _mm256_abs_epi8(w); \
					const __m256 av = _mm256_set1_ps(_cvtsh_ss(dh)); \
					_Pragma("GCC unroll 8") \
					for (int b = 0; b < NB; b++) { \
						const __m256i x = _mm256_loadu_si256( \
							(const void *)(q->q + (size_t)b * K + k0 + k)); \
						t[b] = _mm256_fmadd_ps(_mm256_cvtepi32_ps( \
							DOT(aw, _mm256_sign_epi8(x, w))), av, t[b]); \
					} \
				} \
			} else if (dt == PCG_Q4_K || dt == PCG_Q5_K) { \
				const int q5 = dt == PCG_Q5_K; \
				const unsigned char *p = row + (size_t)(k0 / 256) * (q5 ? 176 : 144); \
				const uint8_t *qs = p + (q5 ? 48 : 16); \
				uint16_t dh, mh; \
				memcpy(&dh, p, 2); \
				memcpy(&mh, p + 2, 2); \
				const float d = _cvtsh_ss(dh), dmin = _cvtsh_ss(mh); \
				float sc[8]; \
				kq = 1; \
				for (int s = 0; s < 8; s++) { \
					uint8_t a, m; \
					pcg_get_scale_min(s, p + 4, &a, &m); \
					sc[s] = d * a; \
					mv[2 * s] = mv[2 * s + 1] = dmin * m; \
				} \
				const __m256i hv = q5 ? _mm256_loadu_si256((const void *)(p + 16)) \
						      : _mm256_setzero_si256(); \
				for (int c = 0; c < 4; c++) { \
					const __m256i v = _mm256_loadu_si256((const void *)(qs + 32 * c)); \
					__m256i wq[2] = { _mm256_and_si256(v, m15), \
							  _mm256_and_si256(_mm256_srli_epi16(v, 4), m15) }; \
					for (int h = 0; h < 2 && q5; h++) \
						wq[h] = _mm256_or_si256(wq[h], _mm256_and_si256(_mm256_slli_epi16( \
							_mm256_srli_epi16(hv, 2 * c + h), 4), _mm256_set1_epi8(16))); \
					for (int h = 0; h < 2; h++) { \
						const __m256 av = _mm256_set1_ps(sc[2 * c + h]); \
						_Pragma("GCC unroll 8") \
						for (int b = 0; b < NB; b++) { \
							const __m256i x = _mm256_loadu_si256((const void *)( \
								q->q + (size_t)b * K + k0 + 64 * c + 32 * h)); \
							t[b] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(DOT(wq[h], x)), \
									       av, t[b]); \
						} \
					} \
				} \
			} else { /* Q6_K */ \
				const unsigned char *p = row + (size_t)(k0 / 256) * 210; \
				uint16_t dh; \
				memcpy(&dh, p + 208, 2); \
				const float d = _cvtsh_ss(dh); \
				float sf[16]; \
				kq = 1; \
				for (int s = 0; s < 16; s++) { \
					sf[s] = d * (float)(int8_t)p[192 + s]; \
					mv[s] = 32.0f * sf[s]; \
				} \
				const __m256i m3 = _mm256_set1_epi8(3); \
				for (int h = 0; h < 2; h++) { \
					const uint8_t *ql = p + 64 * h, *qh = p + 128 + 32 * h; \
					const __m256i la = _mm256_loadu_si256((const void *)ql); \
					const __m256i lb = _mm256_loadu_si256((const void *)(ql + 32)); \
					const __m256i hv = _mm256_loadu_si256((const void *)qh); \
					const __m256i lo4[4] = { _mm256_and_si256(la, m15), _mm256_and_si256(lb, m15), \
						_mm256_and_si256(_mm256_srli_epi16(la, 4), m15), \
						_mm256_and_si256(_mm256_srli_epi16(lb, 4), m15) }; \
					for (int c = 0; c < 4; c++) { \
						const __m256i wq = _mm256_or_si256(lo4[c], _mm256_slli_epi16( \
							_mm256_and_si256(_mm256_srli_epi16(hv, 2 * c), m3), 4)); \
						const int s0 = 8 * h + 2 * c; \
						const __m256 av = _mm256_set_m128(_mm_set1_ps(sf[s0 + 1]), \
										  _mm_set1_ps(sf[s0])); \
						_Pragma("GCC unroll 8") \
						for (int b = 0; b < NB; b++) { \
							const __m256i x = _mm256_loadu_si256((const void *)( \
								q->q + (size_t)b * K + k0 + 128 * h + 32 * c)); \
							t[b] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(DOT(wq, x)), av, \
									       t[b]); \
						} \
					} \
				} \
			} \
			/* the K-quants' mins and Q6_K's offset, per 16 against the sums */ \
			_Pragma("GCC unroll 8") \
			for (int b = 0; b < NB && kq; b++) { \
				const float *S = q->s + ((size_t)b * nb + j) * 16; \
				t[b] = _mm256_fnmadd_ps(_mm256_loadu_ps(mv), _mm256_loadu_ps(S), t[b]); \
				t[b] = _mm256_fnmadd_ps(_mm256_loadu_ps(mv + 8), _mm256_loadu_ps(S + 8), t[b]); \
			} \
			_Pragma("GCC unroll 8") \
			for (int b = 0; b < NB; b++) \
				acc[b] = _mm256_fmadd_ps(t[b], _mm256_set1_ps(q->d[(size_t)b * nb + j]), \
							 acc[b]); \
		} \
		_Pragma("GCC unroll 8") \
		for (int b = 0; b < NB; b++) \
			y[(size_t)b * ldy + (r - yr0)] = hsum256(acc[b]); \
	} \
}

/* u8 x s8 summed per 4 into int32 lanes. */
__attribute__((target(V256))) static inline __m256i dot_avx2(__m256i u, __m256i s)
{
	return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
__attribute__((target(V256 ",avxvnni"))) static inline __m256i dot_avxvnni(__m256i u, __m256i s)
{
	return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s);
}

BODY256(rows_avx2, __attribute__((target(V256))), dot_avx2)
BODY256(rows_avxvnni, __attribute__((target(V256 ",avxvnni"))), dot_avxvnni)

/* Each row's read is prefetched (into L2) QPF_AHEAD bytes ahead, or with 0
 * at the same place R rows further on: the row the next pass over R rows
 * reads there. A fixed 4096 bytes landed, for rows of 2,176 bytes (Q8_0,
 * K = 2048), in the rows being read already: LLaSA-1B's shape as Q8_0 ran
 * at 89-100 ms a speech-range step on AVX2 against 53-68 ms with this, in
 * one run on 2 vCPUs of an Intel Xeon (docs/BENCHMARKS.md). */
#ifndef QPF_AHEAD
#define QPF_AHEAD 0
#endif
#ifndef QPF_LOC
#define QPF_LOC 1
#endif
/* One activation row (a decode step) against Q8_0 or Q4_0 rows, R rows at
 * once: BODY256 with NB = 1 does one row at a time, a single chain of FMAs
 * whose latency bounds it (LLaSA-1B's shape as Q8_0 read at 10.7 GB/s on 2
 * cores, 0.63x the AVX-512 path). R independent chains, and the
 * activations loaded once for all R rows. Each row's arithmetic is
 * BODY256's, in its order (t over a block's 32-weight steps, then acc by
 * the block's scale, the same horizontal sum), so a row gets the same bits
 * here as in a batch. */
#define ROWSQ4(NAME, ATTR, DOT) \
ATTR static inline __attribute__((always_inline)) void \
NAME(float *y, const pcg_qx *q, const pcg_mat *W, int r, int yr0, const int R) \
{ \
	const int K = W->cols, nb = q->nb; \
	const int q8 = W->dtype == PCG_Q8_0; \
	const size_t rb = pcg_dtype_row_bytes(W->dtype, K); \
	const size_t ahead = (size_t)R * rb; /* the next R rows' same place */ \
	const unsigned char *rows[4]; \
	__m256 acc[4]; \
	_Pragma("GCC unroll 4") \
	for (int i = 0; i < R; i++) { \
		rows[i] = (const unsigned char *)W->data + (size_t)(r + i) * rb; \
		acc[i] = _mm256_setzero_ps(); \
	} \
	for (int j = 0; j < nb; j++) { \
		const int k0 = j * QB, n = K - k0 < QB ? K - k0 : QB; \
		__m256 t[4]; \
		_Pragma("GCC unroll 4") \
		for (int i = 0; i < R; i++) \
			t[i] = _mm256_setzero_ps(); \
		for (int k = 0; k < n; k += 32) { \
			const __m256i x = _mm256_loadu_si256((const void *)(q->q + k0 + k)); \
			const size_t off = (size_t)((k0 + k) / 32) * (q8 ? 34 : 18); \
			_Pragma("GCC unroll 4") \
			for (int i = 0; i < R; i++) { \
				const unsigned char *p = rows[i] + off; \
				if ((k & 63) == 0) \
					__builtin_prefetch(p + (QPF_AHEAD ? QPF_AHEAD : ahead), 0, QPF_LOC); \
				uint16_t dh; \
				memcpy(&dh, p, 2); \
				const __m256i w = w32_q8q4(p, q8); \
				t[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(DOT(_mm256_abs_epi8(w), \
						_mm256_sign_epi8(x, w))), _mm256_set1_ps(_cvtsh_ss(dh)), t[i]); \
			} \
		} \
		_Pragma("GCC unroll 4") \
		for (int i = 0; i < R; i++) \
			acc[i] = _mm256_fmadd_ps(t[i], _mm256_set1_ps(q->d[j]), acc[i]); \
	} \
	_Pragma("GCC unroll 4") \
	for (int i = 0; i < R; i++) \
		y[r + i - yr0] = hsum256(acc[i]); \
}
ROWSQ4(rowsq4_avx2, __attribute__((target(V256))), dot_avx2)
ROWSQ4(rowsq4_avxvnni, __attribute__((target(V256 ",avxvnni"))), dot_avxvnni)

#define ANY256(NAME, ATTR, BODY, BODYQ4) \
ATTR static void NAME(float *y, int ldy, const pcg_qx *q, const pcg_mat *W, int r0, int nr, \
		      int yr0) \
{ \
	if (q->B == 1 && (W->dtype == PCG_Q8_0 || W->dtype == PCG_Q4_0)) { \
		int r = r0; \
		for (; r + 4 <= r0 + nr; r += 4) \
			BODYQ4(y, q, W, r, yr0, 4); \
		for (; r < r0 + nr; r++) \
			BODYQ4(y, q, W, r, yr0, 1); \
		return; \
	} \
	/* at most 4 activation rows a pass: 8 would take t[8] and acc[8], all \
	 * 16 of AVX2's registers, and spill (a prefill of 8 rows a block ran \
	 * at 21 positions/s on LLaSA-1B's Q8_0 against 157 for AVX-512); each \
	 * activation row's arithmetic is the same in either grouping */ \
	for (int b0 = 0; b0 < q->B; b0 += 4) { \
		const pcg_qx qb = { .B = q->B - b0 < 4 ? q->B - b0 : 4, .K = q->K, .nb = q->nb, \
				    .q = q->q + (size_t)b0 * q->K, .d = q->d + (size_t)b0 * q->nb, \
				    .s = q->s + (size_t)b0 * q->nb * 16 }; \
		float *yb = y + (size_t)b0 * ldy; \
		switch (qb.B) { \
		case 1: BODY(yb, ldy, &qb, W, r0, nr, yr0, 1); break; \
		case 2: BODY(yb, ldy, &qb, W, r0, nr, yr0, 2); break; \
		case 3: BODY(yb, ldy, &qb, W, r0, nr, yr0, 3); break; \
		default: BODY(yb, ldy, &qb, W, r0, nr, yr0, 4); break; \
		} \
	} \
}
ANY256(rows_avx2_any, __attribute__((target(V256))), rows_avx2, rowsq4_avx2)
ANY256(rows_avxvnni_any, __attribute__((target(V256 ",avxvnni"))), rows_avxvnni, rowsq4_avxvnni)

static int have_avx2(void)
{
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
	       __builtin_cpu_supports("f16c");
}

static int have_avxvnni(void)
{
	unsigned a, b, c, d;
	/* CPUID leaf 7 subleaf 1, EAX bit 4: AVX-VNNI (GCC 12's
	 * __builtin_cpu_supports does not know it) */
	return have_avx2() && __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 4 & 1);
}

static int have_vnni(void)
{
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	       __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
	       __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("f16c") &&
	       __builtin_cpu_supports("fma");
}
#endif /* __x86_64__ */

/* ----------------------------------------------------------- NEON paths
 *
 * AArch64, 32 weights a step, four weight rows at once, the integer sums
 * of a sub-block reduced across lanes so that lane i of a float vector is
 * weight row i:
 *   neon-i8mm     smmla (FEAT_I8MM): a 2x8 block of two rows' weights times
 *                 a 2x8 block of two activation rows, the four dot products
 *                 of 8 bytes added to four int32 lanes; four of them are a
 *                 32-weight sub-block of 2 rows x 2 activation rows, summed
 *                 already. Pairs of activation rows go this way, an odd
 *                 one as neon-dotprod;
 *   neon-dotprod  sdot (FEAT_DotProd): 16 bytes times 16 into four int32
 *                 lanes, two a sub-block and row, then two pairwise adds
 *                 per four rows;
 *   neon          smull, smlal2 and sadalp (products into int16, pairs of
 *                 them into int32; no pair can overflow int16: |w| <= 128,
 *                 |xq| <= 127, 2 * 128 * 127 < 32767).
 * The weights are signed bytes (Q4_0's nibbles less 8, Q6_K's q less 32),
 * the K-quants' super-block unpacked once for all activation rows. Q8_0,
 * Q4_0, Q4_K, Q5_K and Q6_K; other formats go the generic way.
 *
 * Every path does the same float operations on the same exact integer
 * sums: per sub-block t = fma(I, a, t) (Q6_K: one per 16 weights), for the
 * K-quants then t = t - m * S fused, per activation block acc = fma(t, dx,
 * acc). So the three give the same bits, and a row or an activation row
 * gets the same bits in any grouping. */
#if defined(__aarch64__)
#define NEON_DP __attribute__((target("arch=armv8.2-a+dotprod")))
#define NEON_MM __attribute__((target("arch=armv8.2-a+dotprod+i8mm")))
#define NQ_AI static inline __attribute__((always_inline))

/* Four weight rows (the last repeated past the matrix's end) and, for the
 * K-quants, the super-block under way: its integers and, lane by row, the
 * scales per 16 weights (a) and mins per 32 (m). */
typedef struct nq_rows {
	const unsigned char *row[4];
	int8_t w[4][QB];
	float a[16][4], m[8][4];
} nq_rows;

static int nq_format(pcg_dtype t)
{
	return t == PCG_Q8_0 || t == PCG_Q4_0 || t == PCG_Q4_K || t == PCG_Q5_K || t == PCG_Q6_K;
}

/* Super-block j of the four rows into g (the K-quants; a no-op otherwise). */
NQ_AI void nq_block(nq_rows *g, const pcg_dtype dt, int j)
{
	const uint8x16_t m15 = vdupq_n_u8(15), m3 = vdupq_n_u8(3);

	if (dt != PCG_Q4_K && dt != PCG_Q5_K && dt != PCG_Q6_K)
		return;
	for (int i = 0; i < 4; i++) {
		const unsigned char *p = g->row[i] + (size_t)j * pcg_dtype_block_bytes(dt);
		int8_t *o = g->w[i];
		uint16_t dh, mh;
		if (dt == PCG_Q6_K) {
			memcpy(&dh, p + 208, 2);
			const float d = pcg_f16_to_f32(dh);
			for (int s = 0; s < 16; s++)
				g->a[s][i] = d * (float)(int8_t)p[192 + s];
			for (int s = 0; s < 8; s++)
				g->m[s][i] = 0.0f;
			for (int h = 0; h < 2; h++)
				for (int l = 0; l < 32; l += 16) {
					const uint8x16_t qa = vld1q_u8(p + 64 * h + l);
					const uint8x16_t qb = vld1q_u8(p + 64 * h + 32 + l);
					const uint8x16_t hh = vld1q_u8(p + 128 + 32 * h + l);
					const uint8x16_t u[4] = {
						vorrq_u8(vandq_u8(qa, m15), vshlq_n_u8(vandq_u8(hh, m3), 4)),
						vorrq_u8(vandq_u8(qb, m15),
							 vshlq_n_u8(vandq_u8(vshrq_n_u8(hh, 2), m3), 4)),
						vorrq_u8(vshrq_n_u8(qa, 4),
							 vshlq_n_u8(vandq_u8(vshrq_n_u8(hh, 4), m3), 4)),
						vorrq_u8(vshrq_n_u8(qb, 4), vshlq_n_u8(vshrq_n_u8(hh, 6), 4)),
					};
					for (int c = 0; c < 4; c++)
						vst1q_s8(o + 128 * h + 32 * c + l,
							 vsubq_s8(vreinterpretq_s8_u8(u[c]), vdupq_n_s8(32)));
				}
			continue;
		}
		/* Q4_K, Q5_K: d, dmin, 12 bytes of scales and mins, (Q5_K: qh[32]), qs[128] */
		const int q5 = dt == PCG_Q5_K;
		const uint8_t *qs = p + (q5 ? 48 : 16);
		memcpy(&dh, p, 2);
		memcpy(&mh, p + 2, 2);
		const float d = pcg_f16_to_f32(dh), dmin = pcg_f16_to_f32(mh);
		for (int s = 0; s < 8; s++) {
			uint8_t sc, mn;
			pcg_get_scale_min(s, p + 4, &sc, &mn);
			g->a[2 * s][i] = g->a[2 * s + 1][i] = d * sc;
			g->m[s][i] = dmin * mn;
		}
		for (int c = 0; c < 4; c++)
			for (int l = 0; l < 32; l += 16) {
				const uint8x16_t v = vld1q_u8(qs + 32 * c + l);
				uint8x16_t lo = vandq_u8(v, m15), hi = vshrq_n_u8(v, 4);
				if (q5) { /* the fifth bit of weight 64c + l at bit 2c of qh[l] */
					const uint8x16_t h = vld1q_u8(p + 16 + l), b16 = vdupq_n_u8(16);
					lo = vorrq_u8(lo, vandq_u8(vshlq_u8(h, vdupq_n_s8((int8_t)(4 - 2 * c))), b16));
					hi = vorrq_u8(hi, vandq_u8(vshlq_u8(h, vdupq_n_s8((int8_t)(3 - 2 * c))), b16));
				}
				vst1q_s8(o + 64 * c + l, vreinterpretq_s8_u8(lo));
				vst1q_s8(o + 64 * c + 32 + l, vreinterpretq_s8_u8(hi));
			}
	}
}

/* The 32 weights at k of activation block k0 (k0 + k: in the row) of the
 * four rows as signed bytes, and lane by row the scales of their two
 * halves (a0, a1: equal but for Q6_K) and their min (the K-quants). */
NQ_AI void nq_load(const nq_rows *g, const pcg_dtype dt, int k0, int k, int8x16_t w[4][2],
		   float32x4_t *a0, float32x4_t *a1, float32x4_t *mv)
{
	if (dt == PCG_Q8_0 || dt == PCG_Q4_0) {
		const int q8 = dt == PCG_Q8_0;
		const size_t off = (size_t)((k0 + k) / 32) * (q8 ? 34 : 18);
		uint16_t dh[4];
#pragma GCC unroll 4
		for (int i = 0; i < 4; i++) {
			const unsigned char *p = g->row[i] + off;
			memcpy(&dh[i], p, 2);
			if (q8) {
				w[i][0] = vld1q_s8((const int8_t *)p + 2);
				w[i][1] = vld1q_s8((const int8_t *)p + 18);
			} else {
				const uint8x16_t v = vld1q_u8(p + 2);
				w[i][0] = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(15))),
						   vdupq_n_s8(8));
				w[i][1] = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), vdupq_n_s8(8));
			}
		}
		*a0 = *a1 = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(dh)));
		*mv = vdupq_n_f32(0.0f);
		return;
	}
#pragma GCC unroll 4
	for (int i = 0; i < 4; i++) {
		w[i][0] = vld1q_s8(g->w[i] + k);
		w[i][1] = vld1q_s8(g->w[i] + k + 16);
	}
	*a0 = vld1q_f32(g->a[k / 16]);
	*a1 = vld1q_f32(g->a[k / 16 + 1]);
	*mv = vld1q_f32(g->m[k / 32]);
}

/* The four rows' int32 lanes summed: lane i = the sum of v[i]. */
NQ_AI int32x4_t nq_hadd4(const int32x4_t v[4])
{
	return vpaddq_s32(vpaddq_s32(v[0], v[1]), vpaddq_s32(v[2], v[3]));
}

NQ_AI int32x4_t dot_neon(int32x4_t acc, int8x16_t w, int8x16_t x)
{
	int16x8_t p = vmull_s8(vget_low_s8(w), vget_low_s8(x));
	p = vmlal_high_s8(p, w, x);
	return vpadalq_s16(acc, p);
}

NEON_DP NQ_AI int32x4_t dot_sdot(int32x4_t acc, int8x16_t w, int8x16_t x)
{
	return vdotq_s32(acc, w, x);
}

/* Activation block j of the four rows against activation rows b0 ..
 * b0 + NB - 1 (NB <= 4): acc[b] (lane i: row i) += dx * the block's sum. */
#define NQ_STEP(NAME, ATTR, DOT) \
ATTR NQ_AI void NAME(const nq_rows *g, const pcg_qx *q, const pcg_dtype dt, int j, int b0, \
		     float32x4_t *acc, const int NB) \
{ \
	const int K = q->K, nb = q->nb, k0 = j * QB, n = K - k0 < QB ? K - k0 : QB; \
	const int kq = dt == PCG_Q4_K || dt == PCG_Q5_K; \
	float32x4_t t[4]; \
	_Pragma("GCC unroll 4") \
	for (int b = 0; b < NB; b++) \
		t[b] = vdupq_n_f32(0.0f); \
	for (int k = 0; k < n; k += 32) { \
		int8x16_t w[4][2]; \
		float32x4_t a0, a1, mv; \
		nq_load(g, dt, k0, k, w, &a0, &a1, &mv); \
		_Pragma("GCC unroll 4") \
		for (int b = 0; b < NB; b++) { \
			const int8_t *xb = q->q + (size_t)(b0 + b) * K + k0 + k; \
			const int8x16_t x0 = vld1q_s8(xb), x1 = vld1q_s8(xb + 16); \
			const int32x4_t z = vdupq_n_s32(0); \
			int32x4_t i0[4], i1[4]; \
			if (dt == PCG_Q6_K) { /* a scale per 16 */ \
				_Pragma("GCC unroll 4") \
				for (int i = 0; i < 4; i++) { \
					i0[i] = DOT(z, w[i][0], x0); \
					i1[i] = DOT(z, w[i][1], x1); \
				} \
				t[b] = vfmaq_f32(t[b], vcvtq_f32_s32(nq_hadd4(i0)), a0); \
				t[b] = vfmaq_f32(t[b], vcvtq_f32_s32(nq_hadd4(i1)), a1); \
				continue; \
			} \
			_Pragma("GCC unroll 4") \
			for (int i = 0; i < 4; i++) \
				i0[i] = DOT(DOT(z, w[i][0], x0), w[i][1], x1); \
			t[b] = vfmaq_f32(t[b], vcvtq_f32_s32(nq_hadd4(i0)), a0); \
			if (kq) { /* the mins against the sums of xq */ \
				const float *S = q->s + ((size_t)(b0 + b) * nb + j) * 16 + k / 16; \
				t[b] = vfmsq_f32(t[b], mv, vdupq_n_f32(S[0] + S[1])); \
			} \
		} \
	} \
	_Pragma("GCC unroll 4") \
	for (int b = 0; b < NB; b++) \
		acc[b] = vfmaq_f32(acc[b], t[b], vdupq_n_f32(q->d[(size_t)(b0 + b) * nb + j])); \
}
NQ_STEP(nq_step_neon, , dot_neon)
NQ_STEP(nq_step_sdot, NEON_DP, dot_sdot)

NQ_AI int8x16_t zip_lo(int8x16_t a, int8x16_t b)
{
	return vreinterpretq_s8_s64(vzip1q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}

NQ_AI int8x16_t zip_hi(int8x16_t a, int8x16_t b)
{
	return vreinterpretq_s8_s64(vzip2q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}

/* nq_step's sums by smmla, for NP (<= 2) pairs of activation rows from b0:
 * accp[2 P + p] holds rows 2P, 2P + 1 against activation rows b0 + 2p,
 * b0 + 2p + 1 in lanes (row 2P, b), (2P, b + 1), (2P + 1, b), (2P + 1, b + 1),
 * smmla's 2x2 result. Lane by lane the float operations are nq_step's. */
NEON_MM NQ_AI void nq_mmla(const nq_rows *g, const pcg_qx *q, const pcg_dtype dt, int j, int b0,
			   float32x4_t *accp, const int NP)
{
	const int K = q->K, nb = q->nb, k0 = j * QB, n = K - k0 < QB ? K - k0 : QB;
	const int kq = dt == PCG_Q4_K || dt == PCG_Q5_K;
	float32x4_t t[2][2];

	for (int P = 0; P < 2; P++)
		for (int p = 0; p < NP; p++)
			t[P][p] = vdupq_n_f32(0.0f);
	for (int k = 0; k < n; k += 32) {
		int8x16_t w[4][2], z[2][4];
		float32x4_t a0, a1, mv;
		nq_load(g, dt, k0, k, w, &a0, &a1, &mv);
		/* two rows' 8 bytes side by side: 2x8 matrices */
		for (int P = 0; P < 2; P++) {
			z[P][0] = zip_lo(w[2 * P][0], w[2 * P + 1][0]);
			z[P][1] = zip_hi(w[2 * P][0], w[2 * P + 1][0]);
			z[P][2] = zip_lo(w[2 * P][1], w[2 * P + 1][1]);
			z[P][3] = zip_hi(w[2 * P][1], w[2 * P + 1][1]);
		}
		const float32x4_t A0[2] = { vzip1q_f32(a0, a0), vzip2q_f32(a0, a0) };
		const float32x4_t A1[2] = { vzip1q_f32(a1, a1), vzip2q_f32(a1, a1) };
		const float32x4_t M[2] = { vzip1q_f32(mv, mv), vzip2q_f32(mv, mv) };
		for (int p = 0; p < NP; p++) {
			const int8_t *xa = q->q + (size_t)(b0 + 2 * p) * K + k0 + k, *xc = xa + K;
			const int8x16_t xa0 = vld1q_s8(xa), xa1 = vld1q_s8(xa + 16);
			const int8x16_t xc0 = vld1q_s8(xc), xc1 = vld1q_s8(xc + 16);
			const int8x16_t x[4] = { zip_lo(xa0, xc0), zip_hi(xa0, xc0), zip_lo(xa1, xc1),
						 zip_hi(xa1, xc1) };
			const int32x4_t zero = vdupq_n_s32(0);
			float32x4_t S = vdupq_n_f32(0.0f);
			if (kq) {
				const float *Sa = q->s + ((size_t)(b0 + 2 * p) * nb + j) * 16 + k / 16;
				const float *Sc = Sa + (size_t)nb * 16;
				const float32x2_t s2 = { Sa[0] + Sa[1], Sc[0] + Sc[1] };
				S = vcombine_f32(s2, s2);
			}
			for (int P = 0; P < 2; P++) {
				if (dt == PCG_Q6_K) {
					const int32x4_t lo = vmmlaq_s32(vmmlaq_s32(zero, z[P][0], x[0]), z[P][1], x[1]);
					const int32x4_t hi = vmmlaq_s32(vmmlaq_s32(zero, z[P][2], x[2]), z[P][3], x[3]);
					t[P][p] = vfmaq_f32(t[P][p], vcvtq_f32_s32(lo), A0[P]);
					t[P][p] = vfmaq_f32(t[P][p], vcvtq_f32_s32(hi), A1[P]);
					continue;
				}
				int32x4_t I = vmmlaq_s32(zero, z[P][0], x[0]);
				I = vmmlaq_s32(I, z[P][1], x[1]);
				I = vmmlaq_s32(I, z[P][2], x[2]);
				I = vmmlaq_s32(I, z[P][3], x[3]);
				t[P][p] = vfmaq_f32(t[P][p], vcvtq_f32_s32(I), A0[P]);
				if (kq)
					t[P][p] = vfmsq_f32(t[P][p], M[P], S);
			}
		}
	}
	for (int p = 0; p < NP; p++) {
		const float da = q->d[(size_t)(b0 + 2 * p) * nb + j];
		const float dc = q->d[(size_t)(b0 + 2 * p + 1) * nb + j];
		const float32x2_t d2 = { da, dc };
		for (int P = 0; P < 2; P++)
			accp[2 * P + p] = vfmaq_f32(accp[2 * P + p], t[P][p], vcombine_f32(d2, d2));
	}
}

/* No smmla (neon, neon-dotprod). */
NQ_AI void nq_nommla(const nq_rows *g, const pcg_qx *q, const pcg_dtype dt, int j, int b0,
		     float32x4_t *accp, const int NP)
{
	(void)g, (void)q, (void)dt, (void)j, (void)b0, (void)accp, (void)NP;
}

/* Rows [r0, r0 + nr) in groups of four against every activation row (at
 * most PCG_MATMUL_SMALL): pairs of them through MMLA when PAIRS, the rest
 * through STEP, four at a time. */
#define NQ_ROWS(NAME, ATTR, STEP, MMLA, PAIRS) \
ATTR NQ_AI void NAME##_dt(float *y, int ldy, const pcg_qx *q, const pcg_mat *W, int r0, int nr, \
			  int yr0, const pcg_dtype dt) \
{ \
	const size_t rb = pcg_dtype_row_bytes(dt, W->cols); \
	const int B = q->B, bp = PAIRS ? B / 2 * 2 : 0; /* activation rows in pairs */ \
	nq_rows g; \
	for (int r = r0; r < r0 + nr; r += 4) { \
		const int n4 = r0 + nr - r < 4 ? r0 + nr - r : 4; \
		float32x4_t acc[PCG_MATMUL_SMALL], accp[PCG_MATMUL_SMALL]; \
		for (int i = 0; i < 4; i++) \
			g.row[i] = (const unsigned char *)W->data + (size_t)(r + (i < n4 ? i : n4 - 1)) * rb; \
		for (int b = 0; b < PCG_MATMUL_SMALL; b++) \
			acc[b] = accp[b] = vdupq_n_f32(0.0f); \
		for (int j = 0; j < q->nb; j++) { \
			nq_block(&g, dt, j); \
			for (int b0 = 0; b0 < bp; b0 += 4) { \
				if (bp - b0 >= 4) \
					MMLA(&g, q, dt, j, b0, accp + b0, 2); \
				else \
					MMLA(&g, q, dt, j, b0, accp + b0, 1); \
			} \
			for (int b0 = bp; b0 < B; b0 += 4) \
				switch (B - b0 < 4 ? B - b0 : 4) { \
				case 1: STEP(&g, q, dt, j, b0, acc + b0, 1); break; \
				case 2: STEP(&g, q, dt, j, b0, acc + b0, 2); break; \
				case 3: STEP(&g, q, dt, j, b0, acc + b0, 3); break; \
				default: STEP(&g, q, dt, j, b0, acc + b0, 4); break; \
				} \
		} \
		for (int b = 0; b < B; b++) { \
			float v[4]; \
			if (b < bp) { /* accp[b0 + 2P + p]: lanes (2P, b), (2P, b+1), (2P+1, b), (2P+1, b+1) */ \
				const int b0 = b & ~3, p = (b - b0) / 2, c = (b - b0) & 1; \
				float u[2][4]; \
				vst1q_f32(u[0], accp[b0 + p]); \
				vst1q_f32(u[1], accp[b0 + 2 + p]); \
				v[0] = u[0][c], v[1] = u[0][2 + c], v[2] = u[1][c], v[3] = u[1][2 + c]; \
			} else { \
				vst1q_f32(v, acc[b]); \
			} \
			for (int i = 0; i < n4; i++) \
				y[(size_t)b * ldy + (r + i - yr0)] = v[i]; \
		} \
	} \
} \
ATTR static void NAME(float *y, int ldy, const pcg_qx *q, const pcg_mat *W, int r0, int nr, \
		      int yr0) \
{ \
	switch (W->dtype) { \
	case PCG_Q8_0: NAME##_dt(y, ldy, q, W, r0, nr, yr0, PCG_Q8_0); break; \
	case PCG_Q4_0: NAME##_dt(y, ldy, q, W, r0, nr, yr0, PCG_Q4_0); break; \
	case PCG_Q4_K: NAME##_dt(y, ldy, q, W, r0, nr, yr0, PCG_Q4_K); break; \
	case PCG_Q5_K: NAME##_dt(y, ldy, q, W, r0, nr, yr0, PCG_Q5_K); break; \
	default: NAME##_dt(y, ldy, q, W, r0, nr, yr0, PCG_Q6_K); break; \
	} \
}
NQ_ROWS(rows_neon, , nq_step_neon, nq_nommla, 0)
NQ_ROWS(rows_sdot, NEON_DP, nq_step_sdot, nq_nommla, 0)
NQ_ROWS(rows_mmla, NEON_MM, nq_step_sdot, nq_mmla, 1)

static int have_neon(void)
{
	return (getauxval(AT_HWCAP) & HWCAP_ASIMD) != 0;
}

static int have_dotprod(void)
{
	return have_neon() && (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
}

static int have_i8mm(void)
{
	return have_dotprod() && (getauxval(AT_HWCAP2) & HWCAP2_I8MM) != 0;
}
#endif /* __aarch64__ */

/* ------------------------------------------------------------- dispatch */

/* The paths of the machine's architecture, the best first, then generic. */
enum { PATH_VNNI512, PATH_AVXVNNI, PATH_AVX2, PATH_NEON_MMLA, PATH_NEON_SDOT, PATH_NEON, PATH_REF };
static const struct {
	const char *name;
	int (*ok)(void); /* NULL: any CPU */
	int kind;
} paths[] = {
#if defined(__x86_64__)
	{ "avx512-vnni", have_vnni, PATH_VNNI512 },
	{ "avx-vnni", have_avxvnni, PATH_AVXVNNI },
	{ "avx2", have_avx2, PATH_AVX2 },
#elif defined(__aarch64__)
	{ "neon-i8mm", have_i8mm, PATH_NEON_MMLA },
	{ "neon-dotprod", have_dotprod, PATH_NEON_SDOT },
	{ "neon", have_neon, PATH_NEON },
#endif
	{ "generic", NULL, PATH_REF },
};
static int path = -1;

static int path_ok(int i)
{
	return paths[i].ok == NULL || paths[i].ok();
}

const char *pcg_qmatmul_path(void)
{
	if (path < 0) {
		const char *e = getenv("PCG_QPATH");
		path = 0;
		while (!path_ok(path))
			path++;
		if (e != NULL && *e != '\0' && pcg_qmatmul_set_path(e) < 0)
			path = path < 0 ? 1 : path;
	}
	return paths[path].name;
}

int pcg_qmatmul_set_path(const char *name)
{
	for (int i = 0; i < (int)(sizeof paths / sizeof paths[0]); i++)
		if (!strcmp(paths[i].name, name) && path_ok(i)) {
			path = i;
			return 0;
		}
	return -1;
}

int pcg_qx_alloc(pcg_qx *q, int B, int K)
{
	const int nb = (K + QB - 1) / QB;

	memset(q, 0, sizeof *q);
	/* 64 bytes of slack after each row: the last chunk of a short block
	 * reads a full vector (its weights are zero there). */
	q->q = aligned_alloc(64, ((size_t)B * K + 64 + 63) / 64 * 64);
	q->d = malloc((size_t)B * nb * sizeof *q->d);
	q->s = malloc((size_t)B * nb * 16 * sizeof *q->s);
	if (q->q == NULL || q->d == NULL || q->s == NULL) {
		pcg_qx_free(q);
		return -1;
	}
	return 0;
}

void pcg_qx_free(pcg_qx *q)
{
	free(q->q);
	free(q->d);
	free(q->s);
	memset(q, 0, sizeof *q);
}

/* One product's rows in chunks, each chunk by the kernel of the path. */
typedef struct chunks {
	float *y;
	int ldy, r0, nr, chunk, path;
	const pcg_qx *q;
	const uint8_t *xu;
	const pcg_mat *W;
} chunks;

static void run_chunk(const chunks *k, int c)
{
	const int a = k->r0 + c * k->chunk;
	const int n = k->r0 + k->nr - a < k->chunk ? k->r0 + k->nr - a : k->chunk;

	switch (k->path) {
#if defined(__x86_64__)
	case PATH_VNNI512: rows_vnni_any(k->y, k->ldy, k->q, k->xu, k->W, a, n, k->r0); break;
	case PATH_AVXVNNI: rows_avxvnni_any(k->y, k->ldy, k->q, k->W, a, n, k->r0); break;
	case PATH_AVX2: rows_avx2_any(k->y, k->ldy, k->q, k->W, a, n, k->r0); break;
#elif defined(__aarch64__)
	case PATH_NEON_MMLA: rows_mmla(k->y, k->ldy, k->q, k->W, a, n, k->r0); break;
	case PATH_NEON_SDOT: rows_sdot(k->y, k->ldy, k->q, k->W, a, n, k->r0); break;
	case PATH_NEON: rows_neon(k->y, k->ldy, k->q, k->W, a, n, k->r0); break;
#endif
	default: pcg_qdot_ref(k->y + (a - k->r0), k->ldy, k->q, k->W, a, n); break;
	}
}

/* Every chunk, in parallel; with one thread in no parallel region at all
 * (libgomp ends even a team of one with futex wake-ups, tens a step). */
static void run_chunks(const chunks *k)
{
	const int nchunks = (k->nr + k->chunk - 1) / k->chunk;

	if (nchunks == 1 || pcg_get_threads() == 1) {
		for (int c = 0; c < nchunks; c++)
			run_chunk(k, c);
		return;
	}
#pragma omp parallel for schedule(static)
	for (int c = 0; c < nchunks; c++)
		run_chunk(k, c);
}

int pcg_qmatmul(float *y, int ldy, const float *x, int B, const pcg_mat *W, int r0, int nr)
{
	const int K = W->cols;
	pcg_qx q;
	chunks k = { .y = y, .ldy = ldy, .r0 = r0, .nr = nr, .chunk = 64, .path = PATH_REF,
		     .q = &q, .W = W };

	const char *p = pcg_qmatmul_path();
	if (pcg_qpack_active(W))
		return pcg_qpack_matmul(y, ldy, x, B, W, r0, nr);
	if (pcg_qx_alloc(&q, B, K) < 0)
		return -1;
	pcg_qx_quantize(&q, x, B, K);
#if defined(__x86_64__)
	if (!strcmp(p, "avx512-vnni")) {
		/* Rows of xq padded to Kp (a multiple of 64) with zeros: for
		 * Q8_0 as xq + 128 (unsigned), for Q4_0 signed with each 64 in
		 * the order its nibbles unpack in: 0-15, 32-47, 16-31, 48-63. */
		const int Kp = (K + 63) / 64 * 64, q4 = W->dtype == PCG_Q4_0;
		uint8_t *xu = aligned_alloc(64, (size_t)B * Kp);
		if (xu == NULL) {
			pcg_qx_free(&q);
			return -1;
		}
		for (int b = 0; b < B; b++) {
			const int8_t *src = q.q + (size_t)b * K;
			uint8_t *dst = xu + (size_t)b * Kp;
			if (q4) { /* K is a multiple of 32: whole groups of 16 */
				memset(dst, 0, (size_t)Kp);
				for (int j = 0; j < K; j += 16) {
					const int g = j >> 4 & 3, to = (j & ~63) + 16 * (g == 1 ? 2 : g == 2 ? 1 : g);
					memcpy(dst + to, src + j, 16);
				}
			} else {
				for (int j = 0; j < K; j++)
					dst[j] = (uint8_t)(src[j] + 128);
				memset(dst + K, 128, (size_t)(Kp - K));
			}
		}
		k.path = PATH_VNNI512;
		k.chunk = 16;
		k.xu = xu;
		run_chunks(&k);
		free(xu);
		pcg_qx_free(&q);
		return 0;
	}
	if (!strcmp(p, "avx-vnni") || !strcmp(p, "avx2")) {
		k.path = !strcmp(p, "avx-vnni") ? PATH_AVXVNNI : PATH_AVX2;
		k.chunk = 16;
	}
#elif defined(__aarch64__)
	if (nq_format(W->dtype) && paths[path].kind != PATH_REF) {
		k.path = paths[path].kind;
		k.chunk = 16;
	}
#endif
	(void)p;
	run_chunks(&k);
	pcg_qx_free(&q);
	return 0;
}
