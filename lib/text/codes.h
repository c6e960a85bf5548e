/* codes.h: speech codes as they arrive from a file, a pipe or another
 * program: text (decimal integers separated by whitespace or commas) or raw
 * little-endian int32, optionally LLaSA token ids to be turned into codes.
 * The input is untrusted: every error names the position (0-based index of
 * the value) and what is wrong with it.
 */
#ifndef PCG_CODES_H
#define PCG_CODES_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "err.h"

typedef enum codes_format {
	CODES_TEXT,
	CODES_I32, /* little-endian int32, no header */
} codes_format;

/* LLaSA's vocabulary (research note section 1.6): <|s_0|> is id 128264, so
 * code = id - 128264 for ids in [128264, 128264 + 65536); 128261 is
 * <|SPEECH_GENERATION_END|>. */
#define CODES_LLASA_OFFSET 128264
#define CODES_LLASA_END 128261

/* More values than this in one input is an error (about 93 hours of audio
 * at 50 codes per second), so a hostile input cannot ask for unbounded memory. */
#define CODES_MAX (16 << 20)

/* Parses buf[0..len) into a malloc'd array *out of *n values (the caller
 * frees it; *out is NULL when *n is 0). Text: each value an optionally
 * signed decimal integer within int32. I32: len must be a multiple of 4.
 * Returns 0, or -1 with err naming the position and the value. */
int codes_parse(const void *buf, size_t len, codes_format fmt, int32_t **out, size_t *n,
		pcg_err *err);

/* Reads all of f (a file or a pipe) and parses it as codes_parse does. */
int codes_read(FILE *f, codes_format fmt, int32_t **out, size_t *n, pcg_err *err);

/* LLaSA ids to codes, in place: id - offset for ids in [offset, offset +
 * count). One end_id as the last value is dropped (generation stopped there);
 * end_id < 0: none. Any other id is an error naming the position (the
 * values before it are converted already). */
int codes_from_ids(int32_t *v, size_t *n, int32_t offset, int32_t count, int32_t end_id,
		   pcg_err *err);

/* Every value in [0, count); the error names the first position that is not. */
int codes_check(const int32_t *v, size_t n, int64_t count, pcg_err *err);

#endif
