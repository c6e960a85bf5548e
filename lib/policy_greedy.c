/* policy_greedy.c: greedy verification: accept while x = argmax q (the
 * lowest id on ties); emit argmax q at the first mismatch, or of q_{L+1}.
 * The target's greedy decoding exactly; no random draws.
 */
#include "policy_rule.h"

#include "sampling.h"

static int greedy_accept(policy *pl, int x, const float *p, const float *q, pcg_rng *rng,
			 policy_step *s)
{
	(void)p;
	(void)rng;
	const int ok = x == pcg_argmax(q, pl->V);

	s->pm = 0.0;
	s->qm = q[x];
	s->ratio = ok;
	return ok;
}

static int greedy_correct(policy *pl, int x, const float *p, const float *q, pcg_rng *rng,
			  policy_result *out, int *group)
{
	(void)x;
	(void)p;
	(void)rng;
	(void)out;
	*group = -1;
	return pcg_argmax(q, pl->V);
}

const policy_rule policy_rule_greedy = {
	.info = { "greedy", "a draft token is kept when it is the target's argmax",
		  "exact: the target's greedy decoding", 0, { { 0 } }, 0 },
	.deterministic = 1,
	.accept = greedy_accept,
	.correct = greedy_correct,
};
