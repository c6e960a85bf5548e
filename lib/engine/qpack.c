/* qpack.c: block-quantised products from weights repacked at load into
 * groups of 16 interleaved rows (qpack.h).
 *
 * The row-wise kernels of qmatmul.c unpack a chunk of one row, multiply it
 * by each position's activations and reduce the 16 lanes of the sum at the
 * end: per position and 64 weights a vpdpbusd, a conversion and an FMA for
 * the block scales, and the unpacking shared by the positions only. Here a
 * 512-bit vector holds 4 consecutive weights of each of 16 rows (lane r:
 * row r), so one vpdpbusd against 4 activation bytes broadcast to every lane
 * does 64 multiply-adds for 16 rows at once, and the sums per row never
 * need reducing. Per position and block of 32 weights of 16 rows: 8
 * vpdpbusd (the activations a memory broadcast), one conversion and one FMA
 * with the 16 rows' scales; the unpacking is shared by every position.
 *
 * The products are those of qmatmul.c (exact integer sums per sub-block,
 * scaled in f32): vpdpbusd takes its first operand unsigned, so each format
 * is stored as unsigned integers u with w = u - o (o = 8 for Q4_0, 128 for
 * Q8_0, 32 for Q6_K, the K-quants' mins for Q4_K), and the o * (sum of the
 * activations) of a sub-block comes off in the integer sum (the
 * accumulator starts there) or in the float one (Q4_K's mins).
 *
 * Layouts, per group of 16 rows (rows past the matrix zero), per block:
 *   Q4_0 (32 weights, 288 bytes): d[16] f16; then 4 x 64 bytes, part c
 *        holding weights 8c..8c+7: byte 4r + j = u[r][8c + j] | u[r][8c + 4 + j] << 4
 *   Q8_0 (32 weights, 544 bytes): d[16] f16; then 8 x 64 bytes, part c:
 *        byte 4r + j = q[r][4c + j] + 128
 *   Q4_K (256 weights, 2368 bytes): d[16], dmin[16] f16; sc[8][16], m[8][16]
 *        (the 6-bit scales and mins, a byte each); then 32 parts of 64 bytes
 *        as Q4_0's (part 4s + c: sub-block s, weights 32s + 8c ..)
 *   Q6_K (256 weights, 3360 bytes): d[16] f16; sc[16][16] int8; then 32
 *        parts of 64 bytes of the low 4 bits as Q4_0's; then 16 parts of 64
 *        bytes of the top 2 bits: part s, byte 4r + j, bits 2i..2i+1 are
 *        those of weight 16s + 4i + j of row r (the parts 2s, 2s + 1 above).
 * The extra bytes over the file: Q4_K 2.8 % (its scales a byte each, not 6
 * bits), the others none.
 */
#include "qpack.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "matmul.h"
#include "qmatmul.h"
#include "quant.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#pragma GCC diagnostic ignored "-Wpsabi"

#define G PCG_QPACK_ROWS
#define QB 256 /* activation block (qmatmul.h) */

/* Bytes per group of 16 rows and block, and weights per block. */
static int blk_bytes(pcg_dtype t)
{
	switch (t) {
	case PCG_Q4_0: return 288;
	case PCG_Q8_0: return 544;
	case PCG_Q4_K: return 2368;
	case PCG_Q6_K: return 3360;
	default: return 0;
	}
}

static size_t group_bytes(const pcg_mat *W)
{
	return (size_t)blk_bytes(W->dtype) * (size_t)(W->cols / pcg_dtype_block(W->dtype));
}

/* The quantised paths that read packs: the x86 ones. */
static int packs_path(const char *path)
{
	return !strcmp(path, "avx512-vnni") || !strcmp(path, "avx-vnni") || !strcmp(path, "avx2");
}

int pcg_qpack_ok(const pcg_mat *W)
{
	const char *e = getenv("PCG_QPACK"); /* 0: the row-wise kernels (to compare) */

	if (e != NULL && !strcmp(e, "0"))
		return 0;
	return blk_bytes(W->dtype) > 0 && W->cols % pcg_dtype_block(W->dtype) == 0 &&
	       W->rows > 0 && packs_path(pcg_qmatmul_path());
}

int pcg_qpack_active(const pcg_mat *W)
{
	return W->packed != NULL && packs_path(pcg_qmatmul_path());
}

size_t pcg_qpack_bytes(const pcg_mat *W)
{
	return (size_t)((W->rows + G - 1) / G) * group_bytes(W);
}

/* ------------------------------------------------------------- packing */

/* Row r's unsigned integers u[K], their block scales and (Q4_K) mins: the
 * source of every layout above. */
static void row_ints(const unsigned char *row, pcg_dtype t, int K, uint8_t *u, uint16_t *d,
		     uint16_t *dmin, uint8_t *sc, uint8_t *mn)
{
	const size_t bs = pcg_dtype_block_bytes(t);
	const int qk = pcg_dtype_block(t);

	for (int i = 0; i < K / qk; i++) {
		const unsigned char *p = row + (size_t)i * bs;
		uint8_t *ui = u + (size_t)i * qk;
		switch (t) {
		case PCG_Q4_0: {
			pcg_block_q4_0 b;
			memcpy(&b, p, sizeof b);
			d[i] = b.d;
			for (int l = 0; l < 16; l++) {
				ui[l] = b.qs[l] & 15;
				ui[l + 16] = b.qs[l] >> 4;
			}
			break;
		}
		case PCG_Q8_0: {
			pcg_block_q8_0 b;
			memcpy(&b, p, sizeof b);
			d[i] = b.d;
			for (int l = 0; l < 32; l++)
				ui[l] = (uint8_t)(b.qs[l] + 128);
			break;
		}
		case PCG_Q4_K: {
			pcg_block_q4_k b;
			memcpy(&b, p, sizeof b);
			d[i] = b.d;
			dmin[i] = b.dmin;
			for (int s = 0; s < 8; s++)
				pcg_get_scale_min(s, b.scales, &sc[8 * i + s], &mn[8 * i + s]);
			for (int j = 0; j < 4; j++)
				for (int l = 0; l < 32; l++) {
					ui[64 * j + l] = b.qs[32 * j + l] & 15;
					ui[64 * j + 32 + l] = b.qs[32 * j + l] >> 4;
				}
			break;
		}
		case PCG_Q6_K: {
			pcg_block_q6_k b;
			memcpy(&b, p, sizeof b);
			d[i] = b.d;
			memcpy(sc + 16 * i, b.scales, 16);
			for (int h = 0; h < 2; h++) {
				const uint8_t *ql = b.ql + 64 * h, *qh = b.qh + 32 * h;
				uint8_t *o = ui + 128 * h;
				for (int l = 0; l < 32; l++) {
					o[l] = (uint8_t)((ql[l] & 15) | (qh[l] & 3) << 4);
					o[l + 32] = (uint8_t)((ql[l + 32] & 15) | (qh[l] >> 2 & 3) << 4);
					o[l + 64] = (uint8_t)((ql[l] >> 4) | (qh[l] >> 4 & 3) << 4);
					o[l + 96] = (uint8_t)((ql[l + 32] >> 4) | (qh[l] >> 6 & 3) << 4);
				}
			}
			break;
		}
		default:
			break;
		}
	}
}

/* 64 bytes of nibbles: weights k..k+7 of the 16 rows (u[r] at k). */
static void put_nibbles(uint8_t *o, uint8_t *const u[G], int k)
{
	for (int r = 0; r < G; r++)
		for (int j = 0; j < 4; j++)
			o[4 * r + j] = (uint8_t)((u[r][k + j] & 15) | (u[r][k + 4 + j] & 15) << 4);
}

/* Group g of W into gp, with scratch for 16 rows (u: 16 K bytes, d: 32 nbk
 * halves, sc: 512 nbk bytes). */
static void pack_group(uint8_t *gp, const pcg_mat *W, int g, uint8_t *ub, uint16_t *d,
		       uint8_t *sc)
{
	const pcg_dtype t = W->dtype;
	const int K = W->cols, qk = pcg_dtype_block(t), nbk = K / qk;
	const size_t rb = pcg_dtype_row_bytes(t, K), bb = (size_t)blk_bytes(t);
	uint8_t *u[G];

	for (int r = 0; r < G; r++) {
		u[r] = ub + (size_t)r * K;
		uint16_t *dr = d + (size_t)r * nbk * 2;
		uint8_t *sr = sc + (size_t)r * nbk * 32;
		if (g * G + r < W->rows) {
			row_ints((const unsigned char *)W->data + (size_t)(g * G + r) * rb, t, K, u[r],
				 dr, dr + nbk, sr, sr + nbk * 16);
		} else { /* a zero row: zero scales, the integers of 0 */
			memset(u[r], t == PCG_Q4_0 ? 8 : t == PCG_Q8_0 ? 128 : t == PCG_Q6_K ? 32 : 0,
			       (size_t)K);
			memset(dr, 0, (size_t)nbk * 2 * sizeof *dr);
			memset(sr, 0, (size_t)nbk * 32);
		}
	}
	for (int i = 0; i < nbk; i++) {
		uint8_t *o = gp + (size_t)i * bb;
		const int k0 = i * qk;
		for (int r = 0; r < G; r++)
			memcpy(o + 2 * r, &d[(size_t)r * nbk * 2 + i], 2);
		o += 32;
		if (t == PCG_Q4_K) {
			for (int r = 0; r < G; r++)
				memcpy(o + 2 * r, &d[(size_t)r * nbk * 2 + nbk + i], 2);
			o += 32;
			for (int s = 0; s < 8; s++)
				for (int r = 0; r < G; r++) {
					const uint8_t *sr = sc + (size_t)r * nbk * 32;
					o[16 * s + r] = sr[8 * i + s];
					o[128 + 16 * s + r] = sr[nbk * 16 + 8 * i + s];
				}
			o += 256;
		} else if (t == PCG_Q6_K) {
			for (int s = 0; s < 16; s++)
				for (int r = 0; r < G; r++)
					o[16 * s + r] = sc[(size_t)r * nbk * 32 + 16 * i + s];
			o += 256;
		}
		if (t == PCG_Q8_0) {
			for (int c = 0; c < 8; c++)
				for (int r = 0; r < G; r++)
					memcpy(o + 64 * c + 4 * r, u[r] + k0 + 4 * c, 4);
			continue;
		}
		for (int c = 0; c < qk / 8; c++)
			put_nibbles(o + 64 * c, u, k0 + 8 * c);
		if (t == PCG_Q6_K) {
			uint8_t *h = o + 64 * (qk / 8);
			for (int s = 0; s < 16; s++)
				for (int r = 0; r < G; r++)
					for (int j = 0; j < 4; j++) {
						uint8_t v = 0;
						for (int q = 0; q < 4; q++)
							v |= (uint8_t)((u[r][k0 + 16 * s + 4 * q + j] >> 4 & 3)
								       << (2 * q));
						h[64 * s + 4 * r + j] = v;
					}
		}
	}
}

void pcg_qpack(void *dst, const pcg_mat *W)
{
	const int nbk = W->cols / pcg_dtype_block(W->dtype), ng = (W->rows + G - 1) / G;

#pragma omp parallel if (ng > 1 && pcg_get_threads() > 1)
	{
		uint16_t *d = malloc((size_t)G * nbk * 2 * sizeof *d);
		uint8_t *sc = malloc((size_t)G * nbk * 32), *ub = malloc((size_t)G * W->cols);
		if (d == NULL || sc == NULL || ub == NULL)
			abort(); /* a group of rows: a few hundred KB */
#pragma omp for schedule(static)
		for (int g = 0; g < ng; g++)
			pack_group((uint8_t *)dst + (size_t)g * group_bytes(W), W, g, ub, d, sc);
		free(d);
		free(sc);
		free(ub);
	}
}

/* ------------------------------------------------------------ products */

#if defined(__x86_64__)
#define V512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,f16c,fma")))

/* The activations of one product: xq [B][K] int8, their scales per 256
 * dx [B][nb], and per sub-block (32 weights; 16 for Q6_K) either the
 * integer start of the sums, -o * (sum of xq), or (Q4_K) the sum as f32. */
typedef struct acts {
	const int8_t *xq;
	const float *dx;
	const int32_t *i0; /* [B][K / sub] */
	const float *sf;   /* [B][K / 32], Q4_K */
	int K, nb;
} acts;

static inline int32_t ld32(const int8_t *p)
{
	int32_t v;
	memcpy(&v, p, 4);
	return v;
}

/* Stores the 16 sums of group g, rows [r0, r0 + nr) of y's. */
V512 static inline void store16(float *y, __m512 v, int g, int r0, int nr)
{
	const int a = g * G;
	if (a >= r0 && a + G <= r0 + nr) {
		_mm512_storeu_ps(y + (a - r0), v);
		return;
	}
	float t[G];
	_mm512_storeu_ps(t, v);
	for (int r = 0; r < G; r++)
		if (a + r >= r0 && a + r < r0 + nr)
			y[a + r - r0] = t[r];
}

#ifndef QPF_DIST
#define QPF_DIST 4096 /* bytes ahead of the weights read */
#endif
#define PF(p) __builtin_prefetch((const char *)(p) + QPF_DIST, 0, 1)

/* Group g against positions b0 .. b0 + NB - 1 (NB <= 8). */
V512 static inline __attribute__((always_inline)) void
group(float *y, int ldy, const acts *x, const pcg_mat *W, const uint8_t *gp, int g, int r0,
      int nr, int b0, const int NB)
{
	const int K = x->K, nb = x->nb;
	const pcg_dtype t = W->dtype;
	const __m512i m15 = _mm512_set1_epi8(15);
	__m512 acc[8];

	#pragma GCC unroll 8
	for (int b = 0; b < NB; b++)
		acc[b] = _mm512_setzero_ps();
	if (t == PCG_Q4_0 || t == PCG_Q8_0) {
		const int q8 = t == PCG_Q8_0, bb = q8 ? 544 : 288, nbk = K / 32;
		for (int j = 0; j < nb; j++) {
			__m512 s[8];
			#pragma GCC unroll 8
			for (int b = 0; b < NB; b++)
				s[b] = _mm512_setzero_ps();
			const int kb1 = 8 * j + 8 < nbk ? 8 * j + 8 : nbk;
			for (int kb = 8 * j; kb < kb1; kb++) {
				const uint8_t *p = gp + (size_t)kb * bb;
				PF(p);
				PF(p + 64 * 4);
				if (q8) {
					PF(p + 64 * 8);
				}
				const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const void *)p));
				__m512i w[8];
				if (q8) {
					#pragma GCC unroll 8
					for (int c = 0; c < 8; c++)
						w[c] = _mm512_loadu_si512(p + 32 + 64 * c);
				} else {
					#pragma GCC unroll 4
					for (int c = 0; c < 4; c++) {
						const __m512i v = _mm512_loadu_si512(p + 32 + 64 * c);
						w[2 * c] = _mm512_and_si512(v, m15);
						w[2 * c + 1] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m15);
					}
				}
				#pragma GCC unroll 8
				for (int b = 0; b < NB; b++) {
					const int8_t *xb = x->xq + (size_t)(b0 + b) * K + 32 * kb;
					__m512i i = _mm512_set1_epi32(x->i0[(size_t)(b0 + b) * nbk + kb]);
					#pragma GCC unroll 8
					for (int c = 0; c < 8; c++)
						i = _mm512_dpbusd_epi32(i, w[c], _mm512_set1_epi32(ld32(xb + 4 * c)));
					s[b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i), d, s[b]);
				}
			}
			#pragma GCC unroll 8
			for (int b = 0; b < NB; b++)
				acc[b] = _mm512_fmadd_ps(s[b], _mm512_set1_ps(x->dx[(size_t)(b0 + b) * nb + j]),
							 acc[b]);
		}
	} else if (t == PCG_Q4_K) {
		for (int j = 0; j < nb; j++) {
			const uint8_t *p = gp + (size_t)j * 2368;
			const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const void *)p));
			const __m512 dm = _mm512_cvtph_ps(_mm256_loadu_si256((const void *)(p + 32)));
			__m512 s[8];
			#pragma GCC unroll 8
			for (int b = 0; b < NB; b++)
				s[b] = _mm512_setzero_ps();
			for (int sb = 0; sb < 8; sb++) {
				const uint8_t *q = p + 320 + 256 * sb;
				PF(q);
				PF(q + 64);
				PF(q + 128);
				PF(q + 192);
				const __m512 dsc = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
					_mm_loadu_si128((const void *)(p + 64 + 16 * sb)))));
				const __m512 dmn = _mm512_mul_ps(dm, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
					_mm_loadu_si128((const void *)(p + 192 + 16 * sb)))));
				__m512i w[8];
				#pragma GCC unroll 4
				for (int c = 0; c < 4; c++) {
					const __m512i v = _mm512_loadu_si512(q + 64 * c);
					w[2 * c] = _mm512_and_si512(v, m15);
					w[2 * c + 1] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m15);
				}
				#pragma GCC unroll 8
				for (int b = 0; b < NB; b++) {
					const int8_t *xb = x->xq + (size_t)(b0 + b) * K + QB * j + 32 * sb;
					__m512i i = _mm512_setzero_si512();
					#pragma GCC unroll 8
					for (int c = 0; c < 8; c++)
						i = _mm512_dpbusd_epi32(i, w[c], _mm512_set1_epi32(ld32(xb + 4 * c)));
					s[b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i), dsc, s[b]);
					s[b] = _mm512_fnmadd_ps(
						dmn, _mm512_set1_ps(x->sf[(size_t)(b0 + b) * (K / 32) + 8 * j + sb]),
						s[b]);
				}
			}
			#pragma GCC unroll 8
			for (int b = 0; b < NB; b++)
				acc[b] = _mm512_fmadd_ps(s[b], _mm512_set1_ps(x->dx[(size_t)(b0 + b) * nb + j]),
							 acc[b]);
		}
	} else { /* Q6_K */
		const __m512i m30 = _mm512_set1_epi8(0x30);
		for (int j = 0; j < nb; j++) {
			const uint8_t *p = gp + (size_t)j * 3360;
			const uint8_t *ql = p + 288, *qh = p + 288 + 2048;
			const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const void *)p));
			__m512 s[8];
			#pragma GCC unroll 8
			for (int b = 0; b < NB; b++)
				s[b] = _mm512_setzero_ps();
			for (int sb = 0; sb < 16; sb++) {
				PF(ql + 128 * sb);
				PF(ql + 128 * sb + 64);
				PF(qh + 64 * sb);
				const __m512 dsc = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
					_mm_loadu_si128((const void *)(p + 32 + 16 * sb)))));
				const __m512i a = _mm512_loadu_si512(ql + 128 * sb);
				const __m512i c2 = _mm512_loadu_si512(ql + 128 * sb + 64);
				const __m512i h = _mm512_loadu_si512(qh + 64 * sb);
				/* low nibble | the two top bits at 4-5: A | (B & C) */
				__m512i w[4];
				w[0] = _mm512_ternarylogic_epi32(_mm512_and_si512(a, m15),
								 _mm512_slli_epi16(h, 4), m30, 0xF8);
				w[1] = _mm512_ternarylogic_epi32(
					_mm512_and_si512(_mm512_srli_epi16(a, 4), m15),
					_mm512_slli_epi16(h, 2), m30, 0xF8);
				w[2] = _mm512_ternarylogic_epi32(_mm512_and_si512(c2, m15), h, m30, 0xF8);
				w[3] = _mm512_ternarylogic_epi32(
					_mm512_and_si512(_mm512_srli_epi16(c2, 4), m15),
					_mm512_srli_epi16(h, 2), m30, 0xF8);
				#pragma GCC unroll 8
				for (int b = 0; b < NB; b++) {
					const int8_t *xb = x->xq + (size_t)(b0 + b) * K + QB * j + 16 * sb;
					__m512i i = _mm512_set1_epi32(
						x->i0[(size_t)(b0 + b) * (K / 16) + 16 * j + sb]);
					#pragma GCC unroll 4
					for (int c = 0; c < 4; c++)
						i = _mm512_dpbusd_epi32(i, w[c], _mm512_set1_epi32(ld32(xb + 4 * c)));
					s[b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i), dsc, s[b]);
				}
			}
			#pragma GCC unroll 8
			for (int b = 0; b < NB; b++)
				acc[b] = _mm512_fmadd_ps(s[b], _mm512_set1_ps(x->dx[(size_t)(b0 + b) * nb + j]),
							 acc[b]);
		}
	}
	#pragma GCC unroll 8
	for (int b = 0; b < NB; b++)
		store16(y + (size_t)(b0 + b) * ldy, acc[b], g, r0, nr);
}

/* ------------------------------------------------ AVX2 and AVX-VNNI
 *
 * The same packs, half a group (8 rows, 32 bytes of each 64-byte part) a
 * 256-bit vector, for CPUs without AVX-512. With AVX-VNNI the integer sums
 * are vpdpbusd's as above. With AVX2 alone they are vpmaddubsw's (u8 x s8
 * pairs into int16, saturating) and vpmaddwd by ones: Q4_0's and Q4_K's u
 * are at most 15, so 8 pairs' sums (a 32-weight sub-block) stay below
 * 8 x 2 x 15 x 127 = 30,480 and add in int16 before one vpmaddwd; Q6_K's
 * (at most 63) two at a time (32,004); Q8_0's u = q + 128 would saturate,
 * so it takes q = u ^ 128 and the sign trick (|q| against x with q's sign:
 * at most 2 x 128 x 127 = 32,512 a pair), from 0 rather than -128 sum(x).
 * Every integer sum is exact either way, and each lane's float arithmetic
 * is the AVX-512 kernel's in its order (the sub-blocks' sums times the
 * rows' scales into s, s times the activations' scale into acc per 256),
 * so the three families give the same bits. */
#define V256 __attribute__((target("avx2,fma,f16c")))
#define V256N __attribute__((target("avx2,fma,f16c,avxvnni")))

/* Stores the 8 sums of half h of group g, rows [r0, r0 + nr) of y's. */
V256 static inline void store8(float *y, __m256 v, int g, int h, int r0, int nr)
{
	const int a = g * G + 8 * h;
	if (a >= r0 && a + 8 <= r0 + nr) {
		_mm256_storeu_ps(y + (a - r0), v);
		return;
	}
	float t[8];
	_mm256_storeu_ps(t, v);
	for (int r = 0; r < 8; r++)
		if (a + r >= r0 && a + r < r0 + nr)
			y[a + r - r0] = t[r];
}

/* Part c of 4-bit weights packed two parts to a 64-byte block (part 2m in
 * the low nibbles of block m, part 2m + 1 in the high), the half whose
 * bytes start at hb: 32 unsigned weights, 4 of each of 8 rows. */
V256 static inline __m256i nib_part(const uint8_t *p, int c, int hb)
{
	const __m256i v = _mm256_loadu_si256((const void *)(p + 64 * (c / 2) + hb));
	return _mm256_and_si256(c % 2 ? _mm256_srli_epi16(v, 4) : v, _mm256_set1_epi8(15));
}

/* u8 x s8 summed per 4 into i: AVX-VNNI's one instruction, or AVX2's pair
 * (only where no pair can saturate: Q8_0's signed form, Q6_K's two). */
V256N static inline __m256i dot4_vnni(__m256i i, __m256i u, __m256i x)
{
	return _mm256_dpbusd_avx_epi32(i, u, x);
}
V256 static inline __m256i dot4_avx2(__m256i i, __m256i u, __m256i x)
{
	return _mm256_add_epi32(i, _mm256_madd_epi16(_mm256_maddubs_epi16(u, x),
						     _mm256_set1_epi16(1)));
}

/* H halves of group g from half h0 against positions b0 .. b0 + NB - 1
 * (H NB <= 8): each weight vector read once for them, each activation
 * broadcast once for both halves. VNNI: the integer sums by dot4_vnni,
 * else the 4-bit formats' by int16 sums (a sub-block's fit) widened once. Lane l of accumulator a = hh NB + b:
 * row 8 (h0 + hh) + l of the group, position b0 + b. */
#define GROUP256(NAME, ATTR, DOT4, VNNI) \
ATTR static inline __attribute__((always_inline)) void \
NAME(float *y, int ldy, const acts *x, const pcg_mat *W, const uint8_t *gp, int g, int h0, \
     int r0, int nr, int b0, const int H, const int NB) \
{ \
	const int K = x->K, nb = x->nb; \
	const pcg_dtype t = W->dtype; \
	const __m256i m15 = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1); \
	const int hb0 = 32 * h0; /* the first half's bytes in a 64-byte part */ \
	__m256 acc[8]; \
	_Pragma("GCC unroll 8") \
	for (int a = 0; a < H * NB; a++) \
		acc[a] = _mm256_setzero_ps(); \
	for (int j = 0; j < nb; j++) { \
		__m256 s[8]; \
		_Pragma("GCC unroll 8") \
		for (int a = 0; a < H * NB; a++) \
			s[a] = _mm256_setzero_ps(); \
		if (t == PCG_Q4_0 || t == PCG_Q8_0) { \
			const int q8 = t == PCG_Q8_0, bb = q8 ? 544 : 288, nbk = K / 32; \
			const int kb1 = 8 * j + 8 < nbk ? 8 * j + 8 : nbk; \
			for (int kb = 8 * j; kb < kb1; kb++) { \
				const uint8_t *p = gp + (size_t)kb * bb; \
				PF(p); /* every line of the block, 4 KB ahead */ \
				for (int l = 64; l < bb; l += 64) \
					PF(p + l); \
				__m256 d[2]; \
				__m256i i[8]; /* Q4_0 on AVX2: int16 sums until the end */ \
				int32_t i0[8]; /* the start of the sums, -o sum(x) */ \
				_Pragma("GCC unroll 2") \
				for (int hh = 0; hh < H; hh++) \
					d[hh] = _mm256_cvtph_ps(_mm_loadu_si128((const void *)(p + 16 * (h0 + hh)))); \
				_Pragma("GCC unroll 8") \
				for (int a = 0; a < H * NB; a++) { \
					i0[a] = x->i0[(size_t)(b0 + a % NB) * nbk + kb]; \
					i[a] = VNNI ? _mm256_set1_epi32(i0[a]) : _mm256_setzero_si256(); \
				} \
				_Pragma("GCC unroll 8") \
				for (int c = 0; c < 8; c++) { \
					__m256i bx[4]; \
					_Pragma("GCC unroll 4") \
					for (int b = 0; b < NB; b++) \
						bx[b] = _mm256_set1_epi32(ld32( \
							x->xq + (size_t)(b0 + b) * K + 32 * kb + 4 * c)); \
					_Pragma("GCC unroll 2") \
					for (int hh = 0; hh < H; hh++) { \
						const int hb = hb0 + 32 * hh; \
						const __m256i w = q8 ? _mm256_loadu_si256( \
									(const void *)(p + 32 + 64 * c + hb)) \
								     : nib_part(p + 32, c, hb); \
						__m256i ws = w, aw = w; \
						if (!VNNI && q8) { /* q and |q| */ \
							ws = _mm256_xor_si256(w, _mm256_set1_epi8((char)0x80)); \
							aw = _mm256_abs_epi8(ws); \
						} \
						_Pragma("GCC unroll 4") \
						for (int b = 0; b < NB; b++) { \
							const int a = hh * NB + b; \
							if (VNNI) \
								i[a] = DOT4(i[a], w, bx[b]); \
							else if (q8) \
								i[a] = DOT4(i[a], aw, _mm256_sign_epi8(bx[b], ws)); \
							else \
								i[a] = _mm256_add_epi16(i[a], \
									_mm256_maddubs_epi16(w, bx[b])); \
						} \
					} \
				} \
				_Pragma("GCC unroll 8") \
				for (int a = 0; a < H * NB; a++) { \
					if (!VNNI && !q8) \
						i[a] = _mm256_add_epi32(_mm256_set1_epi32(i0[a]), \
									_mm256_madd_epi16(i[a], ones)); \
					s[a] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i[a]), d[a / NB], s[a]); \
				} \
			} \
		} else if (t == PCG_Q4_K) { \
			const uint8_t *p = gp + (size_t)j * 2368; \
			__m256 d[2], dm[2]; \
			_Pragma("GCC unroll 2") \
			for (int hh = 0; hh < H; hh++) { \
				d[hh] = _mm256_cvtph_ps(_mm_loadu_si128((const void *)(p + 16 * (h0 + hh)))); \
				dm[hh] = _mm256_cvtph_ps(_mm_loadu_si128( \
					(const void *)(p + 32 + 16 * (h0 + hh)))); \
			} \
			for (int sb = 0; sb < 8; sb++) { \
				const uint8_t *q = p + 320 + 256 * sb; \
				PF(q); /* the sub-block's 4 lines */ \
				PF(q + 64); \
				PF(q + 128); \
				PF(q + 192); \
				__m256 dsc[2], dmn[2]; \
				_Pragma("GCC unroll 2") \
				for (int hh = 0; hh < H; hh++) { \
					const int e = 8 * (h0 + hh); \
					dsc[hh] = _mm256_mul_ps(d[hh], _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32( \
						_mm_loadl_epi64((const void *)(p + 64 + 16 * sb + e))))); \
					dmn[hh] = _mm256_mul_ps(dm[hh], _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32( \
						_mm_loadl_epi64((const void *)(p + 192 + 16 * sb + e))))); \
				} \
				__m256i i[8]; \
				_Pragma("GCC unroll 8") \
				for (int a = 0; a < H * NB; a++) \
					i[a] = _mm256_setzero_si256(); \
				_Pragma("GCC unroll 8") \
				for (int c = 0; c < 8; c++) { \
					__m256i bx[4]; \
					_Pragma("GCC unroll 4") \
					for (int b = 0; b < NB; b++) \
						bx[b] = _mm256_set1_epi32(ld32(x->xq + \
							(size_t)(b0 + b) * K + QB * j + 32 * sb + 4 * c)); \
					_Pragma("GCC unroll 2") \
					for (int hh = 0; hh < H; hh++) { \
						const __m256i w = nib_part(q, c, hb0 + 32 * hh); \
						_Pragma("GCC unroll 4") \
						for (int b = 0; b < NB; b++) { \
							const int a = hh * NB + b; \
							i[a] = VNNI ? DOT4(i[a], w, bx[b]) \
								    : _mm256_add_epi16(i[a], \
									_mm256_maddubs_epi16(w, bx[b])); \
						} \
					} \
				} \
				_Pragma("GCC unroll 8") \
				for (int a = 0; a < H * NB; a++) { \
					if (!VNNI) \
						i[a] = _mm256_madd_epi16(i[a], ones); \
					s[a] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i[a]), dsc[a / NB], s[a]); \
					s[a] = _mm256_fnmadd_ps(dmn[a / NB], _mm256_set1_ps( \
						x->sf[(size_t)(b0 + a % NB) * (K / 32) + 8 * j + sb]), s[a]); \
				} \
			} \
		} else { /* Q6_K */ \
			const __m256i m30 = _mm256_set1_epi8(0x30); \
			const uint8_t *p = gp + (size_t)j * 3360; \
			const uint8_t *ql = p + 288, *qh = p + 288 + 2048; \
			__m256 d[2]; \
			_Pragma("GCC unroll 2") \
			for (int hh = 0; hh < H; hh++) \
				d[hh] = _mm256_cvtph_ps(_mm_loadu_si128((const void *)(p + 16 * (h0 + hh)))); \
			for (int sb = 0; sb < 16; sb++) { \
				PF(ql + 128 * sb + hb0); \
				PF(ql + 128 * sb + 64 + hb0); \
				PF(qh + 64 * sb + hb0); \
				_Pragma("GCC unroll 2") \
				for (int hh = 0; hh < H; hh++) { \
					const int hb = hb0 + 32 * hh; \
					const __m256 dsc = _mm256_mul_ps(d[hh], _mm256_cvtepi32_ps( \
						_mm256_cvtepi8_epi32(_mm_loadl_epi64( \
							(const void *)(p + 32 + 16 * sb + 8 * (h0 + hh)))))); \
					const __m256i a = _mm256_loadu_si256((const void *)(ql + 128 * sb + hb)); \
					const __m256i c2 = _mm256_loadu_si256( \
						(const void *)(ql + 128 * sb + 64 + hb)); \
					const __m256i hv = _mm256_loadu_si256((const void *)(qh + 64 * sb + hb)); \
					/* low nibble | the two top bits at 4-5 */ \
					__m256i w[4]; \
					w[0] = _mm256_or_si256(_mm256_and_si256(a, m15), \
							       _mm256_and_si256(_mm256_slli_epi16(hv, 4), m30)); \
					w[1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), m15), \
							       _mm256_and_si256(_mm256_slli_epi16(hv, 2), m30)); \
					w[2] = _mm256_or_si256(_mm256_and_si256(c2, m15), \
							       _mm256_and_si256(hv, m30)); \
					w[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(c2, 4), m15), \
							       _mm256_and_si256(_mm256_srli_epi16(hv, 2), m30)); \
					_Pragma("GCC unroll 4") \
					for (int b = 0; b < NB; b++) { \
						const int8_t *xb = x->xq + (size_t)(b0 + b) * K + QB * j + 16 * sb; \
						__m256i i = _mm256_set1_epi32( \
							x->i0[(size_t)(b0 + b) * (K / 16) + 16 * j + sb]); \
						if (VNNI) { \
							_Pragma("GCC unroll 4") \
							for (int c = 0; c < 4; c++) \
								i = DOT4(i, w[c], _mm256_set1_epi32(ld32(xb + 4 * c))); \
						} else { \
							_Pragma("GCC unroll 2") \
							for (int c = 0; c < 4; c += 2) \
								i = _mm256_add_epi32(i, _mm256_madd_epi16( \
									_mm256_add_epi16(_mm256_maddubs_epi16(w[c], \
										_mm256_set1_epi32(ld32(xb + 4 * c))), \
									_mm256_maddubs_epi16(w[c + 1], \
										_mm256_set1_epi32(ld32(xb + 4 * c + 4)))), \
									ones)); \
						} \
						s[hh * NB + b] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), dsc, \
										 s[hh * NB + b]); \
					} \
				} \
			} \
		} \
		_Pragma("GCC unroll 8") \
		for (int a = 0; a < H * NB; a++) \
			acc[a] = _mm256_fmadd_ps(s[a], \
				_mm256_set1_ps(x->dx[(size_t)(b0 + a % NB) * nb + j]), acc[a]); \
	} \
	_Pragma("GCC unroll 8") \
	for (int a = 0; a < H * NB; a++) \
		store8(y + (size_t)(b0 + a % NB) * ldy, acc[a], g, h0 + a / NB, r0, nr); \
}
GROUP256(half_avx2, V256, dot4_avx2, 0)
GROUP256(half_vnni, V256N, dot4_vnni, 1)

/* Q4_0 and Q4_K, the 16 rows of group g against NB (3 or 4) positions from b0:
 * the same sums as the HALF kernels above (the same bits), written out so
 * that the 8 integer sums, the two halves' weights and one broadcast are
 * all that live through the 32 weights of a sub-block (14 of the 16
 * registers); the float sums s and acc change once a sub-block and stay in
 * memory. Each position's 4 bytes are broadcast once for both halves. */
#define Q4X4(NAME, ATTR, VNNI, NB) \
ATTR __attribute__((noinline)) static void NAME(float *y, int ldy, const acts *x, \
						 const pcg_mat *W, const uint8_t *gp, int g, \
						 int r0, int nr, int b0) \
{ \
	const int K = x->K, nb = x->nb, nbk = K / 32, k4 = W->dtype == PCG_Q4_K; \
	const __m256i m15 = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1); \
	const int8_t *xq0 = x->xq + (size_t)b0 * K; \
	const int32_t *z0 = x->i0 + (size_t)b0 * nbk; \
	const float *sf0 = x->sf + (size_t)b0 * nbk; \
	__m256 acc[8], s[8]; \
	for (int a = 0; a < 8; a++) \
		acc[a] = _mm256_setzero_ps(); \
	for (int j = 0; j < nb; j++) { \
		for (int a = 0; a < 8; a++) \
			s[a] = _mm256_setzero_ps(); \
		const int kb1 = 8 * j + 8 < nbk ? 8 * j + 8 : nbk; \
		const uint8_t *pk = gp + (size_t)j * 2368; /* Q4_K: the super-block */ \
		__m256 d0, d1, dm0 = _mm256_setzero_ps(), dm1 = dm0; \
		if (k4) { \
			d0 = _mm256_cvtph_ps(_mm_loadu_si128((const void *)pk)); \
			d1 = _mm256_cvtph_ps(_mm_loadu_si128((const void *)(pk + 16))); \
			dm0 = _mm256_cvtph_ps(_mm_loadu_si128((const void *)(pk + 32))); \
			dm1 = _mm256_cvtph_ps(_mm_loadu_si128((const void *)(pk + 48))); \
		} \
		for (int kb = 8 * j; kb < kb1; kb++) { \
			const int sb = kb - 8 * j; \
			const uint8_t *p = k4 ? pk + 320 + 256 * sb : gp + (size_t)kb * 288 + 32; \
			PF(p); \
			PF(p + 64); \
			PF(p + 128); \
			PF(p + 192); \
			if (!k4) \
				PF(p - 32); \
			__m256i i00, i01, i02, i03, i10, i11, i12, i13; \
			if (VNNI && !k4) { \
				i00 = i10 = _mm256_set1_epi32(z0[kb]); \
				i01 = i11 = _mm256_set1_epi32(z0[nbk + kb]); \
				i02 = i12 = _mm256_set1_epi32(z0[2 * nbk + kb]); \
				i03 = i13 = _mm256_set1_epi32(z0[(NB - 1) * nbk + kb]); \
			} else { \
				i00 = i01 = i02 = i03 = _mm256_setzero_si256(); \
				i10 = i11 = i12 = i13 = i00; \
			} \
			const int8_t *xb = xq0 + 32 * kb; \
			_Pragma("GCC unroll 4") \
			for (int m = 0; m < 4; m++) { \
				const __m256i v0 = _mm256_loadu_si256((const void *)(p + 64 * m)); \
				const __m256i v1 = \
					_mm256_loadu_si256((const void *)(p + 64 * m + 32)); \
				_Pragma("GCC unroll 2") \
				for (int hi = 0; hi < 2; hi++) { \
					const __m256i u0 = hi ? _mm256_srli_epi16(v0, 4) : v0; \
					const __m256i u1 = hi ? _mm256_srli_epi16(v1, 4) : v1; \
					const __m256i w0 = _mm256_and_si256(u0, m15); \
					const __m256i w1 = _mm256_and_si256(u1, m15); \
					const int c = 2 * m + hi; \
					__m256i bx; \
					Q4X4_DOT(VNNI, 0, i00, i10) \
					Q4X4_DOT(VNNI, 1, i01, i11) \
					Q4X4_DOT(VNNI, 2, i02, i12) \
					if (NB > 3) { \
						Q4X4_DOT(VNNI, 3, i03, i13) \
					} \
				} \
			} \
			/* the rows' scales (and Q4_K's mins) */ \
			__m256 c0, c1, n0 = dm0, n1 = dm1; \
			if (k4) { \
				c0 = _mm256_mul_ps(d0, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32( \
					_mm_loadl_epi64((const void *)(pk + 64 + 16 * sb))))); \
				c1 = _mm256_mul_ps(d1, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32( \
					_mm_loadl_epi64((const void *)(pk + 72 + 16 * sb))))); \
				n0 = _mm256_mul_ps(dm0, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32( \
					_mm_loadl_epi64((const void *)(pk + 192 + 16 * sb))))); \
				n1 = _mm256_mul_ps(dm1, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32( \
					_mm_loadl_epi64((const void *)(pk + 200 + 16 * sb))))); \
			} else { \
				c0 = _mm256_cvtph_ps(_mm_loadu_si128((const void *)(p - 32))); \
				c1 = _mm256_cvtph_ps(_mm_loadu_si128((const void *)(p - 16))); \
			} \
			Q4X4_SUM(VNNI, 0, i00, c0, n0) \
			Q4X4_SUM(VNNI, 1, i01, c0, n0) \
			Q4X4_SUM(VNNI, 2, i02, c0, n0) \
			Q4X4_SUM(VNNI, 4, i10, c1, n1) \
			Q4X4_SUM(VNNI, 5, i11, c1, n1) \
			Q4X4_SUM(VNNI, 6, i12, c1, n1) \
			if (NB > 3) { \
				Q4X4_SUM(VNNI, 3, i03, c0, n0) \
				Q4X4_SUM(VNNI, 7, i13, c1, n1) \
			} \
			__asm__ volatile("" : : "r"(s) : "memory"); /* s stays in memory */ \
		} \
		for (int a = 0; a < 8; a++) \
			if (a % 4 < NB) { \
				const float dx = x->dx[(size_t)(b0 + a % 4) * nb + j]; \
				acc[a] = _mm256_fmadd_ps(s[a], _mm256_set1_ps(dx), acc[a]); \
			} \
	} \
	for (int a = 0; a < 8; a++) \
		if (a % 4 < NB) \
			store8(y + (size_t)(b0 + a % 4) * ldy, acc[a], g, a / 4, r0, nr); \
}
/* Position b's 4 bytes of part c against both halves. */
#define Q4X4_DOT(VNNI, b, ia, ib) \
	bx = _mm256_set1_epi32(ld32(xb + (size_t)(b) * K + 4 * c)); \
	if (VNNI) { \
		ia = _mm256_dpbusd_avx_epi32(ia, w0, bx); \
		ib = _mm256_dpbusd_avx_epi32(ib, w1, bx); \
	} else { \
		ia = _mm256_add_epi16(ia, _mm256_maddubs_epi16(w0, bx)); \
		ib = _mm256_add_epi16(ib, _mm256_maddubs_epi16(w1, bx)); \
	} \
	__asm__("" : "+x"(ia), "+x"(ib)); /* a chain of adds: not a tree of products */
/* Accumulator a's sub-block sum (AVX2: int16 pairs widened; Q4_0 from the
 * start of its sums) times the rows' scales into s, less Q4_K's mins times
 * the activations' sum. */
#define Q4X4_SUM(VNNI, a, ia, d, dmin) \
	if (!VNNI) \
		ia = _mm256_madd_epi16(ia, ones); \
	if (!VNNI && !k4) \
		ia = _mm256_add_epi32(_mm256_set1_epi32(z0[(a % 4) * nbk + kb]), ia); \
	s[a] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia), d, s[a]); \
	if (k4) \
		s[a] = _mm256_fnmadd_ps(dmin, _mm256_set1_ps(sf0[(a % 4) * nbk + kb]), s[a]);
Q4X4(q4x4_avx2, V256, 0, 4)
Q4X4(q4x4_vnni, V256N, 1, 4)
Q4X4(q4x3_avx2, V256, 0, 3)
Q4X4(q4x3_vnni, V256N, 1, 3)

/* Group g against every position: both halves at once, 4 positions at a
 * time, where every row of the group is asked (Q4_0 and Q4_K: 3 or 4 of
 * them by Q4X4's kernels); else a half at a time, 4 positions at a time
 * (the same bits either way: each lane is one row). */
#define GROUP256_ALL(NAME, ATTR, HALF, Q4X4F, Q4X3F) \
ATTR static void NAME(float *y, int ldy, const acts *x, const pcg_mat *W, int B, int g, int r0, \
		      int nr) \
{ \
	const uint8_t *gp = (const uint8_t *)W->packed + (size_t)g * group_bytes(W); \
	if (g * G >= r0 && g * G + G <= r0 + nr) { \
		for (int b0 = 0; b0 < B; b0 += 4) { \
			if (B - b0 >= 3 && (W->dtype == PCG_Q4_0 || W->dtype == PCG_Q4_K)) { \
				(B - b0 >= 4 ? Q4X4F : Q4X3F)(y, ldy, x, W, gp, g, r0, nr, b0); \
				continue; \
			} \
			switch (B - b0 < 4 ? B - b0 : 4) { \
			case 1: HALF(y, ldy, x, W, gp, g, 0, r0, nr, b0, 2, 1); break; \
			case 2: HALF(y, ldy, x, W, gp, g, 0, r0, nr, b0, 2, 2); break; \
			case 3: HALF(y, ldy, x, W, gp, g, 0, r0, nr, b0, 2, 3); break; \
			default: HALF(y, ldy, x, W, gp, g, 0, r0, nr, b0, 2, 4); break; \
			} \
		} \
		return; \
	} \
	for (int h = 0; h < 2; h++) { \
		if (g * G + 8 * h >= r0 + nr || g * G + 8 * h + 8 <= r0) \
			continue; /* none of its rows asked */ \
		for (int b0 = 0; b0 < B; b0 += 4) { \
			switch (B - b0 < 4 ? B - b0 : 4) { \
			case 1: HALF(y, ldy, x, W, gp, g, h, r0, nr, b0, 1, 1); break; \
			case 2: HALF(y, ldy, x, W, gp, g, h, r0, nr, b0, 1, 2); break; \
			case 3: HALF(y, ldy, x, W, gp, g, h, r0, nr, b0, 1, 3); break; \
			default: HALF(y, ldy, x, W, gp, g, h, r0, nr, b0, 1, 4); break; \
			} \
		} \
	} \
}
GROUP256_ALL(group_all_avx2, V256, half_avx2, q4x4_avx2, q4x3_avx2)
GROUP256_ALL(group_all_vnni, V256N, half_vnni, q4x4_vnni, q4x3_vnni)

/* Group g against every position, 8 at a time. */
V512 static void group_all(float *y, int ldy, const acts *x, const pcg_mat *W, int B, int g,
			   int r0, int nr)
{
	const uint8_t *gp = (const uint8_t *)W->packed + (size_t)g * group_bytes(W);

	for (int b0 = 0; b0 < B; b0 += 8) {
		switch (B - b0 < 8 ? B - b0 : 8) {
		case 1: group(y, ldy, x, W, gp, g, r0, nr, b0, 1); break;
		case 2: group(y, ldy, x, W, gp, g, r0, nr, b0, 2); break;
		case 3: group(y, ldy, x, W, gp, g, r0, nr, b0, 3); break;
		case 4: group(y, ldy, x, W, gp, g, r0, nr, b0, 4); break;
		case 5: group(y, ldy, x, W, gp, g, r0, nr, b0, 5); break;
		case 6: group(y, ldy, x, W, gp, g, r0, nr, b0, 6); break;
		case 7: group(y, ldy, x, W, gp, g, r0, nr, b0, 7); break;
		default: group(y, ldy, x, W, gp, g, r0, nr, b0, 8); break;
		}
	}
}

int pcg_qpack_matmul(float *y, int ldy, const float *xf, int B, const pcg_mat *W, int r0,
		     int nr)
{
	const int K = W->cols, q6 = W->dtype == PCG_Q6_K, sub = q6 ? 16 : 32;
	const int o = W->dtype == PCG_Q4_0 ? 8 : W->dtype == PCG_Q8_0 ? 128 : q6 ? 32 : 0;
	pcg_qx q;

	if (pcg_qx_alloc(&q, B, K) < 0)
		return -1;
	int32_t *i0 = malloc((size_t)B * (K / sub) * sizeof *i0);
	float *sf = malloc((size_t)B * (K / 32) * sizeof *sf);
	if (i0 == NULL || sf == NULL) {
		free(i0);
		free(sf);
		pcg_qx_free(&q);
		return -1;
	}
	pcg_qx_quantize(&q, xf, B, K);
	for (int b = 0; b < B; b++) /* the sub-blocks' sums: Q4_K's as floats, the others' start */
		for (int s = 0; s < K / sub; s++) {
			/* from the quantiser's sums per 16 (whole numbers, exact) */
			const int k = s * sub;
			const float *s16 = q.s + ((size_t)b * q.nb + k / QB) * 16 + k % QB / 16;
			const int32_t sum = (int32_t)(q6 ? s16[0] : s16[0] + s16[1]);
			if (o == 0)
				sf[(size_t)b * (K / 32) + s] = (float)sum;
			else
				i0[(size_t)b * (K / sub) + s] = -o * sum;
		}
	const acts x = { .xq = q.q, .dx = q.d, .i0 = i0, .sf = sf, .K = K, .nb = q.nb };
	const int g0 = r0 / G, g1 = (r0 + nr + G - 1) / G;
	const char *path = pcg_qmatmul_path();
	void (*all)(float *, int, const acts *, const pcg_mat *, int, int, int, int) =
		!strcmp(path, "avx512-vnni") ? group_all
		: !strcmp(path, "avx-vnni") ? group_all_vnni : group_all_avx2;

	if (g1 - g0 == 1 || pcg_get_threads() == 1) {
		for (int g = g0; g < g1; g++)
			all(y, ldy, &x, W, B, g, r0, nr);
	} else {
#pragma omp parallel for schedule(static)
		for (int g = g0; g < g1; g++)
			all(y, ldy, &x, W, B, g, r0, nr);
	}
	free(i0);
	free(sf);
	pcg_qx_free(&q);
	return 0;
}
#else
int pcg_qpack_matmul(float *y, int ldy, const float *xf, int B, const pcg_mat *W, int r0,
		     int nr)
{
	(void)y, (void)ldy, (void)xf, (void)B, (void)W, (void)r0, (void)nr;
	return -1;
}
#endif
