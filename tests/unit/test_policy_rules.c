/* test_policy_rules.c: the rules that are not exact (typical, topk) and
 * the one whose promise is a bound (lantern), tested statistically on
 * distributions drawn here from seeds (Dirichlet of several concentrations,
 * peaked and sparse), none of them seen while the rules were written:
 *   - typical and topk accept at their closed-form rates
 *     sum_x p(x) a(x), and emit p(y) a(y) + (1 - sum p a) q(y);
 *   - lantern's output stays within delta of q in total variation
 *     (measured TV minus its sampling bias, against delta), follows the
 *     relaxed q' of policy_lantern.c's header (written again here from the
 *     header's words) exactly, accepts at sum min(p, q'), and with delta 0
 *     is sd: output ~ q.
 * Power: the paper's per-token budget (each draft token borrows up to delta
 * of its own neighbours' mass) is computed in closed form on the same
 * distributions and exceeds delta on some of them, which is why the rule
 * spends delta once per position.
 *
 * Significance as test_policy.c: chi-square or z tests at ALPHA = 0.001 /
 * MAX_TESTS (Bonferroni); the count of tests is checked against MAX_TESTS.
 */
#include <math.h>
#include <string.h>

#include "asg_build.h"
#include "check.h"
#include "chi2.h"
#include "policy.h"
#include "rng.h"
#include "sampling.h"

#define V 20
#define TRIALS 200000
#define MAX_TESTS 200
#define ALPHA (0.001 / MAX_TESTS)
#define NPQ 8
#define KNN 3

/* A draw of V probabilities: Dirichlet(c) by gamma variates (Marsaglia-Tsang
 * for c >= 1, boosted for c < 1), then optionally half the tokens zeroed. */
static double gamma_var(pcg_rng *r, double c)
{
	if (c < 1.0)
		return gamma_var(r, c + 1.0) * pow(pcg_rng_uniform(r), 1.0 / c);
	const double d = c - 1.0 / 3.0, s = 1.0 / sqrt(9.0 * d);
	for (;;) {
		double x, v, u;
		do {
			double u1 = pcg_rng_uniform(r), u2 = pcg_rng_uniform(r);
			x = sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * M_PI * u2);
			v = 1.0 + s * x;
		} while (v <= 0.0);
		v = v * v * v;
		u = pcg_rng_uniform(r);
		if (log(u) < 0.5 * x * x + d - d * v + d * log(v))
			return d * v;
	}
}

static void draw_dist(float *v, double c, int sparse, pcg_rng *r)
{
	double s = 0.0, g[V];
	for (int i = 0; i < V; i++) {
		g[i] = gamma_var(r, c) + 1e-12;
		if (sparse && pcg_rng_below(r, 2) && i)
			g[i] = 0.0;
		s += g[i];
	}
	for (int i = 0; i < V; i++)
		v[i] = (float)(g[i] / s);
}

typedef struct pq {
	float p[V], q[V];
	char name[48];
} pq;

static pq PQ[NPQ];

static void make_pqs(void)
{
	static const double conc[NPQ] = { 0.1, 0.3, 1.0, 3.0, 0.2, 0.5, 1.0, 0.05 };
	pcg_rng r;
	pcg_rng_init(&r, 20261125, 7);
	for (int k = 0; k < NPQ; k++) {
		draw_dist(PQ[k].p, conc[k], k == 6, &r);
		draw_dist(PQ[k].q, conc[(k + 3) % NPQ], k == 5, &r);
		snprintf(PQ[k].name, sizeof PQ[k].name, "pq%d (Dir %.2g/%.2g%s)", k, conc[k],
			 conc[(k + 3) % NPQ], k == 5 || k == 6 ? ", sparse" : "");
	}
}

typedef struct tally {
	long accepted, tok[V];
} tally;

static void simulate(policy *pl, const float *p, const float *q, uint64_t seed, tally *t)
{
	const float *pp[1] = { p }, *qq[2] = { q, NULL };
	policy_result res;
	pcg_err err = { "" };
	pcg_rng r;

	memset(t, 0, sizeof *t);
	pcg_rng_init(&r, seed, 1);
	for (long i = 0; i < TRIALS; i++) {
		int x = pcg_sample(p, V, pcg_rng_uniform(&r));
		if (policy_run(pl, 1, &x, pp, qq, &r, &res, &err) < 0) {
			CHECKF(0, "policy_run: %s", err.msg);
			return;
		}
		t->accepted += res.n_accepted;
		t->tok[res.tokens[0]]++;
	}
}

static policy *make(policy_kind kind, double a0, double a1, const asg *g)
{
	policy_params pp = { .kind = kind, .groups = g, .end_token = -1, .arg = { a0, a1 },
			     .arg_set = kind == POLICY_TOPK ? 1u : 3u };
	pcg_err err = { "" };
	policy *pl = policy_new(&pp, V, &err);
	CHECKF(pl != NULL, "%s", err.msg);
	return pl;
}

/* The closed forms of a membership rule: acceptance and output. */
static void check_membership(const char *rule, policy *pl, const pq *d, const int *acc,
			     uint64_t seed)
{
	double A = 0.0, out[V];
	char what[128];
	tally t;

	for (int x = 0; x < V; x++)
		A += acc[x] ? d->p[x] : 0.0;
	for (int y = 0; y < V; y++)
		out[y] = (acc[y] ? d->p[y] : 0.0) + (1.0 - A) * d->q[y];
	simulate(pl, d->p, d->q, seed, &t);
	snprintf(what, sizeof what, "%s, %s: acceptance", rule, d->name);
	expect_mean(what, (double)t.accepted / TRIALS, A, sqrt(A * (1.0 - A) / TRIALS));
	double stat;
	int df;
	double pv = chi2_p(t.tok, out, V, TRIALS, &stat, &df);
	snprintf(what, sizeof what, "%s, %s: output", rule, d->name);
	expect_fit(what, pv, stat, df);
}

static void test_typical(void)
{
	static const double settings[][2] = { { 0.09, 0.3 }, { 0.3, 0.5 } };
	for (int s = 0; s < 2; s++) {
		policy *pl = make(POLICY_TYPICAL, settings[s][0], settings[s][1], NULL);
		char rule[64];
		snprintf(rule, sizeof rule, "typical eps %.2g alpha %.2g", settings[s][0],
			 settings[s][1]);
		for (int k = 0; k < NPQ && pl; k++) {
			const float *q = PQ[k].q;
			double h = 0.0, thr;
			int acc[V];
			for (int y = 0; y < V; y++)
				if (q[y] > 0.0f)
					h -= q[y] * log(q[y]);
			thr = fmin(settings[s][0], settings[s][1] * exp(-h));
			for (int x = 0; x < V; x++)
				acc[x] = q[x] > thr;
			check_membership(rule, pl, &PQ[k], acc, 100 + 10 * s + k);
		}
		policy_free(&pl);
	}
}

static void test_topk(void)
{
	static const int ks[] = { 1, 3, 7 };
	for (int s = 0; s < 3; s++) {
		policy *pl = make(POLICY_TOPK, ks[s], 0, NULL);
		char rule[64];
		snprintf(rule, sizeof rule, "topk k %d", ks[s]);
		for (int k = 0; k < NPQ && pl; k++) {
			const float *q = PQ[k].q;
			int acc[V];
			for (int x = 0; x < V; x++) {
				int above = 0;
				for (int y = 0; y < V; y++)
					above += q[y] > q[x];
				acc[x] = above < ks[s] && q[x] > 0.0f;
			}
			check_membership(rule, pl, &PQ[k], acc, 200 + 10 * s + k);
		}
		policy_free(&pl);
	}
}

/* Neighbours of t (not t), most weight first as the rule takes them. */
static int neighbours(const asg *g, int t, int *nb)
{
	const asg_view *v = asg_get(g);
	int m = 0;
	for (uint64_t j = v->grp_start[t]; j < v->grp_start[t + 1]; j++)
		if ((int)v->grp_tok[j] != t)
			nb[m++] = (int)j;
	for (int i = 1; i < m; i++) /* insertion sort: weight down, id up */
		for (int j = i; j > 0; j--) {
			float wa = v->grp_w[nb[j - 1]], wb = v->grp_w[nb[j]];
			if (wa > wb || (wa == wb && v->grp_tok[nb[j - 1]] < v->grp_tok[nb[j]]))
				break;
			int tmp = nb[j];
			nb[j] = nb[j - 1];
			nb[j - 1] = tmp;
		}
	for (int i = 0; i < m; i++)
		nb[i] = (int)v->grp_tok[nb[i]];
	return m;
}

/* q' as the header of policy_lantern.c says it in words. */
static double relaxed(const asg *g, const float *p, const float *q, double delta, double *qp)
{
	double moved = 0.0;
	for (int t = 0; t < V; t++)
		qp[t] = q[t];
	for (int t = 0; t < V; t++) {
		int nb[V], m = neighbours(g, t, nb);
		if (!(p[t] > 1e-4f)) /* too rare to take anything */
			continue;
		for (int i = 0; i < m; i++) {
			double give = fmin(fmin(qp[nb[i]] - p[nb[i]], p[t] - qp[t]), delta - moved);
			if (give > 0.0) {
				qp[nb[i]] -= give;
				qp[t] += give;
				moved += give;
			}
		}
	}
	return moved;
}

/* The paper's rule in closed form: each x borrows up to delta of its own
 * neighbours' q (in order, while the sum stays within delta); accept
 * min(1, q~(x)/p(x)); on rejection draw from [q - p]+ with x and the
 * neighbours it borrowed from zeroed. Returns TV(output, q). */
static double per_token_tv(const asg *g, const float *p, const float *q, double delta)
{
	double out[V] = { 0 }, tv = 0.0;
	for (int x = 0; x < V; x++) {
		int nb[V], m = neighbours(g, x, nb), used[V] = { 0 };
		double c = 0.0, r[V], rs = 0.0;
		for (int i = 0; i < m && c + q[nb[i]] <= delta; i++)
			c += q[nb[i]], used[nb[i]] = 1;
		double a = p[x] > 0.0f ? fmin(1.0, (q[x] + c) / p[x]) : 1.0;
		out[x] += p[x] * a;
		for (int y = 0; y < V; y++) {
			r[y] = y == x || used[y] ? 0.0 : fmax(0.0, (double)q[y] - p[y]);
			rs += r[y];
		}
		for (int y = 0; y < V; y++)
			out[y] += p[x] * (1.0 - a) * (rs > 0.0 ? r[y] / rs : q[y]);
	}
	for (int y = 0; y < V; y++)
		tv += 0.5 * fabs(out[y] - q[y]);
	return tv;
}

static void test_lantern(void)
{
	float E[V * 8];
	pcg_rng r;
	pcg_err err = { "" };
	asg_build_opts o = { .threads = 1 };
	double worst_paper = 0.0;

	pcg_rng_init(&r, 77, 3);
	for (int i = 0; i < V * 8; i++)
		E[i] = (float)(pcg_rng_uniform(&r) - 0.5);
	asg *g = asg_build_knn(E, V, 8, KNN, &o, &err);
	CHECKF(g != NULL, "asg_build_knn: %s", err.msg);
	if (g == NULL)
		return;
	CHECK(asg_get(g)->M == V && asg_get(g)->topk == KNN + 1);
	static const double deltas[] = { 0.0, 0.05, 0.1, 0.3 };
	for (int s = 0; s < 4; s++) {
		const double delta = deltas[s];
		policy *pl = make(POLICY_LANTERN, delta, 1000, g);
		for (int k = 0; k < NPQ && pl; k++) {
			const pq *d = &PQ[k];
			double qp[V], A = 0.0, tv = 0.0, bias = 0.0, stat;
			char what[128];
			int df;
			tally t;
			double moved = relaxed(g, d->p, d->q, delta, qp);
			CHECKF(moved <= delta + 1e-9, "moved %g > delta %g", moved, delta);
			for (int x = 0; x < V; x++)
				A += fmin(d->p[x], qp[x]);
			simulate(pl, d->p, d->q, 300 + 10 * s + k, &t);
			snprintf(what, sizeof what, "lantern delta %.2g, %s: acceptance", delta, d->name);
			expect_mean(what, (double)t.accepted / TRIALS, A, sqrt(A * (1.0 - A) / TRIALS));
			double pv = chi2_p(t.tok, qp, V, TRIALS, &stat, &df);
			snprintf(what, sizeof what, "lantern delta %.2g, %s: output ~ q'", delta, d->name);
			expect_fit(what, pv, stat, df);
			/* The promise itself: TV(output, q) <= delta. The empirical TV
			 * overestimates by at most sum sqrt(q(1-q)/N) / 2 in mean; allow
			 * that and 6 of its standard deviations (< 1/sqrt(N) each). */
			for (int y = 0; y < V; y++) {
				tv += 0.5 * fabs((double)t.tok[y] / TRIALS - d->q[y]);
				bias += 0.5 * sqrt(d->q[y] * (1.0 - d->q[y]) / TRIALS);
			}
			chi2_tests++;
			CHECKF(tv <= delta + bias + 6.0 / sqrt(TRIALS),
			       "lantern delta %g, %s: TV(output, q) = %.4f > delta", delta, d->name, tv);
			printf("  lantern delta %.2g, %-30s TV(out, q) %.4f (bound %.2g)\n", delta, d->name,
			       tv, delta);
			if (delta > 0.0)
				worst_paper = fmax(worst_paper, per_token_tv(g, d->p, d->q, delta) / delta);
		}
		policy_free(&pl);
	}
	printf("  the paper's per-token budget: TV(out, q) up to %.2f delta on these\n", worst_paper);
	CHECKF(worst_paper > 1.0, "the per-token budget stayed within delta (%.2f): the test "
	       "distributions lack power", worst_paper);
	/* Not a neighbour file: an ASG whose groups are merged. */
	{
		uint64_t start[3] = { 0, 10, V };
		uint32_t members[V];
		for (int i = 0; i < V; i++)
			members[i] = (uint32_t)i;
		asg *merged = asg_from_groups(V, 2, start, members, NULL, 0, 0.4, 0, &err);
		policy_params pp = { .kind = POLICY_LANTERN, .groups = merged, .end_token = -1 };
		CHECK(merged && policy_new(&pp, V, &err) == NULL && strstr(err.msg, "--knn"));
		pp.groups = NULL;
		CHECK(policy_new(&pp, V, &err) == NULL && strstr(err.msg, "neighbour file"));
		asg_close(&merged);
	}
	asg_close(&g);
}

static void test_table(void)
{
	pcg_err err = { "" };
	/* Every kind has a row with a name, a summary and a guarantee, and its
	 * name finds it. */
	for (int k = 0; k < POLICY_N_KINDS; k++) {
		const policy_info *pi = policy_info_of(k);
		CHECK(pi && *pi->name && *pi->summary && *pi->guarantee);
		CHECK(pi && policy_kind_from_name(pi->name) == k);
		for (int i = 0; pi && i < pi->n_args; i++)
			CHECK(pi->args[i].def >= pi->args[i].min && pi->args[i].def <= pi->args[i].max);
	}
	CHECK(policy_info_of(POLICY_N_KINDS) == NULL);
	CHECK(policy_arg_index(POLICY_TYPICAL, "alpha") == 1 && policy_arg_index(POLICY_SD, "k") < 0);
	/* Arguments out of range, or not the rule's, are refused by name. */
	policy_params pp = { .kind = POLICY_TOPK, .end_token = -1, .arg = { 0 }, .arg_set = 1 };
	CHECK(policy_new(&pp, V, &err) == NULL && strstr(err.msg, "k = 0"));
	pp.arg[0] = 2.5;
	CHECK(policy_new(&pp, V, &err) == NULL && strstr(err.msg, "whole number"));
	pp = (policy_params){ .kind = POLICY_TYPICAL, .end_token = -1, .arg = { 1.5 }, .arg_set = 1 };
	CHECK(policy_new(&pp, V, &err) == NULL && strstr(err.msg, "epsilon"));
	pp = (policy_params){ .kind = POLICY_SD, .end_token = -1, .arg_set = 1 };
	CHECK(policy_new(&pp, V, &err) == NULL && strstr(err.msg, "takes 0"));
	/* Defaults fill what is not given: topk with k 50 keeps every token of 20. */
	pp = (policy_params){ .kind = POLICY_TOPK, .end_token = -1 };
	policy *pl = policy_new(&pp, V, &err);
	CHECKF(pl != NULL, "%s", err.msg);
	if (pl) {
		tally t;
		simulate(pl, PQ[0].p, PQ[7].q, 5, &t);
		long want = 0;
		for (int x = 0; x < V; x++)
			if (PQ[7].q[x] > 0.0f)
				want++;
		CHECK(want == V ? t.accepted == TRIALS : t.accepted <= TRIALS);
	}
	policy_free(&pl);
}

int main(void)
{
	chi2_alpha = ALPHA;
	make_pqs();
	test_table();
	test_typical();
	test_topk();
	test_lantern();
	printf("%d statistical tests (at most %d)\n", chi2_tests, MAX_TESTS);
	CHECK(chi2_tests > 0 && chi2_tests <= MAX_TESTS);
	return check_done("test_policy_rules");
}
