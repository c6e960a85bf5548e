/* test_quant_sd.c: speculative sampling stays exact with a quantised target
 * and a quantised draft: the target is the Q8_0 GGUF of the transformers
 * fixture, the draft its Q4_0 GGUF (both written by gguf-py,
 * tests/ref/make_gguf_models.py), both run through the int8 decode kernels
 * at the last position of the fixture prompt, tempered as the pipeline does
 * (temperature 0.8, top-k 50). N rounds of lookahead 1: x ~ p, then sd.
 * The emitted tokens must be distributed as the quantised target's q
 * (chi-square, categories below 5 expected pooled), and the acceptance rate
 * must be sum min(p, q) (z test): the draft costs acceptance, never
 * exactness. Significance 0.001 / 2 per test (Bonferroni), fixed seed.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "chi2.h"
#include "fixture.h"
#include "model.h"
#include "policy.h"
#include "rng.h"
#include "sampling.h"

#define TRIALS 200000
#define ALPHA (0.001 / 2)

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

	policy_params pp = { POLICY_SD, 0, NULL, 0, -1 };
	policy *pl = policy_new(&pp, V, &err);
	CHECKF(pl != NULL, "%s", err.msg);
	long *obs = calloc((size_t)V, sizeof *obs), acc = 0;
	double *e = malloc((size_t)V * sizeof *e), want = 0;
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
	double stat;
	int df;
	const double pvalue = chi2_p(obs, e, V, TRIALS, &stat, &df);
	printf("Q4_0 draft, Q8_0 target: tokens ~ q: chi2(%d) = %.1f, p = %.3g; acceptance %.4f, "
	       "sum min(p, q) = %.4f\n", df, stat, pvalue, (double)acc / TRIALS, want);
	CHECKF(pvalue >= ALPHA, "emitted tokens not distributed as q (p = %.3g)", pvalue);
	const double se = sqrt(want * (1 - want) / TRIALS) + 1e-6;
	const double z = ((double)acc / TRIALS - want) / se;
	CHECKF(erfc(fabs(z) / sqrt(2.0)) >= ALPHA, "acceptance %.4f, want %.4f (z %.2f)",
	       (double)acc / TRIALS, want, z);
	CHECK(want < 0.9999); /* the draft differs from the target: the test is not vacuous */
	free(obs);
	free(e);
	policy_free(&pl);
	return check_done("test_quant_sd");
}
