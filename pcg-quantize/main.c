/* pcg-quantize: a Hugging Face Llama directory (config.json, safetensors,
 * tokenizer.json; LLaSA's speech tokens included) to one GGUF file of the
 * type asked for, as llama.cpp's convert_hf_to_gguf.py followed by its
 * llama-quantize would write it: llama.* metadata, the tokenizer as
 * tokenizer.ggml.* (gpt2 byte-level BPE, pre-tokenizer llama-bpe), the Q
 * and K rows permuted for llama.cpp's RoPE, llama3 rope scaling as the
 * rope_freqs tensor, and each tensor's type chosen by llama.cpp's own rules
 * for the file type (lib/formats/quantize.c pcg_quant_choose). A Llasa+
 * checkpoint's backbone (under llm.) is written the same way and its MTP
 * heads after it, under this project's names (man/pcg-gguf.5), unless
 * --no-heads. Tensors are converted and quantised a slice of rows at a time,
 * so memory stays near the largest tensor's output; the file appears whole
 * or not at all.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "dtype.h"
#include "err.h"
#include "gguf.h"
#include "model.h"
#include "opts.h"
#include "quant.h"
#include "safetensors.h"

static const char *prog = "pcg-quantize";
#define SYNOPSIS "--type TYPE [-o FILE.gguf] [--no-heads] [--quiet] MODEL_DIR"

static const char *type_s, *out_path;
static int quiet, no_heads;
static const pcg_opt opts[] = {
	{ "type", PCG_OPT_STR, &type_s, NULL, 1, 0, "TYPE",
	  "q8_0, q4_0, q4_k_m, q4_k_s, q5_k_m, q5_k_s, q6_k, f16, bf16 or f32" },
	{ "o", PCG_OPT_STR, &out_path, NULL, 1, 0, "FILE", "output GGUF (default: MODEL_DIR-TYPE.gguf)" },
	{ "no-heads", PCG_OPT_FLAG, &no_heads, NULL, 1, 0, NULL,
	  "leave a Llasa+ checkpoint's MTP heads out (a file llama.cpp loads)" },
	{ "quiet", PCG_OPT_FLAG, &quiet, NULL, 1, 0, NULL, "no progress on stderr" },
	{ NULL },
};

/* llama.cpp's llama_ftype numbers for general.file_type. */
static const struct {
	const char *name;
	int ftype;
	pcg_dtype plain; /* the type of every matrix for a plain type; OTHER: mixed */
} ftypes[] = {
	{ "f32", 0, PCG_F32 },     { "f16", 1, PCG_F16 },     { "q4_0", 2, PCG_Q4_0 },
	{ "q8_0", 7, PCG_Q8_0 },   { "q4_k_s", 14, PCG_DTYPE_OTHER },
	{ "q4_k_m", 15, PCG_DTYPE_OTHER }, { "q5_k_s", 16, PCG_DTYPE_OTHER },
	{ "q5_k_m", 17, PCG_DTYPE_OTHER }, { "q6_k", 18, PCG_DTYPE_OTHER },
	{ "bf16", 32, PCG_BF16 },
};

typedef struct job {
	const st_tensor *src;
	const char *name;  /* GGUF name */
	pcg_dtype type;
	int64_t rows, cols;
	int heads;         /* > 0: permute rows as llama.cpp's converter */
	const float *vec;  /* a computed f32 tensor (rope_freqs) instead of src */
} job;

typedef struct ctx {
	job *jobs;
	int n;
	int progress;
	double t0;
} ctx;

/* Row r of the GGUF tensor comes from source row src_row(r): within each
 * head of hd rows, GGUF row 2j + c holds Hugging Face row c * hd / 2 + j. */
static int64_t src_row(const job *j, int64_t r)
{
	if (j->heads <= 0)
		return r;
	const int64_t hd = j->rows / j->heads, h = r / hd, i = r % hd;
	return h * hd + (i % 2) * (hd / 2) + i / 2;
}

static int fill(void *vctx, int index, void *dst, size_t nbytes, pcg_err *err)
{
	ctx *c = vctx;
	const job *j = &c->jobs[index];
	const size_t es = pcg_dtype_size(j->src ? j->src->dtype : PCG_F32);
	const size_t rb = pcg_dtype_row_bytes(j->type, j->cols);
	enum { SLICE = 64 };
	float *f = malloc((size_t)SLICE * j->cols * sizeof *f);

	if (f == NULL)
		return pcg_fail(err, "%s: out of memory", j->name);
	if (rb * (size_t)j->rows != nbytes) {
		free(f);
		return pcg_fail(err, "%s: %zu bytes for %lld rows of %zu", j->name, nbytes,
				(long long)j->rows, rb);
	}
	for (int64_t r0 = 0; r0 < j->rows; r0 += SLICE) {
		const int64_t n = j->rows - r0 < SLICE ? j->rows - r0 : SLICE;
		for (int64_t r = 0; r < n; r++) {
			float *fr = f + (size_t)r * j->cols;
			if (j->vec)
				memcpy(fr, j->vec + (size_t)(r0 + r) * j->cols, (size_t)j->cols * sizeof *fr);
			else
				pcg_to_f32(fr, (const unsigned char *)j->src->data +
						       (size_t)src_row(j, r0 + r) * j->cols * es,
					   j->src->dtype, (size_t)j->cols);
		}
		unsigned char *o = (unsigned char *)dst + (size_t)r0 * rb;
		const size_t cnt = (size_t)n * j->cols;
		if (j->type == PCG_F32)
			memcpy(o, f, cnt * sizeof *f);
		else if (j->type == PCG_F16)
			pcg_f32_to_f16_n((uint16_t *)(void *)o, f, cnt);
		else if (j->type == PCG_BF16)
			for (size_t i = 0; i < cnt; i++) {
				uint16_t h = pcg_f32_to_bf16(f[i]);
				memcpy(o + 2 * i, &h, 2);
			}
		else if (pcg_quantize(o, f, j->type, cnt) < 0) {
			free(f);
			return pcg_fail(err, "%s: cannot quantise to %s", j->name,
					pcg_dtype_name(j->type));
		}
	}
	free(f);
	if (c->progress) {
		fprintf(stderr, "\r%s: [%3d/%3d] %-28s %-5s %6.1f s", prog, index + 1, c->n, j->name,
			pcg_dtype_name(j->type), (double)clock() / CLOCKS_PER_SEC - c->t0);
		if (index + 1 == c->n)
			fputc('\n', stderr);
	}
	return 0;
}

/* The tokenizer.json beside the model as tokenizer.ggml.* metadata, as
 * llama.cpp's converter writes a gpt2 (byte-level BPE) vocabulary: every id
 * below vocab has a token (the gaps "[PADn]", unused), added special tokens
 * are control tokens, other added tokens user-defined. */
static int put_tokenizer(gguf_writer *w, const char *dir, const llama_config *cfg, pcg_err *err)
{
	char path[4096];
	json_error_t je;
	json_t *root, *model, *vocab, *merges, *added, *v;
	const char *key;
	size_t i;
	int rc = -1, n = cfg->vocab;
	char **tokens = calloc((size_t)n, sizeof *tokens);
	int32_t *types = calloc((size_t)n, sizeof *types);
	char pad[32];

	snprintf(path, sizeof path, "%s/tokenizer.json", dir);
	root = json_load_file(path, 0, &je);
	if (tokens == NULL || types == NULL) {
		pcg_fail(err, "out of memory");
		goto out;
	}
	if (root == NULL) {
		pcg_fail(err, "%s: %s (line %d)", path, je.text, je.line);
		goto out;
	}
	model = json_object_get(root, "model");
	vocab = json_object_get(model, "vocab");
	merges = json_object_get(model, "merges");
	added = json_object_get(root, "added_tokens");
	if (!json_is_object(vocab) || !json_is_array(merges) ||
	    strcmp(json_string_value(json_object_get(model, "type")) ?: "", "BPE")) {
		pcg_fail(err, "%s: not a BPE tokenizer with model.vocab and model.merges", path);
		goto out;
	}
	json_object_foreach(vocab, key, v) {
		json_int_t id = json_integer_value(v);
		if (!json_is_integer(v) || id < 0 || id >= n) {
			pcg_fail(err, "%s: token '%s' has id %lld, outside the vocabulary of %d", path,
				 key, (long long)id, n);
			goto out;
		}
		tokens[id] = (char *)key;
		types[id] = 1; /* normal */
	}
	json_array_foreach(added, i, v) {
		json_int_t id = json_integer_value(json_object_get(v, "id"));
		const char *s = json_string_value(json_object_get(v, "content"));
		if (s == NULL || id < 0 || id >= n) {
			pcg_fail(err, "%s: added_tokens[%zu] has no content or an id outside the "
				 "vocabulary", path, i);
			goto out;
		}
		tokens[id] = (char *)s;
		types[id] = json_is_true(json_object_get(v, "special")) ? 3 : 4;
	}
	for (int id = 0; id < n; id++)
		if (tokens[id] == NULL) {
			snprintf(pad, sizeof pad, "[PAD%d]", id);
			if ((tokens[id] = strdup(pad)) == NULL) {
				pcg_fail(err, "out of memory");
				goto out;
			}
			types[id] = -5; /* unused, and ours to free */
		}
	size_t nm = json_array_size(merges);
	char **ms = calloc(nm ? nm : 1, sizeof *ms);
	if (ms == NULL) {
		pcg_fail(err, "out of memory");
		goto out;
	}
	json_array_foreach(merges, i, v) {
		if (json_is_string(v)) {
			ms[i] = strdup(json_string_value(v));
		} else if (json_is_array(v) && json_array_size(v) == 2) { /* ["a", "b"] */
			const char *a = json_string_value(json_array_get(v, 0));
			const char *b = json_string_value(json_array_get(v, 1));
			if (a && b && (ms[i] = malloc(strlen(a) + strlen(b) + 2)))
				sprintf(ms[i], "%s %s", a, b);
		}
		if (ms[i] == NULL) {
			pcg_fail(err, "%s: merges[%zu] is not \"a b\" or [\"a\", \"b\"]", path, i);
			break;
		}
	}
	for (int id = 0; id < n; id++)
		if (types[id] < 0)
			types[id] = 5;
	if (i == nm &&
	    gguf_set_str(w, "tokenizer.ggml.model", "gpt2", err) == 0 &&
	    gguf_set_str(w, "tokenizer.ggml.pre", "llama-bpe", err) == 0 &&
	    gguf_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tokens, (size_t)n,
			     err) == 0 &&
	    gguf_set_arr_i32(w, "tokenizer.ggml.token_type", types, (size_t)n, err) == 0 &&
	    gguf_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)ms, nm, err) == 0 &&
	    (cfg->bos < 0 || gguf_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)cfg->bos,
					  err) == 0) &&
	    (cfg->n_eos == 0 || gguf_set_u32(w, "tokenizer.ggml.eos_token_id",
					     (uint32_t)cfg->eos[0], err) == 0))
		rc = 0;
	for (size_t k = 0; k < nm; k++)
		free(ms[k]);
	free(ms);
out:
	if (tokens)
		for (int id = 0; id < n; id++)
			if (types && types[id] == 5 && tokens[id] && !strncmp(tokens[id], "[PAD", 4))
				free(tokens[id]);
	free(tokens);
	free(types);
	json_decref(root);
	return rc;
}

/* llama3 rope scaling as llama.cpp's converter writes it: per frequency,
 * the factor the rotation's inverse frequency is divided by. */
static void rope_factors(float *f, const llama_config *c)
{
	const double lo_wl = c->rope_orig_max_pos / c->rope_low_freq;
	const double hi_wl = c->rope_orig_max_pos / c->rope_high_freq;

	for (int i = 0; i < c->head_dim / 2; i++) {
		const float freq = 1.0f / powf(c->rope_theta, (float)(2 * i) / (float)c->head_dim);
		const double wl = 2 * M_PI / freq;
		if (wl < hi_wl) {
			f[i] = 1.0f;
		} else if (wl > lo_wl) {
			f[i] = c->rope_factor;
		} else {
			const double s = (c->rope_orig_max_pos / wl - c->rope_low_freq) /
					 (c->rope_high_freq - c->rope_low_freq);
			f[i] = (float)(1.0 / ((1 - s) / c->rope_factor + s));
		}
	}
}

int main(int argc, char **argv)
{
	pcg_err err = { 0 };
	llama_config cfg;
	st_ckpt *ck = NULL;
	gguf_writer *w = NULL;
	ctx c = { 0 };
	float *rf = NULL;
	char path[4096], def_out[4096], cdir[4096], names[16][96], hf[160];
	int ft = -1, rc = 1;
	int first = pcg_opts_parse(opts, argc, argv, &err);

	if (first == PCG_OPTS_HELP) {
		pcg_opts_usage(stdout, prog, SYNOPSIS, opts);
		return 0;
	}
	if (first < 0 || argc - first != 1 || type_s == NULL) {
		return pcg_usage_error(prog, SYNOPSIS, opts,
			first < 0 ? err.msg
			: type_s == NULL ? "--type is required" : "one MODEL_DIR is required");
	}
	for (size_t i = 0; i < sizeof ftypes / sizeof ftypes[0]; i++)
		if (!strcasecmp(type_s, ftypes[i].name))
			ft = (int)i;
	if (ft < 0) {
		fprintf(stderr, "%s: --type: '%s' is not one of q8_0, q4_0, q4_k_m, q4_k_s, q5_k_m, "
			"q5_k_s, q6_k, f16, bf16, f32\n", prog, type_s);
		return 2;
	}
	const char *dir = argv[first];
	if (out_path == NULL) {
		size_t l = strlen(dir);
		while (l > 1 && dir[l - 1] == '/')
			l--;
		snprintf(def_out, sizeof def_out, "%.*s-%s.gguf", (int)l, dir, ftypes[ft].name);
		out_path = def_out;
	}
	snprintf(path, sizeof path, "%s/config.json", dir);
	if (llama_config_load(path, &cfg, &err) < 0 ||
	    (ck = st_open(llama_checkpoint_dir(dir, cdir, sizeof cdir), &err)) == NULL)
		goto fail;
	/* A Llasa+ checkpoint: the backbone under llm., heads mtp_1_* .. */
	const char *pre = st_find(ck, "llm.model.embed_tokens.weight") ? "llm." : "";
	int n_mtp = 0;
	while (*pre && n_mtp < LLAMA_MAX_MTP &&
	       (snprintf(path, sizeof path, "mtp_%d_proj.weight", n_mtp + 1),
		st_find(ck, path) != NULL))
		n_mtp++;
	if (no_heads)
		n_mtp = 0;
	const int L = cfg.n_layers, H = cfg.hidden, hd = cfg.head_dim;
	c.jobs = calloc((size_t)(4 + 9 * L + 12 * n_mtp), sizeof *c.jobs);
	w = gguf_writer_new(&err);
	if (c.jobs == NULL || w == NULL) {
		pcg_fail(&err, "out of memory");
		goto fail;
	}
	if (gguf_set_str(w, "general.architecture", "llama", &err) < 0 ||
	    gguf_set_str(w, "general.name", dir, &err) < 0 ||
	    gguf_set_u32(w, "general.file_type", (uint32_t)ftypes[ft].ftype, &err) < 0 ||
	    gguf_set_u32(w, "general.quantization_version", 2, &err) < 0 ||
	    gguf_set_u32(w, "llama.context_length", (uint32_t)cfg.max_pos, &err) < 0 ||
	    gguf_set_u32(w, "llama.embedding_length", (uint32_t)H, &err) < 0 ||
	    gguf_set_u32(w, "llama.block_count", (uint32_t)L, &err) < 0 ||
	    gguf_set_u32(w, "llama.feed_forward_length", (uint32_t)cfg.ffn, &err) < 0 ||
	    gguf_set_u32(w, "llama.rope.dimension_count", (uint32_t)hd, &err) < 0 ||
	    gguf_set_u32(w, "llama.attention.head_count", (uint32_t)cfg.n_heads, &err) < 0 ||
	    gguf_set_u32(w, "llama.attention.head_count_kv", (uint32_t)cfg.n_kv_heads, &err) < 0 ||
	    gguf_set_f32(w, "llama.attention.layer_norm_rms_epsilon", cfg.eps, &err) < 0 ||
	    gguf_set_f32(w, "llama.rope.freq_base", cfg.rope_theta, &err) < 0 ||
	    gguf_set_u32(w, "llama.vocab_size", (uint32_t)cfg.vocab, &err) < 0 ||
	    (hd != H / cfg.n_heads &&
	     (gguf_set_u32(w, "llama.attention.key_length", (uint32_t)hd, &err) < 0 ||
	      gguf_set_u32(w, "llama.attention.value_length", (uint32_t)hd, &err) < 0)) ||
	    (n_mtp > 0 &&
	     (gguf_set_u32(w, "pcgtts.mtp.count", (uint32_t)n_mtp, &err) < 0 ||
	      gguf_set_f32(w, "pcgtts.mtp.layer_norm_rms_epsilon", LLAMA_MTP_EPS, &err) < 0)) ||
	    put_tokenizer(w, dir, &cfg, &err) < 0)
		goto fail;

	/* The tensors, in llama.cpp's order. */
#define JOB(gname, hf, r, k, nh) do { \
		job *j_ = &c.jobs[c.n]; \
		j_->name = strdup(gname); \
		j_->src = st_find(ck, hf); \
		j_->rows = (r); j_->cols = (k); j_->heads = (nh); \
		if (j_->name == NULL) { pcg_fail(&err, "out of memory"); goto fail; } \
		if (j_->src == NULL || j_->src->dtype == PCG_DTYPE_OTHER || \
		    j_->src->numel != (int64_t)(r) * (k)) { \
			pcg_fail(&err, "tensor '%s' is missing, not F32/F16/BF16 or not [%lld, %lld]", \
				 hf, (long long)(r), (long long)(k)); \
			goto fail; \
		} \
		c.n++; \
	} while (0)
	snprintf(hf, sizeof hf, "%smodel.embed_tokens.weight", pre);
	JOB("token_embd.weight", hf, cfg.vocab, H, 0);
	if (cfg.rope_llama3) {
		rf = malloc((size_t)(hd / 2) * sizeof *rf);
		if (rf == NULL) {
			pcg_fail(&err, "out of memory");
			goto fail;
		}
		rope_factors(rf, &cfg);
		c.jobs[c.n] = (job){ .name = strdup("rope_freqs.weight"), .rows = 1, .cols = hd / 2,
				     .vec = rf };
		if (c.jobs[c.n++].name == NULL)
			goto fail;
	}
	snprintf(hf, sizeof hf, "%smodel.norm.weight", pre);
	JOB("output_norm.weight", hf, 1, H, 0);
	if (!cfg.tie) {
		snprintf(hf, sizeof hf, "%slm_head.weight", pre);
		JOB("output.weight", hf, cfg.vocab, H, 0);
	}
	/* The backbone's layers blk.<l>.*, then each head k: its norm and
	 * projection, and its block under llama.cpp's per-layer names after
	 * pcgtts.mtp.<k>. (permuted alike). */
	for (int l = 0; l < L + n_mtp; l++) {
		static const struct { const char *g, *hf; int what; } t[] = {
			{ "attn_norm", "input_layernorm", 0 },   { "attn_q", "self_attn.q_proj", 1 },
			{ "attn_k", "self_attn.k_proj", 2 },     { "attn_v", "self_attn.v_proj", 3 },
			{ "attn_output", "self_attn.o_proj", 4 }, { "ffn_norm", "post_attention_layernorm", 0 },
			{ "ffn_gate", "mlp.gate_proj", 5 },       { "ffn_up", "mlp.up_proj", 5 },
			{ "ffn_down", "mlp.down_proj", 6 },
		};
		const int k = l - L + 1; /* the head, when l >= L */
		char gbase[32], hbase[96];
		if (l < L) {
			snprintf(gbase, sizeof gbase, "blk.%d.", l);
			snprintf(hbase, sizeof hbase, "%smodel.layers.%d.", pre, l);
		} else {
			snprintf(gbase, sizeof gbase, "pcgtts.mtp.%d.", k);
			snprintf(hbase, sizeof hbase, "mtp_%d_block.", k);
			snprintf(names[0], sizeof names[0], "%snorm.weight", gbase);
			snprintf(hf, sizeof hf, "mtp_%d_local_RMSNorm.weight", k);
			JOB(names[0], hf, 1, H, 0);
			snprintf(names[0], sizeof names[0], "%sproj.weight", gbase);
			snprintf(hf, sizeof hf, "mtp_%d_proj.weight", k);
			JOB(names[0], hf, H, H, 0);
			snprintf(names[0], sizeof names[0], "%sproj.bias", gbase);
			snprintf(hf, sizeof hf, "mtp_%d_proj.bias", k);
			JOB(names[0], hf, 1, H, 0);
		}
		for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
			const int q_dim = cfg.n_heads * hd, kv_dim = cfg.n_kv_heads * hd;
			const int64_t rows[] = { 1, q_dim, kv_dim, kv_dim, H, cfg.ffn, H };
			const int64_t cols[] = { H, H, H, H, q_dim, H, cfg.ffn };
			const int heads[] = { 0, cfg.n_heads, cfg.n_kv_heads, 0, 0, 0, 0 };
			snprintf(names[i], sizeof names[i], "%s%s.weight", gbase, t[i].g);
			snprintf(hf, sizeof hf, "%s%s.weight", hbase, t[i].hf);
			JOB(names[i], hf, rows[t[i].what], cols[t[i].what], heads[t[i].what]);
		}
	}
#undef JOB
	for (int i = 0; i < c.n; i++) {
		job *j = &c.jobs[i];
		/* a head's block counts as the layer after the backbone's (the
		 * heads run after it): llama.cpp's rules by layer apply as to a
		 * last layer */
		int layer = -1, k = 0;
		if (sscanf(j->name, "blk.%d.", &layer) != 1 &&
		    sscanf(j->name, "pcgtts.mtp.%d.", &k) == 1)
			layer = L + k - 1;
		if (j->rows == 1) /* norms and rope factors stay f32, as llama.cpp keeps them */
			j->type = PCG_F32;
		else if (ftypes[ft].plain != PCG_DTYPE_OTHER && !pcg_dtype_is_quant(ftypes[ft].plain))
			j->type = ftypes[ft].plain;
		else
			/* A tied model's token_embd is also its output: llama.cpp gives
			 * it output.weight's type. */
			j->type = pcg_quant_choose(ftypes[ft].name,
						   cfg.tie && !strcmp(j->name, "token_embd.weight")
							   ? "output.weight" : j->name,
						   layer, L, j->cols);
		if (j->type == PCG_DTYPE_OTHER) {
			pcg_fail(&err, "%s: no type for --type %s", j->name, type_s);
			goto fail;
		}
		const int64_t ne[2] = { j->cols, j->rows };
		if (gguf_add_tensor(w, j->name, j->type, j->rows == 1 ? 1 : 2, ne, fill, &c, i,
				    &err) < 0)
			goto fail;
	}
	c.progress = !quiet && isatty(2);
	c.t0 = (double)clock() / CLOCKS_PER_SEC;
	if (gguf_writer_finish(w, out_path, &err) < 0)
		goto fail;
	if (!quiet) {
		fprintf(stderr, "%s: wrote %s (%s, %d tensors", prog, out_path, ftypes[ft].name, c.n);
		fprintf(stderr, n_mtp > 0 ? ", %d MTP heads)\n" : ")\n", n_mtp);
	}
	rc = 0;
	goto done;
fail:
	pcg_report(prog, &err);
done:
	for (int i = 0; i < c.n; i++)
		free((char *)c.jobs[i].name);
	free(c.jobs);
	free(rf);
	gguf_writer_free(&w);
	st_close(&ck);
	return rc;
}
