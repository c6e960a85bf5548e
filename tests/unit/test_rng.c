/* test_rng.c: Philox4x32-10 against its published known answers, the
 * stream layout rng.h documents, and statistical checks of the draws with
 * fixed seeds (each at significance 0.001, so a correct generator fails one
 * with probability 0.001 per seed; the seeds are fixed, so the result is
 * deterministic and was checked to pass).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "rng.h"

/* Known answers from Random123's tests/kat_vectors (D. E. Shaw Research,
 * github.com/DEShawResearch/random123), the three "philox4x32 10" lines;
 * columns: counter (4 words), key (2 words), expected output (4 words).
 *   philox4x32 10 00000000 00000000 00000000 00000000 00000000 00000000   6627e8d5 e169c58d bc57ac4c 9b00dbd8
 *   philox4x32 10 ffffffff ffffffff ffffffff ffffffff ffffffff ffffffff   408f276d 41c83b0e a20bc7c6 6d5451fd
 *   philox4x32 10 243f6a88 85a308d3 13198a2e 03707344 a4093822 299f31d0   d16cfe09 94fdcceb 5001e420 24126ea1
 */
static const struct {
	uint32_t ctr[4], key[2], out[4];
} kats[] = {
	{ { 0x00000000, 0x00000000, 0x00000000, 0x00000000 }, { 0x00000000, 0x00000000 },
	  { 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8 } },
	{ { 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff }, { 0xffffffff, 0xffffffff },
	  { 0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd } },
	{ { 0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344 }, { 0xa4093822, 0x299f31d0 },
	  { 0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1 } },
};

/* Upper 0.999 quantiles of chi-square, computed by bisection on the
 * regularised incomplete gamma function (torch.special.gammainc, float64);
 * chi2(2) is exactly -2 ln 0.001. */
#define CHI2_2_Q999   13.8155
#define CHI2_5_Q999   20.5150
#define CHI2_255_Q999 330.520
/* Two-sided 0.001 quantile of the standard normal. */
#define Z_Q9995 3.2905

static void test_kats(void)
{
	size_t i;
	uint32_t out[4];

	for (i = 0; i < sizeof kats / sizeof kats[0]; i++) {
		pcg_philox4x32_10(kats[i].ctr, kats[i].key, out);
		CHECKF(memcmp(out, kats[i].out, sizeof out) == 0,
		       "kat %zu: got %08x %08x %08x %08x", i, out[0], out[1], out[2], out[3]);
	}
}

/* The words of a stream are blocks (block, stream) under key seed, in order. */
static void test_layout(void)
{
	uint64_t seed = 0x0123456789abcdefull, stream = 0xfedcba9876543210ull;
	uint32_t key[2] = { 0x89abcdef, 0x01234567 };
	uint32_t ctr[4] = { 0, 0, 0x76543210, 0xfedcba98 };
	uint32_t out[4];
	pcg_rng r, fork;
	uint64_t b;
	int w, same = 1;

	pcg_rng_init(&r, seed, stream);
	for (b = 0; b < 3; b++) {
		ctr[0] = (uint32_t)b;
		pcg_philox4x32_10(ctr, key, out);
		for (w = 0; w < 4; w++)
			same &= pcg_rng_u32(&r) == out[w];
	}
	CHECK(same);

	/* The high half of the block index is counter word 1. */
	r.block = 0x100000002ull;
	r.avail = 0;
	ctr[0] = 2;
	ctr[1] = 1;
	pcg_philox4x32_10(ctr, key, out);
	CHECK(pcg_rng_u32(&r) == out[0]);

	/* Copying forks: both copies give the same draws from here on. */
	pcg_rng_init(&r, 7, 3);
	pcg_rng_u32(&r);
	fork = r;
	same = 1;
	for (w = 0; w < 100; w++)
		same &= pcg_rng_u32(&r) == pcg_rng_u32(&fork);
	CHECK(same);
}

/* The uniform is the documented function of the next two words. */
static void test_uniform_format(void)
{
	pcg_rng r, words;
	int i, ok = 1, in_range = 1;

	pcg_rng_init(&r, 42, 0);
	words = r;
	for (i = 0; i < 1000; i++) {
		uint32_t a = pcg_rng_u32(&words), b = pcg_rng_u32(&words);
		double want = ((double)(a >> 5) * 67108864.0 + (double)(b >> 6)) / 9007199254740992.0;
		double u = pcg_rng_uniform(&r);

		ok &= u == want;
		in_range &= u >= 0.0 && u < 1.0;
	}
	CHECK(ok);
	CHECK(in_range);
}

static void test_uniform_at(void)
{
	static const uint64_t seeds[] = { 0, 1, 0xdeadbeefcafef00dull };
	static const uint64_t streams[] = { 0, 5, 0xffffffffffffffffull };
	size_t s, t;
	pcg_rng r;
	uint64_t i;
	int ok = 1;

	for (s = 0; s < 3; s++) {
		for (t = 0; t < 3; t++) {
			pcg_rng_init(&r, seeds[s], streams[t]);
			for (i = 0; i < 1001; i++)
				ok &= pcg_rng_uniform(&r) == pcg_rng_uniform_at(seeds[s], streams[t], i);
		}
	}
	CHECK(ok);

	/* Far out: uniform 2^40 + 1 is words 2 and 3 of block 2^39. */
	pcg_rng_init(&r, 9, 4);
	r.block = 1ull << 39;
	pcg_rng_u32(&r);
	pcg_rng_u32(&r);
	CHECK(pcg_rng_uniform(&r) == pcg_rng_uniform_at(9, 4, (1ull << 40) + 1));
}

/* Seeds and streams differ in every word of the key and counter they use. */
static void test_distinct(void)
{
	static const uint64_t pairs[][2] = {
		{ 0, 0 }, { 1, 0 }, { 0, 1 }, { 1ull << 32, 0 }, { 0, 1ull << 32 }, { 1, 1 },
	};
	uint32_t first[6][8];
	size_t i, j;
	int k;

	for (i = 0; i < 6; i++) {
		pcg_rng r;
		pcg_rng_init(&r, pairs[i][0], pairs[i][1]);
		for (k = 0; k < 8; k++)
			first[i][k] = pcg_rng_u32(&r);
	}
	for (i = 0; i < 6; i++)
		for (j = i + 1; j < 6; j++)
			CHECKF(memcmp(first[i], first[j], sizeof first[i]) != 0,
			       "(seed, stream) pairs %zu and %zu give the same draws", i, j);
}

static double chi_square(const long *count, int bins, double expected)
{
	double x2 = 0.0;
	int b;

	for (b = 0; b < bins; b++)
		x2 += (count[b] - expected) * (count[b] - expected) / expected;
	return x2;
}

/* 2^20 uniforms into 256 equal bins, by their top 8 bits and by the lowest
 * 8 of their 53 bits (which come from the second word): H0 uniform gives
 * chi2(255); reject above its 0.999 quantile. */
static void test_chi_square_uniform(void)
{
	enum { N = 1 << 20, BINS = 256 };
	static long top[BINS], low[BINS];
	pcg_rng r;
	double x2_top, x2_low;
	int i;

	pcg_rng_init(&r, 20240611, 0);
	for (i = 0; i < N; i++) {
		double u = pcg_rng_uniform(&r);
		uint64_t bits = (uint64_t)(u * 9007199254740992.0);

		top[(int)(u * BINS)]++;
		low[bits & (BINS - 1)]++;
	}
	x2_top = chi_square(top, BINS, (double)N / BINS);
	x2_low = chi_square(low, BINS, (double)N / BINS);
	CHECKF(x2_top < CHI2_255_Q999, "top bits: chi2 = %.1f", x2_top);
	CHECKF(x2_low < CHI2_255_Q999, "low bits: chi2 = %.1f", x2_low);
	printf("uniform chi2(255): top bits %.1f, low bits %.1f (reject > %.1f)\n",
	       x2_top, x2_low, CHI2_255_Q999);
}

/* Lag-k correlation of 2^20 draws: under independence r * sqrt(N) is about
 * N(0, 1), so |r| sqrt(N) > 3.29 rejects at 0.001 (two-sided). Lags 1..4 of
 * the words cover neighbours inside a block and across blocks; lag 1 of the
 * uniforms covers consecutive pairs of words. */
static double lag_correlation(const double *x, int n, int lag)
{
	double mx = 0.0, sxx = 0.0, sxy = 0.0;
	int i;

	for (i = 0; i < n; i++)
		mx += x[i];
	mx /= n;
	for (i = 0; i < n; i++)
		sxx += (x[i] - mx) * (x[i] - mx);
	for (i = 0; i + lag < n; i++)
		sxy += (x[i] - mx) * (x[i + lag] - mx);
	return sxy / sxx;
}

static void test_serial_correlation(void)
{
	enum { N = 1 << 20 };
	double *x = malloc(N * sizeof *x);
	pcg_rng r;
	int i, lag;
	double z;

	if (x == NULL) {
		CHECK(!"out of memory");
		return;
	}
	pcg_rng_init(&r, 977, 1);
	for (i = 0; i < N; i++)
		x[i] = pcg_rng_uniform(&r);
	z = fabs(lag_correlation(x, N, 1)) * sqrt((double)N);
	CHECKF(z < Z_Q9995, "uniforms, lag 1: |r| sqrt(N) = %.2f", z);

	pcg_rng_init(&r, 977, 2);
	for (i = 0; i < N; i++)
		x[i] = pcg_rng_u32(&r);
	for (lag = 1; lag <= 4; lag++) {
		z = fabs(lag_correlation(x, N, lag)) * sqrt((double)N);
		CHECKF(z < Z_Q9995, "words, lag %d: |r| sqrt(N) = %.2f", lag, z);
	}
	free(x);
}

/* pcg_rng_below: 6 faces, and n = 3 * 2^30 in thirds. For the latter a plain
 * x % n would put half the mass in the first third (2^32 = n + 2^30), so a
 * chi2(2) test at 0.001 sees any modulo bias at once. */
static void test_below(void)
{
	enum { N = 600000 };
	long dice[6] = { 0 }, thirds[3] = { 0 };
	uint32_t big = 3u << 30;
	pcg_rng r;
	int i, in_range = 1;
	double x2;

	pcg_rng_init(&r, 31337, 0);
	for (i = 0; i < N; i++) {
		uint32_t d = pcg_rng_below(&r, 6), t = pcg_rng_below(&r, big);

		in_range &= d < 6 && t < big;
		dice[d < 6 ? d : 0]++;
		thirds[t >> 30 < 3 ? t >> 30 : 0]++;
	}
	CHECK(in_range);
	x2 = chi_square(dice, 6, N / 6.0);
	CHECKF(x2 < CHI2_5_Q999, "n = 6: chi2 = %.2f", x2);
	x2 = chi_square(thirds, 3, N / 3.0);
	CHECKF(x2 < CHI2_2_Q999, "n = 3 * 2^30: chi2 = %.2f", x2);

	CHECK(pcg_rng_below(&r, 1) == 0);
	CHECK(pcg_rng_below(&r, 0) == 0);
	CHECK(pcg_rng_below(&r, 0xffffffffu) < 0xffffffffu);
}

int main(void)
{
	test_kats();
	test_layout();
	test_uniform_format();
	test_uniform_at();
	test_distinct();
	test_chi_square_uniform();
	test_serial_correlation();
	test_below();
	return check_done("test_rng");
}
