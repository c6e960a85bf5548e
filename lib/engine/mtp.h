/* mtp.h: multi-token prediction heads on a target Llama model (MTP paper,
 * section III-B), Medusa style: each head is one residual SiLU block on the
 * target's final hidden state, read out through the target's own lm_head.
 *
 * Offset convention. Let x_0 .. x_t be the tokens run so far and h the
 * final hidden state of position t after the final RMSNorm (what lm_head
 * reads). The target's logits lm_head(h) predict x_{t+1}. Head k, k = 1..n,
 * predicts x_{t+1+k}:
 *
 *   z_k = lm_head(h + SiLU(W_k h + b_k)),   W_k [hidden, hidden], b_k [hidden]
 *
 * W_k h is nn.Linear's product (W_k stored [out, in]). In the file, head k
 * is stored as mtp.<k-1>.weight and mtp.<k-1>.bias (man/mtp.5), so index i
 * (from 0) predicts x_{t+2+i}. The path a Viterbi search scores is then the
 * target's own next-token distribution followed by the n heads: n + 1
 * tokens x_{t+1} .. x_{t+1+n} from one forward pass.
 */
#ifndef PCG_MTP_H
#define PCG_MTP_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "model.h"

/* Heads a file may hold. */
#define MTP_MAX_HEADS 16
/* The file name looked for in a model directory. */
#define MTP_FILE_NAME "mtp.safetensors"

typedef struct mtp_heads mtp_heads;

/* Opens the heads for model m: path is a .safetensors file, or a directory
 * holding mtp.safetensors. Checks the metadata (format "pcg-mtp",
 * mtp_heads = n in 1..MTP_MAX_HEADS), that the file holds exactly the 2n
 * tensors mtp.<i>.weight [hidden, hidden] and mtp.<i>.bias [hidden] in F32,
 * F16 or BF16 with hidden from m's config, and nothing else. The weights
 * are used in place from the mapping. m must outlive the heads. Returns
 * NULL with err naming the file and the tensor or field on failure. */
mtp_heads *mtp_open(const llama_model *m, const char *path, pcg_err *err);

/* The heads for m from size bytes of a heads file in memory (copied), checked
 * as mtp_open checks a file, named name in errors (the fuzz target feeds
 * it). Returns NULL with err on failure. */
mtp_heads *mtp_from_memory(const llama_model *m, const void *data, size_t size,
			   const char *name, pcg_err *err);
void mtp_close(mtp_heads **h);

/* Number of heads n. */
int mtp_n_heads(const mtp_heads *h);

/* The logits of heads first .. first + count - 1 (0-based file index;
 * 0 <= first, first + count <= n) for one final hidden state hs [hidden]
 * (from llama_forward_hidden): logits [count][llama_rows_count(m, rows)].
 * Costs count hidden x hidden products and one pass over lm_head for all
 * heads together; allocates nothing (scratch lives in h, so one thread at
 * a time per mtp_heads). Returns -1 with err on a bad range or rows. */
int mtp_logits(mtp_heads *h, const float *hs, int first, int count, const llama_rows *rows,
	       float *logits, pcg_err *err);

/* The residual block of head i alone: out = hs + SiLU(W_i hs + b_i),
 * [hidden]; what lm_head reads for that head. */
int mtp_hidden(mtp_heads *h, int i, const float *hs, float *out, pcg_err *err);

/* Writes a heads file for a model of width hidden: n heads, W as
 * [n][hidden][hidden] and b as [n][hidden] in f32, stored as dtype, with the
 * metadata above. Atomic (st_write). */
int mtp_write(const char *path, int n, int hidden, const float *W, const float *b,
	      pcg_dtype dtype, pcg_err *err);

#endif
