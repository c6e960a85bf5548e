/* sampling.h: temperature, top-k and top-p applied to logits, giving a
 * proper probability vector, with the semantics of Hugging Face
 * transformers' generate() warpers in their order: logits / T, then top-k
 * (keep every token whose logit is >= the k-th largest, so ties at the
 * boundary are kept), then top-p (sort ascending, drop the tokens whose
 * cumulative probability is <= 1 - top_p, always keep the most likely),
 * then softmax. Draft and target use the same function, so the policies
 * see distributions truncated the same way.
 */
#ifndef PCG_SAMPLING_H
#define PCG_SAMPLING_H

#include <stddef.h>

#include "err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pcg_sampling {
	float temperature; /* 0 = greedy: a one-hot vector at the argmax */
	int top_k;         /* <= 0: off */
	float top_p;       /* >= 1: off; must be in (0, 1] */
} pcg_sampling;

/* Checks the parameters: temperature >= 0 and finite, top_p in (0, 1].
 * Returns 0, or -1 with err naming the parameter. */
int pcg_sampling_check(const pcg_sampling *s, pcg_err *err);

/* Writes probabilities for the n logits into probs (may equal logits).
 * Tokens removed by top-k/top-p, and -inf logits, get exactly 0. Returns 0,
 * or -1 when the parameters fail pcg_sampling_check, n < 1, a logit is NaN
 * or +inf (err names the index), all logits are -inf, or memory runs out.
 * Ties at the top-p boundary are broken as a stable ascending sort would
 * (the lower index is removed first), which is what torch.sort does for up
 * to 16 elements; HF's choice is arbitrary above that. A temperature so
 * small that the largest logit / T overflows acts as 0. Scratch memory is
 * allocated internally per call only when top-p needs a sort or top_k is
 * above 1024. */
int pcg_probs(const float *logits, int n, const pcg_sampling *s, float *probs,
	      pcg_err *err);

/* Index i with cdf(i-1) <= u * total < cdf(i) (inverse CDF over probs,
 * which need not be normalised; entries that are not > 0 count as 0); u in
 * [0, 1). Never returns an index whose probability is 0; returns -1 when
 * no entry is > 0. */
int pcg_sample(const float *probs, int n, double u);

/* First index of the largest value, skipping NaNs; -1 when n < 1. */
int pcg_argmax(const float *x, int n);

#ifdef __cplusplus
}
#endif

#endif
