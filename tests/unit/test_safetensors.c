/* test_safetensors.c: round trips through st_write/st_open, sharded
 * checkpoints, a table of malformed files that must be refused with a
 * message naming the fault, and a seeded mutation fuzz that must not crash.
 */
#include "check.h"
#include "fixture.h"
#include "safetensors.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[4096];

/* tmpdir/name, in one of 8 rotating buffers so that a call can use several. */
static const char *tpath(const char *name)
{
	static char buf[8][4200];
	static int k;

	k = (k + 1) % 8;
	snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
	return buf[k];
}

static void write_file(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");

	if (f == NULL || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
		fprintf(stderr, "cannot write %s\n", path);
		exit(1);
	}
}

/* A safetensors file by hand: length field hlen (the real length when
 * UINT64_MAX), the header text, then data_len bytes 0, 1, 2, ... */
static size_t make_raw(unsigned char *buf, uint64_t hlen, const char *hdr, size_t data_len)
{
	size_t n = strlen(hdr), i;

	if (hlen == UINT64_MAX)
		hlen = n;
	for (i = 0; i < 8; i++)
		buf[i] = (unsigned char)(hlen >> (8 * i));
	memcpy(buf + 8, hdr, n);
	for (i = 0; i < data_len; i++)
		buf[8 + n + i] = (unsigned char)i;
	return 8 + n + data_len;
}

static void write_raw(const char *path, uint64_t hlen, const char *hdr, size_t data_len)
{
	unsigned char *buf = malloc(8 + strlen(hdr) + data_len);

	write_file(path, buf, make_raw(buf, hlen, hdr, data_len));
	free(buf);
}

static int same_shape(const st_tensor *t, int ndim, const int64_t *shape)
{
	int i;

	if (t->ndim != ndim)
		return 0;
	for (i = 0; i < ndim; i++)
		if (t->shape[i] != shape[i])
			return 0;
	return 1;
}

static void test_round_trip(void)
{
	float a[6] = { 1, -2, 3.5f, 0, 1e-3f, 65504 };
	uint16_t h[5], b[4];
	float scalar = 42;
	st_out out[5] = {
		{ "a.f32", PCG_F32, 2, { 2, 3 }, a },
		{ "b.f16", PCG_F16, 1, { 5 }, h },
		{ "c.bf16", PCG_BF16, 2, { 4, 1 }, b },
		{ "d.scalar", PCG_F32, 0, { 0 }, &scalar },
		{ "e.empty", PCG_F32, 2, { 0, 4 }, NULL },
	};
	const char *path = tpath("rt.safetensors");
	pcg_err err = { "" };
	unsigned char len8[8];
	uint64_t hlen = 0;
	st_ckpt *c;
	struct stat sb;
	FILE *f;
	int i, k;

	for (i = 0; i < 5; i++)
		h[i] = pcg_f32_to_f16((float)i - 1.5f);
	for (i = 0; i < 4; i++)
		b[i] = pcg_f32_to_bf16((float)i * 0.25f);

	CHECKF(st_write(path, out, 5, "{\"format\": \"pt\"}", &err) == 0, "%s", err.msg);
	CHECK(check_partials(check_tmpdir()) == 0);

	/* The data section starts 8-byte aligned. */
	f = fopen(path, "rb");
	CHECK(f != NULL && fread(len8, 1, 8, f) == 8);
	if (f)
		fclose(f);
	for (i = 7; i >= 0; i--)
		hlen = hlen << 8 | len8[i];
	CHECK((8 + hlen) % 8 == 0);

	c = st_open(path, &err);
	CHECKF(c != NULL, "%s", err.msg);
	if (c == NULL)
		return;
	CHECK(st_count(c) == 5);
	CHECK(stat(path, &sb) == 0 && st_mapped_bytes(c) == (size_t)sb.st_size);
	/* __metadata__ values are kept; an absent key is NULL. */
	CHECK(st_metadata(c, "format") != NULL && strcmp(st_metadata(c, "format"), "pt") == 0);
	CHECK(st_metadata(c, "other") == NULL);
	for (k = 0; k < 5; k++) {
		const st_tensor *t = st_find(c, out[k].name);
		size_t nbytes = pcg_dtype_size(out[k].dtype);

		CHECKF(t != NULL, "%s", out[k].name);
		if (t == NULL)
			continue;
		for (i = 0; i < out[k].ndim; i++)
			nbytes *= (size_t)out[k].shape[i];
		CHECK(strcmp(t->name, out[k].name) == 0);
		CHECK(t->dtype == out[k].dtype);
		CHECK(strcmp(t->dtype_name, pcg_dtype_name(out[k].dtype)) == 0);
		CHECK(same_shape(t, out[k].ndim, out[k].shape));
		CHECK(t->nbytes == nbytes);
		CHECK(t->numel == (int64_t)(nbytes / pcg_dtype_size(out[k].dtype)));
		CHECK(nbytes == 0 || memcmp(t->data, out[k].data, nbytes) == 0);
	}
	CHECK(st_find(c, "missing") == NULL);
	CHECK(st_find(c, "") == NULL);
	CHECK(st_get(c, 5) == NULL && st_get(c, -1) == NULL);
	for (i = 0; i < st_count(c); i++)
		CHECK(st_find(c, st_get(c, i)->name) == st_get(c, i));
	{
		const st_tensor *t = st_find(c, "d.scalar");
		CHECK(t && t->ndim == 0 && t->numel == 1 && t->nbytes == 4);
	}
	{
		const st_tensor *t = st_find(c, "b.f16");
		float v[5];
		pcg_to_f32(v, t->data, t->dtype, 5);
		CHECK(v[0] == -1.5f && v[4] == 2.5f);
	}
	st_close(&c);
	CHECK(c == NULL);
	st_close(&c); /* NULL is fine */
	st_close(NULL);
}

static void test_other_dtypes(void)
{
	/* st_write only writes computable dtypes, so the I64 file is made by hand. */
	const char *hdr = "{\"ids\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]},"
			  "\"mask\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[16,19]},"
			  "\"x\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[24,32]},"
			  "\"__metadata__\":{\"k\":\"v\"}}";
	const char *path = tpath("other.safetensors");
	pcg_err err = { "" };
	const st_tensor *t;
	st_ckpt *c;
	int64_t v;

	write_raw(path, UINT64_MAX, hdr, 32);
	c = st_open(path, &err);
	CHECKF(c != NULL, "%s", err.msg);
	if (c == NULL)
		return;
	CHECK(st_count(c) == 3);
	CHECK(st_metadata(c, "k") != NULL && strcmp(st_metadata(c, "k"), "v") == 0);
	t = st_find(c, "ids");
	CHECK(t && t->dtype == PCG_DTYPE_OTHER && strcmp(t->dtype_name, "I64") == 0);
	CHECK(t && t->numel == 2 && t->nbytes == 16);
	if (t) {
		memcpy(&v, (const char *)t->data + 8, 8);
		CHECK(v == 0x0f0e0d0c0b0a0908); /* data bytes are 0, 1, 2, ... little-endian */
	}
	t = st_find(c, "mask");
	CHECK(t && strcmp(t->dtype_name, "BOOL") == 0 && t->nbytes == 3);
	t = st_find(c, "x"); /* a gap of 5 bytes before it is accepted */
	CHECK(t && strcmp(t->dtype_name, "F64") == 0 && ((const unsigned char *)t->data)[0] == 24);
	st_close(&c);
}

static void test_write_errors(void)
{
	float x[2] = { 1, 2 };
	st_out dup[2] = {
		{ "w", PCG_F32, 1, { 2 }, x },
		{ "w", PCG_F32, 1, { 2 }, x },
	};
	st_out other = { "o", PCG_DTYPE_OTHER, 1, { 2 }, x };
	st_out neg = { "n", PCG_F32, 1, { -2 }, x };
	pcg_err err = { "" };
	struct stat sb;

	CHECK(st_write(tpath("dup.safetensors"), dup, 2, NULL, &err) == -1);
	CHECKF(strstr(err.msg, "tensor 'w'") != NULL, "%s", err.msg);
	CHECK(stat(tpath("dup.safetensors"), &sb) != 0);
	CHECK(check_partials(check_tmpdir()) == 0);
	CHECK(st_write(tpath("o.safetensors"), &other, 1, NULL, &err) == -1);
	CHECK(st_write(tpath("n.safetensors"), &neg, 1, NULL, &err) == -1);
	CHECK(st_write(tpath("m.safetensors"), dup, 1, "[1]", &err) == -1);
	CHECKF(strstr(err.msg, "__metadata__") != NULL, "%s", err.msg);
	CHECK(st_write(tpath("no/such/dir/x.safetensors"), dup, 1, NULL, &err) == -1);
	CHECKF(strstr(err.msg, "cannot create") != NULL, "%s", err.msg);
	CHECK(stat(tpath("m.safetensors"), &sb) != 0 && stat(tpath("n.safetensors"), &sb) != 0);
}

static void make_dir(const char *path)
{
	if (mkdir(path, 0755) != 0 && access(path, F_OK) != 0) {
		fprintf(stderr, "cannot mkdir %s\n", path);
		exit(1);
	}
}

/* Two shards holding a, b (shard 1) and c, extra (shard 2). */
static void make_shards(const char *dir)
{
	static float a[3] = { 1, 2, 3 }, b[1] = { 4 }, cc[2] = { 5, 6 }, e[1] = { 7 };
	st_out s1[2] = { { "a", PCG_F32, 1, { 3 }, a }, { "b", PCG_F32, 1, { 1 }, b } };
	st_out s2[2] = { { "c", PCG_F32, 1, { 2 }, cc }, { "extra", PCG_F32, 1, { 1 }, e } };
	char p[4300];
	pcg_err err = { "" };

	make_dir(dir);
	snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", dir);
	CHECKF(st_write(p, s1, 2, NULL, &err) == 0, "%s", err.msg);
	snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", dir);
	CHECKF(st_write(p, s2, 2, NULL, &err) == 0, "%s", err.msg);
}

static void write_index(const char *dir, const char *weight_map)
{
	char p[4300], text[1024];

	snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
	snprintf(text, sizeof text, "{\"metadata\": {\"total_size\": 24}, \"weight_map\": %s}",
		 weight_map);
	write_file(p, text, strlen(text));
}

static void test_sharded(void)
{
	const char *dir = tpath("sharded");
	pcg_err err = { "" };
	const st_tensor *t;
	st_ckpt *c;
	float v[3];

	make_shards(dir);
	write_index(dir, "{\"a\": \"model-00001-of-00002.safetensors\","
			 " \"c\": \"model-00002-of-00002.safetensors\","
			 " \"b\": \"model-00001-of-00002.safetensors\"}");
	c = st_open(dir, &err);
	CHECKF(c != NULL, "%s", err.msg);
	if (c == NULL)
		return;
	CHECK(st_count(c) == 3);
	CHECK(st_find(c, "extra") == NULL); /* in a shard, not in the index */
	t = st_find(c, "a");
	CHECK(t && t->numel == 3);
	if (t) {
		pcg_to_f32(v, t->data, t->dtype, 3);
		CHECK(v[0] == 1 && v[2] == 3);
	}
	t = st_find(c, "c");
	CHECK(t && t->numel == 2);
	if (t) {
		pcg_to_f32(v, t->data, t->dtype, 2);
		CHECK(v[1] == 6);
	}
	CHECK(st_mapped_bytes(c) > 0);
	st_close(&c);

	/* A directory with only model.safetensors. */
	{
		float x = 9;
		st_out o = { "x", PCG_F32, 0, { 0 }, &x };
		const char *d2 = tpath("single");
		char p[4300];

		make_dir(d2);
		snprintf(p, sizeof p, "%s/model.safetensors", d2);
		CHECKF(st_write(p, &o, 1, NULL, &err) == 0, "%s", err.msg);
		c = st_open(d2, &err);
		CHECKF(c != NULL && st_count(c) == 1 && st_find(c, "x"), "%s", err.msg);
		st_close(&c);
	}
}

/* Malformed single files: each must be refused with its message. */
static const struct {
	const char *what;
	uint64_t hlen; /* UINT64_MAX: the header's real length */
	const char *hdr;
	size_t data_len;
	const char *expect;
} bad_files[] = {
	{ "header length past EOF", 1000, "{}", 0, "header length 1000 beyond file size" },
	{ "huge header length", UINT64_MAX - 1, "{}", 0, "exceeds the limit" },
	{ "zero header length", 0, "", 0, "not valid JSON" },
	{ "not JSON", UINT64_MAX, "{\"a\": {", 0, "not valid JSON" },
	{ "trailing garbage", UINT64_MAX, "{} x", 0, "not valid JSON" },
	{ "JSON array", UINT64_MAX, "[1, 2]", 0, "header is not a JSON object" },
	{ "entry not object", UINT64_MAX, "{\"a\": 3}", 0, "tensor 'a': entry is not an object" },
	{ "missing dtype", UINT64_MAX, "{\"a\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
	  "tensor 'a': dtype missing" },
	{ "bad dtype", UINT64_MAX, "{\"a\": {\"dtype\": \"Q4\", \"shape\": [1], \"data_offsets\": [0, 1]}}",
	  1, "tensor 'a': unknown dtype 'Q4'" },
	{ "missing shape", UINT64_MAX, "{\"a\": {\"dtype\": \"F32\", \"data_offsets\": [0, 4]}}", 4,
	  "tensor 'a': shape missing" },
	{ "missing offsets", UINT64_MAX, "{\"a\": {\"dtype\": \"F32\", \"shape\": [1]}}", 4,
	  "tensor 'a': data_offsets missing" },
	{ "three offsets", UINT64_MAX,
	  "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4, 8]}}", 8,
	  "tensor 'a': data_offsets missing or not [begin, end]" },
	{ "negative offset", UINT64_MAX,
	  "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [-4, 0]}}", 8,
	  "tensor 'a': data_offsets missing or not [begin, end]" },
	{ "shape mismatch", UINT64_MAX,
	  "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 4]}}", 8,
	  "tensor 'a': shape and dtype F32 need 8 bytes, data_offsets span 4" },
	{ "overflow shape", UINT64_MAX,
	  "{\"a\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296, 4294967296],"
	  " \"data_offsets\": [0, 4]}}", 4, "tensor 'a': shape overflows" },
	{ "overflow bytes", UINT64_MAX,
	  "{\"a\": {\"dtype\": \"F32\", \"shape\": [4611686018427387904],"
	  " \"data_offsets\": [0, 4]}}", 4, "tensor 'a': shape overflows 64 bits in bytes" },
	{ "negative dim", UINT64_MAX,
	  "{\"a\": {\"dtype\": \"F32\", \"shape\": [2, -1], \"data_offsets\": [0, 4]}}", 4,
	  "tensor 'a': shape[1] is negative" },
	{ "real dim", UINT64_MAX,
	  "{\"a\": {\"dtype\": \"F32\", \"shape\": [1.0], \"data_offsets\": [0, 4]}}", 4,
	  "tensor 'a': shape[0] is not an integer" },
	{ "too many dims", UINT64_MAX,
	  "{\"a\": {\"dtype\": \"U8\", \"shape\": [1,1,1,1,1,1,1,1,1], \"data_offsets\": [0, 1]}}",
	  1, "tensor 'a': shape has 9 dims, more than 8" },
	{ "offsets past end", UINT64_MAX,
	  "{\"model.norm.weight\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}",
	  8, "tensor 'model.norm.weight': data_offsets end 16 beyond data size 8" },
	{ "begin > end", UINT64_MAX,
	  "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 4]}}", 8,
	  "tensor 'a': data_offsets begin 8 > end 4" },
	{ "overlapping", UINT64_MAX,
	  "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
	  " \"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}", 16,
	  "tensor 'b': data_offsets [4, 12] overlap" },
	{ "same range", UINT64_MAX,
	  "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
	  " \"b\": {\"dtype\": \"I64\", \"shape\": [1], \"data_offsets\": [0, 8]}}", 8, "overlap" },
	{ "duplicate names", UINT64_MAX,
	  "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
	  " \"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}", 8, "duplicate" },
	{ "metadata not object", UINT64_MAX, "{\"__metadata__\": 3}", 0,
	  "__metadata__ is not an object" },
	{ "metadata value", UINT64_MAX, "{\"__metadata__\": {\"format\": 1}}", 0,
	  "__metadata__ 'format' is not a string" },
	{ "control chars in name", UINT64_MAX, "{\"a\\nb\": 1}", 0, "tensor 'a?b'" },
};

static void test_bad_files(void)
{
	const char *path = tpath("bad.safetensors");
	pcg_err err;
	st_ckpt *c;
	size_t i;

	/* Shorter than the length field. */
	write_file(path, "\x02\0\0\0\0", 5);
	err.msg[0] = '\0';
	CHECK(st_open(path, &err) == NULL);
	CHECKF(strstr(err.msg, "shorter than the 8-byte") != NULL, "%s", err.msg);

	for (i = 0; i < sizeof bad_files / sizeof bad_files[0]; i++) {
		write_raw(path, bad_files[i].hlen, bad_files[i].hdr, bad_files[i].data_len);
		err.msg[0] = '\0';
		c = st_open(path, &err);
		CHECKF(c == NULL, "%s: opened", bad_files[i].what);
		CHECKF(strstr(err.msg, bad_files[i].expect) != NULL && strstr(err.msg, path) == err.msg,
		       "%s: got \"%s\", want \"%s\"", bad_files[i].what, err.msg, bad_files[i].expect);
		st_close(&c);
	}

	CHECK(st_open(tpath("does-not-exist"), &err) == NULL);
	CHECKF(strstr(err.msg, "does-not-exist") != NULL, "%s", err.msg);
	make_dir(tpath("empty"));
	CHECK(st_open(tpath("empty"), &err) == NULL);
	CHECKF(strstr(err.msg, "neither") != NULL, "%s", err.msg);
}

/* Malformed indexes over the good shards of make_shards. */
static const struct {
	const char *what;
	const char *weight_map;
	const char *expect;
} bad_indexes[] = {
	{ "parent shard", "{\"a\": \"../x\"}", "tensor 'a': shard '../x' is not a plain file name" },
	{ "dot shard", "{\"a\": \"..\"}", "is not a plain file name" },
	{ "empty shard", "{\"a\": \"\"}", "is not a plain file name" },
	{ "shard not string", "{\"a\": 1}", "tensor 'a': weight_map value is not a string" },
	{ "missing tensor", "{\"a\": \"model-00001-of-00002.safetensors\","
	  " \"zz\": \"model-00001-of-00002.safetensors\"}",
	  "tensor 'zz': not found in shard 'model-00001-of-00002.safetensors'" },
	{ "wrong shard", "{\"c\": \"model-00001-of-00002.safetensors\"}", "tensor 'c': not found" },
	{ "missing shard", "{\"a\": \"model-00009-of-00009.safetensors\"}",
	  "model-00009-of-00009.safetensors: cannot open" },
	{ "weight_map not object", "[1]", "weight_map missing or not an object" },
	{ "duplicate", "{\"a\": \"model-00001-of-00002.safetensors\","
	  " \"a\": \"model-00001-of-00002.safetensors\"}", "duplicate" },
};

static void test_bad_indexes(void)
{
	const char *dir = tpath("badindex");
	pcg_err err;
	st_ckpt *c;
	size_t i;
	char p[4300];

	make_shards(dir);
	for (i = 0; i < sizeof bad_indexes / sizeof bad_indexes[0]; i++) {
		write_index(dir, bad_indexes[i].weight_map);
		err.msg[0] = '\0';
		c = st_open(dir, &err);
		CHECKF(c == NULL, "%s: opened", bad_indexes[i].what);
		CHECKF(strstr(err.msg, bad_indexes[i].expect) != NULL,
		       "%s: got \"%s\", want \"%s\"", bad_indexes[i].what, err.msg,
		       bad_indexes[i].expect);
		st_close(&c);
	}
	/* An index that is not JSON. */
	snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
	write_file(p, "{", 1);
	CHECK(st_open(dir, &err) == NULL);
	CHECKF(strstr(err.msg, "model.safetensors.index.json") != NULL, "%s", err.msg);
	/* A bad shard is reported with the shard's name. */
	write_index(dir, "{\"a\": \"bad\"}");
	snprintf(p, sizeof p, "%s/bad", dir);
	write_raw(p, UINT64_MAX, "[]", 0);
	CHECK(st_open(dir, &err) == NULL);
	CHECKF(strstr(err.msg, "/bad: header is not a JSON object") != NULL, "%s", err.msg);
}

/* Mutates the header (or the length) of a valid file; whatever opens must
 * be fully readable: a tensor reaching past the mapping would fault here,
 * and the asan- build of this test catches memory errors in the parser. */
static void test_fuzz(void)
{
	static const char chars[] = "{}[]\",:-0123456789e.Ia\\ ";
	const char *hdr =
		"{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
		"\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[24,32]},"
		"\"c\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[32,40]},"
		"\"__metadata__\":{\"format\":\"pt\"}}";
	const char *path = tpath("fuzz.safetensors");
	unsigned char good[512], buf[512];
	size_t n = make_raw(good, UINT64_MAX, hdr, 40), hregion = 8 + strlen(hdr), len, i;
	uint64_t seed = 20240611;
	int iter, opened = 0, lost = 0, k;
	unsigned sum = 0;
	pcg_err err;

	for (iter = 0; iter < 3000; iter++) {
		memcpy(buf, good, n);
		len = n;
		switch (fuzz_next(&seed) % 5) {
		case 0: /* flip bits */
			for (k = 0; k < 1 + (int)(fuzz_next(&seed) % 3); k++)
				buf[fuzz_next(&seed) % hregion] ^= (unsigned char)(1u << (fuzz_next(&seed) % 8));
			break;
		case 1: /* overwrite with characters that keep it JSON-like */
			for (k = 0; k < 1 + (int)(fuzz_next(&seed) % 3); k++)
				buf[8 + fuzz_next(&seed) % (hregion - 8)] =
					(unsigned char)chars[fuzz_next(&seed) % (sizeof chars - 1)];
			break;
		case 2: /* overwrite with any byte */
			buf[fuzz_next(&seed) % hregion] = (unsigned char)fuzz_next(&seed);
			break;
		case 3: /* change a digit: shapes and offsets stay JSON, often valid */
			for (k = 0; k < 1 + (int)(fuzz_next(&seed) % 2); k++) {
				i = 8 + fuzz_next(&seed) % (hregion - 8);
				if (buf[i] >= '0' && buf[i] <= '9')
					buf[i] = (unsigned char)('0' + fuzz_next(&seed) % 10);
			}
			break;
		default: /* truncate */
			len = fuzz_next(&seed) % n;
			break;
		}
		write_file(path, buf, len);
		st_ckpt *c = st_open(path, &err);
		if (c == NULL)
			continue;
		opened++;
		for (k = 0; k < st_count(c); k++) {
			const st_tensor *t = st_get(c, k);
			for (i = 0; i < t->nbytes; i++)
				sum += ((const unsigned char *)t->data)[i];
			lost += st_find(c, t->name) != t;
		}
		st_close(&c);
	}
	printf("fuzz: 3000 mutations, %d opened (byte sum %u)\n", opened, sum);
	CHECK(lost == 0);
	CHECK(opened > 0 && opened < 3000);
}

/* st_from_memory: the same tensors as st_open from the same bytes, and a
 * corrupt header refused with the name given. */
static void test_from_memory(void)
{
	const char *root = getenv("PCG_ROOT");
	char path[1024];
	pcg_err err = { "" };
	snprintf(path, sizeof path, "%s/tests/fixtures/llama/gqa-f32/model.safetensors",
		 root ? root : ".");
	FILE *f = fopen(path, "rb");
	CHECKF(f != NULL, "%s", path);
	if (f == NULL)
		return;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	rewind(f);
	unsigned char *b = malloc((size_t)n);
	CHECK(b && fread(b, 1, (size_t)n, f) == (size_t)n);
	fclose(f);
	st_ckpt *a = st_open(path, &err), *m = st_from_memory(b, (size_t)n, "mem", &err);
	CHECKF(a && m && st_count(a) == st_count(m), "%s", err.msg);
	for (int i = 0; a && m && i < st_count(a); i++) {
		const st_tensor *x = st_get(a, i), *y = st_find(m, x->name);
		CHECK(y && y->nbytes == x->nbytes && !memcmp(y->data, x->data, x->nbytes));
	}
	st_close(&a);
	st_close(&m);
	b[9] = '!'; /* inside the JSON header */
	CHECK(st_from_memory(b, (size_t)n, "mem", &err) == NULL && strstr(err.msg, "mem"));
	CHECK(st_from_memory(b, 5, "mem", &err) == NULL && strstr(err.msg, "shorter"));
	free(b);
}

int main(void)
{
	snprintf(tmpdir, sizeof tmpdir, "%s/st.%d", check_tmpdir(), (int)getpid());
	make_dir(tmpdir);
	test_round_trip();
	test_other_dtypes();
	test_write_errors();
	test_sharded();
	test_bad_files();
	test_bad_indexes();
	test_fuzz();
	test_from_memory();
	return check_done("test_safetensors");
}
