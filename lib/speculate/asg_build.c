/* asg_build.c: the ASG of a model's speech embeddings (see asg_build.h):
 * the similar pairs by blocked products, on the CPU or a CUDA device, then
 * the groups assembled and handed to lib/formats/asg.c, whose validator
 * checks the builder's output by the reader's rules.
 */
#include "asg_build.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "matmul.h"

/* The similar pairs found so far (asg_pair: asg_build.h). */
typedef struct pairs {
	asg_pair *v;
	size_t n, cap;
} pairs;

static int pairs_push(pairs *p, uint32_t i, uint32_t j, float c)
{
	if (p->n == p->cap) {
		size_t cap = p->cap ? 2 * p->cap : 4096;
		asg_pair *v = realloc(p->v, cap * sizeof *v);
		if (v == NULL)
			return -1;
		p->v = v;
		p->cap = cap;
	}
	p->v[p->n++] = (asg_pair){ i, j, c };
	return 0;
}

/* A neighbour of a row: its id and cosine. */
typedef struct nb {
	uint32_t id;
	float c;
} nb;

static int by_id(const void *a, const void *b)
{
	uint32_t x = ((const nb *)a)->id, y = ((const nb *)b)->id;
	return (x > y) - (x < y);
}

/* Most similar first, the lower id on ties. */
static int by_sim(const void *a, const void *b)
{
	const nb *x = a, *y = b;
	if (x->c != y->c)
		return x->c > y->c ? -1 : 1;
	return (x->id > y->id) - (x->id < y->id);
}

static uint64_t hash_ids(const nb *v, uint64_t m)
{
	uint64_t h = 0xcbf29ce484222325ull ^ m;
	for (uint64_t i = 0; i < m; i++)
		h = (h ^ v[i].id) * 0x100000001b3ull;
	return h ^ (h >> 29);
}

static int same_ids(const nb *a, const nb *b, uint64_t m)
{
	for (uint64_t i = 0; i < m; i++)
		if (a[i].id != b[i].id)
			return 0;
	return 1;
}

/* Normalises the rows of E in place: zero rows stay zero. */
static int normalise(float *E, int n, int d, pcg_err *err)
{
	for (int t = 0; t < n; t++) {
		float *r = E + (size_t)t * d;
		double s = 0.0;
		for (int k = 0; k < d; k++)
			s += (double)r[k] * r[k];
		if (!isfinite(s))
			return pcg_fail(err, "row %d: not finite", t);
		if (s > 0.0) {
			float inv = (float)(1.0 / sqrt(s));
			for (int k = 0; k < d; k++)
				r[k] *= inv;
		}
	}
	return 0;
}

/* All pairs i < j with cos > theta, by tiles of E E^T on or above the
 * diagonal, each tile one single-threaded sgemm on one OpenMP thread and
 * thresholded while it is still in cache (see matmul.c on why OpenBLAS runs
 * single-threaded inside our threads). */
static int similar_pairs_cpu(const float *E, int n, int d, const asg_build_opts *o, pairs *out,
			     pcg_err *err)
{
	const int T = o->tile > 0 ? o->tile : 1024;
	const long nt = (n + T - 1) / T, ntasks = nt * (nt + 1) / 2;
	const float theta = (float)o->theta;
	int *ti = malloc(ntasks * sizeof *ti), *tj = malloc(ntasks * sizeof *tj);
	double total = 0.0, done = 0.0;
	int failed = 0;
	long k = 0;

	if (ti == NULL || tj == NULL) {
		free(ti);
		free(tj);
		return pcg_fail(err, "out of memory");
	}
	for (int bi = 0; bi < nt; bi++)
		for (int bj = bi; bj < nt; bj++) {
			double ri = (bi + 1) * (double)T > n ? n - (double)bi * T : T;
			double cj = (bj + 1) * (double)T > n ? n - (double)bj * T : T;
			ti[k] = bi;
			tj[k++] = bj;
			total += bi == bj ? ri * (ri - 1) / 2 : ri * cj;
		}
#pragma omp parallel
	{
		float *C = malloc((size_t)T * T * sizeof *C);
		pairs mine = { 0 };
		if (C == NULL) {
#pragma omp atomic write
			failed = 1;
		}
#pragma omp for schedule(dynamic, 1)
		for (long t = 0; t < ntasks; t++) {
			const int i0 = ti[t] * T, j0 = tj[t] * T;
			const int ri = n - i0 < T ? n - i0 : T, cj = n - j0 < T ? n - j0 : T;
			int bad;
#pragma omp atomic read
			bad = failed;
			if (bad)
				continue;
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, ri, cj, d, 1.0f,
				    E + (size_t)i0 * d, d, E + (size_t)j0 * d, d, 0.0f, C, cj);
			for (int a = 0; a < ri; a++) {
				const float *row = C + (size_t)a * cj;
				for (int b = i0 == j0 ? a + 1 : 0; b < cj; b++)
					if (row[b] > theta &&
					    pairs_push(&mine, (uint32_t)(i0 + a), (uint32_t)(j0 + b),
						       row[b]) < 0) {
#pragma omp atomic write
						failed = 1;
						break;
					}
			}
			double w = i0 == j0 ? (double)ri * (ri - 1) / 2 : (double)ri * cj;
#pragma omp atomic update
			done += w;
			if (o->progress && omp_get_thread_num() == 0) {
				double now;
#pragma omp atomic read
				now = done;
				o->progress(o->progress_ctx, now, total);
			}
		}
#pragma omp critical
		{
			if (!failed && mine.n) {
				if (out->n + mine.n > out->cap) {
					size_t cap = out->n + mine.n;
					asg_pair *v = realloc(out->v, cap * sizeof *v);
					if (v == NULL)
						failed = 1;
					else
						out->v = v, out->cap = cap;
				}
				if (!failed) {
					memcpy(out->v + out->n, mine.v, mine.n * sizeof *mine.v);
					out->n += mine.n;
				}
			}
		}
		free(mine.v);
		free(C);
	}
	free(ti);
	free(tj);
	if (o->progress)
		o->progress(o->progress_ctx, total, total);
	return failed ? pcg_fail(err, "out of memory collecting similar pairs") : 0;
}

/* The one step whose backend varies: the similar pairs of the normalised
 * rows, on the CPU or through the device kind's asg_pairs hook (asg_build
 * has checked that the device is there). Everything before and after is
 * the same code. */
static int similar_pairs(const float *E, int n, int d, pcg_device dev, const asg_build_opts *o,
			 pairs *out, pcg_err *err)
{
	if (pcg_device_is_host(dev))
		return similar_pairs_cpu(E, n, d, o, out, err);
	if (dev.kind->asg_pairs == NULL)
		return pcg_fail(err, "device %s:%d: asg_build has no code for %s devices",
				dev.kind->name, dev.index, dev.kind->label);
	int rc = dev.kind->asg_pairs(dev.index, E, n, d, (float)o->theta, o->tile, o->progress,
				     o->progress_ctx, &out->v, &out->n, err);
	out->cap = out->n;
	return rc;
}

asg *asg_build(float *E, int n, int d, const asg_build_opts *o, pcg_err *err)
{
	pairs P = { 0 };
	uint64_t *rs = NULL, *len = NULL, *gstart = NULL;
	uint32_t *slot = NULL, *first = NULL, *gof = NULL, *members = NULL, *ngen = NULL;
	double *score = NULL;
	nb *rows = NULL;
	asg *a = NULL;
	uint32_t M = 0;
	size_t mask;

	if (n < 1 || d < 1) {
		pcg_fail(err, "%d x %d embeddings: need at least one row and one column", n, d);
		return NULL;
	}
	if (!(o->theta >= 0.0 && o->theta < 1.0) || o->topk < 0 ||
	    (o->weights != ASG_W_EQUAL && o->weights != ASG_W_SIMILARITY)) {
		pcg_fail(err, "bad options: theta %g must be in [0, 1), topk %d >= 0", o->theta,
			 o->topk);
		return NULL;
	}
	pcg_device dev;
	if (pcg_device_parse(o->device, &dev, err) < 0 || pcg_device_check(dev, err) < 0)
		return NULL;
	pcg_set_threads(o->threads);
	if (normalise(E, n, d, err) < 0 || similar_pairs(E, n, d, dev, o, &P, err) < 0)
		goto out;

	/* Neighbour lists G(t) with cosines, CSR by row, each ascending by id. */
	rs = calloc((size_t)n + 1, sizeof *rs);
	len = calloc(n, sizeof *len);
	if (!rs || !len)
		goto oom;
	for (size_t q = 0; q < P.n; q++)
		rs[P.v[q].i + 1]++, rs[P.v[q].j + 1]++;
	for (int t = 0; t < n; t++)
		rs[t + 1] += rs[t] + 1; /* + t itself */
	rows = malloc(rs[n] * sizeof *rows);
	if (!rows)
		goto oom;
	for (int t = 0; t < n; t++)
		rows[rs[t]] = (nb){ (uint32_t)t, 1.0f }, len[t] = 1;
	for (size_t q = 0; q < P.n; q++) {
		const asg_pair *p = &P.v[q];
		rows[rs[p->i] + len[p->i]++] = (nb){ p->j, p->c };
		rows[rs[p->j] + len[p->j]++] = (nb){ p->i, p->c };
	}
	free(P.v);
	P.v = NULL;
	for (int t = 0; t < n; t++) {
		nb *r = rows + rs[t];
		if (o->topk > 0 && len[t] > (uint64_t)o->topk) {
			/* t itself (first in its row) always survives the cut: it
			 * sorts above any cosine while the cut is made. */
			r[0].c = INFINITY;
			qsort(r, len[t], sizeof *r, by_sim);
			len[t] = (uint64_t)o->topk;
			r[0].c = 1.0f;
		}
		qsort(r, len[t], sizeof *r, by_id);
	}

	/* Identical G(t) merged by hashing the sorted id lists; groups are
	 * numbered by their first generating token. */
	mask = 1;
	while (mask < 2 * (size_t)n)
		mask <<= 1;
	slot = calloc(mask, sizeof *slot); /* group + 1, 0: empty */
	first = malloc((size_t)n * sizeof *first);
	gof = malloc((size_t)n * sizeof *gof);
	if (!slot || !first || !gof)
		goto oom;
	mask--;
	for (int t = 0; t < n; t++) {
		const nb *r = rows + rs[t];
		size_t h = (size_t)hash_ids(r, len[t]) & mask;
		for (;; h = (h + 1) & mask) {
			uint32_t g = slot[h];
			if (g == 0) {
				slot[h] = M + 1;
				first[M] = (uint32_t)t;
				gof[t] = M++;
				break;
			}
			uint32_t f = first[g - 1];
			if (len[f] == len[t] && same_ids(rows + rs[f], r, len[t])) {
				gof[t] = g - 1;
				break;
			}
		}
	}
	free(slot);
	slot = NULL;

	gstart = malloc(((size_t)M + 1) * sizeof *gstart);
	ngen = calloc(M, sizeof *ngen);
	if (!gstart || !ngen)
		goto oom;
	gstart[0] = 0;
	for (uint32_t k = 0; k < M; k++)
		gstart[k + 1] = gstart[k] + len[first[k]];
	members = malloc(gstart[M] * sizeof *members);
	if (o->weights == ASG_W_SIMILARITY)
		score = calloc(gstart[M], sizeof *score);
	if (!members || (o->weights == ASG_W_SIMILARITY && !score))
		goto oom;
	for (uint32_t k = 0; k < M; k++)
		for (uint64_t j = 0; j < len[first[k]]; j++)
			members[gstart[k] + j] = rows[rs[first[k]] + j].id;
	if (score) {
		/* score_{k,t}: mean cos(E_c, E_t) over the generators c of G_k; c's
		 * row lists exactly G_k's members in the same order. */
		for (int c = 0; c < n; c++) {
			uint32_t k = gof[c];
			ngen[k]++;
			for (uint64_t j = 0; j < len[c]; j++)
				score[gstart[k] + j] += rows[rs[c] + j].c;
		}
		for (uint32_t k = 0; k < M; k++)
			for (uint64_t j = gstart[k]; j < gstart[k + 1]; j++) {
				score[j] /= ngen[k];
				/* cos > theta >= 0 for every member, but keep the weight
				 * positive whatever the rounding. */
				if (!(score[j] > 1e-6))
					score[j] = 1e-6;
			}
	}
	free(rows);
	rows = NULL;
	a = asg_from_groups_kind((uint32_t)n, M, gstart, members, score, o->token_offset, o->theta,
					  (uint32_t)o->topk, (uint32_t)o->weights, err);
	goto out;
oom:
	pcg_fail(err, "out of memory");
out:
	free(P.v);
	free(rs);
	free(len);
	free(rows);
	free(slot);
	free(first);
	free(gof);
	free(gstart);
	free(ngen);
	free(members);
	free(score);
	return a;
}

/* ---- neighbour files ---- */

asg *asg_build_knn(float *E, int n, int d, int K, const asg_build_opts *o, pcg_err *err)
{
	enum { R = 64 };
	const int keep = K + 1 < n ? K + 1 : n; /* t and up to K others */
	uint64_t *start = NULL;
	uint32_t *members = NULL, *len = NULL;
	double *score = NULL;
	nb *best = NULL;
	asg *a = NULL;
	int failed = 0;

	if (n < 1 || d < 1 || K < 1) {
		pcg_fail(err, "%d x %d embeddings, K = %d: need rows, columns and K >= 1", n, d, K);
		return NULL;
	}
	pcg_set_threads(o->threads);
	if (normalise(E, n, d, err) < 0)
		return NULL;
	best = malloc((size_t)n * keep * sizeof *best);
	len = calloc((size_t)n, sizeof *len);
	if (!best || !len)
		goto oom;
#pragma omp parallel
	{
		float *C = malloc((size_t)R * n * sizeof *C);
		nb *row = malloc((size_t)n * sizeof *row);
		if (!C || !row) {
#pragma omp atomic write
			failed = 1;
		}
#pragma omp for schedule(dynamic, 1)
		for (int i0 = 0; i0 < n; i0 += R) {
			const int ri = n - i0 < R ? n - i0 : R;
			int bad;
#pragma omp atomic read
			bad = failed;
			if (bad)
				continue;
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, ri, n, d, 1.0f,
				    E + (size_t)i0 * d, d, E, d, 0.0f, C, n);
			for (int r = 0; r < ri; r++) {
				const int t = i0 + r;
				int m = 0;
				/* t first, then the others, most similar first */
				for (int j = 0; j < n; j++)
					if (j != t)
						row[m++] = (nb){ (uint32_t)j, C[(size_t)r * n + j] };
				if (m > keep - 1) {
					qsort(row, m, sizeof *row, by_sim);
					m = keep - 1;
				}
				nb *b = best + (size_t)t * keep;
				b[0] = (nb){ (uint32_t)t, 1.0f };
				memcpy(b + 1, row, (size_t)m * sizeof *row);
				qsort(b, (size_t)m + 1, sizeof *b, by_id);
				len[t] = (uint32_t)m + 1;
			}
			if (o->progress && omp_get_thread_num() == 0)
				o->progress(o->progress_ctx, (double)i0 * n, (double)n * n);
		}
		free(C);
		free(row);
	}
	if (failed)
		goto oom;
	start = malloc(((size_t)n + 1) * sizeof *start);
	if (!start)
		goto oom;
	start[0] = 0;
	for (int t = 0; t < n; t++)
		start[t + 1] = start[t] + len[t];
	members = malloc(start[n] * sizeof *members);
	score = malloc(start[n] * sizeof *score);
	if (!members || !score)
		goto oom;
	for (int t = 0; t < n; t++)
		for (uint32_t j = 0; j < len[t]; j++) {
			const nb *b = best + (size_t)t * keep + j;
			members[start[t] + j] = b->id;
			score[start[t] + j] = b->c > 1e-6f ? b->c : 1e-6;
		}
	if (o->progress)
		o->progress(o->progress_ctx, (double)n * n, (double)n * n);
	a = asg_from_groups_kind((uint32_t)n, (uint32_t)n, start, members, score, o->token_offset, 0.0,
					  (uint32_t)keep, ASG_W_SIMILARITY, err);
	goto out;
oom:
	pcg_fail(err, "out of memory");
out:
	free(best);
	free(len);
	free(start);
	free(members);
	free(score);
	return a;
}

/* ---- statistics ---- */
