/* policy.c: the table of rules, the round every rule runs in, and the draws
 * they share (see policy.h for the rules and the equations, policy_rule.h
 * for what a rule implements; each rule is in lib/speculate/policy_NAME.c).
 *
 * Cost per round at V = 65,537: every draw from a whole distribution (the
 * sd residual, the bonus token, pcg's thinning proposals) is an inverse CDF
 * over blocks of 256 tokens: one pass sums the blocks, then a draw walks
 * the block sums and one block. So a rejection or a bonus token costs one
 * pass over V; bench/policy.c measures each rule.
 */
#include "policy_rule.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sampling.h"

#define BLK POLICY_BLK

static const policy_rule *const RULES[POLICY_N_KINDS] = {
#define POLICY_RULE(KIND, name) [POLICY_##KIND] = &policy_rule_##name,
#include "policy_rules.h"
#undef POLICY_RULE
};

const policy_info *policy_info_of(int k)
{
	return k >= 0 && k < POLICY_N_KINDS ? &RULES[k]->info : NULL;
}

int policy_kind_from_name(const char *name)
{
	for (int k = 0; k < POLICY_N_KINDS; k++)
		if (!strcmp(name, RULES[k]->info.name))
			return k;
	return -1;
}

const char *policy_kind_name(policy_kind k)
{
	return (unsigned)k < POLICY_N_KINDS ? RULES[k]->info.name : "?";
}

int policy_arg_index(int kind, const char *name)
{
	const policy_info *pi = policy_info_of(kind);

	for (int i = 0; pi && i < pi->n_args; i++)
		if (!strcmp(pi->args[i].name, name))
			return i;
	return -1;
}

const char *policy_names(char *buf, size_t size, const char *last_sep)
{
	size_t len = 0;

	if (size)
		buf[0] = '\0';
	for (int k = 0; k < POLICY_N_KINDS && len < size; k++)
		len += (size_t)snprintf(buf + len, size - len, "%s%s",
					k == 0 ? "" : k == POLICY_N_KINDS - 1 ? last_sep : ", ",
					RULES[k]->info.name);
	return buf;
}

policy *policy_new(const policy_params *pp, int V, pcg_err *err)
{
	policy *pl;

	if (V < 1) {
		pcg_fail(err, "policy: %d tokens", V);
		return NULL;
	}
	if ((unsigned)pp->kind >= POLICY_N_KINDS) {
		pcg_fail(err, "policy: unknown kind %d", (int)pp->kind);
		return NULL;
	}
	const policy_rule *rule = RULES[pp->kind];
	const policy_info *pi = &rule->info;
	if (!(pp->beta >= 0.0) || !isfinite(pp->beta)) {
		pcg_fail(err, "policy: beta %g: must be finite and >= 0", pp->beta);
		return NULL;
	}
	if (pp->end_token < -1 || pp->end_token >= V) {
		pcg_fail(err, "policy: end token %d out of range [0, %d)", pp->end_token, V);
		return NULL;
	}
	if (pp->max_trials < 0) {
		pcg_fail(err, "policy: max_trials %d: must be >= 0", pp->max_trials);
		return NULL;
	}
	if (pp->arg_set >> pi->n_args) {
		pcg_fail(err, "policy %s: takes %d parameters, argument %d given", pi->name,
			 pi->n_args, 31 - __builtin_clz(pp->arg_set));
		return NULL;
	}
	if ((pi->needs & POLICY_NEEDS_KNN) && pp->groups == NULL) {
		pcg_fail(err, "policy %s: needs a neighbour file (asg-build --knn K)", pi->name);
		return NULL;
	}
	if (pp->groups && asg_get(pp->groups)->n > (uint32_t)V) {
		pcg_fail(err, "policy: the ASG covers %u tokens, more than the %d of the "
			 "distributions", asg_get(pp->groups)->n, V);
		return NULL;
	}
	pl = calloc(1, sizeof *pl);
	if (pl == NULL) {
		pcg_fail(err, "out of memory");
		return NULL;
	}
	pl->pp = *pp;
	pl->rule = rule;
	for (int i = 0; i < pi->n_args; i++) {
		const policy_arg_info *a = &pi->args[i];
		/* beta, ssd's, is also a field of its own (the protocol's first) */
		const int beta = !strcmp(a->name, "beta");
		double v = (pp->arg_set >> i) & 1 ? pp->arg[i] : beta ? pp->beta : a->def;
		if (!(v >= a->min && v <= a->max) || (a->integer && v != floor(v))) {
			pcg_fail(err, "policy %s: %s = %.10g: want %s in [%.10g, %.10g]", pi->name, a->name, v,
				 a->integer ? "a whole number" : "a number", a->min, a->max);
			free(pl);
			return NULL;
		}
		pl->pp.arg[i] = v;
		if (beta)
			pl->pp.beta = v;
	}
	pl->pp.arg_set = (1u << pi->n_args) - 1;
	if (pl->pp.max_trials == 0)
		pl->pp.max_trials = POLICY_DEFAULT_TRIALS;
	pl->V = V;
	pl->nblk = (V + BLK - 1) / BLK;
	pl->bsum = malloc((size_t)pl->nblk * sizeof *pl->bsum);
	if (pl->bsum == NULL) {
		free(pl);
		pcg_fail(err, "out of memory");
		return NULL;
	}
	if (rule->init && rule->init(pl, err) < 0) {
		pl->rule = NULL; /* init cleans up after itself */
		policy_free(&pl);
		return NULL;
	}
	return pl;
}

void policy_free(policy **pl)
{
	if (pl && *pl) {
		if ((*pl)->rule && (*pl)->rule->fini)
			(*pl)->rule->fini(*pl);
		free((*pl)->bsum);
		free(*pl);
		*pl = NULL;
	}
}

/* ---- inverse CDF over blocks ---- */

/* The mass of token i: q(i), or the residual [q(i) - p(i)]+ when p is
 * given; anything not > 0 (NaN included) counts as 0. */
static inline float mass(const float *q, const float *p, int i)
{
	float f = p ? q[i] - p[i] : q[i];
	return f > 0.0f ? f : 0.0f;
}

/* Eight partial sums per block keep the adds independent; a block sum is
 * at most 256 terms in f32. */
double policy_block_sums(policy *pl, const float *q, const float *p)
{
	double total = 0.0;

	for (int b = 0; b < pl->nblk; b++) {
		const int a = b * BLK, e = a + BLK < pl->V ? a + BLK : pl->V;
		float s[8] = { 0 };
		int i = a;
		if (p)
			for (; i + 8 <= e; i += 8)
				for (int j = 0; j < 8; j++) {
					float f = q[i + j] - p[i + j];
					s[j] += f > 0.0f ? f : 0.0f;
				}
		else
			for (; i + 8 <= e; i += 8)
				for (int j = 0; j < 8; j++)
					s[j] += q[i + j] > 0.0f ? q[i + j] : 0.0f;
		for (; i < e; i++)
			s[0] += mass(q, p, i);
		pl->bsum[b] = (double)(((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7])));
		total += pl->bsum[b];
	}
	return total;
}

/* Rounding that runs past a block's end gives the block's last token with
 * mass. */
int policy_block_draw(const policy *pl, const float *q, const float *p, double total, double u)
{
	double target = u * total;
	int b, last = -1;

	for (b = 0; b < pl->nblk; b++) {
		if (pl->bsum[b] > 0.0)
			last = b;
		if (target < pl->bsum[b])
			break;
		target -= pl->bsum[b];
	}
	if (b == pl->nblk) { /* rounding: target ran past the total */
		b = last;
		target = INFINITY;
	}
	const int a = b * BLK, e = a + BLK < pl->V ? a + BLK : pl->V;
	double cum = 0.0;
	int t = -1;
	for (int i = a; i < e; i++) {
		float f = mass(q, p, i);
		if (f > 0.0f) {
			cum += f;
			t = i;
			if (target < cum)
				break;
		}
	}
	return t;
}

int policy_draw(policy *pl, const float *q, const float *p, pcg_rng *rng)
{
	double total = policy_block_sums(pl, q, p), u = pcg_rng_uniform(rng);

	if (!(total > 0.0) && p) {
		p = NULL;
		total = policy_block_sums(pl, q, NULL);
	}
	return total > 0.0 ? policy_block_draw(pl, q, p, total, u) : -1;
}

int policy_correct_from_q(policy *pl, int x, const float *p, const float *q, pcg_rng *rng,
			  policy_result *out, int *group)
{
	(void)x;
	(void)p;
	(void)out;
	*group = -1;
	return policy_draw(pl, q, NULL, rng);
}

double policy_ratio(double pm, double qm)
{
	if (!(qm > 0.0))
		return 0.0;
	return qm >= pm ? 1.0 : qm / pm;
}

/* ---- the round ---- */

int policy_run(policy *pl, int L, const int *x, const float *const *p, const float *const *q,
	       pcg_rng *rng, policy_result *out, pcg_err *err)
{
	const policy_rule *rule = pl->rule;
	const int end = pl->pp.end_token;

	if (L < 1 || L > POLICY_MAX_L)
		return pcg_fail(err, "policy: L = %d: must be in [1, %d]", L, POLICY_MAX_L);
	memset(out, 0, offsetof(policy_result, steps));
	for (int i = 0; i < L; i++) {
		policy_step *s = &out->steps[i];
		const float *pi = p ? p[i] : NULL;
		const int xi = x[i];

		if (xi < 0 || xi >= pl->V)
			return pcg_fail(err, "policy: draft token %d at position %d out of range "
					"[0, %d)", xi, i, pl->V);
		s->draft = xi;
		s->group = -1;
		const int ok = rule->accept(pl, xi, pi, q[i], rng, s);
		s->accepted = ok;
		out->n_steps = i + 1;
		if (ok) {
			out->groups[out->n_tokens] = s->group;
			out->tokens[out->n_tokens++] = xi;
			out->n_accepted++;
			if (xi == end) {
				out->ended = 1;
				return 0;
			}
			continue;
		}
		/* Rejected: one corrected token, then the block ends. */
		int group = -1;
		out->rejected = 1;
		const int z = rule->correct(pl, xi, pi, q[i], rng, out, &group);
		if (z < 0)
			return pcg_fail(err, "policy: target distribution %d has no mass", i);
		out->groups[out->n_tokens] = group;
		out->tokens[out->n_tokens++] = z;
		out->ended = z == end;
		return 0;
	}
	if (q[L] == NULL)
		return 0;
	/* All accepted: the bonus token from q_{L+1}. */
	const int z = rule->deterministic ? pcg_argmax(q[L], pl->V) : policy_draw(pl, q[L], NULL, rng);
	if (z < 0)
		return pcg_fail(err, "policy: target distribution %d has no mass", L);
	out->bonus = 1;
	out->groups[out->n_tokens] = -1;
	out->tokens[out->n_tokens++] = z;
	out->ended = z == end;
	return 0;
}
