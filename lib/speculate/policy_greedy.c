/* policy_greedy.c: greedy verification: accept while x = argmax q (the
 * lowest id on ties); emit argmax q at the first mismatch, or of q_{L+1}.
 * The target's greedy decoding exactly; no random draws. The argmax found
 * by accept() is the corrected token on a rejection: one pass, not two.
 */
#include "policy_rule.h"

#include <stdlib.h>

#include "sampling.h"

static int greedy_init(policy *pl, pcg_err *err)
{
	pl->state = malloc(sizeof(int));
	return pl->state ? 0 : pcg_fail(err, "out of memory");
}

static void greedy_fini(policy *pl)
{
	free(pl->state);
}

static int greedy_accept(policy *pl, int x, const float *p, const float *q, pcg_rng *rng,
			 policy_step *s)
{
	(void)p;
	(void)rng;
	int *best = pl->state;
	*best = pcg_argmax(q, pl->V);
	const int ok = x == *best;

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
	(void)q;
	(void)rng;
	(void)out;
	*group = -1;
	return *(const int *)pl->state; /* accept() just ran on this q */
}

const policy_rule policy_rule_greedy = {
	.info = { "greedy", "a draft token is kept when it is the target's argmax",
		  "exact: the target's greedy decoding", 0, { { 0 } }, 0 },
	.deterministic = 1,
	.init = greedy_init,
	.fini = greedy_fini,
	.accept = greedy_accept,
	.correct = greedy_correct,
};
