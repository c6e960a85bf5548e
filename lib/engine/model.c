/* model.c: the Llama forward pass, as transformers computes it
 * (modeling_llama.py: LlamaRMSNorm, LlamaRotaryEmbedding with
 * _compute_llama3_parameters, LlamaAttention with repeat_kv, LlamaMLP),
 * written once against the operations of lib/engine/backend.h (the CPU, or a
 * CUDA device), over a model that model_load.c opened: the KV cache, the
 * backbone's layers and the Llasa+ heads batched over sequences, lm_head
 * over the requested rows.
 */
#include "model.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "model_impl.h"

struct llama_kv {
	pcg_backend *be;  /* the model's: k and v are its memory */
	int n_layers, kv_dim, max_pos;
	int len, cap;
	float **k, **v;   /* per layer: (cap, kv_dim) */
};

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
	kv->be = m->be;
	kv->n_layers = m->n_layers + m->n_mtp; /* the heads' layers after the backbone's */
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
		if (kv->k && kv->k[l])
			pcg_backend_free(kv->be, kv->k[l]);
		if (kv->v && kv->v[l])
			pcg_backend_free(kv->be, kv->v[l]);
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

/* Room for need positions: capacity doubles, so appends are amortised O(1).
 * The positions held are kept (a device copies them to the new block). */
static int kv_reserve(llama_kv *kv, int need, pcg_err *err)
{
	int cap = kv->cap ? kv->cap : 64;

	if (need <= kv->cap)
		return 0;
	while (cap < need)
		cap *= 2;
	const size_t keep = (size_t)kv->len * kv->kv_dim * sizeof(float);
	const size_t bytes = (size_t)cap * kv->kv_dim * sizeof(float);
	char what[64];
	snprintf(what, sizeof what, "KV cache of %d positions", cap);
	for (int l = 0; l < kv->n_layers; l++) {
		if (pcg_backend_grow(kv->be, (void **)&kv->k[l], keep, bytes, what, err) < 0 ||
		    pcg_backend_grow(kv->be, (void **)&kv->v[l], keep, bytes, what, err) < 0)
			return -1;
	}
	kv->cap = cap;
	return 0;
}

int llama_kv_copy(llama_kv *dst, const llama_kv *src, int n, pcg_err *err)
{
	if (n < 0 || n > src->len || dst->kv_dim != src->kv_dim || dst->n_layers != src->n_layers)
		return pcg_fail(err, "copy %d positions of a cache holding %d (or of another model)",
				n, src->len);
	if (!pcg_backend_is_host(dst->be) || !pcg_backend_is_host(src->be))
		return pcg_fail(err, "a device's KV cache is not copied");
	dst->len = 0;
	if (kv_reserve(dst, n, err) < 0)
		return -1;
	const size_t bytes = (size_t)n * src->kv_dim * sizeof(float);
	for (int l = 0; l < src->n_layers; l++) {
		memcpy(dst->k[l], src->k[l], bytes);
		memcpy(dst->v[l], src->v[l], bytes);
	}
	dst->len = n;
	return 0;
}

/* ---------------------------------------------------------------- forward
 *
 * A pass runs the positions of one or more sequences, each with its own
 * cache, as one block of rows: each product over the rows reads its weight
 * matrix once for all of them, while k, v, RoPE and attention run per
 * sequence, on its cache at its positions. llama_forward is a pass of one.
 *
 * A row's products must not depend on the rows it shares them with, so
 * that a sequence gives in a batch what it gives alone. On the CPU, products
 * of up to PCG_MATMUL_SMALL rows have that property and longer ones do not
 * (OpenBLAS; lib/engine/matmul.h). So the rows of the short sequences (at most
 * EXACT_MAX positions) come first and go through matmul_rows, which gives
 * every row what a product of at most PCG_MATMUL_SMALL rows gives it however
 * many rows there are; a longer sequence's rows are a product of their own
 * (matmul), as when it runs alone. A position computed in a prefill of up
 * to EXACT_MAX positions, a verification block or a single step thus gets
 * the same bits whichever way it was cut.
 */

/* Up to this many positions a sequence's rows go through the streaming
 * kernels (matmul_rows: each row as alone, and on this engine's CPUs 2 to 4
 * times faster than widened tiles + sgemm below 64 rows for f32/f16/bf16);
 * beyond, a product of their own through sgemm, which wins there. */
#define EXACT_MAX 64

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

/* y = x W^T for B rows of x (rows [r0, r0 + nr) of W). exact: each row as
 * in a product of at most PCG_MATMUL_SMALL rows (matmul_rows). */
static int mm(pcg_backend *be, float *y, int ldy, const float *x, int B, int exact,
	      const pcg_mat *W, int r0, int nr, pcg_err *err)
{
	if (exact)
		return pcg_backend_matmul_rows(be, y, ldy, x, B, W, r0, nr, err);
	return pcg_backend_matmul(be, y, ldy, x, B, W, r0, nr, err);
}

/* logits [B][count] = lm_head(h) over the chosen rows, in their order; h
 * and logits are backend memory; exact as mm. */
static int lm_head_rows(const llama_model *m, const float *h, int B, int exact,
			const llama_rows *rows, float *logits, pcg_err *err)
{
	pcg_backend *be = m->be;
	const int n_logits = llama_rows_count(m, rows);

	if (rows == NULL)
		return mm(be, logits, n_logits, h, B, exact, &m->lm_head, 0, m->cfg.vocab, err);
	for (int i = 0, off = 0; i < rows->n; i++) {
		int len = rows->end[i] - rows->begin[i];
		if (mm(be, logits + off, n_logits, h, B, exact, &m->lm_head, rows->begin[i], len,
		       err) < 0)
			return -1;
		off += len;
	}
	return 0;
}

int llama_lm_head(const llama_model *m, const float *h, int B, const llama_rows *rows,
		  float *logits, pcg_err *err)
{
	pcg_backend *be = m->be;
	const size_t hb = (size_t)B * m->cfg.hidden * sizeof(float);
	void *d;
	int rc;

	if (B < 1)
		return pcg_fail(err, "lm_head: %d vectors", B);
	if (check_rows(m, rows, err) < 0)
		return -1;
	const size_t lb = (size_t)B * llama_rows_count(m, rows) * sizeof(float);
	/* the same products as a forward pass of B positions */
	const int exact = B <= EXACT_MAX;
	if (pcg_backend_is_host(be))
		return lm_head_rows(m, h, B, exact, rows, logits, err);
	/* a device: h up, the product, the logits down */
	if (pcg_backend_alloc(be, &d, hb + lb, "lm_head", err) < 0)
		return -1;
	rc = pcg_backend_upload(be, d, h, hb, err);
	if (rc == 0)
		rc = lm_head_rows(m, d, B, exact, rows, (float *)((char *)d + hb), err);
	if (rc == 0)
		rc = pcg_backend_download(be, logits, (char *)d + hb, lb, err);
	pcg_backend_free(be, d);
	return rc;
}


/* The activations of a pass of n positions: the host's are malloc'd per
 * pass (passes may run in several threads), a device's are kept. */
static float *scratch(llama_model *m, size_t bytes, pcg_err *err)
{
	pcg_backend *be = m->be;

	if (pcg_backend_is_host(be)) {
		float *p = malloc(bytes);
		if (p == NULL)
			pcg_fail(err, "forward: out of memory for %zu bytes of activations", bytes);
		return p;
	}
	if (bytes > m->scratch_bytes) {
		if (m->scratch)
			pcg_backend_free(be, m->scratch);
		m->scratch = NULL;
		m->scratch_bytes = 0;
		if (pcg_backend_alloc(be, &m->scratch, bytes, "forward activations", err) < 0)
			return NULL;
		m->scratch_bytes = bytes;
	}
	return m->scratch;
}

/* Checks what a pass is given, before anything changes; seq names the
 * sequence in messages when there are several. */
static int check_seqs(const llama_model *m, const llama_seq *s, int n_seqs, pcg_err *err)
{
	const llama_config *c = &m->cfg;
	const int kv_dim = c->n_kv_heads * c->head_dim;
	char seq[32] = "";

	if (n_seqs < 1)
		return pcg_fail(err, "forward: %d sequences", n_seqs);
	for (int i = 0; i < n_seqs; i++) {
		const llama_kv *kv = s[i].kv;
		if (n_seqs > 1)
			snprintf(seq, sizeof seq, "sequence %d: ", i);
		if (kv == NULL || kv->be != m->be || kv->n_layers != m->n_layers + m->n_mtp ||
		    kv->kv_dim != kv_dim)
			return pcg_fail(err, "forward: %snot a cache of this model", seq);
		for (int j = 0; j < i; j++)
			if (s[j].kv == kv)
				return pcg_fail(err, "forward: sequences %d and %d share a cache", j, i);
		if (s[i].n < 1 || s[i].n_out < 0 || s[i].n_out > s[i].n)
			return pcg_fail(err, "forward: %s%d positions, %d outputs", seq, s[i].n,
					s[i].n_out);
		if (s[i].tokens == NULL)
			return pcg_fail(err, "forward: %sno tokens", seq);
		if (s[i].n > c->max_pos - kv->len)
			return pcg_fail(err, "forward: %spositions up to %d exceed "
					"max_position_embeddings %d", seq, kv->len + s[i].n - 1,
					c->max_pos);
		for (int t = 0; t < s[i].n; t++)
			if (s[i].tokens[t] < 0 || s[i].tokens[t] >= c->vocab)
				return pcg_fail(err, "%stoken %d at index %d out of range [0, %d)",
						seq, s[i].tokens[t], t, c->vocab);
	}
	return 0;
}

/* Where each sequence's rows are among the pass's: position rows row..,
 * output rows orow.. (the last n_out positions after the final norm). */
struct seq_at {
	int row, orow;
};

/* The pass's layout: the short sequences that want logits, the other short
 * ones, then the long ones, each group in the caller's order. */
struct pass {
	struct seq_at *at;
	int rows, outs;      /* all positions, all outputs */
	int short_rows;      /* positions of the short sequences: rows [0, short_rows) */
	int short_lm;        /* outputs of the short sequences that want logits: [0, short_lm) */
	int lm;              /* 1: some sequence wants logits */
};

static int is_long(const llama_seq *s) { return s->n > EXACT_MAX; }

static int pass_layout(struct pass *p, const llama_seq *s, int n_seqs, pcg_err *err)
{
	p->at = malloc((size_t)n_seqs * sizeof *p->at);
	if (p->at == NULL)
		return pcg_fail(err, "forward: out of memory for %d sequences", n_seqs);
	p->rows = p->outs = p->short_rows = p->short_lm = p->lm = 0;
	for (int group = 0; group < 3; group++) {
		for (int i = 0; i < n_seqs; i++) {
			const int g = is_long(&s[i]) ? 2 : s[i].out != NULL ? 0 : 1;
			if (g != group)
				continue;
			p->at[i] = (struct seq_at){ p->rows, p->outs };
			p->rows += s[i].n;
			p->outs += s[i].n_out;
			p->lm |= s[i].out != NULL && s[i].n_out > 0;
		}
		if (group == 0)
			p->short_lm = p->outs;
		if (group == 1)
			p->short_rows = p->rows;
	}
	return 0;
}

/* y = x W^T over all rows of a pass: the short sequences' together (row
 * exact), each long one's alone. */
static int pass_mm(const llama_model *m, const struct pass *p, const llama_seq *s, int n_seqs,
		   float *y, int ldy, const float *x, const pcg_mat *W, pcg_err *err)
{
	const int K = W->cols;

	if (p->short_rows > 0 &&
	    mm(m->be, y, ldy, x, p->short_rows, 1, W, 0, W->rows, err) < 0)
		return -1;
	for (int i = 0; i < n_seqs; i++) {
		const int r = p->at[i].row;
		if (is_long(&s[i]) && mm(m->be, y + (size_t)r * ldy, ldy, x + (size_t)r * K,
					 s[i].n, 0, W, 0, W->rows, err) < 0)
			return -1;
	}
	return 0;
}

/* The activations of a pass of N rows (backend memory): the residual
 * stream x and the work buffers of a layer; fin and y [N, H] for the
 * Llasa+ heads (NULL without). */
struct acts {
	float *x, *xb, *q, *att, *hb, *hb2, *fin, *y;
	int N;
};

/* The outputs of T positions of a Q or K projection whose rows are in
 * llama.cpp's order, put in Hugging Face's: within each head of hd values,
 * element 2j + c goes to c * hd / 2 + j. */
static void unpermute(float *x, int T, int heads, int hd)
{
	float tmp[hd];
	const int half = hd / 2;

	for (int i = 0; i < T * heads; i++) {
		float *h = x + (size_t)i * hd;
		for (int j = 0; j < half; j++) {
			tmp[j] = h[2 * j];
			tmp[half + j] = h[2 * j + 1];
		}
		memcpy(h, tmp, (size_t)hd * sizeof *h);
	}
}

/* One decoder layer L over the rows of a pass, on residual stream x (a->x
 * for the backbone, a->y for a head), its keys and values in cache layer
 * l of every sequence. */
static int layer_pass(llama_model *m, const struct pass *p, llama_seq *s, int n_seqs,
		      const struct layer *L, int l, float *x, const struct acts *a, pcg_err *err)
{
	const llama_config *c = &m->cfg;
	pcg_backend *be = m->be;
	const int H = c->hidden, hd = c->head_dim, F = c->ffn, N = a->N;
	const int q_dim = c->n_heads * hd, kv_dim = c->n_kv_heads * hd;
	float *xb = a->xb, *q = a->q, *att = a->att, *hb = a->hb, *hb2 = a->hb2;

#define OP(call) do { if ((call) < 0) return -1; } while (0)
	/* hidden_states = input_layernorm(hidden_states) */
	OP(pcg_backend_rmsnorm(be, xb, x, L->attn_norm, N, H, c->eps, err));
	/* q_proj */
	OP(pass_mm(m, p, s, n_seqs, q, q_dim, xb, &L->wq, err));
	if (m->qk_perm) /* a GGUF file's row order (host memory) */
		unpermute(q, N, c->n_heads, hd);
	for (int i = 0; i < n_seqs; i++) {
		const llama_kv *kv = s[i].kv;
		const int n = s[i].n, r = p->at[i].row, pos0 = kv->len;
		float *qs = q + (size_t)r * q_dim;
		float *kc = kv->k[l] + (size_t)pos0 * kv_dim; /* (n, kv_dim) slots */
		float *vc = kv->v[l] + (size_t)pos0 * kv_dim;
		/* k_proj, v_proj, straight into the sequence's cache */
		OP(mm(be, kc, kv_dim, xb + (size_t)r * H, n, 0, &L->wk, 0, kv_dim, err));
		OP(mm(be, vc, kv_dim, xb + (size_t)r * H, n, 0, &L->wv, 0, kv_dim, err));
		if (m->qk_perm)
			unpermute(kc, n, c->n_kv_heads, hd);
		/* apply_rotary_pos_emb(q, k, cos, sin) at its positions */
		OP(pcg_backend_rope(be, qs, n, c->n_heads, hd, pos0, m->inv_freq, err));
		OP(pcg_backend_rope(be, kc, n, c->n_kv_heads, hd, pos0, m->inv_freq, err));
		/* softmax(q k^T / sqrt(hd) + causal mask) v over its cache */
		OP(pcg_backend_attention(be, att + (size_t)r * q_dim, qs, kv->k[l], kv->v[l], n,
					 pos0, c->n_heads, c->n_kv_heads, hd, err));
	}
	/* hidden_states = residual + o_proj(attn_output) */
	OP(pass_mm(m, p, s, n_seqs, xb, H, att, &L->wo, err));
	OP(pcg_backend_add(be, x, xb, (size_t)N * H, err));
	/* hidden_states = post_attention_layernorm(hidden_states) */
	OP(pcg_backend_rmsnorm(be, xb, x, L->ffn_norm, N, H, c->eps, err));
	/* mlp: down_proj(silu(gate_proj(x)) * up_proj(x)) */
	OP(pass_mm(m, p, s, n_seqs, hb, F, xb, &L->gate, err));
	OP(pass_mm(m, p, s, n_seqs, hb2, F, xb, &L->up, err));
	OP(pcg_backend_swiglu(be, hb, hb2, (size_t)N * F, err));
	OP(pass_mm(m, p, s, n_seqs, xb, H, hb, &L->down, err));
	OP(pcg_backend_add(be, x, xb, (size_t)N * H, err));
#undef OP
	return 0;
}

/* The Llasa+ heads over every row of a pass (Llasa+'s
 * inference_speedup_backbone_and_mtp1mtp2): hid = the final norm of the
 * backbone's stream; head k's features = proj_k(local_RMSNorm_k(input))
 * with input hid for k = 1 and head k-1's output after; its output =
 * block_k(features) at the same positions, its keys and values in cache
 * layer n_layers + k - 1. Each sequence asking gets the outputs of its last
 * n_out positions. */
static int heads_pass(llama_model *m, const struct pass *p, llama_seq *s, int n_seqs,
		      const struct acts *a, pcg_err *err)
{
	const llama_config *c = &m->cfg;
	pcg_backend *be = m->be;
	const int H = c->hidden, N = a->N, nh = m->n_mtp;
	const float *in = a->fin;

#define OP(call) do { if ((call) < 0) return -1; } while (0)
	/* hid = lm_outputs.hidden_states[-1] (after model.norm) */
	OP(pcg_backend_rmsnorm(be, a->fin, a->x, m->norm, N, H, c->eps, err));
	for (int k = 0; k < nh; k++) {
		const struct mtp_head *hd = &m->mtp[k];
		/* mtp_k_features = mtp_k_proj(mtp_k_local_RMSNorm(input)) */
		OP(pcg_backend_rmsnorm(be, a->xb, in, hd->norm, N, H, m->mtp_eps, err));
		OP(pass_mm(m, p, s, n_seqs, a->y, H, a->xb, &hd->proj, err));
		for (int r = 0; r < N; r++)
			OP(pcg_backend_add(be, a->y + (size_t)r * H, hd->bias, (size_t)H, err));
		/* mtp_k_outputs = mtp_k_block(mtp_k_features, causal mask, positions) */
		OP(layer_pass(m, p, s, n_seqs, &hd->blk, m->n_layers + k, a->y, a, err));
		for (int i = 0; i < n_seqs; i++) {
			const int n_out = s[i].n_out, r0 = p->at[i].row + s[i].n - n_out;
			for (int t = 0; s[i].heads != NULL && t < n_out; t++)
				OP(pcg_backend_download(be, s[i].heads + ((size_t)t * nh + k) * H,
							a->y + (size_t)(r0 + t) * H,
							(size_t)H * sizeof(float), err));
		}
		in = a->y;
	}
#undef OP
	return 0;
}

/* The pass over sequences s, checked; with samp, what goes to out is
 * pcg_probs of the logits, computed where the pass ran. The caches grow
 * only when the whole pass succeeded. */
static int pass(llama_model *m, llama_seq *s, int n_seqs, const llama_rows *rows,
		const pcg_sampling *samp, pcg_err *err)
{
	const llama_config *c = &m->cfg;
	pcg_backend *be = m->be;
	const int H = c->hidden, hd = c->head_dim, F = c->ffn;
	const int q_dim = c->n_heads * hd;
	struct pass p = { 0 };
	struct acts a;
	float *buf = NULL, *x, *xb, *lg;
	int rc = -1;

	if (check_seqs(m, s, n_seqs, err) < 0 || check_rows(m, rows, err) < 0)
		return -1;
	for (int i = 0; i < n_seqs; i++)
		if (kv_reserve(s[i].kv, s[i].kv->len + s[i].n, err) < 0)
			return -1;
	if (pass_layout(&p, s, n_seqs, err) < 0)
		return -1;
	const int n_logits = llama_rows_count(m, rows); /* rows checked */

	/* Activations of the rows: x, xb (H); q, att (q_dim); hb, hb2 (F);
	 * with heads fin, y (H); the logits of the outputs, unless they go
	 * straight into the caller's array (one sequence on the host). */
	const int direct = pcg_backend_is_host(be) && n_seqs == 1;
	const size_t per = (size_t)(m->n_mtp > 0 ? 4 : 2) * H + 2 * (size_t)q_dim + 2 * (size_t)F;
	const size_t lg_n = direct || !p.lm ? 0 : (size_t)p.outs * n_logits;
	const int N = p.rows;
	buf = scratch(m, (per * N + lg_n) * sizeof *buf, err);
	if (buf == NULL)
		goto out;
	a.N = N;
	a.x = x = buf;
	a.xb = xb = x + (size_t)N * H;
	a.q = xb + (size_t)N * H;
	a.att = a.q + (size_t)N * q_dim;
	a.hb = a.att + (size_t)N * q_dim;
	a.hb2 = a.hb + (size_t)N * F;
	a.fin = m->n_mtp > 0 ? a.hb2 + (size_t)N * F : NULL;
	a.y = m->n_mtp > 0 ? a.fin + (size_t)N * H : NULL;
	lg = direct ? s[0].out : a.hb2 + (size_t)N * F + (m->n_mtp > 0 ? (size_t)2 * N * H : 0);

#define OP(call) do { if ((call) < 0) goto out; } while (0)
	/* inputs_embeds = embed_tokens(input_ids) */
	for (int i = 0; i < n_seqs; i++)
		OP(pcg_backend_embed(be, x + (size_t)p.at[i].row * H, &m->embed, s[i].tokens,
				     s[i].n, err));

	for (int l = 0; l < m->n_layers; l++)
		OP(layer_pass(m, &p, s, n_seqs, &m->layers[l], l, x, &a, err));
	if (m->n_mtp > 0)
		OP(heads_pass(m, &p, s, n_seqs, &a, err));

	/* norm of each sequence's last n_out positions into its output rows of
	 * xb; lm_head on those and the chosen vocabulary rows only */
	for (int i = 0; i < n_seqs; i++) {
		const int n = s[i].n, n_out = s[i].n_out, r = p.at[i].row;
		if (n_out > 0)
			OP(pcg_backend_rmsnorm(be, xb + (size_t)p.at[i].orow * H,
					       x + (size_t)(r + n - n_out) * H, m->norm, n_out, H,
					       c->eps, err));
	}
	if (p.short_lm > 0)
		OP(lm_head_rows(m, xb, p.short_lm, 1, rows, lg, err));
	for (int i = 0; i < n_seqs; i++) {
		const int o = p.at[i].orow, n_out = s[i].n_out;
		float *lgs = lg + (size_t)o * n_logits;
		if (n_out > 0 && s[i].out != NULL) {
			if (is_long(&s[i]))
				OP(lm_head_rows(m, xb + (size_t)o * H, n_out, 0, rows, lgs, err));
			if (samp != NULL)
				OP(pcg_backend_probs(be, lgs, lgs, n_out, n_logits, samp, err));
			if (!direct)
				OP(pcg_backend_download(be, s[i].out, lgs,
							(size_t)n_out * n_logits * sizeof *lgs,
							err));
		}
		if (n_out > 0 && s[i].hidden != NULL)
			OP(pcg_backend_download(be, s[i].hidden, xb + (size_t)o * H,
						(size_t)n_out * H * sizeof *s[i].hidden, err));
	}
#undef OP
	for (int i = 0; i < n_seqs; i++)
		s[i].kv->len += s[i].n;
	rc = 0;
out:
	if (pcg_backend_is_host(be))
		free(buf);
	free(p.at);
	return rc;
}

int llama_forward_batch(llama_model *m, llama_seq *seqs, int n_seqs, const llama_rows *rows,
			const pcg_sampling *samp, pcg_err *err)
{
	if (samp != NULL && pcg_sampling_check(samp, err) < 0)
		return -1;
	return pass(m, seqs, n_seqs, rows, samp, err);
}

int llama_forward(llama_model *m, llama_kv *kv, const int *tokens, int n, int n_out,
		  const llama_rows *rows, float *logits, pcg_err *err)
{
	llama_seq s = { kv, tokens, n, n_out, logits, NULL, NULL };

	return pass(m, &s, 1, rows, NULL, err);
}

int llama_forward_hidden(llama_model *m, llama_kv *kv, const int *tokens, int n, int n_out,
			 const llama_rows *rows, float *logits, float *hidden, pcg_err *err)
{
	llama_seq s = { kv, tokens, n, n_out, logits, hidden, NULL };

	return pass(m, &s, 1, rows, NULL, err);
}

int llama_forward_probs(llama_model *m, llama_kv *kv, const int *tokens, int n, int n_out,
			const llama_rows *rows, const pcg_sampling *samp, float *probs,
			float *hidden, pcg_err *err)
{
	llama_seq s = { kv, tokens, n, n_out, probs, hidden, NULL };

	return llama_forward_batch(m, &s, 1, rows, samp, err);
}
