/* test_asg.c: asg_build against a brute-force computation in double on
 * small matrices (threshold, top-k, merging, both weightings, zero and
 * duplicate rows, tilings and thread counts), asg_from_groups' input checks,
 * the file round trip, and the rejection of corrupt and crafted files
 * (every single-byte change, truncation, and structural mutations with a
 * valid checksum; this test also runs under ASan and UBSan).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "asg_build.h"
#include "check.h"
#include "device.h"
#include "rng.h"
#include "rows.h"

static int has(const pcg_err *e, const char *word)
{
	return strstr(e->msg, word) != NULL;
}

/* ---- brute force ---- */

typedef struct brute {
	int M;
	uint64_t *start;    /* [M + 1] */
	uint32_t *members;
	double *w;          /* per member entry */
	int ambiguous;      /* a cosine within 1e-6 of theta, or of a top-k cut (f32 products are good to ~1e-7 here) */
} brute;

static int cmp_desc_sim(const void *a, const void *b, void *ctx)
{
	const double *cs = ctx;
	int x = *(const int *)a, y = *(const int *)b;
	if (cs[x] != cs[y])
		return cs[x] > cs[y] ? -1 : 1;
	return (x > y) - (x < y);
}

/* Simple insertion sort with a context, to keep this independent of the
 * qsort the code under test uses. */
static void sort_ctx(int *v, int m, int (*cmp)(const void *, const void *, void *), void *ctx)
{
	for (int i = 1; i < m; i++)
		for (int j = i; j > 0 && cmp(&v[j - 1], &v[j], ctx) > 0; j--) {
			int t = v[j]; v[j] = v[j - 1]; v[j - 1] = t;
		}
}

static int cmp_int(const void *a, const void *b, void *ctx)
{
	(void)ctx;
	return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b);
}

/* Eq. 1 in double, the top-k cut, merging in first-generator order, and
 * the weights (Eq. 3, or the mean cosine over generators, normalised). */
static brute brute_force(const float *E, int n, int d, double theta, int topk, int similarity)
{
	brute b = { 0 };
	double *cs = malloc((size_t)n * n * sizeof *cs), *norm = calloc(n, sizeof *norm);
	int **G = calloc(n, sizeof *G), *len = calloc(n, sizeof *len), *gof = calloc(n, sizeof *gof);
	int *first = calloc(n, sizeof *first), *N = calloc(n, sizeof *N);
	int M = 0;

	for (int t = 0; t < n; t++) {
		for (int i = 0; i < d; i++)
			norm[t] += (double)E[t * d + i] * E[t * d + i];
		norm[t] = sqrt(norm[t]);
	}
	for (int t = 0; t < n; t++)
		for (int u = 0; u < n; u++) {
			double s = 0;
			for (int i = 0; i < d; i++)
				s += (double)E[t * d + i] * E[u * d + i];
			cs[(size_t)t * n + u] = norm[t] > 0 && norm[u] > 0 ? s / (norm[t] * norm[u]) : 0;
		}
	for (int t = 0; t < n; t++) {
		double *row = cs + (size_t)t * n;
		G[t] = malloc(n * sizeof **G);
		G[t][len[t]++] = t;
		for (int u = 0; u < n; u++) {
			if (u == t)
				continue;
			if (fabs(row[u] - theta) < 1e-6)
				b.ambiguous++;
			if (row[u] > theta)
				G[t][len[t]++] = u;
		}
		if (topk > 0 && len[t] > topk) {
			sort_ctx(G[t] + 1, len[t] - 1, cmp_desc_sim, row);
			/* Exact ties (the duplicate row) are broken by id on both sides. */
			double gap = fabs(row[G[t][topk - 1]] - row[G[t][topk]]);
			if (gap < 1e-6 && gap > 0 && topk > 1)
				b.ambiguous++;
			len[t] = topk;
		}
		sort_ctx(G[t], len[t], cmp_int, NULL);
	}
	for (int t = 0; t < n; t++) {
		int k;
		for (k = 0; k < M; k++)
			if (len[first[k]] == len[t] &&
			    !memcmp(G[first[k]], G[t], len[t] * sizeof **G))
				break;
		if (k == M)
			first[M++] = t;
		gof[t] = k;
	}
	b.M = M;
	b.start = calloc(M + 1, sizeof *b.start);
	for (int k = 0; k < M; k++)
		b.start[k + 1] = b.start[k] + len[first[k]];
	b.members = malloc(b.start[M] * sizeof *b.members);
	b.w = calloc(b.start[M], sizeof *b.w);
	for (int k = 0; k < M; k++)
		for (int j = 0; j < len[first[k]]; j++) {
			int t = G[first[k]][j];
			b.members[b.start[k] + j] = (uint32_t)t;
			N[t]++;
		}
	if (similarity) {
		double *tsum = calloc(n, sizeof *tsum);
		for (int k = 0; k < M; k++)
			for (uint64_t j = b.start[k]; j < b.start[k + 1]; j++) {
				int t = (int)b.members[j], gens = 0;
				double s = 0;
				for (int c = 0; c < n; c++)
					if (gof[c] == k) {
						s += c == t ? 1.0 : cs[(size_t)c * n + t];
						gens++;
					}
				b.w[j] = s / gens;
				tsum[t] += b.w[j];
			}
		for (uint64_t j = 0; j < b.start[M]; j++)
			b.w[j] /= tsum[b.members[j]];
		free(tsum);
	} else {
		for (uint64_t j = 0; j < b.start[M]; j++)
			b.w[j] = 1.0 / N[b.members[j]];
	}
	for (int t = 0; t < n; t++)
		free(G[t]);
	free(G); free(len); free(gof); free(first); free(N); free(cs); free(norm);
	return b;
}

static void brute_free(brute *b)
{
	free(b->start);
	free(b->members);
	free(b->w);
}

/* Builds with the given options and compares with the brute force. */
static asg *check_build(const char *what, const float *E0, int n, int d, double theta, int topk,
			int weights, int tile, int threads)
{
	float *E = malloc((size_t)n * d * sizeof *E);
	asg_build_opts o = { theta, topk, weights, 7, threads, tile, NULL, NULL, NULL };
	brute b = brute_force(E0, n, d, theta, topk, weights == ASG_W_SIMILARITY);
	pcg_err err = { "" };
	asg *a;

	memcpy(E, E0, (size_t)n * d * sizeof *E);
	a = asg_build(E, n, d, &o, &err);
	CHECKF(a != NULL, "%s: %s", what, err.msg);
	CHECKF(b.ambiguous == 0, "%s: %d cosines too close to theta or a cut for an exact test",
	       what, b.ambiguous);
	if (a) {
		const asg_view *v = asg_get(a);
		int same = v->M == (uint32_t)b.M && v->nnz == b.start[b.M] && v->n == (uint32_t)n;
		double worst = 0;
		if (same)
			same = !memcmp(v->grp_start, b.start, (b.M + 1) * sizeof *b.start) &&
			       !memcmp(v->grp_tok, b.members, v->nnz * sizeof *b.members);
		CHECKF(same, "%s: groups differ from the brute force (M %u vs %d, members %llu vs "
		       "%llu)", what, v->M, b.M, (unsigned long long)v->nnz,
		       (unsigned long long)b.start[b.M]);
		if (same)
			for (uint64_t j = 0; j < v->nnz; j++)
				if (fabs(v->grp_w[j] - b.w[j]) > worst)
					worst = fabs(v->grp_w[j] - b.w[j]);
		/* f32 products against double: cosines agree to ~1e-6, the
		 * normalised weights a little less. */
		CHECKF(worst < 1e-5, "%s: weights differ by %g", what, worst);
		CHECK(v->token_offset == 7 && v->topk == (uint32_t)topk && v->theta == theta);
		CHECK(v->weights == (uint32_t)weights);
		printf("%s: n %d, M %u, members %llu\n", what, n, v->M, (unsigned long long)v->nnz);
	}
	brute_free(&b);
	free(E);
	return a;
}

static void test_build(void)
{
	enum { N1 = 150, D1 = 12, N2 = 300, D2 = 24 };
	float *E1 = malloc(N1 * D1 * sizeof *E1), *E2 = malloc(N2 * D2 * sizeof *E2);
	float *E3 = malloc(N2 * D2 * sizeof *E3);
	pcg_rng r;
	asg *a, *b;

	pcg_rng_init(&r, 11, 0);
	for (int i = 0; i < N1 * D1; i++)
		E1[i] = (float)normal(&r);
	clustered(E2, N2, D2, 20, 0.3, 1.8, 5);
	clustered(E3, N2, D2, 20, 0.05, 0.2, 6);
	/* A zero row and a duplicate row in each. */
	memset(E1 + 17 * D1, 0, D1 * sizeof *E1);
	memcpy(E1 + 40 * D1, E1 + 3 * D1, D1 * sizeof *E1);
	memset(E2 + 100 * D2, 0, D2 * sizeof *E2);
	memcpy(E2 + 200 * D2, E2 + 10 * D2, D2 * sizeof *E2);

	a = check_build("random 150x12 theta 0.4", E1, N1, D1, 0.4, 0, ASG_W_EQUAL, 0, 0);
	asg_close(&a);
	a = check_build("random theta 0.4 similarity", E1, N1, D1, 0.4, 0, ASG_W_SIMILARITY, 0, 0);
	asg_close(&a);
	a = check_build("random theta 0.3 top-3", E1, N1, D1, 0.3, 3, ASG_W_EQUAL, 0, 0);
	asg_close(&a);
	a = check_build("clustered 300x24 theta 0.45", E2, N2, D2, 0.45, 0, ASG_W_EQUAL, 0, 0);
	/* Same result with other tilings (tiles of 7 and 64: edges and the
	 * diagonal tiles) and one thread: the checksum covers every byte. */
	b = check_build("clustered, tile 7, 1 thread", E2, N2, D2, 0.45, 0, ASG_W_EQUAL, 7, 1);
	CHECK(a && b && asg_get(a)->checksum == asg_get(b)->checksum);
	asg_close(&b);
	b = check_build("clustered, tile 64, 2 threads", E2, N2, D2, 0.45, 0, ASG_W_EQUAL, 64, 2);
	CHECK(a && b && asg_get(a)->checksum == asg_get(b)->checksum);
	if (a) {
		asg_stats s;
		asg_stats_get(a, &s);
		CHECKF(s.mean_n > 1.0 && s.max_size > 2 && s.singleton_share < 1.0,
		       "clustered rows should give overlapping groups: mean N %g, max |G| %llu",
		       s.mean_n, (unsigned long long)s.max_size);
	}
	asg_close(&a);
	asg_close(&b);
	a = check_build("clustered similarity top-5", E2, N2, D2, 0.45, 5, ASG_W_SIMILARITY, 32, 0);
	asg_close(&a);
	/* Tight clusters: most members of a cluster have the same G(t) (those
	 * near a neighbouring cluster differ), so 300 rows merge into few groups. */
	a = check_build("tight clusters", E3, N2, D2, 0.45, 0, ASG_W_SIMILARITY, 0, 0);
	CHECKF(a && asg_get(a)->M < 100, "tight clusters: %u groups", a ? asg_get(a)->M : 0);
	asg_close(&a);
	a = check_build("one row", E1, 1, D1, 0.4, 0, ASG_W_EQUAL, 0, 0);
	asg_close(&a);

	{
		pcg_err err = { "" };
		asg_build_opts o = { 1.0, 0, ASG_W_EQUAL, 0, 0, 0, NULL, NULL, NULL };
		float bad[4] = { 1, NAN, 0, 1 };
		CHECK(asg_build(E1, N1, D1, &o, &err) == NULL && has(&err, "theta"));
		o.theta = 0.4;
		CHECK(asg_build(bad, 2, 2, &o, &err) == NULL && has(&err, "row 0"));
		/* A CUDA device that is not there (no GPU, or a build without
		 * CUDA) is an error naming it, before any work; with a GPU
		 * tests/cuda/test_asg.c compares the two backends. */
		pcg_device cuda0;
		o.device = "cuda";
		CHECK(pcg_device_parse(o.device, &cuda0, &err) == 0);
		if (pcg_device_check(cuda0, &err) < 0) {
			CHECK(asg_build(E1, N1, D1, &o, &err) == NULL && has(&err, "cuda:0"));
			printf("cuda:0 refused: %s\n", err.msg);
		}
		o.device = "cuda:1048576";
		CHECK(asg_build(E1, N1, D1, &o, &err) == NULL && has(&err, "cuda:1048576"));
	}
	free(E1);
	free(E2);
	free(E3);
}

/* A hand-made ASG: overlapping and nested groups over 6 tokens. */
static asg *small(pcg_err *err)
{
	static const uint64_t start[] = { 0, 3, 5, 6, 8 };
	static const uint32_t members[] = { 0, 1, 2, 2, 3, 4, 4, 5 };
	return asg_from_groups(6, 4, start, members, NULL, 100, 0.5, 0, err);
}

static void test_from_groups(void)
{
	pcg_err err = { "" };
	asg *a = small(&err);
	const asg_view *v;
	asg_stats s;

	CHECKF(a != NULL, "%s", err.msg);
	if (a == NULL)
		return;
	v = asg_get(a);
	CHECK(v->n == 6 && v->M == 4 && v->nnz == 8 && v->token_offset == 100);
	/* Token 2 is in groups 0 and 1, token 4 in 2 and 3: N = 2, w = 1/2. */
	CHECK(v->tok_start[3] - v->tok_start[2] == 2 && v->tok_w[v->tok_start[2]] == 0.5f);
	CHECK(v->tok_grp[v->tok_start[4]] == 2 && v->tok_grp[v->tok_start[4] + 1] == 3);
	CHECK(v->grp_w[0] == 1.0f && v->grp_w[2] == 0.5f);
	asg_stats_get(a, &s);
	CHECK(s.max_size == 3 && s.median_size == 2.0 && s.singleton_share == 0.25);
	CHECK(fabs(s.mean_n - 8.0 / 6) < 1e-12 && s.max_n == 2);
	asg_close(&a);
	CHECK(a == NULL);

	{
		const uint64_t st[] = { 0, 2, 3 };
		const uint32_t m1[] = { 0, 1, 1 }, m2[] = { 1, 0, 2 }, m3[] = { 0, 5, 2 };
		const double sc[] = { 1.0, 0.0, 1.0 }, sc2[] = { 3.0, 1.0, 1.0 };
		CHECK(asg_from_groups(3, 2, st, m1, NULL, 0, 0, 0, &err) == NULL &&
		      has(&err, "token 2 is in no group"));
		CHECK(asg_from_groups(3, 2, st, m2, NULL, 0, 0, 0, &err) == NULL &&
		      has(&err, "ascending"));
		CHECK(asg_from_groups(3, 2, st, m3, NULL, 0, 0, 0, &err) == NULL &&
		      has(&err, "out of range"));
		CHECK(asg_from_groups(3, 2, st, (const uint32_t[]){ 0, 1, 2 }, sc, 0, 0, 0, &err) ==
		      NULL && has(&err, "score"));
		const uint64_t empty[] = { 0, 0, 3 };
		CHECK(asg_from_groups(3, 2, empty, m1, NULL, 0, 0, 0, &err) == NULL &&
		      has(&err, "empty"));
		/* Given scores are normalised per token (Eq. 2): token 1 is in
		 * groups 0 (score 1) and 1 (score 1); token 0 only in group 0. */
		const uint64_t st2[] = { 0, 2, 3 };
		a = asg_from_groups(2, 2, st2, (const uint32_t[]){ 0, 1, 1 }, sc2, 0, 0, 0, &err);
		CHECKF(a != NULL, "%s", err.msg);
		if (a) {
			v = asg_get(a);
			CHECK(v->grp_w[0] == 1.0f && v->grp_w[1] == 0.5f && v->grp_w[2] == 0.5f);
			CHECK(v->weights == ASG_W_GIVEN);
		}
		asg_close(&a);
	}
}

static unsigned char *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	unsigned char *b;
	long len;

	if (f == NULL)
		return NULL;
	fseek(f, 0, SEEK_END);
	len = ftell(f);
	fseek(f, 0, SEEK_SET);
	b = malloc(len > 0 ? (size_t)len : 1);
	*n = fread(b, 1, (size_t)len, f);
	fclose(f);
	return b;
}

static void spit(const char *path, const void *b, size_t n)
{
	FILE *f = fopen(path, "wb");
	fwrite(b, 1, n, f);
	fclose(f);
}

/* The format's checksum, written again from man/asg.5 so that the test
 * can craft files that pass it. */
static uint64_t fnv_words(const unsigned char *b, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i + 8 <= n; i += 8) {
		uint64_t w;
		memcpy(&w, b + i, 8);
		if (i == 56)
			w = 0;
		h = (h ^ w) * 0x100000001b3ull;
	}
	return h;
}

static void reseal(unsigned char *b, size_t n)
{
	uint64_t h = fnv_words(b, n);
	memcpy(b + 56, &h, 8);
}

/* Opens b[0..n) through a file; returns 0 when it was accepted. */
static int try_open(const char *path, const unsigned char *b, size_t n, pcg_err *err)
{
	asg *a;
	spit(path, b, n);
	a = asg_open(path, err);
	if (a == NULL)
		return -1;
	asg_close(&a);
	return 0;
}

static void test_files(void)
{
	char path[1024], bad[1024];
	pcg_err err = { "" };
	unsigned char *img, *m;
	size_t n = 0;
	asg *a, *b;
	int rejected = 0, mutants = 0, flips = 0;
	pcg_rng r;

	snprintf(path, sizeof path, "%s/t.asg", check_tmpdir());
	snprintf(bad, sizeof bad, "%s/bad.asg", check_tmpdir());
	{
		float E[40 * 8];
		asg_build_opts o = { 0.5, 0, ASG_W_SIMILARITY, 5, 0, 0, NULL, NULL, NULL };
		clustered(E, 40, 8, 4, 0.3, 1.8, 9);
		a = asg_build(E, 40, 8, &o, &err);
	}
	CHECKF(a != NULL, "%s", err.msg);
	if (a == NULL)
		return;
	CHECKF(asg_write(a, path, &err) == 0, "%s", err.msg);
	b = asg_open(path, &err);
	CHECKF(b != NULL, "%s", err.msg);
	img = slurp(path, &n);
	CHECK(img && n == asg_get(a)->bytes && n % 8 == 0);
	if (b && img) {
		const asg_view *x = asg_get(a), *y = asg_get(b);
		CHECK(x->checksum == y->checksum && x->n == y->n && x->M == y->M);
		CHECK(!memcmp(x->grp_tok, y->grp_tok, x->nnz * 4) &&
		      !memcmp(x->tok_w, y->tok_w, x->nnz * 4));
		CHECK(!memcmp(img, "PCG-ASG\n", 8));
	}
	asg_close(&b);
	/* The same image from memory (an ASG a request carried), and a corrupt
	 * one refused with the name given. */
	if (img) {
		b = asg_from_memory(img, n, "sent", &err);
		CHECKF(b && asg_get(b)->checksum == asg_get(a)->checksum, "%s", err.msg);
		asg_close(&b);
		unsigned char *c = malloc(n);
		memcpy(c, img, n);
		c[n / 2] ^= 1;
		CHECK(asg_from_memory(c, n, "sent", &err) == NULL && has(&err, "sent"));
		CHECK(asg_from_memory(c, 7, "sent", &err) == NULL && has(&err, "too short"));
		free(c);
	}
	CHECK(check_partials(check_tmpdir()) == 0);
	CHECK(asg_write(a, "/proc/no/such/dir/x.asg", &err) < 0 && has(&err, "x.asg") &&
	      has(&err, "temporary"));
	asg_close(&a);
	if (img == NULL)
		return;

	/* A changed byte is rejected: every byte of the header, and one byte
	 * of every 64-bit word after it (the checksum changes for any change
	 * within one word, so one byte a word covers every step of it). */
	m = malloc(n);
	for (size_t w = 0; w < 64 + (n - 64) / 8; w++) {
		/* bytes 0..63, then byte w % 8 of each word after the header */
		size_t i = w < 64 ? w : 64 + 8 * (w - 64) + w % 8;
		memcpy(m, img, n);
		m[i] ^= (unsigned char)(1u << (i % 8));
		rejected += try_open(bad, m, n, &err) < 0;
		flips++;
	}
	CHECKF(rejected == flips, "%d of %d byte flips rejected", rejected, flips);
	memcpy(m, img, n);
	m[300] ^= 4;
	CHECK(try_open(bad, m, n, &err) < 0 && has(&err, "checksum mismatch") &&
	      has(&err, "corrupt"));
	CHECK(try_open(bad, img, n - 8, &err) < 0 && has(&err, "truncated"));
	CHECK(try_open(bad, img, 10, &err) < 0 && has(&err, "too short"));
	CHECK(try_open(bad, img, 0, &err) < 0 && has(&err, "too short"));
	memcpy(m, img, n);
	m[0] = 'X';
	CHECK(try_open(bad, m, n, &err) < 0 && has(&err, "not an ASG file"));
	memcpy(m, img, n);
	m[8] = 2;
	CHECK(try_open(bad, m, n, &err) < 0 && has(&err, "version 2"));
	CHECK(asg_open("/no/such/file.asg", &err) == NULL && has(&err, "/no/such/file.asg"));

	/* Crafted: structural changes with a valid checksum. */
	{
		const asg_view *v;
		uint64_t off_gtok, off_tgrp, off_gw, nnz;
		uint32_t M, N;
		a = asg_open(path, &err);
		v = asg_get(a);
		M = v->M;
		N = v->n;
		nnz = v->nnz;
		off_gtok = (const unsigned char *)v->grp_tok - (const unsigned char *)v->grp_start + 64;
		off_tgrp = (const unsigned char *)v->tok_grp - (const unsigned char *)v->grp_start + 64;
		off_gw = (const unsigned char *)v->grp_w - (const unsigned char *)v->grp_start + 64;
		asg_close(&a);

#define CRAFT(what, edit, word) do { \
	memcpy(m, img, n); \
	edit; \
	reseal(m, n); \
	CHECKF(try_open(bad, m, n, &err) < 0 && has(&err, word), "%s: %s", what, err.msg); \
} while (0)
		uint32_t u32;
		float f;
		CRAFT("member out of range", (u32 = N, memcpy(m + off_gtok, &u32, 4)), "out of range");
		CRAFT("members swapped", (memcpy(&u32, m + off_gtok, 4),
			memcpy(m + off_gtok, m + off_gtok + 4, 4), memcpy(m + off_gtok + 4, &u32, 4)),
		      "group 0");
		CRAFT("reverse index", (u32 = M - 1, memcpy(m + off_tgrp, &u32, 4)), "reverse index");
		CRAFT("weight zero", (f = 0, memcpy(m + off_gw, &f, 4)), "weight");
		CRAFT("weight NaN", (f = NAN, memcpy(m + off_gw, &f, 4)), "weight");
		CRAFT("n zero", (u32 = 0, memcpy(m + 16, &u32, 4)), "n = 0");
		CRAFT("M too large", (u32 = M + 1, memcpy(m + 24, &u32, 4)), "bytes");
		CRAFT("nnz huge", (memcpy(m + 40, &(uint64_t){ nnz << 40 }, 8)), "impossible");
		CRAFT("theta NaN", (memcpy(m + 32, &(double){ NAN }, 8)), "theta");
		CRAFT("weights kind", (u32 = 9, memcpy(m + 12, &u32, 4)), "weights kind");
		CRAFT("group offset", (memcpy(m + 64 + 8, &(uint64_t){ 0 }, 8)), "group 0");
#undef CRAFT
	}
	/* Random mutations of 1 to 4 bytes with the checksum fixed: accepted
	 * or rejected, never a crash (ASan and UBSan watch this run). */
	pcg_rng_init(&r, 77, 0);
	for (int i = 0; i < 1000; i++) {
		int k = 1 + (int)pcg_rng_below(&r, 4);
		memcpy(m, img, n);
		while (k--)
			m[64 + pcg_rng_below(&r, (uint32_t)(n - 64))] = (unsigned char)pcg_rng_u32(&r);
		reseal(m, n);
		mutants += try_open(bad, m, n, &err) < 0;
	}
	printf("random structural mutations: %d of 1000 rejected\n", mutants);
	CHECK(mutants > 900);
	free(m);
	free(img);
}

int main(void)
{
	test_build();
	test_from_groups();
	test_files();
	return check_done("test_asg");
}
