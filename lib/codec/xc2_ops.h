/* xc2_ops.h: the layers the X-codec2 decoder (xcodec2.c) and encoder
 * (xc2enc.c) both run on the CPU, on time-major activations [T][C]. */
#ifndef PCG_XC2_OPS_H
#define PCG_XC2_OPS_H

#include <math.h>

#include "matmul.h"

/* nn.Linear: y [T][W->rows] = x [T][W->cols] W^T + b (b may be NULL). */
void xc2_linear(float *y, const float *x, int T, const pcg_mat *W, const float *b);

/* nn.Conv1d(C, W->rows, k, padding=(k-1)/2) over time, W [rows][C * k] as
 * PyTorch stores [rows][C][k]; col: work space of T * C * k floats. */
void xc2_conv1d(float *y, const float *x, int T, int C, int k, const pcg_mat *W,
		const float *b, float *col);

/* nn.LayerNorm(C, eps) of each row (statistics in double, biased
 * variance); y may be x. */
void xc2_layer_norm(float *y, const float *x, int T, int C, const float *w, const float *b,
		    float eps);

/* x * sigmoid(x): swish, nn.SiLU. */
static inline float xc2_silu(float x) { return x / (1.0f + expf(-x)); }

#endif
