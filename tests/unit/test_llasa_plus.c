/* test_llasa_plus.c: Llasa+ checkpoints (lib/engine/model.h) against Llasa+'s own
 * modules, on the fixture tests/ref/make_llasa_plus_fixtures.py made with
 * their LlamaDecoderLayerLlasa, LlamaRMSNorm and backbone class: the
 * backbone's logits and both heads' logits at every position of a sequence,
 * run in one pass; the same in pieces (a prefill, a verification block
 * rolled back, single steps) and batched, where the heads' KV caches must
 * follow the backbone's; the checkpoint found in both layouts; and
 * checkpoints with a tensor missing, misshapen or extra refused by name.
 * GGUF: the fixture through bin/pcg-quantize (the heads as pcgtts.mtp.<k>.*,
 * man/pcg-gguf.5), the F32 file's heads as the reference's and the
 * safetensors model's; the Q8_0 file's within the bound written at
 * test_gguf; --no-heads the backbone alone; files with a head's tensor
 * missing, misshapen or extra, or pcgtts.mtp.count wrong, refused by name.
 *
 * Tolerance: max |ours - theirs| <= 2e-5 * max|their logit|, the bound of
 * the engine's other parity tests (test_llama_parity.c says why). The
 * fixture's meta.json records their float32 run against float64: 1.0e-5 at
 * max|logit| 6.6 for the backbone, 1.0e-4 at 30 for the heads (two more
 * decoder layers and an unnormalised output), 1.6e-6 and 3.4e-6 relative,
 * so the bound leaves the same margin of 5x over twice that noise.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "fixture.h"
#include "gguf.h"
#include "matmul.h"
#include "model.h"
#include "safetensors.h"

#define REL_TOL 2e-5
#define DIR "tests/fixtures/llasa-plus"
#define NH 2
#define MAXT 64

static int T, V, H;
static int toks[MAXT];
static float *ref_target, *ref_heads; /* [T][V], [T][NH][V] */

/* Logits of the backbone and both heads for tokens [from, from + n) run on
 * kv in one pass, into tl [n][V] and hl [n][NH][V]. */
static int run(llama_model *m, llama_kv *kv, int from, int n, float *tl, float *hl)
{
	pcg_err err = { "" };
	float *hs = malloc((size_t)n * NH * H * sizeof *hs);
	llama_seq s = { kv, toks + from, n, n, tl, NULL, hs };
	int rc = llama_forward_batch(m, &s, 1, NULL, NULL, &err);

	if (rc == 0)
		rc = llama_lm_head(m, hs, n * NH, NULL, hl, &err);
	if (rc < 0)
		fprintf(stderr, "run: %s\n", err.msg);
	free(hs);
	return rc;
}

static void compare(const char *what, const float *tl, const float *hl, int from, int n)
{
	const double tt = REL_TOL * max_abs(ref_target, (size_t)T * V);
	const double th = REL_TOL * max_abs(ref_heads, (size_t)T * NH * V);
	const double dt = max_diff(tl, ref_target + (size_t)from * V, (size_t)n * V);
	const double dh = max_diff(hl, ref_heads + (size_t)from * NH * V, (size_t)n * NH * V);

	printf("%s: backbone max |diff| %.3g (tolerance %.3g), heads %.3g (tolerance %.3g)\n",
	       what, dt, tt, dh, th);
	CHECKF(dt <= tt, "%s: backbone logits differ by %g", what, dt);
	CHECKF(dh <= th, "%s: heads' logits differ by %g", what, dh);
}

static void test_parity(void)
{
	pcg_err err = { "" };
	llama_model *m = llama_open(DIR, NULL, &err);
	float *tl = malloc((size_t)T * V * sizeof *tl), *hl = malloc((size_t)T * NH * V * sizeof *hl);
	float *tl2 = malloc((size_t)T * V * sizeof *tl), *hl2 = malloc((size_t)T * NH * V * sizeof *hl);

	CHECKF(m != NULL, "%s", err.msg);
	if (m == NULL)
		goto out;
	CHECK(llama_n_mtp(m) == NH);
	llama_kv *kv = llama_kv_new(m);
	CHECK(run(m, kv, 0, T, tl, hl) == 0);
	compare("one pass", tl, hl, 0, T);

	/* in pieces: a prefill of 5, a block of 4 rolled back to 7 (as after a
	 * rejected draft), then single steps; each position as in the one pass */
	llama_kv *k2 = llama_kv_new(m);
	CHECK(run(m, k2, 0, 5, tl2, hl2) == 0);
	CHECK(run(m, k2, 5, 4, tl2 + 5 * V, hl2 + (size_t)5 * NH * V) == 0);
	CHECK(llama_kv_truncate(k2, 7, &err) == 0);
	for (int t = 7; t < T; t++)
		CHECK(run(m, k2, t, 1, tl2 + (size_t)t * V, hl2 + (size_t)t * NH * V) == 0);
	compare("pieces with a rollback", tl2, hl2, 0, T);
	CHECKF(max_diff(hl, hl2, (size_t)T * NH * V) <= 1e-5 * max_abs(hl, (size_t)T * NH * V),
	       "pieces: %g from the one pass", max_diff(hl, hl2, (size_t)T * NH * V));

	/* batched: two sequences at different positions in one pass, each as
	 * alone (the heads' rows share products with the other's) */
	llama_kv *a = llama_kv_new(m), *b = llama_kv_new(m);
	float *ha = malloc((size_t)3 * NH * H * sizeof *ha), *hb = malloc((size_t)2 * NH * H * sizeof *hb);
	float *hsa = malloc((size_t)3 * NH * H * sizeof *hsa);
	CHECK(run(m, a, 0, 6, tl2, hl2) == 0);
	CHECK(run(m, b, 0, 3, tl2, hl2) == 0);
	llama_seq s[2] = { { a, toks + 6, 3, 3, NULL, NULL, ha }, { b, toks + 3, 2, 2, NULL, NULL, hb } };
	CHECKF(llama_forward_batch(m, s, 2, NULL, NULL, &err) == 0, "%s", err.msg);
	CHECK(llama_kv_truncate(a, 6, &err) == 0);
	llama_seq one = { a, toks + 6, 3, 3, NULL, NULL, hsa };
	CHECKF(llama_forward_batch(m, &one, 1, NULL, NULL, &err) == 0, "%s", err.msg);
	CHECKF(memcmp(ha, hsa, (size_t)3 * NH * H * sizeof *ha) == 0,
	       "batched heads differ from alone");
	CHECK(llama_lm_head(m, ha, 3 * NH, NULL, hl2, &err) == 0);
	CHECK(llama_lm_head(m, hb, 2 * NH, NULL, hl2 + (size_t)3 * NH * V, &err) == 0);
	CHECK(max_diff(hl2, ref_heads + (size_t)6 * NH * V, (size_t)3 * NH * V) <=
	      REL_TOL * max_abs(ref_heads, (size_t)T * NH * V));
	CHECK(max_diff(hl2 + (size_t)3 * NH * V, ref_heads + (size_t)3 * NH * V,
		       (size_t)2 * NH * V) <= REL_TOL * max_abs(ref_heads, (size_t)T * NH * V));
	free(ha);
	free(hb);
	free(hsa);
	llama_kv_free(&a);
	llama_kv_free(&b);
	llama_kv_free(&kv);
	llama_kv_free(&k2);
	llama_close(&m);

	/* without the heads (no_mtp): the backbone alone, the same logits */
	llama_open_opts o = { .no_mtp = 1 };
	m = llama_open(DIR, &o, &err);
	CHECKF(m != NULL, "%s", err.msg);
	if (m != NULL) {
		CHECK(llama_n_mtp(m) == 0);
		kv = llama_kv_new(m);
		CHECK(llama_forward(m, kv, toks, T, T, NULL, tl2, &err) == 0);
		CHECK(memcmp(tl, tl2, (size_t)T * V * sizeof *tl) == 0);
		llama_kv_free(&kv);
		llama_close(&m);
	}
out:
	free(tl);
	free(hl);
	free(tl2);
	free(hl2);
}

/* dir/config.json and dir/model.safetensors, the checkpoint's tensors with
 * one changed: `drop` left out, `shrink` one row short, `extra` added. */
static void write_variant(const char *dir, const char *drop, const char *shrink,
			  const char *extra)
{
	pcg_err err = { "" };
	char path[512];
	st_ckpt *ck = st_open(DIR "/llasa_plus/model.safetensors", &err);
	const int n = ck ? st_count(ck) : 0;
	st_out *t = calloc((size_t)n + 1, sizeof *t);
	static const float zeros[64];
	int k = 0;

	CHECKF(ck != NULL, "%s", err.msg);
	for (int i = 0; i < n; i++) {
		const st_tensor *s = st_get(ck, i);
		if (drop && !strcmp(s->name, drop))
			continue;
		t[k] = (st_out){ s->name, s->dtype, s->ndim, { 0 }, s->data };
		memcpy(t[k].shape, s->shape, sizeof s->shape);
		if (shrink && !strcmp(s->name, shrink))
			t[k].shape[0]--;
		k++;
	}
	if (extra)
		t[k++] = (st_out){ extra, PCG_F32, 1, { 64 }, zeros };
	mkdir(dir, 0777);
	snprintf(path, sizeof path, "%s/model.safetensors", dir);
	CHECKF(st_write(path, t, k, NULL, &err) == 0, "%s", err.msg);
	snprintf(path, sizeof path, "%s/config.json", dir);
	char cwd[400], target[900];
	CHECK(getcwd(cwd, sizeof cwd) != NULL);
	snprintf(target, sizeof target, "%s/" DIR "/config.json", cwd);
	unlink(path);
	CHECK(symlink(target, path) == 0);
	free(t);
	st_close(&ck);
}

static void expect_error(const char *dir, const char *want)
{
	pcg_err err = { "" };
	llama_model *m = llama_open(dir, NULL, &err);

	CHECKF(m == NULL, "%s opened", dir);
	CHECKF(strstr(err.msg, want) != NULL, "error '%s' lacks '%s'", err.msg, want);
	printf("refused: %s\n", err.msg);
	llama_close(&m);
}

static void test_layouts(void)
{
	pcg_err err = { "" };
	char dir[400];
	const char *tmp = check_tmpdir();

	/* a directory holding config.json and the checkpoint itself */
	snprintf(dir, sizeof dir, "%s/flat", tmp);
	write_variant(dir, NULL, NULL, NULL);
	llama_model *m = llama_open(dir, NULL, &err);
	CHECKF(m != NULL && llama_n_mtp(m) == NH, "flat layout: %s", err.msg);
	llama_close(&m);

	snprintf(dir, sizeof dir, "%s/missing", tmp);
	write_variant(dir, "mtp_2_block.mlp.up_proj.weight", NULL, NULL);
	expect_error(dir, "mtp_2_block.mlp.up_proj.weight");
	snprintf(dir, sizeof dir, "%s/misshapen", tmp);
	write_variant(dir, NULL, "mtp_1_proj.bias", NULL);
	expect_error(dir, "mtp_1_proj.bias");
	snprintf(dir, sizeof dir, "%s/short", tmp);
	write_variant(dir, NULL, "mtp_1_block.self_attn.k_proj.weight", NULL);
	expect_error(dir, "mtp_1_block.self_attn.k_proj.weight");
	snprintf(dir, sizeof dir, "%s/extra", tmp);
	write_variant(dir, NULL, NULL, "mtp_1_gate.weight");
	expect_error(dir, "tensor 'mtp_1_gate.weight' not expected");
	snprintf(dir, sizeof dir, "%s/backbone", tmp);
	write_variant(dir, "llm.model.layers.1.mlp.down_proj.weight", NULL, NULL);
	expect_error(dir, "llm.model.layers.1.mlp.down_proj.weight");
	snprintf(dir, sizeof dir, "%s/layer-beyond", tmp);
	write_variant(dir, NULL, NULL, "llm.model.layers.2.input_layernorm.weight");
	expect_error(dir, "not expected");
	snprintf(dir, sizeof dir, "%s/head-3", tmp);
	write_variant(dir, NULL, NULL, "mtp_3_local_RMSNorm.weight");
	expect_error(dir, "'mtp_3_local_RMSNorm.weight' not expected");
	/* the untied layout: llm.lm_head.weight may be left out of a tied model */
	snprintf(dir, sizeof dir, "%s/no-lm-head", tmp);
	write_variant(dir, "llm.lm_head.weight", NULL, NULL);
	m = llama_open(dir, NULL, &err);
	CHECKF(m != NULL, "tied without llm.lm_head.weight: %s", err.msg);
	llama_close(&m);
}

/* ------------------------------------------------------------- GGUF files */

/* The fixture quantised by pcg-quantize --type type into path (a folder
 * beside it holds config.json, the llasa_plus folder and a tokenizer.json of
 * one token: pcg-quantize writes the tokenizer, the model needs none). */
static int quantize(const char *type, const char *path, const char *flags)
{
	const char *tmp = check_tmpdir();
	char dir[400], cwd[400], src[900], dst[900], cmd[2400];
	FILE *f;

	snprintf(dir, sizeof dir, "%s/quant-src", tmp);
	mkdir(dir, 0777);
	CHECK(getcwd(cwd, sizeof cwd) != NULL);
	snprintf(src, sizeof src, "%s/" DIR "/config.json", cwd);
	snprintf(dst, sizeof dst, "%s/config.json", dir);
	unlink(dst);
	CHECK(symlink(src, dst) == 0);
	snprintf(src, sizeof src, "%s/" DIR "/llasa_plus", cwd);
	snprintf(dst, sizeof dst, "%s/llasa_plus", dir);
	unlink(dst);
	CHECK(symlink(src, dst) == 0);
	snprintf(dst, sizeof dst, "%s/tokenizer.json", dir);
	f = fopen(dst, "w");
	CHECK(f != NULL);
	if (f == NULL)
		return -1;
	fputs("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
	      "\"added_tokens\": []}\n", f);
	fclose(f);
	snprintf(cmd, sizeof cmd, "bin/pcg-quantize --quiet --type %s %s '%s' -o '%s'", type, flags,
		 dir, path);
	int rc = system(cmd);
	CHECKF(rc == 0, "%s: exit status %d (is bin/pcg-quantize built?)", cmd, rc);
	return rc == 0 ? 0 : -1;
}

static llama_model *open_opts(const char *path, int deq)
{
	pcg_err err = { "" };
	llama_open_opts o = { .dequantize = deq };
	llama_model *m = llama_open(path, &o, &err);

	CHECKF(m != NULL, "%s: %s", path, err.msg);
	return m;
}

/* Logits of the backbone and both heads at every position of the fixture's
 * sequence, one pass. */
static int all_logits(llama_model *m, float *tl, float *hl)
{
	llama_kv *kv = llama_kv_new(m);
	int rc = run(m, kv, 0, T, tl, hl);

	llama_kv_free(&kv);
	return rc;
}

/* The tensors of a copy come from the file copied. */
struct copy {
	const gguf_file *g;
};

static int copy_fill(void *ctx, int index, void *dst, size_t nbytes, pcg_err *err)
{
	const gguf_tensor *t = gguf_tensor_at(((struct copy *)ctx)->g, index);

	(void)err;
	memcpy(dst, t->data, nbytes < t->nbytes ? nbytes : t->nbytes);
	return 0;
}

/* A copy of the GGUF file src at dst, with its metadata but the token
 * arrays, pcgtts.mtp.count set to count (< 0: left out); tensor drop left
 * out, tensor shrink one row short (its last row dropped), extra (a copy
 * of pcgtts.mtp.1.proj.bias) added. */
static void write_gguf(const char *src, const char *dst, int count, const char *drop,
		       const char *shrink, const char *extra)
{
	pcg_err err = { "" };
	gguf_file *g = gguf_open(src, &err);
	gguf_writer *w = gguf_writer_new(&err);
	struct copy c = { g };
	int ok = g != NULL && w != NULL;

	CHECKF(ok, "%s", err.msg);
	for (int i = 0; ok && i < gguf_n_kv(g); i++) {
		const char *key = gguf_key(g, i), *s;
		size_t n;
		int64_t v;
		double d;
		if (!strcmp(key, "pcgtts.mtp.count"))
			continue;
		switch (gguf_kv_type(g, i)) {
		case GGUF_UINT32:
			ok = gguf_get_int(g, key, &v, &err) == 0 &&
			     gguf_set_u32(w, key, (uint32_t)v, &err) == 0;
			break;
		case GGUF_FLOAT32:
			ok = gguf_get_float(g, key, &d, &err) == 0 &&
			     gguf_set_f32(w, key, (float)d, &err) == 0;
			break;
		case GGUF_STRING: {
			char buf[256];
			ok = gguf_get_str(g, key, &s, &n, &err) == 0 && n < sizeof buf;
			if (ok) {
				memcpy(buf, s, n);
				buf[n] = '\0';
				ok = gguf_set_str(w, key, buf, &err) == 0;
			}
			break;
		}
		default:
			break;
		}
	}
	if (ok && count >= 0)
		ok = gguf_set_u32(w, "pcgtts.mtp.count", (uint32_t)count, &err) == 0;
	for (int i = 0; ok && i < gguf_n_tensors(g); i++) {
		const gguf_tensor *t = gguf_tensor_at(g, i);
		int64_t ne[GGUF_MAX_DIMS];
		memcpy(ne, t->ne, sizeof ne);
		if (drop && !strcmp(t->name, drop))
			continue;
		if (shrink && !strcmp(t->name, shrink))
			ne[t->ndim - 1]--;
		ok = gguf_add_tensor(w, t->name, t->dtype, t->ndim, ne, copy_fill, &c, i, &err) == 0;
		if (ok && extra && !strcmp(t->name, "pcgtts.mtp.1.proj.bias"))
			ok = gguf_add_tensor(w, extra, t->dtype, t->ndim, ne, copy_fill, &c, i,
					     &err) == 0;
	}
	CHECKF(ok && gguf_writer_finish(w, dst, &err) == 0, "%s: %s", dst, err.msg);
	gguf_writer_free(&w);
	gguf_close(&g);
}

/* pcg-quantize's files of the Llasa+ fixture. F32: the reference's
 * tolerance (REL_TOL), and the safetensors model's logits within 1e-5
 * relative (only the llama3 rope factors' rounding differs, as in
 * test_gguf_model), both heads, every position. */
static void test_gguf(void)
{
	pcg_err err = { "" };
	char f32[400], q8[400], nh[400];
	const char *tmp = check_tmpdir();
	const size_t nt = (size_t)T * V, nhl = (size_t)T * NH * V;
	float *tl = malloc(nt * sizeof *tl), *hl = malloc(nhl * sizeof *hl);
	float *tl2 = malloc(nt * sizeof *tl), *hl2 = malloc(nhl * sizeof *hl);

	snprintf(f32, sizeof f32, "%s/lp-f32.gguf", tmp);
	snprintf(q8, sizeof q8, "%s/lp-q8_0.gguf", tmp);
	snprintf(nh, sizeof nh, "%s/lp-no-heads.gguf", tmp);
	if (quantize("f32", f32, "") < 0 || quantize("q8_0", q8, "") < 0 ||
	    quantize("f32", nh, "--no-heads") < 0)
		goto out;

	llama_model *st = open_opts(DIR, 0), *m = open_opts(f32, 0);
	if (st == NULL || m == NULL) {
		llama_close(&st);
		llama_close(&m);
		goto out;
	}
	CHECKF(llama_n_mtp(m) == NH, "F32 GGUF: %d heads", llama_n_mtp(m));
	CHECK(all_logits(st, tl, hl) == 0 && all_logits(m, tl2, hl2) == 0);
	compare("F32 GGUF", tl2, hl2, 0, T);
	printf("F32 GGUF against the safetensors model: backbone %.3g, heads %.3g\n",
	       max_diff(tl, tl2, nt), max_diff(hl, hl2, nhl));
	CHECKF(max_diff(tl, tl2, nt) <= 1e-5 * max_abs(tl, nt) &&
	       max_diff(hl, hl2, nhl) <= 1e-5 * max_abs(hl, nhl),
	       "F32 GGUF: backbone %g, heads %g from the safetensors model", max_diff(tl, tl2, nt),
	       max_diff(hl, hl2, nhl));
	llama_close(&m);
	llama_close(&st);

	/* --no-heads: the backbone alone (a file llama.cpp loads), the same
	 * logits bit for bit */
	m = open_opts(nh, 0);
	if (m != NULL) {
		llama_kv *kv = llama_kv_new(m);
		CHECK(llama_n_mtp(m) == 0);
		CHECK(llama_forward(m, kv, toks, T, T, NULL, hl, &err) == 0);
		CHECK(memcmp(hl, tl2, nt * sizeof *tl) == 0);
		llama_kv_free(&kv);
		llama_close(&m);
	}

	/* Q8_0: the heads' matrices quantised as the backbone's, their vectors
	 * F32; the int8 kernels against the same file dequantised at load. The
	 * int8 kernels round each block of 32 activations to 1/127 of its
	 * largest, as Q8_0 rounds the weights: the two perturbations are alike,
	 * so the kernels' difference from the dequantised file is bounded by
	 * twice the weights' own difference from the float model (measured:
	 * 0.9x for the backbone, 1.1x for the heads; this random fixture
	 * amplifies both, to 6% and 11% of the largest logit). A head read with
	 * its rows in the wrong order is off by the logits' whole size. */
	gguf_file *g = gguf_open(q8, &err);
	CHECKF(g != NULL, "%s", err.msg);
	for (int k = 1; g != NULL && k <= NH; k++) {
		static const struct { const char *name; pcg_dtype dt; } types[] = {
			{ "proj.weight", PCG_Q8_0 }, { "attn_q.weight", PCG_Q8_0 },
			{ "ffn_down.weight", PCG_Q8_0 }, { "norm.weight", PCG_F32 },
			{ "proj.bias", PCG_F32 }, { "attn_norm.weight", PCG_F32 },
		};
		for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
			char name[64];
			snprintf(name, sizeof name, "pcgtts.mtp.%d.%s", k, types[i].name);
			const gguf_tensor *t = gguf_find_tensor(g, name);
			CHECKF(t != NULL && t->dtype == types[i].dt, "Q8_0 file: %s", name);
		}
	}
	gguf_close(&g);
	llama_model *dq = open_opts(q8, 1);
	m = open_opts(q8, 0);
	if (m != NULL && dq != NULL) {
		CHECK(llama_n_mtp(m) == NH);
		CHECK(all_logits(dq, tl, hl) == 0 && all_logits(m, tl2, hl2) == 0);
		const double dt = max_diff(tl, tl2, nt), dh = max_diff(hl, hl2, nhl);
		const double wt = max_diff(tl, ref_target, nt), wh = max_diff(hl, ref_heads, nhl);
		printf("Q8_0 GGUF against itself dequantised: backbone %.3g, heads %.3g; the "
		       "dequantised file against the float model: backbone %.3g, heads %.3g (of "
		       "max |logit| %.3g, %.3g)\n", dt, dh, wt, wh, max_abs(ref_target, nt),
		       max_abs(ref_heads, nhl));
		CHECKF(dt <= 2 * wt && dh <= 2 * wh, "Q8_0: backbone %g, heads %g", dt, dh);
		CHECKF(wt <= 0.25 * max_abs(ref_target, nt) && wh <= 0.25 * max_abs(ref_heads, nhl),
		       "Q8_0 dequantised: backbone %g, heads %g from the float model", wt, wh);
	}
	llama_close(&m);
	llama_close(&dq);

	/* a file with a head's tensor missing, misshapen or extra, or a count
	 * that disagrees with the tensors, is refused by name */
	static const struct {
		int count;
		const char *drop, *shrink, *extra, *want;
	} bad[] = {
		{ NH, "pcgtts.mtp.2.ffn_up.weight", NULL, NULL,
		  "tensor 'pcgtts.mtp.2.ffn_up.weight' missing" },
		{ NH, "pcgtts.mtp.1.norm.weight", NULL, NULL,
		  "tensor 'pcgtts.mtp.1.norm.weight' missing" },
		{ NH, NULL, "pcgtts.mtp.1.proj.bias", NULL, "tensor 'pcgtts.mtp.1.proj.bias': ne" },
		{ NH, NULL, "pcgtts.mtp.2.attn_k.weight", NULL,
		  "tensor 'pcgtts.mtp.2.attn_k.weight': ne" },
		{ NH, NULL, NULL, "pcgtts.mtp.1.gate.weight",
		  "tensor 'pcgtts.mtp.1.gate.weight' not expected" },
		{ NH, NULL, NULL, "pcgtts.mtp.3.proj.bias",
		  "tensor 'pcgtts.mtp.3.proj.bias' not expected" },
		{ 1, NULL, NULL, NULL, "tensor 'pcgtts.mtp.2.norm.weight' not expected" },
		{ 3, NULL, NULL, NULL, "tensor 'pcgtts.mtp.3.norm.weight' missing" },
		{ 5, NULL, NULL, NULL, "pcgtts.mtp.count = 5" },
		{ -1, NULL, NULL, NULL, "no pcgtts.mtp.count" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char path[400];
		snprintf(path, sizeof path, "%s/bad-%zu.gguf", tmp, i);
		write_gguf(f32, path, bad[i].count, bad[i].drop, bad[i].shrink, bad[i].extra);
		expect_error(path, bad[i].want);
	}
	/* the copy itself opens */
	write_gguf(f32, nh, NH, NULL, NULL, NULL);
	m = open_opts(nh, 0);
	CHECK(m != NULL && llama_n_mtp(m) == NH);
	llama_close(&m);
out:
	free(tl);
	free(hl);
	free(tl2);
	free(hl2);
}

int main(void)
{
	size_t n1, n2;

	if (access(DIR "/config.json", R_OK) != 0)
		SKIP("no fixture %s (tests/ref/make_llasa_plus_fixtures.py makes it)", DIR);
	json_t *meta = load_json(DIR "/meta.json");
	CHECK(meta != NULL);
	if (meta == NULL)
		return check_done("test_llasa_plus");
	V = (int)json_integer_value(json_object_get(meta, "vocab"));
	H = (int)json_integer_value(json_object_get(meta, "hidden"));
	json_decref(meta);
	T = read_ids(DIR "/tokens.txt", toks, MAXT);
	/* the f32 arithmetic of the reference: the avx512-bf16 kernels round
	 * the activations of the checkpoint's bf16 matrices to bf16 (matmul.h) */
	if (pcg_matmul_set_isa("avx512") < 0) /* no AVX-512: the default is f32 */
		printf("kernels %s\n", pcg_matmul_isa());
	ref_target = read_f32(DIR "/target-logits.f32", &n1);
	ref_heads = read_f32(DIR "/heads-logits.f32", &n2);
	CHECK(T > 9 && ref_target && ref_heads && n1 == (size_t)T * V && n2 == (size_t)T * NH * V);
	if (check_failures == 0) {
		test_parity();
		test_layouts();
		test_gguf();
	}
	free(ref_target);
	free(ref_heads);
	return check_done("test_llasa_plus");
}
