/* test_tokenizer_gguf.c: tok_from_gguf against Hugging Face's ids.
 *
 * mkmodel-tokenizer.gguf was written by gguf-py (tests/ref/
 * make_gguf_fixtures.py) the way llama.cpp's converter writes a byte-level
 * BPE. The Llama 3 GGUF (8 MB) is not committed: this test converts the
 * committed tokenizer.json the same way with gguf_writer, checks that the
 * result is the very file gguf-py wrote (size and FNV-1a in
 * tests/fixtures/gguf/tokenizers.json; for mkmodel, byte for byte), then
 * requires tok_from_gguf to give exactly HF's ids on the goldens of
 * test_tokenizer.c (special tokens, non-ASCII text, decoding). Then
 * metadata the converter never writes must be refused, naming the key.
 */
#include "check.h"
#include "fixture.h"
#include "gguf.h"
#include "tokenizer.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOKFIX "tests/fixtures/tokenizer"
#define GGUFFIX "tests/fixtures/gguf"

static char *read_pipe(const char *cmd, size_t *n)
{
	FILE *p = popen(cmd, "r");
	size_t cap = 1 << 22;
	char *buf = malloc(cap);

	*n = 0;
	while (p && buf) {
		*n += fread(buf + *n, 1, cap - *n, p);
		if (*n < cap)
			break;
		char *q = realloc(buf, cap *= 2);
		if (q == NULL)
			free(buf);
		buf = q;
	}
	if (p == NULL || pclose(p) != 0) {
		free(buf);
		return NULL;
	}
	return buf;
}

static uint64_t fnv1a64(const unsigned char *p, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

static int looks_special(const char *s)
{
	size_t n = strlen(s);
	return (n >= 4 && !strncmp(s, "<|", 2) && !strcmp(s + n - 2, "|>")) || !strcmp(s, "<pad>") ||
	       !strcmp(s, "<mask>");
}

/* The converter's GGUF of a tokenizer.json (tests/ref/make_gguf_fixtures.py:
 * make_tokenizer), written to path with gguf_writer. */
static int convert(const json_t *tj, const char *path, int bos, int eos)
{
	const json_t *vocab = json_object_get(json_object_get(tj, "model"), "vocab");
	const json_t *merges = json_object_get(json_object_get(tj, "model"), "merges");
	const json_t *added = json_object_get(tj, "added_tokens"), *v;
	const char *key, **tok = NULL, **mer = NULL;
	char *pads = NULL, **joined = NULL;
	int32_t *type = NULL;
	size_t n = 0, i;
	pcg_err err = { "" };
	gguf_writer *w = NULL;
	int rc = -1;

	json_object_foreach((json_t *)vocab, key, v)
		if ((size_t)json_integer_value(v) + 1 > n)
			n = (size_t)json_integer_value(v) + 1;
	json_array_foreach(added, i, v)
		if ((size_t)json_integer_value(json_object_get(v, "id")) + 1 > n)
			n = (size_t)json_integer_value(json_object_get(v, "id")) + 1;
	tok = calloc(n, sizeof *tok);
	type = calloc(n, sizeof *type);
	pads = calloc(n, 32);
	mer = calloc(json_array_size(merges) + 1, sizeof *mer);
	joined = calloc(json_array_size(merges) + 1, sizeof *joined);
	json_object_foreach((json_t *)vocab, key, v) {
		tok[json_integer_value(v)] = key;
		type[json_integer_value(v)] = 1; /* NORMAL */
	}
	json_array_foreach(added, i, v) {
		size_t id = (size_t)json_integer_value(json_object_get(v, "id"));
		tok[id] = json_string_value(json_object_get(v, "content"));
		type[id] = json_is_true(json_object_get(v, "special")) || looks_special(tok[id])
			? 3 : 4; /* CONTROL : USER_DEFINED */
	}
	for (i = 0; i < n; i++) {
		if (tok[i] == NULL) {
			snprintf(pads + 32 * i, 32, "[PAD%zu]", i);
			tok[i] = pads + 32 * i;
			type[i] = 5; /* UNUSED */
		}
	}
	/* gguf.SpecialVocab joins [a, b] pairs with a space */
	json_array_foreach(merges, i, v) {
		if (json_is_string(v)) {
			mer[i] = json_string_value(v);
		} else if (asprintf(&joined[i], "%s %s", json_string_value(json_array_get(v, 0)),
				    json_string_value(json_array_get(v, 1))) > 0) {
			mer[i] = joined[i];
		}
	}
	w = gguf_writer_new(&err);
	if (w && gguf_set_str(w, "general.architecture", "llama", &err) == 0 &&
	    gguf_set_str(w, "tokenizer.ggml.model", "gpt2", &err) == 0 &&
	    gguf_set_str(w, "tokenizer.ggml.pre", "llama-bpe", &err) == 0 &&
	    gguf_set_arr_str(w, "tokenizer.ggml.tokens", tok, n, &err) == 0 &&
	    gguf_set_arr_i32(w, "tokenizer.ggml.token_type", type, n, &err) == 0 &&
	    gguf_set_arr_str(w, "tokenizer.ggml.merges", mer, json_array_size(merges), &err) == 0 &&
	    gguf_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)bos, &err) == 0 &&
	    gguf_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos, &err) == 0 &&
	    gguf_writer_finish(w, path, &err) == 0)
		rc = 0;
	CHECKF(rc == 0, "convert to %s: %s", path, err.msg);
	gguf_writer_free(&w);
	for (i = 0; i < json_array_size(merges); i++)
		free(joined[i]);
	free(joined);
	free(mer);
	free(pads);
	free(type);
	free(tok);
	return rc;
}

/* The file at path has the size and FNV-1a that gguf-py's file had. */
static void check_sum(const char *path, const char *name)
{
	json_t *sums = load_json(GGUFFIX "/tokenizers.json"), *s = json_object_get(sums, name);
	size_t n;
	unsigned char *b = read_bytes(path, &n);
	char hex[17];

	CHECKF(b != NULL && s != NULL, "%s: cannot read, or no sum for %s", path, name);
	if (b && s) {
		snprintf(hex, sizeof hex, "%016llx", (unsigned long long)fnv1a64(b, n));
		CHECKF(n == (size_t)json_integer_value(json_object_get(s, "bytes")) &&
		       !strcmp(hex, json_string_value(json_object_get(s, "fnv1a64"))),
		       "%s: %zu bytes, fnv1a64 %s: not the file gguf-py wrote", name, n, hex);
	}
	free(b);
	json_decref(sums);
}

static tokenizer *from_gguf(const char *path)
{
	pcg_err err = { "" };
	gguf_file *f = gguf_open(path, &err);
	tokenizer *t = NULL;

	CHECKF(f != NULL, "%s", err.msg);
	if (f) {
		t = tok_from_gguf(f, &err);
		CHECKF(t != NULL, "%s: %s", path, err.msg);
	}
	gguf_close(&f); /* the tokenizer keeps nothing of the file */
	return t;
}

static int *json_ids(const json_t *a, size_t *n)
{
	*n = json_array_size(a);
	int *v = malloc((*n ? *n : 1) * sizeof *v);
	for (size_t i = 0; i < *n; i++)
		v[i] = (int)json_integer_value(json_array_get(a, i));
	return v;
}

static int same_str(const tokenizer *t, const int *ids, size_t n, int skip, const json_t *want)
{
	pcg_err err = { "" };
	size_t len = 0;
	char *s = tok_decode(t, ids, n, skip, &len, &err);
	int same = s && len == json_string_length(want) && !memcmp(s, json_string_value(want), len);

	free(s);
	return same;
}

/* Every case of a goldens file: HF's ids, and its decodings (with
 * skip_special only when the GGUF's special tokens are HF's). */
static void check_goldens(const char *name, const tokenizer *t, const char *path, int skip_too)
{
	json_t *g = load_json(path);
	const json_t *cases = json_object_get(g, "cases"), *dc = json_object_get(g, "decode_cases");
	size_t bad = 0, k, special = 0, nonascii = 0;

	CHECKF(json_array_size(cases) > 100, "%s: no cases", name);
	for (k = 0; k < json_array_size(cases); k++) {
		const json_t *c = json_array_get(cases, k), *text = json_object_get(c, "text");
		const char *s = json_string_value(text);
		size_t len = json_string_length(text), nw, n = 0;
		int *want = json_ids(json_object_get(c, "ids"), &nw), *ids = NULL;
		pcg_err err = { "" };
		int rc = tok_encode(t, s, len, &ids, &n, &err);
		int same = rc == 0 && n == nw && (n == 0 || !memcmp(ids, want, n * sizeof *ids));

		CHECKF(same, "%s: case %zu: %s", name, k, rc ? err.msg : "ids differ from HF");
		same = same && same_str(t, want, nw, 0, json_object_get(c, "decoded")) &&
		       (!skip_too || same_str(t, want, nw, 1, json_object_get(c, "decoded_skip")));
		CHECKF(same, "%s: case %zu: decoding differs from HF", name, k);
		bad += !same;
		for (size_t i = 0; i < nw; i++)
			if (tok_is_special(t, want[i])) {
				special++;
				break;
			}
		for (size_t i = 0; i < len; i++)
			if ((unsigned char)s[i] >= 0x80) {
				nonascii++;
				break;
			}
		free(ids);
		free(want);
	}
	for (k = 0; k < json_array_size(dc); k++) {
		const json_t *c = json_array_get(dc, k);
		size_t n;
		int *ids = json_ids(json_object_get(c, "ids"), &n);
		int same = same_str(t, ids, n, 0, json_object_get(c, "text")) &&
			   (!skip_too || same_str(t, ids, n, 1, json_object_get(c, "text_skip")));
		CHECKF(same, "%s: decode case %zu differs from HF", name, k);
		bad += !same;
		free(ids);
	}
	/* the goldens do exercise what matters here */
	CHECKF(special >= 5 && nonascii >= 20, "%s: %zu cases with special tokens, %zu non-ASCII",
	       name, special, nonascii);
	printf("%s: %zu of %zu cases as HF (%zu with special tokens, %zu non-ASCII)\n", name,
	       json_array_size(cases) + json_array_size(dc) - bad,
	       json_array_size(cases) + json_array_size(dc), special, nonascii);
	json_decref(g);
}

static char tmp_path[4096];

static const char *tpath(const char *name)
{
	snprintf(tmp_path, sizeof tmp_path, "%s/%s", check_tmpdir(), name);
	return tmp_path;
}

static void test_mkmodel(void)
{
	json_t *tj = load_json(TOKFIX "/mkmodel-tokenizer.json");
	size_t a, b;
	unsigned char *mine, *theirs;
	tokenizer *t;
	int id;

	/* gguf_writer's conversion is gguf-py's file, byte for byte */
	if (convert(tj, tpath("mkmodel.gguf"), 496, 497) == 0) {
		mine = read_bytes(tpath("mkmodel.gguf"), &a);
		theirs = read_bytes(GGUFFIX "/mkmodel-tokenizer.gguf", &b);
		CHECKF(mine && theirs && a == b && !memcmp(mine, theirs, a),
		       "mkmodel: gguf_writer wrote %zu bytes, not gguf-py's %zu", a, b);
		free(mine);
		free(theirs);
	}
	json_decref(tj);
	check_sum(GGUFFIX "/mkmodel-tokenizer.gguf", "mkmodel-tokenizer.gguf");

	t = from_gguf(GGUFFIX "/mkmodel-tokenizer.gguf");
	if (t == NULL)
		return;
	CHECK(tok_vocab_size(t) == 1544);
	CHECK(tok_token_id(t, "<|begin_of_text|>", 17) == 496 && tok_is_special(t, 496));
	/* the converter made LLaSA's non-special <|s_N|> control tokens */
	id = tok_token_id(t, "<|s_0|>", 7);
	CHECK(id == 520 && tok_is_special(t, id));
	check_goldens("mkmodel", t, TOKFIX "/mkmodel.json", 0);
	tok_free(&t);
}

static void test_llama3(void)
{
	size_t n;
	char *text = read_pipe("gzip -dc " TOKFIX "/llama3-tokenizer.json.gz", &n);
	json_error_t je;
	json_t *tj = text ? json_loadb(text, n, 0, &je) : NULL;
	tokenizer *t;

	free(text);
	CHECKF(tj != NULL, "cannot read " TOKFIX "/llama3-tokenizer.json.gz");
	if (tj == NULL || convert(tj, tpath("llama3.gguf"), 128000, 128001) < 0) {
		json_decref(tj);
		return;
	}
	json_decref(tj);
	check_sum(tpath("llama3.gguf"), "llama3-tokenizer.gguf");
	t = from_gguf(tpath("llama3.gguf"));
	if (t == NULL)
		return;
	CHECK(tok_vocab_size(t) == 128256);
	CHECK(tok_token_id(t, "<|begin_of_text|>", 17) == 128000 && tok_is_special(t, 128000));
	CHECK(tok_token_id(t, "<|eot_id|>", 10) == 128009 && tok_is_special(t, 128009));
	CHECK(!tok_is_special(t, 1000));
	check_goldens("llama3", t, TOKFIX "/llama3.json", 1);
	tok_free(&t);
}

/* A small tokenizer in a GGUF with one thing changed. */
typedef struct variant {
	const char *model, *pre;    /* NULL: absent */
	int n_types;                /* token_type entries; -1: absent */
	int bad_type;               /* a type for token 2, or 0 */
	const char *token3;         /* replaces token 3 */
	const char *merge0;         /* replaces merge 0 */
	const char *want;           /* NULL: accepted */
} variant;

static void test_refused(void)
{
	static const variant vs[] = {
		{ "gpt2", "llama-bpe", 6, 0, NULL, NULL, NULL },
		{ "gpt2", "llama3", -1, 0, NULL, NULL, NULL }, /* no types: all normal */
		{ "llama", "llama-bpe", 6, 0, NULL, NULL,
		  "tokenizer.ggml.model 'llama' is not supported (only gpt2" },
		{ NULL, "llama-bpe", 6, 0, NULL, NULL, "tokenizer.ggml.model: missing" },
		{ "gpt2", "qwen2", 6, 0, NULL, NULL,
		  "tokenizer.ggml.pre 'qwen2' is not supported (only llama-bpe" },
		{ "gpt2", NULL, 6, 0, NULL, NULL, "tokenizer.ggml.pre: missing" },
		{ "gpt2", "llama-bpe", 5, 0, NULL, NULL,
		  "tokenizer.ggml.token_type: 5 types for 6 tokens" },
		{ "gpt2", "llama-bpe", 6, 9, NULL, NULL,
		  "tokenizer.ggml.token_type[2]: 9 is not a token type" },
		{ "gpt2", "llama-bpe", 6, 0, "\xc3", NULL,
		  "tokenizer.ggml.tokens[3]: invalid UTF-8 at byte 0" },
		{ "gpt2", "llama-bpe", 6, 0, "a", NULL, "vocab: 'a' appears twice" },
		{ "gpt2", "llama-bpe", 6, 0, NULL, "a c", "merges[0]: 'ac' is not in the vocab" },
		{ "gpt2", "llama-bpe", 6, 0, NULL, "ab", "merges[0]: 'ab' is not two tokens" },
		{ "gpt2", "llama-bpe", 6, 4, NULL, NULL, NULL }, /* c is user-defined */
	};
	for (size_t k = 0; k < sizeof vs / sizeof vs[0]; k++) {
		const variant *v = &vs[k];
		const char *tokens[6] = { "a", "b", "c", "ab", "<|x|>", "\xc4\xa0" };
		const char *merges[1] = { "a b" };
		int32_t types[6] = { 1, 1, 1, 1, 3, 1 };
		pcg_err err = { "" };
		gguf_writer *w = gguf_writer_new(&err);
		gguf_file *f;
		tokenizer *t = NULL;
		int ok = w != NULL;

		if (v->token3)
			tokens[3] = v->token3;
		if (v->merge0)
			merges[0] = v->merge0;
		if (v->bad_type)
			types[2] = v->bad_type;
		ok = ok && (!v->model || gguf_set_str(w, "tokenizer.ggml.model", v->model, &err) == 0);
		ok = ok && (!v->pre || gguf_set_str(w, "tokenizer.ggml.pre", v->pre, &err) == 0);
		ok = ok && gguf_set_arr_str(w, "tokenizer.ggml.tokens", tokens, 6, &err) == 0;
		ok = ok && (v->n_types < 0 ||
			    gguf_set_arr_i32(w, "tokenizer.ggml.token_type", types,
					     (size_t)v->n_types, &err) == 0);
		ok = ok && gguf_set_arr_str(w, "tokenizer.ggml.merges", merges, 1, &err) == 0;
		ok = ok && gguf_writer_finish(w, tpath("small.gguf"), &err) == 0;
		gguf_writer_free(&w);
		CHECKF(ok, "variant %zu: %s", k, err.msg);
		f = ok ? gguf_open(tpath("small.gguf"), &err) : NULL;
		CHECKF(f != NULL, "variant %zu: %s", k, err.msg);
		if (f == NULL)
			continue;
		err.msg[0] = '\0';
		t = tok_from_gguf(f, &err);
		if (v->want == NULL) {
			CHECKF(t != NULL, "variant %zu: %s", k, err.msg);
		} else {
			CHECKF(t == NULL && strstr(err.msg, v->want), "variant %zu: want '%s', got '%s'",
			       k, v->want, t ? "accepted" : err.msg);
		}
		if (t != NULL && v->n_types > 0) {
			int *ids = NULL;
			size_t n = 0;
			/* "ab" is one token, the control token is matched whole */
			CHECK(tok_encode(t, "ab<|x|>c", 8, &ids, &n, &err) == 0 && n == 3 &&
			      ids[0] == 3 && ids[1] == 4 && ids[2] == 2);
			CHECK(tok_is_special(t, 4) && !tok_is_special(t, 3));
			free(ids);
		}
		tok_free(&t);
		gguf_close(&f);
	}
}

int main(void)
{
	test_mkmodel();
	test_llama3();
	test_refused();
	return check_done("test_tokenizer_gguf");
}
