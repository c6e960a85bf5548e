/* qmatmul.h: small batches of f32 activations times block-quantised weights
 * (lib/core/quant.h), the decode and verification-block products of a GGUF model;
 * lib/engine/matmul.c calls it for those dtypes. The activations are quantised to
 * int8 per block of 256 (ggml's Q8_K form), the products are exact integer
 * sums scaled in f32 (qmatmul.c gives the formula). */
#ifndef PCG_QMATMUL_H
#define PCG_QMATMUL_H

#include <stdint.h>

#include "matmul.h"

/* Activations in int8: B rows of K, blocks of 256 (the last may be shorter). */
typedef struct pcg_qx {
	int B, K, nb; /* nb = blocks per row */
	int8_t *q;    /* [B][K] */
	float *d;     /* [B][nb] scales: x ~ d * q */
	float *s;     /* [B][nb][16] sums of q per 16 */
} pcg_qx;

int pcg_qx_alloc(pcg_qx *q, int B, int K);
void pcg_qx_free(pcg_qx *q);
/* x [B][K] to q (allocated for at least B, K). */
void pcg_qx_quantize(pcg_qx *q, const float *x, int B, int K);

/* The reference: y[b * ldy + r] = the formula of qmatmul.c for rows
 * [r0, r0 + nr) of W, in plain C (exact integer sums, f32 scaling). */
void pcg_qdot_ref(float *y, int ldy, const pcg_qx *q, const pcg_mat *W, int r0, int nr);

/* y[b * ldy + r] = sum_k x[b * K + k] * W[r0 + r][k] for a block-quantised
 * W, B <= PCG_MATMUL_SMALL, through the fastest path the CPU has. Returns
 * -1 when out of memory (nothing written). */
int pcg_qmatmul(float *y, int ldy, const float *x, int B, const pcg_mat *W, int r0, int nr);

/* The path taken: on x86-64 "avx512-vnni", "avx-vnni" or "avx2", on AArch64
 * "neon-i8mm", "neon-dotprod" or "neon", or "generic" (the best the CPU has
 * unless chosen); the environment variable
 * PCG_QPATH chooses one the CPU has. set_path returns -1 for a name the
 * CPU cannot run. */
const char *pcg_qmatmul_path(void);
int pcg_qmatmul_set_path(const char *name);

#endif
