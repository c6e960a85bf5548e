/* quantize.c: f32 to ggml's block formats (pcg-quantize), the algorithms of
 * ggml's reference quantisers (ggml-quants.c, quantize_row_*_ref, without an
 * importance matrix), and llama.cpp's choice of a type per tensor.
 *
 * The arithmetic is written in the order ggml's source writes it, one
 * rounding per float operation (gcc in C11 mode fuses no a * b + c, nor
 * does any compiler for x86-64 without -mfma): the bytes equal ggml's
 * reference functions built the same way, and for Q8_0 and Q4_0 gguf-py's
 * gguf.quants. A ggml built with -march=native fuses, and then differs in
 * one quant or scale of a few K-quant blocks in a hundred. */
#include "quant.h"

#include <math.h>
#include <string.h>
#include <strings.h>

/* A scale below this is a block of zeros (ggml's GROUP_MAX_EPS). */
#define GROUP_EPS 1e-15f

/* Round to nearest, ties to even, as ggml's nearest_int: adding 1.5 * 2^23
 * leaves the integer in the low mantissa bits. The trick holds for
 * |f| < 2^22; ggml asserts that, here larger values saturate (every caller
 * clamps the result to a few bits anyway). */
static int nearest_int(float f)
{
	if (!(f > -4194303.f)) /* NaN too: a garbage input gives a valid code */
		f = -4194303.f;
	else if (f > 4194303.f)
		f = 4194303.f;
	float v = f + 12582912.f;
	int32_t i;
	memcpy(&i, &v, sizeof i);
	return (i & 0x007fffff) - 0x00400000;
}

static int clampi(int v, int lo, int hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

/* --- Q8_0 and Q4_0: one f16 scale per 32 ----------------------------------- */

/* d = amax / 127, q = roundf(x / d) (ties away from zero). */
static void q8_0_block(pcg_block_q8_0 *b, const float *x)
{
	float amax = 0;
	for (int i = 0; i < 32; i++)
		amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
	const float d = amax / 127;
	const float id = d != 0 ? 1.0f / d : 0.0f;

	b->d = pcg_f32_to_f16(d);
	for (int i = 0; i < 32; i++) {
		/* Only when amax is below 127 / FLT_MAX does 1/d overflow (and the
		 * f16 scale is 0 then): the quants are 0, as gguf-py's casts give. */
		const float q = roundf(x[i] * id);
		b->qs[i] = (int8_t)(isfinite(q) ? q : 0);
	}
}

/* d = -max / 8 with max the value of largest magnitude (the first one of a
 * tie), so that it maps to 0; q = trunc(x / d + 8.5) clamped to 15. */
static void q4_0_block(pcg_block_q4_0 *b, const float *x)
{
	float amax = 0, max = 0;
	for (int i = 0; i < 32; i++) {
		if (amax < fabsf(x[i])) {
			amax = fabsf(x[i]);
			max = x[i];
		}
	}
	const float d = max / -8; /* -0 for a block of zeros, as in ggml */
	const float id = d != 0 ? 1.0f / d : 0.0f;
	uint8_t q[32];

	b->d = pcg_f32_to_f16(d);
	for (int i = 0; i < 32; i++) {
		const float xi = x[i] * id; /* two roundings, not fused */
		const float t = xi + 8.5f;
		/* t is in [0, 16.5] unless 1/d overflowed (an f32-subnormal
		 * block, whose f16 scale is 0): its quants are 0, as gguf-py's
		 * and ggml's casts of inf and NaN give on x86. */
		q[i] = (uint8_t)(!isfinite(t) || t < 0 ? 0 : t < 16 ? (int)t : 15);
	}
	for (int i = 0; i < 16; i++)
		b->qs[i] = (uint8_t)(q[i] | q[i + 16] << 4);
}

/* --- Q4_K and Q5_K: 8 sub-blocks of 32, x = d * l - m --------------------- */

/* make_qkx2_quants: a scale and min for n values with codes 0..nmax, the one
 * of nstep + 1 trial grids (scale nmax + rmin + rdelta * is over the range)
 * whose weighted least-squares fit has the least weighted squared error.
 * Writes the codes to L and the min (>= 0, subtracted) to *the_min. */
static float fit_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L,
			   float *the_min, float rmin, float rdelta, int nstep)
{
	float min = x[0], max = x[0];
	float sum_w = w[0], sum_x = sum_w * x[0];
	uint8_t Laux[32];

	for (int i = 1; i < n; i++) {
		min = x[i] < min ? x[i] : min;
		max = x[i] > max ? x[i] : max;
		sum_w += w[i];
		sum_x += w[i] * x[i];
	}
	if (min > 0)
		min = 0;
	if (max == min) {
		memset(L, 0, (size_t)n);
		*the_min = -min;
		return 0.f;
	}
	float iscale = nmax / (max - min);
	float scale = 1 / iscale;
	float best = 0;
	for (int i = 0; i < n; i++) {
		L[i] = (uint8_t)clampi(nearest_int(iscale * (x[i] - min)), 0, nmax);
		float diff = scale * L[i] + min - x[i];
		best += w[i] * (diff * diff);
	}
	for (int is = 0; is <= nstep; is++) {
		iscale = (rmin + rdelta * is + nmax) / (max - min);
		float sum_l = 0, sum_l2 = 0, sum_xl = 0;
		for (int i = 0; i < n; i++) {
			int l = clampi(nearest_int(iscale * (x[i] - min)), 0, nmax);
			Laux[i] = (uint8_t)l;
			sum_l += w[i] * l;
			sum_l2 += w[i] * l * l;
			sum_xl += w[i] * l * x[i];
		}
		float D = sum_w * sum_l2 - sum_l * sum_l;
		if (!(D > 0))
			continue;
		float s = (sum_w * sum_xl - sum_x * sum_l) / D;
		float m = (sum_l2 * sum_x - sum_l * sum_xl) / D;
		if (m > 0) { /* the min is only ever subtracted */
			m = 0;
			s = sum_xl / sum_l2;
		}
		float err = 0;
		for (int i = 0; i < n; i++) {
			float diff = s * Laux[i] + m - x[i];
			err += w[i] * (diff * diff);
		}
		if (err < best) {
			memcpy(L, Laux, (size_t)n);
			best = err;
			scale = s;
			min = m;
		}
	}
	*the_min = -min;
	return scale;
}

/* The common part of Q4_K (nmax 15) and Q5_K (nmax 31): each sub-block's
 * scale and min fitted with weights rms + |x|, both quantised to 6 bits
 * against the largest (the super-block's f16 d and dmin), then every value
 * requantised with the scales as stored. Codes 0..nmax go to L[256]. */
static void k45_block(const float *x, int nmax, float rmin, int nstep, uint16_t *dh,
		      uint16_t *dminh, uint8_t scales[12], uint8_t L[256])
{
	float sc[8], mn[8], w[32];
	float max_scale = 0, max_min = 0;
	uint8_t ls[8], lm[8];

	for (int j = 0; j < 8; j++) {
		const float *xj = x + 32 * j;
		float sum_x2 = 0;
		for (int l = 0; l < 32; l++)
			sum_x2 += xj[l] * xj[l];
		const float av_x = sqrtf(sum_x2 / 32);
		for (int l = 0; l < 32; l++)
			w[l] = av_x + fabsf(xj[l]);
		sc[j] = fit_scale_min(32, nmax, xj, w, L + 32 * j, &mn[j], rmin, 0.1f, nstep);
		max_scale = sc[j] > max_scale ? sc[j] : max_scale;
		max_min = mn[j] > max_min ? mn[j] : max_min;
	}

	const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
	const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
	for (int j = 0; j < 8; j++) {
		/* ggml stores nearest_int in a uint8_t, then takes the min with 63 */
		uint8_t a = (uint8_t)nearest_int(inv_scale * sc[j]);
		uint8_t b = (uint8_t)nearest_int(inv_min * mn[j]);
		ls[j] = a < 63 ? a : 63;
		lm[j] = b < 63 ? b : 63;
	}
	for (int j = 0; j < 4; j++) { /* the packing pcg_get_scale_min reads */
		scales[j] = (uint8_t)(ls[j] | (ls[j + 4] >> 4) << 6);
		scales[j + 4] = (uint8_t)(lm[j] | (lm[j + 4] >> 4) << 6);
		scales[j + 8] = (uint8_t)((ls[j + 4] & 15) | (lm[j + 4] & 15) << 4);
	}
	*dh = pcg_f32_to_f16(max_scale / 63.f);
	*dminh = pcg_f32_to_f16(max_min / 63.f);

	const float d = pcg_f16_to_f32(*dh), dmin = pcg_f16_to_f32(*dminh);
	for (int j = 0; j < 8; j++) {
		uint8_t s, m;
		pcg_get_scale_min(j, scales, &s, &m);
		const float dj = d * s;
		if (dj == 0) /* keep the fit's codes, as ggml does */
			continue;
		const float dm = dmin * m;
		for (int l = 0; l < 32; l++)
			L[32 * j + l] = (uint8_t)clampi(nearest_int((x[32 * j + l] + dm) / dj), 0, nmax);
	}
}

static void q4_k_block(pcg_block_q4_k *b, const float *x)
{
	uint8_t L[256];

	k45_block(x, 15, -1.f, 20, &b->d, &b->dmin, b->scales, L);
	for (int c = 0; c < 4; c++) /* chunk c of 64: low nibbles, then high */
		for (int l = 0; l < 32; l++)
			b->qs[32 * c + l] = (uint8_t)(L[64 * c + l] | L[64 * c + 32 + l] << 4);
}

static void q5_k_block(pcg_block_q5_k *b, const float *x)
{
	uint8_t L[256];

	k45_block(x, 31, -0.5f, 15, &b->d, &b->dmin, b->scales, L);
	memset(b->qh, 0, sizeof b->qh);
	for (int c = 0; c < 4; c++) {
		for (int l = 0; l < 32; l++) {
			const int lo = L[64 * c + l], hi = L[64 * c + 32 + l];
			b->qs[32 * c + l] = (uint8_t)((lo & 15) | (hi & 15) << 4);
			b->qh[l] |= (uint8_t)((lo >> 4) << (2 * c) | (hi >> 4) << (2 * c + 1));
		}
	}
}

/* --- Q6_K: 16 sub-blocks of 16, x = d * sc * (q - 32) -------------------- */

/* make_qx_quants with rmse_type 1: codes -nmax..nmax-1 (stored + nmax in L)
 * for a scale -nmax / max, then 18 nearby scales, keeping the one that
 * maximises the x^2-weighted fit (sum w x l)^2 / (sum w l^2). Returns the
 * least-squares scale of the codes kept; 0 for a block of zeros. */
static float fit_scale_sym(int n, int nmax, const float *x, int8_t *L)
{
	float amax = 0, max = 0;
	for (int i = 0; i < n; i++) {
		if (fabsf(x[i]) > amax) {
			amax = fabsf(x[i]);
			max = x[i];
		}
	}
	if (amax < GROUP_EPS) {
		memset(L, 0, (size_t)n);
		return 0.f;
	}
	float iscale = -nmax / max;
	float sumlx = 0, suml2 = 0;
	for (int i = 0; i < n; i++) {
		int l = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
		L[i] = (int8_t)(l + nmax);
		float w = x[i] * x[i];
		sumlx += w * x[i] * l;
		suml2 += w * l * l;
	}
	float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
	float best = scale * sumlx;
	for (int is = -9; is <= 9; is++) {
		if (is == 0)
			continue;
		iscale = -(nmax + 0.1f * is) / max;
		sumlx = suml2 = 0;
		for (int i = 0; i < n; i++) {
			int l = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
			float w = x[i] * x[i];
			sumlx += w * x[i] * l;
			suml2 += w * l * l;
		}
		if (suml2 > 0 && sumlx * sumlx > best * suml2) {
			for (int i = 0; i < n; i++)
				L[i] = (int8_t)(nmax + clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1));
			scale = sumlx / suml2;
			best = scale * sumlx;
		}
	}
	return scale;
}

static void q6_k_block(pcg_block_q6_k *b, const float *x)
{
	int8_t L[256];
	float sc[16];
	float max_scale = 0, max_abs = 0;

	for (int j = 0; j < 16; j++) {
		sc[j] = fit_scale_sym(16, 32, x + 16 * j, L + 16 * j);
		if (fabsf(sc[j]) > max_abs) {
			max_abs = fabsf(sc[j]);
			max_scale = sc[j];
		}
	}
	if (max_abs < GROUP_EPS) {
		memset(b, 0, sizeof *b);
		return;
	}
	/* The largest scale becomes -128 (its sign flips the codes' sign). */
	const float iscale = -128.f / max_scale;
	b->d = pcg_f32_to_f16(1 / iscale);
	for (int j = 0; j < 16; j++) {
		int s = nearest_int(iscale * sc[j]);
		b->scales[j] = (int8_t)(s < 127 ? s : 127);
	}
	const float d = pcg_f16_to_f32(b->d);
	for (int j = 0; j < 16; j++) {
		const float dj = d * b->scales[j];
		if (dj == 0) /* keep the fit's codes, as ggml does */
			continue;
		for (int l = 0; l < 16; l++)
			L[16 * j + l] = (int8_t)(clampi(nearest_int(x[16 * j + l] / dj), -32, 31) + 32);
	}
	for (int h = 0; h < 2; h++) { /* the layout of quant.h */
		const int8_t *q = L + 128 * h;
		uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
		for (int l = 0; l < 32; l++) {
			ql[l] = (uint8_t)((q[l] & 15) | (q[l + 64] & 15) << 4);
			ql[l + 32] = (uint8_t)((q[l + 32] & 15) | (q[l + 96] & 15) << 4);
			qh[l] = (uint8_t)((q[l] >> 4) | (q[l + 32] >> 4) << 2 | (q[l + 64] >> 4) << 4 |
					  (q[l + 96] >> 4) << 6);
		}
	}
}

int pcg_quantize(void *dst, const float *src, pcg_dtype t, size_t n)
{
	unsigned char *o = dst;
	const int qk = pcg_dtype_block(t);
	const size_t bs = pcg_dtype_block_bytes(t);

	if (!pcg_dtype_is_quant(t) || qk <= 1 || n % (size_t)qk != 0)
		return -1;
	/* Blocks are built on the stack and copied: a block's size (34, 18, 210)
	 * leaves the next one at any alignment. */
	for (size_t i = 0; i < n / (size_t)qk; i++, o += bs) {
		const float *x = src + i * (size_t)qk;
		switch (t) {
		case PCG_Q8_0: {
			pcg_block_q8_0 b;
			q8_0_block(&b, x);
			memcpy(o, &b, sizeof b);
			break;
		}
		case PCG_Q4_0: {
			pcg_block_q4_0 b;
			q4_0_block(&b, x);
			memcpy(o, &b, sizeof b);
			break;
		}
		case PCG_Q4_K: {
			pcg_block_q4_k b;
			q4_k_block(&b, x);
			memcpy(o, &b, sizeof b);
			break;
		}
		case PCG_Q5_K: {
			pcg_block_q5_k b;
			q5_k_block(&b, x);
			memcpy(o, &b, sizeof b);
			break;
		}
		case PCG_Q6_K: {
			pcg_block_q6_k b;
			q6_k_block(&b, x);
			memcpy(o, &b, sizeof b);
			break;
		}
		default:
			return -1;
		}
	}
	return 0;
}

/* --- llama.cpp's type per tensor (src/llama-quant.cpp) ------------------- */

/* The file types llama-quantize names, with their default_type. */
static const struct {
	const char *name;
	pcg_dtype type;
} ftypes[] = {
	{"q8_0", PCG_Q8_0},   {"q4_0", PCG_Q4_0},   {"q4_k_s", PCG_Q4_K}, {"q4_k_m", PCG_Q4_K},
	{"q5_k_s", PCG_Q5_K}, {"q5_k_m", PCG_Q5_K}, {"q6_k", PCG_Q6_K},
};

/* use_more_bits: the first and last eighth of the layers and every third
 * one between them. */
static int more_bits(int i, int n)
{
	return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

static int ends_with(const char *s, const char *end)
{
	size_t a = strlen(s), b = strlen(end);
	return a >= b && strcmp(s + a - b, end) == 0;
}

/* llama_tensor_get_type for arch LLAMA, n_expert 0, no imatrix, not a 70B
 * model (its attn_v rule), default options (output quantised, no override
 * types, not --pure). The GQA conditions of llama.cpp's attn_v rules belong
 * to the Q2_K, Q3_K and IQ types only: for the types here a GQA model such as
 * LLaSA-1B (32 heads, 8 kv heads) gets the same types as any other. attn_v's
 * counter i_attention_wv is the layer: a Llama has one attn_v per layer. */
pcg_dtype pcg_quant_choose(const char *ftype, const char *tensor, int layer, int n_layers,
			   int64_t cols)
{
	pcg_dtype def = PCG_DTYPE_OTHER, t;
	int km = 0, ks = 0; /* the _M and _S mixes of a K type */

	for (size_t i = 0; i < sizeof ftypes / sizeof ftypes[0]; i++)
		if (ftype && strcasecmp(ftype, ftypes[i].name) == 0)
			def = ftypes[i].type;
	if (def == PCG_DTYPE_OTHER || tensor == NULL)
		return PCG_DTYPE_OTHER;
	km = strcasecmp(ftype, "q4_k_m") == 0 || strcasecmp(ftype, "q5_k_m") == 0;
	ks = strcasecmp(ftype, "q4_k_s") == 0;

	/* llama_model_quantize_impl quantises only 2-D tensors named *weight,
	 * never the norms; rope_freqs is the 1-D one of a Llama. */
	if (!ends_with(tensor, "weight") || strstr(tensor, "_norm.weight") ||
	    strstr(tensor, "rope_freqs"))
		return PCG_F32;

	t = def;
	if (strcmp(tensor, "output.weight") == 0) {
		/* output: Q8_0 when cols is not a multiple of the default type's
		 * block, else Q6_K unless the default is Q8_0 */
		if (cols % pcg_dtype_block(def) != 0)
			t = PCG_Q8_0;
		else if (def != PCG_Q8_0)
			t = PCG_Q6_K;
	} else if (strstr(tensor, "attn_v.weight")) {
		/* Q4_K_M, Q5_K_M: use_more_bits(i_attention_wv) -> Q6_K;
		 * Q4_K_S: i_attention_wv < 4 -> Q5_K */
		if (km && more_bits(layer, n_layers))
			t = PCG_Q6_K;
		else if (ks && layer < 4)
			t = PCG_Q5_K;
	} else if (strstr(tensor, "ffn_down")) {
		/* Q4_K_M (not Falcon), Q5_K_M: use_more_bits -> Q6_K;
		 * Q4_K_S (not Falcon): i_layer < n_layer / 8 -> Q5_K */
		if (km && more_bits(layer, n_layers))
			t = PCG_Q6_K;
		else if (ks && layer < n_layers / 8)
			t = PCG_Q5_K;
	}
	/* token_embd, attn_q, attn_k, attn_output, ffn_gate, ffn_up: llama.cpp
	 * changes them only for Q2_K, Q3_K, IQ types or MoE models. */

	/* convert_incompatible_tensor: a row not a multiple of the block. For
	 * Q4_K and Q5_K llama.cpp takes Q5_0 and Q5_1, which the engine lacks:
	 * Q8_0 here (more bits, never fewer); Q6_K -> Q8_0 as in llama.cpp. */
	if (cols % pcg_dtype_block(t) != 0 && pcg_dtype_block(t) == PCG_QK_K)
		t = PCG_Q8_0;
	/* ... then F16 when even 32 does not divide the row (llama.cpp refuses
	 * a Q8_0 or Q4_0 default type there; F16 keeps the tensor usable). */
	if (cols % PCG_QK != 0)
		t = PCG_F16;
	return t;
}
