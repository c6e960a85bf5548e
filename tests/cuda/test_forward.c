/* test_forward.c: the CUDA backend against the CPU backend, the oracle.
 *   1. every operation of lib/engine/backend.h on random inputs of several shapes
 *      (and every weight dtype for the products, on both product paths:
 *      gemv up to PCG_MATMUL_SMALL rows, cublasGemmEx above);
 *   2. whole forward passes of the fixture models (tests/fixtures/llama:
 *      f32, bf16, GQA, tied, explicit head_dim) against the CPU and against
 *      transformers' logits, prefill, decode steps, a verification block,
 *      truncate and re-run, the hidden state, the probabilities the servers
 *      send (llama_forward_probs) and lm_head on their own;
 *   3. the policies on GPU outputs: the demo voice's draft and target on the
 *      device give p and q; sd must emit tokens distributed as q and pcg
 *      groups distributed as Q_c (chi-square, fixed seeds, significance
 *      0.001 / 4, Bonferroni over the four tests).
 * Thresholds: tests/cuda/gpu.h and docs/BENCHMARKS.md. Skips without a
 * device (make test-gpu: fails instead).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"
#include "../unit/chi2.h"
#include "../unit/fixture.h"
#include "asg.h"
#include "backend.h"
#include "device.h"
#include "dtype.h"
#include "llasa.h"
#include "matmul.h"
#include "model.h"
#include "policy.h"
#include "rng.h"
#include "sampling.h"
#include "tokenizer.h"

#define ALPHA (0.001 / 4)
#define TRIALS 200000

static pcg_backend *cpu, *gpu;
static uint64_t seed = 12345;

static float frand(void)
{
	seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
	return (float)((seed >> 40) / 16777216.0) * 2.0f - 1.0f;
}

static float *rnd(size_t n, float scale)
{
	float *v = malloc(n * sizeof *v);
	for (size_t i = 0; i < n; i++)
		v[i] = frand() * scale;
	return v;
}

/* A device copy of n floats of host memory. */
static float *up(const float *h, size_t n)
{
	pcg_err err = { "" };
	void *d = NULL;
	if (pcg_backend_alloc(gpu, &d, n * sizeof *h, "test", &err) < 0 ||
	    pcg_backend_upload(gpu, d, h, n * sizeof *h, &err) < 0) {
		fprintf(stderr, "%s\n", err.msg);
		exit(1);
	}
	return d;
}

static float *down(const float *d, size_t n)
{
	pcg_err err = { "" };
	float *h = malloc(n * sizeof *h);
	if (pcg_backend_download(gpu, h, d, n * sizeof *h, &err) < 0) {
		fprintf(stderr, "%s\n", err.msg);
		exit(1);
	}
	return h;
}

static void report(const char *what, double e, double tol)
{
	printf("%-48s normalised error %.2e (limit %.0e)\n", what, e, tol);
	CHECKF(e <= tol, "%s: %.3e > %.0e", what, e, tol);
}

/* ------------------------------------------------------------ 1. the ops */

/* A weight matrix of dtype t in host memory (values of f32 data exactly
 * representable in t, so both backends multiply the same numbers). */
static void *make_weights(pcg_dtype t, int rows, int cols, pcg_mat *w)
{
	size_t n = (size_t)rows * cols;
	void *data = malloc(n * 4);
	for (size_t i = 0; i < n; i++) {
		float f = frand();
		if (t == PCG_F32) {
			((float *)data)[i] = f;
		} else if (t == PCG_BF16) {
			uint32_t u;
			memcpy(&u, &f, 4);
			((uint16_t *)data)[i] = (uint16_t)(u >> 16);
		} else {
			pcg_f32_to_f16_n((uint16_t *)data + i, &f, 1);
		}
	}
	*w = (pcg_mat){ .data = data, .dtype = t, .rows = rows, .cols = cols };
	return data;
}

static void test_matmul(pcg_dtype t, int B, int K, int rows, int r0, int nr)
{
	pcg_err err = { "" };
	pcg_mat wh, wd;
	void *owned = NULL;
	void *data = make_weights(t, rows, K, &wh);
	const int ldy = nr + 3; /* a strided output, as the lm_head's row ranges write */
	float *x = rnd((size_t)B * K, 1.0f);
	float *y = calloc((size_t)B * ldy, sizeof *y);
	float *yz = calloc((size_t)B * ldy, sizeof *yz);
	char what[128];

	CHECK(pcg_backend_matmul(cpu, y, ldy, x, B, &wh, r0, nr, &err) == 0);
	CHECKF(pcg_backend_upload_mat(gpu, &wd, &wh, &owned, "w", &err) == 0, "%s", err.msg);
	float *dx = up(x, (size_t)B * K), *dy = up(yz, (size_t)B * ldy);
	CHECKF(pcg_backend_matmul(gpu, dy, ldy, dx, B, &wd, r0, nr, &err) == 0, "%s", err.msg);
	float *g = down(dy, (size_t)B * ldy);
	/* the product path decides the limit: gemv keeps x in f32 */
	double tol = B <= PCG_MATMUL_SMALL ? GPU_TOL_OP_F32
		     : t == PCG_F32 ? GPU_TOL_OP_F32 : t == PCG_F16 ? GPU_TOL_OP_F16 : GPU_TOL_OP_BF16;
	snprintf(what, sizeof what, "matmul %s B=%d K=%d rows [%d, %d)", pcg_dtype_name(t), B, K,
		 r0, r0 + nr);
	report(what, gpu_norm_err(g, y, (size_t)B * ldy), tol);
	pcg_backend_free(gpu, owned);
	pcg_backend_free(gpu, dx);
	pcg_backend_free(gpu, dy);
	free(data);
	free(x);
	free(y);
	free(yz);
	free(g);
}

static void test_elementwise(void)
{
	pcg_err err = { "" };
	char what[128];

	/* embed, every dtype: an exact gather and widening */
	for (int t = PCG_F32; t <= PCG_BF16; t++) {
		pcg_mat eh, ed;
		void *owned;
		void *data = make_weights((pcg_dtype)t, 50, 96, &eh);
		int toks[5] = { 0, 49, 7, 7, 23 };
		float *xc = malloc(5 * 96 * sizeof *xc);
		CHECK(pcg_backend_embed(cpu, xc, &eh, toks, 5, &err) == 0);
		CHECK(pcg_backend_upload_mat(gpu, &ed, &eh, &owned, "e", &err) == 0);
		float *dx = up(xc, 5 * 96);
		CHECKF(pcg_backend_embed(gpu, dx, &ed, toks, 5, &err) == 0, "%s", err.msg);
		float *g = down(dx, 5 * 96);
		snprintf(what, sizeof what, "embed %s", pcg_dtype_name((pcg_dtype)t));
		report(what, gpu_norm_err(g, xc, 5 * 96), 0.0);
		pcg_backend_free(gpu, owned);
		pcg_backend_free(gpu, dx);
		free(data);
		free(xc);
		free(g);
	}
	/* rmsnorm over rows of several widths */
	int Hs[] = { 64, 1000, 2048 };
	for (int i = 0; i < 3; i++) {
		const int T = 5, H = Hs[i];
		float *x = rnd((size_t)T * H, 3.0f), *w = rnd((size_t)H, 1.0f);
		float *o = malloc((size_t)T * H * sizeof *o);
		CHECK(pcg_backend_rmsnorm(cpu, o, x, w, T, H, 1e-5f, &err) == 0);
		float *dx = up(x, (size_t)T * H), *dw = up(w, H), *dout = up(x, (size_t)T * H);
		CHECKF(pcg_backend_rmsnorm(gpu, dout, dx, dw, T, H, 1e-5f, &err) == 0, "%s",
		       err.msg);
		float *g = down(dout, (size_t)T * H);
		snprintf(what, sizeof what, "rmsnorm H=%d", H);
		report(what, gpu_norm_err(g, o, (size_t)T * H), GPU_TOL_ELEMENTWISE);
		pcg_backend_free(gpu, dx);
		pcg_backend_free(gpu, dw);
		pcg_backend_free(gpu, dout);
		free(x);
		free(w);
		free(o);
		free(g);
	}
	/* rope at far positions (angles of thousands of radians) */
	{
		const int T = 4, nh = 6, hd = 64, pos0 = 3000;
		float inv[32];
		for (int i = 0; i < hd / 2; i++)
			inv[i] = 1.0f / powf(500000.0f, (float)(2 * i) / hd);
		float *x = rnd((size_t)T * nh * hd, 1.0f);
		float *dx = up(x, (size_t)T * nh * hd), *di = up(inv, hd / 2);
		CHECK(pcg_backend_rope(cpu, x, T, nh, hd, pos0, inv, &err) == 0);
		CHECKF(pcg_backend_rope(gpu, dx, T, nh, hd, pos0, di, &err) == 0, "%s", err.msg);
		float *g = down(dx, (size_t)T * nh * hd);
		/* cosf/sinf of large angles: a few ulp of the angle's magnitude */
		report("rope pos 3000..3003", gpu_norm_err(g, x, (size_t)T * nh * hd), 1e-4);
		pcg_backend_free(gpu, dx);
		pcg_backend_free(gpu, di);
		free(x);
		free(g);
	}
	/* add and swiglu */
	{
		const size_t n = 100003;
		float *a = rnd(n, 4.0f), *b = rnd(n, 4.0f);
		float *da = up(a, n), *db = up(b, n), *da2 = up(a, n);
		CHECKF(pcg_backend_add(gpu, da, db, n, &err) == 0, "%s", err.msg);
		CHECKF(pcg_backend_swiglu(gpu, da2, db, n, &err) == 0, "%s", err.msg);
		float *g = down(da, n), *g2 = down(da2, n);
		float *a2 = malloc(n * sizeof *a2);
		memcpy(a2, a, n * sizeof *a);
		CHECK(pcg_backend_add(cpu, a, b, n, &err) == 0);
		CHECK(pcg_backend_swiglu(cpu, a2, b, n, &err) == 0);
		report("add", gpu_norm_err(g, a, n), 0.0);
		report("swiglu", gpu_norm_err(g2, a2, n), GPU_TOL_ELEMENTWISE);
		pcg_backend_free(gpu, da);
		pcg_backend_free(gpu, db);
		pcg_backend_free(gpu, da2);
		free(a);
		free(a2);
		free(b);
		free(g);
		free(g2);
	}
}

static void test_attention(int T, int pos0, int nh, int nkv, int hd)
{
	pcg_err err = { "" };
	const int ctx = pos0 + T, kvd = nkv * hd;
	float *q = rnd((size_t)T * nh * hd, 2.0f);
	float *k = rnd((size_t)ctx * kvd, 2.0f), *v = rnd((size_t)ctx * kvd, 1.0f);
	float *o = malloc((size_t)T * nh * hd * sizeof *o);
	char what[128];

	CHECK(pcg_backend_attention(cpu, o, q, k, v, T, pos0, nh, nkv, hd, &err) == 0);
	float *dq = up(q, (size_t)T * nh * hd), *dk = up(k, (size_t)ctx * kvd);
	float *dv = up(v, (size_t)ctx * kvd), *dout = up(q, (size_t)T * nh * hd);
	CHECKF(pcg_backend_attention(gpu, dout, dq, dk, dv, T, pos0, nh, nkv, hd, &err) == 0, "%s",
	       err.msg);
	float *g = down(dout, (size_t)T * nh * hd);
	snprintf(what, sizeof what, "attention T=%d pos0=%d heads %d/%d hd=%d", T, pos0, nh, nkv,
		 hd);
	report(what, gpu_norm_err(g, o, (size_t)T * nh * hd), GPU_TOL_ELEMENTWISE);
	pcg_backend_free(gpu, dq);
	pcg_backend_free(gpu, dk);
	pcg_backend_free(gpu, dv);
	pcg_backend_free(gpu, dout);
	free(q);
	free(k);
	free(v);
	free(o);
	free(g);
}

static void test_ops(void)
{
	const int Bs[] = { 1, 4, 8, 9, 40 };
	for (int t = PCG_F32; t <= PCG_BF16; t++)
		for (int i = 0; i < 5; i++) {
			test_matmul((pcg_dtype)t, Bs[i], 2048, 300, 0, 300);
			test_matmul((pcg_dtype)t, Bs[i], 200, 77, 5, 60); /* K % 8 != 0: scalar gemv */
		}
	test_elementwise();
	test_attention(1, 0, 4, 4, 64);
	test_attention(4, 37, 8, 2, 64);
	test_attention(13, 300, 8, 2, 128);
	test_attention(3, 5, 4, 1, 16); /* head_dim below a warp */
	test_attention(2, 1000, 32, 8, 256);
	/* decode and verification blocks split the positions into chunks
	 * (flash-decoding): two chunks, the most chunks, a last chunk that the
	 * block's first query does not reach, chunks longer than ATT_CHUNK */
	test_attention(8, 63, 4, 2, 64);
	test_attention(1, 4095, 32, 8, 64);
	test_attention(8, 4089, 4, 2, 64);
	test_attention(3, 9000, 8, 2, 128);
}

/* ------------------------------------------------------- 2. whole passes */

/* The limit of a pass of n positions of a model with weights of dtype dt:
 * gemv passes (n <= 8) and f32 models keep f32 activations (a few roundings
 * per layer compound: 10x the op limit); a cuBLAS pass of a bf16 or f16
 * model rounds the activations of every product (4x the product limit). */
static double pass_tol(pcg_dtype dt, int n)
{
	if (n <= PCG_MATMUL_SMALL || dt == PCG_F32)
		return 1e-4;
	return 4 * (dt == PCG_BF16 ? GPU_TOL_OP_BF16 : GPU_TOL_OP_F16);
}

static void check_pass(const char *dir, pcg_dtype dt)
{
	char path[1024], what[1200];
	pcg_err err = { "" };
	int tokens[64], greedy[64];
	size_t nref;

	snprintf(path, sizeof path, "%s/tokens.txt", dir);
	int n = read_ids(path, tokens, 64);
	snprintf(path, sizeof path, "%s/greedy.txt", dir);
	int ng = read_ids(path, greedy, 64);
	snprintf(path, sizeof path, "%s/logits.f32", dir);
	float *ref = read_f32(path, &nref);
	if (n <= 4 || ng < 1 || ref == NULL) {
		CHECKF(0, "%s: fixture files", dir);
		return;
	}
	llama_open_opts oc = { .device = "cpu" }, og = { .device = "cuda" };
	llama_model *mc = llama_open(dir, &oc, &err);
	CHECKF(mc != NULL, "%s", err.msg);
	llama_model *mg = llama_open(dir, &og, &err);
	CHECKF(mg != NULL, "%s", err.msg);
	if (!mc || !mg)
		return;
	const int V = llama_get_config(mc)->vocab, H = llama_get_config(mc)->hidden;
	float *lc = malloc((size_t)n * V * sizeof *lc), *lgp = malloc((size_t)n * V * sizeof *lgp);
	llama_kv *kc = llama_kv_new(mc), *kg = llama_kv_new(mg);

	/* prefill: all positions' logits (cuBLAS when n > 8) */
	const double prefill_tol = pass_tol(dt, n);
	CHECK(llama_forward(mc, kc, tokens, n, n, NULL, lc, &err) == 0);
	CHECKF(llama_forward(mg, kg, tokens, n, n, NULL, lgp, &err) == 0, "%s", err.msg);
	snprintf(what, sizeof what, "%s: prefill of %d vs CPU", dir, n);
	report(what, gpu_norm_err(lgp, lc, (size_t)n * V), prefill_tol);
	snprintf(what, sizeof what, "%s: prefill of %d vs transformers", dir, n);
	report(what, gpu_norm_err(lgp, ref, (size_t)n * V), prefill_tol + 2e-5);

	/* greedy decode one token at a time (gemv): transformers' tokens */
	int x = pcg_argmax(lgp + (size_t)(n - 1) * V, V), same = 0;
	/* The steps attend to the prefill's keys and values. With f16 or bf16
	 * weights cuBLAS rounded the prefill's activations (pass_tol(dt, n)), an
	 * error every later step would inherit: fill the GPU's cache again in
	 * blocks of at most PCG_MATMUL_SMALL (gemv, f32 activations, as the CPU)
	 * so that the steps are held to the gemv limit. */
	if (dt != PCG_F32) {
		CHECK(llama_kv_truncate(kg, 0, &err) == 0);
		for (int i = 0; i < n; i += PCG_MATMUL_SMALL) {
			const int b = n - i < PCG_MATMUL_SMALL ? n - i : PCG_MATMUL_SMALL;
			CHECKF(llama_forward(mg, kg, tokens + i, b, 1, NULL, lgp, &err) == 0, "%s",
			       err.msg);
		}
	}
	double worst = 0.0;
	for (int i = 0; i < ng; i++) {
		same += x == greedy[i];
		CHECK(llama_forward(mc, kc, &x, 1, 1, NULL, lc, &err) == 0);
		CHECKF(llama_forward(mg, kg, &x, 1, 1, NULL, lgp, &err) == 0, "%s", err.msg);
		double e = gpu_norm_err(lgp, lc, (size_t)V);
		worst = e > worst ? e : worst;
		x = pcg_argmax(lgp, V);
	}
	snprintf(what, sizeof what, "%s: %d decode steps vs CPU (worst)", dir, ng);
	report(what, worst, pass_tol(dt, 1));
	CHECKF(same == ng, "%s: greedy tokens: %d of %d as transformers", dir, same, ng);

	/* truncate, then a verification block of 4 with hidden states */
	const int keep = n + 2, B = 4;
	float *hc = malloc((size_t)B * H * sizeof *hc), *hg = malloc((size_t)B * H * sizeof *hg);
	CHECK(llama_kv_truncate(kc, keep, &err) == 0 && llama_kv_truncate(kg, keep, &err) == 0);
	llama_rows rows = { 2, { 3, V / 2 }, { 17, V } }; /* two ranges, as LLaSA's speech + end */
	const int cnt = llama_rows_count(mc, &rows);
	CHECK(llama_forward_hidden(mc, kc, greedy, B, B, &rows, lc, hc, &err) == 0);
	CHECKF(llama_forward_hidden(mg, kg, greedy, B, B, &rows, lgp, hg, &err) == 0, "%s",
	       err.msg);
	snprintf(what, sizeof what, "%s: block of 4 after truncate, row ranges", dir);
	report(what, gpu_norm_err(lgp, lc, (size_t)B * cnt), pass_tol(dt, B));
	snprintf(what, sizeof what, "%s: final hidden states", dir);
	report(what, gpu_norm_err(hg, hc, (size_t)B * H), pass_tol(dt, B));
	CHECK(llama_kv_len(kg) == keep + B);
	/* probabilities computed on the device (the samplers of
	 * lib/cuda/sampling.cu after the pass): what the servers send */
	{
		pcg_sampling samp = { 0.8f, 50, 0.95f };
		int tok = greedy[B];
		CHECK(llama_forward_probs(mc, kc, &tok, 1, 1, &rows, &samp, lc, NULL, &err) == 0);
		CHECKF(llama_forward_probs(mg, kg, &tok, 1, 1, &rows, &samp, lgp, NULL, &err) == 0,
		       "%s", err.msg);
		int same_zeros = 1;
		for (int i = 0; i < cnt; i++)
			same_zeros &= (lc[i] == 0.0f) == (lgp[i] == 0.0f);
		CHECKF(same_zeros, "%s: the kept tokens differ", dir);
		snprintf(what, sizeof what, "%s: probabilities after a step", dir);
		report(what, gpu_norm_err(lgp, lc, (size_t)cnt), pass_tol(dt, 1));
		CHECK(llama_kv_truncate(kc, keep + B, &err) == 0 &&
		      llama_kv_truncate(kg, keep + B, &err) == 0);
	}
	/* lm_head alone on the CPU's hidden states */
	CHECKF(llama_lm_head(mg, hc, B, &rows, lgp, &err) == 0, "%s", err.msg);
	CHECK(llama_lm_head(mc, hc, B, &rows, lc, &err) == 0);
	snprintf(what, sizeof what, "%s: lm_head", dir);
	report(what, gpu_norm_err(lgp, lc, (size_t)B * cnt), GPU_TOL_OP_F32);

	free(hc);
	free(hg);
	free(lc);
	free(lgp);
	free(ref);
	llama_kv_free(&kc);
	llama_kv_free(&kg);
	llama_close(&mc);
	llama_close(&mg);
}

/* -------------------------------------------------- 3. policies on the GPU */

static void policy_on_gpu(void)
{
	const char *root = getenv("PCG_ROOT");
	char dir[4096], path[4200];
	pcg_err err = { "" };
	llama_open_opts og = { .device = "cuda" };

	snprintf(dir, sizeof dir, "%s/models/demo", root ? root : ".");
	llama_model *t = llama_open(dir, &og, &err);
	CHECKF(t != NULL, "%s", err.msg);
	snprintf(path, sizeof path, "%s/draft", dir);
	llama_model *d = llama_open(path, &og, &err);
	CHECKF(d != NULL, "%s", err.msg);
	snprintf(path, sizeof path, "%s/tokenizer.json", dir);
	tokenizer *tok = tok_load(path, &err);
	snprintf(path, sizeof path, "%s/asg", dir);
	asg *a = asg_open(path, &err);
	llasa_vocab voc;
	if (!t || !d || !tok || !a || llasa_vocab_init(tok, &voc, &err) < 0) {
		CHECKF(0, "demo voice: %s", err.msg);
		return;
	}
	/* a prompt: the speaker token and a few phoneme tokens, then the first
	 * phoneme forced, as the verifier sends it */
	llasa_prompt pr = { .text = "<|spk_0|><|p_h|><|p_@|><|p_l|><|p_oU|>" };
	int *ids = NULL;
	size_t n = 0;
	CHECKF(llasa_prompt_ids(tok, &voc, &pr, &ids, &n, &err) == 0, "%s", err.msg);
	const int S = voc.speech_count;
	llama_rows rows = { 1, { voc.speech_first }, { voc.speech_first + S } };
	pcg_sampling samp = { 0.8f, 50, 1.0f };
	float *lg = malloc((size_t)S * sizeof *lg), *p = malloc((size_t)S * sizeof *p);
	float *q = malloc((size_t)S * sizeof *q);
	llama_kv *kt = llama_kv_new(t), *kd = llama_kv_new(d);
	CHECKF(llama_forward(d, kd, ids, (int)n, 1, &rows, lg, &err) == 0, "%s", err.msg);
	CHECK(pcg_probs(lg, S, &samp, p, &err) == 0);
	CHECKF(llama_forward(t, kt, ids, (int)n, 1, &rows, lg, &err) == 0, "%s", err.msg);
	CHECK(pcg_probs(lg, S, &samp, q, &err) == 0);

	const asg_view *g = asg_get(a);
	CHECK(g->n == (uint32_t)S);
	for (int kind = 0; kind < 2; kind++) {
		policy_params pp = { .kind = kind ? POLICY_PCG : POLICY_SD,
				     .groups = kind ? a : NULL, .end_token = -1 };
		policy *pl = policy_new(&pp, S, &err);
		CHECKF(pl != NULL, "%s", err.msg);
		if (pl == NULL)
			continue;
		const int cats = kind ? (int)g->M : S;
		long *obs = calloc((size_t)cats, sizeof *obs), acc = 0;
		double *e = calloc((size_t)cats, sizeof *e), want = 0.0;
		const float *ppv[1] = { p }, *qqv[2] = { q, NULL };
		policy_result res;
		pcg_rng rng;
		pcg_rng_init(&rng, 77 + kind, 1);
		for (long i = 0; i < TRIALS; i++) {
			int x = pcg_sample(p, S, pcg_rng_uniform(&rng));
			if (policy_run(pl, 1, &x, ppv, qqv, &rng, &res, &err) < 0) {
				CHECKF(0, "%s", err.msg);
				break;
			}
			obs[kind ? res.groups[0] : res.tokens[0]]++;
			acc += res.n_accepted;
		}
		if (kind) { /* Q_c(G_k) = sum w_kt q_t, and sum min(P_c, Q_c) */
			for (uint32_t k = 0; k < g->M; k++) {
				double P = 0.0;
				for (uint64_t j = g->grp_start[k]; j < g->grp_start[k + 1]; j++) {
					e[k] += g->grp_w[j] * q[g->grp_tok[j]];
					P += g->grp_w[j] * p[g->grp_tok[j]];
				}
				want += fmin(P, e[k]);
			}
		} else {
			for (int i = 0; i < S; i++) {
				e[i] = q[i];
				want += fmin(p[i], q[i]);
			}
		}
		double stat;
		int df;
		double pv = chi2_p(obs, e, cats, TRIALS, &stat, &df);
		const char *name = kind ? "pcg: groups ~ Q_c" : "sd: tokens ~ q";
		printf("%s on GPU distributions: chi2(%d) = %.1f, p = %.3g; acceptance %.4f, "
		       "want %.4f\n", name, df, stat, pv, (double)acc / TRIALS, want);
		CHECKF(pv >= ALPHA, "%s: p = %.3g", name, pv);
		double se = sqrt(want * (1 - want) / TRIALS) + 1e-6;
		double z = ((double)acc / TRIALS - want) / se;
		CHECKF(erfc(fabs(z) / sqrt(2.0)) >= ALPHA, "%s: acceptance %.4f, want %.4f", name,
		       (double)acc / TRIALS, want);
		free(obs);
		free(e);
		policy_free(&pl);
	}
	free(ids);
	free(lg);
	free(p);
	free(q);
	llama_kv_free(&kt);
	llama_kv_free(&kd);
	asg_close(&a);
	tok_free(&tok);
	llama_close(&t);
	llama_close(&d);
}

int main(void)
{
	pcg_err err = { "" };

	gpu_require("test_forward");
	/* The oracle keeps f32 activations, as the gemv path does: the CPU's
	 * default for bf16 weights rounds them to bf16 (matmul.h). */
	if (pcg_matmul_set_isa("avx512") < 0)
		printf("cpu kernels %s\n", pcg_matmul_isa());
	pcg_device dc, dg;
	CHECK(pcg_device_parse("cpu", &dc, &err) == 0 && pcg_device_parse("cuda", &dg, &err) == 0);
	cpu = pcg_backend_open(dc, &err);
	gpu = pcg_backend_open(dg, &err);
	CHECKF(cpu != NULL && gpu != NULL, "%s", err.msg);
	if (gpu == NULL)
		return check_done("test_forward");
	test_ops();
	check_pass("tests/fixtures/llama/gqa-f32", PCG_F32);
	check_pass("tests/fixtures/llama/tied-f32", PCG_F32);
	check_pass("tests/fixtures/llama/explicit-headdim", PCG_F32);
	check_pass("tests/fixtures/llama/bf16", PCG_BF16);
	policy_on_gpu();

	/* out of device memory is an error that says so, not a crash */
	void *huge = NULL;
	CHECK(pcg_backend_alloc(gpu, &huge, (size_t)1 << 50, "a petabyte", &err) < 0 &&
	      strstr(err.msg, "out of device memory") != NULL);
	pcg_backend_close(&gpu);
	return check_done("test_forward");
}
