/* config_gguf.c: a llama_config from the llama.* metadata of a GGUF file,
 * the keys llama.cpp's converter writes, validated as config.c validates a
 * config.json (see config.h). Each error names the key.
 */
#include "config.h"

#include <limits.h>
#include <math.h>
#include <string.h>

#include "gguf.h"

/* An integer key in [min, INT_MAX]; def < min makes it required. */
static int get_int(const gguf_file *f, const char *key, int def, int min, int *out, pcg_err *err)
{
	int64_t v;

	if (gguf_find_key(f, key) < 0) {
		if (def < min)
			return pcg_fail(err, "%s: missing", key);
		*out = def;
		return 0;
	}
	if (gguf_get_int(f, key, &v, err) < 0)
		return -1;
	if (v < min || v > INT_MAX)
		return pcg_fail(err, "%s: %lld out of range (at least %d)", key, (long long)v, min);
	*out = (int)v;
	return 0;
}

/* A positive finite number; has_def = 0 makes it required. */
static int get_pos(const gguf_file *f, const char *key, int has_def, double def, float *out,
		   pcg_err *err)
{
	double v;

	if (gguf_find_key(f, key) < 0) {
		if (!has_def)
			return pcg_fail(err, "%s: missing", key);
		*out = (float)def;
		return 0;
	}
	if (gguf_get_float(f, key, &v, err) < 0)
		return -1;
	if (!(v > 0) || !isfinite((float)v))
		return pcg_fail(err, "%s: %g is not a positive finite number", key, v);
	*out = (float)v;
	return 0;
}

static int check_arch(const gguf_file *f, pcg_err *err)
{
	const char *s;
	size_t n;

	if (gguf_get_str(f, "general.architecture", &s, &n, err) < 0)
		return -1;
	if (n != 5 || memcmp(s, "llama", 5) != 0) {
		char shown[40];
		size_t i;
		for (i = 0; i < n && i < sizeof shown - 1; i++)
			shown[i] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
		shown[i] = '\0';
		return pcg_fail(err, "general.architecture '%s' is not supported (llama only)", shown);
	}
	return 0;
}

/* What the engine cannot run: experts, rope scaling other than llama3's
 * (which comes as rope_freqs.weight, not as a key). */
static int check_unsupported(const gguf_file *f, pcg_err *err)
{
	int experts;
	const char *s;
	size_t n;

	if (get_int(f, "llama.expert_count", 0, 0, &experts, err) < 0)
		return -1;
	if (experts > 0)
		return pcg_fail(err, "llama.expert_count: %d (mixture of experts is not supported)",
				experts);
	if (gguf_find_key(f, "llama.rope.scaling.type") >= 0) {
		if (gguf_get_str(f, "llama.rope.scaling.type", &s, &n, err) < 0)
			return -1;
		if (!(n == 4 && memcmp(s, "none", 4) == 0))
			return pcg_fail(err, "llama.rope.scaling.type: '%.*s' is not supported (only none)",
					(int)(n < 32 ? n : 32), s);
	}
	return 0;
}

/* llama.vocab_size, else the tokenizer's token count, else the rows of the
 * embedding. */
static int get_vocab(const gguf_file *f, int *vocab, pcg_err *err)
{
	const gguf_tensor *emb = gguf_find_tensor(f, "token_embd.weight");
	gguf_type t;
	size_t n;

	if (gguf_find_key(f, "llama.vocab_size") >= 0)
		return get_int(f, "llama.vocab_size", 0, 1, vocab, err);
	if (gguf_find_key(f, "tokenizer.ggml.tokens") >= 0) {
		if (gguf_get_arr(f, "tokenizer.ggml.tokens", &t, &n, err) < 0)
			return -1;
		if (n < 1 || n > INT_MAX)
			return pcg_fail(err, "tokenizer.ggml.tokens: %zu tokens", n);
		*vocab = (int)n;
		return 0;
	}
	if (emb != NULL && emb->ndim == 2 && emb->ne[1] <= INT_MAX) {
		*vocab = (int)emb->ne[1];
		return 0;
	}
	return pcg_fail(err, "llama.vocab_size: missing (and no tokenizer.ggml.tokens or"
			" token_embd.weight)");
}

/* head_dim: llama.attention.key_length, else llama.rope.dimension_count,
 * else hidden / heads; the other two must agree with it when present
 * (partial rotary and different key and value sizes are not supported). */
static int get_head_dim(const gguf_file *f, llama_config *c, pcg_err *err)
{
	int rot, vlen;

	if (gguf_find_key(f, "llama.attention.key_length") >= 0) {
		if (get_int(f, "llama.attention.key_length", 0, 1, &c->head_dim, err) < 0)
			return -1;
	} else if (gguf_find_key(f, "llama.rope.dimension_count") >= 0) {
		if (get_int(f, "llama.rope.dimension_count", 0, 1, &c->head_dim, err) < 0)
			return -1;
	} else if (c->hidden % c->n_heads != 0) {
		return pcg_fail(err, "llama.attention.key_length: missing, and llama.embedding_length"
				" %d is not a multiple of llama.attention.head_count %d", c->hidden,
				c->n_heads);
	} else {
		c->head_dim = c->hidden / c->n_heads;
	}
	if (get_int(f, "llama.rope.dimension_count", c->head_dim, 1, &rot, err) < 0 ||
	    get_int(f, "llama.attention.value_length", c->head_dim, 1, &vlen, err) < 0)
		return -1;
	if (rot != c->head_dim)
		return pcg_fail(err, "llama.rope.dimension_count: %d, not the head size %d (partial"
				" rotary embeddings are not supported)", rot, c->head_dim);
	if (vlen != c->head_dim)
		return pcg_fail(err, "llama.attention.value_length: %d, not the key size %d", vlen,
				c->head_dim);
	if (c->head_dim % 2 != 0)
		return pcg_fail(err, "llama.attention.key_length: head size %d is odd (rotate-half"
				" RoPE needs pairs)", c->head_dim);
	return 0;
}

/* A token id key: absent leaves *out alone; else in [0, vocab). */
static int get_token(const gguf_file *f, const char *key, int vocab, int *out, int *found,
		     pcg_err *err)
{
	int64_t v;

	*found = gguf_find_key(f, key) >= 0;
	if (!*found)
		return 0;
	if (gguf_get_int(f, key, &v, err) < 0)
		return -1;
	if (v < 0 || v >= vocab)
		return pcg_fail(err, "%s: %lld not in [0, vocab size %d)", key, (long long)v, vocab);
	*out = (int)v;
	return 0;
}

static int parse(const gguf_file *f, llama_config *c, pcg_err *err)
{
	int found;

	if (check_arch(f, err) < 0 || check_unsupported(f, err) < 0)
		return -1;
	if (get_int(f, "llama.embedding_length", 0, 1, &c->hidden, err) < 0 ||
	    get_int(f, "llama.block_count", 0, 1, &c->n_layers, err) < 0 ||
	    get_int(f, "llama.attention.head_count", 0, 1, &c->n_heads, err) < 0 ||
	    get_int(f, "llama.feed_forward_length", 0, 1, &c->ffn, err) < 0 ||
	    get_int(f, "llama.attention.head_count_kv", c->n_heads, 1, &c->n_kv_heads, err) < 0 ||
	    get_int(f, "llama.context_length", 2048, 1, &c->max_pos, err) < 0 ||
	    get_vocab(f, &c->vocab, err) < 0 || get_head_dim(f, c, err) < 0)
		return -1;
	if (c->n_heads % c->n_kv_heads != 0)
		return pcg_fail(err, "llama.attention.head_count_kv: llama.attention.head_count %d is"
				" not a multiple of %d", c->n_heads, c->n_kv_heads);
	if (get_pos(f, "llama.attention.layer_norm_rms_epsilon", 0, 0, &c->eps, err) < 0 ||
	    get_pos(f, "llama.rope.freq_base", 1, 10000, &c->rope_theta, err) < 0)
		return -1;

	/* llama3 scaling, when the model has it, is the rope_freqs.weight
	 * tensor that lib/engine/model.c applies. */
	c->rope_llama3 = 0;
	c->rope_factor = 1;
	c->rope_low_freq = 1;
	c->rope_high_freq = 1;
	c->rope_orig_max_pos = c->max_pos;
	c->tie = gguf_find_tensor(f, "output.weight") == NULL;

	c->bos = -1;
	c->n_eos = 0;
	if (get_token(f, "tokenizer.ggml.bos_token_id", c->vocab, &c->bos, &found, err) < 0 ||
	    get_token(f, "tokenizer.ggml.eos_token_id", c->vocab, &c->eos[0], &found, err) < 0)
		return -1;
	c->n_eos = found;
	return 0;
}

int llama_config_from_gguf(const struct gguf_file *f, llama_config *c, pcg_err *err)
{
	llama_config tmp;

	memset(&tmp, 0, sizeof tmp);
	if (parse(f, &tmp, err) < 0)
		return -1;
	*c = tmp; /* *c is untouched on failure */
	return 0;
}
