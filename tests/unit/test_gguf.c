/* test_gguf.c: the GGUF reader and writer against gguf-py.
 *
 * The files of tests/fixtures/gguf were written by gguf-py
 * (tests/ref/make_gguf_fixtures.py): a metadata value of every type read
 * back, each tensor's type, shape and bytes, and pcg_to_f32 of every type
 * the engine computes with equal to gguf-py's dequantisation bit for bit;
 * llama_config_from_gguf on a converter-style llama. Then malformed files,
 * each refused with a message naming the fault (every prefix of a file,
 * wrong magic and version, counts and lengths beyond the file, unknown
 * types, duplicates, misaligned and out-of-file tensors...), a writer round
 * trip and its failures, and a seeded mutation fuzz that must not crash.
 *
 * `test_gguf --write PATH` only writes the round-trip file, for
 * tests/gguf.sh to read with gguf-py's GGUFReader.
 */
#include "check.h"
#include "config.h"
#include "fixture.h"
#include "gguf.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FIX "tests/fixtures/gguf"

static const char *tpath(const char *name)
{
	static char buf[4][4200];
	static int k;

	k = (k + 1) % 4;
	snprintf(buf[k], sizeof buf[k], "%s/%s", check_tmpdir(), name);
	return buf[k];
}

/* Opens an image from an exact-size copy, so that AddressSanitizer sees
 * any read past its end. */
static gguf_file *open_copy(const void *p, size_t n, pcg_err *err, void **copy)
{
	*copy = malloc(n ? n : 1);
	memcpy(*copy, p, n);
	return gguf_from_memory(*copy, n, err);
}

/* ------------------------------------------------------- gguf-py's files */

static void check_int(const gguf_file *f, const char *key, gguf_type type, int64_t want)
{
	pcg_err err = { "" };
	int64_t v = 0;
	int i = gguf_find_key(f, key);

	CHECKF(i >= 0 && gguf_kv_type(f, i) == type, "%s: type", key);
	CHECKF(gguf_get_int(f, key, &v, &err) == 0 && v == want, "%s: %lld, want %lld (%s)", key,
	       (long long)v, (long long)want, err.msg);
}

static void check_float(const gguf_file *f, const char *key, gguf_type type, double want)
{
	pcg_err err = { "" };
	double v = 0;
	int i = gguf_find_key(f, key);

	CHECKF(i >= 0 && gguf_kv_type(f, i) == type, "%s: type", key);
	CHECKF(gguf_get_float(f, key, &v, &err) == 0 && v == want, "%s: %g, want %g (%s)", key, v,
	       want, err.msg);
}

static void check_str(const gguf_file *f, const char *key, const char *want)
{
	pcg_err err = { "" };
	const char *s = NULL;
	size_t n = 0;

	CHECKF(gguf_get_str(f, key, &s, &n, &err) == 0 && n == strlen(want) && !memcmp(s, want, n),
	       "%s: %s", key, err.msg);
}

static void check_arr_num(const gguf_file *f, const char *key, gguf_type et, const double *want,
			  size_t n)
{
	pcg_err err = { "" };
	gguf_type t;
	size_t m = 0;
	double v;

	CHECKF(gguf_get_arr(f, key, &t, &m, &err) == 0 && t == et && m == n, "%s: %s", key, err.msg);
	for (size_t i = 0; i < n && i < m; i++)
		CHECKF(gguf_arr_num(f, key, i, &v, &err) == 0 && v == want[i], "%s[%zu]: %g", key, i,
		       v);
	CHECKF(gguf_arr_num(f, key, n, &v, &err) < 0 && strstr(err.msg, "element"),
	       "%s: past the end: %s", key, err.msg);
}

static void check_arr_str(const gguf_file *f, const char *key, const char *const *want, size_t n)
{
	pcg_err err = { "" };
	gguf_type t;
	size_t m = 0, len;
	const char *s;

	CHECKF(gguf_get_arr(f, key, &t, &m, &err) == 0 && t == GGUF_STRING && m == n, "%s", key);
	for (size_t i = 0; i < n && i < m; i++)
		CHECKF(gguf_arr_str(f, key, i, &s, &len, &err) == 0 && len == strlen(want[i]) &&
		       !memcmp(s, want[i], len), "%s[%zu]", key, i);
	CHECK(gguf_arr_str(f, key, n, &s, &len, &err) < 0);
}

static void test_metadata(const gguf_file *f)
{
	static const double i32[] = { 1, -2, 3 }, u8[] = { 7, 8, 9, 255 }, f32[] = { 0.5, -1.25 },
			    b[] = { 1, 0, 1 };
	static const char *const strs[] = { "a", "", "\xc3\xa9t\xc3\xa9", "d e" };
	pcg_err err = { "" };
	int64_t iv;
	double dv;
	int bv = -1;
	const char *s;
	size_t n;
	gguf_type t;

	CHECK(gguf_version(f) == 3 && gguf_alignment(f) == 64);
	check_str(f, "general.architecture", "test");
	check_int(f, "general.alignment", GGUF_UINT32, 64);
	check_int(f, "t.u8", GGUF_UINT8, 200);
	check_int(f, "t.i8", GGUF_INT8, -100);
	check_int(f, "t.u16", GGUF_UINT16, 60000);
	check_int(f, "t.i16", GGUF_INT16, -30000);
	check_int(f, "t.u32", GGUF_UINT32, 4000000000);
	check_int(f, "t.i32", GGUF_INT32, -2000000000);
	check_int(f, "t.i64", GGUF_INT64, -9000000000000000000);
	check_float(f, "t.f32", GGUF_FLOAT32, 0.15625);
	check_float(f, "t.f64", GGUF_FLOAT64, -2.5e-300);
	check_float(f, "t.u64", GGUF_UINT64, 18000000000000000000.0);
	check_float(f, "t.i8", GGUF_INT8, -100); /* an integer is a number too */
	CHECK(gguf_get_bool(f, "t.bool", &bv, &err) == 0 && bv == 1);
	CHECK(gguf_get_bool(f, "t.false", &bv, &err) == 0 && bv == 0);
	check_str(f, "t.str", "h\xc3\xa9llo, \xe4\xb8\x96\xe7\x95\x8c");
	check_str(f, "t.empty", "");
	check_arr_num(f, "t.arr_i32", GGUF_INT32, i32, 3);
	check_arr_num(f, "t.arr_u8", GGUF_UINT8, u8, 4);
	check_arr_num(f, "t.arr_f32", GGUF_FLOAT32, f32, 2);
	check_arr_num(f, "t.arr_bool", GGUF_BOOL, b, 3);
	check_arr_str(f, "t.arr_str", strs, 4);
	CHECK(gguf_get_arr(f, "t.arr_arr", &t, &n, &err) == 0 && t == GGUF_ARRAY && n == 2);
	CHECK(gguf_arr_num(f, "t.arr_arr", 0, &dv, &err) < 0 &&
	      strstr(err.msg, "t.arr_arr: an array of array, not of numbers"));
	CHECK(gguf_n_kv(f) == 22 && gguf_key(f, 0) && !strcmp(gguf_key(f, 0), "general.architecture"));
	CHECK(gguf_key(f, 22) == NULL && gguf_key(f, -1) == NULL);

	/* the wrong getter, an absent key, a value beyond int64 */
	CHECK(gguf_get_int(f, "t.u64", &iv, &err) < 0 && strstr(err.msg, "t.u64: beyond the range"));
	CHECK(gguf_get_str(f, "t.u8", &s, &n, &err) < 0 &&
	      strstr(err.msg, "t.u8: a uint8, not a string"));
	CHECK(gguf_get_int(f, "t.f32", &iv, &err) < 0 &&
	      strstr(err.msg, "t.f32: a float32, not an integer"));
	CHECK(gguf_get_float(f, "t.str", &dv, &err) < 0 && strstr(err.msg, "t.str: a string, not a number"));
	CHECK(gguf_get_bool(f, "t.u8", &bv, &err) < 0 && strstr(err.msg, "not a bool"));
	CHECK(gguf_get_arr(f, "t.str", &t, &n, &err) < 0 && strstr(err.msg, "not an array"));
	CHECK(gguf_arr_str(f, "t.arr_i32", 0, &s, &n, &err) < 0 &&
	      strstr(err.msg, "an array of int32, not of strings"));
	CHECK(gguf_get_int(f, "no.such.key", &iv, &err) < 0 && !strcmp(err.msg, "no.such.key: missing"));
	CHECK(gguf_find_key(f, "no.such.key") == -1 && gguf_find_key(f, "t.") == -1);
}

typedef struct want_tensor {
	const char *name, *type_name;
	pcg_dtype dtype;
	int ggml_type, ndim;
	int64_t ne[4];
	size_t nbytes;
} want_tensor;

static void test_types(void)
{
	static const want_tensor want[] = {
		{ "f32", "F32", PCG_F32, 0, 2, { 512, 3, 1, 1 }, 6144 },
		{ "f16", "F16", PCG_F16, 1, 2, { 512, 3, 1, 1 }, 3072 },
		{ "bf16", "BF16", PCG_BF16, 30, 2, { 512, 3, 1, 1 }, 3072 },
		{ "q8_0", "Q8_0", PCG_Q8_0, 8, 2, { 512, 3, 1, 1 }, 48 * 34 },
		{ "q4_0", "Q4_0", PCG_Q4_0, 2, 2, { 512, 3, 1, 1 }, 48 * 18 },
		{ "q4_k", "Q4_K", PCG_Q4_K, 12, 2, { 512, 3, 1, 1 }, 6 * 144 },
		{ "q5_k", "Q5_K", PCG_Q5_K, 13, 2, { 512, 3, 1, 1 }, 6 * 176 },
		{ "q6_k", "Q6_K", PCG_Q6_K, 14, 2, { 512, 3, 1, 1 }, 6 * 210 },
		{ "q3_k", "Q3_K", PCG_DTYPE_OTHER, 11, 2, { 256, 2, 1, 1 }, 2 * 110 },
		{ "iq4_nl", "IQ4_NL", PCG_DTYPE_OTHER, 20, 2, { 256, 2, 1, 1 }, 16 * 18 },
		{ "mxfp4", "MXFP4", PCG_DTYPE_OTHER, 39, 2, { 256, 2, 1, 1 }, 16 * 17 },
		{ "i32", "I32", PCG_DTYPE_OTHER, 26, 1, { 5, 1, 1, 1 }, 20 },
		{ "f64", "F64", PCG_DTYPE_OTHER, 28, 1, { 2, 1, 1, 1 }, 16 },
		{ "cube", "F32", PCG_F32, 0, 3, { 4, 3, 2, 1 }, 96 },
		{ "hyper", "F32", PCG_F32, 0, 4, { 2, 3, 4, 5 }, 480 },
	};
	const int nw = (int)(sizeof want / sizeof want[0]);
	pcg_err err = { "" };
	gguf_file *f = gguf_open(FIX "/types.gguf", &err);
	size_t n_ref, off = 0;
	float *ref = read_f32(FIX "/types.f32", &n_ref), *got;

	CHECKF(f != NULL, "%s", err.msg);
	CHECK(ref != NULL && n_ref == 8 * 3 * 512);
	if (f == NULL || ref == NULL) {
		gguf_close(&f);
		free(ref);
		return;
	}
	CHECK(gguf_is_gguf(FIX "/types.gguf") && !gguf_is_gguf(FIX "/types.f32") &&
	      !gguf_is_gguf(FIX "/no-such-file"));
	CHECK(gguf_mapped_bytes(f) == 21184);
	test_metadata(f);

	CHECK(gguf_n_tensors(f) == nw);
	got = malloc(3 * 512 * sizeof *got);
	for (int i = 0; i < nw && i < gguf_n_tensors(f); i++) {
		const gguf_tensor *t = gguf_tensor_at(f, i);
		const want_tensor *w = &want[i];
		CHECKF(!strcmp(t->name, w->name) && !strcmp(t->type_name, w->type_name) &&
		       t->dtype == w->dtype && t->ggml_type == w->ggml_type && t->ndim == w->ndim &&
		       !memcmp(t->ne, w->ne, sizeof t->ne) && t->nbytes == w->nbytes,
		       "tensor %d (%s): %s %s ndim %d ne %lld %lld %lld %lld, %zu bytes", i, w->name,
		       t->name, t->type_name, t->ndim, (long long)t->ne[0], (long long)t->ne[1],
		       (long long)t->ne[2], (long long)t->ne[3], t->nbytes);
		CHECKF(gguf_find_tensor(f, w->name) == t, "find %s", w->name);
		/* the mapping is page-aligned, so the file's alignment shows */
		CHECKF((uintptr_t)t->data % 64 == 0, "%s: data not 64-aligned", w->name);
		if (i < 8) { /* gguf-py's dequantisation, bit for bit */
			size_t bad = 0;
			pcg_to_f32(got, t->data, t->dtype, 3 * 512);
			for (size_t k = 0; k < 3 * 512; k++)
				bad += memcmp(&got[k], &ref[off + k], sizeof(float)) != 0;
			CHECKF(bad == 0, "%s: %zu of 1536 values differ from gguf-py's (max diff %g)",
			       w->name, bad, max_diff(got, ref + off, 3 * 512));
			off += 3 * 512;
		}
	}
	{ /* ne[0] is innermost: cube[z][y][x] = 12 z + 4 y + x */
		const gguf_tensor *c = gguf_find_tensor(f, "cube");
		const gguf_tensor *h = gguf_find_tensor(f, "hyper");
		float v[120];
		memcpy(v, c->data, 24 * sizeof(float));
		CHECK(v[0] == 0 && v[1] == 1 && v[4] == 4 && v[12] == 12 && v[23] == 23);
		memcpy(v, h->data, 120 * sizeof(float));
		CHECK(v[119] == 119 && v[2] == 2);
	}
	CHECK(gguf_find_tensor(f, "nope") == NULL && gguf_tensor_at(f, nw) == NULL &&
	      gguf_tensor_at(f, -1) == NULL);
	CHECK(!strcmp(gguf_ggml_type_name(11), "Q3_K") && !strcmp(gguf_ggml_type_name(16), "IQ2_XXS") &&
	      gguf_ggml_type_name(4) == NULL && gguf_ggml_type_name(31) == NULL);
	free(got);
	free(ref);
	gguf_close(&f);
	CHECK(f == NULL);
	gguf_close(&f);
}

/* Every prefix of a valid file that cuts into its header or its tensors
 * is refused, with a message; none crashes. */
static void test_prefixes(const char *path, size_t data_end)
{
	size_t n, refused = 0;
	unsigned char *b = read_bytes(path, &n);
	pcg_err err;

	CHECKF(b != NULL && data_end <= n, "%s", path);
	for (size_t len = 0; b && len < data_end; len++) {
		void *copy;
		err.msg[0] = '\0';
		gguf_file *f = open_copy(b, len, &err, &copy);
		CHECKF(f == NULL && err.msg[0] != '\0', "%s: prefix of %zu bytes %s", path, len,
		       f ? "accepted" : "refused without a message");
		refused += f == NULL;
		gguf_close(&f);
		free(copy);
	}
	printf("%s: all %zu prefixes refused\n", path, refused);
	free(b);
}

static void test_config(void)
{
	pcg_err err = { "" };
	gguf_file *f = gguf_open(FIX "/tiny-llama.gguf", &err);
	llama_config c;

	CHECKF(f != NULL, "%s", err.msg);
	if (f == NULL)
		return;
	CHECKF(llama_config_from_gguf(f, &c, &err) == 0, "%s", err.msg);
	CHECK(c.hidden == 64 && c.n_layers == 2 && c.n_heads == 4 && c.n_kv_heads == 2 &&
	      c.head_dim == 16 && c.ffn == 160 && c.vocab == 32 && c.max_pos == 256);
	CHECK(c.eps == 1e-5f && c.rope_theta == 500000.0f && c.rope_llama3 == 0 && c.tie == 1);
	CHECK(c.bos == 1 && c.n_eos == 1 && c.eos[0] == 2);
	gguf_close(&f);
}

/* A llama's metadata with one key changed: drop (NULL: none) is left out,
 * key set to a string (sval) or a uint32 (uval) or float32 (fval), and
 * an output.weight tensor when with_output. */
typedef struct cfg_edit {
	const char *drop, *key, *sval;
	int kind; /* 0 none, 1 string, 2 uint32, 3 float32, 4 string array of 7 */
	uint32_t uval;
	float fval;
	int with_output, with_embd;
	uint32_t key_length; /* llama.attention.key_length, when not 0 */
	const char *want; /* NULL: accepted */
} cfg_edit;

static int fill_zero(void *ctx, int index, void *dst, size_t nbytes, pcg_err *err)
{
	(void)ctx;
	(void)index;
	(void)err;
	memset(dst, 0, nbytes);
	return 0;
}

static gguf_file *write_cfg(const cfg_edit *e, pcg_err *err)
{
	static const struct { const char *key; int kind; double v; } base[] = {
		{ "general.architecture", 1, 0 },
		{ "llama.embedding_length", 2, 64 },
		{ "llama.block_count", 2, 2 },
		{ "llama.attention.head_count", 2, 4 },
		{ "llama.attention.head_count_kv", 2, 2 },
		{ "llama.feed_forward_length", 2, 96 },
		{ "llama.attention.layer_norm_rms_epsilon", 3, 1e-6 },
		{ "llama.vocab_size", 2, 40 },
		{ "tokenizer.ggml.bos_token_id", 2, 3 },
	};
	static const char *const toks[7] = { "a", "b", "c", "d", "e", "f", "g" };
	gguf_writer *w = gguf_writer_new(err);
	const char *path = tpath("cfg.gguf");
	int ok = w != NULL;

	for (size_t i = 0; ok && i < sizeof base / sizeof base[0]; i++) {
		const char *k = base[i].key;
		if ((e->drop && !strcmp(k, e->drop)) || (e->key && !strcmp(k, e->key)))
			continue;
		ok = (base[i].kind == 1 ? gguf_set_str(w, k, "llama", err)
		      : base[i].kind == 2 ? gguf_set_u32(w, k, (uint32_t)base[i].v, err)
		      : gguf_set_f32(w, k, (float)base[i].v, err)) == 0;
	}
	if (ok && e->kind == 1)
		ok = gguf_set_str(w, e->key, e->sval, err) == 0;
	if (ok && e->kind == 2)
		ok = gguf_set_u32(w, e->key, e->uval, err) == 0;
	if (ok && e->kind == 3)
		ok = gguf_set_f32(w, e->key, e->fval, err) == 0;
	if (ok && e->kind == 4)
		ok = gguf_set_arr_str(w, e->key, toks, 7, err) == 0;
	if (ok && e->key_length)
		ok = gguf_set_u32(w, "llama.attention.key_length", e->key_length, err) == 0;
	if (ok && e->with_output)
		ok = gguf_add_tensor(w, "output.weight", PCG_F16, 2, (int64_t[]){ 64, 40 }, fill_zero,
				     NULL, 0, err) == 0;
	if (ok && e->with_embd)
		ok = gguf_add_tensor(w, "token_embd.weight", PCG_F16, 2, (int64_t[]){ 64, 50 },
				     fill_zero, NULL, 0, err) == 0;
	ok = ok && gguf_writer_finish(w, path, err) == 0;
	gguf_writer_free(&w);
	return ok ? gguf_open(path, err) : NULL;
}

static void test_config_errors(void)
{
	static const cfg_edit edits[] = {
		{ .want = NULL },
		{ .key = "general.architecture", .kind = 1, .sval = "qwen2",
		  .want = "general.architecture 'qwen2' is not supported (llama only)" },
		{ .drop = "general.architecture", .want = "general.architecture: missing" },
		{ .drop = "llama.embedding_length", .want = "llama.embedding_length: missing" },
		{ .key = "llama.embedding_length", .kind = 1, .sval = "64",
		  .want = "llama.embedding_length: a string, not an integer" },
		{ .key = "llama.block_count", .kind = 2, .uval = 0,
		  .want = "llama.block_count: 0 out of range (at least 1)" },
		{ .key = "llama.attention.head_count", .kind = 2, .uval = 3000000000u,
		  .want = "llama.attention.head_count: 3000000000 out of range" },
		{ .key = "llama.attention.head_count_kv", .kind = 2, .uval = 3,
		  .want = "llama.attention.head_count_kv: llama.attention.head_count 4 is not a"
			  " multiple of 3" },
		{ .drop = "llama.feed_forward_length", .want = "llama.feed_forward_length: missing" },
		{ .drop = "llama.attention.layer_norm_rms_epsilon",
		  .want = "llama.attention.layer_norm_rms_epsilon: missing" },
		{ .key = "llama.attention.layer_norm_rms_epsilon", .kind = 3, .fval = -1,
		  .want = "llama.attention.layer_norm_rms_epsilon: -1 is not a positive finite number" },
		{ .key = "llama.rope.freq_base", .kind = 3, .fval = INFINITY,
		  .want = "llama.rope.freq_base: inf is not a positive" },
		{ .key = "llama.attention.key_length", .kind = 2, .uval = 15,
		  .want = "llama.attention.key_length: head size 15 is odd" },
		{ .key = "llama.rope.dimension_count", .kind = 2, .uval = 8, .key_length = 16,
		  .want = "llama.rope.dimension_count: 8, not the head size 16 (partial" },
		{ .key = "llama.attention.value_length", .kind = 2, .uval = 32,
		  .want = "llama.attention.value_length: 32, not the key size 16" },
		{ .key = "llama.embedding_length", .kind = 2, .uval = 66,
		  .want = "llama.attention.key_length: missing, and llama.embedding_length 66 is not a"
			  " multiple of llama.attention.head_count 4" },
		{ .key = "llama.expert_count", .kind = 2, .uval = 8,
		  .want = "llama.expert_count: 8 (mixture of experts is not supported)" },
		{ .key = "llama.rope.scaling.type", .kind = 1, .sval = "yarn",
		  .want = "llama.rope.scaling.type: 'yarn' is not supported" },
		{ .key = "llama.rope.scaling.type", .kind = 1, .sval = "none" },
		{ .key = "tokenizer.ggml.bos_token_id", .kind = 2, .uval = 40,
		  .want = "tokenizer.ggml.bos_token_id: 40 not in [0, vocab size 40)" },
		{ .key = "tokenizer.ggml.eos_token_id", .kind = 1, .sval = "2",
		  .want = "tokenizer.ggml.eos_token_id: a string, not an integer" },
		{ .drop = "llama.vocab_size",
		  .want = "llama.vocab_size: missing (and no tokenizer.ggml.tokens or token_embd" },
	};
	pcg_err err = { "" };
	llama_config c;

	for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
		gguf_file *f = write_cfg(&edits[i], &err);
		CHECKF(f != NULL, "config edit %zu: %s", i, err.msg);
		if (f == NULL)
			continue;
		err.msg[0] = '\0';
		int rc = llama_config_from_gguf(f, &c, &err);
		if (edits[i].want == NULL)
			CHECKF(rc == 0, "config edit %zu: %s", i, err.msg);
		else
			CHECKF(rc < 0 && strstr(err.msg, edits[i].want), "config edit %zu: want '%s', got '%s'",
			       i, edits[i].want, rc ? err.msg : "accepted");
		gguf_close(&f);
	}

	/* the defaults, and where the values come from when keys are absent */
	cfg_edit e = { .key = "llama.attention.key_length", .kind = 2, .uval = 32 };
	gguf_file *f = write_cfg(&e, &err);
	CHECKF(f && llama_config_from_gguf(f, &c, &err) == 0, "%s", err.msg);
	CHECK(c.head_dim == 32 && c.tie == 1 && c.rope_theta == 10000.0f && c.max_pos == 2048 &&
	      c.n_eos == 0 && c.bos == 3 && c.vocab == 40 && c.eps == 1e-6f);
	gguf_close(&f);
	e = (cfg_edit){ .drop = "llama.vocab_size", .key = "tokenizer.ggml.tokens", .kind = 4,
			.with_output = 1 };
	f = write_cfg(&e, &err);
	CHECKF(f && llama_config_from_gguf(f, &c, &err) == 0, "%s", err.msg);
	CHECK(c.vocab == 7 && c.tie == 0 && c.bos == 3);
	gguf_close(&f);
	e = (cfg_edit){ .drop = "llama.vocab_size", .with_embd = 1 };
	f = write_cfg(&e, &err);
	CHECKF(f && llama_config_from_gguf(f, &c, &err) == 0, "%s", err.msg);
	CHECK(c.vocab == 50 && c.tie == 1);
	gguf_close(&f);
	e = (cfg_edit){ .drop = "llama.attention.head_count_kv" };
	f = write_cfg(&e, &err);
	CHECKF(f && llama_config_from_gguf(f, &c, &err) == 0, "%s", err.msg);
	CHECK(c.n_kv_heads == 4);
	gguf_close(&f);
}

/* ----------------------------------------------- files built by hand */

typedef struct img {
	unsigned char p[4096];
	size_t n;
} img;

static void put(img *b, const void *s, size_t n)
{
	if (b->n + n > sizeof b->p) {
		fprintf(stderr, "test image too large\n");
		exit(1);
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
}
static void u32(img *b, uint32_t v) { put(b, &v, 4); }
static void u64(img *b, uint64_t v) { put(b, &v, 8); }
static void str(img *b, const char *s) { u64(b, strlen(s)); put(b, s, strlen(s)); }
static void pad(img *b, size_t a) { while (b->n % a) put(b, "", 1); }

static void header(img *b, uint32_t version, uint64_t n_t, uint64_t n_kv)
{
	b->n = 0;
	put(b, "GGUF", 4);
	u32(b, version);
	u64(b, n_t);
	u64(b, n_kv);
}

static void kv_u32(img *b, const char *key, uint32_t v)
{
	str(b, key);
	u32(b, GGUF_UINT32);
	u32(b, v);
}

/* A tensor info: name, dims, ne, type, offset. */
static void tinfo(img *b, const char *name, uint32_t nd, const uint64_t *ne, uint32_t type,
		  uint64_t off)
{
	str(b, name);
	u32(b, nd);
	for (uint32_t d = 0; d < nd; d++)
		u64(b, ne[d]);
	u32(b, type);
	u64(b, off);
}

/* Opens b; want NULL: must open; else must be refused with want in the message. */
static gguf_file *expect(const img *b, const char *want, const char *what)
{
	pcg_err err = { "" };
	void *copy;
	gguf_file *f = open_copy(b->p, b->n, &err, &copy);

	if (want == NULL)
		CHECKF(f != NULL, "%s: %s", what, err.msg);
	else
		CHECKF(f == NULL && strstr(err.msg, want), "%s: want '%s', got '%s'", what, want,
		       f ? "accepted" : err.msg);
	gguf_close(&f);
	free(copy);
	return NULL;
}

/* One F32 tensor "w" of ne {n} at offset off, after the keys given. */
static void one_tensor(img *b, uint32_t type, uint64_t ne0, uint64_t off, size_t data)
{
	header(b, 3, 1, 0);
	tinfo(b, "w", 1, &ne0, type, off);
	pad(b, 32);
	for (size_t i = 0; i < data; i++)
		put(b, "\x01", 1);
}

static void test_malformed(void)
{
	img b;
	uint64_t ne[5] = { 32, 2, 1, 1, 1 };

	/* the header */
	b.n = 0;
	expect(&b, "not a GGUF file", "empty");
	header(&b, 3, 0, 0);
	b.p[3] = 'G';
	expect(&b, "not a GGUF file (no \"GGUF\" magic", "magic");
	header(&b, 1, 0, 0);
	expect(&b, "version 1 is not supported (2 and 3 are)", "version 1");
	header(&b, 4, 0, 0);
	expect(&b, "version 4 is not supported", "version 4");
	header(&b, 0x03000000, 0, 0);
	expect(&b, "(a big-endian file?)", "big-endian");
	header(&b, 2, 0, 0);
	expect(&b, NULL, "version 2, empty");
	header(&b, 3, 0, 0);
	expect(&b, NULL, "version 3, empty");
	header(&b, 3, 0, 1000);
	expect(&b, "1000 keys cannot fit in the 0 bytes that remain", "key count");
	header(&b, 3, UINT64_MAX, 0);
	expect(&b, "tensors cannot fit", "tensor count");
	b.n = 12;
	expect(&b, "truncated at byte 8: the tensor count needs 8 bytes, 4 remain", "short header");

	/* keys and values */
	header(&b, 3, 0, 1);
	u64(&b, 1000000);
	put(&b, "abcdefghijklm", 13);
	expect(&b, "truncated at byte 32: key 0 (a string of 1000000 bytes) needs 1000000 bytes, 13"
	       " remain", "key length beyond the file");
	header(&b, 3, 0, 1);
	str(&b, "s");
	u32(&b, GGUF_STRING);
	u64(&b, 50);
	put(&b, "short", 5);
	expect(&b, "key 's' (a string of 50 bytes) needs 50 bytes, 5 remain",
	       "string value beyond the file");
	header(&b, 3, 0, 1);
	str(&b, "");
	u32(&b, GGUF_UINT8);
	put(&b, "x", 1);
	expect(&b, "key 0 is empty", "empty key");
	header(&b, 3, 0, 1);
	u64(&b, 3);
	put(&b, "a\0b", 3);
	u32(&b, GGUF_UINT8);
	put(&b, "x", 1);
	expect(&b, "key 0 'a?b' contains a NUL byte", "NUL in a key");
	header(&b, 3, 0, 1);
	str(&b, "k");
	u32(&b, 13);
	u64(&b, 0);
	expect(&b, "key 'k': unknown value type 13", "value type");
	header(&b, 3, 0, 1);
	str(&b, "k");
	u32(&b, GGUF_BOOL);
	put(&b, "\x02", 1);
	expect(&b, "key 'k': bool 2 is neither 0 nor 1", "bool");
	header(&b, 3, 0, 2);
	kv_u32(&b, "a", 1);
	kv_u32(&b, "a", 2);
	expect(&b, "key 'a' appears twice", "duplicate key");
	header(&b, 3, 0, 1);
	str(&b, "k");
	u32(&b, GGUF_ARRAY);
	u32(&b, 99);
	u64(&b, 1);
	expect(&b, "key 'k': unknown array element type 99", "element type");
	header(&b, 3, 0, 1);
	str(&b, "k");
	u32(&b, GGUF_ARRAY);
	u32(&b, GGUF_UINT32);
	u64(&b, 1ull << 61);
	expect(&b, "key 'k': an array of 2305843009213693952 uint32 needs at least", "array count");
	header(&b, 3, 0, 1);
	str(&b, "k");
	u32(&b, GGUF_ARRAY);
	u32(&b, GGUF_STRING);
	u64(&b, 3);
	str(&b, "ok");
	u64(&b, 1);
	expect(&b, "truncated at byte", "array of strings cut");
	header(&b, 3, 0, 1);
	str(&b, "k");
	u32(&b, GGUF_ARRAY);
	for (int d = 0; d < 9; d++) { /* an array of an array of ... */
		u32(&b, GGUF_ARRAY);
		u64(&b, 1);
	}
	u32(&b, GGUF_UINT8);
	u64(&b, 0);
	expect(&b, "key 'k': arrays nested more than 8 deep", "nesting");
	header(&b, 3, 0, 2); /* an empty array and a nested one are fine */
	str(&b, "e");
	u32(&b, GGUF_ARRAY);
	u32(&b, GGUF_FLOAT64);
	u64(&b, 0);
	str(&b, "n");
	u32(&b, GGUF_ARRAY);
	u32(&b, GGUF_ARRAY);
	u64(&b, 2);
	for (int k = 0; k < 2; k++) {
		u32(&b, GGUF_STRING);
		u64(&b, 1);
		str(&b, k ? "y" : "x");
	}
	expect(&b, NULL, "empty and nested arrays");

	/* general.alignment */
	header(&b, 3, 0, 1);
	kv_u32(&b, "general.alignment", 48);
	expect(&b, "general.alignment: 48 is not a power of two", "alignment 48");
	header(&b, 3, 0, 1);
	kv_u32(&b, "general.alignment", 0);
	expect(&b, "general.alignment: 0 is not a power of two", "alignment 0");
	header(&b, 3, 0, 1);
	str(&b, "general.alignment");
	u32(&b, GGUF_UINT64);
	u64(&b, 64);
	expect(&b, "general.alignment: a uint64, not a uint32", "alignment type");

	/* tensors */
	one_tensor(&b, GGML_TYPE_F32, 8, 0, 32);
	expect(&b, NULL, "one tensor");
	one_tensor(&b, 4, 32, 0, 32);
	expect(&b, "tensor 'w': unknown ggml type 4", "removed type 4");
	one_tensor(&b, 31, 32, 0, 32);
	expect(&b, "tensor 'w': unknown ggml type 31", "removed type 31");
	one_tensor(&b, 1000, 32, 0, 32);
	expect(&b, "tensor 'w': unknown ggml type 1000", "type 1000");
	one_tensor(&b, GGML_TYPE_Q8_0, 33, 0, 64);
	expect(&b, "tensor 'w': ne[0] = 33 is not a multiple of Q8_0's block of 32", "block");
	one_tensor(&b, GGML_TYPE_F32, 8, 32, 32);
	expect(&b, "tensor 'w': bytes [32, 64) of the data are beyond the file (its data section"
	       " has 32 bytes", "out of the file");
	one_tensor(&b, GGML_TYPE_F32, 8, UINT64_MAX - 31, 32);
	expect(&b, "beyond the file", "offset near 2^64");
	one_tensor(&b, GGML_TYPE_F32, 4, 8, 32);
	expect(&b, "tensor 'w': offset 8 is not a multiple of the alignment 32", "misaligned");
	one_tensor(&b, GGML_TYPE_F32, 0, 0, 32);
	expect(&b, "tensor 'w': ne[0] = 0 is not positive", "ne 0");
	header(&b, 3, 1, 0);
	tinfo(&b, "w", 5, ne, GGML_TYPE_F32, 0);
	expect(&b, "tensor 'w': 5 dimensions, at most 4", "5 dims");
	header(&b, 3, 1, 0);
	tinfo(&b, "w", 0, ne, GGML_TYPE_F32, 0);
	pad(&b, 32);
	put(&b, "abcd", 4);
	expect(&b, NULL, "a scalar (0 dims)");
	{
		uint64_t big[3] = { 1ull << 32, 1ull << 32, 1ull << 32 };
		header(&b, 3, 1, 0);
		tinfo(&b, "w", 3, big, GGML_TYPE_F32, 0);
		expect(&b, "tensor 'w': shape 4294967296 x 4294967296 x 4294967296 x 1 overflows",
		       "overflow");
		big[0] = 1ull << 62;
		header(&b, 3, 1, 0);
		tinfo(&b, "w", 1, big, GGML_TYPE_F32, 0);
		expect(&b, "overflows", "bytes overflow");
	}
	header(&b, 3, 2, 0);
	tinfo(&b, "w", 1, ne, GGML_TYPE_F32, 0);
	tinfo(&b, "w", 1, ne, GGML_TYPE_F32, 128);
	pad(&b, 32);
	for (int i = 0; i < 256; i++)
		put(&b, "", 1);
	expect(&b, "tensor 'w' appears twice", "duplicate tensor");
	header(&b, 3, 2, 0);
	tinfo(&b, "a", 1, ne, GGML_TYPE_F32, 0);
	tinfo(&b, "b", 1, ne, GGML_TYPE_F32, 96);
	pad(&b, 32);
	for (int i = 0; i < 256; i++)
		put(&b, "", 1);
	expect(&b, "bytes [96, 224) overlap another tensor", "overlap");
	header(&b, 3, 1, 0);
	str(&b, "");
	u64(&b, 0);
	u64(&b, 0);
	expect(&b, "tensor 0 is empty", "empty tensor name");
	header(&b, 3, 1, 0);
	u64(&b, 5);
	put(&b, "w\n\x01\xff!", 5);
	u32(&b, 9);
	u64(&b, 0);
	u64(&b, 0);
	expect(&b, "tensor 'w?\?\?!': 9 dimensions", "name shown printable");

	/* general.alignment 64 honoured: the data starts at 64, offsets are
	 * multiples of 64 */
	header(&b, 3, 1, 1);
	kv_u32(&b, "general.alignment", 64);
	tinfo(&b, "w", 1, ne, GGML_TYPE_F32, 64);
	pad(&b, 64);
	{
		size_t start = b.n;
		pcg_err err;
		void *copy;
		gguf_file *f;
		for (int i = 0; i < 192; i++)
			put(&b, "", 1);
		b.p[start + 64] = 0x7f; /* the first byte of w */
		f = open_copy(b.p, b.n, &err, &copy);
		CHECKF(f && gguf_alignment(f) == 64 &&
		       *(const unsigned char *)gguf_tensor_at(f, 0)->data == 0x7f, "alignment 64");
		gguf_close(&f);
		free(copy);
	}
}

/* ----------------------------------------------------------- the writer */

static void pattern(unsigned char *p, size_t n, int index)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)(i * 31 + (size_t)index * 7 + (i >> 8));
}

static int fill_pattern(void *ctx, int index, void *dst, size_t nbytes, pcg_err *err)
{
	(void)ctx;
	(void)err;
	pattern(dst, nbytes, index);
	return 0;
}

static int fill_f32(void *ctx, int index, void *dst, size_t nbytes, pcg_err *err)
{
	float *v = dst;
	(void)ctx;
	(void)err;
	for (size_t i = 0; i < nbytes / 4; i++)
		v[i] = (float)i * 0.5f - (float)index;
	return 0;
}

static int fill_fail(void *ctx, int index, void *dst, size_t nbytes, pcg_err *err)
{
	(void)ctx;
	(void)index;
	(void)dst;
	(void)nbytes;
	return pcg_fail(err, "no bytes today");
}

static const struct {
	const char *name;
	pcg_dtype dtype;
	int ndim;
	int64_t ne[4];
} W_TENSORS[] = {
	{ "t.f32", PCG_F32, 2, { 8, 3 } },
	{ "t.f16", PCG_F16, 1, { 6 } },
	{ "t.bf16", PCG_BF16, 2, { 4, 2 } },
	{ "t.q8_0", PCG_Q8_0, 2, { 64, 2 } },
	{ "t.q4_0", PCG_Q4_0, 1, { 32 } },
	{ "t.q4_k", PCG_Q4_K, 1, { 256 } },
	{ "t.q5_k", PCG_Q5_K, 2, { 256, 2 } },
	{ "t.q6_k", PCG_Q6_K, 1, { 512 } },
	{ "t.4d", PCG_F32, 4, { 2, 3, 2, 2 } },
};
#define N_W (int)(sizeof W_TENSORS / sizeof W_TENSORS[0])

/* The round-trip file (tests/gguf.sh checks the same contents with gguf-py). */
static int write_roundtrip(const char *path, pcg_err *err)
{
	static const char *const strs[] = { "x", "", "yz" };
	static const int32_t i32[] = { 1, -2, 3 };
	static const float f32[] = { 0.5f, -1.5f };
	gguf_writer *w = gguf_writer_new(err);
	int rc = -1, i;

	if (w == NULL)
		return -1;
	if (gguf_set_str(w, "general.architecture", "test", err) < 0 ||
	    gguf_set_u32(w, "w.u32", 4000000000u, err) < 0 ||
	    gguf_set_i32(w, "w.i32", -7, err) < 0 || gguf_set_f32(w, "w.f32", 0.25f, err) < 0 ||
	    gguf_set_bool(w, "w.bool", 1, err) < 0 ||
	    gguf_set_str(w, "w.str", "\xc3\xbcn\xc3\xaf", err) < 0 ||
	    gguf_set_arr_str(w, "w.arr_str", strs, 3, err) < 0 ||
	    gguf_set_arr_i32(w, "w.arr_i32", i32, 3, err) < 0 ||
	    gguf_set_arr_f32(w, "w.arr_f32", f32, 2, err) < 0 ||
	    gguf_set_arr_i32(w, "w.arr_empty", NULL, 0, err) < 0)
		goto out;
	for (i = 0; i < N_W; i++)
		if (gguf_add_tensor(w, W_TENSORS[i].name, W_TENSORS[i].dtype, W_TENSORS[i].ndim,
				    W_TENSORS[i].ne, W_TENSORS[i].dtype == PCG_F32 ? fill_f32 : fill_pattern,
				    NULL, i, err) < 0)
			goto out;
	rc = gguf_writer_finish(w, path, err);
out:
	gguf_writer_free(&w);
	return rc;
}

static void test_writer(void)
{
	const char *path = tpath("rt.gguf");
	pcg_err err = { "" };
	gguf_file *f;
	gguf_type t;
	size_t n, len;
	const char *s;

	CHECKF(write_roundtrip(path, &err) == 0, "%s", err.msg);
	CHECK(check_partials(check_tmpdir()) == 0);
	f = gguf_open(path, &err);
	CHECKF(f != NULL, "%s", err.msg);
	if (f == NULL)
		return;
	check_str(f, "general.architecture", "test");
	check_int(f, "w.u32", GGUF_UINT32, 4000000000);
	check_int(f, "w.i32", GGUF_INT32, -7);
	check_float(f, "w.f32", GGUF_FLOAT32, 0.25);
	{
		int bv = 0;
		int64_t iv;
		CHECK(gguf_get_bool(f, "w.bool", &bv, &err) == 0 && bv == 1);
		CHECK(gguf_get_int(f, "w.bool", &iv, &err) < 0 && strstr(err.msg, "a bool, not an integer"));
	}
	check_str(f, "w.str", "\xc3\xbcn\xc3\xaf");
	{
		static const char *const strs[] = { "x", "", "yz" };
		static const double i32[] = { 1, -2, 3 }, f32[] = { 0.5, -1.5 };
		check_arr_str(f, "w.arr_str", strs, 3);
		check_arr_num(f, "w.arr_i32", GGUF_INT32, i32, 3);
		check_arr_num(f, "w.arr_f32", GGUF_FLOAT32, f32, 2);
	}
	CHECK(gguf_get_arr(f, "w.arr_empty", &t, &n, &err) == 0 && t == GGUF_INT32 && n == 0);
	CHECK(gguf_arr_str(f, "w.arr_str", 1, &s, &len, &err) == 0 && len == 0);
	CHECK(gguf_version(f) == 3 && gguf_alignment(f) == 32 && gguf_n_tensors(f) == N_W);
	for (int i = 0; i < N_W && i < gguf_n_tensors(f); i++) {
		const gguf_tensor *tt = gguf_tensor_at(f, i);
		int64_t numel = 1;
		unsigned char *want;
		for (int d = 0; d < 4; d++) {
			int64_t e = d < W_TENSORS[i].ndim ? W_TENSORS[i].ne[d] : 1;
			CHECKF(tt->ne[d] == e, "%s: ne[%d]", tt->name, d);
			numel *= e;
		}
		CHECK(!strcmp(tt->name, W_TENSORS[i].name) && tt->dtype == W_TENSORS[i].dtype &&
		      tt->ndim == W_TENSORS[i].ndim);
		CHECK(tt->nbytes == pcg_dtype_row_bytes(tt->dtype, numel));
		CHECKF((uintptr_t)tt->data % 32 == 0, "%s: not aligned", tt->name);
		want = malloc(tt->nbytes);
		if (tt->dtype == PCG_F32)
			fill_f32(NULL, i, want, tt->nbytes, &err);
		else
			pattern(want, tt->nbytes, i);
		CHECKF(!memcmp(want, tt->data, tt->nbytes), "%s: bytes differ", tt->name);
		free(want);
	}
	gguf_close(&f);
}

/* For the bool getter: check_int above must fail on a bool; count it. */
static void test_writer_errors(void)
{
	const char *path = tpath("bad.gguf");
	int64_t ne[2] = { 32, 2 }, bad_ne[2] = { 33, 1 }, zero[1] = { 0 };
	pcg_err err = { "" };
	gguf_writer *w = gguf_writer_new(&err);
	struct stat st;

	CHECK(w != NULL);
	if (w == NULL)
		return;
	unlink(path);
	CHECK(gguf_set_u32(w, "k", 1, &err) == 0);
	CHECK(gguf_set_str(w, "k", "again", &err) < 0 && strstr(err.msg, "key 'k' set twice"));
	CHECK(gguf_set_f32(w, "", 1, &err) < 0 && strstr(err.msg, "empty key"));
	CHECK(gguf_set_u32(w, "general.alignment", 48, &err) < 0 &&
	      strstr(err.msg, "48 is not a power of two"));
	CHECK(gguf_add_tensor(w, "a", PCG_Q8_0, 2, ne, fill_pattern, NULL, 0, &err) == 0);
	CHECK(gguf_add_tensor(w, "a", PCG_F32, 2, ne, fill_pattern, NULL, 0, &err) < 0 &&
	      strstr(err.msg, "tensor 'a' added twice"));
	CHECK(gguf_add_tensor(w, "b", PCG_Q8_0, 2, bad_ne, fill_pattern, NULL, 0, &err) < 0 &&
	      strstr(err.msg, "ne[0] = 33 is not a multiple of Q8_0's block of 32"));
	CHECK(gguf_add_tensor(w, "b", PCG_DTYPE_OTHER, 2, ne, fill_pattern, NULL, 0, &err) < 0 &&
	      strstr(err.msg, "cannot be written"));
	CHECK(gguf_add_tensor(w, "b", PCG_F32, 5, ne, fill_pattern, NULL, 0, &err) < 0 &&
	      strstr(err.msg, "5 dimensions"));
	CHECK(gguf_add_tensor(w, "b", PCG_F32, 1, zero, fill_pattern, NULL, 0, &err) < 0 &&
	      strstr(err.msg, "ne[0] = 0 is not positive"));
	CHECK(gguf_add_tensor(w, "c", PCG_F32, 1, ne, fill_fail, NULL, 1, &err) == 0);
	/* a failing fill: no file, no temporary left */
	CHECK(gguf_writer_finish(w, path, &err) < 0 && strstr(err.msg, "tensor 'c'") &&
	      strstr(err.msg, "no bytes today"));
	CHECK(stat(path, &st) < 0 && check_partials(check_tmpdir()) == 0);
	CHECK(gguf_writer_finish(w, tpath("no-such-dir/x.gguf"), &err) < 0 &&
	      strstr(err.msg, "cannot create"));
	gguf_writer_free(&w);
	CHECK(w == NULL);
	gguf_writer_free(&w);

	/* general.alignment 128 set by the caller lays the data out on it */
	w = gguf_writer_new(&err);
	CHECK(gguf_set_u32(w, "general.alignment", 128, &err) == 0);
	CHECK(gguf_add_tensor(w, "a", PCG_F32, 1, (int64_t[]){ 3 }, fill_f32, NULL, 0, &err) == 0);
	CHECK(gguf_add_tensor(w, "b", PCG_F32, 1, (int64_t[]){ 5 }, fill_f32, NULL, 1, &err) == 0);
	CHECKF(gguf_writer_finish(w, path, &err) == 0, "%s", err.msg);
	gguf_writer_free(&w);
	gguf_file *f = gguf_open(path, &err);
	CHECKF(f != NULL, "%s", err.msg);
	if (f) {
		const gguf_tensor *a = gguf_tensor_at(f, 0), *b = gguf_tensor_at(f, 1);
		CHECK(gguf_alignment(f) == 128 && (uintptr_t)a->data % 128 == 0 &&
		      (const char *)b->data - (const char *)a->data == 128);
		CHECK(((const float *)b->data)[4] == 2.0f - 1.0f);
	}
	gguf_close(&f);
}

/* ------------------------------------------------------------------ fuzz */

/* Mutates bytes of the header region of valid files (lengths, counts,
 * types, offsets); whatever opens must have every tensor readable. */
static void test_fuzz(void)
{
	static const char *const files[] = { FIX "/tiny-llama.gguf", FIX "/types.gguf" };
	static const size_t header_end[] = { 736, 1408 };
	uint64_t seed = 20240612;
	int opened = 0, iters = 0;
	unsigned sum = 0;

	for (int fi = 0; fi < 2; fi++) {
		size_t n;
		unsigned char *good = read_bytes(files[fi], &n), *buf = malloc(n);
		CHECK(good != NULL && n > header_end[fi]);
		for (int iter = 0; good && iter < 3000; iter++) {
			pcg_err err;
			int k = 1 + (int)(fuzz_next(&seed) % 4);
			memcpy(buf, good, n);
			while (k--) {
				size_t at = fuzz_next(&seed) % header_end[fi];
				uint64_t r = fuzz_next(&seed);
				/* a random byte, or a byte set to 0, 0xff or a small value */
				buf[at] = r % 4 == 0 ? 0 : r % 4 == 1 ? 0xff : (unsigned char)(r >> 8);
			}
			size_t len = fuzz_next(&seed) % 8 == 0 ? fuzz_next(&seed) % n : n;
			gguf_file *f = gguf_from_memory(buf, len, &err);
			iters++;
			if (f == NULL)
				continue;
			opened++;
			for (int i = 0; i < gguf_n_tensors(f); i++) {
				const gguf_tensor *t = gguf_tensor_at(f, i);
				const unsigned char *p = t->data;
				CHECK(p >= buf && p + t->nbytes <= buf + len);
				for (size_t j = 0; j < t->nbytes; j++)
					sum += p[j];
			}
			for (int i = 0; i < gguf_n_kv(f); i++) {
				gguf_type et;
				size_t m, sl;
				const char *s;
				double v;
				const char *key = gguf_key(f, i);
				if (gguf_get_arr(f, key, &et, &m, &err) == 0 && m > 0) {
					if (gguf_arr_str(f, key, m - 1, &s, &sl, &err) == 0 && sl > 0)
						sum += (unsigned char)s[sl - 1];
					if (gguf_arr_num(f, key, m - 1, &v, &err) == 0)
						sum += v > 0;
				}
			}
			gguf_close(&f);
		}
		free(good);
		free(buf);
	}
	printf("fuzz: %d mutated files, %d opened and read whole (sum %u)\n", iters, opened, sum);
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "--write")) {
		pcg_err err;
		if (write_roundtrip(argv[2], &err) < 0) {
			fprintf(stderr, "test_gguf: %s\n", err.msg);
			return 1;
		}
		return 0;
	}
	test_types();
	test_config();
	test_config_errors();
	test_prefixes(FIX "/tiny-llama.gguf", 5088);
	test_prefixes(FIX "/types.gguf", 21152); /* gguf-py pads after the last tensor */
	test_malformed();
	test_writer();
	test_writer_errors();
	test_fuzz();
	return check_done("test_gguf");
}
