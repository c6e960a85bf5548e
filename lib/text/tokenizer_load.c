/* tokenizer_load.c: a tokenizer from a Hugging Face tokenizer.json: the
 * model's vocab and merges, the added tokens and the pre-tokenizer, each
 * checked against what tokenizer.c can follow (anything else is refused
 * with a message naming it).
 *
 * vocab, merges and added_tokens (nearly all of a 30 MB file) are read by a
 * small scanner straight into the tables, the rest by jansson.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer.h"

#include <errno.h>
#include <jansson.h>
#include <pcre2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tokenizer_impl.h"

/* LLaSA's tokenizer.json is 30 MB; anything far larger is not a tokenizer. */
#define TOK_MAX_BYTES ((size_t)1 << 30)

static int compile(pcre2_code **re, const char *pat, size_t len, uint32_t extra, pcg_err *err)
{
	int code;
	PCRE2_SIZE off;

	/* UTF and UCP make \s, \p{L}, \p{N} and case folding Unicode-aware, as
	 * in Oniguruma; MULTILINE gives ^ and $ Ruby's (and so Oniguruma's)
	 * line meaning. A String pattern is a literal (PCRE2 allows only UTF
	 * with that). */
	uint32_t opt = extra & PCRE2_LITERAL ? PCRE2_UTF | extra
		: PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE | extra;

	*re = pcre2_compile((PCRE2_SPTR)pat, len, opt, &code, &off, NULL);
	if (*re == NULL) {
		PCRE2_UCHAR msg[120];
		pcre2_get_error_message(code, msg, sizeof msg);
		return pcg_fail(err, "regex error at offset %zu: %s", (size_t)off, (char *)msg);
	}
	pcre2_jit_compile(*re, PCRE2_JIT_COMPLETE); /* the interpreter if no JIT */
	return 0;
}

static const char GPT2_REGEX[] =
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* json_t getters that treat null as absent, as serde's Option does. */
static json_t *field(const json_t *o, const char *name)
{
	json_t *v = json_object_get(o, name);
	return json_is_null(v) ? NULL : v;
}

static int get_bool(const json_t *o, const char *name, int def, int *out, pcg_err *err)
{
	const json_t *v = field(o, name);
	if (v == NULL) {
		*out = def;
		return 0;
	}
	if (!json_is_boolean(v))
		return pcg_fail(err, "%s: not a boolean", name);
	*out = json_is_true(v);
	return 0;
}

static const char *type_of(const json_t *o)
{
	const char *s = json_string_value(json_object_get(o, "type"));
	return s ? s : "(no type)";
}

static int add_step(tokenizer *t, pcre2_code *re, pcg_err *err)
{
	if (t->n_steps == (int)(sizeof t->steps / sizeof t->steps[0])) {
		pcre2_code_free(re);
		return pcg_fail(err, "too many steps");
	}
	t->steps[t->n_steps++].re = re;
	return 0;
}

static int parse_split(tokenizer *t, const json_t *o, pcg_err *err)
{
	const json_t *pat = json_object_get(o, "pattern"), *s;
	const char *behavior = json_string_value(json_object_get(o, "behavior"));
	int invert, literal = 0;
	pcre2_code *re;

	if (get_bool(o, "invert", 0, &invert, err) < 0)
		return -1;
	if (invert)
		return pcg_fail(err, "Split: invert true is not supported");
	if (behavior == NULL || strcmp(behavior, "Isolated"))
		return pcg_fail(err, "Split: behavior %s is not supported (only Isolated)",
				behavior ? behavior : "missing");
	if (!json_is_object(pat))
		return pcg_fail(err, "Split: pattern missing");
	if ((s = json_object_get(pat, "Regex")) == NULL) {
		s = json_object_get(pat, "String");
		literal = 1;
	}
	if (!json_is_string(s))
		return pcg_fail(err, "Split: pattern is neither {\"Regex\": ...} nor {\"String\": ...}");
	if (compile(&re, json_string_value(s), json_string_length(s), literal ? PCRE2_LITERAL : 0,
		    err) < 0) {
		pcg_err_prefix(err, "Split");
		return -1;
	}
	return add_step(t, re, err);
}

static int parse_byte_level(tokenizer *t, const json_t *o, pcg_err *err)
{
	int prefix, use_regex;
	pcre2_code *re;

	if (get_bool(o, "add_prefix_space", 1, &prefix, err) < 0 ||
	    get_bool(o, "use_regex", 1, &use_regex, err) < 0) {
		pcg_err_prefix(err, "ByteLevel");
		return -1;
	}
	if (prefix && add_step(t, NULL, err) < 0)
		return -1;
	if (use_regex && (compile(&re, GPT2_REGEX, sizeof GPT2_REGEX - 1, 0, err) < 0 ||
			  add_step(t, re, err) < 0))
		return -1;
	return 0;
}

/* ByteLevel, or a Sequence of Splits ending in ByteLevel: what byte-level
 * BPE tokenizers use. The bytes are mapped last, so regexes see the text. */
static int parse_pre_tokenizer(tokenizer *t, const json_t *pt, pcg_err *err)
{
	const char *type = type_of(pt);
	const json_t *list;
	size_t i, n;

	if (pt == NULL)
		return pcg_fail(err, "missing (byte-level BPE needs ByteLevel)");
	if (!strcmp(type, "ByteLevel"))
		return parse_byte_level(t, pt, err);
	if (strcmp(type, "Sequence"))
		return pcg_fail(err, "type %s is not supported (ByteLevel, or a Sequence of Split"
				" and ByteLevel)", type);
	list = json_object_get(pt, "pretokenizers");
	if (!json_is_array(list) || (n = json_array_size(list)) == 0)
		return pcg_fail(err, "Sequence: pretokenizers is not a non-empty array");
	for (i = 0; i < n; i++) {
		const json_t *s = json_array_get(list, i);
		type = type_of(s);
		if (i + 1 < n && !strcmp(type, "Split")) {
			if (parse_split(t, s, err) < 0)
				return -1;
		} else if (i + 1 == n && !strcmp(type, "ByteLevel")) {
			return parse_byte_level(t, s, err);
		} else {
			return pcg_fail(err, "Sequence: %s at %zu is not supported (Splits, then"
					" ByteLevel last)", type, i);
		}
	}
	return 0;
}

/* ----------------------------------------------- the three large members */

/* jansson would turn LLaSA's tokenizer.json into 1.5 million values before
 * we could read one. The members that hold nearly all of them (model.vocab,
 * model.merges, added_tokens) are therefore read by this small scanner
 * straight into the tables; jansson reads the rest. Measured with
 * bench-tokenizer (median of 5 runs of its best of 5, 2 cores under a load
 * of about 2.5), the whole load of the LLaSA file takes 0.16 s (merges as
 * strings, 20 MiB) and 0.19 s (as pairs, 28 MiB) this way, and 0.41 s and
 * 0.53 s with every member read through json_loadb: 2.6 and 2.8 times as
 * long. The scanner is as strict as jansson: JSON syntax, escapes,
 * surrogate pairs, no control characters in strings (UTF-8 is checked for
 * the whole file beforehand). */
typedef struct jscan {
	const char *start, *p, *end; /* start: for byte offsets in messages */
	char *buf;                   /* the last string read, decoded, NUL-terminated */
	size_t len, cap;
	pcg_err *err;
} jscan;

/* A part of the JSON text. */
typedef struct span {
	const char *p;
	size_t n;
} span;

static int js_fail(jscan *j, const char *what)
{
	return pcg_fail(j->err, "not valid JSON at byte %zu: %s", (size_t)(j->p - j->start), what);
}

/* Skips blanks; returns the next character, or -1 at the end. */
static int js_peek(jscan *j)
{
	while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
		j->p++;
	return j->p < j->end ? (unsigned char)*j->p : -1;
}

static int js_char(jscan *j, char c)
{
	char what[32];

	if (js_peek(j) == (unsigned char)c) {
		j->p++;
		return 0;
	}
	snprintf(what, sizeof what, "'%c' expected", c);
	return js_fail(j, what);
}

static int js_put(jscan *j, const char *s, size_t n)
{
	if (j->len + n + 1 > j->cap) {
		size_t cap = j->cap ? j->cap : 256;
		while (j->len + n + 1 > cap)
			cap *= 2;
		char *b = realloc(j->buf, cap);
		if (b == NULL)
			return pcg_fail(j->err, "out of memory");
		j->buf = b;
		j->cap = cap;
	}
	memcpy(j->buf + j->len, s, n);
	j->len += n;
	j->buf[j->len] = 0;
	return 0;
}

/* The 4 hex digits of a \u escape at p, or -1. */
static long hex4(const char *p, const char *end)
{
	long v = 0;

	if (end - p < 4)
		return -1;
	for (int i = 0; i < 4; i++) {
		int c = p[i], d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
			: c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
		if (d < 0)
			return -1;
		v = v << 4 | d;
	}
	return v;
}

/* A string, decoded into j->buf (j->len bytes; \u0000 allowed), or
 * appended to what is there. */
static int js_str(jscan *j, int append)
{
	if (js_char(j, '"') < 0)
		return -1;
	if (!append)
		j->len = 0;
	for (;;) {
		const char *q = j->p;
		while (q < j->end && *q != '"' && *q != '\\' && (unsigned char)*q >= 0x20)
			q++;
		if (js_put(j, j->p, (size_t)(q - j->p)) < 0)
			return -1;
		j->p = q;
		if (q == j->end)
			return js_fail(j, "unterminated string");
		if (*q == '"')
			break;
		if (*q != '\\')
			return js_fail(j, "control character in a string");
		static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
		const char *e = q + 1 < j->end && q[1] ? strchr(from, q[1]) : NULL;
		char out[4];
		if (e) {
			j->p += 2;
			if (js_put(j, &to[e - from], 1) < 0)
				return -1;
			continue;
		}
		long c = q + 1 < j->end && q[1] == 'u' ? hex4(q + 2, j->end) : -2;
		if (c == -2)
			return js_fail(j, "invalid escape");
		if (c < 0)
			return js_fail(j, "invalid \\u escape");
		if (c >= 0xdc00 && c <= 0xdfff)
			return js_fail(j, "lone surrogate in a \\u escape");
		j->p += 6;
		if (c >= 0xd800 && c < 0xdc00) { /* a surrogate pair */
			long lo = j->end - j->p >= 6 && j->p[0] == '\\' && j->p[1] == 'u'
				? hex4(j->p + 2, j->end) : -1;
			if (lo < 0xdc00 || lo > 0xdfff)
				return js_fail(j, "lone surrogate in a \\u escape");
			c = 0x10000 + ((c - 0xd800) << 10) + (lo - 0xdc00);
			j->p += 6;
		}
		if (js_put(j, out, (size_t)tok_put_utf8(out, (uint32_t)c)) < 0)
			return -1;
	}
	j->p++;
	return 0;
}

static int js_string(jscan *j)
{
	return js_str(j, 0);
}

/* A number; *v gets it when it is an integer (no fraction, no exponent)
 * that fits, and *is_int says whether it was. */
static int js_number(jscan *j, long long *v, int *is_int)
{
	const char *q = j->p, *e = j->end;
	int digits = 0;

	js_peek(j);
	q = j->p;
	if (q < e && *q == '-')
		q++;
	if (q < e && *q == '0')
		q++, digits = 1;
	else
		for (; q < e && *q >= '0' && *q <= '9'; q++)
			digits++;
	if (digits == 0)
		return js_fail(j, "value expected");
	*is_int = 1;
	if (q < e && *q == '.') {
		*is_int = digits = 0;
		for (q++; q < e && *q >= '0' && *q <= '9'; q++)
			digits++;
	}
	if (digits && q < e && (*q == 'e' || *q == 'E')) {
		*is_int = digits = 0;
		if (++q < e && (*q == '+' || *q == '-'))
			q++;
		for (; q < e && *q >= '0' && *q <= '9'; q++)
			digits++;
	}
	if (digits == 0)
		return js_fail(j, "malformed number");
	if (*is_int) {
		char num[24];
		size_t n = (size_t)(q - j->p);
		if (n >= sizeof num) {
			*is_int = 0; /* too long for an id */
		} else {
			memcpy(num, j->p, n);
			num[n] = 0;
			*v = strtoll(num, NULL, 10);
		}
	}
	j->p = q;
	return 0;
}

/* true, false or null (-1). */
static int js_literal(jscan *j, int *v)
{
	static const char *names[3] = { "null", "false", "true" };

	js_peek(j);
	for (int i = 0; i < 3; i++) {
		size_t n = strlen(names[i]);
		if ((size_t)(j->end - j->p) >= n && !memcmp(j->p, names[i], n)) {
			j->p += n;
			*v = i - 1;
			return 0;
		}
	}
	return js_fail(j, "value expected");
}

/* Steps through an object or array: the first call (*k == 0) reads the
 * opening bracket, later ones the comma or the closing bracket. Returns 1
 * when an element follows, 0 after the closing bracket, -1 on error. */
static int js_next(jscan *j, char open, size_t *k)
{
	char close = open == '{' ? '}' : ']';

	if ((*k)++ == 0 && js_char(j, open) < 0)
		return -1;
	if (js_peek(j) == close) {
		j->p++;
		return 0;
	}
	return *k == 1 || js_char(j, ',') == 0 ? 1 : -1;
}

/* Reads and checks a value of any kind, keeping nothing. */
static int js_skip(jscan *j, int depth)
{
	int c = js_peek(j), v;
	size_t k = 0;
	long long x;

	if (depth > 512)
		return js_fail(j, "nested too deeply");
	if (c == '"')
		return js_string(j);
	if (c != '{' && c != '[')
		return c == '-' || (c >= '0' && c <= '9') ? js_number(j, &x, &v) : js_literal(j, &v);
	while ((v = js_next(j, (char)c, &k)) == 1)
		if ((c == '{' && (js_string(j) < 0 || js_char(j, ':') < 0)) || js_skip(j, depth + 1) < 0)
			return -1;
	return v;
}

/* Growing text, for the part of the file that goes to jansson; running out
 * of memory is noted and checked once at the end. */
typedef struct text {
	char *p;
	size_t n, cap;
	int oom;
} text;

static void text_add(text *t, const char *s, size_t n)
{
	if (t->n + n + 1 > t->cap) {
		size_t cap = t->cap ? t->cap : 4096;
		while (t->n + n + 1 > cap)
			cap *= 2;
		char *p = realloc(t->p, cap);
		if (p == NULL) {
			t->oom = 1;
			return;
		}
		t->p = p;
		t->cap = cap;
	}
	memcpy(t->p + t->n, s, n);
	t->n += n;
	t->p[t->n] = 0;
}

/* Big members: where each is found, by name. */
static const struct {
	const char *parent, *name;
} BIG[3] = { { "model", "vocab" }, { "model", "merges" }, { NULL, "added_tokens" } };

/* Copies the object at j to out, except the big members, whose values go
 * to big[] (a null one counts as absent); in is the name of the member the
 * object is the value of (NULL at the top). "model" is copied member by
 * member so that its vocab and merges stay out. A big member given twice is
 * refused; jansson refuses the other duplicates. */
static int skim(jscan *j, const char *in, span big[3], text *out)
{
	size_t k = 0;
	int r, i;

	text_add(out, "{", 1);
	while ((r = js_next(j, '{', &k)) == 1) {
		const char *m = (js_peek(j), j->p);
		if (js_string(j) < 0 || js_char(j, ':') < 0)
			return -1;
		if (k > 1)
			text_add(out, ",", 1);
		if (!in && !strcmp(j->buf, "model") && js_peek(j) == '{') {
			text_add(out, m, (size_t)(j->p - m));
			if (skim(j, "model", big, out) < 0)
				return -1;
			continue;
		}
		for (i = 0; i < 3; i++)
			if (!strcmp(j->buf, BIG[i].name) &&
			    (in && BIG[i].parent ? !strcmp(in, BIG[i].parent) : in == BIG[i].parent))
				break;
		const char *v = (js_peek(j), j->p);
		if (js_skip(j, 1) < 0)
			return -1;
		if (i == 3) {
			text_add(out, m, (size_t)(j->p - m));
			continue;
		}
		if (big[i].p)
			return pcg_fail(j->err, "duplicate key '%s'", BIG[i].name);
		big[i] = (span){ v, (size_t)(j->p - v) };
		text_add(out, m, (size_t)(v - m)); /* the key stays, for the commas */
		text_add(out, "null", 4);
	}
	text_add(out, "}", 1);
	return r;
}

/* A scanner over a span of the file (offsets in messages stay file offsets). */
static jscan js_at(const char *start, span s, pcg_err *err)
{
	/* a span not found is { NULL, 0 }: no arithmetic on the null pointer */
	return (jscan){ start, s.p, s.p ? s.p + s.n : NULL, NULL, 0, 0, err };
}

static int parse_vocab(tokenizer *t, jscan *j, pcg_err *err)
{
	size_t k = 0;
	int r;

	if (j->p == NULL || js_peek(j) != '{')
		return pcg_fail(err, "vocab: missing or not an object");
	while ((r = js_next(j, '{', &k)) == 1) {
		long long id = -1;
		int is_int, old;
		int64_t off;
		if (js_string(j) < 0 || js_char(j, ':') < 0)
			return -1;
		if (js_peek(j) != '-' && (js_peek(j) < '0' || js_peek(j) > '9'))
			is_int = 0;
		else if (js_number(j, &id, &is_int) < 0)
			return -1;
		if (!is_int || id < 0 || id >= TOK_MAX_ID)
			return pcg_fail(err, "vocab: '%s': id is not an integer in [0, %d)", j->buf,
					TOK_MAX_ID);
		if (tok_ids_reserve(t, (int)id) < 0 || (off = tok_arena_add(&t->str, j->buf, j->len)) < 0 ||
		    tok_strmap_put(&t->vocab, &t->str, (size_t)off, j->len, (int)id, &old) < 0)
			return pcg_fail(err, "out of memory");
		if (old >= 0)
			return pcg_fail(err, "vocab: '%s' appears twice", j->buf);
		if (t->model_tok[id].len != UINT32_MAX)
			return pcg_fail(err, "vocab: id %d is used by '%.*s' and '%s'", (int)id,
					(int)t->model_tok[id].len, t->str.p + t->model_tok[id].off, j->buf);
		t->model_tok[id].off = (size_t)off;
		t->model_tok[id].len = (uint32_t)j->len;
		if (id >= t->n_ids)
			t->n_ids = (int)id + 1;
		t->n_model++;
	}
	return r;
}

/* Reads merge i into j->buf as a then b (the merged token), with the
 * lengths of a and b: "a b" (split at its one space) or ["a", "b"].
 * Returns 1, or 0 for a "#version" line (skipped, as HF reads merges.txt). */
static int read_merge(jscan *j, size_t i, size_t *la, size_t *lb)
{
	size_t k = 0;
	char *sp;

	if (js_peek(j) == '"') {
		if (js_string(j) < 0)
			return -1;
		if (j->len >= 8 && !memcmp(j->buf, "#version", 8))
			return 0;
		sp = memchr(j->buf, ' ', j->len);
		if (sp == NULL || memchr(sp + 1, ' ', j->len - (size_t)(sp + 1 - j->buf)))
			return pcg_fail(j->err, "merges[%zu]: '%s' is not two tokens separated by a"
					" space", i, j->buf);
		*la = (size_t)(sp - j->buf);
		*lb = j->len - *la - 1;
		memmove(sp, sp + 1, *lb + 1);
		j->len--;
		return 1;
	}
	if (js_peek(j) == '[' && js_next(j, '[', &k) == 1 && js_peek(j) == '"') {
		j->len = 0;
		if (js_str(j, 1) < 0)
			return -1;
		*la = j->len;
		if (js_next(j, '[', &k) == 1 && js_peek(j) == '"') {
			if (js_str(j, 1) < 0)
				return -1;
			*lb = j->len - *la;
			if (js_next(j, '[', &k) == 0)
				return 1;
		}
	}
	return pcg_fail(j->err, "merges[%zu]: neither \"a b\" nor [\"a\", \"b\"]", i);
}

/* A pair listed twice keeps its last rank, as HF's collect into a HashMap
 * does. */
static int parse_merges(tokenizer *t, jscan *j, pcg_err *err)
{
	size_t k = 0, la = 0, lb = 0;
	uint32_t rank = 0;
	int r;

	if (j->p == NULL || js_peek(j) != '[')
		return pcg_fail(err, "merges: missing or not an array");
	for (size_t i = 0; (r = js_next(j, '[', &k)) == 1; i++) {
		int m = read_merge(j, i, &la, &lb);
		if (m <= 0) {
			if (m < 0)
				return -1;
			continue;
		}
		const char *ab = j->buf;
		int ia = tok_strmap_get(&t->vocab, &t->str, ab, la);
		int ib = tok_strmap_get(&t->vocab, &t->str, ab + la, lb);
		int im = tok_strmap_get(&t->vocab, &t->str, ab, la + lb);
		if (ia < 0 || ib < 0 || im < 0)
			return pcg_fail(err, "merges[%zu]: '%.*s' is not in the vocab", i,
					ia < 0 ? (int)la : ib < 0 ? (int)lb : (int)(la + lb),
					ia < 0 || ib >= 0 ? ab : ab + la);
		if (tok_u64map_put(&t->merges, (uint64_t)ia << 32 | (uint32_t)ib,
			       (uint64_t)rank++ << 32 | (uint32_t)im) < 0)
			return pcg_fail(err, "out of memory");
	}
	return r;
}

static int parse_model(tokenizer *t, const json_t *model, jscan *vocab, jscan *merges,
		       pcg_err *err)
{
	const char *type = type_of(model);
	const json_t *v;
	int byte_fallback;

	if (!json_is_object(model))
		return pcg_fail(err, "missing or not an object");
	if (strcmp(type, "BPE"))
		return pcg_fail(err, "type %s is not supported (only BPE)", type);
	if ((v = field(model, "dropout")) && !(json_is_number(v) && json_number_value(v) == 0))
		return pcg_fail(err, "dropout is not supported");
	if (get_bool(model, "byte_fallback", 0, &byte_fallback, err) < 0 ||
	    get_bool(model, "ignore_merges", 0, &t->ignore_merges, err) < 0 ||
	    get_bool(model, "fuse_unk", 0, &t->fuse_unk, err) < 0)
		return -1;
	if (byte_fallback)
		return pcg_fail(err, "byte_fallback true is not supported");
	for (int i = 0; i < 2; i++) {
		const char *name = i ? "end_of_word_suffix" : "continuing_subword_prefix";
		if ((v = field(model, name)) && !(json_is_string(v) && json_string_length(v) == 0))
			return pcg_fail(err, "%s is not supported", name);
	}
	if (parse_vocab(t, vocab, err) < 0 || parse_merges(t, merges, err) < 0)
		return -1;
	t->unk_id = -1;
	if ((v = field(model, "unk_token"))) {
		if (!json_is_string(v))
			return pcg_fail(err, "unk_token: not a string");
		t->unk_id = tok_strmap_get(&t->vocab, &t->str, json_string_value(v), json_string_length(v));
		if (t->unk_id < 0)
			return pcg_fail(err, "unk_token '%s' is not in the vocab", json_string_value(v));
	}
	for (int b = 0; b < 256; b++)
		t->byte_id[b] = tok_strmap_get(&t->vocab, &t->str, t->byte_utf8[b], t->byte_len[b]);
	return 0;
}

/* One added_tokens entry; options default as in HF's AddedToken
 * (normalized: !special). */
static int parse_added_one(tokenizer *t, jscan *j, size_t i, added_tok *a, pcg_err *err)
{
	static const char *keys[7] = { "single_word", "lstrip", "rstrip", "normalized", "special",
				       "id", "content" };
	int f[5] = { 0, 0, 0, -1, 0 }, have_content = 0, seen = 0, r, n;
	long long id = -1;
	size_t k = 0;

	if (js_peek(j) != '{')
		return pcg_fail(err, "added_tokens[%zu]: not an object", i);
	while ((r = js_next(j, '{', &k)) == 1) {
		int c, v, is_int;
		int64_t off;
		if (js_string(j) < 0 || js_char(j, ':') < 0)
			return -1;
		for (n = 0; n < 7 && strcmp(j->buf, keys[n]); n++)
			;
		if (n < 7 && (seen >> n & 1))
			return pcg_fail(err, "added_tokens[%zu]: %s given twice", i, keys[n]);
		seen |= 1 << n;
		c = js_peek(j);
		if (n < 5) {
			if (c != 'n' && c != 't' && c != 'f')
				return pcg_fail(err, "added_tokens[%zu]: %s: not a boolean", i, keys[n]);
			if (js_literal(j, &v) < 0)
				return -1;
			if (v >= 0)
				f[n] = v;
		} else if (n == 5 && (c == '-' || (c >= '0' && c <= '9'))) {
			if (js_number(j, &id, &is_int) < 0)
				return -1;
			if (!is_int)
				id = -1;
		} else if (n == 6 && c == '"') {
			if (js_string(j) < 0)
				return -1;
			if ((off = tok_arena_add(&t->str, j->buf, j->len)) < 0)
				return pcg_fail(err, "out of memory");
			a->off = (size_t)off;
			a->len = (uint32_t)j->len;
			have_content = 1;
		} else if (js_skip(j, 1) < 0) { /* another member, or id/content of a wrong type */
			return -1;
		}
	}
	if (r < 0)
		return -1;
	if (!have_content || id < 0 || id >= TOK_MAX_ID)
		return pcg_fail(err, "added_tokens[%zu]: needs a content string and an id in [0, %d)",
				i, TOK_MAX_ID);
	*a = (added_tok){ a->off, a->len, (int)id, (unsigned char)f[0], (unsigned char)f[1],
			  (unsigned char)f[2], (unsigned char)(f[3] < 0 ? !f[4] : f[3]),
			  (unsigned char)f[4] };
	return 0;
}

/* The added tokens, added in one batch as HF's deserializer does. HF then
 * uses the ids it assigns, not the ones in the file; we refuse a file where
 * the two differ rather than silently renumber. */
static int parse_added(tokenizer *t, jscan *j, pcg_err *err)
{
	added_tok *in = NULL;
	int *ids = NULL, rc = -1, r;
	size_t n = 0, cap = 0, k = 0;

	if (j->p == NULL)
		return 0;
	if (js_peek(j) != '[')
		return pcg_fail(err, "added_tokens: not an array");
	while ((r = js_next(j, '[', &k)) == 1) {
		if (n == cap) {
			added_tok *p = realloc(in, (cap = cap ? 2 * cap : 512) * sizeof *p);
			if (p == NULL || n >= INT32_MAX) {
				free(p ? p : in);
				return pcg_fail(err, "out of memory");
			}
			in = p;
		}
		if (parse_added_one(t, j, n, &in[n], err) < 0)
			goto out;
		n++;
	}
	if (r < 0)
		goto out;
	if ((ids = malloc((n ? n : 1) * sizeof *ids)) == NULL) {
		pcg_fail(err, "out of memory");
		goto out;
	}
	if (tok_add_batch(t, in, (int)n, ids, err) < 0)
		goto out;
	for (size_t i = 0; i < n; i++) {
		if (ids[i] != in[i].id) {
			pcg_fail(err, "added_tokens[%zu] '%.*s': id %d in the file, but HF tokenizers"
				 " would give it %d", i, (int)in[i].len, t->str.p + in[i].off,
				 in[i].id, ids[i]);
			goto out;
		}
	}
	rc = 0;
out:
	free(in);
	free(ids);
	return rc;
}

/* The small members, parsed by jansson. */
static int parse_root(tokenizer *t, const json_t *root, jscan *vocab, jscan *merges,
		      jscan *added, pcg_err *err)
{
	const json_t *v;
	const char *type;

	if ((v = field(root, "version")) && (!json_is_string(v) ||
					     strcmp(json_string_value(v), "1.0")))
		return pcg_fail(err, "version: only \"1.0\" is known");
	if ((v = field(root, "normalizer")))
		return pcg_fail(err, "normalizer: type %s is not supported (only null)", type_of(v));
	v = field(root, "decoder");
	if (v == NULL || strcmp(type = type_of(v), "ByteLevel"))
		return pcg_fail(err, "decoder: %s is not supported (only ByteLevel)",
				v ? type : "null");
	if (parse_model(t, field(root, "model"), vocab, merges, err) < 0) {
		pcg_err_prefix(err, "model");
		return -1;
	}
	if (parse_pre_tokenizer(t, field(root, "pre_tokenizer"), err) < 0) {
		pcg_err_prefix(err, "pre_tokenizer");
		return -1;
	}
	return parse_added(t, added, err);
}

/* Splits the file: model.vocab, model.merges and added_tokens become spans
 * for the scanner, the rest becomes the JSON text out for jansson. */
static int split_file(const char *json, size_t len, span big[3], text *out, pcg_err *err)
{
	jscan j = { json, json, json + len, NULL, 0, 0, err };
	int rc = -1, c = js_peek(&j);

	for (int i = 0; i < 3; i++)
		big[i] = (span){ NULL, 0 };
	if (c != '{')
		rc = c < 0 ? js_fail(&j, "empty") : pcg_fail(err, "not a JSON object");
	else if (skim(&j, NULL, big, out) < 0)
		rc = -1;
	else if (js_peek(&j) >= 0)
		rc = js_fail(&j, "text after the object");
	else
		rc = out->oom ? pcg_fail(err, "out of memory") : 0;
	for (int i = 0; i < 3; i++)
		if (big[i].n == 4 && !memcmp(big[i].p, "null", 4))
			big[i].p = NULL;
	free(j.buf);
	return rc;
}

tokenizer *tok_parse(const char *json, size_t len, pcg_err *err)
{
	tokenizer *t = calloc(1, sizeof *t);
	json_error_t je;
	json_t *root = NULL;
	text small = { NULL, 0, 0, 0 };
	span big[3];
	jscan js[3] = { { 0 } };

	if (t == NULL) {
		pcg_fail(err, "out of memory");
		return NULL;
	}
	t->unk_id = -1;
	tok_byte_level_init(t);
	if (tok_tries_build(t) < 0) {
		pcg_fail(err, "out of memory");
		goto fail;
	}
	if (compile(&t->word_re, "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}]",
		    PCRE2_ZERO_TERMINATED, 0, err) < 0)
		goto fail;
	if (tok_check_utf8(json, len, err) < 0 || split_file(json, len, big, &small, err) < 0)
		goto fail;
	root = json_loadb(small.p, small.n, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
	if (root == NULL) {
		pcg_fail(err, "not valid JSON: %s", je.text);
		goto fail;
	}
	for (int i = 0; i < 3; i++)
		js[i] = js_at(json, big[i], err);
	if (parse_root(t, root, &js[0], &js[1], &js[2], err) < 0)
		goto fail;
	for (int i = 0; i < 3; i++)
		free(js[i].buf);
	free(small.p);
	json_decref(root);
	return t;
fail:
	for (int i = 0; i < 3; i++)
		free(js[i].buf);
	free(small.p);
	json_decref(root);
	tok_free(&t);
	return NULL;
}

tokenizer *tok_load(const char *path, pcg_err *err)
{
	FILE *f = fopen(path, "rb");
	struct stat st;
	char *buf = NULL;
	tokenizer *t = NULL;

	if (f == NULL) {
		pcg_fail(err, "%s: %s", path, strerror(errno));
		return NULL;
	}
	if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
		pcg_fail(err, "%s: not a regular file", path);
	} else if ((size_t)st.st_size > TOK_MAX_BYTES) {
		pcg_fail(err, "%s: %lld bytes, more than a tokenizer.json can be (%zu)", path,
			 (long long)st.st_size, TOK_MAX_BYTES);
	} else if ((buf = malloc((size_t)st.st_size + 1)) == NULL) {
		pcg_fail(err, "%s: out of memory", path);
	} else if (fread(buf, 1, (size_t)st.st_size, f) != (size_t)st.st_size) {
		pcg_fail(err, "%s: read error", path);
	} else if ((t = tok_parse(buf, (size_t)st.st_size, err)) == NULL) {
		pcg_err_prefix(err, path);
	}
	free(buf);
	fclose(f);
	return t;
}

void tok_free(tokenizer **tp)
{
	tokenizer *t = *tp;

	if (t == NULL)
		return;
	for (int i = 0; i < t->n_steps; i++)
		pcre2_code_free(t->steps[i].re);
	pcre2_code_free(t->word_re);
	free(t->str.p);
	free(t->vocab.slot);
	free(t->added_map.slot);
	tok_u64map_clear(&t->merges);
	tok_u64map_clear(&t->edges);
	free(t->model_tok);
	free(t->id_added);
	free(t->added);
	free(t->node_tok);
	free(t);
	*tp = NULL;
}
