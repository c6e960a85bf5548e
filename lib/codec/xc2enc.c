/* xc2enc.c: see xc2enc.h. Layouts: the semantic branch keeps activations
 * time-major [T][C] (rows are frames, products are sgemm over rows); the
 * acoustic branch channel-major [C][L] as PyTorch does, since its
 * anti-aliased activations run along time within a channel. */
#include "xc2enc.h"

#include <cblas.h>
#include <fftw3.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "dtype.h"
#include "matmul.h"
#include "safetensors.h"
#include "xc2_ops.h"
#include "xc2enc_act.h"

#define N_FFT 512
#define WIN 400
#define SHIFT 160
#define N_MEL 80
#define N_BIN (N_FFT / 2 + 1)
#define LN_EPS 1e-5f
#define N_BLOCKS 5
#define FILT 12     /* the anti-aliasing filters' taps */

/* y = x W^T + b (xc2_linear): W f32 (held by the model) or bf16. */
typedef struct lin { pcg_mat W; const float *b; } lin;
typedef struct lnorm { const float *w, *b; int n; } lnorm;
typedef struct conv { const float *w, *b; int out, in, k; } conv; /* w [out][in][k] */
typedef struct snake { float *a, *ib; int c; } snake; /* exp(alpha), 1/(exp(beta) + 1e-9) */

typedef struct wlayer {
	lnorm ffn1_ln, att_ln, conv_ln, dw_ln, ffn2_ln, final_ln;
	lin ffn1_up, ffn1_down, q, k, v, o, ffn2_up, ffn2_down;
	const float *dist;  /* [n_pos][head] relative-key table */
	lin pw1;            /* [2H][H], no bias */
	const float *dw;    /* [H][dw_k] */
	lin pw2;            /* [H][H], no bias */
} wlayer;

typedef struct resunit { snake a1, a2; conv c1, c2; int dil; } resunit;
typedef struct encblock { resunit ru[3]; snake a; conv down; int stride; } encblock;

struct xc2e_model {
	xc2e_info info;
	pcg_dtype wdtype;    /* of the Conformer's matrices */
	lnorm fp_ln;
	lin fp;
	wlayer *L;
	int n_pos, left_max, dw_k;
	conv sem_init, sem_r1, sem_r2, sem_final;
	conv c0, fin;
	encblock blk[N_BLOCKS];
	snake fin_a;
	float up_f[FILT], down_f[FILT];
	lin prior, pin;
	void **own;          /* every array allocated for the model */
	size_t n_own, cap_own;
};

/* ------------------------------------------------------------ loading */

static void *keep(xc2e_model *m, void *p)
{
	if (p == NULL)
		return NULL;
	if (m->n_own == m->cap_own) {
		size_t cap = m->cap_own ? 2 * m->cap_own : 256;
		void **o = realloc(m->own, cap * sizeof *o);
		if (o == NULL) {
			free(p);
			return NULL;
		}
		m->own = o;
		m->cap_own = cap;
	}
	m->own[m->n_own++] = p;
	return p;
}

/* Tensor name (printf format) as f32, owned by m; its shape into shape[]
 * (when not NULL). want: the element count required, or 0 for any. */
static float *load(xc2e_model *m, const st_ckpt *ck, int64_t want, int64_t *shape,
		   pcg_err *err, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static float *load(xc2e_model *m, const st_ckpt *ck, int64_t want, int64_t *shape,
		   pcg_err *err, const char *fmt, ...)
{
	char name[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(name, sizeof name, fmt, ap);
	va_end(ap);
	const st_tensor *t = st_find(ck, name);
	if (t == NULL) {
		pcg_fail(err, "tensor %s missing: is this X-codec2's model.safetensors (with the "
			 "encoder)?", name);
		return NULL;
	}
	if (t->dtype == PCG_DTYPE_OTHER || (want && t->numel != want)) {
		pcg_fail(err, "tensor %s: %s with %lld values, want %lld floats", name,
			 t->dtype_name, (long long)t->numel, (long long)want);
		return NULL;
	}
	float *f = keep(m, malloc((size_t)t->numel * sizeof *f + 1));
	if (f == NULL) {
		pcg_fail(err, "out of memory for %s", name);
		return NULL;
	}
	pcg_to_f32(f, t->data, t->dtype, (size_t)t->numel);
	st_drop(ck, t); /* the copy, not the copy and the mapped file */
	m->info.params += (size_t)t->numel;
	if (shape)
		for (int i = 0; i < 3; i++)
			shape[i] = i < t->ndim ? t->shape[i] : 1;
	return f;
}

static int get_lin(xc2e_model *m, const st_ckpt *ck, lin *l, int out, int in, int bias,
		   const char *prefix, pcg_err *err)
{
	int64_t s[3];
	const float *w = load(m, ck, 0, s, err, "%s.weight", prefix);

	if (w == NULL)
		return -1;
	if ((out && s[0] != out) || (in && s[1] != in))
		return pcg_fail(err, "tensor %s.weight: [%lld, %lld], want [%d, %d]", prefix,
				(long long)s[0], (long long)s[1], out, in);
	l->W = (pcg_mat){ .data = w, .dtype = PCG_F32, .rows = (int)s[0], .cols = (int)s[1] };
	l->b = NULL;
	if (bias && (l->b = load(m, ck, l->W.rows, NULL, err, "%s.bias", prefix)) == NULL)
		return -1;
	return 0;
}

/* A pointwise Conv1d [out][in][1] as a linear map without bias. */
static int get_pw(xc2e_model *m, const st_ckpt *ck, lin *l, int out, int in, const char *prefix,
		  pcg_err *err)
{
	const float *w = load(m, ck, (int64_t)out * in, NULL, err, "%s.weight", prefix);

	l->W = (pcg_mat){ .data = w, .dtype = PCG_F32, .rows = out, .cols = in };
	l->b = NULL;
	return w ? 0 : -1;
}

static int get_ln(xc2e_model *m, const st_ckpt *ck, lnorm *n, int dim, const char *prefix,
		  pcg_err *err)
{
	n->n = dim;
	n->w = load(m, ck, dim, NULL, err, "%s.weight", prefix);
	n->b = n->w ? load(m, ck, dim, NULL, err, "%s.bias", prefix) : NULL;
	return n->b ? 0 : -1;
}

/* A plain Conv1d (bias optional). */
static int get_conv(xc2e_model *m, const st_ckpt *ck, conv *c, int out, int in, int bias,
		    const char *prefix, pcg_err *err)
{
	int64_t s[3];

	if ((c->w = load(m, ck, 0, s, err, "%s.weight", prefix)) == NULL)
		return -1;
	if ((out && s[0] != out) || (in && s[1] != in))
		return pcg_fail(err, "tensor %s.weight: [%lld, %lld, %lld], want [%d, %d, k]",
				prefix, (long long)s[0], (long long)s[1], (long long)s[2], out, in);
	c->out = (int)s[0];
	c->in = (int)s[1];
	c->k = (int)s[2];
	c->b = NULL;
	if (bias && (c->b = load(m, ck, c->out, NULL, err, "%s.bias", prefix)) == NULL)
		return -1;
	return 0;
}

/* A weight-normed Conv1d (torch.nn.utils.weight_norm, dim 0): weight =
 * g * v / ||v|| per output channel; always with a bias. */
static int get_wnconv(xc2e_model *m, const st_ckpt *ck, conv *c, int in, const char *prefix,
		      pcg_err *err)
{
	int64_t s[3];
	float *v = load(m, ck, 0, s, err, "%s.weight_v", prefix);

	if (v == NULL)
		return -1;
	if (in && s[1] != in)
		return pcg_fail(err, "tensor %s.weight_v: %lld input channels, want %d", prefix,
				(long long)s[1], in);
	c->out = (int)s[0];
	c->in = (int)s[1];
	c->k = (int)s[2];
	const float *g = load(m, ck, c->out, NULL, err, "%s.weight_g", prefix);
	if (g == NULL || (c->b = load(m, ck, c->out, NULL, err, "%s.bias", prefix)) == NULL)
		return -1;
	const size_t n = (size_t)c->in * c->k;
	for (int o = 0; o < c->out; o++) {
		float *r = v + (size_t)o * n;
		double ss = 0.0;
		for (size_t i = 0; i < n; i++)
			ss += (double)r[i] * r[i];
		const float scale = g[o] / (float)sqrt(ss);
		for (size_t i = 0; i < n; i++)
			r[i] *= scale;
	}
	c->w = v;
	return 0;
}

static int get_snake(xc2e_model *m, const st_ckpt *ck, snake *sn, int ch, const char *prefix,
		     pcg_err *err)
{
	sn->c = ch;
	sn->a = load(m, ck, ch, NULL, err, "%s.act.alpha", prefix);
	sn->ib = sn->a ? load(m, ck, ch, NULL, err, "%s.act.beta", prefix) : NULL;
	if (sn->ib == NULL)
		return -1;
	for (int i = 0; i < ch; i++) { /* alpha_logscale: exp of both */
		sn->a[i] = expf(sn->a[i]);
		sn->ib[i] = 1.0f / (expf(sn->ib[i]) + 1e-9f);
	}
	return 0;
}

/* kaiser_sinc_filter1d(cutoff 0.25, half_width 0.3, 12 taps) of
 * alias_free_torch, for a checkpoint that lacks the buffers. */
static double bessel_i0(double x)
{
	double s = 1.0, t = 1.0;

	for (int k = 1; k < 50; k++) {
		t *= (x / (2 * k)) * (x / (2 * k));
		s += t;
	}
	return s;
}

static void kaiser_sinc(float *f)
{
	const double cutoff = 0.25, delta_f = 4 * 0.3;
	const int half = FILT / 2;
	const double A = 2.285 * (half - 1) * M_PI * delta_f + 7.95;
	const double beta = A > 50 ? 0.1102 * (A - 8.7)
		: A >= 21 ? 0.5842 * pow(A - 21, 0.4) + 0.07886 * (A - 21) : 0.0;
	double sum = 0.0, h[FILT];

	for (int i = 0; i < FILT; i++) {
		const double r = 2.0 * i / (FILT - 1) - 1.0;
		const double w = bessel_i0(beta * sqrt(1 - r * r)) / bessel_i0(beta);
		const double t = (i - half) + 0.5, x = 2 * cutoff * t;
		h[i] = 2 * cutoff * w * (x == 0 ? 1.0 : sin(M_PI * x) / (M_PI * x));
		sum += h[i];
	}
	for (int i = 0; i < FILT; i++)
		f[i] = (float)(h[i] / sum);
}

static void filters(xc2e_model *m, const st_ckpt *ck)
{
	const st_tensor *u = st_find(ck, "CodecEnc.conv_final_block.0.upsample.filter");
	const st_tensor *d = st_find(ck, "CodecEnc.conv_final_block.0.downsample.lowpass.filter");

	kaiser_sinc(m->up_f);
	memcpy(m->down_f, m->up_f, sizeof m->down_f);
	if (u && u->numel == FILT && u->dtype != PCG_DTYPE_OTHER)
		pcg_to_f32(m->up_f, u->data, u->dtype, FILT);
	if (d && d->numel == FILT && d->dtype != PCG_DTYPE_OTHER)
		pcg_to_f32(m->down_f, d->data, d->dtype, FILT);
}

static int layer_dtype(xc2e_model *m, wlayer *L, pcg_err *err);

static int load_semantic(xc2e_model *m, const st_ckpt *ck, pcg_err *err)
{
	xc2e_info *in = &m->info;
	char p[160];
	int64_t s[3];

	if (get_lin(m, ck, &m->fp, 0, XC2E_FEAT, 1, "semantic_model.feature_projection.projection",
		    err) < 0 ||
	    get_ln(m, ck, &m->fp_ln, XC2E_FEAT, "semantic_model.feature_projection.layer_norm",
		   err) < 0)
		return -1;
	const int H = in->hidden = m->fp.W.rows;
	while (in->layers < XC2E_LAYER) {
		snprintf(p, sizeof p, "semantic_model.encoder.layers.%d.final_layer_norm.weight",
			 in->layers);
		if (st_find(ck, p) == NULL)
			break;
		in->layers++;
	}
	if (in->layers < 1)
		return pcg_fail(err, "no Wav2Vec2Bert layer (semantic_model.encoder.layers.0.*)");
	if ((m->L = keep(m, calloc((size_t)in->layers, sizeof *m->L))) == NULL)
		return pcg_fail(err, "out of memory");
	for (int l = 0; l < in->layers; l++) {
		wlayer *L = &m->L[l];
#define PFX(s_) (snprintf(p, sizeof p, "semantic_model.encoder.layers.%d.%s", l, s_), p)
		if (get_ln(m, ck, &L->ffn1_ln, H, PFX("ffn1_layer_norm"), err) < 0 ||
		    get_lin(m, ck, &L->ffn1_up, 0, H, 1, PFX("ffn1.intermediate_dense"), err) < 0 ||
		    get_lin(m, ck, &L->ffn1_down, H, L->ffn1_up.W.rows, 1, PFX("ffn1.output_dense"),
			    err) < 0 ||
		    get_ln(m, ck, &L->att_ln, H, PFX("self_attn_layer_norm"), err) < 0 ||
		    get_lin(m, ck, &L->q, H, H, 1, PFX("self_attn.linear_q"), err) < 0 ||
		    get_lin(m, ck, &L->k, H, H, 1, PFX("self_attn.linear_k"), err) < 0 ||
		    get_lin(m, ck, &L->v, H, H, 1, PFX("self_attn.linear_v"), err) < 0 ||
		    get_lin(m, ck, &L->o, H, H, 1, PFX("self_attn.linear_out"), err) < 0 ||
		    (L->dist = load(m, ck, 0, s, err, "%s",
				    PFX("self_attn.distance_embedding.weight"))) == NULL ||
		    get_ln(m, ck, &L->conv_ln, H, PFX("conv_module.layer_norm"), err) < 0 ||
		    get_pw(m, ck, &L->pw1, 2 * H, H, PFX("conv_module.pointwise_conv1"), err) < 0)
			return -1;
		if (l == 0) {
			if (s[1] < 1 || H % s[1] || s[0] < 2)
				return pcg_fail(err, "distance_embedding [%lld, %lld] for width %d",
						(long long)s[0], (long long)s[1], H);
			in->heads = H / (int)s[1];
			m->n_pos = (int)s[0];
			/* w2v-bert-2.0: left 64, right 8 */
			m->left_max = m->n_pos - 1 - 8;
			in->ffn = L->ffn1_up.W.rows;
		} else if (s[0] != m->n_pos || s[1] != H / in->heads) {
			return pcg_fail(err, "layer %d: distance_embedding differs from layer 0's", l);
		}
		const float *dw = load(m, ck, 0, s, err, "%s", PFX("conv_module.depthwise_conv.weight"));
		if (dw == NULL)
			return -1;
		if (s[0] != H || s[1] != 1 || s[2] < 1)
			return pcg_fail(err, "%s: [%lld, %lld, %lld], want [%d, 1, k]", p,
					(long long)s[0], (long long)s[1], (long long)s[2], H);
		m->dw_k = (int)s[2];
		L->dw = dw;
		if (get_ln(m, ck, &L->dw_ln, H, PFX("conv_module.depthwise_layer_norm"), err) < 0 ||
		    get_pw(m, ck, &L->pw2, H, H, PFX("conv_module.pointwise_conv2"), err) < 0 ||
		    get_ln(m, ck, &L->ffn2_ln, H, PFX("ffn2_layer_norm"), err) < 0 ||
		    get_lin(m, ck, &L->ffn2_up, in->ffn, H, 1, PFX("ffn2.intermediate_dense"), err) < 0 ||
		    get_lin(m, ck, &L->ffn2_down, H, in->ffn, 1, PFX("ffn2.output_dense"), err) < 0 ||
		    get_ln(m, ck, &L->final_ln, H, PFX("final_layer_norm"), err) < 0 ||
		    layer_dtype(m, L, err) < 0)
			return -1;
#undef PFX
	}
	if (get_conv(m, ck, &m->sem_init, 0, H, 0, "SemanticEncoder_module.initial_conv", err) < 0)
		return -1;
	const int E = m->sem_init.out;
	if (get_conv(m, ck, &m->sem_r1, E, E, 1, "SemanticEncoder_module.residual_blocks.1", err) < 0 ||
	    get_conv(m, ck, &m->sem_r2, E, E, 1, "SemanticEncoder_module.residual_blocks.3", err) < 0 ||
	    get_conv(m, ck, &m->sem_final, 0, E, 0, "SemanticEncoder_module.final_conv", err) < 0)
		return -1;
	return 0;
}

static int load_acoustic(xc2e_model *m, const st_ckpt *ck, pcg_err *err)
{
	char p[160];

	if (get_wnconv(m, ck, &m->c0, 1, "CodecEnc.conv_blocks.0", err) < 0)
		return -1;
	int ch = m->info.ngf = m->c0.out;
	for (int b = 0; b < N_BLOCKS; b++) {
		encblock *B = &m->blk[b];
		for (int r = 0; r < 3; r++) {
			resunit *R = &B->ru[r];
			snprintf(p, sizeof p, "CodecEnc.conv_blocks.%d.block.%d.block.0", b + 1, r);
			if (get_snake(m, ck, &R->a1, ch, p, err) < 0)
				return -1;
			snprintf(p, sizeof p, "CodecEnc.conv_blocks.%d.block.%d.block.1", b + 1, r);
			if (get_wnconv(m, ck, &R->c1, ch, p, err) < 0)
				return -1;
			snprintf(p, sizeof p, "CodecEnc.conv_blocks.%d.block.%d.block.2", b + 1, r);
			if (get_snake(m, ck, &R->a2, ch, p, err) < 0)
				return -1;
			snprintf(p, sizeof p, "CodecEnc.conv_blocks.%d.block.%d.block.3", b + 1, r);
			if (get_wnconv(m, ck, &R->c2, ch, p, err) < 0)
				return -1;
			if (R->c1.out != ch || R->c2.out != ch || R->c1.k != 7 || R->c2.k != 1)
				return pcg_fail(err, "CodecEnc block %d unit %d: not a residual unit of "
						"%d channels", b + 1, r, ch);
			R->dil = r == 0 ? 1 : r == 1 ? 3 : 9;
		}
		snprintf(p, sizeof p, "CodecEnc.conv_blocks.%d.block.3", b + 1);
		if (get_snake(m, ck, &B->a, ch, p, err) < 0)
			return -1;
		snprintf(p, sizeof p, "CodecEnc.conv_blocks.%d.block.4", b + 1);
		if (get_wnconv(m, ck, &B->down, ch, p, err) < 0)
			return -1;
		if (B->down.k % 2 || B->down.k < 2)
			return pcg_fail(err, "%s: kernel %d is not 2 x stride", p, B->down.k);
		B->stride = B->down.k / 2;
		ch = B->down.out;
	}
	int hop = 1;
	for (int b = 0; b < N_BLOCKS; b++)
		hop *= m->blk[b].stride;
	if (hop != XC2E_HOP)
		return pcg_fail(err, "CodecEnc strides make a hop of %d samples, want %d", hop,
				XC2E_HOP);
	if (get_snake(m, ck, &m->fin_a, ch, "CodecEnc.conv_final_block.0", err) < 0 ||
	    get_wnconv(m, ck, &m->fin, ch, "CodecEnc.conv_final_block.1", err) < 0)
		return -1;
	m->info.codec_dim = m->fin.out;
	filters(m, ck);
	return 0;
}

/* l's matrix as bf16 (rounded to nearest even), its f32 copy freed. */
static int to_bf16(xc2e_model *m, lin *l, pcg_err *err);

/* Layer L's matrices in the model's dtype, once the layer is loaded (so
 * that loading holds one layer in f32 at a time). */
static int layer_dtype(xc2e_model *m, wlayer *L, pcg_err *err)
{
	lin *ls[] = { &L->ffn1_up, &L->ffn1_down, &L->q, &L->k, &L->v, &L->o, &L->pw1,
		      &L->pw2, &L->ffn2_up, &L->ffn2_down };

	for (size_t j = 0; m->wdtype == PCG_BF16 && j < sizeof ls / sizeof *ls; j++)
		if (to_bf16(m, ls[j], err) < 0)
			return -1;
	return 0;
}

static int to_bf16(xc2e_model *m, lin *l, pcg_err *err)
{
	const size_t n = (size_t)l->W.rows * l->W.cols;
	const float *w = l->W.data;
	uint16_t *h = keep(m, malloc(n * sizeof *h + 1));

	if (h == NULL)
		return pcg_fail(err, "out of memory");
	for (size_t i = 0; i < n; i++)
		h[i] = pcg_f32_to_bf16(w[i]);
	for (size_t i = 0; i < m->n_own; i++)
		if (m->own[i] == w) {
			free(m->own[i]);
			m->own[i] = NULL;
		}
	l->W = (pcg_mat){ .data = h, .dtype = PCG_BF16, .rows = l->W.rows, .cols = l->W.cols };
	m->info.bf16_bytes += n * sizeof *h;
	return 0;
}


xc2e_model *xc2e_open(const char *path, pcg_err *err)
{
	return xc2e_open_dtype(path, PCG_F32, err);
}

xc2e_model *xc2e_open_dtype(const char *path, pcg_dtype wdtype, pcg_err *err)
{
	xc2e_model *m = calloc(1, sizeof *m);
	st_ckpt *ck = NULL;

	if (m == NULL) {
		pcg_fail(err, "out of memory");
		return NULL;
	}
	if (wdtype != PCG_F32 && wdtype != PCG_BF16) {
		pcg_fail(err, "the encoder's weights are f32 or bf16, not %s", pcg_dtype_name(wdtype));
		goto fail;
	}
	m->wdtype = wdtype;
	if ((ck = st_open(path, err)) == NULL || load_semantic(m, ck, err) < 0 ||
	    load_acoustic(m, ck, err) < 0)
		goto fail;
	const int E = m->sem_final.out, C = m->info.codec_dim;
	if (get_lin(m, ck, &m->prior, 0, E + C, 1, "fc_prior", err) < 0 ||
	    get_lin(m, ck, &m->pin, 0, m->prior.W.rows, 1, "generator.quantizer.project_in", err) < 0)
		goto fail;
	m->info.prior_dim = m->prior.W.rows;
	m->info.levels = m->pin.W.rows;
	if (m->info.levels != 8) {
		pcg_fail(err, "generator.quantizer.project_in has %d outputs: X-codec2's FSQ has 8 "
			 "digits of 4 levels", m->info.levels);
		goto fail;
	}
	st_close(&ck);
	return m;
fail:
	st_close(&ck);
	xc2e_close(&m);
	return NULL;
}

void xc2e_close(xc2e_model **mp)
{
	xc2e_model *m = mp ? *mp : NULL;

	if (m == NULL)
		return;
	for (size_t i = 0; i < m->n_own; i++)
		free(m->own[i]);
	free(m->own);
	free(m);
	*mp = NULL;
}

const xc2e_info *xc2e_get_info(const xc2e_model *m)
{
	return &m->info;
}

int xc2e_n_codes(size_t n)
{
	return (int)(n / XC2E_HOP) + 1;
}

/* ------------------------------------------------------------ front end */

/* SeamlessM4TFeatureExtractor's fbank of x[0..n) (already padded): 2T
 * frames of 80 log-mels, normalised per bin (ddof 1), stacked by 2. */
static int fbank(const float *x, size_t n, int T, float *feat, pcg_err *err)
{
	const int F = 2 * T;
	double *buf = fftw_alloc_real(N_FFT), fb[N_MEL][N_BIN], win[WIN];
	fftw_complex *spec = fftw_alloc_complex(N_BIN);
	double *mel = malloc((size_t)F * N_MEL * sizeof *mel);
	int rc = -1;

	if (!buf || !spec || !mel) {
		pcg_fail(err, "out of memory for the features");
		goto out;
	}
	if ((size_t)(F - 1) * SHIFT + WIN > n) {
		pcg_fail(err, "features: %zu samples for %d frames", n, F);
		goto out;
	}
	/* mel_filter_bank(257, 80, 20, 8000, kaldi, triangular in mel space) */
	double mk[N_MEL + 2], fm[N_BIN];
	const double lo = 1127.0 * log(1.0 + 20.0 / 700.0), hi = 1127.0 * log(1.0 + 8000.0 / 700.0);
	for (int j = 0; j < N_MEL + 2; j++)
		mk[j] = lo + (hi - lo) * j / (N_MEL + 1);
	for (int k = 0; k < N_BIN; k++)
		fm[k] = 1127.0 * log(1.0 + (31.25 * k) / 700.0);
	for (int j = 0; j < N_MEL; j++)
		for (int k = 0; k < N_BIN; k++) {
			const double down = (fm[k] - mk[j]) / (mk[j + 1] - mk[j]);
			const double up = (mk[j + 2] - fm[k]) / (mk[j + 2] - mk[j + 1]);
			fb[j][k] = fmax(0.0, fmin(down, up));
		}
	for (int i = 0; i < WIN; i++) /* povey: symmetric hann ^ 0.85 */
		win[i] = pow(0.5 - 0.5 * cos(2 * M_PI * i / (WIN - 1)), 0.85);
	fftw_plan plan = fftw_plan_dft_r2c_1d(N_FFT, buf, spec, FFTW_ESTIMATE);
	if (plan == NULL) {
		pcg_fail(err, "fftw plan");
		goto out;
	}
	for (int f = 0; f < F; f++) {
		const float *s = x + (size_t)f * SHIFT;
		double mean = 0.0, prev;
		for (int i = 0; i < WIN; i++)
			mean += (double)s[i] * 32768.0;
		mean /= WIN;
		for (int i = 0; i < WIN; i++)
			buf[i] = (double)s[i] * 32768.0 - mean;
		prev = buf[0];
		buf[0] *= 1.0 - 0.97;
		for (int i = 1; i < WIN; i++) { /* from the unemphasised values */
			const double cur = buf[i];
			buf[i] = cur - 0.97 * prev;
			prev = cur;
		}
		for (int i = 0; i < WIN; i++)
			buf[i] *= win[i];
		for (int i = WIN; i < N_FFT; i++)
			buf[i] = 0.0;
		fftw_execute(plan);
		double pw[N_BIN];
		for (int k = 0; k < N_BIN; k++) { /* stored as complex64, then |.|^2 in double */
			const double *c = (const double *)&spec[k]; /* re, im in either typing */
			const double re = (float)c[0], im = (float)c[1];
			pw[k] = re * re + im * im;
		}
		for (int j = 0; j < N_MEL; j++) {
			double e = 0.0;
			for (int k = 0; k < N_BIN; k++)
				e += fb[j][k] * pw[k];
			mel[(size_t)f * N_MEL + j] = (float)log(fmax(e, 1.192092955078125e-07));
		}
	}
	fftw_destroy_plan(plan);
	for (int j = 0; j < N_MEL; j++) {
		double mu = 0.0, var = 0.0;
		for (int f = 0; f < F; f++)
			mu += mel[(size_t)f * N_MEL + j];
		mu /= F;
		for (int f = 0; f < F; f++) {
			const double d = mel[(size_t)f * N_MEL + j] - mu;
			var += d * d;
		}
		var = F > 1 ? var / (F - 1) : 0.0;
		const double sd = sqrt(var + 1e-7);
		for (int f = 0; f < F; f++) /* frame f -> row f / 2, half f % 2 */
			feat[(size_t)(f / 2) * XC2E_FEAT + (f % 2) * N_MEL + j] =
				(float)((mel[(size_t)f * N_MEL + j] - mu) / sd);
	}
	rc = 0;
out:
	fftw_free(buf);
	fftw_free(spec);
	free(mel);
	return rc;
}

/* The wav padded as inference.py pads it: right to T * 320 samples. */
static float *pad_wav(const float *wav, size_t n, int T, size_t left, size_t right)
{
	const size_t len = (size_t)T * XC2E_HOP;
	float *x = calloc(left + len + right, sizeof *x);

	if (x != NULL)
		memcpy(x + left, wav, n * sizeof *x);
	return x;
}

int xc2e_features(const float *wav, size_t n, float *feat, pcg_err *err)
{
	const int T = xc2e_n_codes(n);
	float *x = pad_wav(wav, n, T, 160, 160);

	if (x == NULL)
		return pcg_fail(err, "out of memory for %zu samples", n);
	int rc = fbank(x, (size_t)T * XC2E_HOP + 320, T, feat, err);
	free(x);
	return rc;
}

/* -------------------------------------------------------- time-major ops */

static void layer_norm(float *y, const float *x, int T, const lnorm *n)
{
	xc2_layer_norm(y, x, T, n->n, n->w, n->b, LN_EPS);
}

static void linear(float *y, const float *x, int T, const lin *l)
{
	xc2_linear(y, x, T, &l->W, l->b);
}

static float sigm(float v) { return 1.0f / (1.0f + expf(-v)); }

/* x += scale * ffn(layer_norm(x)) with ffn = down(silu(up(.))). */
static void ffn(float *x, int T, const lnorm *n, const lin *up, const lin *down, float scale,
		float *t1, float *t2)
{
	layer_norm(t1, x, T, n);
	linear(t2, t1, T, up);
	for (size_t i = 0; i < (size_t)T * up->W.rows; i++)
		t2[i] = xc2_silu(t2[i]);
	linear(t1, t2, T, down);
	for (size_t i = 0; i < (size_t)T * down->W.rows; i++)
		x[i] += t1[i] * scale;
}

/* Self-attention with relative-key position scores: scores[i][j] = (q_i.k_j
 * + q_i.E[clamp(j - i, -left, right) + left]) / sqrt(d), softmax over j. */
static void attention(const xc2e_model *m, const wlayer *L, float *x, int T, float *t1,
		      float *q, float *k, float *v, float *ctx, float *sc, float *pe)
{
	const int H = m->info.hidden, nh = m->info.heads, d = H / nh, np = m->n_pos;
	const float s = 1.0f / sqrtf((float)d);

	layer_norm(t1, x, T, &L->att_ln);
	linear(q, t1, T, &L->q);
	linear(k, t1, T, &L->k);
	linear(v, t1, T, &L->v);
	for (int h = 0; h < nh; h++) {
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, d, 1.0f, q + h * d, H,
			    k + h * d, H, 0.0f, sc, T);
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, np, d, 1.0f, q + h * d, H,
			    L->dist, d, 0.0f, pe, np);
		for (int i = 0; i < T; i++) {
			float *r = sc + (size_t)i * T, mx = -INFINITY;
			for (int j = 0; j < T; j++) {
				int dj = j - i;
				dj = dj < -m->left_max ? -m->left_max : dj;
				dj = dj > np - 1 - m->left_max ? np - 1 - m->left_max : dj;
				r[j] = r[j] * s + pe[(size_t)i * np + dj + m->left_max] * s;
				mx = fmaxf(mx, r[j]);
			}
			float sum = 0.0f;
			for (int j = 0; j < T; j++)
				sum += (r[j] = expf(r[j] - mx));
			for (int j = 0; j < T; j++)
				r[j] /= sum;
		}
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, d, T, 1.0f, sc, T,
			    v + h * d, H, 0.0f, ctx + h * d, H);
	}
	linear(t1, ctx, T, &L->o);
	for (size_t i = 0; i < (size_t)T * H; i++)
		x[i] += t1[i];
}

/* The Conformer's convolution module, added to x. */
static void conv_module(const xc2e_model *m, const wlayer *L, float *x, int T, float *t1,
			float *t2, float *g)
{
	const int H = m->info.hidden, K = m->dw_k;

	layer_norm(t1, x, T, &L->conv_ln);
	linear(t2, t1, T, &L->pw1);
	for (int t = 0; t < T; t++) /* GLU over channels: a * sigmoid(b) */
		for (int c = 0; c < H; c++)
			g[(size_t)t * H + c] = t2[(size_t)t * 2 * H + c] *
					       sigm(t2[(size_t)t * 2 * H + H + c]);
	for (int t = 0; t < T; t++) /* depthwise, causal: K - 1 zeros on the left */
		for (int c = 0; c < H; c++) {
			float a = 0.0f;
			for (int j = 0; j < K; j++) {
				const int ts = t - (K - 1) + j;
				if (ts >= 0)
					a += L->dw[(size_t)c * K + j] * g[(size_t)ts * H + c];
			}
			t1[(size_t)t * H + c] = a;
		}
	layer_norm(t2, t1, T, &L->dw_ln);
	for (size_t i = 0; i < (size_t)T * H; i++)
		t2[i] = xc2_silu(t2[i]);
	linear(t1, t2, T, &L->pw2);
	for (size_t i = 0; i < (size_t)T * H; i++)
		x[i] += t1[i];
}

/* Conv1d over time-major x[T][in] -> y[T][out], stride 1, 'same' zero
 * padding (k odd); col: T * in * k floats. */
static void conv_tm(float *y, const float *x, int T, const conv *c, float *col)
{
	const pcg_mat W = { .data = c->w, .dtype = PCG_F32, .rows = c->out, .cols = c->in * c->k };

	xc2_conv1d(y, x, T, c->in, c->k, &W, c->b, col);
}

static int semantic(const xc2e_model *m, const float *feat, int T, float *hidden_out,
		    float *sem, pcg_err *err)
{
	const int H = m->info.hidden, F = m->info.ffn, E = m->sem_init.out;
	const int W = H > E ? H : E, W1 = F > 2 * W ? F : 2 * W;
	const int W2 = W1 > XC2E_FEAT ? W1 : XC2E_FEAT;
	const conv *sc_convs[] = { &m->sem_init, &m->sem_r1, &m->sem_r2, &m->sem_final };
	size_t ncol = 0;
	for (int i = 0; i < 4; i++) {
		const size_t n = (size_t)sc_convs[i]->in * sc_convs[i]->k;
		ncol = n > ncol ? n : ncol;
	}
	/* every buffer once for all layers: the attention's scores are T x T */
	float *x = malloc((size_t)T * H * sizeof *x), *t1 = malloc((size_t)T * W2 * sizeof *t1);
	float *t2 = malloc((size_t)T * W2 * sizeof *t2), *q = malloc((size_t)T * W * sizeof *q);
	float *k = malloc((size_t)T * H * sizeof *k), *v = malloc((size_t)T * H * sizeof *v);
	float *ctx = malloc((size_t)T * H * sizeof *ctx), *sc = malloc((size_t)T * T * sizeof *sc);
	float *pe = malloc((size_t)T * m->n_pos * sizeof *pe), *col = malloc(T * ncol * sizeof *col);
	int rc = -1;

	if (!x || !t1 || !t2 || !q || !k || !v || !ctx || !sc || !pe || !col) {
		pcg_fail(err, "out of memory for %d frames", T);
		goto out;
	}
	layer_norm(t1, feat, T, &m->fp_ln);
	linear(x, t1, T, &m->fp);
	for (int l = 0; l < m->info.layers; l++) {
		const wlayer *L = &m->L[l];
		ffn(x, T, &L->ffn1_ln, &L->ffn1_up, &L->ffn1_down, 0.5f, t1, t2);
		attention(m, L, x, T, t1, q, k, v, ctx, sc, pe);
		conv_module(m, L, x, T, t1, t2, q);
		ffn(x, T, &L->ffn2_ln, &L->ffn2_up, &L->ffn2_down, 0.5f, t1, t2);
		layer_norm(x, x, T, &L->final_ln);
	}
	if (hidden_out)
		memcpy(hidden_out, x, (size_t)T * H * sizeof *x);
	/* SemanticEncoder: y = init(x); the in-place ReLU makes the residual
	 * relu(y): final(res(relu(y)) + relu(y)) */
	conv_tm(t1, x, T, &m->sem_init, col);
	for (size_t i = 0; i < (size_t)T * E; i++)
		t1[i] = fmaxf(t1[i], 0.0f);
	conv_tm(t2, t1, T, &m->sem_r1, col);
	for (size_t i = 0; i < (size_t)T * E; i++)
		t2[i] = fmaxf(t2[i], 0.0f);
	conv_tm(q, t2, T, &m->sem_r2, col);
	for (size_t i = 0; i < (size_t)T * E; i++)
		q[i] += t1[i];
	conv_tm(sem, q, T, &m->sem_final, col);
	rc = 0;
out:
	free(x);
	free(t1);
	free(t2);
	free(q);
	free(k);
	free(v);
	free(ctx);
	free(sc);
	free(pe);
	free(col);
	return rc;
}

/* ----------------------------------------------------- channel-major ops */

/* Conv1d over channel-major x[in][L] -> y[out][Lo] with stride, dilation and
 * zero padding pad, through column blocks of at most about 4 M floats. */
static int conv_cm(float *y, const float *x, int L, const conv *c, int stride, int dil, int pad,
		   int Lo, pcg_err *err)
{
	const int n = c->in * c->k;
	int blk = (int)((4u << 20) / (unsigned)n);
	blk = blk < 1 ? 1 : blk > Lo ? Lo : blk;
	float *col = malloc((size_t)n * blk * sizeof *col);

	if (col == NULL)
		return pcg_fail(err, "out of memory for a convolution");
	for (int l0 = 0; l0 < Lo; l0 += blk) {
		const int nb = Lo - l0 < blk ? Lo - l0 : blk;
		#pragma omp parallel for schedule(static)
		for (int r = 0; r < n; r++) {
			const int i = r / c->k, j = r % c->k;
			const float *xi = x + (size_t)i * L;
			float *cr = col + (size_t)r * nb;
			for (int l = 0; l < nb; l++) {
				const int s = (l0 + l) * stride + j * dil - pad;
				cr[l] = s >= 0 && s < L ? xi[s] : 0.0f;
			}
		}
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, c->out, nb, n, 1.0f, c->w, n,
			    col, nb, 0.0f, y + l0, Lo);
	}
	for (int o = 0; o < c->out; o++)
		for (int l = 0; l < Lo; l++)
			y[(size_t)o * Lo + l] += c->b[o];
	free(col);
	return 0;
}

/* alias_free_torch's Activation1d(SnakeBeta) on each row of x[C][L], in
 * place (xc2enc_act.c), the channels spread over the threads. */
static int act1d(const xc2e_model *m, const snake *sn, float *x, int L, pcg_err *err)
{
	int fail = 0;

	#pragma omp parallel
	{
		float *w = malloc(XC2E_ACT_SCRATCH(L) * sizeof *w);
		if (w == NULL) {
			#pragma omp atomic write
			fail = 1;
		}
		#pragma omp for schedule(static)
		for (int c = 0; c < sn->c; c++)
			if (w != NULL)
				xc2e_act_row(x + (size_t)c * L, L, sn->a[c], sn->ib[c], m->up_f,
					     m->down_f, w);
		free(w);
	}
	return fail ? pcg_fail(err, "out of memory for an activation") : 0;
}

static int acoustic(const xc2e_model *m, const float *wav, int T, float *out, pcg_err *err)
{
	int L = T * XC2E_HOP, C = m->c0.out;
	float *x = malloc((size_t)C * L * sizeof *x), *a = NULL, *b = NULL;
	int rc = -1;

	if (x == NULL || conv_cm(x, wav, L, &m->c0, 1, 1, 3, L, err) < 0)
		goto out;
	for (int bi = 0; bi < N_BLOCKS; bi++) {
		const encblock *B = &m->blk[bi];
		a = malloc((size_t)C * L * sizeof *a);
		b = malloc((size_t)C * L * sizeof *b);
		if (!a || !b) {
			pcg_fail(err, "out of memory for the acoustic encoder");
			goto out;
		}
		for (int r = 0; r < 3; r++) {
			const resunit *R = &B->ru[r];
			memcpy(a, x, (size_t)C * L * sizeof *a);
			if (act1d(m, &R->a1, a, L, err) < 0 ||
			    conv_cm(b, a, L, &R->c1, 1, R->dil, 3 * R->dil, L, err) < 0 ||
			    act1d(m, &R->a2, b, L, err) < 0 || conv_cm(a, b, L, &R->c2, 1, 1, 0, L, err) < 0)
				goto out;
			for (size_t i = 0; i < (size_t)C * L; i++)
				x[i] += a[i];
		}
		if (act1d(m, &B->a, x, L, err) < 0)
			goto out;
		const int s = B->stride, pad = s / 2 + s % 2;
		const int Lo = (L + 2 * pad - B->down.k) / s + 1;
		float *y = malloc((size_t)B->down.out * Lo * sizeof *y);
		if (y == NULL || conv_cm(y, x, L, &B->down, s, 1, pad, Lo, err) < 0) {
			free(y);
			goto out;
		}
		free(x);
		free(a);
		free(b);
		a = b = NULL;
		x = y;
		L = Lo;
		C = B->down.out;
	}
	if (L != T) {
		pcg_fail(err, "acoustic encoder: %d frames, want %d", L, T);
		goto out;
	}
	if (act1d(m, &m->fin_a, x, L, err) < 0 || (a = malloc((size_t)m->fin.out * L * sizeof *a)) ==
	    NULL || conv_cm(a, x, L, &m->fin, 1, 1, 1, L, err) < 0)
		goto out;
	for (int c = 0; c < m->fin.out; c++) /* to time-major */
		for (int t = 0; t < T; t++)
			out[(size_t)t * m->fin.out + c] = a[(size_t)c * L + t];
	rc = 0;
out:
	if (rc < 0 && err->msg[0] == '\0')
		pcg_fail(err, "out of memory for the acoustic encoder");
	free(x);
	free(a);
	free(b);
	return rc;
}

/* --------------------------------------------------------------- FSQ */

int xc2e_fsq_digit(float z)
{
	/* vector-quantize-pytorch 1.17.8, levels 4 in f32: half_l = 3 * 1.001 / 2,
	 * offset 0.5, shift = atanh(offset / half_l); ResidualFSQ bounds once and
	 * its FSQ layer again, then torch.round (half to even) */
	const float half_l = (3.0f * 1.001f) / 2.0f, shift = atanhf(0.5f / half_l);

	for (int i = 0; i < 2; i++)
		z = tanhf(z + shift) * half_l - 0.5f;
	const int d = (int)rintf(z);
	return d < -2 ? -2 : d > 1 ? 1 : d;
}

int xc2e_encode(xc2e_model *m, const float *wav, size_t n, int32_t *codes, xc2e_stages *st,
		pcg_err *err)
{
	const xc2e_info *in = &m->info;
	const int T = xc2e_n_codes(n), E = m->sem_final.out, C = in->codec_dim, P = in->prior_dim;
	float *feat = malloc((size_t)T * XC2E_FEAT * sizeof *feat);
	float *hid = st && st->hidden ? st->hidden : NULL;
	float *cat = malloc((size_t)T * (E + C) * sizeof *cat), *sem = malloc((size_t)T * E * sizeof *sem);
	float *ac = malloc((size_t)T * C * sizeof *ac), *pri = malloc((size_t)T * P * sizeof *pri);
	float *pre = malloc((size_t)T * in->levels * sizeof *pre);
	float *w = pad_wav(wav, n, T, 0, 0);
	int rc = -1;

	if (!feat || !cat || !sem || !ac || !pri || !pre || !w) {
		pcg_fail(err, "out of memory for %d frames", T);
		goto out;
	}
	double t[4];
	t[0] = pcg_now();
	if (xc2e_features(wav, n, feat, err) < 0)
		goto out;
	t[1] = pcg_now();
	if (semantic(m, feat, T, hid, sem, err) < 0)
		goto out;
	t[2] = pcg_now();
	if (acoustic(m, w, T, ac, err) < 0)
		goto out;
	t[3] = pcg_now();
	for (int i = 0; st && i < 3; i++)
		st->seconds[i] = t[i + 1] - t[i];
	for (int t = 0; t < T; t++) {
		memcpy(cat + (size_t)t * (E + C), sem + (size_t)t * E, E * sizeof *cat);
		memcpy(cat + (size_t)t * (E + C) + E, ac + (size_t)t * C, C * sizeof *cat);
	}
	linear(pri, cat, T, &m->prior);
	linear(pre, pri, T, &m->pin);
	for (int t = 0; t < T; t++) {
		int32_t idx = 0, base = 1;
		for (int j = 0; j < in->levels; j++, base *= 4)
			idx += (xc2e_fsq_digit(pre[(size_t)t * in->levels + j]) + 2) * base;
		codes[t] = idx;
	}
	if (st) {
		if (st->features)
			memcpy(st->features, feat, (size_t)T * XC2E_FEAT * sizeof *feat);
		if (st->semantic)
			memcpy(st->semantic, sem, (size_t)T * E * sizeof *sem);
		if (st->acoustic)
			memcpy(st->acoustic, ac, (size_t)T * C * sizeof *ac);
		if (st->prior)
			memcpy(st->prior, pri, (size_t)T * P * sizeof *pri);
		if (st->prequant)
			memcpy(st->prequant, pre, (size_t)T * in->levels * sizeof *pre);
	}
	rc = 0;
out:
	free(feat);
	free(cat);
	free(sem);
	free(ac);
	free(pri);
	free(pre);
	free(w);
	return rc;
}
