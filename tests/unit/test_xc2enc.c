/* test_xc2enc.c: the C X-codec2 encoder against the original modules, on the
 * fixture tests/ref/make_xcodec2_enc_fixtures.py recorded (a random tiny
 * encoder of the real architecture, in the real checkpoint's key layout:
 * transformers' SeamlessM4TFeatureExtractor and Wav2Vec2BertModel, the
 * X-Codec-2.0 SemanticEncoder and CodecEncoder, vector-quantize-pytorch
 * 1.17.8's ResidualFSQ), stage by stage, then the codes.
 *
 * Tolerances, normalised as max |C - ref| / max |ref| per stage:
 *  - features 1e-5: the reference computes in float64 and rounds to float32
 *    at the log and in the per-bin normalisation (float32 mean and
 *    variance); so do we, in another summation order: a few float32 ulps of
 *    values up to about 11.
 *  - hidden_states[16] 1e-4: 16 Conformer layers of float32 products
 *    (sgemm against PyTorch's) each a few ulps, through 6 LayerNorms a
 *    layer that renormalise them.
 *  - semantic, acoustic, prior, prequant 1e-4: float32 convolutions of
 *    hundreds of terms; the acoustic encoder's 15 residual units and 16
 *    anti-aliased activations (sin of values up to about 50, where one ulp
 *    of the argument moves sin by 4e-6).
 *  - with the Conformer's matrices in bf16 (codec-encode's default), the
 *    Conformer's output and what follows 4e-2: rounding a weight to bf16
 *    moves it by up to u = 2^-9 relative, a product by about u; 10
 *    products a layer over 16 layers, renormalised by the LayerNorms, add
 *    in quadrature: sqrt(160) u = 2.5e-2, and 4e-2 leaves 1.6 times that
 *    (measured 6.9e-3). The acoustic branch stays f32 (1e-4).
 *  - codes: equal, except a digit whose double-bounded value lies within
 *    the rounding distance of the prequant error of a boundary (the error
 *    bound times the bound's largest slope, 1.5015^2, plus an ulp): such
 *    digits are counted and reported, and may differ.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fixture.h"
#include "xc2enc.h"

#define FX "tests/fixtures/xcodec2-enc/tiny"

static float *fx(const char *name, size_t want)
{
	char p[256];
	size_t n;

	snprintf(p, sizeof p, "%s/%s", FX, name);
	float *v = read_f32(p, &n);
	CHECKF(v != NULL && n == want, "%s: %zu values, want %zu", p, v ? n : 0, want);
	return v;
}

static void stage(const char *what, const float *got, const float *ref, size_t n, double tol)
{
	const double e = norm_err(got, ref, n);
	printf("%-10s normalised error %.3g (limit %.3g)\n", what, e, tol);
	CHECKF(e <= tol, "%s: %.3g > %.3g", what, e, tol);
}

/* The whole encoder in one dtype of the Conformer's matrices, each stage
 * against the reference within tol (tolh: the Conformer's output and what
 * follows it). */
static void run(pcg_dtype dt, double tolh)
{
	pcg_err err = { "" };
	size_t nw;
	float *wav = read_f32(FX "/wav.f32", &nw);

	CHECKF(wav != NULL && nw > 0, "%s/wav.f32 missing", FX);
	if (wav == NULL)
		return;
	xc2e_model *m = xc2e_open_dtype(FX, dt, &err);
	CHECKF(m != NULL, "%s", err.msg);
	if (m == NULL) {
		free(wav);
		return;
	}
	printf("== Conformer matrices in %s\n", pcg_dtype_name(dt));
	const xc2e_info *in = xc2e_get_info(m);
	printf("hidden %d, heads %d, ffn %d, layers %d, ngf %d, codec %d, prior %d\n", in->hidden,
	       in->heads, in->ffn, in->layers, in->ngf, in->codec_dim, in->prior_dim);
	CHECK(in->layers == XC2E_LAYER); /* the fixture has 17: the 17th is not read */
	const int T = xc2e_n_codes(nw), H = in->hidden, C = in->codec_dim, P = in->prior_dim;
	CHECK(T == 66);
	float *feat = malloc((size_t)T * XC2E_FEAT * sizeof *feat);
	float *hid = malloc((size_t)T * H * sizeof *hid), *sem = malloc((size_t)T * C * sizeof *sem);
	float *ac = malloc((size_t)T * C * sizeof *ac), *pri = malloc((size_t)T * P * sizeof *pri);
	float *pre = malloc((size_t)T * 8 * sizeof *pre);
	int32_t *codes = malloc((size_t)T * sizeof *codes);
	xc2e_stages st = { feat, hid, sem, ac, pri, pre, { 0 } };

	CHECKF(xc2e_encode(m, wav, nw, codes, &st, &err) == 0, "%s", err.msg);
	float *r;
	stage("features", feat, r = fx("features.f32", (size_t)T * XC2E_FEAT),
	      (size_t)T * XC2E_FEAT, 1e-5);
	free(r);
	stage("hidden", hid, r = fx("hidden.f32", (size_t)T * H), (size_t)T * H, tolh);
	free(r);
	stage("semantic", sem, r = fx("semantic.f32", (size_t)T * C), (size_t)T * C, tolh);
	free(r);
	stage("acoustic", ac, r = fx("acoustic.f32", (size_t)T * C), (size_t)T * C, 1e-4);
	free(r);
	stage("prior", pri, r = fx("prior.f32", (size_t)T * P), (size_t)T * P, tolh);
	free(r);
	float *rpre = fx("prequant.f32", (size_t)T * 8);
	const double epre = rpre ? norm_err(pre, rpre, (size_t)T * 8) : INFINITY;
	stage("prequant", pre, rpre, (size_t)T * 8, tolh);

	/* codes: each digit equal unless the reference's value is within the
	 * rounding distance of a boundary */
	size_t nc;
	int32_t *rc = read_bytes(FX "/codes.i32", &nc);
	CHECKF(rc != NULL && nc == (size_t)T * 4, "codes.i32: %zu bytes", nc);
	int same = 0, near = 0, bad = 0;
	double pmax = 0.0;
	for (int i = 0; rpre && i < T * 8; i++)
		pmax = fabs(rpre[i]) > pmax ? fabs(rpre[i]) : pmax;
	const double margin = epre * pmax * 1.5015 * 1.5015 + 1e-6;
	for (int t = 0; rc && rpre && t < T; t++) {
		same += codes[t] == rc[t];
		for (int j = 0, b = 1; j < 8; j++, b *= 4) {
			const int dg = codes[t] / b % 4, dr = rc[t] / b % 4;
			float z = rpre[t * 8 + j];
			double zz = z;
			for (int k = 0; k < 2; k++)
				zz = tanh(zz + atanh(0.5 / 1.5015)) * 1.5015 - 0.5;
			const double dist = fabs(zz - floor(zz) - 0.5);
			if (dist <= margin)
				near++;
			else if (dg != dr)
				bad++;
		}
	}
	printf("codes: %d of %d equal; %d digits within %.2g of a boundary; %d other digits "
	       "differ\n", same, T, near, margin, bad);
	CHECKF(bad == 0, "%d digits differ away from a boundary", bad);
	CHECK(same >= T - near);

	free(rpre);
	free(rc);
	free(feat);
	free(hid);
	free(sem);
	free(ac);
	free(pri);
	free(pre);
	free(codes);
	free(wav);
	xc2e_close(&m);
	CHECK(m == NULL);
}

int main(void)
{
	pcg_err err = { "" };

	run(PCG_F32, 1e-4);
	run(PCG_BF16, 4e-2);
	/* the digits alone: bounds and rounding half to even */
	CHECK(xc2e_fsq_digit(0.0f) == 0 || xc2e_fsq_digit(0.0f) == -1);
	CHECK(xc2e_fsq_digit(100.0f) == 1 && xc2e_fsq_digit(-100.0f) == -2);
	/* errors name what is wrong */
	xc2e_model *none = xc2e_open("tests/fixtures/xcodec2/tiny", &err);
	CHECKF(none == NULL && strstr(err.msg, "semantic_model") != NULL, "decoder-only: %s",
	       err.msg);
	CHECK(xc2e_open_dtype(FX, PCG_F16, &err) == NULL && strstr(err.msg, "f32 or bf16"));
	return check_done("test_xc2enc");
}
