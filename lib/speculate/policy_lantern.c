/* policy_lantern.c: LANTERN's relaxed acceptance over latent
 * neighbourhoods (Jang et al., "LANTERN: Accelerating Visual Autoregressive
 * Models with Relaxed Speculative Decoding", ICLR 2025), with its
 * total-variation bound made a property of the output.
 *
 * The paper accepts x against q(x) plus the target's probability of x's
 * nearest latent neighbours, taken in order while their sum stays within
 * delta, so that each token's relaxed target is within delta of q in total
 * variation. Spent per draft token, that budget does not bound the output:
 * on the distributions of tests/unit/test_policy_rules.c the output's TV
 * from q reached 2.6 delta. Here the budget is spent once per position.
 * q' starts as q; each token t with p(t) > q'(t) and p(t) > 1e-4 (a draft
 * token below that is too rare to matter; the cut bounds the work by
 * 10,000 tokens), in id order, takes mass from its neighbours y (the members
 * of group t of a neighbour file, asg-build --knn, most weight first, at
 * most k) that have q'(y) > p(y), never more than that excess, until t's
 * deficit is filled or delta has been moved in all. Then q' is a
 * distribution with TV(q', q) = mass moved <= delta, and the round is sd
 * against q': keep x with min(1, q'(x) / p(x)), else draw from
 * norm([q' - p]+) (zero on x). The output follows q' exactly (sd's proof),
 * so its TV from the target is at most delta; acceptance is
 * sum_x min(p(x), q'(x)) = sum min(p, q) + (mass moved).
 *
 * Cost: nothing beyond sd when q(x) >= p(x) (x then keeps its ratio 1);
 * otherwise one pass over V to copy q and one over the deficit tokens
 * (at most 10,000) and their at most k neighbours. Defaults: delta 0.1 and k 1000 (the paper's
 * code's lantern_delta and lantern_k; k is capped by the file's K).
 */
#include "policy_rule.h"

#include <stdlib.h>
#include <string.h>

#include "rng.h"

#define DELTA 0
#define K 1
#define MIN_P 1e-4f /* deficit tokens below it take nothing */

typedef struct lantern_state {
	uint32_t n;          /* tokens with neighbours */
	uint64_t *start;     /* [n + 1] */
	uint32_t *nb;        /* neighbours of t: nb[start[t] .. start[t + 1]) */
	float *qp;           /* [V] q' of the current position */
	int have;            /* qp is q' of the position accept() last saw */
} lantern_state;

typedef struct wtok {
	uint32_t t;
	float w;
} wtok;

static int by_weight(const void *a, const void *b)
{
	const wtok *x = a, *y = b;
	if (x->w != y->w)
		return x->w > y->w ? -1 : 1;
	return (x->t > y->t) - (x->t < y->t);
}

static void lantern_fini(policy *pl)
{
	lantern_state *st = pl->state;

	if (st) {
		free(st->start);
		free(st->nb);
		free(st->qp);
		free(st);
	}
}

static int lantern_init(policy *pl, pcg_err *err)
{
	const asg_view *g = asg_get(pl->pp.groups);
	const uint64_t k = (uint64_t)pl->pp.arg[K];
	lantern_state *st = calloc(1, sizeof *st);
	wtok *tmp = NULL;

	if (g->M != g->n)
		return free(st), pcg_fail(err, "policy lantern: the ASG has %u groups for %u tokens: "
					  "want a neighbour file (asg-build --knn K)", g->M, g->n);
	if (st == NULL)
		return pcg_fail(err, "out of memory");
	pl->state = st;
	st->n = g->n;
	st->start = malloc(((size_t)g->n + 1) * sizeof *st->start);
	st->nb = malloc((g->nnz ? g->nnz : 1) * sizeof *st->nb);
	st->qp = malloc((size_t)pl->V * sizeof *st->qp);
	tmp = malloc((g->nnz ? g->nnz : 1) * sizeof *tmp);
	if (!st->start || !st->nb || !st->qp || !tmp) {
		free(tmp);
		lantern_fini(pl);
		return pcg_fail(err, "out of memory");
	}
	st->start[0] = 0;
	for (uint32_t t = 0; t < g->n; t++) {
		uint64_t m = 0, self = 0;
		for (uint64_t j = g->grp_start[t]; j < g->grp_start[t + 1]; j++) {
			if (g->grp_tok[j] == t) {
				self = 1;
				continue;
			}
			tmp[m++] = (wtok){ g->grp_tok[j], g->grp_w[j] };
		}
		if (!self) {
			free(tmp);
			lantern_fini(pl);
			return pcg_fail(err, "policy lantern: group %u of the ASG does not hold token "
					"%u: want a neighbour file (asg-build --knn K)", t, t);
		}
		qsort(tmp, m, sizeof *tmp, by_weight);
		if (m > k)
			m = k;
		for (uint64_t j = 0; j < m; j++)
			st->nb[st->start[t] + j] = tmp[j].t;
		st->start[t + 1] = st->start[t] + m;
	}
	free(tmp);
	return 0;
}

/* q' of policy_lantern.c's header into st->qp. */
static void relax(policy *pl, const float *p, const float *q)
{
	lantern_state *st = pl->state;
	float *qp = st->qp;
	double budget = pl->pp.arg[DELTA];

	memcpy(qp, q, (size_t)pl->V * sizeof *qp);
	for (uint32_t t = 0; t < st->n && budget > 0.0; t++) {
		if (!(p[t] > MIN_P) || !(p[t] > qp[t]))
			continue;
		double need = (double)p[t] - qp[t];
		for (uint64_t j = st->start[t]; j < st->start[t + 1] && need > 0.0 && budget > 0.0; j++) {
			const uint32_t y = st->nb[j];
			double m = (double)qp[y] - p[y];
			if (!(m > 0.0))
				continue;
			if (m > need)
				m = need;
			if (m > budget)
				m = budget;
			qp[y] -= (float)m;
			qp[t] += (float)m;
			need -= m;
			budget -= m;
		}
	}
	st->have = 1;
}

static int lantern_accept(policy *pl, int x, const float *p, const float *q, pcg_rng *rng,
			  policy_step *s)
{
	lantern_state *st = pl->state;

	st->have = 0;
	s->pm = p[x];
	s->qm = q[x];
	if (!(q[x] >= p[x])) { /* a deficit: x may borrow */
		relax(pl, p, q);
		s->qm = st->qp[x];
	}
	s->ratio = policy_ratio(s->pm, s->qm);
	return pcg_rng_uniform(rng) < s->ratio;
}

static int lantern_correct(policy *pl, int x, const float *p, const float *q, pcg_rng *rng,
			   policy_result *out, int *group)
{
	lantern_state *st = pl->state;

	(void)x;
	(void)out;
	*group = -1;
	if (!st->have)
		relax(pl, p, q);
	return policy_draw(pl, st->qp, p, rng);
}

const policy_rule policy_rule_lantern = {
	.info = { "lantern", "LANTERN: x is kept with min(1, q'(x)/p(x)), q' the target with up to "
		  "delta of mass moved onto deficit tokens from their latent neighbours",
		  "total variation from the target at most delta", 2,
		  { { "delta", 0.0, 1.0, 0.1, 0, "lantern: the total-variation budget delta" },
		    { "k", 1, 1 << 30, 1000, 1, "topk, lantern: k (topk: the top-k membership; "
		      "lantern: neighbours per token)" } }, POLICY_NEEDS_KNN },
	.init = lantern_init,
	.fini = lantern_fini,
	.accept = lantern_accept,
	.correct = lantern_correct,
};
