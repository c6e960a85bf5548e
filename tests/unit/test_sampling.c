/* test_sampling.c: pcg_probs against Hugging Face transformers' warpers
 * (golden files from tests/ref/make_sampling_ref.py), a chi-square test of
 * pcg_sample driven by pcg_rng, the edge cases and the parameter checks,
 * top-k's two-pass path bit for bit against the warpers one at a time;
 * prints the time pcg_probs takes on 65,537 logits (not checked).
 */
#include <math.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "check.h"
#include "rng.h"
#include "sampling.h"

#define SPEECH_VOCAB 65537

static float *read_f32(const char *dir, const char *name, int n)
{
	char path[1024];
	FILE *f;
	float *x;
	size_t got;

	snprintf(path, sizeof path, "%s/%s", dir, name);
	f = fopen(path, "rb");
	if (f == NULL) {
		fprintf(stderr, "%s: cannot open\n", path);
		return NULL;
	}
	x = malloc((size_t)n * sizeof *x);
	got = x ? fread(x, sizeof *x, (size_t)n, f) : 0;
	if (got != (size_t)n || fgetc(f) != EOF) {
		fprintf(stderr, "%s: expected exactly %d floats\n", path, n);
		free(x);
		x = NULL;
	}
	fclose(f);
	return x;
}

/* Tolerance against torch, whose softmax is f32: for entry i with
 * d = |x_i - max| (x = logits / T, the max over kept tokens), torch rounds
 * d to f32 (relative error 2^-24 d in exp(-d)), its vectorised expf is good
 * to about 1 ulp (and, after range reduction, also to a few 2^-24 d), the
 * division and our two roundings to f32 add 3 * 2^-24: we allow
 * 2^-23 (d + 4), about twice that budget. The f32 sum of up to 65,537 terms
 * moves every entry by one common factor, measured up to 4e-7 on these
 * fixtures: we allow 1e-6. Removed tokens must be exactly 0 in both. */
static double tolerance(double p, double d)
{
	return p * (ldexp(d + 4.0, -23) + 1e-6);
}

static void compare_case(const char *name, const float *logits, const float *want,
			 const float *got, int n, float temperature)
{
	double max = -INFINITY, worst = 0.0;
	int i, zeros = 1, close = 1, worst_i = 0;

	for (i = 0; i < n; i++)
		if (want[i] > 0.0f && logits[i] / temperature > max)
			max = logits[i] / temperature;
	for (i = 0; i < n; i++) {
		double err = fabs((double)got[i] - want[i]);
		double d = temperature > 0.0f ? fabs(logits[i] / temperature - max) : 0.0;

		zeros &= (got[i] == 0.0f) == (want[i] == 0.0f);
		if (want[i] > 0.0f && err > tolerance(want[i], d)) {
			close = 0;
			if (err / want[i] > worst) {
				worst = err / want[i];
				worst_i = i;
			}
		}
	}
	CHECKF(zeros, "%s: zero pattern differs from HF", name);
	CHECKF(close, "%s: entry %d: got %.9g, HF %.9g (relative error %.2e)", name,
	       worst_i, got[worst_i], want[worst_i], worst);
}

/* (a) Every case of tests/fixtures/sampling/index.txt, out of place and in
 * place (probs == logits). */
static void test_golden(void)
{
	const char *root = getenv("PCG_ROOT");
	char dir[1024], path[1100], line[512];
	FILE *index;
	int cases = 0;
	pcg_err err;

	snprintf(dir, sizeof dir, "%s/tests/fixtures/sampling", root && *root ? root : ".");
	snprintf(path, sizeof path, "%s/index.txt", dir);
	index = fopen(path, "r");
	CHECKF(index != NULL, "%s: cannot open (run from the repository root or set PCG_ROOT)",
	       path);
	if (index == NULL)
		return;
	while (fgets(line, sizeof line, index)) {
		char name[128], lname[256], pname[256];
		pcg_sampling s;
		float *logits, *want, *got;
		int n;

		if (line[0] == '#' || line[0] == '\n')
			continue;
		if (sscanf(line, "%127s %d %f %d %f %255s %255s", name, &n, &s.temperature,
			   &s.top_k, &s.top_p, lname, pname) != 7 || n < 1) {
			CHECKF(0, "index.txt: bad line: %s", line);
			continue;
		}
		cases++;
		logits = read_f32(dir, lname, n);
		want = read_f32(dir, pname, n);
		got = malloc((size_t)n * sizeof *got);
		CHECKF(logits && want && got, "%s: cannot load", name);
		if (logits && want && got) {
			int rc = pcg_probs(logits, n, &s, got, &err);

			CHECKF(rc == 0, "%s: %s", name, err.msg);
			if (rc == 0)
				compare_case(name, logits, want, got, n, s.temperature);
			/* In place gives the same bits. */
			rc = pcg_probs(logits, n, &s, logits, &err);
			CHECKF(rc == 0 && memcmp(logits, got, (size_t)n * sizeof *got) == 0,
			       "%s: in place differs", name);
		}
		free(logits);
		free(want);
		free(got);
	}
	fclose(index);
	CHECKF(cases >= 40, "index.txt: only %d cases", cases);
}

/* (b) 200,000 draws from a distribution cut by top-k and top-p: the counts
 * of the kept tokens against chi-square with kept - 1 degrees of freedom at
 * significance 0.001, and no draw of a removed token. With 64 tokens of
 * logit -0.08 r (r a permutation of 0..63, two masked), T 0.9, top-k 20 and
 * top-p 0.9 keep 16 tokens (HF keeps the same 16); the smallest expected
 * count is about 5,500, far above the 5 the chi-square needs. */
#define CHI2_15_Q999 37.6973 /* 0.999 quantile of chi2(15), mpmath and torch agree */

static void test_sample_chi_square(void)
{
	enum { N = 64, DRAWS = 200000 };
	pcg_sampling s = { 0.9f, 20, 0.9f };
	float logits[N], probs[N];
	long count[N] = { 0 };
	double total = 0.0, x2 = 0.0;
	int i, kept = 0, removed_drawn = 0;
	pcg_rng r;
	pcg_err err;

	for (i = 0; i < N; i++)
		logits[i] = -0.08f * (float)((i * 37) % N);
	logits[5] = -INFINITY;
	logits[40] = -INFINITY;
	CHECKF(pcg_probs(logits, N, &s, probs, &err) == 0, "%s", err.msg);
	for (i = 0; i < N; i++) {
		kept += probs[i] > 0.0f;
		total += probs[i];
	}
	CHECKF(kept == 16, "kept %d tokens, expected 16", kept);

	pcg_rng_init(&r, 20240611, 7);
	for (i = 0; i < DRAWS; i++) {
		int t = pcg_sample(probs, N, pcg_rng_uniform(&r));

		if (t < 0 || t >= N || probs[t] == 0.0f)
			removed_drawn++;
		else
			count[t]++;
	}
	CHECKF(removed_drawn == 0, "%d draws of removed tokens", removed_drawn);
	for (i = 0; i < N; i++) {
		if (probs[i] > 0.0f) {
			double e = DRAWS * (probs[i] / total);
			x2 += (count[i] - e) * (count[i] - e) / e;
		}
	}
	CHECKF(x2 < CHI2_15_Q999, "chi2(15) = %.2f", x2);
	printf("pcg_sample chi2(15) = %.2f (reject > %.2f)\n", x2, CHI2_15_Q999);
}

/* pcg_sample's inverse CDF at its edges. */
static void test_sample_edges(void)
{
	float p[4] = { 0.0f, 1.0f, 0.0f, 3.0f }, q[2] = { 1.0f, 0.0f }, z[3] = { 0 };
	double below_one = 1.0 - ldexp(1.0, -53);

	CHECK(pcg_sample(p, 4, 0.0) == 1);
	CHECK(pcg_sample(p, 4, 0.2499) == 1);
	CHECK(pcg_sample(p, 4, 0.25) == 3);
	CHECK(pcg_sample(p, 4, below_one) == 3);
	CHECK(pcg_sample(q, 2, below_one) == 0);
	CHECK(pcg_sample(q, 2, 0.0) == 0);
	CHECK(pcg_sample(z, 3, 0.5) == -1);
}

static int has(const pcg_err *err, const char *word)
{
	return strstr(err->msg, word) != NULL;
}

/* (c) Edge cases of pcg_probs and the parameter checks. */
static void test_edges(void)
{
	pcg_sampling plain = { 1.0f, 0, 1.0f };
	pcg_err err;
	float x[8], p[8];
	int i, ok;

	/* n = 1: probability 1 whatever the parameters. */
	{
		pcg_sampling ss[] = { { 1.0f, 0, 1.0f }, { 0.0f, 0, 1.0f }, { 0.7f, 1, 1e-6f },
				      { 1.3f, 50, 0.5f } };
		float one = -3.5f, out;
		for (i = 0; i < 4; i++) {
			out = -1.0f;
			CHECK(pcg_probs(&one, 1, &ss[i], &out, &err) == 0 && out == 1.0f);
		}
	}

	/* All equal: uniform, also under top-k (ties kept). */
	for (i = 0; i < 8; i++)
		x[i] = 0.625f;
	CHECK(pcg_probs(x, 8, &plain, p, &err) == 0);
	for (i = 0, ok = 1; i < 8; i++)
		ok &= p[i] == 0.125f;
	CHECK(ok);
	{
		pcg_sampling k3 = { 1.3f, 3, 1.0f };
		CHECK(pcg_probs(x, 8, &k3, p, &err) == 0);
		for (i = 0, ok = 1; i < 8; i++)
			ok &= p[i] == 0.125f;
		CHECK(ok);
	}

	/* -inf logits get exactly 0; all -inf is an error. */
	for (i = 0; i < 8; i++)
		x[i] = (i % 3 == 0) ? -INFINITY : (float)i;
	CHECK(pcg_probs(x, 8, &plain, p, &err) == 0);
	for (i = 0, ok = 1; i < 8; i++)
		ok &= (x[i] == -INFINITY) == (p[i] == 0.0f);
	CHECK(ok);
	for (i = 0; i < 8; i++)
		x[i] = -INFINITY;
	CHECK(pcg_probs(x, 8, &plain, p, &err) == -1 && has(&err, "-inf"));

	/* NaN and +inf logits: errors naming the index. */
	for (i = 0; i < 8; i++)
		x[i] = (float)i;
	x[6] = NAN;
	CHECKF(pcg_probs(x, 8, &plain, p, &err) == -1 && has(&err, "6") && has(&err, "NaN"),
	       "%s", err.msg);
	x[6] = INFINITY;
	CHECKF(pcg_probs(x, 8, &plain, p, &err) == -1 && has(&err, "6") && has(&err, "inf"),
	       "%s", err.msg);
	CHECK(pcg_probs(x, 0, &plain, p, &err) == -1);

	/* Greedy: one-hot at the first maximum, and so is a temperature so
	 * small that logit / T overflows; just above that, the tied maxima
	 * share the mass, as the limit T -> 0 of softmax does. */
	{
		float t[5] = { 1.0f, 3.0f, -2.0f, 3.0f, 0.0f };
		pcg_sampling greedy = { 0.0f, 0, 1.0f }, tiny = { 1e-39f, 0, 1.0f };
		pcg_sampling small = { 1e-38f, 0, 1.0f };

		CHECK(pcg_probs(t, 5, &greedy, p, &err) == 0 && p[1] == 1.0f &&
		      p[0] + p[2] + p[3] + p[4] == 0.0f);
		CHECK(pcg_probs(t, 5, &tiny, p, &err) == 0 && p[1] == 1.0f &&
		      p[0] + p[2] + p[3] + p[4] == 0.0f);
		CHECK(pcg_probs(t, 5, &small, p, &err) == 0 && p[1] == 0.5f && p[3] == 0.5f &&
		      p[0] + p[2] + p[4] == 0.0f);
		/* all logits negative: logit / T overflows to -inf, the same limit */
		float neg[3] = { -1.0f, -0.5f, -2.0f };
		pcg_sampling least = { 1e-45f, 0, 1.0f };
		CHECK(pcg_probs(neg, 3, &least, p, &err) == 0 && p[1] == 1.0f &&
		      p[0] + p[2] == 0.0f);
	}

	/* top_k >= n and top_k < 0 are off. */
	{
		float t[4] = { 0.5f, -1.0f, 2.0f, 0.25f }, ref[4];
		pcg_sampling big = { 1.0f, 4, 1.0f }, neg = { 1.0f, -3, 1.0f };

		CHECK(pcg_probs(t, 4, &plain, ref, &err) == 0);
		CHECK(pcg_probs(t, 4, &big, p, &err) == 0 && memcmp(p, ref, sizeof ref) == 0);
		CHECK(pcg_probs(t, 4, &neg, p, &err) == 0 && memcmp(p, ref, sizeof ref) == 0);
	}

	/* argmax skips NaN and takes the first maximum. */
	{
		float t[5] = { NAN, 1.0f, 3.0f, 3.0f, NAN };
		CHECK(pcg_argmax(t, 5) == 2);
		CHECK(pcg_argmax(t, 0) == -1);
	}
}

/* A tiny top_p keeps exactly the argmax of distinct logits. */
static void test_top_p_tiny(void)
{
	pcg_sampling s = { 1.0f, 0, 1e-6f };
	float *x = malloc(SPEECH_VOCAB * sizeof *x);
	float *p = malloc(SPEECH_VOCAB * sizeof *p);
	pcg_rng r;
	pcg_err err;
	int i, best, nonzero = 0;

	if (x == NULL || p == NULL) {
		CHECK(!"out of memory");
		free(x);
		free(p);
		return;
	}
	pcg_rng_init(&r, 5, 0);
	for (i = 0; i < SPEECH_VOCAB; i++)
		x[i] = (float)(8.0 * pcg_rng_uniform(&r));
	best = pcg_argmax(x, SPEECH_VOCAB);
	CHECKF(pcg_probs(x, SPEECH_VOCAB, &s, p, &err) == 0, "%s", err.msg);
	for (i = 0; i < SPEECH_VOCAB; i++)
		nonzero += p[i] != 0.0f;
	CHECK(nonzero == 1 && p[best] == 1.0f);
	free(x);
	free(p);
}

static void test_check(void)
{
	static const struct {
		pcg_sampling s;
		const char *param; /* NULL: valid */
	} cases[] = {
		{ { 1.0f, 0, 1.0f }, NULL },
		{ { 0.0f, 0, 1.0f }, NULL },
		{ { 0.7f, -5, 0.01f }, NULL },
		{ { -1.0f, 0, 1.0f }, "temperature" },
		{ { NAN, 0, 1.0f }, "temperature" },
		{ { INFINITY, 0, 1.0f }, "temperature" },
		{ { 1.0f, 0, 0.0f }, "top_p" },
		{ { 1.0f, 0, 1.5f }, "top_p" },
		{ { 1.0f, 0, -0.5f }, "top_p" },
		{ { 1.0f, 0, NAN }, "top_p" },
	};
	size_t i;
	pcg_err err;
	float x[2] = { 0.0f, 1.0f }, p[2];

	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		int rc;

		err.msg[0] = '\0';
		rc = pcg_sampling_check(&cases[i].s, &err);
		if (cases[i].param == NULL) {
			CHECKF(rc == 0, "case %zu: %s", i, err.msg);
		} else {
			CHECKF(rc == -1 && has(&err, cases[i].param), "case %zu: rc %d, '%s'", i,
			       rc, err.msg);
			CHECK(pcg_probs(x, 2, &cases[i].s, p, &err) == -1 &&
			      has(&err, cases[i].param));
		}
	}
}

/* Informational: microseconds per pcg_probs call on 65,537 logits. */
static int cmp_desc(const void *a, const void *b)
{
	const float x = *(const float *)a, y = *(const float *)b;
	return (x < y) - (x > y);
}

/* (f) top-k without top-p, which pcg_probs runs in two passes over the
 * logits, against the warpers one at a time as HF applies them (scores /
 * T in f32, every token below the k-th largest to -inf, softmax with exp
 * and its sum in double in index order, 1/sum): the same bits, for vectors
 * with many ties (logits from a few values, so that x / T merges some),
 * -inf entries, fewer finite logits than k, widths not a multiple of the
 * block, in place and not. */
static void test_top_k_bits(void)
{
	enum { N = 700 };
	static const float temps[] = { 1.0f, 0.8f, 0.37f, 1.3f, 3.0f };
	static const int ks[] = { 1, 2, 7, 50, 333, N - 1 };
	float x[N], want[N], got[N], sorted[N];
	pcg_rng r;
	pcg_err err;
	int bad = 0, cases = 0;

	pcg_rng_init(&r, 77, 0);
	for (int c = 0; c < 400; c++) {
		const int n = 1 + (int)pcg_rng_below(&r, N);
		const int kind = c % 4;
		for (int i = 0; i < n; i++) {
			double u = pcg_rng_uniform(&r);
			x[i] = kind == 0 ? (float)(8 * u - 4)                  /* distinct */
			       : kind == 1 ? (float)(int)(6 * u) * 0.25f        /* ties */
			       : kind == 2 ? (u < 0.7 ? -INFINITY : (float)(4 * u)) /* -inf */
				       : 1e30f * (float)(u - 0.5) + (float)(int)(3 * u); /* wide */
		}
		for (size_t ti = 0; ti < sizeof temps / sizeof temps[0]; ti++)
			for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
				const int k = ks[ki] < n ? ks[ki] : n - 1;
				if (k < 1)
					continue;
				const pcg_sampling sp = { temps[ti], k, 1.0f };
				float max = -INFINITY;
				for (int i = 0; i < n; i++) {
					want[i] = x[i] / sp.temperature;
					sorted[i] = want[i];
					if (want[i] > max)
						max = want[i];
				}
				if (max == -INFINITY || isinf(max))
					continue; /* the edge cases test_edges covers */
				qsort(sorted, (size_t)n, sizeof *sorted, cmp_desc);
				double sum = 0;
				for (int i = 0; i < n; i++) {
					if (want[i] < sorted[k - 1] || want[i] == -INFINITY) {
						want[i] = 0.0f;
						continue;
					}
					const double e = exp(want[i] - (double)max);
					want[i] = (float)e;
					sum += e;
				}
				for (int i = 0; i < n; i++)
					want[i] = (float)(want[i] * (1.0 / sum));
				cases++;
				if (pcg_probs(x, n, &sp, got, &err) < 0 ||
				    memcmp(got, want, (size_t)n * sizeof *got) != 0)
					bad++;
				memcpy(got, x, (size_t)n * sizeof *got);
				if (pcg_probs(got, n, &sp, got, &err) < 0 ||
				    memcmp(got, want, (size_t)n * sizeof *got) != 0)
					bad++;
			}
	}
	CHECKF(bad == 0, "top-k: %d of %d cases differ in a bit from the warpers one at a time",
	       bad, 2 * cases);
	CHECKF(cases > 5000, "top-k: only %d cases ran", cases);
}

/* pcg_sample passes over blocks of zeros: the index a plain inverse-CDF
 * walk gives, for sparse vectors (zeros, negatives and NaN count as
 * zeros) of every width up to 70 and uniforms down to 0 and up to 1. */
static int plain_sample(const float *p, int n, double u)
{
	double total = 0, cum = 0;
	int last = -1;

	for (int i = 0; i < n; i++)
		if (p[i] > 0.0f)
			total += p[i];
	if (!(total > 0))
		return -1;
	for (int i = 0; i < n; i++) {
		if (!(p[i] > 0.0f))
			continue;
		cum += p[i];
		last = i;
		if (u * total < cum)
			return i;
	}
	return last;
}

static void test_sample_blocks(void)
{
	float p[70];
	pcg_rng r;
	int bad = 0, cases = 0;

	pcg_rng_init(&r, 5, 0);
	for (int n = 1; n <= 70; n++)
		for (int c = 0; c < 40; c++) {
			for (int i = 0; i < n; i++) {
				const double w = pcg_rng_uniform(&r);
				p[i] = w < 0.8 ? 0.0f : w < 0.85 ? -0.5f : w < 0.86 ? NAN : (float)w;
			}
			for (int k = 0; k <= 8; k++) {
				const double u = k == 8 ? 0x1.fffffffffffffp-1 : k / 8.0;
				bad += pcg_sample(p, n, u) != plain_sample(p, n, u);
				cases++;
			}
		}
	CHECKF(bad == 0, "pcg_sample: %d of %d draws differ from the plain walk", bad, cases);
}

static void report_timings(void)
{
	static const struct {
		const char *what;
		pcg_sampling s;
	} runs[] = {
		{ "plain", { 1.0f, 0, 1.0f } },
		{ "top-k 50", { 1.0f, 50, 1.0f } },
		{ "top-p 0.95", { 1.0f, 0, 0.95f } },
		{ "top-k 50 + top-p 0.95", { 1.0f, 50, 0.95f } },
	};
	enum { REPS = 20 };
	float *x = malloc(SPEECH_VOCAB * sizeof *x);
	float *p = malloc(SPEECH_VOCAB * sizeof *p);
	pcg_rng r;
	pcg_err err;
	size_t k;
	int i;

	if (x == NULL || p == NULL) {
		free(x);
		free(p);
		return;
	}
	pcg_rng_init(&r, 11, 0);
	for (i = 0; i < SPEECH_VOCAB; i++)
		x[i] = (float)(4.0 * (pcg_rng_uniform(&r) + pcg_rng_uniform(&r) - 1.0));
	for (k = 0; k < sizeof runs / sizeof runs[0]; k++) {
		double best = 1e9;
		for (i = 0; i < REPS; i++) {
			double t0 = pcg_now(), dt;

			pcg_probs(x, SPEECH_VOCAB, &runs[k].s, p, &err);
			dt = pcg_now() - t0;
			if (dt < best)
				best = dt;
		}
		printf("pcg_probs, %d logits, %s: %.0f us\n", SPEECH_VOCAB, runs[k].what,
		       best * 1e6);
	}
	free(x);
	free(p);
}

int main(void)
{
	test_golden();
	test_sample_chi_square();
	test_sample_edges();
	test_edges();
	test_top_p_tiny();
	test_check();
	test_top_k_bits();
	test_sample_blocks();
	report_timings();
	return check_done("test_sampling");
}
