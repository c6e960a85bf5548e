/* chi2.h: the chi-square goodness-of-fit test and the verdicts the
 * statistical unit tests share (test_policy, test_policy_rules,
 * test_mtp_sd). */
#ifndef PCG_TEST_CHI2_H
#define PCG_TEST_CHI2_H

#include <math.h>
#include <stdio.h>

#include "check.h"

/* Regularised upper incomplete gamma Q(a, x): a series for small x, a
 * continued fraction (modified Lentz) otherwise. */
static double gamma_q(double a, double x)
{
	const double lg = -x + a * log(x) - lgamma(a);

	if (x <= 0.0)
		return 1.0;
	if (x < a + 1.0) {
		double ap = a, del = 1.0 / a, sum = del;
		for (int n = 0; n < 10000 && fabs(del) > fabs(sum) * 1e-16; n++) {
			ap += 1.0;
			del *= x / ap;
			sum += del;
		}
		return 1.0 - sum * exp(lg);
	}
	double b = x + 1.0 - a, c = 1e300, d = 1.0 / b, h = d;
	for (int i = 1; i < 10000; i++) {
		double an = -i * (i - a), del;
		b += 2.0;
		d = an * d + b;
		if (fabs(d) < 1e-300)
			d = 1e-300;
		c = b + an / c;
		if (fabs(c) < 1e-300)
			c = 1e-300;
		d = 1.0 / d;
		del = d * c;
		h *= del;
		if (fabs(del - 1.0) < 1e-16)
			break;
	}
	return exp(lg) * h;
}

/* Chi-square p-value of counts against probabilities (normalised here);
 * categories expected below 5 are pooled into one; an observation in a
 * category of probability 0 gives p-value 0. */
static double chi2_p(const long *obs, const double *prob, int k, long N, double *stat, int *df)
{
	double total = 0.0, x2 = 0.0, pool_e = 0.0;
	long pool_o = 0;
	int cats = 0;

	for (int i = 0; i < k; i++)
		total += prob[i];
	for (int i = 0; i < k; i++) {
		double e = N * prob[i] / total;
		if (prob[i] <= 0.0) {
			if (obs[i] > 0) {
				*stat = INFINITY;
				*df = 0;
				return 0.0;
			}
			continue;
		}
		if (e < 5.0) {
			pool_e += e;
			pool_o += obs[i];
			continue;
		}
		x2 += (obs[i] - e) * (obs[i] - e) / e;
		cats++;
	}
	if (pool_e > 0.0) {
		x2 += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
		cats++;
	}
	*stat = x2;
	*df = cats - 1;
	return cats > 1 ? gamma_q(0.5 * (cats - 1), 0.5 * x2) : 1.0;
}

/* The verdicts of the statistical tests: each passes when its p-value is at
 * least chi2_alpha (the including test sets it: its family-wise level over
 * the most tests it runs, Bonferroni) and counts in chi2_tests. */
static double chi2_alpha = 1e-6;
static int chi2_tests;

static inline void expect_fit(const char *what, double pv, double stat, int df)
{
	chi2_tests++;
	CHECKF(pv >= chi2_alpha, "%s: chi2(%d) = %.2f, p-value %.3g < %.2g", what, df, stat, pv,
	       chi2_alpha);
	printf("  %-58s chi2(%2d) = %8.2f  p = %.3g\n", what, df, stat, pv);
}

/* Two-sided z test of a mean against its expectation. The standard error
 * gets 1e-6 added: expectations computed from f32 probabilities are good to
 * about 1e-7, and a degenerate case (rate 1, TV 1) has standard error 0. */
static inline void expect_mean(const char *what, double mean, double want, double sd_of_mean)
{
	if (!(sd_of_mean >= 0.0)) /* a rate a rounding above 1 gives sqrt(< 0) */
		sd_of_mean = 0.0;
	const double z = (mean - want) / (sd_of_mean + 1e-6);
	const double pv = erfc(fabs(z) / sqrt(2.0));
	chi2_tests++;
	CHECKF(pv >= chi2_alpha, "%s: %.6f, expected %.6f (z = %.2f, p-value %.3g)", what, mean,
	       want, z, pv);
	printf("  %-58s %.5f vs %.5f  z = %+.2f\n", what, mean, want, z);
}

#endif
