/* xc2enc_act.h: one channel of the X-codec2 acoustic encoder's
 * anti-aliased SnakeBeta (see xc2enc_act.c). */
#ifndef PCG_XC2ENC_ACT_H
#define PCG_XC2ENC_ACT_H

/* Scratch floats xc2e_act_row needs for a row of L samples. */
#define XC2E_ACT_SCRATCH(L) (5 * (size_t)(L) + 22)

/* x[0..L) in place: upsample x2 with f (12 taps), v = u + ib sin^2(a u),
 * downsample x2 with g (12 taps); w: XC2E_ACT_SCRATCH(L) floats. */
void xc2e_act_row(float *x, int L, float a, float ib, const float *f, const float *g, float *w);

#endif
