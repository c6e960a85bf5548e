/* prompts.h: cloning prompts encoded once. A server (the verifier) is sent
 * the bytes of an audio file as a LLaSA cloning prompt; this turns them into
 * X-codec2 codes with the encoder (xc2enc.h, loaded on first use) and keeps
 * the codes by the bytes' SHA-256 (libsodium), so a voice that comes back
 * (the same file, from any client) is not encoded again. The least recently
 * used entry goes when the cache is full. Thread-safe: encodings run one at
 * a time (each holds the encoder's work space), lookups do not wait for
 * them.
 */
#ifndef PCG_PROMPTS_H
#define PCG_PROMPTS_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "err.h"

#define PCG_PROMPT_MAX_SECONDS 30.0 /* longer prompts are refused: LLaSA's context */

typedef struct pcg_prompts pcg_prompts;

/* A cache of up to capacity prompts, encoding with the X-codec2 checkpoint
 * at encoder (model.safetensors or its directory; its Conformer in dtype). */
pcg_prompts *pcg_prompts_new(const char *encoder, pcg_dtype dtype, int capacity, pcg_err *err);
void pcg_prompts_free(pcg_prompts **p);

/* The codes of the audio file image audio[0..len) into a malloc'd *codes
 * (*n of them; the caller frees); *hit: 1 when they were cached. name
 * prefixes errors (a file libsndfile cannot read, a prompt over the limit,
 * the encoder's failures). Returns 0 or -1. */
int pcg_prompts_codes(pcg_prompts *p, const void *audio, size_t len, const char *name,
		      int32_t **codes, size_t *n, int *hit, pcg_err *err);

#endif
