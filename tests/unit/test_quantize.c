/* test_quantize.c: f32 to ggml's block formats (lib/formats/quantize.c) and
 * llama.cpp's type per tensor (pcg_quant_choose).
 *
 * Q8_0 and Q4_0 give gguf-py's bytes on the cases of
 * tests/fixtures/quant (tests/ref/make_quant_fixtures.py). gguf-py cannot
 * quantise the K types, so for every type the output is checked by its
 * properties after pcg_dequantize: on seeded standard normal data the error
 * is within the bounds below, every value is finite, each value is within
 * the per-block bound of its scale (K types: it is the grid point of its
 * sub-block nearest to x), and zeros stay zeros. tests/quant.sh checks that
 * gguf-py dequantises our K-quant bytes to pcg_dequantize's values, with the
 * files `test_quantize --dump DIR` writes.
 *
 * Relative RMS error (sqrt(sum (x - y)^2 / sum x^2)) on 64 Ki standard
 * normal values, seed 7. A uniform quantiser of step s has an RMS error
 * s / sqrt(12); the largest |x| of 32 normals is about 2.3, so Q8_0
 * (s = amax / 127) should give 0.0052 and Q4_0 (s = amax / 8) 0.083; the
 * K types fit a scale (and a min) per 16 or 32 values: Q4_K about 15 steps
 * over a range of about 4.1 (0.079 before its search for a better fit),
 * Q5_K half of that, Q6_K 64 steps over about 2 x 1.8 for 16 values
 * (0.016). Measured with this code, and each bound 1.25 times that: with
 * 64 Ki values the RMS averages 2048 blocks, so its relative standard error
 * is under 2%, and a wrong rounding, scale or bit costs far more than 25%.
 *     type   expected  measured  bound
 *     Q8_0   0.0052    0.00536   0.0067
 *     Q4_0   0.083     0.0857    0.107
 *     Q4_K   < 0.079   0.0713    0.089
 *     Q5_K   < 0.040   0.0360    0.045
 *     Q6_K   0.016     0.0177    0.022
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fixture.h"
#include "quant.h"
#include "rng.h"

#define FX "tests/fixtures/quant"
#define NFX 768       /* fixture values: 24 blocks of 32, 3 of 256 */
#define NRAND (1 << 16) /* random values per type */

static const pcg_dtype types[] = {PCG_Q8_0, PCG_Q4_0, PCG_Q4_K, PCG_Q5_K, PCG_Q6_K};
#define NTYPES (sizeof types / sizeof types[0])

/* Bounds on the relative RMS error of NRAND standard normals (the table at
 * the top: measured x 1.25). */
static double max_rel(pcg_dtype t)
{
	switch (t) {
	case PCG_Q8_0: return 0.0067;
	case PCG_Q4_0: return 0.107;
	case PCG_Q4_K: return 0.089;
	case PCG_Q5_K: return 0.045;
	case PCG_Q6_K: return 0.022;
	default: return 0;
	}
}

static void normals(float *x, size_t n, uint64_t seed)
{
	pcg_rng r;

	pcg_rng_init(&r, seed, 0);
	for (size_t i = 0; i + 1 < n; i += 2) { /* Box-Muller */
		double u = 1.0 - pcg_rng_uniform(&r), v = pcg_rng_uniform(&r);
		double m = sqrt(-2 * log(u));
		x[i] = (float)(m * cos(2 * M_PI * v));
		x[i + 1] = (float)(m * sin(2 * M_PI * v));
	}
}

static unsigned char *quantize_new(const float *x, pcg_dtype t, size_t n)
{
	unsigned char *q = malloc(pcg_dtype_row_bytes(t, (int64_t)n));

	CHECK(q != NULL);
	if (q != NULL)
		CHECK(pcg_quantize(q, x, t, n) == 0);
	return q;
}

/* --- gguf-py's bytes --------------------------------------------------- */

static void test_fixtures(void)
{
	size_t nx, nb;
	float *x = read_f32(FX "/input.f32", &nx);
	char names[24][40];
	FILE *f = fopen(FX "/cases.txt", "r");

	CHECKF(x != NULL && nx == NFX && f != NULL, "%s: missing (tests/ref/make_quant_fixtures.py)",
	       FX);
	if (x == NULL || nx != NFX || f == NULL) {
		free(x);
		if (f)
			fclose(f);
		return;
	}
	for (int i = 0; i < 24; i++)
		if (fscanf(f, "%*d %39s", names[i]) != 1)
			strcpy(names[i], "?");
	fclose(f);
	for (int k = 0; k < 2; k++) {
		const pcg_dtype t = k ? PCG_Q4_0 : PCG_Q8_0;
		const char *path = k ? FX "/q4_0.bin" : FX "/q8_0.bin";
		const size_t bs = pcg_dtype_block_bytes(t);
		unsigned char *want = read_bytes(path, &nb);
		unsigned char *got = quantize_new(x, t, NFX);

		CHECKF(want != NULL && nb == 24 * bs, "%s: missing or %zu bytes", path, nb);
		for (int b = 0; want && got && nb == 24 * bs && b < 24; b++)
			CHECKF(memcmp(got + b * bs, want + b * bs, bs) == 0,
			       "%s block %d (%s) differs from gguf-py", pcg_dtype_name(t), b,
			       names[b]);
		free(want);
		free(got);
	}
	free(x);
}

/* --- error bounds ------------------------------------------------------ */

/* Distance from v to the nearest of the points a * l + b, l = lo..hi. */
static double grid_dist(double v, double a, double b, int lo, int hi)
{
	double best = INFINITY;
	for (int l = lo; l <= hi; l++)
		best = fmin(best, fabs(v - (a * l + b)));
	return best;
}

/* Per-block bounds. Q8_0 and Q4_0 round x / d with d = amax / 127 or
 * max / -8 in f32, then store d as f16 (relative error <= 2^-11), so
 * |x - y| <= |d| / 2 + |q| |d - d16| + float rounding, with |q| <= 127 or
 * 8; Q4_0 clamps q - 8 <= 7, so values within a step of -max (x / d in
 * (7.5, 8]) may be off by up to a whole step. The K types requantise with
 * the scales as stored, so y is the nearest point of its sub-block's grid
 * (up to the rounding of (x + m) / d: 1e-5 of a step). Returns the number
 * of values out of bounds; *worst is the largest rounding error in steps
 * of values that are in range (not clamped), less the f16 part for Q8_0
 * and Q4_0: at most 0.5 for nearest rounding. */
static int block_bounds(pcg_dtype t, const float *x, const float *y, const unsigned char *q,
			double *worst)
{
	int bad = 0;

	if (t == PCG_Q8_0 || t == PCG_Q4_0) {
		float amax = 0, max = 0;
		for (int i = 0; i < 32; i++)
			if (fabsf(x[i]) > amax) {
				amax = fabsf(x[i]);
				max = x[i];
			}
		const double d = t == PCG_Q8_0 ? amax / 127.0f : max / -8.0f;
		const double d16 = pcg_f16_to_f32((uint16_t)(q[0] | q[1] << 8));
		const double qmax = t == PCG_Q8_0 ? 127 : 8;
		for (int i = 0; i < 32; i++) {
			const double e = fabs((double)x[i] - y[i]);
			const double slack = qmax * fabs(d - d16) + 1e-6 * amax;
			const int clamped = t == PCG_Q4_0 && d != 0 && x[i] / d > 7.5;
			if (e > fabs(d) * (clamped ? 1.0 : 0.5) + slack)
				bad++;
			if (!clamped && d != 0)
				*worst = fmax(*worst, (e - qmax * fabs(d - d16)) / fabs(d));
		}
		return bad;
	}
	for (int j = 0; j < (t == PCG_Q6_K ? 16 : 8); j++) {
		double a, b;
		int lo, hi, n = t == PCG_Q6_K ? 16 : 32;
		if (t == PCG_Q6_K) {
			pcg_block_q6_k k;
			memcpy(&k, q, sizeof k);
			a = (double)pcg_f16_to_f32(k.d) * k.scales[j];
			b = 0, lo = -32, hi = 31;
		} else {
			uint16_t d, dmin;
			uint8_t sc, m;
			memcpy(&d, q, 2);
			memcpy(&dmin, q + 2, 2);
			pcg_get_scale_min(j, q + 4, &sc, &m);
			a = (double)pcg_f16_to_f32(d) * sc;
			b = -(double)pcg_f16_to_f32(dmin) * m;
			lo = 0, hi = t == PCG_Q4_K ? 15 : 31;
		}
		for (int i = n * j; i < n * (j + 1); i++) {
			const double e = fabs((double)x[i] - y[i]);
			const double dist = grid_dist(x[i], a, b, lo, hi);
			if (e > dist + 1e-5 * (fabs(a) + fabs(x[i])))
				bad++;
			const double u = a != 0 ? (x[i] - b) / a : 0;
			if (a != 0 && u >= lo - 0.5 && u <= hi + 0.5)
				*worst = fmax(*worst, e / fabs(a));
		}
	}
	return bad;
}

static void test_random(void)
{
	float *x = malloc(NRAND * sizeof *x), *y = malloc(NRAND * sizeof *y);

	CHECK(x != NULL && y != NULL);
	if (x == NULL || y == NULL)
		goto out;
	normals(x, NRAND, 7);
	for (size_t k = 0; k < NTYPES; k++) {
		const pcg_dtype t = types[k];
		const int qk = pcg_dtype_block(t);
		const size_t bs = pcg_dtype_block_bytes(t);
		unsigned char *q = quantize_new(x, t, NRAND);
		double se = 0, sx = 0, worst = 0;
		int finite = 1, bad = 0;

		if (q == NULL)
			continue;
		pcg_dequantize(y, q, t, NRAND);
		for (size_t i = 0; i < NRAND; i++) {
			se += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
			sx += (double)x[i] * x[i];
			finite &= isfinite(y[i]) != 0;
		}
		for (size_t b = 0; b < NRAND / (size_t)qk; b++)
			bad += block_bounds(t, x + b * qk, y + b * qk, q + b * bs, &worst);
		const double rel = sqrt(se / sx);
		printf("%s: relative RMS error %.5f (bound %.5f), largest in-range error %.4f steps\n",
		       pcg_dtype_name(t), rel, max_rel(t), worst);
		CHECKF(rel <= max_rel(t), "%s: relative RMS error %g > %g", pcg_dtype_name(t), rel,
		       max_rel(t));
		CHECKF(finite, "%s: a dequantised value is not finite", pcg_dtype_name(t));
		CHECKF(bad == 0, "%s: %d values beyond their block's bound", pcg_dtype_name(t), bad);
		/* in range, nearest rounding is within half a step */
		CHECKF(worst <= 0.5 + 1e-4, "%s: in-range error of %g steps", pcg_dtype_name(t),
		       worst);
		free(q);
	}
out:
	free(x);
	free(y);
}

/* Zeros give zeros; a block type needs whole blocks; float types are no
 * block types. */
static void test_edges(void)
{
	float x[512] = {0}, y[512];

	for (size_t k = 0; k < NTYPES; k++) {
		unsigned char *q = quantize_new(x, types[k], 512);
		int zero = 1;
		if (q == NULL)
			continue;
		memset(y, 0x7f, sizeof y);
		pcg_dequantize(y, q, types[k], 512);
		for (int i = 0; i < 512; i++)
			zero &= y[i] == 0;
		CHECKF(zero, "%s: zeros do not stay zeros", pcg_dtype_name(types[k]));
		CHECK(pcg_quantize(q, x, types[k], pcg_dtype_block(types[k]) + 1) == -1);
		free(q);
	}
	CHECK(pcg_quantize(y, x, PCG_F32, 32) == -1);
	CHECK(pcg_quantize(y, x, PCG_F16, 32) == -1);
	CHECK(pcg_quantize(y, x, PCG_DTYPE_OTHER, 32) == -1);
}

/* --- pcg_quant_choose -------------------------------------------------- */

static pcg_dtype code(char c)
{
	switch (c) {
	case '8': return PCG_Q8_0;
	case '0': return PCG_Q4_0;
	case '4': return PCG_Q4_K;
	case '5': return PCG_Q5_K;
	case '6': return PCG_Q6_K;
	default: return PCG_DTYPE_OTHER;
	}
}

/* LLaSA-1B: 16 layers, hidden 2048, FFN 8192 (all rows multiples of 256).
 * The expected types are read off llama_tensor_get_type by hand:
 * use_more_bits(i, 16) holds for i < 2, i >= 14 and (i - 2) % 3 == 2, i.e.
 * layers 0 1 4 7 10 13 14 15; Q4_K_S raises attn_v of layers < 4 and
 * ffn_down of layers < 16 / 8 to Q5_K; output.weight is Q6_K unless the
 * file type is Q8_0. Codes: 8 Q8_0, 0 Q4_0, 4 Q4_K, 5 Q5_K, 6 Q6_K. */
static const struct {
	const char *ftype;
	char embd, output, other;
	const char *attn_v, *ffn_down; /* by layer */
} mixes[] = {
	{"q4_k_m", '4', '6', '4', "6644644644644666", "6644644644644666"},
	{"q5_k_m", '5', '6', '5', "6655655655655666", "6655655655655666"},
	{"q4_k_s", '4', '6', '4', "5555444444444444", "5544444444444444"},
	{"q5_k_s", '5', '6', '5', "5555555555555555", "5555555555555555"},
	{"q6_k", '6', '6', '6', "6666666666666666", "6666666666666666"},
	{"q8_0", '8', '8', '8', "8888888888888888", "8888888888888888"},
	{"Q4_0", '0', '6', '0', "0000000000000000", "0000000000000000"},
};

static void test_choose(void)
{
	static const char *others[] = {"attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"};
	char name[64];

	for (size_t m = 0; m < sizeof mixes / sizeof mixes[0]; m++) {
		const char *ft = mixes[m].ftype;
		CHECKF(pcg_quant_choose(ft, "token_embd.weight", -1, 16, 2048) ==
			       code(mixes[m].embd), "%s token_embd", ft);
		CHECKF(pcg_quant_choose(ft, "output.weight", -1, 16, 2048) == code(mixes[m].output),
		       "%s output", ft);
		CHECKF(pcg_quant_choose(ft, "output_norm.weight", -1, 16, 2048) == PCG_F32,
		       "%s output_norm", ft);
		for (int l = 0; l < 16; l++) {
			snprintf(name, sizeof name, "blk.%d.attn_v.weight", l);
			CHECKF(pcg_quant_choose(ft, name, l, 16, 2048) == code(mixes[m].attn_v[l]),
			       "%s %s", ft, name);
			snprintf(name, sizeof name, "blk.%d.ffn_down.weight", l);
			CHECKF(pcg_quant_choose(ft, name, l, 16, 8192) == code(mixes[m].ffn_down[l]),
			       "%s %s", ft, name);
			for (size_t o = 0; o < sizeof others / sizeof others[0]; o++) {
				snprintf(name, sizeof name, "blk.%d.%s.weight", l, others[o]);
				CHECKF(pcg_quant_choose(ft, name, l, 16, 2048) == code(mixes[m].other),
				       "%s %s", ft, name);
			}
			snprintf(name, sizeof name, "blk.%d.attn_norm.weight", l);
			CHECK(pcg_quant_choose(ft, name, l, 16, 2048) == PCG_F32);
			snprintf(name, sizeof name, "blk.%d.ffn_norm.weight", l);
			CHECK(pcg_quant_choose(ft, name, l, 16, 2048) == PCG_F32);
		}
	}
	/* rows that are no multiple of 256 (K types) or of 32 (all) */
	CHECK(pcg_quant_choose("q4_k_m", "blk.3.attn_q.weight", 3, 16, 2016) == PCG_Q8_0);
	CHECK(pcg_quant_choose("q4_k_m", "blk.0.attn_v.weight", 0, 16, 2016) == PCG_Q8_0);
	CHECK(pcg_quant_choose("q5_k_m", "blk.3.ffn_up.weight", 3, 16, 2016) == PCG_Q8_0);
	CHECK(pcg_quant_choose("q4_0", "output.weight", -1, 16, 2016) == PCG_Q8_0);
	CHECK(pcg_quant_choose("q4_0", "blk.3.ffn_up.weight", 3, 16, 2016) == PCG_Q4_0);
	CHECK(pcg_quant_choose("q4_k_m", "blk.3.attn_q.weight", 3, 16, 2000) == PCG_F16);
	CHECK(pcg_quant_choose("q8_0", "blk.3.attn_q.weight", 3, 16, 100) == PCG_F16);
	/* what is not a weight matrix, and unknown file types */
	CHECK(pcg_quant_choose("q4_k_m", "rope_freqs.weight", -1, 16, 32) == PCG_F32);
	CHECK(pcg_quant_choose("q4_k_m", "blk.0.attn_q.bias", 0, 16, 2048) == PCG_F32);
	CHECK(pcg_quant_choose("q3_k_m", "blk.0.attn_q.weight", 0, 16, 2048) == PCG_DTYPE_OTHER);
	CHECK(pcg_quant_choose("", "blk.0.attn_q.weight", 0, 16, 2048) == PCG_DTYPE_OTHER);
	CHECK(pcg_quant_choose(NULL, "blk.0.attn_q.weight", 0, 16, 2048) == PCG_DTYPE_OTHER);
}

/* --- files for tests/quant.sh ------------------------------------------ */

static int write_file(const char *dir, const char *name, const void *p, size_t n)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof path, "%s/%s", dir, name);
	f = fopen(path, "wb");
	if (f == NULL || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
		fprintf(stderr, "test_quantize: %s: cannot write\n", path);
		return -1;
	}
	return 0;
}

/* DIR/input.f32: 4 super-blocks of normals, then the fixture's input
 * scaled so that its K-quant scales stay in f16 range; DIR/TYPE.bin and
 * DIR/TYPE.f32: each type's bytes and pcg_dequantize of them. */
static int dump(const char *dir)
{
	enum { N = 4 * 256 + NFX };
	static float x[N], y[N];
	char name[64];
	size_t nx;
	float *fx = read_f32(FX "/input.f32", &nx);
	int rc = 0;

	normals(x, 4 * 256, 11);
	for (size_t i = 0; fx && nx == NFX && i < NFX; i++)
		x[4 * 256 + i] = fx[i] * 1e-3f;
	free(fx);
	rc |= write_file(dir, "input.f32", x, sizeof x);
	for (size_t k = 0; k < NTYPES; k++) {
		const size_t nb = pcg_dtype_row_bytes(types[k], N);
		unsigned char *q = malloc(nb);
		if (q == NULL || pcg_quantize(q, x, types[k], N) != 0) {
			free(q);
			return 1;
		}
		pcg_dequantize(y, q, types[k], N);
		snprintf(name, sizeof name, "%s.bin", pcg_dtype_name(types[k]));
		rc |= write_file(dir, name, q, nb);
		snprintf(name, sizeof name, "%s.f32", pcg_dtype_name(types[k]));
		rc |= write_file(dir, name, y, sizeof y);
		free(q);
	}
	return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "--dump") == 0)
		return dump(argv[2]);
	test_fixtures();
	test_random();
	test_edges();
	test_choose();
	return check_done("test_quantize");
}
