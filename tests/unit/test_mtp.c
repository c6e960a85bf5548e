/* test_mtp.c: the multi-token prediction heads (lib/engine/mtp.c) against PyTorch and
 * transformers on the fixtures tests/ref/make_mtp_fixtures.py recorded
 * (heads in f32, bf16 and f16 on three of the Llama fixture models), the
 * final hidden states that llama_forward_hidden exposes, and heads files
 * that are wrong or hostile: each gives an error naming the problem, never
 * a crash (this test also runs under AddressSanitizer and UBSan).
 *
 * Tolerance: max |ours - ref| <= 2e-5 * max|ref|, the same as
 * test_llama_parity and for the same reason. The fixtures' meta.json
 * records how far the float32 heads' logits are from a float64 computation
 * of the same model and heads: 2.9e-6 to 1.3e-5 at max|logit| 6.8 to 9.7,
 * i.e. at most 1.3e-6 relative (the forward pass's float32 noise plus one
 * more H-term dot product and one more lm_head product). Two float32
 * implementations with different summation orders differ by up to about
 * twice that; 2e-5 leaves a 7x margin on top, and is far below what a
 * wrong head would move (a head applied without the residual, or to the
 * hidden state before the final norm, moves the logits by more than 1).
 * The fixtures are float32 computations, so the products run on the f32
 * kernels ("avx512" pinned: the default for bf16 weights rounds the
 * activations to bf16, see matmul.h; test_llama_parity bounds that path).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "fixture.h"
#include "matmul.h"
#include "model.h"
#include "mtp.h"
#include "safetensors.h"
#include "sampling.h"

#define REL_TOL 2e-5

static const struct {
	const char *name, *model;
	int heads;
} fixtures[] = {
	{ "gqa-f32", "gqa-f32", 3 },
	{ "bf16", "bf16", 4 },
	{ "tied-f16", "tied-f32", 2 },
};

static void check_fixture(int fi)
{
	char mdir[256], hdir[256], path[512];
	pcg_err err = { "" };
	int tokens[64], n;
	size_t nh, nz;

	snprintf(mdir, sizeof mdir, "tests/fixtures/llama/%s", fixtures[fi].model);
	snprintf(hdir, sizeof hdir, "tests/fixtures/mtp/%s", fixtures[fi].name);
	printf("== %s (model %s)\n", hdir, mdir);
	snprintf(path, sizeof path, "%s/tokens.txt", mdir);
	n = read_ids(path, tokens, 64);
	snprintf(path, sizeof path, "%s/hidden.f32", hdir);
	float *href = read_f32(path, &nh);
	snprintf(path, sizeof path, "%s/heads-logits.f32", hdir);
	float *zref = read_f32(path, &nz);
	llama_model *m = llama_open(mdir, NULL, &err);
	CHECKF(m != NULL, "%s", err.msg);
	CHECKF(n > 4 && href && zref, "%s: fixture files", hdir);
	if (m == NULL || n <= 4 || href == NULL || zref == NULL) {
		free(href);
		free(zref);
		llama_close(&m);
		return;
	}
	const int H = llama_get_config(m)->hidden, V = llama_get_config(m)->vocab;
	const int nhd = fixtures[fi].heads;
	CHECK(nh == (size_t)n * H && nz == (size_t)nhd * V);

	/* 1. The final normed hidden states of every position, as HF's
	 * hidden_states[-1]; the logits alongside are those of llama_forward. */
	float *hid = malloc((size_t)n * H * sizeof *hid);
	float *lg = malloc((size_t)n * V * sizeof *lg);
	float *lg2 = malloc((size_t)n * V * sizeof *lg2);
	llama_kv *kv = llama_kv_new(m);
	CHECKF(llama_forward_hidden(m, kv, tokens, n, n, NULL, lg, hid, &err) == 0, "%s",
	       err.msg);
	double tol = REL_TOL * max_abs(href, nh), d = max_diff(hid, href, nh);
	printf("hidden: max |diff| %.3g (tolerance %.3g)\n", d, tol);
	CHECKF(d <= tol, "%s: hidden max diff %g > %g", hdir, d, tol);
	CHECK(llama_kv_truncate(kv, 0, &err) == 0);
	CHECK(llama_forward(m, kv, tokens, n, n, NULL, lg2, &err) == 0);
	CHECKF(memcmp(lg, lg2, (size_t)n * V * sizeof *lg) == 0,
	       "%s: logits with hidden differ from llama_forward", hdir);
	/* lm_head on the exposed hidden states is the forward's own product. */
	CHECK(llama_lm_head(m, hid, n, NULL, lg2, &err) == 0);
	CHECKF(memcmp(lg, lg2, (size_t)n * V * sizeof *lg) == 0, "%s: llama_lm_head", hdir);
	/* A block on a cache: hidden only (no logits), the last 3 positions. */
	float hb[3 * 128];
	CHECK(H <= 128);
	CHECK(llama_kv_truncate(kv, n - 3, &err) == 0);
	CHECK(llama_forward_hidden(m, kv, tokens + n - 3, 3, 3, NULL, NULL, hb, &err) == 0);
	d = max_diff(hb, href + (size_t)(n - 3) * H, (size_t)3 * H);
	CHECKF(d <= tol, "%s: hidden of a block after a prefix: %g", hdir, d);

	/* 2. The heads' logits at the last position. */
	mtp_heads *h = mtp_open(m, hdir, &err);
	CHECKF(h != NULL, "%s", err.msg);
	if (h == NULL)
		goto out;
	CHECK(mtp_n_heads(h) == nhd);
	const float *last = hid + (size_t)(n - 1) * H;
	float *z = malloc((size_t)nhd * V * sizeof *z), *z2 = malloc((size_t)nhd * V * sizeof *z2);
	CHECKF(mtp_logits(h, last, 0, nhd, NULL, z, &err) == 0, "%s", err.msg);
	tol = REL_TOL * max_abs(zref, nz);
	d = max_diff(z, zref, nz);
	printf("heads: max |diff| %.3g (tolerance %.3g, max |logit| %.3g)\n", d, tol,
	       max_abs(zref, nz));
	CHECKF(d <= tol, "%s: heads' logits max diff %g > %g", hdir, d, tol);
	for (int i = 0; i < nhd; i++)
		CHECKF(pcg_argmax(z + (size_t)i * V, V) == pcg_argmax(zref + (size_t)i * V, V),
		       "%s: head %d top-1", hdir, i);

	/* 3. A range of heads equals the same rows of all heads, bit for bit
	 * (the streaming kernel is per row), and so does one head through
	 * mtp_hidden then lm_head. */
	CHECK(mtp_logits(h, last, 1, nhd - 1, NULL, z2, &err) == 0);
	CHECKF(memcmp(z2, z + V, (size_t)(nhd - 1) * V * sizeof *z) == 0, "%s: heads 1..", hdir);
	float u[128];
	CHECK(mtp_hidden(h, nhd - 1, last, u, &err) == 0);
	CHECK(llama_lm_head(m, u, 1, NULL, z2, &err) == 0);
	CHECKF(memcmp(z2, z + (size_t)(nhd - 1) * V, (size_t)V * sizeof *z) == 0,
	       "%s: mtp_hidden + lm_head", hdir);

	/* The same file's bytes through mtp_from_memory: the same heads, bit
	 * for bit; its errors carry the name it was given. */
	size_t fsize;
	snprintf(path, sizeof path, "%s/" MTP_FILE_NAME, hdir);
	unsigned char *bytes = read_bytes(path, &fsize);
	mtp_heads *hm = bytes ? mtp_from_memory(m, bytes, fsize, "image", &err) : NULL;
	CHECKF(hm != NULL && mtp_n_heads(hm) == nhd, "%s from memory: %s", hdir, err.msg);
	if (hm != NULL) {
		CHECK(mtp_logits(hm, last, 0, nhd, NULL, z2, &err) == 0);
		CHECKF(memcmp(z2, z, (size_t)nhd * V * sizeof *z) == 0, "%s: from memory", hdir);
	}
	mtp_close(&hm);
	hm = bytes ? mtp_from_memory(m, bytes, fsize / 2, "image", &err) : NULL;
	CHECKF(hm == NULL && strncmp(err.msg, "image: ", 7) == 0, "%s: half the bytes: %s", hdir,
	       err.msg);
	free(bytes);

	/* 4. Output rows: a range then a single row equal those columns. */
	llama_rows rows = { 2, { V / 2, 3 }, { V, 4 } };
	const int nr = llama_rows_count(m, &rows);
	CHECK(mtp_logits(h, last, 0, nhd, &rows, z2, &err) == 0);
	int ok = 1;
	for (int i = 0; i < nhd; i++) {
		const float *full = z + (size_t)i * V, *sub = z2 + (size_t)i * nr;
		for (int j = 0; j < V - V / 2; j++)
			ok &= sub[j] == full[V / 2 + j];
		ok &= sub[nr - 1] == full[3];
	}
	CHECKF(ok, "%s: rows subset of the heads' logits", hdir);

	/* 5. Bad calls. */
	CHECK(mtp_logits(h, last, 0, nhd + 1, NULL, z2, &err) == -1 &&
	      strstr(err.msg, "out of range") != NULL);
	CHECK(mtp_logits(h, last, -1, 1, NULL, z2, &err) == -1);
	CHECK(mtp_logits(h, last, 0, 0, NULL, z2, &err) == -1);
	CHECK(mtp_hidden(h, nhd, last, u, &err) == -1);
	llama_rows bad = { 1, { 0 }, { V + 1 } };
	CHECK(mtp_logits(h, last, 0, 1, &bad, z2, &err) == -1 &&
	      strstr(err.msg, "vocabulary") != NULL);
	free(z);
	free(z2);
	mtp_close(&h);
	CHECK(h == NULL);
out:
	free(hid);
	free(lg);
	free(lg2);
	free(href);
	free(zref);
	llama_kv_free(&kv);
	llama_close(&m);
}

/* ------------------------------------------------------ wrong or hostile */

static char tmp[512];

/* A safetensors file written byte by byte: header JSON as given, then
 * data_len bytes of data (a ramp, so nothing is all zeros). */
static void raw_file(const char *path, const char *header, size_t data_len)
{
	FILE *f = fopen(path, "wb");
	uint64_t len = strlen(header);
	unsigned char b[8];

	if (f == NULL)
		return;
	for (int i = 0; i < 8; i++)
		b[i] = (unsigned char)(len >> (8 * i));
	fwrite(b, 1, 8, f);
	fwrite(header, 1, len, f);
	for (size_t i = 0; i < data_len; i++)
		fputc((int)(i * 7 & 0x3f), f);
	fclose(f);
}

/* Expects mtp_open to fail with a message containing want. */
static void expect_fail(const llama_model *m, const char *path, const char *want,
			const char *what)
{
	pcg_err err = { "" };
	mtp_heads *h = mtp_open(m, path, &err);

	CHECKF(h == NULL, "%s: opened", what);
	CHECKF(strstr(err.msg, want) != NULL, "%s: message '%s' lacks '%s'", what, err.msg, want);
	printf("  %-24s %s\n", what, err.msg);
	mtp_close(&h);
}

/* Writes heads with st_write: n_tensors given as names and shapes. */
static int write_heads(const char *path, const char *meta, const char **names,
		       const int64_t (*shapes)[2], const int *ndims, const pcg_dtype *dt, int n)
{
	static float data[64 * 64 * 4];
	st_out t[8];
	pcg_err err;

	for (size_t i = 0; i < sizeof data / sizeof data[0]; i++)
		data[i] = 0.01f * (float)(i % 17);
	for (int i = 0; i < n; i++) {
		t[i] = (st_out){ names[i], dt ? dt[i] : PCG_F32, ndims[i],
				 { shapes[i][0], shapes[i][1] }, data };
	}
	int rc = st_write(path, t, n, meta, &err);
	CHECKF(rc == 0, "write %s: %s", path, err.msg);
	return rc;
}

static void check_hostile(void)
{
	pcg_err err = { "" };
	char p[640];
	llama_model *m = llama_open("tests/fixtures/llama/gqa-f32", NULL, &err); /* hidden 64 */

	CHECKF(m != NULL, "%s", err.msg);
	if (m == NULL)
		return;
	printf("== wrong and hostile heads files\n");
	const char *ok_meta = "{\"mtp_heads\": \"2\", \"format\": \"pcg-mtp\"}";
	const char *names2[] = { "mtp.0.weight", "mtp.0.bias", "mtp.1.weight", "mtp.1.bias" };
	const int nd[] = { 2, 1, 2, 1, 1 };
	const int64_t good[][2] = { { 64, 64 }, { 64, 0 }, { 64, 64 }, { 64, 0 } };

	/* A good file, then the same with one thing wrong at a time. */
	snprintf(p, sizeof p, "%s/good.safetensors", tmp);
	write_heads(p, ok_meta, names2, good, nd, NULL, 4);
	mtp_heads *h = mtp_open(m, p, &err);
	CHECKF(h != NULL && mtp_n_heads(h) == 2, "good file: %s", err.msg);
	mtp_close(&h);

	const int64_t bad_w[][2] = { { 64, 64 }, { 64, 0 }, { 64, 63 }, { 64, 0 } };
	snprintf(p, sizeof p, "%s/shape.safetensors", tmp);
	write_heads(p, ok_meta, names2, bad_w, nd, NULL, 4);
	expect_fail(m, p, "'mtp.1.weight': shape [64, 63], the config wants [64, 64]",
		    "weight shape");

	const int64_t bad_b[][2] = { { 64, 64 }, { 65, 0 }, { 64, 64 }, { 64, 0 } };
	snprintf(p, sizeof p, "%s/bias.safetensors", tmp);
	write_heads(p, ok_meta, names2, bad_b, nd, NULL, 4);
	expect_fail(m, p, "'mtp.0.bias': shape [65]", "bias shape");

	const int nd3[] = { 1, 1, 2, 1 };
	const int64_t flat[][2] = { { 4096, 0 }, { 64, 0 }, { 64, 64 }, { 64, 0 } };
	snprintf(p, sizeof p, "%s/flat.safetensors", tmp);
	write_heads(p, ok_meta, names2, flat, nd3, NULL, 4);
	expect_fail(m, p, "'mtp.0.weight': shape [4096]", "weight 1-D");

	/* Heads made for another model width (48) on this one (64). */
	const int64_t w48[][2] = { { 48, 48 }, { 48, 0 }, { 48, 48 }, { 48, 0 } };
	snprintf(p, sizeof p, "%s/w48.safetensors", tmp);
	write_heads(p, ok_meta, names2, w48, nd, NULL, 4);
	expect_fail(m, p, "the config wants [64, 64]", "other model width");

	snprintf(p, sizeof p, "%s/missing.safetensors", tmp);
	write_heads(p, ok_meta, names2, good, nd, NULL, 3);
	expect_fail(m, p, "'mtp.1.bias' missing", "missing bias");

	/* Metadata that lies: more heads announced than stored, fewer, none. */
	snprintf(p, sizeof p, "%s/more.safetensors", tmp);
	write_heads(p, "{\"mtp_heads\": \"3\", \"format\": \"pcg-mtp\"}", names2, good, nd, NULL,
		    4);
	expect_fail(m, p, "'mtp.2.weight' missing from the checkpoint (__metadata__ mtp_heads is 3: 6 tensors wanted, 4 stored)",
		    "mtp_heads 3, 2 stored");
	snprintf(p, sizeof p, "%s/fewer.safetensors", tmp);
	write_heads(p, "{\"mtp_heads\": \"1\", \"format\": \"pcg-mtp\"}", names2, good, nd, NULL,
		    4);
	expect_fail(m, p, "tensor 'mtp.1.", "mtp_heads 1, 2 stored");
	const char *bad_n[] = { "0", "-1", "17", "2x", "", " 2", "99999999999999999999" };
	for (size_t i = 0; i < sizeof bad_n / sizeof bad_n[0]; i++) {
		char meta[128], what[64];
		snprintf(meta, sizeof meta, "{\"mtp_heads\": \"%s\", \"format\": \"pcg-mtp\"}",
			 bad_n[i]);
		snprintf(p, sizeof p, "%s/n%zu.safetensors", tmp, i);
		write_heads(p, meta, names2, good, nd, NULL, 4);
		snprintf(what, sizeof what, "mtp_heads \"%s\"", bad_n[i]);
		expect_fail(m, p, "mtp_heads", what);
	}
	snprintf(p, sizeof p, "%s/nometa.safetensors", tmp);
	write_heads(p, NULL, names2, good, nd, NULL, 4);
	expect_fail(m, p, "format is missing", "no metadata");
	snprintf(p, sizeof p, "%s/nocount.safetensors", tmp);
	write_heads(p, "{\"format\": \"pcg-mtp\"}", names2, good, nd, NULL, 4);
	expect_fail(m, p, "mtp_heads '(missing)'", "no mtp_heads");
	snprintf(p, sizeof p, "%s/format.safetensors", tmp);
	write_heads(p, "{\"mtp_heads\": \"2\", \"format\": \"medusa\"}", names2, good, nd, NULL,
		    4);
	expect_fail(m, p, "format is \"medusa\"", "wrong format");

	/* An extra tensor, and names spelled otherwise. */
	const char *extra[] = { "mtp.0.weight", "mtp.0.bias", "mtp.1.weight", "mtp.1.bias",
				"lm_head.weight" };
	const int64_t gx[][2] = { { 64, 64 }, { 64, 0 }, { 64, 64 }, { 64, 0 }, { 4, 0 } };
	snprintf(p, sizeof p, "%s/extra.safetensors", tmp);
	write_heads(p, ok_meta, extra, gx, nd, NULL, 5);
	expect_fail(m, p, "'lm_head.weight' not expected", "extra tensor");
	const char *zero[] = { "mtp.00.weight", "mtp.0.bias", "mtp.1.weight", "mtp.1.bias" };
	snprintf(p, sizeof p, "%s/zero.safetensors", tmp);
	write_heads(p, ok_meta, zero, good, nd, NULL, 4);
	expect_fail(m, p, "'mtp.00.weight' not expected", "leading zero");

	/* dtypes: f16 and bf16 are fine (mixed too), others are refused. */
	const pcg_dtype mixed[] = { PCG_F16, PCG_BF16, PCG_BF16, PCG_F32 };
	snprintf(p, sizeof p, "%s/mixed.safetensors", tmp);
	write_heads(p, ok_meta, names2, good, nd, mixed, 4);
	h = mtp_open(m, p, &err);
	CHECKF(h != NULL, "mixed dtypes: %s", err.msg);
	mtp_close(&h);
	snprintf(p, sizeof p, "%s/i32.safetensors", tmp);
	raw_file(p,
		 "{\"__metadata__\": {\"mtp_heads\": \"1\", \"format\": \"pcg-mtp\"},"
		 " \"mtp.0.weight\": {\"dtype\": \"I32\", \"shape\": [64, 64], \"data_offsets\": [0, 16384]},"
		 " \"mtp.0.bias\": {\"dtype\": \"F32\", \"shape\": [64], \"data_offsets\": [16384, 16640]}}",
		 16640);
	expect_fail(m, p, "'mtp.0.weight': dtype I32 not supported", "dtype I32");

	/* Files broken below the heads' level: safetensors' own checks. */
	snprintf(p, sizeof p, "%s/trunc.safetensors", tmp);
	raw_file(p,
		 "{\"__metadata__\": {\"mtp_heads\": \"1\", \"format\": \"pcg-mtp\"},"
		 " \"mtp.0.weight\": {\"dtype\": \"F32\", \"shape\": [64, 64], \"data_offsets\": [0, 16384]},"
		 " \"mtp.0.bias\": {\"dtype\": \"F32\", \"shape\": [64], \"data_offsets\": [16384, 16640]}}",
		 16000);
	expect_fail(m, p, "beyond data size", "truncated data");
	snprintf(p, sizeof p, "%s/metaint.safetensors", tmp);
	raw_file(p, "{\"__metadata__\": {\"mtp_heads\": 2, \"format\": \"pcg-mtp\"}}", 0);
	expect_fail(m, p, "is not a string", "mtp_heads not a string");
	snprintf(p, sizeof p, "%s/empty.safetensors", tmp);
	raw_file(p, "", 0);
	expect_fail(m, p, "empty.safetensors", "empty file");
	snprintf(p, sizeof p, "%s/garbage.safetensors", tmp);
	raw_file(p, "{\"__metadata__\": {\"mtp_heads\": \"1\"", 10);
	expect_fail(m, p, "not valid JSON", "bad JSON");
	snprintf(p, sizeof p, "%s/no-such-file.safetensors", tmp);
	expect_fail(m, p, "no-such-file", "missing file");
	expect_fail(m, "tests/fixtures/llama/gqa-f32", "mtp.safetensors", "dir without heads");

	/* mtp_write round trip in each dtype; the file opens as n heads. */
	static float W[2 * 64 * 64], b[2 * 64];
	for (int i = 0; i < 2 * 64 * 64; i++)
		W[i] = 0.001f * (float)(i % 101);
	for (int i = 0; i < 2 * 64; i++)
		b[i] = 0.01f * (float)i;
	const pcg_dtype dts[] = { PCG_F32, PCG_F16, PCG_BF16 };
	for (int i = 0; i < 3; i++) {
		snprintf(p, sizeof p, "%s/written%d.safetensors", tmp, i);
		CHECKF(mtp_write(p, 2, 64, W, b, dts[i], &err) == 0, "%s", err.msg);
		h = mtp_open(m, p, &err);
		CHECKF(h != NULL && mtp_n_heads(h) == 2, "written %s: %s", pcg_dtype_name(dts[i]),
		       err.msg);
		mtp_close(&h);
	}
	CHECK(mtp_write(p, 0, 64, W, b, PCG_F32, &err) == -1);
	CHECK(mtp_write(p, MTP_MAX_HEADS + 1, 64, W, b, PCG_F32, &err) == -1);
	llama_close(&m);
}

int main(void)
{
	if (access("tests/fixtures/mtp", R_OK) != 0)
		SKIP("no tests/fixtures/mtp (run from the repository root)");
	snprintf(tmp, sizeof tmp, "%s", check_tmpdir());
	pcg_set_threads(2);
	if (pcg_matmul_set_isa("avx512") < 0) /* no AVX-512: the default is f32 */
		printf("kernels %s\n", pcg_matmul_isa());
	for (size_t i = 0; i < sizeof fixtures / sizeof fixtures[0]; i++)
		check_fixture((int)i);
	check_hostile();
	return check_done("test_mtp");
}
