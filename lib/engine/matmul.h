/* matmul.h: products of f32 activations with weight matrices kept in their
 * checkpoint dtype (f32, f16, bf16), the one hot spot of the CPU engine.
 *
 * A few rows of activations (decode: 1; a verification block: L+1 <= 8) go
 * through our own kernels, which stream each weight row from memory once for
 * all rows of x (so a block of 4 rows reads the weights once: 1.16x one row
 * for LLaSA-1B's shape in bf16 on 2 Zen 4 cores, docs/BENCHMARKS.md; the
 * rest is the extra positions' multiply-adds). More rows (prefill) go through OpenBLAS sgemm, on tiles of
 * the weights widened to f32 when they are f16/bf16, so a bf16 checkpoint is
 * never copied whole. Block-quantised weights (GGUF's Q8_0, Q4_0, K-quants)
 * go through lib/engine/qmatmul.c's int8 kernels for any number of rows, in blocks
 * of PCG_MATMUL_SMALL, or all at once on rows repacked at load
 * (lib/engine/qpack.h, W->packed). pcg_matmul_rows keeps any number of rows on the
 * small kernels (the rows of a batch of sequences, each as alone).
 *
 * bf16 weights on a CPU with AVX512_BF16 go by default through vdpbf16ps
 * ("avx512-bf16"), which multiplies the weights as stored by the activations
 * rounded to bf16 (to nearest even, as torch's .to(torch.bfloat16)), the way
 * transformers' bf16 inference does, at half the instructions of widening
 * the weights to f32. Parity bound against the f32 path: rounding to bf16
 * (8 significant bits) moves each activation by at most 2^-8 of itself, a
 * product of two bf16 values is exact in f32 and the sums are f32, so
 *   |y - y_exact| <= 2^-8 sum_k |w_k x_k| + (K/16 + 6) 2^-24 sum_k |w_k x_k|
 * (the second term the f32 sums'; vdpbf16ps also reads subnormal inputs as
 * zero and flushes subnormal results, at most 2^-126 each). transformers'
 * bf16 inference rounds x the same way and then rounds each product's
 * output, and every norm and residual, to bf16 as well, so this path is at
 * least as close to the f32 computation as transformers' own bf16 run
 * (test_llama_parity). The f32 path ("avx512") stays selectable, and the
 * parity tests against transformers' float32 logits use it. A prefill on
 * this path runs through the same kernels (not sgemm), so its positions are
 * what blocks and single steps give, bit for bit, and it is faster: 127
 * positions/s against 66 through sgemm on widened tiles at LLaSA-1B's shape.
 */
#ifndef PCG_MATMUL_H
#define PCG_MATMUL_H

#include "dtype.h"

/* A row-major weight matrix [rows, cols] as stored in the checkpoint.
 * data may be unaligned for f16/bf16; f32 data must be 4-byte aligned. */
typedef struct pcg_mat {
	const void *data;
	pcg_dtype dtype;
	int rows, cols;
	const void *packed; /* block-quantised: the rows repacked (qpack.h), or NULL */
} pcg_mat;

/* Rows of x at or below this count use the streaming kernels. */
#define PCG_MATMUL_SMALL 8

/* y[b * ldy + r] = sum_k x[b * K + k] * W[r0 + r][k]   for b < B, r < nr,
 * K = W->cols. y must not alias x. Multi-threaded (see pcg_set_threads). */
void pcg_matmul(float *y, int ldy, const float *x, int B, const pcg_mat *W, int r0, int nr);

/* pcg_matmul where each row of x gets, bit for bit, what it gets in a
 * product of at most PCG_MATMUL_SMALL rows, for any B (a batch of several
 * sequences' rows): more rows than that go through the streaming kernels
 * (f32, f16, bf16: each tile of weight rows applied to all rows of x while
 * it is in cache, so the weights are read once) or the quantised ones in
 * blocks of PCG_MATMUL_SMALL, never through sgemm. */
void pcg_matmul_rows(float *y, int ldy, const float *x, int B, const pcg_mat *W, int r0,
		     int nr);

/* Sets the threads used by the kernels and by OpenBLAS; n <= 0: all cores. */
void pcg_set_threads(int n);
int pcg_get_threads(void);

/* Which kernel family runs: on x86-64 "avx512-bf16" (x86-64-v4 and
 * AVX512_BF16: bf16 weights by vdpbf16ps, the rest as "avx512"), "avx512"
 * (x86-64-v4, f32 arithmetic for every dtype) or "avx2" (x86-64-v3: AVX2,
 * FMA, F16C), on AArch64 "neon" (f32 arithmetic), or "generic"; the
 * environment variable PCG_MATMUL_ISA if it names one the CPU has, else the
 * best the CPU has, unless set. */
const char *pcg_matmul_isa(void);
/* Chooses the kernel family (tests run each one). Returns -1 if the CPU
 * lacks it or the name is unknown. */
int pcg_matmul_set_isa(const char *name);

/* OpenBLAS's kernels (its sgemm serves prefill on widened tiles and the
 * codec): where OpenBLAS does not know the CPU's model (a virtual machine's
 * CPUID often says only "Intel Xeon Processor") it falls back to its oldest
 * kernels, SSE3's "Prescott", at a half to a third of the speed of the
 * AVX2 or AVX-512 ones, and only the environment variable OPENBLAS_CORETYPE,
 * read when the library loads, changes that. A program that links matmul.c
 * sets it itself, where it is unset and OpenBLAS has no AVX2 kernels on a
 * CPU with AVX2 and FMA ("SkylakeX" with AVX-512 F, BW, VL, DQ, else
 * "Haswell"), and starts again before main (PCG_BLAS_CORE=0: it does not).
 * pcg_blas_warn says on standard error, prefixed with prog, when OpenBLAS
 * still runs such older kernels: PCG_BLAS_CORE=0, or a build of OpenBLAS
 * that ignores the setting. */
void pcg_blas_warn(const char *prog);

#endif
