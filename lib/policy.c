/* policy.c: sd, ssd, pcg and greedy verification (see policy.h for the
 * definitions and the equations they implement).
 *
 * Cost per round at V = 65,537: every draw from a whole distribution (the
 * sd residual, the bonus token, pcg's thinning proposals) is an inverse CDF
 * over blocks of 256 tokens: one pass sums the blocks, then a draw walks
 * the block sums and one block. So sd costs one pass over V when it rejects
 * or draws a bonus token, and pcg the same pass (the block sums of q, made
 * once per rejection) plus O(log V + |G_K|) per thinning trial. pcg's
 * acceptance test itself is O(N(x) + |G_K|).
 */
#include "policy.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "sampling.h"

#define BLK 256

struct policy {
	policy_params pp;
	int V, nblk;
	uint32_t n, M;      /* tokens the ASG covers, its groups (0, 0 without one) */
	const asg_view *g;  /* NULL without an ASG */
	double *bsum;       /* [nblk] block sums of the distribution being sampled */
	float *diff;        /* pcg: [V] q - p, for the exact residual */
	double *resid;      /* pcg: [M + V - n] [Q_c - P_c]+ of every group label */
};

static const policy_info INFO[POLICY_N_KINDS] = {
	[POLICY_SD] = { "sd", "speculative sampling: a draft token x is kept with probability "
		       "min(1, q(x)/p(x)); exact: the output follows the target", "", 0 },
	[POLICY_SSD] = { "ssd", "SSD's tolerance: min(1, q(x)/p(x) + beta); not exact, closer "
			"to the draft as beta grows", "beta (>= 0, default 0.4)", 0 },
	[POLICY_PCG] = { "pcg", "PCG: acceptance over acoustic similarity groups; exact at group "
			"level: the groups follow the target's group distribution", "", 1 },
	[POLICY_GREEDY] = { "greedy", "a draft token is kept when it is the target's argmax; "
			   "the target's greedy decoding exactly", "", 0 },
};

const policy_info *policy_info_of(int k)
{
	return k >= 0 && k < POLICY_N_KINDS ? &INFO[k] : NULL;
}

int policy_kind_from_name(const char *name)
{
	for (int k = 0; k < POLICY_N_KINDS; k++)
		if (!strcmp(name, INFO[k].name))
			return k;
	return -1;
}

const char *policy_kind_name(policy_kind k)
{
	return (unsigned)k < POLICY_N_KINDS ? INFO[k].name : "?";
}

const char *policy_names(char *buf, size_t size, const char *last_sep)
{
	size_t len = 0;

	if (size)
		buf[0] = '\0';
	for (int k = 0; k < POLICY_N_KINDS && len < size; k++)
		len += (size_t)snprintf(buf + len, size - len, "%s%s",
					k == 0 ? "" : k == POLICY_N_KINDS - 1 ? last_sep : ", ",
					INFO[k].name);
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
	if (pp->kind == POLICY_PCG && pp->groups && asg_get(pp->groups)->n > (uint32_t)V) {
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
	if (pl->pp.max_trials == 0)
		pl->pp.max_trials = POLICY_DEFAULT_TRIALS;
	pl->V = V;
	pl->nblk = (V + BLK - 1) / BLK;
	if (pp->kind == POLICY_PCG && pp->groups) {
		pl->g = asg_get(pp->groups);
		pl->n = pl->g->n;
		pl->M = pl->g->M;
	}
	pl->bsum = malloc((size_t)pl->nblk * sizeof *pl->bsum);
	if (pp->kind == POLICY_PCG) {
		pl->diff = malloc((size_t)V * sizeof *pl->diff);
		pl->resid = malloc(((size_t)pl->M + (size_t)(V - (int)pl->n)) * sizeof *pl->resid);
	}
	if (pl->bsum == NULL || (pp->kind == POLICY_PCG && (!pl->diff || !pl->resid))) {
		policy_free(&pl);
		pcg_fail(err, "out of memory");
		return NULL;
	}
	return pl;
}

void policy_free(policy **pl)
{
	if (pl && *pl) {
		free((*pl)->bsum);
		free((*pl)->diff);
		free((*pl)->resid);
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

/* Fills pl->bsum and returns the total. Eight partial sums per block keep
 * the adds independent; a block sum is at most 256 terms in f32. */
static double block_sums(policy *pl, const float *q, const float *p)
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

/* The token at u * total (u in [0, 1)) of the distribution whose block sums
 * are in pl->bsum. Never returns a token of mass 0: rounding that runs past
 * a block's end gives the block's last token with mass. */
static int block_draw(const policy *pl, const float *q, const float *p, double total, double u)
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

/* A draw from q (p NULL) or from norm([q - p]+); when the residual has no
 * mass, from q, its limit. -1 when q has no mass. */
static int draw(policy *pl, const float *q, const float *p, pcg_rng *rng)
{
	double total = block_sums(pl, q, p), u = pcg_rng_uniform(rng);

	if (!(total > 0.0) && p) {
		p = NULL;
		total = block_sums(pl, q, NULL);
	}
	return total > 0.0 ? block_draw(pl, q, p, total, u) : -1;
}

/* The acceptance probability min(1, q/p) with the edge cases of policy.h. */
static double ratio(double pm, double qm)
{
	if (!(qm > 0.0))
		return 0.0;
	return qm >= pm ? 1.0 : qm / pm;
}

/* ---- groups ---- */

/* K ~ w_{., t} over S(t) (Eq. 6); tokens beyond the ASG are singletons. */
static uint32_t draw_group(const policy *pl, int t, pcg_rng *rng)
{
	double u = pcg_rng_uniform(rng);

	if ((uint32_t)t >= pl->n)
		return pl->M + ((uint32_t)t - pl->n);
	const uint64_t a = pl->g->tok_start[t], e = pl->g->tok_start[t + 1];
	double s = 0.0, cum = 0.0;
	for (uint64_t c = a; c < e; c++)
		s += pl->g->tok_w[c];
	u *= s; /* the weights sum to 1 within 2^-24; draw on their actual sum */
	for (uint64_t c = a; c < e; c++) {
		cum += pl->g->tok_w[c];
		if (u < cum)
			return pl->g->tok_grp[c];
	}
	return pl->g->tok_grp[e - 1];
}

/* P_c(G_k) and Q_c(G_k) (Eq. 4) in O(|G_k|); p may be NULL (pm = 0). */
static void group_mass(const policy *pl, uint32_t k, const float *p, const float *q, double *pm,
		       double *qm)
{
	double a = 0.0, b = 0.0;

	if (k >= pl->M) {
		int t = (int)(pl->n + (k - pl->M));
		*pm = p ? p[t] : 0.0;
		*qm = q[t];
		return;
	}
	for (uint64_t j = pl->g->grp_start[k]; j < pl->g->grp_start[k + 1]; j++) {
		const uint32_t t = pl->g->grp_tok[j];
		const double w = pl->g->grp_w[j];
		a += w * p[t];
		b += w * q[t];
	}
	*pm = a;
	*qm = b;
}

/* z ~ q(t) w_{k,t} / Q_c(G_k) over t in G_k (Eq. 10). */
static int draw_in_group(const policy *pl, uint32_t k, const float *q, pcg_rng *rng)
{
	double u = pcg_rng_uniform(rng), s = 0.0, cum = 0.0;
	int last = -1;

	if (k >= pl->M)
		return (int)(pl->n + (k - pl->M));
	const uint64_t a = pl->g->grp_start[k], e = pl->g->grp_start[k + 1];
	for (uint64_t j = a; j < e; j++)
		s += (double)pl->g->grp_w[j] * (q[pl->g->grp_tok[j]] > 0.0f ? q[pl->g->grp_tok[j]] : 0.0f);
	u *= s;
	for (uint64_t j = a; j < e; j++) {
		const uint32_t t = pl->g->grp_tok[j];
		if (!(q[t] > 0.0f))
			continue;
		cum += (double)pl->g->grp_w[j] * q[t];
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
	const uint32_t M = pl->M, G = M + (uint32_t)(pl->V - (int)pl->n);
	double tv = 0.0, target;
	uint32_t k, last = UINT32_MAX;

	for (int t = 0; t < pl->V; t++)
		pl->diff[t] = q[t] - p[t];
	for (k = 0; k < M; k++) {
		double s = 0.0;
		for (uint64_t j = pl->g->grp_start[k]; j < pl->g->grp_start[k + 1]; j++)
			s += (double)pl->g->grp_w[j] * pl->diff[pl->g->grp_tok[j]];
		pl->resid[k] = s > 0.0 ? s : 0.0;
		tv += pl->resid[k];
	}
	for (; k < G; k++) {
		double s = pl->diff[pl->n + (k - M)];
		pl->resid[k] = s > 0.0 ? s : 0.0;
		tv += pl->resid[k];
	}
	target = pcg_rng_uniform(rng) * tv;
	if (!(tv > 0.0)) {
		/* No residual mass (P_c = Q_c up to rounding): Q_c is the limit. */
		int y = draw(pl, q, NULL, rng);
		if (y >= 0)
			*group = draw_group(pl, y, rng);
		return y;
	}
	for (k = 0; k < G; k++) {
		if (pl->resid[k] > 0.0) {
			last = k;
			if (target < pl->resid[k])
				break;
			target -= pl->resid[k];
		}
	}
	*group = last;
	return draw_in_group(pl, last, q, rng);
}

/* PCG's reject branch: thinning (Eq. 9) with Q_c proposals, capped, then
 * exact. Returns the token (Eq. 10) and its group. */
static int pcg_residual(policy *pl, const float *p, const float *q, pcg_rng *rng,
			policy_result *out, uint32_t *group)
{
	double total = block_sums(pl, q, NULL);

	if (!(total > 0.0))
		return -1;
	for (int trial = 1; trial <= pl->pp.max_trials; trial++) {
		double pm, qm;
		/* (y, K) ~ q(y) w_{K,y}: K ~ Q_c, and y given K is Eq. 10. */
		int y = block_draw(pl, q, NULL, total, pcg_rng_uniform(rng));
		uint32_t K = draw_group(pl, y, rng);
		group_mass(pl, K, p, q, &pm, &qm);
		double a = qm > pm ? 1.0 - pm / qm : 0.0;
		if (pcg_rng_uniform(rng) < a) {
			out->trials = trial;
			*group = K;
			return y;
		}
	}
	out->trials = pl->pp.max_trials;
	out->exact = 1;
	return exact(pl, p, q, rng, group);
}

int policy_run(policy *pl, int L, const int *x, const float *const *p, const float *const *q,
	       pcg_rng *rng, policy_result *out, pcg_err *err)
{
	const policy_kind kind = pl->pp.kind;
	const int end = pl->pp.end_token;

	if (L < 1 || L > POLICY_MAX_L)
		return pcg_fail(err, "policy: L = %d: must be in [1, %d]", L, POLICY_MAX_L);
	memset(out, 0, offsetof(policy_result, steps));
	for (int i = 0; i < L; i++) {
		policy_step *s = &out->steps[i];
		const int xi = x[i];
		uint32_t K = 0;
		double r;
		int ok;

		if (xi < 0 || xi >= pl->V)
			return pcg_fail(err, "policy: draft token %d at position %d out of range "
					"[0, %d)", xi, i, pl->V);
		s->draft = xi;
		s->group = -1;
		if (kind == POLICY_GREEDY) {
			const int best = pcg_argmax(q[i], pl->V);
			s->pm = 0.0;
			s->qm = q[i][xi];
			ok = xi == best;
			r = ok;
		} else {
			if (kind == POLICY_PCG) {
				K = draw_group(pl, xi, rng);
				group_mass(pl, K, p[i], q[i], &s->pm, &s->qm);
				s->group = (int)K;
			} else {
				s->pm = p[i][xi];
				s->qm = q[i][xi];
			}
			r = ratio(s->pm, s->qm);
			if (kind == POLICY_SSD) /* Eq. 5 of SSD */
				r = r + pl->pp.beta < 1.0 ? r + pl->pp.beta : 1.0;
			ok = pcg_rng_uniform(rng) < r;
		}
		s->ratio = r;
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
		int z;
		out->rejected = 1;
		if (kind == POLICY_GREEDY) {
			z = pcg_argmax(q[i], pl->V);
			K = UINT32_MAX;
		} else if (kind == POLICY_PCG) {
			z = pcg_residual(pl, p[i], q[i], rng, out, &K);
		} else {
			z = draw(pl, q[i], p[i], rng);
		}
		if (z < 0)
			return pcg_fail(err, "policy: target distribution %d has no mass", i);
		out->groups[out->n_tokens] = kind == POLICY_PCG ? (int)K : -1;
		out->tokens[out->n_tokens++] = z;
		out->ended = z == end;
		return 0;
	}
	if (q[L] == NULL)
		return 0;
	/* All accepted: the bonus token from q_{L+1}. */
	int z = kind == POLICY_GREEDY ? pcg_argmax(q[L], pl->V) : draw(pl, q[L], NULL, rng);
	if (z < 0)
		return pcg_fail(err, "policy: target distribution %d has no mass", L);
	out->bonus = 1;
	out->groups[out->n_tokens] = -1;
	out->tokens[out->n_tokens++] = z;
	out->ended = z == end;
	return 0;
}
