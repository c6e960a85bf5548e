/* policy_typical.c: Medusa's typical acceptance (Cai et al., "Medusa",
 * ICML 2024, section 2.3.1): keep x when
 *     q(x) > min(epsilon, alpha exp(-H(q))),   H(q) = -sum_t q(t) log q(t),
 * q being the target's distribution after the request's temperature, top-k
 * and top-p; on rejection draw from q. Not exact: the output is
 *     p(y) a(y) + (1 - sum_x p(x) a(x)) q(y),   a(x) = [q(x) > threshold],
 * and the acceptance rate sum_x p(x) a(x). Medusa's defaults: epsilon 0.09
 * (its posterior_threshold), alpha 0.3 (its posterior_alpha).
 *
 * Cost: one pass over V for the entropy, skipped when q(x) > epsilon (then x
 * is kept whatever the entropy).
 */
#include "policy_rule.h"

#include <math.h>

#define EPSILON 0
#define ALPHA 1

static int typical_accept(policy *pl, int x, const float *p, const float *q, pcg_rng *rng,
			  policy_step *s)
{
	const double eps = pl->pp.arg[EPSILON], alpha = pl->pp.arg[ALPHA];
	double thr = eps;

	(void)rng;
	s->pm = p ? p[x] : 0.0;
	s->qm = q[x];
	if (!(q[x] > eps)) {
		double h = 0.0;
		for (int t = 0; t < pl->V; t++)
			if (q[t] > 0.0f)
				h -= (double)q[t] * log((double)q[t]);
		if (alpha * exp(-h) < thr)
			thr = alpha * exp(-h);
	}
	s->ratio = q[x] > thr;
	return q[x] > thr;
}

static int typical_correct(policy *pl, int x, const float *p, const float *q, pcg_rng *rng,
			   policy_result *out, int *group)
{
	(void)x;
	(void)p;
	(void)out;
	*group = -1;
	return policy_draw(pl, q, NULL, rng);
}

const policy_rule policy_rule_typical = {
	.info = { "typical", "Medusa's typical acceptance: x is kept when q(x) > "
		  "min(epsilon, alpha exp(-H(q))), else a token is drawn from q",
		  "none: accepted tokens follow the draft; closed-form acceptance "
		  "sum p(x) [q(x) > threshold]", 2,
		  { { "epsilon", 0.0, 1.0, 0.09, 0, "typical: the hard threshold epsilon "
		      "(Medusa's posterior_threshold)" },
		    { "alpha", 0.0, 1e6, 0.3, 0, "typical: the entropy factor alpha "
		      "(Medusa's posterior_alpha)" } }, 0 },
	.deterministic = 0,
	.accept = typical_accept,
	.correct = typical_correct,
};
