/* model.h: a Hugging Face LlamaForCausalLM checkpoint on the CPU or a CUDA
 * device: loading (weights mmapped in their file dtype; on a device,
 * uploaded once in that dtype), a KV cache per sequence with truncate and
 * append (on the model's device), and the forward pass over a block of
 * positions.
 *
 * The forward pass computes what transformers' LlamaForCausalLM computes,
 * with activations in f32: RMSNorm in f32, rotate-half RoPE (llama3 scaling
 * when configured), grouped-query causal attention, SwiGLU MLP, final norm,
 * lm_head (embed_tokens when tie_word_embeddings is true, as transformers
 * does even when an lm_head tensor is stored).
 *
 * A Llasa+ checkpoint (Tian et al., ASRU 2025: the backbone under `llm.`,
 * multi-token prediction heads mtp_<k>_*) is a model with heads: head k is
 * a decoder layer of the backbone's shape on its own input,
 *
 *   u_1 = h,  u_k = y_{k-1};   y_k = block_k(proj_k(rmsnorm_k(u_k)))
 *
 * where h is the backbone's final state after the final norm, rmsnorm_k has
 * eps LLAMA_MTP_EPS, proj_k is nn.Linear with bias, and block_k attends over
 * the sequence with its own KV cache (kept in the sequence's llama_kv beside
 * the backbone's layers, so it advances and rolls back with them). lm_head
 * (no final norm) reads y_k, which predicts the token k + 1 after the one
 * the backbone predicts (lib/engine/mtp.h's offsets). Every pass runs the heads at
 * every position, so that their caches stay whole.
 */
#ifndef PCG_MODEL_H
#define PCG_MODEL_H

#include "config.h"
#include "err.h"
#include "matmul.h"
#include "sampling.h"

typedef struct llama_model llama_model;
typedef struct llama_kv llama_kv;

typedef struct llama_open_opts {
	/* Run only these checkpoint layers, in this order (a draft made of a
	 * layer subset of the target); NULL: all layers. */
	const int *layers;
	int n_layers;
	/* Where the forward runs: "cpu", "cuda" or "cuda:N" (lib/engine/device.h);
	 * NULL: the CPU. A CUDA model runs one forward at a time. */
	const char *device;
	/* 1: block-quantised matrices of a GGUF file are dequantised to f32 when
	 * the model opens (lib/core/quant.c; 4 bytes a weight): the same weights
	 * through the float kernels, a reference for the quantised ones. */
	int dequantize;
	/* 1: a Llasa+ checkpoint's heads are left out (they cost two decoder
	 * layers at every position). A layer subset never has them. */
	int no_mtp;
} llama_open_opts;

/* Heads a Llasa+ checkpoint may hold (its release has 2), and their input
 * norms' eps (LlamaRMSNorm's default, which their code keeps). */
#define LLAMA_MAX_MTP 4
#define LLAMA_MTP_EPS 1e-6f
/* Where a Llasa+ checkpoint lies in a model directory as released (the
 * llasa_plus folder of ASLP-lab/LLaSA_Plus beside Llasa-1B's files). */
#define LLAMA_LLASA_PLUS_DIR "llasa_plus"

/* Opens the model directory dir (config.json plus model.safetensors or an
 * index with shards), or a GGUF file (llama.cpp's format: its llama.*
 * metadata, F32/F16/BF16/Q8_0/Q4_0/Q4_K/Q5_K/Q6_K tensors). opts may be
 * NULL. A Llasa+ checkpoint is dir/llasa_plus/model.safetensors (read
 * instead of a model.safetensors beside it) or dir/model.safetensors with
 * `llm.` names; every tensor it holds must be the backbone's (under `llm.`)
 * or a head's (mtp_<k>_proj.weight, mtp_<k>_proj.bias,
 * mtp_<k>_local_RMSNorm.weight, mtp_<k>_block.<a decoder layer's names>,
 * k = 1..n consecutive), in the shapes the config implies. Returns NULL
 * with err naming the file, tensor or field on failure. */
llama_model *llama_open(const char *dir, const llama_open_opts *opts, pcg_err *err);
void llama_close(llama_model **m);

/* Where llama_open reads the weights of model directory dir: dir/llasa_plus
 * when it holds a model.safetensors, else dir (either may be in buf). The
 * backbone's names are then under "llm." when "llm.model.embed_tokens.weight"
 * is there. */
const char *llama_checkpoint_dir(const char *dir, char *buf, size_t size);

const llama_config *llama_get_config(const llama_model *m);
/* Number of layers that run (the subset when one was given). */
int llama_n_layers(const llama_model *m);
/* Number of Llasa+ heads the model runs (0: none). */
int llama_n_mtp(const llama_model *m);
/* Bytes of weights mapped from the checkpoint files. */
size_t llama_mapped_bytes(const llama_model *m);

/* A set of output rows of the lm_head: the logits computed and their order.
 * LLaSA: the speech range [128264, 193800) then the end token 128261. */
#define LLAMA_MAX_RANGES 4
typedef struct llama_rows {
	int n;
	int begin[LLAMA_MAX_RANGES], end[LLAMA_MAX_RANGES]; /* [begin, end) */
} llama_rows;
/* Total number of rows of a set; the full vocabulary when rows is NULL. */
int llama_rows_count(const llama_model *m, const llama_rows *rows);

/* A KV cache for one sequence, on the model's device. Grows as positions
 * are appended. */
llama_kv *llama_kv_new(const llama_model *m);
void llama_kv_free(llama_kv **kv);
/* Positions held. */
int llama_kv_len(const llama_kv *kv);
/* Drops positions >= pos (rollback); pos > len is an error. */
int llama_kv_truncate(llama_kv *kv, int pos, pcg_err *err);
/* Bytes held by the cache. */
size_t llama_kv_bytes(const llama_kv *kv);
/* dst holds src's first n positions (copied) and nothing after them; both of
 * one model, on the host (a device's cache: -1 with err, nothing changed). */
int llama_kv_copy(llama_kv *dst, const llama_kv *src, int n, pcg_err *err);

/* Runs tokens[0..n) at positions len(kv) .. len(kv)+n-1 in one pass (one
 * matrix product per weight), appending them to kv. Writes the logits of the
 * last n_out positions (0 <= n_out <= n) into logits as [n_out][count] where
 * count = llama_rows_count(m, rows). Token ids out of range, or exceeding
 * max_position_embeddings, are errors (kv is then unchanged). */
int llama_forward(llama_model *m, llama_kv *kv, const int *tokens, int n, int n_out,
		  const llama_rows *rows, float *logits, pcg_err *err);

/* llama_forward that also writes the final hidden states of the last n_out
 * positions, after the final RMSNorm (what lm_head reads, transformers'
 * hidden_states[-1]), into hidden as [n_out][hidden] when hidden is not
 * NULL. logits may be NULL: lm_head is then skipped. llama_forward is this
 * with hidden NULL; the copy is the only extra work. */
int llama_forward_hidden(llama_model *m, llama_kv *kv, const int *tokens, int n, int n_out,
			 const llama_rows *rows, float *logits, float *hidden, pcg_err *err);

/* llama_forward_hidden whose output is the tempered / top-k / top-p
 * probabilities of pcg_probs (lib/core/sampling.h) instead of the logits,
 * computed on the model's device (so only probabilities cross to the host).
 * A row pcg_probs refuses (NaN, +inf, all -inf) is an error (kv is then
 * unchanged). */
int llama_forward_probs(llama_model *m, llama_kv *kv, const int *tokens, int n, int n_out,
			const llama_rows *rows, const pcg_sampling *samp, float *probs,
			float *hidden, pcg_err *err);

/* One sequence of a batch: its tokens, appended to its own cache. */
typedef struct llama_seq {
	llama_kv *kv;        /* this sequence's cache; the tokens are appended to it */
	const int *tokens;   /* tokens[0..n) at positions len(kv) .. */
	int n, n_out;        /* positions, outputs (the last n_out; 0 <= n_out <= n) */
	float *out;          /* [n_out][count]: logits, or probabilities with samp; or NULL */
	float *hidden;       /* [n_out][hidden] final states, or NULL */
	float *heads;        /* [n_out][llama_n_mtp][hidden]: the Llasa+ heads' outputs y_k
			      * (what lm_head reads for them), or NULL */
} llama_seq;

/* Runs n_seqs >= 1 sequences, each on its own cache, in one pass: every
 * product with a weight matrix (q, o, gate, up, down, lm_head) covers the
 * rows of all of them, so the weights are read once for the batch; k, v,
 * RoPE and attention run per sequence. Each sequence gets what
 * llama_forward_probs (samp given) or llama_forward_hidden (samp NULL)
 * gives it alone, and on the CPU bit for bit: the rows of sequences of at
 * most PCG_MATMUL_SMALL positions share products in which each row gets
 * what it gets in a product of at most that many rows (pcg_matmul_rows);
 * a longer sequence's rows are a product of their own, as alone (so its
 * weights are read again). count = llama_rows_count(m, rows)
 * for every sequence. Everything is checked before anything runs: token
 * ids, max_position_embeddings, rows, n and n_out, a cache given twice; on
 * any error, then or later, every cache keeps its length. */
int llama_forward_batch(llama_model *m, llama_seq *seqs, int n_seqs, const llama_rows *rows,
			const pcg_sampling *samp, pcg_err *err);

/* lm_head applied to B arbitrary vectors h [B][hidden] (the same product
 * llama_forward ends with): logits [B][count], count =
 * llama_rows_count(m, rows). Returns -1 with err on rows outside the
 * vocabulary. */
int llama_lm_head(const llama_model *m, const float *h, int B, const llama_rows *rows,
		  float *logits, pcg_err *err);

#endif
