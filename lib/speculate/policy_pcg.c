/* policy_pcg.c: PCG (Yanuka et al. 2025, Algorithm 1): acceptance over the
 * ASG's Acoustic Similarity Groups, exact at group level (policy.h has the
 * equations).
 *
 * Cost at V = 65,537: the acceptance test is O(N(x) + |G_K|); a rejection
 * is one pass for the block sums of q plus O(log V + |G_K|) per thinning
 * trial, and after max_trials failures the exact residual over all groups
 * (O(V + nnz)).
 */
#include "policy_rule.h"

#include <stdlib.h>

#include "rng.h"

typedef struct pcg_state {
	uint32_t n, M;      /* tokens the ASG covers, its groups (0, 0 without one) */
	const asg_view *g;  /* NULL without an ASG */
	float *diff;        /* [V] q - p, for the exact residual */
	double *resid;      /* [M + V - n] [Q_c - P_c]+ of every group label */
} pcg_state;

static int pcg_init(policy *pl, pcg_err *err)
{
	pcg_state *st = calloc(1, sizeof *st);

	if (st && pl->pp.groups) {
		st->g = asg_get(pl->pp.groups);
		st->n = st->g->n;
		st->M = st->g->M;
	}
	if (st) {
		st->diff = malloc((size_t)pl->V * sizeof *st->diff);
		st->resid = malloc(((size_t)st->M + (size_t)(pl->V - (int)st->n)) * sizeof *st->resid);
	}
	if (!st || !st->diff || !st->resid) {
		if (st) {
			free(st->diff);
			free(st->resid);
		}
		free(st);
		return pcg_fail(err, "out of memory");
	}
	pl->state = st;
	return 0;
}

static void pcg_fini(policy *pl)
{
	pcg_state *st = pl->state;

	if (st) {
		free(st->diff);
		free(st->resid);
		free(st);
	}
}

/* K ~ w_{., t} over S(t) (Eq. 6); tokens beyond the ASG are singletons. */
static uint32_t draw_group(const pcg_state *st, int t, pcg_rng *rng)
{
	double u = pcg_rng_uniform(rng);

	if ((uint32_t)t >= st->n)
		return st->M + ((uint32_t)t - st->n);
	const uint64_t a = st->g->tok_start[t], e = st->g->tok_start[t + 1];
	double s = 0.0, cum = 0.0;
	for (uint64_t c = a; c < e; c++)
		s += st->g->tok_w[c];
	u *= s; /* the weights sum to 1 within 2^-24; draw on their actual sum */
	for (uint64_t c = a; c < e; c++) {
		cum += st->g->tok_w[c];
		if (u < cum)
			return st->g->tok_grp[c];
	}
	return st->g->tok_grp[e - 1];
}

/* P_c(G_k) and Q_c(G_k) (Eq. 4) in O(|G_k|). */
static void group_mass(const pcg_state *st, uint32_t k, const float *p, const float *q,
		       double *pm, double *qm)
{
	double a = 0.0, b = 0.0;

	if (k >= st->M) {
		int t = (int)(st->n + (k - st->M));
		*pm = p[t];
		*qm = q[t];
		return;
	}
	for (uint64_t j = st->g->grp_start[k]; j < st->g->grp_start[k + 1]; j++) {
		const uint32_t t = st->g->grp_tok[j];
		const double w = st->g->grp_w[j];
		a += w * p[t];
		b += w * q[t];
	}
	*pm = a;
	*qm = b;
}

/* z ~ q(t) w_{k,t} / Q_c(G_k) over t in G_k (Eq. 10). */
static int draw_in_group(const pcg_state *st, uint32_t k, const float *q, pcg_rng *rng)
{
	double u = pcg_rng_uniform(rng), s = 0.0, cum = 0.0;
	int last = -1;

	if (k >= st->M)
		return (int)(st->n + (k - st->M));
	const uint64_t a = st->g->grp_start[k], e = st->g->grp_start[k + 1];
	for (uint64_t j = a; j < e; j++)
		s += (double)st->g->grp_w[j] * (q[st->g->grp_tok[j]] > 0.0f ? q[st->g->grp_tok[j]] : 0.0f);
	u *= s;
	for (uint64_t j = a; j < e; j++) {
		const uint32_t t = st->g->grp_tok[j];
		if (!(q[t] > 0.0f))
			continue;
		cum += (double)st->g->grp_w[j] * q[t];
		last = (int)t;
		if (u < cum)
			break;
	}
	return last;
}

/* The group residual R_c (Eq. 8) computed over all groups: the M groups of
 * the ASG, then the singletons t >= n. Q_c - P_c = sum w (q - p), so one
 * pass makes d = q - p and one pass over the members gathers d once per
 * member; the residuals are kept, and the draw scans them. */
static int exact(policy *pl, const float *p, const float *q, pcg_rng *rng, uint32_t *group)
{
	pcg_state *st = pl->state;
	const uint32_t M = st->M, G = M + (uint32_t)(pl->V - (int)st->n);
	double tv = 0.0, target;
	uint32_t k, last = UINT32_MAX;

	for (int t = 0; t < pl->V; t++)
		st->diff[t] = q[t] - p[t];
	for (k = 0; k < M; k++) {
		double s = 0.0;
		for (uint64_t j = st->g->grp_start[k]; j < st->g->grp_start[k + 1]; j++)
			s += (double)st->g->grp_w[j] * st->diff[st->g->grp_tok[j]];
		st->resid[k] = s > 0.0 ? s : 0.0;
		tv += st->resid[k];
	}
	for (; k < G; k++) {
		double s = st->diff[st->n + (k - M)];
		st->resid[k] = s > 0.0 ? s : 0.0;
		tv += st->resid[k];
	}
	target = pcg_rng_uniform(rng) * tv;
	if (!(tv > 0.0)) {
		/* No residual mass (P_c = Q_c up to rounding): Q_c is the limit. */
		int y = policy_draw(pl, q, NULL, rng);
		if (y >= 0)
			*group = draw_group(st, y, rng);
		return y;
	}
	for (k = 0; k < G; k++) {
		if (st->resid[k] > 0.0) {
			last = k;
			if (target < st->resid[k])
				break;
			target -= st->resid[k];
		}
	}
	*group = last;
	return draw_in_group(st, last, q, rng);
}

/* Draw K ~ w_{., x} (Eq. 6), accept with min(1, Q_c(G_K) / P_c(G_K))
 * (Eq. 7). */
static int pcg_accept(policy *pl, int x, const float *p, const float *q, pcg_rng *rng,
		      policy_step *s)
{
	const pcg_state *st = pl->state;
	const uint32_t K = draw_group(st, x, rng);

	group_mass(st, K, p, q, &s->pm, &s->qm);
	s->group = (int)K;
	s->ratio = policy_ratio(s->pm, s->qm);
	return pcg_rng_uniform(rng) < s->ratio;
}

/* The reject branch: thinning (Eq. 9) with Q_c proposals, capped, then
 * exact. Returns the token (Eq. 10) and its group. */
static int pcg_correct(policy *pl, int x, const float *p, const float *q, pcg_rng *rng,
		       policy_result *out, int *group)
{
	const pcg_state *st = pl->state;
	double total = policy_block_sums(pl, q, NULL);
	uint32_t K = UINT32_MAX;

	(void)x;
	if (!(total > 0.0))
		return -1;
	for (int trial = 1; trial <= pl->pp.max_trials; trial++) {
		double pm, qm;
		/* (y, K) ~ q(y) w_{K,y}: K ~ Q_c, and y given K is Eq. 10. */
		int y = policy_block_draw(pl, q, NULL, total, pcg_rng_uniform(rng));
		K = draw_group(st, y, rng);
		group_mass(st, K, p, q, &pm, &qm);
		double a = qm > pm ? 1.0 - pm / qm : 0.0;
		if (pcg_rng_uniform(rng) < a) {
			out->trials = trial;
			*group = (int)K;
			return y;
		}
	}
	out->trials = pl->pp.max_trials;
	out->exact = 1;
	int z = exact(pl, p, q, rng, &K);
	*group = (int)K;
	return z;
}

const policy_rule policy_rule_pcg = {
	.info = { "pcg", "PCG: acceptance over acoustic similarity groups (draw a group of x, "
		  "accept min(1, Q_c/P_c), residual over groups by thinning)",
		  "exact at group level: the groups follow the target's group distribution",
		  0, { { 0 } }, POLICY_NEEDS_ASG },
	.init = pcg_init,
	.fini = pcg_fini,
	.accept = pcg_accept,
	.correct = pcg_correct,
};
