/* viterbi.c: top-k candidates of the MTP heads, the reduced transition
 * block, and Algorithm 1 of the MTP paper in logs (see viterbi.h).
 */
#include "viterbi.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

size_t viterbi_work_bytes(int n, int m)
{
	return 2 * (size_t)m * sizeof(double) + (size_t)n * m * sizeof(int);
}

double viterbi_dp(int n, int m, const double *emit, const double *logq,
		  const double *start_logq, int *idx, void *work)
{
	double *delta = work, *next = delta + m, best;
	int *psi = (int *)(next + m); /* psi[t * m + j]: best predecessor of j at t */
	int bj = 0;

	/* Initialisation: delta_1(j) = S_1(a_j) (times Q(x_0, a_j) with a start). */
	for (int j = 0; j < m; j++) {
		delta[j] = emit[j] + (start_logq ? start_logq[j] : 0.0);
		psi[j] = 0;
	}
	/* Recursion: delta_t(j) = max_i delta_{t-1}(i) Q(a_i, a_j) S_t(a_j). */
	for (int t = 1; t < n; t++) {
		for (int j = 0; j < m; j++) {
			double b = -INFINITY;
			int bi = 0;
			for (int i = 0; i < m; i++) {
				double s = delta[i] + logq[(size_t)i * m + j];
				if (s > b) {
					b = s;
					bi = i;
				}
			}
			next[j] = b + emit[(size_t)t * m + j];
			psi[(size_t)t * m + j] = bi;
		}
		memcpy(delta, next, (size_t)m * sizeof *delta);
	}
	/* Termination and backtracking. */
	best = delta[0];
	for (int j = 1; j < m; j++)
		if (delta[j] > best) {
			best = delta[j];
			bj = j;
		}
	idx[n - 1] = bj;
	for (int t = n - 1; t > 0; t--)
		idx[t - 1] = psi[(size_t)t * m + idx[t]];
	return best;
}

static int cmp_u32(const void *x, const void *y)
{
	uint32_t p = *(const uint32_t *)x, q = *(const uint32_t *)y;
	return p < q ? -1 : p > q;
}

/* What both searches share: the candidates, their emissions and Q block. */
typedef struct problem {
	int n, m;
	uint32_t *cand;   /* [m] ascending */
	double *emit;     /* [n * m] */
	double *logq;     /* [m * m] */
	double *start;    /* [m] or NULL */
} problem;

static void problem_free(problem *p)
{
	free(p->cand);
	free(p->emit);
	free(p->logq);
	free(p->start);
}

static int setup(problem *p, const tmat *q, const float *probs, int n, int V,
		 const viterbi_opts *o, pcg_err *err)
{
	const tm_view *v = tm_get(q);
	int k = o->k, m = 0;
	uint32_t *top = NULL;

	memset(p, 0, sizeof *p);
	if (n < 1 || V < 1 || (uint32_t)V > v->n)
		return pcg_fail(err, "%d heads over V = %d tokens: need n >= 1 and 1 <= V <= %u "
				"(the transition matrix's n)", n, V, v->n);
	if (k < 1)
		return pcg_fail(err, "k = %d: must be at least 1", k);
	if (o->start < -1 || o->start >= (int64_t)v->n)
		return pcg_fail(err, "start token %lld out of range [0, %u)", (long long)o->start,
				v->n);
	if (o->mode != VITERBI_UNION && o->mode != VITERBI_PER_HEAD)
		return pcg_fail(err, "mode %d unknown", o->mode);
	for (size_t i = 0; i < (size_t)n * V; i++)
		if (!(probs[i] >= 0.0f && isfinite(probs[i])))
			return pcg_fail(err, "head %zu, token %zu: probability %g is not finite "
					"and >= 0", i / V + 1, i % V, (double)probs[i]);
	if (k > V)
		k = V;
	top = malloc((size_t)n * k * sizeof *top);
	p->cand = malloc((size_t)n * k * sizeof *p->cand);
	if (top == NULL || p->cand == NULL)
		goto oom;
	/* Top-k of each head by insertion (k is small): higher first, ties to
	 * the lower id. */
	for (int h = 0; h < n; h++) {
		const float *s = probs + (size_t)h * V;
		uint32_t *tk = top + (size_t)h * k;
		int c = 0;
		for (int x = 0; x < V; x++) {
			int at = c;
			while (at > 0 && s[x] > s[tk[at - 1]])
				at--;
			if (at >= k)
				continue;
			if (c < k)
				c++;
			memmove(tk + at + 1, tk + at, (size_t)(c - 1 - at) * sizeof *tk);
			tk[at] = (uint32_t)x;
		}
	}
	memcpy(p->cand, top, (size_t)n * k * sizeof *top);
	qsort(p->cand, (size_t)n * k, sizeof *p->cand, cmp_u32);
	for (int i = 0; i < n * k; i++)
		if (m == 0 || p->cand[i] != p->cand[m - 1])
			p->cand[m++] = p->cand[i];
	p->n = n;
	p->m = m;
	p->emit = malloc((size_t)n * m * sizeof *p->emit);
	p->logq = malloc((size_t)m * m * sizeof *p->logq);
	if (p->emit == NULL || p->logq == NULL)
		goto oom;
	for (int t = 0; t < n; t++)
		for (int j = 0; j < m; j++) {
			double e = log((double)probs[(size_t)t * V + p->cand[j]]);
			if (o->mode == VITERBI_PER_HEAD) {
				int in = 0;
				for (int r = 0; r < k; r++)
					in |= top[(size_t)t * k + r] == p->cand[j];
				if (!in)
					e = -INFINITY;
			}
			p->emit[(size_t)t * m + j] = e;
		}
	if (tm_submatrix(q, p->cand, m, p->logq, err) < 0)
		goto fail;
	if (o->start >= 0) {
		p->start = malloc((size_t)m * sizeof *p->start);
		if (p->start == NULL)
			goto oom;
		for (int j = 0; j < m; j++)
			p->start[j] = tm_logq(q, (uint32_t)o->start, p->cand[j]);
	}
	free(top);
	return 0;
oom:
	pcg_fail(err, "out of memory");
fail:
	free(top);
	problem_free(p);
	return -1;
}

int viterbi_decode(const tmat *q, const float *probs, int n_heads, int V,
		   const viterbi_opts *o, uint32_t *path, double *score, int *m, pcg_err *err)
{
	problem p;
	int *idx;
	void *work;
	double s;

	if (setup(&p, q, probs, n_heads, V, o, err) < 0)
		return -1;
	idx = malloc((size_t)n_heads * sizeof *idx);
	work = malloc(viterbi_work_bytes(n_heads, p.m));
	if (idx == NULL || work == NULL) {
		free(idx);
		free(work);
		problem_free(&p);
		return pcg_fail(err, "out of memory");
	}
	s = viterbi_dp(n_heads, p.m, p.emit, p.logq, p.start, idx, work);
	for (int t = 0; t < n_heads; t++)
		path[t] = p.cand[idx[t]];
	if (score)
		*score = s;
	if (m)
		*m = p.m;
	free(idx);
	free(work);
	problem_free(&p);
	return 0;
}

int viterbi_brute(const tmat *q, const float *probs, int n_heads, int V,
		  const viterbi_opts *o, uint32_t *path, double *score, pcg_err *err)
{
	problem p;
	int *cur, n = n_heads;
	double best = -INFINITY;
	int found = 0;

	if (setup(&p, q, probs, n_heads, V, o, err) < 0)
		return -1;
	cur = calloc((size_t)n, sizeof *cur);
	if (cur == NULL) {
		problem_free(&p);
		return pcg_fail(err, "out of memory");
	}
	/* Every tuple in lexicographic order; the sums are added in the order
	 * the DP adds them, so equal paths give equal scores bit for bit. */
	for (;;) {
		double s = p.emit[cur[0]] + (p.start ? p.start[cur[0]] : 0.0);
		for (int t = 1; t < n; t++)
			s = s + p.logq[(size_t)cur[t - 1] * p.m + cur[t]] +
			    p.emit[(size_t)t * p.m + cur[t]];
		if (!found || s > best) {
			best = s;
			found = 1;
			for (int t = 0; t < n; t++)
				path[t] = p.cand[cur[t]];
		}
		int t = n - 1;
		while (t >= 0 && ++cur[t] == p.m)
			cur[t--] = 0;
		if (t < 0)
			break;
	}
	if (score)
		*score = best;
	free(cur);
	problem_free(&p);
	return 0;
}
