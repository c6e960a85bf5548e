/* dtype.c: f16/bf16 <-> f32 conversions used by the loaders and the engine. */
#include "dtype.h"

#include "quant.h"

float pcg_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t exp = (h >> 10) & 0x1fu;
	uint32_t man = h & 0x3ffu;
	uint32_t u;
	float f;

	if (exp == 0x1f) { /* inf or NaN */
		u = sign | 0x7f800000u | (man << 13);
	} else if (exp != 0) { /* normal */
		u = sign | ((exp + 112) << 23) | (man << 13);
	} else if (man == 0) { /* zero */
		u = sign;
	} else { /* subnormal: value = man * 2^-24, exact in f32 */
		f = (float)man * 5.9604644775390625e-08f;
		memcpy(&u, &f, sizeof u);
		u |= sign;
	}
	memcpy(&f, &u, sizeof f);
	return f;
}

/* Round to nearest even; overflow to inf; NaN stays NaN. */
uint16_t pcg_f32_to_f16(float f)
{
	uint32_t u, sign, man;
	int exp;

	memcpy(&u, &f, sizeof u);
	sign = (u >> 16) & 0x8000u;
	exp = (int)((u >> 23) & 0xffu);
	man = u & 0x7fffffu;
	if (exp == 0xff)
		return (uint16_t)(sign | 0x7c00u | (man ? 0x200u : 0));
	exp -= 127 - 15;
	if (exp >= 0x1f)
		return (uint16_t)(sign | 0x7c00u);
	if (exp <= 0) { /* subnormal or zero in f16 */
		uint32_t m, shift, half, r;
		if (exp < -10)
			return (uint16_t)sign;
		m = man | 0x800000u;
		shift = (uint32_t)(14 - exp);
		half = 1u << (shift - 1);
		r = m >> shift;
		if ((m & ((1u << shift) - 1)) > half ||
		    ((m & ((1u << shift) - 1)) == half && (r & 1u)))
			r++;
		return (uint16_t)(sign | r);
	}
	{
		uint32_t r = ((uint32_t)exp << 10) | (man >> 13);
		uint32_t rest = man & 0x1fffu;
		if (rest > 0x1000u || (rest == 0x1000u && (r & 1u)))
			r++; /* may carry into the exponent, up to inf: correct */
		return (uint16_t)(sign | r);
	}
}

size_t pcg_dtype_size(pcg_dtype t)
{
	switch (t) {
	case PCG_F32: return 4;
	case PCG_F16: return 2;
	case PCG_BF16: return 2;
	default: return 0;
	}
}

int pcg_dtype_block(pcg_dtype t)
{
	switch (t) {
	case PCG_F32: case PCG_F16: case PCG_BF16: return 1;
	case PCG_Q8_0: case PCG_Q4_0: return 32;
	case PCG_Q4_K: case PCG_Q5_K: case PCG_Q6_K: return 256;
	default: return 0;
	}
}

size_t pcg_dtype_block_bytes(pcg_dtype t)
{
	switch (t) {
	case PCG_Q8_0: return 34;  /* d (f16), qs[32] */
	case PCG_Q4_0: return 18;  /* d (f16), qs[16] */
	case PCG_Q4_K: return 144; /* d, dmin (f16), scales[12], qs[128] */
	case PCG_Q5_K: return 176; /* d, dmin, scales[12], qh[32], qs[128] */
	case PCG_Q6_K: return 210; /* ql[128], qh[64], scales[16], d (f16) */
	default: return pcg_dtype_size(t);
	}
}

size_t pcg_dtype_row_bytes(pcg_dtype t, int64_t n)
{
	const int b = pcg_dtype_block(t);

	if (b == 0 || n < 0 || n % b != 0)
		return 0;
	return (size_t)(n / b) * pcg_dtype_block_bytes(t);
}

int pcg_dtype_is_quant(pcg_dtype t)
{
	return pcg_dtype_block(t) > 1;
}

const char *pcg_dtype_name(pcg_dtype t)
{
	switch (t) {
	case PCG_F32: return "F32";
	case PCG_F16: return "F16";
	case PCG_BF16: return "BF16";
	case PCG_Q8_0: return "Q8_0";
	case PCG_Q4_0: return "Q4_0";
	case PCG_Q4_K: return "Q4_K";
	case PCG_Q5_K: return "Q5_K";
	case PCG_Q6_K: return "Q6_K";
	default: return "other";
	}
}

/* Bulk f16 <-> f32 with the F16C instructions (x86-64-v3 and later), which
 * convert 8 values at once; the scalar functions above serve the rest. The
 * f16 vectors of the pipeline's messages are 65,537 wide. */
#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>

__attribute__((target("avx,f16c"))) static void f16_to_f32_f16c(float *dst, const uint16_t *s,
								size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
	for (; i < n; i++)
		dst[i] = pcg_f16_to_f32(s[i]);
}

__attribute__((target("avx,f16c"))) static void f32_to_f16_f16c(uint16_t *dst, const float *s,
								size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8) /* round to nearest even, as pcg_f32_to_f16 */
		_mm_storeu_si128((__m128i *)(dst + i),
				 _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
	for (; i < n; i++)
		dst[i] = pcg_f32_to_f16(s[i]);
}

/* CPUID leaf 1: ECX bit 29 F16C, bit 28 AVX, bit 27 OSXSAVE (the OS saves
 * the YMM registers). Read directly: clang's __builtin_cpu_supports does not
 * know "f16c". */
static int have_f16c(void)
{
	static int have = -1;
	if (have < 0) {
		unsigned a, b, c, d;
		have = __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1) && (c >> 28 & 1) &&
		       (c >> 27 & 1);
	}
	return have;
}
#else
static int have_f16c(void) { return 0; }
#define f16_to_f32_f16c(d, s, n) ((void)0)
#define f32_to_f16_f16c(d, s, n) ((void)0)
#endif

void pcg_f32_to_f16_n(uint16_t *dst, const float *src, size_t n)
{
	if (have_f16c()) {
		f32_to_f16_f16c(dst, src, n);
		return;
	}
	for (size_t i = 0; i < n; i++)
		dst[i] = pcg_f32_to_f16(src[i]);
}

void pcg_to_f32(float *dst, const void *src, pcg_dtype t, size_t n)
{
	if (t == PCG_F16 && have_f16c() && ((uintptr_t)src & 1) == 0) {
		f16_to_f32_f16c(dst, src, n);
		return;
	}
	const unsigned char *s = src;
	size_t i;
	uint16_t h;

	switch (t) {
	case PCG_F32:
		memcpy(dst, src, n * sizeof(float));
		break;
	case PCG_BF16:
		for (i = 0; i < n; i++) {
			memcpy(&h, s + 2 * i, 2);
			dst[i] = pcg_bf16_to_f32(h);
		}
		break;
	case PCG_F16:
		for (i = 0; i < n; i++) {
			memcpy(&h, s + 2 * i, 2);
			dst[i] = pcg_f16_to_f32(h);
		}
		break;
	default:
		if (pcg_dtype_is_quant(t))
			pcg_dequantize(dst, src, t, n);
		break;
	}
}
