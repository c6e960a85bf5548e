/* numeric.h: the small numeric helpers that tests and benches compare
 * outputs with: the signal-to-noise ratio of a signal against its
 * reference, a softmax in double, the argmax of a row of logits. */
#ifndef PCG_TEST_NUMERIC_H
#define PCG_TEST_NUMERIC_H

#include <math.h>
#include <stddef.h>

/* 10 log10(sum ref^2 / sum (x - ref)^2) in dB, summed in double; INFINITY
 * when x equals ref. */
static inline double snr_db(const float *ref, const float *x, size_t n)
{
	double s = 0, e = 0;

	for (size_t i = 0; i < n; i++) {
		s += (double)ref[i] * ref[i];
		e += ((double)x[i] - ref[i]) * ((double)x[i] - ref[i]);
	}
	return e > 0 ? 10 * log10(s / e) : INFINITY;
}

/* Softmax of V logits into p, in double (the maximum subtracted first). */
static inline void softmax(const float *l, int V, double *p)
{
	double mx = -INFINITY, s = 0;

	for (int i = 0; i < V; i++)
		mx = l[i] > mx ? l[i] : mx;
	for (int i = 0; i < V; i++)
		s += p[i] = exp((double)l[i] - mx);
	for (int i = 0; i < V; i++)
		p[i] /= s;
}

/* The index of the largest of V logits, the lowest on ties. */
static inline int argmax(const float *l, int V)
{
	int a = 0;

	for (int i = 1; i < V; i++)
		if (l[i] > l[a])
			a = i;
	return a;
}

#endif
