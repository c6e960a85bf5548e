/* rows.h: random embedding rows for the ASG tests (tests/unit/test_asg.c,
 * tests/cuda/test_asg.c), drawn from the seeded Philox generator. */
#ifndef PCG_TEST_ROWS_H
#define PCG_TEST_ROWS_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "rng.h"

/* Standard normal by Box-Muller from the Philox stream. */
static inline double normal(pcg_rng *r)
{
	double u = pcg_rng_uniform(r), v = pcg_rng_uniform(r);
	return sqrt(-2.0 * log(1.0 - u)) * cos(2.0 * M_PI * v);
}

/* Rows in clusters: centre + noise of a per-row strength, so that groups
 * overlap (a row near its centre joins rows that do not join each other). */
static inline void clustered(float *E, int n, int d, int clusters, double lo, double hi,
			     uint64_t seed)
{
	pcg_rng r;
	double *c = malloc((size_t)clusters * d * sizeof *c);

	pcg_rng_init(&r, seed, 0);
	for (int i = 0; i < clusters * d; i++)
		c[i] = normal(&r);
	for (int t = 0; t < n; t++) {
		int k = (int)pcg_rng_below(&r, (uint32_t)clusters);
		double s = lo + (hi - lo) * pcg_rng_uniform(&r);
		for (int i = 0; i < d; i++)
			E[(size_t)t * d + i] = (float)(c[k * d + i] + s * normal(&r));
	}
	free(c);
}

#endif
