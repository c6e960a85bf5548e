/* config.h: the fields of a Hugging Face LlamaForCausalLM config.json that
 * the engine needs, parsed and validated.
 *
 * Required: architectures containing "LlamaForCausalLM" (or model_type
 * "llama" when architectures is absent), hidden_size, num_hidden_layers,
 * num_attention_heads, intermediate_size, vocab_size. Optional, with the
 * defaults of transformers' LlamaConfig: num_key_value_heads (=
 * num_attention_heads), head_dim (= hidden_size / num_attention_heads),
 * rms_norm_eps (1e-6), rope_theta (10000), rope_scaling (null; "default" or
 * "llama3" with factor, low_freq_factor, high_freq_factor,
 * original_max_position_embeddings), tie_word_embeddings (false),
 * max_position_embeddings (2048), hidden_act ("silu" only), attention_bias
 * and mlp_bias (false only), bos_token_id, eos_token_id (int or list).
 * A missing required field, a wrong type, an unsupported value or an
 * inconsistent shape (heads not a multiple of kv heads) is an error that
 * names the field.
 */
#ifndef PCG_CONFIG_H
#define PCG_CONFIG_H

#include "err.h"

typedef struct llama_config {
	int hidden;        /* hidden_size */
	int n_layers;      /* num_hidden_layers */
	int n_heads;       /* num_attention_heads */
	int n_kv_heads;    /* num_key_value_heads */
	int head_dim;      /* head_dim */
	int ffn;           /* intermediate_size */
	int vocab;         /* vocab_size */
	float eps;         /* rms_norm_eps */
	float rope_theta;
	int rope_llama3;   /* rope_scaling.rope_type == "llama3" */
	float rope_factor, rope_low_freq, rope_high_freq;
	int rope_orig_max_pos;
	int tie;           /* tie_word_embeddings */
	int max_pos;       /* max_position_embeddings */
	int bos;           /* -1 when absent */
	int eos[8];        /* eos_token_id(s); n_eos may be 0 */
	int n_eos;
} llama_config;

/* Parses the config.json at path. Returns 0, or -1 with err naming the field. */
int llama_config_load(const char *path, llama_config *c, pcg_err *err);

/* The same from a JSON text (for tests). */
int llama_config_parse(const char *json, size_t len, llama_config *c, pcg_err *err);

/* The same from a GGUF file's llama.* metadata (lib/formats/gguf.h): architecture
 * "llama" only (another is an error naming it). llama3 rope scaling is not
 * in the metadata: it comes with the file's rope_freqs.weight tensor, which
 * lib/engine/model.c applies; rope_llama3 is left 0 here. tie is 1 when the file
 * has no output.weight. */
struct gguf_file;
int llama_config_from_gguf(const struct gguf_file *f, llama_config *c, pcg_err *err);

#endif
