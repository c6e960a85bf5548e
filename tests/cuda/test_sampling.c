/* test_sampling.c: pcg_cuda_probs against pcg_probs, the CPU oracle, row by
 * row: the same zero pattern (the same kept tokens), every probability within
 * a derived bound of the CPU's, every row summing to 1, and in place giving
 * the same bits as out of place. Logits: random, quantised to six values
 * (ties at the top-k and top-p boundaries, zeros of both signs), masked (-inf
 * and far below the rest), and 2^j tokens tied at the top (top-p's boundary
 * inside the tie, in exact arithmetic); widths 1, 7, 1024 and 65,537; every
 * combination of the temperatures, top_k and top_p below. Then the errors
 * (NaN, +inf, all -inf, bad parameters) named as the CPU names them,
 * temperatures so small that logit / T overflows, more rows than a
 * verification block, a stream, and the time of a 16 x 65,537 call (printed,
 * not checked).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda/check.h"
#include "cuda/cuda_sampling.h"
#include "gpu.h"
#include "rng.h"
#include "sampling.h"

#define SPEECH_VOCAB 65537
#define ROWS 3          /* rows per call in the grid of cases */
#define MANY_ROWS 40    /* more rows than a verification block */
#define BENCH_ROWS 16
#define BUF_FLOATS ((size_t)MANY_ROWS * SPEECH_VOCAB)

static const float temps[] = { 0.0f, 0.5f, 0.8f, 1.0f, 1.7f };
static const int top_ks[] = { 0, 1, 5, 50, 1024, 65537 };
static const float top_ps[] = { 1.0f, 0.9f, 0.5f, 0.01f };

enum kind { RANDOM, QUANTISED, MASKED, TIED_TOP };
static const char *const kind_name[] = { "random", "quantised", "masked", "tied-top" };

static float *d_logits, *d_probs; /* BUF_FLOATS each */
static int cases, knife_edges;

static int upload(float *d, const float *h, size_t n, pcg_err *err)
{
	CU_CHECK(cudaMemcpy(d, h, n * sizeof *h, cudaMemcpyHostToDevice), err);
	return 0;
}

static int download(float *h, const float *d, size_t n, pcg_err *err)
{
	CU_CHECK(cudaMemcpy(h, d, n * sizeof *h, cudaMemcpyDeviceToHost), err);
	return 0;
}

/* A row of logits of the given kind. Every finite logit is within 16 of the
 * largest or at least 1e4 below it: then every kept probability is a normal
 * f32 (>= e^-32 / 65537 at T = 0.5) and every far one is exactly 0 on both
 * sides, so the zero patterns can be compared exactly (a probability in
 * f32's subnormal range could round to 0 on one side only). */
static void fill(float *x, int n, enum kind kind, int row, pcg_rng *r)
{
	int i, ties, placed;

	switch (kind) {
	case RANDOM:
		for (i = 0; i < n; i++)
			x[i] = (float)(16.0 * pcg_rng_uniform(r) - 8.0);
		break;
	case QUANTISED: /* 0, -0.5, ..., -2.5; the zeros of either sign */
		for (i = 0; i < n; i++) {
			uint32_t level = pcg_rng_below(r, 6);
			x[i] = level == 0 && (pcg_rng_u32(r) & 1) ? 0.0f : -0.5f * (float)level;
		}
		break;
	case MASKED: /* a third -inf, a twentieth far below, one finite at least */
		for (i = 0; i < n; i++) {
			double u = pcg_rng_uniform(r);
			if (u < 1.0 / 3.0)
				x[i] = -INFINITY;
			else if (u < 1.0 / 3.0 + 0.05)
				x[i] = (float)(-1e4 - 1e3 * u);
			else
				x[i] = (float)(16.0 * pcg_rng_uniform(r) - 8.0);
		}
		x[n / 2] = 1.0f;
		break;
	case TIED_TOP: /* 2^j tokens at 3 (j by row), the others -inf or far */
		ties = row == 0 ? (n > 1024 ? 1024 : 256) : row == 1 ? 64 : 2;
		for (i = 0; i < n; i++)
			x[i] = (pcg_rng_u32(r) & 1) ? -INFINITY : -1e4f;
		for (placed = 0; placed < ties;) {
			i = (int)pcg_rng_below(r, (uint32_t)n);
			if (x[i] != 3.0f) {
				x[i] = 3.0f;
				placed++;
			}
		}
		break;
	}
}

static int ascending(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return (x > y) - (x < y);
}

/* The distance from 1 - top_p to the nearest cumulative mass of the CPU's
 * ascending walk (sampling.c's top_p: the tokens top-k kept, sorted, exp and
 * sums in double in that order; ties have equal masses, so their order does
 * not change the masses). INFINITY when top-p is off or has < 2 tokens.
 * *exact: every token with mass ties with the largest and the others have
 * mass 0, so that every mass and sum is exact on both sides. */
static double top_p_margin(const float *logits, int n, const pcg_sampling *s, float *x,
			   int *exact)
{
	double total = 0.0, cum = 0.0, cut = 1.0 - (double)s->top_p, max, margin = INFINITY;
	float kth = -INFINITY;
	int i, m = 0;

	*exact = 0;
	if (s->temperature == 0.0f || s->top_p >= 1.0f)
		return INFINITY;
	for (i = 0; i < n; i++)
		x[i] = logits[i] / s->temperature;
	if (s->top_k > 0 && s->top_k < n) {
		qsort(x, (size_t)n, sizeof *x, ascending);
		kth = x[n - s->top_k];
		for (i = 0; i < n; i++)
			x[i] = logits[i] / s->temperature;
	}
	for (i = 0; i < n; i++)
		if (x[i] > -INFINITY && x[i] >= kth)
			x[m++] = x[i];
	if (m < 2)
		return INFINITY;
	qsort(x, (size_t)m, sizeof *x, ascending);
	max = x[m - 1];
	*exact = 1;
	for (i = 0; i < m; i++) {
		total += exp(x[i] - max);
		*exact &= x[i] == max || exp(x[i] - max) == 0.0;
	}
	for (i = 0; i < m - 1; i++) {
		cum += exp(x[i] - max) / total;
		margin = fmin(margin, fabs(cum - cut));
	}
	return margin;
}

/* GPU row got against CPU row want. The GPU's masses differ from the CPU's
 * by summation order (each is a sum of up to 65,537 terms of total 1, off by
 * at most 65,536 x 2^-53 < 1e-11) and by its double exp (1 ulp). So when top_p_margin > KNIFE_EDGE the
 * kept sets must be equal. They must also be equal when the masses are
 * exact (top_p_margin's *exact), where the GPU repeats the CPU's sum over
 * the ties (sampling.cu's ties_removed). Otherwise the row is a knife edge:
 * the GPU must remove at least what the CPU removes at the float above
 * top_p (hi) and at most what it removes at the float below (lo).
 *
 * The bound on a kept probability p_i = e^d_i / sum_j e^d_j, d_i = x_i - max
 * with x = logit / T the same f32 bits on both sides: the GPU rounds d_i to
 * f32 (relative error of e^d_i: 2^-24 |d_i|), its expf is within 2 ulp
 * (2^-22), its double sum of those terms is off by their p-weighted mean
 * (2^-24 dbar + 2^-22, dbar = sum_j p_j |d_j|), and the quotient rounds to
 * f32 (2^-24); the CPU's exp and sum are in double and it rounds to f32
 * twice (2 x 2^-24). That is 2^-24 (|d_i| + dbar + 11); we allow twice it,
 * 2^-23 (|d_i| + dbar + 12). The outputs round once each from values that
 * sum to 1 within ~1e-11: |sum - 1| <= 2^-24 + 1e-11; we allow 2^-23. */
#define KNIFE_EDGE 1e-9 /* 100 times the GPU's error on a mass */

static void compare_row(const char *name, const float *logits, int n, const pcg_sampling *s,
			const float *want, const float *got, float *scratch)
{
	double margin, dbar = 0.0, sum = 0.0, worst = 0.0;
	float t = s->temperature, max;
	int i, exact, same = 1, first = -1, worst_i = -1;

	margin = top_p_margin(logits, n, s, scratch, &exact);
	for (i = 0; i < n && same; i++) {
		if ((got[i] == 0.0f) != (want[i] == 0.0f)) {
			same = 0;
			first = i;
		}
	}
	if (margin > KNIFE_EDGE || exact) {
		CHECKF(same, "%s: zero pattern differs from the CPU's at %d: GPU %.9g, CPU %.9g "
		       "(top-p margin %.3g)", name, first, got[first], want[first], margin);
	} else {
		pcg_sampling below = *s, above = *s;
		float *lo = malloc((size_t)n * sizeof *lo), *hi = malloc((size_t)n * sizeof *hi);
		pcg_err err;
		int between = 1;

		knife_edges++;
		below.top_p = nextafterf(s->top_p, 0.0f);
		above.top_p = nextafterf(s->top_p, 2.0f);
		CHECK(lo && hi);
		if (lo && hi && pcg_probs(logits, n, &below, lo, &err) == 0 &&
		    pcg_probs(logits, n, &above, hi, &err) == 0) {
			for (i = 0; i < n; i++)
				between &= (hi[i] != 0.0f || got[i] == 0.0f) &&
					   (got[i] != 0.0f || lo[i] == 0.0f);
			CHECKF(between, "%s: top-p margin %.3g, and the GPU's kept set is not "
			       "between the CPU's at the floats around top_p", name, margin);
		}
		free(lo);
		free(hi);
	}
	if (!same)
		return; /* (a knife edge) the probabilities differ by a token's mass */

	max = logits[pcg_argmax(logits, n)] / t;
	if (t == 0.0f || isinf(max)) {
		CHECKF(memcmp(got, want, (size_t)n * sizeof *got) == 0, "%s: one-hot differs", name);
		return;
	}
	for (i = 0; i < n; i++)
		if (want[i] > 0.0f)
			dbar += want[i] * fabs((double)(logits[i] / t) - max);
	for (i = 0; i < n; i++) {
		double d = fabs((double)(logits[i] / t) - max), e = fabs((double)got[i] - want[i]);
		if (want[i] > 0.0f && e > want[i] * ldexp(d + dbar + 12.0, -23) && e / want[i] > worst) {
			worst = e / want[i];
			worst_i = i;
		}
		sum += got[i];
	}
	CHECKF(worst_i < 0, "%s: entry %d: GPU %.9g, CPU %.9g (relative error %.2e)", name,
	       worst_i, worst_i < 0 ? 0.0 : got[worst_i], worst_i < 0 ? 0.0 : want[worst_i], worst);
	CHECKF(fabs(sum - 1.0) <= ldexp(1.0, -23), "%s: sums to 1 %+.3g", name, sum - 1.0);
	CHECKF(gpu_norm_err(got, want, (size_t)n) <= GPU_TOL_ELEMENTWISE,
	       "%s: normalised error %.3g", name, gpu_norm_err(got, want, (size_t)n));
}

/* rows x n logits through the GPU, out of place and in place, each row
 * against pcg_probs. */
static void check_case(const char *name, const float *logits, int rows, int n,
		       const pcg_sampling *s)
{
	size_t total = (size_t)rows * n, bytes = total * sizeof(float);
	float *want = malloc(bytes), *got = malloc(bytes), *again = malloc(bytes);
	float *scratch = malloc((size_t)n * sizeof *scratch);
	char row_name[256];
	pcg_err err;
	int r;

	cases++;
	CHECKF(want && got && again && scratch, "%s: out of memory", name);
	if (!(want && got && again && scratch))
		goto out;
	for (r = 0; r < rows; r++)
		CHECKF(pcg_probs(logits + (size_t)r * n, n, s, want + (size_t)r * n, &err) == 0,
		       "%s: CPU: %s", name, err.msg);

	CHECKF(upload(d_logits, logits, total, &err) == 0, "%s", err.msg);
	if (pcg_cuda_probs(d_logits, rows, n, s, d_probs, NULL, &err) < 0 ||
	    download(got, d_probs, total, &err) < 0) {
		CHECKF(0, "%s: %s", name, err.msg);
		goto out;
	}
	for (r = 0; r < rows; r++) {
		size_t o = (size_t)r * n;
		snprintf(row_name, sizeof row_name, "%s row %d", name, r);
		compare_row(row_name, logits + o, n, s, want + o, got + o, scratch);
	}

	/* In place: the same bits (and so the same on a second run). */
	if (upload(d_probs, logits, total, &err) < 0 ||
	    pcg_cuda_probs(d_probs, rows, n, s, d_probs, NULL, &err) < 0 ||
	    download(again, d_probs, total, &err) < 0) {
		CHECKF(0, "%s: in place: %s", name, err.msg);
		goto out;
	}
	CHECKF(memcmp(got, again, bytes) == 0, "%s: in place differs from out of place", name);
out:
	free(want);
	free(got);
	free(again);
	free(scratch);
}

/* Every combination of temps, top_ks and top_ps on ROWS rows of one kind. */
static void test_grid(enum kind kind, int n, pcg_rng *rng)
{
	float *x = malloc((size_t)ROWS * n * sizeof *x);
	size_t a, b, c;
	int r;

	CHECK(x != NULL);
	if (x == NULL)
		return;
	for (r = 0; r < ROWS; r++)
		fill(x + (size_t)r * n, n, kind, r, rng);
	for (a = 0; a < sizeof temps / sizeof temps[0]; a++)
		for (b = 0; b < sizeof top_ks / sizeof top_ks[0]; b++)
			for (c = 0; c < sizeof top_ps / sizeof top_ps[0]; c++) {
				pcg_sampling s = { temps[a], top_ks[b], top_ps[c] };
				char name[128];

				snprintf(name, sizeof name, "%s n=%d T=%g top_k=%d top_p=%g",
					 kind_name[kind], n, (double)s.temperature, s.top_k,
					 (double)s.top_p);
				check_case(name, x, ROWS, n, &s);
			}
	free(x);
}

/* The GPU's error for rows x n logits, which must be want. */
static void check_error(const char *name, const float *x, int rows, int n, const pcg_sampling *s,
			const char *want)
{
	pcg_err err = { "" };
	int rc = -1;

	if (rows > 0 && n > 0 && upload(d_logits, x, (size_t)rows * n, &err) < 0)
		CHECKF(0, "%s: %s", name, err.msg);
	else
		rc = pcg_cuda_probs(d_logits, rows, n, s, d_probs, NULL, &err);
	CHECKF(rc == -1 && strcmp(err.msg, want) == 0, "%s: rc %d, \"%s\", want \"%s\"", name, rc,
	       err.msg, want);
}

/* As check_error, where want is pcg_probs's error for the one row x. */
static void check_cpu_error(const char *name, const float *x, int n, const pcg_sampling *s)
{
	float *tmp = malloc((size_t)(n > 0 ? n : 1) * sizeof *tmp);
	pcg_err cpu = { "" };

	CHECK(tmp != NULL);
	if (tmp == NULL)
		return;
	CHECKF(pcg_probs(x, n, s, tmp, &cpu) == -1, "%s: the CPU accepts it", name);
	check_error(name, x, 1, n, s, cpu.msg);
	free(tmp);
}

static void test_errors(pcg_rng *rng)
{
	const int n = SPEECH_VOCAB;
	pcg_sampling s = { 0.8f, 50, 0.9f }, greedy = { 0.0f, 0, 1.0f };
	pcg_sampling bad_t = { -1.0f, 0, 1.0f }, nan_t = { NAN, 0, 1.0f }, bad_p = { 1.0f, 0, 0.0f };
	float *x = malloc(3 * (size_t)n * sizeof *x), one = NAN;
	pcg_err err = { "" };
	int r;

	CHECK(x != NULL);
	if (x == NULL)
		return;
	for (r = 0; r < 3; r++)
		fill(x + (size_t)r * n, n, RANDOM, r, rng);
	/* The second row has a NaN at its last index, the third a +inf: the
	 * first failing row is named. */
	x[2 * (size_t)n - 1] = NAN;
	x[2 * (size_t)n + 5] = INFINITY;
	check_error("NaN in row 1", x, 3, n, &s, "row 1: logit 65536 is NaN");
	check_error("NaN in row 1 at T = 0", x, 3, n, &greedy, "row 1: logit 65536 is NaN");
	/* One row, +inf at 5 before a NaN: pcg_probs's message, also at T = 0. */
	x[2 * (size_t)n + 6000] = NAN;
	check_cpu_error("+inf before NaN", x + 2 * (size_t)n, n, &s);
	check_cpu_error("+inf before NaN at T = 0", x + 2 * (size_t)n, n, &greedy);
	check_cpu_error("NaN at the last index", x + n, n, &s);
	/* All -inf: one row of each width, and the first of two rows. */
	for (r = 0; r < 2 * n; r++)
		x[r] = -INFINITY;
	check_cpu_error("all -inf, n = 65537", x, n, &s);
	check_cpu_error("all -inf, n = 7", x, 7, &s);
	check_cpu_error("all -inf, n = 1", x, 1, &greedy);
	x[1024 + 3] = 0.0f;
	check_error("all -inf in row 0 of 2", x, 2, 1024, &s, "row 0: all 1024 logits are -inf");
	check_cpu_error("NaN, n = 1", &one, 1, &s);
	/* Parameters and sizes, before any logit is read. */
	fill(x, n, RANDOM, 0, rng);
	check_cpu_error("T = -1", x, n, &bad_t);
	check_cpu_error("T = NaN", x, n, &nan_t);
	check_cpu_error("top_p = 0", x, n, &bad_p);
	check_cpu_error("n = 0", x, 0, &s);
	check_error("rows = -1", x, -1, n, &s, "-1 rows: must be >= 0");
	CHECKF(pcg_cuda_probs(d_logits, 0, n, &s, d_probs, NULL, &err) == 0, "rows = 0: %s",
	       err.msg);
	free(x);
}

/* Ties of -0 with +0 at the top; temperatures so small that logit / T
 * overflows; more rows than a verification block; a stream. */
static void test_edges(pcg_rng *rng)
{
	static const float zeros[5] = { -1.0f, -0.0f, 0.0f, -0.0f, -2.0f };
	static const float tiny_t[] = { 1e-30f, 1e-38f, 1e-45f };
	const size_t many = (size_t)MANY_ROWS * 1024;
	float *x = malloc(many * sizeof *x), *a = malloc(many * sizeof *a), *b = malloc(many * sizeof *b);
	cudaStream_t stream = NULL;
	pcg_sampling s;
	char name[128];
	pcg_err err;
	size_t i, j, k;
	int r;

	CHECK(x && a && b);
	if (!(x && a && b))
		goto out;
	for (i = 0; i < sizeof temps / sizeof temps[0]; i++)
		for (j = 0; j < 4; j++)
			for (k = 0; k < sizeof top_ps / sizeof top_ps[0]; k++) {
				s = (pcg_sampling){ temps[i], (int)j, top_ps[k] };
				snprintf(name, sizeof name, "-0 and +0 T=%g top_k=%d top_p=%g",
					 (double)s.temperature, s.top_k, (double)s.top_p);
				check_case(name, zeros, 1, 5, &s);
			}

	/* The largest logit / T overflows to +inf: one-hot at the first argmax,
	 * as on the CPU; 1e-30 stays finite. */
	fill(x, 1024, RANDOM, 0, rng);
	for (i = 0; i < sizeof tiny_t / sizeof tiny_t[0]; i++) {
		s = (pcg_sampling){ tiny_t[i], 50, 0.9f };
		snprintf(name, sizeof name, "T=%g", (double)s.temperature);
		check_case(name, x, 1, 1024, &s);
	}
	/* All logits negative and the largest / T overflowing to -inf: sampling.h
	 * says T then acts as 0, so one-hot at the first argmax (checked on the
	 * GPU alone). */
	for (r = 0; r < 1024; r++)
		x[r] = -1.0f - (float)(r % 7);
	x[300] = x[700] = -0.5f;
	s = (pcg_sampling){ 1e-45f, 0, 1.0f };
	if (upload(d_logits, x, 1024, &err) < 0 ||
	    pcg_cuda_probs(d_logits, 1, 1024, &s, d_probs, NULL, &err) < 0 ||
	    download(a, d_probs, 1024, &err) < 0) {
		CHECKF(0, "largest / T = -inf: %s", err.msg);
	} else {
		int hot = 1;
		for (r = 0; r < 1024; r++)
			hot &= a[r] == (r == 300 ? 1.0f : 0.0f);
		CHECKF(hot, "largest / T = -inf: not one-hot at index 300");
	}

	/* More rows than a verification block. */
	for (r = 0; r < MANY_ROWS; r++)
		fill(x + (size_t)r * 1024, 1024, r % 2 ? QUANTISED : RANDOM, r, rng);
	s = (pcg_sampling){ 0.8f, 50, 0.9f };
	check_case("40 rows T=0.8 top_k=50 top_p=0.9", x, MANY_ROWS, 1024, &s);
	s = (pcg_sampling){ 1.0f, 0, 0.5f };
	check_case("40 rows T=1 top_p=0.5", x, MANY_ROWS, 1024, &s);

	/* A stream of our own: the same bits as the default stream. */
	if (upload(d_logits, x, many, &err) < 0 ||
	    pcg_cuda_probs(d_logits, MANY_ROWS, 1024, &s, d_probs, NULL, &err) < 0 ||
	    download(a, d_probs, many, &err) < 0) {
		CHECKF(0, "default stream: %s", err.msg);
		goto out;
	}
	CHECK(cudaStreamCreate(&stream) == cudaSuccess);
	CHECKF(pcg_cuda_probs(d_logits, MANY_ROWS, 1024, &s, d_probs, stream, &err) == 0, "stream: %s",
	       err.msg);
	CHECKF(download(b, d_probs, many, &err) == 0, "%s", err.msg);
	CHECK(memcmp(a, b, many * sizeof *a) == 0);
	CHECK(cudaStreamDestroy(stream) == cudaSuccess);
out:
	free(x);
	free(a);
	free(b);
}

/* Microseconds per call for BENCH_ROWS x 65,537 logits (printed only). */
static void bench(const pcg_sampling *s, pcg_rng *rng)
{
	const int n = SPEECH_VOCAB, calls = 20;
	float *x = malloc((size_t)BENCH_ROWS * n * sizeof *x);
	struct timespec t0, t1;
	pcg_err err;
	int r, ok = 1;

	CHECK(x != NULL);
	if (x == NULL)
		return;
	for (r = 0; r < BENCH_ROWS; r++)
		fill(x + (size_t)r * n, n, RANDOM, r, rng);
	ok = upload(d_logits, x, (size_t)BENCH_ROWS * n, &err) == 0 &&
	     pcg_cuda_probs(d_logits, BENCH_ROWS, n, s, d_probs, NULL, &err) == 0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (r = 0; ok && r < calls; r++)
		ok = pcg_cuda_probs(d_logits, BENCH_ROWS, n, s, d_probs, NULL, &err) == 0;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	CHECKF(ok, "bench: %s", err.msg);
	if (ok)
		printf("pcg_cuda_probs: %d x %d, T %g, top_k %d, top_p %g: %.1f us per call\n",
		       BENCH_ROWS, n, (double)s->temperature, s->top_k, (double)s->top_p,
		       ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / 1e3 / calls);
	free(x);
}

int main(void)
{
	static const int widths[] = { 1, 7, 1024, SPEECH_VOCAB };
	pcg_sampling typical = { 0.8f, 50, 0.9f }, wide = { 1.0f, 0, 0.9f };
	pcg_err err;
	pcg_rng rng;
	size_t w;

	gpu_require("test_sampling");
	pcg_rng_init(&rng, 20261122, 0);
	if (pcg_cuda_alloc((void **)&d_logits, BUF_FLOATS * sizeof(float), "logits", &err) < 0 ||
	    pcg_cuda_alloc((void **)&d_probs, BUF_FLOATS * sizeof(float), "probs", &err) < 0) {
		fprintf(stderr, "test_sampling: %s\n", err.msg);
		return 1;
	}
	for (w = 0; w < sizeof widths / sizeof widths[0]; w++) {
		test_grid(RANDOM, widths[w], &rng);
		if (widths[w] >= 7) {
			test_grid(QUANTISED, widths[w], &rng);
			test_grid(MASKED, widths[w], &rng);
		}
		if (widths[w] >= 1024)
			test_grid(TIED_TOP, widths[w], &rng);
	}
	test_errors(&rng);
	test_edges(&rng);
	printf("%d cases; %d rows at a top-p knife edge (margin <= %g)\n", cases, knife_edges,
	       KNIFE_EDGE);
	bench(&typical, &rng);
	bench(&wide, &rng);
	CHECK(cudaFree(d_logits) == cudaSuccess);
	CHECK(cudaFree(d_probs) == cudaSuccess);
	return check_done("test_sampling");
}
