/* policy_topk.c: top-k membership (Llasa+, Tian et al., ASRU 2025; the
 * rule of their LLaSA inference code): keep x when it is among the k most
 * probable tokens of the target's q (fewer than k tokens have q above q(x):
 * ties at the k-th value count as in), else draw from q. Not exact: the
 * output is p(y) a(y) + (1 - sum_x p(x) a(x)) q(y), a(x) = [x in top-k(q)],
 * and the acceptance rate sum_{x in top-k(q)} p(x). Their default k = 50.
 *
 * Cost: one pass over V, stopped when k tokens above q(x) are found.
 */
#include "policy_rule.h"

#define K 0

static int topk_accept(policy *pl, int x, const float *p, const float *q, pcg_rng *rng,
		       policy_step *s)
{
	const int k = (int)pl->pp.arg[K];
	const float qx = q[x];
	int above = 0;

	(void)rng;
	s->pm = p ? p[x] : 0.0;
	s->qm = qx;
	for (int t = 0; t < pl->V && above < k; t++)
		above += q[t] > qx;
	s->ratio = above < k && qx > 0.0f;
	return above < k && qx > 0.0f;
}

const policy_rule policy_rule_topk = {
	.info = { "topk", "Llasa+'s top-k membership: x is kept when it is among the target's k "
		  "most probable tokens, else a token is drawn from q",
		  "none: accepted tokens follow the draft; closed-form acceptance "
		  "sum of p over the target's top k", 1,
		  { { "k", 1, 1 << 30, 50, 1, "topk, lantern: k (topk: the top-k membership; "
		      "lantern: neighbours per token)" } }, 0 },
	.accept = topk_accept,
	.correct = policy_correct_from_q,
};
