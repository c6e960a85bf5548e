/* policy_rule.h: what a verification rule implements, and the helpers the
 * rules share (lib/speculate/policy.c). Internal to lib/speculate/policy*.c: programs use
 * policy.h.
 *
 * A rule is its info (name, summary, guarantee, parameters, needs) and up to
 * five functions. policy_run (lib/speculate/policy.c) runs the round: for each draft
 * x_i, accept(); on a rejection, correct() gives the emitted token and the
 * block ends; when all are accepted, the bonus token is drawn from q_{L+1}
 * (argmax for a rule with deterministic set). The random draws a rule makes,
 * and their order, are its own; a run is reproducible from its seed.
 */
#ifndef PCG_POLICY_RULE_H
#define PCG_POLICY_RULE_H

#include <stdint.h>

#include "policy.h"

typedef struct policy_rule {
	policy_info info;
	int deterministic; /* no random draws: the bonus token is argmax q */
	/* Optional: checks the parameters beyond the info's ranges and makes
	 * the rule's state (pl->state). Returns 0, or -1 with err. */
	int (*init)(policy *pl, pcg_err *err);
	void (*fini)(policy *pl);
	/* Decides on draft x (in range) against p (NULL for a deterministic
	 * rule's caller that has none) and q at one position: fills s->ratio,
	 * s->pm, s->qm and s->group (-1 unless the rule has groups) and
	 * returns 1 to keep x. */
	int (*accept)(policy *pl, int x, const float *p, const float *q, pcg_rng *rng,
		      policy_step *s);
	/* The token emitted after x was rejected at this position (accept()
	 * ran just before, on the same p and q), and its group label in
	 * *group (-1 without groups); out->trials and out->exact may be set.
	 * Returns -1 when there is no mass to draw from. */
	int (*correct)(policy *pl, int x, const float *p, const float *q, pcg_rng *rng,
		       policy_result *out, int *group);
} policy_rule;

struct policy {
	policy_params pp;   /* the arguments filled in with their defaults */
	const policy_rule *rule;
	int V, nblk;
	double *bsum;       /* [nblk] block sums of the distribution being sampled */
	void *state;        /* the rule's own */
};

#define POLICY_BLK 256

/* A draw from q (p NULL) or from norm([q - p]+) (when the residual has no
 * mass, from q, its limit) by inverse CDF over blocks. -1 when q has no
 * mass. */
int policy_draw(policy *pl, const float *q, const float *p, pcg_rng *rng);

/* Block sums of q (p NULL) or [q - p]+ into pl->bsum; returns the total. */
double policy_block_sums(policy *pl, const float *q, const float *p);

/* The token at u * total of the distribution whose block sums are in
 * pl->bsum (never one of mass 0). */
int policy_block_draw(const policy *pl, const float *q, const float *p, double total,
		      double u);

/* A correct() for the rules that, on a rejection, draw from the target's q
 * itself (typical, topk). */
int policy_correct_from_q(policy *pl, int x, const float *p, const float *q, pcg_rng *rng,
			  policy_result *out, int *group);

/* min(1, q/p) with policy.h's edge cases: 0 when q has no mass, 1 when
 * q >= p. */
double policy_ratio(double pm, double qm);

#define POLICY_RULE(KIND, name) extern const policy_rule policy_rule_##name;
#include "policy_rules.h"
#undef POLICY_RULE

#endif
