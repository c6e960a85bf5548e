/* quant.c: ggml's block formats to f32 (the layouts are in quant.h). This is
 * the reference every product kernel is tested against, and gguf-py's
 * gguf.quants dequantises to the same values (tests/quant.sh). */
#include "quant.h"

#include <string.h>

static float f16(uint16_t h)
{
	return pcg_f16_to_f32(h);
}

static void dq_q8_0(float *y, const pcg_block_q8_0 *b)
{
	const float d = f16(b->d);
	for (int i = 0; i < 32; i++)
		y[i] = d * (float)b->qs[i];
}

static void dq_q4_0(float *y, const pcg_block_q4_0 *b)
{
	const float d = f16(b->d);
	for (int i = 0; i < 16; i++) {
		y[i] = d * (float)((b->qs[i] & 15) - 8);
		y[i + 16] = d * (float)((b->qs[i] >> 4) - 8);
	}
}

/* Q4_K and Q5_K: qh NULL for Q4_K. */
static void dq_k45(float *y, uint16_t dh, uint16_t mh, const uint8_t *scales,
		   const uint8_t *qh, const uint8_t *qs)
{
	const float d = f16(dh), dmin = f16(mh);
	for (int j = 0; j < 4; j++) {
		uint8_t sc, m;
		pcg_get_scale_min(2 * j, scales, &sc, &m);
		const float d1 = d * sc, m1 = dmin * m;
		pcg_get_scale_min(2 * j + 1, scales, &sc, &m);
		const float d2 = d * sc, m2 = dmin * m;
		for (int l = 0; l < 32; l++) {
			int lo = qs[32 * j + l] & 15, hi = qs[32 * j + l] >> 4;
			if (qh) {
				lo |= (qh[l] >> (2 * j) & 1) << 4;
				hi |= (qh[l] >> (2 * j + 1) & 1) << 4;
			}
			y[64 * j + l] = d1 * (float)lo - m1;
			y[64 * j + 32 + l] = d2 * (float)hi - m2;
		}
	}
}

static void dq_q6_k(float *y, const pcg_block_q6_k *b)
{
	const float d = f16(b->d);
	for (int h = 0; h < 2; h++) {
		const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
		const int8_t *sc = b->scales + 8 * h;
		float *o = y + 128 * h;
		for (int l = 0; l < 32; l++) {
			const int is = l / 16;
			int q1 = ((ql[l] & 15) | ((qh[l] >> 0 & 3) << 4)) - 32;
			int q2 = ((ql[l + 32] & 15) | ((qh[l] >> 2 & 3) << 4)) - 32;
			int q3 = ((ql[l] >> 4) | ((qh[l] >> 4 & 3) << 4)) - 32;
			int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6 & 3) << 4)) - 32;
			o[l] = d * (float)sc[is] * (float)q1;
			o[l + 32] = d * (float)sc[is + 2] * (float)q2;
			o[l + 64] = d * (float)sc[is + 4] * (float)q3;
			o[l + 96] = d * (float)sc[is + 6] * (float)q4;
		}
	}
}

void pcg_dequantize(float *dst, const void *src, pcg_dtype t, size_t n)
{
	const unsigned char *s = src;
	const size_t bs = pcg_dtype_block_bytes(t);
	const int qk = pcg_dtype_block(t);

	if (qk <= 1)
		return;
	/* Blocks are copied out: a GGUF tensor is 32-byte aligned, but a block's
	 * size (34, 18, 210) leaves the next one at any alignment. */
	for (size_t i = 0; i < n / (size_t)qk; i++, s += bs) {
		float *y = dst + i * (size_t)qk;
		switch (t) {
		case PCG_Q8_0: {
			pcg_block_q8_0 b;
			memcpy(&b, s, sizeof b);
			dq_q8_0(y, &b);
			break;
		}
		case PCG_Q4_0: {
			pcg_block_q4_0 b;
			memcpy(&b, s, sizeof b);
			dq_q4_0(y, &b);
			break;
		}
		case PCG_Q4_K: {
			pcg_block_q4_k b;
			memcpy(&b, s, sizeof b);
			dq_k45(y, b.d, b.dmin, b.scales, NULL, b.qs);
			break;
		}
		case PCG_Q5_K: {
			pcg_block_q5_k b;
			memcpy(&b, s, sizeof b);
			dq_k45(y, b.d, b.dmin, b.scales, b.qh, b.qs);
			break;
		}
		case PCG_Q6_K: {
			pcg_block_q6_k b;
			memcpy(&b, s, sizeof b);
			dq_q6_k(y, &b);
			break;
		}
		default:
			return;
		}
	}
}
