/* tm.c: counting bigrams, building, writing, opening and validating TM files
 * (see tm.h and man/tm.5 for the format).
 *
 * One code path makes every image (tm_from_counts), and every image, made
 * here or read from a file, goes through the same validator before anyone
 * sees it, so the builder's output is checked by the reader's rules.
 */
#include "tm.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileio.h"
#include "image.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the TM file is little-endian and is used in place: a little-endian host is assumed"
#endif

static int validate(const unsigned char *b, uint64_t size, const char *name, void *view,
		    pcg_err *err);
static const pcg_img_kind KIND = { { 'P', 'C', 'G', '-', 'T', 'M', '\n', 0 }, "TM", "a TM",
				       TM_VERSION, validate };

/* Header field offsets (man/tm.5). */
enum {
	H_MAGIC = 0, H_VERSION = 8, H_N = 12, H_PRUNE = 16, H_RESERVED = 20, H_ALPHA = 24,
	H_NNZ = 32, H_TOTAL = 40, H_BYTES = 48, H_CHECKSUM = 56,
};

/* alpha is bounded so that alpha * n and the counts stay far from overflow
 * of the double mantissa's meaning; 1e6 is beyond any useful smoothing. */
#define ALPHA_MAX 1e6

struct tmat {
	tm_view v;
	pcg_bytes img;    /* the file: mapped, read, or built in memory */
};

const tm_view *tm_get(const tmat *t)
{
	return &t->v;
}

typedef struct layout {
	uint64_t row_start, row_total, cnt, col, total;
} layout;

/* The caller bounds n <= 2^32 and nnz <= 2^56, so nothing overflows. */
static layout layout_of(uint64_t n, uint64_t nnz)
{
	layout l;

	l.row_start = TM_HEADER_BYTES;
	l.row_total = l.row_start + 8 * (n + 1);
	l.cnt = l.row_total + 8 * n;
	l.col = l.cnt + 8 * nnz;
	l.total = l.col + pcg_align8(4 * nnz);
	return l;
}

#define U(x) ((unsigned long long)(x))

/* Checks an image of size bytes (8-byte aligned in memory) and fills v. */
static int validate(const unsigned char *b, uint64_t size, const char *name, void *view,
		    pcg_err *err)
{
	tm_view *v = view;
	uint64_t n, nnz, total = 0;
	double alpha;
	layout l;

	if (pcg_img_check(b, size, &KIND, name, err) < 0)
		return -1;
	/* From here on the bytes are as written; a crafted file with a valid
	 * checksum still has every field checked. */
	n = pcg_get32(b, H_N);
	nnz = pcg_get64(b, H_NNZ);
	memcpy(&alpha, b + H_ALPHA, 8);
	if (n < 1 || n > INT32_MAX)
		return pcg_fail(err, "%s: n = %llu tokens: must be in [1, 2^31)", name, U(n));
	if (pcg_get32(b, H_RESERVED) != 0)
		return pcg_fail(err, "%s: reserved header field is %u, not 0", name,
				pcg_get32(b, H_RESERVED));
	if (!(alpha > 0.0 && alpha <= ALPHA_MAX))
		return pcg_fail(err, "%s: alpha = %g: must be in (0, %g]", name, alpha, ALPHA_MAX);
	if (pcg_get32(b, H_PRUNE) > n)
		return pcg_fail(err, "%s: prune = %u above n = %llu", name, pcg_get32(b, H_PRUNE),
				U(n));
	if (nnz > size / 12 || nnz > n * n)
		return pcg_fail(err, "%s: nnz = %llu: impossible for %llu bytes and n = %llu",
				name, U(nnz), U(size), U(n));
	l = layout_of(n, nnz);
	if (l.total != size)
		return pcg_fail(err, "%s: %llu bytes, but n and nnz need %llu", name, U(size),
				U(l.total));

	v->n = (uint32_t)n;
	v->prune = pcg_get32(b, H_PRUNE);
	v->alpha = alpha;
	v->nnz = nnz;
	v->total = pcg_get64(b, H_TOTAL);
	v->bytes = size;
	v->checksum = pcg_get64(b, PCG_IMG_CHECKSUM);
	v->row_start = (const uint64_t *)(b + l.row_start);
	v->row_total = (const uint64_t *)(b + l.row_total);
	v->cnt = (const uint64_t *)(b + l.cnt);
	v->col = (const uint32_t *)(b + l.col);

	if (v->row_start[0] != 0 || v->row_start[n] != nnz)
		return pcg_fail(err, "%s: row offsets do not run from 0 to nnz = %llu", name,
				U(nnz));
	for (uint64_t a = 0; a < n; a++) {
		uint64_t s = v->row_start[a], e = v->row_start[a + 1], rs = 0;
		if (e < s || e > nnz)
			return pcg_fail(err, "%s: row %llu: offsets %llu..%llu out of order", name,
					U(a), U(s), U(e));
		if (v->prune && e - s > v->prune)
			return pcg_fail(err, "%s: row %llu: %llu successors, above prune = %u",
					name, U(a), U(e - s), v->prune);
		for (uint64_t j = s; j < e; j++) {
			if (v->col[j] >= n || (j > s && v->col[j] <= v->col[j - 1]))
				return pcg_fail(err, "%s: row %llu: column %u out of range [0, %llu) "
						"or not ascending", name, U(a), v->col[j], U(n));
			if (v->cnt[j] < 1 || v->cnt[j] > ((uint64_t)1 << 52) - rs)
				return pcg_fail(err, "%s: row %llu: count %llu of column %u is 0 "
						"or the row sum passes 2^52", name, U(a),
						U(v->cnt[j]), v->col[j]);
			rs += v->cnt[j];
		}
		if (v->row_total[a] != rs)
			return pcg_fail(err, "%s: row %llu: total %llu, but its counts sum to %llu",
					name, U(a), U(v->row_total[a]), U(rs));
		if (rs > ((uint64_t)1 << 52) - total)
			return pcg_fail(err, "%s: the counts sum past 2^52", name);
		total += rs;
	}
	if (v->total != total)
		return pcg_fail(err, "%s: header total %llu, but the rows sum to %llu", name,
				U(v->total), U(total));
	return 0;
}

/* A (column, count) pair while pruning a row. */
typedef struct cc {
	uint32_t col;
	uint64_t cnt;
} cc;

static int by_count_desc(const void *x, const void *y)
{
	const cc *p = x, *q = y;
	if (p->cnt != q->cnt)
		return p->cnt > q->cnt ? -1 : 1;
	return p->col < q->col ? -1 : p->col > q->col;
}

static int by_col(const void *x, const void *y)
{
	const cc *p = x, *q = y;
	return p->col < q->col ? -1 : p->col > q->col;
}

tmat *tm_from_counts(uint32_t n, double alpha, uint32_t prune, const uint64_t *row_start,
		   const uint32_t *col, const uint64_t *cnt, pcg_err *err)
{
	uint64_t nnz_in, nnz = 0, total = 0, maxdeg = 0;
	unsigned char *b = NULL;
	cc *row = NULL;
	tmat *t = NULL;
	layout l;

	if (n < 1 || n > INT32_MAX) {
		pcg_fail(err, "n = %u tokens: must be in [1, 2^31)", n);
		return NULL;
	}
	if (!(alpha > 0.0 && alpha <= ALPHA_MAX)) {
		pcg_fail(err, "alpha = %g: must be in (0, %g]", alpha, ALPHA_MAX);
		return NULL;
	}
	if (prune >= n)
		prune = 0; /* keeping n per row keeps everything */
	nnz_in = row_start[n];
	if (row_start[0] != 0 || nnz_in > ((uint64_t)1 << 40)) {
		pcg_fail(err, "row offsets must start at 0 and count at most 2^40 entries");
		return NULL;
	}
	for (uint32_t a = 0; a < n; a++) {
		uint64_t s = row_start[a], e = row_start[a + 1], deg;
		if (e < s || e > nnz_in) {
			pcg_fail(err, "row %u: offsets out of order", a);
			return NULL;
		}
		for (uint64_t j = s; j < e; j++)
			if (col[j] >= n || (j > s && col[j] <= col[j - 1]) || cnt[j] < 1) {
				pcg_fail(err, "row %u: column %u out of range [0, %u), not ascending, "
					 "or with count 0", a, col[j], n);
				return NULL;
			}
		deg = e - s;
		if (deg > maxdeg)
			maxdeg = deg;
		nnz += prune && deg > prune ? prune : deg;
	}
	l = layout_of(n, nnz);
	b = calloc(1, l.total);
	t = calloc(1, sizeof *t);
	row = malloc((maxdeg ? maxdeg : 1) * sizeof *row);
	if (b == NULL || t == NULL || row == NULL) {
		pcg_fail(err, "out of memory (%llu bytes)", U(l.total));
		goto fail;
	}
	{
		uint64_t *rs = (uint64_t *)(b + l.row_start), *rt = (uint64_t *)(b + l.row_total);
		uint64_t *oc = (uint64_t *)(b + l.cnt);
		uint32_t *ocol = (uint32_t *)(b + l.col);
		uint64_t k = 0;

		for (uint32_t a = 0; a < n; a++) {
			uint64_t s = row_start[a], deg = row_start[a + 1] - s, sum = 0;
			for (uint64_t j = 0; j < deg; j++)
				row[j] = (cc){ col[s + j], cnt[s + j] };
			if (prune && deg > prune) {
				/* The prune largest counts, ties to the lower id, back in id order. */
				qsort(row, deg, sizeof *row, by_count_desc);
				deg = prune;
				qsort(row, deg, sizeof *row, by_col);
			}
			rs[a] = k;
			for (uint64_t j = 0; j < deg; j++, k++) {
				if (row[j].cnt > ((uint64_t)1 << 52) - sum - total) {
					pcg_fail(err, "the counts sum past 2^52");
					goto fail;
				}
				ocol[k] = row[j].col;
				oc[k] = row[j].cnt;
				sum += row[j].cnt;
			}
			rt[a] = sum;
			total += sum;
		}
		rs[n] = k;
	}
	pcg_put32(b, H_N, n);
	pcg_put32(b, H_PRUNE, prune);
	memcpy(b + H_ALPHA, &alpha, 8);
	pcg_put64(b, H_NNZ, nnz);
	pcg_put64(b, H_TOTAL, total);
	pcg_img_seal(b, l.total, &KIND);
	if (validate(b, l.total, "TM", &t->v, err) < 0)
		goto fail;
	pcg_bytes_own(&t->img, b, l.total);
	free(row);
	return t;
fail:
	free(row);
	free(b);
	free(t);
	return NULL;
}

/* The file at path, or size bytes of memory (path NULL), named name. */
static tmat *load(const char *path, const void *image, size_t size, const char *name,
		  pcg_err *err)
{
	tmat *t = calloc(1, sizeof *t);

	if (t == NULL) {
		pcg_fail(err, "%s: out of memory", path ? path : name);
		return NULL;
	}
	if (pcg_img_load(&t->img, path, image, size, &KIND, name, &t->v, err) < 0) {
		free(t);
		return NULL;
	}
	return t;
}

tmat *tm_from_memory(const void *image, size_t size, const char *name, pcg_err *err)
{
	return load(NULL, image, size, name, err);
}

tmat *tm_open(const char *path, pcg_err *err)
{
	return load(path, NULL, 0, NULL, err);
}

void tm_close(tmat **tp)
{
	tmat *t = tp ? *tp : NULL;

	if (t == NULL)
		return;
	pcg_bytes_close(&t->img);
	free(t);
	*tp = NULL;
}

int tm_write(const tmat *t, const char *path, pcg_err *err)
{
	return pcg_write_file(path, t->img.data, t->v.bytes, 0644, err);
}

/* Index of b in row a, or -1. */
static int64_t find(const tm_view *v, uint32_t a, uint32_t b)
{
	uint64_t lo = v->row_start[a], hi = v->row_start[a + 1];

	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;
		if (v->col[mid] < b)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < v->row_start[a + 1] && v->col[lo] == b ? (int64_t)lo : -1;
}

double tm_logq(const tmat *t, uint32_t a, uint32_t b)
{
	const tm_view *v = &t->v;
	int64_t j;

	assert(a < v->n && b < v->n);
	j = find(v, a, b);
	return log(((j < 0 ? 0.0 : (double)v->cnt[j]) + v->alpha) /
		   ((double)v->row_total[a] + v->alpha * v->n));
}

int tm_submatrix(const tmat *t, const uint32_t *tok, int m, double *out, pcg_err *err)
{
	const tm_view *v = &t->v;

	for (int i = 0; i < m; i++)
		if (tok[i] >= v->n)
			return pcg_fail(err, "token %u at %d: out of range [0, %u)", tok[i], i, v->n);
	for (int i = 0; i < m; i++) {
		double den = (double)v->row_total[tok[i]] + v->alpha * v->n;
		double unseen = log(v->alpha / den);
		for (int j = 0; j < m; j++) {
			int64_t k = find(v, tok[i], tok[j]);
			out[(size_t)i * m + j] = k < 0 ? unseen
				: log(((double)v->cnt[k] + v->alpha) / den);
		}
	}
	return 0;
}

/* ---- counting ---- */

/* Bigrams are keys a << 32 | b. New ones go to pending; when it fills, it
 * is sorted, run-length coded and merged into the sorted (key, count) list. */
struct tm_counter {
	uint32_t n;
	uint64_t seqs, bigrams;
	uint64_t *pending;
	size_t np, cap;
	uint64_t *key, *cnt; /* sorted distinct keys and their counts */
	size_t nk;
};

#define PENDING_CAP (1u << 20)

tm_counter *tm_counter_new(uint32_t n, pcg_err *err)
{
	tm_counter *c;

	if (n < 1 || n > INT32_MAX) {
		pcg_fail(err, "n = %u tokens: must be in [1, 2^31)", n);
		return NULL;
	}
	c = calloc(1, sizeof *c);
	if (c == NULL || (c->pending = malloc(PENDING_CAP * sizeof *c->pending)) == NULL) {
		free(c);
		pcg_fail(err, "out of memory");
		return NULL;
	}
	c->n = n;
	c->cap = PENDING_CAP;
	return c;
}

void tm_counter_free(tm_counter **cp)
{
	tm_counter *c = cp ? *cp : NULL;

	if (c == NULL)
		return;
	free(c->pending);
	free(c->key);
	free(c->cnt);
	free(c);
	*cp = NULL;
}

static int cmp_u64(const void *x, const void *y)
{
	uint64_t p = *(const uint64_t *)x, q = *(const uint64_t *)y;
	return p < q ? -1 : p > q;
}

/* Merges pending into (key, cnt). */
static int flush(tm_counter *c, pcg_err *err)
{
	size_t d = 0, i = 0, j = 0, k = 0, cap;
	uint64_t *key, *cnt;

	if (c->np == 0)
		return 0;
	qsort(c->pending, c->np, sizeof *c->pending, cmp_u64);
	for (size_t p = 1; p <= c->np; p++)
		if (p == c->np || c->pending[p] != c->pending[p - 1])
			d++;
	cap = c->nk + d;
	key = malloc(cap * sizeof *key);
	cnt = malloc(cap * sizeof *cnt);
	if (key == NULL || cnt == NULL) {
		free(key);
		free(cnt);
		return pcg_fail(err, "out of memory (%zu distinct bigrams)", cap);
	}
	while (i < c->nk || j < c->np) {
		if (j < c->np && (i == c->nk || c->pending[j] <= c->key[i])) {
			uint64_t kk = c->pending[j], run = 0;
			while (j < c->np && c->pending[j] == kk)
				j++, run++;
			if (i < c->nk && c->key[i] == kk)
				run += c->cnt[i++];
			key[k] = kk;
			cnt[k++] = run;
		} else {
			key[k] = c->key[i];
			cnt[k++] = c->cnt[i++];
		}
	}
	free(c->key);
	free(c->cnt);
	c->key = key;
	c->cnt = cnt;
	c->nk = k;
	c->np = 0;
	return 0;
}

int tm_counter_add(tm_counter *c, const uint32_t *seq, size_t len, pcg_err *err)
{
	for (size_t i = 0; i < len; i++)
		if (seq[i] >= c->n)
			return pcg_fail(err, "token %zu: id %u out of range [0, %u)", i + 1, seq[i],
					c->n);
	for (size_t i = 1; i < len; i++) {
		if (c->np == c->cap && flush(c, err) < 0)
			return -1;
		c->pending[c->np++] = (uint64_t)seq[i - 1] << 32 | seq[i];
	}
	c->seqs++;
	c->bigrams += len > 1 ? len - 1 : 0;
	return 0;
}

uint64_t tm_counter_sequences(const tm_counter *c)
{
	return c->seqs;
}

uint64_t tm_counter_bigrams(const tm_counter *c)
{
	return c->bigrams;
}

tmat *tm_counter_finish(tm_counter *c, double alpha, uint32_t prune, pcg_err *err)
{
	uint64_t *row_start;
	uint32_t *col;
	tmat *t;

	if (flush(c, err) < 0)
		return NULL;
	row_start = calloc((size_t)c->n + 1, sizeof *row_start);
	col = malloc((c->nk ? c->nk : 1) * sizeof *col);
	if (row_start == NULL || col == NULL) {
		free(row_start);
		free(col);
		pcg_fail(err, "out of memory");
		return NULL;
	}
	/* The keys are sorted by (a, b): CSR order already. */
	for (size_t k = 0; k < c->nk; k++) {
		row_start[(c->key[k] >> 32) + 1]++;
		col[k] = (uint32_t)c->key[k];
	}
	for (uint32_t a = 0; a < c->n; a++)
		row_start[a + 1] += row_start[a];
	t = tm_from_counts(c->n, alpha, prune, row_start, col, c->cnt ? c->cnt : row_start,
			   err);
	free(row_start);
	free(col);
	return t;
}

void tm_print_stats(FILE *f, const tmat *t, const char *prefix)
{
	const tm_view *v = &t->v;
	uint64_t maxdeg = 0, empty = 0;

	for (uint32_t a = 0; a < v->n; a++) {
		uint64_t d = v->row_start[a + 1] - v->row_start[a];
		if (d > maxdeg)
			maxdeg = d;
		empty += d == 0;
	}
	fprintf(f, "%sversion\t%d\n", prefix, TM_VERSION);
	fprintf(f, "%sn\t%u\n", prefix, v->n);
	fprintf(f, "%salpha\t%g\n", prefix, v->alpha);
	fprintf(f, "%sprune\t%u\n", prefix, v->prune);
	fprintf(f, "%snnz\t%llu\n", prefix, U(v->nnz));
	fprintf(f, "%sbigrams_kept\t%llu\n", prefix, U(v->total));
	fprintf(f, "%ssuccessors_mean\t%.4g\n", prefix, (double)v->nnz / v->n);
	fprintf(f, "%ssuccessors_max\t%llu\n", prefix, U(maxdeg));
	fprintf(f, "%sempty_rows\t%llu\n", prefix, U(empty));
	fprintf(f, "%sdensity\t%.4g\n", prefix, (double)v->nnz / ((double)v->n * v->n));
	fprintf(f, "%sbytes\t%llu\n", prefix, U(v->bytes));
	fprintf(f, "%schecksum\t%016llx\n", prefix, U(v->checksum));
}
