/* tokenizer_gguf.c: the tokenizer of a GGUF file (tokenizer.ggml.*) as the
 * tokenizer.json it was converted from, handed to tok_parse, so that one
 * parser and one encoder serve both formats (see tokenizer.h).
 *
 * llama.cpp's converter stores a byte-level BPE as: tokens by id, a type per
 * token (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte),
 * merges as "a b" strings and the name of the pre-tokenizer. Every token
 * goes into the model's vocab at its id (so ids are positions, whatever the
 * gaps), and the control and user-defined ones are also added tokens
 * (special and not special), matched as whole strings before the text is
 * split, as HF does. The converter marks as control both HF's special
 * tokens and added tokens that look like "<|...|>": those (LLaSA's speech
 * tokens among them) are special here, so tok_decode with skip_special
 * drops them where HF would keep a non-special one. Encoding is the same.
 */
#include "tokenizer.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf.h"

/* The pre-tokenizers llama.cpp calls LLAMA3 and loads with ignore_merges. */
static const char *const LLAMA3_PRES[] = { "llama-bpe", "llama3", "llama-v3" };
static const char LLAMA3_REGEX[] =
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|"
	" ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

enum { TT_UNDEFINED, TT_NORMAL, TT_UNKNOWN, TT_CONTROL, TT_USER_DEFINED, TT_UNUSED, TT_BYTE };

typedef struct jbuf {
	char *p;
	size_t n, cap;
	int oom;
} jbuf;

static void put(jbuf *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (n > b->cap - b->n) {
		size_t cap = b->cap ? b->cap : 1 << 16;
		char *p;
		while (cap - b->n < n) {
			if (cap > SIZE_MAX / 2) {
				b->oom = 1;
				return;
			}
			cap *= 2;
		}
		if ((p = realloc(b->p, cap)) == NULL) {
			b->oom = 1;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
}

static void puts_(jbuf *b, const char *s)
{
	put(b, s, strlen(s));
}

/* A JSON string of n bytes of UTF-8 (checked by the caller). */
static void put_json_str(jbuf *b, const char *s, size_t n)
{
	size_t i, run = 0;
	char esc[8];

	put(b, "\"", 1);
	for (i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		put(b, s + run, i - run);
		if (c == '"' || c == '\\') {
			esc[0] = '\\';
			esc[1] = (char)c;
			put(b, esc, 2);
		} else {
			snprintf(esc, sizeof esc, "\\u%04x", c);
			put(b, esc, 6);
		}
		run = i + 1;
	}
	put(b, s + run, n - run);
	put(b, "\"", 1);
}

/* A string key whose value must be one of a list; returns its index. */
static int get_choice(const gguf_file *f, const char *key, const char *const *allowed, int n,
		      const char *help, pcg_err *err)
{
	const char *s;
	size_t len;

	if (gguf_get_str(f, key, &s, &len, err) < 0)
		return -1;
	for (int i = 0; i < n; i++)
		if (strlen(allowed[i]) == len && memcmp(s, allowed[i], len) == 0)
			return i;
	return pcg_fail(err, "%s '%.*s' is not supported (%s)", key, (int)(len < 40 ? len : 40), s,
			help);
}

/* Checks the element counts and types of the arrays; *n_tok, *n_merges. */
static int check_arrays(const gguf_file *f, size_t *n_tok, size_t *n_merges, int *has_types,
			pcg_err *err)
{
	gguf_type t;
	size_t n;

	if (gguf_get_arr(f, "tokenizer.ggml.tokens", &t, n_tok, err) < 0)
		return -1;
	if (t != GGUF_STRING)
		return pcg_fail(err, "tokenizer.ggml.tokens: not an array of strings");
	if (*n_tok == 0 || *n_tok > INT_MAX / 2)
		return pcg_fail(err, "tokenizer.ggml.tokens: %zu tokens", *n_tok);
	if (gguf_get_arr(f, "tokenizer.ggml.merges", &t, n_merges, err) < 0)
		return -1;
	if (t != GGUF_STRING)
		return pcg_fail(err, "tokenizer.ggml.merges: not an array of strings");
	*has_types = gguf_find_key(f, "tokenizer.ggml.token_type") >= 0;
	if (!*has_types)
		return 0;
	if (gguf_get_arr(f, "tokenizer.ggml.token_type", &t, &n, err) < 0)
		return -1;
	if (n != *n_tok)
		return pcg_fail(err, "tokenizer.ggml.token_type: %zu types for %zu tokens", n, *n_tok);
	return 0;
}

static int token_type(const gguf_file *f, size_t i, int has_types, int *tt, pcg_err *err)
{
	double v;

	*tt = TT_NORMAL;
	if (!has_types)
		return 0;
	if (gguf_arr_num(f, "tokenizer.ggml.token_type", i, &v, err) < 0)
		return -1;
	if (!(v >= TT_UNDEFINED && v <= TT_BYTE) || v != (int)v)
		return pcg_fail(err, "tokenizer.ggml.token_type[%zu]: %g is not a token type (0 to 6)",
				i, v);
	*tt = (int)v;
	return 0;
}

/* The tokenizer.json text (into b). */
static int build_json(const gguf_file *f, jbuf *b, pcg_err *err)
{
	size_t n_tok, n_merges, i, len;
	int has_types = 0, tt, first = 1;
	const char *s;
	char num[48];

	if (get_choice(f, "tokenizer.ggml.model", (const char *const[]){ "gpt2" }, 1,
		       "only gpt2, the byte-level BPE", err) < 0 ||
	    get_choice(f, "tokenizer.ggml.pre", LLAMA3_PRES,
		       (int)(sizeof LLAMA3_PRES / sizeof LLAMA3_PRES[0]),
		       "only llama-bpe, llama3 and llama-v3", err) < 0 ||
	    check_arrays(f, &n_tok, &n_merges, &has_types, err) < 0)
		return -1;

	puts_(b, "{\"version\":\"1.0\",\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"Sequence\","
		 "\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":");
	put_json_str(b, LLAMA3_REGEX, sizeof LLAMA3_REGEX - 1);
	puts_(b, "},\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\","
		 "\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":false}]},"
		 "\"decoder\":{\"type\":\"ByteLevel\",\"add_prefix_space\":true,"
		 "\"trim_offsets\":true,\"use_regex\":true},\"added_tokens\":[");
	for (i = 0; i < n_tok; i++) {
		if (token_type(f, i, has_types, &tt, err) < 0 ||
		    gguf_arr_str(f, "tokenizer.ggml.tokens", i, &s, &len, err) < 0)
			return -1;
		if (tok_check_utf8(s, len, err) < 0) {
			snprintf(num, sizeof num, "tokenizer.ggml.tokens[%zu]", i);
			pcg_err_prefix(err, num);
			return -1;
		}
		if (tt != TT_CONTROL && tt != TT_USER_DEFINED)
			continue;
		if (len == 0)
			return pcg_fail(err, "tokenizer.ggml.tokens[%zu]: an empty %s token", i,
					tt == TT_CONTROL ? "control" : "user-defined");
		snprintf(num, sizeof num, "%s{\"id\":%zu,\"content\":", first ? "" : ",", i);
		puts_(b, num);
		put_json_str(b, s, len);
		puts_(b, tt == TT_CONTROL
		      ? ",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,"
			"\"normalized\":false,\"special\":true}"
		      : ",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,"
			"\"normalized\":false,\"special\":false}");
		first = 0;
	}
	puts_(b, "],\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null,"
		 "\"continuing_subword_prefix\":null,\"end_of_word_suffix\":null,\"fuse_unk\":false,"
		 "\"byte_fallback\":false,\"ignore_merges\":true,\"vocab\":{");
	for (i = 0; i < n_tok; i++) {
		if (gguf_arr_str(f, "tokenizer.ggml.tokens", i, &s, &len, err) < 0)
			return -1;
		if (i > 0)
			put(b, ",", 1);
		put_json_str(b, s, len);
		snprintf(num, sizeof num, ":%zu", i);
		puts_(b, num);
	}
	puts_(b, "},\"merges\":[");
	for (i = 0; i < n_merges; i++) {
		if (gguf_arr_str(f, "tokenizer.ggml.merges", i, &s, &len, err) < 0)
			return -1;
		if (tok_check_utf8(s, len, err) < 0) {
			snprintf(num, sizeof num, "tokenizer.ggml.merges[%zu]", i);
			pcg_err_prefix(err, num);
			return -1;
		}
		if (i > 0)
			put(b, ",", 1);
		put_json_str(b, s, len);
	}
	puts_(b, "]}}");
	return b->oom ? pcg_fail(err, "out of memory") : 0;
}

tokenizer *tok_from_gguf(const struct gguf_file *f, pcg_err *err)
{
	jbuf b = { NULL, 0, 0, 0 };
	tokenizer *t = NULL;

	if (build_json(f, &b, err) == 0) {
		t = tok_parse(b.p, b.n, err);
		if (t == NULL)
			pcg_err_prefix(err, "tokenizer.ggml.* (as a tokenizer.json)");
	}
	free(b.p);
	return t;
}

tokenizer *tok_open(const char *path, pcg_err *err)
{
	char buf[4096];
	struct stat st;

	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
		snprintf(buf, sizeof buf, "%s/tokenizer.json", path);
		return tok_load(buf, err);
	}
	if (!gguf_is_gguf(path))
		return tok_load(path, err);
	/* FILE.gguf: a tokenizer.json in the same directory is the original */
	const char *slash = strrchr(path, '/');
	snprintf(buf, sizeof buf, "%.*stokenizer.json", slash ? (int)(slash - path + 1) : 0, path);
	if (access(buf, R_OK) == 0)
		return tok_load(buf, err);
	gguf_file *g = gguf_open(path, err);
	tokenizer *t = g ? tok_from_gguf(g, err) : NULL;
	gguf_close(&g);
	return t;
}
