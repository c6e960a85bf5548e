/* model.c: the Llama forward pass on the CPU, as transformers computes it
 * (modeling_llama.py: LlamaRMSNorm, LlamaRotaryEmbedding with
 * _compute_llama3_parameters, LlamaAttention with repeat_kv, LlamaMLP).
 * Matrices stay in the checkpoint's mapping in their dtype; only the norm
 * weights (and f32 matrices that happen to be misaligned) are copied.
 */
#include "model.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"
#include "weights.h"

struct layer {
	float *attn_norm; /* (hidden) */
	pcg_mat wq;       /* (n_heads * head_dim, hidden) */
	pcg_mat wk, wv;   /* (n_kv_heads * head_dim, hidden) */
	pcg_mat wo;       /* (hidden, n_heads * head_dim) */
	float *ffn_norm;  /* (hidden) */
	pcg_mat gate, up; /* (ffn, hidden) */
	pcg_mat down;     /* (hidden, ffn) */
};

struct llama_model {
	llama_config cfg;
	st_ckpt *ck;
	pcg_mat embed;    /* (vocab, hidden) */
	pcg_mat lm_head;  /* (vocab, hidden); embed when tied */
	float *norm;      /* (hidden) */
	struct layer *layers;
	int n_layers;
	float *inv_freq;  /* (head_dim / 2) */
	pcg_weights w;    /* the tensors taken from ck, and f32 copies */
};

struct llama_kv {
	int n_layers, kv_dim, max_pos;
	int len, cap;
	float **k, **v;   /* per layer: (cap, kv_dim) */
};

/* ---------------------------------------------------------------- loading */

/* inv_freq as transformers computes it in f32, with the llama3 rescaling
 * (modeling_rope_utils._compute_llama3_parameters). */
static void rope_init(float *inv_freq, const llama_config *c)
{
	const int hd = c->head_dim;

	for (int i = 0; i < hd / 2; i++) {
		float f = 1.0f / powf(c->rope_theta, (float)(2 * i) / (float)hd);
		if (c->rope_llama3) {
			float old_ctx = (float)c->rope_orig_max_pos;
			float low_wl = old_ctx / c->rope_low_freq;
			float high_wl = old_ctx / c->rope_high_freq;
			float wavelen = 2.0f * (float)M_PI / f;
			if (wavelen > low_wl) {
				f = f / c->rope_factor;
			} else if (!(wavelen < high_wl)) {
				float s = (old_ctx / wavelen - c->rope_low_freq) /
					  (c->rope_high_freq - c->rope_low_freq);
				f = (1.0f - s) * f / c->rope_factor + s * f;
			}
		}
		inv_freq[i] = f;
	}
}

llama_model *llama_open(const char *dir, const llama_open_opts *opts, pcg_err *err)
{
	llama_model *m;
	llama_config *c;
	char path[4096], name[128];

	m = calloc(1, sizeof *m);
	if (m == NULL) {
		pcg_fail(err, "out of memory");
		return NULL;
	}
	c = &m->cfg;
	snprintf(path, sizeof path, "%s/config.json", dir);
	if (llama_config_load(path, c, err) < 0)
		goto fail;
	m->ck = st_open(dir, err);
	m->w.ck = m->ck;
	if (m->ck == NULL)
		goto fail;

	m->n_layers = opts && opts->layers ? opts->n_layers : c->n_layers;
	if (m->n_layers < 1) {
		pcg_fail(err, "layer list is empty");
		goto fail_named;
	}
	m->layers = calloc((size_t)m->n_layers, sizeof *m->layers);
	m->inv_freq = wt_alloc(&m->w, (size_t)(c->head_dim / 2) * sizeof(float));
	if (m->layers == NULL || m->inv_freq == NULL) {
		pcg_fail(err, "out of memory");
		goto fail_named;
	}
	rope_init(m->inv_freq, c);

	const int H = c->hidden, q_dim = c->n_heads * c->head_dim;
	const int kv_dim = c->n_kv_heads * c->head_dim;
	if (wt_mat(&m->w, &m->embed, "model.embed_tokens.weight", c->vocab, H, -1, err) < 0)
		goto fail_named;
	m->norm = wt_vec(&m->w, "model.norm.weight", H, err);
	if (m->norm == NULL)
		goto fail_named;
	if (c->tie)
		m->lm_head = m->embed; /* as transformers: the flag wins over a stored lm_head */
	else if (wt_mat(&m->w, &m->lm_head, "lm_head.weight", c->vocab, H, -1, err) < 0)
		goto fail_named;

	for (int i = 0; i < m->n_layers; i++) {
		int li = opts && opts->layers ? opts->layers[i] : i;
		struct layer *L = &m->layers[i];
		if (li < 0 || li >= c->n_layers) {
			pcg_fail(err, "layer %d out of range (the checkpoint has %d layers)", li,
				 c->n_layers);
			goto fail_named;
		}
#define MAT(field, suffix, r, k) \
		snprintf(name, sizeof name, "model.layers.%d.%s", li, suffix); \
		if (wt_mat(&m->w, &L->field, name, r, k, -1, err) < 0) \
			goto fail_named;
#define VEC(field, suffix, n) \
		snprintf(name, sizeof name, "model.layers.%d.%s", li, suffix); \
		if ((L->field = wt_vec(&m->w, name, n, err)) == NULL) \
			goto fail_named;
		VEC(attn_norm, "input_layernorm.weight", H)
		MAT(wq, "self_attn.q_proj.weight", q_dim, H)
		MAT(wk, "self_attn.k_proj.weight", kv_dim, H)
		MAT(wv, "self_attn.v_proj.weight", kv_dim, H)
		MAT(wo, "self_attn.o_proj.weight", H, q_dim)
		VEC(ffn_norm, "post_attention_layernorm.weight", H)
		MAT(gate, "mlp.gate_proj.weight", c->ffn, H)
		MAT(up, "mlp.up_proj.weight", c->ffn, H)
		MAT(down, "mlp.down_proj.weight", H, c->ffn)
#undef MAT
#undef VEC
	}
	return m;

fail_named:
	pcg_err_prefix(err, dir);
fail:
	llama_close(&m);
	return NULL;
}

void llama_close(llama_model **mp)
{
	llama_model *m = mp ? *mp : NULL;

	if (m == NULL)
		return;
	wt_release(&m->w);
	free(m->layers);
	st_close(&m->ck);
	free(m);
	*mp = NULL;
}

const llama_config *llama_get_config(const llama_model *m) { return &m->cfg; }
int llama_n_layers(const llama_model *m) { return m->n_layers; }
size_t llama_mapped_bytes(const llama_model *m) { return st_mapped_bytes(m->ck); }

int llama_rows_count(const llama_model *m, const llama_rows *rows)
{
	int n = 0;

	if (rows == NULL)
		return m->cfg.vocab;
	for (int i = 0; i < rows->n; i++)
		n += rows->end[i] - rows->begin[i];
	return n;
}

/* --------------------------------------------------------------- KV cache */

llama_kv *llama_kv_new(const llama_model *m)
{
	llama_kv *kv = calloc(1, sizeof *kv);

	if (kv == NULL)
		return NULL;
	kv->n_layers = m->n_layers;
	kv->kv_dim = m->cfg.n_kv_heads * m->cfg.head_dim;
	kv->max_pos = m->cfg.max_pos;
	kv->k = calloc((size_t)kv->n_layers, sizeof *kv->k);
	kv->v = calloc((size_t)kv->n_layers, sizeof *kv->v);
	if (kv->k == NULL || kv->v == NULL)
		llama_kv_free(&kv);
	return kv;
}

void llama_kv_free(llama_kv **kvp)
{
	llama_kv *kv = kvp ? *kvp : NULL;

	if (kv == NULL)
		return;
	for (int l = 0; l < kv->n_layers; l++) {
		if (kv->k)
			free(kv->k[l]);
		if (kv->v)
			free(kv->v[l]);
	}
	free(kv->k);
	free(kv->v);
	free(kv);
	*kvp = NULL;
}

int llama_kv_len(const llama_kv *kv) { return kv->len; }

size_t llama_kv_bytes(const llama_kv *kv)
{
	return (size_t)2 * kv->n_layers * kv->cap * kv->kv_dim * sizeof(float);
}

int llama_kv_truncate(llama_kv *kv, int pos, pcg_err *err)
{
	if (pos < 0 || pos > kv->len)
		return pcg_fail(err, "truncate to position %d: the cache holds %d", pos, kv->len);
	kv->len = pos;
	return 0;
}

/* Room for need positions: capacity doubles, so appends are amortised O(1). */
static int kv_reserve(llama_kv *kv, int need, pcg_err *err)
{
	int cap = kv->cap ? kv->cap : 64;

	if (need <= kv->cap)
		return 0;
	while (cap < need)
		cap *= 2;
	for (int l = 0; l < kv->n_layers; l++) {
		size_t bytes = (size_t)cap * kv->kv_dim * sizeof(float);
		float *k = realloc(kv->k[l], bytes);
		if (k == NULL)
			return pcg_fail(err, "KV cache: out of memory for %d positions", cap);
		kv->k[l] = k;
		float *v = realloc(kv->v[l], bytes);
		if (v == NULL)
			return pcg_fail(err, "KV cache: out of memory for %d positions", cap);
		kv->v[l] = v;
	}
	kv->cap = cap;
	return 0;
}

/* ---------------------------------------------------------------- forward */

/* LlamaRMSNorm: x * rsqrt(mean(x^2) + eps) in f32, then * weight. */
static void rmsnorm(float *out, const float *x, const float *w, int n, float eps)
{
	float ss = 0.0f;

#pragma omp simd reduction(+ : ss)
	for (int i = 0; i < n; i++)
		ss += x[i] * x[i];
	float r = 1.0f / sqrtf(ss / (float)n + eps);
	for (int i = 0; i < n; i++)
		out[i] = w[i] * (x[i] * r);
}

/* apply_rotary_pos_emb with rotate_half: pairs (x[i], x[i + hd/2]). cos and
 * sin of pos * inv_freq in f32, as LlamaRotaryEmbedding. */
static void rope(float *x, int n_heads, int hd, int pos, const float *inv_freq)
{
	const int half = hd / 2;

	for (int i = 0; i < half; i++) {
		float a = (float)pos * inv_freq[i];
		float c = cosf(a), s = sinf(a);
		for (int h = 0; h < n_heads; h++) {
			float *v = x + h * hd;
			float x1 = v[i], x2 = v[i + half];
			v[i] = x1 * c - x2 * s;
			v[i + half] = x2 * c + x1 * s;
		}
	}
}

/* Causal attention of T queries at positions pos0.. over the cache, one
 * (query, head) pair per task; kv head = head / (n_heads / n_kv_heads) is
 * repeat_kv. scores = q.k / sqrt(hd), softmax in f32, sum p * v. */
static int attention(float *out, const float *q, const llama_kv *kv, int l, int T, int pos0,
		     const llama_config *c, pcg_err *err)
{
	const int hd = c->head_dim, nh = c->n_heads, group = c->n_heads / c->n_kv_heads;
	const int kv_dim = kv->kv_dim, ctx = pos0 + T;
	const float scale = 1.0f / sqrtf((float)hd);
	int failed = 0;

#pragma omp parallel
	{
		float *sc = malloc((size_t)ctx * sizeof *sc);
		if (sc == NULL) {
#pragma omp atomic write
			failed = 1;
		}
#pragma omp for schedule(static)
		for (int th = 0; th < T * nh; th++) {
			if (sc == NULL)
				continue;
			const int t = th / nh, h = th % nh, n = pos0 + t + 1;
			const float *qh = q + (size_t)t * nh * hd + h * hd;
			const float *kb = kv->k[l] + (h / group) * hd;
			const float *vb = kv->v[l] + (h / group) * hd;
			float *oh = out + (size_t)t * nh * hd + h * hd;
			float mx = -INFINITY, sum = 0.0f;

			for (int j = 0; j < n; j++) {
				const float *kj = kb + (size_t)j * kv_dim;
				float s = 0.0f;
#pragma omp simd reduction(+ : s)
				for (int i = 0; i < hd; i++)
					s += qh[i] * kj[i];
				sc[j] = s * scale;
				mx = sc[j] > mx ? sc[j] : mx;
			}
			for (int j = 0; j < n; j++) {
				sc[j] = expf(sc[j] - mx);
				sum += sc[j];
			}
			for (int i = 0; i < hd; i++)
				oh[i] = 0.0f;
			for (int j = 0; j < n; j++) {
				const float *vj = vb + (size_t)j * kv_dim;
				const float p = sc[j] / sum;
#pragma omp simd
				for (int i = 0; i < hd; i++)
					oh[i] += p * vj[i];
			}
		}
		free(sc);
	}
	if (failed)
		return pcg_fail(err, "attention: out of memory for %d positions", ctx);
	return 0;
}

static int check_rows(const llama_model *m, const llama_rows *rows, pcg_err *err)
{
	if (rows != NULL && (rows->n < 0 || rows->n > LLAMA_MAX_RANGES))
		return pcg_fail(err, "output rows: %d ranges (0 to %d)", rows->n,
				LLAMA_MAX_RANGES);
	for (int i = 0; rows && i < rows->n; i++)
		if (rows->begin[i] < 0 || rows->end[i] > m->cfg.vocab ||
		    rows->begin[i] >= rows->end[i])
			return pcg_fail(err, "output rows [%d, %d) not within the vocabulary of %d",
					rows->begin[i], rows->end[i], m->cfg.vocab);
	return 0;
}

/* logits [B][count] = lm_head(h) over the chosen rows, in their order. */
static void lm_head_rows(const llama_model *m, const float *h, int B, const llama_rows *rows,
			 float *logits)
{
	const int n_logits = llama_rows_count(m, rows);

	if (rows == NULL) {
		pcg_matmul(logits, n_logits, h, B, &m->lm_head, 0, m->cfg.vocab);
		return;
	}
	for (int i = 0, off = 0; i < rows->n; i++) {
		int len = rows->end[i] - rows->begin[i];
		pcg_matmul(logits + off, n_logits, h, B, &m->lm_head, rows->begin[i], len);
		off += len;
	}
}

int llama_lm_head(const llama_model *m, const float *h, int B, const llama_rows *rows,
		  float *logits, pcg_err *err)
{
	if (B < 1)
		return pcg_fail(err, "lm_head: %d vectors", B);
	if (check_rows(m, rows, err) < 0)
		return -1;
	lm_head_rows(m, h, B, rows, logits);
	return 0;
}

int llama_forward(llama_model *m, llama_kv *kv, const int *tokens, int n, int n_out,
		  const llama_rows *rows, float *logits, pcg_err *err)
{
	return llama_forward_hidden(m, kv, tokens, n, n_out, rows, logits, NULL, err);
}

int llama_forward_hidden(llama_model *m, llama_kv *kv, const int *tokens, int n, int n_out,
			 const llama_rows *rows, float *logits, float *hidden, pcg_err *err)
{
	const llama_config *c = &m->cfg;
	const int H = c->hidden, hd = c->head_dim, F = c->ffn;
	const int q_dim = c->n_heads * hd, kv_dim = c->n_kv_heads * hd;
	const int pos0 = kv->len;
	float *buf, *x, *xb, *q, *att, *hb, *hb2;
	int rc = -1;

	if (n < 1 || n_out < 0 || n_out > n)
		return pcg_fail(err, "forward: %d positions, %d outputs", n, n_out);
	if (pos0 + n > c->max_pos)
		return pcg_fail(err, "forward: positions up to %d exceed max_position_embeddings %d",
				pos0 + n - 1, c->max_pos);
	for (int i = 0; i < n; i++)
		if (tokens[i] < 0 || tokens[i] >= c->vocab)
			return pcg_fail(err, "token %d at index %d out of range [0, %d)", tokens[i],
					i, c->vocab);
	if (check_rows(m, rows, err) < 0)
		return -1;
	if (kv_reserve(kv, pos0 + n, err) < 0)
		return -1;

	/* Activations of the block: x, xb (H); q, att (q_dim); hb, hb2 (F). */
	size_t per = (size_t)2 * H + 2 * (size_t)q_dim + 2 * (size_t)F;
	buf = malloc(per * n * sizeof *buf);
	if (buf == NULL)
		return pcg_fail(err, "forward: out of memory for a block of %d positions", n);
	x = buf;
	xb = x + (size_t)n * H;
	q = xb + (size_t)n * H;
	att = q + (size_t)n * q_dim;
	hb = att + (size_t)n * q_dim;
	hb2 = hb + (size_t)n * F;

	/* inputs_embeds = embed_tokens(input_ids) */
	const size_t es = pcg_dtype_size(m->embed.dtype);
	for (int t = 0; t < n; t++)
		pcg_to_f32(x + (size_t)t * H,
			   (const unsigned char *)m->embed.data + (size_t)tokens[t] * H * es,
			   m->embed.dtype, (size_t)H);

	for (int l = 0; l < m->n_layers; l++) {
		const struct layer *L = &m->layers[l];
		float *kc = kv->k[l] + (size_t)pos0 * kv_dim; /* (n, kv_dim) slots of the block */
		float *vc = kv->v[l] + (size_t)pos0 * kv_dim;

		/* hidden_states = input_layernorm(hidden_states) */
		for (int t = 0; t < n; t++)
			rmsnorm(xb + (size_t)t * H, x + (size_t)t * H, L->attn_norm, H, c->eps);
		/* q_proj, k_proj, v_proj; k and v go straight into the cache */
		pcg_matmul(q, q_dim, xb, n, &L->wq, 0, q_dim);
		pcg_matmul(kc, kv_dim, xb, n, &L->wk, 0, kv_dim);
		pcg_matmul(vc, kv_dim, xb, n, &L->wv, 0, kv_dim);
		/* apply_rotary_pos_emb(q, k, cos, sin) */
		for (int t = 0; t < n; t++) {
			rope(q + (size_t)t * q_dim, c->n_heads, hd, pos0 + t, m->inv_freq);
			rope(kc + (size_t)t * kv_dim, c->n_kv_heads, hd, pos0 + t, m->inv_freq);
		}
		/* softmax(q k^T / sqrt(hd) + causal mask) v */
		if (attention(att, q, kv, l, n, pos0, c, err) < 0)
			goto out;
		/* hidden_states = residual + o_proj(attn_output) */
		pcg_matmul(xb, H, att, n, &L->wo, 0, H);
		for (size_t i = 0; i < (size_t)n * H; i++)
			x[i] += xb[i];
		/* hidden_states = post_attention_layernorm(hidden_states) */
		for (int t = 0; t < n; t++)
			rmsnorm(xb + (size_t)t * H, x + (size_t)t * H, L->ffn_norm, H, c->eps);
		/* mlp: down_proj(silu(gate_proj(x)) * up_proj(x)) */
		pcg_matmul(hb, F, xb, n, &L->gate, 0, F);
		pcg_matmul(hb2, F, xb, n, &L->up, 0, F);
		for (size_t i = 0; i < (size_t)n * F; i++)
			hb[i] = hb[i] / (1.0f + expf(-hb[i])) * hb2[i];
		pcg_matmul(xb, H, hb, n, &L->down, 0, H);
		for (size_t i = 0; i < (size_t)n * H; i++)
			x[i] += xb[i];
	}
	kv->len = pos0 + n;

	/* norm, then lm_head on the last n_out positions and the chosen rows only */
	if (n_out > 0) {
		float *xo = x + (size_t)(n - n_out) * H;
		for (int t = 0; t < n_out; t++)
			rmsnorm(xb + (size_t)t * H, xo + (size_t)t * H, m->norm, H, c->eps);
		if (hidden != NULL)
			memcpy(hidden, xb, (size_t)n_out * H * sizeof *hidden);
		if (logits != NULL)
			lm_head_rows(m, xb, n_out, rows, logits);
	}
	rc = 0;
out:
	free(buf);
	return rc;
}
