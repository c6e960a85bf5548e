/* model.c: the Llama forward pass, as transformers computes it
 * (modeling_llama.py: LlamaRMSNorm, LlamaRotaryEmbedding with
 * _compute_llama3_parameters, LlamaAttention with repeat_kv, LlamaMLP),
 * written once against the operations of lib/engine/backend.h (the CPU, or a
 * CUDA device). On the CPU, matrices stay in the checkpoint's mapping in
 * their dtype and only the norm weights (and f32 matrices that happen to be
 * misaligned) are copied; on a device, every tensor is uploaded once, in
 * its dtype, when the model opens.
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
#include "qpack.h"
#include "quant.h"
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

/* A Llasa+ head (model.h): mtp_<k>_* in the checkpoint. */
struct mtp_head {
	float *norm;      /* (hidden) mtp_<k>_local_RMSNorm.weight, eps mtp_eps */
	pcg_mat proj;     /* (hidden, hidden) mtp_<k>_proj.weight */
	float *bias;      /* (hidden) mtp_<k>_proj.bias */
	struct layer blk; /* mtp_<k>_block.*: cache layer n_layers + k - 1 */
};

struct llama_model {
	llama_config cfg;
	st_ckpt *ck;      /* a Hugging Face checkpoint, or */
	gguf_file *gg;    /* a GGUF file (tensors by llama.cpp's names) */
	int dequantize;   /* llama_open_opts.dequantize */
	int qk_perm;      /* GGUF on the CPU: Q and K rows kept in llama.cpp's order,
			   * their outputs put back in Hugging Face's (unpermute) */
	pcg_mat embed;    /* (vocab, hidden) */
	pcg_mat lm_head;  /* (vocab, hidden); embed when tied */
	float *norm;      /* (hidden) */
	struct layer *layers;
	int n_layers;
	const char *prefix; /* of the backbone's names: "llm." in a Llasa+ checkpoint */
	struct mtp_head *mtp; /* the Llasa+ heads */
	int n_mtp;
	float mtp_eps;    /* the heads' local_RMSNorm: LLAMA_MTP_EPS, or a GGUF file's */
	float *inv_freq;  /* (head_dim / 2) */
	pcg_weights w;    /* the tensors taken from ck, and f32 copies */
	pcg_backend *be;  /* where the forward runs; the pointers above are its memory */
	void **dev;       /* device copies to free (none on the CPU) */
	int n_dev;
	void *scratch;    /* a device's activations, kept between passes */
	size_t scratch_bytes;
};

struct llama_kv {
	pcg_backend *be;  /* the model's: k and v are its memory */
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
