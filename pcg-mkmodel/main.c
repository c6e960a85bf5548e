/* pcg-mkmodel: writes a deterministic random Llama model in the Hugging Face
 * layout (config.json, model.safetensors, tokenizer.json), or with
 * --llasa-plus a Llasa+ checkpoint in its released layout
 * (llasa_plus/model.safetensors: the backbone under llm., two heads
 * mtp_<k>_*; lib/engine/model.h), whose vocabulary
 * has the LLaSA layout: byte-level BPE text tokens, the Llama-3 special
 * tokens, the 8 LLaSA tags and S speech tokens <|s_N|>. Tests, benchmarks
 * and the demo use it; --preset llasa-1b, llasa-3b and llasa-8b give the
 * exact shapes of LLaSA-1B, 3B and 8B (Llama 3.2 1B, 3B and Llama 3.1 8B
 * bodies with LLaSA's 193,800-token vocabulary).
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtype.h"
#include "err.h"
#include "fileio.h"
#include "opts.h"
#include "rng.h"
#include "safetensors.h"

static const char *prog = "pcg-mkmodel";

static const char *out_dir, *preset, *dtype_s, *rope_s;
static int hidden, layers, heads, kv_heads, head_dim, ffn, text_vocab, speech, untied,
	seed_i, max_pos, quiet, progress, llasa_plus;
static double rope_theta, stdev, rope_factor = 32.0;

static const pcg_opt opts[] = {
	{ "out", PCG_OPT_STR, &out_dir, NULL, 1, 0, "DIR", "output directory (created)" },
	{ "preset", PCG_OPT_STR, &preset, "tiny", 1, 0, "NAME",
	  "tiny, llasa-1b, llasa-3b or llasa-8b (sets the sizes below; flags given override it)" },
	{ "hidden", PCG_OPT_INT, &hidden, "64", 8, 65536, "N", "hidden_size" },
	{ "layers", PCG_OPT_INT, &layers, "2", 1, 1024, "N", "num_hidden_layers" },
	{ "heads", PCG_OPT_INT, &heads, "4", 1, 1024, "N", "num_attention_heads" },
	{ "kv-heads", PCG_OPT_INT, &kv_heads, "2", 1, 1024, "N", "num_key_value_heads" },
	{ "head-dim", PCG_OPT_INT, &head_dim, "0", 0, 1024, "N", "head_dim (0: hidden / heads)" },
	{ "ffn", PCG_OPT_INT, &ffn, "192", 1, 1 << 20, "N", "intermediate_size" },
	{ "text-vocab", PCG_OPT_INT, &text_vocab, "512", 300, 1 << 20, "N",
	  "text tokens: 256 bytes, BPE merges, then the Llama-3 special tokens" },
	{ "speech", PCG_OPT_INT, &speech, "1024", 1, 1 << 20, "N", "speech tokens <|s_N|>" },
	{ "dtype", PCG_OPT_STR, &dtype_s, "bf16", 1, 0, "T", "f32, f16 or bf16" },
	{ "untied", PCG_OPT_FLAG, &untied, NULL, 1, 0, NULL,
	  "store a separate lm_head (default: tied to embed_tokens)" },
	{ "llasa-plus", PCG_OPT_FLAG, &llasa_plus, NULL, 1, 0, NULL,
	  "a Llasa+ checkpoint: DIR/llasa_plus/model.safetensors with the backbone under llm. "
	  "(the same weights as without the flag) and 2 MTP heads" },
	{ "rope-theta", PCG_OPT_FLOAT, &rope_theta, "500000", 1, 1e12, "X", "rope_theta" },
	{ "rope-scaling", PCG_OPT_STR, &rope_s, "llama3", 1, 0, "S",
	  "llama3 (factor 32, 8 for llasa-8b; low 1, high 4, original 8192) or none" },
	{ "max-pos", PCG_OPT_INT, &max_pos, "131072", 16, 1 << 30, "N", "max_position_embeddings" },
	{ "std", PCG_OPT_FLOAT, &stdev, "0.02", 0, 100, "X", "std of the random weights" },
	{ "seed", PCG_OPT_INT, &seed_i, "1", 0, 2147483647, "N", "random seed" },
	{ "quiet", PCG_OPT_FLAG, &quiet, NULL, 1, 0, NULL,
	  "no progress line (there is one only when standard error is a terminal)" },
	{ NULL },
};

/* GPT-2's bytes_to_unicode: printable bytes map to themselves, the others
 * to U+0100 onwards; byte-level BPE vocabularies list them in this order. */
static void byte_alphabet(int order[256], unsigned cp[256])
{
	int n = 0, extra = 0;

	for (int b = 0; b < 256; b++)
		if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))
			order[n++] = b, cp[b] = (unsigned)b;
	for (int b = 0; b < 256; b++)
		if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)))
			order[n++] = b, cp[b] = 256u + (unsigned)extra++;
}

static int utf8_put(char *s, unsigned c)
{
	if (c < 0x80) { s[0] = (char)c; return 1; }
	s[0] = (char)(0xc0 | (c >> 6));
	s[1] = (char)(0x80 | (c & 0x3f));
	return 2;
}

/* Llama-3's names for the first special tokens; the rest are reserved. */
static void special_name(char *buf, size_t n, int j)
{
	static const char *named[] = { "begin_of_text", "end_of_text", NULL, NULL,
		"finetune_right_pad_id", NULL, "start_header_id", "end_header_id", "eom_id",
		"eot_id", "python_tag" };
	static const int reserved_idx[] = { -1, -1, 0, 1, -1, 2, -1, -1, -1, -1, -1 };

	if (j < 11 && named[j])
		snprintf(buf, n, "<|%s|>", named[j]);
	else
		snprintf(buf, n, "<|reserved_special_token_%d|>", j < 11 ? reserved_idx[j] : j - 8);
}

/* An open-addressing set of strings, to keep merged tokens unique. */
typedef struct strset { char **slot; size_t cap; } strset;

static uint64_t fnv(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

static int strset_add(strset *set, char *s) /* 1 added, 0 present */
{
	size_t i = fnv(s) & (set->cap - 1);
	for (; set->slot[i]; i = (i + 1) & (set->cap - 1))
		if (!strcmp(set->slot[i], s))
			return 0;
	set->slot[i] = s;
	return 1;
}

static const char *LLASA_TAGS[8] = {
	"<|TEXT_GENERATION_START|>", "<|TEXT_GENERATION_END|>",
	"<|TEXT_UNDERSTANDING_START|>", "<|TEXT_UNDERSTANDING_END|>",
	"<|SPEECH_GENERATION_START|>", "<|SPEECH_GENERATION_END|>",
	"<|SPEECH_UNDERSTANDING_START|>", "<|SPEECH_UNDERSTANDING_END|>",
};

static json_t *added(int id, const char *content, int special)
{
	return json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", id, "content", content,
			 "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", !special,
			 "special", special);
}

/* The Llama-3 pre-tokenizer: its Split regex, then ByteLevel. */
static const char *LLAMA3_REGEX =
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?"
	"[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static int write_json(const char *path, json_t *j, pcg_err *err)
{
	char *text = json_dumps(j, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
	int rc;

	if (text == NULL)
		return pcg_fail(err, "%s: out of memory", path);
	rc = pcg_write_file(path, text, strlen(text), 0644, err);
	free(text);
	return rc;
}

static int write_tokenizer(const char *path, int n_special, pcg_err *err)
{
	int order[256];
	unsigned cp[256];
	const int n_bpe = text_vocab - n_special;
	char **tok = calloc((size_t)n_bpe, sizeof *tok);
	strset set = { NULL, 1 };
	json_t *vocab = json_object(), *merges = json_array(), *add = json_array();
	pcg_rng rng;
	int rc = -1;

	while (set.cap < (size_t)n_bpe * 2)
		set.cap *= 2;
	set.slot = calloc(set.cap, sizeof *set.slot);
	if (!tok || !set.slot || !vocab || !merges || !add) {
		pcg_fail(err, "out of memory");
		goto out;
	}
	byte_alphabet(order, cp);
	for (int i = 0; i < 256; i++) {
		char s[4] = { 0 };
		utf8_put(s, cp[order[i]]);
		tok[i] = strdup(s);
		strset_add(&set, tok[i]);
	}
	/* Merges: pairs of earlier tokens, drawn with a bias to short ones so the
	 * tokens look like word pieces; any such list is a valid BPE. */
	pcg_rng_init(&rng, (uint64_t)seed_i, 0x70cu);
	for (int i = 256; i < n_bpe;) {
		int a = (int)pcg_rng_below(&rng, (uint32_t)(i < 1024 ? i : 1024 + (i - 1024) / 4));
		int b = (int)pcg_rng_below(&rng, (uint32_t)(i < 512 ? i : 512));
		size_t la = strlen(tok[a]), lb = strlen(tok[b]);
		char *s;
		if (la + lb > 24)
			continue;
		s = malloc(la + lb + 1);
		if (s == NULL) {
			pcg_fail(err, "out of memory");
			goto out;
		}
		memcpy(s, tok[a], la);
		memcpy(s + la, tok[b], lb + 1);
		if (!strset_add(&set, s)) {
			free(s);
			continue;
		}
		tok[i] = s;
		json_array_append_new(merges, json_pack("[s, s]", tok[a], tok[b]));
		i++;
	}
	for (int i = 0; i < n_bpe; i++)
		json_object_set_new(vocab, tok[i], json_integer(i));
	for (int j = 0; j < n_special; j++) {
		char name[64];
		special_name(name, sizeof name, j);
		json_array_append_new(add, added(n_bpe + j, name, 1));
	}
	for (int j = 0; j < 8; j++)
		json_array_append_new(add, added(text_vocab + j, LLASA_TAGS[j], 0));
	for (int j = 0; j < speech; j++) {
		char name[32];
		snprintf(name, sizeof name, "<|s_%d|>", j);
		json_array_append_new(add, added(text_vocab + 8 + j, name, 0));
	}
	json_t *root = json_pack(
		"{s:s, s:n, s:n, s:o, s:n, s:{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, {s:s, s:b, s:b, s:b}]},"
		" s:{s:s, s:b, s:b, s:b}, s:{s:s, s:b, s:b, s:b},"
		" s:{s:s, s:n, s:n, s:n, s:n, s:b, s:b, s:b, s:o, s:o}}",
		"version", "1.0", "truncation", "padding", "added_tokens", add, "normalizer",
		"pre_tokenizer", "type", "Sequence", "pretokenizers", "type", "Split", "pattern",
		"Regex", LLAMA3_REGEX, "behavior", "Isolated", "invert", 0, "type", "ByteLevel",
		"add_prefix_space", 0, "trim_offsets", 1, "use_regex", 0,
		"post_processor", "type", "ByteLevel", "add_prefix_space", 1, "trim_offsets", 0,
		"use_regex", 1,
		"decoder", "type", "ByteLevel", "add_prefix_space", 1, "trim_offsets", 1,
		"use_regex", 1,
		"model", "type", "BPE", "dropout", "unk_token", "continuing_subword_prefix",
		"end_of_word_suffix", "fuse_unk", 0, "byte_fallback", 0, "ignore_merges", 1,
		"vocab", vocab, "merges", merges);
	add = vocab = merges = NULL; /* owned by root now */
	if (root == NULL) {
		pcg_fail(err, "tokenizer.json: cannot build the JSON");
		goto out;
	}
	rc = write_json(path, root, err);
	json_decref(root);
out:
	json_decref(add);
	json_decref(vocab);
	json_decref(merges);
	for (int i = 0; tok && i < n_bpe; i++)
		free(tok[i]);
	free(tok);
	free(set.slot);
	return rc;
}

static int write_config(const char *path, int n_special, int vocab, pcg_err *err)
{
	const int bos = text_vocab - n_special;
	json_t *j = json_pack(
		"{s:[s], s:b, s:f, s:i, s:[i,i,i], s:s, s:i, s:i, s:f, s:i, s:i, s:b, s:s, s:i, s:i,"
		" s:i, s:i, s:f, s:f, s:b, s:s, s:s, s:b, s:i}",
		"architectures", "LlamaForCausalLM", "attention_bias", 0, "attention_dropout", 0.0,
		"bos_token_id", bos, "eos_token_id", bos + 1, bos + 8, bos + 9, "hidden_act", "silu",
		"hidden_size", hidden, "head_dim", head_dim, "initializer_range", stdev,
		"intermediate_size", ffn, "max_position_embeddings", max_pos, "mlp_bias", 0,
		"model_type", "llama", "num_attention_heads", heads, "num_hidden_layers", layers,
		"num_key_value_heads", kv_heads, "pretraining_tp", 1, "rms_norm_eps", 1e-5,
		"rope_theta", rope_theta, "tie_word_embeddings", !untied, "torch_dtype",
		!strcmp(dtype_s, "f32") ? "float32" : !strcmp(dtype_s, "f16") ? "float16" : "bfloat16",
		"transformers_version", "4.45.2", "use_cache", 1, "vocab_size", vocab);
	int rc;

	if (j == NULL)
		return pcg_fail(err, "config.json: cannot build the JSON");
	if (!strcmp(rope_s, "llama3"))
		json_object_set_new(j, "rope_scaling",
				    json_pack("{s:f, s:f, s:f, s:i, s:s}", "factor", rope_factor,
					      "high_freq_factor", 4.0, "low_freq_factor", 1.0,
					      "original_max_position_embeddings", 8192, "rope_type",
					      "llama3"));
	else
		json_object_set_new(j, "rope_scaling", json_null());
	rc = write_json(path, j, err);
	json_decref(j);
	return rc;
}

/* Fills n values with N(0, std^2) (or a constant when std < 0: norm
 * weights are 1 in a fresh HF model) in the file dtype. Each pair of values
 * comes from one Philox block (Box-Muller), so the fill is parallel and the
 * result depends only on (seed, tensor index). */
static void fill(void *dst, pcg_dtype dt, size_t n, double std, uint64_t stream)
{
	const uint32_t key[2] = { (uint32_t)seed_i, 0x6d6b6d6fu };

#pragma omp parallel for schedule(static)
	for (size_t i = 0; i < (n + 1) / 2; i++) {
		float v[2];
		if (std < 0) {
			v[0] = v[1] = (float)-std;
		} else {
			uint32_t ctr[4] = { (uint32_t)i, (uint32_t)(i >> 32), (uint32_t)stream, 0 }, o[4];
			pcg_philox4x32_10(ctr, key, o);
			double u1 = ((o[0] >> 5) * 67108864.0 + (o[1] >> 6) + 1.0) / 9007199254740993.0;
			double u2 = ((o[2] >> 5) * 67108864.0 + (o[3] >> 6)) / 9007199254740992.0;
			double r = sqrt(-2.0 * log(u1)) * std;
			v[0] = (float)(r * cos(2 * M_PI * u2));
			v[1] = (float)(r * sin(2 * M_PI * u2));
		}
		for (int j = 0; j < 2 && 2 * i + j < n; j++) {
			size_t e = 2 * i + j;
			if (dt == PCG_F32)
				((float *)dst)[e] = v[j];
			else if (dt == PCG_BF16)
				((uint16_t *)dst)[e] = pcg_f32_to_bf16(v[j]);
			else
				((uint16_t *)dst)[e] = pcg_f32_to_f16(v[j]);
		}
	}
}

static int write_weights(const char *path, pcg_dtype dt, int vocab, pcg_err *err)
{
	const int hd = head_dim, q_dim = heads * hd, kv_dim = kv_heads * hd;
	const int per_layer = 9, n_mtp = llasa_plus ? 2 : 0;
	const char *pre = llasa_plus ? "llm." : "";
	const int n = 2 + layers * per_layer + (untied ? 1 : 0) + n_mtp * (3 + per_layer);
	double *sd = calloc((size_t)n, sizeof *sd); /* each tensor's std; -1: ones (norms) */
	st_out *t = calloc((size_t)n, sizeof *t);
	char **names = calloc((size_t)n, sizeof *names);
	int k = 0, rc = -1;

	if (!t || !names || !sd) {
		free(t);
		free(names);
		free(sd);
		return pcg_fail(err, "out of memory");
	}
	char nm[160];
#define T2(tn, r, c) do { snprintf(nm, sizeof nm, "%s%s", pre, tn); \
		t[k].name = names[k] = strdup(nm); t[k].dtype = dt; t[k].ndim = 2; \
		t[k].shape[0] = (r); t[k].shape[1] = (c); sd[k] = stdev; k++; } while (0)
#define T1(tn, r) do { snprintf(nm, sizeof nm, "%s%s", pre, tn); \
		t[k].name = names[k] = strdup(nm); t[k].dtype = dt; t[k].ndim = 1; \
		t[k].shape[0] = (r); sd[k] = -1.0; k++; } while (0)
	/* one Llama decoder layer's tensors under the name prefix lp (c = 0: a
	 * vector), the backbone's layers and each Llasa+ head's block alike */
	const struct { const char *s; int r, c; } dec[] = {
		{ "input_layernorm.weight", hidden, 0 },
		{ "self_attn.q_proj.weight", q_dim, hidden },
		{ "self_attn.k_proj.weight", kv_dim, hidden },
		{ "self_attn.v_proj.weight", kv_dim, hidden },
		{ "self_attn.o_proj.weight", hidden, q_dim },
		{ "post_attention_layernorm.weight", hidden, 0 },
		{ "mlp.gate_proj.weight", ffn, hidden },
		{ "mlp.up_proj.weight", ffn, hidden },
		{ "mlp.down_proj.weight", hidden, ffn },
	};
	char lp[64], ln[128];
#define LAYER() \
	for (size_t j = 0; j < sizeof dec / sizeof dec[0]; j++) { \
		snprintf(ln, sizeof ln, "%s%s", lp, dec[j].s); \
		if (dec[j].c > 0) \
			T2(ln, dec[j].r, dec[j].c); \
		else \
			T1(ln, dec[j].r); \
	}
	T2("model.embed_tokens.weight", vocab, hidden);
	for (int l = 0; l < layers; l++) {
		snprintf(lp, sizeof lp, "model.layers.%d.", l);
		LAYER();
	}
	T1("model.norm.weight", hidden);
	if (untied)
		T2("lm_head.weight", vocab, hidden);
	/* Llasa+'s heads, after the backbone: its tensors keep the indices (so
	 * the weights) they have without them */
	pre = "";
	for (int h = 1; h <= n_mtp; h++) {
		snprintf(ln, sizeof ln, "mtp_%d_local_RMSNorm.weight", h);
		T1(ln, hidden);
		snprintf(ln, sizeof ln, "mtp_%d_proj.weight", h);
		T2(ln, hidden, hidden);
		snprintf(ln, sizeof ln, "mtp_%d_proj.bias", h);
		T1(ln, hidden);
		sd[k - 1] = stdev;
		snprintf(lp, sizeof lp, "mtp_%d_block.", h);
		LAYER();
	}
#undef LAYER
	double total = 0, done = 0, t0 = omp_get_wtime();
	for (int i = 0; i < k; i++)
		total += (double)t[i].shape[0] * (t[i].ndim == 2 ? (double)t[i].shape[1] : 1);
	for (int i = 0; i < k; i++) {
		size_t numel = (size_t)t[i].shape[0] * (t[i].ndim == 2 ? (size_t)t[i].shape[1] : 1);
		if (progress)
			fprintf(stderr, "\r%s: weights %3.0f%% (tensor %d of %d), %.1f s ", prog,
				100 * done / total, i + 1, k, omp_get_wtime() - t0);
		void *d = malloc(numel * pcg_dtype_size(dt));
		if (names[i] == NULL || d == NULL) {
			pcg_fail(err, "out of memory for the weights");
			goto out;
		}
		fill(d, dt, numel, sd[i], (uint64_t)i);
		t[i].data = d;
		done += (double)numel;
	}
	if (progress)
		fprintf(stderr, "\r%s: writing %s (%.2f GB), %.1f s\033[K", prog, path,
			total * pcg_dtype_size(dt) / 1e9, omp_get_wtime() - t0);
	rc = st_write(path, t, k, "{\"format\": \"pt\"}", err);
	if (progress)
		fprintf(stderr, "\r%s: %.2f GB of weights in %.1f s\033[K\n", prog,
			total * pcg_dtype_size(dt) / 1e9, omp_get_wtime() - t0);
out:
	for (int i = 0; i < k; i++) {
		free((void *)t[i].data);
		free(names[i]);
	}
	free(t);
	free(names);
	free(sd);
	return rc;
}

/* The presets: LLaSA's three sizes (their config.json on Hugging Face). */
static const struct {
	const char *name;
	int hidden, layers, heads, kv_heads, head_dim, ffn, untied;
	double rope_factor;
} presets[] = {
	{ "llasa-1b", 2048, 16, 32, 8, 64, 8192, 0, 32.0 },  /* Llama 3.2 1B body */
	{ "llasa-3b", 3072, 28, 24, 8, 128, 8192, 0, 32.0 }, /* Llama 3.2 3B body */
	{ "llasa-8b", 4096, 32, 32, 8, 128, 14336, 1, 8.0 }, /* Llama 3.1 8B body */
};

static int apply_preset(void)
{
	if (!strcmp(preset, "tiny"))
		return 0;
	for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
		if (strcmp(preset, presets[i].name))
			continue;
#define SET(flag, var, val) if (!pcg_opts_given(opts, flag)) var = val
		SET("hidden", hidden, presets[i].hidden);
		SET("layers", layers, presets[i].layers);
		SET("heads", heads, presets[i].heads);
		SET("kv-heads", kv_heads, presets[i].kv_heads);
		SET("head-dim", head_dim, presets[i].head_dim);
		SET("ffn", ffn, presets[i].ffn);
		SET("text-vocab", text_vocab, 128256);
		SET("speech", speech, 65536);
		SET("untied", untied, presets[i].untied);
#undef SET
		rope_factor = presets[i].rope_factor;
		return 0;
	}
	return -1;
}

int main(int argc, char **argv)
{
	pcg_err err = { "" };
	char path[4200];
	int first = pcg_opts_parse(opts, argc, argv, &err);
	pcg_dtype dt;

	if (first == PCG_OPTS_HELP) {
		pcg_opts_usage(stdout, prog, "--out DIR [options]", opts);
		return 0;
	}
	if (first < 0 || first != argc || out_dir == NULL) {
		return pcg_usage_error(prog, "--out DIR [options]", opts,
			first < 0 ? err.msg : first != argc ? "unexpected argument" : "--out DIR is required");
	}
	progress = !quiet && isatty(2);
	if (apply_preset() < 0) {
		fprintf(stderr, "%s: --preset: unknown preset '%s' (tiny, llasa-1b, llasa-3b, "
			"llasa-8b)\n", prog, preset);
		return 2;
	}
	if (!strcmp(dtype_s, "f32")) dt = PCG_F32;
	else if (!strcmp(dtype_s, "f16")) dt = PCG_F16;
	else if (!strcmp(dtype_s, "bf16")) dt = PCG_BF16;
	else {
		fprintf(stderr, "%s: --dtype: '%s' is not f32, f16 or bf16\n", prog, dtype_s);
		return 2;
	}
	if (strcmp(rope_s, "llama3") && strcmp(rope_s, "none")) {
		fprintf(stderr, "%s: --rope-scaling: '%s' is not llama3 or none\n", prog, rope_s);
		return 2;
	}
	if (head_dim == 0) {
		if (hidden % heads) {
			fprintf(stderr, "%s: --hidden %d is not a multiple of --heads %d\n", prog,
				hidden, heads);
			return 2;
		}
		head_dim = hidden / heads;
	}
	if (heads % kv_heads || head_dim % 2) {
		fprintf(stderr, "%s: --heads must be a multiple of --kv-heads, --head-dim even\n", prog);
		return 2;
	}
	const int n_special = text_vocab >= 4096 ? 256 : 16;
	const int vocab = text_vocab + 8 + speech;

	if (mkdir(out_dir, 0777) != 0 && errno != EEXIST) {
		fprintf(stderr, "%s: %s: %s\n", prog, out_dir, strerror(errno));
		return 1;
	}
	snprintf(path, sizeof path, "%s/tokenizer.json", out_dir);
	if (write_tokenizer(path, n_special, &err) < 0)
		goto fail;
	snprintf(path, sizeof path, "%s/llasa_plus", out_dir);
	if (llasa_plus && mkdir(path, 0777) != 0 && errno != EEXIST) {
		fprintf(stderr, "%s: %s: %s\n", prog, path, strerror(errno));
		return 1;
	}
	snprintf(path, sizeof path, "%s/%smodel.safetensors", out_dir,
		 llasa_plus ? "llasa_plus/" : "");
	if (write_weights(path, dt, vocab, &err) < 0)
		goto fail;
	snprintf(path, sizeof path, "%s/config.json", out_dir);
	if (write_config(path, n_special, vocab, &err) < 0)
		goto fail;
	return 0;
fail:
	pcg_report(prog, &err);
	return 1;
}
