/* tokenizer.c: byte-level BPE from a Hugging Face tokenizer.json, following
 * HF tokenizers step by step (added_vocabulary.rs, pre_tokenizers/split.rs,
 * byte_level.rs, models/bpe) so that the ids are the same.
 *
 *   encode: added tokens (non-normalized ones over the whole text, then the
 *           normalized ones over what is left) -> each remaining run through
 *           the pre-tokenizer steps (regex splits, ByteLevel) -> BPE per piece
 *   decode: token strings -> ByteLevel byte map -> lossy UTF-8
 *
 * Reading tokenizer.json into the tables is tokenizer_load.c's.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer.h"

#include <pcre2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_impl.h"

/* ------------------------------------------------------------------ tables */

int64_t tok_arena_add(arena *a, const char *s, size_t n)
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

int tok_strmap_get(const strmap *m, const arena *a, const char *s, size_t n)
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
int tok_strmap_put(strmap *m, const arena *a, size_t off, size_t n, int val, int *old)
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
			tok_u64map_put(m, ok[i], ov[i]);
	free(ok);
	free(ov);
	return 0;
}

int tok_u64map_put(u64map *m, uint64_t k, uint64_t v)
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

void tok_u64map_clear(u64map *m)
{
	free(m->key);
	free(m->val);
	*m = (u64map){ 0 };
}

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

int tok_put_utf8(char *out, uint32_t c)
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
void tok_byte_level_init(tokenizer *t)
{
	int n = 0;

	for (int c = 0; c < 324; c++)
		t->char_byte[c] = -1;
	for (int b = 0; b < 256; b++) {
		int printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
		uint32_t c = printable ? (uint32_t)b : 256u + (uint32_t)n++;
		t->byte_len[b] = (unsigned char)tok_put_utf8(t->byte_utf8[b], c);
		t->char_byte[c] = (short)b;
		t->byte_id[b] = -1;
	}
}

/* ------------------------------------------------------------------- ids */

int tok_ids_reserve(tokenizer *t, int id)
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
	int a = tok_strmap_get(&t->added_map, &t->str, s, len);
	return a >= 0 ? t->added[a].id : tok_strmap_get(&t->vocab, &t->str, s, len);
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
	if ((c = node_new(t)) < 0 || tok_u64map_put(&t->edges, key, (uint64_t)c) < 0)
		return -1;
	return c;
}

/* Rebuilds both tries from the added tokens, as HF's refresh_added_tokens
 * does after every add_tokens call (a token may have moved between them). */
int tok_tries_build(tokenizer *t)
{
	tok_u64map_clear(&t->edges);
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
int tok_add_batch(tokenizer *t, const added_tok *in, int n, int *ids, pcg_err *err)
{
	int next = t->n_added == 0 ? t->n_model
		: t->max_added_id >= t->n_model || t->n_model == 0 ? t->max_added_id + 1
		: t->n_model;
	int added = 0;

	for (int i = 0; i < n; i++) {
		added_tok a = in[i];
		const char *s = t->str.p + a.off;
		int idx = tok_strmap_get(&t->added_map, &t->str, s, a.len), old;
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
		a.id = tok_strmap_get(&t->vocab, &t->str, s, a.len);
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
		if (tok_ids_reserve(t, a.id) < 0 ||
		    tok_strmap_put(&t->added_map, &t->str, a.off, a.len, t->n_added, &old) < 0)
			return pcg_fail(err, "out of memory");
		t->id_added[a.id] = t->n_added;
		t->added[t->n_added++] = a;
		if (a.id > t->max_added_id || t->n_added == 1)
			t->max_added_id = a.id;
		if (a.id >= t->n_ids)
			t->n_ids = a.id + 1;
		added++;
	}
	if (tok_tries_build(t) < 0)
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
		if ((off = tok_arena_add(&t->str, tokens[i], len)) < 0) {
			free(in);
			return pcg_fail(err, "out of memory");
		}
		/* AddedToken::from(content, special = false): normalized, no stripping. */
		in[i] = (added_tok){ (size_t)off, (uint32_t)len, -1, 0, 0, 0, 1, 0 };
	}
	rc = tok_add_batch(t, in, (int)n, NULL, err);
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
		int id = tok_strmap_get(&t->vocab, &t->str, e->buf, len);
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
		int a = tok_strmap_get(&t->added_map, &t->str, ts, tl);
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
			out_n += (size_t)tok_put_utf8(out + out_n, 0xfffd);
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
