/* test_asg.c (cuda): asg_build on the GPU against the CPU path, its oracle.
 * Gaussian and clustered rows of several shapes (d odd, d = 1,024), theta
 * from 0 to 0.45, top-k cuts, both weightings, a zero and a duplicate row,
 * blocks of one row, ragged blocks and one block, pairs planted just outside
 * rounding distance of theta, and a pair list that outgrows its first size.
 * The groups must be identical; with equal weights the files byte for byte.
 * Skips loudly without a GPU (exit 77; a failure under PCG_TEST_GPU=1).
 *
 * Tolerance. Both backends compute each cosine as an f32 dot product of the
 * same normalised f32 rows with f32 accumulation, in different orders. By
 * the probabilistic rounding error analysis (Higham and Mary, SIAM J. Sci.
 * Comput. 41(5), 2019: rounding errors independent and of mean zero), such
 * a product is within lambda sqrt(d) u sum_k |x_k y_k| <= lambda sqrt(d) u
 * of the exact one for unit rows (u = 2^-24), with probability at least
 * 1 - 2 exp(-lambda^2 / 2): lambda = 8 makes that 1 - 2.5e-14 per cosine.
 * The reference here is the cosine of the rows as given, in double; the
 * rows as normalised in f32 add at most 4u (one rounding of the inverse
 * norm and one per element, on each side). So within
 *     delta(d) = 8 sqrt(d) u + 4u     (3.0e-6 at d = 32, 3.1e-5 at 4,096)
 * of the exact cosine lie both backends' values, and a pair further than
 * delta from theta (as an f32, which is what both compare with) is decided
 * alike; a top-k cut whose two sides are further apart than 2 delta keeps
 * the same tokens. (The worst case, d u, is never approached: at d = 4,096
 * OpenBLAS's sgemm is within 3.3e-7 of the exact cosine, a sequential f32
 * loop within 2.6e-6.) The rows are drawn so that nothing is ambiguous: a
 * row in a pair within delta of theta, or at an ambiguous cut, is redrawn
 * until none is. Pairs planted at theta +- 3 delta show that the decision
 * is exact right up to that distance.
 *
 * Similarity weights: each cosine differs by at most 2 delta between the
 * backends, and every score is a mean of cosines above theta (or 1), so a
 * score and a token's sum of scores move by at most 2 delta / theta
 * relatively and a weight by 4 delta / theta, plus one f32 rounding each.
 */
#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../unit/rows.h"
#include "asg_build.h"
#include "gpu.h"
#include "rng.h"

#define U (1.0 / 16777216.0) /* 2^-24, the unit roundoff of f32 */

static double delta_of(int d)
{
	return 8.0 * sqrt((double)d) * U + 4.0 * U;
}

/* One comparison: rows drawn per row from (seed, row, attempt). */
typedef struct asg_case {
	const char *name;
	int n, d;
	double theta;
	int topk, weights, tile;
	int clusters;   /* 0: Gaussian rows, else centre + s * noise, s in [0.5, 1.5] */
	int planted;    /* rows n-1, n-2, ... planted on rows 0, 1, ... at theta +- 3 delta */
	int zero_dup;   /* row n/2 zero, row n/3 a copy of row 1 */
} asg_case;

typedef struct rows {
	const asg_case *s;
	float *E;        /* [n, d] as given to asg_build */
	double *centre;  /* [clusters, d] */
	double *X;       /* [n, d] E normalised in double */
	double *C;       /* [n, n] reference cosines */
	int *attempt;    /* draws of each row so far */
} rows;

static void draw(rows *r, int t)
{
	const asg_case *s = r->s;
	const int d = s->d;
	float *e = r->E + (size_t)t * d;
	pcg_rng g;

	pcg_rng_init(&g, 1000 + (uint64_t)s->n * 7 + (uint64_t)d,
		     ((uint64_t)t << 20) | (uint64_t)r->attempt[t]++);
	if (s->planted && t >= s->n - s->planted) {
		/* cos(E_a, E_t) = c exactly before rounding to f32: E_t = c x + sqrt(1 - c^2) y,
		 * x the unit row a, y a random unit vector orthogonal to it. */
		const int a = s->n - 1 - t;
		const double dl = delta_of(d), c = (float)s->theta + (a % 2 ? 3 : -3) * dl;
		const float *ea = r->E + (size_t)a * d;
		double *y = malloc((size_t)d * sizeof *y), xa = 0, xy = 0, yy = 0;
		for (int i = 0; i < d; i++)
			xa += (double)ea[i] * ea[i];
		xa = sqrt(xa);
		for (int i = 0; i < d; i++) {
			y[i] = normal(&g);
			xy += y[i] * ea[i] / xa;
		}
		for (int i = 0; i < d; i++) {
			y[i] -= xy * ea[i] / xa;
			yy += y[i] * y[i];
		}
		for (int i = 0; i < d; i++)
			e[i] = (float)(c * ea[i] / xa + sqrt(1 - c * c) * y[i] / sqrt(yy));
		free(y);
		return;
	}
	if (s->clusters) {
		int k = (int)pcg_rng_below(&g, (uint32_t)s->clusters);
		double w = 0.5 + pcg_rng_uniform(&g);
		for (int i = 0; i < d; i++)
			e[i] = (float)(r->centre[(size_t)k * d + i] + w * normal(&g));
	} else {
		for (int i = 0; i < d; i++)
			e[i] = (float)normal(&g);
	}
}

/* The special rows after (re)drawing: the zero row and the duplicate. */
static void fix_roles(rows *r)
{
	const asg_case *s = r->s;
	if (s->zero_dup) {
		memset(r->E + (size_t)(s->n / 2) * s->d, 0, (size_t)s->d * sizeof *r->E);
		memcpy(r->E + (size_t)(s->n / 3) * s->d, r->E + (size_t)s->d, (size_t)s->d * sizeof *r->E);
	}
}

/* The reference cosines in double (dgemm over the rows normalised in double). */
static void reference(rows *r)
{
	const int n = r->s->n, d = r->s->d;

	for (int t = 0; t < n; t++) {
		const float *e = r->E + (size_t)t * d;
		double q = 0;
		for (int i = 0; i < d; i++)
			q += (double)e[i] * e[i];
		q = q > 0 ? 1.0 / sqrt(q) : 0.0;
		for (int i = 0; i < d; i++)
			r->X[(size_t)t * d + i] = e[i] * q;
	}
	cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, d, 1.0, r->X, d, r->X, d, 0.0,
		    r->C, n);
}

static int by_desc(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x < y) - (x > y);
}

/* Marks the rows to redraw: one row of each pair within delta of theta, and
 * each row whose top-k cut falls between cosines closer than 2 delta.
 * Counts into *near the pairs within 4 delta (but not delta) of theta.
 * Returns the number marked. */
static int ambiguous(rows *r, char *mark, long *near)
{
	const asg_case *s = r->s;
	const int n = s->n;
	const double dl = delta_of(s->d), th = (float)s->theta;
	double *nb = malloc((size_t)n * sizeof *nb);
	int marked = 0;

	memset(mark, 0, (size_t)n);
	*near = 0;
	for (int i = 0; i < n; i++) {
		int m = 0;
		for (int j = 0; j < n; j++) {
			double c = r->C[(size_t)i * n + j];
			int zero = s->zero_dup && (i == n / 2 || j == n / 2);
			if (j == i || zero) /* a zero row's cosines are exactly 0 on both */
				continue;
			if (fabs(c - th) < dl && j > i) {
				/* the duplicate's twin goes with it; planted rows are redrawn
				 * as planted, so their own pair never needs it */
				int t = s->zero_dup && j == n / 3 ? 1 : j;
				marked += !mark[t];
				mark[t] = 1;
			} else if (fabs(c - th) < 4 * dl && j > i) {
				(*near)++;
			}
			if (c > th)
				nb[m++] = c;
		}
		if (s->topk > 0 && m >= s->topk) {
			/* G(t) keeps t and its topk - 1 most similar: the cut is
			 * between the (topk - 1)-th and topk-th neighbours. */
			qsort(nb, (size_t)m, sizeof *nb, by_desc);
			double above = s->topk > 1 ? nb[s->topk - 2] : 2.0, below = nb[s->topk - 1];
			if (above - below < 2 * dl) {
				marked += !mark[i];
				mark[i] = 1;
			}
		}
	}
	free(nb);
	return marked;
}

/* Progress as asg_build reports it: must rise to the total. */
typedef struct prog {
	double last, total;
	int calls, backwards;
} prog;

static void on_progress(void *ctx, double done, double total)
{
	prog *p = ctx;
	p->backwards += done < p->last;
	p->last = done;
	p->total = total;
	p->calls++;
}

static asg *build(const rows *r, int cuda, prog *p)
{
	const asg_case *s = r->s;
	float *E = malloc((size_t)s->n * s->d * sizeof *E);
	asg_build_opts o = { s->theta, s->topk, s->weights, 3, 0, cuda ? s->tile : 0,
			     on_progress, p, cuda ? "cuda" : NULL };
	pcg_err err = { "" };
	asg *a;

	memcpy(E, r->E, (size_t)s->n * s->d * sizeof *E);
	a = asg_build(E, s->n, s->d, &o, &err);
	CHECKF(a != NULL, "%s, %s: %s", s->name, cuda ? "cuda" : "cpu", err.msg);
	free(E);
	return a;
}

/* The first token whose groups differ, for the message. */
static long first_difference(const asg_view *a, const asg_view *b)
{
	for (uint32_t t = 0; t < a->n && t < b->n; t++) {
		uint64_t la = a->tok_start[t + 1] - a->tok_start[t];
		uint64_t lb = b->tok_start[t + 1] - b->tok_start[t];
		if (la != lb)
			return t;
		for (uint64_t q = 0; q < la; q++) {
			uint32_t ka = a->tok_grp[a->tok_start[t] + q], kb = b->tok_grp[b->tok_start[t] + q];
			uint64_t sa = a->grp_start[ka + 1] - a->grp_start[ka];
			if (sa != b->grp_start[kb + 1] - b->grp_start[kb] ||
			    memcmp(a->grp_tok + a->grp_start[ka], b->grp_tok + b->grp_start[kb],
				   sa * sizeof *a->grp_tok))
				return t;
		}
	}
	return -1;
}

static void run(const asg_case *s)
{
	const int n = s->n, d = s->d;
	const double dl = delta_of(d);
	rows r = { s, NULL, NULL, NULL, NULL, NULL };
	char *mark = malloc((size_t)n);
	int rounds = 0, left;
	long near = 0;
	prog pc = { 0 }, pg = { 0 };
	asg *cpu, *gpu;

	r.E = malloc((size_t)n * d * sizeof *r.E);
	r.centre = malloc((size_t)(s->clusters ? s->clusters : 1) * d * sizeof *r.centre);
	r.X = malloc((size_t)n * d * sizeof *r.X);
	r.C = malloc((size_t)n * n * sizeof *r.C);
	r.attempt = calloc((size_t)n, sizeof *r.attempt);
	{
		pcg_rng g;
		pcg_rng_init(&g, 77 + (uint64_t)n, 0);
		for (size_t i = 0; i < (size_t)s->clusters * d; i++)
			r.centre[i] = normal(&g);
	}
	for (int t = 0; t < n; t++)
		draw(&r, t);
	fix_roles(&r);
	for (;;) {
		reference(&r);
		left = ambiguous(&r, mark, &near);
		if (left == 0 || ++rounds > 50)
			break;
		for (int t = 0; t < n; t++)
			if (mark[t])
				draw(&r, t);
		/* a planted row follows the row it is planted on */
		for (int t = n - s->planted; t < n; t++)
			if (mark[n - 1 - t])
				draw(&r, t);
		fix_roles(&r);
	}
	CHECKF(left == 0, "%s: %d rows still ambiguous after 50 redraws", s->name, left);
	CHECKF(near >= s->planted, "%s: only %ld pairs within 4 delta of theta, %d planted",
	       s->name, near, s->planted);

	cpu = build(&r, 0, &pc);
	gpu = build(&r, 1, &pg);
	if (cpu && gpu) {
		const asg_view *a = asg_get(cpu), *b = asg_get(gpu);
		int same = a->M == b->M && a->nnz == b->nnz &&
			   !memcmp(a->grp_start, b->grp_start, ((size_t)a->M + 1) * sizeof *a->grp_start) &&
			   !memcmp(a->grp_tok, b->grp_tok, a->nnz * sizeof *a->grp_tok);
		double worst = 0.0, tol = 0.0;

		CHECKF(same, "%s: groups differ: M %u vs %u, members %llu vs %llu, first at token %ld",
		       s->name, a->M, b->M, (unsigned long long)a->nnz, (unsigned long long)b->nnz,
		       first_difference(a, b));
		if (same)
			for (uint64_t j = 0; j < a->nnz; j++)
				worst = fmax(worst, fabs((double)a->grp_w[j] - b->grp_w[j]));
		if (s->weights == ASG_W_SIMILARITY) {
			tol = 4 * dl / s->theta + 2 * U; /* derived above */
		} else {
			/* equal weights depend on the groups alone: the same file */
			CHECKF(a->checksum == b->checksum, "%s: files differ", s->name);
		}
		CHECKF(worst <= tol, "%s: weights differ by %.3g (tolerance %.3g)", s->name, worst, tol);
		printf("%s: M %u, members %llu, %ld pairs within 4 delta = %.2g of theta, %d redraw "
		       "rounds, weights within %.2g\n", s->name, b->M, (unsigned long long)b->nnz,
		       near, 4 * dl, rounds, worst);
	}
	CHECKF(pg.calls >= 1 && pg.backwards == 0 && pg.last == pg.total &&
	       pg.total == (double)n * (n - 1) / 2, "%s: progress %d calls, last %g of %g",
	       s->name, pg.calls, pg.last, pg.total);
	asg_close(&cpu);
	asg_close(&gpu);
	free(mark);
	free(r.E);
	free(r.centre);
	free(r.X);
	free(r.C);
	free(r.attempt);
}

int main(void)
{
	const int EQ = ASG_W_EQUAL, SIM = ASG_W_SIMILARITY;
	/* name, n, d, theta, topk, weights, tile (rows per block, 0: from free
	 * memory), clusters, planted, zero_dup */
	static const asg_case cases[] = {
		{ "one row", 1, 16, 0.4, 0, EQ, 0, 0, 0, 0 },
		{ "two rows, d 3", 2, 3, 0.4, 0, SIM, 0, 0, 0, 0 },
		{ "Gaussian 700x37 theta 0.2, zero and duplicate rows", 700, 37, 0.2, 0, EQ, 0, 0,
		  0, 1 },
		{ "the same, similarity, blocks of 128", 700, 37, 0.2, 0, SIM, 128, 0, 0, 1 },
		{ "Gaussian 2600x32 theta 0: 1.7M pairs outgrow the list", 2600, 32, 0.0, 0, EQ, 0, 0,
		  0, 0 },
		{ "clustered 300x64 top-1, one row per block", 300, 64, 0.4, 1, EQ, 1, 10, 0, 0 },
		{ "clustered 517x96 top-4, ragged blocks of 128", 517, 96, 0.35, 4, EQ, 128, 16, 0, 0 },
		{ "clustered 2500x256 theta 0.3 top-5 similarity, blocks of 333", 2500, 256, 0.3, 5,
		  SIM, 333, 78, 0, 0 },
		{ "clustered 1500x128, 200 pairs planted at theta +- 3 delta, blocks of 64", 1500,
		  128, 0.4, 0, EQ, 64, 47, 200, 0 },
		{ "the same, top-3 similarity", 1500, 128, 0.4, 3, SIM, 64, 47, 200, 0 },
		{ "clustered 4096x1024 theta 0.45 similarity, one block", 4096, 1024, 0.45, 0, SIM, 0,
		  128, 0, 0 },
		{ "the same, blocks of 1000", 4096, 1024, 0.45, 0, SIM, 1000, 128, 0, 0 },
	};

	gpu_require("cuda-test_asg");
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
		run(&cases[i]);
	return check_done("cuda-test_asg");
}
