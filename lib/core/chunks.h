/* chunks.h: where the audio's chunks end: the one schedule the verifier,
 * codec-decode (streamed and offline) and the wire share.
 *
 * Codes are decoded in chunks whose boundaries depend on the count of codes
 * alone, so that an utterance's audio is the same however its codes arrive.
 * Chunks are `chunk` codes, except at the start when `first` is between 1
 * and chunk - 1: the first chunk is `first` codes and each next one twice
 * the one before, up to `chunk` (first 5, chunk 25: 5, 10, 20, 25, 25, ...),
 * so that the first audio waits for a few codes, not for a whole chunk.
 * first 0 (or equal to chunk) gives chunks of `chunk` from the start.
 */
#ifndef PCG_CHUNKS_H
#define PCG_CHUNKS_H

#include "err.h"

/* The end (exclusive) of the chunk that starts at code s, for chunk >= 1
 * and s a chunk's start (0 or an end this returned): s + its size, not cut
 * to the utterance's length (the caller cuts). */
int pcg_chunk_end(int s, int chunk, int first);

/* first against chunk: 0 to chunk (chunk 0, the whole utterance at once:
 * 0 alone). Returns 0, or -1 with err saying what is wrong with first's
 * value, without naming it (the caller does: a flag, a field). */
int pcg_chunk_check(int chunk, int first, pcg_err *err);

#endif
