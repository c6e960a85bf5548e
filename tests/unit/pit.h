/* pit.h: the randomized probability integral transform and its uniformity
 * tests, which the round loop's statistical tests share (test_speculate on
 * the demo's models, test_loops on synthetic servers).
 *
 * An emitted token y_t with the target's exact q_t is mapped to
 * u_t = F_t(y_t-) + v q_t(y_t), v ~ U(0, 1), F_t the CDF of q_t with the
 * categories ordered by q_t descending (ties by index). When y_t ~ q_t given
 * everything before it, the u_t are independent U(0, 1) whatever the
 * prefixes, so their histogram over PIT_BINS bins is tested for uniformity
 * by chi-square: pooled, and per position (so that a fault at one position
 * is not diluted). For pcg the same with groups: a label K against
 * Q_c(G_k) = sum_y w_{k,y} q(y), the rows beyond the ASG's n being
 * singleton groups numbered from M.
 */
#ifndef PCG_TEST_PIT_H
#define PCG_TEST_PIT_H

#include <stdio.h>
#include <string.h>

#include "asg.h"
#include "check.h"
#include "chi2.h"
#include "rng.h"

#define PIT_BINS 16
#define PIT_POS 16 /* positions tested one by one; later ones count pooled only */

/* The PIT of category y under dist[0..n), v ~ U(0, 1). */
static double pit(const double *dist, int n, int y, double v)
{
	double below = 0, tot = 0;

	for (int i = 0; i < n; i++) {
		tot += dist[i];
		if (dist[i] > dist[y] || (dist[i] == dist[y] && i < y))
			below += dist[i];
	}
	return (below + v * dist[y]) / tot;
}

/* Q_c over the groups for the token distribution q over W rows. */
static void group_masses(const asg_view *a, int W, int G, const float *q, double *Qc)
{
	memset(Qc, 0, (size_t)G * sizeof *Qc);
	for (int t = 0; t < W; t++) {
		if (q[t] == 0)
			continue;
		if (t >= (int)a->n) {
			Qc[a->M + (t - a->n)] += q[t];
			continue;
		}
		for (uint64_t j = a->tok_start[t]; j < a->tok_start[t + 1]; j++)
			Qc[a->tok_grp[j]] += a->tok_w[j] * q[t];
	}
}

/* K ~ w_{., t} for row t (a row beyond the ASG: its singleton). */
static int draw_group(const asg_view *a, int t, pcg_rng *rng)
{
	double u = pcg_rng_uniform(rng), c = 0;

	if (t >= (int)a->n)
		return (int)(a->M + (t - a->n));
	for (uint64_t j = a->tok_start[t]; j < a->tok_start[t + 1]; j++) {
		c += a->tok_w[j];
		if (u < c)
			return (int)a->tok_grp[j];
	}
	return (int)a->tok_grp[a->tok_start[t + 1] - 1];
}

/* Whether row t is in group K (of G): the label of an accepted token
 * (K ~ w_{., x}) and of a corrected one (y ~ q w_{K, .}) always names a
 * group of y. */
static int member(const asg_view *a, int G, int t, int K)
{
	if (K < 0 || K >= G)
		return 0;
	if (t >= (int)a->n)
		return K == (int)(a->M + (t - a->n));
	for (uint64_t j = a->tok_start[t]; j < a->tok_start[t + 1]; j++)
		if ((int)a->tok_grp[j] == K)
			return 1;
	return 0;
}

/* Histograms of PIT values: pooled, and per position. */
typedef struct hist {
	long pooled[PIT_BINS], pos[PIT_POS][PIT_BINS], n;
} hist;

static void hist_add(hist *h, int t, double u)
{
	int b = (int)(u * PIT_BINS);
	b = b < 0 ? 0 : b >= PIT_BINS ? PIT_BINS - 1 : b;
	h->pooled[b]++;
	if (t >= 0 && t < PIT_POS)
		h->pos[t][b]++;
	h->n++;
}

static double uniform_p(const long *obs, double *stat, int *df)
{
	double e[PIT_BINS];
	long n = 0;

	for (int i = 0; i < PIT_BINS; i++) {
		e[i] = 1.0;
		n += obs[i];
	}
	return chi2_p(obs, e, PIT_BINS, n, stat, df);
}

/* The verdicts: each test at level alpha, counted in *n_tests (so that a
 * file can check its Bonferroni count). The pooled test and those of
 * positions 1..n_pos must pass (want 1), or the pooled test must reject
 * (want 0: a check of power, not counted). */
static void pit_expect(const char *what, const hist *h, int n_pos, int want, double alpha,
		       int *n_tests)
{
	double stat;
	int df;
	double pv = uniform_p(h->pooled, &stat, &df);

	printf("  %-44s %6ld values  chi2(%d) = %7.1f  p = %.3g\n", what, h->n, df, stat, pv);
	if (!want) {
		CHECKF(pv < alpha, "%s: not rejected (p = %.3g): the test has no power", what, pv);
		return;
	}
	(*n_tests)++;
	CHECKF(h->n > 0, "%s: no values", what);
	CHECKF(pv >= alpha, "%s: pooled PIT not uniform (p = %.3g < %.2g)", what, pv, alpha);
	for (int t = 0; t < n_pos && t < PIT_POS; t++) {
		pv = uniform_p(h->pos[t], &stat, &df);
		(*n_tests)++;
		printf("    position %-2d %32s chi2(%d) = %7.1f  p = %.3g\n", t + 1, "", df, stat,
		       pv);
		CHECKF(pv >= alpha, "%s: position %d: PIT not uniform (p = %.3g < %.2g)", what,
		       t + 1, pv, alpha);
	}
}

#endif
