/* test_quant_sd.c: speculative sampling stays exact with a quantised target
 * and a quantised draft: the target is the Q8_0 GGUF of the transformers
 * fixture, the draft its Q4_0 GGUF (both written by gguf-py,
 * tests/ref/make_gguf_models.py), both run through the int8 decode kernels
 * at the last position of the fixture prompt, tempered as the pipeline does
 * (temperature 0.8, top-k 50). N rounds of lookahead 1: x ~ p, then sd.
 * The emitted tokens must be distributed as the quantised target's q
 * (chi-square, categories below 5 expected pooled), and the acceptance rate
 * must be sum min(p, q) (z test): the draft costs acceptance, never
 * exactness. Then pcg on the same distributions with an ASG of overlapping
 * windows: the emitted groups must be distributed as the quantised
 * target's group masses Q_c, the acceptance rate sum min(P_c, Q_c).
 * Significance 0.001 / 4 per test (Bonferroni), fixed seeds.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "asg.h"
#include "check.h"
#include "chi2.h"
#include "fixture.h"
#include "model.h"
#include "policy.h"
#include "rng.h"
#include "sampling.h"

#define TRIALS 200000
#define ALPHA (0.001 / 4)

/* The tempered distribution of the position after ids: a prefill of all
 * but the last id, then one decode step (B = 1, the int8 kernels). */
static int next_probs(const char *path, const int *ids, int n, const pcg_sampling *s, float *out,
		      int *V)
{
	pcg_err err = { "" };
	llama_model *m = llama_open(path, NULL, &err);
	CHECKF(m != NULL, "%s: %s", path, err.msg);
	if (m == NULL)
		return -1;
	*V = llama_get_config(m)->vocab;
	llama_kv *kv = llama_kv_new(m);
	float *lg = malloc((size_t)*V * sizeof *lg);
	int rc = llama_forward(m, kv, ids, n - 1, 0, NULL, NULL, &err);
	if (rc == 0)
		rc = llama_forward(m, kv, ids + n - 1, 1, 1, NULL, lg, &err);
	if (rc == 0)
		rc = pcg_probs(lg, *V, s, out, &err);
	CHECKF(rc == 0, "%s: %s", path, err.msg);
	free(lg);
	llama_kv_free(&kv);
	llama_close(&m);
	return rc;
}

/* The emitted categories obs fit the expected distribution e (chi-square),
 * and acc acceptances of TRIALS rounds fit the rate want (z test). */
static void check_fit(const char *what, const long *obs, const double *e, int n, long acc,
		      double want)
{
	double stat;
	int df;
	const double pv = chi2_p(obs, e, n, TRIALS, &stat, &df);
	const double se = sqrt(want * (1 - want) / TRIALS) + 1e-6;
	const double z = ((double)acc / TRIALS - want) / se;

	printf("%s: chi2(%d) = %.1f, p = %.3g; acceptance %.4f, expected %.4f\n", what, df, stat,
	       pv, (double)acc / TRIALS, want);
	CHECKF(pv >= ALPHA, "%s: p = %.3g", what, pv);
	CHECKF(erfc(fabs(z) / sqrt(2.0)) >= ALPHA, "%s: acceptance %.4f, want %.4f (z %.2f)", what,
	       (double)acc / TRIALS, want, z);
}

int main(void)
{
	int ids[64], V = 0, V2 = 0;
	const int n = read_ids("tests/fixtures/llama/gqa-f32/tokens.txt", ids, 64);
	pcg_sampling samp = { 0.8f, 50, 1.0f };
	float p[4096], q[4096];
	pcg_err err = { "" };

	CHECK(n > 1);
	if (next_probs("tests/fixtures/gguf/gqa-q8_0.gguf", ids, n, &samp, q, &V) < 0 ||
	    next_probs("tests/fixtures/gguf/gqa-q4_0.gguf", ids, n, &samp, p, &V2) < 0)
		return check_done("test_quant_sd");
	CHECK(V == V2 && V <= 4096);

	policy_params pp = { .kind = POLICY_SD, .end_token = -1 };
	policy *pl = policy_new(&pp, V, &err);
	CHECKF(pl != NULL, "%s", err.msg);
	long *obs = calloc((size_t)V, sizeof *obs), acc = 0;
	double *e = calloc((size_t)V, sizeof *e), want = 0;
	const float *pv1[1] = { p }, *qv[2] = { q, NULL };
	policy_result res;
	pcg_rng rng;
	pcg_rng_init(&rng, 4242, 1);
	for (long i = 0; i < TRIALS && pl; i++) {
		int x = pcg_sample(p, V, pcg_rng_uniform(&rng));
		if (policy_run(pl, 1, &x, pv1, qv, &rng, &res, &err) < 0) {
			CHECKF(0, "%s", err.msg);
			break;
		}
		obs[res.tokens[0]]++;
		acc += res.n_accepted;
	}
	for (int i = 0; i < V; i++) {
		e[i] = q[i];
		want += fmin(p[i], q[i]);
	}
	check_fit("sd, Q4_0 draft, Q8_0 target: tokens ~ q", obs, e, V, acc, want);
	CHECK(want < 0.9999); /* the draft differs from the target: the test is not vacuous */
	policy_free(&pl);

	/* pcg on the same p and q: exact at group level, so the emitted
	 * groups are distributed as Q_c (the group masses of the quantised
	 * target, Eq. 4) and it accepts at sum min(P_c, Q_c). The ASG: windows
	 * of 4 ids with stride 3 over the whole vocabulary (each window shares
	 * an id with the next), equal weights. */
	const int M = (V - 1 + 2) / 3;
	uint64_t *start = malloc(((size_t)M + 1) * sizeof *start);
	uint32_t *mem = malloc((size_t)M * 4 * sizeof *mem);
	int nnz = 0;
	start[0] = 0;
	for (int k = 0; k < M; k++) {
		for (int t = 3 * k; t < 3 * k + 4 && t < V; t++)
			mem[nnz++] = (uint32_t)t;
		start[k + 1] = (uint64_t)nnz;
	}
	asg *a = asg_from_groups((uint32_t)V, (uint32_t)M, start, mem, NULL, 0, 0, 0, &err);
	CHECKF(a != NULL, "asg: %s", err.msg);
	policy_params pcgp = { .kind = POLICY_PCG, .groups = a, .end_token = -1 };
	pl = a ? policy_new(&pcgp, V, &err) : NULL;
	CHECKF(pl != NULL, "%s", err.msg);
	const asg_view *g = a ? asg_get(a) : NULL;
	double *Pc = calloc((size_t)M, sizeof *Pc), *Qc = calloc((size_t)M, sizeof *Qc);
	long *gobs = calloc((size_t)M, sizeof *gobs);
	for (int k = 0; g && k < M; k++)
		for (uint64_t j = g->grp_start[k]; j < g->grp_start[k + 1]; j++) {
			Pc[k] += g->grp_w[j] * p[g->grp_tok[j]];
			Qc[k] += g->grp_w[j] * q[g->grp_tok[j]];
		}
	long bad_group = 0;
	acc = 0;
	pcg_rng_init(&rng, 4343, 1);
	for (long i = 0; i < TRIALS && pl; i++) {
		int x = pcg_sample(p, V, pcg_rng_uniform(&rng));
		if (policy_run(pl, 1, &x, pv1, qv, &rng, &res, &err) < 0) {
			CHECKF(0, "%s", err.msg);
			break;
		}
		if (res.groups[0] >= 0 && res.groups[0] < M)
			gobs[res.groups[0]]++;
		else
			bad_group++;
		acc += res.n_accepted;
	}
	CHECKF(bad_group == 0, "pcg: %ld rounds emitted no group of the ASG", bad_group);
	want = 0;
	for (int k = 0; k < M; k++)
		want += fmin(Pc[k], Qc[k]);
	check_fit("pcg, the same draft and target: groups ~ Q_c", gobs, Qc, M, acc, want);
	free(Pc);
	free(Qc);
	free(gobs);
	free(start);
	free(mem);
	policy_free(&pl);
	asg_close(&a);
	free(obs);
	free(e);
	return check_done("test_quant_sd");
}
