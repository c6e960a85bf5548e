/* cuda/cuda_sampling.h: pcg_probs (sampling.h) on the device, for rows of logits
 * that are already there (the target's L + 1 positions of a verification
 * block, each 65,537 wide for LLaSA's speech range). The CPU's pcg_probs is
 * the oracle: same order of warpers, same kept tokens, same tie rules. */
#ifndef PCG_CUDA_SAMPLING_H
#define PCG_CUDA_SAMPLING_H

#include "err.h"
#include "../core/sampling.h"

#ifdef __cplusplus
extern "C" {
#endif

/* For each of the rows rows of d_logits (rows x n floats, row-major, device
 * memory), writes into the same row of d_probs (device memory, rows x n;
 * may equal d_logits) what pcg_probs writes for that row: logits / T, top-k
 * keeping ties, top-p with the stable-ascending-sort tie rule, softmax;
 * removed tokens and -inf logits exactly 0; temperature 0, or one so small
 * that the largest logit / T overflows, gives a one-hot vector at the first
 * argmax.
 *
 * Exactness: top-k and the one-hot vector are bit for bit the CPU's. Top-p
 * keeps the same tokens unless a cumulative mass of the sorted tokens lies
 * within about 1e-11 of 1 - top_p (the sums run in another order; when the
 * tokens with mass all tie at the top, the CPU's sum is repeated and the
 * split is the same). Kept probabilities are within a few f32 roundings of
 * the CPU's (expf; the bound is in tests/cuda/test_sampling.c).
 *
 * Both buffers belong to the caller; nothing is allocated and there is no
 * state between calls. stream is a cudaStream_t (NULL: the default stream);
 * the call returns when the work on it is done, because it reads back one
 * status per row.
 *
 * Returns 0; rows = 0 does nothing. Returns -1 with err when s fails
 * pcg_sampling_check, n < 1 or n > 2^28, rows < 0, a CUDA call fails, or a
 * row has a NaN or +inf logit or only -inf logits: err then names the first
 * such row and, as pcg_probs does, the first bad logit ("row 2: logit 17 is
 * NaN"; with one row the message is pcg_probs's), and the contents of
 * d_probs are unspecified. */
int pcg_cuda_probs(const float *d_logits, int rows, int n, const pcg_sampling *s,
		   float *d_probs, void *stream, pcg_err *err);

#ifdef __cplusplus
}
#endif

#endif
