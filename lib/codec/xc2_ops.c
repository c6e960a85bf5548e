/* xc2_ops.c: see xc2_ops.h. */
#include "xc2_ops.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>

/* nn.Linear: y[t] = W x[t] + b for the T rows of x; y is [T, W->rows].
 * f32 weights (the checkpoint's) and many rows: each thread one
 * single-threaded sgemm of all of x against its share of the rows of W, so
 * every weight is packed once and x once per thread, where pcg_matmul's
 * tiles of 128 weight rows (made for a few rows of x and for bf16 weights)
 * pack all of x once per tile (c_attn at 30 s: 37 M floats of packing
 * against 6 M). Other dtypes and few rows go to pcg_matmul. */
void xc2_linear(float *y, const float *x, int T, const pcg_mat *W, const float *b)
{
	const int R = W->rows, K = W->cols;

	if (W->dtype == PCG_F32 && T >= 64) {
#pragma omp parallel
		{
			const int nt = omp_get_num_threads(), id = omp_get_thread_num();
			const int r0 = R * id / nt / 16 * 16;
			const int r1 = id == nt - 1 ? R : R * (id + 1) / nt / 16 * 16;
			if (r1 > r0)
				cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, r1 - r0, K, 1.0f,
					    x, K, (const float *)W->data + (size_t)r0 * K, K, 0.0f, y + r0,
					    R);
		}
	} else {
		pcg_matmul(y, R, x, T, W, 0, R);
	}
	if (b == NULL)
		return;
#pragma omp parallel for schedule(static) if ((size_t)T * R > 65536)
	for (int t = 0; t < T; t++)
		for (int r = 0; r < R; r++)
			y[(size_t)t * R + r] += b[r];
}

/* nn.Conv1d(C, C, k, padding=(k-1)/2) over time: col[t][i * k + j] =
 * x[t + j - pad][i] (zero outside), then y = col W^T + b with W [C, C * k]. */
void xc2_conv1d(float *y, const float *x, int T, int C, int k, const pcg_mat *W,
		   const float *b, float *col)
{
	const int pad = (k - 1) / 2;

#pragma omp parallel for schedule(static) if ((size_t)T * C > 65536)
	for (int t = 0; t < T; t++) {
		float *row = col + (size_t)t * C * k;
		for (int j = 0; j < k; j++) {
			const int s = t + j - pad;
			if (s < 0 || s >= T) {
				for (int i = 0; i < C; i++)
					row[(size_t)i * k + j] = 0.0f;
				continue;
			}
			const float *xs = x + (size_t)s * C;
			for (int i = 0; i < C; i++)
				row[(size_t)i * k + j] = xs[i];
		}
	}
	xc2_linear(y, col, T, W, b);
}

void xc2_layer_norm(float *y, const float *x, int T, int C, const float *w, const float *b,
		    float eps)
{
#pragma omp parallel for schedule(static) if ((size_t)T * C > 65536)
	for (int t = 0; t < T; t++) {
		const float *xt = x + (size_t)t * C;
		float *yt = y + (size_t)t * C;
		double s = 0, q = 0;
		for (int i = 0; i < C; i++)
			s += xt[i];
		const double mu = s / C;
		for (int i = 0; i < C; i++)
			q += (xt[i] - mu) * (xt[i] - mu);
		const float mean = (float)mu, rstd = (float)(1.0 / sqrt(q / C + eps));
		for (int i = 0; i < C; i++)
			yt[i] = (xt[i] - mean) * rstd * w[i] + b[i];
	}
}
