/* bench/isa.c: how many 512-bit vpdpbusd, vdpbf16ps and vfmadd231ps one core
 * issues per nanosecond (16 independent accumulators, registers only), and so
 * the floor under a block of positions: each position of a product costs
 * (rows * cols) / 64 vpdpbusd (int8 weights) or / 32 vdpbf16ps (bf16), shared
 * by no other position, whatever the layout.
 *
 * Usage: bench-isa [--seconds S]   (one thread; run it on a quiet core)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"

#if defined(__x86_64__)
#include <immintrin.h>

#pragma GCC diagnostic ignored "-Wpsabi"

#define N_ACC 16
#define ITERS 1000000

/* Instructions per ns of OP over N_ACC independent accumulators of type T,
 * started at INIT(i) and summed by SUM at the end (so none is dead). */
#define RATE(NAME, TARGET, T, INIT, OP, SUM) \
	__attribute__((target(TARGET), noinline)) static double NAME(void) \
	{ \
		T acc[N_ACC]; \
		for (int i = 0; i < N_ACC; i++) \
			acc[i] = INIT(i); \
		double t = pcg_now(); \
		for (int it = 0; it < ITERS; it++) { \
			_Pragma("GCC unroll 16") \
			for (int i = 0; i < N_ACC; i++) \
				acc[i] = OP(acc[i]); \
			__asm__ volatile("" : "+v"(acc[0]), "+v"(acc[1]), "+v"(acc[2]), "+v"(acc[3])); \
		} \
		t = pcg_now() - t; \
		double sink = 0; \
		for (int i = 0; i < N_ACC; i++) \
			sink += SUM(acc[i]); \
		if (sink == 42.0) \
			puts(""); \
		return (double)ITERS * N_ACC / t / 1e9; \
	}

#define I_INIT(i) _mm512_set1_epi32(i)
#define F_INIT(i) _mm512_set1_ps((float)(i))
#define VNNI(a) _mm512_dpbusd_epi32(a, _mm512_set1_epi8(3), _mm512_set1_epi8(-2))
#define BF16(a) _mm512_dpbf16_ps(a, (__m512bh)_mm512_set1_epi16(0x3f80), \
				 (__m512bh)_mm512_set1_epi16(0x3f00))
#define FMA(a) _mm512_fmadd_ps(a, _mm512_set1_ps(1.0000001f), _mm512_set1_ps(1e-9f))
RATE(rate_vnni, "avx512f,avx512bw,avx512vnni", __m512i, I_INIT, VNNI, _mm512_reduce_add_epi32)
RATE(rate_bf16, "avx512f,avx512bf16", __m512, F_INIT, BF16, _mm512_reduce_add_ps)
RATE(rate_fma, "avx512f", __m512, F_INIT, FMA, _mm512_reduce_add_ps)
#endif

int main(int argc, char **argv)
{
	if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		puts("usage: bench-isa\n  one core's issue rate of 512-bit vpdpbusd, vdpbf16ps and FMA");
		return 0;
	}
	if (argc > 1) {
		fprintf(stderr, "usage: bench-isa\n");
		return 2;
	}
#if defined(__x86_64__)
	__builtin_cpu_init();
	if (!__builtin_cpu_supports("avx512f")) {
		puts("bench-isa: no AVX-512 on this CPU");
		return 0;
	}
	double best[3] = { 0, 0, 0 };
	for (int r = 0; r < 3; r++) {
		double v = __builtin_cpu_supports("avx512vnni") ? rate_vnni() : 0;
		double b = __builtin_cpu_supports("avx512bf16") ? rate_bf16() : 0;
		double f = rate_fma();
		best[0] = v > best[0] ? v : best[0];
		best[1] = b > best[1] ? b : best[1];
		best[2] = f > best[2] ? f : best[2];
	}
	printf("512-bit instructions per ns, one core (best of 3): vpdpbusd %.2f, vdpbf16ps %.2f, "
	       "vfmadd231ps %.2f\n", best[0], best[1], best[2]);
	if (best[0] > 0)
		printf("LLaSA-1B's step (1.107e9 weights at the speech range): %.2f ms of vpdpbusd per "
		       "position on one core, %.2f on two\n", 1.107e9 / 64 / best[0] / 1e6,
		       1.107e9 / 64 / best[0] / 2e6);
	if (best[1] > 0)
		printf("                                                     %.2f ms of vdpbf16ps per "
		       "position on one core, %.2f on two\n", 1.107e9 / 32 / best[1] / 1e6,
		       1.107e9 / 32 / best[1] / 2e6);
#else
	puts("bench-isa: x86-64 only");
#endif
	return 0;
}
