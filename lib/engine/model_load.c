/* model_load.c: a Llama checkpoint opened as a llama_model (model.h): a
 * Hugging Face folder (safetensors) or a GGUF file, a Llasa+ checkpoint's
 * heads with it, every tensor checked by name and shape. On the CPU,
 * matrices stay in the checkpoint's mapping in their dtype and only the
 * norm weights (and GGUF's Q and K rows for a device, and quantized rows
 * repacked for the CPU's kernels) are copied; on a device, every tensor is
 * uploaded once, in its dtype, when the model opens. The forward pass is
 * model.c.
 */
#include "model.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend.h"
#include "device.h"
#include "gguf.h"
#include "model_impl.h"
#include "qpack.h"
#include "quant.h"
#include "safetensors.h"
#include "weights.h"

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

/* ------------------------------------------------------- tensors by name
 *
 * The engine names tensors as Hugging Face does; a GGUF file names them as
 * llama.cpp's converter does, stores a matrix [rows, cols] as ne = {cols,
 * rows}, and permutes the rows of the Q and K projections for its own RoPE
 * (convert_hf_to_gguf.py LlamaModel.permute), which is undone here. */

/* A decoder layer's tensors: Hugging Face's names after the layer's
 * prefix, llama.cpp's after "blk.<l>." (or a head's "pcgtts.mtp.<k>."). */
static const char *const LAYER_NAMES[][2] = {
	{ "input_layernorm.weight", "attn_norm.weight" },
	{ "self_attn.q_proj.weight", "attn_q.weight" },
	{ "self_attn.k_proj.weight", "attn_k.weight" },
	{ "self_attn.v_proj.weight", "attn_v.weight" },
	{ "self_attn.o_proj.weight", "attn_output.weight" },
	{ "post_attention_layernorm.weight", "ffn_norm.weight" },
	{ "mlp.gate_proj.weight", "ffn_gate.weight" },
	{ "mlp.up_proj.weight", "ffn_up.weight" },
	{ "mlp.down_proj.weight", "ffn_down.weight" },
};
#define N_LAYER_NAMES ((int)(sizeof LAYER_NAMES / sizeof LAYER_NAMES[0]))

/* A Llasa+ head's own tensors: Hugging Face's names after "mtp_<k>_",
 * this project's after "pcgtts.mtp.<k>." (man/pcg-gguf.5). */
static const char *const GGUF_HEAD[][2] = {
	{ "local_RMSNorm.weight", "norm.weight" },
	{ "proj.weight", "proj.weight" },
	{ "proj.bias", "proj.bias" },
};
#define N_GGUF_HEAD ((int)(sizeof GGUF_HEAD / sizeof GGUF_HEAD[0]))

/* The GGUF name of a Hugging Face tensor name, into buf. */
static const char *gguf_name(const char *hf, char *buf, size_t size)
{
	int layer, off = 0;

	if (!strcmp(hf, "model.embed_tokens.weight"))
		return "token_embd.weight";
	if (!strcmp(hf, "model.norm.weight"))
		return "output_norm.weight";
	if (!strcmp(hf, "lm_head.weight"))
		return "output.weight";
	if (sscanf(hf, "model.layers.%d.%n", &layer, &off) == 1 && off > 0)
		for (int i = 0; i < N_LAYER_NAMES; i++)
			if (!strcmp(hf + off, LAYER_NAMES[i][0])) {
				snprintf(buf, size, "blk.%d.%s", layer, LAYER_NAMES[i][1]);
				return buf;
			}
	if (sscanf(hf, "mtp_%d_block.%n", &layer, &off) == 1 && off > 0)
		for (int i = 0; i < N_LAYER_NAMES; i++)
			if (!strcmp(hf + off, LAYER_NAMES[i][0])) {
				snprintf(buf, size, "pcgtts.mtp.%d.%s", layer, LAYER_NAMES[i][1]);
				return buf;
			}
	if (sscanf(hf, "mtp_%d_%n", &layer, &off) == 1 && off > 0)
		for (int i = 0; i < N_GGUF_HEAD; i++)
			if (!strcmp(hf + off, GGUF_HEAD[i][0])) {
				snprintf(buf, size, "pcgtts.mtp.%d.%s", layer, GGUF_HEAD[i][1]);
				return buf;
			}
	return hf;
}

/* The GGUF tensor for hf, checked to be [rows, cols] (cols < 0: a vector of
 * rows) of a type the engine computes with. */
static const gguf_tensor *gguf_need(const llama_model *m, const char *hf, int64_t rows,
				    int64_t cols, pcg_err *err)
{
	char buf[128];
	const char *name = gguf_name(hf, buf, sizeof buf);
	const gguf_tensor *t = gguf_find_tensor(m->gg, name);

	if (t == NULL)
		return pcg_fail(err, "tensor '%s' missing from the GGUF file", name), NULL;
	if (t->dtype == PCG_DTYPE_OTHER)
		return pcg_fail(err, "tensor '%s' has type %s, which pcg-tts cannot use (F32, F16, "
				"BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K); requantise it, e.g. with "
				"pcg-quantize --type q4_k_m", name, t->type_name), NULL;
	const int ndim = cols < 0 ? 1 : 2;
	const int64_t want0 = cols < 0 ? rows : cols, want1 = cols < 0 ? 1 : rows;
	if (t->ndim != ndim || t->ne[0] != want0 || t->ne[1] != want1)
		return pcg_fail(err, "tensor '%s': ne [%lld, %lld] (ndim %d), the metadata wants "
				"[%lld, %lld]", name, (long long)t->ne[0], (long long)t->ne[1],
				t->ndim, (long long)want0, (long long)want1), NULL;
	if (ndim == 1 && pcg_dtype_is_quant(t->dtype))
		return pcg_fail(err, "tensor '%s': a quantised vector (%s); norms must be F32, F16 "
				"or BF16", name, t->type_name), NULL;
	return t;
}

/* The checkpoint's name of tensor hf: a backbone tensor (model.*,
 * lm_head.*) under the checkpoint's prefix, a head's (mtp_*) as it is. */
static const char *st_name(const llama_model *m, const char *hf, char *buf, size_t size)
{
	if (m->prefix[0] == '\0' || !strncmp(hf, "mtp_", 4))
		return hf;
	snprintf(buf, size, "%s%s", m->prefix, hf);
	return buf;
}

/* Drops the mapped pages of [p, p + n) from memory (they are file pages,
 * read again if touched): what was copied out of the mapping is not kept
 * twice. */
static void unmap_pages(const void *p, size_t n)
{
	const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t a = ((uintptr_t)p + pg - 1) & ~(pg - 1), e = ((uintptr_t)p + n) & ~(pg - 1);

	if (e > a)
		madvise((void *)a, e - a, MADV_DONTNEED);
}

/* Matrix hf [rows, cols] in place; heads > 0: a Q or K projection of that
 * many heads, whose GGUF rows are un-permuted into owned memory (GGUF row
 * 2j + c of a head is Hugging Face row c * head_dim / 2 + j). On the CPU
 * the rows stay in place and the projection's output is un-permuted
 * instead (unpermute): the same dot products, no copy of the weights. */
static int get_mat(llama_model *m, pcg_mat *out, const char *hf, int64_t rows, int64_t cols,
		   int heads, pcg_err *err)
{
	char buf[160];

	if (m->gg == NULL)
		return wt_mat(&m->w, out, st_name(m, hf, buf, sizeof buf), rows, cols, -1, err);
	const gguf_tensor *t = gguf_need(m, hf, rows, cols, err);
	if (t == NULL)
		return -1;
	*out = (pcg_mat){ .data = t->data, .dtype = t->dtype, .rows = (int)rows, .cols = (int)cols };
	if (heads > 0) {
		const size_t rb = pcg_dtype_row_bytes(t->dtype, cols);
		const int hd = (int)(rows / heads), half = hd / 2;
		unsigned char *p = wt_alloc(&m->w, t->nbytes);
		if (p == NULL)
			return pcg_fail(err, "tensor '%s': out of memory", t->name);
		for (int h = 0; h < heads; h++)
			for (int c = 0; c < 2; c++)
				for (int j = 0; j < half; j++)
					memcpy(p + (size_t)(h * hd + c * half + j) * rb,
					       (const unsigned char *)t->data +
						       (size_t)(h * hd + 2 * j + c) * rb, rb);
		unmap_pages(t->data, t->nbytes);
		out->data = p;
	}
	if (m->qk_perm && !m->dequantize && pcg_qpack_ok(out)) {
		/* on the CPU: repacked into groups of rows (qpack.h), the mapped
		 * pages given back */
		unsigned char *p = wt_alloc(&m->w, pcg_qpack_bytes(out) + 63);
		if (p == NULL)
			return pcg_fail(err, "tensor '%s': out of memory", t->name);
		p += (64 - (uintptr_t)p % 64) % 64;
		pcg_qpack(p, out);
		unmap_pages(t->data, t->nbytes);
		out->packed = p;
	} else if (m->dequantize && pcg_dtype_is_quant(out->dtype)) {
		float *f = wt_alloc(&m->w, (size_t)rows * cols * sizeof *f);
		if (f == NULL)
			return pcg_fail(err, "tensor '%s': out of memory", t->name);
		pcg_dequantize(f, out->data, out->dtype, (size_t)rows * cols);
		*out = (pcg_mat){ .data = f, .dtype = PCG_F32, .rows = (int)rows, .cols = (int)cols };
	} else if (t->dtype == PCG_F32 && ((uintptr_t)t->data & 3u) != 0) {
		return pcg_fail(err, "tensor '%s': misaligned F32 data", t->name);
	}
	return 0;
}

/* Vector hf of n values widened to f32 (owned by the model). */
static float *get_vec(llama_model *m, const char *hf, int64_t n, pcg_err *err)
{
	char buf[160];

	if (m->gg == NULL)
		return wt_vec(&m->w, st_name(m, hf, buf, sizeof buf), n, err);
	const gguf_tensor *t = gguf_need(m, hf, n, -1, err);
	float *p = t ? wt_alloc(&m->w, (size_t)n * sizeof *p) : NULL;
	if (t != NULL && p == NULL)
		pcg_fail(err, "tensor '%s': out of memory", t->name);
	if (p != NULL)
		pcg_to_f32(p, t->data, t->dtype, (size_t)n);
	return p;
}

/* Keeps p to free with the model. */
static int dev_keep(llama_model *m, void *p, pcg_err *err)
{
	void **d = realloc(m->dev, (size_t)(m->n_dev + 1) * sizeof *d);

	if (d == NULL) {
		pcg_backend_free(m->be, p);
		return pcg_fail(err, "out of memory");
	}
	m->dev = d;
	m->dev[m->n_dev++] = p;
	return 0;
}

static int dev_mat(llama_model *m, pcg_mat *w, const char *what, pcg_err *err)
{
	void *p;

	if (pcg_backend_upload_mat(m->be, w, w, &p, what, err) < 0)
		return -1;
	return p ? dev_keep(m, p, err) : 0;
}

static int dev_vec(llama_model *m, float **v, int n, const char *what, pcg_err *err)
{
	void *p;

	if (pcg_backend_is_host(m->be))
		return 0;
	if (pcg_backend_alloc(m->be, &p, (size_t)n * sizeof **v, what, err) < 0)
		return -1;
	if (dev_keep(m, p, err) < 0)
		return -1;
	if (pcg_backend_upload(m->be, p, *v, (size_t)n * sizeof **v, err) < 0)
		return -1;
	*v = p;
	return 0;
}

static int dev_layer(llama_model *m, struct layer *L, pcg_err *err)
{
	const int H = m->cfg.hidden;

	return dev_vec(m, &L->attn_norm, H, "input_layernorm", err) < 0 ||
	       dev_mat(m, &L->wq, "q_proj", err) < 0 || dev_mat(m, &L->wk, "k_proj", err) < 0 ||
	       dev_mat(m, &L->wv, "v_proj", err) < 0 || dev_mat(m, &L->wo, "o_proj", err) < 0 ||
	       dev_vec(m, &L->ffn_norm, H, "post_attention_layernorm", err) < 0 ||
	       dev_mat(m, &L->gate, "gate_proj", err) < 0 ||
	       dev_mat(m, &L->up, "up_proj", err) < 0 ||
	       dev_mat(m, &L->down, "down_proj", err) < 0 ? -1 : 0;
}

/* Opens the backend of dev and moves the weights there: each tensor once,
 * in its dtype (the tied lm_head is the embedding). */
static int to_device(llama_model *m, pcg_device dev, pcg_err *err)
{
	const llama_config *c = &m->cfg;

	m->be = pcg_backend_open(dev, err);
	if (m->be == NULL)
		return -1;
	if (pcg_backend_is_host(m->be))
		return 0;
	if (dev_mat(m, &m->embed, "embed_tokens", err) < 0 ||
	    dev_vec(m, &m->norm, c->hidden, "norm", err) < 0 ||
	    dev_vec(m, &m->inv_freq, c->head_dim / 2, "inv_freq", err) < 0)
		return -1;
	if (c->tie)
		m->lm_head = m->embed;
	else if (dev_mat(m, &m->lm_head, "lm_head", err) < 0)
		return -1;
	for (int i = 0; i < m->n_layers; i++)
		if (dev_layer(m, &m->layers[i], err) < 0)
			return -1;
	for (int k = 0; k < m->n_mtp; k++) {
		struct mtp_head *hd = &m->mtp[k];
		if (dev_vec(m, &hd->norm, c->hidden, "mtp local_RMSNorm", err) < 0 ||
		    dev_mat(m, &hd->proj, "mtp proj", err) < 0 ||
		    dev_vec(m, &hd->bias, c->hidden, "mtp proj bias", err) < 0 ||
		    dev_layer(m, &hd->blk, err) < 0)
			return -1;
	}
	return 0;
}

/* ------------------------------------------------------ Llasa+ checkpoints */

/* Whether s is "<fmt-with-%d><one of LAYER_NAMES>" for a number in [lo, hi]
 * spelled without leading zeros (as PyTorch writes module indices). */
static int is_layer_name(const char *s, const char *fmt, int lo, int hi)
{
	char want[160];

	for (int i = lo; i <= hi; i++)
		for (int j = 0; j < N_LAYER_NAMES; j++) {
			snprintf(want, sizeof want, fmt, i);
			strncat(want, LAYER_NAMES[j][0], sizeof want - strlen(want) - 1);
			if (!strcmp(s, want))
				return 1;
		}
	return 0;
}

/* name as shown in a message: at most size - 1 bytes, bytes outside
 * printable ASCII as '?'. */
static const char *printable(char *buf, size_t size, const char *name)
{
	size_t j;

	for (j = 0; name[j] && j + 1 < size; j++)
		buf[j] = name[j] >= 0x20 && name[j] < 0x7f ? name[j] : '?';
	buf[j] = '\0';
	return buf;
}

/* Whether name is one a Llasa+ checkpoint of m's config (n_mtp heads)
 * holds: the backbone's under "llm.", or a head's. */
static int llasa_plus_name(const llama_model *m, const char *name)
{
	char want[160];

	if (!strncmp(name, "llm.", 4)) {
		const char *b = name + 4;
		return !strcmp(b, "model.embed_tokens.weight") || !strcmp(b, "model.norm.weight") ||
		       !strcmp(b, "lm_head.weight") ||
		       (!strncmp(b, "model.layers.", 13) &&
			is_layer_name(b, "model.layers.%d.", 0, m->cfg.n_layers - 1));
	}
	for (int k = 1; k <= m->n_mtp; k++) {
		for (int j = 0; j < N_GGUF_HEAD; j++) {
			snprintf(want, sizeof want, "mtp_%d_%s", k, GGUF_HEAD[j][0]);
			if (!strcmp(name, want))
				return 1;
		}
	}
	return m->n_mtp > 0 && !strncmp(name, "mtp_", 4) &&
	       is_layer_name(name, "mtp_%d_block.", 1, m->n_mtp);
}

const char *llama_checkpoint_dir(const char *dir, char *buf, size_t size)
{
	struct stat sb;

	snprintf(buf, size, "%s/" LLAMA_LLASA_PLUS_DIR "/model.safetensors", dir);
	if (stat(buf, &sb) == 0 && S_ISREG(sb.st_mode)) {
		snprintf(buf, size, "%s/" LLAMA_LLASA_PLUS_DIR, dir);
		return buf;
	}
	return dir;
}

/* A Llasa+ checkpoint (its backbone's names under "llm."): m->prefix, the
 * number of heads (mtp_1_proj.weight .. consecutive), and every tensor
 * checked to be one it should hold. Nothing for another checkpoint. */
static int llasa_plus_scan(llama_model *m, int want_heads, pcg_err *err)
{
	char name[64];
	int n = 0;

	if (st_find(m->ck, "llm.model.embed_tokens.weight") == NULL)
		return 0;
	m->prefix = "llm.";
	while (n < LLAMA_MAX_MTP && (snprintf(name, sizeof name, "mtp_%d_proj.weight", n + 1),
				     st_find(m->ck, name) != NULL))
		n++;
	m->n_mtp = n;
	for (int i = 0; i < st_count(m->ck); i++) {
		const char *tn = st_get(m->ck, i)->name;
		if (!llasa_plus_name(m, tn)) {
			char shown[128];
			return pcg_fail(err, "tensor '%s' not expected in a Llasa+ checkpoint (the "
					"backbone's %d layers under llm., heads mtp_1_* .. mtp_%d_*)",
					printable(shown, sizeof shown, tn), m->cfg.n_layers, n);
		}
	}
	if (!want_heads)
		m->n_mtp = 0;
	return 0;
}

/* A GGUF file's Llasa+ heads (man/pcg-gguf.5): pcgtts.mtp.count and
 * pcgtts.mtp.layer_norm_rms_epsilon, and every tensor under pcgtts.
 * checked to be one of those heads'. Nothing for a file without. */
static int gguf_heads_scan(llama_model *m, int want_heads, pcg_err *err)
{
	const int has = gguf_find_key(m->gg, "pcgtts.mtp.count") >= 0;
	int64_t n = 0;
	double eps = LLAMA_MTP_EPS;
	char want[128];

	if (has && (gguf_get_int(m->gg, "pcgtts.mtp.count", &n, err) < 0 ||
		    gguf_get_float(m->gg, "pcgtts.mtp.layer_norm_rms_epsilon", &eps, err) < 0))
		return -1;
	if (n < 0 || n > LLAMA_MAX_MTP)
		return pcg_fail(err, "pcgtts.mtp.count = %lld: 0 to %d heads", (long long)n,
				LLAMA_MAX_MTP);
	if (!(eps > 0 && eps < 1))
		return pcg_fail(err, "pcgtts.mtp.layer_norm_rms_epsilon = %g: not in (0, 1)", eps);
	for (int i = 0; i < gguf_n_tensors(m->gg); i++) {
		const char *tn = gguf_tensor_at(m->gg, i)->name;
		int ok = 0;
		if (strncmp(tn, "pcgtts.", 7) != 0)
			continue;
		for (int k = 1; k <= n && !ok; k++)
			for (int j = 0; j < N_LAYER_NAMES + N_GGUF_HEAD && !ok; j++) {
				snprintf(want, sizeof want, "pcgtts.mtp.%d.%s", k,
					 j < N_LAYER_NAMES ? LAYER_NAMES[j][1]
							  : GGUF_HEAD[j - N_LAYER_NAMES][1]);
				ok = !strcmp(tn, want);
			}
		if (!ok && has)
			return pcg_fail(err, "tensor '%s' not expected: not one of the %lld MTP "
					"heads' (pcgtts.mtp.count)", printable(want, sizeof want, tn),
					(long long)n);
		if (!ok)
			return pcg_fail(err, "tensor '%s' not expected: no pcgtts.mtp.count in the "
					"file", printable(want, sizeof want, tn));
	}
	m->n_mtp = want_heads ? (int)n : 0;
	m->mtp_eps = (float)eps;
	return 0;
}

/* The decoder layer whose tensors are named base + LAYER_NAMES (base:
 * "model.layers.<i>." or "mtp_<k>_block."); copy: a GGUF file's Q and K
 * rows put in Hugging Face's order on loading. */
static int load_layer(llama_model *m, struct layer *L, const char *base, int copy,
		      pcg_err *err)
{
	const llama_config *c = &m->cfg;
	const int H = c->hidden, q_dim = c->n_heads * c->head_dim;
	const int kv_dim = c->n_kv_heads * c->head_dim;
	const int qh = copy ? c->n_heads : 0, kh = copy ? c->n_kv_heads : 0;
	char name[160];

#define NAME(i) (snprintf(name, sizeof name, "%s%s", base, LAYER_NAMES[i][0]), name)
	if ((L->attn_norm = get_vec(m, NAME(0), H, err)) == NULL ||
	    get_mat(m, &L->wq, NAME(1), q_dim, H, qh, err) < 0 ||
	    get_mat(m, &L->wk, NAME(2), kv_dim, H, kh, err) < 0 ||
	    get_mat(m, &L->wv, NAME(3), kv_dim, H, 0, err) < 0 ||
	    get_mat(m, &L->wo, NAME(4), H, q_dim, 0, err) < 0 ||
	    (L->ffn_norm = get_vec(m, NAME(5), H, err)) == NULL ||
	    get_mat(m, &L->gate, NAME(6), c->ffn, H, 0, err) < 0 ||
	    get_mat(m, &L->up, NAME(7), c->ffn, H, 0, err) < 0 ||
	    get_mat(m, &L->down, NAME(8), H, c->ffn, 0, err) < 0)
		return -1;
#undef NAME
	return 0;
}

/* The Llasa+ heads of a checkpoint llasa_plus_scan found. */
static int load_heads(llama_model *m, pcg_err *err)
{
	const int H = m->cfg.hidden;
	char name[64];

	if (m->n_mtp == 0)
		return 0;
	m->mtp = wt_alloc(&m->w, (size_t)m->n_mtp * sizeof *m->mtp);
	if (m->mtp == NULL)
		return pcg_fail(err, "out of memory");
	for (int k = 0; k < m->n_mtp; k++) {
		struct mtp_head *hd = &m->mtp[k];
		snprintf(name, sizeof name, "mtp_%d_local_RMSNorm.weight", k + 1);
		if ((hd->norm = get_vec(m, name, H, err)) == NULL)
			return -1;
		snprintf(name, sizeof name, "mtp_%d_proj.weight", k + 1);
		if (get_mat(m, &hd->proj, name, H, H, 0, err) < 0)
			return -1;
		snprintf(name, sizeof name, "mtp_%d_proj.bias", k + 1);
		if ((hd->bias = get_vec(m, name, H, err)) == NULL)
			return -1;
		snprintf(name, sizeof name, "mtp_%d_block.", k + 1);
		if (load_layer(m, &hd->blk, name, m->gg && !m->qk_perm, err) < 0)
			return -1;
	}
	return 0;
}

llama_model *llama_open(const char *dir, const llama_open_opts *opts, pcg_err *err)
{
	llama_model *m;
	llama_config *c;
	char path[4096], name[128], cdir[4096];

	m = calloc(1, sizeof *m);
	if (m == NULL) {
		pcg_fail(err, "out of memory");
		return NULL;
	}
	c = &m->cfg;
	m->prefix = "";
	m->mtp_eps = LLAMA_MTP_EPS;
	m->dequantize = opts && opts->dequantize;
	pcg_device dev;
	if (pcg_device_parse(opts ? opts->device : NULL, &dev, err) < 0)
		goto fail;
	if (gguf_is_gguf(dir)) {
		m->qk_perm = pcg_device_is_host(dev);
		m->gg = gguf_open(dir, err);
		if (m->gg == NULL || llama_config_from_gguf(m->gg, c, err) < 0 ||
		    gguf_heads_scan(m, !(opts && (opts->layers || opts->no_mtp)), err) < 0)
			goto fail_named;
	} else {
		snprintf(path, sizeof path, "%s/config.json", dir);
		if (llama_config_load(path, c, err) < 0)
			goto fail;
		m->ck = st_open(llama_checkpoint_dir(dir, cdir, sizeof cdir), err);
		m->w.ck = m->ck;
		if (m->ck == NULL)
			goto fail;
		if (llasa_plus_scan(m, !(opts && (opts->layers || opts->no_mtp)), err) < 0)
			goto fail_named;
	}

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
	/* A GGUF file carries llama3 rope scaling as per-frequency factors
	 * (llama.cpp's converter computes them from the same formula). */
	if (m->gg != NULL && gguf_find_tensor(m->gg, "rope_freqs.weight") != NULL) {
		float *f = get_vec(m, "rope_freqs.weight", c->head_dim / 2, err);
		if (f == NULL)
			goto fail_named;
		for (int i = 0; i < c->head_dim / 2; i++) {
			if (!(f[i] > 0.0f) || !isfinite(f[i])) {
				pcg_fail(err, "rope_freqs.weight[%d] = %g is not a positive factor", i,
					 f[i]);
				goto fail_named;
			}
			m->inv_freq[i] /= f[i];
		}
	}

	const int H = c->hidden;
	if (get_mat(m, &m->embed, "model.embed_tokens.weight", c->vocab, H, 0, err) < 0)
		goto fail_named;
	m->norm = get_vec(m, "model.norm.weight", H, err);
	if (m->norm == NULL)
		goto fail_named;
	if (c->tie)
		m->lm_head = m->embed; /* as transformers: the flag wins over a stored lm_head */
	else if (get_mat(m, &m->lm_head, "lm_head.weight", c->vocab, H, 0, err) < 0)
		goto fail_named;

	for (int i = 0; i < m->n_layers; i++) {
		int li = opts && opts->layers ? opts->layers[i] : i;
		struct layer *L = &m->layers[i];
		if (li < 0 || li >= c->n_layers) {
			pcg_fail(err, "layer %d out of range (the checkpoint has %d layers)", li,
				 c->n_layers);
			goto fail_named;
		}
		snprintf(name, sizeof name, "model.layers.%d.", li);
		if (load_layer(m, L, name, m->gg && !m->qk_perm, err) < 0)
			goto fail_named;
	}
	if (load_heads(m, err) < 0)
		goto fail_named;
	if (to_device(m, dev, err) < 0)
		goto fail_named;
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
	if (m->be != NULL) {
		for (int i = 0; i < m->n_dev; i++)
			pcg_backend_free(m->be, m->dev[i]);
		if (m->scratch)
			pcg_backend_free(m->be, m->scratch);
		pcg_backend_close(&m->be);
	}
	free(m->dev);
	wt_release(&m->w);
	free(m->layers);
	st_close(&m->ck);
	gguf_close(&m->gg);
	free(m);
	*mp = NULL;
}

const llama_config *llama_get_config(const llama_model *m) { return &m->cfg; }
int llama_n_layers(const llama_model *m) { return m->n_layers; }
int llama_n_mtp(const llama_model *m) { return m->n_mtp; }
size_t llama_mapped_bytes(const llama_model *m)
{
	return m->gg ? gguf_mapped_bytes(m->gg) : st_mapped_bytes(m->ck);
}
