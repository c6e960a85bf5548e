/* test_viterbi.c: Viterbi path selection over the MTP heads. The dynamic
 * programme against brute force on many random small cases (fixed seeds,
 * 1..4 heads, k 1..5, random V, both modes, with and without a start
 * token); the reduced block against the full dense matrix when the top-k
 * covers the full optimum; a case worked by hand; and bad input.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "viterbi.h"

static uint32_t rnd(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return (uint32_t)(*s >> 33);
}

static double unif(uint64_t *s)
{
	return (rnd(s) + 0.5) / 4294967296.0 * 2.0;
}

/* A random TM over n tokens with sparse rows. */
static tmat *random_tm(uint32_t n, uint64_t *s)
{
	pcg_err err = { "" };
	tm_counter *c = tm_counter_new(n, &err);
	uint32_t seq[32];
	tmat *t;

	for (int k = 0; k < 8; k++) {
		size_t len = rnd(s) % 32;
		for (size_t i = 0; i < len; i++)
			seq[i] = i && rnd(s) % 3 ? (seq[i - 1] + 1) % n : rnd(s) % n;
		tm_counter_add(c, seq, len, &err);
	}
	t = tm_counter_finish(c, 0.05 + unif(s), 0, &err);
	tm_counter_free(&c);
	return t;
}

/* The objective of a path, written out from its definition. */
static double objective(const tmat *q, const float *p, int V, int n, int64_t start,
			const uint32_t *x)
{
	double s = log(p[x[0]]) + (start >= 0 ? tm_logq(q, (uint32_t)start, x[0]) : 0.0);
	for (int i = 1; i < n; i++)
		s += tm_logq(q, x[i - 1], x[i]) + log(p[(size_t)i * V + x[i]]);
	return s;
}

/* Scores are sums of at most 9 logs of magnitude < 40: 1e-9 absolute is far
 * above their rounding (about 1e-13) and far below a real difference. */
#define TOL 1e-9

static void test_random(void)
{
	uint64_t s = 12345;
	int cases = 0, covered = 0;
	pcg_err err = { "" };

	for (int n = 1; n <= 4; n++)
		for (int k = 1; k <= 5; k++)
			for (int rep = 0; rep < 12; rep++) {
				int V = 2 + rnd(&s) % 11;
				tmat *q = random_tm((uint32_t)(V + rnd(&s) % 3), &s);
				float *p = malloc((size_t)n * V * sizeof *p);
				uint32_t dp[4], bf[4];
				double sd, sb;
				int m;

				for (int h = 0; h < n; h++) {
					double z = 0;
					for (int x = 0; x < V; x++) {
						/* Peaked and sometimes zero, as heads are. */
						double w = rnd(&s) % 7 == 0 ? 0.0 : pow(unif(&s), 3);
						p[h * V + x] = (float)w;
						z += w;
					}
					if (z == 0)
						p[h * V] = 1, z = 1;
					for (int x = 0; x < V; x++)
						p[h * V + x] = (float)(p[h * V + x] / z);
				}
				for (int mode = 0; mode < 2; mode++)
					for (int st = 0; st < 2; st++) {
						viterbi_opts o = { k, st ? (int64_t)(rnd(&s) % V) : -1,
								   mode };
						int r1 = viterbi_decode(q, p, n, V, &o, dp, &sd, &m, &err);
						int r2 = viterbi_brute(q, p, n, V, &o, bf, &sb, &err);
						CHECKF(r1 == 0 && r2 == 0, "%s", err.msg);
						CHECK(m >= 1 && m <= k * n && m <= V);
						cases++;
						/* Equal optimum; a different path only on a tie. */
						CHECKF(sd == sb || fabs(sd - sb) <= TOL,
						       "n %d k %d V %d mode %d: dp %.17g brute %.17g", n,
						       k, V, mode, sd, sb);
						if (isfinite(sd))
							CHECKF(fabs(objective(q, p, V, n, o.start, dp) - sd)
								       <= TOL,
							       "the DP's path does not score %.17g", sd);
						if (memcmp(dp, bf, n * sizeof *dp) != 0)
							CHECK(fabs(objective(q, p, V, n, o.start, dp) -
								   objective(q, p, V, n, o.start, bf)) <= TOL);
					}
				/* The full dense matrix over all V tokens: when its optimum
				 * lies within the top-k union, the reduced search finds it;
				 * otherwise the reduced score is not above it. */
				{
					uint32_t *all = malloc(V * sizeof *all), full[4];
					double *lq = malloc((size_t)V * V * sizeof *lq);
					double *em = malloc((size_t)n * V * sizeof *em), sf;
					int *idx = malloc(n * sizeof *idx);
					void *w = malloc(viterbi_work_bytes(n, V));
					viterbi_opts o = { k, -1, VITERBI_UNION };
					int in = 1;

					for (int x = 0; x < V; x++)
						all[x] = (uint32_t)x;
					for (int i = 0; i < n * V; i++)
						em[i] = log(p[i]);
					CHECK(tm_submatrix(q, all, V, lq, &err) == 0);
					sf = viterbi_dp(n, V, em, lq, NULL, idx, w);
					viterbi_decode(q, p, n, V, &o, dp, &sd, &m, &err);
					for (int t = 0; t < n; t++) {
						int hit = 0;
						full[t] = (uint32_t)idx[t];
						/* Is full[t] among some head's top-k? The
						 * reduced path's candidates are those. */
						for (int h = 0; h < n; h++) {
							int above = 0;
							for (int x = 0; x < V; x++)
								above += p[h * V + x] > p[h * V + full[t]] ||
									 (p[h * V + x] == p[h * V + full[t]] &&
									  x < (int)full[t]);
							hit |= above < k;
						}
						in &= hit;
					}
					CHECK(sd <= sf + TOL);
					if (in) {
						covered++;
						CHECKF(fabs(sd - sf) <= TOL, "covered: reduced %.17g, full "
						       "%.17g", sd, sf);
						if (memcmp(dp, full, n * sizeof *dp) != 0)
							CHECK(fabs(objective(q, p, V, n, -1, full) - sd) <= TOL);
					}
					free(all);
					free(lq);
					free(em);
					free(idx);
					free(w);
				}
				free(p);
				tm_close(&q);
			}
	printf("random: %d searches, %d reduced-vs-full cases covered\n", cases, covered);
	CHECK(covered > 50);
}

/* Two heads over 3 tokens. Alone, head 2 prefers token 2; but Q(0, 2) is
 * tiny and Q(0, 1) large, so the path 0 -> 1 wins: the transition matrix
 * overrides a head, which is the point of the method. */
static void test_by_hand(void)
{
	/* Row 0: c(0,1) = 98, others 0; alpha 1, n 3: Q(0,1) = 99/101,
	 * Q(0,0) = Q(0,2) = 1/101. Rows 1, 2 empty: uniform 1/3. */
	uint64_t rs[] = { 0, 1, 1, 1 };
	uint32_t col[] = { 1 };
	uint64_t cnt[] = { 98 };
	float p[] = { 0.8f, 0.1f, 0.1f, 0.2f, 0.3f, 0.5f };
	pcg_err err = { "" };
	tmat *q = tm_from_counts(3, 1.0, 0, rs, col, cnt, &err);
	viterbi_opts o = { 2, -1, VITERBI_UNION };
	uint32_t path[2];
	double sc;
	int m;

	CHECKF(q != NULL, "%s", err.msg);
	if (q == NULL)
		return;
	CHECK(viterbi_decode(q, p, 2, 3, &o, path, &sc, &m, &err) == 0);
	/* Candidates: head 1 top-2 {0, 1}, head 2 top-2 {2, 1}: m = 3. Best:
	 * 0.8 * 99/101 * 0.3 = 0.2352 against 0.8 * 1/101 * 0.5 and the rest. */
	CHECK(m == 3);
	CHECK(path[0] == 0 && path[1] == 1);
	CHECKF(fabs(sc - log(0.8 * 99.0 / 101 * 0.3)) < 1e-6, "%.9g", sc); /* p is f32 */
	/* Per head: position 2 may only take 2 or 1; the same answer. */
	o.mode = VITERBI_PER_HEAD;
	o.k = 1; /* position 1 only 0, position 2 only 2 */
	CHECK(viterbi_decode(q, p, 2, 3, &o, path, &sc, &m, &err) == 0);
	CHECK(path[0] == 0 && path[1] == 2);
	/* With a start token 1 (uniform row) nothing changes. */
	o = (viterbi_opts){ 2, 1, VITERBI_UNION };
	CHECK(viterbi_decode(q, p, 2, 3, &o, path, &sc, &m, &err) == 0);
	CHECK(path[0] == 0 && path[1] == 1);
	CHECK(fabs(sc - log(0.8 * 99.0 / 101 * 0.3 / 3)) < 1e-6);

	/* Bad input. */
	o = (viterbi_opts){ 0, -1, VITERBI_UNION };
	CHECK(viterbi_decode(q, p, 2, 3, &o, path, &sc, &m, &err) < 0);
	CHECKF(strstr(err.msg, "k = 0") != NULL, "%s", err.msg);
	o.k = 2;
	CHECK(viterbi_decode(q, p, 2, 4, &o, path, &sc, &m, &err) < 0);
	CHECKF(strstr(err.msg, "V = 4") != NULL, "%s", err.msg);
	o.start = 3;
	CHECK(viterbi_decode(q, p, 2, 3, &o, path, &sc, &m, &err) < 0);
	CHECKF(strstr(err.msg, "start token 3") != NULL, "%s", err.msg);
	o.start = -1;
	p[4] = NAN;
	CHECK(viterbi_decode(q, p, 2, 3, &o, path, &sc, &m, &err) < 0);
	CHECKF(strstr(err.msg, "head 2, token 1") != NULL, "%s", err.msg);
	tm_close(&q);
}

int main(void)
{
	test_by_hand();
	test_random();
	return check_done("test_viterbi");
}
