/* xcodec2.c: the X-codec2 decoder, step by step as the original PyTorch code
 * (zhenye234/X-Codec-2.0: inference.py, vq/codec_decoder_vocos.py,
 * vq/bs_roformer5.py; vector-quantize-pytorch 1.17.8 ResidualFSQ).
 *
 * Activations are [T, C] row-major: one row per code (frame), so every
 * linear layer and every convolution is one matrix product over the whole
 * utterance (pcg_matmul: OpenBLAS sgemm on tiles for more than 8 rows). A
 * convolution is an im2col gather followed by that product: PyTorch's
 * Conv1d weight [out, in, k] read row-major is already the [out, in * k]
 * matrix that multiplies the im2col rows, so the mapped weights are used in
 * place. The inverse real FFT of the head is FFTW's (single precision).
 *
 * RoPE is left out on purpose: the original calls torchtune's
 * RotaryPositionalEmbeddings on q and k shaped [b, h, t, d], whose forward
 * takes dimension 1 as the sequence, so the "position" is the head index
 * and every time step of a head gets the same rotation. q and k of a head
 * are rotated alike, so q.k and the attention output are unchanged (the
 * transformers port notes the same). The parity fixtures, made with the real
 * torchtune RoPE, confirm it.
 */
#include "xcodec2.h"
#include "fileio.h"

/* fftw3.h before cblas.h: OpenBLAS's header pulls in <complex.h>, which
 * would turn fftwf_complex from float[2] into float _Complex. */
#include <fftw3.h>
#include <cblas.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chunks.h"
#include "matmul.h"
#include "safetensors.h"
#include "xc2_ops.h"
#include "weights.h"


/* ------------------------------------------------------------------ config */

void xc2_config_default(xc2_config *c)
{
	memset(c, 0, sizeof *c);
	c->hidden = 1024;
	c->depth = 12;
	c->heads = 16;
	c->ffn = 4096;
	c->vq_dim = 2048;
	c->n_levels = 8;
	for (int i = 0; i < 8; i++)
		c->levels[i] = 4;
	c->hop = 320;
	c->sample_rate = 16000;
}

int64_t xc2_config_codebook(const xc2_config *c)
{
	int64_t n = 1;

	for (int i = 0; i < c->n_levels; i++)
		n *= c->levels[i];
	return n;
}

int xc2_config_check(const xc2_config *c, pcg_err *err)
{
	int64_t n = 1;

	if (c->hidden < 1 || c->hidden > 65536)
		return pcg_fail(err, "hidden_size: %d out of range [1, 65536]", c->hidden);
	if (c->hidden % XC2_GROUPS)
		return pcg_fail(err, "hidden_size: %d is not a multiple of the %d GroupNorm groups",
				c->hidden, XC2_GROUPS);
	if (c->depth < 0 || c->depth > 1024)
		return pcg_fail(err, "num_hidden_layers: %d out of range [0, 1024]", c->depth);
	if (c->heads < 1 || c->hidden % c->heads)
		return pcg_fail(err, "num_attention_heads: %d does not divide hidden_size %d",
				c->heads, c->hidden);
	if (c->ffn < 1 || c->ffn > 1 << 20)
		return pcg_fail(err, "intermediate_size: %d out of range [1, 2^20]", c->ffn);
	if (c->vq_dim < 1 || c->vq_dim > 1 << 20)
		return pcg_fail(err, "quantization_dim: %d out of range [1, 2^20]", c->vq_dim);
	if (c->n_levels < 1 || c->n_levels > XC2_MAX_LEVELS)
		return pcg_fail(err, "quantization_levels: %d levels, want 1 to %d", c->n_levels,
				XC2_MAX_LEVELS);
	for (int i = 0; i < c->n_levels; i++) {
		/* A level of 1 would divide by half_width = 0 in the original. */
		if (c->levels[i] < 2 || c->levels[i] > 65536)
			return pcg_fail(err, "quantization_levels[%d]: %d out of range [2, 65536]", i,
					c->levels[i]);
		n *= c->levels[i];
		if (n > INT32_MAX)
			return pcg_fail(err, "quantization_levels: codebook larger than 2^31 - 1");
	}
	if (c->hop < 1 || c->hop > 16384)
		return pcg_fail(err, "hop length (product of downsampling_ratios): %d out of range "
				"[1, 16384]", c->hop);
	/* "same" padding trims (n_fft - hop) / 2 = 1.5 hop per side: hop must be even. */
	if (c->hop % 2)
		return pcg_fail(err, "hop length %d: must be even", c->hop);
	if (c->sample_rate < 1 || c->sample_rate > 1000000)
		return pcg_fail(err, "sampling_rate: %d out of range [1, 1000000]", c->sample_rate);
	return 0;
}

static int json_int(const json_t *root, const char *key, int *out, pcg_err *err)
{
	const json_t *v = json_object_get(root, key);

	if (v == NULL || json_is_null(v))
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < INT_MIN ||
	    json_integer_value(v) > INT_MAX)
		return pcg_fail(err, "%s: not an integer", key);
	*out = (int)json_integer_value(v);
	return 0;
}

/* An array of positive integers into out[0..*n), at most max. */
static int json_ints(const json_t *root, const char *key, int *out, int *n, int max,
		     pcg_err *err)
{
	const json_t *v = json_object_get(root, key);

	if (v == NULL || json_is_null(v))
		return 0;
	if (!json_is_array(v) || json_array_size(v) < 1 || json_array_size(v) > (size_t)max)
		return pcg_fail(err, "%s: not an array of 1 to %d integers", key, max);
	for (size_t i = 0; i < json_array_size(v); i++) {
		const json_t *e = json_array_get(v, i);
		if (!json_is_integer(e) || json_integer_value(e) < 1 ||
		    json_integer_value(e) > 65536)
			return pcg_fail(err, "%s[%zu]: not an integer in [1, 65536]", key, i);
		out[i] = (int)json_integer_value(e);
	}
	*n = (int)json_array_size(v);
	return 0;
}

int xc2_config_load(const char *path, xc2_config *c, pcg_err *err)
{
	json_error_t je;
	json_t *root;
	const json_t *mt;
	int ratios[16], n_ratios = 0, has_ffn, rc = -1;

	xc2_config_default(c);
	root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
	if (root == NULL)
		return pcg_json_fail(err, path, &je);
	if (!json_is_object(root)) {
		pcg_fail(err, "%s: not a JSON object", path);
		goto out;
	}
	mt = json_object_get(root, "model_type");
	if (mt != NULL && !(json_is_string(mt) && !strcmp(json_string_value(mt), "xcodec2"))) {
		pcg_fail(err, "%s: model_type: not \"xcodec2\"", path);
		goto out;
	}
	has_ffn = json_object_get(root, "intermediate_size") != NULL;
	if (json_int(root, "codec_decoder_hidden_size", &c->hidden, err) < 0 ||
	    json_int(root, "hidden_size", &c->hidden, err) < 0 ||
	    json_int(root, "num_hidden_layers", &c->depth, err) < 0 ||
	    json_int(root, "num_attention_heads", &c->heads, err) < 0 ||
	    json_int(root, "intermediate_size", &c->ffn, err) < 0 ||
	    json_int(root, "quantization_dim", &c->vq_dim, err) < 0 ||
	    json_int(root, "sampling_rate", &c->sample_rate, err) < 0 ||
	    json_ints(root, "quantization_levels", c->levels, &c->n_levels, XC2_MAX_LEVELS,
		      err) < 0 ||
	    json_ints(root, "downsampling_ratios", ratios, &n_ratios, 16, err) < 0)
		goto named;
	/* The original's MLP is 4 * dim wide, whatever the width. */
	if (!has_ffn)
		c->ffn = c->hidden <= (1 << 20) / 4 ? 4 * c->hidden : 0;
	if (n_ratios > 0) {
		long long hop = 1;
		for (int i = 0; i < n_ratios && hop <= 16384; i++)
			hop *= ratios[i];
		c->hop = hop <= 16384 ? (int)hop : 0;
	}
	const json_t *hd = json_object_get(root, "head_dim");
	if (hd != NULL && !json_is_null(hd) && c->heads > 0 &&
	    (!json_is_integer(hd) || json_integer_value(hd) != c->hidden / c->heads)) {
		pcg_fail(err, "head_dim: must be hidden_size / num_attention_heads = %d",
			 c->hidden / c->heads);
		goto named;
	}
	if (xc2_config_check(c, err) < 0)
		goto named;
	rc = 0;
	goto out;
named:
	pcg_err_prefix(err, path);
out:
	json_decref(root);
	return rc;
}

/* ----------------------------------------------------------------- loading */

struct xc2_model {
	xc2_config cfg;
	st_ckpt *ck;
	int n_fft;               /* 4 * hop */
	xc2_tensors t;           /* shapes in xcodec2.h */
	fftwf_plan plan;         /* c2r of n_fft points, used with new arrays */
	pcg_weights w;           /* the tensors taken from ck, and copies */
};

static int load_resblock(xc2_model *m, xc2_resblock *r, const char *prefix, pcg_err *err)
{
	const int C = m->cfg.hidden;
	char n[160];

#define VEC(field, suffix) \
	snprintf(n, sizeof n, "%s.%s", prefix, suffix); \
	if ((r->field = wt_vec(&m->w, n, C, err)) == NULL) \
		return -1;
	VEC(norm1_w, "norm1.weight")
	VEC(norm1_b, "norm1.bias")
	VEC(conv1_b, "conv1.bias")
	VEC(norm2_w, "norm2.weight")
	VEC(norm2_b, "norm2.bias")
	VEC(conv2_b, "conv2.bias")
#undef VEC
	snprintf(n, sizeof n, "%s.conv1.weight", prefix);
	if (wt_mat(&m->w, &r->conv1, n, C, C, 3, err) < 0)
		return -1;
	snprintf(n, sizeof n, "%s.conv2.weight", prefix);
	return wt_mat(&m->w, &r->conv2, n, C, C, 3, err);
}

xc2_model *xc2_open(const char *weights, const xc2_config *cfg, pcg_err *err)
{
	xc2_model *m = calloc(1, sizeof *m);
	char n[160];

	if (m == NULL) {
		pcg_fail(err, "out of memory");
		return NULL;
	}
	if (cfg)
		m->cfg = *cfg;
	else
		xc2_config_default(&m->cfg);
	if (xc2_config_check(&m->cfg, err) < 0)
		goto fail;
	m->ck = st_open(weights, err);
	m->w.ck = m->ck;
	if (m->ck == NULL)
		goto fail;

	const xc2_config *c = &m->cfg;
	const int C = c->hidden, N = 4 * c->hop;
	xc2_tensors *t = &m->t;
	float *window = wt_alloc(&m->w, (size_t)N * sizeof *window);
	m->n_fft = N;
	t->tb = calloc((size_t)(c->depth > 0 ? c->depth : 1), sizeof *t->tb);
	t->window = window;
	if (t->tb == NULL || window == NULL) {
		pcg_fail(err, "out of memory");
		goto fail_named;
	}
	if (wt_mat(&m->w, &t->project_out, "generator.quantizer.project_out.weight", c->vq_dim,
		     c->n_levels, -1, err) < 0 ||
	    !(t->project_out_b = wt_vec(&m->w, "generator.quantizer.project_out.bias", c->vq_dim,
					  err)) ||
	    wt_mat(&m->w, &t->fc_post_a, "fc_post_a.weight", C, c->vq_dim, -1, err) < 0 ||
	    !(t->fc_post_a_b = wt_vec(&m->w, "fc_post_a.bias", C, err)) ||
	    wt_mat(&m->w, &t->embed, "generator.backbone.embed.weight", C, C, 7, err) < 0 ||
	    !(t->embed_b = wt_vec(&m->w, "generator.backbone.embed.bias", C, err)) ||
	    load_resblock(m, &t->prior[0], "generator.backbone.prior_net.0", err) < 0 ||
	    load_resblock(m, &t->prior[1], "generator.backbone.prior_net.1", err) < 0 ||
	    load_resblock(m, &t->post[0], "generator.backbone.post_net.0", err) < 0 ||
	    load_resblock(m, &t->post[1], "generator.backbone.post_net.1", err) < 0 ||
	    !(t->ln_w = wt_vec(&m->w, "generator.backbone.final_layer_norm.weight", C, err)) ||
	    !(t->ln_b = wt_vec(&m->w, "generator.backbone.final_layer_norm.bias", C, err)) ||
	    wt_mat(&m->w, &t->head, "generator.head.out.weight", N + 2, C, -1, err) < 0 ||
	    !(t->head_b = wt_vec(&m->w, "generator.head.out.bias", N + 2, err)))
		goto fail_named;
	for (int l = 0; l < c->depth; l++) {
		xc2_tblock *b = &t->tb[l];
#define MAT(field, suffix, r, k) \
		snprintf(n, sizeof n, "generator.backbone.transformers.%d.%s", l, suffix); \
		if (wt_mat(&m->w, &b->field, n, r, k, -1, err) < 0) \
			goto fail_named;
#define VEC(field, suffix) \
		snprintf(n, sizeof n, "generator.backbone.transformers.%d.%s", l, suffix); \
		if ((b->field = wt_vec(&m->w, n, C, err)) == NULL) \
			goto fail_named;
		VEC(att_norm, "att_norm.weight")
		MAT(c_attn, "att.c_attn.weight", 3 * C, C)
		MAT(c_proj, "att.c_proj.weight", C, C)
		VEC(ffn_norm, "ffn_norm.weight")
		MAT(fc1, "mlp.fc1.weight", c->ffn, C)
		MAT(fc2, "mlp.fc2.weight", C, c->ffn)
#undef MAT
#undef VEC
	}
	/* torch.hann_window(N), periodic: 0.5 - 0.5 cos(2 pi n / N). */
	for (int i = 0; i < N; i++)
		window[i] = (float)(0.5 - 0.5 * cos(2.0 * M_PI * i / N));
	/* FFTW_ESTIMATE: the plan, and so every bit of the output, is the same
	 * on every run (FFTW_MEASURE picks by timing). The plan is made once and
	 * run with fftwf_execute_dft_c2r on arrays from fftwf_malloc, which
	 * FFTW allows from any thread at once. */
	{
		fftwf_complex *in = fftwf_malloc(sizeof *in * (size_t)(N / 2 + 1));
		float *out = fftwf_malloc(sizeof *out * (size_t)N);
		if (in != NULL && out != NULL)
			m->plan = fftwf_plan_dft_c2r_1d(N, in, out, FFTW_ESTIMATE);
		fftwf_free(in);
		fftwf_free(out);
		if (m->plan == NULL) {
			pcg_fail(err, "FFTW: no plan for a %d-point inverse real FFT", N);
			goto fail_named;
		}
	}
	return m;

fail_named:
	pcg_err_prefix(err, weights);
fail:
	xc2_close(&m);
	return NULL;
}

void xc2_close(xc2_model **mp)
{
	xc2_model *m = mp ? *mp : NULL;

	if (m == NULL)
		return;
	if (m->plan)
		fftwf_destroy_plan(m->plan);
	wt_release(&m->w);
	free(m->t.tb);
	st_close(&m->ck);
	free(m);
	*mp = NULL;
}

const xc2_config *xc2_get_config(const xc2_model *m) { return &m->cfg; }
size_t xc2_mapped_bytes(const xc2_model *m) { return st_mapped_bytes(m->ck); }
const xc2_tensors *xc2_get_tensors(const xc2_model *m) { return &m->t; }

/* ------------------------------------------------------------------ layers */

/* nonlinearity(GroupNorm(32, C, eps=1e-6)(x)) into y. The statistics of a
 * group are over its C/32 channels and all T frames, biased variance; they
 * are summed in double, so they carry less rounding than PyTorch's. */
static void groupnorm_swish(float *y, const float *x, int T, int C, const float *w,
			    const float *b)
{
	const int G = XC2_GROUPS, cg = C / G;
	double sum[XC2_GROUPS] = { 0 }, sq[XC2_GROUPS] = { 0 };
	float mean[XC2_GROUPS], rstd[XC2_GROUPS];

	for (int t = 0; t < T; t++) {
		const float *xt = x + (size_t)t * C;
		for (int g = 0; g < G; g++) {
			double s = 0, q = 0;
			for (int i = g * cg; i < (g + 1) * cg; i++) {
				s += xt[i];
				q += (double)xt[i] * xt[i];
			}
			sum[g] += s;
			sq[g] += q;
		}
	}
	for (int g = 0; g < G; g++) {
		const double n = (double)T * cg, mu = sum[g] / n;
		double var = sq[g] / n - mu * mu;
		mean[g] = (float)mu;
		rstd[g] = (float)(1.0 / sqrt((var > 0 ? var : 0) + 1e-6));
	}
#pragma omp parallel for schedule(static) if ((size_t)T * C > 65536)
	for (int t = 0; t < T; t++) {
		const float *xt = x + (size_t)t * C;
		float *yt = y + (size_t)t * C;
		for (int i = 0; i < C; i++) {
			const int g = i / cg;
			yt[i] = xc2_silu((xt[i] - mean[g]) * rstd[g] * w[i] + b[i]);
		}
	}
}

/* ResnetBlock: h = conv2(swish(GN2(conv1(swish(GN1(x)))))); x = x + h
 * (dropout is off at inference; in == out channels, so no shortcut conv). */
static void resblock(float *x, int T, int C, const xc2_resblock *r, float *h, float *h2,
		     float *col)
{
	groupnorm_swish(h, x, T, C, r->norm1_w, r->norm1_b);     /* h = nonlinearity(norm1(x)) */
	xc2_conv1d(h2, h, T, C, 3, &r->conv1, r->conv1_b, col);      /* h = conv1(h) */
	groupnorm_swish(h, h2, T, C, r->norm2_w, r->norm2_b);    /* h = nonlinearity(norm2(h)) */
	xc2_conv1d(h2, h, T, C, 3, &r->conv2, r->conv2_b, col);      /* h = conv2(h) */
	for (size_t i = 0; i < (size_t)T * C; i++)               /* return x + h */
		x[i] += h2[i];
}

/* RMSNorm of bs_roformer5.py: x * rsqrt(mean(x^2) + 1e-6) * weight, per row. */
static void rmsnorm(float *y, const float *x, int T, int C, const float *w)
{
#pragma omp parallel for schedule(static) if ((size_t)T * C > 65536)
	for (int t = 0; t < T; t++) {
		const float *xt = x + (size_t)t * C;
		float *yt = y + (size_t)t * C;
		float ss = 0.0f;
		for (int i = 0; i < C; i++)
			ss += xt[i] * xt[i];
		const float r = 1.0f / sqrtf(ss / (float)C + 1e-6f);
		for (int i = 0; i < C; i++)
			yt[i] = xt[i] * r * w[i];
	}
}

/* Softmax, vectorised: at 30 s of audio the attention takes 430 M
 * exponentials, about a fifth of the decoder's time with glibc's scalar
 * expf. Vectors of 16 floats, compiled for AVX-512, AVX2 and the baseline,
 * chosen at run time. */
typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));

/* x = exp(x) for x <= 0 (passed by pointer: a 64-byte vector by value
 * draws an ABI note from GCC when not inlined) with Cephes expf's polynomial (relative error below
 * 2e-7, as expf's own few ulp): x = n ln2 + r, |r| <= ln2 / 2, exp(x) =
 * 2^n p(r). Below -87.3 the result would be subnormal (slow to compute
 * with, and below 1e-38 of the row's largest term): 0 instead. */
static inline __attribute__((always_inline)) void exp_neg(v16f *xp)
{
	v16f x = *xp;
	const v16i under = x < -87.3f;
	x = (v16f)((v16i)x & ~under) + (v16f)((v16i)((v16f){ 0 } - 87.3f) & under);
	const v16i n = __builtin_convertvector(x * 1.44269504088896341f - 0.5f, v16i);
	const v16f nf = __builtin_convertvector(n, v16f);
	const v16f r = x - nf * 0.693359375f + nf * 2.12194440e-4f;
	v16f p = (v16f){ 0 } + 1.9875691500e-4f;
	p = p * r + 1.3981999507e-3f;
	p = p * r + 8.3334519073e-3f;
	p = p * r + 4.1665795894e-2f;
	p = p * r + 1.6666665459e-1f;
	p = p * r + 5.0000001201e-1f;
	p = p * r * r + r + 1.0f;
	const v16i pow2n = (n + 127) << 23;
	*xp = (v16f)((v16i)(p * (v16f)pow2n) & ~under);
}

/* Each of the rows of S (n wide) becomes softmax(row). */
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
static void softmax_rows(float *S, int rows, int n)
{
	const int nv = n / 16 * 16;

	for (int i = 0; i < rows; i++) {
		float *s = S + (size_t)i * n, mx = -INFINITY, sum = 0.0f, tail[16];
		v16f vmax = (v16f){ 0 } - INFINITY, vsum = { 0 };
		for (int j = 0; j < nv; j += 16) {
			v16f v;
			memcpy(&v, s + j, sizeof v);
			const v16i gt = v > vmax;
			vmax = (v16f)(((v16i)v & gt) | ((v16i)vmax & ~gt));
		}
		for (int k = 0; k < 16; k++)
			mx = vmax[k] > mx ? vmax[k] : mx;
		for (int j = nv; j < n; j++)
			mx = s[j] > mx ? s[j] : mx;
		for (int j = 0; j < nv; j += 16) {
			v16f v;
			memcpy(&v, s + j, sizeof v);
			v -= mx;
			exp_neg(&v);                              /* exp(s - max) */
			memcpy(s + j, &v, sizeof v);
			vsum += v;
		}
		if (nv < n) {                                     /* the last n % 16 */
			v16f v;
			for (int k = 0; k < 16; k++)
				tail[k] = nv + k < n ? s[nv + k] : -INFINITY;
			memcpy(&v, tail, sizeof v);
			v -= mx;
			exp_neg(&v);                              /* -inf lanes give 0 */
			memcpy(tail, &v, sizeof v);
			for (int k = 0; nv + k < n; k++)
				s[nv + k] = tail[k];
			vsum += v;
		}
		for (int k = 0; k < 16; k++)
			sum += vsum[k];
		const float inv = 1.0f / sum;
		for (int j = 0; j < n; j++)
			s[j] *= inv;
	}
}

/* scaled_dot_product_attention(q, k, v, is_causal=False) over all T frames,
 * one head per task. qkv is [T, 3C] (q | k | v, each heads x d, as einops
 * 'b t (r h d) -> r b h t d' splits it); out is [T, C] ('b h t d -> b t (h d)').
 * Each task calls a single-threaded sgemm (pcg_set_threads). */
static void attention(float *out, const float *qkv, int T, int C, int heads, float *scores)
{
	const int d = C / heads;
	const float scale = 1.0f / sqrtf((float)d);

#pragma omp parallel for schedule(dynamic, 1)
	for (int h = 0; h < heads; h++) {
		float *S = scores + (size_t)omp_get_thread_num() * T * T;
		const float *q = qkv + h * d, *k = qkv + C + h * d, *v = qkv + 2 * C + h * d;
		/* S = q k^T * scale */
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, d, scale, q, 3 * C, k,
			    3 * C, 0.0f, S, T);
		softmax_rows(S, T, T);                           /* softmax over the keys */
		/* y = S v */
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, d, T, 1.0f, S, T, v, 3 * C,
			    0.0f, out + h * d, C);
	}
}

/* ISTFTHead with padding="same": p = out(x) per frame; log-magnitude and phase
 * halves; S = clip(exp(logmag), max=100) * (cos(phase) + i sin(phase));
 * irfft(S, n_fft) * window; overlap-add with hop; divide by the overlap-added
 * squared window; drop (n_fft - hop) / 2 samples per side. */
static void istft(float *out, const float *p, int T, int hop, const float *window,
		  fftwf_plan plan, float *frames, fftwf_complex *spec)
{
	const int N = 4 * hop, nb = N / 2 + 1, pad = (N - hop) / 2;
	const float inv_n = 1.0f / (float)N;

#pragma omp parallel for schedule(static)
	for (int t = 0; t < T; t++) {
		fftwf_complex *X = spec + (size_t)omp_get_thread_num() * nb;
		const float *pt = p + (size_t)t * (N + 2); /* logmag [0, nb), phase [nb, 2nb) */
		float *f = frames + (size_t)t * N;
		for (int k = 0; k < nb; k++) {
			float mag = expf(pt[k]);                  /* mag = torch.exp(mag) */
			mag = mag > 100.0f ? 100.0f : mag;        /* torch.clip(mag, max=1e2) */
			X[k][0] = mag * cosf(pt[nb + k]);         /* S = mag * (cos p + i sin p) */
			X[k][1] = mag * sinf(pt[nb + k]);
		}
		/* irfft ignores the imaginary parts of the DC and Nyquist bins */
		X[0][1] = 0.0f;
		X[nb - 1][1] = 0.0f;
		fftwf_execute_dft_c2r(plan, X, f);               /* torch.fft.irfft(S, N) */
		for (int n = 0; n < N; n++)                       /* norm="backward": 1/N */
			f[n] = f[n] * inv_n * window[n];          /* ifft * window */
	}
	/* fold (overlap-add) of the frames and of window^2, kept samples only:
	 * sample s of the padded signal has frames t with t*hop <= s < t*hop + N. */
#pragma omp parallel for schedule(static)
	for (int m = 0; m < hop * T; m++) {
		const int s = m + pad;
		int t0 = s - N + 1 > 0 ? (s - N + 1 + hop - 1) / hop : 0;
		int t1 = s / hop < T - 1 ? s / hop : T - 1;
		float y = 0.0f, env = 0.0f;
		for (int t = t0; t <= t1; t++) {
			const int n = s - t * hop;
			y += frames[(size_t)t * N + n];
			env += window[n] * window[n];
		}
		out[m] = y / env;                                 /* y / window_envelope */
	}
}

/* ------------------------------------------------------------------ decode */

int xc2_check_codes(const xc2_config *c, const int32_t *codes, int T, pcg_err *err)
{
	const int64_t book = xc2_config_codebook(c);

	if (T < 1)
		return pcg_fail(err, "no codes to decode");
	/* Sample indices are ints: n_fft * T must fit (about 28 hours at 16 kHz). */
	if (T > INT_MAX / (4 * c->hop))
		return pcg_fail(err, "%d codes: too many for one call (at most %d)", T,
				INT_MAX / (4 * c->hop));
	for (int t = 0; t < T; t++)
		if (codes[t] < 0 || codes[t] >= book)
			return pcg_fail(err, "code %d at position %d out of range [0, %lld)",
					(int)codes[t], t, (long long)book);
	return 0;
}

/* get_output_from_indices: digit j = (idx // basis_j) % level_j with
 * basis = cumprod([1] + levels[:-1]); code = (digit - level//2) / (level//2)
 * (times scales[0] = 1 for the single quantizer). */
void xc2_fsq(const xc2_config *c, const int32_t *codes, int T, float *fsq)
{
	const int L = c->n_levels;

	for (int t = 0; t < T; t++) {
		int64_t idx = codes[t];
		for (int j = 0; j < L; j++) {
			const int lv = c->levels[j], half = lv / 2;
			fsq[(size_t)t * L + j] = (float)((int)(idx % lv) - half) / (float)half;
			idx /= lv;
		}
	}
}

/* The whole decoder; the backbone's output goes to feat when not NULL, the
 * waveform to out when not NULL. */
static int run(const xc2_model *m, const int32_t *codes, int T, float *out, float *feat,
	       pcg_err *err)
{
	const xc2_config *c = &m->cfg;
	const xc2_tensors *w = &m->t;
	const int C = c->hidden, V = c->vq_dim, N = m->n_fft, L = c->n_levels;
	const int threads = pcg_get_threads();
	int rc = -1;

	if (xc2_check_codes(c, codes, T, err) < 0)
		return -1;
	/* Work buffers: the widest row is the im2col one (7C) or the FFN (ffn)
	 * or the head (N + 2) or q|k|v (3C). */
	size_t wide = (size_t)7 * C;
	if ((size_t)c->ffn > wide) wide = c->ffn;
	if ((size_t)N + 2 > wide) wide = N + 2;
	if ((size_t)V > wide) wide = V;
	float *x = malloc((size_t)T * C * sizeof *x);
	float *h = malloc((size_t)T * C * sizeof *h);
	float *h2 = malloc((size_t)T * C * sizeof *h2);
	float *big = malloc((size_t)T * wide * sizeof *big);
	float *scores = malloc((size_t)threads * T * T * sizeof *scores);
	float *fsq = malloc((size_t)T * L * sizeof *fsq);
	float *frames = fftwf_malloc((size_t)T * N * sizeof *frames);
	fftwf_complex *spec = fftwf_malloc((size_t)threads * (N / 2 + 1) * sizeof *spec);
	if (!x || !h || !h2 || !big || !scores || !fsq || !frames || !spec) {
		pcg_fail(err, "out of memory decoding %d codes", T);
		goto out;
	}

	/* (1) get_output_from_indices: FSQ codes, then project_out */
	xc2_fsq(c, codes, T, fsq);
	xc2_linear(big, fsq, T, &w->project_out, w->project_out_b);  /* [T, vq_dim] */
	/* (2) vq_post_emb = fc_post_a(vq_post_emb) */
	xc2_linear(x, big, T, &w->fc_post_a, w->fc_post_a_b);        /* [T, C] */

	/* (3) VocosBackbone */
	memcpy(h, x, (size_t)T * C * sizeof *h);
	xc2_conv1d(x, h, T, C, 7, &w->embed, w->embed_b, big);      /* x = self.embed(x) */
	for (int i = 0; i < 2; i++)                              /* x = self.prior_net(x) */
		resblock(x, T, C, &w->prior[i], h, h2, big);
	for (int l = 0; l < c->depth; l++) {                     /* x = self.transformers(x) */
		const xc2_tblock *b = &w->tb[l];
		rmsnorm(h, x, T, C, b->att_norm);                /* att_norm(x) */
		xc2_linear(big, h, T, &b->c_attn, NULL);             /* q, k, v = c_attn(x) */
		attention(h, big, T, C, c->heads, scores);       /* sdpa (RoPE: no effect) */
		xc2_linear(h2, h, T, &b->c_proj, NULL);              /* y = c_proj(y) */
		for (size_t i = 0; i < (size_t)T * C; i++)       /* x = x + att(...) */
			x[i] += h2[i];
		rmsnorm(h, x, T, C, b->ffn_norm);                /* ffn_norm(x) */
		xc2_linear(big, h, T, &b->fc1, NULL);                /* fc1 */
#pragma omp parallel for schedule(static) if ((size_t)T * c->ffn > 65536)
		for (size_t i = 0; i < (size_t)T * c->ffn; i++)  /* silu */
			big[i] = xc2_silu(big[i]);
		xc2_linear(h2, big, T, &b->fc2, NULL);               /* fc2 */
		for (size_t i = 0; i < (size_t)T * C; i++)       /* x = x + mlp(...) */
			x[i] += h2[i];
	}
	for (int i = 0; i < 2; i++)                              /* x = self.post_net(x) */
		resblock(x, T, C, &w->post[i], h, h2, big);
	/* x = self.final_layer_norm(x): LayerNorm(C, eps=1e-6) */
	xc2_layer_norm(x, x, T, C, w->ln_w, w->ln_b, 1e-6f);

	if (feat != NULL)
		memcpy(feat, x, (size_t)T * C * sizeof *x);

	/* (4) ISTFTHead: x_pred = self.out(x), then the inverse STFT */
	if (out != NULL) {
		xc2_linear(big, x, T, &w->head, w->head_b);          /* [T, N + 2] */
		istft(out, big, T, c->hop, w->window, m->plan, frames, spec);
	}
	rc = 0;
out:
	free(x);
	free(h);
	free(h2);
	free(big);
	free(scores);
	free(fsq);
	fftwf_free(frames);
	fftwf_free(spec);
	return rc;
}

int xc2_decode(const xc2_model *m, const int32_t *codes, int T, float *out, pcg_err *err)
{
	return run(m, codes, T, out, NULL, err);
}

int xc2_features(const xc2_model *m, const int32_t *codes, int T, float *feat, pcg_err *err)
{
	return run(m, codes, T, NULL, feat, err);
}

static int decode_cpu(void *m, const int32_t *codes, int T, float *out, pcg_err *err)
{
	return xc2_decode(m, codes, T, out, err);
}

int xc2_decode_chunked(const xc2_model *m, const int32_t *codes, int T, int chunk, int first,
		       int left, int right, float *out, pcg_err *err)
{
	return xc2_decode_chunked_with(&m->cfg, decode_cpu, (void *)m, codes, T, chunk, first, left,
				       right, out, err);
}

int xc2_decode_chunked_with(const xc2_config *c, xc2_decoder dec, void *ctx,
			    const int32_t *codes, int T, int chunk, int first, int left, int right,
			    float *out, pcg_err *err)
{
	const int hop = c->hop;
	float *tmp;

	if (chunk < 1 || left < 0 || right < 0)
		return pcg_fail(err, "chunked decoding: chunk %d, context %d/%d", chunk, left, right);
	if (pcg_chunk_check(chunk, first, err) < 0) {
		pcg_err_prefix(err, "chunked decoding: the first chunk");
		return -1;
	}
	if (xc2_check_codes(c, codes, T, err) < 0)
		return -1;
	if (pcg_chunk_end(0, chunk, first) >= T)
		return dec(ctx, codes, T, out, err);
	/* no chunk is longer than `chunk`, nor the utterance */
	tmp = malloc((size_t)hop * ((chunk < T ? chunk : T) + (size_t)left + right) * sizeof *tmp);
	if (tmp == NULL)
		return pcg_fail(err, "out of memory");
	for (int s = 0, e; s < T; s = e) {
		e = pcg_chunk_end(s, chunk, first);
		e = e < T ? e : T;
		const int a = s - left > 0 ? s - left : 0;
		const int z = e + right < T ? e + right : T;
		if (dec(ctx, codes + a, z - a, tmp, err) < 0) {
			free(tmp);
			return -1;
		}
		memcpy(out + (size_t)s * hop, tmp + (size_t)(s - a) * hop,
		       (size_t)(e - s) * hop * sizeof *out);
	}
	free(tmp);
	return 0;
}
