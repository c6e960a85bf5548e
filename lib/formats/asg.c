/* asg.c: building, writing, opening and validating ASG files (see asg.h and
 * man/asg.5 for the format).
 *
 * One code path makes every image (asg_from_groups), and every image, made
 * here or read from a file, goes through the same validator before anyone
 * sees it, so the builder's output is checked by the reader's rules.
 */
#include "asg.h"

#include <cblas.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "device.h"
#include "fileio.h"
#include "image.h"
#include "matmul.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the ASG file is little-endian and is used in place: a little-endian host is assumed"
#endif

static const pcg_img_kind KIND = { { 'P', 'C', 'G', '-', 'A', 'S', 'G', '\n' }, "ASG",
				       "an ASG", ASG_VERSION };

/* Header field offsets (man/asg.5). */
enum {
	H_MAGIC = 0, H_VERSION = 8, H_WEIGHTS = 12, H_N = 16, H_OFFSET = 20, H_M = 24,
	H_TOPK = 28, H_THETA = 32, H_NNZ = 40, H_BYTES = 48, H_CHECKSUM = 56,
};

struct asg {
	asg_view v;
	pcg_bytes img;    /* the file: mapped, read, or built in memory */
};

const asg_view *asg_get(const asg *a)
{
	return &a->v;
}

/* Byte offsets of the arrays in an image of n tokens, M groups, nnz members. */
typedef struct layout {
	uint64_t grp_start, tok_start, grp_tok, grp_w, tok_grp, tok_w, total;
} layout;

/* The caller bounds n, M <= 2^32 and nnz <= 2^56, so nothing overflows. */
static layout layout_of(uint64_t n, uint64_t M, uint64_t nnz)
{
	layout l;
	uint64_t a4 = pcg_align8(4 * nnz);

	l.grp_start = ASG_HEADER_BYTES;
	l.tok_start = l.grp_start + 8 * (M + 1);
	l.grp_tok = l.tok_start + 8 * (n + 1);
	l.grp_w = l.grp_tok + a4;
	l.tok_grp = l.grp_w + a4;
	l.tok_w = l.tok_grp + a4;
	l.total = l.tok_w + a4;
	return l;
}

/* Checks an image of size bytes and fills v; name prefixes the messages. */
static int validate(const unsigned char *b, uint64_t size, const char *name, asg_view *v,
		    pcg_err *err)
{
	uint64_t n, M, nnz;
	uint64_t *cursor;
	layout l;
	double theta;

	if (pcg_img_check(b, size, &KIND, name, err) < 0)
		return -1;
	/* From here on the bytes are as written; a crafted file with a valid
	 * checksum still has every field checked. */
	n = pcg_get32(b, H_N);
	M = pcg_get32(b, H_M);
	nnz = pcg_get64(b, H_NNZ);
	memcpy(&theta, b + H_THETA, 8);
	if (pcg_get32(b, H_WEIGHTS) > ASG_W_GIVEN)
		return pcg_fail(err, "%s: weights kind %u unknown", name, pcg_get32(b, H_WEIGHTS));
	if (n < 1 || n > INT32_MAX)
		return pcg_fail(err, "%s: n = %llu tokens: must be in [1, 2^31)", name,
				(unsigned long long)n);
	if (M < 1 || M > INT32_MAX || nnz < n || nnz < M || nnz > size / 16)
		return pcg_fail(err, "%s: M = %llu groups with %llu members for n = %llu tokens: "
				"impossible counts", name, (unsigned long long)M,
				(unsigned long long)nnz, (unsigned long long)n);
	if (!isfinite(theta))
		return pcg_fail(err, "%s: theta is not finite", name);
	l = layout_of(n, M, nnz);
	if (l.total != size)
		return pcg_fail(err, "%s: %llu bytes, but n, M and the member count need %llu",
				name, (unsigned long long)size, (unsigned long long)l.total);

	v->n = (uint32_t)n;
	v->M = (uint32_t)M;
	v->nnz = nnz;
	v->token_offset = pcg_get32(b, H_OFFSET);
	v->topk = pcg_get32(b, H_TOPK);
	v->weights = pcg_get32(b, H_WEIGHTS);
	v->theta = theta;
	v->bytes = size;
	v->checksum = pcg_get64(b, PCG_IMG_CHECKSUM);
	v->grp_start = (const uint64_t *)(b + l.grp_start);
	v->tok_start = (const uint64_t *)(b + l.tok_start);
	v->grp_tok = (const uint32_t *)(b + l.grp_tok);
	v->grp_w = (const float *)(b + l.grp_w);
	v->tok_grp = (const uint32_t *)(b + l.tok_grp);
	v->tok_w = (const float *)(b + l.tok_w);

	if (v->grp_start[0] != 0 || v->grp_start[M] != nnz)
		return pcg_fail(err, "%s: group offsets do not run from 0 to %llu", name,
				(unsigned long long)nnz);
	for (uint64_t k = 0; k < M; k++) {
		uint64_t a = v->grp_start[k], e = v->grp_start[k + 1];
		if (e <= a || e > nnz)
			return pcg_fail(err, "%s: group %llu: offsets %llu..%llu: empty or out of "
					"order", name, (unsigned long long)k, (unsigned long long)a,
					(unsigned long long)e);
		for (uint64_t j = a; j < e; j++) {
			if (v->grp_tok[j] >= n || (j > a && v->grp_tok[j] <= v->grp_tok[j - 1]))
				return pcg_fail(err, "%s: group %llu: member %u out of range or not "
						"ascending", name, (unsigned long long)k,
						v->grp_tok[j]);
			if (!(v->grp_w[j] > 0.0f && v->grp_w[j] <= 1.0f))
				return pcg_fail(err, "%s: group %llu: weight of token %u is %g: "
						"must be in (0, 1]", name, (unsigned long long)k,
						v->grp_tok[j], (double)v->grp_w[j]);
		}
	}
	if (v->tok_start[0] != 0 || v->tok_start[n] != nnz)
		return pcg_fail(err, "%s: token offsets do not run from 0 to %llu", name,
				(unsigned long long)nnz);
	for (uint64_t t = 0; t < n; t++)
		if (v->tok_start[t + 1] <= v->tok_start[t] || v->tok_start[t + 1] > nnz)
			return pcg_fail(err, "%s: token %llu: in no group, or offsets out of order",
					name, (unsigned long long)t);
	/* The reverse index must be the transpose of the groups: walking the
	 * groups in order fills each token's list in order. */
	cursor = malloc(n * sizeof *cursor);
	if (cursor == NULL)
		return pcg_fail(err, "%s: out of memory", name);
	memcpy(cursor, v->tok_start, n * sizeof *cursor);
	for (uint64_t k = 0; k < M; k++)
		for (uint64_t j = v->grp_start[k]; j < v->grp_start[k + 1]; j++) {
			uint32_t t = v->grp_tok[j];
			uint64_t c = cursor[t]++;
			if (c >= v->tok_start[t + 1] || v->tok_grp[c] != k ||
			    memcmp(&v->tok_w[c], &v->grp_w[j], sizeof(float)) != 0) {
				free(cursor);
				return pcg_fail(err, "%s: the reverse index disagrees with group "
						"%llu at token %u", name, (unsigned long long)k, t);
			}
		}
	free(cursor);
	/* Eq. 2. Each weight is a double quotient rounded once to f32, so the
	 * sum is 1 within 2^-24 plus the double additions: 1e-6 is generous. */
	for (uint64_t t = 0; t < n; t++) {
		double s = 0.0;
		for (uint64_t c = v->tok_start[t]; c < v->tok_start[t + 1]; c++)
			s += v->tok_w[c];
		if (fabs(s - 1.0) > 1e-6)
			return pcg_fail(err, "%s: token %llu: weights sum to %.9g, not 1", name,
					(unsigned long long)t, s);
	}
	return 0;
}

/* asg_from_groups, recording kind as the weights' origin. */
static asg *make(uint32_t n, uint32_t M, const uint64_t *start, const uint32_t *members,
		 const double *score, uint32_t token_offset, double theta, uint32_t topk,
		 uint32_t kind, pcg_err *err)
{
	uint64_t nnz, *tok_start = NULL, *cursor = NULL;
	double *tsum = NULL;
	unsigned char *b = NULL;
	asg *a = NULL;
	layout l;

	if (n < 1 || n > INT32_MAX || M < 1 || M > INT32_MAX) {
		pcg_fail(err, "%u tokens, %u groups: both must be in [1, 2^31)", n, M);
		return NULL;
	}
	if (!isfinite(theta)) {
		pcg_fail(err, "theta is not finite");
		return NULL;
	}
	nnz = start[M];
	if (start[0] != 0 || nnz > ((uint64_t)1 << 40)) {
		pcg_fail(err, "group offsets must start at 0 and count at most 2^40 members");
		return NULL;
	}
	tok_start = calloc((size_t)n + 1, sizeof *tok_start);
	cursor = malloc((size_t)n * sizeof *cursor);
	tsum = calloc(n, sizeof *tsum);
	if (!tok_start || !cursor || !tsum) {
		pcg_fail(err, "out of memory");
		goto out;
	}
	for (uint32_t k = 0; k < M; k++) {
		if (start[k + 1] <= start[k] || start[k + 1] > nnz) {
			pcg_fail(err, "group %u: empty, or offsets out of order", k);
			goto out;
		}
		for (uint64_t j = start[k]; j < start[k + 1]; j++) {
			uint32_t t = members[j];
			if (t >= n || (j > start[k] && t <= members[j - 1])) {
				pcg_fail(err, "group %u: member %u out of range [0, %u) or not "
					 "ascending", k, t, n);
				goto out;
			}
			if (score && !(score[j] > 0.0 && isfinite(score[j]))) {
				pcg_fail(err, "group %u: score of token %u is %g: must be positive",
					 k, t, score[j]);
				goto out;
			}
			tok_start[t + 1]++;
			tsum[t] += score ? score[j] : 1.0;
		}
	}
	for (uint32_t t = 0; t < n; t++) {
		if (tok_start[t + 1] == 0) {
			pcg_fail(err, "token %u is in no group", t);
			goto out;
		}
		tok_start[t + 1] += tok_start[t];
	}

	l = layout_of(n, M, nnz);
	b = calloc(1, l.total);
	a = calloc(1, sizeof *a);
	if (b == NULL || a == NULL) {
		pcg_fail(err, "out of memory (%llu bytes)", (unsigned long long)l.total);
		goto out;
	}
	pcg_put32(b, H_WEIGHTS, kind);
	pcg_put32(b, H_N, n);
	pcg_put32(b, H_OFFSET, token_offset);
	pcg_put32(b, H_M, M);
	pcg_put32(b, H_TOPK, topk);
	memcpy(b + H_THETA, &theta, 8);
	pcg_put64(b, H_NNZ, nnz);
	{
		uint64_t *gs = (uint64_t *)(b + l.grp_start), *ts = (uint64_t *)(b + l.tok_start);
		uint32_t *gt = (uint32_t *)(b + l.grp_tok), *tg = (uint32_t *)(b + l.tok_grp);
		float *gw = (float *)(b + l.grp_w), *tw = (float *)(b + l.tok_w);

		memcpy(gs, start, ((size_t)M + 1) * sizeof *gs);
		memcpy(ts, tok_start, ((size_t)n + 1) * sizeof *ts);
		memcpy(gt, members, nnz * sizeof *gt);
		memcpy(cursor, tok_start, (size_t)n * sizeof *cursor);
		for (uint32_t k = 0; k < M; k++)
			for (uint64_t j = start[k]; j < start[k + 1]; j++) {
				uint32_t t = members[j];
				uint64_t c = cursor[t]++;
				/* Eq. 2 by construction; equal split is Eq. 3. */
				gw[j] = (float)((score ? score[j] : 1.0) / tsum[t]);
				tg[c] = k;
				tw[c] = gw[j];
			}
	}
	pcg_img_seal(b, l.total, &KIND);
	if (validate(b, l.total, "ASG", &a->v, err) < 0)
		goto out;
	pcg_bytes_own(&a->img, b, l.total);
	b = NULL;
	free(tok_start);
	free(cursor);
	free(tsum);
	return a;
out:
	free(tok_start);
	free(cursor);
	free(tsum);
	free(b);
	free(a);
	return NULL;
}

asg *asg_from_groups(uint32_t n, uint32_t M, const uint64_t *start, const uint32_t *members,
		     const double *score, uint32_t token_offset, double theta, uint32_t topk,
		     pcg_err *err)
{
	return make(n, M, start, members, score, token_offset, theta, topk,
		    score ? ASG_W_GIVEN : ASG_W_EQUAL, err);
}

/* The file at path, or size bytes of memory (path NULL), named name. */
static asg *load(const char *path, const void *image, size_t size, const char *name,
		 pcg_err *err)
{
	asg *a = calloc(1, sizeof *a);

	if (a == NULL) {
		pcg_fail(err, "%s: out of memory", path ? path : name);
		return NULL;
	}
	if (pcg_img_load(&a->img, path, image, size, &KIND, &name, err) < 0) {
		free(a);
		return NULL;
	}
	if (validate(a->img.data, a->img.size, name, &a->v, err) < 0) {
		asg_close(&a);
		return NULL;
	}
	return a;
}

asg *asg_open(const char *path, pcg_err *err)
{
	return load(path, NULL, 0, NULL, err);
}

asg *asg_from_memory(const void *image, size_t size, const char *name, pcg_err *err)
{
	return load(NULL, image, size, name, err);
}

void asg_close(asg **ap)
{
	asg *a = ap ? *ap : NULL;

	if (a == NULL)
		return;
	pcg_bytes_close(&a->img);
	free(a);
	*ap = NULL;
}

int asg_write(const asg *a, const char *path, pcg_err *err)
{
	return pcg_write_file(path, a->img.data, a->v.bytes, 0644, err);
}

/* ---- building from embeddings ---- */

/* The similar pairs found so far (asg_pair: asg.h). */
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
	a = make((uint32_t)n, M, gstart, members, score, o->token_offset, o->theta,
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
	a = make((uint32_t)n, (uint32_t)n, start, members, score, o->token_offset, 0.0,
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

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

void asg_stats_get(const asg *a, asg_stats *s)
{
	const asg_view *v = &a->v;
	uint64_t *sz = malloc((size_t)v->M * sizeof *sz), singles = 0;

	memset(s, 0, sizeof *s);
	for (uint32_t k = 0; k < v->M; k++) {
		uint64_t m = v->grp_start[k + 1] - v->grp_start[k];
		if (sz)
			sz[k] = m;
		singles += m == 1;
		if (m > s->max_size)
			s->max_size = m;
	}
	for (uint32_t t = 0; t < v->n; t++) {
		uint64_t m = v->tok_start[t + 1] - v->tok_start[t];
		if (m > s->max_n)
			s->max_n = m;
	}
	s->mean_size = (double)v->nnz / v->M;
	s->mean_n = (double)v->nnz / v->n;
	s->singleton_share = (double)singles / v->M;
	if (sz) {
		qsort(sz, v->M, sizeof *sz, cmp_u64);
		s->median_size = v->M % 2 ? (double)sz[v->M / 2]
			: 0.5 * ((double)sz[v->M / 2 - 1] + (double)sz[v->M / 2]);
	} else {
		s->median_size = NAN;
	}
	free(sz);
}

void asg_print_stats(FILE *f, const asg *a, const char *prefix)
{
	static const char *kinds[] = { "equal", "similarity", "given" };
	const asg_view *v = &a->v;
	asg_stats s;

	asg_stats_get(a, &s);
	fprintf(f, "%sversion\t%d\n", prefix, ASG_VERSION);
	fprintf(f, "%sn\t%u\n", prefix, v->n);
	fprintf(f, "%stoken_offset\t%u\n", prefix, v->token_offset);
	fprintf(f, "%stheta\t%g\n", prefix, v->theta);
	fprintf(f, "%stopk\t%u\n", prefix, v->topk);
	fprintf(f, "%sweights\t%s\n", prefix, kinds[v->weights]);
	fprintf(f, "%sgroups\t%u\n", prefix, v->M);
	fprintf(f, "%smembers\t%llu\n", prefix, (unsigned long long)v->nnz);
	fprintf(f, "%sgroup_size_mean\t%.4g\n", prefix, s.mean_size);
	fprintf(f, "%sgroup_size_median\t%g\n", prefix, s.median_size);
	fprintf(f, "%sgroup_size_max\t%llu\n", prefix, (unsigned long long)s.max_size);
	fprintf(f, "%sgroups_per_token_mean\t%.4g\n", prefix, s.mean_n);
	fprintf(f, "%sgroups_per_token_max\t%llu\n", prefix, (unsigned long long)s.max_n);
	fprintf(f, "%ssingleton_share\t%.4g\n", prefix, s.singleton_share);
	fprintf(f, "%sbytes\t%llu\n", prefix, (unsigned long long)v->bytes);
	fprintf(f, "%schecksum\t%016llx\n", prefix, (unsigned long long)v->checksum);
}
