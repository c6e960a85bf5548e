/* policy_sd.c: speculative sampling (Leviathan et al. 2023, Chen et al.
 * 2023) and SSD's tolerance (Lin et al., Interspeech 2025, Eq. 5).
 *
 * sd:  accept x with probability min(1, q(x) / p(x)); on rejection draw from
 *      norm([q - p]+). The emitted token follows q exactly.
 * ssd: accept with min(1, min(1, q(x) / p(x)) + beta); rejection as sd.
 *      beta = 0 is sd draw for draw.
 */
#include "policy_rule.h"

#include "rng.h"

static int sd_accept(policy *pl, int x, const float *p, const float *q, pcg_rng *rng,
		     policy_step *s)
{
	double r;

	s->pm = p[x];
	s->qm = q[x];
	r = policy_ratio(s->pm, s->qm);
	if (pl->rule == &policy_rule_ssd) /* Eq. 5 of SSD */
		r = r + pl->pp.beta < 1.0 ? r + pl->pp.beta : 1.0;
	s->ratio = r;
	return pcg_rng_uniform(rng) < r;
}

static int sd_correct(policy *pl, int x, const float *p, const float *q, pcg_rng *rng,
		      policy_result *out, int *group)
{
	(void)x;
	(void)out;
	*group = -1;
	return policy_draw(pl, q, p, rng);
}

const policy_rule policy_rule_sd = {
	.info = { "sd", "speculative sampling: a draft token x is kept with probability "
		  "min(1, q(x)/p(x)), else a token is drawn from norm([q - p]+)",
		  "exact: the output follows the target", 0, { { 0 } }, 0 },
	.accept = sd_accept,
	.correct = sd_correct,
};

const policy_rule policy_rule_ssd = {
	.info = { "ssd", "SSD's tolerance: x is kept with probability min(1, q(x)/p(x) + beta), "
		  "else drawn as sd",
		  "none: closer to the draft as beta grows (beta 0 is sd)", 1,
		  { { "beta", 0.0, 1e9, 0.4, 0, "ssd: the tolerance beta (the paper uses 0.4)" } },
		  0 },
	.accept = sd_accept,
	.correct = sd_correct,
};
