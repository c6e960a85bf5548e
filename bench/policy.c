/* bench/policy.c: time per verification round of every policy at
 * V = 65,537 (65,536 speech tokens and the end token), lookahead L = 3,
 * with peaked distributions: q puts 0.5 on one token, 0.3 on the rest of an
 * ASG group holding it and 0.2 spread over the vocabulary; p does the same
 * around a token of the same group (the draft is right about the group,
 * often wrong about the token: the case PCG is for). Rounds cycle over a
 * pool of precomputed distributions; x is drawn from p outside the timing.
 * Prints mean and 99th percentile microseconds per round, tokens emitted per
 * round and each policy's time over sd's, all measured in one run. lantern
 * takes a neighbour file of 8 neighbours per token (the 4 ids on each side,
 * the shape asg-build --knn 8 writes) with its defaults (delta 0.1).
 * Usage: bench-policy [--asg FILE] [--rounds N] [--seed S] [--max-trials N]
 *   without --asg: a synthetic ASG of windows of 24 tokens overlapping by 12
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "asg.h"
#include "opts.h"
#include "policy.h"
#include "rng.h"
#include "sampling.h"

#define V 65537
#define NSPEECH 65536
#define L 3
#define POOL 8

static const char *asg_path;
static int rounds, seed, max_trials;

static const pcg_opt opts[] = {
	{ "asg", PCG_OPT_STR, &asg_path, NULL, 1, 0, "FILE", "the ASG (n must be 65536)" },
	{ "rounds", PCG_OPT_INT, &rounds, "20000", 1, 100000000, "N", "rounds per policy" },
	{ "seed", PCG_OPT_INT, &seed, "1", 0, 2147483647, "S", "seed" },
	{ "max-trials", PCG_OPT_INT, &max_trials, "0", 0, 1 << 30, "N",
	  "pcg's thinning cap (0: the policy's default)" },
	{ NULL },
};

/* A neighbour file: group t is t and the 4 ids on each side. */
static asg *neighbours(pcg_err *err)
{
	uint64_t *start = malloc(((size_t)NSPEECH + 1) * sizeof *start);
	uint32_t *mem = malloc((size_t)NSPEECH * 9 * sizeof *mem);
	asg *a;

	start[0] = 0;
	for (int t = 0; t < NSPEECH; t++) {
		int m = 0;
		for (int j = t - 4; j <= t + 4; j++)
			if (j >= 0 && j < NSPEECH)
				mem[start[t] + m++] = (uint32_t)j;
		start[t + 1] = start[t] + m;
	}
	a = asg_from_groups(NSPEECH, NSPEECH, start, mem, NULL, 0, 0, 9, err);
	free(start);
	free(mem);
	return a;
}

static asg *synthetic(pcg_err *err)
{
	const int W = 24, S = 12, M = NSPEECH / S;
	uint64_t *start = malloc(((size_t)M + 1) * sizeof *start);
	uint32_t *mem = malloc((size_t)M * W * sizeof *mem);
	asg *a;

	start[0] = 0;
	for (int k = 0; k < M; k++) {
		/* window k: tokens kS .. kS+W-1, cut at the end */
		int m = 0;
		for (int j = 0; j < W && k * S + j < NSPEECH; j++)
			mem[start[k] + m++] = (uint32_t)(k * S + j);
		start[k + 1] = start[k] + m;
	}
	a = asg_from_groups(NSPEECH, (uint32_t)M, start, mem, NULL, 0, 0, 0, err);
	free(start);
	free(mem);
	return a;
}

/* 0.5 on c, 0.3 over group k's members, 0.2 (jittered) over everything. */
static void peaked(float *v, const asg_view *g, uint32_t k, int c, pcg_rng *r)
{
	double s = 0.0;
	const uint64_t a = g->grp_start[k], e = g->grp_start[k + 1];

	for (int i = 0; i < V; i++) {
		v[i] = (float)(0.5 + pcg_rng_uniform(r));
		s += v[i];
	}
	for (int i = 0; i < V; i++)
		v[i] = (float)(0.2 * v[i] / s);
	for (uint64_t j = a; j < e; j++)
		v[g->grp_tok[j]] += (float)(0.3 / (double)(e - a));
	v[c] += 0.5f;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	pcg_err err = { "" };
	int first = pcg_opts_parse(opts, argc, argv, &err);
	static float *P[POOL][L], *Q[POOL][L + 1];
	double mean_us[POLICY_N_KINDS];
	const asg_view *g;
	asg *a;
	pcg_rng r;

	if (first == PCG_OPTS_HELP || first != argc) {
		pcg_opts_usage(first == PCG_OPTS_HELP ? stdout : stderr, "bench-policy",
			       "[--asg FILE] [--rounds N] [--seed S] [--max-trials N]", opts);
		return first == PCG_OPTS_HELP ? 0 : 2;
	}
	a = asg_path ? asg_open(asg_path, &err) : synthetic(&err);
	asg *knn = a ? neighbours(&err) : NULL;
	if (knn == NULL) {
		fprintf(stderr, "bench-policy: %s\n", err.msg);
		return 1;
	}
	g = asg_get(a);
	if (g->n != NSPEECH) {
		fprintf(stderr, "bench-policy: the ASG covers %u tokens, want %d\n", g->n, NSPEECH);
		return 1;
	}
	pcg_rng_init(&r, (uint64_t)seed, 0);
	for (int s = 0; s < POOL; s++)
		for (int i = 0; i <= L; i++) {
			/* one group per position; q around c, p around another member */
			int c = (int)pcg_rng_below(&r, NSPEECH);
			uint64_t j0 = g->tok_start[c];
			uint32_t k = g->tok_grp[j0 + pcg_rng_below(&r, (uint32_t)(g->tok_start[c + 1] - j0))];
			uint64_t sz = g->grp_start[k + 1] - g->grp_start[k];
			int c2 = (int)g->grp_tok[g->grp_start[k] + pcg_rng_below(&r, (uint32_t)sz)];
			Q[s][i] = malloc(V * sizeof(float));
			peaked(Q[s][i], g, k, c, &r);
			if (i < L) {
				P[s][i] = malloc(V * sizeof(float));
				peaked(P[s][i], g, k, c2, &r);
			}
		}
	printf("policy: V %d, L %d, %d rounds, ASG %s: n %u, M %u, mean |G| %.1f\n", V, L, rounds,
	       asg_path ? asg_path : "synthetic windows", g->n, g->M, (double)g->nnz / g->M);
	for (int kk = 0; kk < POLICY_N_KINDS; kk++) {
		const unsigned needs = policy_info_of(kk)->needs;
		policy_params pp = { .kind = (policy_kind)kk,
				     .groups = needs & POLICY_NEEDS_ASG ? a
					     : needs & POLICY_NEEDS_KNN ? knn : NULL,
				     .max_trials = max_trials, .end_token = NSPEECH };
		policy *pl = policy_new(&pp, V, &err);
		double *t = malloc((size_t)rounds * sizeof *t), sum = 0.0;
		long emitted = 0, rejects = 0, trials = 0, exact = 0;
		policy_result res;
		pcg_rng rr;

		pcg_rng_init(&rr, (uint64_t)seed + 1, 0);
		for (int i = 0; i < rounds; i++) {
			const int s = i % POOL;
			int x[L];
			for (int j = 0; j < L; j++)
				x[j] = pcg_sample(P[s][j], V, pcg_rng_uniform(&rr));
			double t0 = pcg_now();
			if (policy_run(pl, L, x, (const float *const *)P[s], (const float *const *)Q[s],
				       &rr, &res, &err) < 0) {
				fprintf(stderr, "bench-policy: %s\n", err.msg);
				return 1;
			}
			t[i] = pcg_now() - t0;
			sum += t[i];
			emitted += res.n_tokens;
			rejects += res.rejected;
			trials += res.trials;
			exact += res.exact;
		}
		qsort(t, rounds, sizeof *t, cmp_d);
		mean_us[kk] = 1e6 * sum / rounds;
		printf("%-8s %8.1f us/round mean, %8.1f p99, %8.1f max; %.3f tokens/round, "
		       "rejections %.3f/round", policy_kind_name((policy_kind)kk), mean_us[kk],
		       1e6 * t[(int)(0.99 * (rounds - 1))], 1e6 * t[rounds - 1],
		       (double)emitted / rounds, (double)rejects / rounds);
		if (kk == POLICY_PCG)
			printf(", %.2f trials/rejection, %ld exact", rejects ? (double)trials / rejects : 0.0,
			       exact);
		printf("\n");
		free(t);
		policy_free(&pl);
	}
	for (int kk = 1; kk < POLICY_N_KINDS; kk++)
		printf("%s/sd time ratio %.2f\n", policy_kind_name((policy_kind)kk),
		       mean_us[kk] / mean_us[POLICY_SD]);
	asg_close(&a);
	asg_close(&knn);
	return 0;
}
