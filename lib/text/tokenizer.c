/* tokenizer.c: byte-level BPE from a Hugging Face tokenizer.json, following
 * HF tokenizers step by step (added_vocabulary.rs, pre_tokenizers/split.rs,
 * byte_level.rs, models/bpe) so that the ids are the same.
 *
 *   encode: added tokens (non-normalized ones over the whole text, then the
 *           normalized ones over what is left) -> each remaining run through
 *           the pre-tokenizer steps (regex splits, ByteLevel) -> BPE per piece
 *   decode: token strings -> ByteLevel byte map -> lossy UTF-8
 *   load:   vocab, merges and added_tokens by a small scanner (they are
 *           nearly all of a 30 MB file), the rest by jansson
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

/* LLaSA's tokenizer.json is 30 MB; anything far larger is not a tokenizer. */
#define TOK_MAX_BYTES ((size_t)1 << 30)
/* Ids index arrays, so a file must not make us allocate for 2^31 of them;
 * the largest vocabularies in use have about 2^20 ids. 2^21 keeps the
 * largest of those arrays (16 bytes an id) at 32 MB, under the fuzz
 * target's 64 MB limit on one allocation (a vocab id of 8,828,881 found
 * it, then one near 2^22). */
#define TOK_MAX_ID (1 << 21)

/* ------------------------------------------------------------------ tables */

/* Token strings live in one arena and are named by offset and length, so
 * that NUL bytes are allowed and growing the arena moves no pointers. */
typedef struct arena {
	char *p;
	size_t len, cap;
} arena;

static int64_t arena_add(arena *a, const char *s, size_t n)
{
	if (a->len + n + 1 > a->cap) {
		size_t cap = a->cap ? a->cap : 1 << 16;
		while (a->len + n + 1 > cap)
			cap *= 2;
		char *p = realloc(a->p, cap);
		if (p == NULL)
			return -1;
		a->p = p;
		a->cap = cap;
	}
	memcpy(a->p + a->len, s, n);
	a->p[a->len + n] = 0;
	a->len += n + 1;
	return (int64_t)(a->len - n - 1);
}

static uint64_t hash_bytes(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a */
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
	return h;
}

static uint64_t hash_u64(uint64_t x)
{
	x ^= x >> 30; /* splitmix64's finalizer */
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* String -> int, open addressing; keys are arena spans. */
typedef struct str_slot {
	uint64_t hash;
	size_t off;
	uint32_t len;
	int val; /* -1: empty slot */
} str_slot;

typedef struct strmap {
	str_slot *slot;
	size_t cap, n; /* cap: a power of two, kept at least twice n */
} strmap;

static str_slot *strmap_find(const strmap *m, const arena *a, const char *s, size_t n,
			     uint64_t h)
{
	size_t i = h & (m->cap - 1);
	for (;; i = (i + 1) & (m->cap - 1)) {
		str_slot *e = &m->slot[i];
		if (e->val < 0 || (e->hash == h && e->len == n && !memcmp(a->p + e->off, s, n)))
			return e;
	}
}

static int strmap_get(const strmap *m, const arena *a, const char *s, size_t n)
{
	return m->cap ? strmap_find(m, a, s, n, hash_bytes(s, n))->val : -1;
}

static int strmap_grow(strmap *m, size_t want)
{
	size_t cap = m->cap ? m->cap : 64;
	while (cap < 2 * want)
		cap *= 2;
	if (cap == m->cap)
		return 0;
	str_slot *old = m->slot, *s = malloc(cap * sizeof *s);
	size_t old_cap = m->cap;
	if (s == NULL)
		return -1;
	for (size_t i = 0; i < cap; i++)
		s[i].val = -1;
	m->slot = s;
	m->cap = cap;
	for (size_t i = 0; i < old_cap; i++) {
		if (old[i].val < 0)
			continue;
		size_t j = old[i].hash & (cap - 1);
		while (s[j].val >= 0)
			j = (j + 1) & (cap - 1);
		s[j] = old[i];
	}
	free(old);
	return 0;
}

/* Sets key (already in the arena at off) to val; returns the old value or -1. */
static int strmap_put(strmap *m, const arena *a, size_t off, size_t n, int val, int *old)
{
	if (strmap_grow(m, m->n + 1) < 0)
		return -1;
	uint64_t h = hash_bytes(a->p + off, n);
	str_slot *e = strmap_find(m, a, a->p + off, n, h);
	*old = e->val;
	if (e->val < 0) {
		e->hash = h;
		e->off = off;
		e->len = (uint32_t)n;
		m->n++;
	}
	e->val = val;
	return 0;
}

/* uint64 -> uint64, open addressing; UINT64_MAX is the empty key. Holds the
 * merges ((left id, right id) -> (rank, merged id)) and the trie edges
 * ((node, byte) -> child). */
typedef struct u64map {
	uint64_t *key, *val;
	size_t cap, n;
} u64map;

static int u64map_put(u64map *m, uint64_t k, uint64_t v);

static int u64map_get(const u64map *m, uint64_t k, uint64_t *v)
{
	if (m->cap == 0)
		return 0;
	for (size_t i = hash_u64(k) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
		if (m->key[i] == k) {
			*v = m->val[i];
			return 1;
		}
		if (m->key[i] == UINT64_MAX)
			return 0;
	}
}

/* Makes room for n entries at a load of at most 1/2. */
static int u64map_reserve(u64map *m, size_t n)
{
	size_t cap = m->cap ? m->cap : 256, old_cap = m->cap;
	while (cap < 2 * n)
		cap *= 2;
	if (cap == m->cap)
		return 0;
	uint64_t *key = malloc(cap * sizeof *key), *val = malloc(cap * sizeof *val);
	uint64_t *ok = m->key, *ov = m->val;
	if (key == NULL || val == NULL) {
		free(key);
		free(val);
		return -1;
	}
	memset(key, 0xff, cap * sizeof *key);
	*m = (u64map){ key, val, cap, 0 };
	for (size_t i = 0; i < old_cap; i++)
		if (ok[i] != UINT64_MAX)
			u64map_put(m, ok[i], ov[i]);
	free(ok);
	free(ov);
	return 0;
}

static int u64map_put(u64map *m, uint64_t k, uint64_t v)
{
	if (2 * (m->n + 1) > m->cap && u64map_reserve(m, m->n + 1) < 0)
		return -1;
	size_t i = hash_u64(k) & (m->cap - 1);
	while (m->key[i] != UINT64_MAX && m->key[i] != k)
		i = (i + 1) & (m->cap - 1);
	if (m->key[i] == UINT64_MAX)
		m->n++;
	m->key[i] = k;
	m->val[i] = v;
	return 0;
}

static void u64map_clear(u64map *m)
{
	free(m->key);
	free(m->val);
	*m = (u64map){ 0 };
}

/* ------------------------------------------------------------- the object */

typedef struct added_tok {
	size_t off;
	uint32_t len;
	int id;
	unsigned char single_word, lstrip, rstrip, normalized, special;
} added_tok;

/* The two tries share one edge table: root 0 holds the non-normalized
 * added tokens, root 1 the normalized ones (HF's split_trie and
 * split_normalized_trie). */
enum { ROOT_RAW, ROOT_NORM };

/* A pre-tokenizer step: a regex split (Isolated), or, with re NULL,
 * ByteLevel's add_prefix_space. */
typedef struct step {
	pcre2_code *re;
} step;

struct tokenizer {
	arena str;

	/* The BPE model. */
	strmap vocab;       /* token -> model id */
	int n_model;        /* entries in the vocab: HF's model.get_vocab_size() */
	u64map merges;      /* (a << 32 | b) -> (rank << 32 | merged id) */
	int ignore_merges, unk_id, fuse_unk;

	/* Per id: its model token (len UINT32_MAX: none) and its added token. */
	struct { size_t off; uint32_t len; } *model_tok;
	int *id_added; /* index into added, -1: none */
	int id_cap, n_ids;

	/* Added tokens. */
	added_tok *added;
	int n_added, added_cap, max_added_id;
	strmap added_map; /* content -> index into added */
	u64map edges;     /* (node << 8 | byte) -> child node */
	int *node_tok;    /* node -> index into added, -1: none */
	int n_nodes, nodes_cap;
	unsigned char first[2][256]; /* bytes that start a token of each trie */
	pcre2_code *word_re; /* a \w character as Rust's regex crate has it */

	/* ByteLevel. */
	char byte_utf8[256][3];
	unsigned char byte_len[256];
	int byte_id[256];     /* model id of each byte's character, -1: none */
	short char_byte[324]; /* the inverse map, -1: not a byte character */

	step steps[16];
	int n_steps;
};

/* ----------------------------------------------------------------- UTF-8 */

/* The length of the valid UTF-8 sequence at s[i] (1..4), or minus the length
 * of its maximal invalid prefix (Unicode's "maximal subpart", which Rust's
 * from_utf8_lossy replaces by one U+FFFD); *why says what is wrong. */
static int utf8_step(const unsigned char *s, size_t n, size_t i, uint32_t *cp,
		     const char **why)
{
	unsigned b = s[i], lo = 0x80, hi = 0xbf;
	int len;

	if (b < 0x80) {
		*cp = b;
		return 1;
	}
	if (b >= 0xc2 && b <= 0xdf)
		len = 2;
	else if (b >= 0xe0 && b <= 0xef)
		len = 3;
	else if (b >= 0xf0 && b <= 0xf4)
		len = 4;
	else {
		*why = b < 0xc0 ? "unexpected continuation byte" : b < 0xc2 ? "overlong encoding"
			: "byte that never occurs in UTF-8";
		return -1;
	}
	if (b == 0xe0)
		lo = 0xa0;
	else if (b == 0xed)
		hi = 0x9f;
	else if (b == 0xf0)
		lo = 0x90;
	else if (b == 0xf4)
		hi = 0x8f;
	uint32_t c = b & (0x7f >> len);
	for (int k = 1; k < len; k++) {
		if (i + k >= n) {
			*why = "truncated sequence";
			return -k;
		}
		unsigned x = s[i + k];
		if (x < lo || x > hi) {
			*why = k > 1 || (x >= 0x80 && x <= 0xbf) == 0 ? "truncated sequence"
				: b == 0xe0 || b == 0xf0 ? "overlong encoding"
				: b == 0xed ? "surrogate code point" : "code point beyond U+10FFFF";
			return -k;
		}
		c = c << 6 | (x & 0x3f);
		lo = 0x80;
		hi = 0xbf;
	}
	*cp = c;
	return len;
}

int tok_check_utf8(const char *s, size_t len, pcg_err *err)
{
	const unsigned char *u = (const unsigned char *)s;
	const char *why = "";
	uint32_t cp;

	for (size_t i = 0; i < len;) {
		if (u[i] < 0x80) { /* the common case, without the call */
			i++;
			continue;
		}
		int k = utf8_step(u, len, i, &cp, &why);
		if (k < 0)
			return pcg_fail(err, "invalid UTF-8 at byte %zu: %s", i, why);
		i += (size_t)k;
	}
	return 0;
}

static int put_utf8(char *out, uint32_t c)
{
	if (c < 0x80) {
		out[0] = (char)c;
		return 1;
	}
	if (c < 0x800) {
		out[0] = (char)(0xc0 | c >> 6);
		out[1] = (char)(0x80 | (c & 0x3f));
		return 2;
	}
	if (c < 0x10000) {
		out[0] = (char)(0xe0 | c >> 12);
		out[1] = (char)(0x80 | (c >> 6 & 0x3f));
		out[2] = (char)(0x80 | (c & 0x3f));
		return 3;
	}
	out[0] = (char)(0xf0 | c >> 18);
	out[1] = (char)(0x80 | (c >> 12 & 0x3f));
	out[2] = (char)(0x80 | (c >> 6 & 0x3f));
	out[3] = (char)(0x80 | (c & 0x3f));
	return 4;
}

/* Rust's char::is_whitespace (the White_Space property), which the regex
 * crate's \s, used by HF for lstrip and rstrip, also matches. */
static int is_space(uint32_t c)
{
	return (c >= 0x9 && c <= 0xd) || c == 0x20 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
	       (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
	       c == 0x205f || c == 0x3000;
}

/* ------------------------------------------------------------- ByteLevel */

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the
 * other 68 to U+0100.. in byte order, so every byte is a visible char. */
static void byte_level_init(tokenizer *t)
{
	int n = 0;

	for (int c = 0; c < 324; c++)
		t->char_byte[c] = -1;
	for (int b = 0; b < 256; b++) {
		int printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
		uint32_t c = printable ? (uint32_t)b : 256u + (uint32_t)n++;
		t->byte_len[b] = (unsigned char)put_utf8(t->byte_utf8[b], c);
		t->char_byte[c] = (short)b;
		t->byte_id[b] = -1;
	}
}

/* ------------------------------------------------------------------- ids */

static int ids_reserve(tokenizer *t, int id)
{
	if (id < t->id_cap)
		return 0;
	int cap = t->id_cap ? t->id_cap : 1024;
	while (cap <= id)
		cap *= 2;
	void *m = realloc(t->model_tok, (size_t)cap * sizeof *t->model_tok);
	if (m == NULL)
		return -1;
	t->model_tok = m;
	int *a = realloc(t->id_added, (size_t)cap * sizeof *a);
	if (a == NULL)
		return -1;
	t->id_added = a;
	for (int i = t->id_cap; i < cap; i++) {
		t->model_tok[i].len = UINT32_MAX;
		t->id_added[i] = -1;
	}
	t->id_cap = cap;
	return 0;
}

int tok_token_id(const tokenizer *t, const char *s, size_t len)
{
	int a = strmap_get(&t->added_map, &t->str, s, len);
	return a >= 0 ? t->added[a].id : strmap_get(&t->vocab, &t->str, s, len);
}

const char *tok_token_str(const tokenizer *t, int id, size_t *len)
{
	if (id < 0 || id >= t->n_ids)
		return NULL;
	if (t->id_added[id] >= 0) {
		const added_tok *a = &t->added[t->id_added[id]];
		*len = a->len;
		return t->str.p + a->off;
	}
	if (t->model_tok[id].len == UINT32_MAX)
		return NULL;
	*len = t->model_tok[id].len;
	return t->str.p + t->model_tok[id].off;
}

int tok_vocab_size(const tokenizer *t)
{
	return t->n_ids;
}

int tok_is_special(const tokenizer *t, int id)
{
	return id >= 0 && id < t->n_ids && t->id_added[id] >= 0 &&
	       t->added[t->id_added[id]].special;
}

/* ----------------------------------------------------------- added tokens */

static int node_new(tokenizer *t)
{
	if (t->n_nodes == t->nodes_cap) {
		int cap = t->nodes_cap ? 2 * t->nodes_cap : 1024;
		int *p = realloc(t->node_tok, (size_t)cap * sizeof *p);
		if (p == NULL)
			return -1;
		t->node_tok = p;
		t->nodes_cap = cap;
	}
	t->node_tok[t->n_nodes] = -1;
	return t->n_nodes++;
}

/* The child of node for byte b, made when missing; -1: out of memory. */
static int trie_child(tokenizer *t, int node, unsigned char b)
{
	uint64_t v, key = (uint64_t)node << 8 | b;
	int c;

	if (u64map_get(&t->edges, key, &v))
		return (int)v;
	if ((c = node_new(t)) < 0 || u64map_put(&t->edges, key, (uint64_t)c) < 0)
		return -1;
	return c;
}

/* Rebuilds both tries from the added tokens, as HF's refresh_added_tokens
 * does after every add_tokens call (a token may have moved between them). */
static int tries_build(tokenizer *t)
{
	u64map_clear(&t->edges);
	t->n_nodes = 0;
	memset(t->first, 0, sizeof t->first);
	if (node_new(t) != ROOT_RAW || node_new(t) != ROOT_NORM)
		return -1;
	for (int i = 0; i < t->n_added; i++) {
		const added_tok *a = &t->added[i];
		const unsigned char *s = (const unsigned char *)t->str.p + a->off;
		int node = a->normalized ? ROOT_NORM : ROOT_RAW;
		if (t->id_added[a->id] != i)
			continue; /* an id taken over by a later token */
		for (uint32_t k = 0; k < a->len; k++)
			if ((node = trie_child(t, node, s[k])) < 0)
				return -1;
		t->node_tok[node] = i;
		t->first[a->normalized][s[0]] = 1;
	}
	return 0;
}

/* HF AddedVocabulary::add_tokens for one batch: a content already present
 * with the same options is skipped; otherwise it keeps the id it has (as an
 * added or a model token) or gets the next one. ids[i], when ids is not
 * NULL, receives the id of the i-th token (-1 for an empty one). Returns the
 * number of tokens added. */
static int add_batch(tokenizer *t, const added_tok *in, int n, int *ids, pcg_err *err)
{
	int next = t->n_added == 0 ? t->n_model
		: t->max_added_id >= t->n_model || t->n_model == 0 ? t->max_added_id + 1
		: t->n_model;
	int added = 0;

	for (int i = 0; i < n; i++) {
		added_tok a = in[i];
		const char *s = t->str.p + a.off;
		int idx = strmap_get(&t->added_map, &t->str, s, a.len), old;
		if (ids)
			ids[i] = -1;
		if (a.len == 0)
			continue;
		if (idx >= 0) {
			added_tok *e = &t->added[idx];
			if (ids)
				ids[i] = e->id;
			if (e->single_word == a.single_word && e->lstrip == a.lstrip &&
			    e->rstrip == a.rstrip && e->normalized == a.normalized &&
			    e->special == a.special)
				continue;
			/* Same content, new options: HF replaces the token under its id,
			 * but a content once special stays in the special set. */
			a.special |= e->special;
			a.id = e->id;
			*e = a;
			added++;
			continue;
		}
		a.id = strmap_get(&t->vocab, &t->str, s, a.len);
		if (a.id < 0) {
			if (next >= TOK_MAX_ID)
				return pcg_fail(err, "too many tokens");
			a.id = next++;
		}
		if (ids)
			ids[i] = a.id;
		if (t->n_added == t->added_cap) {
			int cap = t->added_cap ? 2 * t->added_cap : 256;
			added_tok *p = realloc(t->added, (size_t)cap * sizeof *p);
			if (p == NULL)
				return pcg_fail(err, "out of memory");
			t->added = p;
			t->added_cap = cap;
		}
		if (ids_reserve(t, a.id) < 0 ||
		    strmap_put(&t->added_map, &t->str, a.off, a.len, t->n_added, &old) < 0)
			return pcg_fail(err, "out of memory");
		t->id_added[a.id] = t->n_added;
		t->added[t->n_added++] = a;
		if (a.id > t->max_added_id || t->n_added == 1)
			t->max_added_id = a.id;
		if (a.id >= t->n_ids)
			t->n_ids = a.id + 1;
		added++;
	}
	if (tries_build(t) < 0)
		return pcg_fail(err, "out of memory");
	return added;
}

int tok_add_tokens(tokenizer *t, const char *const *tokens, size_t n, pcg_err *err)
{
	added_tok *in = malloc((n ? n : 1) * sizeof *in);
	int rc;

	if (in == NULL || n > INT32_MAX) {
		free(in);
		return pcg_fail(err, "out of memory");
	}
	for (size_t i = 0; i < n; i++) {
		size_t len = strlen(tokens[i]);
		int64_t off;
		if (tok_check_utf8(tokens[i], len, err) < 0) {
			char what[32];
			snprintf(what, sizeof what, "token %zu", i);
			pcg_err_prefix(err, what);
			free(in);
			return -1;
		}
		if ((off = arena_add(&t->str, tokens[i], len)) < 0) {
			free(in);
			return pcg_fail(err, "out of memory");
		}
		/* AddedToken::from(content, special = false): normalized, no stripping. */
		in[i] = (added_tok){ (size_t)off, (uint32_t)len, -1, 0, 0, 0, 1, 0 };
	}
	rc = add_batch(t, in, (int)n, NULL, err);
	free(in);
	return rc;
}

/* ---------------------------------------------------------------- encode */

typedef struct sym {
	int id, prev, next, alive;
} sym;

typedef struct merge {
	uint32_t rank, pos;
	int id;
} merge;

/* What one encode call needs; the tokenizer itself stays read-only. */
typedef struct enc {
	const tokenizer *t;
	int *ids;
	size_t n, cap;
	char *buf;
	size_t buf_cap;
	sym *sym;
	merge *heap;
	size_t sym_cap, n_heap;
	pcre2_match_data *md;
	pcre2_match_context *mc;
	pcre2_jit_stack *js;
	pcg_err *err;
} enc;

static int emit(enc *e, int id)
{
	if (e->n == e->cap) {
		size_t cap = e->cap ? 2 * e->cap : 64;
		int *p = realloc(e->ids, cap * sizeof *p);
		if (p == NULL)
			return pcg_fail(e->err, "out of memory");
		e->ids = p;
		e->cap = cap;
	}
	e->ids[e->n++] = id;
	return 0;
}

static int merge_less(merge a, merge b)
{
	return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos;
}

static void heap_push(enc *e, merge m)
{
	size_t i = e->n_heap++;
	while (i > 0 && merge_less(m, e->heap[(i - 1) / 2])) {
		e->heap[i] = e->heap[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	e->heap[i] = m;
}

static merge heap_pop(enc *e)
{
	merge top = e->heap[0], last = e->heap[--e->n_heap];
	size_t i = 0, n = e->n_heap;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= n)
			break;
		if (c + 1 < n && merge_less(e->heap[c + 1], e->heap[c]))
			c++;
		if (!merge_less(e->heap[c], last))
			break;
		e->heap[i] = e->heap[c];
		i = c;
	}
	if (n > 0)
		e->heap[i] = last;
	return top;
}

/* Pushes the merge of symbols pos and pos's next, if there is one. */
static void push_pair(enc *e, int pos)
{
	uint64_t v;
	int nx = e->sym[pos].next;

	if (nx >= 0 && u64map_get(&e->t->merges,
				  (uint64_t)(uint32_t)e->sym[pos].id << 32 | (uint32_t)e->sym[nx].id, &v))
		heap_push(e, (merge){ (uint32_t)(v >> 32), (uint32_t)pos, (int)(uint32_t)v });
}

/* BPE of one pre-token of n raw bytes: HF BPE::tokenize (ignore_merges,
 * then merge_word + Word::merge_all). A pair can be queued more than once;
 * a stale entry is recognised because its pair no longer merges into the
 * queued id. Lowest rank first, leftmost on ties. */
static int bpe(enc *e, const unsigned char *s, size_t n)
{
	const tokenizer *t = e->t;
	size_t m = 0, len = 0;
	int unk = 0;

	if (n * 2 > e->buf_cap || n + 1 > e->sym_cap) {
		size_t cap = 2 * n + 64;
		char *b = realloc(e->buf, cap);
		sym *y = b ? realloc(e->sym, cap * sizeof *y) : NULL;
		merge *h = y ? realloc(e->heap, 2 * cap * sizeof *h) : NULL;
		if (b)
			e->buf = b;
		if (y)
			e->sym = y;
		if (h == NULL)
			return pcg_fail(e->err, "out of memory");
		e->heap = h;
		e->buf_cap = e->sym_cap = cap;
	}
	if (t->ignore_merges) {
		for (size_t i = 0; i < n; i++) {
			memcpy(e->buf + len, t->byte_utf8[s[i]], t->byte_len[s[i]]);
			len += t->byte_len[s[i]];
		}
		int id = strmap_get(&t->vocab, &t->str, e->buf, len);
		if (id >= 0)
			return emit(e, id);
	}
	/* One symbol per byte; a byte whose character is not in the vocab
	 * becomes unk_token (consecutive ones fused with fuse_unk), or is
	 * dropped when there is none, as merge_word does. */
	for (size_t i = 0; i < n; i++) {
		int id = t->byte_id[s[i]];
		if (id < 0 && t->unk_id < 0)
			continue;
		if (id < 0 && unk && t->fuse_unk)
			continue;
		unk = id < 0;
		e->sym[m] = (sym){ id < 0 ? t->unk_id : id, (int)m - 1, (int)m + 1, 1 };
		m++;
	}
	if (m == 0)
		return 0;
	e->sym[m - 1].next = -1;
	e->n_heap = 0;
	for (size_t i = 0; i + 1 < m; i++)
		push_pair(e, (int)i);
	while (e->n_heap > 0) {
		merge top = heap_pop(e);
		sym *a = &e->sym[top.pos];
		uint64_t v;
		if (!a->alive || a->next < 0)
			continue;
		sym *b = &e->sym[a->next];
		if (!u64map_get(&t->merges, (uint64_t)(uint32_t)a->id << 32 | (uint32_t)b->id, &v) ||
		    (int)(uint32_t)v != top.id)
			continue;
		a->id = top.id;
		b->alive = 0;
		a->next = b->next;
		if (b->next >= 0)
			e->sym[b->next].prev = (int)top.pos;
		if (a->prev >= 0)
			push_pair(e, a->prev);
		push_pair(e, (int)top.pos);
	}
	for (size_t i = 0; i < m; i++)
		if (e->sym[i].alive && emit(e, e->sym[i].id) < 0)
			return -1;
	return 0;
}

static int run_steps(enc *e, int k, const char *s, size_t n);

/* HF's Split with behavior Isolated: every match and every gap between
 * matches is a piece. Empty matches follow the onig crate's find_iter: one
 * right after the previous match is skipped by moving one character on. */
static int split_step(enc *e, int k, const char *s, size_t n)
{
	const pcre2_code *re = e->t->steps[k].re;
	size_t prev = 0, pos = 0, last_end = SIZE_MAX;

	while (pos <= n) {
		int rc = pcre2_match(re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, e->md, e->mc);
		if (rc == PCRE2_ERROR_NOMATCH)
			break;
		if (rc < 0) {
			PCRE2_UCHAR msg[120];
			pcre2_get_error_message(rc, msg, sizeof msg);
			return pcg_fail(e->err, "pre_tokenizer regex: %s", (char *)msg);
		}
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
		size_t ms = ov[0], me = ov[1];
		if (ms == me && me == last_end) {
			if (me >= n)
				break;
			pos = me + 1;
			while (pos < n && ((unsigned char)s[pos] & 0xc0) == 0x80)
				pos++;
			continue;
		}
		pos = last_end = me;
		if (prev != ms && run_steps(e, k + 1, s + prev, ms - prev) < 0)
			return -1;
		if (run_steps(e, k + 1, s + ms, me - ms) < 0)
			return -1;
		prev = me;
	}
	return prev != n ? run_steps(e, k + 1, s + prev, n - prev) : 0;
}

/* The pre-tokenizer steps from k on, then BPE. Empty pieces vanish, as
 * PreTokenizedString::split drops them. */
static int run_steps(enc *e, int k, const char *s, size_t n)
{
	if (n == 0)
		return 0;
	if (k == e->t->n_steps)
		return bpe(e, (const unsigned char *)s, n);
	if (e->t->steps[k].re)
		return split_step(e, k, s, n);
	/* ByteLevel's add_prefix_space: a space before a piece that lacks one. */
	if (s[0] == ' ')
		return run_steps(e, k + 1, s, n);
	char *p = malloc(n + 1);
	if (p == NULL)
		return pcg_fail(e->err, "out of memory");
	p[0] = ' ';
	memcpy(p + 1, s, n);
	int rc = run_steps(e, k + 1, p, n + 1);
	free(p);
	return rc;
}

/* Whether the character at s[i] (or, with before, the one ending at s[i])
 * is a \w of Rust's regex crate: Alphabetic, Mark, Nd, Pc, Join_Control. */
static int word_char(enc *e, const char *s, size_t n, size_t i, int before)
{
	if (before) {
		if (i == 0)
			return 0;
		do
			i--;
		while (i > 0 && ((unsigned char)s[i] & 0xc0) == 0x80);
	} else if (i >= n) {
		return 0;
	}
	return pcre2_match(e->t->word_re, (PCRE2_SPTR)s, n, i,
			   PCRE2_ANCHORED | PCRE2_NO_UTF_CHECK, e->md, NULL) >= 0;
}

/* The longest added token of trie root that starts at s[i], or -1. */
static int longest_at(const tokenizer *t, int root, const unsigned char *s, size_t n, size_t i,
		      size_t *end)
{
	int node = root, best = -1;
	uint64_t v;

	for (size_t j = i; j < n; j++) {
		if (!u64map_get(&t->edges, (uint64_t)node << 8 | s[j], &v))
			break;
		node = (int)v;
		if (t->node_tok[node] >= 0) {
			best = t->node_tok[node];
			*end = j + 1;
		}
	}
	return best;
}

static int encode_run(enc *e, int root, const char *s, size_t n);

/* A piece between added tokens: after the raw pass come the normalized
 * tokens (there is no normalizer), then the pre-tokenizer. */
static int encode_piece(enc *e, int root, const char *s, size_t n)
{
	if (n == 0)
		return 0;
	return root == ROOT_RAW ? encode_run(e, ROOT_NORM, s, n) : run_steps(e, 0, s, n);
}

/* HF AddedVocabulary::find_matches over s with one trie: leftmost-longest
 * matches; single_word drops a match inside a word; lstrip and rstrip take
 * the whitespace around a match into the token. The scan goes on after the
 * match as found, whatever rstrip took. */
static int encode_run(enc *e, int root, const char *s, size_t n)
{
	const tokenizer *t = e->t;
	const unsigned char *u = (const unsigned char *)s;
	size_t start_offset = 0, i = 0;

	while (i < n) {
		size_t end = 0;
		int a;
		if (!t->first[root][u[i]] || (a = longest_at(t, root, u, n, i, &end)) < 0) {
			i++;
			continue;
		}
		const added_tok *tk = &t->added[a];
		size_t start = i, stop = end;
		i = end;
		if (tk->single_word && (word_char(e, s, n, start, 1) || word_char(e, s, n, stop, 0)))
			continue;
		if (tk->lstrip) {
			size_t ns = start;
			while (ns > 0) {
				size_t p = ns - 1;
				uint32_t cp;
				const char *why;
				while (p > 0 && (u[p] & 0xc0) == 0x80)
					p--;
				utf8_step(u, n, p, &cp, &why);
				if (!is_space(cp))
					break;
				ns = p;
			}
			start = ns > start_offset ? ns : start_offset;
		}
		if (tk->rstrip) {
			uint32_t cp;
			const char *why;
			int k;
			while (stop < n && (k = utf8_step(u, n, stop, &cp, &why)) > 0 && is_space(cp))
				stop += (size_t)k;
		}
		if (start_offset < start && encode_piece(e, root, s + start_offset, start - start_offset) < 0)
			return -1;
		if (emit(e, tk->id) < 0)
			return -1;
		start_offset = stop;
	}
	return start_offset < n ? encode_piece(e, root, s + start_offset, n - start_offset) : 0;
}

int tok_encode(const tokenizer *t, const char *text, size_t len, int **ids, size_t *n,
	       pcg_err *err)
{
	enc e = { .t = t, .err = err };
	int rc = -1;

	*ids = NULL;
	*n = 0;
	if (tok_check_utf8(text, len, err) < 0)
		return -1;
	/* One match block fits every pattern: only the whole match is read.
	 * A JIT stack beyond the default 32 KB for long runs of whitespace. */
	e.md = pcre2_match_data_create(1, NULL);
	e.mc = pcre2_match_context_create(NULL);
	e.js = pcre2_jit_stack_create(32 << 10, 8 << 20, NULL);
	if (e.md == NULL || e.mc == NULL || e.js == NULL) {
		pcg_fail(err, "out of memory");
		goto out;
	}
	pcre2_jit_stack_assign(e.mc, NULL, e.js);
	if (encode_run(&e, ROOT_RAW, text, len) < 0)
		goto out;
	*ids = e.ids;
	*n = e.n;
	e.ids = NULL;
	rc = 0;
out:
	free(e.ids);
	free(e.buf);
	free(e.sym);
	free(e.heap);
	pcre2_match_data_free(e.md);
	pcre2_match_context_free(e.mc);
	pcre2_jit_stack_free(e.js);
	return rc;
}

/* ---------------------------------------------------------------- decode */

char *tok_decode(const tokenizer *t, const int *ids, size_t n, int skip_special, size_t *len,
		 pcg_err *err)
{
	size_t cap = 64, m = 0, out_n = 0;
	unsigned char *raw = malloc(cap);
	char *out = NULL;

	if (raw == NULL) {
		pcg_fail(err, "out of memory");
		return NULL;
	}
	for (size_t i = 0; i < n; i++) {
		size_t tl;
		const char *ts = tok_token_str(t, ids[i], &tl);
		if (ts == NULL) {
			pcg_fail(err, "id %d is not in the vocabulary", ids[i]);
			goto fail;
		}
		/* HF skips by content: any token whose string is a special one. */
		int a = strmap_get(&t->added_map, &t->str, ts, tl);
		if (skip_special && a >= 0 && t->added[a].special)
			continue;
		if (m + tl > cap) {
			while (m + tl > cap)
				cap *= 2;
			unsigned char *p = realloc(raw, cap);
			if (p == NULL) {
				pcg_fail(err, "out of memory");
				goto fail;
			}
			raw = p;
		}
		/* ByteLevel: a token made only of byte characters becomes those
		 * bytes; any other token (an added "<|s_5|>" has only ASCII, so it
		 * maps to itself) is copied as it is. */
		size_t start = m;
		const unsigned char *u = (const unsigned char *)ts;
		for (size_t j = 0; j < tl;) {
			uint32_t cp;
			const char *why;
			int k = utf8_step(u, tl, j, &cp, &why);
			if (k < 0 || cp >= 324 || t->char_byte[cp] < 0) {
				memcpy(raw + start, ts, tl);
				m = start + tl;
				break;
			}
			raw[m++] = (unsigned char)t->char_byte[cp];
			j += (size_t)k;
		}
	}
	/* String::from_utf8_lossy: each maximal invalid subpart becomes U+FFFD,
	 * at most 3 bytes out for each byte in. */
	out = malloc(3 * m + 1);
	if (out == NULL) {
		pcg_fail(err, "out of memory");
		goto fail;
	}
	for (size_t j = 0; j < m;) {
		uint32_t cp;
		const char *why;
		int k = utf8_step(raw, m, j, &cp, &why);
		if (k > 0) {
			memcpy(out + out_n, raw + j, (size_t)k);
			out_n += (size_t)k;
			j += (size_t)k;
		} else {
			out_n += (size_t)put_utf8(out + out_n, 0xfffd);
			j += (size_t)-k;
		}
	}
	out[out_n] = 0;
	if (len)
		*len = out_n;
	free(raw);
	return out;
fail:
	free(raw);
	return NULL;
}

/* ---------------------------------------------------------------- loading */

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

/* jansson would turn LLaSA's tokenizer.json into 1.5 million values, which
 * alone takes about a second. The members that hold nearly all of them
 * (model.vocab, model.merges, added_tokens) are therefore read by this small
 * scanner straight into the tables; jansson reads the rest. The scanner is
 * as strict as jansson: JSON syntax, escapes, surrogate pairs, no control
 * characters in strings (UTF-8 is checked for the whole file beforehand). */
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
		if (js_put(j, out, (size_t)put_utf8(out, (uint32_t)c)) < 0)
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
		if (ids_reserve(t, (int)id) < 0 || (off = arena_add(&t->str, j->buf, j->len)) < 0 ||
		    strmap_put(&t->vocab, &t->str, (size_t)off, j->len, (int)id, &old) < 0)
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
		int ia = strmap_get(&t->vocab, &t->str, ab, la);
		int ib = strmap_get(&t->vocab, &t->str, ab + la, lb);
		int im = strmap_get(&t->vocab, &t->str, ab, la + lb);
		if (ia < 0 || ib < 0 || im < 0)
			return pcg_fail(err, "merges[%zu]: '%.*s' is not in the vocab", i,
					ia < 0 ? (int)la : ib < 0 ? (int)lb : (int)(la + lb),
					ia < 0 || ib >= 0 ? ab : ab + la);
		if (u64map_put(&t->merges, (uint64_t)ia << 32 | (uint32_t)ib,
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
		t->unk_id = strmap_get(&t->vocab, &t->str, json_string_value(v), json_string_length(v));
		if (t->unk_id < 0)
			return pcg_fail(err, "unk_token '%s' is not in the vocab", json_string_value(v));
	}
	for (int b = 0; b < 256; b++)
		t->byte_id[b] = strmap_get(&t->vocab, &t->str, t->byte_utf8[b], t->byte_len[b]);
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
			if ((off = arena_add(&t->str, j->buf, j->len)) < 0)
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
	if (add_batch(t, in, (int)n, ids, err) < 0)
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
	byte_level_init(t);
	if (tries_build(t) < 0) {
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
	u64map_clear(&t->merges);
	u64map_clear(&t->edges);
	free(t->model_tok);
	free(t->id_added);
	free(t->added);
	free(t->node_tok);
	free(t);
	*tp = NULL;
}
