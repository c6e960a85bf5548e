/* config.c: reads a Hugging Face LlamaForCausalLM config.json into a
 * llama_config, with transformers' defaults, refusing what the engine
 * cannot run (see config.h). Its functions are named for what they fill,
 * llama_config_* (config_gguf.c fills the same struct from a GGUF).
 */
#include "config.h"
#include "fileio.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A config.json is a few kB; anything far larger is not one. */
#define CONFIG_MAX_BYTES (16 << 20)

/* Optional fields may also be null in files written by transformers, which
 * means the same as absent. */
static json_t *field(const json_t *root, const char *name)
{
	json_t *v = json_object_get(root, name);

	return json_is_null(v) ? NULL : v;
}

/* An integer field in [min, INT_MAX]; def < min makes it required. */
static int get_int(const json_t *root, const char *name, int def, int min, int *out,
		   pcg_err *err)
{
	const json_t *v = field(root, name);
	json_int_t x;

	if (v == NULL) {
		if (def < min)
			return pcg_fail(err, "%s: missing", name);
		*out = def;
		return 0;
	}
	if (!json_is_integer(v))
		return pcg_fail(err, "%s: not an integer", name);
	x = json_integer_value(v);
	if (x < min || x > INT_MAX)
		return pcg_fail(err, "%s: %lld out of range (at least %d)", name, (long long)x, min);
	*out = (int)x;
	return 0;
}

/* A number field (integer or real) that must be finite and positive;
 * has_def = 0 makes it required. */
static int get_pos(const json_t *root, const char *name, int has_def, double def,
		   float *out, pcg_err *err)
{
	const json_t *v = field(root, name);
	double x;

	if (v == NULL) {
		if (!has_def)
			return pcg_fail(err, "%s: missing", name);
		*out = (float)def;
		return 0;
	}
	if (!json_is_number(v))
		return pcg_fail(err, "%s: not a number", name);
	x = json_number_value(v);
	if (!(x > 0) || !isfinite((float)x))
		return pcg_fail(err, "%s: %g is not a positive finite number", name, x);
	*out = (float)x;
	return 0;
}

/* A boolean field; only the value `allowed` is supported (-1: both). */
static int get_bool(const json_t *root, const char *name, int allowed, int *out,
		    pcg_err *err)
{
	const json_t *v = field(root, name);

	*out = 0;
	if (v == NULL)
		return 0;
	if (!json_is_boolean(v))
		return pcg_fail(err, "%s: not a boolean", name);
	*out = json_is_true(v);
	if (allowed >= 0 && *out != allowed)
		return pcg_fail(err, "%s: %s is not supported", name, *out ? "true" : "false");
	return 0;
}

/* architectures must contain LlamaForCausalLM; a config without it (older
 * files) is accepted by model_type "llama". */
static int check_arch(const json_t *root, pcg_err *err)
{
	const json_t *arch = field(root, "architectures");
	const json_t *type = field(root, "model_type");
	const json_t *v;
	size_t i;

	if (type != NULL && !(json_is_string(type) && strcmp(json_string_value(type), "llama") == 0))
		return pcg_fail(err, "model_type: not \"llama\"");
	if (arch == NULL) {
		if (type == NULL)
			return pcg_fail(err, "architectures: missing (and no model_type \"llama\")");
		return 0;
	}
	if (!json_is_array(arch))
		return pcg_fail(err, "architectures: not a list");
	json_array_foreach(arch, i, v) {
		if (!json_is_string(v))
			return pcg_fail(err, "architectures[%zu]: not a string", i);
		if (strcmp(json_string_value(v), "LlamaForCausalLM") == 0)
			return 0;
	}
	return pcg_fail(err, "architectures: no LlamaForCausalLM (only LLaMA models are supported)");
}

/* rope_scaling: null, "default", or "llama3" with its four parameters
 * (transformers' _compute_llama3_parameters). Older files say "type".
 * transformers 5 writes the same object as "rope_parameters", with
 * rope_theta inside it; that form is read when rope_scaling is absent. */
static int get_rope_scaling(const json_t *root, llama_config *c, pcg_err *err)
{
	const json_t *rs = field(root, "rope_scaling");
	const json_t *rp = field(root, "rope_parameters");
	const json_t *type;
	const char *s;

	c->rope_llama3 = 0;
	c->rope_factor = 1;
	c->rope_low_freq = 1;
	c->rope_high_freq = 1;
	c->rope_orig_max_pos = c->max_pos;
	if (rs == NULL && rp != NULL) {
		if (!json_is_object(rp))
			return pcg_fail(err, "rope_parameters: not an object");
		if (field(root, "rope_theta") == NULL &&
		    get_pos(rp, "rope_theta", 1, 10000, &c->rope_theta, err) < 0) {
			pcg_err_prefix(err, "rope_parameters");
			return -1;
		}
		rs = rp;
	}
	if (rs == NULL)
		return 0;
	if (!json_is_object(rs))
		return pcg_fail(err, "rope_scaling: not an object");
	type = field(rs, "rope_type");
	if (type == NULL)
		type = field(rs, "type");
	if (!json_is_string(type))
		return pcg_fail(err, "rope_scaling.rope_type: missing or not a string");
	s = json_string_value(type);
	if (strcmp(s, "default") == 0)
		return 0;
	if (strcmp(s, "llama3") != 0)
		return pcg_fail(err, "rope_scaling.rope_type: \"%.32s\" is not supported (only default, llama3)", s);

	c->rope_llama3 = 1;
	if (get_pos(rs, "factor", 0, 0, &c->rope_factor, err) < 0 ||
	    get_pos(rs, "low_freq_factor", 0, 0, &c->rope_low_freq, err) < 0 ||
	    get_pos(rs, "high_freq_factor", 0, 0, &c->rope_high_freq, err) < 0 ||
	    get_int(rs, "original_max_position_embeddings", 0, 1, &c->rope_orig_max_pos, err) < 0) {
		pcg_err_prefix(err, "rope_scaling");
		return -1;
	}
	/* The smoothing between the two bands divides by high - low. */
	if (!(c->rope_high_freq > c->rope_low_freq))
		return pcg_fail(err, "rope_scaling.high_freq_factor: %g not above low_freq_factor %g",
				c->rope_high_freq, c->rope_low_freq);
	return 0;
}

/* A token id: non-negative and inside the vocabulary. */
static int token_id(const json_t *v, const char *name, int vocab, int *out, pcg_err *err)
{
	if (!json_is_integer(v))
		return pcg_fail(err, "%s: not an integer", name);
	if (json_integer_value(v) < 0 || json_integer_value(v) >= vocab)
		return pcg_fail(err, "%s: %lld not in [0, vocab_size %d)", name,
				(long long)json_integer_value(v), vocab);
	*out = (int)json_integer_value(v);
	return 0;
}

static int get_tokens(const json_t *root, llama_config *c, pcg_err *err)
{
	const json_t *bos = field(root, "bos_token_id");
	const json_t *eos = field(root, "eos_token_id");
	const json_t *v;
	size_t i;

	c->bos = -1;
	c->n_eos = 0;
	if (bos != NULL && token_id(bos, "bos_token_id", c->vocab, &c->bos, err) < 0)
		return -1;
	if (eos == NULL)
		return 0;
	if (!json_is_array(eos))
		return token_id(eos, "eos_token_id", c->vocab, &c->eos[c->n_eos++], err);
	if (json_array_size(eos) > sizeof c->eos / sizeof c->eos[0])
		return pcg_fail(err, "eos_token_id: %zu ids, at most %zu supported",
				json_array_size(eos), sizeof c->eos / sizeof c->eos[0]);
	json_array_foreach(eos, i, v) {
		if (token_id(v, "eos_token_id", c->vocab, &c->eos[c->n_eos++], err) < 0)
			return -1;
	}
	return 0;
}

static int parse_root(const json_t *root, llama_config *c, pcg_err *err)
{
	const json_t *act;
	int unused;

	if (check_arch(root, err) < 0)
		return -1;
	if (get_int(root, "hidden_size", 0, 1, &c->hidden, err) < 0 ||
	    get_int(root, "num_hidden_layers", 0, 1, &c->n_layers, err) < 0 ||
	    get_int(root, "num_attention_heads", 0, 1, &c->n_heads, err) < 0 ||
	    get_int(root, "intermediate_size", 0, 1, &c->ffn, err) < 0 ||
	    get_int(root, "vocab_size", 0, 1, &c->vocab, err) < 0 ||
	    get_int(root, "num_key_value_heads", c->n_heads, 1, &c->n_kv_heads, err) < 0 ||
	    get_int(root, "max_position_embeddings", 2048, 1, &c->max_pos, err) < 0)
		return -1;

	/* transformers derives head_dim only when the division is exact. */
	if (field(root, "head_dim") == NULL && c->hidden % c->n_heads != 0)
		return pcg_fail(err, "head_dim: missing, and hidden_size %d is not a multiple of num_attention_heads %d",
				c->hidden, c->n_heads);
	if (get_int(root, "head_dim", c->hidden / c->n_heads, 1, &c->head_dim, err) < 0)
		return -1;
	if (c->head_dim % 2 != 0)
		return pcg_fail(err, "head_dim: %d is odd (rotate-half RoPE needs pairs)", c->head_dim);
	if (c->n_heads % c->n_kv_heads != 0)
		return pcg_fail(err, "num_key_value_heads: num_attention_heads %d is not a multiple of %d",
				c->n_heads, c->n_kv_heads);

	if (get_pos(root, "rms_norm_eps", 1, 1e-6, &c->eps, err) < 0 ||
	    get_pos(root, "rope_theta", 1, 10000, &c->rope_theta, err) < 0 ||
	    get_rope_scaling(root, c, err) < 0 ||
	    get_bool(root, "tie_word_embeddings", -1, &c->tie, err) < 0 ||
	    get_bool(root, "attention_bias", 0, &unused, err) < 0 ||
	    get_bool(root, "mlp_bias", 0, &unused, err) < 0)
		return -1;

	act = field(root, "hidden_act");
	if (act != NULL && !json_is_string(act))
		return pcg_fail(err, "hidden_act: not a string");
	if (act != NULL && strcmp(json_string_value(act), "silu") != 0)
		return pcg_fail(err, "hidden_act: \"%.32s\" is not supported (only silu)",
				json_string_value(act));

	return get_tokens(root, c, err);
}

int llama_config_parse(const char *json, size_t len, llama_config *c, pcg_err *err)
{
	llama_config tmp;
	json_error_t je;
	json_t *root;
	int rc;

	memset(&tmp, 0, sizeof tmp);
	root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
	if (root == NULL)
		return pcg_json_fail(err, "config", &je);
	if (!json_is_object(root))
		rc = pcg_fail(err, "not a JSON object");
	else
		rc = parse_root(root, &tmp, err);
	json_decref(root);
	if (rc == 0)
		*c = tmp; /* *c is untouched on failure */
	return rc;
}

int llama_config_load(const char *path, llama_config *c, pcg_err *err)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	size_t n;
	int rc;

	if (f == NULL)
		return pcg_fail(err, "%s: %s", path, strerror(errno));
	buf = malloc(CONFIG_MAX_BYTES);
	if (buf == NULL) {
		fclose(f);
		return pcg_fail(err, "%s: out of memory", path);
	}
	n = fread(buf, 1, CONFIG_MAX_BYTES, f);
	if (ferror(f))
		rc = pcg_fail(err, "read error");
	else if (n == CONFIG_MAX_BYTES)
		rc = pcg_fail(err, "larger than %d bytes", CONFIG_MAX_BYTES);
	else
		rc = llama_config_parse(buf, n, c, err);
	if (rc < 0)
		pcg_err_prefix(err, path);
	free(buf);
	fclose(f);
	return rc;
}
