/* safetensors.c: opens safetensors checkpoints (one file or index + shards)
 * by mmap, validating every header field before a tensor is handed out, and
 * writes single-file checkpoints atomically (see safetensors.h). Its prefix
 * st_ is short for the file's name, as safetensors' own readers spell it.
 */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileio.h"

/* The reference implementation refuses headers over 100 MB; so do we, so
 * that a hostile length cannot make jansson parse gigabytes. */
#define ST_MAX_HEADER 100000000ull

#define ST_INDEX_NAME "model.safetensors.index.json"
#define ST_SINGLE_NAME "model.safetensors"

/* Every dtype string of the format; only the first three can be computed
 * with, the others are still size-checked so that a file is valid or not
 * independently of what the engine supports. */
static const struct {
	const char *name;
	pcg_dtype dtype;
	size_t size;
} st_dtypes[] = {
	{ "F32", PCG_F32, 4 },
	{ "F16", PCG_F16, 2 },
	{ "BF16", PCG_BF16, 2 },
	{ "BOOL", PCG_DTYPE_OTHER, 1 },
	{ "U8", PCG_DTYPE_OTHER, 1 },
	{ "I8", PCG_DTYPE_OTHER, 1 },
	{ "I16", PCG_DTYPE_OTHER, 2 },
	{ "U16", PCG_DTYPE_OTHER, 2 },
	{ "I32", PCG_DTYPE_OTHER, 4 },
	{ "U32", PCG_DTYPE_OTHER, 4 },
	{ "I64", PCG_DTYPE_OTHER, 8 },
	{ "U64", PCG_DTYPE_OTHER, 8 },
	{ "F64", PCG_DTYPE_OTHER, 8 },
	{ "F8_E4M3", PCG_DTYPE_OTHER, 1 },
	{ "F8_E5M2", PCG_DTYPE_OTHER, 1 },
};
#define ST_NDTYPES (int)(sizeof st_dtypes / sizeof st_dtypes[0])

/* One mapped .safetensors file and its tensors, sorted by name. */
typedef struct st_file {
	void *map;
	size_t size;
	int copied;   /* map is a malloc'd copy (st_from_memory), not a mapping */
	st_tensor *t;
	int n;
	json_t *meta; /* "__metadata__" (string values), or NULL */
} st_file;

struct st_ckpt {
	st_file *files;
	int nfiles;
	st_tensor *t; /* copies of the files' tensors, sorted by name */
	int n;
	size_t mapped;
};

/* "file: tensor 'name': message". Names come from the file, so anything
 * that is not printable ASCII is shown as '?' to keep the message one line. */
static int tensor_fail(pcg_err *err, const char *file, const char *name,
		       const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int tensor_fail(pcg_err *err, const char *file, const char *name,
		       const char *fmt, ...)
{
	char shown[128], what[384];
	va_list ap;
	size_t i;

	for (i = 0; name[i] && i < sizeof shown - 1; i++)
		shown[i] = name[i] >= 0x20 && name[i] < 0x7f ? name[i] : '?';
	shown[i] = '\0';
	va_start(ap, fmt);
	vsnprintf(what, sizeof what, fmt, ap);
	va_end(ap);
	return pcg_fail(err, "%s: tensor '%s': %s", file, shown, what);
}

static int cmp_tensor_name(const void *a, const void *b)
{
	return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

static int cmp_key_tensor(const void *key, const void *t)
{
	return strcmp(key, ((const st_tensor *)t)->name);
}

static const st_tensor *find_sorted(const st_tensor *t, int n, const char *name)
{
	if (n == 0)
		return NULL;
	return bsearch(name, t, (size_t)n, sizeof *t, cmp_key_tensor);
}

/* A JSON integer in [0, INT64_MAX]; jansson already refuses larger ones. */
static int get_nonneg(const json_t *v, uint64_t *out)
{
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return -1;
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

/* Fills t from one header entry; data points into the data section. */
static int parse_entry(const char *file, const char *name, const json_t *v,
		       const unsigned char *data, uint64_t data_size,
		       st_tensor *t, uint64_t off[2], pcg_err *err)
{
	const json_t *dt, *shape, *offs;
	const char *s;
	uint64_t nbytes;
	int64_t numel = 1;
	size_t i, ndim;
	int k;

	if (!json_is_object(v))
		return tensor_fail(err, file, name, "entry is not an object");

	dt = json_object_get(v, "dtype");
	if (!json_is_string(dt))
		return tensor_fail(err, file, name, "dtype missing or not a string");
	s = json_string_value(dt);
	for (k = 0; k < ST_NDTYPES; k++)
		if (strcmp(s, st_dtypes[k].name) == 0)
			break;
	if (k == ST_NDTYPES)
		return tensor_fail(err, file, name, "unknown dtype '%.32s'", s);

	shape = json_object_get(v, "shape");
	if (!json_is_array(shape))
		return tensor_fail(err, file, name, "shape missing or not an array");
	ndim = json_array_size(shape);
	if (ndim > ST_MAX_DIMS)
		return tensor_fail(err, file, name, "shape has %zu dims, more than %d",
				   ndim, ST_MAX_DIMS);
	for (i = 0; i < ndim; i++) {
		const json_t *d = json_array_get(shape, i);
		if (!json_is_integer(d))
			return tensor_fail(err, file, name, "shape[%zu] is not an integer", i);
		if (json_integer_value(d) < 0)
			return tensor_fail(err, file, name, "shape[%zu] is negative (%lld)",
					   i, (long long)json_integer_value(d));
		t->shape[i] = json_integer_value(d);
		if (__builtin_mul_overflow(numel, t->shape[i], &numel))
			return tensor_fail(err, file, name, "shape overflows 64 bits");
	}
	if (__builtin_mul_overflow((uint64_t)numel, (uint64_t)st_dtypes[k].size, &nbytes))
		return tensor_fail(err, file, name, "shape overflows 64 bits in bytes");

	offs = json_object_get(v, "data_offsets");
	if (!json_is_array(offs) || json_array_size(offs) != 2 ||
	    get_nonneg(json_array_get(offs, 0), &off[0]) < 0 ||
	    get_nonneg(json_array_get(offs, 1), &off[1]) < 0)
		return tensor_fail(err, file, name,
				   "data_offsets missing or not [begin, end] of non-negative integers");
	if (off[0] > off[1])
		return tensor_fail(err, file, name, "data_offsets begin %llu > end %llu",
				   (unsigned long long)off[0], (unsigned long long)off[1]);
	if (off[1] > data_size)
		return tensor_fail(err, file, name, "data_offsets end %llu beyond data size %llu",
				   (unsigned long long)off[1], (unsigned long long)data_size);
	if (off[1] - off[0] != nbytes)
		return tensor_fail(err, file, name,
				   "shape and dtype %s need %llu bytes, data_offsets span %llu",
				   st_dtypes[k].name, (unsigned long long)nbytes,
				   (unsigned long long)(off[1] - off[0]));

	t->dtype = st_dtypes[k].dtype;
	t->dtype_name = st_dtypes[k].name;
	t->ndim = (int)ndim;
	t->numel = numel;
	t->data = data + off[0];
	t->nbytes = (size_t)nbytes;
	t->name = strdup(name);
	if (t->name == NULL)
		return pcg_fail(err, "%s: out of memory", file);
	return 0;
}

/* "__metadata__" (in a file) and the metadata given to st_write: a JSON
 * object whose values are all strings. */
static int check_metadata(const char *file, const json_t *m, pcg_err *err)
{
	const char *key;
	json_t *v;

	if (!json_is_object(m))
		return pcg_fail(err, "%s: __metadata__ is not an object", file);
	json_object_foreach((json_t *)m, key, v) {
		if (!json_is_string(v))
			return pcg_fail(err, "%s: __metadata__ '%.64s' is not a string", file, key);
	}
	return 0;
}

/* Tensors must not share bytes; gaps between them are allowed, and a
 * zero-size tensor may sit at a boundary. */
static int check_overlap(const char *file, const st_tensor *t, pcg_span *sp, int n,
			 pcg_err *err)
{
	const int i = pcg_spans_overlap(sp, n);

	if (i >= 0)
		return tensor_fail(err, file, t[sp[i].i].name,
				   "data_offsets [%llu, %llu] overlap another tensor",
				   (unsigned long long)sp[i].begin, (unsigned long long)sp[i].end);
	return 0;
}

static void file_close(st_file *f)
{
	int i;

	for (i = 0; i < f->n; i++)
		free((char *)f->t[i].name);
	free(f->t);
	json_decref(f->meta);
	if (f->map != NULL && f->copied)
		free(f->map);
	else if (f->map != NULL)
		munmap(f->map, f->size);
	memset(f, 0, sizeof *f);
}

/* Parses the header of a mapped file into f->t. */
static int parse_header(st_file *f, const char *path, pcg_err *err)
{
	const unsigned char *p = f->map;
	uint64_t hlen = 0, data_size;
	json_error_t je;
	json_t *root, *v;
	const char *key;
	uint64_t off[2];
	pcg_span *sp = NULL;
	int i, rc = -1;

	if (f->size < 8)
		return pcg_fail(err, "%s: file is %zu bytes, shorter than the 8-byte header length",
				path, f->size);
	for (i = 7; i >= 0; i--)
		hlen = hlen << 8 | p[i];
	if (hlen > ST_MAX_HEADER)
		return pcg_fail(err, "%s: header length %llu exceeds the limit of %llu bytes",
				path, (unsigned long long)hlen, ST_MAX_HEADER);
	if (hlen > f->size - 8)
		return pcg_fail(err, "%s: header length %llu beyond file size %zu",
				path, (unsigned long long)hlen, f->size);
	data_size = f->size - 8 - hlen;

	root = json_loadb((const char *)p + 8, hlen, JSON_REJECT_DUPLICATES, &je);
	if (root == NULL)
		return pcg_fail(err, "%s: header is not valid JSON: %s (column %d)",
				path, je.text, je.column);
	if (!json_is_object(root)) {
		pcg_fail(err, "%s: header is not a JSON object", path);
		goto out;
	}

	f->t = calloc(json_object_size(root) + 1, sizeof *f->t);
	sp = calloc(json_object_size(root) + 1, sizeof *sp);
	if (f->t == NULL || sp == NULL) {
		pcg_fail(err, "%s: out of memory", path);
		goto out;
	}
	json_object_foreach(root, key, v) {
		if (strcmp(key, "__metadata__") == 0) {
			if (check_metadata(path, v, err) < 0)
				goto out;
			f->meta = json_incref(v);
			continue;
		}
		if (parse_entry(path, key, v, p + 8 + hlen, data_size, &f->t[f->n],
				off, err) < 0)
			goto out;
		sp[f->n] = (pcg_span){ off[0], off[1], f->n };
		f->n++;
	}
	if (check_overlap(path, f->t, sp, f->n, err) < 0)
		goto out;
	qsort(f->t, (size_t)f->n, sizeof *f->t, cmp_tensor_name);
	rc = 0;
out:
	free(sp);
	json_decref(root);
	return rc;
}

static int file_open(st_file *f, const char *path, pcg_err *err)
{
	struct stat sb;
	int fd;

	memset(f, 0, sizeof *f);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return pcg_fail(err, "%s: cannot open: %s", path, strerror(errno));
	if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
		close(fd);
		return pcg_fail(err, "%s: not a regular file", path);
	}
	f->size = (size_t)sb.st_size;
	if (f->size < 8) { /* mmap refuses length 0; the message is parse_header's */
		close(fd);
		return parse_header(f, path, err);
	}
	f->map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (f->map == MAP_FAILED) {
		f->map = NULL;
		return pcg_fail(err, "%s: mmap: %s", path, strerror(errno));
	}
	if (parse_header(f, path, err) < 0) {
		file_close(f);
		return -1;
	}
	return 0;
}

static st_ckpt *ckpt_new(int nfiles, int ntensors)
{
	st_ckpt *c = calloc(1, sizeof *c);

	if (c == NULL)
		return NULL;
	c->files = calloc((size_t)nfiles + 1, sizeof *c->files);
	c->t = calloc((size_t)ntensors + 1, sizeof *c->t);
	if (c->files == NULL || c->t == NULL) {
		free(c->files);
		free(c->t);
		free(c);
		return NULL;
	}
	return c;
}

/* A checkpoint of the one file f (taken over), named name in errors. */
static st_ckpt *single(st_file *f, const char *name, pcg_err *err)
{
	st_ckpt *c = ckpt_new(1, f->n);

	if (c == NULL) {
		file_close(f);
		pcg_fail(err, "%s: out of memory", name);
		return NULL;
	}
	c->files[0] = *f;
	c->nfiles = 1;
	c->n = f->n;
	c->mapped = f->size;
	if (f->n > 0)
		memcpy(c->t, f->t, (size_t)f->n * sizeof *f->t);
	return c;
}

st_ckpt *st_from_memory(const void *data, size_t size, const char *name, pcg_err *err)
{
	st_file f;

	memset(&f, 0, sizeof f);
	f.size = size;
	f.copied = 1;
	f.map = malloc(size ? size : 1);
	if (f.map == NULL) {
		pcg_fail(err, "%s: out of memory", name);
		return NULL;
	}
	memcpy(f.map, data, size);
	if (parse_header(&f, name, err) < 0) {
		file_close(&f);
		return NULL;
	}
	return single(&f, name, err);
}

static st_ckpt *open_single(const char *path, pcg_err *err)
{
	st_file f;

	if (file_open(&f, path, err) < 0)
		return NULL;
	return single(&f, path, err);
}

/* One weight_map entry: tensor name -> shard file name (both owned by the
 * index JSON). */
typedef struct wm_entry {
	const char *tensor;
	const char *shard;
} wm_entry;

static int cmp_wm(const void *a, const void *b)
{
	const wm_entry *x = a, *y = b;
	int r = strcmp(x->shard, y->shard);

	return r ? r : strcmp(x->tensor, y->tensor);
}

/* A shard must be a file in the index's directory, so that an index cannot
 * reach files elsewhere. */
static int plain_file_name(const char *s)
{
	return s[0] != '\0' && strchr(s, '/') == NULL &&
	       strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

/* Exposes exactly the tensors the index names; other tensors found in the
 * shards are validated with their file but not exposed, since the index is
 * what says which tensors make up the checkpoint. */
static st_ckpt *open_index(const char *dir, const char *index, pcg_err *err)
{
	json_error_t je;
	json_t *root, *wm, *v;
	wm_entry *e = NULL;
	st_ckpt *c = NULL;
	const char *key;
	char *path;
	size_t n = 0, i, j;
	int nshards = 0;

	root = json_load_file(index, JSON_REJECT_DUPLICATES, &je);
	if (root == NULL) {
		pcg_json_fail(err, index, &je);
		return NULL;
	}
	wm = json_object_get(root, "weight_map");
	if (!json_is_object(wm)) {
		pcg_fail(err, "%s: weight_map missing or not an object", index);
		goto fail;
	}
	if (json_object_size(wm) > INT32_MAX) {
		pcg_fail(err, "%s: weight_map too large", index);
		goto fail;
	}
	e = calloc(json_object_size(wm) + 1, sizeof *e);
	if (e == NULL) {
		pcg_fail(err, "%s: out of memory", index);
		goto fail;
	}
	json_object_foreach(wm, key, v) {
		if (!json_is_string(v)) {
			tensor_fail(err, index, key, "weight_map value is not a string");
			goto fail;
		}
		if (!plain_file_name(json_string_value(v))) {
			tensor_fail(err, index, key, "shard '%.64s' is not a plain file name",
				    json_string_value(v));
			goto fail;
		}
		e[n].tensor = key;
		e[n].shard = json_string_value(v);
		n++;
	}
	qsort(e, n, sizeof *e, cmp_wm);
	for (i = 0; i < n; i++)
		if (i == 0 || strcmp(e[i].shard, e[i - 1].shard) != 0)
			nshards++;

	c = ckpt_new(nshards, (int)n);
	if (c == NULL) {
		pcg_fail(err, "%s: out of memory", index);
		goto fail;
	}
	/* Entries are grouped by shard: open each shard once, take its tensors. */
	for (i = 0; i < n; i = j) {
		st_file *f = &c->files[c->nfiles];

		if (asprintf(&path, "%s/%s", dir, e[i].shard) < 0) {
			pcg_fail(err, "%s: out of memory", index);
			goto fail;
		}
		if (file_open(f, path, err) < 0) {
			free(path);
			goto fail;
		}
		free(path);
		c->nfiles++;
		c->mapped += f->size;
		for (j = i; j < n && strcmp(e[j].shard, e[i].shard) == 0; j++) {
			const st_tensor *t = find_sorted(f->t, f->n, e[j].tensor);
			if (t == NULL) {
				tensor_fail(err, index, e[j].tensor, "not found in shard '%s'",
					    e[j].shard);
				goto fail;
			}
			c->t[c->n++] = *t;
		}
	}
	qsort(c->t, (size_t)c->n, sizeof *c->t, cmp_tensor_name);
	free(e);
	json_decref(root);
	return c;
fail:
	st_close(&c);
	free(e);
	json_decref(root);
	return NULL;
}

static int exists(const char *path)
{
	struct stat sb;

	return stat(path, &sb) == 0;
}

st_ckpt *st_open(const char *path, pcg_err *err)
{
	struct stat sb;
	st_ckpt *c = NULL;
	char *p;

	if (stat(path, &sb) < 0) {
		pcg_fail(err, "%s: %s", path, strerror(errno));
		return NULL;
	}
	if (!S_ISDIR(sb.st_mode))
		return open_single(path, err);

	if (asprintf(&p, "%s/" ST_INDEX_NAME, path) < 0) {
		pcg_fail(err, "%s: out of memory", path);
		return NULL;
	}
	if (exists(p)) {
		c = open_index(path, p, err);
		free(p);
		return c;
	}
	free(p);
	if (asprintf(&p, "%s/" ST_SINGLE_NAME, path) < 0) {
		pcg_fail(err, "%s: out of memory", path);
		return NULL;
	}
	if (exists(p))
		c = open_single(p, err);
	else
		pcg_fail(err, "%s: neither " ST_INDEX_NAME " nor " ST_SINGLE_NAME " found", path);
	free(p);
	return c;
}

void st_close(st_ckpt **cp)
{
	st_ckpt *c;
	int i;

	if (cp == NULL || *cp == NULL)
		return;
	c = *cp;
	for (i = 0; i < c->nfiles; i++)
		file_close(&c->files[i]);
	free(c->files);
	free(c->t); /* its names belonged to the files */
	free(c);
	*cp = NULL;
}

int st_count(const st_ckpt *c)
{
	return c->n;
}

const st_tensor *st_get(const st_ckpt *c, int i)
{
	if (i < 0 || i >= c->n)
		return NULL;
	return &c->t[i];
}

const st_tensor *st_find(const st_ckpt *c, const char *name)
{
	return find_sorted(c->t, c->n, name);
}

size_t st_mapped_bytes(const st_ckpt *c)
{
	return c->mapped;
}

void st_drop(const st_ckpt *c, const st_tensor *t)
{
	const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), p = (uintptr_t)t->data;

	for (int i = 0; i < c->nfiles; i++) {
		const st_file *f = &c->files[i];
		const uintptr_t m = (uintptr_t)f->map;
		if (f->copied || p < m || p >= m + f->size)
			continue;
		/* the whole pages inside the tensor: a neighbour's partial page stays */
		const uintptr_t a = (p + pg - 1) / pg * pg, b = (p + t->nbytes) / pg * pg;
		if (b > a)
			(void)madvise((void *)a, b - a, MADV_DONTNEED);
	}
}

const char *st_metadata(const st_ckpt *c, const char *key)
{
	for (int i = 0; i < c->nfiles; i++) {
		const json_t *v = json_object_get(c->files[i].meta, key);
		if (v != NULL)
			return json_string_value(v);
	}
	return NULL;
}

/* Builds the header JSON for st_write; nbytes[i] gets each tensor's size. */
static char *build_header(const char *path, const st_out *t, int n, const char *meta,
			  size_t *nbytes, pcg_err *err)
{
	json_t *root = json_object(), *m = NULL;
	json_error_t je;
	uint64_t off = 0;
	char *s = NULL;
	int i, k;

	if (root == NULL) {
		pcg_fail(err, "%s: out of memory", path);
		return NULL;
	}
	if (meta != NULL) {
		m = json_loads(meta, JSON_REJECT_DUPLICATES, &je);
		if (m == NULL) {
			pcg_fail(err, "%s: metadata is not valid JSON: %s", path, je.text);
			goto out;
		}
		if (check_metadata(path, m, err) < 0)
			goto out;
		json_object_set(root, "__metadata__", m);
	}
	for (i = 0; i < n; i++) {
		const char *name = t[i].name;
		size_t size = pcg_dtype_size(t[i].dtype);
		uint64_t numel = 1, bytes;
		json_t *e, *shape;

		if (name == NULL || strcmp(name, "__metadata__") == 0) {
			pcg_fail(err, "%s: tensor %d has no name or a reserved one", path, i);
			goto out;
		}
		if (json_object_get(root, name) != NULL) {
			tensor_fail(err, path, name, "name used twice");
			goto out;
		}
		if (size == 0) {
			tensor_fail(err, path, name, "dtype cannot be written");
			goto out;
		}
		if (t[i].ndim < 0 || t[i].ndim > ST_MAX_DIMS) {
			tensor_fail(err, path, name, "ndim %d not in [0, %d]", t[i].ndim, ST_MAX_DIMS);
			goto out;
		}
		shape = json_array();
		for (k = 0; k < t[i].ndim; k++) {
			if (t[i].shape[k] < 0 ||
			    __builtin_mul_overflow(numel, (uint64_t)t[i].shape[k], &numel)) {
				json_decref(shape);
				tensor_fail(err, path, name, "shape[%d] negative or too large", k);
				goto out;
			}
			json_array_append_new(shape, json_integer(t[i].shape[k]));
		}
		if (__builtin_mul_overflow(numel, (uint64_t)size, &bytes) ||
		    bytes > INT64_MAX - off || (bytes > 0 && t[i].data == NULL)) {
			json_decref(shape);
			tensor_fail(err, path, name, "too large, or no data");
			goto out;
		}
		nbytes[i] = (size_t)bytes;
		e = json_pack("{s:s, s:o, s:[I, I]}", "dtype", pcg_dtype_name(t[i].dtype),
			      "shape", shape, "data_offsets", (json_int_t)off,
			      (json_int_t)(off + bytes));
		/* json_object_set_new refuses names that are not UTF-8. */
		if (e == NULL || json_object_set_new(root, name, e) < 0) {
			pcg_fail(err, "%s: tensor %d: name is not valid UTF-8, or out of memory",
				 path, i);
			goto out;
		}
		off += bytes;
	}
	s = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
	if (s == NULL)
		pcg_fail(err, "%s: cannot format the header", path);
out:
	json_decref(m);
	json_decref(root);
	return s;
}

int st_write(const char *path, const st_out *t, int n, const char *metadata_json,
	     pcg_err *err)
{
	static const char spaces[8] = "        ";
	size_t *nbytes, hlen, pad;
	unsigned char len8[8];
	char *hdr = NULL;
	pcg_out o;
	int i, rc = -1;

	if (n < 0)
		return pcg_fail(err, "%s: negative tensor count", path);
	nbytes = calloc((size_t)n + 1, sizeof *nbytes);
	if (nbytes == NULL)
		return pcg_fail(err, "%s: out of memory", path);
	hdr = build_header(path, t, n, metadata_json, nbytes, err);
	if (hdr == NULL)
		goto out;
	/* Spaces after the JSON are allowed by the format and put the data
	 * section, and with it every tensor whose offset is a multiple of 8,
	 * on an 8-byte boundary of the file. */
	hlen = strlen(hdr);
	pad = (8 - hlen % 8) % 8;
	for (i = 0; i < 8; i++)
		len8[i] = (unsigned char)((uint64_t)(hlen + pad) >> (8 * i));

	if (pcg_out_open(&o, path, 0644, err) < 0)
		goto out;
	pcg_out_write(&o, len8, 8);
	pcg_out_write(&o, hdr, hlen);
	pcg_out_write(&o, spaces, pad);
	for (i = 0; i < n; i++)
		pcg_out_write(&o, t[i].data, nbytes[i]);
	rc = pcg_out_commit(&o, err);
out:
	free(hdr);
	free(nbytes);
	return rc;
}
