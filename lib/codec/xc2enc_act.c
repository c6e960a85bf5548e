/* xc2enc_act.c: alias_free_torch's Activation1d(SnakeBeta) for one channel,
 * the hot loop of X-codec2's acoustic encoder (xc2enc.c). Built with
 * -ffast-math (Makefile) so that sinf vectorises through glibc's libmvec:
 * no infinity or NaN arises here (finite samples, a finite filter).
 *
 * The x2 upsampling (replicate padding 5, transposed convolution with the
 * 12-tap filter f, times 2, cropped 15 a side) is split by phase: with xp
 * the padded row,
 *   u(2m)     = 2 sum_{s<6} f[2s + 1] xp[m + 7 - s]
 *   u(2m + 1) = 2 sum_{s<6} f[2s]     xp[m + 8 - s]
 * SnakeBeta v = u + ib sin^2(a u) runs on each phase, and the x2
 * downsampling (replicate padding 5 left, 6 right, the filter g at stride 2)
 * reads the padded sequence P (P[p] = v(p - 5)) by phase too: with
 * E[k] = P[2k] = v(2k - 5) and D[k] = P[2k + 1] = v(2k - 4),
 *   out[o] = sum_{j<6} g[2j] E[o + j] + g[2j + 1] D[o + j].
 * Every loop is contiguous; the function is cloned per vector width. */
#include <math.h>
#include <stddef.h>

#include "xc2enc_act.h"

/* One copy per vector width: libmvec's sinf of 16, 8 or 4 lanes. */
__attribute__((target_clones("avx512f", "avx2", "default")))
void xc2e_act_row(float *x, int L, float a, float ib, const float *f, const float *g,
		  float *w)
{
	float *xp = w, *ve = xp + L + 10, *vo = ve + L, *E = vo + L, *D = E + L + 6;

	for (int i = 0; i < L + 10; i++)
		xp[i] = x[i < 5 ? 0 : i - 5 >= L ? L - 1 : i - 5];
	#pragma omp simd
	for (int m = 0; m < L; m++) {
		float e = 0.0f, o = 0.0f;
		for (int s = 0; s < 6; s++) {
			e += f[2 * s + 1] * xp[m + 7 - s];
			o += f[2 * s] * xp[m + 8 - s];
		}
		e *= 2.0f;
		o *= 2.0f;
		const float se = sinf(a * e), so = sinf(a * o);
		ve[m] = e + ib * (se * se);
		vo[m] = o + ib * (so * so);
	}
	/* E[k] = v(2k - 5): odd positions, m = k - 3; D[k] = v(2k - 4): even,
	 * m = k - 2; beyond either end the replicated end values */
	for (int k = 0; k < L + 6; k++) {
		const int me = k - 3, md = k - 2;
		E[k] = me < 0 ? ve[0] : me >= L ? vo[L - 1] : vo[me];
		D[k] = md < 0 ? ve[0] : md >= L ? vo[L - 1] : ve[md];
	}
	#pragma omp simd
	for (int o = 0; o < L; o++) {
		float s = 0.0f;
		for (int j = 0; j < 6; j++)
			s += g[2 * j] * E[o + j] + g[2 * j + 1] * D[o + j];
		x[o] = s;
	}
}
