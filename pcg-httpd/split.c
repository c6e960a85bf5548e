/* split.c: a long input cut at sentence ends into pieces (see split.h). */
#include "split.h"

#include <string.h>

static int is_space(unsigned char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static int is_cont(unsigned char c)
{
	return (c & 0xc0) == 0x80;
}

size_t split_chars(const char *s, size_t len)
{
	size_t n = 0;
	for (size_t i = 0; i < len; i++)
		n += !is_cont((unsigned char)s[i]);
	return n;
}

/* What kind of cut the text allows right after byte i (s[i] is its last
 * byte): 3 a sentence end, 2 a comma or colon, 1 white space follows, 0
 * none. end is the length of the text. */
static int cut_kind(const char *s, size_t i, size_t end)
{
	const unsigned char c = (unsigned char)s[i];
	const int next_space = i + 1 >= end || is_space((unsigned char)s[i + 1]);

	if (c == '\n')
		return 3;
	if (!next_space)
		return 0;
	/* a sentence mark, then closing quotes or brackets */
	size_t j = i;
	while (j > 0 && strchr("\"')]", s[j]) != NULL)
		j--;
	if (strchr(".!?;", s[j]) != NULL && s[j] != '\0')
		return 3;
	if (c == ',' || c == ':')
		return 2;
	return 1;
}

int split_text(const char *text, int max_chars, split_piece *out, int cap)
{
	const size_t end = strlen(text);
	size_t at = 0;
	int n = 0;

	if (max_chars < 1)
		max_chars = 1;
	for (;;) {
		while (at < end && is_space((unsigned char)text[at]))
			at++;
		if (at >= end)
			return n;
		/* the window: up to max_chars characters from at */
		size_t w = at, chars = 0;
		while (w < end && chars < (size_t)max_chars) {
			w++;
			while (w < end && is_cont((unsigned char)text[w]))
				w++;
			chars++;
		}
		size_t cut = w; /* exclusive */
		if (w < end) {
			/* the best cut in the window: the last of the best kind */
			int best = 0;
			size_t best_at = w;
			for (size_t i = at; i < w; i++) {
				if (i + 1 < end && is_cont((unsigned char)text[i + 1]))
					continue; /* not the last byte of its character */
				int k = cut_kind(text, i, end);
				if (k > 0 && k >= best)
					best = k, best_at = i + 1;
			}
			/* white space right after the window is a cut too */
			if (is_space((unsigned char)text[w]) &&
			    cut_kind(text, w - 1, end) >= best)
				best = cut_kind(text, w - 1, end), best_at = w;
			if (best > 0)
				cut = best_at;
		}
		size_t e = cut;
		while (e > at && is_space((unsigned char)text[e - 1]))
			e--;
		if (e > at) {
			if (n >= cap)
				return -1;
			out[n].off = at;
			out[n].len = e - at;
			n++;
		}
		at = cut;
	}
}
