/* test_tokenizer.c: the text front end against Hugging Face on the goldens
 * of tests/ref/make_tokenizer_fixtures.py: the BPE tokenizer (Llama 3, the
 * LLaSA layout built here with tok_add_tokens, pcg-mkmodel's tokenizer and
 * variants using the other options) against tokenizers, and the LLaSA prompt
 * against transformers' apply_chat_template; then invalid UTF-8, malformed
 * and unsupported tokenizer.json files (refused with a message naming the
 * fault) and a seeded mutation fuzz. Ids must match exactly: there is no
 * tolerance in tokenization.
 */
#include "check.h"
#include "fixture.h"
#include "llasa.h"
#include "tokenizer.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIXTURES "tests/fixtures/tokenizer"

static const char *LLASA_TAGS[8] = {
	"<|TEXT_GENERATION_START|>", "<|TEXT_GENERATION_END|>",
	"<|TEXT_UNDERSTANDING_START|>", "<|TEXT_UNDERSTANDING_END|>",
	"<|SPEECH_GENERATION_START|>", "<|SPEECH_GENERATION_END|>",
	"<|SPEECH_UNDERSTANDING_START|>", "<|SPEECH_UNDERSTANDING_END|>",
};

static char *read_all(FILE *f, size_t *n)
{
	size_t cap = 1 << 20;
	char *buf = malloc(cap);

	*n = 0;
	while (buf) {
		*n += fread(buf + *n, 1, cap - *n, f);
		if (*n < cap)
			break;
		char *p = realloc(buf, cap *= 2);
		if (p == NULL)
			free(buf);
		buf = p;
	}
	return buf;
}

/* The committed Llama 3 tokenizer.json.gz, decompressed by gzip(1). */
static tokenizer *load_llama3(void)
{
	pcg_err err = { "" };
	FILE *p = popen("gzip -dc " FIXTURES "/llama3-tokenizer.json.gz", "r");
	size_t n;
	char *json = p ? read_all(p, &n) : NULL;
	tokenizer *t = NULL;

	if (p == NULL || pclose(p) != 0 || json == NULL) {
		fprintf(stderr, "cannot decompress " FIXTURES "/llama3-tokenizer.json.gz\n");
		exit(1);
	}
	t = tok_parse(json, n, &err);
	CHECKF(t != NULL, "llama3: %s", err.msg);
	free(json);
	if (t == NULL)
		exit(1);
	return t;
}

/* LLaSA's vocabulary: Llama 3 + add_tokens(8 tags + 65,536 <|s_N|>). */
static void add_llasa(tokenizer *t, int n_speech)
{
	const char **names = malloc((8 + (size_t)n_speech) * sizeof *names);
	char *buf = malloc((size_t)n_speech * 16);
	pcg_err err = { "" };

	for (int i = 0; i < 8; i++)
		names[i] = LLASA_TAGS[i];
	for (int i = 0; i < n_speech; i++) {
		snprintf(buf + 16 * i, 16, "<|s_%d|>", i);
		names[8 + i] = buf + 16 * i;
	}
	int added = tok_add_tokens(t, names, 8 + (size_t)n_speech, &err);
	CHECKF(added == 8 + n_speech, "add_tokens: %d: %s", added, err.msg);
	free(names);
	free(buf);
}

static int *json_ids(const json_t *a, size_t *n)
{
	*n = json_array_size(a);
	int *v = malloc((*n ? *n : 1) * sizeof *v);
	for (size_t i = 0; i < *n; i++)
		v[i] = (int)json_integer_value(json_array_get(a, i));
	return v;
}

static int same_ids(const int *a, size_t na, const int *b, size_t nb, size_t *at)
{
	size_t i = 0;
	while (i < na && i < nb && a[i] == b[i])
		i++;
	*at = i;
	return na == nb && i == na;
}

/* Decodes ids both ways and compares with HF's strings. */
static int check_decode(const char *name, size_t k, const tokenizer *t, const int *ids, size_t n,
			const json_t *want, const json_t *want_skip)
{
	int ok = 1;
	for (int skip = 0; skip < 2; skip++) {
		const json_t *w = skip ? want_skip : want;
		pcg_err err = { "" };
		size_t len = 0;
		char *s = tok_decode(t, ids, n, skip, &len, &err);
		int same = s && len == json_string_length(w) && !memcmp(s, json_string_value(w), len);
		CHECKF(same, "%s: decode case %zu (skip_special %d): %s", name, k, skip,
		       s ? "differs from HF" : err.msg);
		ok &= same;
		free(s);
	}
	return ok;
}

/* Every case of a goldens object: encode, decode, decode with skip. */
static void check_goldens(const char *name, const tokenizer *t, const json_t *g)
{
	const json_t *cases = json_object_get(g, "cases"), *dcases = json_object_get(g, "decode_cases");
	size_t bad = 0, total = 0;

	CHECKF(json_array_size(cases) > 0 && json_array_size(dcases) > 0, "%s: no cases", name);
	for (size_t k = 0; k < json_array_size(cases); k++) {
		const json_t *c = json_array_get(cases, k), *text = json_object_get(c, "text");
		pcg_err err = { "" };
		size_t n_want, n = 0, at = 0;
		int *want = json_ids(json_object_get(c, "ids"), &n_want), *ids = NULL;
		int rc = tok_encode(t, json_string_value(text), json_string_length(text), &ids, &n, &err);
		int same = rc == 0 && same_ids(ids, n, want, n_want, &at);
		CHECKF(same, "%s: case %zu (%zu bytes): %s at id %zu: got %d, HF %d", name, k,
		       json_string_length(text), rc ? err.msg : "ids differ", at,
		       rc == 0 && at < n ? ids[at] : -1, at < n_want ? want[at] : -1);
		if (!same || !check_decode(name, k, t, want, n_want, json_object_get(c, "decoded"),
					   json_object_get(c, "decoded_skip")))
			bad++;
		total++;
		free(ids);
		free(want);
	}
	for (size_t k = 0; k < json_array_size(dcases); k++) {
		const json_t *c = json_array_get(dcases, k);
		size_t n;
		int *ids = json_ids(json_object_get(c, "ids"), &n);
		bad += !check_decode(name, k, t, ids, n, json_object_get(c, "text"),
				     json_object_get(c, "text_skip"));
		total++;
		free(ids);
	}
	printf("%s: %zu of %zu cases as HF\n", name, total - bad, total);
}

/* The prompts of a goldens object, and the vocabulary lookups. */
static void check_prompts(const char *name, const tokenizer *t, const json_t *g, int first,
			  int count, int end)
{
	const json_t *ps = json_object_get(g, "prompts");
	llasa_vocab v;
	pcg_err err = { "" };
	size_t good = 0;

	CHECKF(llasa_vocab_init(t, &v, &err) == 0, "%s: %s", name, err.msg);
	CHECKF(v.speech_first == first && v.speech_count == count && v.end_id == end,
	       "%s: speech %d+%d, end %d", name, v.speech_first, v.speech_count, v.end_id);
	CHECK(llasa_code_to_id(&v, 0) == first && llasa_code_to_id(&v, count - 1) == first + count - 1);
	CHECK(llasa_code_to_id(&v, count) == -1 && llasa_code_to_id(&v, -1) == -1);
	CHECK(llasa_id_to_code(&v, first + 5) == 5 && llasa_id_to_code(&v, end) == -1);
	CHECK(llasa_id_to_code(&v, first + count) == -1 && llasa_id_to_code(&v, first - 1) == -1);
	CHECKF(json_array_size(ps) >= 8, "%s: no prompts", name);
	for (size_t k = 0; k < json_array_size(ps); k++) {
		const json_t *c = json_array_get(ps, k);
		size_t nc, nw, n = 0, at = 0;
		int *codes = json_ids(json_object_get(c, "codes"), &nc);
		int *want = json_ids(json_object_get(c, "ids"), &nw), *ids = NULL;
		llasa_prompt p = {
			json_string_value(json_object_get(c, "text")),
			json_string_value(json_object_get(c, "prompt_text")), codes, nc,
			json_string_value(json_object_get(c, "date")), /* null: the default */
		};
		int rc = llasa_prompt_ids(t, &v, &p, &ids, &n, &err);
		int same = rc == 0 && same_ids(ids, n, want, nw, &at);
		CHECKF(same, "%s: prompt %zu: %s at %zu", name, k, rc ? err.msg : "ids differ", at);
		good += same;
		/* A cloning prompt ends with the codes' ids. */
		for (size_t i = 0; same && i < nc; i++)
			CHECK(ids[n - nc + i] == llasa_code_to_id(&v, codes[i]));
		free(codes);
		free(want);
		free(ids);
	}
	printf("%s: %zu of %zu prompts as transformers\n", name, good, json_array_size(ps));

	/* Bad input names the field, the offset or the code. */
	int codes[2] = { 3, count };
	int *ids = NULL;
	size_t n;
	llasa_prompt p = { "fine", NULL, codes, 2, NULL };
	CHECK(llasa_prompt_ids(t, &v, &p, &ids, &n, &err) < 0 && strstr(err.msg, "prompt code") &&
	      ids == NULL);
	p = (llasa_prompt){ "ab\xed\xa0\x80", NULL, NULL, 0, NULL };
	CHECK(llasa_prompt_ids(t, &v, &p, &ids, &n, &err) < 0 &&
	      strstr(err.msg, "text: invalid UTF-8 at byte 2: surrogate"));
	p = (llasa_prompt){ "ok", "\xc0\xaf", NULL, 0, NULL };
	CHECK(llasa_prompt_ids(t, &v, &p, &ids, &n, &err) < 0 &&
	      strstr(err.msg, "prompt text: invalid UTF-8 at byte 0: overlong"));
	p = (llasa_prompt){ NULL, NULL, NULL, 0, NULL };
	CHECK(llasa_prompt_ids(t, &v, &p, &ids, &n, &err) < 0 && strstr(err.msg, "text: missing"));
}

static void test_parity(void)
{
	tokenizer *t = load_llama3(), *mk;
	json_t *g = load_json(FIXTURES "/llama3.json");
	pcg_err err = { "" };

	CHECK(tok_vocab_size(t) == 128256);
	CHECK(tok_token_id(t, "<|begin_of_text|>", 17) == 128000 && tok_is_special(t, 128000));
	check_goldens("llama3", t, g);
	json_decref(g);

	add_llasa(t, 65536);
	CHECK(tok_vocab_size(t) == 193800);
	CHECK(tok_token_id(t, "<|SPEECH_GENERATION_END|>", 25) == 128261);
	CHECK(tok_token_id(t, "<|s_0|>", 7) == 128264 && !tok_is_special(t, 128264));
	g = load_json(FIXTURES "/llasa.json");
	check_goldens("llasa", t, g);
	check_prompts("llasa", t, g, 128264, 65536, 128261);
	json_decref(g);
	tok_free(&t);
	CHECK(t == NULL);

	/* Llama 3 alone is not a LLaSA vocabulary; nor is one with a hole. */
	llasa_vocab v;
	t = load_llama3();
	CHECK(llasa_vocab_init(t, &v, &err) < 0 && strstr(err.msg, "no <|TEXT_UNDERSTANDING_START|>"));
	add_llasa(t, 3);
	const char *late[] = { "<|s_4|>", "<|s_3|>" };
	CHECK(tok_add_tokens(t, late, 2, &err) == 2);
	CHECK(llasa_vocab_init(t, &v, &err) < 0 &&
	      strstr(err.msg, "<|s_3|> has id 128268, not 128267"));
	tok_free(&t);

	mk = tok_load(FIXTURES "/mkmodel-tokenizer.json", &err);
	CHECKF(mk != NULL, "%s", err.msg);
	if (mk) {
		g = load_json(FIXTURES "/mkmodel.json");
		check_goldens("mkmodel", mk, g);
		check_prompts("mkmodel", mk, g, 520, 1024, 517);
		json_decref(g);
		tok_free(&mk);
	}
}

/* The options Llama 3 does not use, on variants HF saved. */
static void test_features(void)
{
	json_t *g = load_json(FIXTURES "/features.json");
	const json_t *vs = json_object_get(g, "variants");

	CHECK(json_array_size(vs) >= 3);
	for (size_t i = 0; i < json_array_size(vs); i++) {
		const json_t *v = json_array_get(vs, i), *tj = json_object_get(v, "tokenizer");
		const char *name = json_string_value(json_object_get(v, "name"));
		pcg_err err = { "" };
		tokenizer *t = tok_parse(json_string_value(tj), json_string_length(tj), &err);
		CHECKF(t != NULL, "%s: %s", name, err.msg);
		if (t)
			check_goldens(name, t, v);
		tok_free(&t);
	}
	json_decref(g);
}

/* HF add_tokens: existing strings keep their id, empty ones are ignored,
 * new ones are appended, a repeat adds nothing. */
static void test_add_tokens(void)
{
	pcg_err err = { "" };
	tokenizer *t = tok_load(FIXTURES "/mkmodel-tokenizer.json", &err);
	int n0, id;

	CHECKF(t != NULL, "%s", err.msg);
	if (t == NULL)
		return;
	n0 = tok_vocab_size(t);
	const char *first[] = { "<new>", "", "ab", "<|s_5|>", "<new2>" };
	/* "ab" (a model token) becomes an added token too; "<|s_5|>" is
	 * already there with the same options. */
	CHECK(tok_add_tokens(t, first, 5, &err) == 3);
	CHECK(tok_token_id(t, "<new>", 5) == n0 && tok_token_id(t, "<new2>", 6) == n0 + 1);
	CHECK(tok_vocab_size(t) == n0 + 2);
	CHECK(tok_add_tokens(t, first, 5, &err) == 0);
	CHECK(tok_token_id(t, "ab", 2) == 258); /* a model token keeps its id */

	int *ids = NULL;
	size_t n = 0, len;
	CHECK(tok_encode(t, "x<new>y<new2>", 13, &ids, &n, &err) == 0);
	CHECK(n == 4 && ids[1] == n0 && ids[3] == n0 + 1);
	free(ids);
	const char *s = tok_token_str(t, n0 + 1, &len);
	CHECK(s && len == 6 && !memcmp(s, "<new2>", 6));
	CHECK(tok_token_str(t, n0 + 2, &len) == NULL && tok_token_str(t, -1, &len) == NULL);
	id = n0 + 2;
	CHECK(tok_decode(t, &id, 1, 0, NULL, &err) == NULL && strstr(err.msg, "not in the vocabulary"));
	const char *bad[] = { "ok", "\xff" };
	CHECK(tok_add_tokens(t, bad, 2, &err) < 0 && strstr(err.msg, "invalid UTF-8"));
	tok_free(&t);
}

static void test_utf8(void)
{
	static const struct {
		const char *s;
		size_t len;
		const char *want; /* NULL: valid */
	} cases[] = {
		{ "plain", 5, NULL },
		{ "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 9, NULL },
		{ "\xef\xbf\xbf\xf4\x8f\xbf\xbf", 7, NULL }, /* U+FFFF, U+10FFFF */
		{ "a\0b", 3, NULL },
		{ "ab\xc0\x80", 4, "at byte 2: overlong" },
		{ "ab\xc1\xbf", 4, "at byte 2: overlong" },
		{ "\xe0\x80\x80", 3, "at byte 0: overlong" },
		{ "xy\xf0\x80\x80\x80", 6, "at byte 2: overlong" },
		{ "\xed\xa0\x80", 3, "at byte 0: surrogate" },
		{ "abc\xed\xbf\xbf", 6, "at byte 3: surrogate" },
		{ "\xf4\x90\x80\x80", 4, "at byte 0: code point beyond U+10FFFF" },
		{ "\xf5\x80\x80\x80", 4, "at byte 0: byte that never occurs" },
		{ "ok\xff", 3, "at byte 2: byte that never occurs" },
		{ "x\xe2\x82", 3, "at byte 1: truncated" },
		{ "x\xe2\x82y", 4, "at byte 1: truncated" },
		{ "\xf0\x9f\x98", 3, "at byte 0: truncated" },
		{ "\xc3", 1, "at byte 0: truncated" },
		{ "\x80", 1, "at byte 0: unexpected continuation" },
		{ "\xc3\xa9\xa9", 3, "at byte 2: unexpected continuation" },
	};
	pcg_err err = { "" };
	tokenizer *t = tok_load(FIXTURES "/mkmodel-tokenizer.json", &err);

	CHECKF(t != NULL, "%s", err.msg);
	for (size_t i = 0; t && i < sizeof cases / sizeof cases[0]; i++) {
		int *ids = NULL;
		size_t n = 0;
		err.msg[0] = 0;
		int rc = tok_encode(t, cases[i].s, cases[i].len, &ids, &n, &err);
		if (cases[i].want == NULL)
			CHECKF(rc == 0, "utf8 case %zu: %s", i, err.msg);
		else
			CHECKF(rc < 0 && strstr(err.msg, cases[i].want) && ids == NULL,
			       "utf8 case %zu: want '%s', got '%s'", i, cases[i].want, err.msg);
		free(ids);
	}
	/* Decoding bytes that are not UTF-8 gives U+FFFD per maximal invalid
	 * subpart, as from_utf8_lossy: bytes 0xE2 0x82 (whose characters are
	 * U+00E2 and U+0124) then 'a' give one U+FFFD and 'a'. */
	if (t) {
		int ids[3] = { tok_token_id(t, "\xc3\xa2", 2), tok_token_id(t, "\xc4\xa4", 2), 64 };
		size_t len;
		char *s = tok_decode(t, ids, 3, 0, &len, &err);
		CHECKF(s && len == 4 && !memcmp(s, "\xef\xbf\xbd" "a", 4), "lossy decode");
		free(s);
	}
	tok_free(&t);
}

static char *replace_once(const char *s, const char *from, const char *to)
{
	const char *p = strstr(s, from);
	if (p == NULL)
		return NULL;
	size_t a = (size_t)(p - s), lf = strlen(from), lt = strlen(to), n = strlen(s);
	char *r = malloc(n - lf + lt + 1);
	memcpy(r, s, a);
	memcpy(r + a, to, lt);
	memcpy(r + a + lt, p + lf, n - a - lf + 1);
	return r;
}

/* A small tokenizer.json that uses every option. */
static const char SMALL[] =
	"{\"version\":\"1.0\",\"added_tokens\":[{\"id\":7,\"content\":\"<x>\",\"special\":true,"
	"\"normalized\":false},{\"id\":8,\"content\":\"yz\",\"lstrip\":true,\"rstrip\":true,"
	"\"single_word\":true,\"special\":false,\"normalized\":true}],\"normalizer\":null,"
	"\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\","
	"\"pattern\":{\"Regex\":\"\\\\p{L}+|\\\\s+(?!\\\\S)|.\"},\"behavior\":\"Isolated\","
	"\"invert\":false},{\"type\":\"ByteLevel\",\"add_prefix_space\":true,"
	"\"use_regex\":false}]},\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\","
	"\"ignore_merges\":false,\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"\xc4\xa0\":3,\"ab\":4,"
	"\"abc\":5,\"\xc4\xa0" "a\":6},\"merges\":[\"a b\",[\"ab\",\"c\"],\"\xc4\xa0 a\"]}}";

/* Each edit of pcg-mkmodel's tokenizer.json must be refused with a message
 * that contains what is named. */
static void test_bad_files(void)
{
	static const struct {
		const char *from, *to, *want;
	} edits[] = {
		{ "\"type\": \"BPE\"", "\"type\": \"WordPiece\"", "model: type WordPiece is not supported" },
		{ "\"type\": \"BPE\"", "\"type\": \"Unigram\"", "model: type Unigram is not supported" },
		{ "\"normalizer\": null", "\"normalizer\": {\"type\": \"NFC\"}",
		  "normalizer: type NFC is not supported" },
		{ "\"byte_fallback\": false", "\"byte_fallback\": true", "model: byte_fallback true" },
		{ "\"dropout\": null", "\"dropout\": 0.1", "model: dropout" },
		{ "\"continuing_subword_prefix\": null", "\"continuing_subword_prefix\": \"##\"",
		  "model: continuing_subword_prefix" },
		{ "\"unk_token\": null", "\"unk_token\": \"<unk>\"", "unk_token '<unk>' is not in the vocab" },
		{ "\"behavior\": \"Isolated\"", "\"behavior\": \"Removed\"",
		  "pre_tokenizer: Split: behavior Removed is not supported" },
		{ "\"invert\": false", "\"invert\": true", "Split: invert true" },
		{ "\"Regex\": \"(?i:", "\"Regex\": \"((?i:", "pre_tokenizer: Split: regex error at offset" },
		{ "\"Regex\":", "\"Regexp\":", "Split: pattern is neither" },
		{ "\"decoder\": {\n  \"type\": \"ByteLevel\"", "\"decoder\": {\n  \"type\": \"WordPiece\"",
		  "decoder: WordPiece is not supported" },
		{ "\"merges\": [\n   [\n    \"c\"", "\"merges\": [\n   [\n    \"zz\"",
		  "model: merges[0]: 'zz' is not in the vocab" },
		{ "\"merges\": [\n   [\n    \"c\",\n    \"\xc4\xbf\"\n   ]", "\"merges\": [\n   \"c\xc4\xbf\"",
		  "merges[0]: 'c\xc4\xbf' is not two tokens" },
		{ "\"merges\": [\n   [\n    \"c\",\n    \"\xc4\xbf\"\n   ]", "\"merges\": [\n   [1, 2]",
		  "merges[0]: neither" },
		{ "\"!\": 0", "\"!\": -1", "vocab: '!': id is not an integer" },
		{ "\"!\": 0", "\"!\": 1e3", "vocab: '!': id is not an integer" },
		{ "\"!\": 0", "\"!\": 2097152", "vocab: '!': id is not an integer in [0, 2097152)" },
		{ "\"\\\"\": 1", "\"\\\"\": 0", "vocab: id 0 is used by" },
		{ "\"id\": 496", "\"id\": 600",
		  "added_tokens[0] '<|begin_of_text|>': id 600 in the file, but HF tokenizers would give it 496" },
		{ "\"id\": 496", "\"id\": \"496\"", "added_tokens[0]: needs a content string" },
		{ "\"version\": \"1.0\"", "\"version\": \"2.0\"", "version" },
		{ "\"pre_tokenizer\"", "\"pre_tokenizer_\"", "pre_tokenizer: missing" },
		{ "\"model\"", "\"model_\"", "model: missing" },
		{ "\"version\": \"1.0\",", "\"version\": \"1.0\", \"model\": 1,", "duplicate" },
		{ "\"use_regex\": false", "\"use_regex\": 0", "ByteLevel: use_regex: not a boolean" },
		{ "\"pretokenizers\": [", "\"pretokenizers\": [{\"type\": \"Whitespace\"},",
		  "Sequence: Whitespace at 0 is not supported" },
		{ "\"type\": \"Sequence\"", "\"type\": \"Metaspace\"", "type Metaspace is not supported" },
	};
	size_t n;
	FILE *f = fopen(FIXTURES "/mkmodel-tokenizer.json", "rb");
	char *base = f ? read_all(f, &n) : NULL, *s;
	pcg_err err = { "" };
	tokenizer *t;

	if (f)
		fclose(f);
	if (base == NULL) {
		CHECKF(0, "cannot read " FIXTURES "/mkmodel-tokenizer.json");
		return;
	}
	base[n] = 0;
	for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
		s = replace_once(base, edits[i].from, edits[i].to);
		CHECKF(s != NULL, "edit %zu: '%s' not in the fixture", i, edits[i].from);
		if (s == NULL)
			continue;
		err.msg[0] = 0;
		t = tok_parse(s, strlen(s), &err);
		CHECKF(t == NULL && strstr(err.msg, edits[i].want), "edit %zu: want '%s', got '%s'", i,
		       edits[i].want, t ? "accepted" : err.msg);
		tok_free(&t);
		free(s);
	}
	static const struct {
		const char *json, *want;
	} whole[] = {
		{ "", "not valid JSON" },
		{ "[1, 2]", "not a JSON object" },
		{ "{\"model\": {\"type\": \"BPE\"", "not valid JSON" },
		{ "{\"decoder\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {}},"
		  " \"pre_tokenizer\": {\"type\": \"ByteLevel\"}}", "model: merges: missing" },
		{ "{\"decoder\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", \"vocab\": [],"
		  " \"merges\": []}}", "model: vocab: missing or not an object" },
		{ "{\"decoder\": null, \"model\": {}}", "decoder: null" },
		{ "{\"decoder\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {},"
		  " \"merges\": []}, \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": ["
		  "{\"type\": \"ByteLevel\"}, {\"type\": \"Split\"}]}}", "ByteLevel at 0 is not supported" },
	};
	for (size_t i = 0; i < sizeof whole / sizeof whole[0]; i++) {
		err.msg[0] = 0;
		t = tok_parse(whole[i].json, strlen(whole[i].json), &err);
		CHECKF(t == NULL && strstr(err.msg, whole[i].want), "whole %zu: want '%s', got '%s'", i,
		       whole[i].want, t ? "accepted" : err.msg);
		tok_free(&t);
	}
	free(base);

	/* The scanner of vocab, merges and added_tokens is as strict as jansson. */
	static const struct {
		const char *from, *to, *want;
	} small_edits[] = {
		{ "\"a\":0,", "\"a\":0,\"a\":7,", "vocab: 'a' appears twice" },
		{ "\"a\":0,", "\"\\x\":9,", "invalid escape" },
		{ "\"a\":0,", "\"\\ud800\":9,", "lone surrogate" },
		{ "\"a\":0,", "\"\\udc00\\ud800\":9,", "lone surrogate" },
		{ "\"a\":0,", "\"\\u12G4\":9,", "invalid \\u escape" },
		{ "\"a\":0,", "\"\t\":9,", "control character in a string" },
		{ "\"a\":0,", "\"a\":\"0\",", "vocab: 'a': id is not an integer" },
		{ "\"a\":0,", "\"a\":0.5,", "vocab: 'a': id is not an integer" },
		{ "\"a\":0,", "\"a\":01,", "not valid JSON at byte" },
		{ "\"a\":0,", "\"a\":99999999999999999999,", "id is not an integer in" },
		{ "\"a\":0,", "\"a\":-,", "value expected" },
		{ "\"a\":0,", "\"a\":0,,", "not valid JSON at byte" },
		{ "\"vocab\":{", "\"vocab\":{},\"vocab\":{", "duplicate key 'vocab'" },
		{ "\"version\":\"1.0\",", "\"version\":\"1.0\",\"added_tokens\":[],", "duplicate key 'added_tokens'" },
		{ "\"version\":\"1.0\",", "\"version\":\"1.0\",\"version\":\"1.0\",", "duplicate" },
		{ "{\"id\":7,", "{\"id\":7,\"id\":7,", "added_tokens[0]: id given twice" },
		{ "{\"id\":7,", "{\"id\":7.0,", "added_tokens[0]: needs a content string" },
		{ "{\"id\":7,", "{\"id\":7,\"x\":[[[],{\"y\":tru}]],", "value expected" },
		{ "\"special\":true,", "\"special\":1,", "added_tokens[0]: special: not a boolean" },
		{ "\"added_tokens\":[{", "\"added_tokens\":[3,{", "added_tokens[0]: not an object" },
		{ "\"added_tokens\":[", "\"added_tokens\":{", "not valid JSON at byte" },
		{ "[\"ab\",\"c\"]", "[\"ab\",\"c\",\"d\"]", "merges[1]: neither" },
		{ "[\"ab\",\"c\"]", "[\"ab\"]", "merges[1]: neither" },
		{ "[\"ab\",\"c\"]", "\"ab c d\"", "merges[1]: 'ab c d' is not two tokens" },
		{ "}}", "}} x", "text after the object" },
		{ "}}", "}", "not valid JSON at byte" },
	};
	for (size_t i = 0; i < sizeof small_edits / sizeof small_edits[0]; i++) {
		s = replace_once(SMALL, small_edits[i].from, small_edits[i].to);
		CHECKF(s != NULL, "small edit %zu: '%s' not in SMALL", i, small_edits[i].from);
		if (s == NULL)
			continue;
		err.msg[0] = 0;
		t = tok_parse(s, strlen(s), &err);
		CHECKF(t == NULL && strstr(err.msg, small_edits[i].want), "small edit %zu: want '%s', got"
		       " '%s'", i, small_edits[i].want, t ? "accepted" : err.msg);
		tok_free(&t);
		free(s);
	}
	/* Nesting in a member nobody reads is bounded, not a stack overflow. */
	size_t deep = 100000;
	char *nest = malloc(sizeof SMALL + 2 * deep + 16);
	strcpy(nest, "{\"x\":");
	memset(nest + 5, '[', deep);
	memset(nest + 5 + deep, ']', deep);
	strcpy(nest + 5 + 2 * deep, ",");
	strcat(nest, SMALL + 1);
	CHECK(tok_parse(nest, strlen(nest), &err) == NULL && strstr(err.msg, "nested too deeply"));
	free(nest);
	/* Escapes are decoded: \u0120 is the byte-level space, a surrogate pair
	 * an emoji; a file that is not UTF-8 is refused with the offset. */
	s = replace_once(SMALL, "\"\xc4\xa0\":3", "\"\\u0120\":3");
	char *s2 = replace_once(s, "\"<x>\"", "\"\\u00e9\\t\\ud83d\\ude00\\\"\"");
	t = tok_parse(s2, strlen(s2), &err);
	CHECKF(t != NULL, "escapes: %s", err.msg);
	CHECK(t && tok_token_id(t, "\xc3\xa9\t\xf0\x9f\x98\x80\"", 8) == 7);
	CHECK(t && tok_token_id(t, "\xc4\xa0", 2) == 3);
	tok_free(&t);
	free(s);
	free(s2);
	s = replace_once(SMALL, "\"c\":2,", "\"c\xff\":2,");
	char want[64];
	snprintf(want, sizeof want, "invalid UTF-8 at byte %zu", (size_t)(strchr(s, '\xff') - s));
	CHECK(tok_parse(s, strlen(s), &err) == NULL && strstr(err.msg, want));
	free(s);

	/* tok_load puts the path in front. */
	CHECK(tok_load(FIXTURES "/no-such-file.json", &err) == NULL &&
	      strstr(err.msg, "no-such-file.json: No such file"));
	CHECK(tok_load(FIXTURES, &err) == NULL && strstr(err.msg, "not a regular file"));
	char path[4200];
	snprintf(path, sizeof path, "%s/bad.json", check_tmpdir());
	f = fopen(path, "w");
	fputs("{\"model\": 1}", f);
	fclose(f);
	CHECK(tok_load(path, &err) == NULL && strstr(err.msg, "bad.json: "));
}

/* Mutates a small tokenizer.json that uses every option; whatever parses
 * must encode and decode without a memory error (the asan- build checks). */
static void test_fuzz(void)
{
	static const char chars[] = "{}[]\",:-0123456789abuedE \\.*+?()|<>^$";
	static const char *texts[] = { "abc abcab", " <x>yz yz ayz", "", "\xc3\xa9 c<x", "  \n a" };
	uint64_t seed = 12345;
	char buf[sizeof SMALL + 8];
	pcg_err err;
	int parsed = 0;

	for (int it = 0; it < 10000; it++) {
		size_t n = sizeof SMALL - 1;
		memcpy(buf, SMALL, sizeof SMALL);
		int edits = 1 + (int)(fuzz_next(&seed) % 3);
		for (int e = 0; e < edits; e++) {
			size_t at = fuzz_next(&seed) % n;
			uint64_t r = fuzz_next(&seed);
			if (r % 4 == 0 && n > 1) /* delete a byte */
				memmove(buf + at, buf + at + 1, n-- - at);
			else
				buf[at] = r % 8 == 1 ? (char)(r >> 8) : chars[(r >> 8) % (sizeof chars - 1)];
		}
		tokenizer *t = tok_parse(buf, n, &err);
		if (t == NULL)
			continue;
		parsed++;
		for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++) {
			int *ids = NULL;
			size_t m = 0;
			if (tok_encode(t, texts[k], strlen(texts[k]), &ids, &m, &err) == 0) {
				char *s = tok_decode(t, ids, m, k & 1, NULL, &err);
				free(s);
			}
			free(ids);
		}
		tok_free(&t);
	}
	printf("fuzz: %d of 10000 mutants parsed\n", parsed);
	CHECK(parsed > 0);
	/* Every prefix of the file is refused, with no read past its end. */
	for (size_t n = 0; n + 1 < sizeof SMALL; n++) {
		char *p = malloc(n + 1);
		memcpy(p, SMALL, n);
		tokenizer *t = tok_parse(p, n, &err);
		CHECKF(t == NULL, "prefix of %zu bytes accepted", n);
		tok_free(&t);
		free(p);
	}
}

int main(void)
{
	test_utf8();
	test_bad_files();
	test_fuzz();
	test_add_tokens();
	test_features();
	test_parity();
	return check_done("test_tokenizer");
}
