/* bench/matmul.c: the weight-times-activation kernels against OpenBLAS sgemm
 * on LLaSA-1B's largest per-layer shapes, for 1, 4 and 64 activation rows.
 * Prints GB/s of weights streamed and the cost of B rows relative to 1 row.
 * The product cycles over COPIES copies of the matrix (384 MB in bf16), more
 * than the last-level cache, so that the weights come from memory as they
 * do in a real model.
 * The block-quantised formats (GGUF's Q8_0, Q4_0, Q4_K, Q5_K, Q6_K) go through
 * lib/engine/qmatmul.c, repacked in groups of rows (qpack.h) where the path
 * reads packs, as a model's load does (PCG_QPACK=0: the row-wise kernels);
 * their rows say which.
 * --cached takes a matrix of 512 rows instead, one copy, read 48 times a
 * pass: it stays in the cache, so the times are the kernels' arithmetic
 * alone (what a block of positions adds to a step shows there first).
 * Usage: bench-matmul [--threads N] [--reps N] [--format NAME] [--cached]
 * (--format: that format alone, by its name in the table: BF16, Q4_0, ...)
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "clock.h"
#include "dtype.h"
#include "matmul.h"
#include "qmatmul.h"
#include "qpack.h"
#include "quant.h"

#define COPIES 12

/* Best of reps of one pass over all copies, per copy: the machine is
 * shared, the minimum is the least disturbed. */
static double time_matmul(float *y, const float *x, int B, const pcg_mat *W, int copies,
			  int passes, int reps)
{
	double best = 1e30;
	for (int r = 0; r < reps; r++) {
		double t = pcg_now();
		for (int c = 0; c < passes; c++) {
			const pcg_mat *w = &W[c % copies];
			pcg_matmul(y, w->rows, x, B, w, 0, w->rows);
		}
		t = (pcg_now() - t) / passes;
		if (t < best)
			best = t;
	}
	return best;
}

int main(int argc, char **argv)
{
	int threads = 2, reps = 10, copies = COPIES, passes = COPIES, N = 8192;
	const char *only = NULL;
	const int K = 2048; /* gate/up projection of LLaSA-1B (8192 rows) */
	const pcg_dtype dts[] = { PCG_BF16, PCG_F16, PCG_F32, PCG_Q8_0,
				  PCG_Q4_0, PCG_Q4_K, PCG_Q5_K, PCG_Q6_K };

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--threads") && i + 1 < argc)
			threads = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
			reps = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--format") && i + 1 < argc)
			only = argv[++i];
		else if (!strcmp(argv[i], "--cached"))
			N = 512, copies = 1, passes = 48;
		else {
			fprintf(stderr, "usage: bench-matmul [--threads N] [--reps N] [--format NAME] "
				"[--cached]\n");
			return 2;
		}
	}
	int named = only == NULL;
	for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
		named |= only != NULL && !strcasecmp(only, pcg_dtype_name(dts[d]));
	if (!named) {
		fprintf(stderr, "bench-matmul: no format is named %s "
			"(try BF16, F16, F32, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K)\n", only);
		return 2;
	}
	pcg_set_threads(threads);
	printf("matmul: W [%d x %d]%s, threads %d, kernel isa %s, quantised path %s, best of %d\n",
	       N, K, copies == 1 ? " in the cache" : "", threads, pcg_matmul_isa(),
	       pcg_qmatmul_path(), reps);

	float *x = malloc((size_t)64 * K * sizeof *x);
	float *y = malloc((size_t)64 * N * sizeof *y);
	float *wf = malloc((size_t)copies * N * K * sizeof *wf);
	uint16_t *wh = malloc((size_t)copies * N * K * sizeof *wh);
	if (!x || !y || !wf || !wh)
		return 1;
	srand(1);
	for (size_t i = 0; i < (size_t)64 * K; i++)
		x[i] = (float)rand() / RAND_MAX - 0.5f;
	for (size_t i = 0; i < (size_t)copies * N * K; i++)
		wf[i] = ((float)rand() / RAND_MAX - 0.5f) * 0.1f;

	for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
		if (only != NULL && strcasecmp(only, pcg_dtype_name(dts[d])))
			continue;
		pcg_mat W[COPIES];
		const size_t mb = pcg_dtype_row_bytes(dts[d], K) * N;
		if (pcg_dtype_is_quant(dts[d])) {
			/* Random blocks with small f16 scales at every scale field: the
			 * values do not change the time. */
			unsigned char *q = (unsigned char *)wh;
			const size_t bs = pcg_dtype_block_bytes(dts[d]);
			for (size_t i = 0; i < (size_t)copies * mb; i++)
				q[i] = (unsigned char)rand();
			for (size_t i = 0; i < (size_t)copies * mb; i += bs) {
				uint16_t h = pcg_f32_to_f16(0.01f);
				memcpy(q + i + (dts[d] == PCG_Q6_K ? 208 : 0), &h, 2);
				if (dts[d] == PCG_Q4_K || dts[d] == PCG_Q5_K)
					memcpy(q + i + 2, &h, 2);
			}
		} else {
			for (size_t i = 0; i < (size_t)copies * N * K; i++)
				wh[i] = dts[d] == PCG_BF16 ? pcg_f32_to_bf16(wf[i]) : pcg_f32_to_f16(wf[i]);
		}
		for (int c = 0; c < copies; c++) {
			W[c] = (pcg_mat){ .data = wf + (size_t)c * N * K, .dtype = dts[d], .rows = N, .cols = K };
			if (dts[d] != PCG_F32)
				W[c].data = (unsigned char *)wh + (size_t)c * mb;
		}
		void *packs[COPIES] = { NULL };
		for (int c = 0; c < copies && pcg_dtype_is_quant(dts[d]) && pcg_qpack_ok(&W[c]);
		     c++) {
			packs[c] = aligned_alloc(64, (pcg_qpack_bytes(&W[c]) + 63) / 64 * 64);
			if (packs[c] == NULL)
				return 1;
			pcg_qpack(packs[c], &W[c]);
			W[c].packed = packs[c];
		}
		double bytes = (double)mb;
		double t1 = time_matmul(y, x, 1, W, copies, passes, reps);
		double t4 = time_matmul(y, x, 4, W, copies, passes, reps);
		double t8 = time_matmul(y, x, 8, W, copies, passes, reps);
		double t64 = time_matmul(y, x, 64, W, copies, passes, reps / 4 + 1);
		printf("%-5s%s B=1 %7.3f ms %6.1f GB/s | B=4 %7.3f ms (%.2fx B=1) | B=8 %7.3f ms (%.2fx) | B=64 %7.2f ms %6.1f GFLOP/s\n",
		       pcg_dtype_name(dts[d]), packs[0] ? " packed" : "       ", t1 * 1e3,
		       bytes / t1 / 1e9, t4 * 1e3, t4 / t1, t8 * 1e3, t8 / t1, t64 * 1e3,
		       2.0 * 64 * N * K / t64 / 1e9);
		for (int c = 0; c < copies; c++)
			free(packs[c]);
	}
	/* The same f32 product through sgemm, one row: what BLAS gives for decode. */
	if (only == NULL) {
		double best = 1e30;
		for (int r = 0; r < reps; r++) {
			double t = pcg_now();
			cblas_sgemv(CblasRowMajor, CblasNoTrans, N, K, 1.0f, wf, K, x, 1, 0.0f, y, 1);
			t = pcg_now() - t;
			best = t < best ? t : best;
		}
		printf("openblas sgemv f32 B=1 %7.3f ms %6.1f GB/s\n", best * 1e3,
		       (double)N * K * 4 / best / 1e9);
	}
	free(x); free(y); free(wf); free(wh);
	return 0;
}
