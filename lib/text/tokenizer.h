/* tokenizer.h: the byte-level BPE tokenizer of a Hugging Face tokenizer.json
 * (Llama 3, LLaSA, GPT-2 style), giving the ids HF tokenizers gives.
 *
 * Supported: model BPE (vocab, merges as "a b" strings or ["a", "b"] pairs,
 * ignore_merges, unk_token, fuse_unk); normalizer null; pre_tokenizer
 * ByteLevel, or a Sequence of Split (Regex or String pattern, behavior
 * Isolated) steps ending in ByteLevel; decoder ByteLevel; added tokens with
 * single_word, lstrip, rstrip, normalized and special. Anything else
 * (WordPiece, Unigram, a normalizer, byte_fallback, dropout, subword
 * prefixes, other Split behaviours) is refused with a message naming it.
 * The post_processor is not applied: tok_encode is HF's
 * encode(text, add_special_tokens=False).
 *
 * Split regexes are compiled with PCRE2 (UTF and UCP, JIT when available)
 * exactly as written in the file; HF compiles them with Oniguruma, which
 * agrees on the constructs these tokenizers use.
 *
 * A tokenizer is read-only once loaded (tok_add_tokens aside), so threads may
 * share one.
 */
#ifndef PCG_TOKENIZER_H
#define PCG_TOKENIZER_H

#include <stddef.h>

#include "err.h"

typedef struct tokenizer tokenizer;

/* Reads a tokenizer.json. Returns NULL with err naming the file and the
 * problem (not JSON, unsupported kind, a merge naming an unknown token...). */
tokenizer *tok_load(const char *path, pcg_err *err);

/* The same from a buffer holding the JSON text. */
tokenizer *tok_parse(const char *json, size_t len, pcg_err *err);

/* Frees *t and sets it to NULL. */
void tok_free(tokenizer **t);

/* The tokenizer of a GGUF file's tokenizer.ggml.* metadata (model "gpt2",
 * the byte-level BPE of Llama 3 and LLaSA, with its pre-tokenizer named by
 * tokenizer.ggml.pre), giving the same ids as the tokenizer.json it was
 * converted from. Another model or pre-tokenizer is an error naming it. */
struct gguf_file;
tokenizer *tok_from_gguf(const struct gguf_file *f, pcg_err *err);

/* The tokenizer of a model as a user names it: a tokenizer.json, a GGUF
 * file (its tokenizer.json twin beside it when there is one, else its
 * metadata), or a model directory (its tokenizer.json). */
tokenizer *tok_open(const char *path, pcg_err *err);

/* Encodes len bytes of UTF-8 text (NUL bytes allowed) as HF
 * encode(text, add_special_tokens=False): added tokens are matched as whole
 * strings first, then each run between them is pre-tokenized and BPE'd.
 * On success *ids (malloc'd, caller frees; NULL when *n is 0) holds *n ids.
 * Invalid UTF-8 fails with the byte offset of the first bad byte. */
int tok_encode(const tokenizer *t, const char *text, size_t len, int **ids, size_t *n,
	       pcg_err *err);

/* Decodes ids as HF decode(ids, skip_special_tokens): the ByteLevel decoder,
 * with byte sequences that are not UTF-8 replaced by U+FFFD as Rust's
 * String::from_utf8_lossy does. Returns a malloc'd NUL-terminated string
 * (the caller frees; *len, when not NULL, is its length, which may include
 * NUL bytes) or NULL with err naming an id that is not in the vocabulary. */
char *tok_decode(const tokenizer *t, const int *ids, size_t n, int skip_special, size_t *len,
		 pcg_err *err);

/* The id of a token string (added tokens first, then the BPE vocabulary),
 * or -1. */
int tok_token_id(const tokenizer *t, const char *s, size_t len);

/* The string of an id (borrowed, valid while t lives, not NUL-terminated:
 * *len is its length), or NULL when no token has that id. */
const char *tok_token_str(const tokenizer *t, int id, size_t *len);

/* 1 + the highest id (HF's len(tokenizer) when ids are contiguous). */
int tok_vocab_size(const tokenizer *t);

/* Whether id is an added token marked special. */
int tok_is_special(const tokenizer *t, int id);

/* Adds tokens the way HF add_tokens(["..."]) does: non-special,
 * normalized, no stripping; a string already in the vocabulary keeps its id,
 * an empty one is ignored, a new one gets the next id. Returns how many were
 * added or -1 (out of memory, invalid UTF-8). Each call rebuilds the
 * added-token trie, as HF does, so add many tokens in one call. Not
 * thread-safe. */
int tok_add_tokens(tokenizer *t, const char *const *tokens, size_t n, pcg_err *err);

/* Checks that s[0..len) is UTF-8 as Rust's str requires (no overlong forms,
 * no surrogates, nothing above U+10FFFF). Returns 0, or -1 with err naming
 * the byte offset of the first bad byte. */
int tok_check_utf8(const char *s, size_t len, pcg_err *err);

#endif
