/* tokenizer_impl.h: the tokenizer's object and the tables it is made of,
 * shared by tokenizer.c (encode, decode, added tokens) and tokenizer_load.c
 * (tokenizer.json); everyone else calls tokenizer.h.
 */
#ifndef PCG_TOKENIZER_IMPL_H
#define PCG_TOKENIZER_IMPL_H

#include <pcre2.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"

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

/* uint64 -> uint64, open addressing; UINT64_MAX is the empty key. Holds the
 * merges ((left id, right id) -> (rank, merged id)) and the trie edges
 * ((node, byte) -> child). */
typedef struct u64map {
	uint64_t *key, *val;
	size_t cap, n;
} u64map;

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

/* Adds s[0..n) and a NUL; returns its offset, or -1 when out of memory. */
int64_t tok_arena_add(arena *a, const char *s, size_t n);
/* The value of key s[0..n), or -1 when it is absent. */
int tok_strmap_get(const strmap *m, const arena *a, const char *s, size_t n);
/* Sets key (already in the arena at off) to val, *old to the value it had
 * or -1; returns 0, or -1 when out of memory. */
int tok_strmap_put(strmap *m, const arena *a, size_t off, size_t n, int val, int *old);
/* Returns 0, or -1 when out of memory. */
int tok_u64map_put(u64map *m, uint64_t k, uint64_t v);
/* Frees the map's arrays and leaves it empty. */
void tok_u64map_clear(u64map *m);

/* ------------------------------------------------------------ the helpers */

/* Writes c as UTF-8 to out (up to 4 bytes); returns its length. */
int tok_put_utf8(char *out, uint32_t c);
/* Fills the ByteLevel maps of a new tokenizer (byte_id aside: the vocab's). */
void tok_byte_level_init(tokenizer *t);
/* Grows the per-id arrays to hold id; returns 0, or -1 when out of memory. */
int tok_ids_reserve(tokenizer *t, int id);
/* Rebuilds both tries from the added tokens; returns 0, or -1 when out of
 * memory. */
int tok_tries_build(tokenizer *t);
/* HF AddedVocabulary::add_tokens for one batch (see tokenizer.c); returns
 * the number of tokens added, or -1 with err filled. */
int tok_add_batch(tokenizer *t, const added_tok *in, int n, int *ids, pcg_err *err);

#endif
