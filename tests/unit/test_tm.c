/* test_tm.c: the token transition matrix. Every Q(a, b) of a small corpus
 * against a direct count; pruning by hand; the dense block; a corpus larger
 * than the counter's buffer; the file round trip (memory, file, mmap);
 * corrupt, truncated and crafted files rejected with a message naming the
 * problem; and a bounded mutation loop that must never crash (this test
 * also runs under ASan and UBSan).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "tm.h"

/* Direct Q(a, b) from the corpus, counted pair by pair. */
static double direct_q(const uint32_t *const *seqs, const size_t *lens, int ns, uint32_t n,
		       double alpha, uint32_t a, uint32_t b)
{
	double cab = 0, ca = 0;

	for (int s = 0; s < ns; s++)
		for (size_t i = 1; i < lens[s]; i++)
			if (seqs[s][i - 1] == a) {
				ca++;
				cab += seqs[s][i] == b;
			}
	return (cab + alpha) / (ca + alpha * n);
}

static uint32_t rnd(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return (uint32_t)(*s >> 33);
}

static int has(const char *msg, const char *want)
{
	return strstr(msg, want) != NULL;
}

/* Rewrites the checksum of an image after a crafted edit (FNV-1a as tm.c). */
static void reseal(unsigned char *b, size_t size)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i + 8 <= size; i += 8) {
		uint64_t w;
		memcpy(&w, b + i, 8);
		if (i == 56)
			w = 0;
		h = (h ^ w) * 0x100000001b3ull;
	}
	memcpy(b + 56, &h, 8);
}

static void test_counts(void)
{
	static const uint32_t s0[] = { 0, 1, 2, 1, 2, 3 }, s1[] = { 3, 3, 3, 0 }, s2[] = { 4 },
			      s3[] = { 1, 2 };
	const uint32_t *seqs[] = { s0, s1, s2, s3 };
	size_t lens[] = { 6, 4, 1, 2 };
	const uint32_t n = 6; /* token 5 never appears: its row is uniform */
	const double alpha = 0.5;
	pcg_err err = { "" };
	tm_counter *c = tm_counter_new(n, &err);
	tmat *t;

	CHECK(c != NULL);
	for (int s = 0; s < 4; s++)
		CHECK(tm_counter_add(c, seqs[s], lens[s], &err) == 0);
	{
		uint32_t badseq[] = { 1, 2, 6 };
		CHECK(tm_counter_add(c, badseq, 3, &err) < 0);
		CHECKF(has(err.msg, "token 3: id 6 out of range"), "%s", err.msg);
	}
	CHECK(tm_counter_sequences(c) == 4);
	CHECK(tm_counter_bigrams(c) == 5 + 3 + 0 + 1);
	t = tm_counter_finish(c, alpha, 0, &err);
	tm_counter_free(&c);
	CHECK(c == NULL);
	CHECKF(t != NULL, "%s", err.msg);
	if (t == NULL)
		return;
	CHECK(tm_get(t)->nnz == 6); /* 01 12 21 23 33 30 */
	CHECK(tm_get(t)->total == 9);
	for (uint32_t a = 0; a < n; a++) {
		double rs = 0;
		for (uint32_t b = 0; b < n; b++) {
			double want = direct_q(seqs, lens, 4, n, alpha, a, b);
			double got = exp(tm_logq(t, a, b));
			rs += got;
			/* One division and a log/exp round trip: 1e-12 relative. */
			CHECKF(fabs(got - want) <= 1e-12 * want, "Q(%u,%u) = %.17g, want %.17g", a,
			       b, got, want);
		}
		CHECKF(fabs(rs - 1.0) < 1e-12, "row %u sums to %.17g", a, rs);
	}
	/* The dense block, with repeats and any order. */
	{
		uint32_t tok[] = { 3, 1, 5, 3, 0 };
		double out[25];
		CHECK(tm_submatrix(t, tok, 5, out, &err) == 0);
		for (int i = 0; i < 5; i++)
			for (int j = 0; j < 5; j++)
				CHECK(out[i * 5 + j] == tm_logq(t, tok[i], tok[j]));
		tok[2] = 6;
		CHECK(tm_submatrix(t, tok, 5, out, &err) < 0);
		CHECKF(has(err.msg, "token 6 at 2"), "%s", err.msg);
	}
	tm_close(&t);
	CHECK(t == NULL);
}

static void test_prune(void)
{
	/* Row 0: counts 1 (col 1), 5 (col 2), 3 (col 3), 3 (col 4). Prune 2
	 * keeps cols 2 and 3 (the tie 3/3 goes to the lower id), total 8. */
	uint64_t rs[] = { 0, 4, 4, 4, 4, 4 };
	uint32_t col[] = { 1, 2, 3, 4 };
	uint64_t cnt[] = { 1, 5, 3, 3 };
	pcg_err err = { "" };
	tmat *t = tm_from_counts(5, 1.0, 2, rs, col, cnt, &err);

	CHECKF(t != NULL, "%s", err.msg);
	if (t == NULL)
		return;
	CHECK(tm_get(t)->nnz == 2 && tm_get(t)->prune == 2);
	CHECK(tm_get(t)->row_total[0] == 8);
	CHECK(tm_get(t)->col[0] == 2 && tm_get(t)->col[1] == 3);
	CHECK(fabs(exp(tm_logq(t, 0, 2)) - 6.0 / 13) < 1e-12);
	CHECK(fabs(exp(tm_logq(t, 0, 4)) - 1.0 / 13) < 1e-12);
	CHECK(fabs(exp(tm_logq(t, 1, 4)) - 1.0 / 5) < 1e-12);
	tm_close(&t);
	/* Bad input to the maker. */
	cnt[0] = 0;
	CHECK(tm_from_counts(5, 1.0, 0, rs, col, cnt, &err) == NULL);
	CHECKF(has(err.msg, "row 0"), "%s", err.msg);
	cnt[0] = 1;
	CHECK(tm_from_counts(5, 0.0, 0, rs, col, cnt, &err) == NULL);
	CHECKF(has(err.msg, "alpha"), "%s", err.msg);
	col[1] = 1;
	CHECK(tm_from_counts(5, 1.0, 0, rs, col, cnt, &err) == NULL);
	CHECKF(has(err.msg, "not ascending"), "%s", err.msg);
}

/* A random TM of n tokens, its image copied to *img. */
static tmat *random_tm(uint32_t n, uint64_t seed, unsigned char **img, size_t *size)
{
	pcg_err err = { "" };
	tm_counter *c = tm_counter_new(n, &err);
	uint64_t s = seed;
	uint32_t seq[64];
	tmat *t;

	for (int k = 0; k < 40; k++) {
		size_t len = rnd(&s) % 64;
		for (size_t i = 0; i < len; i++)
			seq[i] = rnd(&s) % n;
		tm_counter_add(c, seq, len, &err);
	}
	t = tm_counter_finish(c, 0.25, 0, &err);
	tm_counter_free(&c);
	if (t && img) {
		const char *path;
		char p[4096];
		FILE *f;
		snprintf(p, sizeof p, "%s/img.tm", check_tmpdir());
		path = p;
		if (tm_write(t, path, &err) == 0 && (f = fopen(path, "rb")) != NULL) {
			*size = tm_get(t)->bytes;
			*img = malloc(*size);
			if (fread(*img, 1, *size, f) != *size)
				*size = 0;
			fclose(f);
		}
	}
	return t;
}

static void expect_reject(const unsigned char *b, size_t size, const char *want)
{
	pcg_err err = { "" };
	tmat *t = tm_from_memory(b, size, "x.tm", &err);
	CHECKF(t == NULL && has(err.msg, want) && has(err.msg, "x.tm: "),
	       "want '%s', got '%s'", want, t ? "accepted" : err.msg);
	tm_close(&t);
}

static void test_file(void)
{
	unsigned char *img = NULL, *b;
	size_t size = 0;
	pcg_err err = { "" };
	char path[4096];
	tmat *t = random_tm(37, 7, &img, &size), *u;

	CHECK(t != NULL && img != NULL && size == tm_get(t)->bytes);
	if (t == NULL || img == NULL)
		return;
	/* Round trip: the written file opens by mmap with every Q the same. */
	snprintf(path, sizeof path, "%s/img.tm", check_tmpdir());
	u = tm_open(path, &err);
	CHECKF(u != NULL, "%s", err.msg);
	if (u) {
		int same = 1;
		for (uint32_t a = 0; a < 37; a++)
			for (uint32_t b2 = 0; b2 < 37; b2++)
				same &= tm_logq(t, a, b2) == tm_logq(u, a, b2);
		CHECK(same);
		CHECK(tm_get(u)->checksum == tm_get(t)->checksum);
		tm_close(&u);
	}
	snprintf(path, sizeof path, "%s/missing/x.tm", check_tmpdir());
	CHECK(tm_write(t, path, &err) < 0);
	CHECK(tm_open(path, &err) == NULL);
	CHECKF(has(err.msg, "No such file"), "%s", err.msg);

	b = malloc(size);
	/* Truncated, extended, short, foreign. */
	expect_reject(img, size - 8, "truncated or extended");
	expect_reject(img, 10, "too short");
	memcpy(b, img, size);
	b[0] = 'X';
	expect_reject(b, size, "bad magic");
	memcpy(b, img, size);
	b[8] = 2;
	expect_reject(b, size, "version 2");
	/* One flipped bit in the data: the checksum. */
	memcpy(b, img, size);
	b[size - 20] ^= 4;
	expect_reject(b, size, "checksum mismatch");
	/* Crafted with a valid checksum: each field checked. */
	{
		const tm_view *v = tm_get(t);
		size_t rt = 64 + 8 * (v->n + 1), cn = rt + 8 * v->n, co = cn + 8 * v->nnz;
		uint64_t x;
		double al;
		uint32_t y;

		memcpy(b, img, size);
		al = NAN;
		memcpy(b + 24, &al, 8);
		reseal(b, size);
		expect_reject(b, size, "alpha");
		memcpy(b, img, size);
		y = 0;
		memcpy(b + 12, &y, 4);
		reseal(b, size);
		expect_reject(b, size, "n = 0");
		memcpy(b, img, size);
		y = 1000;
		memcpy(b + 12, &y, 4);
		reseal(b, size);
		expect_reject(b, size, "need");
		memcpy(b, img, size);
		y = 99;
		memcpy(b + co, &y, 4);
		reseal(b, size);
		expect_reject(b, size, "out of range");
		memcpy(b, img, size);
		memcpy(&y, b + co + 4, 4); /* column 1 of row 0 equal to column 0 */
		memcpy(b + co, &y, 4);
		reseal(b, size);
		expect_reject(b, size, "not ascending");
		memcpy(b, img, size);
		memcpy(&x, b + rt, 8);
		x++;
		memcpy(b + rt, &x, 8);
		reseal(b, size);
		expect_reject(b, size, "row 0: total");
		memcpy(b, img, size);
		x = 0;
		memcpy(b + cn, &x, 8);
		reseal(b, size);
		expect_reject(b, size, "count 0");
		memcpy(b, img, size);
		x = (uint64_t)1 << 60;
		memcpy(b + 64 + 8, &x, 8);
		reseal(b, size);
		expect_reject(b, size, "row 0: offsets");
		memcpy(b, img, size);
		memcpy(&x, b + 40, 8);
		x += 1;
		memcpy(b + 40, &x, 8);
		reseal(b, size);
		expect_reject(b, size, "header total");
		memcpy(b, img, size);
		y = 1;
		memcpy(b + 16, &y, 4);
		reseal(b, size);
		expect_reject(b, size, "above prune");
	}
	/* Mutations: random bytes changed, checksum resealed half the time.
	 * Whatever the verdict, no crash, and an accepted image answers queries. */
	{
		uint64_t s = 99;
		int accepted = 0;
		for (int it = 0; it < 3000; it++) {
			tmat *m;
			memcpy(b, img, size);
			for (int e = 1 + rnd(&s) % 4; e > 0; e--)
				b[rnd(&s) % size] = (unsigned char)rnd(&s);
			if (rnd(&s) & 1)
				reseal(b, size);
			m = tm_from_memory(b, size - (rnd(&s) % 16 == 0 ? rnd(&s) % size : 0), "m",
					   &err);
			if (m) {
				accepted++;
				const tm_view *v = tm_get(m);
				double q = tm_logq(m, v->n - 1, 0);
				CHECK(q <= 0.0 && isfinite(q));
				tm_close(&m);
			} else {
				CHECK(err.msg[0] != 0);
			}
		}
		printf("mutations: %d of 3000 accepted\n", accepted);
	}
	free(b);
	free(img);
	tm_close(&t);
}

/* More bigrams than the counter's pending buffer (2^20) holds, so its
 * sort-and-merge runs several times: the counts must equal a dense tally. */
static void test_many(void)
{
	enum { N = 40, LEN = 2600000 };
	uint32_t *seq = malloc(LEN * sizeof *seq);
	uint64_t *dense = calloc(N * N, sizeof *dense), s = 5;
	pcg_err err = { "" };
	tm_counter *c = tm_counter_new(N, &err);
	tmat *t;
	int same = 1;

	for (size_t i = 0; i < LEN; i++)
		seq[i] = rnd(&s) % (1 + rnd(&s) % N); /* skewed to low ids */
	/* Three sequences: no bigram across their ends. */
	CHECK(tm_counter_add(c, seq, 1000000, &err) == 0);
	CHECK(tm_counter_add(c, seq + 1000000, 1500000, &err) == 0);
	CHECK(tm_counter_add(c, seq + 2500000, LEN - 2500000, &err) == 0);
	for (size_t i = 1; i < LEN; i++)
		if (i != 1000000 && i != 2500000)
			dense[seq[i - 1] * N + seq[i]]++;
	CHECK(tm_counter_bigrams(c) == LEN - 3);
	t = tm_counter_finish(c, 1.0, 0, &err);
	tm_counter_free(&c);
	CHECKF(t != NULL, "%s", err.msg);
	if (t) {
		const tm_view *v = tm_get(t);
		for (uint32_t a = 0; a < N; a++) {
			uint64_t k = v->row_start[a];
			for (uint32_t b = 0; b < N; b++) {
				uint64_t got = 0;
				if (k < v->row_start[a + 1] && v->col[k] == b)
					got = v->cnt[k++];
				same &= got == dense[a * N + b];
			}
			same &= k == v->row_start[a + 1];
		}
		CHECK(same);
		CHECK(v->total == LEN - 3);
		tm_close(&t);
	}
	free(seq);
	free(dense);
}

int main(void)
{
	test_counts();
	test_many();
	test_prune();
	test_file();
	return check_done("test_tm");
}
