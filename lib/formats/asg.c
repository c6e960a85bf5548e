/* asg.c: making, writing, opening and validating ASG files (see asg.h and
 * man/asg.5 for the format; lib/speculate/asg_build.c builds the groups).
 *
 * One code path makes every image (asg_from_groups_kind), and every image,
 * made here or read from a file, goes through the same validator before
 * anyone sees it, so the builder's output is checked by the reader's rules.
 */
#include "asg.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fileio.h"
#include "image.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the ASG file is little-endian and is used in place: a little-endian host is assumed"
#endif

static int validate(const unsigned char *b, uint64_t size, const char *name, void *view,
		    pcg_err *err);
static const pcg_img_kind KIND = { { 'P', 'C', 'G', '-', 'A', 'S', 'G', '\n' }, "ASG",
				       "an ASG", ASG_VERSION, validate };

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
static int validate(const unsigned char *b, uint64_t size, const char *name, void *view,
		    pcg_err *err)
{
	asg_view *v = view;
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

asg *asg_from_groups_kind(uint32_t n, uint32_t M, const uint64_t *start, const uint32_t *members,
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
	return asg_from_groups_kind(n, M, start, members, score, token_offset, theta, topk,
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
	if (pcg_img_load(&a->img, path, image, size, &KIND, name, &a->v, err) < 0) {
		free(a);
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
