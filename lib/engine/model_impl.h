/* model_impl.h: the model's object, shared by model_load.c (a checkpoint
 * opened: safetensors or GGUF, the Llasa+ heads, the upload to a device)
 * and model.c (the KV cache and the forward pass); everyone else calls
 * model.h.
 */
#ifndef PCG_MODEL_IMPL_H
#define PCG_MODEL_IMPL_H

#include "backend.h"
#include "gguf.h"
#include "model.h"
#include "safetensors.h"
#include "weights.h"

/* A decoder layer's weights (the backbone's, or a Llasa+ head's block). */
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

#endif
