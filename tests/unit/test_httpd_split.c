/* test_httpd_split.c: pcg-httpd's cut of a long input into pieces
 * (pcg-httpd/split.h): sentence ends first, then commas, then spaces, then
 * a hard cut; characters counted as code points and never split; nothing
 * lost; and on random texts (fixed seed) every piece within the limit,
 * trimmed, in order, the text's non-space bytes all kept. */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "../../pcg-httpd/split.c"

static split_piece pc[4096];

/* Splits and joins the pieces with '|'. */
static const char *cut(const char *text, int max, int *n)
{
	static char out[8192];
	size_t o = 0;
	*n = split_text(text, max, pc, 4096);
	out[0] = '\0';
	for (int i = 0; i < *n; i++) {
		o += (size_t)snprintf(out + o, sizeof out - o, "%s%.*s", i ? "|" : "", (int)pc[i].len,
				      text + pc[i].off);
	}
	return out;
}

static void same_cut(const char *text, int max, const char *want)
{
	int n;
	const char *got = cut(text, max, &n);
	CHECKF(!strcmp(got, want), "max %d: got '%s', want '%s'", max, got, want);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next(void)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return (uint32_t)(rng >> 11);
}

int main(void)
{
	int n;

	same_cut("Hello.", 300, "Hello.");
	same_cut("  Hello there.  \n", 300, "Hello there.");
	cut(" \t\n ", 300, &n);
	CHECK(n == 0);
	cut("", 300, &n);
	CHECK(n == 0);
	/* short sentences share a piece; a piece ends at the last sentence end
	 * that fits */
	same_cut("One two. Three four. Five six.", 300, "One two. Three four. Five six.");
	same_cut("One two. Three four. Five six.", 22, "One two. Three four.|Five six.");
	same_cut("Is it? Yes! Go; now.", 12, "Is it? Yes!|Go; now.");
	/* a newline ends a sentence */
	same_cut("first line\nsecond line here", 20, "first line|second line here");
	/* closing quotes and brackets stay with their sentence */
	same_cut("He said \"stop.\" Then he went home.", 20, "He said \"stop.\"|Then he went home.");
	same_cut("(As it was.) And so on and on.", 17, "(As it was.)|And so on and on.");
	/* no sentence end: a comma, then a space, then a hard cut */
	same_cut("the ox, the sheep and the goat", 20, "the ox,|the sheep and the|goat");
	same_cut("abcdefghij", 4, "abcd|efgh|ij");
	/* "3.14" and "e.g." inside words are no sentence ends */
	same_cut("pi is 3.14 or so and more", 12, "pi is 3.14|or so and|more");
	/* a sentence ending right at the window's end */
	same_cut("Abc def. Ghi", 8, "Abc def.|Ghi");
	/* UTF-8: characters are counted, never split */
	same_cut("\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9", 2,
		 "\xc3\xa9\xc3\xa9|\xc3\xa9\xc3\xa9|\xc3\xa9");
	same_cut("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 ok", 6,
		 "caf\xc3\xa9 \xe2\x82\xac|\xf0\x9f\x98\x80 ok");
	CHECK(split_chars("caf\xc3\xa9", 5) == 4);
	/* too few slots */
	CHECK(split_text("a b c d", 1, pc, 3) == -1);

	/* random texts: the invariants */
	static const char *const atoms[] = { "a", "b", "word", " ", " ", "  ", ".", ",", "!", "?",
					     ";", ":", "\n", "\"", ")", "\xc3\xa9", "\xe2\x82\xac",
					     "\xf0\x9f\x98\x80", "\t" };
	char text[2048];
	int bad = 0;
	for (int trial = 0; trial < 3000 && !bad; trial++) {
		size_t len = 0;
		const int atoms_n = (int)(sizeof atoms / sizeof *atoms);
		const int k = (int)(next() % 300);
		for (int i = 0; i < k && len + 8 < sizeof text; i++) {
			const char *a = atoms[next() % (unsigned)atoms_n];
			memcpy(text + len, a, strlen(a));
			len += strlen(a);
		}
		text[len] = '\0';
		const int max = 1 + (int)(next() % 40);
		const int cap = (int)split_chars(text, len) + 1;
		n = split_text(text, max, pc, cap);
		if (n < 0) {
			bad = 1;
			CHECKF(0, "trial %d: -1 with cap %d", trial, cap);
			break;
		}
		size_t prev_end = 0, kept = 0;
		for (int i = 0; i < n; i++) {
			const char *p = text + pc[i].off;
			const size_t l = pc[i].len;
			if (l == 0 || split_chars(p, l) > (size_t)max || pc[i].off < prev_end ||
			    is_space((unsigned char)p[0]) || is_space((unsigned char)p[l - 1]) ||
			    is_cont((unsigned char)p[0]) ||
			    (pc[i].off + l < len && is_cont((unsigned char)p[l]))) {
				bad = 1;
				CHECKF(0, "trial %d, max %d: piece %d '%.*s' breaks an invariant", trial,
				       max, i, (int)l, p);
				break;
			}
			/* nothing between pieces but white space */
			for (size_t j = prev_end; j < pc[i].off; j++)
				bad |= !is_space((unsigned char)text[j]);
			for (size_t j = 0; j < l; j++)
				kept += !is_space((unsigned char)p[j]);
			prev_end = pc[i].off + l;
		}
		size_t all = 0;
		for (size_t j = 0; j < len; j++)
			all += !is_space((unsigned char)text[j]);
		CHECKF(!bad && kept == all, "trial %d: %zu of %zu non-space bytes kept", trial, kept,
		       all);
		if (kept != all)
			bad = 1;
	}
	return check_done("test_httpd_split");
}
