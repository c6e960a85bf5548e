/* split.h: a long input cut into pieces the pipeline speaks one after
 * another (one synth request each). A piece holds at most max_chars
 * characters (code points); it ends at the last sentence end that fits
 * (".", "!", "?" or ";" and the closing quotes or brackets after it,
 * followed by white space, or a newline), else at the last comma or colon
 * that fits, else at the last white space, else after max_chars characters.
 * Short sentences thus share a piece: fewer requests, fewer seams. Pieces
 * are trimmed of white space and never empty.
 */
#ifndef PCG_HTTPD_SPLIT_H
#define PCG_HTTPD_SPLIT_H

#include <stddef.h>

typedef struct split_piece {
	size_t off, len; /* bytes of the text */
} split_piece;

/* Splits text (UTF-8, NUL-terminated) into at most cap pieces written to
 * out, in order. max_chars >= 1. Returns the number of pieces (0: the text
 * is only white space), or -1 when more than cap would be needed (cap =
 * the text's characters + 1 is always enough). */
int split_text(const char *text, int max_chars, split_piece *out, int cap);

/* The characters (code points) of s[0..len): bytes that do not continue a
 * UTF-8 sequence. */
size_t split_chars(const char *s, size_t len);

#endif
