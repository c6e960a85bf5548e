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
 * is kept whatever the entropy). The pass uses a polynomial log in vectors
 * (entropy() below): H within 1e-5, so the threshold within a relative
 * 1e-5 of libm's.
 */
#include "policy_rule.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* H(q) = -sum q ln q in vectors of 8 floats (GCC's vector extensions: the
 * compiler emits what the target has). ln v = e ln 2 + ln(1 + f) for
 * v = 2^e (1 + f), f in [0, 1), ln(1 + f) by a degree-7 polynomial fitted
 * on Chebyshev nodes (error 2.2e-7); in float, within 1e-5 of libm over
 * [1e-30, 1], so H is within 1e-5. A zero (or negative) q is masked to 0 and
 * its term is 0. Cloned for AVX-512 and AVX2, chosen at load time. */
#define EPSILON 0
#define ALPHA 1

typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
static double entropy(const float *q, int V)
{
	const v8f zero = { 0 };
	v8f acc = zero;
	double h = 0.0;
	int t = 0;

	for (; t + 8 <= V; t += 8) {
		v8f v;
		memcpy(&v, q + t, sizeof v);
		const v8i bits = (v8i)v & (v > zero); /* q <= 0 and NaN: 0 */
		v = (v8f)bits;
		const v8f e = __builtin_convertvector((bits >> 23) - 127, v8f);
		const v8f f = (v8f)((bits & 0x7fffff) | 0x3f800000) - 1.0f;
		v8f p = -0.053267479f + f * 0.010243828f;
		p = 0.13198966f + f * p;
		p = -0.22396690f + f * p;
		p = 0.32751173f + f * p;
		p = -0.49933395f + f * p;
		p = 0.99997026f + f * p;
		p = 2.2159765e-7f + f * p;
		acc += v * (e * 0.69314718f + p);
	}
	for (int j = 0; j < 8; j++)
		h -= acc[j];
	for (; t < V; t++)
		if (q[t] > 0.0f)
			h -= (double)q[t] * log((double)q[t]);
	return h;
}

static int typical_accept(policy *pl, int x, const float *p, const float *q, pcg_rng *rng,
			  policy_step *s)
{
	const double eps = pl->pp.arg[EPSILON], alpha = pl->pp.arg[ALPHA];
	double thr = eps;

	(void)rng;
	s->pm = p ? p[x] : 0.0;
	s->qm = q[x];
	if (!(q[x] > eps)) {
		const double h = entropy(q, pl->V);
		if (alpha * exp(-h) < thr)
			thr = alpha * exp(-h);
	}
	s->ratio = q[x] > thr;
	return q[x] > thr;
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
	.correct = policy_correct_from_q,
};
