/* test_policy.c: the guarantees of the verification policies, tested
 * statistically with fixed seeds over many shapes of p and q (peaked, flat,
 * disjoint supports, random, partly zero) and of ASGs (overlapping, nested,
 * singletons, random with unequal weights):
 *   - sd emits tokens distributed as q; pcg emits groups distributed as Q_c
 *     (Eq. 11), also when the thinning cap forces the exact residual, and
 *     also at later positions of a block of L = 3;
 *   - ssd with beta 0 is sd draw for draw; ssd with beta > 0 emits what its
 *     own closed form says;
 *   - acceptance rates equal sum min(p, q), sum min(P_c, Q_c) and
 *     sum p min(1, min(1, q/p) + beta);
 *   - the mean number of thinning trials is 1 / TV(P_c, Q_c) (capped);
 * and the edge cases: p(x) = 0, q = p (no residual ever), the end token
 * inside the block, groups of zero mass, sums off 1 by 1e-6, greedy.
 *
 * Significance: each test is a chi-square (categories with expected count
 * below 5 pooled) or a z test, with p-value threshold ALPHA = 0.001 /
 * MAX_TESTS (Bonferroni), so the whole suite fails by chance with
 * probability below 0.001; the count of tests is checked against MAX_TESTS.
 * Power: deliberately wrong policies (written below: sd drawing its
 * residual from q, sd accepting with min(1, p/q), pcg drawing its residual
 * at token level, pcg taking Q_c proposals without the thinning test, pcg
 * taking the first group of x instead of K ~ w) are run through the same
 * tests and must be rejected; they are, each with a p-value below 1e-30.
 * Mutations of lib/speculate/policy.c itself were tried once: pcg thinning without its
 * acceptance test (a = 1) failed 90 checks, sd drawing its residual from q
 * failed 17, a thinning loop that ignores its first success failed every
 * mean-trials test.
 */
#include <math.h>
#include <string.h>

#include "asg.h"
#include "check.h"
#include "chi2.h"
#include "policy.h"
#include "rng.h"
#include "sampling.h"

#define V 20        /* tokens: 0..15 in the ASGs, 16..19 singletons */
#define NA 16       /* tokens the ASGs cover */
#define END 19      /* the end token in the edge-case tests */
#define TRIALS 200000
#define MAX_TESTS 400
#define ALPHA (0.001 / MAX_TESTS)

/* ---- shapes ---- */

static void normalise(float *v)
{
	double s = 0.0;
	for (int i = 0; i < V; i++)
		s += v[i];
	for (int i = 0; i < V; i++)
		v[i] = (float)(v[i] / s);
}

enum { PEAKED, FLAT, LOW_HALF, HIGH_HALF, RANDOM, SPARSE };

/* peaked: 0.7 on token `at`, the rest geometric; flat: uniform; low/high
 * half: uniform on 0..9 / 10..19 (disjoint supports); random: Dirichlet(1);
 * sparse: random on half the tokens, the others exactly 0. */
static void shape(float *v, int kind, int at, uint64_t seed)
{
	pcg_rng r;
	pcg_rng_init(&r, seed, 99);
	for (int i = 0; i < V; i++) {
		switch (kind) {
		case PEAKED: v[i] = i == at ? 0.0f : (float)pow(0.7, (i * 7 + at) % V); break;
		case FLAT: v[i] = 1.0f; break;
		case LOW_HALF: v[i] = i < V / 2; break;
		case HIGH_HALF: v[i] = i >= V / 2; break;
		case RANDOM: v[i] = (float)-log(1.0 - pcg_rng_uniform(&r)); break;
		case SPARSE: v[i] = pcg_rng_below(&r, 2) ? (float)-log(1.0 - pcg_rng_uniform(&r)) : 0.0f;
			break;
		}
	}
	if (kind == PEAKED) {
		double rest = 0.0;
		for (int i = 0; i < V; i++)
			rest += v[i];
		for (int i = 0; i < V; i++)
			v[i] = i == at ? 0.7f : (float)(0.3 * v[i] / rest);
	}
	normalise(v);
}

typedef struct pq {
	const char *name;
	float p[V], q[V];
} pq;

#define NPQ 9
static pq PQ[NPQ];

static void make_pqs(void)
{
	int i = 0;
	PQ[i].name = "peaked/peaked"; shape(PQ[i].p, PEAKED, 3, 1); shape(PQ[i].q, PEAKED, 4, 1); i++;
	PQ[i].name = "flat/peaked"; shape(PQ[i].p, FLAT, 0, 1); shape(PQ[i].q, PEAKED, 12, 1); i++;
	PQ[i].name = "peaked/flat"; shape(PQ[i].p, PEAKED, 17, 1); shape(PQ[i].q, FLAT, 0, 1); i++;
	PQ[i].name = "disjoint"; shape(PQ[i].p, LOW_HALF, 0, 1); shape(PQ[i].q, HIGH_HALF, 0, 1); i++;
	PQ[i].name = "random/random"; shape(PQ[i].p, RANDOM, 0, 2); shape(PQ[i].q, RANDOM, 0, 3); i++;
	PQ[i].name = "random/random 2"; shape(PQ[i].p, RANDOM, 0, 4); shape(PQ[i].q, RANDOM, 0, 5); i++;
	PQ[i].name = "sparse/sparse"; shape(PQ[i].p, SPARSE, 0, 6); shape(PQ[i].q, SPARSE, 0, 7); i++;
	PQ[i].name = "peaked/random, same peak"; shape(PQ[i].p, PEAKED, 8, 1); shape(PQ[i].q, RANDOM, 0, 8);
	PQ[i].q[8] += 0.5f; normalise(PQ[i].q); i++;
	PQ[i].name = "p = q"; shape(PQ[i].p, RANDOM, 0, 9); memcpy(PQ[i].q, PQ[i].p, sizeof PQ[i].q); i++;
}

/* ---- ASGs ---- */

enum { OVERLAP, NESTED, SINGLETONS, RANDOM_W, NASG };
static const char *ASG_NAMES[] = { "overlapping", "nested", "singletons", "random, unequal w" };

static asg *make_asg(int kind)
{
	uint64_t start[64] = { 0 };
	uint32_t mem[512];
	double score[512];
	int M = 0, nnz = 0, covered[NA] = { 0 };
	pcg_err err = { "" };
	pcg_rng r;
	asg *a;

#define ADD(...) do { \
	const int ids_[] = { __VA_ARGS__ }; \
	for (size_t j_ = 0; j_ < sizeof ids_ / sizeof *ids_; j_++) \
		mem[nnz++] = (uint32_t)ids_[j_], covered[ids_[j_]] = 1; \
	start[++M] = (uint64_t)nnz; \
} while (0)
	switch (kind) {
	case OVERLAP: /* windows of 3 overlapping by one: even tokens in two groups */
		for (int k = 0; k < 7; k++)
			ADD(2 * k, 2 * k + 1, 2 * k + 2);
		ADD(0, 14, 15);
		break;
	case NESTED:
		ADD(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
		ADD(0, 1, 2, 3, 4, 5, 6, 7);
		ADD(0, 1, 2, 3);
		ADD(0, 1);
		ADD(8, 9, 10, 11, 12, 13, 14, 15);
		ADD(8, 9, 10, 11);
		ADD(12, 13);
		break;
	case SINGLETONS:
		for (int t = 0; t < NA; t++)
			ADD(t);
		break;
	case RANDOM_W: /* random subsets, singletons for what they miss */
		pcg_rng_init(&r, 31, 0);
		for (int k = 0; k < 9; k++) {
			int in[NA] = { 0 }, size = 2 + (int)pcg_rng_below(&r, 5);
			for (int s = 0; s < size; s++)
				in[pcg_rng_below(&r, NA)] = 1;
			for (int t = 0; t < NA; t++)
				if (in[t])
					mem[nnz++] = (uint32_t)t, covered[t] = 1;
			if ((uint64_t)nnz > start[M])
				start[++M] = (uint64_t)nnz;
		}
		for (int t = 0; t < NA; t++)
			if (!covered[t])
				ADD(t);
		for (int j = 0; j < nnz; j++)
			score[j] = 0.1 + pcg_rng_uniform(&r);
		break;
	}
#undef ADD
	a = asg_from_groups(NA, (uint32_t)M, start, mem, kind == RANDOM_W ? score : NULL, 0, 0, 0,
			    &err);
	CHECKF(a != NULL, "%s: %s", ASG_NAMES[kind], err.msg);
	return a;
}

/* P_c or Q_c (Eq. 4) of every group label: the ASG's M groups, then the
 * singletons of tokens NA..V-1. Returns the number of labels. */
static int coarse(const asg *a, const float *v, double *out)
{
	const asg_view *g = a ? asg_get(a) : NULL;
	const int M = g ? (int)g->M : 0, n = g ? (int)g->n : 0;

	for (int k = 0; k < M; k++) {
		out[k] = 0.0;
		for (uint64_t j = g->grp_start[k]; j < g->grp_start[k + 1]; j++)
			out[k] += g->grp_w[j] * v[g->grp_tok[j]];
	}
	for (int t = n; t < V; t++)
		out[M + t - n] = v[t];
	return M + V - n;
}

/* ---- simulation ---- */

typedef struct tally {
	long accepted, rejections, trials, exact;
	long tok[V];
	long grp[64];
} tally;

/* A policy step under test: fills the emitted token, its group (pcg), and
 * whether x was accepted; returns thinning trials (pcg) or 0. */
typedef struct sim {
	policy *pl;           /* the real policy, or NULL for a mutant */
	int (*mutant)(const struct sim *s, int x, const float *p, const float *q, pcg_rng *r,
		      int *tok, int *grp, int *acc);
	const asg *a;
} sim;

/* N rounds of lookahead 1 (no bonus token): x ~ p, then the policy. */
static void simulate(const sim *s, const float *p, const float *q, long N, uint64_t seed,
		     tally *t)
{
	const float *pp[1] = { p }, *qq[2] = { q, NULL };
	policy_result res;
	pcg_err err = { "" };
	pcg_rng r;

	memset(t, 0, sizeof *t);
	pcg_rng_init(&r, seed, 1);
	for (long i = 0; i < N; i++) {
		int x = pcg_sample(p, V, pcg_rng_uniform(&r)), tok, grp, acc;
		if (s->pl) {
			if (policy_run(s->pl, 1, &x, pp, qq, &r, &res, &err) < 0) {
				CHECKF(0, "policy_run: %s", err.msg);
				return;
			}
			tok = res.tokens[0];
			grp = res.groups[0];
			acc = res.n_accepted;
			t->trials += res.trials;
			t->exact += res.exact;
		} else {
			t->trials += s->mutant(s, x, p, q, &r, &tok, &grp, &acc);
		}
		t->accepted += acc;
		t->rejections += !acc;
		t->tok[tok]++;
		if (grp >= 0)
			t->grp[grp]++;
	}
}

static policy *make_policy(policy_kind kind, double beta, const asg *a, int max_trials)
{
	policy_params pp = { .kind = kind, .beta = beta, .groups = a, .max_trials = max_trials,
			     .end_token = -1 };
	pcg_err err = { "" };
	policy *pl = policy_new(&pp, V, &err);
	CHECKF(pl != NULL, "%s", err.msg);
	return pl;
}

/* The p-value of "emitted tokens ~ q" for a tally. */
static double token_fit(const tally *t, const float *q, double *stat, int *df)
{
	double e[V];
	for (int i = 0; i < V; i++)
		e[i] = q[i];
	return chi2_p(t->tok, e, V, TRIALS, stat, df);
}

static double group_fit(const tally *t, const asg *a, const float *q, double *stat, int *df)
{
	double Qc[64];
	int G = coarse(a, q, Qc);
	return chi2_p(t->grp, Qc, G, TRIALS, stat, df);
}

/* ---- the tests ---- */

static void test_sd_ssd(void)
{
	policy *sd = make_policy(POLICY_SD, 0, NULL, 0), *ssd0 = make_policy(POLICY_SSD, 0, NULL, 0);
	policy *ssd4 = make_policy(POLICY_SSD, 0.4, NULL, 0);
	char what[128];

	printf("sd and ssd, %d rounds each, alpha %.2g per test\n", TRIALS, ALPHA);
	for (int c = 0; c < NPQ; c++) {
		const float *p = PQ[c].p, *q = PQ[c].q;
		sim s = { sd, NULL, NULL };
		tally t, u;
		double stat, pv, want = 0.0, want_ssd = 0.0, emit[V], resid[V], rs = 0.0;
		int df;

		simulate(&s, p, q, TRIALS, 100 + c, &t);
		pv = token_fit(&t, q, &stat, &df);
		snprintf(what, sizeof what, "sd %s: token ~ q", PQ[c].name);
		expect_fit(what, pv, stat, df);
		for (int i = 0; i < V; i++)
			want += fmin(p[i], q[i]);
		snprintf(what, sizeof what, "sd %s: accept = sum min(p, q)", PQ[c].name);
		expect_mean(what, (double)t.accepted / TRIALS, want,
			    sqrt(want * (1 - want) / TRIALS));
		if (c == NPQ - 1)
			CHECKF(t.rejections == 0, "sd p = q: %ld rejections", t.rejections);

		/* ssd with beta 0 is sd, draw for draw. */
		s.pl = ssd0;
		simulate(&s, p, q, TRIALS, 100 + c, &u);
		CHECKF(!memcmp(t.tok, u.tok, sizeof t.tok) && t.accepted == u.accepted,
		       "ssd beta 0 differs from sd on %s", PQ[c].name);

		/* ssd beta 0.4: acceptance sum p min(1, min(1, q/p) + beta), and the
		 * emitted tokens p a + (1 - sum p a) norm([q - p]+). */
		s.pl = ssd4;
		simulate(&s, p, q, TRIALS, 200 + c, &u);
		for (int i = 0; i < V; i++) {
			double a = p[i] > 0 ? fmin(1.0, fmin(1.0, q[i] / p[i]) + 0.4) : 0.0;
			emit[i] = p[i] * a;
			want_ssd += emit[i];
			resid[i] = fmax(q[i] - p[i], 0.0);
			rs += resid[i];
		}
		for (int i = 0; i < V; i++)
			emit[i] += (1.0 - want_ssd) * (rs > 0 ? resid[i] / rs : q[i]);
		snprintf(what, sizeof what, "ssd 0.4 %s: accept = sum p min(1, r + b)", PQ[c].name);
		expect_mean(what, (double)u.accepted / TRIALS, want_ssd,
			    sqrt(want_ssd * (1 - want_ssd) / TRIALS));
		pv = chi2_p(u.tok, emit, V, TRIALS, &stat, &df);
		snprintf(what, sizeof what, "ssd 0.4 %s: token ~ closed form", PQ[c].name);
		expect_fit(what, pv, stat, df);
	}
	policy_free(&sd);
	policy_free(&ssd0);
	policy_free(&ssd4);
}

/* Exact expectation and variance of min(T, cap) for T geometric(tv). */
static void capped_trials(double tv, int cap, double *mean, double *var)
{
	double m = 0.0, m2 = 0.0, surv = 1.0;
	for (int j = 1; j <= cap; j++) {
		double pj = j < cap ? surv * tv : surv;
		m += j * pj;
		m2 += (double)j * j * pj;
		surv *= 1.0 - tv;
	}
	*mean = m;
	*var = m2 - m * m;
}

static void test_pcg(void)
{
	char what[160];

	printf("pcg, %d rounds each\n", TRIALS);
	for (int ak = 0; ak < NASG; ak++) {
		asg *a = make_asg(ak);
		/* cap 64 (the default), and cap 1: the exact residual most of the time */
		policy *pl = make_policy(POLICY_PCG, 0, a, 0), *pl1 = make_policy(POLICY_PCG, 0, a, 1);
		for (int c = 0; c < NPQ; c++) {
			const float *p = PQ[c].p, *q = PQ[c].q;
			sim s = { pl, NULL, a };
			double Pc[64], Qc[64], stat, pv, acc = 0.0, tv = 0.0;
			int G = coarse(a, p, Pc), df;
			tally t;

			coarse(a, q, Qc);
			for (int k = 0; k < G; k++) {
				acc += fmin(Pc[k], Qc[k]);
				tv += fmax(Qc[k] - Pc[k], 0.0);
			}
			simulate(&s, p, q, TRIALS, 1000 + 10 * ak + c, &t);
			pv = group_fit(&t, a, q, &stat, &df);
			snprintf(what, sizeof what, "pcg %s, %s: group ~ Q_c", ASG_NAMES[ak], PQ[c].name);
			expect_fit(what, pv, stat, df);
			snprintf(what, sizeof what, "pcg %s, %s: accept", ASG_NAMES[ak], PQ[c].name);
			expect_mean(what, (double)t.accepted / TRIALS, acc,
				    sqrt(acc * (1 - acc) / TRIALS));
			if (tv > 1e-6) {
				double mean, var;
				capped_trials(tv, POLICY_DEFAULT_TRIALS, &mean, &var);
				snprintf(what, sizeof what, "pcg %s, %s: trials (1/TV = %.2f)",
					 ASG_NAMES[ak], PQ[c].name, 1.0 / tv);
				expect_mean(what, (double)t.trials / t.rejections, mean,
					    sqrt(var / t.rejections));
			} else {
				CHECKF(t.rejections == 0, "pcg %s, %s: TV 0 but %ld rejections",
				       ASG_NAMES[ak], PQ[c].name, t.rejections);
			}
			/* Cap 1: exactness does not depend on the thinning. */
			if (c == 0 || c == 4 || c == 6) {
				s.pl = pl1;
				simulate(&s, p, q, TRIALS, 2000 + 10 * ak + c, &t);
				pv = group_fit(&t, a, q, &stat, &df);
				snprintf(what, sizeof what, "pcg cap 1 %s, %s: group ~ Q_c (%ld exact)",
					 ASG_NAMES[ak], PQ[c].name, t.exact);
				expect_fit(what, pv, stat, df);
				CHECK(t.exact > 0 || tv >= 0.999);
			}
		}
		policy_free(&pl);
		policy_free(&pl1);
		asg_close(&a);
	}
}

/* Without the cap, the mean is 1 / TV itself. */
static void test_trials_uncapped(void)
{
	asg *a = make_asg(OVERLAP);
	policy *pl = make_policy(POLICY_PCG, 0, a, 1000000);
	float p[V], q[V];
	double Pc[64], Qc[64], tv = 0.0;
	sim s = { pl, NULL, a };
	tally t;
	int G;

	/* Close p and q: TV about 0.08, about 12 trials a rejection. */
	shape(p, RANDOM, 0, 40);
	for (int i = 0; i < V; i++)
		q[i] = p[i] * (1.0f + 0.3f * (float)sin(i));
	normalise(q);
	G = coarse(a, p, Pc);
	coarse(a, q, Qc);
	for (int k = 0; k < G; k++)
		tv += fmax(Qc[k] - Pc[k], 0.0);
	simulate(&s, p, q, TRIALS, 4242, &t);
	expect_mean("pcg uncapped: mean trials = 1 / TV", (double)t.trials / t.rejections, 1.0 / tv,
		    sqrt((1.0 - tv) / (tv * tv) / t.rejections));
	CHECK(t.exact == 0);
	printf("  TV = %.4f, rejections %ld\n", tv, t.rejections);
	policy_free(&pl);
	asg_close(&a);
}

/* Later positions of a block: with L = 3 (q independent of the prefix
 * here), the token emitted at position i, when there is one, ~ q_i; for
 * pcg its group ~ Q_c of q_i. */
static void test_block(void)
{
	asg *a = make_asg(OVERLAP);
	policy *sd = make_policy(POLICY_SD, 0, NULL, 0), *pcg = make_policy(POLICY_PCG, 0, a, 0);
	const float *p[3] = { PQ[4].p, PQ[0].p, PQ[6].p };
	const float *q[4] = { PQ[4].q, PQ[0].q, PQ[6].q, PQ[1].q };
	long tok[4][V], grp[3][64], n_at[4];
	policy_result res;
	pcg_err err = { "" };
	char what[128];
	pcg_rng r;

	for (int pass = 0; pass < 2; pass++) {
		policy *pl = pass ? pcg : sd;
		memset(tok, 0, sizeof tok);
		memset(grp, 0, sizeof grp);
		memset(n_at, 0, sizeof n_at);
		pcg_rng_init(&r, 77 + pass, 3);
		for (long i = 0; i < TRIALS; i++) {
			int x[3];
			for (int j = 0; j < 3; j++)
				x[j] = pcg_sample(p[j], V, pcg_rng_uniform(&r));
			if (policy_run(pl, 3, x, p, q, &r, &res, &err) < 0) {
				CHECKF(0, "%s", err.msg);
				break;
			}
			for (int j = 0; j < res.n_tokens; j++) {
				tok[j][res.tokens[j]]++;
				n_at[j]++;
				if (j < 3 && res.groups[j] >= 0)
					grp[j][res.groups[j]]++;
			}
			CHECK(res.n_tokens == res.n_accepted + 1 && res.bonus == (res.n_accepted == 3));
		}
		for (int j = 1; j < 4; j++) {
			double e[V], stat, pv;
			int df;
			for (int i = 0; i < V; i++)
				e[i] = q[j][i];
			if (pass == 0) {
				pv = chi2_p(tok[j], e, V, n_at[j], &stat, &df);
				snprintf(what, sizeof what, "sd L=3: token at position %d ~ q_%d (%ld)",
					 j + 1, j + 1, n_at[j]);
				expect_fit(what, pv, stat, df);
			} else if (j < 3) {
				double Qc[64];
				int G = coarse(a, q[j], Qc);
				pv = chi2_p(grp[j], Qc, G, n_at[j], &stat, &df);
				snprintf(what, sizeof what, "pcg L=3: group at position %d ~ Q_c (%ld)",
					 j + 1, n_at[j]);
				expect_fit(what, pv, stat, df);
			}
		}
	}
	policy_free(&sd);
	policy_free(&pcg);
	asg_close(&a);
}

/* ---- power: wrong policies must fail the same tests ---- */

static int mut_sd_residual_from_q(const sim *s, int x, const float *p, const float *q,
				  pcg_rng *r, int *tok, int *grp, int *acc)
{
	(void)s;
	*grp = -1;
	*acc = pcg_rng_uniform(r) < fmin(1.0, q[x] / p[x]);
	*tok = *acc ? x : pcg_sample(q, V, pcg_rng_uniform(r));
	return 0;
}

static int mut_sd_swapped_ratio(const sim *s, int x, const float *p, const float *q,
				pcg_rng *r, int *tok, int *grp, int *acc)
{
	float res[V];
	(void)s;
	for (int i = 0; i < V; i++)
		res[i] = fmaxf(q[i] - p[i], 0.0f);
	*grp = -1;
	*acc = pcg_rng_uniform(r) < fmin(1.0, q[x] > 0 ? p[x] / q[x] : 0.0);
	*tok = *acc ? x : pcg_sample(res, V, pcg_rng_uniform(r));
	return 0;
}

/* The group of token t: K ~ w_{., t}, or the first group of t. */
static int group_of(const asg *a, int t, pcg_rng *r, int first)
{
	const asg_view *g = asg_get(a);
	double u = pcg_rng_uniform(r), cum = 0.0;
	if (t >= (int)g->n)
		return (int)(g->M + (t - g->n));
	if (first)
		return (int)g->tok_grp[g->tok_start[t]];
	for (uint64_t c = g->tok_start[t]; c < g->tok_start[t + 1]; c++) {
		cum += g->tok_w[c];
		if (u < cum)
			return (int)g->tok_grp[c];
	}
	return (int)g->tok_grp[g->tok_start[t + 1] - 1];
}

enum { MUT_TOKEN_RESIDUAL, MUT_NO_THINNING, MUT_FIRST_GROUP };
static int pcg_mutation;

static int mut_pcg(const sim *s, int x, const float *p, const float *q, pcg_rng *r, int *tok,
		   int *grp, int *acc)
{
	double Pc[64], Qc[64];
	int K = group_of(s->a, x, r, pcg_mutation == MUT_FIRST_GROUP);

	coarse(s->a, p, Pc);
	coarse(s->a, q, Qc);
	*acc = pcg_rng_uniform(r) < (Pc[K] > 0 ? fmin(1.0, Qc[K] / Pc[K]) : 1.0);
	if (*acc) {
		*tok = x;
		*grp = K;
		return 0;
	}
	if (pcg_mutation == MUT_NO_THINNING) {
		*tok = pcg_sample(q, V, pcg_rng_uniform(r));
		*grp = group_of(s->a, *tok, r, 0);
		return 1;
	}
	float res[V];
	for (int i = 0; i < V; i++)
		res[i] = fmaxf(q[i] - p[i], 0.0f);
	*tok = pcg_sample(res, V, pcg_rng_uniform(r));
	*grp = group_of(s->a, *tok, r, 0);
	return 1;
}

static void test_power(void)
{
	sim s = { NULL, mut_sd_residual_from_q, NULL };
	double stat, pv;
	int df;
	tally t;

	printf("power: wrong policies (each must be rejected)\n");
	simulate(&s, PQ[0].p, PQ[0].q, TRIALS, 5, &t);
	pv = token_fit(&t, PQ[0].q, &stat, &df);
	CHECKF(pv < ALPHA, "sd drawing its residual from q passed: p-value %.3g", pv);
	printf("  sd, residual from q: chi2(%d) = %.1f, p = %.3g\n", df, stat, pv);
	s.mutant = mut_sd_swapped_ratio;
	simulate(&s, PQ[4].p, PQ[4].q, TRIALS, 5, &t);
	pv = token_fit(&t, PQ[4].q, &stat, &df);
	CHECKF(pv < ALPHA, "sd accepting with p/q passed: p-value %.3g", pv);
	printf("  sd, accept min(1, p/q): chi2(%d) = %.1f, p = %.3g\n", df, stat, pv);

	static const char *names[] = { "token-level residual", "Q_c without thinning",
				       "first group of x" };
	for (int m = 0; m < 3; m++) {
		/* overlapping groups with unequal weights, random p and q */
		s.a = make_asg(m == MUT_FIRST_GROUP ? OVERLAP : RANDOM_W);
		s.mutant = mut_pcg;
		pcg_mutation = m;
		simulate(&s, PQ[4].p, PQ[4].q, TRIALS, 6, &t);
		pv = group_fit(&t, s.a, PQ[4].q, &stat, &df);
		CHECKF(pv < ALPHA, "pcg with %s passed: p-value %.3g", names[m], pv);
		printf("  pcg, %s: chi2(%d) = %.1f, p = %.3g\n", names[m], df, stat, pv);
		asg_close((asg **)&s.a);
	}
}

/* ---- edge cases ---- */

static void test_edges(void)
{
	asg *a = make_asg(NESTED);
	policy *sd = make_policy(POLICY_SD, 0, NULL, 0), *pcg = make_policy(POLICY_PCG, 0, a, 0);
	policy *ssd = make_policy(POLICY_SSD, 0.4, NULL, 0);
	policy *greedy = make_policy(POLICY_GREEDY, 0, NULL, 0);
	float p[V], q[V];
	const float *pp[3] = { p, p, p }, *qq[4] = { q, q, q, q }, *none[2] = { q, NULL };
	policy_result res;
	pcg_err err = { "" };
	pcg_rng r;
	int x;

	pcg_rng_init(&r, 9, 0);
	/* p(x) = 0 < q(x): always accepted; q(x) = 0: always rejected. */
	shape(p, LOW_HALF, 0, 1);
	shape(q, FLAT, 0, 1);
	x = 15;
	for (int i = 0; i < 1000; i++) {
		CHECK(policy_run(sd, 1, &x, pp, none, &r, &res, &err) == 0 && res.n_accepted == 1 &&
		      res.steps[0].ratio == 1.0);
	}
	shape(q, LOW_HALF, 0, 1);
	shape(p, FLAT, 0, 1);
	for (int i = 0; i < 1000; i++) {
		CHECK(policy_run(sd, 1, &x, pp, none, &r, &res, &err) == 0 && res.rejected &&
		      res.tokens[0] < V / 2 && res.steps[0].ratio == 0.0);
		/* ssd accepts even q(x) = 0 with probability beta: ratio 0.4 */
		CHECK(policy_run(ssd, 1, &x, pp, none, &r, &res, &err) == 0 &&
		      fabs(res.steps[0].ratio - 0.4) < 1e-12);
	}
	/* A group with P_c > 0 = Q_c is always rejected, one of zero mass
	 * in both is never emitted. Token 17 is a singleton beyond the ASG. */
	memset(p, 0, sizeof p);
	memset(q, 0, sizeof q);
	p[17] = 1.0f;
	q[3] = 0.5f;
	q[18] = 0.5f;
	x = 17;
	for (int i = 0; i < 1000; i++) {
		const asg_view *g = asg_get(a);
		int ok = policy_run(pcg, 1, &x, pp, none, &r, &res, &err) == 0 && res.rejected;
		/* the emitted group holds the emitted token: one of the groups of
		 * token 3 (0, 1, 2), or token 18's singleton (M + 2) */
		ok = ok && ((res.tokens[0] == 3 && res.groups[0] <= 2) ||
			    (res.tokens[0] == 18 && res.groups[0] == (int)g->M + 2));
		CHECKF(ok, "token %d, group %d", res.tokens[0], res.groups[0]);
	}
	/* q = p: the residual is never entered, for every policy and shape. */
	for (int c = 0; c < NPQ; c++) {
		long rej = 0;
		memcpy(p, PQ[c].p, sizeof p);
		memcpy(q, PQ[c].p, sizeof q);
		for (int i = 0; i < 20000; i++) {
			int xs[3];
			for (int j = 0; j < 3; j++)
				xs[j] = pcg_sample(p, V, pcg_rng_uniform(&r));
			policy_run(sd, 3, xs, pp, qq, &r, &res, &err);
			rej += res.rejected;
			policy_run(ssd, 3, xs, pp, qq, &r, &res, &err);
			rej += res.rejected;
			policy_run(pcg, 3, xs, pp, qq, &r, &res, &err);
			rej += res.rejected + res.trials;
		}
		CHECKF(rej == 0, "q = p (%s): %ld rejections", PQ[c].name, rej);
	}
	/* The end token inside the block ends it: nothing after it, no bonus. */
	{
		policy_params pe = { .kind = POLICY_SD, .end_token = END };
		policy *sde = policy_new(&pe, V, &err);
		int xs[3] = { 2, END, 5 };
		shape(p, FLAT, 0, 1);
		shape(q, FLAT, 0, 1);
		q[2] = q[END] = 0.3f; /* q >= p at 2 and END: both accepted for sure */
		normalise(q);
		for (int i = 0; i < 100; i++) {
			CHECK(policy_run(sde, 3, xs, pp, qq, &r, &res, &err) == 0);
			CHECK(res.n_tokens == 2 && res.tokens[1] == END && res.ended && !res.bonus &&
			      res.n_steps == 2);
		}
		pe.kind = POLICY_PCG;
		pe.groups = a;
		policy *pcge = policy_new(&pe, V, &err);
		CHECK(pcge && policy_run(pcge, 3, xs, pp, qq, &r, &res, &err) == 0 &&
		      res.n_tokens == 2 && res.ended && res.groups[1] == (int)(asg_get(a)->M + END - NA));
		/* A corrected token that is the end token ends the block too. */
		memset(q, 0, sizeof q);
		q[END] = 1.0f;
		CHECK(policy_run(sde, 3, xs, pp, qq, &r, &res, &err) == 0 && res.n_tokens == 1 &&
		      res.tokens[0] == END && res.ended && res.rejected);
		policy_free(&sde);
		policy_free(&pcge);
	}
	/* Greedy: accept while x = argmax q (lowest id on ties), then argmax. */
	{
		const float *q3[4] = { PQ[0].q, PQ[1].q, PQ[2].q, PQ[3].q };
		int a0 = pcg_argmax(PQ[0].q, V), a1 = pcg_argmax(PQ[1].q, V);
		int xs[3] = { a0, a1, (pcg_argmax(PQ[2].q, V) + 1) % V };
		CHECK(policy_run(greedy, 3, xs, NULL, q3, &r, &res, &err) == 0);
		CHECK(res.n_accepted == 2 && res.n_tokens == 3 && res.tokens[2] == pcg_argmax(PQ[2].q, V));
		xs[2] = pcg_argmax(PQ[2].q, V);
		CHECK(policy_run(greedy, 3, xs, NULL, q3, &r, &res, &err) == 0);
		CHECK(res.n_accepted == 3 && res.bonus && res.tokens[3] == pcg_argmax(PQ[3].q, V));
	}
	/* Sums off 1 by 1e-6 (p slightly over, q slightly under, and q a scaled
	 * copy of p, whose residual [q - p]+ is empty): still exact. */
	{
		static float ps[V], qs[V];
		sim s = { sd, NULL, NULL };
		double stat, pv;
		int df;
		tally t;
		for (int i = 0; i < V; i++) {
			ps[i] = PQ[4].p[i] * (1.0f + 1e-6f);
			qs[i] = PQ[4].q[i] * (1.0f - 1e-6f);
		}
		simulate(&s, ps, qs, TRIALS, 31, &t);
		pv = token_fit(&t, qs, &stat, &df);
		expect_fit("sd, sums 1 +- 1e-6: token ~ q", pv, stat, df);
		s.pl = pcg;
		s.a = a;
		simulate(&s, ps, qs, TRIALS, 32, &t);
		pv = group_fit(&t, a, qs, &stat, &df);
		expect_fit("pcg, sums 1 +- 1e-6: group ~ Q_c", pv, stat, df);
		for (int i = 0; i < V; i++)
			qs[i] = PQ[4].p[i] * (1.0f - 1e-6f);
		s.pl = sd;
		simulate(&s, PQ[4].p, qs, TRIALS, 33, &t);
		pv = token_fit(&t, qs, &stat, &df);
		expect_fit("sd, q = p (1 - 1e-6): token ~ q", pv, stat, df);
		s.pl = pcg;
		simulate(&s, PQ[4].p, qs, TRIALS, 34, &t);
		pv = group_fit(&t, a, qs, &stat, &df);
		expect_fit("pcg, q = p (1 - 1e-6): group ~ Q_c", pv, stat, df);
	}
	/* Bad input. */
	{
		policy_params bad = { .kind = POLICY_SSD, .beta = -0.1, .end_token = -1 };
		x = V;
		CHECK(policy_new(&bad, V, &err) == NULL && strstr(err.msg, "beta"));
		bad.beta = 0;
		bad.end_token = V;
		CHECK(policy_new(&bad, V, &err) == NULL && strstr(err.msg, "end token"));
		bad.end_token = -1;
		bad.kind = POLICY_PCG;
		bad.groups = a;
		CHECK(policy_new(&bad, NA - 1, &err) == NULL && strstr(err.msg, "covers"));
		CHECK(policy_run(sd, 1, &x, pp, none, &r, &res, &err) < 0 && strstr(err.msg, "out of range"));
		CHECK(policy_run(sd, 0, &x, pp, none, &r, &res, &err) < 0);
		memset(q, 0, sizeof q);
		x = 0;
		shape(p, FLAT, 0, 1);
		CHECK(policy_run(sd, 1, &x, pp, none, &r, &res, &err) < 0 && strstr(err.msg, "no mass"));
		CHECK(policy_kind_from_name("pcg") == POLICY_PCG && policy_kind_from_name("x") == -1);
	}
	policy_free(&sd);
	policy_free(&ssd);
	policy_free(&pcg);
	policy_free(&greedy);
	asg_close(&a);
}

/* The chi-square tail against a published quantile. */
static void test_gamma(void)
{
	CHECK(fabs(gamma_q(7.5, 37.6973 / 2) - 0.001) < 1e-6);  /* chi2(15) 0.999 quantile */
	CHECK(fabs(gamma_q(0.5, 3.841459 / 2) - 0.05) < 1e-6);  /* chi2(1) 0.95 */
	CHECK(fabs(gamma_q(50, 149.4493 / 2) - 0.001) < 1e-6);  /* chi2(100) 0.999 */
	CHECK(fabs(gamma_q(50, 124.3421 / 2) - 0.05) < 1e-6);   /* chi2(100) 0.95 */
}

int main(void)
{
	chi2_alpha = ALPHA;
	test_gamma();
	make_pqs();
	test_sd_ssd();
	test_pcg();
	test_trials_uncapped();
	test_block();
	test_power();
	test_edges();
	printf("%d statistical tests at alpha %.2g each (family-wise 0.001)\n", chi2_tests, ALPHA);
	CHECKF(chi2_tests <= MAX_TESTS, "%d tests: raise MAX_TESTS", chi2_tests);
	return check_done("test_policy");
}
