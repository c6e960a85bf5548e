/* attention.h: one query head's attention over the KV cache, the inner loop
 * of the CPU backend's causal attention (backend.c), in the float kernels'
 * families (matmul.h: pcg_matmul_isa): scores q.k / sqrt(hd), a softmax in
 * f32, the sum of p * v.
 *
 * The SIMD kernels take 8 (x86-64-v3, also for the AVX-512 families) or 4
 * (NEON) cache positions a step, reduce their dot products to one vector
 * of scores without a horizontal sum per position, and take exp of a
 * vector at a time (a Cephes polynomial, within 2 ulp of expf over the
 * softmax's range, exactly 0 below -87); the portable one is the plain
 * loop, the tests' reference. Each query's result depends on its own
 * positions alone, never on how many queries a call has, so a block of
 * positions gets, bit for bit, what single steps get on the same family.
 * Against the portable loop the output differs by float sums' order: at
 * most about 1e-6 of max |v| for the model sizes here (test_attention).
 */
#ifndef PCG_ATTENTION_H
#define PCG_ATTENTION_H

#include <stddef.h>

/* For the G query heads g < G that share one kv head (repeat_kv),
 * out + g hd = sum_j softmax_j(q_g . k_j * scale) v_j for j < n, where q_g =
 * q + g hd, k_j = k + j ld and v_j = v + j ld (the cache's rows, ld floats
 * apart): each key and value is read from memory once for the G heads. sc
 * is scratch of at least G (n + 16) floats. */
typedef void pcg_attend_fn(float *out, const float *q, int G, const float *k, const float *v,
			   int n, int hd, size_t ld, float scale, float *sc);

/* The kernel of the float family in use (pcg_matmul_isa) for head size hd:
 * the portable loop where the family has none or hd does not fit it. */
pcg_attend_fn *pcg_attend_kernel(int hd);

/* The portable loop, whatever the family (the tests' reference). */
void pcg_attend_generic(float *out, const float *q, int G, const float *k, const float *v,
			int n, int hd, size_t ld, float scale, float *sc);

#endif
