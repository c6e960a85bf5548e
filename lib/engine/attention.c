/* attention.c: one query head's attention over the KV cache (attention.h).
 *
 * A head's scores are hd-long dot products, one per cache position. The
 * plain loop reduces each to a scalar with a horizontal sum, calls expf per
 * position and divides each p by the sum: at LLaSA-1B's shape about a tenth
 * of a decode step once the context passes 200 positions. The SIMD kernels
 * run 8 (4 on NEON) positions side by side, one accumulator each, and fold
 * the accumulators into one vector of scores by pairwise adds (7 adds for
 * 8 positions, not 8 horizontal sums), take exp a vector at a time, and
 * scale the sum of p * v by 1 / sum once at the end.
 *
 * exp: Cephes' expf (x = n ln 2 + r, |r| <= ln 2 / 2, a degree-5 polynomial
 * of r, 2^n put into the exponent), within 2 ulp of expf on [-87, 0]; below
 * -87 the result is 0 (expf gives a subnormal or 0 there: at most 2^-125 of
 * the largest p, which is 1). The softmax's arguments are s - max(s) <= 0.
 */
#include "attention.h"

#include "matmul.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

/* Cephes expf's constants */
#define EXP_HI 88.3762626647949f
#define EXP_LO -87.0f
#define LOG2E 1.44269504088896341f
#define LN2_HI 0.693359375f
#define LN2_LO -2.12194440e-4f
#define P0 1.9875691500E-4f
#define P1 1.3981999507E-3f
#define P2 8.3334519073E-3f
#define P3 4.1665795894E-2f
#define P4 1.6666665459E-1f
#define P5 5.0000001201E-1f

/* one head, the plain loop */
static void attend_one(float *out, const float *q, const float *k, const float *v, int n,
		       int hd, size_t ld, float scale, float *sc)
{
	float mx = -INFINITY, sum = 0.0f;

	for (int j = 0; j < n; j++) {
		const float *kj = k + (size_t)j * ld;
		float s = 0.0f;
#pragma omp simd reduction(+ : s)
		for (int i = 0; i < hd; i++)
			s += q[i] * kj[i];
		sc[j] = s * scale;
		mx = sc[j] > mx ? sc[j] : mx;
	}
	for (int j = 0; j < n; j++) {
		sc[j] = expf(sc[j] - mx);
		sum += sc[j];
	}
	for (int i = 0; i < hd; i++)
		out[i] = 0.0f;
	for (int j = 0; j < n; j++) {
		const float *vj = v + (size_t)j * ld;
		const float p = sc[j] / sum;
#pragma omp simd
		for (int i = 0; i < hd; i++)
			out[i] += p * vj[i];
	}
}

void pcg_attend_generic(float *out, const float *q, int G, const float *k, const float *v,
			int n, int hd, size_t ld, float scale, float *sc)
{
	for (int g = 0; g < G; g++)
		attend_one(out + (size_t)g * hd, q + (size_t)g * hd, k, v, n, hd, ld, scale, sc);
}

/* The sum of p v for the G heads, in blocks of 32 positions (a block of
 * values is read from memory once for all of them) and chunks of 64 floats
 * of a head: PV(out, v, ld, sc, j0, j1, vectors, scale) with W floats a
 * vector, each head's 1 / sum applied as its last block is stored. Uses the
 * kernel's out, v, ld, sc, n, hd, G, ns and r. */
#define PV_HEADS(PV, W) \
	for (int j0 = 0; j0 < n; j0 += 32) { \
		const int j1 = n - j0 < 32 ? n : j0 + 32; \
		for (int g = 0; g < G; g++) { \
			float *og = out + (size_t)g * hd; \
			const float *sg = sc + g * ns; \
			const float rg = j1 == n ? r[g] : 1.0f; \
			int c0 = 0; \
			for (; c0 + 64 <= hd; c0 += 64) \
				PV(og + c0, v + c0, ld, sg, j0, j1, 64 / (W), rg); \
			if (c0 < hd) \
				PV(og + c0, v + c0, ld, sg, j0, j1, (hd - c0) / (W), rg); \
		} \
	}

#if defined(__x86_64__)
/* x86-64-v3 (AVX2, FMA): also what the AVX-512 families run, as the work
 * is small beside the weights and 8 positions a step fill the registers. */
#define V3 __attribute__((target("arch=x86-64-v3")))

static inline __attribute__((always_inline)) V3 __m256 exp8(__m256 x)
{
	const __m256 zero = _mm256_cmp_ps(x, _mm256_set1_ps(EXP_LO), _CMP_LT_OQ);
	x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(EXP_LO)), _mm256_set1_ps(EXP_HI));
	const __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(LOG2E)),
					  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(LN2_HI), x);
	x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(LN2_LO), x);
	__m256 y = _mm256_set1_ps(P0);
	y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(P1));
	y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(P2));
	y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(P3));
	y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(P4));
	y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(P5));
	y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
	const __m256i e = _mm256_slli_epi32(
		_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
	return _mm256_andnot_ps(zero, _mm256_mul_ps(y, _mm256_castsi256_ps(e)));
}

/* The scores of positions k0.. (m <= 8 of them) as one vector: lane p is
 * q . k_p (lanes >= m are 0). */
static inline __attribute__((always_inline)) V3 __m256 dots8(const float *q, const float *k0,
							   size_t ld, int hd, int m)
{
	__m256 a[8] = { 0 };
	for (int p = 0; p < 8; p++)
		a[p] = _mm256_setzero_ps();
	if (m == 8) {
		for (int i = 0; i < hd; i += 8) {
			const __m256 qi = _mm256_loadu_ps(q + i);
#pragma GCC unroll 8
			for (int p = 0; p < 8; p++)
				a[p] = _mm256_fmadd_ps(qi, _mm256_loadu_ps(k0 + p * ld + i), a[p]);
		}
	} else {
		for (int i = 0; i < hd; i += 8) {
			const __m256 qi = _mm256_loadu_ps(q + i);
			for (int p = 0; p < m; p++)
				a[p] = _mm256_fmadd_ps(qi, _mm256_loadu_ps(k0 + p * ld + i), a[p]);
		}
	}
	const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
	const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
	const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
	/* u0: lanes 0-3 the low halves' sums of positions 0-3, lanes 4-7 their
	 * high halves'; u1 the same for positions 4-7 */
	return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20),
			     _mm256_permute2f128_ps(u0, u1, 0x31));
}

/* out[0 .. 8 nc) (+)= sum_{j0 <= j < j1} sc[j] v_j[0 ..], stored times r:
 * started at 0 when j0 == 0, else from out (a float's store and load are
 * exact, and r is 1 but for the last block, so out is the sum of one pass
 * over j, times r once) */
static inline __attribute__((always_inline)) V3 void pv8(float *out, const float *v, size_t ld,
						       const float *sc, int j0, int j1, int nc,
						       float r)
{
	__m256 a[8] = { 0 };
#pragma GCC unroll 8
	for (int c = 0; c < nc; c++)
		a[c] = j0 == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(out + 8 * c);
	for (int j = j0; j < j1; j++) {
		const __m256 p = _mm256_broadcast_ss(sc + j);
		const float *vj = v + (size_t)j * ld;
#pragma GCC unroll 8
		for (int c = 0; c < nc; c++)
			a[c] = _mm256_fmadd_ps(p, _mm256_loadu_ps(vj + 8 * c), a[c]);
	}
#pragma GCC unroll 8
	for (int c = 0; c < nc; c++)
		_mm256_storeu_ps(out + 8 * c, _mm256_mul_ps(a[c], _mm256_set1_ps(r)));
}

static V3 void attend_v3(float *out, const float *q, int G, const float *k, const float *v,
			 int n, int hd, size_t ld, float scale, float *sc)
{
	const size_t ns = (size_t)n + 8; /* each head's scores */
	const __m256 s8 = _mm256_set1_ps(scale);
	float *mxs = sc + (size_t)G * ns; /* each head's running maximum, 8 lanes */
	float r[G];

	/* scores: a block of 8 keys is read from memory once for the G heads */
	for (int j = 0; j < n; j += 8) {
		const int m = n - j < 8 ? n - j : 8;
		const __m256 live = _mm256_castsi256_ps(_mm256_cmpgt_epi32(
			_mm256_set1_epi32(m), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
		for (int g = 0; g < G; g++) {
			const float *qg = q + (size_t)g * hd, *kj = k + (size_t)j * ld;
			__m256 s = m == 8 ? dots8(qg, kj, ld, hd, 8) : dots8(qg, kj, ld, hd, m);
			/* the tail's missing lanes as -inf: exp gives them 0 */
			s = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), _mm256_mul_ps(s, s8), live);
			_mm256_storeu_ps(sc + g * ns + j, s);
			_mm256_storeu_ps(mxs + 8 * g, j == 0 ? s
					 : _mm256_max_ps(_mm256_loadu_ps(mxs + 8 * g), s));
		}
	}
	for (int g = 0; g < G; g++) {
		float *sg = sc + g * ns;
		const __m256 mx = _mm256_loadu_ps(mxs + 8 * g);
		__m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
		m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
		m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
		const __m256 m8 = _mm256_broadcastss_ps(m4);
		__m256 sum = _mm256_setzero_ps();
		for (int i = 0; i < n; i += 8) {
			const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(sg + i), m8));
			_mm256_storeu_ps(sg + i, e);
			sum = _mm256_add_ps(sum, e);
		}
		__m128 s4 = _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps(sum, 1));
		s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
		s4 = _mm_add_ss(s4, _mm_shuffle_ps(s4, s4, 1));
		r[g] = 1.0f / _mm_cvtss_f32(s4);
	}
	PV_HEADS(pv8, 8);
}
#endif

#if defined(__aarch64__)
static inline __attribute__((always_inline)) float32x4_t exp4(float32x4_t x)
{
	const uint32x4_t zero = vcltq_f32(x, vdupq_n_f32(EXP_LO));
	x = vminq_f32(vmaxq_f32(x, vdupq_n_f32(EXP_LO)), vdupq_n_f32(EXP_HI));
	const float32x4_t fx = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(LOG2E)));
	x = vfmsq_f32(x, fx, vdupq_n_f32(LN2_HI));
	x = vfmsq_f32(x, fx, vdupq_n_f32(LN2_LO));
	float32x4_t y = vdupq_n_f32(P0);
	y = vfmaq_f32(vdupq_n_f32(P1), y, x);
	y = vfmaq_f32(vdupq_n_f32(P2), y, x);
	y = vfmaq_f32(vdupq_n_f32(P3), y, x);
	y = vfmaq_f32(vdupq_n_f32(P4), y, x);
	y = vfmaq_f32(vdupq_n_f32(P5), y, x);
	y = vfmaq_f32(vaddq_f32(x, vdupq_n_f32(1.0f)), y, vmulq_f32(x, x));
	const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(fx), vdupq_n_s32(127)), 23);
	y = vmulq_f32(y, vreinterpretq_f32_s32(e));
	return vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(y), zero));
}

/* lane p: q . k_p for p < m (<= 4), 0 beyond */
static inline __attribute__((always_inline)) float32x4_t dots4(const float *q, const float *k0,
								size_t ld, int hd, int m)
{
	float32x4_t a[4];
	for (int p = 0; p < 4; p++)
		a[p] = vdupq_n_f32(0.0f);
	for (int i = 0; i < hd; i += 4) {
		const float32x4_t qi = vld1q_f32(q + i);
#pragma GCC unroll 4
		for (int p = 0; p < m; p++)
			a[p] = vfmaq_f32(a[p], qi, vld1q_f32(k0 + p * ld + i));
	}
	return vpaddq_f32(vpaddq_f32(a[0], a[1]), vpaddq_f32(a[2], a[3]));
}

/* as pv8: out[0 .. 4 nc) (+)= sum_{j0 <= j < j1} sc[j] v_j[0 ..], times r */
static inline __attribute__((always_inline)) void pv4(float *out, const float *v, size_t ld,
						    const float *sc, int j0, int j1, int nc, float r)
{
	float32x4_t a[16] = { 0 };
#pragma GCC unroll 16
	for (int c = 0; c < nc; c++)
		a[c] = j0 == 0 ? vdupq_n_f32(0.0f) : vld1q_f32(out + 4 * c);
	for (int j = j0; j < j1; j++) {
		const float32x4_t p = vdupq_n_f32(sc[j]);
		const float *vj = v + (size_t)j * ld;
#pragma GCC unroll 16
		for (int c = 0; c < nc; c++)
			a[c] = vfmaq_f32(a[c], p, vld1q_f32(vj + 4 * c));
	}
#pragma GCC unroll 16
	for (int c = 0; c < nc; c++)
		vst1q_f32(out + 4 * c, vmulq_n_f32(a[c], r));
}

static void attend_neon(float *out, const float *q, int G, const float *k, const float *v,
			int n, int hd, size_t ld, float scale, float *sc)
{
	const size_t ns = (size_t)n + 8;
	float *mxs = sc + (size_t)G * ns;
	const int32x4_t lane = { 0, 1, 2, 3 };
	float r[G];

	for (int j = 0; j < n; j += 4) {
		const int m = n - j < 4 ? n - j : 4;
		const uint32x4_t live = vcltq_s32(lane, vdupq_n_s32(m));
		for (int g = 0; g < G; g++) {
			const float *qg = q + (size_t)g * hd, *kj = k + (size_t)j * ld;
			float32x4_t s = m == 4 ? dots4(qg, kj, ld, hd, 4) : dots4(qg, kj, ld, hd, m);
			s = vbslq_f32(live, vmulq_n_f32(s, scale), vdupq_n_f32(-INFINITY));
			vst1q_f32(sc + g * ns + j, s);
			vst1q_f32(mxs + 4 * g, j == 0 ? s : vmaxq_f32(vld1q_f32(mxs + 4 * g), s));
		}
	}
	for (int g = 0; g < G; g++) {
		float *sg = sc + g * ns;
		const float32x4_t m4 = vdupq_n_f32(vmaxvq_f32(vld1q_f32(mxs + 4 * g)));
		float32x4_t sum = vdupq_n_f32(0.0f);
		for (int i = 0; i < n; i += 4) {
			const float32x4_t e = exp4(vsubq_f32(vld1q_f32(sg + i), m4));
			vst1q_f32(sg + i, e);
			sum = vaddq_f32(sum, e);
		}
		r[g] = 1.0f / vaddvq_f32(sum);
	}
	PV_HEADS(pv4, 4);
}
#endif

pcg_attend_fn *pcg_attend_kernel(int hd)
{
	const char *isa = pcg_matmul_isa();

	(void)hd;
	if (!strcmp(isa, "generic"))
		return pcg_attend_generic;
#if defined(__x86_64__)
	if (hd % 8 == 0) /* every x86 family but generic has x86-64-v3 */
		return attend_v3;
#elif defined(__aarch64__)
	if (hd % 4 == 0)
		return attend_neon;
#endif
	return pcg_attend_generic;
}
