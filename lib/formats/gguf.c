/* gguf.c: reads GGUF files in place (mapped, every field validated before
 * anything is handed out) and writes them all-or-nothing (see gguf.h).
 *
 * The reader walks the file once with a cursor that checks every length
 * against the bytes that remain, so a count is never trusted before it is
 * known to fit in the file: each element of an array takes at least one
 * byte, each string at least its 8-byte length, each key-value pair at
 * least 13 bytes and each tensor info at least 24.
 */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileio.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gguf.c reads little-endian values in place"
#endif

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32
/* Arrays nested deeper than this are refused, which bounds the recursion. */
#define GGUF_MAX_DEPTH 8
/* Smallest encodings, used to bound counts by the bytes that remain. */
#define GGUF_MIN_KV 13     /* key length, empty key, type, one byte of value */
#define GGUF_MIN_TENSOR 24 /* name length, n_dims, type, offset */

/* Every ggml tensor type, so that a file is valid or not independently of
 * what the engine computes with (gguf-py's GGML_QUANT_SIZES). */
static const struct ggml_type_info {
	int id;
	const char *name;
	int block;
	int bytes;
	pcg_dtype dtype;
} ggml_types[] = {
	{ 0, "F32", 1, 4, PCG_F32 },
	{ 1, "F16", 1, 2, PCG_F16 },
	{ 2, "Q4_0", 32, 18, PCG_Q4_0 },
	{ 3, "Q4_1", 32, 20, PCG_DTYPE_OTHER },
	{ 6, "Q5_0", 32, 22, PCG_DTYPE_OTHER },
	{ 7, "Q5_1", 32, 24, PCG_DTYPE_OTHER },
	{ 8, "Q8_0", 32, 34, PCG_Q8_0 },
	{ 9, "Q8_1", 32, 40, PCG_DTYPE_OTHER },
	{ 10, "Q2_K", 256, 84, PCG_DTYPE_OTHER },
	{ 11, "Q3_K", 256, 110, PCG_DTYPE_OTHER },
	{ 12, "Q4_K", 256, 144, PCG_Q4_K },
	{ 13, "Q5_K", 256, 176, PCG_Q5_K },
	{ 14, "Q6_K", 256, 210, PCG_Q6_K },
	{ 15, "Q8_K", 256, 292, PCG_DTYPE_OTHER },
	{ 16, "IQ2_XXS", 256, 66, PCG_DTYPE_OTHER },
	{ 17, "IQ2_XS", 256, 74, PCG_DTYPE_OTHER },
	{ 18, "IQ3_XXS", 256, 98, PCG_DTYPE_OTHER },
	{ 19, "IQ1_S", 256, 50, PCG_DTYPE_OTHER },
	{ 20, "IQ4_NL", 32, 18, PCG_DTYPE_OTHER },
	{ 21, "IQ3_S", 256, 110, PCG_DTYPE_OTHER },
	{ 22, "IQ2_S", 256, 82, PCG_DTYPE_OTHER },
	{ 23, "IQ4_XS", 256, 136, PCG_DTYPE_OTHER },
	{ 24, "I8", 1, 1, PCG_DTYPE_OTHER },
	{ 25, "I16", 1, 2, PCG_DTYPE_OTHER },
	{ 26, "I32", 1, 4, PCG_DTYPE_OTHER },
	{ 27, "I64", 1, 8, PCG_DTYPE_OTHER },
	{ 28, "F64", 1, 8, PCG_DTYPE_OTHER },
	{ 29, "IQ1_M", 256, 56, PCG_DTYPE_OTHER },
	{ 30, "BF16", 1, 2, PCG_BF16 },
	{ 34, "TQ1_0", 256, 54, PCG_DTYPE_OTHER },
	{ 35, "TQ2_0", 256, 66, PCG_DTYPE_OTHER },
	{ 39, "MXFP4", 32, 17, PCG_DTYPE_OTHER },
	{ 40, "NVFP4", 64, 36, PCG_DTYPE_OTHER },
	{ 41, "Q1_0", 128, 18, PCG_DTYPE_OTHER },
};
#define N_GGML_TYPES (int)(sizeof ggml_types / sizeof ggml_types[0])

static const struct ggml_type_info *ggml_type_by_id(uint32_t id)
{
	for (int i = 0; i < N_GGML_TYPES; i++)
		if ((uint32_t)ggml_types[i].id == id)
			return &ggml_types[i];
	return NULL;
}

static const struct ggml_type_info *ggml_type_by_dtype(pcg_dtype t)
{
	if (t == PCG_DTYPE_OTHER)
		return NULL;
	for (int i = 0; i < N_GGML_TYPES; i++)
		if (ggml_types[i].dtype == t)
			return &ggml_types[i];
	return NULL;
}

static const char *const type_names[] = {
	"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
	"bool", "string", "array", "uint64", "int64", "float64",
};

static const char *type_name(gguf_type t)
{
	return (unsigned)t < sizeof type_names / sizeof type_names[0] ? type_names[t] : "?";
}

/* Bytes of a fixed-size value; 0 for string and array, -1 for an unknown type. */
static int scalar_size(uint32_t t)
{
	switch (t) {
	case GGUF_UINT8: case GGUF_INT8: case GGUF_BOOL: return 1;
	case GGUF_UINT16: case GGUF_INT16: return 2;
	case GGUF_UINT32: case GGUF_INT32: case GGUF_FLOAT32: return 4;
	case GGUF_UINT64: case GGUF_INT64: case GGUF_FLOAT64: return 8;
	case GGUF_STRING: case GGUF_ARRAY: return 0;
	default: return -1;
	}
}

static int is_integer(gguf_type t)
{
	return t <= GGUF_INT32 || t == GGUF_UINT64 || t == GGUF_INT64;
}

/* ------------------------------------------------------------------ reading */

typedef struct gguf_kv {
	char *key;
	gguf_type type;
	gguf_type arr_type;            /* arrays: the element type */
	uint64_t n;                    /* arrays: the count; strings: the length */
	const unsigned char *val;      /* the value's bytes (an array's first element) */
	const unsigned char **elem;    /* arrays of strings: each element's length field */
} gguf_kv;

struct gguf_file {
	pcg_bytes im;
	const unsigned char *data;
	size_t size;
	uint32_t version;
	uint64_t alignment;
	gguf_kv *kv;
	int n_kv;
	int *kv_by_name; /* indices sorted by key */
	gguf_tensor *t;
	int n_t;
	int *t_by_name;
};

typedef struct cursor {
	const unsigned char *base, *p, *end;
	pcg_err *err;
} cursor;

static size_t left(const cursor *c)
{
	return (size_t)(c->end - c->p);
}

static size_t at(const cursor *c)
{
	return (size_t)(c->p - c->base);
}

/* Copies a name from the file for a message: printable ASCII, the rest
 * shown as '?', cut at 64 bytes. */
static const char *shown(char buf[72], const unsigned char *s, size_t n)
{
	size_t i, m = n < 64 ? n : 64;

	for (i = 0; i < m; i++)
		buf[i] = s[i] >= 0x20 && s[i] < 0x7f ? (char)s[i] : '?';
	if (n > m)
		memcpy(buf + m, "...", 4);
	else
		buf[m] = '\0';
	return buf;
}

static const char *name_shown(char buf[72], const char *s)
{
	return shown(buf, (const unsigned char *)s, strlen(s));
}

/* "truncated at byte N: <what> needs X bytes, Y remain". */
static int need(cursor *c, uint64_t n, const char *what)
{
	if (n <= left(c))
		return 0;
	return pcg_fail(c->err, "truncated at byte %zu: %s needs %llu bytes, %zu remain", at(c),
			what, (unsigned long long)n, left(c));
}

static int rd_u32(cursor *c, uint32_t *v, const char *what)
{
	if (need(c, 4, what) < 0)
		return -1;
	memcpy(v, c->p, 4);
	c->p += 4;
	return 0;
}

static int rd_u64(cursor *c, uint64_t *v, const char *what)
{
	if (need(c, 8, what) < 0)
		return -1;
	memcpy(v, c->p, 8);
	c->p += 8;
	return 0;
}

/* A string: its u64 length, then that many bytes (left in the file). */
static int rd_str(cursor *c, const unsigned char **s, uint64_t *len, const char *what)
{
	char w[96];

	if (rd_u64(c, len, what) < 0)
		return -1;
	snprintf(w, sizeof w, "%s (a string of %llu bytes)", what, (unsigned long long)*len);
	if (need(c, *len, w) < 0)
		return -1;
	*s = c->p;
	c->p += *len;
	return 0;
}

/* Skips count elements of type t (validating them); for an array of
 * strings, elem (when not NULL) gets each element's position. */
static int skip_array(cursor *c, uint32_t t, uint64_t count, int depth, const unsigned char **elem,
		      const char *what);

/* Validates one value of type t at the cursor and moves past it. */
static int skip_value(cursor *c, uint32_t t, int depth, const char *what)
{
	int size = scalar_size(t);
	uint64_t len;
	const unsigned char *s;

	if (size < 0)
		return pcg_fail(c->err, "at byte %zu: %s: unknown value type %u", at(c), what, t);
	if (size > 0) {
		if (need(c, (uint64_t)size, what) < 0)
			return -1;
		if (t == GGUF_BOOL && *c->p > 1)
			return pcg_fail(c->err, "at byte %zu: %s: bool %u is neither 0 nor 1", at(c),
					what, *c->p);
		c->p += size;
		return 0;
	}
	if (t == GGUF_STRING)
		return rd_str(c, &s, &len, what);
	{
		uint32_t et;
		uint64_t n;
		if (depth >= GGUF_MAX_DEPTH)
			return pcg_fail(c->err, "at byte %zu: %s: arrays nested more than %d deep",
					at(c), what, GGUF_MAX_DEPTH);
		if (rd_u32(c, &et, what) < 0 || rd_u64(c, &n, what) < 0)
			return -1;
		return skip_array(c, et, n, depth + 1, NULL, what);
	}
}

static int skip_array(cursor *c, uint32_t t, uint64_t count, int depth, const unsigned char **elem,
		      const char *what)
{
	int size = scalar_size(t);
	/* the least each element takes: a string its length, an array its
	 * type and count */
	uint64_t least = size > 0 ? (uint64_t)size : t == GGUF_STRING ? 8 : 12;

	if (size < 0)
		return pcg_fail(c->err, "at byte %zu: %s: unknown array element type %u", at(c), what,
				t);
	if (count > left(c) / least)
		return pcg_fail(c->err, "truncated at byte %zu: %s: an array of %llu %s needs at"
				" least %llu bytes, %zu remain", at(c), what,
				(unsigned long long)count, type_name((gguf_type)t),
				(unsigned long long)count * least, left(c));
	if (size > 0 && t != GGUF_BOOL) {
		c->p += count * (uint64_t)size;
		return 0;
	}
	for (uint64_t i = 0; i < count; i++) {
		if (elem != NULL)
			elem[i] = c->p;
		if (skip_value(c, t, depth, what) < 0)
			return -1;
	}
	return 0;
}

static int cmp_kv_idx(const void *a, const void *b, void *ctx)
{
	const gguf_kv *kv = ctx;
	return strcmp(kv[*(const int *)a].key, kv[*(const int *)b].key);
}

static int cmp_t_idx(const void *a, const void *b, void *ctx)
{
	const gguf_tensor *t = ctx;
	return strcmp(t[*(const int *)a].name, t[*(const int *)b].name);
}

/* A name read from the file as a C string: refused when empty or when it
 * holds a NUL byte (lookups are by C string). */
static char *dup_name(cursor *c, const unsigned char *s, uint64_t n, const char *what)
{
	char *r;

	if (n == 0) {
		pcg_fail(c->err, "at byte %zu: %s is empty", at(c), what);
		return NULL;
	}
	if (memchr(s, 0, n) != NULL) {
		char b[72];
		pcg_fail(c->err, "at byte %zu: %s '%s' contains a NUL byte", at(c), what,
			 shown(b, s, n));
		return NULL;
	}
	r = malloc(n + 1);
	if (r == NULL) {
		pcg_fail(c->err, "out of memory");
		return NULL;
	}
	memcpy(r, s, n);
	r[n] = '\0';
	return r;
}

static int read_kv(gguf_file *f, cursor *c, int i)
{
	gguf_kv *kv = &f->kv[i];
	const unsigned char *s;
	uint64_t len;
	uint32_t t;
	char what[128], b[72];

	snprintf(what, sizeof what, "key %d", i);
	if (rd_str(c, &s, &len, what) < 0 || (kv->key = dup_name(c, s, len, what)) == NULL)
		return -1;
	snprintf(what, sizeof what, "key '%s'", shown(b, s, len));
	if (rd_u32(c, &t, what) < 0)
		return -1;
	if (scalar_size(t) < 0)
		return pcg_fail(c->err, "at byte %zu: %s: unknown value type %u", at(c) - 4, what, t);
	kv->type = (gguf_type)t;
	if (t == GGUF_STRING) {
		if (rd_str(c, &kv->val, &kv->n, what) < 0)
			return -1;
		return 0;
	}
	if (t != GGUF_ARRAY) {
		kv->val = c->p;
		return skip_value(c, t, 0, what);
	}
	if (rd_u32(c, &t, what) < 0 || rd_u64(c, &kv->n, what) < 0)
		return -1;
	if (scalar_size(t) < 0)
		return pcg_fail(c->err, "at byte %zu: %s: unknown array element type %u", at(c) - 12,
				what, t);
	kv->arr_type = (gguf_type)t;
	kv->val = c->p;
	if (t == GGUF_STRING) {
		/* bounded by the file before anything is allocated */
		if (kv->n > left(c) / 8)
			return skip_array(c, t, kv->n, 1, NULL, what);
		kv->elem = malloc((size_t)(kv->n ? kv->n : 1) * sizeof *kv->elem);
		if (kv->elem == NULL)
			return pcg_fail(c->err, "out of memory");
	}
	return skip_array(c, t, kv->n, 1, kv->elem, what);
}

static int read_tensor_info(gguf_file *f, cursor *c, int i, uint64_t *offset)
{
	gguf_tensor *t = &f->t[i];
	const struct ggml_type_info *ti;
	const unsigned char *s;
	uint64_t len, nrows = 1;
	uint32_t nd, type;
	char what[128], b[72];

	snprintf(what, sizeof what, "tensor %d", i);
	if (rd_str(c, &s, &len, what) < 0 || (t->name = dup_name(c, s, len, what)) == NULL)
		return -1;
	snprintf(what, sizeof what, "tensor '%s'", shown(b, s, len));
	if (rd_u32(c, &nd, what) < 0)
		return -1;
	if (nd > GGUF_MAX_DIMS)
		return pcg_fail(c->err, "at byte %zu: %s: %u dimensions, at most %d", at(c) - 4, what,
				nd, GGUF_MAX_DIMS);
	t->ndim = (int)nd;
	for (int d = 0; d < GGUF_MAX_DIMS; d++)
		t->ne[d] = 1;
	for (uint32_t d = 0; d < nd; d++) {
		uint64_t ne;
		if (rd_u64(c, &ne, what) < 0)
			return -1;
		if (ne == 0 || ne > INT64_MAX)
			return pcg_fail(c->err, "at byte %zu: %s: ne[%u] = %lld is not positive",
					at(c) - 8, what, d, (long long)ne);
		t->ne[d] = (int64_t)ne;
	}
	if (rd_u32(c, &type, what) < 0 || rd_u64(c, offset, what) < 0)
		return -1;
	ti = ggml_type_by_id(type);
	if (ti == NULL)
		return pcg_fail(c->err, "%s: unknown ggml type %u", what, type);
	t->ggml_type = ti->id;
	t->type_name = ti->name;
	t->dtype = ti->dtype;
	if (t->ne[0] % ti->block != 0)
		return pcg_fail(c->err, "%s: ne[0] = %lld is not a multiple of %s's block of %d",
				what, (long long)t->ne[0], ti->name, ti->block);
	for (int d = 1; d < GGUF_MAX_DIMS; d++)
		if (__builtin_mul_overflow(nrows, (uint64_t)t->ne[d], &nrows))
			nrows = UINT64_MAX;
	{
		uint64_t row, nbytes, numel;
		if (nrows == UINT64_MAX ||
		    __builtin_mul_overflow((uint64_t)(t->ne[0] / ti->block), (uint64_t)ti->bytes, &row) ||
		    __builtin_mul_overflow(row, nrows, &nbytes) ||
		    __builtin_mul_overflow((uint64_t)t->ne[0], nrows, &numel) || numel > INT64_MAX ||
		    nbytes > SIZE_MAX)
			return pcg_fail(c->err, "%s: shape %lld x %lld x %lld x %lld overflows", what,
					(long long)t->ne[0], (long long)t->ne[1],
					(long long)t->ne[2], (long long)t->ne[3]);
		t->nbytes = (size_t)nbytes;
	}
	return 0;
}

/* general.alignment: a power of two (ggml stores it as uint32). */
static int read_alignment(gguf_file *f, pcg_err *err)
{
	int64_t a;
	int i = gguf_find_key(f, "general.alignment");

	f->alignment = GGUF_DEFAULT_ALIGNMENT;
	if (i < 0)
		return 0;
	if (f->kv[i].type != GGUF_UINT32)
		return pcg_fail(err, "general.alignment: a %s, not a uint32",
				type_name(f->kv[i].type));
	if (gguf_get_int(f, "general.alignment", &a, err) < 0)
		return -1;
	if (a <= 0 || (a & (a - 1)) != 0)
		return pcg_fail(err, "general.alignment: %lld is not a power of two", (long long)a);
	f->alignment = (uint64_t)a;
	return 0;
}

/* Places every tensor: aligned offsets, within the data section, no two
 * sharing a byte. */
static int place_tensors(gguf_file *f, const uint64_t *off, size_t data_start, pcg_err *err)
{
	uint64_t data_size = f->size > data_start ? f->size - data_start : 0;
	pcg_span *sp = malloc((size_t)(f->n_t ? f->n_t : 1) * sizeof *sp);
	char b[72];
	int i;

	if (sp == NULL)
		return pcg_fail(err, "out of memory");
	for (i = 0; i < f->n_t; i++) {
		gguf_tensor *t = &f->t[i];
		if (off[i] % f->alignment != 0) {
			pcg_fail(err, "tensor '%s': offset %llu is not a multiple of the alignment %llu",
				 name_shown(b, t->name), (unsigned long long)off[i],
				 (unsigned long long)f->alignment);
			goto fail;
		}
		if (off[i] > data_size || t->nbytes > data_size - off[i]) {
			pcg_fail(err, "tensor '%s': bytes [%llu, %llu) of the data are beyond the"
				 " file (its data section has %llu bytes from byte %zu)",
				 name_shown(b, t->name),
				 (unsigned long long)off[i], (unsigned long long)off[i] + t->nbytes,
				 (unsigned long long)data_size, data_start);
			goto fail;
		}
		t->data = f->data + data_start + off[i];
		sp[i] = (pcg_span){ off[i], off[i] + t->nbytes, i };
	}
	if ((i = pcg_spans_overlap(sp, f->n_t)) >= 0) {
		pcg_fail(err, "tensor '%s': bytes [%llu, %llu) overlap another tensor",
			 name_shown(b, f->t[sp[i].i].name), (unsigned long long)sp[i].begin,
			 (unsigned long long)sp[i].end);
		goto fail;
	}
	free(sp);
	return 0;
fail:
	free(sp);
	return -1;
}

static int find_dup(int *idx, int n, int (*cmp)(const void *, const void *, void *), void *ctx)
{
	qsort_r(idx, (size_t)n, sizeof *idx, cmp, ctx);
	for (int i = 1; i < n; i++)
		if (cmp(&idx[i - 1], &idx[i], ctx) == 0)
			return idx[i];
	return -1;
}

static int parse(gguf_file *f, pcg_err *err)
{
	cursor c = { f->data, f->data, f->data + f->size, err };
	uint64_t n_t, n_kv, *off = NULL;
	char b[72];
	int i, d;

	if (f->size < 4 || memcmp(f->data, GGUF_MAGIC, 4) != 0)
		return pcg_fail(err, "not a GGUF file (no \"GGUF\" magic at byte 0)");
	c.p += 4;
	if (rd_u32(&c, &f->version, "the version") < 0)
		return -1;
	if (f->version != 2 && f->version != 3)
		return pcg_fail(err, "version %u is not supported (2 and 3 are)%s", f->version,
				f->version > 0xffff && (f->version & 0xffff) == 0 ?
				" (a big-endian file?)" : "");
	if (rd_u64(&c, &n_t, "the tensor count") < 0 || rd_u64(&c, &n_kv, "the key count") < 0)
		return -1;
	if (n_kv > left(&c) / GGUF_MIN_KV || n_kv > INT_MAX)
		return pcg_fail(err, "%llu keys cannot fit in the %zu bytes that remain",
				(unsigned long long)n_kv, left(&c));
	f->kv = calloc((size_t)n_kv + 1, sizeof *f->kv);
	f->kv_by_name = calloc((size_t)n_kv + 1, sizeof *f->kv_by_name);
	if (f->kv == NULL || f->kv_by_name == NULL)
		return pcg_fail(err, "out of memory");
	for (i = 0; i < (int)n_kv; i++) {
		f->n_kv = i + 1;
		if (read_kv(f, &c, i) < 0)
			return -1;
		f->kv_by_name[i] = i;
	}
	if ((d = find_dup(f->kv_by_name, f->n_kv, cmp_kv_idx, f->kv)) >= 0)
		return pcg_fail(err, "key '%s' appears twice", name_shown(b, f->kv[d].key));
	if (read_alignment(f, err) < 0)
		return -1;

	if (n_t > left(&c) / GGUF_MIN_TENSOR || n_t > INT_MAX)
		return pcg_fail(err, "%llu tensors cannot fit in the %zu bytes that remain",
				(unsigned long long)n_t, left(&c));
	f->t = calloc((size_t)n_t + 1, sizeof *f->t);
	f->t_by_name = calloc((size_t)n_t + 1, sizeof *f->t_by_name);
	off = calloc((size_t)n_t + 1, sizeof *off);
	if (f->t == NULL || f->t_by_name == NULL || off == NULL) {
		free(off);
		return pcg_fail(err, "out of memory");
	}
	for (i = 0; i < (int)n_t; i++) {
		f->n_t = i + 1;
		if (read_tensor_info(f, &c, i, &off[i]) < 0)
			goto fail;
		f->t_by_name[i] = i;
	}
	if ((d = find_dup(f->t_by_name, f->n_t, cmp_t_idx, f->t)) >= 0) {
		pcg_fail(err, "tensor '%s' appears twice", name_shown(b, f->t[d].name));
		goto fail;
	}
	{
		/* the data section starts at the next multiple of the alignment */
		uint64_t pos = at(&c), start = (pos + f->alignment - 1) / f->alignment * f->alignment;
		if (start < pos)
			start = UINT64_MAX;
		if (place_tensors(f, off, start < f->size ? (size_t)start : f->size, err) < 0)
			goto fail;
	}
	free(off);
	return 0;
fail:
	free(off);
	return -1;
}

static gguf_file *open_image(pcg_bytes *im, pcg_err *err)
{
	gguf_file *f = calloc(1, sizeof *f);

	if (f == NULL) {
		pcg_bytes_close(im);
		pcg_fail(err, "out of memory");
		return NULL;
	}
	f->im = *im;
	f->data = im->data;
	f->size = (size_t)im->size;
	if (parse(f, err) < 0)
		gguf_close(&f);
	return f;
}

gguf_file *gguf_from_memory(const void *data, size_t size, pcg_err *err)
{
	pcg_bytes im;

	memset(&im, 0, sizeof im);
	im.data = data;
	im.size = size;
	return open_image(&im, err);
}

gguf_file *gguf_open(const char *path, pcg_err *err)
{
	pcg_bytes im;
	gguf_file *f;

	if (pcg_bytes_open(path, 1, &im, err) < 0)
		return NULL;
	if (im.size > SIZE_MAX) {
		pcg_bytes_close(&im);
		pcg_fail(err, "%s: too large", path);
		return NULL;
	}
	f = open_image(&im, err);
	if (f == NULL)
		pcg_err_prefix(err, path);
	return f;
}

void gguf_close(gguf_file **fp)
{
	gguf_file *f;

	if (fp == NULL || *fp == NULL)
		return;
	f = *fp;
	for (int i = 0; i < f->n_kv; i++) {
		free(f->kv[i].key);
		free(f->kv[i].elem);
	}
	for (int i = 0; i < f->n_t; i++)
		free((char *)f->t[i].name);
	free(f->kv);
	free(f->kv_by_name);
	free(f->t);
	free(f->t_by_name);
	pcg_bytes_close(&f->im);
	free(f);
	*fp = NULL;
}

int gguf_is_gguf(const char *path)
{
	char magic[4];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return 0;
	n = read(fd, magic, 4);
	close(fd);
	return n == 4 && memcmp(magic, GGUF_MAGIC, 4) == 0;
}

uint32_t gguf_version(const gguf_file *f)
{
	return f->version;
}

size_t gguf_mapped_bytes(const gguf_file *f)
{
	return f->im.map_len;
}

size_t gguf_alignment(const gguf_file *f)
{
	return (size_t)f->alignment;
}

/* ----------------------------------------------------------------- metadata */

int gguf_n_kv(const gguf_file *f)
{
	return f->n_kv;
}

int gguf_find_key(const gguf_file *f, const char *key)
{
	int lo = 0, hi = f->n_kv;

	while (lo < hi) {
		int mid = lo + (hi - lo) / 2, r = strcmp(key, f->kv[f->kv_by_name[mid]].key);
		if (r == 0)
			return f->kv_by_name[mid];
		if (r < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return -1;
}

const char *gguf_key(const gguf_file *f, int i)
{
	return i >= 0 && i < f->n_kv ? f->kv[i].key : NULL;
}

gguf_type gguf_kv_type(const gguf_file *f, int i)
{
	return f->kv[i].type;
}

static const gguf_kv *get(const gguf_file *f, const char *key, pcg_err *err)
{
	int i = gguf_find_key(f, key);

	if (i < 0) {
		pcg_fail(err, "%s: missing", key);
		return NULL;
	}
	return &f->kv[i];
}

/* A number of type t at p: integers exactly (in *iv, *is_int = 1 when it
 * fits an int64), floats as double. */
static double number_at(const unsigned char *p, gguf_type t, int64_t *iv, int *fits)
{
	union {
		uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32;
		uint64_t u64; int64_t i64; float f32; double f64;
	} v;

	memcpy(&v, p, (size_t)scalar_size(t));
	*fits = 1;
	switch (t) {
	case GGUF_UINT8: case GGUF_BOOL: *iv = v.u8; break;
	case GGUF_INT8: *iv = v.i8; break;
	case GGUF_UINT16: *iv = v.u16; break;
	case GGUF_INT16: *iv = v.i16; break;
	case GGUF_UINT32: *iv = v.u32; break;
	case GGUF_INT32: *iv = v.i32; break;
	case GGUF_INT64: *iv = v.i64; break;
	case GGUF_UINT64:
		*fits = v.u64 <= INT64_MAX;
		*iv = (int64_t)(v.u64 & INT64_MAX);
		return (double)v.u64;
	case GGUF_FLOAT32: *fits = 0; *iv = 0; return v.f32;
	case GGUF_FLOAT64: *fits = 0; *iv = 0; return v.f64;
	default: *fits = 0; *iv = 0; return 0;
	}
	return (double)*iv;
}

int gguf_get_int(const gguf_file *f, const char *key, int64_t *v, pcg_err *err)
{
	const gguf_kv *kv = get(f, key, err);
	int fits;

	if (kv == NULL)
		return -1;
	if (!is_integer(kv->type))
		return pcg_fail(err, "%s: a %s, not an integer", key, type_name(kv->type));
	number_at(kv->val, kv->type, v, &fits);
	if (!fits)
		return pcg_fail(err, "%s: beyond the range of int64", key);
	return 0;
}

int gguf_get_float(const gguf_file *f, const char *key, double *v, pcg_err *err)
{
	const gguf_kv *kv = get(f, key, err);
	int64_t iv;
	int fits;

	if (kv == NULL)
		return -1;
	if (!is_integer(kv->type) && kv->type != GGUF_FLOAT32 && kv->type != GGUF_FLOAT64)
		return pcg_fail(err, "%s: a %s, not a number", key, type_name(kv->type));
	*v = number_at(kv->val, kv->type, &iv, &fits);
	return 0;
}

int gguf_get_bool(const gguf_file *f, const char *key, int *v, pcg_err *err)
{
	const gguf_kv *kv = get(f, key, err);

	if (kv == NULL)
		return -1;
	if (kv->type != GGUF_BOOL)
		return pcg_fail(err, "%s: a %s, not a bool", key, type_name(kv->type));
	*v = kv->val[0];
	return 0;
}

int gguf_get_str(const gguf_file *f, const char *key, const char **s, size_t *len, pcg_err *err)
{
	const gguf_kv *kv = get(f, key, err);

	if (kv == NULL)
		return -1;
	if (kv->type != GGUF_STRING)
		return pcg_fail(err, "%s: a %s, not a string", key, type_name(kv->type));
	*s = (const char *)kv->val;
	*len = (size_t)kv->n;
	return 0;
}

int gguf_get_arr(const gguf_file *f, const char *key, gguf_type *type, size_t *n, pcg_err *err)
{
	const gguf_kv *kv = get(f, key, err);

	if (kv == NULL)
		return -1;
	if (kv->type != GGUF_ARRAY)
		return pcg_fail(err, "%s: a %s, not an array", key, type_name(kv->type));
	*type = kv->arr_type;
	*n = (size_t)kv->n;
	return 0;
}

static const gguf_kv *get_elem(const gguf_file *f, const char *key, size_t i, pcg_err *err)
{
	const gguf_kv *kv = get(f, key, err);

	if (kv == NULL)
		return NULL;
	if (kv->type != GGUF_ARRAY) {
		pcg_fail(err, "%s: a %s, not an array", key, type_name(kv->type));
		return NULL;
	}
	if (i >= kv->n) {
		pcg_fail(err, "%s: element %zu of %llu", key, i, (unsigned long long)kv->n);
		return NULL;
	}
	return kv;
}

int gguf_arr_str(const gguf_file *f, const char *key, size_t i, const char **s, size_t *len,
		 pcg_err *err)
{
	const gguf_kv *kv = get_elem(f, key, i, err);
	uint64_t n;

	if (kv == NULL)
		return -1;
	if (kv->arr_type != GGUF_STRING)
		return pcg_fail(err, "%s: an array of %s, not of strings", key,
				type_name(kv->arr_type));
	memcpy(&n, kv->elem[i], 8);
	*s = (const char *)kv->elem[i] + 8;
	*len = (size_t)n;
	return 0;
}

int gguf_arr_num(const gguf_file *f, const char *key, size_t i, double *v, pcg_err *err)
{
	const gguf_kv *kv = get_elem(f, key, i, err);
	int64_t iv;
	int fits;

	if (kv == NULL)
		return -1;
	if (scalar_size(kv->arr_type) <= 0)
		return pcg_fail(err, "%s: an array of %s, not of numbers", key,
				type_name(kv->arr_type));
	*v = number_at(kv->val + i * (size_t)scalar_size(kv->arr_type), kv->arr_type, &iv, &fits);
	return 0;
}

/* ------------------------------------------------------------------ tensors */

int gguf_n_tensors(const gguf_file *f)
{
	return f->n_t;
}

const gguf_tensor *gguf_tensor_at(const gguf_file *f, int i)
{
	return i >= 0 && i < f->n_t ? &f->t[i] : NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name)
{
	int lo = 0, hi = f->n_t;

	while (lo < hi) {
		int mid = lo + (hi - lo) / 2, r = strcmp(name, f->t[f->t_by_name[mid]].name);
		if (r == 0)
			return &f->t[f->t_by_name[mid]];
		if (r < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}

const char *gguf_ggml_type_name(int ggml_type)
{
	const struct ggml_type_info *ti = ggml_type_by_id((uint32_t)ggml_type);

	return ti ? ti->name : NULL;
}

/* ------------------------------------------------------------------ writing */

typedef struct wbuf {
	unsigned char *p;
	size_t n, cap;
	int oom;
} wbuf;

static void put(wbuf *b, const void *s, size_t n)
{
	if (b->oom)
		return;
	if (n > b->cap - b->n) {
		size_t cap = b->cap ? b->cap : 4096;
		unsigned char *p;
		while (cap - b->n < n) {
			if (cap > SIZE_MAX / 2) {
				b->oom = 1;
				return;
			}
			cap *= 2;
		}
		p = realloc(b->p, cap);
		if (p == NULL) {
			b->oom = 1;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	if (n > 0)
		memcpy(b->p + b->n, s, n);
	b->n += n;
}

static void put_u32(wbuf *b, uint32_t v)
{
	put(b, &v, 4);
}

static void put_u64(wbuf *b, uint64_t v)
{
	put(b, &v, 8);
}

static void put_str(wbuf *b, const char *s, size_t n)
{
	put_u64(b, n);
	put(b, s, n);
}

typedef struct wtensor {
	char *name;
	const struct ggml_type_info *type;
	int ndim;
	int64_t ne[GGUF_MAX_DIMS];
	size_t nbytes;
	uint64_t offset;
	gguf_fill_fn fill;
	void *ctx;
	int index;
} wtensor;

struct gguf_writer {
	wbuf kv;          /* the encoded key-value pairs */
	char **keys;
	size_t n_kv, cap_kv;
	wtensor *t;
	size_t n_t, cap_t;
	uint64_t alignment;
};

gguf_writer *gguf_writer_new(pcg_err *err)
{
	gguf_writer *w = calloc(1, sizeof *w);

	if (w == NULL) {
		pcg_fail(err, "out of memory");
		return NULL;
	}
	w->alignment = GGUF_DEFAULT_ALIGNMENT;
	return w;
}

void gguf_writer_free(gguf_writer **wp)
{
	gguf_writer *w;

	if (wp == NULL || *wp == NULL)
		return;
	w = *wp;
	for (size_t i = 0; i < w->n_kv; i++)
		free(w->keys[i]);
	for (size_t i = 0; i < w->n_t; i++)
		free(w->t[i].name);
	free(w->keys);
	free(w->t);
	free(w->kv.p);
	free(w);
	*wp = NULL;
}

/* Starts a pair: checks and records the key, writes it and the type. */
static int begin_kv(gguf_writer *w, const char *key, gguf_type type, pcg_err *err)
{
	char *k;

	if (key == NULL || key[0] == '\0')
		return pcg_fail(err, "gguf writer: empty key");
	for (size_t i = 0; i < w->n_kv; i++)
		if (strcmp(w->keys[i], key) == 0)
			return pcg_fail(err, "gguf writer: key '%.64s' set twice", key);
	if (w->n_kv == w->cap_kv) {
		size_t cap = w->cap_kv ? 2 * w->cap_kv : 16;
		char **p = realloc(w->keys, cap * sizeof *p);
		if (p == NULL)
			return pcg_fail(err, "out of memory");
		w->keys = p;
		w->cap_kv = cap;
	}
	if ((k = strdup(key)) == NULL)
		return pcg_fail(err, "out of memory");
	w->keys[w->n_kv++] = k;
	put_str(&w->kv, key, strlen(key));
	put_u32(&w->kv, (uint32_t)type);
	return 0;
}

static int end_kv(gguf_writer *w, pcg_err *err)
{
	return w->kv.oom ? pcg_fail(err, "out of memory") : 0;
}

int gguf_set_u32(gguf_writer *w, const char *key, uint32_t v, pcg_err *err)
{
	if (strcmp(key, "general.alignment") == 0) {
		if (v == 0 || (v & (v - 1)) != 0)
			return pcg_fail(err, "general.alignment: %u is not a power of two", v);
	}
	if (begin_kv(w, key, GGUF_UINT32, err) < 0)
		return -1;
	if (strcmp(key, "general.alignment") == 0)
		w->alignment = v;
	put_u32(&w->kv, v);
	return end_kv(w, err);
}

int gguf_set_i32(gguf_writer *w, const char *key, int32_t v, pcg_err *err)
{
	if (begin_kv(w, key, GGUF_INT32, err) < 0)
		return -1;
	put(&w->kv, &v, 4);
	return end_kv(w, err);
}

int gguf_set_f32(gguf_writer *w, const char *key, float v, pcg_err *err)
{
	if (begin_kv(w, key, GGUF_FLOAT32, err) < 0)
		return -1;
	put(&w->kv, &v, 4);
	return end_kv(w, err);
}

int gguf_set_bool(gguf_writer *w, const char *key, int v, pcg_err *err)
{
	unsigned char b = v != 0;

	if (begin_kv(w, key, GGUF_BOOL, err) < 0)
		return -1;
	put(&w->kv, &b, 1);
	return end_kv(w, err);
}

int gguf_set_str(gguf_writer *w, const char *key, const char *v, pcg_err *err)
{
	if (begin_kv(w, key, GGUF_STRING, err) < 0)
		return -1;
	put_str(&w->kv, v, strlen(v));
	return end_kv(w, err);
}

static int set_arr(gguf_writer *w, const char *key, gguf_type t, const void *v, size_t n,
		   pcg_err *err)
{
	if (begin_kv(w, key, GGUF_ARRAY, err) < 0)
		return -1;
	put_u32(&w->kv, (uint32_t)t);
	put_u64(&w->kv, n);
	if (t == GGUF_STRING) {
		const char *const *s = v;
		for (size_t i = 0; i < n; i++)
			put_str(&w->kv, s[i], strlen(s[i]));
	} else if (n > SIZE_MAX / 4) {
		w->kv.oom = 1;
	} else {
		put(&w->kv, v, 4 * n);
	}
	return end_kv(w, err);
}

int gguf_set_arr_str(gguf_writer *w, const char *key, const char *const *v, size_t n,
		     pcg_err *err)
{
	return set_arr(w, key, GGUF_STRING, v, n, err);
}

int gguf_set_arr_i32(gguf_writer *w, const char *key, const int32_t *v, size_t n, pcg_err *err)
{
	return set_arr(w, key, GGUF_INT32, v, n, err);
}

int gguf_set_arr_f32(gguf_writer *w, const char *key, const float *v, size_t n, pcg_err *err)
{
	return set_arr(w, key, GGUF_FLOAT32, v, n, err);
}

int gguf_add_tensor(gguf_writer *w, const char *name, pcg_dtype dtype, int ndim,
		    const int64_t *ne, gguf_fill_fn fill, void *ctx, int index, pcg_err *err)
{
	const struct ggml_type_info *ti = ggml_type_by_dtype(dtype);
	uint64_t nbytes;
	wtensor *t;

	if (name == NULL || name[0] == '\0')
		return pcg_fail(err, "gguf writer: a tensor without a name");
	if (ti == NULL)
		return pcg_fail(err, "tensor '%.64s': dtype %s cannot be written", name,
				pcg_dtype_name(dtype));
	if (ndim < 1 || ndim > GGUF_MAX_DIMS)
		return pcg_fail(err, "tensor '%.64s': %d dimensions, not 1 to %d", name, ndim,
				GGUF_MAX_DIMS);
	if (fill == NULL)
		return pcg_fail(err, "tensor '%.64s': no fill function", name);
	for (size_t i = 0; i < w->n_t; i++)
		if (strcmp(w->t[i].name, name) == 0)
			return pcg_fail(err, "tensor '%.64s' added twice", name);
	if (w->n_t == w->cap_t) {
		size_t cap = w->cap_t ? 2 * w->cap_t : 64;
		wtensor *p = realloc(w->t, cap * sizeof *p);
		if (p == NULL)
			return pcg_fail(err, "out of memory");
		w->t = p;
		w->cap_t = cap;
	}
	t = &w->t[w->n_t];
	memset(t, 0, sizeof *t);
	nbytes = (uint64_t)ti->bytes;
	for (int d = 0; d < GGUF_MAX_DIMS; d++) {
		t->ne[d] = d < ndim ? ne[d] : 1;
		if (t->ne[d] <= 0)
			return pcg_fail(err, "tensor '%.64s': ne[%d] = %lld is not positive", name, d,
					(long long)t->ne[d]);
		if (__builtin_mul_overflow(nbytes, (uint64_t)(d == 0 ? t->ne[0] / ti->block : t->ne[d]),
					   &nbytes) || nbytes > SIZE_MAX / 2)
			return pcg_fail(err, "tensor '%.64s': too large", name);
	}
	if (t->ne[0] % ti->block != 0)
		return pcg_fail(err, "tensor '%.64s': ne[0] = %lld is not a multiple of %s's block"
				" of %d", name, (long long)t->ne[0], ti->name, ti->block);
	if ((t->name = strdup(name)) == NULL)
		return pcg_fail(err, "out of memory");
	t->type = ti;
	t->ndim = ndim;
	t->nbytes = (size_t)nbytes;
	t->fill = fill;
	t->ctx = ctx;
	t->index = index;
	w->n_t++;
	return 0;
}

static uint64_t pad_to(uint64_t n, uint64_t a)
{
	return (a - n % a) % a;
}

/* The header: magic, version, counts, the pairs, the tensor infos (with
 * their offsets, each tensor padded to the alignment), padding. */
static int build_header(gguf_writer *w, wbuf *h, pcg_err *err)
{
	static const unsigned char zeros[64];
	uint64_t off = 0, pad;

	put(h, GGUF_MAGIC, 4);
	put_u32(h, 3);
	put_u64(h, w->n_t);
	put_u64(h, w->n_kv);
	put(h, w->kv.p, w->kv.n);
	for (size_t i = 0; i < w->n_t; i++) {
		wtensor *t = &w->t[i];
		put_str(h, t->name, strlen(t->name));
		put_u32(h, (uint32_t)t->ndim);
		for (int d = 0; d < t->ndim; d++)
			put_u64(h, (uint64_t)t->ne[d]);
		put_u32(h, (uint32_t)t->type->id);
		put_u64(h, off);
		t->offset = off;
		if (__builtin_add_overflow(off, (uint64_t)t->nbytes + pad_to(t->nbytes, w->alignment),
					   &off))
			return pcg_fail(err, "gguf writer: tensors too large");
	}
	for (pad = pad_to(h->n, w->alignment); pad > 0;) {
		size_t k = pad < sizeof zeros ? (size_t)pad : sizeof zeros;
		put(h, zeros, k);
		pad -= k;
	}
	return h->oom ? pcg_fail(err, "out of memory") : 0;
}

int gguf_writer_finish(gguf_writer *w, const char *path, pcg_err *err)
{
	static const unsigned char zeros[64];
	wbuf h = { 0 };
	unsigned char *buf = NULL;
	size_t cap = 0;
	pcg_out o;
	int rc = -1;

	if (build_header(w, &h, err) < 0)
		goto out;
	if (pcg_out_open(&o, path, 0644, err) < 0)
		goto out;
	pcg_out_write(&o, h.p, h.n);
	/* One buffer, as large as the largest tensor, filled and written in turn. */
	for (size_t i = 0; i < w->n_t; i++) {
		wtensor *t = &w->t[i];
		uint64_t pad = pad_to(t->nbytes, w->alignment);
		if (t->nbytes > cap) {
			free(buf);
			if ((buf = malloc(t->nbytes)) == NULL) {
				cap = 0;
				pcg_fail(err, "%s: tensor '%.64s': out of memory for %zu bytes", path,
					 t->name, t->nbytes);
				pcg_out_abort(&o);
				goto out;
			}
			cap = t->nbytes;
		}
		memset(buf, 0, t->nbytes);
		if (t->fill(t->ctx, t->index, buf, t->nbytes, err) < 0) {
			char what[96];
			snprintf(what, sizeof what, "%s: tensor '%.64s'", path, t->name);
			pcg_err_prefix(err, what);
			pcg_out_abort(&o);
			goto out;
		}
		pcg_out_write(&o, buf, t->nbytes);
		while (pad > 0) {
			size_t k = pad < sizeof zeros ? (size_t)pad : sizeof zeros;
			pcg_out_write(&o, zeros, k);
			pad -= k;
		}
	}
	rc = pcg_out_commit(&o, err);
out:
	free(buf);
	free(h.p);
	return rc;
}
